/* libgoblin/backends/cuda/cuda_reduce.cu - reductions, cumsum, softmax,
 * normalization and the classification losses on the device.
 *
 * Like the reference backend, every float dtype accumulates in double and is
 * rounded once into the output; integer and bool sums/products wrap modulo 2^64
 * and come out as i64. The input is first laid out as rows [M, K] (kept dims,
 * then reduced dims, each in their original order; no copy when the reduced
 * dims are already the trailing ones). A row is cut into fixed chunks of
 * GC_CHUNK elements; each chunk is reduced by one block (each thread a strided
 * sequence, then a shared-memory tree of fixed shape), and the chunk results
 * are reduced the same way until one value per row remains. The partition and
 * the combine order depend on M and K only, never on the device, and no float
 * atomics are used: results are bit-reproducible on a given GPU.
 *
 * max/min/argmax/argmin carry (value, position) pairs and combine them with a
 * rule that is associative and commutative (NaN first, then the larger/smaller
 * value, ties to the earlier position), so the tree gives exactly the
 * reference's sequential answer, including which of -0/+0 and which NaN. */
#include <type_traits>

#include "cuda_scalar.h"
#include "backends/kernel_attrs.h"

#define GC_RED_THREADS 256
#define GC_CHUNK 8192
#define GC_SERIAL_K 32 /* rows this short are reduced by one thread each */

/* ---- the row reduction engine --------------------------------------------------- */

template <typename R, typename E, bool RAW>
__device__ __forceinline__ typename R::acc gc_red_load(const R &r, const E *x, int64_t row,
                                                       int64_t K, int64_t j) {
    if constexpr (RAW) return x[row * K + j];
    else return r.map(x[row * K + j], row, j);
}

/* One thread per row. */
template <typename R, typename E, bool RAW>
__global__ void k_red_serial(const E *x, int64_t M, int64_t K, typename R::acc *res, R r) {
    for (int64_t row = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; row < M;
         row += (int64_t)gridDim.x * blockDim.x) {
        typename R::acc a = r.identity();
        for (int64_t j = 0; j < K; j++) a = r.combine(a, gc_red_load<R, E, RAW>(r, x, row, K, j));
        res[row] = a;
    }
}

/* One block per (row, chunk); out[row * nch + ch]. */
template <typename R, typename E, bool RAW>
__global__ void __launch_bounds__(GC_RED_THREADS)
k_red_chunks(const E *x, int64_t M, int64_t K, int64_t nch, typename R::acc *out, R r) {
    typedef typename R::acc A;
    __shared__ A sh[GC_RED_THREADS];
    for (int64_t blk = blockIdx.x; blk < M * nch; blk += gridDim.x) {
        int64_t row = blk / nch, ch = blk % nch;
        int64_t lo = ch * GC_CHUNK, hi = lo + GC_CHUNK < K ? lo + GC_CHUNK : K;
        A a = r.identity();
        for (int64_t j = lo + threadIdx.x; j < hi; j += GC_RED_THREADS)
            a = r.combine(a, gc_red_load<R, E, RAW>(r, x, row, K, j));
        sh[threadIdx.x] = a;
        __syncthreads();
        for (int s = GC_RED_THREADS / 2; s > 0; s >>= 1) {
            if ((int)threadIdx.x < s) sh[threadIdx.x] = r.combine(sh[threadIdx.x], sh[threadIdx.x + s]);
            __syncthreads();
        }
        if (threadIdx.x == 0) out[blk] = sh[0];
        __syncthreads(); /* sh is reused by the next block of the loop */
    }
}

static unsigned blocks_for(int64_t n) { return (unsigned)(n < (1 << 20) ? (n < 1 ? 1 : n) : (1 << 20)); }

/* Reduce rows [M, K] of @p x into @p res[M] (device, allocated here). */
template <typename R, typename T>
static goblin_err reduce_rows(gc_call *c, const T *x, int64_t M, int64_t K, const R &r,
                              typename R::acc **res) {
    typedef typename R::acc A;
    *res = NULL;
    GC_TRYG(gc_scratch(c, (size_t)(M ? M : 1) * sizeof(A), (void **)res));
    if (M == 0) return GOBLIN_OK;
    if (K <= GC_SERIAL_K) {
        k_red_serial<R, T, false><<<gc_blocks(M, GC_THREADS), GC_THREADS, 0, c->stream>>>(
            x, M, K, *res, r);
        GC_LAUNCHED(c, "reduce");
        return GOBLIN_OK;
    }
    int64_t nch = (K + GC_CHUNK - 1) / GC_CHUNK;
    A *part = *res;
    if (nch > 1) GC_TRYG(gc_scratch(c, (size_t)(M * nch) * sizeof(A), (void **)&part));
    k_red_chunks<R, T, false><<<blocks_for(M * nch), GC_RED_THREADS, 0, c->stream>>>(
        x, M, K, nch, part, r);
    GC_LAUNCHED(c, "reduce");
    while (nch > 1) {
        int64_t k2 = nch;
        nch = (k2 + GC_CHUNK - 1) / GC_CHUNK;
        A *next = *res;
        if (nch > 1) GC_TRYG(gc_scratch(c, (size_t)(M * nch) * sizeof(A), (void **)&next));
        if (k2 <= GC_SERIAL_K)
            k_red_serial<R, A, true><<<gc_blocks(M, GC_THREADS), GC_THREADS, 0, c->stream>>>(
                part, M, k2, next, r);
        else
            k_red_chunks<R, A, true><<<blocks_for(M * nch), GC_RED_THREADS, 0, c->stream>>>(
                part, M, k2, nch, next, r);
        GC_LAUNCHED(c, "reduce");
        part = next;
    }
    return GOBLIN_OK;
}

