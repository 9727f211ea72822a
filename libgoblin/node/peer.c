/* libgoblin/node/peer.c - the peer protocol: the peer table (slots freed once a peer
 * is gone and no lease names it, found by pipe and by session through hash maps), HELLO
 * (catalogue, join token), the identity proof (CHALLENGE, PROOF: identity.c) and
 * HELLO_ACK or REFUSE, the messages of a worker dispatched (batches of them included),
 * and what each worker is believed to cache (matmul panels, graph-job inputs). */
#include "node_impl.h"
#include "proto/part.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "net/transport.h"
#include "goblin/ops.h"
#include "goblin/tls.h"
#include "proto/wire_impl.h"

#define MAX_WANTED 256    /* lease slots a worker may have outstanding */
#define REFUSE_LINGER_MS 300 /* let a REFUSE reach the worker before closing the pipe */

/* ---- the peer table ------------------------------------------------------------- */

int32_t goblin__node_find_peer(goblin_node *n, uint32_t pipe_id) {
    int32_t i = goblin__node_index_get(&n->by_pipe, pipe_id);
    return i >= 0 && n->peers[i].connected && n->peers[i].pipe_id == pipe_id ? i : -1;
}

int32_t goblin__node_find_session(goblin_node *n, uint64_t sid) {
    if (!sid) return -1;
    int32_t i = goblin__node_index_get(&n->by_session, sid);
    return i >= 0 && n->peers[i].used && n->peers[i].session_id == sid ? i : -1;
}

bool goblin__node_peer_eligible(const goblin_node *n, int32_t k) {
    const peer *q = &n->peers[k];
    return q->connected && q->hello && !q->quarantined && !q->close_at_ms;
}

static bool push_slot(int32_t **arr, int32_t *len, int32_t *cap, int32_t v) {
    int64_t c = *cap;
    if (!goblin__node_grow((void **)arr, &c, *len + 1, sizeof(int32_t))) return false;
    *cap = (int32_t)c;
    (*arr)[(*len)++] = v;
    return true;
}

/* A slot for a new peer on pipe @p pp: a freed one, else a new one; -1: out of memory. */
static int32_t peer_new(goblin_node *n, nng_pipe pp) {
    int32_t pi;
    /* Room on the lists a slot may go on later, made now: freeing never fails. */
    int64_t c = n->cap_free;
    if (!goblin__node_grow((void **)&n->free_peers, &c, n->n_peers + 1, sizeof(int32_t))) return -1;
    n->cap_free = (int32_t)c;
    c = n->cap_gone;
    if (!goblin__node_grow((void **)&n->gone, &c, n->n_peers + 1, sizeof(int32_t))) return -1;
    n->cap_gone = (int32_t)c;
    if (n->n_free > 0) {
        pi = n->free_peers[--n->n_free];
    } else {
        c = n->cap_peers;
        if (!goblin__node_grow((void **)&n->peers, &c, n->n_peers + 1, sizeof(peer))) return -1;
        n->cap_peers = (int32_t)c;
        pi = n->n_peers++;
    }
    peer *p = &n->peers[pi];
    memset(p, 0, sizeof *p);
    if (!goblin__node_index_put(&n->by_pipe, nng_pipe_id(pp), pi)) {
        push_slot(&n->free_peers, &n->n_free, &n->cap_free, pi);
        return -1;
    }
    p->used = true;
    p->pipe = pp;
    p->pipe_id = nng_pipe_id(pp);
    p->connected = true;
    p->ident = -1;
    n->live_peers++;
    n->st.peers_tracked = n->live_peers;
    return pi;
}

void goblin__node_peer_gone(goblin_node *n, int32_t pi) {
    peer *p = &n->peers[pi];
    if (!p->used || !p->connected) return;
    p->connected = false;
    goblin__node_index_del(&n->by_pipe, p->pipe_id);
    goblin__node_intro_gone(n, pi);
    if (p->asm_buf) {
        goblin__free(p->asm_buf);
        n->buffered_bytes -= p->asm_total;
        p->asm_buf = NULL;
        p->asm_total = p->asm_got = 0;
    }
    ident *id = goblin__node_peer_ident(n, pi);
    if (id && id->connected > 0) id->connected--;
    /* A result held for its replica names this slot: dropped, the task runs again. */
    goblin__node_drop_held(n, pi);
    if (!p->gone) {
        p->gone = true;
        n->gone[n->n_gone++] = pi; /* room made by peer_new */
    }
}

