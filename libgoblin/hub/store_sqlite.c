/* libgoblin/hub/store_sqlite.c - the hub's store in one SQLite database file.
 *
 * Every value is bound as a parameter (sqlite3_bind_*); no SQL text is ever built
 * from input. WAL mode and a busy timeout let `goblin-hub requests` write while the
 * hub serves. Migrations are numbered steps in `migrations`, applied in order inside
 * one transaction each, the version kept in PRAGMA user_version. */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "store_sqlite_impl.h"

/* Step i brings the schema from version i to i + 1. Append only. */
static const char *const migrations[] = {
    "CREATE TABLE account (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE,"
    "  created INTEGER NOT NULL);"
    "CREATE TABLE signin (id INTEGER PRIMARY KEY, email TEXT NOT NULL,"
    "  code_digest BLOB NOT NULL, link_digest BLOB NOT NULL, created INTEGER NOT NULL,"
    "  expires INTEGER NOT NULL, used INTEGER NOT NULL DEFAULT 0,"
    "  failures INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX signin_email ON signin(email);"
    "CREATE TABLE event (key TEXT NOT NULL, at INTEGER NOT NULL);"
    "CREATE INDEX event_key ON event(key, at);"
    "CREATE TABLE session (digest BLOB PRIMARY KEY, account INTEGER NOT NULL REFERENCES account(id),"
    "  created INTEGER NOT NULL, expires INTEGER NOT NULL);"
    "CREATE TABLE access_request (id INTEGER PRIMARY KEY,"
    "  account INTEGER NOT NULL REFERENCES account(id), name TEXT NOT NULL,"
    "  institution TEXT NOT NULL, purpose TEXT NOT NULL, expected_use TEXT NOT NULL,"
    "  status INTEGER NOT NULL DEFAULT 0, note TEXT NOT NULL DEFAULT '',"
    "  created INTEGER NOT NULL, decided INTEGER NOT NULL DEFAULT 0);"
    "CREATE TABLE node_key (id INTEGER PRIMARY KEY, account INTEGER NOT NULL REFERENCES account(id),"
    "  label TEXT NOT NULL, digest BLOB NOT NULL, created INTEGER NOT NULL,"
    "  revoked INTEGER NOT NULL DEFAULT 0);"
    "CREATE TABLE quarantine (id INTEGER PRIMARY KEY, subject TEXT NOT NULL, reason TEXT NOT NULL,"
    "  reported_by TEXT NOT NULL, created INTEGER NOT NULL, lifted INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX quarantine_subject ON quarantine(subject);",
    /* 2: volunteers' worker identities (fingerprints only), their work, link-code seeds. */
    "CREATE TABLE link_seed (account INTEGER PRIMARY KEY REFERENCES account(id), seed BLOB NOT NULL,"
    "  created INTEGER NOT NULL);"
    "CREATE TABLE worker_link (fingerprint TEXT PRIMARY KEY,"
    "  account INTEGER NOT NULL REFERENCES account(id), created INTEGER NOT NULL);"
    "CREATE INDEX worker_link_account ON worker_link(account);"
    "CREATE TABLE worker_work (fingerprint TEXT PRIMARY KEY, tasks INTEGER NOT NULL DEFAULT 0,"
    "  accepted INTEGER NOT NULL DEFAULT 0, rejected INTEGER NOT NULL DEFAULT 0,"
    "  touched INTEGER NOT NULL);"
    "CREATE INDEX worker_work_touched ON worker_work(touched);",
};
#define N_MIGRATIONS ((int32_t)(sizeof migrations / sizeof migrations[0]))
_Static_assert(N_MIGRATIONS == GOBLIN_HUB_STORE_SCHEMA_VERSION, "one migration per version");


