/* libgoblin/backends/cuda/cuda_formula.cu - FORMULA on the device: one fused
 * kernel that interprets the compiled stack program (formula_impl.h).
 *
 * Why an interpreter and not NVRTC: a formula is at most 256 instructions and
 * typically a handful, while the kernel is memory-bound (a few loads and one
 * store per element), so decoding the program costs little next to the memory
 * traffic, the more so as each thread runs every instruction on GC_FV elements
 * at once. NVRTC would add a run-time compiler dependency (libnvrtc, ~90 MB,
 * absent on many workers), a compile of hundreds of milliseconds per new
 * expression, a cache keyed by program bytes, and a second place where the
 * scalar semantics are spelled out as generated source. The interpreter calls
 * the scalar_ops.h functions directly, so FORMULA agrees with the elementwise
 * ops and the CPU evaluator (formula_eval.c) on every integer, NaN and
 * division-by-zero rule; f32 exp is the same polynomial as the CPU's. */
#include "cuda_scalar.h"

#include "kernels/expf.h"
extern "C" {
#include "core/formula_prog.h"
}

/* Stack depth D and elements per thread FV are template parameters: the
 * per-thread stack (D x FV values, in local memory) is sized to the program's
 * deepest stack, since local memory is reserved for every resident thread. */

/* The program as the kernel reads it (copied to shared memory per block). */
typedef struct gc_fplan {
    int32_t n_ins, n_vars, rank;
    uint8_t op[GOBLIN_FORMULA_MAX_NODES];
    uint8_t var[GOBLIN_FORMULA_MAX_NODES];
    uint64_t lit[GOBLIN_FORMULA_MAX_NODES]; /* literal bits in the compute type */
    uint8_t plain[GOBLIN_FORMULA_MAX_VARS]; /* full-size contiguous: offset = element index */
    int64_t shape[GOBLIN_MAX_RANK];
    int64_t vstr[GOBLIN_FORMULA_MAX_VARS][GOBLIN_MAX_RANK];
} gc_fplan;

/* f32 exp: kernels/expf.h's goblin__expf_inline (GOBLIN_HD), the very function of the CPU
 * evaluator (formula_eval.c) and BLIS's EXP: its explicit fmaf are the only fused
 * operations, as this file is built with --fmad=false, so FORMULA's f32 exp gives the CPU's
 * bits. */
__device__ __forceinline__ double gc_fexp(double x) { return exp(x); }
__device__ __forceinline__ float gc_fexp(float x) { return goblin__expf_inline(x); }

