/* libgoblin/backends/cuda/cuda_nn.cu - matmul, conv2d, pooling and attention
 * on the device.
 *
 * MATMUL and CONV2D (im2col + GEMM) go through gc_gemm: cuBLAS when it loaded
 * (f32 with f32 accumulation and no TF32, f64, f16/bf16 with f32 accumulation),
 * else our tiled kernel, which also serves the integer dtypes (wrapping modulo
 * 2^64 like the reference). Pooling is one thread per output element. SDPA is
 * a direct kernel in double (one block per query row: logits, the reference's
 * softmax rules, the weighted sum in a fixed order): exact to the reference's
 * rules rather than fast; composing it from tensor-core GEMMs is future work. */
#include <type_traits>

#include "cuda_scalar.h"

extern "C" {
#include "ops/nn.h"
}

/* ---- our GEMM kernel -----------------------------------------------------------
 * C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b], row-major contiguous matrices
 * (lda = ta ? m : k, ldb = tb ? k : n, ldc = n). One thread per output element of
 * a 16x16 tile, k in tiles through shared memory, accumulation in the
 * reference's wider type, in increasing k: deterministic. */

template <typename T> struct gc_mmacc { typedef double t; };            /* f32, f64 */
template <> struct gc_mmacc<gc_f16> { typedef float t; };
template <> struct gc_mmacc<gc_bf16> { typedef float t; };
template <> struct gc_mmacc<int8_t> { typedef uint64_t t; };
template <> struct gc_mmacc<int16_t> { typedef uint64_t t; };
template <> struct gc_mmacc<int32_t> { typedef uint64_t t; };
template <> struct gc_mmacc<int64_t> { typedef uint64_t t; };
template <> struct gc_mmacc<uint8_t> { typedef uint64_t t; };

#define GC_TILE 16

template <typename T>
__global__ void k_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                       const T *A, int64_t sa, const T *B, int64_t sb, double beta, T *C,
                       int64_t sc, int64_t batch) {
    typedef typename gc_mmacc<T>::t Acc;
    __shared__ Acc as[GC_TILE][GC_TILE];
    __shared__ Acc bs[GC_TILE][GC_TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t tiles_n = (n + GC_TILE - 1) / GC_TILE, tiles_m = (m + GC_TILE - 1) / GC_TILE;
    int64_t total = tiles_m * tiles_n * batch;
    for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
        int64_t b = t / (tiles_m * tiles_n), tm = (t / tiles_n) % tiles_m, tn = t % tiles_n;
        int64_t i = tm * GC_TILE + ty, j = tn * GC_TILE + tx;
        const T *Ab = A + b * sa;
        const T *Bb = B + b * sb;
        Acc acc = 0;
        for (int64_t p0 = 0; p0 < k; p0 += GC_TILE) {
            int64_t pa = p0 + tx, pb = p0 + ty;
            int64_t ai = tm * GC_TILE + ty, bj = tn * GC_TILE + tx;
            Acc av = 0, bv = 0;
            if (ai < m && pa < k) {
                T x = Ab[ta ? pa * m + ai : ai * k + pa];
                if constexpr (gc_ty<T>::is_float) av = (Acc)gc_ld_f(x);
                else av = (Acc)gc_ld_u64(x);
            }
            if (pb < k && bj < n) {
                T x = Bb[tb ? bj * k + pb : pb * n + bj];
                if constexpr (gc_ty<T>::is_float) bv = (Acc)gc_ld_f(x);
                else bv = (Acc)gc_ld_u64(x);
            }
            as[ty][tx] = av;
            bs[ty][tx] = bv;
            __syncthreads();
            int64_t lim = k - p0 < GC_TILE ? k - p0 : GC_TILE;
            for (int64_t p = 0; p < lim; p++) {
                if constexpr (std::is_same<Acc, float>::value)
                    acc += (float)((double)as[ty][p] * (double)bs[p][tx]); /* exact in f32 */
                else
                    acc += as[ty][p] * bs[p][tx];
            }
            __syncthreads();
        }
        if (i < m && j < n) {
            T *o = C + b * sc + i * n + j;
            if constexpr (gc_ty<T>::is_float) {
                double r = alpha * (double)acc;
                if (beta != 0) r += beta * gc_ld_f(*o);
                *o = gc_ty<T>::store((typename gc_ty<T>::acc_t)r);
            } else {
                uint64_t r = (uint64_t)acc * (uint64_t)(int64_t)alpha;
                if (beta != 0) r += (uint64_t)(int64_t)beta * gc_ld_u64(*o);
                *o = gc_st_u64<T>(r);
            }
        }
    }
}

