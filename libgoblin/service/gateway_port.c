/* libgoblin/service/gateway_port.c - where the gateway's clients come from
 * (gateway_impl.h): the node's own addresses, whose client messages the node hands over
 * through a bounded queue (node/client_port.h), or a polyamorous pair1 socket on URLs of
 * the gateway's own; and the one way replies go back, addressed to the client's pipe. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "gateway_impl.h"
#include "net/listen_guard.h"
#include "net/transport.h"
#include "node/client_port.h"

/* Attached: client messages handed over by the node and not yet handled. Over either
 * limit a request is answered GOBLIN_EBUSY at once (the client may retry). */
#define QUEUE_MSGS GOBLIN__GW_QUEUE_MSGS
#define QUEUE_BYTES ((uint64_t)64 << 20)

bool goblin__gw_queue_init(goblin_gateway *g) {
    pthread_condattr_t ca;
    bool ok = pthread_condattr_init(&ca) == 0;
    ok = ok && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0;
    ok = ok && pthread_cond_init(&g->qcv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (ok && pthread_mutex_init(&g->qmu, NULL) != 0) {
        pthread_cond_destroy(&g->qcv);
        ok = false;
    }
    return ok;
}

void goblin__gw_queue_fini(goblin_gateway *g) {
    for (int32_t k = 0; k < g->q_n; k++) nng_msg_free(g->q[(g->q_head + k) % QUEUE_MSGS]);
    g->q_n = 0;
    g->q_bytes = 0;
    pthread_cond_destroy(&g->qcv);
    pthread_mutex_destroy(&g->qmu);
}

/* ---- replies ---------------------------------------------------------------- */

int goblin__gw_send_to(goblin_gateway *g, nng_pipe pipe, const goblin__cw_msg *m) {
    size_t sz;
    goblin_err e = goblin__cw_encoded_size(m, &sz);
    if (e) {
        goblin__gw_log(g, GOBLIN_LOG_ERROR, "cannot encode a %s reply: %s",
                       goblin__cw_type_name(m->type), goblin_strerror(e));
        return -1;
    }
    nng_msg *msg;
    if (nng_msg_alloc(&msg, sz) != 0) {
        goblin__gw_log(g, GOBLIN_LOG_ERROR, "out of memory for a %zu-byte reply", sz);
        return -1;
    }
    size_t len;
    goblin__cw_encode_into(m, nng_msg_body(msg), sz, &len);
    nng_msg_set_pipe(msg, pipe);
    int rv = nng_sendmsg(g->sock, msg, 0);
    if (rv) {
        nng_msg_free(msg);
        goblin__gw_log(g, GOBLIN_LOG_WARN, "reply not sent: %s", nng_strerror(rv));
    }
    return rv;
}

int goblin__gw_send(goblin_gateway *g, const goblin__cw_msg *m) {
    return goblin__gw_send_to(g, g->reply_pipe, m);
}

/* ---- the node's addresses --------------------------------------------------------- */

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The node's thread, its lock held: queue @p msg, or answer EBUSY (no gateway lock but
 * qmu is taken here: the serve thread holds mu while it calls the node). */
static void port_message(void *user, nng_msg *msg) {
    goblin_gateway *g = user;
    size_t len = nng_msg_len(msg);
    pthread_mutex_lock(&g->qmu);
    bool ok = g->q_n < QUEUE_MSGS && g->q_bytes + len <= QUEUE_BYTES;
    if (ok) {
        g->q[(g->q_head + g->q_n) % QUEUE_MSGS] = msg;
        g->q_n++;
        g->q_bytes += len;
        pthread_cond_signal(&g->qcv);
    } else {
        g->q_refused++;
    }
    pthread_mutex_unlock(&g->qmu);
    if (ok) return;
    goblin__cw_msg *r = goblin__calloc(1, sizeof *r);
    if (r) {
        r->type = GOBLIN__CW_ERROR;
        r->request_id = len >= GOBLIN__CW_HEADER_SIZE ? le64((const uint8_t *)nng_msg_body(msg) + 8) : 0;
        r->code = (int32_t)GOBLIN_EBUSY;
        snprintf(r->text, sizeof r->text, "the node has %d requests waiting for its gateway: "
                 "try again shortly", QUEUE_MSGS);
        goblin__gw_send_to(g, nng_msg_get_pipe(msg), r);
        goblin__free(r);
    }
    nng_msg_free(msg);
}

static void port_pipe_removed(void *user, uint32_t id) { goblin__gw_pipe_removed(user, id); }

/* ---- its own addresses --------------------------------------------------------------- */

static void own_pipe_added(nng_pipe p, nng_pipe_ev ev, void *arg) {
    (void)ev;
    goblin_gateway *g = arg;
    if (goblin__guard_pipe_added(g->guard, p)) return; /* its probe: nng rejects it */
    goblin__gw_pipe_added(g, p);
    goblin__guard_pipe_done(g->guard);
}

static void guard_log(void *user, bool error, const char *line) {
    goblin__gw_log(user, error ? GOBLIN_LOG_ERROR : GOBLIN_LOG_WARN, "%s", line);
}

/* The guard stops before the socket closes (it listens on it) and goes after (no
 * ADD_PRE asks it any more). */
