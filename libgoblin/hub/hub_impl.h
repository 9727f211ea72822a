/* libgoblin/hub/hub_impl.h - the goblin_hub object and the helpers its files share
 * (internal to hub/). */
#ifndef GOBLIN__HUB_IMPL_H
#define GOBLIN__HUB_IMPL_H

#include <goblin/hub.h>
#include <nng/nng.h>
#include <pthread.h>

struct goblin_hub {
    goblin_hub_config cfg;
    uint8_t secret[32];
    goblin_hub_store *store;
    char dir[4096];
    char error[512];
    struct goblin__hub_web *web; /* NULL until goblin_hub_serve */
    struct goblin__hub_relay *relay; /* NULL until goblin_hub_serve_machines */
};

/* ---- digest.c: the digests of secrets, random tokens ---- */

/* out = HMAC-SHA-256(secret, domain || 0x00 || a || 0x00 || b); @p b may be NULL. */
goblin_err goblin__hub_digest(const uint8_t secret[32], const char *domain, const char *a,
                              const char *b, uint8_t out[32], char *msg, size_t cap);
/* @p n bytes from the kernel's generator; ECRYPTO when it has none to give. */
goblin_err goblin__hub_random(void *out, size_t n, char *msg, size_t cap);
/* @p n random bytes as 2n hex digits and a NUL into @p out. */
goblin_err goblin__hub_random_hex(char *out, size_t n, char *msg, size_t cap);
/* Whether the @p n bytes at @p a and @p b are equal, in time independent of them. */
bool goblin__hub_equal(const void *a, const void *b, size_t n);
/* Whether @p email is an address the hub accepts (see goblin_hub_signin_start); its
 * lower-case form into @p out (GOBLIN_HUB_EMAIL_MAX + 1 bytes). */
bool goblin__hub_email_ok(const char *email, char *out);

/* ---- mail.c: SMTP through libcurl ---- */

/* Mail @p subject and @p body (plain text; lines end in "\n") to @p to (checked by
 * goblin__hub_email_ok) through the configuration's SMTP server. EIO, ENOMEM. */
goblin_err goblin__hub_mail(const goblin_hub_config *cfg, const char *to, const char *subject,
                            const char *body, char *msg, size_t cap);

/* ---- signin.c ---- */

/* The first half of goblin_hub_signin_start without the mail: checks the limits and
 * stores the digests of a fresh code and link token, returned in @p code_out
 * (GOBLIN_HUB_CODE_SIZE) and @p token_out (GOBLIN_HUB_TOKEN_SIZE). @p email: lower case. */
goblin_err goblin__hub_signin_issue(goblin_hub *h, const char *email, const char *client,
                                    int64_t now, char *code_out, char *token_out);

/* ---- relay.c ---- */
void goblin__hub_relay_stop(goblin_hub *h);
/** Tests only (GOBLIN_TESTCTRL_HUB_WORKER_ADDR): connections the machines address takes
 *  from a local address from now on count as from @p ip (an IPv4 or IPv6 literal;
 *  NULL: their own again). EINVAL (a bad literal), ESTATE (machines not served). */
goblin_err goblin__hub_relay_test_addr(goblin_hub *h, const char *ip);

/* ---- web.c ---- */
void goblin__hub_web_stop(goblin_hub *h);

#endif
