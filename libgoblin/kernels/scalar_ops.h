/* libgoblin/kernels/scalar_ops.h - the scalar semantics of the elementwise catalogue.
 *
 * This header is the single definition of what ADD, FLOOR_DIV, SHL, ... compute
 * on one element. The reference kernels, the FORMULA evaluator and the CUDA
 * backend all call these functions, so every backend agrees on integer
 * wraparound, division by zero, NaN handling and shift counts by construction.
 * It is plain C (and valid CUDA C++): no allocation, no errors, no UB on any input.
 *
 * Names: goblin__<stem>_<sfx>.
 *   sfx: f32 (float), f64 (double), i8 i16 i32 i64 (intN_t), u8 (uint8_t),
 *        b (bool stored as uint8_t: any nonzero byte is true, results are 0/1).
 *   f16 and bf16 have no functions of their own: convert to f32 (kernel_util.h),
 *   call the _f32 function, round once on store.
 *
 *   op            stem        types
 *   ADD SUB MUL   plus minus times  floats, ints; plus/times also b (or/and); no minus_b
 *                 (not add/sub/mul: alloc.h owns goblin__add_i64 and goblin__mul_i64,
 *                 its overflow-checked size helpers)
 *   DIV           div          floats only (integers use floordiv/truncdiv)
 *   POW           pow          floats, ints
 *   MAXIMUM/MIN.  maximum minimum  all (b: or/and)
 *   CLAMP         clamp        floats, ints (bounds pre-converted, see below)
 *   ATAN2         atan2        floats
 *   EQ NE LT LE GT GE  eq ne lt le gt ge  all; return bool
 *   LOGICAL_*     logand logor logxor lognot  all; return bool
 *   WHERE         where        all
 *   ISNAN         isnan        all (false for non-floats)
 *   FLOOR_DIV TRUNC_DIV REM_FLOOR REM_TRUNC  floordiv truncdiv remfloor remtrunc  floats, ints
 *   BITWISE_*     bitand bitor bitxor bitnot   ints, b
 *   SHL SHR_ARITH SHR_LOGICAL  shl shrarith shrlogical  ints
 *
 * Integer semantics (match NumPy where NumPy defines them):
 *   add/sub/mul/pow wrap modulo 2^bits (computed in unsigned arithmetic).
 *   x // 0 = 0 and x % 0 = 0 (floor and trunc forms); INT_MIN // -1 = INT_MIN,
 *   INT_MIN % -1 = 0.
 *   pow: exact power by squaring with wraparound; x^0 = 1 (also 0^0); a negative
 *   exponent gives 0, except base 1 -> 1 and base -1 -> -1 or 1 (odd/even exponent).
 *   Shifts: the count is the second operand; a count < 0 or >= the bit width gives
 *   shl -> 0, shrarith -> (x < 0 ? -1 : 0), shrlogical -> 0. shrlogical shifts the
 *   bit pattern as the unsigned type of the same width. On u8 shrarith == shrlogical.
 * Float semantics:
 *   add/sub/mul/div are IEEE (division by zero gives +-inf or NaN).
 *   maximum/minimum propagate NaN (numpy.maximum): if either operand is NaN the
 *   result is NaN; on equal operands (-0 vs +0) the first is returned (as PyTorch;
 *   NumPy's f32/f64 loops return the second, its f16 loop the first).
 *   floordiv/remfloor follow Python/NumPy/PyTorch divmod: q = floor of the exact
 *   quotient, computed from fmod (so 1.0 // 0.1 == 9, not floor(1.0 / 0.1) == 10);
 *   b == 0 gives a / b (IEEE inf or NaN) for floordiv and NaN for remfloor; a zero
 *   remainder takes the sign of b. truncdiv is trunc(a / b) (PyTorch rounding_mode
 *   "trunc"); remtrunc is C fmod.
 *   Comparisons are IEEE (anything with NaN is false, except ne). Logical ops treat
 *   nonzero (including NaN) as true.
 * CLAMP bounds arrive as doubles: floats compare against the bound rounded to the
 * computing type; integer bounds are converted with goblin__clamp_lo/hi_bound
 * (min rounds up, max rounds down, both saturate to the type's range), so the
 * result is the nearest integer inside [min, max]; if no integer lies in between,
 * the result is the converted max (clamp = min(max(x, lo), hi), as PyTorch). */
