/* libgoblin/hub/relay.c - the machine side of goblin-hub: volunteers' workers and lab
 * nodes dial the hub's `machines` address, and the hub splices one worker's connection
 * to one data connection of a lab node (docs/hub.md, "Machines").
 *
 * The hub speaks nng's SP framing itself, over nng's byte streams (tls+tcp://, or tcp://
 * on loopback): an 8-byte handshake, then frames of a u64 big-endian length and pair1's
 * 4-byte hop count. It reads only the first frame of a connection (a worker's HELLO, a
 * node's NODE_HELLO or ATTACH: at most FIRST_MAX bytes) and, for a node's control
 * connection, its small frames after that. Once a worker is spliced to a node's data
 * connection the hub copies bytes both ways through two buffers per direction: a read
 * is posted only into a buffer whose bytes the other side's write has taken, so a slow
 * side slows the other (TCP's own flow control, end to end) and nothing piles up in
 * the hub. No byte
 * of a task or a result is looked at, kept or written anywhere.
 *
 * Threads: nng's callbacks do the I/O under r->mu; one thread (reaper) closes, stops
 * and frees connections, expires tickets and handshakes, and rebalances the lending. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/errf.h"
#include "relay_impl.h"
#include "net/crypto.h"
#include "net/tls_impl.h"
#include "net/transport.h"
#include "net/worker_key.h"
#include "proto/hub_wire.h"
#include "proto/part.h"
#include "proto/wire.h"


static void rx_cb(void *arg);
static void tx_cb(void *arg);
void goblin__relay_tx_kick(rconn *c);
static void rx_kick(rconn *c);
static void assign(relay *r);
static void proof_read(rconn *c);
void goblin__relay_direct_del(rconn *n, int32_t i);

/* ---- closing ---------------------------------------------------------------------- */

static void drop_tickets_of(relay *r, rconn *c) {
    for (int32_t i = 0; i < r->n_tickets;) {
        ticket *t = &r->tickets[i];
        if (t->node == c || t->worker == c) {
            if (t->node) t->node->opening--;
            if (t->worker) {
                t->worker->reserved = false;
                t->worker->node = NULL;
            }
            memset(t->t, 0, sizeof t->t);
            *t = r->tickets[--r->n_tickets];
        } else {
            i++;
        }
    }
}

/* Mark @p c for the reaper; its peer (the other half of a splice) goes with it. */
void goblin__relay_close_conn(rconn *c) {
    relay *r = c->r;
    if (c->closing) return;
    c->closing = true;
    if (c->role == R_UNKNOWN) r->n_pending--;
    drop_tickets_of(r, c);
    if (c->role == R_WORKER) {
        r->n_workers--;
        if (c->node && c->peer) c->node->lent--;
        if (c->node && c->introducing) c->node->opening--;
        c->introducing = false;
        c->node = NULL;
    }
    if (c->role == R_CONTROL) {
        r->n_nodes--;
        c->n_directs = 0; /* the node sends its introduced workers back to the hub */
        for (rconn *d = r->conns; d; d = d->next)
            if (d != c && !d->closing && d->node == c) {
                if (d->role == R_DATA) d->node = NULL; /* closed through its worker below */
                if (d->role == R_WORKER) goblin__relay_close_conn(d);
            }
        for (rconn *d = r->conns; d; d = d->next)
            if (d != c && !d->closing && d->role == R_DATA && !d->peer) goblin__relay_close_conn(d);
    }
    rconn *p = c->peer;
    if (p) {
        c->peer = NULL;
        p->peer = NULL;
        if (p->role == R_WORKER && p->node) {
            p->node->lent--;
            p->node = NULL;
        }
        goblin__relay_close_conn(p);
    }
    pthread_cond_signal(&r->cv);
}

/* ---- sending the hub's own frames --------------------------------------------------- */

static void put_be64(uint8_t *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}
static uint64_t get_be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

/* Queue one pair1 frame holding @p len bytes at @p m. */
void goblin__relay_out_frame(rconn *c, const uint8_t *m, size_t len) {
    if (c->outq_len + 12 + len > sizeof c->outq) {
        goblin__relay_close_conn(c); /* a node that reads nothing: never more than OUTQ_BYTES for it */
        return;
    }
    uint8_t *o = c->outq + c->outq_len;
    put_be64(o, 4 + len);
    o[8] = o[9] = o[10] = 0;
    o[11] = 1; /* pair1's hop count */
    memcpy(o + 12, m, len);
    c->outq_len += 12 + len;
}

void goblin__relay_out_hub(rconn *c, const goblin__hubw_msg *m) {
    uint8_t b[GOBLIN__HUBW_MAX];
    size_t n = 0;
    if (goblin__hubw_encode(m, b, &n) == GOBLIN_OK) goblin__relay_out_frame(c, b, n);
}

/* A REFUSE in the protocol the peer spoke (worker or node), then the connection closes. */
void goblin__relay_refuse(rconn *c, bool worker, goblin_err why, const char *text) {
    if (worker) {
        goblin__wire_msg m;
        goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_REFUSE);
        m.body.refuse.reason = why;
        m.body.refuse.message = text;
        uint8_t b[GOBLIN_WIRE_HEADER_SIZE + 16 + GOBLIN_WIRE_MAX_TEXT_BYTES];
        size_t n = 0;
        if (goblin__wire_encode_into(&m, b, sizeof b, &n) == GOBLIN_OK) goblin__relay_out_frame(c, b, n);
    } else {
        goblin__hubw_msg m;
        memset(&m, 0, sizeof m);
        m.type = GOBLIN__HUBW_REFUSE;
        m.reason = (uint32_t)why;
        snprintf(m.text, sizeof m.text, "%s", text);
        goblin__relay_out_hub(c, &m);
    }
    c->refusing = true;
    c->rs = RS_NONE;
    goblin__relay_tx_kick(c);
}

void goblin__relay_tx_kick(rconn *c) {
    if (c->closing || c->tx_busy) return;
    nng_iov iov;
    if (c->outq_len) {
        iov.iov_buf = c->outq;
        iov.iov_len = c->outq_len;
        c->tx_from_outq = true;
    } else if (c->refusing) {
        goblin__relay_close_conn(c); /* the refusal is out */
        return;
    } else if (c->peer && c->peer->boff[c->peer->send] < c->peer->blen[c->peer->send]) {
        rconn *p = c->peer;
        iov.iov_buf = p->bufs[p->send] + p->boff[p->send];
        iov.iov_len = p->blen[p->send] - p->boff[p->send];
        c->tx_from_outq = false;
    } else {
        return;
    }
    c->tx_len = iov.iov_len;
    c->tx_busy = true;
    nng_aio_set_iov(c->tx, 1, &iov);
    nng_stream_send(c->s, c->tx);
}

