/* scheduler.h - internals shared by the node, the worker and the grid. */
#ifndef GOBLIN_SCHEDULER_H
#define GOBLIN_SCHEDULER_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "goblin/graph.h"
#include "goblin/node.h"

/** Monotonic milliseconds. */
int64_t goblin__now_ms(void);
/** Monotonic nanoseconds. */
int64_t goblin__now_ns(void);
/** CPU time of the calling thread, nanoseconds. */
int64_t goblin__thread_cpu_ns(void);
/** CPU time that the Freivalds checks called by this thread spent on their second
 *  threads (goblin_freivalds_params.threads = 2) since the last call; resets it. */
int64_t goblin__freivalds_take_helper_cpu_ns(void);
/** A secret random number (getrandom), for Freivalds seeds. */
uint64_t goblin__secret_u64(void);
/** Format and deliver a log line if @p fn is set and @p lvl <= @p max. */
void goblin__logv(goblin_log_fn fn, void *user, goblin_log_level max, goblin_log_level lvl,
                  const char *fmt, va_list ap);
/** The graph of one matmul task: inputs [rows, kn] and [kn, cols], one output. */
goblin_err goblin__matmul_graph(goblin_dtype dt, int64_t rows, int64_t kn, int64_t cols,
                                goblin_graph **out);

/* Graph jobs (rebatch.c). Which inputs are split along the batch (@p batched: one
 * byte per input, may be NULL) and the batch size; GOBLIN_EINVAL / GOBLIN_ESHAPE with
 * a message. */
goblin_err goblin__batch_inputs(const goblin_graph *g, const goblin_split *split, uint8_t *batched,
                                int64_t *batch, char *msg, size_t cap);
/** Bytes of every node's value of @p g together (a conservative task memory estimate). */
uint64_t goblin__graph_task_bytes(const goblin_graph *g);
/** The op of output @p o's node and its reduction length (for goblin_verify_compare). */
void goblin__graph_output_contract(const goblin_graph *g, int32_t o, goblin_op *op, int64_t *k);
/** The AUTO combine rule of output @p o (node.h), judged from @p g (batch size @p batch)
 *  and @p probe (the same graph rebatched to @p probe_rows != batch); GOBLIN_COMBINE_AUTO
 *  if no rule applies. */
goblin_combine goblin__graph_auto_combine(const goblin_graph *g, const goblin_graph *probe,
                                          int64_t batch, int64_t probe_rows, int32_t o);

/* ---- graph jobs: large constants as cached inputs (hoist.c) ---------------------- */

struct goblin__node;
/** Are two graph nodes the same (op, dtype, shape, inputs, attributes, payload bytes)? */
bool goblin__same_node(const struct goblin__node *x, const struct goblin__node *y);

/** A graph re-instantiated with its large constants as inputs (shared, read-only). */
typedef struct goblin__hoisted {
    goblin_graph *g;   /* the graph, each hoisted constant an INPUT node (same node ids) */
    int32_t n_in;      /* g's inputs: the caller's and the hoisted constants, in node order */
    int32_t *src;      /* per input of g: the caller's input index, or -1 - k for constant k */
    int32_t n_const;
    goblin_tensor *ct; /* per constant: dtype, shape and data (a copy) */
    uint64_t *cid;     /* per constant: its cache id (random, secret) */
    int32_t *node;     /* per constant: its node id, ascending */
} goblin__hoisted;

#define GOBLIN__HOIST_MEMO 2
/** The graphs hoisted last (a node's): the same graph gets the same entry, ids included. */
typedef struct goblin__hoist_memo {
    pthread_mutex_t mu;
    struct goblin__hoist_entry *e[GOBLIN__HOIST_MEMO];
    uint64_t last[GOBLIN__HOIST_MEMO], clock;
} goblin__hoist_memo;

void goblin__hoist_memo_init(goblin__hoist_memo *m);
void goblin__hoist_memo_fini(goblin__hoist_memo *m);
/** *out: @p g with its large constants as inputs (a reference: goblin__hoist_release it),
 *  or NULL when @p g has none; the result has at most @p max_inputs inputs. Thread-safe.
 *  GOBLIN_ENOMEM. */
goblin_err goblin__hoist_get(goblin__hoist_memo *m, const goblin_graph *g, int32_t max_inputs,
                             const goblin__hoisted **out);
void goblin__hoist_release(const goblin__hoisted *h);

#endif
