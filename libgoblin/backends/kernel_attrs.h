/* libgoblin/backends/kernel_attrs.h - how every backend's kernels read the same node
 * attributes: the reduced axes as a bit mask, the key of a random draw. Header-only, C
 * and CUDA C++ (host code). */
#ifndef GOBLIN__KERNEL_ATTRS_H
#define GOBLIN__KERNEL_ATTRS_H

#include "graph/graph_impl.h"
#include "kernels/random.h"

/* AXES as validated by inference, as a mask of dims; absent or empty means all axes. */
static inline uint32_t goblin__axes_mask(const goblin__node *n, int32_t rank) {
    int32_t cnt;
    const int64_t *ax = goblin__attr_ints(n, GOBLIN_ATTR_AXES, &cnt);
    uint32_t all = (1u << rank) - 1u;
    if (!ax || cnt == 0) return all;
    uint32_t m = 0;
    for (int32_t i = 0; i < cnt; i++) {
        int64_t a = ax[i] < 0 ? ax[i] + rank : ax[i];
        if (a >= 0 && a < rank) m |= 1u << a;
    }
    return m;
}

/* AXIS (default @p def, negative counts from the end) as a one-dim mask; 0 if out of range. */
static inline uint32_t goblin__axis_mask(const goblin__node *n, int32_t rank, int64_t def) {
    int64_t a = goblin__attr_i(n, GOBLIN_ATTR_AXIS, def);
    if (a < 0) a += rank;
    return rank > 0 && a >= 0 && a < rank ? 1u << a : 0;
}

/* A DROPOUT's AXIS (default 0) over its value's shape: moved is false when the draws are
 * simply row-major (axis 0, or nothing to move); else goblin__rng_axis_index's terms. */
typedef struct goblin__drop_axis {
    bool moved;
    uint64_t len, inner, rest;
} goblin__drop_axis;

static inline goblin__drop_axis goblin__drop_axis_of(const goblin__node *n, int32_t rank, const int64_t *shape) {
    goblin__drop_axis d;
    d.moved = false;
    d.len = d.inner = d.rest = 1;
    int64_t a = goblin__attr_i(n, GOBLIN_ATTR_AXIS, 0);
    if (a <= 0 || a >= rank || shape[a] <= 1) return d;
    uint64_t outer = 1, inner = 1;
    for (int32_t k = 0; k < rank; k++) {
        if (shape[k] == 0) return d; /* nothing to draw */
        if (k < a) outer *= (uint64_t)shape[k];
        if (k > a) inner *= (uint64_t)shape[k];
    }
    if (outer == 1) return d; /* the dims before it are all 1: row-major already */
    d.moved = true;
    d.len = (uint64_t)shape[a];
    d.inner = inner;
    d.rest = outer * inner;
    return d;
}

/* The draw index of element @p i of a DROPOUT with axis @p d. */
static inline uint64_t goblin__drop_index(const goblin__drop_axis *d, uint64_t i) {
    return d->moved ? goblin__rng_axis_index(i, d->len, d->inner, d->rest) : i;
}

/* The key of a random op's draw (kernels/random.h): SEED, OFFSET, stream = the op. */
static inline goblin__rng_key goblin__rng_of(const goblin__node *n) {
    goblin__rng_key r;
    r.seed = (uint64_t)goblin__attr_i(n, GOBLIN_ATTR_SEED, 0);
    r.offset = (uint64_t)goblin__attr_i(n, GOBLIN_ATTR_OFFSET, 0);
    r.stream = (uint32_t)n->op;
    return r;
}

#endif
