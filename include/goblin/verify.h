/* goblin/verify.h - checking results the caller did not compute itself.
 *
 * A node receives results from workers it does not trust. These calls decide,
 * from data alone (no graphs, no network), whether a result is acceptable:
 *
 *  - goblin_verify_matmul: Freivalds' check of a claimed matmul tile C = A.B
 *    (or a split-K partial tile) with secret random vectors, O(mk + kn + mn)
 *    instead of O(mkn); goblin_freivalds_panels: the same check of all the tiles
 *    of a job, reading A and B once for the whole job;
 *  - goblin_verify_compare: two results of the same task (replicas, or a replica
 *    and a recomputation) under the op's numeric contract;
 *  - goblin_verify_spot: sampled elements of a result against recomputed
 *    reference values (goblin_verify_sample_indices draws the sample).
 *
 * Each returns a goblin_verdict: ACCEPT (consistent with an honest computation),
 * REJECT (wrong beyond the rigorous error bound) or ESCALATE (inconclusive: ask
 * another replica or recompute). The tolerances are derived from the ops' error
 * bounds, never guessed; docs/verification.md gives the formulas.
 *
 * Arguments the caller vouches for (A and B of a Freivalds check, the op, the
 * reference values) are validated and a bad one is an error code. The result
 * being judged is hostile: a wrong dtype, shape or value is a verdict, never an
 * error.
 *
 * Thread safety: every call is reentrant; nothing is shared between calls, except
 * that one goblin_freivalds_panels object must not be used by two threads at once. */
#ifndef GOBLIN_VERIFY_H
#define GOBLIN_VERIFY_H

#include "api.h"
#include "dtype.h"
#include "error.h"
#include "ops.h"
#include "tensor.h"

GOBLIN_BEGIN_DECLS

/** How a job's results are checked: one policy enum for every kind of job.
 *  goblin_node_params.verify (matmul jobs) takes FREIVALDS (its default),
 *  RECOMPUTE or UNSAFE_NONE; goblin_graph_job_params.verify and
 *  goblin_trainer_params.verify take CHECKED (their default), REPLICATE, SPOT,
 *  RECOMPUTE or UNSAFE_NONE. A policy that does not apply to the job is GOBLIN_EINVAL.
 *  There is no "off" except the named unsafe mode. Values are on the client wire:
 *  explicit and append-only. */
typedef enum goblin_verify {
    GOBLIN_VERIFY_FREIVALDS = 0,   /* matmul: every tile by Freivalds' check, fresh secret vectors */
    GOBLIN_VERIFY_RECOMPUTE = 1,   /* every task recomputed on the node and compared (slow; tests) */
    GOBLIN_VERIFY_UNSAFE_NONE = 2, /* no check at all: benchmarks only */
    GOBLIN_VERIFY_SPOT = 3,        /* graph jobs: the node recomputes a few secret rows */
    GOBLIN_VERIFY_REPLICATE = 4,   /* graph jobs: adaptive replication on another worker */
    /* graph jobs and training: checked execution. The worker returns the values of the
     * task's products (f32/f64 matmuls) with its outputs; the node checks each product
     * by Freivalds' algorithm, evaluates every other node itself from the task's inputs
     * and the products, and compares its outputs with the worker's under the ops'
     * contracts. Every task verified, no replica trusted (docs/verification.md, "Checked
     * execution"). Where the graph has no product, or the rest of its work is more than a
     * quarter of a task's (estimated), the job is replicated instead (REPLICATE). */
    GOBLIN_VERIFY_CHECKED = 5,
    GOBLIN_VERIFY_COUNT
} goblin_verify;

/** "freivalds", "recompute", "unsafe-none", "spot", "replicate"; NULL if out of range. */
GOBLIN_API const char *goblin_verify_name(goblin_verify v);
/** The policy named @p name (as goblin_verify_name gives it) into *out; GOBLIN_EINVAL. */
GOBLIN_API goblin_err goblin_verify_from_name(const char *name, goblin_verify *out);

/* Values are explicit and append-only: they may be logged and sent in reports. */
typedef enum goblin_verdict_kind {
    GOBLIN_VERDICT_ACCEPT = 0,   /* consistent with an honest computation */
    GOBLIN_VERDICT_ESCALATE = 1, /* inconclusive: another replica or a recomputation decides */
    GOBLIN_VERDICT_REJECT = 2,   /* the result (or, for a pair, one of the two) is wrong */
    GOBLIN_VERDICT_COUNT
} goblin_verdict_kind;

