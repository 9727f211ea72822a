/* goblin/grid.h - where jobs go: one handle over either kind of grid.
 *
 *   goblin_grid_local    an embedded grid: a node on a unique inproc:// URL and n worker
 *                        threads in this process, with the very same planner, scheduler
 *                        and verification as a real grid (only the transport differs);
 *   goblin_grid_connect  a running node, through its client gateway (goblin_client over
 *                        tcp://, ipc:// or tls+tcp://).
 *
 * Jobs go to either through the same calls and come back as one handle type
 * (goblin_grid_job). The embedded grid reads the caller's inputs and writes the caller's
 * outputs in place (borrowed tensors, any strides, memory-mapped files included: no copy);
 * a remote grid sends the inputs at submit (packing strided ones while sending) and copies
 * the fetched outputs into the caller's tensors when the job's end is waited for.
 *
 * The low-level handles stay available: goblin_grid_node / goblin_grid_worker give an
 * embedded grid's node and workers (node.h, worker.h); client.h is the remote protocol.
 *
 * Thread safety: grid calls are thread-safe except _free (a remote grid's requests are
 * serialized on its one connection); one job handle serves one thread at a time. */
#ifndef GOBLIN_GRID_H
#define GOBLIN_GRID_H

#include "api.h"
#include "client.h"
#include "error.h"
#include "graph.h"
#include "node.h"
#include "tensor.h"
#include "worker.h"

GOBLIN_BEGIN_DECLS

typedef struct goblin_grid_params {
    goblin_node_params node;     /* listen URLs are ignored: the grid picks an inproc:// one;
                                    recompute_threads 0 means 1 here (the workers keep the
                                    cores busy) */
    goblin_worker_params worker; /* for every worker; connect URLs are ignored */
} goblin_grid_params;

GOBLIN_API void goblin_grid_params_default(goblin_grid_params *p);

typedef struct goblin_grid goblin_grid;

/** Start an embedded grid: a node and @p n_workers (1..256) worker threads. @p p NULL for
 *  defaults (workers get 1 thread each); copied. The node's and workers' warning and error
 *  lines are kept for goblin_grid_error (and still reach p->node.log / p->worker.log when
 *  set). *out set on success. GOBLIN_EINVAL, GOBLIN_ENOMEM, GOBLIN_EIO. */
GOBLIN_API goblin_err goblin_grid_local(int32_t n_workers, const goblin_grid_params *p,
                                        goblin_grid **out);
/** Connect to the client gateway of a running node at @p url (borrowed; copied). @p p NULL
 *  for defaults (copied). Errors as goblin_client_connect; @p err (may be NULL) says
 *  why. *out set on success. */
GOBLIN_API goblin_err goblin_grid_connect(const char *url, const goblin_client_params *p,
                                          goblin_grid **out, goblin_errbuf *err);
/** Stop an embedded grid's workers and node, or close the connection, and free. Jobs must
 *  be freed before. NULL is a no-op. */
GOBLIN_API void goblin_grid_free(goblin_grid *grid);

/** true for a grid made by goblin_grid_connect. */
GOBLIN_API bool goblin_grid_is_remote(const goblin_grid *grid);
/** An embedded grid's node, for node.h calls (owned by the grid); NULL for a remote grid. */
GOBLIN_API goblin_node *goblin_grid_node(goblin_grid *grid);
/** Worker @p i of an embedded grid (owned by the grid), or NULL. */
GOBLIN_API goblin_worker *goblin_grid_worker(goblin_grid *grid, int32_t i);
/** The workers an embedded grid started (0 for a remote grid). */
GOBLIN_API int32_t goblin_grid_worker_count(const goblin_grid *grid);
/** The node's URL: an embedded grid's inproc:// one, or the URL connected to (owned by
 *  the grid). */
GOBLIN_API const char *goblin_grid_url(const goblin_grid *grid);
/** Wait until at least @p n workers are connected to the node, or @p timeout_ms passes.
 *  GOBLIN_OK, GOBLIN_ETIMEDOUT, or the error of asking a remote node. */
GOBLIN_API goblin_err goblin_grid_wait_workers(goblin_grid *grid, int64_t n, uint32_t timeout_ms);
/** Copy why the grid's last failed call failed into @p buf (@p cap bytes, NUL-terminated):
 *  for an embedded grid, the line its node logged about it; for a remote grid, the
 *  client's message. "" after a success. With calls failing in several threads at once,
 *  one of their messages. */
GOBLIN_API void goblin_grid_error(goblin_grid *grid, char *buf, size_t cap);

/** The node's counters, and up to @p cap per-worker records (goblin_node_worker_stats, in
 *  HELLO order) into @p workers (may be NULL when @p cap is 0); *n_workers (if not NULL) =
 *  how many the node has. GOBLIN_EINVAL, or the error of asking a remote node. */
