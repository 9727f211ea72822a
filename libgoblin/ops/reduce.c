/* libgoblin/ops/reduce.c - op definitions (inference, attributes, contracts):
 * reductions, softmax, normalization and the classification losses.
 *
 * All of these read a whole axis (or several) of their input, which is why they
 * share a file: their contracts are the summation bound gamma_k and their
 * kernels share a fixed reduction order (docs/ops.md, "determinism"). */
#include <math.h>
#include <stdio.h>
#include "op_def.h"

#define ATTR_I64_MIN (-9.2233720368547758e18)
#define ATTR_I64_MAX (9.2233720368547758e18)

/* ---- contracts ------------------------------------------------------------ */

/* gamma_n = n u / (1 - n u): the classic bound for n roundings in a row. Past
 * n u >= 1 there is no rigorous bound; say so with an infinite tolerance rather
 * than a made-up number (verification then has to recompute). */
static double gam(double n, double u) {
    double nu = n * u;
    return nu < 1 ? nu / (1 - nu) : HUGE_VAL;
}

/* Sums (SUM, CUMSUM, NLL_LOSS mean/sum): any summation order of k terms plus
 * one final rounding into the output dtype, relative to sum |terms|. */
static void contract_sum(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    double u = goblin__unit_roundoff(dt);
    *rel = gam((double)k, u) + u;
    *abs_tol = 0;
}

/* MEAN: the sum's bound plus the division, relative to sum |x| / k. */
static void contract_mean(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    *rel = gam((double)k + 2, goblin__unit_roundoff(dt));
    *abs_tol = 0;
}

/* PROD: k - 1 multiplications and a rounding, relative to |exact product|. The
 * absolute term covers a product that underflows into the subnormal range. */
static void contract_prod(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    double u = goblin__unit_roundoff(dt);
    *rel = gam((double)k + 1, u);
    double tiny = dt == GOBLIN_DTYPE_F64 ? 0x1p-1022 : dt == GOBLIN_DTYPE_F32 ? 0x1p-126 : 0x1p-14;
    *abs_tol = u * tiny;
}

/* VAR: relative to sum x_i^2 / max(1, k - correction); covers two-pass,
 * Welford and one-pass algorithms alike. */
static void contract_var(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    *rel = gam(2.0 * (double)k + 4, goblin__unit_roundoff(dt));
    *abs_tol = 0;
}

/* SOFTMAX / LOG_SOFTMAX: relative to |y| plus an absolute term (see the
 * contract text: the exponent's rounding costs at most u/e absolutely, the sum's
 * error shifts log S by at most gamma_k). */
static void contract_softmax(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    double g = gam((double)k + 8, goblin__unit_roundoff(dt));
    *rel = g;
    *abs_tol = g;
}

/* Normalizations: relative to scale = (|x| + mean|x|) * rstd * |w| + |b|. */
static void contract_norm(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    *rel = gam(2.0 * (double)k + 16, goblin__unit_roundoff(dt));
    *abs_tol = 0;
}

/* Losses: k = classes + targets; relative to the sum of |terms| (see text). */
static void contract_loss(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    double g = gam((double)k + 8, goblin__unit_roundoff(dt));
    *rel = g;
    *abs_tol = g;
}

/* ---- shared inference helpers -------------------------------------------- */

static goblin_err need_float(goblin__infer *c, int32_t i, const char *what) {
    goblin_dtype dt = c->in[i]->dtype;
    if (!goblin_dtype_is_float(dt))
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                            "%s must be a float dtype (f32, f64, f16, bf16), got %s; insert a cast",
                            what, goblin_dtype_name(dt));
    return GOBLIN_OK;
}

static goblin_err need_same_dtype(goblin__infer *c, int32_t i, const char *what) {
    if (c->in[i]->dtype != c->in[0]->dtype)
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                            "%s has dtype %s but the input is %s; insert a cast", what,
                            goblin_dtype_name(c->in[i]->dtype), goblin_dtype_name(c->in[0]->dtype));
    return GOBLIN_OK;
}

