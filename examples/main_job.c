/* examples/main_job.c - the project's main job, run by scripts/run_main_job.sh.
 *
 * Builds one real graph
 *
 *     X = A @ B                       A, B: n x n f32 (uniform in [-0.5, 0.5))
 *     F = a * exp(-b * X) + c         FORMULA; a: per-column vector, b, c: scalars
 *     y = sum(F, axis 1)              one value per row
 *
 * evaluates it on the BLIS backend (the reference backend on request), and
 * checks y against an independent computation done here without libgoblin:
 * every row through a double-precision product (bli_dgemm when BLIS is built,
 * plain loops otherwise) with the formula and the sum in double, and a few
 * sampled rows again through plain triple loops, which also checks that
 * reference. The tolerance is the composition of the library's numeric
 * contracts (goblin_op_contract for matmul, formula and sum) with the formula's
 * sensitivity to its input; PASS means every row is inside it.
 *
 * Until the distributed runtime exists this runs in one process. */
#include <goblin/goblin.h>
#include <errno.h>
#include <stdarg.h>
#include <unistd.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef GOBLIN_HAVE_BLIS
#include <blis.h>
#else
typedef long dim_t;
#endif

typedef struct job_opts {
    int64_t n;
    int32_t threads;
    goblin_backend_kind backend;
    uint64_t seed;
    int32_t sample_rows;
} job_opts;

static const float FORMULA_B = 0.125f;
static const float FORMULA_C = 0.5f;
static const char *FORMULA_TEXT = "a * exp(-b * x) + c";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void progress(int step, int steps, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void progress(int step, int steps, const char *fmt, ...) {
    va_list ap;
    printf("[%d/%d] ", step, steps);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* splitmix64: a small, well-mixed generator so the data are reproducible. */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-0.5, 0.5) with 24 random bits: exactly representable in f32. */
static float uniform_f32(uint64_t *s) {
    return (float)((double)(splitmix64(s) >> 40) * 0x1p-24 - 0.5);
}

static int usage(const char *argv0, int rc) {
    fprintf(rc ? stderr : stdout,
            "usage: %s [--n N] [--threads T] [--backend blis|ref] [--seed S] [--sample-rows R]\n"
            "  --n N            matrix size (default 4096: A and B are N x N f32)\n"
            "  --threads T      CPU threads for the backend and the reference (0 = all cores)\n"
            "  --backend NAME   backend to evaluate on (default blis when built, else ref)\n"
            "  --seed S         data seed (default 1)\n"
            "  --sample-rows R  rows recomputed with plain loops (default 8)\n",
            argv0);
    return rc;
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, job_opts *o) {
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    o->n = 4096;
    o->threads = 0;
    o->backend = p.backend;
    o->seed = 1;
    o->sample_rows = 8;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return usage(argv[0], 0), 1;
        if (!v) return usage(argv[0], 2);
        if (strcmp(a, "--n") == 0 && parse_i64(v, 1, 32768, &x) == 0) o->n = x;
        else if (strcmp(a, "--threads") == 0 && parse_i64(v, 0, 1024, &x) == 0) o->threads = (int32_t)x;
        else if (strcmp(a, "--seed") == 0 && parse_i64(v, 0, INT64_MAX, &x) == 0) o->seed = (uint64_t)x;
        else if (strcmp(a, "--sample-rows") == 0 && parse_i64(v, 0, 1 << 20, &x) == 0) o->sample_rows = (int32_t)x;
        else if (strcmp(a, "--backend") == 0 && strcmp(v, "blis") == 0) o->backend = GOBLIN_BACKEND_BLIS;
        else if (strcmp(a, "--backend") == 0 && strcmp(v, "ref") == 0) o->backend = GOBLIN_BACKEND_REF;
        else {
            fprintf(stderr, "%s: bad argument %s %s\n", argv[0], a, v);
            return usage(argv[0], 2);
        }
        i++;
    }
    return 0;
}