/* ---- rows layout ------------------------------------------------------------------- */

typedef struct gc_rows {
    int32_t rank;
    int64_t M, K;
    int32_t perm[GOBLIN_MAX_RANK]; /* kept dims, then reduced dims */
    int64_t pshape[GOBLIN_MAX_RANK];
    bool identity;                 /* perm is the identity: no copies needed */
} gc_rows;

static void rows_plan(gc_rows *p, const goblin_tensor *x, uint32_t mask) {
    memset(p, 0, sizeof *p);
    p->rank = x->rank;
    p->M = p->K = 1;
    int32_t r = 0;
    for (int32_t d = 0; d < x->rank; d++)
        if (!(mask & (1u << d))) {
            p->perm[r++] = d;
            p->M *= x->shape[d];
        }
    for (int32_t d = 0; d < x->rank; d++)
        if (mask & (1u << d)) {
            p->perm[r++] = d;
            p->K *= x->shape[d];
        }
    p->identity = true;
    for (int32_t d = 0; d < x->rank; d++) {
        p->pshape[d] = x->shape[p->perm[d]];
        if (p->perm[d] != d) p->identity = false;
    }
}

/* x as contiguous rows [M, K]: x itself or a permuted copy in scratch memory. */
static goblin_err to_rows(gc_call *c, const goblin_tensor *x, const gc_rows *p, const void **rows) {
    *rows = x->data;
    if (p->identity) return GOBLIN_OK;
    size_t esz = goblin_dtype_size(x->dtype);
    void *buf = NULL;
    GC_TRYG(gc_scratch(c, (size_t)(p->M * p->K) * esz, &buf));
    int64_t sstr[GOBLIN_MAX_RANK], dstr[GOBLIN_MAX_RANK];
    for (int32_t d = 0; d < p->rank; d++) sstr[d] = x->strides[p->perm[d]];
    gc_contig_strides(p->rank, p->pshape, dstr);
    GC_TRYG(gc_copy_strided(c, x->data, buf, p->rank, p->pshape, sstr, 0, dstr, 0, esz));
    *rows = buf;
    return GOBLIN_OK;
}

/* Where rows-layout results go in @p out (shaped like x): @p *dst is either out's
 * memory (identity) or scratch to be moved with from_rows. */
static goblin_err rows_out(gc_call *c, goblin_tensor *out, const gc_rows *p, void **dst) {
    *dst = out->data;
    if (p->identity) return GOBLIN_OK;
    return gc_scratch(c, (size_t)(p->M * p->K) * goblin_dtype_size(out->dtype), dst);
}

static goblin_err from_rows(gc_call *c, const void *rows, goblin_tensor *out, const gc_rows *p) {
    if (p->identity) return GOBLIN_OK;
    int64_t sstr[GOBLIN_MAX_RANK], ostr[GOBLIN_MAX_RANK], dstr[GOBLIN_MAX_RANK];
    gc_contig_strides(p->rank, p->pshape, sstr);
    gc_contig_strides(out->rank, out->shape, ostr);
    for (int32_t d = 0; d < p->rank; d++) dstr[d] = ostr[p->perm[d]];
    return gc_copy_strided(c, rows, out->data, p->rank, p->pshape, sstr, 0, dstr, 0,
                           goblin_dtype_size(out->dtype));
}

/* ---- reducers ---------------------------------------------------------------------- */

struct RSumF {
    typedef double acc;
    __device__ double identity() const { return 0.0; }
    __device__ double combine(double a, double b) const { return a + b; }
    template <typename T> __device__ double map(T x, int64_t, int64_t) const { return gc_ld_f(x); }
};
struct RProdF {
    typedef double acc;
    __device__ double identity() const { return 1.0; }
    __device__ double combine(double a, double b) const { return a * b; }
    template <typename T> __device__ double map(T x, int64_t, int64_t) const { return gc_ld_f(x); }
};
struct RSumI {
    typedef uint64_t acc;
    __device__ uint64_t identity() const { return 0; }
    __device__ uint64_t combine(uint64_t a, uint64_t b) const { return a + b; }
    template <typename T> __device__ uint64_t map(T x, int64_t, int64_t) const {
        return (uint64_t)gc_ld_i(x);
    }
};
struct RProdI {
    typedef uint64_t acc;
    __device__ uint64_t identity() const { return 1; }
    __device__ uint64_t combine(uint64_t a, uint64_t b) const { return a * b; }
    template <typename T> __device__ uint64_t map(T x, int64_t, int64_t) const {
        return (uint64_t)gc_ld_i(x);
    }
};
/* Sum of squared deviations from a per-row mean (VAR's second pass). */
struct RDev2 {
    typedef double acc;
    const double *mean;
    __device__ double identity() const { return 0.0; }
    __device__ double combine(double a, double b) const { return a + b; }
    template <typename T> __device__ double map(T x, int64_t row, int64_t) const {
        double d = gc_ld_f(x) - mean[row];
        return d * d;
    }
};

