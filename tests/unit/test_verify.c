/* tests/unit/test_verify.c - Freivalds' check, replica comparison, spot-checks and
 * sampling (libgoblin/verify.c).
 *
 * Honest products come from the BLIS backend (and the reference backend, and a
 * plain f64 loop rounded once) through the graph API; cheats are made from them.
 * Detection counts are logged (cr_log_info) so a run reports how many bad results
 * were caught and how many good ones were wrongly rejected. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <goblin/goblin.h>
#include "node/plan.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/random.h" /* only for the forged-result test: what a worker knowing the seed could do */
#include "testutil.h"

/* ---- data ----------------------------------------------------------------- */

static uint64_t sm_state;
static uint64_t splitmix(void) {
    uint64_t z = (sm_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double unif(void) { return (double)(splitmix() >> 11) * 0x1p-53; } /* [0, 1) */

enum { DIST_SIGNED = 0, DIST_POSITIVE = 1, DIST_WIDE = 2 };
static const char *dist_name[] = {"U[-1,1]", "U[0,1)", "wide-range"};

static double draw(int dist) {
    switch (dist) {
    case DIST_POSITIVE: return unif();
    case DIST_WIDE: return (2 * unif() - 1) * ldexp(1.0, (int)(splitmix() % 21) - 10);
    default: return 2 * unif() - 1;
    }
}

static goblin_tensor mat_new(goblin_dtype dt, int64_t r, int64_t c) {
    int64_t shape[2] = {r, c};
    size_t bytes = (size_t)(r * c > 0 ? r * c : 1) * goblin_dtype_size(dt);
    void *p = calloc(1, bytes);
    cr_assert_not_null(p);
    return gt_tensor(dt, 2, shape, p);
}

static double get(const goblin_tensor *t, int64_t i, int64_t j) {
    int64_t off = i * t->strides[0] + j * t->strides[1];
    return t->dtype == GOBLIN_DTYPE_F32 ? ((const float *)t->data)[off]
                                        : ((const double *)t->data)[off];
}
static void set(goblin_tensor *t, int64_t i, int64_t j, double v) {
    int64_t off = i * t->strides[0] + j * t->strides[1];
    if (t->dtype == GOBLIN_DTYPE_F32) ((float *)t->data)[off] = (float)v;
    else ((double *)t->data)[off] = v;
}

static void fill(goblin_tensor *t, int dist) {
    for (int64_t i = 0; i < t->shape[0]; i++)
        for (int64_t j = 0; j < t->shape[1]; j++) set(t, i, j, draw(dist));
}

static goblin_backend_kind fast_backend(void) {
    return goblin_backend_available(GOBLIN_BACKEND_BLIS) == GOBLIN_OK ? GOBLIN_BACKEND_BLIS
                                                                      : GOBLIN_BACKEND_REF;
}

/* C = A.B on a backend through the graph API; a library buffer (goblin_buffer_free). */
static goblin_tensor matmul_on(goblin_backend_kind be, const goblin_tensor *a,
                               const goblin_tensor *b) {
    goblin_tensor ins[2] = {*a, *b}, c;
    char msg[256];
    goblin_err e = gt_run1(GOBLIN_OP_MATMUL, ins, 2, NULL, 0, be, 1, &c, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_OK, "matmul: %s", msg);
    return c;
}

/* The product in f64 with one rounding to the dtype at the end (an independent oracle). */
static goblin_tensor matmul_loop(const goblin_tensor *a, const goblin_tensor *b) {
    goblin_tensor c = mat_new(a->dtype, a->shape[0], b->shape[1]);
    for (int64_t i = 0; i < a->shape[0]; i++)
        for (int64_t j = 0; j < b->shape[1]; j++) {
            double s = 0;
            for (int64_t l = 0; l < a->shape[1]; l++) s += get(a, i, l) * get(b, l, j);
            set(&c, i, j, s);
        }
    return c;
}

static goblin_tensor copy_of(const goblin_tensor *t) {
    goblin_tensor c = mat_new(t->dtype, t->shape[0], t->shape[1]);
    for (int64_t i = 0; i < t->shape[0]; i++)
        for (int64_t j = 0; j < t->shape[1]; j++) set(&c, i, j, get(t, i, j));
    return c;
}

static goblin_verdict fv_check(const goblin_tensor *a, const goblin_tensor *b,
                               const goblin_tensor *c, uint64_t seed) {
    goblin_freivalds_params p;
    goblin_freivalds_params_default(&p);
    p.seed = seed;
    goblin_verdict v;
    goblin_err e = goblin_verify_matmul(a, b, c, &p, &v);
    cr_assert_eq(e, GOBLIN_OK, "verify_matmul: %s", goblin_strerror(e));
    return v;
}

/* ---- honest products are accepted ----------------------------------------- */

typedef struct shape3 { int64_t m, k, n; int data_seeds, verify_seeds; } shape3;

Test(freivalds, honest_products_are_accepted) {
    static const shape3 shapes[] = {
        {1, 1, 1, 10, 10},    {2, 3, 4, 10, 10},     {7, 5, 3, 10, 10},  {17, 33, 9, 10, 10},
        {31, 64, 17, 8, 10},  {64, 64, 64, 4, 10},   {128, 96, 200, 3, 10},
        {100, 300, 50, 3, 10}, {256, 512, 256, 2, 10}, {512, 2048, 512, 1, 12},
    };
    static const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    goblin_backend_kind be = fast_backend();
    int64_t total = 0, accepted = 0, rejected = 0;
    for (size_t d = 0; d < 2; d++)
        for (int dist = 0; dist < 3; dist++) {
            double worst_tight = 0, worst_bound = 0;
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                const shape3 *sh = &shapes[s];
                double shape_tight = 0;
                int n_data = gt_quick() && sh->m * sh->k * sh->n > 200000 ? 0 : sh->data_seeds;
                for (int ds = 0; ds < n_data; ds++) {
                    sm_state = 1000003u * (uint64_t)(s + 1) + 7919u * (uint64_t)ds + 31u * (uint64_t)dist + d;
                    goblin_tensor a = mat_new(dts[d], sh->m, sh->k);
                    goblin_tensor b = mat_new(dts[d], sh->k, sh->n);
                    fill(&a, dist);
                    fill(&b, dist);
                    goblin_tensor c = matmul_on(be, &a, &b);
                    for (int vs = 0; vs < sh->verify_seeds; vs++) {
                        goblin_verdict v = fv_check(&a, &b, &c, splitmix());
                        total++;
                        accepted += v.kind == GOBLIN_VERDICT_ACCEPT;
                        rejected += v.kind == GOBLIN_VERDICT_REJECT;
                        cr_expect_eq(v.kind, GOBLIN_VERDICT_ACCEPT,
                                     "%s %s %lldx%lldx%lld: %s (%s), tight ratio %.3g, bound ratio %.3g",
                                     goblin_dtype_name(dts[d]), dist_name[dist], (long long)sh->m,
                                     (long long)sh->k, (long long)sh->n,
                                     goblin_verdict_name(v.kind),
                                     goblin_verify_reason_name(v.reason), v.worst_tight_ratio,
                                     v.worst_ratio);
                        cr_assert_eq(v.checked, sh->m * 4); /* 4 vectors by default */
                        if (v.worst_tight_ratio > worst_tight) worst_tight = v.worst_tight_ratio;
                        if (v.worst_tight_ratio > shape_tight) shape_tight = v.worst_tight_ratio;
                        if (v.worst_ratio > worst_bound) worst_bound = v.worst_ratio;
                    }
                    goblin_buffer_free(c.data);
                    free(a.data);
                    free(b.data);
                }
                if (sh->m >= 256)
                    cr_log_info("freivalds honest %s %s %lldx%lldx%lld: largest discrepancy = "
                                "%.3g of the accept level",
                                goblin_dtype_name(dts[d]), dist_name[dist], (long long)sh->m,
                                (long long)sh->k, (long long)sh->n, shape_tight);
            }
            cr_log_info("freivalds honest %s %s: largest discrepancy = %.3g of the accept level, "
                        "%.3g of the rigorous bound",
                        goblin_dtype_name(dts[d]), dist_name[dist], worst_tight, worst_bound);
        }
    cr_log_info("freivalds honest (%s backend): %lld checks, %lld accepted, %lld escalated, "
                "%lld wrongly rejected",
                goblin_backend_name(be), (long long)total, (long long)accepted,
                (long long)(total - accepted - rejected), (long long)rejected);
    cr_assert_eq(accepted, total);
}

Test(freivalds, honest_from_reference_backend_and_exact_loop) {
    static const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    int64_t total = 0;
    for (size_t d = 0; d < 2; d++)
        for (int dist = 0; dist < 3; dist++) {
            sm_state = 99 + d * 3 + (uint64_t)dist;
            goblin_tensor a = mat_new(dts[d], 96, 160), b = mat_new(dts[d], 160, 72);
            fill(&a, dist);
            fill(&b, dist);
            goblin_tensor cr = matmul_on(GOBLIN_BACKEND_REF, &a, &b);
            goblin_tensor cl = matmul_loop(&a, &b);
            for (int vs = 0; vs < 20; vs++) {
                goblin_verdict v1 = fv_check(&a, &b, &cr, splitmix());
                goblin_verdict v2 = fv_check(&a, &b, &cl, splitmix());
                cr_assert_eq(v1.kind, GOBLIN_VERDICT_ACCEPT, "ref %s: %s", dist_name[dist],
                             goblin_verify_reason_name(v1.reason));
                cr_assert_eq(v2.kind, GOBLIN_VERDICT_ACCEPT, "loop %s: %s", dist_name[dist],
                             goblin_verify_reason_name(v2.reason));
                total += 2;
            }
            goblin_buffer_free(cr.data);
            free(cl.data);
            free(a.data);
            free(b.data);
        }
    cr_log_info("freivalds honest (ref backend, exact loop): %lld checks, all accepted",
                (long long)total);
}

/* ---- cheats are caught ------------------------------------------------------ */

enum {
    CHEAT_ELEMENT,  /* one element times (1 + 1e-3) */
    CHEAT_SCALE,    /* all of C times (1 + 1e-3) */
    CHEAT_NAN,      /* one NaN */
    CHEAT_ROW_SWAP, /* two rows exchanged */
    CHEAT_OTHER,    /* the result of a different tile (other inputs, same shape) */
    CHEAT_ZEROS,    /* all zeros */
    CHEAT_TRANSPOSE,/* C transposed (square C) */
    CHEAT_CANCEL,   /* +d and -d in two elements of one row: the +-1-vector worst case */
    CHEAT_COUNT
};
static const char *cheat_name[] = {"element*(1+1e-3)", "scale*(1+1e-3)", "nan", "row-swap",
                                   "other-tile", "zeros", "transposed", "cancelling pair"};

/* |a_i| . |b_j|: the scale of element (i, j) in the matmul contract. */
static double abs_dot(const goblin_tensor *a, const goblin_tensor *b, int64_t i, int64_t j) {
    double s = 0;
    for (int64_t l = 0; l < a->shape[1]; l++) s += fabs(get(a, i, l) * get(b, l, j));
    return s;
}

typedef struct cheat_cfg {
    goblin_dtype dt;
    int dist;
    int64_t m, k, n;
    int bases, trials_per_base;
    /* The single-element 1e-3 change can lie inside the matmul contract itself (f32,
     * zero-mean data, long K: |c_ij| << sum |a||b|). Such a change is an acceptable
     * result by the op's own definition, so it is not required to be caught there;
     * the test then checks that every miss was indeed inside the contract. */
    bool element_may_be_within_contract;
    bool subtle_must_reject; /* f64: even the 1e-3 cheats are above the rigorous bound */
} cheat_cfg;

static void run_cheats(const cheat_cfg *cfg_full) {
    cheat_cfg quick = *cfg_full;
    if (gt_quick()) { /* sanitizer build: same cheats, fewer trials */
        quick.bases = 1;
        quick.trials_per_base = cfg_full->trials_per_base / 10 > 5 ? cfg_full->trials_per_base / 10 : 5;
    }
    const cheat_cfg *cfg = &quick;
    goblin_backend_kind be = fast_backend();
    int64_t caught[CHEAT_COUNT] = {0}, rejected[CHEAT_COUNT] = {0}, tried[CHEAT_COUNT] = {0};
    int64_t within_contract_misses = 0;
    int64_t m = cfg->m, k = cfg->k, n = cfg->n;
    double rel_c, abs_c;
    goblin_op_contract(GOBLIN_OP_MATMUL, cfg->dt, k, &rel_c, &abs_c);
    for (int base = 0; base < cfg->bases; base++) {
        sm_state = 0xc0ffee + (uint64_t)base * 7777 + (uint64_t)cfg->dist * 13 + (uint64_t)cfg->dt;
        goblin_tensor a = mat_new(cfg->dt, m, k), b = mat_new(cfg->dt, k, n);
        goblin_tensor a2 = mat_new(cfg->dt, m, k);
        fill(&a, cfg->dist);
        fill(&b, cfg->dist);
        fill(&a2, cfg->dist);
        goblin_tensor c = matmul_on(be, &a, &b);
        goblin_tensor other = matmul_on(be, &a2, &b);
        double rms = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) rms += get(&c, i, j) * get(&c, i, j);
        rms = sqrt(rms / (double)(m * n));
        goblin_tensor w = mat_new(cfg->dt, m, n);
        for (int cheat = 0; cheat < CHEAT_COUNT; cheat++) {
            if (cheat == CHEAT_TRANSPOSE && m != n) continue;
            if (cheat == CHEAT_ROW_SWAP && m < 2) continue;
            for (int t = 0; t < cfg->trials_per_base; t++) {
                int64_t i = (int64_t)(splitmix() % (uint64_t)m), j = (int64_t)(splitmix() % (uint64_t)n);
                memcpy(w.data, c.data, (size_t)(m * n) * goblin_dtype_size(cfg->dt));
                bool inside_contract = false;
                switch (cheat) {
                case CHEAT_ELEMENT: {
                    /* a cheater changing a near-zero element changes nothing that
                     * matters; pick one of at least the typical magnitude */
                    while (fabs(get(&c, i, j)) < rms) {
                        i = (int64_t)(splitmix() % (uint64_t)m);
                        j = (int64_t)(splitmix() % (uint64_t)n);
                    }
                    double old = get(&c, i, j);
                    set(&w, i, j, old * (1 + 1e-3));
                    double delta = fabs(get(&w, i, j) - old);
                    inside_contract = delta <= rel_c * abs_dot(&a, &b, i, j) + abs_c;
                    break;
                }
                case CHEAT_SCALE:
                    for (int64_t x = 0; x < m; x++)
                        for (int64_t y = 0; y < n; y++) set(&w, x, y, get(&c, x, y) * (1 + 1e-3));
                    break;
                case CHEAT_NAN: set(&w, i, j, NAN); break;
                case CHEAT_ROW_SWAP: {
                    int64_t i2 = (i + 1 + (int64_t)(splitmix() % (uint64_t)(m - 1))) % m;
                    for (int64_t y = 0; y < n; y++) {
                        set(&w, i, y, get(&c, i2, y));
                        set(&w, i2, y, get(&c, i, y));
                    }
                    break;
                }
                case CHEAT_OTHER:
                    memcpy(w.data, other.data, (size_t)(m * n) * goblin_dtype_size(cfg->dt));
                    break;
                case CHEAT_ZEROS: memset(w.data, 0, (size_t)(m * n) * goblin_dtype_size(cfg->dt)); break;
                case CHEAT_TRANSPOSE:
                    for (int64_t x = 0; x < m; x++)
                        for (int64_t y = 0; y < n; y++) set(&w, x, y, get(&c, y, x));
                    break;
                case CHEAT_CANCEL: {
                    if (n < 2) continue;
                    int64_t j2 = (j + 1 + (int64_t)(splitmix() % (uint64_t)(n - 1))) % n;
                    /* 1% of the element's contract scale sum |a||b| (80 times the
                     * contract's tolerance at K = 2048 in f32): small for a cheat, yet
                     * +-1 vectors would miss it half the time */
                    double dl = 1e-2 * abs_dot(&a, &b, i, j);
                    set(&w, i, j, get(&c, i, j) + dl);
                    set(&w, i, j2, get(&c, i, j2) - dl);
                    break;
                }
                }
                goblin_verdict v = fv_check(&a, &b, &w, splitmix());
                tried[cheat]++;
                bool hit = v.kind != GOBLIN_VERDICT_ACCEPT;
                caught[cheat] += hit;
                rejected[cheat] += v.kind == GOBLIN_VERDICT_REJECT;
                if (!hit && cheat == CHEAT_ELEMENT && cfg->element_may_be_within_contract) {
                    cr_assert(inside_contract,
                              "an element changed beyond the matmul contract was accepted");
                    within_contract_misses++;
                }
            }
        }
        free(w.data);
        free(a.data);
        free(a2.data);
        free(b.data);
        goblin_buffer_free(c.data);
        goblin_buffer_free(other.data);
    }
    for (int cheat = 0; cheat < CHEAT_COUNT; cheat++) {
        if (!tried[cheat]) continue;
        cr_log_info("freivalds cheat %s %s %lldx%lldx%lld %-17s: caught %lld/%lld (%lld rejected, "
                    "%lld escalated)",
                    goblin_dtype_name(cfg->dt), dist_name[cfg->dist], (long long)m, (long long)k,
                    (long long)n, cheat_name[cheat], (long long)caught[cheat],
                    (long long)tried[cheat], (long long)rejected[cheat],
                    (long long)(caught[cheat] - rejected[cheat]));
        bool gross = cheat == CHEAT_NAN || cheat == CHEAT_ROW_SWAP || cheat == CHEAT_OTHER ||
                     cheat == CHEAT_ZEROS || cheat == CHEAT_TRANSPOSE;
        if (gross || cfg->subtle_must_reject)
            cr_assert_eq(rejected[cheat], tried[cheat], "%s: not all rejected", cheat_name[cheat]);
        if (!(cheat == CHEAT_ELEMENT && cfg->element_may_be_within_contract))
            cr_assert_eq(caught[cheat], tried[cheat], "%s: not all caught", cheat_name[cheat]);
    }
    if (cfg->element_may_be_within_contract)
        cr_log_info("freivalds cheat %s %s: %lld single-element changes missed, every one within "
                    "the matmul contract (|delta| <= gamma_{K+2} sum|a||b|)",
                    goblin_dtype_name(cfg->dt), dist_name[cfg->dist],
                    (long long)within_contract_misses);
}

