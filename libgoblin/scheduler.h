/* scheduler.h - internals shared by the node, the worker and the grid. */
#ifndef GOBLIN_SCHEDULER_H
#define GOBLIN_SCHEDULER_H

#include <stdarg.h>
#include <stdint.h>

#include "goblin/graph.h"
#include "goblin/node.h"

/** Monotonic milliseconds. */
int64_t goblin__now_ms(void);
/** Monotonic nanoseconds. */
int64_t goblin__now_ns(void);
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

#endif
