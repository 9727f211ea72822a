/* goblin/gateway.h - the node side of the client protocol (client.h).
 *
 * A node that serves clients runs a gateway in its process: it serves them on the node's
 * own addresses (workers and clients then share one address, each saying what it is
 * with its first message), or on URLs of its own (tcp://, ipc://, tls+tcp://; the node
 * then tells a client that dials its worker address where clients connect). It decodes
 * each request as hostile bytes and calls
 * the node's public API (goblin_node_submit_matmul, goblin_node_submit_graph,
 * goblin_job_*) on the clients' behalf.
 *
 * Thread safety: gateway calls are thread-safe except _free. */
#ifndef GOBLIN_GATEWAY_H
#define GOBLIN_GATEWAY_H

#include "api.h"
#include "error.h"
#include "log.h"
#include "node.h"
#include "principal.h"

GOBLIN_BEGIN_DECLS

#define GOBLIN_GATEWAY_MAX_LISTEN 8
#define GOBLIN_GATEWAY_MAX_DATA_DIRS 8

/* Who may use the gateway (docs/security.md): every job belongs to the principal
 * (principal.h) that submitted it, and only that principal or an admin can see, cancel
 * or fetch it; anyone else, and any id that was never handed out, gets the same
 * GOBLIN_ENOTFOUND. Job ids are 128 random bits, never reused (a restarted node knows
 * none of its earlier ids). A connection that has not authenticated can only send AUTH
 * (everything else is answered GOBLIN_EAUTH), unless the gateway is open. */
typedef struct goblin_gateway_params {
    const char *listen[GOBLIN_GATEWAY_MAX_LISTEN]; /* URLs of its own (copied) */
    int32_t n_listen;            /* 0 (the default): the node's addresses, which must be
                                    listening by goblin_gateway_start; else 1 ..
                                    GOBLIN_GATEWAY_MAX_LISTEN URLs of its own */
    const char *cert_file;       /* needed for tls+tcp:// URLs of its own (copied) */
    const char *key_file;
    /* Exactly one of these two. credentials_file: the principals' credentials
     * (principal.h; copied path), re-read whenever it changes, so that a revoked
     * credential stops working at once, also on connections already authenticated.
     * open: no authentication, every connection is the one principal "local" (a
     * one-person lab, the embedded grid); only for loopback, ipc:// and inproc:// listen
     * URLs, the node's too when the gateway serves on them (goblin_gateway_new refuses
     * others with GOBLIN_EINVAL). */
    const char *credentials_file;
    bool open;
    /* File jobs (SUBMIT_MATMUL_FILES): off unless data directories are listed; then
     * every path a client names must resolve (symbolic links and ".." followed) inside
     * one of them, outputs are created new unless the client asks to overwrite (still
     * inside them, never through a link), and errors say nothing about other paths.
     * Relative paths start in the first one. Copied. */
    const char *data_dirs[GOBLIN_GATEWAY_MAX_DATA_DIRS];
    int32_t n_data_dirs;
    uint64_t recv_max_bytes;     /* largest request (default 8 GiB). Requests over 1 MiB
                                    arrive in parts (client.h does this), each checked as it
                                    comes: nothing over 1 MiB is buffered for a connection
                                    that has not authenticated */
    /* Budgets of a gateway under attack: bytes of requests being received in parts, all
     * connections together (default 4 GiB: a new large request over it is refused with
     * GOBLIN_EBUSY, not allocated); connections that have not authenticated (default 64:
     * more are closed as they come) and how long one may stay so (default 10000 ms);
     * connections in all (default 1024). */
    uint64_t max_buffered_bytes;
    int32_t max_unauthenticated;
    uint32_t auth_timeout_ms;
    int32_t max_connections;
    int32_t max_jobs;            /* jobs held at once, all principals (default 64) */
    /* Per principal (0 = no limit): jobs held (default 16), bytes held by its jobs'
     * operands and results (default 16 GiB), submits in any minute (default 120). */
    int32_t max_jobs_per_principal;
    uint64_t max_bytes_per_principal;
    int32_t max_submits_per_minute;
    /* A principal's jobs that are never fetched are released once it has had no
     * connection for this long (default 3600000 = one hour; 0 = never). */
    uint32_t expire_ms;
    goblin_job_params job;       /* for every submitted job (progress fields ignored) */
    goblin_log_fn log;
    void *log_user;
    goblin_log_level log_level;  /* default INFO */
} goblin_gateway_params;

GOBLIN_API void goblin_gateway_params_default(goblin_gateway_params *p);

typedef struct goblin_gateway goblin_gateway;

/** A gateway for @p node (borrowed: must outlive the gateway). Not yet listening.
 *  GOBLIN_EINVAL, GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_gateway_new(goblin_gateway **out, goblin_node *node,
                                         const goblin_gateway_params *p);
/** Listen and serve in the gateway's own thread. GOBLIN_EIO (logged) if a URL cannot be
 *  listened on, GOBLIN_ESTATE if already started, or if it serves on the node's addresses
 *  and the node is not started (or already has a gateway on them). */
GOBLIN_API goblin_err goblin_gateway_start(goblin_gateway *gw);
/** Stop serving. Jobs that are still running are canceled; for up to @p drain_ms the
 *  gateway keeps answering so clients learn that their jobs ended, returning early once
 *  every job's end has been reported (or no job is held) and each reply sent while
 *  draining is known to have arrived (its client spoke again or closed the connection),
 *  so that closing never drops a queued reply. Idempotent. */
GOBLIN_API void goblin_gateway_stop(goblin_gateway *gw, uint32_t drain_ms);
/** Stop (without draining) and free, with its jobs. NULL is a no-op. */
GOBLIN_API void goblin_gateway_free(goblin_gateway *gw);

typedef struct goblin_gateway_stats {
    int64_t requests, jobs_submitted, jobs_held;
    int64_t refused;             /* malformed requests (their connections were closed) */
    int64_t auth_refused;        /* AUTH with a credential that is not valid, and requests
                                    before authenticating */
    int64_t quota_refused;       /* submits over a principal's quota */
    int64_t jobs_expired;        /* released unfetched (expire_ms) */
    int64_t connections_refused; /* closed by the connection budgets */
} goblin_gateway_stats;

GOBLIN_API void goblin_gateway_stats_get(goblin_gateway *gw, goblin_gateway_stats *out);

GOBLIN_END_DECLS

#endif
