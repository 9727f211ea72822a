/* libgoblin/hub/access.c - access requests and lab-node keys.
 *
 * A node key is "gbk1_" + the key's id (16 hex digits, not secret) + "_" + 32 random
 * bytes in hex; the store keeps the HMAC of the random part only, so the text is shown
 * once and never again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "hub_impl.h"

#define ERR h->error, sizeof h->error

static int64_t now_or(int64_t now) { return now > 0 ? now : (int64_t)time(NULL); }

static goblin_err store_err(goblin_hub *h, goblin_err e) {
    snprintf(h->error, sizeof h->error, "%s", goblin_hub_store_error(h->store));
    return e;
}

typedef struct tally {
    int64_t n, pending, live;
} tally;

static goblin_err tally_request(void *ctx, const goblin_hub_access_request *r) {
    tally *t = ctx;
    t->n++;
    t->pending += r->status == GOBLIN_HUB_REQUEST_PENDING;
    return GOBLIN_OK;
}

goblin_err goblin_hub_request_file(goblin_hub *h, int64_t account_id, const goblin_hub_access_request *r,
                                   int64_t now, int64_t *id) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    if (!r || !id) return goblin__errf(ERR, GOBLIN_EINVAL, "a request and id are required");
    tally t = {0};
    goblin_err e = goblin_hub_store_request_each(h->store, account_id, -1, 1000, tally_request, &t);
    if (e) return store_err(h, e);
    if (t.pending) return goblin__errf(ERR, GOBLIN_EBUSY, "your earlier request is still waiting for a decision");
    if (t.n >= h->cfg.max_requests)
        return goblin__errf(ERR, GOBLIN_ELIMIT, "an account may file at most %u requests", (unsigned)h->cfg.max_requests);
    if ((e = goblin_hub_store_request_add(h->store, account_id, r, now_or(now), id))) return store_err(h, e);
    return GOBLIN_OK;
}

goblin_err goblin_hub_request_decide(goblin_hub *h, int64_t id, bool approve, const char *note, int64_t now) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    goblin_err e = goblin_hub_store_request_decide(
        h->store, id, approve ? GOBLIN_HUB_REQUEST_APPROVED : GOBLIN_HUB_REQUEST_DENIED, note ? note : "",
        now_or(now));
    if (e) return store_err(h, e);
    goblin_hub_access_request *r = goblin__alloc(sizeof *r);
    char *body = goblin__alloc(4096);
    if (!r || !body) {
        e = goblin__errf(ERR, GOBLIN_ENOMEM, "out of memory (the decision is stored, not mailed)");
        goto out;
    }
    if ((e = goblin_hub_store_request_get(h->store, id, r))) {
        store_err(h, e);
        goto out;
    }
    /* The note is the operator's text: a line of its own, after the hub's words. */
    snprintf(body, 4096,
             "Your request for access to the GPU Goblin network (request %lld) was %s.\n\n%s%s%s"
             "%s\n",
             (long long)id, approve ? "approved" : "declined", r->note[0] ? "Note from the operator:\n" : "",
             r->note, r->note[0] ? "\n\n" : "",
             approve ? "Sign in and open your account page to make a key for your lab's node." : "");
    char mmsg[400];
    e = goblin__hub_mail(&h->cfg, r->email, approve ? "Your GPU Goblin access request was approved"
                                                    : "Your GPU Goblin access request was declined",
                         body, mmsg, sizeof mmsg);
    if (e) goblin__errf(ERR, GOBLIN_EIO, "decision stored, but not mailed: %s", mmsg);
out:
    goblin__free(r);
    goblin__free(body);
    return e;
}

static goblin_err tally_key(void *ctx, const goblin_hub_node_key *k) {
    ((tally *)ctx)->live += k->revoked == 0;
    return GOBLIN_OK;
}

goblin_err goblin_hub_key_create(goblin_hub *h, int64_t account_id, const char *label, int64_t now,
                                 char *key_out, int64_t *id) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    if (!key_out) return goblin__errf(ERR, GOBLIN_EINVAL, "key_out is required");
    bool ok = false;
    goblin_err e = goblin_hub_store_account_approved(h->store, account_id, &ok);
    if (e) return store_err(h, e);
    if (!ok) return goblin__errf(ERR, GOBLIN_EAUTH, "node keys are for researchers whose request was approved");
    tally t = {0};
    if ((e = goblin_hub_store_key_each(h->store, account_id, tally_key, &t))) return store_err(h, e);
    if (t.live >= h->cfg.max_keys)
        return goblin__errf(ERR, GOBLIN_ELIMIT, "at most %u live node keys; revoke one first", (unsigned)h->cfg.max_keys);
    char sec[65];
    uint8_t d[32];
    int64_t kid;
    if ((e = goblin__hub_random_hex(sec, 32, ERR)) || (e = goblin__hub_digest(h->secret, "node-key", sec, NULL, d, ERR)))
        return e;
    if ((e = goblin_hub_store_key_add(h->store, account_id, label, d, now_or(now), &kid))) {
        memset(sec, 0, sizeof sec);
        return store_err(h, e);
    }
    snprintf(key_out, GOBLIN_HUB_NODE_KEY_SIZE, "gbk1_%016llx_%s", (unsigned long long)kid, sec);
    memset(sec, 0, sizeof sec);
    if (id) *id = kid;
    return GOBLIN_OK;
}

goblin_err goblin_hub_key_verify(goblin_hub *h, const char *key, goblin_hub_node_key *out) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    if (!key || !out || strnlen(key, GOBLIN_HUB_NODE_KEY_SIZE) != GOBLIN_HUB_NODE_KEY_SIZE - 1 ||
        strncmp(key, "gbk1_", 5) || key[21] != '_')
        return goblin__errf(ERR, GOBLIN_EINVAL, "not a node key (gbk1_<16 hex>_<64 hex>)");
    char idhex[17], *end;
    memcpy(idhex, key + 5, 16);
    idhex[16] = 0;
    unsigned long long kid = strtoull(idhex, &end, 16);
    for (int i = 0; i < 64; i++) {
        char c = key[22 + i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return goblin__errf(ERR, GOBLIN_EINVAL, "not a node key");
    }
    if (*end) return goblin__errf(ERR, GOBLIN_EINVAL, "not a node key");
    uint8_t d[32];
    goblin_err e = goblin__hub_digest(h->secret, "node-key", key + 22, NULL, d, ERR);
    if (e) return e;
    if ((e = goblin_hub_store_key_check(h->store, (int64_t)kid, d, out))) return store_err(h, e);
    return GOBLIN_OK;
}