template <typename V> struct gc_vi {
    V v;
    int64_t i; /* position in the row; -1 for the identity (nothing seen) */
};

/* MAX: extreme = largest; NaN beats everything; ties go to the earlier position. */
template <typename V, bool MAX> struct RExt {
    typedef gc_vi<V> acc;
    __device__ acc identity() const { acc a; a.v = 0; a.i = -1; return a; }
    __device__ acc combine(acc a, acc b) const {
        if (a.i < 0) return b;
        if (b.i < 0) return a;
        bool an = a.v != a.v, bn = b.v != b.v;
        if (an || bn) {
            if (an && bn) return a.i < b.i ? a : b;
            return an ? a : b;
        }
        if (MAX ? a.v > b.v : a.v < b.v) return a;
        if (MAX ? b.v > a.v : b.v < a.v) return b;
        return a.i < b.i ? a : b;
    }
    template <typename T> __device__ acc map(T x, int64_t, int64_t j) const {
        acc a;
        if constexpr (gc_ty<T>::is_float) a.v = (V)gc_ld_f(x);
        else a.v = (V)gc_ld_i(x);
        a.i = j;
        return a;
    }
};

/* ---- finalize kernels ---------------------------------------------------------------- */

template <typename O> __device__ __forceinline__ O gc_from_d(double v) {
    if constexpr (gc_ty<O>::is_float) return gc_ty<O>::store((typename gc_ty<O>::acc_t)v);
    else return gc_ty<O>::store((typename gc_ty<O>::acc_t)(int64_t)v);
}
template <typename O> __device__ __forceinline__ O gc_from_i(int64_t v) {
    if constexpr (gc_ty<O>::is_float) return gc_ty<O>::store((typename gc_ty<O>::acc_t)(double)v);
    else return gc_ty<O>::store((typename gc_ty<O>::acc_t)v);
}
template <> __device__ __forceinline__ gc_bool gc_from_i<gc_bool>(int64_t v) {
    gc_bool b;
    b.v = v != 0;
    return b;
}

enum { FIN_SUM, FIN_MEAN, FIN_VAR };

template <typename O>
__global__ void k_fin_f(const double *acc, O *out, int64_t M, int mode, double k, double corr) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M;
         i += (int64_t)gridDim.x * blockDim.x) {
        double v = acc[i];
        if (mode == FIN_MEAN) v = v / k;
        else if (mode == FIN_VAR) {
            double div = k - corr;
            v = v / (div > 0 ? div : 0.0);
        }
        out[i] = gc_from_d<O>(v);
    }
}

__global__ void k_fin_i(const uint64_t *acc, int64_t *out, int64_t M) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = (int64_t)acc[i];
}

template <typename V, typename O>
__global__ void k_fin_ext(const gc_vi<V> *acc, O *out, int64_t M, bool want_index) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (want_index) {
            ((int64_t *)out)[i] = acc[i].i < 0 ? 0 : acc[i].i;
        } else {
            if constexpr (gc_ty<O>::is_float) out[i] = gc_from_d<O>((double)acc[i].v);
            else out[i] = gc_from_i<O>((int64_t)acc[i].v);
        }
    }
}

/* ---- SUM MEAN PROD VAR REDUCE_MAX REDUCE_MIN ARGMAX ARGMIN ---------------------------- */

static goblin_err bad_dtype(gc_call *c, const goblin__node *n, goblin_dtype dt) {
    /* ENOTSUP: the executor then runs the reference kernel (counted). */
    return goblin__errf(c->k->msg, c->k->cap, GOBLIN_ENOTSUP, "cuda: %s has no kernel for %s",
                        goblin_op_name(n->op), goblin_dtype_name(dt));
}

