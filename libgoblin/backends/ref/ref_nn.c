/* libgoblin/backends/ref/ref_nn.c - reference kernels of the nn group: matmul,
 * conv2d, pooling, scaled dot-product attention.
 *
 * Plain loops, written to be obviously right rather than fast: they are the
 * oracle. Dot products accumulate in the natural wider type: f32 in f64, f64 in
 * f64, f16/bf16 in f32 (products of half values are exact in f32), integers in
 * uint64 wrapping modulo 2^64 and then to the output width. Pooling and
 * attention compute every float dtype in f64 and round once on store. */
#include <math.h>
#include "backends/kernel_util.h"
#include "ref_impl.h"
#include "ops/nn.h"

static bool is_half(goblin_dtype dt) { return dt == GOBLIN_DTYPE_F16 || dt == GOBLIN_DTYPE_BF16; }

/* ---- MATMUL -------------------------------------------------------------- */

static goblin_err ref_matmul(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                             int32_t n_in, goblin_tensor *out) {
    (void)k;
    goblin__mm_geom g;
    goblin__mm_geom_init(node, in, n_in, out, &g);
    goblin_dtype dt = out->dtype;
    const void *A = in[0].data, *B = in[1].data, *Cc = n_in >= 3 ? in[2].data : NULL;
    bool integer = goblin_dtype_is_int(dt);
    int64_t strides[4][GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < g.batch_rank; d++) {
        strides[0][d] = g.a_bs[d];
        strides[1][d] = g.b_bs[d];
        strides[2][d] = g.c_bs[d];
        strides[3][d] = g.o_bs[d];
    }
    goblin__nditer it;
    goblin__nditer_init(&it, g.batch_rank, g.batch_shape, 4, strides);
    /* alpha/beta are integral for integer dtypes (checked at build time). */
    uint64_t ialpha = integer ? (uint64_t)(int64_t)g.alpha : 0;
    uint64_t ibeta = integer ? (uint64_t)(int64_t)g.beta : 0;
    for (int64_t bi = 0; bi < g.batch; bi++) {
        for (int64_t i = 0; i < g.m; i++) {
            for (int64_t j = 0; j < g.n; j++) {
                int64_t oa = it.off[0] + i * g.a_rs, ob = it.off[1] + j * g.b_cs;
                int64_t oc = it.off[2] + i * g.c_rs + j * g.c_cs;
                int64_t oo = it.off[3] + i * g.o_rs + j * g.o_cs;
                if (integer) {
                    uint64_t acc = 0;
                    for (int64_t p = 0; p < g.k; p++)
                        acc += (uint64_t)goblin__load_i64(dt, A, oa + p * g.a_cs) *
                               (uint64_t)goblin__load_i64(dt, B, ob + p * g.b_rs);
                    acc *= ialpha;
                    if (g.has_c) acc += ibeta * (uint64_t)goblin__load_i64(dt, Cc, oc);
                    goblin__store_i64(dt, out->data, oo, (int64_t)acc);
                    continue;
                }
                double acc;
                if (is_half(dt)) {
                    float accf = 0;
                    for (int64_t p = 0; p < g.k; p++)
                        accf += (float)(goblin__load_f64(dt, A, oa + p * g.a_cs) *
                                        goblin__load_f64(dt, B, ob + p * g.b_rs));
                    acc = accf;
                } else {
                    acc = 0;
                    for (int64_t p = 0; p < g.k; p++)
                        acc += goblin__load_f64(dt, A, oa + p * g.a_cs) *
                               goblin__load_f64(dt, B, ob + p * g.b_rs);
                }
                double r = g.alpha * acc;
                if (g.has_c) r += g.beta * goblin__load_f64(dt, Cc, oc);
                goblin__store_f64(dt, out->data, oo, r);
            }
        }
        goblin__nditer_next(&it);
    }
    return GOBLIN_OK;
}

/* ---- CONV2D -------------------------------------------------------------- */

