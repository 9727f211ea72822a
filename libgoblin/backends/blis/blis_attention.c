/* libgoblin/backends/blis/blis_attention.c - SDPA and SDPA_BACKWARD on the CPU backend: products
 * per batch item on BLIS, small heads as direct products, causal rows without a mask. */
#include <blis.h>
#include <math.h>
#include <string.h>
#include "base/alloc.h"
#include "base/target_clones.h"
#include "blis_conv.h"
#include "blis_impl.h"
#include "kernels/expf.h"
#include "ops/nn.h"
static goblin_err oom(goblin__kctx *k, const char *what) {
    return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory for %s scratch", what);
}

/* ---- SDPA forward and backward: products per batch item ---------------------------- */

typedef struct sdpa_job {
    goblin_dtype dt;
    int64_t es, L, S, E, Ev, batch, rows, cols, which;
    int32_t br;
    const int64_t *bshape;
    int64_t bs[4][GOBLIN_MAX_RANK], mstr[GOBLIN_MAX_RANK];
    /* row and column strides (elements) of the matrices of q, k, v: the forward reads
     * strided views (a slice of a fused qkv product, a permute) in place */
    int64_t rs[3], cs[3];
    const goblin_tensor *q, *k, *v, *mask, *go;
    char *out, *scratch; /* per chunk: p [L, S], dp [L, S] */
    int64_t nchunks;
    bool causal, bwd;
    bool tiny;     /* small heads: the direct products (tiny_gemm) instead of BLIS */
    int64_t packn; /* their packing buffer: max(L, S, E, Ev) x max(S, E, Ev) rounded up to 8 */
    double scale;
    /* backward: the run's three outputs dq, dk, dv of every item (sd_memo, sd_memo_off),
     * memo_per bytes apart; memo_ready: already computed by another backward node */
    char *memo;
    size_t memo_per;
    bool memo_ready;
    /* the forward's exp weights, sums and row states of every item (sdf_memo), fmemo_per
     * bytes apart: written by a forward node, read by the backward of the same attention */
    char *fmemo;
    size_t fmemo_per;
} sdpa_job;

/* One row of scores r[0, n) to softmax weights, the reference kernel's rules: *state 0
 * normal (r normalized in place when @p normalize, else exp(x - max) with *z the sum),
 * 1 no key attended (all -inf: r = 0), 2 NaN or +inf in the row (r = 0).
 * f64: libm exp, summed in column order. f32: 8 lanes (GCC vector types, an AVX2
 * clone and a baseline one with the same bits: neither has FMA), exp by the
 * polynomial of blis_reduce.c's softmax (about 1 ulp), lane sums folded in a fixed
 * order in double: within SDPA's contract, and the same bits on any thread count. */
static void sd_row_f64(double *r, int64_t n, int64_t cap, double *z, uint8_t *state,
                       bool normalize) {
    (void)cap;
    double mx = -INFINITY;
    bool nan = false;
    for (int64_t c = 0; c < n; c++) {
        if (isnan(r[c])) nan = true;
        if (r[c] > mx) mx = r[c];
    }
    *z = 1;
    if (nan || mx == INFINITY || mx == -INFINITY) {
        *state = mx == -INFINITY && !nan ? 1 : 2;
        for (int64_t c = 0; c < n; c++) r[c] = 0;
        return;
    }
    *state = 0;
    double s = 0;
    for (int64_t c = 0; c < n; c++) {
        r[c] = r[c] == -INFINITY ? 0 : exp(r[c] - mx);
        s += r[c];
    }
    *z = s;
    if (normalize)
        for (int64_t c = 0; c < n; c++) r[c] /= s;
}

#pragma GCC diagnostic ignored "-Wpsabi" /* vector helpers are always inlined: no ABI */
typedef float sd_v8f __attribute__((vector_size(32)));
typedef int32_t sd_v8i __attribute__((vector_size(32)));
#define SD_BLEND(m, a, b) ((sd_v8f)(((sd_v8i)(a) & (m)) | ((sd_v8i)(b) & ~(m))))

/* exp(x) for x <= 0 or -inf, 8 lanes: expf_impl.h's vector form, as blis_reduce.c's
 * softmax uses it (Cody-Waite, our fitted polynomial, 2^n in two halves; x < -104 gives 0). */
#define SD_VEXP_NEG(xin) GOBLIN__VEXPF_NEG(sd_v8f, sd_v8i, xin)

/* r[0, cap) is the row's memory; only [0, n) is scored and [n, cap) must hold 0 on entry
 * (it does: a causal row's dead columns), so the tail of [0, n) can be read and written as a
 * whole vector with its dead lanes masked to -inf (exp 0) while it stays inside cap. */
GOBLIN_TARGET_CLONES("avx2", "default") static void
sd_row_f32(float *r, int64_t n, int64_t cap, float *z, uint8_t *state, bool normalize) {
    const sd_v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
    sd_v8f mv = {0};
    mv -= INFINITY;
    sd_v8i bad = {0};
    int64_t nv = n / 8 * 8;
    for (int64_t c = 0; c < nv; c += 8) {
        sd_v8f v;
        memcpy(&v, r + c, sizeof v);
        bad |= v != v;
        mv = SD_BLEND(v > mv, v, mv);
    }
    /* lane max by halving (no NaN in mv: NaN never wins a > compare) */
    sd_v8f sh = __builtin_shuffle(mv, (sd_v8i){4, 5, 6, 7, 0, 1, 2, 3});
    mv = SD_BLEND(sh > mv, sh, mv);
    sh = __builtin_shuffle(mv, (sd_v8i){2, 3, 0, 1, 6, 7, 4, 5});
    mv = SD_BLEND(sh > mv, sh, mv);
    sh = __builtin_shuffle(mv, (sd_v8i){1, 0, 3, 2, 5, 4, 7, 6});
    mv = SD_BLEND(sh > mv, sh, mv);
    float mx = mv[0];
    sd_v8i b2 = bad | __builtin_shuffle(bad, (sd_v8i){4, 5, 6, 7, 0, 1, 2, 3});
    bool nan = (b2[0] | b2[1] | b2[2] | b2[3]) != 0;
    for (int64_t c = nv; c < n; c++) {
        if (isnan(r[c])) nan = true;
        if (r[c] > mx) mx = r[c];
    }
    *z = 1;
    if (nan || mx == INFINITY || mx == -INFINITY) {
        *state = mx == -INFINITY && !nan ? 1 : 2;
        for (int64_t c = 0; c < n; c++) r[c] = 0;
        return;
    }
    *state = 0;
    sd_v8f acc = {0}, ninf = {0};
    ninf -= INFINITY;
    int64_t c = 0;
    for (; c < nv; c += 8) {
        sd_v8f v;
        memcpy(&v, r + c, sizeof v);
        sd_v8f e = SD_VEXP_NEG(v - mx);
        acc += e;
        memcpy(r + c, &e, sizeof e);
    }
    if (c < n) { /* the tail, as a whole vector with lanes past n at -inf */
        bool whole = c + 8 <= cap;
        sd_v8f v;
        if (whole) {
            memcpy(&v, r + c, sizeof v);
        } else {
            float buf[8];
            for (int l = 0; l < 8; l++) buf[l] = c + l < n ? r[c + l] : 0;
            memcpy(&v, buf, sizeof v);
        }
        v = SD_BLEND(lane < (int32_t)(n - c), v, ninf);
        sd_v8f e = SD_VEXP_NEG(v - mx);
        acc += e;
        if (whole) memcpy(r + c, &e, sizeof e);
        else
            for (int l = 0; c + l < n; l++) r[c + l] = e[l];
    }
    /* lanes to double, summed as a fixed tree */
    double s = (((double)acc[0] + (double)acc[4]) + ((double)acc[2] + (double)acc[6])) +
               (((double)acc[1] + (double)acc[5]) + ((double)acc[3] + (double)acc[7]));
    float sf = (float)s;
    *z = sf;
    if (normalize) {
        int64_t end = (n + 7) / 8 * 8 <= cap ? (n + 7) / 8 * 8 : nv; /* dead lanes: 0 / s = 0 */
        for (c = 0; c < end; c += 8) {
            sd_v8f v;
            memcpy(&v, r + c, sizeof v);
            v /= sf;
            memcpy(r + c, &v, sizeof v);
        }
        for (; c < n; c++) r[c] /= sf;
    }
}

