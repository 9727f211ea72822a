/* libgoblin/hub/store.c - goblin_hub_store: argument checks, one lock, and the
 * backend chosen by the location (store_impl.h). */
#include <pthread.h>
#include <string.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "net/worker_key.h"
#include "store_impl.h"

struct goblin_hub_store {
    const goblin__hub_store_ops *ops;
    void *b;
    pthread_mutex_t mu;
    int64_t work_unlinked_max; /* goblin_hub_store_set_work_limit */
    char error[512];
};

const char *goblin_hub_request_status_name(goblin_hub_request_status s) {
    switch (s) {
    case GOBLIN_HUB_REQUEST_PENDING: return "pending";
    case GOBLIN_HUB_REQUEST_APPROVED: return "approved";
    case GOBLIN_HUB_REQUEST_DENIED: return "denied";
    default: return NULL;
    }
}

goblin_err goblin_hub_store_open(const char *location, goblin_hub_store **out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    if (!location || !out || !*location) return goblin__errf(msg, cap, GOBLIN_EINVAL, "store location and out are required");
    const char *path = location;
    bool postgres = !strncmp(location, "postgresql://", 13) || !strncmp(location, "postgres://", 11);
#ifndef GOBLIN_HAVE_HUB_POSTGRES
    if (postgres)
        return goblin__errf(msg, cap, GOBLIN_ENOTSUP, "this build has no PostgreSQL store (libpq); use sqlite:PATH");
#endif
    if (!strncmp(location, "sqlite:", 7)) path = location + 7;
    if (!*path) return goblin__errf(msg, cap, GOBLIN_EINVAL, "empty database path in '%s'", location);
    goblin_hub_store *s = goblin__calloc(1, sizeof *s);
    if (!s) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    goblin_err e;
#ifdef GOBLIN_HAVE_HUB_POSTGRES
    if (postgres) e = goblin__hub_postgres_open(location, &s->ops, &s->b, msg, cap);
    else
#endif
        e = goblin__hub_sqlite_open(path, &s->ops, &s->b, msg, cap);
    if (e) {
        goblin__free(s);
        return e;
    }
    /* Recursive: a walk's callback may call the store again. */
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&s->mu, &a);
    pthread_mutexattr_destroy(&a);
    s->work_unlinked_max = GOBLIN_HUB_WORK_UNLINKED_MAX;
    *out = s;
    return GOBLIN_OK;
}

void goblin_hub_store_close(goblin_hub_store *s) {
    if (!s) return;
    s->ops->close(s->b);
    pthread_mutex_destroy(&s->mu);
    goblin__free(s);
}

const char *goblin_hub_store_error(const goblin_hub_store *s) { return s ? s->error : "no store"; }

/* Text of at most @p max bytes; a NULL or too-long one is named in the store's error. */
static bool text_ok(goblin_hub_store *s, const char *t, size_t min, size_t max, const char *what) {
    size_t n = t ? strnlen(t, max + 1) : 0;
    if (t && n >= min && n <= max) return true;
    goblin__errf(s->error, sizeof s->error, GOBLIN_EINVAL, "%s must be %zu .. %zu bytes", what, min, max);
    return false;
}

/* Lock, clear the error, call the backend, unlock. */
#define CALL(s, expr)                                              \
    do {                                                           \
        pthread_mutex_lock(&(s)->mu);                              \
        (s)->error[0] = 0;                                         \
        goblin_err e_ = (s)->ops->expr;                            \
        pthread_mutex_unlock(&(s)->mu);                            \
        return e_;                                                 \
    } while (0)
#define MSG s->error, sizeof s->error

goblin_err goblin_hub_store_schema_version(goblin_hub_store *s, int32_t *out) {
    if (!s || !out) return GOBLIN_EINVAL;
    CALL(s, schema_version(s->b, out, MSG));
}

goblin_err goblin_hub_store_account_ensure(goblin_hub_store *s, const char *email, int64_t now,
                                           goblin_hub_account *out) {
    if (!s) return GOBLIN_EINVAL;
    if (!out || !text_ok(s, email, 3, GOBLIN_HUB_EMAIL_MAX, "an email address")) return GOBLIN_EINVAL;
    char low[GOBLIN_HUB_EMAIL_MAX + 1];
    size_t i = 0;
    for (; email[i]; i++) low[i] = (char)((email[i] >= 'A' && email[i] <= 'Z') ? email[i] + 32 : email[i]);
    low[i] = 0;
    CALL(s, account_ensure(s->b, low, now, out, MSG));
}

