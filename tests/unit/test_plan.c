/* tests/unit/test_plan.c - the matmul planner: exact coverage, budgets, big
 * shapes without big memory, and errors. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <goblin/goblin.h>
#include "node/plan.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "testutil.h"

static uint64_t sm_state;
static uint64_t splitmix(void) {
    uint64_t z = (sm_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static goblin__plan_params params(int64_t m, int64_t k, int64_t n, goblin_dtype dt, uint64_t bytes,
                                 double headroom, int64_t min_tiles) {
    goblin__plan_params p;
    goblin__plan_params_default(&p);
    p.m = m;
    p.k = k;
    p.n = n;
    p.dtype = dt;
    p.memory_bytes = bytes;
    p.headroom = headroom;
    p.min_tiles = min_tiles;
    return p;
}

/* Build the plan and check, cell by cell of the m x n x k iteration space, that the
 * tasks cover it exactly once, that every task fits the budget, that the order is
 * the documented one, and that info agrees with the tiles. */
static void check_exhaustive(const goblin__plan_params *p) {
    goblin__plan *pl = NULL;
    char msg[256];
    goblin_err e = goblin__plan_matmul(&pl, p, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_OK, "m=%lld k=%lld n=%lld bytes=%llu: %s", (long long)p->m,
                 (long long)p->k, (long long)p->n, (unsigned long long)p->memory_bytes, msg);
    goblin_job_plan info;
    cr_assert_eq(goblin__plan_get_info(pl, &info), GOBLIN_OK);
    int64_t count = goblin__plan_tile_count(pl);
    cr_assert_eq(count, info.grid_rows * info.grid_cols * info.k_slices);
    cr_assert(count >= 1);
    double usable = floor((double)p->memory_bytes * (1 - p->headroom));
    cr_assert(info.budget_bytes <= usable);
    cr_assert(info.max_task_bytes <= info.budget_bytes);
    int64_t cells = p->m * p->n * p->k;
    unsigned char *cov = calloc((size_t)cells, 1);
    cr_assert_not_null(cov);
    int64_t max_rows = 0, max_cols = 0, max_k = 0;
    for (int64_t i = 0; i < count; i++) {
        goblin__matmul_tile t;
        cr_assert_eq(goblin__plan_tile(pl, i, &t), GOBLIN_OK);
        cr_assert(t.rows >= 1 && t.cols >= 1 && t.kn >= 1);
        cr_assert(t.row0 >= 0 && t.row0 + t.rows <= p->m);
        cr_assert(t.col0 >= 0 && t.col0 + t.cols <= p->n);
        cr_assert(t.k0 >= 0 && t.k0 + t.kn <= p->k);
        uint64_t bytes;
        cr_assert_eq(goblin__matmul_tile_bytes(&t, p->dtype, &bytes), GOBLIN_OK);
        cr_assert(bytes <= info.budget_bytes, "task %lld needs %llu bytes > budget %llu",
                  (long long)i, (unsigned long long)bytes, (unsigned long long)info.budget_bytes);
        /* documented order: tile-major, the K-slices of a tile consecutive */
        int64_t q = i % info.k_slices;
        if (q > 0) {
            goblin__matmul_tile prev;
            goblin__plan_tile(pl, i - 1, &prev);
            cr_assert(prev.row0 == t.row0 && prev.col0 == t.col0 && prev.k0 + prev.kn == t.k0);
        } else {
            cr_assert_eq(t.k0, 0);
        }
        if (t.rows > max_rows) max_rows = t.rows;
        if (t.cols > max_cols) max_cols = t.cols;
        if (t.kn > max_k) max_k = t.kn;
        for (int64_t r = t.row0; r < t.row0 + t.rows; r++)
            for (int64_t c = t.col0; c < t.col0 + t.cols; c++)
                for (int64_t l = t.k0; l < t.k0 + t.kn; l++) cov[(r * p->n + c) * p->k + l]++;
    }
    for (int64_t x = 0; x < cells; x++)
        cr_assert_eq(cov[x], 1, "cell %lld covered %d times (m=%lld k=%lld n=%lld)", (long long)x,
                     cov[x], (long long)p->m, (long long)p->k, (long long)p->n);
    cr_assert_eq(max_rows, info.tile_rows);
    cr_assert_eq(max_cols, info.tile_cols);
    cr_assert_eq(max_k, info.tile_k);
    if (p->min_tiles > 1 && p->min_tiles <= cells) cr_assert(count >= p->min_tiles);
    cr_assert_eq(goblin__plan_tile(pl, count, &(goblin__matmul_tile){0}), GOBLIN_EINDEX);
    cr_assert_eq(goblin__plan_tile(pl, -1, &(goblin__matmul_tile){0}), GOBLIN_EINDEX);
    free(cov);
    goblin__plan_free(pl);
}

