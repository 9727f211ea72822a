/* tests/unit/test_hub_store.c - the hub's store (SQLite backend) tried as an attacker
 * would: SQL in every text stored and read back byte for byte, one account never
 * reaching another's requests or keys, single-use sign-ins, expiry by the caller's
 * clock, and schema versions: a fresh file migrated to the current one, a newer one
 * refused and left as it was. The database is read back with SQLite directly. */
#include <criterion/criterion.h>
#include <goblin/hub_store.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hub_store_links.h"

static char dir[256], db[300];

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/goblin-hubstore-%d-XXXXXX", (int)getpid());
    cr_assert_not_null(mkdtemp(dir));
    snprintf(db, sizeof db, "%s/hub.db", dir);
}

static void teardown(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static goblin_hub_store *open_store(void) {
    goblin_hub_store *s = NULL;
    goblin_errbuf err;
    goblin_err e = goblin_hub_store_open(db, &s, &err);
    cr_assert_eq(e, GOBLIN_OK, "%s", err.message);
    return s;
}

static int64_t sql_int(const char *sql) {
    sqlite3 *d;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open(db, &d), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(d, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(d));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(d);
    return v;
}

TestSuite(hub_store, .init = setup, .fini = teardown);

Test(hub_store, fresh_file_is_migrated_and_private) {
    goblin_hub_store *s = open_store();
    int32_t v = -1;
    cr_assert_eq(goblin_hub_store_schema_version(s, &v), GOBLIN_OK);
    cr_assert_eq(v, GOBLIN_HUB_STORE_SCHEMA_VERSION);
    goblin_hub_store_close(s);
    cr_assert_eq(sql_int("PRAGMA user_version"), GOBLIN_HUB_STORE_SCHEMA_VERSION);
    cr_assert_eq(sql_int("SELECT count(*) FROM sqlite_master WHERE type = 'table'"), 10);
    struct stat st;
    cr_assert_eq(stat(db, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    s = open_store(); /* a second open migrates nothing */
    goblin_hub_store_close(s);
    cr_assert_eq(sql_int("PRAGMA user_version"), GOBLIN_HUB_STORE_SCHEMA_VERSION);
}

Test(hub_store, newer_schema_is_refused_untouched) {
    sqlite3 *d;
    cr_assert_eq(sqlite3_open(db, &d), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(d, "CREATE TABLE future (x); PRAGMA user_version = 99;", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(d);
    goblin_hub_store *s = NULL;
    goblin_errbuf err;
    cr_assert_eq(goblin_hub_store_open(db, &s, &err), GOBLIN_EVERSION);
    cr_assert_null(s);
    cr_assert(strstr(err.message, "99"), "%s", err.message);
    cr_assert_eq(sql_int("PRAGMA user_version"), 99);
    cr_assert_eq(sql_int("SELECT count(*) FROM sqlite_master WHERE name = 'account'"), 0);
}

Test(hub_store, locations) {
    goblin_hub_store *s = NULL;
    goblin_errbuf err;
#ifdef GOBLIN_HAVE_HUB_POSTGRES
    /* Built with libpq: a server that is not there (test_hub_store_postgres has one). */
    cr_assert_eq(goblin_hub_store_open("postgresql:///hub?host=/nonexistent-goblin-dir", &s, &err), GOBLIN_EIO);
#else
    cr_assert_eq(goblin_hub_store_open("postgresql:///hub?host=/nonexistent-goblin-dir", &s, &err), GOBLIN_ENOTSUP);
#endif
    cr_assert_eq(goblin_hub_store_open("sqlite:", &s, &err), GOBLIN_EINVAL);
    cr_assert_eq(goblin_hub_store_open(NULL, &s, &err), GOBLIN_EINVAL);
    cr_assert_eq(goblin_hub_store_open("/nonexistent-dir/x/hub.db", &s, &err), GOBLIN_EIO);
    cr_assert_null(s);
    char loc[320];
    snprintf(loc, sizeof loc, "sqlite:%s", db);
    cr_assert_eq(goblin_hub_store_open(loc, &s, &err), GOBLIN_OK, "%s", err.message);
    goblin_hub_store_close(s);
    goblin_hub_store_close(NULL);
}

Test(hub_store, accounts_ignore_case) {
    goblin_hub_store *s = open_store();
    goblin_hub_account a, b, c;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "Ada@Example.ORG", 100, &a), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_account_ensure(s, "ada@example.org", 200, &b), GOBLIN_OK);
    cr_assert_eq(a.id, b.id);
    cr_assert_str_eq(b.email, "ada@example.org");
    cr_assert_eq(b.created, 100);
    cr_assert_eq(goblin_hub_store_account_get(s, a.id, &c), GOBLIN_OK);
    cr_assert_str_eq(c.email, "ada@example.org");
    cr_assert_eq(goblin_hub_store_account_get(s, a.id + 100, &c), GOBLIN_ENOTFOUND);
    goblin_hub_store_close(s);
}

/* Texts an attacker would try, each stored and read back byte for byte. */
static const char *const hostile[] = {
    "Robert'); DROP TABLE account;--",
    "x' OR '1'='1",
    "\"; DELETE FROM access_request; --",
    "<script>alert(1)</script>",
    "line one\nline two\r\n\ttab \\ backslash % _ wildcard",
    "\xc3\xa9l\xc3\xa8ve \xe6\xbc\xa2\xe5\xad\x97 \xf0\x9f\x90\x89",
};

typedef struct seen {
    int n;
    goblin_hub_access_request last;
} seen;

static goblin_err see(void *ctx, const goblin_hub_access_request *r) {
    seen *s = ctx;
    s->n++;
    s->last = *r;
    return GOBLIN_OK;
}

Test(hub_store, sql_and_html_in_every_field_stored_verbatim) {
    goblin_hub_store *s = open_store();
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "eve@example.org", 1, &a), GOBLIN_OK);
    size_t n = sizeof hostile / sizeof hostile[0];
    for (size_t i = 0; i < n; i++) {
        goblin_hub_access_request r;
        memset(&r, 0, sizeof r);
        strcpy(r.name, hostile[i]);
        strcpy(r.institution, hostile[(i + 1) % n]);
        strcpy(r.purpose, hostile[(i + 2) % n]);
        strcpy(r.expected_use, hostile[(i + 3) % n]);
        int64_t id;
        cr_assert_eq(goblin_hub_store_request_add(s, a.id, &r, 10, &id), GOBLIN_OK, "%s", goblin_hub_store_error(s));
        goblin_hub_access_request back;
        cr_assert_eq(goblin_hub_store_request_get(s, id, &back), GOBLIN_OK);
        cr_assert_str_eq(back.name, hostile[i]);
        cr_assert_str_eq(back.institution, hostile[(i + 1) % n]);
        cr_assert_str_eq(back.purpose, hostile[(i + 2) % n]);
        cr_assert_str_eq(back.expected_use, hostile[(i + 3) % n]);
        cr_assert_str_eq(back.email, "eve@example.org");
        int64_t kid;
        uint8_t d[32] = {(uint8_t)i};
        cr_assert_eq(goblin_hub_store_key_add(s, a.id, hostile[i], d, 10, &kid), GOBLIN_OK);
        int64_t qid;
        cr_assert_eq(goblin_hub_store_quarantine_add(s, hostile[i], hostile[(i + 1) % n], hostile[(i + 2) % n], 5, &qid),
                     GOBLIN_OK);
        bool q = false;
        cr_assert_eq(goblin_hub_store_quarantined(s, hostile[i], &q), GOBLIN_OK);
        cr_assert(q);
    }
    goblin_hub_store_close(s);
    /* Nothing was dropped or deleted, and every row is there. */
    cr_assert_eq(sql_int("SELECT count(*) FROM account"), 1);
    cr_assert_eq(sql_int("SELECT count(*) FROM access_request"), (int64_t)n);
    cr_assert_eq(sql_int("SELECT count(*) FROM node_key"), (int64_t)n);
    cr_assert_eq(sql_int("SELECT count(*) FROM quarantine"), (int64_t)n);
}

Test(hub_store, oversized_fields_refused_nothing_stored) {
    goblin_hub_store *s = open_store();
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "big@example.org", 1, &a), GOBLIN_OK);
    goblin_hub_access_request r;
    memset(&r, 0, sizeof r);
    strcpy(r.institution, "i");
    strcpy(r.purpose, "p");
    strcpy(r.expected_use, "e");
    int64_t id;
    cr_assert_eq(goblin_hub_store_request_add(s, a.id, &r, 1, &id), GOBLIN_EINVAL); /* empty name */
    memset(r.name, 'n', sizeof r.name); /* no NUL within the limit */
    cr_assert_eq(goblin_hub_store_request_add(s, a.id, &r, 1, &id), GOBLIN_EINVAL);
    cr_assert(strstr(goblin_hub_store_error(s), "name"), "%s", goblin_hub_store_error(s));
    char label[GOBLIN_HUB_LABEL_MAX + 2];
    memset(label, 'k', sizeof label - 1);
    label[sizeof label - 1] = 0;
    uint8_t d[32] = {0};
    cr_assert_eq(goblin_hub_store_key_add(s, a.id, label, d, 1, &id), GOBLIN_EINVAL);
    char email[GOBLIN_HUB_EMAIL_MAX + 2];
    memset(email, 'e', sizeof email - 1);
    email[sizeof email - 1] = 0;
    goblin_hub_account b;
    cr_assert_eq(goblin_hub_store_account_ensure(s, email, 1, &b), GOBLIN_EINVAL);
    goblin_hub_store_close(s);
    cr_assert_eq(sql_int("SELECT count(*) FROM access_request"), 0);
    cr_assert_eq(sql_int("SELECT count(*) FROM node_key"), 0);
    cr_assert_eq(sql_int("SELECT count(*) FROM account"), 1);
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

