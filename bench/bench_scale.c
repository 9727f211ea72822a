/* bench/bench_scale.c - the scale of one node (docs/BENCHMARKS.md "bench_scale"): W real
 * workers connected over tcp loopback, W = 1 .. 4096, and for each W
 *   - the node's resident memory per connected idle worker (the node runs alone in this
 *     process; the workers run in child processes, GROUP to a process, so the figure is
 *     the node's own: its peer table, nng pipes and buffers), goal <= 64 KiB;
 *   - tiny tasks per second through the node (a matmul A [m, 8] . B [8, m] cut into
 *     tiles of ~8 x 8, each a task leased, computed, returned and Freivalds-verified),
 *     goal >= 50,000 tasks/s at W = 4096, and the node's CPU per task.
 * The workers are simulated by default (sim_workers.h: one thread per child process
 * drives up to GROUP connections, each speaking the real protocol through proto/'s
 * encoders: HELLO, identity PROOF, LEASE_REQUEST, TASK batches computed with the
 * executor, RESULT, HEARTBEAT), so that W = 4,096 on a 2-core machine measures the node
 * rather than thousands of worker threads. GOBLIN_BENCH_SCALE_WORKERS=goblin runs
 * goblin_worker objects instead (1 thread each, several threads per object), GROUP to
 * a child process (this program run again with --child): in one process 4,096 workers'
 * timed receives share one nng expiry list and its lock, which no real deployment (a
 * worker per machine) has; at W = 1,024 in one process the throughput fell 10x, all of
 * it in futex wake-ups of that process.
 *
 * Environment: GOBLIN_BENCH_SCALE_W (e.g. "1,64,4096"; default 1,4,16,64,256,1024,2048,
 * 4096), GOBLIN_BENCH_SCALE_TASKS (tiles per job, default 16384; at least 4 per
 * worker), GOBLIN_BENCH_SCALE_REPS (timed jobs per W after one warm-up, best kept;
 * default 3), GOBLIN_BENCH_SCALE_WORKERS (sim, the default, or goblin),
 * GOBLIN_BENCH_SCALE_GROUP (workers per child process, default 512 simulated or 64
 * goblin_worker), GOBLIN_BENCH_SCALE_JOIN (all: the workers added at a W dial at once,
 * the default with simulated workers; group: one child process at a time, the default
 * with goblin_worker), GOBLIN_BENCH_SCALE_LOG (a file for the node's log), GOBLIN_BENCH_SCALE_SHARE
 * (simulated workers: connections per key, default 1; a node keeps 4,096 identities).
 * Never fails on speed; prints a markdown table. */
#define _GNU_SOURCE
#include <goblin/goblin.h>
#include <goblin/node.h>
#include <goblin/worker.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sim_workers.h"

extern char **environ;

#define MAX_W 16384 /* up to the descriptors a process may hold (ulimit -n) */
#define MAX_CHILDREN 1024

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x <= 0 || x > INT_MAX ? dflt : (int)x;
}

/* This process's resident set, in bytes (/proc/self/statm, field 2, in pages). */
static double rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    unsigned long long size = 0, res = 0;
    int n = fscanf(f, "%llu %llu", &size, &res);
    fclose(f);
    return n == 2 ? (double)res * (double)sysconf(_SC_PAGESIZE) : -1;
}

/* ---- the child: COUNT workers until stdin closes ------------------------------- */

typedef struct wthread {
    goblin_worker *w;
    pthread_t th;
    bool started;
} wthread;

static void *wthread_main(void *arg) {
    goblin_worker_run(((wthread *)arg)->w);
    return NULL;
}

