/* libgoblin/backends/blis/blis_pool.c - MAX_POOL2D and MAX_POOL2D_BACKWARD on the CPU backend. */
#pragma GCC diagnostic ignored "-Wpsabi" /* vector helpers are always inlined: no ABI */
#include <math.h>
#include <string.h>
#include "base/alloc.h"
#include "base/target_clones.h"
#include "blis_impl.h"
#include "ops/nn.h"

#define CLONES GOBLIN_TARGET_CLONES("avx2", "default")

typedef float v4f __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));


/* ---- max pooling ----------------------------------------------------------- */

typedef struct pool_job {
    goblin__pool_geom g;
    const goblin_tensor *in;
    goblin_tensor *out;
    int64_t chunk;  /* planes per work item (backward) */
    double *scratch; /* backward f32: one h*w f64 accumulator per work item */
} pool_job;

/* The forward selection of the reference: strictly greater keeps the first maximum,
 * a NaN wins and stops the scan. Sets *at (-1 for a window with no input cell). */
#define POOL_PICK(T, X, g, oh, ow, best, at)                                    \
    do {                                                                         \
        for (int64_t i_ = 0; i_ < (g)->kh; i_++) {                               \
            int64_t ih_ = (oh) * (g)->sh - (g)->ph + i_ * (g)->dh;               \
            if (ih_ < 0 || ih_ >= (g)->h) continue;                              \
            for (int64_t j_ = 0; j_ < (g)->kw; j_++) {                           \
                int64_t iw_ = (ow) * (g)->sw - (g)->pw + j_ * (g)->dw;           \
                if (iw_ < 0 || iw_ >= (g)->w) continue;                          \
                T v_ = (X)[ih_ * (g)->w + iw_];                                  \
                if (at < 0 || v_ > best || isnan(v_)) {                          \
                    best = v_;                                                   \
                    at = ih_ * (g)->w + iw_;                                     \
                }                                                                \
                if (isnan(best)) goto done_;                                     \
            }                                                                    \
        }                                                                        \
    done_:;                                                                      \
    } while (0)

#define POOL_FWD(T, NAME)                                                        \
    static void NAME(void *arg, int64_t p) {                                     \
        const pool_job *j = arg;                                                 \
        const goblin__pool_geom *g = &j->g;                                      \
        const T *X = (const T *)j->in[0].data + p * g->h * g->w;                 \
        T *Y = (T *)j->out->data + p * g->oh * g->ow;                            \
        for (int64_t oh = 0; oh < g->oh; oh++)                                   \
            for (int64_t ow = 0; ow < g->ow; ow++) {                             \
                T best = (T)-INFINITY;                                           \
                int64_t at = -1;                                                 \
                POOL_PICK(T, X, g, oh, ow, best, at);                            \
                Y[oh * g->ow + ow] = at < 0 ? (T)-INFINITY : best;               \
            }                                                                    \
    }
POOL_FWD(float, pool_fwd_f32)
POOL_FWD(double, pool_fwd_f64)

/* Gradients add in f64 in output order within a plane (the reference's order). */
#define POOL_BWD(T, NAME)                                                        \
    static void NAME(void *arg, int64_t c) {                                     \
        const pool_job *j = arg;                                                 \
        const goblin__pool_geom *g = &j->g;                                      \
        int64_t hw = g->h * g->w, p1 = (c + 1) * j->chunk;                       \
        if (p1 > g->planes) p1 = g->planes;                                      \
        for (int64_t p = c * j->chunk; p < p1; p++) {                            \
            const T *GO = (const T *)j->in[0].data + p * g->oh * g->ow;          \
            const T *X = (const T *)j->in[1].data + p * hw;                      \
            T *D = (T *)j->out->data + p * hw;                                   \
            double *acc = j->scratch ? j->scratch + c * hw : (double *)(void *)D; \
            for (int64_t i = 0; i < hw; i++) acc[i] = 0;                         \
            for (int64_t oh = 0; oh < g->oh; oh++)                               \
                for (int64_t ow = 0; ow < g->ow; ow++) {                         \
                    T best = (T)-INFINITY;                                       \
                    int64_t at = -1;                                             \
                    POOL_PICK(T, X, g, oh, ow, best, at);                        \
                    if (at >= 0) acc[at] += (double)GO[oh * g->ow + ow];         \
                }                                                                \
            if (j->scratch)                                                      \
                for (int64_t i = 0; i < hw; i++) D[i] = (T)acc[i];               \
        }                                                                        \
    }
