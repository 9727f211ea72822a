/* libgoblin/backends/ref/formula_eval.h - the CPU evaluator of FORMULA programs,
 * used by the reference and BLIS backends (internal). */
#ifndef GOBLIN__FORMULA_EVAL_H
#define GOBLIN__FORMULA_EVAL_H

#include "backends/backend.h"
#include "core/formula_prog.h"

/* Runs fn(arg, i) for i in [0, n) on up to @p threads threads (goblin__parallel_for). */
typedef void (*goblin__formula_par_fn)(int32_t threads, int64_t n, void (*fn)(void *arg, int64_t i),
                                       void *arg);

/* Evaluate FORMULA @p node into @p out (contiguous, node's dtype and shape) from
 * @p in (any strides, broadcasting). The program is validated again first (it is
 * cheap, and kernels must never trust a payload). One fused pass: the output is cut
 * into blocks of GOBLIN__FORMULA_BLOCK elements, each instruction runs one loop over
 * the block, nothing full-size is allocated. With @p par and @p threads > 1 blocks
 * are spread over threads; the result bits do not depend on @p threads. */
goblin_err goblin__formula_eval(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out, int32_t threads,
                                goblin__formula_par_fn par);

#define GOBLIN__FORMULA_BLOCK 512

/* The f32 exp FORMULA uses (formula_eval.c): vectorizable and branch-free,
 * identical bits on every x86-64 CPU. Measured over all 2^32 inputs against
 * exp in double: at most 0.98 ulp (subnormal results included); exp(+inf) = inf,
 * exp(-inf) = 0, NaN gives NaN, overflow inf, underflow 0. Exposed for tests. */
float goblin__expf_vec(float x);

#endif