Test(plan, defaults) {
    goblin__plan_params p;
    memset(&p, 0xab, sizeof p);
    goblin__plan_params_default(&p);
    cr_assert_eq(p.dtype, GOBLIN_DTYPE_F32);
    cr_assert_eq(p.memory_bytes, (uint64_t)1 << 30);
    cr_assert_eq(p.headroom, 0.25);
    cr_assert_eq(p.min_tiles, 1);
    goblin__plan_params_default(NULL);
}

Test(plan, exhaustive_small_shapes) {
    /* every shape up to 7^3, element budgets from the 1x1x1 minimum up to "all fits" */
    static const uint64_t elems[] = {3, 4, 5, 7, 10, 16, 23, 40, 64, 150, 1000, 100000};
    static const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    static const double heads[] = {0.0, 0.25};
    static const int64_t mins[] = {1, 5};
    int64_t plans = 0;
    for (int64_t m = 1; m <= 7; m++)
        for (int64_t k = 1; k <= 7; k++)
            for (int64_t n = 1; n <= 7; n++)
                for (size_t d = 0; d < 2; d++)
                    for (size_t b = 0; b < sizeof elems / sizeof *elems; b++)
                        for (size_t h = 0; h < 2; h++)
                            for (size_t q = 0; q < 2; q++) {
                                size_t es = goblin_dtype_size(dts[d]);
                                /* smallest byte budget that leaves elems[b] elements */
                                uint64_t bytes = (uint64_t)ceil((double)(elems[b] * es) / (1 - heads[h]));
                                goblin__plan_params p =
                                    params(m, k, n, dts[d], bytes, heads[h], mins[q]);
                                check_exhaustive(&p);
                                plans++;
                            }
    cr_log_info("plan: %lld small plans checked cell by cell", (long long)plans);
}

Test(plan, exhaustive_random_shapes) {
    sm_state = 42;
    for (int it = 0; it < 300; it++) {
        int64_t m = 1 + (int64_t)(splitmix() % 40), k = 1 + (int64_t)(splitmix() % 40),
                n = 1 + (int64_t)(splitmix() % 40);
        goblin_dtype dt = splitmix() % 2 ? GOBLIN_DTYPE_F32 : GOBLIN_DTYPE_F64;
        uint64_t bytes = 3 * goblin_dtype_size(dt) + splitmix() % (8 * 4000);
        int64_t min_tiles = 1 + (int64_t)(splitmix() % 50);
        goblin__plan_params p = params(m, k, n, dt, bytes, 0, min_tiles);
        check_exhaustive(&p);
    }
}

Test(plan, small_k_gets_no_split_and_one_task_when_everything_fits) {
    goblin__plan_params p = params(1000, 1000, 1000, GOBLIN_DTYPE_F32, (uint64_t)1 << 30, 0.25, 1);
    goblin__plan *pl = NULL;
    cr_assert_eq(goblin__plan_matmul(&pl, &p, NULL, 0), GOBLIN_OK);
    cr_assert_eq(goblin__plan_tile_count(pl), 1);
    goblin__matmul_tile t;
    goblin__plan_tile(pl, 0, &t);
    cr_assert(t.row0 == 0 && t.rows == 1000 && t.col0 == 0 && t.cols == 1000 && t.k0 == 0 &&
              t.kn == 1000);
    goblin__plan_free(pl);

    /* the same with min_tiles: finer rows/columns, still no K split */
    p.min_tiles = 16;
    cr_assert_eq(goblin__plan_matmul(&pl, &p, NULL, 0), GOBLIN_OK);
    goblin_job_plan info;
    goblin__plan_get_info(pl, &info);
    cr_assert(goblin__plan_tile_count(pl) >= 16);
    cr_assert_eq(info.k_slices, 1);
    goblin__plan_free(pl);
}