/* cuBLAS for f32/f64/f16/bf16 (row-major C = A B is column-major C^T = B^T A^T). */
static goblin_err gemm_cublas(gc_call *c, goblin_dtype dt, bool ta, bool tb, int64_t m, int64_t n,
                              int64_t k, double alpha, const void *A, int64_t sa, const void *B,
                              int64_t sb, double beta, void *C, int64_t sc, int64_t batch) {
    const gc_cublas_api *api = gc_cublas();
    int type = dt == GOBLIN_DTYPE_F32 ? GC_CUDA_R_32F
               : dt == GOBLIN_DTYPE_F64 ? GC_CUDA_R_64F
               : dt == GOBLIN_DTYPE_F16 ? GC_CUDA_R_16F
                                        : GC_CUDA_R_16BF;
    int compute = dt == GOBLIN_DTYPE_F64 ? GC_CUBLAS_COMPUTE_64F : GC_CUBLAS_COMPUTE_32F;
    float af = (float)alpha, bf = (float)beta;
    const void *pa = dt == GOBLIN_DTYPE_F64 ? (const void *)&alpha : (const void *)&af;
    const void *pb = dt == GOBLIN_DTYPE_F64 ? (const void *)&beta : (const void *)&bf;
    int ldb_ = (int)(tb ? k : n), lda_ = (int)(ta ? m : k);
    int s = api->gemm_strided_batched_ex(
        c->ctx->blas, tb ? GC_CUBLAS_OP_T : GC_CUBLAS_OP_N, ta ? GC_CUBLAS_OP_T : GC_CUBLAS_OP_N,
        (int)n, (int)m, (int)k, pa, B, type, ldb_ < 1 ? 1 : ldb_, sb, A, type, lda_ < 1 ? 1 : lda_,
        sa, pb, C, type, (int)(n < 1 ? 1 : n), sc, (int)batch, compute, GC_CUBLAS_GEMM_DEFAULT);
    if (s != 0)
        return goblin__errf(c->k->msg, c->k->cap, s == 3 ? GOBLIN_ENOMEM : GOBLIN_EDEVICE,
                            "cuda: cublasGemmStridedBatchedEx: %s (%d)",
                            api->status_string ? api->status_string(s) : "cuBLAS error", s);
    return GOBLIN_OK;
}

goblin_err gc_gemm(gc_call *c, goblin_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                   double alpha, const void *A, int64_t sa, const void *B, int64_t sb, double beta,
                   void *C, int64_t sc, int64_t batch) {
    if (m == 0 || n == 0 || batch == 0) return GOBLIN_OK;
    const int64_t lim = INT32_MAX;
    bool fits = m <= lim && n <= lim && k <= lim && batch <= lim;
    if (c->ctx->blas && gc_is_float(dt) && fits && k > 0)
        return gemm_cublas(c, dt, ta, tb, m, n, k, alpha, A, sa, B, sb, beta, C, sc, batch);
    int64_t tiles = ((m + GC_TILE - 1) / GC_TILE) * ((n + GC_TILE - 1) / GC_TILE) * batch;
    unsigned blocks = (unsigned)(tiles < (1 << 20) ? tiles : (1 << 20));
    dim3 th(GC_TILE, GC_TILE);
    bool done = false;
    GC_DISPATCH_NUMERIC(dt, (k_gemm<T><<<blocks, th, 0, c->stream>>>(
                                 ta, tb, m, n, k, alpha, (const T *)A, sa, (const T *)B, sb, beta,
                                 (T *)C, sc, batch),
                             done = true));
    if (!done)
        return goblin__errf(c->k->msg, c->k->cap, GOBLIN_ENOTSUP, "cuda: matmul of %s",
                            goblin_dtype_name(dt));
    GC_LAUNCHED(c, "gemm");
    return GOBLIN_OK;
}

