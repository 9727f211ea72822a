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

/* The key of a random op's draw (kernels/random.h): SEED, OFFSET, stream = the op. */
static inline goblin__rng_key goblin__rng_of(const goblin__node *n) {
    goblin__rng_key r;
    r.seed = (uint64_t)goblin__attr_i(n, GOBLIN_ATTR_SEED, 0);
    r.offset = (uint64_t)goblin__attr_i(n, GOBLIN_ATTR_OFFSET, 0);
    r.stream = (uint32_t)n->op;
    return r;
}

#endif
