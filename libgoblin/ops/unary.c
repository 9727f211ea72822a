/* libgoblin/ops/unary.c - op definitions (inference, attributes, contracts): the
 * unary group (math, cast, activations), the random ops and the creation ops.
 *
 * The kernels are in backends/ref/ref_unary.c; the random streams and their value
 * mappings are defined once in random.h. The `semantics` strings here are what
 * goblin_op_get_info() reports, so they state every integer/NaN/overflow rule. */
#include <math.h>
#include "op_def.h"

#define DT_ALL GOBLIN_DTMASK_ALL
#define DT_NUM GOBLIN_DTMASK_NUMERIC
#define DT_FLOAT GOBLIN_DTMASK_FLOAT
#define DT_INT GOBLIN_DTMASK_INT

static bool dt_in(goblin_dtype dt, uint32_t mask) {
    return (unsigned)dt < GOBLIN_DTYPE_COUNT && (mask & GOBLIN_DTMASK(dt)) != 0;
}

/* "float", "numeric (float or integer)", ...: for messages. */
static const char *mask_words(uint32_t mask) {
    if (mask == DT_FLOAT) return "float";
    if (mask == DT_NUM) return "float or integer";
    if (mask == DT_ALL) return "any";
    return "other";
}

/* ---- inference ----------------------------------------------------------------- */

static goblin_err check_in_dtype(goblin__infer *c) {
    const goblin__op_def *d = goblin__op_def_get(c->node->op);
    goblin_dtype dt = c->in[0]->dtype;
    if (d && !dt_in(dt, d->dtypes))
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                            "takes %s dtypes (got %s); insert a cast", mask_words(d->dtypes),
                            goblin_dtype_name(dt));
    return GOBLIN_OK;
}

static void copy_shape(goblin__infer *c) {
    c->node->rank = c->in[0]->rank;
    for (int32_t d = 0; d < c->node->rank; d++) c->node->shape[d] = c->in[0]->shape[d];
}

/* Same dtype and shape as the input. */
static goblin_err infer_same(goblin__infer *c) {
    goblin_err e = check_in_dtype(c);
    if (e) return e;
    c->node->dtype = c->in[0]->dtype;
    copy_shape(c);
    return GOBLIN_OK;
}

static goblin_err infer_cast(goblin__infer *c) {
    int64_t dt = goblin__attr_i(c->node, GOBLIN_ATTR_DTYPE, -1);
    if (dt < 0 || dt >= GOBLIN_DTYPE_COUNT)
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE, "dtype %lld is not a goblin_dtype",
                            (long long)dt);
    c->node->dtype = (goblin_dtype)dt;
    copy_shape(c);
    return GOBLIN_OK;
}

/* The output of a generator: SHAPE (required) and DTYPE (default @p def, from @p mask). */
static goblin_err gen_shape_dtype(goblin__infer *c, goblin_dtype def, uint32_t mask) {
    int32_t rank = 0;
    const int64_t *shape = goblin__attr_ints(c->node, GOBLIN_ATTR_SHAPE, &rank);
    if (!shape) return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL, "needs the attribute 'shape'");
    if (rank > GOBLIN_MAX_RANK)
        return goblin__errf(c->msg, c->cap, GOBLIN_ELIMIT, "shape has rank %d, more than %d",
                            (int)rank, GOBLIN_MAX_RANK);
    for (int32_t d = 0; d < rank; d++)
        if (shape[d] < 0)
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "shape[%d] = %lld is negative",
                                (int)d, (long long)shape[d]);
    int64_t numel;
    if (goblin__shape_numel(rank, shape, &numel))
        return goblin__errf(c->msg, c->cap, GOBLIN_ELIMIT, "shape has too many elements");
    int64_t dt = goblin__attr_i(c->node, GOBLIN_ATTR_DTYPE, def);
    if (dt < 0 || dt >= GOBLIN_DTYPE_COUNT)
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE, "dtype %lld is not a goblin_dtype",
                            (long long)dt);
    if (!dt_in((goblin_dtype)dt, mask))
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                            "cannot produce dtype %s (takes %s dtypes)",
                            goblin_dtype_name((goblin_dtype)dt), mask_words(mask));
    c->node->dtype = (goblin_dtype)dt;
    c->node->rank = rank;
    for (int32_t d = 0; d < rank; d++) c->node->shape[d] = shape[d];
    return GOBLIN_OK;
}

