/* libgoblin/backends/blis/blis_unary.c - unary math and activations on the CPU backend: EXP
 * (f32, f64), ERF and GELU (f32) many lanes at a time, GELU_BACKWARD, RELU,
 * RELU_BACKWARD and DROPOUT (f32, f64; threaded over the flat index). */
#pragma GCC diagnostic ignored "-Wpsabi" /* vector helpers are always inlined: no ABI */
#include <string.h>
#include "base/alloc.h"
#include "base/target_clones.h"
#include "blis_impl.h"
#include "kernels/scalar_ops.h"
#include "kernels/expf.h"
#include "backends/kernel_attrs.h"

#if defined(_OPENMP)
#define SIMD _Pragma("omp simd")
#define SIMD_OR_BAD _Pragma("omp simd reduction(| : bad)")
#else
#define SIMD
#define SIMD_OR_BAD
#endif

#define BLOCK ((int64_t)1 << 15) /* elements per work item (about) */

/* ---- exp (f32, f64), erf and gelu (f32) ------------------------------------------------
 * exp on f64: the reference's own arithmetic (libm exp), so the same bits; f32: below.
 * The tails of erf and gelu (erf form) on f32: erf evaluated in double by an odd Taylor
 * series below 0.25 and piecewise polynomials above (abs error < 1e-11, relative error
 * < 1e-12 near 0; f32's u is 6e-8), then gelu = 0.5 x (1 + erf(x / sqrt2)) in double and one
 * rounding to f32. The cancellation of 1 + erf for x < 0 costs at most 1e-11 |x|
 * absolute: within gelu's contract (8u relative + 8u absolute) and erf's (4u + 4u). */

/* erf on [0.25 k, 0.25 (k + 1)), k = 1..23: sum_i c[k-1][i] (x - mid_k)^i, mid_k = 0.25 k + 0.125;
 * Chebyshev fits of degree 7 to math.erf, max abs error 5.2e-12 */