Test(hub_store, signins_expire_fail_and_work_once) {
    goblin_hub_store *s = open_store();
    uint8_t c1[32] = {1}, l1[32] = {2}, c2[32] = {3}, l2[32] = {4};
    cr_assert_eq(goblin_hub_store_signin_add(s, "a@b.c", c1, l1, 1000, 1900), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_signin_add(s, "a@b.c", c2, l2, 1100, 2000), GOBLIN_OK);
    codes k = {0};
    cr_assert_eq(goblin_hub_store_signin_each(s, "a@b.c", 1899, 5, code_seen, &k), GOBLIN_OK);
    cr_assert_eq(k.n, 2);
    k.n = 0;
    cr_assert_eq(goblin_hub_store_signin_each(s, "a@b.c", 1900, 5, code_seen, &k), GOBLIN_OK);
    cr_assert_eq(k.n, 1, "the first one expired at 1900");
    int64_t second = k.ids[0];
    k.n = 0;
    cr_assert_eq(goblin_hub_store_signin_each(s, "other@b.c", 1000, 5, code_seen, &k), GOBLIN_OK);
    cr_assert_eq(k.n, 0);
    /* Five failures kill a code for a limit of five. */
    for (int i = 0; i < 5; i++) cr_assert_eq(goblin_hub_store_signin_fail(s, "a@b.c", 1500), GOBLIN_OK);
    k.n = 0;
    cr_assert_eq(goblin_hub_store_signin_each(s, "a@b.c", 1500, 5, code_seen, &k), GOBLIN_OK);
    cr_assert_eq(k.n, 0);
    k.n = 0;
    cr_assert_eq(goblin_hub_store_signin_each(s, "a@b.c", 1500, 6, code_seen, &k), GOBLIN_OK);
    cr_assert_eq(k.n, 2);
    cr_assert_eq(goblin_hub_store_signin_use(s, second, 1500), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_signin_use(s, second, 1501), GOBLIN_EAUTH);
    k.n = 0;
    cr_assert_eq(goblin_hub_store_signin_each(s, "a@b.c", 1500, 6, code_seen, &k), GOBLIN_OK);
    cr_assert_eq(k.n, 1);
    goblin_hub_store_close(s);
}

