/* goblin/node.h - the node of the distributed runtime: it plans jobs into tasks,
 * leases tasks to workers, verifies every result and assembles the output.
 *
 * A node listens on one or more URLs (tcp://, ipc://, inproc:// now; tls+tcp:// is
 * set up in the same place once the TLS layer lands). Workers dial in (see
 * worker.h), say HELLO, ask for leases and send RESULTs. Every matmul result is
 * checked with Freivalds' algorithm on the node (verify.h) before it is accepted;
 * docs/runtime.md describes the scheduler, the leases, the panel cache protocol
 * and the counters.
 *
 * Thread safety: a node runs its own thread; all calls on a node and its jobs are
 * thread-safe, except _free, which must not race with other calls on the object. */
#ifndef GOBLIN_NODE_H
#define GOBLIN_NODE_H

#include "api.h"
#include "dtype.h"
#include "error.h"
#include "exec.h"
#include "tensor.h"
#include "plan.h"
#include "verify.h"

GOBLIN_BEGIN_DECLS

/* ---- logging (shared by node and worker) ----------------------------------- */

typedef enum goblin_log_level {
    GOBLIN_LOG_ERROR = 0,
    GOBLIN_LOG_WARN = 1,
    GOBLIN_LOG_INFO = 2,
    GOBLIN_LOG_DEBUG = 3,
    GOBLIN_LOG_LEVEL_COUNT
} goblin_log_level;

/** Receives one log line (no trailing newline; valid during the call only). Called
 *  from the library's threads; must not call back into the object that logs. */
typedef void (*goblin_log_fn)(void *user, goblin_log_level level, const char *line);

/** "error", "warn", "info", "debug"; "invalid" if out of range. */
GOBLIN_API const char *goblin_log_level_name(goblin_log_level level);

/* ---- node ------------------------------------------------------------------ */

#define GOBLIN_NODE_MAX_LISTEN 8

/** How matmul results are checked. There is no "off" except the named unsafe mode. */
typedef enum goblin_verify_policy {
    GOBLIN_VERIFY_POLICY_FREIVALDS = 0, /* every tile: Freivalds with a fresh secret seed (default) */
    GOBLIN_VERIFY_POLICY_RECOMPUTE = 1, /* every tile recomputed on the node and compared (slow; tests) */
    GOBLIN_VERIFY_POLICY_UNSAFE_NONE = 2, /* no check at all: benchmarks only */
    GOBLIN_VERIFY_POLICY_COUNT
} goblin_verify_policy;

typedef struct goblin_node_params {
    const char *listen[GOBLIN_NODE_MAX_LISTEN]; /* URLs (borrowed during _new; copied) */
    int32_t n_listen;                           /* 1 .. GOBLIN_NODE_MAX_LISTEN */
    uint32_t lease_ms;            /* a lease lasts this long (default 30000) */
    int32_t max_retries;          /* failed leases per task before the job fails (default 4) */
    goblin_verify_policy verify;  /* default FREIVALDS */
    int32_t freivalds_vectors;    /* 1 .. GOBLIN_FREIVALDS_MAX_VECTORS (default 4) */
    uint64_t recv_max_bytes;      /* largest message accepted (also NNG_OPT_RECVMAXSZ; default 1 GiB) */
    goblin_backend_kind recompute_backend; /* node-side recomputation (default: BLIS when built) */
    int32_t recompute_threads;    /* 0 = all cores */
    bool speculate;               /* duplicate straggler tasks near a job's end (default true) */
    const uint8_t *join_token;    /* if token_len > 0, workers must present it (copied) */
    uint32_t token_len;
    goblin_log_fn log;            /* NULL: no logging */
    void *log_user;
    goblin_log_level log_level;   /* lines above this level are dropped (default INFO) */
    /* TLS (docs/security.md): the node's PEM certificate (chain) and unencrypted PEM
     * key, used by every tls+tcp:// listen URL (required for those; copied). */
    const char *cert_file;
    const char *key_file;
    /* Plain tcp:// is refused on a non-loopback address (GOBLIN_EINVAL from _new)
     * unless this is set: worker traffic must be encrypted off the machine. */
    bool insecure_plaintext;
    /* A token file of salted hashes (tls.h, goblin_token_check_file; copied path): if
     * set, a worker's HELLO token must match one of its entries (read at every HELLO,
     * so entries can be added or revoked while the node runs). Checked for format by
     * _new (GOBLIN_EINVAL with a log line). May be combined with join_token: then
     * either is accepted. */
    const char *token_file;
} goblin_node_params;

GOBLIN_API void goblin_node_params_default(goblin_node_params *p);

typedef struct goblin_node goblin_node;

/** Create a node (not yet listening). @p p copied. *out set only on success.
 *  GOBLIN_EINVAL for bad params, GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_node_new(goblin_node **out, const goblin_node_params *p);
/** Listen on every URL and start the node's thread. GOBLIN_EIO (with a log line) if a
 *  URL cannot be listened on; GOBLIN_ESTATE if already started. */
GOBLIN_API goblin_err goblin_node_start(goblin_node *node);
/** Stop: close the sockets (workers see the node go away), end every running job with
 *  GOBLIN_ECANCELED, join the thread. Idempotent. */
GOBLIN_API void goblin_node_stop(goblin_node *node);
/** Stop if needed and free. Jobs must be freed before (or they are detached: their
 *  handles stay valid until goblin_job_free). NULL is a no-op. */
