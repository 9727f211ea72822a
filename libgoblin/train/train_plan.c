/* libgoblin/train/train_plan.c - the trainer's view of a model: which nodes depend on the
 * batch and on the parameters, cost estimates, the stage partitioner (fewest stages
 * that fit the memory budget, then min-max balanced by compute) and tiles for a layer
 * whose weight alone exceeds the budget. The task graphs of each stage are in
 * task_graph.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "train_impl.h"
#include "graph/rebatch.h"

#define ERRF(e, ...) (snprintf(msg, cap, __VA_ARGS__), (e))

static int64_t node_numel(const goblin__node *n) {
    int64_t c = 1;
    for (int32_t d = 0; d < n->rank; d++) c *= n->shape[d];
    return c;
}

size_t goblin__train_stack_len(const goblin_graph *g) {
    size_t e = 64;
    for (int32_t i = 0; i < g->n_nodes; i++) e += (size_t)g->nodes[i].n_inputs;
    return e;
}

static double node_bytes(const goblin__node *n) {
    return (double)node_numel(n) * (double)goblin_dtype_size(n->dtype);
}

/* ---- model instances at another batch size ----------------------------------- */

goblin_err goblin__train_instance(const goblin_graph *g, int32_t n_params, int64_t batch0,
                                  int64_t rows, goblin_graph **out, char *msg, size_t cap) {
    /* The data inputs carry the batch along dim 0; the batch is traced through the
     * model (graph/batch_axis.c), so reshapes that merge it keep working. */
    int32_t ni = g->n_inputs;
    goblin_split *split = goblin__calloc((size_t)ni + 1, sizeof *split);
    int32_t *axes = goblin__calloc((size_t)ni + 1, sizeof *axes);
    goblin_err e = GOBLIN_ENOMEM;
    if (!split || !axes) goto done;
    for (int32_t i = 0; i < ni; i++) {
        const goblin__node *in = &g->nodes[g->input_ids[i]];
        bool b = i >= n_params && in->rank >= 1 && in->shape[0] == batch0;
        split[i] = b ? GOBLIN_SPLIT_BATCH : GOBLIN_SPLIT_BROADCAST;
        axes[i] = b ? 0 : -1;
    }
    goblin__batch_axes ax;
    char m[400] = "";
    if ((e = goblin__batch_axes_find(g, split, axes, &ax, m, sizeof m)) == GOBLIN_OK) {
        e = goblin__graph_rebatch_at(g, &ax, rows, out, m, sizeof m);
        goblin__batch_axes_clear(&ax);
    } else if (rows == batch0 && e != GOBLIN_ENOMEM) {
        /* the model at its own batch size: a copy, whatever the batch does inside */
        memset(&ax, 0, sizeof ax);
        ax.batch = batch0;
        for (int32_t i = 0; i < ni; i++) axes[i] = -1;
        ax.in_axis = axes;
        e = goblin__batch_instance(g, &ax, false, rows, out, m, sizeof m);
    }
    if (e) snprintf(msg, cap, "the model at %lld rows: %s", (long long)rows, m[0] ? m : goblin_strerror(e));
done:
    goblin__free(split);
    goblin__free(axes);
    return e;
}

/* ---- analysis ------------------------------------------------------------------- */

static double op_flops(const goblin_graph *g, const goblin__node *n) {
    double out = (double)node_numel(n);
    switch (n->op) {
    case GOBLIN_OP_MATMUL: {
        const goblin__node *a = &g->nodes[n->inputs[0]];
        int64_t k = a->rank == 1 ? a->shape[0]
                    : goblin__attr_i(n, GOBLIN_ATTR_TRANS_A, 0) ? a->shape[a->rank - 2]
                                                                : a->shape[a->rank - 1];
        return 2.0 * out * (double)k;
    }
    case GOBLIN_OP_CONV2D: {
        const goblin__node *w = &g->nodes[n->inputs[1]];
        double per = w->shape[0] > 0 ? (double)node_numel(w) / (double)w->shape[0] : 0;
        return 2.0 * out * per;
    }
    case GOBLIN_OP_SDPA: {
        const goblin__node *q = &g->nodes[n->inputs[0]], *k = &g->nodes[n->inputs[1]];
        double lk = k->rank >= 2 ? (double)k->shape[k->rank - 2] : 1;
        return 4.0 * (double)node_numel(q) * lk;
    }
    default: {
        double s = out;
        for (int32_t i = 0; i < n->n_inputs; i++) {
            double x = (double)node_numel(&g->nodes[n->inputs[i]]);
            if (x > s) s = x;
        }
        return s;
    }
    }
}