Test(hub_store, sessions_and_events_follow_the_callers_clock) {
    goblin_hub_store *s = open_store();
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "s@example.org", 1, &a), GOBLIN_OK);
    uint8_t d[32] = {9, 9, 9}, other[32] = {9, 9, 8};
    int64_t acc = 0;
    cr_assert_eq(goblin_hub_store_session_add(s, d, a.id, 100, 200), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_session_get(s, d, 199, &acc), GOBLIN_OK);
    cr_assert_eq(acc, a.id);
    cr_assert_eq(goblin_hub_store_session_get(s, other, 150, &acc), GOBLIN_ENOTFOUND);
    cr_assert_eq(goblin_hub_store_session_get(s, d, 200, &acc), GOBLIN_ENOTFOUND);
    cr_assert_eq(goblin_hub_store_session_end(s, d), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_session_get(s, d, 150, &acc), GOBLIN_ENOTFOUND);
    int64_t n = -1;
    for (int t = 0; t < 10; t++) cr_assert_eq(goblin_hub_store_event_add(s, "send:x", 1000 + t, 0), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_event_count(s, "send:x", 1005, &n), GOBLIN_OK);
    cr_assert_eq(n, 5);
    cr_assert_eq(goblin_hub_store_event_count(s, "send:y", 0, &n), GOBLIN_OK);
    cr_assert_eq(n, 0);
    /* Adding with forget_before 1008 drops the eight older events of every key. */
    cr_assert_eq(goblin_hub_store_event_add(s, "send:y", 1010, 1008), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_event_count(s, "send:x", 0, &n), GOBLIN_OK);
    cr_assert_eq(n, 2);
    goblin_hub_store_close(s);
}

