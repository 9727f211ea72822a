/* libgoblin/backends/ref/formula_eval.c - the FORMULA evaluator, shared by every CPU backend.
 *
 * One fused pass over memory: the output is cut into blocks of
 * GOBLIN__FORMULA_BLOCK elements; for each block the variables are fetched
 * (pointed at directly when an input is contiguous and full-size, gathered into a
 * block-sized slot when it broadcasts or is strided, folded into a constant when
 * it has one element), then each instruction of the program runs one tight loop
 * over the block, from block-sized registers into a block-sized register (the
 * last one straight into the output). Registers stay in L1; nothing full-size is
 * allocated.
 *
 * A "plan" is built per call from the validated program: the stack machine is
 * simulated once to assign registers and to fold every sub-expression whose
 * operands are all constants (literals and one-element inputs) with the very
 * same scalar functions the loops use, so folding never changes a bit.
 *
 * Determinism: every element is computed by the same sequence of IEEE operations
 * whatever the thread count and whichever CPU clone runs, because contraction
 * into FMA is disabled in this file (the only fused multiply-adds are fe_expf's
 * explicit fmaf calls, exactly specified) and f32 exp is our own polynomial (no
 * libm variant differences). The reference and BLIS kernels call this same code.
 * Other transcendental functions (log, tanh, ...; every f64 one) and sqrt call
 * libm per element (sqrt keeps its errno path: GCC ignores -fno-math-errno given
 * by pragma), so the arithmetic, select, comparison, rounding and f32
 * exp/sigmoid loops are the ones that vectorize.
 *
 * The per-type part lives at the bottom of this file and is included once per
 * compute type (f32, f64, i8, i16, i32, i64, u8; f16/bf16 compute in f32). */
#ifndef FE_T

/* Vectorize at any -O level; never fuse a*b+c (results must not depend on
 * the CPU); FP traps are not observed, which lets the compiler if-convert and
 * vectorize the selects. */
#pragma GCC optimize("O3", "fp-contract=off", "no-trapping-math")

#include <string.h>
#include "kernels/expf.h"
#include "base/target_clones.h"
#include "formula_eval.h"
#include "backends/kernel_util.h"
#include "kernels/scalar_ops.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
/* One copy of each block loop per ISA level, picked at load time (ifunc). The
 * levels include FMA, which fe_expf's fmaf calls need to be fast. */
#if __GNUC__ >= 12
#define FE_CLONES GOBLIN_TARGET_CLONES("arch=x86-64-v4", "arch=x86-64-v3", "default")
#else
#define FE_CLONES GOBLIN_TARGET_CLONES("arch=skylake-avx512", "arch=haswell", "default")
#endif
#else
#define FE_CLONES
#endif

#define FE_B GOBLIN__FORMULA_BLOCK

/* Register file layout (indices into a per-thread pointer array). */
#define FE_TEMP0 0
#define FE_NTEMP (GOBLIN_FORMULA_MAX_NODES + 1)
#define FE_VAR0 (FE_TEMP0 + FE_NTEMP)
#define FE_CONST0 (FE_VAR0 + GOBLIN_FORMULA_MAX_VARS)
#define FE_NREG (FE_CONST0 + GOBLIN_FORMULA_MAX_NODES)
#define FE_OUT (-1) /* destination: the output block itself */
/* bytes of the per-thread register pointer array, rounded so slots stay 64-byte aligned */
#define FE_REG_BYTES ((FE_NREG * sizeof(void *) + 63) & ~(size_t)63)

typedef union fe_val {
    float f32;
    double f64;
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    uint8_t u8;
} fe_val;

typedef struct fe_ins {
    uint8_t op, arity;
    int16_t dst;
    int16_t src[3];
} fe_ins;

enum { VK_UNUSED, VK_CONST, VK_DIRECT, VK_GATHER };

typedef struct fe_plan {
    goblin_dtype dt;  /* storage dtype of inputs and output */
    size_t esize;     /* bytes per element of the compute type */
    int32_t n_ins;
    fe_ins ins[GOBLIN_FORMULA_MAX_NODES];
    int32_t n_temp, n_const;
    fe_val cval[GOBLIN_FORMULA_MAX_NODES];
    /* the result: an instruction wrote FE_OUT, or a register to store, or a constant */
    int16_t result_reg;  /* FE_OUT, or a register index */
    bool result_const;
    fe_val result_val;
    /* variables */
    int32_t n_vars;
    uint8_t var_kind[GOBLIN_FORMULA_MAX_VARS];
    fe_val var_val[GOBLIN_FORMULA_MAX_VARS];
    /* gathered variables share one iterator over the (coalesced) output shape */
    int32_t n_gather;
    int32_t gather_var[GOBLIN_FORMULA_MAX_VARS];
    int32_t it_rank;
    int64_t it_shape[GOBLIN_MAX_RANK];
    int64_t it_stride[GOBLIN_FORMULA_MAX_VARS][GOBLIN_MAX_RANK];
} fe_plan;