#ifndef GOBLIN__SCALAR_OPS_H
#define GOBLIN__SCALAR_OPS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include "hd.h"

/* ---- floats ---------------------------------------------------------------- */

#define GOBLIN__FLOAT_OPS(sfx, T, FLOOR, TRUNC, FMOD, COPYSIGN, POW, ATAN2)                         \
    static inline GOBLIN_HD T goblin__plus_##sfx(T a, T b) { return a + b; }                        \
    static inline GOBLIN_HD T goblin__minus_##sfx(T a, T b) { return a - b; }                       \
    static inline GOBLIN_HD T goblin__times_##sfx(T a, T b) { return a * b; }                       \
    static inline GOBLIN_HD T goblin__div_##sfx(T a, T b) { return a / b; }                         \
    static inline GOBLIN_HD T goblin__pow_##sfx(T a, T b) { return POW(a, b); }                     \
    static inline GOBLIN_HD T goblin__atan2_##sfx(T a, T b) { return ATAN2(a, b); }                 \
    static inline GOBLIN_HD T goblin__maximum_##sfx(T a, T b) { return (a >= b || a != a) ? a : b; } \
    static inline GOBLIN_HD T goblin__minimum_##sfx(T a, T b) { return (a <= b || a != a) ? a : b; } \
    /* lo/hi are -inf/+inf for an absent bound. */                                                  \
    static inline GOBLIN_HD T goblin__clamp_##sfx(T x, T lo, T hi) {                                \
        return goblin__minimum_##sfx(goblin__maximum_##sfx(x, lo), hi);                             \
    }                                                                                               \
    static inline GOBLIN_HD bool goblin__eq_##sfx(T a, T b) { return a == b; }                      \
    static inline GOBLIN_HD bool goblin__ne_##sfx(T a, T b) { return a != b; }                      \
    static inline GOBLIN_HD bool goblin__lt_##sfx(T a, T b) { return a < b; }                       \
    static inline GOBLIN_HD bool goblin__le_##sfx(T a, T b) { return a <= b; }                      \
    static inline GOBLIN_HD bool goblin__gt_##sfx(T a, T b) { return a > b; }                       \
    static inline GOBLIN_HD bool goblin__ge_##sfx(T a, T b) { return a >= b; }                      \
    static inline GOBLIN_HD bool goblin__logand_##sfx(T a, T b) { return a != 0 && b != 0; }        \
    static inline GOBLIN_HD bool goblin__logor_##sfx(T a, T b) { return a != 0 || b != 0; }         \
    static inline GOBLIN_HD bool goblin__logxor_##sfx(T a, T b) { return (a != 0) != (b != 0); }    \
    static inline GOBLIN_HD bool goblin__lognot_##sfx(T a) { return a == 0; }                       \
    static inline GOBLIN_HD T goblin__where_##sfx(uint8_t c, T a, T b) { return c ? a : b; }        \
    static inline GOBLIN_HD bool goblin__isnan_##sfx(T a) { return a != a; }                        \
    /* Python divmod: exact floor quotient via fmod, snapped to an integer. */                      \
    static inline GOBLIN_HD T goblin__floordiv_##sfx(T a, T b) {                                    \
        if (b == 0) return a / b;                                                                   \
        T mod = FMOD(a, b);                                                                         \
        T div = (a - mod) / b;                                                                      \
        if (mod != 0 && ((b < 0) != (mod < 0))) div -= (T)1;                                        \
        if (div == 0) return COPYSIGN((T)0, a / b);                                                 \
        T fl = FLOOR(div);                                                                          \
        if (div - fl > (T)0.5) fl += (T)1;                                                          \
        return fl;                                                                                  \
    }                                                                                               \
    static inline GOBLIN_HD T goblin__remfloor_##sfx(T a, T b) {                                    \
        T mod = FMOD(a, b);                                                                         \
        if (b == 0) return mod;                                                                     \
        if (mod != 0) {                                                                             \
            if ((b < 0) != (mod < 0)) mod += b;                                                     \
        } else {                                                                                    \
            mod = COPYSIGN((T)0, b);                                                                \
        }                                                                                           \
        return mod;                                                                                 \
    }                                                                                               \
    static inline GOBLIN_HD T goblin__truncdiv_##sfx(T a, T b) { return TRUNC(a / b); }             \
    static inline GOBLIN_HD T goblin__remtrunc_##sfx(T a, T b) { return FMOD(a, b); }

