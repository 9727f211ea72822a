/* tests/unit/runtime_util.h - helpers for the node/worker tests: random operands,
 * an independent f64 reference product with its error bound, a log collector,
 * a small hand-built grid (node + worker threads on any URL), an embedded grid
 * started and joined, and a graph job submitted and waited for. The helpers named
 * "joined", rt_local_grid and rt_run_graph assert (Criterion) as they go. */
#ifndef GOBLIN_RUNTIME_UTIL_H
#define GOBLIN_RUNTIME_UTIL_H

#include <criterion/criterion.h>
#include <goblin/alloc.h>
#include <goblin/grid.h>
#include <goblin/node.h>
#include <goblin/ops.h>
#include <goblin/testctrl.h>
#include "node/plan.h"
#include <nng/nng.h>
#include "net/worker_key.h"
#include "proto/wire.h"
#include <goblin/worker.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- operands and the reference ---------------------------------------------- */

static inline uint64_t rt_rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct rt_mat {
    goblin_tensor t;
    void *data;
} rt_mat;

static inline rt_mat rt_mat_new(goblin_dtype dt, int64_t r, int64_t c, uint64_t seed, bool fill) {
    rt_mat m;
    size_t es = goblin_dtype_size(dt);
    m.data = calloc((size_t)(r * c) + 1, es);
    int64_t shp[2] = {r, c};
    memset(&m.t, 0, sizeof m.t);
    goblin_tensor_init(&m.t, dt, 2, shp, m.data);
    if (fill)
        for (int64_t i = 0; i < r * c; i++) {
            double v = (double)(rt_rng(&seed) >> 11) * 0x1p-53 * 2.0 - 1.0;
            if (dt == GOBLIN_DTYPE_F32) ((float *)m.data)[i] = (float)v;
            else ((double *)m.data)[i] = v;
        }
    return m;
}

static inline double rt_get(const goblin_tensor *t, int64_t i, int64_t j) {
    const char *p = (const char *)t->data +
                    (i * t->strides[0] + j * t->strides[1]) * (int64_t)goblin_dtype_size(t->dtype);
    return t->dtype == GOBLIN_DTYPE_F32 ? (double)*(const float *)p : *(const double *)p;
}

/* Count elements of C outside 2 * gamma_K * sum |a||b| (+ a tiny absolute slack) of
 * the product computed here in f64 (for f64 operands the reference's own error is
 * within the same bound). */
static inline int64_t rt_check_product(const goblin_tensor *a, const goblin_tensor *b,
                                       const goblin_tensor *c) {
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1], bad = 0;
    double u = a->dtype == GOBLIN_DTYPE_F32 ? 0x1p-24 : 0x1p-53;
    double gamma = (double)k * u / (1.0 - (double)k * u);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, sa = 0;
            for (int64_t q = 0; q < k; q++) {
                double x = rt_get(a, i, q) * rt_get(b, q, j);
                s += x;
                sa += fabs(x);
            }
            double got = rt_get(c, i, j);
            if (!(fabs(got - s) <= 2.0 * gamma * sa + 1e-300)) {
                if (bad < 3)
                    fprintf(stderr, "C[%lld,%lld] = %.17g, reference %.17g\n", (long long)i,
                            (long long)j, got, s);
                bad++;
            }
        }
    return bad;
}

/* ---- log collector -------------------------------------------------------------- */

typedef struct rt_log {
    pthread_mutex_t mu;
    char buf[65536];
    size_t len;
} rt_log;

static inline void rt_log_fn(void *user, goblin_log_level lvl, const char *line) {
    rt_log *l = user;
    pthread_mutex_lock(&l->mu);
    int w = snprintf(l->buf + l->len, sizeof l->buf - l->len, "[%s] %s\n", goblin_log_level_name(lvl), line);
    if (w > 0 && l->len + (size_t)w < sizeof l->buf) l->len += (size_t)w;
    pthread_mutex_unlock(&l->mu);
}

static inline bool rt_log_has(rt_log *l, const char *s) {
    pthread_mutex_lock(&l->mu);
    bool r = strstr(l->buf, s) != NULL;
    pthread_mutex_unlock(&l->mu);
    return r;
}

/* ---- a grid built by hand -------------------------------------------------------- */

#define RT_MAX_WORKERS 8

typedef struct rt_grid {
    goblin_node *node;
    goblin_worker *w[RT_MAX_WORKERS];
    pthread_t th[RT_MAX_WORKERS];
    goblin_err rc[RT_MAX_WORKERS];
    int n;
} rt_grid;