/* ---- small heads: direct products instead of a BLIS call per tiny product ----------------
 * For L, S <= SD_TINY_LS and E, Ev <= SD_TINY_E every product of an item runs here:
 * c [m, n] (rows contiguous) = alpha sum_k a(i, k) b(k, n), a(i, k) = a[i rsa + k csa] and
 * b(k, n) = b[k rsb + n csb]. Each element of c is summed over k in order, each term
 * added by one fused multiply-add, then scaled by alpha: a fixed order, so the same bits
 * on any thread count; two versions, AVX2 + FMA instructions and portable code calling
 * fmaf / fma (both exactly rounded), so the same bits on every CPU. */
#define SD_TINY_LS 128
#define SD_TINY_E 64

#pragma GCC diagnostic ignored "-Wpsabi" /* vector helpers are always inlined: no ABI */
typedef float sd_t8f __attribute__((vector_size(32)));
typedef double sd_t4d __attribute__((vector_size(32)));

/* Causal attention without a mask (its weights p[i, c] are exactly 0 for c > i) skips
 * products whose terms are all p = 0 times a finite value (tri):
 *   SD_TRI_A_UPPER: a(i, kk) = 0 for kk > i: row group i0.. sums kk < i0 + 4 only;
 *   SD_TRI_A_LOWER: a(i, kk) = 0 for kk < i: row group i0.. sums kk >= i0 only;
 *   SD_TRI_C_UPPER: only c(i, x) for x <= i is wanted: the rest is left unwritten.
 * A skipped term p * b = +-0 would be added to a sum that starts at +0 and so is never
 * -0 (x + -x is +0 in round-to-nearest): adding it changes no bit, skipping it neither. The
 * caller asks for A_UPPER / A_LOWER only when b is finite (0 * inf would have been NaN). */
enum { SD_TRI_NONE, SD_TRI_A_UPPER, SD_TRI_A_LOWER, SD_TRI_C_UPPER };

/* Scale the sums of rows i0.. (nr of them, one vector of columns from x0) by alpha and
 * store them into c (rows of n; columns past n are padding and dropped). */
#define TG_STORE(T, V, VL, c, n, i0, nr, X0, alpha, c0, c1, c2, c3)                             \
    do {                                                                                        \
        const int64_t x0_ = (X0);                                                               \
        if (alpha != 1) {                                                                       \
            c0 *= alpha;                                                                        \
            c1 *= alpha;                                                                        \
            c2 *= alpha;                                                                        \
            c3 *= alpha;                                                                        \
        }                                                                                       \
        T *cr = c + i0 * n + x0_;                                                                \
        if (x0_ + VL <= n && nr == 4) {                                                          \
            memcpy(cr, &c0, sizeof c0);                                                         \
            memcpy(cr + n, &c1, sizeof c1);                                                     \
            memcpy(cr + 2 * n, &c2, sizeof c2);                                                 \
            memcpy(cr + 3 * n, &c3, sizeof c3);                                                 \
        } else {                                                                                \
            int64_t w = n - x0_ < VL ? n - x0_ : VL;                                              \
            for (int64_t x = 0; x < w; x++) {                                                   \
                cr[x] = c0[x];                                                                  \
                if (nr > 1) cr[n + x] = c1[x];                                                  \
                if (nr > 2) cr[2 * n + x] = c2[x];                                              \
                if (nr > 3) cr[3 * n + x] = c3[x];                                              \
            }                                                                                   \
        }                                                                                       \
    } while (0)

/* B is read in place when it is contiguous rows of whole vectors, else packed (rows of a
 * strided view may lie in a few cache sets: read many times, they would miss): k rows of np
 * (n rounded up to the vector length, zero padded). Rows
 * of c run in groups of 4 sharing each B vector, two vectors of columns at a time (one for
 * the rest), each element summed in registers over k in order: the blocking changes which
 * sums run side by side, never the order of any one sum, so no bit of the result. */
/* A short row of n bytes (a multiple of 4) copied by fixed-size pieces, which compile to
 * moves (a row of a head is a few dozen bytes: a library call per row would cost more) */
static inline void sd_copy(void *dst, const void *src, size_t n) {
    char *d = dst;
    const char *s = src;
    size_t o = 0;
    for (; o + 32 <= n; o += 32) memcpy(d + o, s + o, 32);
    if (o + 16 <= n) memcpy(d + o, s + o, 16), o += 16;
    if (o + 8 <= n) memcpy(d + o, s + o, 8), o += 8;
    if (o + 4 <= n) memcpy(d + o, s + o, 4);
}