GOBLIN__FLOAT_OPS(f32, float, floorf, truncf, fmodf, copysignf, powf, atan2f)
GOBLIN__FLOAT_OPS(f64, double, floor, trunc, fmod, copysign, pow, atan2)

/* ---- integers ---------------------------------------------------------------
 * WU is the unsigned type arithmetic runs in: at least as wide as unsigned int,
 * so that narrow types never promote to (overflowing) signed int. */

#define GOBLIN__INT_COMMON(sfx, T, UT, WU, BITS)                                                    \
    static inline GOBLIN_HD T goblin__plus_##sfx(T a, T b) { return (T)((WU)(UT)a + (WU)(UT)b); }   \
    static inline GOBLIN_HD T goblin__minus_##sfx(T a, T b) { return (T)((WU)(UT)a - (WU)(UT)b); }  \
    static inline GOBLIN_HD T goblin__times_##sfx(T a, T b) { return (T)((WU)(UT)a * (WU)(UT)b); }  \
    static inline GOBLIN_HD T goblin__maximum_##sfx(T a, T b) { return a >= b ? a : b; }            \
    static inline GOBLIN_HD T goblin__minimum_##sfx(T a, T b) { return a <= b ? a : b; }            \
    /* lo/hi already converted (goblin__clamp_lo/hi_bound); type min/max if absent. */              \
    static inline GOBLIN_HD T goblin__clamp_##sfx(T x, T lo, T hi) {                                \
        T t = x < lo ? lo : x;                                                                      \
        return t > hi ? hi : t;                                                                     \
    }                                                                                               \
    static inline GOBLIN_HD bool goblin__eq_##sfx(T a, T b) { return a == b; }                      \
    static inline GOBLIN_HD bool goblin__ne_##sfx(T a, T b) { return a != b; }                      \
    static inline GOBLIN_HD bool goblin__lt_##sfx(T a, T b) { return a < b; }                       \
    static inline GOBLIN_HD bool goblin__le_##sfx(T a, T b) { return a <= b; }                      \
    static inline GOBLIN_HD bool goblin__gt_##sfx(T a, T b) { return a > b; }                       \
    static inline GOBLIN_HD bool goblin__ge_##sfx(T a, T b) { return a >= b; }                      \
    static inline GOBLIN_HD bool goblin__logand_##sfx(T a, T b) { return a != 0 && b != 0; }        \
    static inline GOBLIN_HD bool goblin__logor_##sfx(T a, T b) { return a != 0 || b != 0; }         \
    static inline GOBLIN_HD bool goblin__logxor_##sfx(T a, T b) { return (a != 0) != (b != 0); }    \
    static inline GOBLIN_HD bool goblin__lognot_##sfx(T a) { return a == 0; }                       \
    static inline GOBLIN_HD T goblin__where_##sfx(uint8_t c, T a, T b) { return c ? a : b; }        \
    static inline GOBLIN_HD bool goblin__isnan_##sfx(T a) { (void)a; return false; }                \
    static inline GOBLIN_HD T goblin__bitand_##sfx(T a, T b) { return (T)((UT)a & (UT)b); }         \
    static inline GOBLIN_HD T goblin__bitor_##sfx(T a, T b) { return (T)((UT)a | (UT)b); }          \
    static inline GOBLIN_HD T goblin__bitxor_##sfx(T a, T b) { return (T)((UT)a ^ (UT)b); }         \
    static inline GOBLIN_HD T goblin__bitnot_##sfx(T a) { return (T)(UT)~(WU)(UT)a; }               \
    static inline GOBLIN_HD T goblin__shl_##sfx(T a, T count) {                                     \
        int64_t c = (int64_t)count;                                                                 \
        if (c < 0 || c >= (BITS)) return 0;                                                         \
        return (T)(UT)((WU)(UT)a << c);                                                             \
    }                                                                                               \
    static inline GOBLIN_HD T goblin__shrlogical_##sfx(T a, T count) {                              \
        int64_t c = (int64_t)count;                                                                 \
        if (c < 0 || c >= (BITS)) return 0;                                                         \
        return (T)(UT)((WU)(UT)a >> c);                                                             \
    }                                                                                               \
    /* Power by squaring on the bit pattern; the caller handles negative exponents. */              \
    static inline GOBLIN_HD T goblin__powu_##sfx(T a, uint64_t e) {                                 \
        WU r = 1, x = (WU)(UT)a;                                                                    \
        while (e) {                                                                                 \
            if (e & 1u) r = (WU)(r * x);                                                            \
            x = (WU)(x * x);                                                                        \
            e >>= 1;                                                                                \
        }                                                                                           \
        return (T)(UT)r;                                                                            \
    }