Test(freivalds_cheats, f64_signed_512x2048x512) {
    cheat_cfg c = {GOBLIN_DTYPE_F64, DIST_SIGNED, 512, 2048, 512, 2, 40, false, true};
    run_cheats(&c);
}

Test(freivalds_cheats, f64_positive_128x256x128) {
    cheat_cfg c = {GOBLIN_DTYPE_F64, DIST_POSITIVE, 128, 256, 128, 4, 50, false, true};
    run_cheats(&c);
}

Test(freivalds_cheats, f32_positive_512x2048x512) {
    cheat_cfg c = {GOBLIN_DTYPE_F32, DIST_POSITIVE, 512, 2048, 512, 2, 40, false, false};
    run_cheats(&c);
}

Test(freivalds_cheats, f32_signed_64x64x64) {
    cheat_cfg c = {GOBLIN_DTYPE_F32, DIST_SIGNED, 64, 64, 64, 4, 50, false, false};
    run_cheats(&c);
}

Test(freivalds_cheats, f32_signed_512x2048x512) {
    cheat_cfg c = {GOBLIN_DTYPE_F32, DIST_SIGNED, 512, 2048, 512, 2, 40, true, false};
    run_cheats(&c);
}

Test(freivalds_cheats, f32_nonsquare_37x300x53) {
    cheat_cfg c = {GOBLIN_DTYPE_F32, DIST_POSITIVE, 37, 300, 53, 4, 50, false, false};
    run_cheats(&c);
}

/* ---- layouts, split-K, edge cases -------------------------------------------- */

Test(freivalds, strided_operands_and_subtile_of_c) {
    sm_state = 5;
    goblin_dtype dt = GOBLIN_DTYPE_F32;
    int64_t m = 40, k = 70, n = 30;
    /* A stored transposed (column-major view), B with reversed rows (negative
     * stride), C a block inside a wider buffer */
    goblin_tensor at = mat_new(dt, k, m), b = mat_new(dt, k, n);
    fill(&at, DIST_SIGNED);
    fill(&b, DIST_SIGNED);
    goblin_tensor a = at;
    a.shape[0] = m;
    a.shape[1] = k;
    a.strides[0] = 1;
    a.strides[1] = m;
    goblin_tensor brev = b; /* brev[l] = b[k-1-l] */
    brev.data = (float *)b.data + (k - 1) * n;
    brev.strides[0] = -n;
    goblin_tensor ac = copy_of(&a), bc = copy_of(&brev);
    goblin_tensor c = matmul_loop(&ac, &bc);
    goblin_tensor wide = mat_new(dt, m, n + 9);
    goblin_tensor cv = wide;
    cv.shape[1] = n;
    cv.data = (float *)wide.data + 4;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) set(&cv, i, j, get(&c, i, j));
    for (int s = 0; s < 20; s++) {
        goblin_verdict v = fv_check(&a, &brev, &cv, splitmix());
        cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT, "%s", goblin_verify_reason_name(v.reason));
    }
    /* the same claim against B in its stored order is wrong */
    goblin_verdict v = fv_check(&a, &b, &cv, 3);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    set(&cv, 3, 7, get(&cv, 3, 7) + 0.01);
    v = fv_check(&a, &brev, &cv, 4);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.worst_index, 3);
    free(at.data);
    free(b.data);
    free(ac.data);
    free(bc.data);
    free(c.data);
    free(wide.data);
}

/* The same logical matrix in another layout (@p layout 1: column-major; 2: rows
 * reversed (negative stride) and every other column of a wider buffer). The caller
 * frees *storage. */
static goblin_tensor relayout(const goblin_tensor *t, int layout, void **storage) {
    int64_t r = t->shape[0], c = t->shape[1];
    goblin_tensor v = mat_new(t->dtype, r, layout == 2 ? 2 * c : c);
    *storage = v.data;
    v.shape[1] = c;
    if (layout == 1) {
        v.strides[0] = 1;
        v.strides[1] = r;
    } else if (layout == 2) {
        v.data = (char *)v.data + (size_t)((r - 1) * 2 * c) * goblin_dtype_size(t->dtype);
        v.strides[0] = -2 * c;
        v.strides[1] = 2;
    }
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) set(&v, i, j, get(t, i, j));
    return v;
}

static goblin_verdict fv_check_nv(const goblin_tensor *a, const goblin_tensor *b,
                                  const goblin_tensor *c, uint64_t seed, int32_t vectors) {
    goblin_freivalds_params p;
    goblin_freivalds_params_default(&p);
    p.seed = seed;
    p.vectors = vectors;
    goblin_verdict v;
    goblin_err e = goblin_verify_matmul(a, b, c, &p, &v);
    cr_assert_eq(e, GOBLIN_OK, "verify_matmul: %s", goblin_strerror(e));
    return v;
}

/* The check reads its operands in blocks of rows and chunks of columns (f64 rows
 * with unit stride in place, all else converted), four vectors per pass: shapes
 * that leave partial blocks and chunks, every layout (the verdict, down to the
 * ratios, must not depend on it), several vector counts, and wrong, NaN and
 * masked elements at the edges of blocks and chunks. */
Test(freivalds, blocked_passes_any_layout_and_vector_count) {
    static const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    static const int32_t nvs[] = {1, 4, 5, 16};
    int64_t m = 259, k = 517, n = 301;
    for (size_t d = 0; d < 2; d++) {
        sm_state = 21 + d;
        goblin_tensor a = mat_new(dts[d], m, k), b = mat_new(dts[d], k, n);
        fill(&a, DIST_SIGNED);
        fill(&b, DIST_SIGNED);
        goblin_tensor c = matmul_loop(&a, &b);
        void *st[3][3] = {{NULL}};
        goblin_tensor L[3][3]; /* [layout][a, b, c] */
        for (int l = 0; l < 3; l++) {
            L[l][0] = l ? relayout(&a, l, &st[l][0]) : a;
            L[l][1] = l ? relayout(&b, l, &st[l][1]) : b;
            L[l][2] = l ? relayout(&c, l, &st[l][2]) : c;
        }
        for (size_t s = 0; s < sizeof nvs / sizeof *nvs; s++) {
            goblin_verdict ref = fv_check_nv(&a, &b, &c, 77 + s, nvs[s]);
            cr_assert_eq(ref.kind, GOBLIN_VERDICT_ACCEPT, "%s %d vectors: %s",
                         goblin_dtype_name(dts[d]), nvs[s], goblin_verify_reason_name(ref.reason));
            cr_assert_eq(ref.checked, m * nvs[s]);
            for (int l = 1; l < 3; l++) {
                goblin_verdict v = fv_check_nv(&L[l][0], &L[l][1], &L[l][2], 77 + s, nvs[s]);
                cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
                cr_assert_eq(v.checked, ref.checked);
                cr_assert_eq(v.worst_ratio, ref.worst_ratio, "layout %d", l);
                cr_assert_eq(v.worst_tight_ratio, ref.worst_tight_ratio, "layout %d", l);
                cr_assert_eq(v.worst_index, ref.worst_index);
            }
        }
        /* one wrong element: last row and column, a chunk's first and last column */
        static const int64_t at[][2] = {{258, 300}, {0, 256}, {130, 255}, {257, 0}};
        for (size_t w = 0; w < sizeof at / sizeof *at; w++)
            for (int l = 0; l < 3; l++) {
                goblin_tensor *cl = &L[l][2];
                double keep = get(cl, at[w][0], at[w][1]);
                set(cl, at[w][0], at[w][1], keep + 100);
                goblin_verdict v = fv_check_nv(&L[l][0], &L[l][1], cl, 5 + w, 4);
                cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT, "layout %d, (%lld, %lld)", l,
                             (long long)at[w][0], (long long)at[w][1]);
                cr_assert_eq(v.reason, GOBLIN_VERIFY_EXCEEDS_BOUND);
                cr_assert_eq(v.worst_index, at[w][0]);
                set(cl, at[w][0], at[w][1], NAN); /* NaN where the honest value is finite */
                v = fv_check_nv(&L[l][0], &L[l][1], cl, 5 + w, 4);
                cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
                cr_assert_eq(v.reason, GOBLIN_VERIFY_NONFINITE);
                cr_assert_eq(v.nonfinite, 1);
                cr_assert_eq(v.worst_index, at[w][0]);
                set(cl, at[w][0], at[w][1], keep);
            }
        /* +inf in B's column 290 (second chunk): that column of C is masked, every row
         * of C holds a NaN/inf there, the rest is checked */
        goblin_tensor c2 = (set(&b, 3, 290, INFINITY), matmul_loop(&a, &b));
        goblin_verdict ref = fv_check_nv(&a, &b, &c2, 9, 5);
        cr_assert_eq(ref.kind, GOBLIN_VERDICT_ESCALATE);
        cr_assert_eq(ref.reason, GOBLIN_VERIFY_UNCHECKABLE);
        cr_assert_eq(ref.unchecked, m);
        cr_assert_eq(ref.checked, m * 5);
        for (int l = 1; l < 3; l++) {
            set(&L[l][1], 3, 290, INFINITY);
            goblin_tensor cv = relayout(&c2, l, &st[0][0]);
            goblin_verdict v = fv_check_nv(&L[l][0], &L[l][1], &cv, 9, 5);
            cr_assert_eq(v.kind, ref.kind);
            cr_assert_eq(v.unchecked, ref.unchecked);
            cr_assert_eq(v.worst_ratio, ref.worst_ratio);
            set(&cv, 100, 17, get(&cv, 100, 17) - 100); /* still caught outside the mask */
            v = fv_check_nv(&L[l][0], &L[l][1], &cv, 9, 5);
            cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
            cr_assert_eq(v.worst_index, 100);
            free(st[0][0]);
            st[0][0] = NULL;
        }
        free(c2.data);
        for (int l = 1; l < 3; l++)
            for (int x = 0; x < 3; x++) free(st[l][x]);
        free(a.data);
        free(b.data);
        free(c.data);
    }
}

