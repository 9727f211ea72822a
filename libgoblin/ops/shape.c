/* libgoblin/ops/shape.c - op definitions (inference, attributes, contracts) for the
 * shape/movement ops (reshape ... copy) and the indexing ops (gather ... index_put).
 *
 * Movement ops are exact and carry GOBLIN__OPF_STRIDED: their kernels read any
 * strided view directly, so a permute of a permute never materializes twice.
 * Indexing ops validate shapes here; index values are data, checked by the
 * kernels (GOBLIN_EINDEX naming the bad value and its position). */
#include <math.h>
#include "op_def.h"

#define MAXDIM ((double)GOBLIN_MAX_DIM)
/* Every int64 passes; the kernels clamp python-style. */
#define ANY_I64 9.2233720368547758e18
#define AXIS_SPEC(req) {GOBLIN_ATTR_AXIS, (req), -(GOBLIN_MAX_RANK + 1), GOBLIN_MAX_RANK}
#define IDX_DTYPES (GOBLIN_DTMASK(GOBLIN_DTYPE_I32) | GOBLIN_DTMASK(GOBLIN_DTYPE_I64))

static void copy_shape(goblin__node *out, const goblin__node *in) {
    out->dtype = in->dtype;
    out->rank = in->rank;
    for (int32_t d = 0; d < in->rank; d++) out->shape[d] = in->shape[d];
}

static goblin_err check_numel(goblin__infer *c, int32_t rank, const int64_t *shape) {
    int64_t n;
    if (rank > GOBLIN_MAX_RANK)
        return goblin__errf(c->msg, c->cap, GOBLIN_ELIMIT, "output rank %d exceeds %d", (int)rank,
                            GOBLIN_MAX_RANK);
    if (goblin__shape_numel(rank, shape, &n))
        return goblin__errf(c->msg, c->cap, GOBLIN_ELIMIT, "output has more than %lld elements",
                            (long long)GOBLIN_MAX_NUMEL);
    return GOBLIN_OK;
}

static goblin_err need_index_dtype(goblin__infer *c, int32_t which, const char *what) {
    goblin_dtype dt = c->in[which]->dtype;
    if (!(IDX_DTYPES & GOBLIN_DTMASK(dt)))
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE, "%s must be i32 or i64, got %s", what,
                            goblin_dtype_name(dt));
    return GOBLIN_OK;
}

static goblin_err need_same_dtype(goblin__infer *c, int32_t which, const char *what) {
    if (c->in[which]->dtype != c->in[0]->dtype)
        return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                            "%s has dtype %s but the input has %s (insert a cast)", what,
                            goblin_dtype_name(c->in[which]->dtype),
                            goblin_dtype_name(c->in[0]->dtype));
    return GOBLIN_OK;
}

/* ---- reshape ------------------------------------------------------------- */

static goblin_err infer_reshape(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    int32_t n;
    const int64_t *s = goblin__attr_ints(c->node, GOBLIN_ATTR_SHAPE, &n);
    if (n > GOBLIN_MAX_RANK)
        return goblin__errf(c->msg, c->cap, GOBLIN_ELIMIT, "shape has %d dims, more than %d",
                            (int)n, GOBLIN_MAX_RANK);
    int64_t numel, known = 1;
    goblin__shape_numel(x->rank, x->shape, &numel);
    int32_t infer_at = -1;
    for (int32_t d = 0; d < n; d++) {
        if (s[d] == -1) {
            if (infer_at >= 0)
                return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL,
                                    "only one dimension can be -1 (dims %d and %d are)",
                                    (int)infer_at, (int)d);
            infer_at = d;
        } else if (!goblin__mul_i64(known, s[d], &known) || known > GOBLIN_MAX_NUMEL) {
            return goblin__errf(c->msg, c->cap, GOBLIN_ELIMIT, "shape has too many elements");
        }
    }
    char sa[160], sb[160];
    c->node->dtype = x->dtype;
    c->node->rank = n;
    for (int32_t d = 0; d < n; d++) c->node->shape[d] = s[d];
    if (infer_at >= 0) {
        if (known == 0)
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                                "cannot reshape %s into %s: the -1 dimension is ambiguous when the "
                                "other dimensions hold 0 elements",
                                goblin__shape_str(x->rank, x->shape, sa, sizeof sa),
                                goblin__shape_str(n, s, sb, sizeof sb));
        if (numel % known)
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "cannot reshape %s (%lld elements) into %s",
                                goblin__shape_str(x->rank, x->shape, sa, sizeof sa),
                                (long long)numel, goblin__shape_str(n, s, sb, sizeof sb));
        c->node->shape[infer_at] = numel / known;
    } else if (known != numel) {
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "cannot reshape %s (%lld elements) into %s",
                            goblin__shape_str(x->rank, x->shape, sa, sizeof sa), (long long)numel,
                            goblin__shape_str(n, s, sb, sizeof sb));
    }
    return GOBLIN_OK;
}