#define GOBLIN__SINT_OPS(sfx, T, UT, WU, BITS)                                                      \
    GOBLIN__INT_COMMON(sfx, T, UT, WU, BITS)                                                        \
    static inline GOBLIN_HD T goblin__floordiv_##sfx(T a, T b) {                                    \
        if (b == 0) return 0;                                                                       \
        if (b == -1) return (T)(UT)((WU)0 - (WU)(UT)a); /* INT_MIN // -1 wraps */                   \
        T q = (T)(a / b), r = (T)(a % b);                                                           \
        if (r != 0 && ((r < 0) != (b < 0))) q = (T)(q - 1);                                         \
        return q;                                                                                   \
    }                                                                                               \
    static inline GOBLIN_HD T goblin__truncdiv_##sfx(T a, T b) {                                    \
        if (b == 0) return 0;                                                                       \
        if (b == -1) return (T)(UT)((WU)0 - (WU)(UT)a);                                             \
        return (T)(a / b);                                                                          \
    }                                                                                               \
    static inline GOBLIN_HD T goblin__remfloor_##sfx(T a, T b) {                                    \
        if (b == 0 || b == -1) return 0;                                                            \
        T r = (T)(a % b);                                                                           \
        if (r != 0 && ((r < 0) != (b < 0))) r = (T)(r + b);                                         \
        return r;                                                                                   \
    }                                                                                               \
    static inline GOBLIN_HD T goblin__remtrunc_##sfx(T a, T b) {                                    \
        if (b == 0 || b == -1) return 0;                                                            \
        return (T)(a % b);                                                                          \
    }                                                                                               \
    /* ~((~a) >> c) shifts a negative value without relying on signed >>. */                        \
    static inline GOBLIN_HD T goblin__shrarith_##sfx(T a, T count) {                                \
        int64_t c = (int64_t)count;                                                                 \
        if (c < 0 || c >= (BITS)) return a < 0 ? (T)-1 : (T)0;                                      \
        if (a >= 0) return (T)(a >> c);                                                             \
        return (T)~((T)~a >> c);                                                                    \
    }                                                                                               \
    static inline GOBLIN_HD T goblin__pow_##sfx(T a, T b) {                                         \
        if (b < 0) {                                                                                \
            if (a == 1) return 1;                                                                   \
            if (a == -1) return (b & 1) ? (T)-1 : (T)1;                                             \
            return 0;                                                                               \
        }                                                                                           \
        return goblin__powu_##sfx(a, (uint64_t)b);                                                  \
    }

GOBLIN__SINT_OPS(i8, int8_t, uint8_t, uint32_t, 8)
GOBLIN__SINT_OPS(i16, int16_t, uint16_t, uint32_t, 16)
GOBLIN__SINT_OPS(i32, int32_t, uint32_t, uint32_t, 32)
GOBLIN__SINT_OPS(i64, int64_t, uint64_t, uint64_t, 64)

GOBLIN__INT_COMMON(u8, uint8_t, uint8_t, uint32_t, 8)
static inline GOBLIN_HD uint8_t goblin__floordiv_u8(uint8_t a, uint8_t b) {
    return b ? (uint8_t)(a / b) : 0;
}
static inline GOBLIN_HD uint8_t goblin__truncdiv_u8(uint8_t a, uint8_t b) {
    return b ? (uint8_t)(a / b) : 0;
}
static inline GOBLIN_HD uint8_t goblin__remfloor_u8(uint8_t a, uint8_t b) {
    return b ? (uint8_t)(a % b) : 0;
}
static inline GOBLIN_HD uint8_t goblin__remtrunc_u8(uint8_t a, uint8_t b) {
    return b ? (uint8_t)(a % b) : 0;
}
static inline GOBLIN_HD uint8_t goblin__shrarith_u8(uint8_t a, uint8_t c) {
    return goblin__shrlogical_u8(a, c);
}
static inline GOBLIN_HD uint8_t goblin__pow_u8(uint8_t a, uint8_t b) { return goblin__powu_u8(a, b); }