/* Stack entries while simulating the program. */
typedef struct fe_sv {
    bool is_const;
    int16_t reg;
    fe_val v;
} fe_sv;

/* ---- f32 exp ------------------------------------------------------------- */

/* The f32 exp (expf_impl.h): at most 0.98 ulp, branch-free, the same bits on every
 * CPU clone. */
static inline float fe_expf(float x) { return goblin__expf_inline(x); }

float goblin__expf_vec(float x) { return fe_expf(x); }

/* The compute type of a storage dtype: half types compute in f32. */
static goblin_dtype fe_ctype(goblin_dtype dt) {
    return dt == GOBLIN_DTYPE_F16 || dt == GOBLIN_DTYPE_BF16 ? GOBLIN_DTYPE_F32 : dt;
}

/* ---- per compute type ---------------------------------------------------- */

#define FE_CAT2(a, b) a##_##b
#define FE_CAT(a, b) FE_CAT2(a, b)
#define FE(name) FE_CAT(fe_##name, FE_SFX)
#define FE_OPS(name) FE_CAT(goblin__##name, FE_SFX)

#define FE_T float
#define FE_SFX f32
#define FE_FLOAT 1
#define FE_EXP fe_expf
#define FE_M(fn) fn##f
#include "formula_eval.c"
#undef FE_T
#undef FE_SFX
#undef FE_FLOAT
#undef FE_EXP
#undef FE_M

#define FE_T double
#define FE_SFX f64
#define FE_FLOAT 1
#define FE_EXP exp
#define FE_M(fn) fn
#include "formula_eval.c"
#undef FE_T
#undef FE_SFX
#undef FE_FLOAT
#undef FE_EXP
#undef FE_M

#define FE_FLOAT 0
#define FE_T int8_t
#define FE_SFX i8
#define FE_SIGNED 1
#include "formula_eval.c"
#undef FE_T
#undef FE_SFX
#define FE_T int16_t
#define FE_SFX i16
#include "formula_eval.c"
#undef FE_T
#undef FE_SFX
#define FE_T int32_t
#define FE_SFX i32
#include "formula_eval.c"
#undef FE_T
#undef FE_SFX
#define FE_T int64_t
#define FE_SFX i64
#include "formula_eval.c"
#undef FE_T
#undef FE_SFX
#undef FE_SIGNED
#define FE_T uint8_t
#define FE_SFX u8
#define FE_SIGNED 0
#include "formula_eval.c"
#undef FE_T
#undef FE_SFX
#undef FE_SIGNED
#undef FE_FLOAT

/* ---- type dispatch ------------------------------------------------------- */

static void fe_run_block(goblin_dtype ct, const fe_plan *pl, void **reg, void *out, int64_t n) {
    switch (ct) {
    case GOBLIN_DTYPE_F32: fe_block_f32(pl, reg, out, n); break;
    case GOBLIN_DTYPE_F64: fe_block_f64(pl, reg, out, n); break;
    case GOBLIN_DTYPE_I8: fe_block_i8(pl, reg, out, n); break;
    case GOBLIN_DTYPE_I16: fe_block_i16(pl, reg, out, n); break;
    case GOBLIN_DTYPE_I32: fe_block_i32(pl, reg, out, n); break;
    case GOBLIN_DTYPE_I64: fe_block_i64(pl, reg, out, n); break;
    case GOBLIN_DTYPE_U8: fe_block_u8(pl, reg, out, n); break;
    default: break;
    }
}

static void fe_fill(goblin_dtype ct, void *d, fe_val v, int64_t n) {
    switch (ct) {
    case GOBLIN_DTYPE_F32: fe_fill_f32(d, v.f32, n); break;
    case GOBLIN_DTYPE_F64: fe_fill_f64(d, v.f64, n); break;
    case GOBLIN_DTYPE_I8: fe_fill_i8(d, v.i8, n); break;
    case GOBLIN_DTYPE_I16: fe_fill_i16(d, v.i16, n); break;
    case GOBLIN_DTYPE_I32: fe_fill_i32(d, v.i32, n); break;
    case GOBLIN_DTYPE_I64: fe_fill_i64(d, v.i64, n); break;
    case GOBLIN_DTYPE_U8: fe_fill_u8(d, v.u8, n); break;
    default: break;
    }
}

/* Element @p i of @p t (storage dtype) converted to the compute type. */
static fe_val fe_load(const goblin_tensor *t, int64_t off) {
    fe_val v;
    memset(&v, 0, sizeof v);
    switch (t->dtype) {
    case GOBLIN_DTYPE_F32: v.f32 = ((const float *)t->data)[off]; break;
    case GOBLIN_DTYPE_F64: v.f64 = ((const double *)t->data)[off]; break;
    case GOBLIN_DTYPE_F16: v.f32 = goblin__f16_to_f32(((const uint16_t *)t->data)[off]); break;
    case GOBLIN_DTYPE_BF16: v.f32 = goblin__bf16_to_f32(((const uint16_t *)t->data)[off]); break;
    case GOBLIN_DTYPE_I8: v.i8 = ((const int8_t *)t->data)[off]; break;
    case GOBLIN_DTYPE_I16: v.i16 = ((const int16_t *)t->data)[off]; break;
    case GOBLIN_DTYPE_I32: v.i32 = ((const int32_t *)t->data)[off]; break;
    case GOBLIN_DTYPE_I64: v.i64 = ((const int64_t *)t->data)[off]; break;
    case GOBLIN_DTYPE_U8: v.u8 = ((const uint8_t *)t->data)[off]; break;
    default: break;
    }
    return v;
}

