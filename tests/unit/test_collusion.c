/* test_collusion.c - who checks whom when volunteers collude (docs/verification.md,
 * "Threat model"): replicas go to another identity, owner and network origin; a new
 * identity is on probation; the node audits agreeing replicas in secret; a caught pair
 * is quarantined with every result it gave rechecked; a fresh key starts over.
 *
 * Real node, real workers in this process over inproc:// (tcp loopback for the origin
 * read from the pipe). In-process workers have no network origin; the tests give them
 * one through goblin_test_control (GOBLIN_TESTCTRL_NODE_ORIGIN) to stand for machines.
 * The cheaters negate every output (GOBLIN_MISBEHAVE_NEGATE), so two of them send the
 * same wrong bits for a task: what a coordinated pair does. Each mechanism has a test
 * with the others turned off, which fails if that mechanism is removed; the
 * adversarial log runs them together over 12,000 tasks. */
#include <criterion/criterion.h>

#include <sys/stat.h>
#include <unistd.h>

#include "hostile_peer.h"
#include "node/origin.h"
#include "runtime_util.h"

/* ---- origins of addresses (hand-made socket addresses) ------------------------------ */

static nng_sockaddr v4(unsigned a, unsigned b, unsigned c, unsigned d) {
    nng_sockaddr sa;
    memset(&sa, 0, sizeof sa);
    sa.s_in.sa_family = NNG_AF_INET;
    sa.s_in.sa_addr = htonl(a << 24 | b << 16 | c << 8 | d);
    return sa;
}

static nng_sockaddr v6(const uint8_t a[16]) {
    nng_sockaddr sa;
    memset(&sa, 0, sizeof sa);
    sa.s_in6.sa_family = NNG_AF_INET6;
    memcpy(sa.s_in6.sa_addr, a, 16);
    return sa;
}

Test(collusion, origin_is_the_ipv4_24_or_ipv6_48) {
    nng_sockaddr a = v4(10, 1, 2, 3), b = v4(10, 1, 2, 200), c = v4(10, 1, 3, 3), lo = v4(127, 0, 0, 1);
    uint64_t ka = goblin__node_origin_key(&a);
    cr_assert_neq(ka, 0);
    cr_assert_eq(goblin__node_origin_key(&b), ka, "one /24");
    cr_assert_neq(goblin__node_origin_key(&c), ka, "another /24");
    cr_assert_eq(goblin__node_origin_key(&lo), 0, "loopback is local");
    char name[48];
    goblin__node_origin_name(ka, name, sizeof name);
    cr_assert_str_eq(name, "10.1.2.0/24");
    uint8_t x[16] = {0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    uint8_t y[16] = {0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8};
    uint8_t z[16] = {0x20, 0x01, 0x0d, 0xb8, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    uint8_t loop6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 77};
    nng_sockaddr sx = v6(x), sy = v6(y), sz = v6(z), sl = v6(loop6), sm = v6(mapped);
    uint64_t kx = goblin__node_origin_key(&sx);
    cr_assert_neq(kx, 0);
    cr_assert_eq(goblin__node_origin_key(&sy), kx, "one /48");
    cr_assert_neq(goblin__node_origin_key(&sz), kx, "another /48");
    cr_assert_eq(goblin__node_origin_key(&sl), 0, "::1 is local");
    cr_assert_eq(goblin__node_origin_key(&sm), ka, "an IPv4-mapped address is its IPv4 /24");
    goblin__node_origin_name(kx, name, sizeof name);
    cr_assert_str_eq(name, "2001:db8:1::/48");
    nng_sockaddr ip;
    memset(&ip, 0, sizeof ip);
    ip.s_family = NNG_AF_INPROC;
    cr_assert_eq(goblin__node_origin_key(&ip), 0);
    cr_assert_eq(goblin__node_origin_key(NULL), 0);
    goblin__node_origin_name(0, name, sizeof name);
    cr_assert_str_eq(name, "local");
}

/* ---- workers, a job, its reference --------------------------------------------------- */

typedef struct cworker {
    goblin_worker *w;
    pthread_t th;
    goblin_err rc;
    bool started;
    bool cheater;
} cworker;

static void *cworker_main(void *arg) {
    cworker *c = arg;
    c->rc = goblin_worker_run(c->w);
    return NULL;
}

/* Make worker @p c (key in @p config_dir, NULL: a fresh one) misbehaving with @p mode at
 * @p rate, give it test origin @p origin on @p node (0: none), start it. */
static void cworker_start(cworker *c, goblin_node *node, const char *url, const char *config_dir,
                          goblin_misbehave mode, double rate, uint64_t origin) {
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = url;
    wp.n_connect = 1;
    wp.threads = 1;
    wp.config_dir = config_dir;
    memset(c, 0, sizeof *c);
    cr_assert_eq(goblin_worker_new(&c->w, &wp), GOBLIN_OK);
    c->cheater = mode != GOBLIN_MISBEHAVE_NONE;
    if (c->cheater)
        cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, c->w, mode, rate, (uint64_t)41), GOBLIN_OK);
    if (origin)
        cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_NODE_ORIGIN, node, goblin_worker_identity(c->w), origin),
                     GOBLIN_OK);
    pthread_create(&c->th, NULL, cworker_main, c);
    c->started = true;
}

