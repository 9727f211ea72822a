/* libgoblin/node/spot.c - SPOT (node.h): a few secret rows of a chunk recomputed on the
 * node, prepared while the worker computes, plus every row holding a NaN or an infinity. */
#include "graph/rebatch.h"
#include "node_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/secret.h"
#include "core/node.h"

/* ---- SPOT (node.h): a few secret rows recomputed on the node ---------------------- */

#define SPOT_NONFINITE_MAX 64 /* rows with NaN/inf checked one by one; more: the whole task */

void goblin__node_task_free_spot(goblin_job *j, task *t) {
    goblin__node_free_bufs(&t->spot_mine, j->g->n_out);
    goblin__free(t->spot_idx);
    t->spot_idx = NULL;
    if (t->spot_state == SPOT_CHECK) t->spot_state = SPOT_UNDECIDED;
}

/* Rows @p idx[0..nr) of @p src (contiguous, rows along dim 0) into @p dst (contiguous, nr rows). */
static void gather_rows(const goblin_tensor *src, const int64_t *idx, int64_t nr, void *dst) {
    size_t row = src->shape[0] ? goblin__node_out_bytes(src) / (size_t)src->shape[0] : 0;
    for (int64_t r = 0; r < nr; r++) memcpy((char *)dst + (size_t)r * row, (const char *)src->data + (size_t)idx[r] * row, row);
}

/* Does row @p r of contiguous @p t hold a NaN or an infinity? */
static bool row_nonfinite(const goblin_tensor *t, int64_t r) {
    int64_t per = t->shape[0] ? goblin_tensor_numel(t) / t->shape[0] : 0;
    if (t->dtype == GOBLIN_DTYPE_F32) {
        const float *p = (const float *)t->data + r * per;
        for (int64_t i = 0; i < per; i++)
            if (!isfinite(p[i])) return true;
    } else if (t->dtype == GOBLIN_DTYPE_F64) {
        const double *p = (const double *)t->data + r * per;
        for (int64_t i = 0; i < per; i++)
            if (!isfinite(p[i])) return true;
    }
    return false;
}

/* Evaluate the job's graph on the node for rows @p idx[0..nr) of chunk @p ti: *out gets
 * one new contiguous buffer per output, nr rows each. */
static goblin_err spot_eval(goblin_node *n, goblin_job *j, int64_t ti, const int64_t *idx, int64_t nr,
                            void ***out) {
    gjob *G = j->g;
    goblin_graph *tmp = NULL;
    const goblin_graph *g = G->spot_g;
    goblin_err e = GOBLIN_ENOMEM;
    if (nr != G->spot_k) {
        goblin_split *split = goblin__calloc((size_t)G->n_in + 1, sizeof *split);
        if (!split) return GOBLIN_ENOMEM;
        for (int32_t i = 0; i < G->n_in; i++) split[i] = G->batched[i] ? GOBLIN_SPLIT_BATCH : GOBLIN_SPLIT_BROADCAST;
        e = goblin__graph_rebatch(G->spot_g, split, nr, &tmp, NULL, 0);
        goblin__free(split);
        if (e) return e;
        g = tmp;
    }
    goblin_tensor *in = goblin__calloc((size_t)G->n_in + 1, sizeof *in);
    goblin_tensor *ot = goblin__calloc((size_t)G->n_out, sizeof *ot);
    void **ib = goblin__calloc((size_t)G->n_in + 1, sizeof *ib);
    void **bufs = goblin__calloc((size_t)G->n_out, sizeof *bufs);
    if (!in || !ot || !ib || !bufs) goto done;
    for (int32_t i = 0; i < G->n_in; i++) {
        goblin_tensor src = goblin__node_task_input(j, ti, i);
        if (!G->batched[i]) {
            in[i] = G->packed[i] ? G->in[i] : src;
            if (G->packed[i]) goblin_tensor_init(&in[i], src.dtype, src.rank, src.shape, G->packed[i]);
            continue;
        }
        int64_t shp[GOBLIN_MAX_RANK];
        memcpy(shp, src.shape, sizeof shp);
        shp[0] = nr;
        goblin_tensor_init(&in[i], src.dtype, src.rank, shp, NULL);
        size_t bytes = goblin__node_out_bytes(&in[i]);
        if (!(ib[i] = goblin__alloc(bytes ? bytes : 1))) goto done;
        in[i].data = ib[i];
        goblin_tensor row_src = src, row_dst = in[i];
        row_src.shape[0] = row_dst.shape[0] = 1;
        size_t rb = nr ? bytes / (size_t)nr : 0;
        for (int64_t r = 0; r < nr; r++) {
            row_src.data = (char *)src.data + idx[r] * src.strides[0] * (int64_t)goblin_dtype_size(src.dtype);
            row_dst.data = (char *)ib[i] + (size_t)r * rb;
            goblin__tensor_copy(&row_dst, &row_src);
        }
    }
    for (int32_t o = 0; o < G->n_out; o++) {
        goblin_tensor s;
        goblin_graph_node(g, goblin_graph_output_id(g, o), NULL, &s, NULL, NULL);
        size_t bytes = goblin__node_out_bytes(&s);
        if (!(bufs[o] = goblin__alloc(bytes ? bytes : 1))) goto done;
        goblin_tensor_init(&ot[o], s.dtype, s.rank, s.shape, bufs[o]);
    }
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.backend = n->p.recompute_backend;
    /* One thread: a few rows are too little work to split, and the workers keep every
     * core busy (a threaded kernel's barrier then waits for a descheduled thread). */
    ep.threads = 1;
    ep.shapes_like = gvar(j, ti)->g; /* each row as in the worker's chunk, bit for bit */
    if ((e = goblin_graph_eval(g, &ep, in, G->n_in, ot, G->n_out)) != GOBLIN_OK) goto done;
    *out = bufs;
    bufs = NULL;
done:
    if (ib)
        for (int32_t i = 0; i < G->n_in; i++) goblin__free(ib[i]);
    goblin__free(ib);
    goblin__free(in);
    goblin__free(ot);
    goblin__node_free_bufs(&bufs, G->n_out);
    goblin_graph_free(tmp);
    return e;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Do rows @p idx[0..nr) of result @p res agree with the node's @p mine (nr rows per
 * output) under the outputs' contracts? */
