/* libgoblin/node/trust.c - adaptive trust: the share of a worker's results that are
 * checked (a replica under REPLICATE, secret rows under SPOT) falls with the checks its
 * identity has passed (over all its connections), never under the job's
 * min_replication; probation (a new identity's first probation_results results are all
 * checked by the node or by an established worker of another party); secret audits
 * (audit_rate); verdicts counted per connection. */
#include "node_impl.h"

#include "base/secret.h"

/* ---- the rate of checks a worker's agreements earn ------------------------------ */

double goblin__node_rand_u01(void) { return (double)(goblin__secret_u64() >> 11) * 0x1p-53; }

/* REPLICATE graph jobs: whether task @p ti, first leased to peer @p pi, is run twice.
 * Drawn from the node's secret random source at the first lease, at the rate the
 * worker's trust gives (docs/verification.md); the replica lease then goes to another
 * worker at once, so both copies run side by side instead of one after the other. A
 * worker cannot tell whether its lease has a twin. */
static int64_t agreements(const goblin_node *n, int32_t pi) {
    const ident *id = goblin__node_peer_ident(n, pi);
    return id ? id->agreements : 0;
}

bool goblin__node_on_probation(const goblin_node *n, int32_t pi) {
    const ident *id = goblin__node_peer_ident(n, pi);
    return !id || id->vouched < n->p.probation_results;
}

bool goblin__node_audit_draw(const goblin_node *n) {
    return n->p.audit_rate > 0.0 && goblin__node_rand_u01() < n->p.audit_rate;
}

void goblin__node_decide_replication(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi) {
    task *t = &j->tasks[ti];
    if (j->kind != JOB_GRAPH || j->g->verify != GOBLIN_VERIFY_REPLICATE || t->rep != REP_UNDECIDED)
        return;
    double rate = 1.0 / (1.0 + (double)agreements(n, pi) / j->g->halflife);
    if (rate < j->g->min_rep) rate = j->g->min_rep;
    if (goblin__node_on_probation(n, pi)) rate = 1.0; /* every result checked */
    t->rep = goblin__node_rand_u01() < rate ? REP_TWICE : REP_SINGLE;
}

/* The share of a worker's SPOT results that are checked: adaptive in its agreements,
 * never under the job's min_replication. */
double goblin__node_spot_rate(const goblin_node *n, const gjob *G, int32_t pi) {
    if (goblin__node_on_probation(n, pi)) return 1.0;
    double rate = 1.0 / (1.0 + (double)agreements(n, pi) / G->halflife);
    return rate < G->min_rep ? G->min_rep : rate;
}

/* ---- verdicts counted ----------------------------------------------------------- */

void goblin__node_count_reject(goblin_node *n, int32_t pi, int64_t ti, goblin_verify_reason why) {
    peer *p = &n->peers[pi];
    n->st.results_rejected++;
    n->st.rejected_by_reason[why < GOBLIN_VERIFY_REASON_COUNT ? why : 0]++;
    p->rejected++;
    goblin__node_log(n, GOBLIN_LOG_WARN, "rejected result of graph task %lld from worker %llu: %s", (long long)ti,
                     (unsigned long long)p->session_id, goblin_verify_reason_name(why));
}

void goblin__node_count_accept(goblin_node *n, int32_t pi, bool agreed) {
    n->st.results_accepted++;
    n->peers[pi].accepted++;
    ident *id = goblin__node_peer_ident(n, pi);
    if (agreed && id) {
        id->agreements++;
        id->vouched++;
    }
}

void goblin__node_count_agreement(goblin_node *n, int32_t h, int32_t pi) {
    /* Each vouches for the other only once it is established itself: two fresh keys
     * (a sybil pair's whitewashed workers) never end each other's probation. */
    bool h_est = !goblin__node_on_probation(n, h), p_est = !goblin__node_on_probation(n, pi);
    n->st.results_accepted += 2;
    n->peers[h].accepted++;
    n->peers[pi].accepted++;
    ident *a = goblin__node_peer_ident(n, h), *b = goblin__node_peer_ident(n, pi);
    if (a) {
        a->agreements++;
        if (p_est) a->vouched++;
    }
    if (b) {
        b->agreements++;
        if (h_est) b->vouched++;
    }
}

void goblin__node_count_suspicion(goblin_node *n, int32_t pi, uint64_t by_ident, const goblin_verdict *v) {
    if (v->kind != GOBLIN_VERDICT_ESCALATE || v->reason != GOBLIN_VERIFY_BETWEEN) return;
    int32_t id = pi >= 0 ? n->peers[pi].ident : goblin__node_ident_by_serial(n, by_ident);
    if (pi >= 0) n->peers[pi].suspected++;
    if (id < 0) return;
    ident *I = &n->idents[id];
    I->suspicions++;
    goblin__node_log(n, GOBLIN_LOG_WARN, "worker %llu: result recomputed (%s), %lld of %d before quarantine",
                     pi >= 0 ? (unsigned long long)n->peers[pi].session_id : 0ull, goblin_verify_reason_name(v->reason),
                     (long long)I->suspicions, GOBLIN__SUSPICION_LIMIT);
    if (I->suspicions < GOBLIN__SUSPICION_LIMIT || I->quarantined) return;
    if (pi >= 0) goblin__node_quarantine(n, pi);
    else goblin__node_quarantine_identity(n, id);
}

void goblin__node_task_set_by(const goblin_node *n, task *t, int32_t by) {
    const ident *id = by >= 0 ? goblin__node_peer_ident(n, by) : NULL;
    t->by_session = by >= 0 ? n->peers[by].session_id : 0;
    t->by_ident = id ? id->serial : 0;
    t->twin_ident = 0;
}
