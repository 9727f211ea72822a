/* libgoblin/worker/worker.c - a worker: dials a node, says HELLO, computes leased tasks.
 * This file holds its params, its life cycle, the connection and the loop; what it
 * keeps for reuse is in worker_cache.c, one task's computation in worker_task.c and
 * fault injection in misbehave.c (their shared state: worker_impl.h).
 *
 * One loop in the caller's thread receives a message (no timeout: stop and pipe
 * events wake it), computes a TASK to completion and sends its RESULT followed by a
 * LEASE_REQUEST for one more task (for tiny tasks, a batch now and then: lease_topup).
 * With slots > 1 the node keeps further tasks queued in the socket, so the next
 * task's transfer overlaps this one's computation. Task data lives in memory only.
 *
 * Batches (protocol 1.1): the worker offers GOBLIN_WIRE_CAP_BATCH in its HELLO; a node
 * that takes them says so in HELLO_ACK and may then send several small TASKs in one
 * nng message. They run in order, and their RESULTs, ERRORs and LEASE_REQUESTs go back
 * together in one nng message (the loop's out-batch, w->ob) once the last has run. */
#include "worker_impl.h"

#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "proto/part.h"

void goblin_worker_params_default(goblin_worker_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->backend = goblin_backend_available(GOBLIN_BACKEND_BLIS) == GOBLIN_OK ? GOBLIN_BACKEND_BLIS
                                                                            : GOBLIN_BACKEND_REF;
    p->threads = 0;
    p->memory_bytes = (uint64_t)1 << 30;
    p->cache_bytes = p->memory_bytes / 4;
    p->cache_idle_ms = 30000;
    p->slots = 2;
    p->reconnect_min_ms = 100;
    p->reconnect_max_ms = 5000;
    p->recv_max_bytes = ((uint64_t)1 << 30) + ((uint64_t)1 << 20);
    p->log_level = GOBLIN_LOG_INFO;
}

void goblin__worker_log(goblin_worker *w, goblin_log_level lvl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    goblin__logv(w->p.log, w->p.log_user, w->p.log_level, lvl, fmt, ap);
    va_end(ap);
}

