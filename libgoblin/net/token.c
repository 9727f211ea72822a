/* libgoblin/net/token.c - join tokens (goblin/tls.h): generating them, their salted
 * SHA-256 entries, and checking a presented token against a list or a token file in
 * constant time over the entries. Token text is never echoed in a message. */
#include <stdio.h>
#include <string.h>

#include <goblin/tls.h>
#include <mbedtls/platform_util.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "crypto.h"

static bool salt_ok(const char *s, size_t n) {
    if (n < 1 || n > GOBLIN_TOKEN_SALT_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~' || s[i] == ':') return false;
    return true;
}

static goblin_err random_bytes(uint8_t *out, size_t n) {
    goblin__tls_rng r;
    int rc = goblin__tls_rng_init(&r);
    if (rc == 0) rc = mbedtls_ctr_drbg_random(&r.drbg, out, n);
    goblin__tls_rng_free(&r);
    return rc ? GOBLIN_ECRYPTO : GOBLIN_OK;
}

goblin_err goblin_token_generate(char *out) {
    if (!out) return GOBLIN_EINVAL;
    uint8_t b[32];
    goblin_err e = random_bytes(b, sizeof b);
    if (!e) goblin__tls_to_hex(b, sizeof b, out);
    mbedtls_platform_zeroize(b, sizeof b);
    return e;
}

static int token_digest(const char *salt, size_t salt_len, const char *token, size_t token_len,
                        uint8_t out[32]) {
    return goblin__tls_sha256_two(salt, salt_len, token, token_len, out);
}

goblin_err goblin_token_hash(const char *token, const char *salt, char *hex_out) {
    if (!token || !salt || !hex_out) return GOBLIN_EINVAL;
    size_t tn = strnlen(token, GOBLIN_TOKEN_MAX_BYTES + 1), sn = strlen(salt);
    if (tn < 1 || tn > GOBLIN_TOKEN_MAX_BYTES || !salt_ok(salt, sn)) return GOBLIN_EINVAL;
    uint8_t d[32];
    if (token_digest(salt, sn, token, tn, d)) return GOBLIN_ECRYPTO;
    goblin__tls_to_hex(d, 32, hex_out);
    return GOBLIN_OK;
}

goblin_err goblin_token_entry(const char *token, char *line_out) {
    if (!token || !line_out) return GOBLIN_EINVAL;
    uint8_t sb[16];
    char salt[33], hash[GOBLIN_TLS_FINGERPRINT_SIZE];
    goblin_err e = random_bytes(sb, sizeof sb);
    if (e) return e;
    goblin__tls_to_hex(sb, sizeof sb, salt);
    if ((e = goblin_token_hash(token, salt, hash))) return e;
    snprintf(line_out, GOBLIN_TOKEN_ENTRY_SIZE, "%s:%s", salt, hash);
    return GOBLIN_OK;
}

goblin_err goblin__token_check_list(const char *list, const char *presented, char *msg, size_t cap) {
    if (!list || !presented)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "token list and token are required");
    size_t tn = strnlen(presented, GOBLIN_TOKEN_MAX_BYTES + 1);
    bool token_ok = tn >= 1 && tn <= GOBLIN_TOKEN_MAX_BYTES;
    unsigned matched = 0;
    size_t entries = 0;
    int line_no = 0;
    goblin_err e = GOBLIN_OK;
    for (const char *line = list; *line;) {
        const char *end = strchr(line, '\n');
        const char *next = end ? end + 1 : line + strlen(line);
        if (!end) end = next;
        line_no++;
        while (line < end && (*line == ' ' || *line == '\t')) line++;
        while (end > line && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) end--;
        if (line == end || *line == '#') {
            line = next;
            continue;
        }
        const char *colon = memchr(line, ':', (size_t)(end - line));
        uint8_t want[32], got[32];
        if (!colon || !salt_ok(line, (size_t)(colon - line)) || end - colon - 1 != 64 ||
            !goblin__tls_from_hex(colon + 1, 32, want)) {
            /* The line's text may be a pasted token: never echo it. */
            e = goblin__errf(msg, cap, GOBLIN_EFORMAT,
                             "token list line %d is not \"salt:sha256-hex\"", line_no);
            break;
        }
        entries++;
        if (token_ok) {
            if (token_digest(line, (size_t)(colon - line), presented, tn, got)) {
                e = goblin__errf(msg, cap, GOBLIN_ECRYPTO, "SHA-256 failed");
                break;
            }
            /* Every byte of every entry, no early exit; turn "diff == 0" into a bit
             * without a branch. */
            unsigned diff = 0;
            for (int i = 0; i < 32; i++) diff |= (unsigned)(got[i] ^ want[i]);
            matched |= ((diff - 1u) >> 8) & 1u;
            mbedtls_platform_zeroize(got, sizeof got);
        }
        line = next;
    }
    if (e) return e;
    if (entries == 0)
        return goblin__errf(msg, cap, GOBLIN_ENOTFOUND, "the token list has no entries");
    if (!token_ok || !matched)
        return goblin__errf(msg, cap, GOBLIN_EAUTH, "the token presented is not accepted");
    return GOBLIN_OK;
}

goblin_err goblin_token_check_list(const char *list, const char *presented, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    return goblin__token_check_list(list, presented, msg, cap);
}

goblin_err goblin__token_check_file(const char *path, const char *presented, char *msg, size_t cap) {
    if (!path || !presented)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "token file and token are required");
    uint8_t *buf;
    size_t len;
    goblin_err e = goblin__tls_read_file(path, "token file", &buf, &len, msg, cap);
    if (e) return e;
    if (memchr(buf, 0, len)) {
        goblin__free(buf);
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "token file %s contains a NUL byte", path);
    }
    e = goblin__token_check_list((const char *)buf, presented, msg, cap);
    if (e == GOBLIN_EFORMAT || e == GOBLIN_ENOTFOUND) {
        char inner[256];
        snprintf(inner, sizeof inner, "%s", msg && cap ? msg : "");
        goblin__errf(msg, cap, e, "%s: %s", path, inner);
    }
    goblin__tls_wipe_free(buf, len + 1);
    return e;
}

goblin_err goblin_token_check_file(const char *path, const char *presented, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, msg, cap);
    return goblin__token_check_file(path, presented, msg, cap);
}