static goblin_err count_key(void *ctx, const goblin_hub_node_key *k) {
    (*(int *)ctx)++;
    return GOBLIN_OK;
}

Test(hub_store, other_accounts_requests_and_keys_out_of_reach) {
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
    cr_assert_eq(goblin_hub_store_request_each(s, mallory.id, -1, 100, see, &sn), GOBLIN_OK);
    cr_assert_eq(sn.n, 0);
    cr_assert_eq(goblin_hub_store_request_each(s, alice.id, -1, 100, see, &sn), GOBLIN_OK);
    cr_assert_eq(sn.n, 1);
    cr_assert_str_eq(sn.last.name, "Alice");
    uint8_t d[32] = {7};
    cr_assert_eq(goblin_hub_store_key_add(s, alice.id, "lab", d, 5, &kid), GOBLIN_OK);
    int nk = 0;
    cr_assert_eq(goblin_hub_store_key_each(s, mallory.id, count_key, &nk), GOBLIN_OK);
    cr_assert_eq(nk, 0);
    /* Mallory cannot revoke Alice's key, and it still works. */
    cr_assert_eq(goblin_hub_store_key_revoke(s, mallory.id, kid, 6), GOBLIN_ENOTFOUND);
    goblin_hub_node_key k;
    cr_assert_eq(goblin_hub_store_key_check(s, kid, d, &k), GOBLIN_OK);
    cr_assert_eq(k.account_id, alice.id);
    uint8_t wrong[32] = {8};
    cr_assert_eq(goblin_hub_store_key_check(s, kid, wrong, &k), GOBLIN_EAUTH);
    cr_assert_eq(goblin_hub_store_key_check(s, kid + 1, d, &k), GOBLIN_EAUTH);
    cr_assert_eq(goblin_hub_store_key_revoke(s, alice.id, kid, 7), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_key_revoke(s, alice.id, kid, 8), GOBLIN_ESTATE);
    cr_assert_eq(goblin_hub_store_key_check(s, kid, d, &k), GOBLIN_EAUTH);
    goblin_hub_store_close(s);
}

