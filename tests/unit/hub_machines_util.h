/* tests/unit/hub_machines_util.h - what the tests of goblin-hub's machines address share
 * (test_hub_relay.c, test_hub_intro.c): a hub serving it on loopback, approved lab
 * accounts and their node keys, nodes linked to the hub, workers dialing it in threads,
 * a raw pair1 connection speaking the hub protocol. One test at a time per process:
 * the hub is a static. */
#ifndef GOBLIN_TEST_HUB_MACHINES_UTIL_H
#define GOBLIN_TEST_HUB_MACHINES_UTIL_H

#include <criterion/criterion.h>
#include <goblin/hub.h>
#include <goblin/node.h>
#include <goblin/worker.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proto/hub_wire.h"
#include "runtime_util.h"

static char dir[256];
static char fp[65];
static goblin_hub *hub;
static int mport;
static char murl[128];
static const int64_t T0 = 1700000000;

static inline void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A hub whose machines address is @p scheme://127.0.0.1:0, serving it. */
static inline void hub_up(const char *scheme, const char *extra) {
    snprintf(dir, sizeof dir, "/tmp/goblin-hubrelay-%d-XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(dir));
    goblin_errbuf err;
    cr_assert_eq(goblin_hub_init_dir(dir, "op@example.org", NULL, fp, &err), GOBLIN_OK, "%s", err.message);
    char path[400];
    snprintf(path, sizeof path, "%s/hub.conf", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "listen = https://127.0.0.1:0\nmachines = %s://127.0.0.1:0\n%s", scheme, extra ? extra : "");
    fclose(f);
    cr_assert_eq(goblin_hub_open(dir, &hub, &err), GOBLIN_OK, "%s", err.message);
    cr_assert_eq(goblin_hub_serve_machines(hub), GOBLIN_OK, "%s", goblin_hub_error(hub));
    cr_assert_eq(goblin_hub_machines_port(hub, &mport), GOBLIN_OK);
    snprintf(murl, sizeof murl, "%s://127.0.0.1:%d", scheme, mport);
}

static inline void hub_down(void) {
    goblin_hub_free(hub);
    hub = NULL;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* An approved lab account @p email and a node key of it into @p key; its ids. */
static inline int64_t lab_key(const char *email, char *key, int64_t *kid) {
    goblin_hub_account a;
    goblin_hub_store *s = goblin_hub_get_store(hub);
    cr_assert_eq(goblin_hub_store_account_ensure(s, email, T0, &a), GOBLIN_OK);
    goblin_hub_access_request r;
    memset(&r, 0, sizeof r);
    strcpy(r.name, "Lab");
    strcpy(r.institution, "Institute");
    strcpy(r.purpose, "matmul");
    strcpy(r.expected_use, "some");
    int64_t rid;
    cr_assert_eq(goblin_hub_request_file(hub, a.id, &r, T0, &rid), GOBLIN_OK, "%s", goblin_hub_error(hub));
    cr_assert_eq(goblin_hub_store_request_decide(s, rid, GOBLIN_HUB_REQUEST_APPROVED, "", T0), GOBLIN_OK);
    cr_assert_eq(goblin_hub_key_create(hub, a.id, "node", T0, key, kid), GOBLIN_OK, "%s", goblin_hub_error(hub));
    return a.id;
}

static inline goblin_node *node_up(rt_log *lg) {
    goblin_node_params p;
    goblin_node_params_default(&p);
    p.listen[0] = "tcp://127.0.0.1:0";
    p.n_listen = 1;
    p.probation_results = 0;
    if (lg) {
        p.log = rt_log_fn;
        p.log_user = lg;
        p.log_level = GOBLIN_LOG_DEBUG;
    }
    goblin_node *n = NULL;
    cr_assert_eq(goblin_node_new(&n, &p), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(n), GOBLIN_OK);
    return n;
}

static inline goblin_err link_node(goblin_node *n, const char *key) {
    goblin_node_hub_params hp;
    goblin_node_hub_params_default(&hp);
    hp.url = murl;
    hp.key = key;
    if (!strncmp(murl, "tls+", 4)) hp.fingerprint = fp;
    return goblin_node_hub_connect(n, &hp);
}

/* Workers dialing the hub, in threads. */
typedef struct wset {
    goblin_worker *w[8];
    pthread_t th[8];
    goblin_err rc[8];
    int n;
} wset;
typedef struct wrun {
    wset *s;
    int i;
} wrun;
static wrun wruns[8];
static inline void *wmain(void *arg) {
    wrun *r = arg;
    r->s->rc[r->i] = goblin_worker_run(r->s->w[r->i]);
    return NULL;
}
static inline void workers_up(wset *s, int n) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < n; i++) {
        goblin_worker_params wp;
        goblin_worker_params_default(&wp);
        wp.connect[0] = murl;
        wp.n_connect = 1;
        wp.threads = 1;
        if (!strncmp(murl, "tls+", 4)) wp.tls_fingerprint = fp;
        cr_assert_eq(goblin_worker_new(&s->w[i], &wp), GOBLIN_OK);
        wruns[i] = (wrun){s, i};
        pthread_create(&s->th[i], NULL, wmain, &wruns[i]);
        s->n = i + 1;
    }
}
static inline void workers_down(wset *s) {
    for (int i = 0; i < s->n; i++) goblin_worker_stop(s->w[i]);
    for (int i = 0; i < s->n; i++) pthread_join(s->th[i], NULL);
    for (int i = 0; i < s->n; i++) goblin_worker_free(s->w[i]);
    s->n = 0;
}

