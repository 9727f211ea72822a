/* libgoblin/hub/store_sqlite_impl.h - what the SQLite store's files share (internal to
 * hub/): the backend's handle, the statement helpers (every value bound, never built
 * into SQL text), and the operations store_sqlite_link.c adds to the table in
 * store_sqlite.c. */
#ifndef GOBLIN__HUB_STORE_SQLITE_IMPL_H
#define GOBLIN__HUB_STORE_SQLITE_IMPL_H

#include <sqlite3.h>
#include <stdarg.h>
#include <string.h>

#include "base/errf.h"
#include "store_impl.h"

typedef struct sq {
    sqlite3 *db;
} sq;

static inline goblin_err db_errf(sq *s, char *msg, size_t cap, const char *what) {
    int rc = sqlite3_extended_errcode(s->db);
    return goblin__errf(msg, cap, rc == SQLITE_NOMEM ? GOBLIN_ENOMEM : GOBLIN_EIO,
                        "hub store (sqlite): %s: %s", what, sqlite3_errmsg(s->db));
}

static inline goblin_err exec_sql(sq *s, const char *sql, char *msg, size_t cap) {
    char *e = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &e) != SQLITE_OK) {
        goblin_err r = goblin__errf(msg, cap, GOBLIN_EIO, "hub store (sqlite): %s", e ? e : "exec failed");
        sqlite3_free(e);
        return r;
    }
    return GOBLIN_OK;
}

/* Prepare @p sql and bind the values described by @p fmt: 'i' int64, 's' text,
 * 'b' a 32-byte blob. */
static inline goblin_err prep(sq *s, sqlite3_stmt **st, const char *sql, char *msg, size_t cap,
                              const char *fmt, ...) {
    if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK) return db_errf(s, msg, cap, "prepare");
    va_list ap;
    va_start(ap, fmt);
    int rc = SQLITE_OK;
    for (int i = 0; fmt[i] && rc == SQLITE_OK; i++) {
        if (fmt[i] == 'i') rc = sqlite3_bind_int64(*st, i + 1, va_arg(ap, int64_t));
        else if (fmt[i] == 's') rc = sqlite3_bind_text(*st, i + 1, va_arg(ap, const char *), -1, SQLITE_TRANSIENT);
        else rc = sqlite3_bind_blob(*st, i + 1, va_arg(ap, const uint8_t *), 32, SQLITE_TRANSIENT);
    }
    va_end(ap);
    if (rc != SQLITE_OK) {
        goblin_err e = db_errf(s, msg, cap, "bind");
        sqlite3_finalize(*st);
        *st = NULL;
        return e;
    }
    return GOBLIN_OK;
}

/* Run a statement that returns no rows; *changes (may be NULL) the rows it changed. */
static inline goblin_err run(sq *s, sqlite3_stmt *st, int *changes, char *msg, size_t cap) {
    int rc = sqlite3_step(st);
    goblin_err e = rc == SQLITE_DONE ? GOBLIN_OK : db_errf(s, msg, cap, "step");
    sqlite3_finalize(st);
    if (changes) *changes = sqlite3_changes(s->db);
    return e;
}

static inline void col_text(sqlite3_stmt *st, int i, char *out, size_t cap) {
    const unsigned char *t = sqlite3_column_text(st, i);
    int n = sqlite3_column_bytes(st, i);
    size_t k = t ? (size_t)n : 0;
    if (k >= cap) k = cap - 1;
    if (k) memcpy(out, t, k);
    out[k] = 0;
}

static inline void col_digest(sqlite3_stmt *st, int i, uint8_t out[32]) {
    const void *b = sqlite3_column_blob(st, i);
    memset(out, 0, 32);
    if (b && sqlite3_column_bytes(st, i) == 32) memcpy(out, b, 32);
}

/* Run @p call (an expression of type goblin_err) in one write transaction and return
 * its result: the checks and the write they decide on cannot be split by another
 * process's writes (BEGIN IMMEDIATE). For functions returning goblin_err. */
#define GOBLIN__HUB_SQ_IN_TX(s, msg, cap, call)                         \
    do {                                                                \
        goblin_err e_ = exec_sql((s), "BEGIN IMMEDIATE", (msg), (cap)); \
        if (e_) return e_;                                              \
        e_ = (call);                                                    \
        if (e_) {                                                       \
            exec_sql((s), "ROLLBACK", NULL, 0);                         \
            return e_;                                                  \
        }                                                               \
        return exec_sql((s), "COMMIT", (msg), (cap));                   \
    } while (0)

/* ---- store_sqlite_link.c: volunteers' worker links and their work ---- */
goblin_err goblin__hub_sq_link_add(void *b, int64_t account, const char *fp, int64_t now, int32_t max_links,
                                   char *msg, size_t cap);
goblin_err goblin__hub_sq_link_remove(void *b, int64_t account, const char *fp, char *msg, size_t cap);
goblin_err goblin__hub_sq_link_each(void *b, int64_t account, goblin__hub_link_fn each, void *ctx, char *msg,
                                    size_t cap);
goblin_err goblin__hub_sq_link_get(void *b, const char *fp, goblin_hub_link *out, char *msg, size_t cap);
goblin_err goblin__hub_sq_work_add(void *b, const char *fp, int64_t tasks, int64_t accepted, int64_t rejected,
                                   int64_t max_unlinked, char *msg, size_t cap);
goblin_err goblin__hub_sq_link_seed_get(void *b, int64_t account, uint8_t seed[32], char *msg, size_t cap);
goblin_err goblin__hub_sq_link_seed_set(void *b, int64_t account, const uint8_t seed[32], int64_t now,
                                        char *msg, size_t cap);

#endif
