/* libgoblin/ops/nn.c - op definitions of the nn group: matmul, conv2d, pooling and
 * scaled dot-product attention (inference, attribute schemas, numeric contracts),
 * plus the geometry helpers of ops_nn.h that every backend's kernels share. */
#include <float.h>
#include <math.h>
#include <string.h>
#include "kernels/nditer.h"
#include "nn.h"

#define DT(x) GOBLIN_DTMASK(GOBLIN_DTYPE_##x)
#define MAXDIM ((double)GOBLIN_MAX_DIM)

/* ---- small helpers -------------------------------------------------------- */

static goblin_err check_dtype(goblin__infer *c, const goblin__node *x, uint32_t mask,
                              const char *what) {
    if (mask & GOBLIN_DTMASK(x->dtype)) return GOBLIN_OK;
    return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE, "%s has dtype %s, which this op does not take",
                        what, goblin_dtype_name(x->dtype));
}

static goblin_err same_dtype(goblin__infer *c, const goblin__node *x, const goblin__node *y,
                             const char *xn, const char *yn) {
    if (x->dtype == y->dtype) return GOBLIN_OK;
    return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE, "%s is %s but %s is %s; insert a cast", xn,
                        goblin_dtype_name(x->dtype), yn, goblin_dtype_name(y->dtype));
}

/* An INTS attribute holding one value (used for both dims) or two ([h, w]); absent or
 * empty gives @p def for both. */
static goblin_err attr_pair(const goblin__node *n, goblin_attr_key key, int64_t def, int64_t out[2],
                            char *msg, size_t cap) {
    int32_t cnt;
    const int64_t *v = goblin__attr_ints(n, key, &cnt);
    if (!v || cnt == 0) {
        out[0] = out[1] = def;
    } else if (cnt == 1) {
        out[0] = out[1] = v[0];
    } else if (cnt == 2) {
        out[0] = v[0];
        out[1] = v[1];
    } else {
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "%s takes 1 or 2 values ([h, w]), got %d",
                            goblin_attr_name(key), (int)cnt);
    }
    return GOBLIN_OK;
}

/* dilation * (kernel - 1) + 1, or -1 if it overflows the dims we allow. */
static int64_t effective_kernel(int64_t k, int64_t d) {
    int64_t e;
    if (!goblin__mul_i64(d, k - 1, &e) || e >= GOBLIN_MAX_DIM * 4) return -1;
    return e + 1;
}

static goblin_err finish_shape(goblin__infer *c) {
    int64_t numel;
    if (goblin__shape_numel(c->node->rank, c->node->shape, &numel) != GOBLIN_OK)
        return goblin__errf(c->msg, c->cap, GOBLIN_ELIMIT, "output has too many elements");
    return GOBLIN_OK;
}

/* ---- contracts ----------------------------------------------------------- */

/* gamma_k = k u / (1 - k u); no finite bound once k u >= 1. */
static double gamma_k(double k, double u) {
    double ku = k * u;
    return ku < 1 ? ku / (1 - ku) : INFINITY;
}

static bool is_half(goblin_dtype dt) { return dt == GOBLIN_DTYPE_F16 || dt == GOBLIN_DTYPE_BF16; }

/* Accumulation format: f64 for f64, f32 for f32/f16/bf16 (half inputs are exact in f32). */
static double acc_u(goblin_dtype dt) { return dt == GOBLIN_DTYPE_F64 ? 0x1p-53 : 0x1p-24; }

/* Smallest positive (subnormal) value: the absolute error of underflowing products. */
static double tiny(goblin_dtype dt) {
    switch (dt) {
    case GOBLIN_DTYPE_F64: return 0x1p-1074;
    case GOBLIN_DTYPE_F16: return 0x1p-24;
    case GOBLIN_DTYPE_BF16: return 0x1p-133;
    default: return 0x1p-149;
    }
}

/* A dot product of @p terms terms accumulated in the accumulation format, then rounded
 * once to dt: rel = gamma_terms(u_acc) (+ u(dt) for half dtypes), abs covers underflow. */
static void dot_contract(goblin_dtype dt, double terms, double *rel, double *abs_tol) {
    if (!goblin_dtype_is_float(dt)) { /* integer matmul is exact (wrapping) */
        *rel = 0;
        *abs_tol = 0;
        return;
    }
    *rel = gamma_k(terms, acc_u(dt)) + (is_half(dt) ? goblin__unit_roundoff(dt) : 0);
    *abs_tol = terms * tiny(dt == GOBLIN_DTYPE_F64 ? dt : GOBLIN_DTYPE_F32) +
               (is_half(dt) ? tiny(dt) : 0);
}

