/* libgoblin/backends/cuda/cuda_impl.h - internal interface of the CUDA backend
 * (CUDA C++, included only by the backend's .cu files).
 *
 * The backend's compute() stages a node's host inputs on the device (made
 * contiguous on the host first), allocates the output there, runs the op's
 * device kernel and copies the output back. A device kernel therefore sees
 * contiguous device tensors only and never touches host memory. Temporary
 * device memory comes from gc_scratch(): plain cudaMalloc, freed by compute()
 * after the node on every path, so nothing is cached across calls except the
 * stream and the cuBLAS handle.
 *
 * Determinism: every kernel partitions its work by the problem's shape only
 * (never by the device's SM count) and combines partial results in a fixed
 * tree order; float reductions use no atomics. */
#ifndef GOBLIN__CUDA_IMPL_H
#define GOBLIN__CUDA_IMPL_H

/* The C library headers come first so that their include guards keep the
 * extern "C" block below from re-including them with C linkage. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" {
#include "backends/backend.h"
}
#include "kernels/half.h"

/* ---- cuBLAS, loaded at run time ------------------------------------------
 * libcublas is not part of the toolkit installed on build machines, and a
 * volunteer's GPU machine may lack it: we dlopen it when a context is created
 * and declare the few entry points we call (ABI of cuBLAS 12/13, checked
 * against cublas_api.h 13.1). Without it, matmul runs our own tiled kernel. */
typedef struct gc_cublas_api {
    bool loaded;
    int (*create)(void **handle);
    int (*destroy)(void *handle);
    int (*set_stream)(void *handle, cudaStream_t stream);
    int (*set_math_mode)(void *handle, int mode);
    int (*gemm_strided_batched_ex)(void *handle, int transa, int transb, int m, int n, int k,
                                   const void *alpha, const void *A, int Atype, int lda,
                                   long long strideA, const void *B, int Btype, int ldb,
                                   long long strideB, const void *beta, void *C, int Ctype,
                                   int ldc, long long strideC, int batch, int compute_type,
                                   int algo);
    const char *(*status_string)(int status);
} gc_cublas_api;

enum {
    GC_CUBLAS_OP_N = 0,
    GC_CUBLAS_OP_T = 1,
    GC_CUBLAS_GEMM_DEFAULT = -1,
    GC_CUBLAS_DEFAULT_MATH = 0,
    GC_CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
    GC_CUBLAS_COMPUTE_32F = 68,
    GC_CUBLAS_COMPUTE_64F = 70,
    GC_CUDA_R_32F = 0,
    GC_CUDA_R_64F = 1,
    GC_CUDA_R_16F = 2,
    GC_CUDA_R_16BF = 14,
};

/* The process-wide table (loaded once); ->loaded false if libcublas is absent. */
const gc_cublas_api *gc_cublas(void);

/* ---- context and per-node call ------------------------------------------- */

typedef struct gc_ctx {
    int device;
    cudaStream_t stream;
    void *blas;          /* cublasHandle_t, or NULL: use our own GEMM kernel */
    int sm_major;        /* compute capability, for the record */
} gc_ctx;

#define GC_MAX_SCRATCH 160

/* What a device kernel gets for one node. */
typedef struct gc_call {
    gc_ctx *ctx;
    goblin__kctx *k;     /* msg/cap for errors */
    cudaStream_t stream;
    int32_t n_scratch;
    void *scratch[GC_MAX_SCRATCH];
} gc_call;

/* A device kernel: @p in are contiguous device tensors (shapes of the input
 * nodes), @p out a contiguous device tensor to fill completely. */
typedef goblin_err (*gc_kernel_fn)(gc_call *c, const goblin__node *n, const goblin_tensor *in,
                                   int32_t n_in, goblin_tensor *out);
/* Optional: can the kernel handle this node (dtypes, attributes)? NULL = yes. */
typedef bool (*gc_supports_fn)(const goblin__node *n, const goblin__node *const *in);