/* ---- MATMUL ------------------------------------------------------------------------ */

static goblin_err k_matmul(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    goblin__mm_geom g;
    goblin__mm_geom_init(n, in, n_in, out, &g);
    if (gc_numel(out) == 0) return GOBLIN_OK;
    goblin_dtype dt = out->dtype;
    size_t esz = goblin_dtype_size(dt);
    bool ta = goblin__attr_i(n, GOBLIN_ATTR_TRANS_A, 0) != 0 && in[0].rank >= 2;
    bool tb = goblin__attr_i(n, GOBLIN_ATTR_TRANS_B, 0) != 0 && in[1].rank >= 2;
    double beta = 0;
    if (g.has_c) {
        /* out = broadcast C, then the GEMM adds alpha * A B to beta * out */
        int64_t cs[GOBLIN_MAX_RANK], os[GOBLIN_MAX_RANK];
        const goblin_tensor *ops[1] = {&in[2]};
        gc_bcast b;
        gc_bcast_init(&b, ops, 1, out);
        for (int32_t d = 0; d < out->rank; d++) cs[d] = b.strides[0][d];
        gc_contig_strides(out->rank, out->shape, os);
        GC_TRYG(gc_copy_strided(c, in[2].data, out->data, out->rank, out->shape, cs, 0, os, 0, esz));
        beta = g.beta;
    }
    /* k == 0 needs no special case: gc_gemm then uses our kernel, which gives
     * alpha * 0 (+ beta * C) exactly as the reference computes it. */
    /* The last batch dim is strided in one call; the others are looped here. */
    int32_t br = g.batch_rank;
    int64_t inner = br ? g.batch_shape[br - 1] : 1;
    int64_t outer = br ? g.batch / (inner ? inner : 1) : 1;
    int64_t sa = br ? g.a_bs[br - 1] : 0, sb = br ? g.b_bs[br - 1] : 0, so = br ? g.o_bs[br - 1] : 0;
    for (int64_t o = 0; o < outer; o++) {
        int64_t r = o, oa = 0, ob = 0, oo = 0;
        for (int32_t d = br - 2; d >= 0; d--) {
            int64_t q = r % g.batch_shape[d];
            r /= g.batch_shape[d];
            oa += q * g.a_bs[d];
            ob += q * g.b_bs[d];
            oo += q * g.o_bs[d];
        }
        GC_TRYG(gc_gemm(c, dt, ta, tb, g.m, g.n, g.k, g.alpha,
                        (const char *)in[0].data + oa * (int64_t)esz, sa,
                        (const char *)in[1].data + ob * (int64_t)esz, sb, beta,
                        (char *)out->data + oo * (int64_t)esz, so, inner));
    }
    return GOBLIN_OK;
}

/* ---- CONV2D: im2col + GEMM ------------------------------------------------------------
 * For a chunk of samples and one group: col [cg*kh*kw, oh*ow] per sample, then
 * out[n, group's channels] = W_g [og, cg*kh*kw] @ col + out (out pre-filled with
 * the bias, or zero), so the bias joins before the single rounding. */

