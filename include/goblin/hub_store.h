/* goblin/hub_store.h - what goblin-hub keeps: accounts, sign-in codes, sessions,
 * access requests, lab-node keys, quarantines, and volunteers' worker identities with
 * the work a lab reported of each, behind one narrow interface.
 *
 * A store is opened from a location: "sqlite:PATH" or a plain PATH is an SQLite
 * database file (the default; created on first open); "postgresql://..." (a libpq
 * URI) names a PostgreSQL server (GOBLIN_ENOTSUP in a build without libpq). Every
 * backend implements the same operations, so the hub never writes SQL of its own;
 * both backends send every value as a parameter.
 *
 * Opening migrates the schema to GOBLIN_HUB_STORE_SCHEMA_VERSION, one numbered step
 * at a time, each in its own transaction; a database from a newer hub is refused
 * (GOBLIN_EVERSION), never touched.
 *
 * Secrets are never stored: sign-in codes, sign-in links, session cookies and node
 * keys arrive here already hashed (32-byte HMAC-SHA-256 digests made by the hub with
 * its server secret); a link code's seed is stored, the code is derived from it with the
 * server secret. Times are seconds since the Unix epoch given by the caller, so
 * that expiry can be checked without waiting for a clock.
 *
 * Errors: calls on a store keep their detail on it (goblin_hub_store_error);
 * goblin_hub_store_open writes it into @p err. Every call returns GOBLIN_EINVAL for a
 * NULL store or a bad argument, GOBLIN_EIO for a failure of the database itself.
 *
 * Thread safety: a store may be used from several threads (calls are serialized
 * inside); two processes may open one database file at once (the hub and its
 * `goblin-hub requests` command). */
#ifndef GOBLIN_HUB_STORE_H
#define GOBLIN_HUB_STORE_H

#include "api.h"
#include "error.h"

GOBLIN_BEGIN_DECLS

/** The schema version this library writes. */
#define GOBLIN_HUB_STORE_SCHEMA_VERSION 2
/** Longest email address, without the NUL (RFC 5321). */
#define GOBLIN_HUB_EMAIL_MAX 254
/** Longest name and institution in an access request (bytes, without the NUL). */
#define GOBLIN_HUB_NAME_MAX 200
/** Longest purpose and expected use in an access request (bytes, without the NUL). */
#define GOBLIN_HUB_TEXT_MAX 2000
/** Longest node-key label, quarantine subject and reporter (bytes, without the NUL). */
#define GOBLIN_HUB_LABEL_MAX 128
/** Longest quarantine reason and decision note (bytes, without the NUL). */
#define GOBLIN_HUB_REASON_MAX 500
/** Longest rate-limit key (an address and a kind; bytes, without the NUL). */
#define GOBLIN_HUB_KEY_MAX 300
/** Most worker identities linked to one account. */
#define GOBLIN_HUB_LINKS_MAX 256
/** Default bound on the identities counted while linked to no account (see
 *  goblin_hub_store_work_add); goblin_hub_store_set_work_limit changes it. */
#define GOBLIN_HUB_WORK_UNLINKED_MAX 65536
/** A work counter stops growing here (2^62), and one report adds at most this much. */
#define GOBLIN_HUB_WORK_COUNT_MAX ((int64_t)1 << 62)

typedef struct goblin_hub_store goblin_hub_store;

typedef struct goblin_hub_account {
    int64_t id;
    char email[GOBLIN_HUB_EMAIL_MAX + 1]; /* lower case */
    int64_t created;
} goblin_hub_account;

/** An outstanding sign-in: the digests of its code and of its link's token. */
typedef struct goblin_hub_signin_code {
    int64_t id;
    uint8_t code_digest[32];
    uint8_t link_digest[32];
    int64_t created, expires;
    int32_t failures; /* wrong codes tried against it */
} goblin_hub_signin_code;

typedef enum goblin_hub_request_status {
    GOBLIN_HUB_REQUEST_PENDING = 0,
    GOBLIN_HUB_REQUEST_APPROVED = 1,
    GOBLIN_HUB_REQUEST_DENIED = 2,
    GOBLIN_HUB_REQUEST_STATUS_COUNT
} goblin_hub_request_status;

/** "pending", "approved", "denied"; NULL outside the enum. */
GOBLIN_API const char *goblin_hub_request_status_name(goblin_hub_request_status s);

