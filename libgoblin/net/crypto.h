/* libgoblin/net/crypto.h - the mbedTLS glue under identities, tokens and the TLS
 * configurations (internal to net/): the version bridge, a seeded random generator,
 * SHA-256, hex, secret files.
 *
 * mbedTLS 2.28 (Debian 12, what nng 1.5.2 links) and 3.x (Debian 13) differ in a few
 * signatures; these wrappers bridge them, and nothing else in net/ depends on the
 * version. Functions returning int return mbedTLS's code (0 on success). */
#ifndef GOBLIN__NET_CRYPTO_H
#define GOBLIN__NET_CRYPTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <goblin/error.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>

/** Largest certificate, key or token file read (they are a few hundred bytes). */
#define GOBLIN__TLS_MAX_FILE_BYTES ((size_t)1 << 20)

/** SHA-256 of the bytes @p a then @p b (either may be empty) into @p out. */
int goblin__tls_sha256_two(const void *a, size_t na, const void *b, size_t nb, uint8_t out[32]);

/** A CTR-DRBG seeded from the system's entropy. */
typedef struct goblin__tls_rng {
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
} goblin__tls_rng;

/** Seed @p r (and initialise PSA on 3.x); goblin__tls_rng_free it whatever this returns. */
int goblin__tls_rng_init(goblin__tls_rng *r);
void goblin__tls_rng_free(goblin__tls_rng *r);
/** mbedtls_pk_parse_key of an unencrypted key in @p buf (PEM: @p len counts the NUL). */
int goblin__tls_pk_parse(mbedtls_pk_context *pk, const unsigned char *buf, size_t len,
                         goblin__tls_rng *r);
/** mbedtls_pk_check_pair: does private key @p prv belong to public key @p pub? */
int goblin__tls_pk_check_pair(const mbedtls_pk_context *pub, const mbedtls_pk_context *prv,
                              goblin__tls_rng *r);
/** mbedtls_pk_sign of SHA-256 digest @p hash into @p sig (@p cap bytes), its length *@p len. */
int goblin__tls_pk_sign(mbedtls_pk_context *pk, const uint8_t hash[32], unsigned char *sig, size_t cap,
                        size_t *len, goblin__tls_rng *r);
/** The serial number of a certificate being written, from @p n big-endian bytes. */
int goblin__tls_crt_set_serial(mbedtls_x509write_cert *crt, const unsigned char *bytes, size_t n);

/** "@p what: mbedTLS's text for @p rc (mbedTLS -0x....)" into (msg, cap); returns @p e. */
goblin_err goblin__tls_mbed_errf(char *msg, size_t cap, goblin_err e, int rc, const char *what);

/** @p n bytes as 2n lowercase hex digits and a NUL into @p out. */
void goblin__tls_to_hex(const uint8_t *b, size_t n, char *out);
/** Exactly 2n hex digits at @p s -> n bytes; false on a non-hex digit. */
bool goblin__tls_from_hex(const char *s, size_t n, uint8_t *out);
/** Zero @p n bytes at @p p (which held a secret), then goblin__free it; NULL is a no-op. */
void goblin__tls_wipe_free(void *p, size_t n);
/** The whole regular file @p path (@p what names it in messages) into a new
 *  NUL-terminated buffer (*len excludes the NUL; goblin__tls_wipe_free it if it may
 *  hold a secret). EIO, ELIMIT (over GOBLIN__TLS_MAX_FILE_BYTES), ENOMEM. */
goblin_err goblin__tls_read_file(const char *path, const char *what, uint8_t **buf, size_t *len,
                                 char *msg, size_t cap);

#endif
