/* libgoblin/backends/blis/blis_reduce.c - threaded, vectorized reductions,
 * softmax and row normalizations for contiguous f32/f64.
 *
 * Determinism: every result depends on the input only, never on the thread
 * count. A long reduction is cut into blocks of BLK elements (a constant); each
 * block is summed into 4*VN lanes, element i of the block into lane i mod 4*VN,
 * the lanes folded in a fixed order; block results are combined in block order
 * in double. Row-wise ops (softmax, norms) compute each row in one piece in a
 * fixed order, so splitting rows among threads cannot change a bit. The lane
 * layout is written with GCC vector types and never depends on the ISA: the
 * AVX2 clone and the baseline (SSE2) clone give identical bits, and no clone
 * enables FMA (a fused multiply-add would round differently).
 *
 * Cases not handled here (other dtypes, a reduced axis set that is not one run
 * of consecutive axes, softmax over a non-last axis) return GOBLIN_ENOTSUP and
 * run on the reference backend. */
#pragma GCC diagnostic ignored "-Wpsabi" /* vector helpers are always inlined: no ABI */
#include <math.h>
#include <string.h>
#include "backends/kernel_attrs.h"
#include "base/target_clones.h"
#include "blis_impl.h"
#include "kernels/expf.h"

#define CLONES GOBLIN_TARGET_CLONES("avx2", "default")
#define INL static inline __attribute__((always_inline))

enum {
    BLK = 1 << 16,       /* elements per block of a long reduction (fixed, thread-independent) */
    CW = 512,            /* columns per work item of a reduction over leading axes */
    COL_SPLIT_L = 1024,  /* below this row length, leading-axis reductions also split rows */
    ROW_CHUNK = 1 << 15, /* elements per work item of row-wise ops (scheduling only) */
};

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));

/* Threads for this call: k->threads, or the backend's resolved count when the
 * caller asked for "all cores" (threads = 0). Never affects results. */
static int32_t nthreads(const goblin__kctx *k) {
    if (k->threads > 0) return k->threads;
    const goblin__blis_ctx *c = k->backend;
    return c && c->threads > 0 ? c->threads : 1;
}

/* ---- lane kernels, written once for f32 (v8f) and f64 (v4d) ---------------- */

/* Helpers taking vector arguments are macros, not functions: a vector argument's
 * calling convention would differ between the clones (GCC's -Wpsabi note). */

/* Lanes of a where mask m is set, of b elsewhere. */
#define BLEND(VI, VT, m, a, b) ((VT)(((VI)(a) & (m)) | ((VI)(b) & ~(m))))

/* Unaligned vector store. */
#define VST(p, v)                                                                                  \
    do {                                                                                           \
        __typeof__(v) t_ = (v);                                                                    \
        memcpy((p), &t_, sizeof t_);                                                               \
    } while (0)

/* The 4*VN lanes of four accumulators plus the tail lanes, folded in lane order
 * into double. */
#define FOLD4(T, VN, a0, a1, a2, a3, tail)                                                         \
    ({                                                                                             \
        T l_[4 * (VN)];                                                                            \
        memcpy(l_, &(a0), sizeof(a0));                                                             \
        memcpy(l_ + (VN), &(a1), sizeof(a1));                                                      \
        memcpy(l_ + 2 * (VN), &(a2), sizeof(a2));                                                  \
        memcpy(l_ + 3 * (VN), &(a3), sizeof(a3));                                                  \
        double s_ = 0;                                                                             \
        for (int j_ = 0; j_ < 4 * (VN); j_++) s_ += (double)(l_[j_] + (tail)[j_]);                 \
        s_;                                                                                        \
    })

