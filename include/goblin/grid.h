/* goblin/grid.h - the embedded grid: a node on a unique inproc:// URL and n worker
 * threads in this process, with the very same planner, scheduler and verification
 * as a real grid (only the transport differs). */
#ifndef GOBLIN_GRID_H
#define GOBLIN_GRID_H

#include "api.h"
#include "error.h"
#include "node.h"
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

/** Start a node and @p n_workers (1..256) worker threads. @p p NULL for defaults
 *  (workers get 1 thread each). *out set on success. */
GOBLIN_API goblin_err goblin_grid_local(int32_t n_workers, const goblin_grid_params *p,
                                        goblin_grid **out);
/** The grid's node, for submitting jobs (owned by the grid). */
GOBLIN_API goblin_node *goblin_grid_node(goblin_grid *grid);
/** Worker @p i (owned by the grid), or NULL. */
GOBLIN_API goblin_worker *goblin_grid_worker(goblin_grid *grid, int32_t i);
/** The node's inproc URL (owned by the grid). */
GOBLIN_API const char *goblin_grid_url(const goblin_grid *grid);
/** Stop the workers and the node and free everything. NULL is a no-op. */
GOBLIN_API void goblin_grid_free(goblin_grid *grid);

GOBLIN_END_DECLS

#endif
