/* test_worker.c - workers: every misbehave mode among honest workers (the result
 * stays right, bad results are rejected, the cheater is quarantined), crashes,
 * refusal on a catalogue mismatch, the panel cache, parameter checks. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime_util.h"
#include "hostile_peer.h" /* hp_free_port */

typedef struct outcome {
    goblin_node_stats st;
    goblin_node_worker_stats ws[3]; /* in HELLO order: not necessarily worker order */
    bool cheater_quarantined;
    int64_t cheater_rejected, honest_rejected;
    int64_t misbehaved;
    int64_t unsafe_bad; /* wrong elements of C under UNSAFE_NONE */
} outcome;

static goblin_verify test_policy = GOBLIN_VERIFY_FREIVALDS;
static bool test_tile_by_tile = false; /* goblin_node_params.freivalds_tile_by_tile */

/* Two honest workers and one with @p mode at @p rate; a product with many tasks. */
static void run_with_cheater(goblin_misbehave mode, double rate, goblin_dtype dt, outcome *o) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.lease_ms = 400; /* SILENT leases expire quickly */
    np.max_retries = 8;
    np.verify = test_policy;
    np.freivalds_tile_by_tile = test_tile_by_tile;
    goblin_worker_params wp[3];
    for (int i = 0; i < 3; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    /* Seed 5: the cheater's first draw says honest, its second misbehave (at rate 0.3;
     * a worker asks for 2 leases when it joins, so it surely gets two tasks): every mode
     * shows at least once, after an honest result that must then be rechecked. */
    rt_faults[2] = (rt_fault){.mode = mode, .rate = rate, .seed = 5, .slow_ms = 150};
    char url[80];
    snprintf(url, sizeof url, "inproc://test-worker-%s-%d", rt_misbehave_name(mode), (int)dt);
    memset(o, 0, sizeof *o);
    rt_grid g;
    rt_grid_start_joined(&g, url, &np, wp, 3);
    rt_mat a = rt_mat_new(dt, 200, 150, 3, true), b = rt_mat_new(dt, 150, 180, 4, true);
    rt_mat c = rt_mat_new(dt, 200, 180, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 48;
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    goblin_err e = goblin_job_wait(job, 40000);
    cr_assert_eq(e, GOBLIN_OK, "%s: %s (%s)", rt_misbehave_name(mode), goblin_strerror(e),
                 goblin_job_error(job));
    if (test_policy != GOBLIN_VERIFY_UNSAFE_NONE)
        cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0, "mode %s", rt_misbehave_name(mode));
    else
        o->unsafe_bad = rt_check_product(&a.t, &b.t, &c.t);
    goblin_job_plan info;
    goblin_job_plan_info(job, &info);
    int64_t tasks = info.grid_rows * info.grid_cols * info.k_slices;
    goblin_node_stats_get(g.node, &o->st);
    cr_assert_eq(o->st.tasks_completed, tasks);
    /* One K-slice, several column panels: under Freivalds a row panel's tiles are
     * judged together (each row panel at least once), unless asked tile by tile. */
    cr_assert_eq(info.k_slices, 1);
    cr_assert_gt(info.grid_cols, 1);
    if (test_policy == GOBLIN_VERIFY_FREIVALDS && !test_tile_by_tile)
        cr_assert_geq(o->st.freivalds_row_panels, info.grid_rows);
    else
        cr_assert_eq(o->st.freivalds_row_panels, 0);
    /* The verification clocks: nothing under the unsafe mode; else some CPU, and no more
     * than the node's thread and one second thread can spend while the node's thread
     * verifies (10 ms for the clocks' granularity). */
    if (test_policy == GOBLIN_VERIFY_UNSAFE_NONE) {
        cr_assert_eq(o->st.verify_cpu_ns, 0);
    } else {
        cr_assert_gt(o->st.verify_cpu_ns, 0, "%s", rt_misbehave_name(mode));
        cr_assert_leq(o->st.verify_cpu_ns, 2 * o->st.verify_ns + 10000000, "%s: CPU %lld ns, wall %lld ns",
                      rt_misbehave_name(mode), (long long)o->st.verify_cpu_ns, (long long)o->st.verify_ns);
    }
    /* Which session is the cheater: the worker whose misbehave counter moved, or
     * for silent mode the one with failed leases; match by HELLO order is not fixed,
     * so identify it through the node's per-worker counters and the worker's own. */
    goblin_worker_stats cs;
    goblin_worker_stats_get(g.w[2], &cs);
    o->misbehaved = cs.misbehaved;
    for (int64_t i = 0; i < o->st.workers_seen && i < 3; i++) {
        cr_assert_eq(goblin_node_worker_stats_get(g.node, i, &o->ws[i]), GOBLIN_OK);
        if (o->ws[i].quarantined) o->cheater_quarantined = true;
    }
    goblin_job_free(job);
    rt_grid_stop(&g);
    free(a.data), free(b.data), free(c.data);
}

