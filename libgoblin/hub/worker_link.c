/* libgoblin/hub/worker_link.c - volunteers link their workers' identities to their
 * account (docs/hub.md, "Volunteers: linking workers").
 *
 * Each account has a link code, derived as HMAC(secret, "link-code" 0 account 0 seed)
 * from a random seed the store keeps, so a copy of the database alone does not show it;
 * drawing a new seed retires the old code. `goblin-worker link CODE` signs the code
 * with the worker's key (net/worker_link.h); the hub links the identity only when the
 * signature verifies and the code is this account's current one, so a statement made
 * for one account cannot link the worker into another. The store keeps the fingerprint
 * and the owner, never the statement or the key. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/errf.h"
#include "hub_impl.h"
#include "net/worker_link.h"

_Static_assert(GOBLIN_HUB_LINK_CODE_SIZE == GOBLIN__WLINK_CODE_LEN + 1, "link code size");

#define ERR h->error, sizeof h->error

static int64_t now_or(int64_t now) { return now > 0 ? now : (int64_t)time(NULL); }

static goblin_err store_err(goblin_hub *h, goblin_err e) {
    snprintf(h->error, sizeof h->error, "%s", goblin_hub_store_error(h->store));
    return e;
}

static goblin_err derive(goblin_hub *h, int64_t account_id, const uint8_t seed[32], char *out) {
    char id[24], seed_hex[65];
    static const char hex[] = "0123456789abcdef";
    snprintf(id, sizeof id, "%lld", (long long)account_id);
    for (int i = 0; i < 32; i++) {
        seed_hex[2 * i] = hex[seed[i] >> 4];
        seed_hex[2 * i + 1] = hex[seed[i] & 15];
    }
    seed_hex[64] = 0;
    uint8_t d[32];
    goblin_err e = goblin__hub_digest(h->secret, "link-code", id, seed_hex, d, ERR);
    if (e) return e;
    for (int i = 0; i < GOBLIN__WLINK_CODE_LEN / 2; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[GOBLIN__WLINK_CODE_LEN] = 0;
    return GOBLIN_OK;
}

static goblin_err draw(goblin_hub *h, int64_t account_id, int64_t now, char *code_out) {
    uint8_t seed[32];
    goblin_err e = goblin__hub_random(seed, sizeof seed, ERR);
    if (e) return e;
    if ((e = goblin_hub_store_link_seed_set(h->store, account_id, seed, now_or(now)))) return store_err(h, e);
    return derive(h, account_id, seed, code_out);
}

goblin_err goblin_hub_link_code(goblin_hub *h, int64_t account_id, int64_t now, char *code_out) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    if (!code_out) return goblin__errf(ERR, GOBLIN_EINVAL, "code_out is required");
    uint8_t seed[32];
    goblin_err e = goblin_hub_store_link_seed_get(h->store, account_id, seed);
    if (e == GOBLIN_ENOTFOUND) return draw(h, account_id, now, code_out);
    if (e) return store_err(h, e);
    return derive(h, account_id, seed, code_out);
}

goblin_err goblin_hub_link_code_redraw(goblin_hub *h, int64_t account_id, int64_t now, char *code_out) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    char code[GOBLIN_HUB_LINK_CODE_SIZE];
    goblin_err e = draw(h, account_id, now, code);
    if (!e && code_out) memcpy(code_out, code, sizeof code);
    return e;
}

goblin_err goblin_hub_worker_link(goblin_hub *h, int64_t account_id, const char *statement, int64_t now,
                                  char *fingerprint_out) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    size_t n = statement ? strnlen(statement, GOBLIN_HUB_LINK_STATEMENT_MAX + 1) : 0;
    if (!n || n > GOBLIN_HUB_LINK_STATEMENT_MAX)
        return goblin__errf(ERR, GOBLIN_EINVAL, "a link statement is one line of at most %d characters",
                            GOBLIN_HUB_LINK_STATEMENT_MAX);
    char made_for[GOBLIN__WLINK_CODE_LEN + 1], fp[GOBLIN__WKEY_FP_HEX], code[GOBLIN_HUB_LINK_CODE_SIZE];
    goblin_err e = goblin__wlink_check(statement, n, made_for, fp, ERR);
    if (e == GOBLIN_EFORMAT) return GOBLIN_EINVAL; /* the reader's message stays */
    if (e) return e;
    if ((e = goblin_hub_link_code(h, account_id, now, code))) return e;
    if (!goblin__hub_equal(made_for, code, GOBLIN__WLINK_CODE_LEN))
        return goblin__errf(ERR, GOBLIN_EAUTH, "this statement was made for another link code (another account's, "
                            "or this one's before it was redrawn); run goblin-worker link with the code shown on "
                            "this page");
    if ((e = goblin_hub_store_link_add(h->store, account_id, fp, now_or(now)))) return store_err(h, e);
    if (fingerprint_out) memcpy(fingerprint_out, fp, sizeof fp);
    return GOBLIN_OK;
}

goblin_err goblin_hub_worker_unlink(goblin_hub *h, int64_t account_id, const char *fingerprint) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    goblin_err e = goblin_hub_store_link_remove(h->store, account_id, fingerprint);
    return e ? store_err(h, e) : GOBLIN_OK;
}
