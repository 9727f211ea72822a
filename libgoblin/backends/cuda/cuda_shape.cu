/* libgoblin/backends/cuda/cuda_shape.cu - movement and indexing ops on the
 * device. Movement ops are one generic strided copy (elements moved as raw
 * bits, so every dtype and NaN payload survives). Indexing ops check every
 * index on the device first and report the first bad one in row-major order
 * (GOBLIN_EINDEX), then compute each output element independently: collisions
 * in scatter/index_put are resolved per output element by scanning the writers
 * in row-major order of the index, the order the reference backend uses, so
 * results are deterministic without atomics. */
#include "cuda_scalar.h"

/* ---- the generic strided copy ------------------------------------------------- */

typedef struct gc_copy_map {
    int32_t rank;
    int64_t shape[GOBLIN_MAX_RANK];
    int64_t sstr[GOBLIN_MAX_RANK];
    int64_t dstr[GOBLIN_MAX_RANK];
    int64_t sbase, dbase;
} gc_copy_map;

template <typename W>
__global__ void k_copy_map(const W *src, W *dst, int64_t n, gc_copy_map m) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i, so = m.sbase, dof = m.dbase;
        for (int32_t d = m.rank - 1; d >= 0; d--) {
            int64_t idx = r % m.shape[d];
            r /= m.shape[d];
            so += idx * m.sstr[d];
            dof += idx * m.dstr[d];
        }
        dst[dof] = src[so];
    }
}

/* Copy the elements of @p m's shape: dst[dbase + sum idx*dstr] = src[sbase + sum idx*sstr]. */
static goblin_err copy_map(gc_call *c, const void *src, void *dst, const gc_copy_map *m,
                           size_t esz) {
    int64_t n = 1;
    for (int32_t d = 0; d < m->rank; d++) n *= m->shape[d];
    if (n == 0) return GOBLIN_OK;
    unsigned b = gc_blocks(n, GC_THREADS);
    switch (esz) {
    case 1: k_copy_map<uint8_t><<<b, GC_THREADS, 0, c->stream>>>((const uint8_t *)src, (uint8_t *)dst, n, *m); break;
    case 2: k_copy_map<uint16_t><<<b, GC_THREADS, 0, c->stream>>>((const uint16_t *)src, (uint16_t *)dst, n, *m); break;
    case 4: k_copy_map<uint32_t><<<b, GC_THREADS, 0, c->stream>>>((const uint32_t *)src, (uint32_t *)dst, n, *m); break;
    case 8: k_copy_map<uint64_t><<<b, GC_THREADS, 0, c->stream>>>((const uint64_t *)src, (uint64_t *)dst, n, *m); break;
    default:
        return goblin__errf(c->k->msg, c->k->cap, GOBLIN_EINTERNAL, "cuda: element size %zu",
                            esz);
    }
    GC_LAUNCHED(c, "copy");
    return GOBLIN_OK;
}

goblin_err gc_copy_view(gc_call *c, const void *src, const gc_view *v, void *dst, size_t esz) {
    gc_copy_map m;
    memset(&m, 0, sizeof m);
    m.rank = v->rank;
    m.sbase = v->base;
    for (int32_t d = 0; d < v->rank; d++) {
        m.shape[d] = v->shape[d];
        m.sstr[d] = v->strides[d];
    }
    gc_contig_strides(v->rank, v->shape, m.dstr);
    return copy_map(c, src, dst, &m, esz);
}

goblin_err gc_copy_strided(gc_call *c, const void *src, void *dst, int32_t rank,
                           const int64_t *shape, const int64_t *sstr, int64_t sbase,
                           const int64_t *dstr, int64_t dbase, size_t esz) {
    gc_copy_map m;
    memset(&m, 0, sizeof m);
    m.rank = rank;
    m.sbase = sbase;
    m.dbase = dbase;
    for (int32_t d = 0; d < rank; d++) {
        m.shape[d] = shape[d];
        m.sstr[d] = sstr[d];
        m.dstr[d] = dstr[d];
    }
    return copy_map(c, src, dst, &m, esz);
}