static void tx_cb(void *arg) {
    rconn *c = arg;
    relay *r = c->r;
    pthread_mutex_lock(&r->mu);
    c->tx_busy = false;
    int rv = nng_aio_result(c->tx);
    size_t n = nng_aio_count(c->tx);
    if (rv || c->closing) {
        goblin__relay_close_conn(c);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (c->tx_from_outq) {
        memmove(c->outq, c->outq + n, c->outq_len - n);
        c->outq_len -= n;
    } else if (c->peer) {
        rconn *p = c->peer;
        p->boff[p->send] += n;
        r->st.bytes_relayed += (int64_t)n;
        if (p->boff[p->send] == p->blen[p->send]) { /* that buffer is free again */
            p->blen[p->send] = p->boff[p->send] = 0;
            p->send ^= 1;
            rx_kick(p);
        }
    }
    goblin__relay_tx_kick(c);
    pthread_mutex_unlock(&r->mu);
}

/* ---- reading -------------------------------------------------------------------------- */

static void read_into(rconn *c, uint8_t *p, size_t n) {
    nng_iov iov = {.iov_buf = p, .iov_len = n};
    c->rx_busy = true;
    nng_aio_set_iov(c->rx, 1, &iov);
    nng_stream_recv(c->s, c->rx);
}

static void rx_kick(rconn *c) {
    if (c->closing || c->rx_busy) return;
    switch (c->rs) {
    case RS_HS:
    case RS_LEN:
    case RS_PEEK:
    case RS_BODY:
    case RS_PROOF: read_into(c, c->in + c->got, c->want - c->got); break;
    case RS_DISCARD: {
        size_t n = c->discard < sizeof c->in ? (size_t)c->discard : sizeof c->in;
        read_into(c, c->in, n);
        break;
    }
    case RS_PROBE: read_into(c, c->probe, sizeof c->probe); break;
    case RS_SPLICE:
        if (c->blen[c->fill]) return; /* both buffers wait for the peer's write */
        if (!c->bufs[c->fill] && !(c->bufs[c->fill] = goblin__alloc(SPLICE_BYTES))) {
            goblin__relay_close_conn(c);
            return;
        }
        read_into(c, c->bufs[c->fill], SPLICE_BYTES);
        break;
    case RS_NONE: break;
    }
}

void goblin__relay_expect(rconn *c, enum rstate s, size_t got, size_t want) {
    c->rs = s;
    c->got = got;
    c->want = want;
}

/* ---- the first message ------------------------------------------------------------------ */

static double node_weight(relay *r, const rconn *n) {
    int32_t same = 0;
    for (rconn *d = r->conns; d; d = d->next)
        if (!d->closing && d->role == R_CONTROL && d->lab == n->lab) same++;
    return (double)(n->weight ? n->weight : 1) / (same ? same : 1);
}

static uint32_t lab_weight(relay *r, int64_t lab) {
    const goblin_hub_config *cfg = &r->h->cfg;
    if (!cfg->n_lab_weights) return 1;
    goblin_hub_account a;
    if (goblin_hub_store_account_get(r->h->store, lab, &a) != GOBLIN_OK) return 1;
    for (size_t i = 0; i < cfg->n_lab_weights; i++)
        if (!strcmp(cfg->lab_weights[i].email, a.email)) return cfg->lab_weights[i].weight;
    return 1;
}

/* The key's id and account, checked as goblin_hub_key_verify does, without touching
 * the hub's error text (the web pages use it from their own threads). */
static goblin_err check_key(relay *r, const char *key, goblin_hub_node_key *out) {
    if (strlen(key) != GOBLIN_HUB_NODE_KEY_SIZE - 1 || strncmp(key, "gbk1_", 5) || key[21] != '_')
        return GOBLIN_EAUTH;
    uint64_t id = 0;
    for (int i = 0; i < 16; i++) {
        char ch = key[5 + i];
        int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (v < 0) return GOBLIN_EAUTH;
        id = id << 4 | (uint64_t)v;
    }
    for (int i = 0; i < 64; i++) {
        char ch = key[22 + i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return GOBLIN_EAUTH;
    }
    uint8_t d[32];
    if (goblin__hub_digest(r->h->secret, "node-key", key + 22, NULL, d, NULL, 0)) return GOBLIN_EAUTH;
    goblin_err e = goblin_hub_store_key_check(r->h->store, (int64_t)id, d, out);
    memset(d, 0, sizeof d);
    return e ? GOBLIN_EAUTH : GOBLIN_OK;
}

static void splice(rconn *d, rconn *w) {
    relay *r = d->r;
    d->role = R_DATA;
    r->n_pending--;
    d->peer = w;
    w->peer = d;
    d->node = w->node;
    w->reserved = false;
    w->node->lent++;
    r->st.workers_lent_total++;
    /* The worker's HELLO, held since it came, goes first. */
    if (d->outq_len + w->first_len > sizeof d->outq) {
        goblin__relay_close_conn(d);
        return;
    }
    memcpy(d->outq + d->outq_len, w->in, w->first_len);
    d->outq_len += w->first_len;
    d->rs = RS_SPLICE;
    w->seq = ++r->next_seq; /* the order lent, for taking back the newest */
    if (!w->rx_busy) goblin__relay_expect(w, RS_PROOF, 0, 8); /* else its probe read is in flight: what it brings is read */
    rx_kick(d);
    rx_kick(w);
    goblin__relay_tx_kick(d);
}

static void first_message(rconn *c, const uint8_t *m, size_t len) {
    relay *r = c->r;
    char why[320];
    if (goblin__part_is(m, len)) { /* the tail of a result from an earlier connection */
        goblin__relay_expect(c, RS_LEN, 0, 8);
        return;
    }
    if (len >= 4 && !memcmp(m, "GBLW", 4)) {
        /* Only the header is the hub's business: the body (catalogue, token) is the
         * lab node's to judge, and lab nodes may run newer catalogues than the hub. */
        goblin__wire_limits lim;
        goblin__wire_limits_default(&lim);
        lim.max_message_bytes = FIRST_MAX;
        goblin__wire_header wh;
        goblin_err e = goblin__wire_header_decode(m, len, &lim, &wh, why, sizeof why);
        if (!e && wh.body_len != len - GOBLIN_WIRE_HEADER_SIZE) {
            e = GOBLIN_EFORMAT;
            snprintf(why, sizeof why, "a HELLO whose header says %llu bytes of body, %zu came",
                     (unsigned long long)wh.body_len, len - GOBLIN_WIRE_HEADER_SIZE);
        }
        if (!e && wh.type != GOBLIN_WIRE_TYPE_HELLO) {
            e = GOBLIN_EPROTO;
            snprintf(why, sizeof why, "%s before HELLO", goblin__wire_type_name((goblin__wire_type)wh.type));
        }
        if (e) {
            r->st.workers_refused++;
            char text[400];
            snprintf(text, sizeof text, "goblin-hub: %s", why);
            goblin__relay_refuse(c, true, e, text);
            return;
        }
        if ((uint32_t)r->n_workers >= r->h->cfg.machines_max_workers) {
            r->st.workers_refused++;
            goblin__relay_refuse(c, true, GOBLIN_EBUSY, "goblin-hub: it holds as many workers as it takes; try later");
            return;
        }
        c->role = R_WORKER;
        r->n_pending--;
        r->n_workers++;
        c->first_len = 8 + (size_t)c->frame_len;
        /* HELLO's body: u32 catalogue, u32 software, u32 backends (capability bits). */
        if (len >= GOBLIN_WIRE_HEADER_SIZE + 12) {
            const uint8_t *be = m + GOBLIN_WIRE_HEADER_SIZE + 8;
            uint32_t bits = (uint32_t)be[0] | (uint32_t)be[1] << 8 | (uint32_t)be[2] << 16 | (uint32_t)be[3] << 24;
            c->intro_ok = (bits & GOBLIN_WIRE_CAP_INTRO) != 0;
        }
        c->seq = ++r->next_seq;
        goblin__relay_expect(c, RS_PROBE, 0, 0);
        assign(r);
        return;
    }
    goblin__hubw_msg hm;
    goblin_err e = goblin__hubw_decode(m, len, &hm, why, sizeof why);
    if (e) {
        r->st.connections_refused++;
        if (len >= 4 && !memcmp(m, "GBLH", 4)) goblin__relay_refuse(c, false, e, why);
        else goblin__relay_close_conn(c); /* neither a worker nor a node: nothing to say to it */
        return;
    }
    if (hm.type == GOBLIN__HUBW_NODE_HELLO) {
        goblin_hub_node_key k;
        e = check_key(r, hm.key, &k);
        memset(hm.key, 0, sizeof hm.key);
        if (e) {
            r->st.nodes_refused++;
            goblin__relay_refuse(c, false, GOBLIN_EAUTH, "goblin-hub: the node key is unknown, wrong or revoked");
            return;
        }
        if ((uint32_t)r->n_nodes >= r->h->cfg.machines_max_nodes) {
            r->st.nodes_refused++;
            goblin__relay_refuse(c, false, GOBLIN_EBUSY, "goblin-hub: as many lab nodes as it takes are connected");
            return;
        }
        c->role = R_CONTROL;
        r->n_pending--;
        r->n_nodes++;
        c->lab = k.account_id;
        c->key_id = k.id;
        c->max_workers = hm.max_workers;
        c->weight = lab_weight(r, k.account_id);
        c->last_heard_ms = goblin__now_ms();
        goblin__hubw_msg a;
        memset(&a, 0, sizeof a);
        a.type = GOBLIN__HUBW_NODE_ACK;
        a.lab = c->lab;
        a.weight = c->weight;
        goblin__relay_out_hub(c, &a);
        goblin__relay_tx_kick(c);
        goblin__relay_expect(c, RS_LEN, 0, 8);
        assign(r);
        return;
    }
    if (hm.type == GOBLIN__HUBW_ATTACH) {
        int32_t hit = -1;
        for (int32_t i = 0; i < r->n_tickets; i++) /* every ticket compared, in constant time */
            if (goblin__hub_equal(r->tickets[i].t, hm.ticket, GOBLIN__HUBW_TICKET)) hit = i;
        if (hit < 0) {
            r->st.tickets_refused++;
            goblin__relay_refuse(c, false, GOBLIN_EAUTH, "goblin-hub: no such ticket (used, expired or never issued)");
            return;
        }
        ticket t = r->tickets[hit];
        r->tickets[hit] = r->tickets[--r->n_tickets];
        t.node->opening--;
        splice(c, t.worker);
        assign(r);
        return;
    }
    r->st.connections_refused++;
    goblin__relay_refuse(c, false, GOBLIN_EPROTO, "goblin-hub: a connection starts with NODE_HELLO, ATTACH or a worker's HELLO");
}

/* ---- reputation: the identities quarantined on the network ------------------------------ */

static int id_cmp(const void *a, const void *b) { return memcmp(a, b, GOBLIN__HUBW_IDENTITY); }

bool goblin__relay_qset_has(const relay *r, const uint8_t id[GOBLIN__HUBW_IDENTITY]) {
    return r->n_qset && bsearch(id, r->qset, (size_t)r->n_qset, sizeof *r->qset, id_cmp);
}

static goblin_err collect_identity(void *ctx, const goblin_hub_quarantine *q) {
    relay *r = ctx;
    uint8_t id[GOBLIN__HUBW_IDENTITY];
    if (!goblin__hubw_identity_parse(q->subject, id)) return GOBLIN_OK; /* an owner, not a key */
    if (r->n_qset == r->cap_qset) {
        int64_t c = r->cap_qset ? 2 * (int64_t)r->cap_qset : 64;
        if (c > INT32_MAX / 2) return GOBLIN_ENOMEM;
        uint8_t (*p)[GOBLIN__HUBW_IDENTITY] = goblin__alloc((size_t)c * sizeof *r->qset);
        if (!p) return GOBLIN_ENOMEM;
        if (r->n_qset) memcpy(p, r->qset, (size_t)r->n_qset * sizeof *r->qset);
        goblin__free(r->qset);
        r->qset = p;
        r->cap_qset = (int32_t)c;
    }
    memcpy(r->qset[r->n_qset++], id, GOBLIN__HUBW_IDENTITY);
    return GOBLIN_OK;
}

/* Read the quarantines in force again (a report, the operator's lift on the pages or
 * from `goblin-hub quarantines lift` in another process, another hub instance on the
 * same PostgreSQL) and end the splices of workers whose PROOF named one of them. On a
 * store error the set read last stays. Under r->mu. */
static void qset_read(relay *r, int64_t now) {
    r->qset_read_ms = now;
    uint8_t (*keep)[GOBLIN__HUBW_IDENTITY] = r->qset;
    int32_t keep_n = r->n_qset, keep_cap = r->cap_qset;
    r->qset = NULL;
    r->n_qset = r->cap_qset = 0;
    if (goblin_hub_store_quarantine_each(r->h->store, false, collect_identity, r)) {
        goblin__free(r->qset);
        r->qset = keep;
        r->n_qset = keep_n;
        r->cap_qset = keep_cap;
        return;
    }
    goblin__free(keep);
    if (r->n_qset > 1) qsort(r->qset, (size_t)r->n_qset, sizeof *r->qset, id_cmp);
    for (rconn *c = r->conns; c; c = c->next)
        if (!c->closing && c->role == R_WORKER && c->has_identity && goblin__relay_qset_has(r, c->identity)) {
            r->st.workers_ended_quarantined++;
            goblin__relay_close_conn(c); /* redialing, its PROOF is refused below */
        }
    for (rconn *n = r->conns; n; n = n->next) {
        if (n->closing || n->role != R_CONTROL) continue;
        for (int32_t i = n->n_directs - 1; i >= 0; i--)
            if (goblin__relay_qset_has(r, n->directs[i].id)) {
                r->st.workers_ended_quarantined++;
                goblin__relay_send_end(n, n->directs[i].id); /* redialing the hub, it is refused at its PROOF */
                goblin__relay_direct_del(n, i);
            }
    }
}

/* Node @p n (a control connection) may report WORK of identity @p id from now on. */
void goblin__relay_remember_lent(rconn *n, const uint8_t id[GOBLIN__HUBW_IDENTITY]) {
    for (int32_t i = 0; i < n->n_lent_ids; i++)
        if (!memcmp(n->lent_ids[i], id, GOBLIN__HUBW_IDENTITY)) return;
    if (!n->lent_ids && !(n->lent_ids = goblin__alloc(LENT_IDS * sizeof *n->lent_ids))) return;
    int32_t at = n->n_lent_ids < LENT_IDS ? n->n_lent_ids++ : n->next_lent_id;
    n->next_lent_id = (at + 1) % LENT_IDS;
    memcpy(n->lent_ids[at], id, GOBLIN__HUBW_IDENTITY);
}

static bool was_lent(const rconn *n, const uint8_t id[GOBLIN__HUBW_IDENTITY]) {
    for (int32_t i = 0; i < n->n_lent_ids; i++)
        if (!memcmp(n->lent_ids[i], id, GOBLIN__HUBW_IDENTITY)) return true;
    return false;
}

/* Worker @p w's identity linked to a volunteer's account (docs/hub.md, "Volunteers"):
 * the node it is lent to is told the owner, sent on the control connection before the
 * PROOF goes on (the node may still admit it first: it then takes the owner at once). */
void goblin__relay_tell_owner(rconn *w) {
    char hex[2 * GOBLIN__HUBW_IDENTITY + 1];
    goblin__hubw_identity_hex(w->identity, hex);
    goblin_hub_link l;
    if (goblin_hub_store_link_get(w->r->h->store, hex, &l) != GOBLIN_OK || l.account_id <= 0) return;
    goblin__hubw_msg o;
    memset(&o, 0, sizeof o);
    o.type = GOBLIN__HUBW_OWNER;
    memcpy(o.identity, w->identity, GOBLIN__HUBW_IDENTITY);
    o.owner = l.account_id;
    goblin__relay_out_hub(w->node, &o);
    goblin__relay_tx_kick(w->node);
    w->r->st.owners_told++;
}

/* The worker's bytes in in[0..got] go on to the node, and the splice copies the rest. */
static void proof_pass(rconn *c) {
    if (!c->peer) {
        goblin__relay_close_conn(c);
        return;
    }
    if (!c->bufs[0] && !(c->bufs[0] = goblin__alloc(SPLICE_BYTES))) {
        goblin__relay_close_conn(c);
        return;
    }
    memcpy(c->bufs[0], c->in, c->got);
    c->blen[0] = c->got;
    c->boff[0] = 0;
    c->fill = 1;
    c->send = 0;
    c->rs = RS_SPLICE;
    memset(c->in, 0, sizeof c->in);
    goblin__relay_tx_kick(c->peer);
}

/* A spliced worker's first frame after its HELLO, read whole before it goes on: the
 * answer to the node's CHALLENGE, a PROOF naming the worker's public key. Its identity
 * (the key's SHA-256, as the node computes it) under a quarantine in force: the data
 * connection is closed and the worker refused, whichever lab it was lent to. The hub
 * does not check the signature (the node does, against its own nonce): a worker
 * claiming a quarantined key it does not hold is refused, which harms only itself; one
 * holding a quarantined key and claiming another fails the node's check. Anything but
 * a well-formed PROOF goes on unread, for the node to judge. Under r->mu. */
static void proof_read(rconn *c) {
    relay *r = c->r;
    if (c->want == 8) {
        uint64_t fl = get_be64(c->in);
        if (fl < 4 + GOBLIN_WIRE_HEADER_SIZE || fl > FIRST_MAX) {
            if (c->introducing) goblin__relay_intro_proof(c, NULL);
            else proof_pass(c);
            return;
        }
        goblin__relay_expect(c, RS_PROOF, c->got, 8 + (size_t)fl);
        if (c->got < c->want) return;
    }
    goblin__wire_limits lim;
    goblin__wire_limits_default(&lim);
    lim.max_message_bytes = FIRST_MAX;
    goblin__wire_msg *m = NULL;
    if (c->introducing) {
        if (goblin__wire_decode(c->in + 12, c->want - 12, &lim, 0, &m, NULL, 0) != GOBLIN_OK) m = NULL;
        goblin__relay_intro_proof(c, m);
        goblin__wire_msg_free(m);
        return;
    }
    if (goblin__wire_decode(c->in + 12, c->want - 12, &lim, 0, &m, NULL, 0) == GOBLIN_OK &&
        m->type == GOBLIN_WIRE_TYPE_PROOF &&
        goblin__tls_sha256_two(m->body.proof.key, m->body.proof.key_len, NULL, 0, c->identity) == 0)
        c->has_identity = true;
    goblin__wire_msg_free(m);
    if (!c->has_identity || !goblin__relay_qset_has(r, c->identity)) {
        if (c->has_identity && c->node) {
            goblin__relay_remember_lent(c->node, c->identity);
            goblin__relay_tell_owner(c);
        }
        proof_pass(c);
        return;
    }
    rconn *d = c->peer;
    if (d) {
        d->peer = NULL;
        c->peer = NULL;
        if (c->node) c->node->lent--;
        c->node = NULL;
        goblin__relay_close_conn(d);
    }
    r->st.workers_refused_quarantined++;
    goblin__relay_refuse(c, true, GOBLIN_EAUTH,
           "goblin-hub: this worker's identity is quarantined on the network (a lab node caught a wrong result "
           "from it); the hub's operator can lift it");
}

/* Counting one reporter's quarantines in force. */
typedef struct by_reporter {
    const char *who, *subject;
    int32_t n;
    bool lifted; /* the operator lifted this reporter's quarantine of subject */
} by_reporter;

static goblin_err count_reporter(void *ctx, const goblin_hub_quarantine *q) {
    by_reporter *b = ctx;
    if (strcmp(q->reported_by, b->who)) return GOBLIN_OK;
    if (!q->lifted) b->n++;
    else if (!strcmp(q->subject, b->subject)) b->lifted = true;
    return GOBLIN_OK;
}

/* A lab node's QUARANTINE: record it once (subject = the identity's fingerprint, 64 hex
 * digits; reported_by = "node key N"), at most REPORTS_PER_KEY in force per key. A lab
 * can only add; only the operator lifts (docs/hub.md, "Reputation"). Past the bound a
 * report is counted and dropped. False: the store failed; the control connection closes. */
static bool record_quarantine(rconn *c, const goblin__hubw_msg *hm) {
    relay *r = c->r;
    char subject[2 * GOBLIN__HUBW_IDENTITY + 1], who[64];
    goblin__hubw_identity_hex(hm->identity, subject);
    snprintf(who, sizeof who, "node key %lld", (long long)c->key_id);
    bool already = false;
    if (goblin_hub_store_quarantined(r->h->store, subject, &already)) return false;
    if (already) {
        r->st.quarantines_repeated++;
        return true;
    }
    by_reporter b = {who, subject, 0, false};
    if (goblin_hub_store_quarantine_each(r->h->store, true, count_reporter, &b)) return false;
    if (b.lifted) { /* the node resends its list on every link; the operator's lift stands */
        r->st.quarantines_repeated++;
        return true;
    }
    if (b.n >= REPORTS_PER_KEY) { /* refused, but the node stays linked: it may simply have many */
        r->st.quarantines_refused++;
        return true;
    }
    int64_t id;
    if (goblin_hub_store_quarantine_add(r->h->store, subject, hm->reason_text, who, (int64_t)time(NULL), &id))
        return false;
    r->st.quarantines_recorded++;
    qset_read(r, goblin__now_ms()); /* lent to no lab from now on, its splices ended */
    return true;
}

/* A lab node's WORK: what a worker the hub lent it did. Counted only for an identity
 * lent to this control connection (a lab cannot write another's volunteers' counts);
 * others are counted as refused and dropped, the node stays linked. False: the store
 * failed. */
static bool record_work(rconn *c, const goblin__hubw_msg *hm) {
    relay *r = c->r;
    if (!was_lent(c, hm->identity)) {
        r->st.work_reports_refused++;
        return true;
    }
    char hex[2 * GOBLIN__HUBW_IDENTITY + 1];
    goblin__hubw_identity_hex(hm->identity, hex);
    if (goblin_hub_store_work_add(r->h->store, hex, hm->tasks, hm->accepted, hm->rejected)) return false;
    r->st.work_reports++;
    r->st.tasks_reported += hm->tasks;
    r->st.results_accepted += hm->accepted;
    r->st.results_rejected += hm->rejected;
    int64_t sec = goblin__now_ms() / 1000;
    int b = (int)(sec % 60);
    if (r->rate_sec[b] != sec) {
        r->rate_sec[b] = sec;
        r->rate_tasks[b] = 0;
    }
    r->rate_tasks[b] += hm->tasks;
    return true;
}

static void control_message(rconn *c, const uint8_t *m, size_t len) {
    goblin__hubw_msg hm;
    char why[256];
    goblin_err e = goblin__hubw_decode(m, len, &hm, why, sizeof why);
    if (!e && hm.type == GOBLIN__HUBW_QUARANTINE) {
        if (!record_quarantine(c, &hm)) {
            goblin__relay_close_conn(c);
            return;
        }
    } else if (!e && hm.type == GOBLIN__HUBW_WORK) {
        if (!record_work(c, &hm)) {
            goblin__relay_close_conn(c);
            return;
        }
    } else if (!e && hm.type == GOBLIN__HUBW_NODE_DIRECT) {
        goblin__relay_direct_offer(c, &hm);
    } else if (!e && (hm.type == GOBLIN__HUBW_READY || hm.type == GOBLIN__HUBW_LEFT)) {
        goblin__relay_intro_answer(c, &hm);
    } else if (e || hm.type != GOBLIN__HUBW_HEARTBEAT) {
        if (e && len >= GOBLIN__HUBW_HEADER && m[6] == GOBLIN__HUBW_QUARANTINE) c->r->st.quarantines_refused++;
        goblin__relay_close_conn(c);
        return;
    }
    c->last_heard_ms = goblin__now_ms();
    goblin__relay_expect(c, RS_LEN, 0, 8);
}

static void rx_cb(void *arg) {
    rconn *c = arg;
    relay *r = c->r;
    pthread_mutex_lock(&r->mu);
    c->rx_busy = false;
    int rv = nng_aio_result(c->rx);
    size_t n = nng_aio_count(c->rx);
    if (rv || c->closing || n == 0) {
        goblin__relay_close_conn(c);
        goto out;
    }
    switch (c->rs) {
    case RS_PROBE:
        /* spliced meanwhile, or challenged for an introduction: the worker's next frame */
        if (c->role == R_WORKER && (c->peer || (c->introducing && !c->intro_sent))) {
            memcpy(c->in, c->probe, n);
            goblin__relay_expect(c, RS_PROOF, n, 8);
            if (n >= 8) proof_read(c);
            rx_kick(c);
            goto out;
        }
        goblin__relay_close_conn(c); /* a waiting worker says nothing */
        goto out;
    case RS_SPLICE:
        c->blen[c->fill] = n;
        c->boff[c->fill] = 0;
        c->fill ^= 1;
        if (!c->peer) {
            goblin__relay_close_conn(c);
            goto out;
        }
        goblin__relay_tx_kick(c->peer);
        rx_kick(c); /* into the other buffer, if the peer is done with it */
        goto out;
    case RS_DISCARD:
        c->discard -= n;
        if (!c->discard) goblin__relay_expect(c, RS_LEN, 0, 8);
        rx_kick(c);
        goto out;
    default: break;
    }
    c->got += n;
    if (c->got < c->want) {
        rx_kick(c);
        goto out;
    }
    if (c->rs == RS_HS) {
        static const uint8_t pair1[8] = {0, 'S', 'P', 0, 0, 0x11, 0, 0};
        if (memcmp(c->in, pair1, 8)) {
            r->st.connections_refused++;
            goblin__relay_close_conn(c); /* not nng's pair1: not ours to answer */
            goto out;
        }
        memcpy(c->outq + c->outq_len, pair1, 8);
        c->outq_len += 8;
        goblin__relay_tx_kick(c);
        goblin__relay_expect(c, RS_LEN, 0, 8);
    } else if (c->rs == RS_LEN) {
        c->frame_len = get_be64(c->in);
        if (c->frame_len < 4 + 4) {
            r->st.connections_refused++;
            goblin__relay_close_conn(c);
            goto out;
        }
        if (c->frame_len <= FIRST_MAX) goblin__relay_expect(c, RS_BODY, 8, 8 + (size_t)c->frame_len);
        else if (c->role == R_UNKNOWN && c->frame_len <= GOBLIN__PART_WIRE_MAX) goblin__relay_expect(c, RS_PEEK, 8, 16);
        else {
            r->st.connections_refused++;
            if (c->role == R_CONTROL) goblin__relay_close_conn(c);
            else goblin__relay_refuse(c, true, GOBLIN_ELIMIT, "goblin-hub: a first message is at most 2048 bytes");
            goto out;
        }
    } else if (c->rs == RS_PEEK) {
        if (memcmp(c->in + 12, "GBLP", 4)) {
            r->st.connections_refused++;
            goblin__relay_refuse(c, true, GOBLIN_ELIMIT, "goblin-hub: a first message is at most 2048 bytes");
            goto out;
        }
        c->discard = c->frame_len - 8; /* a part left over from a lost connection: skipped */
        c->rs = RS_DISCARD;
    } else if (c->rs == RS_BODY) {
        uint32_t hops = (uint32_t)c->in[8] << 24 | (uint32_t)c->in[9] << 16 | (uint32_t)c->in[10] << 8 | c->in[11];
        const uint8_t *m = c->in + 12;
        size_t len = (size_t)c->frame_len - 4;
        if (hops > 0xff) {
            r->st.connections_refused++;
            goblin__relay_close_conn(c);
            goto out;
        }
        if (c->role == R_CONTROL) control_message(c, m, len);
        else first_message(c, m, len);
    } else if (c->rs == RS_PROOF) {
        proof_read(c);
    }
    rx_kick(c);
out:
    pthread_mutex_unlock(&r->mu);
}

/* ---- lending -------------------------------------------------------------------------- */

static double score(relay *r, const rconn *n, int extra) {
    return (double)(n->lent + n->opening + extra) / node_weight(r, n);
}

/* Lend waiting workers, oldest first, each to the node furthest below its share. */
static void assign(relay *r) {
    for (;;) {
        rconn *w = NULL, *best = NULL;
        for (rconn *c = r->conns; c; c = c->next)
            if (!c->closing && !c->refusing && c->role == R_WORKER && !c->peer && !c->reserved &&
                (!w || c->seq < w->seq))
                w = c;
        if (!w) return;
        double bs = 0;
        for (rconn *n = r->conns; n; n = n->next) {
            if (n->closing || n->role != R_CONTROL || n->opening >= OPENING_MAX) continue;
            if (n->max_workers && (uint32_t)(n->lent + n->opening) >= n->max_workers) continue;
            double s = score(r, n, 1);
            if (!best || s < bs) {
                best = n;
                bs = s;
            }
        }
        if (!best) return;
        /* The worker dials the node itself: a tls+tcp:// address, or a loopback tcp://
         * one when the worker and the node both dialed the hub on loopback (one machine). */
        bool direct = best->direct_url[0] && (goblin__transport_url_is_tls(best->direct_url) ||
                                              (w->origin_kind == 0 && best->origin_kind == 0));
        if (w->intro_ok && direct) {
            if (!goblin__relay_intro_start(w, best)) return;
            continue;
        }
        if (r->n_tickets == r->cap_tickets) {
            int64_t cap = r->cap_tickets;
            int32_t need = r->n_tickets + 1;
            int64_t nc = cap ? cap * 2 : 16;
            while (nc < need) nc *= 2;
            ticket *t = goblin__alloc((size_t)nc * sizeof *t);
            if (!t) return;
            if (r->tickets) memcpy(t, r->tickets, (size_t)r->n_tickets * sizeof *t);
            goblin__free(r->tickets);
            r->tickets = t;
            r->cap_tickets = (int32_t)nc;
        }
        ticket *t = &r->tickets[r->n_tickets];
        if (goblin__hub_random(t->t, sizeof t->t, NULL, 0)) return;
        t->node = best;
        t->worker = w;
        t->deadline_ms = goblin__now_ms() + TICKET_MS;
        r->n_tickets++;
        w->reserved = true;
        w->node = best;
        best->opening++;
        goblin__hubw_msg o;
        memset(&o, 0, sizeof o);
        o.type = GOBLIN__HUBW_OPEN;
        memcpy(o.ticket, t->t, sizeof o.ticket);
        o.origin_kind = w->origin_kind; /* the node's origin rule sees the volunteer, not the hub */
        memcpy(o.origin, w->origin, sizeof o.origin);
        goblin__relay_out_hub(best, &o);
        memset(o.ticket, 0, sizeof o.ticket);
        goblin__relay_tx_kick(best);
    }
}

/* Take one worker back from the node furthest above its share when another node is
 * below it and no worker waits: its connection is closed and, redialing, it is lent to
 * the node below (docs/hub.md, "Fair share"). */
static void rebalance(relay *r, int64_t now) {
    if (now < r->rebalance_after_ms) return;
    for (rconn *c = r->conns; c; c = c->next)
        if (!c->closing && !c->refusing && c->role == R_WORKER && !c->peer) return; /* waiting or reserved */
    rconn *lo = NULL, *hi = NULL;
    for (rconn *n = r->conns; n; n = n->next) {
        if (n->closing || n->role != R_CONTROL) continue;
        bool room = !n->max_workers || (uint32_t)(n->lent + n->opening) < n->max_workers;
        if (room && (!lo || score(r, n, 1) < score(r, lo, 1))) lo = n;
        if (n->lent > 0 && (!hi || score(r, n, 0) > score(r, hi, 0))) hi = n;
    }
    if (!lo || !hi || lo == hi || !(score(r, hi, 0) > score(r, lo, 1))) return;
    rconn *w = NULL;
    for (rconn *c = r->conns; c; c = c->next)
        if (!c->closing && c->role == R_WORKER && c->peer && c->node == hi && (!w || c->seq > w->seq)) w = c;
    int32_t di = -1; /* the newest introduced worker, if newer */
    for (int32_t i = 0; i < hi->n_directs; i++)
        if ((di < 0 || hi->directs[i].seq > hi->directs[di].seq) && (!w || hi->directs[i].seq > w->seq)) di = i;
    if (!w && di < 0) return;
    r->st.workers_taken_back++;
    r->rebalance_after_ms = now + REBALANCE_COOLDOWN_MS;
    if (di >= 0) { /* the node ends it; it redials the hub and is lent below */
        goblin__relay_send_end(hi, hi->directs[di].id);
        goblin__relay_direct_del(hi, di);
        return;
    }
    goblin__relay_close_conn(w);
}

/* ---- accepting, the reaper ------------------------------------------------------------------ */

/* The /24 or /48 of remote address @p sa as OPEN carries it (hub_wire.h); kind 0 for a
 * local one (127.0.0.0/8, ::1, or not IP). An IPv4-mapped IPv6 address is IPv4. */
static bool origin_of(const nng_sockaddr *sa, uint8_t *kind, uint8_t prefix[7]) {
    *kind = 0;
    memset(prefix, 0, 7);
    const uint8_t *v4 = NULL;
    uint8_t b4[4];
    if (sa->s_family == NNG_AF_INET) {
        memcpy(b4, &sa->s_in.sa_addr, 4); /* network order */
        v4 = b4;
    } else if (sa->s_family == NNG_AF_INET6) {
        const uint8_t *a = sa->s_in6.sa_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        static const uint8_t loop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        if (!memcmp(a, loop, 16)) return false;
        if (!memcmp(a, mapped, 12)) v4 = a + 12;
        else {
            *kind = 6;
            memcpy(prefix, a, 6);
            return true;
        }
    } else {
        return false;
    }
    if (v4[0] == 127) return false;
    *kind = 4;
    memcpy(prefix, v4, 3);
    return true;
}

static rconn *conn_new(relay *r, nng_stream *s) {
    rconn *c = goblin__calloc(1, sizeof *c);
    if (!c) return NULL;
    c->r = r;
    c->s = s;
    if (nng_aio_alloc(&c->rx, rx_cb, c) || nng_aio_alloc(&c->tx, tx_cb, c)) {
        nng_aio_free(c->rx);
        goblin__free(c);
        return NULL;
    }
    c->since_ms = goblin__now_ms();
    nng_sockaddr sa;
    bool net = nng_stream_get_addr(s, NNG_OPT_REMADDR, &sa) == 0 && origin_of(&sa, &c->origin_kind, c->origin);
    if (!net && r->test_addr_set) origin_of(&r->test_addr, &c->origin_kind, c->origin);
    c->next = r->conns;
    if (r->conns) r->conns->prev = c;
    r->conns = c;
    r->n_pending++;
    goblin__relay_expect(c, RS_HS, 0, 8);
    return c;
}

static void accept_cb(void *arg) {
    relay *r = arg;
    int rv = nng_aio_result(r->acc);
    pthread_mutex_lock(&r->mu);
    if (rv == 0) {
        nng_stream *s = nng_aio_get_output(r->acc, 0);
        rconn *c = conn_new(r, s);
        if (!c) {
            nng_stream_close(s);
            nng_stream_free(s); /* never started: nothing of ours waits on it */
        } else if (r->n_pending > PENDING_MAX) {
            r->st.connections_refused++;
            goblin__relay_close_conn(c);
        } else {
            rx_kick(c);
        }
    }
    bool again = !r->stopping && rv != NNG_ECLOSED;
    if (again) nng_stream_listener_accept(r->l, r->acc);
    pthread_mutex_unlock(&r->mu);
}

static void housekeeping(relay *r, int64_t now) {
    for (int32_t i = 0; i < r->n_tickets;) {
        ticket *t = &r->tickets[i];
        if (t->deadline_ms > now) {
            i++;
            continue;
        }
        t->node->opening--;
        t->worker->reserved = false;
        t->worker->node = NULL;
        *t = r->tickets[--r->n_tickets];
    }
    for (rconn *c = r->conns; c; c = c->next) {
        if (c->closing) continue;
        if ((c->role == R_UNKNOWN && now - c->since_ms > PENDING_MS) ||
            (c->role == R_CONTROL && now - c->last_heard_ms > CONTROL_SILENT_MS) ||
            (c->role == R_WORKER && c->introducing && now - c->intro_ms > TICKET_MS))
            goblin__relay_close_conn(c);
    }
    if (now - r->qset_read_ms >= QSET_REFRESH_MS) qset_read(r, now);
    assign(r);
    rebalance(r, now);
}

static void *reaper_main(void *arg) {
    relay *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        int64_t now = goblin__now_ms();
        if (!r->stopping) housekeeping(r, now);
        /* Connections closed together (the two halves of a splice) are freed together,
         * once every aio of the batch has stopped: a write may be sending from the
         * other half's buffer until then. */
        rconn *batch = NULL;
        for (rconn *c = r->conns, *nx; c; c = nx) {
            nx = c->next;
            if (r->stopping && !c->closing) goblin__relay_close_conn(c);
            if (!c->closing) continue;
            if (c->prev) c->prev->next = c->next;
            else r->conns = c->next;
            if (c->next) c->next->prev = c->prev;
            c->next = batch;
            batch = c;
        }
        bool stop = r->stopping && r->acc_stopped && !r->conns;
        pthread_mutex_unlock(&r->mu);
        for (rconn *c = batch; c; c = c->next) nng_stream_close(c->s);
        for (rconn *c = batch; c; c = c->next) {
            nng_aio_stop(c->rx);
            nng_aio_stop(c->tx);
        }
        for (rconn *c = batch, *nx; c; c = nx) {
            nx = c->next;
            nng_aio_free(c->rx);
            nng_aio_free(c->tx);
            nng_stream_free(c->s);
            goblin__free(c->bufs[0]);
            goblin__free(c->bufs[1]);
            goblin__free(c->lent_ids);
            goblin__free(c->directs);
            memset(c->in, 0, sizeof c->in);
            goblin__free(c);
        }
        pthread_mutex_lock(&r->mu);
        if (stop) break;
        if (batch) continue;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- the public calls ------------------------------------------------------------------------ */

goblin_err goblin_hub_serve_machines(goblin_hub *h) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    char *msg = h->error;
    size_t cap = sizeof h->error;
    const char *url = h->cfg.machines;
    if (h->relay) return goblin__errf(msg, cap, GOBLIN_ESTATE, "the machines address is served already");
    if (!url[0]) return goblin__errf(msg, cap, GOBLIN_EINVAL, "hub.conf has no machines address");
    bool tls = goblin__transport_url_is_tls(url);
    if (!tls && !(goblin__transport_url_is_plain_tcp(url) && goblin__transport_url_is_local(url)))
        return goblin__errf(msg, cap, GOBLIN_EINVAL,
                            "machines = %s: use tls+tcp:// (plain tcp:// only on a loopback address)", url);
    relay *r = goblin__calloc(1, sizeof *r);
    if (!r) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    r->h = h;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rv = nng_stream_listener_alloc(&r->l, url);
    goblin_err e = GOBLIN_OK;
    if (rv) e = goblin__errf(msg, cap, goblin__transport_err(rv), "cannot listen on %s: %s", url, nng_strerror(rv));
    if (!e && tls) {
        char cert[4200], key[4200], why[384];
        snprintf(cert, sizeof cert, "%s/%s", h->dir, GOBLIN_TLS_CERT_FILE);
        snprintf(key, sizeof key, "%s/%s", h->dir, GOBLIN_TLS_KEY_FILE);
        nng_tls_config *tc = NULL;
        e = goblin__tls_server_config(cert, key, &tc, why, sizeof why);
        if (e) goblin__errf(msg, cap, e, "machines: %s", why);
        else {
            rv = nng_stream_listener_set_ptr(r->l, NNG_OPT_TLS_CONFIG, tc);
            nng_tls_config_free(tc);
            if (rv) e = goblin__errf(msg, cap, GOBLIN_ECRYPTO, "machines: TLS configuration: %s", nng_strerror(rv));
        }
    }
    if (!e && (rv = nng_stream_listener_listen(r->l)) != 0)
        e = goblin__errf(msg, cap, goblin__transport_err(rv), "cannot listen on %s: %s", url, nng_strerror(rv));
    if (!e) nng_stream_listener_get_int(r->l, NNG_OPT_TCP_BOUND_PORT, &r->port);
    if (!e && nng_aio_alloc(&r->acc, accept_cb, r)) e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
    if (!e && pthread_create(&r->reaper, NULL, reaper_main, r)) e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "no thread");
    if (e) {
        if (r->l) nng_stream_listener_free(r->l);
        nng_aio_free(r->acc);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        goblin__free(r);
        return e;
    }
    r->have_thread = true;
    h->relay = r;
    pthread_mutex_lock(&r->mu);
    qset_read(r, goblin__now_ms());
    pthread_mutex_unlock(&r->mu);
    nng_stream_listener_accept(r->l, r->acc);
    return GOBLIN_OK;
}

void goblin__hub_relay_stop(goblin_hub *h) {
    relay *r = h ? h->relay : NULL;
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_mutex_unlock(&r->mu);
    nng_stream_listener_close(r->l);
    nng_aio_stop(r->acc);
    pthread_mutex_lock(&r->mu);
    r->acc_stopped = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->reaper, NULL);
    nng_aio_free(r->acc);
    nng_stream_listener_free(r->l);
    for (int32_t i = 0; i < r->n_tickets; i++) memset(r->tickets[i].t, 0, sizeof r->tickets[i].t);
    goblin__free(r->tickets);
    goblin__free(r->qset);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    goblin__free(r);
    h->relay = NULL;
}

