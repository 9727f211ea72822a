/* libgoblin/backends/ref/ref_shape.c - reference kernels for the shape/movement
 * and indexing ops.
 *
 * Every movement op is "describe a strided view of the input, then copy that
 * view into the contiguous output"; inputs may have any strides (the ops carry
 * GOBLIN__OPF_STRIDED). Indexing kernels first check every index in row-major
 * order, so the first bad one is reported whatever the rest of the data, and
 * then move or accumulate elements in row-major order of the index, which makes
 * colliding writes deterministic. */
#include "backends/kernel_util.h"

/* A strided view: element offset of its first element, shape and strides. */
typedef struct view {
    int32_t rank;
    int64_t offset;
    int64_t shape[GOBLIN_MAX_RANK];
    int64_t strides[GOBLIN_MAX_RANK];
} view;

static view view_of(const goblin_tensor *t) {
    view v;
    v.rank = t->rank;
    v.offset = 0;
    for (int32_t d = 0; d < t->rank; d++) {
        v.shape[d] = t->shape[d];
        v.strides[d] = t->strides[d];
    }
    return v;
}

static int64_t shape_numel(int32_t rank, const int64_t *shape) {
    int64_t n = 1;
    for (int32_t d = 0; d < rank; d++) n *= shape[d];
    return n;
}

static inline void elem_copy(size_t es, char *dst, const char *src) {
    switch (es) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8); break;
    }
}

/* Copy view @p v of @p src into @p dst at element offset @p dst_off with
 * @p dst_strides (indexed like v's dims). */
static void copy_view(size_t es, const void *src, const view *v, void *dst, int64_t dst_off,
                      const int64_t *dst_strides) {
    int64_t n = shape_numel(v->rank, v->shape);
    if (n == 0) return;
    int64_t st[2][GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < v->rank; d++) {
        st[0][d] = v->strides[d];
        st[1][d] = dst_strides[d];
    }
    goblin__nditer it;
    goblin__nditer_init(&it, v->rank, v->shape, 2, st);
    const char *s = (const char *)src + v->offset * (int64_t)es;
    char *o = (char *)dst + dst_off * (int64_t)es;
    for (int64_t i = 0; i < n; i++) {
        elem_copy(es, o + it.off[1] * (int64_t)es, s + it.off[0] * (int64_t)es);
        goblin__nditer_next(&it);
    }
}

/* Copy @p v into the whole contiguous output, in v's row-major order. */
static goblin_err copy_to_out(const view *v, const void *src, goblin_tensor *out) {
    int64_t cs[GOBLIN_MAX_RANK];
    goblin__contig_strides(v->rank, v->shape, cs);
    copy_view(goblin_dtype_size(out->dtype), src, v, out->data, 0, cs);
    return GOBLIN_OK;
}

static int32_t norm_axis(int64_t axis, int32_t rank) {
    return (int32_t)(axis < 0 ? axis + rank : axis);
}

/* ---- movement ------------------------------------------------------------ */

/* RESHAPE and COPY: the output's row-major order is the input's. */
static goblin_err k_copy(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                         int32_t n_in, goblin_tensor *out) {
    view v = view_of(&in[0]);
    return copy_to_out(&v, in[0].data, out);
}

static goblin_err k_permute(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    int32_t n;
    const int64_t *p = goblin__attr_ints(node, GOBLIN_ATTR_PERM, &n);
    view v = view_of(&in[0]);
    for (int32_t d = 0; d < in[0].rank; d++) {
        int32_t a = norm_axis(p[d], in[0].rank);
        v.shape[d] = in[0].shape[a];
        v.strides[d] = in[0].strides[a];
    }
    return copy_to_out(&v, in[0].data, out);
}

static goblin_err k_expand(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    view v;
    v.rank = out->rank;
    v.offset = 0;
    for (int32_t d = 0; d < out->rank; d++) v.shape[d] = out->shape[d];
    goblin__bcast_strides(&in[0], out->rank, out->shape, v.strides);
    return copy_to_out(&v, in[0].data, out);
}