/* The graph: returns GOBLIN_OK and the graph in *out, or prints why not. */
static goblin_err build_graph(int64_t n, const float *avec, goblin_graph **out) {
    goblin_graph *g = NULL;
    goblin_formula *f = NULL;
    goblin_errbuf ferr;
    goblin_err e = goblin_graph_new(&g);
    if (e) {
        fprintf(stderr, "graph_new: %s\n", goblin_strerror(e));
        return e;
    }
    int64_t sq[2] = {n, n}, vec[1] = {n};
    int32_t id_a_mat, id_b_mat, id_x, id_avec, id_b, id_c, id_f, id_y;
    float bval = FORMULA_B, cval = FORMULA_C;
    goblin_tensor t_avec, t_b, t_c;
    goblin_tensor_init(&t_avec, GOBLIN_DTYPE_F32, 1, vec, (void *)avec);
    goblin_tensor_init(&t_b, GOBLIN_DTYPE_F32, 0, NULL, &bval);
    goblin_tensor_init(&t_c, GOBLIN_DTYPE_F32, 0, NULL, &cval);

#define CHECK(call)                                                                               \
    do {                                                                                          \
        e = (call);                                                                               \
        if (e) {                                                                                  \
            fprintf(stderr, "building the graph failed: %s: %s\n", goblin_strerror(e),             \
                    goblin_graph_error(g));                                                       \
            goto fail;                                                                            \
        }                                                                                         \
    } while (0)

    CHECK(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sq, &id_a_mat));
    CHECK(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sq, &id_b_mat));
    int32_t mm_in[2] = {id_a_mat, id_b_mat};
    CHECK(goblin_graph_add(g, GOBLIN_OP_MATMUL, mm_in, 2, NULL, 0, &id_x));
    CHECK(goblin_graph_constant(g, &t_avec, &id_avec));
    CHECK(goblin_graph_constant(g, &t_b, &id_b));
    CHECK(goblin_graph_constant(g, &t_c, &id_c));

    e = goblin_formula_parse(FORMULA_TEXT, &f, &ferr);
    if (e) {
        fprintf(stderr, "formula '%s': %s at %d: %s\n", FORMULA_TEXT, goblin_strerror(e), ferr.position,
                ferr.message);
        goto fail;
    }
    /* Bind by name: the variables come in order of first appearance. */
    int32_t nv = goblin_formula_var_count(f), fin[GOBLIN_FORMULA_MAX_VARS];
    for (int32_t i = 0; i < nv; i++) {
        const char *name = goblin_formula_var_name(f, i);
        if (strcmp(name, "a") == 0) fin[i] = id_avec;
        else if (strcmp(name, "b") == 0) fin[i] = id_b;
        else if (strcmp(name, "c") == 0) fin[i] = id_c;
        else if (strcmp(name, "x") == 0) fin[i] = id_x;
        else {
            fprintf(stderr, "formula: unexpected variable %s\n", name);
            e = GOBLIN_EINVAL;
            goto fail;
        }
    }
    CHECK(goblin_graph_add_formula(g, f, fin, nv, &id_f));
    int64_t axes[1] = {1};
    goblin_attr sum_attrs[1] = {goblin_attr_ints(GOBLIN_ATTR_AXES, axes, 1)};
    CHECK(goblin_graph_add(g, GOBLIN_OP_SUM, &id_f, 1, sum_attrs, 1, &id_y));
    CHECK(goblin_graph_output(g, id_y));
#undef CHECK
    goblin_formula_free(f);
    *out = g;
    return GOBLIN_OK;
fail:
    goblin_formula_free(f);
    goblin_graph_free(g);
    return e;
}

/* Reference rows [r0, r1): X in double, then the formula and the row sum in
 * double. Also accumulates the per-row error bound (see check()). */
typedef struct ref_ctx {
    int64_t n;
    const float *A, *B, *avec;
    const double *colnorm; /* ||B[:, j]||_2 */
    double rel_mm, abs_mm, rel_f, abs_f, rel_sum, abs_sum;
    double *yref, *bound;
} ref_ctx;

