/* libgoblin/verify/conv_check.c - a convolution node's claimed value checked by
 * Freivalds' algorithm (product.h): CONV2D and its two backward ops are matmuls over
 * patches, per group, so each is written as one and judged by goblin_verify_matmul
 * under its accept levels, rigorous bound and element stage (docs/verification.md,
 * "Checked execution", Convolutions).
 *
 * Per group g (Og = O / groups output and Cg = C / groups input channels, Kg = Cg kh kw):
 *   CONV2D           Y'[(n,oh,ow), o] = sum_(c,i,j) X[(n,oh,ow), (c,i,j)] W[o, (c,i,j)] (+ b_o)
 *                    A = the patches of x [N OH OW, Kg] (| 1 with a bias), B = W_g^T (; b_g)
 *   BACKWARD_INPUT   dX'[(n,h,w), c] = sum_(o,i,j) G[(n,h,w), (o,i,j)] W[o, c, i, j]
 *                    A = the transposed patches of grad_out [N H W, Og kh kw] (0 where a tap
 *                    falls between strides or outside), B = W_g as [Og kh kw, Cg]
 *   BACKWARD_WEIGHT  dW[o, (c,i,j)] = sum_(n,oh,ow) grad_out[n, o, oh, ow] X[(n,oh,ow), (c,i,j)]
 *                    A = grad_out_g as [Og, N OH OW], B = the patches of x
 * A vector r over C's columns makes the row check the contraction the brief of this
 * check names: Y r over output channels against one single-channel convolution of x
 * with the contracted weight W^T r (and likewise for the other two). The contract is
 * the matmul's with K the columns of A: conv2d's own (K = Cg kh kw, the bias one more
 * term as in product.c) and, for the backward ops, gamma_(K+2) with K = Og kh kw or
 * N OH OW, at least the ops' own k (the products summed into an element; the taps that
 * do not exist are exact zeros, adding nothing to sum |terms|). */
#include <goblin/verify.h>
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "ops/nn.h"
#include "product.h"

static bool float_dt(goblin_dtype d) { return d == GOBLIN_DTYPE_F32 || d == GOBLIN_DTYPE_F64; }

static bool is_conv(goblin_op op) {
    return op == GOBLIN_OP_CONV2D || op == GOBLIN_OP_CONV2D_BACKWARD_INPUT || op == GOBLIN_OP_CONV2D_BACKWARD_WEIGHT;
}

/* The geometry of conv node @p n from the shapes of its first two operands. */
static bool conv_geom(const goblin__node *n, const int64_t *s0, const int64_t *s1, goblin__conv_geom *g) {
    const int64_t *xs = s0, *ws = s1;
    if (n->op == GOBLIN_OP_CONV2D_BACKWARD_INPUT) xs = n->shape; /* (grad_out, weight) -> x */
    if (n->op == GOBLIN_OP_CONV2D_BACKWARD_WEIGHT) xs = s1, ws = n->shape; /* (grad_out, x) -> w */
    char msg[8];
    return goblin__conv_geom_get(n, xs, ws, g, msg, sizeof msg) == GOBLIN_OK;
}

/* The matmul of group g: A [m, K], B [K, nc]. */
static void mm_dims(goblin_op op, const goblin__conv_geom *g, bool bias, int64_t *m, int64_t *K, int64_t *nc) {
    int64_t og = g->o / g->groups, cg = g->c / g->groups;
    switch (op) {
    case GOBLIN_OP_CONV2D:
        *m = g->n * g->oh * g->ow, *K = cg * g->kh * g->kw + (bias ? 1 : 0), *nc = og;
        break;
    case GOBLIN_OP_CONV2D_BACKWARD_INPUT:
        *m = g->n * g->h * g->w, *K = og * g->kh * g->kw, *nc = cg;
        break;
    default:
        *m = og, *K = g->n * g->oh * g->ow, *nc = cg * g->kh * g->kw;
        break;
    }
}

bool goblin__conv_checkable(const goblin__node *n, const goblin__node *a, const goblin__node *b,
                            const goblin__node *bias) {
    if (!n || !a || !b || !is_conv(n->op) || !float_dt(n->dtype)) return false;
    if (n->n_inputs != (bias ? 3 : 2) || (bias && n->op != GOBLIN_OP_CONV2D)) return false;
    if (a->dtype != n->dtype || b->dtype != n->dtype || a->rank != 4 || b->rank != 4 || n->rank != 4) return false;
    if (bias && (bias->dtype != n->dtype || bias->rank != 1)) return false;
    goblin__conv_geom g;
    if (!conv_geom(n, a->shape, b->shape, &g) || g.groups < 1) return false;
    return true;
}

