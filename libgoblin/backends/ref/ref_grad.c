/* libgoblin/backends/ref/ref_grad.c - reference kernels of the fused backward ops.
 *
 * Every float dtype is computed in f64 (loads and stores through kernel_util.h,
 * f16/bf16 rounded once on store): these are the oracle, so they use the
 * most accurate obvious loop. Accumulation orders are fixed (row-major over the
 * forward output), so results are deterministic. */
#include <math.h>
#include <string.h>
#include "backends/backend.h"
#include "backends/kernel_util.h"
#include "ops/nn.h"
#include "ref_impl.h"

static double *zeros(int64_t n) {
    return goblin__calloc((size_t)(n > 0 ? n : 1), sizeof(double));
}

static goblin_err store_all(goblin_tensor *out, double *acc, int64_t n) {
    for (int64_t i = 0; i < n; i++) goblin__store_f64(out->dtype, out->data, i, acc[i]);
    goblin__free(acc);
    return GOBLIN_OK;
}

static goblin_err oom(goblin__kctx *k) {
    return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory");
}

/* Both conv gradients walk the forward loop nest and scatter each product. */
static goblin_err k_conv_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                             int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    bool wgrad = node->op == GOBLIN_OP_CONV2D_BACKWARD_WEIGHT;
    const goblin_tensor *go = &in[0], *other = &in[1];
    goblin__conv_geom g;
    goblin_err e = goblin__conv_geom_get(node, wgrad ? other->shape : out->shape,
                                         wgrad ? out->shape : other->shape, &g, k->msg, k->cap);
    if (e) return e;
    goblin_dtype dt = go->dtype;
    int64_t total = goblin__numel(out);
    double *acc = zeros(total);
    if (!acc) return oom(k);
    int64_t opg = g.o / g.groups, cpg = g.c / g.groups;
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t o = 0; o < g.o; o++) {
            int64_t grp = o / opg;
            for (int64_t oh = 0; oh < g.oh; oh++)
                for (int64_t ow = 0; ow < g.ow; ow++) {
                    double gv = goblin__load_f64(dt, go->data, ((n * g.o + o) * g.oh + oh) * g.ow + ow);
                    for (int64_t cc = 0; cc < cpg; cc++) {
                        int64_t c = grp * cpg + cc;
                        for (int64_t i = 0; i < g.kh; i++) {
                            int64_t ih = oh * g.sh - g.ph + i * g.dh;
                            if (ih < 0 || ih >= g.h) continue;
                            for (int64_t j = 0; j < g.kw; j++) {
                                int64_t iw = ow * g.sw - g.pw + j * g.dw;
                                if (iw < 0 || iw >= g.w) continue;
                                int64_t xi = ((n * g.c + c) * g.h + ih) * g.w + iw;
                                int64_t wi = ((o * cpg + cc) * g.kh + i) * g.kw + j;
                                if (wgrad) acc[wi] += gv * goblin__load_f64(dt, other->data, xi);
                                else acc[xi] += gv * goblin__load_f64(dt, other->data, wi);
                            }
                        }
                    }
                }
        }
    return store_all(out, acc, total);
}

static goblin_err k_max_pool_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                 int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    const goblin_tensor *go = &in[0], *x = &in[1];
    goblin__pool_geom g;
    goblin_err e = goblin__pool_geom_get(node, x->rank, x->shape, &g, k->msg, k->cap);
    if (e) return e;
    goblin_dtype dt = x->dtype;
    int64_t total = goblin__numel(out);
    double *acc = zeros(total);
    if (!acc) return oom(k);
    int64_t oidx = 0;
    for (int64_t p = 0; p < g.planes; p++) {
        int64_t base = p * g.h * g.w;
        for (int64_t oh = 0; oh < g.oh; oh++)
            for (int64_t ow = 0; ow < g.ow; ow++, oidx++) {
                /* Same selection as the forward kernel: strictly greater keeps the
                 * first maximum, and the first NaN wins. */
                double best = -INFINITY;
                int64_t at = -1;
                for (int64_t i = 0; i < g.kh; i++) {
                    int64_t ih = oh * g.sh - g.ph + i * g.dh;
                    if (ih < 0 || ih >= g.h) continue;
                    for (int64_t j = 0; j < g.kw; j++) {
                        int64_t iw = ow * g.sw - g.pw + j * g.dw;
                        if (iw < 0 || iw >= g.w) continue;
                        double v = goblin__load_f64(dt, x->data, base + ih * g.w + iw);
                        if (at < 0 || v > best || isnan(v)) {
                            best = v;
                            at = base + ih * g.w + iw;
                        }
                        if (isnan(best)) goto done;
                    }
                }
            done:
                if (at >= 0) acc[at] += goblin__load_f64(dt, go->data, oidx);
            }
    }
    return store_all(out, acc, total);
}