#define DEF_LANES(S, T, VT, VI, VN)                                                                \
    INL VT S##_ld(const T *p) {                                                                    \
        VT v;                                                                                      \
        memcpy(&v, p, sizeof v);                                                                   \
        return v;                                                                                  \
    }                                                                                              \
    /* the 4*VN lane values of sum (x_i - mu)^p for p = 1 (mu = 0: plain sum) or 2: element i \
     * of x into lane i mod 4*VN; lanes[j] is what FOLD4 adds as its j-th term */              \
    INL void S##_lanes(const T *x, int64_t n, T mu, int sq, T *lanes) {                          \
        VT a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                                 \
        int64_t i = 0;                                                                             \
        for (; i + 4 * VN <= n; i += 4 * VN) {                                                     \
            VT v0 = S##_ld(x + i) - mu, v1 = S##_ld(x + i + VN) - mu;                              \
            VT v2 = S##_ld(x + i + 2 * VN) - mu, v3 = S##_ld(x + i + 3 * VN) - mu;                 \
            if (sq) {                                                                              \
                v0 *= v0;                                                                          \
                v1 *= v1;                                                                          \
                v2 *= v2;                                                                          \
                v3 *= v3;                                                                          \
            }                                                                                      \
            a0 += v0;                                                                              \
            a1 += v1;                                                                              \
            a2 += v2;                                                                              \
            a3 += v3;                                                                              \
        }                                                                                          \
        T tail[4 * VN] = {0};                                                                      \
        for (int64_t j = 0; i + j < n; j++) {                                                      \
            T v = x[i + j] - mu;                                                                   \
            tail[j] = sq ? v * v : v;                                                              \
        }                                                                                          \
        VST(lanes, a0 + S##_ld(tail));                                                             \
        VST(lanes + VN, a1 + S##_ld(tail + VN));                                                   \
        VST(lanes + 2 * VN, a2 + S##_ld(tail + 2 * VN));                                           \
        VST(lanes + 3 * VN, a3 + S##_ld(tail + 3 * VN));                                           \
    }                                                                                              \
    /* sum (x_i - mu)^p: the lanes folded in lane order into double (FOLD4) */                     \
    INL double S##_sum(const T *x, int64_t n, T mu, int sq) {                                      \
        T l[4 * VN];                                                                               \
        S##_lanes(x, n, mu, sq, l);                                                                \
        double s = 0;                                                                              \
        for (int j = 0; j < 4 * VN; j++) s += (double)l[j];                                        \
        return s;                                                                                  \
    }                                                                                              \
    /* S##_sum of four rows (row r at x + r * ld, its own mu[r]; mu NULL: 0): the same four \
     * sums, each lane of a v4d one row's fold in the same order, so the four serial \
     * chains of double additions overlap */                                                       \
    INL void S##_sum4(const T *x, int64_t ld, int64_t n, const T *mu, int sq, double *out) {     \
        T l[4][4 * VN];                                                                            \
        for (int r = 0; r < 4; r++) S##_lanes(x + r * ld, n, mu ? mu[r] : 0, sq, l[r]);            \
        v4d s = {0, 0, 0, 0};                                                                      \
        for (int j = 0; j < 4 * VN; j++) {                                                         \
            v4d t = {(double)l[0][j], (double)l[1][j], (double)l[2][j], (double)l[3][j]};          \
            s += t;                                                                                \
        }                                                                                          \
        memcpy(out, &s, sizeof s);                                                                 \
    }                                                                                              \
    /* max (mx = 1) or min of n >= 1 elements; any NaN gives NaN */                                \
    INL double S##_ext(const T *x, int64_t n, int mx) {                                            \
        VT a0 = {0}, a1, a2, a3;                                                                   \
        a0 += x[0];                                                                                \
        a1 = a2 = a3 = a0;                                                                         \
        VI nan = {0};                                                                              \
        int64_t i = 0;                                                                             \
        for (; i + 4 * VN <= n; i += 4 * VN) {                                                     \
            VT v0 = S##_ld(x + i), v1 = S##_ld(x + i + VN);                                        \
            VT v2 = S##_ld(x + i + 2 * VN), v3 = S##_ld(x + i + 3 * VN);                           \
            nan |= (VI)(v0 != v0) | (VI)(v1 != v1) | (VI)(v2 != v2) | (VI)(v3 != v3);              \
            a0 = BLEND(VI, VT, mx ? (VI)(v0 > a0) : (VI)(v0 < a0), v0, a0);                        \
            a1 = BLEND(VI, VT, mx ? (VI)(v1 > a1) : (VI)(v1 < a1), v1, a1);                        \
            a2 = BLEND(VI, VT, mx ? (VI)(v2 > a2) : (VI)(v2 < a2), v2, a2);                        \
            a3 = BLEND(VI, VT, mx ? (VI)(v3 > a3) : (VI)(v3 < a3), v3, a3);                        \
        }                                                                                          \
        T l[4 * VN];                                                                               \
        VST(l, a0);                                                                                \
        VST(l + VN, a1);                                                                           \
        VST(l + 2 * VN, a2);                                                                       \
        VST(l + 3 * VN, a3);                                                                       \
        bool has_nan = false;                                                                      \
        for (int j = 0; j < VN; j++) has_nan |= nan[j] != 0;                                       \
        for (int64_t j = 0; i + j < n; j++) {                                                      \
            T v = x[i + j];                                                                        \
            has_nan |= v != v;                                                                     \
            if (mx ? v > l[j] : v < l[j]) l[j] = v;                                                \
        }                                                                                          \
        if (has_nan) return NAN;                                                                   \
        T r = l[0];                                                                                \
        for (int j = 1; j < 4 * VN; j++)                                                           \
            if (mx ? l[j] > r : l[j] < r) r = l[j];                                                \
        return r;                                                                                  \
    }

