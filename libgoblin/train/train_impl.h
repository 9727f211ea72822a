/* libgoblin/train/train_impl.h - the trainer's internals, shared by trainer.c (parameters,
 * state, plans), round.c (one round: its tasks on the grid, the gradients summed in a fixed
 * order, the optimizer step), checkpoint.c (save and load) and train_plan.c (model
 * analysis, partitioner, stage and tile graphs). docs/training.md describes the design. */
#ifndef GOBLIN__TRAIN_IMPL_H
#define GOBLIN__TRAIN_IMPL_H

#include "base/clock.h"
#include "base/errf.h"
#include <string.h>
#include <time.h>
#include <goblin/goblin.h>
#include "base/alloc.h"
#include "graph/graph_impl.h"

/* What the analysis knows about one node of the model (ids as in the model). */
typedef struct tr_node {
    uint8_t is_param;   /* an input holding a parameter */
    uint8_t is_data;    /* an input holding batch data */
    uint8_t batch_dep;  /* depends on a data input */
    uint8_t row_shaped; /* batch_dep and its leading dim is the batch rows */
    int8_t batch_dim;   /* batch_dep: the one dim that follows the batch rows (0 when
                         * row_shaped; a seq-first value's 1), else -1 */
    uint8_t needs_grad; /* float and depends on a parameter (autodiff reaches it) */
    uint8_t live;       /* an ancestor of the loss (or the loss) */
    int32_t param_index;   /* is_param: which parameter; else -1 */
    int32_t last_use;      /* largest id of a live batch-dependent consumer; -1 if none */
    double flops_row, flops_fixed; /* forward flops: per batch row, and independent of rows */
    double bytes_row, bytes_fixed; /* output bytes: likewise */
} tr_node;

/* Graph IO roles of a task graph's inputs and outputs. */
typedef enum tr_io_kind {
    TR_IO_PARAM = 0, /* input: parameter ref (whole, or the stage's tile of it) */
    TR_IO_NODE = 1,  /* input: model node ref's value for the micro-batch (data or activation) */
    TR_IO_SEED = 2,  /* input: gradient of the loss wrt model node ref (or its tile) */
    TR_IO_LOSS = 3,  /* output: the micro-batch's loss */
    TR_IO_PGRAD = 4, /* output: gradient wrt parameter ref (or its tile) */
    TR_IO_XGRAD = 5, /* output: gradient wrt model node ref (stage input; a partial sum for tiles) */
    TR_IO_ACT = 6,   /* output: model node ref's value (or its tile) */
    TR_IO_STAT = 7   /* output: batch-norm ref / 2's micro-batch mean (ref even) or biased
                        variance (ref odd) per channel */
} tr_io_kind;

typedef struct tr_io {
    tr_io_kind kind;
    int32_t ref;
} tr_io;

typedef enum tr_task_kind {
    TR_TASK_FWD = 0,  /* stage forward: activations out */
    TR_TASK_LAST = 1, /* the last (or only) stage: forward + loss + backward from the loss */
    TR_TASK_BWD = 2   /* stage forward recomputed + backward seeded by later stages */
} tr_task_kind;

/* One task graph: built for an exact row count (backward graphs bake 1/rows into
 * MEAN rules, so a graph is never re-instantiated for another row count). */
typedef struct tr_task_graph {
    goblin_graph *g;
    int32_t n_in, n_out;
    tr_io *in, *out;
    /* its DROPOUT nodes (forward, and the backward's with the same attributes): each task
     * submits a copy with per-round seeds and per-micro-batch offsets (task_graph.c,
     * goblin__train_dropout_graph); per_row 0: the value does not follow the batch */
    int32_t n_drop;
    int32_t *drop_ids;
    int64_t *drop_per_row;
    int8_t *drop_axis; /* the dim of the batch rows in each one's value */
} tr_task_graph;

typedef struct tr_stage {
    int32_t a, b;        /* positions in the sequence of compute nodes [a, b] */
    int32_t first, last; /* model node ids of seq[a], seq[b] */
    int32_t tiles;       /* 1, or the tile count of its one tiled layer */
    int32_t tile_node;   /* the tiled MATMUL / CONV2D node, or -1 */
    int32_t n_params;
    int32_t *params;     /* parameter indices used, ascending */
    int32_t n_in;
    int32_t *in_nodes;   /* data inputs and earlier stages' nodes it consumes, ascending ids */
    int32_t n_out;
    int32_t *out_nodes;  /* its nodes that later stages consume, ascending ids */
    uint64_t fwd_bytes, bwd_bytes;
    double flops_row;
    /* task graphs, built lazily: [rows slot: full micro-batch, remainder][task kind],
     * each an array of `tiles` graphs */
    tr_task_graph **graphs[2][3];
    int64_t graph_rows[2];
} tr_stage;