static goblin_err k_slice(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    int32_t na, ns, nt, np;
    const int64_t *axes = goblin__attr_ints(node, GOBLIN_ATTR_AXES, &na);
    const int64_t *starts = goblin__attr_ints(node, GOBLIN_ATTR_STARTS, &ns);
    const int64_t *stops = goblin__attr_ints(node, GOBLIN_ATTR_STOPS, &nt);
    const int64_t *steps = goblin__attr_ints(node, GOBLIN_ATTR_STEPS, &np);
    (void)stops;
    view v = view_of(&in[0]);
    for (int32_t i = 0; i < ns; i++) {
        int32_t a = norm_axis(axes ? axes[i] : i, in[0].rank);
        int64_t dim = in[0].shape[a], b = starts[i];
        if (b < 0) b = b + dim < 0 ? 0 : b + dim;
        if (b > dim) b = dim;
        v.shape[a] = out->shape[a]; /* inference already clamped the stop */
        if (v.shape[a] == 0) continue;
        v.offset += b * in[0].strides[a];
        /* a huge step only ever selects one element: keep the product in range */
        v.strides[a] = v.shape[a] > 1 ? in[0].strides[a] * (np ? steps[i] : 1) : 0;
    }
    return copy_to_out(&v, in[0].data, out);
}

/* A view of @p t with axis @p a narrowed to [start, start + len). */
static view narrow(const goblin_tensor *t, int32_t a, int64_t start, int64_t len) {
    view v = view_of(t);
    v.shape[a] = len;
    if (len > 0) v.offset += start * t->strides[a];
    return v;
}

static goblin_err k_select(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    int32_t a = norm_axis(goblin__attr_i(node, GOBLIN_ATTR_AXIS, 0), in[0].rank);
    int64_t idx = goblin__attr_i(node, GOBLIN_ATTR_INDEX, 0);
    if (idx < 0) idx += in[0].shape[a];
    view w = narrow(&in[0], a, idx, 1), v;
    v.rank = w.rank - 1;
    v.offset = w.offset;
    for (int32_t d = 0, o = 0; d < w.rank; d++)
        if (d != a) {
            v.shape[o] = w.shape[d];
            v.strides[o++] = w.strides[d];
        }
    return copy_to_out(&v, in[0].data, out);
}

static goblin_err k_split(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    int32_t a = norm_axis(goblin__attr_i(node, GOBLIN_ATTR_AXIS, 0), in[0].rank);
    int64_t chunks = goblin__attr_i(node, GOBLIN_ATTR_CHUNKS, 1);
    int64_t idx = goblin__attr_i(node, GOBLIN_ATTR_INDEX, 0), dim = in[0].shape[a];
    int64_t size = (dim + chunks - 1) / chunks;
    int64_t count = size ? (dim + size - 1) / size : chunks;
    if (idx < 0) idx += count;
    view v = narrow(&in[0], a, idx * size, out->shape[a]);
    return copy_to_out(&v, in[0].data, out);
}

static goblin_err k_concat(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    int32_t a = norm_axis(goblin__attr_i(node, GOBLIN_ATTR_AXIS, 0), out->rank);
    size_t es = goblin_dtype_size(out->dtype);
    int64_t pos = 0;
    for (int32_t i = 0; i < n_in; i++) {
        view v = view_of(&in[i]);
        copy_view(es, in[i].data, &v, out->data, pos * out->strides[a], out->strides);
        pos += in[i].shape[a];
    }
    return GOBLIN_OK;
}

