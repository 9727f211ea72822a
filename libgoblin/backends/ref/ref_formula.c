/* libgoblin/backends/ref/ref_formula.c - reference kernel: FORMULA.
 *
 * The evaluator (formula_eval.c) is already a plain loop per instruction over
 * blocks; the reference backend runs it on one thread. The BLIS backend runs the
 * very same code over several threads, so the two agree bit for bit. */
#include "formula_eval.h"

static goblin_err ref_formula(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    return goblin__formula_eval(k, node, in, n_in, out, 1, NULL);
}

void goblin__ref_register_formula(goblin__kernel_fn *t) { t[GOBLIN_OP_FORMULA] = ref_formula; }
