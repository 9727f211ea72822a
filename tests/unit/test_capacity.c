/* test_capacity.c - what a job is cut by.
 *
 * Capacity (docs/runtime.md, "Capacity"): peers that joined and only send heartbeats
 * do not change how a job is cut; the job's task count (node stats) is what it is with
 * the real workers alone, and the product is right (an f64 reference).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <poll.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "hostile_peer.h"
#include "runtime_util.h"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static goblin_node_stats stats(goblin_node *node) {
    goblin_node_stats st;
    goblin_node_stats_get(node, &st);
    return st;
}

/* Wait (a minute at most: a deadline, not a timing assertion) until workers_asking is
 * @p asking and workers_connected @p connected. */
static bool wait_capacity(goblin_node *node, int64_t asking, int64_t connected) {
    for (int i = 0; i < 6000; i++) {
        goblin_node_stats st = stats(node);
        if (st.workers_asking == asking && st.workers_connected == connected) return true;
        sleep_ms(10);
    }
    return false;
}

/* C = A . B on the node, checked against the f64 reference; the number of tasks it was
 * cut into (tasks_completed before and after: each task completes once). */
static int64_t product_tasks(goblin_node *node, int64_t m, int64_t k, int64_t n, uint64_t seed) {
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, m, k, seed, true), b = rt_mat_new(GOBLIN_DTYPE_F32, k, n, seed + 1, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F32, m, n, 0, false);
    int64_t before = stats(node).tasks_completed;
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_matmul(node, &a.t, &b.t, &c.t, NULL, &job), GOBLIN_OK);
    goblin_err e = goblin_job_wait(job, 60000);
    cr_assert_eq(e, GOBLIN_OK, "job: %s (%s)", goblin_strerror(e), goblin_job_error(job));
    int64_t done = -1, total = -1;
    goblin_job_progress(job, &done, &total);
    cr_assert_eq(done, total);
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    goblin_job_free(job);
    free(a.data);
    free(b.data);
    free(c.data);
    int64_t tasks = stats(node).tasks_completed - before;
    cr_assert_eq(tasks, total, "tasks_completed counts each task once");
    return tasks;
}

#define IDLE_PEERS 24

/* A simulated worker that speaks the real protocol: HELLO, PROOF, then only heartbeats
 * (it never asks for work). Its memory claim is tiny: cut by connections, the job's
 * tiles would also shrink to fit it. */
static nng_socket idle_peer(const char *url, goblin__wkey *key) {
    nng_socket s;
    cr_assert_eq(nng_pair1_open(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 30000);
    nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 600000);
    nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 600000);
    cr_assert_eq(nng_dial(s, url, NULL, 0), 0);
    goblin__wire_msg hello = rt_raw_hello((uint64_t)1 << 20, true);
    goblin__wire_msg *ack = rt_raw_join(s, &hello, key, NULL);
    cr_assert(ack && ack->type == GOBLIN_WIRE_TYPE_HELLO_ACK, "idle peer admitted");
    goblin__wire_msg_free(ack);
    goblin__wire_msg hb;
    goblin__wire_msg_init(&hb, GOBLIN_WIRE_TYPE_HEARTBEAT);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin__wire_encode(&hb, &buf, &len), GOBLIN_OK);
    cr_assert_eq(nng_send(s, buf, len, 0), 0);
    goblin_buffer_free(buf);
    return s;
}

Test(capacity, idle_connections_do_not_cut_the_job, .timeout = 240) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.heartbeat_ms = 60000; /* the idle peers send one heartbeat; a loaded machine is slow */
    goblin_worker_params wp[2];
    for (int i = 0; i < 2; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    const char *url = "inproc://test-capacity-idle";
    rt_grid g;
    rt_grid_start_joined(&g, url, &np, wp, 2);
    cr_assert(wait_capacity(g.node, 2, 2), "both workers ask for work");
    int64_t alone = product_tasks(g.node, 300, 260, 280, 5);
    cr_assert_geq(alone, 8, "4 tasks per worker asking");

    goblin__wkey *keys[IDLE_PEERS];
    nng_socket idle[IDLE_PEERS];
    for (int i = 0; i < IDLE_PEERS; i++) {
        cr_assert_eq(goblin__wkey_ephemeral(&keys[i], NULL, 0), GOBLIN_OK);
        idle[i] = idle_peer(url, keys[i]);
    }
    /* Once the idle peers are past their first moments (a worker that just joined counts
     * until its first LEASE_REQUEST is read), only the two real workers count. */
    cr_assert(wait_capacity(g.node, 2, 2 + IDLE_PEERS), "idle peers are connected, not asking");
    int64_t among_idle = product_tasks(g.node, 300, 260, 280, 7);
    cr_assert_eq(among_idle, alone, "cut as for the 2 workers alone (%lld tasks, alone %lld)",
                 (long long)among_idle, (long long)alone);
    goblin_node_stats st = stats(g.node);
    cr_assert_eq(st.peers_dropped, 0);
    /* The idle peers got nothing: every task went to the two workers. */
    int64_t issued_real = 0;
    for (int64_t i = 0; i < st.workers_seen; i++) {
        goblin_node_worker_stats ws;
        cr_assert_eq(goblin_node_worker_stats_get(g.node, i, &ws), GOBLIN_OK);
        if (ws.memory_bytes == (uint64_t)1 << 20) cr_assert_eq(ws.issued, 0);
        else issued_real += ws.issued;
    }
    cr_assert_eq(issued_real, st.tasks_issued);
    for (int i = 0; i < IDLE_PEERS; i++) {
        nng_close(idle[i]);
        goblin__wkey_free(keys[i]);
    }
    rt_grid_stop(&g);
}