static goblin_err k_stack(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    int32_t a = norm_axis(goblin__attr_i(node, GOBLIN_ATTR_AXIS, 0), out->rank);
    size_t es = goblin_dtype_size(out->dtype);
    int64_t dst[GOBLIN_MAX_RANK];
    for (int32_t d = 0, o = 0; d < out->rank; d++)
        if (d != a) dst[o++] = out->strides[d];
    for (int32_t i = 0; i < n_in; i++) {
        view v = view_of(&in[i]);
        copy_view(es, in[i].data, &v, out->data, i * out->strides[a], dst);
    }
    return GOBLIN_OK;
}

static goblin_err k_pad(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                        int32_t n_in, goblin_tensor *out) {
    int32_t np;
    const int64_t *p = goblin__attr_ints(node, GOBLIN_ATTR_PADS, &np);
    size_t es = goblin_dtype_size(out->dtype);
    /* fill everything, then copy the part of the input that survives the crop */
    double value = goblin__attr_f(node, GOBLIN_ATTR_VALUE, 0.0);
    char fill[8];
    if (goblin_dtype_is_int(out->dtype)) goblin__store_i64(out->dtype, fill, 0, (int64_t)value);
    else goblin__store_f64(out->dtype, fill, 0, value);
    int64_t n = goblin__numel(out);
    for (int64_t i = 0; i < n; i++) elem_copy(es, (char *)out->data + i * (int64_t)es, fill);

    view v = view_of(&in[0]);
    int64_t dst_off = 0;
    for (int32_t i = 0; i < np / 2; i++) {
        int32_t d = in[0].rank - 1 - i;
        int64_t before = p[2 * i], after = p[2 * i + 1];
        int64_t skip_in = before < 0 ? -before : 0, skip_in_end = after < 0 ? -after : 0;
        int64_t len = in[0].shape[d] - skip_in - skip_in_end;
        v.shape[d] = len > 0 ? len : 0;
        if (len <= 0) continue;
        v.offset += skip_in * in[0].strides[d];
        dst_off += (before > 0 ? before : 0) * out->strides[d];
    }
    copy_view(es, in[0].data, &v, out->data, dst_off, out->strides);
    return GOBLIN_OK;
}

/* ---- indexing helpers ---------------------------------------------------- */

/* torch treats a 0-d tensor as [1] in gather/scatter. */
static goblin_tensor promote(const goblin_tensor *t) {
    goblin_tensor p = *t;
    if (p.rank == 0) {
        p.rank = 1;
        p.shape[0] = 1;
        p.strides[0] = 0;
    }
    return p;
}

static const char *pos_str(int32_t rank, const int64_t *idx, char *buf, size_t cap) {
    return goblin__shape_str(rank, idx, buf, cap);
}

/* Check every element of @p idx (row-major) lies in [lo, hi); on the first that
 * does not, GOBLIN_EINDEX naming its value and position. @p report_rank is the
 * rank shown in the position (the index's own, before any promotion). */
static goblin_err check_indices(goblin__kctx *k, const goblin_tensor *idx, int32_t report_rank,
                                int64_t lo, int64_t hi, int32_t axis, int64_t size) {
    int64_t n = goblin__numel(idx);
    if (n == 0) return GOBLIN_OK;
    int64_t st[1][GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < idx->rank; d++) st[0][d] = idx->strides[d];
    goblin__nditer it;
    goblin__nditer_init(&it, idx->rank, idx->shape, 1, st);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = goblin__load_i64(idx->dtype, idx->data, it.off[0]);
        if (v < lo || v >= hi) {
            char ps[160];
            return goblin__errf(k->msg, k->cap, GOBLIN_EINDEX,
                                "index %lld at position %s is out of range for dimension %d of "
                                "size %lld",
                                (long long)v, pos_str(report_rank, it.idx, ps, sizeof ps), (int)axis,
                                (long long)size);
        }
        goblin__nditer_next(&it);
    }
    return GOBLIN_OK;
}

/* In-place accumulation into the output for scatter_add / index_put: f32 and
 * f64 add in their own precision, f16/bf16 in an f32 copy rounded once at the
 * end, integers wrap (unsigned add), bool is logical or (as torch). */
