/* libgoblin/verify.c - Freivalds' check of matmul tiles, replica comparison and
 * spot-checks (goblin/verify.h).
 *
 * Every threshold here is derived in docs/verification.md; the comments only
 * name the formula. Notation: u is the unit roundoff of the result's dtype,
 * u64 = 2^-53 that of the f64 arithmetic the check itself runs in,
 * gamma_j(u) = j u / (1 - j u). */
#include <goblin/verify.h>
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include "alloc.h"
#include "graph_impl.h"
#include "kernel_util.h"
#include "random.h"

/* Philox streams of our draws, outside the catalogue's range (the random ops use
 * their op value as stream), so no op output can ever equal a secret vector. */
#define VERIFY_STREAM_FREIVALDS 0x46524556u /* "FREV" */
#define VERIFY_STREAM_SAMPLE 0x53414d50u    /* "SAMP" */

#define U64 0x1p-53
#define ETA64 0x1p-1074 /* absolute error of an underflowing f64 product */

const char *goblin_verdict_name(goblin_verdict_kind kind) {
    switch (kind) {
    case GOBLIN_VERDICT_ACCEPT: return "accept";
    case GOBLIN_VERDICT_ESCALATE: return "escalate";
    case GOBLIN_VERDICT_REJECT: return "reject";
    default: return "invalid";
    }
}

const char *goblin_verify_reason_name(goblin_verify_reason reason) {
    static const char *const names[GOBLIN_VERIFY_REASON_COUNT] = {
        "ok", "bit_equal", "between", "exceeds_bound", "nonfinite", "shape", "dtype", "uncheckable",
    };
    if ((unsigned)reason >= GOBLIN_VERIFY_REASON_COUNT) return "invalid";
    return names[reason];
}

static double gamma_n(double n, double u) {
    double nu = n * u;
    return nu < 1 ? nu / (1 - nu) : INFINITY;
}

static double max_finite(goblin_dtype dt) {
    switch (dt) {
    case GOBLIN_DTYPE_F64: return DBL_MAX;
    case GOBLIN_DTYPE_F16: return 65504.0;
    case GOBLIN_DTYPE_BF16: return 0x1.fep127;
    default: return FLT_MAX;
    }
}

static void verdict_init(goblin_verdict *v) {
    memset(v, 0, sizeof *v);
    v->kind = GOBLIN_VERDICT_ACCEPT;
    v->reason = GOBLIN_VERIFY_OK;
    v->worst_index = -1;
}

static goblin_err verdict_reject(goblin_verdict *v, goblin_verify_reason why) {
    verdict_init(v);
    v->kind = GOBLIN_VERDICT_REJECT;
    v->reason = why;
    v->worst_ratio = INFINITY;
    v->worst_tight_ratio = INFINITY;
    return GOBLIN_OK;
}

/* discrepancy / level, with 0/0 = 0 and x/0 = inf. */
static double ratio_of(double d, double level) {
    if (d == 0) return 0;
    if (!(level > 0)) return INFINITY;
    return d / level;
}

/* Is the descriptor's shape sane (rank in range, dims >= 0)? */
static bool shape_ok(const goblin_tensor *t) {
    if (t->rank < 0 || t->rank > GOBLIN_MAX_RANK) return false;
    for (int32_t d = 0; d < t->rank; d++)
        if (t->shape[d] < 0) return false;
    return true;
}

static bool same_shape(const goblin_tensor *a, const goblin_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int32_t d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* ======================================================================== */
/* Freivalds                                                                */
/* ======================================================================== */

void goblin_freivalds_params_default(goblin_freivalds_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->seed = 0;
    p->vectors = 4;
    p->tight_sigmas = 6.0;
    p->bound_sigmas = 10.0;
    p->k0 = 0;
    p->kn = -1;
}

/* ---- the passes over A, B and C ------------------------------------------ *
 *
 * They are where the check spends its time, so each reads its matrix once, row
 * by row, four rows at a time in chunks of FV_CHUNK columns: a chunk of four rows
 * is converted to f64 in a small buffer (f64 rows with unit stride are read in
 * place), and every element of it meets all the vectors' weights while it is in
 * registers. The vectors are handled four at a time, one per lane of a four-lane
 * GCC/Clang vector (v4); lanes beyond `vectors` hold r = 0 and are ignored. Each
 * vector's r and |r| (and B r, |B| |r|) are interleaved so that one cache line
 * serves both. The passes are built twice and chosen at run time: for AVX2+FMA,
 * where a v4 is one register, and a baseline (@p base) that computes with native
 * two-lane vectors (v2: one SSE2 or NEON register, a pair of scalars elsewhere),
 * since GCC keeps a v4 without AVX in memory and round-trips every accumulator
 * through the stack. An FMA only removes roundings, so the error bounds hold for
 * both, and any summation order keeps the gamma_len error bound the levels assume. */
#define LANES 4
#define FV_ROWS 4    /* rows of a matrix in flight */
#define FV_CHUNK 128 /* columns per chunk: four rows stay in L1 with two panels' weights */
typedef double v4 __attribute__((vector_size(LANES * sizeof(double))));
typedef float f4 __attribute__((vector_size(LANES * sizeof(float))));
typedef int64_t i4 __attribute__((vector_size(LANES * sizeof(int64_t))));
typedef double v2 __attribute__((vector_size(2 * sizeof(double))));
typedef int64_t i2 __attribute__((vector_size(2 * sizeof(int64_t))));

#define splat(x) ((v4){(x), (x), (x), (x)})
#define FV_INLINE static inline __attribute__((always_inline))

#if defined(__x86_64__) && defined(__GNUC__)
#define FV_HAVE_V3 1
#define FV_V3 __attribute__((target("avx2,fma")))
#else
#define FV_HAVE_V3 0
#endif

/* Macros rather than functions: a function passing v4 by value draws GCC's -Wpsabi
 * note when built without AVX. */
#define v4_abs(x) ((v4)((i4)(x) & (i4){INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX}))
#define v4_sum(x) (((x)[0] + (x)[1]) + ((x)[2] + (x)[3]))
#define v4_ld(dst, p) memcpy(&(dst), (p), sizeof(v4))
#define v2_abs(x) ((v2)((i2)(x) & (i2){INT64_MAX, INT64_MAX}))
#define v2_ld(dst, p) memcpy(&(dst), (p), sizeof(v2))
#define v2_st(p, src) memcpy((p), &(src), sizeof(v2))

/* @p len elements with element stride @p stride (may be 0 or negative) into f64.
 * @p vb: the baseline passes' variant. */
FV_INLINE void load_row_impl(goblin_dtype dt, const char *base, int64_t stride, int64_t len,
                             double *restrict buf, bool vb) {
    if (dt == GOBLIN_DTYPE_F32) {
        const float *restrict p = (const float *)base;
        if (stride == 1 && vb) {
            /* blocks of four that the compiler turns into two-lane conversions */
            int64_t j = 0;
            for (; j + 4 <= len; j += 4)
                for (int k = 0; k < 4; k++) buf[j + k] = p[j + k];
            for (; j < len; j++) buf[j] = p[j];
        } else if (stride == 1) {
            int64_t j = 0;
            for (; j + 2 * LANES <= len; j += 2 * LANES) {
                f4 x0, x1;
                memcpy(&x0, p + j, sizeof x0);
                memcpy(&x1, p + j + LANES, sizeof x1);
                v4 d0 = __builtin_convertvector(x0, v4), d1 = __builtin_convertvector(x1, v4);
                memcpy(buf + j, &d0, sizeof d0);
                memcpy(buf + j + LANES, &d1, sizeof d1);
            }
            for (; j < len; j++) buf[j] = p[j];
        } else {
            for (int64_t j = 0; j < len; j++) buf[j] = p[j * stride];
        }
    } else {
        const double *p = (const double *)base;
        if (stride == 1)
            memcpy(buf, p, (size_t)len * sizeof(double));
        else
            for (int64_t j = 0; j < len; j++) buf[j] = p[j * stride];
    }
}

static void load_row(goblin_dtype dt, const char *base, int64_t stride, int64_t len, double *buf) {
    load_row_impl(dt, base, stride, len, buf, true);
}

/* A chunk of a row as f64: in place for f64 with unit stride, else converted into
 * @p buf. @p sanitize: NaN/inf read as 0. */
FV_INLINE const double *chunk_impl(goblin_dtype dt, const char *base, int64_t stride, int64_t len,
                                   double *buf, bool sanitize, bool vb) {
    if (dt == GOBLIN_DTYPE_F64 && stride == 1 && !sanitize) return (const double *)base;
    load_row_impl(dt, base, stride, len, buf, vb);
    if (sanitize)
        for (int64_t j = 0; j < len; j++)
            if (!isfinite(buf[j])) buf[j] = 0;
    return buf;
}

/* The baseline's mdot for the two rows @p x0, @p x1: acc[0] += sum_j x0[j] w[2j],
 * acc[1] += sum_j |x0[j]| w[2j + 1], acc[2], acc[3] the same for x1, each v4 as two
 * v2 halves: sixteen accumulators, weights and broadcasts fit the sixteen SSE2
 * registers (sixteen accumulators of four rows would not). */
FV_INLINE void mdot2_base(const double *x0, const double *x1, const v4 *w, int64_t len, v4 *acc) {
    const double *wd = (const double *)w;
    double *ad = (double *)acc;
    v2 s0l, s0h, a0l, a0h, s1l, s1h, a1l, a1h;
    v2_ld(s0l, ad), v2_ld(s0h, ad + 2), v2_ld(a0l, ad + 4), v2_ld(a0h, ad + 6);
    v2_ld(s1l, ad + 8), v2_ld(s1h, ad + 10), v2_ld(a1l, ad + 12), v2_ld(a1h, ad + 14);
    for (int64_t j = 0; j < len; j++) {
        const double *wj = wd + 8 * j;
        v2 rl, rh, ql, qh;
        v2_ld(rl, wj), v2_ld(rh, wj + 2), v2_ld(ql, wj + 4), v2_ld(qh, wj + 6);
        v2 b0 = {x0[j], x0[j]}, b1 = {x1[j], x1[j]};
        v2 c0 = v2_abs(b0), c1 = v2_abs(b1);
        s0l += b0 * rl, s0h += b0 * rh, a0l += c0 * ql, a0h += c0 * qh;
        s1l += b1 * rl, s1h += b1 * rh, a1l += c1 * ql, a1h += c1 * qh;
    }
    v2_st(ad, s0l), v2_st(ad + 2, s0h), v2_st(ad + 4, a0l), v2_st(ad + 6, a0h);
    v2_st(ad + 8, s1l), v2_st(ad + 10, s1h), v2_st(ad + 12, a1l), v2_st(ad + 14, a1h);
}

/* For the rows q < FV_ROWS of a chunk: acc[2q] += sum_j x_q[j] w[2j] and
 * acc[2q + 1] += sum_j |x_q[j]| w[2j + 1], lane by lane. @p vb: the baseline, two
 * rows at a time. */
FV_INLINE void mdot_impl(const double *const x[FV_ROWS], const v4 *w, int64_t len, v4 *acc,
                         bool vb) {
    if (vb) {
        mdot2_base(x[0], x[1], w, len, acc);
        mdot2_base(x[2], x[3], w, len, acc + 4);
        return;
    }
    const double *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3];
    v4 s0 = acc[0], a0 = acc[1], s1 = acc[2], a1 = acc[3];
    v4 s2 = acc[4], a2 = acc[5], s3 = acc[6], a3 = acc[7];
    for (int64_t j = 0; j < len; j++) {
        v4 wr = w[2 * j], wa = w[2 * j + 1];
        v4 b0 = splat(x0[j]), b1 = splat(x1[j]), b2 = splat(x2[j]), b3 = splat(x3[j]);
        s0 += b0 * wr;
        a0 += v4_abs(b0) * wa;
        s1 += b1 * wr;
        a1 += v4_abs(b1) * wa;
        s2 += b2 * wr;
        a2 += v4_abs(b2) * wa;
        s3 += b3 * wr;
        a3 += v4_abs(b3) * wa;
    }
    acc[0] = s0, acc[1] = a0, acc[2] = s1, acc[3] = a1;
    acc[4] = s2, acc[5] = a2, acc[6] = s3, acc[7] = a3;
}

