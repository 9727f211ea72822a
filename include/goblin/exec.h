/* goblin/exec.h - evaluating a graph on a backend.
 *
 * Backends: the plain C reference backend (always built; the oracle), the CPU
 * backend built on BLIS (threaded, vectorized), and CUDA (when compiled and a
 * device is present). An op a backend lacks runs on the reference backend for
 * that node; goblin_exec_stats() counts such fallbacks. */
#ifndef GOBLIN_EXEC_H
#define GOBLIN_EXEC_H

#include "api.h"
#include "error.h"
#include "graph.h"
#include "tensor.h"

GOBLIN_BEGIN_DECLS

typedef enum goblin_backend_kind {
    GOBLIN_BACKEND_REF = 0,
    GOBLIN_BACKEND_BLIS = 1,
    GOBLIN_BACKEND_CUDA = 2,
    GOBLIN_BACKEND_COUNT
} goblin_backend_kind;

/** "ref", "blis", "cuda"; NULL if out of range. */
GOBLIN_API const char *goblin_backend_name(goblin_backend_kind kind);
/** GOBLIN_OK if @p kind can run here; GOBLIN_ENOTSUP if not compiled in;
 *  GOBLIN_ENODEV if compiled but no usable device/driver. */
GOBLIN_API goblin_err goblin_backend_available(goblin_backend_kind kind);
/** Total and free bytes of the memory @p kind computes in (CUDA: device 0's, from
 *  cudaMemGetInfo), e.g. to size a job to a GPU. GOBLIN_ENOTSUP if the backend is not
 *  compiled in or cannot tell (the CPU backends); GOBLIN_ENODEV if compiled but there
 *  is no device; GOBLIN_EDEVICE if the device's query fails; GOBLIN_EINVAL for a NULL
 *  pointer or a kind out of range. On failure both are set to 0 (when not NULL). */
GOBLIN_API goblin_err goblin_backend_memory(goblin_backend_kind kind, uint64_t *total_bytes,
                                            uint64_t *free_bytes);

typedef struct goblin_exec_params {
    goblin_backend_kind backend; /* default GOBLIN_BACKEND_BLIS when built, else REF */
    int32_t threads;             /* worker threads for CPU kernels; 0 = all cores */
    int32_t device;              /* GPU index for CUDA */
    /* NULL, or the same graph at another batch size (goblin_graph_rebatch of one graph:
     * the same nodes and ops, other shapes; borrowed like the graph): kernels choose
     * their algorithm as they would for that graph's shapes (e.g. BLIS's small-matrix
     * path, whose sums run in another order), so each row of a row-by-row graph comes
     * out exactly as in that graph. The node's spot-checks use it. */
    const goblin_graph *shapes_like;
    /* Values given for nodes instead of computed (checked execution, docs/verification.md:
     * the node evaluates a task's cheap nodes with the products a worker claimed). Node
     * given_ids[i] of the graph takes given[i] as its value: contiguous, the node's dtype
     * and shape; the nodes it alone needs are still computed. @p given_ids and @p given
     * (n_given of each, distinct ids, no INPUT or CONSTANT) are borrowed, with their data,
     * until the executor is freed. NULL / 0: every node computed. */
    const int32_t *given_ids;
    const goblin_tensor *given;
    int32_t n_given;
} goblin_exec_params;

GOBLIN_API void goblin_exec_params_default(goblin_exec_params *p);

typedef struct goblin_exec goblin_exec;

/** Prepare to evaluate @p g (borrowed: it must outlive the executor and not change).
 *  @p p may be NULL for defaults. GOBLIN_ENOTSUP / GOBLIN_ENODEV if the backend
 *  cannot run here. */
GOBLIN_API goblin_err goblin_exec_new(goblin_exec **out, const goblin_graph *g,
                                      const goblin_exec_params *p);
GOBLIN_API void goblin_exec_free(goblin_exec *ex);

/** Evaluate. @p inputs: one descriptor per graph input, in order, matching its dtype
 *  and shape (any strides; read, never written, zero-copy where the op allows).
 *  @p outputs: one per graph output. If outputs[i].data is NULL the library allocates
 *  a contiguous buffer and fills the descriptor (release with goblin_buffer_free);
 *  otherwise it must match dtype and shape and is written in place (any strides).
 *  Not thread-safe on the same executor. */
GOBLIN_API goblin_err goblin_exec_run(goblin_exec *ex, const goblin_tensor *inputs,
                                      int32_t n_inputs, goblin_tensor *outputs,
                                      int32_t n_outputs);

/** Detail message of the last failure on @p ex ("" if none). */
GOBLIN_API const char *goblin_exec_error(const goblin_exec *ex);

typedef struct goblin_exec_stats {
    int64_t nodes_run;        /* nodes computed, all runs together */
    int64_t nodes_fallback;   /* of which on the reference backend because the chosen one lacks the op */
} goblin_exec_stats;

GOBLIN_API void goblin_exec_stats_get(const goblin_exec *ex, goblin_exec_stats *out);

/** One-shot: new + run + free. */
GOBLIN_API goblin_err goblin_graph_eval(const goblin_graph *g, const goblin_exec_params *p,
                                        const goblin_tensor *inputs, int32_t n_inputs,
                                        goblin_tensor *outputs, int32_t n_outputs);

GOBLIN_END_DECLS

#endif