static goblin_err copy_all(gc_call *c, const goblin_tensor *x, goblin_tensor *out) {
    size_t bytes = (size_t)gc_numel(out) * goblin_dtype_size(out->dtype);
    if (bytes) GC_TRY(c, cudaMemcpyAsync(out->data, x->data, bytes, cudaMemcpyDeviceToDevice,
                                         c->stream));
    return GOBLIN_OK;
}

/* ---- movement ops ------------------------------------------------------------------ */

static goblin_err k_reshape(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    return copy_all(c, &in[0], out);
}

static goblin_err k_permute(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    int32_t np;
    const int64_t *perm = goblin__attr_ints(n, GOBLIN_ATTR_PERM, &np);
    const goblin_tensor *x = &in[0];
    gc_view v;
    memset(&v, 0, sizeof v);
    v.rank = out->rank;
    for (int32_t d = 0; d < out->rank; d++) {
        int64_t a = perm[d] < 0 ? perm[d] + x->rank : perm[d];
        v.shape[d] = out->shape[d];
        v.strides[d] = x->strides[a];
    }
    return gc_copy_view(c, x->data, &v, out->data, goblin_dtype_size(x->dtype));
}

static goblin_err k_expand(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0];
    gc_view v;
    memset(&v, 0, sizeof v);
    v.rank = out->rank;
    int32_t off = out->rank - x->rank;
    for (int32_t d = 0; d < out->rank; d++) {
        v.shape[d] = out->shape[d];
        int32_t xd = d - off;
        v.strides[d] = (xd < 0 || x->shape[xd] != out->shape[d]) ? 0 : x->strides[xd];
    }
    return gc_copy_view(c, x->data, &v, out->data, goblin_dtype_size(x->dtype));
}

static int64_t clamp_py(int64_t b, int64_t dim) {
    if (b < 0) b = b + dim < 0 ? 0 : b + dim;
    return b > dim ? dim : b;
}

static goblin_err k_slice(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0];
    int32_t na, ns, nt, np;
    const int64_t *axes = goblin__attr_ints(n, GOBLIN_ATTR_AXES, &na);
    const int64_t *starts = goblin__attr_ints(n, GOBLIN_ATTR_STARTS, &ns);
    const int64_t *stops = goblin__attr_ints(n, GOBLIN_ATTR_STOPS, &nt);
    const int64_t *steps = goblin__attr_ints(n, GOBLIN_ATTR_STEPS, &np);
    (void)stops;
    gc_view v;
    memset(&v, 0, sizeof v);
    v.rank = x->rank;
    for (int32_t d = 0; d < x->rank; d++) {
        v.shape[d] = out->shape[d];
        v.strides[d] = x->strides[d];
    }
    for (int32_t i = 0; i < ns; i++) {
        int64_t a = axes ? axes[i] : i;
        if (a < 0) a += x->rank;
        int64_t st = np ? steps[i] : 1;
        v.base += clamp_py(starts[i], x->shape[a]) * x->strides[a];
        v.strides[a] = x->strides[a] * st;
    }
    if (gc_numel(out) == 0) return GOBLIN_OK;
    return gc_copy_view(c, x->data, &v, out->data, goblin_dtype_size(x->dtype));
}

static goblin_err k_select(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0];
    int64_t a = goblin__attr_i(n, GOBLIN_ATTR_AXIS, 0);
    if (a < 0) a += x->rank;
    int64_t idx = goblin__attr_i(n, GOBLIN_ATTR_INDEX, 0);
    if (idx < 0) idx += x->shape[a];
    gc_view v;
    memset(&v, 0, sizeof v);
    v.rank = out->rank;
    v.base = idx * x->strides[a];
    for (int32_t d = 0, o = 0; d < x->rank; d++) {
        if (d == a) continue;
        v.shape[o] = x->shape[d];
        v.strides[o] = x->strides[d];
        o++;
    }
    return gc_copy_view(c, x->data, &v, out->data, goblin_dtype_size(x->dtype));
}

