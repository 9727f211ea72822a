/* libgoblin/node/plan.h - partitioning a matmul C = A.B into tasks.
 *
 * A plan cuts C [m, n] into a grid of 2-D tiles and, when K is long, cuts K into
 * slices (split-K): task (tile, slice) computes the partial product
 *     C[row0 : row0 + rows, col0 : col0 + cols] (+)= A[rows, k0 : k0 + kn] . B[k0 : k0 + kn, cols]
 * and the partial products of one tile over all slices sum to that tile of C.
 * Tile sizes come from the worker's memory budget (its A panel, B panel and C tile
 * must fit, with headroom) and from the compute/transfer balance: a task moves
 * rows*kn + kn*cols + rows*cols elements for 2*rows*cols*kn flops, so bigger and
 * squarer tasks do more work per byte (docs/verification.md has the derivation).
 *
 * A plan is a few numbers: tiles are computed from their index, so a 100000 x
 * 100000 x 100000 product plans in microseconds without allocating anything of its
 * size. Tiles of one grid dimension differ in size by at most one.
 *
 * Thread safety: a plan is immutable once built; read it from any thread. */
#ifndef GOBLIN__NODE_PLAN_H
#define GOBLIN__NODE_PLAN_H

#include "goblin/api.h"
#include "goblin/dtype.h"
#include "goblin/error.h"
#include "goblin/node.h" /* goblin_job_plan */

/** One task of a matmul plan (all counts in elements, all >= 1). */
typedef struct goblin__matmul_tile {
    int64_t row0, rows; /* rows of A and C */
    int64_t col0, cols; /* columns of B and C */
    int64_t k0, kn;     /* the K-slice: columns of A, rows of B */
} goblin__matmul_tile;

typedef struct goblin__plan_params {
    int64_t m, k, n;        /* C [m, n] = A [m, k] . B [k, n]; each 1 .. GOBLIN_PLAN_MAX_DIM */
    goblin_dtype dtype;     /* element type of A, B and C (default f32) */
    uint64_t memory_bytes;  /* a worker's memory budget for one task (default 1 GiB) */
    double headroom;        /* fraction of memory_bytes left unused, in [0, 1) (default 0.25) */
    int64_t min_tiles;      /* cut finer (rows/columns first) until there are at least this
                               many tasks, where the shape allows (default 1) */
} goblin__plan_params;

#define GOBLIN_PLAN_MAX_DIM ((int64_t)1 << 40)

/** Fill @p p with the defaults above (m = k = n = 0: set them). NULL is a no-op. */
void goblin__plan_params_default(goblin__plan_params *p);

typedef struct goblin__plan goblin__plan;

/** Plan the product described by @p p (copied). On success *out is a new plan
 *  (release with goblin__plan_free); on failure *out is untouched and @p err_msg (if
 *  not NULL, @p err_cap bytes) says why. Errors: GOBLIN_EINVAL (NULL, a dim < 1 or
 *  above GOBLIN_PLAN_MAX_DIM, headroom outside [0, 1), min_tiles < 1), GOBLIN_EDTYPE
 *  (invalid dtype), GOBLIN_ERANGE (the budget cannot hold even a 1 x 1 x 1 task),
 *  GOBLIN_ELIMIT (more than 2^62 tasks), GOBLIN_ENOMEM. */
goblin_err goblin__plan_matmul(goblin__plan **out, const goblin__plan_params *p,
                                         char *err_msg, size_t err_cap);

/** NULL is a no-op. */
void goblin__plan_free(goblin__plan *plan);

/** Number of tasks (tiles x K-slices); 0 if @p plan is NULL. */
int64_t goblin__plan_tile_count(const goblin__plan *plan);

/** Task @p i (0 <= i < count) into @p out. Order: C tiles row-major over the grid,
 *  the K-slices of one tile consecutive (slice q of tile t is task t * k_slices + q).
 *  GOBLIN_EINVAL (NULL), GOBLIN_EINDEX (i out of range). */
goblin_err goblin__plan_tile(const goblin__plan *plan, int64_t i,
                                       goblin__matmul_tile *out);

/** Fill @p out for @p plan. GOBLIN_EINVAL if either is NULL. */
goblin_err goblin__plan_get_info(const goblin__plan *plan, goblin_job_plan *out);

/** Bytes a task needs: (rows * kn + kn * cols + rows * cols) * size of @p dt.
 *  GOBLIN_EINVAL (NULL, negative extents, invalid dtype), GOBLIN_ELIMIT (overflow). */
goblin_err goblin__matmul_tile_bytes(const goblin__matmul_tile *t, goblin_dtype dt,
                                               uint64_t *out);

#endif
