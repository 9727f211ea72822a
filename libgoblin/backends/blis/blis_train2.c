/* libgoblin/backends/blis/blis_train2.c - more training hot spots on the CPU backend:
 * BATCH_NORM (training and eval) and BATCH_NORM_BACKWARD, MAX_POOL2D and its backward,
 * EMBEDDING_BACKWARD (f32 and f64; other dtypes return GOBLIN_ENOTSUP so the reference
 * kernel runs), and the pure copies PERMUTE, SLICE, PAD, RESHAPE and COPY (any dtype of
 * 1, 2, 4 or 8 bytes).
 *
 * Bits: every kernel does the reference kernel's arithmetic in the same order (f64
 * accumulators, row-major sums per channel / per output cell / per index), only with
 * typed loads instead of per-element dtype dispatch, so results are the reference's bits.
 * Threads take independent slices only (channels, planes, column blocks of the
 * embedding, chunks of a copy), so results do not depend on k->threads. */
#include <math.h>
#include <string.h>
#include "blis_impl.h"
#include "ops_nn.h"

#define MIN_PARALLEL_ELEMS 32768

static bool f32_or_f64(goblin_dtype dt) { return dt == GOBLIN_DTYPE_F32 || dt == GOBLIN_DTYPE_F64; }

static int32_t threads_for(const goblin__kctx *k, int64_t work, int64_t items) {
    int32_t t = k->threads > 0 ? k->threads : 1;
    if (work < MIN_PARALLEL_ELEMS) t = 1;
    if (items < t) t = items > 0 ? (int32_t)items : 1;
    return t;
}

/* ---- batch norm ---------------------------------------------------------- */

typedef struct bn_job {
    const goblin_tensor *in;
    goblin_tensor *out;
    int64_t n, c, sp;
    bool training;
    double eps;
    int64_t which; /* backward: 0 dx, 1 dweight, 2 dbias */
} bn_job;

/* Channel statistics exactly as the reference: sum, mean, then sum of squared
 * deviations, each in row-major (image, position) order. */
#define BN_STATS(T, X, j, ch, mean, var, mi, vi)                                            \
    do {                                                                                     \
        if ((j)->training) {                                                                 \
            double cnt_ = (double)((j)->n * (j)->sp), acc_ = 0, m2_ = 0;                     \
            for (int64_t i_ = 0; i_ < (j)->n; i_++) {                                        \
                const T *p_ = (X) + (i_ * (j)->c + (ch)) * (j)->sp;                          \
                for (int64_t q_ = 0; q_ < (j)->sp; q_++) acc_ += (double)p_[q_];             \
            }                                                                                \
            mean = acc_ / cnt_;                                                              \
            for (int64_t i_ = 0; i_ < (j)->n; i_++) {                                        \
                const T *p_ = (X) + (i_ * (j)->c + (ch)) * (j)->sp;                          \
                for (int64_t q_ = 0; q_ < (j)->sp; q_++) {                                   \
                    double d_ = (double)p_[q_] - mean;                                       \
                    m2_ += d_ * d_;                                                          \
                }                                                                            \
            }                                                                                \
            var = m2_ / cnt_;                                                                \
        } else {                                                                             \
            mean = (double)((const T *)(j)->in[mi].data)[ch];                                \
            var = (double)((const T *)(j)->in[vi].data)[ch];                                 \
        }                                                                                    \
    } while (0)

#define BN_FWD(T, NAME)                                                                       \
    static void NAME(void *arg, int64_t ch) {                                                 \
        const bn_job *j = arg;                                                                \
        const T *x = j->in[0].data;                                                           \
        T *y = j->out->data;                                                                  \
        double mean, var;                                                                     \
        BN_STATS(T, x, j, ch, mean, var, 3, 4);                                               \
        double rstd = 1.0 / sqrt(var + j->eps);                                               \
        double w = (double)((const T *)j->in[1].data)[ch], b = (double)((const T *)j->in[2].data)[ch]; \
        for (int64_t i = 0; i < j->n; i++) {                                                  \
            int64_t o = (i * j->c + ch) * j->sp;                                              \
            for (int64_t q = 0; q < j->sp; q++) y[o + q] = (T)(((double)x[o + q] - mean) * rstd * w + b); \
        }                                                                                     \
    }