typedef struct gc_entry {
    gc_kernel_fn fn;
    gc_supports_fn supports;
} gc_entry;

/* Each cuda_<group>.cu fills its ops (table size GOBLIN_OP_COUNT). */
void gc_register_elementwise(gc_entry *t);
void gc_register_unary(gc_entry *t);
void gc_register_reduce(gc_entry *t);
void gc_register_shape(gc_entry *t);
void gc_register_nn(gc_entry *t);
void gc_register_formula(gc_entry *t);
void gc_register_random(gc_entry *t);
void gc_register_grad(gc_entry *t);

/* ---- helpers (cuda_backend.cu) -------------------------------------------- */

/* Map a CUDA error to a goblin_err with "what: cuda error text" in msg. */
goblin_err gc_fail(char *msg, size_t cap, cudaError_t e, const char *what);

/* Device memory that lives until the end of the current node (zeroed = false:
 * uninitialized). bytes == 0 gives NULL and GOBLIN_OK. */
goblin_err gc_scratch(gc_call *c, size_t bytes, void **out);

/* Wait for the stream and report any pending device error. */
goblin_err gc_sync(gc_call *c, const char *what);

/* Launch geometry for a grid-stride loop over n items: blocks capped so the
 * grid is valid on every device; the loop covers the rest. n must be > 0. */
static inline unsigned gc_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b > 65535 * 16) b = 65535 * 16;
    return (unsigned)(b < 1 ? 1 : b);
}

#define GC_THREADS 256

/* Check a CUDA runtime call inside a function returning goblin_err with a gc_call c. */
#define GC_TRY(c, call)                                                            \
    do {                                                                           \
        cudaError_t gc_e_ = (call);                                                \
        if (gc_e_ != cudaSuccess) return gc_fail((c)->k->msg, (c)->k->cap, gc_e_, #call); \
    } while (0)

/* After a kernel launch: report launch-configuration errors. */
#define GC_LAUNCHED(c, name) GC_TRY(c, cudaPeekAtLastError())

#define GC_TRYG(call)                                                              \
    do {                                                                           \
        goblin_err gc_g_ = (call);                                                 \
        if (gc_g_ != GOBLIN_OK) return gc_g_;                                      \
    } while (0)

static inline int64_t gc_numel(const goblin_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->rank; d++) n *= t->shape[d];
    return n;
}

/* ---- element types ---------------------------------------------------------
 * Storage types per dtype. f16/bf16/bool get distinct wrapper structs so that
 * templates can tell them apart from u16/u8. acc_t is the type arithmetic is
 * done in: f32 for f16/bf16 (rounded once on store, as the reference does),
 * the type itself otherwise. */
struct gc_f16 { uint16_t bits; };
struct gc_bf16 { uint16_t bits; };
struct gc_bool { uint8_t v; };

#define GC_HD __host__ __device__ __forceinline__

/* f16/bf16 <-> f32: kernels/half.h (GOBLIN_HD), the CPU backends' very functions. */

template <typename T> struct gc_ty {
    typedef T acc_t;
    static GC_HD acc_t load(T v) { return v; }
    static GC_HD T store(acc_t v) { return v; }
    static const bool is_float = false;
};
template <> struct gc_ty<float> {
    typedef float acc_t;
    static GC_HD float load(float v) { return v; }
    static GC_HD float store(float v) { return v; }
    static const bool is_float = true;
};
template <> struct gc_ty<double> {
    typedef double acc_t;
    static GC_HD double load(double v) { return v; }
    static GC_HD double store(double v) { return v; }
    static const bool is_float = true;
};
template <> struct gc_ty<gc_f16> {
    typedef float acc_t;
    static GC_HD float load(gc_f16 v) { return goblin__f16_to_f32(v.bits); }
    static GC_HD gc_f16 store(float v) { gc_f16 r; r.bits = goblin__f32_to_f16(v); return r; }
    static const bool is_float = true;
};
template <> struct gc_ty<gc_bf16> {
    typedef float acc_t;
    static GC_HD float load(gc_bf16 v) { return goblin__bf16_to_f32(v.bits); }
    static GC_HD gc_bf16 store(float v) { gc_bf16 r; r.bits = goblin__f32_to_bf16(v); return r; }
    static const bool is_float = true;
};
template <> struct gc_ty<gc_bool> {
    typedef bool acc_t;
    static GC_HD bool load(gc_bool v) { return v.v != 0; }
    static GC_HD gc_bool store(bool v) { gc_bool r; r.v = v ? 1 : 0; return r; }
    static const bool is_float = false;
};