static goblin_err need_shape(goblin__infer *c, int32_t i, const char *what, int32_t rank,
                             const int64_t *shape) {
    const goblin__node *n = c->in[i];
    bool ok = n->rank == rank;
    for (int32_t d = 0; ok && d < rank; d++) ok = n->shape[d] == shape[d];
    if (!ok) {
        char a[160], b[160];
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "%s must have shape %s, got %s", what,
                            goblin__shape_str(rank, shape, a, sizeof a),
                            goblin__shape_str(n->rank, n->shape, b, sizeof b));
    }
    return GOBLIN_OK;
}

/* goblin__norm_axis, but a rank-0 tensor also takes axis -1 (torch accepts
 * dim 0 and -1 on a scalar; softmax's default axis is -1). */
static goblin_err norm_axis(goblin__infer *c, int64_t axis, int32_t rank, int32_t *out) {
    if (rank == 0 && (axis == 0 || axis == -1)) {
        *out = 0;
        return GOBLIN_OK;
    }
    return goblin__norm_axis(axis, rank, out, c->msg, c->cap);
}

static void set_out(goblin__infer *c, goblin_dtype dt, int32_t rank, const int64_t *shape) {
    c->node->dtype = dt;
    c->node->rank = rank;
    for (int32_t d = 0; d < rank; d++) c->node->shape[d] = shape[d];
}

/* Integer and bool sums (SUM, PROD, CUMSUM) come out as i64, as in torch. */
static goblin_dtype acc_dtype(goblin_dtype dt) {
    return goblin_dtype_is_float(dt) ? dt : GOBLIN_DTYPE_I64;
}

/* The reduced-axes mask from AXES (absent or empty = all axes, as torch's
 * dim=None / dim=[]). A rank-0 input accepts axis 0 / -1 and reduces nothing. */
static goblin_err axes_mask(goblin__infer *c, uint32_t *mask) {
    const goblin__node *x = c->in[0];
    int32_t n;
    const int64_t *ax = goblin__attr_ints(c->node, GOBLIN_ATTR_AXES, &n);
    if (!ax || n == 0) {
        *mask = (1u << x->rank) - 1u;
        return GOBLIN_OK;
    }
    uint32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t a;
        goblin_err e = norm_axis(c, ax[i], x->rank, &a);
        if (e) return e;
        if (m & (1u << a))
            return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL, "axis %lld appears twice in axes",
                                (long long)ax[i]);
        m |= 1u << a;
    }
    *mask = x->rank ? m : 0;
    return GOBLIN_OK;
}

/* Output shape of a reduction over mask; *k = number of reduced elements. */
static void reduced_shape(const goblin__node *x, uint32_t mask, bool keepdim, int32_t *rank,
                          int64_t *shape, int64_t *k) {
    int32_t r = 0;
    int64_t n = 1;
    for (int32_t d = 0; d < x->rank; d++) {
        if (mask & (1u << d)) {
            n *= x->shape[d];
            if (keepdim) shape[r++] = 1;
        } else {
            shape[r++] = x->shape[d];
        }
    }
    *rank = r;
    *k = n;
}

/* ---- reductions ------------------------------------------------------------ */

static goblin_err infer_reduce(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    goblin_op op = c->node->op;
    if ((op == GOBLIN_OP_MEAN || op == GOBLIN_OP_VAR) && need_float(c, 0, "the input"))
        return GOBLIN_EDTYPE;
    uint32_t mask = 0;
    goblin_err e = axes_mask(c, &mask);
    if (e) return e;
    int32_t rank;
    int64_t shape[GOBLIN_MAX_RANK], k;
    reduced_shape(x, mask, goblin__attr_i(c->node, GOBLIN_ATTR_KEEPDIM, 0) != 0, &rank, shape, &k);
    if (k == 0 && (op == GOBLIN_OP_REDUCE_MAX || op == GOBLIN_OP_REDUCE_MIN)) {
        char s[160];
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE,
                            "%s over zero elements (input %s) has no identity",
                            op == GOBLIN_OP_REDUCE_MAX ? "max" : "min",
                            goblin__shape_str(x->rank, x->shape, s, sizeof s));
    }
    goblin_dtype dt = x->dtype;
    if (op == GOBLIN_OP_SUM || op == GOBLIN_OP_PROD) dt = acc_dtype(dt);
    set_out(c, dt, rank, shape);
    return GOBLIN_OK;
}