static goblin_err fe_plan_build(fe_plan *pl, const uint8_t *prog, const fe_sv *vars) {
    switch (fe_ctype(pl->dt)) {
    case GOBLIN_DTYPE_F32: return fe_plan_f32(pl, prog, vars);
    case GOBLIN_DTYPE_F64: return fe_plan_f64(pl, prog, vars);
    case GOBLIN_DTYPE_I8: return fe_plan_i8(pl, prog, vars);
    case GOBLIN_DTYPE_I16: return fe_plan_i16(pl, prog, vars);
    case GOBLIN_DTYPE_I32: return fe_plan_i32(pl, prog, vars);
    case GOBLIN_DTYPE_I64: return fe_plan_i64(pl, prog, vars);
    case GOBLIN_DTYPE_U8: return fe_plan_u8(pl, prog, vars);
    default: return GOBLIN_EDTYPE;
    }
}

/* ---- iteration over broadcast / strided inputs --------------------------- */

/* Build the shared iterator: output dims of size 1 are dropped, and adjacent
 * dims merged where every gathered input's strides allow it, so rows are long. */
static void fe_layout(fe_plan *pl, const goblin_tensor *in, const goblin_tensor *out) {
    int64_t st[GOBLIN_FORMULA_MAX_VARS][GOBLIN_MAX_RANK];
    for (int32_t g = 0; g < pl->n_gather; g++)
        goblin__bcast_strides(&in[pl->gather_var[g]], out->rank, out->shape, st[g]);
    int32_t r = 0;
    for (int32_t d = 0; d < out->rank; d++) {
        if (out->shape[d] == 1) continue;
        bool merge = r > 0;
        for (int32_t g = 0; g < pl->n_gather && merge; g++)
            merge = pl->it_stride[g][r - 1] == st[g][d] * out->shape[d];
        if (merge) {
            pl->it_shape[r - 1] *= out->shape[d];
            for (int32_t g = 0; g < pl->n_gather; g++) pl->it_stride[g][r - 1] = st[g][d];
        } else {
            pl->it_shape[r] = out->shape[d];
            for (int32_t g = 0; g < pl->n_gather; g++) pl->it_stride[g][r] = st[g][d];
            r++;
        }
    }
    if (r == 0) { /* one element: a rank-1 walk of length 1 */
        pl->it_shape[0] = 1;
        for (int32_t g = 0; g < pl->n_gather; g++) pl->it_stride[g][0] = 0;
        r = 1;
    }
    pl->it_rank = r;
}

typedef struct fe_iter {
    int64_t idx[GOBLIN_MAX_RANK];
    int64_t off[GOBLIN_FORMULA_MAX_VARS];
} fe_iter;

static void fe_iter_seek(const fe_plan *pl, fe_iter *it, int64_t linear) {
    for (int32_t g = 0; g < pl->n_gather; g++) it->off[g] = 0;
    for (int32_t d = pl->it_rank - 1; d >= 0; d--) {
        it->idx[d] = linear % pl->it_shape[d];
        linear /= pl->it_shape[d];
        for (int32_t g = 0; g < pl->n_gather; g++) it->off[g] += it->idx[d] * pl->it_stride[g][d];
    }
}

/* Copy @p run elements with element stride @p s from @p src at offset @p off,
 * converted to the compute type, into @p dst. */
static void fe_copy_run(goblin_dtype dt, void *dst, const void *src, int64_t off, int64_t s,
                        int64_t run) {
    switch (dt) {
#define FE_COPY(DT, S, T, CONV)                                                              \
    case DT: {                                                                               \
        T *d = dst;                                                                          \
        const S *p = (const S *)src + off;                                                   \
        if (s == 1)                                                                          \
            for (int64_t j = 0; j < run; j++) d[j] = CONV(p[j]);                             \
        else if (s == 0)                                                                     \
            for (int64_t j = 0; j < run; j++) d[j] = CONV(p[0]);                             \
        else                                                                                 \
            for (int64_t j = 0; j < run; j++) d[j] = CONV(p[j * s]);                         \
        break;                                                                               \
    }
#define FE_ID(x) (x)
        FE_COPY(GOBLIN_DTYPE_F32, float, float, FE_ID)
        FE_COPY(GOBLIN_DTYPE_F64, double, double, FE_ID)
        FE_COPY(GOBLIN_DTYPE_F16, uint16_t, float, goblin__f16_to_f32)
        FE_COPY(GOBLIN_DTYPE_BF16, uint16_t, float, goblin__bf16_to_f32)
        FE_COPY(GOBLIN_DTYPE_I8, int8_t, int8_t, FE_ID)
        FE_COPY(GOBLIN_DTYPE_I16, int16_t, int16_t, FE_ID)
        FE_COPY(GOBLIN_DTYPE_I32, int32_t, int32_t, FE_ID)
        FE_COPY(GOBLIN_DTYPE_I64, int64_t, int64_t, FE_ID)
        FE_COPY(GOBLIN_DTYPE_U8, uint8_t, uint8_t, FE_ID)
#undef FE_COPY
#undef FE_ID
    default: break;
    }
}

