/* libgoblin/net/worker_key.h - worker identities: a worker's EC P-256 key pair (kept
 * in its config directory, or in memory only), the proof of possession it sends in
 * PROOF, and the identity a node derives from it: the SHA-256 fingerprint of the
 * public key (docs/security.md, "Worker identities").
 *
 * The public key travels as a DER SubjectPublicKeyInfo of exactly
 * GOBLIN__WKEY_PUBLIC_BYTES bytes (uncompressed P-256 point); anything else is refused.
 *
 * Thread safety: a key is used by one thread at a time (its random generator is not
 * shared); goblin__wkey_verify and goblin__wkey_fingerprint_of are reentrant. */
#ifndef GOBLIN__NET_WORKER_KEY_H
#define GOBLIN__NET_WORKER_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <goblin/error.h>

/** Size of a P-256 public key as DER SubjectPublicKeyInfo. */
#define GOBLIN__WKEY_PUBLIC_BYTES 91
/** Largest DER ECDSA P-256 signature. */
#define GOBLIN__WKEY_SIG_MAX 80
/** Hex digits of an identity (SHA-256 of the public key) and its NUL. */
#define GOBLIN__WKEY_FP_HEX 65
/** The key file inside a worker's config directory. */
#define GOBLIN__WKEY_FILE "worker_key.pem"
/** Bytes of the node's CHALLENGE nonce. */
#define GOBLIN__WKEY_NONCE_BYTES 32

typedef struct goblin__wkey goblin__wkey;

/** The key of config directory @p dir (borrowed): loaded from dir/worker_key.pem, or
 *  made and written there (mode 0600, the directory made 0700 if missing) when the
 *  file does not exist; *@p created says which. *out only on success (EIO, EFORMAT
 *  for a file that is not an unencrypted P-256 key, ENOMEM; message in (msg, cap)). */
goblin_err goblin__wkey_load_or_create(const char *dir, goblin__wkey **out, bool *created, char *msg,
                                       size_t cap);
/** A fresh key in memory only (in-process workers without a config directory). */
goblin_err goblin__wkey_ephemeral(goblin__wkey **out, char *msg, size_t cap);
/** NULL is a no-op; the private key is wiped. */
void goblin__wkey_free(goblin__wkey *k);
/** The public key (GOBLIN__WKEY_PUBLIC_BYTES bytes, owned by @p k). */
const uint8_t *goblin__wkey_public(const goblin__wkey *k);
/** The identity: 64 lowercase hex digits (owned by @p k). */
const char *goblin__wkey_fingerprint(const goblin__wkey *k);

/** SHA-256 of @p n bytes at @p p (a HELLO message as sent or received). */
goblin_err goblin__wkey_hash(const void *p, size_t n, uint8_t out[32]);
/** What a worker signs to answer a CHALLENGE: SHA-256 over a domain string, the node's
 *  @p nonce, the SHA-256 @p hello_hash of the HELLO message the worker sent on this
 *  connection (its encoded bytes) and the public key @p pub (GOBLIN__WKEY_PUBLIC_BYTES). */
goblin_err goblin__wkey_proof_digest(const uint8_t nonce[GOBLIN__WKEY_NONCE_BYTES], const uint8_t hello_hash[32],
                                     const uint8_t *pub, uint8_t out[32]);
/** ECDSA signature of @p digest into @p sig (GOBLIN__WKEY_SIG_MAX bytes), its length *@p len. */
goblin_err goblin__wkey_sign(goblin__wkey *k, const uint8_t digest[32], uint8_t *sig, size_t *len, char *msg,
                             size_t cap);
/** Is @p sig a signature of @p digest by public key @p pub (@p pub_len bytes)? GOBLIN_OK,
 *  GOBLIN_EFORMAT (not a P-256 public key of the canonical form), GOBLIN_EAUTH (bad
 *  signature), with a message. */
goblin_err goblin__wkey_verify(const uint8_t *pub, size_t pub_len, const uint8_t digest[32], const uint8_t *sig,
                               size_t sig_len, char *msg, size_t cap);
/** The identity of public key @p pub into @p hex (GOBLIN__WKEY_FP_HEX bytes). */
goblin_err goblin__wkey_fingerprint_of(const uint8_t *pub, size_t pub_len, char hex[GOBLIN__WKEY_FP_HEX]);
/** Is @p s exactly 64 lowercase hex digits (an identity as files name it)? */
bool goblin__wkey_fingerprint_valid(const char *s, size_t len);

#endif