void goblin__train_model_clear(tr_model *m) {
    goblin_graph_free(m->g);
    goblin__free(m->nodes);
    goblin__free(m->seq);
    goblin__free(m->cut_ok);
    goblin__free(m->drops);
    goblin__free(m->drop_batched);
    goblin__free(m->drop_axis);
    goblin__free(m->bn_ids);
    goblin__free(m->bn_ch);
    goblin__free(m->bn_per);
    memset(m, 0, sizeof *m);
}

/* The one dim of @p a (at @p b0 rows) that is @p b1 in @p b (the same value at @p b1 rows)
 * while every other dim stays; -1 if there is none or the batch is merged into a dim. */
static int8_t follow_dim(int64_t b0, const goblin__node *a, int64_t b1, const goblin__node *b) {
    if (a->rank != b->rank) return -1;
    int8_t d = -1;
    for (int32_t k = 0; k < a->rank; k++) {
        if (a->shape[k] == b->shape[k]) continue;
        if (d >= 0 || a->shape[k] != b0 || b->shape[k] != b1) return -1;
        d = (int8_t)k;
    }
    return d;
}

/* The model's DROPOUT nodes. Each task gets its own masks (goblin__train_dropout_graph):
 * a dropout on batch data must have the batch rows as one dim of its value (the leading
 * one, or another: seq-first [T, B, E]); its tasks draw as if that dim led (AXIS), so a
 * sample's counters are the same in every micro-batch cut. The nodes are told apart
 * by (SEED, OFFSET), which the backward's dropout nodes copy. */
static goblin_err analyse_dropout(tr_model *m, char *msg, size_t cap) {
    const goblin_graph *g = m->g;
    int32_t nd = 0;
    for (int32_t id = 0; id < g->n_nodes; id++) nd += g->nodes[id].op == GOBLIN_OP_DROPOUT;
    if (!nd) return GOBLIN_OK;
    m->drops = goblin__calloc((size_t)nd, sizeof *m->drops);
    m->drop_batched = goblin__calloc((size_t)nd, 1);
    m->drop_axis = goblin__calloc((size_t)nd, 1);
    if (!m->drops || !m->drop_batched || !m->drop_axis) return ERRF(GOBLIN_ENOMEM, "out of memory");
    for (int32_t id = 0; id < g->n_nodes; id++) {
        const goblin__node *n = &g->nodes[id];
        if (n->op != GOBLIN_OP_DROPOUT) continue;
        const tr_node *t = &m->nodes[id];
        char sh[96];
        if (t->batch_dep && t->batch_dim < 0)
            return ERRF(GOBLIN_ENOTSUP, "node %d (dropout): the batch rows are not one dim of its value %s "
                        "(a reshape merged them with another dim), so its masks could not follow each sample "
                        "across micro-batches; apply dropout where the batch is a dim of its own (before "
                        "the reshape that folds it, or after splitting it out again)",
                        (int)id, goblin__shape_str(n->rank, n->shape, sh, sizeof sh));
        int64_t seed = goblin__attr_i(n, GOBLIN_ATTR_SEED, 0), off = goblin__attr_i(n, GOBLIN_ATTR_OFFSET, 0);
        for (int32_t k = 0; k < m->n_drops; k++)
            if (m->drops[k][0] == seed && m->drops[k][1] == off && m->drop_batched[k] != t->batch_dep)
                return ERRF(GOBLIN_EINVAL, "node %d (dropout) has the seed and offset of another dropout, "
                            "one on batch data and one not: give each dropout its own seed", (int)id);
        m->drops[m->n_drops][0] = seed;
        m->drops[m->n_drops][1] = off;
        m->drop_axis[m->n_drops] = t->batch_dep ? t->batch_dim : 0;
        m->drop_batched[m->n_drops++] = t->batch_dep;
    }
    return GOBLIN_OK;
}