goblin_err goblin_hub_store_account_get(goblin_hub_store *s, int64_t id, goblin_hub_account *out) {
    if (!s || !out) return GOBLIN_EINVAL;
    CALL(s, account_get(s->b, id, out, MSG));
}

goblin_err goblin_hub_store_signin_add(goblin_hub_store *s, const char *email, const uint8_t code_digest[32],
                                       const uint8_t link_digest[32], int64_t now, int64_t expires) {
    if (!s) return GOBLIN_EINVAL;
    if (!code_digest || !link_digest || !text_ok(s, email, 3, GOBLIN_HUB_EMAIL_MAX, "an email address"))
        return GOBLIN_EINVAL;
    CALL(s, signin_add(s->b, email, code_digest, link_digest, now, expires, MSG));
}

goblin_err goblin_hub_store_signin_each(goblin_hub_store *s, const char *email, int64_t now,
                                        int32_t max_failures,
                                        goblin_err (*each)(void *ctx, const goblin_hub_signin_code *c),
                                        void *ctx) {
    if (!s) return GOBLIN_EINVAL;
    if (!each || !text_ok(s, email, 3, GOBLIN_HUB_EMAIL_MAX, "an email address")) return GOBLIN_EINVAL;
    CALL(s, signin_each(s->b, email, now, max_failures, each, ctx, MSG));
}

goblin_err goblin_hub_store_signin_use(goblin_hub_store *s, int64_t id, int64_t now) {
    if (!s) return GOBLIN_EINVAL;
    CALL(s, signin_use(s->b, id, now, MSG));
}

goblin_err goblin_hub_store_signin_fail(goblin_hub_store *s, const char *email, int64_t now) {
    if (!s) return GOBLIN_EINVAL;
    if (!text_ok(s, email, 3, GOBLIN_HUB_EMAIL_MAX, "an email address")) return GOBLIN_EINVAL;
    CALL(s, signin_fail(s->b, email, now, MSG));
}

goblin_err goblin_hub_store_event_add(goblin_hub_store *s, const char *key, int64_t now,
                                      int64_t forget_before) {
    if (!s) return GOBLIN_EINVAL;
    if (!text_ok(s, key, 1, GOBLIN_HUB_KEY_MAX, "a rate-limit key")) return GOBLIN_EINVAL;
    CALL(s, event_add(s->b, key, now, forget_before, MSG));
}

goblin_err goblin_hub_store_event_count(goblin_hub_store *s, const char *key, int64_t since, int64_t *out) {
    if (!s) return GOBLIN_EINVAL;
    if (!out || !text_ok(s, key, 1, GOBLIN_HUB_KEY_MAX, "a rate-limit key")) return GOBLIN_EINVAL;
    CALL(s, event_count(s->b, key, since, out, MSG));
}

goblin_err goblin_hub_store_session_add(goblin_hub_store *s, const uint8_t digest[32], int64_t account_id,
                                        int64_t now, int64_t expires) {
    if (!s || !digest) return GOBLIN_EINVAL;
    CALL(s, session_add(s->b, digest, account_id, now, expires, MSG));
}

goblin_err goblin_hub_store_session_get(goblin_hub_store *s, const uint8_t digest[32], int64_t now,
                                        int64_t *account_id) {
    if (!s || !digest || !account_id) return GOBLIN_EINVAL;
    CALL(s, session_get(s->b, digest, now, account_id, MSG));
}

goblin_err goblin_hub_store_session_end(goblin_hub_store *s, const uint8_t digest[32]) {
    if (!s || !digest) return GOBLIN_EINVAL;
    CALL(s, session_end(s->b, digest, MSG));
}

goblin_err goblin_hub_store_request_add(goblin_hub_store *s, int64_t account_id,
                                        const goblin_hub_access_request *r, int64_t now, int64_t *id) {
    if (!s) return GOBLIN_EINVAL;
    if (!r || !id || !text_ok(s, r->name, 1, GOBLIN_HUB_NAME_MAX, "name") ||
        !text_ok(s, r->institution, 1, GOBLIN_HUB_NAME_MAX, "institution") ||
        !text_ok(s, r->purpose, 1, GOBLIN_HUB_TEXT_MAX, "purpose") ||
        !text_ok(s, r->expected_use, 1, GOBLIN_HUB_TEXT_MAX, "expected use"))
        return GOBLIN_EINVAL;
    CALL(s, request_add(s->b, account_id, r, now, id, MSG));
}