goblin_err goblin_worker_new(goblin_worker **out, const goblin_worker_params *p) {
    if (!out || !p) return GOBLIN_EINVAL;
    if (p->n_connect < 1 || p->n_connect > GOBLIN_WORKER_MAX_CONNECT || p->slots < 1 ||
        p->slots > GOBLIN_WIRE_MAX_SLOTS || (unsigned)p->backend >= GOBLIN_BACKEND_COUNT ||
        p->threads < 0 || p->memory_bytes == 0 ||
        p->token_len > GOBLIN_WIRE_MAX_TOKEN_BYTES || (p->token_len && !p->join_token) ||
        p->recv_max_bytes < GOBLIN_WIRE_HEADER_SIZE || p->recv_max_bytes > GOBLIN_WIRE_MAX_MESSAGE_BYTES ||
        (p->tls_ca_file && p->tls_fingerprint))
        return GOBLIN_EINVAL;
    for (int32_t i = 0; i < p->n_connect; i++)
        if (!p->connect[i] || !p->connect[i][0]) return GOBLIN_EINVAL;
    goblin_worker *w = goblin__calloc(1, sizeof *w);
    if (!w) return GOBLIN_ENOMEM;
    w->p = *p;
    w->free_slot = w->mru = w->lru = -1;
    for (int32_t i = 0; i < p->n_connect; i++) {
        if (!(w->urls[i] = goblin__strdup(p->connect[i]))) goto nomem;
        w->p.connect[i] = w->urls[i];
    }
    w->p.tls_ca_file = w->p.tls_fingerprint = w->p.tls_server_name = NULL;
    if ((p->tls_ca_file && !(w->tls_ca = goblin__strdup(p->tls_ca_file))) ||
        (p->tls_fingerprint && !(w->tls_fp = goblin__strdup(p->tls_fingerprint))) ||
        (p->tls_server_name && !(w->tls_name = goblin__strdup(p->tls_server_name))))
        goto nomem;
    w->p.config_dir = NULL;
    if (p->config_dir && !(w->config_dir = goblin__strdup(p->config_dir))) goto nomem;
    w->p.config_dir = w->config_dir;
    w->p.tls_ca_file = w->tls_ca;
    w->p.tls_fingerprint = w->tls_fp;
    w->p.tls_server_name = w->tls_name;
    w->p.join_token = NULL;
    if (p->token_len) {
        if (!(w->token = goblin__memdup(p->join_token, p->token_len))) goto nomem;
        w->p.join_token = w->token;
    }
    {
        char kmsg[512] = "";
        bool created = false;
        goblin_err ke = w->config_dir ? goblin__wkey_load_or_create(w->config_dir, &w->key, &created, kmsg, sizeof kmsg)
                                      : goblin__wkey_ephemeral(&w->key, kmsg, sizeof kmsg);
        if (ke) {
            goblin__worker_log(w, GOBLIN_LOG_ERROR, "worker identity: %s", kmsg);
            goblin__free(w->config_dir);
            for (int32_t i = 0; i < GOBLIN_WORKER_MAX_CONNECT; i++) goblin__free(w->urls[i]);
            goblin__free(w->tls_ca);
            goblin__free(w->tls_fp);
            goblin__free(w->tls_name);
            goblin__free(w->token);
            goblin__free(w);
            return ke;
        }
        if (created)
            goblin__worker_log(w, GOBLIN_LOG_INFO, "made a new worker identity %s in %s",
                               goblin__wkey_fingerprint(w->key), w->config_dir);
    }
    goblin__wire_limits_default(&w->limits);
    w->limits.max_message_bytes = p->recv_max_bytes;
    goblin__worker_misbehave_init(w);
    pthread_mutex_init(&w->st_mu, NULL);
    pthread_mutex_init(&w->part_mu, NULL);
    w->inproc_only = true;
    for (int32_t i = 0; i < p->n_connect; i++)
        w->inproc_only = w->inproc_only && strncmp(p->connect[i], "inproc://", 9) == 0;
    pthread_mutex_init(&w->rx_mu, NULL);
    pthread_mutex_init(&w->tx_mu, NULL);
    w->send_fd = -1;
    pthread_mutex_init(&w->hb_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->hb_cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = w;
    return GOBLIN_OK;
nomem:
    goblin__free(w->config_dir);
    goblin__free(w->token);
    for (int32_t i = 0; i < GOBLIN_WORKER_MAX_CONNECT; i++) goblin__free(w->urls[i]);
    goblin__free(w->tls_ca);
    goblin__free(w->tls_fp);
    goblin__free(w->tls_name);
    goblin__free(w);
    return GOBLIN_ENOMEM;
}

/* Wake the loop out of its receive (it then looks at stop and the pipe events). */
static void rx_wake(goblin_worker *w) {
    pthread_mutex_lock(&w->rx_mu);
    if (w->rx) nng_aio_abort(w->rx, NNG_ECANCELED);
    pthread_mutex_unlock(&w->rx_mu);
}

static void hb_wake(goblin_worker *w) {
    pthread_mutex_lock(&w->hb_mu);
    pthread_cond_broadcast(&w->hb_cv);
    pthread_mutex_unlock(&w->hb_mu);
}

void goblin_worker_stop(goblin_worker *w) {
    if (!w) return;
    atomic_store(&w->stop, true);
    rx_wake(w);
}

void goblin_worker_free(goblin_worker *w) {
    if (!w) return;
    goblin__worker_cache_clear(w);
    goblin__free(w->cache);
    goblin__free(w->cache_ix);
    goblin__worker_kept_free(&w->first);
    goblin__worker_kept_free(&w->prev);
    goblin__share_release(w->share);
    for (int32_t i = 0; i < GOBLIN_WORKER_MAX_CONNECT; i++) goblin__free(w->urls[i]);
    goblin__free(w->tls_ca);
    goblin__free(w->tls_fp);
    goblin__free(w->tls_name);
    goblin__free(w->token);
    goblin__free(w->config_dir);
    goblin__wkey_free(w->key);
    pthread_mutex_destroy(&w->st_mu);
    pthread_mutex_destroy(&w->part_mu);
    pthread_mutex_destroy(&w->rx_mu);
    pthread_mutex_destroy(&w->tx_mu);
    pthread_mutex_destroy(&w->hb_mu);
    pthread_cond_destroy(&w->hb_cv);
    goblin__free(w);
}

void goblin_worker_stats_get(goblin_worker *w, goblin_worker_stats *out) {
    if (!w || !out) return;
    pthread_mutex_lock(&w->st_mu);
    *out = w->st;
    pthread_mutex_unlock(&w->st_mu);
}

/* ---- sending ------------------------------------------------------------------------ */

static int wencode(const goblin__wire_msg *m, nng_msg **out) {
    size_t len = 0;
    if (goblin__wire_encoded_size(m, &len)) return NNG_EINVAL;
    nng_msg *msg;
    int rv = nng_msg_alloc(&msg, len);
    if (rv) return rv;
    size_t wrote;
    if (goblin__wire_encode_into(m, nng_msg_body(msg), len, &wrote)) {
        nng_msg_free(msg);
        return NNG_EINVAL;
    }
    *out = msg;
    return 0;
}

/* How long a send waits for the socket to take it (the former NNG_OPT_SENDTIMEO). */
#define SEND_WAIT_MS 2000

/* Send one nng message (taken; any thread) on the live connection: @p hs non-zero for
 * the handshake (HELLO, PROOF) on link @p hs, which may not have joined yet; 0 for
 * everything else, which needs a joined link. The check and the send are one step
 * under tx_mu, and the send never waits inside nng (NONBLOCK): a message refused
 * because the socket is busy is tried again once it can take one, and one whose link
 * has ended is dropped, never kept for the next connection. */
static int send_one(goblin_worker *w, nng_msg *msg, uint32_t hs) {
    int64_t deadline = goblin__now_ms() + SEND_WAIT_MS;
    for (;;) {
        pthread_mutex_lock(&w->tx_mu);
        bool ok = hs ? w->link == hs : w->joined;
        int rv = ok ? nng_sendmsg(w->sock, msg, NNG_FLAG_NONBLOCK) : NNG_ECLOSED;
        pthread_mutex_unlock(&w->tx_mu);
        if (rv == 0) return 0;
        int64_t left = deadline - goblin__now_ms();
        if (rv != NNG_EAGAIN || left <= 0) {
            nng_msg_free(msg);
            if (!ok) BUMP(w, stale_dropped);
            return rv == NNG_EAGAIN ? NNG_ETIMEDOUT : rv;
        }
        /* Wait until the socket can take a message (or 50 ms: the link may end). */
        if (w->send_fd >= 0) {
            struct pollfd pf = {.fd = w->send_fd, .events = POLLIN};
            poll(&pf, 1, left < 50 ? (int)left : 50);
        } else {
            usleep(1000);
        }
    }
}

/* Send @p msg (taken; any thread; @p hs as for send_one): as it is, or, over
 * GOBLIN__PART_MAX bytes, in parts (proto/part.h: the node's socket takes nothing
 * larger). */
static int send_taken_on(goblin_worker *w, nng_msg *msg, uint32_t hs) {
    size_t len = nng_msg_len(msg);
    if (len <= GOBLIN__PART_MAX || w->inproc_only) return send_one(w, msg, hs);
    const uint8_t *body = nng_msg_body(msg);
    int rv = 0;
    pthread_mutex_lock(&w->part_mu);
    for (size_t off = 0; off < len && !rv; off += GOBLIN__PART_MAX) {
        size_t n = len - off < GOBLIN__PART_MAX ? len - off : GOBLIN__PART_MAX;
        nng_msg *part;
        if ((rv = nng_msg_alloc(&part, GOBLIN__PART_HEADER + n)) != 0) break;
        uint8_t *pb = nng_msg_body(part);
        goblin__part_header(pb, len, off, n);
        memcpy(pb + GOBLIN__PART_HEADER, body + off, n);
        rv = send_one(w, part, hs);
    }
    pthread_mutex_unlock(&w->part_mu);
    nng_msg_free(msg);
    return rv;
}

/* Send @p msg (taken; any thread) on the joined link. */
static int send_taken(goblin_worker *w, nng_msg *msg) { return send_taken_on(w, msg, 0); }

/* Send now (any thread). */
static int wsend(goblin_worker *w, const goblin__wire_msg *m) {
    nng_msg *msg = NULL;
    int rv = wencode(m, &msg);
    return rv ? rv : send_taken(w, msg);
}

/* The out-batch goes to the node (loop thread). */
static int ob_flush(goblin_worker *w) {
    nng_msg *ob = w->ob;
    w->ob = NULL;
    if (!ob) return 0;
    int rv = send_taken(w, ob);
    if (rv) goblin__worker_log(w, GOBLIN_LOG_WARN, "cannot send results: %s", nng_strerror(rv));
    return rv;
}

/* The out-batch stays under this many bytes (a message over it goes alone). */
#define OB_MAX_BYTES ((size_t)4 << 20)

/* Send @p msg (taken) from the loop thread: appended to the out-batch while one is
 * being collected, else at once. */
int goblin__worker_out(goblin_worker *w, nng_msg *msg) {
    if (!w->ob_on) return send_taken(w, msg);
    size_t cap = w->node_max && w->node_max < OB_MAX_BYTES ? (size_t)w->node_max : OB_MAX_BYTES;
    size_t len = nng_msg_len(msg);
    if (w->ob) {
        size_t cur = nng_msg_len(w->ob);
        size_t at = cur + (GOBLIN_WIRE_BATCH_ALIGN - cur % GOBLIN_WIRE_BATCH_ALIGN) % GOBLIN_WIRE_BATCH_ALIGN;
        if (at + len <= cap && nng_msg_realloc(w->ob, at + len) == 0) {
            uint8_t *b = nng_msg_body(w->ob);
            memset(b + cur, 0, at - cur);
            memcpy(b + at, nng_msg_body(msg), len);
            nng_msg_free(msg);
            return 0;
        }
        ob_flush(w);
    }
    w->ob = msg;
    return 0;
}

/* Encode and send @p m from the loop thread (wout). */
int goblin__worker_lsend(goblin_worker *w, const goblin__wire_msg *m) {
    nng_msg *msg = NULL;
    int rv = wencode(m, &msg);
    return rv ? rv : goblin__worker_out(w, msg);
}

void goblin__worker_send_lease_request(goblin_worker *w, uint32_t slots) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_LEASE_REQUEST);
    m.body.lease_request.slots = slots;
    goblin__worker_lsend(w, &m);
}