/* Why the verdict is what it is (the most serious finding wins). */
typedef enum goblin_verify_reason {
    GOBLIN_VERIFY_OK = 0,            /* every check within the accept level */
    GOBLIN_VERIFY_BIT_EQUAL = 1,     /* compare: the two results are identical bit for bit */
    GOBLIN_VERIFY_BETWEEN = 2,       /* a discrepancy above the accept level but not provably wrong */
    GOBLIN_VERIFY_EXCEEDS_BOUND = 3, /* a discrepancy above the rigorous error bound */
    GOBLIN_VERIFY_NONFINITE = 4,     /* NaN/inf where an honest result has none (or a NaN/inf mismatch) */
    GOBLIN_VERIFY_SHAPE = 5,         /* the result has the wrong rank or shape */
    GOBLIN_VERIFY_DTYPE = 6,         /* the result has the wrong dtype */
    GOBLIN_VERIFY_UNCHECKABLE = 7,   /* part of the result cannot be checked algebraically
                                        (NaN/inf in the inputs, magnitudes near overflow) */
    GOBLIN_VERIFY_REASON_COUNT
} goblin_verify_reason;

/** What a check found. Counts are over "checks": (row, vector) pairs for Freivalds,
 *  elements for compare and spot. */
typedef struct goblin_verdict {
    goblin_verdict_kind kind;
    goblin_verify_reason reason;
    int64_t checked;           /* checks performed */
    int64_t above_tight;       /* checks above the accept level (includes above_bound) */
    int64_t above_bound;       /* checks above the rigorous bound */
    int64_t nonfinite;         /* NaN/inf that an honest result cannot have (or mismatches) */
    int64_t unchecked;         /* elements that could not be checked */
    int64_t worst_index;       /* row (Freivalds) or flat element index of the worst check; -1 if none */
    double worst_ratio;        /* max discrepancy / rigorous bound (> 1 means REJECT); 0 if none */
    double worst_tight_ratio;  /* max discrepancy / accept level (> 1 means not ACCEPT); 0 if none */
} goblin_verdict;

/** "accept", "escalate", "reject"; "invalid" if out of range. */
GOBLIN_API const char *goblin_verdict_name(goblin_verdict_kind kind);
/** "ok", "bit_equal", "between", "exceeds_bound", "nonfinite", "shape", "dtype",
 *  "uncheckable"; "invalid" if out of range. */
GOBLIN_API const char *goblin_verify_reason_name(goblin_verify_reason reason);

/* ---- Freivalds' check of a matmul tile ------------------------------------ */

#define GOBLIN_FREIVALDS_MAX_VECTORS 16

typedef struct goblin_freivalds_params {
    /** Secret seed of the random vectors: a worker that knows the vectors can forge a
     *  result that passes. Draw it from a source no worker can predict or influence,
     *  after the inputs are fixed, and never reveal it. goblin_verify_matmul draws the
     *  vectors per call; goblin_freivalds_panels draws them once per object (a job's
     *  tiles share them; docs/verification.md, "Vectors shared by a job's tiles"). */
    uint64_t seed;
    /** Independent random vectors, 1..GOBLIN_FREIVALDS_MAX_VECTORS (default 4). Each
     *  misses a wrong row with probability <= 2 * accept_level / max |error in the row|
     *  and never misses a single wrong element above the level (docs/verification.md). */
    int32_t vectors;
    /** Accept level in standard deviations of the rounding-error model (default 6). */
    double tight_sigmas;
    /** Hoeffding factor lambda of the probabilistic form of the rigorous bound: an
     *  honest row exceeds it with probability <= 2 exp(-lambda^2 / 2) over the secret
     *  vector (default 10: 4e-22). 0 uses only the deterministic bound. */
    double bound_sigmas;
    /** Split-K: C claims A[:, k0 : k0 + kn] . B[k0 : k0 + kn, :]. Defaults k0 = 0,
     *  kn = -1 (to the end of K). */
    int64_t k0, kn;
    /** 1 (default) or 2: a panels object's pass over a long B and its passes over a
     *  long row range of A and of C run in two halves on two threads (the same bits and
     *  verdicts as one thread). */
    int32_t threads;
} goblin_freivalds_params;

/** Fill @p p with the defaults above (seed 0: set your own). NULL is a no-op. */
GOBLIN_API void goblin_freivalds_params_default(goblin_freivalds_params *p);

