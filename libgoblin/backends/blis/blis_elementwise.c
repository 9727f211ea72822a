/* libgoblin/backends/blis/blis_elementwise.c - CPU fast path for the hot float
 * elementwise ops: add sub mul div maximum minimum, the six comparisons and where,
 * on f32 and f64.
 *
 * An input is accepted when it lines up with the output without index arithmetic
 * per element: the same elements (contiguous, same count), a single element
 * (scalar broadcast), or a contiguous block repeated along leading dims (a row
 * such as a bias, [C] against [N, C]). Anything else returns GOBLIN_ENOTSUP and
 * the executor runs the reference kernel. The per-element work is the very
 * function of scalar_ops.h the reference kernel calls, so results are bit-identical;
 * the loops are written so the compiler vectorizes them (omp simd when built with
 * OpenMP). Work is split into fixed 64K-element blocks, so the result does not
 * depend on the thread count. */
#include "blis_impl.h"
#include "base/target_clones.h"
#include "kernels/scalar_ops.h"

#if defined(_OPENMP)
#define SIMD _Pragma("omp simd")
#else
#define SIMD
#endif

#define BLOCK ((int64_t)1 << 16)

/* ---- segment loops ----------------------------------------------------------------
 * One contiguous run of n outputs; each input advances by 1 (s = 1) or stays on
 * one element (s = 0). The two-input loops come in an AVX2 clone and a baseline one:
 * one operation per element either way (no FMA to contract into), so the same bits. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define SEG_CLONES GOBLIN_TARGET_CLONES("avx2", "default")
#else
#define SEG_CLONES
#endif
typedef void (*seg2_fn)(const void *a, int64_t sa, const void *b, int64_t sb, void *o, int64_t n);
typedef void (*seg3_fn)(const uint8_t *c, int64_t sc, const void *a, int64_t sa, const void *b,
                        int64_t sb, void *o, int64_t n);

#define SEG2(name, T, TO, F)                                                                \
    SEG_CLONES static void name(const void *va, int64_t sa, const void *vb, int64_t sb,      \
                                void *vo, int64_t n) {                                      \
        const T *restrict a = va;                                                           \
        const T *restrict b = vb;                                                           \
        TO *restrict o = vo;                                                                \
        if (sa && sb) {                                                                     \
            SIMD for (int64_t i = 0; i < n; i++) o[i] = (TO)F(a[i], b[i]);                  \
        } else if (sa) {                                                                    \
            const T y = b[0];                                                               \
            SIMD for (int64_t i = 0; i < n; i++) o[i] = (TO)F(a[i], y);                     \
        } else if (sb) {                                                                    \
            const T x = a[0];                                                               \
            SIMD for (int64_t i = 0; i < n; i++) o[i] = (TO)F(x, b[i]);                     \
        } else {                                                                            \
            const TO v = (TO)F(a[0], b[0]);                                                 \
            for (int64_t i = 0; i < n; i++) o[i] = v;                                       \
        }                                                                                   \
    }

#define SEG2_BOTH(stem)                                                                     \
    SEG2(seg_##stem##_f32, float, float, goblin__##stem##_f32)                              \
    SEG2(seg_##stem##_f64, double, double, goblin__##stem##_f64)
#define SEG2_PRED(stem)                                                                     \
    SEG2(seg_##stem##_f32, float, uint8_t, goblin__##stem##_f32)                            \
    SEG2(seg_##stem##_f64, double, uint8_t, goblin__##stem##_f64)

SEG2_BOTH(plus)
SEG2_BOTH(minus)
SEG2_BOTH(times)
SEG2_BOTH(div)
SEG2_BOTH(maximum)
SEG2_BOTH(minimum)
SEG2_PRED(eq)
SEG2_PRED(ne)
SEG2_PRED(lt)
SEG2_PRED(le)
SEG2_PRED(gt)
SEG2_PRED(ge)

#define SEG3(name, T, F)                                                                    \
    static void name(const uint8_t *c, int64_t sc, const void *va, int64_t sa, const void *vb, \
                     int64_t sb, void *vo, int64_t n) {                                     \
        const T *restrict a = va;                                                           \
        const T *restrict b = vb;                                                           \
        T *restrict o = vo;                                                                 \
        if (sc && sa && sb) {                                                               \
            SIMD for (int64_t i = 0; i < n; i++) o[i] = F(c[i], a[i], b[i]);                \
        } else if (sc && sa) {                                                              \
            const T y = b[0];                                                               \
            SIMD for (int64_t i = 0; i < n; i++) o[i] = F(c[i], a[i], y);                   \
        } else if (sc && sb) {                                                              \
            const T x = a[0];                                                               \
            SIMD for (int64_t i = 0; i < n; i++) o[i] = F(c[i], x, b[i]);                   \
        } else {                                                                            \
            for (int64_t i = 0; i < n; i++) o[i] = F(c[i * sc], a[i * sa], b[i * sb]);      \
        }                                                                                   \
    }

SEG3(seg_where_f32, float, goblin__where_f32)
SEG3(seg_where_f64, double, goblin__where_f64)

/* ---- operand layouts ------------------------------------------------------------- */