static bool finite_attr(const goblin__node *n, goblin_attr_key key, double def, double *out) {
    *out = goblin__attr_f(n, key, def);
    return isfinite(*out);
}

static goblin_err infer_rand_uniform(goblin__infer *c) {
    goblin_err e = gen_shape_dtype(c, GOBLIN_DTYPE_F32, DT_FLOAT);
    if (e) return e;
    double lo, hi;
    if (!finite_attr(c->node, GOBLIN_ATTR_LOW, 0.0, &lo) ||
        !finite_attr(c->node, GOBLIN_ATTR_HIGH, 1.0, &hi) || !isfinite(hi - lo))
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE,
                            "low and high (and high - low) must be finite");
    if (!(lo < hi))
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE, "needs low < high (got [%g, %g))", lo,
                            hi);
    return GOBLIN_OK;
}

static goblin_err infer_rand_normal(goblin__infer *c) {
    goblin_err e = gen_shape_dtype(c, GOBLIN_DTYPE_F32, DT_FLOAT);
    if (e) return e;
    double mean, std;
    if (!finite_attr(c->node, GOBLIN_ATTR_MEAN, 0.0, &mean) ||
        !finite_attr(c->node, GOBLIN_ATTR_STD, 1.0, &std) || std < 0)
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE,
                            "mean must be finite and std finite and >= 0");
    return GOBLIN_OK;
}

/* Largest |integer| a dtype holds exactly and contiguously: 2^precision for floats. */
static bool randint_bounds(goblin_dtype dt, double *lo, double *hi) {
    switch (dt) {
    case GOBLIN_DTYPE_I8: *lo = -128; *hi = 127; return true;
    case GOBLIN_DTYPE_I16: *lo = -32768; *hi = 32767; return true;
    case GOBLIN_DTYPE_I32: *lo = -2147483648.0; *hi = 2147483647.0; return true;
    case GOBLIN_DTYPE_I64: *lo = -0x1p53; *hi = 0x1p53; return true; /* attrs are doubles */
    case GOBLIN_DTYPE_U8: *lo = 0; *hi = 255; return true;
    case GOBLIN_DTYPE_F64: *lo = -0x1p53; *hi = 0x1p53; return true;
    case GOBLIN_DTYPE_F32: *lo = -0x1p24; *hi = 0x1p24; return true;
    case GOBLIN_DTYPE_F16: *lo = -2048; *hi = 2048; return true;
    case GOBLIN_DTYPE_BF16: *lo = -256; *hi = 256; return true;
    default: return false;
    }
}

static goblin_err infer_randint(goblin__infer *c) {
    goblin_err e = gen_shape_dtype(c, GOBLIN_DTYPE_I64, DT_NUM);
    if (e) return e;
    double lo = goblin__attr_f(c->node, GOBLIN_ATTR_LOW, 0.0);
    double hi = goblin__attr_f(c->node, GOBLIN_ATTR_HIGH, NAN);
    if (!isfinite(lo) || !isfinite(hi) || lo != floor(lo) || hi != floor(hi))
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE, "low and high must be integers");
    if (!(lo < hi))
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE, "needs low < high (got [%g, %g))", lo,
                            hi);
    double tlo = 0, thi = 0;
    if (!randint_bounds(c->node->dtype, &tlo, &thi))
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE, "cannot produce dtype %s",
                            goblin_dtype_name(c->node->dtype));
    if (lo < tlo || hi - 1 > thi)
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE,
                            "[%g, %g) does not fit dtype %s (values must lie in [%g, %g])", lo, hi,
                            goblin_dtype_name(c->node->dtype), tlo, thi);
    return GOBLIN_OK;
}

/* BERNOULLI: one float input of probabilities (output: same dtype and shape), or
 * no input with P, SHAPE and DTYPE. */