DEF_LANES(f32, float, v8f, v8i, 8)
DEF_LANES(f64, double, v4d, v4l, 4)

/* ---- SUM MEAN REDUCE_MAX REDUCE_MIN ---------------------------------------- */

/* The input seen as [A, R, L] with R reduced (one run of consecutive axes). */
typedef struct rjob {
    goblin_op op;
    bool f64;
    const void *x;
    void *y;
    int64_t A, R, L;
    int64_t nb;       /* rows (L == 1): blocks per row */
    int64_t rpi;      /* rows (L == 1, nb <= 1): rows per work item */
    int64_t nbr, rb;  /* columns (L > 1): row blocks and rows per block */
    int64_t nc;       /* columns: column chunks */
    double *part;
} rjob;

INL double block_reduce(const rjob *j, int64_t off, int64_t n) {
    bool ext = j->op == GOBLIN_OP_REDUCE_MAX || j->op == GOBLIN_OP_REDUCE_MIN;
    int mx = j->op == GOBLIN_OP_REDUCE_MAX;
    if (j->f64) {
        const double *x = (const double *)j->x + off;
        return ext ? (mx ? f64_ext(x, n, 1) : f64_ext(x, n, 0)) : f64_sum(x, n, 0, 0);
    }
    const float *x = (const float *)j->x + off;
    return ext ? (mx ? f32_ext(x, n, 1) : f32_ext(x, n, 0)) : f32_sum(x, n, 0, 0);
}

INL double fold2(goblin_op op, double acc, double v) {
    if (op == GOBLIN_OP_SUM || op == GOBLIN_OP_MEAN) return acc + v;
    if (acc != acc || v != v) return NAN;
    return (op == GOBLIN_OP_REDUCE_MAX ? v > acc : v < acc) ? v : acc;
}

INL void store_result(const rjob *j, int64_t o, double v) {
    if (j->op == GOBLIN_OP_MEAN) v /= (double)j->R;
    if (j->f64) ((double *)j->y)[o] = v;
    else ((float *)j->y)[o] = (float)v;
}

CLONES static void row_item(void *arg, int64_t i) {
    const rjob *j = arg;
    int64_t r1 = (i + 1) * j->rpi < j->A ? (i + 1) * j->rpi : j->A;
    int64_t r = i * j->rpi;
    if (j->R && (j->op == GOBLIN_OP_SUM || j->op == GOBLIN_OP_MEAN))
        for (; r + 4 <= r1; r += 4) { /* four rows at a time: block_reduce's bits */
            double v[4];
            if (j->f64) f64_sum4((const double *)j->x + r * j->R, j->R, j->R, NULL, 0, v);
            else f32_sum4((const float *)j->x + r * j->R, j->R, j->R, NULL, 0, v);
            for (int q = 0; q < 4; q++) store_result(j, r + q, v[q]);
        }
    for (; r < r1; r++)
        store_result(j, r, j->R ? block_reduce(j, r * j->R, j->R) : 0.0);
}

CLONES static void row_block_item(void *arg, int64_t i) {
    const rjob *j = arg;
    int64_t r = i / j->nb, b = i % j->nb;
    int64_t n = j->R - b * BLK < BLK ? j->R - b * BLK : BLK;
    j->part[i] = block_reduce(j, r * j->R + b * BLK, n);
}

