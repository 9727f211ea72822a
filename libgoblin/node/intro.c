/* libgoblin/node/intro.c - direct introductions (docs/hub.md, "Direct introductions"):
 * workers the hub lends that dial the node itself instead of going through the relay.
 *
 * The hub checks a worker's PROOF, sends the node INTRODUCE (a ticket and the identity),
 * and the worker INTRODUCE (the node's address and the same ticket). The worker's HELLO
 * on the node then carries the ticket as its token: it is taken once, whatever the
 * node's join-token rule, and the worker's PROOF must show the identity the hub named,
 * so a ticket copied to another key admits nothing. An introduced worker counts as the
 * hub's (WORK reports, fair share): when it leaves, or its ticket expires unused, the
 * hub link says LEFT; the hub's END or the loss of the hub link sends it back. */
#include "node_impl.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "proto/hub_wire.h"

#define INTRO_MAX 1024          /* tickets outstanding */
#define INTRO_TICKET_MS 15000   /* a ticket's life: the worker dials within it */

struct goblin__intro_ticket {
    uint8_t t[GOBLIN__HUBW_TICKET];
    char fp[GOBLIN__WKEY_FP_HEX];
    int64_t deadline_ms;
};

static void queue_left(goblin_node *n, const char *fp, const uint8_t *ticket) {
    int32_t cap = (int32_t)(sizeof n->intro_left / sizeof n->intro_left[0]);
    if (n->n_intro_left == cap) return; /* the link is behind: the hub's record waits for END or the link */
    goblin__intro_left *l = &n->intro_left[n->n_intro_left++];
    memcpy(l->fp, fp, GOBLIN__WKEY_FP_HEX);
    memcpy(l->ticket, ticket, sizeof l->ticket);
}

static void drop_ticket(goblin_node *n, int32_t i) {
    memset(&n->intros[i], 0, sizeof n->intros[i]);
    n->intros[i] = n->intros[--n->n_intros];
}

goblin_err goblin__node_intro_add(goblin_node *n, const uint8_t *ticket, const char *fp) {
    if (!n->intros && !(n->intros = goblin__calloc(INTRO_MAX, sizeof *n->intros))) return GOBLIN_ENOMEM;
    /* A newer ticket for the same identity replaces the old one (the worker came back
     * to the hub and was introduced again). */
    for (int32_t i = 0; i < n->n_intros; i++)
        if (!strcmp(n->intros[i].fp, fp)) {
            drop_ticket(n, i);
            break;
        }
    if (n->n_intros == INTRO_MAX) return GOBLIN_ELIMIT;
    struct goblin__intro_ticket *t = &n->intros[n->n_intros++];
    memcpy(t->t, ticket, GOBLIN__HUBW_TICKET);
    memcpy(t->fp, fp, GOBLIN__WKEY_FP_HEX);
    t->deadline_ms = goblin__now_ms() + INTRO_TICKET_MS;
    if (!n->intro_deadline_min || t->deadline_ms < n->intro_deadline_min) n->intro_deadline_min = t->deadline_ms;
    return GOBLIN_OK;
}

bool goblin__node_intro_take(goblin_node *n, int32_t pi, const uint8_t *tok, uint32_t len) {
    if (len != GOBLIN__HUBW_TICKET || !n->n_intros) return false;
    int32_t hit = -1;
    for (int32_t i = 0; i < n->n_intros; i++) { /* every ticket compared, in constant time */
        uint8_t d = 0;
        for (int k = 0; k < GOBLIN__HUBW_TICKET; k++) d |= (uint8_t)(n->intros[i].t[k] ^ tok[k]);
        if (!d) hit = i;
    }
    if (hit < 0) return false;
    memcpy(n->peers[pi].intro_fp, n->intros[hit].fp, GOBLIN__WKEY_FP_HEX);
    memcpy(n->peers[pi].intro_ticket, n->intros[hit].t, sizeof n->peers[pi].intro_ticket);
    drop_ticket(n, hit);
    return true;
}

bool goblin__node_intro_admitted(goblin_node *n, int32_t pi, char *why, size_t cap) {
    peer *p = &n->peers[pi];
    if (!p->intro_fp[0]) return true;
    const ident *id = goblin__node_peer_ident(n, pi);
    if (!id || strcmp(id->fp, p->intro_fp)) {
        n->intro_tickets_refused++;
        snprintf(why, cap, "the hub introduced identity %.16s with this ticket, the PROOF shows %.16s", p->intro_fp,
                 id ? id->fp : "?");
        /* The hub's record of the introduced identity ends: it never joined. */
        queue_left(n, p->intro_fp, p->intro_ticket);
        p->intro_fp[0] = 0;
        return false;
    }
    p->introduced = true; /* relayed (the hub's volunteer) once its origin is read */
    return true;
}

void goblin__node_intro_gone(goblin_node *n, int32_t pi) {
    peer *p = &n->peers[pi];
    if (p->intro_fp[0]) queue_left(n, p->intro_fp, p->intro_ticket); /* also between HELLO and PROOF */
    p->introduced = false;
    p->intro_fp[0] = 0;
    memset(p->intro_ticket, 0, sizeof p->intro_ticket);
}

void goblin__node_intro_expire(goblin_node *n, int64_t now) {
    if (!n->intro_deadline_min || now < n->intro_deadline_min) return;
    int64_t m = 0;
    for (int32_t i = n->n_intros - 1; i >= 0; i--) {
        if (n->intros[i].deadline_ms <= now) {
            goblin__node_log(n, GOBLIN_LOG_INFO, "hub: the ticket of introduced worker %.16s expired unused",
                             n->intros[i].fp);
            queue_left(n, n->intros[i].fp, n->intros[i].t);
            drop_ticket(n, i);
        }
    }
    for (int32_t i = 0; i < n->n_intros; i++)
        if (!m || n->intros[i].deadline_ms < m) m = n->intros[i].deadline_ms;
    n->intro_deadline_min = m;
}

void goblin__node_intro_end(goblin_node *n, const char *fp) {
    for (int32_t i = n->n_intros - 1; i >= 0; i--)
        if (!strcmp(n->intros[i].fp, fp)) drop_ticket(n, i);
    for (int32_t i = 0; i < n->n_peers; i++) {
        peer *p = &n->peers[i];
        if (!p->used || !p->connected || !p->intro_fp[0] || strcmp(p->intro_fp, fp)) continue;
        p->introduced = false; /* the hub ended its record itself: no LEFT */
        p->intro_fp[0] = 0;
        goblin__node_drop_peer(n, i, "the hub took this introduced worker back");
    }
}

void goblin__node_intro_drop_all(goblin_node *n) {
    while (n->n_intros) drop_ticket(n, n->n_intros - 1);
    n->intro_deadline_min = 0;
    n->n_intro_left = 0;
    for (int32_t i = 0; i < n->n_peers; i++) {
        peer *p = &n->peers[i];
        if (!p->used || !p->connected || !p->intro_fp[0]) continue;
        p->introduced = false;
        p->intro_fp[0] = 0;
        goblin__node_drop_peer(n, i, "the hub link ended: introduced workers go back to the hub");
    }
}

int32_t goblin__node_intro_left_take(goblin_node *n, goblin__intro_left *out, int32_t max) {
    int32_t k = n->n_intro_left < max ? n->n_intro_left : max;
    memcpy(out, n->intro_left, (size_t)k * sizeof *out);
    memmove(n->intro_left, n->intro_left + k, (size_t)(n->n_intro_left - k) * sizeof *out);
    n->n_intro_left -= k;
    return k;
}