static goblin_err migrate(sq *s, char *msg, size_t cap) {
    int32_t v;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "PRAGMA user_version", msg, cap, "");
    if (e) return e;
    v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
    sqlite3_finalize(st);
    if (v < 0) return db_errf(s, msg, cap, "read the schema version");
    if (v > N_MIGRATIONS)
        return goblin__errf(msg, cap, GOBLIN_EVERSION,
                            "hub store: the database has schema version %d; this hub knows up to %d",
                            (int)v, (int)N_MIGRATIONS);
    for (; v < N_MIGRATIONS; v++) {
        char set[64];
        snprintf(set, sizeof set, "PRAGMA user_version = %d", (int)(v + 1));
        if ((e = exec_sql(s, "BEGIN IMMEDIATE", msg, cap))) return e;
        if ((e = exec_sql(s, migrations[v], msg, cap)) || (e = exec_sql(s, set, msg, cap))) {
            exec_sql(s, "ROLLBACK", NULL, 0);
            return e;
        }
        if ((e = exec_sql(s, "COMMIT", msg, cap))) return e;
    }
    return GOBLIN_OK;
}

static void sq_close(void *b) {
    sq *s = b;
    if (!s) return;
    sqlite3_close(s->db);
    goblin__free(s);
}

static goblin_err sq_schema_version(void *b, int32_t *out, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "PRAGMA user_version", msg, cap, "");
    if (e) return e;
    if (sqlite3_step(st) == SQLITE_ROW) *out = sqlite3_column_int(st, 0);
    else e = db_errf(s, msg, cap, "read the schema version");
    sqlite3_finalize(st);
    return e;
}

static void row_account(sqlite3_stmt *st, goblin_hub_account *a) {
    a->id = sqlite3_column_int64(st, 0);
    col_text(st, 1, a->email, sizeof a->email);
    a->created = sqlite3_column_int64(st, 2);
}

static goblin_err sq_account_ensure(void *b, const char *email, int64_t now, goblin_hub_account *out,
                                    char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "INSERT OR IGNORE INTO account (email, created) VALUES (?, ?)", msg,
                        cap, "si", email, now);
    if (e || (e = run(s, st, NULL, msg, cap))) return e;
    if ((e = prep(s, &st, "SELECT id, email, created FROM account WHERE email = ?", msg, cap, "s",
                  email)))
        return e;
    if (sqlite3_step(st) == SQLITE_ROW) row_account(st, out);
    else e = db_errf(s, msg, cap, "read the account back");
    sqlite3_finalize(st);
    return e;
}

static goblin_err sq_account_get(void *b, int64_t id, goblin_hub_account *out, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "SELECT id, email, created FROM account WHERE id = ?", msg, cap, "i", id);
    if (e) return e;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) row_account(st, out);
    else if (rc == SQLITE_DONE) e = goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no account %lld", (long long)id);
    else e = db_errf(s, msg, cap, "read an account");
    sqlite3_finalize(st);
    return e;
}

static goblin_err sq_signin_add(void *b, const char *email, const uint8_t code[32],
                                const uint8_t link[32], int64_t now, int64_t expires, char *msg,
                                size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st,
                        "INSERT INTO signin (email, code_digest, link_digest, created, expires)"
                        " VALUES (?, ?, ?, ?, ?)",
                        msg, cap, "sbbii", email, code, link, now, expires);
    return e ? e : run(s, st, NULL, msg, cap);
}

static goblin_err sq_signin_each(void *b, const char *email, int64_t now, int32_t max_failures,
                                 goblin__hub_code_fn each, void *ctx, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st,
                        "SELECT id, code_digest, link_digest, created, expires, failures FROM signin"
                        " WHERE email = ? AND used = 0 AND expires > ? AND failures < ?"
                        " ORDER BY id DESC LIMIT 16",
                        msg, cap, "sii", email, now, (int64_t)max_failures);
    if (e) return e;
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        goblin_hub_signin_code c;
        c.id = sqlite3_column_int64(st, 0);
        col_digest(st, 1, c.code_digest);
        col_digest(st, 2, c.link_digest);
        c.created = sqlite3_column_int64(st, 3);
        c.expires = sqlite3_column_int64(st, 4);
        c.failures = sqlite3_column_int(st, 5);
        e = each(ctx, &c);
    }
    if (!e && rc != SQLITE_DONE) e = db_errf(s, msg, cap, "read sign-ins");
    sqlite3_finalize(st);
    return e;
}