static void cworker_end(cworker *c) {
    if (!c->started) return;
    goblin_worker_stop(c->w);
    pthread_join(c->th, NULL);
    goblin_worker_free(c->w);
    c->started = false;
}

static int64_t cworker_misbehaved(const cworker *c) {
    goblin_worker_stats s;
    goblin_worker_stats_get(c->w, &s);
    return s.misbehaved;
}

/* The node's counters of the connection of worker @p c (its identity; the last one). */
static bool node_view(goblin_node *node, const cworker *c, goblin_node_worker_stats *out) {
    goblin_node_stats st;
    goblin_node_stats_get(node, &st);
    bool found = false;
    goblin_node_worker_stats ws;
    for (int64_t i = 0; goblin_node_worker_stats_get(node, i, &ws) == GOBLIN_OK; i++)
        if (strcmp(ws.identity, goblin_worker_identity(c->w)) == 0) {
            *out = ws;
            found = true;
        }
    return found;
}

static goblin_node_stats nstats(goblin_node *node) {
    goblin_node_stats st;
    goblin_node_stats_get(node, &st);
    return st;
}

static bool wait_for(goblin_node *node, bool (*ok)(const goblin_node_stats *, int64_t), int64_t arg) {
    for (int i = 0; i < 12000; i++) { /* two generous minutes: a wait, not a timing assertion */
        goblin_node_stats st = nstats(node);
        if (ok(&st, arg)) return true;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

static bool connected_at_least(const goblin_node_stats *st, int64_t n) { return st->workers_connected >= n; }
static bool quarantined_at_least(const goblin_node_stats *st, int64_t n) { return st->workers_quarantined >= n; }

/* y = x . w (f64) over B rows, one row a task: B tasks, each row's reference known. */
typedef struct rowjob {
    goblin_graph *g;
    int64_t rows;
    double *x, *w, *y; /* on the heap: the struct is returned by value */
    goblin_tensor in[2], out[1];
} rowjob;

static rowjob rowjob_new(int64_t rows, uint64_t seed) {
    rowjob r;
    memset(&r, 0, sizeof r);
    r.rows = rows;
    cr_assert_eq(goblin_graph_new(&r.g), GOBLIN_OK);
    int64_t sx[2] = {rows, 4}, sw[2] = {4, 3}, sy[2] = {rows, 3};
    int32_t x, w, mm;
    cr_assert_eq(goblin_graph_input(r.g, GOBLIN_DTYPE_F64, 2, sx, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(r.g, GOBLIN_DTYPE_F64, 2, sw, &w), GOBLIN_OK);
    int32_t i2[2] = {x, w};
    cr_assert_eq(goblin_graph_add(r.g, GOBLIN_OP_MATMUL, i2, 2, NULL, 0, &mm), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(r.g, mm), GOBLIN_OK);
    r.x = malloc((size_t)rows * 4 * sizeof(double));
    r.y = calloc((size_t)rows * 3, sizeof(double));
    r.w = malloc(12 * sizeof(double));
    for (int64_t i = 0; i < rows * 4; i++) r.x[i] = (double)(rt_rng(&seed) >> 11) * 0x1p-53 + 0.5;
    for (int i = 0; i < 12; i++) r.w[i] = (double)(rt_rng(&seed) >> 11) * 0x1p-53 + 0.5;
    goblin_tensor_init(&r.in[0], GOBLIN_DTYPE_F64, 2, sx, r.x);
    goblin_tensor_init(&r.in[1], GOBLIN_DTYPE_F64, 2, sw, r.w);
    goblin_tensor_init(&r.out[0], GOBLIN_DTYPE_F64, 2, sy, r.y);
    return r;
}

static void rowjob_free(rowjob *r) {
    goblin_graph_free(r->g);
    free(r->x), free(r->w), free(r->y);
}

/* Rows of y that are not x . w (plain loops; every value is positive, so a negated row is
 * off by twice its size): the bad results in the final answer. */
static int64_t rowjob_bad_rows(const rowjob *r) {
    int64_t bad = 0;
    for (int64_t i = 0; i < r->rows; i++) {
        bool ok = true;
        for (int j = 0; j < 3; j++) {
            double acc = 0;
            for (int q = 0; q < 4; q++) acc += r->x[i * 4 + q] * r->w[q * 3 + j];
            ok = ok && fabs(r->y[i * 3 + j] - acc) <= 1e-12 * acc;
        }
        bad += !ok;
    }
    return bad;
}

/* Submit @p r (one row a task, REPLICATE with @p min_rep) and wait for it; the job's
 * status is returned. */
static goblin_err rowjob_run(goblin_node *node, rowjob *r, double min_rep) {
    memset(r->y, 0, (size_t)r->rows * 3 * sizeof(double));
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 1;
    jp.verify = GOBLIN_VERIFY_REPLICATE;
    jp.min_replication = min_rep;
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_graph(node, r->g, r->in, 2, r->out, 1, &jp, &job), GOBLIN_OK);
    goblin_err e = goblin_job_wait(job, 600000);
    if (e) fprintf(stderr, "job: %s (%s)\n", goblin_strerror(e), goblin_job_error(job));
    goblin_job_free(job);
    return e;
}

static goblin_node *node_new(const char *url, int32_t probation, double audit) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.listen[0] = url;
    np.n_listen = 1;
    np.max_retries = 16;
    np.probation_results = probation;
    np.audit_rate = audit;
    goblin_node *node = NULL;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(node), GOBLIN_OK);
    return node;
}