/* The batch-norms in training mode whose input is batch data with the rows leading: each
 * task of their stage also outputs the micro-batch's per-channel mean and variance. */
static goblin_err analyse_bn(tr_model *m, char *msg, size_t cap) {
    const goblin_graph *g = m->g;
    int32_t n = 0;
    for (int32_t id = 0; id < g->n_nodes; id++) n += g->nodes[id].op == GOBLIN_OP_BATCH_NORM;
    if (!n) return GOBLIN_OK;
    m->bn_ids = goblin__calloc((size_t)n, sizeof *m->bn_ids);
    m->bn_ch = goblin__calloc((size_t)n, sizeof *m->bn_ch);
    m->bn_per = goblin__calloc((size_t)n, sizeof *m->bn_per);
    if (!m->bn_ids || !m->bn_ch || !m->bn_per) return ERRF(GOBLIN_ENOMEM, "out of memory");
    for (int32_t id = 0; id < g->n_nodes; id++) {
        const goblin__node *nd = &g->nodes[id];
        if (nd->op != GOBLIN_OP_BATCH_NORM || !goblin__attr_i(nd, GOBLIN_ATTR_TRAINING, 0)) continue;
        const goblin__node *x = &g->nodes[nd->inputs[0]];
        if (!m->nodes[id].live || !m->nodes[nd->inputs[0]].row_shaped || x->rank < 2 ||
            !goblin_dtype_is_float(x->dtype))
            continue;
        int64_t per = 1;
        for (int32_t d = 2; d < x->rank; d++) per *= x->shape[d];
        m->bn_ids[m->n_bn] = id;
        m->bn_ch[m->n_bn] = x->shape[1];
        m->bn_per[m->n_bn++] = per;
    }
    return GOBLIN_OK;
}