static goblin_err k_split(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0];
    int64_t a = goblin__attr_i(n, GOBLIN_ATTR_AXIS, 0);
    if (a < 0) a += x->rank;
    int64_t chunks = goblin__attr_i(n, GOBLIN_ATTR_CHUNKS, 1);
    int64_t idx = goblin__attr_i(n, GOBLIN_ATTR_INDEX, 0), dim = x->shape[a];
    int64_t size = (dim + chunks - 1) / chunks;
    int64_t count = size ? (dim + size - 1) / size : chunks;
    if (idx < 0) idx += count;
    gc_view v;
    memset(&v, 0, sizeof v);
    v.rank = x->rank;
    v.base = idx * size * x->strides[a];
    for (int32_t d = 0; d < x->rank; d++) {
        v.shape[d] = out->shape[d];
        v.strides[d] = x->strides[d];
    }
    if (gc_numel(out) == 0) return GOBLIN_OK;
    return gc_copy_view(c, x->data, &v, out->data, goblin_dtype_size(x->dtype));
}

/* Copy contiguous @p x into the block of @p out starting at @p offset along @p axis. */
static goblin_err place(gc_call *c, const goblin_tensor *x, goblin_tensor *out, int32_t axis,
                        int64_t offset, bool new_axis) {
    gc_copy_map m;
    memset(&m, 0, sizeof m);
    m.rank = x->rank;
    gc_contig_strides(x->rank, x->shape, m.sstr);
    for (int32_t d = 0; d < x->rank; d++) {
        m.shape[d] = x->shape[d];
        int32_t od = new_axis && d >= axis ? d + 1 : d;
        m.dstr[d] = out->strides[od];
    }
    m.dbase = offset * out->strides[axis];
    return copy_map(c, x->data, out->data, &m, goblin_dtype_size(x->dtype));
}

static goblin_err k_concat(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    int64_t a = goblin__attr_i(n, GOBLIN_ATTR_AXIS, 0);
    if (a < 0) a += out->rank;
    int64_t off = 0;
    for (int32_t i = 0; i < n_in; i++) {
        GC_TRYG(place(c, &in[i], out, (int32_t)a, off, false));
        off += in[i].shape[a];
    }
    return GOBLIN_OK;
}

static goblin_err k_stack(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out) {
    int64_t a = goblin__attr_i(n, GOBLIN_ATTR_AXIS, 0);
    if (a < 0) a += out->rank;
    for (int32_t i = 0; i < n_in; i++) GC_TRYG(place(c, &in[i], out, (int32_t)a, i, true));
    return GOBLIN_OK;
}

/* The bytes of @p v as one element of dtype @p dt: rounded for floats
 * (through f32 for f16/bf16, as goblin__store_f64 does), truncated toward
 * zero for integers (inference checked the range), nonzero for bool. */
static void value_bytes(goblin_dtype dt, double v, void *out) {
    switch (dt) {
    case GOBLIN_DTYPE_F32: { float f = (float)v; memcpy(out, &f, 4); break; }
    case GOBLIN_DTYPE_F64: memcpy(out, &v, 8); break;
    case GOBLIN_DTYPE_F16: { uint16_t h = goblin__f32_to_f16((float)v); memcpy(out, &h, 2); break; }
    case GOBLIN_DTYPE_BF16: { uint16_t h = goblin__f32_to_bf16((float)v); memcpy(out, &h, 2); break; }
    case GOBLIN_DTYPE_BOOL: *(uint8_t *)out = v != 0; break;
    default: {
        int64_t x = v != v ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX
                               : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v;
        switch (dt) {
        case GOBLIN_DTYPE_I8: *(int8_t *)out = (int8_t)x; break;
        case GOBLIN_DTYPE_I16: { int16_t y = (int16_t)x; memcpy(out, &y, 2); break; }
        case GOBLIN_DTYPE_I32: { int32_t y = (int32_t)x; memcpy(out, &y, 4); break; }
        case GOBLIN_DTYPE_I64: memcpy(out, &x, 8); break;
        case GOBLIN_DTYPE_U8: *(uint8_t *)out = (uint8_t)x; break;
        default: break;
        }
    }
    }
}