/* Columns c0.. of row block rb of slab a, accumulated in double over rows in order. */
#define COL_LOOP(T)                                                                                \
    do {                                                                                           \
        const T *x = (const T *)j->x + (a * j->R + r0) * j->L + c0;                                \
        for (int64_t l = 0; l < w; l++) acc[l] = x[l];                                             \
        for (int64_t r = 1; r < r1 - r0; r++) {                                                    \
            const T *row = x + r * j->L;                                                           \
            if (sum && w == CW) {                                                                  \
                for (int64_t l = 0; l < CW; l++) acc[l] += row[l];                                 \
            } else if (sum) {                                                                      \
                for (int64_t l = 0; l < w; l++) acc[l] += row[l];                                  \
            } else {                                                                               \
                for (int64_t l = 0; l < w; l++) acc[l] = fold2(j->op, acc[l], row[l]);             \
            }                                                                                      \
        }                                                                                          \
    } while (0)

CLONES static void col_item(void *arg, int64_t i) {
    const rjob *j = arg;
    int64_t a = i / (j->nbr * j->nc), rem = i % (j->nbr * j->nc);
    int64_t rb = rem / j->nc, c0 = (rem % j->nc) * CW;
    int64_t w = j->L - c0 < CW ? j->L - c0 : CW;
    int64_t r0 = rb * j->rb, r1 = r0 + j->rb < j->R ? r0 + j->rb : j->R;
    bool sum = j->op == GOBLIN_OP_SUM || j->op == GOBLIN_OP_MEAN;
    double acc[CW];
    if (j->f64) COL_LOOP(double);
    else COL_LOOP(float);
    if (j->nbr == 1)
        for (int64_t l = 0; l < w; l++) store_result(j, a * j->L + c0 + l, acc[l]);
    else
        memcpy(j->part + (a * j->nbr + rb) * j->L + c0, acc, (size_t)w * sizeof(double));
}

CLONES static void col_combine_item(void *arg, int64_t i) {
    const rjob *j = arg;
    int64_t a = i / j->nc, c0 = (i % j->nc) * CW;
    int64_t w = j->L - c0 < CW ? j->L - c0 : CW;
    const double *p = j->part + a * j->nbr * j->L + c0;
    for (int64_t l = 0; l < w; l++) {
        double v = p[l];
        for (int64_t rb = 1; rb < j->nbr; rb++) v = fold2(j->op, v, p[rb * j->L + l]);
        store_result(j, a * j->L + c0 + l, v);
    }
}

/* AXES as validated by inference; absent or empty means all axes. */
/* Split shape into [A, R, L] where the dims in mask (ignoring size-1 dims) form
 * one consecutive run. False if they do not. */
static bool split_arl(const goblin_tensor *t, uint32_t mask, int64_t *A, int64_t *R, int64_t *L) {
    int phase = 0; /* 0: leading kept dims, 1: reduced run, 2: trailing kept dims */
    *A = *R = *L = 1;
    for (int32_t d = 0; d < t->rank; d++) {
        int64_t s = t->shape[d];
        if (s == 1) continue;
        bool red = (mask >> d) & 1u;
        if (phase == 0 && red) phase = 1;
        else if (phase == 1 && !red) phase = 2;
        else if (phase == 2 && red) return false;
        *(phase == 0 ? A : phase == 1 ? R : L) *= s;
    }
    return true;
}