template <typename T>
static goblin_err reduce_t(gc_call *c, const goblin__node *n, const goblin_tensor *x,
                           goblin_tensor *out, uint32_t mask) {
    gc_rows p;
    rows_plan(&p, x, mask);
    if (p.M == 0) return GOBLIN_OK;
    goblin_op op = n->op;
    if (p.K == 0 && (op == GOBLIN_OP_REDUCE_MAX || op == GOBLIN_OP_REDUCE_MIN ||
                     op == GOBLIN_OP_ARGMAX || op == GOBLIN_OP_ARGMIN))
        return goblin__errf(c->k->msg, c->k->cap, GOBLIN_ERANGE, "reduction over zero elements");
    const void *rv = NULL;
    GC_TRYG(to_rows(c, x, &p, &rv));
    const T *rows = (const T *)rv;
    unsigned b = gc_blocks(p.M, GC_THREADS);
    cudaStream_t s = c->stream;
    constexpr bool fl = gc_ty<T>::is_float;
    typedef typename std::conditional<fl, double, int64_t>::type V;
    switch (op) {
    case GOBLIN_OP_SUM:
    case GOBLIN_OP_MEAN:
    case GOBLIN_OP_PROD:
    case GOBLIN_OP_VAR:
        if constexpr (fl) {
            double *acc = NULL;
            if (op == GOBLIN_OP_PROD) GC_TRYG(reduce_rows(c, rows, p.M, p.K, RProdF(), &acc));
            else GC_TRYG(reduce_rows(c, rows, p.M, p.K, RSumF(), &acc));
            int mode = op == GOBLIN_OP_MEAN ? FIN_MEAN : FIN_SUM;
            double corr = 0;
            if (op == GOBLIN_OP_VAR) {
                double *mean = NULL;
                GC_TRYG(gc_scratch(c, (size_t)p.M * sizeof(double), (void **)&mean));
                k_fin_f<double><<<b, GC_THREADS, 0, s>>>(acc, mean, p.M, FIN_MEAN, (double)p.K, 0);
                GC_LAUNCHED(c, "var");
                RDev2 r;
                r.mean = mean;
                GC_TRYG(reduce_rows(c, rows, p.M, p.K, r, &acc));
                mode = FIN_VAR;
                corr = (double)goblin__attr_i(n, GOBLIN_ATTR_CORRECTION, 1);
            }
            k_fin_f<T><<<b, GC_THREADS, 0, s>>>(acc, (T *)out->data, p.M, mode, (double)p.K, corr);
        } else {
            if (op == GOBLIN_OP_MEAN || op == GOBLIN_OP_VAR) return bad_dtype(c, n, x->dtype);
            uint64_t *acc = NULL;
            if (op == GOBLIN_OP_PROD) GC_TRYG(reduce_rows(c, rows, p.M, p.K, RProdI(), &acc));
            else GC_TRYG(reduce_rows(c, rows, p.M, p.K, RSumI(), &acc));
            k_fin_i<<<b, GC_THREADS, 0, s>>>(acc, (int64_t *)out->data, p.M);
        }
        break;
    case GOBLIN_OP_REDUCE_MAX:
    case GOBLIN_OP_ARGMAX: {
        gc_vi<V> *acc = NULL;
        GC_TRYG(reduce_rows(c, rows, p.M, p.K, RExt<V, true>(), &acc));
        k_fin_ext<V, T><<<b, GC_THREADS, 0, s>>>(acc, (T *)out->data, p.M, op == GOBLIN_OP_ARGMAX);
        break;
    }
    case GOBLIN_OP_REDUCE_MIN:
    case GOBLIN_OP_ARGMIN: {
        gc_vi<V> *acc = NULL;
        GC_TRYG(reduce_rows(c, rows, p.M, p.K, RExt<V, false>(), &acc));
        k_fin_ext<V, T><<<b, GC_THREADS, 0, s>>>(acc, (T *)out->data, p.M, op == GOBLIN_OP_ARGMIN);
        break;
    }
    default: return bad_dtype(c, n, x->dtype);
    }
    GC_LAUNCHED(c, "reduce");
    return GOBLIN_OK;
}

static goblin_err k_reduce(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    const goblin_tensor *x = &in[0];
    uint32_t mask;
    if (n->op == GOBLIN_OP_ARGMAX || n->op == GOBLIN_OP_ARGMIN)
        mask = goblin__attr_find(n, GOBLIN_ATTR_AXIS) ? goblin__axis_mask(n, x->rank, 0)
                                                       : (1u << x->rank) - 1u;
    else
        mask = goblin__axes_mask(n, x->rank);
    goblin_err g = GOBLIN_ENOTSUP;
    GC_DISPATCH_ALL(x->dtype, g = reduce_t<T>(c, n, x, out, mask));
    return g == GOBLIN_ENOTSUP ? bad_dtype(c, n, x->dtype) : g;
}

/* ---- CUMSUM: one thread per row, sequential (the reference's order) ------------------- */

template <typename T, typename O>
__global__ void k_cumsum(const T *x, O *y, int64_t M, int64_t K) {
    for (int64_t row = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; row < M;
         row += (int64_t)gridDim.x * blockDim.x) {
        if constexpr (gc_ty<T>::is_float) {
            double acc = 0;
            for (int64_t j = 0; j < K; j++) {
                acc += gc_ld_f(x[row * K + j]);
                y[row * K + j] = gc_from_d<O>(acc);
            }
        } else {
            uint64_t acc = 0;
            for (int64_t j = 0; j < K; j++) {
                acc += (uint64_t)gc_ld_i(x[row * K + j]);
                ((int64_t *)y)[row * K + j] = (int64_t)acc;
            }
        }
    }
}

