/* libgoblin/verify/freivalds_pass.c - the passes of Freivalds' check over A, B and C
 * (freivalds_impl.h), built for AVX2+FMA and for a baseline and chosen at run time.
 *
 * Every threshold the sums feed is derived in docs/verification.md. */
#include "freivalds_impl.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

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

void goblin__fv_load_row(goblin_dtype dt, const char *base, int64_t stride, int64_t len,
                         double *buf) {
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
void goblin__fv_row_c(const fvp *f, const fv_tile *t, const double *row, v4 wq[][FV_ROWS],
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

void goblin__fv_pass_b(fvp *f, bool sanitize, int64_t lb, int64_t le, double *colsq) {
    if (f->v3) pass_b_v3(f, sanitize, lb, le, colsq);
    else pass_b_base(f, sanitize, lb, le, colsq);
}

void goblin__fv_pass_a(fvp *f, fv_range *r, int64_t ib, int64_t ie) {
    if (f->v3) pass_a_v3(f, r, ib, ie);
    else pass_a_base(f, r, ib, ie);
}

void goblin__fv_pass_c(fvp *f, const fv_tile *t, int64_t i0, int rows, v4 wq[][FV_ROWS],
                       double *qs) {
    if (f->v3) pass_c_v3(f, t, i0, rows, wq, qs);
    else pass_c_base(f, t, i0, rows, wq, qs);
}

/* Tests only (declared there): objects created while it is set use the baseline
 * passes even where the CPU runs the AVX2+FMA ones, so that both are tested. */
void goblin__freivalds_force_baseline(bool on);
static _Atomic bool fv_force_base = false;
void goblin__freivalds_force_baseline(bool on) {
    atomic_store_explicit(&fv_force_base, on, memory_order_relaxed);
}

/* Does the CPU run the AVX2+FMA passes (and may they be used)? The CPU is asked
 * once (racing first callers store the same answer). */
bool goblin__fv_cpu_v3(void) {
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