goblin_err goblin_hub_machines_port(const goblin_hub *h, int *out) {
    if (!h || !out) return GOBLIN_EINVAL;
    if (!h->relay) return GOBLIN_ESTATE;
    *out = h->relay->port;
    return GOBLIN_OK;
}

goblin_err goblin_hub_machines_stats_get(goblin_hub *h, goblin_hub_machines_stats *out) {
    if (!h || !out) return GOBLIN_EINVAL;
    relay *r = h->relay;
    if (!r) return GOBLIN_ESTATE;
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    out->nodes_connected = r->n_nodes;
    out->workers_waiting = out->workers_lent = out->workers_direct = out->nodes_direct = 0;
    out->labs_active = 0;
    for (rconn *c = r->conns; c; c = c->next) {
        if (c->closing) continue;
        if (c->role == R_CONTROL) {
            bool first = true; /* the first live control connection of its lab */
            for (rconn *d = r->conns; d != c && first; d = d->next)
                if (!d->closing && d->role == R_CONTROL && d->lab == c->lab) first = false;
            out->labs_active += first;
        }
        if (c->role == R_CONTROL) {
            out->workers_direct += c->n_directs;
            out->nodes_direct += c->direct_url[0] != 0;
        }
        if (c->role != R_WORKER) continue;
        if (c->peer) out->workers_lent++;
        else out->workers_waiting++;
    }
    int64_t sec = goblin__now_ms() / 1000, sum = 0;
    for (int b = 0; b < 60; b++)
        if (r->rate_sec[b] > sec - 60 && r->rate_sec[b] <= sec) sum += r->rate_tasks[b];
    out->tasks_per_second = (double)sum / 60.0;
    pthread_mutex_unlock(&r->mu);
    return GOBLIN_OK;
}

