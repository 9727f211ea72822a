/* libgoblin/hub/store_postgres.c - the hub's store in a PostgreSQL database (libpq),
 * for a hub that outgrows one machine or runs as several instances.
 *
 * The same operations as store_sqlite.c, one connection per store (store.c
 * serializes its calls). Every value is sent as a parameter (PQexecParams: text for
 * numbers and strings, binary for digests); digests come back hex-encoded. The schema
 * version is the one row of goblin_hub_schema; migrations run under an advisory lock,
 * so instances starting together migrate once. */
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "store_impl.h"

typedef struct pg {
    PGconn *c;
} pg;

/* Step i brings the schema from version i to i + 1. Append only. */
static const char *const migrations[] = {
    "CREATE TABLE account (id BIGSERIAL PRIMARY KEY, email TEXT NOT NULL UNIQUE, created BIGINT NOT NULL);"
    "CREATE TABLE signin (id BIGSERIAL PRIMARY KEY, email TEXT NOT NULL, code_digest BYTEA NOT NULL,"
    "  link_digest BYTEA NOT NULL, created BIGINT NOT NULL, expires BIGINT NOT NULL,"
    "  used BIGINT NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX signin_email ON signin(email);"
    "CREATE TABLE event (key TEXT NOT NULL, at BIGINT NOT NULL);"
    "CREATE INDEX event_key ON event(key, at);"
    "CREATE TABLE session (digest BYTEA PRIMARY KEY, account BIGINT NOT NULL REFERENCES account(id),"
    "  created BIGINT NOT NULL, expires BIGINT NOT NULL);"
    "CREATE TABLE access_request (id BIGSERIAL PRIMARY KEY, account BIGINT NOT NULL REFERENCES account(id),"
    "  name TEXT NOT NULL, institution TEXT NOT NULL, purpose TEXT NOT NULL, expected_use TEXT NOT NULL,"
    "  status INTEGER NOT NULL DEFAULT 0, note TEXT NOT NULL DEFAULT '', created BIGINT NOT NULL,"
    "  decided BIGINT NOT NULL DEFAULT 0);"
    "CREATE TABLE node_key (id BIGSERIAL PRIMARY KEY, account BIGINT NOT NULL REFERENCES account(id),"
    "  label TEXT NOT NULL, digest BYTEA NOT NULL, created BIGINT NOT NULL, revoked BIGINT NOT NULL DEFAULT 0);"
    "CREATE TABLE quarantine (id BIGSERIAL PRIMARY KEY, subject TEXT NOT NULL, reason TEXT NOT NULL,"
    "  reported_by TEXT NOT NULL, created BIGINT NOT NULL, lifted BIGINT NOT NULL DEFAULT 0);"
    "CREATE INDEX quarantine_subject ON quarantine(subject);",
    /* 2: volunteers' worker identities (fingerprints only), their work, link-code seeds. */
    "CREATE TABLE link_seed (account BIGINT PRIMARY KEY REFERENCES account(id), seed BYTEA NOT NULL,"
    "  created BIGINT NOT NULL);"
    "CREATE TABLE worker_link (fingerprint TEXT PRIMARY KEY, account BIGINT NOT NULL REFERENCES account(id),"
    "  created BIGINT NOT NULL);"
    "CREATE INDEX worker_link_account ON worker_link(account);"
    "CREATE SEQUENCE worker_work_touched;"
    "CREATE TABLE worker_work (fingerprint TEXT PRIMARY KEY, tasks BIGINT NOT NULL DEFAULT 0,"
    "  accepted BIGINT NOT NULL DEFAULT 0, rejected BIGINT NOT NULL DEFAULT 0, touched BIGINT NOT NULL);"
    "CREATE INDEX worker_work_by_touched ON worker_work(touched);",
};
#define N_MIGRATIONS ((int32_t)(sizeof migrations / sizeof migrations[0]))
_Static_assert(N_MIGRATIONS == GOBLIN_HUB_STORE_SCHEMA_VERSION, "one migration per version");

/* Bound on the parameters of one statement. */
#define MAX_PARAMS 8

static goblin_err pg_errf(pg *p, const PGresult *r, char *msg, size_t cap, const char *what) {
    const char *m = r ? PQresultErrorMessage(r) : PQerrorMessage(p->c);
    char clean[300];
    snprintf(clean, sizeof clean, "%s", m && *m ? m : "failed");
    clean[strcspn(clean, "\n")] = 0;
    return goblin__errf(msg, cap, GOBLIN_EIO, "hub store (postgresql): %s: %s", what, clean);
}