/* alpha * sum_k a b + beta * c: k products, the alpha scaling and the c term. */
static void contract_matmul(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    dot_contract(dt, (double)k + 2, rel, abs_tol);
}

/* k = C/groups * kh * kw products plus the bias. */
static void contract_conv(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    dot_contract(dt, (double)k + 1, rel, abs_tol);
}

/* A sum of k window elements and one division. */
static void contract_avg(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    dot_contract(dt, (double)k + 1, rel, abs_tol);
}

/* k = E + S + 6 (see contract text): logits, softmax and the weighted sum. */
static void contract_sdpa(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    dot_contract(dt, (double)k, rel, abs_tol);
}

/* ---- MATMUL -------------------------------------------------------------- */

static goblin_err infer_matmul(goblin__infer *c) {
    const goblin__node *a = c->in[0], *b = c->in[1];
    goblin__node *o = c->node;
    goblin_err e;
    if ((e = check_dtype(c, a, GOBLIN_DTMASK_FLOAT | GOBLIN_DTMASK_INT, "a")) != GOBLIN_OK) return e;
    if ((e = same_dtype(c, a, b, "a", "b")) != GOBLIN_OK) return e;
    if (a->rank < 1 || b->rank < 1)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                            "matmul needs operands of rank >= 1 (a has rank %d, b rank %d)",
                            (int)a->rank, (int)b->rank);
    bool ta = goblin__attr_i(o, GOBLIN_ATTR_TRANS_A, 0) != 0 && a->rank >= 2;
    bool tb = goblin__attr_i(o, GOBLIN_ATTR_TRANS_B, 0) != 0 && b->rank >= 2;
    double alpha = goblin__attr_f(o, GOBLIN_ATTR_ALPHA, 1), beta = goblin__attr_f(o, GOBLIN_ATTR_BETA, 1);
    if (!isfinite(alpha) || !isfinite(beta))
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE, "alpha and beta must be finite");
    if (goblin_dtype_is_int(a->dtype)) {
        /* Integer results wrap modulo 2^bits, so only integral scale factors make sense. */
        double lim = 0x1p63;
        if (alpha != floor(alpha) || beta != floor(beta) || fabs(alpha) >= lim || fabs(beta) >= lim)
            return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL,
                                "integer matmul needs integral alpha and beta (got %g, %g)", alpha,
                                beta);
    }
    int32_t ra = a->rank, rb = b->rank;
    int64_t m, ka, kb, n;
    if (ra == 1) {
        m = 1;
        ka = a->shape[0];
    } else {
        m = ta ? a->shape[ra - 1] : a->shape[ra - 2];
        ka = ta ? a->shape[ra - 2] : a->shape[ra - 1];
    }
    if (rb == 1) {
        n = 1;
        kb = b->shape[0];
    } else {
        kb = tb ? b->shape[rb - 1] : b->shape[rb - 2];
        n = tb ? b->shape[rb - 2] : b->shape[rb - 1];
    }
    if (ka != kb) {
        char sa[160], sb[160];
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                            "inner dimensions differ: a %s%s gives K=%lld, b %s%s gives K=%lld",
                            goblin__shape_str(ra, a->shape, sa, sizeof sa), ta ? " (transposed)" : "",
                            (long long)ka, goblin__shape_str(rb, b->shape, sb, sizeof sb),
                            tb ? " (transposed)" : "", (long long)kb);
    }
    int32_t br;
    int64_t bshape[GOBLIN_MAX_RANK];
    e = goblin__broadcast_shapes(ra == 1 ? 0 : ra - 2, a->shape, rb == 1 ? 0 : rb - 2, b->shape, &br,
                                 bshape, c->msg, c->cap);
    if (e != GOBLIN_OK) return e;
    o->dtype = a->dtype;
    o->rank = br;
    memcpy(o->shape, bshape, sizeof(int64_t) * (size_t)br);
    if (ra != 1) o->shape[o->rank++] = m;
    if (rb != 1) o->shape[o->rank++] = n;
    if (c->n_in == 3) {
        const goblin__node *cc = c->in[2];
        if ((e = same_dtype(c, a, cc, "a", "c")) != GOBLIN_OK) return e;
        int32_t rr;
        int64_t rs[GOBLIN_MAX_RANK];
        char so[160], sc[160];
        e = goblin__broadcast_shapes(o->rank, o->shape, cc->rank, cc->shape, &rr, rs, c->msg, c->cap);
        if (e != GOBLIN_OK || rr != o->rank || memcmp(rs, o->shape, sizeof(int64_t) * (size_t)rr))
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                                "c %s does not broadcast to the product's shape %s",
                                goblin__shape_str(cc->rank, cc->shape, sc, sizeof sc),
                                goblin__shape_str(o->rank, o->shape, so, sizeof so));
    }
    return finish_shape(c);
}