/* Gather the next @p n output positions of every gathered input into its slot. */
static void fe_gather(const fe_plan *pl, fe_iter *it, const goblin_tensor *in, void **reg,
                      int64_t n) {
    int32_t last = pl->it_rank - 1;
    int64_t k = 0;
    while (k < n) {
        int64_t run = pl->it_shape[last] - it->idx[last];
        if (run > n - k) run = n - k;
        for (int32_t g = 0; g < pl->n_gather; g++) {
            int32_t v = pl->gather_var[g];
            char *slot = (char *)reg[FE_VAR0 + v] + (size_t)k * pl->esize;
            fe_copy_run(pl->dt, slot, in[v].data, it->off[g], pl->it_stride[g][last], run);
        }
        k += run;
        /* advance by run (it never crosses the end of the innermost dim) */
        it->idx[last] += run;
        for (int32_t g = 0; g < pl->n_gather; g++) it->off[g] += run * pl->it_stride[g][last];
        for (int32_t d = last; d > 0 && it->idx[d] == pl->it_shape[d]; d--) {
            it->idx[d] = 0;
            it->idx[d - 1]++;
            for (int32_t g = 0; g < pl->n_gather; g++)
                it->off[g] += pl->it_stride[g][d - 1] - pl->it_shape[d] * pl->it_stride[g][d];
        }
    }
}

/* Write @p n results from @p src (compute type) to the output at element @p start. */
static void fe_store(goblin_dtype dt, void *out, int64_t start, const void *src, int64_t n,
                     size_t esize) {
    if (dt == GOBLIN_DTYPE_F16) {
        uint16_t *o = (uint16_t *)out + start;
        const float *s = src;
        for (int64_t j = 0; j < n; j++) o[j] = goblin__f32_to_f16(s[j]);
    } else if (dt == GOBLIN_DTYPE_BF16) {
        uint16_t *o = (uint16_t *)out + start;
        const float *s = src;
        for (int64_t j = 0; j < n; j++) o[j] = goblin__f32_to_bf16(s[j]);
    } else {
        memcpy((char *)out + (size_t)start * esize, src, (size_t)n * esize);
    }
}

/* ---- driving the blocks -------------------------------------------------- */

/* Work is handed out in chunks of blocks from a shared counter rather than split
 * evenly up front: on a busy machine a descheduled thread then delays only its
 * current chunk. Every element's value is independent of who computes it. */
typedef struct fe_job {
    const fe_plan *pl;
    const goblin_tensor *in;
    goblin_tensor *out;
    int64_t numel, n_blocks;
    int64_t chunk;       /* blocks per chunk */
    int64_t next_chunk;  /* atomic: the next chunk to hand out */
    char *scratch;
    size_t per_item;     /* bytes of scratch per work item (one per thread) */
} fe_job;

static size_t fe_slot_bytes(const fe_plan *pl) { return (size_t)FE_B * pl->esize; }

/* Blocks [b0, b1) with the registers of one thread; @p it is positioned at b0. */
static void fe_blocks(const fe_job *j, void **reg, goblin_dtype ct, fe_iter *it, char *out,
                      bool out_direct, int64_t b0, int64_t b1) {
    const fe_plan *pl = j->pl;
    for (int64_t b = b0; b < b1; b++) {
        int64_t start = b * FE_B;
        int64_t n = j->numel - start < FE_B ? j->numel - start : FE_B;
        for (int32_t v = 0; v < pl->n_vars; v++)
            if (pl->var_kind[v] == VK_DIRECT)
                reg[FE_VAR0 + v] = (char *)j->in[v].data + (size_t)start * pl->esize;
        if (pl->n_gather) fe_gather(pl, it, j->in, reg, n);
        if (pl->result_const) {
            fe_fill(ct, reg[FE_TEMP0], pl->result_val, n);
            fe_store(pl->dt, out, start, reg[FE_TEMP0], n, pl->esize);
            continue;
        }
        fe_run_block(ct, pl, reg, out_direct ? out + (size_t)start * pl->esize : NULL, n);
        if (!out_direct) fe_store(pl->dt, out, start, reg[pl->result_reg], n, pl->esize);
    }
}

