/* goblin/graph.h - graphs of catalogue ops.
 *
 * A graph is a DAG of nodes (op, dtype, shape, inputs, attributes). Nodes are
 * added in topological order (an input must exist before its consumer), so a
 * graph built through this API cannot have a cycle; the decoder checks the same
 * for serialized graphs. Shape and dtype are inferred and validated when a node
 * is added: on failure nothing is added, and goblin_graph_error() says which
 * node and what is wrong.
 *
 * Thread safety: a graph may be read from several threads at once (evaluation,
 * serialization) but not modified concurrently. */
#ifndef GOBLIN_GRAPH_H
#define GOBLIN_GRAPH_H

#include "api.h"
#include "error.h"
#include "ops.h"
#include "tensor.h"
#include "formula.h"

GOBLIN_BEGIN_DECLS

typedef struct goblin_graph goblin_graph;

/* Limits that keep hostile graphs bounded (also enforced by the decoder). */
#define GOBLIN_GRAPH_MAX_NODES (1 << 20)
#define GOBLIN_GRAPH_MAX_INPUTS_PER_NODE 1024
#define GOBLIN_GRAPH_MAX_CONST_BYTES ((int64_t)1 << 32)
#define GOBLIN_MAX_DIM ((int64_t)1 << 40)
#define GOBLIN_MAX_NUMEL ((int64_t)1 << 46)

/** New empty graph in *out. GOBLIN_EINVAL if out is NULL; GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_graph_new(goblin_graph **out);
/** NULL is a no-op. */
GOBLIN_API void goblin_graph_free(goblin_graph *g);

/** Detail message of the last failed call on @p g ("" if none). Borrowed; valid
 *  until the next call on @p g. */
GOBLIN_API const char *goblin_graph_error(const goblin_graph *g);

/** Add a graph input of @p dtype and @p shape (copied). Inputs are numbered in the
 *  order they are added; evaluation takes them in that order. */
GOBLIN_API goblin_err goblin_graph_input(goblin_graph *g, goblin_dtype dtype, int32_t rank,
                                         const int64_t *shape, int32_t *out_id);

/** Add a constant: @p t's elements are copied into the graph (any strides). */
GOBLIN_API goblin_err goblin_graph_constant(goblin_graph *g, const goblin_tensor *t,
                                            int32_t *out_id);

/** Add a node applying @p op to @p inputs (node ids, copied) with @p attrs (copied).
 *  Shape/dtype are inferred; errors: GOBLIN_EINVAL (unknown op, bad id, wrong arity,
 *  unknown or duplicate attribute), GOBLIN_ESHAPE, GOBLIN_EDTYPE, GOBLIN_ERANGE
 *  (attribute out of range), GOBLIN_ELIMIT, GOBLIN_ENOMEM. Not for INPUT, CONSTANT
 *  or FORMULA (use the dedicated calls). */
GOBLIN_API goblin_err goblin_graph_add(goblin_graph *g, goblin_op op, const int32_t *inputs,
                                       int32_t n_inputs, const goblin_attr *attrs,
                                       int32_t n_attrs, int32_t *out_id);

/** Add a FORMULA node: variable i of @p f (borrowed; its tree is copied) is bound to
 *  inputs[i]; n_inputs must equal goblin_formula_var_count(f). Inputs broadcast and
 *  must share one dtype, which is the output dtype. */
GOBLIN_API goblin_err goblin_graph_add_formula(goblin_graph *g, const goblin_formula *f,
                                               const int32_t *inputs, int32_t n_inputs,
                                               int32_t *out_id);

/** Mark node @p id as the next graph output (outputs are numbered in call order). */
GOBLIN_API goblin_err goblin_graph_output(goblin_graph *g, int32_t id);

GOBLIN_API int32_t goblin_graph_node_count(const goblin_graph *g);
GOBLIN_API int32_t goblin_graph_input_count(const goblin_graph *g);
GOBLIN_API int32_t goblin_graph_output_count(const goblin_graph *g);
/** Node id of input @p i / output @p i, or -1 if out of range. */
GOBLIN_API int32_t goblin_graph_input_id(const goblin_graph *g, int32_t i);
GOBLIN_API int32_t goblin_graph_output_id(const goblin_graph *g, int32_t i);

/** Describe node @p id: op, dtype and shape (written into @p out with data = NULL and
 *  contiguous strides), and its inputs. Any out-pointer may be NULL. */
GOBLIN_API goblin_err goblin_graph_node(const goblin_graph *g, int32_t id, goblin_op *op,
                                        goblin_tensor *out, int32_t *n_inputs,
                                        const int32_t **inputs);

/* Serialization: a versioned binary format (docs/graph-format.md) carrying ops,
 * dtypes, shapes, attributes, formula trees and constants; no names of any kind. */

/** Encode @p g into a new buffer (*out_buf, release with goblin_buffer_free). */
GOBLIN_API goblin_err goblin_graph_serialize(const goblin_graph *g, uint8_t **out_buf,
                                             size_t *out_len);

/** Limits the decoder enforces; fill with goblin_graph_decode_limits_default(). */
typedef struct goblin_graph_decode_limits {
    int32_t max_nodes;
    int32_t max_inputs_per_node;
    int64_t max_const_bytes;  /* all constants together */
    int64_t max_numel;        /* per node */
} goblin_graph_decode_limits;

GOBLIN_API void goblin_graph_decode_limits_default(goblin_graph_decode_limits *l);

/** Decode @p len bytes at @p buf (borrowed; every byte is treated as hostile) into a
 *  new graph. Each node is re-validated exactly as goblin_graph_add would.
 *  GOBLIN_EFORMAT (truncated, corrupted), GOBLIN_EVERSION (format or catalogue
 *  version), GOBLIN_ELIMIT (over @p limits; NULL = defaults), or a validation error.
 *  On failure *out is untouched and @p err (may be NULL) says why. */
GOBLIN_API goblin_err goblin_graph_deserialize(const uint8_t *buf, size_t len,
                                               const goblin_graph_decode_limits *limits,
                                               goblin_graph **out, goblin_errbuf *err);

/* ---- re-instantiating a graph for another batch size ----------------- */

/** How a graph job cuts an input (goblin_graph_job_params.split, node.h). */
typedef enum goblin_split {
    GOBLIN_SPLIT_BROADCAST = 0, /* whole tensor to every task */
    GOBLIN_SPLIT_BATCH = 1,     /* cut along dim 0 */
    GOBLIN_SPLIT_COUNT
} goblin_split;

/** "broadcast" or "batch"; NULL for a value outside the enum. */
GOBLIN_API const char *goblin_split_name(goblin_split s);
/** The split named @p name (as goblin_split_name gives it) into *out; GOBLIN_EINVAL. */
GOBLIN_API goblin_err goblin_split_from_name(const char *name, goblin_split *out);

/** The re-instantiation the node uses for chunks: a copy of @p g whose BATCH inputs
 *  (split as for goblin_graph_job_params; NULL = the default rule) have @p rows rows
 *  instead of their original leading size. GOBLIN_ESHAPE (with goblin_graph_error(g)
 *  unchanged and @p err saying which node) if the graph cannot take that batch size. */
GOBLIN_API goblin_err goblin_graph_rebatch(const goblin_graph *g, const goblin_split *split,
                                           int64_t rows, goblin_graph **out, goblin_errbuf *err);

GOBLIN_END_DECLS

#endif