void goblin__mm_geom_init(const goblin__node *node, const goblin_tensor *in, int32_t n_in,
                          const goblin_tensor *out, goblin__mm_geom *g) {
    const goblin_tensor *a = &in[0], *b = &in[1];
    int32_t ra = a->rank, rb = b->rank, orank = out->rank;
    bool ta = goblin__attr_i(node, GOBLIN_ATTR_TRANS_A, 0) != 0 && ra >= 2;
    bool tb = goblin__attr_i(node, GOBLIN_ATTR_TRANS_B, 0) != 0 && rb >= 2;
    bool a1 = ra == 1, b1 = rb == 1;
    memset(g, 0, sizeof *g);
    if (a1) {
        g->m = 1;
        g->k = a->shape[0];
        g->a_cs = a->strides[0];
    } else {
        int64_t r = a->shape[ra - 2], cl = a->shape[ra - 1];
        int64_t rs = a->strides[ra - 2], cs = a->strides[ra - 1];
        g->m = ta ? cl : r;
        g->k = ta ? r : cl;
        g->a_rs = ta ? cs : rs;
        g->a_cs = ta ? rs : cs;
    }
    if (b1) {
        g->n = 1;
        g->b_rs = b->strides[0];
    } else {
        int64_t r = b->shape[rb - 2], cl = b->shape[rb - 1];
        int64_t rs = b->strides[rb - 2], cs = b->strides[rb - 1];
        g->n = tb ? r : cl;
        g->b_rs = tb ? cs : rs;
        g->b_cs = tb ? rs : cs;
    }
    g->batch_rank = orank - (a1 ? 0 : 1) - (b1 ? 0 : 1);
    g->batch = 1;
    int32_t abr = a1 ? 0 : ra - 2, bbr = b1 ? 0 : rb - 2;
    for (int32_t d = 0; d < g->batch_rank; d++) {
        int64_t s = out->shape[d];
        g->batch_shape[d] = s;
        g->batch *= s;
        int32_t ad = d - (g->batch_rank - abr), bd = d - (g->batch_rank - bbr);
        g->a_bs[d] = (ad < 0 || (a->shape[ad] == 1 && s != 1)) ? 0 : a->strides[ad];
        g->b_bs[d] = (bd < 0 || (b->shape[bd] == 1 && s != 1)) ? 0 : b->strides[bd];
        g->o_bs[d] = out->strides[d];
    }
    g->o_rs = a1 ? 0 : out->strides[g->batch_rank];
    g->o_cs = b1 ? 0 : out->strides[orank - 1];
    g->alpha = goblin__attr_f(node, GOBLIN_ATTR_ALPHA, 1);
    g->beta = goblin__attr_f(node, GOBLIN_ATTR_BETA, 1);
    g->has_c = n_in >= 3 && g->beta != 0;
    if (g->has_c) {
        int64_t cs[GOBLIN_MAX_RANK];
        goblin__bcast_strides(&in[2], orank, out->shape, cs);
        for (int32_t d = 0; d < g->batch_rank; d++) g->c_bs[d] = cs[d];
        g->c_rs = a1 ? 0 : cs[g->batch_rank];
        g->c_cs = b1 ? 0 : cs[orank - 1];
    }
}

/* ---- CONV2D -------------------------------------------------------------- */