void goblin__worker_send_error(goblin_worker *w, uint64_t task_id, goblin_err code, const char *text) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_ERROR);
    m.body.error.code = code;
    m.body.error.task_id = task_id;
    m.body.error.message = text;
    goblin__worker_lsend(w, &m);
}

/* The memory one task may take, as the worker advertises it: memory_bytes bounds all the
 * task data a worker holds (docs/runtime.md, "A worker's memory"): the inputs kept for
 * reuse (cache_bytes, counted up to half of it) and `slots` tasks in flight, one of them
 * computing (its inputs, intermediates and outputs: what the node's task measure
 * counts), the others arriving, plus the result being sent (at most one more task's
 * worth). */
uint64_t goblin__worker_task_budget(const goblin_worker_params *p) {
    uint64_t cache = p->cache_bytes < p->memory_bytes / 2 ? p->cache_bytes : p->memory_bytes / 2;
    uint64_t t = (p->memory_bytes - cache) / (uint64_t)(p->slots + 1);
    return t ? t : 1;
}

/* HELLO on link @p link (the first message of that connection). */
static void send_hello(goblin_worker *w, uint32_t link) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HELLO);
    unsigned cat = atomic_load(&w->catalog_override);
    if (cat) m.body.hello.catalog_version = cat;
    m.body.hello.backends = (1u << w->p.backend) | GOBLIN_WIRE_CAP_BATCH;
    /* Home (a hub, perhaps): offer to follow an introduction, unless the last one
     * failed; to the introduced node: its ticket stands for the token. */
    if (!w->direct_on && !w->no_intro_once) m.body.hello.backends |= GOBLIN_WIRE_CAP_INTRO;
    m.body.hello.threads = (uint32_t)(w->p.threads > 0 ? w->p.threads : 1);
    m.body.hello.memory_bytes = goblin__worker_task_budget(&w->p);
    m.body.hello.token_len = w->direct_on ? GOBLIN_WIRE_TICKET_BYTES : w->p.token_len;
    m.body.hello.token = w->direct_on ? w->ticket : w->p.join_token;
    nng_msg *msg = NULL;
    if (wencode(&m, &msg)) return;
    /* The PROOF signs this HELLO's bytes: an identity proof cannot be moved to another
     * HELLO (other token, other memory claims). */
    goblin__wkey_hash(nng_msg_body(msg), nng_msg_len(msg), w->hello_hash);
    pthread_mutex_lock(&w->tx_mu);
    w->hello_dialer = w->link == link ? w->link_dialer : -1;
    pthread_mutex_unlock(&w->tx_mu);
    int rv = send_taken_on(w, msg, link);
    if (rv) goblin__worker_log(w, GOBLIN_LOG_WARN, "could not send the HELLO: %s", nng_strerror(rv));
    w->hello_ms = goblin__now_ms();
}

/* CHALLENGE: sign the node's nonce, this connection's HELLO and the public key. */
static void send_proof(goblin_worker *w, const goblin__wire_challenge *c) {
    uint8_t digest[32], sig[GOBLIN__WKEY_SIG_MAX];
    size_t sl = 0;
    char msg[256];
    goblin_err e = goblin__wkey_proof_digest(c->nonce, w->hello_hash, goblin__wkey_public(w->key), digest);
    if (!e) e = goblin__wkey_sign(w->key, digest, sig, &sl, msg, sizeof msg);
    if (e) {
        goblin__worker_log(w, GOBLIN_LOG_ERROR, "cannot answer the node's challenge: %s", msg);
        return;
    }
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_PROOF);
    m.body.proof.key = goblin__wkey_public(w->key);
    m.body.proof.key_len = GOBLIN__WKEY_PUBLIC_BYTES;
    m.body.proof.sig = sig;
    m.body.proof.sig_len = (uint32_t)sl;
    nng_msg *pm = NULL;
    if (wencode(&m, &pm) == 0) send_taken_on(w, pm, w->hello_link);
}

