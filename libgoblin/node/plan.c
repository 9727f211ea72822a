/* libgoblin/node/plan.c - the matmul planner (plan.h).
 *
 * Choosing a task's extents (tm rows, tn columns, tk of K) under a budget of E
 * elements, tm tk + tk tn + tm tn <= E, to maximize the flops per element moved,
 *     f = 2 tm tn tk / (tm tk + tk tn + tm tn):
 * for a fixed tk the best tile is square, tm = tn = t with t^2 + 2 t tk = E, and
 * over tk the optimum is the cube tm = tn = tk = sqrt(E / 3) (Lagrange; f is
 * unimodal in tk). So K is split only when it is longer than what the budget's
 * cube allows, and small m or n hand their share of the budget to the others.
 * We evaluate f for a logarithmic set of slice counts (the cube's, the smallest
 * feasible, powers of two between) and keep the fewest slices within 10% of the
 * best: split-K costs a combine on the node and partial results to verify, so a
 * few percent of intensity is not worth another slice. */
#include "plan.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "base/alloc.h"

struct goblin__plan {
    int64_t m, k, n;
    goblin_dtype dt;
    int64_t gm, gn, gk; /* grid rows, grid columns, K-slices */
    uint64_t budget;    /* bytes usable by one task */
};

void goblin__plan_params_default(goblin__plan_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->dtype = GOBLIN_DTYPE_F32;
    p->memory_bytes = (uint64_t)1 << 30;
    p->headroom = 0.25;
    p->min_tiles = 1;
}

static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Split @p total into @p g parts differing by at most one; part @p idx. */
static void part(int64_t total, int64_t g, int64_t idx, int64_t *start, int64_t *len) {
    int64_t base = total / g, rem = total % g;
    *start = idx * base + (idx < rem ? idx : rem);
    *len = base + (idx < rem ? 1 : 0);
}

/* rows kn + kn cols + rows cols elements, false on uint64 overflow. */
static bool task_elems(int64_t rows, int64_t cols, int64_t kn, uint64_t *out) {
    uint64_t a, b, c, s;
    if (__builtin_mul_overflow((uint64_t)rows, (uint64_t)kn, &a) ||
        __builtin_mul_overflow((uint64_t)kn, (uint64_t)cols, &b) ||
        __builtin_mul_overflow((uint64_t)rows, (uint64_t)cols, &c) ||
        __builtin_add_overflow(a, b, &s) || __builtin_add_overflow(s, c, &s))
        return false;
    *out = s;
    return true;
}

static bool fits(int64_t rows, int64_t cols, int64_t kn, uint64_t elems) {
    uint64_t e;
    return task_elems(rows, cols, kn, &e) && e <= elems;
}

goblin_err goblin__matmul_tile_bytes(const goblin__matmul_tile *t, goblin_dtype dt, uint64_t *out) {
    size_t es = goblin_dtype_size(dt);
    if (!t || !out || es == 0 || t->rows < 0 || t->cols < 0 || t->kn < 0) return GOBLIN_EINVAL;
    uint64_t e;
    if (!task_elems(t->rows, t->cols, t->kn, &e) || __builtin_mul_overflow(e, (uint64_t)es, &e))
        return GOBLIN_ELIMIT;
    *out = e;
    return GOBLIN_OK;
}

/* Flops per element moved of a task with these extents. */
static double intensity(int64_t rows, int64_t cols, int64_t kn) {
    double r = (double)rows, c = (double)cols, k = (double)kn;
    return 2 * r * c * k / (r * k + k * c + r * c);
}

typedef struct choice {
    int64_t gm, gn, gk;
    double f; /* intensity of the largest task; -1 if infeasible */
} choice;

/* The best grid for @p gk K-slices under @p elems elements per task. */
static choice best_for_slices(int64_t m, int64_t n, int64_t k, int64_t gk, uint64_t elems) {
    choice ch = {0, 0, gk, -1};
    int64_t tk = ceil_div(k, gk);
    if (!fits(1, 1, tk, elems)) return ch;
    /* square t with t^2 + 2 t tk <= E, then the exact integer edge */
    double E = (double)elems, dk = (double)tk;
    double tf = floor(sqrt(dk * dk + E) - dk);
    int64_t t = tf < 1 ? 1 : tf > (double)GOBLIN_PLAN_MAX_DIM ? GOBLIN_PLAN_MAX_DIM : (int64_t)tf;
    while (t > 1 && !fits(t, t, tk, elems)) t--;
    while (t < GOBLIN_PLAN_MAX_DIM && fits(t + 1, t + 1, tk, elems)) t++;
    int64_t tm = min64(t, m), tn = min64(t, n);
    /* A dimension smaller than the square hands its unused share to the other:
     * largest x with fixed * tk + tk x + fixed x <= E. */
    if (tm == m && tn < n) {
        uint64_t rest = elems - (uint64_t)m * (uint64_t)tk; /* fits(m, 1, tk): no underflow */
        int64_t x = (int64_t)min64((int64_t)(rest / ((uint64_t)tk + (uint64_t)m)), n);
        if (x > tn) tn = x;
    } else if (tn == n && tm < m) {
        uint64_t rest = elems - (uint64_t)n * (uint64_t)tk;
        int64_t x = (int64_t)min64((int64_t)(rest / ((uint64_t)tk + (uint64_t)n)), m);
        if (x > tm) tm = x;
    }
    ch.gm = ceil_div(m, tm);
    ch.gn = ceil_div(n, tn);
    ch.f = intensity(ceil_div(m, ch.gm), ceil_div(n, ch.gn), tk);
    return ch;
}