static inline goblin_hub_machines_stats hstats(void) {
    goblin_hub_machines_stats st;
    cr_assert_eq(goblin_hub_machines_stats_get(hub, &st), GOBLIN_OK);
    return st;
}

/* Run C = A B (f64, m x k x n) on @p node and check it against the product computed
 * here in f64; returns the tasks accepted from workers. */
static uint8_t a_head[64]; /* the first bytes of the last A, to look for in the hub's files */

static inline void matmul_checked(goblin_node *node, int64_t m, int64_t k, int64_t n, uint64_t seed) {
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F64, m, k, seed, true), b = rt_mat_new(GOBLIN_DTYPE_F64, k, n, seed + 1, true);
    memcpy(a_head, a.data, sizeof a_head);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F64, m, n, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 8;
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_matmul(node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK, "%s",
                 goblin_node_submit_error());
    cr_assert_eq(goblin_job_wait(job, 60000), GOBLIN_OK, "%s", goblin_job_error(job));
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0, "C matches the f64 product");
    goblin_job_free(job);
    free(a.data);
    free(b.data);
    free(c.data);
}

/* Tasks the workers of @p node had accepted, over every worker it tracks. */
static inline int64_t accepted_from_workers(goblin_node *node) {
    int64_t sum = 0;
    goblin_node_worker_stats ws;
    for (int64_t i = 0; goblin_node_worker_stats_get(node, i, &ws) == GOBLIN_OK; i++) sum += ws.accepted;
    return sum;
}

static inline nng_socket raw_dial(const char *url) {
    nng_socket s;
    cr_assert_eq(nng_pair1_open(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 10000);
    nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 600000);
    nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 600000);
    cr_assert_eq(nng_dial(s, url, NULL, 0), 0);
    return s;
}

static inline void send_hubw(nng_socket s, const goblin__hubw_msg *m) {
    uint8_t b[GOBLIN__HUBW_MAX];
    size_t n;
    cr_assert_eq(goblin__hubw_encode(m, b, &n), GOBLIN_OK);
    cr_assert_eq(nng_send(s, b, n, 0), 0);
}

static inline bool recv_hubw(nng_socket s, goblin__hubw_msg *m) {
    void *b;
    size_t n;
    if (nng_recv(s, &b, &n, NNG_FLAG_ALLOC)) return false;
    goblin_err e = goblin__hubw_decode(b, n, m, NULL, 0);
    nng_free(b, n);
    return e == GOBLIN_OK;
}

static inline bool wait_for(bool (*cond)(void *), void *arg) {
    for (int i = 0; i < 6000; i++) { /* a minute: a loaded machine, not a timing check */
        if (cond(arg)) return true;
        sleep_ms(10);
    }
    return false;
}

#endif
