/* tests/unit/test_contract.c - no accept beyond the matmul contract (issue 18): a tile
 * with one element wrong by 1.5x its own contract bound gamma_{K+2}(u) S_ij
 * (S_ij = sum_k |a_ik| |b_kj|), or one such element in every row, is rejected
 * whatever K, the tile width, the column panels or the K-split; honest BLIS products
 * are accepted. The bound of each corrupted element is computed here in long double
 * from A and B (not with the library's contract function). */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <goblin/goblin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"

typedef struct mat {
    goblin_dtype dt;
    int64_t r, c;
    void *p;
} mat;

static mat mat_make(goblin_dtype dt, int64_t r, int64_t c) {
    mat m = {dt, r, c, calloc((size_t)(r * c), dt == GOBLIN_DTYPE_F32 ? 4 : 8)};
    cr_assert(m.p);
    return m;
}
static double mget(const mat *m, int64_t i, int64_t j) {
    return m->dt == GOBLIN_DTYPE_F32 ? ((float *)m->p)[i * m->c + j] : ((double *)m->p)[i * m->c + j];
}
static void mset(mat *m, int64_t i, int64_t j, long double x) {
    if (m->dt == GOBLIN_DTYPE_F32) ((float *)m->p)[i * m->c + j] = (float)x;
    else ((double *)m->p)[i * m->c + j] = (double)x;
}
static goblin_tensor view(const mat *m) {
    int64_t shape[2] = {m->r, m->c};
    return gt_tensor(m->dt, 2, shape, m->p);
}

/* dist 0: U[0, 1) (positive: partial sums grow, the honest errors are largest relative
 * to S), 1: U[-1, 1) */
static void fill(mat *m, int dist, uint64_t *s) {
    for (int64_t i = 0; i < m->r; i++)
        for (int64_t j = 0; j < m->c; j++) {
            double x = gt_rand(s);
            mset(m, i, j, dist ? 2 * x - 1 : x);
        }
}

/* C = A[:, k0:k0+kn] B[k0:k0+kn, :] on BLIS (the reference backend without it). */
static mat product(const mat *a, const mat *b, int64_t k0, int64_t kn) {
    mat as = mat_make(a->dt, a->r, kn), bs = mat_make(b->dt, kn, b->c);
    for (int64_t i = 0; i < a->r; i++)
        for (int64_t k = 0; k < kn; k++) mset(&as, i, k, mget(a, i, k0 + k));
    for (int64_t k = 0; k < kn; k++)
        for (int64_t j = 0; j < b->c; j++) mset(&bs, k, j, mget(b, k0 + k, j));
    goblin_tensor ins[2] = {view(&as), view(&bs)}, out;
    goblin_backend_kind be = goblin_backend_available(GOBLIN_BACKEND_BLIS) == GOBLIN_OK
                                 ? GOBLIN_BACKEND_BLIS
                                 : GOBLIN_BACKEND_REF;
    char msg[256];
    cr_assert_eq(gt_run1(GOBLIN_OP_MATMUL, ins, 2, NULL, 0, be, 1, &out, msg, sizeof msg), GOBLIN_OK, "%s",
                 msg);
    mat c = mat_make(a->dt, a->r, b->c);
    memcpy(c.p, out.data, (size_t)(a->r * b->c) * (a->dt == GOBLIN_DTYPE_F32 ? 4 : 8));
    goblin_buffer_free(out.data);
    free(as.p);
    free(bs.p);
    return c;
}

/* Element (i, j) of C (rows row0.., K-slice k0, kn; column j of B) set to the exact
 * product plus @p f times its contract bound gamma_{K+2}(u) S_ij, all in long double;
 * checks that the stored value is at least 0.999 f bounds away from the exact one. */
static void corrupt(mat *c, const mat *a, const mat *b, int64_t row0, int64_t i, int64_t j, int64_t jc,
                    int64_t k0, int64_t kn, double f, int sign) {
    long double exact = 0, S = 0;
    for (int64_t k = k0; k < k0 + kn; k++) {
        long double x = mget(a, row0 + i, k), y = mget(b, k, j);
        exact += x * y;
        S += fabsl(x) * fabsl(y);
    }
    long double u = a->dt == GOBLIN_DTYPE_F32 ? 0x1p-24L : 0x1p-53L, nu = (kn + 2) * u;
    long double bound = nu / (1 - nu) * S;
    long double want = exact + sign * (long double)f * bound;
    /* round away from the exact value so the error is not below f bounds */
    if (c->dt == GOBLIN_DTYPE_F32) {
        float x = (float)want;
        if (fabsl((long double)x - exact) < fabsl(want - exact)) x = nextafterf(x, sign > 0 ? INFINITY : -INFINITY);
        ((float *)c->p)[i * c->c + jc] = x;
    } else {
        double x = (double)want;
        if (fabsl((long double)x - exact) < fabsl(want - exact)) x = nextafter(x, sign > 0 ? INFINITY : -INFINITY);
        ((double *)c->p)[i * c->c + jc] = x;
    }
    long double got = mget(c, i, jc);
    cr_assert(fabsl(got - exact) >= 0.999L * (long double)f * bound, "injected %Lg of %Lg", got - exact, bound);
}