static void expect_caught(goblin_misbehave mode, goblin_dtype dt, goblin_verify_reason reason) {
    outcome o;
    run_with_cheater(mode, 0.3, dt, &o);
    cr_assert_gt(o.misbehaved, 0, "%s: the cheater cheated", rt_misbehave_name(mode));
    cr_assert_geq(o.st.results_rejected, 1, "%s: a bad result was rejected", rt_misbehave_name(mode));
    /* Freivalds rejects at once: one rejection quarantines the cheater, who gets no more
     * tasks, so every rejection is the cheater's and exactly one worker is quarantined. */
    cr_assert_eq(o.st.workers_quarantined, 1, "%s", rt_misbehave_name(mode));
    cr_assert(o.cheater_quarantined);
    int quarantined_rejected = 0, honest_rejected = 0;
    for (int i = 0; i < 3; i++) {
        if (o.ws[i].quarantined) quarantined_rejected += (int)o.ws[i].rejected;
        else honest_rejected += (int)o.ws[i].rejected;
    }
    cr_assert_eq(honest_rejected, 0, "%s: good results wrongly rejected", rt_misbehave_name(mode));
    cr_assert_eq(quarantined_rejected, 1);
    /* Everything the cheater had delivered before it was caught was rechecked; honest
     * results pass the recheck. */
    int64_t cheater_accepted = 0;
    for (int i = 0; i < 3; i++)
        if (o.ws[i].quarantined) cheater_accepted = o.ws[i].accepted;
    cr_assert_eq(o.st.rechecked, cheater_accepted);
    cr_assert_eq(o.st.recheck_failed, 0);
    cr_assert_eq(o.st.rejected_by_reason[reason], 1, "%s: reason %s", rt_misbehave_name(mode),
                 goblin_verify_reason_name(reason));
    /* A wrong tile of the right shape fails its row panel's check, whose tiles are then
     * judged one by one (a wrong shape is rejected as it arrives). */
    if (test_policy == GOBLIN_VERIFY_FREIVALDS && !test_tile_by_tile && reason != GOBLIN_VERIFY_SHAPE)
        cr_assert_geq(o.st.freivalds_row_fallbacks, 1, "%s", rt_misbehave_name(mode));
    fprintf(stderr, "misbehave %-8s %s: bad results sent %lld (some after quarantine, discarded unread), caught %lld, "
            "good results wrongly rejected %d\n", rt_misbehave_name(mode), goblin_dtype_name(dt), (long long)o.misbehaved,
            (long long)o.st.results_rejected, honest_rejected);
}

Test(worker, misbehave_wrong) { expect_caught(GOBLIN_MISBEHAVE_WRONG, GOBLIN_DTYPE_F32, GOBLIN_VERIFY_EXCEEDS_BOUND); }
Test(worker, misbehave_scale_f32) { expect_caught(GOBLIN_MISBEHAVE_SCALE, GOBLIN_DTYPE_F32, GOBLIN_VERIFY_EXCEEDS_BOUND); }
Test(worker, misbehave_scale_f64) { expect_caught(GOBLIN_MISBEHAVE_SCALE, GOBLIN_DTYPE_F64, GOBLIN_VERIFY_EXCEEDS_BOUND); }
Test(worker, misbehave_nan) { expect_caught(GOBLIN_MISBEHAVE_NAN, GOBLIN_DTYPE_F64, GOBLIN_VERIFY_NONFINITE); }
Test(worker, misbehave_stale) {
    /* Rate 1.0: the first answer is honest (there is nothing to replay yet), every later
     * one replays it; the first replay is rejected and quarantines the cheater. */
    outcome o;
    run_with_cheater(GOBLIN_MISBEHAVE_STALE, 1.0, GOBLIN_DTYPE_F32, &o);
    cr_assert_gt(o.misbehaved, 0);
    cr_assert_eq(o.st.results_rejected, 1);
    cr_assert_eq(o.st.workers_quarantined, 1);
}
Test(worker, misbehave_swap) {
    outcome o;
    run_with_cheater(GOBLIN_MISBEHAVE_SWAP, 1.0, GOBLIN_DTYPE_F64, &o);
    cr_assert_gt(o.misbehaved, 0);
    cr_assert_eq(o.st.results_rejected, 1);
    cr_assert_eq(o.st.workers_quarantined, 1);
}
Test(worker, misbehave_truncate) { expect_caught(GOBLIN_MISBEHAVE_TRUNCATE, GOBLIN_DTYPE_F32, GOBLIN_VERIFY_SHAPE); }

Test(worker, misbehave_silent) {
    outcome o;
    run_with_cheater(GOBLIN_MISBEHAVE_SILENT, 0.3, GOBLIN_DTYPE_F32, &o);
    cr_assert_gt(o.misbehaved, 0);
    /* The silent lease is either duplicated as a straggler or reissued when it expires. */
    cr_assert_geq(o.st.tasks_reissued + o.st.tasks_speculative, 1);
    cr_assert_eq(o.st.results_rejected, 0);
}

/* A worker that takes leases and never answers (SILENT at rate 1, its heartbeats still
 * going) holds up to 8 tasks of a job whose leases outlast the test: only the straggler
 * scan can finish the job, by duplicating each of those tasks on the honest worker. The
 * scan goes round the tasks from where it last found one; every straggler must still be
 * found, so the job ends with no lease expired and at least as many duplicates as the
 * silent worker was given. */
Test(worker, every_straggler_of_a_silent_worker_is_duplicated, .timeout = 90) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.lease_ms = 600000;
    goblin_worker_params wp[2];
    for (int i = 0; i < 2; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    wp[1].slots = 8;
    rt_faults[1] = (rt_fault){.mode = GOBLIN_MISBEHAVE_SILENT, .rate = 1.0, .seed = 3};
    rt_grid g;
    rt_grid_start_joined(&g, "inproc://test-worker-stragglers", &np, wp, 2);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 200, 150, 3, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 150, 180, 4, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F32, 200, 180, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 48;
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    goblin_err e = goblin_job_wait(job, 60000);
    cr_assert_eq(e, GOBLIN_OK, "%s (%s)", goblin_strerror(e), goblin_job_error(job));
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    goblin_node_stats st;
    goblin_node_stats_get(g.node, &st);
    cr_assert_eq(st.tasks_reissued, 0, "a lease expired: a straggler was not duplicated");
    int64_t silent_issued = 0;
    for (int64_t i = 0; i < st.workers_seen && i < 2; i++) {
        goblin_node_worker_stats ws;
        cr_assert_eq(goblin_node_worker_stats_get(g.node, i, &ws), GOBLIN_OK);
        if (ws.accepted == 0) silent_issued += ws.issued;
    }
    cr_assert_gt(silent_issued, 1, "the silent worker was given several tasks");
    cr_assert_geq(st.tasks_speculative, silent_issued);
    goblin_job_free(job);
    rt_grid_stop(&g);
    free(a.data), free(b.data), free(c.data);
}

