/* libgoblin/backends/cuda/cuda_elementwise.cu - the elementwise group on the
 * device: arithmetic, comparison, logic and integer ops. Every element is
 * computed by the same scalar_ops.h function the reference backend calls, so
 * integer wraparound, division by zero, NaN and shift-count rules agree by
 * construction; f16/bf16 compute in f32 and round once on store. Broadcasting
 * is done in the kernel from the inputs' own (contiguous) shapes. */
#include "cuda_scalar.h"

/* The output storage type for a scalar result R computed from storage type T:
 * bool results go to a bool tensor, everything else keeps T. */
template <typename T, typename R> struct gc_out { typedef T type; };
template <typename T> struct gc_out<T, bool> { typedef gc_bool type; };

template <typename O, typename R> __device__ __forceinline__ O gc_put(R r) {
    return gc_ty<O>::store((typename gc_ty<O>::acc_t)r);
}

/* ---- binary ------------------------------------------------------------------ */

template <typename T, typename O, typename Op>
__global__ void k_binary(const T *a, const T *b, O *out, int64_t n, gc_bcast bc, Op op) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[2];
        gc_bcast_offsets(bc, i, 2, off);
        out[i] = gc_put<O>(op(gc_ty<T>::load(a[off[0]]), gc_ty<T>::load(b[off[1]])));
    }
}

template <typename T, typename Op>
static goblin_err run_binary_t(gc_call *c, const goblin_tensor *in, goblin_tensor *out, Op op) {
    typedef typename gc_ty<T>::acc_t A;
    typedef decltype(op(A(), A())) R;
    typedef typename gc_out<T, R>::type O;
    int64_t n = gc_numel(out);
    if (n == 0) return GOBLIN_OK;
    const goblin_tensor *ops[2] = {&in[0], &in[1]};
    gc_bcast bc;
    gc_bcast_init(&bc, ops, 2, out);
    k_binary<T, O, Op><<<gc_blocks(n, GC_THREADS), GC_THREADS, 0, c->stream>>>(
        (const T *)in[0].data, (const T *)in[1].data, (O *)out->data, n, bc, op);
    GC_LAUNCHED(c, "binary");
    return GOBLIN_OK;
}

static goblin_err bad_dtype(gc_call *c, const goblin__node *n, goblin_dtype dt) {
    /* ENOTSUP: the executor then runs the reference kernel (counted). */
    return goblin__errf(c->k->msg, c->k->cap, GOBLIN_ENOTSUP, "cuda: %s has no kernel for %s",
                        goblin_op_name(n->op), goblin_dtype_name(dt));
}

/* Dtype classes per op, matching the catalogue's masks (ops_elementwise.c). */
enum { DC_ALL, DC_NUM, DC_FLOAT, DC_INT, DC_INT_BOOL };

#define BIN_FUNCTOR(NAME, stem)                                                              \
    struct f_##NAME {                                                                        \
        template <typename A> __device__ __forceinline__ auto operator()(A a, A b) const {  \
            return gc_##stem(a, b);                                                          \
        }                                                                                    \
    };

