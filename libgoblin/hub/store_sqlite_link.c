/* libgoblin/hub/store_sqlite_link.c - the SQLite store's side of volunteers: worker
 * identities linked to accounts, the work labs reported of each identity, and the seeds
 * of the accounts' link codes (goblin/hub_store.h, "volunteers"). Only fingerprints,
 * owners, counters and seeds are kept; the bound on unlinked identities is enforced
 * here, in the same transaction as the insert it makes room for. */
#include "store_sqlite_impl.h"

/* One integer from @p st (prepared and bound), finalized; *found whether a row came. */
static goblin_err one_int(sq *s, sqlite3_stmt *st, int64_t *out, bool *found, char *msg, size_t cap) {
    int rc = sqlite3_step(st);
    goblin_err e = GOBLIN_OK;
    *found = rc == SQLITE_ROW;
    if (rc == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
    else if (rc != SQLITE_DONE) e = db_errf(s, msg, cap, "read");
    sqlite3_finalize(st);
    return e;
}

static goblin_err sq_link_add_tx(sq *s, int64_t account, const char *fp, int64_t now, int32_t max_links,
                                 char *msg, size_t cap) {
    sqlite3_stmt *st;
    int64_t v = 0;
    bool found;
    goblin_err e = prep(s, &st, "SELECT 1 FROM account WHERE id = ?", msg, cap, "i", account);
    if (e || (e = one_int(s, st, &v, &found, msg, cap))) return e;
    if (!found) return goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no account %lld", (long long)account);
    if ((e = prep(s, &st, "SELECT account FROM worker_link WHERE fingerprint = ?", msg, cap, "s", fp)) ||
        (e = one_int(s, st, &v, &found, msg, cap)))
        return e;
    if (found && v == account) return GOBLIN_OK;
    if (found)
        return goblin__errf(msg, cap, GOBLIN_ESTATE, "this worker identity is linked to another account; "
                            "its owner must unlink it first");
    if ((e = prep(s, &st, "SELECT count(*) FROM worker_link WHERE account = ?", msg, cap, "i", account)) ||
        (e = one_int(s, st, &v, &found, msg, cap)))
        return e;
    if (v >= max_links)
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "an account may link at most %d worker identities; "
                            "unlink one first", (int)max_links);
    if ((e = prep(s, &st, "INSERT INTO worker_link (fingerprint, account, created) VALUES (?, ?, ?)", msg, cap,
                  "sii", fp, account, now)))
        return e;
    return run(s, st, NULL, msg, cap);
}

goblin_err goblin__hub_sq_link_add(void *b, int64_t account, const char *fp, int64_t now, int32_t max_links,
                                   char *msg, size_t cap) {
    GOBLIN__HUB_SQ_IN_TX((sq *)b, msg, cap, sq_link_add_tx(b, account, fp, now, max_links, msg, cap));
}

goblin_err goblin__hub_sq_link_remove(void *b, int64_t account, const char *fp, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    int n = 0;
    goblin_err e = prep(s, &st, "DELETE FROM worker_link WHERE fingerprint = ? AND account = ?", msg, cap, "si", fp,
                        account);
    if (e || (e = run(s, st, &n, msg, cap))) return e;
    return n == 1 ? GOBLIN_OK : goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no such worker linked to this account");
}

#define LINK_COLS                                                                                \
    "SELECT l.fingerprint, l.account, l.created, coalesce(w.tasks, 0), coalesce(w.accepted, 0),"   \
    " coalesce(w.rejected, 0) FROM worker_link l LEFT JOIN worker_work w ON w.fingerprint = l.fingerprint"

static void row_link(sqlite3_stmt *st, goblin_hub_link *l) {
    col_text(st, 0, l->fingerprint, sizeof l->fingerprint);
    l->account_id = sqlite3_column_int64(st, 1);
    l->created = sqlite3_column_int64(st, 2);
    l->tasks = sqlite3_column_int64(st, 3);
    l->accepted = sqlite3_column_int64(st, 4);
    l->rejected = sqlite3_column_int64(st, 5);
}

goblin_err goblin__hub_sq_link_each(void *b, int64_t account, goblin__hub_link_fn each, void *ctx, char *msg,
                                    size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, LINK_COLS " WHERE (? = 0 OR l.account = ?) ORDER BY l.created, l.fingerprint", msg,
                        cap, "ii", account, account);
    if (e) return e;
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        goblin_hub_link l;
        row_link(st, &l);
        e = each(ctx, &l);
    }
    if (!e && rc != SQLITE_DONE) e = db_errf(s, msg, cap, "read worker links");
    sqlite3_finalize(st);
    return e;
}

