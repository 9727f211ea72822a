/* goblin/tls.h - node identities, certificate fingerprints and join tokens.
 *
 * A node proves who it is with a self-signed certificate (EC P-256) whose
 * SHA-256 fingerprint the node's operator hands to workers out of band; a
 * worker pins that fingerprint (or trusts a CA file) and refuses any other
 * node. Workers prove they may join with a token; the node stores only salted
 * SHA-256 hashes of tokens and compares them in constant time.
 *
 * The nng glue (TLS configurations for listeners and dialers, fingerprint
 * pinning) is internal to the library: goblin-node and goblin-worker use it
 * through their params (cert/key files, CA file or fingerprint, token).
 * docs/security.md says how the pieces fit and what they do not protect.
 *
 * Fingerprints are written as 64 lowercase hex digits without separators
 * (goblin_tls_fingerprint_normalize also accepts "AB:CD:..." as openssl prints).
 *
 * Thread safety: every call is reentrant; nothing is shared between calls.
 * No call logs or stores a token it is given. */
#ifndef GOBLIN_TLS_H
#define GOBLIN_TLS_H

#include "api.h"
#include "error.h"

GOBLIN_BEGIN_DECLS

/** Bytes for a SHA-256 hex digest: 64 hex digits and the terminating NUL. */
#define GOBLIN_TLS_FINGERPRINT_SIZE 65
/** Longest path a goblin_tls_identity holds (including the NUL). */
#define GOBLIN_TLS_PATH_MAX 4096
/** File names goblin_tls_init_dir writes inside its directory. */
#define GOBLIN_TLS_CERT_FILE "cert.pem"
#define GOBLIN_TLS_KEY_FILE "key.pem"
/** Common name of generated certificates; also a DNS subject alternative name. */
#define GOBLIN_TLS_COMMON_NAME "goblin-node"

/** A node identity on disk and its certificate's fingerprint. */
typedef struct goblin_tls_identity {
    char cert_path[GOBLIN_TLS_PATH_MAX]; /* PEM certificate */
    char key_path[GOBLIN_TLS_PATH_MAX];  /* PEM private key (mode 0600 when generated) */
    char fingerprint[GOBLIN_TLS_FINGERPRINT_SIZE]; /* SHA-256 of the certificate's DER, hex */
} goblin_tls_identity;

/** Options of goblin_tls_init_dir. */
typedef struct goblin_tls_init_params {
    /** Replace existing files (default false: an existing file is GOBLIN_EBUSY). */
    bool force;
    /** Validity from one hour ago (clock skew) on; default 3650 days. 1 .. 36500. */
    uint32_t valid_days;
    /** Extra DNS names for the certificate, besides "goblin-node" and "localhost"
     *  (e.g. the node's host name, so CA-file dialers can check it). Borrowed for the
     *  call; each 1 .. 253 characters of [A-Za-z0-9.-]. Default none. */
    const char *const *dns_names;
    size_t n_dns_names;
} goblin_tls_init_params;

/** Fill @p p with the defaults above. NULL is a no-op. */
GOBLIN_API void goblin_tls_init_params_default(goblin_tls_init_params *p);

/** Create directory @p dir (mode 0700, parents too) if needed and write a fresh
 *  self-signed certificate (GOBLIN_TLS_CERT_FILE, mode 0644) and EC P-256 private key
 *  (GOBLIN_TLS_KEY_FILE, mode 0600) into it: CN "goblin-node", DNS names "goblin-node",
 *  "localhost" and @p p's extra names, SHA-256 ECDSA signature.
 *  @p dir: borrowed. @p p: borrowed, NULL for defaults. @p out: filled on success only.
 *  Existing files are never touched unless @p p->force: then both are replaced
 *  atomically (a reader sees the old file or the new one, never half of one).
 *  Returns GOBLIN_EBUSY (a file exists; @p err names it), GOBLIN_EINVAL (NULL
 *  argument, bad params), GOBLIN_ELIMIT (path too long), GOBLIN_EIO (directory or file
 *  could not be created or written), GOBLIN_ECRYPTO (key or certificate generation
 *  failed), GOBLIN_ENOMEM. @p err (may be NULL) says why. */
GOBLIN_API goblin_err goblin_tls_init_dir(const char *dir, const goblin_tls_init_params *p,
                                          goblin_tls_identity *out, goblin_errbuf *err);

/** Load an existing identity: check that @p cert_file holds a certificate (PEM or DER),
 *  that @p key_file holds its private key (unencrypted PEM or DER), and fill @p out
 *  (on success only) with both paths and the fingerprint. Borrowed paths.
 *  Returns GOBLIN_EINVAL, GOBLIN_ELIMIT (path too long), GOBLIN_EIO (cannot read),
 *  GOBLIN_EFORMAT (not a certificate / not a key), GOBLIN_EAUTH (the key does not
 *  belong to the certificate), GOBLIN_ENOMEM; @p err says why. */