/* Run @p sql with the values described by @p fmt ('i' int64, 's' text, 'b' 32-byte
 * digest). *out (may be NULL) gets the result on success; PQclear it. */
static goblin_err run(pg *p, PGresult **out, const char *sql, char *msg, size_t cap, const char *fmt, ...) {
    const char *vals[MAX_PARAMS];
    int lens[MAX_PARAMS], formats[MAX_PARAMS];
    char nums[MAX_PARAMS][24];
    int n = (int)strlen(fmt);
    if (n > MAX_PARAMS) return goblin__errf(msg, cap, GOBLIN_EINTERNAL, "too many parameters");
    va_list ap;
    va_start(ap, fmt);
    for (int i = 0; i < n; i++) {
        lens[i] = 0;
        formats[i] = 0;
        if (fmt[i] == 'i') {
            snprintf(nums[i], sizeof nums[i], "%lld", (long long)va_arg(ap, int64_t));
            vals[i] = nums[i];
        } else if (fmt[i] == 's') {
            vals[i] = va_arg(ap, const char *);
        } else {
            vals[i] = (const char *)va_arg(ap, const uint8_t *);
            lens[i] = 32;
            formats[i] = 1;
        }
    }
    va_end(ap);
    PGresult *r = PQexecParams(p->c, sql, n, NULL, vals, lens, formats, 0);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        goblin_err e = pg_errf(p, r, msg, cap, "statement");
        PQclear(r);
        return e;
    }
    if (out) *out = r;
    else PQclear(r);
    return GOBLIN_OK;
}

/* A migration step: the hub's own constant text of several statements, no values
 * (PQexecParams takes one statement). */
static goblin_err run_script(pg *p, const char *sql, char *msg, size_t cap) {
    PGresult *r = PQexec(p->c, sql);
    goblin_err e = r && PQresultStatus(r) == PGRES_COMMAND_OK ? GOBLIN_OK : pg_errf(p, r, msg, cap, "migration");
    PQclear(r);
    return e;
}

static int64_t v_i64(const PGresult *r, int row, int col) { return strtoll(PQgetvalue(r, row, col), NULL, 10); }

static void v_text(const PGresult *r, int row, int col, char *out, size_t cap) {
    const char *t = PQgetvalue(r, row, col);
    size_t k = (size_t)PQgetlength(r, row, col);
    if (k >= cap) k = cap - 1;
    memcpy(out, t, k);
    out[k] = 0;
}

/* A bytea column read as encode(x, 'hex'). */
static void v_digest(const PGresult *r, int row, int col, uint8_t out[32]) {
    const char *t = PQgetvalue(r, row, col);
    memset(out, 0, 32);
    if (PQgetlength(r, row, col) != 64) return;
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(t + 2 * i, "%2x", &v) != 1) return;
        out[i] = (uint8_t)v;
    }
}

static int changed(const PGresult *r) { return atoi(PQcmdTuples((PGresult *)r)); }

static goblin_err migrate(pg *p, char *msg, size_t cap) {
    goblin_err e;
    PGresult *r;
    if ((e = run(p, NULL, "SELECT pg_advisory_lock(7105946137)", msg, cap, ""))) return e;
    if ((e = run(p, NULL, "CREATE TABLE IF NOT EXISTS goblin_hub_schema (version INTEGER NOT NULL)", msg, cap, "")) ||
        (e = run(p, &r, "SELECT max(version) FROM goblin_hub_schema", msg, cap, "")))
        goto out;
    int32_t v = PQgetisnull(r, 0, 0) ? 0 : (int32_t)v_i64(r, 0, 0);
    PQclear(r);
    if (v > N_MIGRATIONS) {
        e = goblin__errf(msg, cap, GOBLIN_EVERSION,
                         "hub store: the database has schema version %d; this hub knows up to %d", (int)v,
                         (int)N_MIGRATIONS);
        goto out;
    }
    for (; v < N_MIGRATIONS; v++) {
        if ((e = run(p, NULL, "BEGIN", msg, cap, ""))) goto out;
        if ((e = run_script(p, migrations[v], msg, cap)) ||
            (e = run(p, NULL, "DELETE FROM goblin_hub_schema", msg, cap, "")) ||
            (e = run(p, NULL, "INSERT INTO goblin_hub_schema (version) VALUES ($1)", msg, cap, "i", (int64_t)v + 1))) {
            run(p, NULL, "ROLLBACK", NULL, 0, "");
            goto out;
        }
        if ((e = run(p, NULL, "COMMIT", msg, cap, ""))) goto out;
    }
out:
    run(p, NULL, "SELECT pg_advisory_unlock(7105946137)", NULL, 0, "");
    return e;
}

