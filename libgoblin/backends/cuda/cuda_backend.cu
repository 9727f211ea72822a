/* libgoblin/backends/cuda/cuda_backend.cu - the CUDA backend: device
 * detection, context (device, stream, cuBLAS handle), and the per-node driver
 * that stages host tensors on the device, runs a device kernel and copies the
 * result back. The kernels live in cuda_<group>.cu. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "cuda_impl.h"
#include "cuda_backend.h"

/* ---- errors ---------------------------------------------------------------- */

goblin_err gc_fail(char *msg, size_t cap, cudaError_t e, const char *what) {
    goblin_err g;
    switch (e) {
    case cudaErrorMemoryAllocation: g = GOBLIN_ENOMEM; break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice: g = GOBLIN_ENODEV; break;
    default: g = GOBLIN_EDEVICE; break;
    }
    /* Clear a non-sticky error so the next call on this thread starts clean;
     * a sticky one (the context is lost) keeps failing, which is right. */
    (void)cudaGetLastError();
    if (msg && cap) goblin__errf(msg, cap, g, "cuda: %s: %s (%s, %d)", what, cudaGetErrorString(e),
                                 cudaGetErrorName(e), (int)e);
    return g;
}

/* ---- cuBLAS loader ----------------------------------------------------------- */

static gc_cublas_api g_blas;
static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

static void blas_load(void) {
    const char *off = getenv("GOBLIN_CUDA_NO_CUBLAS"); /* forces our own GEMM (testing) */
    if (off && off[0] && off[0] != '0') return;
    static const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    gc_cublas_api a;
    memset(&a, 0, sizeof a);
    /* dlsym returns void *; the casts below are the POSIX-sanctioned way. */
    a.create = (int (*)(void **))dlsym(h, "cublasCreate_v2");
    a.destroy = (int (*)(void *))dlsym(h, "cublasDestroy_v2");
    a.set_stream = (int (*)(void *, cudaStream_t))dlsym(h, "cublasSetStream_v2");
    a.set_math_mode = (int (*)(void *, int))dlsym(h, "cublasSetMathMode");
    a.gemm_strided_batched_ex =
        (int (*)(void *, int, int, int, int, int, const void *, const void *, int, int, long long,
                 const void *, int, int, long long, const void *, void *, int, int, long long, int,
                 int, int))dlsym(h, "cublasGemmStridedBatchedEx");
    a.status_string = (const char *(*)(int))dlsym(h, "cublasGetStatusString");
    if (!a.create || !a.destroy || !a.set_stream || !a.set_math_mode ||
        !a.gemm_strided_batched_ex) {
        dlclose(h);
        return;
    }
    a.loaded = true;
    g_blas = a; /* the library stays loaded for the life of the process */
}

const gc_cublas_api *gc_cublas(void) {
    pthread_once(&g_blas_once, blas_load);
    return &g_blas;
}

/* ---- kernel table ------------------------------------------------------------ */

static gc_entry g_table[GOBLIN_OP_COUNT];
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static void table_init(void) {
    gc_register_elementwise(g_table);
    gc_register_unary(g_table);
    gc_register_reduce(g_table);
    gc_register_shape(g_table);
    gc_register_nn(g_table);
    gc_register_formula(g_table);
    gc_register_random(g_table);
    gc_register_grad(g_table);
}

static const gc_entry *entry(goblin_op op) {
    if ((unsigned)op >= GOBLIN_OP_COUNT) return NULL;
    pthread_once(&g_table_once, table_init);
    return g_table[op].fn ? &g_table[op] : NULL;
}

/* ---- the vtable -------------------------------------------------------------- */

static goblin_err cuda_available(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return GOBLIN_ENODEV;
    }
    return n > 0 ? GOBLIN_OK : GOBLIN_ENODEV;
}

static void ctx_free(gc_ctx *c) {
    if (!c) return;
    if (c->blas) gc_cublas()->destroy(c->blas);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    goblin__free(c);
}

static goblin_err cuda_init(void **out, const goblin_exec_params *p, char *msg, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return goblin__errf(msg, cap, GOBLIN_ENODEV,
                            "cuda: no usable device: %s (%s); is the NVIDIA driver installed?",
                            cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (n == 0) return goblin__errf(msg, cap, GOBLIN_ENODEV, "cuda: no CUDA device found");
    int dev = p ? p->device : 0;
    if (dev < 0 || dev >= n)
        return goblin__errf(msg, cap, GOBLIN_ENODEV, "cuda: device %d requested, %d present", dev,
                            n);
    gc_ctx *c = (gc_ctx *)goblin__calloc(1, sizeof *c);
    if (!c) return GOBLIN_ENOMEM;
    c->device = dev;
    goblin_err g = GOBLIN_OK;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(dev)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        g = gc_fail(msg, cap, e, "creating the context");
        ctx_free(c);
        return g;
    }
    c->sm_major = prop.major;
    const gc_cublas_api *b = gc_cublas();
    if (b->loaded) {
        void *h = NULL;
        int s = b->create(&h);
        if (s == 0 && h) {
            /* Default math (no TF32: f32 keeps its contract) and no reduced-
             * precision split-K sums for f16/bf16 outputs. */
            if (b->set_stream(h, c->stream) != 0 ||
                b->set_math_mode(h, GC_CUBLAS_DEFAULT_MATH |
                                        GC_CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) != 0) {
                b->destroy(h);
                h = NULL;
            }
        } else {
            h = NULL; /* cuBLAS present but unusable: fall back to our GEMM */
        }
        c->blas = h;
    }
    *out = c;
    return GOBLIN_OK;
}