Test(freivalds, split_k_partial_tiles) {
    goblin_backend_kind be = fast_backend();
    static const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (size_t d = 0; d < 2; d++) {
        sm_state = 77 + d;
        int64_t m = 64, K = 1000, n = 48;
        goblin_tensor a = mat_new(dts[d], m, K), b = mat_new(dts[d], K, n);
        fill(&a, DIST_SIGNED);
        fill(&b, DIST_SIGNED);
        static const int64_t cuts[][2] = {{0, 300}, {300, 400}, {700, 300}, {999, 1}, {0, 1000}};
        for (size_t q = 0; q < sizeof cuts / sizeof *cuts; q++) {
            int64_t k0 = cuts[q][0], kn = cuts[q][1];
            size_t es = goblin_dtype_size(dts[d]);
            goblin_tensor as = a, bs = b; /* views of the slice */
            as.shape[1] = kn;
            as.data = (char *)a.data + (size_t)k0 * es;
            bs.shape[0] = kn;
            bs.data = (char *)b.data + (size_t)(k0 * n) * es;
            goblin_tensor cp = matmul_on(be, &as, &bs);
            goblin_freivalds_params p;
            goblin_freivalds_params_default(&p);
            p.k0 = k0;
            p.kn = kn;
            for (int s = 0; s < 10; s++) {
                p.seed = splitmix();
                goblin_verdict v;
                cr_assert_eq(goblin_verify_matmul(&a, &b, &cp, &p, &v), GOBLIN_OK);
                cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT, "slice [%lld, +%lld): %s",
                             (long long)k0, (long long)kn, goblin_verify_reason_name(v.reason));
            }
            if (kn < K) {
                /* the partial sum claimed as the whole product, or for the neighbouring slice */
                goblin_freivalds_params whole = p;
                whole.k0 = 0;
                whole.kn = -1;
                goblin_verdict v;
                cr_assert_eq(goblin_verify_matmul(&a, &b, &cp, &whole, &v), GOBLIN_OK);
                cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
                goblin_freivalds_params shifted = p;
                shifted.k0 = k0 > 0 ? k0 - 1 : k0 + 1;
                cr_assert_eq(goblin_verify_matmul(&a, &b, &cp, &shifted, &v), GOBLIN_OK);
                cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
            }
            goblin_buffer_free(cp.data);
        }
        /* kn = -1 runs to the end of K */
        goblin_freivalds_params p;
        goblin_freivalds_params_default(&p);
        p.k0 = 400;
        goblin_tensor as = a, bs = b;
        size_t es = goblin_dtype_size(dts[d]);
        as.shape[1] = 600;
        as.data = (char *)a.data + 400 * es;
        bs.shape[0] = 600;
        bs.data = (char *)b.data + (size_t)(400 * n) * es;
        goblin_tensor cp = matmul_on(be, &as, &bs);
        goblin_verdict v;
        cr_assert_eq(goblin_verify_matmul(&a, &b, &cp, &p, &v), GOBLIN_OK);
        cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
        goblin_buffer_free(cp.data);
        free(a.data);
        free(b.data);
    }
}

Test(freivalds, empty_and_k_zero) {
    goblin_tensor a = mat_new(GOBLIN_DTYPE_F64, 0, 5), b = mat_new(GOBLIN_DTYPE_F64, 5, 4);
    goblin_tensor c = mat_new(GOBLIN_DTYPE_F64, 0, 4);
    goblin_verdict v = fv_check(&a, &b, &c, 1);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    cr_assert_eq(v.checked, 0);
    free(a.data);
    free(b.data);
    free(c.data);
    /* K = 0: the honest product is all zeros */
    a = mat_new(GOBLIN_DTYPE_F32, 3, 0);
    b = mat_new(GOBLIN_DTYPE_F32, 0, 4);
    c = mat_new(GOBLIN_DTYPE_F32, 3, 4);
    v = fv_check(&a, &b, &c, 1);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    set(&c, 1, 2, 1e-30);
    v = fv_check(&a, &b, &c, 1);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    free(a.data);
    free(b.data);
    free(c.data);
}

Test(freivalds, nonfinite_inputs_and_overflow) {
    goblin_backend_kind be = fast_backend();
    sm_state = 11;
    int64_t m = 20, k = 30, n = 25;
    goblin_tensor a = mat_new(GOBLIN_DTYPE_F32, m, k), b = mat_new(GOBLIN_DTYPE_F32, k, n);
    fill(&a, DIST_SIGNED);
    fill(&b, DIST_SIGNED);
    /* A NaN in row 3 of A: the honest row 3 of C is NaN and cannot be checked; the
     * other rows still are. */
    set(&a, 3, 7, NAN);
    goblin_tensor c = matmul_on(be, &a, &b);
    cr_assert(isnan(get(&c, 3, 0)));
    goblin_verdict v = fv_check(&a, &b, &c, 9);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ESCALATE);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_UNCHECKABLE);
    cr_assert_eq(v.unchecked, n);
    cr_assert_eq(v.checked, (m - 1) * 4);
    goblin_tensor w = copy_of(&c);
    set(&w, 5, 5, get(&w, 5, 5) + 0.5); /* a wrong value in a checkable row */
    v = fv_check(&a, &b, &w, 9);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    set(&w, 5, 5, get(&c, 5, 5));
    set(&w, 6, 1, NAN); /* a NaN where the honest value is finite */
    v = fv_check(&a, &b, &w, 9);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_NONFINITE);
    cr_assert_eq(v.nonfinite, 1);
    free(w.data);
    goblin_buffer_free(c.data);

    /* +inf in column 4 of B: column 4 of C unchecked, the rest checked */
    set(&a, 3, 7, 0.25);
    set(&b, 2, 4, INFINITY);
    c = matmul_on(be, &a, &b);
    v = fv_check(&a, &b, &c, 10);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ESCALATE);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_UNCHECKABLE);
    cr_assert_eq(v.unchecked, m);
    w = copy_of(&c);
    set(&w, 0, 0, get(&w, 0, 0) * 1.01 + 0.01);
    v = fv_check(&a, &b, &w, 10);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    free(w.data);
    goblin_buffer_free(c.data);

    /* finite inputs whose honest product overflows f32: inf is honest there */
    set(&b, 2, 4, 0.5);
    for (int64_t l = 0; l < k; l++) {
        set(&a, 0, l, 1e20);
        set(&b, l, 0, 1e20);
    }
    c = matmul_on(be, &a, &b);
    cr_assert(isinf(get(&c, 0, 0)));
    v = fv_check(&a, &b, &c, 12);
    cr_assert_neq(v.kind, GOBLIN_VERDICT_REJECT, "an honest overflow was rejected");
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ESCALATE);
    goblin_buffer_free(c.data);
    free(a.data);
    free(b.data);
}

Test(freivalds, absurd_magnitudes_are_rejected) {
    sm_state = 12;
    goblin_tensor a = mat_new(GOBLIN_DTYPE_F64, 8, 8), b = mat_new(GOBLIN_DTYPE_F64, 8, 8);
    fill(&a, DIST_SIGNED);
    fill(&b, DIST_SIGNED);
    goblin_tensor c = matmul_loop(&a, &b);
    set(&c, 2, 2, 1e300);
    set(&c, 2, 3, -1e300);
    set(&c, 2, 4, 1e308);
    goblin_verdict v = fv_check(&a, &b, &c, 1);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.worst_index, 2);
    free(a.data);
    free(b.data);
    free(c.data);
}

Test(freivalds, verdicts_are_reproducible_and_seed_dependent_only_in_r) {
    sm_state = 13;
    goblin_tensor a = mat_new(GOBLIN_DTYPE_F32, 50, 60), b = mat_new(GOBLIN_DTYPE_F32, 60, 40);
    fill(&a, DIST_SIGNED);
    fill(&b, DIST_SIGNED);
    goblin_tensor c = matmul_loop(&a, &b);
    goblin_verdict v1 = fv_check(&a, &b, &c, 42), v2 = fv_check(&a, &b, &c, 42);
    cr_assert_eq(v1.worst_ratio, v2.worst_ratio);
    cr_assert_eq(v1.worst_index, v2.worst_index);
    goblin_verdict v3 = fv_check(&a, &b, &c, 43);
    cr_assert_neq(v1.worst_ratio, v3.worst_ratio);
    free(a.data);
    free(b.data);
    free(c.data);
}

/* Why the seed must be secret: a worker that can compute r forges a wrong row
 * orthogonal to it, which passes; the same forgery under a fresh seed is caught. */
Test(freivalds, a_forger_who_knows_the_seed_passes_a_fresh_seed_catches_him) {
    sm_state = 14;
    /* K long enough that columns 0 to 2 share a column group of the element stage
     * (docs/verification.md, "The element stage") */
    int64_t m = 16, k = 2048, n = 16;
    goblin_tensor a = mat_new(GOBLIN_DTYPE_F64, m, k), b = mat_new(GOBLIN_DTYPE_F64, k, n);
    fill(&a, DIST_SIGNED);
    fill(&b, DIST_SIGNED);
    goblin_tensor c = matmul_loop(&a, &b);
    uint64_t seed = 0x5eed;
    /* the library's documented draws, stream "FREV": the vector r_j = +-(1/2 + U/2),
     * counter j, and the element stage's weights e_j = +-(3/4 + U/4), counter 16 n + j */
    double r[3], w[3];
    for (int64_t j = 0; j < 3; j++) {
        uint32_t x[4];
        goblin__rng_draw(seed, 0, 0x46524556u, (uint64_t)j, x);
        double mag = 0.5 + 0.5 * goblin__rng_u01(x, 53);
        r[j] = (x[2] & 1u) ? -mag : mag;
        goblin__rng_draw(seed, 0, 0x46524556u, 16 * (uint64_t)n + (uint64_t)j, x);
        mag = 0.75 + 0.25 * goblin__rng_u01(x, 53);
        w[j] = (x[2] & 1u) ? -mag : mag;
    }
    /* row 5 += 0.3 (r x w) on columns 0..2: orthogonal to both */
    double d[3] = {r[1] * w[2] - r[2] * w[1], r[2] * w[0] - r[0] * w[2], r[0] * w[1] - r[1] * w[0]};
    for (int64_t j = 0; j < 3; j++) set(&c, 5, j, get(&c, 5, j) + 0.3 * d[j]);
    goblin_freivalds_params p;
    goblin_freivalds_params_default(&p);
    p.seed = seed;
    p.vectors = 1;
    goblin_verdict v;
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, &p, &v), GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT, "the forgery should pass a known vector");
    p.seed = 0xfe11;
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, &p, &v), GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    free(a.data);
    free(b.data);
    free(c.data);
}

Test(freivalds, bad_arguments) {
    goblin_tensor a = mat_new(GOBLIN_DTYPE_F32, 4, 5), b = mat_new(GOBLIN_DTYPE_F32, 5, 6);
    goblin_tensor c = mat_new(GOBLIN_DTYPE_F32, 4, 6);
    goblin_verdict v;
    goblin_freivalds_params p;
    goblin_freivalds_params_default(&p);
    cr_assert_eq(p.vectors, 4);
    cr_assert_eq(p.kn, -1);
    cr_assert_eq(goblin_verify_matmul(NULL, &b, &c, &p, &v), GOBLIN_EINVAL);
    cr_assert_eq(goblin_verify_matmul(&a, &b, NULL, &p, &v), GOBLIN_EINVAL);
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, &p, NULL), GOBLIN_EINVAL);
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, NULL, &v), GOBLIN_OK); /* defaults */
    p.vectors = 0;
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, &p, &v), GOBLIN_EINVAL);
    p.vectors = GOBLIN_FREIVALDS_MAX_VECTORS + 1;
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, &p, &v), GOBLIN_EINVAL);
    p.vectors = GOBLIN_FREIVALDS_MAX_VECTORS;
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, &p, &v), GOBLIN_OK);
    cr_assert_eq(v.checked, 4 * GOBLIN_FREIVALDS_MAX_VECTORS);
    goblin_freivalds_params_default(&p);
    p.tight_sigmas = 0;
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, &p, &v), GOBLIN_EINVAL);
    p.tight_sigmas = NAN;
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, &p, &v), GOBLIN_EINVAL);
    goblin_freivalds_params_default(&p);
    p.bound_sigmas = -1;
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, &p, &v), GOBLIN_EINVAL);
    goblin_freivalds_params_default(&p);
    p.k0 = 6;
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, &p, &v), GOBLIN_EINVAL);
    p.k0 = 2;
    p.kn = 4;
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, &p, &v), GOBLIN_EINVAL);
    p.k0 = -1;
    p.kn = 1;
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c, &p, &v), GOBLIN_EINVAL);
    goblin_freivalds_params_default(&p);
    /* A and B are trusted: wrong ones are errors */
    goblin_tensor b_bad = mat_new(GOBLIN_DTYPE_F32, 4, 6);
    cr_assert_eq(goblin_verify_matmul(&a, &b_bad, &c, &p, &v), GOBLIN_ESHAPE);
    goblin_tensor b64 = mat_new(GOBLIN_DTYPE_F64, 5, 6);
    cr_assert_eq(goblin_verify_matmul(&a, &b64, &c, &p, &v), GOBLIN_EDTYPE);
    goblin_tensor a16 = a, b16 = b;
    a16.dtype = b16.dtype = GOBLIN_DTYPE_F16;
    cr_assert_eq(goblin_verify_matmul(&a16, &b16, &c, &p, &v), GOBLIN_EDTYPE);
    goblin_tensor v1 = a;
    v1.rank = 1;
    cr_assert_eq(goblin_verify_matmul(&v1, &b, &c, &p, &v), GOBLIN_ESHAPE);
    /* C is judged: wrong ones are verdicts */
    goblin_tensor c64 = mat_new(GOBLIN_DTYPE_F64, 4, 6);
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c64, &p, &v), GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_DTYPE);
    goblin_tensor ct = mat_new(GOBLIN_DTYPE_F32, 6, 4);
    cr_assert_eq(goblin_verify_matmul(&a, &b, &ct, &p, &v), GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_SHAPE);
    goblin_tensor c3 = c;
    c3.rank = 3;
    c3.shape[2] = 1;
    c3.strides[2] = 1;
    cr_assert_eq(goblin_verify_matmul(&a, &b, &c3, &p, &v), GOBLIN_OK);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_SHAPE);
    free(a.data);
    free(b.data);
    free(c.data);
    free(b_bad.data);
    free(b64.data);
    free(c64.data);
    free(ct.data);
}