typedef struct rt_wctx {
    rt_grid *g;
    int i;
} rt_wctx;

static rt_wctx rt_ctx[RT_MAX_WORKERS];

static inline void *rt_worker_main(void *arg) {
    rt_wctx *c = arg;
    c->g->rc[c->i] = goblin_worker_run(c->g->w[c->i]);
    return NULL;
}

/* Fault injection for worker i of the next rt_grid_start (goblin_test_control), set
 * by a test before the call: applied between goblin_worker_new and the worker's
 * thread, then cleared. slow_ms 0 and catalog_version 0 leave the defaults. */
typedef struct rt_fault {
    goblin_misbehave mode;
    double rate;
    uint64_t seed;
    uint32_t slow_ms;
    void (*crash_hook)(void *user);
    uint32_t catalog_version;
} rt_fault;

static rt_fault rt_faults[RT_MAX_WORKERS];

static inline goblin_err rt_fault_apply(goblin_worker *w, const rt_fault *f) {
    goblin_err e = GOBLIN_OK;
    if (f->mode != GOBLIN_MISBEHAVE_NONE)
        e = goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, w, f->mode, f->rate, f->seed);
    if (!e && f->slow_ms) e = goblin_test_control(GOBLIN_TESTCTRL_WORKER_SLOW_MS, w, (unsigned)f->slow_ms);
    if (!e && f->crash_hook)
        e = goblin_test_control(GOBLIN_TESTCTRL_WORKER_CRASH, w, f->crash_hook, (void *)NULL, 0);
    if (!e && f->catalog_version)
        e = goblin_test_control(GOBLIN_TESTCTRL_WORKER_CATALOG_VERSION, w, (unsigned)f->catalog_version);
    return e;
}

/* Name of a misbehave mode, for messages. */
static inline const char *rt_misbehave_name(goblin_misbehave mode) {
    const char *name = NULL;
    goblin_test_control(GOBLIN_TESTCTRL_MISBEHAVE_NAME, mode, &name);
    return name;
}

/* Start a node on @p url (params @p np, listen overridden) and @p n workers with
 * @p wps[i] (connect overridden) and rt_faults[i]. */
static inline goblin_err rt_grid_start(rt_grid *g, const char *url, const goblin_node_params *np,
                                       const goblin_worker_params *wps, int n) {
    memset(g, 0, sizeof *g);
    goblin_node_params p = *np;
    p.listen[0] = url;
    p.n_listen = 1;
    goblin_err e = goblin_node_new(&g->node, &p);
    if (e) return e;
    if ((e = goblin_node_start(g->node)) != GOBLIN_OK) return e;
    for (int i = 0; i < n; i++) {
        goblin_worker_params wp = wps[i];
        wp.connect[0] = url;
        wp.n_connect = 1;
        if ((e = goblin_worker_new(&g->w[i], &wp)) != GOBLIN_OK) return e;
        if ((e = rt_fault_apply(g->w[i], &rt_faults[i])) != GOBLIN_OK) return e;
        rt_ctx[i] = (rt_wctx){g, i};
        pthread_create(&g->th[i], NULL, rt_worker_main, &rt_ctx[i]);
        g->n = i + 1;
    }
    memset(rt_faults, 0, sizeof rt_faults);
    return GOBLIN_OK;
}

static inline void rt_grid_stop(rt_grid *g) {
    for (int i = 0; i < g->n; i++) goblin_worker_stop(g->w[i]);
    for (int i = 0; i < g->n; i++) pthread_join(g->th[i], NULL);
    goblin_node_free(g->node);
    for (int i = 0; i < g->n; i++) goblin_worker_free(g->w[i]);
    g->n = 0;
}

/* Wait until @p n workers have joined (or 5 s). */
/* Waits for @p n connected workers: a generous minute (a loaded machine starts threads
 * and handshakes slowly), not a timing assertion. */