template <typename T>
static goblin_err cumsum_t(gc_call *c, const goblin__node *n, const goblin_tensor *x,
                           goblin_tensor *out) {
    gc_rows p;
    rows_plan(&p, x, goblin__axis_mask(n, x->rank, 0));
    if (p.M * p.K == 0) return GOBLIN_OK;
    const void *rows = NULL;
    void *dst = NULL;
    GC_TRYG(to_rows(c, x, &p, &rows));
    GC_TRYG(rows_out(c, out, &p, &dst));
    unsigned b = gc_blocks(p.M, GC_THREADS);
    if constexpr (gc_ty<T>::is_float)
        k_cumsum<T, T><<<b, GC_THREADS, 0, c->stream>>>((const T *)rows, (T *)dst, p.M, p.K);
    else
        k_cumsum<T, int64_t><<<b, GC_THREADS, 0, c->stream>>>((const T *)rows, (int64_t *)dst,
                                                               p.M, p.K);
    GC_LAUNCHED(c, "cumsum");
    return from_rows(c, dst, out, &p);
}

static goblin_err k_cumsum_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    goblin_err g = GOBLIN_ENOTSUP;
    GC_DISPATCH_ALL(in[0].dtype, g = cumsum_t<T>(c, n, &in[0], out));
    return g == GOBLIN_ENOTSUP ? bad_dtype(c, n, in[0].dtype) : g;
}

/* ---- block-wide helpers for per-row kernels (one block per row) ---------------------- */

__device__ __forceinline__ double gc_block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = GC_RED_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* NaN-propagating max (any NaN gives NaN). */
__device__ __forceinline__ double gc_nmax(double a, double b) {
    if (a != a) return a;
    if (b != b) return b;
    return b > a ? b : a;
}

__device__ __forceinline__ double gc_block_max(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = GC_RED_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = gc_nmax(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* ---- SOFTMAX / LOG_SOFTMAX --------------------------------------------------------------
 * Per row, in double: m = max (NaN if any), s = sum exp(x - m), then exp(x - m) / s
 * or (x - m) - log s; an infinite m gives NaN through inf - inf, as the reference. */

template <typename T>
__global__ void __launch_bounds__(GC_RED_THREADS)
k_softmax(const T *x, T *y, int64_t M, int64_t K, bool lg) {
    __shared__ double sh[GC_RED_THREADS];
    for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
        const T *xr = x + row * K;
        T *yr = y + row * K;
        double m = -INFINITY;
        for (int64_t j = threadIdx.x; j < K; j += GC_RED_THREADS) m = gc_nmax(m, gc_ld_f(xr[j]));
        m = gc_block_max(m, sh);
        double s = 0;
        for (int64_t j = threadIdx.x; j < K; j += GC_RED_THREADS) s += exp(gc_ld_f(xr[j]) - m);
        s = gc_block_sum(s, sh);
        double ls = log(s);
        for (int64_t j = threadIdx.x; j < K; j += GC_RED_THREADS) {
            double d = gc_ld_f(xr[j]) - m;
            yr[j] = gc_from_d<T>(lg ? d - ls : exp(d) / s);
        }
    }
}

template <typename T>
static goblin_err softmax_t(gc_call *c, const goblin__node *n, const goblin_tensor *x,
                            goblin_tensor *out) {
    gc_rows p;
    rows_plan(&p, x, goblin__axis_mask(n, x->rank, -1));
    if (p.M * p.K == 0) return GOBLIN_OK;
    const void *rows = NULL;
    void *dst = NULL;
    GC_TRYG(to_rows(c, x, &p, &rows));
    GC_TRYG(rows_out(c, out, &p, &dst));
    k_softmax<T><<<blocks_for(p.M), GC_RED_THREADS, 0, c->stream>>>(
        (const T *)rows, (T *)dst, p.M, p.K, n->op == GOBLIN_OP_LOG_SOFTMAX);
    GC_LAUNCHED(c, "softmax");
    return from_rows(c, dst, out, &p);
}

static goblin_err k_softmax_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    goblin_err g = GOBLIN_ENOTSUP;
    GC_DISPATCH_FLOAT(in[0].dtype, g = softmax_t<T>(c, n, &in[0], out));
    return g == GOBLIN_ENOTSUP ? bad_dtype(c, n, in[0].dtype) : g;
}

/* ---- LAYER_NORM / RMS_NORM: one block per row of the last norm_ndim dims ------------- */

template <typename T>
__global__ void __launch_bounds__(GC_RED_THREADS)
k_norm(const T *x, const T *w, const T *bias, T *y, int64_t M, int64_t K, bool rms, double eps) {
    __shared__ double sh[GC_RED_THREADS];
    for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
        const T *xr = x + row * K;
        T *yr = y + row * K;
        double mean = 0;
        if (!rms) {
            double s = 0;
            for (int64_t j = threadIdx.x; j < K; j += GC_RED_THREADS) s += gc_ld_f(xr[j]);
            mean = gc_block_sum(s, sh) / (double)K;
        }
        double m2 = 0;
        for (int64_t j = threadIdx.x; j < K; j += GC_RED_THREADS) {
            double d = gc_ld_f(xr[j]) - mean;
            m2 += d * d;
        }
        m2 = gc_block_sum(m2, sh);
        double rstd = 1.0 / sqrt(m2 / (double)K + eps);
        for (int64_t j = threadIdx.x; j < K; j += GC_RED_THREADS) {
            double v = (gc_ld_f(xr[j]) - mean) * rstd;
            if (w) v *= gc_ld_f(w[j]);
            if (bias) v += gc_ld_f(bias[j]);
            yr[j] = gc_from_d<T>(v);
        }
    }
}