Test(verify, names) {
    cr_assert_str_eq(goblin_verdict_name(GOBLIN_VERDICT_ACCEPT), "accept");
    cr_assert_str_eq(goblin_verdict_name(GOBLIN_VERDICT_ESCALATE), "escalate");
    cr_assert_str_eq(goblin_verdict_name(GOBLIN_VERDICT_REJECT), "reject");
    cr_assert_str_eq(goblin_verdict_name((goblin_verdict_kind)9), "invalid");
    cr_assert_str_eq(goblin_verify_reason_name(GOBLIN_VERIFY_EXCEEDS_BOUND), "exceeds_bound");
    cr_assert_str_eq(goblin_verify_reason_name(GOBLIN_VERIFY_UNCHECKABLE), "uncheckable");
    cr_assert_str_eq(goblin_verify_reason_name((goblin_verify_reason)-1), "invalid");
}

/* ---- replica comparison ---------------------------------------------------- */

static goblin_tensor vec(goblin_dtype dt, int64_t n, void *data) {
    return gt_tensor(dt, 1, &n, data);
}

static goblin_verdict cmp(goblin_op op, goblin_dtype dt, int64_t k, const goblin_tensor *a,
                          const goblin_tensor *b) {
    goblin_verdict v;
    cr_assert_eq(goblin_verify_compare(op, dt, k, a, b, &v), GOBLIN_OK);
    return v;
}

Test(compare, bit_equal_fast_path_every_dtype) {
    for (int d = 0; d < GOBLIN_DTYPE_COUNT; d++) {
        unsigned char x[64], y[64];
        for (int i = 0; i < 64; i++) x[i] = y[i] = (unsigned char)(i * 37 + d);
        if (d == GOBLIN_DTYPE_BOOL)
            for (int i = 0; i < 64; i++) x[i] = y[i] = (unsigned char)(i & 1);
        size_t es = goblin_dtype_size((goblin_dtype)d);
        goblin_tensor a = vec((goblin_dtype)d, (int64_t)(64 / es), x);
        goblin_tensor b = vec((goblin_dtype)d, (int64_t)(64 / es), y);
        goblin_verdict v = cmp(GOBLIN_OP_ADD, (goblin_dtype)d, 1, &a, &b);
        cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
        cr_assert_eq(v.reason, GOBLIN_VERIFY_BIT_EQUAL, "dtype %s", goblin_dtype_name((goblin_dtype)d));
        cr_assert_eq(v.checked, (int64_t)(64 / es));
    }
    /* bit-equal through strides: b is a reversed view of reversed data */
    float xs[5] = {1, 2, NAN, 4, 5}, ys[5] = {5, 4, NAN, 2, 1};
    goblin_tensor a = vec(GOBLIN_DTYPE_F32, 5, xs), b = vec(GOBLIN_DTYPE_F32, 5, ys + 4);
    b.strides[0] = -1;
    goblin_verdict v = cmp(GOBLIN_OP_EXP, GOBLIN_DTYPE_F32, 1, &a, &b);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_BIT_EQUAL);
}

Test(compare, elementwise_contract) {
    /* ADD: correctly rounded, contract 2u relative (+ smallest normal) */
    float x[4] = {1.0f, -3.5f, 1e-30f, 65504.0f}, y[4];
    memcpy(y, x, sizeof x);
    y[0] = nextafterf(1.0f, 2.0f);  /* 1 ulp = 2u relative */
    y[1] = -0.0f + nextafterf(-3.5f, 0.0f);
    goblin_tensor a = vec(GOBLIN_DTYPE_F32, 4, x), b = vec(GOBLIN_DTYPE_F32, 4, y);
    goblin_verdict v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_F32, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_OK);
    cr_assert(v.worst_ratio > 0 && v.worst_ratio <= 1);
    y[2] = 1.1e-30f; /* 10% off, far above both 2u and the smallest normal 1.2e-38 */
    v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_F32, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_EXCEEDS_BOUND);
    cr_assert_eq(v.worst_index, 2);
    cr_assert_eq(v.above_bound, 1);
    y[2] = x[2];
    y[3] = 65504.0f * (1 + 1e-3f);
    v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_F32, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    /* -0 and +0 are equal values */
    float z1[1] = {0.0f}, z2[1] = {-0.0f};
    goblin_tensor za = vec(GOBLIN_DTYPE_F32, 1, z1), zb = vec(GOBLIN_DTYPE_F32, 1, z2);
    v = cmp(GOBLIN_OP_MAXIMUM, GOBLIN_DTYPE_F32, 1, &za, &zb);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    /* EXP (libm-grade contract) accepts a few ulp that ADD would not */
    double e1[1] = {2.718281828459045}, e2[1] = {2.718281828459045 * (1 + 5 * 0x1p-53)};
    goblin_tensor ea = vec(GOBLIN_DTYPE_F64, 1, e1), eb = vec(GOBLIN_DTYPE_F64, 1, e2);
    double rel, abs_t;
    goblin_op_contract(GOBLIN_OP_EXP, GOBLIN_DTYPE_F64, 1, &rel, &abs_t);
    v = cmp(GOBLIN_OP_EXP, GOBLIN_DTYPE_F64, 1, &ea, &eb);
    cr_assert_eq(v.kind, rel >= 3 * 0x1p-53 ? GOBLIN_VERDICT_ACCEPT : GOBLIN_VERDICT_REJECT);
}

Test(compare, nan_and_inf) {
    double x[6] = {NAN, 1.0, INFINITY, -INFINITY, INFINITY, 2.0};
    double y[6] = {-NAN, 1.0, INFINITY, -INFINITY, INFINITY, 2.0};
    goblin_tensor a = vec(GOBLIN_DTYPE_F64, 6, x), b = vec(GOBLIN_DTYPE_F64, 6, y);
    goblin_verdict v = cmp(GOBLIN_OP_MUL, GOBLIN_DTYPE_F64, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT, "NaN vs NaN (any payload) agrees");
    y[1] = NAN; /* NaN against a number */
    v = cmp(GOBLIN_OP_MUL, GOBLIN_DTYPE_F64, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_NONFINITE);
    cr_assert_eq(v.nonfinite, 1);
    cr_assert_eq(v.worst_index, 1);
    y[1] = 1.0;
    y[4] = -INFINITY; /* opposite infinities */
    v = cmp(GOBLIN_OP_MUL, GOBLIN_DTYPE_F64, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    y[4] = 1e300; /* inf against an ordinary finite value */
    v = cmp(GOBLIN_OP_MUL, GOBLIN_DTYPE_F64, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    y[4] = DBL_MAX; /* inf against the largest finite: an honest overflow boundary */
    v = cmp(GOBLIN_OP_MUL, GOBLIN_DTYPE_F64, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    /* a reduction can overflow in one order and not another: escalate, not reject */
    y[4] = INFINITY;
    y[5] = NAN;
    v = cmp(GOBLIN_OP_SUM, GOBLIN_DTYPE_F64, 1000, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ESCALATE);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_NONFINITE);
}

Test(compare, integers_exact_and_bool) {
    int64_t x[3] = {INT64_MAX, -5, 7}, y[3] = {INT64_MAX - 1, -5, 7};
    goblin_tensor a = vec(GOBLIN_DTYPE_I64, 3, x), b = vec(GOBLIN_DTYPE_I64, 3, y);
    goblin_verdict v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_I64, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT, "i64 differing beyond 2^53 precision must be seen");
    cr_assert_eq(v.worst_index, 0);
    y[0] = INT64_MAX;
    v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_I64, 1, &a, &b);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_BIT_EQUAL);
    /* integer matmul is exact too, whatever k */
    v = cmp(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_I64, 1000, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    y[2] = 8;
    v = cmp(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_I64, 1000, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    /* bool: 1 and 2 are both true */
    uint8_t p[2] = {1, 0}, q[2] = {2, 0};
    goblin_tensor pa = vec(GOBLIN_DTYPE_BOOL, 2, p), pb = vec(GOBLIN_DTYPE_BOOL, 2, q);
    v = cmp(GOBLIN_OP_EQ, GOBLIN_DTYPE_BOOL, 1, &pa, &pb);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    q[1] = 1;
    v = cmp(GOBLIN_OP_EQ, GOBLIN_DTYPE_BOOL, 1, &pa, &pb);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
}

Test(compare, half_precision) {
    uint16_t x[2] = {0x3c00, 0x4000}, y[2] = {0x3c01, 0x4000}; /* f16 1.0 and 1 + 2^-10 */
    goblin_tensor a = vec(GOBLIN_DTYPE_F16, 2, x), b = vec(GOBLIN_DTYPE_F16, 2, y);
    goblin_verdict v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_F16, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT); /* one f16 ulp = 2u */
    y[0] = 0x3c10;                               /* 16 ulp */
    v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_F16, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    a.dtype = b.dtype = GOBLIN_DTYPE_BF16;
    x[0] = 0x3f80; /* bf16 1.0 */
    y[0] = 0x3f81;
    x[1] = y[1] = 0x4000;
    v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_BF16, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
}

Test(compare, shape_and_dtype_mismatch_reject) {
    float x[6] = {0}, y[6] = {0};
    int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
    goblin_tensor a = gt_tensor(GOBLIN_DTYPE_F32, 2, s23, x), b = gt_tensor(GOBLIN_DTYPE_F32, 2, s32, y);
    goblin_verdict v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_F32, 1, &a, &b);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_SHAPE);
    goblin_tensor flat = vec(GOBLIN_DTYPE_F32, 6, y);
    v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_F32, 1, &a, &flat);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_SHAPE);
    goblin_tensor bi = gt_tensor(GOBLIN_DTYPE_I32, 2, s23, y);
    v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_F32, 1, &a, &bi);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_DTYPE);
    goblin_tensor bad = a;
    bad.rank = 12;
    v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_F32, 1, &a, &bad);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_SHAPE);
    /* caller errors */
    cr_assert_eq(goblin_verify_compare((goblin_op)9999, GOBLIN_DTYPE_F32, 1, &a, &a, &v), GOBLIN_EINVAL);
    cr_assert_eq(goblin_verify_compare(GOBLIN_OP_ADD, (goblin_dtype)77, 1, &a, &a, &v), GOBLIN_EINVAL);
    cr_assert_eq(goblin_verify_compare(GOBLIN_OP_ADD, GOBLIN_DTYPE_F32, 1, NULL, &a, &v), GOBLIN_EINVAL);
    cr_assert_eq(goblin_verify_compare(GOBLIN_OP_ADD, GOBLIN_DTYPE_F32, 1, &a, &a, NULL), GOBLIN_EINVAL);
    /* empty tensors agree */
    int64_t s0[2] = {0, 4};
    goblin_tensor e1 = gt_tensor(GOBLIN_DTYPE_F32, 2, s0, NULL), e2 = e1;
    v = cmp(GOBLIN_OP_ADD, GOBLIN_DTYPE_F32, 1, &e1, &e2);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    cr_assert_eq(v.checked, 0);
}

/* Two honest matmul replicas from different backends (different summation orders). */
Test(compare, matmul_replicas_with_and_without_scale) {
    sm_state = 21;
    int64_t m = 40, k = 500, n = 30;
    goblin_tensor a = mat_new(GOBLIN_DTYPE_F32, m, k), b = mat_new(GOBLIN_DTYPE_F32, k, n);
    fill(&a, DIST_SIGNED);
    fill(&b, DIST_SIGNED);
    goblin_tensor c1 = matmul_on(fast_backend(), &a, &b);
    goblin_tensor c2 = matmul_on(GOBLIN_BACKEND_REF, &a, &b);
    goblin_tensor c3 = matmul_loop(&a, &b);
    goblin_tensor scale = mat_new(GOBLIN_DTYPE_F64, m, n);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) set(&scale, i, j, abs_dot(&a, &b, i, j));
    goblin_verdict v;
    const goblin_tensor *reps[3] = {&c1, &c2, &c3};
    for (int x = 0; x < 3; x++)
        for (int y = 0; y < 3; y++) {
            cr_assert_eq(goblin_verify_compare_scaled(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k,
                                                      reps[x], reps[y], &scale, &v),
                         GOBLIN_OK);
            cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT, "replicas %d, %d: ratio %g", x, y,
                         v.worst_ratio);
            v = cmp(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, reps[x], reps[y]);
            cr_assert_neq(v.kind, GOBLIN_VERDICT_REJECT, "without a scale nothing is provable");
        }
    /* a wrong replica: with a scale it is rejected; without, escalated */
    goblin_tensor w = copy_of(&c1);
    set(&w, 7, 9, get(&w, 7, 9) + 0.05);
    cr_assert_eq(goblin_verify_compare_scaled(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &c1, &w,
                                              &scale, &v),
                 GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.worst_index, 7 * n + 9);
    v = cmp(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &c1, &w);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ESCALATE);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_BETWEEN);
    /* the scale must be sane and the same shape */
    set(&scale, 0, 0, -1);
    cr_assert_eq(goblin_verify_compare_scaled(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &c1, &w,
                                              &scale, &v),
                 GOBLIN_EINVAL);
    goblin_tensor s_small = scale;
    s_small.shape[0] = 3;
    cr_assert_eq(goblin_verify_compare_scaled(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &c1, &c1,
                                              &s_small, &v),
                 GOBLIN_EINVAL);
    free(w.data);
    free(a.data);
    free(b.data);
    goblin_buffer_free(c1.data);
    goblin_buffer_free(c2.data);
    free(c3.data);
    free(scale.data);
}

/* ---- spot-checks and sampling ------------------------------------------------ */