static void fe_item(void *arg, int64_t item) {
    fe_job *j = arg;
    const fe_plan *pl = j->pl;
    goblin_dtype ct = fe_ctype(pl->dt);
    char *mem = j->scratch + (size_t)item * j->per_item;
    void **reg = (void **)mem;
    char *slots = mem + FE_REG_BYTES;
    size_t sb = fe_slot_bytes(pl);
    /* registers: temps, gathered variables, constants (filled once) */
    for (int32_t t = 0; t < pl->n_temp; t++) reg[FE_TEMP0 + t] = slots + (size_t)t * sb;
    slots += (size_t)pl->n_temp * sb;
    for (int32_t g = 0; g < pl->n_gather; g++)
        reg[FE_VAR0 + pl->gather_var[g]] = slots + (size_t)g * sb;
    slots += (size_t)pl->n_gather * sb;
    for (int32_t c = 0; c < pl->n_const; c++) {
        reg[FE_CONST0 + c] = slots + (size_t)c * sb;
        fe_fill(ct, reg[FE_CONST0 + c], pl->cval[c], FE_B);
    }
    fe_iter it;
    char *out = j->out->data;
    bool out_direct = pl->result_reg == FE_OUT;
    int64_t n_chunks = (j->n_blocks + j->chunk - 1) / j->chunk;
    for (;;) {
        int64_t c = __atomic_fetch_add(&j->next_chunk, 1, __ATOMIC_RELAXED);
        if (c >= n_chunks) break;
        int64_t b0 = c * j->chunk;
        int64_t b1 = b0 + j->chunk < j->n_blocks ? b0 + j->chunk : j->n_blocks;
        if (pl->n_gather) fe_iter_seek(pl, &it, b0 * FE_B);
        fe_blocks(j, reg, ct, &it, out, out_direct, b0, b1);
    }
}

goblin_err goblin__formula_eval(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out, int32_t threads,
                                goblin__formula_par_fn par) {
    goblin__fprog_info info;
    goblin_err e = goblin__formula_validate(node->payload, node->payload_size, n_in, out->dtype,
                                            &info, k->msg, k->cap);
    if (e) return e;
    for (int32_t v = 0; v < n_in; v++)
        if (in[v].dtype != out->dtype)
            return goblin__errf(k->msg, k->cap, GOBLIN_EDTYPE,
                                "formula input %d is %s, output is %s", (int)v,
                                goblin_dtype_name(in[v].dtype), goblin_dtype_name(out->dtype));
    int64_t numel = goblin__numel(out);
    if (numel == 0) return GOBLIN_OK;

    fe_plan *pl = goblin__calloc(1, sizeof *pl);
    if (!pl) return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory");
    pl->dt = out->dtype;
    pl->esize = goblin_dtype_size(fe_ctype(pl->dt));
    pl->n_vars = info.n_vars;
    /* Classify the variables. Constants carry their value into the plan. */
    fe_sv vars[GOBLIN_FORMULA_MAX_VARS];
    bool same_storage = fe_ctype(pl->dt) == pl->dt;
    for (int32_t v = 0; v < n_in; v++) {
        memset(&vars[v], 0, sizeof vars[v]);
        int64_t nv = goblin__numel(&in[v]);
        if (nv == 1) {
            pl->var_kind[v] = VK_CONST;
            vars[v].is_const = true;
            vars[v].v = fe_load(&in[v], 0);
        } else if (same_storage && nv == numel && goblin_tensor_is_contiguous(&in[v])) {
            pl->var_kind[v] = VK_DIRECT;
            vars[v].reg = (int16_t)(FE_VAR0 + v);
        } else {
            pl->var_kind[v] = VK_GATHER;
            vars[v].reg = (int16_t)(FE_VAR0 + v);
        }
    }
    e = fe_plan_build(pl, node->payload, vars);
    if (e) {
        goblin__free(pl);
        return goblin__errf(k->msg, k->cap, e, "formula: invalid program");
    }
    /* only variables the program still reads after folding are fetched */
    bool used[GOBLIN_FORMULA_MAX_VARS] = {false};
    for (int32_t i = 0; i < pl->n_ins; i++)
        for (int a = 0; a < pl->ins[i].arity; a++) {
            int r = pl->ins[i].src[a];
            if (r >= FE_VAR0 && r < FE_CONST0) used[r - FE_VAR0] = true;
        }
    if (!pl->result_const && pl->result_reg >= FE_VAR0 && pl->result_reg < FE_CONST0)
        used[pl->result_reg - FE_VAR0] = true;
    for (int32_t v = 0; v < n_in; v++) {
        if (pl->var_kind[v] == VK_CONST) continue;
        if (!used[v]) pl->var_kind[v] = VK_UNUSED;
        else if (pl->var_kind[v] == VK_GATHER) pl->gather_var[pl->n_gather++] = v;
    }
    if (pl->n_gather) fe_layout(pl, in, out);

    fe_job j;
    j.pl = pl;
    j.in = in;
    j.out = out;
    j.numel = numel;
    j.n_blocks = (numel + FE_B - 1) / FE_B;
    /* at least 64 blocks (32K elements) per thread: below that, threads cost more */
    int64_t items = threads > 1 && par ? j.n_blocks / 64 : 1;
    if (items > threads) items = threads;
    if (items < 1) items = 1;
    j.chunk = items > 1 ? 32 : j.n_blocks; /* 16K elements: a few us of work per grab */
    j.next_chunk = 0;
    size_t sb = fe_slot_bytes(pl);
    int32_t slots = pl->n_temp + pl->n_gather + pl->n_const;
    if (slots < 1) slots = 1;
    j.per_item = FE_REG_BYTES + (size_t)slots * sb;
    j.per_item = (j.per_item + 63) & ~(size_t)63;
    j.scratch = goblin__alloc(j.per_item * (size_t)items);
    if (!j.scratch) {
        goblin__free(pl);
        return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory");
    }
    if (items > 1) par(threads, items, fe_item, &j);
    else fe_item(&j, 0);
    goblin__free(j.scratch);
    goblin__free(pl);
    return GOBLIN_OK;
}