/* sq[q] += x_q^2 and ab[q] += |x_q| (lane partial sums), rows q < @p rows; four
 * partial sums each, so that the loop is not bound by the adds' latency. */
FV_INLINE void sqab_impl(const double *const x[FV_ROWS], int rows, int64_t len, v4 *sq, v4 *ab,
                         bool vb) {
    if (vb) {
        for (int q = 0; q < rows; q++) {
            const double *xq = x[q];
            double *sd = (double *)&sq[q], *ad = (double *)&ab[q];
            v2 s0, s1, s2, s3, a0, a1, a2, a3;
            v2_ld(s0, sd), v2_ld(s1, sd + 2), v2_ld(a0, ad), v2_ld(a1, ad + 2);
            s2 = s3 = a2 = a3 = (v2){0.0, 0.0};
            int64_t j = 0;
            for (; j + 8 <= len; j += 8) {
                v2 v0, v1, v2_, v3;
                v2_ld(v0, xq + j), v2_ld(v1, xq + j + 2), v2_ld(v2_, xq + j + 4),
                    v2_ld(v3, xq + j + 6);
                s0 += v0 * v0, s1 += v1 * v1, s2 += v2_ * v2_, s3 += v3 * v3;
                a0 += v2_abs(v0), a1 += v2_abs(v1), a2 += v2_abs(v2_), a3 += v2_abs(v3);
            }
            for (; j < len; j++) {
                s0[0] += xq[j] * xq[j];
                a0[0] += fabs(xq[j]);
            }
            s0 += s2, s1 += s3, a0 += a2, a1 += a3;
            v2_st(sd, s0), v2_st(sd + 2, s1), v2_st(ad, a0), v2_st(ad + 2, a1);
        }
        return;
    }
    for (int q = 0; q < rows; q++) {
        const double *xq = x[q];
        v4 s0 = sq[q], s1 = splat(0), s2 = splat(0), s3 = splat(0);
        v4 a0 = ab[q], a1 = splat(0), a2 = splat(0), a3 = splat(0);
        int64_t j = 0;
        for (; j + 4 * LANES <= len; j += 4 * LANES) {
            v4 v0, v1, v2, v3;
            v4_ld(v0, xq + j);
            v4_ld(v1, xq + j + LANES);
            v4_ld(v2, xq + j + 2 * LANES);
            v4_ld(v3, xq + j + 3 * LANES);
            s0 += v0 * v0, s1 += v1 * v1, s2 += v2 * v2, s3 += v3 * v3;
            a0 += v4_abs(v0), a1 += v4_abs(v1), a2 += v4_abs(v2), a3 += v4_abs(v3);
        }
        for (; j < len; j++) {
            s0[0] += xq[j] * xq[j];
            a0[0] += fabs(xq[j]);
        }
        sq[q] = (s0 + s1) + (s2 + s3);
        ab[q] = (a0 + a1) + (a2 + a3);
    }
}

/* ---- the check's state ---------------------------------------------------- *
 *
 * A panels object (goblin_freivalds_panels) holds everything that depends only on
 * A, B and the secret vectors: r for all N columns, y = B r and s = |B| |r| per
 * column panel, the column norms of B, the per-panel levels, and for each prepared
 * row range of A, z = A y and P = |A| s per panel with the row norms.
 * goblin_verify_matmul is one such object with one panel and one range. */

/* The per-row levels of one column panel (docs/verification.md, "Freivalds"). */
typedef struct fv_levels {
    int64_t nv, ng, n_bad;
    double rel_c, abs_c, g_z, g_w, grow, bf, n_good, sig_k, sig_z, sig_w, dn, dK;
    double tight_sigmas, bound_sigmas;
    bool rel_finite;
    double sr1[GOBLIN_FREIVALDS_MAX_VECTORS], nb[GOBLIN_FREIVALDS_MAX_VECTORS];
} fv_levels;

/* A prepared row range of A. */
typedef struct fv_range {
    int64_t row0, rows;
    v4 *zt;           /* [np][ng][rows][2]: A (B r) and |A| (|B| |r|) per panel */
    double *asq, *a1; /* [rows] sum a^2 and sum |a| per row of A */
} fv_range;

struct goblin_freivalds_panels {
    goblin_dtype dt;
    size_t es;
    int64_t M, N, K;
    int64_t nv, ng;     /* vectors, groups of LANES vectors */
    int32_t np;         /* column panels */
    bool v3;            /* the AVX2+FMA passes */
    const char *a0;     /* A at (0, k0); NULL if K = 0 */
    int64_t as0, as1;
    const char *b0;     /* B at (k0, 0); NULL if K = 0 */
    int64_t bs0, bs1;
    int64_t *cb;        /* [np + 1] column bounds */
    v4 *rw;             /* [ng][N][2]: the secret vectors r and |r| (0 in masked columns) */
    v4 *ys;             /* [np][ng][K][2]: B r and |B| |r| per panel */
    v4 *acc;            /* [np][ng][2 FV_ROWS]: the pass over A's accumulators */
    fv_levels *lv;      /* [np] */
    double *colsq;      /* [N] sum b^2 per column of B (0 in masked columns) */
    double *xb;         /* [FV_ROWS][FV_CHUNK] converted chunks */
    double *buf;        /* [widest panel] one row of C */
    unsigned char *bad; /* [N] column of B holds NaN/inf or overflows */
    fv_range *ranges;   /* the prepared row ranges: inline_ranges until there are more */
    int32_t n_ranges, cap_ranges;
    fv_range inline_ranges[4];
};

