/* tests/unit/test_principal.c - researchers as principals, tried as an attacker would:
 * the credentials file, jobs that answer only to their owner, quotas, expiry of a gone
 * owner's jobs, file jobs that cannot leave their directories, open mode only on
 * loopback, and clients that fail fast with a clear reason. Every victim's job is
 * checked against values computed here by hand. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <goblin/goblin.h>
#include <math.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hostile_peer.h"
#include "proto/client_wire.h"

/* ---- helpers ------------------------------------------------------------------------ */

static void tmpdir(char *out, size_t cap, const char *tag) {
    snprintf(out, cap, "/tmp/goblin-principal-%s-%d-XXXXXX", tag, (int)getpid());
    cr_assert_not_null(mkdtemp(out));
}

static void sha256_hex(const void *a, size_t na, const void *b, size_t nb, char *hex) {
    uint8_t d[32];
    mbedtls_sha256_context c;
    mbedtls_sha256_init(&c);
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    mbedtls_sha256_starts(&c, 0);
    mbedtls_sha256_update(&c, a, na);
    mbedtls_sha256_update(&c, b, nb);
    mbedtls_sha256_finish(&c, d);
#else
    mbedtls_sha256_starts_ret(&c, 0);
    mbedtls_sha256_update_ret(&c, a, na);
    mbedtls_sha256_update_ret(&c, b, nb);
    mbedtls_sha256_finish_ret(&c, d);
#endif
    mbedtls_sha256_free(&c);
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", d[i]);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* A gateway over an embedded grid of two workers. */
typedef struct fixture {
    goblin_grid *grid;
    goblin_gateway *gw;
    char dir[128], creds[192], url[64];
    char alice[GOBLIN_CREDENTIAL_SIZE], bob[GOBLIN_CREDENTIAL_SIZE], admin[GOBLIN_CREDENTIAL_SIZE];
} fixture;

static void fx_start(fixture *f, void (*tune)(goblin_gateway_params *)) {
    memset(f, 0, sizeof *f);
    tmpdir(f->dir, sizeof f->dir, "fx");
    snprintf(f->creds, sizeof f->creds, "%s/researchers", f->dir);
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_principal_add(f->creds, "alice@lab.example", GOBLIN_ROLE_RESEARCHER, f->alice,
                                      NULL, &eb), GOBLIN_OK, "%s", eb.message);
    cr_assert_eq(goblin_principal_add(f->creds, "bob@lab.example", GOBLIN_ROLE_RESEARCHER, f->bob,
                                      NULL, &eb), GOBLIN_OK, "%s", eb.message);
    cr_assert_eq(goblin_principal_add(f->creds, "root@lab.example", GOBLIN_ROLE_ADMIN, f->admin, NULL,
                                      &eb), GOBLIN_OK, "%s", eb.message);
    cr_assert_eq(goblin_grid_local(2, NULL, &f->grid), GOBLIN_OK);
    snprintf(f->url, sizeof f->url, "tcp://127.0.0.1:%d", hp_free_port());
    goblin_gateway_params gp;
    goblin_gateway_params_default(&gp);
    gp.listen[0] = f->url;
    gp.n_listen = 1;
    gp.credentials_file = f->creds;
    if (tune) tune(&gp);
    cr_assert_eq(goblin_gateway_new(&f->gw, goblin_grid_node(f->grid), &gp), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_start(f->gw), GOBLIN_OK);
}

static void fx_stop(fixture *f) {
    goblin_gateway_free(f->gw);
    goblin_grid_free(f->grid);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    cr_assert_eq(system(cmd), 0);
}

static goblin_client *connect_as(const fixture *f, const char *cred) {
    goblin_client_params cp;
    goblin_client_params_default(&cp);
    cp.credential = cred;
    goblin_client *c = NULL;
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_client_connect(&c, f->url, &cp, &eb), GOBLIN_OK, "%s", eb.message);
    return c;
}

/* A [2 x 2] . B [2 x 1] with a product known by hand: (17, 39), scaled by @p s. */
typedef struct small_mm {
    double a[4], b[2];
    goblin_tensor ta, tb;
} small_mm;

static void small_mm_init(small_mm *m, double s) {
    double a[4] = {1 * s, 2 * s, 3 * s, 4 * s}, b[2] = {5, 6};
    memcpy(m->a, a, sizeof a);
    memcpy(m->b, b, sizeof b);
    goblin_tensor_init(&m->ta, GOBLIN_DTYPE_F64, 2, (int64_t[]){2, 2}, m->a);
    goblin_tensor_init(&m->tb, GOBLIN_DTYPE_F64, 2, (int64_t[]){2, 1}, m->b);
}

/* Fetch job @p id of @p c once it ended; checks C = (17 s, 39 s). */
static void fetch_and_check(goblin_client *c, const goblin_job_id *id, double s) {
    goblin_tensor out;
    goblin_err e;
    while ((e = goblin_client_fetch_result(c, id, &out)) == GOBLIN_EBUSY) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_eq(e, GOBLIN_OK, "%s", goblin_client_error(c));
    cr_assert_eq(((double *)out.data)[0], 17.0 * s);
    cr_assert_eq(((double *)out.data)[1], 39.0 * s);
    goblin_buffer_free(out.data);
}

static int bits_differ(const goblin_job_id *a, const goblin_job_id *b) {
    int n = 0;
    for (int i = 0; i < 16; i++) n += __builtin_popcount((unsigned)(a->bytes[i] ^ b->bytes[i]));
    return n;
}

/* ---- the credentials file ------------------------------------------------------------ */

