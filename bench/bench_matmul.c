/* bench/bench_matmul.c - MATMUL on the BLIS backend against calling BLIS directly.
 *
 *     build/bench/bench_matmul [max_n]        (sizes 1024, 2048, 4096 up to max_n)
 *
 * For f32 and f64 square products C = A B it times, in the same run and with the
 * same thread count (GOBLIN_BENCH_THREADS, default 2):
 *   - libgoblin: a one-node MATMUL graph run by a reused executor on the BLIS
 *     backend, writing into a caller buffer;
 *   - bli_?gemm_ex with a per-call rntm_t of that thread count, as a user would
 *     call it (BLIS's defaults, small-matrix "sup" path enabled);
 *   - bli_?gemm_ex with sup disabled: the exact call libgoblin makes for these
 *     sizes (it disables sup so that results do not depend on the thread count),
 *     i.e. the wrapper's own overhead.
 * Each figure is the best of several runs (interleaved) after a warm-up. Prints
 * Markdown on stdout; ratios are libgoblin / direct (goal >= 0.97). */
#include <blis.h>
#include <goblin/goblin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Wall time, and CPU time of the whole process (all threads): on a shared machine
 * the CPU-time ratio still measures the wrapper's overhead when wall time is noisy. */
typedef struct tm2 {
    double wall, cpu;
} tm2;

static tm2 now(void) {
    return (tm2){clock_s(CLOCK_MONOTONIC), clock_s(CLOCK_PROCESS_CPUTIME_ID)};
}

static tm2 since(tm2 t0) {
    tm2 t = now();
    return (tm2){t.wall - t0.wall, t.cpu - t0.cpu};
}

static void keep_best(tm2 *best, tm2 t) {
    if (t.wall < best->wall) best->wall = t.wall;
    if (t.cpu < best->cpu) best->cpu = t.cpu;
}

typedef struct mm {
    goblin_dtype dt;
    int64_t n;
    void *a, *b, *c_goblin, *c_direct, *c_conv;
    goblin_graph *g;
    goblin_exec *ex;
    goblin_tensor in[2], out;
    int32_t threads;
} mm;

static int setup(mm *m, goblin_dtype dt, int64_t n, int32_t threads) {
    memset(m, 0, sizeof *m);
    m->dt = dt;
    m->n = n;
    m->threads = threads;
    size_t es = goblin_dtype_size(dt), bytes = (size_t)(n * n) * es;
    m->a = malloc(bytes);
    m->b = malloc(bytes);
    m->c_goblin = calloc(1, bytes);
    m->c_direct = calloc(1, bytes);
    m->c_conv = calloc(1, bytes);
    if (!m->a || !m->b || !m->c_goblin || !m->c_direct || !m->c_conv) return -1;
    unsigned s = 12345;
    for (int64_t i = 0; i < n * n; i++) {
        double x = (double)(s = s * 1103515245u + 12345u) / 4294967296.0 - 0.5;
        double y = (double)(s = s * 1103515245u + 12345u) / 4294967296.0 - 0.5;
        if (dt == GOBLIN_DTYPE_F32) {
            ((float *)m->a)[i] = (float)x;
            ((float *)m->b)[i] = (float)y;
        } else {
            ((double *)m->a)[i] = x;
            ((double *)m->b)[i] = y;
        }
    }
    int64_t shape[2] = {n, n};
    int32_t ia, ib, y;
    if (goblin_graph_new(&m->g) || goblin_graph_input(m->g, dt, 2, shape, &ia) ||
        goblin_graph_input(m->g, dt, 2, shape, &ib) ||
        goblin_graph_add(m->g, GOBLIN_OP_MATMUL, (int32_t[]){ia, ib}, 2, NULL, 0, &y) ||
        goblin_graph_output(m->g, y))
        return -1;
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_BLIS;
    p.threads = threads;
    if (goblin_exec_new(&m->ex, m->g, &p)) return -1;
    goblin_tensor_init(&m->in[0], dt, 2, shape, m->a);
    goblin_tensor_init(&m->in[1], dt, 2, shape, m->b);
    goblin_tensor_init(&m->out, dt, 2, shape, m->c_goblin);
    return 0;
}

static void teardown(mm *m) {
    goblin_exec_free(m->ex);
    goblin_graph_free(m->g);
    free(m->a);
    free(m->b);
    free(m->c_goblin);
    free(m->c_direct);
    free(m->c_conv);
}

