/* libgoblin/backends/blis/blis_train2.c - more training hot spots on the CPU backend:
 * BATCH_NORM (training and eval) and BATCH_NORM_BACKWARD, MAX_POOL2D and its backward,
 * EMBEDDING_BACKWARD, RELU and RELU_BACKWARD (f32 and f64; other dtypes return GOBLIN_ENOTSUP
 * so the reference kernel runs), and the pure copies PERMUTE, SLICE, PAD, RESHAPE and COPY (any dtype of
 * 1, 2, 4 or 8 bytes).
 *
 * Bits: max pooling, embedding backward, relu, relu backward and the copies do the reference kernel's
 * arithmetic in the same order (f64 accumulators, row-major sums per output cell / per
 * index), so results are the reference's bits. Batch norm gathers each channel's
 * statistics in one pass of shifted sums in fixed double lanes (see below): within the
 * op's contract, not the reference's bits.
 * Threads take independent slices only (channels, planes, column blocks of the
 * embedding, chunks of a copy), so results do not depend on k->threads. */
#pragma GCC diagnostic ignored "-Wpsabi" /* vector helpers are always inlined: no ABI */
#include <math.h>
#include <string.h>
#include "base/alloc.h"
#include "blis_impl.h"
#include "ops/nn.h"

#define MIN_PARALLEL_ELEMS 32768

static bool f32_or_f64(goblin_dtype dt) { return dt == GOBLIN_DTYPE_F32 || dt == GOBLIN_DTYPE_F64; }

static int32_t threads_for(const goblin__kctx *k, int64_t work, int64_t items) {
    int32_t t = k->threads > 0 ? k->threads : 1;
    if (work < MIN_PARALLEL_ELEMS) t = 1;
    if (items < t) t = items > 0 ? (int32_t)items : 1;
    return t;
}

/* ---- batch norm ---------------------------------------------------------- */

typedef struct bn_job {
    const goblin_tensor *in;
    goblin_tensor *out;
    int64_t n, c, sp;
    bool training;
    double eps;
    int64_t which; /* backward: 0 dx, 1 dweight, 2 dbias */
    double *st;    /* backward, training: per channel mean, var, sum dy, sum dy (x - mean) */
} bn_job;

/* Per channel, one pass over x (and dy) gathers the shifted sums S1 = sum (x - K),
 * S2 = sum (x - K)^2, Sy = sum dy, Syx = sum dy (x - K) with K = the channel's first
 * value; then mean = K + S1/M, var = S2/M - (S1/M)^2 and sum dy (x - mean) =
 * Syx - (S1/M) Sy. As (K - mean)^2 <= M var, the cancellation costs at most about M
 * double roundings relative to var, inside the op's gamma_(2k+16) contract for f32
 * and f64 alike. The sums run in 8 double lanes (element q of a row of `sp` values to
 * lane q mod 8 while a whole 8 fit, the rest to 8 tail lanes), folded in a fixed order;
 * GCC vector types of double without FMA, so the bits are the same on every ISA clone
 * and thread count (threads take whole channels). The per-element passes: the forward
 * (training and eval) as x a + b' in the input's type (BN_FWD), the backward's d x as A dy +
 * B (x - mean) + C in double (BN_BWD), eval's d x as the reference's expression. */
#define INL static inline __attribute__((always_inline))
#define CLONES __attribute__((target_clones("avx2", "default")))

typedef float v4f __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));

/* element by element: GCC makes this one vcvtps2pd from memory (a memcpy to v4f and
 * __builtin_convertvector became two half conversions and an insert) */
INL v4d ld4_f32(const float *p) { return (v4d){p[0], p[1], p[2], p[3]}; }
INL void st4_f32(float *p, v4d v) {
    v4f r = __builtin_convertvector(v, v4f);
    memcpy(p, &r, sizeof r);
}
INL v4d ld4_f64(const double *p) {
    v4d v;
    memcpy(&v, p, sizeof v);
    return v;
}
INL void st4_f64(double *p, v4d v) { memcpy(p, &v, sizeof v); }

/* 8 lanes (two vectors) + 8 tail lanes, folded lane by lane in order */
INL double fold8(v4d a0, v4d a1, const double *tail) {
    double v[8], s = 0;
    memcpy(v, &a0, sizeof a0);
    memcpy(v + 4, &a1, sizeof a1);
    for (int i = 0; i < 8; i++) s += v[i] + tail[i];
    return s;
}

typedef struct bn_sums {
    double k, s1, s2, sy, syx;
} bn_sums;

