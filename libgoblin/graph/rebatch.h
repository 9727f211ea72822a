/* libgoblin/graph/rebatch.h - graph jobs' view of a graph: which inputs are cut by
 * the batch, how big a task is, how each output is combined (internal). */
#ifndef GOBLIN__GRAPH_REBATCH_H
#define GOBLIN__GRAPH_REBATCH_H

#include <stdbool.h>
#include <stdint.h>
#include "goblin/graph.h"
#include "goblin/node.h"

/* Graph jobs (rebatch.c). Which inputs are split along the batch (@p batched: one
 * byte per input, may be NULL) and the batch size; GOBLIN_EINVAL / GOBLIN_ESHAPE with
 * a message. */
goblin_err goblin__batch_inputs(const goblin_graph *g, const goblin_split *split, uint8_t *batched,
                                int64_t *batch, char *msg, size_t cap);
/** goblin_graph_rebatch with the detail in @p msg (@p cap bytes; may be NULL). */
goblin_err goblin__graph_rebatch(const goblin_graph *g, const goblin_split *split, int64_t rows,
                                 goblin_graph **out, char *msg, size_t cap);
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
