/* goblin/ops.h - the operator catalogue.
 *
 * The catalogue is closed and versioned (GOBLIN_CATALOG_VERSION in version.h):
 * workers compute only these ops, with checked attributes. The numbering is
 * part of the wire format, so values are explicit and append-only; the gaps
 * leave room inside each group (backward ops and optimizer steps go to 200+).
 *
 * Each op's inputs, attributes, dtypes, integer semantics and numeric contract
 * are documented in docs/ops.md and queryable through goblin_op_info(). */
#ifndef GOBLIN_OPS_H
#define GOBLIN_OPS_H

#include "api.h"
#include "dtype.h"
#include "error.h"

GOBLIN_BEGIN_DECLS

/* X(NAME, value, "name") */
#define GOBLIN_OP_MAP(X)                                                           \
    /* graph leaves */                                                              \
    X(INPUT, 0, "input")                                                            \
    X(CONSTANT, 1, "constant")                                                      \
    /* elementwise arithmetic (broadcasting, same dtype) */                         \
    X(ADD, 10, "add")                                                               \
    X(SUB, 11, "sub")                                                               \
    X(MUL, 12, "mul")                                                               \
    X(DIV, 13, "div")                                                               \
    X(POW, 14, "pow")                                                               \
    X(MAXIMUM, 15, "maximum")                                                       \
    X(MINIMUM, 16, "minimum")                                                       \
    X(CLAMP, 17, "clamp")                                                           \
    X(ATAN2, 18, "atan2")                                                           \
    /* unary math */                                                                \
    X(NEG, 30, "neg")                                                               \
    X(ABS, 31, "abs")                                                               \
    X(SIGN, 32, "sign")                                                             \
    X(EXP, 33, "exp")                                                               \
    X(LOG, 34, "log")                                                               \
    X(SQRT, 35, "sqrt")                                                             \
    X(RSQRT, 36, "rsqrt")                                                           \
    X(RECIPROCAL, 37, "reciprocal")                                                 \
    X(SIN, 38, "sin")                                                               \
    X(COS, 39, "cos")                                                               \
    X(TANH, 40, "tanh")                                                             \
    X(ERF, 41, "erf")                                                               \
    X(FLOOR, 42, "floor")                                                           \
    X(CEIL, 43, "ceil")                                                             \
    X(ROUND, 44, "round")                                                           \
    X(TRUNC, 45, "trunc")                                                           \
    X(LOG1P, 46, "log1p")                                                           \
    X(EXPM1, 47, "expm1")                                                           \
    X(SQUARE, 48, "square")                                                         \
    /* comparison and logic (outputs bool) */                                       \
    X(EQ, 60, "eq")                                                                 \
    X(NE, 61, "ne")                                                                 \
    X(LT, 62, "lt")                                                                 \
    X(LE, 63, "le")                                                                 \
    X(GT, 64, "gt")                                                                 \
    X(GE, 65, "ge")                                                                 \
    X(LOGICAL_AND, 66, "logical_and")                                               \
    X(LOGICAL_OR, 67, "logical_or")                                                 \
    X(LOGICAL_XOR, 68, "logical_xor")                                               \
    X(LOGICAL_NOT, 69, "logical_not")                                               \
    X(WHERE, 70, "where")                                                           \
    X(ISNAN, 71, "isnan")                                                           \
    /* integer ops */                                                               \
    X(FLOOR_DIV, 80, "floor_div")                                                   \
    X(TRUNC_DIV, 81, "trunc_div")                                                   \
    X(REM_FLOOR, 82, "rem_floor")                                                   \
    X(REM_TRUNC, 83, "rem_trunc")                                                   \
    X(BITWISE_AND, 84, "bitwise_and")                                               \
    X(BITWISE_OR, 85, "bitwise_or")                                                 \
    X(BITWISE_XOR, 86, "bitwise_xor")                                               \
    X(BITWISE_NOT, 87, "bitwise_not")                                               \
    X(SHL, 88, "shl")                                                               \
    X(SHR_ARITH, 89, "shr_arith")                                                   \
    X(SHR_LOGICAL, 90, "shr_logical")                                               \
    X(CAST, 91, "cast")                                                             \
    /* reductions */                                                                \
    X(SUM, 100, "sum")                                                              \
    X(MEAN, 101, "mean")                                                            \
    X(REDUCE_MAX, 102, "reduce_max")                                                \
    X(REDUCE_MIN, 103, "reduce_min")                                                \
    X(PROD, 104, "prod")                                                            \
    X(ARGMAX, 105, "argmax")                                                        \
    X(ARGMIN, 106, "argmin")                                                        \
    X(VAR, 107, "var")                                                              \
    X(CUMSUM, 108, "cumsum")                                                        \
    /* shape and movement */                                                        \
    X(RESHAPE, 120, "reshape")                                                      \
    X(PERMUTE, 121, "permute")                                                      \
    X(EXPAND, 122, "expand")                                                        \
    X(SLICE, 123, "slice")                                                          \
    X(SELECT, 124, "select")                                                        \
    X(SPLIT, 125, "split")                                                          \
    X(CONCAT, 126, "concat")                                                        \
    X(STACK, 127, "stack")                                                          \
    X(PAD, 128, "pad")                                                              \
    X(COPY, 129, "copy")                                                            \
    /* indexing */                                                                  \
    X(GATHER, 140, "gather")                                                        \
    X(SCATTER, 141, "scatter")                                                      \
    X(SCATTER_ADD, 142, "scatter_add")                                              \
    X(INDEX_SELECT, 143, "index_select")                                            \
    X(EMBEDDING, 144, "embedding")                                                  \
    X(INDEX_PUT, 145, "index_put")                                                  \
    /* linear algebra and vision */                                                 \
    X(MATMUL, 150, "matmul")                                                        \
    X(CONV2D, 151, "conv2d")                                                        \
    X(MAX_POOL2D, 152, "max_pool2d")                                                \
    X(AVG_POOL2D, 153, "avg_pool2d")                                                \
    X(ADAPTIVE_AVG_POOL2D, 154, "adaptive_avg_pool2d")                              \
    /* normalization */                                                             \
    X(BATCH_NORM, 160, "batch_norm")                                                \
    X(LAYER_NORM, 161, "layer_norm")                                                \
    X(RMS_NORM, 162, "rms_norm")                                                    \
    /* activations */                                                               \
    X(RELU, 170, "relu")                                                            \
    X(GELU, 171, "gelu")                                                            \
    X(SILU, 172, "silu")                                                            \
    X(SIGMOID, 173, "sigmoid")                                                      \
    X(SOFTMAX, 174, "softmax")                                                      \
    X(LOG_SOFTMAX, 175, "log_softmax")                                              \
    X(SDPA, 176, "scaled_dot_product_attention")                                    \
    /* losses */                                                                    \
    X(NLL_LOSS, 180, "nll_loss")                                                    \
    X(CROSS_ENTROPY, 181, "cross_entropy")                                          \
    /* random (counter-based: seed + offset give the same numbers anywhere) */      \
    X(RAND_UNIFORM, 185, "rand_uniform")                                            \
    X(RAND_NORMAL, 186, "rand_normal")                                              \
    X(BERNOULLI, 187, "bernoulli")                                                  \
    X(RANDINT, 188, "randint")                                                      \
    X(DROPOUT, 189, "dropout")                                                      \
    /* creation */                                                                  \
    X(FULL, 195, "full")                                                            \
    X(ARANGE, 196, "arange")                                                        \
    /* fused user expression */                                                     \
    X(FORMULA, 199, "formula")                                                      \
    /* fused backward ops (autodiff.h appends them to graphs) */                    \
    X(CONV2D_BACKWARD_INPUT, 200, "conv2d_backward_input")                          \
    X(CONV2D_BACKWARD_WEIGHT, 201, "conv2d_backward_weight")                        \
    X(MAX_POOL2D_BACKWARD, 202, "max_pool2d_backward")                              \
    X(AVG_POOL2D_BACKWARD, 203, "avg_pool2d_backward")                              \
    X(ADAPTIVE_AVG_POOL2D_BACKWARD, 204, "adaptive_avg_pool2d_backward")            \
    X(BATCH_NORM_BACKWARD, 205, "batch_norm_backward")                              \
    X(NLL_LOSS_BACKWARD, 206, "nll_loss_backward")                                  \
    X(CROSS_ENTROPY_BACKWARD, 207, "cross_entropy_backward")                        \
    X(EMBEDDING_BACKWARD, 208, "embedding_backward")                                \
    X(SDPA_BACKWARD, 209, "scaled_dot_product_attention_backward")                  \
    X(LAYER_NORM_BACKWARD, 210, "layer_norm_backward")                              \
    X(GELU_BACKWARD, 211, "gelu_backward")                                          \
    X(RELU_BACKWARD, 212, "relu_backward")

