/* goblin/principal.h - who may use a node: researchers and their credentials.
 *
 * A principal is a person the node's gateway (gateway.h) knows: an email address, a
 * role and a credential. Every job belongs to the principal that submitted it; only
 * that principal, or an admin, can see, cancel or fetch it. (The network-wide accounts
 * of goblin-hub plug into the same principal.)
 *
 * A credential is the text "gbr1_" + 16 hex digits (the principal's id, not secret) +
 * "_" + 64 hex digits (the secret: 32 random bytes). It is printed once, when it is
 * made, and never stored: the node's credentials file keeps one line per principal,
 *     <id> <role> <email> <salt>:<hash>
 * with hash = hex(SHA-256(salt || secret)) and a fresh random 16-byte salt (hex), and
 * compares a presented secret with it in constant time. Lines starting with '#' and
 * blank lines are ignored. The file is written only by these calls (mode 0600, replaced
 * atomically: a reader sees the old file or the new one); a gateway re-reads it when it
 * changes, so a revoked credential stops working at once, on connections already open
 * too.
 *
 * Thread safety: every call is reentrant. Two processes adding to one file at once are
 * serialized by a lock on the file (flock). */
#ifndef GOBLIN_PRINCIPAL_H
#define GOBLIN_PRINCIPAL_H

#include "api.h"
#include "error.h"

GOBLIN_BEGIN_DECLS

typedef enum goblin_role {
    GOBLIN_ROLE_RESEARCHER = 0, /* own jobs only */
    GOBLIN_ROLE_ADMIN = 1,      /* every job on the node */
    GOBLIN_ROLE_COUNT
} goblin_role;

/** "researcher" or "admin"; NULL outside the enum. */
GOBLIN_API const char *goblin_role_name(goblin_role r);
/** The role named @p name into *out; GOBLIN_EINVAL. */
GOBLIN_API goblin_err goblin_role_from_name(const char *name, goblin_role *out);

/** Bytes for a credential: 86 characters and the NUL. */
#define GOBLIN_CREDENTIAL_SIZE 87
/** Bytes for a principal id: 16 hex digits and the NUL. */
#define GOBLIN_PRINCIPAL_ID_SIZE 17
/** Longest email address (RFC 5321), without the NUL. */
#define GOBLIN_EMAIL_MAX 254
/** Most principals one credentials file holds. */
#define GOBLIN_PRINCIPALS_MAX 100000

typedef struct goblin_principal_info {
    char id[GOBLIN_PRINCIPAL_ID_SIZE];
    goblin_role role;
    char email[GOBLIN_EMAIL_MAX + 1];
} goblin_principal_info;

/** Add a principal with @p email (3 .. GOBLIN_EMAIL_MAX printable characters, one '@',
 *  no blanks; compared without regard to case) and @p role to the credentials file
 *  @p file (created, mode 0600, if missing), and write its new credential into
 *  @p credential_out (GOBLIN_CREDENTIAL_SIZE bytes): show it to the person once; it
 *  cannot be recovered. @p info_out (may be NULL) receives the new entry.
 *  GOBLIN_EINVAL (bad email or role), GOBLIN_EBUSY (that email is already there: revoke
 *  it first), GOBLIN_EFORMAT (the file has a malformed line), GOBLIN_ELIMIT (file full),
 *  GOBLIN_EIO, GOBLIN_ECRYPTO, GOBLIN_ENOMEM; @p err says why. */
GOBLIN_API goblin_err goblin_principal_add(const char *file, const char *email, goblin_role role,
                                           char *credential_out, goblin_principal_info *info_out,
                                           goblin_errbuf *err);

/** Remove the principal whose email or id is @p who from @p file. Its credential stops
 *  working at once (gateways re-read the file). GOBLIN_ENOTFOUND, GOBLIN_EFORMAT,
 *  GOBLIN_EIO, GOBLIN_EINVAL, GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_principal_revoke(const char *file, const char *who,
                                              goblin_errbuf *err);

/** The principals of @p file, in file order: up to @p cap into @p out (may be NULL when
 *  @p cap is 0); *n (if not NULL) = how many there are. A missing file has none.
 *  GOBLIN_EFORMAT, GOBLIN_EIO, GOBLIN_EINVAL, GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_principal_list(const char *file, goblin_principal_info *out,
                                            int32_t cap, int32_t *n, goblin_errbuf *err);

/** Whose is @p credential? *out (may be NULL) gets the principal on success.
 *  GOBLIN_EAUTH (malformed, unknown or wrong: the same answer for all three),
 *  GOBLIN_EFORMAT, GOBLIN_EIO, GOBLIN_EINVAL, GOBLIN_ENOMEM. */
GOBLIN_API goblin_err goblin_principal_check(const char *file, const char *credential,
                                             goblin_principal_info *out, goblin_errbuf *err);

GOBLIN_END_DECLS

#endif