static goblin_err k_avg_pool_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                 int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    const goblin_tensor *go = &in[0];
    goblin__pool_geom g;
    goblin_err e = goblin__pool_geom_get(node, out->rank, out->shape, &g, k->msg, k->cap);
    if (e) return e;
    goblin_dtype dt = go->dtype;
    int64_t total = goblin__numel(out);
    double *acc = zeros(total);
    if (!acc) return oom(k);
    int64_t oidx = 0;
    for (int64_t p = 0; p < g.planes; p++) {
        int64_t base = p * g.h * g.w;
        for (int64_t oh = 0; oh < g.oh; oh++)
            for (int64_t ow = 0; ow < g.ow; ow++, oidx++) {
                /* torch's avg_pool2d divisor: the window clipped to the padded input
                 * (count_include_pad) or to the input itself. */
                int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
                int64_t h1 = h0 + g.kh, w1 = w0 + g.kw;
                if (h1 > g.h + g.ph) h1 = g.h + g.ph;
                if (w1 > g.w + g.pw) w1 = g.w + g.pw;
                int64_t pool = (h1 - h0) * (w1 - w0);
                if (h0 < 0) h0 = 0;
                if (w0 < 0) w0 = 0;
                if (h1 > g.h) h1 = g.h;
                if (w1 > g.w) w1 = g.w;
                if (h0 >= h1 || w0 >= w1) continue; /* the forward wrote 0: no gradient */
                int64_t div = g.count_include_pad ? pool : (h1 - h0) * (w1 - w0);
                double gv = goblin__load_f64(dt, go->data, oidx) / (double)div;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) acc[base + ih * g.w + iw] += gv;
            }
    }
    return store_all(out, acc, total);
}

static goblin_err k_adaptive_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                 int32_t n_in, goblin_tensor *out) {
    (void)node;
    (void)n_in;
    const goblin_tensor *go = &in[0];
    int32_t r = out->rank;
    int64_t planes = 1, h = out->shape[r - 2], w = out->shape[r - 1];
    int64_t oh = go->shape[r - 2], ow = go->shape[r - 1];
    for (int32_t d = 0; d < r - 2; d++) planes *= out->shape[d];
    int64_t total = goblin__numel(out);
    double *acc = zeros(total);
    if (!acc) return oom(k);
    int64_t oidx = 0;
    for (int64_t p = 0; p < planes; p++)
        for (int64_t i = 0; i < oh; i++) {
            int64_t h0, h1;
            goblin__adaptive_window(i, h, oh, &h0, &h1);
            for (int64_t j = 0; j < ow; j++, oidx++) {
                int64_t w0, w1;
                goblin__adaptive_window(j, w, ow, &w0, &w1);
                double gv = goblin__load_f64(go->dtype, go->data, oidx) / (double)((h1 - h0) * (w1 - w0));
                for (int64_t a = h0; a < h1; a++)
                    for (int64_t b = w0; b < w1; b++) acc[(p * h + a) * w + b] += gv;
            }
        }
    return store_all(out, acc, total);
}

/* Batch norm: per channel c over M = N * spatial values. Training:
 * dx = w rstd / M (M dy - sum dy - xhat sum(dy xhat)); eval: dx = dy w rstd with
 * the running statistics. dweight = sum dy xhat, dbias = sum dy in both. */