Test(plan, long_k_is_split) {
    /* thin C, very long K: all of C in one tile, K in slices sized by the budget */
    goblin__plan_params p = params(64, 1000000, 64, GOBLIN_DTYPE_F32, 1 << 20, 0.25, 1);
    goblin__plan *pl = NULL;
    cr_assert_eq(goblin__plan_matmul(&pl, &p, NULL, 0), GOBLIN_OK);
    goblin_job_plan info;
    goblin__plan_get_info(pl, &info);
    cr_log_info("plan 64x1e6x64 in 1 MiB: grid %lldx%lld, %lld K-slices of %lld, %.1f flop/B",
                (long long)info.grid_rows, (long long)info.grid_cols, (long long)info.k_slices,
                (long long)info.tile_k, info.flops_per_byte);
    cr_assert_eq(info.grid_rows, 1);
    cr_assert_eq(info.grid_cols, 1);
    cr_assert(info.k_slices > 1);
    cr_assert(info.max_task_bytes <= info.budget_bytes);
    /* the slices use most of the budget (a budget-bound K, not a tiny one) */
    cr_assert(info.max_task_bytes >= info.budget_bytes / 2);
    goblin__plan_free(pl);

    /* square and large: K split into cube-like tasks */
    p = params(100000, 100000, 100000, GOBLIN_DTYPE_F64, (uint64_t)256 << 20, 0.25, 1);
    cr_assert_eq(goblin__plan_matmul(&pl, &p, NULL, 0), GOBLIN_OK);
    goblin__plan_get_info(pl, &info);
    cr_assert(info.k_slices > 1);
    double ratio = (double)info.tile_k / (double)info.tile_rows;
    cr_assert(ratio > 0.3 && ratio < 3.5, "tile %lld x %lld x %lld is far from a cube",
              (long long)info.tile_rows, (long long)info.tile_cols, (long long)info.tile_k);
    goblin__plan_free(pl);
}

/* The partition of one grid dimension, read through the tiles: contiguous parts
 * from 0 to total, sizes differing by at most one. */
static void check_dim(const goblin__plan *pl, int64_t parts, int64_t stride, int which,
                      int64_t total) {
    int64_t next = 0, lo = INT64_MAX, hi = 0;
    for (int64_t b = 0; b < parts; b++) {
        goblin__matmul_tile t;
        cr_assert_eq(goblin__plan_tile(pl, b * stride, &t), GOBLIN_OK);
        int64_t s = which == 0 ? t.row0 : which == 1 ? t.col0 : t.k0;
        int64_t l = which == 0 ? t.rows : which == 1 ? t.cols : t.kn;
        cr_assert_eq(s, next);
        next = s + l;
        if (l < lo) lo = l;
        if (l > hi) hi = l;
    }
    cr_assert_eq(next, total);
    cr_assert(hi - lo <= 1);
}

Test(plan, huge_shapes_plan_instantly_and_fit) {
    static const uint64_t budgets[] = {12, 4096, 1 << 20, (uint64_t)64 << 20, (uint64_t)1 << 30,
                                       (uint64_t)8 << 30, (uint64_t)1 << 40};
    sm_state = 7;
    for (size_t b = 0; b < sizeof budgets / sizeof *budgets; b++) {
        goblin__plan_params p =
            params(100000, 100000, 100000, GOBLIN_DTYPE_F32, budgets[b], b == 0 ? 0 : 0.25, 1);
        struct timespec t0, t1;
        const int reps = 2000;
        goblin__plan *pl = NULL;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int r = 0; r < reps; r++) {
            cr_assert_eq(goblin__plan_matmul(&pl, &p, NULL, 0), GOBLIN_OK);
            goblin__plan_free(pl);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
                    1e3 / reps;
        cr_assert_eq(goblin__plan_matmul(&pl, &p, NULL, 0), GOBLIN_OK);
        goblin_job_plan info;
        goblin__plan_get_info(pl, &info);
        int64_t count = goblin__plan_tile_count(pl);
        cr_log_info("plan 1e5^3 f32 in %llu B: %.2f us to build, %lld tasks (%lld x %lld x %lld), "
                    "task %lld x %lld x %lld = %llu B, %.1f flop/B",
                    (unsigned long long)budgets[b], us, (long long)count,
                    (long long)info.grid_rows, (long long)info.grid_cols,
                    (long long)info.k_slices, (long long)info.tile_rows,
                    (long long)info.tile_cols, (long long)info.tile_k,
                    (unsigned long long)info.max_task_bytes, info.flops_per_byte);
        cr_assert(us < 200, "building a plan took %.1f us", us); /* microseconds, not ms */
        cr_assert(info.max_task_bytes <= info.budget_bytes);
        /* near the cube optimum 2 sqrt(E/3) / 3 flops per element when the cube fits */
        double E = (double)info.budget_bytes / 4;
        double cube = sqrt(E / 3);
        if (cube < 100000) {
            double best = 2 * cube / 3 / 4;
            cr_assert(info.flops_per_byte >= 0.85 * best, "%.2f flop/B vs optimum %.2f",
                      info.flops_per_byte, best);
        }
        /* every dimension's partition is exact and balanced */
        check_dim(pl, info.grid_rows, info.grid_cols * info.k_slices, 0, 100000);
        check_dim(pl, info.grid_cols, info.k_slices, 1, 100000);
        check_dim(pl, info.k_slices, 1, 2, 100000);
        /* random tasks: in range and within budget */
        for (int r = 0; r < 100000; r++) {
            int64_t i = (int64_t)(splitmix() % (uint64_t)count);
            goblin__matmul_tile t;
            cr_assert_eq(goblin__plan_tile(pl, i, &t), GOBLIN_OK);
            uint64_t bytes;
            cr_assert_eq(goblin__matmul_tile_bytes(&t, GOBLIN_DTYPE_F32, &bytes), GOBLIN_OK);
            cr_assert(bytes <= info.budget_bytes);
            cr_assert(t.row0 + t.rows <= 100000 && t.col0 + t.cols <= 100000 &&
                      t.k0 + t.kn <= 100000);
        }
        goblin__matmul_tile last;
        goblin__plan_tile(pl, count - 1, &last);
        cr_assert(last.row0 + last.rows == 100000 && last.col0 + last.cols == 100000 &&
                  last.k0 + last.kn == 100000);
        goblin__plan_free(pl);
    }
}

