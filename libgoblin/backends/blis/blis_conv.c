/* libgoblin/backends/blis/blis_conv.c - CONV2D_BACKWARD_INPUT and _WEIGHT on BLIS: gemms per
 * image or block of small images with im2col / col2im (the forward CONV2D is in
 * blis_gemm.c, beside the product it is made of). From the notes of the training kernels:
 * CONV2D_BACKWARD_INPUT (gemm W^T @ grad_out per image or per block of small images,
 * then col2im), CONV2D_BACKWARD_WEIGHT (im2col per image or block, grad_out @ col^T
 * accumulated over the images in order), SCALED_DOT_PRODUCT_ATTENTION and its backward (gemms per batch
 * item with the reference kernel's softmax and NaN rules; for small heads, L and S <= 128,
 * E and Ev <= 64, direct vectorized products instead of a BLIS call per tiny product). f32 and f64 only; other
 * dtypes return GOBLIN_ENOTSUP (the reference kernel runs).
 *
 * Determinism: as blis_gemm.c, a gemm is "small" (decided from m, n, k) and runs
 * BLIS's sup path on one thread, or runs the conventional path (sup disabled), which
 * never splits k and so gives the same bits on any number of threads; the gemms of
 * a block of images always run sup on one thread. Work split across threads is per
 * independent output block (image or block of images, batch item); sums over images
 * run sequentially in image order. So results do not depend on k->threads. */
#include <blis.h>
#include <math.h>
#include <string.h>
#include "base/alloc.h"
#include "blis_conv.h"
#include "blis_impl.h"
#include "kernels/expf.h"
#include "ops/nn.h"

#define COL_BUDGET ((int64_t)32 << 20)

static goblin_err oom(goblin__kctx *k, const char *what) {
    return goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory for %s scratch", what);
}

/* ---- im2col / col2im (rows oh in [oh0, oh1) of one image's channel group) ---------- */

/* When one image's K x P matrix is small, consecutive images share one gemm (their
 * columns side by side): up to this many bytes of im2col per block, a count fixed by
 * the shapes (never by the thread count), so results stay deterministic. Small enough
 * for the block to stay in cache (see blis_gemm.c). */
#define BATCH_COL_BUDGET ((int64_t)1 << 19)

