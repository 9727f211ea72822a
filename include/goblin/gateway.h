/* goblin/gateway.h - the node side of the client protocol (client.h).
 *
 * A node that serves clients runs a gateway in its process: it listens on its own
 * URL(s) (tcp://, ipc://, tls+tcp://), decodes each request as hostile bytes and calls
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

GOBLIN_BEGIN_DECLS

#define GOBLIN_GATEWAY_MAX_LISTEN 8

typedef struct goblin_gateway_params {
    const char *listen[GOBLIN_GATEWAY_MAX_LISTEN]; /* URLs (copied) */
    int32_t n_listen;            /* 1 .. GOBLIN_GATEWAY_MAX_LISTEN */
    const char *cert_file;       /* needed for tls+tcp:// URLs (copied) */
    const char *key_file;
    bool allow_files;            /* accept SUBMIT_MATMUL_FILES (default true) */
    uint64_t recv_max_bytes;     /* largest request (default 8 GiB) */
    int32_t max_jobs;            /* jobs held at once, running or unfetched (default 64) */
    goblin_job_params job;       /* for every submitted job (progress fields ignored) */
    goblin_log_fn log;
    void *log_user;
    goblin_log_level log_level;  /* default INFO */
    /* Client authentication. With either set, a client must send an AUTH request with
     * a token that matches before anything else (other requests are answered
     * GOBLIN_EAUTH, "this node requires a client token"); a connection stays
     * authenticated until it closes. token_file: a file of salted hashes (lines
     * "salt:hash", the format of the node's token_file, goblin_token_entry), re-read on
     * every AUTH so that entries can be revoked (copied path). token/token_len: one
     * token (copied; compared in constant time). Both NULL / 0: no authentication. */
    const char *token_file;
    const uint8_t *token;
    uint32_t token_len;
} goblin_gateway_params;

GOBLIN_API void goblin_gateway_params_default(goblin_gateway_params *p);

typedef struct goblin_gateway goblin_gateway;

/** A gateway for @p node (borrowed: must outlive the gateway). Not yet listening.
 *  GOBLIN_EINVAL, GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_gateway_new(goblin_gateway **out, goblin_node *node,
                                         const goblin_gateway_params *p);
/** Listen and serve in the gateway's own thread. GOBLIN_EIO (logged) if a URL cannot be
 *  listened on, GOBLIN_ESTATE if already started. */
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
    int64_t requests, jobs_submitted, jobs_held, refused; /* refused: malformed requests */
} goblin_gateway_stats;

GOBLIN_API void goblin_gateway_stats_get(goblin_gateway *gw, goblin_gateway_stats *out);

GOBLIN_END_DECLS

#endif
