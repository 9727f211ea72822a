/* tests/unit/test_one_address.c - workers and clients on one address (goblin/gateway.h):
 * a node serves both on the same URL, each saying what it is with its first message; a
 * client that dials a worker-only address, or a worker that dials a client-only one, is
 * told at once where to go, on every transport, and never left to time out. */
#include <criterion/criterion.h>
#include <goblin/goblin.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hostile_peer.h"
#include "proto/client_wire.h"
#include "runtime_util.h"

static void tmpdir(char *out, size_t cap, const char *tag) {
    snprintf(out, cap, "/tmp/goblin-oneaddr-%s-%d-XXXXXX", tag, (int)getpid());
    cr_assert_not_null(mkdtemp(out));
}

static void rmdir_all(const char *d) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    cr_assert_eq(system(cmd), 0);
}

/* A client with @p cred (NULL: none) and a connect timeout of an hour: whatever it is
 * told must come at once, not from a timeout. */
static goblin_err connect_patient(const char *url, const char *cred, goblin_client **c,
                                  goblin_errbuf *eb) {
    goblin_client_params cp;
    goblin_client_params_default(&cp);
    cp.connect_timeout_ms = 3600000;
    cp.credential = cred;
    *c = NULL;
    return goblin_client_connect(c, url, &cp, eb);
}

/* A [3 x 2] . B [2 x 2] with a product known by hand. */
static void check_small_product(goblin_client *c) {
    double a[6] = {1, 2, 3, 4, 5, 6}, b[4] = {7, 8, 9, 10};
    const double want[6] = {25, 28, 57, 64, 89, 100};
    goblin_tensor ta, tb, out;
    goblin_tensor_init(&ta, GOBLIN_DTYPE_F64, 2, (int64_t[]){3, 2}, a);
    goblin_tensor_init(&tb, GOBLIN_DTYPE_F64, 2, (int64_t[]){2, 2}, b);
    cr_assert_eq(goblin_client_matmul(c, &ta, &tb, &out, NULL, NULL), GOBLIN_OK, "%s",
                 goblin_client_error(c));
    for (int i = 0; i < 6; i++)
        cr_assert_eq(((double *)out.data)[i], want[i], "C[%d] = %g, want %g", i,
                     ((double *)out.data)[i], want[i]);
    goblin_buffer_free(out.data);
}

Test(one_address, workers_and_clients_share_the_node_address, .timeout = 180) {
    char dir[128], creds[192], url[64];
    tmpdir(dir, sizeof dir, "share");
    snprintf(creds, sizeof creds, "%s/researchers", dir);
    char alice[GOBLIN_CREDENTIAL_SIZE];
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_principal_add(creds, "alice@lab.example", GOBLIN_ROLE_RESEARCHER, alice,
                                      NULL, &eb), GOBLIN_OK, "%s", eb.message);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", hp_free_port());
    goblin_node_params np;
    goblin_node_params_default(&np);
    goblin_worker_params wp[2];
    for (int i = 0; i < 2; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    rt_grid g;
    rt_grid_start_joined(&g, url, &np, wp, 2);
    goblin_gateway_params gp;
    goblin_gateway_params_default(&gp); /* n_listen 0: the node's own address */
    gp.credentials_file = creds;
    goblin_gateway *gw;
    cr_assert_eq(goblin_gateway_new(&gw, g.node, &gp), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_start(gw), GOBLIN_OK);
    /* the address still wants a credential from clients */
    goblin_client *c = NULL;
    cr_assert_eq(connect_patient(url, NULL, &c, &eb), GOBLIN_EAUTH, "%s", eb.message);
    cr_assert(strstr(eb.message, "requires a researcher credential"), "%s", eb.message);
    /* a raw peer's garbage "client" message closes only that connection */
    nng_socket s;
    cr_assert_eq(nng_pair1_open(&s), 0);
    cr_assert_eq(nng_dial(s, url, NULL, 0), 0);
    uint8_t junk[64] = {'G', 'B', 'L', 'C', 2, 0, 99};
    cr_assert_eq(nng_send(s, junk, sizeof junk, 0), 0);
    /* an honest researcher's product on the same address, computed by the workers
     * that joined there */
    cr_assert_eq(connect_patient(url, alice, &c, &eb), GOBLIN_OK, "%s", eb.message);
    check_small_product(c);
    goblin_node_stats ns;
    goblin_node_stats_get(g.node, &ns);
    cr_assert_eq(ns.workers_connected, 2, "clients are not counted as workers");
    cr_assert_geq(ns.tasks_completed, 1);
    goblin_gateway_stats gs;
    goblin_gateway_stats_get(gw, &gs);
    cr_assert_eq(gs.jobs_submitted, 1);
    cr_assert_geq(gs.refused, 1, "the garbage request was counted");
    /* hostile peers on the shared address: 30 announce 512 MiB messages, which nothing
     * over a part's size (4 MiB) gets past; the honest researcher goes on */
    int port = atoi(strrchr(url, ':') + 1);
    long rss0 = hp_rss_kib();
    int fds[30];
    for (int i = 0; i < 30; i++) fds[i] = hp_connect(port, HP_PAIR1, (uint64_t)512 << 20, (size_t)8 << 20);
    check_small_product(c);
    long rss1 = hp_rss_kib();
    cr_assert_lt(rss1 - rss0, 160 * 1024, "RSS grew by %ld KiB under 30 hostile connections",
                 rss1 - rss0);
    for (int i = 0; i < 30; i++)
        if (fds[i] >= 0) close(fds[i]);
    goblin_client_free(c);
    nng_close(s);
    goblin_gateway_free(gw);
    rt_grid_stop(&g);
    rmdir_all(dir);
}

