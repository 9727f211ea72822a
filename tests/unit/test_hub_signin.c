/* tests/unit/test_hub_signin.c - email sign-in, sessions, form tokens, access requests
 * and node keys of a real hub directory, attacked: forged, expired and reused codes
 * and links, brute force into the limits, a code used as a link, a session cookie of
 * someone else's shape, keys of an unapproved researcher, revoked and tampered keys.
 * The digests the store keeps are recomputed here with mbedTLS's HMAC from the secret
 * file, and the database file is searched for every secret the hub handed out. The
 * mail itself is tested with a real SMTP server in tests/python/test_hub_web.py; here
 * the sign-in is issued without it (goblin__hub_signin_issue) and a decision's mail goes
 * to a port where nothing listens. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <goblin/hub.h>
#include <mbedtls/md.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hub/hub_impl.h"
#include "hub_util.h"

static char dir[256];
static goblin_hub *hub;

/* A TCP port on loopback where nothing listens (bound, then closed). */
static int dead_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void write_conf(const char *extra) {
    char path[400], conf[2048];
    snprintf(path, sizeof path, "%s/hub.conf", dir);
    snprintf(conf, sizeof conf,
             "listen = https://127.0.0.1:0\nsmtp_url = smtp://127.0.0.1:%d\nadmin = Op@Example.org\n%s",
             dead_port(), extra ? extra : "");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(conf, f);
    fclose(f);
}

