/* libgoblin/node/peer.c - the peer protocol: the peer table, HELLO (catalogue, join
 * token) or REFUSE, the messages of a worker dispatched (batches of them included), and
 * what each worker is believed to cache (matmul panels, graph-job inputs). */
#include "node_impl.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "net/transport.h"
#include "goblin/ops.h"
#include "goblin/tls.h"
#include "proto/wire_impl.h"

#define MAX_WANTED 256    /* lease slots a worker may have outstanding */
#define REFUSE_LINGER_MS 300 /* let a REFUSE reach the worker before closing the pipe */

/* ---- the peer table ------------------------------------------------------------- */

int32_t goblin__node_find_peer(goblin_node *n, uint32_t pipe_id) {
    for (int32_t i = n->n_peers - 1; i >= 0; i--)
        if (n->peers[i].pipe_id == pipe_id && n->peers[i].connected) return i;
    return -1;
}

bool goblin__node_peer_eligible(const goblin_node *n, int32_t k) {
    const peer *q = &n->peers[k];
    return q->connected && q->hello && !q->quarantined && !q->close_at_ms;
}

/* ---- what a worker is believed to cache: matmul panels, graph-job inputs -------- */

bool goblin__node_peer_has_panel(const peer *p, int kind, uint64_t id) {
    if (!id) return false;
    for (int i = 0; i < p->memo_cap; i++)
        if (p->panels[kind][i] == id) return true;
    return false;
}

void goblin__node_peer_add_panel(peer *p, int kind, uint64_t id) {
    if (goblin__node_peer_has_panel(p, kind, id)) return;
    if (p->memo_cap < 1) return;
    p->panels[kind][p->panel_next[kind] % p->memo_cap] = id;
    p->panel_next[kind] = (p->panel_next[kind] + 1) % p->memo_cap;
}

/* Graph-job input ids believed cached: GID_MEMO, scaled down like memo_cap on misses. */
static int32_t gid_cap(const peer *p) { return p->memo_cap * (GID_MEMO / PANEL_MEMO); }

bool goblin__node_peer_has_gid(const peer *p, uint64_t id) {
    for (int32_t i = 0, c = gid_cap(p); i < c; i++)
        if (p->gids[i] == id) return true;
    return false;
}

void goblin__node_peer_add_gid(peer *p, uint64_t id) {
    int32_t c = gid_cap(p);
    if (c < 1 || goblin__node_peer_has_gid(p, id)) return;
    p->gids[p->gnext % c] = id;
    p->gnext = (p->gnext + 1) % c;
}

/* ---- sending, dropping ---------------------------------------------------------- */

int goblin__node_send_wire(goblin_node *n, nng_pipe pp, const goblin__wire_msg *m) {
    /* Tensors may be strided views of the job's matrices: gathered straight into
     * the message body (no separate packing buffer). */
    size_t len = 0;
    if (goblin__wire_encoded_size_strided(m, &len) != GOBLIN_OK) return NNG_EINVAL;
    nng_msg *msg;
    int rv = nng_msg_alloc(&msg, len);
    if (rv) return rv;
    size_t wrote = 0;
    if (goblin__wire_encode_into_strided(m, nng_msg_body(msg), len, &wrote) != GOBLIN_OK) {
        nng_msg_free(msg);
        return NNG_EINVAL;
    }
    nng_msg_set_pipe(msg, pp);
    if ((rv = nng_sendmsg(n->sock, msg, 0)) != 0) nng_msg_free(msg);
    return rv;
}

void goblin__node_drop_peer(goblin_node *n, int32_t pi, const char *why) {
    peer *p = &n->peers[pi];
    goblin__node_log(n, GOBLIN_LOG_WARN, "dropping peer %u (session %llu): %s", (unsigned)p->pipe_id,
                     (unsigned long long)p->session_id, why);
    n->st.peers_dropped++;
    p->connected = false;
    if (p->hello && p->counted) {
        n->st.workers_connected--;
        p->counted = false;
    }
    goblin__node_fail_peer_leases(n, pi, false, GOBLIN_ECLOSED, "worker dropped");
    goblin__transport_pipe_close(p->pipe);
}

/* ---- messages ------------------------------------------------------------------- */

static void refuse(goblin_node *n, int32_t pi, goblin_err why, const char *text) {
    peer *p = &n->peers[pi];
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_REFUSE);
    m.body.refuse.reason = why;
    m.body.refuse.message = text;
    n->st.workers_refused++;
    goblin__node_log(n, GOBLIN_LOG_WARN, "refused worker on pipe %u: %s", (unsigned)p->pipe_id, text);
    goblin__node_send_wire(n, p->pipe, &m);
    p->close_at_ms = goblin__now_ms() + REFUSE_LINGER_MS;
}

