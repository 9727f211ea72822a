/* tests/unit/test_hub_store_postgres.c - the hub's store on a real PostgreSQL server
 * that each test starts (Debian's postgresql: initdb and pg_ctl in a temporary
 * directory, a Unix socket only, no TCP): migrations, a newer schema refused and left
 * as it was, SQL in every field stored verbatim, single-use sign-ins, other accounts
 * out of reach, and a hub signing someone in with its store there (hub.conf `store`).
 * The database is read back with libpq directly. Skipped where PostgreSQL's server
 * programs are not installed. */
#include <criterion/criterion.h>
#include <goblin/hub.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hub/hub_impl.h"
#include "hostile_peer.h" /* hp_free_port */
#include "hub_store_links.h"

static char dir[256], location[512];
static bool started;

static const char *pg_bin(void) {
    static const char *const dirs[] = {"/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin",
                                       "/usr/lib/postgresql/15/bin"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char p[128];
        snprintf(p, sizeof p, "%s/initdb", dirs[i]);
        if (access(p, X_OK) == 0) return dirs[i];
    }
    return NULL;
}

/* Run @p cmd as the server's user (postgres when we are root: initdb refuses root). */
static int as_server_user(const char *cmd) {
    char full[2048];
    if (geteuid() == 0) snprintf(full, sizeof full, "runuser -u postgres -- sh -c '%s' >/dev/null 2>&1", cmd);
    else snprintf(full, sizeof full, "sh -c '%s' >/dev/null 2>&1", cmd);
    return system(full);
}

