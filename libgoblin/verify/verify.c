/* libgoblin/verify/verify.c - Freivalds' check of matmul tiles, replica comparison and
 * spot-checks (goblin/verify.h).
 *
 * Every threshold here is derived in docs/verification.md; the comments only
 * name the formula. Notation: u is the unit roundoff of the result's dtype,
 * u64 = 2^-53 that of the f64 arithmetic the check itself runs in,
 * gamma_j(u) = j u / (1 - j u). */
#include <goblin/verify.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "base/alloc.h"
#include "graph/graph_impl.h"
#include "backends/kernel_util.h"
#include "kernels/random.h"
#include "base/clock.h"
#include "verify_impl.h"

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
    p->threads = 1;
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
 * registers. Each pass computes two kinds of sums:
 *  - value sums, one per vector (x r_v, and through B and A): the vectors are
 *    handled four at a time, one per lane of a four-lane GCC/Clang vector (v4),
 *    each element broadcast and multiplied by four vectors' weights at once; lanes
 *    beyond `vectors` hold r = 0 and are ignored;
 *  - one magnitude sum per row, shared by all the vectors: |x| times the envelope
 *    m (m_j = 1 on unmasked columns, 0 on masked ones; |r_vj| <= m_j for every v),
 *    or times s = |B| m in the pass over A: a plain dot product of contiguous
 *    elements, four per v4 operation (docs/verification.md, "What is computed").
 * The passes are built twice and chosen at run time: for AVX2+FMA, where a v4 is
 * one register, and a baseline (@p vb) that computes with native two-lane vectors
 * (v2: one SSE2 or NEON register, a pair of scalars elsewhere), since GCC keeps a
 * v4 without AVX in memory and round-trips every accumulator through the stack.
 * An FMA only removes roundings, so the error bounds hold for both, and any
 * summation order keeps the gamma_len error bound the levels assume. */
#define LANES 4
#define FV_ROWS 4    /* rows of a matrix in flight */
#define FV_CHUNK 128 /* columns per chunk: four rows stay in L1 with two panels' weights */
#define FV_MAXG (GOBLIN_FREIVALDS_MAX_VECTORS / LANES)
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
/* Keep a loaded weight in a register: GCC would fold its load into both rows'
 * FMAs, and the loads, not the FMAs, would then bound the loop. (Clang rejects a
 * 32-byte "x" operand outside AVX code, where this kernel is also parsed; so does
 * GCC without optimization, which keeps the baseline variant's dead AVX branch.) */
#if defined(__clang__) || !defined(__OPTIMIZE__)
#define FV_IN_REG(t) ((void)0)
#else
#define FV_IN_REG(t) __extension__({ __asm__("" : "+x"(t)); })
#endif
#else
#define FV_HAVE_V3 0
#define FV_IN_REG(t) ((void)0)
#endif

/* Macros rather than functions: a function passing v4 by value draws GCC's -Wpsabi
 * note when built without AVX. */
#define v4_abs(x) ((v4)((i4)(x) & (i4){INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX}))
#define v4_sum(x) (((x)[0] + (x)[1]) + ((x)[2] + (x)[3]))
#define v4_ld(dst, p) memcpy(&(dst), (p), sizeof(v4))
#define v2_abs(x) ((v2)((i2)(x) & (i2){INT64_MAX, INT64_MAX}))
#define v2_ld(dst, p) memcpy(&(dst), (p), sizeof(v2))
#define v2_st(p, src) memcpy((p), &(src), sizeof(v2))
/* Element j of a row of a chunk (a const void *), and four elements from j as a v4:
 * the row is f64, or with @p xf an f32 row read in place (the constructor compiles
 * to one conversion instruction; a GCC vector conversion of four floats would not). */
#define XAT(xq, j, xf) ((xf) ? (double)((const float *)(xq))[j] : ((const double *)(xq))[j])
#define XLD(dst, xq, j, xf)                                                                \
    do {                                                                                   \
        if (xf) {                                                                          \
            f4 t_;                                                                         \
            memcpy(&t_, (const float *)(xq) + (j), sizeof t_);                             \
            (dst) = (v4){t_[0], t_[1], t_[2], t_[3]};                                      \
        } else {                                                                           \
            v4_ld(dst, (const double *)(xq) + (j));                                        \
        }                                                                                  \
    } while (0)