static bool spot_rows_agree(goblin_job *j, int64_t ti, const goblin_tensor *res, const int64_t *idx,
                            int64_t nr, void *const *mine) {
    gjob *G = j->g;
    gvariant *v = gvar(j, ti);
    for (int32_t o = 0; o < G->n_out; o++) {
        int64_t shp[GOBLIN_MAX_RANK];
        memcpy(shp, res[o].shape, sizeof shp);
        shp[0] = nr;
        goblin_tensor m;
        goblin_tensor_init(&m, res[o].dtype, res[o].rank, shp, mine[o]);
        void *theirs = goblin__alloc(goblin__node_out_bytes(&m) ? goblin__node_out_bytes(&m) : 1);
        if (!theirs) return false;
        gather_rows(&res[o], idx, nr, theirs);
        goblin_tensor t = m;
        t.data = theirs;
        goblin_verdict vd;
        memset(&vd, 0, sizeof vd);
        bool ok = goblin_verify_compare(v->oop[o], m.dtype, v->ok[o], &m, &t, &vd) == GOBLIN_OK &&
                  vd.kind == GOBLIN_VERDICT_ACCEPT;
        goblin__free(theirs);
        if (!ok) return false;
    }
    return true;
}

/* spot_k distinct secret rows of task @p ti into @p idx, sorted. */
static void spot_draw(goblin_job *j, int64_t ti, int64_t *idx) {
    gjob *G = j->g;
    gvariant *v = gvar(j, ti);
    int64_t nr = 0;
    while (nr < G->spot_k) {
        int64_t r = (int64_t)(goblin__secret_u64() % (uint64_t)v->rows);
        bool dup = false;
        for (int64_t q = 0; q < nr && !dup; q++) dup = idx[q] == r;
        if (!dup) idx[nr++] = r;
    }
    qsort(idx, (size_t)nr, sizeof *idx, cmp_i64);
}

/* Verdict on worker @p pi's result @p res of task @p ti: true when the spot-check
 * agrees; *decide when it could not be made (the whole task must be recomputed). The
 * secret rows are the task's prepared ones (spot_prepare) when it has them, else drawn
 * and computed now; every row holding a NaN or an infinity is computed now too. */
static bool spot_agrees(goblin_node *n, goblin_job *j, int64_t ti, const goblin_tensor *res, bool *decide) {
    gjob *G = j->g;
    gvariant *v = gvar(j, ti);
    task *tk = &j->tasks[ti];
    bool pre = tk->spot_mine != NULL;
    int64_t cap = G->spot_k + SPOT_NONFINITE_MAX, nr = 0, k = G->spot_k;
    int64_t *idx = goblin__alloc((size_t)cap * sizeof *idx);
    *decide = true;
    if (!idx) return false;
    if (pre) memcpy(idx, tk->spot_idx, (size_t)k * sizeof *idx);
    else spot_draw(j, ti, idx);
    nr = k;
    /* And every row with a NaN or an infinity. */
    for (int64_t r = 0; r < v->rows; r++) {
        bool bad = false;
        for (int32_t o = 0; o < G->n_out && !bad; o++) bad = row_nonfinite(&res[o], r);
        if (!bad) continue;
        bool dup = false;
        for (int64_t q = 0; q < k && !dup; q++) dup = idx[q] == r;
        if (dup) continue;
        if (nr == cap) {
            goblin__free(idx);
            return false;
        }
        idx[nr++] = r;
    }
    /* Rows still to compute: all of them, or (prepared) those with NaN/inf only. */
    int64_t from = pre ? k : 0;
    if (!pre) qsort(idx, (size_t)nr, sizeof *idx, cmp_i64);
    void **mine = NULL;
    goblin_err e = nr > from ? spot_eval(n, j, ti, idx + from, nr - from, &mine) : GOBLIN_OK;
    if (e) {
        goblin__node_log(n, GOBLIN_LOG_WARN, "spot-check of graph task %lld failed on the node (%s): recomputing it whole",
                         (long long)ti, goblin_strerror(e));
        goblin__free(idx);
        return false;
    }
    n->st.spot_checks++;
    n->st.spot_rows_checked += nr;
    if (pre) n->st.spot_checks_prepared++;
    bool ok = (!pre || spot_rows_agree(j, ti, res, idx, k, tk->spot_mine)) &&
              (nr == from || spot_rows_agree(j, ti, res, idx + from, nr - from, mine));
    goblin__node_free_bufs(&mine, G->n_out);
    goblin__free(idx);
    goblin__node_task_free_spot(j, tk);
    *decide = !ok;
    return ok;
}

