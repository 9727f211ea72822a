/* bench/bench_grid.c - the distributed runtime against calling BLIS directly.
 *
 *     build/bench/bench_grid                 (all sections; Markdown on stdout)
 *     build/bench/bench_grid --blis N     (for bench_grid.py --client: direct BLIS, 2 threads,
 *                                          one time per line read on stdin)
 *     build/bench/bench_grid --procs N [tls] [serve]
 *         for bench_grid.py: a node + 2 worker processes computing N x N products;
 *         prints "best_s tile_rows tile_cols tile_k tasks", or with serve prints the
 *         plan line after a warm-up and then one job time per line read on stdin
 *
 * In one run, with the thread counts printed next to each figure:
 *   1. the embedded grid (goblin_grid_local, T workers x 1 thread, Freivalds on every
 *      tile) against bli_sgemm_ex with T threads, f32 N x N (goal >= 0.90);
 *   2. a node in this process + 2 goblin-worker processes (1 thread each) over tcp
 *      loopback, and over tls+tcp with a generated identity (workers pin the
 *      fingerprint), against bli_sgemm_ex with 2 threads (goal >= 0.80), with the CPU
 *      time per job of the node and the workers (/proc/PID/stat): what TLS adds to it
 *      is the time spent in TLS (encryption and records);
 *   3. verification overhead: the embedded-grid job with Freivalds against the same
 *      job with GOBLIN_VERIFY_UNSAFE_NONE (goal <= 2%; best of at least 15
 *      interleaved runs each at n <= 4096, and at 8192 one run each after a warm-up);
 *   4. scheduler throughput: a matmul cut into tiny tiles (the node has no other task
 *      type) through a node with W in-process workers dialing tcp loopback (the real
 *      protocol and transport), W = 1 .. 256 (goal >= 20,000 tasks/s at W = 4). Tiny
 *      TASKs go in batches of up to 16 per message (protocol 1.1, docs/wire-protocol.md);
 *   5. idle connections: a matmul on 2 in-process workers (tcp loopback) alone, and with
 *      I simulated workers connected that speak the real protocol (HELLO, PROOF, then only
 *      HEARTBEATs: idle_peers.h), goal >= 0.90 (jobs are cut by the workers that ask for
 *      work: docs/runtime.md, "Capacity"), and for contrast the same job cut by the
 *      connections (min_tasks = 4 per connected peer, the rule before).
 * Ratios are direct time / goblin time (> 1: goblin faster). Each figure is the best
 * of a few interleaved runs after a warm-up.
 *
 * Environment: GOBLIN_BENCH_THREADS (T, default 2), GOBLIN_BENCH_GRID_N (default 4096),
 * GOBLIN_BENCH_GRID_BIG=0 skips section 1 at 8192 (run by default: the whole program
 * takes about 3 minutes on a loaded 2-core machine, 1 without it), GOBLIN_BENCH_GRID_EMBEDDED_ONLY=1
 * runs only sections 1 and 3 (the embedded grid and its verification overhead), GOBLIN_BENCH_GRID_REPS
 * (default 2), GOBLIN_BENCH_GRID_SCHED_ONLY=1 runs only section 4 (W up to
 * GOBLIN_BENCH_GRID_SCHED_MAX_W, default 256; GOBLIN_BENCH_GRID_SCHED_W=1,4,... picks the
 * W values, GOBLIN_BENCH_GRID_SCHED_REPS the runs per W, GOBLIN_BENCH_GRID_SCHED_TASKS
 * the tiles per job, default 4096), GOBLIN_BENCH_GRID_PORT (first tcp port to try;
 * default random), GOBLIN_BENCH_GRID_WORKER (path of goblin-worker; default
 * ../tools/goblin-worker next to this program), GOBLIN_BENCH_GRID_IDLE (I, default 1000),
 * GOBLIN_BENCH_GRID_IDLE_N (its product's size, default 1024), GOBLIN_BENCH_GRID_IDLE_ONLY=1
 * runs only section 5. */
#define _GNU_SOURCE
#include <blis.h>
#include <goblin/goblin.h>
#include <goblin/grid.h>
#include <goblin/node.h>
#include <goblin/tls.h>
#include <goblin/worker.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "idle_peers.h"

extern char **environ;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CPU time of the whole process (all threads): with a loaded machine the steadier
 * figure; g_cpu is the last run_job's / direct_sgemm's. */
static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static double g_cpu;

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? atoi(v) : def;
}

static void loadavg(char *out, size_t cap) {
    FILE *f = fopen("/proc/loadavg", "r");
    double a = 0, b = 0, c = 0;
    if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(out, cap, "%.2f %.2f %.2f", a, b, c);
    else
        snprintf(out, cap, "?");
    if (f) fclose(f);
}

typedef struct mats {
    int64_t n;
    float *a, *b, *c, *ref;
    goblin_tensor ta, tb, tc;
} mats;

static int mats_new(mats *m, int64_t n) {
    memset(m, 0, sizeof *m);
    m->n = n;
    size_t bytes = (size_t)(n * n) * sizeof(float);
    m->a = malloc(bytes);
    m->b = malloc(bytes);
    m->c = calloc(1, bytes);
    m->ref = calloc(1, bytes);
    if (!m->a || !m->b || !m->c || !m->ref) return -1;
    unsigned s = 12345;
    for (int64_t i = 0; i < n * n; i++) {
        m->a[i] = (float)((double)(s = s * 1103515245u + 12345u) / 4294967296.0 - 0.5);
        m->b[i] = (float)((double)(s = s * 1103515245u + 12345u) / 4294967296.0 - 0.5);
    }
    int64_t shape[2] = {n, n};
    goblin_tensor_init(&m->ta, GOBLIN_DTYPE_F32, 2, shape, m->a);
    goblin_tensor_init(&m->tb, GOBLIN_DTYPE_F32, 2, shape, m->b);
    goblin_tensor_init(&m->tc, GOBLIN_DTYPE_F32, 2, shape, m->c);
    return 0;
}