static goblin_err k_reduce(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    const goblin_tensor *x = &in[0];
    if (x->dtype != GOBLIN_DTYPE_F32 && x->dtype != GOBLIN_DTYPE_F64) return GOBLIN_ENOTSUP;
    rjob j = {.op = node->op, .f64 = x->dtype == GOBLIN_DTYPE_F64, .x = x->data, .y = out->data};
    if (!split_arl(x, goblin__axes_mask(node, x->rank), &j.A, &j.R, &j.L)) return GOBLIN_ENOTSUP;
    if (j.A == 0 || j.L == 0) return GOBLIN_OK; /* empty output */
    bool ext = j.op == GOBLIN_OP_REDUCE_MAX || j.op == GOBLIN_OP_REDUCE_MIN;
    if (j.R == 0) {
        if (ext) return GOBLIN_ENOTSUP; /* inference forbids it; the reference says why */
        for (int64_t o = 0; o < j.A * j.L; o++) store_result(&j, o, 0.0);
        return GOBLIN_OK;
    }
    if (j.L == 1) {
        j.nb = (j.R + BLK - 1) / BLK;
        if (j.nb <= 1) {
            j.rpi = ROW_CHUNK / j.R > 1 ? ROW_CHUNK / j.R : 1;
            goblin__parallel_for(nthreads(k), (j.A + j.rpi - 1) / j.rpi, row_item, &j);
            return GOBLIN_OK;
        }
        size_t np;
        if (!goblin__mul_size((size_t)j.A, (size_t)j.nb, &np) ||
            !goblin__mul_size(np, sizeof(double), &np))
            return GOBLIN_ENOMEM;
        if (!(j.part = goblin__alloc(np))) return GOBLIN_ENOMEM;
        goblin__parallel_for(nthreads(k), j.A * j.nb, row_block_item, &j);
        for (int64_t r = 0; r < j.A; r++) { /* combine blocks in block order */
            double v = j.part[r * j.nb];
            for (int64_t b = 1; b < j.nb; b++) v = fold2(j.op, v, j.part[r * j.nb + b]);
            store_result(&j, r, v);
        }
        goblin__free(j.part);
        return GOBLIN_OK;
    }
    j.nc = (j.L + CW - 1) / CW;
    j.rb = j.L >= COL_SPLIT_L ? j.R : (BLK + j.L - 1) / j.L;
    j.nbr = (j.R + j.rb - 1) / j.rb;
    if (j.nbr > 1) {
        size_t np;
        if (!goblin__mul_size((size_t)j.A * (size_t)j.nbr, (size_t)j.L, &np) ||
            !goblin__mul_size(np, sizeof(double), &np))
            return GOBLIN_ENOMEM;
        if (!(j.part = goblin__alloc(np))) return GOBLIN_ENOMEM;
    }
    goblin__parallel_for(nthreads(k), j.A * j.nbr * j.nc, col_item, &j);
    if (j.nbr > 1) {
        goblin__parallel_for(nthreads(k), j.A * j.nc, col_combine_item, &j);
        goblin__free(j.part);
    }
    return GOBLIN_OK;
}

/* ---- SOFTMAX / LOG_SOFTMAX over the last (non-trivial) axis -------------------- */

/* exp(x) for x <= 0 (no NaN): expf_impl.h's vector form (Cody-Waite reduction, our
 * fitted polynomial, 2^n in two halves so that subnormal results come out right),
 * separately rounded operations only, the same bits in every clone. */
#define VEXP_NEG(xin) GOBLIN__VEXPF_NEG(v8f, v8i, xin)

typedef struct sjob {
    bool f64, lg;
    const void *x;
    void *y;
    int64_t rows, len, rpi;
} sjob;

INL void f32_softmax_row(const float *x, float *y, int64_t n, bool lg) {
    float m = (float)f32_ext(x, n, 1);
    if (!isfinite(m)) { /* NaN or infinite max: the whole row is NaN (exp(inf - inf)) */
        for (int64_t i = 0; i < n; i++) y[i] = NAN;
        return;
    }
    v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        /* each exponential is consumed at once: fewer live registers, no spills */
        v8f e = VEXP_NEG(f32_ld(x + i) - m);
        a0 += e;
        if (!lg) VST(y + i, e);
        e = VEXP_NEG(f32_ld(x + i + 8) - m);
        a1 += e;
        if (!lg) VST(y + i + 8, e);
        e = VEXP_NEG(f32_ld(x + i + 16) - m);
        a2 += e;
        if (!lg) VST(y + i + 16, e);
        e = VEXP_NEG(f32_ld(x + i + 24) - m);
        a3 += e;
        if (!lg) VST(y + i + 24, e);
    }
    float tail[32] = {0};
    for (int64_t g = 0; i + g < n; g += 8) { /* the tail, padded to whole vectors */
        float buf[8];
        int64_t w = n - i - g < 8 ? n - i - g : 8;
        for (int64_t l = 0; l < 8; l++) buf[l] = l < w ? x[i + g + l] : m;
        float e[8];
        VST(e, VEXP_NEG(f32_ld(buf) - m));
        for (int64_t l = 0; l < w; l++) {
            tail[g + l] = e[l];
            if (!lg) y[i + g + l] = e[l];
        }
    }
    double s = FOLD4(float, 8, a0, a1, a2, a3, tail);
    if (lg) {
        float ls = (float)log(s);
        int64_t q = 0;
        for (; q + 8 <= n; q += 8) VST(y + q, (f32_ld(x + q) - m) - ls);
        for (; q < n; q++) y[q] = (x[q] - m) - ls;
    } else {
        float inv = (float)(1.0 / s);
        int64_t q = 0;
        for (; q + 8 <= n; q += 8) VST(y + q, f32_ld(y + q) * inv);
        for (; q < n; q++) y[q] *= inv;
    }
}