/* ---- permute ------------------------------------------------------------- */

static goblin_err infer_permute(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    int32_t n;
    const int64_t *p = goblin__attr_ints(c->node, GOBLIN_ATTR_PERM, &n);
    if (n != x->rank)
        return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL,
                            "perm has %d entries but the input has rank %d", (int)n, (int)x->rank);
    bool seen[GOBLIN_MAX_RANK] = {false};
    c->node->dtype = x->dtype;
    c->node->rank = n;
    for (int32_t d = 0; d < n; d++) {
        int32_t a;
        goblin_err e = goblin__norm_axis(p[d], x->rank, &a, c->msg, c->cap);
        if (e) return e;
        if (seen[a])
            return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL,
                                "perm repeats axis %d (perm[%d] = %lld)", (int)a, (int)d,
                                (long long)p[d]);
        seen[a] = true;
        c->node->shape[d] = x->shape[a];
    }
    return GOBLIN_OK;
}

/* ---- expand -------------------------------------------------------------- */

static goblin_err infer_expand(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    int32_t n;
    const int64_t *s = goblin__attr_ints(c->node, GOBLIN_ATTR_SHAPE, &n);
    if (n > GOBLIN_MAX_RANK)
        return goblin__errf(c->msg, c->cap, GOBLIN_ELIMIT, "shape has %d dims, more than %d",
                            (int)n, GOBLIN_MAX_RANK);
    if (n < x->rank)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                            "shape has %d dims, fewer than the input's rank %d", (int)n,
                            (int)x->rank);
    int32_t off = n - x->rank;
    c->node->dtype = x->dtype;
    c->node->rank = n;
    for (int32_t d = 0; d < n; d++) {
        if (d < off) {
            if (s[d] < 0)
                return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                                    "size -1 is not allowed in a new leading dimension %d", (int)d);
            c->node->shape[d] = s[d];
            continue;
        }
        int64_t have = x->shape[d - off];
        if (s[d] == -1 || s[d] == have) {
            c->node->shape[d] = have;
        } else if (have == 1) {
            c->node->shape[d] = s[d];
        } else {
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                                "cannot expand dimension %d of size %lld to %lld (only size-1 "
                                "dimensions expand)",
                                (int)d, (long long)have, (long long)s[d]);
        }
    }
    return check_numel(c, n, c->node->shape);
}

/* ---- slice --------------------------------------------------------------- */

static goblin_err infer_slice(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    int32_t na, ns, nt, np;
    const int64_t *axes = goblin__attr_ints(c->node, GOBLIN_ATTR_AXES, &na);
    const int64_t *starts = goblin__attr_ints(c->node, GOBLIN_ATTR_STARTS, &ns);
    const int64_t *stops = goblin__attr_ints(c->node, GOBLIN_ATTR_STOPS, &nt);
    const int64_t *steps = goblin__attr_ints(c->node, GOBLIN_ATTR_STEPS, &np);
    (void)steps;
    if (!axes) na = ns;
    if (ns != nt || na != ns || (np && np != ns))
        return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL,
                            "axes, starts, stops and steps must have equal lengths (got %d, %d, "
                            "%d, %d)",
                            (int)na, (int)ns, (int)nt, (int)np);
    if (ns > 0 && x->rank == 0)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "cannot slice a 0-d tensor");
    copy_shape(c->node, x);
    bool seen[GOBLIN_MAX_RANK] = {false};
    for (int32_t i = 0; i < ns; i++) {
        int32_t a;
        goblin_err e = goblin__norm_axis(axes ? axes[i] : i, x->rank, &a, c->msg, c->cap);
        if (e) return e;
        if (seen[a])
            return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL, "axis %d is sliced twice", (int)a);
        seen[a] = true;
        int64_t dim = x->shape[a], st = np ? steps[i] : 1;
        int64_t b = starts[i], f = stops[i];
        /* python-style: negative counts from the end, then clamp to [0, dim] */
        if (b < 0) b = b + dim < 0 ? 0 : b + dim;
        if (b > dim) b = dim;
        if (f < 0) f = f + dim < 0 ? 0 : f + dim;
        if (f > dim) f = dim;
        c->node->shape[a] = f > b ? (f - b - 1) / st + 1 : 0; /* st may be near 2^63 */
    }
    return GOBLIN_OK;
}