Test(worker, misbehave_slow) {
    /* Slow is honest: nothing rejected; stragglers may be duplicated near the end and the
     * loser's result discarded, never counted twice. */
    outcome o;
    run_with_cheater(GOBLIN_MISBEHAVE_SLOW, 0.3, GOBLIN_DTYPE_F64, &o);
    cr_assert_gt(o.misbehaved, 0);
    cr_assert_eq(o.st.results_rejected, 0);
    cr_assert_eq(o.st.workers_quarantined, 0);
}

static atomic_int crashes;
static void crash_hook(void *user) {
    (void)user;
    atomic_fetch_add(&crashes, 1);
}

Test(worker, misbehave_crash_via_hook) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    goblin_worker_params wp[3];
    for (int i = 0; i < 3; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    /* seed 73: its first draw is 0.04: it crashes at its first task */
    rt_faults[2] = (rt_fault){.mode = GOBLIN_MISBEHAVE_CRASH, .rate = 0.3, .seed = 73, .crash_hook = crash_hook};
    rt_grid g;
    rt_grid_start_joined(&g, "inproc://test-worker-crash", &np, wp, 3);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 200, 150, 3, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 150, 180, 4, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F32, 200, 180, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 48;
    /* The tasks are tiny: on a busy machine the two honest workers may finish a job
     * before the third gets a task, so jobs are run until it has crashed (or 20). */
    goblin_job *job = NULL;
    for (int round = 0; round < 20 && atomic_load(&crashes) == 0; round++) {
        goblin_job_free(job);
        memset(c.data, 0, 200 * 180 * sizeof(float));
        cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
        cr_assert_eq(goblin_job_wait(job, 30000), GOBLIN_OK, "%s", goblin_job_error(job));
        cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    }
    cr_assert_eq(atomic_load(&crashes), 1, "the third worker crashed once");
    pthread_join(g.th[2], NULL);
    g.th[2] = pthread_self();
    cr_assert_eq(g.rc[2], GOBLIN_ECLOSED);
    cr_assert_eq(atomic_load(&crashes), 1);
    goblin_node_stats st;
    goblin_node_stats_get(g.node, &st);
    cr_assert_geq(st.tasks_reissued, 1);
    goblin_job_free(job);
    goblin_worker_stop(g.w[0]);
    goblin_worker_stop(g.w[1]);
    pthread_join(g.th[0], NULL);
    pthread_join(g.th[1], NULL);
    goblin_node_free(g.node);
    for (int i = 0; i < 3; i++) goblin_worker_free(g.w[i]);
    free(a.data), free(b.data), free(c.data);
}

Test(worker, refused_on_catalogue_mismatch) {
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    goblin_node_params np;
    goblin_node_params_default(&np);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    rt_faults[0] = (rt_fault){.catalog_version = goblin_catalog_version() + 7};
    wp.log = rt_log_fn;
    wp.log_user = &lg;
    rt_grid g;
    cr_assert_eq(rt_grid_start(&g, "inproc://test-worker-refused", &np, &wp, 1), GOBLIN_OK);
    pthread_join(g.th[0], NULL);
    g.th[0] = pthread_self();
    cr_assert_eq(g.rc[0], GOBLIN_EVERSION);
    cr_assert(rt_log_has(&lg, "refused"), "%s", lg.buf);
    cr_assert(rt_log_has(&lg, "catalogue version"), "%s", lg.buf);
    goblin_worker_stats ws;
    goblin_worker_stats_get(g.w[0], &ws);
    cr_assert_eq(ws.refused, 1);
    goblin_node_free(g.node);
    goblin_worker_free(g.w[0]);
}

Test(worker, panel_cache_reuse) {
    /* One worker, many column tiles per row: A panels are sent once per row. Over ipc://
     * (over inproc:// the node lends panels in place: inproc_panels_lent_in_place). */
    goblin_node_params np;
    goblin_node_params_default(&np);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.threads = 1;
    rt_grid g;
    char url[96];
    snprintf(url, sizeof url, "ipc:///tmp/goblin-test-worker-cache-%d", (int)getpid());
    rt_grid_start_joined(&g, url, &np, &wp, 1);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 64, 500, 3, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 500, 400, 4, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F32, 64, 400, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 16;
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 30000), GOBLIN_OK, "%s", goblin_job_error(job));
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    goblin_node_stats st;
    goblin_node_stats_get(g.node, &st);
    goblin_worker_stats ws;
    goblin_worker_stats_get(g.w[0], &ws);
    cr_assert_gt(st.panel_cache_hits, 0);
    cr_assert_eq(ws.cache_hits, st.panel_cache_hits);
    goblin_job_free(job);
    rt_grid_stop(&g);
    free(a.data), free(b.data), free(c.data);
}

static int64_t test_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Inputs kept for reuse are dropped once no TASK has come for cache_idle_ms, not
 * before; a worker with cache_idle_ms = 0 keeps them. A job after the drop is still
 * right. */
