/* goblin/client.h - talking to a running node from another process.
 *
 * A client (goblin_client_*) connects to the URL of a node's gateway (gateway.h),
 * submits matmul and graph jobs (tensors it sends, or .npy files that already lie on
 * the node's disk and are memory-mapped there), follows their progress, cancels them,
 * fetches results and reads the node's verification counters. It uses node.h for the
 * job and counter types it reports (goblin_job_status, goblin_graph_job_params,
 * goblin_node_stats), not for a node of its own.
 *
 * The client protocol is request/reply (nng req0/rep0) with its own versioned framing
 * (magic "GBLC"); its byte layout is at the top of libgoblin/proto/client_wire.h.
 * File paths name the lab's own files on the node; they never go to workers.
 *
 * Thread safety: one client object serves one thread at a time (its calls are
 * serialized internally, so sharing it is safe but not concurrent). */
#ifndef GOBLIN_CLIENT_H
#define GOBLIN_CLIENT_H

#include "api.h"
#include "error.h"
#include "node.h"
#include "graph.h"
#include "tensor.h"

GOBLIN_BEGIN_DECLS

/* ---- job ids ---------------------------------------------------------------- */

/** A job's name on a node: 128 random bits the node's gateway chose (never reused, not
 *  guessable, and meaningful only to the principal that submitted the job). */
typedef struct goblin_job_id {
    uint8_t bytes[16];
} goblin_job_id;

/** Bytes for a job id as text: 32 lowercase hex digits and the NUL. */
#define GOBLIN_JOB_ID_TEXT_SIZE 33

/** @p id as 32 lowercase hex digits into @p out (GOBLIN_JOB_ID_TEXT_SIZE bytes). */
GOBLIN_API void goblin_job_id_format(const goblin_job_id *id, char *out);
/** Parse 32 hex digits (either case) into *out. GOBLIN_EINVAL for anything else. */
GOBLIN_API goblin_err goblin_job_id_parse(const char *text, goblin_job_id *out);
GOBLIN_API bool goblin_job_id_equal(const goblin_job_id *a, const goblin_job_id *b);

/* ---- client ----------------------------------------------------------------- */

typedef struct goblin_client_params {
    const char *ca_file;      /* tls+tcp://: trust these PEM CA certificates, or */
    const char *fingerprint;  /* tls+tcp://: pin the node's certificate SHA-256 (hex) */
    const char *server_name;  /* CA mode: name to check (NULL: see tls_impl rules) */
    uint32_t timeout_ms;      /* one request/reply (default 120000; uploads can be large).
                                 A connection that closes under a request fails it at once
                                 ("the node at ... closed the connection"), not at this limit */
    uint32_t connect_timeout_ms; /* the first connection and the node's first answer (default
                                    10000): a URL where no gateway answers (nobody listening, a
                                    firewall, the node's worker address) fails within it */
    uint32_t poll_ms;         /* progress polling period of goblin_client_matmul* (default 100) */
    uint32_t heartbeat_ms;    /* while a request waits for its reply, the client asks the node
                                 on a second connection every heartbeat_ms whether it still
                                 answers; no answer within 3 x heartbeat_ms fails the request
                                 (GOBLIN_ETIMEDOUT, "the node at ... is not answering"), long
                                 before timeout_ms. Default 5000; 0: off */
    uint64_t recv_max_bytes;  /* largest reply accepted (default 16 GiB) */
    /* The researcher credential (principal.h: what `goblin-node researcher add` printed;
     * borrowed during connect, copied): sent in an AUTH request right after connecting,
     * and once more when a request is answered GOBLIN_EAUTH (the connection may have been
     * redialed). NULL: none (only a node in open mode, on loopback, takes such clients).
     * At most GOBLIN_TOKEN_MAX_BYTES (tls.h) characters. */
    const char *credential;
} goblin_client_params;

GOBLIN_API void goblin_client_params_default(goblin_client_params *p);