static const double ERF_TAB[23][8] = {
    {0.40411690942961687, 0.98035280954563597, -0.36763229291483807, -0.23487619372370702,
     0.16657997256853804, 0.045475297349767969, -0.049756502540692998, -0.0054544331316677009},
    {0.62324088218531659, 0.76349953576816232, -0.47718720349697935, -0.055671847602169873,
     0.17645781973988081, -0.02741192312257703, -0.04113639444833312, 0.013782844448674869},
    {0.78407506106070468, 0.52474504529694055, -0.45915191636139624, 0.092923595971621822,
     0.11239711783995299, -0.067214540727014382, -0.010424863598099835, 0.018481555277794402},
    {0.88838823170449743, 0.31827395850153761, -0.35805820902906904, 0.16245233232960821,
     0.027975127444207645, -0.061323532925367144, 0.015349148599571533, 0.0095940843104751882},
    {0.94817007278406906, 0.17035977368423585, -0.23424469287377436, 0.15793770965613513,
     -0.030499313058439635, -0.030606621929481357, 0.022028300555150856, -0.001363872188697119},
    {0.97844373324025813, 0.080472259019563799, -0.13076742147250098, 0.11484062216189249,
     -0.049718684056524701, -0.0021355044828333379, 0.014396521681372733, -0.006134768213524126},
    {0.99199005766946036, 0.033545828423450164, -0.06289842694339072, 0.067441093214216957,
     -0.042260314588219869, 0.011462433069353985, 0.0041496230928345802, -0.0049155929574897055},
    {0.9973459706398754, 0.012340820614933282, -0.026224242490064487, 0.033037404674234903,
     -0.02636124947199513, 0.012495600728970362, -0.0017782675291743387, -0.0018793651351070276},
    {0.99921706178183167, 0.0040064778623732323, -0.0095153843531380622, 0.013730532904591157,
     -0.013133395364784193, 0.008357531322942615, -0.0030954753707631228, 0.00011143647551643842},
    {0.99979462426384158, 0.0011478751262025018, -0.0030131721700628572, 0.0048904260445586942,
     -0.0054143050436064443, 0.0042179435247220879, -0.0022457002819726677, 0.0006754980783819206},
    {0.99995214516031894, 0.00029022828289630801, -0.00083440644147537231, 0.0015025359769425158,
     -0.0018817189912177675, 0.001713270026123738, -0.0011442891507647806, 0.00052799417449890605},
    {0.99999010326542648, 6.475868318162975e-05, -0.00020237099108342987, 0.00040001982814958146,
     -0.00055754003168775499, 0.00057695107418146091, -0.00045578933941258952, 0.00026737165951130573},
    {0.99999818471859814, 1.2751740755017405e-05, -4.3037177649126259e-05, 9.2582989527742639e-05,
     -0.00014187124308899775, 0.00016376517884281487, -0.00014812599648759801, 0.00010293371278120191},
    {0.99999970485981715, 2.2159202627438883e-06, -8.0327302803949367e-06, 1.8673763518592747e-05,
     -3.116243370293996e-05, 3.9588086940451841e-05, -4.0159181374754625e-05, 3.1872448052373709e-05},
    {0.99999995748605874, 3.3982237376102148e-07, -1.3168173415882643e-06, 3.2884962053346954e-06,
     -5.9307150036362345e-06, 8.2073353234794949e-06, -9.2048236967975052e-06, 8.158896526910177e-06},
    {0.99999999457659994, 4.5989955533870082e-08, -1.8970990748150943e-07, 5.0637076241711953e-07,
     -9.807216985533225e-07, 1.4665246824898451e-06, -1.7993070064690018e-06, 1.7559883007626739e-06},
    {0.99999999938751694, 5.4927166487839756e-09, -2.4030890999588005e-08, 6.8258919694517558e-08,
     -1.4122208130414883e-07, 2.2670372732103068e-07, -3.0172815452034845e-07, 3.2057130270157704e-07},
    {0.99999999993878375, 5.7892877065243177e-10, -2.6776057900083949e-09, 8.0624092604595304e-09,
     -1.7734652556525456e-08, 3.047493307052824e-08, -4.3824501833443693e-08, 4.6980528002213672e-08},
    {0.99999999999458677, 5.384794873441467e-11, -2.6250170134389987e-10, 8.3561189387278023e-10,
     -1.9500592100218316e-09, 3.4868362015467181e-09, -5.2628876618654669e-09, 9.2724660174735319e-09},
    {0.99999999999957667, 4.4188926835892713e-12, -2.2644271941121216e-11, 7.6551634891504358e-11,
     -1.8908414345943956e-10, 2.7484256316343622e-10, -4.6829055255511771e-10, 4.1749925196568316e-09},
    {0.99999999999997069, 3.1985604687834694e-13, -1.727259212651408e-12, 6.096384440490737e-12,
     -1.446191967601617e-11, 3.3619404283409501e-11, -1.1328690283796118e-10, -1.1440900098358665e-10},
    {0.99999999999999811, 2.0701888318321645e-14, -1.2059748594893823e-13, 2.9410173703181388e-13,
     -2.3748345142759563e-13, 2.082419339260304e-11, -4.4507278012845943e-11, -7.1810116834467498e-10},
    {0.99999999999999933, 2.4265223513476957e-15, -5.3153752905270552e-14, -9.2330435580293372e-13,
     1.1159704391351601e-11, 1.6481627244358664e-10, -6.0302293877125424e-10, -7.5258169989828179e-09},
};

/* noinline: compiled once for the baseline ISA, so the FMA clones below that call it
 * cannot contract its a + b * c into fused operations (the same bits on every CPU) */
__attribute__((noinline)) static double erf_d(double x) {
    double a = fabs(x);
    if (!(a < 6.0)) return isnan(x) ? x : copysign(1.0, x); /* 1 - erf(6) < 3e-17 */
    double r;
    if (a < 0.25) {
        /* 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)), n <= 6: relative error < 3e-13 */
        double z = a * a, z2 = z * z, z4 = z2 * z2;
        double p01 = 1.0 - z * (1.0 / 3.0), p23 = 1.0 / 10.0 - z * (1.0 / 42.0);
        double p45 = 1.0 / 216.0 - z * (1.0 / 1320.0), p6 = 1.0 / 9360.0;
        r = (p01 + z2 * p23) + z4 * (p45 + z2 * p6);
        r = 1.12837916709551257390 * a * r;
    } else { /* Estrin's scheme: short dependency chains */
        int k = (int)(a * 4.0); /* 1..23 */
        const double *c = ERF_TAB[k - 1];
        double u = a - (0.25 * k + 0.125), u2 = u * u, u4 = u2 * u2;
        r = ((c[0] + c[1] * u) + u2 * (c[2] + c[3] * u)) +
            u4 * ((c[4] + c[5] * u) + u2 * (c[6] + c[7] * u));
    }
    return copysign(r, x);
}

