/* tests/unit/test_identity.c - worker identities (net/worker_key.c, node/identity.c) and
 * the bounded peer table (node/peer.c): the key file, the proof at HELLO, a caught
 * worker refused when it comes back with its key (to the same node and after a restart,
 * through the quarantine file), two workers of one key or one owner never each other's
 * replica, forged proofs refused, the allow list, and 1000 connections that leave the
 * peer table empty.
 *
 * References are independent of the code under test: fingerprints are recomputed here
 * with mbedTLS from the key file, counts come from what each test did, and nothing
 * depends on timing (waits are "until", with generous bounds). */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <goblin/goblin.h>
#include <mbedtls/pk.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <psa/crypto.h>
#endif
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostile_peer.h"
#include "proto/part.h"
#include "runtime_util.h"
#include "testutil.h"

/* ---- helpers ---------------------------------------------------------------------- */

/* A fresh directory under /tmp; @p out holds its path. */
static void temp_dir(char out[128]) {
    snprintf(out, 128, "/tmp/goblin-ident-XXXXXX");
    cr_assert_not_null(mkdtemp(out));
}

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) rm_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* SHA-256 (hex) of the DER public key of the PEM private key in @p path, with mbedTLS
 * directly: the reference for an identity. */
static void fingerprint_of_key_file(const char *path, char hex[65]) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    unsigned char pem[2048];
    size_t n = fread(pem, 1, sizeof pem - 1, f);
    fclose(f);
    pem[n] = 0;
    mbedtls_pk_context pk;
    mbedtls_pk_init(&pk);
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    mbedtls_entropy_context ent;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_entropy_init(&ent);
    mbedtls_ctr_drbg_init(&drbg);
    cr_assert_eq(psa_crypto_init(), PSA_SUCCESS);
    cr_assert_eq(mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &ent, NULL, 0), 0);
    cr_assert_eq(mbedtls_pk_parse_key(&pk, pem, n + 1, NULL, 0, mbedtls_ctr_drbg_random, &drbg), 0);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&ent);
#else
    cr_assert_eq(mbedtls_pk_parse_key(&pk, pem, n + 1, NULL, 0), 0);
#endif
    unsigned char der[256];
    int len = mbedtls_pk_write_pubkey_der(&pk, der, sizeof der);
    cr_assert_gt(len, 0);
    unsigned char h[32];
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    cr_assert_eq(mbedtls_sha256(der + sizeof der - len, (size_t)len, h, 0), 0);
#else
    cr_assert_eq(mbedtls_sha256_ret(der + sizeof der - len, (size_t)len, h, 0), 0);
#endif
    mbedtls_pk_free(&pk);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", h[i]);
}

static goblin_node_stats stats(goblin_node *node) {
    goblin_node_stats st;
    goblin_node_stats_get(node, &st);
    return st;
}

/* Wait until @p pred holds for the node's counters (or 30 s); returns whether it did. */
static bool wait_until(goblin_node *node, bool (*pred)(const goblin_node_stats *, int64_t), int64_t arg) {
    for (int i = 0; i < 3000; i++) {
        goblin_node_stats st = stats(node);
        if (pred(&st, arg)) return true;
        sleep_ms(10);
    }
    return false;
}

static bool connected_is(const goblin_node_stats *s, int64_t n) { return s->workers_connected == n; }
static bool tracked_is(const goblin_node_stats *s, int64_t n) { return s->peers_tracked == n; }

/* A worker run in its own thread. */
typedef struct wthread {
    goblin_worker *w;
    pthread_t th;
    goblin_err rc;
} wthread;

static void *wthread_main(void *arg) {
    wthread *t = arg;
    t->rc = goblin_worker_run(t->w);
    return NULL;
}

static void wthread_new(wthread *t, const char *url, const char *config_dir, rt_log *lg) {
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = url;
    wp.n_connect = 1;
    wp.threads = 1;
    wp.config_dir = config_dir;
    if (lg) {
        wp.log = rt_log_fn;
        wp.log_user = lg;
    }
    memset(t, 0, sizeof *t);
    cr_assert_eq(goblin_worker_new(&t->w, &wp), GOBLIN_OK);
}

static void wthread_start(wthread *t) { pthread_create(&t->th, NULL, wthread_main, t); }

static void wthread_end(wthread *t) {
    goblin_worker_stop(t->w);
    pthread_join(t->th, NULL);
    goblin_worker_free(t->w);
    t->w = NULL;
}

/* A matmul job of @p m x @p k x @p n (f64) on @p node, cut into at least 8 tasks, waited for
 * (20 s) and checked against the f64 reference. */
