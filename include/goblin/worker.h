/* goblin/worker.h - a worker of the distributed runtime: dials out to one or more
 * nodes, says HELLO (backends, threads, memory budget, catalogue version), asks for
 * leases and computes tasks (small serialized graphs) with goblin_exec on its
 * backend. It never writes task data to disk; received panels are kept in a bounded
 * in-memory cache (docs/runtime.md, "panel cache").
 *
 * Fault injection (a worker that lies on purpose, for tests and demos) is not
 * configured here: see testctrl.h.
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

typedef struct goblin_worker_params {
    const char *connect[GOBLIN_WORKER_MAX_CONNECT]; /* node URLs (copied) */
    int32_t n_connect;              /* 1 .. GOBLIN_WORKER_MAX_CONNECT */
    goblin_backend_kind backend;    /* default BLIS when built, else REF */
    int32_t threads;                /* kernel threads; 0 = all cores (advertised as >= 1) */
    uint64_t memory_bytes;          /* all the task data it may hold (default 1 GiB): each task gets
                                       (memory - cache) / (slots + 1), docs/runtime.md */
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
    /* The directory of this installation's identity key (copied; docs/security.md,
     * "Worker identities"): worker_key.pem there is loaded, or made (mode 0600, the
     * directory 0700) on first start; the only file a worker writes. NULL: a fresh key
     * in memory for this worker object only (in-process workers, tests). */
    const char *config_dir;
} goblin_worker_params;

GOBLIN_API void goblin_worker_params_default(goblin_worker_params *p);

typedef struct goblin_worker goblin_worker;

/** Create a worker; its identity key is loaded or made here. @p p copied; *out only on
 *  success. GOBLIN_EINVAL; GOBLIN_EIO / GOBLIN_EFORMAT for a config_dir whose key cannot
 *  be made or read (logged); GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_worker_new(goblin_worker **out, const goblin_worker_params *p);
/** The worker's identity: the SHA-256 fingerprint of its public key, 64 lowercase hex
 *  digits (valid until goblin_worker_free; "" for NULL). */
GOBLIN_API const char *goblin_worker_identity(const goblin_worker *w);
/** Dial out and serve until goblin_worker_stop (GOBLIN_OK), a node REFUSEs the worker
 *  (its reason, e.g. GOBLIN_EVERSION or GOBLIN_EAUTH, logged) or, under fault
 *  injection (testctrl.h), a CRASH (GOBLIN_ECLOSED).
 *  On stop, tasks in progress are ABANDONed so the node reissues them at once.
 *  A worker runs once: after it returns, free it (a new one may run again). */
GOBLIN_API goblin_err goblin_worker_run(goblin_worker *w);
/** Ask goblin_worker_run to return (soon). Any thread. */
GOBLIN_API void goblin_worker_stop(goblin_worker *w);
GOBLIN_API void goblin_worker_free(goblin_worker *w);

typedef struct goblin_worker_stats {
    /** misbehaved: tasks answered wrongly on purpose (fault injection, testctrl.h). */
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
    /** Messages of a connection that had ended, dropped: received on it and not yet
     *  handled (its TASKs, reissued by the node), or meant for it and not yet sent
     *  (RESULTs of its leases, which the node has already given to other workers). */
    int64_t stale_dropped;
    /** Direct introductions (docs/hub.md): a hub sent this worker to dial a lab node
     *  itself; of those, the ones that did not join (it went back to the hub, which
     *  then relays it). */
    int64_t introductions, introductions_failed;
} goblin_worker_stats;

GOBLIN_API void goblin_worker_stats_get(goblin_worker *w, goblin_worker_stats *out);

/* ---- linking the identity to a volunteer's hub account (docs/hub.md) ---------------- */

/** Bytes for a link statement: one line of printable ASCII and its NUL. */
#define GOBLIN_WORKER_LINK_STATEMENT_SIZE 288

/** The link statement of the identity key in @p config_dir (borrowed; the key is made
 *  there, as goblin_worker_new would, if there is none yet) for the hub account whose
 *  link code is @p code (borrowed; 32 lowercase hex digits, from the account page):
 *  "goblin-link-v1 CODE PUBLIC-KEY SIGNATURE" into @p out (@p cap bytes, at least
 *  GOBLIN_WORKER_LINK_STATEMENT_SIZE), and the identity (64 hex digits and a NUL) into
 *  @p identity_out (may be NULL). The statement carries no secret: the signature
 *  proves possession of the key for this code only, and the hub takes it only into the
 *  account whose current code it is. GOBLIN_EINVAL (a code of the wrong form: no key
 *  is made), GOBLIN_EIO / GOBLIN_EFORMAT (the key cannot be read or made), GOBLIN_ENOMEM;
 *  @p err says why. Reentrant. */
GOBLIN_API goblin_err goblin_worker_link_statement(const char *config_dir, const char *code, char *out,
                                                   size_t cap, char *identity_out, goblin_errbuf *err);

GOBLIN_END_DECLS

#endif