typedef struct accum {
    goblin_dtype dt;
    void *out;
    float *tmp;
    int64_t n;
} accum;

static goblin_err acc_begin(accum *a, goblin_tensor *out) {
    a->dt = out->dtype;
    a->out = out->data;
    a->tmp = NULL;
    a->n = goblin__numel(out);
    if (a->dt == GOBLIN_DTYPE_F16 || a->dt == GOBLIN_DTYPE_BF16) {
        a->tmp = goblin__alloc((size_t)a->n * sizeof(float));
        if (!a->tmp) return GOBLIN_ENOMEM;
        for (int64_t i = 0; i < a->n; i++) a->tmp[i] = (float)goblin__load_f64(a->dt, a->out, i);
    }
    return GOBLIN_OK;
}

static inline void acc_add(accum *a, int64_t o, const void *src, int64_t s) {
    switch (a->dt) {
    case GOBLIN_DTYPE_F32: ((float *)a->out)[o] += ((const float *)src)[s]; break;
    case GOBLIN_DTYPE_F64: ((double *)a->out)[o] += ((const double *)src)[s]; break;
    case GOBLIN_DTYPE_F16:
    case GOBLIN_DTYPE_BF16: a->tmp[o] += (float)goblin__load_f64(a->dt, src, s); break;
    case GOBLIN_DTYPE_BOOL:
        ((uint8_t *)a->out)[o] = ((uint8_t *)a->out)[o] | (((const uint8_t *)src)[s] != 0);
        break;
    default: {
        uint64_t x = (uint64_t)goblin__load_i64(a->dt, a->out, o);
        uint64_t y = (uint64_t)goblin__load_i64(a->dt, src, s);
        goblin__store_i64(a->dt, a->out, o, (int64_t)(x + y));
    }
    }
}

static void acc_end(accum *a) {
    if (!a->tmp) return;
    for (int64_t i = 0; i < a->n; i++) goblin__store_f64(a->dt, a->out, i, a->tmp[i]);
    goblin__free(a->tmp);
    a->tmp = NULL;
}

static void copy_input_to_out(const goblin_tensor *x, goblin_tensor *out) {
    view v = view_of(x);
    copy_to_out(&v, x->data, out);
}

/* ---- gather / scatter ---------------------------------------------------- */

static goblin_err k_gather(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    goblin_tensor x = promote(&in[0]), idx = promote(&in[1]), o = promote(out);
    int32_t a = norm_axis(goblin__attr_i(node, GOBLIN_ATTR_AXIS, 0), x.rank);
    goblin_err e = check_indices(k, &idx, in[1].rank, 0, x.shape[a], a, x.shape[a]);
    if (e) return e;
    int64_t n = goblin__numel(&idx);
    if (n == 0) return GOBLIN_OK;
    size_t es = goblin_dtype_size(x.dtype);
    int64_t st[3][GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < x.rank; d++) {
        st[0][d] = idx.strides[d];
        st[1][d] = d == a ? 0 : x.strides[d];
        st[2][d] = o.strides[d];
    }
    goblin__nditer it;
    goblin__nditer_init(&it, idx.rank, idx.shape, 3, st);
    for (int64_t i = 0; i < n; i++) {
        int64_t j = goblin__load_i64(idx.dtype, idx.data, it.off[0]);
        elem_copy(es, (char *)o.data + it.off[2] * (int64_t)es,
                  (const char *)x.data + (it.off[1] + j * x.strides[a]) * (int64_t)es);
        goblin__nditer_next(&it);
    }
    return GOBLIN_OK;
}