Test(worker, kept_inputs_dropped_when_idle, .timeout = 60) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    goblin_worker_params wp[2];
    for (int i = 0; i < 2; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    wp[0].cache_idle_ms = 1500;
    wp[1].cache_idle_ms = 0;
    rt_grid g;
    char url[96];
    snprintf(url, sizeof url, "ipc:///tmp/goblin-test-worker-idle-%d", (int)getpid());
    rt_grid_start_joined(&g, url, &np, wp, 2);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F64, 64, 300, 3, true), b = rt_mat_new(GOBLIN_DTYPE_F64, 300, 200, 4, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F64, 64, 200, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 32;
    for (int round = 0; round < 2; round++) {
        memset(c.data, 0, 64 * 200 * sizeof(double));
        goblin_job *job;
        cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
        cr_assert_eq(goblin_job_wait(job, 30000), GOBLIN_OK, "%s", goblin_job_error(job));
        cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
        goblin_job_free(job);
        /* Both workers computed tasks and kept their panels; the first drops them after
         * 1.5 s without a task (not yet: the job has just ended), the second keeps them. */
        goblin_worker_stats s0, s1;
        goblin_worker_stats_get(g.w[0], &s0);
        cr_assert_eq(s0.cache_expiries, round, "round %d: dropped before its time", round);
        cr_assert_gt(s0.tasks_done, 0);
        cr_assert_gt(s0.cached_inputs, 0);
        int64_t t0 = test_now_ms();
        while (s0.cache_expiries == round && test_now_ms() - t0 < 15000) {
            usleep(20000);
            goblin_worker_stats_get(g.w[0], &s0);
        }
        goblin_worker_stats_get(g.w[1], &s1);
        cr_assert_eq(s0.cache_expiries, round + 1, "round %d: %lld expiries", round, (long long)s0.cache_expiries);
        cr_assert_eq(s0.cached_inputs, 0);
        cr_assert_eq(s0.cached_bytes, 0);
        cr_assert_gt(s1.tasks_done, 0);
        cr_assert_gt(s1.cached_inputs, 0);
        cr_assert_gt(s1.cached_bytes, 0);
        cr_assert_eq(s1.cache_expiries, 0);
    }
    rt_grid_stop(&g);
    free(a.data), free(b.data), free(c.data);
}

/* A node and workers of one process (inproc://): the node lends the panels in place
 * (no copy into the TASK), the workers compute on the caller's A and B. */
Test(worker, inproc_panels_lent_in_place) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    goblin_worker_params wp[2];
    for (int i = 0; i < 2; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    rt_grid g;
    rt_grid_start_joined(&g, "inproc://test-worker-in-place", &np, wp, 2);
    /* A strided view of a wider A: the panels are views of views. */
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F64, 70, 260, 5, true), b = rt_mat_new(GOBLIN_DTYPE_F64, 250, 90, 6, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F64, 70, 90, 0, false);
    goblin_tensor av = a.t;
    av.shape[1] = 250;
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 12;
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &av, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 30000), GOBLIN_OK, "%s", goblin_job_error(job));
    cr_assert_eq(rt_check_product(&av, &b.t, &c.t), 0);
    goblin_node_stats st;
    goblin_node_stats_get(g.node, &st);
    int64_t lent = 0, hits = 0;
    for (int i = 0; i < 2; i++) {
        goblin_worker_stats ws;
        goblin_worker_stats_get(g.w[i], &ws);
        lent += ws.inputs_in_place;
        hits += ws.cache_hits;
    }
    cr_assert_eq(st.panels_in_place, 2 * st.tasks_issued, "every panel of every task lent");
    cr_assert_eq(lent, st.panels_in_place);
    cr_assert_eq(st.panel_cache_hits, 0);
    cr_assert_eq(hits, 0);
    cr_assert_eq(st.panel_cache_misses, 0);
    goblin_job_free(job);
    rt_grid_stop(&g);
    free(a.data), free(b.data), free(c.data);
}

/* Page-aligned memory that can be made unreadable. */
static double *pages(size_t n) {
    void *p = mmap(NULL, n * sizeof(double), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    return p;
}

/* A job canceled while workers compute on its operands in place: once goblin_job_wait
 * has reported the end, no worker reads A or B any more. They are made unreadable at
 * once (a late read by BLIS, which ASan does not see, crashes the test) for longer than
 * a task takes. */
Test(worker, canceled_job_operands_unread_after_wait) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.speculate = false;
    goblin_worker_params wp[2];
    for (int i = 0; i < 2; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    rt_grid g;
    rt_grid_start_joined(&g, "inproc://test-worker-cancel-in-place", &np, wp, 2);
    enum { N = 1000 };
    for (int round = 0; round < 3; round++) {
        double *ad = pages(N * N), *bd = pages(N * N), *cd = pages(N * N);
        for (int64_t i = 0; i < N * N; i++) ad[i] = bd[i] = 1.0 / (double)(1 + i % 7);
        int64_t sh[2] = {N, N};
        goblin_tensor a, b, c;
        goblin_tensor_init(&a, GOBLIN_DTYPE_F64, 2, sh, ad);
        goblin_tensor_init(&b, GOBLIN_DTYPE_F64, 2, sh, bd);
        goblin_tensor_init(&c, GOBLIN_DTYPE_F64, 2, sh, cd);
        goblin_job_params jp;
        goblin_job_params_default(&jp);
        jp.min_tasks = 8;
        goblin_job *job;
        cr_assert_eq(goblin_node_submit_matmul(g.node, &a, &b, &c, &jp, &job), GOBLIN_OK);
        for (int k = 0; k < 2000; k++) { /* until the workers hold leases */
            goblin_node_stats st;
            goblin_node_stats_get(g.node, &st);
            if (st.tasks_issued >= 2) break;
            usleep(1000);
        }
        usleep(2000 * (useconds_t)round); /* early, and a little into the tasks */
        goblin_job_cancel(job);
        cr_assert_eq(goblin_job_wait(job, 30000), GOBLIN_ECANCELED);
        cr_assert_eq(mprotect(ad, N * N * sizeof(double), PROT_NONE), 0);
        cr_assert_eq(mprotect(bd, N * N * sizeof(double), PROT_NONE), 0);
        usleep(300 * 1000);
        goblin_job_free(job);
        munmap(ad, N * N * sizeof(double));
        munmap(bd, N * N * sizeof(double));
        munmap(cd, N * N * sizeof(double));
    }
    /* The grid still works. */
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F64, 40, 30, 9, true), b = rt_mat_new(GOBLIN_DTYPE_F64, 30, 20, 10, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F64, 40, 20, 0, false);
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, NULL, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 30000), GOBLIN_OK, "%s", goblin_job_error(job));
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    goblin_job_free(job);
    rt_grid_stop(&g);
    free(a.data), free(b.data), free(c.data);
}