BN_FWD(float, bn_fwd_f32)
BN_FWD(double, bn_fwd_f64)

#define BN_BWD(T, NAME)                                                                       \
    static void NAME(void *arg, int64_t ch) {                                                 \
        const bn_job *j = arg;                                                                \
        const T *go = j->in[0].data, *x = j->in[1].data;                                      \
        T *y = j->out->data;                                                                  \
        double mean, var;                                                                     \
        BN_STATS(T, x, j, ch, mean, var, 3, 4);                                               \
        double rstd = 1.0 / sqrt(var + j->eps);                                               \
        double wv = (double)((const T *)j->in[2].data)[ch];                                   \
        double m = (double)(j->n * j->sp), sdy = 0, sdyx = 0;                                 \
        for (int64_t i = 0; i < j->n; i++) {                                                  \
            int64_t o = (i * j->c + ch) * j->sp;                                              \
            for (int64_t q = 0; q < j->sp; q++) {                                             \
                double dy = (double)go[o + q];                                                \
                sdy += dy;                                                                    \
                sdyx += dy * ((double)x[o + q] - mean) * rstd;                                \
            }                                                                                 \
        }                                                                                     \
        if (j->which == 1) {                                                                  \
            y[ch] = (T)sdyx;                                                                  \
        } else if (j->which == 2) {                                                           \
            y[ch] = (T)sdy;                                                                   \
        } else {                                                                              \
            for (int64_t i = 0; i < j->n; i++) {                                              \
                int64_t o = (i * j->c + ch) * j->sp;                                          \
                for (int64_t q = 0; q < j->sp; q++) {                                         \
                    double dy = (double)go[o + q], r;                                         \
                    if (j->training) {                                                        \
                        double xh = ((double)x[o + q] - mean) * rstd;                         \
                        r = wv * rstd / m * (m * dy - sdy - xh * sdyx);                       \
                    } else {                                                                  \
                        r = dy * wv * rstd;                                                   \
                    }                                                                         \
                    y[o + q] = (T)r;                                                          \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }
BN_BWD(float, bn_bwd_f32)
BN_BWD(double, bn_bwd_f64)

static goblin_err blis_batch_norm(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                  int32_t n_in, goblin_tensor *out) {
    bool bwd = node->op == GOBLIN_OP_BATCH_NORM_BACKWARD;
    const goblin_tensor *x = &in[bwd ? 1 : 0];
    goblin_dtype dt = x->dtype;
    if (!f32_or_f64(dt) || n_in != 5 || x->rank < 2) return GOBLIN_ENOTSUP;
    for (int32_t i = 0; i < 5; i++)
        if (in[i].dtype != dt) return GOBLIN_ENOTSUP;
    bn_job j = {in, out, x->shape[0], x->shape[1], 1, goblin__attr_i(node, GOBLIN_ATTR_TRAINING, 0) != 0,
                goblin__attr_f(node, GOBLIN_ATTR_EPS, 1e-5), goblin__attr_i(node, GOBLIN_ATTR_INDEX, 0)};
    for (int32_t d = 2; d < x->rank; d++) j.sp *= x->shape[d];
    int32_t t = threads_for(k, goblin__numel(x), j.c);
    void (*fn)(void *, int64_t) = bwd ? (dt == GOBLIN_DTYPE_F64 ? bn_bwd_f64 : bn_bwd_f32)
                                      : (dt == GOBLIN_DTYPE_F64 ? bn_fwd_f64 : bn_fwd_f32);
    goblin__parallel_for(t, j.c, fn, &j);
    return GOBLIN_OK;
}

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

static goblin_err blis_max_pool(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out) {
    bool bwd = node->op == GOBLIN_OP_MAX_POOL2D_BACKWARD;
    const goblin_tensor *x = &in[bwd ? 1 : 0];
    goblin_dtype dt = x->dtype;
    if (!f32_or_f64(dt) || (bwd && (n_in != 2 || in[0].dtype != dt))) return GOBLIN_ENOTSUP;
    pool_job j;
    memset(&j, 0, sizeof j);
    goblin_err e = goblin__pool_geom_get(node, x->rank, x->shape, &j.g, k->msg, k->cap);
    if (e) return e;
    j.in = in;
    j.out = out;
    int64_t work = goblin__numel(x) + goblin__numel(out);
    if (!bwd) {
        goblin__parallel_for(threads_for(k, work, j.g.planes), j.g.planes,
                             dt == GOBLIN_DTYPE_F64 ? pool_fwd_f64 : pool_fwd_f32, &j);
        return GOBLIN_OK;
    }
    int32_t t = threads_for(k, work, j.g.planes);
    int64_t items = t;
    j.chunk = items > 0 ? (j.g.planes + items - 1) / items : 0;
    if (items == 0 || j.chunk == 0) return GOBLIN_OK;
    items = (j.g.planes + j.chunk - 1) / j.chunk;
    if (dt == GOBLIN_DTYPE_F32) {
        j.scratch = goblin__alloc((size_t)(items * j.g.h * j.g.w > 0 ? items * j.g.h * j.g.w : 1) * sizeof(double));
        if (!j.scratch) return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory for max_pool2d_backward scratch");
    }
    goblin__parallel_for(t, items, dt == GOBLIN_DTYPE_F64 ? pool_bwd_f64 : pool_bwd_f32, &j);
    goblin__free(j.scratch);
    return GOBLIN_OK;
}

/* ---- embedding backward ------------------------------------------------------- */

typedef struct emb_job {
    const int64_t *rows;
    const void *go;
    void *out;
    double *acc; /* f32: the [V, D] f64 accumulator */
    int64_t cnt, v, dim, block;
    bool f64;
} emb_job;

/* Columns [b*block, ...) of every row, indices in order: each element's sum runs in
 * the reference's order. */
static void emb_cols(void *arg, int64_t b) {
    const emb_job *j = arg;
    int64_t c0 = b * j->block, c1 = c0 + j->block;
    if (c1 > j->dim) c1 = j->dim;
    double *acc = j->f64 ? (double *)j->out : j->acc;
    for (int64_t r = 0; r < j->v; r++)
        for (int64_t c = c0; c < c1; c++) acc[r * j->dim + c] = 0;
    for (int64_t i = 0; i < j->cnt; i++) {
        double *a = acc + j->rows[i] * j->dim;
        if (j->f64) {
            const double *g = (const double *)j->go + i * j->dim;
            for (int64_t c = c0; c < c1; c++) a[c] += g[c];
        } else {
            const float *g = (const float *)j->go + i * j->dim;
            for (int64_t c = c0; c < c1; c++) a[c] += (double)g[c];
        }
    }
    if (!j->f64) {
        float *o = j->out;
        for (int64_t r = 0; r < j->v; r++)
            for (int64_t c = c0; c < c1; c++) o[r * j->dim + c] = (float)acc[r * j->dim + c];
    }
}

static goblin_err blis_emb_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    (void)node;
    const goblin_tensor *go = &in[0], *idx = &in[1];
    if (n_in != 2 || !f32_or_f64(go->dtype) || out->dtype != go->dtype || out->rank != 2) return GOBLIN_ENOTSUP;
    emb_job j = {NULL, go->data, out->data, NULL, goblin__numel(idx), out->shape[0], out->shape[1], 0,
                 go->dtype == GOBLIN_DTYPE_F64};
    int64_t *rows = goblin__alloc((size_t)(j.cnt > 0 ? j.cnt : 1) * sizeof(int64_t));
    if (!rows) return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory for embedding_backward");
    for (int64_t i = 0; i < j.cnt; i++) {
        int64_t r = goblin__load_i64(idx->dtype, idx->data, i);
        if (r < 0 || r >= j.v) {
            goblin__free(rows);
            return goblin__errf(k->msg, k->cap, GOBLIN_EINDEX, "index %lld at position %lld is outside [0, %lld)",
                                (long long)r, (long long)i, (long long)j.v);
        }
        rows[i] = r;
    }
    j.rows = rows;
    int64_t total = j.v * j.dim;
    if (total == 0) {
        goblin__free(rows);
        return GOBLIN_OK;
    }
    if (!j.f64) {
        j.acc = goblin__alloc((size_t)total * sizeof(double));
        if (!j.acc) {
            goblin__free(rows);
            return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory for embedding_backward");
        }
    }
    int64_t blocks = (j.dim + 15) / 16;
    int32_t t = threads_for(k, total + j.cnt * j.dim, blocks);
    j.block = (j.dim + t - 1) / t;
    goblin__parallel_for(t, (j.dim + j.block - 1) / j.block, emb_cols, &j);
    goblin__free(j.acc);
    goblin__free(rows);
    return GOBLIN_OK;
}

/* ---- copies ------------------------------------------------------------------ */

#define TILE 32

/* dst[i] = src[i] for the strided nd box @p shape (element strides, offsets in
 * elements already applied). */
typedef struct copy_job {
    size_t es;
    const char *src;
    char *dst;
    int32_t rank; /* coalesced; the last dim is the inner loop */
    int64_t shape[GOBLIN_MAX_RANK], ss[GOBLIN_MAX_RANK], ds[GOBLIN_MAX_RANK];
    int32_t tdim;   /* >= 0: tiled transpose over dims (tdim, last) */
    int64_t outer;  /* work rows: product of the dims before the last (tiled: tdim counted in tiles) */
    int64_t per;    /* rows per work item */
} copy_job;

#define ELEM_LOOP(T)                                                                  \
    for (int64_t q = 0; q < n; q++) ((T *)d)[q * dst_st] = ((const T *)s)[q * src_st]

static void copy_row(size_t es, const char *s, int64_t src_st, char *d, int64_t dst_st, int64_t n) {
    if (src_st == 1 && dst_st == 1) {
        memcpy(d, s, (size_t)n * es);
        return;
    }
    switch (es) {
    case 1: ELEM_LOOP(uint8_t); break;
    case 2: ELEM_LOOP(uint16_t); break;
    case 4: ELEM_LOOP(uint32_t); break;
    default: ELEM_LOOP(uint64_t); break;
    }
}

static void copy_rows(void *arg, int64_t w) {
    const copy_job *j = arg;
    int64_t r0 = w * j->per, r1 = r0 + j->per;
    if (r1 > j->outer) r1 = j->outer;
    if (r0 >= r1) return;
    int32_t L = j->rank - 1;
    int64_t es = (int64_t)j->es;
    /* the multi-index of row r0 over dims [0, L) (tdim counted in tiles) */
    int64_t cnt[GOBLIN_MAX_RANK], lim[GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < L; d++) lim[d] = d == j->tdim ? (j->shape[d] + TILE - 1) / TILE : j->shape[d];
    int64_t r = r0;
    for (int32_t d = L - 1; d >= 0; d--) {
        cnt[d] = r % lim[d];
        r /= lim[d];
    }
    for (int64_t row = r0; row < r1; row++) {
        int64_t so = 0, dof = 0;
        for (int32_t d = 0; d < L; d++) {
            int64_t c = d == j->tdim ? cnt[d] * TILE : cnt[d];
            so += c * j->ss[d];
            dof += c * j->ds[d];
        }
        const char *s = j->src + so * es;
        char *dp = j->dst + dof * es;
        if (j->tdim < 0) {
            copy_row(j->es, s, j->ss[L], dp, j->ds[L], j->shape[L]);
        } else {
            int64_t nt = j->shape[j->tdim] - cnt[j->tdim] * TILE;
            if (nt > TILE) nt = TILE;
            int64_t sa = j->ss[j->tdim], da = j->ds[j->tdim];
            for (int64_t c0 = 0; c0 < j->shape[L]; c0 += TILE) {
                int64_t nc = j->shape[L] - c0 < TILE ? j->shape[L] - c0 : TILE;
                for (int64_t a = 0; a < nt; a++)
                    copy_row(j->es, s + (a * sa + c0 * j->ss[L]) * es, j->ss[L], dp + (a * da + c0 * j->ds[L]) * es,
                             j->ds[L], nc);
            }
        }
        for (int32_t d = L - 1; d >= 0; d--) {
            if (++cnt[d] < lim[d]) break;
            cnt[d] = 0;
        }
    }
}

static void strided_copy(const goblin__kctx *k, size_t es, const void *src, int64_t soff, void *dst, int64_t doff,
                         int32_t rank, const int64_t *shape, const int64_t *ss, const int64_t *ds) {
    copy_job j;
    memset(&j, 0, sizeof j);
    j.es = es;
    j.src = (const char *)src + soff * (int64_t)es;
    j.dst = (char *)dst + doff * (int64_t)es;
    int64_t n = 1;
    for (int32_t d = 0; d < rank; d++) n *= shape[d];
    if (n == 0) return;
    /* drop size-1 dims, merge dims that are contiguous in both */
    for (int32_t d = 0; d < rank; d++) {
        if (shape[d] == 1) continue;
        int32_t r = j.rank;
        if (r > 0 && j.ss[r - 1] == ss[d] * shape[d] && j.ds[r - 1] == ds[d] * shape[d]) {
            j.shape[r - 1] *= shape[d];
            j.ss[r - 1] = ss[d];
            j.ds[r - 1] = ds[d];
            continue;
        }
        j.shape[r] = shape[d];
        j.ss[r] = ss[d];
        j.ds[r] = ds[d];
        j.rank++;
    }
    if (j.rank == 0) {
        j.rank = 1;
        j.shape[0] = 1;
        j.ss[0] = j.ds[0] = 1;
    }
    int32_t L = j.rank - 1;
    j.tdim = -1;
    if (j.ss[L] != 1 && j.ds[L] == 1 && j.shape[L] >= 4)
        for (int32_t d = 0; d < L; d++)
            if (j.ss[d] == 1 && j.shape[d] >= 4) j.tdim = d;
    j.outer = 1;
    for (int32_t d = 0; d < L; d++) j.outer *= d == j.tdim ? (j.shape[d] + TILE - 1) / TILE : j.shape[d];
    int32_t t = threads_for(k, n, j.outer);
    j.per = (j.outer + t - 1) / t;
    goblin__parallel_for(t, (j.outer + j.per - 1) / j.per, copy_rows, &j);
}

static bool copy_dtype_ok(goblin_dtype dt) {
    size_t es = goblin_dtype_size(dt);
    return es == 1 || es == 2 || es == 4 || es == 8;
}

static int32_t norm_axis(int64_t axis, int32_t rank) { return (int32_t)(axis < 0 ? axis + rank : axis); }

/* PERMUTE, SLICE, RESHAPE, COPY: a view of the input copied into the contiguous output
 * (the reference's views, ref_shape.c). */
static goblin_err blis_view_copy(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                 int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    if (!copy_dtype_ok(out->dtype) || in[0].dtype != out->dtype) return GOBLIN_ENOTSUP;
    const goblin_tensor *x = &in[0];
    int32_t rank = x->rank;
    int64_t shape[GOBLIN_MAX_RANK], ss[GOBLIN_MAX_RANK], ds[GOBLIN_MAX_RANK], off = 0;
    for (int32_t d = 0; d < rank; d++) {
        shape[d] = x->shape[d];
        ss[d] = x->strides[d];
    }
    if (node->op == GOBLIN_OP_PERMUTE) {
        int32_t np;
        const int64_t *p = goblin__attr_ints(node, GOBLIN_ATTR_PERM, &np);
        if (np != rank) return GOBLIN_ENOTSUP;
        for (int32_t d = 0; d < rank; d++) {
            int32_t a = norm_axis(p[d], rank);
            if (a < 0 || a >= rank) return GOBLIN_ENOTSUP;
            shape[d] = x->shape[a];
            ss[d] = x->strides[a];
        }
    } else if (node->op == GOBLIN_OP_SLICE) {
        int32_t na, ns, np;
        const int64_t *axes = goblin__attr_ints(node, GOBLIN_ATTR_AXES, &na);
        const int64_t *starts = goblin__attr_ints(node, GOBLIN_ATTR_STARTS, &ns);
        const int64_t *steps = goblin__attr_ints(node, GOBLIN_ATTR_STEPS, &np);
        if (out->rank != rank) return GOBLIN_ENOTSUP;
        for (int32_t i = 0; i < ns; i++) {
            int32_t a = norm_axis(axes ? axes[i] : i, rank);
            int64_t dim = x->shape[a], b = starts[i];
            if (b < 0) b = b + dim < 0 ? 0 : b + dim;
            if (b > dim) b = dim;
            shape[a] = out->shape[a];
            if (shape[a] == 0) continue;
            off += b * x->strides[a];
            ss[a] = shape[a] > 1 ? x->strides[a] * (np ? steps[i] : 1) : 0;
        }
    }
    goblin__contig_strides(rank, shape, ds);
    strided_copy(k, goblin_dtype_size(out->dtype), x->data, off, out->data, 0, rank, shape, ss, ds);
    return GOBLIN_OK;
}

typedef struct fill_job {
    size_t es;
    char *dst;
    char fill[8];
    int64_t n, per;
} fill_job;

static void fill_chunk(void *arg, int64_t w) {
    const fill_job *j = arg;
    int64_t i0 = w * j->per, i1 = i0 + j->per;
    if (i1 > j->n) i1 = j->n;
#define FILL_LOOP(T)                                      \
    do {                                                  \
        T v_;                                             \
        memcpy(&v_, j->fill, sizeof v_);                  \
        for (int64_t i = i0; i < i1; i++) ((T *)j->dst)[i] = v_; \
    } while (0)
    switch (j->es) {
    case 1: FILL_LOOP(uint8_t); break;
    case 2: FILL_LOOP(uint16_t); break;
    case 4: FILL_LOOP(uint32_t); break;
    default: FILL_LOOP(uint64_t); break;
    }
}

static goblin_err blis_pad(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in, int32_t n_in,
                           goblin_tensor *out) {
    (void)n_in;
    if (!copy_dtype_ok(out->dtype) || in[0].dtype != out->dtype || in[0].rank != out->rank) return GOBLIN_ENOTSUP;
    int32_t np;
    const int64_t *p = goblin__attr_ints(node, GOBLIN_ATTR_PADS, &np);
    fill_job f;
    memset(&f, 0, sizeof f);
    f.es = goblin_dtype_size(out->dtype);
    f.dst = out->data;
    double value = goblin__attr_f(node, GOBLIN_ATTR_VALUE, 0.0);
    if (goblin_dtype_is_int(out->dtype)) goblin__store_i64(out->dtype, f.fill, 0, (int64_t)value);
    else goblin__store_f64(out->dtype, f.fill, 0, value);
    f.n = goblin__numel(out);
    if (f.n == 0) return GOBLIN_OK;
    int32_t t = threads_for(k, f.n, f.n);
    f.per = (f.n + t - 1) / t;
    goblin__parallel_for(t, (f.n + f.per - 1) / f.per, fill_chunk, &f);

    const goblin_tensor *x = &in[0];
    int64_t shape[GOBLIN_MAX_RANK], ss[GOBLIN_MAX_RANK], soff = 0, doff = 0;
    for (int32_t d = 0; d < x->rank; d++) {
        shape[d] = x->shape[d];
        ss[d] = x->strides[d];
    }
    for (int32_t i = 0; i < np / 2; i++) {
        int32_t d = x->rank - 1 - i;
        int64_t before = p[2 * i], after = p[2 * i + 1];
        int64_t skip_in = before < 0 ? -before : 0, skip_in_end = after < 0 ? -after : 0;
        int64_t len = x->shape[d] - skip_in - skip_in_end;
        shape[d] = len > 0 ? len : 0;
        if (len <= 0) continue;
        soff += skip_in * x->strides[d];
        doff += (before > 0 ? before : 0) * out->strides[d];
    }
    strided_copy(k, f.es, x->data, soff, out->data, doff, x->rank, shape, ss, out->strides);
    return GOBLIN_OK;
}

void goblin__blis_register_train2(goblin__kernel_fn *t) {
    t[GOBLIN_OP_BATCH_NORM] = blis_batch_norm;
    t[GOBLIN_OP_BATCH_NORM_BACKWARD] = blis_batch_norm;
    t[GOBLIN_OP_MAX_POOL2D] = blis_max_pool;
    t[GOBLIN_OP_MAX_POOL2D_BACKWARD] = blis_max_pool;
    t[GOBLIN_OP_EMBEDDING_BACKWARD] = blis_emb_bwd;
    t[GOBLIN_OP_PERMUTE] = blis_view_copy;
    t[GOBLIN_OP_SLICE] = blis_view_copy;
    t[GOBLIN_OP_RESHAPE] = blis_view_copy;
    t[GOBLIN_OP_COPY] = blis_view_copy;
    t[GOBLIN_OP_PAD] = blis_pad;
}
