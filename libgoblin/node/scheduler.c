/* libgoblin/node/scheduler.c - the scheduler: which task a worker that asked for leases
 * gets (input reuse first), the twin lease of a replicated task, a straggler to
 * duplicate (speculation), and the rounds over the peers ready to take one. */
#include "node_impl.h"

#include <math.h>

#include "base/clock.h"

#define SCAN_LIMIT 512    /* pending tasks examined per assignment */
#define REUSE_MIN_BYTES (64u << 10) /* smaller tasks go in order, without a reuse scan */

/* ---- picking a task for a worker ------------------------------------------------ */

bool goblin__node_task_fits(const goblin_job *j, int64_t ti, const peer *p) {
    if (j->kind == JOB_GRAPH) return gvar(j, ti)->bytes <= p->memory;
    goblin__matmul_tile t;
    uint64_t bytes = 0;
    goblin__node_job_tile(j, ti, &t);
    return goblin__matmul_tile_bytes(&t, j->dt, &bytes) == GOBLIN_OK && bytes <= p->memory;
}

static bool lease_held_by(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi) {
    int64_t sl[TASK_LIDS];
    int ns = goblin__node_task_lease_slots(n, j, ti, sl, TASK_LIDS);
    if (ns >= 0) {
        for (int q = 0; q < ns; q++)
            if (!n->leases[sl[q]].moot && goblin__node_same_party(n, n->leases[sl[q]].peer, pi)) return true;
        return false;
    }
    for (int64_t i = 0; i < n->n_leases; i++)
        if (n->leases[i].job == j && n->leases[i].task == ti && !n->leases[i].moot &&
            goblin__node_same_party(n, n->leases[i].peer, pi))
            return true;
    return false;
}

/* Does task @p t hold a result, for its replica, of peer @p pi's party (its identity or
 * owner)? A replica must come from another party. */
static bool held_by_party(const goblin_node *n, const task *t, int32_t pi) {
    return t->holder && goblin__node_same_party(n, t->holder - 1, pi);
}

/* Pick a task for peer @p pi: a pending task whose panels it holds, else the first
 * pending one; with nothing pending, a straggler to duplicate. */
