/* tests/unit/test_tls.c - libgoblin/tls.c: identities, fingerprints, nng TLS
 * configurations (pinned and CA) over loopback, join tokens.
 *
 * Fingerprints are checked against openssl's (when installed) and against a
 * SHA-256 of the DER that mbedTLS parses here on its own; token hashes against
 * digests computed with sha256sum when the test was written. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>
#include <mbedtls/x509_crt.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include <goblin/goblin.h>
#include "net/tls_impl.h"

/* ---- helpers ---------------------------------------------------------------- */

static char tmp_root[64];

static void make_tmp(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/goblin-tls-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp_root));
}

static void rm_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rm_tree(sub);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static void cleanup_tmp(void) {
    if (tmp_root[0]) rm_tree(tmp_root);
}

static void sub_path(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", tmp_root, name);
}

static void init_identity(const char *name, goblin_tls_identity *id) {
    char dir[512];
    goblin_errbuf msg_eb = {0};
    sub_path(dir, sizeof dir, name);
    goblin_err e = goblin_tls_init_dir(dir, NULL, id, &msg_eb);
    cr_assert_eq(e, GOBLIN_OK, "init_dir: %s: %s", goblin_err_name(e), msg_eb.message);
}

static size_t read_all(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "open %s", path);
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return n;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* SHA-256 of the certificate's DER, parsed here independently of tls.c. */
static void independent_fingerprint(const char *cert_path, char hex[65]) {
    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    cr_assert_eq(mbedtls_x509_crt_parse_file(&crt, cert_path), 0);
    unsigned char d[32];
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    cr_assert_eq(mbedtls_sha256(crt.raw.p, crt.raw.len, d, 0), 0);
#else
    cr_assert_eq(mbedtls_sha256_ret(crt.raw.p, crt.raw.len, d, 0), 0);
#endif
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", d[i]);
    mbedtls_x509_crt_free(&crt);
}

static bool have_openssl(void) {
    return system("command -v openssl >/dev/null 2>&1") == 0;
}

/* openssl's "sha256 Fingerprint=AB:CD:..." as 64 lowercase hex digits. */
static bool openssl_fingerprint(const char *cert_path, char hex[65]) {
    char cmd[GOBLIN_TLS_PATH_MAX + 128], line[512];
    snprintf(cmd, sizeof cmd, "openssl x509 -noout -fingerprint -sha256 -in '%s'", cert_path);
    FILE *p = popen(cmd, "r");
    if (!p) return false;
    bool ok = fgets(line, sizeof line, p) != NULL;
    pclose(p);
    if (!ok) return false;
    char *eq = strchr(line, '=');
    if (!eq) return false;
    size_t k = 0;
    for (char *s = eq + 1; *s && k < 64; s++) {
        if (*s == ':' || *s == '\n') continue;
        hex[k++] = (char)(*s >= 'A' && *s <= 'F' ? *s - 'A' + 'a' : *s);
    }
    hex[k] = 0;
    return k == 64;
}

/* rep0 listener on tls+tcp://127.0.0.1:<free port> with the identity; returns port. */
static int start_listener(nng_socket *rep, nng_listener *l, const goblin_tls_identity *id) {
    char msg[512] = "";
    cr_assert_eq(nng_rep0_open(rep), 0);
    cr_assert_eq(nng_socket_set_ms(*rep, NNG_OPT_RECVTIMEO, 5000), 0);
    cr_assert_eq(nng_socket_set_ms(*rep, NNG_OPT_SENDTIMEO, 5000), 0);
    cr_assert_eq(nng_listener_create(l, *rep, "tls+tcp://127.0.0.1:0"), 0);
    goblin_err e = goblin__tls_listener_setup(*l, id->cert_path, id->key_path, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_OK, "listener setup: %s", msg);
    cr_assert_eq(nng_listener_start(*l, 0), 0);
    int port = 0;
    cr_assert_eq(nng_listener_get_int(*l, NNG_OPT_TCP_BOUND_PORT, &port), 0);
    cr_assert_gt(port, 0);
    return port;
}