/* ---- f32 exp, erf and gelu in float, many lanes at a time ----------------------------------
 * One copy of each loop per ISA level (ifunc), as formula_eval.c: the levels include FMA,
 * which fmaf needs to be fast; fmaf is exactly specified (the baseline clone calls libm's),
 * so every clone and CPU gives the same bits. Each element's result depends only on that
 * element: the same bits for every thread count and block split. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#if __GNUC__ >= 12
#define T3_CLONES GOBLIN_TARGET_CLONES("arch=x86-64-v3", "default")
#else
#define T3_CLONES GOBLIN_TARGET_CLONES("arch=skylake-avx512", "arch=haswell", "default")
#endif
#else
#define T3_CLONES
#endif

/* exp: the formula evaluator's f32 exp (expf_impl.h), at most 0.98 ulp over all 2^32
 * inputs against exp in double (exp's contract: 4u + tiny); overflow gives +inf,
 * exp(-inf) = 0, NaN stays NaN. Branch-free, so it vectorizes. */
static inline __attribute__((always_inline)) float blis_expf(float x) { return goblin__expf_inline(x); }

T3_CLONES static void expf_f32(const float *restrict x, float *restrict y, int64_t n) {
    SIMD for (int64_t i = 0; i < n; i++) y[i] = blis_expf(x[i]);
}

/* erf in float for |x| < 3.5 from three polynomials fitted for this project by
 * tools/fit_erf_f32.py (least squares reweighted towards the minimax error, against
 * mpmath's erf): |x| < 1.25: x P1(x^2) (degree 7 in x^2; odd, so erf(+-0) = +-0);
 * 1.25 <= |x| < 2.5: P2(|x| - 1.875) (degree 10); 2.5 <= |x| < 3.5: P3(|x| - 3)
 * (degree 9); the sign of x is put back. Horner with FMAs; every lane computes all three
 * and keeps one (no branches: it vectorizes). Fit error below 1e-9 relative; evaluated in
 * float, at most 0.37 of erf's contract bound (4u + 4u |erf|) over a sweep of the range
 * (the test in test_blis_train.c checks every 4096th float against long double). For
 * erf the fast path is used for |x| < 2.5, for gelu = 0.5 x (1 + erf(x / sqrt2)) for
 * -1.5 < x / sqrt2 < 3.5 (where 1 + erf does not cancel too much); elsewhere (the tails;
 * +-inf, NaN) the element is recomputed by erf_d above in double: a per-element choice,
 * so results do not depend on the neighbours. */
static const float T3_ERF_P1[8] = {1.128379107e+00f, -3.761262894e-01f, 1.128367484e-01f, -2.686024643e-02f, 5.209015682e-03f, -8.339565247e-04f, 1.039385024e-04f, -7.572908544e-06f};
static const float T3_ERF_P2[11] = {9.919900298e-01f, 3.354583308e-02f, -6.289841235e-02f, 6.744083762e-02f, -4.226035252e-02f, 1.146637090e-02f, 4.109880421e-03f, -4.951612558e-03f, 1.409097458e-03f, 4.266961187e-04f, -3.447879280e-04f};
static const float T3_ERF_P3[10] = {9.999778867e-01f, 1.392536651e-04f, -4.177687224e-04f, 7.890692214e-04f, -1.044130651e-03f, 1.016940339e-03f, -7.407192606e-04f, 3.892347740e-04f, -1.236715470e-04f, 1.213516589e-05f};

/* The three pieces of blis_erf_poly, straight-line Horner (a loop here would keep the
 * callers' loops from vectorizing); blis_erf_small and blis_erf_mid use the same ones, so
 * they give blis_erf_poly's bits where they apply. */
#define T3_H(v, c, k) fmaf((v), (k), (c))
static inline __attribute__((always_inline)) float blis_erf_p1(float t) {
    const float *c1 = T3_ERF_P1;
    float p1 = T3_H(t, c1[6], c1[7]);
    p1 = T3_H(t, c1[5], p1), p1 = T3_H(t, c1[4], p1), p1 = T3_H(t, c1[3], p1);
    p1 = T3_H(t, c1[2], p1), p1 = T3_H(t, c1[1], p1), p1 = T3_H(t, c1[0], p1);
    return p1;
}
static inline __attribute__((always_inline)) float blis_erf_p2(float u2) {
    const float *c2 = T3_ERF_P2;
    float p2 = T3_H(u2, c2[9], c2[10]);
    p2 = T3_H(u2, c2[8], p2), p2 = T3_H(u2, c2[7], p2), p2 = T3_H(u2, c2[6], p2);
    p2 = T3_H(u2, c2[5], p2), p2 = T3_H(u2, c2[4], p2), p2 = T3_H(u2, c2[3], p2);
    p2 = T3_H(u2, c2[2], p2), p2 = T3_H(u2, c2[1], p2), p2 = T3_H(u2, c2[0], p2);
    return p2;
}
static inline __attribute__((always_inline)) float blis_erf_p3(float u3) {
    const float *c3 = T3_ERF_P3;
    float p3 = T3_H(u3, c3[8], c3[9]);
    p3 = T3_H(u3, c3[7], p3), p3 = T3_H(u3, c3[6], p3), p3 = T3_H(u3, c3[5], p3);
    p3 = T3_H(u3, c3[4], p3), p3 = T3_H(u3, c3[3], p3), p3 = T3_H(u3, c3[2], p3);
    p3 = T3_H(u3, c3[1], p3), p3 = T3_H(u3, c3[0], p3);
    return p3;
}
#undef T3_H

