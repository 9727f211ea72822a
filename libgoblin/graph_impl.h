/* libgoblin/graph_impl.h - graph nodes and the catalogue's internal op table.
 *
 * Shared by the graph builder, the ops_<group>.c files (shape inference), the
 * serializer, the executor and the backends. */
#ifndef GOBLIN__GRAPH_IMPL_H
#define GOBLIN__GRAPH_IMPL_H

#include <goblin/goblin.h>
#include <stdarg.h>
#include "alloc.h"

typedef struct goblin__node {
    goblin_op op;
    goblin_dtype dtype;
    int32_t rank;
    int64_t shape[GOBLIN_MAX_RANK];
    int32_t n_inputs;
    int32_t *inputs;        /* node ids, all < this node's id */
    int32_t n_attrs;
    goblin_attr *attrs;     /* sorted by key, no duplicates */
    /* CONSTANT: the contiguous element data. FORMULA: the compiled program
     * (struct goblin__formula_prog, see formula_impl.h). NULL otherwise. */
    void *payload;
    size_t payload_size;
} goblin__node;

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

/* ---- attributes ---------------------------------------------------------- */

const goblin_attr *goblin__attr_find(const goblin__node *n, goblin_attr_key key);
/* Value or the default if absent. */
int64_t goblin__attr_i(const goblin__node *n, goblin_attr_key key, int64_t def);
double goblin__attr_f(const goblin__node *n, goblin_attr_key key, double def);
/* Pointer to the ints and their count in *count, or NULL (count 0) if absent. */
const int64_t *goblin__attr_ints(const goblin__node *n, goblin_attr_key key, int32_t *count);

/* ---- the op table -------------------------------------------------------- */

/* What shape inference sees: the node being added (op, attrs and inputs set;
 * dtype/rank/shape to fill) and its input nodes. On error, write a message
 * with goblin__errf (the graph prefixes "node N (op): "). */
typedef struct goblin__infer {
    goblin__node *node;
    const goblin__node *const *in;
    int32_t n_in;
    char *msg;
    size_t cap;
} goblin__infer;

typedef goblin_err (*goblin__infer_fn)(goblin__infer *c);
/* Numeric contract for dtype dt and reduction length k (see goblin_op_contract). */
typedef void (*goblin__contract_fn)(goblin_dtype dt, int64_t k, double *rel, double *abs);

typedef struct goblin__attr_spec {
    goblin_attr_key key;
    bool required;
    double min, max;  /* inclusive bounds on INT/FLOAT values and on each INTS element;
                       * min == max == 0 means unbounded (any value, NaN included) */
} goblin__attr_spec;

#define GOBLIN__MAX_OP_ATTRS 16

/* Op flags. */
#define GOBLIN__OPF_STRIDED 0x1u  /* kernels accept strided/broadcast-stride inputs */
#define GOBLIN__OPF_ELEMENTWISE 0x2u
#define GOBLIN__OPF_RANDOM 0x4u

typedef struct goblin__op_def {
    bool defined;
    const char *group;
    const char *summary;
    const char *semantics;
    const char *contract_text;
    int16_t min_inputs, max_inputs; /* max -1 = unbounded */
    uint32_t dtypes;                /* GOBLIN_DTMASK of the first input (or output for creation ops) */
    uint32_t flags;
    int32_t n_attrs;
    goblin__attr_spec attrs[GOBLIN__MAX_OP_ATTRS];
    goblin__infer_fn infer;
    goblin__contract_fn contract;   /* NULL: exact (0, 0) */
} goblin__op_def;

/* The table, indexed by op value, filled once (thread-safe). NULL if op is a gap. */
const goblin__op_def *goblin__op_def_get(goblin_op op);

/* Each ops_<group>.c fills its ops' entries of the table (size GOBLIN_OP_COUNT). */
void goblin__ops_register_elementwise(goblin__op_def *t);
void goblin__ops_register_unary(goblin__op_def *t);
void goblin__ops_register_reduce(goblin__op_def *t);
void goblin__ops_register_shape(goblin__op_def *t);
void goblin__ops_register_nn(goblin__op_def *t);
void goblin__ops_register_formula(goblin__op_def *t);
void goblin__ops_register_grad(goblin__op_def *t);

/* ---- helpers for inference ---------------------------------------------- */

/* Format into msg (cap bytes) and return e. */
goblin_err goblin__errf(char *msg, size_t cap, goblin_err e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* NumPy broadcasting of a and b into out (rank max of both). GOBLIN_ESHAPE with a
 * message on mismatch. */
goblin_err goblin__broadcast_shapes(int32_t ra, const int64_t *a, int32_t rb, const int64_t *b,
                                    int32_t *rout, int64_t *out, char *msg, size_t cap);

/* Normalize axis (negative counts from the end) against rank; GOBLIN_ERANGE if out of range. */
goblin_err goblin__norm_axis(int64_t axis, int32_t rank, int32_t *out, char *msg, size_t cap);

/* Element count of a shape, overflow- and GOBLIN_MAX_NUMEL-checked. */
goblin_err goblin__shape_numel(int32_t rank, const int64_t *shape, int64_t *out);

/* "[2, 3, 4]" into buf. Returns buf. */
const char *goblin__shape_str(int32_t rank, const int64_t *shape, char *buf, size_t cap);

/* Row-major strides (in elements) for a shape. */
void goblin__contig_strides(int32_t rank, const int64_t *shape, int64_t *strides);

/* Contract helpers: unit roundoff of a float dtype (0 for exact dtypes). */
double goblin__unit_roundoff(goblin_dtype dt);



/* ---- graph internals (graph.c) ------------------------------------------ */

/* Validate and append a node described by @p proto: op, inputs/n_inputs and
 * attrs/n_attrs (borrowed, copied), payload/payload_size (borrowed, copied: the
 * data of a CONSTANT, the program of a FORMULA), and for INPUT/CONSTANT its dtype,
 * rank and shape. Runs the generic checks and the op's inference. On failure
 * nothing is added and goblin_graph_error() holds the message. Used by the builder
 * calls and by the decoder. */
goblin_err goblin__graph_add_node(goblin_graph *g, const goblin__node *proto, int32_t *out_id);

/* Copy src into dst element by element (same dtype and shape, any strides). exec.c */
void goblin__tensor_copy(goblin_tensor *dst, const goblin_tensor *src);

/* ---- formula bridge (formula.c) ------------------------------------------
 * A FORMULA node's payload is a self-contained, position-independent program
 * (bytes) compiled from a parsed goblin_formula: it names variables by input
 * position only. ops_formula.c's inference validates such a payload as hostile
 * bytes (it also arrives from the wire). */
goblin_err goblin__formula_compile(const goblin_formula *f, void **payload, size_t *size);
#endif