/* One request/reply over a started dialer; checks the pipe was TLS-verified. */
static void exchange(nng_socket req, nng_socket rep) {
    cr_assert_eq(nng_send(req, "ping", 5, 0), 0);
    char *buf = NULL;
    size_t n = 0;
    cr_assert_eq(nng_recv(rep, &buf, &n, NNG_FLAG_ALLOC), 0);
    cr_assert_eq(n, 5);
    cr_assert_str_eq(buf, "ping");
    nng_free(buf, n);
    cr_assert_eq(nng_send(rep, "pong", 5, 0), 0);
    nng_msg *m = NULL;
    cr_assert_eq(nng_recvmsg(req, &m, 0), 0);
    cr_assert_eq(nng_msg_len(m), 5);
    cr_assert_str_eq((char *)nng_msg_body(m), "pong");
    bool verified = false;
    cr_assert_eq(nng_pipe_get_bool(nng_msg_get_pipe(m), NNG_OPT_TLS_VERIFIED, &verified), 0);
    cr_assert(verified, "the node's certificate was verified by nng on the real connection");
    nng_msg_free(m);
}

static int open_req(nng_socket *req) {
    int rv = nng_req0_open(req);
    if (rv == 0) rv = nng_socket_set_ms(*req, NNG_OPT_RECVTIMEO, 5000);
    if (rv == 0) rv = nng_socket_set_ms(*req, NNG_OPT_SENDTIMEO, 5000);
    return rv;
}

/* ---- identities --------------------------------------------------------------- */

TestSuite(tls, .init = make_tmp, .fini = cleanup_tmp, .timeout = 60);

