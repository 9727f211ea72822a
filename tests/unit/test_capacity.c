/* test_capacity.c - what a job is cut by, and a worker rejoining after a partition.
 *
 * Capacity (docs/runtime.md, "Capacity"): peers that joined and only send heartbeats
 * do not change how a job is cut; the job's task count (node stats) is what it is with
 * the real workers alone, and the product is right (an f64 reference).
 *
 * Rejoining (docs/runtime.md, "Rejoining after a partition"): a worker's connection is
 * cut while it computes a task and holds another in its queue (a TCP relay between it
 * and the node closes both sides, refuses connections for a while, then relays again).
 * Its first new connection must be admitted: no message before its HELLO (the node
 * would drop it: peers_dropped), and the job completes with the right product. */
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

/* y = tanh(x) over 64 rows of 3 with the default cut (4 chunks per unit of capacity),
 * checked against tanh here; the number of chunks (tasks). */
static int64_t graph_tasks(goblin_node *node) {
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[] = {64, 3};
    int32_t x, y;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sx, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_TANH, &x, 1, NULL, 0, &y), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, y), GOBLIN_OK);
    double xv[192], yv[192];
    for (int i = 0; i < 192; i++) xv[i] = (double)(i - 96) / 31.0;
    goblin_tensor in, out;
    goblin_tensor_init(&in, GOBLIN_DTYPE_F64, 2, sx, xv);
    goblin_tensor_init(&out, GOBLIN_DTYPE_F64, 2, sx, yv);
    int64_t before = stats(node).tasks_completed;
    goblin_job *job = rt_run_graph(node, g, &in, 1, &out, 1, NULL);
    goblin_job_free(job);
    for (int i = 0; i < 192; i++) cr_assert_float_eq(yv[i], tanh(xv[i]), 4e-15);
    goblin_graph_free(g);
    return stats(node).tasks_completed - before;
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
    int64_t galone = graph_tasks(g.node);
    cr_assert_eq(galone, 8, "64 rows in 4 chunks per worker asking");

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
    cr_assert_eq(graph_tasks(g.node), galone, "a graph job too");
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

/* ---- a TCP relay that can be cut --------------------------------------------------- */

/* The relay's thread owns its sockets; the test asks through the flags. */
typedef struct relay {
    int port, target;      /* listens on port, relays to 127.0.0.1:target */
    atomic_bool refuse;    /* cut the relayed connection and stop listening */
    atomic_bool listening; /* set by the relay's thread */
    atomic_bool quit;
    atomic_int relayed;    /* connections relayed so far */
    pthread_t th;
} relay;

static int relay_listen(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    if (bind(s, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(s, 8) != 0) {
        close(s);
        return -1;
    }
    return s;
}

static int relay_dial(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(s);
        return -1;
    }
    return s;
}

/* Copy what is readable on @p from to @p to; false at the end of either. */
static bool relay_copy(int from, int to) {
    char buf[1 << 16];
    ssize_t r = recv(from, buf, sizeof buf, 0);
    if (r <= 0) return false;
    for (ssize_t o = 0; o < r;) {
        ssize_t w = send(to, buf + o, (size_t)(r - o), MSG_NOSIGNAL);
        if (w <= 0) return false;
        o += w;
    }
    return true;
}

static void *relay_main(void *arg) {
    relay *r = arg;
    int lfd = -1;
    while (!atomic_load(&r->quit)) {
        if (atomic_load(&r->refuse)) {
            if (lfd >= 0) close(lfd);
            lfd = -1;
            atomic_store(&r->listening, false);
            sleep_ms(5);
            continue;
        }
        if (lfd < 0 && (lfd = relay_listen(r->port)) < 0) { /* the port in TIME_WAIT: again */
            sleep_ms(5);
            continue;
        }
        atomic_store(&r->listening, true);
        struct pollfd lp = {.fd = lfd, .events = POLLIN};
        if (poll(&lp, 1, 10) <= 0) continue;
        int c = accept(lfd, NULL, NULL);
        if (c < 0) continue;
        int n = relay_dial(r->target);
        if (n < 0) {
            close(c);
            continue;
        }
        atomic_fetch_add(&r->relayed, 1);
        while (!atomic_load(&r->quit) && !atomic_load(&r->refuse)) {
            struct pollfd p[2] = {{.fd = c, .events = POLLIN}, {.fd = n, .events = POLLIN}};
            if (poll(p, 2, 10) <= 0) continue;
            if ((p[0].revents && !relay_copy(c, n)) || (p[1].revents && !relay_copy(n, c))) break;
        }
        close(c);
        close(n);
    }
    if (lfd >= 0) close(lfd);
    return NULL;
}

/* Wait (a minute at most) until the relay listens (@p on) or has stopped. */
static bool relay_wait(relay *r, bool on) {
    for (int i = 0; i < 6000; i++) {
        if (atomic_load(&r->listening) == on) return true;
        sleep_ms(10);
    }
    return false;
}

