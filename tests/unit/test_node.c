/* test_node.c - the node: jobs on an embedded grid and over tcp, split-K, lost
 * workers, refused and malformed peers, the plan of a huge product. Products are
 * checked against an f64 reference computed here, within 2 gamma_K sum |a||b|. */
#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <time.h>
#include <unistd.h>

#include <goblin/alloc.h>
#include <goblin/tls.h>

#include "runtime_util.h"
#include "hostile_peer.h" /* hp_free_port */

static void run_product(goblin_node *node, goblin_dtype dt, int64_t m, int64_t k, int64_t n,
                        const goblin_job_params *jp, goblin_job_plan *info_out) {
    rt_mat a = rt_mat_new(dt, m, k, 11, true), b = rt_mat_new(dt, k, n, 22, true);
    rt_mat c = rt_mat_new(dt, m, n, 0, false);
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_matmul(node, &a.t, &b.t, &c.t, jp, &job), GOBLIN_OK);
    goblin_err e = goblin_job_wait(job, 30000);
    cr_assert_eq(e, GOBLIN_OK, "job: %s (%s)", goblin_strerror(e), goblin_job_error(job));
    cr_assert_eq(goblin_job_get_status(job), GOBLIN_JOB_DONE);
    int64_t done = -1, total = -1;
    goblin_job_progress(job, &done, &total);
    cr_assert_eq(done, total);
    if (info_out) cr_assert_eq(goblin_job_plan_info(job, info_out), GOBLIN_OK);
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    goblin_job_free(job);
    free(a.data);
    free(b.data);
    free(c.data);
}

Test(node, grid_f32_awkward_shape) {
    goblin_grid *g = rt_local_grid(3, NULL);
    goblin_node *node = goblin_grid_node(g);
    goblin_job_plan info;
    run_product(node, GOBLIN_DTYPE_F32, 517, 333, 421, NULL, &info);
    cr_assert_gt(info.grid_rows * info.grid_cols, 1);
    goblin_node_stats st;
    goblin_node_stats_get(node, &st);
    int64_t tasks = info.grid_rows * info.grid_cols * info.k_slices;
    cr_assert_eq(st.tasks_completed, tasks);
    cr_assert_eq(st.results_accepted + st.results_escalated, tasks);
    cr_assert_eq(st.results_rejected, 0);
    cr_assert_eq(st.workers_quarantined, 0);
    int busy = 0;
    for (int64_t i = 0; i < st.workers_seen; i++) {
        goblin_node_worker_stats ws;
        cr_assert_eq(goblin_node_worker_stats_get(node, i, &ws), GOBLIN_OK);
        busy += ws.accepted > 0;
    }
    cr_assert_geq(busy, 2, "work spread over the workers");
    goblin_grid_free(g);
}

static int64_t progress_calls, progress_last;
static void count_progress(void *user, int64_t done, int64_t total) {
    (void)user;
    progress_calls++;
    progress_last = done * 1000 + total;
}

Test(node, grid_f64_split_k) {
    goblin_grid *g = rt_local_grid(3, NULL);
    goblin_node *node = goblin_grid_node(g);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.task_memory_bytes = 96 * 1024; /* forces K to be cut */
    jp.progress = count_progress;
    progress_calls = 0;
    goblin_job_plan info;
    run_product(node, GOBLIN_DTYPE_F64, 67, 1500, 45, &jp, &info);
    cr_assert_gt(info.k_slices, 1, "split-K expected, got %lld slices", (long long)info.k_slices);
    int64_t tasks = info.grid_rows * info.grid_cols * info.k_slices;
    cr_assert_eq(progress_calls, tasks);
    cr_assert_eq(progress_last, tasks * 1000 + tasks);
    goblin_grid_free(g);
}

Test(node, split_k_is_deterministic) {
    /* Two runs of the same split-K product give identical bits, whatever the order in
     * which the partials arrive. */
    goblin_grid *g = rt_local_grid(3, NULL);
    goblin_node *node = goblin_grid_node(g);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.task_memory_bytes = 48 * 1024;
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 40, 2000, 5, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 2000, 30, 6, true);
    rt_mat c1 = rt_mat_new(GOBLIN_DTYPE_F32, 40, 30, 0, false), c2 = rt_mat_new(GOBLIN_DTYPE_F32, 40, 30, 0, false);
    goblin_job *j1, *j2;
    cr_assert_eq(goblin_node_submit_matmul(node, &a.t, &b.t, &c1.t, &jp, &j1), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(j1, 30000), GOBLIN_OK);
    cr_assert_eq(goblin_node_submit_matmul(node, &a.t, &b.t, &c2.t, &jp, &j2), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(j2, 30000), GOBLIN_OK);
    goblin_job_plan info;
    goblin_job_plan_info(j1, &info);
    cr_assert_gt(info.k_slices, 1);
    cr_assert_eq(memcmp(c1.data, c2.data, 40 * 30 * sizeof(float)), 0);
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c1.t), 0);
    goblin_job_free(j1);
    goblin_job_free(j2);
    goblin_grid_free(g);
    free(a.data), free(b.data), free(c1.data), free(c2.data);
}

