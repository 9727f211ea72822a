/* libgoblin/train/task_graph.c - the task graphs of a stage: forward (activations out), the
 * last stage's forward + loss + backward, a backward stage recomputing its forward from
 * the stage input, and the tiled variants that compute one slice of a layer's output
 * features. Each is built for an exact row count. */
#include <stdio.h>
#include <string.h>
#include "train_impl.h"

#define ERRF(e, ...) (snprintf(msg, cap, __VA_ARGS__), (e))

/* ---- task graphs -------------------------------------------------------------------- */

void goblin__train_task_graph_free(tr_task_graph *tg) {
    if (!tg) return;
    goblin_graph_free(tg->g);
    goblin__free(tg->drop_ids);
    goblin__free(tg->drop_per_row);
    goblin__free(tg->drop_axis);
    goblin__free(tg->in);
    goblin__free(tg->out);
    goblin__free(tg);
}

typedef struct tg_build {
    tr_task_graph *tg;
    int32_t cap_in, cap_out;
} tg_build;

static bool io_push(tr_io **arr, int32_t *n, tr_io_kind k, int32_t ref) {
    tr_io *a = goblin__alloc(sizeof(tr_io) * (size_t)(*n + 1));
    if (!a) return false;
    if (*n) memcpy(a, *arr, sizeof(tr_io) * (size_t)*n);
    a[*n] = (tr_io){k, ref};
    goblin__free(*arr);
    *arr = a;
    (*n)++;
    return true;
}

typedef struct mark_ctx {
    uint8_t *role; /* per node: 0 none, 1 + ROLE_* */
} mark_ctx;

static void mark_visit(void *user, int32_t id, int role) {
    mark_ctx *c = user;
    c->role[id] = (uint8_t)(1 + role);
}

static goblin_err add_input_like(goblin_graph *g, const goblin__node *n, int32_t rank,
                                 const int64_t *shape, int32_t *id) {
    return goblin_graph_input(g, n->dtype, rank, shape ? shape : n->shape, id);
}

/* Backward part shared by LAST and BWD: gradients wrt the parameter inputs and the
 * stage inputs that carry a gradient, marked as outputs. */
