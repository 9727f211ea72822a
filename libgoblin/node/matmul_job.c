/* libgoblin/node/matmul_job.c - matmul jobs: planned into tiles (plan.c), each tile's
 * task graph, tiles sent with their panels (cached, or lent in place), results judged
 * and accepted into C, split-K slices summed in slice order. */
#include "node_impl.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "goblin/ops.h"
#include "matmul_graph.h"

/* ---- tensors: views, packing, tiles of C ---------------------------------------- */

goblin_tensor goblin__node_view2(const goblin_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                                 size_t esz) {
    goblin_tensor v = *t;
    v.shape[0] = nr;
    v.shape[1] = nc;
    v.data = (char *)t->data + (r0 * t->strides[0] + c0 * t->strides[1]) * (int64_t)esz;
    return v;
}

/* Copy contiguous @p src (rows x cols) into the strided 2-D view @p v. */
void goblin__node_unpack(goblin_tensor *v, const void *src, size_t esz) {
    int64_t r = v->shape[0], c = v->shape[1];
    const char *s = src;
    for (int64_t i = 0; i < r; i++) {
        char *row = (char *)v->data + i * v->strides[0] * (int64_t)esz;
        if (v->strides[1] == 1) {
            memcpy(row, s, (size_t)c * esz);
            s += (size_t)c * esz;
        } else {
            for (int64_t k = 0; k < c; k++, s += esz) memcpy(row + k * v->strides[1] * (int64_t)esz, s, esz);
        }
    }
}

void goblin__node_job_tile(const goblin_job *j, int64_t i, goblin__matmul_tile *t) {
    goblin__plan_tile(j->plan, i, t);
}

/* Panel ids: the A panel of a task depends on its grid row and K-slice, the B panel
 * on its grid column and K-slice. Never 0 (0 means "do not cache"). */
uint64_t goblin__node_panel_id(const goblin_job *j, int kind, int64_t task_i) {
    int64_t s = j->info.k_slices, t = task_i / s, q = task_i % s;
    int64_t idx = kind == 0 ? (t / j->info.grid_cols) : (t % j->info.grid_cols);
    uint64_t v = j->id * 0x9E3779B97F4A7C15ull;
    v ^= ((uint64_t)kind << 63) | ((uint64_t)(idx * s + q) & 0x7fffffffffffffffull);
    return v ? v : 1;
}

/* ---- the task graph, computed on the node --------------------------------------- */

goblin_err goblin__matmul_graph(goblin_dtype dt, int64_t rows, int64_t kn, int64_t cols,
                                goblin_graph **out) {
    goblin_graph *g = NULL;
    goblin_err e = goblin_graph_new(&g);
    if (e) return e;
    int64_t sa[2] = {rows, kn}, sb[2] = {kn, cols};
    int32_t ids[2], y;
    if ((e = goblin_graph_input(g, dt, 2, sa, &ids[0])) || (e = goblin_graph_input(g, dt, 2, sb, &ids[1])) ||
        (e = goblin_graph_add(g, GOBLIN_OP_MATMUL, ids, 2, NULL, 0, &y)) || (e = goblin_graph_output(g, y))) {
        goblin_graph_free(g);
        return e;
    }
    *out = g;
    return GOBLIN_OK;
}

/* Compute task @p i on the node into contiguous @p dst (rows x cols). */
static goblin_err node_compute_impl(goblin_node *n, goblin_job *j, int64_t i, void *dst) {
    goblin__matmul_tile t;
    goblin__node_job_tile(j, i, &t);
    goblin_graph *g = NULL;
    goblin_err e = goblin__matmul_graph(j->dt, t.rows, t.kn, t.cols, &g);
    if (e) return e;
    goblin_tensor in[2] = {goblin__node_view2(&j->a, t.row0, t.rows, t.k0, t.kn, j->esz),
                           goblin__node_view2(&j->b, t.k0, t.kn, t.col0, t.cols, j->esz)};
    goblin_tensor out;
    int64_t shp[2] = {t.rows, t.cols};
    goblin_tensor_init(&out, j->dt, 2, shp, dst);
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.backend = n->p.recompute_backend;
    ep.threads = n->p.recompute_threads;
    e = goblin_graph_eval(g, &ep, in, 2, &out, 1);
    goblin_graph_free(g);
    return e;
}

/* node_compute, with its time added to the node's verification clock (goblin_node_stats.verify_ns). */
goblin_err goblin__node_compute(goblin_node *n, goblin_job *j, int64_t i, void *dst) {
    vclock t0 = goblin__node_verify_begin();
    goblin_err r = node_compute_impl(n, j, i, dst);
    goblin__node_verify_end(n, t0);
    return r;
}