typedef struct tr_plan {
    bool valid;
    int64_t batch, micro, n_micro;
    int32_t n_stages;
    tr_stage stages[GOBLIN_TRAIN_MAX_STAGES];
    uint64_t budget;
    int64_t tasks_per_round;
} tr_plan;

typedef struct tr_model {
    goblin_graph *g;      /* the trainer's copy (ids of the user's model) */
    int32_t n_params, n_data;
    int64_t batch0;       /* the model's own batch size (leading dim of the data inputs) */
    int32_t loss_id;
    tr_node *nodes;       /* per node id */
    int32_t n_seq;
    int32_t *seq;         /* live batch-dependent non-input nodes, ascending (the compute nodes) */
    uint8_t *cut_ok;      /* cut_ok[k]: a stage may end after seq[k] */
    int32_t n_drops;      /* the model's DROPOUT nodes: their SEED and OFFSET attributes and */
    int64_t (*drops)[2];  /* whether they follow the batch (drop_batched) */
    uint8_t *drop_batched;
    int8_t *drop_axis;    /* ... and along which dim of their value (tr_node.batch_dim) */
    int32_t n_bn;         /* BATCH_NORM nodes in training mode on batch data: ids, channels */
    int32_t *bn_ids;      /* and elements per channel per row (running statistics) */
    int64_t *bn_ch, *bn_per;
} tr_model;

/* ---- train_plan.c ---------------------------------------------------------- */

/* Copy of @p g whose data inputs (index >= n_params) have @p rows rows; a RESHAPE,
 * EXPAND or creation node whose SHAPE attribute leads with @p batch0 gets @p rows.
 * Node ids are preserved. */
goblin_err goblin__train_instance(const goblin_graph *g, int32_t n_params, int64_t batch0,
                                  int64_t rows, goblin_graph **out, char *msg, size_t cap);
/* Analyse @p g (already validated by the trainer). */
goblin_err goblin__train_analyse(tr_model *m, char *msg, size_t cap);
void goblin__train_model_clear(tr_model *m);
/* The plan for @p batch rows under @p budget (micro_batch 0 = largest that fits). */
goblin_err goblin__train_make_plan(const tr_model *m, int64_t batch, int64_t micro_batch,
                                   uint64_t budget, int32_t max_stages, tr_plan *out, char *msg,
                                   size_t cap);
void goblin__train_plan_clear(tr_plan *p);
/* plan_admit.c: the plan whose every task graph, measured by the node's admission rule
 * (goblin__graph_task_bytes), fits @p budget; the graphs are built into the stages. */
goblin_err goblin__train_make_admitted_plan(const tr_model *m, int64_t batch, int64_t micro_batch,
                                            uint64_t budget, int32_t max_stages, tr_plan *out, char *msg,
                                            size_t cap);
/* Stage @p s's task graph of @p kind at @p rows rows, tile @p tile: built once, kept in the plan. */
goblin_err goblin__train_stage_graph(const tr_model *m, tr_plan *p, int32_t s, tr_task_kind kind,
                                     int64_t rows, int32_t tile, tr_task_graph **out, char *msg, size_t cap);
/* Does a later stage consume a node of @p st that needs a gradient (so it has a backward task)? */
bool goblin__train_stage_has_seeds(const tr_model *m, const tr_stage *st);
/* The closure walk of stage [a, b] (train_plan.c), shared with task_graph.c. */
typedef struct tr_measure {
    double pbytes, act_row, act_fixed, flops_row, flops_fixed;
} tr_measure;

typedef struct tr_scratch {
    int32_t *stamp;
    int32_t cur;
    int32_t *stack;
} tr_scratch;

/* Visit the closure of stage [a, b]: parameters, inputs from outside, copied
 * batch-independent nodes. @p fn (if not NULL) gets each visited node and its role. */
typedef void (*tr_visit_fn)(void *user, int32_t id, int role);
enum { ROLE_PARAM = 0, ROLE_INPUT = 1, ROLE_COPY = 2, ROLE_STAGE = 3 };
void goblin__train_closure(const tr_model *m, tr_scratch *s, int32_t a, int32_t b, tr_measure *out,
                           tr_visit_fn fn, void *user);
/* Room for the closure walk's stack: every edge may be pushed once. */
size_t goblin__train_stack_len(const goblin_graph *g);

/* ---- task_graph.c ---------------------------------------------------------- */

/* Build the task graph of @p kind for stage @p s at @p rows rows (tile @p tile). */
goblin_err goblin__train_task_graph(const tr_model *m, const tr_plan *p, int32_t s,
                                    tr_task_kind kind, int64_t rows, int32_t tile,
                                    tr_task_graph **out, char *msg, size_t cap);