#else /* FE_T: the part compiled once per compute type ---------------------- */

/* ---- scalar semantics of each opcode for FE_T --------------------------- *
 * X(opcode, expression over x [, y [, z]]). The folding at plan time and the
 * block loops expand the same expressions, so they agree bit for bit. */
#if FE_FLOAT
#define FE_UNARY(X)                                                \
    X(NEG, -x)                                                     \
    X(NOT, (FE_T)FE_OPS(lognot)(x))                                \
    X(ABS, FE_M(fabs)(x))                                          \
    X(EXP, FE_EXP(x))                                              \
    X(LOG, FE_M(log)(x))                                           \
    X(SQRT, FE_M(sqrt)(x))                                         \
    X(RSQRT, (FE_T)1 / FE_M(sqrt)(x))                              \
    X(SIN, FE_M(sin)(x))                                           \
    X(COS, FE_M(cos)(x))                                           \
    X(TANH, FE_M(tanh)(x))                                         \
    X(ERF, FE_M(erf)(x))                                           \
    X(FLOOR, FE_M(floor)(x))                                       \
    X(CEIL, FE_M(ceil)(x))                                         \
    X(ROUND, FE_M(rint)(x))                                        \
    X(TRUNC, FE_M(trunc)(x))                                       \
    X(SIGMOID, (FE_T)1 / ((FE_T)1 + FE_EXP(-x)))                   \
    X(RELU, FE_OPS(maximum)(x, (FE_T)0))                           \
    X(LOG1P, FE_M(log1p)(x))                                       \
    X(EXPM1, FE_M(expm1)(x))
#define FE_BINARY(X)                                               \
    X(ADD, FE_OPS(plus)(x, y))                                     \
    X(SUB, FE_OPS(minus)(x, y))                                    \
    X(MUL, FE_OPS(times)(x, y))                                    \
    X(DIV, FE_OPS(div)(x, y))                                      \
    X(FLOORDIV, FE_OPS(floordiv)(x, y))                            \
    X(MOD, FE_OPS(remfloor)(x, y))                                 \
    X(POW, FE_OPS(pow)(x, y))                                      \
    X(MIN, FE_OPS(minimum)(x, y))                                  \
    X(MAX, FE_OPS(maximum)(x, y))                                  \
    X(EQ, (FE_T)FE_OPS(eq)(x, y))                                  \
    X(NE, (FE_T)FE_OPS(ne)(x, y))                                  \
    X(LT, (FE_T)FE_OPS(lt)(x, y))                                  \
    X(LE, (FE_T)FE_OPS(le)(x, y))                                  \
    X(GT, (FE_T)FE_OPS(gt)(x, y))                                  \
    X(GE, (FE_T)FE_OPS(ge)(x, y))                                  \
    X(AND, (FE_T)FE_OPS(logand)(x, y))                             \
    X(OR, (FE_T)FE_OPS(logor)(x, y))
#else
#if FE_SIGNED
#define FE_IABS(x) ((x) < 0 ? FE_OPS(minus)(0, x) : (x))
#else
#define FE_IABS(x) (x)
#endif
#define FE_UNARY(X)                                                \
    X(NEG, FE_OPS(minus)(0, x))                                    \
    X(BITNOT, FE_OPS(bitnot)(x))                                   \
    X(NOT, (FE_T)FE_OPS(lognot)(x))                                \
    X(ABS, FE_IABS(x))                                             \
    X(FLOOR, x)                                                    \
    X(CEIL, x)                                                     \
    X(ROUND, x)                                                    \
    X(TRUNC, x)                                                    \
    X(RELU, FE_OPS(maximum)(x, (FE_T)0))