POOL_BWD(float, pool_bwd_f32)
POOL_BWD(double, pool_bwd_f64)

/* 2x2 windows, stride 2, no padding or dilation, every window inside the plane (the
 * usual pooling): the same pick as POOL_PICK in the same order (the first of a tie, the
 * first NaN stops the scan), written as selects. */
#define PICK2(v, idx, best, at)                                                  \
    do {                                                                         \
        bool take_ = (v) > (best) || ((v) != (v) && (best) == (best));           \
        best = take_ ? (v) : (best);                                             \
        at = take_ ? (idx) : (at);                                               \
    } while (0)

static bool pool_2x2(const goblin__pool_geom *g) {
    return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0 && g->dh == 1 &&
           g->dw == 1 && 2 * g->oh <= g->h && 2 * g->ow <= g->w;
}

typedef int32_t v4i __attribute__((vector_size(16)));
typedef int64_t v4l __attribute__((vector_size(32)));
/* f32 takes 8 windows a step (one AVX2 register; two SSE halves in the default clone) */
typedef float v8f_p __attribute__((vector_size(32)));
typedef int32_t v8i_p __attribute__((vector_size(32)));
/* even / odd lanes of two vectors; the interleaves of two vectors, low and high halves */
#define P2_EV8 {0, 2, 4, 6, 8, 10, 12, 14}
#define P2_OD8 {1, 3, 5, 7, 9, 11, 13, 15}
#define P2_LO8 {0, 8, 1, 9, 2, 10, 3, 11}
#define P2_HI8 {4, 12, 5, 13, 6, 14, 7, 15}
#define P2_EV4 {0, 2, 4, 6}
#define P2_OD4 {1, 3, 5, 7}
#define P2_LO4 {0, 4, 1, 5}
#define P2_HI4 {2, 6, 3, 7}

/* A vector of windows at once: e/o are the even/odd columns of the two rows; the
 * selects are PICK2's (lanes of `at` hold 0..3). */
#define PICK2V(VT, VI, a, b, c, d, best, at)                                     \
    do {                                                                         \
        best = a;                                                                \
        at = (VI){0};                                                            \
        VT cand_[3] = {b, c, d};                                                 \
        for (int s_ = 0; s_ < 3; s_++) {                                         \
            VT v_ = cand_[s_];                                                   \
            VI take_ = (v_ > best) | ((v_ != v_) & (best == best));              \
            best = (VT)(((VI)v_ & take_) | ((VI)best & ~take_));                 \
            at = (at & ~take_) | (((VI){0} + (s_ + 1)) & take_);                 \
        }                                                                        \
    } while (0)

#define LDV(VT, p) ({ VT v_; memcpy(&v_, (p), sizeof v_); v_; })
#define STV(p, v) do { __typeof__(v) t_ = (v); memcpy((p), &t_, sizeof t_); } while (0)

/* One step of VL windows of output row y (columns from ow) from rows r0, r1. */
#define POOL2_FSTEP(VT, VI, VL, ev, od)                                          \
    do {                                                                         \
        VT a0 = LDV(VT, r0 + 2 * ow), a1 = LDV(VT, r0 + 2 * ow + VL);            \
        VT b0 = LDV(VT, r1 + 2 * ow), b1 = LDV(VT, r1 + 2 * ow + VL);            \
        VT best;                                                                 \
        VI at;                                                                   \
        PICK2V(VT, VI, __builtin_shuffle(a0, a1, ev), __builtin_shuffle(a0, a1, od), \
               __builtin_shuffle(b0, b1, ev), __builtin_shuffle(b0, b1, od), best, at); \
        (void)at;                                                                \
        STV(y + ow, best);                                                       \
    } while (0)

/* VL windows a step, then VL2 (f32: 8, then 4: a row of 4 windows, an 8x8 plane's,
 * still runs in a vector), then one at a time. */
