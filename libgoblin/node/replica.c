/* libgoblin/node/replica.c - a graph job's RESULT judged by the job's verification;
 * REPLICATE: the result held until a replica from another party (another identity,
 * another owner when the node knows owners, and another network origin) arrives and
 * the two compared bit for bit, the node deciding when they differ, when no other party
 * can take it, when neither worker is past its probation, and in a secret audit of
 * agreeing or trusted results (docs/verification.md, "Threat model"). */
#include "node_impl.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

/* ---- REPLICATE: a second worker, results compared ------------------------------- */

/* Is a worker of another party than peer @p pi (another identity, and another owner when
 * known) able to take task @p ti? */
static bool other_eligible(const goblin_node *n, const goblin_job *j, int64_t ti, int32_t pi) {
    for (int32_t k = 0; k < n->n_peers; k++)
        if (goblin__node_peer_eligible(n, k) && !goblin__node_same_party(n, k, pi) &&
            goblin__node_task_fits(j, ti, &n->peers[k]))
            return true;
    return false;
}

/* The node decides task @p ti between the result held for it (peer @p h's) and peer
 * @p pi's @p res0: both judged against the node's own, a wrong one quarantined. */
static void decide_pair(goblin_node *n, goblin_job *j, int64_t ti, int32_t h, int32_t pi, const goblin_tensor *res0) {
    gjob *G = j->g;
    task *t = &j->tasks[ti];
    goblin_tensor *ht = goblin__calloc((size_t)G->n_out, sizeof *ht);
    if (!ht) {
        goblin__node_job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory");
        return;
    }
    for (int32_t o = 0; o < G->n_out; o++) ht[o] = goblin__node_out_tensor(j, ti, o, t->held[o]);
    void **held = t->held; /* graph_decide frees it through the accept */
    t->held = NULL;
    int32_t pc[2] = {h, pi};
    const goblin_tensor *rs[2] = {ht, res0};
    goblin__node_graph_decide(n, j, ti, 2, pc, rs);
    goblin__node_free_bufs(&held, G->n_out);
    goblin__free(ht);
}

/* A secret audit: the node decides task @p ti between the @p nc results @p rs of peers
 * @p pc that were about to be accepted (agreeing replicas, or a trusted worker's). */
static void audit(goblin_node *n, goblin_job *j, int64_t ti, int32_t nc, int32_t *pc, const goblin_tensor *res0) {
    int64_t rejected = n->st.results_rejected;
    n->st.audits++;
    if (nc == 2) decide_pair(n, j, ti, pc[0], pc[1], res0);
    else goblin__node_graph_decide(n, j, ti, 1, pc, &res0);
    if (n->st.results_rejected != rejected) {
        n->st.audits_failed++;
        goblin__node_log(n, GOBLIN_LOG_WARN, "secret audit of graph task %lld: %s", (long long)ti,
                         nc == 2 ? "two agreeing replicas were wrong" : "a trusted worker's result was wrong");
    }
}

static bool graph_bit_equal(const goblin_job *j, int64_t ti, const goblin_tensor *a, void **held) {
    const gvariant *v = gvar(j, ti);
    for (int32_t o = 0; o < j->g->n_out; o++) {
        size_t bytes = goblin__node_out_bytes(&v->oshape[o]);
        if (bytes && memcmp(a[o].data, held[o], bytes) != 0) return false;
    }
    return true;
}

/* ---- a graph job's RESULT judged ------------------------------------------------ */

