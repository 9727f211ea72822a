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
#include "log.h"
#include "exec.h"
#include "tensor.h"
#include "verify.h"

GOBLIN_BEGIN_DECLS

/* ---- node ------------------------------------------------------------------ */

#define GOBLIN_NODE_MAX_LISTEN 8

typedef struct goblin_node_params {
    const char *listen[GOBLIN_NODE_MAX_LISTEN]; /* URLs (borrowed during _new; copied) */
    int32_t n_listen;                           /* 1 .. GOBLIN_NODE_MAX_LISTEN */
    uint32_t lease_ms;            /* a lease lasts this long (default 30000) */
    int32_t max_retries;          /* failed leases per task before the job fails (default 4) */
    goblin_verify verify;  /* default FREIVALDS */
    int32_t freivalds_vectors;    /* 1 .. GOBLIN_FREIVALDS_MAX_VECTORS (default 4) */
    int32_t verify_threads;       /* 1 or 2 (default 2): threads of a Freivalds pass over a long
                                     row range (goblin_freivalds_params.threads; the same
                                     verdicts), so that on cores shared with busy workers the
                                     node's checks fall on two cores instead of one */
    bool freivalds_tile_by_tile;  /* judge each matmul tile alone as it arrives (default false:
                                     a row panel's tiles together once all are in, one product
                                     per vector in the pass over A instead of one per column
                                     panel; docs/verification.md) */
    uint64_t recv_max_bytes;      /* largest message accepted from a worker (default 1 GiB).
                                     Workers send messages over 4 MiB in parts, which the node
                                     takes only from workers that proved their identity: no
                                     connection makes it hold more than 4 MiB before that */
    uint64_t max_buffered_bytes;  /* worker messages being received in parts, all workers
                                     together (default 4 GiB): a worker whose message would
                                     go over it is dropped (its leases are reissued) */
    int32_t max_pending_connections; /* connections that have not yet proved a worker
                                     identity nor sent a client request (default 256): more
                                     are closed as they come, and each gets the handshake
                                     time (15 s, or 3 heartbeats if longer). Each may make
                                     nng buffer one part (4 MiB) meanwhile */
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
    /* Liveness: HELLO_ACK asks workers to send a HEARTBEAT at least this often; a worker
     * the node has heard nothing from for 3 x heartbeat_ms is dropped and its leases are
     * reissued (docs/runtime.md). 0 = off. Default 5000. */
    uint32_t heartbeat_ms;
    /* Worker identities (docs/security.md, "Worker identities"). Every worker proves at
     * HELLO that it holds the private key of its identity (the SHA-256 fingerprint of
     * its public key, 64 hex digits). Paths are copied; each file is read by _new
     * (GOBLIN_EINVAL with a log line for one that cannot be read or has a bad line);
     * lines hold a fingerprint first, '#' starts a comment. */
    /* Quarantined identities, one fingerprint a line: read by _new, rewritten (mode 0600,
     * atomically) whenever an identity is quarantined, so a caught worker stays refused
     * across reconnects and node restarts. Missing: none yet (made at the first
     * quarantine). NULL: quarantine lasts while the node runs. The only state kept. */
    const char *quarantine_file;
    /* If set, only identities listed here (one fingerprint a line) are admitted. */
    const char *allow_identities_file;
    /* Lines "fingerprint owner": identities of one owner count as one worker (a replica
     * never goes to the same owner) and are quarantined together. */
    const char *owners_file;
    /* Who checks whom (docs/verification.md, "Threat model"). A replica of a graph
     * task goes only to a worker of another identity, another owner and another
     * network origin (IPv4 /24, IPv6 /48 of the connection's remote address; local
     * connections, over inproc://, ipc:// or loopback, have no network origin unless a
     * test assigns one, goblin/testctrl.h); with none connected the node checks the
     * task itself. Probation: the first probation_results results of a new identity
     * (default 16; 0: none) are all checked by the node or by an established worker
     * of another party: a fresh key starts with no trust. */
    int32_t probation_results;
    /* Secret audits: the share of graph-task results accepted by replica agreement or
     * by trust that the node recomputes anyway, drawn in secret (default 0.02; 0..1):
     * a pair of cheaters that slips past the rules above is caught with probability
     * audit_rate per wrong result, and then quarantined together with every result
     * they gave in running jobs rechecked. */
    double audit_rate;
} goblin_node_params;

