/* libgoblin/kernels/element.h - load and store one element of any dtype through double or
 * int64 (the slow paths and reference loops). Header-only. */
#ifndef GOBLIN__KERNELS_ELEMENT_H
#define GOBLIN__KERNELS_ELEMENT_H

#include <math.h>
#include <goblin/dtype.h>
#include "half.h"

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

#endif