goblin_err goblin__conv_geom_get(const goblin__node *node, const int64_t *x, const int64_t *w,
                                 goblin__conv_geom *g, char *msg, size_t cap) {
    int64_t st[2], pd[2], dl[2];
    goblin_err e;
    if ((e = attr_pair(node, GOBLIN_ATTR_STRIDE, 1, st, msg, cap)) != GOBLIN_OK) return e;
    if ((e = attr_pair(node, GOBLIN_ATTR_PADDING, 0, pd, msg, cap)) != GOBLIN_OK) return e;
    if ((e = attr_pair(node, GOBLIN_ATTR_DILATION, 1, dl, msg, cap)) != GOBLIN_OK) return e;
    memset(g, 0, sizeof *g);
    g->n = x[0];
    g->c = x[1];
    g->h = x[2];
    g->w = x[3];
    g->o = w[0];
    g->kh = w[2];
    g->kw = w[3];
    g->groups = goblin__attr_i(node, GOBLIN_ATTR_GROUPS, 1);
    g->sh = st[0];
    g->sw = st[1];
    g->ph = pd[0];
    g->pw = pd[1];
    g->dh = dl[0];
    g->dw = dl[1];
    if (g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->ph < 0 || g->pw < 0 || g->groups < 1)
        return goblin__errf(msg, cap, GOBLIN_ERANGE,
                            "stride and dilation must be >= 1, padding >= 0, groups >= 1");
    int64_t cin;
    if (!goblin__mul_i64(w[1], g->groups, &cin) || cin != g->c)
        return goblin__errf(msg, cap, GOBLIN_ESHAPE,
                            "x has %lld channels but weight expects %lld per group x %lld groups",
                            (long long)g->c, (long long)w[1], (long long)g->groups);
    if (g->o % g->groups != 0)
        return goblin__errf(msg, cap, GOBLIN_ESHAPE,
                            "%lld output channels are not divisible by %lld groups", (long long)g->o,
                            (long long)g->groups);
    if (g->kh < 1 || g->kw < 1)
        return goblin__errf(msg, cap, GOBLIN_ESHAPE, "kernel dims must be >= 1 (got %lld x %lld)",
                            (long long)g->kh, (long long)g->kw);
    int64_t ekh = effective_kernel(g->kh, g->dh), ekw = effective_kernel(g->kw, g->dw);
    int64_t ph2 = g->h + 2 * g->ph, pw2 = g->w + 2 * g->pw;
    if (ekh < 0 || ekw < 0 || ekh > ph2 || ekw > pw2)
        return goblin__errf(msg, cap, GOBLIN_ESHAPE,
                            "padded input %lld x %lld is smaller than the dilated kernel %lld x %lld",
                            (long long)ph2, (long long)pw2, (long long)ekh, (long long)ekw);
    g->oh = (ph2 - ekh) / g->sh + 1;
    g->ow = (pw2 - ekw) / g->sw + 1;
    return GOBLIN_OK;
}

static goblin_err infer_conv2d(goblin__infer *c) {
    const goblin__node *x = c->in[0], *w = c->in[1];
    goblin__node *o = c->node;
    goblin_err e;
    if ((e = check_dtype(c, x, GOBLIN_DTMASK_FLOAT, "x")) != GOBLIN_OK) return e;
    if ((e = same_dtype(c, x, w, "x", "weight")) != GOBLIN_OK) return e;
    if (x->rank != 4 || w->rank != 4)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                            "conv2d needs x [N, C, H, W] and weight [O, C/groups, kh, kw] "
                            "(got ranks %d and %d)",
                            (int)x->rank, (int)w->rank);
    goblin__conv_geom g;
    if ((e = goblin__conv_geom_get(o, x->shape, w->shape, &g, c->msg, c->cap)) != GOBLIN_OK) return e;
    if (c->n_in == 3) {
        const goblin__node *bias = c->in[2];
        if ((e = same_dtype(c, x, bias, "x", "bias")) != GOBLIN_OK) return e;
        if (bias->rank != 1 || bias->shape[0] != g.o)
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "bias must be [%lld]",
                                (long long)g.o);
    }
    o->dtype = x->dtype;
    o->rank = 4;
    o->shape[0] = g.n;
    o->shape[1] = g.o;
    o->shape[2] = g.oh;
    o->shape[3] = g.ow;
    return finish_shape(c);
}

/* ---- pooling ------------------------------------------------------------- */

/* torch's pooling_output_shape: floor (or ceil) division, and in ceil mode the last
 * window must start inside the input or the left padding. */
static int64_t pool_out(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t d, bool ceil_mode) {
    int64_t ek = effective_kernel(k, d);
    if (ek < 0) return -1;
    int64_t num = in + 2 * pad - ek + (ceil_mode ? s - 1 : 0);
    int64_t q = num / s;
    if (num % s != 0 && num < 0) q--; /* floor, as torch's div_rtn */
    int64_t out = q + 1;
    if (ceil_mode && (out - 1) * s >= in + pad) out--;
    return out;
}

