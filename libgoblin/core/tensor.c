/* libgoblin/core/tensor.c - tensor descriptor helpers. */
#include <string.h>
#include "node.h"
#include "kernels/nditer.h"

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

void goblin__tensor_copy(goblin_tensor *dst, const goblin_tensor *src) {
    int64_t n = goblin__numel(src);
    if (n == 0) return;
    size_t es = goblin_dtype_size(src->dtype);
    if (goblin_tensor_is_contiguous(src) && goblin_tensor_is_contiguous(dst)) {
        memcpy(dst->data, src->data, (size_t)n * es);
        return;
    }
    /* rows of the last dim: one memcpy where both are unit-stride, else a typed loop;
     * the outer dims by the iterator */
    int32_t r = src->rank;
    if (r == 0) {
        memcpy(dst->data, src->data, es);
        return;
    }
    int64_t len = src->shape[r - 1], sd = dst->strides[r - 1], ss = src->strides[r - 1];
    int64_t st[2][GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < r - 1; d++) {
        st[0][d] = dst->strides[d];
        st[1][d] = src->strides[d];
    }
    goblin__nditer it;
    goblin__nditer_init(&it, r - 1, src->shape, 2, st);
    char *o = dst->data;
    const char *s = src->data;
    int64_t ie = (int64_t)es;
    for (int64_t row = 0; row < n / len; row++) {
        char *od = o + it.off[0] * ie;
        const char *sr = s + it.off[1] * ie;
        if (sd == 1 && ss == 1) memcpy(od, sr, (size_t)len * es);
        else if (es == 4)
            for (int64_t i = 0; i < len; i++) memcpy(od + i * sd * 4, sr + i * ss * 4, 4);
        else if (es == 8)
            for (int64_t i = 0; i < len; i++) memcpy(od + i * sd * 8, sr + i * ss * 8, 8);
        else
            for (int64_t i = 0; i < len; i++) memcpy(od + i * sd * ie, sr + i * ss * ie, es);
        goblin__nditer_next(&it);
    }
}