/** Check that @p c holds A[:, K-range] . B[K-range, :] as computed honestly in the
 *  dtype of A and B (f32 or f64, any strides; the check itself runs in f64).
 *  @p a [m, K], @p b [K, n]: borrowed, trusted (bad ones are errors). @p c: borrowed,
 *  judged (a wrong dtype or shape is a REJECT verdict). @p p: NULL for defaults (then
 *  the seed is 0: only for tests). @p out: the verdict.
 *  Returns GOBLIN_EINVAL (NULL pointer, bad params, K-range outside K), GOBLIN_ESHAPE
 *  (a, b not matrices or inner dims differ), GOBLIN_EDTYPE (a, b not both f32 or both
 *  f64), GOBLIN_ENOMEM (scratch of O(vectors * (m + n + K)) doubles). */
GOBLIN_API goblin_err goblin_verify_matmul(const goblin_tensor *a, const goblin_tensor *b,
                                           const goblin_tensor *c,
                                           const goblin_freivalds_params *p,
                                           goblin_verdict *out);

/* ---- Freivalds' check of a whole job's tiles --------------------------------- *
 *
 * A job C = A.B cut into row panels x column panels checked tile by tile with
 * goblin_verify_matmul reads each row panel of A once per column panel and each
 * column panel of B once per row panel. A panels object draws the secret vectors
 * once for all of C's columns and keeps what depends only on A and B: one pass over
 * B (at creation) and one pass over each row range of A (at its first check) serve
 * every tile, so a tile's check reads only its C. The judgement of a tile (levels,
 * bounds, NaN/inf rules, verdict fields) is exactly goblin_verify_matmul's; with one
 * column panel and one row range it is goblin_verify_matmul (which is built on it).
 *
 * Not thread-safe: one thread at a time per object (objects are independent). */

typedef struct goblin_freivalds_panels goblin_freivalds_panels;

/** Prepare the check of the tiles of C = A[:, K-range] . B[K-range, :] cut at the
 *  column bounds @p col_bounds (@p n_col_panels + 1 of them: 0 = col_bounds[0] <
 *  col_bounds[1] < ... < col_bounds[n_col_panels] = N). @p a [M, K], @p b [K, N]: f32
 *  or f64, any strides, borrowed and trusted: they must outlive the object and not
 *  change. @p col_bounds is copied. @p p: as for goblin_verify_matmul (NULL: defaults,
 *  seed 0, only for tests; k0/kn select the K-range of every tile). Vector v, column
 *  j is Philox draw v * N + j of goblin_verify_matmul's stream under p->seed. One pass
 *  over B (columns with NaN/inf are masked as goblin_verify_matmul does); memory
 *  O(vectors * (K * n_col_panels + N)) doubles. *out is NULL on error.
 *  Returns GOBLIN_EINVAL (NULL pointer, bad params or bounds, K-range outside K),
 *  GOBLIN_ESHAPE, GOBLIN_EDTYPE (as goblin_verify_matmul), GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_freivalds_panels_new(const goblin_tensor *a, const goblin_tensor *b,
                                                  int32_t n_col_panels, const int64_t *col_bounds,
                                                  const goblin_freivalds_params *p,
                                                  goblin_freivalds_panels **out);

/** One pass over A[row0 : row0 + rows, K-range] for every column panel at once; kept
 *  in the object under the key (row0, rows) until released. A range already prepared
 *  returns at once. Ranges may overlap (each is kept separately); use the same
 *  (row0, rows) for prepare, check and release. Returns GOBLIN_EINVAL (NULL, row0 < 0,
 *  rows < 0, row0 + rows > M), GOBLIN_ENOMEM (O(vectors * rows * n_col_panels)). */
GOBLIN_API goblin_err goblin_freivalds_panels_prepare(goblin_freivalds_panels *fp, int64_t row0,
                                                      int64_t rows);

/** Judge the tile @p c claimed as A[row0 : row0 + rows, K-range] . B[K-range, panel
 *  @p col_panel] (borrowed, hostile, any strides): one pass over @p c, then the
 *  per-row judgement of goblin_verify_matmul; verdict.worst_index is a row of @p c.
 *  Prepares the row range first if it is not. A dtype other than A's or a shape other
 *  than [rows, panel width] is a REJECT verdict. Returns GOBLIN_EINVAL (NULL pointer,
 *  range outside M, col_panel outside [0, n_col_panels), NULL data), GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_freivalds_panels_check(goblin_freivalds_panels *fp, int64_t row0,
                                                    int64_t rows, int32_t col_panel,
                                                    const goblin_tensor *c, goblin_verdict *out);

/** Drop the prepared sums of the row range (row0, rows) (a no-op if it is not
 *  prepared); a later check prepares it again. NULL is a no-op. */
