/* libgoblin/hub/digest.c - what the hub keeps of a secret: HMAC-SHA-256 under the
 * server secret, so a copy of the database alone lets no one sign in; random tokens
 * from the kernel; comparisons that take the same time whatever the bytes. */
#include <errno.h>
#include <mbedtls/md.h>
#include <string.h>
#include <sys/random.h>

#include "base/errf.h"
#include "hub_impl.h"

goblin_err goblin__hub_digest(const uint8_t secret[32], const char *domain, const char *a,
                              const char *b, uint8_t out[32], char *msg, size_t cap) {
    const mbedtls_md_info_t *md = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    mbedtls_md_context_t c;
    mbedtls_md_init(&c);
    static const unsigned char zero = 0;
    int rc = md ? mbedtls_md_setup(&c, md, 1) : -1;
    if (!rc) rc = mbedtls_md_hmac_starts(&c, secret, 32);
    if (!rc) rc = mbedtls_md_hmac_update(&c, (const unsigned char *)domain, strlen(domain));
    if (!rc) rc = mbedtls_md_hmac_update(&c, &zero, 1);
    if (!rc) rc = mbedtls_md_hmac_update(&c, (const unsigned char *)a, strlen(a));
    if (!rc && b) rc = mbedtls_md_hmac_update(&c, &zero, 1);
    if (!rc && b) rc = mbedtls_md_hmac_update(&c, (const unsigned char *)b, strlen(b));
    if (!rc) rc = mbedtls_md_hmac_finish(&c, out);
    mbedtls_md_free(&c);
    return rc ? goblin__errf(msg, cap, GOBLIN_ECRYPTO, "HMAC-SHA-256 failed (mbedTLS -0x%04x)", (unsigned)-rc)
              : GOBLIN_OK;
}

goblin_err goblin__hub_random(void *out, size_t n, char *msg, size_t cap) {
    uint8_t *p = out;
    while (n) {
        ssize_t k = getrandom(p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return goblin__errf(msg, cap, GOBLIN_ECRYPTO, "no random bytes from the kernel");
        p += k;
        n -= (size_t)k;
    }
    return GOBLIN_OK;
}

goblin_err goblin__hub_random_hex(char *out, size_t n, char *msg, size_t cap) {
    uint8_t b[64];
    if (n > sizeof b) return goblin__errf(msg, cap, GOBLIN_EINVAL, "too many random bytes asked");
    goblin_err e = goblin__hub_random(b, n, msg, cap);
    if (e) return e;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[2 * n] = 0;
    memset(b, 0, sizeof b);
    return GOBLIN_OK;
}

bool goblin__hub_equal(const void *a, const void *b, size_t n) {
    const volatile uint8_t *x = a, *y = b;
    uint8_t d = 0;
    for (size_t i = 0; i < n; i++) d |= (uint8_t)(x[i] ^ y[i]);
    return d == 0;
}

/* Letters, digits and the few marks addresses use in practice; no quotes, blanks,
 * control characters or anything that could end a mail header. */
static bool addr_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr(".!#$%&'*+/=?^_`{|}~-", c) != NULL;
}

bool goblin__hub_email_ok(const char *email, char *out) {
    if (!email) return false;
    size_t n = strnlen(email, GOBLIN_HUB_EMAIL_MAX + 1), at = n, ats = 0;
    if (n < 3 || n > GOBLIN_HUB_EMAIL_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = email[i];
        if (c == '@') {
            at = i;
            ats++;
        } else if (!addr_char(c)) {
            return false;
        }
    }
    if (ats != 1 || at == 0 || at + 1 >= n || email[at + 1] == '.' || email[n - 1] == '.') return false;
    for (size_t i = 0; i <= n; i++) out[i] = (char)((email[i] >= 'A' && email[i] <= 'Z') ? email[i] + 32 : email[i]);
    return true;
}