static goblin_err ref_conv2d(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                             int32_t n_in, goblin_tensor *out) {
    goblin__conv_geom g;
    goblin_err e = goblin__conv_geom_get(node, in[0].shape, in[1].shape, &g, k->msg, k->cap);
    if (e) return e;
    goblin_dtype dt = out->dtype;
    const void *X = in[0].data, *W = in[1].data, *Bias = n_in >= 3 ? in[2].data : NULL;
    int64_t cg = g.c / g.groups, og = g.o / g.groups;
    int64_t oidx = 0;
    for (int64_t n = 0; n < g.n; n++) {
        for (int64_t o = 0; o < g.o; o++) {
            int64_t c0 = (o / og) * cg;
            for (int64_t oh = 0; oh < g.oh; oh++) {
                for (int64_t ow = 0; ow < g.ow; ow++) {
                    double accd = 0;
                    float accf = 0;
                    for (int64_t c = 0; c < cg; c++) {
                        for (int64_t i = 0; i < g.kh; i++) {
                            int64_t ih = oh * g.sh - g.ph + i * g.dh;
                            if (ih < 0 || ih >= g.h) continue;
                            for (int64_t j = 0; j < g.kw; j++) {
                                int64_t iw = ow * g.sw - g.pw + j * g.dw;
                                if (iw < 0 || iw >= g.w) continue;
                                double xv = goblin__load_f64(
                                    dt, X, ((n * g.c + c0 + c) * g.h + ih) * g.w + iw);
                                double wv =
                                    goblin__load_f64(dt, W, ((o * cg + c) * g.kh + i) * g.kw + j);
                                if (is_half(dt)) accf += (float)(xv * wv);
                                else accd += xv * wv;
                            }
                        }
                    }
                    double r = is_half(dt) ? (double)accf : accd;
                    if (Bias) r += goblin__load_f64(dt, Bias, o);
                    goblin__store_f64(dt, out->data, oidx++, r);
                }
            }
        }
    }
    return GOBLIN_OK;
}

/* ---- pooling ------------------------------------------------------------- */

static goblin_err ref_max_pool2d(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                 int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    goblin__pool_geom g;
    goblin_err e = goblin__pool_geom_get(node, in[0].rank, in[0].shape, &g, k->msg, k->cap);
    if (e) return e;
    goblin_dtype dt = out->dtype;
    const void *X = in[0].data;
    bool integer = goblin_dtype_is_int(dt);
    /* Smallest value of an integer dtype: what a window with no input cell gives
     * (floats give -inf, as torch). */
    int64_t imin = dt == GOBLIN_DTYPE_I8    ? INT8_MIN
                   : dt == GOBLIN_DTYPE_I16 ? INT16_MIN
                   : dt == GOBLIN_DTYPE_I32 ? INT32_MIN
                   : dt == GOBLIN_DTYPE_I64 ? INT64_MIN
                                            : 0;
    int64_t oidx = 0;
    for (int64_t p = 0; p < g.planes; p++) {
        int64_t base = p * g.h * g.w;
        for (int64_t oh = 0; oh < g.oh; oh++) {
            for (int64_t ow = 0; ow < g.ow; ow++) {
                double best = -INFINITY;
                int64_t ibest = imin;
                for (int64_t i = 0; i < g.kh; i++) {
                    int64_t ih = oh * g.sh - g.ph + i * g.dh;
                    if (ih < 0 || ih >= g.h) continue;
                    for (int64_t j = 0; j < g.kw; j++) {
                        int64_t iw = ow * g.sw - g.pw + j * g.dw;
                        if (iw < 0 || iw >= g.w) continue;
                        if (integer) {
                            int64_t v = goblin__load_i64(dt, X, base + ih * g.w + iw);
                            if (v > ibest) ibest = v;
                        } else {
                            double v = goblin__load_f64(dt, X, base + ih * g.w + iw);
                            if (v > best || isnan(v)) best = v; /* NaN propagates, as torch */
                            if (isnan(best)) goto done;
                        }
                    }
                }
            done:
                if (integer) goblin__store_i64(dt, out->data, oidx++, ibest);
                else goblin__store_f64(dt, out->data, oidx++, best);
            }
        }
    }
    return GOBLIN_OK;
}

static goblin_err ref_avg_pool2d(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                 int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    goblin__pool_geom g;
    goblin_err e = goblin__pool_geom_get(node, in[0].rank, in[0].shape, &g, k->msg, k->cap);
    if (e) return e;
    goblin_dtype dt = out->dtype;
    const void *X = in[0].data;
    int64_t oidx = 0;
    for (int64_t p = 0; p < g.planes; p++) {
        int64_t base = p * g.h * g.w;
        for (int64_t oh = 0; oh < g.oh; oh++) {
            for (int64_t ow = 0; ow < g.ow; ow++) {
                /* torch: the window is clipped to the padded input first (that count is
                 * the count_include_pad divisor), then to the input itself. */
                int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
                int64_t h1 = h0 + g.kh < g.h + g.ph ? h0 + g.kh : g.h + g.ph;
                int64_t w1 = w0 + g.kw < g.w + g.pw ? w0 + g.kw : g.w + g.pw;
                int64_t pool = (h1 - h0) * (w1 - w0);
                if (h0 < 0) h0 = 0;
                if (w0 < 0) w0 = 0;
                if (h1 > g.h) h1 = g.h;
                if (w1 > g.w) w1 = g.w;
                double r = 0;
                if (h0 < h1 && w0 < w1) {
                    double sum = 0;
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++)
                            sum += goblin__load_f64(dt, X, base + ih * g.w + iw);
                    int64_t div = g.count_include_pad ? pool : (h1 - h0) * (w1 - w0);
                    r = sum / (double)div;
                }
                goblin__store_f64(dt, out->data, oidx++, r);
            }
        }
    }
    return GOBLIN_OK;
}