/* @p len elements with element stride @p stride (may be 0 or negative) into f64. */
FV_INLINE void load_row_impl(goblin_dtype dt, const char *base, int64_t stride, int64_t len,
                             double *restrict buf) {
    if (dt == GOBLIN_DTYPE_F32) {
        const float *restrict p = (const float *)base;
        if (stride == 1) {
            /* blocks of eight that the compiler turns into two- or four-lane
             * conversions (a GCC vector conversion of four floats is split into
             * halves through the stack, even for AVX2) */
            int64_t j = 0;
            for (; j + 8 <= len; j += 8)
                for (int k = 0; k < 8; k++) buf[j + k] = p[j + k];
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
    load_row_impl(dt, base, stride, len, buf);
}

/* A chunk of a row as f64: in place for f64 with unit stride, else converted into
 * @p buf. @p sanitize: NaN/inf read as 0. */
FV_INLINE const double *chunk_impl(goblin_dtype dt, const char *base, int64_t stride, int64_t len,
                                   double *buf, bool sanitize) {
    if (dt == GOBLIN_DTYPE_F64 && stride == 1 && !sanitize) return (const double *)base;
    load_row_impl(dt, base, stride, len, buf);
    if (sanitize)
        for (int64_t j = 0; j < len; j++)
            if (!isfinite(buf[j])) buf[j] = 0;
    return buf;
}

/* Prefetches spread over a chunk's dot products: the same columns of the next rows
 * of the matrix (see block_rows). */
typedef struct fv_pf {
    const char *p[FV_ROWS]; /* the chunk in the next rows (the current one where none) */
    int64_t es;             /* element size */
} fv_pf;

/* The magnitude sum rdot_impl adds: none, |x| (m = 1 throughout: additions, which
 * leave the FMA units to the value sums) or |x| times weights. */
enum { FV_MAG_NONE, FV_MAG_ONES, FV_MAG_W };

/* The sums of a chunk, each row against four vectors' weights: for the rows
 * q < FV_ROWS, two at a time,
 *     acc[5q + v] += x_q[j] w[v * ws + j]     (v < 4: the value sums)
 *     acc[5q + 4] += |x_q[j]| s[j]            (@p mag: FV_MAG_W; FV_MAG_ONES: s = 1)
 * as lane partial sums (v4_sum gives each sum; the tail goes to lane 0). Each
 * weight is loaded once per pair of rows and each element once per group of four
 * vectors: eight value FMAs of four elements each per step, no broadcasts, ten
 * independent chains for the FMA latency. The baseline keeps two lanes of each
 * accumulator (ten v2 accumulators, fourteen of the sixteen SSE2 registers).
 * @p pf (or NULL): spread the next rows' prefetches over the first pair's loop. */
FV_INLINE void rdot_impl(const void *const x[FV_ROWS], bool xf, const double *w, int64_t ws,
                         const double *s, int mag, int64_t len, v4 *acc, const fv_pf *pf,
                         bool vb) {
    const double *w0 = w, *w1 = w + ws, *w2 = w + 2 * ws, *w3 = w + 3 * ws;
    if (vb && pf) /* the baseline prefetches up front */
        for (int q = 0; q < FV_ROWS; q++)
            for (int64_t o = 0; o < len * pf->es; o += 64) __builtin_prefetch(pf->p[q] + o, 0, 2);
    for (int q = 0; q < FV_ROWS; q += 2) {
        const void *xa = x[q], *xb = x[q + 1];
        v4 *pa = acc + 5 * q, *pb = acc + 5 * (q + 1);
        int64_t j = 0;
        if (vb) { /* f64 rows (xf is false) */
            const double *da = xa, *db = xb;
            v2 a0, a1, a2, a3, am, b0, b1, b2, b3, bm;
            v2_ld(a0, &pa[0]), v2_ld(a1, &pa[1]), v2_ld(a2, &pa[2]), v2_ld(a3, &pa[3]);
            v2_ld(am, &pa[4]), v2_ld(b0, &pb[0]), v2_ld(b1, &pb[1]), v2_ld(b2, &pb[2]);
            v2_ld(b3, &pb[3]), v2_ld(bm, &pb[4]);
            for (; j + 2 <= len; j += 2) {
                v2 ya, yb, t;
                v2_ld(ya, da + j), v2_ld(yb, db + j);
                v2_ld(t, w0 + j), a0 += ya * t, b0 += yb * t;
                v2_ld(t, w1 + j), a1 += ya * t, b1 += yb * t;
                v2_ld(t, w2 + j), a2 += ya * t, b2 += yb * t;
                v2_ld(t, w3 + j), a3 += ya * t, b3 += yb * t;
                if (mag == FV_MAG_W) {
                    v2_ld(t, s + j);
                    am += v2_abs(ya) * t, bm += v2_abs(yb) * t;
                } else if (mag == FV_MAG_ONES) {
                    am += v2_abs(ya), bm += v2_abs(yb);
                }
            }
            v2_st(&pa[0], a0), v2_st(&pa[1], a1), v2_st(&pa[2], a2), v2_st(&pa[3], a3);
            v2_st(&pa[4], am), v2_st(&pb[0], b0), v2_st(&pb[1], b1), v2_st(&pb[2], b2);
            v2_st(&pb[3], b3), v2_st(&pb[4], bm);
        } else {
            v4 a0 = pa[0], a1 = pa[1], a2 = pa[2], a3 = pa[3], am = pa[4];
            v4 b0 = pb[0], b1 = pb[1], b2 = pb[2], b3 = pb[3], bm = pb[4];
            for (; j + LANES <= len; j += LANES) {
                if (pf && q == 0 && (j & 15) == 0) /* 16 elements: 64 bytes of f32, 128 of f64 */
                    for (int r = 0; r < FV_ROWS; r++) {
                        __builtin_prefetch(pf->p[r] + j * pf->es, 0, 2);
                        if (pf->es == 8) __builtin_prefetch(pf->p[r] + j * 8 + 64, 0, 2);
                    }
                v4 ya, yb, t;
                XLD(ya, xa, j, xf);
                XLD(yb, xb, j, xf);
                v4_ld(t, w0 + j), FV_IN_REG(t), a0 += ya * t, b0 += yb * t;
                v4_ld(t, w1 + j), FV_IN_REG(t), a1 += ya * t, b1 += yb * t;
                v4_ld(t, w2 + j), FV_IN_REG(t), a2 += ya * t, b2 += yb * t;
                v4_ld(t, w3 + j), FV_IN_REG(t), a3 += ya * t, b3 += yb * t;
                if (mag == FV_MAG_W) {
                    v4_ld(t, s + j), FV_IN_REG(t);
                    am += v4_abs(ya) * t, bm += v4_abs(yb) * t;
                } else if (mag == FV_MAG_ONES) {
                    am += v4_abs(ya), bm += v4_abs(yb);
                }
            }
            pa[0] = a0, pa[1] = a1, pa[2] = a2, pa[3] = a3, pa[4] = am;
            pb[0] = b0, pb[1] = b1, pb[2] = b2, pb[3] = b3, pb[4] = bm;
        }
        for (; j < len; j++) {
            double ya = XAT(xa, j, xf), yb = XAT(xb, j, xf);
            pa[0][0] += ya * w0[j], pb[0][0] += yb * w0[j];
            pa[1][0] += ya * w1[j], pb[1][0] += yb * w1[j];
            pa[2][0] += ya * w2[j], pb[2][0] += yb * w2[j];
            pa[3][0] += ya * w3[j], pb[3][0] += yb * w3[j];
            if (mag != FV_MAG_NONE) {
                double sj = mag == FV_MAG_W ? s[j] : 1.0;
                pa[4][0] += fabs(ya) * sj, pb[4][0] += fabs(yb) * sj;
            }
        }
    }
}

/* sq[q] += x_q^2 and ab[q] += |x_q| (lane partial sums), rows q < @p rows; four
 * partial sums each, so that the loop is not bound by the adds' latency. */
FV_INLINE void sqab_impl(const void *const x[FV_ROWS], bool xf, int rows, int64_t len, v4 *sq,
                         v4 *ab, bool vb) {
    if (vb) { /* f64 rows (xf is false) */
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
        const void *xq = x[q];
        v4 s0 = sq[q], s1 = splat(0), s2 = splat(0), s3 = splat(0);
        v4 a0 = ab[q], a1 = splat(0), a2 = splat(0), a3 = splat(0);
        int64_t j = 0;
        for (; j + 4 * LANES <= len; j += 4 * LANES) {
            v4 v0, v1, v2, v3;
            XLD(v0, xq, j, xf);
            XLD(v1, xq, j + LANES, xf);
            XLD(v2, xq, j + 2 * LANES, xf);
            XLD(v3, xq, j + 3 * LANES, xf);
            s0 += v0 * v0, s1 += v1 * v1, s2 += v2 * v2, s3 += v3 * v3;
            a0 += v4_abs(v0), a1 += v4_abs(v1), a2 += v4_abs(v2), a3 += v4_abs(v3);
        }
        for (; j < len; j++) {
            double y = XAT(xq, j, xf);
            s0[0] += y * y;
            a0[0] += fabs(y);
        }
        sq[q] = (s0 + s1) + (s2 + s3);
        ab[q] = (a0 + a1) + (a2 + a3);
    }
}

/* ---- the check's state ---------------------------------------------------- *
 *
 * A panels object (goblin_freivalds_panels) holds everything that depends only on
 * A, B and the secret vectors: r for all N columns and the envelope m, y = B r and
 * s = |B| m per column panel, the column norms of B, the per-panel levels, and for
 * each prepared row range of A, z = A y and P = |A| s per panel with the row norms.
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
    v4 *zt;           /* [np][ng][rows]: A (B r) per panel */
    double *pt;       /* [np][rows]: |A| (|B| m) per panel */
    double *asq, *a1; /* [rows] sum a^2 and sum |a| per row of A */
} fv_range;

struct goblin_freivalds_panels {
    goblin_dtype dt;
    size_t es;
    int64_t M, N, K;
    int64_t nv, ng;     /* vectors, groups of LANES vectors */
    int32_t np;         /* column panels */
    int32_t threads;    /* 1, or 2: the passes over A and C of a long row range in halves */
    void *twin_block;   /* the second thread's scratch (acc2, xb2, buf2), made at first use */
    v4 *acc2;
    double *xb2, *buf2;
    bool v3;            /* the AVX2+FMA passes */
    const char *a0;     /* A at (0, k0); NULL if K = 0 */
    int64_t as0, as1;
    const char *b0;     /* B at (k0, 0); NULL if K = 0 */
    int64_t bs0, bs1;
    int64_t *cb;        /* [np + 1] column bounds */
    v4 *acc;            /* [np][ng][5 FV_ROWS]: the pass over A's partial sums */
    fv_levels *lv;      /* [np] */
    int64_t ns, ks;     /* row strides of rw and ys (see fv_new) */
    double *rw;         /* [4 ng][ns]: the secret vectors r (0 in masked columns) */
    double *mw;         /* [ns]: the envelope m: 1, or 0 in masked columns */
    double *ys;         /* [np][4 ng + 1][ks]: B r per panel, then |B| m in row 4 ng */
    double *colsq;      /* [N] sum b^2 per column of B (0 in masked columns) */
    double *colsq2;     /* [N] the second half's sums, before they are added (fv_pass_b) */
    double *xb;         /* [FV_ROWS][FV_CHUNK] converted chunks */
    double *buf;        /* [widest panel] one row of C */
    unsigned char *bad; /* [N] column of B holds NaN/inf or overflows */
    fv_range *ranges;   /* the prepared row ranges: inline_ranges until there are more */
    int32_t n_ranges, cap_ranges;
    fv_range inline_ranges[4];
};

typedef goblin_freivalds_panels fvp;

/* The tile of C being judged: rows x n at @p c0, the panel's r at rw (vector
 * stride N) and its m at mw. */
typedef struct fv_tile {
    const char *c0;
    int64_t cs0, cs1, rows, n;
    const double *rw;
    const double *mw;
    bool ones; /* no masked column: m = 1 throughout */
} fv_tile;

/* The rows of a block: row q < rows at @p base + q * @p s0 (elements), from column
 * @p j0, @p len columns; missing rows repeat row 0 (their sums are not used). The
 * same columns of the next @p next rows (0..FV_ROWS) are prefetched: the passes
 * stream matrices far bigger than the caches, and tiles are strided views whose
 * rows the hardware prefetchers follow poorly. Into L2, not L1: they are read only
 * after every chunk of the current block, by when L1 has long evicted them (to L1
 * the prefetches cost a third of the passes' time; measured in docs/verification.md). */
FV_INLINE const fv_pf *block_rows(const fvp *f, const char *base, int64_t s0, int64_t s1,
                                  int rows, int64_t j0, int64_t len, bool sanitize, int next,
                                  const void *x[FV_ROWS], bool *xf, fv_pf *pf, bool vb) {
    int64_t es = (int64_t)f->es;
    const fv_pf *out = NULL;
    if (s1 == 1 && next) {
        for (int q = 0; q < FV_ROWS; q++)
            pf->p[q] = base + ((q < next ? FV_ROWS + q : 0) * s0 + j0) * es;
        pf->es = es;
        out = pf;
    }
    /* f32 rows with unit stride are read in place by the AVX2+FMA kernels */
    *xf = !vb && f->dt == GOBLIN_DTYPE_F32 && s1 == 1 && !sanitize;
    for (int q = 0; q < FV_ROWS; q++)
        x[q] = q >= rows ? x[0]
               : *xf     ? (const void *)(base + (q * s0 + j0) * es)
                         : chunk_impl(f->dt, base + (q * s0 + j0 * s1) * es, s1, len,
                                      f->xb + q * FV_CHUNK, sanitize);
    return out;
}

/* Rows still to come after the block at row @p r0 of @p total, up to FV_ROWS. */
static inline int rows_next(int64_t r0, int64_t total) {
    int64_t left = total - r0 - FV_ROWS;
    return left <= 0 ? 0 : left < FV_ROWS ? (int)left : FV_ROWS;
}

/* ys = B r and ss = |B| m of every column panel over the rows [@p lb, @p le) of B,
 * and those rows' column sums of squares into @p colsq (N, zeroed here), one pass by
 * rows (a block of rows meets every panel before the next block is read).
 * @p sanitize: read NaN/inf as 0 (their columns are masked: r_j = m_j = 0 there). */
FV_INLINE void pass_b_impl(fvp *f, bool sanitize, int64_t lb, int64_t le, double *colsq, bool vb) {
    int64_t N = f->N, ng = f->ng, nw = ng * LANES, ns = f->ns, ks = f->ks;
    memset(colsq, 0, (size_t)N * sizeof(double));
    for (int64_t l0 = lb; l0 < le; l0 += FV_ROWS) {
        int rows = le - l0 < FV_ROWS ? (int)(le - l0) : FV_ROWS;
        int next = rows_next(l0, le);
        const char *base = f->b0 + l0 * f->bs0 * (int64_t)f->es;
        for (int32_t p = 0; p < f->np; p++) {
            v4 acc[FV_MAXG][5 * FV_ROWS];
            memset(acc, 0, sizeof acc);
            for (int64_t j0 = f->cb[p]; j0 < f->cb[p + 1]; j0 += FV_CHUNK) {
                int64_t len = f->cb[p + 1] - j0 < FV_CHUNK ? f->cb[p + 1] - j0 : FV_CHUNK;
                const void *x[FV_ROWS];
                bool xf;
                fv_pf pfs;
                const fv_pf *pf = block_rows(f, base, f->bs0, f->bs1, rows, j0, len, sanitize,
                                             next, x, &xf, &pfs, vb);
                double *cs = colsq + j0;
                int64_t j = 0;
                if (rows == FV_ROWS && vb) /* f64 rows (xf is false) */
                    for (; j + 2 <= len; j += 2) {
                        v2 c, v0, v1, v2_, v3;
                        v2_ld(c, cs + j);
                        v2_ld(v0, (const double *)x[0] + j);
                        v2_ld(v1, (const double *)x[1] + j);
                        v2_ld(v2_, (const double *)x[2] + j);
                        v2_ld(v3, (const double *)x[3] + j);
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
                        XLD(v0, x[0], j, xf);
                        XLD(v1, x[1], j, xf);
                        XLD(v2, x[2], j, xf);
                        XLD(v3, x[3], j, xf);
                        c += v0 * v0;
                        c += v1 * v1;
                        c += v2 * v2;
                        c += v3 * v3;
                        memcpy(cs + j, &c, sizeof c);
                    }
                for (; j < len; j++)
                    for (int q = 0; q < rows; q++) cs[j] += XAT(x[q], j, xf) * XAT(x[q], j, xf);
                /* m = 1 until a column is masked (then the pass is redone, sanitized) */
                const double *rw = f->rw + j0, *mw = f->mw + j0;
                if (sanitize) rdot_impl(x, xf, rw, ns, mw, FV_MAG_W, len, acc[0], pf, vb);
                else rdot_impl(x, xf, rw, ns, NULL, FV_MAG_ONES, len, acc[0], pf, vb);
                for (int64_t g = 1; g < ng; g++)
                    rdot_impl(x, xf, rw + g * LANES * ns, ns, NULL, FV_MAG_NONE, len, acc[g],
                              NULL, vb);
            }
            double *ys = f->ys + (int64_t)p * (nw + 1) * ks; /* and s in row nw */
            for (int q = 0; q < rows; q++) {
                for (int64_t v = 0; v < nw; v++)
                    ys[v * ks + l0 + q] = v4_sum(acc[v / LANES][5 * q + v % LANES]);
                ys[nw * ks + l0 + q] = v4_sum(acc[0][5 * q + 4]);
            }
        }
    }
}

/* zt = A (B r) and pt = |A| (|B| m) of every column panel and the row norms of A
 * over the rows of @p r, one pass over them: each chunk of a block of rows meets the
 * weights of every panel while it is in L1. */
FV_INLINE void pass_a_impl(fvp *f, fv_range *r, int64_t ib, int64_t ie, bool vb) {
    int64_t m = r->rows, K = f->K, np = f->np, ng = f->ng, nw = ng * LANES, ks = f->ks;
    for (int64_t i0 = ib; i0 < ie; i0 += FV_ROWS) {
        int rows = m - i0 < FV_ROWS ? (int)(m - i0) : FV_ROWS;
        v4 sq[FV_ROWS], ab[FV_ROWS];
        memset(f->acc, 0, (size_t)(np * ng) * 5 * FV_ROWS * sizeof(v4));
        memset(sq, 0, sizeof sq);
        memset(ab, 0, sizeof ab);
        for (int64_t l0 = 0; l0 < K; l0 += FV_CHUNK) {
            int64_t len = K - l0 < FV_CHUNK ? K - l0 : FV_CHUNK;
            const void *x[FV_ROWS];
            bool xf;
            fv_pf pfs;
            const fv_pf *pf =
                block_rows(f, f->a0 + (r->row0 + i0) * f->as0 * (int64_t)f->es, f->as0, f->as1,
                           rows, l0, len, false, rows_next(i0, m), x, &xf, &pfs, vb);
            sqab_impl(x, xf, rows, len, sq, ab, vb);
            for (int64_t p = 0; p < np; p++) {
                const double *ys = f->ys + p * (nw + 1) * ks + l0;
                v4 *acc = f->acc + p * ng * 5 * FV_ROWS;
                rdot_impl(x, xf, ys, ks, ys + nw * ks, FV_MAG_W, len, acc, p ? NULL : pf, vb);
                for (int64_t g = 1; g < ng; g++)
                    rdot_impl(x, xf, ys + g * LANES * ks, ks, NULL, FV_MAG_NONE, len,
                              acc + g * 5 * FV_ROWS, NULL, vb);
            }
        }
        for (int q = 0; q < rows; q++) {
            r->asq[i0 + q] = v4_sum(sq[q]);
            r->a1[i0 + q] = v4_sum(ab[q]);
            for (int64_t p = 0; p < np; p++) {
                const v4 *acc = f->acc + p * ng * 5 * FV_ROWS;
                for (int64_t g = 0; g < ng; g++) {
                    const v4 *a = acc + g * 5 * FV_ROWS + 5 * q;
                    r->zt[(p * ng + g) * m + i0 + q] =
                        (v4){v4_sum(a[0]), v4_sum(a[1]), v4_sum(a[2]), v4_sum(a[3])};
                }
                r->pt[p * m + i0 + q] = v4_sum(acc[5 * q + 4]);
            }
        }
    }
}

/* C r for the rows i0 .. i0 + rows - 1 of the tile into wq[g][q] (vector 4g + lane
 * in that lane) and |C| m into qs[q]. A NaN/inf in row q makes qs[q] NaN/inf (|x| m
 * is NaN or inf for such an x, also where m = 0, and no term is negative), so a
 * finite qs[q] means a row without NaN/inf; a row with a non-finite qs[q] is looked
 * at element by element. */
FV_INLINE void pass_c_impl(fvp *f, const fv_tile *t, int64_t i0, int rows,
                           v4 wq[][FV_ROWS], double *qs, bool vb) {
    int64_t n = t->n, ns = f->ns, ng = f->ng;
    v4 acc[FV_MAXG][5 * FV_ROWS];
    memset(acc, 0, (size_t)ng * sizeof acc[0]);
    for (int64_t j0 = 0; j0 < n; j0 += FV_CHUNK) {
        int64_t len = n - j0 < FV_CHUNK ? n - j0 : FV_CHUNK;
        const void *x[FV_ROWS];
        bool xf;
        fv_pf pfs;
        const fv_pf *pf = block_rows(f, t->c0 + i0 * t->cs0 * (int64_t)f->es, t->cs0, t->cs1,
                                     rows, j0, len, false, rows_next(i0, t->rows), x, &xf, &pfs,
                                     vb);
        const double *rw = t->rw + j0;
        if (t->ones) rdot_impl(x, xf, rw, ns, NULL, FV_MAG_ONES, len, acc[0], pf, vb);
        else rdot_impl(x, xf, rw, ns, t->mw + j0, FV_MAG_W, len, acc[0], pf, vb);
        for (int64_t g = 1; g < ng; g++)
            rdot_impl(x, xf, rw + g * LANES * ns, ns, NULL, FV_MAG_NONE, len, acc[g], NULL, vb);
    }
    for (int q = 0; q < rows; q++) {
        for (int64_t g = 0; g < ng; g++) {
            const v4 *a = acc[g] + 5 * q;
            wq[g][q] = (v4){v4_sum(a[0]), v4_sum(a[1]), v4_sum(a[2]), v4_sum(a[3])};
        }
        qs[q] = v4_sum(acc[0][5 * q + 4]);
    }
}

/* One row of the tile already in f64 (NaN/inf zeroed): C r into wq[g][0] and |C| m
 * into *qs (rows with NaN/inf only: a hostile result). */
static void row_c(const fvp *f, const fv_tile *t, const double *row, v4 wq[][FV_ROWS],
                  double *qs) {
    double q = 0;
    for (int64_t j = 0; j < t->n; j++) q += fabs(row[j]) * t->mw[j];
    *qs = q;
    for (int64_t g = 0; g < f->ng; g++) {
        v4 s = splat(0.0);
        for (int lane = 0; lane < LANES; lane++) {
            const double *w = t->rw + (g * LANES + lane) * f->ns;
            for (int64_t j = 0; j < t->n; j++) s[lane] += row[j] * w[j];
        }
        wq[g][0] = s;
    }
}

#if FV_HAVE_V3
FV_V3 static void pass_b_v3(fvp *f, bool sanitize, int64_t lb, int64_t le, double *colsq) {
    pass_b_impl(f, sanitize, lb, le, colsq, false);
}
FV_V3 static void pass_a_v3(fvp *f, fv_range *r, int64_t ib, int64_t ie) { pass_a_impl(f, r, ib, ie, false); }
FV_V3 static void pass_c_v3(fvp *f, const fv_tile *t, int64_t i0, int rows, v4 wq[][FV_ROWS],
                            double *qs) {
    pass_c_impl(f, t, i0, rows, wq, qs, false);
}
#endif
static void pass_b_base(fvp *f, bool sanitize, int64_t lb, int64_t le, double *colsq) {
    pass_b_impl(f, sanitize, lb, le, colsq, true);
}
static void pass_a_base(fvp *f, fv_range *r, int64_t ib, int64_t ie) { pass_a_impl(f, r, ib, ie, true); }
static void pass_c_base(fvp *f, const fv_tile *t, int64_t i0, int rows, v4 wq[][FV_ROWS],
                        double *qs) {
    pass_c_impl(f, t, i0, rows, wq, qs, true);
}
#if !FV_HAVE_V3
#define pass_b_v3 pass_b_base
#define pass_a_v3 pass_a_base
#define pass_c_v3 pass_c_base
#endif

/* Tests only (declared there): objects created while it is set use the baseline
 * passes even where the CPU runs the AVX2+FMA ones, so that both are tested. */
void goblin__freivalds_force_baseline(bool on);
static _Atomic bool fv_force_base = false;
void goblin__freivalds_force_baseline(bool on) {
    atomic_store_explicit(&fv_force_base, on, memory_order_relaxed);
}

/* Does the CPU run the AVX2+FMA passes (and may they be used)? The CPU is asked
 * once (racing first callers store the same answer). */
static bool fv_v3(void) {
    if (atomic_load_explicit(&fv_force_base, memory_order_relaxed)) return false;
#if FV_HAVE_V3
    static _Atomic int known = -1;
    int v = atomic_load_explicit(&known, memory_order_relaxed);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        atomic_store_explicit(&known, v, memory_order_relaxed);
    }
    return v;
#else
    return false;
#endif
}

