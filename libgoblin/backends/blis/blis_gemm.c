/* libgoblin/backends/blis/blis_gemm.c - MATMUL and CONV2D on BLIS's typed API
 * (bli_sgemm_ex / bli_dgemm_ex with an rntm_t per call, never the process-wide
 * thread setting, so concurrent executors with different thread counts do not
 * interfere). f32 and f64 run in place on the caller's strides where BLIS accepts
 * them; f16/bf16 are widened to f32, multiplied and rounded once; integer dtypes
 * return GOBLIN_ENOTSUP (the executor runs the reference kernel).
 *
 * Determinism (same bits whatever k->threads is). Measured on BLIS 0.9.0 (zen3):
 * - The conventional gemm path packs A and B and never splits K, so its result is
 *   the same for every thread count (0 differences over 1800 random shapes and
 *   all transpose combinations at 1..4 threads).
 * - The small/unpacked ("sup") path is not: with A row-stored and B column-stored
 *   it uses dot-product ("rd") kernels and, when threaded, may pack instead and
 *   switch kernels, so 9 of 56 cases differed between 1 and 2..5 threads.
 * So a gemm is either "small" (decided from m, n, k only) and runs sup on ONE
 * thread, or runs the conventional path (sup disabled) on any number of threads.
 * Parallelism across batch items / images uses one-thread calls of the same kind,
 * which therefore give the same bits as the sequential, threaded calls. */
#include <blis.h>
#include "blis_conv.h"
#include "blis_impl.h"
#include "ops/nn.h"

/* m * n * k at or below which sup on one thread beats the conventional path on
 * two (measured: 64^3 88 vs 22 GF/s; 128^3 100 vs 136; 64x1024x27 43 vs 83). */
#define SMALL_WORK ((double)(1 << 20))

static bool is_half(goblin_dtype dt) { return dt == GOBLIN_DTYPE_F16 || dt == GOBLIN_DTYPE_BF16; }

bool goblin__blis_small_gemm(int64_t m, int64_t n, int64_t k) {
    return (double)m * (double)n * (double)k <= SMALL_WORK;
}

/* The BLIS runtime for one call: sup on one thread, or conventional on @p threads. */
void goblin__blis_rntm_for(rntm_t *r, bool small, int32_t threads) {
    bli_rntm_init(r);
    if (small) {
        bli_rntm_set_num_threads(1, r);
    } else {
        bli_rntm_set_num_threads(threads > 0 ? threads : 1, r);
        bli_rntm_disable_l3_sup(r);
    }
}

/* c = alpha * a @ b + beta * c, all m x n x k with element strides, in dt (F32/F64).
 * beta == 0 never reads c (BLIS overwrites it). */
static void gemm(goblin_dtype dt, const rntm_t *cfg, int64_t m, int64_t n, int64_t k, double alpha,
                 const void *a, int64_t rsa, int64_t csa, const void *b, int64_t rsb, int64_t csb,
                 double beta, void *c, int64_t rsc, int64_t csc) {
    rntm_t r = *cfg;
    if (dt == GOBLIN_DTYPE_F64) {
        double al = alpha, be = beta;
        bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &al, (double *)a, rsa, csa,
                     (double *)b, rsb, csb, &be, (double *)c, rsc, csc, NULL, &r);
    } else {
        float al = (float)alpha, be = (float)beta;
        bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &al, (float *)a, rsa, csa,
                     (float *)b, rsb, csb, &be, (float *)c, rsc, csc, NULL, &r);
    }
}

/* BLIS accepts row storage (cs 1, rs >= cols) or column storage (rs 1, cs >= rows),
 * and aborts the process on anything else (zero or overlapping strides). Strides of
 * size-1 dims are free, so set them to 1; report whether the result is accepted. */
static bool layout_ok(int64_t rows, int64_t cols, int64_t *rs, int64_t *cs) {
    if (rows <= 1) *rs = 1;
    if (cols <= 1) *cs = 1;
    if (*rs <= 0 || *cs <= 0) return false;
    if (rows == 1 || cols == 1) return true;
    return (*rs == 1 && *cs >= rows) || (*cs == 1 && *rs >= cols);
}

/* A contiguous copy of @p t (any strides) in dtype cdt (F32 or F64); NULL on ENOMEM. */
static void *contig_copy(const goblin_tensor *t, goblin_dtype cdt) {
    int64_t numel = goblin__numel(t);
    size_t esz = goblin_dtype_size(cdt), bytes;
    if (!goblin__mul_size((size_t)numel, esz, &bytes)) return NULL;
    void *dst = goblin__alloc(bytes);
    if (!dst) return NULL;
    int64_t st[4][GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < t->rank; d++) st[0][d] = t->strides[d];
    goblin__nditer it;
    goblin__nditer_init(&it, t->rank, t->shape, 1, st);
    if (t->dtype == cdt && cdt == GOBLIN_DTYPE_F32) {
        for (int64_t i = 0; i < numel; i++, goblin__nditer_next(&it))
            ((float *)dst)[i] = ((const float *)t->data)[it.off[0]];
    } else if (t->dtype == cdt && cdt == GOBLIN_DTYPE_F64) {
        for (int64_t i = 0; i < numel; i++, goblin__nditer_next(&it))
            ((double *)dst)[i] = ((const double *)t->data)[it.off[0]];
    } else { /* f16/bf16 -> f32: exact */
        for (int64_t i = 0; i < numel; i++, goblin__nditer_next(&it))
            goblin__store_f64(cdt, dst, i, goblin__load_f64(t->dtype, t->data, it.off[0]));
    }
    return dst;
}

