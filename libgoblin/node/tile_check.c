/* libgoblin/node/tile_check.c - the Freivalds policy of matmul jobs: one panels object
 * per K-slice, checks prepared while the workers compute, and row panels judged at once
 * (docs/verification.md), with their fallbacks tile by tile. */
#include "node_impl.h"

#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/secret.h"

/* ---- panels objects, checks prepared ahead -------------------------------------- */

/* Memory a job's panels objects may take before its tiles are checked one by one. */
#define FVP_MAX_BYTES ((double)(256u << 20))

/* Drop the job's panels objects: the next check draws new vectors. */
void goblin__node_job_drop_panels(goblin_job *j) {
    j->prep_from = 0;
    j->prep_key = -1;
    if (!j->fvp) return;
    for (int64_t q = 0; q < j->info.k_slices; q++) goblin_freivalds_panels_free(j->fvp[q]);
    goblin__free(j->fvp);
    j->fvp = NULL;
}

/* The panels object of K-slice @p q of matmul job @p j, built at its first use (one
 * pass over that slice of B, with vectors drawn from the node's secret source); NULL
 * when the job's tiles are checked one by one (too much memory, or building failed). */
static goblin_freivalds_panels *job_panels(goblin_node *n, goblin_job *j, int64_t q) {
    if (j->fvp_off || j->kind != JOB_MATMUL) return NULL;
    int64_t s = j->info.k_slices, gc = j->info.grid_cols;
    if (j->rowcheck) gc = 1; /* one panel: all of N */
    if (!j->fvp) {
        /* B's sums per column panel and K-slice, and A's per row and column panel */
        double bytes = 8.0 * (n->p.freivalds_vectors + 2) * (double)gc *
                       ((double)j->info.k + (double)s * (double)j->info.m) + 8.0 * (double)j->info.n;
        if (bytes > FVP_MAX_BYTES || !(j->fvp = goblin__calloc((size_t)s, sizeof *j->fvp))) {
            j->fvp_off = true;
            return NULL;
        }
    }
    if (!j->fvp[q]) {
        int64_t *cb = goblin__alloc((size_t)(gc + 1) * sizeof(int64_t));
        if (!cb) return NULL;
        goblin__matmul_tile t;
        for (int64_t c = 0; c < gc; c++) {
            goblin__node_job_tile(j, c * s + q, &t); /* tiles of grid row 0, slice q */
            cb[c] = t.col0;
        }
        if (j->rowcheck) cb[0] = 0;
        cb[gc] = j->info.n;
        goblin__node_job_tile(j, q, &t);
        goblin_freivalds_params fp;
        goblin_freivalds_params_default(&fp);
        fp.seed = goblin__secret_u64();
        fp.vectors = n->p.freivalds_vectors;
        fp.threads = n->p.verify_threads;
        fp.k0 = t.k0;
        fp.kn = t.kn;
        goblin_err e = goblin_freivalds_panels_new(&j->a, &j->b, (int32_t)gc, cb, &fp, &j->fvp[q]);
        goblin__free(cb);
        if (e) {
            goblin__node_log(n, GOBLIN_LOG_WARN, "job %llu: checking tiles one by one (%s)", (unsigned long long)j->id,
                             goblin_strerror(e));
            goblin__node_job_drop_panels(j);
            j->fvp_off = true;
            return NULL;
        }
    }
    return j->fvp[q];
}

/* Freivalds-check @p c as task @p ti (or, with @p whole_tile, the whole C tile over
 * all of K). */
static goblin_err check_tile_impl(goblin_node *n, goblin_job *j, int64_t ti, bool whole_tile,
                             const goblin_tensor *c, goblin_verdict *v) {
    goblin__matmul_tile t;
    goblin__node_job_tile(j, ti, &t);
    if (!whole_tile) {
        int64_t s = j->info.k_slices;
        goblin_freivalds_panels *fp = j->rowcheck ? NULL : job_panels(n, j, ti % s);
        if (fp) return goblin_freivalds_panels_check(fp, t.row0, t.rows, (int32_t)((ti / s) % j->info.grid_cols), c, v);
    }
    if (whole_tile) {
        t.k0 = 0;
        t.kn = j->info.k;
    }
    goblin_tensor a = goblin__node_view2(&j->a, t.row0, t.rows, t.k0, t.kn, j->esz);
    goblin_tensor b = goblin__node_view2(&j->b, t.k0, t.kn, t.col0, t.cols, j->esz);
    goblin_freivalds_params fp;
    goblin_freivalds_params_default(&fp);
    fp.seed = goblin__secret_u64();
    fp.vectors = n->p.freivalds_vectors;
    fp.threads = n->p.verify_threads;
    return goblin_verify_matmul(&a, &b, c, &fp, v);
}