#define DEFINE_TINY_GEMM(name, ATTR, T, V, VL, FMA)                                              \
    ATTR static void name(                                                                      \
        int64_t m, int64_t n, int64_t k, T alpha, const T *a, int64_t rsa, int64_t csa,         \
        const T *b, int64_t rsb, int64_t csb, T *restrict c, T *restrict pack, int tri) {        \
        int64_t np = (n + VL - 1) / VL * VL, ldp = np;                                          \
        const T *bp = pack;                                                                     \
        if (csb == 1 && n == np && rsb == n) { /* contiguous whole vectors: read in place */   \
            bp = b;                                                                             \
            ldp = rsb;                                                                          \
        } else if (rsb == 1 && csb != 1) { /* b^T's rows contiguous: read them in order */     \
            for (int64_t x = 0; x < n; x++)                                                     \
                for (int64_t kk = 0; kk < k; kk++) pack[kk * np + x] = b[kk + x * csb];         \
            for (int64_t kk = 0; kk < k; kk++)                                                  \
                for (int64_t x = n; x < np; x++) pack[kk * np + x] = 0;                         \
        } else {                                                                                \
            for (int64_t kk = 0; kk < k; kk++) {                                                \
                T *restrict pr = pack + kk * np;                                                \
                if (np - n == VL / 2) /* the last half vector: zeros, then the row over them */ \
                    memset(pr + np - VL, 0, sizeof(T) * VL);                                    \
                else                                                                            \
                    for (int64_t x = n; x < np; x++) pr[x] = 0;                                 \
                if (csb == 1) sd_copy(pr, b + kk * rsb, sizeof(T) * (size_t)n);                 \
                else for (int64_t x = 0; x < n; x++) pr[x] = b[kk * rsb + x * csb];             \
            }                                                                                   \
        }                                                                                       \
        for (int64_t i0 = 0; i0 < m; i0 += 4) {                                                 \
            int64_t nr = m - i0 < 4 ? m - i0 : 4;                                               \
            const T *a0 = a + i0 * rsa, *a1 = a0 + (nr > 1 ? rsa : 0);                         \
            const T *a2 = a0 + (nr > 2 ? 2 * rsa : 0), *a3 = a0 + (nr > 3 ? 3 * rsa : 0);       \
            int64_t k0 = 0, k1 = k, xe = np; /* the products this row group needs (tri) */      \
            if (tri == SD_TRI_A_UPPER) k1 = i0 + nr < k ? i0 + nr : k;                          \
            else if (tri == SD_TRI_A_LOWER) k0 = i0 < k ? i0 : k;                               \
            else if (tri == SD_TRI_C_UPPER) xe = (i0 + nr + VL - 1) / VL * VL < np ? (i0 + nr + VL - 1) / VL * VL : np; \
            int64_t x0 = 0;                                                                     \
            /* two vectors of columns at a time (8 sums in flight), then one */                 \
            for (; x0 + 2 * VL <= xe; x0 += 2 * VL) {                                           \
                V c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, d0 = {0}, d1 = {0}, d2 = {0}, d3 = {0}; \
                for (int64_t kk = k0; kk < k1; kk++) {                                          \
                    V bv, bw;                                                                   \
                    memcpy(&bv, bp + kk * ldp + x0, sizeof bv);                                 \
                    memcpy(&bw, bp + kk * ldp + x0 + VL, sizeof bw);                            \
                    T s0 = a0[kk * csa], s1 = a1[kk * csa], s2 = a2[kk * csa], s3 = a3[kk * csa]; \
                    FMA(c0, s0, bv);                                                            \
                    FMA(d0, s0, bw);                                                            \
                    FMA(c1, s1, bv);                                                            \
                    FMA(d1, s1, bw);                                                            \
                    FMA(c2, s2, bv);                                                            \
                    FMA(d2, s2, bw);                                                            \
                    FMA(c3, s3, bv);                                                            \
                    FMA(d3, s3, bw);                                                            \
                }                                                                               \
                TG_STORE(T, V, VL, c, n, i0, nr, x0, alpha, c0, c1, c2, c3);                    \
                TG_STORE(T, V, VL, c, n, i0, nr, x0 + VL, alpha, d0, d1, d2, d3);               \
            }                                                                                   \
            for (; x0 < xe; x0 += VL) {                                                         \
                V c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};                                       \
                for (int64_t kk = k0; kk < k1; kk++) {                                          \
                    V bv;                                                                       \
                    memcpy(&bv, bp + kk * ldp + x0, sizeof bv);                                 \
                    FMA(c0, a0[kk * csa], bv);                                                  \
                    FMA(c1, a1[kk * csa], bv);                                                  \
                    FMA(c2, a2[kk * csa], bv);                                                  \
                    FMA(c3, a3[kk * csa], bv);                                                  \
                }                                                                               \
                TG_STORE(T, V, VL, c, n, i0, nr, x0, alpha, c0, c1, c2, c3);                    \
            }                                                                                   \
        }                                                                                       \
    }
/* acc += s v, one fused multiply-add per lane (rounded once: exactly specified, so the
 * x86 FMA instructions and libm's fmaf / fma give the same bits) */
#define SD_FMA_F32_ANY(acc, s, v)                                                               \
    do {                                                                                        \
        for (int l_ = 0; l_ < 8; l_++) (acc)[l_] = fmaf((s), (v)[l_], (acc)[l_]);               \
    } while (0)
#define SD_FMA_F64_ANY(acc, s, v)                                                               \
    do {                                                                                        \
        for (int l_ = 0; l_ < 4; l_++) (acc)[l_] = fma((s), (v)[l_], (acc)[l_]);                \
    } while (0)
DEFINE_TINY_GEMM(tiny_gemm_any_f32, , float, sd_t8f, 8, SD_FMA_F32_ANY)
DEFINE_TINY_GEMM(tiny_gemm_any_f64, , double, sd_t4d, 4, SD_FMA_F64_ANY)
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SD_FMA_F32_X86(acc, s, v)                                                               \
    ((acc) = (sd_t8f)_mm256_fmadd_ps(_mm256_set1_ps(s), (__m256)(v), (__m256)(acc)))
#define SD_FMA_F64_X86(acc, s, v)                                                               \
    ((acc) = (sd_t4d)_mm256_fmadd_pd(_mm256_set1_pd(s), (__m256d)(v), (__m256d)(acc)))
#define SD_FMA_ATTR __attribute__((target("avx2,fma")))
DEFINE_TINY_GEMM(tiny_gemm_fma_f32, SD_FMA_ATTR, float, sd_t8f, 8, SD_FMA_F32_X86)
DEFINE_TINY_GEMM(tiny_gemm_fma_f64, SD_FMA_ATTR, double, sd_t4d, 4, SD_FMA_F64_X86)
static bool sd_cpu_fma(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#define SD_TINY_DISPATCH(sfx)                                                                   \
    if (sd_cpu_fma()) {                                                                         \
        tiny_gemm_fma_##sfx(m, n, k, alpha, a, rsa, csa, b, rsb, csb, c, pack, tri);            \
        return;                                                                                 \
    }
#else
#define SD_TINY_DISPATCH(sfx)
#endif
/* the FMA instructions where the CPU has them, else the portable loops: the same bits */
#define DEFINE_TINY_GEMM_ENTRY(sfx, T)                                                          \
    static void tiny_gemm_##sfx(int64_t m, int64_t n, int64_t k, T alpha, const T *a,          \
                                int64_t rsa, int64_t csa, const T *b, int64_t rsb, int64_t csb, \
                                T *restrict c, T *restrict pack, int tri) {                     \
        SD_TINY_DISPATCH(sfx)                                                                   \
        tiny_gemm_any_##sfx(m, n, k, alpha, a, rsa, csa, b, rsb, csb, c, pack, tri);            \
    }
DEFINE_TINY_GEMM_ENTRY(f32, float)
DEFINE_TINY_GEMM_ENTRY(f64, double)

/* c = alpha a @ b for one item: the direct loops above when the job is small (j->pack set),
 * else BLIS (gemm, one thread; c contiguous rows of n) */
#define DEFINE_ITEM_GEMM(sfx, T)                                                                \
    static void item_gemm_##sfx(const sdpa_job *j, int64_t m, int64_t n, int64_t k, double alpha, \
                                const T *a, int64_t rsa, int64_t csa, const T *b, int64_t rsb,    \
                                int64_t csb, T *c, T *pack, int tri) {                          \
        if (pack)                                                                               \
            tiny_gemm_##sfx(m, n, k, (T)alpha, a, rsa, csa, b, rsb, csb, c, pack, tri);         \
        else                                                                                    \
            goblin__blis_gemm_strided(j->dt, 1, m, n, k, alpha, a, rsa, csa, b, rsb, csb, 0.0, c, n, 1);             \
    }
DEFINE_ITEM_GEMM(f32, float)
DEFINE_ITEM_GEMM(f64, double)

/* Scores of batch item b into p [L, S] (scale q k^T, mask, causal), then the row
 * softmax above. Without a mask a causal row's columns past i are set to 0 directly
 * (exp(-inf)), the softmax runs on the live ones only. */
/* Small heads' scratch past p, dp, z (elements): the packing buffer, then the forward's
 * contiguous copy of a strided q [L, E]. */
static int64_t sdpa_tiny_extra(const sdpa_job *j) { return j->packn + j->L * j->E + j->S * j->Ev; }

/* Where output w (0 dq [L, E], 1 dk [S, E], 2 dv [S, Ev]) of an item lies in its memo
 * (elements from the item's start; sd_memo below). */
static int64_t sd_memo_off(const sdpa_job *j, int64_t w) {
    return w == 0 ? 0 : w == 1 ? j->L * j->E : j->L * j->E + j->S * j->E;
}