typedef struct fv_tally {
    int64_t checked, above_tight, above_bound, worst_row;
    double worst, worst_tight;
} fv_tally;

/* Judge row @p i of a tile from its sums (w = C r in lane v of wq[g][ws], |C| m in
 * @p qc) against the panel's zt = A (B r) (group stride @p m) and @p pc = |A| (|B| m),
 * with @p a1 = sum |a_il| and @p na >= ||a_i||. P and Q below are upper bounds of
 * the exact |A| |B| m and |C| m, which bound |A| |B| |r_v| and |C| |r_v| for every
 * vector v since |r_vj| <= m_j (docs/verification.md, "The rigorous bound R"). */
static void judge_row(const fv_levels *L, const v4 *zt, int64_t m, double pc, double qc,
                      double a1, int64_t i, double na, const v4 wq[][FV_ROWS], int ws,
                      fv_tally *t) {
    double abs_own = ETA64 * (L->dn * a1 * L->grow + L->dK + L->dn + 4);
    double P = pc * L->grow; /* >= exact |A| (|B| m) */
    double Q = qc * L->grow; /* >= exact |C| m */
    double claim_h = (L->bound_sigmas > 0 && L->rel_finite)
                         ? L->bound_sigmas * (L->rel_c * na * L->bf + L->abs_c * sqrt(L->n_good))
                         : INFINITY;
    double own = L->g_z * P + L->g_w * Q + abs_own;
    double so = L->sig_z * P + L->sig_w * Q;
    /* An honest |C| m is at most (1 + rel) |A| |B| m + abs sum m: a cheap second
     * rigorous test that catches absurd magnitudes outright ((1 + 8 u64): the
     * rounding of this formula; qlow <= the exact |C| m). */
    double qmax = L->rel_finite ? ((1 + L->rel_c) * P + L->abs_c * L->n_good) * (1 + 8 * U64)
                                : INFINITY;
    double qlow = qc / (1 + L->g_w);
    double rq = qlow > qmax ? ratio_of(qlow, qmax) : 0;
    for (int64_t g = 0; g < L->ng; g++) {
        v4 wv = wq[g][ws];
        v4 zv = zt[g * m + i];
        for (int64_t lane = 0; lane < LANES && g * LANES + lane < L->nv; lane++) {
            int64_t v = g * LANES + lane;
            double w = wv[lane], z = zv[lane];
            double claim_det = L->rel_finite ? L->rel_c * P + L->abs_c * L->sr1[v] : INFINITY;
            /* (1 + 16 u64): the rounding of this formula and of d itself */
            double R = (fmin(claim_det, claim_h) + own) * (1 + 16 * U64);
            double sc = L->sig_k * fmin(na * L->nb[v], P);
            double T = L->tight_sigmas * sqrt(sc * sc + so * so) + L->abs_c * L->sr1[v] + abs_own;
            if (T > R) T = R;
            double d = fabs(w - z);
            double rr = ratio_of(d, R), rt = ratio_of(d, T);
            if (!(d == d)) rr = rt = INFINITY; /* overflow in C r: absurd values */
            if (rq > rr) rr = rq;
            if (rr > rt) rt = rr;
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
    int64_t col0 = f->cb[p], n = f->cb[p + 1] - col0;
    L->nv = f->nv;
    L->ng = f->ng;
    L->tight_sigmas = x->p.tight_sigmas;
    L->bound_sigmas = x->p.bound_sigmas;
    double u = goblin__unit_roundoff(f->dt);
    goblin_op_contract(GOBLIN_OP_MATMUL, f->dt, f->K, &L->rel_c, &L->abs_c);
    double dn = (double)n, dK = (double)f->K;
    L->dn = dn;
    L->dK = dK;
    /* our f64 error in A (B r): B r within gamma_n |B| |r| <= gamma_n |B| m, then A
     * times it within gamma_K, together gamma_{n+K} |A| |B| m (2 spare) */
    L->g_z = gamma_n(dn + dK + 2, U64);
    L->g_w = gamma_n(dn + 2, U64); /* our f64 error in C r: gamma_n |C| |r| <= gamma_n |C| m */
    /* computed sums of magnitudes -> upper bounds of the exact ones: |B| m and |C| m
     * are sums of n exact terms (m is 0 or 1), |A| s of K rounded products, so each
     * computed one is within gamma_{n+K-1} of the exact one (relative, all terms >= 0)
     * and exact <= computed / (1 - gamma_j) <= computed (1 + 2 gamma_j) */
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
            double rj = f->rw[v * f->ns + col0 + j];
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

static void fv_pass_b(fvp *f, bool sanitize);

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
    /* Rows of weights (the vectors, then m or s) are ns or ks doubles apart, an odd
     * number of cache lines: rows a multiple of 4 KiB apart would all fall into
     * the same L1 sets, which hold only eight lines each. */
    int64_t ns = ((N + 7) / 8 | 1) * 8, ks = ((K + 7) / 8 | 1) * 8;
    uint64_t nw = (uint64_t)ng * LANES, n_dbl = 0;
    bool ok = size_mac(&n_v4, (uint64_t)np * (uint64_t)ng, 5 * FV_ROWS) &&
              size_mac(&n_dbl, nw + 1, (uint64_t)ns) && size_mac(&n_dbl, 1, (uint64_t)N) &&
              size_mac(&n_dbl, 1, (uint64_t)N) &&
              size_mac(&n_dbl, (uint64_t)np * (nw + 1), (uint64_t)ks) &&
              size_mac(&n_dbl, 1, FV_ROWS * FV_CHUNK + (uint64_t)wmax) &&
              size_mac(&bytes, n_v4, sizeof(v4)) && size_mac(&bytes, np, sizeof(fv_levels)) &&
              size_mac(&bytes, n_dbl, sizeof(double)) &&
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
    f->threads = x->p.threads >= 2 ? 2 : 1;
    f->v3 = fv_v3();
    f->as0 = a->strides[0];
    f->as1 = a->strides[1];
    f->bs0 = b->strides[0];
    f->bs1 = b->strides[1];
    /* (0, k0) of A and (k0, 0) of B; no arithmetic on a NULL of an empty operand */
    f->a0 = K && x->m ? (const char *)a->data + x->p.k0 * f->as1 * (int64_t)f->es : NULL;
    f->b0 = K && N ? (const char *)b->data + x->p.k0 * f->bs0 * (int64_t)f->es : NULL;
    f->acc = block;
    f->lv = (fv_levels *)(f->acc + (int64_t)np * ng * 5 * FV_ROWS);
    f->ns = ns;
    f->ks = ks;
    f->rw = (double *)(f->lv + np);
    f->mw = f->rw + (int64_t)nw * ns;
    f->ys = f->mw + ns;
    f->colsq = f->ys + (int64_t)np * (int64_t)(nw + 1) * ks;
    f->colsq2 = f->colsq + N;
    f->xb = f->colsq2 + N;
    f->buf = f->xb + FV_ROWS * FV_CHUNK;
    f->cb = (int64_t *)(f->buf + wmax);
    f->bad = (unsigned char *)(f->cb + np + 1);
    memcpy(f->cb, cb, ((size_t)np + 1) * sizeof(int64_t));
    memset(f->rw, 0, (size_t)nw * (size_t)ns * sizeof(double)); /* vectors beyond nv: r = 0 */
    memset(f->bad, 0, (size_t)N);
    for (int64_t j = 0; j < N; j++) f->mw[j] = 1; /* the envelope: no column masked yet */

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
            f->rw[v * ns + j] = (r[2] & 1u) ? -mag : mag;
        }

    fv_pass_b(f, false);
    /* Columns of B with NaN/inf (or squares overflowing f64) cannot be checked
     * algebraically: mask them out of every vector and of the envelope (r_j = m_j = 0)
     * and redo the pass. */
    int64_t n_bad = 0;
    for (int64_t j = 0; j < N; j++)
        if (!isfinite(f->colsq[j])) {
            f->bad[j] = 1;
            n_bad++;
            f->mw[j] = 0;
            for (int64_t v = 0; v < (int64_t)nw; v++) f->rw[v * ns + j] = 0;
        }
    if (n_bad) {
        fv_pass_b(f, true);
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
/* ---- two threads (goblin_freivalds_params.threads = 2) ------------------------ *
 *
 * The passes over A (a prepared row range) and over C (a check) split their rows in
 * two at a multiple of FV_ROWS: the calling thread takes the first half, a second
 * thread the rest, each with its own scratch (a copy of the object whose acc, xb and
 * buf point elsewhere). Every row is computed by the same code on the same blocks of
 * FV_ROWS rows as with one thread, so the sums and the verdict are the same bits; the
 * two halves write disjoint rows of the range, and the check's tallies are merged in
 * row order. Worth it where the checking thread shares its cores with busy ones (an
 * embedded grid): its work then falls on both cores instead of one (docs/verification.md). */
#define FV_SPLIT_ELEMS ((double)(1 << 18)) /* a pass this small stays on one thread */

/* A pass's second thread, with its CPU time: the caller adds it, once joined, to
 * its own thread's tally, which the node reads (goblin_node_stats.verify_cpu_ns). */
typedef struct fv_helper {
    void *(*fn)(void *);
    void *arg;
    int64_t cpu_ns;
    pthread_t th;
} fv_helper;

static _Thread_local int64_t fv_helper_cpu_ns;

int64_t goblin__freivalds_take_helper_cpu_ns(void) {
    int64_t x = fv_helper_cpu_ns;
    fv_helper_cpu_ns = 0;
    return x;
}

static void *fv_helper_main(void *arg) {
    fv_helper *h = arg;
    int64_t t0 = goblin__thread_cpu_ns();
    h->fn(h->arg);
    h->cpu_ns = goblin__thread_cpu_ns() - t0;
    return NULL;
}

static bool fv_spawn(fv_helper *h, void *(*fn)(void *), void *arg) {
    h->fn = fn;
    h->arg = arg;
    h->cpu_ns = 0;
    return pthread_create(&h->th, NULL, fv_helper_main, h) == 0;
}

static void fv_join(fv_helper *h) {
    pthread_join(h->th, NULL);
    fv_helper_cpu_ns += h->cpu_ns;
}

/* Passes run in two halves so far (tests: that the two-thread path ran). */
static atomic_llong fv_splits;
long long goblin__freivalds_splits(void);
long long goblin__freivalds_splits(void) { return atomic_load(&fv_splits); }

/* *twin: @p f with scratch of its own; false if @p f runs on one thread or no memory. */
static bool fv_twin(fvp *f, fvp *twin) {
    if (f->threads < 2) return false;
    if (!f->twin_block) {
        int64_t wmax = 0;
        for (int32_t p = 0; p < f->np; p++)
            if (f->cb[p + 1] - f->cb[p] > wmax) wmax = f->cb[p + 1] - f->cb[p];
        size_t n_acc = (size_t)f->np * (size_t)f->ng * 5 * FV_ROWS;
        size_t n_dbl = (size_t)FV_ROWS * FV_CHUNK + (size_t)wmax;
        void *b = goblin__alloc(n_acc * sizeof(v4) + n_dbl * sizeof(double));
        if (!b) return false;
        f->twin_block = b;
        f->acc2 = b;
        f->xb2 = (double *)(f->acc2 + n_acc);
        f->buf2 = f->xb2 + FV_ROWS * FV_CHUNK;
    }
    *twin = *f;
    twin->acc = f->acc2;
    twin->xb = f->xb2;
    twin->buf = f->buf2;
    return true;
}

/* The row where a pass of @p rows rows (of @p elems elements each) splits: a multiple
 * of FV_ROWS, or 0 to stay on one thread. */
static int64_t fv_split(const fvp *f, int64_t rows, double elems) {
    if (f->threads < 2 || rows < 4 * FV_ROWS || (double)rows * elems < FV_SPLIT_ELEMS) return 0;
    return rows / 2 / FV_ROWS * FV_ROWS;
}

/* The pass over B (pass_b_impl) of a long B in two halves of rows, whatever the
 * threads: the second half's column sums of squares go to colsq2 and are then added
 * to the first's, so that one and two threads give the same bits. With two threads
 * the second half runs on its own thread. */
typedef struct fv_pb_job {
    fvp *f;
    bool sanitize;
    int64_t lb, le;
    double *colsq;
} fv_pb_job;

static void *fv_pb_main(void *arg) {
    fv_pb_job *j = arg;
    if (j->f->v3) pass_b_v3(j->f, j->sanitize, j->lb, j->le, j->colsq);
    else pass_b_base(j->f, j->sanitize, j->lb, j->le, j->colsq);
    return NULL;
}

static void fv_pass_b(fvp *f, bool sanitize) {
    int64_t K = f->K, h = 0;
    if (K >= 4 * FV_ROWS && (double)K * (double)f->N >= FV_SPLIT_ELEMS) h = K / 2 / FV_ROWS * FV_ROWS;
    fvp twin;
    fv_helper hp;
    fv_pb_job second = {f, sanitize, h, K, f->colsq2}, first = {f, sanitize, 0, h ? h : K, f->colsq};
    bool two = h > 0 && fv_twin(f, &twin);
    if (two) second.f = &twin;
    two = two && fv_spawn(&hp, fv_pb_main, &second);
    if (two) atomic_fetch_add(&fv_splits, 1);
    fv_pb_main(&first);
    if (two) fv_join(&hp);
    else if (h) {
        second.f = f;
        fv_pb_main(&second);
    }
    if (h)
        for (int64_t j = 0; j < f->N; j++) f->colsq[j] += f->colsq2[j];
}

typedef struct fv_pa_job {
    fvp *f;
    fv_range *r;
    int64_t ib, ie;
} fv_pa_job;

static void *fv_pa_main(void *arg) {
    fv_pa_job *j = arg;
    if (j->f->v3) pass_a_v3(j->f, j->r, j->ib, j->ie);
    else pass_a_base(j->f, j->r, j->ib, j->ie);
    return NULL;
}

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
    if (!size_mac(&bytes, (uint64_t)f->np * (uint64_t)f->ng * sizeof(v4), (uint64_t)rows) ||
        !size_mac(&bytes, ((uint64_t)f->np + 2) * sizeof(double), (uint64_t)rows) ||
        bytes > SIZE_MAX)
        return GOBLIN_ENOMEM;
    void *block = goblin__alloc((size_t)bytes);
    if (!block) return GOBLIN_ENOMEM;
    r = &f->ranges[f->n_ranges];
    r->row0 = row0;
    r->rows = rows;
    r->zt = block;
    r->pt = (double *)(r->zt + (int64_t)f->np * f->ng * rows);
    r->asq = r->pt + (int64_t)f->np * rows;
    r->a1 = r->asq + rows;
    int64_t h = fv_split(f, rows, (double)f->K * f->np);
    fvp twin;
    fv_helper hp;
    fv_pa_job pj = {&twin, r, h, rows};
    bool two = h > 0 && fv_twin(f, &twin) && fv_spawn(&hp, fv_pa_main, &pj);
    if (two) atomic_fetch_add(&fv_splits, 1);
    if (f->v3) pass_a_v3(f, r, 0, two ? h : rows);
    else pass_a_base(f, r, 0, two ? h : rows);
    if (two) fv_join(&hp);
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
    goblin__free(fp->twin_block);
    goblin__free(fp); /* and its arrays */
}

/* The rows [@p ib, @p ie) of a check: their tallies into *acc. */
typedef struct fv_jacc {
    fv_tally t;
    int64_t unchecked, nonfinite;
    bool reject_nonfinite;
} fv_jacc;

typedef struct fv_judge_job {
    fvp *f;
    const fv_range *r;
    int32_t p;
    const fv_tile *tile;
    int64_t ib, ie;
    fv_jacc acc;
} fv_judge_job;

static void fv_judge_rows(fvp *f, const fv_range *r, int32_t p, const fv_tile *tp, int64_t ib, int64_t ie,
                          fv_jacc *acc) {
    const fv_levels *L = &f->lv[p];
    int64_t col0 = f->cb[p], n = f->cb[p + 1] - col0, m = r->rows, nv = f->nv;
    goblin_dtype dt = f->dt;
    fv_tile tile = *tp;
    const v4 *zt = r->zt + (int64_t)p * f->ng * m;
    const double *pt = r->pt + (int64_t)p * m;
    double maxf = max_finite(dt);
    for (int64_t i0 = ib; i0 < ie; i0 += FV_ROWS) {
        int rows = m - i0 < FV_ROWS ? (int)(m - i0) : FV_ROWS;
        v4 wq[FV_MAXG][FV_ROWS];
        double qs[FV_ROWS];
        if (f->v3) pass_c_v3(f, &tile, i0, rows, wq, qs);
        else pass_c_base(f, &tile, i0, rows, wq, qs);
        for (int q = 0; q < rows; q++) {
            int64_t i = i0 + q;
            double na = sqrt(r->asq[i]) * L->grow;
            bool row_ok = isfinite(r->asq[i]) && isfinite(r->a1[i]) && isfinite(pt[i]);
            for (int64_t v = 0; v < nv && row_ok; v++)
                row_ok = isfinite(zt[(v / LANES) * m + i][v % LANES]);
            /* |C| m finite: no NaN/inf in the row. Otherwise look at its elements (a
             * finite row whose |C| m overflows f64 is judged on its sums as they are). */
            bool finite = isfinite(qs[q]);
            if (!finite) {
                load_row(dt, tile.c0 + i * tile.cs0 * (int64_t)f->es, tile.cs1, n, f->buf);
                finite = true;
                for (int64_t j = 0; j < n && finite; j++) finite = isfinite(f->buf[j]);
            }
            if (finite) {
                if (!row_ok) acc->unchecked++;
                else judge_row(L, zt, m, pt[i], qs[q], r->a1[i], i, na, wq, q, &acc->t);
                continue;
            }
            /* NaN/inf in C (f->buf holds the row): impossible for an honest result when
             * a_i and b_j are finite and ||a_i|| ||b_j|| (1 + rel) + abs < max finite
             * (no partial sum can overflow). */
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
                    acc->nonfinite++;
                    row_nonfinite = true;
                } else {
                    row_unsure = true;
                }
            }
            if (row_nonfinite) {
                acc->reject_nonfinite = true;
                if (acc->t.worst != INFINITY) {
                    acc->t.worst = acc->t.worst_tight = INFINITY;
                    acc->t.worst_row = i;
                }
                continue;
            }
            if (row_unsure) {
                acc->unchecked++;
                continue;
            }
            v4 wr[FV_MAXG][FV_ROWS];
            double qr;
            row_c(f, &tile, f->buf, wr, &qr);
            judge_row(L, zt, m, pt[i], qr, r->a1[i], i, na, wr, 0, &acc->t);
        }
    }
}