/* check_tile, with its time added to the node's verification clock (goblin_node_stats.verify_ns). */
goblin_err goblin__node_check_tile(goblin_node *n, goblin_job *j, int64_t ti, bool whole_tile,
                                   const goblin_tensor *c, goblin_verdict *v) {
    vclock t0 = goblin__node_verify_begin();
    goblin_err r = check_tile_impl(n, j, ti, whole_tile, c, v);
    goblin__node_verify_end(n, t0);
    return r;
}

/* Prepare the Freivalds checks of leased matmul tasks before their results arrive: the
 * pass over B of their K-slice and over their row panel of A. Done lazily at the first
 * result, the last row panel's pass ran after the last worker had finished, on the
 * job's critical path; done here, while the workers compute, the last result costs
 * only the pass over its own tile. At most one pass per call (a few ms for a 1024-row
 * panel of a 4096 product), so that messages are not kept waiting; the node loop calls
 * this once per turn. The vectors are drawn when a panels object is made, as before:
 * after A and B are fixed, and never seen by a worker. */
void goblin__node_prepare_ahead(goblin_node *n) {
    if (n->p.verify != GOBLIN_VERIFY_FREIVALDS) return;
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running || j->kind != JOB_MATMUL || j->fvp_off) continue;
        int64_t s = j->info.k_slices, gc = j->info.grid_cols;
        while (j->prep_from < j->ntasks && j->tasks[j->prep_from].state != T_PENDING) {
            int64_t ti = j->prep_from++;
            if (j->tasks[ti].state == T_DONE || j->tasks[ti].state == T_HELD) continue;
            int64_t key = (ti / (s * gc)) * s + ti % s; /* (grid row, K-slice) */
            if (key == j->prep_key) continue;
            j->prep_key = key;
            vclock t0 = goblin__node_verify_begin();
            goblin_freivalds_panels *fp = job_panels(n, j, ti % s);
            if (fp) {
                goblin__matmul_tile t;
                goblin__node_job_tile(j, ti, &t);
                goblin_err e = goblin_freivalds_panels_prepare(fp, t.row0, t.rows);
                if (e) goblin__node_log(n, GOBLIN_LOG_DEBUG, "job %llu: preparing a check: %s", (unsigned long long)j->id,
                                        goblin_strerror(e)); /* the check prepares it again, or fails there */
            }
            goblin__node_verify_end(n, t0);
            return;
        }
    }
}

/* ---- row panels judged at once (rowcheck jobs) ---------------------------------- *
 *
 * A job of one K-slice and several column panels checks a row panel's tiles together:
 * its panels object has one panel spanning all N columns, so the pass over a row panel
 * of A computes one product per vector instead of one per column panel, and the row
 * panel of C, once all its tiles are in, is judged against it as one tile of width N
 * (Freivalds for C_i = A_i B; the vectors' entries on different tiles' columns are
 * independent, so a wrong tile is caught as it would be alone, with the tolerance of
 * width N; docs/verification.md). A result waits in C as T_HELD. A row panel that is
 * not accepted at once has its held tiles judged one by one, with fresh vectors
 * (goblin_verify_matmul), so that the wrong ones, and only they, are rejected. */

static void row_panel_check(goblin_node *n, goblin_job *j, int64_t gr);

/* Task @p ti's result (contiguous rows x cols at @p data, from peer @p by) goes into C
 * to be judged with its row panel. */