static goblin_tensor contig_desc(const goblin_tensor *t, goblin_dtype dt, void *data) {
    goblin_tensor d = *t;
    d.dtype = dt;
    d.data = data;
    goblin__contig_strides(t->rank, t->shape, d.strides);
    return d;
}

/* Round the f32 scratch into a half-precision output (once, to nearest even). */
static void round_out(goblin_tensor *out, const float *src, int64_t numel) {
    uint16_t *dst = out->data;
    if (out->dtype == GOBLIN_DTYPE_F16)
        for (int64_t i = 0; i < numel; i++) dst[i] = goblin__f32_to_f16(src[i]);
    else
        for (int64_t i = 0; i < numel; i++) dst[i] = goblin__f32_to_bf16(src[i]);
}

/* ---- strided products shared by the conv and attention kernels ------------- */
/* Strides of size-1 dims are free for BLIS; it aborts on zero strides. */
void goblin__blis_fix_strides(int64_t rows, int64_t cols, int64_t *rs, int64_t *cs) {
    if (rows <= 1) *rs = 1;
    if (cols <= 1) *cs = 1;
}

/* c = alpha a @ b + beta c (m x n x k, element strides); beta 0 never reads c. The
 * runtime follows goblin__blis_small_gemm(m, n, k): sup on one thread, else @p threads. */
void goblin__blis_gemm_strided(goblin_dtype dt, int32_t threads, int64_t m, int64_t n, int64_t k, double alpha,
                 const void *a, int64_t rsa, int64_t csa, const void *b, int64_t rsb, int64_t csb,
                 double beta, void *c, int64_t rsc, int64_t csc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) { /* an empty sum: beta c (BLIS is not asked) */
        for (int64_t i = 0; i < m; i++)
            for (int64_t q = 0; q < n; q++) {
                if (dt == GOBLIN_DTYPE_F64) {
                    double *x = (double *)c + i * rsc + q * csc;
                    *x = beta == 0 ? 0 : beta * *x;
                } else {
                    float *x = (float *)c + i * rsc + q * csc;
                    *x = beta == 0 ? 0 : (float)beta * *x;
                }
            }
        return;
    }
    rntm_t r;
    goblin__blis_rntm_for(&r, goblin__blis_small_gemm(m, n, k), threads);
    goblin__blis_fix_strides(m, k, &rsa, &csa);
    goblin__blis_fix_strides(k, n, &rsb, &csb);
    goblin__blis_fix_strides(m, n, &rsc, &csc);
    if (dt == GOBLIN_DTYPE_F64) {
        double al = alpha, be = beta;
        bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &al, (double *)a, rsa, csa,
                     (double *)b, rsb, csb, &be, (double *)c, rsc, csc, NULL, &r);
    } else {
        float al = (float)alpha, be = (float)beta;
        bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &al, (float *)a, rsa, csa,
                     (float *)b, rsb, csb, &be, (float *)c, rsc, csc, NULL, &r);
    }
}

/* c = a @ b + beta c on BLIS's sup path on one thread whatever the size (m, n, k > 0):
 * for the skinny gemms of a block of images (few output channels, a short K), where
 * the conventional path's packing of the wide operand costs more than the product. */
void goblin__blis_gemm_sup1(goblin_dtype dt, int64_t m, int64_t n, int64_t k, const void *a, int64_t rsa,
                      int64_t csa, const void *b, int64_t rsb, int64_t csb, double beta, void *c, int64_t rsc,
                      int64_t csc) {
    rntm_t r;
    goblin__blis_rntm_for(&r, true, 1);
    goblin__blis_fix_strides(m, k, &rsa, &csa);
    goblin__blis_fix_strides(k, n, &rsb, &csb);
    goblin__blis_fix_strides(m, n, &rsc, &csc);
    if (dt == GOBLIN_DTYPE_F64) {
        double al = 1, be = beta;
        bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &al, (double *)a, rsa, csa, (double *)b, rsb,
                     csb, &be, (double *)c, rsc, csc, NULL, &r);
    } else {
        float al = 1, be = (float)beta;
        bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &al, (float *)a, rsa, csa, (float *)b, rsb,
                     csb, &be, (float *)c, rsc, csc, NULL, &r);
    }
}

/* ---- MATMUL -------------------------------------------------------------- */

typedef struct mm_job {
    const goblin__mm_geom *g;
    goblin_dtype cdt;
    size_t esz;
    const char *a, *b;
    char *c;
    double beta;
    rntm_t cfg;
} mm_job;

