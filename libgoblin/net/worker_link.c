/* libgoblin/net/worker_link.c - link statements (worker_link.h): made by the worker's
 * key for a hub account's link code, read and checked by the hub. */
#include "worker_link.h"

#include <string.h>

#include <mbedtls/base64.h>

#include "base/errf.h"

/* With its NUL, so that the domain ends unambiguously (as worker_key.c's proof). */
static const char DOMAIN[] = "goblin link v1";

static bool lower_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

bool goblin__wlink_code_valid(const char *code) {
    return code && strnlen(code, GOBLIN__WLINK_CODE_LEN + 1) == GOBLIN__WLINK_CODE_LEN &&
           lower_hex(code, GOBLIN__WLINK_CODE_LEN);
}

goblin_err goblin__wlink_digest(const char *code, const uint8_t *pub, uint8_t out[32]) {
    if (!goblin__wlink_code_valid(code) || !pub || !out) return GOBLIN_EINVAL;
    uint8_t m[sizeof DOMAIN + GOBLIN__WLINK_CODE_LEN + GOBLIN__WKEY_PUBLIC_BYTES];
    memcpy(m, DOMAIN, sizeof DOMAIN);
    memcpy(m + sizeof DOMAIN, code, GOBLIN__WLINK_CODE_LEN);
    memcpy(m + sizeof DOMAIN + GOBLIN__WLINK_CODE_LEN, pub, GOBLIN__WKEY_PUBLIC_BYTES);
    return goblin__wkey_hash(m, sizeof m, out);
}

goblin_err goblin__wlink_make(goblin__wkey *k, const char *code, char *out, size_t cap, char *msg, size_t mcap) {
    if (!k || !out || cap < GOBLIN__WLINK_STATEMENT_SIZE)
        return goblin__errf(msg, mcap, GOBLIN_EINVAL, "a key and a buffer of %d bytes are required",
                            GOBLIN__WLINK_STATEMENT_SIZE);
    if (!goblin__wlink_code_valid(code))
        return goblin__errf(msg, mcap, GOBLIN_EINVAL, "a link code is %d lowercase hex digits (copy it from your "
                            "account page)", GOBLIN__WLINK_CODE_LEN);
    const uint8_t *pub = goblin__wkey_public(k);
    uint8_t d[32], sig[GOBLIN__WKEY_SIG_MAX];
    size_t sig_len = 0, o = 0, w = 0;
    goblin_err e = goblin__wlink_digest(code, pub, d);
    if (e || (e = goblin__wkey_sign(k, d, sig, &sig_len, msg, mcap))) return e;
    memcpy(out, GOBLIN__WLINK_TAG, sizeof GOBLIN__WLINK_TAG - 1);
    o = sizeof GOBLIN__WLINK_TAG - 1;
    out[o++] = ' ';
    memcpy(out + o, code, GOBLIN__WLINK_CODE_LEN);
    o += GOBLIN__WLINK_CODE_LEN;
    out[o++] = ' ';
    /* The sizes are fixed above (GOBLIN__WLINK_STATEMENT_SIZE): these cannot run out. */
    if (mbedtls_base64_encode((unsigned char *)out + o, cap - o, &w, pub, GOBLIN__WKEY_PUBLIC_BYTES))
        return goblin__errf(msg, mcap, GOBLIN_EINTERNAL, "encoding the public key");
    o += w;
    out[o++] = ' ';
    if (mbedtls_base64_encode((unsigned char *)out + o, cap - o, &w, sig, sig_len))
        return goblin__errf(msg, mcap, GOBLIN_EINTERNAL, "encoding the signature");
    return GOBLIN_OK;
}

static bool b64_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

/* Decode the base64 field [s, s + n) into @p out (exactly @p want bytes when want > 0,
 * else 1 .. cap bytes) after checking its alphabet: letters, digits, + and /, then at
 * most two '=' that make the length a multiple of 4. */
