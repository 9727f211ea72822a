/* libgoblin/core/dtype.c - dtype names and sizes. */
#include <string.h>
#include <goblin/dtype.h>

size_t goblin_dtype_size(goblin_dtype dt) {
    switch (dt) {
#define GOBLIN__DT_SIZE(name, value, str, size) case GOBLIN_DTYPE_##name: return size;
        GOBLIN_DTYPE_MAP(GOBLIN__DT_SIZE)
#undef GOBLIN__DT_SIZE
    default: return 0;
    }
}

const char *goblin_dtype_name(goblin_dtype dt) {
    switch (dt) {
#define GOBLIN__DT_NAME(name, value, str, size) case GOBLIN_DTYPE_##name: return str;
        GOBLIN_DTYPE_MAP(GOBLIN__DT_NAME)
#undef GOBLIN__DT_NAME
    default: return "invalid";
    }
}

goblin_err goblin_dtype_from_name(const char *name, goblin_dtype *out) {
    if (!name || !out) return GOBLIN_EINVAL;
#define GOBLIN__DT_PARSE(nm, value, str, size)                                           \
    if (strcmp(name, str) == 0) {                                                         \
        *out = GOBLIN_DTYPE_##nm;                                                         \
        return GOBLIN_OK;                                                                 \
    }
    GOBLIN_DTYPE_MAP(GOBLIN__DT_PARSE)
#undef GOBLIN__DT_PARSE
    return GOBLIN_EINVAL;
}

bool goblin_dtype_is_float(goblin_dtype dt) {
    return (unsigned)dt < GOBLIN_DTYPE_COUNT && (GOBLIN_DTMASK(dt) & GOBLIN_DTMASK_FLOAT);
}

bool goblin_dtype_is_int(goblin_dtype dt) {
    return (unsigned)dt < GOBLIN_DTYPE_COUNT && (GOBLIN_DTMASK(dt) & GOBLIN_DTMASK_INT);
}