/* One big gemm (batch 1) on several threads: C's rows (or columns) in @p parts
 * contiguous ranges, each a one-thread conventional gemm. An element of C comes out
 * the same whichever range holds it (the conventional path never splits k by m or n),
 * so the split, which follows the thread count, does not change a bit. This beats
 * BLIS's own threading on a loaded machine: one barrier per call instead of one per
 * block. A row bias (bias_row, n elements) is written into the part's rows first. */
typedef struct mm_split {
    const mm_job *j;
    bool rows;
    int64_t extent, parts;
    const char *bias_row;
} mm_split;

static void mm_part(void *arg, int64_t part) {
    const mm_split *sp = arg;
    const mm_job *j = sp->j;
    const goblin__mm_geom *g = j->g;
    int64_t es = (int64_t)j->esz;
    int64_t lo = part * sp->extent / sp->parts, hi = (part + 1) * sp->extent / sp->parts;
    lo = lo / 8 * 8;
    hi = part + 1 == sp->parts ? sp->extent : hi / 8 * 8;
    if (hi <= lo) return;
    if (sp->rows) {
        char *c = j->c + lo * g->o_rs * es;
        if (sp->bias_row)
            for (int64_t r = lo; r < hi; r++)
                memcpy(j->c + r * g->o_rs * es, sp->bias_row, (size_t)(g->n * es));
        gemm(j->cdt, &j->cfg, hi - lo, g->n, g->k, g->alpha, j->a + lo * g->a_rs * es, g->a_rs,
             g->a_cs, j->b, g->b_rs, g->b_cs, j->beta, c, g->o_rs, g->o_cs);
    } else {
        gemm(j->cdt, &j->cfg, g->m, hi - lo, g->k, g->alpha, j->a, g->a_rs, g->a_cs,
             j->b + lo * g->b_cs * es, g->b_rs, g->b_cs, j->beta, j->c + lo * g->o_cs * es, g->o_rs,
             g->o_cs);
    }
}

static void mm_item(void *arg, int64_t bi) {
    const mm_job *j = arg;
    const goblin__mm_geom *g = j->g;
    int64_t st[4][GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < g->batch_rank; d++) {
        st[0][d] = g->a_bs[d];
        st[1][d] = g->b_bs[d];
        st[2][d] = g->o_bs[d];
    }
    goblin__nditer it;
    goblin__nditer_init(&it, g->batch_rank, g->batch_shape, 3, st);
    goblin__nditer_seek(&it, bi);
    gemm(j->cdt, &j->cfg, g->m, g->n, g->k, g->alpha, j->a + it.off[0] * (int64_t)j->esz, g->a_rs,
         g->a_cs, j->b + it.off[1] * (int64_t)j->esz, g->b_rs, g->b_cs, j->beta,
         j->c + it.off[2] * (int64_t)j->esz, g->o_rs, g->o_cs);
}

/* Fold trailing batch dims into m where B is the same matrix for every item and the
 * rows of A and of the output continue evenly from one item to the next (a linear
 * layer on [B, T, D] is one [B*T, D] gemm, not B small ones: B is packed once and
 * BLIS gets one big product to thread). A row's result does not depend on m (BLIS
 * never splits K by m), so this only changes which path runs, not its determinism. */
static void fold_batch(goblin__mm_geom *g) {
    while (g->batch_rank > 0) {
        int32_t d = g->batch_rank - 1;
        int64_t s = g->batch_shape[d];
        if (s != 1) {
            if (g->b_bs[d] != 0) return;
            int64_t ars = g->m == 1 ? g->a_bs[d] : g->a_rs, acs = g->a_cs;
            int64_t ors = g->m == 1 ? g->o_bs[d] : g->o_rs, ocs = g->o_cs;
            if (g->a_bs[d] != g->m * ars || g->o_bs[d] != g->m * ors) return;
            int64_t nm = g->m * s;
            if (!layout_ok(nm, g->k, &ars, &acs) || !layout_ok(nm, g->n, &ors, &ocs)) return;
            g->m = nm;
            g->a_rs = ars;
            g->a_cs = acs;
            g->o_rs = ors;
            g->o_cs = ocs;
        }
        g->batch /= s > 0 ? s : 1;
        g->batch_rank--;
    }
}

/* out[i] = c[broadcast i] for the contiguous output @p o; c a single row repeated (a
 * bias) goes row by row, anything else element by element. */
static void fill_c(goblin_dtype cdt, const goblin_tensor *c, const goblin_tensor *o, int64_t numel) {
    size_t es = goblin_dtype_size(cdt);
    int64_t cn = goblin__numel(c);
    int32_t lead = 0;
    while (lead < c->rank && c->shape[lead] == 1) lead++;
    bool row = goblin_tensor_is_contiguous(c) && c->rank - lead <= o->rank && cn > 0;
    for (int32_t d = lead; row && d < c->rank; d++)
        row = c->shape[d] == o->shape[o->rank - (c->rank - d)];
    if (row) {
        for (int64_t i = 0; i < numel; i += cn) memcpy((char *)o->data + (size_t)i * es, c->data, (size_t)cn * es);
        return;
    }
    int64_t st[4][GOBLIN_MAX_RANK];
    goblin__bcast_strides(c, o->rank, o->shape, st[0]);
    goblin__nditer it;
    goblin__nditer_init(&it, o->rank, o->shape, 1, st);
    if (cdt == GOBLIN_DTYPE_F64)
        for (int64_t i = 0; i < numel; i++, goblin__nditer_next(&it))
            ((double *)o->data)[i] = ((const double *)c->data)[it.off[0]];
    else
        for (int64_t i = 0; i < numel; i++, goblin__nditer_next(&it))
            ((float *)o->data)[i] = ((const float *)c->data)[it.off[0]];
}