Test(spot, sampled_elements_of_a_matmul) {
    sm_state = 31;
    int64_t m = 64, k = 300, n = 80, count = 64;
    goblin_tensor a = mat_new(GOBLIN_DTYPE_F32, m, k), b = mat_new(GOBLIN_DTYPE_F32, k, n);
    fill(&a, DIST_SIGNED);
    fill(&b, DIST_SIGNED);
    goblin_tensor c = matmul_on(fast_backend(), &a, &b);
    int64_t idx[64];
    float ref[64];
    double sc[64];
    cr_assert_eq(goblin_verify_sample_indices(777, m * n, count, idx), GOBLIN_OK);
    for (int64_t s = 0; s < count; s++) { /* the node's recomputation: an f64 dot, rounded */
        int64_t i = idx[s] / n, j = idx[s] % n;
        double acc = 0;
        for (int64_t l = 0; l < k; l++) acc += get(&a, i, l) * get(&b, l, j);
        ref[s] = (float)acc;
        sc[s] = abs_dot(&a, &b, i, j);
    }
    goblin_tensor rt = vec(GOBLIN_DTYPE_F32, count, ref), st = vec(GOBLIN_DTYPE_F64, count, sc);
    goblin_verdict v;
    cr_assert_eq(goblin_verify_spot(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &c, idx, count, &rt,
                                    &st, &v),
                 GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    cr_assert_eq(v.checked, count);
    /* a wrong sampled element is rejected and named by its flat index */
    goblin_tensor w = copy_of(&c);
    int64_t bad = idx[17];
    set(&w, bad / n, bad % n, get(&w, bad / n, bad % n) * 1.01);
    cr_assert_eq(goblin_verify_spot(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &w, idx, count, &rt,
                                    &st, &v),
                 GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.worst_index, bad);
    /* without scales, a reduction's disagreement is escalated */
    cr_assert_eq(goblin_verify_spot(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &w, idx, count, &rt,
                                    NULL, &v),
                 GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ESCALATE);
    /* a wrong element outside the sample is (by design) not seen */
    set(&w, bad / n, bad % n, get(&c, bad / n, bad % n));
    int64_t outside = 0;
    for (bool hit = true; hit; outside++) {
        hit = false;
        for (int64_t s = 0; s < count; s++) hit |= idx[s] == outside;
        if (!hit) break;
    }
    set(&w, outside / n, outside % n, 1e6);
    cr_assert_eq(goblin_verify_spot(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &w, idx, count, &rt,
                                    &st, &v),
                 GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    /* caller errors and hostile claims */
    int64_t oob[1] = {m * n};
    goblin_tensor r1 = vec(GOBLIN_DTYPE_F32, 1, ref);
    cr_assert_eq(goblin_verify_spot(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &c, oob, 1, &r1, NULL, &v),
                 GOBLIN_EINDEX);
    oob[0] = -1;
    cr_assert_eq(goblin_verify_spot(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &c, oob, 1, &r1, NULL, &v),
                 GOBLIN_EINDEX);
    cr_assert_eq(goblin_verify_spot(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &c, idx, 2, &r1, NULL, &v),
                 GOBLIN_EINVAL); /* ref length != count */
    cr_assert_eq(goblin_verify_spot(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &c, NULL, 1, &r1, NULL, &v),
                 GOBLIN_EINVAL);
    goblin_tensor c64 = c;
    c64.dtype = GOBLIN_DTYPE_F64;
    cr_assert_eq(goblin_verify_spot(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, k, &c64, idx, count, &rt,
                                    NULL, &v),
                 GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_DTYPE);
    free(w.data);
    free(a.data);
    free(b.data);
    goblin_buffer_free(c.data);
}

Test(spot, strided_claim_and_elementwise_op) {
    /* claimed: a transposed view; spot values from the same elements in row-major order */
    double data[6] = {1, 4, 2, 5, 3, 6}; /* storage of [[1,2,3],[4,5,6]] transposed */
    int64_t shape[2] = {2, 3};
    goblin_tensor cl = gt_tensor(GOBLIN_DTYPE_F64, 2, shape, data);
    cl.strides[0] = 1;
    cl.strides[1] = 2;
    int64_t idx[3] = {5, 0, 4};
    double ref[3] = {6, 1, 5};
    goblin_tensor rt = vec(GOBLIN_DTYPE_F64, 3, ref);
    goblin_verdict v;
    cr_assert_eq(goblin_verify_spot(GOBLIN_OP_MUL, GOBLIN_DTYPE_F64, 1, &cl, idx, 3, &rt, NULL, &v),
                 GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    ref[2] = 5.001;
    cr_assert_eq(goblin_verify_spot(GOBLIN_OP_MUL, GOBLIN_DTYPE_F64, 1, &cl, idx, 3, &rt, NULL, &v),
                 GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.worst_index, 4);
    /* zero samples: nothing checked, accepted */
    goblin_tensor r0 = vec(GOBLIN_DTYPE_F64, 0, ref);
    cr_assert_eq(goblin_verify_spot(GOBLIN_OP_MUL, GOBLIN_DTYPE_F64, 1, &cl, idx, 0, &r0, NULL, &v),
                 GOBLIN_OK);
    cr_assert_eq(v.checked, 0);
}

Test(sample, distinct_in_range_reproducible_uniform) {
    int64_t out[1000];
    /* distinct and in range, many sizes */
    static const int64_t sizes[] = {1, 2, 3, 5, 17, 64, 1000, 4097, 1000003};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int64_t N = sizes[s], cnt = N < 1000 ? N : 1000;
        cr_assert_eq(goblin_verify_sample_indices(s + 1, N, cnt, out), GOBLIN_OK);
        for (int64_t i = 0; i < cnt; i++) {
            cr_assert(out[i] >= 0 && out[i] < N);
            for (int64_t j = 0; j < i; j++) cr_assert_neq(out[i], out[j]);
        }
    }
    /* reproducible per seed, different across seeds */
    int64_t x[20], y[20], z[20];
    goblin_verify_sample_indices(99, 1 << 20, 20, x);
    goblin_verify_sample_indices(99, 1 << 20, 20, y);
    goblin_verify_sample_indices(100, 1 << 20, 20, z);
    cr_assert_arr_eq(x, y, sizeof x);
    cr_assert(memcmp(x, z, sizeof x) != 0);
    /* uniform: 3 of 10 over 20000 seeds, each index ~6000 times (sd ~65) */
    int64_t hist[10] = {0};
    for (uint64_t seed = 0; seed < 20000; seed++) {
        int64_t o[3];
        goblin_verify_sample_indices(seed, 10, 3, o);
        for (int i = 0; i < 3; i++) hist[o[i]]++;
    }
    for (int i = 0; i < 10; i++)
        cr_assert(hist[i] > 6000 - 6 * 65 && hist[i] < 6000 + 6 * 65, "index %d drawn %lld times", i,
                  (long long)hist[i]);
    /* huge domains cost nothing */
    int64_t big[8];
    cr_assert_eq(goblin_verify_sample_indices(5, (int64_t)1 << 62, 8, big), GOBLIN_OK);
    /* errors */
    cr_assert_eq(goblin_verify_sample_indices(1, 5, 6, out), GOBLIN_EINVAL);
    cr_assert_eq(goblin_verify_sample_indices(1, -1, 0, out), GOBLIN_EINVAL);
    cr_assert_eq(goblin_verify_sample_indices(1, 5, -1, out), GOBLIN_EINVAL);
    cr_assert_eq(goblin_verify_sample_indices(1, 5, 2, NULL), GOBLIN_EINVAL);
    cr_assert_eq(goblin_verify_sample_indices(1, ((int64_t)1 << 62) + 1, 1, out), GOBLIN_EINVAL);
    cr_assert_eq(goblin_verify_sample_indices(1, 0, 0, NULL), GOBLIN_OK);
}

/* ---- allocation failure ------------------------------------------------------ */

Test(verify, allocation_failure_returns_enomem_and_leaks_nothing) {
    sm_state = 41;
    goblin_tensor a = mat_new(GOBLIN_DTYPE_F64, 9, 11), b = mat_new(GOBLIN_DTYPE_F64, 11, 7);
    fill(&a, DIST_SIGNED);
    fill(&b, DIST_SIGNED);
    goblin_tensor c = matmul_loop(&a, &b);
    gt_alloc_on();
    int failures = 0;
    for (long n = 0;; n++) {
        gt_alloc_fail_from(n);
        goblin_verdict v;
        goblin_err e = goblin_verify_matmul(&a, &b, &c, NULL, &v);
        cr_assert_eq(gt_allocs.live, 0, "leak after failing allocation %ld", n);
        if (e == GOBLIN_OK) {
            cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
            break;
        }
        cr_assert_eq(e, GOBLIN_ENOMEM);
        failures++;
    }
    cr_assert(failures > 0);
    /* (the planner's allocation failure: test_plan.c, plan.allocation_failure) */
    gt_alloc_off();
    free(a.data);
    free(b.data);
    free(c.data);
}

/* ---- Freivalds over a whole job's tiles (goblin_freivalds_panels) ------------ */

/* A view of rows [r0, r0 + nr) and columns [c0, c0 + nc) of @p t. */
static goblin_tensor sub(const goblin_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    goblin_tensor v = *t;
    v.shape[0] = nr;
    v.shape[1] = nc;
    v.data = (char *)t->data +
             (r0 * t->strides[0] + c0 * t->strides[1]) * (int64_t)goblin_dtype_size(t->dtype);
    return v;
}

static void expect_same_verdict(const goblin_verdict *x, const goblin_verdict *y,
                                const char *what) {
    cr_assert_eq(x->kind, y->kind, "%s: kind %d vs %d", what, x->kind, y->kind);
    cr_assert_eq(x->reason, y->reason, "%s: reason", what);
    cr_assert_eq(x->checked, y->checked, "%s: checked", what);
    cr_assert_eq(x->above_tight, y->above_tight, "%s: above_tight", what);
    cr_assert_eq(x->above_bound, y->above_bound, "%s: above_bound", what);
    cr_assert_eq(x->nonfinite, y->nonfinite, "%s: nonfinite", what);
    cr_assert_eq(x->unchecked, y->unchecked, "%s: unchecked", what);
    cr_assert_eq(x->worst_index, y->worst_index, "%s: worst_index", what);
    /* bit for bit (both may be inf) */
    cr_assert(memcmp(&x->worst_ratio, &y->worst_ratio, sizeof(double)) == 0,
              "%s: worst_ratio %.17g vs %.17g", what, x->worst_ratio, y->worst_ratio);
    cr_assert(memcmp(&x->worst_tight_ratio, &y->worst_tight_ratio, sizeof(double)) == 0,
              "%s: worst_tight_ratio %.17g vs %.17g", what, x->worst_tight_ratio,
              y->worst_tight_ratio);
}

static goblin_freivalds_panels *panels_new(const goblin_tensor *a, const goblin_tensor *b,
                                           int32_t np, const int64_t *cb, uint64_t seed,
                                           int32_t vectors) {
    goblin_freivalds_params p;
    goblin_freivalds_params_default(&p);
    p.seed = seed;
    p.vectors = vectors;
    goblin_freivalds_panels *fp = NULL;
    goblin_err e = goblin_freivalds_panels_new(a, b, np, cb, &p, &fp);
    cr_assert_eq(e, GOBLIN_OK, "panels_new: %s", goblin_strerror(e));
    cr_assert_not_null(fp);
    return fp;
}

static goblin_verdict panels_check(goblin_freivalds_panels *fp, int64_t row0, int64_t rows,
                                   int32_t panel, const goblin_tensor *c) {
    goblin_verdict v;
    goblin_err e = goblin_freivalds_panels_check(fp, row0, rows, panel, c, &v);
    cr_assert_eq(e, GOBLIN_OK, "panels_check: %s", goblin_strerror(e));
    return v;
}

/* One column panel over all of N: the vectors are goblin_verify_matmul's, so a row
 * range's verdict must be goblin_verify_matmul's on those rows, field for field,
 * for honest and wrong results, any vector count, f32 and f64. */
Test(freivalds_panels, one_panel_equals_verify_matmul) {
    static const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    static const int32_t nvs[] = {1, 4, 7};
    int64_t m = 133, k = 301, n = 270;
    for (size_t d = 0; d < 2; d++) {
        sm_state = 600 + d;
        goblin_tensor a = mat_new(dts[d], m, k), b = mat_new(dts[d], k, n);
        fill(&a, DIST_SIGNED);
        fill(&b, DIST_SIGNED);
        goblin_tensor c = matmul_loop(&a, &b);
        int64_t cb[2] = {0, n};
        /* the whole matrix, then row ranges (ends of blocks of four not aligned) */
        static const int64_t ranges[][2] = {{0, 133}, {0, 61}, {61, 70}, {131, 2}, {5, 1}};
        for (size_t s = 0; s < sizeof nvs / sizeof *nvs; s++)
            for (int variant = 0; variant < 4; variant++) {
                goblin_tensor w = copy_of(&c);
                if (variant == 1) set(&w, 62, 7, get(&w, 62, 7) + 5);       /* one element */
                if (variant == 2) set(&w, 131, 269, NAN);                    /* NaN */
                if (variant == 3)                                            /* scaled */
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++) set(&w, i, j, get(&w, i, j) * 1.01);
                uint64_t seed = 1000 + s * 10 + (uint64_t)variant;
                goblin_freivalds_panels *fp = panels_new(&a, &b, 1, cb, seed, nvs[s]);
                for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++) {
                    int64_t r0 = ranges[r][0], rn = ranges[r][1];
                    goblin_tensor av = sub(&a, r0, rn, 0, k), wv = sub(&w, r0, rn, 0, n);
                    goblin_verdict ref = fv_check_nv(&av, &b, &wv, seed, nvs[s]);
                    goblin_verdict v = panels_check(fp, r0, rn, 0, &wv);
                    char what[96];
                    snprintf(what, sizeof what, "%s %d vectors variant %d rows [%lld, +%lld)",
                             goblin_dtype_name(dts[d]), nvs[s], variant, (long long)r0,
                             (long long)rn);
                    expect_same_verdict(&v, &ref, what);
                    if (r == 0 && variant == 0) cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
                    if (r == 0 && variant > 0)
                        cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT, "%s: %s", what,
                                     goblin_verdict_name(v.kind));
                }
                goblin_freivalds_panels_free(fp);
                free(w.data);
            }
        /* split-K: the K-range of the params applies to every tile */
        goblin_freivalds_params p;
        goblin_freivalds_params_default(&p);
        p.seed = 77;
        p.k0 = 100;
        p.kn = 150;
        goblin_tensor as = sub(&a, 0, m, 100, 150), bs = sub(&b, 100, 150, 0, n);
        goblin_tensor cp = matmul_loop(&as, &bs);
        goblin_freivalds_panels *fp = NULL;
        cr_assert_eq(goblin_freivalds_panels_new(&a, &b, 1, cb, &p, &fp), GOBLIN_OK);
        goblin_verdict ref, v;
        cr_assert_eq(goblin_verify_matmul(&a, &b, &cp, &p, &ref), GOBLIN_OK);
        cr_assert_eq(ref.kind, GOBLIN_VERDICT_ACCEPT);
        v = panels_check(fp, 0, m, 0, &cp);
        expect_same_verdict(&v, &ref, "split-K");
        goblin_freivalds_panels_free(fp);
        free(cp.data);
        free(a.data);
        free(b.data);
        free(c.data);
    }
}