Test(node, strided_operands_and_empty_products) {
    goblin_grid *g = rt_local_grid(2, NULL);
    goblin_node *node = goblin_grid_node(g);
    /* A is the transpose of a stored [k, m] matrix; C is written into every other column. */
    int64_t m = 70, k = 90, n = 50;
    rt_mat at = rt_mat_new(GOBLIN_DTYPE_F64, k, m, 7, true), b = rt_mat_new(GOBLIN_DTYPE_F64, k, n, 8, true);
    rt_mat cw = rt_mat_new(GOBLIN_DTYPE_F64, m, 2 * n, 0, false);
    goblin_tensor a = at.t, c = cw.t;
    a.shape[0] = m, a.shape[1] = k, a.strides[0] = 1, a.strides[1] = m;
    c.shape[1] = n, c.strides[1] = 2;
    for (int64_t i = 0; i < m * 2 * n; i++) ((double *)cw.data)[i] = -7.0;
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(node, &a, &b.t, &c, NULL, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 30000), GOBLIN_OK);
    cr_assert_eq(rt_check_product(&a, &b.t, &c), 0);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) cr_assert_eq(((double *)cw.data)[i * 2 * n + 2 * j + 1], -7.0);
    goblin_job_free(job);
    /* K = 0: C is zero; m = 0: nothing to do. */
    rt_mat a0 = rt_mat_new(GOBLIN_DTYPE_F64, 3, 0, 0, false), b0 = rt_mat_new(GOBLIN_DTYPE_F64, 0, 4, 0, false);
    rt_mat c0 = rt_mat_new(GOBLIN_DTYPE_F64, 3, 4, 0, false);
    for (int i = 0; i < 12; i++) ((double *)c0.data)[i] = 5;
    cr_assert_eq(goblin_node_submit_matmul(node, &a0.t, &b0.t, &c0.t, NULL, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 1000), GOBLIN_OK);
    for (int i = 0; i < 12; i++) cr_assert_eq(((double *)c0.data)[i], 0.0);
    goblin_job_free(job);
    /* Bad arguments. */
    cr_assert_eq(goblin_node_submit_matmul(node, &b.t, &b.t, &c, NULL, &job), GOBLIN_ESHAPE);
    rt_mat af = rt_mat_new(GOBLIN_DTYPE_F32, m, k, 1, true);
    cr_assert_eq(goblin_node_submit_matmul(node, &af.t, &b.t, &c, NULL, &job), GOBLIN_EDTYPE);
    cr_assert_eq(goblin_node_submit_matmul(NULL, &af.t, &b.t, &c, NULL, &job), GOBLIN_EINVAL);
    goblin_grid_free(g);
    free(at.data), free(b.data), free(cw.data), free(a0.data), free(b0.data), free(c0.data), free(af.data);
}

Test(node, over_tcp_with_worker_threads) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    goblin_worker_params wp[3];
    for (int i = 0; i < 3; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", hp_free_port());
    rt_grid g;
    rt_grid_start_joined(&g, url, &np, wp, 3);
    run_product(g.node, GOBLIN_DTYPE_F32, 300, 200, 260, NULL, NULL);
    run_product(g.node, GOBLIN_DTYPE_F64, 129, 257, 65, NULL, NULL);
    /* Multi-megabyte TASK messages. */
    run_product(g.node, GOBLIN_DTYPE_F32, 600, 1400, 500, NULL, NULL);
    rt_grid_stop(&g);
}

/* ---- a worker that goes away ----------------------------------------------------- */

static goblin_worker *victim;
static void stop_victim(void *user, int64_t done, int64_t total) {
    (void)user, (void)total;
    /* >= 3, not == 3: progress may move by a row panel's tiles at once (and stopping
     * twice is harmless) */
    if (done >= 3) goblin_worker_stop(victim);
}

Test(node, worker_stopped_mid_job) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    goblin_worker_params wp[3];
    for (int i = 0; i < 3; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
        wp[i].slots = 3;
    }
    /* The victim is slow (honest, each answer held back up to 5 s, cut short when it
     * stops): when the others have delivered 3 tiles it surely holds leases, one being
     * computed and at least one queued, which it must give back when stopped. */
    rt_faults[0] = (rt_fault){.mode = GOBLIN_MISBEHAVE_SLOW, .rate = 1.0, .slow_ms = 5000};
    rt_grid g;
    rt_grid_start_joined(&g, "inproc://test-node-stop", &np, wp, 3);
    victim = g.w[0];
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 60;
    jp.progress = stop_victim;
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 240, 300, 1, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 300, 250, 2, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F32, 240, 250, 0, false);
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 30000), GOBLIN_OK, "%s", goblin_job_error(job));
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    goblin_job_plan info;
    goblin_job_plan_info(job, &info);
    int64_t tasks = info.grid_rows * info.grid_cols * info.k_slices;
    goblin_node_stats st;
    goblin_node_stats_get(g.node, &st);
    cr_assert_eq(st.tasks_completed, tasks, "no tile counted twice");
    cr_assert_eq(st.results_accepted + st.results_escalated, tasks);
    cr_assert_geq(st.tasks_reissued, 1, "the stopped worker's leases were reissued");
    pthread_join(g.th[0], NULL);
    cr_assert_eq(g.rc[0], GOBLIN_OK);
    g.th[0] = pthread_self(); /* already joined */
    goblin_job_free(job);
    goblin_worker_stop(g.w[1]);
    goblin_worker_stop(g.w[2]);
    pthread_join(g.th[1], NULL);
    pthread_join(g.th[2], NULL);
    goblin_node_free(g.node);
    for (int i = 0; i < 3; i++) goblin_worker_free(g.w[i]);
    free(a.data), free(b.data), free(c.data);
}