Test(one_address, open_mode_on_the_node_address_needs_a_local_one, .timeout = 60) {
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", hp_free_port());
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.listen[0] = "tcp://0.0.0.0:0";
    np.n_listen = 1;
    np.insecure_plaintext = true;
    goblin_node *node;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_OK);
    goblin_gateway_params gp;
    goblin_gateway_params_default(&gp);
    gp.open = true;
    goblin_gateway *gw = NULL;
    cr_assert_eq(goblin_gateway_new(&gw, node, &gp), GOBLIN_EINVAL);
    goblin_node_free(node);
    /* on loopback it is one command: a node, and clients on its address */
    np.listen[0] = url;
    np.insecure_plaintext = false;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_new(&gw, node, &gp), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_start(gw), GOBLIN_ESTATE, "the node is not listening yet");
    cr_assert_eq(goblin_node_start(node), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_start(gw), GOBLIN_OK);
    goblin_gateway *second = NULL;
    cr_assert_eq(goblin_gateway_new(&second, node, &gp), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_start(second), GOBLIN_ESTATE, "one gateway per node address");
    goblin_gateway_free(second);
    goblin_client *c = NULL;
    goblin_errbuf eb = {0};
    cr_assert_eq(connect_patient(url, NULL, &c, &eb), GOBLIN_OK, "%s", eb.message);
    goblin_node_stats ns;
    cr_assert_eq(goblin_client_stats(c, &ns, NULL, 0, NULL), GOBLIN_OK, "%s", goblin_client_error(c));
    goblin_client_free(c);
    goblin_gateway_free(gw);
    goblin_node_free(node);
}

Test(one_address, a_node_without_clients_says_so_at_once, .timeout = 60) {
    char tcp[64], ipc[96];
    snprintf(tcp, sizeof tcp, "tcp://127.0.0.1:%d", hp_free_port());
    snprintf(ipc, sizeof ipc, "ipc:///tmp/goblin-oneaddr-workers-%d.sock", (int)getpid());
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.listen[0] = tcp;
    np.listen[1] = ipc;
    np.n_listen = 2;
    goblin_node *node;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(node), GOBLIN_OK);
    const char *urls[2] = {tcp, ipc};
    for (int k = 0; k < 2; k++) {
        goblin_client *c = NULL;
        goblin_errbuf eb = {0};
        cr_assert_eq(connect_patient(urls[k], NULL, &c, &eb), GOBLIN_EPROTO, "%s: %s", urls[k],
                     eb.message);
        cr_assert(strstr(eb.message, "serves workers only"), "%s", eb.message);
        cr_assert_null(c);
    }
    goblin_node_stats ns;
    goblin_node_stats_get(node, &ns);
    cr_assert_eq(ns.workers_connected, 0);
    goblin_node_free(node);
}

Test(one_address, separate_addresses_point_at_each_other, .timeout = 240) {
    char workers[64], clients[96], dir[128];
    snprintf(workers, sizeof workers, "tcp://127.0.0.1:%d", hp_free_port());
    snprintf(clients, sizeof clients, "ipc:///tmp/goblin-oneaddr-clients-%d.sock", (int)getpid());
    tmpdir(dir, sizeof dir, "sep");
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.listen[0] = workers;
    np.n_listen = 1;
    goblin_node *node;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(node), GOBLIN_OK);
    goblin_gateway_params gp;
    goblin_gateway_params_default(&gp);
    gp.listen[0] = clients;
    gp.n_listen = 1;
    gp.open = true;
    rt_log log = {0};
    gp.log = rt_log_fn;
    gp.log_user = &log;
    goblin_gateway *gw;
    cr_assert_eq(goblin_gateway_new(&gw, node, &gp), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_start(gw), GOBLIN_OK);
    /* a client on the worker address is told the client address, at once */
    goblin_client *c = NULL;
    goblin_errbuf eb = {0};
    cr_assert_eq(connect_patient(workers, NULL, &c, &eb), GOBLIN_EPROTO, "%s", eb.message);
    cr_assert(strstr(eb.message, "worker address"), "%s", eb.message);
    cr_assert(strstr(eb.message, clients), "%s", eb.message);
    /* and the client address works */
    cr_assert_eq(connect_patient(clients, NULL, &c, &eb), GOBLIN_OK, "%s", eb.message);
    goblin_client_free(c);
    /* a worker on the client address is refused, told where workers connect, and stops */
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = clients;
    wp.n_connect = 1;
    wp.config_dir = dir;
    wp.log = rt_log_fn;
    wp.log_user = &log;
    goblin_worker *w;
    cr_assert_eq(goblin_worker_new(&w, &wp), GOBLIN_OK);
    cr_assert_eq(goblin_worker_run(w), GOBLIN_EPROTO);
    cr_assert(rt_log_has(&log, "client address"));
    cr_assert(rt_log_has(&log, workers));
    goblin_worker_free(w);
    goblin_gateway_free(gw);
    goblin_node_free(node);
    rmdir_all(dir);
}