static bool b64_field(const char *s, size_t n, uint8_t *out, size_t cap, size_t want, size_t *got) {
    size_t k = 0;
    while (k < n && b64_char(s[k])) k++;
    size_t pad = n - k;
    if (!n || n % 4 || pad > 2) return false;
    for (size_t i = k; i < n; i++)
        if (s[i] != '=') return false;
    if (mbedtls_base64_decode(out, cap, got, (const unsigned char *)s, n)) return false;
    return want ? *got == want : *got > 0;
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

goblin_err goblin__wlink_check(const char *s, size_t len, char *code_out, char *fp_out, char *msg, size_t cap) {
    if (!s || !code_out || !fp_out) return goblin__errf(msg, cap, GOBLIN_EINVAL, "a statement is required");
    while (len && blank(*s)) s++, len--;
    while (len && blank(s[len - 1])) len--;
    if (!len || len >= GOBLIN__WLINK_STATEMENT_SIZE)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "a link statement is one line of at most %d characters, "
                            "as goblin-worker link prints it", GOBLIN__WLINK_STATEMENT_SIZE - 1);
    /* Four fields, one space between each. */
    const char *f[4];
    size_t n[4], at = 0;
    for (int i = 0; i < 4; i++) {
        f[i] = s + at;
        while (at < len && s[at] != ' ') at++;
        n[i] = at - (size_t)(f[i] - s);
        if (i < 3) {
            if (at == len) return goblin__errf(msg, cap, GOBLIN_EFORMAT, "a link statement has four fields");
            at++;
        }
    }
    if (at != len) return goblin__errf(msg, cap, GOBLIN_EFORMAT, "a link statement has four fields");
    if (n[0] != sizeof GOBLIN__WLINK_TAG - 1 || memcmp(f[0], GOBLIN__WLINK_TAG, n[0]))
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "not a link statement (it starts with %s)", GOBLIN__WLINK_TAG);
    if (n[1] != GOBLIN__WLINK_CODE_LEN || !lower_hex(f[1], n[1]))
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "the statement's link code is not %d lowercase hex digits",
                            GOBLIN__WLINK_CODE_LEN);
    uint8_t pub[GOBLIN__WKEY_PUBLIC_BYTES + 3], sig[GOBLIN__WKEY_SIG_MAX + 3];
    size_t pub_len = 0, sig_len = 0;
    if (!b64_field(f[2], n[2], pub, sizeof pub, GOBLIN__WKEY_PUBLIC_BYTES, &pub_len))
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "the statement's public key is not %d bytes of base64",
                            GOBLIN__WKEY_PUBLIC_BYTES);
    if (!b64_field(f[3], n[3], sig, sizeof sig, 0, &sig_len) || sig_len > GOBLIN__WKEY_SIG_MAX)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "the statement's signature is not base64 of 1 .. %d bytes",
                            GOBLIN__WKEY_SIG_MAX);
    char code[GOBLIN__WLINK_CODE_LEN + 1];
    memcpy(code, f[1], GOBLIN__WLINK_CODE_LEN);
    code[GOBLIN__WLINK_CODE_LEN] = 0;
    uint8_t d[32];
    goblin_err e = goblin__wlink_digest(code, pub, d);
    if (e) return goblin__errf(msg, cap, e, "link digest");
    if ((e = goblin__wkey_verify(pub, pub_len, d, sig, sig_len, msg, cap))) {
        if (e == GOBLIN_EAUTH)
            goblin__errf(msg, cap, e, "the statement's signature does not verify with its public key");
        return e;
    }
    char fp[GOBLIN__WKEY_FP_HEX];
    if ((e = goblin__wkey_fingerprint_of(pub, pub_len, fp))) return goblin__errf(msg, cap, e, "fingerprint");
    memcpy(code_out, code, sizeof code);
    memcpy(fp_out, fp, sizeof fp);
    return GOBLIN_OK;
}