static void pg_close(void *b) {
    pg *p = b;
    if (!p) return;
    if (p->c) PQfinish(p->c);
    goblin__free(p);
}

static goblin_err pg_schema_version(void *b, int32_t *out, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "SELECT max(version) FROM goblin_hub_schema", msg, cap, "");
    if (e) return e;
    *out = (int32_t)v_i64(r, 0, 0);
    PQclear(r);
    return GOBLIN_OK;
}

/* One row expected: ENOTFOUND with @p what otherwise. */
static goblin_err one_row(PGresult *r, char *msg, size_t cap, const char *what, long long id) {
    if (PQntuples(r) == 1) return GOBLIN_OK;
    PQclear(r);
    return goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no %s %lld", what, id);
}

static void row_account(PGresult *r, goblin_hub_account *a) {
    a->id = v_i64(r, 0, 0);
    v_text(r, 0, 1, a->email, sizeof a->email);
    a->created = v_i64(r, 0, 2);
}

static goblin_err pg_account_ensure(void *b, const char *email, int64_t now, goblin_hub_account *out, char *msg,
                                    size_t cap) {
    PGresult *r;
    goblin_err e = run(b, NULL, "INSERT INTO account (email, created) VALUES ($1, $2) ON CONFLICT (email) DO NOTHING",
                       msg, cap, "si", email, now);
    if (e || (e = run(b, &r, "SELECT id, email, created FROM account WHERE email = $1", msg, cap, "s", email)))
        return e;
    if ((e = one_row(r, msg, cap, "account", 0))) return e;
    row_account(r, out);
    PQclear(r);
    return GOBLIN_OK;
}

static goblin_err pg_account_get(void *b, int64_t id, goblin_hub_account *out, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "SELECT id, email, created FROM account WHERE id = $1", msg, cap, "i", id);
    if (e || (e = one_row(r, msg, cap, "account", (long long)id))) return e;
    row_account(r, out);
    PQclear(r);
    return GOBLIN_OK;
}

static goblin_err pg_signin_add(void *b, const char *email, const uint8_t code[32], const uint8_t link[32],
                                int64_t now, int64_t expires, char *msg, size_t cap) {
    return run(b, NULL,
               "INSERT INTO signin (email, code_digest, link_digest, created, expires) VALUES ($1, $2, $3, $4, $5)",
               msg, cap, "sbbii", email, code, link, now, expires);
}

static goblin_err pg_signin_each(void *b, const char *email, int64_t now, int32_t max_failures,
                                 goblin__hub_code_fn each, void *ctx, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r,
                       "SELECT id, encode(code_digest, 'hex'), encode(link_digest, 'hex'), created, expires, failures"
                       " FROM signin WHERE email = $1 AND used = 0 AND expires > $2 AND failures < $3"
                       " ORDER BY id DESC LIMIT 16",
                       msg, cap, "sii", email, now, (int64_t)max_failures);
    if (e) return e;
    for (int i = 0; !e && i < PQntuples(r); i++) {
        goblin_hub_signin_code c;
        c.id = v_i64(r, i, 0);
        v_digest(r, i, 1, c.code_digest);
        v_digest(r, i, 2, c.link_digest);
        c.created = v_i64(r, i, 3);
        c.expires = v_i64(r, i, 4);
        c.failures = (int32_t)v_i64(r, i, 5);
        e = each(ctx, &c);
    }
    PQclear(r);
    return e;
}

static goblin_err pg_signin_use(void *b, int64_t id, int64_t now, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "UPDATE signin SET used = $1 WHERE id = $2 AND used = 0", msg, cap, "ii",
                       now > 0 ? now : 1, id);
    if (e) return e;
    int n = changed(r);
    PQclear(r);
    return n == 1 ? GOBLIN_OK : goblin__errf(msg, cap, GOBLIN_EAUTH, "this sign-in was already used");
}

static goblin_err pg_signin_fail(void *b, const char *email, int64_t now, char *msg, size_t cap) {
    return run(b, NULL, "UPDATE signin SET failures = failures + 1 WHERE email = $1 AND used = 0 AND expires > $2",
               msg, cap, "si", email, now);
}

static goblin_err pg_event_add(void *b, const char *key, int64_t now, int64_t forget_before, char *msg,
                               size_t cap) {
    goblin_err e = run(b, NULL, "DELETE FROM event WHERE at < $1", msg, cap, "i", forget_before);
    return e ? e : run(b, NULL, "INSERT INTO event (key, at) VALUES ($1, $2)", msg, cap, "si", key, now);
}

