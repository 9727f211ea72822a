/* libgoblin/net/identity.h - certificates and keys, for the TLS configurations
 * (internal to net/; the public side is goblin/tls.h). Errors come with a message in
 * (msg, cap). */
#ifndef GOBLIN__NET_IDENTITY_H
#define GOBLIN__NET_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/types.h>

#include <goblin/error.h>
#include <mbedtls/x509_crt.h>

/** SHA-256 of a DER certificate. */
goblin_err goblin__tls_fingerprint_der(const uint8_t *der, size_t len, uint8_t out[32], char *msg,
                                       size_t cap);
/** One DER certificate as a new NUL-terminated PEM string (goblin__free it). */
goblin_err goblin__tls_der_to_pem(const uint8_t *der, size_t len, char **out, size_t *out_len,
                                  char *msg, size_t cap);
/** A parsed chain as one new PEM string (what nng's ca_chain/own_cert take). */
goblin_err goblin__tls_chain_to_pem(const mbedtls_x509_crt *crt, char **out, char *msg,
                                    size_t cap);
/** The name to check a peer against: first DNS subject alternative name, else the CN.
 *  A new string or NULL (none, or out of memory: *oom says which). */
char *goblin__tls_cert_name(const mbedtls_x509_crt *crt, bool *oom);
/** Issuer and subject are the same name. */
bool goblin__tls_self_issued(const mbedtls_x509_crt *c);
/** The certificates (PEM, or one DER) of file @p path into @p crt (initialised). */
goblin_err goblin__tls_load_certs(const char *path, mbedtls_x509_crt *crt, char *msg, size_t cap);
/** Certificate chain and key from files, checked to belong together: the chain as PEM
 *  (@p chain_pem, or NULL not to ask), the key as PEM (@p key_pem or NULL; wipe it),
 *  the leaf's fingerprint into @p fp. */
goblin_err goblin__tls_load_pair(const char *cert_file, const char *key_file, char **chain_pem,
                                 char **key_pem, uint8_t fp[32], char *msg, size_t cap);

/** mkdir -p @p dir, mode 0700 for what it creates. EIO, ENOMEM. */
goblin_err goblin__tls_make_dirs(const char *dir, char *msg, size_t cap);
/** Write @p n bytes to @p path with exactly @p mode (umask ignored), fsynced. Without
 *  @p force the file must not exist (O_EXCL: EBUSY); with it, a temporary file is
 *  renamed over the old one. EIO, ELIMIT. */
goblin_err goblin__tls_write_file(const char *path, const void *data, size_t n, mode_t mode,
                                  bool force, char *msg, size_t cap);

#endif
