/* libgoblin/node/index.c - a small hash map from a 64-bit key (a pipe id, a session id,
 * the leading bits of an identity) to a table slot, so that the node finds the peer of a
 * message, or the record of an identity, without a pass over its tables. Open
 * addressing with linear probing and tombstones; it grows at 1/2 load. */
#include "node_impl.h"

#include "base/alloc.h"

#define EMPTY (-1)
#define TOMB (-2)

static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
}

static bool rehash(goblin__node_index *x, uint32_t cap) {
    uint64_t *keys = goblin__calloc(cap, sizeof *keys);
    int32_t *vals = goblin__calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        goblin__free(keys);
        goblin__free(vals);
        return false;
    }
    for (uint32_t i = 0; i < cap; i++) vals[i] = EMPTY;
    for (uint32_t i = 0; i < x->cap; i++) {
        if (x->vals[i] < 0) continue;
        uint32_t h = (uint32_t)mix(x->keys[i]) & (cap - 1);
        while (vals[h] != EMPTY) h = (h + 1) & (cap - 1);
        keys[h] = x->keys[i];
        vals[h] = x->vals[i];
    }
    goblin__free(x->keys);
    goblin__free(x->vals);
    x->keys = keys;
    x->vals = vals;
    x->cap = cap;
    x->tombs = 0;
    return true;
}

bool goblin__node_index_put(goblin__node_index *x, uint64_t key, int32_t val) {
    if (val < 0) return false;
    if (2 * (x->used + x->tombs + 1) > x->cap) {
        uint32_t cap = x->cap ? x->cap : 16;
        while (4 * (x->used + 1) > cap && cap < (1u << 30)) cap *= 2; /* 1/4 after a rehash */
        if (!rehash(x, cap)) return false;
    }
    uint32_t m = x->cap - 1, h = (uint32_t)mix(key) & m;
    int32_t tomb = -1;
    while (x->vals[h] != EMPTY) {
        if (x->vals[h] >= 0 && x->keys[h] == key) {
            x->vals[h] = val;
            return true;
        }
        if (x->vals[h] == TOMB && tomb < 0) tomb = (int32_t)h;
        h = (h + 1) & m;
    }
    if (tomb >= 0) {
        h = (uint32_t)tomb;
        x->tombs--;
    }
    x->keys[h] = key;
    x->vals[h] = val;
    x->used++;
    return true;
}

int32_t goblin__node_index_get(const goblin__node_index *x, uint64_t key) {
    if (!x->cap) return -1;
    uint32_t m = x->cap - 1, h = (uint32_t)mix(key) & m;
    while (x->vals[h] != EMPTY) {
        if (x->vals[h] >= 0 && x->keys[h] == key) return x->vals[h];
        h = (h + 1) & m;
    }
    return -1;
}

void goblin__node_index_del(goblin__node_index *x, uint64_t key) {
    if (!x->cap) return;
    uint32_t m = x->cap - 1, h = (uint32_t)mix(key) & m;
    while (x->vals[h] != EMPTY) {
        if (x->vals[h] >= 0 && x->keys[h] == key) {
            x->vals[h] = TOMB;
            x->used--;
            x->tombs++;
            return;
        }
        h = (h + 1) & m;
    }
}

void goblin__node_index_free(goblin__node_index *x) {
    goblin__free(x->keys);
    goblin__free(x->vals);
    *x = (goblin__node_index){0};
}