/* ---- causal rows without a mask, 8 at a time (f32) -------------------------------------
 * For small heads with L and S multiples of 8, scores_ runs the rows of a causal attention
 * without a mask in blocks of 8 rows: each 8 x 8 tile of a block's live columns is
 * transposed in registers so that the lanes are the 8 rows, then every row's max, exp and
 * sum run lane-wise with no horizontal step. Per row: max over its live columns (c <= i),
 * exp(x - max) by SD_VEXP_NEG (dead columns -inf: exp 0), summed in column order in double,
 * z = (float)sum; normalize: each weight / z. A row with a NaN, or an infinite max, is left
 * to sd_row_f32 (the reference's rules). Each row's result depends on that row only (its
 * lane does the same operations in every block), not on its neighbours or the split;
 * separately rounded operations, so the same bits in both clones. */
static inline __attribute__((always_inline)) void sd_tr8(sd_v8f *m) {
    const sd_v8i lo1 = {0, 8, 1, 9, 4, 12, 5, 13}, hi1 = {2, 10, 3, 11, 6, 14, 7, 15};
    const sd_v8i lo2 = {0, 1, 8, 9, 4, 5, 12, 13}, hi2 = {2, 3, 10, 11, 6, 7, 14, 15};
    const sd_v8i lo4 = {0, 1, 2, 3, 8, 9, 10, 11}, hi4 = {4, 5, 6, 7, 12, 13, 14, 15};
    sd_v8f t[8], u[8];
    for (int q = 0; q < 8; q += 2) {
        t[q] = __builtin_shuffle(m[q], m[q + 1], lo1);
        t[q + 1] = __builtin_shuffle(m[q], m[q + 1], hi1);
    }
    for (int q = 0; q < 8; q += 4) {
        u[q] = __builtin_shuffle(t[q], t[q + 2], lo2);
        u[q + 1] = __builtin_shuffle(t[q], t[q + 2], hi2);
        u[q + 2] = __builtin_shuffle(t[q + 1], t[q + 3], lo2);
        u[q + 3] = __builtin_shuffle(t[q + 1], t[q + 3], hi2);
    }
    for (int q = 0; q < 4; q++) {
        m[q] = __builtin_shuffle(u[q], u[q + 4], lo4);
        m[q + 4] = __builtin_shuffle(u[q], u[q + 4], hi4);
    }
}

typedef double sd_b4d __attribute__((vector_size(32)));
typedef float sd_b4f __attribute__((vector_size(16)));

GOBLIN_TARGET_CLONES("avx2", "default") static void
sd_causal_blocks_f32(float *p, int64_t L, int64_t S, float *z, uint8_t *state, bool normalize) {
    const sd_v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
    sd_v8f zero = {0}, ninf = zero - INFINITY;
    sd_v8f c[SD_TINY_LS / 8][8];
    for (int64_t i0 = 0; i0 < L; i0 += 8) {
        int64_t nt = (i0 + 8 < S ? i0 + 8 : S) / 8, dt = i0 < S ? i0 / 8 : -1; /* tiles; diagonal */
        sd_v8f mx = ninf;
        sd_v8i bad = {0};
        for (int64_t t = 0; t < nt; t++) {
            for (int l = 0; l < 8; l++) memcpy(&c[t][l], p + (i0 + l) * S + 8 * t, sizeof(sd_v8f));
            sd_tr8(c[t]);
            for (int cc = 0; cc < 8; cc++) {
                sd_v8f v = c[t][cc];
                if (t == dt) /* row i0 + l sees the columns up to i0 + l */
                    v = SD_BLEND(lane >= cc, v, ninf);
                c[t][cc] = v;
                bad |= v != v;
                mx = SD_BLEND(v > mx, v, mx);
            }
        }
        bad |= (mx == INFINITY) | (mx == -INFINITY);
        mx = SD_BLEND(bad, zero, mx);
        sd_b4d s0 = {0}, s1 = {0};
        for (int64_t t = 0; t < nt; t++)
            for (int cc = 0; cc < 8; cc++) {
                sd_v8f e = SD_VEXP_NEG(SD_BLEND(bad, zero, c[t][cc] - mx));
                sd_b4f e0 = {e[0], e[1], e[2], e[3]}, e1 = {e[4], e[5], e[6], e[7]};
                s0 += __builtin_convertvector(e0, sd_b4d);
                s1 += __builtin_convertvector(e1, sd_b4d);
                c[t][cc] = e;
            }
        sd_v8f zf = {(float)s0[0], (float)s0[1], (float)s0[2], (float)s0[3],
                     (float)s1[0], (float)s1[1], (float)s1[2], (float)s1[3]};
        for (int64_t t = 0; t < nt; t++) {
            if (normalize)
                for (int cc = 0; cc < 8; cc++) c[t][cc] /= zf;
            sd_tr8(c[t]);
        }
        for (int l = 0; l < 8; l++) {
            float *r = p + (i0 + l) * S;
            int64_t live = i0 + l + 1 < S ? i0 + l + 1 : S;
            if (bad[l]) { /* the reference's rules for this row */
                for (int64_t q = live; q < S; q++) r[q] = 0;
                sd_row_f32(r, live, S, &z[i0 + l], &state[i0 + l], normalize);
                continue;
            }
            for (int64_t t = 0; t < nt; t++) memcpy(r + 8 * t, &c[t][l], sizeof(sd_v8f));
            for (int64_t q = 8 * nt; q < S; q++) r[q] = 0;
            z[i0 + l] = zf[l];
            state[i0 + l] = 0;
        }
    }
}
/* scores_'s choice: the blocks above, else its rows one by one (f64: always) */
static bool sd_blocks_f32(const sdpa_job *j, float *p, float *z, uint8_t *state, bool normalize) {
    if (!j->causal || j->mask || !j->tiny || j->E <= 0 || j->L % 8 || j->S % 8) return false;
    sd_causal_blocks_f32(p, j->L, j->S, z, state, normalize);
    return true;
}
static bool sd_blocks_f64(const sdpa_job *j, double *p, double *z, uint8_t *state, bool normalize) {
    (void)j, (void)p, (void)z, (void)state, (void)normalize;
    return false;
}

#define DEFINE_SOFTMAX(sfx, T)                                                                  \
    static void scores_##sfx(const sdpa_job *j, const int64_t *off, T *p, T *z, uint8_t *state, \
                             bool normalize, T *pack, const T *q, int64_t qrs, int64_t qcs) {   \
        item_gemm_##sfx(j, j->L, j->S, j->E, j->scale, q, qrs, qcs,                             \
                        (const T *)j->k->data + off[1], j->cs[1], j->rs[1], p, pack,            \
                        j->causal && !j->mask ? SD_TRI_C_UPPER : SD_TRI_NONE);                  \
        if (sd_blocks_##sfx(j, p, z, state, normalize)) return;                                 \
        int32_t br = j->br;                                                                     \
        for (int64_t i = 0; i < j->L; i++) {                                                    \
            T *r = p + i * j->S;                                                                \
            int64_t live = j->S;                                                                \
            if (j->E == 0)                                                                      \
                for (int64_t c = 0; c < j->S; c++) r[c] = 0;                                    \
            if (j->causal && !j->mask) {                                                        \
                live = i + 1 < j->S ? i + 1 : j->S;                                             \
                for (int64_t c = live; c < j->S; c++) r[c] = 0;                                 \
            } else if (j->causal) {                                                             \
                for (int64_t c = i + 1; c < j->S; c++) r[c] = -INFINITY;                        \
            }                                                                                   \
            if (j->mask) {                                                                      \
                const goblin_tensor *m = j->mask;                                               \
                for (int64_t c = 0; c < j->S; c++) {                                            \
                    int64_t mo = off[3] + i * j->mstr[br] + c * j->mstr[br + 1];                \
                    if (m->dtype == GOBLIN_DTYPE_BOOL) {                                        \
                        if (!((const uint8_t *)m->data)[mo]) r[c] = -INFINITY;                  \
                    } else {                                                                    \
                        r[c] += ((const T *)m->data)[mo];                                       \
                    }                                                                           \
                }                                                                               \
            }                                                                                   \
            sd_row_##sfx(r, live, j->S, &z[i], &state[i], normalize);                           \
        }                                                                                       \
    }