static goblin_err sq_signin_use(void *b, int64_t id, int64_t now, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    int n = 0;
    goblin_err e = prep(s, &st, "UPDATE signin SET used = ? WHERE id = ? AND used = 0", msg, cap, "ii",
                        now > 0 ? now : 1, id);
    if (e || (e = run(s, st, &n, msg, cap))) return e;
    return n == 1 ? GOBLIN_OK : goblin__errf(msg, cap, GOBLIN_EAUTH, "this sign-in was already used");
}

static goblin_err sq_signin_fail(void *b, const char *email, int64_t now, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st,
                        "UPDATE signin SET failures = failures + 1 WHERE email = ? AND used = 0"
                        " AND expires > ?",
                        msg, cap, "si", email, now);
    return e ? e : run(s, st, NULL, msg, cap);
}

static goblin_err sq_event_add(void *b, const char *key, int64_t now, int64_t forget_before, char *msg,
                               size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "DELETE FROM event WHERE at < ?", msg, cap, "i", forget_before);
    if (e || (e = run(s, st, NULL, msg, cap))) return e;
    if ((e = prep(s, &st, "INSERT INTO event (key, at) VALUES (?, ?)", msg, cap, "si", key, now)))
        return e;
    return run(s, st, NULL, msg, cap);
}

static goblin_err sq_event_count(void *b, const char *key, int64_t since, int64_t *out, char *msg,
                                 size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "SELECT count(*) FROM event WHERE key = ? AND at >= ?", msg, cap, "si",
                        key, since);
    if (e) return e;
    if (sqlite3_step(st) == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
    else e = db_errf(s, msg, cap, "count events");
    sqlite3_finalize(st);
    return e;
}

static goblin_err sq_session_add(void *b, const uint8_t digest[32], int64_t account, int64_t now,
                                 int64_t expires, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "DELETE FROM session WHERE expires <= ?", msg, cap, "i", now);
    if (e || (e = run(s, st, NULL, msg, cap))) return e;
    if ((e = prep(s, &st, "INSERT INTO session (digest, account, created, expires) VALUES (?, ?, ?, ?)",
                  msg, cap, "biii", digest, account, now, expires)))
        return e;
    return run(s, st, NULL, msg, cap);
}

static goblin_err sq_session_get(void *b, const uint8_t digest[32], int64_t now, int64_t *account,
                                 char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "SELECT account FROM session WHERE digest = ? AND expires > ?", msg, cap,
                        "bi", digest, now);
    if (e) return e;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *account = sqlite3_column_int64(st, 0);
    else if (rc == SQLITE_DONE) e = goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no such session");
    else e = db_errf(s, msg, cap, "read a session");
    sqlite3_finalize(st);
    return e;
}

static goblin_err sq_session_end(void *b, const uint8_t digest[32], char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "DELETE FROM session WHERE digest = ?", msg, cap, "b", digest);
    return e ? e : run(s, st, NULL, msg, cap);
}

#define REQUEST_COLS                                                                        \
    "SELECT r.id, r.account, a.email, r.name, r.institution, r.purpose, r.expected_use,"   \
    " r.status, r.note, r.created, r.decided FROM access_request r JOIN account a ON a.id = r.account"

static void row_request(sqlite3_stmt *st, goblin_hub_access_request *r) {
    r->id = sqlite3_column_int64(st, 0);
    r->account_id = sqlite3_column_int64(st, 1);
    col_text(st, 2, r->email, sizeof r->email);
    col_text(st, 3, r->name, sizeof r->name);
    col_text(st, 4, r->institution, sizeof r->institution);
    col_text(st, 5, r->purpose, sizeof r->purpose);
    col_text(st, 6, r->expected_use, sizeof r->expected_use);
    r->status = (goblin_hub_request_status)sqlite3_column_int(st, 7);
    col_text(st, 8, r->note, sizeof r->note);
    r->created = sqlite3_column_int64(st, 9);
    r->decided = sqlite3_column_int64(st, 10);
}