static void run_matmul(goblin_node *node, int64_t m, int64_t k, int64_t n, uint64_t seed) {
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F64, m, k, seed, true);
    rt_mat b = rt_mat_new(GOBLIN_DTYPE_F64, k, n, seed + 1, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F64, m, n, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 8;
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_matmul(node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 20000), GOBLIN_OK, "%s", goblin_job_error(job));
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    goblin_job_free(job);
    free(a.data);
    free(b.data);
    free(c.data);
}

/* A node on @p url with @p quarantine_file (or NULL) and a log collector. */
static goblin_node *node_start(const char *url, const char *quarantine_file, const char *allow, const char *owners,
                               rt_log *lg) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.listen[0] = url;
    np.n_listen = 1;
    np.quarantine_file = quarantine_file;
    np.allow_identities_file = allow;
    np.owners_file = owners;
    np.log = rt_log_fn;
    np.log_user = lg;
    goblin_node *node = NULL;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(node), GOBLIN_OK);
    return node;
}

/* The cheater of @p dir/cheater caught: alone on the node it gets every task of a matmul
 * job and lies on each; quarantined at its first result, the job waits until an honest
 * worker (a key of its own) joins and finishes it. The cheater stays connected. */
static void catch_cheater(goblin_node *node, const char *url, const char *dir, wthread *cheat, wthread *honest) {
    char cdir[256];
    snprintf(cdir, sizeof cdir, "%s/cheater", dir);
    wthread_new(cheat, url, cdir, NULL);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, cheat->w, GOBLIN_MISBEHAVE_WRONG, 1.0,
                                     (uint64_t)7),
                 GOBLIN_OK);
    wthread_start(cheat);
    cr_assert(wait_until(node, connected_is, 1));
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F64, 96, 64, 11, true);
    rt_mat b = rt_mat_new(GOBLIN_DTYPE_F64, 64, 96, 12, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F64, 96, 96, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 8;
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_matmul(node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    for (int i = 0; i < 3000 && stats(node).workers_quarantined < 1; i++) sleep_ms(10);
    cr_assert_eq(stats(node).workers_quarantined, 1, "the lying worker is caught");
    wthread_new(honest, url, NULL, NULL);
    wthread_start(honest);
    cr_assert_eq(goblin_job_wait(job, 20000), GOBLIN_OK, "%s", goblin_job_error(job));
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0, "no lie got into C");
    goblin_job_free(job);
    free(a.data);
    free(b.data);
    free(c.data);
}

/* A worker with key directory @p cdir runs against @p url and must be refused: run
 * returns EAUTH (it returns only on a REFUSE, a stop, or a crash). */
static void expect_refused(const char *url, const char *cdir, const char *want_fp) {
    wthread t;
    wthread_new(&t, url, cdir, NULL);
    cr_assert_str_eq(goblin_worker_identity(t.w), want_fp, "the same key file, the same identity");
    wthread_start(&t);
    pthread_join(t.th, NULL);
    cr_assert_eq(t.rc, GOBLIN_EAUTH, "refused, got %s", goblin_err_name(t.rc));
    goblin_worker_stats ws;
    goblin_worker_stats_get(t.w, &ws);
    cr_assert_eq(ws.refused, 1);
    cr_assert_eq(ws.tasks_done, 0);
    goblin_worker_free(t.w);
}

/* ---- the key ---------------------------------------------------------------------- */

