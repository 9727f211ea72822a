/* libgoblin/node/graph_chunk.c - a graph job's chunks as tasks: their inputs, a chunk
 * sent (inputs cached or lent in place), computed and compared on the node, its outputs
 * accepted and stored, and the reductions combined at the job's end. */
#include "node_impl.h"

#include <string.h>

#include "base/alloc.h"
#include "core/node.h"
#include "graph/rebatch.h"

/* ---- a chunk's inputs and outputs ----------------------------------------------- */

/* Indices [r0, r0 + rows) of dim @p axis of @p t (a view). */
static goblin_tensor axis_view(const goblin_tensor *t, int32_t axis, int64_t r0, int64_t rows) {
    goblin_tensor v = *t;
    v.shape[axis] = rows;
    v.data = (char *)t->data + r0 * t->strides[axis] * (int64_t)goblin_dtype_size(t->dtype);
    return v;
}

/* Rows [r0, r0 + rows) of @p t (a view). */
goblin_tensor goblin__node_rows_view(const goblin_tensor *t, int64_t r0, int64_t rows) {
    return axis_view(t, 0, r0, rows);
}

/* Input @p i of task @p ti as the node sees it (caller's memory, any strides): batched
 * inputs cut along their batch dim. */
goblin_tensor goblin__node_task_input(const goblin_job *j, int64_t ti, int32_t i) {
    const gjob *G = j->g;
    if (G->batched[i]) return axis_view(&G->in[i], G->ax->in_axis[i], ti * G->rows, gvar(j, ti)->rows);
    return G->in[i];
}

goblin_tensor goblin__node_out_rows(const goblin_job *j, int64_t ti, int32_t o) {
    const gjob *G = j->g;
    const gvariant *v = gvar(j, ti);
    /* The batch at dim a of the output, each sample's inner values together (planned:
     * outer == 1 for a CONCAT output, graph_job.c). */
    goblin__bax b = G->ax->bax[goblin_graph_output_id(v->g, o)];
    return axis_view(&G->out[o], b.axis, ti * G->rows * b.inner, v->rows * b.inner);
}

size_t goblin__node_out_bytes(const goblin_tensor *shape) {
    return (size_t)goblin_tensor_numel(shape) * goblin_dtype_size(shape->dtype);
}

/* Output @p o of task @p ti over contiguous @p data. */
goblin_tensor goblin__node_out_tensor(const goblin_job *j, int64_t ti, int32_t o, void *data) {
    const goblin_tensor *s = &gvar(j, ti)->oshape[o];
    goblin_tensor t;
    goblin_tensor_init(&t, s->dtype, s->rank, s->shape, data);
    return t;
}

/* ---- sending chunks ------------------------------------------------------------- */