const char *goblin_worker_identity(const goblin_worker *w) { return w ? goblin__wkey_fingerprint(w->key) : ""; }

/* ---- the loop ---------------------------------------------------------------------- */

/* Has the live link finished its handshake? */
static bool link_joined(goblin_worker *w) {
    pthread_mutex_lock(&w->tx_mu);
    bool j = w->link && w->joined;
    pthread_mutex_unlock(&w->tx_mu);
    return j;
}

/* The live link, or 0. */
static uint32_t cur_link(goblin_worker *w) {
    pthread_mutex_lock(&w->tx_mu);
    uint32_t l = w->link;
    pthread_mutex_unlock(&w->tx_mu);
    return l;
}

static void wpipe_cb(nng_pipe pp, nng_pipe_ev ev, void *arg) {
    goblin_worker *w = arg;
    uint32_t id = (uint32_t)nng_pipe_id(pp);
    if (ev == NNG_PIPE_EV_ADD_POST) {
        /* pair1 starts one pipe at a time, and a pipe's REM_POST comes before the next
         * one starts: a new link is never added while another is live. */
        pthread_mutex_lock(&w->tx_mu);
        w->link = id;
        w->joined = false;
        w->link_direct = w->direct_mode;
        w->link_dialer = nng_dialer_id(nng_pipe_dialer(pp));
        pthread_mutex_unlock(&w->tx_mu);
        atomic_fetch_add(&w->pipes_added, 1);
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        pthread_mutex_lock(&w->tx_mu);
        if (w->link == id) { /* from now on nothing is sent until the next link joins */
            if (w->link_direct) w->direct_lost = true;
            w->link = 0;
            w->joined = false;
            w->link_direct = false;
        }
        pthread_mutex_unlock(&w->tx_mu);
        atomic_store(&w->hb_ms, 0); /* no HEARTBEAT before the next HELLO */
        atomic_fetch_add(&w->pipes_removed, 1);
    } else {
        return;
    }
    rx_wake(w);
}

/* Sends a HEARTBEAT every hb_ms (as HELLO_ACK asked), also while the loop computes. */
/* It sleeps until the next HEARTBEAT is due (not in 10 ms steps: with hundreds of
 * workers in one process those wake-ups showed in the profile); HELLO_ACK and the end
 * of the loop wake it. */
static void *heartbeat_main(void *arg) {
    goblin_worker *w = arg;
    int64_t last = goblin__now_ms();
    pthread_mutex_lock(&w->hb_mu);
    while (!atomic_load(&w->hb_quit)) {
        unsigned hb = atomic_load(&w->hb_ms);
        int64_t now = goblin__now_ms();
        if (hb && now - last >= (int64_t)hb) {
            pthread_mutex_unlock(&w->hb_mu);
            goblin__wire_msg m;
            goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HEARTBEAT);
            wsend(w, &m);
            last = now;
            pthread_mutex_lock(&w->hb_mu);
            continue;
        }
        int64_t wait_ms = hb ? last + (int64_t)hb - now : 100;
        struct timespec ts = goblin__deadline_after_ms(wait_ms);
        pthread_cond_timedwait(&w->hb_cv, &w->hb_mu, &ts);
    }
    pthread_mutex_unlock(&w->hb_mu);
    return NULL;
}

static bool worker_stopping(void *user) {
    goblin_worker *w = user;
    return atomic_load(&w->stop);
}

/* A GPU worker without a usable device offers the CPU instead; with one, the memory
 * it advertises never exceeds 90% of what the device has free. */
static void choose_backend(goblin_worker *w) {
    if (w->p.backend != GOBLIN_BACKEND_CUDA) return;
    goblin_err ae = goblin_backend_available(GOBLIN_BACKEND_CUDA);
    if (ae) {
        goblin_backend_kind cpu = goblin_backend_available(GOBLIN_BACKEND_BLIS) == GOBLIN_OK
                                      ? GOBLIN_BACKEND_BLIS : GOBLIN_BACKEND_REF;
        goblin__worker_log(w, GOBLIN_LOG_WARN, "CUDA backend unavailable (%s: %s): offering the CPU (%s) only",
             goblin_err_name(ae), goblin_strerror(ae), goblin_backend_name(cpu));
        w->p.backend = cpu;
        return;
    }
    uint64_t free_b = 0, total_b = 0;
    if (goblin_backend_memory(GOBLIN_BACKEND_CUDA, &total_b, &free_b) == GOBLIN_OK && free_b > 0 &&
        w->p.memory_bytes > free_b / 10 * 9) {
        goblin__worker_log(w, GOBLIN_LOG_INFO, "memory budget lowered to 90%% of the GPU's free %llu bytes",
             (unsigned long long)free_b);
        w->p.memory_bytes = free_b / 10 * 9;
    }
}

/* ---- home and the introduced node --------------------------------------------- */

#define INTRO_WAIT_MS 5000 /* an introduced node's connection joins within this, or it is left */

/* Dial the configured addresses (home). GOBLIN_ECANCELED: stopped while waiting. */
static goblin_err dial_home(goblin_worker *w, char *msg, size_t cap) {
    w->n_home = 0;
    for (int32_t i = 0; i < w->p.n_connect; i++) {
        goblin__transport_trust trust = {.ca_file = w->p.tls_ca_file,
                                         .fingerprint = w->p.tls_fingerprint,
                                         .server_name = w->p.tls_server_name};
        goblin_err e = goblin__transport_dial(w->sock, w->p.connect[i], w->p.reconnect_min_ms, w->p.reconnect_max_ms,
                                              &trust, worker_stopping, w, msg, cap, &w->home[w->n_home]);
        if (e) {
            while (w->n_home > 0) nng_dialer_close(w->home[--w->n_home]);
            return e;
        }
        w->n_home++;
    }
    w->home_on = true;
    return GOBLIN_OK;
}

