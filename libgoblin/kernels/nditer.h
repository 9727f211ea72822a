/* libgoblin/kernels/nditer.h - strided and broadcast iteration over tensors. Header-only. */
#ifndef GOBLIN__KERNELS_NDITER_H
#define GOBLIN__KERNELS_NDITER_H

#include <goblin/tensor.h>

/* ---- strided / broadcast iteration -------------------------------------- */

/* Strides of @p t aligned to an output of rank @p out_rank and shape @p out_shape:
 * leading missing dims and dims of size 1 that broadcast get stride 0. */
static inline void goblin__bcast_strides(const goblin_tensor *t, int32_t out_rank,
                                         const int64_t *out_shape, int64_t *strides) {
    int32_t off = out_rank - t->rank;
    for (int32_t d = 0; d < out_rank; d++) {
        int32_t td = d - off;
        if (td < 0 || (t->shape[td] == 1 && out_shape[d] != 1)) strides[d] = 0;
        else strides[d] = t->strides[td];
    }
}

/* An N-d counter over a shape, advancing up to 4 element offsets (one per operand)
 * with per-operand strides. Usage:
 *   goblin__nditer it; goblin__nditer_init(&it, rank, shape, 2, strides_tab);
 *   for (int64_t n = 0; n < numel; n++) { use it.off[0], it.off[1]; goblin__nditer_next(&it); } */
typedef struct goblin__nditer {
    int32_t rank, nops;
    int64_t shape[GOBLIN_MAX_RANK];
    int64_t idx[GOBLIN_MAX_RANK];
    int64_t strides[4][GOBLIN_MAX_RANK];
    int64_t off[4];
} goblin__nditer;

static inline void goblin__nditer_init(goblin__nditer *it, int32_t rank, const int64_t *shape,
                                       int32_t nops, int64_t (*strides)[GOBLIN_MAX_RANK]) {
    it->rank = rank;
    it->nops = nops;
    for (int32_t d = 0; d < rank; d++) {
        it->shape[d] = shape[d];
        it->idx[d] = 0;
    }
    for (int32_t o = 0; o < nops; o++) {
        it->off[o] = 0;
        for (int32_t d = 0; d < rank; d++) it->strides[o][d] = strides[o][d];
    }
}

/* Position the iterator at linear (row-major) element index @p linear. */
static inline void goblin__nditer_seek(goblin__nditer *it, int64_t linear) {
    for (int32_t o = 0; o < it->nops; o++) it->off[o] = 0;
    for (int32_t d = it->rank - 1; d >= 0; d--) {
        int64_t n = it->shape[d] ? it->shape[d] : 1;
        it->idx[d] = linear % n;
        linear /= n;
        for (int32_t o = 0; o < it->nops; o++) it->off[o] += it->idx[d] * it->strides[o][d];
    }
}

static inline void goblin__nditer_next(goblin__nditer *it) {
    for (int32_t d = it->rank - 1; d >= 0; d--) {
        it->idx[d]++;
        for (int32_t o = 0; o < it->nops; o++) it->off[o] += it->strides[o][d];
        if (it->idx[d] < it->shape[d]) return;
        for (int32_t o = 0; o < it->nops; o++) it->off[o] -= it->strides[o][d] * it->shape[d];
        it->idx[d] = 0;
    }
}

static inline int64_t goblin__numel(const goblin_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->rank; d++) n *= t->shape[d];
    return n;
}

#endif
