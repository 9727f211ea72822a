/* libgoblin/backends/blis/blis_formula.c - FORMULA on the CPU backend: the
 * shared evaluator (formula_eval.c) with its blocks spread over threads. Each
 * element is computed by the same code as on the reference backend, so the
 * result does not depend on the thread count. */
#include "blis_impl.h"
#include "backends/ref/formula_eval.h"

static goblin_err blis_formula(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    int32_t threads = k->threads;
    if (threads <= 0 && k->backend) threads = ((const goblin__blis_ctx *)k->backend)->threads;
    if (threads <= 0) threads = 1;
    return goblin__formula_eval(k, node, in, n_in, out, threads, goblin__parallel_for);
}

void goblin__blis_register_formula(goblin__kernel_fn *t) { goblin__blis_set(t, GOBLIN_OP_FORMULA, blis_formula); }