template <typename T>
__global__ void k_im2col(const T *x, T *col, int64_t nn, int64_t g0, goblin__conv_geom g,
                         int64_t cg) {
    int64_t K = cg * g.kh * g.kw, P = g.oh * g.ow;
    int64_t total = nn * K * P;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = t % P, kk = (t / P) % K, s = t / P / K;
        int64_t ow = p % g.ow, oh = p / g.ow;
        int64_t j = kk % g.kw, i = (kk / g.kw) % g.kh, ch = kk / g.kw / g.kh;
        int64_t ih = oh * g.sh - g.ph + i * g.dh, iw = ow * g.sw - g.pw + j * g.dw;
        T v = gc_ty<T>::store((typename gc_ty<T>::acc_t)0);
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
            v = x[((s * g.c + g0 + ch) * g.h + ih) * g.w + iw];
        col[t] = v;
    }
}

template <typename T>
__global__ void k_bias_fill(const T *bias, T *out, int64_t total, int64_t O, int64_t P) {
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x)
        out[t] = bias[(t / P) % O];
}

template <typename T>
static goblin_err conv_t(gc_call *c, const goblin__node *n, const goblin_tensor *in, int32_t n_in,
                         goblin_tensor *out, const goblin__conv_geom &g) {
    int64_t total = gc_numel(out);
    if (total == 0) return GOBLIN_OK;
    int64_t P = g.oh * g.ow, cg = g.c / g.groups, og = g.o / g.groups;
    int64_t K = cg * g.kh * g.kw;
    if (n_in >= 3) {
        k_bias_fill<T><<<gc_blocks(total, GC_THREADS), GC_THREADS, 0, c->stream>>>(
            (const T *)in[2].data, (T *)out->data, total, g.o, P);
        GC_LAUNCHED(c, "conv bias");
    } else {
        GC_TRY(c, cudaMemsetAsync(out->data, 0, (size_t)total * sizeof(T), c->stream));
    }
    if (K == 0) return GOBLIN_OK;
    /* samples per chunk: keep the col buffer near 256 MiB */
    int64_t per_sample = K * P * (int64_t)sizeof(T);
    int64_t chunk = per_sample > 0 ? ((int64_t)256 << 20) / per_sample : g.n;
    if (chunk < 1) chunk = 1;
    if (chunk > g.n) chunk = g.n;
    T *col = NULL;
    GC_TRYG(gc_scratch(c, (size_t)(chunk * K * P) * sizeof(T), (void **)&col));
    const T *x = (const T *)in[0].data, *w = (const T *)in[1].data;
    T *y = (T *)out->data;
    for (int64_t s0 = 0; s0 < g.n; s0 += chunk) {
        int64_t nn = g.n - s0 < chunk ? g.n - s0 : chunk;
        for (int64_t grp = 0; grp < g.groups; grp++) {
            int64_t cnt = nn * K * P;
            k_im2col<T><<<gc_blocks(cnt, GC_THREADS), GC_THREADS, 0, c->stream>>>(
                x + s0 * g.c * g.h * g.w, col, nn, grp * cg, g, cg);
            GC_LAUNCHED(c, "im2col");
            GC_TRYG(gc_gemm(c, out->dtype, false, false, og, P, K, 1.0, w + grp * og * K, 0, col,
                            K * P, 1.0, y + (s0 * g.o + grp * og) * P, g.o * P, nn));
        }
    }
    return GOBLIN_OK;
}

static goblin_err k_conv2d(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                           int32_t n_in, goblin_tensor *out) {
    goblin__conv_geom g;
    GC_TRYG(goblin__conv_geom_get(n, in[0].shape, in[1].shape, &g, c->k->msg, c->k->cap));
    goblin_err e = GOBLIN_ENOTSUP;
    GC_DISPATCH_FLOAT(out->dtype, e = conv_t<T>(c, n, in, n_in, out, g));
    if (e == GOBLIN_ENOTSUP)
        return goblin__errf(c->k->msg, c->k->cap, GOBLIN_ENOTSUP, "cuda: conv2d of %s",
                            goblin_dtype_name(out->dtype));
    return e;
}

/* ---- pooling: one thread per output element ------------------------------------------ */