static goblin_err sq_request_add(void *b, int64_t account, const goblin_hub_access_request *r,
                                 int64_t now, int64_t *id, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st,
                        "INSERT INTO access_request (account, name, institution, purpose, expected_use,"
                        " created) VALUES (?, ?, ?, ?, ?, ?)",
                        msg, cap, "issssi", account, r->name, r->institution, r->purpose,
                        r->expected_use, now);
    if (e || (e = run(s, st, NULL, msg, cap))) return e;
    *id = sqlite3_last_insert_rowid(s->db);
    return GOBLIN_OK;
}

static goblin_err sq_request_get(void *b, int64_t id, goblin_hub_access_request *out, char *msg,
                                 size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, REQUEST_COLS " WHERE r.id = ?", msg, cap, "i", id);
    if (e) return e;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) row_request(st, out);
    else if (rc == SQLITE_DONE) e = goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no access request %lld", (long long)id);
    else e = db_errf(s, msg, cap, "read an access request");
    sqlite3_finalize(st);
    return e;
}

static goblin_err sq_request_each(void *b, int64_t account, int32_t status, int32_t limit,
                                  goblin__hub_request_fn each, void *ctx, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st,
                        REQUEST_COLS " WHERE (? = 0 OR r.account = ?) AND (? < 0 OR r.status = ?)"
                                     " ORDER BY r.id LIMIT ?",
                        msg, cap, "iiiii", account, account, (int64_t)status, (int64_t)status,
                        (int64_t)limit);
    if (e) return e;
    goblin_hub_access_request *r = goblin__alloc(sizeof *r);
    if (!r) {
        sqlite3_finalize(st);
        return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    }
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        row_request(st, r);
        e = each(ctx, r);
    }
    if (!e && rc != SQLITE_DONE) e = db_errf(s, msg, cap, "read access requests");
    goblin__free(r);
    sqlite3_finalize(st);
    return e;
}

static goblin_err sq_request_decide(void *b, int64_t id, goblin_hub_request_status status,
                                    const char *note, int64_t now, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    int n = 0;
    goblin_err e = prep(s, &st,
                        "UPDATE access_request SET status = ?, note = ?, decided = ?"
                        " WHERE id = ? AND status = 0",
                        msg, cap, "isii", (int64_t)status, note, now, id);
    if (e || (e = run(s, st, &n, msg, cap))) return e;
    if (n == 1) return GOBLIN_OK;
    goblin_hub_access_request *r = goblin__alloc(sizeof *r);
    if (!r) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    e = sq_request_get(b, id, r, msg, cap);
    if (!e)
        e = goblin__errf(msg, cap, GOBLIN_ESTATE, "access request %lld was already %s", (long long)id,
                         goblin_hub_request_status_name(r->status));
    goblin__free(r);
    return e;
}

static goblin_err sq_account_approved(void *b, int64_t account, bool *out, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "SELECT count(*) FROM access_request WHERE account = ? AND status = 1",
                        msg, cap, "i", account);
    if (e) return e;
    if (sqlite3_step(st) == SQLITE_ROW) *out = sqlite3_column_int64(st, 0) > 0;
    else e = db_errf(s, msg, cap, "read approvals");
    sqlite3_finalize(st);
    return e;
}

static goblin_err sq_key_add(void *b, int64_t account, const char *label, const uint8_t digest[32],
                             int64_t now, int64_t *id, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "INSERT INTO node_key (account, label, digest, created) VALUES (?, ?, ?, ?)",
                        msg, cap, "isbi", account, label, digest, now);
    if (e || (e = run(s, st, NULL, msg, cap))) return e;
    *id = sqlite3_last_insert_rowid(s->db);
    return GOBLIN_OK;
}

static void row_key(sqlite3_stmt *st, goblin_hub_node_key *k) {
    k->id = sqlite3_column_int64(st, 0);
    k->account_id = sqlite3_column_int64(st, 1);
    col_text(st, 2, k->label, sizeof k->label);
    k->created = sqlite3_column_int64(st, 3);
    k->revoked = sqlite3_column_int64(st, 4);
}

