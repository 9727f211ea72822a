/* libgoblin/backends/cuda/cuda_unary.cu - unary math, activations and cast on
 * the device, with the reference's rules (ref_unary.c): float math runs in
 * double for every float dtype and is rounded once on store; integer ops work
 * on sign-extended 64-bit patterns and wrap on store; cast converts with the
 * same saturation, NaN and rounding rules. */
#include "cuda_scalar.h"

enum {
    U_NEG, U_ABS, U_SIGN, U_EXP, U_LOG, U_SQRT, U_RSQRT, U_RECIP, U_SIN, U_COS, U_TANH, U_ERF,
    U_FLOOR, U_CEIL, U_ROUND, U_TRUNC, U_LOG1P, U_EXPM1, U_SQUARE, U_RELU, U_GELU_ERF,
    U_GELU_TANH, U_SILU, U_SIGMOID
};

__device__ __forceinline__ double gc_unary_f(int op, double x) {
    switch (op) {
    case U_NEG: return -x;
    case U_ABS: return fabs(x);
    case U_SIGN: return x > 0 ? 1.0 : x < 0 ? -1.0 : x != x ? x : 0.0;
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_RSQRT: return 1.0 / sqrt(x);
    case U_RECIP: return 1.0 / x;
    case U_SIN: return sin(x);
    case U_COS: return cos(x);
    case U_TANH: return tanh(x);
    case U_ERF: return erf(x);
    case U_FLOOR: return floor(x);
    case U_CEIL: return ceil(x);
    case U_ROUND: return rint(x); /* halves to even, as nearbyint in the reference */
    case U_TRUNC: return trunc(x);
    case U_LOG1P: return log1p(x);
    case U_EXPM1: return expm1(x);
    case U_SQUARE: return x * x;
    case U_RELU: return x < 0 ? 0.0 : x;
    case U_GELU_ERF: return 0.5 * x * erfc(-x * 0.70710678118654752440);
    case U_GELU_TANH: {
        double a = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
        return x / (1.0 + exp(-2.0 * a));
    }
    case U_SILU: return x / (1.0 + exp(-x));
    case U_SIGMOID: return 1.0 / (1.0 + exp(-x));
    default: return x;
    }
}

__device__ __forceinline__ uint64_t gc_unary_i(int op, uint64_t x) {
    switch (op) {
    case U_NEG: return 0u - x;
    case U_ABS: return (x >> 63) ? 0u - x : x;
    case U_SIGN: return x == 0 ? 0u : (x >> 63) ? ~(uint64_t)0 : 1u;
    case U_SQUARE: return x * x;
    case U_RELU: return (x >> 63) ? 0u : x;
    default: return x; /* floor/ceil/round/trunc of an integer */
    }
}

template <typename T>
__global__ void k_unary_op(const T *x, T *y, int64_t n, int op) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if constexpr (gc_ty<T>::is_float) y[i] = gc_st_d<T>(gc_unary_f(op, gc_ld_f(x[i])));
        else y[i] = gc_st_u64<T>(gc_unary_i(op, gc_ld_u64(x[i])));
    }
}

static int unary_code(const goblin__node *n) {
    switch (n->op) {
    case GOBLIN_OP_NEG: return U_NEG;
    case GOBLIN_OP_ABS: return U_ABS;
    case GOBLIN_OP_SIGN: return U_SIGN;
    case GOBLIN_OP_EXP: return U_EXP;
    case GOBLIN_OP_LOG: return U_LOG;
    case GOBLIN_OP_SQRT: return U_SQRT;
    case GOBLIN_OP_RSQRT: return U_RSQRT;
    case GOBLIN_OP_RECIPROCAL: return U_RECIP;
    case GOBLIN_OP_SIN: return U_SIN;
    case GOBLIN_OP_COS: return U_COS;
    case GOBLIN_OP_TANH: return U_TANH;
    case GOBLIN_OP_ERF: return U_ERF;
    case GOBLIN_OP_FLOOR: return U_FLOOR;
    case GOBLIN_OP_CEIL: return U_CEIL;
    case GOBLIN_OP_ROUND: return U_ROUND;
    case GOBLIN_OP_TRUNC: return U_TRUNC;
    case GOBLIN_OP_LOG1P: return U_LOG1P;
    case GOBLIN_OP_EXPM1: return U_EXPM1;
    case GOBLIN_OP_SQUARE: return U_SQUARE;
    case GOBLIN_OP_RELU: return U_RELU;
    case GOBLIN_OP_GELU:
        return goblin__attr_i(n, GOBLIN_ATTR_APPROXIMATE, GOBLIN_GELU_ERF) == GOBLIN_GELU_TANH
                   ? U_GELU_TANH
                   : U_GELU_ERF;
    case GOBLIN_OP_SILU: return U_SILU;
    case GOBLIN_OP_SIGMOID: return U_SIGMOID;
    default: return -1;
    }
}