template <typename T>
__global__ void k_max_pool(const T *x, T *y, int64_t total, goblin__pool_geom g, int64_t imin) {
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = t % g.ow, oh = (t / g.ow) % g.oh, p = t / g.ow / g.oh;
        const T *xp = x + p * g.h * g.w;
        double best = -INFINITY;
        int64_t ibest = imin;
        bool nan = false;
        for (int64_t i = 0; i < g.kh && !nan; i++) {
            int64_t ih = oh * g.sh - g.ph + i * g.dh;
            if (ih < 0 || ih >= g.h) continue;
            for (int64_t j = 0; j < g.kw; j++) {
                int64_t iw = ow * g.sw - g.pw + j * g.dw;
                if (iw < 0 || iw >= g.w) continue;
                if constexpr (gc_ty<T>::is_float) {
                    double v = gc_ld_f(xp[ih * g.w + iw]);
                    if (v > best || v != v) best = v;
                    if (best != best) {
                        nan = true;
                        break;
                    }
                } else {
                    int64_t v = gc_ld_i(xp[ih * g.w + iw]);
                    if (v > ibest) ibest = v;
                }
            }
        }
        if constexpr (gc_ty<T>::is_float) y[t] = gc_ty<T>::store((typename gc_ty<T>::acc_t)best);
        else y[t] = (T)ibest;
    }
}

template <typename T>
__global__ void k_avg_pool(const T *x, T *y, int64_t total, goblin__pool_geom g) {
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = t % g.ow, oh = (t / g.ow) % g.oh, p = t / g.ow / g.oh;
        const T *xp = x + p * g.h * g.w;
        int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
        int64_t h1 = h0 + g.kh < g.h + g.ph ? h0 + g.kh : g.h + g.ph;
        int64_t w1 = w0 + g.kw < g.w + g.pw ? w0 + g.kw : g.w + g.pw;
        int64_t pool = (h1 - h0) * (w1 - w0);
        if (h0 < 0) h0 = 0;
        if (w0 < 0) w0 = 0;
        if (h1 > g.h) h1 = g.h;
        if (w1 > g.w) w1 = g.w;
        double r = 0;
        if (h0 < h1 && w0 < w1) {
            double sum = 0;
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++) sum += gc_ld_f(xp[ih * g.w + iw]);
            int64_t div = g.count_include_pad ? pool : (h1 - h0) * (w1 - w0);
            r = sum / (double)div;
        }
        y[t] = gc_ty<T>::store((typename gc_ty<T>::acc_t)r);
    }
}

/* Adaptive windows come precomputed from the host (goblin__adaptive_window's
 * 128-bit arithmetic): hw = [h0, h1] per output row, ww per output column. */
template <typename T>
__global__ void k_adaptive_pool(const T *x, T *y, int64_t total, goblin__pool_geom g,
                                const int64_t *hw, const int64_t *ww) {
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = t % g.ow, oh = (t / g.ow) % g.oh, p = t / g.ow / g.oh;
        const T *xp = x + p * g.h * g.w;
        int64_t h0 = hw[2 * oh], h1 = hw[2 * oh + 1], w0 = ww[2 * ow], w1 = ww[2 * ow + 1];
        double sum = 0;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) sum += gc_ld_f(xp[ih * g.w + iw]);
        y[t] = gc_ty<T>::store((typename gc_ty<T>::acc_t)(sum / (double)((h1 - h0) * (w1 - w0))));
    }
}

