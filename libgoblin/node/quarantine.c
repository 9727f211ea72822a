/* libgoblin/node/quarantine.c - quarantine: the identity of a worker caught returning a
 * wrong result (with every identity of its owner, when known) is quarantined for good
 * (identity.c keeps it, in the quarantine file too): its connections get no more tasks,
 * their results held for a check are dropped, and the results it had accepted in
 * running jobs, over all its connections, are rechecked (recomputed where they fail). */
#include "node_impl.h"

#include "base/alloc.h"

/* ---- rechecks of a quarantined worker's results --------------------------------- */

static void quarantine_serial(goblin_node *n, uint64_t serial);

/* Recompute on the node what quarantined identity serial @p by had accepted without a
 * replica, and what it agreed on bit for bit with another worker: that agreement
 * vouches for nothing now. A failed recheck of an agreement catches the other worker
 * too (it sent the same wrong bits: a colluding pair), which is quarantined in turn. */
static void recheck_graph(goblin_node *n, goblin_job *j, uint64_t by) {
    gjob *G = j->g;
    for (int64_t i = 0; i < j->ntasks && j->running; i++) {
        task *t = &j->tasks[i];
        if (t->state != T_DONE || (t->by_ident != by && t->twin_ident != by)) continue;
        if (t->replicated && !t->twin_ident) continue; /* the node checked it */
        uint64_t partner = t->twin_ident ? (t->by_ident == by ? t->twin_ident : t->by_ident) : 0;
        n->st.rechecked++;
        void **mine = NULL;
        goblin_err e = goblin__node_graph_compute(n, j, i, &mine);
        if (e) {
            goblin__node_job_finish(j, GOBLIN_JOB_FAILED, e, "recomputing task %lld on the node failed: %s", (long long)i,
                                    goblin_strerror(e));
            return;
        }
        goblin_tensor *have = goblin__calloc((size_t)G->n_out, sizeof *have);
        bool agree = false;
        if (have) {
            for (int32_t o = 0; o < G->n_out; o++)
                have[o] = G->comb[o] == GOBLIN_COMBINE_CONCAT ? goblin__node_out_rows(j, i, o)
                                                              : goblin__node_out_tensor(j, i, o, t->outs[o]);
            goblin_verify_reason why;
            agree = goblin__node_graph_agrees(n, j, i, have, mine, &why);
        }
        if (!agree) {
            n->st.recheck_failed++;
            goblin__node_log(n, GOBLIN_LOG_WARN, "recheck of graph task %lld from a quarantined worker failed: "
                             "the node's result replaces it", (long long)i);
            if (!goblin__node_graph_store(j, i, mine))
                goblin__node_job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory");
        }
        goblin__node_task_set_by(n, t, -1);
        t->replicated = true;
        goblin__free(have);
        goblin__node_free_bufs(&mine, G->n_out);
        if (!agree && partner) quarantine_serial(n, partner);
    }
}