Test(identity, key_made_once_mode_0600_and_reloaded) {
    char dir[128], sub[200], key[256];
    temp_dir(dir);
    snprintf(sub, sizeof sub, "%s/a/b", dir); /* made, 0700 */
    snprintf(key, sizeof key, "%s/worker_key.pem", sub);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = "inproc://identity-unused";
    wp.n_connect = 1;
    wp.config_dir = sub;
    goblin_worker *w1 = NULL, *w2 = NULL, *w3 = NULL;
    cr_assert_eq(goblin_worker_new(&w1, &wp), GOBLIN_OK);
    struct stat st;
    cr_assert_eq(stat(key, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    cr_assert_eq(stat(sub, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700);
    char want[65];
    fingerprint_of_key_file(key, want);
    cr_assert_str_eq(goblin_worker_identity(w1), want);
    cr_assert_eq(goblin_worker_new(&w2, &wp), GOBLIN_OK);
    cr_assert_str_eq(goblin_worker_identity(w2), want, "loaded, not made again");
    /* Without a directory: a key per worker object, in memory. */
    wp.config_dir = NULL;
    cr_assert_eq(goblin_worker_new(&w3, &wp), GOBLIN_OK);
    cr_assert_eq(strlen(goblin_worker_identity(w3)), 64);
    cr_assert_str_neq(goblin_worker_identity(w3), want);
    goblin_worker_free(w1);
    goblin_worker_free(w2);
    goblin_worker_free(w3);
    /* A key file that is not a key: the worker is not made. */
    write_text(key, "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n");
    wp.config_dir = sub;
    goblin_worker *w4 = NULL;
    cr_assert_eq(goblin_worker_new(&w4, &wp), GOBLIN_EFORMAT);
    cr_assert_null(w4);
    rm_tree(dir);
}

Test(identity, proof_signs_and_verifies_and_binds_nonce_and_hello) {
    goblin__wkey *k = NULL, *other = NULL;
    cr_assert_eq(goblin__wkey_ephemeral(&k, NULL, 0), GOBLIN_OK);
    cr_assert_eq(goblin__wkey_ephemeral(&other, NULL, 0), GOBLIN_OK);
    uint8_t nonce[32], hh[32], d[32], d2[32], sig[GOBLIN__WKEY_SIG_MAX];
    for (int i = 0; i < 32; i++) nonce[i] = (uint8_t)i, hh[i] = (uint8_t)(255 - i);
    size_t sl;
    cr_assert_eq(goblin__wkey_proof_digest(nonce, hh, goblin__wkey_public(k), d), GOBLIN_OK);
    cr_assert_eq(goblin__wkey_sign(k, d, sig, &sl, NULL, 0), GOBLIN_OK);
    char msg[256];
    cr_assert_eq(goblin__wkey_verify(goblin__wkey_public(k), GOBLIN__WKEY_PUBLIC_BYTES, d, sig, sl, msg, sizeof msg),
                 GOBLIN_OK, "%s", msg);
    /* Another nonce, another HELLO, another key: the signature does not carry over. */
    nonce[0] ^= 1;
    cr_assert_eq(goblin__wkey_proof_digest(nonce, hh, goblin__wkey_public(k), d2), GOBLIN_OK);
    cr_assert_eq(goblin__wkey_verify(goblin__wkey_public(k), GOBLIN__WKEY_PUBLIC_BYTES, d2, sig, sl, NULL, 0),
                 GOBLIN_EAUTH);
    nonce[0] ^= 1;
    hh[5] ^= 1;
    cr_assert_eq(goblin__wkey_proof_digest(nonce, hh, goblin__wkey_public(k), d2), GOBLIN_OK);
    cr_assert_eq(goblin__wkey_verify(goblin__wkey_public(k), GOBLIN__WKEY_PUBLIC_BYTES, d2, sig, sl, NULL, 0),
                 GOBLIN_EAUTH);
    cr_assert_eq(goblin__wkey_verify(goblin__wkey_public(other), GOBLIN__WKEY_PUBLIC_BYTES, d, sig, sl, NULL, 0),
                 GOBLIN_EAUTH);
    /* Not a P-256 key of the canonical form. */
    uint8_t bad[GOBLIN__WKEY_PUBLIC_BYTES];
    memcpy(bad, goblin__wkey_public(k), sizeof bad);
    bad[20] ^= 1; /* the curve's OID */
    cr_assert_eq(goblin__wkey_verify(bad, sizeof bad, d, sig, sl, NULL, 0), GOBLIN_EFORMAT);
    cr_assert_eq(goblin__wkey_verify(goblin__wkey_public(k), 90, d, sig, sl, NULL, 0), GOBLIN_EFORMAT);
    /* The canonical form, but a point off the curve (its last coordinate byte changed:
     * y^2 = x^3 - 3x + b no longer holds), or a coordinate of all ones (not below p). */
    memcpy(bad, goblin__wkey_public(k), sizeof bad);
    bad[GOBLIN__WKEY_PUBLIC_BYTES - 1] ^= 1;
    cr_assert_eq(goblin__wkey_verify(bad, sizeof bad, d, sig, sl, NULL, 0), GOBLIN_EFORMAT);
    memcpy(bad, goblin__wkey_public(k), sizeof bad);
    memset(bad + GOBLIN__WKEY_PUBLIC_BYTES - 64, 0xff, 32);
    cr_assert_eq(goblin__wkey_verify(bad, sizeof bad, d, sig, sl, NULL, 0), GOBLIN_EFORMAT);
    /* A signature cut short, or with a byte of its DER changed, does not verify. */
    cr_assert_eq(goblin__wkey_verify(goblin__wkey_public(k), GOBLIN__WKEY_PUBLIC_BYTES, d, sig, sl - 1, NULL, 0),
                 GOBLIN_EAUTH);
    sig[sl / 2] ^= 0x40;
    cr_assert_eq(goblin__wkey_verify(goblin__wkey_public(k), GOBLIN__WKEY_PUBLIC_BYTES, d, sig, sl, NULL, 0),
                 GOBLIN_EAUTH);
    sig[sl / 2] ^= 0x40;
    /* The same proofs again (the verifier keeps its curve between calls): still judged alike. */
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(goblin__wkey_verify(goblin__wkey_public(k), GOBLIN__WKEY_PUBLIC_BYTES, d, sig, sl, NULL, 0),
                     GOBLIN_OK);
        cr_assert_eq(goblin__wkey_verify(goblin__wkey_public(other), GOBLIN__WKEY_PUBLIC_BYTES, d, sig, sl, NULL, 0),
                     GOBLIN_EAUTH);
    }
    goblin__wkey_free(k);
    goblin__wkey_free(other);
}

/* ---- (a) and (b): a caught worker stays caught ------------------------------------ */

Test(identity, cheater_reconnecting_with_its_key_is_refused) {
    char dir[128], cdir[200], qf[200], key[256], want[65];
    temp_dir(dir);
    snprintf(cdir, sizeof cdir, "%s/cheater", dir);
    snprintf(qf, sizeof qf, "%s/quarantine", dir);
    snprintf(key, sizeof key, "%s/worker_key.pem", cdir);
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    const char *url = "inproc://identity-reconnect";
    goblin_node *node = node_start(url, qf, NULL, NULL, &lg);
    wthread cheat, honest;
    catch_cheater(node, url, dir, &cheat, &honest);
    fingerprint_of_key_file(key, want);
    goblin_node_worker_stats ws;
    cr_assert_eq(goblin_node_worker_stats_get(node, 0, &ws), GOBLIN_OK);
    cr_assert(ws.quarantined);
    cr_assert_str_eq(ws.identity, want, "the node names the worker by its key");
    /* The cheater leaves and comes back with the same key file: a new session, the same
     * identity, refused. */
    wthread_end(&cheat);
    cr_assert(wait_until(node, connected_is, 1));
    int64_t refused = stats(node).workers_refused;
    expect_refused(url, cdir, want);
    goblin_node_stats st = stats(node);
    cr_assert_eq(st.workers_refused, refused + 1);
    cr_assert_eq(st.workers_quarantined, 1, "the refusal is not a second quarantine");
    char line[128];
    snprintf(line, sizeof line, "identity %s is quarantined", want);
    cr_assert(rt_log_has(&lg, line), "log says why");
    /* Still served: a job runs on the honest worker. */
    run_matmul(node, 40, 30, 20, 5);
    wthread_end(&honest);
    goblin_node_free(node);
    rm_tree(dir);
}

Test(identity, quarantine_survives_a_node_restart) {
    char dir[128], cdir[200], qf[200], key[256], want[65];
    temp_dir(dir);
    snprintf(cdir, sizeof cdir, "%s/cheater", dir);
    snprintf(qf, sizeof qf, "%s/state/quarantine", dir); /* its directory exists */
    char sdir[200];
    snprintf(sdir, sizeof sdir, "%s/state", dir);
    cr_assert_eq(mkdir(sdir, 0700), 0);
    snprintf(key, sizeof key, "%s/worker_key.pem", cdir);
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    const char *url = "inproc://identity-restart";
    goblin_node *node = node_start(url, qf, NULL, NULL, &lg);
    wthread cheat, honest;
    catch_cheater(node, url, dir, &cheat, &honest);
    wthread_end(&cheat);
    wthread_end(&honest);
    goblin_node_free(node);
    /* The state file: mode 0600, the cheater's fingerprint (computed here from its key file). */
    fingerprint_of_key_file(key, want);
    struct stat st;
    cr_assert_eq(stat(qf, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    FILE *f = fopen(qf, "r");
    cr_assert_not_null(f);
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cr_assert(strstr(buf, want) != NULL, "%s", buf);
    /* A new node on the same file refuses the cheater and admits another worker. */
    rt_log lg2 = {.mu = PTHREAD_MUTEX_INITIALIZER};
    node = node_start(url, qf, NULL, NULL, &lg2);
    expect_refused(url, cdir, want);
    cr_assert_eq(stats(node).workers_refused, 1);
    wthread other;
    wthread_new(&other, url, NULL, NULL);
    wthread_start(&other);
    cr_assert(wait_until(node, connected_is, 1));
    run_matmul(node, 24, 16, 24, 9);
    wthread_end(&other);
    goblin_node_free(node);
    rm_tree(dir);
}

/* ---- (c): one key or one owner is one party --------------------------------------- */

/* y = relu(x . w) over a batch of 64 rows in chunks of 8: 8 tasks. */
typedef struct small_job {
    goblin_graph *g;
    double x[64 * 4], w[4 * 3], y[64 * 3];
    goblin_tensor in[2], out[1];
} small_job;

static void small_job_init(small_job *s) {
    cr_assert_eq(goblin_graph_new(&s->g), GOBLIN_OK);
    int64_t sx[2] = {64, 4}, sw[2] = {4, 3}, sy[2] = {64, 3};
    int32_t x, w, mm, r;
    cr_assert_eq(goblin_graph_input(s->g, GOBLIN_DTYPE_F64, 2, sx, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(s->g, GOBLIN_DTYPE_F64, 2, sw, &w), GOBLIN_OK);
    int32_t i2[2] = {x, w};
    cr_assert_eq(goblin_graph_add(s->g, GOBLIN_OP_MATMUL, i2, 2, NULL, 0, &mm), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(s->g, GOBLIN_OP_RELU, &mm, 1, NULL, 0, &r), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(s->g, r), GOBLIN_OK);
    uint64_t seed = 3;
    for (int i = 0; i < 64 * 4; i++) s->x[i] = (double)(rt_rng(&seed) >> 11) * 0x1p-53 - 0.5;
    for (int i = 0; i < 12; i++) s->w[i] = (double)(rt_rng(&seed) >> 11) * 0x1p-53 - 0.5;
    goblin_tensor_init(&s->in[0], GOBLIN_DTYPE_F64, 2, sx, s->x);
    goblin_tensor_init(&s->in[1], GOBLIN_DTYPE_F64, 2, sw, s->w);
    goblin_tensor_init(&s->out[0], GOBLIN_DTYPE_F64, 2, sy, s->y);
}

/* Every task replicated; with only one party connected each is recomputed on the node. */
static void run_replicated_expect_node(goblin_node *node, small_job *s) {
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 8;
    jp.verify = GOBLIN_VERIFY_REPLICATE;
    jp.min_replication = 1.0;
    goblin_job *job = rt_run_graph(node, s->g, s->in, 2, s->out, 1, &jp);
    goblin_job_free(job);
    /* The reference: the same product in plain loops. */
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 3; j++) {
            double acc = 0;
            for (int q = 0; q < 4; q++) acc += s->x[i * 4 + q] * s->w[q * 3 + j];
            double want = acc > 0 ? acc : 0;
            cr_assert(fabs(s->y[i * 3 + j] - want) <= 1e-12, "y[%d,%d] = %g, want %g", i, j, s->y[i * 3 + j], want);
        }
    goblin_node_stats st = stats(node);
    cr_assert_eq(st.node_recomputed, 8, "every task decided on the node (got %lld)", (long long)st.node_recomputed);
    cr_assert_eq(st.replicas_agreed, 0, "no pair of one party counts as a replica");
    cr_assert_eq(st.results_rejected, 0);
}

Test(identity, two_workers_of_one_key_are_not_each_others_replica) {
    char dir[128];
    temp_dir(dir);
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    const char *url = "inproc://identity-one-key";
    goblin_node *node = node_start(url, NULL, NULL, NULL, &lg);
    wthread a, b;
    wthread_new(&a, url, dir, NULL);
    wthread_new(&b, url, dir, NULL);
    cr_assert_str_eq(goblin_worker_identity(a.w), goblin_worker_identity(b.w));
    wthread_start(&a);
    wthread_start(&b);
    cr_assert(wait_until(node, connected_is, 2));
    cr_assert_eq(stats(node).identities_tracked, 1);
    small_job s;
    small_job_init(&s);
    run_replicated_expect_node(node, &s);
    goblin_graph_free(s.g);
    wthread_end(&a);
    wthread_end(&b);
    goblin_node_free(node);
    rm_tree(dir);
}

Test(identity, two_identities_of_one_owner_are_one_party) {
    char dir[128], owners[200], text[512];
    temp_dir(dir);
    snprintf(owners, sizeof owners, "%s/owners", dir);
    const char *url = "inproc://identity-one-owner";
    wthread a, b, c;
    wthread_new(&a, url, NULL, NULL);
    wthread_new(&b, url, NULL, NULL);
    cr_assert_str_neq(goblin_worker_identity(a.w), goblin_worker_identity(b.w));
    snprintf(text, sizeof text, "# two processes of one person\n%s mallory\nsha256:%s   mallory # the second\n",
             goblin_worker_identity(a.w), goblin_worker_identity(b.w));
    write_text(owners, text);
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    goblin_node *node = node_start(url, NULL, NULL, owners, &lg);
    wthread_start(&a);
    wthread_start(&b);
    cr_assert(wait_until(node, connected_is, 2));
    goblin_node_worker_stats ws;
    cr_assert_eq(goblin_node_worker_stats_get(node, 1, &ws), GOBLIN_OK);
    cr_assert_str_eq(ws.owner, "mallory");
    small_job s;
    small_job_init(&s);
    run_replicated_expect_node(node, &s);
    /* A third worker of nobody known: now replicas agree (a control: the job above did not
     * recompute for some other reason). */
    wthread_new(&c, url, NULL, NULL);
    wthread_start(&c);
    cr_assert(wait_until(node, connected_is, 3));
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 8;
    jp.verify = GOBLIN_VERIFY_REPLICATE;
    jp.min_replication = 1.0;
    int64_t before = stats(node).replicas_agreed;
    goblin_job *job = rt_run_graph(node, s.g, s.in, 2, s.out, 1, &jp);
    goblin_job_free(job);
    cr_assert_gt(stats(node).replicas_agreed, before);
    goblin_graph_free(s.g);
    wthread_end(&a);
    wthread_end(&b);
    wthread_end(&c);
    goblin_node_free(node);
    rm_tree(dir);
}

/* ---- (d): forged proofs ------------------------------------------------------------ */

static nng_socket raw_dial(const char *url) {
    nng_socket s;
    cr_assert_eq(nng_pair1_open(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 10000);
    nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 600000);
    nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 600000);
    cr_assert_eq(nng_dial(s, url, NULL, 0), 0);
    return s;
}

static void expect_refuse(goblin__wire_msg *r, const char *text) {
    cr_assert_not_null(r, "an answer comes back");
    cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_REFUSE, "got %s", goblin__wire_type_name(r->type));
    cr_assert_eq(r->body.refuse.reason, GOBLIN_EAUTH);
    cr_assert(strstr(r->body.refuse.message, text) != NULL, "%s", r->body.refuse.message);
    goblin__wire_msg_free(r);
}

Test(identity, forged_proofs_are_refused_and_counted) {
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    const char *url = "inproc://identity-forged";
    goblin_node *node = node_start(url, NULL, NULL, NULL, &lg);
    goblin__wkey *mine = NULL, *victim = NULL;
    cr_assert_eq(goblin__wkey_ephemeral(&mine, NULL, 0), GOBLIN_OK);
    cr_assert_eq(goblin__wkey_ephemeral(&victim, NULL, 0), GOBLIN_OK);
    goblin__wire_msg hello = rt_raw_hello(1 << 24, false);
    /* 1: a signature with one bit changed. */
    nng_socket s = raw_dial(url);
    rt_proof_lie flip = {.flip_sig = true};
    expect_refuse(rt_raw_join(s, &hello, mine, &flip), "identity proof failed");
    nng_close(s);
    /* 2: someone else's public key, signed with our own private key. */
    s = raw_dial(url);
    rt_proof_lie steal = {.pub = goblin__wkey_public(victim)};
    expect_refuse(rt_raw_join(s, &hello, mine, &steal), "identity proof failed");
    nng_close(s);
    goblin_node_stats st = stats(node);
    cr_assert_eq(st.workers_refused, 2);
    cr_assert_eq(st.workers_connected, 0);
    cr_assert_eq(st.workers_seen, 0);
    cr_assert(rt_log_has(&lg, "refused worker on pipe"));
    char line[128];
    snprintf(line, sizeof line, "identity proof failed for %.16s", goblin__wkey_fingerprint(victim));
    cr_assert(rt_log_has(&lg, line), "the log names the identity claimed");
    /* 3: a PROOF without a CHALLENGE: dropped as a protocol violation. */
    s = raw_dial(url);
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_PROOF);
    uint8_t sig[8] = {1};
    m.body.proof.key = goblin__wkey_public(mine);
    m.body.proof.key_len = GOBLIN__WKEY_PUBLIC_BYTES;
    m.body.proof.sig = sig;
    m.body.proof.sig_len = sizeof sig;
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin__wire_encode(&m, &buf, &len), GOBLIN_OK);
    cr_assert_eq(nng_send(s, buf, len, 0), 0);
    goblin_buffer_free(buf);
    for (int i = 0; i < 3000 && stats(node).peers_dropped < 1; i++) sleep_ms(10);
    cr_assert_eq(stats(node).peers_dropped, 1);
    nng_close(s);
    /* 4: the honest proof of the same key joins. */
    s = raw_dial(url);
    goblin__wire_msg *r = rt_raw_join(s, &hello, mine, NULL);
    cr_assert_not_null(r);
    cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_HELLO_ACK);
    goblin__wire_msg_free(r);
    cr_assert(wait_until(node, connected_is, 1));
    goblin_node_worker_stats ws;
    cr_assert_eq(goblin_node_worker_stats_get(node, 0, &ws), GOBLIN_OK);
    cr_assert_str_eq(ws.identity, goblin__wkey_fingerprint(mine));
    nng_close(s);
    goblin__wkey_free(mine);
    goblin__wkey_free(victim);
    goblin_node_free(node);
}