static goblin_err k_pool(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                         int32_t n_in, goblin_tensor *out) {
    goblin__pool_geom g;
    GC_TRYG(goblin__pool_geom_get(n, in[0].rank, in[0].shape, &g, c->k->msg, c->k->cap));
    int64_t total = gc_numel(out);
    if (total == 0) return GOBLIN_OK;
    goblin_dtype dt = out->dtype;
    unsigned b = gc_blocks(total, GC_THREADS);
    bool done = false;
    if (n->op == GOBLIN_OP_MAX_POOL2D) {
        int64_t imin = dt == GOBLIN_DTYPE_I8    ? INT8_MIN
                       : dt == GOBLIN_DTYPE_I16 ? INT16_MIN
                       : dt == GOBLIN_DTYPE_I32 ? INT32_MIN
                       : dt == GOBLIN_DTYPE_I64 ? INT64_MIN
                                                : 0;
        GC_DISPATCH_NUMERIC(dt, (k_max_pool<T><<<b, GC_THREADS, 0, c->stream>>>(
                                     (const T *)in[0].data, (T *)out->data, total, g, imin),
                                 done = true));
    } else if (n->op == GOBLIN_OP_AVG_POOL2D) {
        GC_DISPATCH_FLOAT(dt, (k_avg_pool<T><<<b, GC_THREADS, 0, c->stream>>>(
                                   (const T *)in[0].data, (T *)out->data, total, g),
                               done = true));
    } else {
        size_t bytes = sizeof(int64_t) * 2 * (size_t)(g.oh + g.ow);
        int64_t *hw = (int64_t *)goblin__alloc(bytes);
        if (!hw) return GOBLIN_ENOMEM;
        for (int64_t i = 0; i < g.oh; i++) goblin__adaptive_window(i, g.h, g.oh, &hw[2 * i], &hw[2 * i + 1]);
        int64_t *wwh = hw + 2 * g.oh;
        for (int64_t i = 0; i < g.ow; i++) goblin__adaptive_window(i, g.w, g.ow, &wwh[2 * i], &wwh[2 * i + 1]);
        int64_t *dw = NULL;
        goblin_err e = gc_scratch(c, bytes, (void **)&dw);
        cudaError_t ce = cudaSuccess;
        if (e == GOBLIN_OK &&
            (ce = cudaMemcpyAsync(dw, hw, bytes, cudaMemcpyHostToDevice, c->stream)) != cudaSuccess)
            e = gc_fail(c->k->msg, c->k->cap, ce, "copying pooling windows");
        if (e == GOBLIN_OK) e = gc_sync(c, "copying pooling windows");
        goblin__free(hw);
        if (e != GOBLIN_OK) return e;
        GC_DISPATCH_FLOAT(dt, (k_adaptive_pool<T><<<b, GC_THREADS, 0, c->stream>>>(
                                   (const T *)in[0].data, (T *)out->data, total, g, dw,
                                   dw + 2 * g.oh),
                               done = true));
    }
    if (!done)
        return goblin__errf(c->k->msg, c->k->cap, GOBLIN_ENOTSUP, "cuda: %s of %s",
                            goblin_op_name(n->op), goblin_dtype_name(dt));
    GC_LAUNCHED(c, "pool");
    return GOBLIN_OK;
}

/* ---- SDPA -------------------------------------------------------------------------------
 * One block per (batch, query row), everything in double as the reference:
 * logits into a scratch row, then the reference's NaN/inf/all-masked rules,
 * exp and the normalizer (fixed tree order), then each output column as a
 * sequential sum over keys. */

#define GC_SDPA_THREADS 128

typedef struct gc_sdpa {
    int32_t br;
    int64_t bshape[GOBLIN_MAX_RANK];
    int64_t bs[4][GOBLIN_MAX_RANK]; /* batch strides of q, k, v, mask */
    int64_t L, S, E, Ev;
    int64_t m_ls, m_ss;             /* mask strides of the L and S dims */
    double scale;
    bool causal, has_mask, mask_bool;
} gc_sdpa;

