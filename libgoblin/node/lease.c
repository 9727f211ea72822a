/* libgoblin/node/lease.c - leases: a task leased to a worker until its result, a failure
 * or its deadline; a lease that ends without an accepted result puts its task back
 * (reissue) or fails the job; TASKs sent alone or in batches (protocol 1.1). */
#include "node_impl.h"

#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "proto/wire_impl.h"

/* ---- leases --------------------------------------------------------------------- */

/* ---- the id index: lease id -> slot ---------------------------------------------- */

static size_t lidx_home(const goblin_node *n, uint64_t id) {
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 17) & (size_t)(n->lidx_cap - 1);
}

/* The index position holding lease @p id, or -1. */
static int64_t lidx_pos(const goblin_node *n, uint64_t id) {
    size_t mask = (size_t)(n->lidx_cap - 1);
    for (size_t h = lidx_home(n, id);; h = (h + 1) & mask) {
        int64_t v = n->lidx[h];
        if (!v) return -1;
        if (n->leases[v - 1].id == id) return (int64_t)h;
    }
}

static void lidx_put(goblin_node *n, uint64_t id, int64_t slot) {
    size_t mask = (size_t)(n->lidx_cap - 1), h = lidx_home(n, id);
    while (n->lidx[h]) h = (h + 1) & mask;
    n->lidx[h] = slot + 1;
}

/* Room for @p want leases (rebuilt from the table when it doubles); on out of memory
 * the index is dropped and lookups scan the table. */
static void lidx_reserve(goblin_node *n, int64_t want) {
    if (n->lidx && want * 2 <= n->lidx_cap) return;
    if (!n->lidx && n->lidx_cap < 0) return; /* dropped earlier: scanning */
    int64_t cap = 1024;
    while (cap < want * 4) cap *= 2;
    int64_t *ix = goblin__calloc((size_t)cap, sizeof *ix);
    goblin__free(n->lidx);
    n->lidx = ix;
    n->lidx_cap = ix ? cap : -1;
    if (!ix) return;
    for (int64_t i = 0; i < n->n_leases; i++) lidx_put(n, n->leases[i].id, i);
}

/* Remove index position @p h, shifting back the entries of its probe run. */
static void lidx_del_at(goblin_node *n, size_t h) {
    size_t mask = (size_t)(n->lidx_cap - 1);
    n->lidx[h] = 0;
    for (size_t j = (h + 1) & mask; n->lidx[j]; j = (j + 1) & mask) {
        size_t k = lidx_home(n, n->leases[n->lidx[j] - 1].id);
        /* entry j may move to the hole at h unless its home lies cyclically in (h, j] */
        bool stays = h <= j ? (h < k && k <= j) : (h < k || k <= j);
        if (stays) continue;
        n->lidx[h] = n->lidx[j];
        n->lidx[j] = 0;
        h = j;
    }
}

void goblin__node_leases_clear(goblin_node *n) {
    n->n_leases = 0;
    n->lease_deadline_min = 0;
    if (n->lidx) memset(n->lidx, 0, (size_t)n->lidx_cap * sizeof *n->lidx);
}

/* ---- leases --------------------------------------------------------------------- */

static void task_lid_add(task *t, uint64_t id) {
    if (t->n_lids < TASK_LIDS) t->lids[t->n_lids++] = id;
    else t->lids_over = true;
}

static void task_lid_del(task *t, uint64_t id) {
    for (int i = 0; i < t->n_lids; i++)
        if (t->lids[i] == id) {
            t->lids[i] = t->lids[--t->n_lids];
            return;
        }
}

void goblin__node_remove_lease(goblin_node *n, int64_t li) {
    lease *L = &n->leases[li];
    int32_t pi = L->peer;
    if (pi >= 0 && pi < n->n_peers && n->peers[pi].n_leases > 0) n->peers[pi].n_leases--;
    if (L->job) task_lid_del(&L->job->tasks[L->task], L->id); /* NULL: the job was freed */
    int64_t last = n->n_leases - 1;
    if (n->lidx) {
        int64_t h = lidx_pos(n, L->id);
        if (h >= 0) lidx_del_at(n, (size_t)h);
        if (li != last) {
            int64_t hm = lidx_pos(n, n->leases[last].id);
            if (hm >= 0) n->lidx[hm] = li + 1;
        }
    }
    n->leases[li] = n->leases[last];
    n->n_leases--;
}