Test(identity, allow_list_admits_only_listed_identities) {
    char dir[128], allow[200], text[256];
    temp_dir(dir);
    snprintf(allow, sizeof allow, "%s/allow", dir);
    goblin__wkey *in = NULL, *out = NULL;
    cr_assert_eq(goblin__wkey_ephemeral(&in, NULL, 0), GOBLIN_OK);
    cr_assert_eq(goblin__wkey_ephemeral(&out, NULL, 0), GOBLIN_OK);
    snprintf(text, sizeof text, "\n# admitted\n%s\n", goblin__wkey_fingerprint(in));
    write_text(allow, text);
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    const char *url = "inproc://identity-allow";
    goblin_node *node = node_start(url, NULL, allow, NULL, &lg);
    goblin__wire_msg hello = rt_raw_hello(1 << 24, false);
    nng_socket s = raw_dial(url);
    expect_refuse(rt_raw_join(s, &hello, out, NULL), "not on the allow list");
    nng_close(s);
    s = raw_dial(url);
    goblin__wire_msg *r = rt_raw_join(s, &hello, in, NULL);
    cr_assert_not_null(r);
    cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_HELLO_ACK);
    goblin__wire_msg_free(r);
    nng_close(s);
    cr_assert_eq(stats(node).workers_refused, 1);
    cr_assert_eq(stats(node).workers_seen, 1);
    goblin_node_free(node);
    /* A list with a line that is not a fingerprint: the node is not made. */
    write_text(allow, "not-a-fingerprint\n");
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.listen[0] = url;
    np.n_listen = 1;
    np.allow_identities_file = allow;
    np.log = rt_log_fn;
    np.log_user = &lg;
    goblin_node *bad = NULL;
    cr_assert_eq(goblin_node_new(&bad, &np), GOBLIN_EINVAL);
    cr_assert_null(bad);
    cr_assert(rt_log_has(&lg, "line 1: not a SHA-256 fingerprint"));
    np.allow_identities_file = NULL;
    np.owners_file = allow; /* "fingerprint owner" lines: an owner missing */
    write_text(allow, "0000000000000000000000000000000000000000000000000000000000000000\n");
    cr_assert_eq(goblin_node_new(&bad, &np), GOBLIN_EINVAL);
    goblin__wkey_free(in);
    goblin__wkey_free(out);
    rm_tree(dir);
}