Test(worker, params_and_names) {
    goblin_misbehave m;
    double r;
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_MISBEHAVE_PARSE, "wrong:0.2", &m, &r), GOBLIN_OK);
    cr_assert_eq(m, GOBLIN_MISBEHAVE_WRONG);
    cr_assert_float_eq(r, 0.2, 1e-12);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_MISBEHAVE_PARSE, "silent", &m, &r), GOBLIN_OK);
    cr_assert_eq(m, GOBLIN_MISBEHAVE_SILENT);
    cr_assert_eq(r, 1.0);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_MISBEHAVE_PARSE, "scale:1.5", &m, &r), GOBLIN_EINVAL);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_MISBEHAVE_PARSE, "scale:", &m, &r), GOBLIN_EINVAL);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_MISBEHAVE_PARSE, "lie", &m, &r), GOBLIN_EINVAL);
    for (int i = 0; i < GOBLIN_MISBEHAVE_COUNT; i++) cr_assert_not_null(rt_misbehave_name((goblin_misbehave)i));
    cr_assert_null(rt_misbehave_name(GOBLIN_MISBEHAVE_COUNT));
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    goblin_worker *w = NULL;
    cr_assert_eq(goblin_worker_new(&w, &wp), GOBLIN_EINVAL, "no URL");
    wp.connect[0] = "inproc://nowhere";
    wp.n_connect = 1;
    wp.slots = 0;
    cr_assert_eq(goblin_worker_new(&w, &wp), GOBLIN_EINVAL);
    wp.slots = 2;
    cr_assert_eq(goblin_worker_new(&w, &wp), GOBLIN_OK);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, w, GOBLIN_MISBEHAVE_WRONG, 2.0, (uint64_t)0),
                 GOBLIN_EINVAL);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, w, GOBLIN_MISBEHAVE_WRONG, 0.0, (uint64_t)0),
                 GOBLIN_OK);
    goblin_worker_free(w);
    goblin_node_params np;
    goblin_node_params_default(&np);
    goblin_node *n = NULL;
    cr_assert_eq(goblin_node_new(&n, &np), GOBLIN_EINVAL, "no URL");
    np.listen[0] = "inproc://x";
    np.n_listen = 1;
    np.freivalds_vectors = 0;
    cr_assert_eq(goblin_node_new(&n, &np), GOBLIN_EINVAL);
    np.freivalds_vectors = 4;
    np.verify_threads = 0;
    cr_assert_eq(goblin_node_new(&n, &np), GOBLIN_EINVAL);
    np.verify_threads = 3;
    cr_assert_eq(goblin_node_new(&n, &np), GOBLIN_EINVAL);
    np.verify_threads = 2;
    cr_assert_eq(goblin_node_new(&n, &np), GOBLIN_OK);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 2, 2, 1, true);
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(n, &a.t, &a.t, &a.t, NULL, &job), GOBLIN_ESTATE, "not started");
    goblin_node_free(n);
    free(a.data);
    cr_assert_str_eq(goblin_log_level_name(GOBLIN_LOG_WARN), "warn");
}

Test(worker, reconnects_when_the_node_comes_back) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.threads = 1;
    wp.reconnect_min_ms = 20;
    wp.reconnect_max_ms = 100;
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", hp_free_port());
    rt_grid g;
    rt_grid_start_joined(&g, url, &np, &wp, 1);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F64, 30, 40, 3, true), b = rt_mat_new(GOBLIN_DTYPE_F64, 40, 20, 4, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F64, 30, 20, 0, false);
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, NULL, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 10000), GOBLIN_OK);
    goblin_job_free(job);
    /* The node goes away and a new one listens on the same address. */
    goblin_node_free(g.node);
    np.listen[0] = url;
    np.n_listen = 1;
    cr_assert_eq(goblin_node_new(&g.node, &np), GOBLIN_OK);
    goblin_err e = GOBLIN_EIO;
    for (int i = 0; i < 100 && e != GOBLIN_OK; i++) {
        e = goblin_node_start(g.node); /* the port may linger for a moment */
        if (e) usleep(20000);
    }
    cr_assert_eq(e, GOBLIN_OK);
    cr_assert(rt_wait_workers(g.node, 1), "the worker came back");
    memset(c.data, 0, 30 * 20 * sizeof(double));
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, NULL, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 10000), GOBLIN_OK);
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    goblin_job_free(job);
    goblin_worker_stats ws;
    goblin_worker_stats_get(g.w[0], &ws);
    cr_assert_eq(ws.connects, 2);
    rt_grid_stop(&g);
    free(a.data), free(b.data), free(c.data);
}

Test(worker, recompute_policy_catches_cheater) {
    test_policy = GOBLIN_VERIFY_RECOMPUTE;
    expect_caught(GOBLIN_MISBEHAVE_SCALE, GOBLIN_DTYPE_F64, GOBLIN_VERIFY_EXCEEDS_BOUND);
}

Test(worker, tile_by_tile_catches_cheater) {
    /* goblin_node_params.freivalds_tile_by_tile: each tile judged alone as it arrives. */
    test_tile_by_tile = true;
    expect_caught(GOBLIN_MISBEHAVE_WRONG, GOBLIN_DTYPE_F32, GOBLIN_VERIFY_EXCEEDS_BOUND);
    expect_caught(GOBLIN_MISBEHAVE_SCALE, GOBLIN_DTYPE_F64, GOBLIN_VERIFY_EXCEEDS_BOUND);
}