#define FE_BINARY(X)                                               \
    X(ADD, FE_OPS(plus)(x, y))                                     \
    X(SUB, FE_OPS(minus)(x, y))                                    \
    X(MUL, FE_OPS(times)(x, y))                                    \
    X(FLOORDIV, FE_OPS(floordiv)(x, y))                            \
    X(MOD, FE_OPS(remfloor)(x, y))                                 \
    X(POW, FE_OPS(pow)(x, y))                                      \
    X(MIN, FE_OPS(minimum)(x, y))                                  \
    X(MAX, FE_OPS(maximum)(x, y))                                  \
    X(EQ, (FE_T)FE_OPS(eq)(x, y))                                  \
    X(NE, (FE_T)FE_OPS(ne)(x, y))                                  \
    X(LT, (FE_T)FE_OPS(lt)(x, y))                                  \
    X(LE, (FE_T)FE_OPS(le)(x, y))                                  \
    X(GT, (FE_T)FE_OPS(gt)(x, y))                                  \
    X(GE, (FE_T)FE_OPS(ge)(x, y))                                  \
    X(AND, (FE_T)FE_OPS(logand)(x, y))                             \
    X(OR, (FE_T)FE_OPS(logor)(x, y))                               \
    X(BITAND, FE_OPS(bitand)(x, y))                                \
    X(BITOR, FE_OPS(bitor)(x, y))                                  \
    X(BITXOR, FE_OPS(bitxor)(x, y))                                \
    X(SHL, FE_OPS(shl)(x, y))                                      \
    X(SHR, FE_OPS(shrarith)(x, y))
#endif
#define FE_TERNARY(X)                                              \
    X(WHERE, FE_OPS(where)((uint8_t)(x != 0), y, z))               \
    X(CLAMP, FE_OPS(clamp)(x, y, z))

static FE_T FE(fold)(int op, FE_T x, FE_T y, FE_T z) {
    (void)y;
    (void)z;
    switch (op) {
#define FE_CASE(name, expr) case GOBLIN__FOP_##name: return (FE_T)(expr);
        FE_UNARY(FE_CASE)
        FE_BINARY(FE_CASE)
        FE_TERNARY(FE_CASE)
#undef FE_CASE
    default: return 0;
    }
}

FE_CLONES static void FE(loop1)(int op, FE_T *restrict d, const FE_T *restrict a, int64_t n) {
    switch (op) {
#define FE_CASE(name, expr)                                                                  \
    case GOBLIN__FOP_##name:                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                    \
            FE_T x = a[i];                                                                   \
            d[i] = (FE_T)(expr);                                                             \
        }                                                                                    \
        break;
        FE_UNARY(FE_CASE)
#undef FE_CASE
    default: break;
    }
}

FE_CLONES static void FE(loop2)(int op, FE_T *restrict d, const FE_T *restrict a,
                                const FE_T *restrict b, int64_t n) {
    switch (op) {
#define FE_CASE(name, expr)                                                                  \
    case GOBLIN__FOP_##name:                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                    \
            FE_T x = a[i], y = b[i];                                                         \
            d[i] = (FE_T)(expr);                                                             \
        }                                                                                    \
        break;
        FE_BINARY(FE_CASE)
#undef FE_CASE
    default: break;
    }
}

FE_CLONES static void FE(loop3)(int op, FE_T *restrict d, const FE_T *restrict a,
                                const FE_T *restrict b, const FE_T *restrict c, int64_t n) {
    switch (op) {
#define FE_CASE(name, expr)                                                                  \
    case GOBLIN__FOP_##name:                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                    \
            FE_T x = a[i], y = b[i], z = c[i];                                               \
            d[i] = (FE_T)(expr);                                                             \
        }                                                                                    \
        break;
        FE_TERNARY(FE_CASE)
#undef FE_CASE
    default: break;
    }
}

#undef FE_UNARY
#undef FE_BINARY
#undef FE_TERNARY
#ifdef FE_IABS
#undef FE_IABS
#endif

static void FE(fill)(void *dst, FE_T v, int64_t n) {
    FE_T *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = v;
}

static void FE(block)(const fe_plan *pl, void **reg, void *out, int64_t n) {
    for (int32_t i = 0; i < pl->n_ins; i++) {
        const fe_ins *in = &pl->ins[i];
        FE_T *d = in->dst == FE_OUT ? out : reg[in->dst];
        switch (in->arity) {
        case 1: FE(loop1)(in->op, d, reg[in->src[0]], n); break;
        case 2: FE(loop2)(in->op, d, reg[in->src[0]], reg[in->src[1]], n); break;
        default: FE(loop3)(in->op, d, reg[in->src[0]], reg[in->src[1]], reg[in->src[2]], n); break;
        }
    }
}

static inline uint64_t FE(get_u64)(const uint8_t *b) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = (v << 8) | b[k];
    return v;
}

/* Turn a plan-time value into a register operand: constants get a register
 * (deduplicated by bit pattern). */
