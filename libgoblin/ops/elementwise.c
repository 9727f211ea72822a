/* libgoblin/ops/elementwise.c - op definitions (inference, attributes, contracts):
 * the elementwise group (arithmetic, comparison, logic, integer ops).
 *
 * The per-element semantics live in scalar_ops.h; the `semantics` strings below
 * describe that header's behaviour for goblin_op_get_info() users. */
#include <math.h>
#include "op_def.h"

#define DT_ALL GOBLIN_DTMASK_ALL
#define DT_NUM GOBLIN_DTMASK_NUMERIC
#define DT_FLOAT GOBLIN_DTMASK_FLOAT
#define DT_INT GOBLIN_DTMASK_INT
#define DT_BOOL GOBLIN_DTMASK(GOBLIN_DTYPE_BOOL)

static bool dt_in(goblin_dtype dt, uint32_t mask) { return (mask & GOBLIN_DTMASK(dt)) != 0; }

/* ---- inference ----------------------------------------------------------------- */

static goblin_err same_dtype(goblin__infer *c, int32_t i, int32_t j) {
    if (c->in[i]->dtype != c->in[j]->dtype)
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                            "inputs %d and %d have dtypes %s and %s; insert a cast", (int)i, (int)j,
                            goblin_dtype_name(c->in[i]->dtype), goblin_dtype_name(c->in[j]->dtype));
    return GOBLIN_OK;
}

static goblin_err bcast2(goblin__infer *c) {
    return goblin__broadcast_shapes(c->in[0]->rank, c->in[0]->shape, c->in[1]->rank,
                                    c->in[1]->shape, &c->node->rank, c->node->shape, c->msg, c->cap);
}

/* Binary op over one dtype: the output has the inputs' dtype (or bool). */
static goblin_err infer_binary(goblin__infer *c, bool bool_out) {
    goblin_err e = same_dtype(c, 0, 1);
    if (e) return e;
    goblin_dtype dt = c->in[0]->dtype;
    const goblin__op_def *d = goblin__op_def_get(c->node->op);
    if (d && !dt_in(dt, d->dtypes)) /* the builder checks input 0 already; stay safe */
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE, "does not take dtype %s",
                            goblin_dtype_name(dt));
    if ((e = bcast2(c))) return e;
    c->node->dtype = bool_out ? GOBLIN_DTYPE_BOOL : dt;
    return GOBLIN_OK;
}

static goblin_err infer_arith(goblin__infer *c) { return infer_binary(c, false); }
static goblin_err infer_compare(goblin__infer *c) { return infer_binary(c, true); }

/* DIV is true division: only floats. Its dtype mask admits integers and bool so
 * that they reach this message instead of the builder's generic one. */
static goblin_err infer_div(goblin__infer *c) {
    goblin_dtype dt = c->in[0]->dtype;
    if (!goblin_dtype_is_float(dt))
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                            "div is true division and takes float dtypes only (got %s); use "
                            "floor_div/trunc_div or cast to a float dtype",
                            goblin_dtype_name(dt));
    return infer_binary(c, false);
}

/* Logical ops look only at "nonzero", so the two inputs may have different dtypes. */
static goblin_err infer_logical(goblin__infer *c) {
    goblin_err e = bcast2(c);
    if (e) return e;
    c->node->dtype = GOBLIN_DTYPE_BOOL;
    return GOBLIN_OK;
}

static goblin_err infer_unary_same(goblin__infer *c) {
    c->node->dtype = c->in[0]->dtype;
    c->node->rank = c->in[0]->rank;
    for (int32_t d = 0; d < c->node->rank; d++) c->node->shape[d] = c->in[0]->shape[d];
    return GOBLIN_OK;
}

static goblin_err infer_unary_bool(goblin__infer *c) {
    infer_unary_same(c);
    c->node->dtype = GOBLIN_DTYPE_BOOL;
    return GOBLIN_OK;
}

static goblin_err infer_clamp(goblin__infer *c) {
    const goblin_attr *lo = goblin__attr_find(c->node, GOBLIN_ATTR_MIN);
    const goblin_attr *hi = goblin__attr_find(c->node, GOBLIN_ATTR_MAX);
    if (!lo && !hi)
        return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL,
                            "clamp needs at least one of the attributes 'min' and 'max'");
    if ((lo && isnan(lo->v.f)) || (hi && isnan(hi->v.f)))
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE, "clamp bounds must not be NaN");
    if (lo && hi && lo->v.f > hi->v.f)
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE, "clamp min %g is greater than max %g",
                            lo->v.f, hi->v.f);
    return infer_unary_same(c);
}