static void *fv_judge_main(void *arg) {
    fv_judge_job *j = arg;
    fv_judge_rows(j->f, j->r, j->p, j->tile, j->ib, j->ie, &j->acc);
    return NULL;
}

/* Judge tile @p c (shape and dtype checked) of panel @p p over the prepared range @p r. */
static void fv_judge(fvp *f, const fv_range *r, int32_t p, const goblin_tensor *c,
                     goblin_verdict *out) {
    const fv_levels *L = &f->lv[p];
    int64_t col0 = f->cb[p], n = f->cb[p + 1] - col0, m = r->rows;
    fv_tile tile = {(const char *)c->data, c->strides[0], c->strides[1], m, n,
                    f->rw + col0,         f->mw + col0, L->n_bad == 0};
    fv_jacc a = {{0, 0, 0, -1, 0, 0}, 0, 0, false};
    int64_t h = fv_split(f, m, (double)n);
    fvp twin;
    fv_helper hp;
    fv_judge_job jj = {&twin, r, p, &tile, h, m, {{0, 0, 0, -1, 0, 0}, 0, 0, false}};
    bool two = h > 0 && fv_twin(f, &twin) && fv_spawn(&hp, fv_judge_main, &jj);
    if (two) atomic_fetch_add(&fv_splits, 1);
    fv_judge_rows(f, r, p, &tile, 0, two ? h : m, &a);
    if (two) {
        fv_join(&hp);
        /* merged as if one thread had gone on: counts add, and the worst row is the
         * first with the largest ratio */
        const fv_jacc *b = &jj.acc;
        a.t.checked += b->t.checked;
        a.t.above_tight += b->t.above_tight;
        a.t.above_bound += b->t.above_bound;
        if (b->t.worst_row >= 0 && (b->t.worst > a.t.worst || (a.t.worst_row < 0 && b->t.worst >= a.t.worst))) {
            a.t.worst = b->t.worst;
            a.t.worst_row = b->t.worst_row;
        }
        if (b->t.worst_tight > a.t.worst_tight) a.t.worst_tight = b->t.worst_tight;
        a.unchecked += b->unchecked;
        a.nonfinite += b->nonfinite;
        a.reject_nonfinite = a.reject_nonfinite || b->reject_nonfinite;
    }
    fv_tally t = a.t;
    int64_t unchecked = a.unchecked, nonfinite = a.nonfinite;
    bool reject_nonfinite = a.reject_nonfinite;
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
