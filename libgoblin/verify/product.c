/* libgoblin/verify/product.c - a product node's claimed value checked by Freivalds'
 * algorithm (product.h): the node's batch of matmuls as views of its operands, each
 * checked under goblin_verify_matmul's contract-derived accept levels. */
#include "product.h"

#include <string.h>

#include "base/alloc.h"

static bool float_dt(goblin_dtype d) { return d == GOBLIN_DTYPE_F32 || d == GOBLIN_DTYPE_F64; }

bool goblin__product_checkable(const goblin__node *n, const goblin__node *a, const goblin__node *b,
                               const goblin__node *c) {
    if (!n || !a || !b || n->op != GOBLIN_OP_MATMUL || n->n_inputs != (c ? 3 : 2)) return false;
    if (!float_dt(n->dtype) || a->dtype != n->dtype || b->dtype != n->dtype) return false;
    if (a->rank < 2 || b->rank < 2 || n->rank < 2) return false;
    if (goblin__attr_f(n, GOBLIN_ATTR_ALPHA, 1.0) != 1.0) return false;
    if (!c) return true;
    if (c->dtype != n->dtype || goblin__attr_f(n, GOBLIN_ATTR_BETA, 1.0) != 1.0 || c->rank < 1) return false;
    if (c->shape[c->rank - 1] != n->shape[n->rank - 1]) return false;
    for (int32_t d = 0; d < c->rank - 1; d++)
        if (c->shape[d] != 1) return false;
    return true;
}

/* [a | 1] (rows x (K + 1)) and [b ; c] ((K + 1) x n) of 2-D views @p a, @p b and the bias
 * row @p c (n elements, stride cs), contiguous, in new buffers. */
static goblin_err with_bias(const goblin_tensor *a, const goblin_tensor *b, const char *c, int64_t cs,
                            goblin_tensor *a2, goblin_tensor *b2, void **abuf, void **bbuf) {
    int64_t m = a->shape[0], K = a->shape[1], n = b->shape[1];
    size_t es = goblin_dtype_size(a->dtype);
    *abuf = goblin__alloc((size_t)(m * (K + 1)) * es + 1);
    *bbuf = goblin__alloc((size_t)((K + 1) * n) * es + 1);
    if (!*abuf || !*bbuf) {
        goblin__free(*abuf);
        goblin__free(*bbuf);
        *abuf = *bbuf = NULL;
        return GOBLIN_ENOMEM;
    }
    bool f32 = a->dtype == GOBLIN_DTYPE_F32;
    const char *ad = a->data, *bd = b->data;
    for (int64_t i = 0; i < m; i++)
        for (int64_t k = 0; k <= K; k++) {
            size_t dst = (size_t)(i * (K + 1) + k);
            if (f32) ((float *)*abuf)[dst] = k < K ? *(const float *)(ad + (i * a->strides[0] + k * a->strides[1]) * 4) : 1.0f;
            else ((double *)*abuf)[dst] = k < K ? *(const double *)(ad + (i * a->strides[0] + k * a->strides[1]) * 8) : 1.0;
        }
    for (int64_t k = 0; k <= K; k++)
        for (int64_t j = 0; j < n; j++) {
            size_t dst = (size_t)(k * n + j);
            const char *src = k < K ? bd + (k * b->strides[0] + j * b->strides[1]) * (int64_t)es : c + j * cs * (int64_t)es;
            memcpy((char *)*bbuf + dst * es, src, es);
        }
    int64_t sa[2] = {m, K + 1}, sb[2] = {K + 1, n};
    goblin_tensor_init(a2, a->dtype, 2, sa, *abuf);
    goblin_tensor_init(b2, b->dtype, 2, sb, *bbuf);
    return GOBLIN_OK;
}

/* goblin_verify_matmul of a . b (+ the bias row @p c, or NULL) against @p cv. */
static goblin_err check_one(const goblin_tensor *av, const goblin_tensor *bv, const goblin_tensor *c,
                            const goblin_tensor *cv, const goblin_freivalds_params *fp, goblin_verdict *out) {
    if (!c) return goblin_verify_matmul(av, bv, cv, fp, out);
    goblin_tensor a2, b2;
    void *ab = NULL, *bb = NULL;
    goblin_err e = with_bias(av, bv, c->data, c->strides[c->rank - 1], &a2, &b2, &ab, &bb);
    if (!e) e = goblin_verify_matmul(&a2, &b2, cv, fp, out);
    goblin__free(ab);
    goblin__free(bb);
    return e;
}

double goblin__product_macs(const goblin__node *n, const goblin__node *a) {
    bool ta = goblin__attr_i(n, GOBLIN_ATTR_TRANS_A, 0) != 0;
    double k = (double)(ta ? a->shape[a->rank - 2] : a->shape[a->rank - 1]), out = 1;
    for (int32_t d = 0; d < n->rank; d++) out *= (double)n->shape[d];
    return out * k;
}

/* Operand @p t's matrix for output batch index @p idx (the output's @p br batch dims,
 * broadcast from t's own batch dims, aligned to the right), transposed when @p tr. */
