/* libgoblin/verify/freivalds_element.c - the element stage of Freivalds' check: no
 * element of an accepted tile is beyond 1.5 times its own contract bound.
 *
 * A row's check sums n elements' honest rounding errors, which grow like sqrt(n K) u,
 * while one element's contract bound is about K u: on wide tiles one wrong element
 * hides in its row's noise. So a tile the row check accepts is checked again on
 * column groups: each row of C is cut into groups of w consecutive columns, w chosen
 * from B and the secret weights so that the group's accept level stays below
 * 0.75 rho gamma_{K+2}(u) ||a_i|| ||b_j|| |r_j| for each of its columns j (rho = 0.6: the
 * element's own scale S_ij is at least rho times its Cauchy-Schwarz bound for the
 * data the guarantee covers). A group whose discrepancy exceeds its accept level is
 * recomputed exactly, element by element, against each element's own bound: beyond
 * it is a REJECT, within it the group is accepted. Derivation: docs/verification.md,
 * "The element stage". */
#include <goblin/verify.h>
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include "base/alloc.h"
#include "core/node.h"
#include "kernels/random.h"
#include "freivalds_impl.h"
#include "verdict.h"
#include "verify_impl.h"

#define EL_SIGMAS 2.5  /* the groups' accept level, in the model's standard deviations */
#define EL_LAMBDA 0.75 /* accept level / (rho gamma S |r|): a 1.5x error moves d by 2 T */
#define EL_RHO 0.6     /* S_ij >= rho ||a_i|| ||b_j|| for the data covered */
#define EL_CHUNK 8     /* groups per chunk of Y (two v4 accumulators per row) */

#define FV_INLINE static inline __attribute__((always_inline))
#if defined(__x86_64__) && defined(__GNUC__)
#define FV_V3 __attribute__((target("avx2,fma")))
#endif

typedef int64_t i4 __attribute__((vector_size(LANES * sizeof(int64_t))));
typedef double v4u __attribute__((vector_size(LANES * sizeof(double)), aligned(8)));

/* Groups recomputed exactly so far (tests and bench: how often honest results need it). */
static atomic_llong el_rechecks;
long long goblin__freivalds_rechecks(void);
long long goblin__freivalds_rechecks(void) { return atomic_load(&el_rechecks); }

/* The stage on (the default) or off: the bench measures its cost within one run. */
static atomic_bool el_off;
void goblin__freivalds_element_stage(bool on);
void goblin__freivalds_element_stage(bool on) { atomic_store(&el_off, !on); }

/* ---- building the groups (the pass over B) ------------------------------------ */

/* The groups' level per unit ||a_i|| for a group with sum cn^2 r^2 = @p b2 and
 * sum cn |r| = @p c1 over @p w columns (||y|| taken as sqrt(b2), its mean). */
static double group_level(const fvp *f, double rel, double b2, double c1, double w) {
    double u = goblin__unit_roundoff(f->dt), dK = (double)f->K;
    double sc = u * sqrt((dK + 1) / 3) * sqrt(b2);
    double so = U64 * (sqrt((dK + w) / 3) * sqrt(b2) + sqrt(w / 3) * (1 + rel) * c1);
    return EL_SIGMAS * sqrt(sc * sc + so * so);
}

/* Each group g in [g0, g1) of @p row (column j at row[j - col0]): ys = sum x r and
 * ss = sum |x| |r| over its columns, with @p ra = |r|. */
FV_INLINE void group_sums_impl(const fvp *f, const double *row, int64_t g0, int64_t g1, int64_t col0,
                               const double *r, const double *ra, double *ys, double *ss) {
    for (int64_t gi = g0; gi < g1; gi++) {
        const fv_group *g = &f->grp[gi];
        const double *x = row + (g->j0 - col0), *rr = r + g->j0, *aa = ra + g->j0;
        int64_t w = g->w, j = 0;
        v4 y4 = {0}, s4 = {0};
        for (; j + 4 <= w; j += 4) {
            v4 xv = *(const v4u *)(x + j);
            v4 xa = (v4)((i4)xv & (i4){INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX});
            y4 += xv * *(const v4u *)(rr + j);
            s4 += xa * *(const v4u *)(aa + j);
        }
        double y = (y4[0] + y4[1]) + (y4[2] + y4[3]), sm = (s4[0] + s4[1]) + (s4[2] + s4[3]);
        for (; j < w; j++) {
            y += x[j] * rr[j];
            sm += fabs(x[j]) * aa[j];
        }
        ys[gi - g0] = y;
        ss[gi - g0] = sm;
    }
}
#if defined(FV_V3)
FV_V3 static void group_sums_v3(const fvp *f, const double *row, int64_t g0, int64_t g1, int64_t col0,
                                const double *r, const double *ra, double *ys, double *ss) {
    group_sums_impl(f, row, g0, g1, col0, r, ra, ys, ss);
}
#endif
static void group_sums_base(const fvp *f, const double *row, int64_t g0, int64_t g1, int64_t col0,
                            const double *r, const double *ra, double *ys, double *ss) {
    group_sums_impl(f, row, g0, g1, col0, r, ra, ys, ss);
}
static void group_sums(const fvp *f, const double *row, int64_t g0, int64_t g1, int64_t col0, double *ys,
                       double *ss) {
#if defined(FV_V3)
    if (f->v3) {
        group_sums_v3(f, row, g0, g1, col0, f->el_r, f->el_ra, ys, ss);
        return;
    }
#endif
    group_sums_base(f, row, g0, g1, col0, f->el_r, f->el_ra, ys, ss);
}