static goblin_err pg_event_count(void *b, const char *key, int64_t since, int64_t *out, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "SELECT count(*) FROM event WHERE key = $1 AND at >= $2", msg, cap, "si", key, since);
    if (e) return e;
    *out = v_i64(r, 0, 0);
    PQclear(r);
    return GOBLIN_OK;
}

static goblin_err pg_session_add(void *b, const uint8_t digest[32], int64_t account, int64_t now,
                                 int64_t expires, char *msg, size_t cap) {
    goblin_err e = run(b, NULL, "DELETE FROM session WHERE expires <= $1", msg, cap, "i", now);
    return e ? e
             : run(b, NULL, "INSERT INTO session (digest, account, created, expires) VALUES ($1, $2, $3, $4)", msg,
                   cap, "biii", digest, account, now, expires);
}

static goblin_err pg_session_get(void *b, const uint8_t digest[32], int64_t now, int64_t *account, char *msg,
                                 size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "SELECT account FROM session WHERE digest = $1 AND expires > $2", msg, cap, "bi",
                       digest, now);
    if (e) return e;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no such session");
    }
    *account = v_i64(r, 0, 0);
    PQclear(r);
    return GOBLIN_OK;
}

static goblin_err pg_session_end(void *b, const uint8_t digest[32], char *msg, size_t cap) {
    return run(b, NULL, "DELETE FROM session WHERE digest = $1", msg, cap, "b", digest);
}

#define REQUEST_COLS                                                                               \
    "SELECT r.id, r.account, a.email, r.name, r.institution, r.purpose, r.expected_use, r.status," \
    " r.note, r.created, r.decided FROM access_request r JOIN account a ON a.id = r.account"

static void row_request(PGresult *r, int i, goblin_hub_access_request *x) {
    x->id = v_i64(r, i, 0);
    x->account_id = v_i64(r, i, 1);
    v_text(r, i, 2, x->email, sizeof x->email);
    v_text(r, i, 3, x->name, sizeof x->name);
    v_text(r, i, 4, x->institution, sizeof x->institution);
    v_text(r, i, 5, x->purpose, sizeof x->purpose);
    v_text(r, i, 6, x->expected_use, sizeof x->expected_use);
    x->status = (goblin_hub_request_status)v_i64(r, i, 7);
    v_text(r, i, 8, x->note, sizeof x->note);
    x->created = v_i64(r, i, 9);
    x->decided = v_i64(r, i, 10);
}

static goblin_err pg_request_add(void *b, int64_t account, const goblin_hub_access_request *x, int64_t now,
                                 int64_t *id, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r,
                       "INSERT INTO access_request (account, name, institution, purpose, expected_use, created)"
                       " VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                       msg, cap, "issssi", account, x->name, x->institution, x->purpose, x->expected_use, now);
    if (e) return e;
    *id = v_i64(r, 0, 0);
    PQclear(r);
    return GOBLIN_OK;
}

static goblin_err pg_request_get(void *b, int64_t id, goblin_hub_access_request *out, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, REQUEST_COLS " WHERE r.id = $1", msg, cap, "i", id);
    if (e || (e = one_row(r, msg, cap, "access request", (long long)id))) return e;
    row_request(r, 0, out);
    PQclear(r);
    return GOBLIN_OK;
}

static goblin_err pg_request_each(void *b, int64_t account, int32_t status, int32_t limit,
                                  goblin__hub_request_fn each, void *ctx, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r,
                       REQUEST_COLS " WHERE ($1::bigint = 0 OR r.account = $1) AND ($2::int < 0 OR r.status = $2)"
                                    " ORDER BY r.id LIMIT $3",
                       msg, cap, "iii", account, (int64_t)status, (int64_t)limit);
    if (e) return e;
    goblin_hub_access_request *x = goblin__alloc(sizeof *x);
    if (!x) {
        PQclear(r);
        return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    }
    for (int i = 0; !e && i < PQntuples(r); i++) {
        row_request(r, i, x);
        e = each(ctx, x);
    }
    goblin__free(x);
    PQclear(r);
    return e;
}