typedef enum goblin_op {
#define GOBLIN__OP_ENUM(name, value, str) GOBLIN_OP_##name = value,
    GOBLIN_OP_MAP(GOBLIN__OP_ENUM)
#undef GOBLIN__OP_ENUM
    GOBLIN_OP_COUNT /* one past the largest value; not every value below is an op */
} goblin_op;

/* Attribute keys. X(NAME, value, "name", kind). Append-only (on the wire). */
#define GOBLIN_ATTR_MAP(X)                              \
    X(AXES, 0, "axes", INTS)                            \
    X(KEEPDIM, 1, "keepdim", INT)                       \
    X(AXIS, 2, "axis", INT)                             \
    X(SHAPE, 3, "shape", INTS)                          \
    X(PERM, 4, "perm", INTS)                            \
    X(STARTS, 5, "starts", INTS)                        \
    X(STOPS, 6, "stops", INTS)                          \
    X(STEPS, 7, "steps", INTS)                          \
    X(INDEX, 8, "index", INT)                           \
    X(PADS, 9, "pads", INTS)                            \
    X(VALUE, 10, "value", FLOAT)                        \
    X(MIN, 11, "min", FLOAT)                            \
    X(MAX, 12, "max", FLOAT)                            \
    X(DTYPE, 13, "dtype", INT)                          \
    X(TRANS_A, 14, "trans_a", INT)                      \
    X(TRANS_B, 15, "trans_b", INT)                      \
    X(ALPHA, 16, "alpha", FLOAT)                        \
    X(BETA, 17, "beta", FLOAT)                          \
    X(STRIDE, 18, "stride", INTS)                       \
    X(PADDING, 19, "padding", INTS)                     \
    X(DILATION, 20, "dilation", INTS)                   \
    X(GROUPS, 21, "groups", INT)                        \
    X(KERNEL, 22, "kernel", INTS)                       \
    X(OUTPUT_SIZE, 23, "output_size", INTS)             \
    X(CEIL_MODE, 24, "ceil_mode", INT)                  \
    X(COUNT_INCLUDE_PAD, 25, "count_include_pad", INT)  \
    X(EPS, 26, "eps", FLOAT)                            \
    X(MOMENTUM, 27, "momentum", FLOAT)                  \
    X(TRAINING, 28, "training", INT)                    \
    X(APPROXIMATE, 29, "approximate", INT)              \
    X(CAUSAL, 30, "causal", INT)                        \
    X(SCALE, 31, "scale", FLOAT)                        \
    X(REDUCTION, 32, "reduction", INT)                  \
    X(IGNORE_INDEX, 33, "ignore_index", INT)            \
    X(SEED, 34, "seed", INT)                            \
    X(OFFSET, 35, "offset", INT)                        \
    X(P, 36, "p", FLOAT)                                \
    X(LOW, 37, "low", FLOAT)                            \
    X(HIGH, 38, "high", FLOAT)                          \
    X(MEAN, 39, "mean", FLOAT)                          \
    X(STD, 40, "std", FLOAT)                            \
    X(START, 41, "start", FLOAT)                        \
    X(STEP, 42, "step", FLOAT)                          \
    X(CORRECTION, 43, "correction", INT)                \
    X(CHUNKS, 44, "chunks", INT)                        \
    X(ACCUMULATE, 45, "accumulate", INT)                \
    X(NORM_NDIM, 46, "norm_ndim", INT)                  \
    X(HAS_BIAS, 47, "has_bias", INT)                    \
    X(LABEL_SMOOTHING, 48, "label_smoothing", FLOAT)