Test(tls, init_dir_writes_a_loadable_identity) {
    char dir[512];
    goblin_errbuf msg_eb = {0};
    snprintf(dir, sizeof dir, "%s/a/b/node", tmp_root); /* parents are created too */
    goblin_tls_identity id;
    goblin_err e = goblin_tls_init_dir(dir, NULL, &id, &msg_eb);
    cr_assert_eq(e, GOBLIN_OK, "%s", msg_eb.message);
    cr_assert_eq(strlen(id.fingerprint), 64);

    struct stat st;
    cr_assert_eq(stat(id.key_path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "key mode %o", st.st_mode & 0777);
    cr_assert_eq(stat(id.cert_path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0644);
    cr_assert_eq(stat(dir, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700);

    /* mbedTLS loads both files on its own, and they belong together. */
    mbedtls_x509_crt crt;
    mbedtls_pk_context pk;
    mbedtls_x509_crt_init(&crt);
    mbedtls_pk_init(&pk);
    cr_assert_eq(mbedtls_x509_crt_parse_file(&crt, id.cert_path), 0);
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    mbedtls_entropy_context ent;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_entropy_init(&ent);
    mbedtls_ctr_drbg_init(&drbg);
    cr_assert_eq(mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &ent, NULL, 0), 0);
    cr_assert_eq(mbedtls_pk_parse_keyfile(&pk, id.key_path, NULL, mbedtls_ctr_drbg_random, &drbg), 0);
    cr_assert_eq(mbedtls_pk_check_pair(&crt.pk, &pk, mbedtls_ctr_drbg_random, &drbg), 0);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&ent);
#else
    cr_assert_eq(mbedtls_pk_parse_keyfile(&pk, id.key_path, NULL), 0);
    cr_assert_eq(mbedtls_pk_check_pair(&crt.pk, &pk), 0);
#endif
    cr_assert(mbedtls_pk_can_do(&pk, MBEDTLS_PK_ECKEY));
    cr_assert_eq(mbedtls_pk_get_bitlen(&pk), 256);

    char dn[256];
    cr_assert_gt(mbedtls_x509_dn_gets(dn, sizeof dn, &crt.subject), 0);
    cr_assert_str_eq(dn, "CN=goblin-node");
    cr_assert_gt(mbedtls_x509_dn_gets(dn, sizeof dn, &crt.issuer), 0);
    cr_assert_str_eq(dn, "CN=goblin-node");
    bool san_node = false, san_local = false;
    for (const mbedtls_x509_sequence *s = &crt.subject_alt_names; s && s->buf.p; s = s->next) {
        if (s->buf.len == 11 && !memcmp(s->buf.p, "goblin-node", 11)) san_node = true;
        if (s->buf.len == 9 && !memcmp(s->buf.p, "localhost", 9)) san_local = true;
    }
    cr_assert(san_node && san_local, "SAN has goblin-node and localhost");
    int years = crt.valid_to.year - crt.valid_from.year;
    cr_assert(years >= 9 && years <= 11, "validity %d years", years);
    cr_assert_eq(mbedtls_x509_time_is_past(&crt.valid_to), 0);
    cr_assert_eq(mbedtls_x509_time_is_future(&crt.valid_from), 0);
    mbedtls_pk_free(&pk);
    mbedtls_x509_crt_free(&crt);

    char hex[65];
    independent_fingerprint(id.cert_path, hex);
    cr_assert_str_eq(id.fingerprint, hex);
    if (have_openssl()) {
        char ossl[65];
        cr_assert(openssl_fingerprint(id.cert_path, ossl), "openssl printed a fingerprint");
        cr_assert_str_eq(id.fingerprint, ossl);
        char cmd[3 * GOBLIN_TLS_PATH_MAX + 200];
        snprintf(cmd, sizeof cmd,
                 "openssl verify -CAfile '%s' '%s' >/dev/null 2>&1 && "
                 "openssl pkey -in '%s' -noout >/dev/null 2>&1",
                 id.cert_path, id.cert_path, id.key_path);
        cr_assert_eq(system(cmd), 0, "openssl accepts the self-signed certificate and key");
    }

    char fp[GOBLIN_TLS_FINGERPRINT_SIZE];
    cr_assert_eq(goblin_tls_fingerprint_file(id.cert_path, fp, &msg_eb), GOBLIN_OK, "%s",
                 msg_eb.message);
    cr_assert_str_eq(fp, id.fingerprint);
    goblin_tls_identity again;
    cr_assert_eq(goblin_tls_identity_load(id.cert_path, id.key_path, &again, &msg_eb),
                 GOBLIN_OK, "%s", msg_eb.message);
    cr_assert_str_eq(again.fingerprint, id.fingerprint);
    cr_assert_str_eq(again.cert_path, id.cert_path);
}

Test(tls, extra_dns_names_and_bad_params) {
    char dir[512];
    goblin_errbuf msg_eb = {0};
    sub_path(dir, sizeof dir, "named");
    const char *names[] = {"node1.example.org"};
    goblin_tls_init_params p;
    goblin_tls_init_params_default(&p);
    cr_assert_eq(p.valid_days, 3650);
    cr_assert(!p.force);
    p.dns_names = names;
    p.n_dns_names = 1;
    p.valid_days = 30;
    goblin_tls_identity id;
    cr_assert_eq(goblin_tls_init_dir(dir, &p, &id, &msg_eb), GOBLIN_OK, "%s", msg_eb.message);
    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    cr_assert_eq(mbedtls_x509_crt_parse_file(&crt, id.cert_path), 0);
    int found = 0;
    for (const mbedtls_x509_sequence *s = &crt.subject_alt_names; s && s->buf.p; s = s->next)
        found += s->buf.len == 17 && !memcmp(s->buf.p, "node1.example.org", 17);
    cr_assert_eq(found, 1);
    cr_assert_leq(crt.valid_to.year - crt.valid_from.year, 1);
    mbedtls_x509_crt_free(&crt);

    const char *bad[] = {"bad name"};
    p.dns_names = bad;
    p.force = true;
    cr_assert_eq(goblin_tls_init_dir(dir, &p, &id, &msg_eb), GOBLIN_EINVAL);
    p.dns_names = names;
    p.valid_days = 0;
    cr_assert_eq(goblin_tls_init_dir(dir, &p, &id, &msg_eb), GOBLIN_EINVAL);
    cr_assert_eq(goblin_tls_init_dir(NULL, NULL, &id, &msg_eb), GOBLIN_EINVAL);
    cr_assert_eq(goblin_tls_init_dir(dir, NULL, NULL, &msg_eb), GOBLIN_EINVAL);
}

Test(tls, existing_files_are_not_overwritten) {
    char dir[512], cert0[4096], key0[4096], buf[4096];
    goblin_errbuf msg_eb = {0};
    sub_path(dir, sizeof dir, "node");
    goblin_tls_identity id, id2;
    init_identity("node", &id);
    read_all(id.cert_path, cert0, sizeof cert0);
    read_all(id.key_path, key0, sizeof key0);

    goblin_err e = goblin_tls_init_dir(dir, NULL, &id2, &msg_eb);
    cr_assert_eq(e, GOBLIN_EBUSY, "%s", goblin_err_name(e));
    cr_assert(strstr(msg_eb.message, "already exists"), "message: %s", msg_eb.message);
    read_all(id.cert_path, buf, sizeof buf);
    cr_assert_str_eq(buf, cert0);
    read_all(id.key_path, buf, sizeof buf);
    cr_assert_str_eq(buf, key0);

    /* One file alone also blocks, and the missing one is not created. */
    cr_assert_eq(unlink(id.key_path), 0);
    cr_assert_eq(goblin_tls_init_dir(dir, NULL, &id2, &msg_eb), GOBLIN_EBUSY);
    cr_assert(strstr(msg_eb.message, GOBLIN_TLS_CERT_FILE), "message names the file: %s", msg_eb.message);
    cr_assert_neq(access(id.key_path, F_OK), 0);

    goblin_tls_init_params p;
    goblin_tls_init_params_default(&p);
    p.force = true;
    cr_assert_eq(goblin_tls_init_dir(dir, &p, &id2, &msg_eb), GOBLIN_OK, "%s", msg_eb.message);
    cr_assert_str_neq(id2.fingerprint, id.fingerprint);
    read_all(id.cert_path, buf, sizeof buf);
    cr_assert_str_neq(buf, cert0);
    struct stat st;
    cr_assert_eq(stat(id2.key_path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    char hex[65];
    independent_fingerprint(id2.cert_path, hex);
    cr_assert_str_eq(id2.fingerprint, hex);
    /* No temporary files are left behind. */
    int entries = 0;
    DIR *d = opendir(dir);
    for (struct dirent *de; (de = readdir(d));) entries += de->d_name[0] != '.';
    closedir(d);
    cr_assert_eq(entries, 2);
}

Test(tls, identity_load_refuses_bad_pairs) {
    goblin_tls_identity a, b, out;
    char junk[512];
    goblin_errbuf msg_eb = {0};
    init_identity("a", &a);
    init_identity("b", &b);
    goblin_err e = goblin_tls_identity_load(a.cert_path, b.key_path, &out, &msg_eb);
    cr_assert_eq(e, GOBLIN_EAUTH, "%s: %s", goblin_err_name(e), msg_eb.message);
    cr_assert(strstr(msg_eb.message, "does not belong"), "%s", msg_eb.message);
    sub_path(junk, sizeof junk, "junk.pem");
    write_text(junk, "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n");
    cr_assert_eq(goblin_tls_identity_load(junk, a.key_path, &out, &msg_eb), GOBLIN_EFORMAT);
    cr_assert_eq(goblin_tls_fingerprint_file(junk, out.fingerprint, &msg_eb),
                 GOBLIN_EFORMAT);
    cr_assert_eq(goblin_tls_identity_load(a.cert_path, junk, &out, &msg_eb),
                 GOBLIN_EFORMAT);
    sub_path(junk, sizeof junk, "missing.pem");
    cr_assert_eq(goblin_tls_fingerprint_file(junk, out.fingerprint, &msg_eb), GOBLIN_EIO);
    cr_assert(strstr(msg_eb.message, "missing.pem"), "%s", msg_eb.message);
}

Test(tls, fingerprint_normalize) {
    char out[GOBLIN_TLS_FINGERPRINT_SIZE];
    const char *plain = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    cr_assert_eq(goblin_tls_fingerprint_normalize(plain, out), GOBLIN_OK);
    cr_assert_str_eq(out, plain);
    cr_assert_eq(goblin_tls_fingerprint_normalize(
                     " SHA256=00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:"
                     "00:11:22:33:44:55:66:77:88:99:Aa:bB:CC:DD:EE:FF\n",
                     out),
                 GOBLIN_OK);
    cr_assert_str_eq(out, plain);
    cr_assert_eq(goblin_tls_fingerprint_normalize("sha256:" "00112233445566778899AABBCCDDEEFF"
                                                  "00112233445566778899aabbccddeeff", out),
                 GOBLIN_OK);
    cr_assert_str_eq(out, plain);
    const char *bad[] = {
        "", "0011",
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeefg",  /* g */
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff00", /* 33 bytes */
        "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:"
        "DD:EE;FF", /* wrong separator */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(goblin_tls_fingerprint_normalize(bad[i], out), GOBLIN_EINVAL, "case %zu", i);
    cr_assert_eq(goblin_tls_fingerprint_normalize(NULL, out), GOBLIN_EINVAL);
}

/* ---- nng over TLS on loopback ----------------------------------------------------- */

Test(tls, pinned_fingerprint_exchange) {
    goblin_tls_identity id;
    init_identity("node", &id);
    nng_socket rep, req;
    nng_listener l;
    int port = start_listener(&rep, &l, &id);
    char url[64], msg[512] = "";
    snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", port);

    cr_assert_eq(open_req(&req), 0);
    nng_dialer d;
    cr_assert_eq(nng_dialer_create(&d, req, url), 0);
    /* The pin as openssl would print it: upper case with colons. */
    char colons[96];
    for (int i = 0; i < 32; i++)
        snprintf(colons + 3 * i, sizeof colons - 3 * (size_t)i, "%c%c%s",
                 id.fingerprint[2 * i] >= 'a' ? id.fingerprint[2 * i] - 32 : id.fingerprint[2 * i],
                 id.fingerprint[2 * i + 1] >= 'a' ? id.fingerprint[2 * i + 1] - 32
                                                  : id.fingerprint[2 * i + 1],
                 i < 31 ? ":" : "");
    goblin__tls_client_opts o = {.fingerprint = colons, .timeout_ms = 5000};
    goblin_err e = goblin__tls_dialer_setup(d, url, &o, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_OK, "%s: %s", goblin_err_name(e), msg);
    cr_assert_eq(nng_dialer_start(d, 0), 0);
    exchange(req, rep);
    nng_close(req);
    nng_close(rep);
}

Test(tls, wrong_fingerprint_is_refused) {
    goblin_tls_identity id, other;
    init_identity("node", &id);
    init_identity("other", &other);
    nng_socket rep;
    nng_listener l;
    int port = start_listener(&rep, &l, &id);
    char url[64], msg[512] = "";
    snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", port);
    nng_tls_config *c = NULL;
    goblin_err e = goblin__tls_client_config_pinned(url, other.fingerprint, 5000, &c, msg,
                                                    sizeof msg);
    cr_assert_eq(e, GOBLIN_EAUTH, "%s: %s", goblin_err_name(e), msg);
    cr_assert_null(c);
    cr_assert(strstr(msg, other.fingerprint), "names the pinned fingerprint: %s", msg);
    cr_assert(strstr(msg, id.fingerprint), "names the presented fingerprint: %s", msg);

    /* Through the dialer helper too, and the dialer is left without a config. */
    nng_socket req;
    nng_dialer d;
    cr_assert_eq(open_req(&req), 0);
    cr_assert_eq(nng_dialer_create(&d, req, url), 0);
    goblin__tls_client_opts o = {.fingerprint = other.fingerprint, .timeout_ms = 5000};
    cr_assert_eq(goblin__tls_dialer_setup(d, url, &o, msg, sizeof msg), GOBLIN_EAUTH);
    cr_assert_neq(nng_dialer_start(d, 0), 0, "a dialer without a config cannot connect");
    /* Bad pins and nobody listening. */
    cr_assert_eq(goblin__tls_client_config_pinned(url, "abcd", 5000, &c, msg, sizeof msg),
                 GOBLIN_EINVAL);
    nng_close(rep);
    e = goblin__tls_client_config_pinned(url, id.fingerprint, 2000, &c, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_ECONNREFUSED, "%s: %s", goblin_err_name(e), msg);
    cr_assert_eq(goblin__tls_client_config_pinned("tcp://127.0.0.1:1", id.fingerprint, 2000, &c,
                                                  msg, sizeof msg),
                 GOBLIN_EINVAL);
    nng_close(req);
}

/* The pin is enforced by nng's own handshake on every connection, not by the
 * probe: a configuration pinned to A cannot reach a listener serving B (as if the
 * node were swapped after the probe). */
Test(tls, pinned_config_refuses_another_node) {
    goblin_tls_identity a, b;
    init_identity("a", &a);
    init_identity("b", &b);
    char msg[512] = "";
    uint8_t der[4096];
    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    cr_assert_eq(mbedtls_x509_crt_parse_file(&crt, a.cert_path), 0);
    size_t n = crt.raw.len;
    memcpy(der, crt.raw.p, n);
    mbedtls_x509_crt_free(&crt);

    nng_tls_config *c = NULL;
    cr_assert_eq(goblin__tls_client_config_pinned_der(der, n, b.fingerprint, &c, msg, sizeof msg),
                 GOBLIN_EAUTH);
    cr_assert_eq(goblin__tls_client_config_pinned_der(der, n, a.fingerprint, &c, msg, sizeof msg),
                 GOBLIN_OK, "%s", msg);

    nng_socket rep, req;
    nng_listener l;
    int port = start_listener(&rep, &l, &b);
    char url[64];
    snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", port);
    nng_dialer d;
    cr_assert_eq(open_req(&req), 0);
    cr_assert_eq(nng_dialer_create(&d, req, url), 0);
    cr_assert_eq(nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, c), 0);
    nng_tls_config_free(c);
    int rv = nng_dialer_start(d, 0);
    cr_assert(rv == NNG_EPEERAUTH || rv == NNG_ECRYPTO, "dial: %s", nng_strerror(rv));
    nng_close(req);
    nng_close(rep);
}

Test(tls, ca_file_dialer) {
    goblin_tls_identity id, other;
    init_identity("node", &id);
    init_identity("other", &other);
    nng_socket rep, req;
    nng_listener l;
    int port = start_listener(&rep, &l, &id);
    char url[64], msg[512] = "";
    snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", port);

    /* The node's own certificate as the CA file: the server name comes from it. */
    cr_assert_eq(open_req(&req), 0);
    nng_dialer d;
    cr_assert_eq(nng_dialer_create(&d, req, url), 0);
    goblin__tls_client_opts o = {.ca_file = id.cert_path};
    goblin_err e = goblin__tls_dialer_setup(d, url, &o, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_OK, "%s: %s", goblin_err_name(e), msg);
    cr_assert_eq(nng_dialer_start(d, 0), 0);
    exchange(req, rep);
    nng_close(req);

    /* localhost is in the certificate: an explicit server name works too. */
    snprintf(url, sizeof url, "tls+tcp://localhost:%d", port);
    cr_assert_eq(open_req(&req), 0);
    cr_assert_eq(nng_dialer_create(&d, req, url), 0);
    o.server_name = "localhost";
    cr_assert_eq(goblin__tls_dialer_setup(d, url, &o, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    cr_assert_eq(nng_dialer_start(d, 0), 0);
    exchange(req, rep);
    nng_close(req);

    /* A name the certificate does not carry is refused by the handshake. */
    cr_assert_eq(open_req(&req), 0);
    cr_assert_eq(nng_dialer_create(&d, req, url), 0);
    o.server_name = "elsewhere.example.org";
    cr_assert_eq(goblin__tls_dialer_setup(d, url, &o, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    cr_assert_neq(nng_dialer_start(d, 0), 0);
    nng_close(req);

    /* Another node's certificate as the CA: refused. */
    snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", port);
    cr_assert_eq(open_req(&req), 0);
    cr_assert_eq(nng_dialer_create(&d, req, url), 0);
    goblin__tls_client_opts o2 = {.ca_file = other.cert_path};
    cr_assert_eq(goblin__tls_dialer_setup(d, url, &o2, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    int rv = nng_dialer_start(d, 0);
    cr_assert(rv == NNG_EPEERAUTH || rv == NNG_ECRYPTO, "dial: %s", nng_strerror(rv));
    nng_close(req);

    /* Exactly one of CA and fingerprint. */
    goblin__tls_client_opts both = {.ca_file = id.cert_path, .fingerprint = id.fingerprint};
    goblin__tls_client_opts none = {0};
    cr_assert_eq(goblin__tls_dialer_setup(d, url, &both, msg, sizeof msg), GOBLIN_EINVAL);
    cr_assert_eq(goblin__tls_dialer_setup(d, url, &none, msg, sizeof msg), GOBLIN_EINVAL);
    nng_close(rep);
}

Test(tls, listener_refuses_mismatched_key) {
    goblin_tls_identity a, b;
    init_identity("a", &a);
    init_identity("b", &b);
    nng_tls_config *c = NULL;
    char msg[512] = "";
    cr_assert_eq(goblin__tls_server_config(a.cert_path, b.key_path, &c, msg, sizeof msg),
                 GOBLIN_EAUTH);
    cr_assert_null(c);
    cr_assert_eq(goblin__tls_server_config(a.cert_path, a.key_path, &c, msg, sizeof msg),
                 GOBLIN_OK, "%s", msg);
    nng_tls_config_free(c);
}

/* ---- tokens ------------------------------------------------------------------------- */

/* Digests from `printf '%s' "$salt$token" | sha256sum`. */
#define TOKEN "correct horse battery staple"
#define TOKEN_SALT "a1b2c3d4"
#define TOKEN_HASH "6136087a0f3b371d6e19942349c5c0969f2d650fdf0139fe596e44f799a95ca8"
#define TOKEN2_HASH "55329ef9c6ba7560006db68e4e52010134f1e6d8533261e13b401feb7b606eb5" /* salty+tok */

Test(tls, token_hash_matches_sha256sum) {
    char hex[GOBLIN_TLS_FINGERPRINT_SIZE];
    cr_assert_eq(goblin_token_hash(TOKEN, TOKEN_SALT, hex), GOBLIN_OK);
    cr_assert_str_eq(hex, TOKEN_HASH);
    cr_assert_eq(goblin_token_hash("tok", "salty", hex), GOBLIN_OK);
    cr_assert_str_eq(hex, TOKEN2_HASH);
    cr_assert_eq(goblin_token_hash("", "salt", hex), GOBLIN_EINVAL);
    cr_assert_eq(goblin_token_hash("t", "", hex), GOBLIN_EINVAL);
    cr_assert_eq(goblin_token_hash("t", "sa:lt", hex), GOBLIN_EINVAL);
    cr_assert_eq(goblin_token_hash("t", "sa lt", hex), GOBLIN_EINVAL);
    char longtok[GOBLIN_TOKEN_MAX_BYTES + 2];
    memset(longtok, 'x', sizeof longtok - 1);
    longtok[sizeof longtok - 1] = 0;
    cr_assert_eq(goblin_token_hash(longtok, "s", hex), GOBLIN_EINVAL);
    longtok[GOBLIN_TOKEN_MAX_BYTES] = 0;
    cr_assert_eq(goblin_token_hash(longtok, "s", hex), GOBLIN_OK);
}

Test(tls, token_check_list) {
    goblin_errbuf msg_eb = {0};
    const char *list = "# join tokens\r\n"
                       "\n"
                       "salty:" TOKEN2_HASH "\r\n"
                       "  " TOKEN_SALT ":" TOKEN_HASH "  \n";
    cr_assert_eq(goblin_token_check_list(list, TOKEN, &msg_eb), GOBLIN_OK, "%s", msg_eb.message);
    cr_assert_eq(goblin_token_check_list(list, "tok", &msg_eb), GOBLIN_OK, "%s", msg_eb.message);
    const char *wrong[] = {"correct horse battery stapl", "correct horse battery staple ",
                           "Correct horse battery staple", "", "tok\n", TOKEN_HASH};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        msg_eb.message[0] = 0;
        cr_assert_eq(goblin_token_check_list(list, wrong[i], &msg_eb), GOBLIN_EAUTH,
                     "case %zu", i);
        cr_assert(!wrong[i][0] || !strstr(msg_eb.message, wrong[i]), "the token is not echoed: %s", msg_eb.message);
    }
    /* Upper-case hex in the file is accepted. */
    char upper[128];
    snprintf(upper, sizeof upper, "salty:%s\n", TOKEN2_HASH);
    for (char *s = upper + 6; *s; s++)
        if (*s >= 'a' && *s <= 'f') *s = (char)(*s - 32);
    cr_assert_eq(goblin_token_check_list(upper, "tok", &msg_eb), GOBLIN_OK, "%s", msg_eb.message);

    /* A pasted plain token is a malformed line: reported by number, never by text. */
    const char *pasted = "salty:" TOKEN2_HASH "\nmy-secret-token\n";
    cr_assert_eq(goblin_token_check_list(pasted, "tok", &msg_eb), GOBLIN_EFORMAT);
    cr_assert(strstr(msg_eb.message, "line 2"), "%s", msg_eb.message);
    cr_assert_null(strstr(msg_eb.message, "my-secret-token"), "%s", msg_eb.message);
    cr_assert_eq(goblin_token_check_list("salty:abcd\n", "tok", &msg_eb), GOBLIN_EFORMAT);
    cr_assert_eq(goblin_token_check_list(":" TOKEN2_HASH, "tok", &msg_eb),
                 GOBLIN_EFORMAT);
    cr_assert_eq(goblin_token_check_list("# nothing\n\n", "tok", &msg_eb),
                 GOBLIN_ENOTFOUND);
    cr_assert_eq(goblin_token_check_list(NULL, "tok", &msg_eb), GOBLIN_EINVAL);
}

Test(tls, token_entry_generate_and_file) {
    char tok[GOBLIN_TOKEN_SIZE], tok2[GOBLIN_TOKEN_SIZE], line[GOBLIN_TOKEN_ENTRY_SIZE];
    char line2[GOBLIN_TOKEN_ENTRY_SIZE], path[512];
    goblin_errbuf msg_eb = {0};
    cr_assert_eq(goblin_token_generate(tok), GOBLIN_OK);
    cr_assert_eq(goblin_token_generate(tok2), GOBLIN_OK);
    cr_assert_eq(strlen(tok), 64);
    cr_assert_eq(strspn(tok, "0123456789abcdef"), 64);
    cr_assert_str_neq(tok, tok2);
    cr_assert_eq(goblin_token_entry(tok, line), GOBLIN_OK);
    cr_assert_eq(goblin_token_entry(tok, line2), GOBLIN_OK);
    cr_assert_str_neq(line, line2, "fresh salt each time");
    cr_assert_null(strstr(line, tok), "the entry does not contain the token");
    /* The entry is salt:sha256(salt||token), checked against the hash function. */
    char *colon = strchr(line, ':');
    cr_assert_not_null(colon);
    *colon = 0;
    char hex[GOBLIN_TLS_FINGERPRINT_SIZE];
    cr_assert_eq(goblin_token_hash(tok, line, hex), GOBLIN_OK);
    cr_assert_str_eq(colon + 1, hex);
    *colon = ':';

    sub_path(path, sizeof path, "tokens");
    char text[512];
    snprintf(text, sizeof text, "%s\n%s\n", line, "salty:" TOKEN2_HASH);
    write_text(path, text);
    cr_assert_eq(goblin_token_check_file(path, tok, &msg_eb), GOBLIN_OK, "%s", msg_eb.message);
    cr_assert_eq(goblin_token_check_file(path, "tok", &msg_eb), GOBLIN_OK, "%s", msg_eb.message);
    cr_assert_eq(goblin_token_check_file(path, tok2, &msg_eb), GOBLIN_EAUTH);
    cr_assert_null(strstr(msg_eb.message, tok2));
    write_text(path, "plain-token\n");
    cr_assert_eq(goblin_token_check_file(path, "plain-token", &msg_eb), GOBLIN_EFORMAT);
    cr_assert(strstr(msg_eb.message, path), "names the file: %s", msg_eb.message);
    cr_assert_null(strstr(msg_eb.message, "plain-token"));
    sub_path(path, sizeof path, "no-such-file");
    cr_assert_eq(goblin_token_check_file(path, "tok", &msg_eb), GOBLIN_EIO);
}