Test(capacity, worker_rejoins_at_its_first_new_connection, .timeout = 240) {
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.log = rt_log_fn;
    np.log_user = &lg;
    np.speculate = false; /* every task goes to the workers as planned */
    int node_port = hp_free_port();
    char node_url[64], relay_url[64];
    snprintf(node_url, sizeof node_url, "tcp://127.0.0.1:%d", node_port);
    goblin_node_params p = np;
    p.listen[0] = node_url;
    p.n_listen = 1;
    goblin_node *node = NULL;
    cr_assert_eq(goblin_node_new(&node, &p), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(node), GOBLIN_OK);

    relay r = {.port = hp_free_port(), .target = node_port};
    pthread_create(&r.th, NULL, relay_main, &r);
    cr_assert(relay_wait(&r, true));
    snprintf(relay_url, sizeof relay_url, "tcp://127.0.0.1:%d", r.port);

    /* Worker 0 through the relay, slow (each task answers correctly after 400 ms) so
     * that the cut finds it computing one task with the next queued; worker 1 direct. */
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.threads = 1;
    wp.slots = 2;
    wp.reconnect_min_ms = 20;
    wp.reconnect_max_ms = 50;
    goblin_worker *w[2];
    pthread_t th[2];
    rt_grid g = {0};
    const char *urls[2] = {relay_url, node_url};
    for (int i = 0; i < 2; i++) {
        goblin_worker_params q = wp;
        q.connect[0] = urls[i];
        q.n_connect = 1;
        cr_assert_eq(goblin_worker_new(&w[i], &q), GOBLIN_OK);
        g.w[i] = w[i];
    }
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, w[0], GOBLIN_MISBEHAVE_SLOW, 1.0,
                                     (uint64_t)1),
                 GOBLIN_OK);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_SLOW_MS, w[0], 400u), GOBLIN_OK);
    g.node = node;
    for (int i = 0; i < 2; i++) {
        rt_ctx[i] = (rt_wctx){&g, i};
        pthread_create(&th[i], NULL, rt_worker_main, &rt_ctx[i]);
        g.n = i + 1;
        cr_assert(rt_wait_workers(node, i + 1));
    }
    cr_assert(wait_capacity(node, 2, 2));

    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 240, 200, 3, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 200, 220, 4, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F32, 240, 220, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 24;
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_matmul(node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    /* Cut once worker 0 (the first to join) holds two leases: it computes one, the
     * other waits in its queue. */
    bool held = false;
    for (int i = 0; i < 6000 && !held; i++) {
        goblin_node_worker_stats ws;
        held = goblin_node_worker_stats_get(node, 0, &ws) == GOBLIN_OK && ws.issued >= 2;
        if (!held) sleep_ms(5);
    }
    cr_assert(held, "worker 0 got two tasks");
    /* The partition: the connection cut, new ones refused (the worker redials in vain)
     * while its task ends and its RESULT and LEASE_REQUEST fall due; then it heals. */
    atomic_store(&r.refuse, true);
    cr_assert(relay_wait(&r, false));
    sleep_ms(700);
    atomic_store(&r.refuse, false);
    cr_assert(relay_wait(&r, true), "the relay listens again on its port");

    goblin_err e = goblin_job_wait(job, 120000);
    cr_assert_eq(e, GOBLIN_OK, "job: %s (%s)", goblin_strerror(e), goblin_job_error(job));
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    /* Wait until worker 0 is back (it joins again whether or not the job needs it). */
    bool back = false;
    for (int i = 0; i < 6000 && !back; i++) {
        goblin_node_stats st = stats(node);
        back = st.workers_seen >= 3 && st.workers_connected == 2;
        if (!back) sleep_ms(10);
    }
    cr_assert(back, "worker 0 rejoined");
    goblin_node_stats st = stats(node);
    goblin_worker_stats ws;
    goblin_worker_stats_get(w[0], &ws);
    cr_assert_eq(st.peers_dropped, 0, "no connection dropped (a message before HELLO drops it)");
    cr_assert(!rt_log_has(&lg, "before HELLO"));
    cr_assert_eq(st.workers_seen, 3, "worker 0 joined twice, worker 1 once");
    cr_assert_eq(ws.connects, 2, "admitted at its first new connection");
    cr_assert_eq(atomic_load(&r.relayed), 2);
    cr_log_info("worker 0 dropped %lld stale messages", (long long)ws.stale_dropped);
    goblin_job_free(job);
    free(a.data);
    free(b.data);
    free(c.data);

    for (int i = 0; i < 2; i++) goblin_worker_stop(w[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    goblin_node_free(node);
    for (int i = 0; i < 2; i++) goblin_worker_free(w[i]);
    atomic_store(&r.quit, true);
    pthread_join(r.th, NULL);
}