#define POOL2_FWD(T, VT, VI, VL, EV, OD, VT2, VI2, VL2, EV2, OD2, NAME)          \
    static CLONES void NAME(void *arg, int64_t p) {                              \
        const pool_job *j = arg;                                                 \
        const goblin__pool_geom *g = &j->g;                                      \
        const T *X = (const T *)j->in[0].data + p * g->h * g->w;                 \
        T *Y = (T *)j->out->data + p * g->oh * g->ow;                            \
        const VI ev = EV, od = OD;                                               \
        const VI2 ev2 = EV2, od2 = OD2;                                          \
        for (int64_t oh = 0; oh < g->oh; oh++) {                                 \
            const T *r0 = X + 2 * oh * g->w, *r1 = r0 + g->w;                    \
            T *y = Y + oh * g->ow;                                               \
            int64_t ow = 0;                                                      \
            for (; ow + VL <= g->ow; ow += VL) POOL2_FSTEP(VT, VI, VL, ev, od);  \
            for (; ow + VL2 <= g->ow; ow += VL2) POOL2_FSTEP(VT2, VI2, VL2, ev2, od2); \
            for (; ow < g->ow; ow++) {                                           \
                T best = r0[2 * ow];                                             \
                int at = 0;                                                      \
                PICK2(r0[2 * ow + 1], 1, best, at);                              \
                PICK2(r1[2 * ow], 2, best, at);                                  \
                PICK2(r1[2 * ow + 1], 3, best, at);                              \
                (void)at;                                                        \
                y[ow] = best;                                                    \
            }                                                                    \
        }                                                                        \
    }
POOL2_FWD(float, v8f_p, v8i_p, 8, P2_EV8, P2_OD8, v4f, v4i, 4, P2_EV4, P2_OD4, pool2_fwd_f32)
POOL2_FWD(double, v4d, v4l, 4, P2_EV4, P2_OD4, v4d, v4l, 4, P2_EV4, P2_OD4, pool2_fwd_f64)

/* One backward step of VL windows: their gradients to the picked cells of rows d0, d1. */
#define POOL2_BSTEP(T, VT, VI, VL, ev, od, lo, hi)                               \
    do {                                                                         \
        const VI z = (VI){0}, one = z + 1, two = z + 2, three = z + 3;           \
        VT a0 = LDV(VT, r0 + 2 * ow), a1 = LDV(VT, r0 + 2 * ow + VL);            \
        VT b0 = LDV(VT, r1 + 2 * ow), b1 = LDV(VT, r1 + 2 * ow + VL);            \
        VT best;                                                                 \
        VI at;                                                                   \
        PICK2V(VT, VI, __builtin_shuffle(a0, a1, ev), __builtin_shuffle(a0, a1, od), \
               __builtin_shuffle(b0, b1, ev), __builtin_shuffle(b0, b1, od), best, at); \
        VI v = (VI)(LDV(VT, go + ow) + (T)0);                                    \
        VT e0 = (VT)(v & (at == z)), o0 = (VT)(v & (at == one));                 \
        VT e1 = (VT)(v & (at == two)), o1 = (VT)(v & (at == three));             \
        STV(d0 + 2 * ow, __builtin_shuffle(e0, o0, lo));                         \
        STV(d0 + 2 * ow + VL, __builtin_shuffle(e0, o0, hi));                    \
        STV(d1 + 2 * ow, __builtin_shuffle(e1, o1, lo));                         \
        STV(d1 + 2 * ow + VL, __builtin_shuffle(e1, o1, hi));                    \
    } while (0)

/* Windows do not overlap, so each input cell gets at most one gradient: 0 + g (the
 * reference's accumulator starts at +0, so -0 becomes +0; exact otherwise, also for
 * f32 through its f64 accumulator), 0 elsewhere. Steps as in the forward. */
#define POOL2_BWD(T, VT, VI, VL, EV, OD, LO, HI, VT2, VI2, VL2, EV2, OD2, LO2, HI2, NAME) \
    static CLONES void NAME(void *arg, int64_t c) {                              \
        const pool_job *j = arg;                                                 \
        const goblin__pool_geom *g = &j->g;                                      \
        int64_t hw = g->h * g->w, p1 = (c + 1) * j->chunk;                       \
        if (p1 > g->planes) p1 = g->planes;                                      \
        const VI ev = EV, od = OD, lo = LO, hi = HI;                             \
        const VI2 ev2 = EV2, od2 = OD2, lo2 = LO2, hi2 = HI2;                    \
        for (int64_t p = c * j->chunk; p < p1; p++) {                            \
            const T *GO = (const T *)j->in[0].data + p * g->oh * g->ow;          \
            const T *X = (const T *)j->in[1].data + p * hw;                      \
            T *D = (T *)j->out->data + p * hw;                                   \
            for (int64_t oh = 0; oh < g->oh; oh++) {                             \
                const T *r0 = X + 2 * oh * g->w, *r1 = r0 + g->w;                \
                T *d0 = D + 2 * oh * g->w, *d1 = d0 + g->w;                      \
                const T *go = GO + oh * g->ow;                                   \
                int64_t ow = 0;                                                  \
                for (; ow + VL <= g->ow; ow += VL) POOL2_BSTEP(T, VT, VI, VL, ev, od, lo, hi); \
                for (; ow + VL2 <= g->ow; ow += VL2) POOL2_BSTEP(T, VT2, VI2, VL2, ev2, od2, lo2, hi2); \
                for (; ow < g->ow; ow++) {                                       \
                    T best = r0[2 * ow];                                         \
                    int at = 0;                                                  \
                    PICK2(r0[2 * ow + 1], 1, best, at);                          \
                    PICK2(r1[2 * ow], 2, best, at);                              \
                    PICK2(r1[2 * ow + 1], 3, best, at);                          \
                    T v = go[ow] + (T)0;                                         \
                    d0[2 * ow] = at == 0 ? v : (T)0;                             \
                    d0[2 * ow + 1] = at == 1 ? v : (T)0;                         \
                    d1[2 * ow] = at == 2 ? v : (T)0;                             \
                    d1[2 * ow + 1] = at == 3 ? v : (T)0;                         \
                }                                                                \
                for (int64_t q = 2 * g->ow; q < g->w; q++) d0[q] = d1[q] = 0;    \
            }                                                                    \
            for (int64_t q = 2 * g->oh * g->w; q < hw; q++) D[q] = 0;            \
        }                                                                        \
    }
