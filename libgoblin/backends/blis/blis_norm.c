/* libgoblin/backends/blis/blis_norm.c - normalization on the CPU backend: BATCH_NORM (training
 * and eval), BATCH_NORM_BACKWARD and LAYER_NORM_BACKWARD (the forward LAYER_NORM and
 * RMS_NORM rows are in blis_reduce.c, which shares its statistics with the backward). */
#pragma GCC diagnostic ignored "-Wpsabi" /* vector helpers are always inlined: no ABI */
#include <string.h>
#include "base/alloc.h"
#include "base/target_clones.h"
#include "blis_impl.h"
#include "kernels/scalar_ops.h"
#include "kernels/expf.h"

#if defined(_OPENMP)
#define SIMD _Pragma("omp simd")
#define SIMD_OR_BAD _Pragma("omp simd reduction(| : bad)")
#else
#define SIMD
#define SIMD_OR_BAD
#endif

#define BLOCK ((int64_t)1 << 15) /* elements per work item (about) */
#include <math.h>
#include "ops/nn.h"

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
#define CLONES GOBLIN_TARGET_CLONES("avx2", "default")

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
    if (!goblin__blis_f32_or_f64(dt) || n_in != 5 || x->rank < 2) return GOBLIN_ENOTSUP;
    for (int32_t i = 0; i < 5; i++)
        if (in[i].dtype != dt) return GOBLIN_ENOTSUP;
    bn_job j = {in, out, x->shape[0], x->shape[1], 1, goblin__attr_i(node, GOBLIN_ATTR_TRAINING, 0) != 0,
                goblin__attr_f(node, GOBLIN_ATTR_EPS, 1e-5), goblin__attr_i(node, GOBLIN_ATTR_INDEX, 0)};
    for (int32_t d = 2; d < x->rank; d++) j.sp *= x->shape[d];
    int32_t t = goblin__blis_threads_for(k, goblin__numel(x), j.c);
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


/* ---- layer_norm_backward ----------------------------------------------------------------
 * Per row of the last norm_ndim dims, the statistics exactly as blis_reduce.c's forward
 * computes them (the same bits): sums of x and then of (x - mu)^2 in 4*VN lanes of the
 * dtype (element i into lane i mod 4*VN, 32 lanes for f32, 16 for f64), the lanes added in
 * lane order in double; mu = (T)(sum / n), rs = (T)(1 / sqrt(sum2 / n + eps)). Then, with
 * xhat = (x - mu) rs and dxhat = grad_out * weight, index 0 gives
 * d x = rs ((dxhat - mean(dxhat)) - xhat mean(dxhat xhat)), the two means summed in the
 * same lanes, folded into double as a fixed pairwise tree (ln_fold_tree); index 1 gives
 * d weight, each column's sum of grad_out xhat over the rows in row order in double. The
 * statistics are also kept for the run (the lns table below): the forward's are used when
 * its node ran first, with the same bits. These clones do not enable FMA (as
 * blis_reduce.c's), so the bits do not depend on the CPU; rows (index 0) or columns
 * (index 1) are split among threads, never a sum: the same bits for every thread count. */
#define LN_CLONES GOBLIN_TARGET_CLONES("avx2", "default")
#define LN_INL static inline __attribute__((always_inline))

typedef struct lnjob {
    bool f64;
    const void *g, *x, *w;
    void *y;
    void *stats; /* mu of every row, then rs of every row (NULL: d x computes its own) */
    int64_t rows, len, per; /* per: rows (index 0, stats) or columns (index 1) per item */
    double eps;
} lnjob;

typedef float ln_v8f __attribute__((vector_size(32)));
typedef double ln_v4d __attribute__((vector_size(32)));