goblin_err goblin__fv_el_new(fvp *f, uint64_t seed) {
    int64_t N = f->N, K = f->K;
    f->el_on = false;
    if (K == 0 || N == 0 || atomic_load(&el_off)) return GOBLIN_OK;
    double rel, abs_c;
    goblin_op_contract(GOBLIN_OP_MATMUL, f->dt, K, &rel, &abs_c);
    if (!isfinite(rel)) return GOBLIN_OK;
    for (int32_t p = 0; p < f->np; p++)
        if (f->lv[p].n_bad) return GOBLIN_OK; /* such tiles are ESCALATEd anyway */
    /* groups[N], gp0[np + 1], scratch: 4 K (a block of A), K, 6 N (rows of B and C, sums), |r| (N), 2 N, r (N) */
    size_t bytes = (size_t)N * sizeof(fv_group) + ((size_t)f->np + 1) * sizeof(int64_t) +
                   ((size_t)5 * (size_t)K + 10 * (size_t)N) * sizeof(double);
    void *blk = goblin__alloc(bytes);
    if (!blk) return GOBLIN_ENOMEM;
    f->el_block = blk;
    f->grp = blk;
    f->gp0 = (int64_t *)(f->grp + N);
    f->el_buf = (double *)(f->gp0 + f->np + 1);
    f->el_ra = f->el_buf + 5 * K + 6 * N;
    f->el_r = f->el_ra + 3 * N;
    /* The groups' own secret weights: r_j = +-(3/4 + U/4), Philox draw
     * MAX_VECTORS * N + j of the stream "FREV" (beyond every vector's draws). |r_j| >=
     * 3/4 keeps the weakest column of a group near the others (the width follows the
     * smallest |r_j|); cancelling errors are the row check's business. */
    for (int64_t j = 0; j < N; j++) {
        uint32_t x[4];
        goblin__rng_draw(seed, 0, VERIFY_STREAM_FREIVALDS,
                         (uint64_t)GOBLIN_FREIVALDS_MAX_VECTORS * (uint64_t)N + (uint64_t)j, x);
        double mag = 0.75 + 0.25 * goblin__rng_u01(x, 53);
        f->el_r[j] = (x[2] & 1u) ? -mag : mag;
        f->el_ra[j] = mag;
    }
    const double *r = f->el_r;
    int64_t ng = 0;
    for (int32_t p = 0; p < f->np; p++) {
        f->gp0[p] = ng;
        for (int64_t j = f->cb[p]; j < f->cb[p + 1];) {
            fv_group *g = &f->grp[ng++];
            memset(g, 0, sizeof *g);
            g->j0 = j;
            double b2 = 0, c1 = 0, crit = INFINITY;
            for (; j < f->cb[p + 1]; j++) {
                double cn = sqrt(f->colsq[j]), ar = fabs(r[j]);
                double nb2 = b2 + f->colsq[j] * ar * ar, nc1 = c1 + cn * ar;
                /* zero columns (S_ij = 0) do not limit the width */
                double ncrit = cn > 0 ? fmin(crit, EL_LAMBDA * EL_RHO * rel * cn * ar) : crit;
                if (g->w > 0 && group_level(f, rel, nb2, nc1, (double)(g->w + 1)) > ncrit) break;
                b2 = nb2, c1 = nc1, crit = ncrit;
                g->w++;
            }
        }
    }
    f->gp0[f->np] = ng;
    f->n_grp = ng;
    f->n_gpad = (ng + EL_CHUNK - 1) / EL_CHUNK * EL_CHUNK;
    /* Y = B R per group, chunked: yc[c][k][EL_CHUNK] */
    uint64_t ny;
    if (__builtin_mul_overflow((uint64_t)f->n_gpad, (uint64_t)K, &ny) || ny > SIZE_MAX / sizeof(double))
        return GOBLIN_ENOMEM;
    f->yc = goblin__alloc((size_t)ny * sizeof(double));
    if (!f->yc) return GOBLIN_ENOMEM;
    memset(f->yc, 0, (size_t)ny * sizeof(double));
    double *row = f->el_buf + 4 * K;
    double *yn = row + N, *sn = yn + N, *smax = sn + N;
    memset(yn, 0, 3 * (size_t)N * sizeof(double));
    double *ys = f->el_ra + N, *ss = ys + N;
    for (int64_t k = 0; k < K; k++) {
        goblin__fv_load_row(f->dt, f->b0 + k * f->bs0 * (int64_t)f->es, f->bs1, N, row);
        group_sums(f, row, 0, ng, 0, ys, ss);
        for (int64_t gi = 0; gi < ng; gi++) {
            double y = ys[gi], sm = ss[gi];
            f->yc[(gi / EL_CHUNK) * K * EL_CHUNK + k * EL_CHUNK + gi % EL_CHUNK] = y;
            yn[gi] += y * y;
            sn[gi] += sm * sm;
            if (sm > smax[gi]) smax[gi] = sm;
        }
    }
    /* computed sums of nonnegative terms -> upper bounds (as the row check's grow) */
    double grow = 1 + 2 * gamma_n((double)N + (double)K + 4, U64);
    for (int64_t gi = 0; gi < ng; gi++) {
        fv_group *g = &f->grp[gi];
        double b2 = 0, c1 = 0, r1 = 0;
        for (int64_t j = g->j0; j < g->j0 + g->w; j++) {
            double ar = fabs(r[j]);
            b2 += f->colsq[j] * ar * ar;
            c1 += sqrt(f->colsq[j]) * ar;
            r1 += ar;
        }
        g->beta = sqrt(b2) * grow;
        g->cs1 = c1 * grow;
        g->r1 = r1 * grow;
        g->yn = sqrt(yn[gi]) * grow;
        g->sn = sqrt(sn[gi]) * grow;
        g->smax = smax[gi] * grow;
        if (g->w > f->el_wmax) f->el_wmax = g->w;
    }
    f->el_on = true;
    return GOBLIN_OK;
}

