/* libgoblin/backends/cuda/cuda_scalar.h - C++ overloads over scalar_ops.h.
 *
 * scalar_ops.h names each function by dtype suffix (goblin__add_f32, ..._i8,
 * ..._b); kernels here are templates over the computing type, so each stem
 * gets one overload per type that the header defines it for. Computing types:
 * float (f32, f16, bf16), double, int8_t, int16_t, int32_t, int64_t,
 * uint8_t (u8) and bool. Calling a stem with a type it lacks is a compile error,
 * which keeps the kernels' dtype dispatch honest. */
#ifndef GOBLIN__CUDA_SCALAR_H
#define GOBLIN__CUDA_SCALAR_H

#include "cuda_impl.h"
#include "kernels/scalar_ops.h"
#include "kernels/random.h" /* goblin__f64_to_f32_odd, goblin__i64_to_f32_odd */

#define GC_OV_D __device__ __forceinline__

#define GC_OV2_(stem, T, sfx) \
    GC_OV_D auto gc_##stem(T a, T b) { return goblin__##stem##_##sfx(a, b); }
#define GC_OV2B_(stem) \
    GC_OV_D auto gc_##stem(bool a, bool b) { return goblin__##stem##_b((uint8_t)a, (uint8_t)b); }
#define GC_OV1_(stem, T, sfx) GC_OV_D auto gc_##stem(T a) { return goblin__##stem##_##sfx(a); }
#define GC_OV1B_(stem) GC_OV_D auto gc_##stem(bool a) { return goblin__##stem##_b((uint8_t)a); }

#define GC_OV2_FLOAT(stem) GC_OV2_(stem, float, f32) GC_OV2_(stem, double, f64)
#define GC_OV2_INT(stem)                                                                  \
    GC_OV2_(stem, int8_t, i8) GC_OV2_(stem, int16_t, i16) GC_OV2_(stem, int32_t, i32)    \
    GC_OV2_(stem, int64_t, i64) GC_OV2_(stem, uint8_t, u8)
#define GC_OV1_FLOAT(stem) GC_OV1_(stem, float, f32) GC_OV1_(stem, double, f64)
#define GC_OV1_INT(stem)                                                                  \
    GC_OV1_(stem, int8_t, i8) GC_OV1_(stem, int16_t, i16) GC_OV1_(stem, int32_t, i32)    \
    GC_OV1_(stem, int64_t, i64) GC_OV1_(stem, uint8_t, u8)

/* arithmetic */
GC_OV2_FLOAT(plus) GC_OV2_INT(plus) GC_OV2B_(plus)
GC_OV2_FLOAT(minus) GC_OV2_INT(minus)
GC_OV2_FLOAT(times) GC_OV2_INT(times) GC_OV2B_(times)
GC_OV2_FLOAT(div)
GC_OV2_FLOAT(pow) GC_OV2_INT(pow)
GC_OV2_FLOAT(atan2)
GC_OV2_FLOAT(maximum) GC_OV2_INT(maximum) GC_OV2B_(maximum)
GC_OV2_FLOAT(minimum) GC_OV2_INT(minimum) GC_OV2B_(minimum)
/* comparison and logic */
GC_OV2_FLOAT(eq) GC_OV2_INT(eq) GC_OV2B_(eq)
GC_OV2_FLOAT(ne) GC_OV2_INT(ne) GC_OV2B_(ne)
GC_OV2_FLOAT(lt) GC_OV2_INT(lt) GC_OV2B_(lt)
GC_OV2_FLOAT(le) GC_OV2_INT(le) GC_OV2B_(le)
GC_OV2_FLOAT(gt) GC_OV2_INT(gt) GC_OV2B_(gt)
GC_OV2_FLOAT(ge) GC_OV2_INT(ge) GC_OV2B_(ge)
GC_OV2_FLOAT(logand) GC_OV2_INT(logand) GC_OV2B_(logand)
GC_OV2_FLOAT(logor) GC_OV2_INT(logor) GC_OV2B_(logor)
GC_OV2_FLOAT(logxor) GC_OV2_INT(logxor) GC_OV2B_(logxor)
GC_OV1_FLOAT(lognot) GC_OV1_INT(lognot) GC_OV1B_(lognot)
GC_OV1_FLOAT(isnan) GC_OV1_INT(isnan) GC_OV1B_(isnan)
/* integer ops */
GC_OV2_FLOAT(floordiv) GC_OV2_INT(floordiv)
GC_OV2_FLOAT(truncdiv) GC_OV2_INT(truncdiv)
GC_OV2_FLOAT(remfloor) GC_OV2_INT(remfloor)
GC_OV2_FLOAT(remtrunc) GC_OV2_INT(remtrunc)
GC_OV2_INT(bitand) GC_OV2B_(bitand)
GC_OV2_INT(bitor) GC_OV2B_(bitor)
GC_OV2_INT(bitxor) GC_OV2B_(bitxor)
GC_OV1_INT(bitnot) GC_OV1B_(bitnot)
GC_OV2_INT(shl)
GC_OV2_INT(shrarith)
GC_OV2_INT(shrlogical)