static bool token_ok(const goblin_node *n, const goblin__wire_hello *h) {
    if (!n->p.token_len && !n->p.token_file) return true;
    if (n->p.token_len) {
        /* Constant time in the token's content. */
        uint8_t diff = (uint8_t)(h->token_len != n->p.token_len);
        for (uint32_t i = 0; i < n->p.token_len; i++)
            diff |= (uint8_t)(n->p.join_token[i] ^ (i < h->token_len ? h->token[i] : 0));
        if (diff == 0) return true;
    }
    if (n->p.token_file && h->token_len > 0 && h->token_len <= GOBLIN_TOKEN_MAX_BYTES &&
        !memchr(h->token, 0, h->token_len)) {
        char presented[GOBLIN_TOKEN_MAX_BYTES + 1];
        memcpy(presented, h->token, h->token_len);
        presented[h->token_len] = 0;
        char why[256] = "";
        goblin_err e = goblin__token_check_file(n->p.token_file, presented, why, sizeof why);
        if (e == GOBLIN_OK) return true;
        if (e != GOBLIN_EAUTH)
            goblin__node_log((goblin_node *)n, GOBLIN_LOG_ERROR, "token file %s: %s (%s)", n->p.token_file,
                             goblin_err_name(e), why);
    }
    return false;
}

static void handle_one(goblin_node *n, int32_t pi, const uint8_t *buf, size_t len);

/* One nng message from a worker: one goblin message, or a batch of them (protocol
 * 1.1), handled in order. */
void goblin__node_handle_msg(goblin_node *n, nng_msg *msg) {
    nng_pipe pp = nng_msg_get_pipe(msg);
    uint32_t pid = nng_pipe_id(pp);
    int32_t pi = goblin__node_find_peer(n, pid);
    if (pi < 0) {
        int64_t cap = n->cap_peers;
        if (!goblin__node_grow((void **)&n->peers, &cap, n->n_peers + 1, sizeof(peer))) return;
        n->cap_peers = (int32_t)cap;
        pi = n->n_peers++;
        memset(&n->peers[pi], 0, sizeof(peer));
        n->peers[pi].pipe = pp;
        n->peers[pi].pipe_id = pid;
        n->peers[pi].connected = true;
    }
    peer *p = &n->peers[pi];
    if (p->close_at_ms) return; /* refused: ignore until closed */
    p->last_heard_ms = goblin__now_ms();
    goblin__node_mark_ready(n, pi);
    const uint8_t *buf = nng_msg_body(msg);
    size_t len = nng_msg_len(msg), off = 0, ml = 0;
    char err[256];
    do {
        size_t at = off;
        goblin_err e = goblin__wire_batch_next(buf, len, &off, &n->limits, &ml, err, sizeof err);
        if (e == GOBLIN_OK && at == 0 && off == len) {
            handle_one(n, pi, buf, len); /* not a batch */
            return;
        }
        if (e) {
            /* A lone message that does not frame is judged by the decoder (a HELLO of
             * another catalogue gets a REFUSE); a bad batch drops the worker. */
            if (at == 0) {
                handle_one(n, pi, buf, len);
                return;
            }
            char why[320];
            snprintf(why, sizeof why, "malformed batch (%s): %s", goblin_err_name(e), err);
            goblin__node_drop_peer(n, pi, why);
            return;
        }
        handle_one(n, pi, buf + at, ml);
        p = &n->peers[pi];
    } while (off < len && p->connected && !p->close_at_ms);
}

/* One goblin message (@p len bytes at @p buf, inside the nng message handle_msg
 * frees after this returns) from peer @p pi. */