/* small_gemm for the shapes of the same node in k->like (goblin_exec_params.shapes_like),
 * its operands taken as contiguous (a strided view that keeps a batch from folding here
 * may decide otherwise: then rows differ and a spot-check escalates, never misjudges). */
static bool like_small(const goblin__kctx *k, int32_t n_in, const goblin_tensor *in, const goblin_tensor *out) {
    const goblin__node *ln = &k->like->nodes[k->node_id];
    goblin_tensor lt[3], lo;
    for (int32_t i = 0; i < n_in && i < 3; i++) {
        const goblin__node *x = &k->like->nodes[ln->inputs[i]];
        goblin_tensor_init(&lt[i], in[i].dtype, x->rank, x->shape, in[i].data);
    }
    goblin_tensor_init(&lo, out->dtype, ln->rank, ln->shape, out->data);
    goblin__mm_geom lg;
    goblin__mm_geom_init(ln, lt, n_in, &lo, &lg);
    fold_batch(&lg);
    return goblin__blis_small_gemm(lg.m, lg.n, lg.k);
}

static goblin_err blis_matmul(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    goblin_dtype dt = out->dtype;
    if (dt != GOBLIN_DTYPE_F32 && dt != GOBLIN_DTYPE_F64 && !is_half(dt)) return GOBLIN_ENOTSUP;
    goblin_dtype cdt = dt == GOBLIN_DTYPE_F64 ? GOBLIN_DTYPE_F64 : GOBLIN_DTYPE_F32;
    size_t esz = goblin_dtype_size(cdt);
    int64_t numel = goblin__numel(out);
    if (numel == 0) return GOBLIN_OK;

    goblin_tensor v[3], o = *out;
    void *owned[4] = {NULL, NULL, NULL, NULL};
    goblin_err err = GOBLIN_OK;
    for (int32_t i = 0; i < n_in; i++) v[i] = in[i];
    goblin__mm_geom g;
    goblin__mm_geom_init(node, v, n_in, &o, &g);
    bool copy_a = is_half(dt) || !layout_ok(g.m, g.k, &g.a_rs, &g.a_cs);
    bool copy_b = is_half(dt) || !layout_ok(g.k, g.n, &g.b_rs, &g.b_cs);
    bool copy_c = is_half(dt) && n_in >= 3;
    bool copies[3] = {copy_a, copy_b, copy_c};
    for (int32_t i = 0; i < n_in; i++) {
        if (!copies[i]) continue;
        if (!(owned[i] = contig_copy(&v[i], cdt))) goto oom;
        v[i] = contig_desc(&v[i], cdt, owned[i]);
    }
    if (is_half(dt)) {
        size_t bytes;
        if (!goblin__mul_size((size_t)numel, sizeof(float), &bytes) || !(owned[3] = goblin__alloc(bytes)))
            goto oom;
        o = contig_desc(out, GOBLIN_DTYPE_F32, owned[3]);
    }
    if (copy_a || copy_b || is_half(dt)) {
        goblin__mm_geom_init(node, v, n_in, &o, &g);
        /* contiguous copies are always accepted; re-normalize size-1 strides */
        layout_ok(g.m, g.k, &g.a_rs, &g.a_cs);
        layout_ok(g.k, g.n, &g.b_rs, &g.b_cs);
    }
    int64_t ors = g.o_rs, ocs = g.o_cs;
    layout_ok(g.m, g.n, &ors, &ocs);
    g.o_rs = ors;
    g.o_cs = ocs;

    /* c (broadcast) goes into the output first; BLIS then accumulates on top of it. */
    int32_t threads = k->threads > 0 ? k->threads : 1;
    fold_batch(&g);
    bool small = goblin__blis_small_gemm(g.m, g.n, g.k);
    if (k->like) small = like_small(k, n_in, in, out);
    bool across = threads > 1 && g.batch > 1 && (small || g.batch >= threads);
    mm_split sp = {NULL, g.m >= g.n, g.m >= g.n ? g.m : g.n, threads, NULL};
    bool split = g.k > 0 && !small && !across && threads > 1 && g.batch == 1 && sp.extent >= 32 * threads;
    if (split && sp.rows && g.has_c && g.o_cs == 1 && g.o_rs == g.n && goblin_tensor_is_contiguous(&v[2]) &&
        goblin__numel(&v[2]) == g.n && v[2].shape[v[2].rank - 1] == g.n)
        sp.bias_row = v[2].data; /* a bias row: each part fills its own rows */
    if (g.has_c && !sp.bias_row) fill_c(cdt, &v[2], &o, numel);
    double beta = g.has_c ? g.beta : 0;

    if (g.k == 0) { /* an empty sum: beta * c, or 0 */
        for (int64_t i = 0; i < numel; i++) {
            double x = g.has_c ? beta * goblin__load_f64(cdt, o.data, i) : 0;
            goblin__store_f64(cdt, o.data, i, x);
        }
    } else {
        mm_job job = {&g, cdt, esz, v[0].data, v[1].data, o.data, beta, {0}};
        goblin__blis_rntm_for(&job.cfg, small, across || split ? 1 : threads);
        sp.j = &job;
        if (split) goblin__parallel_for(threads, sp.parts, mm_part, &sp);
        else if (across) goblin__parallel_for(threads, g.batch, mm_item, &job);
        else
            for (int64_t bi = 0; bi < g.batch; bi++) mm_item(&job, bi);
    }
    if (is_half(dt)) round_out(out, owned[3], numel);
    goto done;
oom:
    err = goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory for matmul scratch");
done:
    for (int32_t i = 0; i < 4; i++) goblin__free(owned[i]);
    return err;
}