static goblin_err infer_bernoulli(goblin__infer *c) {
    bool has_p = goblin__attr_find(c->node, GOBLIN_ATTR_P) != NULL;
    bool has_shape = goblin__attr_find(c->node, GOBLIN_ATTR_SHAPE) != NULL;
    bool has_dtype = goblin__attr_find(c->node, GOBLIN_ATTR_DTYPE) != NULL;
    if (c->n_in == 1) {
        if (has_p || has_shape || has_dtype)
            return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL,
                                "with an input of probabilities, 'p', 'shape' and 'dtype' are "
                                "not allowed (the output takes the input's shape and dtype)");
        return infer_same(c);
    }
    if (!has_p || !has_shape)
        return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL,
                            "without an input, needs the attributes 'p' and 'shape'");
    double p = goblin__attr_f(c->node, GOBLIN_ATTR_P, 0.5);
    if (!(p >= 0 && p <= 1))
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE, "p = %g is outside [0, 1]", p);
    return gen_shape_dtype(c, GOBLIN_DTYPE_F32, DT_ALL);
}

static goblin_err infer_dropout(goblin__infer *c) {
    double p = goblin__attr_f(c->node, GOBLIN_ATTR_P, 0.5);
    if (!(p >= 0 && p <= 1))
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE, "p = %g is outside [0, 1]", p);
    int64_t axis = goblin__attr_i(c->node, GOBLIN_ATTR_AXIS, 0);
    if (axis != 0 && axis >= c->in[0]->rank)
        return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL, "axis %lld is not a dim of a rank-%d value",
                            (long long)axis, (int)c->in[0]->rank);
    return infer_same(c);
}

static goblin_err infer_full(goblin__infer *c) {
    return gen_shape_dtype(c, GOBLIN_DTYPE_F32, DT_ALL);
}

/* Integer range of an integer dtype (as doubles; i64 to +-2^63). */
static void int_range(goblin_dtype dt, double *lo, double *hi) {
    switch (dt) {
    case GOBLIN_DTYPE_I8: *lo = -128; *hi = 127; break;
    case GOBLIN_DTYPE_I16: *lo = -32768; *hi = 32767; break;
    case GOBLIN_DTYPE_I32: *lo = -2147483648.0; *hi = 2147483647.0; break;
    case GOBLIN_DTYPE_U8: *lo = 0; *hi = 255; break;
    default: *lo = -0x1p63; *hi = 0x1p63; break;
    }
}

static goblin_err infer_arange(goblin__infer *c) {
    goblin_err e = gen_shape_dtype(c, GOBLIN_DTYPE_F32, DT_NUM);
    if (e) return e;
    if (c->node->rank != 1)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                            "shape must be [n] (one dimension), got rank %d", (int)c->node->rank);
    double start, step;
    if (!finite_attr(c->node, GOBLIN_ATTR_START, 0.0, &start) ||
        !finite_attr(c->node, GOBLIN_ATTR_STEP, 1.0, &step))
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE, "start and step must be finite");
    if (goblin_dtype_is_int(c->node->dtype)) {
        if (start != floor(start) || step != floor(step) || fabs(start) > 0x1p53 ||
            fabs(step) > 0x1p53)
            return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE,
                                "start and step must be integers (|.| <= 2^53) for dtype %s",
                                goblin_dtype_name(c->node->dtype));
        int64_t n = c->node->shape[0];
        if (n > 0) {
            /* the values run monotonically from start to last: check both ends exactly */
            int64_t last;
            double lo, hi;
            int_range(c->node->dtype, &lo, &hi);
            bool ok = !__builtin_mul_overflow((int64_t)step, n - 1, &last) &&
                      !__builtin_add_overflow(last, (int64_t)start, &last);
            if (ok && c->node->dtype != GOBLIN_DTYPE_I64)
                ok = start >= lo && start <= hi && (double)last >= lo && (double)last <= hi;
            if (!ok)
                return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE,
                                    "values start + i * step run outside dtype %s",
                                    goblin_dtype_name(c->node->dtype));
        }
    }
    return GOBLIN_OK;
}