bool goblin__node_issue_graph(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, bool speculative) {
    peer *p = &n->peers[pi];
    gjob *G = j->g;
    gvariant *v = gvar(j, ti);
    int32_t ni = G->n_in;
    goblin_tensor *in = goblin__calloc((size_t)ni + 1, sizeof *in);
    int64_t *dir = goblin__calloc((size_t)(2 * ni) + 1, sizeof *dir);
    void **tmp = goblin__calloc((size_t)ni + 1, sizeof *tmp);
    bool ok = false;
    int64_t hits = 0, lent = 0;
    if (!in || !dir || !tmp) goto out;
    for (int32_t i = 0; i < ni; i++) {
        if (p->shared && j->stok) {
            /* An in-process worker: the input as a view of the caller's memory, under an
             * id of this job's own (distinct for every input and chunk). */
            goblin_tensor view = G->batched[i] ? goblin__node_task_input(j, ti, i) : G->in[i];
            uint64_t lid = (((uint64_t)i << 40) ^ (uint64_t)(G->batched[i] ? ti + 1 : 0)) * 0xD6E8FEB86659FD93ull ^
                           j->id * 0x9E3779B97F4A7C15ull;
            if (lid && goblin__share_put(j->share, j->stok, lid, &view) == GOBLIN_OK) {
                int64_t zero[1] = {0};
                goblin_tensor_init(&in[i], view.dtype, 1, zero, NULL);
                dir[i] = (int64_t)lid;
                dir[ni + i] = 1;
                lent++;
                continue;
            }
        }
        if (G->batched[i]) {
            goblin_tensor cv = goblin__node_task_input(j, ti, i);
            if (goblin_tensor_is_contiguous(&cv)) {
                in[i] = cv;
            } else {
                size_t bytes = goblin__node_out_bytes(&cv);
                if (!(tmp[i] = goblin__alloc(bytes ? bytes : 1))) goto out;
                goblin_tensor_init(&in[i], cv.dtype, cv.rank, cv.shape, tmp[i]);
                goblin__tensor_copy(&in[i], &cv);
            }
            continue;
        }
        uint64_t id = G->cid[i];
        bool have = goblin__node_peer_has_gid(p, id);
        dir[i] = (int64_t)id;
        dir[ni + i] = have ? 1 : 0;
        if (have) {
            int64_t zero[1] = {0};
            goblin_tensor_init(&in[i], G->in[i].dtype, 1, zero, NULL);
            hits++;
        } else if (G->packed[i]) {
            goblin_tensor_init(&in[i], G->in[i].dtype, G->in[i].rank, G->in[i].shape, G->packed[i]);
        } else {
            in[i] = G->in[i];
        }
    }
    int64_t sd[1] = {2 * (int64_t)ni};
    goblin_tensor_init(&in[ni], GOBLIN_DTYPE_I64, 1, sd, dir);
    if (!goblin__node_send_task(n, j, ti, pi, speculative, v->buf, v->len, in, (uint32_t)ni + 1, lent == 0)) goto out;
    n->st.panel_cache_hits += hits;
    n->st.panels_in_place += lent;
    for (int32_t i = 0; i < ni; i++)
        if (!G->batched[i] && dir[ni + i] == 0) goblin__node_peer_add_gid(p, G->cid[i]);
    ok = true;
out:
    if (tmp)
        for (int32_t i = 0; i < ni; i++) goblin__free(tmp[i]);
    goblin__free(tmp);
    goblin__free(in);
    goblin__free(dir);
    return ok;
}

/* ---- computing and comparing on the node ---------------------------------------- */

/* Compute task @p ti on the node: *out gets one new contiguous buffer per output. */
static goblin_err graph_compute_impl(goblin_node *n, goblin_job *j, int64_t ti, void ***out) {
    gjob *G = j->g;
    gvariant *v = gvar(j, ti);
    goblin_tensor *in = goblin__calloc((size_t)G->n_in + 1, sizeof *in);
    goblin_tensor *ot = goblin__calloc((size_t)G->n_out, sizeof *ot);
    void **bufs = goblin__calloc((size_t)G->n_out, sizeof *bufs);
    goblin_err e = GOBLIN_ENOMEM;
    if (!in || !ot || !bufs) goto fail;
    for (int32_t i = 0; i < G->n_in; i++) in[i] = goblin__node_task_input(j, ti, i);
    for (int32_t o = 0; o < G->n_out; o++) {
        size_t bytes = goblin__node_out_bytes(&v->oshape[o]);
        if (!(bufs[o] = goblin__alloc(bytes ? bytes : 1))) goto fail;
        goblin_tensor_init(&ot[o], v->oshape[o].dtype, v->oshape[o].rank, v->oshape[o].shape, bufs[o]);
    }
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.backend = n->p.recompute_backend;
    ep.threads = n->p.recompute_threads;
    if ((e = goblin_graph_eval(v->g, &ep, in, G->n_in, ot, G->n_out)) != GOBLIN_OK) goto fail;
    n->st.node_recomputed++;
    goblin__free(in);
    goblin__free(ot);
    *out = bufs;
    return GOBLIN_OK;
fail:
    goblin__free(in);
    goblin__free(ot);
    goblin__node_free_bufs(&bufs, G->n_out);
    return e;
}

/* graph_compute, with its time added to the node's verification clock (goblin_node_stats.verify_ns). */
goblin_err goblin__node_graph_compute(goblin_node *n, goblin_job *j, int64_t ti, void ***out) {
    vclock t0 = goblin__node_verify_begin();
    goblin_err r = graph_compute_impl(n, j, ti, out);
    goblin__node_verify_end(n, t0);
    return r;
}