/* ---- origin: one machine's workers never check each other ---------------------------- */

Test(collusion, workers_of_one_origin_are_never_each_others_replica) {
    const char *url = "inproc://collusion-one-origin";
    goblin_node *node = node_new(url, 0, 0.0); /* the origin rule alone */
    cworker a, b;
    cworker_start(&a, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 5);
    cworker_start(&b, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 5);
    cr_assert(wait_for(node, connected_at_least, 2));
    goblin_node_worker_stats ws;
    cr_assert(node_view(node, &a, &ws));
    cr_assert_str_eq(ws.origin, "test:5");
    rowjob r = rowjob_new(24, 1);
    cr_assert_eq(rowjob_run(node, &r, 1.0), GOBLIN_OK);
    cr_assert_eq(rowjob_bad_rows(&r), 0);
    goblin_node_stats st = nstats(node);
    cr_assert_eq(st.replicas_agreed, 0, "two workers of one origin agreed %lld times", (long long)st.replicas_agreed);
    cr_assert_eq(st.node_recomputed, 24, "the node checked every task itself");
    cr_assert_eq(st.replicas_correlated, 24);
    cr_assert_eq(st.results_rejected, 0);
    /* A control: a worker of another origin, and replicas agree again. */
    cworker c;
    cworker_start(&c, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 6);
    cr_assert(wait_for(node, connected_at_least, 3));
    cr_assert_eq(rowjob_run(node, &r, 1.0), GOBLIN_OK);
    cr_assert_eq(rowjob_bad_rows(&r), 0);
    cr_assert_gt(nstats(node).replicas_agreed, 0);
    cworker_end(&a), cworker_end(&b), cworker_end(&c);
    goblin_node_free(node);
    rowjob_free(&r);
}

/* Wait (two generous minutes) until @p job ends or @p q workers are quarantined; true: the
 * job ended. */
static bool job_or_quarantine(goblin_node *node, goblin_job *job, int64_t q) {
    for (int i = 0; i < 12000; i++) {
        if (goblin_job_wait(job, 10) != GOBLIN_ETIMEDOUT) return true;
        if (nstats(node).workers_quarantined >= q) return false;
    }
    return false;
}