static void open_hub(const char *extra) {
    snprintf(dir, sizeof dir, "/tmp/goblin-hubsignin-%d-XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(dir));
    goblin_errbuf err;
    char fp[65];
    cr_assert_eq(goblin_hub_init_dir(dir, "op@example.org", NULL, fp, &err), GOBLIN_OK, "%s", err.message);
    cr_assert_eq(strlen(fp), 64);
    write_conf(extra);
    cr_assert_eq(goblin_hub_open(dir, &hub, &err), GOBLIN_OK, "%s", err.message);
}

static void teardown(void) {
    goblin_hub_free(hub);
    hub = NULL;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static void setup(void) { open_hub(NULL); }

TestSuite(hub_signin, .init = setup, .fini = teardown);

static const int64_t T0 = 1700000000;

static void issue(const char *email, int64_t now, char *code, char *token) {
    goblin_err e = goblin__hub_signin_issue(hub, email, "10.0.0.1", now, code, token);
    cr_assert_eq(e, GOBLIN_OK, "%s", goblin_hub_error(hub));
}

static goblin_err finish(const char *email, const char *secret, bool link, int64_t now, char *cookie) {
    return goblin_hub_signin_finish(hub, email, secret, link, "10.0.0.1", now, cookie, NULL);
}

Test(hub_signin, code_works_once) {
    char code[GOBLIN_HUB_CODE_SIZE], token[GOBLIN_HUB_TOKEN_SIZE], cookie[GOBLIN_HUB_TOKEN_SIZE];
    issue("ada@example.org", T0, code, token);
    cr_assert_eq(strlen(code), 8);
    cr_assert_eq(strspn(code, "0123456789"), 8);
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_signin_finish(hub, "ADA@example.org", code, false, "x", T0 + 10, cookie, &a), GOBLIN_OK,
                 "%s", goblin_hub_error(hub));
    cr_assert_str_eq(a.email, "ada@example.org");
    cr_assert_eq(finish("ada@example.org", code, false, T0 + 11, cookie), GOBLIN_EAUTH, "a code is single-use");
    cr_assert_eq(finish("ada@example.org", token, true, T0 + 11, cookie), GOBLIN_EAUTH,
                 "the link of a used sign-in is used too");
}

Test(hub_signin, link_works_once_and_is_not_a_code) {
    char code[GOBLIN_HUB_CODE_SIZE], token[GOBLIN_HUB_TOKEN_SIZE], cookie[GOBLIN_HUB_TOKEN_SIZE];
    issue("bo@example.org", T0, code, token);
    cr_assert_eq(finish("bo@example.org", token, false, T0 + 1, cookie), GOBLIN_EAUTH, "a token is not a code");
    cr_assert_eq(finish("bo@example.org", code, true, T0 + 1, cookie), GOBLIN_EAUTH, "a code is not a token");
    cr_assert_eq(finish("bo@example.org", token, true, T0 + 2, cookie), GOBLIN_OK, "%s", goblin_hub_error(hub));
    cr_assert_eq(finish("bo@example.org", token, true, T0 + 3, cookie), GOBLIN_EAUTH);
}

Test(hub_signin, expired_and_forged_refused_alike) {
    char code[GOBLIN_HUB_CODE_SIZE], token[GOBLIN_HUB_TOKEN_SIZE], cookie[GOBLIN_HUB_TOKEN_SIZE];
    char other_code[GOBLIN_HUB_CODE_SIZE], other_token[GOBLIN_HUB_TOKEN_SIZE];
    issue("cy@example.org", T0, code, token);
    issue("dee@example.org", T0, other_code, other_token);
    /* Someone else's code and link, for this address. */
    cr_assert_eq(finish("cy@example.org", other_token, true, T0 + 1, cookie), GOBLIN_EAUTH);
    char msg1[512];
    snprintf(msg1, sizeof msg1, "%s", goblin_hub_error(hub));
    if (strcmp(other_code, code)) cr_assert_eq(finish("cy@example.org", other_code, false, T0 + 1, cookie), GOBLIN_EAUTH);
    /* Past its 900 s, the right code too; and the messages do not tell them apart. */
    cr_assert_eq(finish("cy@example.org", code, false, T0 + 900, cookie), GOBLIN_EAUTH);
    cr_assert_str_eq(goblin_hub_error(hub), msg1);
    cr_assert_eq(finish("cy@example.org", "", false, T0 + 1, cookie), GOBLIN_EAUTH);
    cr_assert_eq(finish("nobody@example.org", code, false, T0 + 1, cookie), GOBLIN_EAUTH);
    cr_assert_str_eq(goblin_hub_error(hub), msg1);
    cr_assert_eq(finish("dee@example.org", other_code, false, T0 + 899, cookie), GOBLIN_OK);
}

/* The wrong code nearest to @p code (differs in the last digit). */
static void wrong(const char *code, char *out) {
    strcpy(out, code);
    out[7] = out[7] == '9' ? '0' : (char)(out[7] + 1);
}

Test(hub_signin, brute_force_kills_the_code_then_hits_the_limit) {
    char code[GOBLIN_HUB_CODE_SIZE], token[GOBLIN_HUB_TOKEN_SIZE], cookie[GOBLIN_HUB_TOKEN_SIZE], bad[9];
    issue("eve@example.org", T0, code, token);
    wrong(code, bad);
    for (int i = 0; i < 5; i++) cr_assert_eq(finish("eve@example.org", bad, false, T0 + i, cookie), GOBLIN_EAUTH);
    /* failures_per_code = 5: the right code is dead now. */
    cr_assert_eq(finish("eve@example.org", code, false, T0 + 6, cookie), GOBLIN_EAUTH);
    /* Five more wrong codes against a fresh sign-in reach failures_per_address = 10. */
    issue("eve@example.org", T0 + 7, code, token);
    wrong(code, bad);
    for (int i = 0; i < 4; i++) cr_assert_eq(finish("eve@example.org", bad, false, T0 + 8, cookie), GOBLIN_EAUTH);
    cr_assert_eq(finish("eve@example.org", code, false, T0 + 9, cookie), GOBLIN_ELIMIT,
                 "the 11th try is refused before it is checked");
    cr_assert(strstr(goblin_hub_error(hub), "too many"), "%s", goblin_hub_error(hub));
    /* After the window the right, live code works. */
    cr_assert_eq(finish("eve@example.org", code, false, T0 + 9 + 900, cookie), GOBLIN_EAUTH, "but it expired");
    issue("eve@example.org", T0 + 2000, code, token);
    cr_assert_eq(finish("eve@example.org", code, false, T0 + 2001, cookie), GOBLIN_OK, "%s", goblin_hub_error(hub));
}

Test(hub_signin, one_client_guessing_many_addresses_hits_its_limit) {
    char cookie[GOBLIN_HUB_TOKEN_SIZE], addr[64];
    int refused = 0;
    for (int i = 0; i < 25; i++) {
        snprintf(addr, sizeof addr, "victim%d@example.org", i);
        goblin_err e = goblin_hub_signin_finish(hub, addr, "12345678", false, "203.0.113.9", T0, cookie, NULL);
        if (i < 20) cr_assert_eq(e, GOBLIN_EAUTH);
        else refused += e == GOBLIN_ELIMIT;
    }
    cr_assert_eq(refused, 5, "failures_per_client = 20");
    /* Another client is not affected. */
    char code[GOBLIN_HUB_CODE_SIZE], token[GOBLIN_HUB_TOKEN_SIZE];
    issue("victim1@example.org", T0, code, token);
    cr_assert_eq(goblin_hub_signin_finish(hub, "victim1@example.org", code, false, "198.51.100.1", T0, cookie, NULL),
                 GOBLIN_OK);
}

Test(hub_signin, starting_is_limited_per_address_and_per_client) {
    char code[GOBLIN_HUB_CODE_SIZE], token[GOBLIN_HUB_TOKEN_SIZE];
    for (int i = 0; i < 3; i++) issue("flo@example.org", T0 + i, code, token);
    cr_assert_eq(goblin__hub_signin_issue(hub, "flo@example.org", "10.0.0.2", T0 + 3, code, token), GOBLIN_ELIMIT);
    /* codes_per_client = 10 from one client over many addresses */
    char addr[64];
    int limited = 0;
    for (int i = 0; i < 12; i++) {
        snprintf(addr, sizeof addr, "u%d@example.org", i);
        limited += goblin__hub_signin_issue(hub, addr, "192.0.2.7", T0, code, token) == GOBLIN_ELIMIT;
    }
    cr_assert_eq(limited, 2);
    /* The window slides: once the first three are 900 s old the address may ask again. */
    issue("flo@example.org", T0 + 903, code, token);
    /* Through the public call: a bad address is refused before anything is stored. */
    cr_assert_eq(goblin_hub_signin_start(hub, "not an address", "c", T0), GOBLIN_EINVAL);
    cr_assert_eq(goblin_hub_signin_start(hub, "a@b.c\r\nBcc: x@y.z", "c", T0), GOBLIN_EINVAL);
    cr_assert_eq(goblin_hub_signin_start(hub, "two@@example.org", "c", T0), GOBLIN_EINVAL);
}

Test(hub_signin, sessions_cookies_and_form_tokens) {
    char code[GOBLIN_HUB_CODE_SIZE], token[GOBLIN_HUB_TOKEN_SIZE], cookie[GOBLIN_HUB_TOKEN_SIZE];
    issue("gil@example.org", T0, code, token);
    cr_assert_eq(finish("gil@example.org", code, false, T0, cookie), GOBLIN_OK);
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_session_account(hub, cookie, T0 + 10, &a), GOBLIN_OK);
    cr_assert_str_eq(a.email, "gil@example.org");
    /* A cookie that differs in one digit, or of another shape, is nobody's. */
    char forged[GOBLIN_HUB_TOKEN_SIZE];
    strcpy(forged, cookie);
    forged[0] = forged[0] == 'a' ? 'b' : 'a';
    cr_assert_eq(goblin_hub_session_account(hub, forged, T0 + 10, &a), GOBLIN_EAUTH);
    cr_assert_eq(goblin_hub_session_account(hub, "' OR 1=1 --", T0 + 10, &a), GOBLIN_EAUTH);
    cr_assert_eq(goblin_hub_session_account(hub, cookie, T0 + 7 * 24 * 3600, &a), GOBLIN_EAUTH, "a week later");
    /* Form tokens belong to one cookie. */
    char t1[GOBLIN_HUB_TOKEN_SIZE], t2[GOBLIN_HUB_TOKEN_SIZE];
    cr_assert_eq(goblin_hub_csrf_token(hub, cookie, t1), GOBLIN_OK);
    cr_assert_eq(goblin_hub_csrf_token(hub, forged, t2), GOBLIN_OK);
    cr_assert_str_neq(t1, t2);
    cr_assert(goblin_hub_csrf_check(hub, cookie, t1));
    cr_assert(!goblin_hub_csrf_check(hub, cookie, t2));
    cr_assert(!goblin_hub_csrf_check(hub, cookie, ""));
    cr_assert(!goblin_hub_csrf_check(hub, cookie, NULL));
    cr_assert(!goblin_hub_csrf_check(hub, "", t1));
    cr_assert_eq(goblin_hub_session_end(hub, cookie), GOBLIN_OK);
    cr_assert_eq(goblin_hub_session_account(hub, cookie, T0 + 10, &a), GOBLIN_EAUTH);
}