Test(hub_store, decisions_happen_once) {
    goblin_hub_store *s = open_store();
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "r@example.org", 1, &a), GOBLIN_OK);
    goblin_hub_access_request r;
    memset(&r, 0, sizeof r);
    strcpy(r.name, "R");
    strcpy(r.institution, "I");
    strcpy(r.purpose, "P");
    strcpy(r.expected_use, "E");
    int64_t id;
    bool ok = true;
    cr_assert_eq(goblin_hub_store_request_add(s, a.id, &r, 5, &id), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_account_approved(s, a.id, &ok), GOBLIN_OK);
    cr_assert(!ok);
    seen sn = {0};
    cr_assert_eq(goblin_hub_store_request_each(s, 0, GOBLIN_HUB_REQUEST_PENDING, 10, see, &sn), GOBLIN_OK);
    cr_assert_eq(sn.n, 1);
    cr_assert_eq(goblin_hub_store_request_decide(s, id, GOBLIN_HUB_REQUEST_PENDING, "", 6), GOBLIN_EINVAL);
    cr_assert_eq(goblin_hub_store_request_decide(s, id, GOBLIN_HUB_REQUEST_APPROVED, "welcome", 6), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_request_decide(s, id, GOBLIN_HUB_REQUEST_DENIED, "", 7), GOBLIN_ESTATE);
    cr_assert_eq(goblin_hub_store_request_decide(s, id + 1, GOBLIN_HUB_REQUEST_DENIED, "", 7), GOBLIN_ENOTFOUND);
    cr_assert_eq(goblin_hub_store_account_approved(s, a.id, &ok), GOBLIN_OK);
    cr_assert(ok);
    goblin_hub_access_request back;
    cr_assert_eq(goblin_hub_store_request_get(s, id, &back), GOBLIN_OK);
    cr_assert_eq(back.status, GOBLIN_HUB_REQUEST_APPROVED);
    cr_assert_str_eq(back.note, "welcome");
    cr_assert_eq(back.decided, 6);
    sn.n = 0;
    cr_assert_eq(goblin_hub_store_request_each(s, 0, GOBLIN_HUB_REQUEST_PENDING, 10, see, &sn), GOBLIN_OK);
    cr_assert_eq(sn.n, 0);
    cr_assert_str_eq(goblin_hub_request_status_name(GOBLIN_HUB_REQUEST_DENIED), "denied");
    cr_assert_null(goblin_hub_request_status_name(GOBLIN_HUB_REQUEST_STATUS_COUNT));
    goblin_hub_store_close(s);
}

static goblin_err count_q(void *ctx, const goblin_hub_quarantine *q) {
    (*(int *)ctx)++;
    return GOBLIN_OK;
}