Test(node, job_fails_after_bounded_retries) {
    /* Only a silent worker: every lease expires; the job fails clearly. */
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.lease_ms = 60;
    np.max_retries = 2;
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.threads = 1;
    rt_faults[0] = (rt_fault){.mode = GOBLIN_MISBEHAVE_SILENT, .rate = 1.0};
    wp.slots = 64;
    rt_grid g;
    rt_grid_start_joined(&g, "inproc://test-node-retries", &np, &wp, 1);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 8, 8, 1, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 8, 8, 2, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F32, 8, 8, 0, false);
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, NULL, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 20000), GOBLIN_ELIMIT,
                 "%s", goblin_job_error(job));
    cr_assert_eq(goblin_job_get_status(job), GOBLIN_JOB_FAILED);
    cr_assert(strstr(goblin_job_error(job), "lease expired") != NULL, "%s", goblin_job_error(job));
    goblin_job_free(job);
    rt_grid_stop(&g);
    free(a.data), free(b.data), free(c.data);
}

Test(node, cancel_and_wait_timeout) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    rt_faults[0] = (rt_fault){.mode = GOBLIN_MISBEHAVE_SILENT, .rate = 1.0};
    rt_grid g;
    rt_grid_start_joined(&g, "inproc://test-node-cancel", &np, &wp, 1);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F64, 8, 8, 1, true), b = rt_mat_new(GOBLIN_DTYPE_F64, 8, 8, 2, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F64, 8, 8, 0, false);
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, NULL, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 50), GOBLIN_ETIMEDOUT);
    goblin_job_cancel(job);
    cr_assert_eq(goblin_job_wait(job, 1000), GOBLIN_ECANCELED);
    cr_assert_eq(goblin_job_get_status(job), GOBLIN_JOB_CANCELED);
    goblin_job_free(job);
    rt_grid_stop(&g);
    free(a.data), free(b.data), free(c.data);
}

/* A job freed while its TASK messages still sit in the worker's pipe: their leases keep
 * their queue slots until answered, so the next job's TASKs are not sent into a full
 * pipe (nng's pair1 drops what does not fit: the worker then waits for a task that
 * never comes, and the node for a result, until the lease expires). */
Test(node, job_freed_while_queued_keeps_its_leases, .timeout = 60) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.speculate = false;
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.threads = 1;
    wp.slots = 4;
    /* honest, each answer 100 ms late */
    rt_faults[0] = (rt_fault){.mode = GOBLIN_MISBEHAVE_SLOW, .rate = 1.0, .slow_ms = 100};
    rt_grid g;
    rt_grid_start_joined(&g, "inproc://test-node-freed-queued", &np, &wp, 1);
    /* 64 x 64 tiles over K = 256: 128 KiB per TASK, over the batching limit, so each
     * TASK is a message of its own and the pipe's two slots fill with two of them. */
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 256, 256, 1, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 256, 256, 2, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F32, 256, 256, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 16;
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 50), GOBLIN_ETIMEDOUT);
    goblin_job_free(job); /* running, with TASKs queued */
    rt_mat c2 = rt_mat_new(GOBLIN_DTYPE_F32, 256, 256, 0, false);
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c2.t, &jp, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 30000), GOBLIN_OK, "%s", goblin_job_error(job));
    /* The worker's counters as the job ended: an idle worker that has leases asked
     * for asks again every RESYNC_MS (1 s) by design, and the reference product below
     * takes longer than that in the sanitizer build on a loaded machine, so counting
     * after it measured the test's own idle time (lease_resyncs was 0 at the job's
     * end in every failing run). */
    goblin_worker_stats ws;
    goblin_worker_stats_get(g.w[0], &ws);
    goblin_node_stats st;
    goblin_node_stats_get(g.node, &st);
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c2.t), 0);
    cr_assert_eq(st.tasks_reissued, 0, "no lease had to expire");
    cr_assert_eq(ws.lease_resyncs, 0, "the worker never waited for a TASK that was dropped");
    /* The freed job's TASKs were answered against the leases kept for them (a result
     * with no lease at all would count as late). */
    cr_assert_eq(st.results_late, 0);
    cr_assert_geq(st.results_duplicate, 1);
    /* What the protocol guarantees, directly: every TASK sent reached the worker and
     * was answered: a RESULT, or an ERROR (a freed job's TASK whose inputs were lent
     * in place is answered "not in cache", counted as a cache miss). The freed job's
     * last answer may still be on its way: wait for it, well within the 30 s lease. */
    goblin_worker_stats w2;
    for (int i = 0; i < 2000; i++) {
        goblin_node_stats_get(g.node, &st);
        goblin_worker_stats_get(g.w[0], &w2);
        if (st.tasks_issued == w2.tasks_done + w2.tasks_failed + w2.cache_misses) break;
        usleep(10000);
    }
    cr_assert_eq(st.tasks_issued, w2.tasks_done + w2.tasks_failed + w2.cache_misses,
                 "%lld TASKs issued, the worker answered %lld + %lld + %lld: a TASK was lost",
                 (long long)st.tasks_issued, (long long)w2.tasks_done, (long long)w2.tasks_failed,
                 (long long)w2.cache_misses);
    cr_assert_eq(st.results_rejected + st.results_late + st.tasks_reissued, 0);
    goblin_job_free(job);
    rt_grid_stop(&g);
    free(a.data), free(b.data), free(c.data), free(c2.data);
}