Test(principal, credentials_file_add_list_revoke_check) {
    char dir[128], file[192];
    tmpdir(dir, sizeof dir, "file");
    snprintf(file, sizeof file, "%s/researchers", dir);
    goblin_errbuf eb = {0};
    char ca[GOBLIN_CREDENTIAL_SIZE], cb[GOBLIN_CREDENTIAL_SIZE], cx[GOBLIN_CREDENTIAL_SIZE];
    goblin_principal_info ia, ib, got;
    cr_assert_eq(goblin_principal_add(file, "Alice@Lab.example", GOBLIN_ROLE_RESEARCHER, ca, &ia, &eb),
                 GOBLIN_OK, "%s", eb.message);
    cr_assert_eq(goblin_principal_add(file, "bob@lab.example", GOBLIN_ROLE_ADMIN, cb, &ib, &eb),
                 GOBLIN_OK, "%s", eb.message);
    /* gbr1_<16 hex id>_<64 hex secret> */
    cr_assert_eq(strlen(ca), 86);
    cr_assert_eq(strncmp(ca, "gbr1_", 5), 0);
    cr_assert_eq(strncmp(ca + 5, ia.id, 16), 0);
    cr_assert_eq(ca[21], '_');
    cr_assert_str_neq(ia.id, ib.id);
    /* the file is private and holds no secret: only SHA-256(salt || secret) */
    struct stat st;
    cr_assert_eq(stat(file, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    const char *text = slurp(file);
    cr_assert_not_null(text);
    cr_assert_null(strstr(text, ca + 22), "the secret is in the file");
    char line_id[17], role[32], email[300], sh[200];
    const char *l = strstr(text, ia.id);
    cr_assert_not_null(l);
    cr_assert_eq(sscanf(l, "%16s %31s %299s %199s", line_id, role, email, sh), 4);
    cr_assert_str_eq(role, "researcher");
    cr_assert_str_eq(email, "Alice@Lab.example");
    char *colon = strchr(sh, ':');
    cr_assert_not_null(colon);
    *colon = 0;
    char want[65];
    sha256_hex(sh, strlen(sh), ca + 22, 64, want);
    cr_assert_str_eq(colon + 1, want, "the stored hash is not SHA-256(salt || secret)");
    /* check: the right one, then a changed secret, a changed id, garbage, empty */
    cr_assert_eq(goblin_principal_check(file, ca, &got, &eb), GOBLIN_OK, "%s", eb.message);
    cr_assert_str_eq(got.email, "Alice@Lab.example");
    cr_assert_eq(got.role, GOBLIN_ROLE_RESEARCHER);
    cr_assert_eq(goblin_principal_check(file, cb, &got, &eb), GOBLIN_OK);
    cr_assert_eq(got.role, GOBLIN_ROLE_ADMIN);
    strcpy(cx, ca);
    cx[85] = cx[85] == '0' ? '1' : '0';
    cr_assert_eq(goblin_principal_check(file, cx, NULL, &eb), GOBLIN_EAUTH);
    strcpy(cx, ca);
    memcpy(cx + 5, ib.id, 16); /* bob's id with alice's secret */
    cr_assert_eq(goblin_principal_check(file, cx, NULL, &eb), GOBLIN_EAUTH);
    cr_assert_eq(goblin_principal_check(file, "gbr1_zz", NULL, &eb), GOBLIN_EAUTH);
    cr_assert_eq(goblin_principal_check(file, "", NULL, &eb), GOBLIN_EAUTH);
    /* an email twice (case does not matter), bad emails and roles */
    cr_assert_eq(goblin_principal_add(file, "alice@lab.EXAMPLE", GOBLIN_ROLE_RESEARCHER, cx, NULL, &eb),
                 GOBLIN_EBUSY);
    const char *bad[] = {"", "a", "no-at-sign", "two@@at", "@lab", "lab@", "sp ace@lab", "tab\t@x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert_eq(goblin_principal_add(file, bad[i], GOBLIN_ROLE_RESEARCHER, cx, NULL, &eb),
                     GOBLIN_EINVAL, "%s", bad[i]);
    cr_assert_eq(goblin_principal_add(file, "c@d.e", (goblin_role)7, cx, NULL, &eb), GOBLIN_EINVAL);
    /* list, in file order */
    goblin_principal_info all[4];
    int32_t n = 0;
    cr_assert_eq(goblin_principal_list(file, all, 4, &n, &eb), GOBLIN_OK, "%s", eb.message);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(all[0].id, ia.id);
    cr_assert_str_eq(all[1].email, "bob@lab.example");
    /* revoke by email (any case) or by id; then the credential no longer works */
    cr_assert_eq(goblin_principal_revoke(file, "ALICE@lab.example", &eb), GOBLIN_OK, "%s", eb.message);
    cr_assert_eq(goblin_principal_check(file, ca, NULL, &eb), GOBLIN_EAUTH);
    cr_assert_eq(goblin_principal_check(file, cb, NULL, &eb), GOBLIN_OK);
    cr_assert_eq(goblin_principal_revoke(file, ia.id, &eb), GOBLIN_ENOTFOUND);
    cr_assert_eq(goblin_principal_revoke(file, ib.id, &eb), GOBLIN_OK);
    cr_assert_eq(goblin_principal_list(file, NULL, 0, &n, &eb), GOBLIN_OK);
    cr_assert_eq(n, 0);
    /* a malformed line is an error, not an empty or open file */
    FILE *fp = fopen(file, "a");
    fputs("0123456789abcdef researcher x@y.z not-a-hash\n", fp);
    fclose(fp);
    cr_assert_eq(goblin_principal_list(file, NULL, 0, &n, &eb), GOBLIN_EFORMAT);
    cr_assert(strstr(eb.message, "line"), "%s", eb.message);
    cr_assert_eq(goblin_principal_check(file, cb, NULL, &eb), GOBLIN_EFORMAT);
    /* a missing file has nobody */
    char missing[256];
    snprintf(missing, sizeof missing, "%s/none", dir);
    cr_assert_eq(goblin_principal_list(missing, NULL, 0, &n, &eb), GOBLIN_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(goblin_principal_check(missing, cb, NULL, &eb), GOBLIN_EAUTH);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* ---- jobs belong to their owner ---------------------------------------------------------- */

Test(principal, jobs_answer_only_to_their_owner, .timeout = 120) {
    fixture f;
    fx_start(&f, NULL);
    goblin_client *alice = connect_as(&f, f.alice), *bob = connect_as(&f, f.bob);
    small_mm mm;
    small_mm_init(&mm, 1);
    goblin_job_id ja, ja2;
    cr_assert_eq(goblin_client_submit_matmul(alice, &mm.ta, &mm.tb, &ja), GOBLIN_OK, "%s",
                 goblin_client_error(alice));
    cr_assert_eq(goblin_client_submit_matmul(alice, &mm.ta, &mm.tb, &ja2), GOBLIN_OK);
    /* ids are random, not a counter: two in a row differ in about half their bits */
    cr_assert_geq(bits_differ(&ja, &ja2), 20);
    /* bob tries every request on alice's job, and on an id nobody holds: the same answer */
    goblin_job_id nobody = ja;
    nobody.bytes[7] ^= 0x40;
    goblin_client_job_info info;
    for (int k = 0; k < 2; k++) {
        const goblin_job_id *id = k ? &nobody : &ja;
        cr_assert_eq(goblin_client_job_status(bob, id, &info), GOBLIN_ENOTFOUND);
        cr_assert(strstr(goblin_client_error(bob), "no job"), "%s", goblin_client_error(bob));
        cr_assert_eq(goblin_client_cancel(bob, id), GOBLIN_ENOTFOUND);
        goblin_tensor stolen = {0};
        cr_assert_eq(goblin_client_fetch_result(bob, id, &stolen), GOBLIN_ENOTFOUND);
        cr_assert_null(stolen.data);
    }
    /* the admin sees it */
    goblin_client *root = connect_as(&f, f.admin);
    cr_assert_eq(goblin_client_job_status(root, &ja2, &info), GOBLIN_OK, "%s", goblin_client_error(root));
    /* alice's jobs were neither canceled nor released: both complete, correctly */
    fetch_and_check(alice, &ja, 1);
    fetch_and_check(alice, &ja2, 1);
    /* fetched means released: gone for alice too */
    cr_assert_eq(goblin_client_job_status(alice, &ja, &info), GOBLIN_ENOTFOUND);
    goblin_client_free(root);
    goblin_client_free(bob);
    goblin_client_free(alice);
    fx_stop(&f);
}

/* Raw client-protocol requests, as a hostile peer sends them. */
static goblin_err raw_request(nng_socket s, uint8_t type, const goblin_job_id *id, const char *tok,
                              goblin__cw_msg *reply) {
    goblin__cw_msg *m = calloc(1, sizeof *m);
    m->type = type;
    m->request_id = 99;
    if (id) m->job_id = *id;
    if (tok) {
        m->token_len = (uint32_t)strlen(tok);
        memcpy(m->token, tok, m->token_len);
    }
    size_t sz, len;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz), GOBLIN_OK);
    uint8_t *buf = malloc(sz);
    goblin__cw_encode_into(m, buf, sz, &len);
    cr_assert_eq(nng_send(s, buf, len, 0), 0);
    free(buf);
    free(m);
    nng_msg *in;
    cr_assert_eq(nng_recvmsg(s, &in, 0), 0);
    goblin__cw_limits lim = {1 << 20, 1 << 20};
    char why[256];
    cr_assert_eq(goblin__cw_decode(nng_msg_body(in), nng_msg_len(in), &lim, reply, why, sizeof why),
                 GOBLIN_OK, "%s", why);
    nng_msg_free(in);
    return reply->type == GOBLIN__CW_ERROR ? (goblin_err)reply->code : GOBLIN_OK;
}

Test(principal, nobody_until_authenticated_and_revocation_is_immediate, .timeout = 120) {
    fixture f;
    fx_start(&f, NULL);
    /* a client without a credential is told at connect */
    goblin_client *c = NULL;
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_client_connect(&c, f.url, NULL, &eb), GOBLIN_EAUTH);
    cr_assert(strstr(eb.message, "requires a researcher credential"), "%s", eb.message);
    cr_assert_null(c);
    goblin_client_params cp;
    goblin_client_params_default(&cp);
    cp.credential = "gbr1_0000000000000000_0000000000000000000000000000000000000000000000000000000000000000";
    cr_assert_eq(goblin_client_connect(&c, f.url, &cp, &eb), GOBLIN_EAUTH);
    cr_assert(strstr(eb.message, "refused the credential"), "%s", eb.message);
    /* a raw peer: every request before AUTH is EAUTH, a good AUTH opens the connection,
     * a bad AUTH closes it again */
    nng_socket s;
    cr_assert_eq(nng_pair1_open(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 60000);
    cr_assert_eq(nng_dial(s, f.url, NULL, 0), 0);
    goblin__cw_msg *r = calloc(1, sizeof *r);
    goblin_job_id any = {{1, 2, 3}};
    uint8_t before[] = {GOBLIN__CW_STATS, GOBLIN__CW_STATUS, GOBLIN__CW_CANCEL, GOBLIN__CW_FETCH,
                        GOBLIN__CW_RELEASE};
    for (size_t i = 0; i < sizeof before; i++) {
        cr_assert_eq(raw_request(s, before[i], &any, NULL, r), GOBLIN_EAUTH, "type %u", before[i]);
        goblin__cw_msg_clear(r);
    }
    cr_assert_eq(raw_request(s, GOBLIN__CW_AUTH, NULL, f.bob, r), GOBLIN_OK);
    cr_assert_eq(raw_request(s, GOBLIN__CW_STATS, NULL, NULL, r), GOBLIN_OK);
    goblin__cw_msg_clear(r);
    cr_assert_eq(raw_request(s, GOBLIN__CW_AUTH, NULL, "gbr1_nonsense", r), GOBLIN_EAUTH);
    cr_assert_eq(raw_request(s, GOBLIN__CW_STATS, NULL, NULL, r), GOBLIN_EAUTH);
    nng_close(s);
    free(r);
    /* bob is connected and authenticated; the operator revokes him: his next request is
     * refused, alice is untouched */
    goblin_client *alice = connect_as(&f, f.alice), *bob = connect_as(&f, f.bob);
    goblin_node_stats ns;
    cr_assert_eq(goblin_client_stats(bob, &ns, NULL, 0, NULL), GOBLIN_OK);
    cr_assert_eq(goblin_principal_revoke(f.creds, "bob@lab.example", &eb), GOBLIN_OK, "%s", eb.message);
    cr_assert_eq(goblin_client_stats(bob, &ns, NULL, 0, NULL), GOBLIN_EAUTH);
    cr_assert(strstr(goblin_client_error(bob), "refused") || strstr(goblin_client_error(bob), "revoked"),
              "%s", goblin_client_error(bob));
    small_mm mm;
    small_mm_init(&mm, 2);
    goblin_job_id j;
    cr_assert_eq(goblin_client_submit_matmul(bob, &mm.ta, &mm.tb, &j), GOBLIN_EAUTH);
    cr_assert_eq(goblin_client_submit_matmul(alice, &mm.ta, &mm.tb, &j), GOBLIN_OK);
    fetch_and_check(alice, &j, 2);
    goblin_gateway_stats gs;
    goblin_gateway_stats_get(f.gw, &gs);
    cr_assert_geq(gs.auth_refused, 5 + 2 + 2);
    goblin_client_free(bob);
    goblin_client_free(alice);
    fx_stop(&f);
}

/* ---- quotas and expiry -------------------------------------------------------------------- */

static void tune_quota(goblin_gateway_params *gp) {
    gp->max_jobs_per_principal = 2;
    gp->max_bytes_per_principal = 4096;
}

Test(principal, per_researcher_quotas_leave_others_alone, .timeout = 120) {
    fixture f;
    fx_start(&f, tune_quota);
    goblin_client *alice = connect_as(&f, f.alice), *bob = connect_as(&f, f.bob);
    small_mm mm;
    small_mm_init(&mm, 1);
    goblin_job_id j[3], jb;
    cr_assert_eq(goblin_client_submit_matmul(alice, &mm.ta, &mm.tb, &j[0]), GOBLIN_OK);
    cr_assert_eq(goblin_client_submit_matmul(alice, &mm.ta, &mm.tb, &j[1]), GOBLIN_OK);
    cr_assert_eq(goblin_client_submit_matmul(alice, &mm.ta, &mm.tb, &j[2]), GOBLIN_EBUSY);
    cr_assert(strstr(goblin_client_error(alice), "you hold 2 jobs"), "%s", goblin_client_error(alice));
    /* bob is not held up by alice */
    cr_assert_eq(goblin_client_submit_matmul(bob, &mm.ta, &mm.tb, &jb), GOBLIN_OK,
                 "%s", goblin_client_error(bob));
    /* over the bytes one researcher may hold: 3 x 20 x 20 f64 */
    double *big = calloc(400, sizeof(double));
    goblin_tensor tbig;
    goblin_tensor_init(&tbig, GOBLIN_DTYPE_F64, 2, (int64_t[]){20, 20}, big);
    goblin_job_id jx;
    cr_assert_eq(goblin_client_submit_matmul(bob, &tbig, &tbig, &jx), GOBLIN_ELIMIT);
    cr_assert(strstr(goblin_client_error(bob), "bytes"), "%s", goblin_client_error(bob));
    free(big);
    /* fetching frees a slot */
    fetch_and_check(alice, &j[0], 1);
    cr_assert_eq(goblin_client_submit_matmul(alice, &mm.ta, &mm.tb, &j[2]), GOBLIN_OK);
    fetch_and_check(alice, &j[1], 1);
    fetch_and_check(alice, &j[2], 1);
    fetch_and_check(bob, &jb, 1);
    goblin_gateway_stats gs;
    goblin_gateway_stats_get(f.gw, &gs);
    cr_assert_eq(gs.quota_refused, 2);
    goblin_client_free(bob);
    goblin_client_free(alice);
    fx_stop(&f);
}

static void tune_rate(goblin_gateway_params *gp) { gp->max_submits_per_minute = 3; }

Test(principal, submits_per_minute, .timeout = 120) {
    fixture f;
    fx_start(&f, tune_rate);
    goblin_client *alice = connect_as(&f, f.alice);
    small_mm mm;
    small_mm_init(&mm, 1);
    goblin_job_id j[4];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(goblin_client_submit_matmul(alice, &mm.ta, &mm.tb, &j[i]), GOBLIN_OK);
    goblin_err e = goblin_client_submit_matmul(alice, &mm.ta, &mm.tb, &j[3]);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* The limit is per minute of wall time: only a machine stalled for most of a minute
     * between these submits could see a new minute begin (then nothing is asserted). */
    if (t1.tv_sec - t0.tv_sec < 50) {
        cr_assert_eq(e, GOBLIN_EBUSY, "%s", goblin_client_error(alice));
        cr_assert(strstr(goblin_client_error(alice), "in a minute"), "%s", goblin_client_error(alice));
    }
    for (int i = 0; i < 3; i++) fetch_and_check(alice, &j[i], 1);
    goblin_client_free(alice);
    fx_stop(&f);
}

static void tune_expire(goblin_gateway_params *gp) { gp->expire_ms = 50; }

Test(principal, unfetched_jobs_of_a_gone_owner_expire, .timeout = 120) {
    fixture f;
    fx_start(&f, tune_expire);
    goblin_client *alice = connect_as(&f, f.alice), *bob = connect_as(&f, f.bob);
    small_mm mm;
    small_mm_init(&mm, 3);
    goblin_job_id ja, jb;
    cr_assert_eq(goblin_client_submit_matmul(alice, &mm.ta, &mm.tb, &ja), GOBLIN_OK);
    cr_assert_eq(goblin_client_submit_matmul(bob, &mm.ta, &mm.tb, &jb), GOBLIN_OK);
    goblin_client_free(alice); /* alice leaves without fetching */
    goblin_gateway_stats gs;
    for (int k = 0; k < 60000; k++) { /* a generous deadline, not a timing assertion */
        goblin_gateway_stats_get(f.gw, &gs);
        if (gs.jobs_expired) break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_eq(gs.jobs_expired, 1);
    cr_assert_eq(gs.jobs_held, 1);
    /* bob is still connected: his job stays and completes */
    fetch_and_check(bob, &jb, 3);
    /* alice comes back: her job is gone */
    alice = connect_as(&f, f.alice);
    goblin_client_job_info info;
    cr_assert_eq(goblin_client_job_status(alice, &ja, &info), GOBLIN_ENOTFOUND);
    goblin_client_free(alice);
    goblin_client_free(bob);
    fx_stop(&f);
}

/* ---- file jobs stay in their directories ------------------------------------------------ */

static void write_npy(const char *path, int64_t r, int64_t c, const double *v) {
    goblin_npy *f;
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_npy_create(path, GOBLIN_DTYPE_F64, 2, (int64_t[]){r, c}, &f, &eb), GOBLIN_OK,
                 "%s", eb.message);
    memcpy(goblin_npy_tensor(f)->data, v, (size_t)(r * c) * sizeof(double));
    cr_assert_eq(goblin_npy_sync(f), GOBLIN_OK);
    goblin_npy_close(f);
}

static char g_data_dir[256];
static void tune_files(goblin_gateway_params *gp) {
    gp->data_dirs[0] = g_data_dir;
    gp->n_data_dirs = 1;
}

static goblin_err files_job(goblin_client *c, const char *a, const char *b, const char *out,
                            bool overwrite) {
    goblin_job_id id;
    goblin_err e = goblin_client_submit_matmul_files(c, a, b, out, overwrite, &id);
    if (e) return e;
    goblin_tensor none = {0};
    while ((e = goblin_client_fetch_result(c, &id, &none)) == GOBLIN_EBUSY) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_null(none.data);
    return e;
}

Test(principal, file_jobs_stay_in_their_directories, .timeout = 120) {
    char base[128], outside[300], p[600], q[600];
    tmpdir(base, sizeof base, "files");
    snprintf(g_data_dir, sizeof g_data_dir, "%s/data", base);
    snprintf(outside, sizeof outside, "%s/outside", base);
    cr_assert_eq(mkdir(g_data_dir, 0700), 0);
    cr_assert_eq(mkdir(outside, 0700), 0);
    snprintf(p, sizeof p, "%s/sub", g_data_dir);
    cr_assert_eq(mkdir(p, 0700), 0);
    double av[4] = {1, 2, 3, 4}, bv[2] = {5, 6};
    snprintf(p, sizeof p, "%s/a.npy", g_data_dir);
    write_npy(p, 2, 2, av);
    snprintf(p, sizeof p, "%s/b.npy", g_data_dir);
    write_npy(p, 2, 1, bv);
    snprintf(p, sizeof p, "%s/secret.npy", outside);
    write_npy(p, 2, 2, av);
    snprintf(p, sizeof p, "%s/victim.txt", outside);
    FILE *vf = fopen(p, "w");
    fputs("precious\n", vf);
    fclose(vf);
    /* links inside the data directory that point out of it */
    snprintf(p, sizeof p, "%s/secret.npy", outside);
    snprintf(q, sizeof q, "%s/link.npy", g_data_dir);
    cr_assert_eq(symlink(p, q), 0);
    snprintf(p, sizeof p, "%s/victim.txt", outside);
    snprintf(q, sizeof q, "%s/evil.npy", g_data_dir);
    cr_assert_eq(symlink(p, q), 0);
    snprintf(q, sizeof q, "%s/outlink", g_data_dir);
    cr_assert_eq(symlink(outside, q), 0);

    fixture f;
    fx_start(&f, tune_files);
    goblin_client *alice = connect_as(&f, f.alice);
    /* the honest job: relative paths start in the data directory; C is created */
    cr_assert_eq(files_job(alice, "a.npy", "b.npy", "c.npy", false), GOBLIN_OK, "%s",
                 goblin_client_error(alice));
    snprintf(p, sizeof p, "%s/c.npy", g_data_dir);
    goblin_npy *cf;
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_npy_open(p, false, &cf, &eb), GOBLIN_OK, "%s", eb.message);
    cr_assert_eq(((double *)goblin_npy_tensor(cf)->data)[0], 17.0);
    cr_assert_eq(((double *)goblin_npy_tensor(cf)->data)[1], 39.0);
    goblin_npy_close(cf);
    /* C exists: refused unless overwriting is asked for */
    cr_assert_eq(files_job(alice, "a.npy", "b.npy", "c.npy", false), GOBLIN_EBUSY);
    cr_assert_eq(files_job(alice, "a.npy", "b.npy", "c.npy", true), GOBLIN_OK, "%s",
                 goblin_client_error(alice));
    /* inputs outside, by absolute path, "..", a link, a linked directory, and one that does
     * not exist: one answer for all, which names nothing beyond the client's own text */
    char secret_abs[600], dotdot[600];
    snprintf(secret_abs, sizeof secret_abs, "%s/secret.npy", outside);
    snprintf(dotdot, sizeof dotdot, "%s/sub/../../outside/secret.npy", g_data_dir);
    const char *bad_inputs[] = {secret_abs, dotdot, "../outside/secret.npy", "link.npy",
                                "outlink/secret.npy", "missing.npy", "/etc/passwd"};
    for (size_t i = 0; i < sizeof bad_inputs / sizeof *bad_inputs; i++) {
        cr_assert_eq(files_job(alice, bad_inputs[i], "b.npy", "d.npy", false), GOBLIN_ENOTFOUND,
                     "%s", bad_inputs[i]);
        char want[700];
        snprintf(want, sizeof want, "node: A: no readable file %s in the node's data directories",
                 bad_inputs[i]);
        cr_assert_str_eq(goblin_client_error(alice), want);
    }
    /* outputs outside, or through a link to a file outside: refused, the file untouched */
    char out_abs[600];
    snprintf(out_abs, sizeof out_abs, "%s/stolen.npy", outside);
    const char *bad_outputs[] = {out_abs, "../outside/stolen.npy", "outlink/stolen.npy", "evil.npy",
                                 "sub/..", "nodir/x.npy"};
    for (size_t i = 0; i < sizeof bad_outputs / sizeof *bad_outputs; i++) {
        goblin_err e = files_job(alice, "a.npy", "b.npy", bad_outputs[i], true);
        cr_assert(e == GOBLIN_ENOTFOUND || e == GOBLIN_EINVAL, "%s: %s", bad_outputs[i],
                  goblin_err_name(e));
    }
    snprintf(p, sizeof p, "%s/victim.txt", outside);
    cr_assert_str_eq(slurp(p), "precious\n");
    snprintf(p, sizeof p, "%s/stolen.npy", outside);
    cr_assert_neq(access(p, F_OK), 0, "a file was created outside the data directory");
    goblin_client_free(alice);
    fx_stop(&f);

    /* a gateway that lists no data directory takes no file jobs */
    fx_start(&f, NULL);
    alice = connect_as(&f, f.alice);
    cr_assert_eq(files_job(alice, "a.npy", "b.npy", "x.npy", false), GOBLIN_ENOTSUP);
    goblin_client_free(alice);
    fx_stop(&f);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    cr_assert_eq(system(cmd), 0);
}

/* ---- who may listen how ------------------------------------------------------------------ */

Test(principal, loopback_is_parsed_not_prefixed) {
    const char *local[] = {"tcp://127.0.0.1:1", "tcp://127.255.0.9:80", "tcp://[::1]:5",
                           "tls+tcp://127.0.0.1:9", "ipc:///tmp/x", "inproc://grid", "tcp4://127.0.0.2:7"};
    const char *remote[] = {"tcp://127.0.0.1.evil.example:1", "tcp://localhost:1", "tcp://10.0.0.1:1",
                            "tcp://0.0.0.0:1", "tcp://127.0.0.1", "tcp://127.0.0.1:", "tcp://127.0.0.1:x",
                            "tcp://[::2]:1", "tcp://[::1]x:1", "tcp://128.0.0.1:1", "127.0.0.1:1", ""};
    for (size_t i = 0; i < sizeof local / sizeof *local; i++)
        cr_assert(goblin_url_is_local(local[i]), "%s", local[i]);
    for (size_t i = 0; i < sizeof remote / sizeof *remote; i++)
        cr_assert(!goblin_url_is_local(remote[i]), "%s", remote[i]);
    cr_assert(!goblin_url_is_local(NULL));
}

Test(principal, open_mode_only_on_loopback) {
    goblin_grid *grid;
    cr_assert_eq(goblin_grid_local(1, NULL, &grid), GOBLIN_OK);
    goblin_gateway_params gp;
    goblin_gateway *g = NULL;
    const char *not_local[] = {"tcp://0.0.0.0:27999", "tcp://127.0.0.1.evil.example:27999"};
    for (int i = 0; i < 2; i++) {
        goblin_gateway_params_default(&gp);
        gp.listen[0] = not_local[i];
        gp.n_listen = 1;
        gp.open = true;
        cr_assert_eq(goblin_gateway_new(&g, goblin_grid_node(grid), &gp), GOBLIN_EINVAL, "%s", not_local[i]);
    }
    /* neither mode, and both, are refused */
    goblin_gateway_params_default(&gp);
    gp.listen[0] = "tcp://127.0.0.1:27999";
    gp.n_listen = 1;
    cr_assert_eq(goblin_gateway_new(&g, goblin_grid_node(grid), &gp), GOBLIN_EINVAL);
    gp.open = true;
    gp.credentials_file = "/nonexistent/researchers";
    cr_assert_eq(goblin_gateway_new(&g, goblin_grid_node(grid), &gp), GOBLIN_EINVAL);
    /* open on loopback works without a credential */
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", hp_free_port());
    gp.listen[0] = url;
    gp.credentials_file = NULL;
    cr_assert_eq(goblin_gateway_new(&g, goblin_grid_node(grid), &gp), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_start(g), GOBLIN_OK);
    goblin_client *c = NULL;
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_client_connect(&c, url, NULL, &eb), GOBLIN_OK, "%s", eb.message);
    small_mm mm;
    small_mm_init(&mm, 5);
    goblin_job_id id;
    cr_assert_eq(goblin_client_submit_matmul(c, &mm.ta, &mm.tb, &id), GOBLIN_OK);
    fetch_and_check(c, &id, 5);
    goblin_client_free(c);
    goblin_gateway_free(g);
    goblin_grid_free(grid);
}