/* One opcode on compute type C (formula_eval.c's FE_UNARY/FE_BINARY/FE_TERNARY). */
template <typename C> __device__ __forceinline__ C gc_fop(int op, C x, C y, C z) {
    switch (op) {
    case GOBLIN__FOP_NOT: return (C)gc_lognot(x);
    case GOBLIN__FOP_ADD: return gc_plus(x, y);
    case GOBLIN__FOP_SUB: return gc_minus(x, y);
    case GOBLIN__FOP_MUL: return gc_times(x, y);
    case GOBLIN__FOP_FLOORDIV: return gc_floordiv(x, y);
    case GOBLIN__FOP_MOD: return gc_remfloor(x, y);
    case GOBLIN__FOP_POW: return gc_pow(x, y);
    case GOBLIN__FOP_MIN: return gc_minimum(x, y);
    case GOBLIN__FOP_MAX: return gc_maximum(x, y);
    case GOBLIN__FOP_EQ: return (C)gc_eq(x, y);
    case GOBLIN__FOP_NE: return (C)gc_ne(x, y);
    case GOBLIN__FOP_LT: return (C)gc_lt(x, y);
    case GOBLIN__FOP_LE: return (C)gc_le(x, y);
    case GOBLIN__FOP_GT: return (C)gc_gt(x, y);
    case GOBLIN__FOP_GE: return (C)gc_ge(x, y);
    case GOBLIN__FOP_AND: return (C)gc_logand(x, y);
    case GOBLIN__FOP_OR: return (C)gc_logor(x, y);
    case GOBLIN__FOP_RELU: return gc_maximum(x, (C)0);
    case GOBLIN__FOP_WHERE: return x != 0 ? y : z;
    case GOBLIN__FOP_CLAMP: return gc_clamp(x, y, z);
    case GOBLIN__FOP_FLOOR:
    case GOBLIN__FOP_CEIL:
    case GOBLIN__FOP_ROUND:
    case GOBLIN__FOP_TRUNC:
        if constexpr (!gc_ty<C>::is_float) return x;
        break;
    default: break;
    }
    if constexpr (gc_ty<C>::is_float) {
        switch (op) {
        case GOBLIN__FOP_NEG: return -x;
        case GOBLIN__FOP_ABS: return fabs(x);
        case GOBLIN__FOP_EXP: return gc_fexp(x);
        case GOBLIN__FOP_LOG: return log(x);
        case GOBLIN__FOP_SQRT: return sqrt(x);
        case GOBLIN__FOP_RSQRT: return (C)1 / sqrt(x);
        case GOBLIN__FOP_SIN: return sin(x);
        case GOBLIN__FOP_COS: return cos(x);
        case GOBLIN__FOP_TANH: return tanh(x);
        case GOBLIN__FOP_ERF: return erf(x);
        case GOBLIN__FOP_FLOOR: return floor(x);
        case GOBLIN__FOP_CEIL: return ceil(x);
        case GOBLIN__FOP_ROUND: return rint(x);
        case GOBLIN__FOP_TRUNC: return trunc(x);
        case GOBLIN__FOP_SIGMOID: return (C)1 / ((C)1 + gc_fexp(-x));
        case GOBLIN__FOP_LOG1P: return log1p(x);
        case GOBLIN__FOP_EXPM1: return expm1(x);
        case GOBLIN__FOP_DIV: return gc_div(x, y);
        default: return 0;
        }
    } else {
        switch (op) {
        case GOBLIN__FOP_NEG: return gc_minus((C)0, x);
        case GOBLIN__FOP_ABS:
            if constexpr ((C)-1 < (C)0) return x < 0 ? gc_minus((C)0, x) : x;
            else return x;
        case GOBLIN__FOP_BITNOT: return gc_bitnot(x);
        case GOBLIN__FOP_BITAND: return gc_bitand(x, y);
        case GOBLIN__FOP_BITOR: return gc_bitor(x, y);
        case GOBLIN__FOP_BITXOR: return gc_bitxor(x, y);
        case GOBLIN__FOP_SHL: return gc_shl(x, y);
        case GOBLIN__FOP_SHR: return gc_shrarith(x, y);
        default: return 0;
        }
    }
}

/* S: storage type of inputs and output; C: compute type. */
template <typename S, typename C, int D, int GC_FV>
__global__ void __launch_bounds__(GC_THREADS)
k_formula(const gc_fplan *gplan, const void *const *vars, S *out, int64_t n) {
    __shared__ gc_fplan pl;
    {
        /* cooperative copy of the plan into shared memory */
        const uint32_t *src = (const uint32_t *)gplan;
        uint32_t *dst = (uint32_t *)&pl;
        for (size_t w = threadIdx.x; w < sizeof(gc_fplan) / 4; w += blockDim.x) dst[w] = src[w];
        __syncthreads();
    }
    C st[D][GC_FV];
    int64_t per_block = (int64_t)blockDim.x * GC_FV;
    for (int64_t base = blockIdx.x * per_block; base < n; base += (int64_t)gridDim.x * per_block) {
        int64_t idx[GC_FV];
        for (int e = 0; e < GC_FV; e++) idx[e] = base + e * (int64_t)blockDim.x + threadIdx.x;
        int sp = 0;
        for (int32_t i = 0; i < pl.n_ins; i++) {
            int op = pl.op[i];
            if (op == GOBLIN__FOP_VAR) {
                int v = pl.var[i];
                const S *src = (const S *)vars[v];
                for (int e = 0; e < GC_FV; e++) {
                    int64_t k = idx[e] < n ? idx[e] : n - 1;
                    int64_t off = k;
                    if (!pl.plain[v]) {
                        off = 0;
                        for (int32_t d = pl.rank - 1; d >= 0; d--) {
                            int64_t q = k % pl.shape[d];
                            k /= pl.shape[d];
                            off += q * pl.vstr[v][d];
                        }
                    }
                    st[sp][e] = (C)gc_ty<S>::load(src[off]);
                }
                sp++;
            } else if (op == GOBLIN__FOP_INT || op == GOBLIN__FOP_FLOAT) {
                C lit;
                uint64_t bits = pl.lit[i];
                memcpy(&lit, &bits, sizeof lit);
                for (int e = 0; e < GC_FV; e++) st[sp][e] = lit;
                sp++;
            } else {
                int ar = op >= GOBLIN__FOP_WHERE ? 3 : op >= GOBLIN__FOP_ADD ? 2 : 1;
                int a0 = sp - ar;
                for (int e = 0; e < GC_FV; e++) {
                    C x = st[a0][e];
                    C y = ar > 1 ? st[a0 + 1][e] : (C)0;
                    C z = ar > 2 ? st[a0 + 2][e] : (C)0;
                    st[a0][e] = gc_fop<C>(op, x, y, z);
                }
                sp = a0 + 1;
            }
        }
        for (int e = 0; e < GC_FV; e++)
            if (idx[e] < n) out[idx[e]] = gc_ty<S>::store((typename gc_ty<S>::acc_t)st[0][e]);
    }
}