/* ---- select -------------------------------------------------------------- */

static goblin_err infer_select(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    if (x->rank == 0)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "cannot select from a 0-d tensor");
    int32_t a;
    goblin_err e = goblin__norm_axis(goblin__attr_i(c->node, GOBLIN_ATTR_AXIS, 0), x->rank, &a,
                                     c->msg, c->cap);
    if (e) return e;
    int64_t idx = goblin__attr_i(c->node, GOBLIN_ATTR_INDEX, 0), dim = x->shape[a];
    if (idx < -dim || idx >= dim)
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE,
                            "index %lld out of range for dimension %d of size %lld",
                            (long long)idx, (int)a, (long long)dim);
    c->node->dtype = x->dtype;
    c->node->rank = x->rank - 1;
    for (int32_t d = 0, o = 0; d < x->rank; d++)
        if (d != a) c->node->shape[o++] = x->shape[d];
    return GOBLIN_OK;
}

/* ---- split (one chunk of torch.chunk) ----------------------------------- */

static goblin_err infer_split(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    if (x->rank == 0)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "cannot split a 0-d tensor");
    int32_t a;
    goblin_err e = goblin__norm_axis(goblin__attr_i(c->node, GOBLIN_ATTR_AXIS, 0), x->rank, &a,
                                     c->msg, c->cap);
    if (e) return e;
    int64_t chunks = goblin__attr_i(c->node, GOBLIN_ATTR_CHUNKS, 1);
    int64_t idx = goblin__attr_i(c->node, GOBLIN_ATTR_INDEX, 0), dim = x->shape[a];
    /* torch.chunk: chunks of ceil(dim / chunks), so fewer than CHUNKS pieces can
     * come back (5 in 4 chunks gives 2, 2, 1); a 0-size dim gives CHUNKS empty pieces. */
    int64_t size = (dim + chunks - 1) / chunks;
    int64_t count = size ? (dim + size - 1) / size : chunks;
    if (idx < -count || idx >= count)
        return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE,
                            "chunk index %lld out of range: dimension %d of size %lld gives %lld "
                            "chunks",
                            (long long)idx, (int)a, (long long)dim, (long long)count);
    if (idx < 0) idx += count;
    copy_shape(c->node, x);
    int64_t start = idx * size;
    c->node->shape[a] = dim - start < size ? dim - start : size;
    return GOBLIN_OK;
}

/* ---- concat / stack ------------------------------------------------------ */

static goblin_err infer_concat(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    if (x->rank == 0)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                            "a 0-d tensor cannot be concatenated (use stack)");
    int32_t a;
    goblin_err e = goblin__norm_axis(goblin__attr_i(c->node, GOBLIN_ATTR_AXIS, 0), x->rank, &a,
                                     c->msg, c->cap);
    if (e) return e;
    copy_shape(c->node, x);
    int64_t total = 0;
    for (int32_t i = 0; i < c->n_in; i++) {
        const goblin__node *y = c->in[i];
        if (y->dtype != x->dtype)
            return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                                "input %d has dtype %s but input 0 has %s (insert a cast)", (int)i,
                                goblin_dtype_name(y->dtype), goblin_dtype_name(x->dtype));
        if (y->rank != x->rank)
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                                "input %d has rank %d but input 0 has rank %d", (int)i,
                                (int)y->rank, (int)x->rank);
        for (int32_t d = 0; d < x->rank; d++)
            if (d != a && y->shape[d] != x->shape[d]) {
                char sa[160], sb[160];
                return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                                    "input %d has shape %s, input 0 %s: only axis %d may differ",
                                    (int)i, goblin__shape_str(y->rank, y->shape, sa, sizeof sa),
                                    goblin__shape_str(x->rank, x->shape, sb, sizeof sb), (int)a);
            }
        total += y->shape[a]; /* each <= 2^40 and at most 1024 inputs: no overflow */
    }
    c->node->shape[a] = total;
    return check_numel(c, c->node->rank, c->node->shape);
}