Test(worker, unsafe_policy_checks_nothing) {
    /* The named unsafe mode really does not verify: a wrong tile goes into C. */
    test_policy = GOBLIN_VERIFY_UNSAFE_NONE;
    outcome o;
    run_with_cheater(GOBLIN_MISBEHAVE_WRONG, 0.3, GOBLIN_DTYPE_F32, &o);
    cr_assert_gt(o.misbehaved, 0);
    cr_assert_eq(o.st.results_rejected, 0);
    cr_assert_gt(o.unsafe_bad, 0);
}

/* ---- batches (protocol 1.1) ----------------------------------------------------- */

/* Many tiny tasks (8 x 8 x 8 tiles): the node sends them in batches, the workers
 * answer in batches; with @p cheat, worker 2 returns wrong tiles at rate 0.3. The
 * product is checked against the f64 reference. */
static void tiny_tasks(bool cheat, goblin_dtype dt, goblin_misbehave mode) {
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.max_retries = 8;
    goblin_worker_params wp[4];
    for (int i = 0; i < 4; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
        wp[i].log = rt_log_fn;
        wp[i].log_user = &lg;
    }
    if (cheat) {
        rt_faults[2] = (rt_fault){.mode = mode, .rate = 0.3, .seed = 77};
    }
    char url[80];
    snprintf(url, sizeof url, "inproc://test-worker-tiny-%d-%d", (int)cheat, (int)mode);
    rt_grid g;
    rt_grid_start_joined(&g, url, &np, wp, 4);
    /* All four have asked for work before the job (each logs its HELLO_ACK and sends its
     * LEASE_REQUEST at once): 256 tiny tasks can be gone before a late worker's first
     * request is read, and the cheater then gets none (seen in a loaded CI run). */
    for (int i = 0; i < 6000; i++) {
        pthread_mutex_lock(&lg.mu);
        int joined = 0;
        for (const char *q = lg.buf; (q = strstr(q, "joined the node as worker")) != NULL; q++) joined++;
        pthread_mutex_unlock(&lg.mu);
        if (joined >= 4) break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    struct timespec settle = {0, 50000000}; /* their requests read by the node */
    nanosleep(&settle, NULL);
    rt_mat a = rt_mat_new(dt, 128, 8, 31, true), b = rt_mat_new(dt, 8, 128, 32, true);
    rt_mat c = rt_mat_new(dt, 128, 128, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 256;
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    goblin_err e = goblin_job_wait(job, 40000);
    cr_assert_eq(e, GOBLIN_OK, "%s (%s)", goblin_strerror(e), goblin_job_error(job));
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    goblin_job_plan info;
    goblin_job_plan_info(job, &info);
    int64_t tasks = info.grid_rows * info.grid_cols * info.k_slices;
    cr_assert_geq(tasks, 256);
    cr_assert_eq(info.tile_rows * info.tile_cols * info.tile_k, 8 * 8 * 8);
    goblin_node_stats st;
    goblin_node_stats_get(g.node, &st);
    cr_assert_eq(st.tasks_completed, tasks);
    cr_assert(rt_log_has(&lg, "(batches)"), "the workers joined with batches on");
    goblin_worker_stats cs;
    goblin_worker_stats_get(g.w[2], &cs);
    if (cheat) {
        cr_assert_gt(cs.misbehaved, 0);
        cr_assert_eq(st.workers_quarantined, 1);
        cr_assert_geq(st.results_rejected, 1);
        int64_t honest_rejected = 0, cheater_accepted = -1;
        for (int64_t i = 0; i < st.workers_seen && i < 4; i++) {
            goblin_node_worker_stats ws;
            cr_assert_eq(goblin_node_worker_stats_get(g.node, i, &ws), GOBLIN_OK);
            if (ws.quarantined) cheater_accepted = ws.accepted;
            else honest_rejected += ws.rejected;
        }
        cr_assert_eq(honest_rejected, 0);
        cr_assert_eq(st.rechecked, cheater_accepted);
    } else {
        cr_assert_eq(st.results_rejected, 0);
        cr_assert_eq(st.workers_quarantined, 0);
    }
    goblin_job_free(job);
    rt_grid_stop(&g);
    free(a.data), free(b.data), free(c.data);
}

Test(worker, tiny_tasks_in_batches) { tiny_tasks(false, GOBLIN_DTYPE_F32, GOBLIN_MISBEHAVE_NONE); }
Test(worker, tiny_tasks_in_batches_f64) { tiny_tasks(false, GOBLIN_DTYPE_F64, GOBLIN_MISBEHAVE_NONE); }
Test(worker, batching_cheater_caught) { tiny_tasks(true, GOBLIN_DTYPE_F32, GOBLIN_MISBEHAVE_WRONG); }
Test(worker, batching_truncating_cheater_caught) { tiny_tasks(true, GOBLIN_DTYPE_F64, GOBLIN_MISBEHAVE_TRUNCATE); }

/* A TASK lost on the way (nng's pair1 drops a message to a full pipe) must not idle a
 * worker for good: a stand-in node that answers HELLO and then never sends the TASKs
 * asked for sees the worker ask again after about a second (and count it). */
#include <nng/nng.h>
#include <goblin/alloc.h>
#include <nng/protocol/pair1/pair.h>

static void *run_worker_thread(void *arg) {
    goblin_worker_run(arg);
    return NULL;
}

/* A stand-in node's HELLO_ACK to HELLO @p d, which came in @p m. */
static void standin_hello_ack(nng_socket s, const nng_msg *m, const goblin__wire_msg *d) {
    goblin__wire_msg a;
    goblin__wire_msg_init(&a, GOBLIN_WIRE_TYPE_HELLO_ACK);
    a.request_id = d->request_id;
    a.body.hello_ack.session_id = 1;
    a.body.hello_ack.heartbeat_ms = 0;
    a.body.hello_ack.max_message_bytes = 1 << 20;
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin__wire_encode(&a, &buf, &len), GOBLIN_OK);
    nng_msg *r;
    nng_msg_alloc(&r, 0);
    nng_msg_append(r, buf, len);
    nng_msg_set_pipe(r, nng_msg_get_pipe(m));
    cr_assert_eq(nng_sendmsg(s, r, 0), 0);
    goblin_buffer_free(buf);
}

Test(worker, asks_again_when_asked_tasks_never_come) {
    nng_socket s;
    cr_assert_eq(nng_pair1_open_poly(&s), 0);
    cr_assert_eq(nng_listen(s, "inproc://test-worker-resync", NULL, 0), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = "inproc://test-worker-resync";
    wp.n_connect = 1;
    goblin_worker *w;
    cr_assert_eq(goblin_worker_new(&w, &wp), GOBLIN_OK);
    pthread_t th;
    pthread_create(&th, NULL, run_worker_thread, w);
    int requests = 0;
    double t_first = 0, t_second = 0;
    for (int got = 0; got < 8 && requests < 2; got++) {
        nng_msg *m;
        cr_assert_eq(nng_recvmsg(s, &m, 0), 0, "the worker went quiet");
        goblin__wire_msg *d = NULL;
        char err[200];
        cr_assert_eq(goblin__wire_decode(nng_msg_body(m), nng_msg_len(m), NULL, 0, &d, err, sizeof err), GOBLIN_OK,
                     "%s", err);
        if (d->type == GOBLIN_WIRE_TYPE_HELLO) {
            standin_hello_ack(s, m, d);
        } else if (d->type == GOBLIN_WIRE_TYPE_LEASE_REQUEST) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            double t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
            if (requests++ == 0) t_first = t;
            else t_second = t;
            cr_assert_geq(d->body.lease_request.slots, 1);
        }
        goblin__wire_msg_free(d);
        nng_msg_free(m);
    }
    cr_assert_eq(requests, 2, "the worker asked %d times", requests);
    cr_assert_geq(t_second - t_first, 0.5, "asked again after only %.3f s", t_second - t_first);
    goblin_worker_stats ws;
    goblin_worker_stats_get(w, &ws);
    cr_assert_geq(ws.lease_resyncs, 1);
    goblin_worker_stop(w);
    pthread_join(th, NULL);
    goblin_worker_free(w);
    nng_close(s);
}

/* ---- the panel cache, driven by a stand-in node ------------------------------------- */

/* Reply HELLO_ACK to the worker's HELLO on stand-in node socket @p s. */
static void standin_accept(nng_socket s) {
    for (;;) {
        nng_msg *m;
        cr_assert_eq(nng_recvmsg(s, &m, 0), 0, "no HELLO");
        goblin__wire_msg *d = NULL;
        cr_assert_eq(goblin__wire_decode(nng_msg_body(m), nng_msg_len(m), NULL, 0, &d, NULL, 0), GOBLIN_OK);
        bool hello = d->type == GOBLIN_WIRE_TYPE_HELLO;
        if (hello) standin_hello_ack(s, m, d);
        goblin__wire_msg_free(d);
        nng_msg_free(m);
        if (hello) return;
    }
}

enum { CN = 256 }; /* elements per panel: 1 KiB of f32 */

/* Send TASK @p id: out = a + b for panels with cache ids @p ida, @p idb; a panel whose
 * @p data is NULL is left out (the worker must take it from its cache). Returns the
 * worker's answer: GOBLIN_OK with @p out filled, or the code of its ERROR. */
static goblin_err standin_task(nng_socket s, const uint8_t *gbuf, size_t glen, uint64_t id, uint64_t ida,
                               const float *a, uint64_t idb, const float *b, float *out) {
    int64_t shp[1] = {CN}, s0[1] = {0}, sd[1] = {4};
    goblin_tensor in[3];
    goblin_tensor_init(&in[0], GOBLIN_DTYPE_F32, 1, a ? shp : s0, (void *)a);
    goblin_tensor_init(&in[1], GOBLIN_DTYPE_F32, 1, b ? shp : s0, (void *)b);
    int64_t dir[4] = {(int64_t)ida, (int64_t)idb, a ? 0 : 1, b ? 0 : 1};
    goblin_tensor_init(&in[2], GOBLIN_DTYPE_I64, 1, sd, dir);
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_TASK);
    m.request_id = id;
    m.body.task.task_id = id;
    m.body.task.lease_ms = 10000;
    m.body.task.graph = (uint8_t *)gbuf;
    m.body.task.graph_len = glen;
    m.body.task.n_inputs = 3;
    m.body.task.inputs = in;
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin__wire_encode(&m, &buf, &len), GOBLIN_OK);
    nng_msg *r;
    nng_msg_alloc(&r, 0);
    nng_msg_append(r, buf, len);
    goblin_buffer_free(buf);
    cr_assert_eq(nng_sendmsg(s, r, 0), 0);
    for (;;) {
        nng_msg *rm;
        cr_assert_eq(nng_recvmsg(s, &rm, 0), 0, "no answer to task %llu", (unsigned long long)id);
        goblin__wire_msg *d = NULL;
        cr_assert_eq(goblin__wire_decode(nng_msg_body(rm), nng_msg_len(rm), NULL, 0, &d, NULL, 0), GOBLIN_OK);
        goblin_err e = GOBLIN_EPROTO;
        bool done = false;
        if (d->type == GOBLIN_WIRE_TYPE_RESULT && d->body.result.task_id == id) {
            cr_assert_eq(d->body.result.n_outputs, 1);
            cr_assert_eq(goblin_tensor_numel(&d->body.result.outputs[0]), CN);
            memcpy(out, d->body.result.outputs[0].data, CN * sizeof(float));
            e = GOBLIN_OK;
            done = true;
        } else if (d->type == GOBLIN_WIRE_TYPE_ERROR && d->body.error.task_id == id) {
            e = d->body.error.code;
            done = true;
        }
        goblin__wire_msg_free(d);
        nng_msg_free(rm);
        if (done) return e;
    }
}