template <typename W> __global__ void k_fill(W *dst, int64_t n, W v) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = v;
}

/* Fill @p out with the element whose bytes are @p bytes. */
goblin_err gc_fill_bytes(gc_call *c, goblin_tensor *out, const void *bytes) {
    int64_t n = gc_numel(out);
    if (n == 0) return GOBLIN_OK;
    unsigned b = gc_blocks(n, GC_THREADS);
    switch (goblin_dtype_size(out->dtype)) {
    case 1: { uint8_t v; memcpy(&v, bytes, 1); k_fill<<<b, GC_THREADS, 0, c->stream>>>((uint8_t *)out->data, n, v); break; }
    case 2: { uint16_t v; memcpy(&v, bytes, 2); k_fill<<<b, GC_THREADS, 0, c->stream>>>((uint16_t *)out->data, n, v); break; }
    case 4: { uint32_t v; memcpy(&v, bytes, 4); k_fill<<<b, GC_THREADS, 0, c->stream>>>((uint32_t *)out->data, n, v); break; }
    default: { uint64_t v; memcpy(&v, bytes, 8); k_fill<<<b, GC_THREADS, 0, c->stream>>>((uint64_t *)out->data, n, v); break; }
    }
    GC_LAUNCHED(c, "fill");
    return GOBLIN_OK;
}

goblin_err gc_fill_value(gc_call *c, goblin_tensor *out, double v) {
    unsigned char bytes[8] = {0};
    value_bytes(out->dtype, v, bytes);
    return gc_fill_bytes(c, out, bytes);
}

static goblin_err k_pad(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                        int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0];
    int32_t np;
    const int64_t *p = goblin__attr_ints(n, GOBLIN_ATTR_PADS, &np);
    GC_TRYG(gc_fill_value(c, out, goblin__attr_f(n, GOBLIN_ATTR_VALUE, 0.0)));
    /* The kept region: per dim, source start, destination start and length. */
    gc_copy_map m;
    memset(&m, 0, sizeof m);
    m.rank = x->rank;
    for (int32_t d = 0; d < x->rank; d++) {
        int64_t before = 0;
        int32_t i = x->rank - 1 - d; /* pads list the last dim first */
        if (i < np / 2) before = p[2 * i];
        int64_t s0 = before < 0 ? -before : 0, t0 = before > 0 ? before : 0;
        int64_t len = x->shape[d] - s0;
        if (out->shape[d] - t0 < len) len = out->shape[d] - t0;
        if (len <= 0) return GOBLIN_OK; /* nothing of x survives the crop */
        m.shape[d] = len;
        m.sstr[d] = x->strides[d];
        m.dstr[d] = out->strides[d];
        m.sbase += s0 * x->strides[d];
        m.dbase += t0 * out->strides[d];
    }
    return copy_map(c, x->data, out->data, &m, goblin_dtype_size(x->dtype));
}

/* ---- index checks ------------------------------------------------------------------ */

/* Mark the first (lowest) position whose index lies outside [lo, hi). */
template <typename I>
__global__ void k_check_index(const I *idx, int64_t n, int64_t lo, int64_t hi,
                              unsigned long long *first_bad) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t v = (int64_t)idx[i];
        if (v < lo || v >= hi) atomicMin(first_bad, (unsigned long long)i);
    }
}

/* GOBLIN_EINDEX naming the first index outside [lo, hi), or GOBLIN_OK.
 * atomicMin on an integer gives the same answer whatever the order. */
