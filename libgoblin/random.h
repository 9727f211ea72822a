/* libgoblin/random.h - counter-based random numbers: Philox4x32-10 and the exact
 * mapping from (seed, offset, element index) to values.
 *
 * The random ops (RAND_UNIFORM, RAND_NORMAL, BERNOULLI, RANDINT, DROPOUT) keep no
 * state: element i of an output depends only on the op, its SEED and OFFSET
 * attributes, i and (for BERNOULLI/DROPOUT) the input element. So any machine,
 * any thread split and the CUDA backend produce the same numbers, and a task can
 * be recomputed anywhere for verification. Everything here is header-only and
 * GOBLIN_HD so the CUDA kernels call the very same code.
 *
 * ---- The draw ---------------------------------------------------------------
 * Element i (the row-major index in the output, 0-based) of an op with attributes
 * SEED s and OFFSET o gets four words
 *     (x0, x1, x2, x3) = Philox4x32-10(counter, key)
 *     counter = (lo32(o + i), hi32(o + i), stream, 0)     o + i wraps modulo 2^64
 *     key     = (lo32(s), hi32(s))                        s taken as uint64
 *     stream  = the op's catalogue value (GOBLIN_OP_RAND_UNIFORM = 185, ...)
 * Philox4x32-10 is the generator of Salmon et al., "Parallel random numbers: as
 * easy as 1, 2, 3" (SC'11), as in Random123 and cuRAND: 10 rounds, multipliers
 * 0xD2511F53 / 0xCD9E8D57, key increments 0x9E3779B9 / 0xBB67AE85. Known answer:
 * key (0,0), counter (0,0,0,0) -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8.
 * Because the counter is o + i, element k of a draw with offset 0 equals element
 * 0 of the same draw with offset k: a long draw can be cut into pieces.
 *
 * ---- Uniforms -----------------------------------------------------------------
 * A uniform in [0, 1) with p bits (goblin__rng_u01):
 *     p <= 24:  (x0 >> (32 - p)) * 2^-p                 (f32: p = 24, f16: 11, bf16: 8)
 *     p == 53:  ((x0 << 21) | (x1 >> 11)) * 2^-53        (f64; x0 gives the high bits)
 * Both are exact in double. An output of a float dtype uses p = its precision,
 * so U[0,1) values are exactly representable in that dtype.
 *
 * ---- Arithmetic rules (how the CUDA port gets the same bits) ---------------
 * All value arithmetic is IEEE double with round-to-nearest-even and no excess
 * precision (FLT_EVAL_METHOD 0). Where this file calls fma() the fused operation
 * is meant; every other product that feeds an addition goes through
 * goblin__rng_dmul(), which stops compilers from contracting it into an fma
 * (GCC contracts across statements on FMA targets such as aarch64; nvcc does by
 * default). goblin__rng_log and goblin__rng_cos2pi below are self-contained
 * (no libm), so with these rules a double result is bit-identical on every
 * conforming machine; sqrt is IEEE (correctly rounded) everywhere.
 * The rounding of a double to the output dtype is round-to-nearest-even, done
 * once: f32 by conversion, f16/bf16 through goblin__f64_to_f32_odd then the
 * usual f32 -> f16/bf16 rounding (round-to-odd makes the pair a single correct
 * rounding). A port that computes f32/f16/bf16 outputs in f32 arithmetic instead
 * must stay within 1 ulp of these values; f64 outputs must match bit for bit.
 *
 * The per-op value mappings (uniform scaling, Box-Muller, bernoulli, randint,
 * dropout) are the goblin__rng_* functions below; each says exactly what it does. */
#ifndef GOBLIN__RANDOM_H
#define GOBLIN__RANDOM_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "scalar_ops.h" /* GOBLIN_HD */

#ifndef GOBLIN_HD
#ifdef __CUDACC__
#define GOBLIN_HD __host__ __device__
#else
#define GOBLIN_HD
#endif
#endif

/* ---- Philox4x32-10 ----------------------------------------------------------- */

#define GOBLIN__PHILOX_M0 0xD2511F53u
#define GOBLIN__PHILOX_M1 0xCD9E8D57u
#define GOBLIN__PHILOX_W0 0x9E3779B9u
#define GOBLIN__PHILOX_W1 0xBB67AE85u