/* ---- clients fail fast and say why --------------------------------------------------------- */

typedef struct dying_node {
    nng_socket s;
    char url[64];
} dying_node;

/* A "node" that answers the client's first request (its connect probe), takes the
 * second and dies without answering. */
/* Take the client's connect probe (a STATS request) and answer it. */
static void answer_probe(dying_node *d) {
    nng_msg *in;
    cr_assert_eq(nng_recvmsg(d->s, &in, 0), 0);
    goblin__cw_msg *r = calloc(1, sizeof *r);
    r->type = GOBLIN__CW_STATS_REPLY;
    memcpy(&r->request_id, (uint8_t *)nng_msg_body(in) + 8, 8);
    nng_pipe from = nng_msg_get_pipe(in);
    nng_msg_free(in);
    size_t sz, len;
    cr_assert_eq(goblin__cw_encoded_size(r, &sz), GOBLIN_OK);
    nng_msg *out;
    cr_assert_eq(nng_msg_alloc(&out, sz), 0);
    goblin__cw_encode_into(r, nng_msg_body(out), sz, &len);
    nng_msg_set_pipe(out, from); /* a polyamorous socket answers the pipe it heard */
    cr_assert_eq(nng_sendmsg(d->s, out, 0), 0);
    free(r);
}

/* A fake node on a free loopback port (polyamorous pair1, as the node's socket), its
 * behaviour @p fn in a thread @p t. */
