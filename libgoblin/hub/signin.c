/* libgoblin/hub/signin.c - email sign-in and sessions.
 *
 * A sign-in is a code (8 digits, typed) and a link token (32 random bytes, clicked),
 * mailed together; the store keeps their HMAC digests. Either one works once, until
 * it expires, and not after failures_per_code wrong codes. Every candidate of an
 * address is compared, in constant time, before the answer is known, and every kind of
 * refusal reads the same to the client. Limits count events in the store within the
 * rate window: sign-ins started per address and per client, wrong codes per address
 * and per client (a wrong code costs its client even when the address is unknown).
 *
 * The form token of a cookie (session, or the pre-session cookie the sign-in pages
 * set) is the HMAC of that cookie, so it needs no storage and a page of another site,
 * which cannot read the cookie, cannot make it. */
#include <stdio.h>
#include <time.h>
#include <string.h>

#include "base/errf.h"
#include "hub_impl.h"

#define ERR h->error, sizeof h->error

static int64_t now_or(int64_t now) { return now > 0 ? now : (int64_t)time(NULL); }

/* The store's error as the hub's. */
static goblin_err store_err(goblin_hub *h, goblin_err e) {
    snprintf(h->error, sizeof h->error, "%s", goblin_hub_store_error(h->store));
    return e;
}

/* The count of @p kind events of @p who within the window; ELIMIT at @p limit. */
static goblin_err under_limit(goblin_hub *h, const char *kind, const char *who, uint32_t limit, int64_t now,
                              const char *what) {
    char key[GOBLIN_HUB_KEY_MAX + 1];
    snprintf(key, sizeof key, "%s:%s", kind, who);
    int64_t n = 0;
    goblin_err e = goblin_hub_store_event_count(h->store, key, now - h->cfg.rate_window_s, &n);
    if (e) return store_err(h, e);
    if (n >= (int64_t)limit)
        return goblin__errf(ERR, GOBLIN_ELIMIT, "too many %s; try again in %u minutes", what,
                            (unsigned)((h->cfg.rate_window_s + 59) / 60));
    return GOBLIN_OK;
}

static goblin_err count(goblin_hub *h, const char *kind, const char *who, int64_t now) {
    char key[GOBLIN_HUB_KEY_MAX + 1];
    snprintf(key, sizeof key, "%s:%s", kind, who);
    /* Forget what no window can see any more. */
    goblin_err e = goblin_hub_store_event_add(h->store, key, now, now - h->cfg.rate_window_s - 1);
    return e ? store_err(h, e) : GOBLIN_OK;
}

static const char *client_or(const char *client) { return client && *client ? client : "-"; }

goblin_err goblin__hub_signin_issue(goblin_hub *h, const char *email, const char *client, int64_t now,
                                    char *code_out, char *token_out) {
    client = client_or(client);
    if (strlen(client) > 64) return goblin__errf(ERR, GOBLIN_EINVAL, "client address too long");
    goblin_err e;
    if ((e = under_limit(h, "send", email, h->cfg.codes_per_address, now, "sign-in mails for this address")) ||
        (e = under_limit(h, "send-client", client, h->cfg.codes_per_client, now,
                         "sign-in mails from this client")))
        return e;
    uint8_t r[4];
    if ((e = goblin__hub_random(r, sizeof r, ERR))) return e;
    uint32_t v = ((uint32_t)r[0] << 24 | (uint32_t)r[1] << 16 | (uint32_t)r[2] << 8 | r[3]) % 100000000u;
    snprintf(code_out, GOBLIN_HUB_CODE_SIZE, "%08u", (unsigned)v);
    if ((e = goblin__hub_random_hex(token_out, 32, ERR))) return e;
    uint8_t cd[32], ld[32];
    if ((e = goblin__hub_digest(h->secret, "signin-code", email, code_out, cd, ERR)) ||
        (e = goblin__hub_digest(h->secret, "signin-link", email, token_out, ld, ERR)))
        return e;
    if ((e = goblin_hub_store_signin_add(h->store, email, cd, ld, now, now + h->cfg.code_ttl_s)))
        return store_err(h, e);
    if ((e = count(h, "send", email, now)) || (e = count(h, "send-client", client, now))) return e;
    return GOBLIN_OK;
}

goblin_err goblin_hub_signin_start(goblin_hub *h, const char *email, const char *client, int64_t now) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    char low[GOBLIN_HUB_EMAIL_MAX + 1];
    if (!goblin__hub_email_ok(email, low)) return goblin__errf(ERR, GOBLIN_EINVAL, "that is not an email address");
    now = now_or(now);
    char code[GOBLIN_HUB_CODE_SIZE], token[GOBLIN_HUB_TOKEN_SIZE];
    goblin_err e = goblin__hub_signin_issue(h, low, client, now, code, token);
    if (e) return e;
    char body[2048];
    snprintf(body, sizeof body,
             "Someone, probably you, asked to sign in to GPU Goblin as %s.\n\n"
             "Your sign-in code: %s\n\n"
             "Or open this link:\n%s/signin/link?email=%s&token=%s\n\n"
             "Both work once, for %u minutes. If you did not ask, ignore this mail.\n",
             low, code, h->cfg.public_url, low, token, (unsigned)((h->cfg.code_ttl_s + 59) / 60));
    e = goblin__hub_mail(&h->cfg, low, "Your GPU Goblin sign-in code", body, ERR);
    memset(body, 0, sizeof body);
    memset(code, 0, sizeof code);
    memset(token, 0, sizeof token);
    return e;
}