static goblin_err sq_key_each(void *b, int64_t account, goblin__hub_key_fn each, void *ctx, char *msg,
                              size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st,
                        "SELECT id, account, label, created, revoked FROM node_key WHERE account = ?"
                        " ORDER BY id",
                        msg, cap, "i", account);
    if (e) return e;
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        goblin_hub_node_key k;
        row_key(st, &k);
        e = each(ctx, &k);
    }
    if (!e && rc != SQLITE_DONE) e = db_errf(s, msg, cap, "read node keys");
    sqlite3_finalize(st);
    return e;
}

static goblin_err sq_key_revoke(void *b, int64_t account, int64_t id, int64_t now, char *msg,
                                size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    int n = 0;
    goblin_err e = prep(s, &st, "UPDATE node_key SET revoked = ? WHERE id = ? AND account = ? AND revoked = 0",
                        msg, cap, "iii", now > 0 ? now : 1, id, account);
    if (e || (e = run(s, st, &n, msg, cap))) return e;
    if (n == 1) return GOBLIN_OK;
    if ((e = prep(s, &st, "SELECT revoked FROM node_key WHERE id = ? AND account = ?", msg, cap, "ii",
                  id, account)))
        return e;
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW)
        return goblin__errf(msg, cap, GOBLIN_ESTATE, "node key %lld is already revoked", (long long)id);
    return goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no node key %lld on this account", (long long)id);
}

static goblin_err sq_key_check(void *b, int64_t id, const uint8_t digest[32], goblin_hub_node_key *out,
                               char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st,
                        "SELECT id, account, label, created, revoked, digest FROM node_key WHERE id = ?",
                        msg, cap, "i", id);
    if (e) return e;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        uint8_t d[32];
        col_digest(st, 5, d);
        unsigned diff = 0;
        for (int i = 0; i < 32; i++) diff |= (unsigned)(d[i] ^ digest[i]);
        row_key(st, out);
        if (diff) e = goblin__errf(msg, cap, GOBLIN_EAUTH, "wrong node key");
        else if (out->revoked) e = goblin__errf(msg, cap, GOBLIN_EAUTH, "node key %lld was revoked", (long long)id);
    } else if (rc == SQLITE_DONE) {
        e = goblin__errf(msg, cap, GOBLIN_EAUTH, "no such node key");
    } else {
        e = db_errf(s, msg, cap, "read a node key");
    }
    sqlite3_finalize(st);
    return e;
}

static goblin_err sq_quarantine_add(void *b, const char *subject, const char *reason,
                                    const char *reported_by, int64_t now, int64_t *id, char *msg,
                                    size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st,
                        "INSERT INTO quarantine (subject, reason, reported_by, created) VALUES (?, ?, ?, ?)",
                        msg, cap, "sssi", subject, reason, reported_by, now);
    if (e || (e = run(s, st, NULL, msg, cap))) return e;
    *id = sqlite3_last_insert_rowid(s->db);
    return GOBLIN_OK;
}

static goblin_err sq_quarantine_lift(void *b, int64_t id, int64_t now, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    int n = 0;
    goblin_err e = prep(s, &st, "UPDATE quarantine SET lifted = ? WHERE id = ? AND lifted = 0", msg, cap,
                        "ii", now > 0 ? now : 1, id);
    if (e || (e = run(s, st, &n, msg, cap))) return e;
    if (n == 1) return GOBLIN_OK;
    if ((e = prep(s, &st, "SELECT 1 FROM quarantine WHERE id = ?", msg, cap, "i", id))) return e;
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW
               ? goblin__errf(msg, cap, GOBLIN_ESTATE, "quarantine %lld is already lifted", (long long)id)
               : goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no quarantine %lld", (long long)id);
}

