/* libgoblin/hub/relay_intro.c - direct introductions (docs/hub.md, "Direct
 * introductions"): a lab node that offered an address (NODE_DIRECT) gets the workers
 * lent to it introduced instead of relayed. The hub checks the worker's PROOF itself,
 * the node keeps a ticket for that identity (INTRODUCE, READY), the worker gets the
 * address and the ticket (its INTRODUCE) and its connection to the hub ends; the
 * node's LEFT and the hub's END keep the lab's share right. Under the relay's lock. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "net/crypto.h"
#include "net/tls_impl.h"
#include "net/transport.h"
#include "relay_impl.h"

int32_t goblin__relay_direct_find(const rconn *n, const uint8_t id[GOBLIN__HUBW_IDENTITY]) {
    for (int32_t i = 0; i < n->n_directs; i++)
        if (!memcmp(n->directs[i].id, id, GOBLIN__HUBW_IDENTITY)) return i;
    return -1;
}

void goblin__relay_direct_del(rconn *n, int32_t i) {
    memset(n->directs[i].ticket, 0, sizeof n->directs[i].ticket);
    n->directs[i] = n->directs[--n->n_directs];
    n->lent--;
}

/* Identity @p id is back at the hub (or gone): its introduction ends wherever it was. */
static void direct_forget(relay *r, const uint8_t id[GOBLIN__HUBW_IDENTITY]) {
    for (rconn *n = r->conns; n; n = n->next) {
        if (n->closing || n->role != R_CONTROL) continue;
        int32_t i = goblin__relay_direct_find(n, id);
        if (i >= 0) goblin__relay_direct_del(n, i);
    }
}

/* END to node @p n: the introduced worker @p id goes (and comes back to the hub). */
void goblin__relay_send_end(rconn *n, const uint8_t id[GOBLIN__HUBW_IDENTITY]) {
    goblin__hubw_msg m;
    memset(&m, 0, sizeof m);
    m.type = GOBLIN__HUBW_END;
    memcpy(m.identity, id, GOBLIN__HUBW_IDENTITY);
    goblin__relay_out_hub(n, &m);
    goblin__relay_tx_kick(n);
}

static void out_wire(rconn *c, const goblin__wire_msg *m) {
    uint8_t b[GOBLIN_WIRE_HEADER_SIZE + 64 + 8 + GOBLIN_WIRE_MAX_URL_BYTES + 8];
    size_t n = 0;
    if (goblin__wire_encode_into(m, b, sizeof b, &n) == GOBLIN_OK) goblin__relay_out_frame(c, b, n);
    memset(b, 0, sizeof b);
}

/* Waiting worker @p w (its HELLO offered GOBLIN_WIRE_CAP_INTRO) is to be introduced to
 * @p node, which offered a direct address: the hub challenges it itself, since it names
 * the identity to the node and checks it against the network's quarantines. The PROOF
 * signs this nonce and w's HELLO, as a node's would. False: no randomness. */
bool goblin__relay_intro_start(rconn *w, rconn *node) {
    if (goblin__hub_random(w->nonce, sizeof w->nonce, NULL, 0)) return false;
    goblin__wkey_hash(w->in + 12, w->first_len - 12, w->hello_hash);
    w->reserved = true;
    w->node = node;
    node->opening++;
    w->introducing = true;
    w->intro_sent = false;
    w->intro_ms = goblin__now_ms();
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_CHALLENGE);
    memcpy(m.body.challenge.nonce, w->nonce, sizeof w->nonce);
    out_wire(w, &m);
    goblin__relay_tx_kick(w);
    return true;
}

/* The PROOF of introducing worker @p c (@p m: what it sent, decoded, or NULL). Checked
 * in full: a wrong proof or a quarantined identity is refused here. Else the node is
 * told (INTRODUCE: a fresh ticket and the identity) and the worker waits for READY. */
void goblin__relay_intro_proof(rconn *c, const goblin__wire_msg *m) {
    relay *r = c->r;
    char detail[256] = "";
    uint8_t digest[32];
    bool ok = m && m->type == GOBLIN_WIRE_TYPE_PROOF && m->body.proof.key_len == GOBLIN__WKEY_PUBLIC_BYTES &&
              goblin__wkey_proof_digest(c->nonce, c->hello_hash, m->body.proof.key, digest) == GOBLIN_OK &&
              goblin__wkey_verify(m->body.proof.key, m->body.proof.key_len, digest, m->body.proof.sig,
                                  m->body.proof.sig_len, detail, sizeof detail) == GOBLIN_OK &&
              goblin__tls_sha256_two(m->body.proof.key, m->body.proof.key_len, NULL, 0, c->identity) == 0;
    memset(c->nonce, 0, sizeof c->nonce);
    memset(c->in, 0, sizeof c->in);
    if (!ok) {
        r->st.intro_proofs_refused++;
        goblin__relay_refuse(c, true, GOBLIN_EAUTH, "goblin-hub: the identity proof failed");
        return;
    }
    c->has_identity = true;
    if (goblin__relay_qset_has(r, c->identity)) {
        r->st.workers_refused_quarantined++;
        goblin__relay_refuse(c, true, GOBLIN_EAUTH,
               "goblin-hub: this worker's identity is quarantined on the network (a lab node caught a wrong result "
               "from it); the hub's operator can lift it");
        return;
    }
    rconn *node = c->node;
    if (!node || node->closing || goblin__hub_random(c->ticket, sizeof c->ticket, NULL, 0)) {
        goblin__relay_close_conn(c); /* it redials and waits again */
        return;
    }
    direct_forget(r, c->identity); /* it is here, so no longer there */
    goblin__relay_remember_lent(node, c->identity);
    goblin__relay_tell_owner(c);
    goblin__hubw_msg o;
    memset(&o, 0, sizeof o);
    o.type = GOBLIN__HUBW_INTRODUCE;
    memcpy(o.ticket, c->ticket, sizeof o.ticket);
    memcpy(o.identity, c->identity, sizeof o.identity);
    o.origin_kind = c->origin_kind;
    memcpy(o.origin, c->origin, sizeof o.origin);
    goblin__relay_out_hub(node, &o);
    memset(o.ticket, 0, sizeof o.ticket);
    goblin__relay_tx_kick(node);
    c->intro_sent = true;
    c->intro_ms = goblin__now_ms();
    goblin__relay_expect(c, RS_PROBE, 0, 0); /* it says nothing more to the hub */
}