/* ---- CONV2D: im2col + gemm per (block of images, group) ------------------- */

/* Scratch per worker for im2col: output rows are processed in blocks so that one
 * block's K x (rows * OW) matrix stays under this size. The block size depends on
 * the shapes only (never on the thread count), so results stay deterministic. */
#define COL_BUDGET ((int64_t)32 << 20)
/* When one image's K x P matrix is small, consecutive images share one gemm (their
 * columns side by side, the product then copied to the images' planes): up to this
 * many bytes of im2col per block, a count fixed by the shapes (deterministic). Kept
 * small: sup streams the unpacked col, so a block must stay in cache (measured: blocks
 * of 2 MB ran at half the speed of per-image gemms; 512 KB blocks made the CNN step of
 * examples/train_cnn.py 2-3% faster than per-image gemms, fewer BLIS calls). */
#define BATCH_COL_BUDGET ((int64_t)1 << 19)

typedef struct conv_job {
    const goblin__conv_geom *g;
    goblin_dtype cdt;
    size_t esz;
    const char *x, *w, *bias;
    char *o;
    char *col;       /* nchunks scratch matrices of kk x max(rows_per_block * OW, nb * P), or NULL (direct) */
    char *prod;      /* nb > 1: nchunks scratch products of og x (nb * P) */
    int64_t items, nchunks, K, P, cg, og, rows_per_block;
    int64_t nb;      /* images per gemm (1: per image, row blocks); items = ceil(n / nb) * groups */
    /* With im2col the bias rides in the gemm as one more term: w gets a column of
     * biases and col a row of ones (kk = K + 1). That saves a pass that would fill
     * the whole output with the bias before the gemm reads it back. */
    bool bias_in_k;
    int64_t kk;
    rntm_t cfg;
} conv_job;

/* im2col for stride 1 with OW == W ("same" width, the usual 3x3 / pad 1 case) over
 * all output rows. Small planes (the padded plane within GC_PAD_MAX elements): each
 * channel is copied once into a zero-bordered plane on the stack, then every (tap,
 * output row) is one run of W elements at a fixed offset: no bounds and no zeroing per
 * row (gc_copy_rows). Larger planes: per (channel, tap, output row) the shifted input
 * row, its columns outside the image 0, rows outside the image all 0. Short runs of
 * vector moves (blis_conv.h), no libc call per row. The same values as the general loop. */
#define DEFINE_IM2COL_SAME(name, T)                                                             \
    GC_CLONES bool name(const goblin__conv_geom *g, int64_t cg, const T *x, T *col, int64_t oh0,  \
                     int64_t oh1, int64_t ld) {                                                 \
        if (g->sh != 1 || g->sw != 1 || g->ow != g->w || oh0 != 0 || oh1 != g->oh) return false; \
        int64_t ow = g->ow, hw = g->h * g->w;                                                   \
        size_t es = sizeof(T);                                                                  \
        int64_t hp = g->oh + (g->kh - 1) * g->dh, wp = g->w + 2 * g->pw;                        \
        if (hp * wp <= GC_PAD_MAX) {                                                            \
            T pad[GC_PAD_MAX]; /* row pr, column pc: x[pr - ph, pc - pw] or 0 */                \
            gc_zero(pad, (size_t)(hp * wp) * es);                                               \
            int64_t pr0 = g->ph, pr1 = g->ph + g->h < hp ? g->ph + g->h : hp;                   \
            for (int64_t c = 0; c < cg; c++) {                                                  \
                if (pr1 > pr0)                                                                  \
                    gc_copy_rows(pad + pr0 * wp + g->pw, wp, x + c * hw, g->w, pr1 - pr0, g->w * (int64_t)es); \
                for (int64_t i = 0; i < g->kh; i++)                                             \
                    for (int64_t j = 0; j < g->kw; j++)                                         \
                        gc_copy_rows(col + ((c * g->kh + i) * g->kw + j) * ld, ow,              \
                                     pad + i * g->dh * wp + j * g->dw, wp, g->oh, ow * (int64_t)es); \
            }                                                                                   \
            return true;                                                                        \
        }                                                                                       \
        for (int64_t c = 0; c < cg; c++)                                                        \
            for (int64_t i = 0; i < g->kh; i++)                                                 \
                for (int64_t j = 0; j < g->kw; j++) {                                           \
                    T *row = col + ((c * g->kh + i) * g->kw + j) * ld;                          \
                    int64_t dwo = j * g->dw - g->pw, ih0 = i * g->dh - g->ph;                   \
                    /* columns [zl, zr) read inside the row */                                  \
                    int64_t zl = dwo < 0 ? -dwo : 0, zr = dwo > 0 ? ow - dwo : ow;              \
                    if (zl > ow) zl = ow;                                                       \
                    if (zr < zl) zr = zl;                                                       \
                    for (int64_t r = 0; r < g->oh; r++) {                                       \
                        T *d = row + r * ow;                                                    \
                        int64_t ih = r + ih0;                                                   \
                        if (ih < 0 || ih >= g->h) {                                             \
                            gc_zero(d, (size_t)ow * es);                                        \
                            continue;                                                           \
                        }                                                                       \
                        const T *s = x + (c * hw + ih * g->w + dwo + zl); /* column zl */       \
                        if (zl > 0) gc_zero(d, (size_t)zl * es);                                \
                        gc_copy(d + zl, s, (size_t)(zr - zl) * es);                             \
                        if (zr < ow) gc_zero(d + zr, (size_t)(ow - zr) * es);                   \
                    }                                                                           \
                }                                                                               \
        return true;                                                                            \
    }