__device__ __forceinline__ double gc_sum_block(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = GC_SDPA_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

template <typename T>
__global__ void __launch_bounds__(GC_SDPA_THREADS)
k_sdpa(const T *q, const T *k, const T *v, const void *mask, T *out, double *srow,
       int64_t row0, int64_t rows, gc_sdpa p) {
    __shared__ double sh[GC_SDPA_THREADS];
    __shared__ int flags[1];
    for (int64_t rr = blockIdx.x; rr < rows; rr += gridDim.x) {
        int64_t row = row0 + rr;
        int64_t i = row % p.L, b = row / p.L;
        int64_t off[4] = {0, 0, 0, 0};
        int64_t r = b;
        for (int32_t d = p.br - 1; d >= 0; d--) {
            int64_t qd = r % p.bshape[d];
            r /= p.bshape[d];
            for (int o = 0; o < 4; o++) off[o] += qd * p.bs[o][d];
        }
        double *s = srow + rr * p.S;
        if (threadIdx.x == 0) flags[0] = 0; /* NaN seen */
        __syncthreads();
        double mx = -INFINITY;
        bool nan = false;
        for (int64_t j = threadIdx.x; j < p.S; j += GC_SDPA_THREADS) {
            double x;
            if (p.causal && j > i) {
                x = -INFINITY;
            } else {
                double dot = 0;
                for (int64_t e = 0; e < p.E; e++)
                    dot += gc_ld_f(q[off[0] + i * p.E + e]) * gc_ld_f(k[off[1] + j * p.E + e]);
                x = p.scale * dot;
                if (p.has_mask) {
                    int64_t mo = off[3] + i * p.m_ls + j * p.m_ss;
                    if (p.mask_bool) x = ((const uint8_t *)mask)[mo] ? x : -INFINITY;
                    else x += gc_ld_f(((const T *)mask)[mo]);
                }
            }
            if (x != x) nan = true;
            if (x > mx) mx = x;
            s[j] = x;
        }
        if (nan) atomicOr(&flags[0], 1); /* an integer flag: order does not matter */
        sh[threadIdx.x] = mx;
        __syncthreads();
        for (int st = GC_SDPA_THREADS / 2; st > 0; st >>= 1) {
            if ((int)threadIdx.x < st && sh[threadIdx.x + st] > sh[threadIdx.x])
                sh[threadIdx.x] = sh[threadIdx.x + st];
            __syncthreads();
        }
        mx = sh[0];
        __syncthreads();
        bool bad = flags[0] != 0 || mx == INFINITY;
        double z = 1;
        if (!bad) {
            double part = 0;
            for (int64_t j = threadIdx.x; j < p.S; j += GC_SDPA_THREADS) {
                double w = mx > -INFINITY ? exp(s[j] - mx) : 0.0;
                s[j] = w;
                part += w;
            }
            double tot = gc_sum_block(part, sh);
            if (mx > -INFINITY) z = tot;
        }
        __syncthreads(); /* s[] complete before the weighted sums read it */
        T *o = out + row * p.Ev;
        for (int64_t e = threadIdx.x; e < p.Ev; e += GC_SDPA_THREADS) {
            double acc;
            if (bad) {
                acc = NAN;
            } else {
                acc = 0;
                for (int64_t j = 0; j < p.S; j++) acc += s[j] * gc_ld_f(v[off[2] + j * p.Ev + e]);
                acc /= z;
            }
            o[e] = gc_ty<T>::store((typename gc_ty<T>::acc_t)acc);
        }
        __syncthreads();
    }
}

static void sdpa_batch_strides(const goblin_tensor *t, int32_t br, const int64_t *bshape,
                               int64_t *strides) {
    int32_t off = br - (t->rank - 2);
    int64_t cs[GOBLIN_MAX_RANK];
    gc_contig_strides(t->rank, t->shape, cs);
    for (int32_t d = 0; d < br; d++) {
        int32_t td = d - off;
        strides[d] = (td < 0 || (t->shape[td] == 1 && bshape[d] != 1)) ? 0 : cs[td];
    }
}

template <typename T>
static goblin_err sdpa_t(gc_call *c, const goblin__node *n, const goblin_tensor *in, int32_t n_in,
                         goblin_tensor *out) {
    gc_sdpa p;
    memset(&p, 0, sizeof p);
    const goblin_tensor *q = &in[0], *kk = &in[1], *v = &in[2];
    const goblin_tensor *mask = n_in >= 4 ? &in[3] : NULL;
    p.br = out->rank - 2;
    p.L = out->shape[p.br];
    p.Ev = out->shape[p.br + 1];
    p.E = q->shape[q->rank - 1];
    p.S = kk->shape[kk->rank - 2];
    p.scale = goblin__sdpa_scale(n, p.E);
    p.causal = goblin__attr_i(n, GOBLIN_ATTR_CAUSAL, 0) != 0;
    for (int32_t d = 0; d < p.br; d++) p.bshape[d] = out->shape[d];
    sdpa_batch_strides(q, p.br, p.bshape, p.bs[0]);
    sdpa_batch_strides(kk, p.br, p.bshape, p.bs[1]);
    sdpa_batch_strides(v, p.br, p.bshape, p.bs[2]);
    if (mask) {
        /* the mask broadcasts over [batch..., L, S] as a whole */
        goblin_tensor full;
        memset(&full, 0, sizeof full);
        full.rank = p.br + 2;
        for (int32_t d = 0; d < p.br; d++) full.shape[d] = p.bshape[d];
        full.shape[p.br] = p.L;
        full.shape[p.br + 1] = p.S;
        const goblin_tensor *ops[1] = {mask};
        gc_bcast b;
        gc_bcast_init(&b, ops, 1, &full);
        for (int32_t d = 0; d < p.br; d++) p.bs[3][d] = b.strides[0][d];
        p.m_ls = b.strides[0][p.br];
        p.m_ss = b.strides[0][p.br + 1];
        p.has_mask = true;
        p.mask_bool = mask->dtype == GOBLIN_DTYPE_BOOL;
    }
    if (gc_numel(out) == 0) return GOBLIN_OK;
    int64_t rows = gc_numel(out) / p.Ev;
    /* logits scratch: rows per launch so that it stays near 256 MiB */
    int64_t per_row = (p.S ? p.S : 1) * (int64_t)sizeof(double);
    int64_t chunk = ((int64_t)256 << 20) / per_row;
    if (chunk < 1) chunk = 1;
    if (chunk > rows) chunk = rows;
    double *srow = NULL;
    GC_TRYG(gc_scratch(c, (size_t)(chunk * per_row), (void **)&srow));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t nr = rows - r0 < chunk ? rows - r0 : chunk;
        unsigned blocks = (unsigned)(nr < (1 << 20) ? nr : (1 << 20));
        k_sdpa<T><<<blocks, GC_SDPA_THREADS, 0, c->stream>>>(
            (const T *)q->data, (const T *)kk->data, (const T *)v->data,
            mask ? mask->data : NULL, (T *)out->data, srow, r0, nr, p);
        GC_LAUNCHED(c, "sdpa");
    }
    return GOBLIN_OK;
}

static goblin_err k_sdpa_op(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                            int32_t n_in, goblin_tensor *out) {
    goblin_err e = GOBLIN_ENOTSUP;
    GC_DISPATCH_FLOAT(out->dtype, e = sdpa_t<T>(c, n, in, n_in, out));
    if (e == GOBLIN_ENOTSUP)
        return goblin__errf(c->k->msg, c->k->cap, GOBLIN_ENOTSUP, "cuda: sdpa of %s",
                            goblin_dtype_name(out->dtype));
    return e;
}

void gc_register_nn(gc_entry *t) {
    t[GOBLIN_OP_MATMUL].fn = k_matmul;
    t[GOBLIN_OP_CONV2D].fn = k_conv2d;
    t[GOBLIN_OP_MAX_POOL2D].fn = k_pool;
    t[GOBLIN_OP_AVG_POOL2D].fn = k_pool;
    t[GOBLIN_OP_ADAPTIVE_AVG_POOL2D].fn = k_pool;
    t[GOBLIN_OP_SDPA].fn = k_sdpa_op;
}
