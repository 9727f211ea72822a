/* goblin/train.h - training on the grid: rounds, micro-batches, pipeline stages and
 * tiles, every task verified.
 *
 * A trainer holds a model's parameters and optimizer state (in the lab's process: the
 * embedded grid's, or a client's talking to a goblin-node: grid.h) and runs rounds. One round:
 *
 *   1. the batch is cut into micro-batches (data-parallel tasks);
 *   2. when the forward + backward of one micro-batch does not fit a worker's memory
 *      budget, the model is cut into pipeline STAGES (contiguous groups of graph nodes,
 *      balanced min-max by compute under the budget); activations and their gradients
 *      pass between stages through the lab's process, where they are verified (every
 *      stage task is a verified graph job); a backward stage task recomputes the
 *      stage's forward from the stage input, so every task is stateless;
 *   3. a layer whose weight alone exceeds the budget (MATMUL by a 2-D parameter, CONV2D
 *      weight) is cut into TILES by output features / channels (Megatron-style), the
 *      partial results combined in the lab's process;
 *   4. gradients are summed over micro-batches in micro-batch order (a fixed order), the
 *      global norm is clipped if asked, the optimizer step (optim.h: PyTorch's formulas)
 *      updates the parameters, and the next round starts with a new parameter version.
 *      Workers receive parameters once per version and keep them in their cache.
 *
 * The model is a forward graph: inputs 0 .. n_params - 1 are the parameters (float),
 * the remaining inputs are the data of one batch, all batched along dim 0 (e.g. images
 * and labels, or tokens and targets; text is tokenized in the lab and travels as
 * integers). Output 0 is the loss: one float element, the MEAN over the batch of the
 * per-example losses (a micro-batch's loss is then its mean, and the round's loss and
 * gradients are the micro-batches' weighted by their share of the batch, as in
 * gradient accumulation). The gradients come from goblin_graph_backward (autodiff.h).
 * Batch-norm in training mode normalizes with each micro-batch's own statistics, as
 * PyTorch does under gradient accumulation; running statistics are not tracked.
 *
 * Thread safety: one trainer serves one thread at a time. */
#ifndef GOBLIN_TRAIN_H
#define GOBLIN_TRAIN_H

#include "api.h"
#include "error.h"
#include "graph.h"
#include "grid.h"
#include "node.h"
#include "optim.h"
#include "tensor.h"

GOBLIN_BEGIN_DECLS

typedef enum goblin_optimizer {
    GOBLIN_OPTIMIZER_SGD = 0,
    GOBLIN_OPTIMIZER_ADAMW = 1,
    GOBLIN_OPTIMIZER_COUNT
} goblin_optimizer;

/** "sgd" or "adamw"; NULL for a value outside the enum. */
GOBLIN_API const char *goblin_optimizer_name(goblin_optimizer o);
/** The optimizer named @p name (as goblin_optimizer_name gives it) into *out; GOBLIN_EINVAL. */
GOBLIN_API goblin_err goblin_optimizer_from_name(const char *name, goblin_optimizer *out);

typedef struct goblin_trainer_params {
    const goblin_graph *model;   /* borrowed during _new (the trainer keeps its own copy) */
    int32_t n_params;            /* >= 1 */
    goblin_optimizer optimizer;  /* default ADAMW */
    goblin_sgd_params sgd;      /* defaults of optim.h */
    goblin_adamw_params adamw;
    goblin_lr_schedule schedule; /* kind CONSTANT (default): the optimizer's lr every round */
    double clip_norm;            /* > 0: clip the gradients' global 2-norm to this; 0: off */
    int64_t micro_batch;         /* rows per task; 0 = the largest that fits the budget */
    uint64_t task_memory_bytes;  /* one task's budget; 0 = the smallest memory the
                                    connected workers advertise (256 MiB if none) */
    int32_t max_stages;          /* upper bound for the partitioner (default 64) */
    goblin_verify verify;  /* default CHECKED (verify.h; REPLICATE where it does not apply) */
    double checked_max_share;    /* CHECKED: as goblin_graph_job_params' (> 0, default 0.25) */
    double min_replication;      /* default 1.0: under REPLICATE every training task is
                                    replicated, so a cheating worker cannot change the
                                    trajectory */
    /* A round that cannot be right is computed again on this machine before its step
     * (docs/training.md): a loss or gradient that is not finite, a loss below zero from a
     * loss the graph proves never negative, or a gradient norm over grad_jump_factor times
     * the largest of the last 8 rounds' (default 100; 0: no jump check). Agreeing
     * replicas cannot hide such a round; the recomputation decides. */
    double grad_jump_factor;
    goblin_log_fn log;
    void *log_user;
    goblin_log_level log_level;  /* default WARN */
    /* Called from the trainer's thread after each verified task of a round. */
    goblin_progress_fn progress;
    void *progress_user;
} goblin_trainer_params;

GOBLIN_API void goblin_trainer_params_default(goblin_trainer_params *p);

typedef struct goblin_trainer goblin_trainer;

/** A trainer submitting its tasks to @p grid (grid.h: an embedded grid, or a running
 *  node through its client gateway; borrowed: must outlive the trainer). @p grid NULL:
 *  the tasks are evaluated in the calling thread with goblin_graph_eval (no grid, no
 *  verification; a reference path). @p init: the n_params initial parameter values
 *  (copied; shapes and dtypes must match the model's parameter inputs). Errors:
 *  GOBLIN_EINVAL (bad params; the message says which), GOBLIN_ESHAPE / GOBLIN_EDTYPE (init
 *  vs the model, a loss that is not one float element), GOBLIN_ENOTSUP (an op without a
 *  backward rule: named), GOBLIN_ENOMEM. @p err (may be NULL) says why. */