Test(collusion, a_sybil_pair_of_one_origin_is_checked_by_the_node) {
    const char *url = "inproc://collusion-sybil-origin";
    goblin_node *node = node_new(url, 0, 0.0); /* the origin rule alone */
    cworker s1, s2;
    cworker_start(&s1, node, url, NULL, GOBLIN_MISBEHAVE_NEGATE, 1.0, 7);
    cworker_start(&s2, node, url, NULL, GOBLIN_MISBEHAVE_NEGATE, 1.0, 7);
    cr_assert(wait_for(node, connected_at_least, 2));
    /* Only the pair: their replicas would agree bit for bit; one origin, so the node
     * checks each task itself and catches them. */
    rowjob r = rowjob_new(64, 2);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 1;
    jp.min_replication = 1.0;
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_graph(node, r.g, r.in, 2, r.out, 1, &jp, &job), GOBLIN_OK);
    bool ended = job_or_quarantine(node, job, 2);
    cr_assert(!ended, "the pair finished the job (%lld wrong rows)", (long long)rowjob_bad_rows(&r));
    goblin_node_stats st = nstats(node);
    cr_assert_eq(st.replicas_agreed, 0);
    cr_assert_geq(st.replicas_correlated, 2);
    cworker h; /* an honest worker of another origin finishes the job */
    cworker_start(&h, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 8);
    cr_assert_eq(goblin_job_wait(job, 600000), GOBLIN_OK, "%s", goblin_job_error(job));
    goblin_job_free(job);
    cr_assert_eq(rowjob_bad_rows(&r), 0, "no wrong row in the answer");
    goblin_node_worker_stats ws;
    cr_assert(node_view(node, &h, &ws));
    cr_assert(!ws.quarantined);
    cr_assert_eq(ws.rejected, 0);
    cworker_end(&s1), cworker_end(&s2), cworker_end(&h);
    goblin_node_free(node);
    rowjob_free(&r);
}

Test(collusion, the_origin_is_read_from_the_connection) {
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", hp_free_port());
    goblin_node *node = node_new(url, 16, 0.02);
    cworker a;
    cworker_start(&a, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 0);
    cr_assert(wait_for(node, connected_at_least, 1));
    goblin_node_worker_stats ws;
    cr_assert(node_view(node, &a, &ws));
    cr_assert_str_eq(ws.origin, "local", "loopback has no network origin");
    cr_assert(ws.probation, "a new identity is on probation");
    cr_assert_eq(ws.vouched, 0);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_NODE_ORIGIN, node, goblin_worker_identity(a.w), (uint64_t)9),
                 GOBLIN_OK);
    cr_assert(node_view(node, &a, &ws));
    cr_assert_str_eq(ws.origin, "test:9", "a local connection takes a test's origin");
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_NODE_ORIGIN, node, "abc", (uint64_t)9), GOBLIN_EINVAL);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_NODE_ORIGIN, (goblin_node *)NULL, goblin_worker_identity(a.w),
                                     (uint64_t)9), GOBLIN_EINVAL);
    cworker_end(&a);
    goblin_node_free(node);
}

Test(collusion, node_params_are_checked) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    cr_assert_eq(np.probation_results, 16);
    cr_assert_float_eq(np.audit_rate, 0.02, 1e-15);
    np.listen[0] = "inproc://collusion-params";
    np.n_listen = 1;
    goblin_node *node = NULL;
    np.probation_results = -1;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_EINVAL);
    np.probation_results = 16;
    np.audit_rate = 1.5;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_EINVAL);
    np.audit_rate = -0.1;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_EINVAL);
    cr_assert_null(node);
}

/* ---- probation: two fresh keys never vouch for each other ---------------------------- */

Test(collusion, a_fresh_sybil_pair_is_checked_by_the_node_on_probation) {
    const char *url = "inproc://collusion-probation";
    goblin_node *node = node_new(url, 16, 0.0); /* no audits: probation alone */
    cworker s1, s2;
    /* Another origin each, no owners file: the pair slips past the independence rules. */
    cworker_start(&s1, node, url, NULL, GOBLIN_MISBEHAVE_NEGATE, 1.0, 11);
    cworker_start(&s2, node, url, NULL, GOBLIN_MISBEHAVE_NEGATE, 1.0, 12);
    cr_assert(wait_for(node, connected_at_least, 2));
    /* Only the pair is connected: every task is twinned between them, bit-equal and
     * wrong, and goes to the node because neither is established. */
    rowjob r = rowjob_new(32, 3);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 1;
    jp.min_replication = 1.0;
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_graph(node, r.g, r.in, 2, r.out, 1, &jp, &job), GOBLIN_OK);
    cr_assert(!job_or_quarantine(node, job, 2), "the pair finished the job (%lld wrong rows)",
              (long long)rowjob_bad_rows(&r));
    cr_assert(wait_for(node, quarantined_at_least, 2), "the pair is caught");
    goblin_node_stats st = nstats(node);
    cr_assert_geq(st.probation_checks, 1);
    cr_assert_eq(st.replicas_agreed, 0, "no agreement of the pair accepted");
    /* An honest worker finishes the job. */
    cworker h;
    cworker_start(&h, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 13);
    cr_assert_eq(goblin_job_wait(job, 600000), GOBLIN_OK, "%s", goblin_job_error(job));
    goblin_job_free(job);
    cr_assert_eq(rowjob_bad_rows(&r), 0);
    goblin_node_worker_stats ws;
    cr_assert(node_view(node, &h, &ws));
    cr_assert_eq(ws.rejected, 0);
    cr_assert(ws.vouched > 0, "the node's checks vouch for the honest worker");
    cworker_end(&s1), cworker_end(&s2), cworker_end(&h);
    goblin_node_free(node);
    rowjob_free(&r);
}