GOBLIN_API void goblin_node_params_default(goblin_node_params *p);

/** Is @p url on this machine: ipc://, inproc://, or tcp to a numeric loopback address
 *  (127.0.0.0/8 or [::1]) with a numeric port? Host names, "localhost" included, are
 *  not: a name can resolve anywhere. Plain text and open mode are allowed only there. */
GOBLIN_API bool goblin_url_is_local(const char *url);

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
                                   the workers asking for work (or 256 MiB if none yet) */
    int64_t min_tasks;          /* cut finer until at least this many tasks (default 0: 4 per
                                   worker asking for work, weighted by threads: docs/runtime.md,
                                   "Capacity") */
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

/** Wait until the job ends or @p timeout_ms passes (< 0: forever). Once it has reported
 *  the end, no worker reads the job's inputs any more (in-process workers compute on
 *  them in place: docs/runtime.md, "Embedded grid"). Returns the job's
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
/** A matmul job's plan in numbers: how C [m, n] was cut into tiles and K-slices. */
typedef struct goblin_job_plan {
    int64_t m, k, n;
    goblin_dtype dtype;
    int64_t grid_rows, grid_cols, k_slices; /* tasks = grid_rows * grid_cols * k_slices */
    int64_t tile_rows, tile_cols, tile_k;   /* the largest task's extents */
    uint64_t budget_bytes;                  /* the task memory budget less the headroom */
    uint64_t max_task_bytes;                /* the largest task's A panel + B panel + C tile */
    double flops_per_byte;                  /* 2 rows cols kn / bytes moved, largest task */
} goblin_job_plan;

/** The job's plan (tiles, K-slices). GOBLIN_EINVAL; GOBLIN_ENOTFOUND for an empty
 *  product, which has no plan. */
GOBLIN_API goblin_err goblin_job_plan_info(goblin_job *job, goblin_job_plan *out);
/** Cancel if running and free. NULL is a no-op. */
GOBLIN_API void goblin_job_free(goblin_job *job);