/* Error bound and reference for one row, given that row of X in double.
 *   matmul:  |dX_ij| <= rel_mm * S_ij + abs_mm with S_ij = sum_k |A_ik B_kj|
 *            <= ||A_i|| ||B_:j|| (Cauchy-Schwarz), plus the double reference's
 *            own error (2 n 2^-53 S_ij, negligible).
 *   formula: the input error moves a*exp(-b x) by at most
 *            |a exp(-b x)| (exp(|b| |dX|) - 1); its own evaluation error is
 *            rel_f * (|a exp(-b x)| + |c|) + abs_f, plus |a exp(-b x)| |b x| u
 *            for rounding b*x before exp (an argument error exp amplifies,
 *            which no per-op relative contract covers).
 *   sum:     rel_sum * sum_j |F_ij| + abs_sum over the formula's outputs. */
static void ref_row(const ref_ctx *c, int64_t i, const double *xrow) {
    const double b = FORMULA_B, cc = FORMULA_C, u = 0x1p-24;
    double anorm = 0, y = 0, bnd = 0, fabs_sum = 0;
    for (int64_t k = 0; k < c->n; k++) anorm += (double)c->A[i * c->n + k] * c->A[i * c->n + k];
    anorm = sqrt(anorm);
    for (int64_t j = 0; j < c->n; j++) {
        double x = xrow[j];
        double e = (double)c->avec[j] * exp(-b * x);
        double fv = e + cc;
        double s = anorm * c->colnorm[j];
        double dx = c->rel_mm * s + c->abs_mm + 2.0 * (double)c->n * 0x1p-53 * s;
        double prop = fabs(e) * expm1(fabs(b) * dx);
        double own = c->rel_f * (fabs(e) + fabs(cc)) + c->abs_f + fabs(e) * fabs(b * x) * u;
        y += fv;
        bnd += prop + own;
        fabs_sum += fabs(fv) + prop + own;
    }
    c->yref[i] = y;
    c->bound[i] = bnd + c->rel_sum * fabs_sum + c->abs_sum;
}

static int reference(const ref_ctx *c, dim_t threads) {
    const int64_t n = c->n, blk = 1024; /* rows per dgemm call: fewer calls, fewer packings of B */
    double *xb = malloc(sizeof(double) * (size_t)(blk * n));
    if (!xb) return -1;
#ifdef GOBLIN_HAVE_BLIS
    double *ad = malloc(sizeof(double) * (size_t)(blk * n));
    double *bd = malloc(sizeof(double) * (size_t)(n * n));
    if (!ad || !bd) {
        free(xb), free(ad), free(bd);
        return -1;
    }
    for (int64_t t = 0; t < n * n; t++) bd[t] = c->B[t];
    bli_thread_set_num_threads(threads);
#endif
    for (int64_t r0 = 0; r0 < n; r0 += blk) {
        int64_t rows = n - r0 < blk ? n - r0 : blk;
#ifdef GOBLIN_HAVE_BLIS
        for (int64_t t = 0; t < rows * n; t++) ad[t] = c->A[r0 * n + t];
        double one = 1.0, zero = 0.0;
        bli_dgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, (dim_t)rows, (dim_t)n, (dim_t)n, &one, ad, (inc_t)n, 1,
                  bd, (inc_t)n, 1, &zero, xb, (inc_t)n, 1);
#else
        for (int64_t i = 0; i < rows; i++) {
            double *xr = xb + i * n;
            for (int64_t j = 0; j < n; j++) xr[j] = 0;
            for (int64_t k = 0; k < n; k++) {
                double aik = c->A[(r0 + i) * n + k];
                const float *br = c->B + k * n;
                for (int64_t j = 0; j < n; j++) xr[j] += aik * br[j];
            }
        }
#endif
        for (int64_t i = 0; i < rows; i++) ref_row(c, r0 + i, xb + i * n);
    }
    free(xb);
#ifdef GOBLIN_HAVE_BLIS
    free(ad);
    free(bd);
#endif
    return 0;
}

/* Row i of X by plain triple loops in double: independent of any BLAS. */
static void plain_row(const ref_ctx *c, int64_t i, double *xr) {
    const int64_t n = c->n;
    for (int64_t j = 0; j < n; j++) xr[j] = 0;
    for (int64_t k = 0; k < n; k++) {
        double aik = c->A[i * n + k];
        const float *br = c->B + k * n;
        for (int64_t j = 0; j < n; j++) xr[j] += aik * (double)br[j];
    }
}