#undef GOBLIN__FLOAT_OPS
#undef GOBLIN__INT_COMMON
#undef GOBLIN__SINT_OPS

/* ---- bool (uint8_t, nonzero = true) ------------------------------------------ */

static inline GOBLIN_HD uint8_t goblin__plus_b(uint8_t a, uint8_t b) { return (a != 0) | (b != 0); }
static inline GOBLIN_HD uint8_t goblin__times_b(uint8_t a, uint8_t b) { return (a != 0) & (b != 0); }
static inline GOBLIN_HD uint8_t goblin__maximum_b(uint8_t a, uint8_t b) { return (a != 0) | (b != 0); }
static inline GOBLIN_HD uint8_t goblin__minimum_b(uint8_t a, uint8_t b) { return (a != 0) & (b != 0); }
static inline GOBLIN_HD bool goblin__eq_b(uint8_t a, uint8_t b) { return (a != 0) == (b != 0); }
static inline GOBLIN_HD bool goblin__ne_b(uint8_t a, uint8_t b) { return (a != 0) != (b != 0); }
static inline GOBLIN_HD bool goblin__lt_b(uint8_t a, uint8_t b) { return (a == 0) && (b != 0); }
static inline GOBLIN_HD bool goblin__le_b(uint8_t a, uint8_t b) { return (a == 0) || (b != 0); }
static inline GOBLIN_HD bool goblin__gt_b(uint8_t a, uint8_t b) { return (a != 0) && (b == 0); }
static inline GOBLIN_HD bool goblin__ge_b(uint8_t a, uint8_t b) { return (a != 0) || (b == 0); }
static inline GOBLIN_HD bool goblin__logand_b(uint8_t a, uint8_t b) { return a != 0 && b != 0; }
static inline GOBLIN_HD bool goblin__logor_b(uint8_t a, uint8_t b) { return a != 0 || b != 0; }
static inline GOBLIN_HD bool goblin__logxor_b(uint8_t a, uint8_t b) { return (a != 0) != (b != 0); }
static inline GOBLIN_HD bool goblin__lognot_b(uint8_t a) { return a == 0; }
static inline GOBLIN_HD uint8_t goblin__where_b(uint8_t c, uint8_t a, uint8_t b) {
    return c ? (uint8_t)(a != 0) : (uint8_t)(b != 0);
}
static inline GOBLIN_HD bool goblin__isnan_b(uint8_t a) { (void)a; return false; }
static inline GOBLIN_HD uint8_t goblin__bitand_b(uint8_t a, uint8_t b) { return (a != 0) & (b != 0); }
static inline GOBLIN_HD uint8_t goblin__bitor_b(uint8_t a, uint8_t b) { return (a != 0) | (b != 0); }
static inline GOBLIN_HD uint8_t goblin__bitxor_b(uint8_t a, uint8_t b) { return (a != 0) ^ (b != 0); }
static inline GOBLIN_HD uint8_t goblin__bitnot_b(uint8_t a) { return a == 0; }

/* ---- CLAMP bounds for integer types ------------------------------------------
 * @p m is a finite or infinite double (never NaN: inference rejects NaN bounds);
 * tmin/tmax are the integer type's range. */
static inline GOBLIN_HD int64_t goblin__clamp_lo_bound(double m, int64_t tmin, int64_t tmax) {
    double c = ceil(m);
    if (c <= (double)tmin) return tmin;
    if (c >= (double)tmax) return tmax; /* (double)INT64_MAX rounds to 2^63: saturate */
    return (int64_t)c;
}
static inline GOBLIN_HD int64_t goblin__clamp_hi_bound(double m, int64_t tmin, int64_t tmax) {
    double f = floor(m);
    if (f <= (double)tmin) return tmin;
    if (f >= (double)tmax) return tmax;
    return (int64_t)f;
}

#endif
