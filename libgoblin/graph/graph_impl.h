/* libgoblin/graph/graph_impl.h - the graph's internals, shared by the builder, the
 * serializer, the graph transforms, the executor and the backends (internal). */
#ifndef GOBLIN__GRAPH_IMPL_H
#define GOBLIN__GRAPH_IMPL_H

#include "core/node.h"
#include "ops/op_def.h"

struct goblin_graph {
    goblin__node *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *input_ids;
    int32_t n_inputs, cap_inputs;
    int32_t *output_ids;
    int32_t n_outputs, cap_outputs;
    int64_t const_bytes;
    char err[256];
};

/* ---- graph internals (graph.c) ------------------------------------------ */

/* Validate and append a node described by @p proto: op, inputs/n_inputs and
 * attrs/n_attrs (borrowed, copied), payload/payload_size (borrowed, copied: the
 * data of a CONSTANT, the program of a FORMULA), and for INPUT/CONSTANT its dtype,
 * rank and shape. Runs the generic checks and the op's inference. On failure
 * nothing is added and goblin_graph_error() holds the message. Used by the builder
 * calls and by the decoder. */
goblin_err goblin__graph_add_node(goblin_graph *g, const goblin__node *proto, int32_t *out_id);

#endif
