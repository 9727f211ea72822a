/* bench/gpu_bench.cu - the CUDA backend against the device's own limits, side by
 * side in one run (run by bench/gpu_check.sh; never fails on speed).
 *
 *   gemm f32 / bf16 8192^3: libgoblin's matmul node vs cublasGemmEx called here
 *     directly on device buffers (same types, f32 accumulation, no TF32);
 *   formula a*exp(-b*x)+c over 2^27 f32 and sum over 2^28 f32: bytes moved per
 *     second vs a device-to-device cudaMemcpy (bytes read + written).
 *
 * libgoblin takes host tensors, so each node also copies its inputs in and its
 * output out; the ratios use the device time of the node's kernels alone
 * (goblin__cuda_last_kernel_ms, CUDA events around the kernels), and the
 * end-to-end time with the transfers is printed beside them. Best of a few
 * runs after a warm-up. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <goblin/goblin.h>

#include "backends/cuda/cuda_backend.h"

#define CK(call)                                                                             \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                    \
                    cudaGetErrorString(e_));                                                 \
            exit(2);                                                                         \
        }                                                                                    \
    } while (0)

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* ---- cuBLAS, loaded as the backend loads it ----------------------------------- */

typedef int (*cublas_create_t)(void **);
typedef int (*cublas_destroy_t)(void *);
typedef int (*cublas_gemmex_t)(void *, int, int, int, int, int, const void *, const void *, int,
                               int, const void *, int, int, const void *, void *, int, int, int,
                               int);
static cublas_create_t p_create;
static cublas_destroy_t p_destroy;
static cublas_gemmex_t p_gemmex;

static bool load_cublas(void) {
    const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    void *h = NULL;
    for (int i = 0; i < 3 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) return false;
    p_create = (cublas_create_t)dlsym(h, "cublasCreate_v2");
    p_destroy = (cublas_destroy_t)dlsym(h, "cublasDestroy_v2");
    p_gemmex = (cublas_gemmex_t)dlsym(h, "cublasGemmEx");
    return p_create && p_destroy && p_gemmex;
}

/* ---- helpers ---------------------------------------------------------------------- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (float)((g_rng * 0x2545F4914F6CDD1DULL) >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

static uint16_t to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

__global__ void k_fill(float *p, int64_t n, uint32_t salt) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ salt;
        h ^= h >> 16;
        h *= 0x7feb352du;
        h ^= h >> 15;
        p[i] = (float)(h >> 8) * 0x1p-24f * 2.0f - 1.0f;
    }
}

__global__ void k_fill_bf16(uint16_t *p, int64_t n, uint32_t salt) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ salt;
        h ^= h >> 16;
        p[i] = (uint16_t)(0x3c00u | (h & 0x7fu)); /* bf16 values in [0.0078, 0.0156) */
    }
}

typedef struct result {
    const char *name;
    double goblin_ms, ref_ms, e2e_ms;
    double ratio; /* goblin speed / reference speed */
    const char *unit;
    double goblin_rate, ref_rate, goal;
    int64_t fallbacks;
    bool ok;
} result;

static result g_res[8];
static int g_nres;

/* Run graph @p g on CUDA @p reps times; best kernel ms and best end-to-end ms. */
static bool run_goblin(goblin_graph *g, const goblin_tensor *ins, int32_t n_in,
                       goblin_tensor *out, int reps, double *kernel_ms, double *e2e_ms,
                       int64_t *fallbacks) {
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_CUDA;
    goblin_exec *ex = NULL;
    goblin_err e = goblin_exec_new(&ex, g, &p);
    if (e) {
        fprintf(stderr, "goblin_exec_new: %s\n", goblin_strerror(e));
        return false;
    }
    *kernel_ms = *e2e_ms = INFINITY;
    for (int r = 0; r < reps + 1; r++) { /* the first run warms up */
        double t0 = now_ms();
        e = goblin_exec_run(ex, ins, n_in, out, 1);
        double t1 = now_ms();
        if (e) {
            fprintf(stderr, "goblin_exec_run: %s: %s\n", goblin_strerror(e), goblin_exec_error(ex));
            goblin_exec_free(ex);
            return false;
        }
        double k = goblin__cuda_last_kernel_ms();
        if (r > 0) {
            if (k < *kernel_ms) *kernel_ms = k;
            if (t1 - t0 < *e2e_ms) *e2e_ms = t1 - t0;
        }
    }
    goblin_exec_stats st;
    goblin_exec_stats_get(ex, &st);
    *fallbacks = st.nodes_fallback;
    goblin_exec_free(ex);
    return true;
}

