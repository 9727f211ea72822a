/* libgoblin/backends/blis/blis_copy.c - movement and indexing on the CPU backend: PERMUTE,
 * SLICE, RESHAPE and COPY as strided copies, PAD, and EMBEDDING_BACKWARD. */
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
    if (n_in != 2 || !goblin__blis_f32_or_f64(go->dtype) || out->dtype != go->dtype || out->rank != 2) return GOBLIN_ENOTSUP;
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
    int32_t t = goblin__blis_threads_for(k, total + j.cnt * j.dim, blocks);
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
        size_t b = (size_t)n * es;
        if (b <= 64) { /* a short row (an attention head's): inline, no library call */
            size_t q = 0;
            for (; q + 16 <= b; q += 16) memcpy(d + q, s + q, 16);
            for (; q < b; q++) d[q] = s[q];
            return;
        }
        memcpy(d, s, b);
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
        if (j->tdim < 0 && L > 0 && j->tdim != L - 1) {
            /* the rest of the innermost outer dim in one loop: offsets by its strides */
            int64_t run = lim[L - 1] - cnt[L - 1];
            if (run > r1 - row) run = r1 - row;
            int64_t sa = j->ss[L - 1] * es, da = j->ds[L - 1] * es;
            for (int64_t a = 0; a < run; a++) copy_row(j->es, s + a * sa, j->ss[L], dp + a * da, j->ds[L], j->shape[L]);
            row += run - 1;
            cnt[L - 1] += run - 1;
        } else if (j->tdim < 0) {
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
    int32_t t = goblin__blis_threads_for(k, n, j.outer);
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
    bool zero = true;
    for (size_t b = 0; b < j->es; b++) zero &= j->fill[b] == 0;
    if (zero) { /* +0.0 and integer 0: all bytes zero */
        memset(j->dst + i0 * (int64_t)j->es, 0, (size_t)(i1 - i0) * j->es);
        return;
    }
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
    int32_t t = goblin__blis_threads_for(k, f.n, f.n);
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

void goblin__blis_register_copy(goblin__kernel_fn *t) {
    goblin__blis_set(t, GOBLIN_OP_EMBEDDING_BACKWARD, blis_emb_bwd);
    goblin__blis_set(t, GOBLIN_OP_PERMUTE, blis_view_copy);
    goblin__blis_set(t, GOBLIN_OP_SLICE, blis_view_copy);
    goblin__blis_set(t, GOBLIN_OP_RESHAPE, blis_view_copy);
    goblin__blis_set(t, GOBLIN_OP_COPY, blis_view_copy);
    goblin__blis_set(t, GOBLIN_OP_PAD, blis_pad);
}