static bool intro_stopping(void *user) {
    goblin_worker *w = user;
    return atomic_load(&w->stop) || goblin__now_ms() - w->direct_since_ms > INTRO_WAIT_MS;
}

/* Back home from the introduced node (its connection ended, or never joined: @p failed;
 * the next HELLO home then asks the hub to relay). */
static goblin_err leave_direct(goblin_worker *w, bool failed, char *msg, size_t cap) {
    if (w->direct_on) nng_dialer_close(w->direct);
    pthread_mutex_lock(&w->tx_mu);
    w->direct_mode = w->direct_lost = false;
    pthread_mutex_unlock(&w->tx_mu);
    w->direct_on = w->direct_joined = false;
    memset(w->ticket, 0, sizeof w->ticket);
    if (failed) {
        w->no_intro_once = true;
        BUMP(w, introductions_failed);
        goblin__worker_log(w, GOBLIN_LOG_WARN, "the node the hub introduced (%s) did not take this worker; back to "
                           "the hub, to be relayed", w->direct_url);
    } else {
        goblin__worker_log(w, GOBLIN_LOG_INFO, "the connection to the introduced node ended; back to the hub");
    }
    return dial_home(w, msg, cap);
}

/* The hub's INTRODUCE was taken (w->ticket, direct_url, direct_fp): the home dialers
 * close (the hub's connection ends), the node's address is dialed with the ticket. */
static goblin_err go_direct(goblin_worker *w, char *msg, size_t cap) {
    w->intro_pending = false;
    for (int32_t i = 0; i < w->n_home; i++) nng_dialer_close(w->home[i]);
    w->n_home = 0;
    w->home_on = false;
    pthread_mutex_lock(&w->tx_mu);
    w->direct_mode = true;
    w->direct_lost = false;
    pthread_mutex_unlock(&w->tx_mu);
    w->direct_on = true;
    w->direct_joined = false;
    w->direct_since_ms = goblin__now_ms();
    BUMP(w, introductions);
    goblin__transport_trust trust = {.fingerprint = w->direct_fp[0] ? w->direct_fp : NULL};
    char why[512];
    goblin_err e = goblin__transport_dial(w->sock, w->direct_url, w->p.reconnect_min_ms, INTRO_WAIT_MS, &trust,
                                          intro_stopping, w, why, sizeof why, &w->direct);
    if (e) {
        w->direct_on = false; /* no dialer to close */
        goblin__worker_log(w, GOBLIN_LOG_WARN, "cannot dial the introduced node: %s", why);
        if (atomic_load(&w->stop)) return GOBLIN_ECANCELED;
        return leave_direct(w, true, msg, cap);
    }
    goblin__worker_log(w, GOBLIN_LOG_INFO, "the hub introduced this worker to %s: dialing it", w->direct_url);
    return GOBLIN_OK;
}

/* May a worker whose home is @p home follow an introduction to @p to? tls+tcp:// with a
 * fingerprint to pin, to a public address or a name, to a private address only from a
 * private or loopback home, to loopback only from a loopback home; plain tcp:// only
 * loopback to loopback (the hub, the node and the worker on one machine). Never to
 * link-local, multicast or other special ranges: an introduction must not make a
 * volunteer's machine dial services of its own or of its network (docs/hub.md). */
static bool may_follow(const char *home, const char *to, bool has_fp) {
    goblin__url_scope h = goblin__transport_url_scope(home), t = goblin__transport_url_scope(to);
    bool home_loop = h == GOBLIN__SCOPE_LOOPBACK || h == GOBLIN__SCOPE_LOCAL;
    if (!goblin__transport_url_is_tls(to))
        return !has_fp && goblin__transport_url_is_plain_tcp(to) && t == GOBLIN__SCOPE_LOOPBACK && home_loop;
    if (!has_fp) return false;
    switch (t) {
    case GOBLIN__SCOPE_PUBLIC:
    case GOBLIN__SCOPE_NAME: return true;
    case GOBLIN__SCOPE_PRIVATE: return home_loop || h == GOBLIN__SCOPE_PRIVATE;
    case GOBLIN__SCOPE_LOOPBACK: return home_loop;
    default: return false;
    }
}

/* An INTRODUCE on link @p from: taken only from home, before a HELLO_ACK, and only to an
 * address may_follow allows from that home; anything else ends that link (the next
 * HELLO home asks to be relayed). */
static void take_introduce(goblin_worker *w, uint32_t from, const goblin__wire_introduce *in) {
    static const uint8_t none[32] = {0};
    /* The link it came on may have ended already (the hub closes it once INTRODUCE is
     * out): what counts is that it is the link of the last HELLO, home, unanswered. */
    bool home = from == w->hello_link && w->acked_link != from && w->hello_dialer > 0;
    int did = w->hello_dialer;
    const char *home_url = NULL;
    for (int32_t i = 0; i < w->n_home && !home_url; i++)
        if (nng_dialer_id(w->home[i]) == did) home_url = w->p.connect[i];
    bool tls = goblin__transport_url_is_tls(in->url);
    bool has_fp = memcmp(in->fingerprint, none, sizeof none) != 0;
    bool ok = home && home_url && !w->direct_on && may_follow(home_url, in->url, has_fp);
    if (!ok) {
        goblin__worker_log(w, GOBLIN_LOG_WARN, "ignoring an introduction to %.80s (%s); redialing", in->url,
                           !home || w->direct_on ? "not from home before joining" : "not an address to follow");
        w->no_intro_once = true;
        nng_pipe pp = NNG_PIPE_INITIALIZER;
        pp.id = from;
        nng_pipe_close(pp);
        return;
    }
    memcpy(w->ticket, in->ticket, sizeof w->ticket);
    snprintf(w->direct_url, sizeof w->direct_url, "%s", in->url);
    w->direct_fp[0] = 0;
    if (tls) {
        static const char digits[] = "0123456789abcdef";
        for (int i = 0; i < 32; i++) {
            w->direct_fp[2 * i] = digits[in->fingerprint[i] >> 4];
            w->direct_fp[2 * i + 1] = digits[in->fingerprint[i] & 15];
        }
        w->direct_fp[64] = 0;
    }
    w->intro_pending = true;
}