INL void f64_softmax_row(const double *x, double *y, int64_t n, bool lg) {
    double m = f64_ext(x, n, 1);
    if (!isfinite(m)) {
        for (int64_t i = 0; i < n; i++) y[i] = NAN;
        return;
    }
    /* libm exp per element; four sums in a fixed interleave. */
    double s4[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) {
        double e = exp(x[i] - m);
        s4[i & 3] += e;
        if (!lg) y[i] = e;
    }
    double s = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    if (lg) {
        double ls = log(s);
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) - ls;
    } else {
        double inv = 1.0 / s;
        for (int64_t i = 0; i < n; i++) y[i] *= inv;
    }
}

CLONES static void softmax_item(void *arg, int64_t i) {
    const sjob *j = arg;
    int64_t r1 = (i + 1) * j->rpi < j->rows ? (i + 1) * j->rpi : j->rows;
    for (int64_t r = i * j->rpi; r < r1; r++) {
        int64_t off = r * j->len;
        if (j->f64)
            f64_softmax_row((const double *)j->x + off, (double *)j->y + off, j->len, j->lg);
        else
            f32_softmax_row((const float *)j->x + off, (float *)j->y + off, j->len, j->lg);
    }
}

goblin_err goblin__blis_softmax_last_axis(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    const goblin_tensor *x = &in[0];
    if (x->dtype != GOBLIN_DTYPE_F32 && x->dtype != GOBLIN_DTYPE_F64) return GOBLIN_ENOTSUP;
    int64_t ax = goblin__attr_i(node, GOBLIN_ATTR_AXIS, -1);
    if (ax < 0) ax += x->rank;
    int64_t A, R, L;
    if (x->rank == 0 || !split_arl(x, 1u << ax, &A, &R, &L) || L != 1) return GOBLIN_ENOTSUP;
    if (A == 0 || R == 0) return GOBLIN_OK;
    sjob j = {.f64 = x->dtype == GOBLIN_DTYPE_F64, .lg = node->op == GOBLIN_OP_LOG_SOFTMAX,
              .x = x->data, .y = out->data, .rows = A, .len = R};
    j.rpi = ROW_CHUNK / R > 1 ? ROW_CHUNK / R : 1;
    goblin__parallel_for(nthreads(k), (A + j.rpi - 1) / j.rpi, softmax_item, &j);
    return GOBLIN_OK;
}

/* ---- LAYER_NORM / RMS_NORM over the trailing norm_ndim dims -------------------- */

typedef struct njob {
    bool f64, rms;
    const void *x, *w, *b;
    void *y;
    int64_t rows, len, rpi;
    double eps;
    void *stats; /* layer norm: mu of every row, then rs, kept for the backward (or NULL) */
} njob;

/* row rr's statistics into j->stats (mu at rr, rs at rows + rr), when kept */
#define NORM_KEEP(T, rr, mu, rs)                                                                   \
    do {                                                                                           \
        if (j->stats) {                                                                            \
            ((T *)j->stats)[rr] = (mu);                                                            \
            ((T *)j->stats)[j->rows + (rr)] = (rs);                                                \
        }                                                                                          \
    } while (0)