Test(hub_store, quarantines_lift_once) {
    goblin_hub_store *s = open_store();
    int64_t id;
    bool q = true;
    cr_assert_eq(goblin_hub_store_quarantined(s, "worker:abc", &q), GOBLIN_OK);
    cr_assert(!q);
    cr_assert_eq(goblin_hub_store_quarantine_add(s, "worker:abc", "wrong tiles", "lab-1", 10, &id), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_quarantined(s, "worker:abc", &q), GOBLIN_OK);
    cr_assert(q);
    cr_assert_eq(goblin_hub_store_quarantine_lift(s, id, 11), GOBLIN_OK);
    cr_assert_eq(goblin_hub_store_quarantine_lift(s, id, 12), GOBLIN_ESTATE);
    cr_assert_eq(goblin_hub_store_quarantine_lift(s, id + 5, 12), GOBLIN_ENOTFOUND);
    cr_assert_eq(goblin_hub_store_quarantined(s, "worker:abc", &q), GOBLIN_OK);
    cr_assert(!q);
    int n = 0;
    cr_assert_eq(goblin_hub_store_quarantine_each(s, false, count_q, &n), GOBLIN_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(goblin_hub_store_quarantine_each(s, true, count_q, &n), GOBLIN_OK);
    cr_assert_eq(n, 1);
    goblin_hub_store_close(s);
}

static long long count_ll(const char *sql) { return (long long)sql_int(sql); }

static void sql_do(const char *sql) {
    sqlite3 *d;
    cr_assert_eq(sqlite3_open(db, &d), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(d, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(d));
    sqlite3_close(d);
}

Test(hub_store, worker_links_have_one_owner) {
    goblin_hub_store *s = open_store();
    links_case_owners(s, count_ll);
    goblin_hub_store_close(s);
}

Test(hub_store, worker_links_are_bounded_per_account) {
    goblin_hub_store *s = open_store();
    links_case_bound(s, count_ll);
    goblin_hub_store_close(s);
}

Test(hub_store, work_counters_add_saturate_and_survive_links) {
    goblin_hub_store *s = open_store();
    links_case_work(s, count_ll);
    goblin_hub_store_close(s);
}

Test(hub_store, unlinked_work_is_bounded_least_recent_first) {
    goblin_hub_store *s = open_store();
    links_case_work_bound(s, count_ll);
    goblin_hub_store_close(s);
}

Test(hub_store, link_code_seeds) {
    goblin_hub_store *s = open_store();
    links_case_seed(s, count_ll);
    goblin_hub_store_close(s);
}

/* What the volunteer tables may hold: fingerprints, owners, times, counters and the
 * code's seed; no key, statement or address. Their columns, listed by SQLite. */
Test(hub_store, volunteer_tables_hold_fingerprints_and_counters_only) {
    goblin_hub_store *s = open_store();
    goblin_hub_store_close(s);
    sqlite3 *d;
    cr_assert_eq(sqlite3_open(db, &d), SQLITE_OK);
    static const char *const want[3][2] = {
        {"worker_link", "fingerprint,account,created"},
        {"worker_work", "fingerprint,tasks,accepted,rejected,touched"},
        {"link_seed", "account,seed,created"},
    };
    for (int i = 0; i < 3; i++) {
        char sql[128], cols[256] = "";
        snprintf(sql, sizeof sql, "SELECT name FROM pragma_table_info('%s') ORDER BY cid", want[i][0]);
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_prepare_v2(d, sql, -1, &st, NULL), SQLITE_OK);
        while (sqlite3_step(st) == SQLITE_ROW) {
            if (cols[0]) strcat(cols, ",");
            strcat(cols, (const char *)sqlite3_column_text(st, 0));
        }
        sqlite3_finalize(st);
        cr_assert_str_eq(cols, want[i][1], "%s", want[i][0]);
    }
    sqlite3_close(d);
}

/* A database of schema 1 (the tables before volunteers) is migrated one step, its rows
 * kept. Made by taking a fresh database back to version 1 with SQLite itself. */
Test(hub_store, schema_one_is_migrated_keeping_its_rows) {
    goblin_hub_store *s = open_store();
    goblin_hub_account a;
    cr_assert_eq(goblin_hub_store_account_ensure(s, "old@example.org", 7, &a), GOBLIN_OK);
    goblin_hub_store_close(s);
    sql_do("DROP TABLE worker_work; DROP TABLE worker_link; DROP TABLE link_seed; PRAGMA user_version = 1;");
    s = open_store();
    int32_t v = 0;
    cr_assert_eq(goblin_hub_store_schema_version(s, &v), GOBLIN_OK);
    cr_assert_eq(v, 2);
    goblin_hub_account b;
    cr_assert_eq(goblin_hub_store_account_get(s, a.id, &b), GOBLIN_OK);
    cr_assert_str_eq(b.email, "old@example.org");
    char f[65];
    links_fp(1, f);
    cr_assert_eq(goblin_hub_store_link_add(s, a.id, f, 9), GOBLIN_OK, "%s", goblin_hub_store_error(s));
    goblin_hub_store_close(s);
    cr_assert_eq(sql_int("SELECT count(*) FROM worker_link"), 1);
}