static goblin_err infer_where(goblin__infer *c) {
    if (c->in[0]->dtype != GOBLIN_DTYPE_BOOL)
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                            "where's condition (input 0) must be bool, got %s; compare with ne 0 "
                            "or cast",
                            goblin_dtype_name(c->in[0]->dtype));
    goblin_err e = same_dtype(c, 1, 2);
    if (e) return e;
    int32_t r1;
    int64_t s1[GOBLIN_MAX_RANK];
    e = goblin__broadcast_shapes(c->in[0]->rank, c->in[0]->shape, c->in[1]->rank, c->in[1]->shape,
                                 &r1, s1, c->msg, c->cap);
    if (e) return e;
    e = goblin__broadcast_shapes(r1, s1, c->in[2]->rank, c->in[2]->shape, &c->node->rank,
                                 c->node->shape, c->msg, c->cap);
    if (e) return e;
    c->node->dtype = c->in[1]->dtype;
    return GOBLIN_OK;
}

/* ---- contracts ------------------------------------------------------------------
 * One IEEE operation, correctly rounded: |err| <= u |exact|. f16/bf16 round twice
 * (f32, then the half type), and u_f32 is at most 2^-13 u_half, so 2u covers both.
 * abs: the smallest normal, so results in the subnormal range (and devices that
 * flush them to zero) pass. Integer dtypes are exact (unit roundoff 0). */
static double smallest_normal(goblin_dtype dt) {
    switch (dt) {
    case GOBLIN_DTYPE_F32: return 0x1p-126;
    case GOBLIN_DTYPE_F64: return 0x1p-1022;
    case GOBLIN_DTYPE_F16: return 0x1p-14;
    case GOBLIN_DTYPE_BF16: return 0x1p-126;
    default: return 0;
    }
}

static void contract_rounded(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    (void)k;
    *rel = 2 * goblin__unit_roundoff(dt);
    *abs_tol = smallest_normal(dt);
}

/* pow and atan2 come from libm / CUDA's math library: within 4 ulp on every
 * implementation we target (CUDA powf: 4, atan2f: 3; glibc: < 1), so 8u. */
static void contract_libm(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    (void)k;
    *rel = 8 * goblin__unit_roundoff(dt);
    *abs_tol = smallest_normal(dt);
}

#define CONTRACT_ROUNDED "floats: within 2u relative (correctly rounded IEEE; f16/bf16 computed in f32 " \
                         "and rounded once) plus the smallest normal absolute; integers exact"
#define CONTRACT_LIBM "floats: within 8u relative (libm accuracy) plus the smallest normal " \
                      "absolute; integers exact"
#define CONTRACT_EXACT "exact (a selection or comparison of the inputs)"

/* ---- the table ----------------------------------------------------------------- */

static void def(goblin__op_def *t, goblin_op op, const char *summary, const char *semantics,
                const char *contract_text, int16_t n_in, uint32_t dtypes, goblin__infer_fn infer,
                goblin__contract_fn contract) {
    t[op] = (goblin__op_def){
        .defined = true,
        .group = "elementwise",
        .summary = summary,
        .semantics = semantics,
        .contract_text = contract_text,
        .min_inputs = n_in,
        .max_inputs = n_in,
        .dtypes = dtypes,
        .flags = GOBLIN__OPF_STRIDED | GOBLIN__OPF_ELEMENTWISE,
        .n_attrs = 0,
        .infer = infer,
        .contract = contract,
    };
}

#define SAME_DTYPE "Both inputs have the same dtype (no promotion; insert a cast); NumPy broadcasting. "
#define WRAP "Integers wrap modulo 2^bits. "

