/* libgoblin/kernels/expf.h - the f32 exp shared by the formula evaluator, the BLIS
 * backend's EXP kernel and the CUDA backend's FORMULA kernel (one implementation, GOBLIN_HD:
 * the same bits everywhere; CUDA builds with --fmad=false), and its vector
 * form for x <= 0 used by the BLIS softmax kernels; one set of constants for both. */
#ifndef GOBLIN__EXPF_IMPL_H
#define GOBLIN__EXPF_IMPL_H

#include <math.h>
#include <stdint.h>
#include "hd.h"

/* The constants, derived and fitted by tools/fit_expf_f32.py. Cody-Waite reduction:
 * x = n ln2 + r with n = round(x / ln2), ln2 = LN2_HI + LN2_LO, LN2_HI being ln2 rounded
 * to 16 significant bits, so n LN2_HI is exact for |n| <= 150 (all n the clamp allows) and
 * so is x - n LN2_HI; LN2_LO = float(ln2 - LN2_HI). Then e^r = 1 + r + r^2 p(r) with p
 * = P0 + P1 r + ... + P5 r^5, fitted for this project on |r| <= ln2/2 + 7e-6 (the
 * rounding of n allows that much) for the least max relative error of e^r (least squares
 * reweighted towards the minimax against mpmath; rounded to float one coefficient at a
 * time, refitting the rest): 1e-10 relative, far below a float ulp. */
#define GOBLIN__EXPF_LOG2E 1.442695022e+00f /* float(1 / ln2) */
#define GOBLIN__EXPF_LN2_HI 0.693145751953125f
#define GOBLIN__EXPF_LN2_LO 1.428606765e-06f
#define GOBLIN__EXPF_P0 5.000000000e-01f
#define GOBLIN__EXPF_P1 1.666666567e-01f
#define GOBLIN__EXPF_P2 4.166646302e-02f
#define GOBLIN__EXPF_P3 8.333570324e-03f
#define GOBLIN__EXPF_P4 1.393507817e-03f
#define GOBLIN__EXPF_P5 1.974024344e-04f

/* exp(x) in float with explicit fused multiply-adds: n = round(x / ln2) by the
 * 1.5 * 2^23 trick, r = x - n ln2 in two pieces, e^r = 1 + r + r^2 p(r) by Horner,
 * then 2^n applied as two exact powers of two so that results in the subnormal range
 * are rounded once. fmaf is exactly specified, so every CPU clone (hardware FMA, or
 * libm's fmaf in the baseline clone) gives the same bits. The clamp to [-104, 89] keeps
 * n in range (beyond it the result is 0 or inf anyway) and lets NaN through: a NaN x
 * makes y NaN, so no test for it. Branch-free, so loops over it vectorize. Measured over
 * all 2^32 inputs against exp in double: at most 0.979 ulp (0.9782 at x = 0x1.4e8e1ep+2). */
static inline __attribute__((always_inline)) GOBLIN_HD float goblin__expf_inline(float x) {
    union { float f; uint32_t u; } tb, s1, s2;
    float xc = x < -104.0f ? -104.0f : x;
    xc = xc > 89.0f ? 89.0f : xc;
    tb.f = fmaf(xc, GOBLIN__EXPF_LOG2E, 12582912.0f);
    float nf = tb.f - 12582912.0f;
    /* n from t's low mantissa bits (t's ulp is 1): unlike (int32_t)nf this is
     * defined for NaN too */
    int32_t n = (int32_t)(tb.u - 0x4b400000u);
    float r = fmaf(nf, -GOBLIN__EXPF_LN2_HI, xc);
    r = fmaf(nf, -GOBLIN__EXPF_LN2_LO, r);
    float z = r * r;
    float y = GOBLIN__EXPF_P5;
    y = fmaf(y, r, GOBLIN__EXPF_P4);
    y = fmaf(y, r, GOBLIN__EXPF_P3);
    y = fmaf(y, r, GOBLIN__EXPF_P2);
    y = fmaf(y, r, GOBLIN__EXPF_P1);
    y = fmaf(y, r, GOBLIN__EXPF_P0);
    y = fmaf(y, z, r) + 1.0f;
    int32_t n1 = n >> 1, n2 = n - n1; /* both in [-75, 64]: normal powers of two */
    s1.u = (uint32_t)(n1 + 127) << 23;
    s2.u = (uint32_t)(n2 + 127) << 23;
    return (y * s1.f) * s2.f;
}

/* The same exp for x <= 0 (or -inf; not NaN) on GCC vector types VF (float lanes) and VI
 * (int32 lanes of the same width), with every operation rounded separately (no FMA: the
 * BLIS softmax kernels' clones do not enable it, and their bits must not depend on the
 * CPU). x < -104 gives 0. Measured against exp in double over every float from -0 to -inf:
 * at most 0.952 ulp. A statement expression: xin must not name variables ending in _ge. */
#define GOBLIN__VEXPF_NEG(VF, VI, xin)                                                          \
    ({                                                                                          \
        const VF zero_ge = {0}, magic_ge = zero_ge + 12582912.0f; /* adds round to integers */  \
        VF x_ge = (xin);                                                                        \
        VI lo_ge = (VI)(x_ge < -104.0f);                                                        \
        x_ge = (VF)(((VI)(zero_ge - 104.0f) & lo_ge) | ((VI)x_ge & ~lo_ge));                    \
        VF t_ge = x_ge * GOBLIN__EXPF_LOG2E + magic_ge;                                         \
        VI n_ge = (VI)t_ge - (VI)magic_ge;                                                      \
        VF fn_ge = t_ge - magic_ge;                                                             \
        VF r_ge = x_ge - fn_ge * GOBLIN__EXPF_LN2_HI; /* exact */                               \
        r_ge = r_ge - fn_ge * GOBLIN__EXPF_LN2_LO;                                              \
        VF p_ge = zero_ge + GOBLIN__EXPF_P5;                                                    \
        p_ge = p_ge * r_ge + GOBLIN__EXPF_P4;                                                   \
        p_ge = p_ge * r_ge + GOBLIN__EXPF_P3;                                                   \
        p_ge = p_ge * r_ge + GOBLIN__EXPF_P2;                                                   \
        p_ge = p_ge * r_ge + GOBLIN__EXPF_P1;                                                   \
        p_ge = p_ge * r_ge + GOBLIN__EXPF_P0;                                                   \
        VF y_ge = p_ge * (r_ge * r_ge) + r_ge + 1.0f;                                           \
        VI n1_ge = n_ge >> 1, n2_ge = n_ge - n1_ge;                                             \
        y_ge * (VF)((n1_ge + 127) << 23) * (VF)((n2_ge + 127) << 23);                           \
    })

#endif