static goblin_err pg_request_decide(void *b, int64_t id, goblin_hub_request_status status, const char *note,
                                    int64_t now, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "UPDATE access_request SET status = $1, note = $2, decided = $3 WHERE id = $4 AND status = 0",
                       msg, cap, "isii", (int64_t)status, note, now, id);
    if (e) return e;
    int n = changed(r);
    PQclear(r);
    if (n == 1) return GOBLIN_OK;
    goblin_hub_access_request *x = goblin__alloc(sizeof *x);
    if (!x) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    e = pg_request_get(b, id, x, msg, cap);
    if (!e)
        e = goblin__errf(msg, cap, GOBLIN_ESTATE, "access request %lld was already %s", (long long)id,
                         goblin_hub_request_status_name(x->status));
    goblin__free(x);
    return e;
}

static goblin_err pg_account_approved(void *b, int64_t account, bool *out, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "SELECT count(*) FROM access_request WHERE account = $1 AND status = 1", msg, cap, "i",
                       account);
    if (e) return e;
    *out = v_i64(r, 0, 0) > 0;
    PQclear(r);
    return GOBLIN_OK;
}

static goblin_err pg_key_add(void *b, int64_t account, const char *label, const uint8_t digest[32], int64_t now,
                             int64_t *id, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "INSERT INTO node_key (account, label, digest, created) VALUES ($1, $2, $3, $4) RETURNING id",
                       msg, cap, "isbi", account, label, digest, now);
    if (e) return e;
    *id = v_i64(r, 0, 0);
    PQclear(r);
    return GOBLIN_OK;
}

static void row_key(PGresult *r, int i, goblin_hub_node_key *k) {
    k->id = v_i64(r, i, 0);
    k->account_id = v_i64(r, i, 1);
    v_text(r, i, 2, k->label, sizeof k->label);
    k->created = v_i64(r, i, 3);
    k->revoked = v_i64(r, i, 4);
}

static goblin_err pg_key_each(void *b, int64_t account, goblin__hub_key_fn each, void *ctx, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "SELECT id, account, label, created, revoked FROM node_key WHERE account = $1 ORDER BY id",
                       msg, cap, "i", account);
    if (e) return e;
    for (int i = 0; !e && i < PQntuples(r); i++) {
        goblin_hub_node_key k;
        row_key(r, i, &k);
        e = each(ctx, &k);
    }
    PQclear(r);
    return e;
}

static goblin_err pg_key_revoke(void *b, int64_t account, int64_t id, int64_t now, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "UPDATE node_key SET revoked = $1 WHERE id = $2 AND account = $3 AND revoked = 0", msg,
                       cap, "iii", now > 0 ? now : 1, id, account);
    if (e) return e;
    int n = changed(r);
    PQclear(r);
    if (n == 1) return GOBLIN_OK;
    if ((e = run(b, &r, "SELECT 1 FROM node_key WHERE id = $1 AND account = $2", msg, cap, "ii", id, account))) return e;
    n = PQntuples(r);
    PQclear(r);
    return n ? goblin__errf(msg, cap, GOBLIN_ESTATE, "node key %lld is already revoked", (long long)id)
             : goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no node key %lld on this account", (long long)id);
}

static goblin_err pg_key_check(void *b, int64_t id, const uint8_t digest[32], goblin_hub_node_key *out, char *msg,
                               size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r,
                       "SELECT id, account, label, created, revoked, encode(digest, 'hex') FROM node_key WHERE id = $1",
                       msg, cap, "i", id);
    if (e) return e;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return goblin__errf(msg, cap, GOBLIN_EAUTH, "no such node key");
    }
    uint8_t d[32];
    v_digest(r, 0, 5, d);
    row_key(r, 0, out);
    PQclear(r);
    unsigned diff = 0;
    for (int i = 0; i < 32; i++) diff |= (unsigned)(d[i] ^ digest[i]);
    if (diff) return goblin__errf(msg, cap, GOBLIN_EAUTH, "wrong node key");
    if (out->revoked) return goblin__errf(msg, cap, GOBLIN_EAUTH, "node key %lld was revoked", (long long)id);
    return GOBLIN_OK;
}

static goblin_err pg_quarantine_add(void *b, const char *subject, const char *reason, const char *reported_by,
                                    int64_t now, int64_t *id, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r,
                       "INSERT INTO quarantine (subject, reason, reported_by, created) VALUES ($1, $2, $3, $4) RETURNING id",
                       msg, cap, "sssi", subject, reason, reported_by, now);
    if (e) return e;
    *id = v_i64(r, 0, 0);
    PQclear(r);
    return GOBLIN_OK;
}

