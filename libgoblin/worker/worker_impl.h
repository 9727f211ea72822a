/* libgoblin/worker/worker_impl.h - the worker's state, shared by its files:
 * worker.c (params, new/free, the connection and the loop), worker_cache.c (inputs and
 * graphs kept for reuse, their expiry), worker_task.c (computing one task) and
 * misbehave.c (fault injection, goblin_test_control). Not part of the public API. */
#ifndef GOBLIN__WORKER_IMPL_H
#define GOBLIN__WORKER_IMPL_H

#include "goblin/worker.h"

#include <pthread.h>
#include <stdatomic.h>

#include "goblin/graph.h"
#include "goblin/testctrl.h"
#include "net/share.h"
#include "net/transport.h"
#include "net/worker_key.h"
#include "proto/wire.h"

/* What goblin_test_control set for a worker (tests and demos only). */
typedef struct goblin__misbehave_cfg {
    goblin_misbehave mode;
    double rate;      /* probability per task, [0, 1] */
    uint64_t seed;    /* which tasks misbehave (deterministic) */
    uint32_t slow_ms; /* SLOW delay (default 2000) */
    void (*crash_hook)(void *user);
    void *crash_user;
    bool crash_may_exit;
} goblin__misbehave_cfg;

typedef struct kept_set {
    goblin_tensor *t; /* data owned */
    int32_t n;
} kept_set;

/* A received message kept alive by the panels that point into its body (zero-copy
 * decoding: the cache keeps the TASK's bytes instead of copying them). */
typedef struct msgref {
    nng_msg *msg;
    int32_t refs;
} msgref;

typedef struct panel {
    uint64_t id;     /* 0: a free slot */
    goblin_tensor t; /* contiguous; data owned, or inside ref's message */
    msgref *ref;     /* NULL: data owned */
    size_t bytes;
    int32_t prev, next; /* recency list (most recent first); next also links free slots */
} panel;

/* A decoded task graph kept with a copy of its encoding: a task whose graph bytes are
 * identical reuses it (no checksum, decode or constant copies per task; the node sends
 * the same bytes for every chunk of a job). */
#define GRAPH_CACHE 2
typedef struct gcache {
    uint8_t *blob;
    size_t len;
    goblin_graph *g;
    uint64_t last_use;
} gcache;

struct goblin_worker {
    goblin_worker_params p;
    goblin__share *share; /* a node of this process over inproc:// lends inputs in place */
    char *urls[GOBLIN_WORKER_MAX_CONNECT];
    char *tls_ca, *tls_fp, *tls_name; /* copies behind p.tls_* */
    char *config_dir;                 /* copy behind p.config_dir */
    goblin__wkey *key;                /* the identity (net/worker_key.h) */
    uint8_t hello_hash[32];           /* SHA-256 of the HELLO sent on this connection */
    uint8_t *token;
    atomic_bool stop;
    atomic_int pipes_added, pipes_removed;
    atomic_uint hb_ms;   /* from HELLO_ACK; 0 until then and after a disconnect */
    atomic_bool hb_quit;
    pthread_mutex_t hb_mu; /* the heartbeat thread sleeps on hb_cv */
    pthread_cond_t hb_cv;
    pthread_mutex_t rx_mu; /* guards rx: goblin_worker_stop and pipe events abort it */
    nng_aio *rx;           /* the loop's receive (no timeout), while goblin_worker_run runs */
    int64_t credit;        /* lease slots asked for and not yet received as TASKs */
    /* Loop thread only: the node takes batches (HELLO_ACK flag); while ob_on, what
     * the loop sends is appended to ob (sent by ob_flush) instead of sent at once. */
    bool node_batch, ob_on;
    nng_msg *ob;
    uint64_t node_max;     /* the node's max_message_bytes (HELLO_ACK) */
    nng_socket sock;
    /* The connection (docs/runtime.md, "Rejoining after a partition"), under tx_mu and
     * set by pipe events: link is the pipe id of the live connection (0: none) and
     * joined says HELLO_ACK came on it. Only HELLO and PROOF go out on a link not yet
     * joined, and nothing meant for an earlier link goes out on a later one: every
     * send is non-blocking under tx_mu (nng's pair1 would otherwise hold a send made
     * while disconnected and put it first on the next connection, and the node drops
     * a worker whose first message is not its HELLO). */
    pthread_mutex_t tx_mu;
    uint32_t link;
    bool joined;
    uint32_t hello_link; /* loop thread: the link the last HELLO went on */
    /* Direct introductions (docs/hub.md), loop thread: the dialers of the configured
     * addresses (home), closed while the worker works for the node a hub introduced it
     * to (direct: dialed with the hub's ticket as the HELLO token); back home when that
     * connection ends, or when it did not join within INTRO_WAIT_MS (the HELLOs home
     * then do not offer to follow an introduction until one is answered with a
     * HELLO_ACK: the hub relays it). */
    nng_dialer home[GOBLIN_WORKER_MAX_CONNECT];
    int32_t n_home;
    bool home_on, direct_on, direct_joined, intro_pending, no_intro_once;
    /* under tx_mu: the loop dials the introduced node (every pipe added now is its);
     * the live link is that connection; it ended */
    bool direct_mode, link_direct, direct_lost;
    int link_dialer; /* under tx_mu: the dialer id of the live link */
    /* loop thread: the dialer of hello_link, and the last link a HELLO_ACK came on (an
     * INTRODUCE is taken on hello_link before any HELLO_ACK, even once that link has
     * ended: the hub closes it right after sending it) */
    int hello_dialer;
    uint32_t acked_link;
    nng_dialer direct;
    int64_t direct_since_ms;
    uint8_t ticket[GOBLIN_WIRE_TICKET_BYTES];
    char direct_url[GOBLIN_WIRE_MAX_URL_BYTES + 1];
    char direct_fp[65];
    int64_t hello_ms;    /* loop thread: when it went (goblin__now_ms) */
    int send_fd;         /* NNG_OPT_SENDFD: readable when a send would not block; -1 */
    goblin__wire_limits limits;
    /* The panel cache: slots (indices stay put while a panel is kept), a hash index of
     * their ids (open addressing, slot + 1, 0 empty) and a recency list, so that a
     * lookup and an eviction cost O(1) however many panels are kept (a training run
     * adds some every round). */
    panel *cache;
    int32_t n_cache, n_slots, cap_cache; /* panels kept, slots ever used, slots allocated */
    int32_t free_slot, mru, lru;         /* -1: none */
    int32_t *cache_ix;
    uint32_t ix_cap;                     /* a power of two, or 0 */
    size_t cache_used;
    uint64_t use_clock;
    int64_t last_task_ms;                /* when the last TASK came (cache_idle_ms) */
    gcache gc[GRAPH_CACHE];
    /* Fault injection (misbehave.c, goblin_test_control): the loop thread's settings
     * (mb), taken from mb_next (guarded by st_mu) at a task's start when mb_pending. */
    goblin__misbehave_cfg mb, mb_next;
    bool mb_pending, mb_reseed;
    atomic_uint catalog_override; /* HELLO's catalogue version if not 0 (tests) */
    kept_set first, prev; /* honest outputs kept for STALE / SWAP */
    uint64_t rng;
    pthread_mutex_t st_mu;
    pthread_mutex_t part_mu; /* one message in parts at a time (any thread sends) */
    bool inproc_only;        /* every URL is inproc://: nothing is cut into parts */
    goblin_worker_stats st;
};