static void handle_one(goblin_node *n, int32_t pi, const uint8_t *buf, size_t len) {
    peer *p = &n->peers[pi];
    nng_pipe pp = p->pipe;
    uint32_t pid = p->pipe_id;
    goblin__wire_msg *m = NULL;
    char err[256];
    /* Zero-copy: result tensors are read-only views into the nng message, which
     * node_main frees only after this returns (everything kept past it is copied). */
    goblin_err e = goblin__wire_decode(buf, len, &n->limits, GOBLIN_WIRE_DECODE_ZERO_COPY, &m, err, sizeof err);
    if (e) {
        goblin__wire_header h;
        if (e == GOBLIN_EVERSION && !p->hello &&
            goblin__wire_header_decode(buf, len, &n->limits, &h, NULL, 0) == GOBLIN_OK &&
            h.type == GOBLIN_WIRE_TYPE_HELLO) {
            char text[300];
            snprintf(text, sizeof text, "catalogue version mismatch: %s", err);
            refuse(n, pi, GOBLIN_EVERSION, text);
            return;
        }
        char why[320];
        snprintf(why, sizeof why, "malformed message (%s): %s", goblin_err_name(e), err);
        goblin__node_drop_peer(n, pi, why);
        return;
    }
    if (!p->hello && m->type != GOBLIN_WIRE_TYPE_HELLO) {
        char why[96];
        snprintf(why, sizeof why, "%s before HELLO", goblin__wire_type_name(m->type));
        goblin__node_drop_peer(n, pi, why);
        goto out;
    }
    switch (m->type) {
    case GOBLIN_WIRE_TYPE_HELLO: {
        if (p->hello) {
            goblin__node_drop_peer(n, pi, "second HELLO");
            break;
        }
        goblin__wire_hello *h = &m->body.hello;
        if (h->catalog_version != goblin_catalog_version()) {
            char text[160];
            snprintf(text, sizeof text, "catalogue version mismatch: worker %u, node %u",
                     (unsigned)h->catalog_version, (unsigned)goblin_catalog_version());
            refuse(n, pi, GOBLIN_EVERSION, text);
            break;
        }
        if (!token_ok(n, h)) {
            refuse(n, pi, GOBLIN_EAUTH, "join token not accepted");
            break;
        }
        p->hello = true;
        p->counted = true;
        p->session_id = ++n->next_session;
        p->threads = (int32_t)h->threads;
        p->memo_cap = PANEL_MEMO;
        p->memory = h->memory_bytes;
        p->batch = (h->backends & GOBLIN_WIRE_CAP_BATCH) != 0;
        nng_sockaddr sa;
        p->shared = n->share && nng_pipe_get_addr(p->pipe, NNG_OPT_REMADDR, &sa) == 0 &&
                    sa.s_family == NNG_AF_INPROC;
        n->st.workers_seen++;
        n->st.workers_connected++;
        goblin__wire_msg a;
        goblin__wire_msg_init(&a, GOBLIN_WIRE_TYPE_HELLO_ACK);
        a.request_id = m->request_id;
        a.body.hello_ack.session_id = p->session_id;
        a.body.hello_ack.heartbeat_ms = n->p.heartbeat_ms;
        a.body.hello_ack.max_message_bytes = n->p.recv_max_bytes;
        if (p->batch) a.flags = GOBLIN_WIRE_FLAG_BATCH;
        goblin__node_send_wire(n, pp, &a);
        goblin__node_log(n, GOBLIN_LOG_INFO, "worker %llu joined (pipe %u, %u threads, %llu bytes)",
                         (unsigned long long)p->session_id, (unsigned)pid, (unsigned)h->threads,
                         (unsigned long long)h->memory_bytes);
        break;
    }
    case GOBLIN_WIRE_TYPE_LEASE_REQUEST:
        p->wanted += (int32_t)m->body.lease_request.slots;
        if (p->wanted > MAX_WANTED) p->wanted = MAX_WANTED;
        break;
    case GOBLIN_WIRE_TYPE_RESULT:
        goblin__node_handle_result(n, pi, &m->body.result);
        break;
    case GOBLIN_WIRE_TYPE_ABANDON: {
        int64_t li = goblin__node_find_lease(n, m->body.abandon.task_id);
        if (li >= 0 && n->leases[li].peer == pi) goblin__node_lease_failed(n, li, false, GOBLIN_ECANCELED, "abandoned");
        break;
    }
    case GOBLIN_WIRE_TYPE_ERROR: {
        int64_t li = goblin__node_find_lease(n, m->body.error.task_id);
        if (li < 0 || n->leases[li].peer != pi) break;
        if (m->body.error.code == GOBLIN_ENOTFOUND) {
            /* A view of a live job not found: the worker has no access to the share. */
            if (p->shared && !n->leases[li].moot) {
                p->shared = false;
                goblin__node_log(n, GOBLIN_LOG_WARN, "worker %llu cannot take panels in place: copying them",
                                 (unsigned long long)p->session_id);
            }
            /* The worker evicted a panel we thought it held: forget its panels, resend. */
            n->st.panel_cache_misses++;
            memset(p->panels, 0, sizeof p->panels);
            memset(p->gids, 0, sizeof p->gids);
            p->panel_next[0] = p->panel_next[1] = p->gnext = 0;
            p->memo_cap /= 2; /* 0 after enough misses: panels are then always sent */
            /* Not a failure: neither a retry, nor a reissue, nor a failed lease of the
             * worker. The task is pending again and the scheduler (this very loop
             * iteration) resends it with data; the worker asks for a lease after its
             * ERROR, so it keeps its slot. */
            goblin__node_lease_failed(n, li, false, GOBLIN_ENOTFOUND, "panel cache miss");
        } else {
            char why[160];
            snprintf(why, sizeof why, "worker error %s: %s", goblin_err_name(m->body.error.code),
                     m->body.error.message ? m->body.error.message : "");
            goblin__node_log(n, GOBLIN_LOG_WARN, "worker %llu: %s", (unsigned long long)p->session_id, why);
            goblin__node_lease_failed(n, li, true, m->body.error.code, why);
        }
        break;
    }
    case GOBLIN_WIRE_TYPE_HEARTBEAT:
        break;
    default: {
        char why[96];
        snprintf(why, sizeof why, "unexpected %s from a worker", goblin__wire_type_name(m->type));
        goblin__node_drop_peer(n, pi, why);
        break;
    }
    }
out:
    goblin__wire_msg_free(m);
}