static void mats_free(mats *m) {
    free(m->a);
    free(m->b);
    free(m->c);
    free(m->ref);
}

static double direct_sgemm(mats *m, int32_t threads) {
    rntm_t r;
    bli_rntm_init(&r);
    bli_rntm_set_num_threads(threads, &r);
    float al = 1.0f, be = 0.0f;
    dim_t n = (dim_t)m->n;
    double c0 = cpu_s(), t0 = now_s();
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, n, n, n, &al, m->a, n, 1, m->b, n, 1, &be,
                 m->ref, n, 1, NULL, &r);
    double t = now_s() - t0;
    g_cpu = cpu_s() - c0;
    return t;
}

/* Relative max error of the goblin product against the direct one (a sanity check
 * that the timed job computed the product). */
static double rel_err(const mats *m) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < m->n * m->n; i++) {
        double d = fabs((double)m->c[i] - (double)m->ref[i]);
        if (d > num) num = d;
        if (fabs((double)m->ref[i]) > den) den = fabs((double)m->ref[i]);
    }
    return den > 0 ? num / den : num;
}

/* One matmul job; returns its wall time (submit to done), or -1 on failure. */
static double run_job(goblin_node *node, mats *m, int64_t min_tasks, goblin_job_plan *pi) {
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    if (min_tasks > 0) jp.min_tasks = min_tasks;
    goblin_job *job = NULL;
    double c0 = cpu_s(), t0 = now_s();
    goblin_err e = goblin_node_submit_matmul(node, &m->ta, &m->tb, &m->tc, &jp, &job);
    if (e != GOBLIN_OK) {
        fprintf(stderr, "submit failed: %s\n", goblin_err_name(e));
        return -1;
    }
    e = goblin_job_wait(job, 300000);
    double t = now_s() - t0;
    g_cpu = cpu_s() - c0;
    if (e != GOBLIN_OK) {
        fprintf(stderr, "job failed: %s (%s)\n", goblin_err_name(e), goblin_job_error(job));
        goblin_job_free(job);
        return -1;
    }
    if (pi) goblin_job_plan_info(job, pi);
    goblin_job_free(job);
    return t;
}

static bool wait_workers(goblin_node *node, int64_t want, double timeout_s) {
    double t0 = now_s();
    for (;;) {
        goblin_node_stats st;
        goblin_node_stats_get(node, &st);
        if (st.workers_connected >= want) return true;
        if (now_s() - t0 > timeout_s) {
            fprintf(stderr, "only %lld of %lld workers connected\n", (long long)st.workers_connected,
                    (long long)want);
            return false;
        }
        usleep(10000);
    }
}

/* ---- a node on a URL, with worker processes or worker threads ------------------- */

typedef struct wthread {
    goblin_worker *w;
    pthread_t th;
} wthread;

static void *wthread_main(void *arg) {
    goblin_worker_run(((wthread *)arg)->w);
    return NULL;
}

typedef struct site {
    goblin_node *node;
    char url[128];
    pid_t pids[8];
    int n_pids;
    wthread *threads;
    int n_threads;
} site;

/* CPU seconds (user + system) used so far by the site's worker processes, from
 * /proc/PID/stat (fields 14 and 15, in clock ticks); -1 if unreadable. */
static double site_workers_cpu(const site *s) {
    double total = 0, tick = (double)sysconf(_SC_CLK_TCK);
    for (int i = 0; i < s->n_pids; i++) {
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)s->pids[i]);
        FILE *f = fopen(path, "r");
        if (!f) return -1;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        const char *q = strrchr(buf, ')'); /* after the command name, which may hold spaces */
        unsigned long long ut = 0, st = 0;
        if (!q || sscanf(q + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
            return -1;
        total += (double)(ut + st) / tick;
    }
    return total;
}

/* Start a node listening on scheme://127.0.0.1:PORT (a free port is searched). */
static int site_node(site *s, const char *scheme, const char *cert, const char *key,
                     goblin_verify verify) {
    memset(s, 0, sizeof *s);
    for (int attempt = 0; attempt < 20; attempt++) {
        int base = env_int("GOBLIN_BENCH_GRID_PORT", 0); /* first port to try, else random */
        int port = base ? base + (int)((now_s() * 1000.0)) % 50 + attempt
                        : 20000 + (int)((getpid() * 7 + attempt * 131 + (int)(now_s() * 1000)) % 40000);
        snprintf(s->url, sizeof s->url, "%s://127.0.0.1:%d", scheme, port);
        goblin_node_params np;
        goblin_node_params_default(&np);
        np.listen[0] = s->url;
        np.n_listen = 1;
        np.verify = verify;
        np.cert_file = cert;
        np.key_file = key;
        if (goblin_node_new(&s->node, &np) != GOBLIN_OK) return -1;
        if (goblin_node_start(s->node) == GOBLIN_OK) return 0;
        goblin_node_free(s->node);
        s->node = NULL;
    }
    return -1;
}