static goblin_err infer_arg(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    if (x->dtype == GOBLIN_DTYPE_BOOL)
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                            "%s does not take bool (as torch); cast to an integer dtype",
                            goblin_op_name(c->node->op));
    bool keepdim = goblin__attr_i(c->node, GOBLIN_ATTR_KEEPDIM, 0) != 0;
    int64_t shape[GOBLIN_MAX_RANK];
    int32_t rank = 0;
    int64_t k = 1;
    const goblin_attr *a = goblin__attr_find(c->node, GOBLIN_ATTR_AXIS);
    if (!a) { /* flattened: torch's dim=None */
        for (int32_t d = 0; d < x->rank; d++) {
            k *= x->shape[d];
            if (keepdim) shape[rank++] = 1;
        }
    } else {
        int32_t ax;
        goblin_err e = norm_axis(c, a->v.i, x->rank, &ax);
        if (e) return e;
        for (int32_t d = 0; d < x->rank; d++) {
            if (d == ax) {
                k = x->shape[d];
                if (keepdim) shape[rank++] = 1;
            } else {
                shape[rank++] = x->shape[d];
            }
        }
    }
    if (k == 0) {
        char s[160];
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE,
                            "%s over zero elements (input %s) has no answer",
                            goblin_op_name(c->node->op),
                            goblin__shape_str(x->rank, x->shape, s, sizeof s));
    }
    set_out(c, GOBLIN_DTYPE_I64, rank, shape);
    return GOBLIN_OK;
}

static goblin_err infer_same_axis(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    goblin_op op = c->node->op;
    if (op != GOBLIN_OP_CUMSUM && need_float(c, 0, "the input")) return GOBLIN_EDTYPE;
    int32_t ax;
    goblin_err e = norm_axis(c, goblin__attr_i(c->node, GOBLIN_ATTR_AXIS, -1), x->rank, &ax);
    if (e) return e;
    set_out(c, op == GOBLIN_OP_CUMSUM ? acc_dtype(x->dtype) : x->dtype, x->rank, x->shape);
    return GOBLIN_OK;
}

/* ---- normalization --------------------------------------------------------- */

static goblin_err infer_batch_norm(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    goblin_err e = need_float(c, 0, "the input");
    if (e) return e;
    if (x->rank < 2)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                            "batch_norm input must be [N, C, ...] (rank >= 2), got rank %d",
                            (int)x->rank);
    static const char *const names[] = {"", "weight", "bias", "running_mean", "running_var"};
    for (int32_t i = 1; i < 5; i++) {
        if ((e = need_same_dtype(c, i, names[i]))) return e;
        if ((e = need_shape(c, i, names[i], 1, &x->shape[1]))) return e;
    }
    set_out(c, x->dtype, x->rank, x->shape);
    return GOBLIN_OK;
}

/* LAYER_NORM (x, [weight, [bias]]) and RMS_NORM (x, [weight]). */
static goblin_err infer_norm(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    goblin_err e = need_float(c, 0, "the input");
    if (e) return e;
    int64_t nd = goblin__attr_i(c->node, GOBLIN_ATTR_NORM_NDIM, 1);
    if (nd < 1 || nd > x->rank)
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE,
                            "norm_ndim %lld must be between 1 and the input rank %d",
                            (long long)nd, (int)x->rank);
    const int64_t *tail = &x->shape[x->rank - nd];
    static const char *const names[] = {"", "weight", "bias"};
    for (int32_t i = 1; i < c->n_in; i++) {
        if ((e = need_same_dtype(c, i, names[i]))) return e;
        if ((e = need_shape(c, i, names[i], (int32_t)nd, tail))) return e;
    }
    set_out(c, x->dtype, x->rank, x->shape);
    return GOBLIN_OK;
}