typedef goblin_freivalds_panels fvp;

/* The tile of C being judged: rows x n at @p c0, the panel's r at rw (group stride N). */
typedef struct fv_tile {
    const char *c0;
    int64_t cs0, cs1, rows, n;
    const v4 *rw;
} fv_tile;

/* The rows of a block: row q < rows at @p base + q * @p s0 (elements), from column
 * @p j0, @p len columns; missing rows repeat row 0 (their sums are not used). The
 * same columns of the next @p next rows (0..FV_ROWS) are prefetched: the passes
 * stream matrices far bigger than the caches, and tiles are strided views whose
 * rows the hardware prefetchers follow poorly. Into L2, not L1: they are read only
 * after every chunk of the current block, by when L1 has long evicted them (to L1
 * the prefetches cost a third of the passes' time; measured in docs/verification.md). */
FV_INLINE void block_rows(const fvp *f, const char *base, int64_t s0, int64_t s1, int rows,
                          int64_t j0, int64_t len, bool sanitize, int next,
                          const double *x[FV_ROWS], bool vb) {
    int64_t es = (int64_t)f->es;
    if (s1 == 1)
        for (int q = 0; q < next; q++) {
            const char *p = base + ((FV_ROWS + q) * s0 + j0) * es;
            for (int64_t o = 0; o < len * es; o += 64) __builtin_prefetch(p + o, 0, 2);
        }
    for (int q = 0; q < FV_ROWS; q++)
        x[q] = q < rows ? chunk_impl(f->dt, base + (q * s0 + j0 * s1) * es, s1, len,
                                     f->xb + q * FV_CHUNK, sanitize, vb)
                        : x[0];
}

/* Rows still to come after the block at row @p r0 of @p total, up to FV_ROWS. */
static inline int rows_next(int64_t r0, int64_t total) {
    int64_t left = total - r0 - FV_ROWS;
    return left <= 0 ? 0 : left < FV_ROWS ? (int)left : FV_ROWS;
}

/* ys = (B r, |B| |r|) of every column panel and the column norms of B, one pass over
 * B by rows (a block of rows meets every panel before the next block is read).
 * @p sanitize: read NaN/inf as 0 (their columns are masked: r_j = 0 there). */
FV_INLINE void pass_b_impl(fvp *f, bool sanitize, bool vb) {
    int64_t N = f->N, K = f->K, ng = f->ng;
    memset(f->colsq, 0, (size_t)N * sizeof(double));
    for (int64_t l0 = 0; l0 < K; l0 += FV_ROWS) {
        int rows = K - l0 < FV_ROWS ? (int)(K - l0) : FV_ROWS;
        int next = rows_next(l0, K);
        const char *base = f->b0 + l0 * f->bs0 * (int64_t)f->es;
        for (int32_t p = 0; p < f->np; p++) {
            v4 acc[GOBLIN_FREIVALDS_MAX_VECTORS / LANES][2 * FV_ROWS];
            memset(acc, 0, sizeof acc);
            for (int64_t j0 = f->cb[p]; j0 < f->cb[p + 1]; j0 += FV_CHUNK) {
                int64_t len = f->cb[p + 1] - j0 < FV_CHUNK ? f->cb[p + 1] - j0 : FV_CHUNK;
                const double *x[FV_ROWS];
                block_rows(f, base, f->bs0, f->bs1, rows, j0, len, sanitize, next, x, vb);
                double *cs = f->colsq + j0;
                int64_t j = 0;
                if (rows == FV_ROWS && vb)
                    for (; j + 2 <= len; j += 2) {
                        v2 c, v0, v1, v2_, v3;
                        v2_ld(c, cs + j);
                        v2_ld(v0, x[0] + j);
                        v2_ld(v1, x[1] + j);
                        v2_ld(v2_, x[2] + j);
                        v2_ld(v3, x[3] + j);
                        c += v0 * v0;
                        c += v1 * v1;
                        c += v2_ * v2_;
                        c += v3 * v3;
                        v2_st(cs + j, c);
                    }
                else if (rows == FV_ROWS)
                    for (; j + LANES <= len; j += LANES) {
                        v4 c, v0, v1, v2, v3;
                        v4_ld(c, cs + j);
                        v4_ld(v0, x[0] + j);
                        v4_ld(v1, x[1] + j);
                        v4_ld(v2, x[2] + j);
                        v4_ld(v3, x[3] + j);
                        c += v0 * v0;
                        c += v1 * v1;
                        c += v2 * v2;
                        c += v3 * v3;
                        memcpy(cs + j, &c, sizeof c);
                    }
                for (; j < len; j++)
                    for (int q = 0; q < rows; q++) cs[j] += x[q][j] * x[q][j];
                for (int64_t g = 0; g < ng; g++)
                    mdot_impl(x, f->rw + (g * N + j0) * 2, len, acc[g], vb);
            }
            v4 *ys = f->ys + (int64_t)p * ng * K * 2;
            for (int64_t g = 0; g < ng; g++)
                for (int q = 0; q < rows; q++) {
                    ys[(g * K + l0 + q) * 2] = acc[g][2 * q];
                    ys[(g * K + l0 + q) * 2 + 1] = acc[g][2 * q + 1];
                }
        }
    }
}

/* zt = (A (B r), |A| (|B| |r|)) of every column panel and the row norms of A over the
 * rows of @p r, one pass over them: each chunk of a block of rows meets the weights
 * of every panel while it is in L1. */
FV_INLINE void pass_a_impl(fvp *f, fv_range *r, bool vb) {
    int64_t m = r->rows, K = f->K, npg = (int64_t)f->np * f->ng;
    for (int64_t i0 = 0; i0 < m; i0 += FV_ROWS) {
        int rows = m - i0 < FV_ROWS ? (int)(m - i0) : FV_ROWS;
        v4 sq[FV_ROWS], ab[FV_ROWS];
        memset(f->acc, 0, (size_t)npg * 2 * FV_ROWS * sizeof(v4));
        memset(sq, 0, sizeof sq);
        memset(ab, 0, sizeof ab);
        for (int64_t l0 = 0; l0 < K; l0 += FV_CHUNK) {
            int64_t len = K - l0 < FV_CHUNK ? K - l0 : FV_CHUNK;
            const double *x[FV_ROWS];
            block_rows(f, f->a0 + (r->row0 + i0) * f->as0 * (int64_t)f->es, f->as0, f->as1,
                       rows, l0, len, false, rows_next(i0, m), x, vb);
            sqab_impl(x, rows, len, sq, ab, vb);
            for (int64_t pg = 0; pg < npg; pg++)
                mdot_impl(x, f->ys + (pg * K + l0) * 2, len, f->acc + pg * 2 * FV_ROWS, vb);
        }
        for (int q = 0; q < rows; q++) {
            r->asq[i0 + q] = v4_sum(sq[q]);
            r->a1[i0 + q] = v4_sum(ab[q]);
            for (int64_t pg = 0; pg < npg; pg++) {
                r->zt[(pg * m + i0 + q) * 2] = f->acc[pg * 2 * FV_ROWS + 2 * q];
                r->zt[(pg * m + i0 + q) * 2 + 1] = f->acc[pg * 2 * FV_ROWS + 2 * q + 1];
            }
        }
    }
}

/* (C r, |C| |r|) for the rows i0 .. i0 + rows - 1 of the tile into wq[g][2q],
 * wq[g][2q + 1]; finite[q]: row q holds no NaN/inf (else its sums are not to be used). */