void goblin__node_task_hold(goblin_node *n, goblin_job *j, int64_t ti, const void *data, int32_t by) {
    task *t = &j->tasks[ti];
    goblin__matmul_tile tl;
    goblin__node_job_tile(j, ti, &tl);
    goblin__node_task_settle(n, j, ti, T_HELD, by);
    goblin_tensor v = goblin__node_view2(&j->c, tl.row0, tl.rows, tl.col0, tl.cols, j->esz);
    goblin__node_unpack(&v, data, j->esz);
    if (t->leased_at_ms) { /* the task's time, for straggler detection (task_done) */
        j->sum_task_ms += goblin__now_ms() - t->leased_at_ms;
        j->n_task_ms++;
        t->leased_at_ms = 0;
    }
    int64_t gc = j->info.grid_cols, gr = ti / gc;
    for (int64_t c = 0; c < gc; c++) {
        uint8_t st = j->tasks[gr * gc + c].state;
        if (st != T_HELD && st != T_DONE) return;
    }
    row_panel_check(n, j, gr);
}

/* Held task @p ti passed: count it for its worker and complete it. */
static void accept_held(goblin_node *n, goblin_job *j, int64_t ti) {
    task *t = &j->tasks[ti];
    t->state = T_DONE;
    int32_t pi = goblin__node_find_session(n, t->by_session);
    if (pi >= 0) n->peers[pi].accepted++;
    n->st.results_accepted++;
    goblin__node_task_done(n, j, ti);
}

/* Held task @p ti failed verdict @p v: counted as a rejected result, its worker is
 * quarantined and the task goes back to be leased again (what lease_failed does for a
 * result rejected as it arrives). */
static void reject_held(goblin_node *n, goblin_job *j, int64_t ti, const goblin_verdict *v) {
    task *t = &j->tasks[ti];
    int32_t pi = goblin__node_find_session(n, t->by_session);
    peer *p = pi >= 0 ? &n->peers[pi] : NULL;
    int32_t id = goblin__node_ident_by_serial(n, t->by_ident); /* the peer may be gone */
    n->st.results_rejected++;
    n->st.rejected_by_reason[v->reason < GOBLIN_VERIFY_REASON_COUNT ? v->reason : 0]++;
    goblin__node_log(n, GOBLIN_LOG_WARN, "rejected result of task %lld from worker %llu: %s (worst ratio %.3g)", (long long)ti,
                     p ? (unsigned long long)p->session_id : 0ull, goblin_verify_reason_name(v->reason), v->worst_ratio);
    /* The worker may learn that it was rejected: the job's vectors are drawn anew. */
    goblin__node_job_drop_panels(j);
    t->state = T_PENDING;
    goblin__node_task_set_by(n, t, -1);
    if (ti < j->scan_from) j->scan_from = ti;
    n->st.tasks_reissued++;
    t->attempts++;
    if (p) {
        p->rejected++;
        p->failed++;
    }
    if (t->attempts > n->p.max_retries) {
        goblin__matmul_tile tl;
        goblin__node_job_tile(j, ti, &tl);
        goblin__node_log(n, GOBLIN_LOG_ERROR, "job %llu failed: task %lld failed %d times (last: result rejected)",
                         (unsigned long long)j->id, (long long)ti, (int)t->attempts);
        goblin__node_job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ELIMIT,
                                "task %lld (rows %lld..%lld, cols %lld..%lld) failed %d times; last failure: result rejected "
                                "(%s)",
                                (long long)ti, (long long)tl.row0, (long long)(tl.row0 + tl.rows), (long long)tl.col0,
                                (long long)(tl.col0 + tl.cols), (int)t->attempts, goblin_verify_reason_name(v->reason));
    }
    if (p) goblin__node_quarantine(n, pi);
    else if (id >= 0) goblin__node_quarantine_identity(n, id);
}

/* Identity @p by_ident was quarantined: its results still waiting for their row panel's
 * check are dropped, unjudged, like its later results and its graph results waiting for
 * a replica (drop_held): the tasks are leased again, and their rows of C overwritten. */
void goblin__node_drop_held_tiles(goblin_node *n, uint64_t by_ident) {
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running || j->kind != JOB_MATMUL || !j->rowcheck) continue;
        for (int64_t i = 0; i < j->ntasks; i++) {
            task *t = &j->tasks[i];
            if (t->state != T_HELD || !by_ident || t->by_ident != by_ident) continue;
            t->state = T_PENDING;
            goblin__node_task_set_by(n, t, -1);
            if (i < j->scan_from) j->scan_from = i;
            n->st.tasks_reissued++;
        }
    }
}

