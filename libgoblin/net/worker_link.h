/* libgoblin/net/worker_link.h - a worker's link statement: the proof that whoever
 * pastes it into a hub account holds the worker's identity key (docs/hub.md,
 * "Volunteers: linking workers").
 *
 * A statement is one line of printable ASCII:
 *     goblin-link-v1 CODE PUBLIC SIGNATURE
 * CODE is the account's link code as the hub showed it (GOBLIN__WLINK_CODE_LEN lowercase
 * hex digits), PUBLIC the worker's public key (DER SubjectPublicKeyInfo, standard
 * base64 with padding), SIGNATURE the worker key's ECDSA signature (DER, base64) of
 * goblin__wlink_digest(CODE, PUBLIC). The digest is domain-separated from the node's
 * identity proof (worker_key.c), so neither can stand for the other. Nothing in a
 * statement is secret; the code binds it to one account, and the hub checks the code.
 *
 * Reentrant; a key is used by one thread at a time (worker_key.h). */
#ifndef GOBLIN__NET_WORKER_LINK_H
#define GOBLIN__NET_WORKER_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <goblin/error.h>

#include "worker_key.h"

/** Hex digits of a link code. */
#define GOBLIN__WLINK_CODE_LEN 32
/** The statement's first word. */
#define GOBLIN__WLINK_TAG "goblin-link-v1"
/** Longest statement, with its NUL: the tag, the code, 124 + 108 base64 characters
 *  (a 91-byte key, an 80-byte signature at most) and three spaces. */
#define GOBLIN__WLINK_STATEMENT_SIZE 288

/** Is @p code exactly GOBLIN__WLINK_CODE_LEN lowercase hex digits? */
bool goblin__wlink_code_valid(const char *code);
/** SHA-256 over "goblin link v1" and its NUL, the code's 32 characters and the public
 *  key @p pub (GOBLIN__WKEY_PUBLIC_BYTES). EINVAL for a code of the wrong form. */
goblin_err goblin__wlink_digest(const char *code, const uint8_t *pub, uint8_t out[32]);
/** The statement of key @p k for link code @p code (borrowed) into @p out (@p cap
 *  bytes, at least GOBLIN__WLINK_STATEMENT_SIZE), NUL-terminated, no newline.
 *  EINVAL (a code of the wrong form; @p out too small), EINTERNAL (signing). */
goblin_err goblin__wlink_make(goblin__wkey *k, const char *code, char *out, size_t cap, char *msg,
                              size_t mcap);
/** Read statement @p s (@p len bytes; blanks and a line end around it are ignored) and
 *  check its signature: the code it was made for into @p code_out
 *  (GOBLIN__WLINK_CODE_LEN + 1 bytes) and the identity it proves into @p fp_out
 *  (GOBLIN__WKEY_FP_HEX bytes). Nothing is written on failure. GOBLIN_EFORMAT (not a
 *  statement: wrong tag, fields, alphabet, lengths, or not a P-256 key), GOBLIN_EAUTH
 *  (the signature does not verify). Bounded: at most GOBLIN__WLINK_STATEMENT_SIZE bytes
 *  are looked at past the blanks. */
goblin_err goblin__wlink_check(const char *s, size_t len, char *code_out, char *fp_out, char *msg,
                               size_t cap);

#endif