goblin_err goblin__train_analyse(tr_model *m, char *msg, size_t cap) {
    const goblin_graph *g = m->g;
    int32_t n = g->n_nodes;
    m->nodes = goblin__calloc((size_t)n, sizeof *m->nodes);
    m->seq = goblin__calloc((size_t)n + 1, sizeof *m->seq);
    m->cut_ok = goblin__calloc((size_t)n + 1, 1);
    int32_t *pos = goblin__calloc((size_t)n + 1, sizeof *pos);
    int32_t *bad = goblin__calloc((size_t)n + 2, sizeof *bad);
    goblin_graph *g2 = NULL;
    if (!m->nodes || !m->seq || !m->cut_ok || !pos || !bad) {
        goblin__free(pos);
        goblin__free(bad);
        return ERRF(GOBLIN_ENOMEM, "out of memory");
    }
    for (int32_t i = 0; i < g->n_inputs; i++) {
        tr_node *t = &m->nodes[g->input_ids[i]];
        if (i < m->n_params) {
            t->is_param = 1;
            t->param_index = i;
        } else {
            t->is_data = 1;
        }
    }
    for (int32_t id = 0; id < n; id++) {
        tr_node *t = &m->nodes[id];
        const goblin__node *nd = &g->nodes[id];
        if (!t->is_param) t->param_index = -1;
        t->last_use = -1;
        t->batch_dep = t->is_data;
        bool grad = t->is_param;
        for (int32_t k = 0; k < nd->n_inputs; k++) {
            t->batch_dep |= m->nodes[nd->inputs[k]].batch_dep;
            grad |= m->nodes[nd->inputs[k]].needs_grad;
        }
        t->needs_grad = grad && goblin_dtype_is_float(nd->dtype);
    }
    m->nodes[m->loss_id].live = 1;
    for (int32_t id = m->loss_id; id >= 0; id--) {
        if (!m->nodes[id].live) continue;
        const goblin__node *nd = &g->nodes[id];
        for (int32_t k = 0; k < nd->n_inputs; k++) m->nodes[nd->inputs[k]].live = 1;
    }
    /* Row-shaped: the leading dim follows the batch at two batch sizes. */
    int64_t r2 = m->batch0 + 1;
    char tmp[256];
    if (goblin__train_instance(g, m->n_params, m->batch0, r2, &g2, tmp, sizeof tmp)) g2 = NULL;
    for (int32_t id = 0; id < n; id++) {
        tr_node *t = &m->nodes[id];
        const goblin__node *nd = &g->nodes[id];
        bool rs = t->batch_dep && nd->rank >= 1 && nd->shape[0] == m->batch0;
        if (rs && g2) rs = g2->nodes[id].rank >= 1 && g2->nodes[id].shape[0] == r2;
        t->row_shaped = rs;
        t->batch_dim = rs ? 0 : t->batch_dep && g2 ? follow_dim(m->batch0, nd, r2, &g2->nodes[id]) : -1;
        double bytes = node_bytes(nd), fl = nd->op == GOBLIN_OP_INPUT || nd->op == GOBLIN_OP_CONSTANT
                                                  ? 0
                                                  : op_flops(g, nd);
        double b0 = (double)(m->batch0 > 0 ? m->batch0 : 1);
        if (rs) t->bytes_row = bytes / b0;
        else t->bytes_fixed = bytes;
        if (t->batch_dep) t->flops_row = fl / b0;
        else t->flops_fixed = fl;
    }
    goblin_graph_free(g2);
    m->n_seq = 0;
    for (int32_t id = 0; id < n; id++) {
        pos[id] = -1;
        tr_node *t = &m->nodes[id];
        if (t->live && t->batch_dep && g->nodes[id].op != GOBLIN_OP_INPUT) {
            pos[id] = m->n_seq;
            m->seq[m->n_seq++] = id;
            const goblin__node *nd = &g->nodes[id];
            for (int32_t k = 0; k < nd->n_inputs; k++) {
                tr_node *u = &m->nodes[nd->inputs[k]];
                if (u->last_use < id) u->last_use = id;
            }
        }
    }
    /* A cut after seq[k] is invalid while a non-row-shaped batch tensor crosses it. */
    for (int32_t k = 0; k < m->n_seq; k++) {
        int32_t id = m->seq[k];
        tr_node *t = &m->nodes[id];
        if (t->row_shaped || t->last_use <= id) continue;
        bad[k] += 1;
        bad[pos[t->last_use]] -= 1;
    }
    int32_t run = 0;
    for (int32_t k = 0; k < m->n_seq; k++) {
        run += bad[k];
        m->cut_ok[k] = run == 0;
    }
    if (m->n_seq > 0) m->cut_ok[m->n_seq - 1] = 1;
    goblin__free(pos);
    goblin__free(bad);
    goblin_err e = analyse_dropout(m, msg, cap);
    return e ? e : analyse_bn(m, msg, cap);
}

/* ---- stage measurement ---------------------------------------------------------- */

void goblin__train_closure(const tr_model *m, tr_scratch *s, int32_t a, int32_t b, tr_measure *out,
                           tr_visit_fn fn, void *user) {
    const goblin_graph *g = m->g;
    memset(out, 0, sizeof *out);
    int32_t st = ++s->cur;
    int32_t first = m->seq[a], last = m->seq[b];
    for (int32_t k = a; k <= b; k++) s->stamp[m->seq[k]] = st;
    int32_t sp = 0;
    for (int32_t k = a; k <= b; k++) {
        int32_t id = m->seq[k];
        const tr_node *t = &m->nodes[id];
        out->act_row += t->bytes_row;
        out->act_fixed += t->bytes_fixed;
        out->flops_row += t->flops_row;
        out->flops_fixed += t->flops_fixed;
        const goblin__node *nd = &g->nodes[id];
        for (int32_t i = 0; i < nd->n_inputs; i++) s->stack[sp++] = nd->inputs[i];
        while (sp > 0) {
            int32_t j = s->stack[--sp];
            if (s->stamp[j] == st) continue;
            s->stamp[j] = st;
            const tr_node *u = &m->nodes[j];
            if (u->is_param) {
                out->pbytes += u->bytes_fixed + u->bytes_row;
                if (fn) fn(user, j, ROLE_PARAM);
            } else if (u->batch_dep && (u->is_data || j < first || j > last)) {
                out->act_row += u->bytes_row;
                out->act_fixed += u->bytes_fixed;
                if (fn) fn(user, j, ROLE_INPUT);
            } else if (!u->batch_dep) {
                out->act_fixed += u->bytes_fixed;
                out->flops_fixed += u->flops_fixed;
                if (fn) fn(user, j, ROLE_COPY);
                const goblin__node *nj = &g->nodes[j];
                for (int32_t i = 0; i < nj->n_inputs; i++) s->stack[sp++] = nj->inputs[i];
            }
        }
    }
    if (fn)
        for (int32_t k = a; k <= b; k++) fn(user, m->seq[k], ROLE_STAGE);
}

