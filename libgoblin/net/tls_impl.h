/* libgoblin/net/tls_impl.h - nng TLS configurations for the node and the worker.
 *
 * Listener side: the node's certificate and key; clients are not asked for a
 * certificate (workers prove themselves with a join token inside the protocol).
 *
 * Dialer side, one of:
 *  - a CA file: nng/mbedTLS verify the chain and, where a name is known, the
 *    host name;
 *  - a pinned SHA-256 fingerprint. nng 1.5.2 cannot check a fingerprint itself
 *    (no verify callback, no way to read the peer certificate), so pinning is
 *    done in two steps: goblin__tls_fetch_peer_cert runs one TLS handshake with
 *    mbedTLS directly (no verification) to read the certificate the node
 *    presents, its SHA-256 is compared with the pin, and only then is the nng
 *    configuration built with exactly that certificate as the sole trust anchor,
 *    auth REQUIRED and server_name set to its name. Every real connection (and
 *    every redial) is then verified by nng's own engine against the pinned
 *    certificate, so the handshake proves the node holds its private key; the
 *    probe only decides which certificate to trust. docs/security.md has more.
 *
 * Every function returns a goblin_err with a message in (msg, cap); a
 * configuration handed out holds one nng reference (nng_tls_config_free it;
 * endpoints keep their own reference once it is set on them). */
#ifndef GOBLIN__TLS_IMPL_H
#define GOBLIN__TLS_IMPL_H

#include <goblin/error.h>
#include <goblin/tls.h>
#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <stddef.h>
#include <stdint.h>

/** Default bound on the fingerprint probe (connect + handshake), milliseconds. */
#define GOBLIN__TLS_PROBE_TIMEOUT_MS 10000

/* nng error code -> goblin_err (NNG_EPEERAUTH -> GOBLIN_EAUTH, NNG_ECRYPTO ->
 * GOBLIN_ECRYPTO, ...; anything unknown -> GOBLIN_EIO). */
goblin_err goblin__tls_nng_err(int rv);

/* Server configuration from a PEM certificate (chain) file and an unencrypted PEM
 * private key file; client authentication off. */
goblin_err goblin__tls_server_config(const char *cert_file, const char *key_file,
                                     nng_tls_config **out, char *msg, size_t cap);

/* Client configuration trusting the PEM certificates in @p ca_file, auth REQUIRED.
 * The name checked against the node's certificate: @p server_name if not NULL;
 * else, when @p ca_file holds a single self-signed certificate (a node identity used
 * as its own CA), that certificate's DNS name or CN; else the host of @p url if it
 * is a name rather than an address. With none of these the call fails (EINVAL):
 * a CA alone would accept any certificate it signed. */
goblin_err goblin__tls_client_config_ca(const char *ca_file, const char *server_name,
                                        const char *url, nng_tls_config **out, char *msg,
                                        size_t cap);

/* One TLS handshake with the listener at @p url (tls+tcp://, tls+tcp4://,
 * tls+tcp6://) without verification, to read its certificate: a new DER copy in
 * *der_out (goblin__free it), its length in *der_len. Connect and handshake
 * together take at most @p timeout_ms (<= 0: GOBLIN__TLS_PROBE_TIMEOUT_MS).
 * Errors: EINVAL (bad URL), ECONNREFUSED, ETIMEDOUT, EIO (resolve/connect),
 * ECRYPTO (handshake), ENOMEM. The result is untrusted until checked. */
goblin_err goblin__tls_fetch_peer_cert(const char *url, int timeout_ms, uint8_t **der_out,
                                       size_t *der_len, char *msg, size_t cap);

/* Given the certificate a node presented (@p der, @p der_len) and the pinned
 * @p fingerprint (any form goblin_tls_fingerprint_normalize takes): EAUTH, naming both
 * fingerprints, if they differ; else a client configuration whose only trust anchor is
 * that certificate, auth REQUIRED, server_name its first DNS name (else its CN). */
goblin_err goblin__tls_client_config_pinned_der(const uint8_t *der, size_t der_len,
                                                const char *fingerprint,
                                                nng_tls_config **out, char *msg, size_t cap);

/* goblin__tls_fetch_peer_cert + goblin__tls_client_config_pinned_der. */
goblin_err goblin__tls_client_config_pinned(const char *url, const char *fingerprint,
                                            int timeout_ms, nng_tls_config **out, char *msg,
                                            size_t cap);

/* What a dialer trusts: exactly one of ca_file and fingerprint. */
typedef struct goblin__tls_client_opts {
    const char *ca_file;     /* PEM CA certificates, or NULL */
    const char *fingerprint; /* pinned SHA-256 of the node's certificate, or NULL */
    const char *server_name; /* CA mode only: name to check (see above), or NULL */
    int timeout_ms;          /* pinned mode: probe bound; <= 0 for the default */
} goblin__tls_client_opts;

/* Build the client configuration for @p url from @p o and set it on dialer @p d
 * (created on @p url, not yet started). The dialer keeps its own reference.
 * Pinned mode connects to the node (the probe): while the node is not up yet this
 * returns ECONNREFUSED/ETIMEDOUT and the caller retries with its backoff. Once set,
 * nng's own redials reuse the configuration without probing again. */
goblin_err goblin__tls_dialer_setup(nng_dialer d, const char *url,
                                    const goblin__tls_client_opts *o, char *msg, size_t cap);

/* Build the server configuration and set it on listener @p l (not yet started). */
goblin_err goblin__tls_listener_setup(nng_listener l, const char *cert_file,
                                      const char *key_file, char *msg, size_t cap);

/* goblin_token_check_list / goblin_token_check_file with the detail in @p msg (@p cap
 * bytes; may be NULL), for the node and the gateway. */
goblin_err goblin__token_check_list(const char *list, const char *presented, char *msg, size_t cap);
goblin_err goblin__token_check_file(const char *path, const char *presented, char *msg, size_t cap);

#endif
