/* libgoblin/backends/ref/ref_elementwise.c - reference kernels: elementwise group.
 *
 * Plain strided loops: every input may carry any strides (0 for broadcast dims),
 * the output is contiguous. Each element is computed by the scalar function of
 * scalar_ops.h for its C type; f16/bf16 go through f32 and are rounded once on
 * store. */
#include "backends/kernel_util.h"
#include "kernels/scalar_ops.h"

/* ---- iteration setup ----------------------------------------------------------- */

/* Iterator over the output's shape, one offset per input (broadcast strides). */
static void iter_setup(goblin__nditer *it, const goblin_tensor *in, int32_t n_in,
                       const goblin_tensor *out) {
    int64_t st[4][GOBLIN_MAX_RANK];
    for (int32_t i = 0; i < n_in; i++) goblin__bcast_strides(&in[i], out->rank, out->shape, st[i]);
    goblin__nditer_init(it, out->rank, out->shape, n_in, st);
}

static goblin_err bad_dtype(goblin__kctx *k, const goblin__node *node, goblin_dtype dt) {
    return goblin__errf(k->msg, k->cap, GOBLIN_EDTYPE, "%s has no reference kernel for dtype %s",
                        goblin_op_name(node->op), goblin_dtype_name(dt));
}

static inline float h2f(uint16_t h) { return goblin__f16_to_f32(h); }
static inline float b2f(uint16_t h) { return goblin__bf16_to_f32(h); }

/* ---- loop bodies ----------------------------------------------------------------
 * LOOP2(TI, TO, EXPR): for every output element, a and b (type TI) are the input
 * elements and EXPR (type TO) is stored. `numel`, `it`, `in`, `out` are in scope. */
#define LOOP2(TI, TO, EXPR)                                                                 \
    do {                                                                                    \
        const TI *pa_ = (const TI *)in[0].data, *pb_ = (const TI *)in[1].data;              \
        TO *po_ = (TO *)out->data;                                                          \
        for (int64_t n_ = 0; n_ < numel; n_++) {                                            \
            TI a = pa_[it.off[0]], b = pb_[it.off[1]];                                      \
            po_[n_] = (TO)(EXPR);                                                           \
            goblin__nditer_next(&it);                                                       \
        }                                                                                   \
    } while (0)

#define LOOP1(TI, TO, EXPR)                                                                 \
    do {                                                                                    \
        const TI *pa_ = (const TI *)in[0].data;                                             \
        TO *po_ = (TO *)out->data;                                                          \
        for (int64_t n_ = 0; n_ < numel; n_++) {                                            \
            TI a = pa_[it.off[0]];                                                          \
            po_[n_] = (TO)(EXPR);                                                           \
            goblin__nditer_next(&it);                                                       \
        }                                                                                   \
    } while (0)

