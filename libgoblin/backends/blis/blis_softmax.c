/* libgoblin/backends/blis/blis_softmax.c - SOFTMAX and LOG_SOFTMAX on the CPU backend: over a
 * non-last axis here, over the last axis by blis_reduce.c's row kernel. */
#pragma GCC diagnostic ignored "-Wpsabi" /* vector helpers are always inlined: no ABI */
#include <string.h>
#include "base/alloc.h"
#include "base/target_clones.h"
#include "blis_impl.h"
#include "kernels/scalar_ops.h"
#include "kernels/expf.h"

#if defined(_OPENMP)
#define SIMD _Pragma("omp simd")
#define SIMD_OR_BAD _Pragma("omp simd reduction(| : bad)")
#else
#define SIMD
#define SIMD_OR_BAD
#endif

#define BLOCK ((int64_t)1 << 15) /* elements per work item (about) */

/* ---- softmax / log_softmax over a non-last axis ----------------------------------------
 * f64: the reference's arithmetic in its order (double; max with NaN sticking, then the sum
 * of exp(x - max) in axis order, then log or division), run for all positions of the
 * trailing dims together so the inner loops are contiguous: the same bits. f32: sm_cols_f32
 * below. Last-axis cases go on to blis_reduce.c's kernel. */


typedef struct smjob {
    bool f64, lg;
    const void *x;
    void *y;
    int64_t A, R, L;
    double *work; /* 2 L doubles per row: running max and sum */
} smjob;

#define SM_BODY(T)                                                                          \
    do {                                                                                    \
        const T *x = (const T *)j->x + a * j->R * L;                                        \
        T *y = (T *)j->y + a * j->R * L;                                                    \
        for (int64_t l = 0; l < L; l++) {                                                   \
            m[l] = -INFINITY;                                                               \
            s[l] = 0;                                                                       \
        }                                                                                   \
        for (int64_t r = 0; r < j->R; r++)                                                  \
            for (int64_t l = 0; l < L; l++) {                                               \
                double v = x[r * L + l];                                                    \
                if (m[l] == m[l] && (v > m[l] || v != v)) m[l] = v;                         \
            }                                                                               \
        for (int64_t r = 0; r < j->R; r++)                                                  \
            for (int64_t l = 0; l < L; l++) s[l] += exp((double)x[r * L + l] - m[l]);       \
        if (j->lg) {                                                                        \
            for (int64_t l = 0; l < L; l++) s[l] = log(s[l]);                               \
            for (int64_t r = 0; r < j->R; r++)                                              \
                for (int64_t l = 0; l < L; l++)                                             \
                    y[r * L + l] = (T)(((double)x[r * L + l] - m[l]) - s[l]);               \
        } else {                                                                            \
            for (int64_t r = 0; r < j->R; r++)                                              \
                for (int64_t l = 0; l < L; l++)                                             \
                    y[r * L + l] = (T)(exp((double)x[r * L + l] - m[l]) / s[l]);            \
        }                                                                                   \
    } while (0)

/* f32: 8 trailing positions (columns l) side by side, each lane its own softmax over the
 * axis, every operation per lane (a column's bits do not depend on its neighbours, on L,
 * or on whether it is in a whole vector or the padded tail): max with NaN sticking; exp of
 * x - max by expf_impl.h's vector form (Cody-Waite, our fitted polynomial, about 1 ulp,
 * separately rounded operations: the same bits in both clones), summed in axis order in
 * double; then, as blis_reduce.c's last-axis kernel, log: (x - max) - (float)log(sum),
 * softmax: exp * (float)(1 / sum). A NaN or an infinite max gives the column NaN (what
 * the reference's exp(inf - inf) or NaN sum gives). Within the op's contract, not the
 * reference's bits. */
typedef float sm_v8f __attribute__((vector_size(32)));
typedef float sm_v4f __attribute__((vector_size(16)));
typedef int32_t sm_v8i __attribute__((vector_size(32)));
typedef double sm_v4d __attribute__((vector_size(32)));
#define SM_BLEND(m, a, b) ((sm_v8f)(((sm_v8i)(a) & (m)) | ((sm_v8i)(b) & ~(m))))

static inline __attribute__((always_inline)) sm_v8f sm_ld(const float *p, int64_t w) {
    sm_v8f v = {0};
    if (w == 8) memcpy(&v, p, sizeof v);
    else
        for (int64_t i = 0; i < w; i++) v[i] = p[i];
    return v;
}