#define BN_PASS(T, S)                                                                         \
    /* the shifted sums of channel ch around K (go NULL: no Sy, Syx) */                       \
    INL void S##_pass(const bn_job *j, const T *x, const T *go, int64_t ch, double K, bn_sums *r) { \
        v4d a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0}, c0 = {0}, c1 = {0}, e0 = {0}, e1 = {0};   \
        double ta[8] = {0}, tb[8] = {0}, tc[8] = {0}, te[8] = {0};                            \
        v4d vk = {K, K, K, K};                                                                \
        for (int64_t i = 0; i < j->n; i++) {                                                  \
            int64_t o = (i * j->c + ch) * j->sp;                                              \
            const T *p = x + o;                                                               \
            int64_t q = 0;                                                                    \
            if (go) {                                                                         \
                const T *g = go + o;                                                          \
                for (; q + 8 <= j->sp; q += 8) {                                              \
                    v4d d0 = ld4_##S(p + q) - vk, d1 = ld4_##S(p + q + 4) - vk;               \
                    v4d y0 = ld4_##S(g + q), y1 = ld4_##S(g + q + 4);                         \
                    a0 += d0;                                                                 \
                    a1 += d1;                                                                 \
                    b0 += d0 * d0;                                                            \
                    b1 += d1 * d1;                                                            \
                    c0 += y0;                                                                 \
                    c1 += y1;                                                                 \
                    e0 += y0 * d0;                                                            \
                    e1 += y1 * d1;                                                            \
                }                                                                             \
                for (int t = 0; q < j->sp; q++, t++) {                                        \
                    double d = (double)p[q] - K, y = (double)g[q];                            \
                    ta[t] += d;                                                               \
                    tb[t] += d * d;                                                           \
                    tc[t] += y;                                                               \
                    te[t] += y * d;                                                           \
                }                                                                             \
            } else {                                                                          \
                for (; q + 8 <= j->sp; q += 8) {                                              \
                    v4d d0 = ld4_##S(p + q) - vk, d1 = ld4_##S(p + q + 4) - vk;               \
                    a0 += d0;                                                                 \
                    a1 += d1;                                                                 \
                    b0 += d0 * d0;                                                            \
                    b1 += d1 * d1;                                                            \
                }                                                                             \
                for (int t = 0; q < j->sp; q++, t++) {                                        \
                    double d = (double)p[q] - K;                                              \
                    ta[t] += d;                                                               \
                    tb[t] += d * d;                                                           \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        r->k = K;                                                                             \
        r->s1 = fold8(a0, a1, ta);                                                            \
        r->s2 = fold8(b0, b1, tb);                                                            \
        r->sy = fold8(c0, c1, tc);                                                            \
        r->syx = fold8(e0, e1, te);                                                           \
    }                                                                                         \
    /* training: mean and var of channel ch (and with go its d sums); eval: the inputs'    \
     * statistics (and with go, sums around the running mean) */                              \
    INL void S##_stats(const bn_job *j, const T *x, const T *go, int64_t ch, double *mean, double *var, \
                       double *sdy, double *sdyxm) {                                          \
        double m = (double)(j->n * j->sp);                                                    \
        bn_sums r;                                                                            \
        if (j->training) {                                                                    \
            double K = m > 0 ? (double)x[ch * j->sp] : 0;                                     \
            S##_pass(j, x, go, ch, K, &r);                                                    \
            double d = r.s1 / m;                                                              \
            *mean = K + d;                                                                    \
            *var = r.s2 / m - d * d;                                                          \
            if (*var < 0) *var = 0;                                                           \
            if (go) {                                                                         \
                *sdy = r.sy;                                                                  \
                *sdyxm = m > 0 ? r.syx - d * r.sy : 0;                                        \
            }                                                                                 \
        } else {                                                                              \
            *mean = (double)((const T *)j->in[3].data)[ch];                                   \
            *var = (double)((const T *)j->in[4].data)[ch];                                    \
            if (go) {                                                                         \
                S##_pass(j, x, go, ch, *mean, &r);                                            \
                *sdy = r.sy;                                                                  \
                *sdyxm = r.syx;                                                               \
            }                                                                                 \
        }                                                                                     \
    }
BN_PASS(float, f32)
BN_PASS(double, f64)

/* y = x a + b' in T with a = w rstd and b' = b - mean a rounded to T once (a mul and
 * an add per element, no FMA in either clone: the same bits on each): |y - exact| stays
 * within a few roundings of (|x| + |mean|) rstd |w| + |b|, inside the op's contract. */
#define BN_FWD(T, S, VT, VL, NAME)                                                            \
    static CLONES void NAME(void *arg, int64_t ch) {                                          \
        const bn_job *j = arg;                                                                \
        const T *x = j->in[0].data;                                                           \
        T *y = j->out->data;                                                                  \
        double mean, var;                                                                     \
        S##_stats(j, x, NULL, ch, &mean, &var, NULL, NULL);                                   \
        double rstd = 1.0 / sqrt(var + j->eps);                                               \
        double w = (double)((const T *)j->in[1].data)[ch], b = (double)((const T *)j->in[2].data)[ch]; \
        T a = (T)(w * rstd), bb = (T)(b - mean * (double)a);                                  \
        VT va, vb;                                                                            \
        for (int l = 0; l < VL; l++) va[l] = a, vb[l] = bb;                                   \
        for (int64_t i = 0; i < j->n; i++) {                                                  \
            const T *xr = x + (i * j->c + ch) * j->sp;                                        \
            T *yr = y + (i * j->c + ch) * j->sp;                                              \
            int64_t q = 0;                                                                    \
            for (; q + VL <= j->sp; q += VL) {                                                \
                VT v;                                                                         \
                memcpy(&v, xr + q, sizeof v);                                                 \
                v = v * va + vb;                                                              \
                memcpy(yr + q, &v, sizeof v);                                                 \
            }                                                                                 \
            for (; q < j->sp; q++) {                                                          \
                T t = xr[q] * a;                                                              \
                yr[q] = t + bb;                                                               \
            }                                                                                 \
        }                                                                                     \
    }
typedef float v8f_bn __attribute__((vector_size(32)));
BN_FWD(float, f32, v8f_bn, 8, bn_fwd_f32)
BN_FWD(double, f64, v4d, 4, bn_fwd_f64)

#define BN_BWD(T, S, NAME)                                                                    \
    static CLONES void NAME(void *arg, int64_t ch) {                                          \
        const bn_job *j = arg;                                                                \
        const T *go = j->in[0].data, *x = j->in[1].data;                                      \
        T *y = j->out->data;                                                                  \
        double m = (double)(j->n * j->sp), mean, var, sdy = 0, sdyxm = 0;                     \
        if (j->st) { /* the run's statistics of this batch norm (bn_memo) */                 \
            const double *o = j->st + 4 * ch;                                                 \
            mean = o[0], var = o[1], sdy = o[2], sdyxm = o[3];                                \
            if (j->which == 2) {                                                              \
                y[ch] = (T)sdy;                                                               \
                return;                                                                       \
            }                                                                                 \
        } else {                                                                              \
            if (j->which == 2) { /* d bias = sum dy: one pass over dy alone */                \
                bn_sums r;                                                                    \
                S##_pass(j, go, NULL, ch, 0, &r);                                             \
                y[ch] = (T)r.s1;                                                              \
                return;                                                                       \
            }                                                                                 \
            bool sums = j->which != 0 || j->training;                                         \
            S##_stats(j, x, sums ? go : NULL, ch, &mean, &var, &sdy, &sdyxm);                 \
        }                                                                                     \
        double rs = 1.0 / sqrt(var + j->eps), sdyx = m > 0 ? sdyxm * rs : 0; /* empty: 0 */ \
        double wv = (double)((const T *)j->in[2].data)[ch];                                   \
        if (j->which == 1) {                                                                  \
            y[ch] = (T)sdyx;                                                                  \
            return;                                                                           \
        }                                                                                     \
        /* training: d x = coef (m dy - S1 - xhat S2) = A dy + B (x - mean) + C with A =  \
         * coef m, B = -coef S2 rstd, C = -coef S1, in double (three fewer operations an  \
         * element; a few more roundings of the same terms, inside the contract) */        \
        double mu = mean, coef = wv * rs / m;                                                 \
        double A = coef * m, B = -(coef * sdyx * rs), C = -(coef * sdy);                      \
        v4d vmu = {mu, mu, mu, mu}, vA = {A, A, A, A}, vB = {B, B, B, B}, vC = {C, C, C, C};   \
        v4d vrs = {rs, rs, rs, rs}, vw = {wv, wv, wv, wv};                                    \
        for (int64_t i = 0; i < j->n; i++) {                                                  \
            int64_t o = (i * j->c + ch) * j->sp;                                              \
            int64_t q = 0;                                                                    \
            if (j->training) {                                                                \
                for (; q + 4 <= j->sp; q += 4) {                                              \
                    v4d dy = ld4_##S(go + o + q), d = ld4_##S(x + o + q) - vmu;               \
                    st4_##S(y + o + q, vA * dy + vB * d + vC);                                \
                }                                                                             \
                for (; q < j->sp; q++) {                                                      \
                    double dy = (double)go[o + q], d = (double)x[o + q] - mu;                 \
                    y[o + q] = (T)(A * dy + B * d + C);                                       \
                }                                                                             \
            } else {                                                                          \
                for (; q + 4 <= j->sp; q += 4) st4_##S(y + o + q, ld4_##S(go + o + q) * vw * vrs); \
                for (; q < j->sp; q++) y[o + q] = (T)((double)go[o + q] * wv * rs);           \
            }                                                                                 \
        }                                                                                     \
    }
BN_BWD(float, f32, bn_bwd_f32)
BN_BWD(double, f64, bn_bwd_f64)

/* Channel @p ch's training statistics into j->st. Sum dy comes from the same pass as
 * the others, in the same lanes and order as d bias's own pass over dy alone (x - 0 is
 * x), so d bias has the same bits either way. */
#define BN_STATS(T, S, NAME)                                                                  \
    static CLONES void NAME(void *arg, int64_t ch) {                                          \
        const bn_job *j = arg;                                                                \
        double *o = j->st + 4 * ch;                                                           \
        S##_stats(j, j->in[1].data, j->in[0].data, ch, &o[0], &o[1], &o[2], &o[3]);           \
    }
BN_STATS(float, f32, bn_stats_f32)
BN_STATS(double, f64, bn_stats_f64)

/* A training batch norm's backward is three nodes (dx, dweight, dbias) over the same x
 * and dy, and each needs the per-channel statistics: the first of them computes them
 * and keeps them on this thread, keyed by the run (goblin__kctx.run) and the buffers,
 * for the other two. Within one run x and dy stay what they are until their last reader
 * is done, so the key cannot match anything else. The buffer is a goblin__tl_buf (kept
 * only under the default allocator, released when the thread ends). */
typedef struct bn_memo {
    uint64_t run;
    const void *x, *go;
    int64_t n, c, sp;
    double eps;
    goblin_dtype dt;
    goblin__tl_buf st;
} bn_memo;

static _Thread_local bn_memo t_bn;

/* j's statistics for run @p run: *fresh says whether they still have to be computed;
 * NULL when they cannot be kept (then each node computes its own, as before). */
static double *bn_memo_get(uint64_t run, const bn_job *j, goblin_dtype dt, bool *fresh) {
    bn_memo *m = &t_bn;
    if (!run) return NULL;
    const void *x = j->in[1].data, *go = j->in[0].data;
    if (m->st.p && m->run == run && m->x == x && m->go == go && m->n == j->n && m->c == j->c &&
        m->sp == j->sp && m->eps == j->eps && m->dt == dt) {
        *fresh = false;
        return m->st.p;
    }
    m->run = 0; /* the old statistics are gone once the buffer grows */
    double *st = goblin__tl_buf_reserve(&m->st, (size_t)j->c * 4 * sizeof(double));
    if (!st) return NULL;
    m->run = run, m->x = x, m->go = go, m->n = j->n, m->c = j->c, m->sp = j->sp;
    m->eps = j->eps, m->dt = dt;
    *fresh = true;
    return st;
}

static goblin_err blis_batch_norm(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                  int32_t n_in, goblin_tensor *out) {
    bool bwd = node->op == GOBLIN_OP_BATCH_NORM_BACKWARD;
    const goblin_tensor *x = &in[bwd ? 1 : 0];
    goblin_dtype dt = x->dtype;
    if (!f32_or_f64(dt) || n_in != 5 || x->rank < 2) return GOBLIN_ENOTSUP;
    for (int32_t i = 0; i < 5; i++)
        if (in[i].dtype != dt) return GOBLIN_ENOTSUP;
    bn_job j = {in, out, x->shape[0], x->shape[1], 1, goblin__attr_i(node, GOBLIN_ATTR_TRAINING, 0) != 0,
                goblin__attr_f(node, GOBLIN_ATTR_EPS, 1e-5), goblin__attr_i(node, GOBLIN_ATTR_INDEX, 0)};
    for (int32_t d = 2; d < x->rank; d++) j.sp *= x->shape[d];
    int32_t t = threads_for(k, goblin__numel(x), j.c);
    if (bwd && j.training) {
        bool fresh = false;
        j.st = bn_memo_get(k->run, &j, dt, &fresh);
        if (j.st && fresh) {
            goblin__parallel_for(t, j.c, dt == GOBLIN_DTYPE_F64 ? bn_stats_f64 : bn_stats_f32, &j);
        }
    }
    void (*fn)(void *, int64_t) = bwd ? (dt == GOBLIN_DTYPE_F64 ? bn_bwd_f64 : bn_bwd_f32)
                                      : (dt == GOBLIN_DTYPE_F64 ? bn_fwd_f64 : bn_fwd_f32);
    goblin__parallel_for(t, j.c, fn, &j);
    return GOBLIN_OK;
}

/* ---- max pooling ----------------------------------------------------------- */

typedef struct pool_job {
    goblin__pool_geom g;
    const goblin_tensor *in;
    goblin_tensor *out;
    int64_t chunk;  /* planes per work item (backward) */
    double *scratch; /* backward f32: one h*w f64 accumulator per work item */
} pool_job;

/* The forward selection of the reference: strictly greater keeps the first maximum,
 * a NaN wins and stops the scan. Sets *at (-1 for a window with no input cell). */
#define POOL_PICK(T, X, g, oh, ow, best, at)                                    \
    do {                                                                         \
        for (int64_t i_ = 0; i_ < (g)->kh; i_++) {                               \
            int64_t ih_ = (oh) * (g)->sh - (g)->ph + i_ * (g)->dh;               \
            if (ih_ < 0 || ih_ >= (g)->h) continue;                              \
            for (int64_t j_ = 0; j_ < (g)->kw; j_++) {                           \
                int64_t iw_ = (ow) * (g)->sw - (g)->pw + j_ * (g)->dw;           \
                if (iw_ < 0 || iw_ >= (g)->w) continue;                          \
                T v_ = (X)[ih_ * (g)->w + iw_];                                  \
                if (at < 0 || v_ > best || isnan(v_)) {                          \
                    best = v_;                                                   \
                    at = ih_ * (g)->w + iw_;                                     \
                }                                                                \
                if (isnan(best)) goto done_;                                     \
            }                                                                    \
        }                                                                        \
    done_:;                                                                      \
    } while (0)

#define POOL_FWD(T, NAME)                                                        \
    static void NAME(void *arg, int64_t p) {                                     \
        const pool_job *j = arg;                                                 \
        const goblin__pool_geom *g = &j->g;                                      \
        const T *X = (const T *)j->in[0].data + p * g->h * g->w;                 \
        T *Y = (T *)j->out->data + p * g->oh * g->ow;                            \
        for (int64_t oh = 0; oh < g->oh; oh++)                                   \
            for (int64_t ow = 0; ow < g->ow; ow++) {                             \
                T best = (T)-INFINITY;                                           \
                int64_t at = -1;                                                 \
                POOL_PICK(T, X, g, oh, ow, best, at);                            \
                Y[oh * g->ow + ow] = at < 0 ? (T)-INFINITY : best;               \
            }                                                                    \
    }
POOL_FWD(float, pool_fwd_f32)
POOL_FWD(double, pool_fwd_f64)

/* Gradients add in f64 in output order within a plane (the reference's order). */
#define POOL_BWD(T, NAME)                                                        \
    static void NAME(void *arg, int64_t c) {                                     \
        const pool_job *j = arg;                                                 \
        const goblin__pool_geom *g = &j->g;                                      \
        int64_t hw = g->h * g->w, p1 = (c + 1) * j->chunk;                       \
        if (p1 > g->planes) p1 = g->planes;                                      \
        for (int64_t p = c * j->chunk; p < p1; p++) {                            \
            const T *GO = (const T *)j->in[0].data + p * g->oh * g->ow;          \
            const T *X = (const T *)j->in[1].data + p * hw;                      \
            T *D = (T *)j->out->data + p * hw;                                   \
            double *acc = j->scratch ? j->scratch + c * hw : (double *)(void *)D; \
            for (int64_t i = 0; i < hw; i++) acc[i] = 0;                         \
            for (int64_t oh = 0; oh < g->oh; oh++)                               \
                for (int64_t ow = 0; ow < g->ow; ow++) {                         \
                    T best = (T)-INFINITY;                                       \
                    int64_t at = -1;                                             \
                    POOL_PICK(T, X, g, oh, ow, best, at);                        \
                    if (at >= 0) acc[at] += (double)GO[oh * g->ow + ow];         \
                }                                                                \
            if (j->scratch)                                                      \
                for (int64_t i = 0; i < hw; i++) D[i] = (T)acc[i];               \
        }                                                                        \
    }
POOL_BWD(float, pool_bwd_f32)
POOL_BWD(double, pool_bwd_f64)

/* 2x2 windows, stride 2, no padding or dilation, every window inside the plane (the
 * usual pooling): the same pick as POOL_PICK in the same order (the first of a tie, the
 * first NaN stops the scan), written as selects. */
#define PICK2(v, idx, best, at)                                                  \
    do {                                                                         \
        bool take_ = (v) > (best) || ((v) != (v) && (best) == (best));           \
        best = take_ ? (v) : (best);                                             \
        at = take_ ? (idx) : (at);                                               \
    } while (0)

static bool pool_2x2(const goblin__pool_geom *g) {
    return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0 && g->dh == 1 &&
           g->dw == 1 && 2 * g->oh <= g->h && 2 * g->ow <= g->w;
}

typedef int32_t v4i __attribute__((vector_size(16)));
typedef int64_t v4l __attribute__((vector_size(32)));
/* f32 takes 8 windows a step (one AVX2 register; two SSE halves in the default clone) */
typedef float v8f_p __attribute__((vector_size(32)));
typedef int32_t v8i_p __attribute__((vector_size(32)));
/* even / odd lanes of two vectors; the interleaves of two vectors, low and high halves */
#define P2_EV8 {0, 2, 4, 6, 8, 10, 12, 14}
#define P2_OD8 {1, 3, 5, 7, 9, 11, 13, 15}
#define P2_LO8 {0, 8, 1, 9, 2, 10, 3, 11}
#define P2_HI8 {4, 12, 5, 13, 6, 14, 7, 15}
#define P2_EV4 {0, 2, 4, 6}
#define P2_OD4 {1, 3, 5, 7}
#define P2_LO4 {0, 4, 1, 5}
#define P2_HI4 {2, 6, 3, 7}

/* A vector of windows at once: e/o are the even/odd columns of the two rows; the
 * selects are PICK2's (lanes of `at` hold 0..3). */
#define PICK2V(VT, VI, a, b, c, d, best, at)                                     \
    do {                                                                         \
        best = a;                                                                \
        at = (VI){0};                                                            \
        VT cand_[3] = {b, c, d};                                                 \
        for (int s_ = 0; s_ < 3; s_++) {                                         \
            VT v_ = cand_[s_];                                                   \
            VI take_ = (v_ > best) | ((v_ != v_) & (best == best));              \
            best = (VT)(((VI)v_ & take_) | ((VI)best & ~take_));                 \
            at = (at & ~take_) | (((VI){0} + (s_ + 1)) & take_);                 \
        }                                                                        \
    } while (0)

#define LDV(VT, p) ({ VT v_; memcpy(&v_, (p), sizeof v_); v_; })
#define STV(p, v) do { __typeof__(v) t_ = (v); memcpy((p), &t_, sizeof t_); } while (0)

/* One step of VL windows of output row y (columns from ow) from rows r0, r1. */
#define POOL2_FSTEP(VT, VI, VL, ev, od)                                          \
    do {                                                                         \
        VT a0 = LDV(VT, r0 + 2 * ow), a1 = LDV(VT, r0 + 2 * ow + VL);            \
        VT b0 = LDV(VT, r1 + 2 * ow), b1 = LDV(VT, r1 + 2 * ow + VL);            \
        VT best;                                                                 \
        VI at;                                                                   \
        PICK2V(VT, VI, __builtin_shuffle(a0, a1, ev), __builtin_shuffle(a0, a1, od), \
               __builtin_shuffle(b0, b1, ev), __builtin_shuffle(b0, b1, od), best, at); \
        (void)at;                                                                \
        STV(y + ow, best);                                                       \
    } while (0)

/* VL windows a step, then VL2 (f32: 8, then 4: a row of 4 windows, an 8x8 plane's,
 * still runs in a vector), then one at a time. */
#define POOL2_FWD(T, VT, VI, VL, EV, OD, VT2, VI2, VL2, EV2, OD2, NAME)          \
    static CLONES void NAME(void *arg, int64_t p) {                              \
        const pool_job *j = arg;                                                 \
        const goblin__pool_geom *g = &j->g;                                      \
        const T *X = (const T *)j->in[0].data + p * g->h * g->w;                 \
        T *Y = (T *)j->out->data + p * g->oh * g->ow;                            \
        const VI ev = EV, od = OD;                                               \
        const VI2 ev2 = EV2, od2 = OD2;                                          \
        for (int64_t oh = 0; oh < g->oh; oh++) {                                 \
            const T *r0 = X + 2 * oh * g->w, *r1 = r0 + g->w;                    \
            T *y = Y + oh * g->ow;                                               \
            int64_t ow = 0;                                                      \
            for (; ow + VL <= g->ow; ow += VL) POOL2_FSTEP(VT, VI, VL, ev, od);  \
            for (; ow + VL2 <= g->ow; ow += VL2) POOL2_FSTEP(VT2, VI2, VL2, ev2, od2); \
            for (; ow < g->ow; ow++) {                                           \
                T best = r0[2 * ow];                                             \
                int at = 0;                                                      \
                PICK2(r0[2 * ow + 1], 1, best, at);                              \
                PICK2(r1[2 * ow], 2, best, at);                                  \
                PICK2(r1[2 * ow + 1], 3, best, at);                              \
                (void)at;                                                        \
                y[ow] = best;                                                    \
            }                                                                    \
        }                                                                        \
    }
POOL2_FWD(float, v8f_p, v8i_p, 8, P2_EV8, P2_OD8, v4f, v4i, 4, P2_EV4, P2_OD4, pool2_fwd_f32)
POOL2_FWD(double, v4d, v4l, 4, P2_EV4, P2_OD4, v4d, v4l, 4, P2_EV4, P2_OD4, pool2_fwd_f64)

/* One backward step of VL windows: their gradients to the picked cells of rows d0, d1. */
#define POOL2_BSTEP(T, VT, VI, VL, ev, od, lo, hi)                               \
    do {                                                                         \
        const VI z = (VI){0}, one = z + 1, two = z + 2, three = z + 3;           \
        VT a0 = LDV(VT, r0 + 2 * ow), a1 = LDV(VT, r0 + 2 * ow + VL);            \
        VT b0 = LDV(VT, r1 + 2 * ow), b1 = LDV(VT, r1 + 2 * ow + VL);            \
        VT best;                                                                 \
        VI at;                                                                   \
        PICK2V(VT, VI, __builtin_shuffle(a0, a1, ev), __builtin_shuffle(a0, a1, od), \
               __builtin_shuffle(b0, b1, ev), __builtin_shuffle(b0, b1, od), best, at); \
        VI v = (VI)(LDV(VT, go + ow) + (T)0);                                    \
        VT e0 = (VT)(v & (at == z)), o0 = (VT)(v & (at == one));                 \
        VT e1 = (VT)(v & (at == two)), o1 = (VT)(v & (at == three));             \
        STV(d0 + 2 * ow, __builtin_shuffle(e0, o0, lo));                         \
        STV(d0 + 2 * ow + VL, __builtin_shuffle(e0, o0, hi));                    \
        STV(d1 + 2 * ow, __builtin_shuffle(e1, o1, lo));                         \
        STV(d1 + 2 * ow + VL, __builtin_shuffle(e1, o1, hi));                    \
    } while (0)

/* Windows do not overlap, so each input cell gets at most one gradient: 0 + g (the
 * reference's accumulator starts at +0, so -0 becomes +0; exact otherwise, also for
 * f32 through its f64 accumulator), 0 elsewhere. Steps as in the forward. */
#define POOL2_BWD(T, VT, VI, VL, EV, OD, LO, HI, VT2, VI2, VL2, EV2, OD2, LO2, HI2, NAME) \
    static CLONES void NAME(void *arg, int64_t c) {                              \
        const pool_job *j = arg;                                                 \
        const goblin__pool_geom *g = &j->g;                                      \
        int64_t hw = g->h * g->w, p1 = (c + 1) * j->chunk;                       \
        if (p1 > g->planes) p1 = g->planes;                                      \
        const VI ev = EV, od = OD, lo = LO, hi = HI;                             \
        const VI2 ev2 = EV2, od2 = OD2, lo2 = LO2, hi2 = HI2;                    \
        for (int64_t p = c * j->chunk; p < p1; p++) {                            \
            const T *GO = (const T *)j->in[0].data + p * g->oh * g->ow;          \
            const T *X = (const T *)j->in[1].data + p * hw;                      \
            T *D = (T *)j->out->data + p * hw;                                   \
            for (int64_t oh = 0; oh < g->oh; oh++) {                             \
                const T *r0 = X + 2 * oh * g->w, *r1 = r0 + g->w;                \
                T *d0 = D + 2 * oh * g->w, *d1 = d0 + g->w;                      \
                const T *go = GO + oh * g->ow;                                   \
                int64_t ow = 0;                                                  \
                for (; ow + VL <= g->ow; ow += VL) POOL2_BSTEP(T, VT, VI, VL, ev, od, lo, hi); \
                for (; ow + VL2 <= g->ow; ow += VL2) POOL2_BSTEP(T, VT2, VI2, VL2, ev2, od2, lo2, hi2); \
                for (; ow < g->ow; ow++) {                                       \
                    T best = r0[2 * ow];                                         \
                    int at = 0;                                                  \
                    PICK2(r0[2 * ow + 1], 1, best, at);                          \
                    PICK2(r1[2 * ow], 2, best, at);                              \
                    PICK2(r1[2 * ow + 1], 3, best, at);                          \
                    T v = go[ow] + (T)0;                                         \
                    d0[2 * ow] = at == 0 ? v : (T)0;                             \
                    d0[2 * ow + 1] = at == 1 ? v : (T)0;                         \
                    d1[2 * ow] = at == 2 ? v : (T)0;                             \
                    d1[2 * ow + 1] = at == 3 ? v : (T)0;                         \
                }                                                                \
                for (int64_t q = 2 * g->ow; q < g->w; q++) d0[q] = d1[q] = 0;    \
            }                                                                    \
            for (int64_t q = 2 * g->oh * g->w; q < hw; q++) D[q] = 0;            \
        }                                                                        \
    }
POOL2_BWD(float, v8f_p, v8i_p, 8, P2_EV8, P2_OD8, P2_LO8, P2_HI8, v4f, v4i, 4, P2_EV4, P2_OD4, P2_LO4, P2_HI4,
          pool2_bwd_f32)
POOL2_BWD(double, v4d, v4l, 4, P2_EV4, P2_OD4, P2_LO4, P2_HI4, v4d, v4l, 4, P2_EV4, P2_OD4, P2_LO4, P2_HI4,
          pool2_bwd_f64)

static goblin_err blis_max_pool(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out) {
    bool bwd = node->op == GOBLIN_OP_MAX_POOL2D_BACKWARD;
    const goblin_tensor *x = &in[bwd ? 1 : 0];
    goblin_dtype dt = x->dtype;
    if (!f32_or_f64(dt) || (bwd && (n_in != 2 || in[0].dtype != dt))) return GOBLIN_ENOTSUP;
    pool_job j;
    memset(&j, 0, sizeof j);
    goblin_err e = goblin__pool_geom_get(node, x->rank, x->shape, &j.g, k->msg, k->cap);
    if (e) return e;
    j.in = in;
    j.out = out;
    int64_t work = goblin__numel(x) + goblin__numel(out);
    bool fast = pool_2x2(&j.g);
    if (!bwd) {
        void (*fn)(void *, int64_t) = fast ? (dt == GOBLIN_DTYPE_F64 ? pool2_fwd_f64 : pool2_fwd_f32)
                                           : (dt == GOBLIN_DTYPE_F64 ? pool_fwd_f64 : pool_fwd_f32);
        goblin__parallel_for(threads_for(k, work, j.g.planes), j.g.planes, fn, &j);
        return GOBLIN_OK;
    }
    int32_t t = threads_for(k, work, j.g.planes);
    int64_t items = t;
    j.chunk = items > 0 ? (j.g.planes + items - 1) / items : 0;
    if (items == 0 || j.chunk == 0) return GOBLIN_OK;
    items = (j.g.planes + j.chunk - 1) / j.chunk;
    if (fast) {
        goblin__parallel_for(t, items, dt == GOBLIN_DTYPE_F64 ? pool2_bwd_f64 : pool2_bwd_f32, &j);
        return GOBLIN_OK;
    }
    if (dt == GOBLIN_DTYPE_F32) {
        j.scratch = goblin__alloc((size_t)(items * j.g.h * j.g.w > 0 ? items * j.g.h * j.g.w : 1) * sizeof(double));
        if (!j.scratch) return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory for max_pool2d_backward scratch");
    }
    goblin__parallel_for(t, items, dt == GOBLIN_DTYPE_F64 ? pool_bwd_f64 : pool_bwd_f32, &j);
    goblin__free(j.scratch);
    return GOBLIN_OK;
}

/* ---- embedding backward ------------------------------------------------------- */

typedef struct emb_job {
    const int64_t *rows;
    const void *go;
    void *out;
    double *acc; /* f32: the [V, D] f64 accumulator */
    int64_t cnt, v, dim, block;
    bool f64;
} emb_job;

/* Columns [b*block, ...) of every row, indices in order: each element's sum runs in
 * the reference's order. */
static void emb_cols(void *arg, int64_t b) {
    const emb_job *j = arg;
    int64_t c0 = b * j->block, c1 = c0 + j->block;
    if (c1 > j->dim) c1 = j->dim;
    double *acc = j->f64 ? (double *)j->out : j->acc;
    for (int64_t r = 0; r < j->v; r++)
        for (int64_t c = c0; c < c1; c++) acc[r * j->dim + c] = 0;
    for (int64_t i = 0; i < j->cnt; i++) {
        double *a = acc + j->rows[i] * j->dim;
        if (j->f64) {
            const double *g = (const double *)j->go + i * j->dim;
            for (int64_t c = c0; c < c1; c++) a[c] += g[c];
        } else {
            const float *g = (const float *)j->go + i * j->dim;
            for (int64_t c = c0; c < c1; c++) a[c] += (double)g[c];
        }
    }
    if (!j->f64) {
        float *o = j->out;
        for (int64_t r = 0; r < j->v; r++)
            for (int64_t c = c0; c < c1; c++) o[r * j->dim + c] = (float)acc[r * j->dim + c];
    }
}

static goblin_err blis_emb_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    (void)node;
    const goblin_tensor *go = &in[0], *idx = &in[1];
    if (n_in != 2 || !f32_or_f64(go->dtype) || out->dtype != go->dtype || out->rank != 2) return GOBLIN_ENOTSUP;
    emb_job j = {NULL, go->data, out->data, NULL, goblin__numel(idx), out->shape[0], out->shape[1], 0,
                 go->dtype == GOBLIN_DTYPE_F64};
    int64_t *rows = goblin__alloc((size_t)(j.cnt > 0 ? j.cnt : 1) * sizeof(int64_t));
    if (!rows) return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory for embedding_backward");
    for (int64_t i = 0; i < j.cnt; i++) {
        int64_t r = goblin__load_i64(idx->dtype, idx->data, i);
        if (r < 0 || r >= j.v) {
            goblin__free(rows);
            return goblin__errf(k->msg, k->cap, GOBLIN_EINDEX, "index %lld at position %lld is outside [0, %lld)",
                                (long long)r, (long long)i, (long long)j.v);
        }
        rows[i] = r;
    }
    j.rows = rows;
    int64_t total = j.v * j.dim;
    if (total == 0) {
        goblin__free(rows);
        return GOBLIN_OK;
    }
    if (!j.f64) {
        j.acc = goblin__alloc((size_t)total * sizeof(double));
        if (!j.acc) {
            goblin__free(rows);
            return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory for embedding_backward");
        }
    }
    int64_t blocks = (j.dim + 15) / 16;
    int32_t t = threads_for(k, total + j.cnt * j.dim, blocks);
    j.block = (j.dim + t - 1) / t;
    goblin__parallel_for(t, (j.dim + j.block - 1) / j.block, emb_cols, &j);
    goblin__free(j.acc);
    goblin__free(rows);
    return GOBLIN_OK;
}