static double mem_fwd(const tr_measure *x, int64_t r) {
    return x->pbytes + (double)r * x->act_row + x->act_fixed;
}
static double mem_bwd(const tr_measure *x, int64_t r) {
    return 2.0 * x->pbytes + 2.0 * ((double)r * x->act_row + x->act_fixed);
}
/* Largest row count whose backward task fits @p budget (0 if none). */
static int64_t max_rows(const tr_measure *x, double budget) {
    double fixed = 2.0 * x->pbytes + 2.0 * x->act_fixed;
    if (fixed + 2.0 * x->act_row > budget) return 0;
    if (x->act_row <= 0) return INT64_MAX / 4;
    double r = floor((budget - fixed) / (2.0 * x->act_row));
    return r > 1e15 ? (int64_t)1e15 : (int64_t)r;
}

/* ---- tiles ------------------------------------------------------------------------- */

static bool tile_layout(const tr_model *m, int32_t id, int32_t *w_param, int32_t *w_axis,
                        int32_t *bias_param, int32_t *out_axis, int64_t *features) {
    const goblin_graph *g = m->g;
    const goblin__node *n = &g->nodes[id];
    if (!m->nodes[id].row_shaped || n->n_inputs < 2) return false;
    int32_t x = n->inputs[0], w = n->inputs[1], c = n->n_inputs > 2 ? n->inputs[2] : -1;
    const goblin__node *wn = &g->nodes[w];
    if (!m->nodes[x].batch_dep || !m->nodes[w].is_param || m->nodes[w].batch_dep) return false;
    if (n->op == GOBLIN_OP_MATMUL) {
        if (wn->rank != 2 || g->nodes[x].rank < 2 || goblin__attr_i(n, GOBLIN_ATTR_TRANS_A, 0))
            return false;
        *w_axis = goblin__attr_i(n, GOBLIN_ATTR_TRANS_B, 0) ? 0 : 1;
        *out_axis = n->rank - 1;
    } else if (n->op == GOBLIN_OP_CONV2D) {
        if (wn->rank != 4 || goblin__attr_i(n, GOBLIN_ATTR_GROUPS, 1) != 1) return false;
        *w_axis = 0;
        *out_axis = 1;
    } else {
        return false;
    }
    *features = wn->shape[*w_axis];
    if (*features < 2 || n->shape[*out_axis] != *features) return false;
    *w_param = m->nodes[w].param_index;
    *bias_param = -1;
    if (c >= 0) {
        const goblin__node *cn = &g->nodes[c];
        if (!m->nodes[c].is_param || cn->rank < 1 || node_numel(cn) != *features ||
            cn->shape[cn->rank - 1] != *features || c == w)
            return false;
        if (n->op == GOBLIN_OP_MATMUL && goblin__attr_f(n, GOBLIN_ATTR_BETA, 1.0) == 0.0) return false;
        *bias_param = m->nodes[c].param_index;
    }
    return true;
}

void goblin__train_tile_layout(const tr_model *m, const tr_stage *st, int32_t *w_param,
                               int32_t *w_axis, int32_t *bias_param, int32_t *out_axis,
                               int64_t *features) {
    tile_layout(m, st->tile_node, w_param, w_axis, bias_param, out_axis, features);
}

void goblin__train_tile_range(int64_t total, int32_t tiles, int32_t k, int64_t *lo, int64_t *hi) {
    *lo = total * k / tiles;
    *hi = total * (k + 1) / tiles;
}

