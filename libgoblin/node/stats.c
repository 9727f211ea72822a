/* libgoblin/node/stats.c - the node's counters (goblin_node_stats, per-worker stats) and
 * its verification clocks. */
#include "node_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
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
    out->workers_asking = goblin__node_capacity_now(n).workers;
    pthread_mutex_unlock(&n->mu);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Slots are reused, so HELLO order is session order, not slot order. */
goblin_err goblin_node_worker_stats_get(goblin_node *n, int64_t i, goblin_node_worker_stats *out) {
    if (!n || !out) return GOBLIN_EINVAL;
    pthread_mutex_lock(&n->mu);
    goblin_err e = GOBLIN_EINDEX;
    uint64_t *sids = n->n_peers ? goblin__alloc((size_t)n->n_peers * sizeof *sids) : NULL;
    int32_t ns = 0;
    if (n->n_peers && !sids) e = GOBLIN_ENOMEM;
    for (int32_t k = 0; sids && k < n->n_peers; k++)
        if (n->peers[k].used && n->peers[k].session_id) sids[ns++] = n->peers[k].session_id;
    int32_t at = -1;
    if (sids && i >= 0 && i < ns) {
        qsort(sids, (size_t)ns, sizeof *sids, cmp_u64);
        at = goblin__node_find_session(n, sids[i]);
    }
    goblin__free(sids);
    if (at >= 0) {
        int32_t k = at;
        peer *p = &n->peers[k];
        *out = (goblin_node_worker_stats){.session_id = p->session_id,
                                          .connected = p->connected && p->hello,
                                          .quarantined = p->quarantined,
                                          .threads = p->threads,
                                          .memory_bytes = p->memory,
                                          .issued = p->issued,
                                          .accepted = p->accepted,
                                          .rejected = p->rejected,
                                          .failed_leases = p->failed,
                                          .suspected = p->suspected};
        const ident *id = goblin__node_peer_ident(n, k);
        if (id) {
            memcpy(out->identity, id->fp, sizeof out->identity);
            if (id->owner >= 0) snprintf(out->owner, sizeof out->owner, "%s", n->owner_names[id->owner]);
            out->vouched = id->vouched;
        }
        out->probation = goblin__node_on_probation(n, k);
        goblin__node_origin_name(p->origin, out->origin, sizeof out->origin);
        e = GOBLIN_OK;
    }
    pthread_mutex_unlock(&n->mu);
    return e;
}