/* A relayed worker's counts not yet told to the hub, kept for the link's next WORK
 * (hub_link.c): what it did between the last report and its slot's end. */
static void work_tail(goblin_node *n, const peer *p) {
    const ident *id = p->ident >= 0 && p->ident < n->n_idents ? &n->idents[p->ident] : NULL;
    if (!p->relayed || !id || !id->used) return;
    int64_t di = p->issued - p->rep_issued, da = p->accepted - p->rep_accepted, dr = p->rejected - p->rep_rejected;
    if (di <= 0 && da <= 0 && dr <= 0) return;
    if (n->n_work_tail == (int32_t)(sizeof n->work_tail / sizeof n->work_tail[0])) return; /* the link is behind */
    memcpy(n->work_tail[n->n_work_tail].fp, id->fp, GOBLIN__WKEY_FP_HEX);
    n->work_tail[n->n_work_tail].issued = di;
    n->work_tail[n->n_work_tail].accepted = da;
    n->work_tail[n->n_work_tail].rejected = dr;
    n->n_work_tail++;
}

void goblin__node_reap_peers(goblin_node *n) {
    for (int32_t k = n->n_gone - 1; k >= 0; k--) {
        int32_t pi = n->gone[k];
        peer *p = &n->peers[pi];
        if (p->n_leases > 0 || n->bpeer == pi) continue;
        if (p->ready)
            for (int32_t r = 0; r < n->n_ready; r++)
                if (n->ready[r] == pi) {
                    n->ready[r] = n->ready[--n->n_ready];
                    break;
                }
        if (p->session_id) goblin__node_index_del(&n->by_session, p->session_id);
        work_tail(n, p);
        memset(p, 0, sizeof *p);
        p->ident = -1;
        n->gone[k] = n->gone[--n->n_gone];
        n->free_peers[n->n_free++] = pi; /* room made by peer_new */
        n->live_peers--;
    }
    n->st.peers_tracked = n->live_peers;
}