static goblin_err k_bn_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    const goblin_tensor *go = &in[0], *x = &in[1];
    goblin_dtype dt = x->dtype;
    bool training = goblin__attr_i(node, GOBLIN_ATTR_TRAINING, 0) != 0;
    double eps = goblin__attr_f(node, GOBLIN_ATTR_EPS, 1e-5);
    int64_t which = goblin__attr_i(node, GOBLIN_ATTR_INDEX, 0);
    int64_t n = x->shape[0], c = x->shape[1], sp = 1;
    for (int32_t d = 2; d < x->rank; d++) sp *= x->shape[d];
    int64_t m = n * sp;
    for (int64_t ch = 0; ch < c; ch++) {
        double mean, var;
        if (training) {
            double s = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < sp; j++) s += goblin__load_f64(dt, x->data, (i * c + ch) * sp + j);
            mean = s / (double)m;
            double v = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < sp; j++) {
                    double dxv = goblin__load_f64(dt, x->data, (i * c + ch) * sp + j) - mean;
                    v += dxv * dxv;
                }
            var = v / (double)m;
        } else {
            mean = goblin__load_f64(dt, in[3].data, ch);
            var = goblin__load_f64(dt, in[4].data, ch);
        }
        double rstd = 1.0 / sqrt(var + eps);
        double wv = goblin__load_f64(dt, in[2].data, ch);
        double sdy = 0, sdyx = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < sp; j++) {
                int64_t o = (i * c + ch) * sp + j;
                double dy = goblin__load_f64(dt, go->data, o);
                sdy += dy;
                sdyx += dy * (goblin__load_f64(dt, x->data, o) - mean) * rstd;
            }
        if (which == 1) {
            goblin__store_f64(dt, out->data, ch, sdyx);
        } else if (which == 2) {
            goblin__store_f64(dt, out->data, ch, sdy);
        } else {
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < sp; j++) {
                    int64_t o = (i * c + ch) * sp + j;
                    double dy = goblin__load_f64(dt, go->data, o);
                    double r;
                    if (training) {
                        double xh = (goblin__load_f64(dt, x->data, o) - mean) * rstd;
                        r = wv * rstd / (double)m * ((double)m * dy - sdy - xh * sdyx);
                    } else {
                        r = dy * wv * rstd;
                    }
                    goblin__store_f64(dt, out->data, o, r);
                }
        }
    }
    return GOBLIN_OK;
}

/* NLL_LOSS_BACKWARD and CROSS_ENTROPY_BACKWARD: same layout as the forward
 * kernel, element (n, c, d) at (n*C + c)*D + d. */
static goblin_err k_loss_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                             int32_t n_in, goblin_tensor *out) {
    bool ce = node->op == GOBLIN_OP_CROSS_ENTROPY_BACKWARD;
    const goblin_tensor *go = &in[0], *x = ce ? &in[1] : NULL, *t = &in[ce ? 2 : 1];
    const void *wt = n_in > (ce ? 3 : 2) ? in[ce ? 3 : 2].data : NULL;
    goblin_dtype dt = out->dtype;
    int64_t n = 1, c, dd = 1;
    if (out->rank == 1) {
        c = out->shape[0];
    } else {
        n = out->shape[0];
        c = out->shape[1];
        for (int32_t d = 2; d < out->rank; d++) dd *= out->shape[d];
    }
    int64_t red = goblin__attr_i(node, GOBLIN_ATTR_REDUCTION, GOBLIN_REDUCTION_MEAN);
    int64_t ignore = goblin__attr_i(node, GOBLIN_ATTR_IGNORE_INDEX, -100);
    double eps = ce ? goblin__attr_f(node, GOBLIN_ATTR_LABEL_SMOOTHING, 0.0) : 0.0;
    /* First pass: validate targets and sum the weights (the mean's divisor). */
    double wsum = 0;
    for (int64_t pos = 0; pos < n * dd; pos++) {
        int64_t tg = goblin__load_i64(t->dtype, t->data, pos);
        if (tg == ignore) continue;
        if (tg < 0 || tg >= c)
            return goblin__errf(k->msg, k->cap, GOBLIN_EINDEX,
                                "target %lld at position %lld is outside [0, %lld) and is not "
                                "ignore_index %lld",
                                (long long)tg, (long long)pos, (long long)c, (long long)ignore);
        wsum += wt ? goblin__load_f64(dt, wt, tg) : 1.0;
    }
    int64_t total = goblin__numel(out);
    double *acc = zeros(total);
    double *dl = zeros(c);
    if (!acc || !dl) {
        goblin__free(acc);
        goblin__free(dl);
        return oom(k);
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t d = 0; d < dd; d++) {
            int64_t pos = i * dd + d;
            int64_t tg = goblin__load_i64(t->dtype, t->data, pos);
            if (tg == ignore) continue;
            double scale = red == GOBLIN_REDUCTION_NONE ? goblin__load_f64(dt, go->data, pos)
                           : red == GOBLIN_REDUCTION_SUM ? goblin__load_f64(dt, go->data, 0)
                                                         : goblin__load_f64(dt, go->data, 0) / wsum;
            int64_t base = i * c * dd + d;
            double w = wt ? goblin__load_f64(dt, wt, tg) : 1.0;
            if (!ce) {
                acc[base + tg * dd] = -w * scale;
                continue;
            }
            /* dl_c = d loss / d log_softmax_c; then the log_softmax backward
             * dx_c = dl_c - p_c sum dl. */
            double sdl = 0;
            for (int64_t cc = 0; cc < c; cc++) {
                double v = -eps / (double)c * (wt ? goblin__load_f64(dt, wt, cc) : 1.0);
                if (cc == tg) v -= (1 - eps) * w;
                dl[cc] = v * scale;
                sdl += dl[cc];
            }
            double mx = -INFINITY, s = 0;
            for (int64_t cc = 0; cc < c; cc++) {
                double v = goblin__load_f64(dt, x->data, base + cc * dd);
                if (v > mx || v != v) mx = v;
            }
            for (int64_t cc = 0; cc < c; cc++) s += exp(goblin__load_f64(dt, x->data, base + cc * dd) - mx);
            for (int64_t cc = 0; cc < c; cc++) {
                double p = exp(goblin__load_f64(dt, x->data, base + cc * dd) - mx) / s;
                acc[base + cc * dd] = dl[cc] - p * sdl;
            }
        }
    goblin__free(dl);
    return store_all(out, acc, total);
}