/* Integer dtypes take only the ops the reference defines on them. */
static bool int_ok(int code) {
    return code == U_NEG || code == U_ABS || code == U_SIGN || code == U_SQUARE ||
           code == U_RELU || code == U_FLOOR || code == U_CEIL || code == U_ROUND ||
           code == U_TRUNC;
}

static bool unary_supports(const goblin__node *n, const goblin__node *const *in) {
    goblin_dtype dt = in[0]->dtype;
    int code = unary_code(n);
    if (code < 0 || dt == GOBLIN_DTYPE_BOOL) return false;
    return gc_is_float(dt) || int_ok(code);
}

static goblin_err k_unary(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    int code = unary_code(n);
    goblin_dtype dt = in[0].dtype;
    if (code < 0 || dt == GOBLIN_DTYPE_BOOL || (!gc_is_float(dt) && !int_ok(code)))
        return goblin__errf(c->k->msg, c->k->cap, GOBLIN_ENOTSUP, "cuda: %s does not take %s",
                            goblin_op_name(n->op), goblin_dtype_name(dt));
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    unsigned b = gc_blocks(cnt, GC_THREADS);
    GC_DISPATCH_NUMERIC(dt, (k_unary_op<T><<<b, GC_THREADS, 0, c->stream>>>(
                                (const T *)in[0].data, (T *)out->data, cnt, code)));
    GC_LAUNCHED(c, "unary");
    return GOBLIN_OK;
}

/* ---- CAST ------------------------------------------------------------------------ */

template <typename S, typename D> __global__ void k_cast(const S *x, D *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if constexpr (gc_ty<S>::is_float) y[i] = gc_st_d<D>(gc_ld_f(x[i]));
        else y[i] = gc_st_u64<D>(gc_ld_u64(x[i]));
    }
}

template <typename S>
static void cast_from(gc_call *c, const goblin_tensor *x, goblin_tensor *out, int64_t cnt) {
    unsigned b = gc_blocks(cnt, GC_THREADS);
    GC_DISPATCH_ALL(out->dtype, (k_cast<S, T><<<b, GC_THREADS, 0, c->stream>>>(
                                    (const S *)x->data, (T *)out->data, cnt)));
}

static goblin_err k_cast_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    /* The outer dispatch binds T to the source type; cast_from rebinds it. */
    GC_DISPATCH_ALL(in[0].dtype, cast_from<T>(c, &in[0], out, cnt));
    GC_LAUNCHED(c, "cast");
    return GOBLIN_OK;
}

void gc_register_unary(gc_entry *t) {
    static const goblin_op unary[] = {
        GOBLIN_OP_NEG,   GOBLIN_OP_ABS,   GOBLIN_OP_SIGN,  GOBLIN_OP_EXP,        GOBLIN_OP_LOG,
        GOBLIN_OP_SQRT,  GOBLIN_OP_RSQRT, GOBLIN_OP_RECIPROCAL, GOBLIN_OP_SIN,   GOBLIN_OP_COS,
        GOBLIN_OP_TANH,  GOBLIN_OP_ERF,   GOBLIN_OP_FLOOR, GOBLIN_OP_CEIL,       GOBLIN_OP_ROUND,
        GOBLIN_OP_TRUNC, GOBLIN_OP_LOG1P, GOBLIN_OP_EXPM1, GOBLIN_OP_SQUARE,     GOBLIN_OP_RELU,
        GOBLIN_OP_GELU,  GOBLIN_OP_SILU,  GOBLIN_OP_SIGMOID};
    for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
        t[unary[i]].fn = k_unary;
        t[unary[i]].supports = unary_supports;
    }
    t[GOBLIN_OP_CAST].fn = k_cast_op;
}