static goblin_err check_index(gc_call *c, const goblin_tensor *idx, int64_t lo, int64_t hi,
                              const char *what) {
    int64_t n = gc_numel(idx);
    if (n == 0) return GOBLIN_OK;
    unsigned long long *bad = NULL;
    GC_TRYG(gc_scratch(c, sizeof *bad, (void **)&bad));
    GC_TRY(c, cudaMemsetAsync(bad, 0xff, sizeof *bad, c->stream));
    unsigned b = gc_blocks(n, GC_THREADS);
    if (idx->dtype == GOBLIN_DTYPE_I32)
        k_check_index<<<b, GC_THREADS, 0, c->stream>>>((const int32_t *)idx->data, n, lo, hi, bad);
    else
        k_check_index<<<b, GC_THREADS, 0, c->stream>>>((const int64_t *)idx->data, n, lo, hi, bad);
    GC_LAUNCHED(c, "check_index");
    unsigned long long pos = 0;
    GC_TRY(c, cudaMemcpyAsync(&pos, bad, sizeof pos, cudaMemcpyDeviceToHost, c->stream));
    GC_TRYG(gc_sync(c, "checking indices"));
    if (pos == ~0ull) return GOBLIN_OK;
    int64_t v = 0;
    size_t esz = goblin_dtype_size(idx->dtype);
    GC_TRY(c, cudaMemcpyAsync(&v, (const char *)idx->data + pos * esz, esz,
                              cudaMemcpyDeviceToHost, c->stream));
    GC_TRYG(gc_sync(c, "reading a bad index"));
    if (esz == 4) v = (int32_t)(uint32_t)(uint64_t)v; /* little-endian: low 4 bytes */
    return goblin__errf(c->k->msg, c->k->cap, GOBLIN_EINDEX,
                        "%s %lld at position %llu is out of range [%lld, %lld)", what,
                        (long long)v, pos, (long long)lo, (long long)hi);
}

template <typename I> __device__ __forceinline__ int64_t gc_idx(const void *p, int64_t i) {
    return (int64_t)((const I *)p)[i];
}
__device__ __forceinline__ int64_t gc_index_at(const void *p, bool i64, int64_t i) {
    return i64 ? gc_idx<int64_t>(p, i) : gc_idx<int32_t>(p, i);
}

/* Shapes of gather/scatter operands, 0-d treated as [1] (as torch does). */
typedef struct gc_gs {
    int32_t rank, axis;
    bool i64;
    int64_t out_shape[GOBLIN_MAX_RANK];   /* shape iterated over */
    int64_t x_str[GOBLIN_MAX_RANK];       /* x (or out for scatter) strides */
    int64_t idx_shape[GOBLIN_MAX_RANK];
    int64_t idx_str[GOBLIN_MAX_RANK];
    int64_t src_str[GOBLIN_MAX_RANK];
} gc_gs;

static void nz_shape(const goblin_tensor *t, int32_t *rank, int64_t *shape, int64_t *str) {
    if (t->rank == 0) {
        *rank = 1;
        shape[0] = 1;
        str[0] = 1;
        return;
    }
    *rank = t->rank;
    for (int32_t d = 0; d < t->rank; d++) shape[d] = t->shape[d];
    gc_contig_strides(t->rank, t->shape, str);
}

/* ---- gather ------------------------------------------------------------------------ */

template <typename W>
__global__ void k_gather(const W *x, const void *idx, W *out, int64_t n, gc_gs g) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i, xo = 0;
        for (int32_t d = g.rank - 1; d >= 0; d--) {
            int64_t q = r % g.out_shape[d];
            r /= g.out_shape[d];
            xo += (d == g.axis ? gc_index_at(idx, g.i64, i) : q) * g.x_str[d];
        }
        out[i] = x[xo];
    }
}