static inline __attribute__((always_inline)) float blis_erf_poly(float x) {
    float a = fabsf(x), t = x * x, u2 = a - 1.875f, u3 = a - 3.0f;
    float p1 = blis_erf_p1(t), p2 = blis_erf_p2(u2), p3 = blis_erf_p3(u3);
    /* Branch-free: every value is computed, then chosen with integer masks on the bits
     * (|x| compared as an integer; NaN lands in a tail, recomputed anyway), which the
     * compiler vectorizes; float compares and selects kept this loop scalar. */
    union {
        float f;
        int32_t i;
    } ab = {a}, xb = {x}, nb = {x * p1}, b2 = {p2}, b3 = {p3}, r;
    int32_t m1 = -(int32_t)(ab.i < 0x3fa00000), m2 = -(int32_t)(ab.i < 0x40200000); /* 1.25f, 2.5f */
    int32_t far = ((b2.i & m2) | (b3.i & ~m2)) | (xb.i & INT32_MIN); /* P2, P3 > 0: the sign of x */
    r.i = (nb.i & m1) | (far & ~m1);
    return r.f;
}

#define T3_RSQRT2F 0.70710678118654752440f

/* blis_erf_poly for |x| < 1.25 only: its first piece alone, the same operations (the result
 * goes through the same integer mask, which also keeps the compiler from fusing x * p1
 * into a caller's addition: the bits are blis_erf_poly's) */
static inline __attribute__((always_inline)) float blis_erf_small(float x) {
    float a = fabsf(x), t = x * x;
    float p1 = blis_erf_p1(t);
    union {
        float f;
        int32_t i;
    } ab = {a}, nb = {x * p1}, r;
    int32_t m1 = -(int32_t)(ab.i < 0x3fa00000); /* 1.25f: all ones here */
    r.i = nb.i & m1;
    return r.f;
}

/* gelu's blocks of GELU_BLK elements: where every x / sqrt2 of a block is below 1.25 in
 * magnitude (most of them, for activations of moderate size) only the first polynomial is
 * evaluated; a per-block choice of work, not of result (each element's value is what
 * blis_erf_poly gives it either way), so results do not depend on the neighbours. */
#define GELU_BLK 32

/* n elements of erf (gelu = false) or gelu (erf form) on f32 */
T3_CLONES static void erf_gelu_f32(const float *restrict x, float *restrict y, int64_t n,
                                   bool gelu) {
    if (gelu) {
        for (int64_t i0 = 0; i0 < n; i0 += GELU_BLK) {
            int64_t e = i0 + GELU_BLK < n ? i0 + GELU_BLK : n;
            int bad = 0;
            SIMD_OR_BAD
            for (int64_t i = i0; i < e; i++) bad |= !(fabsf(x[i] * T3_RSQRT2F) < 1.25f);
            if (!bad) {
                SIMD for (int64_t i = i0; i < e; i++) {
                    float t = x[i] * T3_RSQRT2F;
                    y[i] = 0.5f * x[i] * (1.0f + blis_erf_small(t));
                }
            } else {
                SIMD for (int64_t i = i0; i < e; i++) {
                    float t = x[i] * T3_RSQRT2F;
                    y[i] = 0.5f * x[i] * (1.0f + blis_erf_poly(t));
                }
                /* this block's tails (below): a block of the first kind has none */
                for (int64_t i = i0; i < e; i++) {
                    float t = x[i] * T3_RSQRT2F;
                    if ((t <= -1.5f) | (t >= 3.5f) | (t != t)) {
                        double v = x[i];
                        y[i] = (float)(0.5 * v * (1.0 + erf_d(v * 0.70710678118654752440)));
                    }
                }
            }
        }
        return;
    }
    SIMD for (int64_t i = 0; i < n; i++) y[i] = blis_erf_poly(x[i]);
    /* the tails (and inf, NaN: the comparisons fail) in double; a vector test per 64 first */
    for (int64_t i0 = 0; i0 < n; i0 += 64) {
        int64_t e = i0 + 64 < n ? i0 + 64 : n;
        int bad = 0;
        SIMD_OR_BAD
        for (int64_t i = i0; i < e; i++) {
            float t = x[i];
            bad |= (t <= -2.5f) | (t >= 2.5f) | (t != t); /* no branches: it vectorizes */
        }
        if (__builtin_expect(!bad, 1)) continue;
        for (int64_t i = i0; i < e; i++) {
            float t = x[i];
            if ((t <= -2.5f) | (t >= 2.5f) | (t != t)) y[i] = (float)erf_d(x[i]);
        }
    }
}