/* ---- contracts ------------------------------------------------------------------
 * u = unit roundoff of the output dtype; "tiny" = its smallest normal number, so
 * subnormal results (and devices that flush them to zero) pass. The reference
 * kernels compute in double and round once, so they are within u of exact; the
 * bounds leave room for other correct implementations (CUDA's f32 functions are
 * within 1-2 ulp, i.e. 2-4u). f16/bf16 outputs round once more from f32 work,
 * which the same multiples of their (much larger) u cover. Integer dtypes: exact. */

static double tiny(goblin_dtype dt) {
    switch (dt) {
    case GOBLIN_DTYPE_F64: return 0x1p-1022;
    case GOBLIN_DTYPE_F16: return 0x1p-14;
    default: return 0x1p-126; /* f32, bf16 */
    }
}

static void set(goblin_dtype dt, double rel_u, double abs_u, bool abs_tiny, double *rel,
                double *abs_tol) {
    double u = goblin__unit_roundoff(dt);
    if (u == 0) return; /* integer dtypes: exact */
    *rel = rel_u * u;
    *abs_tol = abs_u * u + (abs_tiny ? tiny(dt) : 0);
}

/* one correctly rounded operation (sqrt, 1/x, x*x), possibly rounded twice */
static void c_round2(goblin_dtype dt, int64_t k, double *r, double *a) {
    (void)k;
    set(dt, 2, 0, true, r, a);
}
/* libm-class functions: exp, log, tanh, sigmoid, ... and rsqrt (two roundings) */
static void c_trans4(goblin_dtype dt, int64_t k, double *r, double *a) {
    (void)k;
    set(dt, 4, 0, true, r, a);
}
/* sin/cos: plus 2u absolute for argument reduction near their zeros */
static void c_trig(goblin_dtype dt, int64_t k, double *r, double *a) {
    (void)k;
    set(dt, 4, 2, true, r, a);
}
/* erf: 4u relative and 4u absolute (near 0 implementations differ in relative terms) */
static void c_erf(goblin_dtype dt, int64_t k, double *r, double *a) {
    (void)k;
    set(dt, 4, 4, true, r, a);
}
/* gelu: 0.5 x (1 + erf(x/sqrt2)) cancels for x < 0; an implementation with that
 * formula errs by about 0.5 |x| u_erf <= 8u absolute where the result is not tiny */
static void c_gelu(goblin_dtype dt, int64_t k, double *r, double *a) {
    (void)k;
    set(dt, 8, 8, true, r, a);
}
/* random values: f64 bit-exact; narrower outputs within one ulp (<= 2u relative) */
static void c_rand(goblin_dtype dt, int64_t k, double *r, double *a) {
    (void)k;
    if (dt == GOBLIN_DTYPE_F64) return;
    set(dt, 2, 0, true, r, a);
}
/* arange: start + i*step rounded once (fma); 2u allows the double rounding of a
 * port computing in f32 for f16/bf16 outputs */
static void c_arange(goblin_dtype dt, int64_t k, double *r, double *a) {
    (void)k;
    set(dt, 2, 0, false, r, a);
}

/* ---- the table ----------------------------------------------------------------- */

#define F_EW (GOBLIN__OPF_STRIDED | GOBLIN__OPF_ELEMENTWISE)

static void def(goblin__op_def *t, goblin_op op, const char *group, uint32_t dtypes,
                uint32_t flags, int16_t min_in, int16_t max_in, goblin__infer_fn infer,
                goblin__contract_fn contract, const char *summary, const char *semantics,
                const char *contract_text) {
    t[op] = (goblin__op_def){.defined = true,
                             .group = group,
                             .summary = summary,
                             .semantics = semantics,
                             .contract_text = contract_text,
                             .min_inputs = min_in,
                             .max_inputs = max_in,
                             .dtypes = dtypes,
                             .flags = flags,
                             .infer = infer,
                             .contract = contract};
}

static void attr(goblin__op_def *t, goblin_op op, goblin_attr_key key, bool required, double min,
                 double max) {
    goblin__op_def *d = &t[op];
    d->attrs[d->n_attrs++] = (goblin__attr_spec){key, required, min, max};
}