/* Node @p node kept the ticket (READY): worker @p w gets the node's address and the
 * ticket, and its connection to the hub ends once that is sent. */
static void intro_finish(rconn *w) {
    relay *r = w->r;
    rconn *node = w->node;
    node->opening--;
    w->introducing = false;
    w->reserved = false;
    w->node = NULL;
    if (node->n_directs == node->cap_directs) {
        int32_t nc = node->cap_directs ? 2 * node->cap_directs : 16;
        struct direct_rec *d = nc <= DIRECT_MAX ? goblin__alloc((size_t)nc * sizeof *d) : NULL;
        if (!d) {
            goblin__relay_send_end(node, w->identity);
            goblin__relay_close_conn(w);
            return;
        }
        if (node->n_directs) memcpy(d, node->directs, (size_t)node->n_directs * sizeof *d);
        goblin__free(node->directs);
        node->directs = d;
        node->cap_directs = nc;
    }
    struct direct_rec *d = &node->directs[node->n_directs++];
    memcpy(d->id, w->identity, sizeof d->id);
    memcpy(d->ticket, w->ticket, sizeof d->ticket);
    d->seq = ++r->next_seq;
    d->origin_kind = w->origin_kind;
    memcpy(d->origin, w->origin, sizeof d->origin);
    node->lent++;
    r->st.workers_lent_total++;
    r->st.workers_introduced++;
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_INTRODUCE);
    memcpy(m.body.introduce.ticket, w->ticket, GOBLIN_WIRE_TICKET_BYTES);
    memcpy(m.body.introduce.fingerprint, node->direct_fp, sizeof m.body.introduce.fingerprint);
    m.body.introduce.url = node->direct_url;
    out_wire(w, &m);
    memset(&m, 0, sizeof m);
    memset(w->ticket, 0, sizeof w->ticket);
    w->refusing = true; /* closed once sent */
    w->rs = RS_NONE;
    goblin__relay_tx_kick(w);
}

/* NODE_DIRECT: node @p c's lent workers may dial it at this address. Taken only in a
 * form a worker follows (tls+tcp:// with a fingerprint, tcp:// on loopback; the latter is
 * used only for workers on the hub's loopback too, assign). */
void goblin__relay_direct_offer(rconn *c, const goblin__hubw_msg *hm) {
    static const uint8_t none[GOBLIN__HUBW_FINGERPRINT] = {0};
    bool tls = goblin__transport_url_is_tls(hm->url);
    bool fp = memcmp(hm->fingerprint, none, sizeof none) != 0;
    if ((tls && fp) || (!tls && !fp && goblin__transport_url_is_plain_tcp(hm->url) &&
                        goblin__transport_url_is_local(hm->url))) {
        snprintf(c->direct_url, sizeof c->direct_url, "%s", hm->url);
        memcpy(c->direct_fp, hm->fingerprint, sizeof c->direct_fp);
    } else {
        c->r->st.direct_offers_refused++;
    }
}

/* READY or LEFT from node @p c about one introduction (identity and ticket): an older
 * introduction of the same identity is another ticket, and is left alone. */
void goblin__relay_intro_answer(rconn *c, const goblin__hubw_msg *hm) {
    relay *r = c->r;
    rconn *w = NULL;
    for (rconn *x = r->conns; x && !w; x = x->next)
        if (!x->closing && x->role == R_WORKER && x->introducing && x->intro_sent && x->node == c &&
            !memcmp(x->identity, hm->identity, GOBLIN__HUBW_IDENTITY) &&
            goblin__hub_equal(x->ticket, hm->ticket, GOBLIN__HUBW_TICKET))
            w = x;
    if (hm->type == GOBLIN__HUBW_READY) {
        if (w) intro_finish(w);
        return;
    }
    int32_t i = goblin__relay_direct_find(c, hm->identity);
    if (i >= 0 && goblin__hub_equal(c->directs[i].ticket, hm->ticket, GOBLIN__HUBW_TICKET)) {
        goblin__relay_direct_del(c, i);
        r->st.direct_left++;
    }
    if (w) goblin__relay_close_conn(w); /* the node could not keep its ticket: it redials */
}