goblin_err goblin__hub_sq_link_get(void *b, const char *fp, goblin_hub_link *out, char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    /* The link, else the counters of an unlinked identity. */
    goblin_err e = prep(s, &st,
                        LINK_COLS " WHERE l.fingerprint = ?1 UNION ALL"
                        " SELECT fingerprint, 0, 0, tasks, accepted, rejected FROM worker_work"
                        " WHERE fingerprint = ?1 AND fingerprint NOT IN (SELECT fingerprint FROM worker_link)",
                        msg, cap, "s", fp);
    if (e) return e;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) row_link(st, out);
    else if (rc == SQLITE_DONE) e = goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "the hub knows nothing of this identity");
    else e = db_errf(s, msg, cap, "read a worker identity");
    sqlite3_finalize(st);
    return e;
}

/* The counted identities linked to no account (a FROM clause over worker_work w). */
#define UNLINKED " FROM worker_work w WHERE NOT EXISTS (SELECT 1 FROM worker_link l WHERE l.fingerprint = w.fingerprint)"

static goblin_err sq_work_add_tx(sq *s, const char *fp, int64_t t, int64_t a, int64_t r, int64_t max_unlinked,
                                 char *msg, size_t cap) {
    sqlite3_stmt *st;
    int n = 0;
    int64_t v = 0;
    bool found;
    /* ?1 the cap; ?2 ?3 ?4 the additions; ?5 the identity. */
    static const char upd[] =
        "UPDATE worker_work SET"
        " tasks = CASE WHEN tasks > ?1 - ?2 THEN ?1 ELSE tasks + ?2 END,"
        " accepted = CASE WHEN accepted > ?1 - ?3 THEN ?1 ELSE accepted + ?3 END,"
        " rejected = CASE WHEN rejected > ?1 - ?4 THEN ?1 ELSE rejected + ?4 END,"
        " touched = (SELECT coalesce(max(touched), 0) + 1 FROM worker_work) WHERE fingerprint = ?5";
    goblin_err e = prep(s, &st, upd, msg, cap, "iiiis", GOBLIN_HUB_WORK_COUNT_MAX, t, a, r, fp);
    if (e || (e = run(s, st, &n, msg, cap))) return e;
    if (n == 1) return GOBLIN_OK;
    if ((e = prep(s, &st, "SELECT 1 FROM worker_link WHERE fingerprint = ?", msg, cap, "s", fp)) ||
        (e = one_int(s, st, &v, &found, msg, cap)))
        return e;
    if (!found) {
        /* A new unlinked identity: make room under the bound, least recently counted first. */
        if ((e = prep(s, &st, "SELECT count(*)" UNLINKED, msg, cap, "")) || (e = one_int(s, st, &v, &found, msg, cap)))
            return e;
        if (v >= max_unlinked &&
            ((e = prep(s, &st,
                       "DELETE FROM worker_work WHERE fingerprint IN"
                       " (SELECT w.fingerprint" UNLINKED " ORDER BY w.touched LIMIT ?)",
                       msg, cap, "i", v - max_unlinked + 1)) ||
             (e = run(s, st, NULL, msg, cap))))
            return e;
    }
    if ((e = prep(s, &st,
                  "INSERT INTO worker_work (fingerprint, tasks, accepted, rejected, touched)"
                  " VALUES (?, ?, ?, ?, (SELECT coalesce(max(touched), 0) + 1 FROM worker_work))",
                  msg, cap, "siii", fp, t, a, r)))
        return e;
    return run(s, st, NULL, msg, cap);
}

goblin_err goblin__hub_sq_work_add(void *b, const char *fp, int64_t t, int64_t a, int64_t r, int64_t max_unlinked,
                                   char *msg, size_t cap) {
    GOBLIN__HUB_SQ_IN_TX((sq *)b, msg, cap, sq_work_add_tx(b, fp, t, a, r, max_unlinked, msg, cap));
}

goblin_err goblin__hub_sq_link_seed_get(void *b, int64_t account, uint8_t seed[32], char *msg, size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    goblin_err e = prep(s, &st, "SELECT seed FROM link_seed WHERE account = ?", msg, cap, "i", account);
    if (e) return e;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_bytes(st, 0) == 32) col_digest(st, 0, seed);
    else if (rc == SQLITE_ROW || rc == SQLITE_DONE) e = goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no link code yet");
    else e = db_errf(s, msg, cap, "read a link code");
    sqlite3_finalize(st);
    return e;
}

goblin_err goblin__hub_sq_link_seed_set(void *b, int64_t account, const uint8_t seed[32], int64_t now, char *msg,
                                        size_t cap) {
    sq *s = b;
    sqlite3_stmt *st;
    int64_t v;
    bool found;
    goblin_err e = prep(s, &st, "SELECT 1 FROM account WHERE id = ?", msg, cap, "i", account);
    if (e || (e = one_int(s, st, &v, &found, msg, cap))) return e;
    if (!found) return goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "no account %lld", (long long)account);
    if ((e = prep(s, &st, "INSERT OR REPLACE INTO link_seed (account, seed, created) VALUES (?, ?, ?)", msg, cap,
                  "ibi", account, seed, now)))
        return e;
    return run(s, st, NULL, msg, cap);
}