static void fake_node_start(dying_node *d, void *(*fn)(void *), pthread_t *t) {
    snprintf(d->url, sizeof d->url, "tcp://127.0.0.1:%d", hp_free_port());
    cr_assert_eq(nng_pair1_open_poly(&d->s), 0);
    cr_assert_eq(nng_listen(d->s, d->url, NULL, 0), 0);
    cr_assert_eq(pthread_create(t, NULL, fn, d), 0);
}

static void *dying_node_main(void *arg) {
    dying_node *d = arg;
    answer_probe(d);
    nng_msg *in;
    cr_assert_eq(nng_recvmsg(d->s, &in, 0), 0);
    nng_msg_free(in);
    nng_close(d->s);
    return NULL;
}

Test(principal, a_node_that_dies_is_reported_at_once, .timeout = 90) {
    dying_node d;
    pthread_t t;
    fake_node_start(&d, dying_node_main, &t);
    goblin_client_params cp;
    goblin_client_params_default(&cp);
    cp.timeout_ms = 3600000; /* an hour: only a closed connection can end the wait in time */
    goblin_client *c = NULL;
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_client_connect(&c, d.url, &cp, &eb), GOBLIN_OK, "%s", eb.message);
    goblin_node_stats ns;
    cr_assert_eq(goblin_client_stats(c, &ns, NULL, 0, NULL), GOBLIN_ECLOSED, "%s", goblin_client_error(c));
    cr_assert(strstr(goblin_client_error(c), "closed the connection"), "%s", goblin_client_error(c));
    cr_assert(strstr(goblin_client_error(c), d.url), "%s", goblin_client_error(c));
    pthread_join(t, NULL);
    goblin_client_free(c);
}