void goblin__node_peers_free(goblin_node *n) {
    for (int32_t i = 0; i < n->n_peers; i++) goblin__free(n->peers[i].asm_buf);
    goblin__free(n->peers);
    goblin__free(n->free_peers);
    goblin__free(n->gone);
    goblin__node_index_free(&n->by_pipe);
    goblin__node_index_free(&n->by_session);
    n->peers = NULL;
    n->n_peers = n->cap_peers = 0;
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
    if (p->hello && p->counted) {
        n->st.workers_connected--;
        p->counted = false;
    }
    nng_pipe pp = p->pipe;
    goblin__node_peer_gone(n, pi);
    goblin__node_fail_peer_leases(n, pi, false, GOBLIN_ECLOSED, "worker dropped");
    goblin__transport_pipe_close(pp);
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
static void handle_bytes(goblin_node *n, int32_t pi, const uint8_t *buf, size_t len);

/* A part of a larger message from peer @p pi (proto/part.h). Taken only from a worker
 * that proved its identity, within recv_max_bytes and the node-wide budget; returns the
 * whole message once its last part is in (the caller handles and frees it). Anything
 * else drops the peer. */
static uint8_t *take_part(goblin_node *n, int32_t pi, const uint8_t *buf, size_t len,
                          size_t *whole_len) {
    peer *p = &n->peers[pi];
    uint64_t total, offset;
    const uint8_t *data;
    size_t k;
    char err[256], why[320];
    goblin_err e = goblin__part_decode(buf, len, n->p.recv_max_bytes, &total, &offset, &data, &k,
                                       err, sizeof err);
    /* Before its proof a peer's parts are dropped unread: nothing is allocated for them.
     * (A worker whose connection broke in the middle of a message sends the rest on its
     * next connection, before its HELLO; so does a continuation without a start.) */
    if (!e && (!p->hello || p->ident < 0 || (offset != 0 && !p->asm_buf))) {
        goblin__node_log(n, GOBLIN_LOG_DEBUG, "peer %u: a part of a message (at %llu of %llu) "
                         "ignored: %s", (unsigned)p->pipe_id, (unsigned long long)offset,
                         (unsigned long long)total, p->ident < 0 ? "no identity proved yet"
                                                                 : "no start");
        return NULL;
    }
    if (!e && offset == 0) {
        if (p->asm_buf) {
            e = GOBLIN_EPROTO;
            snprintf(err, sizeof err, "a new message in parts before the last one ended");
        } else if (n->buffered_bytes + total > n->p.max_buffered_bytes) {
            e = GOBLIN_EBUSY;
            snprintf(err, sizeof err, "the node is receiving %llu bytes from workers already (its "
                     "limit is %llu)", (unsigned long long)n->buffered_bytes,
                     (unsigned long long)n->p.max_buffered_bytes);
        } else if (!(p->asm_buf = goblin__alloc((size_t)total))) {
            e = GOBLIN_ENOMEM;
            snprintf(err, sizeof err, "out of memory for a %llu-byte message", (unsigned long long)total);
        } else {
            p->asm_total = total;
            p->asm_got = 0;
            n->buffered_bytes += total;
        }
    } else if (!e && (!p->asm_buf || offset != p->asm_got || total != p->asm_total)) {
        e = GOBLIN_EFORMAT;
        snprintf(err, sizeof err, "a part out of order (at %llu of %llu)", (unsigned long long)offset,
                 (unsigned long long)total);
    }
    if (e) {
        snprintf(why, sizeof why, "%s (%s)", err, goblin_err_name(e));
        goblin__node_drop_peer(n, pi, why); /* frees what came so far */
        return NULL;
    }
    memcpy(p->asm_buf + p->asm_got, data, k);
    p->asm_got += k;
    if (p->asm_got < p->asm_total) return NULL;
    uint8_t *whole = p->asm_buf;
    *whole_len = (size_t)p->asm_total;
    n->buffered_bytes -= p->asm_total;
    p->asm_buf = NULL;
    p->asm_total = p->asm_got = 0;
    return whole;
}

/* One nng message from a worker: one goblin message, or a batch of them (protocol
 * 1.1), handled in order, or a part of a larger one. */
void goblin__node_handle_msg(goblin_node *n, nng_msg *msg) {
    nng_pipe pp = nng_msg_get_pipe(msg);
    uint32_t pid = nng_pipe_id(pp);
    int32_t pi = goblin__node_find_peer(n, pid);
    if (pi < 0) {
        /* A message that outlived its pipe (closed, its removal already handled) makes
         * no peer: nothing would ever free it. */
        nng_sockaddr sa;
        int rv = nng_pipe_get_addr(pp, NNG_OPT_REMADDR, &sa); /* ENOTSUP on some transports: fine */
        if (rv == NNG_ENOENT || rv == NNG_ECLOSED || (pi = peer_new(n, pp)) < 0) return;
    }
    peer *p = &n->peers[pi];
    if (p->close_at_ms) return; /* refused: ignore until closed */
    p->last_heard_ms = goblin__now_ms();
    goblin__node_mark_ready(n, pi);
    const uint8_t *buf = nng_msg_body(msg);
    size_t len = nng_msg_len(msg);
    if (goblin__part_is(buf, len)) {
        size_t wl = 0;
        uint8_t *whole = take_part(n, pi, buf, len, &wl);
        if (whole) {
            handle_bytes(n, pi, whole, wl);
            goblin__free(whole);
        }
        return;
    }
    handle_bytes(n, pi, buf, len);
}

/* One goblin message or a batch (@p buf, @p len: alive while this runs). */
static void handle_bytes(goblin_node *n, int32_t pi, const uint8_t *buf, size_t len) {
    peer *p = &n->peers[pi];
    size_t off = 0, ml = 0;
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
    if (!p->hello && m->type != GOBLIN_WIRE_TYPE_HELLO && !(m->type == GOBLIN_WIRE_TYPE_PROOF && p->challenged)) {
        char why[96];
        snprintf(why, sizeof why, "%s before HELLO", goblin__wire_type_name(m->type));
        goblin__node_drop_peer(n, pi, why);
        goto out;
    }
    switch (m->type) {
    case GOBLIN_WIRE_TYPE_HELLO: {
        if (p->hello || p->challenged) {
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
        /* A ticket of the hub's introduction stands for the join token (intro.c). */
        if (!goblin__node_intro_take(n, pi, h->token, h->token_len) && !token_ok(n, h)) {
            refuse(n, pi, GOBLIN_EAUTH, "join token not accepted");
            break;
        }
        p->threads = (int32_t)h->threads;
        p->memory = h->memory_bytes;
        p->batch = (h->backends & GOBLIN_WIRE_CAP_BATCH) != 0;
        p->hello_rid = m->request_id;
        /* Admitted only once it proves its identity (PROOF). */
        goblin__node_identity_challenge(n, pi, buf, len);
        break;
    }
    case GOBLIN_WIRE_TYPE_PROOF: {
        if (p->hello || !p->challenged) {
            goblin__node_drop_peer(n, pi, "unexpected PROOF");
            break;
        }
        p->challenged = false;
        char why[300];
        goblin_err ae = goblin__node_identity_admit(n, pi, &m->body.proof, why, sizeof why);
        if (ae) {
            refuse(n, pi, ae == GOBLIN_ENOMEM ? GOBLIN_ENOMEM : GOBLIN_EAUTH, why);
            break;
        }
        if (!goblin__node_intro_admitted(n, pi, why, sizeof why)) {
            refuse(n, pi, GOBLIN_EAUTH, why);
            break;
        }
        p->hello = true;
        p->counted = true;
        goblin__node_pipe_known(n, nng_pipe_id(p->pipe));
        p->session_id = ++n->next_session;
        if (!goblin__node_index_put(&n->by_session, p->session_id, pi)) {
            p->hello = p->counted = false;
            goblin__node_drop_peer(n, pi, "out of memory");
            break;
        }
        p->memo_cap = PANEL_MEMO;
        p->joined_ms = goblin__now_ms();
        nng_sockaddr sa;
        p->shared = n->share && nng_pipe_get_addr(p->pipe, NNG_OPT_REMADDR, &sa) == 0 &&
                    sa.s_family == NNG_AF_INPROC;
        goblin__node_peer_set_origin(n, pi);
        if (p->introduced) p->relayed = true;
        n->st.workers_seen++;
        n->st.workers_connected++;
        goblin__wire_msg a;
        goblin__wire_msg_init(&a, GOBLIN_WIRE_TYPE_HELLO_ACK);
        a.request_id = p->hello_rid;
        a.body.hello_ack.session_id = p->session_id;
        a.body.hello_ack.heartbeat_ms = n->p.heartbeat_ms;
        a.body.hello_ack.max_message_bytes = n->p.recv_max_bytes;
        if (p->batch) a.flags = GOBLIN_WIRE_FLAG_BATCH;
        goblin__node_send_wire(n, pp, &a);
        const ident *id = goblin__node_peer_ident(n, pi);
        goblin__node_log(n, GOBLIN_LOG_INFO, "worker %llu joined (pipe %u, identity %.16s%s%s, %u threads, %llu bytes)",
                         (unsigned long long)p->session_id, (unsigned)pid, id ? id->fp : "?",
                         id && id->owner >= 0 ? ", owner " : "", id && id->owner >= 0 ? n->owner_names[id->owner] : "",
                         (unsigned)p->threads, (unsigned long long)p->memory);
        break;
    }
    case GOBLIN_WIRE_TYPE_LEASE_REQUEST:
        p->wanted += (int32_t)m->body.lease_request.slots;
        p->last_asked_ms = goblin__now_ms();
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