/* Cases producing the input dtype. */
#define CASES_FLOAT(stem)                                                                   \
    case GOBLIN_DTYPE_F32: LOOP2(float, float, goblin__##stem##_f32(a, b)); break;          \
    case GOBLIN_DTYPE_F64: LOOP2(double, double, goblin__##stem##_f64(a, b)); break;        \
    case GOBLIN_DTYPE_F16:                                                                  \
        LOOP2(uint16_t, uint16_t, goblin__f32_to_f16(goblin__##stem##_f32(h2f(a), h2f(b)))); \
        break;                                                                              \
    case GOBLIN_DTYPE_BF16:                                                                 \
        LOOP2(uint16_t, uint16_t, goblin__f32_to_bf16(goblin__##stem##_f32(b2f(a), b2f(b)))); \
        break;
#define CASES_INT(stem)                                                                     \
    case GOBLIN_DTYPE_I8: LOOP2(int8_t, int8_t, goblin__##stem##_i8(a, b)); break;          \
    case GOBLIN_DTYPE_I16: LOOP2(int16_t, int16_t, goblin__##stem##_i16(a, b)); break;      \
    case GOBLIN_DTYPE_I32: LOOP2(int32_t, int32_t, goblin__##stem##_i32(a, b)); break;      \
    case GOBLIN_DTYPE_I64: LOOP2(int64_t, int64_t, goblin__##stem##_i64(a, b)); break;      \
    case GOBLIN_DTYPE_U8: LOOP2(uint8_t, uint8_t, goblin__##stem##_u8(a, b)); break;
#define CASES_BOOL(stem) \
    case GOBLIN_DTYPE_BOOL: LOOP2(uint8_t, uint8_t, goblin__##stem##_b(a, b)); break;

/* Cases producing bool from any input dtype (comparisons). */
#define PRED_FLOAT(stem)                                                                    \
    case GOBLIN_DTYPE_F32: LOOP2(float, uint8_t, goblin__##stem##_f32(a, b)); break;        \
    case GOBLIN_DTYPE_F64: LOOP2(double, uint8_t, goblin__##stem##_f64(a, b)); break;       \
    case GOBLIN_DTYPE_F16: LOOP2(uint16_t, uint8_t, goblin__##stem##_f32(h2f(a), h2f(b))); break; \
    case GOBLIN_DTYPE_BF16: LOOP2(uint16_t, uint8_t, goblin__##stem##_f32(b2f(a), b2f(b))); break;
#define PRED_INT(stem)                                                                      \
    case GOBLIN_DTYPE_I8: LOOP2(int8_t, uint8_t, goblin__##stem##_i8(a, b)); break;         \
    case GOBLIN_DTYPE_I16: LOOP2(int16_t, uint8_t, goblin__##stem##_i16(a, b)); break;      \
    case GOBLIN_DTYPE_I32: LOOP2(int32_t, uint8_t, goblin__##stem##_i32(a, b)); break;      \
    case GOBLIN_DTYPE_I64: LOOP2(int64_t, uint8_t, goblin__##stem##_i64(a, b)); break;      \
    case GOBLIN_DTYPE_U8: LOOP2(uint8_t, uint8_t, goblin__##stem##_u8(a, b)); break;        \
    case GOBLIN_DTYPE_BOOL: LOOP2(uint8_t, uint8_t, goblin__##stem##_b(a, b)); break;

#define KERNEL_BEGIN                                                                        \
    goblin__nditer it;                                                                      \
    iter_setup(&it, in, n_in, out);                                                         \
    int64_t numel = goblin__numel(out);                                                     \
    goblin_dtype dt = in[0].dtype;                                                          \
    switch (dt) {
#define KERNEL_END                                                                          \
    default: return bad_dtype(k, node, dt);                                                 \
    }                                                                                       \
    return GOBLIN_OK;

#define KERNEL(name, cases)                                                                 \
    static goblin_err name(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in, \
                           int32_t n_in, goblin_tensor *out) {                              \
        KERNEL_BEGIN cases KERNEL_END                                                       \
    }

KERNEL(k_add, CASES_FLOAT(plus) CASES_INT(plus) CASES_BOOL(plus))
KERNEL(k_sub, CASES_FLOAT(minus) CASES_INT(minus))
KERNEL(k_mul, CASES_FLOAT(times) CASES_INT(times) CASES_BOOL(times))
KERNEL(k_div, CASES_FLOAT(div))
KERNEL(k_pow, CASES_FLOAT(pow) CASES_INT(pow))
KERNEL(k_maximum, CASES_FLOAT(maximum) CASES_INT(maximum) CASES_BOOL(maximum))
KERNEL(k_minimum, CASES_FLOAT(minimum) CASES_INT(minimum) CASES_BOOL(minimum))
KERNEL(k_atan2, CASES_FLOAT(atan2))
KERNEL(k_eq, PRED_FLOAT(eq) PRED_INT(eq))
KERNEL(k_ne, PRED_FLOAT(ne) PRED_INT(ne))
KERNEL(k_lt, PRED_FLOAT(lt) PRED_INT(lt))
KERNEL(k_le, PRED_FLOAT(le) PRED_INT(le))
KERNEL(k_gt, PRED_FLOAT(gt) PRED_INT(gt))
KERNEL(k_ge, PRED_FLOAT(ge) PRED_INT(ge))
KERNEL(k_floor_div, CASES_FLOAT(floordiv) CASES_INT(floordiv))
KERNEL(k_trunc_div, CASES_FLOAT(truncdiv) CASES_INT(truncdiv))
KERNEL(k_rem_floor, CASES_FLOAT(remfloor) CASES_INT(remfloor))
KERNEL(k_rem_trunc, CASES_FLOAT(remtrunc) CASES_INT(remtrunc))
KERNEL(k_bitwise_and, CASES_INT(bitand) CASES_BOOL(bitand))
KERNEL(k_bitwise_or, CASES_INT(bitor) CASES_BOOL(bitor))
KERNEL(k_bitwise_xor, CASES_INT(bitxor) CASES_BOOL(bitxor))
KERNEL(k_shl, CASES_INT(shl))
KERNEL(k_shr_arith, CASES_INT(shrarith))
KERNEL(k_shr_logical, CASES_INT(shrlogical))

/* ---- unary --------------------------------------------------------------------- */

static goblin_err k_bitwise_not(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out) {
    KERNEL_BEGIN
    case GOBLIN_DTYPE_I8: LOOP1(int8_t, int8_t, goblin__bitnot_i8(a)); break;
    case GOBLIN_DTYPE_I16: LOOP1(int16_t, int16_t, goblin__bitnot_i16(a)); break;
    case GOBLIN_DTYPE_I32: LOOP1(int32_t, int32_t, goblin__bitnot_i32(a)); break;
    case GOBLIN_DTYPE_I64: LOOP1(int64_t, int64_t, goblin__bitnot_i64(a)); break;
    case GOBLIN_DTYPE_U8: LOOP1(uint8_t, uint8_t, goblin__bitnot_u8(a)); break;
    case GOBLIN_DTYPE_BOOL: LOOP1(uint8_t, uint8_t, goblin__bitnot_b(a)); break;
    KERNEL_END
}

#define UPRED_ALL(stem)                                                                     \
    case GOBLIN_DTYPE_F32: LOOP1(float, uint8_t, goblin__##stem##_f32(a)); break;           \
    case GOBLIN_DTYPE_F64: LOOP1(double, uint8_t, goblin__##stem##_f64(a)); break;          \
    case GOBLIN_DTYPE_F16: LOOP1(uint16_t, uint8_t, goblin__##stem##_f32(h2f(a))); break;   \
    case GOBLIN_DTYPE_BF16: LOOP1(uint16_t, uint8_t, goblin__##stem##_f32(b2f(a))); break;  \
    case GOBLIN_DTYPE_I8: LOOP1(int8_t, uint8_t, goblin__##stem##_i8(a)); break;            \
    case GOBLIN_DTYPE_I16: LOOP1(int16_t, uint8_t, goblin__##stem##_i16(a)); break;         \
    case GOBLIN_DTYPE_I32: LOOP1(int32_t, uint8_t, goblin__##stem##_i32(a)); break;         \
    case GOBLIN_DTYPE_I64: LOOP1(int64_t, uint8_t, goblin__##stem##_i64(a)); break;         \
    case GOBLIN_DTYPE_U8: LOOP1(uint8_t, uint8_t, goblin__##stem##_u8(a)); break;           \
    case GOBLIN_DTYPE_BOOL: LOOP1(uint8_t, uint8_t, goblin__##stem##_b(a)); break;

KERNEL(k_logical_not, UPRED_ALL(lognot))
KERNEL(k_isnan, UPRED_ALL(isnan))

/* ---- logical (the inputs' dtypes may differ) ------------------------------------- */

/* Nonzero-ness of element @p i; NaN is nonzero, -0.0 is zero. load_f64 is exact
 * about zero for every dtype (an int64 is 0 as a double only if it is 0). */
static inline uint8_t truth(const goblin_tensor *t, int64_t i) {
    return goblin__load_f64(t->dtype, t->data, i) != 0;
}

#define LOGICAL_KERNEL(name, stem)                                                          \
    static goblin_err name(goblin__kctx *k, const goblin__node *node,                       \
                           const goblin_tensor *in, int32_t n_in, goblin_tensor *out) {     \
        (void)k; (void)node;                                                                \
        goblin__nditer it;                                                                  \
        iter_setup(&it, in, n_in, out);                                                     \
        int64_t numel = goblin__numel(out);                                                 \
        uint8_t *po = out->data;                                                            \
        for (int64_t n = 0; n < numel; n++) {                                               \
            po[n] = goblin__##stem##_b(truth(&in[0], it.off[0]), truth(&in[1], it.off[1])); \
            goblin__nditer_next(&it);                                                       \
        }                                                                                   \
        return GOBLIN_OK;                                                                   \
    }

LOGICAL_KERNEL(k_logical_and, logand)
LOGICAL_KERNEL(k_logical_or, logor)
LOGICAL_KERNEL(k_logical_xor, logxor)

/* ---- where --------------------------------------------------------------------- */

#define LOOP3(T, EXPR)                                                                      \
    do {                                                                                    \
        const uint8_t *pc_ = (const uint8_t *)in[0].data;                                   \
        const T *pa_ = (const T *)in[1].data, *pb_ = (const T *)in[2].data;                 \
        T *po_ = (T *)out->data;                                                            \
        for (int64_t n_ = 0; n_ < numel; n_++) {                                            \
            uint8_t c = pc_[it.off[0]];                                                     \
            T a = pa_[it.off[1]], b = pb_[it.off[2]];                                       \
            po_[n_] = (EXPR);                                                               \
            goblin__nditer_next(&it);                                                       \
        }                                                                                   \
    } while (0)

static goblin_err k_where(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    goblin__nditer it;
    iter_setup(&it, in, n_in, out);
    int64_t numel = goblin__numel(out);
    goblin_dtype dt = in[1].dtype;
    switch (dt) {
    case GOBLIN_DTYPE_F32: LOOP3(float, goblin__where_f32(c, a, b)); break;
    case GOBLIN_DTYPE_F64: LOOP3(double, goblin__where_f64(c, a, b)); break;
    /* where moves bits and computes nothing, so halves are selected as raw bits */
    case GOBLIN_DTYPE_F16:
    case GOBLIN_DTYPE_BF16: LOOP3(uint16_t, c ? a : b); break;
    case GOBLIN_DTYPE_I8: LOOP3(int8_t, goblin__where_i8(c, a, b)); break;
    case GOBLIN_DTYPE_I16: LOOP3(int16_t, goblin__where_i16(c, a, b)); break;
    case GOBLIN_DTYPE_I32: LOOP3(int32_t, goblin__where_i32(c, a, b)); break;
    case GOBLIN_DTYPE_I64: LOOP3(int64_t, goblin__where_i64(c, a, b)); break;
    case GOBLIN_DTYPE_U8: LOOP3(uint8_t, goblin__where_u8(c, a, b)); break;
    case GOBLIN_DTYPE_BOOL: LOOP3(uint8_t, goblin__where_b(c, a, b)); break;
    default: return bad_dtype(k, node, dt);
    }
    return GOBLIN_OK;
}

/* ---- clamp --------------------------------------------------------------------- */

#define CLAMP_INT(sfx, T, TMIN, TMAX)                                                       \
    do {                                                                                    \
        T lo_ = has_lo ? (T)goblin__clamp_lo_bound(lo, TMIN, TMAX) : (T)(TMIN);             \
        T hi_ = has_hi ? (T)goblin__clamp_hi_bound(hi, TMIN, TMAX) : (T)(TMAX);             \
        LOOP1(T, T, goblin__clamp_##sfx(a, lo_, hi_));                                      \
    } while (0)

static goblin_err k_clamp(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    const goblin_attr *alo = goblin__attr_find(node, GOBLIN_ATTR_MIN);
    const goblin_attr *ahi = goblin__attr_find(node, GOBLIN_ATTR_MAX);
    bool has_lo = alo != NULL, has_hi = ahi != NULL;
    double lo = has_lo ? alo->v.f : -HUGE_VAL, hi = has_hi ? ahi->v.f : HUGE_VAL;
    if (lo != lo || hi != hi || lo > hi) /* inference rejects these; a kernel never trusts it */
        return goblin__errf(k->msg, k->cap, GOBLIN_ERANGE, "clamp bounds [%g, %g] are invalid", lo,
                            hi);
    float lof = (float)lo, hif = (float)hi;
    KERNEL_BEGIN
    case GOBLIN_DTYPE_F32: LOOP1(float, float, goblin__clamp_f32(a, lof, hif)); break;
    case GOBLIN_DTYPE_F64: LOOP1(double, double, goblin__clamp_f64(a, lo, hi)); break;
    case GOBLIN_DTYPE_F16:
        LOOP1(uint16_t, uint16_t, goblin__f32_to_f16(goblin__clamp_f32(h2f(a), lof, hif)));
        break;
    case GOBLIN_DTYPE_BF16:
        LOOP1(uint16_t, uint16_t, goblin__f32_to_bf16(goblin__clamp_f32(b2f(a), lof, hif)));
        break;
    case GOBLIN_DTYPE_I8: CLAMP_INT(i8, int8_t, INT8_MIN, INT8_MAX); break;
    case GOBLIN_DTYPE_I16: CLAMP_INT(i16, int16_t, INT16_MIN, INT16_MAX); break;
    case GOBLIN_DTYPE_I32: CLAMP_INT(i32, int32_t, INT32_MIN, INT32_MAX); break;
    case GOBLIN_DTYPE_I64: CLAMP_INT(i64, int64_t, INT64_MIN, INT64_MAX); break;
    case GOBLIN_DTYPE_U8: CLAMP_INT(u8, uint8_t, 0, UINT8_MAX); break;
    KERNEL_END
}

void goblin__ref_register_elementwise(goblin__kernel_fn *t) {
    t[GOBLIN_OP_ADD] = k_add;
    t[GOBLIN_OP_SUB] = k_sub;
    t[GOBLIN_OP_MUL] = k_mul;
    t[GOBLIN_OP_DIV] = k_div;
    t[GOBLIN_OP_POW] = k_pow;
    t[GOBLIN_OP_MAXIMUM] = k_maximum;
    t[GOBLIN_OP_MINIMUM] = k_minimum;
    t[GOBLIN_OP_CLAMP] = k_clamp;
    t[GOBLIN_OP_ATAN2] = k_atan2;
    t[GOBLIN_OP_EQ] = k_eq;
    t[GOBLIN_OP_NE] = k_ne;
    t[GOBLIN_OP_LT] = k_lt;
    t[GOBLIN_OP_LE] = k_le;
    t[GOBLIN_OP_GT] = k_gt;
    t[GOBLIN_OP_GE] = k_ge;
    t[GOBLIN_OP_LOGICAL_AND] = k_logical_and;
    t[GOBLIN_OP_LOGICAL_OR] = k_logical_or;
    t[GOBLIN_OP_LOGICAL_XOR] = k_logical_xor;
    t[GOBLIN_OP_LOGICAL_NOT] = k_logical_not;
    t[GOBLIN_OP_WHERE] = k_where;
    t[GOBLIN_OP_ISNAN] = k_isnan;
    t[GOBLIN_OP_FLOOR_DIV] = k_floor_div;
    t[GOBLIN_OP_TRUNC_DIV] = k_trunc_div;
    t[GOBLIN_OP_REM_FLOOR] = k_rem_floor;
    t[GOBLIN_OP_REM_TRUNC] = k_rem_trunc;
    t[GOBLIN_OP_BITWISE_AND] = k_bitwise_and;
    t[GOBLIN_OP_BITWISE_OR] = k_bitwise_or;
    t[GOBLIN_OP_BITWISE_XOR] = k_bitwise_xor;
    t[GOBLIN_OP_BITWISE_NOT] = k_bitwise_not;
    t[GOBLIN_OP_SHL] = k_shl;
    t[GOBLIN_OP_SHR_ARITH] = k_shr_arith;
    t[GOBLIN_OP_SHR_LOGICAL] = k_shr_logical;
}