/* ---- sending tiles -------------------------------------------------------------- */

/* Send task @p ti of @p j to peer @p pi. */
bool goblin__node_issue(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, bool speculative) {
    if (j->kind == JOB_GRAPH) return goblin__node_issue_graph(n, j, ti, pi, speculative);
    peer *p = &n->peers[pi];
    goblin__matmul_tile t;
    goblin__node_job_tile(j, ti, &t);
    uint64_t ida = goblin__node_panel_id(j, 0, ti), idb = goblin__node_panel_id(j, 1, ti);
    bool have_a = goblin__node_peer_has_panel(p, 0, ida), have_b = goblin__node_peer_has_panel(p, 1, idb);
    bool lent = false;
    if (p->shared && j->stok) {
        goblin_tensor va = goblin__node_view2(&j->a, t.row0, t.rows, t.k0, t.kn, j->esz);
        goblin_tensor vb = goblin__node_view2(&j->b, t.k0, t.kn, t.col0, t.cols, j->esz);
        lent = goblin__share_put(j->share, j->stok, ida, &va) == GOBLIN_OK &&
               goblin__share_put(j->share, j->stok, idb, &vb) == GOBLIN_OK;
        if (lent) have_a = have_b = true;
    }
    bool ok = false;
    if (!j->gser || j->gser_shape[0] != t.rows || j->gser_shape[1] != t.kn || j->gser_shape[2] != t.cols) {
        goblin_graph *g = NULL;
        uint8_t *gb = NULL;
        size_t gl = 0;
        goblin_err ge = goblin__matmul_graph(j->dt, t.rows, t.kn, t.cols, &g);
        if (!ge) ge = goblin_graph_serialize(g, &gb, &gl);
        goblin_graph_free(g);
        if (ge) return false;
        goblin_buffer_free(j->gser);
        j->gser = gb;
        j->gser_len = gl;
        j->gser_shape[0] = t.rows;
        j->gser_shape[1] = t.kn;
        j->gser_shape[2] = t.cols;
    }
    /* The panels go as strided views of A and B: send_wire gathers them straight
     * into the message body. */
    int64_t s0[2] = {0, 0};
    goblin_tensor in[3];
    if (have_a) goblin_tensor_init(&in[0], j->dt, 2, s0, NULL);
    else in[0] = goblin__node_view2(&j->a, t.row0, t.rows, t.k0, t.kn, j->esz);
    if (have_b) goblin_tensor_init(&in[1], j->dt, 2, s0, NULL);
    else in[1] = goblin__node_view2(&j->b, t.k0, t.kn, t.col0, t.cols, j->esz);
    /* The cache directory (docs/runtime.md): ids, then "left out" flags. */
    int64_t dir[4] = {(int64_t)ida, (int64_t)idb, have_a ? 1 : 0, have_b ? 1 : 0};
    int64_t sd[1] = {4};
    goblin_tensor_init(&in[2], GOBLIN_DTYPE_I64, 1, sd, dir);
    /* A TASK whose panels are lent is small whatever its work: it goes in a batch only
     * when the panels themselves would have been small (a batch runs to its end before
     * its results go back, and takes one worker all the tasks it holds). */
    bool may_batch = !lent || (uint64_t)(t.rows * t.kn + t.kn * t.cols) * j->esz < BATCH_TASK_BYTES;
    if (!goblin__node_send_task(n, j, ti, pi, speculative, j->gser, j->gser_len, in, 3, may_batch)) return false;
    if (lent) {
        n->st.panels_in_place += 2;
        return true;
    }
    if (have_a) n->st.panel_cache_hits++;
    if (have_b) n->st.panel_cache_hits++;
    goblin__node_peer_add_panel(p, 0, ida);
    goblin__node_peer_add_panel(p, 1, idb);
    ok = true;
    return ok;
}

/* ---- accepting results ---------------------------------------------------------- */