static goblin_err sq_quarantined(void *b, const char *subject, bool *out, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "SELECT count(*) FROM quarantine WHERE subject = ? AND lifted = 0", msg,
                        cap, "s", subject);
    if (e) return e;
    if (sqlite3_step(st) == SQLITE_ROW) *out = sqlite3_column_int64(st, 0) > 0;
    else e = db_errf(s, msg, cap, "read quarantines");
    sqlite3_finalize(st);
    return e;
}

static goblin_err sq_quarantine_each(void *b, bool all, goblin__hub_quarantine_fn each, void *ctx,
                                     char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st,
                        "SELECT id, subject, reason, reported_by, created, lifted FROM quarantine"
                        " WHERE ? OR lifted = 0 ORDER BY id",
                        msg, cap, "i", (int64_t)all);
    if (e) return e;
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        goblin_hub_quarantine q;
        q.id = sqlite3_column_int64(st, 0);
        col_text(st, 1, q.subject, sizeof q.subject);
        col_text(st, 2, q.reason, sizeof q.reason);
        col_text(st, 3, q.reported_by, sizeof q.reported_by);
        q.created = sqlite3_column_int64(st, 4);
        q.lifted = sqlite3_column_int64(st, 5);
        e = each(ctx, &q);
    }
    if (!e && rc != SQLITE_DONE) e = db_errf(s, msg, cap, "read quarantines");
    sqlite3_finalize(st);
    return e;
}

static const goblin__hub_store_ops sqlite_ops = {
    .version = GOBLIN__HUB_STORE_OPS_VERSION,
    .name = "sqlite",
    .close = sq_close,
    .schema_version = sq_schema_version,
    .account_ensure = sq_account_ensure,
    .account_get = sq_account_get,
    .signin_add = sq_signin_add,
    .signin_each = sq_signin_each,
    .signin_use = sq_signin_use,
    .signin_fail = sq_signin_fail,
    .event_add = sq_event_add,
    .event_count = sq_event_count,
    .session_add = sq_session_add,
    .session_get = sq_session_get,
    .session_end = sq_session_end,
    .request_add = sq_request_add,
    .request_get = sq_request_get,
    .request_each = sq_request_each,
    .request_decide = sq_request_decide,
    .account_approved = sq_account_approved,
    .key_add = sq_key_add,
    .key_each = sq_key_each,
    .key_revoke = sq_key_revoke,
    .key_check = sq_key_check,
    .quarantine_add = sq_quarantine_add,
    .quarantine_lift = sq_quarantine_lift,
    .quarantined = sq_quarantined,
    .quarantine_each = sq_quarantine_each,
    .link_add = goblin__hub_sq_link_add,
    .link_remove = goblin__hub_sq_link_remove,
    .link_each = goblin__hub_sq_link_each,
    .link_get = goblin__hub_sq_link_get,
    .work_add = goblin__hub_sq_work_add,
    .link_seed_get = goblin__hub_sq_link_seed_get,
    .link_seed_set = goblin__hub_sq_link_seed_set,
};

goblin_err goblin__hub_sqlite_open(const char *path, const goblin__hub_store_ops **ops, void **backend,
                                   char *msg, size_t cap) {
    sq *s = goblin__calloc(1, sizeof *s);
    if (!s) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    /* The database holds addresses and digests: readable by its owner only (SQLite
     * gives its -wal and -shm files the same mode). */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        goblin__free(s);
        return goblin__errf(msg, cap, GOBLIN_EIO, "hub store: cannot open %s: %s", path, strerror(errno));
    }
    close(fd);
    int rc = sqlite3_open_v2(path, &s->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        goblin_err e = s->db ? db_errf(s, msg, cap, path)
                             : goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory opening %s", path);
        sq_close(s);
        return e;
    }
    sqlite3_busy_timeout(s->db, 5000);
    sqlite3_extended_result_codes(s->db, 1);
    goblin_err e = exec_sql(s, "PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON;", msg, cap);
    if (!e) e = migrate(s, msg, cap);
    if (e) {
        sq_close(s);
        return e;
    }
    *ops = &sqlite_ops;
    *backend = s;
    return GOBLIN_OK;
}