static void close_own(goblin_gateway *g) {
    goblin__guard_stop(g->guard);
    nng_close(g->sock);
    goblin__guard_free(g->guard);
    g->guard = NULL;
    g->sock_open = false;
}

static void own_pipe_removed(nng_pipe p, nng_pipe_ev ev, void *arg) {
    (void)ev;
    goblin__gw_pipe_removed(arg, nng_pipe_id(p));
}

static goblin_err open_own(goblin_gateway *g) {
    char why[512] = "";
    /* No message over a part's size gets in: larger requests come in parts, each checked
     * (handle_part) before anything is allocated for the whole. */
    goblin_err e = goblin__transport_open_node(&g->sock, GOBLIN__CW_WIRE_MAX, why, sizeof why);
    if (e) {
        goblin__gw_log(g, GOBLIN_LOG_ERROR, "%s", why);
        return GOBLIN_EIO;
    }
    g->sock_open = true;
    if (goblin__guard_new(&g->guard, g->sock, guard_log, g) != GOBLIN_OK) {
        nng_close(g->sock);
        g->sock_open = false;
        return GOBLIN_ENOMEM;
    }
    nng_pipe_notify(g->sock, NNG_PIPE_EV_ADD_PRE, own_pipe_added, g);
    nng_pipe_notify(g->sock, NNG_PIPE_EV_REM_POST, own_pipe_removed, g);
    nng_socket_set_ms(g->sock, NNG_OPT_RECVTIMEO, 100);
    nng_socket_set_ms(g->sock, NNG_OPT_SENDTIMEO, 2000);
    char urls[512] = "";
    size_t k = 0;
    for (int32_t i = 0; i < g->p.n_listen; i++) {
        const char *url = g->listen[i];
        if (goblin__transport_url_is_tls(url) && (!g->cert || !g->key)) {
            goblin__gw_log(g, GOBLIN_LOG_ERROR, "cannot listen for clients on %s: a tls+tcp:// "
                           "address needs a certificate and key", url);
            e = GOBLIN_EINVAL;
        } else if ((e = goblin__guard_listen(g->guard, url, g->cert, g->key, why, sizeof why))) {
            goblin__gw_log(g, GOBLIN_LOG_ERROR, "cannot listen for clients on %s: %s", url, why);
            e = e == GOBLIN_EINVAL ? GOBLIN_EINVAL : GOBLIN_EIO;
        }
        if (e) {
            close_own(g);
            return e;
        }
        goblin__gw_log(g, GOBLIN_LOG_INFO, "listening for clients on %s", url);
        if (k < sizeof urls) {
            int w = snprintf(urls + k, sizeof urls - k, "%s%s", i ? " or " : "", url);
            if (w > 0) k += (size_t)w;
        }
    }
    if (goblin__guard_start(g->guard) != GOBLIN_OK) {
        close_own(g);
        return GOBLIN_ENOMEM;
    }
    goblin__node_set_client_urls(g->node, urls);
    return GOBLIN_OK;
}

goblin_err goblin__gw_open(goblin_gateway *g) {
    if (!g->attached) return open_own(g);
    goblin__client_port port = {port_message, port_pipe_removed, g};
    goblin_err e = goblin__node_attach_clients(g->node, &port, &g->sock);
    if (e) {
        goblin__gw_log(g, GOBLIN_LOG_ERROR, "cannot serve clients on the node's addresses: the "
                       "node is not listening, or already has a gateway there");
        return e;
    }
    g->is_attached = true;
    char urls[400];
    goblin__node_listen_text(g->node, urls, sizeof urls);
    goblin__gw_log(g, GOBLIN_LOG_INFO, "serving clients on the node's address%s %s",
                   strchr(urls, ',') ? "es" : "", urls);
    return GOBLIN_OK;
}

void goblin__gw_close(goblin_gateway *g) {
    if (g->is_attached) {
        goblin__node_attach_clients(g->node, NULL, NULL);
        g->is_attached = false;
        pthread_mutex_lock(&g->qmu);
        for (int32_t k = 0; k < g->q_n; k++) nng_msg_free(g->q[(g->q_head + k) % QUEUE_MSGS]);
        g->q_n = 0;
        g->q_bytes = 0;
        pthread_mutex_unlock(&g->qmu);
    }
    if (g->sock_open) {
        goblin__node_set_client_urls(g->node, NULL);
        close_own(g);
    }
}

int goblin__gw_next(goblin_gateway *g, int *rfd, nng_msg **out, int timeout_ms) {
    if (!g->attached) return goblin__transport_recv(g->sock, rfd, out, timeout_ms);
    struct timespec dl = goblin__deadline_after_ms((uint32_t)timeout_ms);
    pthread_mutex_lock(&g->qmu);
    while (g->q_n == 0)
        if (pthread_cond_timedwait(&g->qcv, &g->qmu, &dl) == ETIMEDOUT) break;
    int rv = NNG_ETIMEDOUT;
    if (g->q_n > 0) {
        *out = g->q[g->q_head];
        g->q_head = (g->q_head + 1) % QUEUE_MSGS;
        g->q_n--;
        g->q_bytes -= nng_msg_len(*out);
        rv = 0;
    }
    pthread_mutex_unlock(&g->qmu);
    return rv;
}