/* ---- device copy bandwidth ---------------------------------------------------------- */

static double copy_bandwidth(void) {
    size_t bytes = (size_t)1 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
    const int reps = 10;
    CK(cudaEventRecord(e0));
    for (int i = 0; i < reps; i++) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 2.0 * (double)bytes * reps / (ms * 1e-3) / 1e9; /* GB/s, read + write */
}

/* ---- GEMM ---------------------------------------------------------------------------- */

static void bench_gemm(bool bf16, int64_t n) {
    result *r = &g_res[g_nres++];
    memset(r, 0, sizeof *r);
    r->name = bf16 ? "gemm bf16 8192" : "gemm f32 8192";
    r->unit = "TFLOP/s";
    r->goal = 0.9;
    double flops = 2.0 * (double)n * n * n;
    size_t esz = bf16 ? 2 : 4;
    size_t bytes = (size_t)(n * n) * esz;
    /* cuBLAS directly, on device buffers */
    if (p_gemmex) {
        void *A, *B, *C, *h = NULL;
        CK(cudaMalloc(&A, bytes));
        CK(cudaMalloc(&B, bytes));
        CK(cudaMalloc(&C, bytes));
        if (bf16) {
            k_fill_bf16<<<4096, 256>>>((uint16_t *)A, n * n, 1);
            k_fill_bf16<<<4096, 256>>>((uint16_t *)B, n * n, 2);
        } else {
            k_fill<<<4096, 256>>>((float *)A, n * n, 1);
            k_fill<<<4096, 256>>>((float *)B, n * n, 2);
        }
        CK(cudaDeviceSynchronize());
        if (p_create(&h) == 0) {
            float one = 1, zero = 0;
            int type = bf16 ? 14 /* CUDA_R_16BF */ : 0 /* CUDA_R_32F */;
            cudaEvent_t e0, e1;
            CK(cudaEventCreate(&e0));
            CK(cudaEventCreate(&e1));
            double best = INFINITY;
            for (int rep = 0; rep < 4; rep++) {
                CK(cudaEventRecord(e0));
                int s = p_gemmex(h, 0, 0, (int)n, (int)n, (int)n, &one, B, type, (int)n, A, type,
                                 (int)n, &zero, C, type, (int)n, 68 /* COMPUTE_32F */,
                                 -1 /* GEMM_DEFAULT */);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (s != 0) fprintf(stderr, "cublasGemmEx status %d\n", s);
                if (rep > 0 && ms < best) best = ms;
            }
            r->ref_ms = best;
            p_destroy(h);
        }
        CK(cudaFree(A));
        CK(cudaFree(B));
        CK(cudaFree(C));
    }
    /* through libgoblin: host tensors in, host tensor out */
    void *ha = malloc(bytes), *hb = malloc(bytes), *hc = malloc(bytes);
    if (!ha || !hb || !hc) {
        fprintf(stderr, "out of host memory\n");
        exit(2);
    }
    for (int64_t i = 0; i < n * n; i++) {
        if (bf16) {
            ((uint16_t *)ha)[i] = to_bf16(frand());
            ((uint16_t *)hb)[i] = to_bf16(frand());
        } else {
            ((float *)ha)[i] = frand();
            ((float *)hb)[i] = frand();
        }
    }
    goblin_dtype dt = bf16 ? GOBLIN_DTYPE_BF16 : GOBLIN_DTYPE_F32;
    int64_t shape[2] = {n, n};
    goblin_graph *g;
    goblin_graph_new(&g);
    int32_t a, b, y;
    goblin_graph_input(g, dt, 2, shape, &a);
    goblin_graph_input(g, dt, 2, shape, &b);
    int32_t ab[2] = {a, b};
    goblin_graph_add(g, GOBLIN_OP_MATMUL, ab, 2, NULL, 0, &y);
    goblin_graph_output(g, y);
    goblin_tensor ins[2], out;
    goblin_tensor_init(&ins[0], dt, 2, shape, ha);
    goblin_tensor_init(&ins[1], dt, 2, shape, hb);
    goblin_tensor_init(&out, dt, 2, shape, hc);
    r->ok = run_goblin(g, ins, 2, &out, 2, &r->goblin_ms, &r->e2e_ms, &r->fallbacks);
    goblin_graph_free(g);
    free(ha);
    free(hb);
    free(hc);
    r->goblin_rate = flops / (r->goblin_ms * 1e-3) / 1e12;
    r->ref_rate = r->ref_ms > 0 ? flops / (r->ref_ms * 1e-3) / 1e12 : NAN;
    r->ratio = r->ref_ms > 0 ? r->ref_ms / r->goblin_ms : NAN;
}