/* ---- copies ------------------------------------------------------------------ */

#define TILE 32

/* dst[i] = src[i] for the strided nd box @p shape (element strides, offsets in
 * elements already applied). */
typedef struct copy_job {
    size_t es;
    const char *src;
    char *dst;
    int32_t rank; /* coalesced; the last dim is the inner loop */
    int64_t shape[GOBLIN_MAX_RANK], ss[GOBLIN_MAX_RANK], ds[GOBLIN_MAX_RANK];
    int32_t tdim;   /* >= 0: tiled transpose over dims (tdim, last) */
    int64_t outer;  /* work rows: product of the dims before the last (tiled: tdim counted in tiles) */
    int64_t per;    /* rows per work item */
} copy_job;

#define ELEM_LOOP(T)                                                                  \
    for (int64_t q = 0; q < n; q++) ((T *)d)[q * dst_st] = ((const T *)s)[q * src_st]

static void copy_row(size_t es, const char *s, int64_t src_st, char *d, int64_t dst_st, int64_t n) {
    if (src_st == 1 && dst_st == 1) {
        size_t b = (size_t)n * es;
        if (b <= 64) { /* a short row (an attention head's): inline, no library call */
            size_t q = 0;
            for (; q + 16 <= b; q += 16) memcpy(d + q, s + q, 16);
            for (; q < b; q++) d[q] = s[q];
            return;
        }
        memcpy(d, s, b);
        return;
    }
    switch (es) {
    case 1: ELEM_LOOP(uint8_t); break;
    case 2: ELEM_LOOP(uint16_t); break;
    case 4: ELEM_LOOP(uint32_t); break;
    default: ELEM_LOOP(uint64_t); break;
    }
}