DEFINE_IM2COL_SAME(goblin__im2col_same_f32, float)
DEFINE_IM2COL_SAME(goblin__im2col_same_f64, double)

/* col[(c, i, j), (oh - oh0, ow)] = x[c, oh*sh - ph + i*dh, ow*sw - pw + j*dw] for oh in
 * [oh0, oh1), 0 outside the image; col's rows are pb elements apart. */
#define DEFINE_IM2COL(name, same, T)                                                            \
    void name(const goblin__conv_geom *g, int64_t cg, const T *x, T *col, int64_t oh0,         \
              int64_t oh1, int64_t pb) {                                                        \
        if (same(g, cg, x, col, oh0, oh1, pb)) return;                                          \
        for (int64_t c = 0; c < cg; c++)                                                        \
            for (int64_t i = 0; i < g->kh; i++)                                                 \
                for (int64_t j = 0; j < g->kw; j++) {                                           \
                    T *row = col + ((c * g->kh + i) * g->kw + j) * pb;                          \
                    int64_t off = j * g->dw - g->pw;                                            \
                    /* ow in [lo, hi) reads inside the row: 0 <= ow*sw + off < W */             \
                    int64_t lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;                     \
                    int64_t hi = g->w - off <= 0 ? 0 : (g->w - off + g->sw - 1) / g->sw;        \
                    if (lo > g->ow) lo = g->ow;                                                 \
                    if (hi > g->ow) hi = g->ow;                                                 \
                    if (hi < lo) hi = lo;                                                       \
                    for (int64_t oh = oh0; oh < oh1; oh++) {                                    \
                        T *r = row + (oh - oh0) * g->ow;                                        \
                        int64_t ih = oh * g->sh - g->ph + i * g->dh;                            \
                        if (ih < 0 || ih >= g->h) {                                             \
                            for (int64_t ow = 0; ow < g->ow; ow++) r[ow] = 0;                   \
                            continue;                                                           \
                        }                                                                       \
                        const T *xr = x + (c * g->h + ih) * g->w + off;                         \
                        for (int64_t ow = 0; ow < lo; ow++) r[ow] = 0;                          \
                        if (g->sw == 1)                                                         \
                            for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[ow];                \
                        else                                                                    \
                            for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[ow * g->sw];        \
                        for (int64_t ow = hi; ow < g->ow; ow++) r[ow] = 0;                      \
                    }                                                                           \
                }                                                                               \
    }
DEFINE_IM2COL(goblin__im2col_f32, goblin__im2col_same_f32, float)
DEFINE_IM2COL(goblin__im2col_f64, goblin__im2col_same_f64, double)

/* Images [n0, n1) of group grp in one gemm: col [kk, cnt * P] (image b's columns at
 * b * P), prod = w_g @ col [og, cnt * P], then each image's rows copied to its planes. */