/* nng 1.5.2 stops a listener for good when a peer leaves during the SP handshake
 * (net/listen_guard.h): one such connection on the worker address and one on the client
 * address, and afterwards a worker still gets through on both. Without the guard the
 * worker on the client address waits for an answer forever, and the other never joins. */
Test(one_address, a_peer_that_leaves_in_the_handshake_stops_no_listener, .timeout = 120) {
    char workers[64], clients[96], path[80], dir[128], dir2[128];
    int port = hp_free_port();
    snprintf(workers, sizeof workers, "tcp://127.0.0.1:%d", port);
    snprintf(path, sizeof path, "/tmp/goblin-oneaddr-vanish-%d.sock", (int)getpid());
    snprintf(clients, sizeof clients, "ipc://%s", path);
    tmpdir(dir, sizeof dir, "van1");
    tmpdir(dir2, sizeof dir2, "van2");
    rt_log log = {0};
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.listen[0] = workers;
    np.n_listen = 1;
    np.log = rt_log_fn;
    np.log_user = &log;
    goblin_node *node;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(node), GOBLIN_OK);
    goblin_gateway_params gp;
    goblin_gateway_params_default(&gp);
    gp.listen[0] = clients;
    gp.n_listen = 1;
    gp.open = true;
    gp.log = rt_log_fn;
    gp.log_user = &log;
    goblin_gateway *gw;
    cr_assert_eq(goblin_gateway_new(&gw, node, &gp), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_start(gw), GOBLIN_OK);
    for (int i = 0; i < 3; i++) {
        hp_vanish_ipc(path);
        hp_vanish_tcp(port);
    }
    /* the client address still takes connections: a worker there is told where to go */
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = clients;
    wp.n_connect = 1;
    wp.config_dir = dir;
    wp.log = rt_log_fn;
    wp.log_user = &log;
    goblin_worker *w;
    cr_assert_eq(goblin_worker_new(&w, &wp), GOBLIN_OK);
    cr_assert_eq(goblin_worker_run(w), GOBLIN_EPROTO);
    cr_assert(rt_log_has(&log, "client address"));
    goblin_worker_free(w);
    /* and the worker address too: a worker joins */
    wp.connect[0] = workers;
    wp.config_dir = dir2;
    wp.threads = 1;
    cr_assert_eq(goblin_worker_new(&w, &wp), GOBLIN_OK);
    rt_grid g = {.node = node, .n = 1};
    g.w[0] = w;
    rt_ctx[0] = (rt_wctx){&g, 0};
    pthread_create(&g.th[0], NULL, rt_worker_main, &rt_ctx[0]);
    cr_assert(rt_wait_workers(node, 1), "no worker joined after the vanished peer");
    goblin_gateway_free(gw);
    rt_grid_stop(&g);
    rmdir_all(dir);
    rmdir_all(dir2);
}

Test(one_address, connections_that_say_nothing_are_bounded_and_swept, .timeout = 180) {
    char url[64], dir[128];
    int port = hp_free_port();
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    tmpdir(dir, sizeof dir, "pend");
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.listen[0] = url;
    np.n_listen = 1;
    np.max_pending_connections = 8;
    goblin_node *node;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(node), GOBLIN_OK);
    /* 30 connections that complete the SP handshake and then say nothing: 8 wait, the
     * rest are closed as they come */
    int fds[30];
    for (int i = 0; i < 30; i++) fds[i] = hp_connect(port, HP_PAIR1, 0, 0);
    goblin_node_stats ns;
    for (int k = 0; k < 60000; k++) { /* wait for the condition, not for a time */
        goblin_node_stats_get(node, &ns);
        if (ns.peers_dropped >= 22) break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_geq(ns.peers_dropped, 22);
    /* a worker still gets in: the silent ones are closed after the handshake time and
     * the worker redials */
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = url;
    wp.n_connect = 1;
    wp.threads = 1;
    wp.config_dir = dir;
    goblin_worker *w;
    cr_assert_eq(goblin_worker_new(&w, &wp), GOBLIN_OK);
    rt_grid g = {.node = node, .n = 1};
    g.w[0] = w;
    rt_ctx[0] = (rt_wctx){&g, 0};
    pthread_create(&g.th[0], NULL, rt_worker_main, &rt_ctx[0]);
    cr_assert(rt_wait_workers(node, 1) || rt_wait_workers(node, 1), "the worker never joined");
    goblin_node_stats_get(node, &ns);
    cr_assert_geq(ns.peers_dropped, 30, "the 8 silent ones were swept too");
    for (int i = 0; i < 30; i++)
        if (fds[i] >= 0) close(fds[i]);
    rt_grid_stop(&g);
    rmdir_all(dir);
}
