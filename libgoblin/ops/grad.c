/* libgoblin/ops/grad.c - op definitions of the fused backward ops (200+).
 *
 * These are the ops goblin_graph_backward (autodiff.c) appends where composing
 * the gradient from forward ops would be slow or awkward (convolution, pooling,
 * batch norm statistics, losses, embedding scatter). Ops that only need the
 * forward input's shape (not its values) take it as the SHAPE attribute, so a
 * distributed plan does not ship a tensor just for its dims. */
#include <float.h>
#include <math.h>
#include <string.h>
#include "op_def.h"
#include "nn.h"

#define MAXDIM ((double)GOBLIN_MAX_DIM)
#define I64_MIN_D (-9.2233720368547758e18)
#define I64_MAX_D (9.2233720368547758e18)

static double gam(double n, double u) {
    double nu = n * u;
    return nu < 1 ? nu / (1 - nu) : HUGE_VAL;
}

/* Sums of k products (conv, pooling, embedding, batch norm): gamma_(k+2)
 * relative to the sum of |terms|. */
static void contract_sum(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    *rel = gam((double)k + 2, goblin__unit_roundoff(dt));
    *abs_tol = 0;
}

/* Batch norm and losses recompute statistics (mean, variance or log-sum-exp)
 * before the gradient; as their forward contracts. */
static void contract_stats(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    double g = gam(2.0 * (double)k + 16, goblin__unit_roundoff(dt));
    *rel = g;
    *abs_tol = g;
}

static goblin_err need_float(goblin__infer *c, int32_t i, const char *what) {
    if (!goblin_dtype_is_float(c->in[i]->dtype))
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                            "%s must be a float dtype, got %s; insert a cast", what,
                            goblin_dtype_name(c->in[i]->dtype));
    return GOBLIN_OK;
}

static goblin_err need_same(goblin__infer *c, int32_t i, const char *what) {
    if (c->in[i]->dtype != c->in[0]->dtype)
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                            "%s has dtype %s but grad_out is %s; insert a cast", what,
                            goblin_dtype_name(c->in[i]->dtype), goblin_dtype_name(c->in[0]->dtype));
    return GOBLIN_OK;
}

static goblin_err need_index(goblin__infer *c, int32_t i, const char *what) {
    goblin_dtype dt = c->in[i]->dtype;
    if (dt != GOBLIN_DTYPE_I64 && dt != GOBLIN_DTYPE_I32)
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE, "%s must be i32 or i64, got %s", what,
                            goblin_dtype_name(dt));
    return GOBLIN_OK;
}

static bool same_shape(int32_t ra, const int64_t *a, int32_t rb, const int64_t *b) {
    if (ra != rb) return false;
    for (int32_t d = 0; d < ra; d++)
        if (a[d] != b[d]) return false;
    return true;
}

static goblin_err shape_mismatch(goblin__infer *c, const char *what, int32_t rw, const int64_t *want,
                                 int32_t rg, const int64_t *got) {
    char a[160], b[160];
    return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "%s must have shape %s, got %s", what,
                        goblin__shape_str(rw, want, a, sizeof a), goblin__shape_str(rg, got, b, sizeof b));
}

/* The SHAPE attribute (the forward input's shape), checked for rank @p want_rank
 * (-1: any rank) and non-negative dims. */
static goblin_err shape_attr(goblin__infer *c, int32_t want_rank, int32_t *rank, int64_t *shape) {
    int32_t n;
    const int64_t *s = goblin__attr_ints(c->node, GOBLIN_ATTR_SHAPE, &n);
    if (!s) return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL, "needs the attribute 'shape'");
    if (n > GOBLIN_MAX_RANK || (want_rank >= 0 && n != want_rank))
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "shape must have %d dims, got %d",
                            want_rank >= 0 ? want_rank : GOBLIN_MAX_RANK, (int)n);
    for (int32_t d = 0; d < n; d++) {
        if (s[d] < 0)
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "shape[%d] is negative", (int)d);
        shape[d] = s[d];
    }
    *rank = n;
    int64_t numel;
    if (goblin__shape_numel(n, shape, &numel))
        return goblin__errf(c->msg, c->cap, GOBLIN_ELIMIT, "shape has too many elements");
    return GOBLIN_OK;
}