enum { U_EXP, U_ERF, U_GELU };

typedef struct ujob {
    int kind;
    goblin_dtype dt;
    const void *x;
    void *y;
    int64_t n;
} ujob;

static void urun(void *arg, int64_t item) {
    const ujob *j = arg;
    int64_t lo = item * BLOCK, hi = lo + BLOCK < j->n ? lo + BLOCK : j->n;
    if (j->dt == GOBLIN_DTYPE_F64) { /* exp only */
        const double *restrict x = j->x;
        double *restrict y = j->y;
        for (int64_t i = lo; i < hi; i++) y[i] = exp(x[i]);
        return;
    }
    const float *restrict x = j->x;
    float *restrict y = j->y;
    switch (j->kind) {
    case U_EXP: expf_f32(x + lo, y + lo, hi - lo); break;
    case U_ERF: erf_gelu_f32(x + lo, y + lo, hi - lo, false); break;
    default: erf_gelu_f32(x + lo, y + lo, hi - lo, true); break;
    }
}

static goblin_err unary(goblin__kernel_fn fallback, int kind, goblin__kctx *k, const goblin__node *node,
                        const goblin_tensor *in, int32_t n_in, goblin_tensor *out) {
    bool ok = n_in == 1 && in[0].dtype == out->dtype && goblin_tensor_is_contiguous(&in[0]) &&
              goblin_tensor_is_contiguous(out) && goblin__numel(&in[0]) == goblin__numel(out) &&
              (out->dtype == GOBLIN_DTYPE_F32 || (kind == U_EXP && out->dtype == GOBLIN_DTYPE_F64));
    if (ok && kind == U_GELU &&
        goblin__attr_i(node, GOBLIN_ATTR_APPROXIMATE, GOBLIN_GELU_ERF) != GOBLIN_GELU_ERF)
        ok = false;
    if (!ok) return fallback(k, node, in, n_in, out);
    ujob j = {kind, out->dtype, in[0].data, out->data, goblin__numel(out)};
    if (j.n == 0) return GOBLIN_OK;
    goblin__parallel_for(k->threads > 0 ? k->threads : 1, (j.n + BLOCK - 1) / BLOCK, urun, &j);
    return GOBLIN_OK;
}


static goblin_err blis_exp(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                         int32_t n_in, goblin_tensor *out) {
    return unary(goblin__blis_elementwise_fallback, U_EXP, k, node, in, n_in, out);
}

static goblin_err blis_erf(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                         int32_t n_in, goblin_tensor *out) {
    return unary(goblin__blis_elementwise_fallback, U_ERF, k, node, in, n_in, out);
}

static goblin_err blis_gelu(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    return unary(goblin__blis_elementwise_fallback, U_GELU, k, node, in, n_in, out);
}


/* ---- gelu_backward ----------------------------------------------------------------------
 * grad_out * gelu'(x). f32, erf form: gelu' = Phi(x) + x phi(x) with Phi = 0.5 + 0.5 erf(x/sqrt2)
 * from the forward's float erf (blis_erf_poly) and phi from the f32 exp above, in float with
 * explicit FMAs (the same bits in every clone), where the float erf is fitted (|x/sqrt2| < 3.5).
 * For x < 0, 0.5 + 0.5 erf cancels as in torch's own kernel: the error stays a few u absolute
 * in gelu' (about 1u of Phi's magnitude 1/2), within the contract's absolute part, though not
 * relative to a tiny gelu' far out on the left. Elsewhere (|x| > 4.95, +-inf, NaN) and for f64 or the tanh form,
 * each element is computed in double by gelu_grad_d (the reference's formulas: Phi as
 * 0.5 erfc(-x/sqrt2), no cancellation) and rounded once. Per-element choices only: results
 * do not depend on the neighbours or the split. */

/* noinline, baseline ISA: no fused multiply-adds, the same bits on every CPU */
__attribute__((noinline)) static double gelu_grad_d(double x, bool tanh_form) {
    if (tanh_form) {
        const double k0 = 0.79788456080286535588, k1 = 0.044715;
        double x2 = x * x, t = tanh(k0 * (x + k1 * x2 * x));
        return 0.5 * (1.0 + t) + 0.5 * x * ((1.0 - t * t) * (k0 * (1.0 + 3.0 * k1 * x2)));
    }
    double cdf = 0.5 * erfc(-x * 0.70710678118654752440);
    return cdf + x * (exp(-0.5 * x * x) * 0.39894228040143267794);
}

