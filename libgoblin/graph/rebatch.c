/* libgoblin/graph/rebatch.c - re-instantiate a graph for another batch size (goblin_graph_rebatch,
 * node.h): every node is re-added with its attributes, so shapes are re-inferred;
 * attributes that spell out the batch size are rescaled (docs/runtime.md, "graph
 * jobs"). */
#include <stdio.h>
#include <string.h>

#include "goblin/node.h"
#include "graph_impl.h"
#include "rebatch.h"
#include "base/names.h"
#include "base/errf.h"

static void msgf(char *msg, size_t cap, const char *fmt, const char *a) {
    if (msg && cap) snprintf(msg, cap, fmt, a);
}

goblin_err goblin__batch_inputs(const goblin_graph *g, const goblin_split *split, uint8_t *batched,
                                int64_t *batch, char *msg, size_t cap) {
    goblin__batch_axes ax;
    goblin_err e = goblin__batch_axes_find(g, split, NULL, &ax, msg, cap);
    if (e) return e;
    for (int32_t i = 0; batched && i < g->n_inputs; i++) batched[i] = ax.in_axis[i] >= 0;
    if (batch) *batch = ax.batch;
    goblin__batch_axes_clear(&ax);
    return GOBLIN_OK;
}

static const char *const g_split_names[GOBLIN_SPLIT_COUNT] = {
    [GOBLIN_SPLIT_BROADCAST] = "broadcast",
    [GOBLIN_SPLIT_BATCH] = "batch",
};

const char *goblin_split_name(goblin_split s) {
    return (unsigned)s < GOBLIN_SPLIT_COUNT ? g_split_names[s] : NULL;
}

goblin_err goblin_split_from_name(const char *name, goblin_split *out) {
    int i = goblin__name_index(g_split_names, GOBLIN_SPLIT_COUNT, name);
    if (i < 0 || !out) return GOBLIN_EINVAL;
    *out = (goblin_split)i;
    return GOBLIN_OK;
}

goblin_err goblin__graph_rebatch_at(const goblin_graph *g, const goblin__batch_axes *ax, int64_t rows,
                                    goblin_graph **out, char *err_msg, size_t err_cap) {
    char tmp[8];
    if (!err_msg || !err_cap) {
        err_msg = tmp;
        err_cap = sizeof tmp;
    }
    err_msg[0] = 0;
    if (!g || !out || !ax) return GOBLIN_EINVAL;
    if (rows < 1 || rows > GOBLIN_MAX_DIM) {
        msgf(err_msg, err_cap, "%s", "rows must be at least 1");
        return GOBLIN_EINVAL;
    }
    return goblin__batch_instance(g, (goblin__batch_axes *)ax, false, rows, out, err_msg, err_cap);
}

goblin_err goblin__graph_rebatch(const goblin_graph *g, const goblin_split *split, int64_t rows,
                                goblin_graph **out, char *err_msg, size_t err_cap) {
    if (err_msg && err_cap) err_msg[0] = 0;
    if (!g || !out) return GOBLIN_EINVAL;
    if (rows < 1 || rows > GOBLIN_MAX_DIM) {
        msgf(err_msg, err_cap, "%s", "rows must be at least 1");
        return GOBLIN_EINVAL;
    }
    goblin__batch_axes ax;
    goblin_err e = goblin__batch_axes_find(g, split, NULL, &ax, err_msg, err_cap);
    if (e) return e;
    e = goblin__graph_rebatch_at(g, &ax, rows, out, err_msg, err_cap);
    goblin__batch_axes_clear(&ax);
    return e;
}

goblin_err goblin_graph_rebatch(const goblin_graph *g, const goblin_split *split, int64_t rows,
                                goblin_graph **out, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, err_msg, err_cap);
    return goblin__graph_rebatch(g, split, rows, out, err_msg, err_cap);
}

/* ---- helpers for the node (scheduler.h) ---------------------------------------- */

uint64_t goblin__graph_task_bytes(const goblin_graph *g) {
    /* Every node's output (inputs, constants, intermediates, outputs) held at once:
     * an upper bound of what an evaluation needs, whatever the executor frees early. */
    uint64_t total = 0;
    for (int32_t id = 0; id < g->n_nodes; id++) {
        const goblin__node *n = &g->nodes[id];
        int64_t numel = 0;
        if (goblin__shape_numel(n->rank, n->shape, &numel) != GOBLIN_OK) return UINT64_MAX;
        total += (uint64_t)numel * goblin_dtype_size(n->dtype);
    }
    return total;
}

void goblin__graph_output_contract(const goblin_graph *g, int32_t o, goblin_op *op, int64_t *k) {
    const goblin__node *n = &g->nodes[g->output_ids[o]];
    const goblin__op_def *d = goblin__op_def_get(n->op);
    *op = n->op;
    *k = 1;
    if (n->n_inputs < 1 || (d && (d->flags & GOBLIN__OPF_ELEMENTWISE))) return;
    const goblin__node *x = &g->nodes[n->inputs[0]];
    int64_t nx = 0, nout = 0;
    goblin__shape_numel(x->rank, x->shape, &nx);
    goblin__shape_numel(n->rank, n->shape, &nout);
    if (n->op == GOBLIN_OP_MATMUL && x->rank >= 1) *k = x->shape[x->rank - 1];
    else if (nout > 0 && nx > nout) *k = nx / nout;
    else if (x->rank >= 1) *k = x->shape[x->rank - 1];
    if (*k < 1) *k = 1;
}

goblin_combine goblin__graph_auto_combine(const goblin_graph *g, const goblin__batch_axes *ax, int32_t o) {
    int32_t id = g->output_ids[o];
    const goblin__node *n = &g->nodes[id];
    if (ax->bax[id].axis >= 0) return GOBLIN_COMBINE_CONCAT;
    goblin_combine c;
    switch (n->op) {
    case GOBLIN_OP_SUM: c = GOBLIN_COMBINE_SUM; break;
    case GOBLIN_OP_MEAN: c = GOBLIN_COMBINE_MEAN; break;
    case GOBLIN_OP_REDUCE_MAX: c = GOBLIN_COMBINE_MAX; break;
    case GOBLIN_OP_REDUCE_MIN: c = GOBLIN_COMBINE_MIN; break;
    default: return GOBLIN_COMBINE_AUTO;
    }
    /* The reduced input must carry the batch, along a reduced dim. */
    const goblin__node *x = &g->nodes[n->inputs[0]];
    int32_t a = ax->bax[n->inputs[0]].axis;
    if (a < 0) return GOBLIN_COMBINE_AUTO;
    int32_t na = 0;
    const int64_t *axes = goblin__attr_ints(n, GOBLIN_ATTR_AXES, &na);
    if (!axes || na == 0) return c; /* all axes */
    for (int32_t i = 0; i < na; i++)
        if (axes[i] == a || axes[i] == a - (int64_t)x->rank) return c;
    return GOBLIN_COMBINE_AUTO;
}