/* ---- hostile peers -------------------------------------------------------------- */

static int raw_dial(nng_socket *s, const char *url) {
    int rv = nng_pair1_open(s);
    if (rv) return rv;
    nng_socket_set_ms(*s, NNG_OPT_RECVTIMEO, 3000);
    /* No redial once the node drops this peer: nng 1.5 leaks a connection still being
     * set up when its socket is closed (ASan saw it now and then under load). */
    nng_socket_set_ms(*s, NNG_OPT_RECONNMINT, 600000);
    nng_socket_set_ms(*s, NNG_OPT_RECONNMAXT, 600000);
    return nng_dial(*s, url, NULL, 0);
}

Test(node, wrong_catalogue_version_refused) {
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.log = rt_log_fn;
    np.log_user = &lg;
    rt_grid g;
    cr_assert_eq(rt_grid_start(&g, "inproc://test-node-version", &np, NULL, 0), GOBLIN_OK);
    nng_socket s;
    cr_assert_eq(raw_dial(&s, "inproc://test-node-version"), 0);
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HELLO);
    m.body.hello.catalog_version = goblin_catalog_version() + 1;
    m.body.hello.backends = 1;
    m.body.hello.threads = 1;
    m.body.hello.memory_bytes = 1 << 20;
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin__wire_encode(&m, &buf, &len), GOBLIN_OK);
    cr_assert_eq(nng_send(s, buf, len, 0), 0);
    goblin_buffer_free(buf);
    void *rb;
    size_t rlen;
    cr_assert_eq(nng_recv(s, &rb, &rlen, NNG_FLAG_ALLOC), 0, "a REFUSE comes back");
    goblin__wire_msg *r = NULL;
    cr_assert_eq(goblin__wire_decode(rb, rlen, NULL, 0, &r, NULL, 0), GOBLIN_OK);
    cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_REFUSE);
    cr_assert_eq(r->body.refuse.reason, GOBLIN_EVERSION);
    cr_assert(strstr(r->body.refuse.message, "catalogue version") != NULL, "%s", r->body.refuse.message);
    goblin__wire_msg_free(r);
    nng_free(rb, rlen);
    nng_close(s);
    cr_assert(rt_log_has(&lg, "refused worker"));
    goblin_node_stats st;
    goblin_node_stats_get(g.node, &st);
    cr_assert_eq(st.workers_refused, 1);
    cr_assert_eq(st.workers_connected, 0);
    rt_grid_stop(&g);
}

Test(node, garbage_peer_dropped_others_served) {
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.log = rt_log_fn;
    np.log_user = &lg;
    goblin_worker_params wp[2];
    for (int i = 0; i < 2; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", hp_free_port());
    rt_grid g;
    rt_grid_start_joined(&g, url, &np, wp, 2);
    /* 1: random bytes; 2: a valid header with a lying length; 3: a RESULT before HELLO. */
    uint8_t junk[300];
    uint64_t seed = 99;
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)rt_rng(&seed);
    for (int round = 0; round < 3; round++) {
        nng_socket s;
        cr_assert_eq(raw_dial(&s, url), 0);
        if (round == 0) {
            cr_assert_eq(nng_send(s, junk, sizeof junk, 0), 0);
        } else {
            goblin__wire_msg m;
            goblin__wire_msg_init(&m, round == 1 ? GOBLIN_WIRE_TYPE_HEARTBEAT : GOBLIN_WIRE_TYPE_RESULT);
            if (round == 2) m.body.result.task_id = 5;
            uint8_t *buf;
            size_t len;
            cr_assert_eq(goblin__wire_encode(&m, &buf, &len), GOBLIN_OK);
            if (round == 1) buf[16] = 0xff; /* body length */
            cr_assert_eq(nng_send(s, buf, len, 0), 0);
            goblin_buffer_free(buf);
        }
        for (int i = 0; i < 6000; i++) { /* up to a minute: a deadline, not a timing assertion */
            goblin_node_stats st;
            goblin_node_stats_get(g.node, &st);
            if (st.peers_dropped > round) break;
            usleep(10000);
        }
        nng_close(s);
    }
    goblin_node_stats st;
    goblin_node_stats_get(g.node, &st);
    cr_assert_eq(st.peers_dropped, 3);
    cr_assert(rt_log_has(&lg, "dropping peer"));
    cr_assert(rt_log_has(&lg, "malformed message"));
    cr_assert(rt_log_has(&lg, "RESULT before HELLO"));
    run_product(g.node, GOBLIN_DTYPE_F32, 100, 120, 90, NULL, NULL);
    goblin_node_stats_get(g.node, &st);
    cr_assert_eq(st.workers_connected, 2);
    rt_grid_stop(&g);
}

