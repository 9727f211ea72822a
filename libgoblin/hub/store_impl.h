/* libgoblin/hub/store_impl.h - the backend interface under goblin_hub_store (internal).
 *
 * One versioned table of operations per backend (SQLite now; PostgreSQL later, in
 * a store_postgres.c of its own), like the compute backends' vtable. store.c checks
 * every argument, serializes calls with the store's mutex and hands the backend
 * valid input only; a backend writes its detail into (msg, cap) and never sees a NULL
 * it was not promised. Each operation means the same as the public call of the same
 * name in goblin/hub_store.h. */
#ifndef GOBLIN__HUB_STORE_IMPL_H
#define GOBLIN__HUB_STORE_IMPL_H

#include <goblin/hub_store.h>
#include <stddef.h>

#define GOBLIN__HUB_STORE_OPS_VERSION 1

typedef goblin_err (*goblin__hub_code_fn)(void *ctx, const goblin_hub_signin_code *c);
typedef goblin_err (*goblin__hub_request_fn)(void *ctx, const goblin_hub_access_request *r);
typedef goblin_err (*goblin__hub_key_fn)(void *ctx, const goblin_hub_node_key *k);
typedef goblin_err (*goblin__hub_quarantine_fn)(void *ctx, const goblin_hub_quarantine *q);
typedef goblin_err (*goblin__hub_link_fn)(void *ctx, const goblin_hub_link *l);

typedef struct goblin__hub_store_ops {
    uint32_t version; /* GOBLIN__HUB_STORE_OPS_VERSION */
    const char *name;
    void (*close)(void *b);
    goblin_err (*schema_version)(void *b, int32_t *out, char *msg, size_t cap);
    goblin_err (*account_ensure)(void *b, const char *email, int64_t now, goblin_hub_account *out,
                                 char *msg, size_t cap);
    goblin_err (*account_get)(void *b, int64_t id, goblin_hub_account *out, char *msg, size_t cap);
    goblin_err (*signin_add)(void *b, const char *email, const uint8_t code[32],
                             const uint8_t link[32], int64_t now, int64_t expires, char *msg,
                             size_t cap);
    goblin_err (*signin_each)(void *b, const char *email, int64_t now, int32_t max_failures,
                              goblin__hub_code_fn each, void *ctx, char *msg, size_t cap);
    goblin_err (*signin_use)(void *b, int64_t id, int64_t now, char *msg, size_t cap);
    goblin_err (*signin_fail)(void *b, const char *email, int64_t now, char *msg, size_t cap);
    goblin_err (*event_add)(void *b, const char *key, int64_t now, int64_t forget_before,
                            char *msg, size_t cap);
    goblin_err (*event_count)(void *b, const char *key, int64_t since, int64_t *out, char *msg,
                              size_t cap);
    goblin_err (*session_add)(void *b, const uint8_t digest[32], int64_t account, int64_t now,
                              int64_t expires, char *msg, size_t cap);
    goblin_err (*session_get)(void *b, const uint8_t digest[32], int64_t now, int64_t *account,
                              char *msg, size_t cap);
    goblin_err (*session_end)(void *b, const uint8_t digest[32], char *msg, size_t cap);
    goblin_err (*request_add)(void *b, int64_t account, const goblin_hub_access_request *r,
                              int64_t now, int64_t *id, char *msg, size_t cap);
    goblin_err (*request_get)(void *b, int64_t id, goblin_hub_access_request *out, char *msg,
                              size_t cap);
    goblin_err (*request_each)(void *b, int64_t account, int32_t status, int32_t limit,
                               goblin__hub_request_fn each, void *ctx, char *msg, size_t cap);
    goblin_err (*request_decide)(void *b, int64_t id, goblin_hub_request_status status,
                                 const char *note, int64_t now, char *msg, size_t cap);
    goblin_err (*account_approved)(void *b, int64_t account, bool *out, char *msg, size_t cap);
    goblin_err (*key_add)(void *b, int64_t account, const char *label, const uint8_t digest[32],
                          int64_t now, int64_t *id, char *msg, size_t cap);
    goblin_err (*key_each)(void *b, int64_t account, goblin__hub_key_fn each, void *ctx, char *msg,
                           size_t cap);
    goblin_err (*key_revoke)(void *b, int64_t account, int64_t id, int64_t now, char *msg,
                             size_t cap);
    goblin_err (*key_check)(void *b, int64_t id, const uint8_t digest[32], goblin_hub_node_key *out,
                            char *msg, size_t cap);
    goblin_err (*quarantine_add)(void *b, const char *subject, const char *reason,
                                 const char *reported_by, int64_t now, int64_t *id, char *msg,
                                 size_t cap);
    goblin_err (*quarantine_lift)(void *b, int64_t id, int64_t now, char *msg, size_t cap);
    goblin_err (*quarantined)(void *b, const char *subject, bool *out, char *msg, size_t cap);
    goblin_err (*quarantine_each)(void *b, bool all, goblin__hub_quarantine_fn each, void *ctx,
                                  char *msg, size_t cap);
    /* Volunteers' links. @p max_links and @p max_unlinked are the bounds store.c holds. */
    goblin_err (*link_add)(void *b, int64_t account, const char *fp, int64_t now, int32_t max_links,
                           char *msg, size_t cap);
    goblin_err (*link_remove)(void *b, int64_t account, const char *fp, char *msg, size_t cap);
    goblin_err (*link_each)(void *b, int64_t account, goblin__hub_link_fn each, void *ctx, char *msg,
                            size_t cap);
    goblin_err (*link_get)(void *b, const char *fp, goblin_hub_link *out, char *msg, size_t cap);
    goblin_err (*work_add)(void *b, const char *fp, int64_t tasks, int64_t accepted, int64_t rejected,
                           int64_t max_unlinked, char *msg, size_t cap);
    goblin_err (*link_seed_get)(void *b, int64_t account, uint8_t seed[32], char *msg, size_t cap);
    goblin_err (*link_seed_set)(void *b, int64_t account, const uint8_t seed[32], int64_t now, char *msg,
                                size_t cap);
} goblin__hub_store_ops;

/* Open the SQLite database file @p path: *ops and *backend on success. */
goblin_err goblin__hub_sqlite_open(const char *path, const goblin__hub_store_ops **ops,
                                   void **backend, char *msg, size_t cap);

/* Connect to the PostgreSQL server named by @p conninfo (a libpq URI or key=value
 * string): *ops and *backend on success (store_postgres.c, built with libpq). */
goblin_err goblin__hub_postgres_open(const char *conninfo, const goblin__hub_store_ops **ops,
                                     void **backend, char *msg, size_t cap);

#endif