static void set_out(goblin__infer *c, goblin_dtype dt, int32_t rank, const int64_t *shape) {
    c->node->dtype = dt;
    c->node->rank = rank;
    for (int32_t d = 0; d < rank; d++) c->node->shape[d] = shape[d];
}

/* CONV2D_BACKWARD_INPUT (grad_out, weight; shape = x's) and
 * CONV2D_BACKWARD_WEIGHT (grad_out, x; shape = weight's). */
static goblin_err infer_conv_bwd(goblin__infer *c) {
    goblin_err e;
    bool wgrad = c->node->op == GOBLIN_OP_CONV2D_BACKWARD_WEIGHT;
    if ((e = need_float(c, 0, "grad_out")) || (e = need_same(c, 1, wgrad ? "x" : "weight")))
        return e;
    int32_t rank;
    int64_t s[GOBLIN_MAX_RANK];
    if ((e = shape_attr(c, 4, &rank, s))) return e;
    const goblin__node *go = c->in[0], *other = c->in[1];
    if (go->rank != 4 || other->rank != 4)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "grad_out and %s must be rank 4",
                            wgrad ? "x" : "weight");
    goblin__conv_geom g;
    const int64_t *xs = wgrad ? other->shape : s, *ws = wgrad ? s : other->shape;
    if ((e = goblin__conv_geom_get(c->node, xs, ws, &g, c->msg, c->cap))) return e;
    int64_t want[4] = {g.n, g.o, g.oh, g.ow};
    if (!same_shape(4, want, go->rank, go->shape))
        return shape_mismatch(c, "grad_out", 4, want, go->rank, go->shape);
    set_out(c, go->dtype, 4, s);
    return GOBLIN_OK;
}

/* MAX_POOL2D_BACKWARD (grad_out, x): the gradient goes to each window's
 * first maximum. AVG_POOL2D_BACKWARD (grad_out; shape = x's). */
static goblin_err infer_pool_bwd(goblin__infer *c) {
    goblin_err e;
    if ((e = need_float(c, 0, "grad_out"))) return e;
    int32_t rank;
    int64_t s[GOBLIN_MAX_RANK];
    if (c->node->op == GOBLIN_OP_MAX_POOL2D_BACKWARD) {
        if ((e = need_same(c, 1, "x"))) return e;
        rank = c->in[1]->rank;
        memcpy(s, c->in[1]->shape, sizeof(int64_t) * (size_t)rank);
    } else if ((e = shape_attr(c, -1, &rank, s))) {
        return e;
    }
    goblin__pool_geom g;
    if ((e = goblin__pool_geom_get(c->node, rank, s, &g, c->msg, c->cap))) return e;
    int64_t want[GOBLIN_MAX_RANK];
    memcpy(want, s, sizeof(int64_t) * (size_t)rank);
    want[rank - 2] = g.oh;
    want[rank - 1] = g.ow;
    if (!same_shape(rank, want, c->in[0]->rank, c->in[0]->shape))
        return shape_mismatch(c, "grad_out", rank, want, c->in[0]->rank, c->in[0]->shape);
    set_out(c, c->in[0]->dtype, rank, s);
    return GOBLIN_OK;
}

/* ADAPTIVE_AVG_POOL2D_BACKWARD (grad_out [.., oh, ow]; shape = x's [.., h, w]). */
static goblin_err infer_adaptive_bwd(goblin__infer *c) {
    goblin_err e;
    if ((e = need_float(c, 0, "grad_out"))) return e;
    int32_t rank;
    int64_t s[GOBLIN_MAX_RANK];
    if ((e = shape_attr(c, -1, &rank, s))) return e;
    const goblin__node *go = c->in[0];
    if (rank != 3 && rank != 4)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "shape must be [C, H, W] or [N, C, H, W]");
    if (s[rank - 2] < 1 || s[rank - 1] < 1)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "pooling needs non-empty H and W");
    bool ok = go->rank == rank;
    for (int32_t d = 0; ok && d < rank - 2; d++) ok = go->shape[d] == s[d];
    if (!ok) {
        char a[160], b[160];
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                            "grad_out %s does not match the input shape %s outside the last two dims",
                            goblin__shape_str(go->rank, go->shape, a, sizeof a),
                            goblin__shape_str(rank, s, b, sizeof b));
    }
    set_out(c, go->dtype, rank, s);
    return GOBLIN_OK;
}

/* BATCH_NORM_BACKWARD (grad_out, x, weight, running_mean, running_var): index 0
 * gives d x, 1 d weight, 2 d bias. */