static goblin_err scatter_common(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                 goblin_tensor *out, bool add) {
    goblin_tensor x = promote(&in[0]), idx = promote(&in[1]), src = promote(&in[2]),
                  o = promote(out);
    int32_t a = norm_axis(goblin__attr_i(node, GOBLIN_ATTR_AXIS, 0), x.rank);
    goblin_err e = check_indices(k, &idx, in[1].rank, 0, x.shape[a], a, x.shape[a]);
    if (e) return e;
    copy_input_to_out(&in[0], out);
    int64_t n = goblin__numel(&idx);
    if (n == 0) return GOBLIN_OK;
    accum acc;
    if (add && (e = acc_begin(&acc, out))) return e;
    size_t es = goblin_dtype_size(x.dtype);
    int64_t st[3][GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < x.rank; d++) {
        st[0][d] = idx.strides[d];
        st[1][d] = src.strides[d];
        st[2][d] = d == a ? 0 : o.strides[d];
    }
    goblin__nditer it;
    goblin__nditer_init(&it, idx.rank, idx.shape, 3, st);
    for (int64_t i = 0; i < n; i++) {
        int64_t j = goblin__load_i64(idx.dtype, idx.data, it.off[0]);
        int64_t dst = it.off[2] + j * o.strides[a];
        if (add) acc_add(&acc, dst, src.data, it.off[1]);
        else elem_copy(es, (char *)o.data + dst * (int64_t)es,
                       (const char *)src.data + it.off[1] * (int64_t)es);
        goblin__nditer_next(&it);
    }
    if (add) acc_end(&acc);
    return GOBLIN_OK;
}

static goblin_err k_scatter(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    return scatter_common(k, node, in, out, false);
}

static goblin_err k_scatter_add(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out) {
    return scatter_common(k, node, in, out, true);
}

/* ---- index_select / embedding / index_put -------------------------------- */

static goblin_err k_index_select(goblin__kctx *k, const goblin__node *node,
                                 const goblin_tensor *in, int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0];
    goblin_tensor idx = promote(&in[1]);
    int32_t a = norm_axis(goblin__attr_i(node, GOBLIN_ATTR_AXIS, 0), x->rank);
    int64_t size = x->rank ? x->shape[a] : 1;
    goblin_err e = check_indices(k, &idx, in[1].rank, 0, size, a, size);
    if (e) return e;
    size_t es = goblin_dtype_size(x->dtype);
    if (x->rank == 0) { /* the one index is 0 */
        elem_copy(es, out->data, x->data);
        return GOBLIN_OK;
    }
    int64_t n = goblin__numel(out);
    if (n == 0) return GOBLIN_OK;
    int64_t st[2][GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < x->rank; d++) {
        st[0][d] = d == a ? 0 : x->strides[d];
        st[1][d] = out->strides[d];
    }
    goblin__nditer it;
    goblin__nditer_init(&it, out->rank, out->shape, 2, st);
    for (int64_t i = 0; i < n; i++) {
        int64_t j = goblin__load_i64(idx.dtype, idx.data, it.idx[a] * idx.strides[0]);
        elem_copy(es, (char *)out->data + it.off[1] * (int64_t)es,
                  (const char *)x->data + (it.off[0] + j * x->strides[a]) * (int64_t)es);
        goblin__nditer_next(&it);
    }
    return GOBLIN_OK;
}

static goblin_err k_embedding(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *w = &in[0], *idx = &in[1];
    goblin_err e = check_indices(k, idx, idx->rank, 0, w->shape[0], 0, w->shape[0]);
    if (e) return e;
    int64_t n = goblin__numel(idx), dim = w->shape[1];
    if (n == 0 || dim == 0) return GOBLIN_OK;
    size_t es = goblin_dtype_size(w->dtype);
    int64_t st[1][GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < idx->rank; d++) st[0][d] = idx->strides[d];
    goblin__nditer it;
    goblin__nditer_init(&it, idx->rank, idx->shape, 1, st);
    char *o = out->data;
    for (int64_t i = 0; i < n; i++) {
        int64_t row = goblin__load_i64(idx->dtype, idx->data, it.off[0]);
        const char *s = (const char *)w->data + row * w->strides[0] * (int64_t)es;
        for (int64_t j = 0; j < dim; j++)
            elem_copy(es, o + (i * dim + j) * (int64_t)es, s + j * w->strides[1] * (int64_t)es);
        goblin__nditer_next(&it);
    }
    return GOBLIN_OK;
}