template <typename T>
static goblin_err norm_t(gc_call *c, const goblin__node *n, const goblin_tensor *in, int32_t n_in,
                         goblin_tensor *out) {
    const goblin_tensor *x = &in[0];
    bool rms = n->op == GOBLIN_OP_RMS_NORM;
    int64_t nd = goblin__attr_i(n, GOBLIN_ATTR_NORM_NDIM, 1);
    double eps = goblin__attr_f(n, GOBLIN_ATTR_EPS, rms ? 1e-6 : 1e-5);
    int64_t K = 1, M = 1;
    for (int32_t d = 0; d < x->rank; d++) {
        if (d >= x->rank - nd) K *= x->shape[d];
        else M *= x->shape[d];
    }
    if (M * K == 0) return GOBLIN_OK;
    k_norm<T><<<blocks_for(M), GC_RED_THREADS, 0, c->stream>>>(
        (const T *)x->data, n_in > 1 ? (const T *)in[1].data : NULL,
        n_in > 2 ? (const T *)in[2].data : NULL, (T *)out->data, M, K, rms, eps);
    GC_LAUNCHED(c, "norm");
    return GOBLIN_OK;
}

static goblin_err k_norm_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    goblin_err g = GOBLIN_ENOTSUP;
    GC_DISPATCH_FLOAT(in[0].dtype, g = norm_t<T>(c, n, in, n_in, out));
    return g == GOBLIN_ENOTSUP ? bad_dtype(c, n, in[0].dtype) : g;
}

/* ---- BATCH_NORM -------------------------------------------------------------------------
 * x [N, C, S...]: per channel statistics (training: over N and S, biased
 * variance, computed on rows [C, N*S] of a permuted copy; else the running
 * statistics), then one elementwise pass. */

template <typename T>
__global__ void __launch_bounds__(GC_RED_THREADS)
k_channel_stats(const T *rows, int64_t C, int64_t K, double *mean, double *var) {
    __shared__ double sh[GC_RED_THREADS];
    for (int64_t ch = blockIdx.x; ch < C; ch += gridDim.x) {
        const T *xr = rows + ch * K;
        double s = 0;
        for (int64_t j = threadIdx.x; j < K; j += GC_RED_THREADS) s += gc_ld_f(xr[j]);
        double m = gc_block_sum(s, sh) / (double)K;
        double m2 = 0;
        for (int64_t j = threadIdx.x; j < K; j += GC_RED_THREADS) {
            double d = gc_ld_f(xr[j]) - m;
            m2 += d * d;
        }
        m2 = gc_block_sum(m2, sh);
        if (threadIdx.x == 0) {
            mean[ch] = m;
            var[ch] = m2 / (double)K;
        }
    }
}

template <typename T>
__global__ void k_running_stats(const T *rm, const T *rv, int64_t C, double *mean, double *var) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < C;
         i += (int64_t)gridDim.x * blockDim.x) {
        mean[i] = gc_ld_f(rm[i]);
        var[i] = gc_ld_f(rv[i]);
    }
}

template <typename T>
__global__ void k_bn_apply(const T *x, const T *w, const T *b, const double *mean,
                           const double *var, T *y, int64_t n, int64_t C, int64_t S, double eps) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ch = (i / S) % C;
        double rstd = 1.0 / sqrt(var[ch] + eps);
        double v = (gc_ld_f(x[i]) - mean[ch]) * rstd * gc_ld_f(w[ch]) + gc_ld_f(b[ch]);
        y[i] = gc_from_d<T>(v);
    }
}

template <typename T>
static goblin_err batch_norm_t(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                               goblin_tensor *out) {
    const goblin_tensor *x = &in[0];
    int64_t N = x->shape[0], C = x->shape[1], S = 1;
    for (int32_t d = 2; d < x->rank; d++) S *= x->shape[d];
    bool training = goblin__attr_i(n, GOBLIN_ATTR_TRAINING, 0) != 0;
    double eps = goblin__attr_f(n, GOBLIN_ATTR_EPS, 1e-5);
    int64_t cnt = gc_numel(x);
    if (cnt == 0) return GOBLIN_OK;
    double *mean = NULL, *var = NULL;
    GC_TRYG(gc_scratch(c, (size_t)C * sizeof(double), (void **)&mean));
    GC_TRYG(gc_scratch(c, (size_t)C * sizeof(double), (void **)&var));
    if (training) {
        /* [N, C, S] -> [C, N, S] */
        const void *rows = NULL;
        gc_rows p;
        memset(&p, 0, sizeof p);
        goblin_tensor x3 = *x;
        x3.rank = 3;
        x3.shape[0] = N;
        x3.shape[1] = C;
        x3.shape[2] = S;
        gc_contig_strides(3, x3.shape, x3.strides);
        rows_plan(&p, &x3, 0x5u); /* reduce N and S: kept C first */
        GC_TRYG(to_rows(c, &x3, &p, &rows));
        k_channel_stats<T><<<blocks_for(C), GC_RED_THREADS, 0, c->stream>>>((const T *)rows, C,
                                                                           N * S, mean, var);
    } else {
        k_running_stats<T><<<gc_blocks(C, GC_THREADS), GC_THREADS, 0, c->stream>>>(
            (const T *)in[3].data, (const T *)in[4].data, C, mean, var);
    }
    GC_LAUNCHED(c, "batch_norm stats");
    k_bn_apply<T><<<gc_blocks(cnt, GC_THREADS), GC_THREADS, 0, c->stream>>>(
        (const T *)x->data, (const T *)in[1].data, (const T *)in[2].data, mean, var,
        (T *)out->data, cnt, C, S, eps);
    GC_LAUNCHED(c, "batch_norm");
    return GOBLIN_OK;
}