/* Judge held task @p ti alone (its tile in C, fresh vectors). */
static void judge_held_alone(goblin_node *n, goblin_job *j, int64_t ti) {
    goblin__matmul_tile tl;
    goblin__node_job_tile(j, ti, &tl);
    goblin_tensor cv = goblin__node_view2(&j->c, tl.row0, tl.rows, tl.col0, tl.cols, j->esz);
    goblin_verdict v;
    goblin_err e = goblin__node_check_tile(n, j, ti, false, &cv, &v);
    if (e) {
        goblin__node_log(n, GOBLIN_LOG_ERROR, "cannot verify task: %s", goblin_strerror(e));
        v.kind = GOBLIN_VERDICT_ESCALATE;
        v.reason = GOBLIN_VERIFY_UNCHECKABLE; /* the node's failure, not the worker's */
    }
    if (v.kind == GOBLIN_VERDICT_ACCEPT) {
        accept_held(n, j, ti);
    } else if (v.kind == GOBLIN_VERDICT_ESCALATE) {
        /* Inconclusive: recompute on the node and keep the node's tile; a suspicion
         * against the worker (trust.c). */
        n->st.results_escalated++;
        uint64_t by_session = j->tasks[ti].by_session, by_ident = j->tasks[ti].by_ident;
        void *mine = goblin__alloc((size_t)(tl.rows * tl.cols) * j->esz);
        e = mine ? goblin__node_compute(n, j, ti, mine) : GOBLIN_ENOMEM;
        if (e) goblin__node_job_finish(j, GOBLIN_JOB_FAILED, e, "recomputing an escalated task failed: %s", goblin_strerror(e));
        else goblin__node_task_accept(n, j, ti, mine, -1);
        goblin__free(mine);
        goblin__node_count_suspicion(n, goblin__node_find_session(n, by_session), by_ident, &v);
    } else {
        reject_held(n, j, ti, &v);
    }
}

/* All tiles of grid row @p gr are in C: judge them together. */
static void row_panel_check(goblin_node *n, goblin_job *j, int64_t gr) {
    int64_t gc = j->info.grid_cols;
    goblin__matmul_tile tl;
    goblin__node_job_tile(j, gr * gc, &tl);
    goblin_verdict v;
    memset(&v, 0, sizeof v);
    v.kind = GOBLIN_VERDICT_ESCALATE;
    vclock t0 = goblin__node_verify_begin();
    goblin_freivalds_panels *fp = job_panels(n, j, 0);
    goblin_err e = GOBLIN_ENOTSUP;
    if (fp) {
        goblin_tensor cv = goblin__node_view2(&j->c, tl.row0, tl.rows, 0, j->info.n, j->esz);
        e = goblin_freivalds_panels_check(fp, tl.row0, tl.rows, 0, &cv, &v);
        n->st.freivalds_row_panels++;
    }
    goblin__node_verify_end(n, t0);
    if (e == GOBLIN_OK && v.kind == GOBLIN_VERDICT_ACCEPT) {
        for (int64_t c = 0; c < gc && j->running; c++)
            if (j->tasks[gr * gc + c].state == T_HELD) accept_held(n, j, gr * gc + c);
        return;
    }
    if (fp) {
        n->st.freivalds_row_fallbacks++;
        goblin__node_log(n, GOBLIN_LOG_INFO, "job %llu: rows %lld..%lld not accepted together (%s): judging their tiles one by one",
                         (unsigned long long)j->id, (long long)tl.row0, (long long)(tl.row0 + tl.rows),
                         e ? goblin_strerror(e) : goblin_verify_reason_name(v.reason));
    }
    /* A rejection quarantines a worker, which judges its other held tiles at once
     * (recheck_peer): those are no longer held when the loop reaches them. */
    for (int64_t c = 0; c < gc && j->running; c++)
        if (j->tasks[gr * gc + c].state == T_HELD) judge_held_alone(n, j, gr * gc + c);
}