FV_INLINE void pass_c_impl(fvp *f, const fv_tile *t, int64_t i0, int rows,
                           v4 wq[][2 * FV_ROWS], bool *finite, bool vb) {
    int64_t n = t->n;
    /* x * 0 is +-0 for finite x and NaN for NaN/inf: OR-ing the bits of the products
     * leaves only the sign bit unless the row holds a NaN/inf */
    int64_t nf[FV_ROWS] = {0};
    for (int64_t g = 0; g < f->ng; g++) memset(wq[g], 0, sizeof wq[g]);
    for (int64_t j0 = 0; j0 < n; j0 += FV_CHUNK) {
        int64_t len = n - j0 < FV_CHUNK ? n - j0 : FV_CHUNK;
        const double *x[FV_ROWS];
        block_rows(f, t->c0 + i0 * t->cs0 * (int64_t)f->es, t->cs0, t->cs1, rows, j0, len,
                   false, rows_next(i0, t->rows), x, vb);
        for (int q = 0; q < rows; q++) {
            const double *xq = x[q];
            int64_t j = 0, bits = 0;
            if (vb) {
                i2 t0 = {0, 0}, t1 = {0, 0};
                for (; j + 4 <= len; j += 4) {
                    v2 v0, v1;
                    v2_ld(v0, xq + j);
                    v2_ld(v1, xq + j + 2);
                    t0 |= (i2)(v0 * (v2){0.0, 0.0});
                    t1 |= (i2)(v1 * (v2){0.0, 0.0});
                }
                t0 |= t1;
                bits = t0[0] | t0[1];
            } else {
                i4 t0 = {0, 0, 0, 0}, t1 = {0, 0, 0, 0};
                for (; j + 2 * LANES <= len; j += 2 * LANES) {
                    v4 v0, v1;
                    v4_ld(v0, xq + j);
                    v4_ld(v1, xq + j + LANES);
                    t0 |= (i4)(v0 * splat(0.0));
                    t1 |= (i4)(v1 * splat(0.0));
                }
                t0 |= t1;
                bits = (t0[0] | t0[1]) | (t0[2] | t0[3]);
            }
            for (; j < len; j++) {
                double z = xq[j] * 0.0;
                int64_t zb;
                memcpy(&zb, &z, sizeof zb);
                bits |= zb;
            }
            nf[q] |= bits;
        }
        for (int64_t g = 0; g < f->ng; g++)
            mdot_impl(x, t->rw + (g * f->N + j0) * 2, len, wq[g], vb);
    }
    for (int q = 0; q < rows; q++) finite[q] = (nf[q] & INT64_MAX) == 0;
}

/* One row of the tile already in f64 (NaN/inf zeroed): its sums into wq[g][0],
 * wq[g][1] (rows with NaN/inf only: a hostile result). */
static void row_c(const fvp *f, const fv_tile *t, const double *row, v4 wq[][2 * FV_ROWS]) {
    for (int64_t g = 0; g < f->ng; g++) {
        memset(wq[g], 0, sizeof wq[g]);
        for (int64_t j0 = 0; j0 < t->n; j0 += FV_CHUNK) {
            int64_t len = t->n - j0 < FV_CHUNK ? t->n - j0 : FV_CHUNK;
            mdot2_base(row + j0, row + j0, t->rw + (g * f->N + j0) * 2, len, wq[g]);
        }
    }
}

#if FV_HAVE_V3
FV_V3 static void pass_b_v3(fvp *f, bool sanitize) { pass_b_impl(f, sanitize, false); }
FV_V3 static void pass_a_v3(fvp *f, fv_range *r) { pass_a_impl(f, r, false); }
FV_V3 static void pass_c_v3(fvp *f, const fv_tile *t, int64_t i0, int rows,
                            v4 wq[][2 * FV_ROWS], bool *finite) {
    pass_c_impl(f, t, i0, rows, wq, finite, false);
}
/* Does the CPU run the AVX2+FMA passes? Asked once (racing first callers store the
 * same answer). */
static bool fv_v3(void) {
    static _Atomic int known = -1;
    int v = atomic_load_explicit(&known, memory_order_relaxed);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        atomic_store_explicit(&known, v, memory_order_relaxed);
    }
    return v;
}
#endif
static void pass_b_base(fvp *f, bool sanitize) { pass_b_impl(f, sanitize, true); }
static void pass_a_base(fvp *f, fv_range *r) { pass_a_impl(f, r, true); }
static void pass_c_base(fvp *f, const fv_tile *t, int64_t i0, int rows, v4 wq[][2 * FV_ROWS],
                        bool *finite) {
    pass_c_impl(f, t, i0, rows, wq, finite, true);
}
#if !FV_HAVE_V3
static bool fv_v3(void) { return false; }
#define pass_b_v3 pass_b_base
#define pass_a_v3 pass_a_base
#define pass_c_v3 pass_c_base
#endif

typedef struct fv_tally {
    int64_t checked, above_tight, above_bound, worst_row;
    double worst, worst_tight;
} fv_tally;

/* Judge row @p i of a tile from its sums @p wq (w = C r in lane v of wq[g][ws],
 * |C| |r| in wq[g][ws + 1]) against zt = (A (B r), |A| (|B| |r|)) of the panel
 * (group stride @p m) and @p a1 = sum |a_il|. */
static void judge_row(const fv_levels *L, const v4 *zt, int64_t m, double a1, int64_t i,
                      double na, const v4 wq[][2 * FV_ROWS], int ws, fv_tally *t) {
    double abs_own = ETA64 * (L->dn * a1 * L->grow + L->dK + L->dn + 4);
    for (int64_t g = 0; g < L->ng; g++) {
        v4 wv = wq[g][ws], qv = wq[g][ws + 1];
        v4 zv = zt[(g * m + i) * 2], tv = zt[(g * m + i) * 2 + 1];
        for (int64_t lane = 0; lane < LANES && g * LANES + lane < L->nv; lane++) {
            int64_t v = g * LANES + lane;
            double w = wv[lane], q = qv[lane];
            double z = zv[lane];
            double P = tv[lane] * L->grow; /* >= exact |A| (|B| |r|) */
            double Q = q * L->grow;        /* >= exact |C| |r| */
            double claim_det = L->rel_finite ? L->rel_c * P + L->abs_c * L->sr1[v] : INFINITY;
            double claim_h =
                (L->bound_sigmas > 0 && L->rel_finite)
                    ? L->bound_sigmas * (L->rel_c * na * L->bf + L->abs_c * sqrt(L->n_good))
                    : INFINITY;
            /* (1 + 16 u64): the rounding of this formula and of d itself */
            double R =
                (fmin(claim_det, claim_h) + L->g_z * P + L->g_w * Q + abs_own) * (1 + 16 * U64);
            double sc = L->sig_k * fmin(na * L->nb[v], P);
            double so = L->sig_z * P + L->sig_w * Q;
            double T = L->tight_sigmas * sqrt(sc * sc + so * so) + L->abs_c * L->sr1[v] + abs_own;
            if (T > R) T = R;
            double d = fabs(w - z);
            /* An honest |C| |r| is at most (1 + rel) |A| |B| |r| + abs sum |r|: a cheap
             * second rigorous test that catches absurd magnitudes outright. */
            double qmax = L->rel_finite ? (1 + L->rel_c) * P + L->abs_c * L->sr1[v] : INFINITY;
            double qlow = q / (1 + L->g_w);
            double rr = ratio_of(d, R), rt = ratio_of(d, T);
            if (!(d == d)) rr = rt = INFINITY; /* overflow in C r: absurd values */
            if (qlow > qmax) {
                double rq = ratio_of(qlow, qmax);
                if (rq > rr) rr = rq;
                if (rr > rt) rt = rr;
            }
            t->checked++;
            if (rt > 1) t->above_tight++;
            if (rr > 1) t->above_bound++;
            if (rr > t->worst || (t->worst_row < 0 && rr >= t->worst)) {
                t->worst = rr;
                t->worst_row = i;
            }
            if (rt > t->worst_tight) t->worst_tight = rt;
        }
    }
}

/* ---- validation, creation, the passes' drivers ------------------------------ */

typedef struct fv_args {
    goblin_freivalds_params p;
    goblin_dtype dt;
    int64_t m, n, K; /* A [m, K-range], B [K-range, n] */
} fv_args;

/* The trusted arguments of a check: A, B, params. */
static goblin_err fv_validate(const goblin_tensor *a, const goblin_tensor *b,
                              const goblin_freivalds_params *pp, fv_args *x) {
    if (pp) x->p = *pp;
    else goblin_freivalds_params_default(&x->p);
    const goblin_freivalds_params *p = &x->p;
    if (p->vectors < 1 || p->vectors > GOBLIN_FREIVALDS_MAX_VECTORS || !(p->tight_sigmas > 0) ||
        !(p->bound_sigmas >= 0) || p->tight_sigmas == INFINITY || p->bound_sigmas == INFINITY)
        return GOBLIN_EINVAL;
    if (a->rank != 2 || b->rank != 2 || a->shape[0] < 0 || a->shape[1] < 0 || b->shape[0] < 0 ||
        b->shape[1] < 0 || a->shape[1] != b->shape[0])
        return GOBLIN_ESHAPE;
    goblin_dtype dt = a->dtype;
    if ((dt != GOBLIN_DTYPE_F32 && dt != GOBLIN_DTYPE_F64) || b->dtype != dt) return GOBLIN_EDTYPE;
    int64_t m = a->shape[0], kfull = a->shape[1], n = b->shape[1];
    if (m > GOBLIN_MAX_DIM || kfull > GOBLIN_MAX_DIM || n > GOBLIN_MAX_DIM) return GOBLIN_ESHAPE;
    if (p->k0 < 0 || p->k0 > kfull) return GOBLIN_EINVAL;
    int64_t K = p->kn < 0 ? kfull - p->k0 : p->kn;
    if (K > kfull - p->k0) return GOBLIN_EINVAL;
    if ((m && K && !a->data) || (K && n && !b->data)) return GOBLIN_EINVAL;
    x->dt = dt;
    x->m = m;
    x->n = n;
    x->K = K;
    return GOBLIN_OK;
}