static goblin_err infer_stack(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    if (x->rank + 1 > GOBLIN_MAX_RANK)
        return goblin__errf(c->msg, c->cap, GOBLIN_ELIMIT, "stacking rank-%d inputs exceeds rank %d",
                            (int)x->rank, GOBLIN_MAX_RANK);
    int32_t a;
    goblin_err e = goblin__norm_axis(goblin__attr_i(c->node, GOBLIN_ATTR_AXIS, 0), x->rank + 1,
                                     &a, c->msg, c->cap);
    if (e) return e;
    for (int32_t i = 1; i < c->n_in; i++) {
        const goblin__node *y = c->in[i];
        if (y->dtype != x->dtype)
            return goblin__errf(c->msg, c->cap, GOBLIN_EDTYPE,
                                "input %d has dtype %s but input 0 has %s (insert a cast)", (int)i,
                                goblin_dtype_name(y->dtype), goblin_dtype_name(x->dtype));
        bool same = y->rank == x->rank;
        for (int32_t d = 0; same && d < x->rank; d++) same = y->shape[d] == x->shape[d];
        if (!same) {
            char sa[160], sb[160];
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                                "stack needs equal shapes: input %d is %s, input 0 is %s", (int)i,
                                goblin__shape_str(y->rank, y->shape, sa, sizeof sa),
                                goblin__shape_str(x->rank, x->shape, sb, sizeof sb));
        }
    }
    c->node->dtype = x->dtype;
    c->node->rank = x->rank + 1;
    for (int32_t d = 0, s = 0; d < x->rank + 1; d++)
        c->node->shape[d] = d == a ? c->n_in : x->shape[s++];
    return check_numel(c, c->node->rank, c->node->shape);
}

/* ---- pad ----------------------------------------------------------------- */

/* Range of an integer dtype, for checking the pad value like torch's fill does. */
static void int_range(goblin_dtype dt, double *lo, double *hi) {
    switch (dt) {
    case GOBLIN_DTYPE_I8: *lo = -128; *hi = 127; break;
    case GOBLIN_DTYPE_I16: *lo = -32768; *hi = 32767; break;
    case GOBLIN_DTYPE_I32: *lo = -2147483648.0; *hi = 2147483647.0; break;
    case GOBLIN_DTYPE_U8: *lo = 0; *hi = 255; break;
    default: *lo = -9223372036854775808.0; *hi = 9223372036854774784.0; break; /* i64 */
    }
}

static goblin_err infer_pad(goblin__infer *c) {
    const goblin__node *x = c->in[0];
    int32_t n;
    const int64_t *p = goblin__attr_ints(c->node, GOBLIN_ATTR_PADS, &n);
    if (n % 2)
        return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL,
                            "pads must come in (before, after) pairs, got %d values", (int)n);
    if (n / 2 > x->rank)
        return goblin__errf(c->msg, c->cap, GOBLIN_EINVAL,
                            "%d pad pairs for an input of rank %d", (int)(n / 2), (int)x->rank);
    double v = goblin__attr_f(c->node, GOBLIN_ATTR_VALUE, 0.0);
    if (goblin_dtype_is_int(x->dtype)) {
        double lo, hi;
        int_range(x->dtype, &lo, &hi);
        double t = trunc(v);
        if (!(t >= lo && t <= hi))
            return goblin__errf(c->msg, c->cap, GOBLIN_ERANGE,
                                "pad value %g does not fit dtype %s", v,
                                goblin_dtype_name(x->dtype));
    }
    copy_shape(c->node, x);
    for (int32_t i = 0; i < n / 2; i++) {
        int32_t d = x->rank - 1 - i; /* torch order: last dim first */
        int64_t b = p[2 * i], a = p[2 * i + 1];
        /* as torch: the crops together may not remove more than the dimension holds */
        if (x->shape[d] + (b < 0 ? b : 0) + (a < 0 ? a : 0) < 0)
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                                "pads (%lld, %lld) on dimension %d of size %lld crop more than "
                                "it holds",
                                (long long)p[2 * i], (long long)p[2 * i + 1], (int)d,
                                (long long)x->shape[d]);
        c->node->shape[d] = x->shape[d] + b + a;
    }
    return check_numel(c, c->node->rank, c->node->shape);
}

static goblin_err infer_copy(goblin__infer *c) {
    copy_shape(c->node, c->in[0]);
    return GOBLIN_OK;
}

/* ---- gather / scatter ---------------------------------------------------- */

/* torch treats 0-d tensors as having one dimension of size 1 in gather/scatter. */
static int32_t nz_rank(const goblin__node *t) { return t->rank ? t->rank : 1; }
static int64_t nz_size(const goblin__node *t, int32_t d) { return t->rank ? t->shape[d] : 1; }