typedef struct goblin_hub_access_request {
    int64_t id, account_id;
    char email[GOBLIN_HUB_EMAIL_MAX + 1];
    char name[GOBLIN_HUB_NAME_MAX + 1];
    char institution[GOBLIN_HUB_NAME_MAX + 1];
    char purpose[GOBLIN_HUB_TEXT_MAX + 1];
    char expected_use[GOBLIN_HUB_TEXT_MAX + 1];
    goblin_hub_request_status status;
    char note[GOBLIN_HUB_REASON_MAX + 1]; /* the operator's, with the decision */
    int64_t created, decided;             /* decided: 0 while pending */
} goblin_hub_access_request;

typedef struct goblin_hub_node_key {
    int64_t id, account_id;
    char label[GOBLIN_HUB_LABEL_MAX + 1];
    int64_t created, revoked; /* revoked: 0 while valid */
} goblin_hub_node_key;

typedef struct goblin_hub_quarantine {
    int64_t id;
    char subject[GOBLIN_HUB_LABEL_MAX + 1];     /* a worker identity or an owner */
    char reason[GOBLIN_HUB_REASON_MAX + 1];
    char reported_by[GOBLIN_HUB_LABEL_MAX + 1]; /* the lab node that reported it */
    int64_t created, lifted;                    /* lifted: 0 while in force */
} goblin_hub_quarantine;

/** A worker identity linked to a volunteer's account (the owner, which verification
 *  uses to keep replicas on independent machines), with the work labs reported of it. */
typedef struct goblin_hub_link {
    char fingerprint[65]; /* the identity: SHA-256 of the worker's public key, lowercase hex */
    int64_t account_id;   /* 0: linked to no account (goblin_hub_store_link_get) */
    int64_t created;      /* when it was linked (0 if not) */
    int64_t tasks, accepted, rejected;
} goblin_hub_link;

/* ---- opening --------------------------------------------------------------- */

/** Open (creating and migrating as needed) the store at @p location (borrowed; see
 *  the top of this file). *@p out is set on success only.
 *  GOBLIN_EINVAL, GOBLIN_ENOTSUP (a backend this build lacks), GOBLIN_EVERSION (a
 *  newer schema), GOBLIN_EIO, GOBLIN_ENOMEM; @p err says why. */
GOBLIN_API goblin_err goblin_hub_store_open(const char *location, goblin_hub_store **out,
                                            goblin_errbuf *err);
/** Close @p s; NULL is a no-op. */
GOBLIN_API void goblin_hub_store_close(goblin_hub_store *s);
/** The detail of the last failed call on @p s ("" if none); valid until the next call. */
GOBLIN_API const char *goblin_hub_store_error(const goblin_hub_store *s);
/** The schema version of the open database into *@p out. */
GOBLIN_API goblin_err goblin_hub_store_schema_version(goblin_hub_store *s, int32_t *out);

/* ---- accounts -------------------------------------------------------------- */

/** The account of @p email (compared and stored in lower case), created at @p now if
 *  there is none, into *@p out. */
GOBLIN_API goblin_err goblin_hub_store_account_ensure(goblin_hub_store *s, const char *email,
                                                      int64_t now, goblin_hub_account *out);
/** The account with @p id, or GOBLIN_ENOTFOUND. */
GOBLIN_API goblin_err goblin_hub_store_account_get(goblin_hub_store *s, int64_t id,
                                                   goblin_hub_account *out);

/* ---- sign-in codes ----------------------------------------------------------- */

/** Record a sign-in for @p email (lower case) expiring at @p expires. */
GOBLIN_API goblin_err goblin_hub_store_signin_add(goblin_hub_store *s, const char *email,
                                                  const uint8_t code_digest[32],
                                                  const uint8_t link_digest[32], int64_t now,
                                                  int64_t expires);
/** Call @p each for every sign-in of @p email that is unused, unexpired at @p now and
 *  has had fewer than @p max_failures wrong codes (newest first, at most 16). A
 *  non-OK return from @p each stops the walk and is returned. */
GOBLIN_API goblin_err goblin_hub_store_signin_each(
    goblin_hub_store *s, const char *email, int64_t now, int32_t max_failures,
    goblin_err (*each)(void *ctx, const goblin_hub_signin_code *c), void *ctx);
/** Mark sign-in @p id used: GOBLIN_EAUTH if it already was (one use only, even when
 *  two requests race). */
GOBLIN_API goblin_err goblin_hub_store_signin_use(goblin_hub_store *s, int64_t id, int64_t now);
/** Count one wrong code against every outstanding sign-in of @p email. */
GOBLIN_API goblin_err goblin_hub_store_signin_fail(goblin_hub_store *s, const char *email,
                                                   int64_t now);

/* ---- rate-limit events --------------------------------------------------------- */