static goblin_err k_gather_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0], *idx = &in[1];
    int64_t a = goblin__attr_i(n, GOBLIN_ATTR_AXIS, 0);
    if (a < 0) a += x->rank;
    gc_gs g;
    memset(&g, 0, sizeof g);
    int64_t xs[GOBLIN_MAX_RANK], tmp[GOBLIN_MAX_RANK];
    int32_t xr, ir;
    nz_shape(x, &xr, xs, g.x_str);
    nz_shape(idx, &ir, g.out_shape, tmp);
    g.rank = ir;
    g.axis = (int32_t)a;
    g.i64 = idx->dtype == GOBLIN_DTYPE_I64;
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    GC_TRYG(check_index(c, idx, 0, xs[a], "gather index"));
    unsigned b = gc_blocks(cnt, GC_THREADS);
    switch (goblin_dtype_size(x->dtype)) {
    case 1: k_gather<<<b, GC_THREADS, 0, c->stream>>>((const uint8_t *)x->data, idx->data, (uint8_t *)out->data, cnt, g); break;
    case 2: k_gather<<<b, GC_THREADS, 0, c->stream>>>((const uint16_t *)x->data, idx->data, (uint16_t *)out->data, cnt, g); break;
    case 4: k_gather<<<b, GC_THREADS, 0, c->stream>>>((const uint32_t *)x->data, idx->data, (uint32_t *)out->data, cnt, g); break;
    default: k_gather<<<b, GC_THREADS, 0, c->stream>>>((const uint64_t *)x->data, idx->data, (uint64_t *)out->data, cnt, g); break;
    }
    GC_LAUNCHED(c, "gather");
    return GOBLIN_OK;
}

/* ---- scatter / scatter_add -----------------------------------------------------------
 * One thread per output element q: the writers are the index positions p equal
 * to q outside the axis with index[p] == q[axis], in row-major order = by
 * increasing p[axis]. scatter keeps the last, scatter_add sums them in order
 * starting from x[q] (f16/bf16 in f32, rounded once). */

template <typename T, bool ADD>
__global__ void k_scatter(const T *x, const void *idx, const T *src, T *out, int64_t n,
                          gc_gs g) {
    typedef typename gc_ty<T>::acc_t A;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t q[GOBLIN_MAX_RANK];
        int64_t r = i;
        bool inside = true;
        for (int32_t d = g.rank - 1; d >= 0; d--) {
            q[d] = r % g.out_shape[d];
            r /= g.out_shape[d];
            if (d != g.axis && q[d] >= g.idx_shape[d]) inside = false;
        }
        if (!inside || g.idx_shape[g.axis] == 0) {
            out[i] = x[i];
            continue;
        }
        int64_t ibase = 0, sbase = 0;
        for (int32_t d = 0; d < g.rank; d++)
            if (d != g.axis) {
                ibase += q[d] * g.idx_str[d];
                sbase += q[d] * g.src_str[d];
            }
        if (ADD) {
            A acc = gc_ty<T>::load(x[i]);
            for (int64_t j = 0; j < g.idx_shape[g.axis]; j++)
                if (gc_index_at(idx, g.i64, ibase + j * g.idx_str[g.axis]) == q[g.axis])
                    acc = gc_plus(acc, gc_ty<T>::load(src[sbase + j * g.src_str[g.axis]]));
            out[i] = gc_ty<T>::store(acc);
        } else {
            int64_t win = -1;
            for (int64_t j = 0; j < g.idx_shape[g.axis]; j++)
                if (gc_index_at(idx, g.i64, ibase + j * g.idx_str[g.axis]) == q[g.axis]) win = j;
            out[i] = win < 0 ? x[i] : src[sbase + win * g.src_str[g.axis]];
        }
    }
}

template <typename T, bool ADD>
static void launch_scatter(gc_call *c, const goblin_tensor *in, goblin_tensor *out, int64_t cnt,
                           const gc_gs &g) {
    k_scatter<T, ADD><<<gc_blocks(cnt, GC_THREADS), GC_THREADS, 0, c->stream>>>(
        (const T *)in[0].data, in[1].data, (const T *)in[2].data, (T *)out->data, cnt, g);
}

static goblin_err scatter(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                          goblin_tensor *out, bool add) {
    const goblin_tensor *x = &in[0], *idx = &in[1], *src = &in[2];
    int64_t a = goblin__attr_i(n, GOBLIN_ATTR_AXIS, 0);
    if (a < 0) a += x->rank;
    gc_gs g;
    memset(&g, 0, sizeof g);
    int32_t r;
    int64_t tmp[GOBLIN_MAX_RANK];
    nz_shape(x, &g.rank, g.out_shape, g.x_str);
    nz_shape(idx, &r, g.idx_shape, g.idx_str);
    if (gc_numel(idx) > 0) nz_shape(src, &r, tmp, g.src_str);
    g.axis = (int32_t)a;
    g.i64 = idx->dtype == GOBLIN_DTYPE_I64;
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    GC_TRYG(check_index(c, idx, 0, g.out_shape[a], "scatter index"));
    if (add) {
        GC_DISPATCH_ALL(x->dtype, (launch_scatter<T, true>(c, in, out, cnt, g)));
    } else {
        GC_DISPATCH_ALL(x->dtype, (launch_scatter<T, false>(c, in, out, cnt, g)));
    }
    GC_LAUNCHED(c, "scatter");
    return GOBLIN_OK;
}