static tm2 run_goblin(mm *m) {
    tm2 t0 = now();
    goblin_err e = goblin_exec_run(m->ex, m->in, 2, &m->out, 1);
    tm2 t = since(t0);
    if (e) {
        fprintf(stderr, "goblin_exec_run: %s: %s\n", goblin_err_name(e), goblin_exec_error(m->ex));
        exit(1);
    }
    return t;
}

static tm2 run_direct(mm *m, bool sup, void *c) {
    rntm_t r;
    bli_rntm_init(&r);
    bli_rntm_set_num_threads(m->threads, &r);
    if (!sup) bli_rntm_disable_l3_sup(&r);
    dim_t n = m->n;
    tm2 t0 = now();
    if (m->dt == GOBLIN_DTYPE_F32) {
        float al = 1, be = 0;
        bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, n, n, n, &al, m->a, n, 1, m->b, n, 1, &be,
                     c, n, 1, NULL, &r);
    } else {
        double al = 1, be = 0;
        bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, n, n, n, &al, m->a, n, 1, m->b, n, 1, &be,
                     c, n, 1, NULL, &r);
    }
    return since(t0);
}

int main(int argc, char **argv) {
    int64_t max_n = argc > 1 ? atoll(argv[1]) : 4096;
    const char *env = getenv("GOBLIN_BENCH_THREADS");
    int32_t threads = env && atoi(env) > 0 ? atoi(env) : 2;
    const int64_t sizes[] = {1024, 2048, 4096};
    const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    if (goblin_backend_available(GOBLIN_BACKEND_BLIS) != GOBLIN_OK) {
        printf("BLIS backend not built: nothing to measure.\n");
        return 0;
    }
    printf("Square C = A B, %d threads for every row (libgoblin exec params and BLIS per-call "
           "rntm_t), best of several interleaved runs after a warm-up. BLIS %s, sub-config %s.\n\n",
           threads, bli_info_get_version_str(), bli_arch_string(bli_arch_query_id()));
    printf("| dtype | n | libgoblin GF/s | bli_gemm (defaults) GF/s | **ratio** | bli_gemm (sup off, "
           "libgoblin's call) GF/s | ratio | CPU-time ratios (defaults / sup off) | bit-equal to "
           "sup-off call |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int d = 0; d < 2; d++) {
        for (int s = 0; s < 3 && sizes[s] <= max_n; s++) {
            int64_t n = sizes[s];
            mm m;
            if (setup(&m, dts[d], n, threads)) {
                fprintf(stderr, "setup failed for n = %lld\n", (long long)n);
                return 1;
            }
            int reps = n <= 1024 ? 9 : n <= 2048 ? 5 : 3;
            fprintf(stderr, "[bench_matmul] %s n=%lld, %d runs each\n", goblin_dtype_name(dts[d]),
                    (long long)n, reps);
            run_goblin(&m); /* warm-up: page faults, BLIS memory pools, OpenMP threads */
            run_direct(&m, true, m.c_direct);
            run_direct(&m, false, m.c_conv);
            tm2 tg = {1e30, 1e30}, td = tg, tc = tg;
            for (int r = 0; r < reps; r++) {
                keep_best(&tg, run_goblin(&m));
                keep_best(&td, run_direct(&m, true, m.c_direct));
                keep_best(&tc, run_direct(&m, false, m.c_conv));
            }
            double fl = 2.0 * (double)n * (double)n * (double)n * 1e-9;
            bool same = memcmp(m.c_goblin, m.c_conv, (size_t)(n * n) * goblin_dtype_size(dts[d])) == 0;
            printf("| %s | %lld | %.1f | %.1f | **%.3f** | %.1f | %.3f | %.3f / %.3f | %s |\n",
                   goblin_dtype_name(dts[d]), (long long)n, fl / tg.wall, fl / td.wall,
                   td.wall / tg.wall, fl / tc.wall, tc.wall / tg.wall, td.cpu / tg.cpu,
                   tc.cpu / tg.cpu, same ? "yes" : "NO");
            fflush(stdout);
            teardown(&m);
        }
    }
    printf("\nRatios are direct time / libgoblin time (1.0 = no overhead, goal >= 0.97); the "
           "CPU-time ratios use the process's CPU time (all threads) and are the steadier "
           "figure on a shared machine. "
           "libgoblin always runs these sizes on BLIS's packed (conventional) path, which "
           "gives the same bits for any thread count; bli_gemm's defaults may use the "
           "small-matrix path instead.\n");
    return 0;
}