void goblin__ops_register_elementwise(goblin__op_def *t) {
    def(t, GOBLIN_OP_ADD, "a + b",
        SAME_DTYPE WRAP "bool: logical or. Floats: IEEE.", CONTRACT_ROUNDED, 2, DT_ALL, infer_arith,
        contract_rounded);
    def(t, GOBLIN_OP_SUB, "a - b",
        SAME_DTYPE WRAP "Not defined on bool (EDTYPE; use logical_xor). Floats: IEEE.",
        CONTRACT_ROUNDED, 2, DT_NUM, infer_arith, contract_rounded);
    def(t, GOBLIN_OP_MUL, "a * b",
        SAME_DTYPE WRAP "bool: logical and. Floats: IEEE.", CONTRACT_ROUNDED, 2, DT_ALL,
        infer_arith, contract_rounded);
    def(t, GOBLIN_OP_DIV, "a / b (true division)",
        SAME_DTYPE "Float dtypes only: integer and bool inputs are rejected with EDTYPE (use "
                   "floor_div/trunc_div, or cast). Division by zero follows IEEE (+-inf, NaN for 0/0).",
        CONTRACT_ROUNDED, 2, DT_ALL, infer_div, contract_rounded);
    def(t, GOBLIN_OP_POW, "a ** b",
        SAME_DTYPE "Floats: C pow (f16/bf16 via powf). Integers: exact power by squaring, wrapping "
                   "modulo 2^bits; x**0 = 1 (also 0**0); a negative exponent gives 0 except base 1 "
                   "(-> 1) and base -1 (-> -1 for odd, 1 for even exponents).",
        CONTRACT_LIBM, 2, DT_NUM, infer_arith, contract_libm);
    def(t, GOBLIN_OP_MAXIMUM, "elementwise maximum",
        SAME_DTYPE "NaN propagates (numpy.maximum): NaN if either input is NaN; max(-0, +0) returns "
                   "the first input. bool: logical or.",
        CONTRACT_EXACT, 2, DT_ALL, infer_arith, NULL);
    def(t, GOBLIN_OP_MINIMUM, "elementwise minimum",
        SAME_DTYPE "NaN propagates (numpy.minimum): NaN if either input is NaN; min(-0, +0) returns "
                   "the first input. bool: logical and.",
        CONTRACT_EXACT, 2, DT_ALL, infer_arith, NULL);
    def(t, GOBLIN_OP_CLAMP, "min(max(x, min), max)",
        "Attributes min and max (floats), at least one; min > max or a NaN bound -> ERANGE. "
        "x NaN -> NaN. Floats compare with the bound rounded to the computing type (f32 for "
        "f16/bf16). Integers compare as the integer type: min rounds up, max rounds down, both "
        "saturate to the type's range (if no integer lies in [min, max] the result is the "
        "rounded max).",
        CONTRACT_EXACT, 1, DT_NUM, infer_clamp, NULL);
    t[GOBLIN_OP_CLAMP].n_attrs = 2;
    t[GOBLIN_OP_CLAMP].attrs[0] = (goblin__attr_spec){GOBLIN_ATTR_MIN, false, -HUGE_VAL, HUGE_VAL};
    t[GOBLIN_OP_CLAMP].attrs[1] = (goblin__attr_spec){GOBLIN_ATTR_MAX, false, -HUGE_VAL, HUGE_VAL};
    def(t, GOBLIN_OP_ATAN2, "atan2(a, b): the angle of the point (b, a)",
        SAME_DTYPE "Floats only; C atan2 (f16/bf16 via atan2f), including its signed-zero and "
                   "infinity cases.",
        CONTRACT_LIBM, 2, DT_FLOAT, infer_arith, contract_libm);

    static const struct { goblin_op op; const char *summary; } cmp[] = {
        {GOBLIN_OP_EQ, "a == b (bool)"}, {GOBLIN_OP_NE, "a != b (bool)"},
        {GOBLIN_OP_LT, "a < b (bool)"},  {GOBLIN_OP_LE, "a <= b (bool)"},
        {GOBLIN_OP_GT, "a > b (bool)"},  {GOBLIN_OP_GE, "a >= b (bool)"},
    };
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
        def(t, cmp[i].op, cmp[i].summary,
            SAME_DTYPE "Output bool. IEEE comparison: any comparison with NaN is false except ne, "
                       "-0 == +0. bool compares false < true (any nonzero byte is true).",
            CONTRACT_EXACT, 2, DT_ALL, infer_compare, NULL);

    static const struct { goblin_op op; const char *summary; } lg[] = {
        {GOBLIN_OP_LOGICAL_AND, "(a != 0) and (b != 0)"},
        {GOBLIN_OP_LOGICAL_OR, "(a != 0) or (b != 0)"},
        {GOBLIN_OP_LOGICAL_XOR, "(a != 0) xor (b != 0)"},
    };
    for (size_t i = 0; i < sizeof lg / sizeof lg[0]; i++)
        def(t, lg[i].op, lg[i].summary,
            "Any dtypes (the two inputs may differ: only nonzero-ness is read); NumPy "
            "broadcasting; output bool. Nonzero is true, NaN included; -0.0 is false.",
            CONTRACT_EXACT, 2, DT_ALL, infer_logical, NULL);
    def(t, GOBLIN_OP_LOGICAL_NOT, "x == 0 (bool)",
        "Any dtype; output bool. NaN is nonzero (so false); -0.0 is zero (so true).", CONTRACT_EXACT,
        1, DT_ALL, infer_unary_bool, NULL);
    def(t, GOBLIN_OP_WHERE, "cond ? a : b",
        "cond is bool (any nonzero byte is true); a and b have the same dtype, which is the "
        "output's; all three broadcast together. Elements are copied bit for bit (NaN payloads "
        "kept); bool outputs are 0/1.",
        CONTRACT_EXACT, 3, DT_BOOL, infer_where, NULL);
    def(t, GOBLIN_OP_ISNAN, "x is NaN (bool)",
        "Any dtype; output bool; always false for integer and bool inputs.", CONTRACT_EXACT, 1,
        DT_ALL, infer_unary_bool, NULL);

    def(t, GOBLIN_OP_FLOOR_DIV, "floor(a / b)",
        SAME_DTYPE "Integers: rounds toward -inf (Python //); x // 0 = 0; INT_MIN // -1 = INT_MIN "
                   "(wraps). Floats: Python/NumPy/PyTorch divmod, the floor of the exact quotient "
                   "computed through fmod (1.0 // 0.1 = 9.0); b == 0 gives a / b (IEEE inf/NaN).",
        CONTRACT_ROUNDED, 2, DT_NUM, infer_arith, contract_rounded);
    def(t, GOBLIN_OP_TRUNC_DIV, "trunc(a / b)",
        SAME_DTYPE "Integers: rounds toward zero (C /); x / 0 = 0; INT_MIN / -1 = INT_MIN (wraps). "
                   "Floats: trunc of the IEEE quotient (PyTorch rounding_mode='trunc'); b == 0 "
                   "gives +-inf or NaN.",
        CONTRACT_ROUNDED, 2, DT_NUM, infer_arith, contract_rounded);
    def(t, GOBLIN_OP_REM_FLOOR, "a mod b with the sign of b (Python %)",
        SAME_DTYPE "Integers: a - b * floor_div(a, b); x % 0 = 0; INT_MIN % -1 = 0. Floats: "
                   "NumPy remainder: fmod adjusted to the sign of b, a zero result takes the sign "
                   "of b; b == 0 gives NaN; x % +-inf is x or +-inf per Python.",
        CONTRACT_ROUNDED, 2, DT_NUM, infer_arith, contract_rounded);
    def(t, GOBLIN_OP_REM_TRUNC, "a mod b with the sign of a (C fmod)",
        SAME_DTYPE "Integers: C %; x % 0 = 0; INT_MIN % -1 = 0. Floats: C fmod (exact); b == 0 "
                   "gives NaN.",
        CONTRACT_ROUNDED, 2, DT_NUM, infer_arith, contract_rounded);

    def(t, GOBLIN_OP_BITWISE_AND, "a & b",
        SAME_DTYPE "Integers and bool (bool: logical and, output 0/1).", CONTRACT_EXACT, 2,
        DT_INT | DT_BOOL, infer_arith, NULL);
    def(t, GOBLIN_OP_BITWISE_OR, "a | b",
        SAME_DTYPE "Integers and bool (bool: logical or, output 0/1).", CONTRACT_EXACT, 2,
        DT_INT | DT_BOOL, infer_arith, NULL);
    def(t, GOBLIN_OP_BITWISE_XOR, "a ^ b",
        SAME_DTYPE "Integers and bool (bool: logical xor, output 0/1).", CONTRACT_EXACT, 2,
        DT_INT | DT_BOOL, infer_arith, NULL);
    def(t, GOBLIN_OP_BITWISE_NOT, "~x",
        "Integers and bool (bool: logical not, output 0/1).", CONTRACT_EXACT, 1, DT_INT | DT_BOOL,
        infer_unary_same, NULL);
    def(t, GOBLIN_OP_SHL, "a << b",
        SAME_DTYPE "Integers only; b is the shift count. Bits shifted out are lost (wraps modulo "
                   "2^bits); a count < 0 or >= the bit width gives 0.",
        CONTRACT_EXACT, 2, DT_INT, infer_arith, NULL);
    def(t, GOBLIN_OP_SHR_ARITH, "a >> b, sign-filling",
        SAME_DTYPE "Integers only; b is the shift count. Shifts in copies of the sign bit (u8: "
                   "zeros); a count < 0 or >= the bit width gives -1 for negative a, else 0.",
        CONTRACT_EXACT, 2, DT_INT, infer_arith, NULL);
    def(t, GOBLIN_OP_SHR_LOGICAL, "a >> b, zero-filling",
        SAME_DTYPE "Integers only; b is the shift count. Shifts the bit pattern as the unsigned "
                   "type of the same width (so -1 i8 >> 4 = 15); a count < 0 or >= the bit width "
                   "gives 0.",
        CONTRACT_EXACT, 2, DT_INT, infer_arith, NULL);
}