double goblin__conv_check_bytes(const goblin__node *n, const goblin__node *a, const goblin__node *b,
                                bool bias) {
    goblin__conv_geom g;
    if (!conv_geom(n, a->shape, b->shape, &g) || g.groups < 1) return INFINITY;
    int64_t m, K, nc;
    mm_dims(n->op, &g, bias, &m, &K, &nc);
    /* A, B and C of one group */
    return (double)goblin_dtype_size(n->dtype) * ((double)m * (double)K + (double)K * (double)nc + (double)m * (double)nc);
}

double goblin__conv_macs(const goblin__node *n, const goblin__node *a, const goblin__node *b) {
    goblin__conv_geom g;
    if (!conv_geom(n, a->shape, b->shape, &g) || g.groups < 1) return 0;
    int64_t m, K, nc;
    mm_dims(n->op, &g, false, &m, &K, &nc);
    return (double)g.groups * (double)m * (double)K * (double)nc;
}

/* ---- the group's operands as matrices ------------------------------------------- */

typedef struct conv_mm {
    goblin__conv_geom g;
    size_t es;
    int64_t m, K, nc;
    char *a, *b, *c; /* [m, K], [K, nc], [m, nc] contiguous (c NULL: a view of the claim) */
} conv_mm;

static void put_one(char *dst, size_t es) {
    if (es == 4) {
        float f = 1.0f;
        memcpy(dst, &f, 4);
    } else {
        double d = 1.0;
        memcpy(dst, &d, 8);
    }
}

/* The patches of x [N, C, H, W] for group @p gi into rows (n, oh, ow) x cols (c, i, j) of
 * @p dst (row stride @p ld; zeros for padding), and channels [ch0, ch0 + nch) of t [N,
 * CH, P] as rows (n, p) x cols ch of dst [N P, nch]: typed copies (f32, f64). */
#define CONV_COPIES(T, SUF)                                                                                         \
    static void patches_##SUF(const goblin__conv_geom *g, const T *x, int64_t gi, T *dst, int64_t ld) {            \
        int64_t cg = g->c / g->groups;                                                                              \
        for (int64_t n = 0; n < g->n; n++)                                                                          \
            for (int64_t oh = 0; oh < g->oh; oh++)                                                                  \
                for (int64_t ow = 0; ow < g->ow; ow++) {                                                            \
                    T *row = dst + ((n * g->oh + oh) * g->ow + ow) * ld;                                            \
                    int64_t w0 = ow * g->sw - g->pw;                                                                \
                    for (int64_t c = 0; c < cg; c++) {                                                              \
                        const T *plane = x + ((n * g->c + gi * cg + c) * g->h) * g->w;                              \
                        for (int64_t i = 0; i < g->kh; i++) {                                                       \
                            int64_t h = oh * g->sh - g->ph + i * g->dh;                                             \
                            T *d = row + (c * g->kh + i) * g->kw;                                                   \
                            if (h < 0 || h >= g->h) {                                                               \
                                for (int64_t j = 0; j < g->kw; j++) d[j] = 0;                                       \
                                continue;                                                                           \
                            }                                                                                       \
                            const T *src = plane + h * g->w;                                                        \
                            for (int64_t j = 0, w = w0; j < g->kw; j++, w += g->dw)                                 \
                                d[j] = w >= 0 && w < g->w ? src[w] : (T)0;                                          \
                        }                                                                                           \
                    }                                                                                               \
                }                                                                                                   \
    }                                                                                                               \
    static void chlast_##SUF(const T *t, int64_t N, int64_t CH, int64_t P, int64_t ch0, int64_t nch, T *dst) {      \
        for (int64_t n = 0; n < N; n++)                                                                             \
            for (int64_t c = 0; c < nch; c++) {                                                                     \
                const T *src = t + (n * CH + ch0 + c) * P;                                                          \
                T *d = dst + n * P * nch + c;                                                                       \
                for (int64_t p = 0; p < P; p++) d[p * nch] = src[p];                                                \
            }                                                                                                       \
    }
CONV_COPIES(float, f32)
CONV_COPIES(double, f64)

static void patches(const conv_mm *q, const char *x, int64_t gi, char *dst, int64_t ld) {
    if (q->es == 4) patches_f32(&q->g, (const float *)x, gi, (float *)dst, ld);
    else patches_f64(&q->g, (const double *)x, gi, (double *)dst, ld);
}