static goblin_err ref_adaptive_avg_pool2d(goblin__kctx *k, const goblin__node *node,
                                          const goblin_tensor *in, int32_t n_in,
                                          goblin_tensor *out) {
    (void)n_in;
    goblin__pool_geom g;
    goblin_err e = goblin__pool_geom_get(node, in[0].rank, in[0].shape, &g, k->msg, k->cap);
    if (e) return e;
    goblin_dtype dt = out->dtype;
    const void *X = in[0].data;
    int64_t oidx = 0;
    for (int64_t p = 0; p < g.planes; p++) {
        int64_t base = p * g.h * g.w;
        for (int64_t oh = 0; oh < g.oh; oh++) {
            int64_t h0, h1;
            goblin__adaptive_window(oh, g.h, g.oh, &h0, &h1);
            for (int64_t ow = 0; ow < g.ow; ow++) {
                int64_t w0, w1;
                goblin__adaptive_window(ow, g.w, g.ow, &w0, &w1);
                double sum = 0;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++)
                        sum += goblin__load_f64(dt, X, base + ih * g.w + iw);
                goblin__store_f64(dt, out->data, oidx++, sum / (double)((h1 - h0) * (w1 - w0)));
            }
        }
    }
    return GOBLIN_OK;
}

/* ---- SDPA ---------------------------------------------------------------- */

/* Batch strides of tensor @p t (any strides; its last two dims are the matrix) against
 * the output's batch shape; 0 where t broadcasts. */
static void batch_strides(const goblin_tensor *t, int32_t br, const int64_t *bshape,
                          int64_t *strides) {
    int64_t full[GOBLIN_MAX_RANK], st[GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < br; d++) full[d] = bshape[d];
    full[br] = t->rank >= 2 ? t->shape[t->rank - 2] : 1;
    full[br + 1] = t->rank >= 1 ? t->shape[t->rank - 1] : 1;
    goblin__bcast_strides(t, br + 2, full, st);
    for (int32_t d = 0; d < br; d++) strides[d] = st[d];
}

void goblin__ref_sdpa_init(goblin__ref_sdpa *a, const goblin__node *node, goblin_dtype dt,
                           const goblin_tensor *q, const goblin_tensor *k,
                           const goblin_tensor *v, const goblin_tensor *mask, int32_t br,
                           const int64_t *shape) {
    a->dt = dt;
    a->q = q;
    a->k = k;
    a->v = v;
    a->mask = mask;
    a->br = br;
    a->L = shape[br];
    a->Ev = shape[br + 1];
    a->E = q->shape[q->rank - 1];
    a->S = k->shape[k->rank - 2];
    a->scale = goblin__sdpa_scale(node, a->E);
    a->causal = goblin__attr_i(node, GOBLIN_ATTR_CAUSAL, 0) != 0;
    batch_strides(q, br, shape, a->bs[0]);
    batch_strides(k, br, shape, a->bs[1]);
    batch_strides(v, br, shape, a->bs[2]);
    /* The mask broadcasts over [batch..., L, S] as a whole. */
    memset(a->mstr, 0, sizeof a->mstr);
    if (mask) {
        int64_t full[GOBLIN_MAX_RANK];
        for (int32_t d = 0; d < br; d++) full[d] = shape[d];
        full[br] = a->L;
        full[br + 1] = a->S;
        goblin__bcast_strides(mask, br + 2, full, a->mstr);
    }
    for (int32_t d = 0; d < br; d++) a->bs[3][d] = a->mstr[d];
    a->qr = q->strides[q->rank - 2];
    a->qc = q->strides[q->rank - 1];
    a->kr = k->strides[k->rank - 2];
    a->kc = k->strides[k->rank - 1];
    a->vr = v->strides[v->rank - 2];
    a->vc = v->strides[v->rank - 1];
    a->batch = 1;
    for (int32_t d = 0; d < br; d++) a->batch *= shape[d];
}