static goblin_err pg_quarantine_lift(void *b, int64_t id, int64_t now, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "UPDATE quarantine SET lifted = $1 WHERE id = $2 AND lifted = 0", msg, cap, "ii",
                       now > 0 ? now : 1, id);
    if (e) return e;
    int n = changed(r);
    PQclear(r);
    if (n == 1) return GOBLIN_OK;
    if ((e = run(b, &r, "SELECT 1 FROM quarantine WHERE id = $1", msg, cap, "i", id))) return e;
    n = PQntuples(r);
    PQclear(r);
    return n ? goblin__errf(msg, cap, GOBLIN_ESTATE, "quarantine %lld is already lifted", (long long)id)
             : goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no quarantine %lld", (long long)id);
}

static goblin_err pg_quarantined(void *b, const char *subject, bool *out, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "SELECT count(*) FROM quarantine WHERE subject = $1 AND lifted = 0", msg, cap, "s",
                       subject);
    if (e) return e;
    *out = v_i64(r, 0, 0) > 0;
    PQclear(r);
    return GOBLIN_OK;
}

static goblin_err pg_quarantine_each(void *b, bool all, goblin__hub_quarantine_fn each, void *ctx, char *msg,
                                     size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r,
                       "SELECT id, subject, reason, reported_by, created, lifted FROM quarantine"
                       " WHERE $1::int = 1 OR lifted = 0 ORDER BY id",
                       msg, cap, "i", (int64_t)all);
    if (e) return e;
    for (int i = 0; !e && i < PQntuples(r); i++) {
        goblin_hub_quarantine q;
        q.id = v_i64(r, i, 0);
        v_text(r, i, 1, q.subject, sizeof q.subject);
        v_text(r, i, 2, q.reason, sizeof q.reason);
        v_text(r, i, 3, q.reported_by, sizeof q.reported_by);
        q.created = v_i64(r, i, 4);
        q.lifted = v_i64(r, i, 5);
        e = each(ctx, &q);
    }
    PQclear(r);
    return e;
}

/* ---- volunteers' links and work ---- */

/* End the transaction a volunteer operation began: COMMIT after success, else ROLLBACK
 * (keeping @p e and its message). */
static goblin_err end_tx(pg *p, goblin_err e, char *msg, size_t cap) {
    if (e) {
        run(p, NULL, "ROLLBACK", NULL, 0, "");
        return e;
    }
    return run(p, NULL, "COMMIT", msg, cap, "");
}

static goblin_err link_owner(pg *p, const char *fp, int64_t *owner, bool *found, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(p, &r, "SELECT account FROM worker_link WHERE fingerprint = $1", msg, cap, "s", fp);
    if (e) return e;
    *found = PQntuples(r) == 1;
    if (*found) *owner = v_i64(r, 0, 0);
    PQclear(r);
    return GOBLIN_OK;
}

static goblin_err link_add_tx(pg *p, int64_t account, const char *fp, int64_t now, int32_t max_links, char *msg,
                              size_t cap) {
    int64_t owner = 0;
    bool found;
    PGresult *r;
    /* The account's row locked: two instances linking into one account count in turn. */
    goblin_err e = run(p, &r, "SELECT id FROM account WHERE id = $1 FOR UPDATE", msg, cap, "i", account);
    if (e) return e;
    int n = PQntuples(r);
    PQclear(r);
    if (!n) return goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no account %lld", (long long)account);
    if ((e = link_owner(p, fp, &owner, &found, msg, cap))) return e;
    if (!found) {
        if ((e = run(p, &r, "SELECT count(*) FROM worker_link WHERE account = $1", msg, cap, "i", account))) return e;
        int64_t have = v_i64(r, 0, 0);
        PQclear(r);
        if (have >= max_links)
            return goblin__errf(msg, cap, GOBLIN_ELIMIT, "an account may link at most %d worker identities; "
                                "unlink one first", (int)max_links);
        /* Another account's insert of the same identity may have come first: then the
         * owner read again is that account. */
        if ((e = run(p, NULL, "INSERT INTO worker_link (fingerprint, account, created) VALUES ($1, $2, $3)"
                              " ON CONFLICT (fingerprint) DO NOTHING",
                     msg, cap, "sii", fp, account, now)) ||
            (e = link_owner(p, fp, &owner, &found, msg, cap)))
            return e;
    }
    if (found && owner != account)
        return goblin__errf(msg, cap, GOBLIN_ESTATE, "this worker identity is linked to another account; "
                            "its owner must unlink it first");
    return GOBLIN_OK;
}

static goblin_err pg_link_add(void *b, int64_t account, const char *fp, int64_t now, int32_t max_links, char *msg,
                              size_t cap) {
    goblin_err e = run(b, NULL, "BEGIN", msg, cap, "");
    return e ? e : end_tx(b, link_add_tx(b, account, fp, now, max_links, msg, cap), msg, cap);
}