/* goblin_freivalds_params.threads = 2: the passes over A and C of long row ranges run
 * in two halves on two threads. Every verdict must equal the one-thread object's,
 * field for field and bit for bit, for honest and wrong results (a wrong element, a
 * NaN and an inf in either half, a scaled row panel, a swapped pair of rows across the
 * halves), f32 and f64, row ranges long enough to split and short ones that do not. */
long long goblin__freivalds_splits(void);
int64_t goblin__freivalds_take_helper_cpu_ns(void);

Test(freivalds_panels, two_threads_give_the_same_verdicts) {
    static const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    /* long enough to split: the pass over A from 64 rows (2 panels x 2048), a check of a
     * 530-column panel from 495 rows */
    int64_t m = 600, k = 2048, n = 1100;
    int64_t cb[3] = {0, 530, n};
    long long splits0 = goblin__freivalds_splits();
    for (size_t d = 0; d < 2; d++) {
        sm_state = 900 + d;
        goblin_tensor a = mat_new(dts[d], m, k), b = mat_new(dts[d], k, n);
        fill(&a, DIST_SIGNED);
        fill(&b, DIST_SIGNED);
        goblin_tensor c = matmul_on(fast_backend(), &a, &b);
        /* variant 6: B with NaN and inf in two columns, one in each half of its rows
         * (the pass over B is redone with those columns masked) */
        goblin_tensor bbad = copy_of(&b);
        set(&bbad, 1500, 7, NAN);
        set(&bbad, 10, 900, INFINITY);
        static const int64_t ranges[][2] = {{0, 600}, {0, 512}, {17, 500}, {590, 10}};
        for (int variant = 0; variant < 7; variant++) {
            const goblin_tensor *bp = variant == 6 ? &bbad : &b;
            goblin_tensor w = copy_of(&c);
            if (variant == 1) set(&w, 550, 600, get(&w, 550, 600) + 100.0); /* second half of [0, 600) */
            if (variant == 2) set(&w, 3, 10, NAN);
            if (variant == 3) set(&w, 580, 1000, INFINITY);
            if (variant == 4)
                for (int64_t i = 0; i < 300; i++)
                    for (int64_t j = 0; j < n; j++) set(&w, i, j, get(&w, i, j) * (1 + 1e-3));
            if (variant == 5)
                for (int64_t j = 0; j < n; j++) {
                    double x = get(&w, 10, j);
                    set(&w, 10, j, get(&w, 590, j));
                    set(&w, 590, j, x);
                }
            goblin_freivalds_params p;
            goblin_freivalds_params_default(&p);
            p.seed = 4242 + (uint64_t)variant;
            goblin_freivalds_panels *one = NULL, *two = NULL;
            goblin__freivalds_take_helper_cpu_ns();
            cr_assert_eq(goblin_freivalds_panels_new(&a, bp, 2, cb, &p, &one), GOBLIN_OK);
            cr_assert_eq(goblin__freivalds_take_helper_cpu_ns(), 0); /* one thread: no second one */
            p.threads = 2;
            cr_assert_eq(goblin_freivalds_panels_new(&a, bp, 2, cb, &p, &two), GOBLIN_OK);
            /* the second half of the pass over B ran on a second thread, its CPU told */
            cr_assert_gt(goblin__freivalds_take_helper_cpu_ns(), 0);
            cr_assert_eq(goblin__freivalds_take_helper_cpu_ns(), 0); /* and reset */
            for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++)
                for (int32_t q = 0; q < 2; q++) {
                    int64_t r0 = ranges[r][0], rn = ranges[r][1];
                    goblin_tensor wv = sub(&w, r0, rn, cb[q], cb[q + 1] - cb[q]);
                    goblin_verdict v1 = panels_check(one, r0, rn, q, &wv);
                    goblin_verdict v2 = panels_check(two, r0, rn, q, &wv);
                    char what[96];
                    snprintf(what, sizeof what, "%s variant %d rows [%lld, +%lld) panel %d",
                             goblin_dtype_name(dts[d]), variant, (long long)r0, (long long)rn, q);
                    expect_same_verdict(&v2, &v1, what);
                    if (variant == 0) cr_assert_eq(v1.kind, GOBLIN_VERDICT_ACCEPT, "%s", what);
                    if (variant == 6 && r == 0) /* masked columns: unchecked, so escalated */
                        cr_assert(v1.kind == GOBLIN_VERDICT_ESCALATE && v1.reason == GOBLIN_VERIFY_UNCHECKABLE &&
                                      v1.unchecked == 600 && v1.checked > 0,
                                  "%s: %s, %lld unchecked", what, goblin_verdict_name(v1.kind),
                                  (long long)v1.unchecked);
                    if (r == 0 && variant > 0 && variant < 6 && (variant != 1 || q == 1) &&
                        (variant != 2 || q == 0) && (variant != 3 || q == 1))
                        cr_assert_neq(v1.kind, GOBLIN_VERDICT_ACCEPT, "%s: %s", what,
                                      goblin_verdict_name(v1.kind));
                }
            goblin_freivalds_panels_free(one);
            goblin_freivalds_panels_free(two);
            free(w.data);
        }
        free(a.data);
        free(b.data);
        free(bbad.data);
        free(c.data);
    }
    /* the pass over B, and prepares and checks of [0, 600), [0, 512) and [17, +500),
     * went to two threads */
    cr_assert_geq(goblin__freivalds_splits() - splits0, 2 * 7 * (1 + 3));
}

enum { PC_ELEMENT, PC_SCALE, PC_ROW_SWAP, PC_OTHER, PC_NAN, PC_ZEROS, PC_TRANSPOSE, PC_COUNT };
static const char *pc_name[] = {"element", "scale", "row-swap", "other-tile", "nan", "zeros",
                                "transposed"};

/* A job cut unevenly into 3 row x 4 column panels, operands and result in strided
 * layouts, honest tiles from the f64 loop: every tile accepted; each corruption of
 * one tile rejected, every other tile still accepted. */
Test(freivalds_panels, multi_panel_job_honest_and_corrupted_tiles) {
    static const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    int64_t m = 300, k = 700, n = 500;
    static const int64_t rb[] = {0, 80, 203, 300};          /* row panel 1: 123 rows */
    static const int64_t cb[] = {0, 123, 380, 381, 500};    /* col panel 0: 123 (square tile) */
    int nr = 3, nc = 4;
    int64_t total = 0;
    for (size_t d = 0; d < 2; d++) {
        sm_state = 700 + d;
        goblin_tensor a = mat_new(dts[d], m, k), b = mat_new(dts[d], k, n);
        goblin_tensor a2 = mat_new(dts[d], m, k);
        fill(&a, DIST_SIGNED);
        fill(&b, DIST_SIGNED);
        fill(&a2, DIST_SIGNED);
        goblin_tensor c = matmul_loop(&a, &b), other = matmul_loop(&a2, &b);
        void *sa, *sb, *sc;
        goblin_tensor A = relayout(&a, 1, &sa);  /* column-major */
        goblin_tensor B = relayout(&b, 2, &sb);  /* rows reversed, every other column */
        goblin_tensor C = relayout(&c, 2, &sc);
        goblin_freivalds_panels *fp = panels_new(&A, &B, nc, cb, 0xabcdef + d, 4);
        for (int i = 0; i < nr; i++) /* prepare two of the three ranges; check prepares the last */
            if (i != 1)
                cr_assert_eq(goblin_freivalds_panels_prepare(fp, rb[i], rb[i + 1] - rb[i]),
                             GOBLIN_OK);
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < nc; j++) {
                int64_t rows = rb[i + 1] - rb[i], cols = cb[j + 1] - cb[j];
                goblin_tensor t = sub(&C, rb[i], rows, cb[j], cols);
                goblin_verdict v = panels_check(fp, rb[i], rows, j, &t);
                cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT, "%s honest tile (%d, %d): %s",
                             goblin_dtype_name(dts[d]), i, j, goblin_verify_reason_name(v.reason));
                cr_assert_eq(v.checked, rows * 4);
                total++;
            }
        for (int cls = 0; cls < PC_COUNT; cls++)
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < nc; j++) {
                    int64_t rows = rb[i + 1] - rb[i], cols = cb[j + 1] - cb[j];
                    if (cls == PC_TRANSPOSE && rows != cols) continue;
                    goblin_tensor t = sub(&C, rb[i], rows, cb[j], cols);
                    goblin_tensor keep = copy_of(&t);
                    int64_t x = (int64_t)(splitmix() % (uint64_t)rows);
                    int64_t y = (int64_t)(splitmix() % (uint64_t)cols);
                    switch (cls) {
                    case PC_ELEMENT: { /* 5 % of the element's contract scale sum |a||b| */
                        goblin_tensor ar = sub(&a, rb[i] + x, 1, 0, k);
                        goblin_tensor bc = sub(&b, 0, k, cb[j] + y, 1);
                        set(&t, x, y, get(&t, x, y) + 0.05 * abs_dot(&ar, &bc, 0, 0));
                        break;
                    }
                    case PC_SCALE:
                        for (int64_t p = 0; p < rows; p++)
                            for (int64_t q = 0; q < cols; q++) set(&t, p, q, get(&t, p, q) * 1.01);
                        break;
                    case PC_ROW_SWAP: {
                        int64_t x2 = (x + 1 + (int64_t)(splitmix() % (uint64_t)(rows - 1))) % rows;
                        for (int64_t q = 0; q < cols; q++) {
                            set(&t, x, q, get(&keep, x2, q));
                            set(&t, x2, q, get(&keep, x, q));
                        }
                        break;
                    }
                    case PC_OTHER:
                        for (int64_t p = 0; p < rows; p++)
                            for (int64_t q = 0; q < cols; q++)
                                set(&t, p, q, get(&other, rb[i] + p, cb[j] + q));
                        break;
                    case PC_NAN: set(&t, x, y, NAN); break;
                    case PC_ZEROS:
                        for (int64_t p = 0; p < rows; p++)
                            for (int64_t q = 0; q < cols; q++) set(&t, p, q, 0);
                        break;
                    case PC_TRANSPOSE:
                        for (int64_t p = 0; p < rows; p++)
                            for (int64_t q = 0; q < cols; q++) set(&t, p, q, get(&keep, q, p));
                        break;
                    }
                    for (int i2 = 0; i2 < nr; i2++)
                        for (int j2 = 0; j2 < nc; j2++) {
                            int64_t rows2 = rb[i2 + 1] - rb[i2];
                            goblin_tensor t2 = sub(&C, rb[i2], rows2, cb[j2], cb[j2 + 1] - cb[j2]);
                            goblin_verdict v = panels_check(fp, rb[i2], rows2, j2, &t2);
                            total++;
                            if (i2 == i && j2 == j) {
                                cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT,
                                             "%s %s in tile (%d, %d): %s (%s), ratio %.3g",
                                             goblin_dtype_name(dts[d]), pc_name[cls], i, j,
                                             goblin_verdict_name(v.kind),
                                             goblin_verify_reason_name(v.reason), v.worst_ratio);
                                cr_assert_eq(v.reason, cls == PC_NAN ? GOBLIN_VERIFY_NONFINITE
                                                                     : GOBLIN_VERIFY_EXCEEDS_BOUND);
                                if (cls == PC_ELEMENT || cls == PC_NAN)
                                    cr_assert_eq(v.worst_index, x);
                            } else {
                                cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT,
                                             "%s %s in tile (%d, %d): tile (%d, %d) %s",
                                             goblin_dtype_name(dts[d]), pc_name[cls], i, j, i2,
                                             j2, goblin_verdict_name(v.kind));
                            }
                        }
                    for (int64_t p = 0; p < rows; p++)
                        for (int64_t q = 0; q < cols; q++) set(&t, p, q, get(&keep, p, q));
                    free(keep.data);
                }
        goblin_freivalds_panels_free(fp);
        free(sa);
        free(sb);
        free(sc);
        free(a.data);
        free(a2.data);
        free(b.data);
        free(c.data);
        free(other.data);
    }
    cr_log_info("freivalds panels: %lld tile checks of a 300x700x500 job in 3x4 panels",
                (long long)total);
}

/* NaN/inf in A's rows and B's columns: the tiles they reach are partly unchecked
 * (ESCALATE), with the counts goblin_verify_matmul gives for the same tile; a NaN
 * where the honest value is finite is still a REJECT; other tiles are unaffected. */