/* clamp: (x, lo, hi) in the computing type */
GC_OV_D float gc_clamp(float x, float lo, float hi) { return goblin__clamp_f32(x, lo, hi); }
GC_OV_D double gc_clamp(double x, double lo, double hi) { return goblin__clamp_f64(x, lo, hi); }
GC_OV_D int8_t gc_clamp(int8_t x, int8_t lo, int8_t hi) { return goblin__clamp_i8(x, lo, hi); }
GC_OV_D int16_t gc_clamp(int16_t x, int16_t lo, int16_t hi) { return goblin__clamp_i16(x, lo, hi); }
GC_OV_D int32_t gc_clamp(int32_t x, int32_t lo, int32_t hi) { return goblin__clamp_i32(x, lo, hi); }
GC_OV_D int64_t gc_clamp(int64_t x, int64_t lo, int64_t hi) { return goblin__clamp_i64(x, lo, hi); }
GC_OV_D uint8_t gc_clamp(uint8_t x, uint8_t lo, uint8_t hi) { return goblin__clamp_u8(x, lo, hi); }

/* Range of an integer computing type (for clamp bounds). */
template <typename T> struct gc_lim;
template <> struct gc_lim<int8_t> { static constexpr int64_t lo = INT8_MIN, hi = INT8_MAX; };
template <> struct gc_lim<int16_t> { static constexpr int64_t lo = INT16_MIN, hi = INT16_MAX; };
template <> struct gc_lim<int32_t> { static constexpr int64_t lo = INT32_MIN, hi = INT32_MAX; };
template <> struct gc_lim<int64_t> { static constexpr int64_t lo = INT64_MIN, hi = INT64_MAX; };
template <> struct gc_lim<uint8_t> { static constexpr int64_t lo = 0, hi = UINT8_MAX; };

/* ---- loads and stores with the reference's conversion rules ------------------
 * gc_ld_f: a float element as double (exact). gc_ld_i: an integer/bool element
 * as int64 (bool 0/1). gc_ld_u64: an integer/bool element as a 64-bit pattern,
 * sign-extended (u8 zero-extended), as ref_unary.c's load_u64. */
template <typename T> __host__ __device__ __forceinline__ double gc_ld_f(T x) {
    return (double)gc_ty<T>::load(x);
}
template <typename T> __host__ __device__ __forceinline__ int64_t gc_ld_i(T x) {
    return (int64_t)gc_ty<T>::load(x);
}
template <typename T> __device__ __forceinline__ uint64_t gc_ld_u64(T x) {
    return (uint64_t)(int64_t)gc_ty<T>::load(x);
}
template <> __device__ __forceinline__ uint64_t gc_ld_u64<uint8_t>(uint8_t x) { return x; }

/* double -> any dtype with ref_unary.c's store_f64 rules: one correct rounding
 * for floats (f16/bf16 through round-to-odd f32), truncation toward zero with
 * saturation for integers (NaN -> 0), nonzero (NaN included) for bool. */