#define BUMP(w, field)                      \
    do {                                    \
        pthread_mutex_lock(&(w)->st_mu);    \
        (w)->st.field++;                    \
        pthread_mutex_unlock(&(w)->st_mu);  \
    } while (0)


#define RESYNC_MS 1000 /* idle with leases asked for: ask again after this long */
#define HELLO_WAIT_MS 60000 /* a HELLO unanswered this long: redial (a hub answers only once it lends the worker) */

/* worker.c: logging and sending (loop thread unless said otherwise) */
/* The memory a task may take, advertised in HELLO: memory_bytes less the cache, over
 * slots + 1 (the tasks in flight and the result being sent). */
uint64_t goblin__worker_task_budget(const goblin_worker_params *p);
void goblin__worker_log(goblin_worker *w, goblin_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int goblin__worker_out(goblin_worker *w, nng_msg *msg);
int goblin__worker_lsend(goblin_worker *w, const goblin__wire_msg *m);
void goblin__worker_send_lease_request(goblin_worker *w, uint32_t slots);
void goblin__worker_send_error(goblin_worker *w, uint64_t task_id, goblin_err code, const char *text);

/* worker_cache.c: inputs and task graphs kept for reuse (loop thread) */
void goblin__worker_cache_clear(goblin_worker *w);
void goblin__worker_cache_gauges(goblin_worker *w);
bool goblin__worker_cache_held(const goblin_worker *w);
void goblin__worker_cache_expire(goblin_worker *w);
panel *goblin__worker_cache_find(goblin_worker *w, uint64_t id);
void goblin__worker_cache_inputs(goblin_worker *w, goblin__wire_task *t, const int64_t *dv, int32_t ni,
                                 nng_msg *nm, msgref **refp);
goblin_err goblin__worker_task_graph(goblin_worker *w, const goblin__wire_task *t, goblin_graph **g,
                                     bool *owned, goblin_errbuf *err);

/* worker_task.c: one TASK, answered; false when the worker must end now (CRASH) */
bool goblin__worker_run_task(goblin_worker *w, goblin__wire_task *t, nng_msg *nm, msgref **refp);

/* misbehave.c: fault injection */
void goblin__worker_misbehave_init(goblin_worker *w);
void goblin__worker_kept_free(kept_set *k);
/* The mode for this task (NONE for an honest answer), after taking new settings. */
goblin_misbehave goblin__worker_misbehave_draw(goblin_worker *w);
/* CRASH: log, then the hook, or _exit(3) where allowed; the caller then ends the loop. */
void goblin__worker_crash(goblin_worker *w, uint64_t task_id);
/* Alter the honest outputs @p out (@p no of them; @p product[i] non-zero where output i
 * is a matmul's value, or NULL) by @p mode: *send_t / *n_out are what to send (out
 * itself, a kept earlier result or a truncated copy). False: send nothing (SILENT). */
bool goblin__worker_misbehave_apply(goblin_worker *w, goblin_misbehave mode, uint64_t task_id,
                                    goblin_tensor *out, int32_t no, const uint8_t *product,
                                    goblin_tensor **send_t, int32_t *n_out);
/* After an answer: keep honest outputs that STALE / SWAP will replay. */
void goblin__worker_misbehave_keep(goblin_worker *w, goblin_misbehave mode, const goblin_tensor *out,
                                   int32_t no);

#endif
