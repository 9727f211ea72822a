/* libgoblin/tensor.c - tensor descriptor helpers. */
#include "graph_impl.h"

goblin_err goblin_tensor_init(goblin_tensor *t, goblin_dtype dt, int32_t rank,
                              const int64_t *shape, void *data) {
    if (!t || rank < 0 || rank > GOBLIN_MAX_RANK || (rank > 0 && !shape) ||
        goblin_dtype_size(dt) == 0)
        return GOBLIN_EINVAL;
    int64_t n;
    for (int32_t d = 0; d < rank; d++)
        if (shape[d] < 0) return GOBLIN_EINVAL;
    goblin_err e = goblin__shape_numel(rank, shape, &n);
    if (e) return e;
    t->dtype = dt;
    t->rank = rank;
    for (int32_t d = 0; d < GOBLIN_MAX_RANK; d++) {
        t->shape[d] = d < rank ? shape[d] : 1;
        t->strides[d] = 0;
    }
    goblin__contig_strides(rank, t->shape, t->strides);
    t->data = data;
    return GOBLIN_OK;
}

int64_t goblin_tensor_numel(const goblin_tensor *t) {
    if (!t) return 0;
    int64_t n = 1;
    for (int32_t d = 0; d < t->rank; d++) n *= t->shape[d];
    return n;
}

bool goblin_tensor_is_contiguous(const goblin_tensor *t) {
    if (!t) return false;
    int64_t expect = 1;
    for (int32_t d = t->rank - 1; d >= 0; d--) {
        if (t->shape[d] == 0) return true;
        if (t->shape[d] != 1 && t->strides[d] != expect) return false;
        expect *= t->shape[d];
    }
    return true;
}