typedef struct goblin_client goblin_client;

/** Connect to the gateway at @p url (borrowed). @p p NULL for defaults (copied).
 *  *out set on success. GOBLIN_EINVAL, GOBLIN_ECONNREFUSED / GOBLIN_ETIMEDOUT (nobody
 *  there, or no connection within connect_timeout_ms on any transport), GOBLIN_EAUTH
 *  (TLS: wrong fingerprint or certificate; or the node refused the client token; a
 *  node that requires a token when none was given answers the first request
 *  GOBLIN_EAUTH instead), GOBLIN_EIO,
 *  GOBLIN_ENOMEM; @p err (may be NULL) says why. */
GOBLIN_API goblin_err goblin_client_connect(goblin_client **out, const char *url,
                                            const goblin_client_params *p, goblin_errbuf *err);

/** Why the client's last call failed (owned by the client; "" after a success). */
GOBLIN_API const char *goblin_client_error(const goblin_client *c);

/** Called between polls with the job's accepted tasks so far; return false to cancel. */
typedef bool (*goblin_client_progress_fn)(void *user, int64_t done, int64_t total);

/** One job's state as the node reports it. */
typedef struct goblin_client_job_info {
    goblin_job_status status;
    goblin_err error;       /* the job's result once it ended (GOBLIN_OK when done) */
    int64_t done, total;    /* tasks accepted / planned */
    char message[513];      /* why it failed or was canceled */
} goblin_client_job_info;

/** Send A [m, k] and B [k, n] (borrowed; contiguous, both f32 or both f64) and submit
 *  C = A . B. *job_id set on success. Errors the node reports (GOBLIN_ESHAPE,
 *  GOBLIN_EDTYPE, GOBLIN_ESTATE, ...) come back as they are. */
GOBLIN_API goblin_err goblin_client_submit_matmul(goblin_client *c, const goblin_tensor *a,
                                                  const goblin_tensor *b, goblin_job_id *job_id);
/** Submit C = A . B over .npy files on the NODE's disk (paths borrowed, as the node
 *  sees them; relative paths are taken from the node's first data directory): A and B
 *  are mapped read-only, @p c_path created new and mapped. Every path must lie under one
 *  of the node's data directories (gateway.h). @p overwrite: C may already exist (it is
 *  then replaced; still only inside the data directories, never through a symbolic
 *  link). GOBLIN_ENOTSUP if the gateway does not allow file jobs; GOBLIN_ENOTFOUND for a
 *  path that is missing, unreadable or outside the data directories (the node does not
 *  say which); GOBLIN_EBUSY if C exists and @p overwrite is false. */
GOBLIN_API goblin_err goblin_client_submit_matmul_files(goblin_client *c, const char *a_path,
                                                        const char *b_path, const char *c_path,
                                                        bool overwrite, goblin_job_id *job_id);
/** goblin_client_submit_matmul and goblin_client_submit_matmul_files with job parameters
 *  @p jp (borrowed during the call; NULL: the gateway's): task_memory_bytes and min_tasks
 *  travel with the request and the node plans the job with them, as
 *  goblin_node_submit_matmul does (progress fields are ignored: poll the job); 0 keeps
 *  the gateway's setting. GOBLIN_EINVAL, with goblin_client_error saying which and why,
 *  for min_tasks outside 0 .. 2^20 or task_memory_bytes outside 0 and 4096 .. 2^48 (the
 *  gateway refuses them too). */
GOBLIN_API goblin_err goblin_client_submit_matmul_params(goblin_client *c, const goblin_tensor *a,
                                                         const goblin_tensor *b,
                                                         const goblin_job_params *jp,
                                                         goblin_job_id *job_id);
GOBLIN_API goblin_err goblin_client_submit_matmul_files_params(goblin_client *c, const char *a_path,
                                                               const char *b_path, const char *c_path,
                                                               bool overwrite,
                                                               const goblin_job_params *jp,
                                                               goblin_job_id *job_id);