POOL2_BWD(float, v8f_p, v8i_p, 8, P2_EV8, P2_OD8, P2_LO8, P2_HI8, v4f, v4i, 4, P2_EV4, P2_OD4, P2_LO4, P2_HI4,
          pool2_bwd_f32)
POOL2_BWD(double, v4d, v4l, 4, P2_EV4, P2_OD4, P2_LO4, P2_HI4, v4d, v4l, 4, P2_EV4, P2_OD4, P2_LO4, P2_HI4,
          pool2_bwd_f64)

static goblin_err blis_max_pool(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out) {
    bool bwd = node->op == GOBLIN_OP_MAX_POOL2D_BACKWARD;
    const goblin_tensor *x = &in[bwd ? 1 : 0];
    goblin_dtype dt = x->dtype;
    if (!goblin__blis_f32_or_f64(dt) || (bwd && (n_in != 2 || in[0].dtype != dt))) return GOBLIN_ENOTSUP;
    pool_job j;
    memset(&j, 0, sizeof j);
    goblin_err e = goblin__pool_geom_get(node, x->rank, x->shape, &j.g, k->msg, k->cap);
    if (e) return e;
    j.in = in;
    j.out = out;
    int64_t work = goblin__numel(x) + goblin__numel(out);
    bool fast = pool_2x2(&j.g);
    if (!bwd) {
        void (*fn)(void *, int64_t) = fast ? (dt == GOBLIN_DTYPE_F64 ? pool2_fwd_f64 : pool2_fwd_f32)
                                           : (dt == GOBLIN_DTYPE_F64 ? pool_fwd_f64 : pool_fwd_f32);
        goblin__parallel_for(goblin__blis_threads_for(k, work, j.g.planes), j.g.planes, fn, &j);
        return GOBLIN_OK;
    }
    int32_t t = goblin__blis_threads_for(k, work, j.g.planes);
    int64_t items = t;
    j.chunk = items > 0 ? (j.g.planes + items - 1) / items : 0;
    if (items == 0 || j.chunk == 0) return GOBLIN_OK;
    items = (j.g.planes + j.chunk - 1) / j.chunk;
    if (fast) {
        goblin__parallel_for(t, items, dt == GOBLIN_DTYPE_F64 ? pool2_bwd_f64 : pool2_bwd_f32, &j);
        return GOBLIN_OK;
    }
    if (dt == GOBLIN_DTYPE_F32) {
        j.scratch = goblin__alloc((size_t)(items * j.g.h * j.g.w > 0 ? items * j.g.h * j.g.w : 1) * sizeof(double));
        if (!j.scratch) return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory for max_pool2d_backward scratch");
    }
    goblin__parallel_for(t, items, dt == GOBLIN_DTYPE_F64 ? pool_bwd_f64 : pool_bwd_f32, &j);
    goblin__free(j.scratch);
    return GOBLIN_OK;
}

void goblin__blis_register_pool(goblin__kernel_fn *t) {
    goblin__blis_set(t, GOBLIN_OP_MAX_POOL2D, blis_max_pool);
    goblin__blis_set(t, GOBLIN_OP_MAX_POOL2D_BACKWARD, blis_max_pool);
}
