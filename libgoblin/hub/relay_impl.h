/* libgoblin/hub/relay_impl.h - what the machine side's files share (relay.c: connections,
 * framing, lending, the reaper; relay_intro.c: direct introductions): the connection and
 * relay structs and the calls between the two. Internal; under the relay's lock. */
#ifndef GOBLIN__HUB_RELAY_IMPL_H
#define GOBLIN__HUB_RELAY_IMPL_H

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "hub_impl.h"
#include "net/worker_key.h"
#include "proto/hub_wire.h"
#include "proto/wire.h"

#define FIRST_MAX 2048                  /* a connection's first message, its hop count included */
#define OUTQ_BYTES 4096                 /* frames the hub sends itself (handshake, ACK, OPEN, REFUSE) */
#define SPLICE_BYTES ((size_t)64 << 10) /* each of a direction's two buffers */
#define PENDING_MAX 256                 /* connections that have not said who they are */
#define PENDING_MS 10000                /* ... each for at most this long */
#define TICKET_MS 10000                 /* a node's time to attach a lent worker */
#define OPENING_MAX 16                  /* tickets outstanding per node */
#define CONTROL_SILENT_MS 30000         /* a control connection heard nothing from for this long */
#define REBALANCE_COOLDOWN_MS 2000      /* between two workers taken back for fairness */
#define TICK_MS 50
#define REPORTS_PER_KEY 64              /* quarantines in force one node key may have reported */
#define QSET_REFRESH_MS 1000            /* the quarantines in force read again from the store */
#define LENT_IDS 1024                   /* identities a control connection may report WORK of */
#define DIRECT_MAX 65536                /* workers introduced to one node at once */

enum role { R_UNKNOWN, R_WORKER, R_CONTROL, R_DATA };
enum rstate { RS_HS, RS_LEN, RS_PEEK, RS_DISCARD, RS_BODY, RS_PROBE, RS_PROOF, RS_SPLICE, RS_NONE };

typedef struct rconn rconn;
struct rconn {
    struct goblin__hub_relay *r;
    nng_stream *s;
    nng_aio *rx, *tx;
    rconn *next, *prev; /* every connection */
    enum role role;
    enum rstate rs;
    bool closing, rx_busy, tx_busy, refusing, tx_from_outq;
    int64_t since_ms, last_heard_ms;
    uint64_t seq;
    /* reading before the splice */
    uint8_t in[16 + FIRST_MAX];
    size_t want, got;
    uint64_t frame_len, discard;
    size_t first_len; /* a worker: its HELLO frame (length prefix and all) kept in in[] */
    uint8_t probe[16];
    /* what the hub sends itself */
    uint8_t outq[OUTQ_BYTES];
    size_t outq_len, tx_len;
    rconn *peer;
    /* the splice: bytes read from this connection wait in bufs for the peer's write.
     * Two buffers: the next read fills one while the peer's write sends the other, so
     * the two TLS sessions' crypto overlaps instead of taking turns. */
    uint8_t *bufs[2];
    size_t blen[2], boff[2];
    int fill, send; /* the buffer the next read fills; the one the peer's write sends */
    /* a worker: the node it is reserved for or lent to; a data connection: its node */
    rconn *node;
    bool reserved;
    /* a worker: the network origin of its connection (hub_wire.h, OPEN) */
    uint8_t origin_kind, origin[7];
    /* a worker: the identity its PROOF claims (the key's SHA-256), once read */
    bool has_identity;
    uint8_t identity[GOBLIN__HUBW_IDENTITY];
    /* a worker: its HELLO offered to follow an introduction (GOBLIN_WIRE_CAP_INTRO);
     * introducing: the hub challenged it for a direct introduction to c->node (its
     * PROOF checked: intro_sent, the node told, READY awaited) */
    bool intro_ok, introducing, intro_sent;
    int64_t intro_ms;
    uint8_t nonce[GOBLIN__WKEY_NONCE_BYTES], hello_hash[32];
    uint8_t ticket[GOBLIN__HUBW_TICKET];
    /* a control connection: where its lent workers can dial it themselves ("": relay
     * only), and the workers introduced to it (their identities; counted in lent) */
    char direct_url[GOBLIN__HUBW_URL_MAX + 1];
    uint8_t direct_fp[GOBLIN__HUBW_FINGERPRINT];
    struct direct_rec {
        uint8_t id[GOBLIN__HUBW_IDENTITY];
        uint8_t ticket[GOBLIN__HUBW_TICKET]; /* its introduction's (LEFT names it) */
        uint64_t seq;
        uint8_t origin_kind, origin[7];
    } *directs;
    int32_t n_directs, cap_directs;
    /* a control connection (a lab node) */
    int64_t lab, key_id;
    uint8_t (*lent_ids)[GOBLIN__HUBW_IDENTITY]; /* the last LENT_IDS identities lent to it */
    int32_t n_lent_ids, next_lent_id;
    uint32_t weight, max_workers;
    int32_t lent, opening;
};