/* blis_erf_poly for |x| < 2.5 only: its first two pieces, the same operations and the
 * same selection of P1 or P2 by the bits (so the bits of blis_erf_poly there) */
static inline __attribute__((always_inline)) float blis_erf_mid(float x) {
    float a = fabsf(x), t = x * x, u2 = a - 1.875f;
    float p1 = blis_erf_p1(t), p2 = blis_erf_p2(u2);
    union {
        float f;
        int32_t i;
    } ab = {a}, xb = {x}, nb = {x * p1}, b2 = {p2}, r;
    int32_t m1 = -(int32_t)(ab.i < 0x3fa00000); /* 1.25f */
    int32_t far = b2.i | (xb.i & INT32_MIN);
    r.i = (nb.i & m1) | (far & ~m1);
    return r.f;
}

/* gelu_backward's blocks of GELU_BWD_BLK elements, as the forward's: where every |x / sqrt2|
 * of a block is below 1.25 only P1 is evaluated, else below 2.5 P1 and P2, else all three;
 * a per-block choice of work, not of result (each element gets blis_erf_poly's bits). */
#define GELU_BWD_BLK 64
#define GELU_BWD_ELEM(ERF)                                                                  \
    do {                                                                                    \
        float v = x[i];                                                                     \
        float cdf = fmaf(0.5f, ERF(v * T3_RSQRT2F), 0.5f);                                  \
        float pdf = blis_expf((v * v) * -0.5f) * 0.398942280401432678f;                       \
        y[i] = g[i] * fmaf(v, pdf, cdf);                                                    \
    } while (0)

T3_CLONES static void gelu_bwd_f32(const float *restrict g, const float *restrict x,
                                   float *restrict y, int64_t n) {
    for (int64_t i0 = 0; i0 < n; i0 += GELU_BWD_BLK) {
        int64_t e = i0 + GELU_BWD_BLK < n ? i0 + GELU_BWD_BLK : n;
        int bad = 0; /* some |x / sqrt2| >= 1.25 (or NaN) */
        SIMD_OR_BAD
        for (int64_t i = i0; i < e; i++) bad |= !(fabsf(x[i] * T3_RSQRT2F) < 1.25f);
        if (!bad) {
            SIMD for (int64_t i = i0; i < e; i++) GELU_BWD_ELEM(blis_erf_small);
            continue;
        }
        bad = 0; /* some |x / sqrt2| >= 2.5 (or NaN) */
        SIMD_OR_BAD
        for (int64_t i = i0; i < e; i++) bad |= !(fabsf(x[i] * T3_RSQRT2F) < 2.5f);
        if (!bad) {
            SIMD for (int64_t i = i0; i < e; i++) GELU_BWD_ELEM(blis_erf_mid);
        } else {
            SIMD for (int64_t i = i0; i < e; i++) GELU_BWD_ELEM(blis_erf_poly);
            /* this block's tails (below): blocks of the first two kinds have none */
            for (int64_t i = i0; i < e; i++) {
                float t = x[i] * T3_RSQRT2F;
                if ((t <= -3.5f) | (t >= 3.5f) | (t != t))
                    y[i] = (float)((double)g[i] * gelu_grad_d(x[i], false));
            }
        }
    }
}

typedef struct gbjob {
    bool f64, th;
    const void *g, *x;
    void *y;
    int64_t n;
} gbjob;

static void gbrun(void *arg, int64_t item) {
    const gbjob *j = arg;
    int64_t lo = item * BLOCK, hi = lo + BLOCK < j->n ? lo + BLOCK : j->n;
    if (j->f64) {
        const double *g = j->g, *x = j->x;
        double *y = j->y;
        for (int64_t i = lo; i < hi; i++) y[i] = g[i] * gelu_grad_d(x[i], j->th);
    } else if (j->th) {
        const float *g = j->g, *x = j->x;
        float *y = j->y;
        for (int64_t i = lo; i < hi; i++) y[i] = (float)((double)g[i] * gelu_grad_d(x[i], true));
    } else {
        gelu_bwd_f32((const float *)j->g + lo, (const float *)j->x + lo, (float *)j->y + lo, hi - lo);
    }
}