void goblin__fv_el_free(fvp *f) {
    goblin__free(f->yc);
    goblin__free(f->el_block);
    f->yc = NULL;
    f->el_block = NULL;
}

/* ---- the pass over A: Z = A Y ------------------------------------------------- */

FV_INLINE void pass_z_impl(fvp *f, const fv_range *rg) {
    int64_t K = f->K, nc = f->n_gpad / EL_CHUNK;
    double *ab = f->el_buf; /* [K][4]: four rows of A, interleaved */
    double *xr = f->el_buf + 4 * K;
    for (int64_t i0 = 0; i0 < rg->rows; i0 += 4) {
        int rows = rg->rows - i0 < 4 ? (int)(rg->rows - i0) : 4;
        for (int q = 0; q < 4; q++) {
            if (q < rows)
                goblin__fv_load_row(f->dt, f->a0 + (rg->row0 + i0 + q) * f->as0 * (int64_t)f->es, f->as1,
                                    K, xr);
            for (int64_t k = 0; k < K; k++) ab[k * 4 + q] = q < rows ? xr[k] : 0;
        }
        for (int64_t c = 0; c < nc; c++) {
            const double *y = f->yc + c * K * EL_CHUNK;
            v4 z00 = {0}, z01 = {0}, z10 = {0}, z11 = {0}, z20 = {0}, z21 = {0}, z30 = {0}, z31 = {0};
            for (int64_t k = 0; k < K; k++) {
                v4 y0 = *(const v4u *)(y + k * EL_CHUNK), y1 = *(const v4u *)(y + k * EL_CHUNK + 4);
                const double *a = ab + k * 4;
                z00 += a[0] * y0, z01 += a[0] * y1;
                z10 += a[1] * y0, z11 += a[1] * y1;
                z20 += a[2] * y0, z21 += a[2] * y1;
                z30 += a[3] * y0, z31 += a[3] * y1;
            }
            v4 zz[4][2] = {{z00, z01}, {z10, z11}, {z20, z21}, {z30, z31}};
            for (int q = 0; q < rows; q++) {
                double *out = rg->zg + (i0 + q) * f->n_gpad + c * EL_CHUNK;
                *(v4u *)out = zz[q][0];
                *(v4u *)(out + 4) = zz[q][1];
            }
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
FV_V3 static void pass_z_v3(fvp *f, const fv_range *rg) { pass_z_impl(f, rg); }
#else
#define pass_z_v3 pass_z_base
#endif
static void pass_z_base(fvp *f, const fv_range *rg) { pass_z_impl(f, rg); }

void goblin__fv_el_prepare(fvp *f, fv_range *rg) {
    if (!f->el_on || !rg->rows) return;
    if (f->v3) pass_z_v3(f, rg);
    else pass_z_base(f, rg);
}

/* ---- judging a tile's groups ---------------------------------------------------- */

/* Row @p i (range row) of the tile, columns [j0, j0 + w), against each element's own
 * bound, the products recomputed in long double (for an f64 claim, f64 arithmetic
 * would add an error as large as the contract itself): the largest ratio of
 * |c_hat - c| to the rigorous level (> 1: provably beyond the contract). */
static double recheck(fvp *f, const fv_range *rg, int64_t i, int64_t j0, int64_t w,
                      const double *crow, double rel, double abs_c) {
    int64_t K = f->K;
    double *ar = f->el_buf, *br = ar + K;
    long double *cs = (long double *)(((uintptr_t)(br + f->N) + 15) & ~(uintptr_t)15), *ss = cs + w;
    goblin__fv_load_row(f->dt, f->a0 + (rg->row0 + i) * f->as0 * (int64_t)f->es, f->as1, K, ar);
    for (int64_t j = 0; j < w; j++) cs[j] = ss[j] = 0;
    for (int64_t k = 0; k < K; k++) {
        goblin__fv_load_row(f->dt, f->b0 + (k * f->bs0 + j0 * f->bs1) * (int64_t)f->es, f->bs1, w, br);
        long double a = ar[k], aa = fabsl(a);
        for (int64_t j = 0; j < w; j++) {
            cs[j] += a * br[j];
            ss[j] += aa * fabsl((long double)br[j]);
        }
    }
    /* c and S: each within gamma_{K+1}(u_ld) S of the exact one (relative, for S) */
    double gk = gamma_n((double)K + 2, LDBL_EPSILON / 2), worst = 0;
    for (int64_t j = 0; j < w; j++) {
        double S = (double)ss[j] * (1 + 2 * gk) * (1 + 2 * U64);
        double level = (rel * S + abs_c + gk * S + ETA64 * ((double)K + 2)) * (1 + 8 * U64);
        double rr = ratio_of((double)fabsl((long double)crow[j] - cs[j]), level);
        if (!(crow[j] == crow[j])) rr = INFINITY;
        if (rr > worst) worst = rr;
    }
    return worst;
}

/* The counters of @p out (checked, above_tight, above_bound) stay those of the row
 * check; a REJECT here sets kind, reason and the worst row and ratio. */
void goblin__fv_el_judge(fvp *f, const fv_range *rg, int32_t p, const fv_tile *t,
                         goblin_verdict *out) {
    /* after an ACCEPT, or an ESCALATE between the row check's levels (which a provable
     * REJECT here settles) */
    if (!f->el_on || (out->kind != GOBLIN_VERDICT_ACCEPT && out->reason != GOBLIN_VERIFY_BETWEEN)) return;
    const fv_levels *L = &f->lv[p];
    int64_t col0 = f->cb[p], n = f->cb[p + 1] - col0, K = f->K;
    int64_t g0 = f->gp0[p], g1 = f->gp0[p + 1];
    double rel = L->rel_c, abs_c = L->abs_c, grow = L->grow, dK = (double)K;
    double u = goblin__unit_roundoff(f->dt);
    double *crow = f->el_buf + 4 * K + f->N; /* past recheck's a and b buffers */
    crow += 4 * f->el_wmax;
    double *gy = f->el_ra + f->N, *gs = gy + f->N;
    /* rechecks allowed: a quarter of the pass over A's work, at least 2^20 products */
    double budget = 0.25 * (double)t->rows * dK * (double)(g1 - g0) + (double)(1 << 20), spent = 0;
    double worst = 0;
    int64_t worst_row = -1, beyond = 0, flagged_left = 0;
    /* The fast path: per group, levels per unit ||a_i|| below both the accept level T
     * (T >= EL_SIGMAS sc = ft na) and the rigorous bound R (R >= rel na cs1), and below
     * qmax for q ((1 + rel) na cs1 + abs_c r1 <= qmax (1 + gw)): a group with d <= na ft
     * and q <= na fq + fb is neither beyond its bound nor flagged, which the full formulas
     * below (a few sqrt and divisions per group and row) would find too. (1 - 8 u64):
     * the rounding of these products against the full formulas'. NaN fails both tests. */
    double *fast = goblin__alloc((size_t)(g1 - g0 + 1) * 3 * sizeof(double));
    if (fast) {
        double st = EL_SIGMAS * u * sqrt((dK + 1) / 3);
        for (int64_t gi = g0; gi < g1; gi++) {
            const fv_group *g = &f->grp[gi];
            double *fg = fast + 3 * (gi - g0);
            fg[0] = fmin(st * g->beta, rel * g->cs1) * (1 - 8 * U64);
            fg[1] = (1 + rel) * g->cs1 * (1 - 8 * U64);
            fg[2] = abs_c * g->r1 * (1 - 8 * U64);
        }
    }
    for (int64_t i = 0; i < t->rows; i++) {
        goblin__fv_load_row(f->dt, t->c0 + i * t->cs0 * (int64_t)f->es, t->cs1, n, crow);
        double na = sqrt(rg->asq[i]) * grow, a1 = rg->a1[i];
        const double *zr = rg->zg + i * f->n_gpad;
        group_sums(f, crow, g0, g1, col0, gy, gs);
        for (int64_t gi = g0; gi < g1; gi++) {
            const fv_group *g = &f->grp[gi];
            double wv = gy[gi - g0], q = gs[gi - g0];
            if (fast) {
                const double *fg = fast + 3 * (gi - g0);
                if (fabs(wv - zr[gi]) <= na * fg[0] && q <= na * fg[1] + fg[2]) continue;
            }
            const double *cg = crow + (g->j0 - col0);
            double w = (double)g->w, gw = gamma_n(w + 2, U64);
            double Q = q * grow;
            double abs_own = ETA64 * (w * a1 * grow + dK + w + 4);
            /* an honest |C| |r| over the group is at most (1 + rel) S |r| + abs sum |r| */
            double qmax = ((1 + rel) * na * g->cs1 + abs_c * g->r1) * (1 + 8 * U64);
            double rq = q / (1 + gw) > qmax ? ratio_of(q / (1 + gw), qmax) : 0;
            double R = (rel * na * g->cs1 + abs_c * g->r1 + gamma_n(dK + 2, U64) * na * g->yn +
                        gamma_n(w + 1, U64) * (1 + gamma_n(dK + 2, U64)) * na * g->sn + gw * Q + abs_own) *
                       (1 + 16 * U64);
            double sc = u * sqrt((dK + 1) / 3) * na * g->beta;
            double so = U64 * (sqrt((dK + w) / 3) * na * g->yn + sqrt(w / 3) * (na * g->smax + Q));
            double T = EL_SIGMAS * sqrt(sc * sc + so * so) + abs_c * g->r1 + abs_own;
            if (T > R) T = R;
            double d = fabs(wv - zr[gi]);
            double rr = ratio_of(d, R);
            if (!(d == d)) rr = INFINITY;
            if (rq > rr) rr = rq;
            if (rr <= 1 && d > T) {
                /* above the accept level, not provably wrong: the exact element check */
                double cost = dK * w;
                if (spent + cost <= budget) {
                    spent += cost;
                    atomic_fetch_add(&el_rechecks, 1);
                    rr = recheck(f, rg, i, g->j0, g->w, cg, rel, abs_c);
                } else {
                    flagged_left++;
                }
            }
            if (rr > 1) {
                beyond++;
                if (rr > worst) {
                    worst = rr;
                    worst_row = i;
                }
            }
        }
    }
    goblin__free(fast);
    if (beyond) {
        out->kind = GOBLIN_VERDICT_REJECT;
        out->reason = GOBLIN_VERIFY_EXCEEDS_BOUND;
        if (worst > out->worst_ratio) {
            out->worst_ratio = worst;
            out->worst_index = worst_row;
        }
        if (worst > out->worst_tight_ratio) out->worst_tight_ratio = worst;
    } else if (flagged_left && out->kind == GOBLIN_VERDICT_ACCEPT) {
        out->kind = GOBLIN_VERDICT_ESCALATE;
        out->reason = GOBLIN_VERIFY_BETWEEN;
    }
}