static inline bool rt_wait_workers(goblin_node *node, int64_t n) {
    for (int i = 0; i < 6000; i++) {
        goblin_node_stats st;
        goblin_node_stats_get(node, &st);
        if (st.workers_connected >= n) return true;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

/* rt_grid_start, asserted, and then its @p n workers joined (asserted). */
static inline void rt_grid_start_joined(rt_grid *g, const char *url, const goblin_node_params *np,
                                        const goblin_worker_params *wps, int n) {
    cr_assert_eq(rt_grid_start(g, url, np, wps, n), GOBLIN_OK);
    cr_assert(rt_wait_workers(g->node, n));
}

/* An embedded grid of @p n workers (goblin_grid_local, params @p gp or NULL), its
 * workers joined; both asserted. */
static inline goblin_grid *rt_local_grid(int n, const goblin_grid_params *gp) {
    goblin_grid *grid = NULL;
    cr_assert_eq(goblin_grid_local(n, gp, &grid), GOBLIN_OK);
    cr_assert(rt_wait_workers(goblin_grid_node(grid), n));
    return grid;
}

/* Submit a graph job (goblin_node_submit_graph's arguments) and wait up to 20 s for it
 * to finish; both asserted. Returns the job (goblin_job_free it). */
static inline goblin_job *rt_run_graph(goblin_node *node, const goblin_graph *g,
                                       const goblin_tensor *in, int32_t n_in, goblin_tensor *out,
                                       int32_t n_out, const goblin_graph_job_params *jp) {
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_graph(node, g, in, n_in, out, n_out, jp, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 20000), GOBLIN_OK, "%s", goblin_job_error(job));
    return job;
}

/* ---- raw peers: the worker protocol spoken by hand ------------------------------- */

/* The next message on @p s decoded (NULL: none within the socket's receive timeout, or
 * undecodable). */
static inline goblin__wire_msg *rt_raw_next(nng_socket s) {
    void *rb;
    size_t rlen;
    if (nng_recv(s, &rb, &rlen, NNG_FLAG_ALLOC) != 0) return NULL;
    goblin__wire_msg *r = NULL;
    goblin_err e = goblin__wire_decode(rb, rlen, NULL, 0, &r, NULL, 0);
    nng_free(rb, rlen);
    return e == GOBLIN_OK ? r : NULL;
}

/* How rt_raw_join lies (tests of the identity proof). */
typedef struct rt_proof_lie {
    const uint8_t *pub; /* present this public key instead of the signer's (NULL: the signer's) */
    bool flip_sig;      /* change one bit of the signature */
} rt_proof_lie;

/* Send @p hello, answer the node's CHALLENGE with a PROOF signed by @p key (with @p lie, if
 * not NULL), and return the node's answer to it: HELLO_ACK or REFUSE (or a REFUSE of the
 * HELLO itself); NULL if nothing came. Criterion-asserts on what cannot fail. */
static inline goblin__wire_msg *rt_raw_join(nng_socket s, const goblin__wire_msg *hello, goblin__wkey *key,
                                            const rt_proof_lie *lie) {
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin__wire_encode(hello, &buf, &len), GOBLIN_OK);
    uint8_t hh[32];
    cr_assert_eq(goblin__wkey_hash(buf, len, hh), GOBLIN_OK);
    cr_assert_eq(nng_send(s, buf, len, 0), 0);
    goblin_buffer_free(buf);
    goblin__wire_msg *c = rt_raw_next(s);
    if (!c || c->type != GOBLIN_WIRE_TYPE_CHALLENGE) return c;
    const uint8_t *pub = lie && lie->pub ? lie->pub : goblin__wkey_public(key);
    uint8_t digest[32], sig[GOBLIN__WKEY_SIG_MAX];
    size_t sl = 0;
    cr_assert_eq(goblin__wkey_proof_digest(c->body.challenge.nonce, hh, pub, digest), GOBLIN_OK);
    goblin__wire_msg_free(c);
    cr_assert_eq(goblin__wkey_sign(key, digest, sig, &sl, NULL, 0), GOBLIN_OK);
    if (lie && lie->flip_sig) sig[sl / 2] ^= 0x01;
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_PROOF);
    m.body.proof.key = pub;
    m.body.proof.key_len = GOBLIN__WKEY_PUBLIC_BYTES;
    m.body.proof.sig = sig;
    m.body.proof.sig_len = (uint32_t)sl;
    cr_assert_eq(goblin__wire_encode(&m, &buf, &len), GOBLIN_OK);
    cr_assert_eq(nng_send(s, buf, len, 0), 0);
    goblin_buffer_free(buf);
    return rt_raw_next(s);
}

/* A HELLO of a 1-thread worker with @p memory bytes. */
static inline goblin__wire_msg rt_raw_hello(uint64_t memory, bool batch) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HELLO);
    m.body.hello.backends = 1u | (batch ? GOBLIN_WIRE_CAP_BATCH : 0);
    m.body.hello.threads = 1;
    m.body.hello.memory_bytes = memory;
    return m;
}

#endif