/* ---- audits: an established pair that turns is caught, and all it gave rechecked ----- */

Test(collusion, a_secret_audit_catches_an_established_pair) {
    const char *url = "inproc://collusion-audit";
    goblin_node *node = node_new(url, 4, 0.1);
    cworker s1, s2;
    cworker_start(&s1, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 21);
    cworker_start(&s2, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 22);
    cr_assert(wait_for(node, connected_at_least, 2));
    /* Honest first: past probation, trust earned. */
    rowjob r = rowjob_new(64, 4);
    cr_assert_eq(rowjob_run(node, &r, 1.0), GOBLIN_OK);
    cr_assert_eq(rowjob_bad_rows(&r), 0);
    goblin_node_worker_stats ws;
    cr_assert(node_view(node, &s1, &ws));
    cr_assert(!ws.probation, "established after the first job (vouched %lld)", (long long)ws.vouched);
    /* Then both negate everything: their replicas agree, bit for bit. */
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, s1.w, GOBLIN_MISBEHAVE_NEGATE, 1.0, (uint64_t)1),
                 GOBLIN_OK);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, s2.w, GOBLIN_MISBEHAVE_NEGATE, 1.0, (uint64_t)2),
                 GOBLIN_OK);
    int64_t agreed0 = nstats(node).replicas_agreed;
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 1;
    jp.min_replication = 1.0;
    rowjob r2 = rowjob_new(400, 5);
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_graph(node, r2.g, r2.in, 2, r2.out, 1, &jp, &job), GOBLIN_OK);
    cr_assert(!job_or_quarantine(node, job, 2), "the pair finished the job (%lld wrong rows)",
              (long long)rowjob_bad_rows(&r2));
    cr_assert(wait_for(node, quarantined_at_least, 2), "an audit caught the pair");
    goblin_node_stats st = nstats(node);
    cr_assert_geq(st.audits_failed, 1);
    /* The wrong agreements accepted before the audit were rechecked and replaced. */
    cr_assert_geq(st.recheck_failed, st.replicas_agreed - agreed0);
    fprintf(stderr, "audit: %lld wrong agreements accepted before an audit (%lld audits) caught the pair; "
            "%lld rechecks failed and were replaced\n", (long long)(st.replicas_agreed - agreed0),
            (long long)st.audits, (long long)st.recheck_failed);
    cworker h;
    cworker_start(&h, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 23);
    cr_assert_eq(goblin_job_wait(job, 600000), GOBLIN_OK, "%s", goblin_job_error(job));
    goblin_job_free(job);
    cr_assert_eq(rowjob_bad_rows(&r2), 0, "no wrong row in the answer");
    cworker_end(&s1), cworker_end(&s2), cworker_end(&h);
    goblin_node_free(node);
    rowjob_free(&r), rowjob_free(&r2);
}

/* ---- the adversarial log: 12,000 tasks, every attack on one node ---------------------- */

typedef struct tally {
    const char *attack;
    int64_t tasks, sent, caught, discarded, final_bad, quarantined;
} tally;

static void temp_dir(char out[128]) {
    snprintf(out, 128, "/tmp/goblin-collusion-XXXXXX");
    cr_assert_not_null(mkdtemp(out));
}

static void rm_key_dir(const char *dir) {
    char p[200];
    snprintf(p, sizeof p, "%s/worker_key.pem", dir);
    unlink(p);
    rmdir(dir);
}

/* One job of the log: submitted, then finished and tallied. */
typedef struct logrun {
    goblin_node_stats a;
    rowjob r;
    goblin_job *job;
} logrun;

static void logrun_submit(goblin_node *node, logrun *lr, int64_t rows, uint64_t seed) {
    lr->a = nstats(node);
    lr->r = rowjob_new(rows, seed);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp); /* REPLICATE, min_replication 0.25 */
    jp.chunk_rows = 1;
    cr_assert_eq(goblin_node_submit_graph(node, lr->r.g, lr->r.in, 2, lr->r.out, 1, &jp, &lr->job), GOBLIN_OK);
}