static goblin_err infer_bn_bwd(goblin__infer *c) {
    goblin_err e;
    if ((e = need_float(c, 0, "grad_out"))) return e;
    static const char *const names[] = {"", "x", "weight", "running_mean", "running_var"};
    for (int32_t i = 1; i < 5; i++)
        if ((e = need_same(c, i, names[i]))) return e;
    const goblin__node *go = c->in[0], *x = c->in[1];
    if (x->rank < 2)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "x must be [N, C, ...] (rank >= 2)");
    if (!same_shape(x->rank, x->shape, go->rank, go->shape))
        return shape_mismatch(c, "grad_out", x->rank, x->shape, go->rank, go->shape);
    for (int32_t i = 2; i < 5; i++)
        if (!same_shape(1, &x->shape[1], c->in[i]->rank, c->in[i]->shape))
            return shape_mismatch(c, names[i], 1, &x->shape[1], c->in[i]->rank, c->in[i]->shape);
    if (goblin__attr_i(c->node, GOBLIN_ATTR_INDEX, 0) == 0) set_out(c, x->dtype, x->rank, x->shape);
    else set_out(c, x->dtype, 1, &x->shape[1]);
    return GOBLIN_OK;
}

/* Target shape for a loss input of shape s: s without the class dim. */
static goblin_err loss_shapes(goblin__infer *c, int32_t rank, const int64_t *s, int32_t t_in,
                              int32_t w_in) {
    goblin_err e;
    if (rank < 1) return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "input must be [C] or [N, C, ...]");
    if ((e = need_index(c, t_in, "target"))) return e;
    int64_t ts[GOBLIN_MAX_RANK];
    int32_t tr = 0, cdim = rank == 1 ? 0 : 1;
    for (int32_t d = 0; d < rank; d++)
        if (d != cdim) ts[tr++] = s[d];
    const goblin__node *t = c->in[t_in];
    if (!same_shape(tr, ts, t->rank, t->shape)) return shape_mismatch(c, "target", tr, ts, t->rank, t->shape);
    if (w_in < c->n_in) {
        if ((e = need_same(c, w_in, "weight"))) return e;
        if (!same_shape(1, &s[cdim], c->in[w_in]->rank, c->in[w_in]->shape))
            return shape_mismatch(c, "weight", 1, &s[cdim], c->in[w_in]->rank, c->in[w_in]->shape);
    }
    const goblin__node *go = c->in[0];
    int64_t red = goblin__attr_i(c->node, GOBLIN_ATTR_REDUCTION, GOBLIN_REDUCTION_MEAN);
    if (red == GOBLIN_REDUCTION_NONE ? !same_shape(tr, ts, go->rank, go->shape) : go->rank != 0)
        return red == GOBLIN_REDUCTION_NONE ? shape_mismatch(c, "grad_out", tr, ts, go->rank, go->shape)
                                            : shape_mismatch(c, "grad_out", 0, NULL, go->rank, go->shape);
    set_out(c, go->dtype, rank, s);
    return GOBLIN_OK;
}

/* NLL_LOSS_BACKWARD (grad_out, target[, weight]; shape = log_probs'). */
static goblin_err infer_nll_bwd(goblin__infer *c) {
    goblin_err e;
    if ((e = need_float(c, 0, "grad_out"))) return e;
    int32_t rank;
    int64_t s[GOBLIN_MAX_RANK];
    if ((e = shape_attr(c, -1, &rank, s))) return e;
    return loss_shapes(c, rank, s, 1, 2);
}

/* CROSS_ENTROPY_BACKWARD (grad_out, logits, target[, weight]). */
static goblin_err infer_ce_bwd(goblin__infer *c) {
    goblin_err e;
    if ((e = need_float(c, 0, "grad_out")) || (e = need_same(c, 1, "logits"))) return e;
    return loss_shapes(c, c->in[1]->rank, c->in[1]->shape, 2, 3);
}

