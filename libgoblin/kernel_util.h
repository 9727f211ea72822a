/* libgoblin/kernel_util.h - small helpers shared by CPU kernels:
 * half-precision conversion, element load/store through double, strided and
 * broadcast iteration. Header-only (static inline) so kernels stay fast. */
#ifndef GOBLIN__KERNEL_UTIL_H
#define GOBLIN__KERNEL_UTIL_H

#include <math.h>
#include <string.h>
#include "backend_impl.h"

/* ---- f16 / bf16 <-> f32 (round to nearest even; NaN stays NaN) ----------- */

static inline float goblin__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
    } else {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t goblin__f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to 0 */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u); /* round to nearest even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float goblin__bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t goblin__f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* ---- generic element access (slow paths, reference loops) --------------- */

/* Load element @p i (an element offset, not bytes) of a buffer of dtype dt as double.
 * Exact for every dtype except i64 beyond 2^53. */
static inline double goblin__load_f64(goblin_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case GOBLIN_DTYPE_F32: return ((const float *)p)[i];
    case GOBLIN_DTYPE_F64: return ((const double *)p)[i];
    case GOBLIN_DTYPE_F16: return goblin__f16_to_f32(((const uint16_t *)p)[i]);
    case GOBLIN_DTYPE_BF16: return goblin__bf16_to_f32(((const uint16_t *)p)[i]);
    case GOBLIN_DTYPE_I8: return ((const int8_t *)p)[i];
    case GOBLIN_DTYPE_I16: return ((const int16_t *)p)[i];
    case GOBLIN_DTYPE_I32: return ((const int32_t *)p)[i];
    case GOBLIN_DTYPE_I64: return (double)((const int64_t *)p)[i];
    case GOBLIN_DTYPE_U8: return ((const uint8_t *)p)[i];
    case GOBLIN_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

/* Load as int64 (integers exactly; floats truncated toward zero, NaN -> 0). */
static inline int64_t goblin__load_i64(goblin_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case GOBLIN_DTYPE_I8: return ((const int8_t *)p)[i];
    case GOBLIN_DTYPE_I16: return ((const int16_t *)p)[i];
    case GOBLIN_DTYPE_I32: return ((const int32_t *)p)[i];
    case GOBLIN_DTYPE_I64: return ((const int64_t *)p)[i];
    case GOBLIN_DTYPE_U8: return ((const uint8_t *)p)[i];
    case GOBLIN_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: {
        double d = goblin__load_f64(dt, p, i);
        if (d != d) return 0;
        if (d >= 9.2233720368547758e18) return INT64_MAX;
        if (d <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)d;
    }
    }
}

/* Store a double into a float dtype (rounded) or an integer dtype (truncated and
 * wrapped modulo 2^bits like a C cast through int64; NaN -> 0). */
static inline void goblin__store_f64(goblin_dtype dt, void *p, int64_t i, double v) {
    switch (dt) {
    case GOBLIN_DTYPE_F32: ((float *)p)[i] = (float)v; break;
    case GOBLIN_DTYPE_F64: ((double *)p)[i] = v; break;
    case GOBLIN_DTYPE_F16: ((uint16_t *)p)[i] = goblin__f32_to_f16((float)v); break;
    case GOBLIN_DTYPE_BF16: ((uint16_t *)p)[i] = goblin__f32_to_bf16((float)v); break;
    case GOBLIN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: {
        int64_t x;
        if (v != v) x = 0;
        else if (v >= 9.2233720368547758e18) x = INT64_MAX;
        else if (v <= -9.2233720368547758e18) x = INT64_MIN;
        else x = (int64_t)v;
        switch (dt) {
        case GOBLIN_DTYPE_I8: ((int8_t *)p)[i] = (int8_t)x; break;
        case GOBLIN_DTYPE_I16: ((int16_t *)p)[i] = (int16_t)x; break;
        case GOBLIN_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)x; break;
        case GOBLIN_DTYPE_I64: ((int64_t *)p)[i] = x; break;
        case GOBLIN_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)x; break;
        default: break;
        }
    }
    }
}

static inline void goblin__store_i64(goblin_dtype dt, void *p, int64_t i, int64_t v) {
    switch (dt) {
    case GOBLIN_DTYPE_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case GOBLIN_DTYPE_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case GOBLIN_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case GOBLIN_DTYPE_I64: ((int64_t *)p)[i] = v; break;
    case GOBLIN_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case GOBLIN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: goblin__store_f64(dt, p, i, (double)v); break;
    }
}

/* ---- strided / broadcast iteration -------------------------------------- */

/* Strides of @p t aligned to an output of rank @p out_rank and shape @p out_shape:
 * leading missing dims and dims of size 1 that broadcast get stride 0. */
static inline void goblin__bcast_strides(const goblin_tensor *t, int32_t out_rank,
                                         const int64_t *out_shape, int64_t *strides) {
    int32_t off = out_rank - t->rank;
    for (int32_t d = 0; d < out_rank; d++) {
        int32_t td = d - off;
        if (td < 0 || (t->shape[td] == 1 && out_shape[d] != 1)) strides[d] = 0;
        else strides[d] = t->strides[td];
    }
}

/* An N-d counter over a shape, advancing up to 4 element offsets (one per operand)
 * with per-operand strides. Usage:
 *   goblin__nditer it; goblin__nditer_init(&it, rank, shape, 2, strides_tab);
 *   for (int64_t n = 0; n < numel; n++) { use it.off[0], it.off[1]; goblin__nditer_next(&it); } */
typedef struct goblin__nditer {
    int32_t rank, nops;
    int64_t shape[GOBLIN_MAX_RANK];
    int64_t idx[GOBLIN_MAX_RANK];
    int64_t strides[4][GOBLIN_MAX_RANK];
    int64_t off[4];
} goblin__nditer;

static inline void goblin__nditer_init(goblin__nditer *it, int32_t rank, const int64_t *shape,
                                       int32_t nops, int64_t (*strides)[GOBLIN_MAX_RANK]) {
    it->rank = rank;
    it->nops = nops;
    for (int32_t d = 0; d < rank; d++) {
        it->shape[d] = shape[d];
        it->idx[d] = 0;
    }
    for (int32_t o = 0; o < nops; o++) {
        it->off[o] = 0;
        for (int32_t d = 0; d < rank; d++) it->strides[o][d] = strides[o][d];
    }
}

/* Position the iterator at linear (row-major) element index @p linear. */
static inline void goblin__nditer_seek(goblin__nditer *it, int64_t linear) {
    for (int32_t o = 0; o < it->nops; o++) it->off[o] = 0;
    for (int32_t d = it->rank - 1; d >= 0; d--) {
        int64_t n = it->shape[d] ? it->shape[d] : 1;
        it->idx[d] = linear % n;
        linear /= n;
        for (int32_t o = 0; o < it->nops; o++) it->off[o] += it->idx[d] * it->strides[o][d];
    }
}

static inline void goblin__nditer_next(goblin__nditer *it) {
    for (int32_t d = it->rank - 1; d >= 0; d--) {
        it->idx[d]++;
        for (int32_t o = 0; o < it->nops; o++) it->off[o] += it->strides[o][d];
        if (it->idx[d] < it->shape[d]) return;
        for (int32_t o = 0; o < it->nops; o++) it->off[o] -= it->strides[o][d] * it->shape[d];
        it->idx[d] = 0;
    }
}

static inline int64_t goblin__numel(const goblin_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->rank; d++) n *= t->shape[d];
    return n;
}

#endif
