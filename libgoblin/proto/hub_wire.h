/* libgoblin/proto/hub_wire.h - the hub's machine protocol: lab nodes and goblin-hub
 * (internal; docs/hub.md, "Machines"). No sockets here.
 *
 * A lab node's link to the hub is one control connection and one data connection per
 * worker the hub lends it. Each message is one nng (pair1) message:
 *
 *   "GBLH"  u16 version (1)  u8 type  u8 flags (0)  u64 0  u64 body_length  body
 *
 * little-endian, like the worker protocol, and canonical (one spelling per message):
 *
 *   NODE_HELLO 1  node -> hub, first on the control connection:
 *                 u32 max_workers (0: no limit)  u32 key_len (1..128)  key[key_len]  pad
 *   NODE_ACK   2  hub -> node: u64 lab (the key's account)  u32 weight  u32 0
 *   OPEN       3  hub -> node: u8 ticket[32]  u8 origin_kind  u8 origin[7]: dial a data
 *                 connection for one worker; origin: the network origin of the worker's
 *                 own connection to the hub (kind 4: IPv4 /24 in origin[0..2]; kind 6:
 *                 IPv6 /48 in origin[0..5]; kind 0: none, a local connection; the rest
 *                 zero), so that the node's origin rule sees the volunteer, not the hub
 *   ATTACH     4  node -> hub, first (and only) message of a data connection: ticket[32];
 *                 after it the connection carries one worker's own messages both ways
 *   REFUSE     5  hub -> node: u32 reason (goblin_err)  u16 text_len  u16 0  text  pad
 *   HEARTBEAT  6  node -> hub, empty: the control connection is alive
 *   QUARANTINE 7  node -> hub, on the control connection only: the node quarantined a
 *                 worker identity. u8 identity[32] (the SHA-256 fingerprint of the
 *                 worker's key, raw)  u16 reason_len (1..GOBLIN__HUBW_REASON_MAX)  u16 0
 *                 u32 0  reason  pad; the hub records it (docs/hub.md, "Reputation")
 *   WORK       8  node -> hub, on the control connection only: what a worker the hub
 *                 lent did since the last WORK about it. u8 identity[32]  u32 tasks
 *                 (given to it)  u32 accepted  u32 rejected (its results, as the node
 *                 judged them)  u32 0; the volunteer's work view (docs/hub.md, "Work")
 *   OWNER      9  hub -> node, on the control connection: the identity of a worker just
 *                 lent to the node is linked to a volunteer's account (its owner, for
 *                 the independence of replicas). u8 identity[32]  u64 owner (> 0)
 *   NODE_DIRECT 10 node -> hub, on the control connection: lent workers may dial the
 *                 node itself at url (a direct introduction instead of the relay).
 *                 u8 fingerprint[32] (SHA-256 of the node's TLS certificate; zeros for
 *                 tcp://)  u16 url_len (1..GOBLIN__HUBW_URL_MAX)  u16 0  u32 0  url  pad
 *   INTRODUCE  11 hub -> node: the worker whose key has this identity (the hub checked
 *                 its PROOF) will dial the node with ticket as its HELLO token, once,
 *                 within seconds. u8 ticket[32]  u8 identity[32]  u8 origin_kind
 *                 u8 origin[7] (as OPEN)
 *   END        12 hub -> node: end the introduced worker with this identity (taken
 *                 back for fair share, or quarantined on the network). u8 identity[32]
 *   LEFT       13 node -> hub: the worker introduced with this identity and ticket left
 *                 the node, or its ticket expired unused (or could not be kept).
 *                 u8 identity[32]  u8 ticket[32] (the introduction it ends: an identity
 *                 introduced again since has another)
 *   READY      14 node -> hub: the ticket of this INTRODUCE is kept; the hub sends the
 *                 worker on only then. u8 identity[32]  u8 ticket[32]
 *
 * pad: zero bytes to a multiple of 8 of the body. text: printable ASCII, <= 512.
 * reason: printable ASCII (0x20..0x7e), 1..200 bytes. url: 0x21..0x7e, no spaces. */
#ifndef GOBLIN__PROTO_HUB_WIRE_H
#define GOBLIN__PROTO_HUB_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "goblin/error.h"

#define GOBLIN__HUBW_VERSION 1
#define GOBLIN__HUBW_HEADER 24
#define GOBLIN__HUBW_TICKET 32
#define GOBLIN__HUBW_KEY_MAX 128
#define GOBLIN__HUBW_TEXT_MAX 512
#define GOBLIN__HUBW_IDENTITY 32
#define GOBLIN__HUBW_REASON_MAX 200
#define GOBLIN__HUBW_URL_MAX 256
#define GOBLIN__HUBW_FINGERPRINT 32
/* The largest message of this protocol (a REFUSE with the longest text). */
#define GOBLIN__HUBW_MAX (GOBLIN__HUBW_HEADER + 8 + GOBLIN__HUBW_TEXT_MAX)