enum { LAY_NONE, LAY_FULL, LAY_SCALAR, LAY_ROW };

typedef struct operand {
    const char *p;
    int lay;
    int64_t inner; /* LAY_ROW: the repeated block's element count */
    size_t es;
} operand;

/* How @p t (an input) lines up with the contiguous output of shape out/out_n. */
static int classify(const goblin_tensor *t, const goblin_tensor *out, int64_t out_n,
                    int64_t *inner) {
    int64_t n = goblin__numel(t);
    if (n == 1) return LAY_SCALAR; /* all dims 1: the element is at offset 0 */
    if (!goblin_tensor_is_contiguous(t)) return LAY_NONE;
    if (n == out_n) return LAY_FULL; /* no dim was expanded, so element i is output i */
    int32_t lead = 0;
    while (lead < t->rank && t->shape[lead] == 1) lead++;
    int32_t tail = t->rank - lead;
    if (tail > out->rank) return LAY_NONE;
    for (int32_t d = 0; d < tail; d++)
        if (t->shape[lead + d] != out->shape[out->rank - tail + d]) return LAY_NONE;
    *inner = n;
    return LAY_ROW;
}

typedef struct job {
    int nops; /* 2 or 3 */
    operand op[3];
    seg2_fn f2;
    seg3_fn f3;
    char *o;
    size_t oes;
    int64_t n;
} job;

/* Start pointer and step of operand @p x for a run starting at output index i and
 * the run length allowed before its block wraps. */
static const char *at(const operand *x, int64_t i, int64_t *s, int64_t *room) {
    switch (x->lay) {
    case LAY_FULL: *s = 1; return x->p + (size_t)i * x->es;
    case LAY_ROW: {
        int64_t pos = i % x->inner;
        *s = 1;
        if (x->inner - pos < *room) *room = x->inner - pos;
        return x->p + (size_t)pos * x->es;
    }
    default: *s = 0; return x->p;
    }
}

static void run_block(void *arg, int64_t blk) {
    const job *j = arg;
    int64_t lo = blk * BLOCK, hi = lo + BLOCK < j->n ? lo + BLOCK : j->n;
    for (int64_t i = lo; i < hi;) {
        int64_t room = hi - i, s[3] = {0, 0, 0};
        const char *p[3];
        for (int k = 0; k < j->nops; k++) p[k] = at(&j->op[k], i, &s[k], &room);
        if (j->nops == 2) j->f2(p[0], s[0], p[1], s[1], j->o + (size_t)i * j->oes, room);
        else j->f3((const uint8_t *)p[0], s[0], p[1], s[1], p[2], s[2], j->o + (size_t)i * j->oes, room);
        i += room;
    }
}