static bool assign_one(goblin_node *n, int32_t pi) {
    peer *p = &n->peers[pi];
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running) continue;
        int64_t first = -1, best = -1, seen = 0;
        while (j->scan_from < j->ntasks && j->tasks[j->scan_from].state != T_PENDING) j->scan_from++;
        for (int64_t i = j->scan_from; i < j->ntasks && seen < SCAN_LIMIT; i++) {
            if (j->tasks[i].state != T_PENDING) continue;
            seen++;
            if (!goblin__node_task_fits(j, i, p)) continue;
            if (j->kind == JOB_GRAPH) {
                if (held_by_party(n, &j->tasks[i], pi)) continue; /* a replica goes to another party */
                first = i;
                break;
            }
            if (first < 0) {
                first = i;
                /* Reuse pays for the scan only when a panel is worth not sending:
                 * for small tiles (tiny tasks), the first pending one. With a
                 * thousand workers whose panels are seldom the next tasks', the
                 * scan of SCAN_LIMIT tasks per lease was the node's main cost. */
                goblin__matmul_tile tl;
                uint64_t tb = 0;
                goblin__node_job_tile(j, i, &tl);
                if (goblin__matmul_tile_bytes(&tl, j->dt, &tb) == GOBLIN_OK && tb < REUSE_MIN_BYTES) break;
            }
            if (goblin__node_peer_has_panel(p, 0, goblin__node_panel_id(j, 0, i)) || goblin__node_peer_has_panel(p, 1, goblin__node_panel_id(j, 1, i))) {
                best = i;
                break;
            }
        }
        if (best < 0) best = first;
        if (best >= 0) return goblin__node_issue(n, j, best, pi, false);
    }
    /* Nothing pending: the twin lease of a task that is to be replicated, on a worker
     * other than the one running it. */
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running || j->kind != JOB_GRAPH || j->g->verify != GOBLIN_VERIFY_REPLICATE) continue;
        while (j->rep_from < j->ntasks) {
            const task *t = &j->tasks[j->rep_from];
            if (t->state == T_DONE || t->rep == REP_SINGLE || (t->rep == REP_TWICE && t->n_leases >= 2)) {
                j->rep_from++;
                continue;
            }
            break;
        }
        int64_t seen = 0;
        for (int64_t i = j->rep_from; i < j->ntasks && seen < SCAN_LIMIT; i++) {
            task *t = &j->tasks[i];
            if (t->state == T_PENDING && t->rep == REP_UNDECIDED) break; /* not leased yet from here on */
            seen++;
            if (t->state != T_LEASED || t->rep != REP_TWICE || t->n_leases != 1 || t->holder) continue;
            if (lease_held_by(n, j, i, pi) || !goblin__node_task_fits(j, i, p)) continue;
            int64_t at = t->leased_at_ms;
            if (!goblin__node_issue(n, j, i, pi, false)) return false;
            t->leased_at_ms = at;
            n->st.replicas_issued++;
            return true;
        }
    }
    if (!n->p.speculate) return false;
    int64_t now = goblin__now_ms();
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running || j->scan_from < j->ntasks) continue; /* not near the end yet */
        /* The straggler scan is O(tasks): a scan that found nothing says when the
         * next straggler can appear at the earliest, and until then no worker scans
         * (with many workers idle at a job's end, every message used to scan). */
        if (now < j->spec_gate_ms) continue;
        int64_t avg = j->n_task_ms ? j->sum_task_ms / j->n_task_ms : 100;
        int64_t thresh = 2 * avg + 50;
        int64_t gate = now + thresh;
        /* Round the tasks from where the last scan duplicated one: each scan used to
         * start at task 0, so a job's tail with many stragglers and many idle workers
         * (4,096 goblin_workers on 2 cores) scanned the tasks once per duplicate, a
         * quarter of the node's time. A scan that finds nothing still sees them all. */
        if (j->spec_from < 0 || j->spec_from >= j->ntasks) j->spec_from = 0;
        for (int64_t c = 0, i = j->spec_from; c < j->ntasks; c++, i = i + 1 < j->ntasks ? i + 1 : 0) {
            task *t = &j->tasks[i];
            if (t->state != T_LEASED || t->n_leases != 1) continue;
            if (now - t->leased_at_ms < thresh) {
                if (t->leased_at_ms + thresh < gate) gate = t->leased_at_ms + thresh;
                continue;
            }
            if (lease_held_by(n, j, i, pi) || !goblin__node_task_fits(j, i, p) || held_by_party(n, t, pi)) {
                if (now + 1 < gate) gate = now + 1; /* another worker may take it */
                continue;
            }
            j->spec_from = i + 1;
            return goblin__node_issue(n, j, i, pi, true);
        }
        /* The average only falls by so much in a few ms: look again at least that often. */
        j->spec_gate_ms = gate < now + 20 ? gate : now + 20;
    }
    return false;
}

/* ---- the ready list, rounds ----------------------------------------------------- */

/* Might assign_one find anything for some peer: a pending task, a replica to lease,
 * or a straggler scan due? (A true here may still find nothing for a given peer.) */
static bool work_available(goblin_node *n) {
    int64_t now = -1;
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running) continue;
        while (j->scan_from < j->ntasks && j->tasks[j->scan_from].state != T_PENDING) j->scan_from++;
        if (j->scan_from < j->ntasks) return true;
        if (j->kind == JOB_GRAPH && j->g->verify == GOBLIN_VERIFY_REPLICATE) return true;
        if (n->p.speculate) {
            if (now < 0) now = goblin__now_ms();
            if (now >= j->spec_gate_ms) return true;
        }
    }
    return false;
}

static bool peer_can_take(const peer *p) {
    return p->connected && p->hello && !p->quarantined && p->wanted > 0 && !p->close_at_ms &&
           p->in_flight < MAX_IN_FLIGHT;
}

void goblin__node_mark_ready(goblin_node *n, int32_t pi) {
    if (pi < 0 || pi >= n->n_peers || n->peers[pi].ready) return;
    int64_t cap = n->cap_ready;
    if (!goblin__node_grow((void **)&n->ready, &cap, n->n_ready + 1, sizeof(int32_t))) return; /* next tick */
    n->cap_ready = (int32_t)cap;
    n->ready[n->n_ready++] = pi;
    n->peers[pi].ready = true;
}