static int child_main(const char *url, int count) {
    wthread *ws = calloc((size_t)count, sizeof *ws);
    if (!ws) return 1;
    int rc = 0;
    for (int i = 0; i < count; i++) {
        goblin_worker_params wp;
        goblin_worker_params_default(&wp);
        wp.connect[0] = url;
        wp.n_connect = 1;
        wp.threads = 1;
        wp.memory_bytes = 64u << 20;
        if (goblin_worker_new(&ws[i].w, &wp) != GOBLIN_OK) {
            rc = 1;
            break;
        }
        ws[i].started = pthread_create(&ws[i].th, NULL, wthread_main, &ws[i]) == 0;
        if (!ws[i].started) {
            rc = 1;
            break;
        }
    }
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) { /* until the parent closes the pipe */
    }
    for (int i = 0; i < count; i++)
        if (ws[i].w) goblin_worker_stop(ws[i].w);
    for (int i = 0; i < count; i++) {
        if (ws[i].started) pthread_join(ws[i].th, NULL);
        goblin_worker_free(ws[i].w);
    }
    free(ws);
    return rc;
}

/* ---- the parent: a node and groups of workers ---------------------------------- */

typedef struct group {
    pid_t pid;
    int stdin_fd; /* closing it stops the child's workers */
} group;

static group g_groups[MAX_CHILDREN];
static int g_sizes[MAX_CHILDREN]; /* workers in each */
static int g_n_groups;
static char g_self[PATH_MAX];
static bool g_sim = true; /* simulated workers (sim_workers.h), else goblin_worker objects */

