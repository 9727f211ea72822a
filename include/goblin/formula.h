/* goblin/formula.h - user expressions (the FORMULA op).
 *
 * A formula such as "a * exp(-b * x) + c" is parsed in C into a typed
 * expression tree: data, not code. Its variables are bound, in the order
 * goblin_formula_var_name() lists them, to the inputs of a FORMULA node, which
 * every backend evaluates as one fused pass over memory. Only the tree travels
 * on the wire (variables become input positions; their names stay here).
 *
 * Grammar (Python-like precedence, lowest first):
 *   where(c, a, b) | or | and | not | comparisons (== != < <= > >=) |
 *   bitwise | ^ & | shifts << >> | + - | * / // % | unary - + ~ | ** (right assoc) |
 *   call f(args) | number | name | ( expr )
 * Functions: exp log sqrt rsqrt abs sin cos tanh erf floor ceil round trunc
 *   sigmoid relu log1p expm1 min(a,b) max(a,b) pow(a,b) where(c,a,b) clamp(x,lo,hi).
 * Integer semantics follow Python: // floors, % takes the divisor's sign,
 * '/' is true division (float dtypes only). Constants take the inputs' dtype. */
#ifndef GOBLIN_FORMULA_H
#define GOBLIN_FORMULA_H

#include "api.h"
#include "error.h"

GOBLIN_BEGIN_DECLS

#define GOBLIN_FORMULA_MAX_TEXT 4096  /* bytes of source text */
#define GOBLIN_FORMULA_MAX_NODES 256  /* tree nodes */
#define GOBLIN_FORMULA_MAX_VARS 16    /* distinct variables */

typedef struct goblin_formula goblin_formula;

/** Where and why parsing failed. */
typedef struct goblin_formula_error {
    int32_t position;  /* byte offset in the text, -1 if not positional */
    char message[128];
} goblin_formula_error;

/** Parse @p text (borrowed, NUL-terminated). On success *out owns a new formula.
 *  GOBLIN_ESYNTAX with @p err filled (position and message) on a syntax error;
 *  GOBLIN_ELIMIT past the limits above; GOBLIN_ENOMEM. @p err may be NULL. */
GOBLIN_API goblin_err goblin_formula_parse(const char *text, goblin_formula **out,
                                           goblin_formula_error *err);
/** NULL is a no-op. */
GOBLIN_API void goblin_formula_free(goblin_formula *f);
/** Number of distinct variables, in order of first appearance. */
GOBLIN_API int32_t goblin_formula_var_count(const goblin_formula *f);
/** Name of variable @p i (borrowed from @p f), or NULL if out of range. */
GOBLIN_API const char *goblin_formula_var_name(const goblin_formula *f, int32_t i);
/** Number of tree nodes. */
GOBLIN_API int32_t goblin_formula_node_count(const goblin_formula *f);

GOBLIN_END_DECLS

#endif