goblin_err goblin_worker_run(goblin_worker *w) {
    if (!w) return GOBLIN_EINVAL;
    choose_backend(w);
    char msg[256];
    goblin_err e = goblin__transport_open_worker(&w->sock, w->p.recv_max_bytes, msg, sizeof msg);
    if (e) {
        goblin__worker_log(w, GOBLIN_LOG_ERROR, "%s", msg);
        return e;
    }
    nng_socket_set_ms(w->sock, NNG_OPT_RECVTIMEO, 20);
    nng_socket_set_ms(w->sock, NNG_OPT_SENDTIMEO, SEND_WAIT_MS);
    if (nng_socket_get_int(w->sock, NNG_OPT_SENDFD, &w->send_fd) != 0) w->send_fd = -1;
    w->hello_link = 0;
    /* Take queued TASKs off the node's pipe promptly (see MAX_IN_FLIGHT in node.c). */
    nng_socket_set_int(w->sock, NNG_OPT_RECVBUF, w->p.slots + 4 < 8192 ? w->p.slots + 4 : 8192);
    nng_pipe_notify(w->sock, NNG_PIPE_EV_ADD_POST, wpipe_cb, w);
    nng_pipe_notify(w->sock, NNG_PIPE_EV_REM_POST, wpipe_cb, w);
    w->direct_on = w->intro_pending = w->no_intro_once = false;
    w->hello_dialer = -1;
    w->acked_link = 0;
    if ((e = dial_home(w, msg, sizeof msg)) != GOBLIN_OK) {
        if (e == GOBLIN_ECANCELED) { /* goblin_worker_stop while waiting for the node */
            nng_close(w->sock);
            return GOBLIN_OK;
        }
        goblin__worker_log(w, GOBLIN_LOG_ERROR, "%s", msg);
        nng_close(w->sock);
        return e;
    }
    int seen_added = 0, seen_removed = 0;
    goblin_err result = GOBLIN_OK;
    w->last_task_ms = goblin__now_ms();
    atomic_store(&w->hb_ms, 0);
    atomic_store(&w->hb_quit, false);
    pthread_t hb_th;
    bool hb_started = pthread_create(&hb_th, NULL, heartbeat_main, w) == 0;
    /* The loop's receive waits without a timeout (an aio with one sits on nng's
     * expiry list, which nng scans whole: with hundreds of workers in a process that
     * scan was a third of the CPU); goblin_worker_stop and pipe events abort it. */
    nng_aio *rx = NULL;
    if (nng_aio_alloc(&rx, NULL, NULL) != 0) rx = NULL; /* then nng_recvmsg, 20 ms timeout */
    pthread_mutex_lock(&w->rx_mu);
    w->rx = rx;
    pthread_mutex_unlock(&w->rx_mu);
    while (!atomic_load(&w->stop)) {
        int removed = atomic_load(&w->pipes_removed);
        if (removed != seen_removed) {
            seen_removed = removed;
            goblin__worker_log(w, GOBLIN_LOG_INFO, "connection to the node lost; redialing");
            /* Panel ids are per node session: a new connection starts clean. */
            goblin__worker_cache_clear(w);
            goblin__worker_cache_gauges(w);
            w->node_batch = false; /* until the next HELLO_ACK says so */
        }
        int added = atomic_load(&w->pipes_added);
        if (added != seen_added) {
            seen_added = added;
            /* One HELLO per link, on that link (several events may come at once). */
            uint32_t link = cur_link(w);
            if (link && link != w->hello_link) {
                w->hello_link = link;
                BUMP(w, connects);
                send_hello(w, link);
            }
        }
        if (w->direct_on) {
            /* The introduced node: joined, lost, or not joined in time. */
            pthread_mutex_lock(&w->tx_mu);
            bool lost = w->direct_lost, joined = w->joined && w->link_direct;
            pthread_mutex_unlock(&w->tx_mu);
            if (joined) w->direct_joined = true;
            goblin_err le = GOBLIN_OK;
            if (lost) le = leave_direct(w, !w->direct_joined, msg, sizeof msg);
            else if (!w->direct_joined && goblin__now_ms() - w->direct_since_ms > INTRO_WAIT_MS)
                le = leave_direct(w, true, msg, sizeof msg);
            if (le) {
                if (le != GOBLIN_ECANCELED) {
                    goblin__worker_log(w, GOBLIN_LOG_ERROR, "%s", msg);
                    result = le;
                }
                break;
            }
        }
        goblin__worker_cache_expire(w);
        nng_msg *nm = NULL;
        int rv;
        if (rx) {
            /* Waiting while leases are asked for: wake after RESYNC_MS to ask again (see
             * below). With none asked for, nothing is owed: wait without a timer, or
             * until kept inputs are due to be dropped (cache_expire). */
            nng_duration to = w->credit > 0 ? RESYNC_MS : NNG_DURATION_INFINITE;
            /* A HELLO not yet answered: wake to check its deadline (below). */
            if (w->hello_link && !link_joined(w) && (to == NNG_DURATION_INFINITE || to > RESYNC_MS))
                to = RESYNC_MS;
            /* An introduced node not joined yet: wake to check INTRO_WAIT_MS. */
            if (w->direct_on && !w->direct_joined && (to == NNG_DURATION_INFINITE || to > RESYNC_MS)) to = RESYNC_MS;
            if (to == NNG_DURATION_INFINITE && w->p.cache_idle_ms && goblin__worker_cache_held(w)) {
                int64_t left = (int64_t)w->p.cache_idle_ms - (goblin__now_ms() - w->last_task_ms);
                to = left < 1 ? 1 : left > INT32_MAX ? INT32_MAX : (nng_duration)left;
            }
            nng_aio_set_timeout(rx, to);
            nng_recv_aio(w->sock, rx);
            /* An event that came before the receive started found nothing to abort. */
            if (atomic_load(&w->stop) || atomic_load(&w->pipes_removed) != seen_removed ||
                atomic_load(&w->pipes_added) != seen_added)
                nng_aio_abort(rx, NNG_ECANCELED);
            nng_aio_wait(rx);
            rv = nng_aio_result(rx);
            if (rv == 0) nm = nng_aio_get_msg(rx);
            else if (rv == NNG_ECANCELED) rv = NNG_ETIMEDOUT;
            else if (rv == NNG_ETIMEDOUT && w->credit > 0 && w->node_max) {
                /* RESYNC_MS without a TASK although leases were asked for: a TASK can be
                 * lost (nng's pair1 drops a message to a full pipe), and then the node
                 * waits for a request while this worker waits for the TASK. Ask again
                 * from scratch: an extra request only lets the node send a little more
                 * than asked, a missing one would idle this worker for good. */
                BUMP(w, lease_resyncs);
                goblin__worker_send_lease_request(w, (uint32_t)w->p.slots);
                w->credit = w->p.slots;
            }
        } else {
            rv = nng_recvmsg(w->sock, &nm, 0);
        }
        if (rv == NNG_ETIMEDOUT || rv == NNG_EAGAIN) {
            /* No answer to the HELLO (HELLO_ACK, CHALLENGE or REFUSE) within
             * HELLO_WAIT_MS: the peer never took the connection in (an nng 1.5.2
             * listener stopped by a peer that left in the handshake, nng issue #1518:
             * the transport completes handshakes but the socket never sees them; our
             * node and gateway restart such listeners, net/listen_guard.h, other
             * peers may not) or says nothing. End the link; the dialer redials and the
             * next link gets a new HELLO, instead of this worker waiting for good. */
            uint32_t hl = w->hello_link;
            if (hl && hl == cur_link(w) && !link_joined(w) &&
                goblin__now_ms() - w->hello_ms >= HELLO_WAIT_MS) {
                goblin__worker_log(w, GOBLIN_LOG_WARN, "no answer to the HELLO within %d s; redialing",
                                   HELLO_WAIT_MS / 1000);
                w->hello_ms = goblin__now_ms();
                nng_pipe pp = NNG_PIPE_INITIALIZER;
                pp.id = hl;
                nng_pipe_close(pp);
            }
            continue;
        }
        if (rv) {
            goblin__worker_log(w, GOBLIN_LOG_ERROR, "receive failed: %s", nng_strerror(rv));
            result = goblin__transport_err(rv);
            break;
        }
        /* A message of a link that has ended (pair1 keeps what it received across
         * connections): its TASKs were reissued when the node saw the link end, and an
         * answer would reach the node on the next link, under another session, before
         * that link's HELLO. Dropped. */
        uint32_t from = (uint32_t)nng_pipe_id(nng_msg_get_pipe(nm));
        /* An INTRODUCE on the link of the last HELLO, unanswered, is taken even once that
         * link has ended (the hub closes it right after): it is not stale. */
        bool intro = from == w->hello_link && w->acked_link != from && nng_msg_len(nm) >= GOBLIN_WIRE_HEADER_SIZE &&
                     memcmp(nng_msg_body(nm), "GBLW", 4) == 0 &&
                     ((const uint8_t *)nng_msg_body(nm))[6] == GOBLIN_WIRE_TYPE_INTRODUCE;
        if (from != cur_link(w) && !intro) {
            BUMP(w, stale_dropped);
            nng_msg_free(nm);
            continue;
        }
        /* One message, or a batch of them (protocol 1.1), in order. Zero-copy: the
         * tasks' inputs and graphs are read-only views into nm, which lives until
         * all of them are answered (the panel cache may keep it longer: ref). */
        const uint8_t *body = nng_msg_body(nm);
        size_t blen = nng_msg_len(nm), off = 0, ml = 0;
        msgref *ref = NULL;
        bool keep_going = true, yielded = false;
        do {
            size_t at = off;
            char err[256];
            e = goblin__wire_batch_next(body, blen, &off, &w->limits, &ml, err, sizeof err);
            if (e && at == 0) ml = blen; /* the decoder says what is wrong with it */
            else if (e) {
                goblin__worker_log(w, GOBLIN_LOG_WARN, "ignoring the rest of a malformed batch from the node (%s): %s",
                     goblin_err_name(e), err);
                break;
            }
            /* Answers to a batch of several go back as one batch, if the node takes them. */
            if (at == 0 && !e && off < blen && w->node_batch) w->ob_on = true;
            goblin__wire_msg *m = NULL;
            goblin_err de = goblin__wire_decode(body + at, ml, &w->limits, GOBLIN_WIRE_DECODE_ZERO_COPY, &m, err,
                                               sizeof err);
            if (de || e) {
                if (!de) goblin__wire_msg_free(m);
                goblin__worker_log(w, GOBLIN_LOG_WARN, "ignoring a malformed message from the node (%s): %s",
                     goblin_err_name(de ? de : e), err);
                break;
            }
            switch (m->type) {
            case GOBLIN_WIRE_TYPE_CHALLENGE:
                w->hello_ms = goblin__now_ms(); /* answered: the wait starts again for the ACK */
                send_proof(w, &m->body.challenge);
                break;
            case GOBLIN_WIRE_TYPE_HELLO_ACK:
                pthread_mutex_lock(&w->tx_mu);
                if (w->link == from) w->joined = true; /* what follows the handshake may go */
                pthread_mutex_unlock(&w->tx_mu);
                goblin__worker_log(w, GOBLIN_LOG_INFO, "joined the node as worker %llu%s",
                     (unsigned long long)m->body.hello_ack.session_id,
                     (m->flags & GOBLIN_WIRE_FLAG_BATCH) ? " (batches)" : "");
                w->node_batch = (m->flags & GOBLIN_WIRE_FLAG_BATCH) != 0;
                w->acked_link = from;
                if (!w->direct_on) w->no_intro_once = false; /* joined home (relayed): offer again next time */
                w->node_max = m->body.hello_ack.max_message_bytes;
                /* Heartbeat a bit more often than asked: the node allows 3 intervals. */
                atomic_store(&w->hb_ms,
                             m->body.hello_ack.heartbeat_ms ? m->body.hello_ack.heartbeat_ms / 2 + 1 : 0);
                hb_wake(w);
                goblin__worker_send_lease_request(w, (uint32_t)w->p.slots);
                w->credit = w->p.slots;
                break;
            case GOBLIN_WIRE_TYPE_INTRODUCE:
                take_introduce(w, from, &m->body.introduce);
                keep_going = !w->intro_pending;
                break;
            case GOBLIN_WIRE_TYPE_REFUSE:
                goblin__worker_log(w, GOBLIN_LOG_ERROR, "the node refused this worker (%s): %s",
                     goblin_err_name(m->body.refuse.reason), m->body.refuse.message);
                BUMP(w, refused);
                if (w->direct_on) { /* the introduced node: back home, to be relayed */
                    pthread_mutex_lock(&w->tx_mu);
                    w->direct_lost = true;
                    pthread_mutex_unlock(&w->tx_mu);
                    w->direct_joined = false;
                    break;
                }
                result = (unsigned)m->body.refuse.reason < GOBLIN_ERR_COUNT && m->body.refuse.reason
                             ? m->body.refuse.reason
                             : GOBLIN_EPROTO;
                keep_going = false;
                break;
            case GOBLIN_WIRE_TYPE_TASK:
                if (atomic_load(&w->stop)) {
                    /* Stopped in the middle of a batch: give the rest back at once. */
                    goblin__wire_msg a;
                    goblin__wire_msg_init(&a, GOBLIN_WIRE_TYPE_ABANDON);
                    a.body.abandon.task_id = m->body.task.task_id;
                    goblin__worker_lsend(w, &a);
                    break;
                }
                /* Before the first task of a message, give the core away once: the
                 * threads that delivered it (nng's, and in an embedded grid the node's
                 * own, which waits for its send to complete before it sends the next
                 * TASK, such as the replica of this one to another worker) may still be
                 * queued on this core. Woken last, this worker would otherwise often
                 * run first and keep the core for a whole scheduler slice (up to a
                 * 4 ms tick) while another core idles: on 2 cores the two copies of a
                 * replicated training task then ran one after the other in about half
                 * of the rounds (a CNN round ~8 ms instead of ~5). sched_yield lets
                 * them finish first (microseconds); with nothing else runnable here it
                 * returns at once. */
                if (!yielded) {
                    sched_yield();
                    yielded = true;
                }
                w->last_task_ms = goblin__now_ms();
                if (!goblin__worker_run_task(w, &m->body.task, nm, &ref)) {
                    result = GOBLIN_ECLOSED;
                    keep_going = false;
                }
                w->last_task_ms = goblin__now_ms(); /* idle from the end of a long task */
                break;
            case GOBLIN_WIRE_TYPE_ABANDON:
            case GOBLIN_WIRE_TYPE_HEARTBEAT:
            case GOBLIN_WIRE_TYPE_ERROR:
                break;
            default:
                goblin__worker_log(w, GOBLIN_LOG_WARN, "ignoring unexpected %s from the node", goblin__wire_type_name(m->type));
                break;
            }
            goblin__wire_msg_free(m);
        } while (keep_going && off < blen);
        ob_flush(w); /* also before a CRASH: what ran before it was answered */
        w->ob_on = false;
        goblin__worker_cache_gauges(w);
        if (!ref) {
            nng_msg_free(nm);
        } else if (--ref->refs == 0) {
            nng_msg_free(nm);
            goblin__free(ref);
        } /* else panels in the cache keep it */
        if (w->intro_pending) {
            goblin_err ge = go_direct(w, msg, sizeof msg);
            if (ge) {
                if (ge != GOBLIN_ECANCELED) {
                    goblin__worker_log(w, GOBLIN_LOG_ERROR, "%s", msg);
                    result = ge;
                }
                break;
            }
            continue;
        }
        if (!keep_going) break;
    }
    pthread_mutex_lock(&w->rx_mu);
    w->rx = NULL;
    pthread_mutex_unlock(&w->rx_mu);
    if (rx) nng_aio_free(rx);
    atomic_store(&w->hb_quit, true);
    hb_wake(w);
    if (hb_started) pthread_join(hb_th, NULL);
    if (atomic_load(&w->stop)) {
        /* Give back tasks already queued for us so the node reissues them at once. */
        nng_socket_set_ms(w->sock, NNG_OPT_RECVTIMEO, 0);
        nng_msg *nm = NULL;
        while (nng_recvmsg(w->sock, &nm, NNG_FLAG_NONBLOCK) == 0) {
            if ((uint32_t)nng_pipe_id(nng_msg_get_pipe(nm)) != cur_link(w)) { /* reissued already */
                nng_msg_free(nm);
                continue;
            }
            const uint8_t *body = nng_msg_body(nm);
            size_t blen = nng_msg_len(nm), off = 0, ml = 0;
            do { /* each TASK of a batch */
                size_t at = off;
                goblin__wire_msg *m = NULL;
                if (goblin__wire_batch_next(body, blen, &off, &w->limits, &ml, NULL, 0) != GOBLIN_OK ||
                    goblin__wire_decode(body + at, ml, &w->limits, 0, &m, NULL, 0) != GOBLIN_OK)
                    break;
                if (m->type == GOBLIN_WIRE_TYPE_TASK) {
                    goblin__wire_msg a;
                    goblin__wire_msg_init(&a, GOBLIN_WIRE_TYPE_ABANDON);
                    a.body.abandon.task_id = m->body.task.task_id;
                    wsend(w, &a);
                }
                goblin__wire_msg_free(m);
            } while (off < blen);
            nng_msg_free(nm);
        }
        /* nng_close may drop queued messages; give the ABANDONs a moment. */
        usleep(20000);
    }
    nng_close(w->sock);
    pthread_mutex_lock(&w->tx_mu);
    w->link = 0;
    w->joined = false;
    w->send_fd = -1;
    pthread_mutex_unlock(&w->tx_mu);
    goblin__worker_cache_clear(w);
    return result;
}
