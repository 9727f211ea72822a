/* libgoblin/backends/blis/blis_impl.h - internal interface of the CPU (BLIS) backend.
 *
 * The backend is a kernel table like the reference backend's; each blis_<group>.c
 * fills the ops it accelerates. A kernel may return GOBLIN_ENOTSUP for a case it
 * does not handle (a dtype, an attribute combination): the executor then runs the
 * reference kernel for that node and counts a fallback.
 *
 * Kernels must be deterministic: the same bits for the same input whatever
 * k->threads is (fixed partition of reductions, fixed combine order). */
#ifndef GOBLIN__BLIS_IMPL_H
#define GOBLIN__BLIS_IMPL_H

#include "backends/kernel_util.h"

typedef struct goblin__blis_ctx {
    int32_t threads;
} goblin__blis_ctx;

void goblin__blis_register_gemm(goblin__kernel_fn *t);        /* blis_gemm.c: matmul, conv2d */
void goblin__blis_register_elementwise(goblin__kernel_fn *t); /* blis_elementwise.c */
void goblin__blis_register_reduce(goblin__kernel_fn *t);      /* blis_reduce.c */
void goblin__blis_register_formula(goblin__kernel_fn *t);     /* blis_formula.c */
void goblin__blis_register_train(goblin__kernel_fn *t);       /* blis_train.c: conv/attention backward */
/* blis_train2.c: batch norm, max pooling, embedding backward, copies */
void goblin__blis_register_train2(goblin__kernel_fn *t);
/* blis_threaded.c: called last; fills the remaining elementwise ops with the
 * reference kernels run on slices in parallel. */
void goblin__blis_register_threaded(goblin__kernel_fn *t);
/* blis_train3.c: called after blis_threaded.c (chains to the kernels it replaces):
 * broadcast add/sub/mul/div, exp, f32 erf/gelu, softmax over a non-last axis */
void goblin__blis_register_train3(goblin__kernel_fn *t);

/* blis_train3.c: layer-norm statistics kept for the other nodes of a run (the forward's
 * for the backward), keyed by the run, the id and buffer of x and the shapes: add
 * returns room for mu of every row then rs (the dtype's elements; NULL: none kept), to
 * be filled and then committed. */
void *goblin__blis_ln_stats_add(uint64_t run, int32_t xid, const void *x, int64_t rows, int64_t len,
                                double eps, bool f64, int *slot);
void goblin__blis_ln_stats_commit(int slot);

/* Run fn(arg, i) for i in [0, n) on up to @p threads threads (OpenMP when built
 * with it, else serially). Work items must be independent. */
void goblin__parallel_for(int32_t threads, int64_t n, void (*fn)(void *arg, int64_t i), void *arg);

/* im2col for a stride-1 convolution whose output width equals the input width (3x3 /
 * pad 1), over all output rows: col[(c, i, j), (oh, ow)] for @p cg channels of @p x, col
 * rows @p ld apart. False (nothing written) for any other geometry or row range
 * [oh0, oh1) other than all rows: the caller uses its general loop (blis_gemm.c; used by
 * conv2d forward and its weight gradient). */
struct goblin__conv_geom;
bool goblin__im2col_same_f32(const struct goblin__conv_geom *g, int64_t cg, const float *x, float *col,
                             int64_t oh0, int64_t oh1, int64_t ld);
bool goblin__im2col_same_f64(const struct goblin__conv_geom *g, int64_t cg, const double *x, double *col,
                             int64_t oh0, int64_t oh1, int64_t ld);
#define im2col_same_f32 goblin__im2col_same_f32
#define im2col_same_f64 goblin__im2col_same_f64
/* col[(c, i, j), (oh - oh0, ow)] = x[c, oh*sh - ph + i*dh, ow*sw - pw + j*dw] for oh in
 * [oh0, oh1), 0 outside the image, col rows @p ld apart; the same-width path when it
 * applies (blis_gemm.c; conv2d forward and its weight gradient). */
void goblin__im2col_f32(const struct goblin__conv_geom *g, int64_t cg, const float *x, float *col, int64_t oh0,
                        int64_t oh1, int64_t ld);
void goblin__im2col_f64(const struct goblin__conv_geom *g, int64_t cg, const double *x, double *col, int64_t oh0,
                        int64_t oh1, int64_t ld);
#define im2col_f32 goblin__im2col_f32
#define im2col_f64 goblin__im2col_f64

#endif