static void channels_last(const char *t, int64_t N, int64_t CH, int64_t P, int64_t ch0, int64_t nch, size_t es,
                          char *dst) {
    if (es == 4) chlast_f32((const float *)t, N, CH, P, ch0, nch, (float *)dst);
    else chlast_f64((const double *)t, N, CH, P, ch0, nch, (double *)dst);
}

/* Build group @p gi's A, B (and C where the claim is not already a matrix view). */
static void build_group(const goblin__node *n, conv_mm *q, int64_t gi, const goblin_tensor *in0,
                        const goblin_tensor *in1, const goblin_tensor *bias, const goblin_tensor *claimed) {
    const goblin__conv_geom *g = &q->g;
    size_t es = q->es;
    int64_t og = g->o / g->groups, cg = g->c / g->groups, kk = g->kh * g->kw;
    switch (n->op) {
    case GOBLIN_OP_CONV2D: {
        patches(q, in0->data, gi, q->a, q->K);
        if (bias)
            for (int64_t r = 0; r < q->m; r++) put_one(q->a + (r * q->K + q->K - 1) * (int64_t)es, es);
        const char *w = in1->data; /* [O, Kg] */
        int64_t kg = cg * kk;
        for (int64_t k = 0; k < kg; k++)
            for (int64_t o = 0; o < og; o++)
                memcpy(q->b + (k * og + o) * (int64_t)es, w + ((gi * og + o) * kg + k) * (int64_t)es, es);
        if (bias)
            memcpy(q->b + kg * og * (int64_t)es, (const char *)bias->data + gi * og * (int64_t)es, (size_t)og * es);
        channels_last(claimed->data, g->n, g->o, g->oh * g->ow, gi * og, og, es, q->c);
        break;
    }
    case GOBLIN_OP_CONV2D_BACKWARD_INPUT: {
        const char *go = in0->data, *w = in1->data;
        memset(q->a, 0, (size_t)(q->m * q->K) * es);
        for (int64_t nn = 0; nn < g->n; nn++)
            for (int64_t h = 0; h < g->h; h++)
                for (int64_t x = 0; x < g->w; x++) {
                    char *row = q->a + ((nn * g->h + h) * g->w + x) * q->K * (int64_t)es;
                    for (int64_t i = 0; i < g->kh; i++) {
                        int64_t th = h + g->ph - i * g->dh;
                        if (th < 0 || th % g->sh) continue;
                        int64_t oh = th / g->sh;
                        if (oh >= g->oh) continue;
                        for (int64_t j = 0; j < g->kw; j++) {
                            int64_t tw = x + g->pw - j * g->dw;
                            if (tw < 0 || tw % g->sw) continue;
                            int64_t ow = tw / g->sw;
                            if (ow >= g->ow) continue;
                            for (int64_t o = 0; o < og; o++)
                                memcpy(row + (o * kk + i * g->kw + j) * (int64_t)es,
                                       go + (((nn * g->o + gi * og + o) * g->oh + oh) * g->ow + ow) * (int64_t)es, es);
                        }
                    }
                }
        for (int64_t o = 0; o < og; o++)
            for (int64_t t = 0; t < kk; t++)
                for (int64_t c = 0; c < cg; c++)
                    memcpy(q->b + ((o * kk + t) * cg + c) * (int64_t)es,
                           w + (((gi * og + o) * cg + c) * kk + t) * (int64_t)es, es);
        channels_last(claimed->data, g->n, g->c, g->h * g->w, gi * cg, cg, es, q->c);
        break;
    }
    default: { /* BACKWARD_WEIGHT: A = grad_out_g [Og, N OH OW], B = patches */
        const char *go = in0->data;
        int64_t P = g->oh * g->ow;
        for (int64_t o = 0; o < og; o++)
            for (int64_t nn = 0; nn < g->n; nn++)
                memcpy(q->a + (o * q->K + nn * P) * (int64_t)es, go + ((nn * g->o + gi * og + o) * P) * (int64_t)es,
                       (size_t)P * es);
        patches(q, in1->data, gi, q->b, q->nc);
        break;
    }
    }
}

static void merge(goblin_verdict *acc, const goblin_verdict *v, int64_t row0, bool first) {
    int64_t wi = v->worst_index >= 0 ? v->worst_index + row0 : -1;
    if (first) {
        *acc = *v;
        acc->worst_index = wi;
        return;
    }
    if (v->kind > acc->kind || (v->kind == acc->kind && v->worst_ratio > acc->worst_ratio)) {
        acc->kind = v->kind;
        acc->reason = v->reason;
        acc->worst_index = wi;
        acc->worst_ratio = v->worst_ratio;
    }
    if (v->worst_tight_ratio > acc->worst_tight_ratio) acc->worst_tight_ratio = v->worst_tight_ratio;
    acc->checked += v->checked;
    acc->above_tight += v->above_tight;
    acc->above_bound += v->above_bound;
    acc->nonfinite += v->nonfinite;
    acc->unchecked += v->unchecked;
}