GOBLIN_API goblin_err goblin_trainer_new(goblin_trainer **out, goblin_grid *grid,
                                         const goblin_trainer_params *p, const goblin_tensor *init,
                                         goblin_errbuf *err);
GOBLIN_API void goblin_trainer_free(goblin_trainer *t);
/** Why the trainer's last call failed ("" after a success; owned by the trainer). */
GOBLIN_API const char *goblin_trainer_error(const goblin_trainer *t);

#define GOBLIN_TRAIN_MAX_STAGES 64

typedef struct goblin_train_stage_info {
    int32_t first_node, last_node; /* forward graph node ids [first, last] */
    int32_t n_params;              /* parameters this stage uses */
    int32_t tiles;                 /* 1, or how many tiles its tiled layer is cut into */
    uint64_t forward_task_bytes;   /* estimated memory of one forward task */
    uint64_t backward_task_bytes;  /* of one backward task (recompute + gradients) */
    double flops_per_row;          /* forward flops per batch row (estimate) */
} goblin_train_stage_info;

typedef struct goblin_train_plan_info {
    int64_t batch, micro_batch, micro_batches;
    int32_t n_stages; /* 1: the whole forward + backward is one task per micro-batch */
    goblin_train_stage_info stages[GOBLIN_TRAIN_MAX_STAGES];
    uint64_t budget_bytes;   /* the memory budget the plan was made for */
    int64_t tasks_per_round; /* before replication */
} goblin_train_plan_info;

/** The plan for a batch of @p batch rows under the current budget. GOBLIN_ERANGE if even
 *  one row of the smallest stage (or tile) cannot fit (the message gives the numbers). */
GOBLIN_API goblin_err goblin_trainer_plan(goblin_trainer *t, int64_t batch,
                                          goblin_train_plan_info *out);
/** The same plan as text (stages, tiles, micro-batches, memory per task), NUL-terminated
 *  and truncated to @p cap. */
GOBLIN_API goblin_err goblin_trainer_plan_text(goblin_trainer *t, int64_t batch, char *buf,
                                               size_t cap);

typedef struct goblin_train_round_info {
    int64_t round;          /* 0-based index of the round just run */
    double loss;            /* the batch's loss (before the step) */
    double grad_norm;       /* global 2-norm of the gradients (before clipping) */
    double lr;              /* learning rate used */
    int64_t tasks;          /* verified tasks this round (replicas not counted) */
    double seconds;         /* wall time of the round */
    double verify_seconds;  /* time the lab's process spent verifying (replica compare,
                               recomputation) */
    bool rechecked;         /* the round could not be right and was computed again here */
    bool recheck_changed;   /* ... and the recomputation differed: the grid's round was
                               wrong, and was not used */
} goblin_train_round_info;

/** Run one round on a batch: @p data are the model's data inputs in order (n_data ==
 *  the model's input count - n_params; borrowed, any strides), all with the same leading
 *  size. GOBLIN_ESHAPE / GOBLIN_EDTYPE for data that does not match the model (other
 *  batch sizes are fine), GOBLIN_ECANCELED if @p progress's job was canceled, or the
 *  failure of a job. On failure the parameters and optimizer state are unchanged. */
GOBLIN_API goblin_err goblin_trainer_round(goblin_trainer *t, const goblin_tensor *data,
                                           int32_t n_data, goblin_train_round_info *out);

/** Rounds run so far. */
GOBLIN_API int64_t goblin_trainer_rounds(const goblin_trainer *t);
/** Copy parameter @p i into @p out (caller's tensor of its shape and dtype, any
 *  strides). GOBLIN_EINDEX, GOBLIN_ESHAPE, GOBLIN_EDTYPE. */
GOBLIN_API goblin_err goblin_trainer_get_param(goblin_trainer *t, int32_t i, goblin_tensor *out);
/** Replace parameter @p i (copied) and reset nothing else. */
GOBLIN_API goblin_err goblin_trainer_set_param(goblin_trainer *t, int32_t i,
                                               const goblin_tensor *value);

/** Batch-norms in training mode on batch data (BATCH_NORM with training = 1 whose input
 *  has the batch rows leading): every task of their stage also returns the micro-batch's
 *  per-channel mean and biased variance, and the trainer combines them into the whole
 *  batch's (what torch's running statistics use). Their count in the model. */
GOBLIN_API int32_t goblin_trainer_batch_norm_count(const goblin_trainer *t);
/** Batch-norm @p k's statistics in the last round applied: its node id in the model,
 *  channels C, *count = elements per channel (batch rows x spatial size; 0 before the
 *  first round), and into @p mean / @p var (C doubles each, or NULL) the batch's mean and
 *  biased variance per channel. GOBLIN_EINDEX. */
GOBLIN_API goblin_err goblin_trainer_batch_norm_stats(const goblin_trainer *t, int32_t k, int32_t *node,
                                                      int64_t *channels, int64_t *count, double *mean,
                                                      double *var);

/** Checkpoint (opt-in): parameters, optimizer state, round counter and a hash of the
 *  model to @p path (written to a temporary file, synced, then renamed; CRC-sealed).
 *  GOBLIN_EIO. */
GOBLIN_API goblin_err goblin_trainer_save(goblin_trainer *t, const char *path);
/** Resume from a checkpoint of the same model and optimizer: the next round continues
 *  the same trajectory. GOBLIN_EIO, GOBLIN_EFORMAT (corrupt), GOBLIN_EINVAL (another
 *  model or optimizer: the message says which). Nothing changes on failure. */
GOBLIN_API goblin_err goblin_trainer_load(goblin_trainer *t, const char *path);

GOBLIN_END_DECLS

#endif