static void cuda_destroy(void *ctx) {
    gc_ctx *c = (gc_ctx *)ctx;
    if (c) (void)cudaSetDevice(c->device);
    ctx_free(c);
}

static bool cuda_supports(void *ctx, const goblin__node *n, const goblin__node *const *in) {
    (void)ctx;
    const gc_entry *e = entry(n->op);
    if (!e || n->n_inputs > 64) return false;
    return e->supports ? e->supports(n, in) : true;
}

/* ---- per-node driver -------------------------------------------------------- */

goblin_err gc_scratch(gc_call *c, size_t bytes, void **out) {
    *out = NULL;
    if (bytes == 0) return GOBLIN_OK;
    if (c->n_scratch >= GC_MAX_SCRATCH)
        return goblin__errf(c->k->msg, c->k->cap, GOBLIN_EINTERNAL,
                            "cuda: too many temporary buffers for one node");
    void *p = NULL;
    GC_TRY(c, cudaMalloc(&p, bytes));
    c->scratch[c->n_scratch++] = p;
    *out = p;
    return GOBLIN_OK;
}

goblin_err gc_sync(gc_call *c, const char *what) {
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) return gc_fail(c->k->msg, c->k->cap, e, what);
    return GOBLIN_OK;
}

void gc_bcast_init(gc_bcast *b, const goblin_tensor *const *ops, int32_t n,
                   const goblin_tensor *out) {
    memset(b, 0, sizeof *b);
    b->rank = out->rank;
    b->plain = true;
    for (int32_t d = 0; d < out->rank; d++) b->shape[d] = out->shape[d];
    for (int32_t o = 0; o < n; o++) {
        const goblin_tensor *t = ops[o];
        int64_t cs[GOBLIN_MAX_RANK];
        gc_contig_strides(t->rank, t->shape, cs);
        if (t->rank != out->rank) b->plain = false;
        int32_t off = out->rank - t->rank;
        for (int32_t d = 0; d < out->rank; d++) {
            int32_t td = d - off;
            if (td < 0 || (t->shape[td] == 1 && out->shape[d] != 1)) {
                b->strides[o][d] = 0;
                b->plain = false;
            } else {
                b->strides[o][d] = cs[td];
                if (t->shape[td] != out->shape[d]) b->plain = false;
            }
        }
    }
}

/* Host copy of a strided tensor into contiguous @p dst (element size esz). */
static void pack_host(const goblin_tensor *t, size_t esz, char *dst) {
    int64_t n = gc_numel(t);
    int64_t idx[GOBLIN_MAX_RANK] = {0};
    const char *base = (const char *)t->data;
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int32_t d = 0; d < t->rank; d++) off += idx[d] * t->strides[d];
        memcpy(dst + (size_t)i * esz, base + off * (int64_t)esz, esz);
        for (int32_t d = t->rank - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
}

static thread_local float g_last_kernel_ms = -1.0f;

/* GOBLIN_CUDA_POISON=1 fills every device output with 0xFF bytes before its
 * kernel runs (outside the timed region), so that the conformance tests catch
 * elements a kernel forgets to write: cudaMalloc'd memory is often zero, which
 * would hide them. Read once per process. */
static bool g_poison;
static pthread_once_t g_poison_once = PTHREAD_ONCE_INIT;
static void poison_init(void) {
    const char *v = getenv("GOBLIN_CUDA_POISON");
    g_poison = v && v[0] && v[0] != '0';
}

extern "C" double goblin__cuda_last_kernel_ms(void) { return g_last_kernel_ms; }