/* ---- graph jobs ------------------------------------------------------------
 *
 * A graph job evaluates a graph over inputs that may be far larger than any worker's
 * memory. Inputs marked GOBLIN_SPLIT_BATCH are cut along their batch dimension into
 * chunks of at most chunk_rows rows (every batched input has B samples); the others are
 * sent whole to every task (and cached on the workers under cache_ids, so parameters
 * travel once per worker). The batch dimension is traced through the graph
 * (docs/graph-format.md, "The batch axis"): dim 0 of the batched inputs, unless the
 * graph's outputs are per-sample only along another dim (a seq-first [seq, batch, ...]
 * model: dim 1). Each chunk is one task: the node re-instantiates the graph for the
 * chunk's row count (every node is re-added with its attributes, so shapes are
 * re-inferred; a RESHAPE, EXPAND or creation op's target dim holding the batch is
 * rescaled) and sends it with the chunk's rows.
 *
 * Each output is assembled on the node by its combine rule, over the chunks in chunk
 * order (a fixed order: the result does not depend on which worker finished first):
 *   CONCAT  along the output's batch dim (any dim that follows the batch; given
 *           explicitly, also for an output that is not per-sample: every chunk is then
 *           computed on its own rows);
 *   SUM     elementwise sum of the chunks' outputs (partial reductions);
 *   MEAN    sum of chunk_rows_c / B * output_c (a per-chunk mean becomes the mean
 *           over the whole batch; also how per-chunk gradients of a mean loss combine);
 *   MAX/MIN elementwise;
 *   AUTO    CONCAT if a dim of the output follows the batch, else SUM if the output
 *           node is a SUM over axes that include the batch axis, MEAN for a MEAN,
 *           MAX/MIN for those; otherwise the submit fails with GOBLIN_EINVAL naming the
 *           output. A job of several chunks whose AUTO output is not per-sample (a node
 *           before it reduces over the batch, works along it, ...) fails with
 *           GOBLIN_ESHAPE naming that node.
 *
 * Verification (docs/verification.md): REPLICATE runs a task on two workers of
 * different identity, owner (when owners_file names owners) and network origin
 * (goblin_node_params.probation_results and audit_rate: who checks whom); bit-equal
 * results are accepted at once, results that differ are
 * decided by recomputing the task on the node (a worker whose result disagrees with the
 * node's beyond the ops' numeric contracts is caught: result rejected, worker
 * quarantined, its unreplicated results in running jobs recomputed). Adaptive trust:
 * a worker's tasks are replicated with probability
 *     max(min_replication, 1 / (1 + accepted_agreements / trust_halflife)),
 * so a new worker is always replicated and never drops below min_replication (trust
 * belongs to the identity, over its connections; an identity on probation is always
 * replicated). With no eligible worker of another party connected, a task that must be
 * replicated is recomputed on the node instead. RECOMPUTE recomputes every task on the node. UNSAFE_NONE checks
 * shapes only (benchmarks).
 *
 * SPOT (for graphs whose outputs are all CONCAT, i.e. computed row by row: inference
 * over a batch) checks a task on the node alone, at a few per cent of its cost: the node
 * recomputes spot_rows secretly chosen rows of the chunk (a copy of the graph re-instantiated
 * for that many rows, fed those rows of the batched inputs) and compares them with the
 * same rows of the worker's result under the output ops' contracts; every row of the
 * result holding a NaN or an infinity is recomputed and compared too. Agreement accepts
 * the whole result; anything else is decided by recomputing the whole task on the node
 * (so a graph that is not row by row costs time, never a wrong verdict). A worker that
 * changes a share f of a result's rows escapes one check with probability (1 - f)^k;
 * results that change every row (wrong values, scaling, stale or swapped results) or
 * hold a NaN/inf are caught at once. The checked share of a worker's tasks follows the
 * same adaptive trust as REPLICATE (min_replication, trust_halflife); a caught worker is
 * quarantined and its unchecked or spot-checked results in running jobs recomputed. */

typedef enum goblin_combine {
    GOBLIN_COMBINE_AUTO = 0,
    GOBLIN_COMBINE_CONCAT = 1,
    GOBLIN_COMBINE_SUM = 2,
    GOBLIN_COMBINE_MEAN = 3,
    GOBLIN_COMBINE_MAX = 4,
    GOBLIN_COMBINE_MIN = 5,
    GOBLIN_COMBINE_COUNT
} goblin_combine;

/** "auto", "concat", "sum", "mean", "max" or "min"; NULL for a value outside the enum. */
GOBLIN_API const char *goblin_combine_name(goblin_combine c);
/** The rule named @p name (as goblin_combine_name gives it) into *out; GOBLIN_EINVAL. */
GOBLIN_API goblin_err goblin_combine_from_name(const char *name, goblin_combine *out);

#define GOBLIN_GRAPH_JOB_MAX_IO 1024

typedef struct goblin_graph_job_params {
    goblin_job_params job;         /* memory budget, min_tasks, progress */
    int64_t chunk_rows;            /* rows per task; 0 = as many as fit the memory budget,
                                      then cut finer until min_tasks */
    const goblin_split *split;     /* per input (borrowed during submit); NULL: BATCH for
                                      every input whose leading dim equals input 0's, and
                                      BROADCAST for the rest */
    const goblin_combine *combine; /* per output (borrowed during submit); NULL: all AUTO */
    const uint64_t *cache_ids;     /* per input, or NULL: a non-zero id names a BROADCAST
                                      input's content; the same id must always mean the same
                                      bytes (workers keep it in their cache across jobs) */
    goblin_verify verify;    /* default CHECKED (REPLICATE where it does not apply) */
    double min_replication;        /* (0, 1]; default 0.25: the least share of a trusted
                                      worker's tasks replicated (REPLICATE) or spot-checked (SPOT) */
    double trust_halflife;         /* agreements that halve the replication rate; default 20 */
    int32_t spot_rows;             /* SPOT: rows recomputed per checked task, 0..65535;
                                      0 (default): min(4, rows / 16), at least 1; SPOT jobs
                                      are cut into 2 chunks per worker by default (not 4) */
    double checked_max_share;      /* CHECKED applies when the node's estimated share of a
                                      task's work (the nodes it evaluates and the Freivalds
                                      checks) is at most this; > 0, default 0.25; >= 1:
                                      whenever the graph has a checkable product */
} goblin_graph_job_params;