static goblin_err k_emb_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    (void)node;
    (void)n_in;
    const goblin_tensor *go = &in[0], *idx = &in[1];
    int64_t v = out->shape[0], dim = out->shape[1], cnt = goblin__numel(idx);
    int64_t total = goblin__numel(out);
    double *acc = zeros(total);
    if (!acc) return oom(k);
    for (int64_t i = 0; i < cnt; i++) {
        int64_t r = goblin__load_i64(idx->dtype, idx->data, i);
        if (r < 0 || r >= v) {
            goblin__free(acc);
            return goblin__errf(k->msg, k->cap, GOBLIN_EINDEX,
                                "index %lld at position %lld is outside [0, %lld)", (long long)r,
                                (long long)i, (long long)v);
        }
        for (int64_t j = 0; j < dim; j++) acc[r * dim + j] += goblin__load_f64(go->dtype, go->data, i * dim + j);
    }
    return store_all(out, acc, total);
}

/* SDPA backward for one output (index 0 dq, 1 dk, 2 dv): recompute each row's
 * scores and weights exactly as the forward kernel, then
 * dv_j += p_j g, dp_j = g . v_j, ds_j = p_j (dp_j - sum_j p_j dp_j),
 * dq += scale ds_j k_j, dk_j += scale ds_j q. */