static void conv_block(const conv_job *j, int64_t n0, int64_t n1, int64_t grp, char *col, char *prod) {
    const goblin__conv_geom *g = j->g;
    int64_t es = (int64_t)j->esz, cnt = n1 - n0, ld = cnt * j->P;
    for (int64_t b = 0; b < cnt; b++) {
        const char *xin = j->x + (((n0 + b) * g->c + grp * j->cg) * g->h * g->w) * es;
        if (j->cdt == GOBLIN_DTYPE_F64)
            im2col_f64(g, j->cg, (const double *)xin, (double *)col + b * j->P, 0, g->oh, ld);
        else
            im2col_f32(g, j->cg, (const float *)xin, (float *)col + b * j->P, 0, g->oh, ld);
    }
    if (j->bias_in_k) {
        char *ones = col + j->K * ld * es;
        for (int64_t p = 0; p < ld; p++) {
            if (j->cdt == GOBLIN_DTYPE_F64) ((double *)ones)[p] = 1;
            else ((float *)ones)[p] = 1;
        }
    }
    const char *w = j->w + grp * j->og * j->kk * es;
    int64_t rsw = j->kk, csw = 1, rsb = ld, csb = 1, rso = ld, cso = 1;
    layout_ok(j->og, j->kk, &rsw, &csw);
    layout_ok(j->kk, ld, &rsb, &csb);
    layout_ok(j->og, ld, &rso, &cso);
    gemm(j->cdt, &j->cfg, j->og, ld, j->kk, 1.0, w, rsw, csw, col, rsb, csb, 0.0, prod, rso, cso);
    for (int64_t b = 0; b < cnt; b++)
        for (int64_t r = 0; r < j->og; r++)
            memcpy(j->o + (((n0 + b) * g->o + grp * j->og + r) * j->P) * es, prod + (r * ld + b * j->P) * es,
                   (size_t)(j->P * es));
}

static void conv_chunk(void *arg, int64_t chunk) {
    const conv_job *j = arg;
    const goblin__conv_geom *g = j->g;
    int64_t lo = chunk * j->items / j->nchunks, hi = (chunk + 1) * j->items / j->nchunks;
    int64_t es = (int64_t)j->esz;
    int64_t colw = j->nb > 1 ? j->nb * j->P : j->rows_per_block * g->ow;
    char *col = j->col ? j->col + chunk * j->kk * colw * es : NULL;
    for (int64_t it = lo; it < hi; it++) {
        int64_t n = it / g->groups, grp = it % g->groups;
        if (j->nb > 1) {
            int64_t n0 = n * j->nb, n1 = n0 + j->nb < g->n ? n0 + j->nb : g->n;
            conv_block(j, n0, n1, grp, col, j->prod + chunk * j->og * j->nb * j->P * es);
            continue;
        }
        const char *xin = j->x + ((n * g->c + grp * j->cg) * g->h * g->w) * es;
        const char *w = j->w + grp * j->og * j->kk * es;
        char *o = j->o + ((n * g->o + grp * j->og) * j->P) * es;
        double beta = 0;
        if (j->bias && !j->bias_in_k) { /* bias goes in first; gemm accumulates with beta = 1 */
            beta = 1;
            for (int64_t r = 0; r < j->og; r++) {
                int64_t oc = grp * j->og + r;
                if (j->cdt == GOBLIN_DTYPE_F64) {
                    double bv = ((const double *)j->bias)[oc];
                    for (int64_t p = 0; p < j->P; p++) ((double *)o)[r * j->P + p] = bv;
                } else {
                    float bv = ((const float *)j->bias)[oc];
                    for (int64_t p = 0; p < j->P; p++) ((float *)o)[r * j->P + p] = bv;
                }
            }
        }
        for (int64_t oh0 = 0; oh0 < g->oh; oh0 += j->rows_per_block) {
            int64_t oh1 = oh0 + j->rows_per_block < g->oh ? oh0 + j->rows_per_block : g->oh;
            int64_t pb = (oh1 - oh0) * g->ow;
            /* 1x1 / stride 1 / no padding: x itself is the K x P matrix (one block) */
            const char *b = xin;
            int64_t rsb = j->P, csb = 1;
            if (col) {
                if (j->cdt == GOBLIN_DTYPE_F64)
                    im2col_f64(g, j->cg, (const double *)xin, (double *)col, oh0, oh1, pb);
                else
                    im2col_f32(g, j->cg, (const float *)xin, (float *)col, oh0, oh1, pb);
                if (j->bias_in_k) {
                    char *ones = col + j->K * pb * es;
                    for (int64_t p = 0; p < pb; p++) {
                        if (j->cdt == GOBLIN_DTYPE_F64) ((double *)ones)[p] = 1;
                        else ((float *)ones)[p] = 1;
                    }
                }
                b = col;
                rsb = pb;
            }
            int64_t rsw = j->kk, csw = 1, rso = j->P, cso = 1;
            layout_ok(j->og, j->kk, &rsw, &csw);
            layout_ok(j->kk, pb, &rsb, &csb);
            layout_ok(j->og, pb, &rso, &cso);
            gemm(j->cdt, &j->cfg, j->og, pb, j->kk, 1.0, w, rsw, csw, b, rsb, csb, beta,
                 o + oh0 * g->ow * es, rso, cso);
        }
    }
}