goblin_err goblin__pool_geom_get(const goblin__node *node, int32_t rank, const int64_t *shape,
                                 goblin__pool_geom *g, char *msg, size_t cap) {
    memset(g, 0, sizeof *g);
    if (rank != 3 && rank != 4)
        return goblin__errf(msg, cap, GOBLIN_ESHAPE,
                            "pooling needs a [C, H, W] or [N, C, H, W] input (got rank %d)",
                            (int)rank);
    g->planes = 1;
    for (int32_t d = 0; d < rank - 2; d++) g->planes *= shape[d];
    g->h = shape[rank - 2];
    g->w = shape[rank - 1];
    if (g->h < 1 || g->w < 1)
        return goblin__errf(msg, cap, GOBLIN_ESHAPE, "pooling needs non-empty H and W (got %lld x %lld)",
                            (long long)g->h, (long long)g->w);
    goblin_err e;
    int64_t v[2];
    if (node->op == GOBLIN_OP_ADAPTIVE_AVG_POOL2D) {
        if ((e = attr_pair(node, GOBLIN_ATTR_OUTPUT_SIZE, -1, v, msg, cap)) != GOBLIN_OK) return e;
        if (v[0] < 0 || v[1] < 0)
            return goblin__errf(msg, cap, GOBLIN_EINVAL, "output_size needs 1 or 2 values >= 0");
        g->oh = v[0];
        g->ow = v[1];
        return GOBLIN_OK;
    }
    if ((e = attr_pair(node, GOBLIN_ATTR_KERNEL, -1, v, msg, cap)) != GOBLIN_OK) return e;
    g->kh = v[0];
    g->kw = v[1];
    if (g->kh < 1 || g->kw < 1)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "kernel needs 1 or 2 values >= 1");
    if ((e = attr_pair(node, GOBLIN_ATTR_STRIDE, 0, v, msg, cap)) != GOBLIN_OK) return e;
    g->sh = v[0] ? v[0] : g->kh; /* absent/empty stride means stride = kernel */
    g->sw = v[1] ? v[1] : g->kw;
    if ((e = attr_pair(node, GOBLIN_ATTR_PADDING, 0, v, msg, cap)) != GOBLIN_OK) return e;
    g->ph = v[0];
    g->pw = v[1];
    if ((e = attr_pair(node, GOBLIN_ATTR_DILATION, 1, v, msg, cap)) != GOBLIN_OK) return e;
    g->dh = v[0];
    g->dw = v[1];
    g->ceil_mode = goblin__attr_i(node, GOBLIN_ATTR_CEIL_MODE, 0) != 0;
    g->count_include_pad = goblin__attr_i(node, GOBLIN_ATTR_COUNT_INCLUDE_PAD, 1) != 0;
    if (g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->ph < 0 || g->pw < 0)
        return goblin__errf(msg, cap, GOBLIN_ERANGE,
                            "stride and dilation must be >= 1 and padding >= 0");
    if (g->ph > g->kh / 2 || g->pw > g->kw / 2)
        return goblin__errf(msg, cap, GOBLIN_EINVAL,
                            "padding %lld x %lld exceeds half the kernel %lld x %lld",
                            (long long)g->ph, (long long)g->pw, (long long)g->kh, (long long)g->kw);
    g->oh = pool_out(g->h, g->kh, g->ph, g->sh, g->dh, g->ceil_mode);
    g->ow = pool_out(g->w, g->kw, g->pw, g->sw, g->dw, g->ceil_mode);
    if (g->oh < 1 || g->ow < 1)
        return goblin__errf(msg, cap, GOBLIN_ESHAPE,
                            "input %lld x %lld gives an empty output (%lld x %lld) for this kernel",
                            (long long)g->h, (long long)g->w, (long long)g->oh, (long long)g->ow);
    return GOBLIN_OK;
}

