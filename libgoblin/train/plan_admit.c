/* libgoblin/train/plan_admit.c - a plan the node admits: every task graph a round will
 * submit is built and measured with the node's own rule (goblin__graph_task_bytes, the
 * bytes of every node's output held at once, which the node compares with the task
 * memory budget before it accepts a graph job). The partitioner's cost model only
 * proposes a plan; when a task of the proposal measures over the budget, the plan is made
 * again under a budget scaled down by the ratio, until every task fits or no plan does.
 * The task graphs built for the measurement are the ones the rounds then submit. */
#include "train_impl.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "graph/rebatch.h"

bool goblin__train_stage_has_seeds(const tr_model *m, const tr_stage *st) {
    for (int32_t i = 0; i < st->n_out; i++)
        if (m->nodes[st->out_nodes[i]].needs_grad) return true;
    return false;
}

goblin_err goblin__train_stage_graph(const tr_model *m, tr_plan *p, int32_t s, tr_task_kind kind,
                                     int64_t rows, int32_t tile, tr_task_graph **out, char *msg, size_t cap) {
    tr_stage *st = &p->stages[s];
    int slot = rows == p->micro ? 0 : 1;
    if (st->graph_rows[slot] != rows) {
        for (int k = 0; k < 3; k++) {
            for (int32_t i = 0; st->graphs[slot][k] && i < st->tiles; i++)
                goblin__train_task_graph_free(st->graphs[slot][k][i]);
            goblin__free(st->graphs[slot][k]);
            st->graphs[slot][k] = NULL;
        }
        st->graph_rows[slot] = rows;
    }
    if (!st->graphs[slot][kind]) {
        st->graphs[slot][kind] = goblin__calloc((size_t)st->tiles, sizeof(tr_task_graph *));
        if (!st->graphs[slot][kind]) {
            snprintf(msg, cap, "out of memory");
            return GOBLIN_ENOMEM;
        }
    }
    if (!st->graphs[slot][kind][tile]) {
        goblin_err e = goblin__train_task_graph(m, p, s, kind, rows, tile, &st->graphs[slot][kind][tile], msg, cap);
        if (e) return e;
    }
    *out = st->graphs[slot][kind][tile];
    return GOBLIN_OK;
}

/* The largest task of the plan by the node's rule, building every task graph of a round;
 * each stage's fwd_bytes / bwd_bytes become its measured forward / backward tasks (the
 * last stage's one task, forward and backward at once, is both). */
static goblin_err measure(const tr_model *m, tr_plan *p, uint64_t *worst, int32_t *worst_stage, char *msg,
                          size_t cap) {
    *worst = 0;
    *worst_stage = 0;
    int64_t rows[2] = {p->micro, p->batch - (p->n_micro - 1) * p->micro};
    int nrows = rows[1] != rows[0] ? 2 : 1;
    for (int32_t s = 0; s < p->n_stages; s++) {
        tr_stage *st = &p->stages[s];
        bool last = s == p->n_stages - 1;
        tr_task_kind kinds[2] = {last ? TR_TASK_LAST : TR_TASK_FWD, TR_TASK_BWD};
        int nk = !last && goblin__train_stage_has_seeds(m, st) ? 2 : 1;
        st->fwd_bytes = st->bwd_bytes = 0;
        for (int k = 0; k < nk; k++)
            for (int r = 0; r < nrows; r++)
                for (int32_t tile = 0; tile < st->tiles; tile++) {
                    tr_task_graph *tg = NULL;
                    goblin_err e = goblin__train_stage_graph(m, p, s, kinds[k], rows[r], tile, &tg, msg, cap);
                    if (e) return e;
                    uint64_t b = goblin__graph_task_bytes(tg->g);
                    uint64_t *slot = k == 0 && !last ? &st->fwd_bytes : &st->bwd_bytes;
                    if (b > *slot) *slot = b;
                    if (b > *worst) {
                        *worst = b;
                        *worst_stage = s;
                    }
                }
        if (last) st->fwd_bytes = st->bwd_bytes;
    }
    return GOBLIN_OK;
}

goblin_err goblin__train_make_admitted_plan(const tr_model *m, int64_t batch, int64_t micro_batch, uint64_t budget,
                                            int32_t max_stages, tr_plan *out, char *msg, size_t cap) {
    /* The cost model is within tens of per cent of the measure: a few rounds of scaling
     * converge; each round builds a round's task graphs once. */
    enum { MAX_TRIES = 12 };
    uint64_t propose = budget, worst = 0, best_worst = UINT64_MAX;
    int32_t ws = 0, best_ws = 0;
    for (int tries = 0; tries < MAX_TRIES; tries++) {
        goblin_err e = goblin__train_make_plan(m, batch, micro_batch, propose, max_stages, out, msg, cap);
        if (e == GOBLIN_ERANGE && tries > 0) {
            snprintf(msg, cap, "no plan has tasks within the task budget of %llu bytes: the smallest tasks "
                     "found need %llu bytes (stage %d of a plan), as the node measures them (every "
                     "node's output held at once); give the workers more memory or a smaller "
                     "micro_batch_size", (unsigned long long)budget, (unsigned long long)best_worst, (int)best_ws);
            return GOBLIN_ERANGE;
        }
        if (e) return e;
        e = measure(m, out, &worst, &ws, msg, cap);
        if (e) {
            goblin__train_plan_clear(out);
            return e;
        }
        if (worst < best_worst) {
            best_worst = worst;
            best_ws = ws;
        }
        if (worst <= budget) {
            out->budget = budget;
            return GOBLIN_OK;
        }
        goblin__train_plan_clear(out);
        double scale = (double)budget / (double)worst * 0.98;
        uint64_t next = (uint64_t)((double)propose * scale);
        if (next >= propose) next = propose - propose / 50 - 1;
        if (next < 1024) break;
        propose = next;
    }
    snprintf(msg, cap, "no plan has tasks within the task budget of %llu bytes: the smallest tasks found "
             "need %llu bytes (stage %d), as the node measures them (every node's output held at once); "
             "give the workers more memory or a smaller micro_batch_size", (unsigned long long)budget,
             (unsigned long long)best_worst, (int)best_ws);
    return GOBLIN_ERANGE;
}