static goblin_err gs_axis(goblin__infer *c, int32_t *a) {
    const goblin__node *x = c->in[0], *idx = c->in[1];
    goblin_err e = goblin__norm_axis(goblin__attr_i(c->node, GOBLIN_ATTR_AXIS, 0), x->rank, a,
                                     c->msg, c->cap);
    if (e) return e;
    e = need_index_dtype(c, 1, "index");
    if (e) return e;
    int64_t n;
    goblin__shape_numel(idx->rank, idx->shape, &n);
    if (n > 0 && nz_rank(idx) != nz_rank(x)) /* like torch, an empty index is never checked */
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                            "index has rank %d but the input has rank %d (they must match)",
                            (int)idx->rank, (int)x->rank);
    return GOBLIN_OK;
}

static goblin_err infer_gather(goblin__infer *c) {
    const goblin__node *x = c->in[0], *idx = c->in[1];
    int32_t a;
    goblin_err e = gs_axis(c, &a);
    if (e) return e;
    int64_t n;
    goblin__shape_numel(idx->rank, idx->shape, &n);
    for (int32_t d = 0; n > 0 && d < nz_rank(x); d++)
        if (d != a && nz_size(idx, d) > nz_size(x, d)) {
            char sa[160], sb[160];
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                                "index %s is larger than the input %s in dimension %d",
                                goblin__shape_str(idx->rank, idx->shape, sa, sizeof sa),
                                goblin__shape_str(x->rank, x->shape, sb, sizeof sb), (int)d);
        }
    copy_shape(c->node, idx);
    c->node->dtype = x->dtype;
    return GOBLIN_OK;
}

static goblin_err infer_scatter(goblin__infer *c) {
    const goblin__node *x = c->in[0], *idx = c->in[1], *src = c->in[2];
    int32_t a;
    goblin_err e = gs_axis(c, &a);
    if (e) return e;
    e = need_same_dtype(c, 2, "src");
    if (e) return e;
    int64_t n;
    goblin__shape_numel(idx->rank, idx->shape, &n);
    if (n > 0) {
        if (nz_rank(src) != nz_rank(x))
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                                "src has rank %d but the input has rank %d (they must match)",
                                (int)src->rank, (int)x->rank);
        for (int32_t d = 0; d < nz_rank(x); d++)
            if ((d != a && nz_size(idx, d) > nz_size(x, d)) || nz_size(idx, d) > nz_size(src, d)) {
                char si[120], sx[120], ss[120];
                return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                                    "index %s must be no larger than the input %s (except in "
                                    "axis %d) nor than src %s",
                                    goblin__shape_str(idx->rank, idx->shape, si, sizeof si),
                                    goblin__shape_str(x->rank, x->shape, sx, sizeof sx), (int)a,
                                    goblin__shape_str(src->rank, src->shape, ss, sizeof ss));
            }
    }
    copy_shape(c->node, x);
    return GOBLIN_OK;
}

/* ---- index_select / embedding / index_put -------------------------------- */

static goblin_err infer_index_select(goblin__infer *c) {
    const goblin__node *x = c->in[0], *idx = c->in[1];
    int32_t a;
    goblin_err e = goblin__norm_axis(goblin__attr_i(c->node, GOBLIN_ATTR_AXIS, 0), x->rank, &a,
                                     c->msg, c->cap);
    if (e) return e;
    e = need_index_dtype(c, 1, "index");
    if (e) return e;
    if (idx->rank > 1)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "index must be 0-d or 1-d, got rank %d",
                            (int)idx->rank);
    int64_t n = idx->rank ? idx->shape[0] : 1;
    copy_shape(c->node, x);
    if (x->rank == 0) {
        if (n != 1)
            return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                                "index of a 0-d input must hold one element, got %lld",
                                (long long)n);
    } else {
        c->node->shape[a] = n;
    }
    return GOBLIN_OK;
}

static goblin_err infer_embedding(goblin__infer *c) {
    const goblin__node *w = c->in[0], *idx = c->in[1];
    if (w->rank != 2)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "weight must be 2-d [V, D], got rank %d",
                            (int)w->rank);
    goblin_err e = need_index_dtype(c, 1, "indices");
    if (e) return e;
    if (idx->rank + 1 > GOBLIN_MAX_RANK)
        return goblin__errf(c->msg, c->cap, GOBLIN_ELIMIT, "indices of rank %d give rank above %d",
                            (int)idx->rank, GOBLIN_MAX_RANK);
    c->node->dtype = w->dtype;
    c->node->rank = idx->rank + 1;
    for (int32_t d = 0; d < idx->rank; d++) c->node->shape[d] = idx->shape[d];
    c->node->shape[idx->rank] = w->shape[1];
    return check_numel(c, c->node->rank, c->node->shape);
}