GOBLIN_API void goblin_graph_job_params_default(goblin_graph_job_params *p);

/** Submit a graph job: evaluate @p g (borrowed during the call: the node keeps its own
 *  copy) on @p inputs (n_inputs == the graph's input count; borrowed for the whole job,
 *  any strides, may be memory-mapped) into @p outputs (n_outputs == the graph's output
 *  count, each with the graph's output dtype and shape; borrowed for the whole job; the
 *  caller's memory, any strides). Errors: GOBLIN_EINVAL (counts, a split/combine that
 *  does not apply: the message says which), GOBLIN_ESHAPE / GOBLIN_EDTYPE (an input or
 *  output that does not match the graph), GOBLIN_ESTATE (node not started),
 *  GOBLIN_ERANGE (one row of one chunk does not fit the memory budget), GOBLIN_ENOMEM.
 *  goblin_job_error() of a job that failed later says why; for a failed submit,
 *  goblin_node_submit_error() (and the node's log). */
GOBLIN_API goblin_err goblin_node_submit_graph(goblin_node *node, const goblin_graph *g,
                                               const goblin_tensor *inputs, int32_t n_inputs,
                                               goblin_tensor *outputs, int32_t n_outputs,
                                               const goblin_graph_job_params *jp,
                                               goblin_job **out);
/** Why the last goblin_node_submit_matmul / goblin_node_submit_graph called on this
 *  thread was refused, as the node logged it ("" after one that was accepted, or one
 *  refused for a NULL argument or a dtype/shape mismatch its return value says all of).
 *  Thread-local: valid until this thread's next submit. */
GOBLIN_API const char *goblin_node_submit_error(void);


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
    int64_t peers_dropped;     /* connections closed for protocol violations, or silent or
                                  over max_pending_connections before saying who they are */
    int64_t workers_refused;   /* HELLOs refused (version, token, identity proof, allow list,
                                  quarantined identity) */
    int64_t workers_connected; /* currently */
    int64_t workers_quarantined;
    int64_t workers_seen;      /* ever said HELLO; index range of goblin_node_worker_stats */
    /* graph jobs */
    int64_t replicas_issued;   /* extra leases for replication */
    int64_t replicas_agreed;   /* replica pairs that were bit-equal or within contract */
    int64_t node_recomputed;   /* graph tasks the node computed itself (RECOMPUTE, disagreement,
                                  or no second worker to replicate on) */
    int64_t verify_ns;         /* time the node spent verifying: Freivalds checks, replica
                                  comparisons, recomputations (nanoseconds) */
    int64_t spot_checks;       /* graph tasks spot-checked (SPOT) */
    int64_t spot_rows_checked; /* rows recomputed by those checks (NaN/inf rows included) */
    int64_t spot_checks_prepared; /* of those, checks whose secret rows the node had computed
                                     while the worker computed the task */
    int64_t panels_in_place;   /* inputs lent to in-process workers in place (inproc://: no copy
                                  into the TASK; matmul panels, graph-job inputs; docs/runtime.md) */
    int64_t freivalds_row_panels;   /* matmul row panels whose tiles were judged together */
    int64_t freivalds_row_fallbacks;/* of which not accepted at once: their tiles were then
                                       judged one by one, with fresh vectors */
    int64_t verify_cpu_ns;     /* CPU time of that verifying (nanoseconds): the node's
                                  thread and the Freivalds checks' second threads
                                  (verify_threads); not a recomputation's other BLIS
                                  threads (recompute_threads) */
    int64_t peers_tracked;     /* entries of the peer table now: connected peers and gone ones
                                  whose leases have not ended yet (bounded: freed after) */
    int64_t identities_tracked;/* identity records now (at most 4096) */
    int64_t workers_asking;    /* workers that jobs are cut by now: connected ones that ask for
                                  work (docs/runtime.md, "Capacity"), not idle connections */
    int64_t tasks_checked;     /* CHECKED: graph tasks whose products passed Freivalds' check and
                                  whose other nodes the node evaluated and compared */
    int64_t products_checked;  /* CHECKED: products (matmul nodes) checked by Freivalds' check */
    int64_t products_bytes;    /* CHECKED: bytes of the products workers returned with their
                                  results (what checked execution adds to a RESULT) */
    int64_t audits;            /* graph results the node recomputed in a secret audit (agreeing
                                  replicas, or a trusted worker's single result) */
    int64_t audits_failed;     /* of which the node's result disagreed: the workers quarantined */
    int64_t probation_checks;  /* results of identities on probation that the node checked
                                  (no established worker of another party vouched for them) */
    int64_t replicas_correlated; /* graph results checked on the node because no worker of
                                  another identity, owner and network origin could replicate */
} goblin_node_stats;