static void setup(void) {
    const char *bin = pg_bin();
    if (!bin) return;
    snprintf(dir, sizeof dir, "/tmp/goblin-hubpg-%d-XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(dir));
    chmod(dir, 0755);
    char cmd[1600];
    if (geteuid() == 0) {
        snprintf(cmd, sizeof cmd, "chown postgres '%s'", dir);
        cr_assert_eq(system(cmd), 0);
    }
    int port = hp_free_port();
    snprintf(cmd, sizeof cmd, "%s/initdb -D %s/data -A trust -U goblin --no-sync", bin, dir);
    cr_assert_eq(as_server_user(cmd), 0, "initdb failed");
    snprintf(cmd, sizeof cmd,
             "%s/pg_ctl -D %s/data -l %s/log -w -t 60 -o \"-k %s -p %d -c listen_addresses= -c fsync=off\" start",
             bin, dir, dir, dir, port);
    cr_assert_eq(as_server_user(cmd), 0, "the PostgreSQL server did not start");
    started = true;
    snprintf(location, sizeof location, "postgresql:///postgres?host=%s&port=%d&user=goblin", dir, port);
}

static void teardown(void) {
    if (!started) return;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s/pg_ctl -D %s/data -m immediate -w stop", pg_bin(), dir);
    as_server_user(cmd);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(hub_store_postgres, .init = setup, .fini = teardown, .timeout = 300);

static void need_server(void) {
    if (!started) cr_skip_test("PostgreSQL's server programs are not installed");
}

static goblin_hub_store *open_store(void) {
    goblin_hub_store *s = NULL;
    goblin_errbuf err;
    goblin_err e = goblin_hub_store_open(location, &s, &err);
    cr_assert_eq(e, GOBLIN_OK, "%s", err.message);
    return s;
}

/* One integer from @p sql, through libpq. */
static long long sql_int(const char *sql) {
    PGconn *c = PQconnectdb(location);
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
    long long v = atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
    PQfinish(c);
    return v;
}

static void sql_exec(const char *sql) {
    PGconn *c = PQconnectdb(location);
    PGresult *r = PQexec(c, sql);
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
}

Test(hub_store_postgres, migrates_once_and_refuses_a_newer_schema) {
    need_server();
    goblin_hub_store *s = open_store();
    int32_t v = 0;
    cr_assert_eq(goblin_hub_store_schema_version(s, &v), GOBLIN_OK);
    cr_assert_eq(v, GOBLIN_HUB_STORE_SCHEMA_VERSION);
    goblin_hub_store_close(s);
    s = open_store();
    goblin_hub_store_close(s);
    cr_assert_eq(sql_int("SELECT count(*) FROM goblin_hub_schema"), 1);
    cr_assert_eq(sql_int("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"), 11);
    sql_exec("UPDATE goblin_hub_schema SET version = 99");
    goblin_errbuf err;
    cr_assert_eq(goblin_hub_store_open(location, &s, &err), GOBLIN_EVERSION);
    cr_assert(strstr(err.message, "99"), "%s", err.message);
    cr_assert_eq(sql_int("SELECT version FROM goblin_hub_schema"), 99);
    /* A server that is not there: a clear error, no store. */
    char bad[600];
    snprintf(bad, sizeof bad, "postgresql:///postgres?host=%s&port=1&user=goblin", dir);
    s = NULL;
    cr_assert_eq(goblin_hub_store_open(bad, &s, &err), GOBLIN_EIO);
    cr_assert_null(s);
    cr_assert(strstr(err.message, "connect"), "%s", err.message);
}

static const char *const hostile[] = {
    "Robert'); DROP TABLE account;--",
    "$1 $2 '; DELETE FROM access_request; --",
    "<script>alert(1)</script>",
    "line one\nline two\r\n\ttab \\ backslash % _ E'\\x00'",
    "\xc3\xa9l\xc3\xa8ve \xe6\xbc\xa2\xe5\xad\x97 \xf0\x9f\x90\x89",
};

typedef struct seen {
    int n;
} seen;

static goblin_err count_req(void *ctx, const goblin_hub_access_request *r) {
    ((seen *)ctx)->n++;
    return GOBLIN_OK;
}

Test(hub_store_postgres, sql_in_every_field_stored_verbatim) {
    need_server();
    goblin_hub_store *s = open_store();
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "Eve@Example.org", 1, &a), GOBLIN_OK);
    cr_assert_str_eq(a.email, "eve@example.org");
    size_t n = sizeof hostile / sizeof hostile[0];
    for (size_t i = 0; i < n; i++) {
        goblin_hub_access_request r, back;
        memset(&r, 0, sizeof r);
        strcpy(r.name, hostile[i]);
        strcpy(r.institution, hostile[(i + 1) % n]);
        strcpy(r.purpose, hostile[(i + 2) % n]);
        strcpy(r.expected_use, hostile[(i + 3) % n]);
        int64_t id, kid, qid;
        cr_assert_eq(goblin_hub_store_request_add(s, a.id, &r, 10, &id), GOBLIN_OK, "%s", goblin_hub_store_error(s));
        cr_assert_eq(goblin_hub_store_request_get(s, id, &back), GOBLIN_OK);
        cr_assert_str_eq(back.name, hostile[i]);
        cr_assert_str_eq(back.institution, hostile[(i + 1) % n]);
        cr_assert_str_eq(back.purpose, hostile[(i + 2) % n]);
        cr_assert_str_eq(back.expected_use, hostile[(i + 3) % n]);
        uint8_t d[32] = {(uint8_t)i, 0, 39 /* ' */, 92 /* \ */};
        cr_assert_eq(goblin_hub_store_key_add(s, a.id, hostile[i], d, 10, &kid), GOBLIN_OK);
        goblin_hub_node_key k;
        cr_assert_eq(goblin_hub_store_key_check(s, kid, d, &k), GOBLIN_OK, "digests with NUL, quote and backslash");
        cr_assert_str_eq(k.label, hostile[i]);
        cr_assert_eq(goblin_hub_store_quarantine_add(s, hostile[i], hostile[(i + 1) % n], "lab", 5, &qid), GOBLIN_OK);
        bool q = false;
        cr_assert_eq(goblin_hub_store_quarantined(s, hostile[i], &q), GOBLIN_OK);
        cr_assert(q);
    }
    seen sn = {0};
    cr_assert_eq(goblin_hub_store_request_each(s, a.id, -1, 100, count_req, &sn), GOBLIN_OK);
    cr_assert_eq(sn.n, (int)n);
    goblin_hub_store_close(s);
    cr_assert_eq(sql_int("SELECT count(*) FROM account"), 1);
    cr_assert_eq(sql_int("SELECT count(*) FROM access_request"), (long long)n);
    cr_assert_eq(sql_int("SELECT count(*) FROM node_key"), (long long)n);
}

typedef struct codes {
    int n;
    int64_t ids[16];
} codes;

static goblin_err code_seen(void *ctx, const goblin_hub_signin_code *c) {
    codes *k = ctx;
    k->ids[k->n++] = c->id;
    return GOBLIN_OK;
}