static goblin_err pg_link_remove(void *b, int64_t account, const char *fp, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "DELETE FROM worker_link WHERE fingerprint = $1 AND account = $2", msg, cap, "si", fp,
                       account);
    if (e) return e;
    int n = changed(r);
    PQclear(r);
    return n == 1 ? GOBLIN_OK : goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no such worker linked to this account");
}

#define LINK_COLS                                                                                \
    "SELECT l.fingerprint, l.account, l.created, coalesce(w.tasks, 0), coalesce(w.accepted, 0),"   \
    " coalesce(w.rejected, 0) FROM worker_link l LEFT JOIN worker_work w ON w.fingerprint = l.fingerprint"

static void row_link(PGresult *r, int i, goblin_hub_link *l) {
    v_text(r, i, 0, l->fingerprint, sizeof l->fingerprint);
    l->account_id = v_i64(r, i, 1);
    l->created = v_i64(r, i, 2);
    l->tasks = v_i64(r, i, 3);
    l->accepted = v_i64(r, i, 4);
    l->rejected = v_i64(r, i, 5);
}

static goblin_err pg_link_each(void *b, int64_t account, goblin__hub_link_fn each, void *ctx, char *msg,
                               size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, LINK_COLS " WHERE ($1::bigint = 0 OR l.account = $1) ORDER BY l.created, l.fingerprint",
                       msg, cap, "i", account);
    if (e) return e;
    for (int i = 0; !e && i < PQntuples(r); i++) {
        goblin_hub_link l;
        row_link(r, i, &l);
        e = each(ctx, &l);
    }
    PQclear(r);
    return e;
}

static goblin_err pg_link_get(void *b, const char *fp, goblin_hub_link *out, char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r,
                       LINK_COLS " WHERE l.fingerprint = $1 UNION ALL"
                       " SELECT fingerprint, 0, 0, tasks, accepted, rejected FROM worker_work"
                       " WHERE fingerprint = $1 AND fingerprint NOT IN (SELECT fingerprint FROM worker_link)",
                       msg, cap, "s", fp);
    if (e) return e;
    if (PQntuples(r) < 1) {
        PQclear(r);
        return goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "the hub knows nothing of this identity");
    }
    row_link(r, 0, out);
    PQclear(r);
    return GOBLIN_OK;
}

/* Saturating additions: a counter stops at $1 (GOBLIN_HUB_WORK_COUNT_MAX), never
 * overflows a BIGINT. */
#define SAT(col, add) col " = CASE WHEN worker_work." col " > $1::bigint - " add " THEN $1::bigint ELSE worker_work." col \
                      " + " add " END"
/* The counted identities linked to no account (a FROM clause over worker_work w). */
#define UNLINKED " FROM worker_work w WHERE NOT EXISTS (SELECT 1 FROM worker_link l WHERE l.fingerprint = w.fingerprint)"

static goblin_err work_add_tx(pg *p, const char *fp, int64_t t, int64_t a, int64_t rj, int64_t max_unlinked,
                              char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(p, &r,
                       "UPDATE worker_work SET " SAT("tasks", "$2::bigint") ", " SAT("accepted", "$3::bigint") ", "
                       SAT("rejected", "$4::bigint") ", touched = nextval('worker_work_touched') WHERE fingerprint = $5",
                       msg, cap, "iiiis", GOBLIN_HUB_WORK_COUNT_MAX, t, a, rj, fp);
    if (e) return e;
    int n = changed(r);
    PQclear(r);
    if (n == 1) return GOBLIN_OK;
    int64_t owner;
    bool linked;
    if ((e = link_owner(p, fp, &owner, &linked, msg, cap))) return e;
    if (!linked) {
        /* One new unlinked identity at a time across instances, so the bound holds. */
        if ((e = run(p, NULL, "SELECT pg_advisory_xact_lock(7105946138)", msg, cap, "")) ||
            (e = run(p, &r, "SELECT count(*)" UNLINKED, msg, cap, "")))
            return e;
        int64_t have = v_i64(r, 0, 0);
        PQclear(r);
        if (have >= max_unlinked &&
            (e = run(p, NULL,
                     "DELETE FROM worker_work WHERE fingerprint IN (SELECT w.fingerprint" UNLINKED
                     " ORDER BY w.touched LIMIT $1)",
                     msg, cap, "i", have - max_unlinked + 1)))
            return e;
    }
    return run(p, NULL,
               "INSERT INTO worker_work (fingerprint, tasks, accepted, rejected, touched)"
               " VALUES ($5, $2, $3, $4, nextval('worker_work_touched')) ON CONFLICT (fingerprint) DO UPDATE SET "
               SAT("tasks", "excluded.tasks") ", " SAT("accepted", "excluded.accepted") ", "
               SAT("rejected", "excluded.rejected") ", touched = excluded.touched",
               msg, cap, "iiiis", GOBLIN_HUB_WORK_COUNT_MAX, t, a, rj, fp);
}