static goblin_err k_scatter_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    return scatter(c, n, in, out, false);
}

static goblin_err k_scatter_add(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                                int32_t n_in, goblin_tensor *out) {
    return scatter(c, n, in, out, true);
}

/* ---- index_select / embedding ---------------------------------------------------------
 * Both are "out[outer, j, inner] = x[outer, index[j], inner]". */

template <typename W>
__global__ void k_take(const W *x, const void *idx, bool i64, W *out, int64_t n, int64_t nidx,
                       int64_t inner, int64_t xdim) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t in_ = i % inner, j = (i / inner) % nidx, outer = i / inner / nidx;
        out[i] = x[(outer * xdim + gc_index_at(idx, i64, j)) * inner + in_];
    }
}

static goblin_err take(gc_call *c, const goblin_tensor *x, const goblin_tensor *idx,
                       goblin_tensor *out, int64_t nidx, int64_t inner, int64_t xdim) {
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    unsigned b = gc_blocks(cnt, GC_THREADS);
    bool i64 = idx->dtype == GOBLIN_DTYPE_I64;
    switch (goblin_dtype_size(x->dtype)) {
    case 1: k_take<<<b, GC_THREADS, 0, c->stream>>>((const uint8_t *)x->data, idx->data, i64, (uint8_t *)out->data, cnt, nidx, inner, xdim); break;
    case 2: k_take<<<b, GC_THREADS, 0, c->stream>>>((const uint16_t *)x->data, idx->data, i64, (uint16_t *)out->data, cnt, nidx, inner, xdim); break;
    case 4: k_take<<<b, GC_THREADS, 0, c->stream>>>((const uint32_t *)x->data, idx->data, i64, (uint32_t *)out->data, cnt, nidx, inner, xdim); break;
    default: k_take<<<b, GC_THREADS, 0, c->stream>>>((const uint64_t *)x->data, idx->data, i64, (uint64_t *)out->data, cnt, nidx, inner, xdim); break;
    }
    GC_LAUNCHED(c, "take");
    return GOBLIN_OK;
}

static goblin_err k_index_select(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                                 int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0], *idx = &in[1];
    int64_t nidx = gc_numel(idx);
    if (x->rank == 0) {
        GC_TRYG(check_index(c, idx, 0, 1, "index_select index"));
        return take(c, x, idx, out, nidx, 1, 1);
    }
    int64_t a = goblin__attr_i(n, GOBLIN_ATTR_AXIS, 0);
    if (a < 0) a += x->rank;
    int64_t inner = 1;
    for (int32_t d = (int32_t)a + 1; d < x->rank; d++) inner *= x->shape[d];
    if (gc_numel(out) == 0) return GOBLIN_OK;
    GC_TRYG(check_index(c, idx, 0, x->shape[a], "index_select index"));
    return take(c, x, idx, out, nidx, inner, x->shape[a]);
}

static goblin_err k_embedding(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *w = &in[0], *idx = &in[1];
    if (gc_numel(out) == 0) return GOBLIN_OK;
    GC_TRYG(check_index(c, idx, 0, w->shape[0], "embedding index"));
    return take(c, w, idx, out, gc_numel(idx), w->shape[1], w->shape[0]);
}

/* ---- index_put (axis 0) ------------------------------------------------------------------
 * Per output element (row r, inner position): scan the index in order; each
 * entry equal to r (negatives count from the end) overwrites, or adds. */