/* *acc += a * b on sizes, false on overflow. */
static bool size_mac(uint64_t *acc, uint64_t a, uint64_t b) {
    uint64_t t;
    return !__builtin_mul_overflow(a, b, &t) && !__builtin_add_overflow(*acc, t, acc);
}

/* The levels of column panel @p p (after the pass over B and the masking). */
static void fv_levels_init(fvp *f, int32_t p, const fv_args *x) {
    fv_levels *L = &f->lv[p];
    memset(L, 0, sizeof *L);
    int64_t col0 = f->cb[p], n = f->cb[p + 1] - col0, N = f->N;
    L->nv = f->nv;
    L->ng = f->ng;
    L->tight_sigmas = x->p.tight_sigmas;
    L->bound_sigmas = x->p.bound_sigmas;
    double u = goblin__unit_roundoff(f->dt);
    goblin_op_contract(GOBLIN_OP_MATMUL, f->dt, f->K, &L->rel_c, &L->abs_c);
    double dn = (double)n, dK = (double)f->K;
    L->dn = dn;
    L->dK = dK;
    L->g_z = gamma_n(dn + dK + 2, U64); /* our f64 error in A (B r) */
    L->g_w = gamma_n(dn + 2, U64);      /* our f64 error in C r */
    /* computed sums of magnitudes -> upper bounds of the exact ones: a sum of j terms
     * is within gamma_j, so exact <= computed / (1 - gamma_j) <= computed (1 + 2 gamma_j) */
    L->grow = 1 + 2 * gamma_n(dn + dK + 4, U64);
    const double *colsq = f->colsq + col0;
    double bf2 = 0;
    for (int64_t j = 0; j < n; j++) {
        bf2 += colsq[j];
        L->n_bad += f->bad[col0 + j];
    }
    L->bf = sqrt(bf2) * L->grow;
    L->n_good = (double)(n - L->n_bad);
    for (int64_t v = 0; v < f->nv; v++) {
        double s1 = 0, s2 = 0;
        for (int64_t j = 0; j < n; j++) {
            double rj = f->rw[((v / LANES) * N + col0 + j) * 2][v % LANES];
            s1 += fabs(rj);
            s2 += colsq[j] * rj * rj;
        }
        L->sr1[v] = s1 * L->grow;
        L->nb[v] = sqrt(s2) * L->grow;
    }
    L->sig_k = u * sqrt((dK + 1) / 3);   /* claimed: K + 1 roundings, variance u^2/3 each */
    L->sig_z = U64 * sqrt((dn + dK) / 3); /* ours in A (B r) */
    L->sig_w = U64 * sqrt(dn / 3);        /* ours in C r */
    L->rel_finite = isfinite(L->rel_c);
}

/* The object for validated arguments @p x and checked bounds. */
static goblin_err fv_new(const goblin_tensor *a, const goblin_tensor *b, const fv_args *x,
                         int32_t np, const int64_t *cb, fvp **out) {
    *out = NULL;
    int64_t N = x->n, K = x->K, nv = x->p.vectors, ng = (nv + LANES - 1) / LANES;
    int64_t wmax = 0;
    for (int32_t p = 0; p < np; p++)
        if (cb[p + 1] - cb[p] > wmax) wmax = cb[p + 1] - cb[p];
    /* One allocation: the object, then the v4 arrays (64-byte aligned), the levels,
     * doubles, bounds and bytes. */
    uint64_t n_v4 = 0, bytes = 0;
    bool ok = size_mac(&n_v4, (uint64_t)ng * 2, (uint64_t)N) &&
              size_mac(&n_v4, (uint64_t)np * (uint64_t)ng * 2, (uint64_t)K) &&
              size_mac(&n_v4, (uint64_t)np * (uint64_t)ng * 2, FV_ROWS) &&
              size_mac(&bytes, n_v4, sizeof(v4)) && size_mac(&bytes, np, sizeof(fv_levels)) &&
              size_mac(&bytes, (uint64_t)N + FV_ROWS * FV_CHUNK + (uint64_t)wmax, sizeof(double)) &&
              size_mac(&bytes, (uint64_t)np + 1, sizeof(int64_t)) && size_mac(&bytes, N, 1) &&
              bytes <= SIZE_MAX;
    size_t head = (sizeof(fvp) + 63) & ~(size_t)63; /* the object, to a cache line */
    ok = ok && bytes <= SIZE_MAX - head;
    if (!ok) return GOBLIN_ENOMEM;
    fvp *f = goblin__alloc(head + (size_t)bytes);
    if (!f) return GOBLIN_ENOMEM;
    memset(f, 0, sizeof *f);
    void *block = (char *)f + head;
    f->ranges = f->inline_ranges;
    f->cap_ranges = (int32_t)(sizeof f->inline_ranges / sizeof *f->inline_ranges);
    f->dt = x->dt;
    f->es = goblin_dtype_size(x->dt);
    f->M = x->m;
    f->N = N;
    f->K = K;
    f->nv = nv;
    f->ng = ng;
    f->np = np;
    f->v3 = fv_v3();
    f->as0 = a->strides[0];
    f->as1 = a->strides[1];
    f->bs0 = b->strides[0];
    f->bs1 = b->strides[1];
    /* (0, k0) of A and (k0, 0) of B; no arithmetic on a NULL of an empty operand */
    f->a0 = K && x->m ? (const char *)a->data + x->p.k0 * f->as1 * (int64_t)f->es : NULL;
    f->b0 = K && N ? (const char *)b->data + x->p.k0 * f->bs0 * (int64_t)f->es : NULL;
    f->rw = block;
    f->ys = f->rw + ng * N * 2;
    f->acc = f->ys + (int64_t)np * ng * K * 2;
    f->lv = (fv_levels *)(f->acc + (int64_t)np * ng * 2 * FV_ROWS);
    f->colsq = (double *)(f->lv + np);
    f->xb = f->colsq + N;
    f->buf = f->xb + FV_ROWS * FV_CHUNK;
    f->cb = (int64_t *)(f->buf + wmax);
    f->bad = (unsigned char *)(f->cb + np + 1);
    memcpy(f->cb, cb, ((size_t)np + 1) * sizeof(int64_t));
    memset(f->rw, 0, (size_t)(ng * N * 2) * sizeof(v4)); /* lanes beyond nv: r = 0 */
    memset(f->bad, 0, (size_t)N);

    /* The secret vectors: r_j = +-(1/2 + U/2), U uniform [0, 1) from Philox, sign
     * from an independent bit. |r_j| >= 1/2 means one wrong element always moves
     * its row's check by at least half its error; the continuous magnitude (density
     * <= 1) bounds the chance that several errors cancel; |r_j| <= 1 and symmetry
     * give Hoeffding's tail bound for the honest rounding errors. Vector v, element j
     * is Philox draw v * N + j of the stream "FREV" under key = seed. */
    for (int64_t v = 0; v < nv; v++)
        for (int64_t j = 0; j < N; j++) {
            uint32_t r[4];
            goblin__rng_draw(x->p.seed, 0, VERIFY_STREAM_FREIVALDS,
                             (uint64_t)v * (uint64_t)N + (uint64_t)j, r);
            double mag = 0.5 + 0.5 * goblin__rng_u01(r, 53);
            f->rw[((v / LANES) * N + j) * 2][v % LANES] = (r[2] & 1u) ? -mag : mag;
            f->rw[((v / LANES) * N + j) * 2 + 1][v % LANES] = mag;
        }

    if (f->v3) pass_b_v3(f, false);
    else pass_b_base(f, false);
    /* Columns of B with NaN/inf (or squares overflowing f64) cannot be checked
     * algebraically: mask them out of every vector and redo the pass. */
    int64_t n_bad = 0;
    for (int64_t j = 0; j < N; j++)
        if (!isfinite(f->colsq[j])) {
            f->bad[j] = 1;
            n_bad++;
            for (int64_t g = 0; g < ng; g++)
                f->rw[(g * N + j) * 2] = f->rw[(g * N + j) * 2 + 1] = splat(0);
        }
    if (n_bad) {
        if (f->v3) pass_b_v3(f, true);
        else pass_b_base(f, true);
        for (int64_t j = 0; j < N; j++)
            if (f->bad[j]) f->colsq[j] = 0;
    }
    for (int32_t p = 0; p < np; p++) fv_levels_init(f, p, x);
    *out = f;
    return GOBLIN_OK;
}

