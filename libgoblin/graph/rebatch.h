/* libgoblin/graph/rebatch.h - graph jobs' view of a graph: which inputs are cut by
 * the batch, how big a task is, how each output is combined (internal). */
#ifndef GOBLIN__GRAPH_REBATCH_H
#define GOBLIN__GRAPH_REBATCH_H

#include <stdbool.h>
#include <stdint.h>
#include "goblin/graph.h"
#include "goblin/node.h"

/* Where the batch sits in a node's value (batch_axis.c): dim @c axis (-1: the value does
 * not follow the batch), of size outer * B * inner (the batch merged whole with
 * neighbouring dims by a reshape; 1, 1 when it is a dim of its own). */
typedef struct goblin__bax {
    int32_t axis;
    int64_t outer, inner;
} goblin__bax;

/* Why a node combines samples (goblin__batch_axes.why). */
enum { GOBLIN__MIX_NONE, GOBLIN__MIX_REDUCE, GOBLIN__MIX_ALONG, GOBLIN__MIX_TWICE, GOBLIN__MIX_LENGTH };

/* The batch traced through a graph: every batched input's batch dim and every node's. */
typedef struct goblin__batch_axes {
    int64_t batch;
    int32_t n_inputs, n_nodes;
    int32_t *in_axis;  /* per input: its batch dim, -1 if broadcast */
    goblin__bax *bax;  /* per node */
    int32_t *mix;      /* per node: -1 if per-sample, else the first node on its path that
                        * combines samples */
    uint8_t *why;      /* per node: GOBLIN__MIX_* if it is such a node itself */
    int32_t *why_dim;  /* per such node: its input's batch dim */
} goblin__batch_axes;

/* Trace the batch through @p g: which inputs are batched (@p split, NULL: those whose
 * candidate dim equals input 0's) and along which dim (@p axes per input, -1 or NULL:
 * inferred: the dims of the first batched input are tried in turn, the first that
 * makes every output per-sample (or a reduction over the batch) wins, else the first
 * that instantiates). GOBLIN_EINVAL / GOBLIN_ESHAPE with a message that names the node. */
goblin_err goblin__batch_axes_find(const goblin_graph *g, const goblin_split *split, const int32_t *axes,
                                   goblin__batch_axes *ax, char *msg, size_t cap);
void goblin__batch_axes_clear(goblin__batch_axes *ax);
/* Instantiate @p g at batch size @p size (@p analyse: fill @p ax's per-node fields on the
 * way; else use them). *out may be NULL (analysis only). */
goblin_err goblin__batch_instance(const goblin_graph *g, goblin__batch_axes *ax, bool analyse, int64_t size,
                                  goblin_graph **out, char *msg, size_t cap);
/* Why node @p node is not per-sample, naming the node that combines samples. */
void goblin__batch_mix_msg(const goblin_graph *g, const goblin__batch_axes *ax, int32_t node, char *buf,
                           size_t cap);
/** goblin__graph_rebatch with the batch already traced. */
goblin_err goblin__graph_rebatch_at(const goblin_graph *g, const goblin__batch_axes *ax, int64_t rows,
                                    goblin_graph **out, char *msg, size_t cap);

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
 *  and its batch axes @p ax; GOBLIN_COMBINE_AUTO if no rule applies. */
goblin_combine goblin__graph_auto_combine(const goblin_graph *g, const goblin__batch_axes *ax, int32_t o);

#endif