/* Does a worker's result have the task's output count, dtypes and shapes? */
bool goblin__node_graph_result_shape_ok(const goblin_job *j, int64_t ti, const goblin__wire_result *r,
                                        goblin_verify_reason *why) {
    const gvariant *v = gvar(j, ti);
    *why = GOBLIN_VERIFY_SHAPE;
    if (v->wg && !goblin__node_checked_shape_ok(j, ti, r, why)) return false;
    if ((int64_t)r->n_outputs != j->g->n_out + v->n_heavy) return false;
    for (int32_t o = 0; o < j->g->n_out; o++) {
        const goblin_tensor *a = &r->outputs[o], *s = &v->oshape[o];
        if (a->dtype != s->dtype) {
            *why = GOBLIN_VERIFY_DTYPE;
            return false;
        }
        if (a->rank != s->rank || memcmp(a->shape, s->shape, (size_t)s->rank * sizeof(int64_t)) != 0 ||
            (goblin_tensor_numel(s) > 0 && !a->data) || !goblin_tensor_is_contiguous(a))
            return false;
    }
    return true;
}

/* Does result @p res (one tensor per output) agree with the node's @p mine within the
 * output ops' contracts? Anything short of ACCEPT is a disagreement: the node's result
 * is trusted, so "inconclusive" cannot be left to the worker's benefit. */
static bool graph_agrees_impl(goblin_node *n, const goblin_job *j, int64_t ti, const goblin_tensor *res,
                         void **mine, goblin_verify_reason *why) {
    const gvariant *v = gvar(j, ti);
    *why = GOBLIN_VERIFY_OK;
    for (int32_t o = 0; o < j->g->n_out; o++) {
        goblin_tensor m = goblin__node_out_tensor(j, ti, o, mine[o]);
        goblin_verdict vd;
        memset(&vd, 0, sizeof vd);
        goblin_err e = goblin_verify_compare(v->oop[o], m.dtype, v->ok[o], &m, &res[o], &vd);
        if (e) {
            goblin__node_log(n, GOBLIN_LOG_ERROR, "cannot compare output %d: %s", (int)o, goblin_strerror(e));
            *why = GOBLIN_VERIFY_UNCHECKABLE;
            return false;
        }
        if (vd.kind != GOBLIN_VERDICT_ACCEPT) {
            *why = vd.reason == GOBLIN_VERIFY_OK || vd.reason == GOBLIN_VERIFY_BIT_EQUAL
                       ? GOBLIN_VERIFY_BETWEEN : vd.reason;
            return false;
        }
    }
    return true;
}

/* graph_agrees, with its time added to the node's verification clock (goblin_node_stats.verify_ns). */
bool goblin__node_graph_agrees(goblin_node *n, const goblin_job *j, int64_t ti, const goblin_tensor *res,
                               void **mine, goblin_verify_reason *why) {
    vclock t0 = goblin__node_verify_begin();
    bool r = graph_agrees_impl(n, j, ti, res, mine, why);
    goblin__node_verify_end(n, t0);
    return r;
}

/* ---- accepting: outputs stored, the node deciding ------------------------------- */

/* Store the outputs of task @p ti (contiguous buffers): CONCAT outputs into the
 * caller's rows, the others kept for the combine at the end. */
bool goblin__node_graph_store(goblin_job *j, int64_t ti, void *const *data) {
    gjob *G = j->g;
    task *t = &j->tasks[ti];
    gvariant *v = gvar(j, ti);
    for (int32_t o = 0; o < G->n_out; o++) {
        goblin_tensor src = goblin__node_out_tensor(j, ti, o, data[o]);
        if (G->comb[o] == GOBLIN_COMBINE_CONCAT) {
            goblin_tensor dst = goblin__node_out_rows(j, ti, o);
            goblin__tensor_copy(&dst, &src);
            continue;
        }
        if (!t->outs && !(t->outs = goblin__calloc((size_t)G->n_out, sizeof(void *)))) return false;
        size_t bytes = goblin__node_out_bytes(&v->oshape[o]);
        void *cp = goblin__memdup(data[o], bytes ? bytes : 1);
        if (!cp) return false;
        goblin__free(t->outs[o]);
        t->outs[o] = cp;
    }
    return true;
}

void goblin__node_graph_task_accept(goblin_node *n, goblin_job *j, int64_t ti, void *const *data,
                                    int32_t by, bool replicated) {
    task *t = &j->tasks[ti];
    goblin__node_task_leases_moot(n, j, ti);
    t->n_leases = 0;
    t->state = T_DONE;
    goblin__node_task_set_by(n, t, by);
    t->replicated = replicated;
    goblin__node_free_bufs(&t->held, j->g->n_out);
    t->holder = 0;
    if (!goblin__node_graph_store(j, ti, data)) {
        goblin__node_job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory holding a chunk's outputs");
        return;
    }
    goblin__node_task_done(n, j, ti);
}