/* Wait for the job, count what @p sent bad results became, print the log's line. */
static tally logrun_finish(goblin_node *node, logrun *lr, const char *attack, int64_t sent) {
    goblin_err e = goblin_job_wait(lr->job, 600000);
    cr_assert_eq(e, GOBLIN_OK, "%s: %s (%s)", attack, goblin_strerror(e), goblin_job_error(lr->job));
    goblin_job_free(lr->job);
    goblin_node_stats a = lr->a, b = nstats(node);
    tally t = {attack, lr->r.rows, sent, 0, 0, rowjob_bad_rows(&lr->r), b.workers_quarantined - a.workers_quarantined};
    t.caught = (b.results_rejected - a.results_rejected) + (b.recheck_failed - a.recheck_failed);
    t.discarded = t.sent - t.caught - t.final_bad;
    fprintf(stderr, "| %-44s | %6lld | %5lld | %6lld | %9lld | %8lld | %11lld | audits %lld (failed %lld), probation "
            "checks %lld, node recomputed %lld\n", attack, (long long)t.tasks, (long long)t.sent, (long long)t.caught,
            (long long)t.discarded, (long long)t.final_bad, (long long)t.quarantined, (long long)(b.audits - a.audits),
            (long long)(b.audits_failed - a.audits_failed), (long long)(b.probation_checks - a.probation_checks),
            (long long)(b.node_recomputed - a.node_recomputed));
    rowjob_free(&lr->r);
    return t;
}

/* One job of @p rows tasks with the cheaters @p cw[0..nc) connected. */
static tally log_job(goblin_node *node, const char *attack, int64_t rows, uint64_t seed, cworker **cw, int nc) {
    int64_t sent0[8];
    for (int i = 0; i < nc; i++) sent0[i] = cworker_misbehaved(cw[i]);
    logrun lr;
    logrun_submit(node, &lr, rows, seed);
    goblin_err e = goblin_job_wait(lr.job, 600000);
    int64_t sent = 0;
    for (int i = 0; i < nc; i++) sent += cworker_misbehaved(cw[i]) - sent0[i];
    (void)e; /* judged by logrun_finish */
    return logrun_finish(node, &lr, attack, sent);
}

