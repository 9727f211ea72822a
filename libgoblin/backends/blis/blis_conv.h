/* libgoblin/backends/blis/blis_conv.h - short runs for im2col / col2im on small images
 * (blis_gemm.c, blis_conv.c): copy, zero and add n elements in 32-byte pieces and a
 * 16/8/4-byte tail, written out so that the compiler emits vector moves, never libc
 * calls. A row of an 8x8 plane is 8 floats; a memset/memcpy call per row (and GCC turns
 * short zeroing loops into memset calls) cost more than the moves themselves.
 * Copies and zeroing move bits; the adds are one IEEE addition per element, in place,
 * so the results are those of the plain loops. */
#ifndef GOBLIN_BLIS_CONV_H
#define GOBLIN_BLIS_CONV_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/target_clones.h"

/* d[0, bytes) = s[0, bytes); bytes a multiple of 4, no overlap */
static inline __attribute__((always_inline)) void gc_copy(void *restrict d, const void *restrict s,
                                                          size_t bytes) {
    char *dp = d;
    const char *sp = s;
    for (; bytes >= 32; bytes -= 32, dp += 32, sp += 32) memcpy(dp, sp, 32);
    if (bytes & 16) {
        memcpy(dp, sp, 16);
        dp += 16, sp += 16;
    }
    if (bytes & 8) {
        memcpy(dp, sp, 8);
        dp += 8, sp += 8;
    }
    if (bytes & 4) memcpy(dp, sp, 4);
}

/* d[0, bytes) = 0 (all bits); bytes a multiple of 4 */
static inline __attribute__((always_inline)) void gc_zero(void *d, size_t bytes) {
    char *dp = d;
    for (; bytes >= 32; bytes -= 32, dp += 32) memset(dp, 0, 32);
    if (bytes & 16) {
        memset(dp, 0, 16);
        dp += 16;
    }
    if (bytes & 8) {
        memset(dp, 0, 8);
        dp += 8;
    }
    if (bytes & 4) memset(dp, 0, 4);
}

/* 32-byte moves and adds in one instruction where the CPU has AVX2 (moves only: the
 * same bits on every clone) */
#define GC_CLONES GOBLIN_TARGET_CLONES("avx2", "default")

/* Planes up to this many elements are padded on the stack (im2col / col2im of small
 * images: 16 KB of f32, 32 KB of f64). */
#define GC_PAD_MAX 4096

/* rows runs of `bytes` each: d + r * ld_d = s + r * ld_s (element strides of T, given
 * as pointers' own types through the macro below); the common row sizes (4, 8, 16
 * floats) as constant-size moves */
#define gc_copy_rows(d, ldd, s, lds, rows, bytes)                                          \
    do {                                                                                   \
        __typeof__(d) d_ = (d);                                                            \
        __typeof__(s) s_ = (s);                                                            \
        int64_t n_ = (rows), ldd_ = (ldd), lds_ = (lds), b_ = (bytes);                     \
        if (b_ == 32)                                                                      \
            for (int64_t r_ = 0; r_ < n_; r_++) memcpy(d_ + r_ * ldd_, s_ + r_ * lds_, 32); \
        else if (b_ == 64)                                                                 \
            for (int64_t r_ = 0; r_ < n_; r_++) memcpy(d_ + r_ * ldd_, s_ + r_ * lds_, 64); \
        else if (b_ == 16)                                                                 \
            for (int64_t r_ = 0; r_ < n_; r_++) memcpy(d_ + r_ * ldd_, s_ + r_ * lds_, 16); \
        else                                                                               \
            for (int64_t r_ = 0; r_ < n_; r_++) gc_copy(d_ + r_ * ldd_, s_ + r_ * lds_, (size_t)b_); \
    } while (0)

typedef float gc_v8f __attribute__((vector_size(32)));
typedef double gc_v4d __attribute__((vector_size(32)));

/* y[q] += x[q] for q < n (no overlap): element by element, in vectors where they fit */
static inline __attribute__((always_inline)) void gc_add_f32(float *restrict y, const float *restrict x,
                                                             int64_t n) {
    int64_t q = 0;
    for (; q + 8 <= n; q += 8) {
        gc_v8f a, b;
        memcpy(&a, y + q, sizeof a);
        memcpy(&b, x + q, sizeof b);
        a += b;
        memcpy(y + q, &a, sizeof a);
    }
    for (; q < n; q++) y[q] += x[q];
}
static inline __attribute__((always_inline)) void gc_add_f64(double *restrict y, const double *restrict x,
                                                             int64_t n) {
    int64_t q = 0;
    for (; q + 4 <= n; q += 4) {
        gc_v4d a, b;
        memcpy(&a, y + q, sizeof a);
        memcpy(&b, x + q, sizeof b);
        a += b;
        memcpy(y + q, &a, sizeof a);
    }
    for (; q < n; q++) y[q] += x[q];
}

#endif
