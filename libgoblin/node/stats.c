/* libgoblin/node/stats.c - the node's counters (goblin_node_stats, per-worker stats) and
 * its verification clocks. */
#include "node_impl.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "verify/verify_impl.h"

/* ---- verification clocks -------------------------------------------------------- */

vclock goblin__node_verify_begin(void) {
    goblin__freivalds_take_helper_cpu_ns(); /* nothing of before */
    return (vclock){goblin__now_ns(), goblin__thread_cpu_ns()};
}

void goblin__node_verify_end(goblin_node *n, vclock t0) {
    n->st.verify_ns += goblin__now_ns() - t0.wall;
    n->st.verify_cpu_ns += goblin__thread_cpu_ns() - t0.cpu + goblin__freivalds_take_helper_cpu_ns();
}

/* ---- counters ------------------------------------------------------------------- */

void goblin_node_stats_get(goblin_node *n, goblin_node_stats *out) {
    if (!n || !out) return;
    pthread_mutex_lock(&n->mu);
    *out = n->st;
    pthread_mutex_unlock(&n->mu);
}

goblin_err goblin_node_worker_stats_get(goblin_node *n, int64_t i, goblin_node_worker_stats *out) {
    if (!n || !out) return GOBLIN_EINVAL;
    pthread_mutex_lock(&n->mu);
    int64_t seen = 0;
    goblin_err e = GOBLIN_EINDEX;
    for (int32_t k = 0; k < n->n_peers; k++) {
        peer *p = &n->peers[k];
        if (!p->session_id) continue;
        if (seen++ != i) continue;
        *out = (goblin_node_worker_stats){.session_id = p->session_id,
                                          .connected = p->connected && p->hello,
                                          .quarantined = p->quarantined,
                                          .threads = p->threads,
                                          .memory_bytes = p->memory,
                                          .issued = p->issued,
                                          .accepted = p->accepted,
                                          .rejected = p->rejected,
                                          .failed_leases = p->failed};
        const ident *id = goblin__node_peer_ident(n, k);
        if (id) {
            memcpy(out->identity, id->fp, sizeof out->identity);
            if (id->owner >= 0) snprintf(out->owner, sizeof out->owner, "%s", n->owner_names[id->owner]);
        }
        e = GOBLIN_OK;
        break;
    }
    pthread_mutex_unlock(&n->mu);
    return e;
}