static goblin_err k_sdpa_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                             int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *go = &in[0], *q = &in[1], *kk = &in[2], *v = &in[3];
    const goblin_tensor *mask = n_in >= 5 ? &in[4] : NULL;
    goblin_dtype dt = go->dtype;
    int32_t br = go->rank - 2;
    goblin__ref_sdpa a;
    goblin__ref_sdpa_init(&a, node, dt, q, kk, v, mask, br, go->shape);
    int64_t L = a.L, Ev = a.Ev, E = a.E, S = a.S, batch = a.batch;
    double scale = a.scale;
    int64_t which = goblin__attr_i(node, GOBLIN_ATTR_INDEX, 0);
    int64_t rows = out->shape[br], cols = out->shape[br + 1], total = goblin__numel(out);
    double *acc = zeros(total), *p = zeros(S), *dp = zeros(S);
    if (!acc || !p || !dp) {
        goblin__free(acc);
        goblin__free(p);
        goblin__free(dp);
        return oom(k);
    }
    goblin__nditer it;
    goblin__nditer_init(&it, br, go->shape, 4, a.bs);
    for (int64_t b = 0; b < batch; b++) {
        double *ob = acc + b * rows * cols;
        for (int64_t i = 0; i < L; i++) {
            bool nan = false;
            double mx = goblin__ref_sdpa_scores(&a, it.off, i, p, &nan);
            int64_t grow = (b * L + i) * Ev;
            if (nan || mx == INFINITY) {
                /* the forward row is NaN: so is everything it feeds */
                if (which == 0)
                    for (int64_t e = 0; e < cols; e++) ob[i * cols + e] = NAN;
                else
                    for (int64_t r = 0; r < rows * cols; r++) ob[r] = NAN;
                continue;
            }
            if (mx == -INFINITY) continue; /* no key attended: zero weights, zero gradient */
            double z = 0;
            for (int64_t j = 0; j < S; j++) {
                p[j] = exp(p[j] - mx);
                z += p[j];
            }
            double spd = 0;
            for (int64_t j = 0; j < S; j++) {
                p[j] /= z;
                double d = 0;
                for (int64_t e = 0; e < Ev; e++)
                    d += goblin__load_f64(dt, go->data, grow + e) *
                         goblin__load_f64(dt, v->data, it.off[2] + j * Ev + e);
                dp[j] = d;
                spd += p[j] * d;
            }
            for (int64_t j = 0; j < S; j++) {
                double ds = p[j] * (dp[j] - spd) * scale;
                if (which == 2) {
                    for (int64_t e = 0; e < Ev; e++)
                        ob[j * cols + e] += p[j] * goblin__load_f64(dt, go->data, grow + e);
                } else if (which == 1) {
                    for (int64_t e = 0; e < E; e++)
                        ob[j * cols + e] += ds * goblin__load_f64(dt, q->data, it.off[0] + i * E + e);
                } else {
                    for (int64_t e = 0; e < E; e++)
                        ob[i * cols + e] += ds * goblin__load_f64(dt, kk->data, it.off[1] + j * E + e);
                }
            }
        }
        goblin__nditer_next(&it);
    }
    goblin__free(p);
    goblin__free(dp);
    return store_all(out, acc, total);
}

/* LAYER_NORM_BACKWARD: per row of the last norm_ndim dims, the statistics as the forward
 * reference computes them (mean, then the mean of squared deviations), then
 * d x = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) (index 0) or the column sums of
 * grad_out xhat in row order (index 1); all in f64. */
static goblin_err k_ln_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *go = &in[0], *x = &in[1];
    goblin_dtype dt = x->dtype;
    int64_t nd = goblin__attr_i(node, GOBLIN_ATTR_NORM_NDIM, 1);
    double eps = goblin__attr_f(node, GOBLIN_ATTR_EPS, 1e-5);
    bool wgrad = goblin__attr_i(node, GOBLIN_ATTR_INDEX, 0) == 1;
    const void *w = n_in > 2 ? in[2].data : NULL;
    int64_t len = 1, rows = 1;
    for (int32_t d = 0; d < x->rank; d++) {
        if (d >= x->rank - nd) len *= x->shape[d];
        else rows *= x->shape[d];
    }
    double *acc = zeros(wgrad ? len : 0), *xh = zeros(len);
    if (!acc || !xh) {
        goblin__free(acc);
        goblin__free(xh);
        return oom(k);
    }
    for (int64_t r = 0; r < rows; r++) {
        int64_t b = r * len;
        double mean = 0, m2 = 0;
        for (int64_t j = 0; j < len; j++) mean += goblin__load_f64(dt, x->data, b + j);
        mean /= (double)len;
        for (int64_t j = 0; j < len; j++) {
            double d = goblin__load_f64(dt, x->data, b + j) - mean;
            m2 += d * d;
        }
        double rstd = 1.0 / sqrt(m2 / (double)len + eps);
        for (int64_t j = 0; j < len; j++) xh[j] = (goblin__load_f64(dt, x->data, b + j) - mean) * rstd;
        if (wgrad) {
            for (int64_t j = 0; j < len; j++) acc[j] += goblin__load_f64(dt, go->data, b + j) * xh[j];
            continue;
        }
        double sa = 0, sb = 0;
        for (int64_t j = 0; j < len; j++) {
            double g = goblin__load_f64(dt, go->data, b + j);
            if (w) g *= goblin__load_f64(dt, w, j);
            sa += g;
            sb += g * xh[j];
        }
        sa /= (double)len;
        sb /= (double)len;
        for (int64_t j = 0; j < len; j++) {
            double g = goblin__load_f64(dt, go->data, b + j);
            if (w) g *= goblin__load_f64(dt, w, j);
            goblin__store_f64(dt, out->data, b + j, rstd * (g - sa - xh[j] * sb));
        }
    }
    goblin__free(xh);
    if (wgrad) return store_all(out, acc, len);
    goblin__free(acc);
    return GOBLIN_OK;
}

