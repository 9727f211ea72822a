/* libgoblin/verify/policy.c - the names of the verification policies. */
#include <goblin/verify.h>

#include <string.h>

static const char *const g_names[GOBLIN_VERIFY_COUNT] = {
    [GOBLIN_VERIFY_FREIVALDS] = "freivalds",
    [GOBLIN_VERIFY_RECOMPUTE] = "recompute",
    [GOBLIN_VERIFY_UNSAFE_NONE] = "unsafe-none",
    [GOBLIN_VERIFY_SPOT] = "spot",
    [GOBLIN_VERIFY_REPLICATE] = "replicate",
    [GOBLIN_VERIFY_CHECKED] = "checked",
};

const char *goblin_verify_name(goblin_verify v) {
    return (unsigned)v < GOBLIN_VERIFY_COUNT ? g_names[v] : NULL;
}

goblin_err goblin_verify_from_name(const char *name, goblin_verify *out) {
    if (!name || !out) return GOBLIN_EINVAL;
    for (int v = 0; v < GOBLIN_VERIFY_COUNT; v++)
        if (strcmp(name, g_names[v]) == 0) {
            *out = (goblin_verify)v;
            return GOBLIN_OK;
        }
    return GOBLIN_EINVAL;
}
