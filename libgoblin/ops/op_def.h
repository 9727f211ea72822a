/* libgoblin/ops/op_def.h - the catalogue's internal op table: per op its inputs,
 * dtypes, attribute schema, shape inference and numeric contract (internal). */
#ifndef GOBLIN__OPS_OP_DEF_H
#define GOBLIN__OPS_OP_DEF_H

#include "core/node.h"

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

#endif