static goblin_err blis_gelu_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    if (n_in != 2 || !goblin__blis_f32_or_f64(out->dtype) || !goblin__blis_all_contiguous(in, n_in, out) ||
        goblin__numel(&in[0]) != goblin__numel(out) || goblin__numel(&in[1]) != goblin__numel(out))
        return goblin__blis_elementwise_fallback(k, node, in, n_in, out);
    gbjob j = {out->dtype == GOBLIN_DTYPE_F64,
               goblin__attr_i(node, GOBLIN_ATTR_APPROXIMATE, GOBLIN_GELU_ERF) == GOBLIN_GELU_TANH,
               in[0].data, in[1].data, out->data, goblin__numel(out)};
    if (j.n == 0) return GOBLIN_OK;
    goblin__parallel_for(k->threads > 0 ? k->threads : 1, (j.n + BLOCK - 1) / BLOCK, gbrun, &j);
    return GOBLIN_OK;
}


#define CLONES GOBLIN_TARGET_CLONES("avx2", "default")

typedef float v4f __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));

#define LDV(VT, p) ({ VT v_; memcpy(&v_, (p), sizeof v_); v_; })
#define STV(p, v) do { __typeof__(v) t_ = (v); memcpy((p), &t_, sizeof t_); } while (0)

/* ---- relu ------------------------------------------------------------------------ */

/* x < 0 ? 0 : x, as the reference (relu(NaN) = NaN, relu(-0) = -0): exact, chunked. */
typedef struct relu_job {
    const void *x;
    void *y;
    int64_t n, per;
    bool f64;
} relu_job;

static CLONES void relu_chunk(void *arg, int64_t w) {
    const relu_job *j = arg;
    int64_t i0 = w * j->per, i1 = i0 + j->per;
    if (i1 > j->n) i1 = j->n;
    if (j->f64) {
        const double *x = j->x;
        double *y = j->y;
        for (int64_t i = i0; i < i1; i++) y[i] = x[i] < 0 ? 0.0 : x[i];
    } else {
        const float *x = j->x;
        float *y = j->y;
        for (int64_t i = i0; i < i1; i++) y[i] = x[i] < 0 ? 0.0f : x[i];
    }
}

static goblin_err blis_relu(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in, int32_t n_in,
                            goblin_tensor *out) {
    (void)node;
    (void)n_in;
    if (!goblin__blis_f32_or_f64(out->dtype) || in[0].dtype != out->dtype || !goblin_tensor_is_contiguous(&in[0]) ||
        goblin__numel(&in[0]) != goblin__numel(out))
        return GOBLIN_ENOTSUP;
    relu_job j = {in[0].data, out->data, goblin__numel(out), 0, out->dtype == GOBLIN_DTYPE_F64};
    if (j.n == 0) return GOBLIN_OK;
    int32_t t = goblin__blis_threads_for(k, j.n, j.n);
    j.per = (j.n + t - 1) / t;
    goblin__parallel_for(t, (j.n + j.per - 1) / j.per, relu_chunk, &j);
    return GOBLIN_OK;
}

/* ---- dropout ---------------------------------------------------------------------- */

/* The reference's mapping (random.h): element i keeps x * scale when its Philox draw at
 * counter offset + i says so, else x * 0; f32 multiplies by the scale rounded to f32. Each
 * chunk draws the counters of its own flat indices, so any thread split gives the
 * reference's bits. */
typedef struct dropout_job {
    const void *x;
    void *y;
    int64_t n, per;
    bool f64;
    goblin__rng_key key;
    double p, scale;
    goblin__drop_axis ax;
} dropout_job;

static void dropout_chunk(void *arg, int64_t w) {
    const dropout_job *j = arg;
    int64_t i0 = w * j->per, i1 = i0 + j->per;
    if (i1 > j->n) i1 = j->n;
    uint32_t r[4];
    if (j->f64) {
        const double *x = j->x;
        double *y = j->y;
        for (int64_t i = i0; i < i1; i++) {
            goblin__rng_draw(j->key.seed, j->key.offset, j->key.stream, goblin__drop_index(&j->ax, (uint64_t)i), r);
            y[i] = x[i] * (goblin__rng_keep(r, j->p) ? j->scale : 0.0);
        }
    } else {
        const float *x = j->x;
        float *y = j->y;
        float s32 = (float)j->scale;
        for (int64_t i = i0; i < i1; i++) {
            goblin__rng_draw(j->key.seed, j->key.offset, j->key.stream, goblin__drop_index(&j->ax, (uint64_t)i), r);
            y[i] = x[i] * (goblin__rng_keep(r, j->p) ? s32 : 0.0f);
        }
    }
}