/* Memory of one tile task of node @p id cut into @p T tiles, @p r rows (backward). */
static double tile_bwd(const tr_model *m, int32_t id, int32_t T, int64_t r) {
    const goblin__node *n = &m->g->nodes[id];
    double p = 0;
    for (int32_t i = 1; i < n->n_inputs; i++) p += node_bytes(&m->g->nodes[n->inputs[i]]);
    double x_row = m->nodes[n->inputs[0]].bytes_row, y_row = m->nodes[id].bytes_row;
    return 2.0 * ceil(p / T) + 2.0 * (double)r * (x_row + ceil(y_row / T));
}

/* ---- the partitioner --------------------------------------------------------------- */

typedef struct tr_part {
    const tr_model *m;
    tr_scratch s;
    double budget;
    int64_t rows;
    int32_t *forced; /* per seq position: tile count > 1 of a tiled single-node stage, else 0 */
    int32_t *ends;
} tr_part;

/* Fewest stages with compute <= @p cap each; -1 if something does not fit. */
static int32_t greedy(tr_part *P, double cap, int32_t *ends) {
    const tr_model *m = P->m;
    int32_t i = 0, n = 0;
    while (i < m->n_seq) {
        if (P->forced[i]) {
            ends[n++] = i++;
            continue;
        }
        int32_t best = -1;
        for (int32_t j = i; j < m->n_seq && !P->forced[j]; j++) {
            tr_measure x;
            goblin__train_closure(m, &P->s, i, j, &x, NULL, NULL);
            if (mem_bwd(&x, P->rows) > P->budget) break;
            if (j > i && x.flops_row * (double)P->rows + x.flops_fixed > cap) break;
            if (m->cut_ok[j]) best = j;
        }
        if (best < 0) return -1;
        ends[n++] = best;
        i = best + 1;
    }
    return n;
}

void goblin__train_plan_clear(tr_plan *p) {
    for (int32_t s = 0; s < p->n_stages; s++) {
        tr_stage *st = &p->stages[s];
        goblin__free(st->params);
        goblin__free(st->in_nodes);
        goblin__free(st->out_nodes);
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++) {
                for (int32_t k = 0; st->graphs[a][b] && k < st->tiles; k++)
                    goblin__train_task_graph_free(st->graphs[a][b][k]);
                goblin__free(st->graphs[a][b]);
            }
    }
    memset(p, 0, sizeof *p);
}

typedef struct fill_ctx {
    tr_stage *st;
    const tr_model *m;
    goblin_err e;
} fill_ctx;

static bool push_i32(int32_t **arr, int32_t *n, int32_t v) {
    int32_t *a = goblin__alloc(sizeof(int32_t) * (size_t)(*n + 1));
    if (!a) return false;
    if (*n) memcpy(a, *arr, sizeof(int32_t) * (size_t)*n);
    int32_t k = *n;
    while (k > 0 && a[k - 1] > v) {
        a[k] = a[k - 1];
        k--;
    }
    a[k] = v;
    goblin__free(*arr);
    *arr = a;
    (*n)++;
    return true;
}

static void fill_visit(void *user, int32_t id, int role) {
    fill_ctx *c = user;
    if (c->e) return;
    bool ok = true;
    if (role == ROLE_PARAM) ok = push_i32(&c->st->params, &c->st->n_params, c->m->nodes[id].param_index);
    else if (role == ROLE_INPUT) ok = push_i32(&c->st->in_nodes, &c->st->n_in, id);
    if (!ok) c->e = GOBLIN_ENOMEM;
}