static goblin_err blis_conv2d(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    goblin_dtype dt = out->dtype;
    if (dt != GOBLIN_DTYPE_F32 && dt != GOBLIN_DTYPE_F64 && !is_half(dt)) return GOBLIN_ENOTSUP;
    goblin__conv_geom g;
    goblin_err err = goblin__conv_geom_get(node, in[0].shape, in[1].shape, &g, k->msg, k->cap);
    if (err) return err;
    int64_t numel = goblin__numel(out);
    if (numel == 0) return GOBLIN_OK;
    goblin_dtype cdt = dt == GOBLIN_DTYPE_F64 ? GOBLIN_DTYPE_F64 : GOBLIN_DTYPE_F32;
    size_t esz = goblin_dtype_size(cdt);
    void *owned[7] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    const void *src[3] = {in[0].data, in[1].data, n_in >= 3 ? in[2].data : NULL};
    void *o = out->data;
    if (is_half(dt)) { /* widen inputs to f32 (exact), compute in f32, round once */
        for (int32_t i = 0; i < n_in; i++) {
            if (!(owned[i] = contig_copy(&in[i], cdt))) goto oom;
            src[i] = owned[i];
        }
        if (!(owned[3] = goblin__calloc((size_t)numel, sizeof(float)))) goto oom;
        o = owned[3];
    }
    conv_job j;
    memset(&j, 0, sizeof j);
    j.g = &g;
    j.cdt = cdt;
    j.esz = esz;
    j.x = src[0];
    j.w = src[1];
    j.bias = src[2];
    j.o = o;
    j.cg = g.c / g.groups;
    j.og = g.o / g.groups;
    j.K = j.cg * g.kh * g.kw;
    j.P = g.oh * g.ow;
    j.items = g.n * g.groups;
    if (j.K == 0) { /* no input channels: the output is the bias (or 0) */
        for (int64_t i = 0; i < numel; i++) {
            double bv = j.bias ? goblin__load_f64(cdt, j.bias, (i / j.P) % g.o) : 0;
            goblin__store_f64(cdt, o, i, bv);
        }
    } else if (j.og > 0) {
        int32_t threads = k->threads > 0 ? k->threads : 1;
        bool direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
        j.bias_in_k = j.bias && !direct;
        j.kk = j.K + (j.bias_in_k ? 1 : 0);
        if (j.bias_in_k) { /* [O, K + 1]: each weight row followed by its bias */
            size_t bytes;
            if (!goblin__mul_size((size_t)(g.o * j.kk), esz, &bytes) || !(owned[5] = goblin__alloc(bytes)))
                goto oom;
            for (int64_t oc = 0; oc < g.o; oc++) {
                memcpy((char *)owned[5] + (size_t)(oc * j.kk) * esz, j.w + (size_t)(oc * j.K) * esz,
                       (size_t)j.K * esz);
                memcpy((char *)owned[5] + (size_t)(oc * j.kk + j.K) * esz, j.bias + (size_t)oc * esz,
                       esz);
            }
            j.w = owned[5];
        }
        int64_t row_bytes = j.kk * g.ow * (int64_t)esz;
        j.rows_per_block = direct ? g.oh : COL_BUDGET / row_bytes;
        if (j.rows_per_block < 1) j.rows_per_block = 1;
        if (j.rows_per_block > g.oh) j.rows_per_block = g.oh;
        /* images per gemm: whole images whose im2col fits BATCH_COL_BUDGET together */
        j.nb = 1;
        if (!direct && j.rows_per_block == g.oh && j.P > 0) {
            int64_t img = j.kk * j.P * (int64_t)esz;
            j.nb = BATCH_COL_BUDGET / img;
            if (j.nb > g.n) j.nb = g.n;
            if (j.nb < 1) j.nb = 1;
        }
        if (j.nb > 1) j.items = (g.n + j.nb - 1) / j.nb * g.groups;
        /* a block of images is a skinny gemm (few output channels, a small K): BLIS's sup
         * path on one thread (no packing of the wide col), blocks spread across threads */
        bool small = j.nb > 1 || goblin__blis_small_gemm(j.og, j.rows_per_block * g.ow, j.kk);
        bool across = threads > 1 && j.items > 1 && (small || j.items >= threads);
        j.nchunks = across ? (j.items < threads ? j.items : threads) : 1;
        goblin__blis_rntm_for(&j.cfg, small, across ? 1 : threads);
        if (!direct) {
            size_t bytes;
            int64_t colw = j.nb > 1 ? j.nb * j.P : j.rows_per_block * g.ow;
            if (!goblin__mul_size((size_t)(j.kk * colw * (int64_t)esz), (size_t)j.nchunks, &bytes) ||
                !(owned[4] = goblin__alloc(bytes)))
                goto oom;
            j.col = owned[4];
        }
        if (j.nb > 1) {
            size_t bytes;
            if (!goblin__mul_size((size_t)(j.og * j.nb * j.P * (int64_t)esz), (size_t)j.nchunks, &bytes) ||
                !(owned[6] = goblin__alloc(bytes)))
                goto oom;
            j.prod = owned[6];
        }
        if (j.nchunks > 1) goblin__parallel_for(threads, j.nchunks, conv_chunk, &j);
        else conv_chunk(&j, 0);
    }
    if (is_half(dt)) round_out(out, owned[3], numel);
    goto done;
oom:
    err = goblin__errf(k->msg, k->cap, GOBLIN_ENOMEM, "out of memory for conv2d scratch");
done:
    for (int32_t i = 0; i < 7; i++) goblin__free(owned[i]);
    return err;
}

void goblin__blis_register_gemm(goblin__kernel_fn *t) {
    goblin__blis_set(t, GOBLIN_OP_MATMUL, blis_matmul);
    goblin__blis_set(t, GOBLIN_OP_CONV2D, blis_conv2d);
}