/* Lease tasks to the peers that can take them, round by round (one task per peer per
 * round). @p full: every peer is looked at (housekeeping ticks), else only the ready
 * list. */
void goblin__node_schedule(goblin_node *n, bool full) {
    if (full) {
        goblin__node_resolve_orphans(n);
        for (int32_t i = 0; i < n->n_peers; i++)
            if (peer_can_take(&n->peers[i])) goblin__node_mark_ready(n, i);
    }
    /* Nothing to hand out: the ready peers stay ready, unvisited. With 2,048 idle
     * workers asking, a visit to each after every message (assign_one finding
     * nothing, a clock read each) was the node's main cost. */
    if (!work_available(n)) return;
    bool progress = true;
    while (progress) {
        progress = false;
        for (int32_t k = 0; k < n->n_ready; k++) {
            int32_t i = n->ready[k];
            if (!peer_can_take(&n->peers[i])) {
                n->peers[i].ready = false;
                n->ready[k--] = n->ready[--n->n_ready];
                continue;
            }
            if (!n->peers[i].batch) {
                if (assign_one(n, i)) progress = true;
                continue;
            }
            /* One message per peer per round: up to BATCH_MAX small tasks. */
            peer *p = &n->peers[i];
            n->bpeer = i;
            n->bid = ++n->next_msg_id;
            for (int32_t c = 0; c < BATCH_MAX && p->wanted > 0 && !n->bclosed && n->bcount < BATCH_MAX; c++) {
                if (!assign_one(n, i)) break;
                progress = true;
            }
            goblin__node_batch_flush(n);
        }
    }
}

/* ---- capacity: what a job is cut by --------------------------------------------- */

/* A worker counts while it asks for work: it has lease slots asked for and not filled,
 * holds leases, or asked within CAPACITY_WINDOW_MS (an idle worker with slots asked
 * for asks again every second, worker.c's RESYNC_MS). A worker admitted less than
 * CAPACITY_JOIN_MS ago counts before its first LEASE_REQUEST is read (an honest worker
 * sends it right after HELLO_ACK). A peer that only said HELLO and sends heartbeats
 * does not count: with 1,000 of them beside 2 busy workers, cutting by connections made
 * 4,096 tiles for 2 workers and the job ran 12x slower. */
#define CAPACITY_WINDOW_MS 10000
#define CAPACITY_JOIN_MS 2000
/* A worker's weight is bounded: a claim of many threads cannot cut a job into more
 * than this many times the tasks of one worker. */
#define CAPACITY_MAX_WEIGHT 64

static bool peer_asking(const peer *p, int64_t now) {
    if (p->wanted > 0 || p->n_leases > 0) return true;
    if (p->last_asked_ms) return now - p->last_asked_ms <= CAPACITY_WINDOW_MS;
    return now - p->joined_ms <= CAPACITY_JOIN_MS;
}

goblin__node_capacity goblin__node_capacity_now(const goblin_node *n) {
    goblin__node_capacity c = {0, 1, 0};
    int64_t now = goblin__now_ms();
    int32_t tmin = 0;
    for (int32_t i = 0; i < n->n_peers; i++) {
        const peer *p = &n->peers[i];
        if (!goblin__node_peer_eligible(n, i) || !peer_asking(p, now)) continue;
        int32_t t = p->threads > 0 ? p->threads : 1;
        if (!c.workers || t < tmin) tmin = t;
        if (!c.workers || p->memory < c.memory) c.memory = p->memory;
        c.workers++;
    }
    if (!c.workers) return c;
    double units = 0;
    for (int32_t i = 0; i < n->n_peers; i++) {
        const peer *p = &n->peers[i];
        if (!goblin__node_peer_eligible(n, i) || !peer_asking(p, now)) continue;
        double w = (double)(p->threads > 0 ? p->threads : 1) / (double)tmin;
        units += w < CAPACITY_MAX_WEIGHT ? w : CAPACITY_MAX_WEIGHT;
    }
    c.units = (int64_t)ceil(units - 1e-9);
    if (c.units < 1) c.units = 1;
    return c;
}