static goblin_err blis_dropout(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    if (!goblin__blis_f32_or_f64(out->dtype) || in[0].dtype != out->dtype || !goblin_tensor_is_contiguous(&in[0]) ||
        goblin__numel(&in[0]) != goblin__numel(out))
        return GOBLIN_ENOTSUP;
    double p = goblin__attr_f(node, GOBLIN_ATTR_P, 0.5);
    dropout_job j = {in[0].data, out->data, goblin__numel(out), 0, out->dtype == GOBLIN_DTYPE_F64,
                     goblin__rng_of(node), p, p < 1 ? 1.0 / (1.0 - p) : 0.0,
                     goblin__drop_axis_of(node, out->rank, out->shape)};
    if (j.n == 0) return GOBLIN_OK;
    /* a draw costs about as much as 16 plain element operations */
    int32_t t = goblin__blis_threads_for(k, j.n * 16, j.n);
    j.per = (j.n + t - 1) / t;
    goblin__parallel_for(t, (j.n + j.per - 1) / j.per, dropout_chunk, &j);
    return GOBLIN_OK;
}

/* ---- relu_backward --------------------------------------------------------------- */

/* grad_out where x > 0, else +0 (x <= 0, -0 and NaN included): the value of
 * where(x > 0, grad_out, 0), as the reference. The compare's all-ones / all-zeros lane mask
 * ANDs grad_out's bits (NaN payloads kept, +0 where the mask is clear): one pass, exact,
 * chunked like relu. */
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v8f __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));

typedef struct relu_bwd_job {
    const void *g, *x;
    void *y;
    int64_t n, per;
    bool f64;
} relu_bwd_job;

static CLONES void relu_bwd_chunk(void *arg, int64_t w) {
    const relu_bwd_job *j = arg;
    int64_t i0 = w * j->per, i1 = i0 + j->per, i = i0;
    if (i1 > j->n) i1 = j->n;
    if (j->f64) {
        const double *x = j->x;
        const int64_t *g = j->g;
        int64_t *y = j->y;
        for (; i + 8 <= i1; i += 8) {
            v4d x0 = LDV(v4d, x + i), x1 = LDV(v4d, x + i + 4);
            v4l g0 = LDV(v4l, g + i), g1 = LDV(v4l, g + i + 4);
            STV(y + i, g0 & (x0 > 0.0));
            STV(y + i + 4, g1 & (x1 > 0.0));
        }
        for (; i < i1; i++) y[i] = x[i] > 0.0 ? g[i] : 0;
    } else {
        const float *x = j->x;
        const int32_t *g = j->g;
        int32_t *y = j->y;
        for (; i + 16 <= i1; i += 16) {
            v8f x0 = LDV(v8f, x + i), x1 = LDV(v8f, x + i + 8);
            v8i g0 = LDV(v8i, g + i), g1 = LDV(v8i, g + i + 8);
            STV(y + i, g0 & (x0 > 0.0f));
            STV(y + i + 8, g1 & (x1 > 0.0f));
        }
        for (; i < i1; i++) y[i] = x[i] > 0.0f ? g[i] : 0;
    }
}

static goblin_err blis_relu_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out) {
    (void)node;
    if (n_in != 2 || !goblin__blis_f32_or_f64(out->dtype) || in[0].dtype != out->dtype || in[1].dtype != out->dtype ||
        !goblin_tensor_is_contiguous(&in[0]) || !goblin_tensor_is_contiguous(&in[1]) ||
        !goblin_tensor_is_contiguous(out) || goblin__numel(&in[0]) != goblin__numel(out) ||
        goblin__numel(&in[1]) != goblin__numel(out))
        return GOBLIN_ENOTSUP;
    relu_bwd_job j = {in[0].data, in[1].data, out->data, goblin__numel(out), 0,
                      out->dtype == GOBLIN_DTYPE_F64};
    if (j.n == 0) return GOBLIN_OK;
    int32_t t = goblin__blis_threads_for(k, j.n, j.n);
    j.per = (j.n + t - 1) / t;
    goblin__parallel_for(t, (j.n + j.per - 1) / j.per, relu_bwd_chunk, &j);
    return GOBLIN_OK;
}

void goblin__blis_register_unary(goblin__kernel_fn *t) {
    goblin__blis_set(t, GOBLIN_OP_EXP, blis_exp);
    goblin__blis_set(t, GOBLIN_OP_ERF, blis_erf);
    goblin__blis_set(t, GOBLIN_OP_GELU, blis_gelu);
    goblin__blis_set(t, GOBLIN_OP_GELU_BACKWARD, blis_gelu_bwd);
    goblin__blis_set(t, GOBLIN_OP_RELU, blis_relu);
    goblin__blis_set(t, GOBLIN_OP_RELU_BACKWARD, blis_relu_bwd);
    goblin__blis_set(t, GOBLIN_OP_DROPOUT, blis_dropout);
}