#define BIN_KERNEL(NAME, DISPATCH)                                                           \
    static goblin_err k_##NAME(gc_call *c, const goblin__node *n, const goblin_tensor *in,  \
                               int32_t n_in, goblin_tensor *out) {                           \
        goblin_err g = GOBLIN_ENOTSUP;                                                       \
        DISPATCH(in[0].dtype, g = run_binary_t<T>(c, in, out, f_##NAME()));                  \
        if (g == GOBLIN_ENOTSUP) return bad_dtype(c, n, in[0].dtype);                        \
        return g;                                                                            \
    }

#define GC_DISPATCH_NUM_BOOL(DT, BODY)                                                       \
    switch (DT) {                                                                            \
        GC_CASE_(GOBLIN_DTYPE_BOOL, gc_bool, BODY)                                           \
    default: GC_DISPATCH_NUMERIC(DT, BODY) break;                                            \
    }
#define GC_DISPATCH_INT_BOOL(DT, BODY)                                                       \
    switch (DT) {                                                                            \
        GC_CASE_(GOBLIN_DTYPE_BOOL, gc_bool, BODY)                                           \
    default: GC_DISPATCH_INT(DT, BODY) break;                                                \
    }
#define GC_DISPATCH_NUM_ONLY(DT, BODY) GC_DISPATCH_NUMERIC(DT, BODY)

#define BIN(NAME, stem, DISPATCH) BIN_FUNCTOR(NAME, stem) BIN_KERNEL(NAME, DISPATCH)

BIN(add, plus, GC_DISPATCH_ALL)
BIN(sub, minus, GC_DISPATCH_NUM_ONLY)
BIN(mul, times, GC_DISPATCH_ALL)
BIN(div, div, GC_DISPATCH_FLOAT)
BIN(pow, pow, GC_DISPATCH_NUM_ONLY)
BIN(maximum, maximum, GC_DISPATCH_ALL)
BIN(minimum, minimum, GC_DISPATCH_ALL)
BIN(atan2, atan2, GC_DISPATCH_FLOAT)
BIN(eq, eq, GC_DISPATCH_ALL)
BIN(ne, ne, GC_DISPATCH_ALL)
BIN(lt, lt, GC_DISPATCH_ALL)
BIN(le, le, GC_DISPATCH_ALL)
BIN(gt, gt, GC_DISPATCH_ALL)
BIN(ge, ge, GC_DISPATCH_ALL)
BIN(floor_div, floordiv, GC_DISPATCH_NUM_ONLY)
BIN(trunc_div, truncdiv, GC_DISPATCH_NUM_ONLY)
BIN(rem_floor, remfloor, GC_DISPATCH_NUM_ONLY)
BIN(rem_trunc, remtrunc, GC_DISPATCH_NUM_ONLY)
BIN(bitwise_and, bitand, GC_DISPATCH_INT_BOOL)
BIN(bitwise_or, bitor, GC_DISPATCH_INT_BOOL)
BIN(bitwise_xor, bitxor, GC_DISPATCH_INT_BOOL)
BIN(shl, shl, GC_DISPATCH_INT)
BIN(shr_arith, shrarith, GC_DISPATCH_INT)
BIN(shr_logical, shrlogical, GC_DISPATCH_INT)

/* ---- logical ops: the two inputs may differ in dtype ---------------------------
 * Each input is first reduced to "nonzero" (NaN counts as nonzero, -0.0 as
 * zero), then the op runs on bools. */

template <typename T> __global__ void k_nonzero(const T *x, uint8_t *out, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = gc_ty<T>::load(x[i]) != 0;
}

goblin_err gc_nonzero(gc_call *c, const goblin_tensor *x, goblin_tensor *as_bool) {
    *as_bool = *x;
    as_bool->dtype = GOBLIN_DTYPE_BOOL;
    int64_t n = gc_numel(x);
    void *d = NULL;
    GC_TRYG(gc_scratch(c, (size_t)n, &d));
    as_bool->data = d;
    if (n == 0) return GOBLIN_OK;
    GC_DISPATCH_ALL(x->dtype, (k_nonzero<T><<<gc_blocks(n, GC_THREADS), GC_THREADS, 0,
                                               c->stream>>>((const T *)x->data, (uint8_t *)d, n)));
    GC_LAUNCHED(c, "nonzero");
    return GOBLIN_OK;
}

#define LOGICAL(NAME, stem)                                                                  \
    BIN_FUNCTOR(NAME, stem)                                                                  \
    static goblin_err k_##NAME(gc_call *c, const goblin__node *n, const goblin_tensor *in,  \
                               int32_t n_in, goblin_tensor *out) {                           \
        goblin_tensor b[2];                                                                  \
        GC_TRYG(gc_nonzero(c, &in[0], &b[0]));                                               \
        GC_TRYG(gc_nonzero(c, &in[1], &b[1]));                                               \
        return run_binary_t<gc_bool>(c, b, out, f_##NAME());                                 \
    }

LOGICAL(logical_and, logand)
LOGICAL(logical_or, logor)
LOGICAL(logical_xor, logxor)

/* ---- unary in this group ------------------------------------------------------- */

template <typename T, typename O, typename Op>
__global__ void k_unary(const T *x, O *out, int64_t n, Op op) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = gc_put<O>(op(gc_ty<T>::load(x[i])));
}

template <typename T, typename Op>
static goblin_err run_unary_t(gc_call *c, const goblin_tensor *x, goblin_tensor *out, Op op) {
    typedef typename gc_ty<T>::acc_t A;
    typedef decltype(op(A())) R;
    typedef typename gc_out<T, R>::type O;
    int64_t n = gc_numel(out);
    if (n == 0) return GOBLIN_OK;
    k_unary<T, O, Op><<<gc_blocks(n, GC_THREADS), GC_THREADS, 0, c->stream>>>(
        (const T *)x->data, (O *)out->data, n, op);
    GC_LAUNCHED(c, "unary");
    return GOBLIN_OK;
}

struct f_lognot {
    template <typename A> __device__ __forceinline__ bool operator()(A a) const {
        return gc_lognot(a);
    }
};
struct f_isnan {
    template <typename A> __device__ __forceinline__ bool operator()(A a) const {
        return gc_isnan(a);
    }
};
struct f_bitnot {
    template <typename A> __device__ __forceinline__ auto operator()(A a) const {
        return gc_bitnot(a);
    }
};

static goblin_err k_logical_not(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out) {
    goblin_err g = GOBLIN_ENOTSUP;
    GC_DISPATCH_ALL(in[0].dtype, g = run_unary_t<T>(c, &in[0], out, f_lognot()));
    return g == GOBLIN_ENOTSUP ? bad_dtype(c, n, in[0].dtype) : g;
}

static goblin_err k_isnan(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    goblin_err g = GOBLIN_ENOTSUP;
    GC_DISPATCH_ALL(in[0].dtype, g = run_unary_t<T>(c, &in[0], out, f_isnan()));
    return g == GOBLIN_ENOTSUP ? bad_dtype(c, n, in[0].dtype) : g;
}

static goblin_err k_bitwise_not(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out) {
    goblin_err g = GOBLIN_ENOTSUP;
    GC_DISPATCH_INT_BOOL(in[0].dtype, g = run_unary_t<T>(c, &in[0], out, f_bitnot()));
    return g == GOBLIN_ENOTSUP ? bad_dtype(c, n, in[0].dtype) : g;
}

/* CLAMP: bounds are attributes (doubles). Floats: the bound rounded to the
 * computing type, +-inf when absent; integers: goblin__clamp_lo/hi_bound. */
template <typename A> struct f_clamp {
    A lo, hi;
    __device__ __forceinline__ A operator()(A x) const { return gc_clamp(x, lo, hi); }
};

template <typename T> static goblin_err run_clamp(gc_call *c, const goblin__node *n,
                                                  const goblin_tensor *x, goblin_tensor *out) {
    typedef typename gc_ty<T>::acc_t A;
    const goblin_attr *lo = goblin__attr_find(n, GOBLIN_ATTR_MIN);
    const goblin_attr *hi = goblin__attr_find(n, GOBLIN_ATTR_MAX);
    f_clamp<A> f;
    if constexpr (gc_ty<T>::is_float) {
        f.lo = lo ? (A)lo->v.f : (A)-INFINITY;
        f.hi = hi ? (A)hi->v.f : (A)INFINITY;
    } else {
        int64_t tmin = gc_lim<A>::lo, tmax = gc_lim<A>::hi;
        f.lo = (A)(lo ? goblin__clamp_lo_bound(lo->v.f, tmin, tmax) : tmin);
        f.hi = (A)(hi ? goblin__clamp_hi_bound(hi->v.f, tmin, tmax) : tmax);
    }
    return run_unary_t<T>(c, x, out, f);
}

static goblin_err k_clamp(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    goblin_err g = GOBLIN_ENOTSUP;
    GC_DISPATCH_NUMERIC(in[0].dtype, g = run_clamp<T>(c, n, &in[0], out));
    return g == GOBLIN_ENOTSUP ? bad_dtype(c, n, in[0].dtype) : g;
}

/* WHERE: elements are copied bit for bit; bool outputs are normalized to 0/1. */
template <typename T> __device__ __forceinline__ T gc_pick(bool c, T a, T b) { return c ? a : b; }
template <> __device__ __forceinline__ gc_bool gc_pick(bool c, gc_bool a, gc_bool b) {
    gc_bool r;
    r.v = (c ? a.v : b.v) != 0;
    return r;
}

template <typename T>
__global__ void k_where(const uint8_t *cond, const T *a, const T *b, T *out, int64_t n,
                        gc_bcast bc) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        gc_bcast_offsets(bc, i, 3, off);
        out[i] = gc_pick<T>(cond[off[0]] != 0, a[off[1]], b[off[2]]);
    }
}