static goblin_err add_grads(const tr_model *m, tr_task_graph *tg, const tr_stage *st,
                            const int32_t *map, int32_t target, int32_t seed, char *msg,
                            size_t cap) {
    goblin_graph *g = tg->g;
    int32_t nw = 0;
    int32_t *wrt = goblin__alloc(sizeof(int32_t) * (size_t)(st->n_params + st->n_in + 1));
    int32_t *grads = goblin__alloc(sizeof(int32_t) * (size_t)(st->n_params + st->n_in + 1));
    tr_io *roles = goblin__alloc(sizeof(tr_io) * (size_t)(st->n_params + st->n_in + 1));
    goblin_err e = GOBLIN_OK;
    if (!wrt || !grads || !roles) {
        e = ERRF(GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    for (int32_t i = 0; i < st->n_params; i++) {
        int32_t pid = goblin_graph_input_id(m->g, st->params[i]);
        roles[nw] = (tr_io){TR_IO_PGRAD, st->params[i]};
        wrt[nw++] = map[pid];
    }
    for (int32_t i = 0; i < st->n_in; i++) {
        int32_t j = st->in_nodes[i];
        if (m->nodes[j].is_data || !m->nodes[j].needs_grad) continue;
        roles[nw] = (tr_io){TR_IO_XGRAD, j};
        wrt[nw++] = map[j];
    }
    e = seed >= 0 ? goblin_graph_backward_seeded(g, target, seed, wrt, nw, grads)
                  : goblin_graph_backward(g, target, wrt, nw, grads);
    if (e) {
        snprintf(msg, cap, "%s", goblin_graph_error(g));
        goto out;
    }
    for (int32_t i = 0; i < nw && !e; i++) {
        e = goblin_graph_output(g, grads[i]);
        if (!e && !io_push(&tg->out, &tg->n_out, roles[i].kind, roles[i].ref)) e = GOBLIN_ENOMEM;
    }
    if (e) snprintf(msg, cap, "building the backward graph: %s", goblin_strerror(e));
out:
    goblin__free(wrt);
    goblin__free(grads);
    goblin__free(roles);
    return e;
}

/* Record @p tg's DROPOUT nodes and whether each follows the batch: by the model dropout
 * with the same SEED and OFFSET (a backward's dropout copies its forward's attributes). */
static goblin_err find_dropout(const tr_model *m, tr_task_graph *tg, int64_t rows, char *msg, size_t cap) {
    const goblin_graph *g = tg->g;
    if (!m->n_drops) return GOBLIN_OK;
    int32_t n = 0;
    for (int32_t id = 0; id < g->n_nodes; id++) n += g->nodes[id].op == GOBLIN_OP_DROPOUT;
    if (!n) return GOBLIN_OK;
    tg->drop_ids = goblin__calloc((size_t)n, sizeof *tg->drop_ids);
    tg->drop_per_row = goblin__calloc((size_t)n, sizeof *tg->drop_per_row);
    tg->drop_axis = goblin__calloc((size_t)n, 1);
    if (!tg->drop_ids || !tg->drop_per_row || !tg->drop_axis) return ERRF(GOBLIN_ENOMEM, "out of memory");
    for (int32_t id = 0; id < g->n_nodes; id++) {
        const goblin__node *nd = &g->nodes[id];
        if (nd->op != GOBLIN_OP_DROPOUT) continue;
        int64_t seed = goblin__attr_i(nd, GOBLIN_ATTR_SEED, 0), off = goblin__attr_i(nd, GOBLIN_ATTR_OFFSET, 0);
        int32_t k = 0;
        while (k < m->n_drops && (m->drops[k][0] != seed || m->drops[k][1] != off)) k++;
        if (k == m->n_drops)
            return ERRF(GOBLIN_EINVAL, "task graph node %d (dropout) matches no dropout of the model", (int)id);
        int64_t per = 0;
        int8_t ax = m->drop_axis[k];
        if (m->drop_batched[k]) {
            if (nd->rank <= ax || nd->shape[ax] != rows)
                return ERRF(GOBLIN_ENOTSUP, "task graph node %d (dropout): the batch is not its dim %d",
                            (int)id, (int)ax);
            per = 1;
            for (int32_t d = 0; d < nd->rank; d++)
                if (d != ax) per *= nd->shape[d];
        }
        tg->drop_axis[tg->n_drop] = m->drop_batched[k] ? ax : 0;
        tg->drop_ids[tg->n_drop] = id;
        tg->drop_per_row[tg->n_drop++] = per;
    }
    return GOBLIN_OK;
}

/* For each batch-norm of the stage (training mode, on batch data): its input's mean per
 * channel (over every dim but 1) and the biased variance mean((x - mean)^2), as outputs. */
static goblin_err add_bn_stats(const tr_model *m, tr_task_graph *tg, const goblin_graph *inst,
                               const uint8_t *role, const int32_t *map, char *msg, size_t cap) {
    goblin_graph *g = tg->g;
    for (int32_t k = 0; k < m->n_bn; k++) {
        int32_t id = m->bn_ids[k];
        if (role[id] != 1 + ROLE_STAGE) continue;
        const goblin__node *xn = &inst->nodes[inst->nodes[id].inputs[0]];
        int32_t x = map[inst->nodes[id].inputs[0]];
        int64_t axes[GOBLIN_MAX_RANK];
        int32_t na = 0;
        for (int32_t d = 0; d < xn->rank; d++)
            if (d != 1) axes[na++] = d;
        goblin_attr a[2] = {goblin_attr_ints(GOBLIN_ATTR_AXES, axes, na), goblin_attr_int(GOBLIN_ATTR_KEEPDIM, 1)};
        goblin_attr rs = goblin_attr_ints(GOBLIN_ATTR_SHAPE, &m->bn_ch[k], 1);
        int32_t mk, d, sq, v, mean, io[2];
        goblin_err e = goblin_graph_add(g, GOBLIN_OP_MEAN, &x, 1, a, 2, &mk);
        if (!e) e = goblin_graph_add(g, GOBLIN_OP_SUB, (int32_t[]){x, mk}, 2, NULL, 0, &d);
        if (!e) e = goblin_graph_add(g, GOBLIN_OP_MUL, (int32_t[]){d, d}, 2, NULL, 0, &sq);
        a[1] = goblin_attr_int(GOBLIN_ATTR_KEEPDIM, 0);
        if (!e) e = goblin_graph_add(g, GOBLIN_OP_MEAN, &sq, 1, a, 2, &v);
        if (!e) e = goblin_graph_add(g, GOBLIN_OP_RESHAPE, &mk, 1, &rs, 1, &mean);
        io[0] = mean;
        io[1] = v;
        for (int i = 0; i < 2 && !e; i++) {
            e = goblin_graph_output(g, io[i]);
            if (!e && !io_push(&tg->out, &tg->n_out, TR_IO_STAT, 2 * k + i)) e = GOBLIN_ENOMEM;
        }
        if (e) return ERRF(e, "batch-norm node %d statistics: %s", (int)id, goblin_graph_error(g));
    }
    return GOBLIN_OK;
}

static goblin_err tile_graph(const tr_model *m, const tr_stage *st, tr_task_kind kind,
                             const goblin_graph *inst, int32_t tile, tr_task_graph *tg, char *msg,
                             size_t cap) {
    int32_t wp, wa, bp, oa;
    int64_t feat, lo, hi;
    goblin__train_tile_layout(m, st, &wp, &wa, &bp, &oa, &feat);
    goblin__train_tile_range(feat, st->tiles, tile, &lo, &hi);
    const goblin__node *n = &inst->nodes[st->tile_node];
    goblin_graph *g = tg->g;
    goblin_err e = GOBLIN_OK;
    int32_t ids[3], y, seed = -1;
    int32_t x = n->inputs[0];
    /* inputs in the generic order: parameters by index, then nodes, then seeds */
    int32_t order[2] = {wp, bp};
    if (bp >= 0 && bp < wp) {
        order[0] = bp;
        order[1] = wp;
    }
    for (int i = 0; i < 2; i++) {
        int32_t p = order[i];
        if (p < 0) continue;
        const goblin__node *pn = &inst->nodes[goblin_graph_input_id(inst, p)];
        int64_t shp[GOBLIN_MAX_RANK];
        memcpy(shp, pn->shape, sizeof shp);
        int32_t axis = p == wp ? wa : pn->rank - 1;
        shp[axis] = hi - lo;
        int32_t id;
        if ((e = add_input_like(g, pn, pn->rank, shp, &id))) goto fail;
        if (p == wp) ids[1] = id;
        else ids[2] = id;
        if (!io_push(&tg->in, &tg->n_in, TR_IO_PARAM, p)) goto oom;
    }
    if ((e = add_input_like(g, &inst->nodes[x], inst->nodes[x].rank, NULL, &ids[0]))) goto fail;
    if (!io_push(&tg->in, &tg->n_in, TR_IO_NODE, x)) goto oom;
    if (kind == TR_TASK_BWD) {
        int64_t shp[GOBLIN_MAX_RANK];
        memcpy(shp, n->shape, sizeof shp);
        shp[oa] = hi - lo;
        if ((e = add_input_like(g, n, n->rank, shp, &seed))) goto fail;
        if (!io_push(&tg->in, &tg->n_in, TR_IO_SEED, st->tile_node)) goto oom;
    }
    e = goblin_graph_add(g, n->op, ids, bp >= 0 ? 3 : 2, n->attrs, n->n_attrs, &y);
    if (e) goto fail;
    if (kind == TR_TASK_FWD) {
        if ((e = goblin_graph_output(g, y))) goto fail;
        if (!io_push(&tg->out, &tg->n_out, TR_IO_ACT, st->tile_node)) goto oom;
        return GOBLIN_OK;
    }
    int32_t wrt[3] = {ids[1], bp >= 0 ? ids[2] : -1, ids[0]}, grads[3];
    tr_io roles[3] = {{TR_IO_PGRAD, wp}, {TR_IO_PGRAD, bp}, {TR_IO_XGRAD, x}};
    int32_t nw = 0, w2[3];
    tr_io r2[3];
    for (int i = 0; i < 3; i++) {
        if (wrt[i] < 0) continue;
        if (i == 2 && (m->nodes[x].is_data || !m->nodes[x].needs_grad)) continue;
        w2[nw] = wrt[i];
        r2[nw++] = roles[i];
    }
    if (bp >= 0 && bp < wp && nw >= 2) { /* outputs in parameter-index order */
        int32_t t = w2[0];
        w2[0] = w2[1];
        w2[1] = t;
        tr_io tt = r2[0];
        r2[0] = r2[1];
        r2[1] = tt;
    }
    e = goblin_graph_backward_seeded(g, y, seed, w2, nw, grads);
    if (e) goto fail;
    for (int32_t i = 0; i < nw; i++) {
        if ((e = goblin_graph_output(g, grads[i]))) goto fail;
        if (!io_push(&tg->out, &tg->n_out, r2[i].kind, r2[i].ref)) goto oom;
    }
    return GOBLIN_OK;
oom:
    return ERRF(GOBLIN_ENOMEM, "out of memory");
fail:
    snprintf(msg, cap, "tile graph of node %d: %s", (int)st->tile_node, goblin_graph_error(g));
    return e;
}

goblin_err goblin__train_task_graph(const tr_model *m, const tr_plan *p, int32_t s,
                                    tr_task_kind kind, int64_t rows, int32_t tile,
                                    tr_task_graph **out, char *msg, size_t cap) {
    const tr_stage *st = &p->stages[s];
    goblin_graph *inst = NULL;
    goblin_err e = goblin__train_instance(m->g, m->n_params, m->batch0, rows, &inst, msg, cap);
    if (e) return e;
    tr_task_graph *tg = goblin__calloc(1, sizeof *tg);
    int32_t nn = m->g->n_nodes;
    int32_t *map = goblin__alloc(sizeof(int32_t) * (size_t)nn);
    uint8_t *role = goblin__calloc((size_t)nn, 1);
    int32_t *stamp = goblin__calloc((size_t)nn, sizeof(int32_t));
    int32_t *stack = goblin__alloc(sizeof(int32_t) * goblin__train_stack_len(m->g));
    int32_t *ins = NULL;
    if (!tg || !map || !role || !stamp || !stack || goblin_graph_new(&tg->g)) {
        e = ERRF(GOBLIN_ENOMEM, "out of memory");
        goto done;
    }
    if (st->tiles > 1) {
        e = tile_graph(m, st, kind, inst, tile, tg, msg, cap);
        goto done;
    }
    for (int32_t i = 0; i < nn; i++) map[i] = -1;
    tr_scratch sc = {stamp, 0, stack};
    mark_ctx mc = {role};
    tr_measure x;
    goblin__train_closure(m, &sc, st->a, st->b, &x, mark_visit, &mc);
    for (int32_t i = 0; i < st->n_params && !e; i++) {
        int32_t pid = goblin_graph_input_id(inst, st->params[i]);
        e = add_input_like(tg->g, &inst->nodes[pid], inst->nodes[pid].rank, NULL, &map[pid]);
        if (!e && !io_push(&tg->in, &tg->n_in, TR_IO_PARAM, st->params[i])) e = GOBLIN_ENOMEM;
    }
    for (int32_t i = 0; i < st->n_in && !e; i++) {
        int32_t j = st->in_nodes[i];
        e = add_input_like(tg->g, &inst->nodes[j], inst->nodes[j].rank, NULL, &map[j]);
        if (!e && !io_push(&tg->in, &tg->n_in, TR_IO_NODE, j)) e = GOBLIN_ENOMEM;
    }
    int32_t n_seeds = 0, seed_ids[2] = {-1, -1}, seed_out[2] = {-1, -1};
    int32_t *seeds = NULL;
    if (!e && kind == TR_TASK_BWD) {
        seeds = goblin__alloc(sizeof(int32_t) * (size_t)(st->n_out + 1));
        if (!seeds) e = GOBLIN_ENOMEM;
        for (int32_t i = 0; i < st->n_out && !e; i++) {
            int32_t j = st->out_nodes[i];
            if (!m->nodes[j].needs_grad) continue;
            e = add_input_like(tg->g, &inst->nodes[j], inst->nodes[j].rank, NULL, &seeds[n_seeds]);
            if (!e && !io_push(&tg->in, &tg->n_in, TR_IO_SEED, j)) e = GOBLIN_ENOMEM;
            if (!e && n_seeds < 2) {
                seed_ids[n_seeds] = seeds[n_seeds];
                seed_out[n_seeds] = j;
            }
            n_seeds++;
        }
    }
    if (e) {
        goblin__free(seeds);
        if (e == GOBLIN_ENOMEM) snprintf(msg, cap, "out of memory");
        else snprintf(msg, cap, "%s", goblin_graph_error(tg->g));
        goto done;
    }
    ins = goblin__alloc(sizeof(int32_t) * GOBLIN_GRAPH_MAX_INPUTS_PER_NODE);
    if (!ins) {
        goblin__free(seeds);
        e = ERRF(GOBLIN_ENOMEM, "out of memory");
        goto done;
    }
    for (int32_t id = 0; id < nn && !e; id++) {
        if (role[id] != 1 + ROLE_COPY && role[id] != 1 + ROLE_STAGE) continue;
        goblin__node pr = inst->nodes[id];
        for (int32_t k = 0; k < pr.n_inputs; k++) ins[k] = map[pr.inputs[k]];
        pr.inputs = ins;
        e = goblin__graph_add_node(tg->g, &pr, &map[id]);
        if (e) snprintf(msg, cap, "stage %d: %s", (int)s, goblin_graph_error(tg->g));
    }
    if (e) {
        goblin__free(seeds);
        goto done;
    }
    if (kind == TR_TASK_FWD) {
        for (int32_t i = 0; i < st->n_out && !e; i++) {
            e = goblin_graph_output(tg->g, map[st->out_nodes[i]]);
            if (!e && !io_push(&tg->out, &tg->n_out, TR_IO_ACT, st->out_nodes[i])) e = GOBLIN_ENOMEM;
        }
        if (e) snprintf(msg, cap, "stage %d outputs: %s", (int)s, goblin_strerror(e));
        else e = add_bn_stats(m, tg, inst, role, map, msg, cap);
    } else if (kind == TR_TASK_LAST) {
        e = goblin_graph_output(tg->g, map[m->loss_id]);
        if (!e && !io_push(&tg->out, &tg->n_out, TR_IO_LOSS, m->loss_id)) e = GOBLIN_ENOMEM;
        if (e) snprintf(msg, cap, "stage %d loss: %s", (int)s, goblin_strerror(e));
        else e = add_grads(m, tg, st, map, map[m->loss_id], -1, msg, cap);
        if (!e) e = add_bn_stats(m, tg, inst, role, map, msg, cap);
    } else if (n_seeds == 1) {
        e = add_grads(m, tg, st, map, map[seed_out[0]], seed_ids[0], msg, cap);
    } else if (n_seeds > 1) {
        /* several outputs: one scalar z = sum_i sum(out_i * seed_i) (in the first
         * output's dtype); dz/d out_i = seed_i exactly, so the gradients are the sum of
         * the vector-Jacobian products in one backward pass */
        int32_t z = -1;
        goblin_dtype dt0 = inst->nodes[st->out_nodes[0]].dtype;
        int32_t k = 0;
        for (int32_t i = 0; i < st->n_out && !e; i++) {
            int32_t j = st->out_nodes[i];
            if (!m->nodes[j].needs_grad) continue;
            int32_t pr[2] = {map[j], seeds[k++]}, prod, sm;
            e = goblin_graph_add(tg->g, GOBLIN_OP_MUL, pr, 2, NULL, 0, &prod);
            if (!e) e = goblin_graph_add(tg->g, GOBLIN_OP_SUM, &prod, 1, NULL, 0, &sm);
            if (!e && inst->nodes[j].dtype != dt0) {
                goblin_attr a = goblin_attr_int(GOBLIN_ATTR_DTYPE, dt0);
                e = goblin_graph_add(tg->g, GOBLIN_OP_CAST, &sm, 1, &a, 1, &sm);
            }
            if (!e && z >= 0) {
                int32_t pz[2] = {z, sm};
                e = goblin_graph_add(tg->g, GOBLIN_OP_ADD, pz, 2, NULL, 0, &z);
            } else if (!e) {
                z = sm;
            }
        }
        if (e) snprintf(msg, cap, "stage %d seeds: %s", (int)s, goblin_graph_error(tg->g));
        else e = add_grads(m, tg, st, map, z, -1, msg, cap);
    }
    goblin__free(seeds);
done:
    goblin__free(ins);
    goblin__free(map);
    goblin__free(role);
    goblin__free(stamp);
    goblin__free(stack);
    goblin_graph_free(inst);
    if (!e) e = find_dropout(m, tg, rows, msg, cap);
    if (e) {
        goblin__train_task_graph_free(tg);
        return e;
    }
    *out = tg;
    return GOBLIN_OK;
}

goblin_err goblin__train_dropout_graph(const tr_task_graph *tg, int64_t round, int64_t row0,
                                       goblin_graph **out, char *msg, size_t cap) {
    *out = NULL;
    if (!tg->n_drop) return GOBLIN_OK;
    const goblin_graph *src = tg->g;
    goblin_graph *g = NULL;
    goblin_attr *attrs = NULL;
    goblin_err e = goblin_graph_new(&g);
    int32_t k = 0, id = 0, got;
    if (!e && !(attrs = goblin__alloc(sizeof *attrs * (GOBLIN__MAX_OP_ATTRS + 3)))) e = GOBLIN_ENOMEM;
    if (e) {
        goblin_graph_free(g);
        return ERRF(e, "out of memory");
    }
    for (id = 0; id < src->n_nodes && !e; id++) {
        goblin__node pr = src->nodes[id];
        if (k < tg->n_drop && tg->drop_ids[k] == id) {
            int8_t ax = tg->drop_axis[k];
            int64_t off = goblin__attr_i(&pr, GOBLIN_ATTR_OFFSET, 0), per = tg->drop_per_row[k++];
            if (per > 0 && row0 > (INT64_MAX - off) / per) {
                e = ERRF(GOBLIN_ERANGE, "node %d (dropout): offset %lld + row %lld x %lld elements passes 2^63",
                         (int)id, (long long)off, (long long)row0, (long long)per);
                break;
            }
            int32_t na = 0;
            for (int32_t a = 0; a < pr.n_attrs && na < GOBLIN__MAX_OP_ATTRS - 1; a++)
                if (pr.attrs[a].key != GOBLIN_ATTR_SEED && pr.attrs[a].key != GOBLIN_ATTR_OFFSET &&
                    pr.attrs[a].key != GOBLIN_ATTR_AXIS)
                    attrs[na++] = pr.attrs[a];
            if (ax > 0) attrs[na++] = goblin_attr_int(GOBLIN_ATTR_AXIS, ax);
            attrs[na++] = goblin_attr_int(GOBLIN_ATTR_SEED,
                                          goblin__train_drop_seed(goblin__attr_i(&pr, GOBLIN_ATTR_SEED, 0), round));
            attrs[na++] = goblin_attr_int(GOBLIN_ATTR_OFFSET, off + row0 * per);
            pr.attrs = attrs;
            pr.n_attrs = na;
        }
        e = goblin__graph_add_node(g, &pr, &got);
        if (e) snprintf(msg, cap, "task graph node %d: %s", (int)id, goblin_graph_error(g));
    }
    for (int32_t o = 0; o < src->n_outputs && !e; o++)
        if ((e = goblin_graph_output(g, src->output_ids[o]))) snprintf(msg, cap, "%s", goblin_graph_error(g));
    goblin__free(attrs);
    if (e) {
        goblin_graph_free(g);
        return e;
    }
    *out = g;
    return GOBLIN_OK;
}