static inline __attribute__((always_inline)) void sm_st(float *p, sm_v8f v, int64_t w) {
    if (w == 8) memcpy(p, &v, sizeof v);
    else
        for (int64_t i = 0; i < w; i++) p[i] = v[i];
}

GOBLIN_TARGET_CLONES("avx2", "default") static void
sm_cols_f32(const float *x, float *y, int64_t R, int64_t L, bool lg) {
    const sm_v8f zero = {0};
    for (int64_t l0 = 0; l0 < L; l0 += 8) {
        int64_t w = L - l0 < 8 ? L - l0 : 8;
        sm_v8f m = zero - INFINITY;
        sm_v8i bad = {0};
        for (int64_t r = 0; r < R; r++) {
            sm_v8f v = sm_ld(x + r * L + l0, w);
            bad |= v != v;
            m = SM_BLEND(v > m, v, m);
        }
        bad |= (m == INFINITY) | (m == -INFINITY);
        m = SM_BLEND(bad, zero, m);
        sm_v4d s0 = {0}, s1 = {0};
        for (int64_t r = 0; r < R; r++) {
            sm_v8f d = sm_ld(x + r * L + l0, w) - m;
            d = SM_BLEND(bad, zero, d);
            sm_v8f e = GOBLIN__VEXPF_NEG(sm_v8f, sm_v8i, d);
            sm_v4f lo = {e[0], e[1], e[2], e[3]}, hi = {e[4], e[5], e[6], e[7]};
            s0 += __builtin_convertvector(lo, sm_v4d);
            s1 += __builtin_convertvector(hi, sm_v4d);
            if (!lg) sm_st(y + r * L + l0, e, w);
        }
        sm_v8f f; /* lg: (float)log(sum); else (float)(1 / sum) */
        for (int q = 0; q < 4; q++) {
            f[q] = lg ? (float)log(s0[q]) : (float)(1.0 / s0[q]);
            f[q + 4] = lg ? (float)log(s1[q]) : (float)(1.0 / s1[q]);
        }
        const sm_v8f nanv = zero + NAN;
        for (int64_t r = 0; r < R; r++) {
            sm_v8f o = lg ? (sm_ld(x + r * L + l0, w) - m) - f : sm_ld(y + r * L + l0, w) * f;
            sm_st(y + r * L + l0, SM_BLEND(bad, nanv, o), w);
        }
    }
}

static void smrun(void *arg, int64_t a) {
    smjob *j = arg;
    int64_t L = j->L;
    if (!j->f64) {
        int64_t at = a * j->R * L;
        sm_cols_f32((const float *)j->x + at, (float *)j->y + at, j->R, L, j->lg);
        return;
    }
    double *m = j->work + a * 2 * L, *s = m + L;
    SM_BODY(double);
}

static goblin_err blis_softmax(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                             int32_t n_in, goblin_tensor *out) {
    bool lg = node->op == GOBLIN_OP_LOG_SOFTMAX;
    const goblin_tensor *x = &in[0];
    int64_t ax = goblin__attr_i(node, GOBLIN_ATTR_AXIS, -1);
    if (ax < 0) ax += x->rank;
    bool ok = n_in == 1 && x->rank > 0 && ax >= 0 && ax < x->rank - 1 && x->dtype == out->dtype &&
              (x->dtype == GOBLIN_DTYPE_F32 || x->dtype == GOBLIN_DTYPE_F64) &&
              goblin_tensor_is_contiguous(x) && goblin_tensor_is_contiguous(out);
    int64_t A = 1, L = 1;
    if (ok) {
        for (int32_t d = 0; d < ax; d++) A *= x->shape[d];
        for (int32_t d = (int32_t)ax + 1; d < x->rank; d++) L *= x->shape[d];
        ok = L > 1;
    }
    if (!ok) return goblin__blis_softmax_last_axis(k, node, in, n_in, out);
    smjob j = {x->dtype == GOBLIN_DTYPE_F64, lg, x->data, out->data, A, x->shape[ax], L, NULL};
    if (A == 0 || j.R == 0) return GOBLIN_OK;
    if (j.f64 && !(j.work = goblin__alloc((size_t)A * (size_t)L * 2 * sizeof(double))))
        return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "softmax: out of memory");
    goblin__parallel_for(k->threads > 0 ? k->threads : 1, A, smrun, &j);
    goblin__free(j.work);
    return GOBLIN_OK;
}

void goblin__blis_register_softmax(goblin__kernel_fn *t) {
    goblin__blis_set(t, GOBLIN_OP_SOFTMAX, blis_softmax);
    goblin__blis_set(t, GOBLIN_OP_LOG_SOFTMAX, blis_softmax);
}