/* Task @p ti's result (contiguous rows x cols at @p data) is final. */
void goblin__node_task_accept(goblin_node *n, goblin_job *j, int64_t ti, const void *data, int32_t by) {
    task *t = &j->tasks[ti];
    goblin__matmul_tile tl;
    goblin__node_job_tile(j, ti, &tl);
    goblin__node_task_settle(n, j, ti, T_DONE, by);
    int64_t s = j->info.k_slices;
    size_t bytes = (size_t)(tl.rows * tl.cols) * j->esz;
    if (s == 1) {
        goblin_tensor v = goblin__node_view2(&j->c, tl.row0, tl.rows, tl.col0, tl.cols, j->esz);
        goblin__node_unpack(&v, data, j->esz);
    } else {
        goblin__free(t->partial);
        t->partial = goblin__alloc(bytes);
        if (!t->partial) {
            goblin__node_job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory holding a split-K partial");
            return;
        }
        memcpy(t->partial, data, bytes);
        int64_t tile = ti / s;
        if (++j->tile_done[tile] == s) {
            /* All slices are in: sum them in slice order, so the result does not
             * depend on which worker finished first. */
            int64_t ne = tl.rows * tl.cols;
            void *sum = goblin__alloc(bytes);
            if (!sum) {
                goblin__node_job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory summing split-K partials");
                return;
            }
            for (int64_t q = 0; q < s; q++) {
                const void *src = j->tasks[tile * s + q].partial;
                if (j->dt == GOBLIN_DTYPE_F32) {
                    float *d = sum;
                    const float *x = src;
                    for (int64_t e = 0; e < ne; e++) d[e] = q ? d[e] + x[e] : x[e];
                } else {
                    double *d = sum;
                    const double *x = src;
                    for (int64_t e = 0; e < ne; e++) d[e] = q ? d[e] + x[e] : x[e];
                }
            }
            goblin_tensor v = goblin__node_view2(&j->c, tl.row0, tl.rows, tl.col0, tl.cols, j->esz);
            goblin__node_unpack(&v, sum, j->esz);
            goblin__free(sum);
            for (int64_t q = 0; q < s; q++) {
                goblin__free(j->tasks[tile * s + q].partial);
                j->tasks[tile * s + q].partial = NULL;
            }
        }
    }
    goblin__node_task_done(n, j, ti);
}