/* ---- (e): the peer table stays bounded -------------------------------------------- */

Test(identity, thousand_connections_leave_the_peer_table_empty) {
    rt_log lg = {.mu = PTHREAD_MUTEX_INITIALIZER};
    const char *url = "inproc://identity-churn";
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.listen[0] = url;
    np.n_listen = 1;
    np.log_level = GOBLIN_LOG_WARN;
    np.log = rt_log_fn;
    np.log_user = &lg;
    goblin_node *node = NULL;
    cr_assert_eq(goblin_node_new(&node, &np), GOBLIN_OK);
    cr_assert_eq(goblin_node_start(node), GOBLIN_OK);
    goblin__wkey *key = NULL;
    cr_assert_eq(goblin__wkey_ephemeral(&key, NULL, 0), GOBLIN_OK);
    goblin__wire_msg hello = rt_raw_hello(1 << 24, false);
    for (int i = 0; i < 1000; i++) {
        nng_socket s = raw_dial(url);
        goblin__wire_msg *r = rt_raw_join(s, &hello, key, NULL);
        cr_assert_not_null(r, "cycle %d", i);
        cr_assert_eq(r->type, GOBLIN_WIRE_TYPE_HELLO_ACK, "cycle %d", i);
        goblin__wire_msg_free(r);
        nng_close(s);
    }
    cr_assert(wait_until(node, tracked_is, 0), "every entry freed (%lld left)", (long long)stats(node).peers_tracked);
    goblin_node_stats st = stats(node);
    cr_assert_eq(st.workers_seen, 1000);
    cr_assert_eq(st.workers_connected, 0);
    cr_assert_eq(st.identities_tracked, 1, "one key, one identity record");
    goblin_node_worker_stats ws;
    cr_assert_eq(goblin_node_worker_stats_get(node, 0, &ws), GOBLIN_EINDEX, "nothing of the gone peers is kept");
    /* The node still serves: a worker joins and computes. */
    wthread w;
    wthread_new(&w, url, NULL, NULL);
    wthread_start(&w);
    cr_assert(wait_until(node, connected_is, 1));
    cr_assert_eq(stats(node).peers_tracked, 1);
    run_matmul(node, 32, 16, 32, 21);
    wthread_end(&w);
    goblin__wkey_free(key);
    goblin_node_free(node);
}

