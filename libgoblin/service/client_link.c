/* libgoblin/service/client_link.c - the connection under a client (client_impl.h):
 * the bounded first dial, waiting for replies (a connection that drops or a node that
 * stops answering heartbeats ends the wait), requests sent in parts, and the one safe
 * resend. */
#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "client_impl.h"
#include "net/tls_impl.h"
#include "net/transport.h"

uint64_t goblin__client_reply_rid(const void *buf) {
    const uint8_t *p = (const uint8_t *)buf + 8; /* the header's request id, little-endian */
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* ---- waiting for a reply ----------------------------------------------------------
 * A reply is received through an aio, so that a connection that closes under a request
 * ends the wait at once (the pipe callback says so) instead of at timeout_ms: nng would
 * otherwise redial and wait on, and a SUBMIT resent on the new connection could start a
 * second job. */

static void on_reply(void *arg) {
    goblin_client *c = arg;
    pthread_mutex_lock(&c->wmu);
    c->reply_done = true;
    pthread_cond_signal(&c->wcv);
    pthread_mutex_unlock(&c->wmu);
}

void goblin__client_on_pipe_removed(nng_pipe p, nng_pipe_ev ev, void *arg) {
    (void)p;
    (void)ev;
    goblin_client *c = arg;
    pthread_mutex_lock(&c->wmu);
    c->lost_gen++;
    if (c->waiting) {
        c->conn_lost = true;
        pthread_cond_signal(&c->wcv);
    }
    pthread_mutex_unlock(&c->wmu);
}

goblin_err goblin__client_nng_err(int rv) {
    switch (rv) {
    case 0: return GOBLIN_OK;
    case NNG_ECONNREFUSED: return GOBLIN_ECONNREFUSED;
    case NNG_ETIMEDOUT: return GOBLIN_ETIMEDOUT;
    case NNG_ECLOSED: return GOBLIN_ECLOSED;
    case NNG_ENOMEM: return GOBLIN_ENOMEM;
    case NNG_EINVAL: case NNG_EADDRINVAL: return GOBLIN_EINVAL;
    default: return goblin__tls_nng_err(rv);
    }
}

/* The first connection, made by a blocking nng_dialer_start in a helper thread so that
 * a refusal is seen as such, while the caller waits at most @p timeout_ms (0: no
 * limit) on every transport: a host that never answers (or a listener that never
 * accepts) would otherwise hold the caller for the operating system's TCP timeout. */
typedef struct dial_wait {
    nng_dialer d;
    int rv;
    bool done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} dial_wait;

static void *dial_thread(void *arg) {
    dial_wait *w = arg;
    int rv = nng_dialer_start(w->d, 0);
    pthread_mutex_lock(&w->mu);
    w->rv = rv;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* The host of @p url ("tcp://HOST:PORT", "[v6]" unbracketed) into @p host; false if none. */
static bool url_host(const char *url, char *host, size_t cap) {
    const char *h = strstr(url, "://");
    if (!h || strncmp(url, "ipc", 3) == 0 || strncmp(url, "inproc", 6) == 0) return false;
    h += 3;
    const char *end;
    if (*h == '[') {
        h++;
        end = strchr(h, ']');
    } else {
        end = strrchr(h, ':');
    }
    if (!end || end == h || (size_t)(end - h) >= cap) return false;
    memcpy(host, h, (size_t)(end - h));
    host[end - h] = 0;
    return true;
}

/* Why a dial to @p url failed with nng's @p rv, in words that say what to do. */
static void explain_dial(const char *url, int rv, char *why, size_t cap) {
    char host[256];
    bool tls = strncmp(url, "tls+", 4) == 0;
    if (rv == NNG_EADDRINVAL && url_host(url, host, sizeof host)) {
        struct addrinfo hints = {0}, *res = NULL;
        hints.ai_socktype = SOCK_STREAM;
        int g = getaddrinfo(host, NULL, &hints, &res);
        if (res) freeaddrinfo(res);
        if (g)
            snprintf(why, cap, "cannot connect to %s: the host name '%s' does not resolve (%s)",
                     url, host, gai_strerror(g));
        else
            snprintf(why, cap, "cannot connect to %s: not a valid address (tcp://HOST:PORT, "
                     "tls+tcp://HOST:PORT with a port of 1 to 65535, ipc:///path)", url);
    } else if (rv == NNG_EADDRINVAL) {
        snprintf(why, cap, "cannot connect to %s: not a valid address (tcp://HOST:PORT, "
                 "tls+tcp://HOST:PORT, ipc:///path)", url);
    } else if (!tls && (rv == NNG_ECONNSHUT || rv == NNG_ECLOSED || rv == NNG_ECONNRESET)) {
        snprintf(why, cap, "cannot connect to %s: what listens there closed the connection "
                 "during the handshake; if the node listens with TLS, connect to tls+%s with "
                 "its fingerprint", url, url);
    } else if (tls && (rv == NNG_ECONNSHUT || rv == NNG_ECLOSED || rv == NNG_ECONNRESET ||
                       rv == NNG_ECRYPTO)) {
        snprintf(why, cap, "cannot connect to %s: the TLS handshake failed (%s); if the node "
                 "listens in plain text, connect to %s", url, nng_strerror(rv), url + 4);
    } else {
        snprintf(why, cap, "cannot connect to %s: %s", url, nng_strerror(rv));
    }
}

goblin_err goblin__client_dial_bounded(goblin_client *c, nng_dialer d, const char *url,
                               uint32_t timeout_ms, char *why, size_t cap) {
    int rv;
    if (timeout_ms == 0) {
        if ((rv = nng_dialer_start(d, 0)) != 0) {
            explain_dial(url, rv, why, cap);
            return goblin__client_nng_err(rv);
        }
        return GOBLIN_OK;
    }
    dial_wait w = {.d = d};
    pthread_condattr_t ca;
    bool ok = pthread_condattr_init(&ca) == 0;
    ok = ok && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0;
    if (!ok || pthread_mutex_init(&w.mu, NULL) != 0) {
        snprintf(why, cap, "cannot create a condition variable");
        return GOBLIN_ENOMEM;
    }
    if (pthread_cond_init(&w.cv, &ca) != 0) {
        pthread_mutex_destroy(&w.mu);
        snprintf(why, cap, "cannot create a condition variable");
        return GOBLIN_ENOMEM;
    }
    pthread_condattr_destroy(&ca);
    pthread_t t;
    if (pthread_create(&t, NULL, dial_thread, &w) != 0) {
        pthread_cond_destroy(&w.cv);
        pthread_mutex_destroy(&w.mu);
        snprintf(why, cap, "cannot start a thread");
        return GOBLIN_ENOMEM;
    }
    struct timespec dl = goblin__deadline_after_ms(timeout_ms);
    pthread_mutex_lock(&w.mu);
    while (!w.done)
        if (pthread_cond_timedwait(&w.cv, &w.mu, &dl) == ETIMEDOUT) break;
    bool done = w.done;
    pthread_mutex_unlock(&w.mu);
    /* Closing the socket aborts a dial still in progress; the thread then ends. */
    if (!done) nng_close(c->sock);
    pthread_join(t, NULL);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    if (!done) {
        snprintf(why, cap, "no connection to %s within %u ms (connect_timeout_ms): nobody "
                 "answered", url, timeout_ms);
        return GOBLIN_ETIMEDOUT;
    }
    if (w.rv) {
        explain_dial(url, w.rv, why, cap);
        return goblin__client_nng_err(w.rv);
    }
    return GOBLIN_OK;
}


static void hb_pipe_added(nng_pipe p, nng_pipe_ev ev, void *arg) {
    (void)p;
    (void)ev;
    atomic_store(&((goblin_client *)arg)->hb_up, true);
}

void goblin__client_close_heartbeat(goblin_client *c) {
    if (!c->hb_open) return;
    for (int i = 0; i < 500 && !atomic_load(&c->hb_up); i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    nng_close(c->hb);
    c->hb_open = false;
}

/* The heartbeat connection, dialed in the background (a failure only leaves the client
 * without heartbeats). It presents the credential too, so the gateway does not count it
 * among connections that never authenticate. */
void goblin__client_open_heartbeat(goblin_client *c, const char *url, const goblin_client_params *p,
                           bool tls) {
    char why[256];
    if (goblin__transport_open_worker(&c->hb, 4096, why, sizeof why) != GOBLIN_OK) return;
    uint32_t wait = 3 * p->heartbeat_ms;
    nng_socket_set_ms(c->hb, NNG_OPT_RECVTIMEO, (nng_duration)wait);
    nng_socket_set_ms(c->hb, NNG_OPT_SENDTIMEO, (nng_duration)wait);
    atomic_store(&c->hb_up, false);
    nng_pipe_notify(c->hb, NNG_PIPE_EV_ADD_POST, hb_pipe_added, c);
    nng_dialer d;
    bool ok = nng_dialer_create(&d, c->hb, url) == 0;
    if (ok && tls) {
        goblin__tls_client_opts o = {p->ca_file, p->fingerprint, p->server_name,
                                     (int)p->connect_timeout_ms};
        ok = goblin__tls_dialer_setup(d, url, &o, why, sizeof why) == GOBLIN_OK;
    }
    if (ok) {
        nng_dialer_set_ms(d, NNG_OPT_RECONNMINT, 100);
        nng_dialer_set_ms(d, NNG_OPT_RECONNMAXT, 2000);
        ok = nng_dialer_start(d, NNG_FLAG_NONBLOCK) == 0;
    }
    if (!ok) {
        nng_close(c->hb);
        return;
    }
    c->hb_open = true;
}

static bool hb_request(goblin_client *c, uint8_t type);

/* Present the credential on the heartbeat connection now, so that the gateway never
 * counts it among connections that have not authenticated. */
void goblin__client_auth_heartbeat(goblin_client *c) {
    if (c->hb_open && c->credential[0]) hb_request(c, GOBLIN__CW_AUTH);
}

/* One request on the heartbeat connection (@p type: AUTH or PING): true if answered. */
static bool hb_request(goblin_client *c, uint8_t type) {
    goblin__cw_msg *m = goblin__calloc(1, sizeof *m);
    if (!m) return true; /* out of memory is not the node's silence */
    m->type = type;
    m->request_id = ++c->hb_rid;
    if (type == GOBLIN__CW_AUTH) {
        m->token_len = (uint32_t)strlen(c->credential);
        memcpy(m->token, c->credential, m->token_len);
    }
    size_t sz, len;
    bool answered = false;
    nng_msg *msg = NULL, *in = NULL;
    if (goblin__cw_encoded_size(m, &sz) == GOBLIN_OK && nng_msg_alloc(&msg, sz) == 0) {
        goblin__cw_encode_into(m, nng_msg_body(msg), sz, &len);
        if (nng_sendmsg(c->hb, msg, 0) != 0) {
            nng_msg_free(msg);
        } else {
            /* Any reply to this request (OK, or an ERROR) is an answer; a late one to an
             * earlier heartbeat is not. */
            int64_t end = goblin__now_ms() + 3 * (int64_t)c->p.heartbeat_ms;
            while (!answered && goblin__now_ms() < end && nng_recvmsg(c->hb, &in, 0) == 0) {
                answered = nng_msg_len(in) >= GOBLIN__CW_HEADER_SIZE &&
                           goblin__client_reply_rid(nng_msg_body(in)) == m->request_id;
                nng_msg_free(in);
            }
        }
    } else {
        answered = true;
    }
    memset(m->token, 0, sizeof m->token);
    goblin__free(m);
    return answered;
}

/* Does the node still answer? Asked while a request waits (the request's thread). */
static bool node_answers(goblin_client *c) {
    return !c->hb_open || hb_request(c, GOBLIN__CW_PING);
}


/* Receive the reply to the request just sent, for at most @p timeout_ms (0: none), or
 * until the connection under it closes. */
static int recv_reply(goblin_client *c, uint32_t timeout_ms, nng_msg **out, bool *lost) {
    nng_aio *aio;
    int rv = nng_aio_alloc(&aio, on_reply, c);
    if (rv) return rv;
    nng_aio_set_timeout(aio, timeout_ms ? (nng_duration)timeout_ms : NNG_DURATION_INFINITE);
    pthread_mutex_lock(&c->wmu);
    c->waiting = true;
    c->reply_done = false;
    c->conn_lost = c->lost_gen != c->sent_gen; /* closed since the request went out */
    pthread_mutex_unlock(&c->wmu);
    nng_recv_aio(c->sock, aio);
    bool silent = false;
    pthread_mutex_lock(&c->wmu);
    while (!c->reply_done && !c->conn_lost) {
        if (!c->p.heartbeat_ms || !c->hb_open) {
            pthread_cond_wait(&c->wcv, &c->wmu);
            continue;
        }
        struct timespec dl = goblin__deadline_after_ms(c->p.heartbeat_ms);
        if (pthread_cond_timedwait(&c->wcv, &c->wmu, &dl) != ETIMEDOUT) continue;
        if (c->reply_done || c->conn_lost) break;
        pthread_mutex_unlock(&c->wmu);
        silent = !node_answers(c);
        pthread_mutex_lock(&c->wmu);
        if (silent && !c->reply_done) break;
        silent = false;
    }
    *lost = c->conn_lost && !c->reply_done;
    c->waiting = false;
    pthread_mutex_unlock(&c->wmu);
    if (*lost || silent) nng_aio_cancel(aio);
    nng_aio_wait(aio);
    rv = nng_aio_result(aio);
    if (rv == 0) {
        *out = nng_aio_get_msg(aio);
        *lost = false; /* the reply made it after all */
    } else if (silent) {
        rv = NNG_ETIMEDOUT; /* the heartbeat went unanswered */
    }
    nng_aio_free(aio);
    return rv;
}

/* One request/reply. On success *reply is decoded from *keep (free it with
 * nng_msg_free after using the reply's tensors); an ERROR reply becomes its code. */
/* Send @p bytes as one message; the error is reported on @p c. */
static goblin_err send_bytes(goblin_client *c, nng_msg *m) {
    pthread_mutex_lock(&c->wmu);
    c->sent_gen = c->lost_gen;
    pthread_mutex_unlock(&c->wmu);
    int rv = nng_sendmsg(c->sock, m, 0);
    if (!rv) return GOBLIN_OK;
    nng_msg_free(m);
    c->transport_failed = true;
    if (rv == NNG_ETIMEDOUT)
        return cerr(c, GOBLIN_ETIMEDOUT, "cannot send the request: no connection to the node "
                    "at %s (it is not running, or not reachable)", c->url);
    return cerr(c, goblin__client_nng_err(rv), "cannot send the request to %s: %s", c->url, nng_strerror(rv));
}

/* Receive and decode the reply to request @p rid; an ERROR reply becomes its code. */
static goblin_err recv_decoded(goblin_client *c, uint64_t rid, uint32_t timeout_ms,
                               goblin__cw_msg *reply, nng_msg **keep) {
    nng_msg *in = NULL;
    bool lost = false;
    int rv;
    /* A reply to an earlier request that timed out may come first: it is skipped (one
     * connection carries one request at a time, so it can only be older). */
    int64_t end = timeout_ms ? goblin__now_ms() + timeout_ms : 0;
    for (;;) {
        int64_t left = end ? end - goblin__now_ms() : 0;
        if (end && left < 1) left = 1;
        rv = recv_reply(c, (uint32_t)left, &in, &lost);
        if (rv || nng_msg_len(in) < GOBLIN__CW_HEADER_SIZE ||
            goblin__client_reply_rid(nng_msg_body(in)) >= rid)
            break;
        nng_msg_free(in);
        in = NULL;
        if (end && goblin__now_ms() >= end) {
            rv = NNG_ETIMEDOUT;
            break;
        }
    }
    if (rv) {
        c->transport_failed = lost || rv != NNG_ETIMEDOUT;
        if (lost)
            return cerr(c, GOBLIN_ECLOSED, "the node at %s closed the connection before it "
                        "answered (it stopped or restarted; a job it held is gone with it)", c->url);
        if (rv == NNG_ETIMEDOUT)
            return cerr(c, GOBLIN_ETIMEDOUT, "the node at %s is not answering: no reply within "
                        "%u ms, or no answer to a heartbeat within %u ms", c->url, timeout_ms,
                        3 * c->p.heartbeat_ms);
        return cerr(c, goblin__client_nng_err(rv), "no reply from the node at %s: %s", c->url, nng_strerror(rv));
    }
    goblin__cw_limits lim = {c->p.recv_max_bytes, GOBLIN_MAX_NUMEL};
    char why[256];
    goblin_err e = goblin__cw_decode(nng_msg_body(in), nng_msg_len(in), &lim, reply, why, sizeof why);
    if (e) {
        nng_msg_free(in);
        return cerr(c, e, "malformed reply from the node: %s", why);
    }
    if (reply->request_id != rid) {
        goblin__cw_msg_clear(reply);
        nng_msg_free(in);
        return cerr(c, GOBLIN_EPROTO, "reply to another request");
    }
    if (reply->type == GOBLIN__CW_ERROR) {
        goblin_err code = reply->code > 0 && reply->code < 65536 ? (goblin_err)reply->code
                                                                 : GOBLIN_EPROTO;
        cerr(c, code, "node: %s", reply->text);
        c->node_eauth = code == GOBLIN_EAUTH;
        nng_msg_free(in);
        return code;
    }
    *keep = in;
    return GOBLIN_OK;
}

/* A refusal the gateway sent while the parts of request @p rid were still going out
 * (it answers such parts only to refuse them): GOBLIN_OK if none came. Replies to
 * earlier requests are skipped, as recv_decoded skips them. */
static goblin_err early_refusal(goblin_client *c, uint64_t rid, int *pending) {
    nng_msg *in = NULL;
    while (nng_recvmsg(c->sock, &in, NNG_FLAG_NONBLOCK) == 0) {
        if (nng_msg_len(in) < GOBLIN__CW_HEADER_SIZE || goblin__client_reply_rid(nng_msg_body(in)) < rid) {
            nng_msg_free(in);
            continue;
        }
        goblin__cw_msg *r = goblin__calloc(1, sizeof *r);
        goblin_err e = r ? GOBLIN_OK : cerr(c, GOBLIN_ENOMEM, "out of memory");
        goblin__cw_limits lim = {GOBLIN__CW_WIRE_MAX, GOBLIN_MAX_NUMEL};
        char why[256];
        if (!e && (e = goblin__cw_decode(nng_msg_body(in), nng_msg_len(in), &lim, r, why, sizeof why)))
            cerr(c, e, "malformed reply from the node: %s", why);
        else if (!e && r->type == GOBLIN__CW_ERROR) {
            e = r->code > 0 && r->code < 65536 ? (goblin_err)r->code : GOBLIN_EPROTO;
            cerr(c, e, "node: %s", r->text);
            c->node_eauth = e == GOBLIN_EAUTH;
        } else if (!e && r->type == GOBLIN__CW_OK && *pending > 0) {
            /* the OK of a part that asked for one (send_parts), come early */
            (*pending)--;
            goblin__cw_msg_clear(r);
            goblin__free(r);
            nng_msg_free(in);
            continue;
        } else if (!e) {
            e = cerr(c, GOBLIN_EPROTO, "node answered %s to a part of a request",
                     goblin__cw_type_name(r->type));
        }
        if (r) goblin__cw_msg_clear(r);
        goblin__free(r);
        nng_msg_free(in);
        return e;
    }
    return GOBLIN_OK;
}

/* The OK to a part of request @p rid that asked for one (or the gateway's refusal). */
static goblin_err part_ok(goblin_client *c, uint64_t rid, uint32_t timeout_ms) {
    goblin__cw_msg *r = goblin__calloc(1, sizeof *r);
    if (!r) return cerr(c, GOBLIN_ENOMEM, "out of memory");
    nng_msg *keep = NULL;
    goblin_err e = recv_decoded(c, rid, timeout_ms, r, &keep);
    if (!e && r->type != GOBLIN__CW_OK)
        e = cerr(c, GOBLIN_EPROTO, "node answered %s to a part of a request", goblin__cw_type_name(r->type));
    goblin__cw_msg_clear(r);
    if (keep) nng_msg_free(keep);
    goblin__free(r);
    return e;
}

/* Parts sent between two that ask for an OK (flow control: 16 MiB). */
#define PART_WINDOW 16

/* A request of @p sz bytes (over GOBLIN__CW_PART_MAX) as PARTs, streamed: parts flagged
 * NOACK (the gateway answers them only to refuse them) but every PART_WINDOW-th (whose
 * OK is read a window later) and the last, each gathered
 * straight from the request's pieces (a matmul submit's operands are not copied into a
 * buffer of the whole first). The last part's answer is the request's, left for the
 * caller. */
static goblin_err send_parts(goblin_client *c, const goblin__cw_msg *req, size_t sz,
                             uint32_t timeout_ms) {
    uint8_t own[GOBLIN__CW_PIECES_OWN];
    goblin__cw_piece pieces[GOBLIN__CW_PIECES_MAX];
    int np = 0;
    size_t total = 0;
    uint8_t *whole = NULL;
    if (goblin__cw_encode_pieces(req, own, pieces, &np, &total) != GOBLIN_OK || total != sz) {
        /* Another request (a graph's, strided inputs packed while encoding): encoded whole. */
        if (!(whole = goblin__alloc(sz))) return cerr(c, GOBLIN_ENOMEM, "out of memory for a %zu-byte request", sz);
        size_t len;
        goblin__cw_encode_into(req, whole, sz, &len);
        pieces[0] = (goblin__cw_piece){whole, sz};
        np = 1;
    }
    goblin_err e = GOBLIN_OK;
    int pi = 0;
    size_t po = 0;   /* the cursor: piece pi, byte po of it */
    int pending = 0; /* OKs asked for (every PART_WINDOW-th part) and not yet read */
    for (size_t off = 0, idx = 0; !e && off < sz; off += GOBLIN__CW_PART_MAX, idx++) {
        size_t n = sz - off < GOBLIN__CW_PART_MAX ? sz - off : GOBLIN__CW_PART_MAX;
        bool last = off + n == sz;
        bool ack = !last && (idx + 1) % PART_WINDOW == 0;
        size_t psz = goblin__cw_part_size((uint32_t)n);
        nng_msg *m;
        if (nng_msg_alloc(&m, psz) != 0) {
            e = cerr(c, GOBLIN_ENOMEM, "out of memory");
            break;
        }
        uint8_t *body = nng_msg_body(m);
        goblin__cw_put_part_head(body, req->request_id, sz, off, (uint32_t)n,
                                 last || ack ? 0 : GOBLIN__CW_PART_NOACK);
        uint8_t *dst = body + GOBLIN__CW_PART_HEAD;
        for (size_t left = n; left;) {
            size_t k = pieces[pi].n - po < left ? pieces[pi].n - po : left;
            memcpy(dst, pieces[pi].p + po, k);
            dst += k;
            left -= k;
            po += k;
            if (po == pieces[pi].n) {
                pi++;
                po = 0;
            }
        }
        memset(dst, 0, psz - GOBLIN__CW_PART_HEAD - n);
        if ((e = send_bytes(c, m))) break;
        if (ack) pending++;
        /* At most two windows in flight: the gateway's queue (attached to the node,
         * 64 MiB) is never overrun, and at most two OKs wait in its send queue. */
        while (!e && (pending > 1 || (last && pending > 0))) {
            e = part_ok(c, req->request_id, timeout_ms);
            pending--;
        }
        if (!e && !last && !ack) e = early_refusal(c, req->request_id, &pending);
    }
    goblin__free(whole);
    return e;
}

static goblin_err roundtrip_once(goblin_client *c, goblin__cw_msg *req, goblin__cw_msg *reply,
                                 nng_msg **keep, uint32_t timeout_ms) {
    c->node_eauth = false;
    c->transport_failed = false;
    req->request_id = c->next_rid++;
    size_t sz;
    goblin_err e = goblin__cw_encoded_size(req, &sz);
    if (e) return cerr(c, e, "request not encodable (non-contiguous tensor or bad path?)");
    if (sz > GOBLIN__CW_PART_MAX) {
        e = send_parts(c, req, sz, timeout_ms);
    } else {
        nng_msg *m;
        if (nng_msg_alloc(&m, sz) != 0)
            return cerr(c, GOBLIN_ENOMEM, "out of memory for a %zu-byte request", sz);
        size_t len;
        goblin__cw_encode_into(req, nng_msg_body(m), sz, &len);
        e = send_bytes(c, m);
    }
    return e ? e : recv_decoded(c, req->request_id, timeout_ms, reply, keep);
}

/* roundtrip_once; a request the node answered EAUTH is sent again once after the
 * token was presented again (the connection may have been redialed, and a new one
 * starts unauthenticated). An EAUTH answer means the node did nothing with it, so
 * sending it again cannot start a second job. */
goblin_err goblin__client_roundtrip(goblin_client *c, goblin__cw_msg *req, goblin__cw_msg *reply,
                            nng_msg **keep) {
    goblin_err e = roundtrip_once(c, req, reply, keep, c->p.timeout_ms);
    /* The connection dropped under a request (the node restarted, say): nng redials by
     * itself. A request that changes nothing on the node (STATS, STATUS, AUTH) is sent
     * once more on the new connection; SUBMIT, FETCH, CANCEL and RELEASE are not, since
     * the node may have acted on them before the reply was lost. */
    if (e && c->transport_failed &&
        (req->type == GOBLIN__CW_STATS || req->type == GOBLIN__CW_STATUS || req->type == GOBLIN__CW_AUTH)) {
        char first[sizeof c->err];
        memcpy(first, c->err, sizeof first);
        goblin_err e1 = e;
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
        if (c->p.credential && req->type != GOBLIN__CW_AUTH) e = goblin__client_send_auth(c, c->p.timeout_ms);
        else e = GOBLIN_OK;
        if (!e) e = roundtrip_once(c, req, reply, keep, c->p.timeout_ms);
        /* No new connection either: the first failure says best what happened. */
        if (e && c->transport_failed) {
            memcpy(c->err, first, sizeof first);
            return e1;
        }
        if (e) return e;
    }
    if (e == GOBLIN_EAUTH && c->node_eauth && c->p.credential && req->type != GOBLIN__CW_AUTH) {
        goblin_err ea = goblin__client_send_auth(c, c->p.timeout_ms);
        if (ea) return ea;
        e = roundtrip_once(c, req, reply, keep, c->p.timeout_ms);
    }
    return e;
}

/* Present the credential: AUTH, answered OK (or ERROR EAUTH). */
goblin_err goblin__client_send_auth(goblin_client *c, uint32_t timeout_ms) {
    goblin__cw_msg *p = goblin__calloc(2, sizeof *p);
    if (!p) return cerr(c, GOBLIN_ENOMEM, "out of memory");
    p[0].type = GOBLIN__CW_AUTH;
    p[0].token_len = (uint32_t)strlen(c->credential);
    memcpy(p[0].token, c->credential, p[0].token_len);
    nng_msg *keep = NULL;
    goblin_err e = roundtrip_once(c, &p[0], &p[1], &keep, timeout_ms);
    if (e == GOBLIN_EAUTH && c->node_eauth)
        cerr(c, e, "the node at %s refused the credential (unknown, revoked or mistyped)", c->url);
    else if (!e && p[1].type != GOBLIN__CW_OK)
        e = cerr(c, GOBLIN_EPROTO, "node answered %s to AUTH", goblin__cw_type_name(p[1].type));
    memset(p[0].token, 0, sizeof p[0].token);
    goblin__cw_msg_clear(&p[1]);
    if (keep) nng_msg_free(keep);
    goblin__free(p);
    return e;
}

/* Without a credential: a STATS request proves a gateway answers (an EAUTH answer says
 * the node wants a credential). */
goblin_err goblin__client_probe(goblin_client *c, uint32_t timeout_ms) {
    goblin__cw_msg *p = goblin__calloc(2, sizeof *p);
    if (!p) return cerr(c, GOBLIN_ENOMEM, "out of memory");
    p[0].type = GOBLIN__CW_STATS;
    nng_msg *keep = NULL;
    goblin_err e = roundtrip_once(c, &p[0], &p[1], &keep, timeout_ms);
    if (e == GOBLIN_EAUTH && c->node_eauth)
        cerr(c, e, "the node at %s requires a researcher credential (ask its operator: "
             "goblin-node researcher add EMAIL)", c->url);
    goblin__cw_msg_clear(&p[1]);
    if (keep) nng_msg_free(keep);
    goblin__free(p);
    return e;
}
