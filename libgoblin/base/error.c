/* libgoblin/base/error.c - goblin_strerror and goblin_err_name from the X-macro table. */
#include <goblin/error.h>

#include <stdarg.h>
#include <stdio.h>
#include "errf.h"

const char *goblin_strerror(goblin_err err) {
    switch (err) {
#define GOBLIN__ERR_MSG(name, value, msg) case GOBLIN_##name: return msg;
        GOBLIN_ERR_MAP(GOBLIN__ERR_MSG)
#undef GOBLIN__ERR_MSG
    default: return "unknown error";
    }
}

const char *goblin_err_name(goblin_err err) {
    switch (err) {
#define GOBLIN__ERR_NAME(name, value, msg) case GOBLIN_##name: return "GOBLIN_" #name;
        GOBLIN_ERR_MAP(GOBLIN__ERR_NAME)
#undef GOBLIN__ERR_NAME
    default: return "GOBLIN_EUNKNOWN";
    }
}

goblin_err goblin__errf(char *msg, size_t cap, goblin_err e, const char *fmt, ...) {
    if (msg && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, cap, fmt, ap);
        va_end(ap);
    }
    return e;
}

