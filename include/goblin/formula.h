/* goblin/formula.h - user expressions (the FORMULA op).
 *
 * A formula such as "a * exp(-b * x) + c" is parsed in C into a typed
 * expression tree: data, not code. Its variables are bound, in the order
 * goblin_formula_var_name() lists them (first appearance), to the inputs of a
 * FORMULA node (goblin_graph_add_formula), which every backend evaluates as one
 * fused pass over memory. Only the tree travels on the wire (variables become
 * input positions; their names stay here).
 *
 * Grammar (Python's precedence, lowest first; binary operators are
 * left-associative except **):
 *   or | and | not | comparisons (== != < <= > >=; a chain like a < b < c is a
 *   syntax error: write (a < b) and (b < c)) | | | ^ | & | << >> | + - |
 *   * / // % | unary - + ~ | ** (right-assoc; binds tighter than a unary minus
 *   on its left, -x**2 == -(x**2), and takes one on its right, 2**-x) |
 *   f(args) | number | name | ( expr )
 * Functions: exp log sqrt rsqrt abs sin cos tanh erf floor ceil round trunc
 *   sigmoid relu log1p expm1 (one argument), min(a,b) max(a,b) pow(a,b),
 *   where(c,a,b) clamp(x,lo,hi). Function names and and/or/not are reserved.
 * Numbers: decimal or 0x hex integers up to 9223372036854775807; floats with a
 *   '.' or an exponent (1.5, .5, 5., 2e-3), independent of the C locale.
 * Names: [A-Za-z_][A-Za-z0-9_]*.
 *
 * Typing (checked when the node is built): all inputs share one dtype, float or
 * integer (not bool), which is the dtype of every operation and of the result;
 * f16/bf16 compute in f32 and round once on store. Integer literals wrap modulo
 * 2^bits in integer formulas (like a NumPy cast: 300 in u8 is 44) and round once
 * in float ones; float literals, '/' and the float-only functions (exp log sqrt
 * rsqrt sin cos tanh erf sigmoid log1p expm1) are refused on integer dtypes,
 * bitwise operators and shifts on float dtypes.
 * Semantics follow Python / NumPy: // floors and % takes the divisor's sign
 * (integers: x // 0 = x % 0 = 0, wraparound on overflow), '/' is true division,
 * ** is pow, >> is arithmetic, comparisons and and/or/not give 1 or 0 in the
 * formula's dtype (nonzero, NaN included, is true), min/max/clamp propagate NaN,
 * round() rounds half to even. f32 exp is the library's own vectorized
 * polynomial (within 0.98 ulp); the full contract is goblin_op_get_info(FORMULA). */
#ifndef GOBLIN_FORMULA_H
#define GOBLIN_FORMULA_H

#include "api.h"
#include "error.h"

GOBLIN_BEGIN_DECLS

#define GOBLIN_FORMULA_MAX_TEXT 4096  /* bytes of source text */
#define GOBLIN_FORMULA_MAX_NODES 256  /* tree nodes */
#define GOBLIN_FORMULA_MAX_VARS 16    /* distinct variables */

typedef struct goblin_formula goblin_formula;

/** Parse @p text (borrowed, NUL-terminated). On success *out owns a new formula;
 *  on failure *out is untouched and @p err (may be NULL) says where and why: err->position the byte
 *  offset (-1 if not positional) and err->message, e.g. position 12, "expected ')', found end of formula at 12".
 *  GOBLIN_ESYNTAX on a syntax error; GOBLIN_ELIMIT past the limits above or
 *  parentheses/unary operators nested more than 64 deep (position -1 for the text
 *  length); GOBLIN_EINVAL if text or out is NULL or the formula has no variable
 *  (a FORMULA node takes its shape from its inputs); GOBLIN_ENOMEM.
 *  Thread-safe (no shared state). */
GOBLIN_API goblin_err goblin_formula_parse(const char *text, goblin_formula **out,
                                           goblin_errbuf *err);
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