/* Re-verify what identity serial @p by had accepted in running jobs; recompute what fails. */
static void recheck_identity(goblin_node *n, uint64_t by) {
    if (!by) return;
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running) continue;
        if (j->kind == JOB_GRAPH) {
            recheck_graph(n, j, by);
            continue;
        }
        int64_t s = j->info.k_slices;
        for (int64_t i = 0; i < j->ntasks && j->running; i++) {
            task *t = &j->tasks[i];
            if (t->state != T_DONE || t->by_ident != by) continue;
            goblin__matmul_tile tl;
            goblin__node_job_tile(j, i, &tl);
            goblin_verdict v;
            goblin_err e;
            bool whole = false;
            n->st.rechecked++;
            if (s == 1 || t->partial) {
                goblin_tensor c;
                if (s == 1) {
                    c = goblin__node_view2(&j->c, tl.row0, tl.rows, tl.col0, tl.cols, j->esz);
                } else {
                    int64_t shp[2] = {tl.rows, tl.cols};
                    goblin_tensor_init(&c, j->dt, 2, shp, t->partial);
                }
                e = goblin__node_check_tile(n, j, i, false, &c, &v);
            } else {
                /* Already summed into C: check the whole tile over all of K. */
                goblin_tensor c = goblin__node_view2(&j->c, tl.row0, tl.rows, tl.col0, tl.cols, j->esz);
                e = goblin__node_check_tile(n, j, i, true, &c, &v);
                whole = true;
            }
            if (e == GOBLIN_OK && v.kind == GOBLIN_VERDICT_ACCEPT) continue;
            n->st.recheck_failed++;
            goblin__node_log(n, GOBLIN_LOG_WARN, "recheck of task %lld from quarantined worker failed: recomputing",
                             (long long)i);
            int64_t lo = whole ? (i / s) * s : i, hi = whole ? lo + s : i + 1;
            for (int64_t q = lo; q < hi; q++) {
                task *u = &j->tasks[q];
                if (u->state != T_DONE) continue;
                u->state = T_PENDING;
                goblin__free(u->partial);
                u->partial = NULL;
                if (s > 1) j->tile_done[q / s]--;
                if (q < j->scan_from) j->scan_from = q;
                pthread_mutex_lock(&j->mu);
                j->done--;
                pthread_mutex_unlock(&j->mu);
                n->st.tasks_completed--;
            }
        }
    }
}

/* ---- quarantine ----------------------------------------------------------------- */

/* Peer @p pi (of a quarantined identity) gets no more tasks; its leases end and its
 * results held for a replica are dropped. */
static void quarantine_peer(goblin_node *n, int32_t pi) {
    peer *p = &n->peers[pi];
    if (p->quarantined) return;
    p->quarantined = true;
    n->st.workers_quarantined++;
    goblin__node_log(n, GOBLIN_LOG_WARN, "worker %llu quarantined: it returned a wrong result; no more tasks, "
                     "its earlier results are rechecked", (unsigned long long)p->session_id);
    goblin__node_fail_peer_leases(n, pi, false, GOBLIN_EVERIFY, "worker quarantined");
    goblin__node_drop_held(n, pi);
}

void goblin__node_quarantine_identity(goblin_node *n, int32_t id) {
    if (id < 0 || id >= n->n_idents || !n->idents[id].used) return;
    goblin__node_identity_quarantine(n, id);
    for (int32_t k = 0; k < n->n_peers; k++)
        if (n->peers[k].used && n->peers[k].hello &&
            goblin__node_ident_same_party(n, n->peers[k].ident, id))
            quarantine_peer(n, k);
    /* The results of every identity of the party, whichever connection gave them. */
    for (int32_t k = 0; k < n->n_idents; k++) {
        if (!n->idents[k].used || !goblin__node_ident_same_party(n, k, id)) continue;
        uint64_t serial = n->idents[k].serial;
        goblin__node_drop_held_tiles(n, serial);
        recheck_identity(n, serial);
    }
}

/* The partner of a wrong agreement: quarantined unless it already is. */
static void quarantine_serial(goblin_node *n, uint64_t serial) {
    int32_t id = goblin__node_ident_by_serial(n, serial);
    if (id < 0 || n->idents[id].quarantined) return;
    goblin__node_log(n, GOBLIN_LOG_WARN, "identity %.16s agreed bit for bit with a quarantined worker on a "
                     "wrong result: quarantined too", n->idents[id].fp);
    goblin__node_quarantine_identity(n, id);
}

void goblin__node_quarantine(goblin_node *n, int32_t pi) {
    peer *p = &n->peers[pi];
    if (p->quarantined) return;
    if (p->ident < 0) { /* not admitted (cannot happen: tasks go to admitted peers only) */
        quarantine_peer(n, pi);
        return;
    }
    goblin__node_quarantine_identity(n, p->ident);
}