typedef struct match {
    const uint8_t *want;
    bool is_link;
    int64_t id; /* the match, 0: none */
} match;

static goblin_err match_each(void *ctx, const goblin_hub_signin_code *c) {
    match *m = ctx;
    bool eq = goblin__hub_equal(m->is_link ? c->link_digest : c->code_digest, m->want, 32);
    /* No early exit: every candidate costs the same. */
    m->id = eq ? c->id : m->id;
    return GOBLIN_OK;
}

static goblin_err new_session(goblin_hub *h, int64_t account, int64_t now, char *cookie_out) {
    uint8_t d[32];
    goblin_err e = goblin__hub_random_hex(cookie_out, 32, ERR);
    if (!e) e = goblin__hub_digest(h->secret, "session", cookie_out, NULL, d, ERR);
    if (!e && (e = goblin_hub_store_session_add(h->store, d, account, now, now + h->cfg.session_ttl_s)))
        store_err(h, e);
    return e;
}

goblin_err goblin_hub_signin_finish(goblin_hub *h, const char *email, const char *secret, bool is_link,
                                    const char *client, int64_t now, char *cookie_out,
                                    goblin_hub_account *account_out) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    char low[GOBLIN_HUB_EMAIL_MAX + 1];
    if (!cookie_out) return goblin__errf(ERR, GOBLIN_EINVAL, "cookie_out is required");
    if (!goblin__hub_email_ok(email, low)) return goblin__errf(ERR, GOBLIN_EINVAL, "that is not an email address");
    if (!secret || strnlen(secret, 129) > 128)
        return goblin__errf(ERR, GOBLIN_EAUTH, "wrong, expired or used sign-in code");
    client = client_or(client);
    if (strlen(client) > 64) return goblin__errf(ERR, GOBLIN_EINVAL, "client address too long");
    now = now_or(now);
    goblin_err e;
    if ((e = under_limit(h, "fail-client", client, h->cfg.failures_per_client, now, "wrong codes from this client")) ||
        (e = under_limit(h, "fail", low, h->cfg.failures_per_address, now, "wrong codes for this address")))
        return e;
    uint8_t want[32];
    if ((e = goblin__hub_digest(h->secret, is_link ? "signin-link" : "signin-code", low, secret, want, ERR)))
        return e;
    match m = {want, is_link, 0};
    if ((e = goblin_hub_store_signin_each(h->store, low, now, (int32_t)h->cfg.failures_per_code, match_each, &m)))
        return store_err(h, e);
    if (!m.id || goblin_hub_store_signin_use(h->store, m.id, now) != GOBLIN_OK) {
        if (!is_link && (e = goblin_hub_store_signin_fail(h->store, low, now))) return store_err(h, e);
        if ((e = count(h, "fail", low, now)) || (e = count(h, "fail-client", client, now))) return e;
        return goblin__errf(ERR, GOBLIN_EAUTH, "wrong, expired or used sign-in code");
    }
    goblin_hub_account a;
    if ((e = goblin_hub_store_account_ensure(h->store, low, now, &a))) return store_err(h, e);
    if ((e = new_session(h, a.id, now, cookie_out))) return e;
    if (account_out) *account_out = a;
    return GOBLIN_OK;
}

/* A cookie is 64 lower-case hex digits; anything else is nobody's. */
static bool cookie_form(const char *c) {
    if (!c || strnlen(c, 65) != 64) return false;
    for (int i = 0; i < 64; i++)
        if (!((c[i] >= '0' && c[i] <= '9') || (c[i] >= 'a' && c[i] <= 'f'))) return false;
    return true;
}

goblin_err goblin_hub_session_account(goblin_hub *h, const char *cookie, int64_t now, goblin_hub_account *out) {
    if (!h || !out) return GOBLIN_EINVAL;
    h->error[0] = 0;
    if (!cookie_form(cookie)) return goblin__errf(ERR, GOBLIN_EAUTH, "not signed in");
    uint8_t d[32];
    int64_t id;
    goblin_err e = goblin__hub_digest(h->secret, "session", cookie, NULL, d, ERR);
    if (e) return e;
    e = goblin_hub_store_session_get(h->store, d, now_or(now), &id);
    if (e == GOBLIN_ENOTFOUND) return goblin__errf(ERR, GOBLIN_EAUTH, "not signed in (or the session ended)");
    if (e || (e = goblin_hub_store_account_get(h->store, id, out))) return store_err(h, e);
    return GOBLIN_OK;
}

goblin_err goblin_hub_session_end(goblin_hub *h, const char *cookie) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    if (!cookie_form(cookie)) return GOBLIN_OK;
    uint8_t d[32];
    goblin_err e = goblin__hub_digest(h->secret, "session", cookie, NULL, d, ERR);
    if (!e && (e = goblin_hub_store_session_end(h->store, d))) store_err(h, e);
    return e;
}

goblin_err goblin_hub_csrf_token(const goblin_hub *h, const char *cookie, char *out) {
    if (!h || !out || !cookie_form(cookie)) return GOBLIN_EINVAL;
    uint8_t d[32];
    goblin_err e = goblin__hub_digest(h->secret, "form", cookie, NULL, d, NULL, 0);
    if (e) return e;
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[64] = 0;
    return GOBLIN_OK;
}

bool goblin_hub_csrf_check(const goblin_hub *h, const char *cookie, const char *token) {
    char want[GOBLIN_HUB_TOKEN_SIZE];
    if (!token || strnlen(token, 65) != 64 || goblin_hub_csrf_token(h, cookie, want)) return false;
    return goblin__hub_equal(want, token, 64);
}