Test(hub_store_postgres, signins_expire_fail_and_work_once) {
    need_server();
    goblin_hub_store *s = open_store();
    uint8_t c1[32] = {1}, l1[32] = {2}, c2[32] = {3}, l2[32] = {4};
    cr_assert_eq(goblin_hub_store_signin_add(s, "a@b.c", c1, l1, 1000, 1900), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_signin_add(s, "a@b.c", c2, l2, 1100, 2000), GOBLIN_OK);
    codes k = {0};
    cr_assert_eq(goblin_hub_store_signin_each(s, "a@b.c", 1900, 5, code_seen, &k), GOBLIN_OK);
    cr_assert_eq(k.n, 1);
    int64_t second = k.ids[0];
    for (int i = 0; i < 5; i++) cr_assert_eq(goblin_hub_store_signin_fail(s, "a@b.c", 1500), GOBLIN_OK);
    k.n = 0;
    cr_assert_eq(goblin_hub_store_signin_each(s, "a@b.c", 1500, 5, code_seen, &k), GOBLIN_OK);
    cr_assert_eq(k.n, 0);
    cr_assert_eq(goblin_hub_store_signin_use(s, second, 1500), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_signin_use(s, second, 1501), GOBLIN_EAUTH);
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "s@example.org", 1, &a), GOBLIN_OK);
    uint8_t d[32] = {9, 9, 9};
    int64_t acc = 0, cnt = -1;
    cr_assert_eq(goblin_hub_store_session_add(s, d, a.id, 100, 200), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_session_get(s, d, 199, &acc), GOBLIN_OK);
    cr_assert_eq(acc, a.id);
    cr_assert_eq(goblin_hub_store_session_get(s, d, 200, &acc), GOBLIN_ENOTFOUND);
    for (int t = 0; t < 10; t++) cr_assert_eq(goblin_hub_store_event_add(s, "send:x", 1000 + t, 0), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_event_count(s, "send:x", 1005, &cnt), GOBLIN_OK);
    cr_assert_eq(cnt, 5);
    goblin_hub_store_close(s);
}

Test(hub_store_postgres, other_accounts_out_of_reach_and_decisions_once) {
    need_server();
    goblin_hub_store *s = open_store();
    goblin_hub_account alice, mallory;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "alice@example.org", 1, &alice), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_account_ensure(s, "mallory@example.org", 1, &mallory), GOBLIN_OK);
    goblin_hub_access_request r;
    memset(&r, 0, sizeof r);
    strcpy(r.name, "Alice");
    strcpy(r.institution, "Uni");
    strcpy(r.purpose, "p");
    strcpy(r.expected_use, "e");
    int64_t rid, kid;
    cr_assert_eq(goblin_hub_store_request_add(s, alice.id, &r, 5, &rid), GOBLIN_OK);
    seen sn = {0};
    cr_assert_eq(goblin_hub_store_request_each(s, mallory.id, -1, 100, count_req, &sn), GOBLIN_OK);
    cr_assert_eq(sn.n, 0);
    cr_assert_eq(goblin_hub_store_request_each(s, 0, GOBLIN_HUB_REQUEST_PENDING, 100, count_req, &sn), GOBLIN_OK);
    cr_assert_eq(sn.n, 1);
    uint8_t d[32] = {7};
    cr_assert_eq(goblin_hub_store_key_add(s, alice.id, "lab", d, 5, &kid), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_key_revoke(s, mallory.id, kid, 6), GOBLIN_ENOTFOUND);
    goblin_hub_node_key k;
    cr_assert_eq(goblin_hub_store_key_check(s, kid, d, &k), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_key_revoke(s, alice.id, kid, 7), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_key_revoke(s, alice.id, kid, 8), GOBLIN_ESTATE);
    cr_assert_eq(goblin_hub_store_key_check(s, kid, d, &k), GOBLIN_EAUTH);
    bool ok = true;
    cr_assert_eq(goblin_hub_store_account_approved(s, alice.id, &ok), GOBLIN_OK);
    cr_assert(!ok);
    cr_assert_eq(goblin_hub_store_request_decide(s, rid, GOBLIN_HUB_REQUEST_APPROVED, "welcome", 6), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_request_decide(s, rid, GOBLIN_HUB_REQUEST_DENIED, "", 7), GOBLIN_ESTATE);
    cr_assert_eq(goblin_hub_store_request_decide(s, rid + 1, GOBLIN_HUB_REQUEST_DENIED, "", 7), GOBLIN_ENOTFOUND);
    cr_assert_eq(goblin_hub_store_account_approved(s, alice.id, &ok), GOBLIN_OK);
    cr_assert(ok);
    int64_t qid;
    cr_assert_eq(goblin_hub_store_quarantine_add(s, "worker:abc", "wrong tiles", "lab-1", 10, &qid), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_quarantine_lift(s, qid, 11), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_quarantine_lift(s, qid, 12), GOBLIN_ESTATE);
    goblin_hub_store_close(s);
}