goblin_err goblin__plan_matmul(goblin__plan **out, const goblin__plan_params *p, char *err_msg,
                              size_t err_cap) {
#define FAIL(code, ...)                                                                          \
    do {                                                                                         \
        if (err_msg && err_cap) snprintf(err_msg, err_cap, __VA_ARGS__);                         \
        return (code);                                                                           \
    } while (0)
    if (err_msg && err_cap) err_msg[0] = 0;
    if (!out || !p) FAIL(GOBLIN_EINVAL, "plan: NULL %s", !out ? "out" : "params");
    int64_t m = p->m, k = p->k, n = p->n;
    if (m < 1 || k < 1 || n < 1)
        FAIL(GOBLIN_EINVAL,
             "plan: m, k and n must be >= 1 (got m=%lld, k=%lld, n=%lld); an empty product "
             "needs no tasks",
             (long long)m, (long long)k, (long long)n);
    if (m > GOBLIN_PLAN_MAX_DIM || k > GOBLIN_PLAN_MAX_DIM || n > GOBLIN_PLAN_MAX_DIM)
        FAIL(GOBLIN_EINVAL, "plan: m=%lld, k=%lld, n=%lld exceeds the limit of 2^40 per dimension",
             (long long)m, (long long)k, (long long)n);
    size_t es = goblin_dtype_size(p->dtype);
    if (es == 0) FAIL(GOBLIN_EDTYPE, "plan: invalid dtype %d", (int)p->dtype);
    if (!(p->headroom >= 0 && p->headroom < 1))
        FAIL(GOBLIN_EINVAL, "plan: headroom must be in [0, 1) (got %g)", p->headroom);
    if (p->min_tiles < 1)
        FAIL(GOBLIN_EINVAL, "plan: min_tiles must be >= 1 (got %lld)", (long long)p->min_tiles);

    double usable_d = floor((double)p->memory_bytes * (1 - p->headroom));
    uint64_t usable = usable_d >= 0x1p64 ? UINT64_MAX : (uint64_t)usable_d;
    if (usable > p->memory_bytes) usable = p->memory_bytes; /* double rounding up */
    uint64_t elems = usable / es;
    if (elems < 3) {
        double need = ceil(3.0 * (double)es / (1 - p->headroom));
        FAIL(GOBLIN_ERANGE,
             "plan: a memory budget of %llu bytes leaves %llu after %g%% headroom, too small for "
             "even a 1x1x1 %s task (one element each of A, B and C: %zu bytes); give at least "
             "%.0f bytes",
             (unsigned long long)p->memory_bytes, (unsigned long long)usable, p->headroom * 100,
             goblin_dtype_name(p->dtype), 3 * es, need);
    }

    /* Slice counts to try: the smallest feasible (largest tk), the cube's, and
     * powers of two between them and k. */
    uint64_t half = (elems - 1) / 2; /* the largest kn with a 1 x 1 tile: 2 kn + 1 <= E */
    int64_t tk_max = half >= (uint64_t)k ? k : (int64_t)half;
    int64_t gk_min = ceil_div(k, tk_max);
    double cube = sqrt((double)elems / 3);
    int64_t gk_cube = cube >= (double)k ? 1 : ceil_div(k, (int64_t)(cube < 1 ? 1 : cube));
    int64_t cands[200];
    int nc = 0;
    cands[nc++] = gk_min;
    for (int64_t d = -1; d <= 1; d++) cands[nc++] = gk_cube + d;
    for (int64_t g = 1; g <= k && nc < 190; g *= 2) {
        cands[nc++] = g;
        if (g <= k / gk_min) cands[nc++] = gk_min * g;
        if (g > k / 2) break;
    }
    choice best = {0, 0, 0, -1};
    choice all[200];
    int na = 0;
    for (int i = 0; i < nc; i++) {
        int64_t g = cands[i];
        if (g < gk_min || g > k) continue;
        choice ch = best_for_slices(m, n, k, g, elems);
        if (ch.f < 0) continue;
        all[na++] = ch;
        if (ch.f > best.f) best = ch;
    }
    if (best.f < 0) /* cannot happen: gk_min is feasible by construction */
        FAIL(GOBLIN_EINTERNAL, "plan: no feasible task size found");
    choice pick = best;
    for (int i = 0; i < na; i++)
        if (all[i].f >= 0.9 * best.f && all[i].gk < pick.gk) pick = all[i];

    /* Parallelism: at least min_tiles tasks, cutting the longer tile side first and
     * K last (each halving keeps every task within the budget). */
    int64_t gm = pick.gm, gn = pick.gn, gk = pick.gk;
    for (int iter = 0; iter < 200; iter++) {
        uint64_t cnt;
        if (!__builtin_mul_overflow((uint64_t)gm, (uint64_t)gn, &cnt) &&
            !__builtin_mul_overflow(cnt, (uint64_t)gk, &cnt) && cnt >= (uint64_t)p->min_tiles)
            break;
        if (__builtin_mul_overflow((uint64_t)gm, (uint64_t)gn, &cnt)) break;
        int64_t rm = ceil_div(m, gm), rn = ceil_div(n, gn);
        if (gm < m && (rm >= rn || gn >= n)) gm = min64(m, gm * 2);
        else if (gn < n) gn = min64(n, gn * 2);
        else if (gk < k) gk = min64(k, gk * 2);
        else break;
    }
    uint64_t count;
    if (__builtin_mul_overflow((uint64_t)gm, (uint64_t)gn, &count) ||
        __builtin_mul_overflow(count, (uint64_t)gk, &count) || count > ((uint64_t)1 << 62))
        FAIL(GOBLIN_ELIMIT,
             "plan: %lld x %lld x %lld tiles (rows x columns x K-slices) exceed 2^62 tasks; "
             "raise the memory budget",
             (long long)gm, (long long)gn, (long long)gk);

    goblin__plan *pl = goblin__calloc(1, sizeof *pl);
    if (!pl) FAIL(GOBLIN_ENOMEM, "plan: out of memory");
    pl->m = m;
    pl->k = k;
    pl->n = n;
    pl->dt = p->dtype;
    pl->gm = gm;
    pl->gn = gn;
    pl->gk = gk;
    pl->budget = usable;
    *out = pl;
    return GOBLIN_OK;
#undef FAIL
}