template <typename T, bool ADD>
__global__ void k_index_put(const T *x, const void *idx, bool i64, const T *vals, T *out,
                            int64_t n, int64_t nidx, int64_t rows, int64_t inner, gc_bcast vb) {
    typedef typename gc_ty<T>::acc_t A;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = i / inner, in_ = i % inner;
        A acc = gc_ty<T>::load(x[i]);
        T last = x[i];
        for (int64_t j = 0; j < nidx; j++) {
            int64_t v = gc_index_at(idx, i64, j);
            if (v < 0) v += rows;
            if (v != row) continue;
            int64_t off[1];
            gc_bcast_offsets(vb, j * inner + in_, 1, off);
            if (ADD) acc = gc_plus(acc, gc_ty<T>::load(vals[off[0]]));
            else last = vals[off[0]];
        }
        out[i] = ADD ? gc_ty<T>::store(acc) : last;
    }
}

template <typename T>
static void launch_index_put(gc_call *c, bool add, const goblin_tensor *in, goblin_tensor *out,
                             int64_t cnt, int64_t nidx, int64_t rows, int64_t inner,
                             const gc_bcast &vb) {
    unsigned b = gc_blocks(cnt, GC_THREADS);
    bool i64 = in[1].dtype == GOBLIN_DTYPE_I64;
    if (add)
        k_index_put<T, true><<<b, GC_THREADS, 0, c->stream>>>(
            (const T *)in[0].data, in[1].data, i64, (const T *)in[2].data, (T *)out->data, cnt,
            nidx, rows, inner, vb);
    else
        k_index_put<T, false><<<b, GC_THREADS, 0, c->stream>>>(
            (const T *)in[0].data, in[1].data, i64, (const T *)in[2].data, (T *)out->data, cnt,
            nidx, rows, inner, vb);
}

static goblin_err k_index_put_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                                 int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0], *idx = &in[1], *v = &in[2];
    bool add = goblin__attr_i(n, GOBLIN_ATTR_ACCUMULATE, 0) != 0;
    int64_t rows = x->shape[0], nidx = gc_numel(idx);
    int64_t inner = 1;
    for (int32_t d = 1; d < x->rank; d++) inner *= x->shape[d];
    int64_t cnt = gc_numel(out);
    if (cnt == 0) return GOBLIN_OK;
    GC_TRYG(check_index(c, idx, -rows, rows, "index_put index"));
    /* values broadcast to the indexed region [nidx, x.shape[1:]] ([x.shape[1:]] for a
     * 0-d index, which has the same element order with nidx = 1). */
    goblin_tensor region;
    memset(&region, 0, sizeof region);
    region.dtype = x->dtype;
    region.rank = 0;
    if (idx->rank) region.shape[region.rank++] = nidx;
    for (int32_t d = 1; d < x->rank; d++) region.shape[region.rank++] = x->shape[d];
    const goblin_tensor *ops[1] = {v};
    gc_bcast vb;
    gc_bcast_init(&vb, ops, 1, &region);
    GC_DISPATCH_ALL(x->dtype, (launch_index_put<T>(c, add, in, out, cnt, nidx, rows, inner, vb)));
    GC_LAUNCHED(c, "index_put");
    return GOBLIN_OK;
}

static goblin_err k_copy(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                         int32_t n_in, goblin_tensor *out) {
    return copy_all(c, &in[0], out);
}

void gc_register_shape(gc_entry *t) {
#define REG(OP, NAME) t[GOBLIN_OP_##OP].fn = k_##NAME;
    REG(RESHAPE, reshape) REG(PERMUTE, permute) REG(EXPAND, expand) REG(SLICE, slice)
    REG(SELECT, select) REG(SPLIT, split) REG(CONCAT, concat) REG(STACK, stack) REG(PAD, pad)
    REG(COPY, copy) REG(GATHER, gather_op) REG(SCATTER, scatter_op) REG(SCATTER_ADD, scatter_add)
    REG(INDEX_SELECT, index_select) REG(EMBEDDING, embedding) REG(INDEX_PUT, index_put_op)
#undef REG
}
