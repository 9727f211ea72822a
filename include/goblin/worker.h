/* goblin/worker.h - a worker of the distributed runtime: dials out to one or more
 * nodes, says HELLO (backends, threads, memory budget, catalogue version), asks for
 * leases and computes tasks (small serialized graphs) with goblin_exec on its
 * backend. It never writes task data to disk; received panels are kept in a bounded
 * in-memory cache (docs/runtime.md, "panel cache").
 *
 * Fault injection (`misbehave`) exists for tests and demos only: a worker set to
 * misbehave deliberately returns bad results so that the node's verification can be
 * measured. Never enable it in production.
 *
 * Thread safety: goblin_worker_run blocks in the caller's thread; goblin_worker_stop
 * may be called from any thread (or a signal-safe context: it only sets a flag). */
#ifndef GOBLIN_WORKER_H
#define GOBLIN_WORKER_H

#include "api.h"
#include "error.h"
#include "exec.h"
#include "log.h"

GOBLIN_BEGIN_DECLS

#define GOBLIN_WORKER_MAX_CONNECT 8

typedef enum goblin_misbehave {
    GOBLIN_MISBEHAVE_NONE = 0,
    GOBLIN_MISBEHAVE_WRONG = 1,    /* random wrong values */
    GOBLIN_MISBEHAVE_SCALE = 2,    /* result multiplied by (1 + 1e-3) */
    GOBLIN_MISBEHAVE_NAN = 3,      /* one element NaN */
    GOBLIN_MISBEHAVE_STALE = 4,    /* resend an earlier result under the new task id */
    GOBLIN_MISBEHAVE_SWAP = 5,     /* send the previous task's result for this one */
    GOBLIN_MISBEHAVE_TRUNCATE = 6, /* drop the last row of the result */
    GOBLIN_MISBEHAVE_SILENT = 7,   /* take the lease, never answer */
    GOBLIN_MISBEHAVE_SLOW = 8,     /* answer (correctly) after slow_ms */
    GOBLIN_MISBEHAVE_CRASH = 9,    /* die mid-task: see crash_hook / crash_may_exit */
    GOBLIN_MISBEHAVE_COUNT
} goblin_misbehave;

/** "none", "wrong", ... ; NULL if out of range. */
GOBLIN_API const char *goblin_misbehave_name(goblin_misbehave mode);
/** Parse "MODE" or "MODE:RATE" (rate in [0, 1], default 1). GOBLIN_EINVAL. */
GOBLIN_API goblin_err goblin_misbehave_parse(const char *s, goblin_misbehave *mode, double *rate);

typedef struct goblin_worker_params {
    const char *connect[GOBLIN_WORKER_MAX_CONNECT]; /* node URLs (copied) */
    int32_t n_connect;              /* 1 .. GOBLIN_WORKER_MAX_CONNECT */
    goblin_backend_kind backend;    /* default BLIS when built, else REF */
    int32_t threads;                /* kernel threads; 0 = all cores (advertised as >= 1) */
    uint64_t memory_bytes;          /* budget advertised for tasks (default 1 GiB) */
    uint64_t cache_bytes;           /* panel cache bound (default memory_bytes / 4; 0 disables) */
    /** Drop every input kept for reuse once no TASK has come for this long (default
     *  30000 ms; 0 keeps them until evicted or the connection ends), so that a job's
     *  numbers do not stay in a volunteer's memory after the work is done. */
    uint32_t cache_idle_ms;
    int32_t slots;                  /* tasks asked for in flight (default 2; a node keeps at most 2) */
    const uint8_t *join_token;      /* presented in HELLO (copied) */
    uint32_t token_len;
    uint32_t reconnect_min_ms;      /* redial backoff (defaults 100 and 5000) */
    uint32_t reconnect_max_ms;
    uint64_t recv_max_bytes;        /* largest message accepted (default 1 GiB + 1 MiB) */
    /* Fault injection (tests and demos only). */
    goblin_misbehave misbehave;
    double misbehave_rate;          /* probability per task, [0, 1] */
    uint64_t misbehave_seed;        /* which tasks misbehave (deterministic) */
    uint32_t slow_ms;               /* SLOW delay (default 2000) */
    /** CRASH: if set, called instead of dying (e.g. a test hook); the worker then
     *  returns from goblin_worker_run with GOBLIN_ECLOSED without answering. */
    void (*crash_hook)(void *user);
    void *crash_user;
    /** CRASH without a hook: true lets the library call _exit(3) (a dedicated worker
     *  process); false (default) behaves as if the hook were set to nothing. */
    bool crash_may_exit;
    /* Testing only: pretend to speak another catalogue version in HELLO (0 = real). */
    uint32_t catalog_version_override;
    goblin_log_fn log;
    void *log_user;
    goblin_log_level log_level;     /* default INFO */
    /* TLS trust for tls+tcp:// nodes (copied): exactly one of a PEM CA file and a
     * pinned SHA-256 fingerprint of the node's certificate (hex, any form
     * goblin_tls_fingerprint_normalize takes). tls_server_name: CA mode only, the
     * name checked against the node's certificate (NULL: see tls_impl.h). */
    const char *tls_ca_file;
    const char *tls_fingerprint;
    const char *tls_server_name;
} goblin_worker_params;

GOBLIN_API void goblin_worker_params_default(goblin_worker_params *p);

typedef struct goblin_worker goblin_worker;

GOBLIN_API goblin_err goblin_worker_new(goblin_worker **out, const goblin_worker_params *p);
/** Dial out and serve until goblin_worker_stop (GOBLIN_OK), a node REFUSEs the worker
 *  (its reason, e.g. GOBLIN_EVERSION or GOBLIN_EAUTH, logged) or a CRASH (ECLOSED).
 *  On stop, tasks in progress are ABANDONed so the node reissues them at once.
 *  A worker runs once: after it returns, free it (a new one may run again). */
GOBLIN_API goblin_err goblin_worker_run(goblin_worker *w);
/** Ask goblin_worker_run to return (soon). Any thread. */
GOBLIN_API void goblin_worker_stop(goblin_worker *w);
GOBLIN_API void goblin_worker_free(goblin_worker *w);

typedef struct goblin_worker_stats {
    int64_t tasks_done, tasks_failed, misbehaved, cache_hits, cache_misses, connects, refused;
    /** Times the worker asked for leases again after waiting a second without a TASK
     *  although it had asked for some (a lost TASK would otherwise idle it for good). */
    int64_t lease_resyncs;
    /** Inputs computed on in place: a node of this process (inproc://) lent them instead
     *  of copying them into the TASK. */
    int64_t inputs_in_place;
    /** Times the kept inputs were dropped after cache_idle_ms without a TASK. */
    int64_t cache_expiries;
    /** Inputs kept for reuse now, and their bytes (as of the last message handled). */
    int64_t cached_inputs, cached_bytes;
} goblin_worker_stats;

GOBLIN_API void goblin_worker_stats_get(goblin_worker *w, goblin_worker_stats *out);

GOBLIN_END_DECLS

#endif