/* ---- FORMULA and SUM vs copy bandwidth --------------------------------------------- */

static void bench_formula(double copy_gbs, int64_t n) {
    result *r = &g_res[g_nres++];
    memset(r, 0, sizeof *r);
    r->name = "formula a*exp(-b*x)+c";
    r->unit = "GB/s";
    r->goal = 0.8;
    size_t bytes = (size_t)n * 4;
    float *h[4];
    for (int i = 0; i < 4; i++) {
        h[i] = (float *)malloc(bytes);
        if (!h[i]) exit(2);
    }
    for (int64_t i = 0; i < n; i++) {
        h[0][i] = frand();
        h[1][i] = frand();
        h[2][i] = frand();
    }
    goblin_formula *f = NULL;
    goblin_formula_error fe;
    if (goblin_formula_parse("a * exp(-b * x) + c", &f, &fe)) {
        fprintf(stderr, "formula: %s\n", fe.message);
        r->ok = false;
        return;
    }
    /* variables in order of appearance: a, b, x, c; c is a scalar */
    int64_t shape[1] = {n};
    goblin_graph *g;
    goblin_graph_new(&g);
    int32_t v[4], y;
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, shape, &v[0]);
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, shape, &v[1]);
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, shape, &v[2]);
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 0, shape, &v[3]);
    goblin_err e = goblin_graph_add_formula(g, f, v, 4, &y);
    goblin_formula_free(f);
    if (e) {
        fprintf(stderr, "formula node: %s\n", goblin_graph_error(g));
        r->ok = false;
        goblin_graph_free(g);
        return;
    }
    goblin_graph_output(g, y);
    float c = 0.5f;
    goblin_tensor ins[4], out;
    for (int i = 0; i < 3; i++) goblin_tensor_init(&ins[i], GOBLIN_DTYPE_F32, 1, shape, h[i]);
    goblin_tensor_init(&ins[3], GOBLIN_DTYPE_F32, 0, shape, &c);
    goblin_tensor_init(&out, GOBLIN_DTYPE_F32, 1, shape, h[3]);
    r->ok = run_goblin(g, ins, 4, &out, 3, &r->goblin_ms, &r->e2e_ms, &r->fallbacks);
    goblin_graph_free(g);
    double moved = 4.0 * (double)bytes; /* three inputs read, one output written */
    r->goblin_rate = moved / (r->goblin_ms * 1e-3) / 1e9;
    r->ref_rate = copy_gbs;
    r->ratio = r->goblin_rate / copy_gbs;
    for (int i = 0; i < 4; i++) free(h[i]);
}