bool goblin__node_lease_reserve(goblin_node *n) {
    int64_t cap = n->cap_leases;
    if (!goblin__node_grow((void **)&n->leases, &cap, n->n_leases + 1, sizeof(lease))) return false;
    n->cap_leases = cap;
    lidx_reserve(n, n->n_leases + 1);
    return true;
}

void goblin__node_lease_push(goblin_node *n, const lease *L) {
    n->leases[n->n_leases++] = *L;
    if (!n->lease_deadline_min || L->deadline_ms < n->lease_deadline_min) n->lease_deadline_min = L->deadline_ms;
    if (n->lidx) lidx_put(n, L->id, n->n_leases - 1);
    if (L->job) task_lid_add(&L->job->tasks[L->task], L->id);
}

int64_t goblin__node_find_lease(goblin_node *n, uint64_t id) {
    if (n->lidx) {
        int64_t h = lidx_pos(n, id);
        return h < 0 ? -1 : n->lidx[h] - 1;
    }
    for (int64_t i = 0; i < n->n_leases; i++)
        if (n->leases[i].id == id) return i;
    return -1;
}

int goblin__node_task_lease_slots(const goblin_node *n, const goblin_job *j, int64_t ti, int64_t *out, int cap) {
    const task *t = &j->tasks[ti];
    if (t->lids_over) return -1;
    int k = 0;
    for (int i = 0; i < t->n_lids && k < cap; i++) {
        int64_t li = goblin__node_find_lease((goblin_node *)n, t->lids[i]);
        if (li >= 0 && n->leases[li].job == j && n->leases[li].task == ti) out[k++] = li;
    }
    return k;
}

void goblin__node_task_leases_moot(goblin_node *n, goblin_job *j, int64_t ti) {
    int64_t sl[TASK_LIDS];
    int k = goblin__node_task_lease_slots(n, j, ti, sl, TASK_LIDS);
    if (k < 0) {
        for (int64_t i = 0; i < n->n_leases; i++)
            if (n->leases[i].job == j && n->leases[i].task == ti) n->leases[i].moot = true;
        return;
    }
    for (int i = 0; i < k; i++) n->leases[sl[i]].moot = true;
}

/* Lease @p L ended (result, failure, expiry, its job freed): the first lease of its
 * TASK message to end shows the worker took the message off its pipe. */
void goblin__node_lease_msg_done(goblin_node *n, const lease *L) {
    if (L->peer < 0 || L->peer >= n->n_peers) return;
    peer *p = &n->peers[L->peer];
    for (int32_t i = 0; i < p->in_flight; i++)
        if (p->in_flight_msg[i] == L->msg) {
            p->in_flight_msg[i] = p->in_flight_msg[--p->in_flight];
            return;
        }
}

/* A lease ended without an accepted result. @p counts: whether it counts against the
 * task's retry budget. */