typedef enum goblin__hubw_type {
    GOBLIN__HUBW_NODE_HELLO = 1,
    GOBLIN__HUBW_NODE_ACK = 2,
    GOBLIN__HUBW_OPEN = 3,
    GOBLIN__HUBW_ATTACH = 4,
    GOBLIN__HUBW_REFUSE = 5,
    GOBLIN__HUBW_HEARTBEAT = 6,
    GOBLIN__HUBW_QUARANTINE = 7,
    GOBLIN__HUBW_WORK = 8,
    GOBLIN__HUBW_OWNER = 9,
    GOBLIN__HUBW_NODE_DIRECT = 10,
    GOBLIN__HUBW_INTRODUCE = 11,
    GOBLIN__HUBW_END = 12,
    GOBLIN__HUBW_LEFT = 13,
    GOBLIN__HUBW_READY = 14,
} goblin__hubw_type;

typedef struct goblin__hubw_msg {
    goblin__hubw_type type;
    uint32_t max_workers;                   /* NODE_HELLO */
    uint32_t key_len;                       /* NODE_HELLO */
    char key[GOBLIN__HUBW_KEY_MAX + 1];     /* NODE_HELLO, NUL-terminated */
    int64_t lab;                            /* NODE_ACK */
    uint32_t weight;                        /* NODE_ACK */
    uint8_t ticket[GOBLIN__HUBW_TICKET];    /* OPEN, ATTACH, INTRODUCE, LEFT, READY */
    uint8_t origin_kind;                    /* OPEN, INTRODUCE: 0, 4 or 6 */
    uint8_t origin[7];                      /* OPEN, INTRODUCE: the /24 or /48 prefix, then zeros */
    uint32_t reason;                        /* REFUSE */
    char text[GOBLIN__HUBW_TEXT_MAX + 1];   /* REFUSE, NUL-terminated */
    uint8_t identity[GOBLIN__HUBW_IDENTITY]; /* QUARANTINE, WORK, OWNER, INTRODUCE, END, LEFT, READY */
    uint8_t fingerprint[GOBLIN__HUBW_FINGERPRINT]; /* NODE_DIRECT */
    char url[GOBLIN__HUBW_URL_MAX + 1];      /* NODE_DIRECT, NUL-terminated */
    uint32_t tasks, accepted, rejected;      /* WORK */
    int64_t owner;                           /* OWNER: the volunteer's account, > 0 */
    char reason_text[GOBLIN__HUBW_REASON_MAX + 1]; /* QUARANTINE, NUL-terminated */
} goblin__hubw_msg;

/** Identity @p id as 64 lowercase hex digits (the fingerprint's text) into @p hex. */
void goblin__hubw_identity_hex(const uint8_t id[GOBLIN__HUBW_IDENTITY], char hex[2 * GOBLIN__HUBW_IDENTITY + 1]);
/** The identity whose text is @p hex (exactly 64 lowercase hex digits, NUL-ended) into
 *  @p id; false (id untouched) for anything else. */
bool goblin__hubw_identity_parse(const char *hex, uint8_t id[GOBLIN__HUBW_IDENTITY]);

/** Does @p buf start with the hub protocol's magic? */
bool goblin__hubw_is(const uint8_t *buf, size_t len);
/** Encode @p m into @p out (at least GOBLIN__HUBW_MAX bytes); its length into *@p len.
 *  Text is cut to GOBLIN__HUBW_TEXT_MAX and bytes outside 0x20..0x7e become '?'.
 *  A QUARANTINE's reason is cut to GOBLIN__HUBW_REASON_MAX the same way (an empty
 *  one is GOBLIN_EINVAL). GOBLIN_EINVAL for a key of a bad length or an unknown type. */
goblin_err goblin__hubw_encode(const goblin__hubw_msg *m, uint8_t *out, size_t *len);
/** Decode @p len hostile bytes at @p buf into *@p m. GOBLIN_EFORMAT (wrong magic,
 *  lengths, padding, reserved bytes, text, trailing bytes), GOBLIN_EVERSION,
 *  GOBLIN_EPROTO (an unknown type), GOBLIN_ELIMIT (over GOBLIN__HUBW_MAX); (msg, cap). */
goblin_err goblin__hubw_decode(const uint8_t *buf, size_t len, goblin__hubw_msg *m, char *msg,
                               size_t cap);

#endif