static void copy_rows(void *arg, int64_t w) {
    const copy_job *j = arg;
    int64_t r0 = w * j->per, r1 = r0 + j->per;
    if (r1 > j->outer) r1 = j->outer;
    if (r0 >= r1) return;
    int32_t L = j->rank - 1;
    int64_t es = (int64_t)j->es;
    /* the multi-index of row r0 over dims [0, L) (tdim counted in tiles) */
    int64_t cnt[GOBLIN_MAX_RANK], lim[GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < L; d++) lim[d] = d == j->tdim ? (j->shape[d] + TILE - 1) / TILE : j->shape[d];
    int64_t r = r0;
    for (int32_t d = L - 1; d >= 0; d--) {
        cnt[d] = r % lim[d];
        r /= lim[d];
    }
    for (int64_t row = r0; row < r1; row++) {
        int64_t so = 0, dof = 0;
        for (int32_t d = 0; d < L; d++) {
            int64_t c = d == j->tdim ? cnt[d] * TILE : cnt[d];
            so += c * j->ss[d];
            dof += c * j->ds[d];
        }
        const char *s = j->src + so * es;
        char *dp = j->dst + dof * es;
        if (j->tdim < 0 && L > 0 && j->tdim != L - 1) {
            /* the rest of the innermost outer dim in one loop: offsets by its strides */
            int64_t run = lim[L - 1] - cnt[L - 1];
            if (run > r1 - row) run = r1 - row;
            int64_t sa = j->ss[L - 1] * es, da = j->ds[L - 1] * es;
            for (int64_t a = 0; a < run; a++) copy_row(j->es, s + a * sa, j->ss[L], dp + a * da, j->ds[L], j->shape[L]);
            row += run - 1;
            cnt[L - 1] += run - 1;
        } else if (j->tdim < 0) {
            copy_row(j->es, s, j->ss[L], dp, j->ds[L], j->shape[L]);
        } else {
            int64_t nt = j->shape[j->tdim] - cnt[j->tdim] * TILE;
            if (nt > TILE) nt = TILE;
            int64_t sa = j->ss[j->tdim], da = j->ds[j->tdim];
            for (int64_t c0 = 0; c0 < j->shape[L]; c0 += TILE) {
                int64_t nc = j->shape[L] - c0 < TILE ? j->shape[L] - c0 : TILE;
                for (int64_t a = 0; a < nt; a++)
                    copy_row(j->es, s + (a * sa + c0 * j->ss[L]) * es, j->ss[L], dp + (a * da + c0 * j->ds[L]) * es,
                             j->ds[L], nc);
            }
        }
        for (int32_t d = L - 1; d >= 0; d--) {
            if (++cnt[d] < lim[d]) break;
            cnt[d] = 0;
        }
    }
}