/** Record one event under @p key (1 .. GOBLIN_HUB_KEY_MAX bytes) at @p now, forgetting
 *  events of every key older than @p forget_before. */
GOBLIN_API goblin_err goblin_hub_store_event_add(goblin_hub_store *s, const char *key, int64_t now,
                                                 int64_t forget_before);
/** How many events of @p key happened at or after @p since, into *@p out. */
GOBLIN_API goblin_err goblin_hub_store_event_count(goblin_hub_store *s, const char *key,
                                                   int64_t since, int64_t *out);

/* ---- sessions -------------------------------------------------------------------- */

/** A session of @p account_id, known by the digest of its cookie, until @p expires. */
GOBLIN_API goblin_err goblin_hub_store_session_add(goblin_hub_store *s, const uint8_t digest[32],
                                                   int64_t account_id, int64_t now,
                                                   int64_t expires);
/** The account of the unexpired session @p digest, or GOBLIN_ENOTFOUND. */
GOBLIN_API goblin_err goblin_hub_store_session_get(goblin_hub_store *s, const uint8_t digest[32],
                                                   int64_t now, int64_t *account_id);
/** End session @p digest (no error if there is none). */
GOBLIN_API goblin_err goblin_hub_store_session_end(goblin_hub_store *s, const uint8_t digest[32]);

/* ---- access requests ----------------------------------------------------------- */

/** A new pending request of @p account_id; its id into *@p id. @p r's text fields are
 *  copied verbatim (any bytes but NUL, within their limits); its other fields ignored. */
GOBLIN_API goblin_err goblin_hub_store_request_add(goblin_hub_store *s, int64_t account_id,
                                                   const goblin_hub_access_request *r,
                                                   int64_t now, int64_t *id);
/** Request @p id, or GOBLIN_ENOTFOUND. */
GOBLIN_API goblin_err goblin_hub_store_request_get(goblin_hub_store *s, int64_t id,
                                                   goblin_hub_access_request *out);
/** Call @p each for the requests of @p account_id (0: everyone's) whose status is
 *  @p status (-1: any), oldest first; at most @p limit (> 0) of them. */
GOBLIN_API goblin_err goblin_hub_store_request_each(
    goblin_hub_store *s, int64_t account_id, int32_t status, int32_t limit,
    goblin_err (*each)(void *ctx, const goblin_hub_access_request *r), void *ctx);
/** Decide pending request @p id (@p status APPROVED or DENIED) with @p note (may be
 *  ""). GOBLIN_ENOTFOUND, GOBLIN_ESTATE (already decided). */
GOBLIN_API goblin_err goblin_hub_store_request_decide(goblin_hub_store *s, int64_t id,
                                                      goblin_hub_request_status status,
                                                      const char *note, int64_t now);
/** Whether @p account_id has an approved request, into *@p out. */
GOBLIN_API goblin_err goblin_hub_store_account_approved(goblin_hub_store *s, int64_t account_id,
                                                        bool *out);

/* ---- lab-node keys ----------------------------------------------------------------- */

/** A new key of @p account_id labelled @p label, known by @p digest; its id into *@p id. */
GOBLIN_API goblin_err goblin_hub_store_key_add(goblin_hub_store *s, int64_t account_id,
                                               const char *label, const uint8_t digest[32],
                                               int64_t now, int64_t *id);
/** Call @p each for the keys of @p account_id (revoked ones too), oldest first. */
GOBLIN_API goblin_err goblin_hub_store_key_each(
    goblin_hub_store *s, int64_t account_id,
    goblin_err (*each)(void *ctx, const goblin_hub_node_key *k), void *ctx);
/** Revoke key @p id of @p account_id: GOBLIN_ENOTFOUND if that account has no such
 *  key (another account's key is never touched), GOBLIN_ESTATE if already revoked. */
GOBLIN_API goblin_err goblin_hub_store_key_revoke(goblin_hub_store *s, int64_t account_id,
                                                  int64_t id, int64_t now);
/** The key @p id with digest @p digest, unrevoked, into *@p out; else GOBLIN_EAUTH. */
GOBLIN_API goblin_err goblin_hub_store_key_check(goblin_hub_store *s, int64_t id,
                                                 const uint8_t digest[32], goblin_hub_node_key *out);

/* ---- quarantines ------------------------------------------------------------------- */

/** Quarantine @p subject for @p reason, as reported by @p reported_by; id into *@p id. */
GOBLIN_API goblin_err goblin_hub_store_quarantine_add(goblin_hub_store *s, const char *subject,
                                                      const char *reason, const char *reported_by,
                                                      int64_t now, int64_t *id);
