/* libgoblin/graph/batch_axis.c - where the batch sits in every value of a graph
 * (docs/graph-format.md, "The batch axis"): each batched input names its batch dim
 * (given, or inferred by trying its dims in turn); the graph is instantiated at a
 * ghost batch size B + 1 and every node's dims that follow the batch are read off
 * against the original, a reshape's target being rewritten so that the batch stays
 * one dim (alone, or merged whole with neighbouring dims). Nodes that combine
 * samples (a reduction over the batch dim, a softmax along it, ...) are marked, so
 * that a graph cut into chunks can refuse outputs that are not per-sample. */
#include <stdio.h>
#include <string.h>

#include "graph_impl.h"
#include "rebatch.h"
#include "base/errf.h"

void goblin__batch_axes_clear(goblin__batch_axes *a) {
    if (!a) return;
    goblin__free(a->in_axis);
    goblin__free(a->bax);
    goblin__free(a->mix);
    goblin__free(a->why);
    goblin__free(a->why_dim);
    memset(a, 0, sizeof *a);
}

static int64_t prod(const int64_t *s, int32_t lo, int32_t hi) {
    int64_t p = 1;
    for (int32_t d = lo; d < hi; d++) p *= s[d];
    return p;
}

static void shape_str(const goblin__node *n, char *buf, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int32_t d = 0; d < n->rank && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", (long long)n->shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* The dim of reshape output @p out that holds the batch of input @p x (batch @p xb),
 * with its outer/inner factors; false if the reshape splits the batch across dims. */
static bool reshape_axis(const goblin__node *x, goblin__bax xb, const goblin__node *out, int64_t B,
                         goblin__bax *ob) {
    int64_t O = prod(x->shape, 0, xb.axis) * xb.outer;
    int64_t I = xb.inner * prod(x->shape, xb.axis + 1, x->rank);
    for (int32_t k = 0; k < out->rank; k++) {
        int64_t pk = prod(out->shape, 0, k), sk = prod(out->shape, k + 1, out->rank);
        if (pk < 1 || sk < 1 || O % pk || I % sk) continue;
        if (out->shape[k] == (O / pk) * B * (I / sk)) {
            *ob = (goblin__bax){k, O / pk, I / sk};
            return true;
        }
    }
    return false;
}

static int32_t norm_axis(int64_t a, int32_t rank) { return (int32_t)(a < 0 ? a + rank : a); }

/* Does node @p n work along the batch dim of one of its inputs (its values there
 * combined or reordered) without the shapes showing it? The input's dim, or -1. */
static int32_t along_batch(const goblin_graph *g, const goblin__node *n, const goblin__bax *bax) {
    const goblin__bax *b0 = n->n_inputs > 0 ? &bax[n->inputs[0]] : NULL;
    int32_t r0 = n->n_inputs > 0 ? g->nodes[n->inputs[0]].rank : 0;
    switch (n->op) {
    case GOBLIN_OP_SOFTMAX:
    case GOBLIN_OP_LOG_SOFTMAX:
    case GOBLIN_OP_CUMSUM:
    case GOBLIN_OP_GATHER:
    case GOBLIN_OP_SCATTER:
    case GOBLIN_OP_SCATTER_ADD:
    case GOBLIN_OP_INDEX_SELECT:
        if (b0->axis >= 0 && norm_axis(goblin__attr_i(n, GOBLIN_ATTR_AXIS, -1), r0) == b0->axis) return b0->axis;
        return -1;
    case GOBLIN_OP_LAYER_NORM:
    case GOBLIN_OP_RMS_NORM:
        if (b0->axis >= r0 - goblin__attr_i(n, GOBLIN_ATTR_NORM_NDIM, 1)) return b0->axis;
        for (int32_t i = 1; i < n->n_inputs; i++)
            if (bax[n->inputs[i]].axis >= 0) return bax[n->inputs[i]].axis;
        return -1;
    case GOBLIN_OP_SDPA:
        if (b0->axis >= r0 - 1) return b0->axis;
        for (int32_t i = 1; i < 3 && i < n->n_inputs; i++) {
            int32_t a = bax[n->inputs[i]].axis, r = g->nodes[n->inputs[i]].rank;
            if (a >= r - 2) return a;
        }
        return -1;
    case GOBLIN_OP_CONV2D:
        if (b0->axis > 0) return b0->axis;
        for (int32_t i = 1; i < n->n_inputs; i++)
            if (bax[n->inputs[i]].axis >= 0) return bax[n->inputs[i]].axis;
        return -1;
    case GOBLIN_OP_MAX_POOL2D:
    case GOBLIN_OP_AVG_POOL2D:
    case GOBLIN_OP_ADAPTIVE_AVG_POOL2D:
        return b0->axis >= r0 - 2 ? b0->axis : -1;
    case GOBLIN_OP_BATCH_NORM:
        if (b0->axis >= 0 && (goblin__attr_i(n, GOBLIN_ATTR_TRAINING, 0) ? b0->axis != 1 : b0->axis == 1))
            return b0->axis;
        return -1;
    case GOBLIN_OP_NLL_LOSS:
    case GOBLIN_OP_CROSS_ENTROPY:
        return b0->axis == 1 || (r0 == 1 && b0->axis == 0) ? b0->axis : -1;
    default:
        return -1;
    }
}

/* ---- one instance of the graph at another batch size ------------------------------ */

/* Rewrite the SHAPE attribute of node @p on (prototype attrs @p attrs) for batch size
 * @p size, the batch sitting at @p b of the node's output. */
static void rewrite_shape(const goblin__node *on, goblin_attr *attrs, int32_t na, goblin__bax b, int64_t size) {
    if (b.axis < 0) return;
    for (int32_t a = 0; a < na; a++) {
        goblin_attr *s = &attrs[a];
        if (s->key != GOBLIN_ATTR_SHAPE || s->count != on->rank || b.axis >= s->count) continue;
        if (s->v.ints[b.axis] != -1) s->v.ints[b.axis] = b.outer * size * b.inner;
    }
}

static bool follows_batch_op(goblin_op op) {
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

goblin_err goblin__batch_instance(const goblin_graph *g, goblin__batch_axes *ax, bool analyse, int64_t size,
                                  goblin_graph **out, char *msg, size_t cap) {
    int64_t B = ax->batch;
    goblin_graph *ng = NULL;
    goblin_err e = goblin_graph_new(&ng);
    if (e) return e;
    int32_t next_input = 0;
    for (int32_t id = 0; id < g->n_nodes; id++) {
        const goblin__node *on = &g->nodes[id];
        goblin__node p = *on; /* a prototype: goblin__graph_add_node copies what it points to */
        goblin_attr attrs[GOBLIN__MAX_OP_ATTRS];
        int32_t na = on->n_attrs < GOBLIN__MAX_OP_ATTRS ? on->n_attrs : GOBLIN__MAX_OP_ATTRS;
        if (na > 0) memcpy(attrs, on->attrs, (size_t)na * sizeof *attrs);
        p.attrs = attrs;
        p.n_attrs = na;
        goblin__bax want = {-1, 1, 1};
        bool alt = false; /* creation ops: retry without the rewrite if it fails */
        if (on->op == GOBLIN_OP_INPUT) {
            int32_t a = ax->in_axis[next_input++];
            if (a >= 0) {
                p.shape[a] = size;
                want = (goblin__bax){a, 1, 1};
            }
        } else if (!analyse) {
            if (ax->bax) want = ax->bax[id]; /* NULL: nothing follows the batch (a copy) */
            if (size != B) rewrite_shape(on, attrs, na, want, size);
        } else if (on->op == GOBLIN_OP_RESHAPE && ax->bax[on->inputs[0]].axis >= 0) {
            const goblin__node *x = &g->nodes[on->inputs[0]];
            if (!reshape_axis(x, ax->bax[on->inputs[0]], on, B, &want)) {
                char xs[96], os[96];
                shape_str(x, xs, sizeof xs);
                shape_str(on, os, sizeof os);
                snprintf(msg, cap, "node %d (reshape): %s -> %s splits the batch (dim %d of the input, %lld "
                         "samples) across several dims; keep the batch one dim, alone or merged whole with "
                         "its neighbours (x.reshape(B, -1)), or run the batch in one chunk",
                         (int)id, xs, os, (int)ax->bax[on->inputs[0]].axis, (long long)B);
                goblin_graph_free(ng);
                return GOBLIN_ESHAPE;
            }
            rewrite_shape(on, attrs, na, want, size);
        } else if (on->op == GOBLIN_OP_EXPAND) {
            const goblin__node *x = &g->nodes[on->inputs[0]];
            goblin__bax xb = ax->bax[on->inputs[0]];
            int32_t off = on->rank - x->rank;
            if (xb.axis >= 0) want = (goblin__bax){xb.axis + off, xb.outer, xb.inner};
            else if (on->rank >= 1 && on->shape[0] == B && (off > 0 || x->shape[0] == 1))
                want = (goblin__bax){0, 1, 1}; /* a broadcast to the batch size follows the batch */
            else {
                /* elsewhere, when one dim alone is broadcast to the batch size (the gradient
                 * of a sum, expanded over a seq-first [seq, batch, ...] value) */
                int32_t k1 = -1, nk = 0;
                for (int32_t k = 1; k < on->rank; k++)
                    if (on->shape[k] == B && (k < off || x->shape[k - off] == 1)) {
                        nk++;
                        k1 = k;
                    }
                if (nk == 1) want = (goblin__bax){k1, 1, 1};
            }
            rewrite_shape(on, attrs, na, want, size);
        } else if (follows_batch_op(on->op) && on->rank >= 1) {
            if (on->shape[0] == B) want = (goblin__bax){0, 1, 1};
            /* the batch merged with other dims in dim 0 ([seq * batch, vocab] logits): as the
             * input of the same leading size that carries it there */
            for (int32_t k = 0; k < on->n_inputs && want.axis < 0; k++) {
                goblin__bax ib = ax->bax[on->inputs[k]];
                if (ib.axis == 0 && g->nodes[on->inputs[k]].shape[0] == on->shape[0]) want = ib;
            }
            if (want.axis >= 0) {
                rewrite_shape(on, attrs, na, want, size);
                alt = true;
            }
        }
        int32_t nid = -1;
        e = goblin__graph_add_node(ng, &p, &nid);
        if (e && alt && e != GOBLIN_ENOMEM) {
            memcpy(attrs, on->attrs, (size_t)na * sizeof *attrs);
            e = goblin__graph_add_node(ng, &p, &nid);
        }
        if (e) {
            snprintf(msg, cap, "%s", goblin_graph_error(ng));
            goblin_graph_free(ng);
            return e == GOBLIN_ENOMEM ? e : GOBLIN_ESHAPE;
        }
        if (!analyse) continue;
        /* What follows the batch: the dims that differ from the original's. */
        const goblin__node *nn = &ng->nodes[nid];
        int32_t nd = 0, d1 = -1;
        for (int32_t d = 0; d < on->rank; d++)
            if (nn->shape[d] != on->shape[d]) {
                nd++;
                if (d1 < 0) d1 = d;
            }
        int32_t mix_in = -1;
        bool in_batched = false;
        for (int32_t k = 0; k < on->n_inputs; k++) {
            int32_t s = on->inputs[k];
            if (ax->mix[s] >= 0 && mix_in < 0) mix_in = ax->mix[s];
            in_batched |= ax->bax[s].axis >= 0;
        }
        goblin__bax b = {-1, 1, 1};
        uint8_t why = GOBLIN__MIX_NONE;
        if (nd == 1) {
            int64_t f = on->shape[d1] / B;
            if (on->shape[d1] % B || nn->shape[d1] != f * size) {
                why = GOBLIN__MIX_LENGTH;
            } else if (want.axis == d1 && want.outer * want.inner == f) {
                b = want;
            } else {
                for (int32_t k = 0; k < on->n_inputs && b.axis < 0; k++) {
                    const goblin__bax *ib = &ax->bax[on->inputs[k]];
                    const goblin__node *x = &g->nodes[on->inputs[k]];
                    if (ib->axis >= 0 && x->shape[ib->axis] == on->shape[d1] && ib->outer * ib->inner == f)
                        b = (goblin__bax){d1, ib->outer, ib->inner};
                }
                if (b.axis < 0 && f == 1) b = (goblin__bax){d1, 1, 1};
                if (b.axis < 0) why = GOBLIN__MIX_LENGTH;
            }
            if (b.axis < 0) b = (goblin__bax){d1, f, 1}; /* still rescaled, but not per-sample */
        } else if (nd > 1) {
            why = GOBLIN__MIX_TWICE;
        } else if (in_batched) {
            why = GOBLIN__MIX_REDUCE;
        }
        if (why == GOBLIN__MIX_NONE && along_batch(g, on, ax->bax) >= 0) why = GOBLIN__MIX_ALONG;
        ax->bax[id] = b;
        ax->why[id] = why;
        ax->mix[id] = mix_in >= 0 ? mix_in : why != GOBLIN__MIX_NONE ? id : -1;
        if (why != GOBLIN__MIX_NONE && mix_in < 0) {
            /* the input's batch dim, for the message */
            int32_t a = -1;
            for (int32_t k = 0; k < on->n_inputs && a < 0; k++) a = ax->bax[on->inputs[k]].axis;
            ax->why_dim[id] = a;
        }
    }
    for (int32_t o = 0; o < g->n_outputs; o++)
        if ((e = goblin_graph_output(ng, g->output_ids[o])) != GOBLIN_OK) {
            snprintf(msg, cap, "%s", goblin_graph_error(ng));
            goblin_graph_free(ng);
            return GOBLIN_ESHAPE;
        }
    if (out) *out = ng;
    else goblin_graph_free(ng);
    return GOBLIN_OK;
}

void goblin__batch_mix_msg(const goblin_graph *g, const goblin__batch_axes *ax, int32_t node, char *buf,
                           size_t cap) {
    int32_t m = ax->mix[node];
    if (m < 0) {
        snprintf(buf, cap, "node %d is per-sample", (int)node);
        return;
    }
    const char *op = goblin_op_name(g->nodes[m].op);
    int32_t d = ax->why_dim[m];
    switch (ax->why[m]) {
    case GOBLIN__MIX_REDUCE:
        snprintf(buf, cap, "node %d (%s) reduces over the batch (dim %d of its input), so what follows it "
                 "depends on the whole batch", (int)m, op, (int)d);
        break;
    case GOBLIN__MIX_ALONG:
        snprintf(buf, cap, "node %d (%s) works along the batch (dim %d of its input), mixing samples", (int)m,
                 op, (int)d);
        break;
    case GOBLIN__MIX_TWICE:
        snprintf(buf, cap, "node %d (%s) holds the batch in two dims (samples paired with samples)", (int)m, op);
        break;
    default:
        snprintf(buf, cap, "node %d (%s) changes the length of the batch dim (a slice, pad or concat along "
                 "it)", (int)m, op);
        break;
    }
}

/* ---- the inputs' batch dims ------------------------------------------------------- */

static goblin_err analyse(const goblin_graph *g, goblin__batch_axes *ax, char *msg, size_t cap) {
    for (int32_t id = 0; id < g->n_nodes; id++) {
        ax->bax[id] = (goblin__bax){-1, 1, 1};
        ax->mix[id] = -1;
        ax->why[id] = GOBLIN__MIX_NONE;
        ax->why_dim[id] = -1;
    }
    if (ax->batch + 1 > GOBLIN_MAX_DIM) {
        snprintf(msg, cap, "the batch of %lld is too large", (long long)ax->batch);
        return GOBLIN_ERANGE;
    }
    return goblin__batch_instance(g, ax, true, ax->batch + 1, NULL, msg, cap);
}

/* Is every output per-sample or a reduction over the batch by its own node? */
static bool clean(const goblin_graph *g, const goblin__batch_axes *ax) {
    for (int32_t o = 0; o < g->n_outputs; o++) {
        int32_t id = g->output_ids[o];
        if (ax->mix[id] < 0) continue;
        goblin_op op = g->nodes[id].op;
        bool red = op == GOBLIN_OP_SUM || op == GOBLIN_OP_MEAN || op == GOBLIN_OP_REDUCE_MAX || op == GOBLIN_OP_REDUCE_MIN;
        if (!(red && ax->mix[id] == id && ax->why[id] == GOBLIN__MIX_REDUCE)) return false;
    }
    return true;
}

/* Candidate @p d: the batch dim of the first batched input; the others' dims chosen. */
static goblin_err candidate(const goblin_graph *g, const goblin_split *split, const int32_t *axes, int32_t d,
                            goblin__batch_axes *ax, char *msg, size_t cap) {
    int32_t ni = g->n_inputs;
    int64_t B = -1;
    for (int32_t i = 0; i < ni; i++) {
        const goblin__node *in = &g->nodes[g->input_ids[i]];
        int32_t a = -1;
        bool b;
        if (split) {
            if ((unsigned)split[i] > GOBLIN_SPLIT_BATCH) {
                snprintf(msg, cap, "input %d: split %d is not a goblin_split", (int)i, (int)split[i]);
                return GOBLIN_EINVAL;
            }
            b = split[i] == GOBLIN_SPLIT_BATCH;
            if (b && in->rank < 1) {
                snprintf(msg, cap, "input %d: a scalar cannot be split along the batch", (int)i);
                return GOBLIN_EINVAL;
            }
        } else {
            b = in->rank >= 1 && (i == 0 || (B >= 0 && in->rank > d && in->shape[d] == B));
            if (i == 0 && in->rank <= d) b = false;
        }
        if (!b) {
            ax->in_axis[i] = -1;
            continue;
        }
        if (axes && axes[i] >= 0) {
            a = axes[i];
            if (a >= in->rank) {
                snprintf(msg, cap, "input %d: batch axis %d is not a dim of its shape (rank %d)", (int)i, (int)a,
                         (int)in->rank);
                return GOBLIN_EINVAL;
            }
        } else if (B < 0) {
            a = d;
            if (a >= in->rank) return GOBLIN_ESHAPE; /* no such candidate */
        } else if (in->rank > d && in->shape[d] == B) {
            a = d;
        } else {
            for (int32_t k = 0; k < in->rank && a < 0; k++)
                if (in->shape[k] == B) a = k;
            if (a < 0) {
                snprintf(msg, cap, "input %d: no dim equals the batch size %lld of the other batched inputs",
                         (int)i, (long long)B);
                return GOBLIN_ESHAPE;
            }
        }
        if (B >= 0 && in->shape[a] != B) {
            snprintf(msg, cap, "input %d: batch dim %d has %lld samples, the other batched inputs %lld", (int)i,
                     (int)a, (long long)in->shape[a], (long long)B);
            return GOBLIN_ESHAPE;
        }
        B = in->shape[a];
        ax->in_axis[i] = a;
    }
    if (B < 0) {
        snprintf(msg, cap, "no input is split along the batch");
        return GOBLIN_EINVAL;
    }
    ax->batch = B;
    return GOBLIN_OK;
}

goblin_err goblin__batch_axes_find(const goblin_graph *g, const goblin_split *split, const int32_t *axes,
                                   goblin__batch_axes *ax, char *msg, size_t cap) {
    char tmp[8];
    if (!msg || !cap) {
        msg = tmp;
        cap = sizeof tmp;
    }
    msg[0] = 0;
    memset(ax, 0, sizeof *ax);
    int32_t ni = g->n_inputs, nn = g->n_nodes;
    ax->n_inputs = ni;
    ax->n_nodes = nn;
    ax->in_axis = goblin__calloc((size_t)(ni > 0 ? ni : 1), sizeof *ax->in_axis);
    ax->bax = goblin__calloc((size_t)(nn > 0 ? nn : 1), sizeof *ax->bax);
    ax->mix = goblin__calloc((size_t)(nn > 0 ? nn : 1), sizeof *ax->mix);
    ax->why = goblin__calloc((size_t)(nn > 0 ? nn : 1), sizeof *ax->why);
    ax->why_dim = goblin__calloc((size_t)(nn > 0 ? nn : 1), sizeof *ax->why_dim);
    if (!ax->in_axis || !ax->bax || !ax->mix || !ax->why || !ax->why_dim) {
        goblin__batch_axes_clear(ax);
        return GOBLIN_ENOMEM;
    }
    /* Given axes for every batched input: no search. */
    bool given = axes != NULL;
    for (int32_t i = 0; given && i < ni; i++)
        if (axes[i] < 0 && (!split || split[i] == GOBLIN_SPLIT_BATCH)) given = false;
    int32_t first_rank = 0;
    for (int32_t i = 0; i < ni; i++) {
        if (split && split[i] != GOBLIN_SPLIT_BATCH) continue;
        first_rank = g->nodes[g->input_ids[i]].rank;
        break;
    }
    int32_t nd = given ? 1 : first_rank > 0 ? first_rank : 1;
    goblin_err first_e = GOBLIN_OK;
    char first_msg[400] = "";
    int32_t fallback = -1;
    for (int32_t d = 0; d < nd; d++) {
        char m[400] = "";
        goblin_err e = candidate(g, split, axes, d, ax, m, sizeof m);
        if (!e) e = analyse(g, ax, m, sizeof m);
        if (!e && clean(g, ax)) return GOBLIN_OK;
        if (!e && d == 0) fallback = d;
        if (d == 0) {
            first_e = e;
            snprintf(first_msg, sizeof first_msg, "%s", m);
        }
        if (e == GOBLIN_ENOMEM) break;
    }
    goblin_err e = first_e;
    if (fallback >= 0 && first_e != GOBLIN_ENOMEM) {
        /* No candidate makes every output per-sample: dim 0 (the rule before the
         * batch was traced), judged later against the outputs' combine rules. */
        e = candidate(g, split, axes, fallback, ax, msg, cap);
        if (!e) e = analyse(g, ax, msg, cap);
        if (!e) return GOBLIN_OK;
    } else {
        snprintf(msg, cap, "%s", first_msg[0] ? first_msg : goblin_strerror(first_e ? first_e : GOBLIN_ESHAPE));
    }
    goblin__batch_axes_clear(ax);
    return e ? e : GOBLIN_ESHAPE;
}
