/* libgoblin/core/node.h - a graph node as every layer sees it (op, dtype, shape,
 * inputs, attributes, payload), attribute lookup and the small shape helpers
 * (internal). */
#ifndef GOBLIN__CORE_NODE_H
#define GOBLIN__CORE_NODE_H

#include <goblin/goblin.h>
#include <stdarg.h>
#include "base/alloc.h"
#include "base/errf.h"

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

/* ---- attributes ---------------------------------------------------------- */

const goblin_attr *goblin__attr_find(const goblin__node *n, goblin_attr_key key);
/* Value or the default if absent. */
int64_t goblin__attr_i(const goblin__node *n, goblin_attr_key key, int64_t def);
double goblin__attr_f(const goblin__node *n, goblin_attr_key key, double def);
/* Pointer to the ints and their count in *count, or NULL (count 0) if absent. */
const int64_t *goblin__attr_ints(const goblin__node *n, goblin_attr_key key, int32_t *count);

/* ---- helpers for inference ---------------------------------------------- */

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

/* Copy src into dst element by element (same dtype and shape, any strides). tensor.c */
void goblin__tensor_copy(goblin_tensor *dst, const goblin_tensor *src);

#endif