static void bench_sum(double copy_gbs, int64_t n) {
    result *r = &g_res[g_nres++];
    memset(r, 0, sizeof *r);
    r->name = "sum over 2^28 f32";
    r->unit = "GB/s";
    r->goal = 0.8;
    float *h = (float *)malloc((size_t)n * 4);
    if (!h) exit(2);
    for (int64_t i = 0; i < n; i++) h[i] = frand();
    int64_t shape[1] = {n};
    goblin_graph *g;
    goblin_graph_new(&g);
    int32_t x, y;
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, shape, &x);
    goblin_graph_add(g, GOBLIN_OP_SUM, &x, 1, NULL, 0, &y);
    goblin_graph_output(g, y);
    float s = 0;
    goblin_tensor in, out;
    goblin_tensor_init(&in, GOBLIN_DTYPE_F32, 1, shape, h);
    goblin_tensor_init(&out, GOBLIN_DTYPE_F32, 0, shape, &s);
    r->ok = run_goblin(g, &in, 1, &out, 3, &r->goblin_ms, &r->e2e_ms, &r->fallbacks);
    goblin_graph_free(g);
    double moved = 4.0 * (double)n;
    r->goblin_rate = moved / (r->goblin_ms * 1e-3) / 1e9;
    r->ref_rate = copy_gbs;
    r->ratio = r->goblin_rate / copy_gbs;
    free(h);
}

int main(int argc, char **argv) {
    int64_t gemm_n = 8192, fn = (int64_t)1 << 27, sn = (int64_t)1 << 28;
    if (argc > 1 && strcmp(argv[1], "--small") == 0) { /* a quick smoke run */
        gemm_n = 1024;
        fn = (int64_t)1 << 22;
        sn = (int64_t)1 << 22;
    }
    goblin_err av = goblin_backend_available(GOBLIN_BACKEND_CUDA);
    if (av != GOBLIN_OK) {
        printf("gpu_bench: CUDA backend unavailable: %s (%s)\n", goblin_strerror(av),
               goblin_err_name(av));
        return 3;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    uint64_t fr = 0, tot = 0;
    goblin__cuda_device_memory(0, &fr, &tot);
    bool blas = load_cublas();
    printf("device: %s, sm_%d%d, %d SMs, %.1f GiB (%.1f GiB free); libcublas %s\n", prop.name,
           prop.major, prop.minor, prop.multiProcessorCount, tot / 1073741824.0,
           fr / 1073741824.0, blas ? "loaded" : "NOT FOUND (matmul uses goblin's own GEMM)");
    if (!goblin__cuda_cublas_loaded()) printf("warning: the backend did not load libcublas\n");
    double copy_gbs = copy_bandwidth();
    printf("device copy bandwidth: %.0f GB/s (read + write)\n", copy_gbs);
    bench_gemm(false, gemm_n);
    bench_gemm(true, gemm_n);
    bench_formula(copy_gbs, fn);
    bench_sum(copy_gbs, sn);

    printf("\n%-24s %12s %12s %8s %6s %14s %9s\n", "benchmark", "goblin", "reference", "ratio",
           "goal", "end-to-end ms", "fallback");
    for (int i = 0; i < g_nres; i++) {
        result *r = &g_res[i];
        char a[32], b[32];
        snprintf(a, sizeof a, "%.1f %s", r->goblin_rate, r->unit);
        snprintf(b, sizeof b, "%.1f %s", r->ref_rate, r->unit);
        printf("%-24s %12s %12s %8.3f %6.2f %14.1f %9lld%s\n", r->name, r->ok ? a : "FAILED", b,
               r->ratio, r->goal, r->e2e_ms, (long long)r->fallbacks,
               r->ok && r->ratio >= r->goal ? "" : "  (below goal)");
    }
    printf("(gemm reference: cublasGemmEx on device buffers; formula/sum reference: device "
           "copy bandwidth; goblin columns: kernel time without host transfers)\n");
    return 0;
}