goblin_err goblin_freivalds_panels_new(const goblin_tensor *a, const goblin_tensor *b,
                                       int32_t n_col_panels, const int64_t *col_bounds,
                                       const goblin_freivalds_params *p,
                                       goblin_freivalds_panels **out) {
    if (!out) return GOBLIN_EINVAL;
    *out = NULL;
    if (!a || !b || !col_bounds) return GOBLIN_EINVAL;
    fv_args x;
    goblin_err e = fv_validate(a, b, p, &x);
    if (e) return e;
    /* strictly increasing bounds from 0 to N: at most N panels (checked before
     * reading the caller's array that far) */
    if (n_col_panels < 1 || n_col_panels > x.n || col_bounds[0] != 0) return GOBLIN_EINVAL;
    for (int32_t q = 0; q < n_col_panels; q++)
        if (!(col_bounds[q + 1] > col_bounds[q])) return GOBLIN_EINVAL;
    if (col_bounds[n_col_panels] != x.n) return GOBLIN_EINVAL;
    return fv_new(a, b, &x, n_col_panels, col_bounds, out);
}

static fv_range *fv_find(fvp *f, int64_t row0, int64_t rows) {
    for (int32_t q = 0; q < f->n_ranges; q++)
        if (f->ranges[q].row0 == row0 && f->ranges[q].rows == rows) return &f->ranges[q];
    return NULL;
}

/* The prepared range (row0, rows), computed now if it is not yet (one pass over
 * those rows of A). Arguments already checked. */
static goblin_err fv_prepare(fvp *f, int64_t row0, int64_t rows, fv_range **out) {
    fv_range *r = fv_find(f, row0, rows);
    if (r) {
        *out = r;
        return GOBLIN_OK;
    }
    if (f->n_ranges == f->cap_ranges) {
        if (f->cap_ranges > INT32_MAX / 2) return GOBLIN_ENOMEM;
        int32_t cap = f->cap_ranges ? 2 * f->cap_ranges : 4;
        fv_range *nr = goblin__alloc((size_t)cap * sizeof *nr);
        if (!nr) return GOBLIN_ENOMEM;
        if (f->n_ranges) memcpy(nr, f->ranges, (size_t)f->n_ranges * sizeof *nr);
        if (f->ranges != f->inline_ranges) goblin__free(f->ranges);
        f->ranges = nr;
        f->cap_ranges = cap;
    }
    uint64_t bytes = 0;
    if (!size_mac(&bytes, (uint64_t)f->np * (uint64_t)f->ng * 2 * sizeof(v4), (uint64_t)rows) ||
        !size_mac(&bytes, 2 * sizeof(double), (uint64_t)rows) || bytes > SIZE_MAX)
        return GOBLIN_ENOMEM;
    void *block = goblin__alloc((size_t)bytes);
    if (!block) return GOBLIN_ENOMEM;
    r = &f->ranges[f->n_ranges];
    r->row0 = row0;
    r->rows = rows;
    r->zt = block;
    r->asq = (double *)(r->zt + (int64_t)f->np * f->ng * rows * 2);
    r->a1 = r->asq + rows;
    if (f->v3) pass_a_v3(f, r);
    else pass_a_base(f, r);
    f->n_ranges++;
    *out = r;
    return GOBLIN_OK;
}

static bool range_ok(const fvp *f, int64_t row0, int64_t rows) {
    return row0 >= 0 && rows >= 0 && row0 <= f->M - rows;
}

goblin_err goblin_freivalds_panels_prepare(goblin_freivalds_panels *fp, int64_t row0,
                                           int64_t rows) {
    if (!fp || !range_ok(fp, row0, rows)) return GOBLIN_EINVAL;
    fv_range *r;
    return fv_prepare(fp, row0, rows, &r);
}

void goblin_freivalds_panels_release(goblin_freivalds_panels *fp, int64_t row0, int64_t rows) {
    if (!fp) return;
    fv_range *r = fv_find(fp, row0, rows);
    if (!r) return;
    goblin__free(r->zt);
    *r = fp->ranges[--fp->n_ranges];
}

void goblin_freivalds_panels_free(goblin_freivalds_panels *fp) {
    if (!fp) return;
    for (int32_t q = 0; q < fp->n_ranges; q++) goblin__free(fp->ranges[q].zt);
    if (fp->ranges != fp->inline_ranges) goblin__free(fp->ranges);
    goblin__free(fp); /* and its arrays */
}

/* Judge tile @p c (shape and dtype checked) of panel @p p over the prepared range @p r. */
static void fv_judge(fvp *f, const fv_range *r, int32_t p, const goblin_tensor *c,
                     goblin_verdict *out) {
    const fv_levels *L = &f->lv[p];
    int64_t col0 = f->cb[p], n = f->cb[p + 1] - col0, m = r->rows, nv = f->nv;
    goblin_dtype dt = f->dt;
    fv_tile tile = {(const char *)c->data, c->strides[0], c->strides[1], m, n, f->rw + col0 * 2};
    const v4 *zt = r->zt + (int64_t)p * f->ng * m * 2;
    double maxf = max_finite(dt);
    int64_t unchecked = 0, nonfinite = 0;
    fv_tally t = {0, 0, 0, -1, 0, 0};
    bool reject_nonfinite = false;
    for (int64_t i0 = 0; i0 < m; i0 += FV_ROWS) {
        int rows = m - i0 < FV_ROWS ? (int)(m - i0) : FV_ROWS;
        v4 wq[GOBLIN_FREIVALDS_MAX_VECTORS / LANES][2 * FV_ROWS];
        bool finite[FV_ROWS];
        if (f->v3) pass_c_v3(f, &tile, i0, rows, wq, finite);
        else pass_c_base(f, &tile, i0, rows, wq, finite);
        for (int q = 0; q < rows; q++) {
            int64_t i = i0 + q;
            double na = sqrt(r->asq[i]) * L->grow;
            bool row_ok = isfinite(r->asq[i]) && isfinite(r->a1[i]);
            for (int64_t v = 0; v < nv && row_ok; v++)
                row_ok = isfinite(zt[((v / LANES) * m + i) * 2][v % LANES]) &&
                         isfinite(zt[((v / LANES) * m + i) * 2 + 1][v % LANES]);
            if (finite[q]) {
                if (!row_ok) unchecked++;
                else judge_row(L, zt, m, r->a1[i], i, na, wq, 2 * q, &t);
                continue;
            }
            /* NaN/inf in C: impossible for an honest result when a_i and b_j are finite
             * and ||a_i|| ||b_j|| (1 + rel) + abs < max finite (no partial sum can
             * overflow). */
            load_row(dt, tile.c0 + i * tile.cs0 * (int64_t)f->es, tile.cs1, n, f->buf);
            bool row_nonfinite = false, row_unsure = !row_ok;
            for (int64_t j = 0; j < n; j++) {
                if (isfinite(f->buf[j])) continue;
                f->buf[j] = 0;
                if (f->bad[col0 + j] || !row_ok) continue; /* unchecked column or row */
                double cap = L->rel_finite ? na * sqrt(f->colsq[col0 + j]) * L->grow *
                                                     (1 + L->rel_c) +
                                                 L->abs_c
                                           : INFINITY;
                if (cap < maxf) {
                    nonfinite++;
                    row_nonfinite = true;
                } else {
                    row_unsure = true;
                }
            }
            if (row_nonfinite) {
                reject_nonfinite = true;
                if (t.worst != INFINITY) {
                    t.worst = t.worst_tight = INFINITY;
                    t.worst_row = i;
                }
                continue;
            }
            if (row_unsure) {
                unchecked++;
                continue;
            }
            v4 wr[GOBLIN_FREIVALDS_MAX_VECTORS / LANES][2 * FV_ROWS];
            row_c(f, &tile, f->buf, wr);
            judge_row(L, zt, m, r->a1[i], i, na, wr, 0, &t);
        }
    }
    out->checked = t.checked;
    out->above_tight = t.above_tight;
    out->above_bound = t.above_bound;
    out->nonfinite = nonfinite;
    /* elements of C left unchecked: whole rows, and masked columns of the others */
    out->unchecked = unchecked * n + L->n_bad * (m - unchecked);
    out->worst_index = t.worst_row;
    out->worst_ratio = t.worst;
    out->worst_tight_ratio = t.worst_tight;
    if (reject_nonfinite || t.above_bound) {
        out->kind = GOBLIN_VERDICT_REJECT;
        out->reason = reject_nonfinite ? GOBLIN_VERIFY_NONFINITE : GOBLIN_VERIFY_EXCEEDS_BOUND;
    } else if (t.above_tight) {
        out->kind = GOBLIN_VERDICT_ESCALATE;
        out->reason = GOBLIN_VERIFY_BETWEEN;
    } else if (out->unchecked) {
        out->kind = GOBLIN_VERDICT_ESCALATE;
        out->reason = GOBLIN_VERIFY_UNCHECKABLE;
    }
}