/** Lift quarantine @p id: GOBLIN_ENOTFOUND, GOBLIN_ESTATE (already lifted). */
GOBLIN_API goblin_err goblin_hub_store_quarantine_lift(goblin_hub_store *s, int64_t id, int64_t now);
/** Whether @p subject is under a quarantine in force, into *@p out. */
GOBLIN_API goblin_err goblin_hub_store_quarantined(goblin_hub_store *s, const char *subject,
                                                   bool *out);
/** Call @p each for the quarantines in force (@p all: lifted ones too), oldest first. */
GOBLIN_API goblin_err goblin_hub_store_quarantine_each(
    goblin_hub_store *s, bool all, goblin_err (*each)(void *ctx, const goblin_hub_quarantine *q),
    void *ctx);

/* ---- volunteers: linked worker identities and their work ---------------------------- *
 *
 * An identity (a fingerprint: exactly 64 lowercase hex digits, else
 * GOBLIN_EINVAL) is linked to at most one account. The hub checks the volunteer's proof
 * of possession before it links (goblin_hub_worker_link); the store keeps fingerprints,
 * owners and counters only, never a key or a statement. */

/** Link identity @p fingerprint to @p account_id at @p now. Linking it again to the
 *  same account changes nothing (GOBLIN_OK). GOBLIN_ESTATE: it is linked to another
 *  account (that account must unlink it first); GOBLIN_ELIMIT: the account has
 *  GOBLIN_HUB_LINKS_MAX identities; GOBLIN_ENOTFOUND: no such account. Atomic: two
 *  accounts racing for one identity, one wins. */
GOBLIN_API goblin_err goblin_hub_store_link_add(goblin_hub_store *s, int64_t account_id,
                                                const char *fingerprint, int64_t now);
/** Unlink @p fingerprint from @p account_id; its counters stay (they count again as
 *  unlinked). GOBLIN_ENOTFOUND if @p account_id has no such link (another account's
 *  link is never touched). */
GOBLIN_API goblin_err goblin_hub_store_link_remove(goblin_hub_store *s, int64_t account_id,
                                                   const char *fingerprint);
/** Call @p each for the links of @p account_id (0: every account's), oldest first, with
 *  their counters (0 where no work was reported). A non-OK return from @p each stops
 *  the walk and is returned. */
GOBLIN_API goblin_err goblin_hub_store_link_each(goblin_hub_store *s, int64_t account_id,
                                                 goblin_err (*each)(void *ctx, const goblin_hub_link *l),
                                                 void *ctx);
/** What the store knows of identity @p fingerprint into *@p out: its owner (account_id
 *  and created 0 if it is linked to none) and its counters. GOBLIN_ENOTFOUND if it is
 *  neither linked nor counted. */
GOBLIN_API goblin_err goblin_hub_store_link_get(goblin_hub_store *s, const char *fingerprint,
                                                goblin_hub_link *out);
/** Add @p tasks, @p accepted and @p rejected (each 0 .. GOBLIN_HUB_WORK_COUNT_MAX; a
 *  counter saturates there) to identity @p fingerprint's counters, linked or not, so
 *  that linking it later shows its past work. Bound: linked identities are always
 *  counted; of the identities linked to no account at most the work limit
 *  (GOBLIN_HUB_WORK_UNLINKED_MAX unless set) are kept, and counting one more forgets
 *  the unlinked one whose counters changed least recently. All three 0: nothing is
 *  stored. */
GOBLIN_API goblin_err goblin_hub_store_work_add(goblin_hub_store *s, const char *fingerprint,
                                                int64_t tasks, int64_t accepted, int64_t rejected);
/** Set the bound on unlinked identities counted (1 .. 2^31 - 1) for this store handle. */
GOBLIN_API goblin_err goblin_hub_store_set_work_limit(goblin_hub_store *s, uint32_t max_unlinked);
/** The seed of @p account_id's link code (32 random bytes; the hub derives the code from
 *  it with its secret, so a copy of the database alone does not show it) into
 *  @p seed; GOBLIN_ENOTFOUND if none was set. */
GOBLIN_API goblin_err goblin_hub_store_link_seed_get(goblin_hub_store *s, int64_t account_id,
                                                     uint8_t seed[32]);
/** Set (or replace: the old code stops working) the seed of @p account_id's link code.
 *  GOBLIN_ENOTFOUND: no such account. */
GOBLIN_API goblin_err goblin_hub_store_link_seed_set(goblin_hub_store *s, int64_t account_id,
                                                     const uint8_t seed[32], int64_t now);

GOBLIN_END_DECLS

#endif