static goblin_err k_batch_norm(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    goblin_err g = GOBLIN_ENOTSUP;
    GC_DISPATCH_FLOAT(in[0].dtype, g = batch_norm_t<T>(c, n, in, out));
    return g == GOBLIN_ENOTSUP ? bad_dtype(c, n, in[0].dtype) : g;
}

/* ---- NLL_LOSS / CROSS_ENTROPY -------------------------------------------------------------
 * Input [N, C, D...] or [C]; element (i, c, d) at (i*C + c)*D + d; target (i, d)
 * at i*D + d. One thread per target computes its loss and weight in double
 * (cross_entropy: the log-softmax over classes as the reference computes it);
 * mean/sum reduce those with the deterministic row engine. */

template <typename T, typename I>
__global__ void k_loss_bad(const I *tg, int64_t P, int64_t C, int64_t ignore,
                           unsigned long long *first_bad) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < P;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = (int64_t)tg[i];
        if (t != ignore && (t < 0 || t >= C)) atomicMin(first_bad, (unsigned long long)i);
    }
}

template <typename T, typename I>
__global__ void k_loss(const T *x, const I *tg, const T *wt, int64_t P, int64_t C, int64_t D,
                       int64_t ignore, bool ce, double eps, double *loss, double *wsum) {
    for (int64_t pos = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; pos < P;
         pos += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = (int64_t)tg[pos];
        double l = 0, w = 0;
        if (t != ignore) {
            int64_t i = pos / D, d = pos % D;
            int64_t base = i * C * D + d;
            w = wt ? gc_ld_f(wt[t]) : 1.0;
            if (ce) {
                double m = -INFINITY, s = 0, smooth = 0;
                for (int64_t cc = 0; cc < C; cc++) {
                    double v = gc_ld_f(x[base + cc * D]);
                    if (v > m || v != v) m = v;
                }
                for (int64_t cc = 0; cc < C; cc++) s += exp(gc_ld_f(x[base + cc * D]) - m);
                double ls = log(s);
                double lp_t = gc_ld_f(x[base + t * D]) - m - ls;
                if (eps != 0)
                    for (int64_t cc = 0; cc < C; cc++) {
                        double lp = gc_ld_f(x[base + cc * D]) - m - ls;
                        smooth -= (wt ? gc_ld_f(wt[cc]) : 1.0) * lp;
                    }
                l = (1 - eps) * (-w * lp_t) + eps / (double)C * smooth;
            } else {
                l = -w * gc_ld_f(x[base + t * D]);
            }
        }
        loss[pos] = l;
        wsum[pos] = w;
    }
}

template <typename T>
__global__ void k_loss_none(const double *loss, T *y, int64_t P) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < P;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = gc_from_d<T>(loss[i]);
}

template <typename T>
__global__ void k_loss_fin(const double *total, const double *wsum, T *y, bool mean) {
    if (blockIdx.x == 0 && threadIdx.x == 0) y[0] = gc_from_d<T>(mean ? total[0] / wsum[0] : total[0]);
}