/* EMBEDDING_BACKWARD (grad_out [..., D], indices [...]; shape = weight's [V, D]). */
static goblin_err infer_emb_bwd(goblin__infer *c) {
    goblin_err e;
    if ((e = need_float(c, 0, "grad_out")) || (e = need_index(c, 1, "indices"))) return e;
    int32_t rank;
    int64_t s[GOBLIN_MAX_RANK];
    if ((e = shape_attr(c, 2, &rank, s))) return e;
    const goblin__node *go = c->in[0], *idx = c->in[1];
    int64_t want[GOBLIN_MAX_RANK];
    if (idx->rank + 1 > GOBLIN_MAX_RANK)
        return goblin__errf(c->msg, c->cap, GOBLIN_ELIMIT, "indices rank too large");
    memcpy(want, idx->shape, sizeof(int64_t) * (size_t)idx->rank);
    want[idx->rank] = s[1];
    if (!same_shape(idx->rank + 1, want, go->rank, go->shape))
        return shape_mismatch(c, "grad_out", idx->rank + 1, want, go->rank, go->shape);
    set_out(c, go->dtype, 2, s);
    return GOBLIN_OK;
}

/* SDPA_BACKWARD (grad_out, q, k, v[, mask]): index 0 gives d q, 1 d k, 2 d v, each
 * over the output's full batch shape (autodiff sums broadcast batch dims). The
 * forward's own inference validates q, k, v, mask and the attributes. */
static goblin_err infer_sdpa_bwd(goblin__infer *c) {
    goblin_err e;
    if ((e = need_float(c, 0, "grad_out"))) return e;
    const goblin__op_def *fd = goblin__op_def_get(GOBLIN_OP_SDPA);
    goblin__node fwd = *c->node;
    fwd.op = GOBLIN_OP_SDPA;
    goblin__infer sub = {.node = &fwd, .in = c->in + 1, .n_in = c->n_in - 1, .msg = c->msg, .cap = c->cap};
    if ((e = fd->infer(&sub))) return e;
    if ((e = need_same(c, 1, "q"))) return e;
    const goblin__node *go = c->in[0];
    if (!same_shape(fwd.rank, fwd.shape, go->rank, go->shape))
        return shape_mismatch(c, "grad_out", fwd.rank, fwd.shape, go->rank, go->shape);
    int64_t which = goblin__attr_i(c->node, GOBLIN_ATTR_INDEX, 0);
    const goblin__node *src = c->in[1 + which];
    int64_t s[GOBLIN_MAX_RANK];
    memcpy(s, fwd.shape, sizeof s);
    s[fwd.rank - 2] = src->shape[src->rank - 2];
    s[fwd.rank - 1] = src->shape[src->rank - 1];
    set_out(c, go->dtype, fwd.rank, s);
    return GOBLIN_OK;
}

/* LAYER_NORM_BACKWARD (grad_out, x[, weight]) over the last norm_ndim dims: index 0
 * gives d x (x's shape), 1 d weight (the normalized dims' shape). */
static goblin_err infer_ln_bwd(goblin__infer *c) {
    goblin_err e;
    if ((e = need_float(c, 0, "grad_out")) || (e = need_same(c, 1, "x"))) return e;
    const goblin__node *go = c->in[0], *x = c->in[1];
    int64_t nd = goblin__attr_i(c->node, GOBLIN_ATTR_NORM_NDIM, 1);
    if (nd < 1 || nd > x->rank)
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE,
                            "norm_ndim %lld must be between 1 and the rank of x (%d)", (long long)nd,
                            (int)x->rank);
    if (!same_shape(x->rank, x->shape, go->rank, go->shape))
        return shape_mismatch(c, "grad_out", x->rank, x->shape, go->rank, go->shape);
    const int64_t *tail = &x->shape[x->rank - nd];
    if (c->n_in > 2) {
        if ((e = need_same(c, 2, "weight"))) return e;
        if (!same_shape((int32_t)nd, tail, c->in[2]->rank, c->in[2]->shape))
            return shape_mismatch(c, "weight", (int32_t)nd, tail, c->in[2]->rank, c->in[2]->shape);
    }
    if (goblin__attr_i(c->node, GOBLIN_ATTR_INDEX, 0) == 0) set_out(c, x->dtype, x->rank, x->shape);
    else set_out(c, x->dtype, (int32_t)nd, tail);
    return GOBLIN_OK;
}

/* GELU_BACKWARD (grad_out, x): grad_out * gelu'(x), both of one shape. */
static goblin_err infer_gelu_bwd(goblin__infer *c) {
    goblin_err e;
    if ((e = need_float(c, 0, "grad_out")) || (e = need_same(c, 1, "x"))) return e;
    const goblin__node *go = c->in[0], *x = c->in[1];
    if (!same_shape(x->rank, x->shape, go->rank, go->shape))
        return shape_mismatch(c, "grad_out", x->rank, x->shape, go->rank, go->shape);
    set_out(c, x->dtype, x->rank, x->shape);
    return GOBLIN_OK;
}