static goblin_err infer_pool(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    goblin__node *o = c->node;
    uint32_t mask = o->op == GOBLIN_OP_MAX_POOL2D ? (GOBLIN_DTMASK_FLOAT | GOBLIN_DTMASK_INT)
                                                  : GOBLIN_DTMASK_FLOAT;
    goblin_err e;
    if ((e = check_dtype(c, x, mask, "x")) != GOBLIN_OK) return e;
    goblin__pool_geom g;
    if ((e = goblin__pool_geom_get(o, x->rank, x->shape, &g, c->msg, c->cap)) != GOBLIN_OK) return e;
    o->dtype = x->dtype;
    o->rank = x->rank;
    memcpy(o->shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
    o->shape[x->rank - 2] = g.oh;
    o->shape[x->rank - 1] = g.ow;
    return finish_shape(c);
}

/* ---- SDPA ---------------------------------------------------------------- */

double goblin__sdpa_scale(const goblin__node *node, int64_t e) {
    return goblin__attr_f(node, GOBLIN_ATTR_SCALE, e > 0 ? 1.0 / sqrt((double)e) : 1.0);
}

static goblin_err infer_sdpa(goblin__infer *c) {
    const goblin__node *q = c->in[0], *k = c->in[1], *v = c->in[2];
    goblin__node *o = c->node;
    goblin_err e;
    if ((e = check_dtype(c, q, GOBLIN_DTMASK_FLOAT, "q")) != GOBLIN_OK) return e;
    if ((e = same_dtype(c, q, k, "q", "k")) != GOBLIN_OK) return e;
    if ((e = same_dtype(c, q, v, "q", "v")) != GOBLIN_OK) return e;
    if (q->rank < 2 || k->rank < 2 || v->rank < 2)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                            "q, k, v need rank >= 2 ([..., L, E], [..., S, E], [..., S, Ev])");
    int64_t L = q->shape[q->rank - 2], E = q->shape[q->rank - 1];
    int64_t S = k->shape[k->rank - 2];
    if (k->shape[k->rank - 1] != E)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "q has E=%lld but k has E=%lld",
                            (long long)E, (long long)k->shape[k->rank - 1]);
    if (v->shape[v->rank - 2] != S)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "k has S=%lld rows but v has %lld",
                            (long long)S, (long long)v->shape[v->rank - 2]);
    double scale = goblin__sdpa_scale(o, E);
    if (!isfinite(scale)) return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE, "scale must be finite");
    int32_t r1, r2;
    int64_t s1[GOBLIN_MAX_RANK], s2[GOBLIN_MAX_RANK];
    if ((e = goblin__broadcast_shapes(q->rank - 2, q->shape, k->rank - 2, k->shape, &r1, s1, c->msg,
                                      c->cap)) != GOBLIN_OK)
        return e;
    if ((e = goblin__broadcast_shapes(r1, s1, v->rank - 2, v->shape, &r2, s2, c->msg, c->cap)) !=
        GOBLIN_OK)
        return e;
    if (c->n_in == 4) {
        const goblin__node *mk = c->in[3];
        if (mk->dtype != GOBLIN_DTYPE_BOOL && mk->dtype != q->dtype)
            return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                                "mask must be bool or q's dtype %s (got %s)",
                                goblin_dtype_name(q->dtype), goblin_dtype_name(mk->dtype));
        if (goblin__attr_i(o, GOBLIN_ATTR_CAUSAL, 0))
            return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL,
                                "causal and an explicit mask cannot be combined (as in torch)");
        /* As torch: the mask broadcasts to [batch..., L, S] of q, k, v without growing it. */
        if (r2 + 2 > GOBLIN_MAX_RANK)
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "too many batch dims");
        s2[r2] = L;
        s2[r2 + 1] = S;
        e = goblin__broadcast_shapes(r2 + 2, s2, mk->rank, mk->shape, &r1, s1, c->msg, c->cap);
        if (e != GOBLIN_OK || r1 != r2 + 2 || memcmp(s1, s2, sizeof(int64_t) * (size_t)r1)) {
            char sm[160], st[160];
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "mask %s does not broadcast to %s",
                                goblin__shape_str(mk->rank, mk->shape, sm, sizeof sm),
                                goblin__shape_str(r2 + 2, s2, st, sizeof st));
        }
    }
    if (r2 + 2 > GOBLIN_MAX_RANK)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "too many batch dims");
    o->dtype = q->dtype;
    o->rank = r2 + 2;
    memcpy(o->shape, s2, sizeof(int64_t) * (size_t)r2);
    o->shape[r2] = L;
    o->shape[r2 + 1] = v->shape[v->rank - 1];
    return finish_shape(c);
}

/* ---- registration -------------------------------------------------------- */

static void spec(goblin__op_def *d, goblin_attr_key key, bool required, double min, double max) {
    d->attrs[d->n_attrs++] = (goblin__attr_spec){key, required, min, max};
}