/* Run BODY with T bound to the storage type of dtype DT. The default case
 * leaves the statement without effect; callers check dtypes first. */
#define GC_CASE_(DTV, TY, BODY) case DTV: { typedef TY T; BODY; } break;
#define GC_DISPATCH_FLOAT(DT, BODY)                               \
    switch (DT) {                                                 \
        GC_CASE_(GOBLIN_DTYPE_F32, float, BODY)                   \
        GC_CASE_(GOBLIN_DTYPE_F64, double, BODY)                  \
        GC_CASE_(GOBLIN_DTYPE_F16, gc_f16, BODY)                  \
        GC_CASE_(GOBLIN_DTYPE_BF16, gc_bf16, BODY)                \
    default: break;                                               \
    }
#define GC_DISPATCH_INT(DT, BODY)                                 \
    switch (DT) {                                                 \
        GC_CASE_(GOBLIN_DTYPE_I8, int8_t, BODY)                   \
        GC_CASE_(GOBLIN_DTYPE_I16, int16_t, BODY)                 \
        GC_CASE_(GOBLIN_DTYPE_I32, int32_t, BODY)                 \
        GC_CASE_(GOBLIN_DTYPE_I64, int64_t, BODY)                 \
        GC_CASE_(GOBLIN_DTYPE_U8, uint8_t, BODY)                  \
    default: break;                                               \
    }
#define GC_DISPATCH_NUMERIC(DT, BODY)                             \
    switch (DT) {                                                 \
        GC_CASE_(GOBLIN_DTYPE_F32, float, BODY)                   \
        GC_CASE_(GOBLIN_DTYPE_F64, double, BODY)                  \
        GC_CASE_(GOBLIN_DTYPE_F16, gc_f16, BODY)                  \
        GC_CASE_(GOBLIN_DTYPE_BF16, gc_bf16, BODY)                \
        GC_CASE_(GOBLIN_DTYPE_I8, int8_t, BODY)                   \
        GC_CASE_(GOBLIN_DTYPE_I16, int16_t, BODY)                 \
        GC_CASE_(GOBLIN_DTYPE_I32, int32_t, BODY)                 \
        GC_CASE_(GOBLIN_DTYPE_I64, int64_t, BODY)                 \
        GC_CASE_(GOBLIN_DTYPE_U8, uint8_t, BODY)                  \
    default: break;                                               \
    }
#define GC_DISPATCH_ALL(DT, BODY)                                 \
    switch (DT) {                                                 \
        GC_CASE_(GOBLIN_DTYPE_F32, float, BODY)                   \
        GC_CASE_(GOBLIN_DTYPE_F64, double, BODY)                  \
        GC_CASE_(GOBLIN_DTYPE_F16, gc_f16, BODY)                  \
        GC_CASE_(GOBLIN_DTYPE_BF16, gc_bf16, BODY)                \
        GC_CASE_(GOBLIN_DTYPE_I8, int8_t, BODY)                   \
        GC_CASE_(GOBLIN_DTYPE_I16, int16_t, BODY)                 \
        GC_CASE_(GOBLIN_DTYPE_I32, int32_t, BODY)                 \
        GC_CASE_(GOBLIN_DTYPE_I64, int64_t, BODY)                 \
        GC_CASE_(GOBLIN_DTYPE_U8, uint8_t, BODY)                  \
        GC_CASE_(GOBLIN_DTYPE_BOOL, gc_bool, BODY)                \
    default: break;                                               \
    }