typedef enum goblin_attr_key {
#define GOBLIN__ATTR_ENUM(name, value, str, kind) GOBLIN_ATTR_##name = value,
    GOBLIN_ATTR_MAP(GOBLIN__ATTR_ENUM)
#undef GOBLIN__ATTR_ENUM
    GOBLIN_ATTR_COUNT
} goblin_attr_key;

typedef enum goblin_attr_kind {
    GOBLIN_ATTR_KIND_INT = 0,   /* one int64 */
    GOBLIN_ATTR_KIND_FLOAT = 1, /* one double */
    GOBLIN_ATTR_KIND_INTS = 2,  /* up to GOBLIN_MAX_ATTR_INTS int64 */
    GOBLIN_ATTR_KIND_COUNT
} goblin_attr_kind;

#define GOBLIN_MAX_ATTR_INTS 16

/* Values of GOBLIN_ATTR_REDUCTION. */
enum { GOBLIN_REDUCTION_NONE = 0, GOBLIN_REDUCTION_MEAN = 1, GOBLIN_REDUCTION_SUM = 2 };
/* Values of GOBLIN_ATTR_APPROXIMATE (GELU). */
enum { GOBLIN_GELU_ERF = 0, GOBLIN_GELU_TANH = 1 };

/** One attribute: a key and its value. Build with the helpers below. */
typedef struct goblin_attr {
    goblin_attr_key key;
    int32_t count; /* number of ints for INTS; 1 otherwise */
    union {
        int64_t i;
        double f;
        int64_t ints[GOBLIN_MAX_ATTR_INTS];
    } v;
} goblin_attr;