Test(node, join_token) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.join_token = (const uint8_t *)"sesame";
    np.token_len = 6;
    goblin_worker_params wp[2];
    goblin_worker_params_default(&wp[0]);
    goblin_worker_params_default(&wp[1]);
    wp[0].join_token = (const uint8_t *)"sesame";
    wp[0].token_len = 6;
    wp[1].join_token = (const uint8_t *)"sesamf";
    wp[1].token_len = 6;
    rt_grid g;
    cr_assert_eq(rt_grid_start(&g, "inproc://test-node-token", &np, wp, 2), GOBLIN_OK);
    pthread_join(g.th[1], NULL);
    cr_assert_eq(g.rc[1], GOBLIN_EAUTH);
    g.th[1] = pthread_self();
    cr_assert(rt_wait_workers(g.node, 1));
    run_product(g.node, GOBLIN_DTYPE_F64, 20, 30, 40, NULL, NULL);
    goblin_worker_stop(g.w[0]);
    pthread_join(g.th[0], NULL);
    goblin_node_free(g.node);
    goblin_worker_free(g.w[0]);
    goblin_worker_free(g.w[1]);
}

/* ---- planning a product far larger than memory ------------------------------------ */

Test(node, plan_of_huge_product_allocates_nothing) {
    goblin__plan_params pp;
    goblin__plan_params_default(&pp);
    pp.m = pp.k = pp.n = 100000;
    pp.dtype = GOBLIN_DTYPE_F32;
    pp.memory_bytes = (uint64_t)1 << 30;
    goblin__plan *plan = NULL;
    cr_assert_eq(goblin__plan_matmul(&plan, &pp, NULL, 0), GOBLIN_OK);
    goblin_job_plan info;
    cr_assert_eq(goblin__plan_get_info(plan, &info), GOBLIN_OK);
    cr_assert_leq(info.max_task_bytes, info.budget_bytes);
    int64_t count = goblin__plan_tile_count(plan);
    cr_assert_eq(count, info.grid_rows * info.grid_cols * info.k_slices);
    cr_assert_gt(count, 1);
    /* The tiles of the first row and column cover M, N and K exactly. */
    int64_t rows = 0, cols = 0, ks = 0;
    goblin__matmul_tile t;
    for (int64_t r = 0; r < info.grid_rows; r++) {
        cr_assert_eq(goblin__plan_tile(plan, r * info.grid_cols * info.k_slices, &t), GOBLIN_OK);
        cr_assert_eq(t.row0, rows);
        rows += t.rows;
    }
    for (int64_t c = 0; c < info.grid_cols; c++) {
        cr_assert_eq(goblin__plan_tile(plan, c * info.k_slices, &t), GOBLIN_OK);
        cr_assert_eq(t.col0, cols);
        cols += t.cols;
    }
    for (int64_t q = 0; q < info.k_slices; q++) {
        cr_assert_eq(goblin__plan_tile(plan, q, &t), GOBLIN_OK);
        cr_assert_eq(t.k0, ks);
        ks += t.kn;
    }
    cr_assert_eq(rows, 100000);
    cr_assert_eq(cols, 100000);
    cr_assert_eq(ks, 100000);
    goblin__plan_free(plan);
}

Test(node, tasks_sized_to_smallest_worker_memory) {
    goblin_grid_params gp;
    goblin_grid_params_default(&gp);
    gp.worker.memory_bytes = 256 * 1024;
    gp.worker.cache_bytes = 64 * 1024;
    goblin_grid *g = rt_local_grid(2, &gp);
    goblin_node *node = goblin_grid_node(g);
    goblin_job_plan info;
    run_product(node, GOBLIN_DTYPE_F32, 300, 310, 290, NULL, &info);
    cr_assert_leq(info.max_task_bytes, 256 * 1024);
    cr_assert_gt(info.grid_rows * info.grid_cols * info.k_slices, 8);
    /* A cache smaller than a panel or two: misses are resent, honest workers stay honest. */
    goblin_node_stats st;
    goblin_node_stats_get(node, &st);
    cr_assert_eq(st.results_rejected, 0);
    cr_assert_eq(st.workers_quarantined, 0);
    goblin_grid_free(g);
}

