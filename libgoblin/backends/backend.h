/* libgoblin/backends/backend.h - the backend interface (internal).
 *
 * A backend is a versioned vtable plus a context. The executor gives a backend
 * one node at a time with its input tensors and a preallocated output. Inputs
 * are contiguous unless the op has GOBLIN__OPF_STRIDED, in which case they may
 * carry any strides (0 for broadcast); their shapes are the input nodes' shapes
 * (broadcasting is the kernel's job). The output is contiguous with the node's
 * dtype and shape, and its memory is uninitialized: a kernel writes every element. */
#ifndef GOBLIN__BACKEND_IMPL_H
#define GOBLIN__BACKEND_IMPL_H

#include "graph/graph_impl.h"

typedef struct goblin__kctx {
    int32_t threads;  /* threads this kernel may use (>= 1) */
    void *backend;    /* the backend's context */
    char *msg;        /* detail for data-dependent errors (e.g. an index out of range) */
    size_t cap;
    /* Unique per goblin_exec_run call (0: none): a kernel may keep what it derived from
     * its inputs for the other nodes of the same run (their buffers cannot be reused
     * for anything else while a later node still reads them), never across runs. */
    uint64_t run;
    /* goblin_exec_params.shapes_like, or NULL, and the id of the node being computed:
     * choose the algorithm for the shapes of like->nodes[node_id] and its inputs. */
    const goblin_graph *like;
    int32_t node_id;
} goblin__kctx;

typedef goblin_err (*goblin__kernel_fn)(goblin__kctx *k, const goblin__node *node,
                                        const goblin_tensor *in, int32_t n_in,
                                        goblin_tensor *out);

#define GOBLIN__BACKEND_ABI 2 /* 2: memory */

typedef struct goblin__backend_vtable {
    uint32_t abi; /* GOBLIN__BACKEND_ABI */
    const char *name;
    /* GOBLIN_OK, GOBLIN_ENOTSUP (not compiled in), GOBLIN_ENODEV (no device). */
    goblin_err (*available)(void);
    goblin_err (*init)(void **ctx, const goblin_exec_params *p, char *msg, size_t cap);
    void (*destroy)(void *ctx);
    /* Can this backend compute @p node (op, dtypes, attributes)? */
    bool (*supports)(void *ctx, const goblin__node *node, const goblin__node *const *in);
    goblin_err (*compute)(goblin__kctx *k, const goblin__node *node, const goblin_tensor *in,
                          int32_t n_in, goblin_tensor *out);
    /* Optional (NULL: the backend cannot tell): total and free bytes of the memory its
     * kernels compute in (CUDA: device 0, cudaMemGetInfo). GOBLIN_ENODEV with no device,
     * GOBLIN_EDEVICE if the query fails; both set to 0 on failure. */
    goblin_err (*memory)(uint64_t *total_bytes, uint64_t *free_bytes);
} goblin__backend_vtable;

extern const goblin__backend_vtable goblin__backend_ref;
extern const goblin__backend_vtable goblin__backend_blis;  /* only when GOBLIN_HAVE_BLIS */
extern const goblin__backend_vtable goblin__backend_cuda;  /* only when GOBLIN_HAVE_CUDA */

/* The reference kernels, indexed by op value (NULL for gaps). Filled once. */
goblin__kernel_fn goblin__ref_kernel(goblin_op op);

/* Each backends/ref/ref_<group>.c fills its ops' kernels (table size GOBLIN_OP_COUNT). */
void goblin__ref_register_elementwise(goblin__kernel_fn *t);
void goblin__ref_register_unary(goblin__kernel_fn *t);
void goblin__ref_register_reduce(goblin__kernel_fn *t);
void goblin__ref_register_shape(goblin__kernel_fn *t);
void goblin__ref_register_nn(goblin__kernel_fn *t);
void goblin__ref_register_formula(goblin__kernel_fn *t);
void goblin__ref_register_grad(goblin__kernel_fn *t);

#endif