static void origin_text(uint8_t kind, const uint8_t *p, char *buf, size_t cap) {
    if (kind == 4) snprintf(buf, cap, "%u.%u.%u.0/24", p[0], p[1], p[2]);
    else if (kind == 6)
        snprintf(buf, cap, "%x:%x:%x::/48", (unsigned)(p[0] << 8 | p[1]), (unsigned)(p[2] << 8 | p[3]),
                 (unsigned)(p[4] << 8 | p[5]));
    else snprintf(buf, cap, "local");
}

goblin_err goblin_hub_machines_each(goblin_hub *h, int32_t max,
                                    goblin_err (*each)(void *ctx, const goblin_hub_machine *m), void *ctx) {
    if (!h || !each || max < 0) return GOBLIN_EINVAL;
    relay *r = h->relay;
    if (!r) return GOBLIN_ESTATE;
    goblin_hub_machine *rows = goblin__calloc((size_t)max * 2 + 1, sizeof *rows);
    if (!rows) return GOBLIN_ENOMEM;
    int32_t nn = 0, nw = 0;
    pthread_mutex_lock(&r->mu);
    for (int pass = 0; pass < 2; pass++)
        for (rconn *c = r->conns; c; c = c->next) {
            if (c->closing || c->role != (pass ? R_WORKER : R_CONTROL)) continue;
            if (pass ? nw >= max : nn >= max) continue;
            goblin_hub_machine *m = &rows[pass ? max + nw++ : nn++];
            m->node = !pass;
            if (!pass) {
                m->lab = c->lab;
                m->key_id = c->key_id;
                m->weight = c->weight;
                m->lent = c->lent;
            } else {
                m->lab = c->peer && c->node ? c->node->lab : 0;
                if (c->has_identity) goblin__hubw_identity_hex(c->identity, m->identity);
                origin_text(c->origin_kind, c->origin, m->origin, sizeof m->origin);
            }
        }
    /* Workers introduced to a node: connected to it, not to the hub. */
    for (rconn *c = r->conns; c; c = c->next) {
        if (c->closing || c->role != R_CONTROL) continue;
        for (int32_t i = 0; i < c->n_directs && nw < max; i++) {
            goblin_hub_machine *m = &rows[max + nw++];
            m->lab = c->lab;
            m->direct = true;
            goblin__hubw_identity_hex(c->directs[i].id, m->identity);
            origin_text(c->directs[i].origin_kind, c->directs[i].origin, m->origin, sizeof m->origin);
        }
    }
    pthread_mutex_unlock(&r->mu);
    goblin_err e = GOBLIN_OK;
    for (int32_t i = 0; i < nn && !e; i++) e = each(ctx, &rows[i]);
    for (int32_t i = 0; i < nw && !e; i++) e = each(ctx, &rows[max + i]);
    goblin__free(rows);
    return e;
}