/* ---- panel cache misses (regression: the node used to stop issuing tasks) --------- */

/* Workers whose cache holds at most one panel: the node's belief (it remembers
 * several panels per worker) is wrong on purpose, so workers answer ENOTFOUND and the
 * node must resend those tasks with data. A second job then starts with the node
 * still believing in panels of the first (different ids: misses again). */
Test(node, panel_cache_misses_resent_two_jobs, .timeout = 120) {
    /* Over ipc:// (over inproc:// the node lends panels in place and caches nothing). */
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.speculate = false; /* only cache-miss resends put tasks back */
    goblin_worker_params wp[2];
    for (int i = 0; i < 2; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
        wp[i].memory_bytes = 256 * 1024;
        wp[i].cache_bytes = 40 * 1024; /* about one panel of the tasks planned below */
    }
    char url[96];
    snprintf(url, sizeof url, "ipc:///tmp/goblin-test-node-miss-%d", (int)getpid());
    rt_grid g;
    cr_assert_eq(rt_grid_start(&g, url, &np, wp, 2), GOBLIN_OK);
    goblin_node *node = g.node;
    cr_assert(rt_wait_workers(node, 2));
    run_product(node, GOBLIN_DTYPE_F32, 300, 310, 290, NULL, NULL);
    run_product(node, GOBLIN_DTYPE_F32, 260, 300, 280, NULL, NULL);
    goblin_node_stats st;
    goblin_node_stats_get(node, &st);
    cr_assert_gt(st.panel_cache_misses, 0, "the test must provoke cache misses");
    cr_assert_eq(st.results_rejected, 0);
    cr_assert_eq(st.workers_quarantined, 0);
    cr_assert_geq(st.tasks_reissued, 0);
    int64_t misses = 0;
    for (int i = 0; i < 2; i++) {
        goblin_worker_stats ws;
        goblin_worker_stats_get(g.w[i], &ws);
        misses += ws.cache_misses;
    }
    cr_assert_eq(misses, st.panel_cache_misses);
    rt_grid_stop(&g);
}

/* ---- TLS between node and workers --------------------------------------------------- */

static char tls_dir[128];

static void make_identity(goblin_tls_identity *id) {
    snprintf(tls_dir, sizeof tls_dir, "/tmp/goblin-test-node-tls-%d", (int)getpid());
    goblin_tls_init_params ip;
    goblin_tls_init_params_default(&ip);
    ip.force = true;
    goblin_errbuf why_eb = {0};
    goblin_err e = goblin_tls_init_dir(tls_dir, &ip, id, &why_eb);
    cr_assert_eq(e, GOBLIN_OK, "init identity: %s", why_eb.message);
}

static void remove_identity(const goblin_tls_identity *id) {
    unlink(id->cert_path);
    unlink(id->key_path);
    rmdir(tls_dir);
}

Test(node, grid_over_tls_loopback_pinned_and_ca, .timeout = 120) {
    goblin_tls_identity id;
    make_identity(&id);
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.cert_file = id.cert_path;
    np.key_file = id.key_path;
    goblin_worker_params wp[2];
    for (int i = 0; i < 2; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    wp[0].tls_fingerprint = id.fingerprint; /* pinned */
    wp[1].tls_ca_file = id.cert_path;       /* the identity as its own CA */
    char url[64];
    snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", hp_free_port());
    rt_grid g;
    rt_grid_start_joined(&g, url, &np, wp, 2);
    run_product(g.node, GOBLIN_DTYPE_F32, 90, 70, 80, NULL, NULL);
    /* A worker pinning another fingerprint is refused before it says anything. */
    goblin_worker_params bad;
    goblin_worker_params_default(&bad);
    bad.connect[0] = url;
    bad.n_connect = 1;
    bad.tls_fingerprint = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    rt_log lg;
    memset(&lg, 0, sizeof lg);
    pthread_mutex_init(&lg.mu, NULL);
    bad.log = rt_log_fn;
    bad.log_user = &lg;
    goblin_worker *bw = NULL;
    cr_assert_eq(goblin_worker_new(&bw, &bad), GOBLIN_OK);
    cr_assert_eq(goblin_worker_run(bw), GOBLIN_EAUTH);
    cr_assert(rt_log_has(&lg, "fingerprint"), "log: %s", lg.buf);
    goblin_worker_free(bw);
    /* The node keeps serving. */
    run_product(g.node, GOBLIN_DTYPE_F64, 40, 50, 30, NULL, NULL);
    rt_grid_stop(&g);
    remove_identity(&id);
}

Test(node, plaintext_off_loopback_refused_tls_needs_cert) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.listen[0] = "tcp://0.0.0.0:0";
    np.n_listen = 1;
    goblin_node *node = NULL;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_EINVAL);
    np.insecure_plaintext = true;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_OK);
    goblin_node_free(node);
    node = NULL;
    np.insecure_plaintext = false;
    np.listen[0] = "tls+tcp://127.0.0.1:0";
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_EINVAL);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = "tls+tcp://127.0.0.1:1";
    wp.n_connect = 1;
    wp.tls_ca_file = "/nonexistent";
    wp.tls_fingerprint = "00";
    goblin_worker *w = NULL;
    cr_assert_eq(goblin_worker_new(&w, &wp), GOBLIN_EINVAL);
}