/* Decide task @p ti by recomputing it on the node: each candidate result (@p nc of
 * them, from peers @p pc) is accepted if it agrees with the node's, else rejected and
 * its worker quarantined. The node's result is the one kept. */
void goblin__node_graph_decide(goblin_node *n, goblin_job *j, int64_t ti, int32_t nc, const int32_t *pc,
                               const goblin_tensor *const *res) {
    void **mine = NULL;
    goblin_err e = goblin__node_graph_compute(n, j, ti, &mine);
    if (e) {
        goblin__node_job_finish(j, GOBLIN_JOB_FAILED, e, "recomputing task %lld on the node failed: %s", (long long)ti,
                                goblin_strerror(e));
        return;
    }
    bool ok[2] = {false, false};
    goblin_verify_reason why[2];
    for (int32_t k = 0; k < nc; k++) {
        ok[k] = goblin__node_graph_agrees(n, j, ti, res[k], mine, &why[k]);
        if (ok[k]) goblin__node_count_accept(n, pc[k], true);
        else goblin__node_count_reject(n, pc[k], ti, why[k]);
    }
    if (nc == 2 && ok[0] && ok[1]) n->st.replicas_agreed++;
    goblin__node_graph_task_accept(n, j, ti, mine, -1, true);
    goblin__node_free_bufs(&mine, j->g->n_out);
    for (int32_t k = 0; k < nc; k++)
        if (!ok[k]) goblin__node_quarantine(n, pc[k]);
}

/* ---- assembly: the reductions combined at the job's end ------------------------- */

/* Combine the reduction outputs over the chunks in chunk order (CONCAT outputs are
 * already in place). Each in the output dtype's own arithmetic. */
#define COMBINE_LOOP(T)                                                                   \
    do {                                                                                  \
        T *a = acc;                                                                       \
        const T *x = src;                                                                 \
        T w = (T)((double)rows_c / (double)G->batch);                                     \
        for (int64_t e = 0; e < ne; e++) {                                                \
            switch (c) {                                                                  \
            case GOBLIN_COMBINE_SUM: a[e] = first ? x[e] : (T)(a[e] + x[e]); break;       \
            case GOBLIN_COMBINE_MEAN: a[e] = first ? (T)(w * x[e]) : (T)(a[e] + w * x[e]); break; \
            case GOBLIN_COMBINE_MAX:                                                      \
                if (first || x[e] > a[e] || x[e] != x[e]) { if (a[e] == a[e] || first) a[e] = x[e]; } \
                break;                                                                    \
            default:                                                                      \
                if (first || x[e] < a[e] || x[e] != x[e]) { if (a[e] == a[e] || first) a[e] = x[e]; } \
                break;                                                                    \
            }                                                                             \
        }                                                                                 \
    } while (0)

goblin_err goblin__node_graph_combine(goblin_job *j) {
    gjob *G = j->g;
    for (int32_t o = 0; o < G->n_out; o++) {
        goblin_combine c = G->comb[o];
        if (c == GOBLIN_COMBINE_CONCAT) continue;
        goblin_tensor *dst = &G->out[o];
        int64_t ne = goblin_tensor_numel(dst);
        size_t bytes = (size_t)ne * goblin_dtype_size(dst->dtype);
        void *acc = goblin__alloc(bytes ? bytes : 1);
        if (!acc) return GOBLIN_ENOMEM;
        for (int64_t ci = 0; ci < j->ntasks; ci++) {
            const void *src = j->tasks[ci].outs ? j->tasks[ci].outs[o] : NULL;
            if (!src) {
                goblin__free(acc);
                return GOBLIN_ESTATE;
            }
            int64_t rows_c = gvar(j, ci)->rows;
            bool first = ci == 0;
            switch (dst->dtype) {
            case GOBLIN_DTYPE_F32: COMBINE_LOOP(float); break;
            case GOBLIN_DTYPE_F64: COMBINE_LOOP(double); break;
            case GOBLIN_DTYPE_I32: COMBINE_LOOP(int32_t); break;
            case GOBLIN_DTYPE_I64: COMBINE_LOOP(int64_t); break;
            default: goblin__free(acc); return GOBLIN_EDTYPE;
            }
        }
        goblin_tensor at;
        goblin_tensor_init(&at, dst->dtype, dst->rank, dst->shape, acc);
        goblin__tensor_copy(dst, &at);
        goblin__free(acc);
    }
    return GOBLIN_OK;
}