static uint64_t get_u64(const uint8_t *b) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = (v << 8) | b[k];
    return v;
}

/* Literal bits in compute type C (formula_eval.c's plan rules). */
template <typename C> static uint64_t lit_bits(int op, uint64_t u) {
    C t;
    if (op == GOBLIN__FOP_INT) {
        if constexpr (gc_ty<C>::is_float) t = (C)(int64_t)u; /* one rounding */
        else t = (C)u;                                        /* wraps modulo 2^bits */
    } else {
        double dv;
        memcpy(&dv, &u, 8);
        t = (C)dv;
    }
    uint64_t bits = 0;
    memcpy(&bits, &t, sizeof t);
    return bits;
}

template <typename S, typename C>
static goblin_err formula_t(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out, int32_t depth) {
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    gc_fplan *pl = (gc_fplan *)goblin__calloc(1, sizeof *pl);
    if (!pl) return GOBLIN_ENOMEM;
    const uint8_t *prog = (const uint8_t *)n->payload;
    pl->n_vars = n_in;
    pl->n_ins = prog[4] | (prog[5] << 8);
    size_t o = GOBLIN__FPROG_HEADER;
    for (int32_t i = 0; i < pl->n_ins; i++) {
        int op = prog[o++];
        pl->op[i] = (uint8_t)op;
        if (op == GOBLIN__FOP_VAR) {
            pl->var[i] = prog[o++];
        } else if (op == GOBLIN__FOP_INT || op == GOBLIN__FOP_FLOAT) {
            pl->lit[i] = lit_bits<C>(op, get_u64(prog + o));
            o += 8;
        }
    }
    pl->rank = out->rank;
    for (int32_t d = 0; d < out->rank; d++) pl->shape[d] = out->shape[d];
    for (int32_t v = 0; v < n_in; v++) {
        const goblin_tensor *ops[1] = {&in[v]};
        gc_bcast b;
        gc_bcast_init(&b, ops, 1, out);
        pl->plain[v] = b.plain;
        for (int32_t d = 0; d < out->rank; d++) pl->vstr[v][d] = b.strides[0][d];
    }
    gc_fplan *dplan = NULL;
    const void **dvars = NULL;
    const void *hvars[GOBLIN_FORMULA_MAX_VARS] = {0};
    for (int32_t v = 0; v < n_in; v++) hvars[v] = in[v].data;
    goblin_err g = gc_scratch(c, sizeof *dplan, (void **)&dplan);
    if (g == GOBLIN_OK) g = gc_scratch(c, sizeof hvars, (void **)&dvars);
    cudaError_t e = cudaSuccess;
    if (g == GOBLIN_OK &&
        ((e = cudaMemcpyAsync(dplan, pl, sizeof *pl, cudaMemcpyHostToDevice, c->stream)) != cudaSuccess ||
         (e = cudaMemcpyAsync(dvars, hvars, sizeof hvars, cudaMemcpyHostToDevice, c->stream)) != cudaSuccess))
        g = gc_fail(c->k->msg, c->k->cap, e, "copying the formula program");
    /* The host copies above are from pageable memory: wait before freeing pl. */
    if (g == GOBLIN_OK) g = gc_sync(c, "copying the formula program");
    goblin__free(pl);
    if (g != GOBLIN_OK) return g;
    int fv = depth <= 32 ? 4 : 1;
    int64_t per_block = (int64_t)GC_THREADS * fv;
    int64_t blocks = (cnt + per_block - 1) / per_block;
    if (blocks > 65535 * 16) blocks = 65535 * 16;
    if (depth <= 8)
        k_formula<S, C, 8, 4><<<(unsigned)blocks, GC_THREADS, 0, c->stream>>>(
            dplan, dvars, (S *)out->data, cnt);
    else if (depth <= 32)
        k_formula<S, C, 32, 4><<<(unsigned)blocks, GC_THREADS, 0, c->stream>>>(
            dplan, dvars, (S *)out->data, cnt);
    else
        k_formula<S, C, GOBLIN_FORMULA_MAX_NODES, 1><<<(unsigned)blocks, GC_THREADS, 0,
                                                       c->stream>>>(dplan, dvars,
                                                                    (S *)out->data, cnt);
    GC_LAUNCHED(c, "formula");
    return GOBLIN_OK;
}