/* RELU_BACKWARD (grad_out, x): grad_out where x > 0, else +0; both of one shape. */
static goblin_err infer_relu_bwd(goblin__infer *c) {
    goblin_err e;
    if ((e = need_float(c, 0, "grad_out")) || (e = need_same(c, 1, "x"))) return e;
    const goblin__node *go = c->in[0], *x = c->in[1];
    if (!same_shape(x->rank, x->shape, go->rank, go->shape))
        return shape_mismatch(c, "grad_out", x->rank, x->shape, go->rank, go->shape);
    set_out(c, x->dtype, x->rank, x->shape);
    return GOBLIN_OK;
}

/* gelu': Phi(x) + x phi(x) cancels near its zero (x ~ -0.75) and 1 + erf cancels for
 * x < 0, so an f32 implementation errs by a few u absolute in gelu' (times |grad_out|):
 * 16u relative + 16u absolute, the absolute part for |grad_out| <= 1. */
static void contract_gelu_bwd(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    (void)k;
    *rel = 16 * goblin__unit_roundoff(dt);
    *abs_tol = 16 * goblin__unit_roundoff(dt);
}

#define A_SHAPE(req) {GOBLIN_ATTR_SHAPE, req, 0, MAXDIM}
#define A_STRIDE {GOBLIN_ATTR_STRIDE, false, 1, MAXDIM}
#define A_PADDING {GOBLIN_ATTR_PADDING, false, 0, MAXDIM}
#define A_DILATION {GOBLIN_ATTR_DILATION, false, 1, MAXDIM}
#define A_REDUCTION {GOBLIN_ATTR_REDUCTION, false, GOBLIN_REDUCTION_NONE, GOBLIN_REDUCTION_SUM}
#define A_IGNORE {GOBLIN_ATTR_IGNORE_INDEX, false, I64_MIN_D, I64_MAX_D}

static const char SUM_TEXT[] =
    "|y - exact| <= gamma_(k+2) * sum|terms|, k the number of products summed into an element";
static const char STATS_TEXT[] =
    "|y - exact| <= gamma_(2k+16) * (sum|terms| + 1), k the values per channel / classes per target";