/** Philox4x32 with 10 rounds: @p ctr (4 words) under @p key (2 words) into @p out. */
static inline GOBLIN_HD void goblin__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                                   uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)GOBLIN__PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)GOBLIN__PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        /* the key schedule: bumped between rounds (the last bump is unused) */
        k0 += GOBLIN__PHILOX_W0;
        k1 += GOBLIN__PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/** The four words of element @p i of a draw (see the top of this file). */
static inline GOBLIN_HD void goblin__rng_draw(uint64_t seed, uint64_t offset, uint32_t stream,
                                              uint64_t i, uint32_t out[4]) {
    uint64_t n = offset + i; /* unsigned: wraps modulo 2^64 by definition */
    uint32_t ctr[4] = {(uint32_t)n, (uint32_t)(n >> 32), stream, 0u};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    goblin__philox4x32_10(ctr, key, out);
}

/* ---- exact-arithmetic helpers ------------------------------------------------ */

/** a * b rounded once, never contracted with a following add into an fma. */
#if defined(__CUDA_ARCH__)
static inline GOBLIN_HD double goblin__rng_dmul(double a, double b) { return __dmul_rn(a, b); }
#elif defined(__GNUC__) && defined(__x86_64__)
static inline GOBLIN_HD double goblin__rng_dmul(double a, double b) {
    double p = a * b;
    __asm__("" : "+x"(p)); /* opaque to the optimizer: the product is final here */
    return p;
}
#elif defined(__GNUC__) && defined(__aarch64__)
static inline GOBLIN_HD double goblin__rng_dmul(double a, double b) {
    double p = a * b;
    __asm__("" : "+w"(p));
    return p;
}
#else
static inline GOBLIN_HD double goblin__rng_dmul(double a, double b) {
    volatile double p = a * b; /* a store rounds and blocks contraction */
    return p;
}
#endif

/** High 64 bits of the 128-bit product a * b (portable; no __int128 needed). */
static inline GOBLIN_HD uint64_t goblin__rng_mulhi64(uint64_t a, uint64_t b) {
    uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
    uint64_t p0 = al * bl, p1 = al * bh, p2 = ah * bl, p3 = ah * bh;
    uint64_t mid = (p0 >> 32) + (uint32_t)p1 + (uint32_t)p2;
    return p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
}

/** Round @p d to f32 "to odd": exact values stay; otherwise truncate toward zero and
 *  set the last mantissa bit. Rounding that f32 to nearest-even in a format of at
 *  most 22 bits of precision (f16: 11, bf16: 8) then equals one correct rounding of
 *  @p d (Boldo & Melquiond). Finite values beyond the f32 range give +-FLT_MAX (odd),
 *  which still overflows f16/bf16 to infinity as it must. */
static inline GOBLIN_HD float goblin__f64_to_f32_odd(double d) {
    if (d != d) return (float)d;
    if (d > 3.4028234663852886e38) return d == INFINITY ? INFINITY : 3.4028234663852886e38f;
    if (d < -3.4028234663852886e38) return d == -INFINITY ? -INFINITY : -3.4028234663852886e38f;
    float f = (float)d;
    if ((double)f == d) return f;
    uint32_t b;
    memcpy(&b, &f, 4);
    if (fabs((double)f) > fabs(d)) b -= 1u; /* rounded away from zero: step back toward it */
    b |= 1u;
    memcpy(&f, &b, 4);
    return f;
}

/** Round an integer to f32 "to odd" (see goblin__f64_to_f32_odd), exactly. */
static inline GOBLIN_HD float goblin__i64_to_f32_odd(int64_t v) {
    uint64_t a = v < 0 ? 0u - (uint64_t)v : (uint64_t)v;
    if (a < (1u << 24)) return (float)v; /* exact */
    int bits = 0;
    for (uint64_t t = a; t; t >>= 1) bits++;
    int sh = bits - 24;
    uint64_t m = a >> sh;
    if (a & ((((uint64_t)1) << sh) - 1u)) m |= 1u;
    float f = ldexpf((float)m, sh); /* m < 2^24: exact */
    return v < 0 ? -f : f;
}

/* ---- uniforms ---------------------------------------------------------------- */