static inline bool gc_is_float(goblin_dtype dt) {
    return dt == GOBLIN_DTYPE_F32 || dt == GOBLIN_DTYPE_F64 || dt == GOBLIN_DTYPE_F16 ||
           dt == GOBLIN_DTYPE_BF16;
}

/* ---- broadcasting index maps ---------------------------------------------- */

/* Up to 3 operands broadcast to an output shape: per operand the element
 * stride of each output dim (0 where it broadcasts). Passed by value. */
#define GC_MAX_OPS 3
typedef struct gc_bcast {
    int32_t rank;
    bool plain; /* every operand has the output's shape: offsets are the linear index */
    int64_t shape[GOBLIN_MAX_RANK];
    int64_t strides[GC_MAX_OPS][GOBLIN_MAX_RANK];
} gc_bcast;

/* Fill @p b for contiguous operands @p ops (n <= GC_MAX_OPS) and output @p out. */
void gc_bcast_init(gc_bcast *b, const goblin_tensor *const *ops, int32_t n,
                   const goblin_tensor *out);

__device__ __forceinline__ void gc_bcast_offsets(const gc_bcast &b, int64_t i, int32_t nops,
                                                 int64_t *off) {
    if (b.plain) {
        for (int32_t o = 0; o < nops; o++) off[o] = i;
        return;
    }
    for (int32_t o = 0; o < nops; o++) off[o] = 0;
    for (int32_t d = b.rank - 1; d >= 0; d--) {
        int64_t n = b.shape[d];
        int64_t idx = i % n;
        i /= n;
        for (int32_t o = 0; o < nops; o++) off[o] += idx * b.strides[o][d];
    }
}

/* Row-major strides for a shape (elements). */
static inline void gc_contig_strides(int32_t rank, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d] ? shape[d] : 1;
    }
}

/* ---- a general "gather by affine map" copy (cuda_shape.cu) ----------------
 * out[i] = in[base + sum_d idx_d(i) * strides[d]] over the output's shape;
 * used for permute, expand, slice, select and the layout changes that other
 * kernels need (e.g. moving reduced axes last). */
typedef struct gc_view {
    int32_t rank;
    int64_t shape[GOBLIN_MAX_RANK];
    int64_t strides[GOBLIN_MAX_RANK];
    int64_t base;
} gc_view;

goblin_err gc_copy_view(gc_call *c, const void *src, const gc_view *v, void *dst, size_t esz);

/* dst[dbase + sum idx*dstr] = src[sbase + sum idx*sstr] over @p shape (elements of esz bytes). */
goblin_err gc_copy_strided(gc_call *c, const void *src, void *dst, int32_t rank,
                           const int64_t *shape, const int64_t *sstr, int64_t sbase,
                           const int64_t *dstr, int64_t dbase, size_t esz);

/* Fill a device tensor with one value (converted as goblin__store_f64 does). */
goblin_err gc_fill_value(gc_call *c, goblin_tensor *out, double v);

/* A bool (0/1) copy of @p x in scratch memory: nonzero (NaN included) is true. */
goblin_err gc_nonzero(gc_call *c, const goblin_tensor *x, goblin_tensor *as_bool);

/* C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] for b in [0, batch): row-major
 * contiguous matrices (lda = ta ? m : k, ldb = tb ? k : n, ldc = n), element
 * strides sa/sb/sc between batches (0 broadcasts). beta == 0 never reads C.
 * cuBLAS for float dtypes when it loaded, else our kernel (any numeric dtype). */
goblin_err gc_gemm(gc_call *c, goblin_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                   double alpha, const void *A, int64_t sa, const void *B, int64_t sb, double beta,
                   void *C, int64_t sc, int64_t batch);

#endif