static int site_spawn(site *s, const char *worker_bin, int n, const char *fingerprint) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    for (int i = 0; i < n; i++) {
        char *argv[14];
        int k = 0;
        /* Each worker its own identity (config directory): one shared key would make
         * them one worker for replicas and quarantine. */
        static char dirs[64][80];
        snprintf(dirs[i % 64], sizeof dirs[0], "/tmp/goblin-bench-grid-%d-%d", (int)getpid(), i);
        argv[k++] = (char *)worker_bin;
        argv[k++] = "--connect";
        argv[k++] = s->url;
        argv[k++] = "--threads";
        argv[k++] = "1";
        argv[k++] = "--config-dir";
        argv[k++] = dirs[i % 64];
        if (fingerprint) {
            argv[k++] = "--fingerprint";
            argv[k++] = (char *)fingerprint;
        }
        argv[k] = NULL;
        pid_t pid;
        /* One BLIS thread per worker process, whatever the caller's environment says. */
        setenv("BLIS_NUM_THREADS", "1", 1);
        setenv("OMP_NUM_THREADS", "1", 1);
        if (posix_spawn(&pid, worker_bin, &fa, NULL, argv, environ) != 0) {
            fprintf(stderr, "cannot start %s\n", worker_bin);
            posix_spawn_file_actions_destroy(&fa);
            return -1;
        }
        s->pids[s->n_pids++] = pid;
    }
    posix_spawn_file_actions_destroy(&fa);
    return wait_workers(s->node, n, 20.0) ? 0 : -1;
}

static int site_threads(site *s, int n) {
    s->threads = calloc((size_t)n, sizeof *s->threads);
    if (!s->threads) return -1;
    for (int i = 0; i < n; i++) {
        goblin_worker_params wp;
        goblin_worker_params_default(&wp);
        wp.connect[0] = s->url;
        wp.n_connect = 1;
        wp.threads = 1;
        wp.memory_bytes = 64u << 20;
        if (goblin_worker_new(&s->threads[i].w, &wp) != GOBLIN_OK) return -1;
        if (pthread_create(&s->threads[i].th, NULL, wthread_main, &s->threads[i]) != 0) {
            goblin_worker_free(s->threads[i].w);
            return -1;
        }
        s->n_threads++;
    }
    return wait_workers(s->node, n, 20.0) ? 0 : -1;
}

static void site_free(site *s) {
    for (int i = 0; i < s->n_threads; i++) goblin_worker_stop(s->threads[i].w);
    for (int i = 0; i < s->n_threads; i++) {
        pthread_join(s->threads[i].th, NULL);
        goblin_worker_free(s->threads[i].w);
    }
    free(s->threads);
    for (int i = 0; i < s->n_pids; i++) kill(s->pids[i], SIGTERM);
    for (int i = 0; i < s->n_pids; i++) waitpid(s->pids[i], NULL, 0);
    goblin_node_free(s->node);
    memset(s, 0, sizeof *s);
}

static char worker_bin[PATH_MAX];

static void find_worker_bin(const char *argv0) {
    const char *env = getenv("GOBLIN_BENCH_GRID_WORKER");
    if (env) {
        snprintf(worker_bin, sizeof worker_bin, "%s", env);
        return;
    }
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0)
        self[len] = 0;
    else
        snprintf(self, sizeof self, "%s", argv0);
    snprintf(worker_bin, sizeof worker_bin, "%s/../tools/goblin-worker", dirname(self));
}

/* A TLS identity in a fresh temporary directory. */
static int make_identity(goblin_tls_identity *id, char *dir, size_t cap) {
    snprintf(dir, cap, "/tmp/bench_grid_tls_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    goblin_errbuf msg_eb = {0};
    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/id", dir);
    if (goblin_tls_init_dir(sub, NULL, id, &msg_eb) != GOBLIN_OK) {
        fprintf(stderr, "tls init: %s\n", msg_eb.message);
        return -1;
    }
    return 0;
}

static void remove_identity(const goblin_tls_identity *id, const char *dir) {
    char sub[PATH_MAX];
    unlink(id->cert_path);
    unlink(id->key_path);
    snprintf(sub, sizeof sub, "%s/id", dir);
    rmdir(sub);
    rmdir(dir);
}

/* --procs N [tls]: one line "goblin_s tile_rows tile_cols tile_k tasks" for the Dask
 * comparison (best of reps after a warm-up). */
static int procs_mode(int64_t n, bool tls, bool serve, int reps) {
    mats m;
    if (mats_new(&m, n) != 0) return 1;
    goblin_tls_identity id;
    char dir[PATH_MAX];
    if (tls && make_identity(&id, dir, sizeof dir) != 0) return 1;
    site s;
    if (site_node(&s, tls ? "tls+tcp" : "tcp", tls ? id.cert_path : NULL, tls ? id.key_path : NULL,
                  GOBLIN_VERIFY_FREIVALDS) != 0 ||
        site_spawn(&s, worker_bin, 2, tls ? id.fingerprint : NULL) != 0)
        return 1;
    goblin_job_plan pi = {0};
    double best = 1e30;
    if (serve) {
        /* Warm-up, the plan, then one job per line read (interleaved with the caller's
         * own runs, so that both sides see the same machine load). Two warm-up jobs: the
         * first jobs after the workers join also grow their panel caches and message
         * buffers to their steady size (measured: 0.91, 0.86, then 0.78-0.82 s). */
        double t = run_job(s.node, &m, 0, &pi);
        if (t >= 0) t = run_job(s.node, &m, 0, &pi);
        if (t < 0) return 1;
        printf("%lld %lld %lld %lld\n", (long long)pi.tile_rows, (long long)pi.tile_cols, (long long)pi.tile_k,
               (long long)(pi.grid_rows * pi.grid_cols * pi.k_slices));
        fflush(stdout);
        char line[64];
        while (fgets(line, sizeof line, stdin)) {
            t = run_job(s.node, &m, 0, NULL);
            printf("%.6f\n", t);
            fflush(stdout);
            if (t < 0) break;
        }
        site_free(&s);
        if (tls) remove_identity(&id, dir);
        mats_free(&m);
        return 0;
    }
    for (int r = 0; r <= reps; r++) {
        double t = run_job(s.node, &m, 0, &pi);
        if (t < 0) return 1;
        if (r > 0 && t < best) best = t;
    }
    site_free(&s);
    if (tls) remove_identity(&id, dir);
    printf("%.6f %lld %lld %lld %lld\n", best, (long long)pi.tile_rows, (long long)pi.tile_cols,
           (long long)pi.tile_k, (long long)(pi.grid_rows * pi.grid_cols * pi.k_slices));
    mats_free(&m);
    return 0;
}

/* --blis N: for bench_grid.py's client mode, direct BLIS with 2 threads on N x N f32:
 * one warm-up, then one time per line read on stdin (interleaved with the caller's
 * runs, so that both see the same load). */
static int blis_mode(int64_t n) {
    mats m;
    if (mats_new(&m, n) != 0) return 1;
    direct_sgemm(&m, 2);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        printf("%.6f\n", direct_sgemm(&m, 2));
        fflush(stdout);
    }
    mats_free(&m);
    return 0;
}