/* Bounds for int64 attributes that take any value (0, 0 would mean "no bounds" too,
 * but these say so). */
#define I64_MIN_D (-9223372036854775808.0)
#define I64_MAX_D (9223372036854775807.0)
#define DIM_MAX_D ((double)GOBLIN_MAX_DIM)

static const char *const C_EXACT = "exact";
static const char *const C_ROUND2 =
    "rel 2u + abs tiny (u: unit roundoff of the dtype; tiny: its smallest normal)";
static const char *const C_TRANS4 = "rel 4u + abs tiny (u: unit roundoff; tiny: smallest normal)";

void goblin__ops_register_unary(goblin__op_def *t) {
    /* ---- unary math ---- */
    def(t, GOBLIN_OP_NEG, "unary", DT_NUM, F_EW, 1, 1, infer_same, NULL, "-x",
        "integers wrap modulo 2^bits (neg(INT_MIN) = INT_MIN; on u8, -x mod 256); floats flip "
        "the sign bit (NaN stays NaN)",
        C_EXACT);
    def(t, GOBLIN_OP_ABS, "unary", DT_NUM, F_EW, 1, 1, infer_same, NULL, "|x|",
        "integers wrap: abs(INT_MIN) = INT_MIN; u8 is the identity; abs(-0.0) = +0.0, NaN stays "
        "NaN",
        C_EXACT);
    def(t, GOBLIN_OP_SIGN, "unary", DT_NUM, F_EW, 1, 1, infer_same, NULL,
        "-1, 0 or 1 by the sign of x",
        "sign(+-0) = +0; sign(NaN) = NaN (NumPy; PyTorch gives 0); u8 gives 0 or 1", C_EXACT);
    def(t, GOBLIN_OP_EXP, "unary", DT_FLOAT, F_EW, 1, 1, infer_same, c_trans4, "e^x",
        "IEEE: overflow gives +inf, exp(-inf) = 0, NaN propagates", C_TRANS4);
    def(t, GOBLIN_OP_LOG, "unary", DT_FLOAT, F_EW, 1, 1, infer_same, c_trans4, "natural log",
        "log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN propagates", C_TRANS4);
    def(t, GOBLIN_OP_SQRT, "unary", DT_FLOAT, F_EW, 1, 1, infer_same, c_round2, "square root",
        "sqrt(-0) = -0, sqrt(x < 0) = NaN, NaN propagates", C_ROUND2);
    def(t, GOBLIN_OP_RSQRT, "unary", DT_FLOAT, F_EW, 1, 1, infer_same, c_trans4, "1 / sqrt(x)",
        "rsqrt(+0) = +inf, rsqrt(-0) = -inf, rsqrt(x < 0) = NaN, rsqrt(inf) = 0", C_TRANS4);
    def(t, GOBLIN_OP_RECIPROCAL, "unary", DT_FLOAT, F_EW, 1, 1, infer_same, c_round2, "1 / x",
        "1/+-0 = +-inf, 1/+-inf = +-0, NaN propagates", C_ROUND2);
    def(t, GOBLIN_OP_SIN, "unary", DT_FLOAT, F_EW, 1, 1, infer_same, c_trig, "sine (radians)",
        "sin(+-inf) = NaN, NaN propagates",
        "rel 4u + abs (2u + tiny): the absolute part covers argument reduction near zeros");
    def(t, GOBLIN_OP_COS, "unary", DT_FLOAT, F_EW, 1, 1, infer_same, c_trig, "cosine (radians)",
        "cos(+-inf) = NaN, NaN propagates",
        "rel 4u + abs (2u + tiny): the absolute part covers argument reduction near zeros");
    def(t, GOBLIN_OP_TANH, "unary", DT_FLOAT, F_EW, 1, 1, infer_same, c_trans4,
        "hyperbolic tangent", "tanh(+-inf) = +-1, NaN propagates", C_TRANS4);
    def(t, GOBLIN_OP_ERF, "unary", DT_FLOAT, F_EW, 1, 1, infer_same, c_erf, "error function",
        "erf(+-inf) = +-1, NaN propagates", "rel 4u + abs (4u + tiny)");
    def(t, GOBLIN_OP_FLOOR, "unary", DT_NUM, F_EW, 1, 1, infer_same, NULL,
        "largest integer <= x", "identity on integers; +-0, +-inf and NaN unchanged", C_EXACT);
    def(t, GOBLIN_OP_CEIL, "unary", DT_NUM, F_EW, 1, 1, infer_same, NULL,
        "smallest integer >= x",
        "identity on integers; ceil(-0.5) = -0; +-0, +-inf and NaN unchanged", C_EXACT);
    def(t, GOBLIN_OP_ROUND, "unary", DT_NUM, F_EW, 1, 1, infer_same, NULL,
        "nearest integer, halves to even",
        "round half to even like torch.round/numpy.round (2.5 -> 2, -0.5 -> -0); identity on "
        "integers; +-inf and NaN unchanged",
        C_EXACT);
    def(t, GOBLIN_OP_TRUNC, "unary", DT_NUM, F_EW, 1, 1, infer_same, NULL,
        "integer part (toward zero)", "identity on integers; +-inf and NaN unchanged", C_EXACT);
    def(t, GOBLIN_OP_LOG1P, "unary", DT_FLOAT, F_EW, 1, 1, infer_same, c_trans4, "log(1 + x)",
        "log1p(-1) = -inf, log1p(x < -1) = NaN, accurate for tiny x", C_TRANS4);
    def(t, GOBLIN_OP_EXPM1, "unary", DT_FLOAT, F_EW, 1, 1, infer_same, c_trans4, "e^x - 1",
        "expm1(-inf) = -1, overflow gives +inf, accurate for tiny x", C_TRANS4);
    def(t, GOBLIN_OP_SQUARE, "unary", DT_NUM, F_EW, 1, 1, infer_same, c_round2, "x * x",
        "integers wrap modulo 2^bits; floats overflow to +inf", C_ROUND2);

    /* ---- cast ---- */
    def(t, GOBLIN_OP_CAST, "unary", DT_ALL, F_EW, 1, 1, infer_cast, NULL,
        "convert to the dtype given by attribute 'dtype'",
        "float -> float: round to nearest even, once (f64 -> f16/bf16 is one correct rounding; "
        "overflow gives inf; NaN stays NaN). int -> float: round to nearest even, once. "
        "float -> int: truncate toward zero; NaN -> 0; +inf or too large -> the type's max, "
        "-inf or too small -> the type's min (saturating; u8 min is 0). int -> int: wraps "
        "modulo 2^bits (i32 300 -> i8 44, -1 -> u8 255). anything -> bool: x != 0 (NaN -> "
        "true); bool -> anything: 0 or 1. In-range values match NumPy's astype",
        C_EXACT);
    attr(t, GOBLIN_OP_CAST, GOBLIN_ATTR_DTYPE, true, 0, GOBLIN_DTYPE_COUNT - 1);

    /* ---- activations ---- */
    def(t, GOBLIN_OP_RELU, "activation", DT_NUM, F_EW, 1, 1, infer_same, NULL, "max(x, 0)",
        "x < 0 ? 0 : x, so relu(NaN) = NaN and relu(-0) = -0 (as torch.relu); integers exact",
        C_EXACT);
    def(t, GOBLIN_OP_GELU, "activation", DT_FLOAT, F_EW, 1, 1, infer_same, c_gelu,
        "Gaussian error linear unit",
        "approximate = 0 (erf): 0.5 x (1 + erf(x / sqrt(2))); approximate = 1 (tanh): 0.5 x "
        "(1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), both torch's formulas. The reference "
        "evaluates them without cancellation (0.5 x erfc(-x/sqrt2), x / (1 + exp(-2a))); "
        "gelu(+inf) = +inf, gelu(-inf) = NaN",
        "rel 8u + abs (8u + tiny)");
    attr(t, GOBLIN_OP_GELU, GOBLIN_ATTR_APPROXIMATE, false, GOBLIN_GELU_ERF, GOBLIN_GELU_TANH);
    def(t, GOBLIN_OP_SILU, "activation", DT_FLOAT, F_EW, 1, 1, infer_same, c_trans4,
        "x * sigmoid(x)", "computed as x / (1 + exp(-x)): silu(+inf) = +inf, silu(-inf) = NaN "
        "(as PyTorch)",
        C_TRANS4);
    def(t, GOBLIN_OP_SIGMOID, "activation", DT_FLOAT, F_EW, 1, 1, infer_same, c_trans4,
        "1 / (1 + exp(-x))", "sigmoid(-inf) = 0, sigmoid(+inf) = 1, NaN propagates", C_TRANS4);

    /* ---- random ---- */
    def(t, GOBLIN_OP_RAND_UNIFORM, "random", DT_FLOAT, GOBLIN__OPF_RANDOM, 0, 0,
        infer_rand_uniform, c_rand, "uniform numbers in [low, high)",
        "counter-based (libgoblin/random.h): element i uses Philox4x32-10 with counter "
        "(offset + i, stream 185) and key seed; value fma(high - low, u, low) with u a p-bit "
        "uniform (p = 24 f32, 53 f64, 11 f16, 8 bf16), rounded to the dtype; a value rounding "
        "to high becomes the largest value below high. Defaults low 0, high 1, dtype f32",
        "f64 bit-exact; f32/f16/bf16 within 1 ulp: rel 2u + abs tiny");
    def(t, GOBLIN_OP_RAND_NORMAL, "random", DT_FLOAT, GOBLIN__OPF_RANDOM, 0, 0,
        infer_rand_normal, c_rand, "normal numbers N(mean, std^2)",
        "counter-based (random.h, stream 186): Box-Muller's first output from the first two "
        "words (f32/f16/bf16: 24-bit uniforms) or all four (f64: 53-bit), with random.h's "
        "deterministic log and cos; value fma(std, z, mean). Defaults mean 0, std 1, dtype f32",
        "f64 bit-exact; f32/f16/bf16 within 1 ulp: rel 2u + abs tiny");
    def(t, GOBLIN_OP_BERNOULLI, "random", DT_FLOAT, GOBLIN__OPF_RANDOM | GOBLIN__OPF_STRIDED, 0,
        1, infer_bernoulli, NULL, "0/1 draws with probability p",
        "either one float input of probabilities (output: its dtype and shape) or no input with "
        "attributes p, shape and dtype (default f32; any dtype, bool included). Element i is 1 "
        "when u < p, u = (x0 >> 8) * 2^-24 from Philox (stream 187); p <= 0 or NaN gives 0, "
        "p >= 1 gives 1",
        C_EXACT);
    def(t, GOBLIN_OP_RANDINT, "random", DT_NUM, GOBLIN__OPF_RANDOM, 0, 0, infer_randint, NULL,
        "integers uniform in [low, high)",
        "counter-based (random.h, stream 188): low + floor(r * (high - low) / 2^64) with r the "
        "64-bit word (x1 << 32 | x0). low (default 0) and high (required) are integers that "
        "fit the dtype (default i64; floats up to 2^precision). Bias below (high-low)/2^64",
        C_EXACT);
    def(t, GOBLIN_OP_DROPOUT, "random", DT_FLOAT,
        GOBLIN__OPF_RANDOM | GOBLIN__OPF_STRIDED | GOBLIN__OPF_ELEMENTWISE, 1, 1, infer_dropout,
        NULL, "x * mask / (1 - p), mask ~ Bernoulli(1 - p)",
        "element i is kept when u >= p, u = (x0 >> 8) * 2^-24 from Philox (stream "
        "189); kept: x * (1 / (1 - p)) (the scale rounded to f32 for f32/f16/bf16 and "
        "multiplied in f32, double for f64), dropped: x * 0 (NaN/inf give NaN, as PyTorch). p "
        "defaults to 0.5; p = 1 gives x * 0. i is the element's row-major index with dim 'axis' "
        "(default 0) moved first, so a cut along that dim draws what the whole does",
        C_EXACT);

    /* ---- creation ---- */
    def(t, GOBLIN_OP_FULL, "creation", DT_ALL, 0, 0, 0, infer_full, NULL,
        "a tensor filled with 'value'",
        "value (a double) is converted to the dtype (default f32) with cast's rules (integers: "
        "truncated, NaN -> 0, saturating; so i64 holds only doubles' integers)",
        C_EXACT);
    def(t, GOBLIN_OP_ARANGE, "creation", DT_NUM, 0, 0, 0, infer_arange, c_arange,
        "start + i * step for i in [0, n)",
        "shape [n] gives the count (there is no stop attribute); start (default 0) and step "
        "(default 1). Floats: fma(step, i, start) in double, rounded once to the dtype (default "
        "f32). Integers: start and step must be integers and every value must fit the dtype",
        "rel 2u (the reference rounds start + i*step once)");

    /* attribute schemas of the random and creation ops */
    static const goblin_op gens[] = {GOBLIN_OP_RAND_UNIFORM, GOBLIN_OP_RAND_NORMAL,
                                     GOBLIN_OP_RANDINT, GOBLIN_OP_FULL, GOBLIN_OP_ARANGE};
    for (size_t i = 0; i < sizeof gens / sizeof gens[0]; i++) {
        attr(t, gens[i], GOBLIN_ATTR_SHAPE, true, 0, DIM_MAX_D);
        attr(t, gens[i], GOBLIN_ATTR_DTYPE, false, 0, GOBLIN_DTYPE_COUNT - 1);
    }
    static const goblin_op rnd[] = {GOBLIN_OP_RAND_UNIFORM, GOBLIN_OP_RAND_NORMAL,
                                    GOBLIN_OP_RANDINT, GOBLIN_OP_BERNOULLI, GOBLIN_OP_DROPOUT};
    for (size_t i = 0; i < sizeof rnd / sizeof rnd[0]; i++) {
        attr(t, rnd[i], GOBLIN_ATTR_SEED, true, I64_MIN_D, I64_MAX_D);
        attr(t, rnd[i], GOBLIN_ATTR_OFFSET, false, 0, I64_MAX_D);
    }
    /* float attributes: bounds (0, 0) = unchecked here; infer checks finiteness */
    attr(t, GOBLIN_OP_RAND_UNIFORM, GOBLIN_ATTR_LOW, false, 0, 0);
    attr(t, GOBLIN_OP_RAND_UNIFORM, GOBLIN_ATTR_HIGH, false, 0, 0);
    attr(t, GOBLIN_OP_RAND_NORMAL, GOBLIN_ATTR_MEAN, false, 0, 0);
    attr(t, GOBLIN_OP_RAND_NORMAL, GOBLIN_ATTR_STD, false, 0, 0);
    attr(t, GOBLIN_OP_RANDINT, GOBLIN_ATTR_LOW, false, 0, 0);
    attr(t, GOBLIN_OP_RANDINT, GOBLIN_ATTR_HIGH, true, 0, 0);
    attr(t, GOBLIN_OP_BERNOULLI, GOBLIN_ATTR_P, false, 0, 1);
    attr(t, GOBLIN_OP_BERNOULLI, GOBLIN_ATTR_SHAPE, false, 0, DIM_MAX_D);
    attr(t, GOBLIN_OP_BERNOULLI, GOBLIN_ATTR_DTYPE, false, 0, GOBLIN_DTYPE_COUNT - 1);
    attr(t, GOBLIN_OP_DROPOUT, GOBLIN_ATTR_P, false, 0, 1);
    attr(t, GOBLIN_OP_DROPOUT, GOBLIN_ATTR_AXIS, false, 0, GOBLIN_MAX_RANK - 1);
    attr(t, GOBLIN_OP_FULL, GOBLIN_ATTR_VALUE, true, 0, 0);
    attr(t, GOBLIN_OP_ARANGE, GOBLIN_ATTR_START, false, 0, 0);
    attr(t, GOBLIN_OP_ARANGE, GOBLIN_ATTR_STEP, false, 0, 0);
}