/* ---- allocation failures ------------------------------------------------------------ */

/* A node reading all three identity files and a worker loading its key: any allocation
 * may fail; each fails with ENOMEM and frees what it had. */
static goblin_err alloc_scenario(const char *dir, const char *allow, const char *owners, const char *qf) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.listen[0] = "inproc://identity-alloc";
    np.n_listen = 1;
    np.allow_identities_file = allow;
    np.owners_file = owners;
    np.quarantine_file = qf;
    goblin_node *node = NULL;
    goblin_err e = goblin_node_new(&node, &np);
    if (e) return e;
    goblin_node_free(node);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = "inproc://identity-alloc";
    wp.n_connect = 1;
    wp.config_dir = dir;
    goblin_worker *w = NULL;
    if ((e = goblin_worker_new(&w, &wp))) return e;
    goblin_worker_free(w);
    return GOBLIN_OK;
}

Test(identity, allocation_failures_are_clean) {
    char dir[128], allow[200], owners[200], qf[200], text[1024];
    temp_dir(dir);
    snprintf(allow, sizeof allow, "%s/allow", dir);
    snprintf(owners, sizeof owners, "%s/owners", dir);
    snprintf(qf, sizeof qf, "%s/quarantine", dir);
    /* the key exists first: the scenario loads it */
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = "inproc://identity-alloc";
    wp.n_connect = 1;
    wp.config_dir = dir;
    goblin_worker *w = NULL;
    cr_assert_eq(goblin_worker_new(&w, &wp), GOBLIN_OK);
    goblin_worker_free(w);
    text[0] = 0;
    for (int i = 0; i < 12; i++) {
        char line[80];
        snprintf(line, sizeof line, "%08x%056d owner%d\n", i + 1, 0, i % 3); /* distinct leading bits */
        strcat(text, line);
    }
    write_text(owners, text);
    write_text(allow, "0000000000000000000000000000000000000000000000000000000000000001\n");
    write_text(qf, "0000000000000000000000000000000000000000000000000000000000000002\n");
    gt_alloc_on();
    int failures = 0;
    for (long n = 0; n < 10000; n++) {
        gt_alloc_fail_from(n);
        goblin_err e = alloc_scenario(dir, allow, owners, qf);
        cr_assert_eq(gt_allocs.live, 0, "allocation %ld failed: %ld blocks leaked", n, gt_allocs.live);
        if (e == GOBLIN_OK) break;
        cr_assert_eq(e, GOBLIN_ENOMEM, "allocation %ld failed: got %s", n, goblin_err_name(e));
        failures++;
    }
    gt_alloc_fail_from(-1);
    gt_alloc_off();
    cr_assert_gt(failures, 10, "the scenario allocates in many places (%d)", failures);
    rm_tree(dir);
}