GOBLIN_API goblin_err goblin_tls_identity_load(const char *cert_file, const char *key_file,
                                               goblin_tls_identity *out, goblin_errbuf *err);

/** SHA-256 fingerprint (hex) of the first certificate in @p path (PEM or DER) into
 *  @p hex_out (GOBLIN_TLS_FINGERPRINT_SIZE bytes; written on success only).
 *  Returns GOBLIN_EINVAL, GOBLIN_EIO, GOBLIN_EFORMAT, GOBLIN_ENOMEM; @p err says why. */
GOBLIN_API goblin_err goblin_tls_fingerprint_file(const char *path, char *hex_out,
                                                  goblin_errbuf *err);

/** Bring a fingerprint as a person may type it to the canonical form: 32 bytes as hex
 *  digits of either case, optionally separated by ':' (one between every byte, or none),
 *  optionally prefixed with "sha256:" or "SHA256=" and surrounded by blanks.
 *  @p hex_out: GOBLIN_TLS_FINGERPRINT_SIZE bytes, written on success only.
 *  Returns GOBLIN_EINVAL if @p text is anything else. */
GOBLIN_API goblin_err goblin_tls_fingerprint_normalize(const char *text, char *hex_out);

/* ---- join tokens ---------------------------------------------------------- */

/** Bytes for a token from goblin_token_generate: 64 hex digits and the NUL. */
#define GOBLIN_TOKEN_SIZE 65
/** Longest token accepted anywhere (bytes, without the NUL); matches the wire cap. */
#define GOBLIN_TOKEN_MAX_BYTES 256
/** Longest salt accepted in a token file (characters). */
#define GOBLIN_TOKEN_SALT_MAX 128
/** Bytes for one "salt:hash" entry from goblin_token_entry (with the NUL). */
#define GOBLIN_TOKEN_ENTRY_SIZE (GOBLIN_TOKEN_SALT_MAX + 1 + 64 + 1)

/** Write a fresh random token (32 bytes from the system's entropy, as 64 hex digits)
 *  into @p out (GOBLIN_TOKEN_SIZE bytes). Returns GOBLIN_EINVAL, GOBLIN_ECRYPTO. */
GOBLIN_API goblin_err goblin_token_generate(char *out);

/** @p hex_out (GOBLIN_TLS_FINGERPRINT_SIZE bytes) = hex(SHA-256(salt || token)), the
 *  bytes of the two strings without their NULs. @p salt: 1 .. GOBLIN_TOKEN_SALT_MAX
 *  characters, none of them ':' or whitespace. @p token: 1 .. GOBLIN_TOKEN_MAX_BYTES.
 *  Returns GOBLIN_EINVAL (NULL, bad lengths or characters), GOBLIN_ECRYPTO. */
GOBLIN_API goblin_err goblin_token_hash(const char *token, const char *salt, char *hex_out);

/** One token-file line for @p token with a fresh random 16-byte salt: "salt:hash" (no
 *  newline) into @p line_out (GOBLIN_TOKEN_ENTRY_SIZE bytes).
 *  Returns GOBLIN_EINVAL, GOBLIN_ECRYPTO. */
GOBLIN_API goblin_err goblin_token_entry(const char *token, char *line_out);

/** Is @p presented one of the tokens in @p list? @p list is the text of a token file:
 *  lines "salt:hash" (hash = 64 hex digits, either case), blank lines and lines
 *  starting with '#' ignored, surrounding blanks and "\r" ignored. Every entry is hashed
 *  and compared, all bytes of all entries, without an early exit: the time depends on
 *  the number of entries only, not on which (if any) matched or how much of it did.
 *  Returns GOBLIN_OK (matched), GOBLIN_EAUTH (no entry matched, or @p presented empty or
 *  longer than GOBLIN_TOKEN_MAX_BYTES), GOBLIN_EFORMAT (a malformed line: @p err gives
 *  its number, never its text), GOBLIN_ENOTFOUND (no entries at all), GOBLIN_EINVAL. */
GOBLIN_API goblin_err goblin_token_check_list(const char *list, const char *presented,
                                              goblin_errbuf *err);

/** goblin_token_check_list on the contents of file @p path (at most 1 MiB).
 *  Also returns GOBLIN_EIO (cannot read) and GOBLIN_ELIMIT (file too large). */
GOBLIN_API goblin_err goblin_token_check_file(const char *path, const char *presented,
                                              goblin_errbuf *err);

GOBLIN_END_DECLS

#endif