/* A "node" that answers the connect probe and then nothing, its connections open (a
 * stopped process, a hung machine). */
static void *hung_node_main(void *arg) {
    dying_node *d = arg;
    answer_probe(d);
    nng_msg *in;
    while (nng_recvmsg(d->s, &in, 0) == 0) nng_msg_free(in); /* never answered */
    return NULL;
}

Test(principal, a_node_that_stops_answering_is_noticed_by_heartbeats, .timeout = 90) {
    dying_node d;
    pthread_t t;
    fake_node_start(&d, hung_node_main, &t);
    goblin_client_params cp;
    goblin_client_params_default(&cp);
    cp.timeout_ms = 3600000; /* an hour: only the heartbeats can end the wait in time */
    cp.heartbeat_ms = 100;
    goblin_client *c = NULL;
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_client_connect(&c, d.url, &cp, &eb), GOBLIN_OK, "%s", eb.message);
    goblin_node_stats ns;
    cr_assert_eq(goblin_client_stats(c, &ns, NULL, 0, NULL), GOBLIN_ETIMEDOUT, "%s",
                 goblin_client_error(c));
    cr_assert(strstr(goblin_client_error(c), "is not answering"), "%s", goblin_client_error(c));
    goblin_client_free(c);
    nng_close(d.s);
    pthread_join(t, NULL);
}