/* Judge a RESULT for lease @p li. */
void goblin__node_handle_result(goblin_node *n, int32_t pi, goblin__wire_result *r) {
    int64_t li = goblin__node_find_lease(n, r->task_id);
    if (li < 0 || n->leases[li].peer != pi) {
        n->st.results_late++;
        return;
    }
    lease L = n->leases[li];
    if (L.moot) {
        n->st.results_duplicate++;
        goblin__node_remove_lease(n, li);
        goblin__node_lease_msg_done(n, &L);
        return;
    }
    goblin_job *j = L.job;
    if (j->kind == JOB_GRAPH) {
        goblin__node_handle_graph_result(n, pi, li, r);
        return;
    }
    goblin__matmul_tile t;
    goblin__node_job_tile(j, L.task, &t);
    goblin_verdict v;
    memset(&v, 0, sizeof v);
    v.kind = GOBLIN_VERDICT_REJECT;
    v.reason = GOBLIN_VERIFY_SHAPE;
    const goblin_tensor *c = r->n_outputs == 1 ? &r->outputs[0] : NULL;
    void *mine = NULL;
    if (c) {
        if (n->p.verify == GOBLIN_VERIFY_UNSAFE_NONE) {
            bool shape_ok = c->dtype == j->dt && c->rank == 2 && c->shape[0] == t.rows && c->shape[1] == t.cols;
            v.kind = shape_ok ? GOBLIN_VERDICT_ACCEPT : GOBLIN_VERDICT_REJECT;
            v.reason = shape_ok ? GOBLIN_VERIFY_OK : GOBLIN_VERIFY_SHAPE;
        } else if (n->p.verify == GOBLIN_VERIFY_RECOMPUTE) {
            mine = goblin__alloc((size_t)(t.rows * t.cols) * j->esz);
            goblin_err e = mine ? goblin__node_compute(n, j, L.task, mine) : GOBLIN_ENOMEM;
            if (e == GOBLIN_OK) {
                goblin_tensor m;
                int64_t shp[2] = {t.rows, t.cols};
                goblin_tensor_init(&m, j->dt, 2, shp, mine);
                e = goblin_verify_compare(GOBLIN_OP_MATMUL, j->dt, t.kn, &m, c, &v);
                if (e == GOBLIN_OK && v.kind == GOBLIN_VERDICT_ESCALATE) {
                    /* Decide with a rigorous check rather than trusting either side. */
                    e = goblin__node_check_tile(n, j, L.task, false, c, &v);
                }
            }
            if (e) {
                goblin__node_log(n, GOBLIN_LOG_ERROR, "cannot recompute task: %s", goblin_strerror(e));
                v.kind = GOBLIN_VERDICT_ESCALATE;
            }
        } else if (j->rowcheck) {
            /* Kept in C and judged with its row panel (row_panel_check); a result of the
             * wrong type or shape is rejected now, as the check would. */
            bool dt_ok = c->dtype == j->dt;
            bool shape_ok = c->rank == 2 && c->shape[0] == t.rows && c->shape[1] == t.cols &&
                            (c->data || t.rows * t.cols == 0);
            if (dt_ok && shape_ok) {
                goblin__node_remove_lease(n, li);
                goblin__node_lease_msg_done(n, &L);
                goblin__node_task_hold(n, j, L.task, c->data, pi);
                return;
            }
            v.reason = dt_ok ? GOBLIN_VERIFY_SHAPE : GOBLIN_VERIFY_DTYPE;
        } else {
            goblin_err e = goblin__node_check_tile(n, j, L.task, false, c, &v);
            if (e) {
                goblin__node_log(n, GOBLIN_LOG_ERROR, "cannot verify task: %s", goblin_strerror(e));
                v.kind = GOBLIN_VERDICT_ESCALATE;
                v.reason = GOBLIN_VERIFY_UNCHECKABLE; /* the node's failure, not the worker's */
            }
        }
    }
    peer *p = &n->peers[pi];
    if (v.kind == GOBLIN_VERDICT_ACCEPT) {
        goblin__node_remove_lease(n, li);
        goblin__node_lease_msg_done(n, &L);
        p->accepted++;
        n->st.results_accepted++;
        goblin__node_task_accept(n, j, L.task, c->data, pi);
    } else if (v.kind == GOBLIN_VERDICT_ESCALATE) {
        /* Inconclusive: recompute on the node and keep the node's tile. */
        goblin__node_remove_lease(n, li);
        goblin__node_lease_msg_done(n, &L);
        n->st.results_escalated++;
        if (!mine) mine = goblin__alloc((size_t)(t.rows * t.cols) * j->esz);
        goblin_err e = mine ? goblin__node_compute(n, j, L.task, mine) : GOBLIN_ENOMEM;
        if (e) {
            goblin__node_job_finish(j, GOBLIN_JOB_FAILED, e, "recomputing an escalated task failed: %s", goblin_strerror(e));
        } else {
            goblin__node_task_accept(n, j, L.task, mine, -1);
        }
        goblin__node_count_suspicion(n, pi, 0, &v);
    } else {
        n->st.results_rejected++;
        n->st.rejected_by_reason[v.reason < GOBLIN_VERIFY_REASON_COUNT ? v.reason : 0]++;
        p->rejected++;
        goblin__node_log(n, GOBLIN_LOG_WARN,
                         "rejected result of task %lld from worker %llu: %s (worst ratio %.3g)",
                         (long long)L.task, (unsigned long long)p->session_id, goblin_verify_reason_name(v.reason),
                         v.worst_ratio);
        char why[96];
        snprintf(why, sizeof why, "result rejected (%s)", goblin_verify_reason_name(v.reason));
        /* The rejected worker learned one bit about the job's vectors: draw new ones. */
        goblin__node_job_drop_panels(j);
        goblin__node_lease_failed(n, li, true, GOBLIN_EVERIFY, why);
        goblin__node_quarantine(n, pi);
    }
    goblin__free(mine);
}

/* ---- jobs: API ------------------------------------------------------------------ */

static bool is_matrix(const goblin_tensor *t) {
    return t && t->rank == 2 && t->shape[0] >= 0 && t->shape[1] >= 0 &&
           (t->data || t->shape[0] == 0 || t->shape[1] == 0);
}