long long goblin__freivalds_rechecks(void); /* internal: groups recomputed exactly */

static const double factors[] = {1.5, 2, 5, 10};
static const char *dist_name[] = {"U[0,1)", "U[-1,1)"};

typedef struct tally {
    long long honest_rechecks;
    long honest, honest_escalated, honest_rejected, wrong, wrong_accepted, wrong_escalated;
} tally;

/* One tile check: goblin_verify_matmul (@p panels = 0) or the panels object with
 * @p panels column panels, the tile being panel @p cp (cols [c0, c1)) of rows
 * [row0, row0 + rows). */
typedef struct cfg {
    int64_t m, k, n;
    int panels;   /* 0: goblin_verify_matmul; else column panels of a panels object */
    int k_slices; /* the tile is slice 1 of this many (1: all of K) */
} cfg;

static goblin_verdict check(const mat *a, const mat *b, const mat *c, const cfg *g, int64_t k0, int64_t kn,
                            int64_t row0, int64_t rows, int cp, uint64_t seed) {
    goblin_freivalds_params p;
    goblin_freivalds_params_default(&p);
    p.seed = seed;
    p.k0 = k0;
    p.kn = kn;
    goblin_tensor ta = view(a), tb = view(b), tc = view(c);
    goblin_verdict v;
    if (!g->panels) {
        cr_assert_eq(goblin_verify_matmul(&ta, &tb, &tc, &p, &v), GOBLIN_OK);
        return v;
    }
    int64_t cb[5];
    for (int q = 0; q <= g->panels; q++) cb[q] = g->n * q / g->panels;
    goblin_freivalds_panels *fp = NULL;
    cr_assert_eq(goblin_freivalds_panels_new(&ta, &tb, g->panels, cb, &p, &fp), GOBLIN_OK);
    cr_assert_eq(goblin_freivalds_panels_check(fp, row0, rows, cp, &tc, &v), GOBLIN_OK);
    goblin_freivalds_panels_free(fp);
    return v;
}

/* For a configuration and dtype and data: honest tiles over @p seeds vectors, and
 * every corruption (one element, one per row; each factor) over two seeds. */