void goblin__plan_free(goblin__plan *plan) { goblin__free(plan); }

int64_t goblin__plan_tile_count(const goblin__plan *plan) {
    return plan ? plan->gm * plan->gn * plan->gk : 0;
}

goblin_err goblin__plan_tile(const goblin__plan *plan, int64_t i, goblin__matmul_tile *out) {
    if (!plan || !out) return GOBLIN_EINVAL;
    if (i < 0 || i >= goblin__plan_tile_count(plan)) return GOBLIN_EINDEX;
    int64_t q = i % plan->gk, rest = i / plan->gk;
    int64_t bj = rest % plan->gn, bi = rest / plan->gn;
    part(plan->m, plan->gm, bi, &out->row0, &out->rows);
    part(plan->n, plan->gn, bj, &out->col0, &out->cols);
    part(plan->k, plan->gk, q, &out->k0, &out->kn);
    return GOBLIN_OK;
}

goblin_err goblin__plan_get_info(const goblin__plan *plan, goblin_job_plan *out) {
    if (!plan || !out) return GOBLIN_EINVAL;
    memset(out, 0, sizeof *out);
    out->m = plan->m;
    out->k = plan->k;
    out->n = plan->n;
    out->dtype = plan->dt;
    out->grid_rows = plan->gm;
    out->grid_cols = plan->gn;
    out->k_slices = plan->gk;
    out->tile_rows = ceil_div(plan->m, plan->gm);
    out->tile_cols = ceil_div(plan->n, plan->gn);
    out->tile_k = ceil_div(plan->k, plan->gk);
    out->budget_bytes = plan->budget;
    goblin__matmul_tile t = {0, out->tile_rows, 0, out->tile_cols, 0, out->tile_k};
    goblin__matmul_tile_bytes(&t, plan->dt, &out->max_task_bytes); /* fits: checked at build */
    out->flops_per_byte = intensity(out->tile_rows, out->tile_cols, out->tile_k) /
                          (double)goblin_dtype_size(plan->dt);
    return GOBLIN_OK;
}