static goblin_err k_formula_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    /* Kernels never trust a payload: validate it as the CPU evaluator does. */
    goblin__fprog_info info;
    goblin_err g = goblin__formula_validate(n->payload, n->payload_size, n_in, out->dtype, &info,
                                            c->k->msg, c->k->cap);
    if (g != GOBLIN_OK) return g;
    for (int32_t v = 0; v < n_in; v++)
        if (in[v].dtype != out->dtype)
            return goblin__errf(c->k->msg, c->k->cap, GOBLIN_EDTYPE,
                                "formula input %d is %s, output is %s", (int)v,
                                goblin_dtype_name(in[v].dtype), goblin_dtype_name(out->dtype));
    switch (out->dtype) {
    case GOBLIN_DTYPE_F32: return formula_t<float, float>(c, n, in, n_in, out, info.max_depth);
    case GOBLIN_DTYPE_F64: return formula_t<double, double>(c, n, in, n_in, out, info.max_depth);
    case GOBLIN_DTYPE_F16: return formula_t<gc_f16, float>(c, n, in, n_in, out, info.max_depth);
    case GOBLIN_DTYPE_BF16: return formula_t<gc_bf16, float>(c, n, in, n_in, out, info.max_depth);
    case GOBLIN_DTYPE_I8: return formula_t<int8_t, int8_t>(c, n, in, n_in, out, info.max_depth);
    case GOBLIN_DTYPE_I16: return formula_t<int16_t, int16_t>(c, n, in, n_in, out, info.max_depth);
    case GOBLIN_DTYPE_I32: return formula_t<int32_t, int32_t>(c, n, in, n_in, out, info.max_depth);
    case GOBLIN_DTYPE_I64: return formula_t<int64_t, int64_t>(c, n, in, n_in, out, info.max_depth);
    case GOBLIN_DTYPE_U8: return formula_t<uint8_t, uint8_t>(c, n, in, n_in, out, info.max_depth);
    default:
        return goblin__errf(c->k->msg, c->k->cap, GOBLIN_ENOTSUP, "cuda: formula over %s",
                            goblin_dtype_name(out->dtype));
    }
}

static bool formula_supports(const goblin__node *n, const goblin__node *const *in) {
    return n->dtype != GOBLIN_DTYPE_BOOL && n->n_inputs <= GOBLIN_FORMULA_MAX_VARS;
}

void gc_register_formula(gc_entry *t) {
    t[GOBLIN_OP_FORMULA].fn = k_formula_op;
    t[GOBLIN_OP_FORMULA].supports = formula_supports;
}
