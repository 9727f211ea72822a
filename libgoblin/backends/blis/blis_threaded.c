/* libgoblin/backends/blis/blis_threaded.c - threads every elementwise op that has
 * no hand-written CPU kernel by running the reference kernel on slices of the
 * output's outermost dimension in parallel.
 *
 * Elementwise means each output element depends only on the input elements at
 * the same (broadcast) position, so slicing gives the same bits as one call, for
 * any thread count. Random ops are excluded: their values depend on the flat
 * element index (the counter), which slicing would shift. */
#include "blis_impl.h"

#define MIN_PARALLEL_ELEMS 32768

typedef struct slice_job {
    goblin__kernel_fn fn;
    const goblin__node *node;
    const goblin_tensor *in;
    int32_t n_in;
    const goblin_tensor *out;
    int64_t rows, per;
    goblin_err *errs;
    char (*msgs)[128];
} slice_job;

static void run_slice(void *arg, int64_t s) {
    slice_job *j = arg;
    int64_t r0 = s * j->per, r1 = r0 + j->per;
    if (r1 > j->rows) r1 = j->rows;
    if (r0 >= r1) {
        j->errs[s] = GOBLIN_OK;
        return;
    }
    goblin_tensor out = *j->out;
    size_t es = goblin_dtype_size(out.dtype);
    out.shape[0] = r1 - r0;
    out.data = (char *)out.data + r0 * out.strides[0] * (int64_t)es;
    goblin_tensor in_stack[8];
    goblin_tensor *in = in_stack;
    for (int32_t i = 0; i < j->n_in; i++) {
        in[i] = j->in[i];
        int32_t d = in[i].rank - j->out->rank; /* the input dim aligned with output dim 0 */
        if (d == 0 && in[i].shape[0] == j->rows && j->rows != 1) {
            size_t ies = goblin_dtype_size(in[i].dtype);
            in[i].shape[0] = r1 - r0;
            in[i].data = (char *)in[i].data + r0 * in[i].strides[0] * (int64_t)ies;
        }
    }
    goblin__kctx k = {1, NULL, j->msgs[s], sizeof j->msgs[s]};
    j->errs[s] = j->fn(&k, j->node, in, j->n_in, &out);
}

static goblin_err threaded_elementwise(goblin__kctx *k, const goblin__node *node,
                                       const goblin_tensor *in, int32_t n_in, goblin_tensor *out) {
    goblin__kernel_fn fn = goblin__ref_kernel(node->op);
    if (!fn) return GOBLIN_ENOTSUP;
    int64_t numel = goblin__numel(out);
    int32_t t = k->threads > 0 ? k->threads : 1;
    if (t > 64) t = 64;
    if (t == 1 || numel < MIN_PARALLEL_ELEMS || out->rank == 0 || out->shape[0] < 2 || n_in > 8)
        return fn(k, node, in, n_in, out);
    int64_t rows = out->shape[0];
    int64_t slices = rows < t ? rows : t;
    slice_job j = {fn, node, in, n_in, out, rows, (rows + slices - 1) / slices, NULL, NULL};
    goblin_err errs[64];
    char msgs[64][128];
    j.errs = errs;
    j.msgs = msgs;
    goblin__parallel_for(t, slices, run_slice, &j);
    for (int64_t s = 0; s < slices; s++)
        if (errs[s]) {
            goblin__errf(k->msg, k->cap, errs[s], "%s", msgs[s]);
            return errs[s];
        }
    return GOBLIN_OK;
}

/* Ops the reference kernels can compute slice by slice: elementwise, strided, not random. */
static bool slices_apply(goblin_op op) {
    const goblin__op_def *d = goblin__op_def_get(op);
    return d && (d->flags & GOBLIN__OPF_ELEMENTWISE) && !(d->flags & GOBLIN__OPF_RANDOM) &&
           (d->flags & GOBLIN__OPF_STRIDED) && goblin__ref_kernel(op);
}

goblin_err goblin__blis_elementwise_fallback(goblin__kctx *k, const goblin__node *node,
                                             const goblin_tensor *in, int32_t n_in, goblin_tensor *out) {
    return slices_apply(node->op) ? threaded_elementwise(k, node, in, n_in, out) : GOBLIN_ENOTSUP;
}

void goblin__blis_register_threaded(goblin__kernel_fn *t) {
    for (int op = 0; op < GOBLIN_OP_COUNT; op++)
        if (!t[op] && slices_apply((goblin_op)op)) t[op] = threaded_elementwise;
}
