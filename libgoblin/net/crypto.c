/* libgoblin/net/crypto.c - the mbedTLS glue of net/ (crypto.h): the 2/3 bridge,
 * random numbers, SHA-256, hex and secret files. Buffers that held a private key or
 * a token are wiped before they are freed. */
#include "crypto.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <mbedtls/version.h>
#include <mbedtls/error.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/sha256.h>
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
#include <psa/crypto.h>
#else
#include <mbedtls/bignum.h>
#endif

#include "base/alloc.h"
#include "base/errf.h"

/* ---- mbedTLS 2/3 ------------------------------------------------------------ */

int goblin__tls_sha256_two(const void *a, size_t na, const void *b, size_t nb, uint8_t out[32]) {
    mbedtls_sha256_context c;
    int rc;
    mbedtls_sha256_init(&c);
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    rc = mbedtls_sha256_starts(&c, 0);
    if (rc == 0 && na) rc = mbedtls_sha256_update(&c, a, na);
    if (rc == 0 && nb) rc = mbedtls_sha256_update(&c, b, nb);
    if (rc == 0) rc = mbedtls_sha256_finish(&c, out);
#else
    rc = mbedtls_sha256_starts_ret(&c, 0);
    if (rc == 0 && na) rc = mbedtls_sha256_update_ret(&c, a, na);
    if (rc == 0 && nb) rc = mbedtls_sha256_update_ret(&c, b, nb);
    if (rc == 0) rc = mbedtls_sha256_finish_ret(&c, out);
#endif
    mbedtls_sha256_free(&c);
    return rc;
}

/* 3.x needs PSA initialised for TLS 1.3 and PSA-backed keys; 2.28 does not. */
static int crypto_init(void) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    return psa_crypto_init() == PSA_SUCCESS ? 0 : -1;
#else
    return 0;
#endif
}

int goblin__tls_rng_init(goblin__tls_rng *r) {
    static const unsigned char pers[] = "goblin-tls";
    mbedtls_entropy_init(&r->entropy);
    mbedtls_ctr_drbg_init(&r->drbg);
    if (crypto_init() != 0) return -1;
    return mbedtls_ctr_drbg_seed(&r->drbg, mbedtls_entropy_func, &r->entropy, pers,
                                 sizeof pers - 1);
}

void goblin__tls_rng_free(goblin__tls_rng *r) {
    mbedtls_ctr_drbg_free(&r->drbg);
    mbedtls_entropy_free(&r->entropy);
}

int goblin__tls_pk_parse(mbedtls_pk_context *pk, const unsigned char *buf, size_t len,
                         goblin__tls_rng *r) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    return mbedtls_pk_parse_key(pk, buf, len, NULL, 0, mbedtls_ctr_drbg_random, &r->drbg);
#else
    (void)r;
    return mbedtls_pk_parse_key(pk, buf, len, NULL, 0);
#endif
}

int goblin__tls_pk_check_pair(const mbedtls_pk_context *pub, const mbedtls_pk_context *prv,
                              goblin__tls_rng *r) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    return mbedtls_pk_check_pair(pub, prv, mbedtls_ctr_drbg_random, &r->drbg);
#else
    (void)r;
    return mbedtls_pk_check_pair(pub, prv);
#endif
}

int goblin__tls_pk_sign(mbedtls_pk_context *pk, const uint8_t hash[32], unsigned char *sig, size_t cap,
                        size_t *len, goblin__tls_rng *r) {
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    return mbedtls_pk_sign(pk, MBEDTLS_MD_SHA256, hash, 32, sig, cap, len, mbedtls_ctr_drbg_random, &r->drbg);
#else
    /* 2.28 writes at most MBEDTLS_PK_SIGNATURE_MAX_SIZE with no size argument. */
    unsigned char tmp[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
    int rc = mbedtls_pk_sign(pk, MBEDTLS_MD_SHA256, hash, 32, tmp, len, mbedtls_ctr_drbg_random, &r->drbg);
    if (rc == 0 && *len > cap) rc = MBEDTLS_ERR_PK_BAD_INPUT_DATA;
    if (rc == 0) memcpy(sig, tmp, *len);
    return rc;
#endif
}

int goblin__tls_crt_set_serial(mbedtls_x509write_cert *crt, const unsigned char *bytes, size_t n) {
#if MBEDTLS_VERSION_NUMBER >= 0x03040000
    return mbedtls_x509write_crt_set_serial_raw(crt, (unsigned char *)bytes, n);
#else
    mbedtls_mpi s;
    int rc;
    mbedtls_mpi_init(&s);
    rc = mbedtls_mpi_read_binary(&s, bytes, n);
    if (rc == 0) rc = mbedtls_x509write_crt_set_serial(crt, &s);
    mbedtls_mpi_free(&s);
    return rc;
#endif
}

goblin_err goblin__tls_mbed_errf(char *msg, size_t cap, goblin_err e, int rc, const char *what) {
    char buf[160];
    mbedtls_strerror(rc, buf, sizeof buf);
    return goblin__errf(msg, cap, e, "%s: %s (mbedTLS -0x%04x)", what, buf,
                        (unsigned)(rc < 0 ? -rc : rc));
}

/* ---- small helpers ------------------------------------------------------------ */

void goblin__tls_to_hex(const uint8_t *b, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Exactly 2n hex digits at s -> n bytes. */
bool goblin__tls_from_hex(const char *s, size_t n, uint8_t *out) {
    for (size_t i = 0; i < n; i++) {
        int hi = hex_val(s[2 * i]), lo = hi < 0 ? -1 : hex_val(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

void goblin__tls_wipe_free(void *p, size_t n) {
    if (!p) return;
    mbedtls_platform_zeroize(p, n);
    goblin__free(p);
}

/* Whole file into a new NUL-terminated buffer (*len excludes the NUL). */
goblin_err goblin__tls_read_file(const char *path, const char *what, uint8_t **buf, size_t *len,
                                 char *msg, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return goblin__errf(msg, cap, GOBLIN_EIO, "cannot open %s %s: %s", what, path,
                            strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_EIO, "%s %s is not a regular file", what, path);
    }
    if ((uint64_t)st.st_size > GOBLIN__TLS_MAX_FILE_BYTES) {
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "%s %s is larger than %zu bytes", what,
                            path, GOBLIN__TLS_MAX_FILE_BYTES);
    }
    size_t size = (size_t)st.st_size, got = 0;
    uint8_t *b = goblin__alloc(size + 1);
    if (!b) {
        close(fd);
        return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory reading %s", path);
    }
    while (got < size) {
        ssize_t n = read(fd, b + got, size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int e = errno;
            close(fd);
            goblin__tls_wipe_free(b, size + 1);
            return goblin__errf(msg, cap, GOBLIN_EIO, "cannot read %s %s: %s", what, path,
                                n == 0 ? "file shrank while reading" : strerror(e));
        }
        got += (size_t)n;
    }
    close(fd);
    b[size] = 0;
    *buf = b;
    *len = size;
    return GOBLIN_OK;
}