goblin_err goblin_node_submit_matmul(goblin_node *n, const goblin_tensor *a, const goblin_tensor *b,
                                     goblin_tensor *c, const goblin_job_params *jp, goblin_job **out) {
    goblin__node_submit_begin();
    if (!n || !out || !is_matrix(a) || !is_matrix(b) || !is_matrix(c)) return GOBLIN_EINVAL;
    if (a->dtype != b->dtype || a->dtype != c->dtype ||
        (a->dtype != GOBLIN_DTYPE_F32 && a->dtype != GOBLIN_DTYPE_F64))
        return GOBLIN_EDTYPE;
    int64_t m = a->shape[0], k = a->shape[1], nn = b->shape[1];
    if (b->shape[0] != k || c->shape[0] != m || c->shape[1] != nn) return GOBLIN_ESHAPE;
    goblin_job_params defp;
    goblin_job_params_default(&defp);
    if (!jp) jp = &defp;
    goblin_job *j = goblin__calloc(1, sizeof *j);
    if (!j) return GOBLIN_ENOMEM;
    j->a = *a;
    j->b = *b;
    j->c = *c;
    j->dt = a->dtype;
    j->esz = goblin_dtype_size(j->dt);
    j->jp = *jp;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cond, NULL);
    pthread_mutex_lock(&n->mu);
    if (!n->started) {
        pthread_mutex_unlock(&n->mu);
        goblin_job_free(j);
        return GOBLIN_ESTATE;
    }
    j->node = n;
    j->id = n->next_job_id++;
    if (n->share) { /* without it (out of memory) panels are copied */
        j->share = goblin__share_ref(n->share); /* a detached job outlives the node */
        j->stok = goblin__share_job_new();
    }
    /* Empty products: nothing to distribute (an empty K means C = 0). */
    if (m == 0 || nn == 0 || k == 0) {
        if (m && nn) {
            for (int64_t i = 0; i < m; i++)
                for (int64_t q = 0; q < nn; q++) {
                    char *p = (char *)c->data + (i * c->strides[0] + q * c->strides[1]) * (int64_t)j->esz;
                    memset(p, 0, j->esz);
                }
        }
        j->status = GOBLIN_JOB_DONE;
    } else {
        /* Cut by the workers that will compute it (scheduler.c, docs/runtime.md
         * "Capacity"), not by the connections. */
        goblin__node_capacity capn = goblin__node_capacity_now(n);
        uint64_t mem = jp->task_memory_bytes ? jp->task_memory_bytes : capn.memory;
        if (!mem) mem = (uint64_t)256 << 20;
        goblin__plan_params pp;
        goblin__plan_params_default(&pp);
        pp.m = m;
        pp.k = k;
        pp.n = nn;
        pp.dtype = j->dt;
        pp.memory_bytes = mem;
        pp.min_tiles = jp->min_tasks > 0 ? jp->min_tasks : 4 * capn.units;
        char err[256];
        goblin_err e = goblin__plan_matmul(&j->plan, &pp, err, sizeof err);
        if (e) {
            goblin__node_refuse(n, "cannot plan job: %s", err);
            pthread_mutex_unlock(&n->mu);
            j->node = NULL;
            goblin_job_free(j);
            return e;
        }
        goblin__plan_get_info(j->plan, &j->info);
        j->ntasks = goblin__plan_tile_count(j->plan);
        j->rowcheck = n->p.verify == GOBLIN_VERIFY_FREIVALDS && !n->p.freivalds_tile_by_tile &&
                      j->info.k_slices == 1 && j->info.grid_cols > 1;
        j->prep_key = -1;
        j->tasks = goblin__calloc((size_t)j->ntasks, sizeof(task));
        if (j->info.k_slices > 1)
            j->tile_done = goblin__calloc((size_t)(j->ntasks / j->info.k_slices), sizeof(int32_t));
        int64_t cap = n->cap_jobs;
        if (!j->tasks || (j->info.k_slices > 1 && !j->tile_done) ||
            !goblin__node_grow((void **)&n->jobs, &cap, n->n_jobs + 1, sizeof(goblin_job *))) {
            pthread_mutex_unlock(&n->mu);
            j->node = NULL;
            goblin_job_free(j);
            return GOBLIN_ENOMEM;
        }
        n->cap_jobs = (int32_t)cap;
        j->running = true;
        goblin__node_log(n, GOBLIN_LOG_INFO,
                         "job %llu: %lldx%lldx%lld %s in %lld tasks (%lld x %lld tiles, %lld K-slices)",
                         (unsigned long long)j->id, (long long)m, (long long)k, (long long)nn,
                         goblin_dtype_name(j->dt), (long long)j->ntasks, (long long)j->info.grid_rows,
                         (long long)j->info.grid_cols, (long long)j->info.k_slices);
    }
    int64_t cap = n->cap_jobs;
    if (!goblin__node_grow((void **)&n->jobs, &cap, n->n_jobs + 1, sizeof(goblin_job *))) {
        pthread_mutex_unlock(&n->mu);
        j->node = NULL;
        goblin_job_free(j);
        return GOBLIN_ENOMEM;
    }
    n->cap_jobs = (int32_t)cap;
    n->jobs[n->n_jobs++] = j;
    n->sched_all = true;
    pthread_mutex_unlock(&n->mu);
    goblin__node_wake(n);
    *out = j;
    return GOBLIN_OK;
}