GOBLIN_API goblin_attr goblin_attr_int(goblin_attr_key key, int64_t value);
GOBLIN_API goblin_attr goblin_attr_float(goblin_attr_key key, double value);
/** @p n values are copied; more than GOBLIN_MAX_ATTR_INTS (or n < 0) gives an attribute
 *  with count = -1, which graph building rejects with GOBLIN_ELIMIT. */
GOBLIN_API goblin_attr goblin_attr_ints(goblin_attr_key key, const int64_t *values, int32_t n);

/** Name of an attribute key ("axes"), or NULL if unknown. */
GOBLIN_API const char *goblin_attr_name(goblin_attr_key key);
/** Kind of an attribute key; GOBLIN_ATTR_KIND_COUNT if unknown. */
GOBLIN_API goblin_attr_kind goblin_attr_key_kind(goblin_attr_key key);

/** The catalogue version (GOBLIN_CATALOG_VERSION of the library actually linked). */
GOBLIN_API uint32_t goblin_catalog_version(void);

/** Is @p op a value of the catalogue (not a gap)? */
GOBLIN_API bool goblin_op_valid(goblin_op op);
/** Op name ("add"), or NULL for a gap / out of range. */
GOBLIN_API const char *goblin_op_name(goblin_op op);
/** Look up an op by name; GOBLIN_ENOTFOUND if none. */
GOBLIN_API goblin_err goblin_op_from_name(const char *name, goblin_op *out);

/** Iterate the catalogue in numeric order: first call with op = -1; returns the next
 *  op value, or -1 when done. Leaves (input, constant) are included. */
GOBLIN_API int goblin_op_next(int op);

/** Static description of an op. Strings are constant and live forever. */
typedef struct goblin_op_info {
    goblin_op op;
    const char *name;
    const char *group;        /* "elementwise", "unary", "reduction", ... */
    int32_t min_inputs;
    int32_t max_inputs;       /* -1 = unbounded (concat, stack) */
    uint32_t dtypes;          /* GOBLIN_DTMASK of the dtypes its main input takes */
    const char *summary;      /* one line: what it computes */
    const char *semantics;    /* integer / NaN / overflow semantics, or "" */
    const char *contract;     /* the numeric contract in words */
    uint32_t n_attrs;         /* attribute keys it accepts */
    goblin_attr_key attrs[16];
} goblin_op_info;

/** Fill @p out for @p op. GOBLIN_EINVAL if @p op is not in the catalogue or out is NULL. */
GOBLIN_API goblin_err goblin_op_get_info(goblin_op op, goblin_op_info *out);

/** The numeric contract: results of @p op in @p dt that differ from the exact value by at
 *  most abs_tol + rel_tol * scale are accepted, where scale is the op's natural magnitude
 *  (|exact| for elementwise ops; sum |a_i b_i| for reductions and matmul-like ops, see
 *  docs/ops.md). @p k is the reduction length for reducing ops (ignored otherwise).
 *  Exact ops (integer arithmetic, movement, comparisons) give 0 and 0. */
GOBLIN_API goblin_err goblin_op_contract(goblin_op op, goblin_dtype dt, int64_t k,
                                         double *rel_tol, double *abs_tol);

GOBLIN_END_DECLS

#endif