GOBLIN_API goblin_err goblin_grid_stats(goblin_grid *grid, goblin_node_stats *out,
                                        goblin_node_worker_stats *workers, int64_t cap,
                                        int64_t *n_workers);

/* ---- jobs ------------------------------------------------------------------- */

typedef struct goblin_grid_job goblin_grid_job;

/** Submit C = A . B: @p a [m, k], @p b [k, n], @p c [m, n], all f32 or all f64, any strides.
 *  Embedded: as goblin_node_submit_matmul (all three borrowed until the job ends; C is
 *  written in place). Remote: A and B are sent now (borrowed during the call); C (borrowed
 *  until the job is freed) receives the result when goblin_grid_job_wait sees the job end;
 *  @p jp's task_memory_bytes and min_tasks are sent with the job (0: the gateway's; bounds
 *  as for goblin_client_submit_matmul_params), its progress fields are not. @p jp NULL for
 *  defaults.
 *  *out set on success. Errors as goblin_node_submit_matmul / goblin_client_submit_matmul;
 *  goblin_grid_error says why. */
GOBLIN_API goblin_err goblin_grid_submit_matmul(goblin_grid *grid, const goblin_tensor *a,
                                                const goblin_tensor *b, goblin_tensor *c,
                                                const goblin_job_params *jp,
                                                goblin_grid_job **out);
/** Submit C = A . B over .npy files (paths borrowed during the call) on the node's
 *  machine: A and B mapped read-only, @p c_path created (replaced), mapped and written,
 *  synced to disk when the job is done. @p jp as for goblin_grid_submit_matmul. Embedded:
 *  files of this process's machine; remote: files on the NODE's disk, as the node sees
 *  them, each inside one of the node's data directories (GOBLIN_ENOTSUP if the gateway
 *  lists none; GOBLIN_ENOTFOUND for a path missing or outside them: gateway.h).
 *  GOBLIN_EIO / GOBLIN_EFORMAT for files that cannot be opened, ESHAPE / EDTYPE as for
 *  arrays. */
GOBLIN_API goblin_err goblin_grid_submit_matmul_files(goblin_grid *grid, const char *a_path,
                                                      const char *b_path, const char *c_path,
                                                      const goblin_job_params *jp,
                                                      goblin_grid_job **out);
/** Submit a graph job (see goblin_node_submit_graph): @p inputs borrowed (embedded: until the
 *  job ends; remote: during the call, sent packed); @p outputs (n_outputs == the graph's
 *  output count, each of the graph's output dtype and shape, any strides) borrowed until
 *  the job is freed: written in place (embedded) or filled when goblin_grid_job_wait sees
 *  the job end (remote). @p jp NULL for defaults; remote: its progress fields are ignored.
 *  *out set on success. */
GOBLIN_API goblin_err goblin_grid_submit_graph(goblin_grid *grid, const goblin_graph *g,
                                               const goblin_tensor *inputs, int32_t n_inputs,
                                               goblin_tensor *outputs, int32_t n_outputs,
                                               const goblin_graph_job_params *jp,
                                               goblin_grid_job **out);

/** Wait until the job ends or @p timeout_ms passes (< 0: forever; 0: just look). Returns
 *  the job's result: GOBLIN_OK (done: the outputs are in the caller's tensors; a remote job
 *  is then released on the node), its error (goblin_grid_job_error says why), GOBLIN_ECANCELED,
 *  or GOBLIN_ETIMEDOUT while it runs. Once it has returned the end, no worker reads the
 *  job's inputs and nothing writes its outputs any more. A remote grid learns of the end
 *  by asking the node (every 0.5 ms at first, backing off to 20 ms). */
GOBLIN_API goblin_err goblin_grid_job_wait(goblin_grid_job *job, int64_t timeout_ms);
/** Tasks accepted / planned so far (a remote job asks the node, until it has ended). */
GOBLIN_API void goblin_grid_job_progress(goblin_grid_job *job, int64_t *done, int64_t *total);
/** RUNNING until the job's end was seen (by goblin_grid_job_wait, or on a remote job by
 *  asking the node), then DONE, FAILED or CANCELED. */
GOBLIN_API goblin_job_status goblin_grid_job_status(goblin_grid_job *job);
/** Ask the node to cancel the job (its leases are dropped; late results are ignored).
 *  Wait for its end as for any job. */
GOBLIN_API void goblin_grid_job_cancel(goblin_grid_job *job);
/** Why the job failed or was canceled ("" otherwise; owned by the job). */
GOBLIN_API const char *goblin_grid_job_error(goblin_grid_job *job);
/** Cancel the job if it is still running, release it on the node and free. NULL is a
 *  no-op. */
GOBLIN_API void goblin_grid_job_free(goblin_grid_job *job);

GOBLIN_END_DECLS

#endif
