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

/* The kernel table: one kernel per op. Each file, named by op family, fills the ops
 * it computes with goblin__blis_set, in any order: an op set twice is a bug, counted
 * by goblin__blis_kernel_table (the unit tests check that none is). A kernel that
 * falls back to a simpler path calls that path by name, never through the table. */
void goblin__blis_set(goblin__kernel_fn *t, goblin_op op, goblin__kernel_fn fn);
void goblin__blis_register_gemm(goblin__kernel_fn *t);        /* blis_gemm.c: MATMUL, CONV2D */
void goblin__blis_register_conv(goblin__kernel_fn *t);        /* blis_conv.c: conv backward */
void goblin__blis_register_attention(goblin__kernel_fn *t);   /* blis_attention.c: SDPA */
void goblin__blis_register_elementwise(goblin__kernel_fn *t); /* blis_elementwise.c */
void goblin__blis_register_broadcast(goblin__kernel_fn *t);   /* blis_broadcast.c: ADD SUB MUL DIV */
void goblin__blis_register_unary(goblin__kernel_fn *t);       /* blis_unary.c: EXP ERF GELU RELU (+bwd) */
void goblin__blis_register_reduce(goblin__kernel_fn *t);      /* blis_reduce.c: sums, LAYER_NORM */
void goblin__blis_register_softmax(goblin__kernel_fn *t);     /* blis_softmax.c */
void goblin__blis_register_norm(goblin__kernel_fn *t);        /* blis_norm.c: batch norm, LN backward */
void goblin__blis_register_pool(goblin__kernel_fn *t);        /* blis_pool.c */
void goblin__blis_register_copy(goblin__kernel_fn *t);        /* blis_copy.c: movement, embedding bwd */
void goblin__blis_register_formula(goblin__kernel_fn *t);     /* blis_formula.c */
/* blis_threaded.c, after all the others: every remaining elementwise op runs the
 * reference kernel on slices in parallel. */
void goblin__blis_register_threaded(goblin__kernel_fn *t);
/* Build the table into @p t (GOBLIN_OP_COUNT entries, zeroed by the caller), the
 * families registered in list order or, with @p reverse, in reverse order (the
 * result must be the same); returns the number of ops set twice. */
int goblin__blis_kernel_table(goblin__kernel_fn *t, bool reverse);

/* Kernels other families call by name. */
goblin_err goblin__blis_add(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out); /* contiguous same-shape fast paths */
goblin_err goblin__blis_sub(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out);
goblin_err goblin__blis_mul(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out);
goblin_err goblin__blis_div(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out);
/* SOFTMAX / LOG_SOFTMAX rows over the last axis (blis_reduce.c). */
goblin_err goblin__blis_softmax_last_axis(goblin__kctx *k, const goblin__node *node,
                                          const goblin_tensor *in, int32_t n_in, goblin_tensor *out);
/* The reference kernel on slices in parallel where the op allows it, else
 * GOBLIN_ENOTSUP (the executor then runs the reference kernel). blis_threaded.c */
goblin_err goblin__blis_elementwise_fallback(goblin__kctx *k, const goblin__node *node,
                                             const goblin_tensor *in, int32_t n_in, goblin_tensor *out);

/* BLIS calls shared by the product kernels (blis_gemm.c). */
typedef struct rntm_s rntm_t;
bool goblin__blis_small_gemm(int64_t m, int64_t n, int64_t k);
void goblin__blis_rntm_for(rntm_t *r, bool small, int32_t threads);
void goblin__blis_fix_strides(int64_t rows, int64_t cols, int64_t *rs, int64_t *cs);
void goblin__blis_gemm_strided(goblin_dtype dt, int32_t threads, int64_t m, int64_t n, int64_t k, double alpha,
                               const void *a, int64_t rsa, int64_t csa, const void *b, int64_t rsb, int64_t csb,
                               double beta, void *c, int64_t rsc, int64_t csc);
void goblin__blis_gemm_sup1(goblin_dtype dt, int64_t m, int64_t n, int64_t k, const void *a, int64_t rsa,
                            int64_t csa, const void *b, int64_t rsb, int64_t csb, double beta, void *c,
                            int64_t rsc, int64_t csc);

static inline bool goblin__blis_f32_or_f64(goblin_dtype dt) {
    return dt == GOBLIN_DTYPE_F32 || dt == GOBLIN_DTYPE_F64;
}
/* Every input of @p out's dtype and contiguous, and @p out contiguous. */
static inline bool goblin__blis_all_contiguous(const goblin_tensor *in, int32_t n_in, const goblin_tensor *out) {
    for (int32_t i = 0; i < n_in; i++)
        if (in[i].dtype != out->dtype || !goblin_tensor_is_contiguous(&in[i])) return false;
    return goblin_tensor_is_contiguous(out);
}
/* Threads for @p work elements in @p items independent pieces: one below 32768 elements. */
static inline int32_t goblin__blis_threads_for(const goblin__kctx *k, int64_t work, int64_t items) {
    int32_t t = k->threads > 0 ? k->threads : 1;
    if (work < 32768) t = 1;
    if (items < t) t = items > 0 ? (int32_t)items : 1;
    return t;
}

/* blis_norm.c: layer-norm statistics kept for the other nodes of a run (the forward's
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