/* ---- losses ---------------------------------------------------------------- */

/* NLL_LOSS (log_probs, target, [weight]) and CROSS_ENTROPY (logits, target, [weight]):
 * input [N, C, d1..] with target [N, d1..], or input [C] with a scalar target. */
static goblin_err infer_loss(goblin__infer *c) {
    const goblin__node *x = c->in[0], *t = c->in[1];
    goblin_err e = need_float(c, 0, "the input");
    if (e) return e;
    if (t->dtype != GOBLIN_DTYPE_I64 && t->dtype != GOBLIN_DTYPE_I32)
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                            "target must hold class indices (i64 or i32), got %s",
                            goblin_dtype_name(t->dtype));
    if (x->rank < 1)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                            "input must be [C] or [N, C, ...], got a scalar");
    int64_t tshape[GOBLIN_MAX_RANK];
    int32_t trank = 0;
    int32_t cdim = x->rank == 1 ? 0 : 1;
    for (int32_t d = 0; d < x->rank; d++)
        if (d != cdim) tshape[trank++] = x->shape[d];
    if ((e = need_shape(c, 1, "target", trank, tshape))) return e;
    if (c->n_in == 3) {
        if ((e = need_same_dtype(c, 2, "weight"))) return e;
        if ((e = need_shape(c, 2, "weight", 1, &x->shape[cdim]))) return e;
    }
    int64_t red = goblin__attr_i(c->node, GOBLIN_ATTR_REDUCTION, GOBLIN_REDUCTION_MEAN);
    if (red == GOBLIN_REDUCTION_NONE) set_out(c, x->dtype, trank, tshape);
    else set_out(c, x->dtype, 0, NULL);
    return GOBLIN_OK;
}

/* ---- registration ---------------------------------------------------------- */

#define A_AXES {GOBLIN_ATTR_AXES, false, -GOBLIN_MAX_RANK, GOBLIN_MAX_RANK - 1}
#define A_AXIS {GOBLIN_ATTR_AXIS, false, -GOBLIN_MAX_RANK, GOBLIN_MAX_RANK - 1}
#define A_KEEPDIM {GOBLIN_ATTR_KEEPDIM, false, 0, 1}
#define A_EPS {GOBLIN_ATTR_EPS, false, 0, HUGE_VAL}
#define A_NORM_NDIM {GOBLIN_ATTR_NORM_NDIM, false, 1, GOBLIN_MAX_RANK}
#define A_REDUCTION {GOBLIN_ATTR_REDUCTION, false, GOBLIN_REDUCTION_NONE, GOBLIN_REDUCTION_SUM}
#define A_IGNORE {GOBLIN_ATTR_IGNORE_INDEX, false, ATTR_I64_MIN, ATTR_I64_MAX}

static const char SUM_CONTRACT[] =
    "|y - exact| <= (gamma_k + u) * sum|x_i| over the k reduced elements, gamma_k = k u/(1 - k u), "
    "u the dtype's unit roundoff; integers exact";