double goblin__ref_sdpa_scores(const goblin__ref_sdpa *a, const int64_t *off, int64_t i,
                               double *s, bool *nan) {
    goblin_dtype dt = a->dt;
    const goblin_tensor *mask = a->mask;
    double mx = -INFINITY;
    for (int64_t j = 0; j < a->S; j++) {
        double x;
        if (a->causal && j > i) {
            x = -INFINITY;
        } else {
            double dot = 0;
            for (int64_t e = 0; e < a->E; e++)
                dot += goblin__load_f64(dt, a->q->data, off[0] + i * a->qr + e * a->qc) *
                       goblin__load_f64(dt, a->k->data, off[1] + j * a->kr + e * a->kc);
            x = a->scale * dot;
            if (mask) {
                int64_t mo = off[3] + i * a->mstr[a->br] + j * a->mstr[a->br + 1];
                if (mask->dtype == GOBLIN_DTYPE_BOOL)
                    x = ((const uint8_t *)mask->data)[mo] ? x : -INFINITY;
                else
                    x += goblin__load_f64(dt, mask->data, mo);
            }
        }
        if (isnan(x)) *nan = true;
        if (x > mx) mx = x;
        s[j] = x;
    }
    return mx;
}

static goblin_err ref_sdpa(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    goblin_dtype dt = out->dtype;
    const goblin_tensor *q = &in[0], *kk = &in[1], *v = &in[2];
    const goblin_tensor *mask = n_in >= 4 ? &in[3] : NULL;
    int32_t br = out->rank - 2;
    /* q, k and v may be strided views (SDPA reads strided inputs) */
    goblin__ref_sdpa a;
    goblin__ref_sdpa_init(&a, node, dt, q, kk, v, mask, br, out->shape);
    int64_t L = a.L, Ev = a.Ev, S = a.S, batch = a.batch;
    double *s = goblin__alloc(sizeof(double) * (size_t)(S > 0 ? S : 1));
    double *acc = goblin__alloc(sizeof(double) * (size_t)(Ev > 0 ? Ev : 1));
    if (!s || !acc) {
        goblin__free(s);
        goblin__free(acc);
        return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory");
    }
    goblin__nditer it;
    goblin__nditer_init(&it, br, out->shape, 4, a.bs);
    int64_t oidx = 0;
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t i = 0; i < L; i++) {
            bool nan = false;
            double mx = goblin__ref_sdpa_scores(&a, it.off, i, s, &nan);
            for (int64_t e = 0; e < Ev; e++) acc[e] = 0;
            if (nan || mx == INFINITY) {
                for (int64_t e = 0; e < Ev; e++) acc[e] = NAN;
            } else {
                /* A row with no key to attend gets all-zero weights (torch's _safe_softmax);
                 * the weighted sum still runs so inf/NaN in v propagate as in torch. */
                double z = 1;
                if (mx > -INFINITY) {
                    z = 0;
                    for (int64_t j = 0; j < S; j++) {
                        s[j] = exp(s[j] - mx);
                        z += s[j];
                    }
                } else {
                    for (int64_t j = 0; j < S; j++) s[j] = 0;
                }
                for (int64_t j = 0; j < S; j++)
                    for (int64_t e = 0; e < Ev; e++)
                        acc[e] += s[j] * goblin__load_f64(dt, v->data, it.off[2] + j * a.vr + e * a.vc);
                for (int64_t e = 0; e < Ev; e++) acc[e] /= z;
            }
            for (int64_t e = 0; e < Ev; e++) goblin__store_f64(dt, out->data, oidx++, acc[e]);
        }
        goblin__nditer_next(&it);
    }
    goblin__free(s);
    goblin__free(acc);
    return GOBLIN_OK;
}

void goblin__ref_register_nn(goblin__kernel_fn *t) {
    t[GOBLIN_OP_MATMUL] = ref_matmul;
    t[GOBLIN_OP_CONV2D] = ref_conv2d;
    t[GOBLIN_OP_MAX_POOL2D] = ref_max_pool2d;
    t[GOBLIN_OP_AVG_POOL2D] = ref_avg_pool2d;
    t[GOBLIN_OP_ADAPTIVE_AVG_POOL2D] = ref_adaptive_avg_pool2d;
    t[GOBLIN_OP_SDPA] = ref_sdpa;
}
