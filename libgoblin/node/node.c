/* libgoblin/node/node.c - the node: parameters, goblin_node_new/start/stop/free, and the
 * loop (node_main) that owns the socket: messages, housekeeping (pipe events, lease
 * deadlines, heartbeats), scheduling and checks prepared ahead, once per turn. The rest
 * of the node is one file per responsibility: see node_impl.h. */
#include "node_impl.h"
#include "proto/part.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "goblin/tls.h"
#include "net/transport.h"

#define HOUSEKEEPING_MS 2 /* node_main: lease deadlines and pipe events checked this often */
#define PEER_SWEEP_MS 20  /* and the peers' silence, handshakes and closes this often */
#define DRAIN_LAG_MAX_MS 30000 /* a backlog defers those deadlines by at most this */

/* ---- small helpers -------------------------------------------------------------- */

void goblin__node_log(goblin_node *n, goblin_log_level lvl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    goblin__logv(n->p.log, n->p.log_user, n->p.log_level, lvl, fmt, ap);
    va_end(ap);
}

/* Why the last submit on this thread was refused (goblin_node_submit_error). */
static _Thread_local char submit_why[512];

void goblin__node_submit_begin(void) { submit_why[0] = 0; }

void goblin__node_refuse(goblin_node *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(submit_why, sizeof submit_why, fmt, ap);
    va_end(ap);
    goblin__node_log(n, GOBLIN_LOG_ERROR, "%s", submit_why);
}

const char *goblin_node_submit_error(void) { return submit_why; }

bool goblin__node_grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return true;
    int64_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *p = goblin__alloc((size_t)nc * elem);
    if (!p) return false;
    if (*arr) memcpy(p, *arr, (size_t)*cap * elem);
    goblin__free(*arr);
    *arr = p;
    *cap = nc;
    return true;
}

/* ---- params --------------------------------------------------------------------- */