static void strided_copy(const goblin__kctx *k, size_t es, const void *src, int64_t soff, void *dst, int64_t doff,
                         int32_t rank, const int64_t *shape, const int64_t *ss, const int64_t *ds) {
    copy_job j;
    memset(&j, 0, sizeof j);
    j.es = es;
    j.src = (const char *)src + soff * (int64_t)es;
    j.dst = (char *)dst + doff * (int64_t)es;
    int64_t n = 1;
    for (int32_t d = 0; d < rank; d++) n *= shape[d];
    if (n == 0) return;
    /* drop size-1 dims, merge dims that are contiguous in both */
    for (int32_t d = 0; d < rank; d++) {
        if (shape[d] == 1) continue;
        int32_t r = j.rank;
        if (r > 0 && j.ss[r - 1] == ss[d] * shape[d] && j.ds[r - 1] == ds[d] * shape[d]) {
            j.shape[r - 1] *= shape[d];
            j.ss[r - 1] = ss[d];
            j.ds[r - 1] = ds[d];
            continue;
        }
        j.shape[r] = shape[d];
        j.ss[r] = ss[d];
        j.ds[r] = ds[d];
        j.rank++;
    }
    if (j.rank == 0) {
        j.rank = 1;
        j.shape[0] = 1;
        j.ss[0] = j.ds[0] = 1;
    }
    int32_t L = j.rank - 1;
    j.tdim = -1;
    if (j.ss[L] != 1 && j.ds[L] == 1 && j.shape[L] >= 4)
        for (int32_t d = 0; d < L; d++)
            if (j.ss[d] == 1 && j.shape[d] >= 4) j.tdim = d;
    j.outer = 1;
    for (int32_t d = 0; d < L; d++) j.outer *= d == j.tdim ? (j.shape[d] + TILE - 1) / TILE : j.shape[d];
    int32_t t = threads_for(k, n, j.outer);
    j.per = (j.outer + t - 1) / t;
    goblin__parallel_for(t, (j.outer + j.per - 1) / j.per, copy_rows, &j);
}

