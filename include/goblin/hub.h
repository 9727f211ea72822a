/* goblin/hub.h - goblin-hub, the GPU Goblin network's server: people and their keys.
 *
 * A hub lives in one directory made by goblin_hub_init_dir:
 *     hub.conf   the operator's settings (key = value lines, see goblin_hub_config)
 *     secret     32 random bytes (hex, mode 0600): the key of every digest the hub keeps
 *     cert.pem, key.pem   the HTTPS identity (goblin_tls_init_dir)
 *     hub.db     the store (goblin/hub_store.h)
 *
 * People sign in by email: goblin_hub_signin_start mails a one-time code and a link
 * (SMTP through libcurl); either one, presented to goblin_hub_signin_finish before it
 * expires, opens a session. Codes, link tokens, session cookies and node keys are kept
 * only as HMAC-SHA-256 digests under the server secret and compared in constant time;
 * each code and link works once. Starting a sign-in is limited per address and per
 * client address, and so are wrong codes (GOBLIN_ELIMIT), within a sliding window.
 *
 * A signed-in researcher files an access request (goblin_hub_store_request_add); the
 * operator decides it (goblin_hub_request_decide, also `goblin-hub requests`), which
 * mails the researcher; an approved researcher makes lab-node keys
 * (goblin_hub_key_create: the text is shown once) and revokes them.
 *
 * Calls on a hub keep their detail on it (goblin_hub_error); a hub may be used from
 * several threads (its web server does). Times are seconds since the Unix epoch, given
 * by the caller (0: now). docs/hub.md says how the pieces fit. */
#ifndef GOBLIN_HUB_H
#define GOBLIN_HUB_H

#include "api.h"
#include "error.h"
#include "hub_store.h"

GOBLIN_BEGIN_DECLS

/** Files of a hub directory. */
#define GOBLIN_HUB_CONFIG_FILE "hub.conf"
#define GOBLIN_HUB_SECRET_FILE "secret"
#define GOBLIN_HUB_DB_FILE "hub.db"
/** The machines address goblin-hub init writes into hub.conf. */
#define GOBLIN_HUB_MACHINES_DEFAULT "tls+tcp://127.0.0.1:8444"
/** Most lab_weight lines in a configuration. */
#define GOBLIN_HUB_LAB_WEIGHTS_MAX 64
/** Most admin addresses in a configuration. */
#define GOBLIN_HUB_ADMINS_MAX 16
/** Bytes for a session cookie's value and a link token: 64 hex digits and the NUL. */
#define GOBLIN_HUB_TOKEN_SIZE 65
/** Bytes for a sign-in code: 8 decimal digits and the NUL. */
#define GOBLIN_HUB_CODE_SIZE 9
/** Bytes for a node key: "gbk1_" + 16 hex digits (its id) + "_" + 64 hex digits + NUL. */
#define GOBLIN_HUB_NODE_KEY_SIZE 87

/** The operator's settings (hub.conf). Each is a line `name = value`; '#' starts a
 *  comment line; an unknown name is an error. */