template <typename T, typename I>
static goblin_err loss_t(gc_call *c, const goblin__node *n, const goblin_tensor *in, int32_t n_in,
                         goblin_tensor *out) {
    const goblin_tensor *x = &in[0], *t = &in[1];
    bool ce = n->op == GOBLIN_OP_CROSS_ENTROPY;
    int64_t N = 1, C, D = 1;
    if (x->rank == 1) {
        C = x->shape[0];
    } else {
        N = x->shape[0];
        C = x->shape[1];
        for (int32_t d = 2; d < x->rank; d++) D *= x->shape[d];
    }
    int64_t P = N * D;
    int64_t red = goblin__attr_i(n, GOBLIN_ATTR_REDUCTION, GOBLIN_REDUCTION_MEAN);
    int64_t ignore = goblin__attr_i(n, GOBLIN_ATTR_IGNORE_INDEX, -100);
    double eps = ce ? goblin__attr_f(n, GOBLIN_ATTR_LABEL_SMOOTHING, 0.0) : 0.0;
    const T *wt = n_in > 2 ? (const T *)in[2].data : NULL;
    if (P > 0) {
        unsigned long long *bad = NULL;
        GC_TRYG(gc_scratch(c, sizeof *bad, (void **)&bad));
        GC_TRY(c, cudaMemsetAsync(bad, 0xff, sizeof *bad, c->stream));
        k_loss_bad<T, I><<<gc_blocks(P, GC_THREADS), GC_THREADS, 0, c->stream>>>(
            (const I *)t->data, P, C, ignore, bad);
        GC_LAUNCHED(c, "loss check");
        unsigned long long pos = 0;
        GC_TRY(c, cudaMemcpyAsync(&pos, bad, sizeof pos, cudaMemcpyDeviceToHost, c->stream));
        GC_TRYG(gc_sync(c, "checking targets"));
        if (pos != ~0ull) {
            I v = 0;
            GC_TRY(c, cudaMemcpyAsync(&v, (const I *)t->data + pos, sizeof v,
                                      cudaMemcpyDeviceToHost, c->stream));
            GC_TRYG(gc_sync(c, "reading a bad target"));
            return goblin__errf(c->k->msg, c->k->cap, GOBLIN_EINDEX,
                                "target %lld at position %llu is outside [0, %lld) and is not "
                                "ignore_index %lld",
                                (long long)v, pos, (long long)C, (long long)ignore);
        }
    }
    double *loss = NULL, *wsum = NULL;
    GC_TRYG(gc_scratch(c, (size_t)(P ? P : 1) * sizeof(double), (void **)&loss));
    GC_TRYG(gc_scratch(c, (size_t)(P ? P : 1) * sizeof(double), (void **)&wsum));
    if (P > 0) {
        k_loss<T, I><<<gc_blocks(P, GC_THREADS), GC_THREADS, 0, c->stream>>>(
            (const T *)x->data, (const I *)t->data, wt, P, C, D, ignore, ce, eps, loss, wsum);
        GC_LAUNCHED(c, "loss");
    }
    if (red == GOBLIN_REDUCTION_NONE) {
        if (P > 0) {
            k_loss_none<T><<<gc_blocks(P, GC_THREADS), GC_THREADS, 0, c->stream>>>(
                loss, (T *)out->data, P);
            GC_LAUNCHED(c, "loss");
        }
        return GOBLIN_OK;
    }
    double *tot = NULL, *ws = NULL;
    GC_TRYG(reduce_rows(c, loss, 1, P, RSumF(), &tot));
    GC_TRYG(reduce_rows(c, wsum, 1, P, RSumF(), &ws));
    k_loss_fin<T><<<1, 1, 0, c->stream>>>(tot, ws, (T *)out->data, red == GOBLIN_REDUCTION_MEAN);
    GC_LAUNCHED(c, "loss");
    return GOBLIN_OK;
}

static goblin_err k_loss_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    goblin_err g = GOBLIN_ENOTSUP;
    if (in[1].dtype == GOBLIN_DTYPE_I64) {
        GC_DISPATCH_FLOAT(in[0].dtype, (g = loss_t<T, int64_t>(c, n, in, n_in, out)));
    } else {
        GC_DISPATCH_FLOAT(in[0].dtype, (g = loss_t<T, int32_t>(c, n, in, n_in, out)));
    }
    return g == GOBLIN_ENOTSUP ? bad_dtype(c, n, in[0].dtype) : g;
}

/* ---- exported for other groups (sdpa composes softmax) -------------------------------- */

goblin_err gc_softmax_rows(gc_call *c, goblin_dtype dt, const void *x, void *y, int64_t M,
                           int64_t K, bool lg) {
    if (M * K == 0) return GOBLIN_OK;
    bool done = false;
    GC_DISPATCH_FLOAT(dt, (k_softmax<T><<<blocks_for(M), GC_RED_THREADS, 0, c->stream>>>(
                               (const T *)x, (T *)y, M, K, lg),
                           done = true));
    if (!done)
        return goblin__errf(c->k->msg, c->k->cap, GOBLIN_EDTYPE, "cuda: softmax of %s",
                            goblin_dtype_name(dt));
    GC_LAUNCHED(c, "softmax");
    return GOBLIN_OK;
}

void gc_register_reduce(gc_entry *t) {
    static const goblin_op red[] = {GOBLIN_OP_SUM,        GOBLIN_OP_MEAN,   GOBLIN_OP_REDUCE_MAX,
                                    GOBLIN_OP_REDUCE_MIN, GOBLIN_OP_PROD,   GOBLIN_OP_ARGMAX,
                                    GOBLIN_OP_ARGMIN,     GOBLIN_OP_VAR};
    for (size_t i = 0; i < sizeof red / sizeof red[0]; i++) t[red[i]].fn = k_reduce;
    t[GOBLIN_OP_CUMSUM].fn = k_cumsum_op;
    t[GOBLIN_OP_SOFTMAX].fn = k_softmax_op;
    t[GOBLIN_OP_LOG_SOFTMAX].fn = k_softmax_op;
    t[GOBLIN_OP_LAYER_NORM].fn = k_norm_op;
    t[GOBLIN_OP_RMS_NORM].fn = k_norm_op;
    t[GOBLIN_OP_BATCH_NORM].fn = k_batch_norm;
    t[GOBLIN_OP_NLL_LOSS].fn = k_loss_op;
    t[GOBLIN_OP_CROSS_ENTROPY].fn = k_loss_op;
}