goblin_err goblin_hub_store_request_get(goblin_hub_store *s, int64_t id, goblin_hub_access_request *out) {
    if (!s || !out) return GOBLIN_EINVAL;
    CALL(s, request_get(s->b, id, out, MSG));
}

goblin_err goblin_hub_store_request_each(goblin_hub_store *s, int64_t account_id, int32_t status,
                                         int32_t limit,
                                         goblin_err (*each)(void *ctx, const goblin_hub_access_request *r),
                                         void *ctx) {
    if (!s || !each || limit <= 0 || status >= GOBLIN_HUB_REQUEST_STATUS_COUNT) return GOBLIN_EINVAL;
    CALL(s, request_each(s->b, account_id, status, limit, each, ctx, MSG));
}

goblin_err goblin_hub_store_request_decide(goblin_hub_store *s, int64_t id, goblin_hub_request_status status,
                                           const char *note, int64_t now) {
    if (!s) return GOBLIN_EINVAL;
    if (status != GOBLIN_HUB_REQUEST_APPROVED && status != GOBLIN_HUB_REQUEST_DENIED)
        return goblin__errf(MSG, GOBLIN_EINVAL, "a decision is approved or denied");
    if (!text_ok(s, note, 0, GOBLIN_HUB_REASON_MAX, "a decision note")) return GOBLIN_EINVAL;
    CALL(s, request_decide(s->b, id, status, note, now, MSG));
}

goblin_err goblin_hub_store_account_approved(goblin_hub_store *s, int64_t account_id, bool *out) {
    if (!s || !out) return GOBLIN_EINVAL;
    CALL(s, account_approved(s->b, account_id, out, MSG));
}

goblin_err goblin_hub_store_key_add(goblin_hub_store *s, int64_t account_id, const char *label,
                                    const uint8_t digest[32], int64_t now, int64_t *id) {
    if (!s) return GOBLIN_EINVAL;
    if (!digest || !id || !text_ok(s, label, 1, GOBLIN_HUB_LABEL_MAX, "a key label")) return GOBLIN_EINVAL;
    CALL(s, key_add(s->b, account_id, label, digest, now, id, MSG));
}

goblin_err goblin_hub_store_key_each(goblin_hub_store *s, int64_t account_id,
                                     goblin_err (*each)(void *ctx, const goblin_hub_node_key *k), void *ctx) {
    if (!s || !each) return GOBLIN_EINVAL;
    CALL(s, key_each(s->b, account_id, each, ctx, MSG));
}

goblin_err goblin_hub_store_key_revoke(goblin_hub_store *s, int64_t account_id, int64_t id, int64_t now) {
    if (!s) return GOBLIN_EINVAL;
    CALL(s, key_revoke(s->b, account_id, id, now, MSG));
}

goblin_err goblin_hub_store_key_check(goblin_hub_store *s, int64_t id, const uint8_t digest[32],
                                      goblin_hub_node_key *out) {
    if (!s || !digest || !out) return GOBLIN_EINVAL;
    CALL(s, key_check(s->b, id, digest, out, MSG));
}

goblin_err goblin_hub_store_quarantine_add(goblin_hub_store *s, const char *subject, const char *reason,
                                           const char *reported_by, int64_t now, int64_t *id) {
    if (!s) return GOBLIN_EINVAL;
    if (!id || !text_ok(s, subject, 1, GOBLIN_HUB_LABEL_MAX, "a quarantine subject") ||
        !text_ok(s, reason, 0, GOBLIN_HUB_REASON_MAX, "a quarantine reason") ||
        !text_ok(s, reported_by, 1, GOBLIN_HUB_LABEL_MAX, "a reporter"))
        return GOBLIN_EINVAL;
    CALL(s, quarantine_add(s->b, subject, reason, reported_by, now, id, MSG));
}

goblin_err goblin_hub_store_quarantine_lift(goblin_hub_store *s, int64_t id, int64_t now) {
    if (!s) return GOBLIN_EINVAL;
    CALL(s, quarantine_lift(s->b, id, now, MSG));
}