typedef struct ticket {
    uint8_t t[GOBLIN__HUBW_TICKET];
    rconn *node, *worker;
    int64_t deadline_ms;
} ticket;

struct goblin__hub_relay {
    goblin_hub *h;
    nng_stream_listener *l;
    nng_aio *acc;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t reaper;
    bool stopping, have_thread, acc_stopped;
    rconn *conns;
    int32_t n_pending, n_workers, n_nodes;
    uint64_t next_seq;
    ticket *tickets;
    int32_t n_tickets, cap_tickets;
    int64_t rebalance_after_ms;
    int port;
    goblin_hub_machines_stats st;
    /* the identities under a quarantine in force, sorted (docs/hub.md, "Reputation") */
    uint8_t (*qset)[GOBLIN__HUBW_IDENTITY];
    int32_t n_qset, cap_qset;
    int64_t qset_read_ms;
    /* tasks reported (WORK) per second of the last RATE_SECONDS, by second */
    int64_t rate_sec[60], rate_tasks[60];
    /* tests (GOBLIN_TESTCTRL_HUB_WORKER_ADDR): local connections count as from here */
    bool test_addr_set;
    nng_sockaddr test_addr;
};

typedef struct goblin__hub_relay relay;

/* relay.c */
/* Mark @p c for the reaper; its peer (the other half of a splice) goes with it. */
void goblin__relay_close_conn(rconn *c);
/* Queue one pair1 frame of @p len bytes at @p m; a hub message. */
void goblin__relay_out_frame(rconn *c, const uint8_t *m, size_t len);
void goblin__relay_out_hub(rconn *c, const goblin__hubw_msg *m);
/* A REFUSE in the protocol the peer spoke (worker or node), then the connection closes. */
void goblin__relay_refuse(rconn *c, bool worker, goblin_err why, const char *text);
void goblin__relay_tx_kick(rconn *c);
void goblin__relay_expect(rconn *c, enum rstate s, size_t got, size_t want);
bool goblin__relay_qset_has(const relay *r, const uint8_t id[GOBLIN__HUBW_IDENTITY]);
/* Node @p n may report WORK of identity @p id from now on. */
void goblin__relay_remember_lent(rconn *n, const uint8_t id[GOBLIN__HUBW_IDENTITY]);
/* Worker @p w's owner, if linked, told to the node it is lent to (OWNER). */
void goblin__relay_tell_owner(rconn *w);

/* relay_intro.c (docs/hub.md, "Direct introductions") */
int32_t goblin__relay_direct_find(const rconn *n, const uint8_t id[GOBLIN__HUBW_IDENTITY]);
void goblin__relay_direct_del(rconn *n, int32_t i);
void goblin__relay_send_end(rconn *n, const uint8_t id[GOBLIN__HUBW_IDENTITY]);
bool goblin__relay_intro_start(rconn *w, rconn *node);
void goblin__relay_intro_proof(rconn *c, const goblin__wire_msg *m);
void goblin__relay_direct_offer(rconn *c, const goblin__hubw_msg *hm);
void goblin__relay_intro_answer(rconn *c, const goblin__hubw_msg *hm);

#endif