static bool copy_dtype_ok(goblin_dtype dt) {
    size_t es = goblin_dtype_size(dt);
    return es == 1 || es == 2 || es == 4 || es == 8;
}

static int32_t norm_axis(int64_t axis, int32_t rank) { return (int32_t)(axis < 0 ? axis + rank : axis); }

/* PERMUTE, SLICE, RESHAPE, COPY: a view of the input copied into the contiguous output
 * (the reference's views, ref_shape.c). */
static goblin_err blis_view_copy(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                 int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    if (!copy_dtype_ok(out->dtype) || in[0].dtype != out->dtype) return GOBLIN_ENOTSUP;
    const goblin_tensor *x = &in[0];
    int32_t rank = x->rank;
    int64_t shape[GOBLIN_MAX_RANK], ss[GOBLIN_MAX_RANK], ds[GOBLIN_MAX_RANK], off = 0;
    for (int32_t d = 0; d < rank; d++) {
        shape[d] = x->shape[d];
        ss[d] = x->strides[d];
    }
    if (node->op == GOBLIN_OP_PERMUTE) {
        int32_t np;
        const int64_t *p = goblin__attr_ints(node, GOBLIN_ATTR_PERM, &np);
        if (np != rank) return GOBLIN_ENOTSUP;
        for (int32_t d = 0; d < rank; d++) {
            int32_t a = norm_axis(p[d], rank);
            if (a < 0 || a >= rank) return GOBLIN_ENOTSUP;
            shape[d] = x->shape[a];
            ss[d] = x->strides[a];
        }
    } else if (node->op == GOBLIN_OP_SLICE) {
        int32_t na, ns, np;
        const int64_t *axes = goblin__attr_ints(node, GOBLIN_ATTR_AXES, &na);
        const int64_t *starts = goblin__attr_ints(node, GOBLIN_ATTR_STARTS, &ns);
        const int64_t *steps = goblin__attr_ints(node, GOBLIN_ATTR_STEPS, &np);
        if (out->rank != rank) return GOBLIN_ENOTSUP;
        for (int32_t i = 0; i < ns; i++) {
            int32_t a = norm_axis(axes ? axes[i] : i, rank);
            int64_t dim = x->shape[a], b = starts[i];
            if (b < 0) b = b + dim < 0 ? 0 : b + dim;
            if (b > dim) b = dim;
            shape[a] = out->shape[a];
            if (shape[a] == 0) continue;
            off += b * x->strides[a];
            ss[a] = shape[a] > 1 ? x->strides[a] * (np ? steps[i] : 1) : 0;
        }
    }
    goblin__contig_strides(rank, shape, ds);
    strided_copy(k, goblin_dtype_size(out->dtype), x->data, off, out->data, 0, rank, shape, ss, ds);
    return GOBLIN_OK;
}