static goblin_err infer_index_put(goblin__infer *c) {
    const goblin__node *x = c->in[0], *idx = c->in[1], *v = c->in[2];
    if (x->rank == 0)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "cannot index a 0-d tensor");
    goblin_err e = need_index_dtype(c, 1, "index");
    if (e) return e;
    e = need_same_dtype(c, 2, "values");
    if (e) return e;
    if (idx->rank > 1)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE, "index must be 0-d or 1-d, got rank %d",
                            (int)idx->rank);
    /* the indexed region: [len(index), x.shape[1:]...] ([x.shape[1:]...] for a 0-d index) */
    int64_t tgt[GOBLIN_MAX_RANK];
    int32_t tr = 0;
    if (idx->rank) tgt[tr++] = idx->shape[0];
    for (int32_t d = 1; d < x->rank; d++) tgt[tr++] = x->shape[d];
    int64_t bs[GOBLIN_MAX_RANK];
    int32_t br;
    char sv[120], st[120];
    bool ok = v->rank <= tr &&
              goblin__broadcast_shapes(tr, tgt, v->rank, v->shape, &br, bs, NULL, 0) == GOBLIN_OK;
    for (int32_t d = 0; ok && d < tr; d++) ok = bs[d] == tgt[d];
    if (!ok)
        return goblin__errf(c->msg, c->cap, GOBLIN_ESHAPE,
                            "values of shape %s do not broadcast to the indexed shape %s",
                            goblin__shape_str(v->rank, v->shape, sv, sizeof sv),
                            goblin__shape_str(tr, tgt, st, sizeof st));
    copy_shape(c->node, x);
    return GOBLIN_OK;
}

/* ---- contracts ----------------------------------------------------------- */

/* Accumulating ops (scatter_add, index_put with accumulate=1): an output element
 * is a sum of the input value and the k values written to it, added in row-major
 * order of the index. The standard bound for a recursive sum of k+1 terms is
 * |err| <= gamma_k * (|x| + sum |src_j|), gamma_k = k u / (1 - k u). f16/bf16
 * accumulate in f32 and round once, which this bound (with u of the dtype) also
 * covers. No finite bound exists when k u >= 1: the contract is then infinite. */
static void contract_accumulate(goblin_dtype dt, int64_t k, double *rel, double *abs_tol) {
    double u = goblin__unit_roundoff(dt), ku = (double)k * u;
    *rel = u == 0 ? 0 : ku < 1 ? ku / (1 - ku) : INFINITY;
    *abs_tol = 0;
}

/* ---- registration -------------------------------------------------------- */

#define ACCUM_CONTRACT                                                                         \
    "sum contract: |err| <= gamma_k (|x| + sum |values written|) per element, k = number of " \
    "writes to that element, gamma_k = k u / (1 - k u); integers exact (wrapping)"