/* ---- the worker port: large results in parts, nothing large before a proof ------------ */
Test(identity, large_results_in_parts_and_the_worker_port_budget, .timeout = 180) {
    char url[64];
    int port = hp_free_port();
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    goblin_node_params np;
    goblin_node_params_default(&np);
    goblin_worker_params wp[2];
    for (int i = 0; i < 2; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
        wp[i].memory_bytes = (uint64_t)1 << 30;
    }
    rt_grid g;
    rt_grid_start_joined(&g, url, &np, wp, 2);
    long rss0 = hp_rss_kib();
    /* 40 peers that announce 512 MiB messages on the worker port and start sending */
    int fds[40];
    for (int i = 0; i < 40; i++) fds[i] = hp_connect(port, HP_PAIR1, (uint64_t)512 << 20, (size_t)4 << 20);
    long rss1 = hp_rss_kib();
    cr_assert_lt(rss1 - rss0, 128 * 1024, "RSS grew by %ld KiB", rss1 - rss0);
    /* a peer that sends parts of 512 MiB messages before it proved who it is: they are
     * dropped unread, nothing is allocated, the node keeps serving */
    nng_socket s;
    cr_assert_eq(nng_pair1_open(&s), 0);
    cr_assert_eq(nng_dial(s, url, NULL, 0), 0);
    static uint8_t part[GOBLIN__PART_HEADER + (1 << 20)];
    for (int i = 0; i < 8; i++) {
        goblin__part_header(part, (uint64_t)1 << 29, (uint64_t)i << 20, 1 << 20);
        cr_assert_eq(nng_send(s, part, sizeof part, 0), 0);
    }
    goblin_node_stats st;
    for (int k = 0; k < 2000; k++) { /* let the node read them (their content is ignored) */
        goblin_node_stats_get(g.node, &st);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    long rss2 = hp_rss_kib();
    cr_assert_lt(rss2 - rss0, 128 * 1024, "RSS grew by %ld KiB", rss2 - rss0);
    cr_assert_eq(st.workers_connected, 2);
    nng_close(s);
    /* one task whose result (1200 x 1200 f64, 11.5 MB) travels in parts over tcp */
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F64, 1200, 64, 11, true);
    rt_mat b = rt_mat_new(GOBLIN_DTYPE_F64, 64, 1200, 12, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F64, 1200, 1200, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 1;
    jp.task_memory_bytes = (uint64_t)256 << 20;
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, -1), GOBLIN_OK, "%s", goblin_job_error(job));
    goblin_job_plan plan;
    cr_assert_eq(goblin_job_plan_info(job, &plan), GOBLIN_OK);
    cr_assert_gt((double)plan.tile_rows * (double)plan.tile_cols * 8, (double)(4 << 20),
                 "the test needs a result over one part");
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    goblin_job_free(job);
    free(a.data);
    free(b.data);
    free(c.data);
    for (int i = 0; i < 40; i++)
        if (fds[i] >= 0) close(fds[i]);
    rt_grid_stop(&g);
}