/* Salted-hash token file (tls.h): only a token with an entry joins; a malformed file is
 * refused when the node is created. */
Test(node, join_token_file) {
    char tok[GOBLIN_TOKEN_SIZE], line[GOBLIN_TOKEN_ENTRY_SIZE], path[96];
    cr_assert_eq(goblin_token_generate(tok), GOBLIN_OK);
    cr_assert_eq(goblin_token_entry(tok, line), GOBLIN_OK);
    snprintf(path, sizeof path, "/tmp/goblin-test-node-tokens-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, "# workers\n%s\n", line);
    fclose(f);
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.token_file = path;
    goblin_worker_params wp[2];
    goblin_worker_params_default(&wp[0]);
    goblin_worker_params_default(&wp[1]);
    wp[0].join_token = (const uint8_t *)tok;
    wp[0].token_len = 64;
    char wrong[GOBLIN_TOKEN_SIZE];
    memcpy(wrong, tok, sizeof wrong);
    wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
    wp[1].join_token = (const uint8_t *)wrong;
    wp[1].token_len = 64;
    rt_grid g;
    cr_assert_eq(rt_grid_start(&g, "inproc://test-node-token-file", &np, wp, 2), GOBLIN_OK);
    pthread_join(g.th[1], NULL);
    cr_assert_eq(g.rc[1], GOBLIN_EAUTH);
    g.th[1] = pthread_self();
    cr_assert(rt_wait_workers(g.node, 1));
    run_product(g.node, GOBLIN_DTYPE_F32, 20, 30, 40, NULL, NULL);
    goblin_worker_stop(g.w[0]);
    pthread_join(g.th[0], NULL);
    goblin_node_free(g.node);
    goblin_worker_free(g.w[0]);
    goblin_worker_free(g.w[1]);
    /* A file that is not salt:hash lines. */
    f = fopen(path, "w");
    cr_assert(f);
    fprintf(f, "%s\n", tok);
    fclose(f);
    np.listen[0] = "inproc://test-node-token-file-bad";
    np.n_listen = 1;
    goblin_node *node = NULL;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_EINVAL);
    unlink(path);
}

/* ---- batches (protocol 1.1) ----------------------------------------------------- */

static void raw_send_msg(nng_socket s, const goblin__wire_msg *m) {
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin__wire_encode(m, &buf, &len), GOBLIN_OK);
    cr_assert_eq(nng_send(s, buf, len, 0), 0);
    goblin_buffer_free(buf);
}

/* HELLO (offering batches or not), HELLO_ACK back (its flags in *ack_flags), then a
 * LEASE_REQUEST for @p slots. */
static void raw_join(nng_socket s, bool batch, uint8_t *ack_flags, uint32_t slots) {
    goblin__wire_msg m = rt_raw_hello(1 << 24, batch);
    goblin__wkey *key = NULL;
    cr_assert_eq(goblin__wkey_ephemeral(&key, NULL, 0), GOBLIN_OK);
    goblin__wire_msg *r = rt_raw_join(s, &m, key, NULL);
    goblin__wkey_free(key);
    cr_assert_not_null(r, "a HELLO_ACK comes back");
    cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_HELLO_ACK);
    *ack_flags = r->flags;
    goblin__wire_msg_free(r);
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_LEASE_REQUEST);
    m.body.lease_request.slots = slots;
    raw_send_msg(s, &m);
}

static void *batch_worker_main(void *arg) {
    goblin_worker *w = arg;
    goblin_worker_run(w);
    return NULL;
}

static bool wait_reissued(goblin_node *node, int64_t want) {
    for (int i = 0; i < 6000; i++) { /* up to a minute */
        goblin_node_stats st;
        goblin_node_stats_get(node, &st);
        if (st.tasks_reissued >= want) return true;
        usleep(10000);
    }
    return false;
}

/* A 1.0 worker (no capability in HELLO) gets one TASK per message and no flag in
 * HELLO_ACK; a 1.1 worker gets several small TASKs in one message, and every message
 * of a batch it sends back is handled; a malformed batch drops it; real workers then
 * finish the job, checked against the reference product. */