void goblin__node_lease_failed(goblin_node *n, int64_t li, bool counts, goblin_err why, const char *what) {
    lease L = n->leases[li];
    goblin__node_remove_lease(n, li);
    goblin__node_lease_msg_done(n, &L);
    goblin__node_mark_ready(n, L.peer);
    if (L.moot) return;
    goblin_job *j = L.job;
    task *t = &j->tasks[L.task];
    if (t->n_leases > 0) t->n_leases--;
    bool miss = why == GOBLIN_ENOTFOUND;
    if (L.peer >= 0 && L.peer < n->n_peers && !miss) n->peers[L.peer].failed++;
    if (t->state == T_DONE || t->state == T_HELD || !j->running) return;
    if (!miss) n->st.tasks_reissued++;
    if (counts) t->attempts++;
    if (t->n_leases == 0) {
        t->state = T_PENDING;
        if (L.task < j->scan_from) j->scan_from = L.task;
    }
    if (counts && t->attempts > n->p.max_retries) {
        goblin__node_log(n, GOBLIN_LOG_ERROR, "job %llu failed: task %lld failed %d times (last: %s)",
                         (unsigned long long)j->id, (long long)L.task, (int)t->attempts, what);
        if (j->kind == JOB_GRAPH) {
            int64_t r0 = L.task * j->g->rows;
            goblin__node_job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ELIMIT,
                                    "task %lld (batch rows %lld..%lld) failed %d times; last failure: %s",
                                    (long long)L.task, (long long)r0, (long long)(r0 + gvar(j, L.task)->rows),
                                    (int)t->attempts, what);
            return;
        }
        goblin__matmul_tile tl;
        goblin__node_job_tile(j, L.task, &tl);
        goblin__node_job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ELIMIT,
                                "task %lld (rows %lld..%lld, cols %lld..%lld, k %lld..%lld) failed %d times; "
                                "last failure: %s",
                                (long long)L.task, (long long)tl.row0, (long long)(tl.row0 + tl.rows),
                                (long long)tl.col0, (long long)(tl.col0 + tl.cols), (long long)tl.k0,
                                (long long)(tl.k0 + tl.kn), (int)t->attempts, what);
    }
}

void goblin__node_fail_peer_leases(goblin_node *n, int32_t pi, bool counts, goblin_err why, const char *what) {
    for (int64_t i = n->n_leases - 1; i >= 0; i--)
        if (i < n->n_leases && n->leases[i].peer == pi) goblin__node_lease_failed(n, i, counts, why, what);
}

/* ---- sending TASKs, alone or in batches ----------------------------------------- */

/* Take a slot of peer @p pi's pipe queue for TASK message @p mid. */
static void in_flight_add(peer *p, uint64_t mid) {
    if (p->in_flight < MAX_IN_FLIGHT) p->in_flight_msg[p->in_flight++] = mid;
}

/* Send the open batch (if it holds any TASK) and close it. If the send fails, its
 * leases end at once (not counted against the tasks: nothing reached the worker). */
void goblin__node_batch_flush(goblin_node *n) {
    int32_t pi = n->bpeer;
    nng_msg *msg = n->bmsg;
    uint64_t bid = n->bid;
    n->bpeer = -1;
    n->bmsg = NULL;
    n->bcount = 0;
    n->bclosed = false;
    if (!msg) return;
    peer *p = &n->peers[pi];
    nng_msg_set_pipe(msg, p->pipe);
    int rv = nng_sendmsg(n->sock, msg, 0);
    if (rv == 0) return;
    nng_msg_free(msg);
    goblin__node_log(n, GOBLIN_LOG_WARN, "cannot send a batch of tasks to worker %llu: %s", (unsigned long long)p->session_id,
                     nng_strerror(rv));
    for (int64_t i = n->n_leases - 1; i >= 0; i--)
        if (i < n->n_leases && n->leases[i].msg == bid && n->leases[i].peer == pi)
            goblin__node_lease_failed(n, i, false, GOBLIN_ECLOSED, "cannot send the task");
}

/* Send TASK @p m to peer @p pi: appended to the batch open for it when it is small,
 * @p batchable and the peer takes batches, else alone. *mid: the id of the message it went in.
 * NNG_EAGAIN: not now (a big task after small ones in this round: it waits for the
 * next one, since the batch and it would need two queue slots). */
