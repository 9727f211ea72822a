/* libgoblin/backends/blis/blis_backend.c - the CPU backend: BLIS for matmul and
 * convolution, threaded vectorized loops for the hot elementwise, reduction and
 * formula ops. Ops without an entry run on the reference backend. */
#include <pthread.h>
#include <unistd.h>
#include "blis_impl.h"

static goblin__kernel_fn g_kernels[GOBLIN_OP_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int g_conflicts; /* ops set twice while a table is built (under g_once or a test) */

void goblin__blis_set(goblin__kernel_fn *t, goblin_op op, goblin__kernel_fn fn) {
    if ((unsigned)op >= GOBLIN_OP_COUNT) return;
    if (t[op]) g_conflicts++;
    else t[op] = fn;
}

int goblin__blis_kernel_table(goblin__kernel_fn *t, bool reverse) {
    static void (*const families[])(goblin__kernel_fn *) = {
        goblin__blis_register_gemm,      goblin__blis_register_conv,    goblin__blis_register_attention,
        goblin__blis_register_elementwise, goblin__blis_register_broadcast, goblin__blis_register_unary,
        goblin__blis_register_reduce,    goblin__blis_register_softmax, goblin__blis_register_norm,
        goblin__blis_register_pool,      goblin__blis_register_copy,    goblin__blis_register_formula,
    };
    int n = (int)(sizeof families / sizeof families[0]);
    g_conflicts = 0;
    for (int i = 0; i < n; i++) families[reverse ? n - 1 - i : i](t);
    goblin__blis_register_threaded(t); /* the rest, always last */
    return g_conflicts;
}

static void kernels_init(void) { (void)goblin__blis_kernel_table(g_kernels, false); }

static goblin__kernel_fn blis_kernel(goblin_op op) {
    if ((unsigned)op >= GOBLIN_OP_COUNT) return NULL;
    pthread_once(&g_once, kernels_init);
    return g_kernels[op];
}

static goblin_err blis_available(void) { return GOBLIN_OK; }

static goblin_err blis_init(void **ctx, const goblin_exec_params *p, char *msg, size_t cap) {
    (void)msg; (void)cap;
    goblin__blis_ctx *c = goblin__calloc(1, sizeof *c);
    if (!c) return GOBLIN_ENOMEM;
    int32_t t = p ? p->threads : 0;
    if (t <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        t = n > 0 ? (int32_t)n : 1;
    }
    c->threads = t;
    *ctx = c;
    return GOBLIN_OK;
}

static void blis_destroy(void *ctx) { goblin__free(ctx); }

static bool blis_supports(void *ctx, const goblin__node *n, const goblin__node *const *in) {
    (void)ctx; (void)in;
    return blis_kernel(n->op) != NULL;
}

static goblin_err blis_compute(goblin__kctx *k, const goblin__node *n, const goblin_tensor *in,
                               int32_t n_in, goblin_tensor *out) {
    goblin__kernel_fn fn = blis_kernel(n->op);
    if (!fn) return GOBLIN_ENOTSUP;
    return fn(k, n, in, n_in, out);
}

const goblin__backend_vtable goblin__backend_blis = {
    .abi = GOBLIN__BACKEND_ABI,
    .name = "blis",
    .available = blis_available,
    .init = blis_init,
    .destroy = blis_destroy,
    .supports = blis_supports,
    .compute = blis_compute,
};

void goblin__parallel_for(int32_t threads, int64_t n, void (*fn)(void *arg, int64_t i), void *arg) {
#ifdef _OPENMP
    if (threads > 1 && n > 1) {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int64_t i = 0; i < n; i++) fn(arg, i);
        return;
    }
#endif
    (void)threads;
    for (int64_t i = 0; i < n; i++) fn(arg, i);
}