Test(hub_store_postgres, a_hub_signs_in_with_its_store_here) {
    need_server();
    char hubdir[300], path[400];
    snprintf(hubdir, sizeof hubdir, "%s/hub", dir);
    goblin_errbuf err;
    cr_assert_eq(goblin_hub_init_dir(hubdir, NULL, NULL, NULL, &err), GOBLIN_OK, "%s", err.message);
    snprintf(path, sizeof path, "%s/hub.conf", hubdir);
    FILE *f = fopen(path, "a");
    cr_assert_not_null(f);
    fprintf(f, "store = %s\n", location);
    fclose(f);
    goblin_hub *h;
    cr_assert_eq(goblin_hub_open(hubdir, &h, &err), GOBLIN_OK, "%s", err.message);
    char code[GOBLIN_HUB_CODE_SIZE], token[GOBLIN_HUB_TOKEN_SIZE], cookie[GOBLIN_HUB_TOKEN_SIZE];
    cr_assert_eq(goblin__hub_signin_issue(h, "pg@example.org", "c", 1000, code, token), GOBLIN_OK, "%s",
                 goblin_hub_error(h));
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_signin_finish(h, "pg@example.org", code, false, "c", 1001, cookie, &a), GOBLIN_OK, "%s",
                 goblin_hub_error(h));
    cr_assert_eq(goblin_hub_signin_finish(h, "pg@example.org", code, false, "c", 1002, cookie, &a), GOBLIN_EAUTH);
    goblin_hub_free(h);
    cr_assert_eq(sql_int("SELECT count(*) FROM account WHERE email = 'pg@example.org'"), 1);
    cr_assert_eq(sql_int("SELECT count(*) FROM signin WHERE used > 0"), 1);
}

/* The volunteer operations, as on SQLite (hub_store_links.h), in one server start. */
Test(hub_store_postgres, worker_links_and_work_counters) {
    need_server();
    goblin_hub_store *s = open_store();
    links_case_owners(s, sql_int);
    sql_exec("DELETE FROM worker_link");
    links_case_bound(s, sql_int);
    links_case_seed(s, sql_int);
    sql_exec("DELETE FROM worker_link");
    links_case_work(s, sql_int);
    sql_exec("DELETE FROM worker_work");
    links_case_work_bound(s, sql_int);
    goblin_hub_store_close(s);
    /* Only fingerprints, owners, times and counters: the tables' columns. */
    cr_assert_eq(sql_int("SELECT count(*) FROM information_schema.columns WHERE table_name = 'worker_link'"), 3);
    cr_assert_eq(sql_int("SELECT count(*) FROM information_schema.columns WHERE table_name = 'worker_work'"), 5);
    /* A database of schema 1 (taken back with libpq): migrated one step, rows kept. */
    long long accounts = sql_int("SELECT count(*) FROM account");
    sql_exec("DROP TABLE worker_work; DROP TABLE worker_link; DROP TABLE link_seed; DROP SEQUENCE worker_work_touched;"
             " UPDATE goblin_hub_schema SET version = 1");
    s = open_store();
    int32_t v = 0;
    cr_assert_eq(goblin_hub_store_schema_version(s, &v), GOBLIN_OK);
    cr_assert_eq(v, 2);
    char f[65];
    links_fp(1, f);
    cr_assert_eq(goblin_hub_store_work_add(s, f, 1, 1, 0), GOBLIN_OK, "%s", goblin_hub_store_error(s));
    goblin_hub_store_close(s);
    cr_assert_eq(sql_int("SELECT count(*) FROM account"), accounts);
    cr_assert_eq(sql_int("SELECT count(*) FROM worker_work"), 1);
}