/* The verdict left with an error: nothing was checked (never an ACCEPT). */
static goblin_err verdict_error(goblin_verdict *v, goblin_err e) {
    verdict_init(v);
    v->kind = GOBLIN_VERDICT_ESCALATE;
    v->reason = GOBLIN_VERIFY_UNCHECKABLE;
    return e;
}

goblin_err goblin_freivalds_panels_check(goblin_freivalds_panels *fp, int64_t row0, int64_t rows,
                                         int32_t col_panel, const goblin_tensor *c,
                                         goblin_verdict *out) {
    if (!fp || !c || !out || !range_ok(fp, row0, rows) || col_panel < 0 || col_panel >= fp->np)
        return GOBLIN_EINVAL;
    int64_t n = fp->cb[col_panel + 1] - fp->cb[col_panel];
    /* The claimed result is judged, not trusted. */
    if (c->dtype != fp->dt) return verdict_reject(out, GOBLIN_VERIFY_DTYPE);
    if (c->rank != 2 || c->shape[0] != rows || c->shape[1] != n)
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    if (rows && !c->data) return GOBLIN_EINVAL;
    verdict_init(out);
    if (rows == 0) return GOBLIN_OK; /* nothing claimed, nothing to check */
    fv_range *r;
    goblin_err e = fv_prepare(fp, row0, rows, &r);
    if (e) return verdict_error(out, e);
    fv_judge(fp, r, col_panel, c, out);
    return GOBLIN_OK;
}

/* One tile: one column panel and one row range. */
goblin_err goblin_verify_matmul(const goblin_tensor *a, const goblin_tensor *b,
                                const goblin_tensor *c, const goblin_freivalds_params *pp,
                                goblin_verdict *out) {
    if (!a || !b || !c || !out) return GOBLIN_EINVAL;
    fv_args x;
    goblin_err e = fv_validate(a, b, pp, &x);
    if (e) return e;
    int64_t m = x.m, n = x.n;
    /* The claimed result is judged, not trusted. */
    if (c->dtype != x.dt) return verdict_reject(out, GOBLIN_VERIFY_DTYPE);
    if (c->rank != 2 || c->shape[0] != m || c->shape[1] != n)
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    if (m && n && !c->data) return GOBLIN_EINVAL;
    verdict_init(out);
    if (m == 0 || n == 0) return GOBLIN_OK; /* nothing claimed, nothing to check */
    int64_t cb[2] = {0, n};
    fvp *f;
    e = fv_new(a, b, &x, 1, cb, &f);
    if (e) return verdict_error(out, e);
    fv_range *r;
    e = fv_prepare(f, 0, m, &r);
    if (!e) fv_judge(f, r, 0, c, out);
    goblin_freivalds_panels_free(f);
    return e ? verdict_error(out, e) : GOBLIN_OK;
}


/* ======================================================================== */
/* Replica comparison and spot-checks                                       */
/* ======================================================================== */

typedef struct rule {
    goblin_dtype dt;
    double rel, abs;
    double maxf;
    bool is_float;
    bool reducing; /* k > 1: the op's scale is sum |terms|, unknown without a scale */
} rule;

enum { AGREE = 0, DIFFER_ESCALATE = 1, DIFFER_REJECT = 2 };

typedef struct tally {
    int64_t checked, differ, reject, nonfinite;
    int64_t worst_index;
    double worst;
} tally;

/* Judge one pair (x from a result, y from the other or the reference); @p scale is
 * the op's scale for this element or NaN when unknown. Sets *ratio = diff / bound. */
static int judge_float(const rule *r, double x, double y, double scale, bool *nonfinite,
                       double *ratio) {
    *nonfinite = false;
    bool have_scale = scale == scale;
    if (x != x || y != y || isinf(x) || isinf(y)) {
        if (x != x && y != y) return *ratio = 0, AGREE;
        if (x == y) return *ratio = 0, AGREE; /* same-signed infinities */
        /* inf against a finite value of the same sign at the overflow threshold: the
         * exact value may lie beyond it, so both roundings are honest. */
        if (x == x && y == y && (x > 0) == (y > 0)) {
            double fin = isinf(x) ? fabs(y) : fabs(x);
            if (fin >= r->maxf * (1 - 4 * r->rel) - 2 * r->abs) return *ratio = 0, AGREE;
        }
        *nonfinite = true;
        *ratio = INFINITY;
        /* An honest result can be NaN/inf only if its value may overflow or inputs do.
         * Elementwise ops (k <= 1) are deterministic in that; a reduction can overflow
         * in one order and not in another unless its scale stays below overflow. */
        if (!r->reducing && !have_scale) return DIFFER_REJECT;
        if (have_scale && scale * (1 + r->rel) + r->abs < r->maxf) return DIFFER_REJECT;
        return DIFFER_ESCALATE;
    }
    double diff = fabs(x - y);
    double bound;
    int severity;
    if (have_scale) {
        bound = 2 * (r->abs + r->rel * scale);
        severity = DIFFER_REJECT;
    } else if (r->rel >= 1) {
        bound = INFINITY;
        severity = DIFFER_REJECT;
    } else if (!r->reducing) {
        /* |x - e|, |y - e| <= abs + rel |e| and |e| <= (min(|x|, |y|) + abs) / (1 - rel). */
        double mag = fmin(fabs(x), fabs(y));
        bound = 2 * r->abs + 2 * r->rel * (mag + r->abs) / (1 - r->rel);
        severity = DIFFER_REJECT;
    } else {
        /* The scale sum |terms| is >= |exact|: this bound is only an estimate. */
        double mag = fmax(fabs(x), fabs(y));
        bound = 2 * r->abs + 2 * r->rel * (mag + r->abs) / (1 - r->rel);
        severity = DIFFER_ESCALATE;
    }
    bound *= 1 + 8 * U64; /* our own rounding of diff and bound */
    *ratio = ratio_of(diff, bound);
    return diff <= bound ? AGREE : severity;
}

/* Judge element @p off_x of X against @p off_y of Y (element offsets). */
static int judge_elem(const rule *r, const goblin_tensor *X, int64_t off_x, const goblin_tensor *Y,
                      int64_t off_y, double scale, bool *nonfinite, double *ratio) {
    if (!r->is_float) {
        int64_t x = goblin__load_i64(r->dt, X->data, off_x);
        int64_t y = goblin__load_i64(r->dt, Y->data, off_y);
        *nonfinite = false;
        *ratio = x == y ? 0 : INFINITY;
        return x == y ? AGREE : DIFFER_REJECT;
    }
    return judge_float(r, goblin__load_f64(r->dt, X->data, off_x),
                       goblin__load_f64(r->dt, Y->data, off_y), scale, nonfinite, ratio);
}

static void tally_add(tally *t, int res, bool nonfinite, double ratio, int64_t index) {
    t->checked++;
    if (res != AGREE) t->differ++;
    if (res == DIFFER_REJECT) t->reject++;
    if (nonfinite && res != AGREE) t->nonfinite++;
    if (ratio > t->worst || (t->worst_index < 0 && ratio >= t->worst && res != AGREE)) {
        t->worst = ratio;
        t->worst_index = index;
    }
}

static void tally_verdict(const tally *t, goblin_verdict *out) {
    verdict_init(out);
    out->checked = t->checked;
    out->above_tight = t->differ;
    out->above_bound = t->reject;
    out->nonfinite = t->nonfinite;
    out->worst_index = t->worst_index;
    out->worst_ratio = t->worst;
    out->worst_tight_ratio = t->worst;
    if (t->reject) {
        out->kind = GOBLIN_VERDICT_REJECT;
        out->reason = t->nonfinite ? GOBLIN_VERIFY_NONFINITE : GOBLIN_VERIFY_EXCEEDS_BOUND;
    } else if (t->differ) {
        out->kind = GOBLIN_VERDICT_ESCALATE;
        out->reason = t->nonfinite ? GOBLIN_VERIFY_NONFINITE : GOBLIN_VERIFY_BETWEEN;
    }
}