Test(plan, bad_input_gives_clear_errors) {
    char msg[512];
    goblin__plan *pl = (goblin__plan *)(uintptr_t)0x1; /* must stay untouched on failure */
    goblin__plan_params p;

    p = params(0, 10, 10, GOBLIN_DTYPE_F32, 1 << 20, 0.25, 1);
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_EINVAL);
    cr_assert(strstr(msg, "m, k and n must be >= 1") && strstr(msg, "m=0"), "%s", msg);
    cr_assert_eq(pl, (goblin__plan *)(uintptr_t)0x1);
    p = params(10, -3, 10, GOBLIN_DTYPE_F32, 1 << 20, 0.25, 1);
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_EINVAL);
    cr_assert(strstr(msg, "k=-3"), "%s", msg);
    p = params(10, 10, -1, GOBLIN_DTYPE_F32, 1 << 20, 0.25, 1);
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_EINVAL);
    p = params((int64_t)1 << 41, 10, 10, GOBLIN_DTYPE_F32, 1 << 20, 0.25, 1);
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_EINVAL);
    cr_assert(strstr(msg, "2^40"), "%s", msg);
    p = params(10, 10, 10, (goblin_dtype)99, 1 << 20, 0.25, 1);
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert(strstr(msg, "dtype"), "%s", msg);
    p = params(10, 10, 10, GOBLIN_DTYPE_F32, 1 << 20, 1.0, 1);
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_EINVAL);
    cr_assert(strstr(msg, "headroom"), "%s", msg);
    p.headroom = -0.1;
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_EINVAL);
    p.headroom = NAN;
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_EINVAL);
    p = params(10, 10, 10, GOBLIN_DTYPE_F32, 1 << 20, 0.25, 0);
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_EINVAL);
    cr_assert(strstr(msg, "min_tiles"), "%s", msg);

    /* budget: f32 needs 12 bytes for a 1x1x1 task */
    p = params(10, 10, 10, GOBLIN_DTYPE_F32, 11, 0, 1);
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_ERANGE);
    cr_assert(strstr(msg, "too small") && strstr(msg, "12 bytes"), "%s", msg);
    cr_log_info("budget error: %s", msg);
    p = params(10, 10, 10, GOBLIN_DTYPE_F32, 0, 0, 1);
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_ERANGE);
    cr_assert_eq(pl, (goblin__plan *)(uintptr_t)0x1);
    p = params(10, 10, 10, GOBLIN_DTYPE_F32, 12, 0, 1);
    pl = NULL;
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_OK);
    cr_assert_eq(goblin__plan_tile_count(pl), 1000); /* every task 1x1x1 */
    goblin__plan_free(pl);
    /* f64 with half the budget as headroom needs 48 bytes */
    p = params(3, 3, 3, GOBLIN_DTYPE_F64, 47, 0.5, 1);
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_ERANGE);
    cr_assert(strstr(msg, "give at least 48 bytes"), "%s", msg);
    p.memory_bytes = 48;
    pl = NULL;
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_OK);
    goblin__plan_free(pl);

    /* more tasks than 2^62 */
    p = params((int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40, GOBLIN_DTYPE_F32, 12, 0, 1);
    pl = (goblin__plan *)(uintptr_t)0x1;
    cr_assert_eq(goblin__plan_matmul(&pl, &p, msg, sizeof msg), GOBLIN_ELIMIT);
    cr_assert(strstr(msg, "2^62"), "%s", msg);
    cr_assert_eq(pl, (goblin__plan *)(uintptr_t)0x1);

    /* NULLs */
    p = params(10, 10, 10, GOBLIN_DTYPE_F32, 1 << 20, 0.25, 1);
    cr_assert_eq(goblin__plan_matmul(NULL, &p, msg, sizeof msg), GOBLIN_EINVAL);
    cr_assert_eq(goblin__plan_matmul(&pl, NULL, NULL, 0), GOBLIN_EINVAL);
    cr_assert_eq(goblin__plan_tile_count(NULL), 0);
    goblin__matmul_tile t;
    cr_assert_eq(goblin__plan_tile(NULL, 0, &t), GOBLIN_EINVAL);
    goblin_job_plan info;
    cr_assert_eq(goblin__plan_get_info(NULL, &info), GOBLIN_EINVAL);
    goblin__plan_free(NULL);
    pl = NULL;
    cr_assert_eq(goblin__plan_matmul(&pl, &p, NULL, 0), GOBLIN_OK);
    cr_assert_eq(goblin__plan_tile(pl, 0, NULL), GOBLIN_EINVAL);
    cr_assert_eq(goblin__plan_get_info(pl, NULL), GOBLIN_EINVAL);
    goblin__plan_free(pl);
}