static void run_cfg(const cfg *g, goblin_dtype dt, int dist, int seeds, tally *t) {
    uint64_t s = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(g->m * 31 + g->k * 7 + g->n * 3 + dist * 5 + (int)dt +
                                                   g->panels * 11 + g->k_slices * 13);
    mat a = mat_make(dt, g->m, g->k), b = mat_make(dt, g->k, g->n);
    fill(&a, dist, &s);
    fill(&b, dist, &s);
    int64_t kn = g->k / g->k_slices, k0 = g->k_slices > 1 ? kn : 0;
    /* the tile: rows [row0, row0 + rows), panel cp of the panels (all of N without) */
    int np = g->panels ? g->panels : 1, cp = np - 1;
    int64_t row0 = g->panels ? g->m / 2 : 0, rows = g->panels ? g->m - g->m / 2 : g->m;
    int64_t c0 = g->n * cp / np, c1 = g->n * (cp + 1) / np;
    mat asub = mat_make(dt, rows, g->k), bsub = mat_make(dt, g->k, c1 - c0);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t k = 0; k < g->k; k++) mset(&asub, i, k, mget(&a, row0 + i, k));
    for (int64_t k = 0; k < g->k; k++)
        for (int64_t j = c0; j < c1; j++) mset(&bsub, k, j - c0, mget(&b, k, j));
    mat honest = product(&asub, &bsub, k0, kn);
    free(asub.p);
    free(bsub.p);
    mat c = mat_make(dt, rows, c1 - c0);
    size_t bytes = (size_t)(rows * (c1 - c0)) * (dt == GOBLIN_DTYPE_F32 ? 4 : 8);
    for (int sd = 0; sd < seeds; sd++) {
        long long r0 = goblin__freivalds_rechecks();
        goblin_verdict v = check(&a, &b, &honest, g, k0, kn, row0, rows, cp, gt_rand(&s) * 0x1p53);
        t->honest_rechecks += goblin__freivalds_rechecks() - r0;
        t->honest++;
        t->honest_escalated += v.kind == GOBLIN_VERDICT_ESCALATE;
        t->honest_rejected += v.kind == GOBLIN_VERDICT_REJECT;
        cr_expect_neq(v.kind, GOBLIN_VERDICT_REJECT, "honest %s %s %lldx%lldx%lld rejected",
                      goblin_dtype_name(dt), dist_name[dist], (long long)g->m, (long long)g->k,
                      (long long)g->n);
    }
    for (size_t fi = 0; fi < sizeof factors / sizeof *factors; fi++)
        for (int every = 0; every < 2; every++)
            for (int rep = 0; rep < 2; rep++) {
                memcpy(c.p, honest.p, bytes);
                int64_t i1 = every ? rows : 1;
                for (int64_t q = 0; q < i1; q++) {
                    int64_t i = every ? q : (int64_t)(gt_rand(&s) * (double)rows);
                    int64_t j = c0 + (int64_t)(gt_rand(&s) * (double)(c1 - c0));
                    /* column j of B is column j - c0 of the tile */
                    corrupt(&c, &a, &b, row0, i, j, j - c0, k0, kn, factors[fi], gt_rand(&s) < 0.5 ? -1 : 1);
                }
                goblin_verdict v = check(&a, &b, &c, g, k0, kn, row0, rows, cp, gt_rand(&s) * 0x1p53);
                t->wrong++;
                t->wrong_accepted += v.kind == GOBLIN_VERDICT_ACCEPT;
                t->wrong_escalated += v.kind == GOBLIN_VERDICT_ESCALATE;
                cr_expect_eq(v.kind, GOBLIN_VERDICT_REJECT,
                             "%s %s %lldx%lldx%lld (panels %d, slices %d): %s at %gx the bound: %s (%s)",
                             goblin_dtype_name(dt), dist_name[dist], (long long)g->m, (long long)g->k,
                             (long long)g->n, g->panels, g->k_slices, every ? "every row" : "one element",
                             factors[fi], goblin_verdict_name(v.kind), goblin_verify_reason_name(v.reason));
            }
    free(c.p);
    free(honest.p);
    free(a.p);
    free(b.p);
}

static void run_all(const cfg *cfgs, size_t n_cfg, int seeds, const char *what) {
    tally t = {0};
    static const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (size_t q = 0; q < n_cfg; q++)
        for (int d = 0; d < 2; d++)
            for (int dist = 0; dist < 2; dist++) run_cfg(&cfgs[q], dts[d], dist, seeds, &t);
    cr_log_info("contract (%s): %ld honest checks, %ld escalated, %ld rejected; %ld wrong tiles, %ld "
                "accepted, %ld escalated; %lld column groups of honest tiles recomputed exactly",
                what, t.honest, t.honest_escalated, t.honest_rejected, t.wrong, t.wrong_accepted,
                t.wrong_escalated, t.honest_rechecks);
    cr_assert_eq(t.honest_rejected, 0);
    cr_assert_leq(t.honest_escalated * 1000, t.honest, "honest escalations above 0.1%%");
    cr_assert_eq(t.wrong_accepted, 0);
    cr_assert_eq(t.wrong_escalated, 0);
}

/* A tile alone (goblin_verify_matmul), K and N in {64, 512, 2048}. */
Test(contract, one_tile_every_k_and_width) {
    int quick = gt_quick();
    cfg cfgs[9];
    int n_cfg = 0;
    static const int64_t ks[] = {64, 512, 2048}, ns[] = {64, 512, 2048};
    for (int x = 0; x < 3; x++)
        for (int y = 0; y < 3; y++) cfgs[n_cfg++] = (cfg){quick ? 8 : 24, ks[x], ns[y], 0, 1};
    run_all(cfgs, (size_t)n_cfg, quick ? 4 : 40, "tiles alone");
}

/* As the node checks: a panels object over the job with one panel of all N (a row
 * panel judged at once) or two column panels, and partial tiles of a K-split. */
Test(contract, panels_and_k_splits_as_the_node_cuts_jobs) {
    int quick = gt_quick();
    int64_t m = quick ? 16 : 48;
    cfg cfgs[] = {
        {m, 512, 2048, 1, 1},  /* one panel spanning N: the row panel check */
        {m, 2048, 2048, 2, 1}, /* two column panels of 1024 */
        {m, 2048, 512, 1, 2},  /* a K-slice of 1024 */
        {m, 4096, 512, 2, 4},  /* slices of 1024, two column panels */
    };
    run_all(cfgs, sizeof cfgs / sizeof *cfgs, quick ? 4 : 20, "panels, K-splits");
}