DEFINE_SOFTMAX(f32, float)
DEFINE_SOFTMAX(f64, double)

#if defined(_OPENMP)
#define SD_SIMD _Pragma("omp simd")
#define SD_SIMD_SUM_SPD _Pragma("omp simd reduction(+ : spd)")
#else
#define SD_SIMD
#define SD_SIMD_SUM_SPD
#endif

/* No inf or NaN among x[0, n): the exponent bits of every element are not all ones. */
static bool sd_finite_f32(const float *x, int64_t n) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
}
static bool sd_finite_f64(const double *x, int64_t n) {
    uint64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= (uint64_t)((u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull);
    }
    return bad == 0;
}

/* The same over a matrix [rows, cols] with row stride rs and column stride cs. Rows of
 * contiguous elements: the largest magnitude bits of all of them (a NaN's or inf's are
 * the largest), one pass that vectorizes. */
#define DEFINE_SD_FINITE_M(sfx, T, U, MAG, INF)                                                 \
    static bool sd_finite_m_##sfx(const T *x, int64_t rows, int64_t cols, int64_t rs, int64_t cs) { \
        if (cs == 1 && (rs == cols || rows <= 1)) return sd_finite_##sfx(x, rows * cols);       \
        if (cs == 1) {                                                                          \
            U mx = 0;                                                                           \
            for (int64_t r = 0; r < rows; r++) {                                                \
                const T *xr = x + r * rs;                                                       \
                SD_SIMD for (int64_t c = 0; c < cols; c++) {                                    \
                    U u;                                                                        \
                    memcpy(&u, xr + c, sizeof u);                                               \
                    u &= MAG;                                                                   \
                    mx = u > mx ? u : mx;                                                       \
                }                                                                               \
            }                                                                                   \
            return mx < INF;                                                                    \
        }                                                                                       \
        for (int64_t r = 0; r < rows; r++) {                                                    \
            if (cs == 1) {                                                                      \
                if (!sd_finite_##sfx(x + r * rs, cols)) return false;                           \
            } else {                                                                            \
                for (int64_t c = 0; c < cols; c++)                                              \
                    if (!sd_finite_##sfx(x + r * rs + c * cs, 1)) return false;                 \
            }                                                                                   \
        }                                                                                       \
        return true;                                                                            \
    }
DEFINE_SD_FINITE_M(f32, float, uint32_t, 0x7fffffffu, 0x7f800000u)
DEFINE_SD_FINITE_M(f64, double, uint64_t, 0x7fffffffffffffffull, 0x7ff0000000000000ull)

#define DEFINE_SDPA_ITEM(sfx, T)                                                                \
    static void sdpa_item_##sfx(const sdpa_job *j, int64_t b, char *scratch) {                  \
        const T sc = (T)j->scale;                                                               \
        int64_t off[4] = {0, 0, 0, 0};                                                          \
        goblin__nditer it;                                                                      \
        int64_t bs[4][GOBLIN_MAX_RANK];                                                         \
        memcpy(bs, j->bs, sizeof bs);                                                           \
        goblin__nditer_init(&it, j->br, j->bshape, 4, bs);                                      \
        goblin__nditer_seek(&it, b);                                                            \
        for (int32_t a = 0; a < 4; a++) off[a] = it.off[a];                                     \
        int64_t L = j->L, S = j->S;                                                             \
        T *p = (T *)scratch, *dp = p + L * S, *z = dp + L * S;                                  \
        T *pack = j->tiny ? z + L : NULL; /* j->packn elements */                                 \
        uint8_t *state = (uint8_t *)(z + L + (j->tiny ? sdpa_tiny_extra(j) : 0));               \
        /* q as a strided view (a head of a wider tensor: rows far apart) is copied once into \
         * contiguous rows for the small products, which read it many times; v is packed by  \
         * them (the copies change no value, so no bit of the result) */                      \
        const T *qp = (const T *)j->q->data + off[0], *v = (const T *)j->v->data + off[2];      \
        int64_t qrs = j->rs[0], qcs = j->cs[0], vrs = j->rs[2], vcs = j->cs[2];                 \
        if (pack && !j->bwd && (qcs != 1 || qrs != j->E) && L > 1 && j->E > 0) {                \
            T *qb = pack + j->packn;                                                            \
            for (int64_t i = 0; i < L; i++)                                                     \
                if (qcs == 1) sd_copy(qb + i * j->E, qp + i * qrs, sizeof(T) * (size_t)j->E);    \
                else for (int64_t e = 0; e < j->E; e++) qb[i * j->E + e] = qp[i * qrs + e * qcs]; \
            qp = qb, qrs = j->E, qcs = 1;                                                       \
        }                                                                                       \
        if (pack && !j->bwd && (vcs != 1 || vrs != j->Ev) && S > 1 && j->Ev > 0) {              \
            T *vb = pack + j->packn + L * j->E;                                                 \
            for (int64_t c = 0; c < S; c++)                                                     \
                if (vcs == 1) sd_copy(vb + c * j->Ev, v + c * vrs, sizeof(T) * (size_t)j->Ev);   \
                else for (int64_t e = 0; e < j->Ev; e++) vb[c * j->Ev + e] = v[c * vrs + e * vcs]; \
            v = vb, vrs = j->Ev, vcs = 1;                                                       \
        }                                                                                       \
        const T *fp = j->fmemo ? (const T *)(j->fmemo + (size_t)b * j->fmemo_per) : NULL;       \
        if (fp && !j->bwd) { /* the forward keeps its weights for the backward */               \
            p = (T *)fp;                                                                        \
            z = p + L * S;                                                                      \
            state = (uint8_t *)(z + L);                                                         \
        }                                                                                       \
        T *o = (T *)j->out + b * j->rows * j->cols;                                             \
        if (fp && j->bwd) {                                                                     \
            /* the forward's exp weights over their row sums: what scores_ would give, since  \
             * the normalization is that very division, element by element */                  \
            const T *fz = fp + L * S;                                                           \
            const uint8_t *fst = (const uint8_t *)(fz + L);                                     \
            for (int64_t i = 0; i < L; i++) {                                                   \
                state[i] = fst[i];                                                              \
                z[i] = fz[i];                                                                   \
                T *restrict pr = p + i * S;                                                     \
                const T *restrict fr = fp + i * S;                                              \
                if (fst[i] != 0) {                                                              \
                    for (int64_t c = 0; c < S; c++) pr[c] = 0;                                  \
                } else {                                                                        \
                    const T zi = fz[i];                                                         \
                    SD_SIMD for (int64_t c = 0; c < S; c++) pr[c] = fr[c] / zi;                 \
                }                                                                               \
            }                                                                                   \
        } else {                                                                                \
            scores_##sfx(j, off, p, z, state, j->bwd, pack, qp, qrs, qcs);                      \
        }                                                                                       \
        /* causal without a mask, small heads: the products skip the weights' zero triangle */  \
        const bool tri = j->causal && !j->mask && pack;                                         \
        const bool fin_v = tri && sd_finite_m_##sfx(v, S, j->Ev, vrs, vcs);                     \
        const bool fin_go = tri && j->bwd &&                                                     \
                            sd_finite_##sfx((const T *)j->go->data + b * L * j->Ev, L * j->Ev);  \
        if (!j->bwd) { /* out = (exp weights @ v) / z */                                        \
            item_gemm_##sfx(j, L, j->Ev, S, 1.0, p, S, 1, v, vrs, vcs, o, pack,                 \
                            tri && fin_v ? SD_TRI_A_UPPER : SD_TRI_NONE);                       \
            for (int64_t i = 0; i < L; i++) {                                                   \
                T *restrict orow = o + i * j->Ev;                                               \
                const T zi = z[i], fill = state[i] == 2 ? (T)NAN : 0;                           \
                if (state[i] == 2 || S == 0)                                                    \
                    for (int64_t e = 0; e < j->Ev; e++) orow[e] = fill;                         \
                else                                                                            \
                    SD_SIMD for (int64_t e = 0; e < j->Ev; e++) orow[e] /= zi;                  \
            }                                                                                   \
            return;                                                                             \
        }                                                                                       \
        const T *go = (const T *)j->go->data + b * L * j->Ev;                                   \
        if (j->which != 2 || j->memo) {                                                         \
            /* dp = go @ v^T; ds = p (dp - sum p dp) scale (into dp) */                         \
            /* causal, finite go and v: dp[i, c > i] is left out and taken as 0 (it is finite \
             * and meets p = 0: ds there is +-0 either way, which no later sum can see) */       \
            bool tri_dp = tri && fin_v && fin_go;                                               \
            item_gemm_##sfx(j, L, S, j->Ev, 1.0, go, j->Ev, 1, v, vcs, vrs, dp, pack,           \
                            tri_dp ? SD_TRI_C_UPPER : SD_TRI_NONE);                             \
            for (int64_t i = 0; i < L; i++) {                                                   \
                const T *restrict pr = p + i * S;                                               \
                T *restrict dr = dp + i * S;                                                    \
                if (tri_dp)                                                                     \
                    for (int64_t c = i + 1; c < S; c++) dr[c] = 0;                              \
                if (state[i] != 0 || j->Ev == 0) {                                              \
                    for (int64_t c = 0; c < S; c++) dr[c] = 0;                                  \
                    continue;                                                                   \
                }                                                                               \
                T spd = 0; /* lanes of SSE2 width (this function has one ISA): a fixed order */ \
                SD_SIMD_SUM_SPD                                                                 \
                for (int64_t c = 0; c < S; c++) spd += pr[c] * dr[c];                           \
                SD_SIMD                                                                         \
                for (int64_t c = 0; c < S; c++) dr[c] = pr[c] * (dr[c] - spd) * sc;             \
            }                                                                                   \
        }                                                                                       \
        /* this node's output into o; with the run's memo (j->memo) the other two as well,  \
         * into the memo, for their nodes to copy: each product as that node would compute it */ \
        for (int64_t w = 0; w < 3; w++) {                                                       \
            if (w != j->which && !j->memo) continue;                                            \
            int64_t rows = w == 0 ? L : S, cols = w == 2 ? j->Ev : j->E;                        \
            T *ow = w == j->which ? o                                                           \
                                  : (T *)(j->memo + (size_t)b * j->memo_per) + sd_memo_off(j, w); \
            if (w == 2) /* dv = p^T @ go */                                                     \
                item_gemm_##sfx(j, S, j->Ev, L, 1.0, p, 1, S, go, j->Ev, 1, ow, pack,           \
                                tri && fin_go ? SD_TRI_A_LOWER : SD_TRI_NONE);                  \
            /* ds is +-0 above the diagonal when go and v are finite (else it may hold NaN) */  \
            else if (w == 1) /* dk = ds^T @ q */                                                \
                item_gemm_##sfx(j, S, j->E, L, 1.0, dp, 1, S, (const T *)j->q->data + off[0],    \
                                j->rs[0], j->cs[0], ow, pack,                                   \
                                tri && fin_v && fin_go &&                                       \
                                        sd_finite_m_##sfx((const T *)j->q->data + off[0], L,    \
                                                          j->E, j->rs[0], j->cs[0])             \
                                    ? SD_TRI_A_LOWER : SD_TRI_NONE);                            \
            else /* dq = ds @ k */                                                              \
                item_gemm_##sfx(j, L, j->E, S, 1.0, dp, S, 1, (const T *)j->k->data + off[1],    \
                                j->rs[1], j->cs[1], ow, pack,                                   \
                                tri && fin_v && fin_go &&                                       \
                                        sd_finite_m_##sfx((const T *)j->k->data + off[1], S,    \
                                                          j->E, j->rs[1], j->cs[1])             \
                                    ? SD_TRI_A_UPPER : SD_TRI_NONE);                            \
            if (rows > 0 && (j->Ev == 0 || L == 0 || S == 0 || (w == 2 ? L : S) == 0))          \
                for (int64_t r = 0; r < rows * cols; r++) ow[r] = 0;                            \
            /* NaN rows: the reference kernel's propagation */                                  \
            for (int64_t i = 0; i < L; i++) {                                                   \
                if (state[i] != 2) continue;                                                    \
                if (w == 0) {                                                                   \
                    for (int64_t e = 0; e < cols; e++) ow[i * cols + e] = NAN;                  \
                } else {                                                                        \
                    for (int64_t r = 0; r < rows * cols; r++) ow[r] = NAN;                      \
                    break;                                                                      \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    }
DEFINE_SDPA_ITEM(f32, float)
DEFINE_SDPA_ITEM(f64, double)

/* p, dp [L, S], z [L], (small heads) sdpa_tiny_extra, state [L] bytes; rounded up
 * to keep every chunk aligned */
static size_t sdpa_scratch_bytes(const sdpa_job *j) {
    size_t b = (size_t)((2 * j->L * j->S + j->L + (j->tiny ? sdpa_tiny_extra(j) : 0)) * j->es + j->L);
    return (b + 63) / 64 * 64;
}

/* Strided q, k, v (heads of a wider tensor: a fused qkv product split, viewed as heads and
 * transposed, exec.c's views) put each row of an item far from the next: read item by item,
 * every row is a cache miss the prefetchers do not see coming. When item b starts a block
 * of whole rows that item b + 1 shares (the next head of the same rows), the block is read
 * once in order first (a stream the prefetchers follow), so that the items sharing it find
 * it in cache. At most SD_TOUCH_MAX times the item's own elements; reading changes nothing,
 * so no bit of any result. last[]: the blocks read already (q, k, v may share one). */
#define SD_TOUCH_MAX 32
static volatile unsigned char g_sd_sink;

static void sdpa_touch(const sdpa_job *j, int64_t b, const char **last) {
    if (!j->tiny || j->bwd || b + 1 >= j->batch) return;
    const goblin_tensor *t[3] = {j->q, j->k, j->v};
    int64_t rows[3] = {j->L, j->S, j->S}, cols[3] = {j->E, j->E, j->Ev};
    goblin__nditer it;
    int64_t bs[4][GOBLIN_MAX_RANK], off[3], next[3];
    memcpy(bs, j->bs, sizeof bs);
    goblin__nditer_init(&it, j->br, j->bshape, 4, bs);
    goblin__nditer_seek(&it, b);
    memcpy(off, it.off, sizeof off);
    goblin__nditer_next(&it);
    memcpy(next, it.off, sizeof next);
    unsigned char acc = 0;
    for (int a = 0; a < 3; a++) {
        int64_t rs = j->rs[a];
        if (j->cs[a] != 1 || rs <= cols[a] || rs > SD_TOUCH_MAX * cols[a] || rows[a] < 2 || off[a] < 0) continue;
        /* Only memory the tensor itself spans may be read: [data, data + hi elements). The
         * rows' other columns (the other heads) lie inside it except past its last
         * element, which the block may not pass. */
        int64_t hi = 1;
        bool neg = false;
        for (int32_t d = 0; d < t[a]->rank; d++) {
            if (t[a]->shape[d] == 0) hi = 0;
            if (t[a]->strides[d] < 0) neg = true;
            else hi += (t[a]->shape[d] - 1) * t[a]->strides[d];
        }
        if (neg || hi <= 0) continue;
        int64_t o = off[a] - off[a] % rs;
        if (next[a] < o || next[a] >= o + rs) continue; /* item b + 1 is in other rows */
        const char *lo = (const char *)t[a]->data + o * j->es;
        if (lo == last[0] || lo == last[1] || lo == last[2]) continue;
        last[a] = lo;
        int64_t end = o + rows[a] * rs < hi ? o + rows[a] * rs : hi;
        size_t bytes = end > o ? (size_t)((end - o) * j->es) : 0;
        for (size_t q = 0; q < bytes; q += 64) acc ^= (unsigned char)lo[q];
    }
    g_sd_sink = acc;
}

static void sdpa_chunk(void *arg, int64_t chunk) {
    const sdpa_job *j = arg;
    int64_t lo = chunk * j->batch / j->nchunks, hi = (chunk + 1) * j->batch / j->nchunks;
    size_t per = sdpa_scratch_bytes(j);
    char *scratch = j->scratch + (size_t)chunk * per;
    const char *last[3] = {NULL, NULL, NULL};
    for (int64_t b = lo; b < hi; b++) {
        sdpa_touch(j, b, last);
        if (j->dt == GOBLIN_DTYPE_F64) sdpa_item_f64(j, b, scratch);
        else sdpa_item_f32(j, b, scratch);
    }
}

/* Batch strides of @p t (any strides; last two dims its matrix) against the batch shape. */
static void batch_strides(const goblin_tensor *t, int32_t br, const int64_t *bshape, int64_t *strides) {
    int64_t full[GOBLIN_MAX_RANK], st[GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < br; d++) full[d] = bshape[d];
    full[br] = t->shape[t->rank - 2];
    full[br + 1] = t->shape[t->rank - 1];
    goblin__bcast_strides(t, br + 2, full, st);
    for (int32_t d = 0; d < br; d++) strides[d] = st[d];
}

/* The three backward nodes of one attention (dq, dk, dv) each need the softmax weights p
 * of every item, and dq and dk also ds: the first of them computes all three outputs for
 * all items (its own into its output, each product as its node would compute it) and
 * keeps the other two on this thread, keyed by the run (goblin__kctx.run), the operand
 * buffers and the shapes, for their nodes to copy (within a run those buffers hold the
 * same values until their last reader is done). At most SD_MEMO_MAX bytes, in a
 * goblin__tl_buf (kept only under the default allocator, released when the thread ends). */
#define SD_MEMO_MAX ((size_t)64 << 20)

typedef struct sd_memo {
    uint64_t run;
    const void *q, *k, *v, *go, *mask;
    int64_t L, S, E, Ev, batch;
    double scale;
    bool causal;
    goblin_dtype dt;
    goblin__tl_buf buf;
} sd_memo;

static _Thread_local sd_memo t_sd;

/* Point j at the run's kept weights (j->memo_ready: computed already), or leave j->memo
 * NULL (nothing kept: each node computes its own, as before). */
static void sd_memo_attach(uint64_t run, sdpa_job *j) {
    sd_memo *m = &t_sd;
    size_t per = (size_t)((j->L * j->E + j->S * j->E + j->S * j->Ev) * j->es), bytes;
    per = (per + 63) / 64 * 64;
    if (!run || !goblin__mul_size(per, (size_t)j->batch, &bytes) || bytes > SD_MEMO_MAX) return;
    const void *mask = j->mask ? j->mask->data : NULL;
    if (m->buf.p && m->run == run && m->q == j->q->data && m->k == j->k->data && m->v == j->v->data &&
        m->go == j->go->data && m->mask == mask && m->L == j->L && m->S == j->S && m->E == j->E &&
        m->Ev == j->Ev && m->batch == j->batch && m->scale == j->scale && m->causal == j->causal &&
        m->dt == j->dt) {
        j->memo = m->buf.p, j->memo_per = per, j->memo_ready = true;
        return;
    }
    m->run = 0; /* not valid until this node has filled it */
    char *b = goblin__tl_buf_reserve(&m->buf, bytes);
    if (!b) return;
    m->q = j->q->data, m->k = j->k->data, m->v = j->v->data, m->go = j->go->data, m->mask = mask;
    m->L = j->L, m->S = j->S, m->E = j->E, m->Ev = j->Ev, m->batch = j->batch;
    m->scale = j->scale, m->causal = j->causal, m->dt = j->dt;
    j->memo = b, j->memo_per = per, j->memo_ready = false;
}

/* The forward node of an attention keeps its exp weights, row sums and row states of
 * every item on this thread, keyed by the run, the ids of its q, k, v (and mask) nodes,
 * their buffers and the shapes; the first backward node of the same attention in the
 * same run (the same q, k, v nodes) divides them instead of computing the scores and
 * their softmax again. Within a run a node's value never changes, so the key cannot
 * match anything else. SDF_SLOTS attentions at a time (the latest forwards), at most
 * SD_MEMO_MAX bytes each, in goblin__tl_bufs. */
#define SDF_SLOTS 2

typedef struct sdf_memo {
    uint64_t run, stamp;
    int32_t ids[4]; /* q, k, v, mask (-1: none) */
    const void *q, *k, *v, *mask;
    int64_t L, S, E, Ev, batch;
    double scale;
    bool causal;
    goblin_dtype dt;
    goblin__tl_buf buf;
} sdf_memo;

static _Thread_local sdf_memo t_sdf[SDF_SLOTS];
static _Thread_local uint64_t t_sdf_clock;

static size_t sdf_per(const sdpa_job *j) {
    size_t per = (size_t)((j->L * j->S + j->L) * j->es + j->L);
    return (per + 63) / 64 * 64;
}

static bool sdf_match(const sdf_memo *m, uint64_t run, const int32_t *ids, const sdpa_job *j) {
    const void *mask = j->mask ? j->mask->data : NULL;
    return m->buf.p && m->run == run && m->ids[0] == ids[0] && m->ids[1] == ids[1] &&
           m->ids[2] == ids[2] && m->ids[3] == ids[3] && m->q == j->q->data && m->k == j->k->data &&
           m->v == j->v->data && m->mask == mask && m->L == j->L && m->S == j->S && m->E == j->E &&
           m->Ev == j->Ev && m->batch == j->batch && m->scale == j->scale && m->causal == j->causal &&
           m->dt == j->dt;
}

/* Forward: a slot for this node's weights (j->fmemo), or none. Returns the slot, to be
 * marked valid once filled. */
static sdf_memo *sdf_reserve(uint64_t run, const int32_t *ids, sdpa_job *j) {
    size_t per = sdf_per(j), bytes;
    if (!run || !goblin__mul_size(per, (size_t)j->batch, &bytes) || bytes > SD_MEMO_MAX) return NULL;
    sdf_memo *m = &t_sdf[0];
    for (int s = 1; s < SDF_SLOTS; s++) { /* a slot of an older run, else the oldest */
        bool stale = t_sdf[s].run != run, m_stale = m->run != run;
        if ((stale && !m_stale) || (stale == m_stale && t_sdf[s].stamp < m->stamp)) m = &t_sdf[s];
    }
    m->run = 0; /* not valid until filled */
    char *b = goblin__tl_buf_reserve(&m->buf, bytes);
    if (!b) return NULL;
    memcpy(m->ids, ids, sizeof m->ids);
    m->q = j->q->data, m->k = j->k->data, m->v = j->v->data, m->mask = j->mask ? j->mask->data : NULL;
    m->L = j->L, m->S = j->S, m->E = j->E, m->Ev = j->Ev, m->batch = j->batch;
    m->scale = j->scale, m->causal = j->causal, m->dt = j->dt;
    m->stamp = ++t_sdf_clock;
    j->fmemo = b, j->fmemo_per = per;
    return m;
}

/* Backward: the forward's kept weights of the same attention in this run, or NULL. */
static void sdf_find(uint64_t run, const int32_t *ids, sdpa_job *j) {
    for (int s = 0; run && s < SDF_SLOTS; s++)
        if (sdf_match(&t_sdf[s], run, ids, j)) {
            j->fmemo = t_sdf[s].buf.p, j->fmemo_per = sdf_per(j);
            return;
        }
}

static goblin_err blis_sdpa(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    bool bwd = node->op == GOBLIN_OP_SDPA_BACKWARD;
    int32_t o0 = bwd ? 1 : 0;
    const goblin_tensor *go = bwd ? &in[0] : NULL, *q = &in[o0], *kk = &in[o0 + 1], *v = &in[o0 + 2];
    const goblin_tensor *mask = n_in >= o0 + 4 ? &in[o0 + 3] : NULL;
    goblin_dtype dt = out->dtype;
    if (!goblin__blis_f32_or_f64(dt) || q->dtype != dt || kk->dtype != dt || v->dtype != dt) return GOBLIN_ENOTSUP;
    if (go && go->dtype != dt) return GOBLIN_ENOTSUP;
    if (mask && mask->dtype != dt && mask->dtype != GOBLIN_DTYPE_BOOL) return GOBLIN_ENOTSUP;
    const goblin_tensor *ref = bwd ? go : out; /* the tensor whose batch dims are the batch */
    sdpa_job j;
    memset(&j, 0, sizeof j);
    j.dt = dt;
    j.es = (int64_t)goblin_dtype_size(dt);
    j.br = ref->rank - 2;
    j.bshape = ref->shape;
    j.L = ref->shape[j.br];
    j.Ev = ref->shape[j.br + 1];
    j.E = q->shape[q->rank - 1];
    j.S = kk->shape[kk->rank - 2];
    j.scale = goblin__sdpa_scale(node, j.E);
    j.causal = goblin__attr_i(node, GOBLIN_ATTR_CAUSAL, 0) != 0;
    j.which = bwd ? goblin__attr_i(node, GOBLIN_ATTR_INDEX, 0) : 0;
    j.bwd = bwd;
    j.q = q;
    j.k = kk;
    j.v = v;
    j.mask = mask;
    j.go = go;
    j.out = out->data;
    j.rows = out->shape[out->rank - 2];
    j.cols = out->shape[out->rank - 1];
    batch_strides(q, j.br, ref->shape, j.bs[0]);
    batch_strides(kk, j.br, ref->shape, j.bs[1]);
    batch_strides(v, j.br, ref->shape, j.bs[2]);
    const goblin_tensor *qkv[3] = {q, kk, v};
    for (int a = 0; a < 3; a++) {
        if (qkv[a]->rank < 2) return GOBLIN_ENOTSUP;
        j.rs[a] = qkv[a]->strides[qkv[a]->rank - 2];
        j.cs[a] = qkv[a]->strides[qkv[a]->rank - 1];
    }
    if (mask) {
        int64_t full[GOBLIN_MAX_RANK];
        for (int32_t d = 0; d < j.br; d++) full[d] = ref->shape[d];
        full[j.br] = j.L;
        full[j.br + 1] = j.S;
        goblin__bcast_strides(mask, j.br + 2, full, j.mstr);
    }
    for (int32_t d = 0; d < j.br; d++) j.bs[3][d] = j.mstr[d];
    j.batch = 1;
    for (int32_t d = 0; d < j.br; d++) j.batch *= ref->shape[d];
    j.tiny = j.L <= SD_TINY_LS && j.S <= SD_TINY_LS && j.E <= SD_TINY_E && j.Ev <= SD_TINY_E;
    int64_t mx_n = j.S > j.E ? j.S : j.E, mx_k = j.L > j.Ev ? j.L : j.Ev;
    mx_n = mx_n > j.Ev ? mx_n : j.Ev;
    mx_k = mx_k > mx_n ? mx_k : mx_n;
    j.packn = mx_k * ((mx_n + 7) / 8 * 8);
    int64_t total = goblin__numel(out);
    if (total == 0) return GOBLIN_OK;
    if (j.batch * j.rows * j.cols != total) return GOBLIN_ENOTSUP; /* not [batch..., rows, cols] */
    int32_t threads = k->threads > 0 ? k->threads : 1;
    j.nchunks = threads > 1 && j.batch > 1 ? (j.batch < threads ? j.batch : threads) : 1;
    size_t per = sdpa_scratch_bytes(&j), bytes;
    if (!goblin__mul_size(per, (size_t)j.nchunks, &bytes)) return oom(k, "attention");
    j.scratch = goblin__alloc(bytes);
    if (!j.scratch) return oom(k, "attention");
    /* the q, k, v, mask node ids of this attention: the forward's inputs 0..3, the
     * backward's 1..4 */
    int32_t ids[4] = {-1, -1, -1, -1};
    for (int32_t a = 0; a < 4 && o0 + a < node->n_inputs; a++) ids[a] = node->inputs[o0 + a];
    sdf_memo *fslot = NULL;
    if (bwd) {
        sd_memo_attach(k->run, &j);
        if (j.memo_ready) { /* computed by the first backward node of this attention */
            size_t ob = (size_t)(j.rows * j.cols * j.es);
            size_t at = (size_t)(sd_memo_off(&j, j.which) * j.es);
            for (int64_t b = 0; b < j.batch; b++)
                memcpy((char *)out->data + (size_t)b * ob,
                       j.memo + (size_t)b * j.memo_per + at, ob);
            goblin__free(j.scratch);
            return GOBLIN_OK;
        }
        sdf_find(k->run, ids, &j);
    } else {
        fslot = sdf_reserve(k->run, ids, &j);
    }
    if (j.nchunks > 1) goblin__parallel_for(threads, j.nchunks, sdpa_chunk, &j);
    else sdpa_chunk(&j, 0);
    if (j.memo && !j.memo_ready) t_sd.run = k->run; /* filled: valid for this run */
    if (fslot) fslot->run = k->run;
    goblin__free(j.scratch);
    return GOBLIN_OK;
}

void goblin__blis_register_attention(goblin__kernel_fn *t) {
    goblin__blis_set(t, GOBLIN_OP_SDPA, blis_sdpa);
    goblin__blis_set(t, GOBLIN_OP_SDPA_BACKWARD, blis_sdpa);
}