static void fill(float *p, int seed) {
    for (int i = 0; i < CN; i++) p[i] = (float)(seed * 1000 + i);
}

static void expect_sum(const float *out, int sa, int sb) {
    for (int i = 0; i < CN; i++)
        cr_assert_eq(out[i], (float)(sa * 1000 + i) + (float)(sb * 1000 + i), "element %d of %d + %d", i, sa, sb);
}

/* A worker with @p cache_bytes of panel cache, dialed into stand-in node socket s at
 * @p url, and the serialized graph out = a + b of two [CN] f32 inputs. */
typedef struct standin {
    nng_socket s;
    goblin_worker *w;
    pthread_t th;
    uint8_t *gbuf;
    size_t glen;
    uint64_t tid;
} standin;

static void standin_start(standin *t, const char *url, uint64_t cache_bytes) {
    cr_assert_eq(nng_pair1_open_poly(&t->s), 0);
    cr_assert_eq(nng_listen(t->s, url, NULL, 0), 0);
    nng_socket_set_ms(t->s, NNG_OPT_RECVTIMEO, 5000);
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t shp[1] = {CN};
    int32_t x, y, z;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, shp, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, shp, &y), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, (int32_t[]){x, y}, 2, NULL, 0, &z), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, z), GOBLIN_OK);
    cr_assert_eq(goblin_graph_serialize(g, &t->gbuf, &t->glen), GOBLIN_OK);
    goblin_graph_free(g);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = url;
    wp.n_connect = 1;
    wp.threads = 1;
    wp.cache_bytes = cache_bytes;
    cr_assert_eq(goblin_worker_new(&t->w, &wp), GOBLIN_OK);
    pthread_create(&t->th, NULL, run_worker_thread, t->w);
    standin_accept(t->s);
    t->tid = 1;
}

