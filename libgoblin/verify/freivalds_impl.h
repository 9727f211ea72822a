/* libgoblin/verify/freivalds_impl.h - the state of Freivalds' check, shared by its
 * passes over A, B and C (freivalds_pass.c) and the panels object that drives them
 * and judges the sums (freivalds.c); internal to verify/. */
#ifndef GOBLIN__VERIFY_FREIVALDS_IMPL_H
#define GOBLIN__VERIFY_FREIVALDS_IMPL_H

#include <goblin/verify.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The vectors are handled four at a time, one per lane of a v4 (freivalds_pass.c). */
#define LANES 4
#define FV_ROWS 4    /* rows of a matrix in flight */
#define FV_CHUNK 128 /* columns per chunk: four rows stay in L1 with two panels' weights */
#define FV_MAXG (GOBLIN_FREIVALDS_MAX_VECTORS / LANES)
typedef double v4 __attribute__((vector_size(LANES * sizeof(double))));

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

/* A column group of the element stage (freivalds_element.c): columns [j0, j0 + w)
 * and the upper bounds, from B and its own secret weights r, of its level's terms. */
typedef struct fv_group {
    int64_t j0, w;
    double beta; /* sqrt(sum ||b_j||^2 r_j^2) */
    double cs1;  /* sum ||b_j|| |r_j| */
    double r1;   /* sum |r_j| */
    double yn;   /* ||y||, y = B[:, group] r[group] as computed */
    double sn;   /* ||s||, s = |B[:, group]| |r[group]| */
    double smax; /* max_k s_k */
} fv_group;

/* A prepared row range of A. */
typedef struct fv_range {
    int64_t row0, rows;
    double *zg;       /* [rows][n_gpad]: A Y of the element stage (NULL when it is off) */
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
    bool el_on;         /* the element stage (freivalds_element.c) runs */
    void *el_block;     /* its groups, gp0 and scratch */
    fv_group *grp;      /* [n_grp] */
    int64_t *gp0;       /* [np + 1] first group of each panel */
    double *el_buf;     /* scratch: 5 K + 6 N, then el_ra and 2 N */
    double *el_ra;      /* [N] |r| of the groups' weights */
    double *el_r;       /* [N] the groups' weights r */
    double *yc;         /* [n_gpad / 8][K][8]: Y = B R per group, in chunks of 8 groups */
    int64_t n_grp, n_gpad, el_wmax;
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


/* ---- the passes (freivalds_pass.c), each in its AVX2+FMA or baseline build (f->v3) ---- */

/** ys = B r and ss = |B| m of every column panel over the rows [@p lb, @p le) of B, and
 *  those rows' column sums of squares into @p colsq (N, zeroed here); @p sanitize: read
 *  NaN/inf as 0. */
void goblin__fv_pass_b(fvp *f, bool sanitize, int64_t lb, int64_t le, double *colsq);
/** zt = A (B r), pt = |A| (|B| m) and the row norms of A for the rows [@p ib, @p ie) of
 *  the range @p r. */
void goblin__fv_pass_a(fvp *f, fv_range *r, int64_t ib, int64_t ie);
/** C r of the rows i0 .. i0 + rows - 1 of tile @p t into wq[g][q], |C| m into qs[q]. */
void goblin__fv_pass_c(fvp *f, const fv_tile *t, int64_t i0, int rows, v4 wq[][FV_ROWS],
                       double *qs);
/** One row of the tile already in f64 (NaN/inf zeroed): C r into wq[g][0], |C| m into *qs. */
void goblin__fv_row_c(const fvp *f, const fv_tile *t, const double *row, v4 wq[][FV_ROWS],
                      double *qs);
/** @p len elements with element stride @p stride (may be 0 or negative) into f64. */
void goblin__fv_load_row(goblin_dtype dt, const char *base, int64_t stride, int64_t len,
                         double *buf);
/** The element stage's groups and Y = B R (after the levels); GOBLIN_ENOMEM. Off
 *  (el_on false) where a panel has masked columns or the contract is infinite. */
goblin_err goblin__fv_el_new(fvp *f, uint64_t seed);
void goblin__fv_el_free(fvp *f);
/** Z = A Y for the rows of @p r (r->zg sized rows x n_gpad). */
void goblin__fv_el_prepare(fvp *f, fv_range *r);
/** After the row check's verdict @p out on tile @p t of panel @p p: an ACCEPT becomes a
 *  REJECT if an element is provably beyond its bound, an ESCALATE if a suspicious group
 *  was left unchecked (budget). */
void goblin__fv_el_judge(fvp *f, const fv_range *r, int32_t p, const fv_tile *t,
                         goblin_verdict *out);
/** Does the CPU run the AVX2+FMA passes (and may they be used)? */
bool goblin__fv_cpu_v3(void);

#endif