typedef struct fill_job {
    size_t es;
    char *dst;
    char fill[8];
    int64_t n, per;
} fill_job;

static void fill_chunk(void *arg, int64_t w) {
    const fill_job *j = arg;
    int64_t i0 = w * j->per, i1 = i0 + j->per;
    if (i1 > j->n) i1 = j->n;
#define FILL_LOOP(T)                                      \
    do {                                                  \
        T v_;                                             \
        memcpy(&v_, j->fill, sizeof v_);                  \
        for (int64_t i = i0; i < i1; i++) ((T *)j->dst)[i] = v_; \
    } while (0)
    bool zero = true;
    for (size_t b = 0; b < j->es; b++) zero &= j->fill[b] == 0;
    if (zero) { /* +0.0 and integer 0: all bytes zero */
        memset(j->dst + i0 * (int64_t)j->es, 0, (size_t)(i1 - i0) * j->es);
        return;
    }
    switch (j->es) {
    case 1: FILL_LOOP(uint8_t); break;
    case 2: FILL_LOOP(uint16_t); break;
    case 4: FILL_LOOP(uint32_t); break;
    default: FILL_LOOP(uint64_t); break;
    }
}

static goblin_err blis_pad(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in, int32_t n_in,
                           goblin_tensor *out) {
    (void)n_in;
    if (!copy_dtype_ok(out->dtype) || in[0].dtype != out->dtype || in[0].rank != out->rank) return GOBLIN_ENOTSUP;
    int32_t np;
    const int64_t *p = goblin__attr_ints(node, GOBLIN_ATTR_PADS, &np);
    fill_job f;
    memset(&f, 0, sizeof f);
    f.es = goblin_dtype_size(out->dtype);
    f.dst = out->data;
    double value = goblin__attr_f(node, GOBLIN_ATTR_VALUE, 0.0);
    if (goblin_dtype_is_int(out->dtype)) goblin__store_i64(out->dtype, f.fill, 0, (int64_t)value);
    else goblin__store_f64(out->dtype, f.fill, 0, value);
    f.n = goblin__numel(out);
    if (f.n == 0) return GOBLIN_OK;
    int32_t t = threads_for(k, f.n, f.n);
    f.per = (f.n + t - 1) / t;
    goblin__parallel_for(t, (f.n + f.per - 1) / f.per, fill_chunk, &f);

    const goblin_tensor *x = &in[0];
    int64_t shape[GOBLIN_MAX_RANK], ss[GOBLIN_MAX_RANK], soff = 0, doff = 0;
    for (int32_t d = 0; d < x->rank; d++) {
        shape[d] = x->shape[d];
        ss[d] = x->strides[d];
    }
    for (int32_t i = 0; i < np / 2; i++) {
        int32_t d = x->rank - 1 - i;
        int64_t before = p[2 * i], after = p[2 * i + 1];
        int64_t skip_in = before < 0 ? -before : 0, skip_in_end = after < 0 ? -after : 0;
        int64_t len = x->shape[d] - skip_in - skip_in_end;
        shape[d] = len > 0 ? len : 0;
        if (len <= 0) continue;
        soff += skip_in * x->strides[d];
        doff += (before > 0 ? before : 0) * out->strides[d];
    }
    strided_copy(k, f.es, x->data, soff, out->data, doff, x->rank, shape, ss, out->strides);
    return GOBLIN_OK;
}