static goblin_err k_where_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                             int32_t n_in, goblin_tensor *out) {
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    const goblin_tensor *ops[3] = {&in[0], &in[1], &in[2]};
    gc_bcast bc;
    gc_bcast_init(&bc, ops, 3, out);
    bool done = false;
    GC_DISPATCH_ALL(in[1].dtype, (k_where<T><<<gc_blocks(cnt, GC_THREADS), GC_THREADS, 0,
                                                c->stream>>>(
                                      (const uint8_t *)in[0].data, (const T *)in[1].data,
                                      (const T *)in[2].data, (T *)out->data, cnt, bc),
                                  done = true));
    if (!done) return bad_dtype(c, n, in[1].dtype);
    GC_LAUNCHED(c, "where");
    return GOBLIN_OK;
}

void gc_register_elementwise(gc_entry *t) {
#define REG(OP, NAME) t[GOBLIN_OP_##OP].fn = k_##NAME;
    REG(ADD, add) REG(SUB, sub) REG(MUL, mul) REG(DIV, div) REG(POW, pow)
    REG(MAXIMUM, maximum) REG(MINIMUM, minimum) REG(CLAMP, clamp) REG(ATAN2, atan2)
    REG(EQ, eq) REG(NE, ne) REG(LT, lt) REG(LE, le) REG(GT, gt) REG(GE, ge)
    REG(LOGICAL_AND, logical_and) REG(LOGICAL_OR, logical_or) REG(LOGICAL_XOR, logical_xor)
    REG(LOGICAL_NOT, logical_not) REG(WHERE, where_op) REG(ISNAN, isnan)
    REG(FLOOR_DIV, floor_div) REG(TRUNC_DIV, trunc_div) REG(REM_FLOOR, rem_floor)
    REG(REM_TRUNC, rem_trunc) REG(BITWISE_AND, bitwise_and) REG(BITWISE_OR, bitwise_or)
    REG(BITWISE_XOR, bitwise_xor) REG(BITWISE_NOT, bitwise_not) REG(SHL, shl)
    REG(SHR_ARITH, shr_arith) REG(SHR_LOGICAL, shr_logical)
#undef REG
}