static int batch_add(goblin_node *n, int32_t pi, const goblin__wire_msg *m, bool batchable, uint64_t *mid) {
    peer *p = &n->peers[pi];
    size_t len = 0;
    if (goblin__wire_encoded_size_strided(m, &len) != GOBLIN_OK) return NNG_EINVAL;
    bool open = n->bpeer == pi && !n->bclosed;
    if (open && batchable && len < BATCH_TASK_BYTES && n->bcount < BATCH_MAX) {
        size_t at = 0, cur = 0;
        int rv;
        if (!n->bmsg) {
            rv = nng_msg_alloc(&n->bmsg, len);
            if (rv) return rv;
            /* room for the rest of a full batch of tasks like this one */
            nng_msg_reserve(n->bmsg, (len + GOBLIN_WIRE_BATCH_ALIGN) * (size_t)(p->wanted < BATCH_MAX ? p->wanted : BATCH_MAX));
        } else {
            cur = nng_msg_len(n->bmsg);
            at = cur + (GOBLIN_WIRE_BATCH_ALIGN - cur % GOBLIN_WIRE_BATCH_ALIGN) % GOBLIN_WIRE_BATCH_ALIGN;
            if ((rv = nng_msg_realloc(n->bmsg, at + len)) != 0) return rv;
            memset((uint8_t *)nng_msg_body(n->bmsg) + cur, 0, at - cur);
        }
        size_t wrote = 0;
        if (goblin__wire_encode_into_strided(m, (uint8_t *)nng_msg_body(n->bmsg) + at, len, &wrote) != GOBLIN_OK) {
            if (at == 0) {
                nng_msg_free(n->bmsg);
                n->bmsg = NULL;
            } else {
                nng_msg_chop(n->bmsg, at + len - cur);
            }
            return NNG_EINVAL;
        }
        if (n->bcount++ == 0) in_flight_add(p, n->bid);
        *mid = n->bid;
        return 0;
    }
    if (open && n->bcount > 0) return NNG_EAGAIN;
    int rv = goblin__node_send_wire(n, p->pipe, m);
    if (rv) return rv;
    *mid = ++n->next_msg_id;
    in_flight_add(p, *mid);
    if (n->bpeer == pi) n->bclosed = true;
    return 0;
}

/* Register a lease of task @p ti of @p j for peer @p pi and send the TASK. */
bool goblin__node_send_task(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, bool speculative,
                            const uint8_t *gbuf, size_t glen, goblin_tensor *in, uint32_t n_in, bool may_batch) {
    peer *p = &n->peers[pi];
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_TASK);
    uint64_t lid = n->next_lease_id++;
    m.request_id = lid;
    m.body.task.task_id = lid;
    m.body.task.lease_ms = n->p.lease_ms;
    m.body.task.graph_len = glen;
    m.body.task.graph = (uint8_t *)gbuf;
    m.body.task.n_inputs = n_in;
    m.body.task.inputs = in;
    if (!goblin__node_lease_reserve(n)) return false;
    uint64_t mid;
    /* Graph jobs verified by replication decide each task's replication from the
     * worker's trust when it is first leased: their tasks go one per message, so a
     * new worker is not handed a batch of leases before it has earned any trust. */
    bool batchable = may_batch && (j->kind == JOB_MATMUL || j->g->verify != GOBLIN_VERIFY_REPLICATE);
    int rv = batch_add(n, pi, &m, batchable, &mid);
    if (rv) {
        if (rv != NNG_EAGAIN)
            goblin__node_log(n, GOBLIN_LOG_WARN, "cannot send task to worker %llu: %s", (unsigned long long)p->session_id,
                             nng_strerror(rv));
        return false;
    }
    int64_t now = goblin__now_ms();
    goblin__node_lease_push(n, &(lease){.id = lid, .msg = mid, .job = j, .task = ti, .peer = pi,
                                        .deadline_ms = now + n->p.lease_ms});
    p->n_leases++;
    task *tk = &j->tasks[ti];
    tk->state = T_LEASED;
    tk->n_leases++;
    if (!speculative) tk->leased_at_ms = now;
    p->wanted--;
    p->issued++;
    n->st.tasks_issued++;
    if (speculative) n->st.tasks_speculative++;
    if (j->kind == JOB_GRAPH && tk->holder) n->st.replicas_issued++;
    goblin__node_decide_replication(n, j, ti, pi);
    return true;
}