/* gelu'(x) in double, torch's formulas; the erf form's Phi as 0.5 erfc(-x / sqrt2) (no
 * cancellation for x < 0). +-inf gives NaN (inf * 0), as torch. */
static double gelu_grad(double x, bool tanh_form) {
    if (tanh_form) {
        const double k0 = 0.79788456080286535588, k1 = 0.044715;
        double x2 = x * x, t = tanh(k0 * (x + k1 * x2 * x));
        return 0.5 * (1.0 + t) + 0.5 * x * ((1.0 - t * t) * (k0 * (1.0 + 3.0 * k1 * x2)));
    }
    double cdf = 0.5 * erfc(-x * 0.70710678118654752440);
    return cdf + x * (exp(-0.5 * x * x) * 0.39894228040143267794);
}

static goblin_err k_gelu_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                             int32_t n_in, goblin_tensor *out) {
    (void)k;
    (void)n_in;
    const goblin_tensor *go = &in[0], *x = &in[1];
    goblin_dtype dt = x->dtype;
    bool th = goblin__attr_i(node, GOBLIN_ATTR_APPROXIMATE, GOBLIN_GELU_ERF) == GOBLIN_GELU_TANH;
    int64_t n = goblin__numel(out);
    for (int64_t i = 0; i < n; i++)
        goblin__store_f64(dt, out->data, i,
                          goblin__load_f64(dt, go->data, i) *
                              gelu_grad(goblin__load_f64(dt, x->data, i), th));
    return GOBLIN_OK;
}

/* RELU_BACKWARD: grad_out where x > 0, else +0 (x NaN or <= 0, -0 included), the value of
 * where(x > 0, grad_out, 0). x is compared exactly (widened to double); grad_out's element
 * is moved as raw bits (NaN payloads and signs kept, as where moves them), +0 is all-zero
 * bytes. */
static goblin_err k_relu_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                             int32_t n_in, goblin_tensor *out) {
    (void)k;
    (void)node;
    (void)n_in;
    const goblin_tensor *go = &in[0], *x = &in[1];
    size_t es = goblin_dtype_size(out->dtype);
    int64_t n = goblin__numel(out);
    const char *g = go->data;
    char *y = out->data;
    for (int64_t i = 0; i < n; i++) {
        if (goblin__load_f64(x->dtype, x->data, i) > 0) memcpy(y + (size_t)i * es, g + (size_t)i * es, es);
        else memset(y + (size_t)i * es, 0, es);
    }
    return GOBLIN_OK;
}

void goblin__ref_register_grad(goblin__kernel_fn *t) {
    t[GOBLIN_OP_RELU_BACKWARD] = k_relu_bwd;
    t[GOBLIN_OP_LAYER_NORM_BACKWARD] = k_ln_bwd;
    t[GOBLIN_OP_GELU_BACKWARD] = k_gelu_bwd;
    t[GOBLIN_OP_SDPA_BACKWARD] = k_sdpa_bwd;
    t[GOBLIN_OP_CONV2D_BACKWARD_INPUT] = k_conv_bwd;
    t[GOBLIN_OP_CONV2D_BACKWARD_WEIGHT] = k_conv_bwd;
    t[GOBLIN_OP_MAX_POOL2D_BACKWARD] = k_max_pool_bwd;
    t[GOBLIN_OP_AVG_POOL2D_BACKWARD] = k_avg_pool_bwd;
    t[GOBLIN_OP_ADAPTIVE_AVG_POOL2D_BACKWARD] = k_adaptive_bwd;
    t[GOBLIN_OP_BATCH_NORM_BACKWARD] = k_bn_bwd;
    t[GOBLIN_OP_NLL_LOSS_BACKWARD] = k_loss_bwd;
    t[GOBLIN_OP_CROSS_ENTROPY_BACKWARD] = k_loss_bwd;
    t[GOBLIN_OP_EMBEDDING_BACKWARD] = k_emb_bwd;
}