static bool contiguous4(const goblin_tensor *t) { return t && t->data && goblin_tensor_is_contiguous(t); }

goblin_err goblin__conv_check(const goblin__node *n, const goblin_tensor *in0, const goblin_tensor *in1,
                              const goblin_tensor *bias, const goblin_tensor *claimed, uint64_t seed,
                              int32_t vectors, goblin_verdict *out) {
    if (!n || !in0 || !in1 || !claimed || !out || !is_conv(n->op) || n->n_inputs != (bias ? 3 : 2))
        return GOBLIN_EINVAL;
    memset(out, 0, sizeof *out);
    out->worst_index = -1;
    if (!contiguous4(in0) || !contiguous4(in1) || (bias && !contiguous4(bias)) || in0->rank != 4 ||
        in1->rank != 4 || in0->dtype != n->dtype || in1->dtype != n->dtype || (bias && bias->dtype != n->dtype))
        return GOBLIN_EINVAL;
    if (claimed->dtype != n->dtype || claimed->rank != n->rank ||
        memcmp(claimed->shape, n->shape, sizeof(int64_t) * (size_t)n->rank) != 0 || !claimed->data ||
        !goblin_tensor_is_contiguous(claimed)) {
        out->kind = GOBLIN_VERDICT_REJECT;
        out->reason = claimed->dtype != n->dtype ? GOBLIN_VERIFY_DTYPE : GOBLIN_VERIFY_SHAPE;
        return GOBLIN_OK;
    }
    conv_mm q;
    memset(&q, 0, sizeof q);
    if (!conv_geom(n, in0->shape, in1->shape, &q.g) || q.g.groups < 1) return GOBLIN_EINVAL;
    if (bias && bias->shape[0] != q.g.o) return GOBLIN_EINVAL;
    q.es = goblin_dtype_size(n->dtype);
    mm_dims(n->op, &q.g, bias != NULL, &q.m, &q.K, &q.nc);
    bool view_c = n->op == GOBLIN_OP_CONV2D_BACKWARD_WEIGHT; /* dW's rows are C's rows */
    double bytes = (double)q.es * ((double)q.m * (double)q.K + (double)q.K * (double)q.nc +
                                   (view_c ? 0.0 : (double)q.m * (double)q.nc));
    if (bytes > (double)GOBLIN_CONV_CHECK_MAX_BYTES) return GOBLIN_ELIMIT;
    q.a = goblin__alloc((size_t)(q.m * q.K) * q.es + 1);
    q.b = goblin__alloc((size_t)(q.K * q.nc) * q.es + 1);
    q.c = view_c ? NULL : goblin__alloc((size_t)(q.m * q.nc) * q.es + 1);
    goblin_err e = GOBLIN_OK;
    if (!q.a || !q.b || (!view_c && !q.c)) e = GOBLIN_ENOMEM;
    goblin_freivalds_params fp;
    goblin_freivalds_params_default(&fp);
    if (vectors > 0) fp.vectors = vectors;
    for (int64_t gi = 0; gi < q.g.groups && !e; gi++) {
        build_group(n, &q, gi, in0, in1, bias, claimed);
        goblin_tensor a, b, c;
        int64_t sa[2] = {q.m, q.K}, sb[2] = {q.K, q.nc}, sc[2] = {q.m, q.nc};
        goblin_tensor_init(&a, n->dtype, 2, sa, q.a);
        goblin_tensor_init(&b, n->dtype, 2, sb, q.b);
        goblin_tensor_init(&c, n->dtype, 2, sc,
                           view_c ? (char *)claimed->data + (size_t)(gi * q.m * q.nc) * q.es : q.c);
        fp.seed = seed ^ ((uint64_t)(gi + 1) * 0x9E3779B97F4A7C15ull);
        goblin_verdict v;
        if ((e = goblin_verify_matmul(&a, &b, &c, &fp, &v)) != GOBLIN_OK) break;
        merge(out, &v, gi * q.m, gi == 0);
        if (out->kind == GOBLIN_VERDICT_REJECT) break;
    }
    goblin__free(q.a);
    goblin__free(q.b);
    goblin__free(q.c);
    return e;
}