void goblin__ops_register_reduce(goblin__op_def *t) {
    t[GOBLIN_OP_SUM] = (goblin__op_def){
        .defined = true, .group = "reduction",
        .summary = "sum over axes (absent or empty: all axes), keepdim optional",
        .semantics = "integer and bool inputs sum into i64 with wraparound modulo 2^64 "
                     "(torch's rule); floats keep their dtype, NaN/inf propagate; the sum of zero elements is 0",
        .contract_text = SUM_CONTRACT,
        .min_inputs = 1, .max_inputs = 1, .dtypes = GOBLIN_DTMASK_ALL,
        .n_attrs = 2, .attrs = {A_AXES, A_KEEPDIM},
        .infer = infer_reduce, .contract = contract_sum};
    t[GOBLIN_OP_MEAN] = (goblin__op_def){
        .defined = true, .group = "reduction",
        .summary = "arithmetic mean over axes (absent or empty: all axes), keepdim optional",
        .semantics = "float dtypes only; the mean of zero elements is NaN",
        .contract_text = "|y - exact| <= gamma_(k+2) * sum|x_i| / k",
        .min_inputs = 1, .max_inputs = 1, .dtypes = GOBLIN_DTMASK_FLOAT,
        .n_attrs = 2, .attrs = {A_AXES, A_KEEPDIM},
        .infer = infer_reduce, .contract = contract_mean};
    t[GOBLIN_OP_REDUCE_MAX] = (goblin__op_def){
        .defined = true, .group = "reduction",
        .summary = "maximum over axes (absent or empty: all axes), keepdim optional",
        .semantics = "NaN propagates (any NaN gives NaN); bool is logical or; a reduction "
                     "over zero elements is rejected at build time (ERANGE)",
        .contract_text = "exact",
        .min_inputs = 1, .max_inputs = 1, .dtypes = GOBLIN_DTMASK_ALL,
        .n_attrs = 2, .attrs = {A_AXES, A_KEEPDIM},
        .infer = infer_reduce};
    t[GOBLIN_OP_REDUCE_MIN] = (goblin__op_def){
        .defined = true, .group = "reduction",
        .summary = "minimum over axes (absent or empty: all axes), keepdim optional",
        .semantics = "NaN propagates (any NaN gives NaN); bool is logical and; a reduction over "
                     "zero elements is rejected at build time (ERANGE)",
        .contract_text = "exact",
        .min_inputs = 1, .max_inputs = 1, .dtypes = GOBLIN_DTMASK_ALL,
        .n_attrs = 2, .attrs = {A_AXES, A_KEEPDIM},
        .infer = infer_reduce};
    t[GOBLIN_OP_PROD] = (goblin__op_def){
        .defined = true, .group = "reduction",
        .summary = "product over axes (absent or empty: all axes), keepdim optional",
        .semantics = "integer and bool inputs multiply into i64 with wraparound modulo "
                     "2^64 (torch's rule); the product of zero elements is 1",
        .contract_text = "|y - exact| <= gamma_(k+1) * |exact| (+ u * smallest normal, for "
                         "underflow)",
        .min_inputs = 1, .max_inputs = 1, .dtypes = GOBLIN_DTMASK_ALL,
        .n_attrs = 2, .attrs = {A_AXES, A_KEEPDIM},
        .infer = infer_reduce, .contract = contract_prod};
    t[GOBLIN_OP_ARGMAX] = (goblin__op_def){
        .defined = true, .group = "reduction",
        .summary = "i64 index of the maximum along axis (absent: of the flattened input)",
        .semantics = "first index of the extreme; NaN counts as larger than everything (the first NaN "
                     "wins, as torch); zero elements is rejected at build time (ERANGE)",
        .contract_text = "exact",
        .min_inputs = 1, .max_inputs = 1, .dtypes = GOBLIN_DTMASK_NUMERIC,
        .n_attrs = 2, .attrs = {A_AXIS, A_KEEPDIM},
        .infer = infer_arg};
    t[GOBLIN_OP_ARGMIN] = (goblin__op_def){
        .defined = true, .group = "reduction",
        .summary = "i64 index of the minimum along axis (absent: of the flattened input)",
        .semantics = "first index of the extreme; NaN counts as the extreme (the first NaN wins, as "
                     "torch); zero elements is rejected at build time (ERANGE)",
        .contract_text = "exact",
        .min_inputs = 1, .max_inputs = 1, .dtypes = GOBLIN_DTMASK_NUMERIC,
        .n_attrs = 2, .attrs = {A_AXIS, A_KEEPDIM},
        .infer = infer_arg};
    t[GOBLIN_OP_VAR] = (goblin__op_def){
        .defined = true, .group = "reduction",
        .summary = "variance over axes: sum (x - mean)^2 / max(0, k - correction); correction "
                   "defaults to 1 (Bessel)",
        .semantics = "float dtypes only; when k <= correction the divisor is 0: inf, or NaN "
                     "if the squared deviations sum to 0 (as torch)",
        .contract_text = "|y - exact| <= gamma_(2k+4) * sum x_i^2 / max(1, k - correction)",
        .min_inputs = 1, .max_inputs = 1, .dtypes = GOBLIN_DTMASK_FLOAT,
        .n_attrs = 3,
        .attrs = {A_AXES, A_KEEPDIM, {GOBLIN_ATTR_CORRECTION, false, 0, 9007199254740992.0}},
        .infer = infer_reduce, .contract = contract_var};
    t[GOBLIN_OP_CUMSUM] = (goblin__op_def){
        .defined = true, .group = "reduction",
        .summary = "inclusive prefix sum along axis (required)",
        .semantics = "integer and bool inputs sum into i64 with wraparound (torch's rule); floats keep "
                     "their dtype",
        .contract_text = "element j: |y_j - exact| <= (gamma_k + u) * sum_(i<=j) |x_i|, k the axis length",
        .min_inputs = 1, .max_inputs = 1, .dtypes = GOBLIN_DTMASK_ALL,
        .n_attrs = 1, .attrs = {{GOBLIN_ATTR_AXIS, true, -GOBLIN_MAX_RANK, GOBLIN_MAX_RANK - 1}},
        .infer = infer_same_axis, .contract = contract_sum};
    t[GOBLIN_OP_SOFTMAX] = (goblin__op_def){
        .defined = true, .group = "activation",
        .summary = "softmax along axis (default -1): exp(x - max) / sum exp(x - max)",
        .semantics = "float dtypes only; a NaN or an infinite maximum in a slice makes the whole "
                     "slice NaN (as torch)",
        .contract_text = "|y - exact| <= gamma_(k+8) * (|exact| + 1), k the axis length",
        .min_inputs = 1, .max_inputs = 1, .dtypes = GOBLIN_DTMASK_FLOAT,
        .n_attrs = 1, .attrs = {A_AXIS},
        .infer = infer_same_axis, .contract = contract_softmax};
    t[GOBLIN_OP_LOG_SOFTMAX] = (goblin__op_def){
        .defined = true, .group = "activation",
        .summary = "log_softmax along axis (default -1): (x - max) - log sum exp(x - max)",
        .semantics = "float dtypes only; a NaN or an infinite maximum in a slice makes the whole "
                     "slice NaN (as torch)",
        .contract_text = "|y - exact| <= gamma_(k+8) * (|exact| + 1), k the axis length",
        .min_inputs = 1, .max_inputs = 1, .dtypes = GOBLIN_DTMASK_FLOAT,
        .n_attrs = 1, .attrs = {A_AXIS},
        .infer = infer_same_axis, .contract = contract_softmax};
    t[GOBLIN_OP_BATCH_NORM] = (goblin__op_def){
        .defined = true, .group = "normalization",
        .summary = "batch_norm(x [N, C, ...], weight, bias, running_mean, running_var): all five "
                   "inputs required; training=1 normalizes with the batch's mean and biased "
                   "variance per channel, 0 with the running statistics",
        .semantics = "float dtypes only; output y only (running statistics are not updated, so "
                     "momentum is accepted and ignored); eps default 1e-5; training with one value "
                     "per channel is allowed (gives bias; torch raises)",
        .contract_text = "|y - exact| <= gamma_(2k+16) * ((|x| + m) * rstd * |w| + |b|), m = "
                         "mean|x| of the channel in training, |running_mean| in eval; k = "
                         "values per channel",
        .min_inputs = 5, .max_inputs = 5, .dtypes = GOBLIN_DTMASK_FLOAT,
        .n_attrs = 3,
        .attrs = {{GOBLIN_ATTR_TRAINING, false, 0, 1}, A_EPS, {GOBLIN_ATTR_MOMENTUM, false, 0, 1}},
        .infer = infer_batch_norm, .contract = contract_norm};
    t[GOBLIN_OP_LAYER_NORM] = (goblin__op_def){
        .defined = true, .group = "normalization",
        .summary = "layer_norm over the last norm_ndim dims (default 1) with optional weight and "
                   "bias (1 input: no affine; 2: weight; 3: weight and bias)",
        .semantics = "float dtypes only; biased variance; eps default 1e-5",
        .contract_text = "|y - exact| <= gamma_(2k+16) * ((|x| + mean|x|) * rstd * |w| + |b|), k the "
                         "normalized count",
        .min_inputs = 1, .max_inputs = 3, .dtypes = GOBLIN_DTMASK_FLOAT,
        .n_attrs = 2, .attrs = {A_NORM_NDIM, A_EPS},
        .infer = infer_norm, .contract = contract_norm};
    t[GOBLIN_OP_RMS_NORM] = (goblin__op_def){
        .defined = true, .group = "normalization",
        .summary = "rms_norm over the last norm_ndim dims (default 1): x / sqrt(mean(x^2) + eps), "
                   "times the optional weight",
        .semantics = "float dtypes only; eps defaults to 1e-6 (torch's default is the dtype's "
                     "machine epsilon: pass eps to match it)",
        .contract_text = "|y - exact| <= gamma_(2k+16) * |x| * rstd * |w|, k the normalized count",
        .min_inputs = 1, .max_inputs = 2, .dtypes = GOBLIN_DTMASK_FLOAT,
        .n_attrs = 2, .attrs = {A_NORM_NDIM, A_EPS},
        .infer = infer_norm, .contract = contract_norm};
    t[GOBLIN_OP_NLL_LOSS] = (goblin__op_def){
        .defined = true, .group = "loss",
        .summary = "nll_loss(log_probs [N, C, d..] or [C], target [N, d..] or [], optional "
                   "weight [C]): -weight[t] * log_probs[t], reduction none/mean/sum (default mean)",
        .semantics = "targets equal to ignore_index (default -100) contribute 0 and no weight; "
                     "another target outside [0, C) fails with EINDEX; mean divides by the sum of "
                     "the weights of non-ignored targets (NaN if there are none), as torch",
        .contract_text = "mean/sum: |y - exact| <= gamma_(k+8) * (sum|w_t log p_t| (/ sum w_t) + 1), "
                         "k = C + number of targets; none: exact up to one rounding",
        .min_inputs = 2, .max_inputs = 3, .dtypes = GOBLIN_DTMASK_FLOAT,
        .n_attrs = 2, .attrs = {A_REDUCTION, A_IGNORE},
        .infer = infer_loss, .contract = contract_loss};
    t[GOBLIN_OP_CROSS_ENTROPY] = (goblin__op_def){
        .defined = true, .group = "loss",
        .summary = "cross_entropy(logits, class-index target, optional weight) = nll_loss of "
                   "log_softmax over the class dim, with label_smoothing in [0, 1]",
        .semantics = "as nll_loss; with label smoothing e the loss is (1 - e) * nll + e / C * "
                     "sum_c -w_c log p_c, and mean divides both parts by the sum of the target "
                     "weights (torch)",
        .contract_text = "|y - exact| <= gamma_(k+8) * (sum|terms| (/ sum w_t) + 1), k = C + number of "
                         "targets",
        .min_inputs = 2, .max_inputs = 3, .dtypes = GOBLIN_DTMASK_FLOAT,
        .n_attrs = 3,
        .attrs = {A_REDUCTION, A_IGNORE, {GOBLIN_ATTR_LABEL_SMOOTHING, false, 0, 1}},
        .infer = infer_loss, .contract = contract_loss};
}