/* Wait (two generous minutes, not a timing assertion) until worker @p c has joined. */
static bool joined(goblin_node *node, const cworker *c) {
    for (int i = 0; i < 12000; i++) {
        goblin_node_worker_stats ws;
        if (node_view(node, c, &ws) && ws.connected) return true;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

static void expect_caught(goblin_node *node, cworker *c) {
    goblin_node_worker_stats ws;
    cr_assert(node_view(node, c, &ws));
    cr_assert(ws.quarantined || cworker_misbehaved(c) == 0, "a cheater that sent %lld bad results is not quarantined",
              (long long)cworker_misbehaved(c));
}

Test(collusion, adversarial_log, .timeout = 1200) {
    const char *url = "inproc://collusion-log";
    goblin_node *node = node_new(url, 16, 0.02); /* the defaults */
    const int64_t B = 2000;
    cworker h1, h2;
    cworker_start(&h1, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 1);
    cworker_start(&h2, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 2);
    cr_assert(wait_for(node, connected_at_least, 2));
    fprintf(stderr, "| attack | tasks | bad sent | caught | discarded | in answer | quarantined |\n");
    tally t[8];
    int nt = 0;

    /* A sybil pair of other owners and origins: one person, two keys, two networks. */
    char kdir[128];
    temp_dir(kdir);
    cworker s1, s2;
    cworker_start(&s1, node, url, kdir, GOBLIN_MISBEHAVE_NEGATE, 1.0, 3);
    cworker_start(&s2, node, url, NULL, GOBLIN_MISBEHAVE_NEGATE, 1.0, 4);
    cr_assert(joined(node, &s1) && joined(node, &s2));
    t[nt++] = log_job(node, "sybil pair, other owners and origins", B, 10, (cworker *[]){&s1, &s2}, 2);
    expect_caught(node, &s1), expect_caught(node, &s2);
    cworker_end(&s1), cworker_end(&s2);

    /* A sybil pair behind one address block. */
    cworker s3, s4;
    cworker_start(&s3, node, url, NULL, GOBLIN_MISBEHAVE_NEGATE, 1.0, 5);
    cworker_start(&s4, node, url, NULL, GOBLIN_MISBEHAVE_NEGATE, 1.0, 5);
    cr_assert(joined(node, &s3) && joined(node, &s4));
    t[nt++] = log_job(node, "sybil pair, one origin", B, 11, (cworker *[]){&s3, &s4}, 2);
    expect_caught(node, &s3), expect_caught(node, &s4);
    cworker_end(&s3), cworker_end(&s4);

    /* Whitewashing: the caught key comes back (refused), then two fresh keys. */
    int64_t refused = nstats(node).workers_refused;
    cworker again;
    cworker_start(&again, node, url, kdir, GOBLIN_MISBEHAVE_NEGATE, 1.0, 3);
    pthread_join(again.th, NULL);
    again.started = false;
    cr_assert_eq(again.rc, GOBLIN_EAUTH, "the caught key is refused (%s)", goblin_strerror(again.rc));
    cr_assert_eq(nstats(node).workers_refused, refused + 1);
    goblin_worker_free(again.w);
    rm_key_dir(kdir);
    /* ... and a whitewasher that keeps coming back: each time its pair is caught, two
     * new fresh keys join, while the job runs (up to WW_ROUNDS pairs). */
    enum { WW_ROUNDS = 12 };
    static cworker ww[2 * WW_ROUNDS];
    logrun lr;
    logrun_submit(node, &lr, B, 12);
    int rounds = 0;
    int64_t ww_sent = 0;
    for (;;) {
        bool caught = true;
        goblin_node_worker_stats v;
        for (int k = 2 * rounds - 2; rounds > 0 && k < 2 * rounds; k++)
            caught = caught && (!node_view(node, &ww[k], &v) || v.quarantined || cworker_misbehaved(&ww[k]) == 0);
        if (rounds < WW_ROUNDS && (rounds == 0 || caught)) {
            for (int k = 2 * rounds; k < 2 * rounds + 2; k++)
                cworker_start(&ww[k], node, url, NULL, GOBLIN_MISBEHAVE_NEGATE, 1.0, (uint64_t)(100 + k));
            rounds++;
        }
        if (goblin_job_wait(lr.job, 5) != GOBLIN_ETIMEDOUT) break;
    }
    for (int k = 0; k < 2 * rounds; k++) {
        ww_sent += cworker_misbehaved(&ww[k]);
        expect_caught(node, &ww[k]);
    }
    t[nt++] = logrun_finish(node, &lr, "whitewashing: fresh keys after each catch", ww_sent);
    fprintf(stderr, "  (%d fresh pairs joined)\n", rounds);
    for (int k = 0; k < 2 * rounds; k++) cworker_end(&ww[k]);

    /* Honest for a job (trust earned), then one cheats at 10 % and two as a pair. */
    cworker c1, c2, c3;
    cworker_start(&c1, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 8);
    cworker_start(&c2, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 9);
    cworker_start(&c3, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 10);
    cr_assert(joined(node, &c1) && joined(node, &c2) && joined(node, &c3));
    t[nt++] = log_job(node, "(honest: trust earned)", B, 13, (cworker *[]){&c1, &c2, &c3}, 3);
    goblin_node_worker_stats ws;
    int64_t honest_results = 0, honest_rejected = 0;
    cworker *trusted[3] = {&c1, &c2, &c3};
    for (int i = 0; i < 3; i++) {
        cr_assert(node_view(node, trusted[i], &ws));
        cr_assert(!ws.probation, "trust earned (vouched %lld)", (long long)ws.vouched);
        honest_results += ws.accepted + ws.rejected;
        honest_rejected += ws.rejected;
    }
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, c1.w, GOBLIN_MISBEHAVE_NEGATE, 0.1, (uint64_t)8),
                 GOBLIN_OK);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, c2.w, GOBLIN_MISBEHAVE_NEGATE, 1.0, (uint64_t)9),
                 GOBLIN_OK);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, c3.w, GOBLIN_MISBEHAVE_NEGATE, 1.0, (uint64_t)9),
                 GOBLIN_OK);
    t[nt++] = log_job(node, "after trust: one at 10 %, a pair at 100 %", B, 14, trusted, 3);
    expect_caught(node, &c1), expect_caught(node, &c2), expect_caught(node, &c3);
    cworker_end(&c1), cworker_end(&c2), cworker_end(&c3);

    /* Results off by 1e-3 (a cheaper computation, a lower precision): beyond the f64
     * contract, so a twin's disagreement sends them to the node, which rejects them. */
    cworker f1;
    cworker_start(&f1, node, url, NULL, GOBLIN_MISBEHAVE_SCALE, 1.0, 11);
    cr_assert(joined(node, &f1));
    t[nt++] = log_job(node, "results scaled by 1 + 1e-3 (forced recheck)", B, 15, (cworker *[]){&f1}, 1);
    expect_caught(node, &f1);
    cworker_end(&f1);

    int64_t tasks = 0, sent = 0, final_bad = 0;
    for (int i = 0; i < nt; i++) {
        tasks += t[i].tasks, sent += t[i].sent, final_bad += t[i].final_bad;
        cr_assert_eq(t[i].final_bad, 0, "%s: %lld bad results in the answer", t[i].attack, (long long)t[i].final_bad);
    }
    cworker *honest[2] = {&h1, &h2};
    for (int i = 0; i < 2; i++) {
        cr_assert(node_view(node, honest[i], &ws));
        cr_assert(!ws.quarantined);
        honest_results += ws.accepted + ws.rejected;
        honest_rejected += ws.rejected;
    }
    fprintf(stderr, "total: %lld tasks, %lld bad results sent, %lld in the answers; honest results %lld, of which "
            "rejected %lld\n", (long long)tasks, (long long)sent, (long long)final_bad, (long long)honest_results,
            (long long)honest_rejected);
    cr_assert_geq(tasks, 10000);
    for (int i = 0; i < nt; i++)
        if (t[i].attack[0] != '(') cr_assert_gt(t[i].sent, 0, "%s: no bad result was sent", t[i].attack);
    cr_assert_leq(honest_rejected * 1000, honest_results, "at most 0.1 %% of honest results rejected");
    cworker_end(&h1), cworker_end(&h2);
    goblin_node_free(node);
}