typedef struct goblin_hub_config {
    char listen[256];     /* listen: "https://127.0.0.1:8443" (port 0: any free port) */
    char public_url[256]; /* public_url: the base of mailed links, "https://host:port" */
    char smtp_url[256];   /* smtp_url: "smtp://host:port" or "smtps://..." */
    char smtp_user[128], smtp_password[256]; /* smtp_user, smtp_password (may be empty) */
    char mail_from[GOBLIN_HUB_EMAIL_MAX + 1]; /* mail_from */
    char store[512]; /* store: a store location (goblin/hub_store.h); default DIR/hub.db */
    char admins[GOBLIN_HUB_ADMINS_MAX][GOBLIN_HUB_EMAIL_MAX + 1]; /* admin (one per line) */
    size_t n_admins;
    uint32_t code_ttl_s;        /* code_ttl_s: a code's life, default 900 */
    uint32_t session_ttl_s;     /* session_ttl_s: default 604800 (a week) */
    uint32_t rate_window_s;     /* rate_window_s: the window of every limit, default 900 */
    uint32_t codes_per_address; /* codes_per_address: sign-ins started per address, default 3 */
    uint32_t codes_per_client;  /* codes_per_client: per client address, default 10 */
    uint32_t failures_per_code; /* failures_per_code: wrong codes before a code dies, default 5 */
    uint32_t failures_per_address; /* failures_per_address: default 10 */
    uint32_t failures_per_client;  /* failures_per_client: default 20 */
    uint32_t max_body_bytes;    /* max_body_bytes: largest form posted, default 16384 */
    uint32_t max_keys;          /* max_keys: live node keys per account, default 20 */
    uint32_t max_requests;      /* max_requests: access requests per account, default 5 */
    /* trust_forwarded_for (yes|no, default no): take the client address from the
     * X-Forwarded-For header (only behind a reverse proxy that sets it). */
    bool trust_forwarded_for;
    /* The machine side (docs/hub.md, "Machines"). machines: the address volunteers'
     * workers and lab nodes dial, "tls+tcp://host:port" (the hub's cert.pem; tcp:// only
     * on a loopback address); empty (the default): not served. goblin-hub init writes
     * tls+tcp://127.0.0.1:8444. */
    char machines[256];
    uint32_t machines_max_workers; /* machines_max_workers: workers held, default 4096 */
    uint32_t machines_max_nodes;   /* machines_max_nodes: lab nodes connected, default 256 */
    /* lab_weight = EMAIL N (1 .. 1000; one line per lab, up to GOBLIN_HUB_LAB_WEIGHTS_MAX):
     * the lab of account EMAIL gets N shares of the workers; every other lab 1. */
    struct {
        char email[GOBLIN_HUB_EMAIL_MAX + 1];
        uint32_t weight;
    } lab_weights[GOBLIN_HUB_LAB_WEIGHTS_MAX];
    size_t n_lab_weights;
} goblin_hub_config;

/** Fill @p c with the defaults above (listen https://127.0.0.1:8443, smtp
 *  smtp://127.0.0.1:25, mail_from goblin-hub@localhost, no admins). NULL: no-op. */
GOBLIN_API void goblin_hub_config_default(goblin_hub_config *c);

/** Read the configuration text @p text (borrowed) over the defaults into @p out (on
 *  success only). GOBLIN_ESYNTAX (a line that is not `name = value`, an unknown name),
 *  GOBLIN_ERANGE (a number out of range), GOBLIN_ELIMIT (a value too long),
 *  GOBLIN_EINVAL; @p err names the line. */
GOBLIN_API goblin_err goblin_hub_config_parse(const char *text, goblin_hub_config *out,
                                              goblin_errbuf *err);

/** Make a hub directory @p dir (borrowed; created mode 0700): certificate and key (with
 *  @p dns_name, may be NULL, as an extra certificate name), a fresh secret, a hub.conf
 *  from the defaults with @p admin (may be NULL) as its admin, and a migrated hub.db.
 *  The certificate's fingerprint into @p fingerprint_out (65 bytes, may be NULL).
 *  GOBLIN_EBUSY (a file exists already), GOBLIN_EIO, GOBLIN_ECRYPTO, GOBLIN_EINVAL. */
GOBLIN_API goblin_err goblin_hub_init_dir(const char *dir, const char *admin, const char *dns_name,
                                          char *fingerprint_out, goblin_errbuf *err);

typedef struct goblin_hub goblin_hub;

/** Open the hub in directory @p dir (borrowed): its configuration, secret and store.
 *  Serves nothing until goblin_hub_serve. *@p out on success only.
 *  GOBLIN_EIO, GOBLIN_ESYNTAX, GOBLIN_EFORMAT (a bad secret), store errors; @p err. */
GOBLIN_API goblin_err goblin_hub_open(const char *dir, goblin_hub **out, goblin_errbuf *err);
/** Stop serving and free @p h; NULL is a no-op. */
GOBLIN_API void goblin_hub_free(goblin_hub *h);
/** The detail of the last failed call on @p h; valid until the next call on it. */
GOBLIN_API const char *goblin_hub_error(const goblin_hub *h);
/** @p h's configuration and store (borrowed; live as long as @p h). */
GOBLIN_API const goblin_hub_config *goblin_hub_get_config(const goblin_hub *h);
GOBLIN_API goblin_hub_store *goblin_hub_get_store(goblin_hub *h);