/* ---- budgets before and after authentication --------------------------------------------- */
static void tune_budget(goblin_gateway_params *gp) {
    gp->max_unauthenticated = 16;
    gp->auth_timeout_ms = 300;
    gp->max_buffered_bytes = (uint64_t)64 << 20;
}

Test(principal, hostile_connections_stay_within_the_budget, .timeout = 180) {
    fixture f;
    fx_start(&f, tune_budget);
    int port = atoi(strrchr(f.url, ':') + 1);
    long rss0 = hp_rss_kib();
    cr_assert_gt(rss0, 0);
    /* 40 connections that announce 512 MiB messages and start sending them: nothing
     * over a part's size gets in */
    int fds[80];
    for (int i = 0; i < 40; i++) fds[i] = hp_connect(port, HP_PAIR1, (uint64_t)512 << 20, (size_t)4 << 20);
    /* 40 that connect and say nothing: 16 are let wait (then closed at auth_timeout_ms),
     * the rest refused at once */
    for (int i = 40; i < 80; i++) fds[i] = hp_connect(port, HP_PAIR1, 0, 0);
    goblin_gateway_stats gs;
    for (int k = 0; k < 60000; k++) { /* wait for the conditions, not for a time */
        goblin_gateway_stats_get(f.gw, &gs);
        if (gs.connections_refused >= 40) break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_geq(gs.connections_refused, 40);
    long rss1 = hp_rss_kib();
    cr_assert_lt(rss1 - rss0, 128 * 1024, "RSS grew by %ld KiB under 80 hostile connections",
                 rss1 - rss0);
    /* an authenticated peer announcing a request over the node's buffer budget is
     * refused before anything is allocated */
    nng_socket s;
    cr_assert_eq(nng_pair1_open(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 60000);
    cr_assert_eq(nng_dial(s, f.url, NULL, 0), 0);
    goblin__cw_msg *r = calloc(1, sizeof *r);
    cr_assert_eq(raw_request(s, GOBLIN__CW_AUTH, NULL, f.bob, r), GOBLIN_OK);
    goblin__cw_msg *part = calloc(1, sizeof *part);
    static uint8_t bytes[4096];
    part->type = GOBLIN__CW_PART;
    part->request_id = 5;
    part->part_total = (uint64_t)6 << 30;
    part->part_len = sizeof bytes;
    part->part_data = bytes;
    size_t sz, len;
    cr_assert_eq(goblin__cw_encoded_size(part, &sz), GOBLIN_OK);
    uint8_t *buf = malloc(sz);
    goblin__cw_encode_into(part, buf, sz, &len);
    cr_assert_eq(nng_send(s, buf, len, 0), 0);
    nng_msg *in;
    cr_assert_eq(nng_recvmsg(s, &in, 0), 0);
    goblin__cw_limits lim = {1 << 20, 1 << 20};
    char why[256];
    cr_assert_eq(goblin__cw_decode(nng_msg_body(in), nng_msg_len(in), &lim, r, why, sizeof why), GOBLIN_OK);
    nng_msg_free(in);
    cr_assert_eq(r->type, GOBLIN__CW_ERROR);
    cr_assert(r->code == GOBLIN_EBUSY || r->code == GOBLIN_ELIMIT, "%d: %s", r->code, r->text);
    /* a part that does not continue the request it claims to be is refused too */
    part->part_total = 8192;
    part->part_offset = 4096;
    goblin__cw_encode_into(part, buf, sz, &len);
    cr_assert_eq(nng_send(s, buf, len, 0), 0);
    cr_assert_eq(nng_recvmsg(s, &in, 0), 0);
    cr_assert_eq(goblin__cw_decode(nng_msg_body(in), nng_msg_len(in), &lim, r, why, sizeof why), GOBLIN_OK);
    nng_msg_free(in);
    cr_assert_eq(r->code, GOBLIN_EFORMAT, "%s", r->text);
    free(buf);
    free(part);
    free(r);
    nng_close(s);
    /* meanwhile an honest researcher's large job (requests of 2.9 MB, sent in parts) runs,
     * checked against a product computed here */
    enum { N = 600 };
    double *a = malloc(sizeof(double) * N * N), *b = malloc(sizeof(double) * N * N);
    uint64_t st = 12345;
    for (int i = 0; i < N * N; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (double)(st >> 40) / (double)(1 << 24) - 0.5;
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (double)(st >> 40) / (double)(1 << 24) - 0.5;
    }
    goblin_tensor ta, tb, out;
    goblin_tensor_init(&ta, GOBLIN_DTYPE_F64, 2, (int64_t[]){N, N}, a);
    goblin_tensor_init(&tb, GOBLIN_DTYPE_F64, 2, (int64_t[]){N, N}, b);
    goblin_client *alice = connect_as(&f, f.alice);
    cr_assert_eq(goblin_client_matmul(alice, &ta, &tb, &out, NULL, NULL), GOBLIN_OK, "%s",
                 goblin_client_error(alice));
    const double *c = out.data;
    for (int i = 0; i < N; i += 37)
        for (int j = 0; j < N; j += 41) {
            double ref = 0, mag = 0;
            for (int k = 0; k < N; k++) {
                ref += a[i * N + k] * b[k * N + j];
                mag += fabs(a[i * N + k] * b[k * N + j]);
            }
            cr_assert_leq(fabs(c[i * N + j] - ref), 2 * N * 0x1p-53 * mag + 1e-300,
                          "C[%d][%d] = %.17g, want %.17g", i, j, c[i * N + j], ref);
        }
    goblin_buffer_free(out.data);
    free(a);
    free(b);
    goblin_client_free(alice);
    for (int i = 0; i < 80; i++)
        if (fds[i] >= 0) close(fds[i]);
    fx_stop(&f);
}
