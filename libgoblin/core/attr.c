/* libgoblin/core/attr.c - node attributes: constructors, names, kinds, lookup. */
#include <string.h>
#include "node.h"

goblin_attr goblin_attr_int(goblin_attr_key key, int64_t value) {
    goblin_attr a;
    memset(&a, 0, sizeof a);
    a.key = key;
    a.count = 1;
    a.v.i = value;
    return a;
}

goblin_attr goblin_attr_float(goblin_attr_key key, double value) {
    goblin_attr a;
    memset(&a, 0, sizeof a);
    a.key = key;
    a.count = 1;
    a.v.f = value;
    return a;
}

goblin_attr goblin_attr_ints(goblin_attr_key key, const int64_t *values, int32_t n) {
    goblin_attr a;
    memset(&a, 0, sizeof a);
    a.key = key;
    if (n < 0 || n > GOBLIN_MAX_ATTR_INTS || (n > 0 && !values)) {
        a.count = -1;
        return a;
    }
    a.count = n;
    for (int32_t i = 0; i < n; i++) a.v.ints[i] = values[i];
    return a;
}

const char *goblin_attr_name(goblin_attr_key key) {
    switch (key) {
#define GOBLIN__ATTR_NAME(name, value, str, kind) case GOBLIN_ATTR_##name: return str;
        GOBLIN_ATTR_MAP(GOBLIN__ATTR_NAME)
#undef GOBLIN__ATTR_NAME
    default: return NULL;
    }
}

goblin_attr_kind goblin_attr_key_kind(goblin_attr_key key) {
    switch (key) {
#define GOBLIN__ATTR_KIND(name, value, str, kind) case GOBLIN_ATTR_##name: return GOBLIN_ATTR_KIND_##kind;
        GOBLIN_ATTR_MAP(GOBLIN__ATTR_KIND)
#undef GOBLIN__ATTR_KIND
    default: return GOBLIN_ATTR_KIND_COUNT;
    }
}

const goblin_attr *goblin__attr_find(const goblin__node *n, goblin_attr_key key) {
    for (int32_t i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].key == key) return &n->attrs[i];
    return NULL;
}

int64_t goblin__attr_i(const goblin__node *n, goblin_attr_key key, int64_t def) {
    const goblin_attr *a = goblin__attr_find(n, key);
    return a ? a->v.i : def;
}

double goblin__attr_f(const goblin__node *n, goblin_attr_key key, double def) {
    const goblin_attr *a = goblin__attr_find(n, key);
    return a ? a->v.f : def;
}

const int64_t *goblin__attr_ints(const goblin__node *n, goblin_attr_key key, int32_t *count) {
    const goblin_attr *a = goblin__attr_find(n, key);
    *count = a ? a->count : 0;
    return a ? a->v.ints : NULL;
}

/* ---- inference helpers --------------------------------------------------- */