/** Serve the web pages over HTTPS on the configuration's listen address, on nng's
 *  threads, until goblin_hub_free. GOBLIN_ESTATE (already serving), GOBLIN_EIO,
 *  GOBLIN_EINVAL (a bad listen address). */
GOBLIN_API goblin_err goblin_hub_serve(goblin_hub *h);
/** The TCP port being served, into *@p out (after goblin_hub_serve). */
GOBLIN_API goblin_err goblin_hub_port(const goblin_hub *h, int *out);

/** Start a sign-in of @p email (borrowed; 3 .. GOBLIN_HUB_EMAIL_MAX characters, one
 *  '@', no blanks or control characters) from client address @p client (borrowed, may
 *  be "") at @p now, and mail its code and link to @p email.
 *  GOBLIN_EINVAL (not an address), GOBLIN_ELIMIT (too many sign-ins for this address
 *  or this client in the window), GOBLIN_EIO (the mail was not accepted). */
GOBLIN_API goblin_err goblin_hub_signin_start(goblin_hub *h, const char *email, const char *client,
                                              int64_t now);
/** Finish a sign-in of @p email with @p secret: the code mailed (@p is_link false) or
 *  the link's token (@p is_link true). On success the sign-in is used up, the account
 *  exists, and a new session's cookie value goes to @p cookie_out
 *  (GOBLIN_HUB_TOKEN_SIZE bytes) and its account to @p account_out (may be NULL).
 *  GOBLIN_EAUTH (wrong, expired or used: one message for all, nothing learned),
 *  GOBLIN_ELIMIT (too many wrong codes for this address or client), GOBLIN_EINVAL. */
GOBLIN_API goblin_err goblin_hub_signin_finish(goblin_hub *h, const char *email, const char *secret,
                                               bool is_link, const char *client, int64_t now,
                                               char *cookie_out, goblin_hub_account *account_out);
/** The account of session cookie @p cookie at @p now; GOBLIN_EAUTH if none. */
GOBLIN_API goblin_err goblin_hub_session_account(goblin_hub *h, const char *cookie, int64_t now,
                                                 goblin_hub_account *out);
/** End the session of @p cookie (no error if there is none). */
GOBLIN_API goblin_err goblin_hub_session_end(goblin_hub *h, const char *cookie);
/** The form token of session (or pre-session) cookie @p cookie into @p out
 *  (GOBLIN_HUB_TOKEN_SIZE bytes), and whether @p token is it (constant time). */
GOBLIN_API goblin_err goblin_hub_csrf_token(const goblin_hub *h, const char *cookie, char *out);
GOBLIN_API bool goblin_hub_csrf_check(const goblin_hub *h, const char *cookie, const char *token);
/** Whether @p email is one of the configuration's admins. */
GOBLIN_API bool goblin_hub_is_admin(const goblin_hub *h, const char *email);

/** File an access request of @p account_id (fields of @p r as in
 *  goblin_hub_store_request_add); GOBLIN_ELIMIT past max_requests, GOBLIN_EBUSY while
 *  one is pending. */
GOBLIN_API goblin_err goblin_hub_request_file(goblin_hub *h, int64_t account_id,
                                              const goblin_hub_access_request *r, int64_t now,
                                              int64_t *id);
/** Decide pending request @p id (approve or deny, with @p note, may be NULL) and mail
 *  the researcher. A decision stored but not mailed returns GOBLIN_EIO with the
 *  decision kept. GOBLIN_ENOTFOUND, GOBLIN_ESTATE (already decided). */
GOBLIN_API goblin_err goblin_hub_request_decide(goblin_hub *h, int64_t id, bool approve,
                                                const char *note, int64_t now);

/** Make a lab-node key for approved account @p account_id labelled @p label (1 ..
 *  GOBLIN_HUB_LABEL_MAX bytes): its text into @p key_out (GOBLIN_HUB_NODE_KEY_SIZE
 *  bytes; shown once, only its digest is kept), its id into @p id (may be NULL).
 *  GOBLIN_EAUTH (the account is not approved), GOBLIN_ELIMIT (max_keys live keys). */
GOBLIN_API goblin_err goblin_hub_key_create(goblin_hub *h, int64_t account_id, const char *label,
                                            int64_t now, char *key_out, int64_t *id);