void goblin__ops_register_grad(goblin__op_def *t) {
    const uint32_t fl = GOBLIN_DTMASK_FLOAT;
    t[GOBLIN_OP_CONV2D_BACKWARD_INPUT] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "d conv2d / d x: (grad_out [N, O, OH, OW], weight) -> x shape given by 'shape'",
        .semantics = "float dtypes; attributes as conv2d's; transposed convolution of grad_out",
        .contract_text = SUM_TEXT, .min_inputs = 2, .max_inputs = 2, .dtypes = fl,
        .n_attrs = 5,
        .attrs = {A_SHAPE(true), A_STRIDE, A_PADDING, A_DILATION, {GOBLIN_ATTR_GROUPS, false, 1, MAXDIM}},
        .infer = infer_conv_bwd, .contract = contract_sum};
    t[GOBLIN_OP_CONV2D_BACKWARD_WEIGHT] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "d conv2d / d weight: (grad_out, x) -> weight shape given by 'shape'",
        .semantics = "float dtypes; attributes as conv2d's; sums over batch and output positions",
        .contract_text = SUM_TEXT, .min_inputs = 2, .max_inputs = 2, .dtypes = fl,
        .n_attrs = 5,
        .attrs = {A_SHAPE(true), A_STRIDE, A_PADDING, A_DILATION, {GOBLIN_ATTR_GROUPS, false, 1, MAXDIM}},
        .infer = infer_conv_bwd, .contract = contract_sum};
    t[GOBLIN_OP_MAX_POOL2D_BACKWARD] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "d max_pool2d / d x: (grad_out, x) -> x's shape; each window's gradient goes to "
                   "its maximum",
        .semantics = "float dtypes; ties go to the first maximum in row-major window order, a NaN "
                     "counts as the maximum (first NaN), as the forward kernel picks; overlapping "
                     "windows add in output order",
        .contract_text = SUM_TEXT, .min_inputs = 2, .max_inputs = 2, .dtypes = fl,
        .n_attrs = 5,
        .attrs = {{GOBLIN_ATTR_KERNEL, true, 1, MAXDIM}, A_STRIDE, A_PADDING, A_DILATION,
                  {GOBLIN_ATTR_CEIL_MODE, false, 0, 1}},
        .infer = infer_pool_bwd, .contract = contract_sum};
    t[GOBLIN_OP_AVG_POOL2D_BACKWARD] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "d avg_pool2d / d x: (grad_out) -> x shape given by 'shape'",
        .semantics = "float dtypes; attributes as avg_pool2d's; each window spreads grad / divisor "
                     "over its in-input elements",
        .contract_text = SUM_TEXT, .min_inputs = 1, .max_inputs = 1, .dtypes = fl,
        .n_attrs = 5,
        .attrs = {A_SHAPE(true), {GOBLIN_ATTR_KERNEL, true, 1, MAXDIM}, A_STRIDE, A_PADDING,
                  {GOBLIN_ATTR_CEIL_MODE, false, 0, 1}},
        .infer = infer_pool_bwd, .contract = contract_sum};
    t[GOBLIN_OP_AVG_POOL2D_BACKWARD].attrs[5] =
        (goblin__attr_spec){GOBLIN_ATTR_COUNT_INCLUDE_PAD, false, 0, 1};
    t[GOBLIN_OP_AVG_POOL2D_BACKWARD].n_attrs = 6;
    t[GOBLIN_OP_ADAPTIVE_AVG_POOL2D_BACKWARD] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "d adaptive_avg_pool2d / d x: (grad_out [.., oh, ow]) -> x shape given by 'shape'",
        .semantics = "float dtypes; torch's adaptive windows",
        .contract_text = SUM_TEXT, .min_inputs = 1, .max_inputs = 1, .dtypes = fl,
        .n_attrs = 1, .attrs = {A_SHAPE(true)},
        .infer = infer_adaptive_bwd, .contract = contract_sum};
    t[GOBLIN_OP_BATCH_NORM_BACKWARD] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "gradients of batch_norm: (grad_out, x, weight, running_mean, running_var); index "
                   "0 gives d x, 1 d weight, 2 d bias",
        .semantics = "float dtypes; training=1 differentiates through the batch mean and biased "
                     "variance (torch's training mode), 0 treats the running statistics as "
                     "constants; eps default 1e-5",
        .contract_text = STATS_TEXT, .min_inputs = 5, .max_inputs = 5, .dtypes = fl,
        .n_attrs = 3,
        .attrs = {{GOBLIN_ATTR_TRAINING, false, 0, 1}, {GOBLIN_ATTR_EPS, false, 0, HUGE_VAL},
                  {GOBLIN_ATTR_INDEX, false, 0, 2}},
        .infer = infer_bn_bwd, .contract = contract_stats};
    t[GOBLIN_OP_NLL_LOSS_BACKWARD] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "d nll_loss / d log_probs: (grad_out, target[, weight]) -> shape given by 'shape'",
        .semantics = "as nll_loss: ignored targets get 0; mean divides by the sum of the weights of "
                     "non-ignored targets; a target outside [0, C) fails with EINDEX",
        .contract_text = STATS_TEXT, .min_inputs = 2, .max_inputs = 3, .dtypes = fl,
        .n_attrs = 3, .attrs = {A_SHAPE(true), A_REDUCTION, A_IGNORE},
        .infer = infer_nll_bwd, .contract = contract_stats};
    t[GOBLIN_OP_CROSS_ENTROPY_BACKWARD] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "d cross_entropy / d logits: (grad_out, logits, target[, weight]) -> logits' shape",
        .semantics = "as cross_entropy (label smoothing, ignore_index, weights, reduction): "
                     "softmax(x) * sum(dl) - dl per target, dl the gradient wrt log_softmax",
        .contract_text = STATS_TEXT, .min_inputs = 3, .max_inputs = 4, .dtypes = fl,
        .n_attrs = 3,
        .attrs = {A_REDUCTION, A_IGNORE, {GOBLIN_ATTR_LABEL_SMOOTHING, false, 0, 1}},
        .infer = infer_ce_bwd, .contract = contract_stats};
    t[GOBLIN_OP_EMBEDDING_BACKWARD] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "d embedding / d weight: (grad_out [..., D], indices) -> [V, D] given by 'shape'",
        .semantics = "rows of grad_out are added into the rows their indices name, in row-major order "
                     "of indices (deterministic); an index outside [0, V) fails with EINDEX",
        .contract_text = SUM_TEXT, .min_inputs = 2, .max_inputs = 2, .dtypes = fl,
        .n_attrs = 1, .attrs = {A_SHAPE(true)},
        .infer = infer_emb_bwd, .contract = contract_sum};
    t[GOBLIN_OP_SDPA_BACKWARD] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "gradients of scaled_dot_product_attention: (grad_out, q, k, v[, mask]); index "
                   "0 gives d q [batch.., L, E], 1 d k [batch.., S, E], 2 d v [batch.., S, Ev] over "
                   "the output's batch shape",
        .semantics = "recomputes the attention weights p; dv = p^T g, ds = p (g v^T - rowsum(p g "
                     "v^T)), dq = scale ds k, dk = scale ds^T q; rows with no key to attend give 0; a "
                     "NaN or +inf score row gives NaN",
        .contract_text = STATS_TEXT, .min_inputs = 4, .max_inputs = 5, .dtypes = fl,
        .n_attrs = 3,
        .attrs = {{GOBLIN_ATTR_CAUSAL, false, 0, 1}, {GOBLIN_ATTR_SCALE, false, -DBL_MAX, DBL_MAX},
                  {GOBLIN_ATTR_INDEX, false, 0, 2}},
        .infer = infer_sdpa_bwd, .contract = contract_stats};
    t[GOBLIN_OP_LAYER_NORM_BACKWARD] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "gradients of layer_norm: (grad_out, x[, weight]); index 0 gives d x, 1 d "
                   "weight (the normalized dims' shape); d bias is the sum of grad_out",
        .semantics = "float dtypes; recomputes the forward's statistics (mean, biased variance, "
                     "eps default 1e-5): with xhat = (x - mean) rstd and dxhat = grad_out weight "
                     "(grad_out without weight), d x = rstd (dxhat - mean(dxhat) - xhat "
                     "mean(dxhat xhat)) per row, d weight = sum over rows of grad_out xhat; a "
                     "non-finite x gives NaN in its row",
        .contract_text = "|y - exact| <= gamma_(2k+16) * (sum|terms| + 1), k the normalized "
                         "count (values per row; d weight: rows)",
        .min_inputs = 2, .max_inputs = 3, .dtypes = fl,
        .n_attrs = 3,
        .attrs = {{GOBLIN_ATTR_NORM_NDIM, false, 1, GOBLIN_MAX_RANK},
                  {GOBLIN_ATTR_EPS, false, 0, HUGE_VAL}, {GOBLIN_ATTR_INDEX, false, 0, 1}},
        .infer = infer_ln_bwd, .contract = contract_stats};
    t[GOBLIN_OP_GELU_BACKWARD] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "d gelu / d x: (grad_out, x) -> grad_out * gelu'(x), x's shape",
        .semantics = "float dtypes; approximate = 0 (erf): gelu' = Phi(x) + x phi(x), Phi "
                     "evaluated as 0.5 erfc(-x/sqrt2) by the reference; approximate = 1 (tanh): "
                     "0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2), t = "
                     "tanh(sqrt(2/pi) (x + 0.044715 x^3)) (torch's formulas); x = +-inf gives NaN "
                     "(as torch), NaN propagates",
        .contract_text = "rel 16u + abs 16u (the absolute part scales with |grad_out| above 1)",
        .min_inputs = 2, .max_inputs = 2, .dtypes = fl,
        .n_attrs = 1, .attrs = {{GOBLIN_ATTR_APPROXIMATE, false, GOBLIN_GELU_ERF, GOBLIN_GELU_TANH}},
        .infer = infer_gelu_bwd, .contract = contract_gelu_bwd};
    t[GOBLIN_OP_RELU_BACKWARD] = (goblin__op_def){
        .defined = true, .group = "backward",
        .summary = "d relu / d x: (grad_out, x) -> grad_out where x > 0, else 0; x's shape",
        .semantics = "float dtypes; x > 0 ? grad_out : +0, the value of where(x > 0, grad_out, 0): "
                     "grad_out's bits (NaN and inf included) where x > 0, +0 where x <= 0 (-0 "
                     "too) or x is NaN",
        .contract_text = "exact",
        .min_inputs = 2, .max_inputs = 2, .dtypes = fl,
        .infer = infer_relu_bwd};
}