Test(node, batches_only_to_workers_that_offer_them, .timeout = 60) {
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.log = rt_log_fn;
    np.log_user = &lg;
    const char *url = "inproc://test-node-batches";
    rt_grid g;
    cr_assert_eq(rt_grid_start(&g, url, &np, NULL, 0), GOBLIN_OK);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 64, 8, 5, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 8, 64, 6, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F32, 64, 64, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 64;
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    goblin_job_plan info;
    cr_assert_eq(goblin_job_plan_info(job, &info), GOBLIN_OK);
    cr_assert_geq(info.grid_rows * info.grid_cols * info.k_slices, 32);

    /* 1.0 worker: asks for 16, gets single TASK messages (at most 2 queued) */
    nng_socket s1;
    cr_assert_eq(raw_dial(&s1, url), 0);
    uint8_t flags = 0xff;
    raw_join(s1, false, &flags, 16);
    cr_assert_eq(flags, 0, "no batch flag for a 1.0 worker");
    nng_socket_set_ms(s1, NNG_OPT_RECVTIMEO, 300);
    int singles = 0;
    void *rb;
    size_t rlen;
    while (nng_recv(s1, &rb, &rlen, NNG_FLAG_ALLOC) == 0) {
        goblin__wire_msg *t = NULL;
        char err[256];
        cr_assert_eq(goblin__wire_decode(rb, rlen, NULL, 0, &t, err, sizeof err), GOBLIN_OK,
                     "a 1.0 worker gets whole single messages: %s", err);
        cr_assert_eq(t->type, GOBLIN_WIRE_TYPE_TASK);
        goblin__wire_msg_free(t);
        nng_free(rb, rlen);
        singles++;
    }
    cr_assert(singles >= 1 && singles <= 2, "%d TASK messages", singles);
    nng_close(s1);

    /* 1.1 worker: one message holds several TASKs */
    nng_socket s2;
    cr_assert_eq(raw_dial(&s2, url), 0);
    raw_join(s2, true, &flags, 16);
    cr_assert_eq(flags, GOBLIN_WIRE_FLAG_BATCH);
    cr_assert_eq(nng_recv(s2, &rb, &rlen, NNG_FLAG_ALLOC), 0);
    uint64_t ids[64];
    int k = 0;
    size_t off = 0, ml = 0;
    char err[256];
    do {
        size_t at = off;
        cr_assert_eq(goblin__wire_batch_next(rb, rlen, &off, NULL, &ml, err, sizeof err), GOBLIN_OK, "%s", err);
        goblin__wire_msg *t = NULL;
        cr_assert_eq(goblin__wire_decode((uint8_t *)rb + at, ml, NULL, 0, &t, err, sizeof err), GOBLIN_OK, "%s", err);
        cr_assert_eq(t->type, GOBLIN_WIRE_TYPE_TASK);
        cr_assert_lt(k, 64);
        ids[k++] = t->body.task.task_id;
        goblin__wire_msg_free(t);
    } while (off < rlen);
    nng_free(rb, rlen);
    cr_assert_gt(k, 1, "several TASKs in one message");
    cr_assert_leq(k, 16);
    /* give them all back in one batch (with a HEARTBEAT in the middle) */
    goblin_node_stats st;
    goblin_node_stats_get(g.node, &st);
    int64_t r0 = st.tasks_reissued;
    static uint8_t out[4096];
    size_t olen = 0;
    for (int i = 0; i <= k; i++) {
        goblin__wire_msg m;
        if (i == k / 2) {
            goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HEARTBEAT);
        } else {
            goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_ABANDON);
            m.body.abandon.task_id = ids[i < k / 2 ? i : i - 1];
        }
        size_t at = (olen + 7) / 8 * 8, wrote = 0;
        cr_assert_eq(goblin__wire_encode_into(&m, out + at, sizeof out - at, &wrote), GOBLIN_OK);
        olen = at + wrote;
    }
    cr_assert_eq(nng_send(s2, out, olen, 0), 0);
    cr_assert(wait_reissued(g.node, r0 + k), "every ABANDON of the batch was handled");
    /* a batch with garbage after its first message drops the worker */
    goblin_node_stats_get(g.node, &st);
    int64_t dropped = st.peers_dropped;
    memset(out + 32, 0x5a, 24);
    cr_assert_eq(nng_send(s2, out, 56, 0), 0); /* an ABANDON (32 bytes), then junk */
    for (int i = 0; i < 300 && st.peers_dropped == dropped; i++) {
        usleep(10000);
        goblin_node_stats_get(g.node, &st);
    }
    cr_assert_eq(st.peers_dropped, dropped + 1);
    cr_assert(rt_log_has(&lg, "malformed batch"));
    nng_close(s2);

    /* real (batching) workers finish the job */
    goblin_worker *w[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        goblin_worker_params wp;
        goblin_worker_params_default(&wp);
        wp.threads = 1;
        wp.connect[0] = url;
        wp.n_connect = 1;
        cr_assert_eq(goblin_worker_new(&w[i], &wp), GOBLIN_OK);
        pthread_create(&th[i], NULL, batch_worker_main, w[i]);
    }
    goblin_err e = goblin_job_wait(job, 30000);
    cr_assert_eq(e, GOBLIN_OK, "%s (%s)", goblin_strerror(e), goblin_job_error(job));
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    goblin_job_free(job);
    for (int i = 0; i < 2; i++) goblin_worker_stop(w[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    rt_grid_stop(&g);
    for (int i = 0; i < 2; i++) goblin_worker_free(w[i]);
    free(a.data), free(b.data), free(c.data);
}