static goblin_err k_index_put(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0], *vals = &in[2];
    goblin_tensor idx = promote(&in[1]);
    bool add = goblin__attr_i(node, GOBLIN_ATTR_ACCUMULATE, 0) != 0;
    int64_t size = x->shape[0];
    goblin_err e = check_indices(k, &idx, in[1].rank, -size, size, 0, size);
    if (e) return e;
    copy_input_to_out(x, out);
    /* values broadcast against the indexed region [len(index), x.shape[1:]...] */
    int64_t tgt[GOBLIN_MAX_RANK], vst[GOBLIN_MAX_RANK];
    int32_t tr = 0;
    if (in[1].rank) tgt[tr++] = idx.shape[0];
    for (int32_t d = 1; d < x->rank; d++) tgt[tr++] = x->shape[d];
    goblin__bcast_strides(vals, tr, tgt, vst);
    const int64_t *inner_vst = in[1].rank ? vst + 1 : vst; /* strides over x.shape[1:] */
    int64_t n = idx.shape[0], inner = shape_numel(x->rank - 1, x->shape + 1);
    if (n == 0 || inner == 0) return GOBLIN_OK;
    accum acc;
    if (add && (e = acc_begin(&acc, out))) return e;
    size_t es = goblin_dtype_size(x->dtype);
    int64_t st[2][GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < x->rank - 1; d++) {
        st[0][d] = inner_vst[d];
        st[1][d] = out->strides[d + 1];
    }
    goblin__nditer it;
    goblin__nditer_init(&it, x->rank - 1, x->shape + 1, 2, st);
    for (int64_t i = 0; i < n; i++) {
        int64_t row = goblin__load_i64(idx.dtype, idx.data, i * idx.strides[0]);
        if (row < 0) row += size;
        int64_t vbase = in[1].rank ? i * vst[0] : 0, obase = row * out->strides[0];
        goblin__nditer_seek(&it, 0);
        for (int64_t j = 0; j < inner; j++) {
            int64_t vo = vbase + it.off[0], oo = obase + it.off[1];
            if (add) acc_add(&acc, oo, vals->data, vo);
            else elem_copy(es, (char *)out->data + oo * (int64_t)es,
                           (const char *)vals->data + vo * (int64_t)es);
            goblin__nditer_next(&it);
        }
    }
    if (add) acc_end(&acc);
    return GOBLIN_OK;
}

void goblin__ref_register_shape(goblin__kernel_fn *t) {
    t[GOBLIN_OP_RESHAPE] = k_copy;
    t[GOBLIN_OP_PERMUTE] = k_permute;
    t[GOBLIN_OP_EXPAND] = k_expand;
    t[GOBLIN_OP_SLICE] = k_slice;
    t[GOBLIN_OP_SELECT] = k_select;
    t[GOBLIN_OP_SPLIT] = k_split;
    t[GOBLIN_OP_CONCAT] = k_concat;
    t[GOBLIN_OP_STACK] = k_stack;
    t[GOBLIN_OP_PAD] = k_pad;
    t[GOBLIN_OP_COPY] = k_copy;
    t[GOBLIN_OP_GATHER] = k_gather;
    t[GOBLIN_OP_SCATTER] = k_scatter;
    t[GOBLIN_OP_SCATTER_ADD] = k_scatter_add;
    t[GOBLIN_OP_INDEX_SELECT] = k_index_select;
    t[GOBLIN_OP_EMBEDDING] = k_embedding;
    t[GOBLIN_OP_INDEX_PUT] = k_index_put;
}