void goblin__ops_register_shape(goblin__op_def *t) {
    const uint32_t all = GOBLIN_DTMASK_ALL;
    const uint32_t flags = GOBLIN__OPF_STRIDED;

    t[GOBLIN_OP_RESHAPE] = (goblin__op_def){
        .defined = true, .group = "shape",
        .summary = "same elements in row-major order, new shape (one -1 is inferred)",
        .semantics = "element count must match; -1 is ambiguous (error) when the other dims hold 0 "
                     "elements",
        .contract_text = "exact", .min_inputs = 1, .max_inputs = 1, .dtypes = all, .flags = flags,
        .n_attrs = 1, .attrs = {{GOBLIN_ATTR_SHAPE, true, -1, MAXDIM}},
        .infer = infer_reshape};
    t[GOBLIN_OP_PERMUTE] = (goblin__op_def){
        .defined = true, .group = "shape", .summary = "reorder dimensions: out.shape[i] = x.shape[perm[i]]",
        .semantics = "perm is a permutation of 0..rank-1 (negative entries count from the end)",
        .contract_text = "exact", .min_inputs = 1, .max_inputs = 1, .dtypes = all, .flags = flags,
        .n_attrs = 1, .attrs = {{GOBLIN_ATTR_PERM, true, -GOBLIN_MAX_RANK, GOBLIN_MAX_RANK - 1}},
        .infer = infer_permute};
    t[GOBLIN_OP_EXPAND] = (goblin__op_def){
        .defined = true, .group = "shape",
        .summary = "broadcast size-1 dims and prepend dims to shape (materialized)",
        .semantics = "like torch.expand: -1 keeps a dim; only size-1 dims change; new leading dims "
                     "cannot be -1",
        .contract_text = "exact", .min_inputs = 1, .max_inputs = 1, .dtypes = all, .flags = flags,
        .n_attrs = 1, .attrs = {{GOBLIN_ATTR_SHAPE, true, -1, MAXDIM}},
        .infer = infer_expand};
    t[GOBLIN_OP_SLICE] = (goblin__op_def){
        .defined = true, .group = "shape",
        .summary = "x[start:stop:step] along the given axes",
        .semantics = "axes default to 0..n-1, steps to 1 (steps > 0); starts/stops are python-style: "
                     "negative counts from the end, out of range clamps",
        .contract_text = "exact", .min_inputs = 1, .max_inputs = 1, .dtypes = all, .flags = flags,
        .n_attrs = 4,
        .attrs = {{GOBLIN_ATTR_AXES, false, -GOBLIN_MAX_RANK, GOBLIN_MAX_RANK - 1},
                  {GOBLIN_ATTR_STARTS, true, -ANY_I64, ANY_I64},
                  {GOBLIN_ATTR_STOPS, true, -ANY_I64, ANY_I64},
                  {GOBLIN_ATTR_STEPS, false, 1, ANY_I64}},
        .infer = infer_slice};
    t[GOBLIN_OP_SELECT] = (goblin__op_def){
        .defined = true, .group = "shape", .summary = "x.select(axis, index): removes the axis",
        .semantics = "negative index counts from the end; out of range is GOBLIN_ERANGE at build",
        .contract_text = "exact", .min_inputs = 1, .max_inputs = 1, .dtypes = all, .flags = flags,
        .n_attrs = 2,
        .attrs = {AXIS_SPEC(true), {GOBLIN_ATTR_INDEX, true, -MAXDIM, MAXDIM}},
        .infer = infer_select};
    t[GOBLIN_OP_SPLIT] = (goblin__op_def){
        .defined = true, .group = "shape",
        .summary = "chunk INDEX of torch.chunk(x, CHUNKS, AXIS)",
        .semantics = "chunks have size ceil(n / CHUNKS), the last may be smaller, and fewer than "
                     "CHUNKS may exist (torch.chunk); a 0-size axis gives CHUNKS empty chunks; "
                     "negative INDEX counts from the last existing chunk",
        .contract_text = "exact", .min_inputs = 1, .max_inputs = 1, .dtypes = all, .flags = flags,
        .n_attrs = 3,
        .attrs = {AXIS_SPEC(false), {GOBLIN_ATTR_CHUNKS, true, 1, MAXDIM},
                  {GOBLIN_ATTR_INDEX, true, -MAXDIM, MAXDIM}},
        .infer = infer_split};
    t[GOBLIN_OP_CONCAT] = (goblin__op_def){
        .defined = true, .group = "shape", .summary = "torch.cat(inputs, axis)",
        .semantics = "same dtype and rank (>= 1); all dims but axis equal (torch's legacy skipping "
                     "of 1-d empty inputs is not supported)",
        .contract_text = "exact", .min_inputs = 1, .max_inputs = -1, .dtypes = all, .flags = flags,
        .n_attrs = 1, .attrs = {AXIS_SPEC(false)}, .infer = infer_concat};
    t[GOBLIN_OP_STACK] = (goblin__op_def){
        .defined = true, .group = "shape", .summary = "torch.stack(inputs, axis): a new axis",
        .semantics = "same dtype and shape; axis in [-(rank+1), rank]",
        .contract_text = "exact", .min_inputs = 1, .max_inputs = -1, .dtypes = all, .flags = flags,
        .n_attrs = 1, .attrs = {AXIS_SPEC(false)}, .infer = infer_stack};
    t[GOBLIN_OP_PAD] = (goblin__op_def){
        .defined = true, .group = "shape", .summary = "constant padding (torch.nn.functional.pad)",
        .semantics = "pads are (before, after) pairs, last dim first; negative pads crop (not past "
                     "the dimension's size, as torch); VALUE "
                     "(default 0) is rounded to float dtypes, truncated toward zero for integers "
                     "(GOBLIN_ERANGE if it does not fit, NaN included), nonzero is true for bool",
        .contract_text = "exact", .min_inputs = 1, .max_inputs = 1, .dtypes = all, .flags = flags,
        .n_attrs = 2,
        .attrs = {{GOBLIN_ATTR_PADS, true, -MAXDIM, MAXDIM}, {GOBLIN_ATTR_VALUE, false, 0, 0}},
        .infer = infer_pad};
    t[GOBLIN_OP_COPY] = (goblin__op_def){
        .defined = true, .group = "shape", .summary = "contiguous copy", .semantics = "",
        .contract_text = "exact", .min_inputs = 1, .max_inputs = 1, .dtypes = all, .flags = flags,
        .infer = infer_copy};

    t[GOBLIN_OP_GATHER] = (goblin__op_def){
        .defined = true, .group = "indexing",
        .summary = "torch.gather(x, axis, index): out[p] = x[p with p[axis] = index[p]]",
        .semantics = "index i32/i64 of x's rank, no larger than x outside axis (an empty index is "
                     "not checked, as torch); an index < 0 or >= size is GOBLIN_EINDEX naming the "
                     "value and its position",
        .contract_text = "exact", .min_inputs = 2, .max_inputs = 2, .dtypes = all, .flags = flags,
        .n_attrs = 1, .attrs = {AXIS_SPEC(false)}, .infer = infer_gather};
    t[GOBLIN_OP_SCATTER] = (goblin__op_def){
        .defined = true, .group = "indexing",
        .summary = "out-of-place torch.scatter(x, axis, index, src)",
        .semantics = "deterministic: when indices collide the last write in row-major order of index "
                     "wins; index < 0 or >= size is GOBLIN_EINDEX",
        .contract_text = "exact", .min_inputs = 3, .max_inputs = 3, .dtypes = all, .flags = flags,
        .n_attrs = 1, .attrs = {AXIS_SPEC(false)}, .infer = infer_scatter};
    t[GOBLIN_OP_SCATTER_ADD] = (goblin__op_def){
        .defined = true, .group = "indexing",
        .summary = "out-of-place torch.scatter_add(x, axis, index, src)",
        .semantics = "adds in row-major order of index (deterministic); f16/bf16 accumulate in f32 "
                     "and round once; integers wrap; bool is logical or; index < 0 or >= size is "
                     "GOBLIN_EINDEX",
        .contract_text = ACCUM_CONTRACT, .min_inputs = 3, .max_inputs = 3, .dtypes = all,
        .flags = flags, .n_attrs = 1, .attrs = {AXIS_SPEC(false)}, .infer = infer_scatter,
        .contract = contract_accumulate};
    t[GOBLIN_OP_INDEX_SELECT] = (goblin__op_def){
        .defined = true, .group = "indexing", .summary = "torch.index_select(x, axis, index)",
        .semantics = "index 0-d or 1-d, i32/i64; negative or >= size is GOBLIN_EINDEX (as torch)",
        .contract_text = "exact", .min_inputs = 2, .max_inputs = 2, .dtypes = all, .flags = flags,
        .n_attrs = 1, .attrs = {AXIS_SPEC(false)}, .infer = infer_index_select};
    t[GOBLIN_OP_EMBEDDING] = (goblin__op_def){
        .defined = true, .group = "indexing",
        .summary = "embedding(weight [V, D], indices) -> [..., D]: rows of weight",
        .semantics = "indices any shape, i32/i64; negative or >= V is GOBLIN_EINDEX",
        .contract_text = "exact", .min_inputs = 2, .max_inputs = 2, .dtypes = all, .flags = flags,
        .infer = infer_embedding};
    t[GOBLIN_OP_INDEX_PUT] = (goblin__op_def){
        .defined = true, .group = "indexing",
        .summary = "out-of-place x.index_put_((index,), values, accumulate) over axis 0",
        .semantics = "index 0-d/1-d i32/i64, negative counts from the end (as torch), outside "
                     "[-size, size) is GOBLIN_EINDEX; values broadcast to [len(index), "
                     "x.shape[1:]...]; without accumulate the last duplicate wins; accumulate adds "
                     "in index order (f16/bf16 in f32, integers wrap, bool is logical or)",
        .contract_text = "exact without accumulate; with accumulate: " ACCUM_CONTRACT,
        .min_inputs = 3, .max_inputs = 3, .dtypes = all, .flags = flags, .n_attrs = 1,
        .attrs = {{GOBLIN_ATTR_ACCUMULATE, false, 0, 1}}, .infer = infer_index_put,
        .contract = contract_accumulate};
}