static goblin_tensor matrix_view(const goblin_tensor *t, const int64_t *idx, int32_t br, bool tr) {
    goblin_tensor v;
    memset(&v, 0, sizeof v);
    v.dtype = t->dtype;
    v.rank = 2;
    int32_t r = t->rank, tb = r - 2;
    int64_t off = 0;
    for (int32_t d = 0; d < tb; d++) {
        int32_t od = br - tb + d;
        if (od >= 0 && t->shape[d] != 1) off += idx[od] * t->strides[d];
    }
    v.shape[0] = t->shape[tr ? r - 1 : r - 2];
    v.shape[1] = t->shape[tr ? r - 2 : r - 1];
    v.strides[0] = t->strides[tr ? r - 1 : r - 2];
    v.strides[1] = t->strides[tr ? r - 2 : r - 1];
    v.data = (char *)t->data + off * (int64_t)goblin_dtype_size(t->dtype);
    return v;
}

static void merge_verdict(goblin_verdict *acc, const goblin_verdict *v, bool first) {
    if (first) {
        *acc = *v;
        return;
    }
    if (v->kind > acc->kind || (v->kind == acc->kind && v->worst_ratio > acc->worst_ratio)) {
        acc->kind = v->kind;
        acc->reason = v->reason;
        acc->worst_index = v->worst_index;
        acc->worst_ratio = v->worst_ratio;
    }
    acc->checked += v->checked;
    acc->above_tight += v->above_tight;
    acc->above_bound += v->above_bound;
    acc->nonfinite += v->nonfinite;
    acc->unchecked += v->unchecked;
}

goblin_err goblin__product_check(const goblin__node *n, const goblin_tensor *a, const goblin_tensor *b,
                                 const goblin_tensor *c, const goblin_tensor *claimed, uint64_t seed,
                                 goblin_verdict *out) {
    if (!n || !a || !b || !claimed || !out || !a->data || !b->data || n->op != GOBLIN_OP_MATMUL ||
        n->n_inputs != (c ? 3 : 2) || (c && !c->data))
        return GOBLIN_EINVAL;
    memset(out, 0, sizeof *out);
    out->worst_index = -1;
    if (claimed->dtype != n->dtype || claimed->rank != n->rank ||
        memcmp(claimed->shape, n->shape, sizeof(int64_t) * (size_t)n->rank) != 0 || !claimed->data ||
        !goblin_tensor_is_contiguous(claimed)) {
        out->kind = GOBLIN_VERDICT_REJECT;
        out->reason = claimed->dtype != n->dtype ? GOBLIN_VERIFY_DTYPE : GOBLIN_VERIFY_SHAPE;
        return GOBLIN_OK;
    }
    bool ta = goblin__attr_i(n, GOBLIN_ATTR_TRANS_A, 0) != 0, tb = goblin__attr_i(n, GOBLIN_ATTR_TRANS_B, 0) != 0;
    int32_t br = n->rank - 2;
    int64_t items = 1, bitems = 1;
    for (int32_t d = 0; d < br; d++) items *= n->shape[d];
    for (int32_t d = 0; d < b->rank - 2; d++) bitems *= b->shape[d];
    int64_t m = n->shape[br], nc = n->shape[br + 1];
    goblin_freivalds_params fp;
    goblin_freivalds_params_default(&fp);
    /* One check for the whole batch: b shared by every item, a's batch dims the output's
     * and laid out one after another with its rows (a linear layer over [batch..., rows, k]). */
    bool fold = items > 1 && bitems == 1 && !ta && a->rank - 2 == br;
    for (int32_t d = 0; fold && d < br; d++)
        fold = a->shape[d] == n->shape[d] && a->strides[d] == a->strides[d + 1] * a->shape[d + 1];
    if (fold || items <= 1) {
        int64_t zero[GOBLIN_MAX_RANK] = {0};
        goblin_tensor av = matrix_view(a, zero, br, ta), bv = matrix_view(b, zero, br, tb), cv;
        av.shape[0] = items * m;
        memset(&cv, 0, sizeof cv);
        cv.dtype = claimed->dtype;
        cv.rank = 2;
        cv.shape[0] = items * m;
        cv.shape[1] = nc;
        cv.strides[0] = nc;
        cv.strides[1] = 1;
        cv.data = claimed->data;
        fp.seed = seed;
        return check_one(&av, &bv, c, &cv, &fp, out);
    }
    int64_t idx[GOBLIN_MAX_RANK] = {0};
    size_t es = goblin_dtype_size(claimed->dtype);
    for (int64_t it = 0; it < items; it++) {
        goblin_tensor av = matrix_view(a, idx, br, ta), bv = matrix_view(b, idx, br, tb), cv;
        memset(&cv, 0, sizeof cv);
        cv.dtype = claimed->dtype;
        cv.rank = 2;
        cv.shape[0] = m;
        cv.shape[1] = nc;
        cv.strides[0] = nc;
        cv.strides[1] = 1;
        cv.data = (char *)claimed->data + (size_t)(it * m * nc) * es;
        fp.seed = seed ^ ((uint64_t)it * 0x9E3779B97F4A7C15ull);
        goblin_verdict v;
        goblin_err e = check_one(&av, &bv, c, &cv, &fp, &v);
        if (e) return e;
        if (v.worst_index >= 0) v.worst_index += it * m;
        merge_verdict(out, &v, it == 0);
        for (int32_t d = br - 1; d >= 0; d--) {
            if (++idx[d] < n->shape[d]) break;
            idx[d] = 0;
        }
    }
    return GOBLIN_OK;
}
