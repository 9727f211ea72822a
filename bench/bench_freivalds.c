/* bench/bench_freivalds.c - the node's Freivalds check of a matmul job's tiles.
 *
 *     build/bench/bench_freivalds [n] [runs]        (defaults 4096 and 5)
 *
 * For an f32 job C = A B of n x n x n (C from the BLIS backend, 2 threads) cut
 * into 4 row panels x 2 column panels, as the node checks it, it times in thread
 * CPU time (best of `runs`):
 *   - the panels object: new (the pass over B), 4 prepares (the passes over A,
 *     both column panels at once) and 8 checks (the passes over the tiles of C);
 *   - one goblin_verify_matmul of a tile (n/4 x n x n/2), which makes all three
 *     passes for that tile;
 *   - the same job judged a row panel at a time, as the node does by default for
 *     jobs of one K-slice: a panels object with one panel of width n, 4 prepares,
 *     4 checks of n/4 x n row panels (docs/verification.md, "A row panel's tiles at
 *     once"), interleaved with the runs above;
 * with 4 vectors (the default), and prints the time per element read. Every tile
 * must be accepted (the run fails otherwise). Prints Markdown on stdout. */
#include <goblin/goblin.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* internal (libgoblin/verify/freivalds_element.c): the element stage on or off */
void goblin__freivalds_element_stage(bool on);

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void keep_min(double *best, double t) {
    if (t < *best) *best = t;
}

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 4096;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    if (n < 8 || n % 8 || runs < 1) {
        fprintf(stderr, "usage: bench_freivalds [n (a multiple of 8)] [runs]\n");
        return 2;
    }
    size_t bytes = (size_t)(n * n) * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    if (!a || !b || !c) return 1;
    unsigned s = 12345;
    for (int64_t i = 0; i < n * n; i++) {
        a[i] = (float)((double)(s = s * 1103515245u + 12345u) / 4294967296.0 - 0.5);
        b[i] = (float)((double)(s = s * 1103515245u + 12345u) / 4294967296.0 - 0.5);
    }
    int64_t shape[2] = {n, n};
    goblin_tensor ta, tb, tc;
    goblin_tensor_init(&ta, GOBLIN_DTYPE_F32, 2, shape, a);
    goblin_tensor_init(&tb, GOBLIN_DTYPE_F32, 2, shape, b);
    goblin_tensor_init(&tc, GOBLIN_DTYPE_F32, 2, shape, c);
    goblin_graph *g = NULL;
    goblin_exec *ex = NULL;
    int32_t ia, ib, y;
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.backend = GOBLIN_BACKEND_BLIS;
    ep.threads = 2;
    goblin_tensor ins[2] = {ta, tb};
    if (goblin_graph_new(&g) || goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, shape, &ia) ||
        goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, shape, &ib) ||
        goblin_graph_add(g, GOBLIN_OP_MATMUL, (int32_t[]){ia, ib}, 2, NULL, 0, &y) ||
        goblin_graph_output(g, y) || goblin_exec_new(&ex, g, &ep) ||
        goblin_exec_run(ex, ins, 2, &tc, 1)) {
        fprintf(stderr, "the product failed\n");
        return 1;
    }
    goblin_exec_free(ex);
    goblin_graph_free(g);

    int64_t rows = n / 4, cols = n / 2, cb[3] = {0, cols, n};
    /* [0]: with the element stage (the library's default), [1]: the row check alone */
    double t_new[2] = {1e30, 1e30}, t_prep[2] = {1e30, 1e30}, t_check[2] = {1e30, 1e30};
    double t_tile[2] = {1e30, 1e30};
    double r_new[2] = {1e30, 1e30}, r_prep[2] = {1e30, 1e30}, r_check[2] = {1e30, 1e30};
    int accepted = 0, checks = 0;
    for (int run = 0; run < 2 * runs; run++) {
        int st = run % 2; /* interleaved */
        goblin__freivalds_element_stage(st == 0);
        goblin_freivalds_params p;
        goblin_freivalds_params_default(&p);
        p.seed = 0x5eed + (uint64_t)(run / 2);
        goblin_freivalds_panels *fp = NULL;
        double t0 = cpu_s();
        if (goblin_freivalds_panels_new(&ta, &tb, 2, cb, &p, &fp)) return 1;
        double t1 = cpu_s();
        for (int r = 0; r < 4; r++)
            if (goblin_freivalds_panels_prepare(fp, r * rows, rows)) return 1;
        double t2 = cpu_s();
        for (int r = 0; r < 4; r++)
            for (int q = 0; q < 2; q++) {
                goblin_tensor t = tc;
                t.shape[0] = rows;
                t.shape[1] = cols;
                t.data = c + r * rows * n + q * cols;
                goblin_verdict v;
                if (goblin_freivalds_panels_check(fp, r * rows, rows, q, &t, &v)) return 1;
                accepted += v.kind == GOBLIN_VERDICT_ACCEPT;
                checks++;
            }
        double t3 = cpu_s();
        goblin_freivalds_panels_free(fp);
        keep_min(&t_new[st], t1 - t0);
        keep_min(&t_prep[st], t2 - t1);
        keep_min(&t_check[st], t3 - t2);
        /* one tile alone: A's row panel, B's column panel, C's tile */
        goblin_tensor at = ta, bt = tb, ct = tc;
        at.shape[0] = rows;
        bt.shape[1] = cols;
        ct.shape[0] = rows;
        ct.shape[1] = cols;
        goblin_verdict v;
        t0 = cpu_s();
        if (goblin_verify_matmul(&at, &bt, &ct, &p, &v)) return 1;
        keep_min(&t_tile[st], cpu_s() - t0);
        accepted += v.kind == GOBLIN_VERDICT_ACCEPT;
        checks++;
        /* a row panel at a time: one panel spanning all n columns */
        int64_t cb1[2] = {0, n};
        t0 = cpu_s();
        if (goblin_freivalds_panels_new(&ta, &tb, 1, cb1, &p, &fp)) return 1;
        t1 = cpu_s();
        for (int r = 0; r < 4; r++)
            if (goblin_freivalds_panels_prepare(fp, r * rows, rows)) return 1;
        t2 = cpu_s();
        for (int r = 0; r < 4; r++) {
            goblin_tensor t = tc;
            t.shape[0] = rows;
            t.data = c + r * rows * n;
            if (goblin_freivalds_panels_check(fp, r * rows, rows, 0, &t, &v)) return 1;
            accepted += v.kind == GOBLIN_VERDICT_ACCEPT;
            checks++;
        }
        t3 = cpu_s();
        goblin_freivalds_panels_free(fp);
        keep_min(&r_new[st], t1 - t0);
        keep_min(&r_prep[st], t2 - t1);
        keep_min(&r_check[st], t3 - t2);
    }
    double nn = (double)n * (double)n;
    goblin__freivalds_element_stage(true);
    printf("### Freivalds check, f32 %lld^3 job, 4 x 2 tiles, 4 vectors (thread CPU, best of %d)\n\n"
           "Judged tile by tile (panels: ...), and a row panel at a time (row panels at once: ...); "
           "with the element stage (the default) and the row check alone, interleaved.\n\n",
           (long long)n, runs);
    printf("| check | CPU | per element read | row check alone | ratio |\n|---|---|---|---|---|\n");
    double tile_elems = (double)rows * (double)n + (double)n * (double)cols + (double)rows * cols;
    double job[2], rjob[2];
    for (int q = 0; q < 2; q++) {
        job[q] = t_new[q] + t_prep[q] + t_check[q];
        rjob[q] = r_new[q] + r_prep[q] + r_check[q];
    }
    struct { const char *what; const double *t; double elems; } rowsv[] = {
        {"panels: new (the pass over B)", t_new, nn},
        {"panels: 4 prepares (the passes over A, 2 column panels)", t_prep, nn},
        {"panels: 8 checks (the passes over C)", t_check, nn},
        {"panels: the whole job", job, 3 * nn},
        {"one tile, goblin_verify_matmul", t_tile, tile_elems},
        {"row panels at once: new (the pass over B)", r_new, nn},
        {"row panels at once: 4 prepares (the passes over A, one panel of width n)", r_prep, nn},
        {"row panels at once: 4 checks (the passes over C, n/4 x n each)", r_check, nn},
        {"row panels at once: the whole job (the node's default)", rjob, 3 * nn},
    };
    for (size_t q = 0; q < sizeof rowsv / sizeof *rowsv; q++)
        printf("| %s | %.1f ms | %.2f ns | %.1f ms | %.2f |\n", rowsv[q].what, rowsv[q].t[0] * 1e3,
               rowsv[q].t[0] / rowsv[q].elems * 1e9, rowsv[q].t[1] * 1e3, rowsv[q].t[0] / rowsv[q].t[1]);
    printf("\n%d of %d checks accepted\n", accepted, checks);
    free(a);
    free(b);
    free(c);
    return accepted == checks ? 0 : 1;
}
