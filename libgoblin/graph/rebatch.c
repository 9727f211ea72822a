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

static bool shape_differs(const goblin__node *a, const goblin__node *b) {
    if (a->rank != b->rank) return true;
    for (int32_t d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return true;
    return false;
}

static void msgf(char *msg, size_t cap, const char *fmt, const char *a) {
    if (msg && cap) snprintf(msg, cap, fmt, a);
}

goblin_err goblin__batch_inputs(const goblin_graph *g, const goblin_split *split, uint8_t *batched,
                                int64_t *batch, char *msg, size_t cap) {
    int32_t ni = g->n_inputs;
    int64_t B = -1;
    for (int32_t i = 0; i < ni; i++) {
        const goblin__node *in = &g->nodes[g->input_ids[i]];
        bool b;
        if (split) {
            if ((unsigned)split[i] > GOBLIN_SPLIT_BATCH) {
                if (msg && cap) snprintf(msg, cap, "input %d: split %d is not a goblin_split", (int)i, (int)split[i]);
                return GOBLIN_EINVAL;
            }
            b = split[i] == GOBLIN_SPLIT_BATCH;
            if (b && in->rank < 1) {
                if (msg && cap) snprintf(msg, cap, "input %d: a scalar cannot be split along the batch", (int)i);
                return GOBLIN_EINVAL;
            }
            if (b && B >= 0 && in->shape[0] != B) {
                if (msg && cap)
                    snprintf(msg, cap, "input %d: leading dim %lld differs from the batch size %lld of the other "
                             "batched inputs", (int)i, (long long)in->shape[0], (long long)B);
                return GOBLIN_ESHAPE;
            }
        } else {
            if (i == 0 && in->rank >= 1) B = in->shape[0];
            b = in->rank >= 1 && B >= 0 && in->shape[0] == B;
        }
        if (b) B = in->shape[0];
        if (batched) batched[i] = b;
    }
    if (B < 0) {
        msgf(msg, cap, "%s", "no input is split along the batch (dim 0)");
        return GOBLIN_EINVAL;
    }
    if (batch) *batch = B;
    return GOBLIN_OK;
}

/* Ops whose SHAPE attribute is the shape of a forward input that may carry the batch. */
static bool shape_attr_follows_batch(goblin_op op) {
    switch (op) {
    case GOBLIN_OP_CONV2D_BACKWARD_INPUT:
    case GOBLIN_OP_MAX_POOL2D_BACKWARD:
    case GOBLIN_OP_AVG_POOL2D_BACKWARD:
    case GOBLIN_OP_ADAPTIVE_AVG_POOL2D_BACKWARD:
    case GOBLIN_OP_NLL_LOSS_BACKWARD:
    case GOBLIN_OP_CROSS_ENTROPY_BACKWARD:
    case GOBLIN_OP_FULL:
    case GOBLIN_OP_ARANGE:
        return true;
    default:
        return false;
    }
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

goblin_err goblin__graph_rebatch(const goblin_graph *g, const goblin_split *split, int64_t rows,
                                goblin_graph **out, char *err_msg, size_t err_cap) {
    if (err_msg && err_cap) err_msg[0] = 0;
    if (!g || !out) return GOBLIN_EINVAL;
    if (rows < 1 || rows > GOBLIN_MAX_DIM) {
        msgf(err_msg, err_cap, "%s", "rows must be at least 1");
        return GOBLIN_EINVAL;
    }
    int32_t ni = g->n_inputs;
    uint8_t *batched = goblin__calloc((size_t)(ni > 0 ? ni : 1), 1);
    uint8_t *changed = goblin__calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), 1);
    goblin_graph *ng = NULL;
    goblin_err e = GOBLIN_ENOMEM;
    if (!batched || !changed) goto done;
    int64_t B = 0;
    if ((e = goblin__batch_inputs(g, split, batched, &B, err_msg, err_cap)) != GOBLIN_OK) goto done;
    if ((e = goblin_graph_new(&ng)) != GOBLIN_OK) goto done;
    int32_t next_input = 0;
    for (int32_t id = 0; id < g->n_nodes; id++) {
        const goblin__node *on = &g->nodes[id];
        goblin__node p = *on; /* a prototype: goblin__graph_add_node copies what it points to */
        goblin_attr attrs[GOBLIN__MAX_OP_ATTRS];
        int32_t na = on->n_attrs < GOBLIN__MAX_OP_ATTRS ? on->n_attrs : GOBLIN__MAX_OP_ATTRS;
        if (na > 0) memcpy(attrs, on->attrs, (size_t)na * sizeof *attrs);
        p.attrs = attrs;
        p.n_attrs = na;
        bool in_changed = false;
        for (int32_t k = 0; k < on->n_inputs; k++) in_changed |= changed[on->inputs[k]] != 0;
        int32_t shape_at = -1;
        for (int32_t a = 0; a < na; a++)
            if (attrs[a].key == GOBLIN_ATTR_SHAPE && attrs[a].count > 0) shape_at = a;
        bool alt = false; /* an alternative to try if the first attempt fails */
        goblin_attr alt_attr;
        if (on->op == GOBLIN_OP_INPUT) {
            if (batched[next_input++]) p.shape[0] = rows;
        } else if (shape_at >= 0 && rows != B) {
            goblin_attr *s = &attrs[shape_at];
            if (on->op == GOBLIN_OP_RESHAPE) {
                /* [q*B, ...] -> [p*B, ...] becomes [p*rows, ...]. */
                if (in_changed && s->v.ints[0] > 0 && s->v.ints[0] % B == 0)
                    s->v.ints[0] = s->v.ints[0] / B * rows;
            } else if (on->op == GOBLIN_OP_EXPAND) {
                const goblin__node *x = &g->nodes[on->inputs[0]];
                const goblin__node *nx = &ng->nodes[on->inputs[0]];
                int32_t off = s->count - x->rank;
                for (int32_t d = off > 0 ? off : 0; d < s->count; d++)
                    if (x->shape[d - off] != nx->shape[d - off] && s->v.ints[d] == x->shape[d - off])
                        s->v.ints[d] = -1; /* keep the (rescaled) input dim */
                /* A broadcast to the batch size (e.g. [1, d] -> [B, d]) follows the batch. */
                if (s->v.ints[0] == B && (off > 0 || x->shape[0] == 1)) s->v.ints[0] = rows;
            } else if (shape_attr_follows_batch(on->op) && s->v.ints[0] == B) {
                alt_attr = *s;
                alt = true;
                s->v.ints[0] = rows;
            }
        }
        int32_t nid = -1;
        e = goblin__graph_add_node(ng, &p, &nid);
        if (e && alt && e != GOBLIN_ENOMEM) {
            char first[256];
            snprintf(first, sizeof first, "%s", goblin_graph_error(ng));
            attrs[shape_at] = alt_attr;
            e = goblin__graph_add_node(ng, &p, &nid);
            if (e && err_msg && err_cap) snprintf(err_msg, err_cap, "%s", first);
            if (e) goto fail_msg_set;
        }
        if (e) {
            if (err_msg && err_cap) snprintf(err_msg, err_cap, "%s", goblin_graph_error(ng));
            goto fail_msg_set;
        }
        changed[id] = shape_differs(on, &ng->nodes[nid]);
    }
    for (int32_t o = 0; o < g->n_outputs; o++)
        if ((e = goblin_graph_output(ng, g->output_ids[o])) != GOBLIN_OK) {
            if (err_msg && err_cap) snprintf(err_msg, err_cap, "%s", goblin_graph_error(ng));
            goto fail_msg_set;
        }
    *out = ng;
    ng = NULL;
    e = GOBLIN_OK;
    goto done;
fail_msg_set:
    if (e != GOBLIN_ENOMEM) e = GOBLIN_ESHAPE;
done:
    goblin_graph_free(ng);
    goblin__free(batched);
    goblin__free(changed);
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

goblin_combine goblin__graph_auto_combine(const goblin_graph *g, const goblin_graph *probe,
                                          int64_t batch, int64_t probe_rows, int32_t o) {
    const goblin__node *n = &g->nodes[g->output_ids[o]];
    const goblin__node *pn = &probe->nodes[probe->output_ids[o]];
    if (n->rank >= 1 && n->shape[0] == batch && pn->rank == n->rank && pn->shape[0] == probe_rows)
        return GOBLIN_COMBINE_CONCAT;
    goblin_combine c;
    switch (n->op) {
    case GOBLIN_OP_SUM: c = GOBLIN_COMBINE_SUM; break;
    case GOBLIN_OP_MEAN: c = GOBLIN_COMBINE_MEAN; break;
    case GOBLIN_OP_REDUCE_MAX: c = GOBLIN_COMBINE_MAX; break;
    case GOBLIN_OP_REDUCE_MIN: c = GOBLIN_COMBINE_MIN; break;
    default: return GOBLIN_COMBINE_AUTO;
    }
    /* The reduced input must carry the batch along dim 0, and dim 0 must be reduced. */
    const goblin__node *x = &g->nodes[n->inputs[0]];
    const goblin__node *px = &probe->nodes[pn->inputs[0]];
    if (x->rank < 1 || x->shape[0] != batch || px->shape[0] != probe_rows) return GOBLIN_COMBINE_AUTO;
    int32_t na = 0;
    const int64_t *ax = goblin__attr_ints(n, GOBLIN_ATTR_AXES, &na);
    if (!ax || na == 0) return c; /* all axes */
    for (int32_t i = 0; i < na; i++)
        if (ax[i] == 0 || ax[i] == -(int64_t)x->rank) return c;
    return GOBLIN_COMBINE_AUTO;
}