static int16_t FE(operand)(fe_plan *pl, const fe_sv *s) {
    if (!s->is_const) return s->reg;
    for (int32_t c = 0; c < pl->n_const; c++)
        if (memcmp(&pl->cval[c], &s->v, sizeof(FE_T)) == 0) return (int16_t)(FE_CONST0 + c);
    pl->cval[pl->n_const] = s->v;
    return (int16_t)(FE_CONST0 + pl->n_const++);
}

/* Simulate the (validated) program: fold constants, assign registers. */
static goblin_err FE(plan)(fe_plan *pl, const uint8_t *prog, const fe_sv *vars) {
    int32_t n_instr = prog[4] | (prog[5] << 8);
    fe_sv stack[GOBLIN_FORMULA_MAX_NODES];
    bool busy[FE_NTEMP] = {false};
    int32_t sp = 0;
    size_t o = GOBLIN__FPROG_HEADER;
    pl->n_ins = 0;
    pl->n_temp = 0;
    pl->n_const = 0;
    for (int32_t i = 0; i < n_instr; i++) {
        int op = prog[o++];
        int ar = goblin__fop_arity(op);
        if (ar < 0 || ar > 3 || sp < ar || sp >= GOBLIN_FORMULA_MAX_NODES) return GOBLIN_EFORMAT;
        fe_sv r;
        memset(&r, 0, sizeof r);
        if (op == GOBLIN__FOP_VAR) {
            int v = prog[o++];
            if (v >= pl->n_vars) return GOBLIN_EFORMAT;
            r = vars[v];
        } else if (op == GOBLIN__FOP_INT) {
            uint64_t u = FE(get_u64)(prog + o);
            o += 8;
            r.is_const = true;
#if FE_FLOAT
            FE_T t = (FE_T)(int64_t)u; /* one rounding, straight from the integer */
#else
            FE_T t = (FE_T)u; /* wraps modulo 2^bits, like a C (and NumPy) cast */
#endif
            memcpy(&r.v, &t, sizeof t);
        } else if (op == GOBLIN__FOP_FLOAT) {
#if FE_FLOAT
            uint64_t u = FE(get_u64)(prog + o);
            double dv;
            memcpy(&dv, &u, 8);
            FE_T t = (FE_T)dv;
            r.is_const = true;
            memcpy(&r.v, &t, sizeof t);
#else
            return GOBLIN_EDTYPE;
#endif
            o += 8;
        } else {
            fe_sv *a = &stack[sp - ar];
            bool all_const = true;
            for (int k = 0; k < ar; k++) all_const &= a[k].is_const;
            if (all_const) {
                FE_T x[3] = {0, 0, 0};
                for (int k = 0; k < ar; k++) memcpy(&x[k], &a[k].v, sizeof(FE_T));
                FE_T t = FE(fold)(op, x[0], x[1], x[2]);
                r.is_const = true;
                memcpy(&r.v, &t, sizeof t);
            } else if (op == GOBLIN__FOP_WHERE && a[0].is_const) {
                FE_T c;
                memcpy(&c, &a[0].v, sizeof c);
                r = c != 0 ? a[1] : a[2]; /* NaN counts as true, as in the loops */
                const fe_sv *drop = c != 0 ? &a[2] : &a[1];
                if (!drop->is_const && drop->reg < FE_NTEMP) busy[drop->reg] = false;
            } else {
                fe_ins *in = &pl->ins[pl->n_ins++];
                in->op = (uint8_t)op;
                in->arity = (uint8_t)ar;
                for (int k = 0; k < ar; k++) {
                    if (a[k].is_const && pl->n_const >= GOBLIN_FORMULA_MAX_NODES)
                        return GOBLIN_EFORMAT;
                    in->src[k] = FE(operand)(pl, &a[k]);
                }
                /* a fresh temp, distinct from every source (the loops use restrict) */
                int16_t t = 0;
                while (t < FE_NTEMP && busy[t]) t++;
                if (t == FE_NTEMP) return GOBLIN_EFORMAT;
                busy[t] = true;
                if (t + 1 > pl->n_temp) pl->n_temp = t + 1;
                in->dst = t;
                for (int k = 0; k < ar; k++)
                    if (!a[k].is_const && a[k].reg < FE_NTEMP) busy[a[k].reg] = false;
                r.is_const = false;
                r.reg = t;
            }
            sp -= ar;
        }
        stack[sp++] = r;
    }
    if (sp != 1) return GOBLIN_EFORMAT;
    const fe_sv *res = &stack[0];
    pl->result_const = res->is_const;
    pl->result_val = res->v;
    pl->result_reg = res->reg;
    if (res->is_const) {
        if (pl->n_temp < 1) pl->n_temp = 1; /* the block to fill before storing */
    } else if (pl->n_ins > 0 && res->reg == pl->ins[pl->n_ins - 1].dst &&
               fe_ctype(pl->dt) == pl->dt) {
        /* the last instruction writes the output block itself */
        pl->ins[pl->n_ins - 1].dst = FE_OUT;
        pl->result_reg = FE_OUT;
    }
    return GOBLIN_OK;
}

#endif /* FE_T */