goblin_err goblin__train_make_plan(const tr_model *m, int64_t batch, int64_t micro_batch,
                                   uint64_t budget, int32_t max_stages, tr_plan *out, char *msg,
                                   size_t cap) {
    memset(out, 0, sizeof *out);
    int32_t N = m->n_seq;
    if (N < 1) return ERRF(GOBLIN_EINVAL, "the loss does not depend on the data");
    tr_part P = {.m = m, .budget = (double)budget};
    int32_t nn = m->g->n_nodes;
    P.s.stamp = goblin__calloc((size_t)nn, sizeof(int32_t));
    P.s.stack = goblin__alloc(sizeof(int32_t) * goblin__train_stack_len(m->g));
    P.forced = goblin__calloc((size_t)N, sizeof(int32_t));
    P.ends = goblin__calloc((size_t)N + 1, sizeof(int32_t));
    int32_t *ends2 = goblin__calloc((size_t)N + 1, sizeof(int32_t));
    goblin_err e = GOBLIN_OK;
    if (!P.s.stamp || !P.s.stack || !P.forced || !P.ends || !ends2) {
        e = ERRF(GOBLIN_ENOMEM, "out of memory");
        goto done;
    }
    tr_measure whole;
    goblin__train_closure(m, &P.s, 0, N - 1, &whole, NULL, NULL);
    int64_t micro = 0;
    int32_t n_st = 0;
    bool staged = false;
    if (micro_batch > 0) {
        micro = micro_batch < batch ? micro_batch : batch;
        staged = mem_bwd(&whole, micro) > P.budget;
    } else {
        int64_t r = max_rows(&whole, P.budget);
        staged = r < 1;
        micro = r < batch ? r : batch;
    }
    if (!staged) {
        n_st = 1;
        P.ends[0] = N - 1;
    } else {
        P.rows = micro_batch > 0 ? micro : 1;
        /* forced single-node stages: layers that do not fit alone, cut into tiles */
        for (int32_t k = 0; k < N; k++) {
            tr_measure x;
            goblin__train_closure(m, &P.s, k, k, &x, NULL, NULL);
            if (mem_bwd(&x, P.rows) <= P.budget) continue;
            int32_t id = m->seq[k], wp, wa, bp, oa;
            int64_t feat;
            const char *opn = goblin_op_name(m->g->nodes[id].op);
            /* What to do: fewer rows a task while there are several, else more memory
             * (a row is not cut along the sequence). */
            const char *advice = P.rows > 1 ? "; use a smaller micro_batch_size, or give the workers more memory "
                                              "(goblin-worker --memory) or a larger task_memory"
                                            : "; one row is not cut along the sequence: give the workers more "
                                              "memory (goblin-worker --memory) or a larger task_memory";
            if (!tile_layout(m, id, &wp, &wa, &bp, &oa, &feat)) {
                e = ERRF(GOBLIN_ERANGE,
                         "node %d (%s) needs %.0f bytes for %lld row(s) (parameters %.0f), over the "
                         "task budget of %llu bytes, and cannot be cut into tiles%s",
                         (int)id, opn, mem_bwd(&x, P.rows), (long long)P.rows, x.pbytes,
                         (unsigned long long)budget, advice);
                goto done;
            }
            int32_t T = 2;
            while (T <= feat && tile_bwd(m, id, T, P.rows) > P.budget) T++;
            if (T > feat) {
                e = ERRF(GOBLIN_ERANGE,
                         "node %d (%s): even %lld tiles of one feature need %.0f bytes for %lld "
                         "row(s), over the task budget of %llu bytes%s",
                         (int)id, opn, (long long)feat, tile_bwd(m, id, (int32_t)feat, P.rows),
                         (long long)P.rows, (unsigned long long)budget, advice);
                goto done;
            }
            if ((k > 0 && !m->cut_ok[k - 1]) || !m->cut_ok[k]) {
                e = ERRF(GOBLIN_ERANGE,
                         "node %d (%s) must be tiled but the model cannot be cut around it (a "
                         "tensor that is not batched crosses the cut)",
                         (int)id, opn);
                goto done;
            }
            P.forced[k] = T;
        }
        n_st = greedy(&P, INFINITY, P.ends);
        if (n_st < 0) {
            e = ERRF(GOBLIN_ERANGE,
                     "the model cannot be cut into stages whose tasks fit %llu bytes at %lld "
                     "row(s) (one node with its inputs needs more, or no valid cut exists)",
                     (unsigned long long)budget, (long long)P.rows);
            goto done;
        }
        if (n_st > max_stages) {
            e = ERRF(GOBLIN_ERANGE, "the model needs %d stages to fit %llu bytes per task, over "
                     "max_stages = %d", (int)n_st, (unsigned long long)budget, (int)max_stages);
            goto done;
        }
        if (n_st > 1) {
            /* min-max balance: the smallest compute cap that still needs only n_st stages */
            double lo = 0, hi = whole.flops_row * (double)P.rows + whole.flops_fixed;
            for (int it = 0; it < 60 && hi - lo > 1e-9 * hi; it++) {
                double mid = 0.5 * (lo + hi);
                int32_t c = greedy(&P, mid, ends2);
                if (c >= 0 && c <= n_st) hi = mid;
                else lo = mid;
            }
            int32_t c = greedy(&P, hi, ends2);
            if (c >= 1 && c <= n_st) {
                n_st = c;
                memcpy(P.ends, ends2, sizeof(int32_t) * (size_t)c);
            }
        }
    }
    out->batch = batch;
    out->budget = budget;
    out->n_stages = n_st;
    int32_t a = 0;
    for (int32_t s = 0; s < n_st; s++) {
        tr_stage *st = &out->stages[s];
        st->a = a;
        st->b = P.ends[s];
        st->first = m->seq[st->a];
        st->last = m->seq[st->b];
        st->tiles = staged && P.forced[st->a] ? P.forced[st->a] : 1;
        st->tile_node = st->tiles > 1 ? st->first : -1;
        fill_ctx fc = {st, m, GOBLIN_OK};
        tr_measure x;
        goblin__train_closure(m, &P.s, st->a, st->b, &x, fill_visit, &fc);
        if (fc.e) {
            e = ERRF(GOBLIN_ENOMEM, "out of memory");
            goto done;
        }
        for (int32_t k = st->a; k <= st->b && s < n_st - 1; k++) {
            int32_t id = m->seq[k];
            if (m->nodes[id].last_use > st->last && !push_i32(&st->out_nodes, &st->n_out, id)) {
                e = ERRF(GOBLIN_ENOMEM, "out of memory");
                goto done;
            }
        }
        st->flops_row = x.flops_row + x.flops_fixed / (double)(batch > 0 ? batch : 1);
        a = st->b + 1;
    }
    /* micro-batch rows when staged with micro_batch 0: the largest every stage fits */
    if (staged && micro_batch <= 0) {
        int64_t r = batch;
        for (int32_t s = 0; s < n_st; s++) {
            tr_stage *st = &out->stages[s];
            int64_t rs;
            if (st->tiles > 1) {
                rs = 1;
                while (rs < r && tile_bwd(m, st->tile_node, st->tiles, rs + 1) <= P.budget) rs++;
            } else {
                tr_measure x;
                goblin__train_closure(m, &P.s, st->a, st->b, &x, NULL, NULL);
                rs = max_rows(&x, P.budget);
            }
            if (rs < r) r = rs;
        }
        micro = r < 1 ? 1 : r;
    }
    out->micro = micro;
    out->n_micro = (batch + micro - 1) / micro;
    int64_t per_mb = 0;
    for (int32_t s = 0; s < n_st; s++) {
        tr_stage *st = &out->stages[s];
        if (st->tiles > 1) {
            double pb = 0;
            const goblin__node *n = &m->g->nodes[st->tile_node];
            for (int32_t i = 1; i < n->n_inputs; i++) pb += node_bytes(&m->g->nodes[n->inputs[i]]);
            double xr = m->nodes[n->inputs[0]].bytes_row, yr = m->nodes[st->tile_node].bytes_row;
            st->fwd_bytes = (uint64_t)(ceil(pb / st->tiles) + (double)micro * (xr + ceil(yr / st->tiles)));
            st->bwd_bytes = (uint64_t)tile_bwd(m, st->tile_node, st->tiles, micro);
        } else {
            tr_measure x;
            goblin__train_closure(m, &P.s, st->a, st->b, &x, NULL, NULL);
            st->fwd_bytes = (uint64_t)mem_fwd(&x, micro);
            st->bwd_bytes = (uint64_t)mem_bwd(&x, micro);
        }
        per_mb += s == n_st - 1 ? st->tiles : 2 * st->tiles;
    }
    out->tasks_per_round = per_mb * out->n_micro;
    out->valid = true;
done:
    goblin__free(P.s.stamp);
    goblin__free(P.s.stack);
    goblin__free(P.forced);
    goblin__free(P.ends);
    goblin__free(ends2);
    if (e) goblin__train_plan_clear(out);
    return e;
}