Test(freivalds_panels, nonfinite_rows_and_columns) {
    int64_t m = 40, k = 50, n = 60;
    static const int64_t rb[] = {0, 17, 40};
    static const int64_t cb[] = {0, 25, 33, 60};
    sm_state = 800;
    goblin_tensor a = mat_new(GOBLIN_DTYPE_F32, m, k), b = mat_new(GOBLIN_DTYPE_F32, k, n);
    fill(&a, DIST_SIGNED);
    fill(&b, DIST_SIGNED);
    set(&a, 20, 3, NAN);           /* row 20: row panel 1 */
    set(&b, 7, 30, INFINITY);      /* column 30: column panel 1 */
    goblin_tensor c = matmul_loop(&a, &b);
    goblin_freivalds_panels *fp = panels_new(&a, &b, 3, cb, 5150, 4);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) {
                int64_t rows = rb[i + 1] - rb[i], cols = cb[j + 1] - cb[j];
                goblin_tensor t = sub(&c, rb[i], rows, cb[j], cols);
                double keep = get(&t, 2, 1);
                if (pass) set(&t, 2, 1, NAN); /* row 2 of the tile: finite inputs */
                goblin_verdict v = panels_check(fp, rb[i], rows, j, &t);
                goblin_tensor av = sub(&a, rb[i], rows, 0, k), bv = sub(&b, 0, k, cb[j], cols);
                goblin_verdict ref = fv_check(&av, &bv, &t, 99);
                cr_assert_eq(v.kind, ref.kind, "tile (%d, %d) pass %d", i, j, pass);
                cr_assert_eq(v.reason, ref.reason);
                cr_assert_eq(v.checked, ref.checked);
                cr_assert_eq(v.unchecked, ref.unchecked);
                cr_assert_eq(v.nonfinite, ref.nonfinite);
                /* hand-derived: row 20 of A (tile row 3) unchecked in row panel 1,
                 * column 30 (one column of panel 1) unchecked in every other row */
                int64_t bad_rows = i == 1 ? 1 : 0, bad_cols = j == 1 ? 1 : 0;
                if (pass) {
                    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
                    cr_assert_eq(v.reason, GOBLIN_VERIFY_NONFINITE);
                    cr_assert_eq(v.nonfinite, 1);
                    cr_assert_eq(v.worst_index, 2);
                } else if (bad_rows || bad_cols) {
                    cr_assert_eq(v.kind, GOBLIN_VERDICT_ESCALATE);
                    cr_assert_eq(v.reason, GOBLIN_VERIFY_UNCHECKABLE);
                    cr_assert_eq(v.unchecked, bad_rows * cols + bad_cols * (rows - bad_rows));
                    cr_assert_eq(v.checked, (rows - bad_rows) * 4);
                } else {
                    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
                    cr_assert_eq(v.unchecked, 0);
                }
                set(&t, 2, 1, keep);
            }
    goblin_freivalds_panels_free(fp);
    free(a.data);
    free(b.data);
    free(c.data);
}

Test(freivalds_panels, release_then_check_again) {
    int64_t m = 30, k = 20, n = 24;
    static const int64_t cb[] = {0, 10, 24};
    sm_state = 900;
    goblin_tensor a = mat_new(GOBLIN_DTYPE_F64, m, k), b = mat_new(GOBLIN_DTYPE_F64, k, n);
    fill(&a, DIST_SIGNED);
    fill(&b, DIST_SIGNED);
    goblin_tensor c = matmul_loop(&a, &b);
    goblin_freivalds_panels *fp = panels_new(&a, &b, 2, cb, 31337, 4);
    goblin_tensor t = sub(&c, 12, 18, 10, 14);
    goblin_verdict v1 = panels_check(fp, 12, 18, 1, &t); /* prepares (12, 18) */
    cr_assert_eq(v1.kind, GOBLIN_VERDICT_ACCEPT);
    cr_assert_eq(goblin_freivalds_panels_prepare(fp, 12, 18), GOBLIN_OK); /* already: no-op */
    goblin_freivalds_panels_release(fp, 12, 18);
    goblin_freivalds_panels_release(fp, 12, 18); /* not prepared: no-op */
    goblin_freivalds_panels_release(fp, 0, 5);
    goblin_verdict v2 = panels_check(fp, 12, 18, 1, &t); /* prepared again */
    expect_same_verdict(&v2, &v1, "after release");
    /* many ranges (the list grows), released in another order, checked again */
    for (int64_t r = 0; r < 30; r++)
        cr_assert_eq(goblin_freivalds_panels_prepare(fp, r, 1), GOBLIN_OK);
    for (int64_t r = 0; r < 30; r += 2) goblin_freivalds_panels_release(fp, r, 1);
    for (int64_t r = 0; r < 30; r++) {
        goblin_tensor row = sub(&c, r, 1, 0, 10);
        goblin_verdict v = panels_check(fp, r, 1, 0, &row);
        cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
        set(&row, 0, 3, get(&row, 0, 3) + 1);
        v = panels_check(fp, r, 1, 0, &row);
        cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
        set(&row, 0, 3, get(&row, 0, 3) - 1);
    }
    goblin_verdict v3 = panels_check(fp, 12, 18, 1, &t);
    expect_same_verdict(&v3, &v1, "after many ranges");
    goblin_freivalds_panels_free(fp);
    free(a.data);
    free(b.data);
    free(c.data);
}

Test(freivalds_panels, bad_arguments_and_allocation_failure) {
    goblin_tensor a = mat_new(GOBLIN_DTYPE_F32, 6, 5), b = mat_new(GOBLIN_DTYPE_F32, 5, 8);
    sm_state = 1000;
    fill(&a, DIST_SIGNED);
    fill(&b, DIST_SIGNED);
    goblin_tensor c = matmul_loop(&a, &b);
    goblin_freivalds_params p;
    goblin_freivalds_params_default(&p);
    goblin_freivalds_panels *fp = (goblin_freivalds_panels *)&p; /* must be reset to NULL */
    int64_t cb[] = {0, 3, 8};
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b, 2, cb, &p, NULL), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_new(NULL, &b, 2, cb, &p, &fp), GOBLIN_EINVAL);
    cr_assert_null(fp);
    cr_assert_eq(goblin_freivalds_panels_new(&a, NULL, 2, cb, &p, &fp), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b, 2, NULL, &p, &fp), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b, 0, cb, &p, &fp), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b, -1, cb, &p, &fp), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b, 9, cb, &p, &fp), GOBLIN_EINVAL); /* > N */
    int64_t bad1[] = {1, 3, 8}, bad2[] = {0, 3, 7}, bad3[] = {0, 3, 3, 8}, bad4[] = {0, 5, 3, 8};
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b, 2, bad1, &p, &fp), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b, 2, bad2, &p, &fp), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b, 3, bad3, &p, &fp), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b, 3, bad4, &p, &fp), GOBLIN_EINVAL);
    p.vectors = 0;
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b, 2, cb, &p, &fp), GOBLIN_EINVAL);
    goblin_freivalds_params_default(&p);
    p.k0 = 3;
    p.kn = 3;
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b, 2, cb, &p, &fp), GOBLIN_EINVAL);
    goblin_freivalds_params_default(&p);
    goblin_tensor b64 = mat_new(GOBLIN_DTYPE_F64, 5, 8), bt = mat_new(GOBLIN_DTYPE_F32, 8, 5);
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b64, 2, cb, &p, &fp), GOBLIN_EDTYPE);
    cr_assert_eq(goblin_freivalds_panels_new(&a, &bt, 2, cb, &p, &fp), GOBLIN_ESHAPE);
    cr_assert_null(fp);
    cr_assert_eq(goblin_freivalds_panels_new(&a, &b, 2, cb, NULL, &fp), GOBLIN_OK); /* defaults */
    cr_assert_eq(goblin_freivalds_panels_prepare(NULL, 0, 1), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_prepare(fp, -1, 2), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_prepare(fp, 0, -1), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_prepare(fp, 4, 3), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_prepare(fp, INT64_MAX, 2), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_prepare(fp, 2, INT64_MAX), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_prepare(fp, 6, 0), GOBLIN_OK); /* empty range */
    goblin_verdict v;
    goblin_tensor t = sub(&c, 0, 6, 3, 5);
    cr_assert_eq(goblin_freivalds_panels_check(NULL, 0, 6, 1, &t, &v), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_check(fp, 0, 6, 1, NULL, &v), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_check(fp, 0, 6, 1, &t, NULL), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_check(fp, 0, 6, 2, &t, &v), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_check(fp, 0, 6, -1, &t, &v), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_check(fp, 1, 6, 1, &t, &v), GOBLIN_EINVAL);
    cr_assert_eq(goblin_freivalds_panels_check(fp, 0, 6, 1, &t, &v), GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    /* the result is judged: wrong dtype, shape (another panel's width, rows) or rank */
    goblin_tensor c64 = mat_new(GOBLIN_DTYPE_F64, 6, 5);
    cr_assert_eq(goblin_freivalds_panels_check(fp, 0, 6, 1, &c64, &v), GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_DTYPE);
    cr_assert_eq(goblin_freivalds_panels_check(fp, 0, 6, 0, &t, &v), GOBLIN_OK);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_SHAPE);
    cr_assert_eq(goblin_freivalds_panels_check(fp, 0, 5, 1, &t, &v), GOBLIN_OK);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_SHAPE);
    goblin_tensor t3 = t;
    t3.rank = 3;
    t3.shape[2] = 1;
    t3.strides[2] = 1;
    cr_assert_eq(goblin_freivalds_panels_check(fp, 0, 6, 1, &t3, &v), GOBLIN_OK);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_SHAPE);
    goblin_tensor t0 = sub(&c, 6, 0, 3, 5); /* an empty tile */
    cr_assert_eq(goblin_freivalds_panels_check(fp, 6, 0, 1, &t0, &v), GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
    cr_assert_eq(v.checked, 0);
    goblin_freivalds_panels_release(NULL, 0, 1);
    goblin_freivalds_panels_free(fp);
    goblin_freivalds_panels_free(NULL);

    /* every allocation failing in turn: ENOMEM, nothing leaked */
    gt_alloc_on();
    int failures = 0;
    for (long nfail = 0;; nfail++) {
        gt_alloc_fail_from(nfail);
        fp = NULL;
        goblin_err e = goblin_freivalds_panels_new(&a, &b, 2, cb, &p, &fp);
        if (e) cr_assert_null(fp);
        for (int64_t r = 0; e == GOBLIN_OK && r < 6; r++) /* more ranges than the first list */
            e = goblin_freivalds_panels_prepare(fp, r, 1);
        bool in_check = e == GOBLIN_OK;
        if (in_check) e = goblin_freivalds_panels_check(fp, 0, 6, 1, &t, &v);
        goblin_freivalds_panels_free(fp);
        cr_assert_eq(gt_allocs.live, 0, "leak after failing allocation %ld", nfail);
        if (e == GOBLIN_OK) {
            cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT);
            break;
        }
        cr_assert_eq(e, GOBLIN_ENOMEM);
        if (in_check) cr_assert_neq(v.kind, GOBLIN_VERDICT_ACCEPT); /* never with an error */
        failures++;
    }
    cr_assert(failures >= 4);
    gt_alloc_off();
    gt_alloc_fail_from(-1);
    free(a.data);
    free(b.data);
    free(b64.data);
    free(bt.data);
    free(c.data);
    free(c64.data);
}

/* ---- the magnitude envelope, both variants of the passes ---------------------- *
 *
 * The check bounds every vector's magnitude sums |B| |r_v|, |A| |B| |r_v|, |C| |r_v|
 * by one envelope sum each (|B| m, |A| |B| m, |C| m with m_j = 1 on unmasked
 * columns, 0 on masked ones; docs/verification.md, "What is computed"). These tests
 * run on the AVX2+FMA passes (where the CPU has them) and on the baseline passes
 * (forced through the library's test switch), and derive the levels they expect
 * from the formulas of docs/verification.md, not from the library. */

/* Objects created while it is set use the baseline passes (libgoblin/verify.c). */
void goblin__freivalds_force_baseline(bool on);

static const char *variant_name[] = {"native", "baseline"};

/* Vector v, column j of the secret vectors under @p seed for N columns, as
 * documented: r_j = +-(1/2 + U/2), Philox stream "FREV", counter v * N + j. */
static double secret_r(uint64_t seed, int64_t v, int64_t N, int64_t j) {
    uint32_t x[4];
    goblin__rng_draw(seed, 0, 0x46524556u, (uint64_t)v * (uint64_t)N + (uint64_t)j, x);
    double mag = 0.5 + 0.5 * goblin__rng_u01(x, 53);
    return (x[2] & 1u) ? -mag : mag;
}

static double gam(double n, double u) { return n * u / (1 - n * u); }

/* Upper bounds of the rigorous bound R_i and the accept level T_i of row @p i
 * (docs/verification.md), for a tile without masked columns: with P = |A| |B| m,
 * Q = |C| m (m = 1 here) inflated by `grow`,
 *   R_i <= (rel P + abs n + gamma_{n+K+2}(u64) P + gamma_{n+2}(u64) Q + underflow)(1 + 16 u64)
 *   T_i <= sigmas (sig_k P + sig_z P + sig_w Q) + abs n + underflow
 * (the first from bound (2), the second from sqrt(a^2 + b^2) <= a + b and
 * min(., P) <= P). Computed in long double with a relative margin of 1e-9. */
static void levels_up(const goblin_tensor *a, const goblin_tensor *b, const goblin_tensor *c,
                      int64_t i, double *r_up, double *t_up) {
    int64_t K = a->shape[1], n = b->shape[1];
    long double P = 0, Q = 0, a1 = 0;
    for (int64_t j = 0; j < n; j++) {
        for (int64_t l = 0; l < K; l++) P += fabsl((long double)get(a, i, l) * get(b, l, j));
        Q += fabsl((long double)get(c, i, j));
    }
    for (int64_t l = 0; l < K; l++) a1 += fabsl((long double)get(a, i, l));
    double rel, abs_c;
    goblin_op_contract(GOBLIN_OP_MATMUL, a->dtype, K, &rel, &abs_c);
    double u = a->dtype == GOBLIN_DTYPE_F32 ? 0x1p-24 : 0x1p-53, u64 = 0x1p-53;
    double dn = (double)n, dK = (double)K;
    long double grow = 1 + 2 * gam(dn + dK + 4, u64);
    long double Pg = P * grow, Qg = Q * grow;
    long double under = 0x1p-1074 * (dn * a1 * grow + dK + dn + 4);
    long double R = (rel * Pg + abs_c * dn * grow + gam(dn + dK + 2, u64) * Pg +
                     gam(dn + 2, u64) * Qg + under) * (1 + 16 * u64);
    long double sig_k = u * sqrtl((dK + 1) / 3), sig_z = u64 * sqrtl((dn + dK) / 3),
                sig_w = u64 * sqrtl(dn / 3);
    long double T = 6 * (sig_k * Pg + sig_z * Pg + sig_w * Qg) + abs_c * dn * grow + under;
    *r_up = (double)(R * (1 + 1e-9L));
    *t_up = (double)(T * (1 + 1e-9L));
}

