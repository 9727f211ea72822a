/* libgoblin/ops/nn.h - geometry of the nn ops (matmul, conv2d, pooling).
 *
 * Shape inference (ops_nn.c) and every backend's kernels read attributes,
 * defaults and output-size formulas through these helpers, so a backend can
 * never disagree with the graph about what a node means. */
#ifndef GOBLIN__OPS_NN_H
#define GOBLIN__OPS_NN_H

#include "op_def.h"

/* MATMUL on actual tensors (any strides): out[b] = alpha * op(a)[b] @ op(b)[b] + beta * c[b],
 * op(a)[b] is m x k, op(b)[b] is k x n. Strides are in elements; a stride of 0 means
 * broadcast (or a dim of size 1 removed, for 1-D operands). */
typedef struct goblin__mm_geom {
    int64_t m, n, k;
    int32_t batch_rank;
    int64_t batch_shape[GOBLIN_MAX_RANK];
    int64_t batch;                                   /* product of batch_shape */
    int64_t a_bs[GOBLIN_MAX_RANK], b_bs[GOBLIN_MAX_RANK];
    int64_t c_bs[GOBLIN_MAX_RANK], o_bs[GOBLIN_MAX_RANK];
    int64_t a_rs, a_cs, b_rs, b_cs, c_rs, c_cs, o_rs, o_cs;
    bool has_c;     /* c given and beta != 0 (beta == 0 ignores c, NaN included) */
    double alpha, beta;
} goblin__mm_geom;

/* Fill @p g for a MATMUL node from its input tensors and (contiguous or not) output. The
 * node was validated by inference, so this cannot fail. */
void goblin__mm_geom_init(const goblin__node *node, const goblin_tensor *in, int32_t n_in,
                          const goblin_tensor *out, goblin__mm_geom *g);

/* CONV2D: x [n, c, h, w], w [o, c / groups, kh, kw] -> [n, o, oh, ow]. */
typedef struct goblin__conv_geom {
    int64_t n, c, h, w;
    int64_t o, kh, kw, groups;
    int64_t sh, sw, ph, pw, dh, dw;
    int64_t oh, ow;
} goblin__conv_geom;

/* Read CONV2D's attributes (defaults: stride 1, padding 0, dilation 1, groups 1) and
 * compute the output size for input shape @p x and weight shape @p w (both rank 4).
 * GOBLIN_ESHAPE / GOBLIN_EINVAL with a message if they do not fit together. */
goblin_err goblin__conv_geom_get(const goblin__node *node, const int64_t *x, const int64_t *w,
                                 goblin__conv_geom *g, char *msg, size_t cap);

/* MAX_POOL2D / AVG_POOL2D / ADAPTIVE_AVG_POOL2D over the last two dims of a rank 3 or
 * 4 input; every leading element is an independent plane. */
typedef struct goblin__pool_geom {
    int64_t planes, h, w;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t oh, ow;
    bool ceil_mode, count_include_pad;
} goblin__pool_geom;

/* Read a pooling node's attributes and compute the output size (torch's formula
 * and ceil_mode rule). For ADAPTIVE_AVG_POOL2D only planes, h, w, oh, ow are set. */
goblin_err goblin__pool_geom_get(const goblin__node *node, int32_t rank, const int64_t *shape,
                                 goblin__pool_geom *g, char *msg, size_t cap);

/* Adaptive pooling window [*start, *end) of output index @p i (torch's
 * floor(i * in / out) .. ceil((i + 1) * in / out)). */
static inline void goblin__adaptive_window(int64_t i, int64_t in, int64_t out, int64_t *start,
                                           int64_t *end) {
    /* 128-bit products: i * in can pass 2^63 for legal (2^40-sized) dims. */
    *start = (int64_t)(((unsigned __int128)i * (unsigned __int128)in) / (unsigned __int128)out);
    *end = (int64_t)(((unsigned __int128)(i + 1) * (unsigned __int128)in + (unsigned __int128)out -
                      1) / (unsigned __int128)out);
}

/* SDPA's default scale when the attribute is absent: 1/sqrt(E), or 1 when E == 0. */
double goblin__sdpa_scale(const goblin__node *node, int64_t e);

#endif