GOBLIN_API void goblin_node_stats_get(goblin_node *node, goblin_node_stats *out);

typedef struct goblin_node_worker_stats {
    uint64_t session_id;
    bool connected, quarantined;
    int32_t threads;
    uint64_t memory_bytes;
    int64_t issued, accepted, rejected, failed_leases;
    char identity[65]; /* the worker's identity (SHA-256 of its public key, hex) */
    char owner[64];    /* its owner from owners_file, "hub account N" (a volunteer the
                          hub named, OWNER), or "" */
    int64_t suspected; /* results the node recomputed because their check was inconclusive
                          (between the levels); the identity is quarantined at 3
                          (docs/verification.md, "Suspicion costs") */
    int64_t vouched;   /* results of its identity checked by the node or an established
                          worker of another party */
    bool probation;    /* its identity has fewer than probation_results vouched results */
    char origin[48];   /* its network origin ("10.1.2.0/24", "2001:db8:1::/48", "test:7"),
                          or "local" (no network origin) */
} goblin_node_worker_stats;

/** Counters of worker @p i, in HELLO order among the peers the node still tracks
 *  (connected ones, and gone ones until their leases end: fewer than workers_seen once
 *  workers have left). GOBLIN_EINDEX past the last. */
GOBLIN_API goblin_err goblin_node_worker_stats_get(goblin_node *node, int64_t i,
                                                   goblin_node_worker_stats *out);

/* ---- the status page ---------------------------------------------------------
 * (docs/run-a-node.md, "The status page"). A started node serves, on an address of its
 * own, what it is doing: / (an HTML page, no script), /status.json (the same as JSON)
 * and /metrics (Prometheus text, names goblin_node_*): the workers connected (each by
 * the first 16 hex digits of its identity's fingerprint: threads, memory, leases, tasks
 * done, rejected, quarantined, probation), the jobs the node holds (number, kind,
 * verification, state, tasks done of total, checked, computed on the node), the
 * node-wide verification counters and tasks per second. Never anything of the research:
 * no file names, operands, results, principals, owners, addresses or tokens. */

/** Serve the status page on @p url (borrowed): "http://127.0.0.1:PORT" (any 127.x.y.z,
 *  or "http://[::1]:PORT"; PORT 0: a free port, goblin_node_status_port says which), or
 *  "https://HOST:PORT" with the node's cert_file and key_file (required there). Plain
 *  http on any other address, a host name ("localhost" included) or a path is refused:
 *  GOBLIN_EINVAL, with the reason in the node's log. GOBLIN_ESTATE: the node is not
 *  started, or serves its page already; GOBLIN_EIO: the address cannot be listened on.
 *  The page is served until goblin_node_stop. GET and HEAD only (others 405). */
GOBLIN_API goblin_err goblin_node_status_listen(goblin_node *node, const char *url);
/** The port the status page listens on; GOBLIN_ESTATE if it is not served. */
GOBLIN_API goblin_err goblin_node_status_port(goblin_node *node, int *port);

