/* libgoblin/backends/ref/ref_backend.c - the reference backend: plain,
 * single-threaded C loops for every op. It is the oracle every other backend
 * is tested against, and the fallback for ops another backend lacks. */
#include <pthread.h>
#include "backends/kernel_util.h"

static goblin__kernel_fn g_kernels[GOBLIN_OP_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void kernels_init(void) {
    goblin__ref_register_elementwise(g_kernels);
    goblin__ref_register_unary(g_kernels);
    goblin__ref_register_reduce(g_kernels);
    goblin__ref_register_shape(g_kernels);
    goblin__ref_register_nn(g_kernels);
    goblin__ref_register_formula(g_kernels);
    goblin__ref_register_grad(g_kernels);
}

goblin__kernel_fn goblin__ref_kernel(goblin_op op) {
    if ((unsigned)op >= GOBLIN_OP_COUNT) return NULL;
    pthread_once(&g_once, kernels_init);
    return g_kernels[op];
}

static goblin_err ref_available(void) { return GOBLIN_OK; }

static goblin_err ref_init(void **ctx, const goblin_exec_params *p, char *msg, size_t cap) {
    (void)p; (void)msg; (void)cap;
    *ctx = NULL;
    return GOBLIN_OK;
}

static void ref_destroy(void *ctx) { (void)ctx; }

static bool ref_supports(void *ctx, const goblin__node *n, const goblin__node *const *in) {
    (void)ctx; (void)in;
    return goblin__ref_kernel(n->op) != NULL;
}

static goblin_err ref_compute(goblin__kctx *k, const goblin__node *n, const goblin_tensor *in,
                              int32_t n_in, goblin_tensor *out) {
    goblin__kernel_fn fn = goblin__ref_kernel(n->op);
    if (!fn)
        return goblin__errf(k->msg, k->cap, GOBLIN_ENOTSUP, "no reference kernel for op %s",
                            goblin_op_name(n->op));
    return fn(k, n, in, n_in, out);
}

const goblin__backend_vtable goblin__backend_ref = {
    .abi = GOBLIN__BACKEND_ABI,
    .name = "ref",
    .available = ref_available,
    .init = ref_init,
    .destroy = ref_destroy,
    .supports = ref_supports,
    .compute = ref_compute,
};