/* out = panel ida (data @p a, or NULL: from the cache) + panel idb (likewise). */
static goblin_err standin_add(standin *t, uint64_t ida, const float *a, uint64_t idb, const float *b, float *out) {
    return standin_task(t->s, t->gbuf, t->glen, t->tid++, ida, a, idb, b, out);
}

static void standin_stop(standin *t) {
    goblin_worker_stop(t->w);
    pthread_join(t->th, NULL);
    goblin_worker_free(t->w);
    goblin_buffer_free(t->gbuf);
    nng_close(t->s);
}

Test(worker, panel_cache_keeps_recent_panels_and_evicts_the_least_recent, .timeout = 60) {
    enum { KEEP = 200 }; /* panels the cache holds (bytes; under the count limit of 256) */
    standin t;
    standin_start(&t, "inproc://test-worker-lru", KEEP * CN * sizeof(float));
    float a[CN], b[CN], out[CN];
    /* Exactly what a 3-panel cache does, scaled: panels 1 and 2, then 3 with 1 from
     * the cache (1 is now more recent than 2) ... */
    for (int p = 1; p <= KEEP; p += 2) {
        fill(a, p), fill(b, p + 1);
        cr_assert_eq(standin_add(&t, (uint64_t)p, a, (uint64_t)p + 1, b, out), GOBLIN_OK);
        expect_sum(out, p, p + 1);
    }
    /* the cache is full (KEEP panels); touch the odd ones, oldest first */
    for (int p = 1; p <= KEEP; p += 2) {
        cr_assert_eq(standin_add(&t, (uint64_t)p, NULL, (uint64_t)p, NULL, out), GOBLIN_OK, "panel %d was kept", p);
        expect_sum(out, p, p);
    }
    /* KEEP / 2 new panels evict the KEEP / 2 least recently used: the even ones */
    for (int p = KEEP + 1; p <= KEEP + KEEP / 2; p++) {
        fill(a, p);
        cr_assert_eq(standin_add(&t, (uint64_t)p, a, 1, NULL, out), GOBLIN_OK);
        expect_sum(out, p, 1);
    }
    for (int p = 2; p <= KEEP; p += 2)
        cr_assert_eq(standin_add(&t, (uint64_t)p, NULL, 1, NULL, out), GOBLIN_ENOTFOUND, "panel %d was evicted", p);
    for (int p = 3; p <= KEEP + KEEP / 2; p += (p < KEEP ? 2 : 1)) {
        cr_assert_eq(standin_add(&t, (uint64_t)p, NULL, 1, NULL, out), GOBLIN_OK, "panel %d was kept", p);
        expect_sum(out, p, 1);
    }
    goblin_worker_stats ws;
    goblin_worker_stats_get(t.w, &ws);
    cr_assert_eq(ws.cache_misses, KEEP / 2);
    standin_stop(&t);
}

/* Bytes to spare, yet at most 256 panels: the oldest go (a node only names panels among
 * the last 32 of each kind it sent, so a training run's old weights are never needed). */
Test(worker, panel_cache_keeps_at_most_256_panels, .timeout = 60) {
    standin t;
    standin_start(&t, "inproc://test-worker-count", (uint64_t)1 << 30);
    float a[CN], b[CN], out[CN];
    for (int p = 1; p <= 300; p += 2) {
        fill(a, p), fill(b, p + 1);
        cr_assert_eq(standin_add(&t, (uint64_t)p, a, (uint64_t)p + 1, b, out), GOBLIN_OK);
    }
    for (int p = 1; p <= 44; p++)
        cr_assert_eq(standin_add(&t, (uint64_t)p, NULL, (uint64_t)p, NULL, out), GOBLIN_ENOTFOUND, "panel %d", p);
    for (int p = 45; p <= 300; p++) {
        cr_assert_eq(standin_add(&t, (uint64_t)p, NULL, (uint64_t)p, NULL, out), GOBLIN_OK, "panel %d", p);
        expect_sum(out, p, p);
    }
    standin_stop(&t);
}