int main(int argc, char **argv) {
    job_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    const int steps = 6;
    const int64_t n = o.n;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t ref_threads = o.threads > 0 ? o.threads : (int32_t)(ncpu > 0 ? ncpu : 1);
    double t0 = now_s();

    printf("GPU Goblin main job: y = sum(a * exp(-b * (A @ B)) + c, axis 1), A, B: %lld x %lld f32\n",
           (long long)n, (long long)n);
    printf("libgoblin %s, catalogue %u, backend %s, threads %d (0 = all %ld cores)\n", GOBLIN_VERSION_STRING,
           goblin_catalog_version(), goblin_backend_name(o.backend), o.threads, ncpu);
    goblin_err e = goblin_backend_available(o.backend);
    if (e) {
        fprintf(stderr, "backend %s is not available here: %s\n", goblin_backend_name(o.backend),
                goblin_strerror(e));
        return 2;
    }

    /* 1: data */
    size_t nn = (size_t)n * (size_t)n;
    float *A = malloc(sizeof(float) * nn), *B = malloc(sizeof(float) * nn);
    float *avec = malloc(sizeof(float) * (size_t)n);
    double *colnorm = calloc((size_t)n, sizeof(double));
    double *yref = malloc(sizeof(double) * (size_t)n), *bound = malloc(sizeof(double) * (size_t)n);
    double *xr = malloc(sizeof(double) * (size_t)n);
    goblin_graph *g = NULL;
    goblin_exec *ex = NULL;
    goblin_tensor out;
    memset(&out, 0, sizeof out);
    rc = 2;
    if (!A || !B || !avec || !colnorm || !yref || !bound || !xr) {
        fprintf(stderr, "out of memory for n = %lld\n", (long long)n);
        goto done;
    }
    progress(1, steps, "generating A and B (%.1f MiB each) and the formula's parameters",
             (double)(sizeof(float) * nn) / 1048576.0);
    uint64_t st = o.seed;
    for (size_t t = 0; t < nn; t++) A[t] = uniform_f32(&st);
    for (size_t t = 0; t < nn; t++) B[t] = uniform_f32(&st);
    for (int64_t j = 0; j < n; j++) avec[j] = 0.75f + 0.5f * uniform_f32(&st);
    for (int64_t k = 0; k < n; k++)
        for (int64_t j = 0; j < n; j++) colnorm[j] += (double)B[k * n + j] * B[k * n + j];
    for (int64_t j = 0; j < n; j++) colnorm[j] = sqrt(colnorm[j]);

    /* 2: graph */
    if (build_graph(n, avec, &g)) goto done;
    progress(2, steps, "graph built: %d nodes (2 inputs, matmul, 3 constants, formula '%s', sum over axis 1)",
             goblin_graph_node_count(g), FORMULA_TEXT);

    ref_ctx c = {.n = n, .A = A, .B = B, .avec = avec, .colnorm = colnorm, .yref = yref, .bound = bound};
    if (goblin_op_contract(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, n, &c.rel_mm, &c.abs_mm) ||
        goblin_op_contract(GOBLIN_OP_FORMULA, GOBLIN_DTYPE_F32, 1, &c.rel_f, &c.abs_f) ||
        goblin_op_contract(GOBLIN_OP_SUM, GOBLIN_DTYPE_F32, n, &c.rel_sum, &c.abs_sum)) {
        fprintf(stderr, "a numeric contract is missing from the catalogue\n");
        goto done;
    }
    printf("      contracts (rel, abs): matmul k=%lld %.3g, %.3g; formula %.3g, %.3g; sum k=%lld %.3g, %.3g\n",
           (long long)n, c.rel_mm, c.abs_mm, c.rel_f, c.abs_f, (long long)n, c.rel_sum, c.abs_sum);

    /* 3: evaluate */
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = o.backend;
    p.threads = o.threads;
    e = goblin_exec_new(&ex, g, &p);
    if (e) {
        fprintf(stderr, "exec_new: %s\n", goblin_strerror(e));
        goto done;
    }
    goblin_tensor in[2];
    int64_t sq[2] = {n, n};
    goblin_tensor_init(&in[0], GOBLIN_DTYPE_F32, 2, sq, A);
    goblin_tensor_init(&in[1], GOBLIN_DTYPE_F32, 2, sq, B);
    progress(3, steps, "evaluating on %s ...", goblin_backend_name(o.backend));
    double te = now_s();
    e = goblin_exec_run(ex, in, 2, &out, 1);
    te = now_s() - te;
    if (e) {
        fprintf(stderr, "exec_run: %s: %s\n", goblin_strerror(e), goblin_exec_error(ex));
        goto done;
    }
    if (out.dtype != GOBLIN_DTYPE_F32 || out.rank != 1 || out.shape[0] != n || !out.data) {
        fprintf(stderr, "unexpected output: dtype %s rank %d\n", goblin_dtype_name(out.dtype), out.rank);
        goto done;
    }
    goblin_exec_stats stats;
    goblin_exec_stats_get(ex, &stats);
    printf("      done in %.3f s (%.1f GFLOP/s for the matmul's 2n^3 flops); %lld nodes run, %lld on the "
           "reference backend as fallback\n",
           te, 2.0 * (double)n * (double)n * (double)n / te * 1e-9, (long long)stats.nodes_run,
           (long long)stats.nodes_fallback);

    /* 4: independent reference */
    progress(4, steps, "independent reference in double (%s, %d threads) ...",
#ifdef GOBLIN_HAVE_BLIS
             "bli_dgemm",
#else
             "plain loops",
#endif
             ref_threads);
    double tr = now_s();
    if (reference(&c, (dim_t)ref_threads)) {
        fprintf(stderr, "out of memory for the reference\n");
        goto done;
    }
    printf("      done in %.3f s\n", now_s() - tr);

    /* 5: sampled rows by plain loops (checks the reference too) */
    int32_t ns = o.sample_rows < n ? o.sample_rows : (int32_t)n;
    progress(5, steps, "recomputing %d sampled rows with plain loops ...", ns);
    double worst_ref = 0;
    int bad = 0;
    const float *y = out.data;
    for (int32_t s = 0; s < ns; s++) {
        int64_t i = ns > 1 ? (int64_t)s * (n - 1) / (ns - 1) : 0;
        double y1 = yref[i], b1 = bound[i];
        plain_row(&c, i, xr);
        ref_row(&c, i, xr); /* overwrites yref[i]/bound[i] with the plain-loop values */
        double d = fabs(yref[i] - y1) / (b1 > 0 ? b1 : 1);
        if (d > worst_ref) worst_ref = d;
        if (d > 1e-3) bad = 1; /* two double references must agree far inside the bound */
        if (fabs((double)y[i] - yref[i]) > bound[i]) bad = 1;
    }
    printf("      references agree to %.2e of the bound\n", worst_ref);

    /* 6: compare */
    double max_abs = 0, max_rel = 0, max_ratio = 0;
    int64_t worst = 0, outside = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)y[i] - yref[i]);
        if (!(d <= bound[i])) outside++; /* NaN counts as outside */
        double ratio = bound[i] > 0 ? d / bound[i] : (d == 0 ? 0 : INFINITY);
        if (isnan(d)) ratio = INFINITY;
        if (d > max_abs) max_abs = d;
        if (yref[i] != 0 && d / fabs(yref[i]) > max_rel) max_rel = d / fabs(yref[i]);
        if (ratio > max_ratio || i == 0) {
            max_ratio = ratio;
            worst = i;
        }
    }
    progress(6, steps, "checked %lld rows: max abs error %.3e, max rel error %.3e", (long long)n, max_abs,
             max_rel);
    printf("      worst row %lld: y = %.9g, reference %.9g, error %.3e = %.2e of the contract bound %.3e\n",
           (long long)worst, (double)y[worst], yref[worst], fabs((double)y[worst] - yref[worst]), max_ratio,
           bound[worst]);
    printf("      rows outside the bound: %lld; total time %.2f s\n", (long long)outside, now_s() - t0);
    rc = (outside == 0 && !bad) ? 0 : 1;
    printf("%s\n", rc == 0 ? "PASS" : "FAIL");

done:
    goblin_buffer_free(out.data);
    goblin_exec_free(ex);
    goblin_graph_free(g);
    free(A), free(B), free(avec), free(colnorm), free(yref), free(bound), free(xr);
    return rc;
}