/* Logging before a node exists (parameter checks in goblin_node_new). */
static void plog(const goblin_node_params *p, goblin_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void plog(const goblin_node_params *p, goblin_log_level lvl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    goblin__logv(p->log, p->log_user, p->log_level, lvl, fmt, ap);
    va_end(ap);
}

void goblin_node_params_default(goblin_node_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->lease_ms = 30000;
    p->max_retries = 4;
    p->verify = GOBLIN_VERIFY_FREIVALDS;
    p->freivalds_vectors = 4;
    p->verify_threads = 2;
    p->recv_max_bytes = (uint64_t)1 << 30;
    p->max_buffered_bytes = (uint64_t)4 << 30;
    p->recompute_backend =
        goblin_backend_available(GOBLIN_BACKEND_BLIS) == GOBLIN_OK ? GOBLIN_BACKEND_BLIS
                                                                   : GOBLIN_BACKEND_REF;
    p->recompute_threads = 0;
    p->speculate = true;
    p->log_level = GOBLIN_LOG_INFO;
    p->heartbeat_ms = 5000;
    p->max_pending_connections = 256;
    p->probation_results = 16;
    p->audit_rate = 0.02;
}

/* What goblin_node_new made before it failed (its copies, the identity tables). */
static void free_made(goblin_node *n) {
    goblin__node_identity_free(n);
    goblin__node_origin_free(n);
    for (int32_t i = 0; i < GOBLIN_NODE_MAX_LISTEN; i++) goblin__free(n->urls[i]);
    goblin__free(n->cert_file);
    goblin__free(n->key_file);
    goblin__free(n->token_file);
    goblin__free(n->quarantine_file);
    goblin__free(n->allow_file);
    goblin__free(n->owners_file);
    goblin__free(n->token);
    goblin__free(n);
}

goblin_err goblin_node_new(goblin_node **out, const goblin_node_params *p) {
    if (!out || !p) return GOBLIN_EINVAL;
    if (p->n_listen < 1 || p->n_listen > GOBLIN_NODE_MAX_LISTEN || p->lease_ms < 1 ||
        p->max_retries < 0 || (p->verify != GOBLIN_VERIFY_FREIVALDS && p->verify != GOBLIN_VERIFY_RECOMPUTE &&
         p->verify != GOBLIN_VERIFY_UNSAFE_NONE) ||
        p->freivalds_vectors < 1 || p->freivalds_vectors > GOBLIN_FREIVALDS_MAX_VECTORS ||
        p->verify_threads < 1 || p->verify_threads > 2 || p->max_pending_connections < 1 ||
        p->recv_max_bytes < GOBLIN_WIRE_HEADER_SIZE ||
        p->recv_max_bytes > GOBLIN_WIRE_MAX_MESSAGE_BYTES ||
        (unsigned)p->recompute_backend >= GOBLIN_BACKEND_COUNT ||
        p->token_len > GOBLIN_WIRE_MAX_TOKEN_BYTES || (p->token_len && !p->join_token) ||
        p->probation_results < 0 || !(p->audit_rate >= 0.0 && p->audit_rate <= 1.0))
        return GOBLIN_EINVAL;
    for (int32_t i = 0; i < p->n_listen; i++)
        if (!p->listen[i] || !p->listen[i][0]) return GOBLIN_EINVAL;
    for (int32_t i = 0; i < p->n_listen; i++) {
        const char *u = p->listen[i];
        /* Worker traffic (tasks, panels, results, join tokens) must not cross a
         * network in clear unless the caller says so explicitly. */
        if (goblin__transport_url_is_plain_tcp(u) && !goblin__transport_url_is_local(u) &&
            !p->insecure_plaintext) {
            plog(p, GOBLIN_LOG_ERROR,
                         "refusing to listen on %s in plain text: it is not a loopback address; "
                         "use tls+tcp:// with a certificate and key, or set insecure_plaintext", u);
            return GOBLIN_EINVAL;
        }
        if (goblin__transport_url_is_tls(u) && (!p->cert_file || !p->key_file)) {
            plog(p, GOBLIN_LOG_ERROR,
                         "cannot listen on %s: TLS needs cert_file and key_file", u);
            return GOBLIN_EINVAL;
        }
    }
    if (p->token_file) {
        /* A well-formed file answers EAUTH for a token it does not hold. */
        char why[256] = "";
        goblin_err te = goblin__token_check_file(p->token_file, "-", why, sizeof why);
        if (te != GOBLIN_EAUTH && te != GOBLIN_OK) {
            plog(p, GOBLIN_LOG_ERROR, "the token file %s cannot be used (%s): %s", p->token_file,
                 goblin_err_name(te), why);
            return GOBLIN_EINVAL;
        }
    }
    goblin_node *n = goblin__calloc(1, sizeof *n);
    if (!n) return GOBLIN_ENOMEM;
    n->p = *p;
    n->wake_rd = n->wake_wr = -1;
    for (int32_t i = 0; i < p->n_listen; i++) {
        n->urls[i] = goblin__strdup(p->listen[i]);
        if (!n->urls[i]) goto nomem;
        n->p.listen[i] = n->urls[i];
    }
    n->p.cert_file = n->p.key_file = n->p.token_file = NULL;
    n->p.quarantine_file = n->p.allow_identities_file = n->p.owners_file = NULL;
    if ((p->cert_file && !(n->cert_file = goblin__strdup(p->cert_file))) ||
        (p->key_file && !(n->key_file = goblin__strdup(p->key_file))) ||
        (p->token_file && !(n->token_file = goblin__strdup(p->token_file))) ||
        (p->quarantine_file && !(n->quarantine_file = goblin__strdup(p->quarantine_file))) ||
        (p->allow_identities_file && !(n->allow_file = goblin__strdup(p->allow_identities_file))) ||
        (p->owners_file && !(n->owners_file = goblin__strdup(p->owners_file))))
        goto nomem;
    n->p.quarantine_file = n->quarantine_file;
    n->p.allow_identities_file = n->allow_file;
    n->p.owners_file = n->owners_file;
    {
        char why[512] = "";
        goblin_err ie = goblin__node_identity_load(n, why, sizeof why);
        if (ie) {
            plog(p, GOBLIN_LOG_ERROR, "worker identities: %s", why);
            free_made(n);
            return ie;
        }
    }
    n->p.token_file = n->token_file;
    n->p.cert_file = n->cert_file;
    n->p.key_file = n->key_file;
    if (p->token_len) {
        n->token = goblin__memdup(p->join_token, p->token_len);
        if (!n->token) goto nomem;
        n->p.join_token = n->token;
    } else {
        n->p.join_token = NULL;
    }
    pthread_mutex_init(&n->mu, NULL);
    pthread_mutex_init(&n->ev_mu, NULL);
    pthread_mutex_init(&n->ser_mu, NULL);
    goblin__hoist_memo_init(&n->hoist);
    goblin__wire_limits_default(&n->limits);
    n->limits.max_message_bytes = p->recv_max_bytes;
    n->next_lease_id = 1;
    n->bpeer = -1;
    n->next_job_id = 1;
    int wp[2];
    if (pipe(wp) == 0) { /* without it the node still works, waking every 10 ms */
        fcntl(wp[0], F_SETFL, fcntl(wp[0], F_GETFL) | O_NONBLOCK);
        fcntl(wp[1], F_SETFL, fcntl(wp[1], F_GETFL) | O_NONBLOCK);
        fcntl(wp[0], F_SETFD, FD_CLOEXEC);
        fcntl(wp[1], F_SETFD, FD_CLOEXEC);
        n->wake_rd = wp[0];
        n->wake_wr = wp[1];
    }
    *out = n;
    return GOBLIN_OK;
nomem:
    free_made(n);
    return GOBLIN_ENOMEM;
}

/* ---- the loop: pipe events, housekeeping, wake-ups ------------------------------ */

static void pipe_cb(nng_pipe pp, nng_pipe_ev ev, void *arg) {
    goblin_node *n = arg;
    if (ev == NNG_PIPE_EV_ADD_PRE) {
        if (goblin__guard_pipe_added(n->guard, pp)) return; /* its probe: nng rejects it */
        goblin__node_pipe_added(n, pp);
        goblin__guard_pipe_done(n->guard);
        return;
    }
    if (ev == NNG_PIPE_EV_ADD_POST) {
        goblin__node_hub_pipe(n, pp, true); /* a data connection to a hub: its ATTACH */
        return;
    }
    if (ev != NNG_PIPE_EV_REM_POST) return;
    goblin__node_hub_pipe(n, pp, false);
    goblin__node_pipe_forget(n, nng_pipe_id(pp));
    goblin__node_client_pipe_removed(n, nng_pipe_id(pp));
    pthread_mutex_lock(&n->ev_mu);
    int64_t cap = n->cap_ev;
    if (goblin__node_grow((void **)&n->ev_removed, &cap, n->n_ev + 1, sizeof(uint32_t))) {
        n->cap_ev = (int32_t)cap;
        n->ev_removed[n->n_ev++] = nng_pipe_id(pp);
    }
    pthread_mutex_unlock(&n->ev_mu);
}

#define HANDSHAKE_MS 15000 /* the least time from a peer's first message to its PROOF */

/* True when it swept all the peers (every PEER_SWEEP_MS). */
static bool housekeeping(goblin_node *n) {
    pthread_mutex_lock(&n->ev_mu);
    int32_t ne = n->n_ev;
    uint32_t ev[64];
    if (ne > 64) ne = 64;
    if (ne > 0) {
        memcpy(ev, n->ev_removed, (size_t)ne * sizeof(uint32_t));
        memmove(n->ev_removed, n->ev_removed + ne, (size_t)(n->n_ev - ne) * sizeof(uint32_t));
        n->n_ev -= ne;
    }
    pthread_mutex_unlock(&n->ev_mu);
    for (int32_t k = 0; k < ne; k++) {
        int32_t pi = goblin__node_find_peer(n, ev[k]);
        if (pi < 0) continue;
        peer *p = &n->peers[pi];
        if (p->hello && p->counted) {
            n->st.workers_connected--;
            p->counted = false;
            goblin__node_log(n, GOBLIN_LOG_INFO, "worker %llu disconnected", (unsigned long long)p->session_id);
        }
        goblin__node_peer_gone(n, pi);
        goblin__node_fail_peer_leases(n, pi, true, GOBLIN_ECLOSED, "worker disconnected");
    }
    int64_t now = goblin__now_ms();
    /* Expired leases: the table is scanned only once the earliest deadline passed
     * (with thousands of leases out, a scan every HOUSEKEEPING_MS cost more than the
     * results). */
    if (n->lease_deadline_min && now >= n->lease_deadline_min) {
        for (int64_t i = n->n_leases - 1; i >= 0; i--) {
            if (i >= n->n_leases || n->leases[i].deadline_ms > now) continue;
            lease *L = &n->leases[i];
            if (!L->moot)
                goblin__node_log(n, GOBLIN_LOG_INFO, "lease %llu (task %lld) expired", (unsigned long long)L->id,
                                 (long long)L->task);
            goblin__node_lease_failed(n, i, true, GOBLIN_ETIMEDOUT, "lease expired");
        }
        int64_t m = 0;
        for (int64_t i = 0; i < n->n_leases; i++)
            if (!m || n->leases[i].deadline_ms < m) m = n->leases[i].deadline_ms;
        n->lease_deadline_min = m;
    }
    /* Time the node's own loop was busy (a long recomputation) does not count as a
     * worker's silence: its HEARTBEATs may be waiting in the socket. */
    int64_t gap = n->last_housekeeping_ms ? now - n->last_housekeeping_ms : 0;
    n->last_housekeeping_ms = now;
    if (gap > 200)
        for (int32_t i = 0; i < n->n_peers; i++) n->peers[i].last_heard_ms += gap;
    bool sweep = now - n->last_peer_sweep_ms >= PEER_SWEEP_MS;
    if (sweep) n->last_peer_sweep_ms = now;
    /* Deadlines that judge a peer's silence run at the time the node last caught up
     * with its socket (drained_ms), not now: a peer whose messages wait unread behind a
     * backlog has not been silent. When nothing is waiting, that is now. The lag counts
     * for at most DRAIN_LAG_MAX_MS: a peer flooding the node so that its socket is never
     * empty must not keep silent connections (and pending slots) alive for good. */
    int64_t heard_by = !n->drained_ms ? now
                       : now - n->drained_ms > DRAIN_LAG_MAX_MS ? now - DRAIN_LAG_MAX_MS : n->drained_ms;
    if (sweep && n->p.heartbeat_ms) {
        int64_t silent = 3 * (int64_t)n->p.heartbeat_ms;
        for (int32_t i = 0; i < n->n_peers; i++) {
            peer *p = &n->peers[i];
            if (!p->connected || !p->hello || p->close_at_ms || heard_by - p->last_heard_ms <= silent) continue;
            char why[96];
            snprintf(why, sizeof why, "silent for %lld ms (heartbeat %u ms)", (long long)(now - p->last_heard_ms),
                     (unsigned)n->p.heartbeat_ms);
            goblin__node_drop_peer(n, i, why);
        }
    }
    goblin__transport_close_dropped();
    goblin__node_intro_expire(n, now);
    /* A connection that has not said who it is holds a slot: it gets HANDSHAKE_MS, or a
     * worker's allowed silence if longer. */
    int64_t grace = 3 * (int64_t)n->p.heartbeat_ms > HANDSHAKE_MS ? 3 * (int64_t)n->p.heartbeat_ms : HANDSHAKE_MS;
    goblin__node_pending_sweep(n, heard_by, grace);
    for (int32_t i = 0; sweep && i < n->n_peers; i++) {
        peer *p = &n->peers[i];
        if (p->connected && !p->hello && !p->close_at_ms && p->last_heard_ms && heard_by - p->last_heard_ms > grace)
            goblin__node_drop_peer(n, i, "no identity proof after HELLO");
        if (p->connected && p->close_at_ms && p->close_at_ms <= now) {
            nng_pipe pp = p->pipe;
            goblin__node_peer_gone(n, i);
            goblin__transport_pipe_close(pp);
        }
    }
    goblin__node_reap_peers(n);
    return sweep;
}

/* Wake node_main now (callable from any thread). */
void goblin__node_wake(goblin_node *n) {
    if (n->wake_wr >= 0) {
        char one = 1;
        ssize_t w = write(n->wake_wr, &one, 1); /* a full pipe is as good as a byte */
        (void)w;
    }
}

static void *node_main(void *arg) {
    goblin_node *n = arg;
    /* Wait for a message with poll() on the socket's receive descriptor, at most 10 ms
     * (new jobs, lease deadlines): a timed nng receive puts an aio on nng 1.5's expiry
     * list, whose thread spins up to a millisecond each time one expires (7 % of a core
     * at 100 timeouts a second, measured). */
    int rfd = -1;
    for (;;) {
        pthread_mutex_lock(&n->mu);
        bool stop = n->stopping;
        pthread_mutex_unlock(&n->mu);
        if (stop) break;
        nng_msg *msg = NULL;
        bool empty = false;
        int rv = goblin__transport_recv_or_wake(n->sock, &rfd, n->wake_rd, &msg, 10, &empty);
        pthread_mutex_lock(&n->mu);
        if (empty) n->drained_ms = goblin__now_ms(); /* before the message it waited for is handled */
        if (rv == 0) {
            bool taken = false;
            if (!goblin__node_client_msg(n, msg, &taken)) goblin__node_handle_msg(n, msg);
            if (!taken) nng_msg_free(msg);
        }
        /* Housekeeping (pipe events, lease deadlines, heartbeats: O(leases + workers))
         * every HOUSEKEEPING_MS rather than after every message; its deadlines are
         * in ms anyway. A removed pipe is seen at once. */
        pthread_mutex_lock(&n->ev_mu);
        bool ev = n->n_ev > 0;
        pthread_mutex_unlock(&n->ev_mu);
        bool tick = ev || rv != 0 || goblin__now_ms() - n->last_housekeeping_ms >= HOUSEKEEPING_MS;
        bool swept = tick && housekeeping(n);
        goblin__node_schedule(n, swept || ev || n->sched_all);
        n->sched_all = false;
        goblin__node_prepare_ahead(n);
        goblin__node_spot_prepare(n);
        pthread_mutex_unlock(&n->mu);
        if (rv && rv != NNG_ETIMEDOUT && rv != NNG_EAGAIN) {
            if (rv == NNG_ECLOSED) break;
        }
    }
    return NULL;
}

/* ---- start, stop, free ---------------------------------------------------------- */

static void guard_log(void *user, bool error, const char *line) {
    goblin__node_log(user, error ? GOBLIN_LOG_ERROR : GOBLIN_LOG_WARN, "%s", line);
}

/* The guard stops before the socket closes (it listens on it) and goes after (no
 * ADD_PRE asks it any more). */
static void close_socket(goblin_node *n) {
    goblin__guard_stop(n->guard);
    nng_close(n->sock);
    goblin__guard_free(n->guard);
    n->guard = NULL;
}

goblin_err goblin_node_start(goblin_node *n) {
    if (!n) return GOBLIN_EINVAL;
    if (n->started) return GOBLIN_ESTATE;
    char msg[256];
    /* Nothing over a part gets in (proto/part.h); larger messages are reassembled for
     * workers that proved who they are (peer.c). */
    uint64_t wire_max = n->p.recv_max_bytes < GOBLIN__PART_WIRE_MAX ? n->p.recv_max_bytes
                                                                    : GOBLIN__PART_WIRE_MAX;
    goblin_err e = goblin__transport_open_node(&n->sock, wire_max, msg, sizeof msg);
    if (e) {
        goblin__node_log(n, GOBLIN_LOG_ERROR, "%s", msg);
        return e;
    }
    nng_socket_set_ms(n->sock, NNG_OPT_RECVTIMEO, 10);
    nng_socket_set_ms(n->sock, NNG_OPT_SENDTIMEO, 2000);
    nng_pipe_notify(n->sock, NNG_PIPE_EV_ADD_PRE, pipe_cb, n);
    nng_pipe_notify(n->sock, NNG_PIPE_EV_REM_POST, pipe_cb, n);
    nng_pipe_notify(n->sock, NNG_PIPE_EV_ADD_POST, pipe_cb, n);
    if ((e = goblin__guard_new(&n->guard, n->sock, guard_log, n)) != GOBLIN_OK) {
        nng_close(n->sock);
        return e;
    }
    for (int32_t i = 0; i < n->p.n_listen; i++) {
        if ((e = goblin__guard_listen(n->guard, n->p.listen[i], n->p.cert_file, n->p.key_file,
                                      msg, sizeof msg)) != GOBLIN_OK) {
            goblin__node_log(n, GOBLIN_LOG_ERROR, "%s", msg);
            close_socket(n);
            return e;
        }
        goblin__node_log(n, GOBLIN_LOG_INFO, "listening on %s", n->p.listen[i]);
        if (!n->share && strncmp(n->p.listen[i], "inproc://", 9) == 0)
            n->share = goblin__share_publish(n->p.listen[i]); /* NULL: panels are copied */
    }
    n->socket_open = true;
    if (goblin__guard_start(n->guard) != GOBLIN_OK ||
        pthread_create(&n->thread, NULL, node_main, n) != 0) {
        close_socket(n);
        n->socket_open = false;
        return GOBLIN_ENOMEM;
    }
    n->started_ms = goblin__now_ms();
    n->started = true;
    return GOBLIN_OK;
}

void goblin_node_stop(goblin_node *n) {
    if (!n || !n->started) return;
    goblin__node_status_stop(n);
    pthread_mutex_lock(&n->mu);
    n->stopping = true;
    pthread_mutex_unlock(&n->mu);
    goblin__node_wake(n);
    pthread_join(n->thread, NULL);
    goblin__node_hub_stop(n); /* its dialers are on the node's socket */
    goblin__node_attach_clients(n, NULL, NULL); /* its gateway's sends now fail: closed */
    close_socket(n);
    n->socket_open = false;
    n->started = false;
    pthread_mutex_lock(&n->mu);
    for (int32_t k = 0; k < n->n_jobs; k++)
        if (n->jobs[k]->running)
            goblin__node_job_finish(n->jobs[k], GOBLIN_JOB_CANCELED, GOBLIN_ECANCELED, "the node stopped");
    goblin__node_leases_clear(n);
    pthread_mutex_unlock(&n->mu);
}

void goblin_node_free(goblin_node *n) {
    if (!n) return;
    goblin_node_stop(n);
    goblin__node_status_stop(n);
    goblin__node_hub_free(n);
    for (int32_t k = 0; k < n->n_jobs; k++) n->jobs[k]->node = NULL;
    for (int32_t i = 0; i < GOBLIN_NODE_MAX_LISTEN; i++) goblin__free(n->urls[i]);
    goblin__free(n->token);
    goblin__free(n->cert_file);
    goblin__free(n->key_file);
    goblin__free(n->token_file);
    goblin__free(n->quarantine_file);
    goblin__free(n->allow_file);
    goblin__free(n->owners_file);
    goblin__node_peers_free(n);
    goblin__node_identity_free(n);
    goblin__node_origin_free(n);
    goblin__free(n->leases);
    goblin__free(n->lidx);
    goblin__free(n->ready);
    goblin__free(n->jobs);
    goblin__free(n->ev_removed);
    goblin__free(n->pending);
    goblin__free(n->intros);
    for (int32_t k = 0; k < 2; k++) {
        goblin_graph_free(n->ser[k].g);
        goblin_buffer_free(n->ser[k].buf);
    }
    if (n->wake_rd >= 0) close(n->wake_rd);
    if (n->wake_wr >= 0) close(n->wake_wr);
    pthread_mutex_destroy(&n->mu);
    pthread_mutex_destroy(&n->ev_mu);
    pthread_mutex_destroy(&n->ser_mu);
    goblin__hoist_memo_fini(&n->hoist);
    goblin__share_unpublish(n->share);
    goblin__free(n);
}