void goblin__train_task_graph_free(tr_task_graph *tg);
/* The copy of @p tg to submit for round @p round and the micro-batch of @p rows rows from
 * row @p row0 of the batch (*out NULL when @p tg has no DROPOUT node): every DROPOUT node
 * gets SEED goblin__train_drop_seed(seed, round) and, when its value follows the batch,
 * OFFSET offset + row0 * per_row and AXIS the batch's dim (the op draws as if that dim
 * led: kernels/random.h, goblin__rng_axis_index), so element e of a sample keeps the
 * counter it has in the whole batch: the masks depend only on the seed, the round
 * and the element's index in the batch, not on the micro-batches, stages or tiles. */
goblin_err goblin__train_dropout_graph(const tr_task_graph *tg, int64_t round, int64_t row0,
                                       goblin_graph **out, char *msg, size_t cap);
/* The round's key of a DROPOUT node whose model SEED attribute is @p seed. */
static inline int64_t goblin__train_drop_seed(int64_t seed, int64_t round);
/* The tile's slice of the tiled layer: output features [lo, hi) of @p total. */
void goblin__train_tile_range(int64_t total, int32_t tiles, int32_t k, int64_t *lo, int64_t *hi);
/* For a tiled stage: the model's tiled parameter dims. *w_axis: the weight's axis cut;
 * *out_axis: the output's axis; *features: its size; *bias_param: the parameter index of
 * the bias (or -1); *w_param: the weight's. */
void goblin__train_tile_layout(const tr_model *m, const tr_stage *st, int32_t *w_param,
                               int32_t *w_axis, int32_t *bias_param, int32_t *out_axis,
                               int64_t *features);

/* ---- the trainer (trainer.c, round.c, checkpoint.c) ------------------------------ */

#define GOBLIN__TRAIN_NORMS 8 /* gradient norms a jump is measured against */

struct goblin_trainer {
    goblin_trainer_params p;
    goblin_grid *grid;     /* where the tasks go (borrowed); NULL: evaluated in this thread */
    tr_model m;
    goblin_dtype pdt;
    goblin_tensor *params; /* contiguous, owned */
    goblin_sgd_state *sgd;
    goblin_adamw_state *adam;
    int64_t rounds;
    uint64_t version, nonce, model_hash;
    tr_plan plan;
    int64_t plan_micro_param;
    /* sanity.c: is the loss provably >= 0, and the last rounds' gradient norms */
    bool loss_nonneg;
    double norms[GOBLIN__TRAIN_NORMS];
    /* the batch-norms' whole-batch mean and biased variance per channel: of the last
     * round that was applied (bn_rows its batch size, 0 before the first), and of the
     * round being computed (round.c fills them) */
    double **bn_mean, **bn_var, **bn_mean_next, **bn_var_next;
    int64_t bn_rows;
    int32_t n_norms, next_norm;
    char err[512];
};

/* Set the trainer's message; returns @p e. */
/* The trainer's message (goblin_trainer_error) and @p e. */
#define goblin__train_err(t, e, ...) goblin__errf((t)->err, sizeof (t)->err, (e), __VA_ARGS__)
void goblin__train_log(goblin_trainer *t, goblin_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A new contiguous tensor (zeroed if @p zero). GOBLIN_ENOMEM. */
goblin_err goblin__train_alloc_like(goblin_tensor *out, goblin_dtype dt, int32_t rank, const int64_t *shape,
                                    bool zero);
/* Fresh optimizer state (zeroed moments, step 0, no momentum buffer yet). */
goblin_err goblin__train_state_new(goblin_trainer *t, goblin_sgd_state **sgd, goblin_adamw_state **adam);
/* Free the trainer's optimizer state (t->sgd, t->adam). */
void goblin__train_state_free(goblin_trainer *t);
/* ---- sanity.c: rounds that cannot be right ------------------------------------------- */

/* Is the model's loss provably never negative (its ops and their inputs' signs)? */
bool goblin__train_loss_nonneg(const tr_model *m);
/* Are all of @p grads finite? */
bool goblin__train_grads_finite(const goblin_trainer *t, const goblin_tensor *grads);
/* Why a round with this loss and gradient cannot be right (written into @p why), or NULL. */
const char *goblin__train_implausible(const goblin_trainer *t, double loss, double gnorm,
                                      bool grads_finite, char *why, size_t cap);
/* Remember an accepted round's gradient norm. */
void goblin__train_note_norm(goblin_trainer *t, double gnorm);

/* Make t->plan the plan for @p batch rows under the current budget. */
goblin_err goblin__train_ensure_plan(goblin_trainer *t, int64_t batch);

static inline uint64_t goblin__train_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline int64_t goblin__train_drop_seed(int64_t seed, int64_t round) {
    return (int64_t)goblin__train_mix64((uint64_t)seed ^ goblin__train_mix64((uint64_t)round));
}

static inline double goblin__train_now_s(void) { return 1e-9 * (double)goblin__now_ns(); }

#endif