static int spawn_group(const char *url, int count) {
    if (g_n_groups >= MAX_CHILDREN) return -1;
    int fds[2];
    if (pipe(fds) != 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    char cnt[16];
    snprintf(cnt, sizeof cnt, "%d", count);
    char *argv[] = {g_self, g_sim ? "--sim-child" : "--child", (char *)url, cnt, NULL};
    pid_t pid;
    int rv = posix_spawn(&pid, g_self, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[0]);
    if (rv != 0) {
        close(fds[1]);
        return -1;
    }
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    g_groups[g_n_groups].pid = pid;
    g_groups[g_n_groups].stdin_fd = fds[1];
    g_sizes[g_n_groups] = count;
    g_n_groups++;
    return 0;
}

static void stop_groups(void) {
    for (int i = 0; i < g_n_groups; i++) close(g_groups[i].stdin_fd);
    for (int i = 0; i < g_n_groups; i++) waitpid(g_groups[i].pid, NULL, 0);
    g_n_groups = 0;
}

static goblin_node_stats stats_of(goblin_node *n) {
    goblin_node_stats st;
    goblin_node_stats_get(n, &st);
    return st;
}

/* Wait until @p want workers are connected and have asked for work. */
static bool wait_workers(goblin_node *n, int64_t want, double timeout_s) {
    double t0 = now_s();
    for (;;) {
        goblin_node_stats st = stats_of(n);
        if (st.workers_connected >= want && st.workers_asking >= want) return true;
        if (now_s() - t0 > timeout_s) {
            fprintf(stderr, "only %lld of %lld workers connected (%lld asking)\n", (long long)st.workers_connected,
                    (long long)want, (long long)st.workers_asking);
            return false;
        }
        usleep(20000);
    }
}

typedef struct mats {
    float *a, *b, *c;
    goblin_tensor ta, tb, tc;
    int64_t m;
} mats;

static int mats_new(mats *x, int64_t m) {
    int64_t k = 8;
    memset(x, 0, sizeof *x);
    x->m = m;
    x->a = malloc((size_t)(m * k) * sizeof(float));
    x->b = malloc((size_t)(k * m) * sizeof(float));
    x->c = malloc((size_t)(m * m) * sizeof(float));
    if (!x->a || !x->b || !x->c) return -1;
    for (int64_t i = 0; i < m * k; i++) {
        x->a[i] = (float)(i % 7) - 3.0f;
        x->b[i] = (float)(i % 5) - 2.0f;
    }
    int64_t sa[2] = {m, k}, sb[2] = {k, m}, sc[2] = {m, m};
    goblin_tensor_init(&x->ta, GOBLIN_DTYPE_F32, 2, sa, x->a);
    goblin_tensor_init(&x->tb, GOBLIN_DTYPE_F32, 2, sb, x->b);
    goblin_tensor_init(&x->tc, GOBLIN_DTYPE_F32, 2, sc, x->c);
    return 0;
}

static void mats_free(mats *x) {
    free(x->a);
    free(x->b);
    free(x->c);
}

/* Largest |C - A.B| over C, computed here in double (the values are small integers,
 * exact in f32): 0 for a correct product. */
static double max_err(const mats *x) {
    double worst = 0;
    for (int64_t i = 0; i < x->m; i++)
        for (int64_t j = 0; j < x->m; j++) {
            double s = 0;
            for (int64_t q = 0; q < 8; q++) s += (double)x->a[i * 8 + q] * (double)x->b[q * x->m + j];
            double d = (double)x->c[i * x->m + j] - s;
            if (d < 0) d = -d;
            if (d > worst) worst = d;
        }
    return worst;
}

/* One job of @p tiles tiles; its time, the node's CPU in *cpu; -1 on failure. */
static double run_job(goblin_node *n, mats *x, int64_t tiles, double *cpu, int64_t *ntasks) {
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = tiles;
    memset(x->c, 0, (size_t)(x->m * x->m) * sizeof(float));
    goblin_job *job = NULL;
    double c0 = cpu_s(), t0 = now_s();
    goblin_err e = goblin_node_submit_matmul(n, &x->ta, &x->tb, &x->tc, &jp, &job);
    if (e != GOBLIN_OK) {
        fprintf(stderr, "submit failed: %s\n", goblin_err_name(e));
        return -1;
    }
    /* Waited for in steps of 5 s, the progress on stderr (a stalled job shows). */
    for (int waited = 0; (e = goblin_job_wait(job, 5000)) == GOBLIN_ETIMEDOUT && waited < 120; waited++) {
        int64_t done = 0, total = 0;
        goblin_job_progress(job, &done, &total);
        goblin_node_stats st = stats_of(n);
        fprintf(stderr, "  %.0f s: %lld of %lld tasks done; %lld leases issued, %lld reissued, %lld workers\n",
                now_s() - t0, (long long)done, (long long)total, (long long)st.tasks_issued,
                (long long)st.tasks_reissued, (long long)st.workers_connected);
    }
    double t = now_s() - t0;
    *cpu = cpu_s() - c0;
    goblin_job_plan pi;
    memset(&pi, 0, sizeof pi);
    goblin_job_plan_info(job, &pi);
    *ntasks = pi.grid_rows * pi.grid_cols * pi.k_slices;
    if (e != GOBLIN_OK) fprintf(stderr, "job failed: %s (%s)\n", goblin_err_name(e), goblin_job_error(job));
    goblin_job_free(job);
    return e == GOBLIN_OK ? t : -1;
}

static FILE *g_log; /* GOBLIN_BENCH_SCALE_LOG: the node's log lines (WARN and up) */

static void log_line(void *user, goblin_log_level level, const char *line) {
    (void)user;
    fprintf(g_log, "%.3f %s %s\n", now_s(), goblin_log_level_name(level), line);
    fflush(g_log);
}

static int start_node(goblin_node **out, char *url, size_t cap) {
    for (int attempt = 0; attempt < 20; attempt++) {
        int port = 20000 + (int)((getpid() * 7 + attempt * 131 + (int)(now_s() * 1000)) % 40000);
        snprintf(url, cap, "tcp://127.0.0.1:%d", port);
        goblin_node_params np;
        goblin_node_params_default(&np);
        np.listen[0] = url;
        np.n_listen = 1;
        np.verify = GOBLIN_VERIFY_FREIVALDS;
        np.max_pending_connections = MAX_W; /* the groups dial at once */
        const char *lp = getenv("GOBLIN_BENCH_SCALE_LOG");
        if (lp && *lp && (g_log || (g_log = fopen(lp, "w")))) {
            np.log = log_line;
            np.log_level = GOBLIN_LOG_INFO;
        }
        if (goblin_node_new(out, &np) != GOBLIN_OK) return -1;
        if (goblin_node_start(*out) == GOBLIN_OK) return 0;
        goblin_node_free(*out);
        *out = NULL;
    }
    return -1;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--child") == 0) return child_main(argv[2], atoi(argv[3]));
    if (argc == 4 && strcmp(argv[1], "--sim-child") == 0) return sim_run(argv[2], atoi(argv[3]), 0);
    signal(SIGPIPE, SIG_IGN);
    if (!realpath("/proc/self/exe", g_self)) return 1;
    setenv("BLIS_NUM_THREADS", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    int ws[32] = {1, 4, 16, 64, 256, 1024, 2048, 4096}, nws = 8;
    const char *wl = getenv("GOBLIN_BENCH_SCALE_W");
    if (wl && *wl) {
        nws = 0;
        for (const char *q = wl; *q && nws < 32;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            if (v > 0 && v <= MAX_W && (nws == 0 || v > ws[nws - 1])) ws[nws++] = (int)v;
            q = *end ? end + 1 : end;
        }
    }
    int base_tasks = env_int("GOBLIN_BENCH_SCALE_TASKS", 16384);
    int reps = env_int("GOBLIN_BENCH_SCALE_REPS", 3);
    const char *wm = getenv("GOBLIN_BENCH_SCALE_WORKERS");
    g_sim = !(wm && strcmp(wm, "goblin") == 0);
    int group_sz = env_int("GOBLIN_BENCH_SCALE_GROUP", g_sim ? 512 : 64);
    const char *jm = getenv("GOBLIN_BENCH_SCALE_JOIN");
    bool join_all = jm ? strcmp(jm, "group") != 0 : g_sim;
    double t_start = now_s();

    goblin_node *node = NULL;
    char url[128];
    if (start_node(&node, url, sizeof url) != 0) {
        printf("cannot start a node\n");
        return 1;
    }
    usleep(200000);
    double rss0 = rss_bytes();

    printf("### Scale of one node: W workers over tcp loopback, tiny tasks and memory per idle worker "
           "(goals >= 50,000 tasks/s and <= 64 KiB per idle worker at W = 4096)\n\n");
    if (g_sim)
        printf("`build/bench/bench_scale`. The node runs alone in this process; the W workers are simulated "
               "(bench/sim_workers.h: one thread per child process drives up to %d connections, each a worker "
               "speaking the real protocol through libgoblin's proto/ encoders: SP over tcp, HELLO, identity "
               "PROOF with a key of its own, LEASE_REQUESTs as goblin_worker sends them, TASK batches computed "
               "with the executor, RESULT batches, HEARTBEATs, the panel cache). ",
               group_sz);
    else
        printf("`build/bench/bench_scale` with GOBLIN_BENCH_SCALE_WORKERS=goblin. The node runs alone in this "
               "process; the W workers (goblin_worker, 1 thread each, the real protocol) run in child processes "
               "of %d. ",
               group_sz);
    printf("Join: the time for the workers added at that W to connect and ask for work, %s, and the node's CPU "
           "over it per worker added (the identity check included). Node CPU idle: its share of a core over 3 s "
           "with the W workers idle (heartbeats; every second a LEASE_REQUEST from each worker owed leases, as "
           "goblin_worker resyncs). Node memory: this "
           "process's resident set once the W workers are connected, asking and idle, minus the node's alone "
           "(measured with W rising, before any job); per worker = that / W; per added worker = the growth from "
           "the previous W over the workers added. Tasks: a "
           "matmul A [m, 8] . B [8, m] cut into tiles of ~8 x 8 (min_tasks = max(%d, 4 W)), every tile a task "
           "leased, computed, returned and Freivalds-verified; best of %d after a warm-up, W falling (the last worker processes stopped between). Node CPU: this "
           "process's CPU during that job (the node's thread and nng's).\n\n",
           join_all ? "all dialing at once" : "one child process at a time", base_tasks, reps);
    /* Memory first, W rising, before any job (a job's allocations stay in the heap);
     * then the jobs, W falling, the last groups stopped between. */
    double rss_at[32], join_s[32], join_cpu[32], idle_cpu[32];
    static char rows[32][384];
    memset(rows, 0, sizeof rows);
    int have = 0, joined = 0;
    for (int wi = 0; wi < nws; wi++) {
        int want = ws[wi];
        double tj = now_s(), cj = cpu_s();
        while (have < want) {
            int add = want - have < group_sz ? want - have : group_sz;
            if (spawn_group(url, add) != 0) break;
            have += add;
            /* One group at a time (GOBLIN_BENCH_SCALE_JOIN=group): before the node's
             * join path was made cheap, 2,048 workers dialing at once kept its
             * handshakes (15 s each) from finishing; see docs/BENCHMARKS.md. */
            if (!join_all && !wait_workers(node, have, 60.0)) break;
        }
        if (have < want || !wait_workers(node, want, 60.0 + (double)want * 0.05)) {
            fprintf(stderr, "W=%d: only some workers joined\n", want);
            break;
        }
        join_s[wi] = now_s() - tj;
        join_cpu[wi] = (cpu_s() - cj) / (want - (wi > 0 ? ws[wi - 1] : 0));
        fprintf(stderr, "W=%d joined in %.1f s\n", want, join_s[wi]);
        sleep(2); /* settled: joins done, first heartbeats in */
        /* The node's CPU with W idle workers (heartbeats, lease requests every second
         * from those owed leases, housekeeping): a share of one core. */
        double ic0 = cpu_s(), it0 = now_s();
        sleep(3);
        idle_cpu[wi] = (cpu_s() - ic0) / (now_s() - it0);
        rss_at[wi] = rss_bytes();
        joined = wi + 1;
    }
    /* All W workers go silent at once (their processes stopped): the node drops each after
     * 3 heartbeat intervals, all in the same sweep or so; then they wake, find their
     * connections shut, redial at once and join again (same keys). */
    char drop_line[512] = "";
    const char *dm = getenv("GOBLIN_BENCH_SCALE_DROP");
    if (joined > 0 && (dm && *dm ? strcmp(dm, "0") != 0 : g_sim)) {
        int want = ws[joined - 1];
        for (int i = 0; i < g_n_groups; i++) kill(g_groups[i].pid, SIGSTOP);
        double ts = now_s(), t_first = 0, t_last = 0, c_first = 0;
        while (now_s() - ts < 60) {
            int64_t c = stats_of(node).workers_connected;
            if (!t_first && c < want) {
                t_first = now_s();
                c_first = cpu_s();
            }
            if (c == 0) {
                t_last = now_s();
                break;
            }
            usleep(2000);
        }
        double c_last = cpu_s();
        for (int i = 0; i < g_n_groups; i++) kill(g_groups[i].pid, SIGCONT);
        double tr = now_s();
        bool back = t_last > 0 && wait_workers(node, want, 120.0);
        double rejoin = now_s() - tr;
        if (t_last > 0)
            snprintf(drop_line, sizeof drop_line,
                     "Silent workers: all %d stopped at once; the node dropped the first %.1f s later and the "
                     "last %.3f s after the first (node CPU meanwhile %.3f s); woken, they redialed at once and "
                     "%s in %.1f s.",
                     want, t_first - ts, t_last - t_first, c_last - c_first,
                     back ? "all joined again" : "not all joined again", rejoin);
        else
            snprintf(drop_line, sizeof drop_line, "Silent workers: %d stopped; the node had not dropped them all "
                     "after 60 s.", want);
        fprintf(stderr, "%s\n", drop_line);
        if (!back) joined = 0;
    }
    for (int wi = joined - 1; wi >= 0; wi--) {
        int want = ws[wi];
        /* Stop whole groups above W (W values that are not multiples of the group
         * size keep a partial group from the way up: rebuilt the same way). */
        int count = 0, gi = 0;
        while (gi < g_n_groups && count < want) count += g_sizes[gi++];
        if (count != want) {
            snprintf(rows[wi], sizeof rows[wi], "| %d | (group sizes do not add up to W; skipped) | | | | | | | | | | | | |", want);
            continue;
        }
        while (g_n_groups > gi) {
            g_n_groups--;
            close(g_groups[g_n_groups].stdin_fd);
            waitpid(g_groups[g_n_groups].pid, NULL, 0);
        }
        for (int k = 0; k < 3000 && stats_of(node).workers_connected > want; k++) usleep(20000);
        if (g_log) fprintf(g_log, "%.3f bench: W=%d jobs start (%lld connected)\n", now_s(), want,
                           (long long)stats_of(node).workers_connected);
        int64_t tiles = base_tasks > 4 * (int64_t)want ? base_tasks : 4 * (int64_t)want;
        int64_t m = 8;
        while (m * m < tiles * 64) m *= 2;
        mats x;
        if (mats_new(&x, m) != 0) {
            snprintf(rows[wi], sizeof rows[wi], "| %d | out of memory | | | | | | | | | | | | |", want);
            mats_free(&x);
            break;
        }
        goblin_node_stats s0 = stats_of(node);
        double best = 1e30, best_cpu = 0, err = 0;
        int64_t nt = 0;
        bool failed = false;
        for (int r = 0; r <= reps; r++) {
            double cpu = 0;
            double t = run_job(node, &x, tiles, &cpu, &nt);
            if (t < 0) {
                failed = true;
                break;
            }
            double e = max_err(&x);
            if (e > err) err = e;
            if (r > 0 && t < best) {
                best = t;
                best_cpu = cpu;
            }
        }
        goblin_node_stats s1 = stats_of(node);
        double per = (rss_at[wi] - rss0) / 1024.0 / want;
        double prev_rss = wi > 0 ? rss_at[wi - 1] : rss0;
        int prev_w = wi > 0 ? ws[wi - 1] : 0;
        double marg = (rss_at[wi] - prev_rss) / 1024.0 / (want - prev_w);
        if (failed)
            snprintf(rows[wi], sizeof rows[wi], "| %d | %.1f s | %.2f ms | %.1f %% | %.1f MiB | %.1f KiB | %.1f KiB | job failed | | | | | | |",
                     want, join_s[wi], 1e3 * join_cpu[wi], 100 * idle_cpu[wi], rss_at[wi] / 1048576.0, per, marg);
        else
            snprintf(rows[wi], sizeof rows[wi],
                     "| %d | %.1f s | %.2f ms | %.1f %% | %.1f MiB | %.1f KiB | **%.1f KiB** | %lld tiles of ~8x8x8 | %.3f s | **%.0f** | %.1f us | %lld | %lld | %.0f |",
                     want, join_s[wi], 1e3 * join_cpu[wi], 100 * idle_cpu[wi], rss_at[wi] / 1048576.0, per, marg, (long long)nt, best, (double)nt / best,
                     best_cpu / (double)nt * 1e6, (long long)(s1.tasks_reissued - s0.tasks_reissued),
                     (long long)(s1.tasks_speculative - s0.tasks_speculative), err);
        fprintf(stderr, "%s\n", rows[wi]);
        mats_free(&x);
    }
    printf("| workers | join | node CPU per join | node CPU idle | node RSS | per worker | per added worker | tasks | job time | tasks/s | node CPU per task | reissued | speculative | max err |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int wi = 0; wi < nws; wi++)
        if (rows[wi][0]) printf("%s\n", rows[wi]);
        else printf("| %d | not reached | | | | | | | | | | | | |\n", ws[wi]);
    if (drop_line[0]) printf("\n%s\n", drop_line);
    double la[3] = {0, 0, 0};
    if (getloadavg(la, 3) < 0) la[0] = la[1] = la[2] = -1;
    printf("\nNode alone: %.1f MiB resident. Load average at end: %.2f %.2f %.2f; this program ran %.0f s.\n",
           rss0 / 1048576.0, la[0], la[1], la[2], now_s() - t_start);
    stop_groups();
    goblin_node_free(node);
    return 0;
}