static goblin_err run(goblin__kctx *k, job *j, const goblin_tensor *in, goblin_tensor *out) {
    j->n = goblin__numel(out);
    j->o = out->data;
    for (int q = 0; q < j->nops; q++) {
        j->op[q].p = in[q].data;
        j->op[q].es = goblin_dtype_size(in[q].dtype);
        j->op[q].inner = 1;
        j->op[q].lay = classify(&in[q], out, j->n, &j->op[q].inner);
        if (j->op[q].lay == LAY_NONE) return GOBLIN_ENOTSUP;
    }
    if (j->n == 0) return GOBLIN_OK;
    int64_t nblk = (j->n + BLOCK - 1) / BLOCK;
    goblin__parallel_for(k->threads > 0 ? k->threads : 1, nblk, run_block, j);
    return GOBLIN_OK;
}

/* ---- kernels ----------------------------------------------------------------------- */

#define BIN_KERNEL(kname, stem, out_is_bool)                                                \
    static goblin_err kname(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in, \
                            int32_t n_in, goblin_tensor *out) {                             \
        (void)node;                                                                         \
        if (n_in != 2 || in[0].dtype != in[1].dtype) return GOBLIN_ENOTSUP;                 \
        job j = {0};                                                                        \
        j.nops = 2;                                                                         \
        if (in[0].dtype == GOBLIN_DTYPE_F32) j.f2 = seg_##stem##_f32;                       \
        else if (in[0].dtype == GOBLIN_DTYPE_F64) j.f2 = seg_##stem##_f64;                  \
        else return GOBLIN_ENOTSUP;                                                         \
        j.oes = (out_is_bool) ? 1 : goblin_dtype_size(in[0].dtype);                         \
        return run(k, &j, in, out);                                                         \
    }

BIN_KERNEL(b_add, plus, 0)
BIN_KERNEL(b_sub, minus, 0)
BIN_KERNEL(b_mul, times, 0)
BIN_KERNEL(b_div, div, 0)

/* ADD SUB MUL DIV of same-shape contiguous operands; the ops' kernels are in
 * blis_broadcast.c, which calls these first. */
goblin_err goblin__blis_add(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    return b_add(k, node, in, n_in, out);
}
goblin_err goblin__blis_sub(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    return b_sub(k, node, in, n_in, out);
}
goblin_err goblin__blis_mul(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    return b_mul(k, node, in, n_in, out);
}
goblin_err goblin__blis_div(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    return b_div(k, node, in, n_in, out);
}
BIN_KERNEL(b_maximum, maximum, 0)
BIN_KERNEL(b_minimum, minimum, 0)
BIN_KERNEL(b_eq, eq, 1)
BIN_KERNEL(b_ne, ne, 1)
BIN_KERNEL(b_lt, lt, 1)
BIN_KERNEL(b_le, le, 1)
BIN_KERNEL(b_gt, gt, 1)
BIN_KERNEL(b_ge, ge, 1)

static goblin_err b_where(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    (void)node;
    if (n_in != 3 || in[0].dtype != GOBLIN_DTYPE_BOOL || in[1].dtype != in[2].dtype)
        return GOBLIN_ENOTSUP;
    job j = {0};
    j.nops = 3;
    if (in[1].dtype == GOBLIN_DTYPE_F32) j.f3 = seg_where_f32;
    else if (in[1].dtype == GOBLIN_DTYPE_F64) j.f3 = seg_where_f64;
    else return GOBLIN_ENOTSUP;
    j.oes = goblin_dtype_size(in[1].dtype);
    return run(k, &j, in, out);
}

void goblin__blis_register_elementwise(goblin__kernel_fn *t) {
    goblin__blis_set(t, GOBLIN_OP_MAXIMUM, b_maximum);
    goblin__blis_set(t, GOBLIN_OP_MINIMUM, b_minimum);
    goblin__blis_set(t, GOBLIN_OP_EQ, b_eq);
    goblin__blis_set(t, GOBLIN_OP_NE, b_ne);
    goblin__blis_set(t, GOBLIN_OP_LT, b_lt);
    goblin__blis_set(t, GOBLIN_OP_LE, b_le);
    goblin__blis_set(t, GOBLIN_OP_GT, b_gt);
    goblin__blis_set(t, GOBLIN_OP_GE, b_ge);
    goblin__blis_set(t, GOBLIN_OP_WHERE, b_where);
}