#define NORM_ROW(S, T, VN)                                                                         \
    do {                                                                                           \
        const T *x_ = (const T *)j->x + r * n;                                                     \
        T mu_ = j->rms ? 0 : (T)(S##_sum(x_, n, 0, 0) / (double)n);                                \
        T rs_ = (T)(1.0 / sqrt(S##_sum(x_, n, mu_, 1) / (double)n + j->eps));                      \
        NORM_KEEP(T, r, mu_, rs_);                                                                 \
        NORM_APPLY(S, T, VN, r, mu_, rs_);                                                         \
    } while (0)

/* y = (x - mu) rs [* w] [+ b] for row rr */
#define NORM_APPLY(S, T, VN, rr, mu, rs)                                                           \
    do {                                                                                           \
        const T *x = (const T *)j->x + (rr) * n, *w = j->w, *b = j->b;                             \
        T *y = (T *)j->y + (rr) * n;                                                               \
        int64_t q = 0;                                                                             \
        for (; q + VN <= n; q += VN) {                                                             \
            typeof(S##_ld(x)) v = (S##_ld(x + q) - mu) * rs;                                       \
            if (w) v *= S##_ld(w + q);                                                             \
            if (b) v += S##_ld(b + q);                                                             \
            VST(y + q, v);                                                                         \
        }                                                                                          \
        for (; q < n; q++) {                                                                       \
            T v = (x[q] - mu) * rs;                                                                \
            if (w) v *= w[q];                                                                      \
            if (b) v += b[q];                                                                      \
            y[q] = v;                                                                              \
        }                                                                                          \
    } while (0)

CLONES static void norm_item(void *arg, int64_t i) {
    const njob *j = arg;
    int64_t n = j->len;
    int64_t r1 = (i + 1) * j->rpi < j->rows ? (i + 1) * j->rpi : j->rows;
    int64_t r = i * j->rpi;
    if (!j->f64)
        for (; r + 4 <= r1; r += 4) { /* statistics of four rows at a time, NORM_ROW's bits */
            const float *x0 = (const float *)j->x + r * n;
            float mu[4] = {0, 0, 0, 0}, rs[4];
            double s[4];
            if (!j->rms) {
                f32_sum4(x0, n, n, NULL, 0, s);
                for (int k4 = 0; k4 < 4; k4++) mu[k4] = (float)(s[k4] / (double)n);
            }
            f32_sum4(x0, n, n, mu, 1, s);
            for (int k4 = 0; k4 < 4; k4++) rs[k4] = (float)(1.0 / sqrt(s[k4] / (double)n + j->eps));
            for (int k4 = 0; k4 < 4; k4++) NORM_KEEP(float, r + k4, mu[k4], rs[k4]);
            for (int k4 = 0; k4 < 4; k4++) NORM_APPLY(f32, float, 8, r + k4, mu[k4], rs[k4]);
        }
    for (; r < r1; r++) {
        if (j->f64) NORM_ROW(f64, double, 4);
        else NORM_ROW(f32, float, 8);
    }
}

static goblin_err k_norm(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                         int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0];
    if (x->dtype != GOBLIN_DTYPE_F32 && x->dtype != GOBLIN_DTYPE_F64) return GOBLIN_ENOTSUP;
    bool rms = node->op == GOBLIN_OP_RMS_NORM;
    int64_t nd = goblin__attr_i(node, GOBLIN_ATTR_NORM_NDIM, 1);
    njob j = {.f64 = x->dtype == GOBLIN_DTYPE_F64, .rms = rms, .x = x->data, .y = out->data,
              .w = n_in > 1 ? in[1].data : NULL, .b = !rms && n_in > 2 ? in[2].data : NULL,
              .rows = 1, .len = 1, .eps = goblin__attr_f(node, GOBLIN_ATTR_EPS, rms ? 1e-6 : 1e-5)};
    for (int32_t d = 0; d < x->rank; d++) {
        if (d >= x->rank - nd) j.len *= x->shape[d];
        else j.rows *= x->shape[d];
    }
    if (j.rows == 0 || j.len == 0) return GOBLIN_OK;
    j.rpi = ROW_CHUNK / j.len > 1 ? ROW_CHUNK / j.len : 1;
    /* layer norm: its statistics kept for the backward of the same run (blis_norm.c) */
    int slot = -1;
    if (!rms && node->n_inputs > 0)
        j.stats = goblin__blis_ln_stats_add(k->run, node->inputs[0], x->data, j.rows, j.len, j.eps,
                                            j.f64, &slot);
    goblin__parallel_for(nthreads(k), (j.rows + j.rpi - 1) / j.rpi, norm_item, &j);
    if (j.stats) goblin__blis_ln_stats_commit(slot);
    return GOBLIN_OK;
}

void goblin__blis_register_reduce(goblin__kernel_fn *t) {
    goblin__blis_set(t, GOBLIN_OP_SUM, k_reduce);
    goblin__blis_set(t, GOBLIN_OP_MEAN, k_reduce);
    goblin__blis_set(t, GOBLIN_OP_REDUCE_MAX, k_reduce);
    goblin__blis_set(t, GOBLIN_OP_REDUCE_MIN, k_reduce);
    goblin__blis_set(t, GOBLIN_OP_LAYER_NORM, k_norm);
    goblin__blis_set(t, GOBLIN_OP_RMS_NORM, k_norm);
}