/* ---- the hub: borrowing volunteers' workers through goblin-hub ---------------------- *
 * (docs/hub.md, "Machines"). A lab node whose researcher holds a node key of a hub
 * dials the hub's machines address; the hub lends it a share of the workers connected
 * there. Each lent worker reaches the node over a data connection the node dials for it,
 * as one more pipe of the node's socket: the worker's HELLO, identity proof, tasks and
 * results are the worker protocol, end to end, and every node rule applies to it (join
 * tokens, allow list, owners, quarantine, verification). */

/** Bytes of a node key's text and its NUL ("gbk1_" + 16 hex + "_" + 64 hex). */
#define GOBLIN_NODE_HUB_KEY_SIZE 87

typedef struct goblin_node_hub_params {
    const char *url;         /* the hub's machines address: tls+tcp://host:port (tcp:// on loopback) */
    const char *fingerprint; /* TLS: the hub certificate's SHA-256 (pinned; goblin-hub init prints it) */
    const char *ca_file;     /* ... or PEM CA certificates (exactly one of the two) */
    const char *key;         /* the node key (goblin_hub_key_create's text; secret, copied) */
    int32_t max_workers;     /* most workers borrowed at once (0: as many as the hub lends) */
    uint32_t timeout_ms;     /* the wait for the hub's first answer (default 10000) */
    /* Where lent workers can reach this node themselves (docs/hub.md, "Direct
     * introductions"): the hub then introduces each worker it lends here instead of
     * relaying its bytes. tls+tcp://host:port (the node's own certificate, cert_file,
     * whose fingerprint workers pin), or tcp:// on a loopback address; at most 256
     * bytes. NULL: every lent worker goes through the hub's relay. */
    const char *direct_url;
} goblin_node_hub_params;

GOBLIN_API void goblin_node_hub_params_default(goblin_node_hub_params *p);

/** Read a node key from file @p path (its only line) into @p out
 *  (GOBLIN_NODE_HUB_KEY_SIZE bytes). GOBLIN_ENOTFOUND, GOBLIN_EIO, GOBLIN_EFORMAT (not a
 *  key's form; the file's text is never logged). */
GOBLIN_API goblin_err goblin_node_hub_key_read(const char *path, char *out);

/** Link started node @p node to the hub @p p names and wait for its answer: GOBLIN_OK
 *  once the hub took the key (the link then lives until goblin_node_stop, redialing a
 *  lost control connection), GOBLIN_EAUTH (the key is unknown, wrong or revoked),
 *  GOBLIN_EBUSY (the hub is full), GOBLIN_ETIMEDOUT, GOBLIN_EAUTH/GOBLIN_ECONNREFUSED
 *  from the TLS pin, GOBLIN_EINVAL, GOBLIN_ESTATE (not started, or linked already). The
 *  detail goes to the node's log. */
GOBLIN_API goblin_err goblin_node_hub_connect(goblin_node *node, const goblin_node_hub_params *p);

typedef struct goblin_node_hub_stats {
    bool connected;           /* the control connection is up and the key accepted */
    int64_t lab;              /* the lab (the key's account) the hub knows this node as */
    uint32_t weight;          /* its lab_weight on the hub */
    int64_t data_connections; /* data connections dialed (one per worker lent) */
    int64_t workers_lent;     /* data connections attached now */
    int64_t refused;          /* refusals from the hub */
    int64_t work_reports;     /* WORK messages sent: what a lent worker did */
    int64_t work_reports_lost; /* ... that could not be sent (the link was down or full) */
    int64_t owners_named;     /* lent identities the hub named a volunteer owner of */
    int64_t introductions;    /* INTRODUCEs received: tickets for workers dialing this node */
    int64_t workers_direct;   /* introduced workers connected now */
    int64_t tickets_refused;  /* HELLOs with a ticket of another identity (their PROOF) */
    int64_t lefts;            /* LEFTs sent: introduced workers gone, tickets expired */
} goblin_node_hub_stats;

/** The hub link's counters; GOBLIN_ESTATE if the node has none. */
GOBLIN_API goblin_err goblin_node_hub_stats_get(goblin_node *node, goblin_node_hub_stats *out);

GOBLIN_END_DECLS

#endif