/** The live key whose text is @p key into @p out; GOBLIN_EAUTH (unknown, wrong or
 *  revoked), GOBLIN_EINVAL (not a key's form). */
GOBLIN_API goblin_err goblin_hub_key_verify(goblin_hub *h, const char *key, goblin_hub_node_key *out);

/* ---- volunteers: workers linked to an account ------------------------------------------ *
 *
 * A volunteer signs in like anyone and links the identities of the workers they run to
 * their account: the owner that verification uses to keep replicas on independent
 * machines, and whose page shows the work labs reported of each (goblin_hub_store_link_*,
 * goblin_hub_store_work_add). docs/hub.md, "Volunteers: linking workers". */

/** Bytes for a link code: 32 lowercase hex digits and the NUL. */
#define GOBLIN_HUB_LINK_CODE_SIZE 33
/** Longest link statement accepted (bytes; a real one is under 290). */
#define GOBLIN_HUB_LINK_STATEMENT_MAX 512

/** The current link code of @p account_id into @p code_out (GOBLIN_HUB_LINK_CODE_SIZE
 *  bytes), drawn at @p now if the account has none yet. Only its seed is stored; the
 *  code is derived with the hub's secret. GOBLIN_ENOTFOUND (no such account). */
GOBLIN_API goblin_err goblin_hub_link_code(goblin_hub *h, int64_t account_id, int64_t now,
                                           char *code_out);
/** Draw a new link code for @p account_id (into @p code_out, may be NULL): statements
 *  made for the old one are refused from now on; links already made stay. */
GOBLIN_API goblin_err goblin_hub_link_code_redraw(goblin_hub *h, int64_t account_id, int64_t now,
                                                  char *code_out);
/** Link the worker identity that @p statement (borrowed; the line `goblin-worker link
 *  CODE` printed, goblin_worker_link_statement) proves to @p account_id, and its
 *  fingerprint into @p fingerprint_out (65 bytes, may be NULL). Only the fingerprint is
 *  stored. GOBLIN_EINVAL (not a statement: empty, over GOBLIN_HUB_LINK_STATEMENT_MAX,
 *  malformed), GOBLIN_EAUTH (the signature does not verify, or the statement was made
 *  for a code that is not this account's current one), GOBLIN_ESTATE (the identity is
 *  linked to another account), GOBLIN_ELIMIT (GOBLIN_HUB_LINKS_MAX links); linking an
 *  identity again into the same account is GOBLIN_OK. */
GOBLIN_API goblin_err goblin_hub_worker_link(goblin_hub *h, int64_t account_id, const char *statement,
                                             int64_t now, char *fingerprint_out);
/** Unlink identity @p fingerprint from @p account_id: GOBLIN_ENOTFOUND if this account
 *  has no such link (another account's is never touched), GOBLIN_EINVAL (not 64
 *  lowercase hex digits). Its counters stay with the identity. */
GOBLIN_API goblin_err goblin_hub_worker_unlink(goblin_hub *h, int64_t account_id, const char *fingerprint);

/* ---- machines: the relay between lab nodes and volunteers' workers ------------------ *
 *
 * Workers dial the machines address as they would a node (goblin-worker --node URL
 * --fingerprint HUB); lab nodes dial it with a node key (goblin_node_hub_connect). The
 * hub lends each connected lab node a share of the workers (lab_weight) and splices each
 * lent worker's connection to a data connection the node opened for it: every message
 * between them passes through the hub's memory unread and is never stored. The worker
 * proves its identity to the node through the splice (CHALLENGE, PROOF), so identities
 * stay end to end. docs/hub.md, "Machines", has the design and its reasons. */