GOBLIN_API void goblin_freivalds_panels_release(goblin_freivalds_panels *fp, int64_t row0,
                                                int64_t rows);

/** Free the object (NULL is a no-op). A and B are not touched. */
GOBLIN_API void goblin_freivalds_panels_free(goblin_freivalds_panels *fp);

/* ---- replicas and spot-checks --------------------------------------------- */

/** Compare two results @p a and @p b of op @p op in dtype @p dt (borrowed, any strides)
 *  under the op's numeric contract goblin_op_contract(op, dt, k). @p k is the reduction
 *  length (0 or 1 for elementwise ops). Bit-equal results are accepted at once.
 *  Otherwise element by element: both NaN at the same place agree; a NaN or inf
 *  mismatch, or a difference above twice the contract's bound, is a disagreement.
 *  The bound needs the op's scale (|exact| for elementwise ops, sum |terms| for
 *  reductions): for k <= 1 it is bounded by the values themselves, so a disagreement
 *  is a REJECT (at least one of the two is wrong); for k > 1 the scale is unknown, so
 *  a disagreement is ESCALATE (use goblin_verify_compare_scaled to decide).
 *  A dtype other than @p dt, shapes that differ or a malformed shape are a REJECT.
 *  Returns GOBLIN_EINVAL (NULL pointer or data, @p op not in the catalogue, invalid
 *  dtype). */
GOBLIN_API goblin_err goblin_verify_compare(goblin_op op, goblin_dtype dt, int64_t k,
                                            const goblin_tensor *a, const goblin_tensor *b,
                                            goblin_verdict *out);

/** As goblin_verify_compare, with @p scale (borrowed, trusted, any float dtype, same
 *  shape as the results, or NULL): an upper bound of the op's scale per element (for
 *  a matmul, sum_k |a_ik||b_kj| or a Cauchy-Schwarz bound of it). With a scale every
 *  disagreement is a REJECT. GOBLIN_EINVAL also for a scale of the wrong shape or
 *  with a negative or NaN element. */
GOBLIN_API goblin_err goblin_verify_compare_scaled(goblin_op op, goblin_dtype dt, int64_t k,
                                                   const goblin_tensor *a,
                                                   const goblin_tensor *b,
                                                   const goblin_tensor *scale,
                                                   goblin_verdict *out);

/** Spot-check @p claimed (borrowed, judged) against @p count recomputed reference
 *  values: element indices[i] (flat, row-major over claimed's shape) is compared with
 *  element i of @p ref (rank 1, @p count elements, dtype @p dt; trusted) exactly as
 *  goblin_verify_compare compares two replicas, with @p scale (rank 1, @p count
 *  elements, or NULL) as in goblin_verify_compare_scaled. verdict.worst_index is a
 *  flat index of @p claimed. A claimed dtype other than @p dt is a REJECT.
 *  Returns GOBLIN_EINVAL (NULL pointers, count < 0, ref/scale of the wrong length or
 *  dtype, bad op), GOBLIN_EINDEX (an index outside claimed). */
GOBLIN_API goblin_err goblin_verify_spot(goblin_op op, goblin_dtype dt, int64_t k,
                                         const goblin_tensor *claimed, const int64_t *indices,
                                         int64_t count, const goblin_tensor *ref,
                                         const goblin_tensor *scale, goblin_verdict *out);

/** Draw @p count distinct indices in [0, numel) from @p seed into @p out (caller's
 *  array of @p count). Element i is a keyed pseudo-random permutation of [0, numel)
 *  applied to i (a Feistel network on Philox, cycle-walked), so the sample is uniform
 *  without replacement, costs O(count) time and no memory, and any machine gets the
 *  same sample from the same seed. GOBLIN_EINVAL if out is NULL (count > 0),
 *  numel < 0, count < 0, count > numel or numel > 2^62. */
GOBLIN_API goblin_err goblin_verify_sample_indices(uint64_t seed, int64_t numel, int64_t count,
                                                   int64_t *out);

GOBLIN_END_DECLS

#endif