/** A uniform in [0, 1) with @p bits of precision (1..24, or 53) from the draw @p x. */
static inline GOBLIN_HD double goblin__rng_u01(const uint32_t x[4], int bits) {
    if (bits >= 53) {
        uint64_t m = ((uint64_t)x[0] << 21) | (x[1] >> 11);
        return (double)m * 0x1p-53;
    }
    return (double)(x[0] >> (32 - bits)) / (double)(1u << bits); /* exact: a power of two */
}

/** RAND_UNIFORM before rounding to the output dtype: fma(high - low, u, low) with
 *  u = goblin__rng_u01(x, p). The kernel rounds it to the dtype; a result that rounds
 *  to >= high becomes the largest value of the dtype below high. */
static inline GOBLIN_HD double goblin__rng_uniform(const uint32_t x[4], int bits, double low,
                                                   double high) {
    return fma(high - low, goblin__rng_u01(x, bits), low);
}

/* ---- Box-Muller's pieces: log and cos(2 pi t), deterministic ---------------- */

/** Natural log of @p x for x in [2^-1022, 1] (fdlibm's e_log.c algorithm and
 *  coefficients, error < 1 ulp, with its products pinned as the arithmetic rules
 *  above require). Box-Muller only needs (0, 1]. */
static inline GOBLIN_HD double goblin__rng_log(double x) {
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const double Lg1 = 6.666666666666735130e-01, Lg2 = 3.999999999940941908e-01,
                 Lg3 = 2.857142874366239149e-01, Lg4 = 2.222219843214978396e-01,
                 Lg5 = 1.818357216161805012e-01, Lg6 = 1.531383769920937332e-01,
                 Lg7 = 1.479819860511658591e-01;
    uint64_t b;
    memcpy(&b, &x, 8);
    int k = (int)(b >> 52) - 1023;
    uint64_t mant = b & 0x000fffffffffffffULL;
    uint64_t mb;
    if (mant > 0x6a09e667f3bcdULL) { /* m > sqrt(2): use m / 2 in [sqrt(2)/2, 1) */
        mb = mant | 0x3fe0000000000000ULL;
        k += 1;
    } else {
        mb = mant | 0x3ff0000000000000ULL;
    }
    double m;
    memcpy(&m, &mb, 8);
    double f = m - 1.0; /* exact (Sterbenz) */
    double s = f / (2.0 + f);
    double z = s * s, w = z * z;
    double t1 = goblin__rng_dmul(w, fma(w, fma(w, Lg6, Lg4), Lg2));
    double t2 = goblin__rng_dmul(z, fma(w, fma(w, fma(w, Lg7, Lg5), Lg3), Lg1));
    double R = t2 + t1;
    double hfsq = goblin__rng_dmul(0.5 * f, f);
    double dk = (double)k;
    /* dk * ln2_hi is exact (ln2_hi has 32 trailing zero bits, |k| < 1100) */
    return dk * ln2_hi - ((hfsq - fma(s, hfsq + R, dk * ln2_lo)) - f);
}

/* sin and cos of x + y for |x + y| <= pi/4, y the tail (fdlibm's k_sin.c / k_cos.c
 * with their coefficients, written with explicit fma). */
static inline GOBLIN_HD double goblin__rng_ksin(double x, double y) {
    const double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
                 S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
                 S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
    double z = x * x, v = z * x;
    double r = fma(z, fma(z, fma(z, fma(z, S6, S5), S4), S3), S2);
    double t = fma(z, fma(-v, r, 0.5 * y), -y);
    return x - fma(-v, S1, t);
}

static inline GOBLIN_HD double goblin__rng_kcos(double x, double y) {
    const double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
                 C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
                 C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
    double z = x * x;
    double r = z * fma(z, fma(z, fma(z, fma(z, fma(z, C6, C5), C4), C3), C2), C1);
    double hz = 0.5 * z; /* exact */
    double w = 1.0 - hz;
    return w + (((1.0 - w) - hz) + fma(z, r, -goblin__rng_dmul(x, y)));
}

/** cos(2 pi t) for t in [0, 1) with at most 53 significant bits. The reduction is
 *  exact: 4t = q + r with q an integer and r in [-1/2, 1/2], so the angle is
 *  q * pi/2 + r * pi/2 and only r * pi/2 (|.| <= pi/4) is rounded, into a
 *  double-double. */