/* Honest products of narrow and ordinary shapes (K = 1 included), f32 and f64,
 * from the f64 loop and from the fast backend, with C strided, through
 * goblin_verify_matmul and a two-panel object: every verdict ACCEPT, on both
 * variants; masked NaN/inf columns of B leave exactly their columns unchecked. */
Test(freivalds_envelope, honest_narrow_and_masked_on_both_variants) {
    static const int64_t shapes[][3] = {{5, 1, 1},  {3, 1, 8},   {7, 13, 1},  {9, 33, 2},
                                        {4, 64, 3}, {17, 100, 5}, {33, 257, 8}, {21, 300, 130}};
    static const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    goblin_backend_kind be = fast_backend();
    int64_t total = 0;
    for (int variant = 0; variant < 2; variant++) {
        goblin__freivalds_force_baseline(variant == 1);
        for (size_t d = 0; d < 2; d++)
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
                sm_state = 4000 + 31 * s + d;
                goblin_tensor a = mat_new(dts[d], m, k), b = mat_new(dts[d], k, n);
                fill(&a, (int)(s % 3));
                fill(&b, (int)(s % 3));
                goblin_tensor cl = matmul_loop(&a, &b), cb = matmul_on(be, &a, &b);
                void *st;
                goblin_tensor cs = relayout(&cl, 2, &st); /* rows reversed, every other column */
                int64_t half = n > 1 ? n / 2 : 1;
                int64_t bounds[3] = {0, half, n};
                int32_t np = n > 1 ? 2 : 1;
                if (np == 1) bounds[1] = n;
                for (int seed = 0; seed < 5; seed++) {
                    uint64_t sd = 0xe0e0 + 7 * (uint64_t)seed + s;
                    const goblin_tensor *cs3[3] = {&cl, &cb, &cs};
                    for (int w = 0; w < 3; w++) {
                        goblin_verdict v = fv_check_nv(&a, &b, cs3[w], sd, 4);
                        cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT,
                                     "%s %s %lldx%lldx%lld C %d: %s (%s), tight %.3g, bound %.3g",
                                     variant_name[variant], goblin_dtype_name(dts[d]),
                                     (long long)m, (long long)k, (long long)n, w,
                                     goblin_verdict_name(v.kind),
                                     goblin_verify_reason_name(v.reason), v.worst_tight_ratio,
                                     v.worst_ratio);
                        cr_assert_eq(v.checked, m * 4);
                        total++;
                    }
                    goblin_freivalds_panels *fp = panels_new(&a, &b, np, bounds, sd, 4);
                    for (int32_t p = 0; p < np; p++) {
                        goblin_tensor t = sub(&cs, 0, m, bounds[p], bounds[p + 1] - bounds[p]);
                        goblin_verdict v = panels_check(fp, 0, m, p, &t);
                        cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT, "%s panel %d: %s",
                                     variant_name[variant], p, goblin_verify_reason_name(v.reason));
                        total++;
                    }
                    goblin_freivalds_panels_free(fp);
                }
                /* a NaN in B's last column (and an inf in its first, when n > 2): those
                 * columns of C are NaN/inf and masked, the rest is checked */
                set(&b, k - 1, n - 1, NAN);
                int64_t n_bad = 1;
                if (n > 2) {
                    set(&b, 0, 0, INFINITY);
                    n_bad = 2;
                }
                goblin_tensor cm = matmul_loop(&a, &b);
                for (int seed = 0; seed < 3; seed++) {
                    goblin_verdict v = fv_check_nv(&a, &b, &cm, 0xf00 + (uint64_t)seed, 4);
                    cr_assert_eq(v.kind, GOBLIN_VERDICT_ESCALATE, "%s masked: %s",
                                 variant_name[variant], goblin_verdict_name(v.kind));
                    cr_assert_eq(v.reason, GOBLIN_VERIFY_UNCHECKABLE);
                    cr_assert_eq(v.unchecked, m * n_bad);
                    cr_assert_eq(v.checked, m * 4);
                    cr_assert_eq(v.above_tight, 0);
                    cr_assert_eq(v.nonfinite, 0);
                    total++;
                    if (n > n_bad) { /* a wrong element in a checked column is still caught */
                        int64_t j = n > 2 ? 1 : 0;
                        double keep = get(&cm, m / 2, j);
                        set(&cm, m / 2, j, keep + 1 + 10 * fabs(keep));
                        v = fv_check_nv(&a, &b, &cm, 0xf00 + (uint64_t)seed, 4);
                        cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
                        cr_assert_eq(v.worst_index, m / 2);
                        set(&cm, m / 2, j, keep);
                    }
                }
                free(cm.data);
                free(st);
                free(cl.data);
                goblin_buffer_free(cb.data);
                free(a.data);
                free(b.data);
            }
    }
    goblin__freivalds_force_baseline(false);
    cr_log_info("freivalds envelope: %lld honest checks on both variants, all as expected",
                (long long)total);
}

/* One wrong element whose change, times |r_j| >= 1/2, exceeds the rigorous bound R
 * as documented (computed here from the formula): REJECT (exceeds_bound) at its
 * row, for every vector; above the documented accept level T: never ACCEPT.
 * Narrow tiles, where the bounds rest on P = |A| |B| m rather than on the
 * Hoeffding form; f32 and f64, both variants. A result with every element off by
 * up to 0.9 times the contract's tolerance, signs aligned with the first secret
 * vector (the worst case for it), is an honest result and never REJECTed. */
Test(freivalds_envelope, wrong_element_just_above_the_documented_bounds) {
    static const int64_t shapes[][3] = {{6, 1, 1}, {6, 7, 2}, {6, 64, 3}, {6, 16, 5},
                                        {6, 64, 8}, {6, 300, 8}};
    static const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    int64_t rejected = 0, flagged = 0, contract_ok = 0;
    for (int variant = 0; variant < 2; variant++) {
        goblin__freivalds_force_baseline(variant == 1);
        for (size_t d = 0; d < 2; d++)
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
                sm_state = 5000 + 17 * s + d;
                goblin_tensor a = mat_new(dts[d], m, k), b = mat_new(dts[d], k, n);
                fill(&a, s % 2 ? DIST_POSITIVE : DIST_SIGNED);
                fill(&b, DIST_SIGNED);
                goblin_tensor c = matmul_loop(&a, &b);
                for (int t = 0; t < 8; t++) {
                    int64_t i = (int64_t)(splitmix() % (uint64_t)m);
                    int64_t j = (int64_t)(splitmix() % (uint64_t)n);
                    double R, T, keep = get(&c, i, j), sign = splitmix() & 1 ? 1 : -1;
                    levels_up(&a, &b, &c, i, &R, &T);
                    uint64_t seed = 0x1234 + (uint64_t)t;
                    set(&c, i, j, keep + sign * 2.2 * R); /* |delta r_j| >= 1.1 R */
                    goblin_verdict v = fv_check_nv(&a, &b, &c, seed, 4);
                    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT,
                                 "%s %s %lldx%lldx%lld: %s, ratio %.4g", variant_name[variant],
                                 goblin_dtype_name(dts[d]), (long long)m, (long long)k,
                                 (long long)n, goblin_verdict_name(v.kind), v.worst_ratio);
                    cr_assert_eq(v.reason, GOBLIN_VERIFY_EXCEEDS_BOUND);
                    cr_assert_eq(v.worst_index, i);
                    cr_assert_eq(v.above_bound, 4, "every vector sees |delta r_j| > R");
                    rejected++;
                    set(&c, i, j, keep + sign * 2.2 * T); /* |delta r_j| >= 1.1 T */
                    v = fv_check_nv(&a, &b, &c, seed, 4);
                    cr_assert_neq(v.kind, GOBLIN_VERDICT_ACCEPT, "%s %s above T accepted",
                                  variant_name[variant], goblin_dtype_name(dts[d]));
                    cr_assert_eq(v.above_tight, 4);
                    flagged++;
                    set(&c, i, j, keep);
                }
                /* honest at the edge of the contract: C = A.B + 0.9 (rel S_ij + abs)
                 * sign(r_0j), rounded once (rel >= gamma_{K+2} covers that rounding) */
                double rel, abs_c;
                goblin_op_contract(GOBLIN_OP_MATMUL, dts[d], k, &rel, &abs_c);
                goblin_tensor e = mat_new(dts[d], m, n);
                uint64_t seed = 0x777 + s;
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) {
                        long double exact = 0, S = 0;
                        for (int64_t l = 0; l < k; l++) {
                            long double p = (long double)get(&a, i, l) * get(&b, l, j);
                            exact += p;
                            S += fabsl(p);
                        }
                        double sg = secret_r(seed, 0, n, j) > 0 ? 1 : -1;
                        set(&e, i, j, (double)(exact + sg * 0.9L * (rel * S + abs_c)));
                    }
                if (k >= 16) { /* 0.9 rel + u <= rel: the whole error inside the contract */
                    goblin_verdict v = fv_check_nv(&a, &b, &e, seed, 4);
                    cr_assert_neq(v.kind, GOBLIN_VERDICT_REJECT,
                                  "%s %s: a result inside the contract was rejected (ratio %.4g)",
                                  variant_name[variant], goblin_dtype_name(dts[d]), v.worst_ratio);
                    contract_ok++;
                }
                free(e.data);
                free(a.data);
                free(b.data);
                free(c.data);
            }
    }
    goblin__freivalds_force_baseline(false);
    cr_log_info("freivalds envelope: %lld wrong elements above R rejected, %lld above T flagged, "
                "%lld worst-case honest results not rejected",
                (long long)rejected, (long long)flagged, (long long)contract_ok);
}

/* Absurd magnitudes: a row scaled by 1e6, then four of its elements solved for so
 * that its value sums C r_v agree with the honest ones for all four secret vectors
 * (what a worker knowing r could do; the test knows the seed). The value test alone
 * sees only rounding noise; the rule |C| m <= (1 + rel) |A| |B| m + abs sum m
 * rejects it, by a ratio near 1e6. Both variants, goblin_verify_matmul and a panel. */
Test(freivalds_envelope, absurd_row_with_forged_value_sums_is_rejected) {
    int64_t m = 12, k = 32, n = 64;
    for (int variant = 0; variant < 2; variant++) {
        goblin__freivalds_force_baseline(variant == 1);
        sm_state = 6000 + (uint64_t)variant;
        goblin_tensor a = mat_new(GOBLIN_DTYPE_F64, m, k), b = mat_new(GOBLIN_DTYPE_F64, k, n);
        fill(&a, DIST_SIGNED);
        fill(&b, DIST_SIGNED);
        goblin_tensor c = matmul_loop(&a, &b);
        uint64_t seed = 0xab5 + (uint64_t)variant;
        int64_t i = 7;
        static const int64_t cols[4] = {3, 20, 41, 60};
        /* target: the honest row's value sums; the row times 1e6 elsewhere */
        long double target[4], M[4][5];
        for (int v = 0; v < 4; v++) {
            target[v] = 0;
            for (int64_t j = 0; j < n; j++) target[v] += (long double)get(&c, i, j) * secret_r(seed, v, n, j);
        }
        for (int64_t j = 0; j < n; j++) set(&c, i, j, get(&c, i, j) * 1e6);
        for (int v = 0; v < 4; v++) {
            long double rest = 0;
            for (int64_t j = 0; j < n; j++) {
                bool solved = j == cols[0] || j == cols[1] || j == cols[2] || j == cols[3];
                if (!solved) rest += (long double)get(&c, i, j) * secret_r(seed, v, n, j);
            }
            for (int q = 0; q < 4; q++) M[v][q] = secret_r(seed, v, n, cols[q]);
            M[v][4] = target[v] - rest;
        }
        for (int p = 0; p < 4; p++) /* Gaussian elimination, partial pivoting */
        {
            int best = p;
            for (int q = p + 1; q < 4; q++)
                if (fabsl(M[q][p]) > fabsl(M[best][p])) best = q;
            for (int q = 0; q < 5; q++) {
                long double t = M[p][q];
                M[p][q] = M[best][q];
                M[best][q] = t;
            }
            for (int q = p + 1; q < 4; q++) {
                long double f = M[q][p] / M[p][p];
                for (int x = p; x < 5; x++) M[q][x] -= f * M[p][x];
            }
        }
        long double sol[4];
        for (int p = 3; p >= 0; p--) {
            long double t = M[p][4];
            for (int q = p + 1; q < 4; q++) t -= M[p][q] * sol[q];
            sol[p] = t / M[p][p];
        }
        for (int q = 0; q < 4; q++) set(&c, i, cols[q], (double)sol[q]);
        /* the forgery's value sums agree to rounding (checked here in long double) */
        double q_row = 0;
        for (int64_t j = 0; j < n; j++) q_row += fabs(get(&c, i, j));
        for (int v = 0; v < 4; v++) {
            long double w = 0;
            for (int64_t j = 0; j < n; j++) w += (long double)get(&c, i, j) * secret_r(seed, v, n, j);
            cr_assert(fabsl(w - target[v]) < 1e-12L * q_row, "forgery: value sum %d off", v);
        }
        goblin_verdict vd = fv_check_nv(&a, &b, &c, seed, 4);
        cr_assert_eq(vd.kind, GOBLIN_VERDICT_REJECT, "%s: %s", variant_name[variant],
                     goblin_verdict_name(vd.kind));
        cr_assert_eq(vd.reason, GOBLIN_VERIFY_EXCEEDS_BOUND);
        cr_assert_eq(vd.worst_index, i);
        cr_assert_eq(vd.above_bound, 4);
        cr_assert(vd.worst_ratio > 1e5, "%s: ratio %.4g (the magnitude rule, not the values)",
                  variant_name[variant], vd.worst_ratio);
        int64_t cb[3] = {0, n, 0};
        goblin_freivalds_panels *fp = panels_new(&a, &b, 1, cb, seed, 4);
        goblin_tensor t = sub(&c, 4, 8, 0, n); /* rows 4..11: row i is row 3 of the tile */
        goblin_verdict vp = panels_check(fp, 4, 8, 0, &t);
        cr_assert_eq(vp.kind, GOBLIN_VERDICT_REJECT);
        cr_assert_eq(vp.worst_index, i - 4);
        goblin_freivalds_panels_free(fp);
        free(a.data);
        free(b.data);
        free(c.data);
    }
    goblin__freivalds_force_baseline(false);
}