template <typename O> __device__ __forceinline__ O gc_st_d(double v);
template <> __device__ __forceinline__ double gc_st_d<double>(double v) { return v; }
template <> __device__ __forceinline__ float gc_st_d<float>(double v) { return (float)v; }
template <> __device__ __forceinline__ gc_f16 gc_st_d<gc_f16>(double v) {
    gc_f16 r;
    r.bits = goblin__f32_to_f16(goblin__f64_to_f32_odd(v));
    return r;
}
template <> __device__ __forceinline__ gc_bf16 gc_st_d<gc_bf16>(double v) {
    gc_bf16 r;
    r.bits = goblin__f32_to_bf16(goblin__f64_to_f32_odd(v));
    return r;
}
template <> __device__ __forceinline__ gc_bool gc_st_d<gc_bool>(double v) {
    gc_bool r;
    r.v = v != 0;
    return r;
}
__device__ __forceinline__ double gc_sat(double v, double lo, double hi) {
    double t = trunc(v);
    return t > hi ? hi : t < lo ? lo : t;
}
template <> __device__ __forceinline__ int8_t gc_st_d<int8_t>(double v) {
    return v != v ? 0 : (int8_t)gc_sat(v, -128, 127);
}
template <> __device__ __forceinline__ int16_t gc_st_d<int16_t>(double v) {
    return v != v ? 0 : (int16_t)gc_sat(v, -32768, 32767);
}
template <> __device__ __forceinline__ int32_t gc_st_d<int32_t>(double v) {
    return v != v ? 0 : (int32_t)gc_sat(v, -2147483648.0, 2147483647.0);
}
template <> __device__ __forceinline__ uint8_t gc_st_d<uint8_t>(double v) {
    return v != v ? 0 : (uint8_t)gc_sat(v, 0, 255);
}
template <> __device__ __forceinline__ int64_t gc_st_d<int64_t>(double v) {
    if (v != v) return 0;
    double t = trunc(v);
    if (t >= 0x1p63) return INT64_MAX;
    if (t < -0x1p63) return INT64_MIN;
    return (int64_t)t;
}

/* 64-bit signed pattern -> any dtype with ref_unary.c's store_u64 rules:
 * integers truncate modulo 2^bits, floats round once (f16/bf16 via round-to-odd). */
template <typename O> __device__ __forceinline__ O gc_st_u64(uint64_t u);
template <> __device__ __forceinline__ double gc_st_u64<double>(uint64_t u) { return (double)(int64_t)u; }
template <> __device__ __forceinline__ float gc_st_u64<float>(uint64_t u) { return (float)(int64_t)u; }
template <> __device__ __forceinline__ gc_f16 gc_st_u64<gc_f16>(uint64_t u) {
    gc_f16 r;
    r.bits = goblin__f32_to_f16(goblin__i64_to_f32_odd((int64_t)u));
    return r;
}
template <> __device__ __forceinline__ gc_bf16 gc_st_u64<gc_bf16>(uint64_t u) {
    gc_bf16 r;
    r.bits = goblin__f32_to_bf16(goblin__i64_to_f32_odd((int64_t)u));
    return r;
}
template <> __device__ __forceinline__ gc_bool gc_st_u64<gc_bool>(uint64_t u) {
    gc_bool r;
    r.v = u != 0;
    return r;
}
template <> __device__ __forceinline__ int8_t gc_st_u64<int8_t>(uint64_t u) { return (int8_t)(uint8_t)u; }
template <> __device__ __forceinline__ int16_t gc_st_u64<int16_t>(uint64_t u) { return (int16_t)(uint16_t)u; }
template <> __device__ __forceinline__ int32_t gc_st_u64<int32_t>(uint64_t u) { return (int32_t)(uint32_t)u; }
template <> __device__ __forceinline__ int64_t gc_st_u64<int64_t>(uint64_t u) { return (int64_t)u; }
template <> __device__ __forceinline__ uint8_t gc_st_u64<uint8_t>(uint64_t u) { return (uint8_t)u; }

#endif