goblin_err goblin_hub_store_quarantined(goblin_hub_store *s, const char *subject, bool *out) {
    if (!s) return GOBLIN_EINVAL;
    if (!out || !text_ok(s, subject, 1, GOBLIN_HUB_LABEL_MAX, "a quarantine subject")) return GOBLIN_EINVAL;
    CALL(s, quarantined(s->b, subject, out, MSG));
}

goblin_err goblin_hub_store_quarantine_each(goblin_hub_store *s, bool all,
                                            goblin_err (*each)(void *ctx, const goblin_hub_quarantine *q),
                                            void *ctx) {
    if (!s || !each) return GOBLIN_EINVAL;
    CALL(s, quarantine_each(s->b, all, each, ctx, MSG));
}

/* An identity as the store keeps it, or GOBLIN_EINVAL named in the store's error. */
static bool fingerprint_ok(goblin_hub_store *s, const char *fp) {
    if (fp && goblin__wkey_fingerprint_valid(fp, strnlen(fp, 65))) return true;
    goblin__errf(MSG, GOBLIN_EINVAL, "a worker identity is 64 lowercase hex digits");
    return false;
}

goblin_err goblin_hub_store_link_add(goblin_hub_store *s, int64_t account_id, const char *fingerprint, int64_t now) {
    if (!s) return GOBLIN_EINVAL;
    if (!fingerprint_ok(s, fingerprint)) return GOBLIN_EINVAL;
    CALL(s, link_add(s->b, account_id, fingerprint, now, GOBLIN_HUB_LINKS_MAX, MSG));
}

goblin_err goblin_hub_store_link_remove(goblin_hub_store *s, int64_t account_id, const char *fingerprint) {
    if (!s) return GOBLIN_EINVAL;
    if (!fingerprint_ok(s, fingerprint)) return GOBLIN_EINVAL;
    CALL(s, link_remove(s->b, account_id, fingerprint, MSG));
}

goblin_err goblin_hub_store_link_each(goblin_hub_store *s, int64_t account_id,
                                      goblin_err (*each)(void *ctx, const goblin_hub_link *l), void *ctx) {
    if (!s || !each || account_id < 0) return GOBLIN_EINVAL;
    CALL(s, link_each(s->b, account_id, each, ctx, MSG));
}

goblin_err goblin_hub_store_link_get(goblin_hub_store *s, const char *fingerprint, goblin_hub_link *out) {
    if (!s) return GOBLIN_EINVAL;
    if (!out || !fingerprint_ok(s, fingerprint)) return GOBLIN_EINVAL;
    CALL(s, link_get(s->b, fingerprint, out, MSG));
}

goblin_err goblin_hub_store_work_add(goblin_hub_store *s, const char *fingerprint, int64_t tasks, int64_t accepted,
                                     int64_t rejected) {
    if (!s) return GOBLIN_EINVAL;
    if (!fingerprint_ok(s, fingerprint)) return GOBLIN_EINVAL;
    const int64_t v[3] = {tasks, accepted, rejected};
    for (int i = 0; i < 3; i++)
        if (v[i] < 0 || v[i] > GOBLIN_HUB_WORK_COUNT_MAX)
            return goblin__errf(MSG, GOBLIN_EINVAL, "work counts are 0 .. 2^62");
    if (!tasks && !accepted && !rejected) return GOBLIN_OK;
    pthread_mutex_lock(&s->mu);
    int64_t max = s->work_unlinked_max;
    pthread_mutex_unlock(&s->mu);
    CALL(s, work_add(s->b, fingerprint, tasks, accepted, rejected, max, MSG));
}

goblin_err goblin_hub_store_set_work_limit(goblin_hub_store *s, uint32_t max_unlinked) {
    if (!s || max_unlinked < 1 || max_unlinked > INT32_MAX) return GOBLIN_EINVAL;
    pthread_mutex_lock(&s->mu);
    s->work_unlinked_max = max_unlinked;
    pthread_mutex_unlock(&s->mu);
    return GOBLIN_OK;
}

goblin_err goblin_hub_store_link_seed_get(goblin_hub_store *s, int64_t account_id, uint8_t seed[32]) {
    if (!s || !seed) return GOBLIN_EINVAL;
    CALL(s, link_seed_get(s->b, account_id, seed, MSG));
}

goblin_err goblin_hub_store_link_seed_set(goblin_hub_store *s, int64_t account_id, const uint8_t seed[32],
                                          int64_t now) {
    if (!s || !seed) return GOBLIN_EINVAL;
    CALL(s, link_seed_set(s->b, account_id, seed, now, MSG));
}