void goblin__ops_register_nn(goblin__op_def *t) {
    goblin__op_def *d;

    d = &t[GOBLIN_OP_MATMUL];
    *d = (goblin__op_def){
        .defined = true,
        .group = "nn",
        .summary = "out = alpha * op(a) @ op(b) + beta * c; inputs a, b[, c]; numpy.matmul "
                   "batching and broadcasting; trans_a/trans_b swap the last two dims",
        .semantics =
            "Batch dims broadcast (numpy.matmul); a 1-D a is [1, K] and a 1-D b is [K, 1], the "
            "added dim removed from the result (1-D @ 1-D gives a scalar); trans_a/trans_b are "
            "no-ops on 1-D operands. c broadcasts to the result; beta defaults to 1, alpha to 1; "
            "beta = 0 ignores c entirely (NaN/inf in c do not propagate, like torch.addmm). "
            "f16/bf16 accumulate in f32 and round once; f32 kernels accumulate in at least f32. "
            "Integer dtypes are exact modulo 2^bits (wrapping), alpha/beta must be integral. "
            "K = 0 gives beta * c (or 0).",
        .contract_text =
            "|out - exact| <= rel * (|alpha| * sum_k |a_ik||b_kj| + |beta * c_ij|) + abs, with "
            "rel = gamma_{K+2}(u_acc) = (K+2)u/(1-(K+2)u), u_acc = 2^-24 (f32, f16, bf16: half "
            "inputs are exact in f32) or 2^-53 (f64), plus u(dt) for f16/bf16 (final rounding); "
            "abs = (K+2) * smallest subnormal of the accumulation format (+ that of dt for "
            "halves). Pass k = K. Integers: exact.",
        .min_inputs = 2,
        .max_inputs = 3,
        .dtypes = GOBLIN_DTMASK_FLOAT | GOBLIN_DTMASK_INT,
        .flags = GOBLIN__OPF_STRIDED,
        .infer = infer_matmul,
        .contract = contract_matmul,
    };
    spec(d, GOBLIN_ATTR_TRANS_A, false, 0, 1);
    spec(d, GOBLIN_ATTR_TRANS_B, false, 0, 1);
    spec(d, GOBLIN_ATTR_ALPHA, false, -DBL_MAX, DBL_MAX);
    spec(d, GOBLIN_ATTR_BETA, false, -DBL_MAX, DBL_MAX);

    d = &t[GOBLIN_OP_CONV2D];
    *d = (goblin__op_def){
        .defined = true,
        .group = "nn",
        .summary = "2-D convolution (cross-correlation, as torch.nn.functional.conv2d): x [N, C, H, "
                   "W], weight [O, C/groups, kh, kw], optional bias [O] -> [N, O, OH, OW]",
        .semantics =
            "stride, padding (zeros), dilation take 1 or 2 values ([h, w]); defaults 1, 0, 1; "
            "groups default 1 and must divide C and O. OH = (H + 2 ph - dh (kh - 1) - 1) / sh + "
            "1 (floor); a padded input smaller than the dilated kernel is a shape error. "
            "f16/bf16 accumulate in f32 and round once.",
        .contract_text =
            "As matmul with K = C/groups * kh * kw and the bias as the c term: |out - exact| <= "
            "gamma_{K+1}(u_acc) * (sum |w||x| + |bias|) (+ u(dt) |exact| for f16/bf16) + abs; "
            "pass k = K.",
        .min_inputs = 2,
        .max_inputs = 3,
        .dtypes = GOBLIN_DTMASK_FLOAT,
        .infer = infer_conv2d,
        .contract = contract_conv,
    };
    spec(d, GOBLIN_ATTR_STRIDE, false, 1, MAXDIM);
    spec(d, GOBLIN_ATTR_PADDING, false, 0, MAXDIM);
    spec(d, GOBLIN_ATTR_DILATION, false, 1, MAXDIM);
    spec(d, GOBLIN_ATTR_GROUPS, false, 1, MAXDIM);

    d = &t[GOBLIN_OP_MAX_POOL2D];
    *d = (goblin__op_def){
        .defined = true,
        .group = "nn",
        .summary = "2-D max pooling over the last two dims of [C, H, W] or [N, C, H, W] "
                   "(torch.nn.functional.max_pool2d)",
        .semantics =
            "kernel (required), stride (default = kernel), padding (default 0, at most half the "
            "kernel; padded cells never win), dilation (default 1): 1 or 2 values each. ceil_mode "
            "uses torch's rule (the last window must start inside the input or the left "
            "padding). A NaN in a window gives NaN. Integer dtypes are exact.",
        .contract_text = "exact (returns one of the inputs)",
        .min_inputs = 1,
        .max_inputs = 1,
        .dtypes = GOBLIN_DTMASK_FLOAT | GOBLIN_DTMASK_INT,
        .infer = infer_pool,
        .contract = NULL,
    };
    spec(d, GOBLIN_ATTR_KERNEL, true, 1, MAXDIM);
    spec(d, GOBLIN_ATTR_STRIDE, false, 1, MAXDIM);
    spec(d, GOBLIN_ATTR_PADDING, false, 0, MAXDIM);
    spec(d, GOBLIN_ATTR_DILATION, false, 1, MAXDIM);
    spec(d, GOBLIN_ATTR_CEIL_MODE, false, 0, 1);

    d = &t[GOBLIN_OP_AVG_POOL2D];
    *d = (goblin__op_def){
        .defined = true,
        .group = "nn",
        .summary = "2-D average pooling over the last two dims of [C, H, W] or [N, C, H, W] "
                   "(torch.nn.functional.avg_pool2d)",
        .semantics =
            "kernel (required), stride (default = kernel), padding (default 0, at most half the "
            "kernel), ceil_mode, count_include_pad (default 1): as torch. With count_include_pad "
            "the divisor counts padding cells but not the cells a ceil_mode window hangs past "
            "the padding; without it, only input cells.",
        .contract_text = "|out - exact| <= gamma_{k+1}(u_acc) * sum|x| / divisor (+ u(dt) |exact| for "
                         "f16/bf16) + abs, k = kh * kw",
        .min_inputs = 1,
        .max_inputs = 1,
        .dtypes = GOBLIN_DTMASK_FLOAT,
        .infer = infer_pool,
        .contract = contract_avg,
    };
    spec(d, GOBLIN_ATTR_KERNEL, true, 1, MAXDIM);
    spec(d, GOBLIN_ATTR_STRIDE, false, 1, MAXDIM);
    spec(d, GOBLIN_ATTR_PADDING, false, 0, MAXDIM);
    spec(d, GOBLIN_ATTR_CEIL_MODE, false, 0, 1);
    spec(d, GOBLIN_ATTR_COUNT_INCLUDE_PAD, false, 0, 1);

    d = &t[GOBLIN_OP_ADAPTIVE_AVG_POOL2D];
    *d = (goblin__op_def){
        .defined = true,
        .group = "nn",
        .summary = "adaptive 2-D average pooling to output_size [oh, ow] "
                   "(torch.nn.functional.adaptive_avg_pool2d)",
        .semantics = "window i spans [floor(i H / oh), ceil((i + 1) H / oh)) (same for W); "
                     "output_size takes 1 or 2 values >= 0; H and W must be >= 1.",
        .contract_text = "|out - exact| <= gamma_{k+1}(u_acc) * mean|x| (+ u(dt) |exact| for "
                         "f16/bf16) + abs, k = the largest window's cell count",
        .min_inputs = 1,
        .max_inputs = 1,
        .dtypes = GOBLIN_DTMASK_FLOAT,
        .infer = infer_pool,
        .contract = contract_avg,
    };
    spec(d, GOBLIN_ATTR_OUTPUT_SIZE, true, 0, MAXDIM);

    d = &t[GOBLIN_OP_SDPA];
    *d = (goblin__op_def){
        .defined = true,
        .group = "nn",
        .summary = "softmax(scale * q @ k^T + mask) @ v; q [..., L, E], k [..., S, E], v [..., S, Ev], "
                   "optional mask (torch scaled_dot_product_attention, no dropout)",
        .semantics =
            "Batch dims of q, k and v broadcast. The 4th input is an additive float mask (q's "
            "dtype) or a bool mask (true = may attend) that broadcasts to [batch..., L, S] "
            "without growing it (as torch). causal = 1 lets query i attend keys j <= i (top-left "
            "aligned, torch's is_causal); causal with a mask is an error. scale defaults to "
            "1/sqrt(E) (1 when E = 0). A row whose keys are all masked out (or S = 0) gives 0, "
            "as torch 2.13 does (its _safe_softmax), not NaN. NaN or +inf logits give NaN.",
        .contract_text =
            "First-order bound: |out - exact| <= gamma_k(u_acc) * (1 + 2 T) * sum_j p_j |v_j| (+ "
            "u(dt) |exact| for f16/bf16) + abs, with k = E + S + 6 (logits, mask add, softmax "
            "and the weighted sum) and T = |scale| * max_j sum_e |q_e k_je| (logit error is "
            "amplified through exp). Pass k = E + S + 6.",
        .min_inputs = 3,
        .max_inputs = 4,
        .dtypes = GOBLIN_DTMASK_FLOAT,
        .flags = GOBLIN__OPF_STRIDED, /* q, k, v (and the mask) are read with their strides */
        .infer = infer_sdpa,
        .contract = contract_sdpa,
    };
    spec(d, GOBLIN_ATTR_CAUSAL, false, 0, 1);
    spec(d, GOBLIN_ATTR_SCALE, false, -DBL_MAX, DBL_MAX);
}