/* ow in [lo, hi) reads inside the row for kernel column j: 0 <= ow*sw + off < W. */
static void col_range(const goblin__conv_geom *g, int64_t j, int64_t *off, int64_t *lo, int64_t *hi) {
    *off = j * g->dw - g->pw;
    int64_t l = *off >= 0 ? 0 : (-*off + g->sw - 1) / g->sw;
    int64_t h = g->w - *off <= 0 ? 0 : (g->w - *off + g->sw - 1) / g->sw;
    if (l > g->ow) l = g->ow;
    if (h > g->ow) h = g->ow;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

/* im2col_f32 / _f64 (and their same-width path): blis_gemm.c, declared in blis_impl.h. */

/* col2im for the same case. Small planes (padded within GC_PAD_MAX elements): per
 * channel, every (tap, output row) of col is added as one run of OW elements into a
 * zeroed, padded plane on the stack (no bounds per row), whose interior is then added to
 * dx. Larger planes: per (channel, tap) and output row inside the image, the col row's
 * run that falls inside the image added to the shifted input row. Each dx element
 * receives its terms in (c, i, j) order, one addition each, starting from +0 (the
 * callers zero dx first; a sum from +0 is never -0, so adding it to dx's +0 changes no
 * bit): the same bits as the general loop. Short vector runs (blis_conv.h). */
#define DEFINE_COL2IM_SAME(name, T, ADD)                                                        \
    GC_CLONES static bool name(const goblin__conv_geom *g, int64_t cg, T *col, T *dx, int64_t oh0,       \
                     int64_t oh1, int64_t ld) {                                                 \
        if (g->sh != 1 || g->sw != 1 || g->ow != g->w || oh0 != 0 || oh1 != g->oh) return false; \
        int64_t ow = g->ow, hw = g->h * g->w;                                                   \
        int64_t hp = g->oh + (g->kh - 1) * g->dh, wp = g->w + 2 * g->pw;                        \
        if (hp * wp <= GC_PAD_MAX) {                                                            \
            T pad[GC_PAD_MAX]; /* row pr, column pc: the terms of dx[pr - ph, pc - pw] */       \
            int64_t pr0 = g->ph, pr1 = g->ph + g->h < hp ? g->ph + g->h : hp;                   \
            for (int64_t c = 0; c < cg; c++) {                                                  \
                gc_zero(pad, (size_t)(hp * wp) * sizeof(T));                                    \
                for (int64_t i = 0; i < g->kh; i++)                                             \
                    for (int64_t j = 0; j < g->kw; j++) {                                       \
                        const T *row = col + ((c * g->kh + i) * g->kw + j) * ld;                \
                        T *p = pad + i * g->dh * wp + j * g->dw;                                \
                        for (int64_t r = 0; r < g->oh; r++) ADD(p + r * wp, row + r * ow, ow);  \
                    }                                                                           \
                for (int64_t pr = pr0; pr < pr1; pr++)                                          \
                    ADD(dx + c * hw + (pr - g->ph) * g->w, pad + pr * wp + g->pw, g->w);        \
            }                                                                                   \
            return true;                                                                        \
        }                                                                                       \
        for (int64_t c = 0; c < cg; c++)                                                        \
            for (int64_t i = 0; i < g->kh; i++)                                                 \
                for (int64_t j = 0; j < g->kw; j++) {                                           \
                    const T *row = col + ((c * g->kh + i) * g->kw + j) * ld;                    \
                    int64_t dwo = j * g->dw - g->pw, ih0 = i * g->dh - g->ph;                   \
                    int64_t zl = dwo < 0 ? -dwo : 0, zr = dwo > 0 ? ow - dwo : ow;              \
                    if (zl > ow) zl = ow;                                                       \
                    if (zr <= zl) continue;                                                     \
                    int64_t r0 = ih0 < 0 ? -ih0 : 0, r1 = g->h - ih0;                           \
                    if (r1 > g->oh) r1 = g->oh;                                                 \
                    for (int64_t r = r0; r < r1; r++)                                           \
                        ADD(dx + (c * hw + (r + ih0) * g->w + dwo + zl), row + r * ow + zl, zr - zl); \
                }                                                                               \
        return true;                                                                            \
    }

DEFINE_COL2IM_SAME(col2im_same_f32, float, gc_add_f32)
DEFINE_COL2IM_SAME(col2im_same_f64, double, gc_add_f64)

/* col rows are ld elements apart (ld >= (oh1 - oh0) * OW: several images side by side). */
#define DEFINE_COLS(sfx, T)                                                                     \
    /* dx[c, ih, iw] += col[(c, i, j), (oh - oh0, ow)], in (c, i, j, oh, ow) order */       \
    static void col2im_##sfx(const goblin__conv_geom *g, int64_t cg, T *col, T *dx,             \
                             int64_t oh0, int64_t oh1, int64_t ld) {                            \
        if (col2im_same_##sfx(g, cg, col, dx, oh0, oh1, ld)) return;                            \
        for (int64_t c = 0; c < cg; c++)                                                        \
            for (int64_t i = 0; i < g->kh; i++)                                                 \
                for (int64_t j = 0; j < g->kw; j++) {                                           \
                    const T *row = col + ((c * g->kh + i) * g->kw + j) * ld;                    \
                    int64_t off, lo, hi;                                                        \
                    col_range(g, j, &off, &lo, &hi);                                            \
                    for (int64_t oh = oh0; oh < oh1; oh++) {                                    \
                        int64_t ih = oh * g->sh - g->ph + i * g->dh;                            \
                        if (ih < 0 || ih >= g->h) continue;                                     \
                        const T *r = row + (oh - oh0) * g->ow;                                  \
                        T *xr = dx + (c * g->h + ih) * g->w + off;                              \
                        if (g->sw == 1)                                                         \
                            for (int64_t ow = lo; ow < hi; ow++) xr[ow] += r[ow];               \
                        else                                                                    \
                            for (int64_t ow = lo; ow < hi; ow++) xr[ow * g->sw] += r[ow];       \
                    }                                                                           \
                }                                                                               \
    }
DEFINE_COLS(f32, float)
DEFINE_COLS(f64, double)

/* ---- CONV2D_BACKWARD_INPUT / _WEIGHT ------------------------------------------- */

typedef struct cbwd_job {
    const goblin__conv_geom *g;
    goblin_dtype dt;
    int64_t es, cg, og, K, P, rows_per_block, items, nchunks;
    int64_t nb;             /* images per gemm (1: per image, in row blocks) */
    const char *go, *other; /* grad_out; weight (input grad) or x (weight grad) */
    char *out, *col;        /* col: nchunks scratch matrices of K x colw */
    char *gob;              /* nb > 1: nchunks scratch [og, nb * P] (grad_out of a block of images) */
    int64_t colw;           /* max(rows_per_block * OW, nb * P) */
    int32_t gemm_threads;
} cbwd_job;

/* gob [og, cnt * P] = grad_out of images [n0, n0 + cnt), group grp, side by side. */
static void gather_go(const cbwd_job *j, int64_t n0, int64_t cnt, int64_t grp, char *gob) {
    int64_t es = j->es, ld = cnt * j->P;
    for (int64_t b = 0; b < cnt; b++)
        for (int64_t r = 0; r < j->og; r++)
            memcpy(gob + (r * ld + b * j->P) * es, j->go + (((n0 + b) * j->g->o + grp * j->og + r) * j->P) * es,
                   (size_t)(j->P * es));
}

/* The input gradient of images [n0, n0 + cnt) (cnt > 1) of group grp: one gemm
 * col = W_g^T @ grad_out [K, cnt * P], then col2im per image. */
static void cbwd_input_block(const cbwd_job *j, int64_t n0, int64_t cnt, int64_t grp, char *col, char *gob) {
    const goblin__conv_geom *g = j->g;
    int64_t es = j->es, ld = cnt * j->P;
    gather_go(j, n0, cnt, grp, gob);
    const char *w = j->other + grp * j->og * j->K * es;
    goblin__blis_gemm_sup1(j->dt, j->K, ld, j->og, w, 1, j->K, gob, ld, 1, 0.0, col, ld, 1);
    for (int64_t b = 0; b < cnt; b++) {
        char *dx = j->out + ((n0 + b) * g->c + grp * j->cg) * g->h * g->w * es;
        memset(dx, 0, (size_t)(j->cg * g->h * g->w * es));
        if (j->dt == GOBLIN_DTYPE_F64)
            col2im_f64(g, j->cg, (double *)col + b * j->P, (double *)dx, 0, g->oh, ld);
        else col2im_f32(g, j->cg, (float *)col + b * j->P, (float *)dx, 0, g->oh, ld);
    }
}

/* The input gradient of one (image, group) item: zero the planes, then per row block
 * col = W_g^T @ grad_out block and col2im into dx. */
static void cbwd_input_item(const cbwd_job *j, int64_t it, char *col) {
    const goblin__conv_geom *g = j->g;
    int64_t n = it / g->groups, grp = it % g->groups, es = j->es;
    char *dx = j->out + (n * g->c + grp * j->cg) * g->h * g->w * es;
    memset(dx, 0, (size_t)(j->cg * g->h * g->w * es));
    const char *w = j->other + grp * j->og * j->K * es;
    const char *go = j->go + (n * g->o + grp * j->og) * j->P * es;
    for (int64_t oh0 = 0; oh0 < g->oh; oh0 += j->rows_per_block) {
        int64_t oh1 = oh0 + j->rows_per_block < g->oh ? oh0 + j->rows_per_block : g->oh;
        int64_t pb = (oh1 - oh0) * g->ow;
        /* [K, og] (W_g transposed) @ [og, pb] -> [K, pb] */
        goblin__blis_gemm_strided(j->dt, j->gemm_threads, j->K, pb, j->og, 1.0, w, 1, j->K, go + oh0 * g->ow * es, j->P, 1, 0.0,
             col, pb, 1);
        if (j->dt == GOBLIN_DTYPE_F64) col2im_f64(g, j->cg, (double *)col, (double *)dx, oh0, oh1, pb);
        else col2im_f32(g, j->cg, (float *)col, (float *)dx, oh0, oh1, pb);
    }
}

static void cbwd_input_chunk(void *arg, int64_t chunk) {
    const cbwd_job *j = arg;
    int64_t lo = chunk * j->items / j->nchunks, hi = (chunk + 1) * j->items / j->nchunks;
    char *col = j->col + chunk * j->K * j->colw * j->es;
    for (int64_t it = lo; it < hi; it++) {
        if (j->nb > 1) {
            int64_t blk = it / j->g->groups, grp = it % j->g->groups, n0 = blk * j->nb;
            int64_t cnt = n0 + j->nb < j->g->n ? j->nb : j->g->n - n0;
            cbwd_input_block(j, n0, cnt, grp, col, j->gob + chunk * j->og * j->nb * j->P * j->es);
        } else {
            cbwd_input_item(j, it, col);
        }
    }
}

/* The weight gradient of group grp: dW_g [og, K] = sum over blocks of images (in
 * order; nb > 1: one gemm over the block's gathered grad_out [og, cnt * P] and im2col
 * [K, cnt * P]) or, per image, over row blocks: grad_out block [og, pb] @ col^T [pb, K]. */
static void cbwd_weight_group(void *arg, int64_t grp) {
    const cbwd_job *j = arg;
    const goblin__conv_geom *g = j->g;
    int64_t es = j->es;
    char *col = j->col + grp * j->K * j->colw * es;
    char *dw = j->out + grp * j->og * j->K * es;
    bool first = true;
    if (j->nb > 1) {
        char *gob = j->gob + grp * j->og * j->nb * j->P * es;
        for (int64_t n0 = 0; n0 < g->n; n0 += j->nb) {
            int64_t cnt = n0 + j->nb < g->n ? j->nb : g->n - n0, ld = cnt * j->P;
            gather_go(j, n0, cnt, grp, gob);
            for (int64_t b = 0; b < cnt; b++) {
                const char *x = j->other + ((n0 + b) * g->c + grp * j->cg) * g->h * g->w * es;
                if (j->dt == GOBLIN_DTYPE_F64)
                    im2col_f64(g, j->cg, (const double *)x, (double *)col + b * j->P, 0, g->oh, ld);
                else im2col_f32(g, j->cg, (const float *)x, (float *)col + b * j->P, 0, g->oh, ld);
            }
            goblin__blis_gemm_sup1(j->dt, j->og, j->K, ld, gob, ld, 1, col, 1, ld, first ? 0.0 : 1.0, dw, j->K, 1);
            first = false;
        }
        return;
    }
    for (int64_t n = 0; n < g->n; n++) {
        const char *x = j->other + (n * g->c + grp * j->cg) * g->h * g->w * es;
        const char *go = j->go + (n * g->o + grp * j->og) * j->P * es;
        for (int64_t oh0 = 0; oh0 < g->oh; oh0 += j->rows_per_block) {
            int64_t oh1 = oh0 + j->rows_per_block < g->oh ? oh0 + j->rows_per_block : g->oh;
            int64_t pb = (oh1 - oh0) * g->ow;
            if (j->dt == GOBLIN_DTYPE_F64)
                im2col_f64(g, j->cg, (const double *)x, (double *)col, oh0, oh1, pb);
            else im2col_f32(g, j->cg, (const float *)x, (float *)col, oh0, oh1, pb);
            goblin__blis_gemm_strided(j->dt, j->gemm_threads, j->og, j->K, pb, 1.0, go + oh0 * g->ow * es, j->P, 1, col, 1, pb,
                 first ? 0.0 : 1.0, dw, j->K, 1);
            first = false;
        }
    }
}

static goblin_err blis_conv_bwd(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out) {
    (void)n_in;
    goblin_dtype dt = out->dtype;
    if (!goblin__blis_f32_or_f64(dt) || in[0].dtype != dt || in[1].dtype != dt) return GOBLIN_ENOTSUP;
    bool wgrad = node->op == GOBLIN_OP_CONV2D_BACKWARD_WEIGHT;
    goblin__conv_geom g;
    goblin_err e = goblin__conv_geom_get(node, wgrad ? in[1].shape : out->shape,
                                         wgrad ? out->shape : in[1].shape, &g, k->msg, k->cap);
    if (e) return e;
    int64_t total = goblin__numel(out);
    if (total == 0) return GOBLIN_OK;
    cbwd_job j;
    memset(&j, 0, sizeof j);
    j.g = &g;
    j.dt = dt;
    j.es = (int64_t)goblin_dtype_size(dt);
    j.cg = g.c / g.groups;
    j.og = g.o / g.groups;
    j.K = j.cg * g.kh * g.kw;
    j.P = g.oh * g.ow;
    j.go = in[0].data;
    j.other = in[1].data;
    j.out = out->data;
    int32_t threads = k->threads > 0 ? k->threads : 1;
    if (j.P == 0 || j.og == 0 || g.n == 0) { /* nothing flows back */
        memset(out->data, 0, (size_t)(total * j.es));
        return GOBLIN_OK;
    }
    int64_t row_bytes = j.K * g.ow * j.es;
    j.rows_per_block = row_bytes > 0 ? COL_BUDGET / row_bytes : g.oh;
    if (j.rows_per_block < 1) j.rows_per_block = 1;
    if (j.rows_per_block > g.oh) j.rows_per_block = g.oh;
    /* images per gemm: whole images whose im2col fits BATCH_COL_BUDGET together */
    j.nb = 1;
    if (j.rows_per_block == g.oh && j.K > 0) {
        j.nb = BATCH_COL_BUDGET / (j.K * j.P * j.es);
        if (j.nb > g.n) j.nb = g.n;
        if (j.nb < 1) j.nb = 1;
    }
    j.colw = j.nb > 1 ? j.nb * j.P : j.rows_per_block * g.ow;
    if (wgrad) {
        j.items = g.groups;
        j.nchunks = j.items;
    } else {
        j.items = j.nb > 1 ? (g.n + j.nb - 1) / j.nb * g.groups : g.n * g.groups;
        j.nchunks = threads > 1 && j.items > 1 ? (j.items < threads ? j.items : threads) : 1;
    }
    bool across = j.nchunks > 1 && threads > 1;
    j.gemm_threads = across ? 1 : threads;
    size_t bytes, gbytes = 0;
    if (!goblin__mul_size((size_t)(j.K * j.colw * j.es), (size_t)j.nchunks, &bytes) ||
        (j.nb > 1 && !goblin__mul_size((size_t)(j.og * j.nb * j.P * j.es), (size_t)j.nchunks, &gbytes)))
        return oom(k, "conv2d backward");
    void *col = goblin__alloc(bytes ? bytes : 1);
    if (!col) return oom(k, "conv2d backward");
    void *gob = NULL;
    if (gbytes && !(gob = goblin__alloc(gbytes))) {
        goblin__free(col);
        return oom(k, "conv2d backward");
    }
    j.col = col;
    j.gob = gob;
    if (wgrad) {
        if (across) goblin__parallel_for(threads, j.nchunks, cbwd_weight_group, &j);
        else
            for (int64_t grp = 0; grp < g.groups; grp++) cbwd_weight_group(&j, grp);
    } else {
        if (across) goblin__parallel_for(threads, j.nchunks, cbwd_input_chunk, &j);
        else cbwd_input_chunk(&j, 0);
    }
    goblin__free(gob);
    goblin__free(col);
    return GOBLIN_OK;
}

void goblin__blis_register_conv(goblin__kernel_fn *t) {
    goblin__blis_set(t, GOBLIN_OP_CONV2D_BACKWARD_INPUT, blis_conv_bwd);
    goblin__blis_set(t, GOBLIN_OP_CONV2D_BACKWARD_WEIGHT, blis_conv_bwd);
}