/* ---- relu ------------------------------------------------------------------------ */

/* x < 0 ? 0 : x, as the reference (relu(NaN) = NaN, relu(-0) = -0): exact, chunked. */
typedef struct relu_job {
    const void *x;
    void *y;
    int64_t n, per;
    bool f64;
} relu_job;

static CLONES void relu_chunk(void *arg, int64_t w) {
    const relu_job *j = arg;
    int64_t i0 = w * j->per, i1 = i0 + j->per;
    if (i1 > j->n) i1 = j->n;
    if (j->f64) {
        const double *x = j->x;
        double *y = j->y;
        for (int64_t i = i0; i < i1; i++) y[i] = x[i] < 0 ? 0.0 : x[i];
    } else {
        const float *x = j->x;
        float *y = j->y;
        for (int64_t i = i0; i < i1; i++) y[i] = x[i] < 0 ? 0.0f : x[i];
    }
}

static goblin_err blis_relu(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in, int32_t n_in,
                            goblin_tensor *out) {
    (void)node;
    (void)n_in;
    if (!f32_or_f64(out->dtype) || in[0].dtype != out->dtype || !goblin_tensor_is_contiguous(&in[0]) ||
        goblin__numel(&in[0]) != goblin__numel(out))
        return GOBLIN_ENOTSUP;
    relu_job j = {in[0].data, out->data, goblin__numel(out), 0, out->dtype == GOBLIN_DTYPE_F64};
    if (j.n == 0) return GOBLIN_OK;
    int32_t t = threads_for(k, j.n, j.n);
    j.per = (j.n + t - 1) / t;
    goblin__parallel_for(t, (j.n + j.per - 1) / j.per, relu_chunk, &j);
    return GOBLIN_OK;
}

/* ---- relu_backward --------------------------------------------------------------- */

/* grad_out where x > 0, else +0 (x <= 0, -0 and NaN included): the value of
 * where(x > 0, grad_out, 0), as the reference. The compare's all-ones / all-zeros lane mask
 * ANDs grad_out's bits (NaN payloads kept, +0 where the mask is clear): one pass, exact,
 * chunked like relu. */
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v8f __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));

typedef struct relu_bwd_job {
    const void *g, *x;
    void *y;
    int64_t n, per;
    bool f64;
} relu_bwd_job;

static CLONES void relu_bwd_chunk(void *arg, int64_t w) {
    const relu_bwd_job *j = arg;
    int64_t i0 = w * j->per, i1 = i0 + j->per, i = i0;
    if (i1 > j->n) i1 = j->n;
    if (j->f64) {
        const double *x = j->x;
        const int64_t *g = j->g;
        int64_t *y = j->y;
        for (; i + 8 <= i1; i += 8) {
            v4d x0 = LDV(v4d, x + i), x1 = LDV(v4d, x + i + 4);
            v4l g0 = LDV(v4l, g + i), g1 = LDV(v4l, g + i + 4);
            STV(y + i, g0 & (x0 > 0.0));
            STV(y + i + 4, g1 & (x1 > 0.0));
        }
        for (; i < i1; i++) y[i] = x[i] > 0.0 ? g[i] : 0;
    } else {
        const float *x = j->x;
        const int32_t *g = j->g;
        int32_t *y = j->y;
        for (; i + 16 <= i1; i += 16) {
            v8f x0 = LDV(v8f, x + i), x1 = LDV(v8f, x + i + 8);
            v8i g0 = LDV(v8i, g + i), g1 = LDV(v8i, g + i + 8);
            STV(y + i, g0 & (x0 > 0.0f));
            STV(y + i + 8, g1 & (x1 > 0.0f));
        }
        for (; i < i1; i++) y[i] = x[i] > 0.0f ? g[i] : 0;
    }
}

static goblin_err blis_relu_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out) {
    (void)node;
    if (n_in != 2 || !f32_or_f64(out->dtype) || in[0].dtype != out->dtype || in[1].dtype != out->dtype ||
        !goblin_tensor_is_contiguous(&in[0]) || !goblin_tensor_is_contiguous(&in[1]) ||
        !goblin_tensor_is_contiguous(out) || goblin__numel(&in[0]) != goblin__numel(out) ||
        goblin__numel(&in[1]) != goblin__numel(out))
        return GOBLIN_ENOTSUP;
    relu_bwd_job j = {in[0].data, in[1].data, out->data, goblin__numel(out), 0,
                      out->dtype == GOBLIN_DTYPE_F64};
    if (j.n == 0) return GOBLIN_OK;
    int32_t t = threads_for(k, j.n, j.n);
    j.per = (j.n + t - 1) / t;
    goblin__parallel_for(t, (j.n + j.per - 1) / j.per, relu_bwd_chunk, &j);
    return GOBLIN_OK;
}

void goblin__blis_register_train2(goblin__kernel_fn *t) {
    t[GOBLIN_OP_BATCH_NORM] = blis_batch_norm;
    t[GOBLIN_OP_BATCH_NORM_BACKWARD] = blis_batch_norm;
    t[GOBLIN_OP_MAX_POOL2D] = blis_max_pool;
    t[GOBLIN_OP_MAX_POOL2D_BACKWARD] = blis_max_pool;
    t[GOBLIN_OP_EMBEDDING_BACKWARD] = blis_emb_bwd;
    t[GOBLIN_OP_PERMUTE] = blis_view_copy;
    t[GOBLIN_OP_SLICE] = blis_view_copy;
    t[GOBLIN_OP_RESHAPE] = blis_view_copy;
    t[GOBLIN_OP_COPY] = blis_view_copy;
    t[GOBLIN_OP_PAD] = blis_pad;
    t[GOBLIN_OP_RELU] = blis_relu;
    t[GOBLIN_OP_RELU_BACKWARD] = blis_relu_bwd;
}