static goblin_err cuda_compute(goblin__kctx *k, const goblin__node *n, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    gc_ctx *ctx = (gc_ctx *)k->backend;
    const gc_entry *ent = entry(n->op);
    if (!ent)
        return goblin__errf(k->msg, k->cap, GOBLIN_ENOTSUP, "cuda: no kernel for op %s",
                            goblin_op_name(n->op));
    if (n_in > 64) return goblin__errf(k->msg, k->cap, GOBLIN_ELIMIT, "cuda: too many inputs");
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess) return gc_fail(k->msg, k->cap, e, "cudaSetDevice");

    gc_call call;
    memset(&call, 0, sizeof call);
    call.ctx = ctx;
    call.k = k;
    call.stream = ctx->stream;

    goblin_tensor din[64];
    void *host_tmp[64] = {0};
    goblin_tensor dout = *out;
    cudaEvent_t ev[2] = {NULL, NULL};
    goblin_err g = GOBLIN_OK;

    for (int32_t i = 0; i < n_in && g == GOBLIN_OK; i++) {
        din[i] = in[i];
        gc_contig_strides(in[i].rank, in[i].shape, din[i].strides);
        size_t esz = goblin_dtype_size(in[i].dtype);
        int64_t numel = gc_numel(&in[i]);
        size_t bytes = (size_t)numel * esz;
        din[i].data = NULL;
        if (bytes == 0) continue;
        const void *src = in[i].data;
        if (!goblin_tensor_is_contiguous(&in[i])) {
            host_tmp[i] = goblin__alloc(bytes);
            if (!host_tmp[i]) {
                g = GOBLIN_ENOMEM;
                break;
            }
            pack_host(&in[i], esz, (char *)host_tmp[i]);
            src = host_tmp[i];
        }
        void *d = NULL;
        g = gc_scratch(&call, bytes, &d);
        if (g != GOBLIN_OK) break;
        din[i].data = d;
        e = cudaMemcpyAsync(d, src, bytes, cudaMemcpyHostToDevice, call.stream);
        if (e != cudaSuccess) g = gc_fail(k->msg, k->cap, e, "copying an input to the device");
    }

    size_t out_bytes = (size_t)gc_numel(out) * goblin_dtype_size(out->dtype);
    if (g == GOBLIN_OK) {
        gc_contig_strides(out->rank, out->shape, dout.strides);
        void *d = NULL;
        g = gc_scratch(&call, out_bytes, &d);
        dout.data = d;
        pthread_once(&g_poison_once, poison_init);
        if (g == GOBLIN_OK && g_poison && out_bytes &&
            (e = cudaMemsetAsync(d, 0xff, out_bytes, call.stream)) != cudaSuccess)
            g = gc_fail(k->msg, k->cap, e, "poisoning the output");
    }
    if (g == GOBLIN_OK) {
        if ((e = cudaEventCreate(&ev[0])) != cudaSuccess ||
            (e = cudaEventCreate(&ev[1])) != cudaSuccess ||
            (e = cudaEventRecord(ev[0], call.stream)) != cudaSuccess)
            g = gc_fail(k->msg, k->cap, e, "creating timing events");
    }
    if (g == GOBLIN_OK) g = ent->fn(&call, n, din, n_in, &dout);
    if (g == GOBLIN_OK && (e = cudaEventRecord(ev[1], call.stream)) != cudaSuccess)
        g = gc_fail(k->msg, k->cap, e, "recording a timing event");
    if (g == GOBLIN_OK && out_bytes) {
        e = cudaMemcpyAsync(out->data, dout.data, out_bytes, cudaMemcpyDeviceToHost, call.stream);
        if (e != cudaSuccess) g = gc_fail(k->msg, k->cap, e, "copying the output to the host");
    }
    /* Always drain the stream before freeing anything it may still use. */
    e = cudaStreamSynchronize(call.stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (g == GOBLIN_OK && e != cudaSuccess) g = gc_fail(k->msg, k->cap, e, "running the kernel");
    if (g == GOBLIN_OK) {
        float ms = -1.0f;
        if (cudaEventElapsedTime(&ms, ev[0], ev[1]) == cudaSuccess) g_last_kernel_ms = ms;
        else (void)cudaGetLastError();
    }
    for (int i = 0; i < 2; i++)
        if (ev[i]) (void)cudaEventDestroy(ev[i]);
    for (int32_t i = 0; i < call.n_scratch; i++) (void)cudaFree(call.scratch[i]);
    for (int32_t i = 0; i < n_in && i < 64; i++) goblin__free(host_tmp[i]);
    return g;
}

/* The vtable's memory query: device 0, as the worker's budget has always used. */
static goblin_err cuda_memory(uint64_t *total_bytes, uint64_t *free_bytes) {
    return goblin__cuda_device_memory(0, free_bytes, total_bytes);
}

extern "C" const goblin__backend_vtable goblin__backend_cuda = {
    GOBLIN__BACKEND_ABI, "cuda", cuda_available, cuda_init, cuda_destroy, cuda_supports,
    cuda_compute, cuda_memory,
};

/* ---- queries for the worker and the tests -------------------------------------- */

extern "C" goblin_err goblin__cuda_device_memory(int32_t device, uint64_t *free_bytes,
                                                 uint64_t *total_bytes) {
    if (!free_bytes || !total_bytes) return GOBLIN_EINVAL;
    *free_bytes = *total_bytes = 0;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n) {
        (void)cudaGetLastError();
        return GOBLIN_ENODEV;
    }
    size_t f = 0, t = 0;
    if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&f, &t) != cudaSuccess) {
        (void)cudaGetLastError();
        return GOBLIN_EDEVICE;
    }
    *free_bytes = f;
    *total_bytes = t;
    return GOBLIN_OK;
}

extern "C" bool goblin__cuda_op_has_kernel(goblin_op op) { return entry(op) != NULL; }

extern "C" bool goblin__cuda_cublas_loaded(void) { return gc_cublas()->loaded; }