Test(plan, tile_bytes) {
    goblin__matmul_tile t = {0, 3, 0, 5, 0, 7};
    uint64_t b;
    cr_assert_eq(goblin__matmul_tile_bytes(&t, GOBLIN_DTYPE_F32, &b), GOBLIN_OK);
    cr_assert_eq(b, (uint64_t)(3 * 7 + 7 * 5 + 3 * 5) * 4);
    cr_assert_eq(goblin__matmul_tile_bytes(&t, GOBLIN_DTYPE_F64, &b), GOBLIN_OK);
    cr_assert_eq(b, (uint64_t)(3 * 7 + 7 * 5 + 3 * 5) * 8);
    goblin__matmul_tile big = {0, (int64_t)1 << 40, 0, (int64_t)1 << 40, 0, (int64_t)1 << 40};
    cr_assert_eq(goblin__matmul_tile_bytes(&big, GOBLIN_DTYPE_F32, &b), GOBLIN_ELIMIT);
    goblin__matmul_tile neg = {0, -1, 0, 1, 0, 1};
    cr_assert_eq(goblin__matmul_tile_bytes(&neg, GOBLIN_DTYPE_F32, &b), GOBLIN_EINVAL);
    cr_assert_eq(goblin__matmul_tile_bytes(&t, (goblin_dtype)77, &b), GOBLIN_EINVAL);
    cr_assert_eq(goblin__matmul_tile_bytes(NULL, GOBLIN_DTYPE_F32, &b), GOBLIN_EINVAL);
}

/* The planner allocates one small object: failing it is ENOMEM and sets nothing (moved
 * from test_verify's allocation-failure test). */
Test(plan, allocation_failure_returns_enomem_and_leaks_nothing) {
    gt_alloc_on();
    goblin__plan_params pp;
    goblin__plan_params_default(&pp);
    pp.m = pp.k = pp.n = 1000;
    goblin__plan *pl = NULL;
    gt_alloc_fail_from(0);
    char msg[128];
    cr_assert_eq(goblin__plan_matmul(&pl, &pp, msg, sizeof msg), GOBLIN_ENOMEM);
    cr_assert_null(pl);
    gt_allocs.fail_at = -1;
    cr_assert_eq(goblin__plan_matmul(&pl, &pp, msg, sizeof msg), GOBLIN_OK);
    goblin__plan_free(pl);
    cr_assert_eq(gt_allocs.live, 0);
    gt_alloc_off();
}
