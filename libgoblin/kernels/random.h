/* libgoblin/kernels/random.h - counter-based random numbers: Philox4x32-10 and the exact
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
#include <goblin/dtype.h>
#include "hd.h"

/** What a draw is keyed by: an op's SEED and OFFSET (as uint64) and its stream (the op's
 *  catalogue value); backends read it from a node with goblin__rng_of (kernel_attrs.h). */
typedef struct goblin__rng_key {
    uint64_t seed, offset;
    uint32_t stream;
} goblin__rng_key;

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

/** Where element @p i (row-major) of a DROPOUT's value draws when the draws follow its dim
 *  AXIS: the element's row-major index in the same value with that dim moved first, so
 *  that a cut of the value along that dim (a micro-batch of seq-first data) draws what
 *  the same elements draw in the whole. @p len: the dim's size (> 0); @p inner: the
 *  elements after it (> 0); @p rest: the value's elements / len. AXIS 0 gives i. */
static inline GOBLIN_HD uint64_t goblin__rng_axis_index(uint64_t i, uint64_t len, uint64_t inner,
                                                       uint64_t rest) {
    uint64_t block = len * inner, o = i / block, r = i % block;
    return (r / inner) * rest + o * inner + r % inner;
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

/** The bits p of the uniforms an output of float dtype @p dt draws: its precision. */
static inline GOBLIN_HD int goblin__rng_bits(goblin_dtype dt) {
    switch (dt) {
    case GOBLIN_DTYPE_F64: return 53;
    case GOBLIN_DTYPE_F16: return 11;
    case GOBLIN_DTYPE_BF16: return 8;
    default: return 24;
    }
}

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
/* Every constant of this section is printed by tools/fit_rng_f64.py: the
 * polynomials are our own minimax fits (a Remez exchange in 50-digit mpmath,
 * weighted by the error each term contributes to the final double, then rounded
 * to double one coefficient at a time with the rest refitted), and the split
 * constants of ln 2 and pi/2 are derived there. Fit errors, relative to the
 * function value: log 2^-59.5, sin 2^-57.9, cos 2^-63.9. Measured results: see
 * Test(random, log_and_cos2pi_are_accurate). */

/** Natural log of a finite @p x > 0 (Box-Muller only needs (0, 1]), within 1 ulp.
 *  Method: x = 2^k m with m in [sqrt(2)/2, sqrt(2)) (subnormals are scaled by 2^54
 *  first), f = m - 1 exactly, s = f / (2 + f), so log m = 2 atanh(s) = 2s + s R(s^2)
 *  with R(z) = z (L1 + L2 z + ... + L7 z^6) fitted on [0, (3 - 2 sqrt 2)^2]. Since
 *  2s = f - s f and s f = f^2/2 - s f^2/2, log m = f - h + s (h + R) with h = f^2/2:
 *  the large part f - h is nearly exact and only the small s (h + R) carries
 *  rounding. k ln 2 is added as k ln2_hi (exact: ln2_hi has 42 significant bits)
 *  plus k ln2_lo. */
static inline GOBLIN_HD double goblin__rng_log(double x) {
    const double ln2_hi = 6.93147180559890330e-01, ln2_lo = 5.49792301870837116e-14;
    const double L1 = 6.66666666666673402e-01, L2 = 3.99999999994170519e-01,
                 L3 = 2.85714287418906476e-01, L4 = 2.22221986218703704e-01,
                 L5 = 1.81835618919077124e-01, L6 = 1.53141107625046652e-01,
                 L7 = 1.47953652256634705e-01;
    int k = 0;
    if (x < 0x1p-1022) { /* subnormal: bring it into the normal range, exactly */
        x *= 0x1p54;
        k = -54;
    }
    uint64_t bits;
    memcpy(&bits, &x, 8);
    uint64_t frac = bits & 0x000fffffffffffffULL;
    k += (int)(bits >> 52) - 1023;
    /* 1.frac is in [1, 2); the fractions from 0x6a09e667f3bcd up are above sqrt(2)
     * (sqrt(2) = 0x1.6a09e667f3bcc9...): for those take half of it, one more k */
    bool halve = frac >= 0x6a09e667f3bcdULL;
    uint64_t mbits = frac | (halve ? 0x3fe0000000000000ULL : 0x3ff0000000000000ULL);
    k += halve;
    double m;
    memcpy(&m, &mbits, 8);
    double f = m - 1.0; /* exact: m is within a factor 2 of 1 */
    double s = f / (2.0 + f);
    double z = s * s;
    double p = fma(z, L7, L6);
    p = fma(z, p, L5);
    p = fma(z, p, L4);
    p = fma(z, p, L3);
    p = fma(z, p, L2);
    p = fma(z, p, L1);
    double h = goblin__rng_dmul(0.5 * f, f);
    double dk = (double)k;
    double small = fma(s, fma(z, p, h), goblin__rng_dmul(dk, ln2_lo)); /* s (h + R) + k ln2_lo */
    return dk * ln2_hi + (f - (h - small)); /* dk * ln2_hi is exact: contraction-proof */
}

/** sin(x + y) for |x| <= pi/4 (plus rounding) and a tail |y| <= ulp(x)/2:
 *  x + (x^3 P(x^2) + y (1 - x^2/2)), P(z) = S1 + S2 z + ... + S6 z^5 fitted so that
 *  x + x^3 P(x^2) is sin x; the tail enters through sin(x + y) ~ sin x + y cos x. */
static inline GOBLIN_HD double goblin__rng_ksin(double x, double y) {
    const double S1 = -1.66666666666666297e-01, S2 = 8.33333333332184067e-03,
                 S3 = -1.98412698293585387e-04, S4 = 2.75573135385229244e-06,
                 S5 = -2.50507343914011020e-08, S6 = 1.58954334559733642e-10;
    double z = x * x;
    double x3 = z * x;
    double p = fma(z, S6, S5);
    p = fma(z, p, S4);
    p = fma(z, p, S3);
    p = fma(z, p, S2);
    p = fma(z, p, S1);
    double ty = fma(-0.5 * z, y, y); /* y (1 - x^2/2) */
    return x + fma(x3, p, ty);
}

/** cos(x + y) for |x| <= pi/4 (plus rounding) and a tail |y| <= ulp(x)/2:
 *  1 - x^2/2 + x^4 P(x^2) - x y, P(z) = C1 + C2 z + ... + C6 z^5 fitted so that
 *  1 - x^2/2 + x^4 P(x^2) is cos x. 1 - x^2/2 is kept as a rounded head plus its
 *  exact error, together with the rounding error of x^2 itself. */
static inline GOBLIN_HD double goblin__rng_kcos(double x, double y) {
    const double C1 = 4.16666666666665950e-02, C2 = -1.38888888888733420e-03,
                 C3 = 2.48015872890020793e-05, C4 = -2.75573142170390459e-07,
                 C5 = 2.08757053961001162e-09, C6 = -1.13587492466503630e-11;
    double z = x * x;
    double zlo = fma(x, x, -z); /* x^2 = z + zlo exactly */
    double hz = 0.5 * z;        /* exact (so contracting 1 - hz changes nothing) */
    double head = 1.0 - hz;     /* hz <= 0.31, so ... */
    double herr = (1.0 - head) - hz; /* ... this is exactly 1 - hz - head */
    double p = fma(z, C6, C5);
    p = fma(z, p, C4);
    p = fma(z, p, C3);
    p = fma(z, p, C2);
    p = fma(z, p, C1);
    double tail = fma(-x, y, fma(-0.5, zlo, herr)); /* herr - zlo/2 - x y */
    return head + fma(goblin__rng_dmul(z, z), p, tail);
}

/** cos(2 pi t) for a double t in [0, 1), within 1 ulp.
 *  The reduction is exact: with n the integer nearest 4t (ties down) and
 *  r = 4t - n in [-1/2, 1/2], the angle is n pi/2 + r pi/2; only a = r pi/2
 *  (|a| <= pi/4) is rounded, to a double-double (pio2_hi + pio2_lo = pi/2 to
 *  2^-109). Then cos, -sin, -cos, sin of a for n = 0, 1, 2, 3 mod 4. */
static inline GOBLIN_HD double goblin__rng_cos2pi(double t) {
    const double pio2_hi = 1.57079632679489656e+00, pio2_lo = 6.12323399573676604e-17;
    double t4 = 4.0 * t;    /* exact */
    double n = floor(t4);
    double r = t4 - n;      /* exact, in [0, 1) */
    if (r > 0.5) {
        r = r - 1.0;        /* exact */
        n = n + 1.0;
    }
    double ah = goblin__rng_dmul(r, pio2_hi);
    double al = fma(r, pio2_lo, fma(r, pio2_hi, -ah)); /* r pi/2 - ah, nearly exact */
    double a = ah + al;     /* renormalize: a + b = ah + al exactly, |b| <= ulp(a)/2 */
    double b = al - (a - ah);
    switch ((int)n & 3) {
    case 0: return goblin__rng_kcos(a, b);
    case 1: return -goblin__rng_ksin(a, b);
    case 2: return -goblin__rng_kcos(a, b);
    default: return goblin__rng_ksin(a, b);
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
