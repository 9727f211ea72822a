/* tests/unit/hub_util.h - helpers of the hub's tests: the secret of a hub directory,
 * HMAC-SHA-256 recomputed with mbedTLS as the hub's digests are defined (docs/hub.md),
 * and a search of the hub's files for bytes that must not be there. */
#ifndef GOBLIN_TEST_HUB_UTIL_H
#define GOBLIN_TEST_HUB_UTIL_H

#include <criterion/criterion.h>
#include <mbedtls/md.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* HMAC-SHA-256(key, domain || 0 || a [|| 0 || b]). */
static inline void hub_util_hmac(const uint8_t key[32], const char *domain, const char *a, const char *b,
                                 uint8_t out[32]) {
    size_t nd = strlen(domain), na = strlen(a), nb = b ? strlen(b) : 0;
    uint8_t buf[512];
    size_t n = 0;
    cr_assert(nd + na + nb + 2 <= sizeof buf);
    memcpy(buf + n, domain, nd), n += nd, buf[n++] = 0;
    memcpy(buf + n, a, na), n += na;
    if (b) buf[n++] = 0, memcpy(buf + n, b, nb), n += nb;
    cr_assert_eq(mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key, 32, buf, n, out), 0);
}

/* The 32 bytes of @p dir/secret (hex in the file). */
static inline void hub_util_read_secret(const char *dir, uint8_t key[32]) {
    char path[400], hex[80] = "";
    snprintf(path, sizeof path, "%s/secret", dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(hex, sizeof hex, f));
    fclose(f);
    for (int i = 0; i < 32; i++) {
        unsigned v;
        cr_assert_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
        key[i] = (uint8_t)v;
    }
}

/* Whether the @p n bytes at @p needle appear in file @p name of directory @p dir (its
 * first MiB; a hub's test database is far smaller). */
static inline bool hub_util_file_has(const char *dir, const char *name, const void *needle, size_t n) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    static char buf[1 << 20];
    size_t got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    for (size_t i = 0; i + n <= got; i++)
        if (!memcmp(buf + i, needle, n)) return true;
    return false;
}

#endif