static goblin_err rule_init(rule *r, goblin_op op, goblin_dtype dt, int64_t k) {
    memset(r, 0, sizeof *r);
    if (!goblin_op_valid(op)) return GOBLIN_EINVAL;
    goblin_err e = goblin_op_contract(op, dt, k, &r->rel, &r->abs);
    if (e) return e;
    if (!(r->rel >= 0) || !(r->abs >= 0)) return GOBLIN_EINTERNAL;
    r->dt = dt;
    r->is_float = goblin_dtype_is_float(dt);
    r->maxf = max_finite(dt);
    r->reducing = k > 1;
    return GOBLIN_OK;
}

/* Scale element @p off of @p s (a float tensor); negative or NaN is the caller's bug. */
static goblin_err load_scale(const goblin_tensor *s, int64_t off, double *out) {
    double v = goblin__load_f64(s->dtype, s->data, off);
    if (!(v >= 0)) return GOBLIN_EINVAL;
    *out = v;
    return GOBLIN_OK;
}

static bool scale_tensor_ok(const goblin_tensor *s) {
    return goblin_dtype_is_float(s->dtype) && shape_ok(s);
}

goblin_err goblin_verify_compare_scaled(goblin_op op, goblin_dtype dt, int64_t k,
                                        const goblin_tensor *a, const goblin_tensor *b,
                                        const goblin_tensor *scale, goblin_verdict *out) {
    if (!a || !b || !out) return GOBLIN_EINVAL;
    rule r;
    goblin_err e = rule_init(&r, op, dt, k);
    if (e) return e;
    if (scale && !scale_tensor_ok(scale)) return GOBLIN_EINVAL;
    if (a->dtype != dt || b->dtype != dt) return verdict_reject(out, GOBLIN_VERIFY_DTYPE);
    if (!shape_ok(a) || !shape_ok(b) || !same_shape(a, b))
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    if (scale && !same_shape(a, scale)) return GOBLIN_EINVAL;
    int64_t numel;
    if (goblin__shape_numel(a->rank, a->shape, &numel) != GOBLIN_OK)
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    if (numel > 0 && (!a->data || !b->data || (scale && !scale->data))) return GOBLIN_EINVAL;
    size_t es = goblin_dtype_size(dt);

    /* Fast path: bit-equal results (deterministic kernels make this the common case). */
    bool bit_equal = true;
    if (numel > 0 && goblin_tensor_is_contiguous(a) && goblin_tensor_is_contiguous(b)) {
        bit_equal = memcmp(a->data, b->data, (size_t)numel * es) == 0;
    } else if (numel > 0) {
        int64_t st[4][GOBLIN_MAX_RANK];
        memcpy(st[0], a->strides, sizeof st[0]);
        memcpy(st[1], b->strides, sizeof st[1]);
        goblin__nditer it;
        goblin__nditer_init(&it, a->rank, a->shape, 2, st);
        for (int64_t i = 0; i < numel && bit_equal; i++) {
            bit_equal = memcmp((const char *)a->data + it.off[0] * (int64_t)es,
                               (const char *)b->data + it.off[1] * (int64_t)es, es) == 0;
            goblin__nditer_next(&it);
        }
    }
    if (bit_equal) {
        verdict_init(out);
        out->reason = GOBLIN_VERIFY_BIT_EQUAL;
        out->checked = numel;
        return GOBLIN_OK;
    }

    int64_t st[4][GOBLIN_MAX_RANK];
    memset(st, 0, sizeof st);
    memcpy(st[0], a->strides, sizeof st[0]);
    memcpy(st[1], b->strides, sizeof st[1]);
    if (scale) memcpy(st[2], scale->strides, sizeof st[2]);
    goblin__nditer it;
    goblin__nditer_init(&it, a->rank, a->shape, scale ? 3 : 2, st);
    tally t = {0, 0, 0, 0, -1, 0};
    for (int64_t i = 0; i < numel; i++) {
        double sv = NAN;
        if (scale && (e = load_scale(scale, it.off[2], &sv)) != GOBLIN_OK) return e;
        bool nf;
        double ratio;
        int res = judge_elem(&r, a, it.off[0], b, it.off[1], sv, &nf, &ratio);
        tally_add(&t, res, nf, ratio, i);
        goblin__nditer_next(&it);
    }
    tally_verdict(&t, out);
    return GOBLIN_OK;
}

goblin_err goblin_verify_compare(goblin_op op, goblin_dtype dt, int64_t k, const goblin_tensor *a,
                                 const goblin_tensor *b, goblin_verdict *out) {
    return goblin_verify_compare_scaled(op, dt, k, a, b, NULL, out);
}

goblin_err goblin_verify_spot(goblin_op op, goblin_dtype dt, int64_t k,
                              const goblin_tensor *claimed, const int64_t *indices, int64_t count,
                              const goblin_tensor *ref, const goblin_tensor *scale,
                              goblin_verdict *out) {
    if (!claimed || !ref || !out || count < 0 || (count > 0 && !indices)) return GOBLIN_EINVAL;
    rule r;
    goblin_err e = rule_init(&r, op, dt, k);
    if (e) return e;
    if (ref->dtype != dt || ref->rank != 1 || ref->shape[0] != count || (count && !ref->data))
        return GOBLIN_EINVAL;
    if (scale && (!scale_tensor_ok(scale) || scale->rank != 1 || scale->shape[0] != count ||
                  (count && !scale->data)))
        return GOBLIN_EINVAL;
    if (claimed->dtype != dt) return verdict_reject(out, GOBLIN_VERIFY_DTYPE);
    int64_t numel;
    if (!shape_ok(claimed) || goblin__shape_numel(claimed->rank, claimed->shape, &numel))
        return verdict_reject(out, GOBLIN_VERIFY_SHAPE);
    for (int64_t i = 0; i < count; i++)
        if (indices[i] < 0 || indices[i] >= numel) return GOBLIN_EINDEX;
    if (count > 0 && !claimed->data) return GOBLIN_EINVAL;

    tally t = {0, 0, 0, 0, -1, 0};
    for (int64_t i = 0; i < count; i++) {
        /* flat row-major index -> element offset through claimed's strides */
        int64_t rem = indices[i], off = 0;
        for (int32_t d = claimed->rank - 1; d >= 0; d--) {
            off += (rem % claimed->shape[d]) * claimed->strides[d];
            rem /= claimed->shape[d];
        }
        double sv = NAN;
        if (scale && (e = load_scale(scale, i * scale->strides[0], &sv)) != GOBLIN_OK) return e;
        bool nf;
        double ratio;
        int res = judge_elem(&r, claimed, off, ref, i * ref->strides[0], sv, &nf, &ratio);
        tally_add(&t, res, nf, ratio, indices[i]);
    }
    tally_verdict(&t, out);
    return GOBLIN_OK;
}

/* ---- sampling ------------------------------------------------------------ */

/* A keyed permutation of [0, 2^(2h)): an 8-round balanced Feistel network whose
 * round function is Philox (a PRF), so by Luby-Rackoff it is a pseudo-random
 * permutation; 8 rounds rather than 4 because h can be tiny. */
static uint64_t feistel(uint64_t x, int h, uint64_t seed) {
    uint64_t mask = (((uint64_t)1) << h) - 1;
    uint64_t L = x >> h, R = x & mask;
    for (uint64_t round = 0; round < 8; round++) {
        uint32_t o[4];
        goblin__rng_draw(seed, (round << 32) | R, VERIFY_STREAM_SAMPLE, 0, o);
        uint64_t fo = ((((uint64_t)o[1]) << 32) | o[0]) & mask;
        uint64_t nl = R;
        R = L ^ fo;
        L = nl;
    }
    return (L << h) | R;
}

goblin_err goblin_verify_sample_indices(uint64_t seed, int64_t numel, int64_t count, int64_t *out) {
    if (numel < 0 || count < 0 || count > numel || numel > ((int64_t)1 << 62) ||
        (count > 0 && !out))
        return GOBLIN_EINVAL;
    if (count == 0) return GOBLIN_OK;
    int bits = 0;
    for (uint64_t v = (uint64_t)(numel - 1); v; v >>= 1) bits++;
    int h = (bits + 1) / 2; /* domain 2^(2h) < 4 numel: under 4 walks per index expected */
    for (int64_t i = 0; i < count; i++) {
        /* Cycle-walking: the permutation's cycle through i < numel returns below
         * numel, so this ends, and it is a permutation of [0, numel). */
        uint64_t x = (uint64_t)i;
        do x = feistel(x, h, seed);
        while (x >= (uint64_t)numel);
        out[i] = (int64_t)x;
    }
    return GOBLIN_OK;
}