GOBLIN_API void goblin_node_free(goblin_node *node);

/* ---- jobs ------------------------------------------------------------------- */

typedef enum goblin_job_status {
    GOBLIN_JOB_RUNNING = 0,
    GOBLIN_JOB_DONE = 1,
    GOBLIN_JOB_FAILED = 2,
    GOBLIN_JOB_CANCELED = 3,
    GOBLIN_JOB_STATUS_COUNT
} goblin_job_status;

/** Called from the node's thread after each task is accepted (done of total tasks). */
typedef void (*goblin_progress_fn)(void *user, int64_t done, int64_t total);

typedef struct goblin_job_params {
    uint64_t task_memory_bytes; /* memory for one task; 0 = the smallest memory advertised by
                                   the connected workers (or 256 MiB if none yet) */
    int64_t min_tasks;          /* cut finer until at least this many tasks (default 0: 4 per
                                   connected worker) */
    goblin_progress_fn progress;
    void *progress_user;
} goblin_job_params;

GOBLIN_API void goblin_job_params_default(goblin_job_params *p);

typedef struct goblin_job goblin_job;

/** Submit C = A . B. @p a [m, k], @p b [k, n], @p c [m, n]: borrowed for the whole job
 *  (until it ends; the caller's memory, any strides, may be memory-mapped files);
 *  all f32 or all f64. Only panels of A and B are read and only tiles of C written.
 *  @p jp NULL for defaults. *out set on success (free with goblin_job_free).
 *  GOBLIN_EINVAL, GOBLIN_ESHAPE, GOBLIN_EDTYPE, GOBLIN_ESTATE (node not started),
 *  GOBLIN_ERANGE (budget too small), GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_node_submit_matmul(goblin_node *node, const goblin_tensor *a,
                                                const goblin_tensor *b, goblin_tensor *c,
                                                const goblin_job_params *jp, goblin_job **out);

/** Wait until the job ends or @p timeout_ms passes (< 0: forever). Returns the job's
 *  result: GOBLIN_OK (done), its error (failed: GOBLIN_ELIMIT when a task failed more
 *  than max_retries times; goblin_job_error says which and why), GOBLIN_ECANCELED, or
 *  GOBLIN_ETIMEDOUT if still running. */
GOBLIN_API goblin_err goblin_job_wait(goblin_job *job, int64_t timeout_ms);
GOBLIN_API void goblin_job_progress(goblin_job *job, int64_t *done, int64_t *total);
/** Cancel a running job (its leases are dropped; late results are ignored). */
GOBLIN_API void goblin_job_cancel(goblin_job *job);
GOBLIN_API goblin_job_status goblin_job_get_status(goblin_job *job);
/** Why the job failed or was canceled ("" otherwise). Valid until goblin_job_free. */
GOBLIN_API const char *goblin_job_error(goblin_job *job);
/** The job's plan (tiles, K-slices). GOBLIN_EINVAL; GOBLIN_ENOTFOUND for an empty
 *  product, which has no plan. */
GOBLIN_API goblin_err goblin_job_plan_info(goblin_job *job, goblin_plan_info *out);
/** Cancel if running and free. NULL is a no-op. */
GOBLIN_API void goblin_job_free(goblin_job *job);

/* ---- counters --------------------------------------------------------------- */

typedef struct goblin_node_stats {
    int64_t tasks_issued;      /* leases handed out (first issues, reissues and duplicates) */
    int64_t tasks_completed;   /* tasks whose result is final */
    int64_t results_accepted;  /* results that passed verification */
    int64_t results_rejected;  /* results that failed verification */
    int64_t rejected_by_reason[GOBLIN_VERIFY_REASON_COUNT];
    int64_t results_escalated; /* inconclusive checks: decided by recomputation on the node */
    int64_t results_duplicate; /* results for a task already completed (speculation); discarded */
    int64_t results_late;      /* results for a lease no longer held; discarded */
    int64_t tasks_reissued;    /* leases that failed (expired, disconnect, rejected, error) */
    int64_t tasks_speculative; /* duplicate leases of stragglers */
    int64_t panel_cache_hits;  /* tasks sent without a panel the worker holds */
    int64_t panel_cache_misses;/* worker had evicted a panel: task resent with data */
    int64_t rechecked;         /* earlier accepted results re-verified after a quarantine */
    int64_t recheck_failed;    /* of which failed and were recomputed */
    int64_t peers_dropped;     /* connections closed for protocol violations */
    int64_t workers_refused;   /* HELLOs refused (version, token) */
    int64_t workers_connected; /* currently */
    int64_t workers_quarantined;
    int64_t workers_seen;      /* ever said HELLO; index range of goblin_node_worker_stats */
} goblin_node_stats;

GOBLIN_API void goblin_node_stats_get(goblin_node *node, goblin_node_stats *out);

typedef struct goblin_node_worker_stats {
    uint64_t session_id;
    bool connected, quarantined;
    int32_t threads;
    uint64_t memory_bytes;
    int64_t issued, accepted, rejected, failed_leases;
} goblin_node_worker_stats;

/** Counters of worker @p i (0 .. workers_seen - 1, in HELLO order). GOBLIN_EINDEX. */
GOBLIN_API goblin_err goblin_node_worker_stats_get(goblin_node *node, int64_t i,
                                                   goblin_node_worker_stats *out);

GOBLIN_END_DECLS

#endif