static inline GOBLIN_HD double goblin__rng_cos2pi(double t) {
    const double pio2_hi = 1.57079632679489655800e+00; /* 0x3FF921FB54442D18 */
    const double pio2_lo = 6.12323399573676603587e-17; /* pi/2 - pio2_hi */
    double t4 = t * 4.0; /* exact */
    double q = floor(t4);
    double r = t4 - q; /* exact, in [0, 1) */
    if (r > 0.5) {
        r -= 1.0; /* exact */
        q += 1.0;
    }
    double hi = goblin__rng_dmul(r, pio2_hi);
    double lo = fma(r, pio2_lo, fma(r, pio2_hi, -hi));
    double th = hi + lo;
    double tl = lo - (th - hi);
    int quadrant = (int)q & 3;
    switch (quadrant) {
    case 0: return goblin__rng_kcos(th, tl);
    case 1: return -goblin__rng_ksin(th, tl);
    case 2: return -goblin__rng_kcos(th, tl);
    default: return goblin__rng_ksin(th, tl);
    }
}

/** RAND_NORMAL before rounding: Box-Muller's first output,
 *      z = sqrt(-2 log u1) * cos(2 pi u2),  value = fma(std, z, mean)
 *  with, for f32/f16/bf16 outputs (@p wide false), u1 = ((x0 >> 8) + 1) * 2^-24 in
 *  (0, 1] and u2 = (x1 >> 8) * 2^-24; for f64 (@p wide true) 53-bit uniforms,
 *  u1 = ((x0 << 21 | x1 >> 11) + 1) * 2^-53 and u2 = (x2 << 21 | x3 >> 11) * 2^-53.
 *  log and cos are goblin__rng_log and goblin__rng_cos2pi, the product
 *  sqrt(..) * cos(..) is one rounded multiply. */
static inline GOBLIN_HD double goblin__rng_normal(const uint32_t x[4], bool wide, double mean,
                                                  double std) {
    double u1, u2;
    if (wide) {
        uint64_t a = ((uint64_t)x[0] << 21) | (x[1] >> 11);
        uint64_t b = ((uint64_t)x[2] << 21) | (x[3] >> 11);
        u1 = (double)(a + 1u) * 0x1p-53;
        u2 = (double)b * 0x1p-53;
    } else {
        u1 = (double)((x[0] >> 8) + 1u) * 0x1p-24;
        u2 = (double)(x[1] >> 8) * 0x1p-24;
    }
    double rad = sqrt(-2.0 * goblin__rng_log(u1));
    double z = rad * goblin__rng_cos2pi(u2);
    return fma(std, z, mean);
}

/* ---- bernoulli, dropout, randint -------------------------------------------- */

/** BERNOULLI: 1 when u < p with u = (x0 >> 8) * 2^-24 (so P(1) = p to 2^-24
 *  resolution; p <= 0 or NaN gives 0, p >= 1 gives 1). */
static inline GOBLIN_HD bool goblin__rng_bernoulli(const uint32_t x[4], double p) {
    return (double)(x[0] >> 8) * 0x1p-24 < p;
}

/** DROPOUT: is the element kept? Kept when u >= p, u = (x0 >> 8) * 2^-24, so an
 *  element is dropped with probability p (p = 1 drops everything). The kept value
 *  is x * (1 / (1 - p)), the dropped one x * 0 (NaN and inf stay NaN, as PyTorch's
 *  x * mask * scale); the scale is computed in double and, for f32/f16/bf16, rounded
 *  to f32 and multiplied in f32. */
static inline GOBLIN_HD bool goblin__rng_keep(const uint32_t x[4], double p) {
    return (double)(x[0] >> 8) * 0x1p-24 >= p;
}

/** RANDINT: low + floor(r * n / 2^64) with r = (x1 << 32) | x0 and n = high - low
 *  (1 <= n <= 2^63): Lemire's multiply-shift, bias below n / 2^64. */
static inline GOBLIN_HD int64_t goblin__rng_randint(const uint32_t x[4], int64_t low, uint64_t n) {
    uint64_t r = ((uint64_t)x[1] << 32) | x[0];
    uint64_t u = (uint64_t)low + goblin__rng_mulhi64(r, n); /* fits: low <= result < high */
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

#endif