GOBLIN_API goblin_err goblin_client_job_status(goblin_client *c, const goblin_job_id *job_id,
                                               goblin_client_job_info *out);
GOBLIN_API goblin_err goblin_client_cancel(goblin_client *c, const goblin_job_id *job_id);
/** Fetch a finished job's result and release the job on the node. For a tensor job,
 *  @p out (if not NULL) receives C in a new buffer (goblin_buffer_free its data); a
 *  file job has no tensor to fetch (@p out untouched): the product is in its file.
 *  Returns the job's own result (GOBLIN_OK, its failure, GOBLIN_ECANCELED), or
 *  GOBLIN_EBUSY if it is still running, GOBLIN_ENOTFOUND for an unknown job. */
GOBLIN_API goblin_err goblin_client_fetch_result(goblin_client *c, const goblin_job_id *job_id,
                                                 goblin_tensor *out);

/** Submit, poll with @p progress (may be NULL) every poll_ms, fetch. @p out: as for
 *  goblin_client_fetch_result (its data allocated for you). GOBLIN_ECANCELED if
 *  @p progress returned false (the job is canceled on the node). */
GOBLIN_API goblin_err goblin_client_matmul(goblin_client *c, const goblin_tensor *a,
                                           const goblin_tensor *b, goblin_tensor *out,
                                           goblin_client_progress_fn progress, void *user);
/** The same for a file job (goblin_client_submit_matmul_files). */
GOBLIN_API goblin_err goblin_client_matmul_files(goblin_client *c, const char *a_path,
                                                 const char *b_path, const char *c_path,
                                                 bool overwrite,
                                                 goblin_client_progress_fn progress, void *user);

/** Submit a graph job (goblin_node_submit_graph) to the node: @p g is serialized, the
 *  @p inputs (borrowed, any strides: packed while sending) travel with it, and the node
 *  allocates the outputs. @p jp: split/combine/cache_ids/verify/min_replication/
 *  trust_halflife/chunk_rows/spot_rows/job.task_memory_bytes/job.min_tasks are sent
 *  (progress fields ignored; the job's bounds as for goblin_client_submit_matmul_params);
 *  NULL for defaults. *job_id set on success. */
GOBLIN_API goblin_err goblin_client_submit_graph(goblin_client *c, const goblin_graph *g,
                                                 const goblin_tensor *inputs, int32_t n_inputs,
                                                 const goblin_graph_job_params *jp,
                                                 goblin_job_id *job_id);
/** Fetch a finished graph job's outputs and release the job on the node: @p outputs
 *  (caller's array of @p n_outputs == the graph's output count) receive new buffers
 *  (goblin_buffer_free each .data). Returns as goblin_client_fetch_result. */
GOBLIN_API goblin_err goblin_client_fetch_outputs(goblin_client *c, const goblin_job_id *job_id,
                                                  goblin_tensor *outputs, int32_t n_outputs);
/** Submit, poll with @p progress, fetch: goblin_client_matmul for graphs. */
GOBLIN_API goblin_err goblin_client_run_graph(goblin_client *c, const goblin_graph *g,
                                              const goblin_tensor *inputs, int32_t n_inputs,
                                              const goblin_graph_job_params *jp,
                                              goblin_tensor *outputs, int32_t n_outputs,
                                              goblin_client_progress_fn progress, void *user);

/** The node's counters, and up to @p cap per-worker records into @p workers (may be NULL
 *  when @p cap is 0); *n_workers (if not NULL) = how many the node has. */
GOBLIN_API goblin_err goblin_client_stats(goblin_client *c, goblin_node_stats *out,
                                          goblin_node_worker_stats *workers, int64_t cap,
                                          int64_t *n_workers);

/** Close the connection and free. NULL is a no-op. */
GOBLIN_API void goblin_client_free(goblin_client *c);

GOBLIN_END_DECLS

#endif