/* Prepare the spot-checks of leased SPOT tasks while their workers compute: decide
 * (at the rate of the worker holding the lease) whether the result will be checked,
 * and for a checked one draw its secret rows and compute them. The rows are as secret
 * as when drawn on the result's arrival (nothing about them leaves the node), and the
 * last results of a job are then checked by a comparison instead of an evaluation
 * after the workers have finished. At most one evaluation per call (the node loop
 * calls this once per turn). */
void goblin__node_spot_prepare(goblin_node *n) {
    for (int32_t q = 0; q < n->n_jobs; q++) {
        goblin_job *j = n->jobs[q];
        if (!j->running || j->kind != JOB_GRAPH || j->g->verify != GOBLIN_VERIFY_SPOT) continue;
        gjob *G = j->g;
        while (j->prep_from < j->ntasks && j->tasks[j->prep_from].state != T_PENDING) {
            int64_t ti = j->prep_from++;
            task *t = &j->tasks[ti];
            if (t->state != T_LEASED || t->spot_state != SPOT_UNDECIDED || gvar(j, ti)->rows <= G->spot_k) continue;
            int32_t pi = -1;
            int64_t sl[TASK_LIDS];
            int ns = goblin__node_task_lease_slots(n, j, ti, sl, TASK_LIDS);
            for (int q = 0; q < ns && pi < 0; q++)
                if (!n->leases[sl[q]].moot) pi = n->leases[sl[q]].peer;
            for (int64_t i = 0; ns < 0 && i < n->n_leases && pi < 0; i++)
                if (n->leases[i].job == j && n->leases[i].task == ti && !n->leases[i].moot) pi = n->leases[i].peer;
            if (pi < 0) continue;
            t->spot_session = n->peers[pi].session_id;
            if (goblin__node_rand_u01() >= goblin__node_spot_rate(n, G, pi)) {
                t->spot_state = SPOT_TRUSTED;
                continue;
            }
            vclock t0 = goblin__node_verify_begin();
            int64_t *idx = goblin__alloc((size_t)G->spot_k * sizeof *idx);
            void **mine = NULL;
            if (idx) {
                spot_draw(j, ti, idx);
                if (spot_eval(n, j, ti, idx, G->spot_k, &mine) == GOBLIN_OK) {
                    t->spot_idx = idx;
                    t->spot_mine = mine;
                    t->spot_state = SPOT_CHECK;
                    idx = NULL;
                }
            }
            goblin__free(idx); /* failed: decided again when the result arrives */
            goblin__node_verify_end(n, t0);
            return;
        }
    }
}

/* SPOT: accept worker @p pi's result of task @p ti unchecked (a trusted worker, at the
 * adaptive rate), after a spot-check that agrees, or as the node's recomputation of
 * the whole task decides. */
void goblin__node_graph_spot(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, const goblin_tensor *res,
                             void *const *data) {
    gjob *G = j->g;
    task *t = &j->tasks[ti];
    /* The decision prepared for this worker (spot_prepare), else one made now. */
    bool check = t->spot_state != SPOT_UNDECIDED && t->spot_session == n->peers[pi].session_id
                     ? t->spot_state == SPOT_CHECK
                     : goblin__node_rand_u01() < goblin__node_spot_rate(n, G, pi);
    if (!check) {
        goblin__node_task_free_spot(j, t);
        goblin__node_count_accept(n, pi, false);
        goblin__node_graph_task_accept(n, j, ti, data, pi, false);
        return;
    }
    bool decide = true, ok = false;
    if (gvar(j, ti)->rows > G->spot_k) {
        vclock t0 = goblin__node_verify_begin();
        ok = spot_agrees(n, j, ti, res, &decide);
        goblin__node_verify_end(n, t0);
    }
    if (ok) {
        goblin__node_count_accept(n, pi, true);
        /* Not "replicated": rows were sampled, so if this worker is caught later, the
         * result is rechecked whole (recheck_graph). */
        goblin__node_graph_task_accept(n, j, ti, data, pi, false);
        return;
    }
    if (decide) {
        if (gvar(j, ti)->rows > G->spot_k) n->st.results_escalated++;
        goblin__node_graph_decide(n, j, ti, 1, &pi, &res);
    }
}