typedef struct goblin_hub_machines_stats {
    int64_t nodes_connected;     /* lab nodes with a live control connection */
    int64_t workers_waiting;     /* workers connected, not lent (reserved ones included) */
    int64_t workers_lent;        /* workers spliced to a lab node now */
    int64_t workers_lent_total;  /* splices made since serving began */
    int64_t workers_taken_back;  /* splices ended to give another lab its share */
    int64_t nodes_refused;       /* NODE_HELLOs refused (unknown, wrong or revoked keys; full) */
    int64_t workers_refused;     /* worker connections refused (not a HELLO first; full) */
    int64_t tickets_refused;     /* ATTACHes with no such ticket */
    int64_t connections_refused; /* bytes that are neither protocol, or out of its bounds */
    int64_t bytes_relayed;       /* bytes copied between spliced connections, both ways */
    int64_t quarantines_recorded; /* lab nodes' QUARANTINE reports stored */
    int64_t quarantines_repeated; /* reports of an identity under quarantine already */
    int64_t quarantines_refused;  /* reports refused (malformed, or past a key's bound) */
    int64_t workers_refused_quarantined; /* workers whose PROOF named a quarantined identity */
    int64_t workers_ended_quarantined;   /* splices ended when their identity was quarantined */
    int64_t work_reports;         /* lab nodes' WORK reports recorded (a lent worker's counts) */
    int64_t work_reports_refused; /* ... about an identity not lent to that node: dropped */
    int64_t owners_told;          /* OWNERs sent: a lent identity linked to a volunteer */
    int64_t labs_active;          /* distinct labs with a lab node connected */
    int64_t tasks_reported;       /* tasks lab nodes gave lent workers (WORK), since serving */
    int64_t results_accepted;     /* ... their results the lab nodes verified and accepted */
    int64_t results_rejected;     /* ... and rejected */
    double tasks_per_second;      /* tasks_reported over the last 60 s, per second */
    int64_t workers_introduced;   /* workers sent to dial a lab node themselves, since serving */
    int64_t workers_direct;       /* ... connected to their node now (counted in its lent) */
    int64_t intro_proofs_refused; /* workers whose PROOF to the hub (for an introduction) failed */
    int64_t direct_left;          /* introduced workers their node reported gone (LEFT) */
    int64_t direct_offers_refused; /* NODE_DIRECT addresses a worker would not follow */
    int64_t nodes_direct;         /* lab nodes connected now that offered an address (NODE_DIRECT) */
} goblin_hub_machines_stats;

/** One connection of the machines address, for the operator's page. */
typedef struct goblin_hub_machine {
    bool node;              /* a lab node's control connection; else a worker */
    int64_t lab;            /* node: its lab's account; worker: the lab it is lent to, 0 */
    int64_t key_id;         /* node: its node key */
    uint32_t weight;        /* node: its lab_weight */
    int32_t lent;           /* node: workers lent to it now */
    char identity[65];      /* worker: the identity its PROOF named ("" before it) */
    char origin[48];        /* worker: "10.1.2.0/24", "2001:db8:1::/48" or "local" */
    bool direct;            /* worker: introduced to its lab's node, connected there */
} goblin_hub_machine;

/** Call @p each for the lab nodes and then the workers connected now (at most @p max
 *  of each; copies made under the relay's lock, the calls after it). GOBLIN_ESTATE if
 *  the machines address is not served; @p each's error ends the walk. */
GOBLIN_API goblin_err goblin_hub_machines_each(goblin_hub *h, int32_t max,
                                               goblin_err (*each)(void *ctx, const goblin_hub_machine *m),
                                               void *ctx);

/** Serve the machine side on the configuration's machines address, on nng's threads and
 *  one of the hub's own, until goblin_hub_free. GOBLIN_EINVAL (no machines address, or
 *  plain tcp:// off loopback), GOBLIN_ESTATE (served already), GOBLIN_EIO, GOBLIN_ECRYPTO
 *  (the hub's certificate); goblin_hub_error says why. */
GOBLIN_API goblin_err goblin_hub_serve_machines(goblin_hub *h);
/** The TCP port the machines address is served on (after goblin_hub_serve_machines). */
GOBLIN_API goblin_err goblin_hub_machines_port(const goblin_hub *h, int *out);
/** The relay's counters now. GOBLIN_ESTATE when not serving machines. */
GOBLIN_API goblin_err goblin_hub_machines_stats_get(goblin_hub *h, goblin_hub_machines_stats *out);
/** Workers lent now to the lab nodes of account @p lab, into *@p out. */
GOBLIN_API goblin_err goblin_hub_machines_lab_lent(goblin_hub *h, int64_t lab, int64_t *out);

GOBLIN_END_DECLS

#endif