static void read_secret(uint8_t key[32]) { hub_util_read_secret(dir, key); }

/* Whether the bytes of @p needle appear in file @p name of the hub directory. */
static bool file_has(const char *name, const char *needle) { return hub_util_file_has(dir, name, needle, strlen(needle)); }

Test(hub_signin, only_keyed_digests_are_stored) {
    char code[GOBLIN_HUB_CODE_SIZE], token[GOBLIN_HUB_TOKEN_SIZE], cookie[GOBLIN_HUB_TOKEN_SIZE];
    issue("hal@example.org", T0, code, token);
    uint8_t key[32], want_code[32], want_link[32];
    read_secret(key);
    hub_util_hmac(key, "signin-code", "hal@example.org", code, want_code);
    hub_util_hmac(key, "signin-link", "hal@example.org", token, want_link);
    char db[400];
    snprintf(db, sizeof db, "%s/hub.db", dir);
    sqlite3 *d;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open(db, &d), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(d, "SELECT code_digest, link_digest FROM signin WHERE email = 'hal@example.org'",
                                    -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_bytes(st, 0), 32);
    cr_assert_eq(memcmp(sqlite3_column_blob(st, 0), want_code, 32), 0);
    cr_assert_eq(memcmp(sqlite3_column_blob(st, 1), want_link, 32), 0);
    sqlite3_finalize(st);
    sqlite3_close(d);
    cr_assert_eq(finish("hal@example.org", code, false, T0 + 1, cookie), GOBLIN_OK);
    /* The session, too, is its digest only; nothing secret is in any file the hub writes. */
    uint8_t want_session[32];
    hub_util_hmac(key, "session", cookie, NULL, want_session);
    cr_assert_eq(sqlite3_open(db, &d), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(d, "SELECT digest FROM session", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(memcmp(sqlite3_column_blob(st, 0), want_session, 32), 0);
    sqlite3_finalize(st);
    sqlite3_close(d);
    const char *files[] = {"hub.db", "hub.db-wal", "hub.conf"};
    for (int i = 0; i < 3; i++) {
        cr_assert(!file_has(files[i], code), "%s holds the code", files[i]);
        cr_assert(!file_has(files[i], token), "%s holds the link token", files[i]);
        cr_assert(!file_has(files[i], cookie), "%s holds the cookie", files[i]);
    }
}

static int64_t signed_in_account(const char *email) {
    char code[GOBLIN_HUB_CODE_SIZE], token[GOBLIN_HUB_TOKEN_SIZE], cookie[GOBLIN_HUB_TOKEN_SIZE];
    issue(email, T0, code, token);
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_signin_finish(hub, email, code, false, "c", T0, cookie, &a), GOBLIN_OK);
    return a.id;
}

static goblin_hub_access_request *request(const char *name) {
    static goblin_hub_access_request r;
    memset(&r, 0, sizeof r);
    strcpy(r.name, name);
    strcpy(r.institution, "Institute");
    strcpy(r.purpose, "protein folding");
    strcpy(r.expected_use, "a few matmuls a day");
    return &r;
}

Test(hub_signin, keys_only_for_the_approved_shown_once_revocable) {
    int64_t acc = signed_in_account("ivy@example.org");
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t rid, kid;
    cr_assert_eq(goblin_hub_key_create(hub, acc, "lab", T0, key, &kid), GOBLIN_EAUTH, "not approved yet");
    cr_assert_eq(goblin_hub_request_file(hub, acc, request("Ivy"), T0, &rid), GOBLIN_OK, "%s", goblin_hub_error(hub));
    cr_assert_eq(goblin_hub_request_file(hub, acc, request("Ivy again"), T0, &rid), GOBLIN_EBUSY);
    cr_assert_eq(goblin_hub_key_create(hub, acc, "lab", T0, key, &kid), GOBLIN_EAUTH, "pending is not approved");
    /* Nothing listens on the SMTP port: the decision is kept, the failure said. */
    cr_assert_eq(goblin_hub_request_decide(hub, rid, true, "ok", T0), GOBLIN_EIO);
    cr_assert(strstr(goblin_hub_error(hub), "decision stored"), "%s", goblin_hub_error(hub));
    cr_assert_eq(goblin_hub_request_decide(hub, rid, false, NULL, T0), GOBLIN_ESTATE);
    cr_assert_eq(goblin_hub_key_create(hub, acc, "lab one", T0, key, &kid), GOBLIN_OK, "%s", goblin_hub_error(hub));
    cr_assert_eq(strlen(key), GOBLIN_HUB_NODE_KEY_SIZE - 1);
    char prefix[32];
    snprintf(prefix, sizeof prefix, "gbk1_%016llx_", (unsigned long long)kid);
    cr_assert_eq(strncmp(key, prefix, 22), 0, "%s", key);
    cr_assert(!file_has("hub.db", key + 22) && !file_has("hub.db-wal", key + 22), "the secret part is not stored");
    uint8_t secret[32], want[32];
    read_secret(secret);
    hub_util_hmac(secret, "node-key", key + 22, NULL, want);
    goblin_hub_node_key k;
    cr_assert_eq(goblin_hub_key_verify(hub, key, &k), GOBLIN_OK, "%s", goblin_hub_error(hub));
    cr_assert_eq(k.account_id, acc);
    cr_assert_str_eq(k.label, "lab one");
    cr_assert_eq(goblin_hub_store_key_check(goblin_hub_get_store(hub), kid, want, &k), GOBLIN_OK,
                 "the store holds HMAC(secret, node-key, secret part)");
    /* Tampered: one digit of the secret, another id, another shape. */
    char bad[GOBLIN_HUB_NODE_KEY_SIZE];
    strcpy(bad, key);
    bad[40] = bad[40] == '0' ? '1' : '0';
    cr_assert_eq(goblin_hub_key_verify(hub, bad, &k), GOBLIN_EAUTH);
    strcpy(bad, key);
    bad[20] = bad[20] == '0' ? '1' : '0';
    cr_assert_eq(goblin_hub_key_verify(hub, bad, &k), GOBLIN_EAUTH);
    cr_assert_eq(goblin_hub_key_verify(hub, "gbk1_x", &k), GOBLIN_EINVAL);
    /* Another researcher cannot revoke it; its owner can, and then it is dead. */
    int64_t other = signed_in_account("jo@example.org");
    cr_assert_eq(goblin_hub_store_key_revoke(goblin_hub_get_store(hub), other, kid, T0), GOBLIN_ENOTFOUND);
    cr_assert_eq(goblin_hub_key_verify(hub, key, &k), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_key_revoke(goblin_hub_get_store(hub), acc, kid, T0), GOBLIN_OK);
    cr_assert_eq(goblin_hub_key_verify(hub, key, &k), GOBLIN_EAUTH);
    cr_assert(strstr(goblin_hub_error(hub), "revoked"), "%s", goblin_hub_error(hub));
}

Test(hub_signin, key_and_request_counts_are_bounded) {
    goblin_hub_free(hub);
    hub = NULL;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    open_hub("max_keys = 2\nmax_requests = 2\n");
    int64_t acc = signed_in_account("kim@example.org"), rid;
    cr_assert_eq(goblin_hub_request_file(hub, acc, request("K"), T0, &rid), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_request_decide(goblin_hub_get_store(hub), rid, GOBLIN_HUB_REQUEST_DENIED, "", T0),
                 GOBLIN_OK);
    cr_assert_eq(goblin_hub_request_file(hub, acc, request("K2"), T0, &rid), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_request_decide(goblin_hub_get_store(hub), rid, GOBLIN_HUB_REQUEST_APPROVED, "", T0),
                 GOBLIN_OK);
    cr_assert_eq(goblin_hub_request_file(hub, acc, request("K3"), T0, &rid), GOBLIN_ELIMIT);
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t k1, k2, k3;
    cr_assert_eq(goblin_hub_key_create(hub, acc, "a", T0, key, &k1), GOBLIN_OK);
    cr_assert_eq(goblin_hub_key_create(hub, acc, "b", T0, key, &k2), GOBLIN_OK);
    cr_assert_eq(goblin_hub_key_create(hub, acc, "c", T0, key, &k3), GOBLIN_ELIMIT);
    cr_assert_eq(goblin_hub_store_key_revoke(goblin_hub_get_store(hub), acc, k1, T0), GOBLIN_OK);
    cr_assert_eq(goblin_hub_key_create(hub, acc, "c", T0, key, &k3), GOBLIN_OK);
}

Test(hub_signin, second_init_changes_nothing) {
    goblin_errbuf err;
    char before[80] = "", after[80] = "", path[400];
    snprintf(path, sizeof path, "%s/secret", dir);
    FILE *f = fopen(path, "r");
    cr_assert(fgets(before, sizeof before, f));
    fclose(f);
    cr_assert_eq(goblin_hub_init_dir(dir, NULL, NULL, NULL, &err), GOBLIN_EBUSY);
    f = fopen(path, "r");
    cr_assert(fgets(after, sizeof after, f));
    fclose(f);
    cr_assert_str_eq(before, after);
    cr_assert(goblin_hub_is_admin(hub, "OP@example.org"));
    cr_assert(!goblin_hub_is_admin(hub, "op@example.org.evil"));
}

Test(hub_signin, config_is_checked_line_by_line) {
    goblin_hub_config c;
    goblin_errbuf err;
    cr_assert_eq(goblin_hub_config_parse("# c\n\nlisten = https://0.0.0.0:9443\ncode_ttl_s = 60\nadmin = A@B.org\n"
                                         "trust_forwarded_for = yes\n", &c, &err), GOBLIN_OK, "%s", err.message);
    cr_assert_str_eq(c.listen, "https://0.0.0.0:9443");
    cr_assert_eq(c.code_ttl_s, 60);
    cr_assert_eq(c.n_admins, 1);
    cr_assert_str_eq(c.admins[0], "a@b.org");
    cr_assert(c.trust_forwarded_for);
    cr_assert_eq(c.codes_per_address, 3);
    cr_assert_eq(goblin_hub_config_parse("listne = x\n", &c, &err), GOBLIN_ESYNTAX);
    cr_assert(strstr(err.message, "line 1"), "%s", err.message);
    cr_assert_eq(goblin_hub_config_parse("a\nno equals sign\n", &c, &err), GOBLIN_ESYNTAX);
    cr_assert_eq(goblin_hub_config_parse("code_ttl_s = 0\n", &c, &err), GOBLIN_ERANGE);
    cr_assert_eq(goblin_hub_config_parse("code_ttl_s = 12x\n", &c, &err), GOBLIN_ERANGE);
    cr_assert_eq(goblin_hub_config_parse("listen = http://127.0.0.1:80\n", &c, &err), GOBLIN_EINVAL);
    cr_assert_eq(goblin_hub_config_parse("admin = not-an-address\n", &c, &err), GOBLIN_ESYNTAX);
    cr_assert_eq(goblin_hub_config_parse("public_url = https://x/\"><script>\n", &c, &err), GOBLIN_EINVAL);
}