/* ---- a caught worker's agreements: its twin sent the same wrong bits ------------------ */

/* The progress callback (the node's thread): after @p at tasks, the second of the pair
 * turns honest, so that the next time the pair meets, the first is caught. */
typedef struct turn {
    goblin_worker *w;
    int64_t at;
    bool done;
} turn;

static void turn_honest(void *user, int64_t done, int64_t total) {
    (void)total;
    turn *t = user;
    if (t->done || done < t->at) return;
    t->done = true;
    goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, t->w, GOBLIN_MISBEHAVE_NONE, 0.0, (uint64_t)0);
}

Test(collusion, a_caught_worker_brings_down_the_twin_it_agreed_with) {
    const char *url = "inproc://collusion-twin";
    goblin_node *node = node_new(url, 4, 0.0); /* no audits: the recheck of agreements alone */
    cworker s1, s2;
    cworker_start(&s1, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 31);
    cworker_start(&s2, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 32);
    cr_assert(wait_for(node, connected_at_least, 2));
    rowjob r = rowjob_new(32, 6);
    cr_assert_eq(rowjob_run(node, &r, 1.0), GOBLIN_OK); /* honest: past probation */
    goblin_node_worker_stats ws;
    cr_assert(node_view(node, &s1, &ws) && !ws.probation);
    cr_assert(node_view(node, &s2, &ws) && !ws.probation);
    /* Both negate: alone, established, every task twinned between them, their agreements
     * are accepted. After 20 tasks s2 turns honest: s1 is caught at their next common
     * task, and the recheck of s1's agreements catches s2, which sent the same bits. */
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, s1.w, GOBLIN_MISBEHAVE_NEGATE, 1.0, (uint64_t)1),
                 GOBLIN_OK);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, s2.w, GOBLIN_MISBEHAVE_NEGATE, 1.0, (uint64_t)2),
                 GOBLIN_OK);
    int64_t agreed0 = nstats(node).replicas_agreed;
    turn tu = {s2.w, 20, false};
    rowjob r2 = rowjob_new(400, 7);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 1;
    jp.min_replication = 1.0;
    jp.job.progress = turn_honest;
    jp.job.progress_user = &tu;
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_graph(node, r2.g, r2.in, 2, r2.out, 1, &jp, &job), GOBLIN_OK);
    cr_assert(!job_or_quarantine(node, job, 2), "the pair finished the job (%lld wrong rows)",
              (long long)rowjob_bad_rows(&r2));
    cr_assert(wait_for(node, quarantined_at_least, 2), "both caught");
    goblin_node_stats st = nstats(node);
    cr_assert_geq(st.replicas_agreed - agreed0, 20, "the pair's agreements were accepted first");
    cr_assert_geq(st.recheck_failed, st.replicas_agreed - agreed0, "every wrong agreement rechecked");
    cworker h; /* an honest worker finishes the job */
    cworker_start(&h, node, url, NULL, GOBLIN_MISBEHAVE_NONE, 0, 33);
    cr_assert_eq(goblin_job_wait(job, 600000), GOBLIN_OK, "%s", goblin_job_error(job));
    goblin_job_free(job);
    cr_assert_eq(rowjob_bad_rows(&r2), 0, "no wrong row in the answer");
    cr_assert(node_view(node, &h, &ws) && !ws.quarantined && ws.rejected == 0);
    fprintf(stderr, "twin: %lld wrong agreements rechecked and replaced after a catch\n", (long long)st.recheck_failed);
    cworker_end(&s1), cworker_end(&s2), cworker_end(&h);
    goblin_node_free(node);
    rowjob_free(&r), rowjob_free(&r2);
}