#define LN_DEF(S, T, VT, VN, L)                                                                 \
    LN_INL VT S##_ln_ld(const T *p) {                                                           \
        VT v;                                                                                   \
        memcpy(&v, p, sizeof v);                                                                \
        return v;                                                                               \
    }                                                                                           \
    /* the L = 4 VN lane values of sum (x_i - mu)^p, p = 1 or 2, as the forward's S##_lanes:   \
     * its tail lanes add 0 where there is no element, which changes no bit (a lane is never   \
     * -0), so here the tail elements are added to their lanes directly */                    \
    LN_INL void S##_ln_lanes(const T *x, int64_t n, T mu, int sq, T *lanes) {                  \
        VT a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                              \
        int64_t i = 0;                                                                          \
        for (; i + L <= n; i += L) {                                                            \
            VT v0 = S##_ln_ld(x + i) - mu, v1 = S##_ln_ld(x + i + VN) - mu;                     \
            VT v2 = S##_ln_ld(x + i + 2 * VN) - mu, v3 = S##_ln_ld(x + i + 3 * VN) - mu;        \
            if (sq) {                                                                           \
                v0 *= v0;                                                                       \
                v1 *= v1;                                                                       \
                v2 *= v2;                                                                       \
                v3 *= v3;                                                                       \
            }                                                                                   \
            a0 += v0;                                                                           \
            a1 += v1;                                                                           \
            a2 += v2;                                                                           \
            a3 += v3;                                                                           \
        }                                                                                       \
        memcpy(lanes, &a0, sizeof a0);                                                          \
        memcpy(lanes + VN, &a1, sizeof a1);                                                     \
        memcpy(lanes + 2 * VN, &a2, sizeof a2);                                                 \
        memcpy(lanes + 3 * VN, &a3, sizeof a3);                                                 \
        for (int64_t l = 0; i + l < n; l++) {                                                   \
            T v = x[i + l] - mu;                                                                \
            lanes[l] += sq ? v * v : v;                                                         \
        }                                                                                       \
    }                                                                                           \
    /* the lanes of nr <= 4 rows, each folded in lane order into double; the rows' chains of  \
     * additions are independent, so they overlap */                                          \
    LN_INL void S##_ln_fold(T (*l)[L], int nr, double *out) {                                   \
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                  \
        for (int j = 0; j < L; j++) {                                                           \
            s0 += (double)l[0][j];                                                              \
            if (nr > 1) s1 += (double)l[1][j];                                                  \
            if (nr > 2) s2 += (double)l[2][j];                                                  \
            if (nr > 3) s3 += (double)l[3][j];                                                  \
        }                                                                                       \
        out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;                                     \
    }                                                                                           \
    /* the lanes of nr <= 4 rows, each folded into double as a fixed pairwise tree (lane j  \
     * with lane j + L/2, then j + L/4, ...): short chains; for the sums only the backward   \
     * takes (the statistics keep the forward's order above) */                              \
    LN_INL void S##_ln_fold_tree(T (*l)[L], int nr, double *out) {                              \
        for (int r = 0; r < nr; r++) {                                                          \
            double a[L];                                                                        \
            for (int q = 0; q < L; q++) a[q] = (double)l[r][q];                                 \
            for (int h = L / 2; h >= 1; h /= 2)                                                 \
                for (int q = 0; q < h; q++) a[q] += a[q + h];                                   \
            out[r] = a[0];                                                                      \
        }                                                                                       \
    }                                                                                           \
    /* mu and rs of nr <= 4 rows (row r at x + r n), the forward's bits */                     \
    LN_INL void S##_ln_stats(const T *x, int64_t n, int nr, double eps, T *mu, T *rs) {        \
        T l[4][L];                                                                              \
        double s[4];                                                                            \
        for (int r = 0; r < nr; r++) S##_ln_lanes(x + r * n, n, 0, 0, l[r]);                    \
        S##_ln_fold(l, nr, s);                                                                  \
        for (int r = 0; r < nr; r++) mu[r] = (T)(s[r] / (double)n);                             \
        for (int r = 0; r < nr; r++) S##_ln_lanes(x + r * n, n, mu[r], 1, l[r]);                \
        S##_ln_fold(l, nr, s);                                                                  \
        for (int r = 0; r < nr; r++) rs[r] = (T)(1.0 / sqrt(s[r] / (double)n + eps));           \
    }                                                                                           \
    /* the lanes of sum dxhat and sum dxhat xhat of one row (lane i mod L, as above) */         \
    LN_INL void S##_ln_dlanes(const T *g, const T *x, const T *w, int64_t n, T mu, T rs, T *la, \
                              T *lb) {                                                          \
        VT sa0 = {0}, sa1 = {0}, sb0 = {0}, sb1 = {0}, sa2 = {0}, sa3 = {0}, sb2 = {0}, sb3 = {0}; \
        int64_t i = 0;                                                                          \
        for (; i + L <= n; i += L) {                                                            \
            VT d0 = S##_ln_ld(g + i), d1 = S##_ln_ld(g + i + VN);                               \
            VT d2 = S##_ln_ld(g + i + 2 * VN), d3 = S##_ln_ld(g + i + 3 * VN);                  \
            if (w) {                                                                            \
                d0 *= S##_ln_ld(w + i);                                                         \
                d1 *= S##_ln_ld(w + i + VN);                                                    \
                d2 *= S##_ln_ld(w + i + 2 * VN);                                                \
                d3 *= S##_ln_ld(w + i + 3 * VN);                                                \
            }                                                                                   \
            VT h0 = (S##_ln_ld(x + i) - mu) * rs, h1 = (S##_ln_ld(x + i + VN) - mu) * rs;       \
            VT h2 = (S##_ln_ld(x + i + 2 * VN) - mu) * rs;                                      \
            VT h3 = (S##_ln_ld(x + i + 3 * VN) - mu) * rs;                                      \
            sa0 += d0, sa1 += d1, sa2 += d2, sa3 += d3;                                         \
            sb0 += d0 * h0, sb1 += d1 * h1, sb2 += d2 * h2, sb3 += d3 * h3;                     \
        }                                                                                       \
        memcpy(la, &sa0, sizeof sa0);                                                           \
        memcpy(la + VN, &sa1, sizeof sa1);                                                      \
        memcpy(la + 2 * VN, &sa2, sizeof sa2);                                                  \
        memcpy(la + 3 * VN, &sa3, sizeof sa3);                                                  \
        memcpy(lb, &sb0, sizeof sb0);                                                           \
        memcpy(lb + VN, &sb1, sizeof sb1);                                                      \
        memcpy(lb + 2 * VN, &sb2, sizeof sb2);                                                  \
        memcpy(lb + 3 * VN, &sb3, sizeof sb3);                                                  \
        for (int64_t l = 0; i + l < n; l++) {                                                   \
            T d = w ? g[i + l] * w[i + l] : g[i + l], xh = (x[i + l] - mu) * rs;                \
            la[l] += d;                                                                         \
            lb[l] += d * xh;                                                                    \
        }                                                                                       \
    }                                                                                           \
    /* d x of nr <= 4 rows with their mu and rs */                                             \
    LN_INL void S##_ln_dx(const T *g, const T *x, const T *w, T *y, int64_t n, int nr,          \
                          const T *mu, const T *rs) {                                           \
        T la[4][L], lb[4][L];                                                                   \
        double da[4], db[4];                                                                    \
        for (int r = 0; r < nr; r++)                                                            \
            S##_ln_dlanes(g + r * n, x + r * n, w, n, mu[r], rs[r], la[r], lb[r]);              \
        S##_ln_fold_tree(la, nr, da);                                                           \
        S##_ln_fold_tree(lb, nr, db);                                                           \
        for (int r = 0; r < nr; r++) {                                                          \
            const T *gr = g + r * n, *xr = x + r * n;                                           \
            T *yr = y + r * n, m = mu[r], s = rs[r];                                            \
            T ma = (T)(da[r] / (double)n), mb = (T)(db[r] / (double)n);                         \
            if (w) {                                                                            \
                for (int64_t j = 0; j < n; j++)                                                 \
                    yr[j] = s * ((gr[j] * w[j] - ma) - ((xr[j] - m) * s) * mb);                 \
            } else {                                                                            \
                for (int64_t j = 0; j < n; j++) yr[j] = s * ((gr[j] - ma) - ((xr[j] - m) * s) * mb); \
            }                                                                                   \
        }                                                                                       \
    }

LN_DEF(f32, float, ln_v8f, 8, 32)
LN_DEF(f64, double, ln_v4d, 4, 16)

/* d x of an item's rows; the statistics from j->stats when another node of the run
 * computed them (the same bits), else here */
LN_CLONES static void ln_dx_item(void *arg, int64_t item) {
    const lnjob *j = arg;
    int64_t r0 = item * j->per, r1 = r0 + j->per < j->rows ? r0 + j->per : j->rows, n = j->len;
    for (int64_t r = r0; r < r1; r += 4) {
        int nr = r1 - r < 4 ? (int)(r1 - r) : 4;
        if (j->f64) {
            double mu[4], rs[4];
            const double *st = j->stats;
            if (st) memcpy(mu, st + r, sizeof(double) * (size_t)nr), memcpy(rs, st + j->rows + r, sizeof(double) * (size_t)nr);
            else f64_ln_stats((const double *)j->x + r * n, n, nr, j->eps, mu, rs);
            f64_ln_dx((const double *)j->g + r * n, (const double *)j->x + r * n, j->w,
                      (double *)j->y + r * n, n, nr, mu, rs);
        } else {
            float mu[4], rs[4];
            const float *st = j->stats;
            if (st) memcpy(mu, st + r, sizeof(float) * (size_t)nr), memcpy(rs, st + j->rows + r, sizeof(float) * (size_t)nr);
            else f32_ln_stats((const float *)j->x + r * n, n, nr, j->eps, mu, rs);
            f32_ln_dx((const float *)j->g + r * n, (const float *)j->x + r * n, j->w,
                      (float *)j->y + r * n, n, nr, mu, rs);
        }
    }
}

LN_CLONES static void ln_stats_item(void *arg, int64_t item) {
    const lnjob *j = arg;
    int64_t r0 = item * j->per, r1 = r0 + j->per < j->rows ? r0 + j->per : j->rows, n = j->len;
    for (int64_t r = r0; r < r1; r += 4) {
        int nr = r1 - r < 4 ? (int)(r1 - r) : 4;
        if (j->f64) {
            double *st = j->stats;
            f64_ln_stats((const double *)j->x + r * n, n, nr, j->eps, st + r, st + j->rows + r);
        } else {
            float *st = j->stats;
            f32_ln_stats((const float *)j->x + r * n, n, nr, j->eps, st + r, st + j->rows + r);
        }
    }
}

/* d weight for the columns of one item: acc (double, per column) over the rows in order */
#define LN_DW(T)                                                                                \
    do {                                                                                        \
        const T *g = j->g, *x = j->x, *st = j->stats;                                           \
        T *y = j->y;                                                                            \
        for (int64_t r = 0; r < j->rows; r++) {                                                 \
            const T *gr = g + r * n + c0, *xr = x + r * n + c0;                                 \
            T mu = st[r], rs = st[j->rows + r];                                                 \
            for (int64_t c = 0; c < w; c++) acc[c] += (double)(gr[c] * ((xr[c] - mu) * rs));   \
        }                                                                                       \
        for (int64_t c = 0; c < w; c++) y[c0 + c] = (T)acc[c];                                  \
    } while (0)

enum { LN_COLS = 256 };

LN_CLONES static void ln_dw_item(void *arg, int64_t item) {
    const lnjob *j = arg;
    int64_t n = j->len, c0 = item * LN_COLS, w = c0 + LN_COLS < n ? LN_COLS : n - c0;
    double acc[LN_COLS];
    for (int64_t c = 0; c < w; c++) acc[c] = 0;
    if (j->f64) LN_DW(double);
    else LN_DW(float);
}

/* The statistics (mu, rs of every row) of a layer norm's x are needed by its forward and
 * by both backward nodes (d x, d weight): the first of them to run in a run computes them
 * and keeps them on this thread for the others, in one goblin__tl_buf shared by up to
 * LNS_SLOTS layer norms of the run, keyed by the run (goblin__kctx.run), the id and the
 * buffer of x and the shapes. Within a run a node's value never changes, so the key
 * cannot match anything else; the forward's statistics are the bits the backward would
 * compute (ln_stats above), so using them changes no bit. When the buffer must grow, the
 * run's earlier entries are dropped (their nodes then compute their own, as without). */
#define LNS_SLOTS 8

typedef struct lns_entry {
    int32_t xid;
    bool f64, valid;
    const void *x;
    int64_t rows, len;
    double eps;
    size_t off;
} lns_entry;

typedef struct lns_table {
    uint64_t run;
    int n;
    size_t used;
    lns_entry e[LNS_SLOTS];
    goblin__tl_buf buf;
} lns_table;

static _Thread_local lns_table t_lns;

static void *lns_find(uint64_t run, int32_t xid, const void *x, int64_t rows, int64_t len,
                      double eps, bool f64) {
    lns_table *t = &t_lns;
    if (!run || t->run != run) return NULL;
    for (int i = 0; i < t->n; i++) {
        const lns_entry *e = &t->e[i];
        if (e->valid && e->xid == xid && e->x == x && e->rows == rows && e->len == len &&
            e->eps == eps && e->f64 == f64)
            return (char *)t->buf.p + e->off;
    }
    return NULL;
}

void *goblin__blis_ln_stats_add(uint64_t run, int32_t xid, const void *x, int64_t rows, int64_t len,
                                double eps, bool f64, int *slot) {
    lns_table *t = &t_lns;
    size_t bytes;
    *slot = -1;
    if (!run || xid < 0 || rows <= 0 ||
        !goblin__mul_size((size_t)rows, 2 * (f64 ? sizeof(double) : sizeof(float)), &bytes) ||
        bytes > ((size_t)16 << 20))
        return NULL;
    bytes = (bytes + 63) / 64 * 64;
    if (t->run != run) t->run = run, t->n = 0, t->used = 0;
    if (t->n == LNS_SLOTS) return NULL;
    if (t->used + bytes > t->buf.cap) { /* growing loses the contents: start over */
        t->run = 0, t->n = 0;
        if (!goblin__tl_buf_reserve(&t->buf, 2 * (t->used + bytes))) return NULL;
        t->run = run, t->used = 0;
    }
    lns_entry *e = &t->e[t->n];
    *e = (lns_entry){xid, f64, false, x, rows, len, eps, t->used};
    t->used += bytes;
    *slot = t->n++;
    return (char *)t->buf.p + e->off;
}

void goblin__blis_ln_stats_commit(int slot) {
    if (slot >= 0 && slot < t_lns.n) t_lns.e[slot].valid = true;
}

static goblin_err blis_ln_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    bool wgrad = goblin__attr_i(node, GOBLIN_ATTR_INDEX, 0) == 1;
    if (n_in < 2 || !goblin__blis_f32_or_f64(out->dtype) || !goblin__blis_all_contiguous(in, n_in, out))
        return goblin__blis_elementwise_fallback(k, node, in, n_in, out);
    const goblin_tensor *x = &in[1];
    int64_t nd = goblin__attr_i(node, GOBLIN_ATTR_NORM_NDIM, 1);
    lnjob j = {.f64 = out->dtype == GOBLIN_DTYPE_F64, .g = in[0].data, .x = x->data,
               .w = !wgrad && n_in > 2 ? in[2].data : NULL, .y = out->data, .rows = 1, .len = 1,
               .eps = goblin__attr_f(node, GOBLIN_ATTR_EPS, 1e-5)};
    for (int32_t d = 0; d < x->rank; d++) {
        if (d >= x->rank - nd) j.len *= x->shape[d];
        else j.rows *= x->shape[d];
    }
    int32_t th = k->threads > 0 ? k->threads : 1;
    if (j.len == 0) return GOBLIN_OK;
    if (j.rows == 0) { /* no rows: d x is empty, d weight is zeros */
        if (wgrad) memset(out->data, 0, (size_t)j.len * goblin_dtype_size(out->dtype));
        return GOBLIN_OK;
    }
    j.per = BLOCK / j.len > 1 ? BLOCK / j.len : 1;
    int64_t items = (j.rows + j.per - 1) / j.per;
    bool fresh = false, own = false;
    int32_t xid = node->n_inputs > 1 ? node->inputs[1] : -1;
    int slot = -1;
    j.stats = lns_find(k->run, xid, j.x, j.rows, j.len, j.eps, j.f64);
    if (!j.stats) {
        j.stats = goblin__blis_ln_stats_add(k->run, xid, j.x, j.rows, j.len, j.eps, j.f64, &slot);
        fresh = true;
    }
    if (!j.stats && wgrad) { /* no memo: d weight needs its own buffer */
        j.stats = goblin__alloc((size_t)j.rows * 2 * goblin_dtype_size(out->dtype));
        if (!j.stats) return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "layer_norm_backward: out of memory");
        own = fresh = true;
    }
    if (j.stats && fresh) {
        goblin__parallel_for(th, items, ln_stats_item, &j);
        goblin__blis_ln_stats_commit(slot);
    }
    if (wgrad) goblin__parallel_for(th, (j.len + LN_COLS - 1) / LN_COLS, ln_dw_item, &j);
    else goblin__parallel_for(th, items, ln_dx_item, &j);
    if (own) goblin__free(j.stats);
    return GOBLIN_OK;
}

void goblin__blis_register_norm(goblin__kernel_fn *t) {
    goblin__blis_set(t, GOBLIN_OP_BATCH_NORM, blis_batch_norm);
    goblin__blis_set(t, GOBLIN_OP_BATCH_NORM_BACKWARD, blis_batch_norm);
    goblin__blis_set(t, GOBLIN_OP_LAYER_NORM_BACKWARD, blis_ln_bwd);
}