static void plan_str(const goblin_job_plan *pi, char *out, size_t cap) {
    snprintf(out, cap, "%lld tasks of %lldx%lldx%lld", (long long)(pi->grid_rows * pi->grid_cols * pi->k_slices),
             (long long)pi->tile_rows, (long long)pi->tile_cols, (long long)pi->tile_k);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of @p x[0 .. n-1] (reordered). */
static double median(double *x, int n) {
    if (n <= 0) return 0;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* The 95% confidence interval of the median of @p n sorted values, distribution-free:
 * the order statistics l and n + 1 - l (1-based) with l from the normal approximation
 * of Binomial(n, 1/2). */
static void median_ci(const double *sorted, int n, double *lo, double *hi) {
    int l = (int)floor((n - 1.96 * sqrt((double)n)) / 2);
    if (l < 1) l = 1;
    *lo = sorted[l - 1];
    *hi = sorted[n - l];
}

/* Section 1 and 3: the embedded grid with and without verification, interleaved with
 * direct BLIS. The overhead is given as the median of paired ratios: each run with
 * verification against the run without it next to it (their order alternating), so
 * that a slow spell of this shared machine falls on both sides of a pair. After the
 * @p reps runs with BLIS, pairs alone until there are @p pairs of them: the check
 * costs about 1.3% of a 4096² job's CPU, and single jobs vary by several percent. */
static void embedded(int64_t n, int32_t threads, int reps, int pairs, bool with_unsafe) {
    mats m;
    if (mats_new(&m, n) != 0) {
        printf("| %lld | (out of memory) | | | | |\n", (long long)n);
        return;
    }
    goblin_grid_params gp;
    goblin_grid_params_default(&gp);
    gp.worker.threads = 1;
    goblin_grid *gf = NULL, *gu = NULL;
    if (goblin_grid_local(threads, &gp, &gf) != GOBLIN_OK) {
        printf("| %lld | (grid failed to start) | | | | |\n", (long long)n);
        mats_free(&m);
        return;
    }
    if (with_unsafe) {
        gp.node.verify = GOBLIN_VERIFY_UNSAFE_NONE;
        if (goblin_grid_local(threads, &gp, &gu) != GOBLIN_OK) gu = NULL;
    }
    wait_workers(goblin_grid_node(gf), threads, 10);
    if (gu) wait_workers(goblin_grid_node(gu), threads, 10);
    double bd = 1e30, bf = 1e30, bu = 1e30, cd = 1e30, cf = 1e30, cu = 1e30;
    double pw[128], pc[128]; /* paired ratios: wall, CPU */
    double vcpu = 0, jcpu = 0;  /* the node's verification CPU and the verified jobs' CPU */
    int nvj = 0;
    int np = 0;
    if (pairs > 128) pairs = 128;
    goblin_job_plan pi = {0};
    bool failed = false;
    for (int r = 0; (r <= reps || (gu && np < pairs)) && !failed; r++) {
        bool with_blis = r <= reps;
        double td = with_blis ? direct_sgemm(&m, threads) : 0, xd = g_cpu;
        double tf, xf, tu = 0, xu = 0;
        goblin_node_stats s0, s1;
        if (gu && r % 2) { /* the unverified job first every other time */
            tu = run_job(goblin_grid_node(gu), &m, 0, NULL), xu = g_cpu;
            goblin_node_stats_get(goblin_grid_node(gf), &s0);
            tf = run_job(goblin_grid_node(gf), &m, 0, &pi), xf = g_cpu;
        } else {
            goblin_node_stats_get(goblin_grid_node(gf), &s0);
            tf = run_job(goblin_grid_node(gf), &m, 0, &pi), xf = g_cpu;
            if (gu) tu = run_job(goblin_grid_node(gu), &m, 0, NULL), xu = g_cpu;
        }
        goblin_node_stats_get(goblin_grid_node(gf), &s1);
        if (r > 0 && tf > 0) {
            vcpu += (double)(s1.verify_cpu_ns - s0.verify_cpu_ns) * 1e-9;
            jcpu += xf;
            nvj++;
        }
        fprintf(stderr, "embedded n=%lld rep %d: wall BLIS %.3f grid %.3f unverified %.3f; CPU %.3f %.3f %.3f\n",
                (long long)n, r, td, tf, tu, xd, xf, gu ? xu : 0.0);
        if (tf < 0 || tu < 0) failed = true;
        if (r == 0) continue; /* warm-up */
        if (gu && np < 128 && tu > 0 && xu > 0) {
            pw[np] = tf / tu;
            pc[np++] = xf / xu;
        }
        if (!with_blis) continue;
        if (td < bd) bd = td;
        if (tf < bf) bf = tf;
        if (gu && tu < bu) bu = tu;
        if (xd < cd) cd = xd;
        if (xf < cf) cf = xf;
        if (gu && xu < cu) cu = xu;
    }
    /* The last job written into C may be the unsafe one; check the verified one. */
    if (!failed && gu) run_job(goblin_grid_node(gf), &m, 0, NULL);
    double mw = median(pw, np), mc = median(pc, np), lw = 1, hw = 1;
    if (np) median_ci(pw, np, &lw, &hw); /* pw sorted by median() */
    double err = rel_err(&m);
    goblin_node_stats st;
    goblin_node_stats_get(goblin_grid_node(gf), &st);
    char ps[96];
    plan_str(&pi, ps, sizeof ps);
    double gflop = 2.0 * (double)n * (double)n * (double)n * 1e-9;
    if (failed) {
        printf("| %lld | job failed | | | | |\n", (long long)n);
    } else {
        printf("| %lld | %d workers x 1 thread vs BLIS %d threads | %s | %.3f s (%.1f GFLOP/s) | %.3f s "
               "(%.1f GFLOP/s) | **%.3f** | %lld accepted, %lld rejected; max rel err %.1e; CPU per job "
               "%.3f s vs BLIS %.3f s (ratio %.3f) |\n",
               (long long)n, threads, threads, ps, bd, gflop / bd, bf, gflop / bf, bd / bf,
               (long long)st.results_accepted, (long long)st.results_rejected, err, cf, cd, cd / cf);
        if (gu)
            printf("| %lld | verification overhead | UNSAFE_NONE %.3f s | Freivalds %.3f s | | **%+.1f%%** "
                   "| median of %d paired ratios (Freivalds / none, runs side by side), 95%% interval of the "
                   "median %+.1f%% to %+.1f%%; best of each: %+.1f%%; "
                   "CPU per job: paired median %+.1f%%, best of each %.3f s vs %.3f s (%+.1f%%); "
                   "the node's verifying (verify_cpu_ns): %.1f ms of CPU per job, %.2f%% of the verified jobs' CPU |\n",
                   (long long)n, bu, bf, (mw - 1) * 100.0, np, (lw - 1) * 100.0, (hw - 1) * 100.0,
                   (bf - bu) / bu * 100.0, (mc - 1) * 100.0, cf, cu, (cf - cu) / cu * 100.0,
                   nvj ? vcpu / nvj * 1e3 : 0.0, jcpu > 0 ? vcpu / jcpu * 100.0 : 0.0);
    }
    fflush(stdout);
    goblin_grid_free(gf);
    goblin_grid_free(gu);
    mats_free(&m);
}

/* Section 2: node + 2 worker processes over tcp and tls+tcp. */
static void processes(int64_t n, int reps) {
    mats m;
    if (mats_new(&m, n) != 0) return;
    goblin_tls_identity id;
    char dir[PATH_MAX];
    bool have_tls = make_identity(&id, dir, sizeof dir) == 0;
    site st, sl;
    bool ok_t = site_node(&st, "tcp", NULL, NULL, GOBLIN_VERIFY_FREIVALDS) == 0 &&
                site_spawn(&st, worker_bin, 2, NULL) == 0;
    bool ok_l = have_tls &&
                site_node(&sl, "tls+tcp", id.cert_path, id.key_path, GOBLIN_VERIFY_FREIVALDS) == 0 &&
                site_spawn(&sl, worker_bin, 2, id.fingerprint) == 0;
    if (!ok_t) fprintf(stderr, "tcp site failed to start (worker %s)\n", worker_bin);
    if (!ok_l) fprintf(stderr, "tls site failed to start\n");
    double bd = 1e30, bt = 1e30, bl = 1e30, et = -1, el = -1;
    double ct = 1e30, cl = 1e30; /* CPU per job of the node (this process) and its workers */
    goblin_job_plan pi = {0};
    for (int r = 0; r <= reps; r++) {
        fprintf(stderr, "processes n=%lld rep %d\n", (long long)n, r);
        double td = direct_sgemm(&m, 2);
        double w0 = ok_t ? site_workers_cpu(&st) : -1;
        double tt = ok_t ? run_job(st.node, &m, 0, &pi) : -1, xt = g_cpu;
        double w1 = ok_t ? site_workers_cpu(&st) : -1;
        if (ok_t && r == reps) et = rel_err(&m);
        double v0 = ok_l ? site_workers_cpu(&sl) : -1;
        double tl = ok_l ? run_job(sl.node, &m, 0, &pi) : -1, xl = g_cpu;
        double v1 = ok_l ? site_workers_cpu(&sl) : -1;
        if (ok_l && r == reps) el = rel_err(&m);
        if (r > 0 && tt >= 0 && w0 >= 0 && w1 >= 0 && xt + w1 - w0 < ct) ct = xt + w1 - w0;
        if (r > 0 && tl >= 0 && v0 >= 0 && v1 >= 0 && xl + v1 - v0 < cl) cl = xl + v1 - v0;
        if (tt < 0) ok_t = false;
        if (tl < 0) ok_l = false;
        if (r == 0) continue;
        if (td < bd) bd = td;
        if (tt >= 0 && tt < bt) bt = tt;
        if (tl >= 0 && tl < bl) bl = tl;
    }
    char ps[96];
    plan_str(&pi, ps, sizeof ps);
    if (ok_t)
        printf("| %lld | tcp loopback | %s | %.3f s | %.3f s | **%.3f** | max rel err %.1e; CPU per job (node and "
               "workers) %.2f s |\n",
               (long long)n, ps, bd, bt, bd / bt, et, ct < 1e30 ? ct : 0.0);
    else
        printf("| %lld | tcp loopback | failed | | | | |\n", (long long)n);
    if (ok_l) {
        char crypto[256] = "";
        if (ok_t && ct < 1e30 && cl < 1e30)
            snprintf(crypto, sizeof crypto,
                     "; CPU per job (node and workers): %.2f s, tcp %.2f s: %.2f s in TLS (encryption and records, "
                     "%.0f%% of the job's CPU)",
                     cl, ct, cl - ct, (cl - ct) / cl * 100.0);
        printf("| %lld | tls+tcp loopback (pinned fingerprint) | %s | %.3f s | %.3f s | **%.3f** | max rel err "
               "%.1e; tls/tcp time %.3f%s |\n",
               (long long)n, ps, bd, bl, bd / bl, el, ok_t ? bl / bt : 0.0, crypto);
    }
    else
        printf("| %lld | tls+tcp loopback | failed | | | | |\n", (long long)n);
    fflush(stdout);
    if (st.node) site_free(&st);
    if (have_tls) {
        if (sl.node) site_free(&sl);
        remove_identity(&id, dir);
    }
    mats_free(&m);
}

/* Section 4: tiny tasks. A [m, 8] . B [8, m] cut into >= tasks tiles of ~8 x 8. */
static void scheduler(int workers, int64_t m_dim, int64_t tasks, int reps) {
    mats m;
    memset(&m, 0, sizeof m);
    m.n = 0;
    int64_t k = 8;
    m.a = calloc((size_t)(m_dim * k), sizeof(float));
    m.b = calloc((size_t)(k * m_dim), sizeof(float));
    m.c = calloc((size_t)(m_dim * m_dim), sizeof(float));
    for (int64_t i = 0; i < m_dim * k; i++) {
        m.a[i] = (float)(i % 7) - 3.0f;
        m.b[i] = (float)(i % 5) - 2.0f;
    }
    int64_t sa[2] = {m_dim, k}, sb[2] = {k, m_dim}, sc[2] = {m_dim, m_dim};
    goblin_tensor_init(&m.ta, GOBLIN_DTYPE_F32, 2, sa, m.a);
    goblin_tensor_init(&m.tb, GOBLIN_DTYPE_F32, 2, sb, m.b);
    goblin_tensor_init(&m.tc, GOBLIN_DTYPE_F32, 2, sc, m.c);
    site s;
    if (site_node(&s, "tcp", NULL, NULL, GOBLIN_VERIFY_FREIVALDS) != 0 || site_threads(&s, workers) != 0) {
        printf("| %d | failed to start | | | |\n", workers);
        if (s.node) site_free(&s);
        free(m.a); free(m.b); free(m.c);
        return;
    }
    double best = 1e30, best_cpu = 0;
    goblin_job_plan pi = {0};
    for (int r = 0; r <= reps; r++) {
        double t = run_job(s.node, &m, tasks, &pi);
        if (t < 0) { best = -1; break; }
        if (r > 0 && t < best) {
            best = t;
            best_cpu = g_cpu;
        }
    }
    int64_t nt = pi.grid_rows * pi.grid_cols * pi.k_slices;
    goblin_node_stats st;
    goblin_node_stats_get(s.node, &st);
    if (best > 0)
        printf("| %d | %lld tasks of %lldx%lldx%lld | %.3f s | **%.0f** | %.3f s | %.0f | %lld |\n", workers,
               (long long)nt, (long long)pi.tile_rows, (long long)pi.tile_cols, (long long)pi.tile_k, best,
               (double)nt / best, best_cpu, best_cpu > 0 ? (double)nt / best_cpu : 0.0,
               (long long)st.tasks_reissued);
    else
        printf("| %d | job failed | | | |\n", workers);
    fflush(stdout);
    site_free(&s);
    free(m.a); free(m.b); free(m.c);
}

/* Section 5: one job on 2 workers alone, then among @p idle idle connections. */
static void idle_section(int64_t n, int idle, int reps) {
    mats m;
    site s;
    idle_peers ip;
    memset(&ip, 0, sizeof ip);
    if (mats_new(&m, n) != 0) return;
    direct_sgemm(&m, 2); /* the reference rel_err compares with */
    if (site_node(&s, "tcp", NULL, NULL, GOBLIN_VERIFY_FREIVALDS) != 0 || site_threads(&s, 2) != 0) {
        printf("| failed to start | | | |\n");
        if (s.node) site_free(&s);
        mats_free(&m);
        return;
    }
    double t_alone = 1e30, t_idle = 1e30, t_conn = 1e30;
    goblin_job_plan pa = {0}, pi = {0}, pc = {0};
    double err_alone = 0, err_idle = 0;
    for (int r = 0; r <= reps; r++) { /* the first is a warm-up */
        double t = run_job(s.node, &m, 0, &pa);
        if (t < 0) goto done;
        if (r > 0 && t < t_alone) t_alone = t;
    }
    err_alone = rel_err(&m);
    double j0 = now_s();
    if (idle_start(&ip, s.url, idle, (uint64_t)1 << 30, 5000) != 0) {
        printf("| only %d of %d idle peers joined | | | |\n", ip.n, idle);
        goto done;
    }
    double joined_s = now_s() - j0;
    /* Past their first 2 s (a worker counts until its first LEASE_REQUEST is read). */
    goblin_node_stats st;
    for (double w0 = now_s(); now_s() - w0 < 60;) {
        goblin_node_stats_get(s.node, &st);
        if (st.workers_asking == 2 && st.workers_connected == 2 + idle) break;
        usleep(20000);
    }
    fprintf(stderr, "idle: %d peers joined in %.1f s; %lld connected, %lld asking\n", idle, joined_s,
            (long long)st.workers_connected, (long long)st.workers_asking);
    /* Interleaved: cut by capacity (the default) and, for contrast, by connections. */
    for (int r = 0; r <= reps; r++) {
        memset(m.c, 0, (size_t)(n * n) * sizeof(float));
        double t = run_job(s.node, &m, 0, &pi);
        if (t < 0) goto done;
        if (r > 0 && t < t_idle) t_idle = t;
        if (r == 0) err_idle = rel_err(&m);
        t = run_job(s.node, &m, 4 * (int64_t)(2 + idle), &pc);
        if (t < 0) goto done;
        if (r > 0 && t < t_conn) t_conn = t;
    }
    /* The 2 alone again (the idle peers gone), so that a slow spell of this shared machine
     * during the first runs does not count for them: best of both sets. */
    idle_stop(&ip);
    for (double w0 = now_s(); now_s() - w0 < 60;) {
        goblin_node_stats_get(s.node, &st);
        if (st.workers_connected == 2) break;
        usleep(20000);
    }
    for (int r = 0; r < reps; r++) {
        double t = run_job(s.node, &m, 0, NULL);
        if (t < 0) goto done;
        if (t < t_alone) t_alone = t;
    }
    char sa[96], si[96], sc[96];
    plan_str(&pa, sa, sizeof sa);
    plan_str(&pi, si, sizeof si);
    plan_str(&pc, sc, sizeof sc);
    printf("| 2 workers alone | %s | %.3f s | 1 | max rel err %.1e |\n", sa, t_alone, err_alone);
    printf("| 2 workers + %d idle connections, cut by capacity (workers_asking %lld) | %s | %.3f s | **%.3f** | "
           "max rel err %.1e; the idle peers joined in %.1f s |\n",
           idle, (long long)st.workers_asking, si, t_idle, t_alone / t_idle, err_idle, joined_s);
    printf("| the same, cut by connections (min_tasks = 4 x %d, the rule before) | %s | %.3f s | %.3f | |\n",
           2 + idle, sc, t_conn, t_alone / t_conn);
done:
    fflush(stdout);
    if (ip.s) idle_stop(&ip);
    site_free(&s);
    mats_free(&m);
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    /* This process hosts the node (and, for the embedded grid, the workers too): set up
     * as goblin-node and goblin-worker set themselves up, before any thread starts. */
    goblin_err tune = goblin_tune_allocator_for_service(0);
    find_worker_bin(argv[0]);
    int reps = env_int("GOBLIN_BENCH_GRID_REPS", 2);
    if (argc >= 3 && strcmp(argv[1], "--blis") == 0)
        return blis_mode(atoll(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "--procs") == 0)
    {
        bool tls = false, serve = false;
        for (int i = 3; i < argc; i++) {
            if (strcmp(argv[i], "tls") == 0) tls = true;
            if (strcmp(argv[i], "serve") == 0) serve = true;
        }
        return procs_mode(atoll(argv[2]), tls, serve, reps);
    }
    int32_t threads = env_int("GOBLIN_BENCH_THREADS", 2);
    int64_t n = env_int("GOBLIN_BENCH_GRID_N", 4096);
    const char *big_env = getenv("GOBLIN_BENCH_GRID_BIG");
    bool big = big_env ? atoi(big_env) != 0 : true;
    char la[64];
    loadavg(la, sizeof la);
    double t_start = now_s();
    printf("Distributed runtime vs direct BLIS (bli_sgemm_ex, per-call rntm_t), f32 square products, best of "
           "several runs after a warm-up, interleaved (counts below). Ratio = direct time / goblin time (higher is better for goblin). "
           "Every goblin job verifies every tile with Freivalds unless stated. Load average at start: %s "
           "(shared machine, %ld cores online). Allocator: %s.\n\n",
           la, sysconf(_SC_NPROCESSORS_ONLN),
           tune == GOBLIN_OK ? "this process and the worker processes keep freed message buffers for reuse, as "
                               "goblin-node and goblin-worker do (goblin_tune_allocator_for_service)"
                             : "the C library's defaults (goblin_tune_allocator_for_service not available)");

    bool sched_only = env_int("GOBLIN_BENCH_GRID_SCHED_ONLY", 0) != 0;
    if (env_int("GOBLIN_BENCH_GRID_IDLE_ONLY", 0)) goto idle;
    if (sched_only) goto sched;
    printf("### Embedded grid (goblin_grid_local, inproc) vs direct BLIS, same total threads (goal >= 0.90)\n\n");
    printf("| n | threads | plan | direct BLIS | grid | ratio | verification |\n|---|---|---|---|---|---|---|\n");
    /* The verification overhead is a difference of two jobs' times: more interleaved
     * runs (best of each) keep this machine's noise out of it. */
    int pairs = env_int("GOBLIN_BENCH_GRID_PAIRS", 41);
    embedded(n, threads, n <= 4096 && reps < 15 ? 15 : reps, n <= 4096 ? pairs : 0, true);
    /* The check is O(n^2) against the product's O(n^3): its share halves when n doubles. */
    if (big)
        embedded(8192, threads, 3, 0, true);
    printf("\n");
    if (big)
        printf("Times: best of %d interleaved runs at 4096, of 3 at 8192, after a warm-up; the verification "
               "overhead is the median of the paired ratios, at 4096 over %d pairs (GOBLIN_BENCH_GRID_PAIRS; the "
               "runs with BLIS, then pairs alone); GOBLIN_BENCH_GRID_BIG=0 skips 8192: about 3 minutes "
               "on 2 cores.\n\n",
               reps < 15 ? 15 : reps, pairs);
    else
        printf("8192 not run (GOBLIN_BENCH_GRID_BIG=0).\n\n");
    if (env_int("GOBLIN_BENCH_GRID_EMBEDDED_ONLY", 0)) {
        loadavg(la, sizeof la);
        printf("Only the embedded grid was run (GOBLIN_BENCH_GRID_EMBEDDED_ONLY=1). Load average at end: %s; "
               "this program ran %.0f s.\n", la, now_s() - t_start);
        return 0;
    }

    printf("### Node + 2 goblin-worker processes (1 thread each) vs direct BLIS with 2 threads (goal >= 0.80)\n\n");
    printf("The node runs in the benchmark process (its thread verifies and assembles), so the node and both "
           "workers share the machine's cores with nothing else of ours running. Best of %d runs of each, "
           "interleaved, after a warm-up.\n\n", reps < 4 ? 4 : reps);
    printf("| n | transport | plan | direct BLIS (2 thr) | node + 2 workers | ratio | notes |\n"
           "|---|---|---|---|---|---|---|\n");
    /* A slow spell of this shared machine can cover two runs of a few seconds: four. */
    processes(n, reps < 4 ? 4 : reps);
    printf("\n");
sched:
    printf("### Scheduler throughput: tiny tasks through one node, W in-process workers (1 thread each) over tcp "
           "loopback (goal >= 20,000 tasks/s at W = 4)\n\n");
    printf("The node has no tiny-task job type, so each task is one tiny matmul tile (A [512, 8] . B [8, 512] "
           "cut with min_tasks = 4096), Freivalds-verified like any other.\n\n");
    printf("CPU s: CPU time of the whole process (node, workers and nng threads) during the best run; "
           "tasks per CPU s = tasks / that. Reissued: leases that ended without a result (expired, lost), all runs.\n\n");
    printf("| workers | tasks | job time | tasks/s | CPU s | tasks per CPU s | reissued |\n|---|---|---|---|---|---|---|\n");
    int ws[32] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    int nws = 9;
    const char *wlist = getenv("GOBLIN_BENCH_GRID_SCHED_W"); /* e.g. "1,4,256" */
    if (wlist && *wlist) {
        nws = 0;
        for (const char *q = wlist; *q && nws < 32;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            if (v > 0 && v <= 1024) ws[nws++] = (int)v;
            q = *end ? end + 1 : end;
        }
    }
    int wmax = env_int("GOBLIN_BENCH_GRID_SCHED_MAX_W", 1024);
    int sreps = env_int("GOBLIN_BENCH_GRID_SCHED_REPS", 1);
    /* 4096 tiles of a 512 x 512 C; GOBLIN_BENCH_GRID_SCHED_TASKS=16384 (a 1024 x 1024 C)
     * makes a run long enough to time well at 100k tasks/s. */
    int64_t stasks = env_int("GOBLIN_BENCH_GRID_SCHED_TASKS", 4096);
    int64_t sdim = 8;
    while (sdim * sdim < stasks * 64) sdim *= 2;
    for (int i = 0; i < nws; i++) {
        if (ws[i] > wmax) continue;
        fprintf(stderr, "scheduler W=%d\n", ws[i]);
        scheduler(ws[i], sdim, stasks, sreps);
    }
    if (sched_only) goto end;
idle:
    {
        int idle = env_int("GOBLIN_BENCH_GRID_IDLE", 1000);
        int64_t in = env_int("GOBLIN_BENCH_GRID_IDLE_N", 1024);
        printf("\n### A job among idle connections: %lld² f32 on 2 in-process workers (1 thread each) over tcp "
               "loopback, alone and with %d simulated workers connected that only send heartbeats (goal >= 0.90)\n\n",
               (long long)in, idle);
        printf("Ratio = time alone / time with the idle connections (best of %d each after a warm-up, alone before "
               "the idle peers join and again after they leave; the two cuts interleaved). The idle peers speak the real protocol (HELLO, identity PROOF, HEARTBEATs; never a "
               "LEASE_REQUEST).\n\n", reps < 5 ? 5 : reps);
        printf("| setting | plan | job time | ratio | notes |\n|---|---|---|---|---|\n");
        idle_section(in, idle, reps < 5 ? 5 : reps);
    }
end:
    loadavg(la, sizeof la);
    printf("\nLoad average at end: %s; this program ran %.0f s.\n", la, now_s() - t_start);
    return 0;
}