static goblin_err pg_work_add(void *b, const char *fp, int64_t t, int64_t a, int64_t rj, int64_t max_unlinked,
                              char *msg, size_t cap) {
    goblin_err e = run(b, NULL, "BEGIN", msg, cap, "");
    return e ? e : end_tx(b, work_add_tx(b, fp, t, a, rj, max_unlinked, msg, cap), msg, cap);
}

static goblin_err pg_link_seed_get(void *b, int64_t account, uint8_t seed[32], char *msg, size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r, "SELECT encode(seed, 'hex') FROM link_seed WHERE account = $1", msg, cap, "i", account);
    if (e) return e;
    bool ok = PQntuples(r) == 1 && PQgetlength(r, 0, 0) == 64;
    if (ok) v_digest(r, 0, 0, seed);
    PQclear(r);
    return ok ? GOBLIN_OK : goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no link code yet");
}

static goblin_err pg_link_seed_set(void *b, int64_t account, const uint8_t seed[32], int64_t now, char *msg,
                                   size_t cap) {
    PGresult *r;
    goblin_err e = run(b, &r,
                       "INSERT INTO link_seed (account, seed, created) SELECT $1::bigint, $2::bytea, $3::bigint"
                       " WHERE EXISTS (SELECT 1 FROM account WHERE id = $1)"
                       " ON CONFLICT (account) DO UPDATE SET seed = excluded.seed, created = excluded.created",
                       msg, cap, "ibi", account, seed, now);
    if (e) return e;
    int n = changed(r);
    PQclear(r);
    return n == 1 ? GOBLIN_OK : goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no account %lld", (long long)account);
}

static const goblin__hub_store_ops postgres_ops = {
    .version = GOBLIN__HUB_STORE_OPS_VERSION,
    .name = "postgresql",
    .close = pg_close,
    .schema_version = pg_schema_version,
    .account_ensure = pg_account_ensure,
    .account_get = pg_account_get,
    .signin_add = pg_signin_add,
    .signin_each = pg_signin_each,
    .signin_use = pg_signin_use,
    .signin_fail = pg_signin_fail,
    .event_add = pg_event_add,
    .event_count = pg_event_count,
    .session_add = pg_session_add,
    .session_get = pg_session_get,
    .session_end = pg_session_end,
    .request_add = pg_request_add,
    .request_get = pg_request_get,
    .request_each = pg_request_each,
    .request_decide = pg_request_decide,
    .account_approved = pg_account_approved,
    .key_add = pg_key_add,
    .key_each = pg_key_each,
    .key_revoke = pg_key_revoke,
    .key_check = pg_key_check,
    .quarantine_add = pg_quarantine_add,
    .quarantine_lift = pg_quarantine_lift,
    .quarantined = pg_quarantined,
    .quarantine_each = pg_quarantine_each,
    .link_add = pg_link_add,
    .link_remove = pg_link_remove,
    .link_each = pg_link_each,
    .link_get = pg_link_get,
    .work_add = pg_work_add,
    .link_seed_get = pg_link_seed_get,
    .link_seed_set = pg_link_seed_set,
};

static void quiet(void *arg, const char *message) {
    (void)arg;
    (void)message;
}

goblin_err goblin__hub_postgres_open(const char *conninfo, const goblin__hub_store_ops **ops, void **backend,
                                     char *msg, size_t cap) {
    pg *p = goblin__calloc(1, sizeof *p);
    if (!p) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    p->c = PQconnectdb(conninfo);
    if (!p->c || PQstatus(p->c) != CONNECTION_OK) {
        goblin_err e = p->c ? pg_errf(p, NULL, msg, cap, "connect")
                            : goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory connecting");
        pg_close(p);
        return e;
    }
    /* Notices ("relation already exists, skipping") are not errors: off stderr. */
    PQsetNoticeProcessor(p->c, quiet, NULL);
    goblin_err e = run(p, NULL, "SET client_min_messages = warning", msg, cap, "");
    if (!e) e = migrate(p, msg, cap);
    if (e) {
        pg_close(p);
        return e;
    }
    *ops = &postgres_ops;
    *backend = p;
    return GOBLIN_OK;
}
