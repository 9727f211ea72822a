/* libgoblin/expf_impl.h - the f32 exp shared by the formula evaluator and the BLIS
 * backend's EXP kernel (one implementation: the same bits everywhere). */
#ifndef GOBLIN__EXPF_IMPL_H
#define GOBLIN__EXPF_IMPL_H

#include <math.h>
#include <stdint.h>

/* Cephes' expf scheme, with explicit fused multiply-adds: n = round(x / ln2)
 * by the 1.5 * 2^23 trick, r = x - n ln2 in two pieces, e^r = 1 + r + r^2 p(r)
 * with Cephes' degree-5 p, then 2^n applied as two exact powers of two so that
 * results in the subnormal range are rounded once. fmaf is exactly specified, so
 * every CPU clone (hardware FMA, or libm's fmaf in the baseline clone) gives the
 * same bits. The clamp to [-104, 89] keeps n in range (beyond it the result is
 * 0 or inf anyway) and lets NaN through: a NaN x makes y NaN, so no test for it.
 * Branch-free, so loops over it vectorize. Measured over all 2^32 inputs against
 * exp in double: at most 1.01 ulp. */
static inline __attribute__((always_inline)) float goblin__expf_inline(float x) {
    union { float f; uint32_t u; } tb, s1, s2;
    float xc = x < -104.0f ? -104.0f : x;
    xc = xc > 89.0f ? 89.0f : xc;
    tb.f = fmaf(xc, 1.44269504088896341f, 12582912.0f);
    float nf = tb.f - 12582912.0f;
    /* n from t's low mantissa bits (t's ulp is 1): unlike (int32_t)nf this is
     * defined for NaN too */
    int32_t n = (int32_t)(tb.u - 0x4b400000u);
    float r = fmaf(nf, -0.693359375f, xc);
    r = fmaf(nf, 2.12194440e-4f, r);
    float z = r * r;
    float y = 1.9875691500e-4f;
    y = fmaf(y, r, 1.3981999507e-3f);
    y = fmaf(y, r, 8.3334519073e-3f);
    y = fmaf(y, r, 4.1665795894e-2f);
    y = fmaf(y, r, 1.6666665459e-1f);
    y = fmaf(y, r, 5.0000001201e-1f);
    y = fmaf(y, z, r) + 1.0f;
    int32_t n1 = n >> 1, n2 = n - n1; /* both in [-75, 64]: normal powers of two */
    s1.u = (uint32_t)(n1 + 127) << 23;
    s2.u = (uint32_t)(n2 + 127) << 23;
    return (y * s1.f) * s2.f;
}

#endif