void goblin__node_handle_graph_result(goblin_node *n, int32_t pi, int64_t li, goblin__wire_result *r) {
    lease L = n->leases[li];
    goblin_job *j = L.job;
    gjob *G = j->g;
    int64_t ti = L.task;
    task *t = &j->tasks[ti];
    goblin_verify_reason why;
    if (!goblin__node_graph_result_shape_ok(j, ti, r, &why)) {
        goblin__node_count_reject(n, pi, ti, why);
        char text[96];
        snprintf(text, sizeof text, "result rejected (%s)", goblin_verify_reason_name(why));
        goblin__node_lease_failed(n, li, true, GOBLIN_EVERIFY, text);
        goblin__node_quarantine(n, pi);
        return;
    }
    goblin__node_remove_lease(n, li);
    goblin__node_lease_msg_done(n, &L);
    if (t->n_leases > 0) t->n_leases--;
    if (t->holder && goblin__node_same_party(n, t->holder - 1, pi)) { /* cannot replicate itself */
        n->st.results_duplicate++;
        if (t->n_leases == 0 && t->state == T_LEASED) t->state = T_PENDING;
        if (ti < j->scan_from) j->scan_from = ti;
        return;
    }
    void **data = goblin__calloc((size_t)G->n_out, sizeof *data);
    if (!data) {
        goblin__node_job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory");
        return;
    }
    for (int32_t o = 0; o < G->n_out; o++) data[o] = r->outputs[o].data;
    const goblin_tensor *res0 = r->outputs;
    if (G->verify == GOBLIN_VERIFY_UNSAFE_NONE) {
        goblin__node_count_accept(n, pi, false);
        goblin__node_graph_task_accept(n, j, ti, data, pi, false);
    } else if (G->verify == GOBLIN_VERIFY_RECOMPUTE) {
        goblin__node_graph_decide(n, j, ti, 1, &pi, &res0);
    } else if (G->verify == GOBLIN_VERIFY_SPOT) {
        goblin__node_graph_spot(n, j, ti, pi, res0, data);
    } else if (G->verify == GOBLIN_VERIFY_CHECKED) {
        goblin__node_graph_checked(n, j, ti, pi, res0);
    } else if (t->holder) {
        int32_t h = t->holder - 1;
        vclock t0 = goblin__node_verify_begin();
        bool same = graph_bit_equal(j, ti, r->outputs, t->held);
        goblin__node_verify_end(n, t0);
        int32_t pc[2] = {h, pi};
        if (!same) {
            decide_pair(n, j, ti, h, pi, res0);
        } else if (goblin__node_on_probation(n, h) && goblin__node_on_probation(n, pi)) {
            /* Neither is established: their agreement vouches for nothing. */
            n->st.probation_checks++;
            decide_pair(n, j, ti, h, pi, res0);
        } else if (goblin__node_audit_draw(n)) {
            audit(n, j, ti, 2, pc, res0);
        } else {
            n->st.replicas_agreed++;
            const ident *hid = goblin__node_peer_ident(n, h);
            uint64_t twin = hid ? hid->serial : 0;
            goblin__node_count_agreement(n, h, pi);
            goblin__node_graph_task_accept(n, j, ti, data, pi, true);
            t->twin_ident = twin;
        }
    } else {
        if (t->rep == REP_UNDECIDED) goblin__node_decide_replication(n, j, ti, pi);
        /* Decided single for a trusted worker whose lease went to one on probation. */
        if (t->rep == REP_SINGLE && goblin__node_on_probation(n, pi)) t->rep = REP_TWICE;
        if (t->rep == REP_SINGLE) {
            if (goblin__node_audit_draw(n)) {
                audit(n, j, ti, 1, &pi, res0);
            } else {
                goblin__node_count_accept(n, pi, false);
                goblin__node_graph_task_accept(n, j, ti, data, pi, false);
            }
        } else if (!other_eligible(n, j, ti, pi)) {
            /* No worker of another identity, owner and origin: the node checks it. */
            n->st.replicas_correlated++;
            if (goblin__node_on_probation(n, pi)) n->st.probation_checks++;
            goblin__node_graph_decide(n, j, ti, 1, &pi, &res0);
        } else {
            /* Hold the result until a different worker's replica arrives. */
            void **held = goblin__calloc((size_t)G->n_out, sizeof *held);
            bool okc = held != NULL;
            for (int32_t o = 0; okc && o < G->n_out; o++) {
                size_t bytes = goblin__node_out_bytes(&gvar(j, ti)->oshape[o]);
                okc = (held[o] = goblin__memdup(data[o], bytes ? bytes : 1)) != NULL;
            }
            if (!okc) {
                goblin__node_free_bufs(&held, G->n_out);
                goblin__node_job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory holding a result");
            } else {
                t->held = held;
                t->holder = pi + 1;
                if (t->n_leases == 0) {
                    t->state = T_PENDING;
                    if (ti < j->scan_from) j->scan_from = ti;
                }
            }
        }
    }
    goblin__free(data);
}

/* ---- held results: orphans, quarantined holders --------------------------------- */

/* A held result whose replica can go nowhere (every eligible worker is of the holder's
 * party: its identity, owner or network origin): the node decides. Being one party is
 * "one identity-or-owner class, or one origin", two equivalence relations, so a holder
 * is of the party of at most one of three pairwise independent workers: with three
 * such eligible (found greedily, one pass over the peers) nothing can be an orphan. */
void goblin__node_resolve_orphans(goblin_node *n) {
    int32_t pick[3], np = 0;
    for (int32_t k = 0; k < n->n_peers && np < 3; k++) {
        if (!goblin__node_peer_eligible(n, k)) continue;
        bool indep = true;
        for (int32_t q = 0; q < np && indep; q++) indep = !goblin__node_same_party(n, pick[q], k);
        if (indep) pick[np++] = k;
    }
    if (np == 0 || np == 3) return;
    for (int32_t q = 0; q < n->n_jobs; q++) {
        goblin_job *j = n->jobs[q];
        if (!j->running || j->kind != JOB_GRAPH || j->g->verify != GOBLIN_VERIFY_REPLICATE) continue;
        for (int64_t i = j->scan_from; i < j->ntasks && j->running; i++) { /* pending ones */
            task *t = &j->tasks[i];
            if (!t->holder || t->state != T_PENDING) continue;
            int32_t h = t->holder - 1;
            if (other_eligible(n, j, i, h)) continue;
            goblin_tensor *ht = goblin__calloc((size_t)j->g->n_out, sizeof *ht);
            if (!ht) return;
            for (int32_t o = 0; o < j->g->n_out; o++) ht[o] = goblin__node_out_tensor(j, i, o, t->held[o]);
            void **held = t->held;
            t->held = NULL;
            const goblin_tensor *rs = ht;
            n->st.replicas_correlated++;
            if (goblin__node_on_probation(n, h)) n->st.probation_checks++;
            goblin__node_graph_decide(n, j, i, 1, &h, &rs);
            goblin__node_free_bufs(&held, j->g->n_out);
            goblin__free(ht);
        }
    }
}

/* Peer @p pi is quarantined: forget the results it has held for replication. */
void goblin__node_drop_held(goblin_node *n, int32_t pi) {
    for (int32_t q = 0; q < n->n_jobs; q++) {
        goblin_job *j = n->jobs[q];
        if (j->kind != JOB_GRAPH) continue;
        for (int64_t i = 0; i < j->ntasks; i++)
            if (j->tasks[i].holder == pi + 1) {
                goblin__node_free_bufs(&j->tasks[i].held, j->g->n_out);
                j->tasks[i].holder = 0;
            }
    }
}