goblin_err goblin_hub_machines_lab_lent(goblin_hub *h, int64_t lab, int64_t *out) {
    if (!h || !out) return GOBLIN_EINVAL;
    relay *r = h->relay;
    if (!r) return GOBLIN_ESTATE;
    int64_t n = 0;
    pthread_mutex_lock(&r->mu);
    for (rconn *c = r->conns; c; c = c->next)
        if (!c->closing && c->role == R_CONTROL && c->lab == lab) n += c->lent;
    pthread_mutex_unlock(&r->mu);
    *out = n;
    return GOBLIN_OK;
}

goblin_err goblin__hub_relay_test_addr(goblin_hub *h, const char *ip) {
    relay *r = h ? h->relay : NULL;
    if (!r) return h ? GOBLIN_ESTATE : GOBLIN_EINVAL;
    nng_sockaddr sa;
    memset(&sa, 0, sizeof sa);
    if (ip) {
        struct in_addr a4;
        struct in6_addr a6;
        if (inet_pton(AF_INET, ip, &a4) == 1) {
            sa.s_in.sa_family = NNG_AF_INET;
            sa.s_in.sa_addr = a4.s_addr;
        } else if (inet_pton(AF_INET6, ip, &a6) == 1) {
            sa.s_in6.sa_family = NNG_AF_INET6;
            memcpy(sa.s_in6.sa_addr, &a6, 16);
        } else {
            return GOBLIN_EINVAL;
        }
    }
    pthread_mutex_lock(&r->mu);
    r->test_addr_set = ip != NULL;
    r->test_addr = sa;
    pthread_mutex_unlock(&r->mu);
    return GOBLIN_OK;
}
