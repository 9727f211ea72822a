/* libgoblin/node/node_impl.h - what the node's files share (internal to libgoblin/node/):
 * the peer, task, lease and job structs, and the functions one file calls in another.
 *
 * One thread owns the socket: it receives a message (10 ms timeout), handles it,
 * processes pipe events, expires leases and hands out tasks. All scheduling state is
 * under node->mu; a job's status fields are also under job->mu so that waiting on a
 * job never needs the node (lock order: node->mu, then job->mu).
 *
 * The files, one per responsibility (see also docs/runtime.md):
 *   node.c: parameters, new/start/stop/free, the loop (node_main) and its housekeeping
 *   peer.c: the peer table, HELLO/REFUSE, message dispatch, what workers cache
 *   lease.c: leases, their end (result, failure, expiry), TASK batches
 *   scheduler.c: picking a task for a worker, replica leases, stragglers
 *   matmul_job.c: matmul jobs: tiles, the task graph, sending tiles, results, split-K sums
 *   job.c: a job's end and the public job API
 *   tile_check.c: Freivalds checks of matmul tiles: panels objects, row panels at once
 *   stats.c: the node's counters and verification clocks
 *   graph_job.c: planning and submitting graph jobs
 *   graph_chunk.c: a graph job's chunks: sent, computed on the node, accepted, combined
 *   trust.c: adaptive trust: the rate of checks a worker's agreements earn
 *   spot.c: SPOT: a few secret rows of a chunk recomputed on the node
 *   replica.c: a graph job's RESULT judged; REPLICATE: two workers' results compared
 *   quarantine.c: a caught worker quarantined, its accepted results rechecked
 *   identity.c: worker identities (the proof at HELLO), owners, the allow list and
 *               the quarantine file; the per-identity record (trust, quarantine)
 *   index.c: small hash maps from pipe, session or identity to a table slot
 *   status.c: the status page's HTTP server (goblin_node_status_listen)
 *   status_page.c: what it shows: a snapshot under node->mu, as HTML, JSON, Prometheus
 *
 * Peers and identities: a peer is one connection (its pipe, session, leases, what it
 * caches); its slot is freed once it is gone and no lease names it, and reused. An
 * identity (the SHA-256 of a worker's public key) is what trust, quarantine and the
 * independence of replicas are about; its record outlives the peer. Tasks name the
 * worker of a result by session and identity serial (never reused), not by slot. */
#ifndef GOBLIN__NODE_IMPL_H
#define GOBLIN__NODE_IMPL_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "goblin/graph.h"
#include "goblin/node.h"
#include "plan.h"
#include "goblin/verify.h"
#include "net/tls_impl.h"
#include "proto/wire.h"
#include "graph/hoist.h"
#include "net/listen_guard.h"
#include "net/share.h"
#include "client_port.h"
#include "net/worker_key.h"
#include "origin.h"

#define PANEL_MEMO 32     /* matmul panel ids remembered per worker and kind (A, B) */
#define GID_MEMO 160      /* graph-job input ids remembered per worker (a captured model's
                             * weights are inputs, hoist.c); workers keep at most 256 inputs
                             * (worker.c): 2 x PANEL_MEMO + GID_MEMO must stay below */
_Static_assert(GID_MEMO % PANEL_MEMO == 0 && 2 * PANEL_MEMO + GID_MEMO < 256, "worker input cache bound");
/* nng's polyamorous pair1 queues at most 2 messages per pipe (plus the one being
 * written) and silently drops a message to a pipe whose queue is full. Workers drain
 * their pipe into a receive buffer of slots + 4 messages, so keeping at most this many
 * TASK messages (single TASKs or batches) outstanding per worker means a TASK is never
 * dropped. Not 3: the pipe takes
 * its next message off the queue in a callback that can lag behind the worker's
 * RESULT for the message it wrote, so with 3 outstanding a TASK was dropped now and
 * then on a loaded machine (found when workers began asking for many slots, tiny
 * tasks; each drop stalled the task for a lease time). */
#define MAX_IN_FLIGHT 2
/* Batches (protocol 1.1, docs/wire-protocol.md): to a worker that takes them, up to
 * BATCH_MAX TASKs whose encodings are each under BATCH_TASK_BYTES go in one nng
 * message. MAX_IN_FLIGHT then counts messages, not leases: a batch is one message in
 * the pipe's queue. Bigger tasks go one per message, as to a 1.0 worker. */
#define BATCH_MAX 16
#define BATCH_TASK_BYTES ((size_t)64 << 10)


/* ---- index.c: hash maps from a 64-bit key to a slot -------------------------------- */

typedef struct goblin__node_index {
    uint64_t *keys;
    int32_t *vals; /* slot, or -1 empty, -2 deleted */
    uint32_t cap, used, tombs;
} goblin__node_index;

/** Map @p key to @p val (>= 0), replacing any mapping; false: out of memory. */
bool goblin__node_index_put(goblin__node_index *x, uint64_t key, int32_t val);
/** The slot of @p key, or -1. */
int32_t goblin__node_index_get(const goblin__node_index *x, uint64_t key);
void goblin__node_index_del(goblin__node_index *x, uint64_t key);
void goblin__node_index_free(goblin__node_index *x);

/* ---- identity.c: identities, owners, allow list, quarantine file ------------------ */

#define IDENT_MAX 4096 /* identity records kept; the least recently seen unconnected one
                          goes when a new identity needs a record (its trust restarts) */

/* The record of one worker identity. */
typedef struct ident {
    bool used;
    bool quarantined;
    char fp[GOBLIN__WKEY_FP_HEX];
    int32_t owner;       /* index into the owners' names, -1: none known */
    uint64_t serial;     /* never reused; 0: none */
    int64_t agreements;  /* checked results that agreed (adaptive trust) */
    int64_t suspicions;  /* results the node had to recompute (trust.c) */
    int64_t vouched;     /* results checked by the node or by an established worker of
                            another party: probation_results of them end its probation */
    int32_t connected;   /* peers of this identity admitted and connected */
    int64_t last_seen_ms;
} ident;

/* A list of fingerprints read from a file (allow list, owners, quarantine), each with
 * an owner index (owners file) or -1. */
typedef struct fplist {
    char (*fp)[GOBLIN__WKEY_FP_HEX];
    int32_t *owner;
    int32_t n, cap;
    goblin__node_index ix;
} fplist;

/* T_HELD: a matmul tile whose result is in C, waiting for the check of its whole row
 * panel (row_panel_check); neither leased again nor done until then. */
enum { T_PENDING = 0, T_LEASED = 1, T_DONE = 2, T_HELD = 3 };

typedef struct peer {
    nng_pipe pipe;
    uint32_t pipe_id;
    uint64_t session_id;
    bool used;       /* the slot holds a peer (freed slots are reused) */
    bool connected, hello, quarantined, counted;
    bool challenged; /* HELLO answered with a CHALLENGE; PROOF awaited */
    int32_t ident;   /* index into node->idents once admitted, else -1 */
    int32_t n_leases; /* leases naming this peer: the slot is not freed before they end */
    bool gone;       /* on node->gone, to be freed */
    uint64_t hello_rid;
    uint8_t nonce[GOBLIN__WKEY_NONCE_BYTES];
    uint8_t hello_hash[32];
    int64_t close_at_ms;
    int32_t threads;
    uint64_t memory;
    int32_t wanted;
    /* TASK messages sent and not yet taken off the pipe (at most MAX_IN_FLIGHT), by
     * id: a message counts until the first of its leases ends (its RESULT shows the
     * worker has received it), so a batch of several leases counts once. */
    int32_t in_flight;
    uint64_t in_flight_msg[MAX_IN_FLIGHT];
    bool batch; /* takes batches of TASKs (offered GOBLIN_WIRE_CAP_BATCH in HELLO) */
    bool shared; /* an in-process worker over inproc://: matmul panels go in place (share.h) */
    int64_t issued, accepted, rejected, failed;
    int64_t suspected; /* results of this connection that the node had to recompute */
    uint64_t origin;   /* network origin (origin.c) read at admission; 0: local, none */
    bool relayed;      /* lent by the hub (a data connection of hub_link.c, or introduced) */
    bool introduced;   /* lent by the hub and dialed the node itself (intro.c) */
    char intro_fp[GOBLIN__WKEY_FP_HEX]; /* its HELLO held a ticket for this identity; "" none */
    uint8_t intro_ticket[32];           /* ... that ticket (LEFT names it) */
    int64_t rep_issued, rep_accepted, rep_rejected; /* told the hub so far (WORK) */
    uint64_t panels[2][PANEL_MEMO];
    int32_t panel_next[2];
    int32_t memo_cap; /* panels per kind believed cached: halved on every miss, since
                         HELLO does not say how big the worker's cache is */
    uint64_t gids[GID_MEMO]; /* graph jobs: cache ids of broadcast inputs it holds */
    int32_t gnext;
    int64_t last_heard_ms; /* any message from the peer */
    int64_t joined_ms, last_asked_ms; /* admitted (PROOF); its last LEASE_REQUEST (capacity) */
    bool ready; /* in node->ready (schedule) */
    /* a message arriving in parts (proto/part.h), counted in node->buffered_bytes */
    uint8_t *asm_buf;
    uint64_t asm_total, asm_got;
} peer;

/* An introduced worker gone, or its ticket expired: the hub's LEFT (intro.c). */
typedef struct goblin__intro_left {
    char fp[GOBLIN__WKEY_FP_HEX];
    uint8_t ticket[32];
} goblin__intro_left;

#define TASK_LIDS 4 /* lease ids kept per task (lease.c); more: the task scans the table */

typedef struct task {
    uint8_t state;
    uint8_t n_leases;
    /* The ids of this task's leases in the node's table (live or moot), so that finding
     * them costs O(1), not O(leases): lids_over once more were out at a time. */
    uint8_t n_lids;
    bool lids_over;
    uint64_t lids[TASK_LIDS];
    int32_t attempts;
    /* who gave the accepted (or held) result: its session and identity serial; 0: the node */
    uint64_t by_session, by_ident;
    int64_t leased_at_ms;
    void *partial;         /* split-K partial tile (contiguous rows x cols) until summed */
    /* graph jobs */
    int32_t holder;        /* peer index + 1 of a result held until its replica arrives; 0: none */
    bool replicated;       /* the accepted result was checked (replica or node) */
    uint64_t twin_ident;   /* identity serial of the replica that agreed with it bit for
                              bit (0: none); rechecked if either is quarantined */
    void **held;           /* the held result: one contiguous buffer per output */
    void **outs;           /* accepted outputs of reductions, combined at the end */
    uint8_t rep;           /* REPLICATE: 0 undecided, REP_SINGLE, REP_TWICE (decided when
                              first leased, from that worker's trust) */
    /* SPOT, prepared while the worker computes (spot_prepare): whether the result of
     * worker spot_peer is checked (spot_state), and for a checked task its secret rows
     * spot_idx[spot_k] (sorted) with their outputs as the node computed them. */
    uint8_t spot_state;
    uint64_t spot_session;
    int64_t *spot_idx;
    void **spot_mine;
} task;

enum { SPOT_UNDECIDED = 0, SPOT_TRUSTED = 1, SPOT_CHECK = 2 };

enum { REP_UNDECIDED = 0, REP_SINGLE = 1, REP_TWICE = 2 };

enum { JOB_MATMUL = 0, JOB_GRAPH = 1 };

/* A chunk graph: the job's graph rebatched for one chunk size, serialized once. */
typedef struct gvariant {
    int64_t rows;
    goblin_graph *g;
    uint8_t *buf;
    size_t len;
    uint64_t bytes;
    goblin_tensor *oshape; /* per output: dtype and shape (data NULL) */
    goblin_op *oop;        /* per output: the op of its node and its reduction length */
    int64_t *ok;
    /* CHECKED (checked.c): the products checked by Freivalds' algorithm (node ids, the
     * same in g, wg and cg), the graph sent (wg: g's outputs, then the products) and the
     * node's graph (cg: g's outputs, then each product's operands); NULL otherwise */
    int32_t n_heavy;
    int32_t *heavy;
    goblin_graph *wg, *cg;
} gvariant;

typedef struct gjob {
    int32_t n_in, n_out;
    goblin_tensor *in, *out; /* the caller's (borrowed) */
    uint8_t *batched;
    uint64_t *cid;           /* cache id per broadcast input */
    void **packed;           /* contiguous copy of a strided broadcast input, or NULL */
    goblin_combine *comb;
    int64_t batch, rows, nchunks;
    gvariant v[2];
    int32_t nv;
    goblin_verify verify;
    double min_rep, halflife;
    double max_share;             /* CHECKED: goblin_graph_job_params.checked_max_share */
    const goblin__hoisted *hoist; /* the graph whose constants are inputs here, or NULL */
    int64_t spot_k;               /* SPOT: rows recomputed per check */
    goblin_graph *spot_g;         /* SPOT: the graph for spot_k rows */
    struct goblin__batch_axes *ax; /* the batch traced through the job's graph (rebatch.h) */
} gjob;

typedef struct lease {
    uint64_t id;
    uint64_t msg; /* the TASK message (a batch may hold several leases): peer in_flight */
    goblin_job *job;
    int64_t task;
    int32_t peer;
    int64_t deadline_ms;
    bool moot; /* the task completed or the job ended: a result is discarded (job NULL:
                * the job was freed) */
} lease;

struct goblin_job {
    goblin_node *node; /* NULL once detached */
    uint64_t id;
    int kind;          /* JOB_MATMUL, JOB_GRAPH */
    gjob *g;           /* graph jobs */
    goblin_tensor a, b, c;
    goblin_dtype dt;
    size_t esz;
    goblin__plan *plan;
    goblin_job_plan info;
    int64_t ntasks;
    task *tasks;
    int32_t *tile_done; /* accepted slices per C tile (split-K only) */
    /* Freivalds: one panels object per K-slice, shared by the slice's tiles (one pass
     * over B and one over each row panel of A for the whole job, instead of per tile;
     * docs/verification.md). Built at the first check, dropped (new vectors) after a
     * rejection and at the job's end. fvp_off: the job checks tile by tile. Under node->mu. */
    goblin_freivalds_panels **fvp;
    bool fvp_off;
    /* Row panels checked at once (docs/verification.md, "A row panel at once"): for a
     * job of one K-slice and several column panels, the panels object has one panel
     * spanning all N columns, results are held (T_HELD) in C, and a row panel's tiles
     * are judged together once all are in. Decided when the job is planned. */
    bool rowcheck;
    /* Checks prepared ahead (prepare_ahead): tasks before prep_from are leased or done
     * and their row range was prepared; prep_key: the last (grid row, K-slice) prepared. */
    int64_t prep_from, prep_key;
    int64_t scan_from;
    int64_t rep_from;  /* graph jobs: tasks before this need no concurrent replica lease */
    int64_t sum_task_ms, n_task_ms; /* for straggler detection */
    int64_t spec_gate_ms; /* no straggler to duplicate before this time (node->mu) */
    int64_t spec_from;    /* where the next straggler scan starts (it goes round from there) */
    goblin_job_params jp;
    /* The serialized task graph of the last tile shape sent (most tiles share one):
     * built once instead of per TASK. Under node->mu. */
    uint8_t *gser;
    size_t gser_len;
    int64_t gser_shape[3];
    bool running; /* scheduling state, under node->mu */
    /* Panels lent in place to in-process workers (share.h), or NULL; the job's views
     * are closed when it ends and waited for before goblin_job_wait reports the end. */
    goblin__share *share;
    goblin__share_job *stok;
    /* under job->mu */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    goblin_job_status status;
    goblin_err err;
    int64_t done;
    char msg[384];
};

/* A connection that has not proved a worker identity nor been handed to the gateway. */
typedef struct goblin__pending_pipe {
    uint32_t id;
    nng_pipe pipe;
    int64_t added_ms;
} goblin__pending_pipe;

struct goblin_node {
    goblin_node_params p;
    uint64_t buffered_bytes; /* peers' messages being received in parts */
    char *urls[GOBLIN_NODE_MAX_LISTEN];
    char *cert_file, *key_file; /* copies behind p.cert_file / p.key_file */
    char *token_file;           /* copy behind p.token_file */
    uint8_t *token;
    pthread_mutex_t mu;
    pthread_t thread;
    bool started, stopping, socket_open;
    nng_socket sock;
    goblin__listen_guard *guard; /* its listeners, restarted if nng stops one */
    /* A non-blocking pipe: node_wake writes a byte so node_main's poll returns at once
     * (a job submitted or canceled, a stop) instead of at its 10 ms timeout. -1: none. */
    int wake_rd, wake_wr;
    goblin__wire_limits limits;
    /* Peer slots [0, n_peers): used ones, and freed ones on free_peers for reuse. */
    peer *peers;
    int32_t n_peers, cap_peers;
    int32_t *free_peers, n_free, cap_free;
    int32_t *gone, n_gone, cap_gone; /* disconnected peers waiting for their leases to end */
    int32_t live_peers;              /* used slots (goblin_node_stats.peers_tracked) */
    goblin__node_index by_pipe, by_session;
    /* identities (identity.c) */
    ident *idents;
    int32_t n_idents, cap_idents, live_idents;
    goblin__node_index ident_ix;
    uint64_t next_ident_serial;
    fplist allow, owners, qlist;     /* allow list, owners, quarantined identities */
    char **owner_names;
    int32_t n_owner_names;
    char *quarantine_file, *allow_file, *owners_file; /* copies behind p.* */
    /* Peers that may take a task (schedule): added when a message comes from one or
     * one of its leases ends, dropped once it cannot take more; every housekeeping
     * tick adds all eligible peers. With hundreds of workers, a pass over all of them
     * per message cost more than the message. */
    int32_t *ready;
    int32_t n_ready, cap_ready;
    lease *leases;
    int64_t n_leases, cap_leases;
    /* Lease id -> slot in leases (lease.c): open addressing, slot + 1 (0: empty),
     * lidx_cap a power of two at least twice n_leases; NULL (out of memory): the
     * table is scanned. With thousands of workers a scan per RESULT was most of the
     * node's CPU. */
    int64_t *lidx, lidx_cap;
    /* No lease's deadline is before this (0: no lease): housekeeping scans the table
     * for expired leases only from then on (lease.c sets it, housekeeping renews it). */
    int64_t lease_deadline_min;
    goblin_job **jobs;
    int32_t n_jobs, cap_jobs;
    uint64_t next_lease_id, next_job_id, next_session;
    /* The batch being filled for one peer (schedule, send_task): TASKs are appended
     * to bmsg, sent by batch_flush. bpeer < 0: no batch open. */
    int32_t bpeer, bcount;
    nng_msg *bmsg;
    uint64_t bid, next_msg_id;
    bool bclosed; /* a task went alone: the batch takes no more this round */
    int64_t last_housekeeping_ms;
    /* The sweeps over all peers (heartbeat silence, handshakes, lingering closes) and
     * the scheduler's pass over all of them run every PEER_SWEEP_MS, not every tick:
     * at 4,096 workers they were most of the node's CPU. sched_all: a job was added,
     * the next schedule() looks at every peer at once. */
    int64_t last_peer_sweep_ms;
    /* When the loop last found no message waiting (node thread): what any peer sent
     * before then has been read. Silence and handshake deadlines are judged at this
     * time, not now, so that messages the node has not reached yet (a backlog, such as
     * thousands of workers joining at once) do not count as a peer's silence. */
    int64_t drained_ms;
    bool sched_all;
    goblin_node_stats st;
    /* pipe events from nng's threads, under ev_mu */
    pthread_mutex_t ev_mu;
    uint32_t *ev_removed;
    int32_t n_ev, cap_ev;
    /* connections that have not said who they are (admission.c), under ev_mu */
    goblin__pending_pipe *pending;
    int32_t n_pending, cap_pending;
    int64_t pending_refused;
    /* graph jobs: chunk graphs serialized by earlier jobs, under ser_mu (serialize_chunk) */
    pthread_mutex_t ser_mu;
    struct {
        goblin_graph *g;
        uint8_t *buf;
        size_t len;
        uint64_t last_use;
    } ser[2];
    uint64_t ser_clock;
    goblin__hoist_memo hoist; /* graph jobs: constants as cached inputs (hoist.c) */
    goblin__share *share;     /* published under the first inproc:// URL listened on, or NULL */
    /* clients on the node's addresses (client_port.h): the gateway's port, set under mu
     * and ev_mu (read by node_main under mu, by pipe callbacks under ev_mu) */
    goblin__client_port cport;
    bool cport_set;
    char client_urls[512]; /* where clients connect instead (mu), "" if nowhere */
    /* a relayed worker's last WORK counts, from its slot's reaping to the hub link's
     * next report (hub_link.c), under mu; past WORK_TAIL_MAX they are dropped */
    struct {
        char fp[GOBLIN__WKEY_FP_HEX];
        int64_t issued, accepted, rejected;
    } work_tail[64];
    int32_t n_work_tail;
    /* origins tests gave identities' local connections (origin.c), under mu */
    struct {
        char fp[GOBLIN__WKEY_FP_HEX];
        uint64_t origin;
    } *test_origins;
    int32_t n_test_origins, cap_test_origins;
    /* direct introductions (intro.c), under mu: tickets the hub gave for workers that
     * will dial the node itself, and the identities of introduced workers that left
     * (or whose ticket expired), for the hub link's next LEFT */
    struct goblin__intro_ticket *intros;
    int32_t n_intros;
    int64_t intro_deadline_min; /* the earliest ticket deadline; 0: none */
    goblin__intro_left intro_left[64];
    int32_t n_intro_left;
    int64_t intro_tickets_refused; /* HELLOs whose ticket-sized token matched none (or the wrong identity) */
    struct goblin__node_hub *hub; /* hub_link.c: the link to goblin-hub, or NULL (under ev_mu) */
    struct goblin__node_status *status; /* status.c: the status page's server, or NULL */
    int64_t started_ms;                 /* goblin_node_start's time (the status page's uptime) */
};

/* The chunk graph of task @p ti of a graph job: the last chunk may be shorter. */
static inline gvariant *gvar(const goblin_job *j, int64_t ti) {
    return ti == j->ntasks - 1 && j->g->nv == 2 ? &j->g->v[1] : &j->g->v[0];
}

/* The node's verification clocks (goblin_node_stats.verify_ns and verify_cpu_ns):
 * wall time on the node's thread, and CPU time of that thread and of the checks'
 * second threads (goblin_freivalds_params.threads). */
typedef struct vclock {
    int64_t wall, cpu;
} vclock;

/* ---- admission.c: connections before they say who they are --------------------------- */

/* ADD_PRE: count @p p pending, or close it over max_pending_connections. */
void goblin__node_pipe_added(goblin_node *n, nng_pipe p);
/* Pipe @p id proved a worker identity or went to the gateway / closed: not pending. */
void goblin__node_pipe_known(goblin_node *n, uint32_t id);
void goblin__node_pipe_forget(goblin_node *n, uint32_t id);
/* Housekeeping: close the connections pending for longer than @p grace_ms at time @p now
 * (the time the node last read everything waiting: node->drained_ms). */
void goblin__node_pending_sweep(goblin_node *n, int64_t now, int64_t grace_ms);

/* ---- node.c --------------------------------------------------------------------- */

/** Log at @p lvl through the node's log callback (printf format). */
void goblin__node_log(goblin_node *n, goblin_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** A submit refused: log @p fmt at ERROR and keep it as this thread's
 *  goblin_node_submit_error(); _begin clears it at the start of a submit. */
void goblin__node_refuse(goblin_node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void goblin__node_submit_begin(void);
/** Grow array *@p arr of @p elem-byte items to hold @p need (doubling *@p cap); false: out of
 * memory, *@p arr unchanged. */
bool goblin__node_grow(void **arr, int64_t *cap, int64_t need, size_t elem);
/** Wake node_main now (callable from any thread). */
void goblin__node_wake(goblin_node *n);

/* ---- peer.c --------------------------------------------------------------------- */

/** The index of the connected peer on pipe @p pipe_id, or -1. */
int32_t goblin__node_find_peer(goblin_node *n, uint32_t pipe_id);
/** The index of the peer of session @p sid (still in the table), or -1. */
int32_t goblin__node_find_session(goblin_node *n, uint64_t sid);
/** Peer @p pi is no longer connected: its pipe forgotten, its identity's count, its held
 *  results dropped; its slot is freed by reap_peers once no lease names it. */
void goblin__node_peer_gone(goblin_node *n, int32_t pi);
/** Free the slots of gone peers that no lease names any more. */
void goblin__node_reap_peers(goblin_node *n);
/** Free the peer table (node_free). */
void goblin__node_peers_free(goblin_node *n);
/** Can peer @p k take tasks (connected, said HELLO, neither quarantined nor refused)? */
bool goblin__node_peer_eligible(const goblin_node *n, int32_t k);
/** Does peer @p p hold matmul panel @p id of @p kind (0: A, 1: B), as far as the node knows? */
bool goblin__node_peer_has_panel(const peer *p, int kind, uint64_t id);
/** Remember that peer @p p now holds panel @p id of @p kind. */
void goblin__node_peer_add_panel(peer *p, int kind, uint64_t id);
/** Does peer @p p hold graph-job input @p id (a cache id), as far as the node knows? */
bool goblin__node_peer_has_gid(const peer *p, uint64_t id);
/** Remember that peer @p p now holds graph-job input @p id. */
void goblin__node_peer_add_gid(peer *p, uint64_t id);
/** Send message @p m to pipe @p pp (its tensors gathered from any strides); an nng error code. */
int goblin__node_send_wire(goblin_node *n, nng_pipe pp, const goblin__wire_msg *m);
/** Drop peer @p pi (its leases end, not counted against their tasks) and close its pipe; @p why is
 * logged. */
void goblin__node_drop_peer(goblin_node *n, int32_t pi, const char *why);
/** One nng message from a worker (borrowed: the caller frees it after this returns). */
void goblin__node_handle_msg(goblin_node *n, nng_msg *msg);

/* ---- lease.c -------------------------------------------------------------------- */

/** Remove lease @p li from the table (the last one takes its place). */
void goblin__node_remove_lease(goblin_node *n, int64_t li);
/** The index of lease @p id, or -1. */
int64_t goblin__node_find_lease(goblin_node *n, uint64_t id);
/** Lease @p L ended: the first lease of its TASK message to end frees the message's pipe slot. */
void goblin__node_lease_msg_done(goblin_node *n, const lease *L);
/** Lease @p li ended without an accepted result; @p counts: against the task's retry budget. */
void goblin__node_lease_failed(goblin_node *n, int64_t li, bool counts, goblin_err why, const char *what);
/** End every lease of peer @p pi as lease_failed does. */
/** Room in the lease table (and its id index) for one more lease; false: out of memory. */
bool goblin__node_lease_reserve(goblin_node *n);
/** Append lease @p L (after goblin__node_lease_reserve): indexed by id and listed on its task. */
void goblin__node_lease_push(goblin_node *n, const lease *L);
/** Slots of task @p ti of @p j's leases in the table (live or moot), up to @p cap of them
 *  into @p out: their count, or -1 when the task's id list overflowed (scan the table). */
int goblin__node_task_lease_slots(const goblin_node *n, const goblin_job *j, int64_t ti, int64_t *out, int cap);
/** Mark task @p ti of @p j's leases moot (a result arriving for one is discarded). */
void goblin__node_task_leases_moot(goblin_node *n, goblin_job *j, int64_t ti);
/** Forget every lease (the node stopped). */
void goblin__node_leases_clear(goblin_node *n);
void goblin__node_fail_peer_leases(goblin_node *n, int32_t pi, bool counts, goblin_err why, const char *what);
/** Send the open batch of TASKs, if any, and close it. */
void goblin__node_batch_flush(goblin_node *n);
/** Register a lease of task @p ti of @p j for peer @p pi and send the TASK (graph @p gbuf, inputs
 * @p in: borrowed). */
bool goblin__node_send_task(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, bool speculative,
                            const uint8_t *gbuf, size_t glen, goblin_tensor *in, uint32_t n_in, bool may_batch);

/* ---- scheduler.c ---------------------------------------------------------------- */

/** Does task @p ti of @p j fit in peer @p p's memory? */
bool goblin__node_task_fits(const goblin_job *j, int64_t ti, const peer *p);
/** Put peer @p pi on the ready list (schedule looks at it next). */
void goblin__node_mark_ready(goblin_node *n, int32_t pi);
/** Lease tasks to the peers that can take them; @p full: all peers (housekeeping ticks), else the
 * ready list. */
void goblin__node_schedule(goblin_node *n, bool full);

/* What a job is cut by (docs/runtime.md, "Capacity"): the workers that ask for work. */
typedef struct goblin__node_capacity {
    int32_t workers;  /* eligible workers asking for work (or holding leases, or just joined) */
    int64_t units;    /* their weight: each worker counts threads / the fewest threads among
                         them, at most CAPACITY_MAX_WEIGHT; >= 1 even with no worker */
    uint64_t memory;  /* the smallest memory among them; 0: no worker */
} goblin__node_capacity;

/** The node's capacity now (under node->mu). */
goblin__node_capacity goblin__node_capacity_now(const goblin_node *n);

/* ---- matmul_job.c --------------------------------------------------------------- */

/** The 2-D view rows [r0, r0 + nr) x cols [c0, c0 + nc) of @p t (elements of @p esz bytes). */
goblin_tensor goblin__node_view2(const goblin_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                                 size_t esz);
/** Copy contiguous @p src (rows x cols) into the strided 2-D view @p v. */
void goblin__node_unpack(goblin_tensor *v, const void *src, size_t esz);
/** Tile @p i of matmul job @p j (its plan). */
void goblin__node_job_tile(const goblin_job *j, int64_t i, goblin__matmul_tile *t);
/** The cache id of task @p task_i's A (@p kind 0) or B (1) panel; never 0. */
uint64_t goblin__node_panel_id(const goblin_job *j, int kind, int64_t task_i);
/** Compute matmul task @p i on the node into contiguous @p dst (rows x cols), on the verification
 * clock. */
goblin_err goblin__node_compute(goblin_node *n, goblin_job *j, int64_t i, void *dst);
/** Send task @p ti of @p j to peer @p pi (a matmul tile here; graph jobs: issue_graph). */
bool goblin__node_issue(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, bool speculative);
/** Matmul task @p ti's result (contiguous rows x cols at @p data, from peer @p by, -1: the node) is
 * final. */
void goblin__node_task_accept(goblin_node *n, goblin_job *j, int64_t ti, const void *data, int32_t by);
/** Judge a RESULT @p r from peer @p pi (graph jobs: handle_graph_result). */
void goblin__node_handle_result(goblin_node *n, int32_t pi, goblin__wire_result *r);

/* ---- job.c ---------------------------------------------------------------------- */

/** Free *@p bufs (@p n buffers) and set it NULL. */
void goblin__node_free_bufs(void ***bufs, int32_t n);
/** End job @p j with status @p st and error @p e (message: printf format, or NULL); its leases go
 * moot. */
void goblin__node_job_finish(goblin_job *j, goblin_job_status st, goblin_err e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/** Task @p ti has a result from peer @p by (-1: the node) and goes to @p state; its other leases
 * are moot. */
void goblin__node_task_settle(goblin_node *n, goblin_job *j, int64_t ti, uint8_t state, int32_t by);
/** Common end of an accepted task: counters, progress, the job's end. */
void goblin__node_task_done(goblin_node *n, goblin_job *j, int64_t ti);

/* ---- tile_check.c --------------------------------------------------------------- */

/** Drop the job's panels objects: the next check draws new vectors. */
void goblin__node_job_drop_panels(goblin_job *j);
/** Freivalds-check @p c as task @p ti (@p whole_tile: the whole C tile over all of K), on the
 * verification clock. */
goblin_err goblin__node_check_tile(goblin_node *n, goblin_job *j, int64_t ti, bool whole_tile,
                                   const goblin_tensor *c, goblin_verdict *v);
/** Prepare one Freivalds check of a leased matmul task before its result arrives (once per loop
 * turn). */
void goblin__node_prepare_ahead(goblin_node *n);
/** Task @p ti's result (from peer @p by) goes into C, to be judged with its row panel. */
void goblin__node_task_hold(goblin_node *n, goblin_job *j, int64_t ti, const void *data, int32_t by);
/** The results of identity serial @p by_ident waiting for their row panel's check are dropped,
 * the tasks leased again. */
void goblin__node_drop_held_tiles(goblin_node *n, uint64_t by_ident);

/* ---- stats.c -------------------------------------------------------------------- */

/** Start timing a verification step. */
vclock goblin__node_verify_begin(void);
/** Add the time since @p t0 to the node's verification clocks (verify_ns, verify_cpu_ns). */
void goblin__node_verify_end(goblin_node *n, vclock t0);

/* ---- graph_job.c ---------------------------------------------------------------- */

/** Free graph job state @p G (NULL: nothing). */
void goblin__node_gjob_free(gjob *G);

/* ---- graph_chunk.c -------------------------------------------------------------- */

/** Rows [r0, r0 + rows) of @p t (a view). */
goblin_tensor goblin__node_rows_view(const goblin_tensor *t, int64_t r0, int64_t rows);
/* The part of output @p o that task @p ti computes (a view of the caller's tensor). */
goblin_tensor goblin__node_out_rows(const goblin_job *j, int64_t ti, int32_t o);
/** Input @p i of task @p ti as the node sees it (caller's memory, any strides). */
goblin_tensor goblin__node_task_input(const goblin_job *j, int64_t ti, int32_t i);
/** Bytes of a contiguous tensor of @p shape's dtype and shape. */
size_t goblin__node_out_bytes(const goblin_tensor *shape);
/** Output @p o of task @p ti over contiguous @p data. */
goblin_tensor goblin__node_out_tensor(const goblin_job *j, int64_t ti, int32_t o, void *data);
/** Send chunk @p ti of graph job @p j to peer @p pi. */
bool goblin__node_issue_graph(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, bool speculative);
/** Compute graph task @p ti on the node (*@p out: a new buffer per output); verification clock. */
goblin_err goblin__node_graph_compute(goblin_node *n, goblin_job *j, int64_t ti, void ***out);
/** Does a worker's result have the task's output count, dtypes and shapes (else *@p why)? */
bool goblin__node_graph_result_shape_ok(const goblin_job *j, int64_t ti, const goblin__wire_result *r,
                                        goblin_verify_reason *why);
/** Does result @p res agree with the node's @p mine under the outputs' contracts (else *@p why)? On
 * the verification clock. */
bool goblin__node_graph_agrees(goblin_node *n, const goblin_job *j, int64_t ti, const goblin_tensor *res,
                               void **mine, goblin_verify_reason *why);
/** Store the outputs of task @p ti; false: out of memory. */
bool goblin__node_graph_store(goblin_job *j, int64_t ti, void *const *data);
/** Graph task @p ti's outputs @p data (from peer @p by, -1: the node) are final; @p replicated:
 * they were checked. */
void goblin__node_graph_task_accept(goblin_node *n, goblin_job *j, int64_t ti, void *const *data,
                                    int32_t by, bool replicated);
/** Decide task @p ti by recomputing it on the node, judging @p nc candidate results @p res of peers
 * @p pc. */
/* ---- checked.c: CHECKED ------------------------------------------------------ */

/** Plan checked execution of variant @p v (its g built from job graph @p g): *applies
 *  false, with the reason in @p why, when the graph has no checkable product or the node
 *  would do too large a share of the work (unless @p any_share); else v's heavy, wg and cg set. GOBLIN_ENOMEM. */
goblin_err goblin__node_checked_plan(const gjob *G, const goblin_graph *g, gvariant *v, bool any_share,
                                     bool *applies, char *why, size_t cap);
/** Free what goblin__node_checked_plan set in @p v. */
void goblin__node_checked_free(gvariant *v);
/** Do a CHECKED result's products have the products' dtypes and shapes (else *@p why)? */
bool goblin__node_checked_shape_ok(const goblin_job *j, int64_t ti, const goblin__wire_result *r,
                                   goblin_verify_reason *why);
/** Judge worker @p pi's result @p res (the job's outputs, then the products) of task @p ti. */
void goblin__node_graph_checked(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, const goblin_tensor *res);

void goblin__node_graph_decide(goblin_node *n, goblin_job *j, int64_t ti, int32_t nc, const int32_t *pc,
                               const goblin_tensor *const *res);
/** Combine the reduction outputs over the chunks, in chunk order. */
goblin_err goblin__node_graph_combine(goblin_job *j);

/* ---- identity.c ----------------------------------------------------------------- */

/** Read the allow list, owners and quarantine files of the node's params; EINVAL with
 *  a message for a file that cannot be read or has a bad line. */
goblin_err goblin__node_identity_load(goblin_node *n, char *msg, size_t cap);
/** Free what identity_load and the records hold. */
void goblin__node_identity_free(goblin_node *n);
/** HELLO from peer @p pi (its bytes @p hello): remember them and send a CHALLENGE. */
void goblin__node_identity_challenge(goblin_node *n, int32_t pi, const uint8_t *hello, size_t len);
/** PROOF from peer @p pi: check the signature, the allow list and the quarantine, and
 *  bind the peer to its identity's record. GOBLIN_EAUTH (or ENOMEM) with a reason for
 *  the REFUSE and the log in (why, cap). */
goblin_err goblin__node_identity_admit(goblin_node *n, int32_t pi, const goblin__wire_proof *pf, char *why,
                                       size_t cap);
/** The identity record of peer @p pi, or NULL (not admitted). */
ident *goblin__node_peer_ident(const goblin_node *n, int32_t pi);

/* ---- direct introductions (intro.c), all under n->mu ------------------------------- */

/* A worker the hub introduces will dial with @p ticket as its HELLO token and prove the
 * identity @p fp (hex); GOBLIN_ELIMIT when INTRO_MAX tickets are outstanding. */
goblin_err goblin__node_intro_add(goblin_node *n, const uint8_t *ticket, const char *fp);
/* HELLO of peer @p pi with token @p tok (@p len bytes): true if it is a ticket (taken:
 * single use); the identity its PROOF must show is kept on the peer. */
bool goblin__node_intro_take(goblin_node *n, int32_t pi, const uint8_t *tok, uint32_t len);
/* After peer @p pi's PROOF: false (@p why) if its HELLO held a ticket for another
 * identity; else an introduced peer is marked relayed (the hub's volunteer). */
bool goblin__node_intro_admitted(goblin_node *n, int32_t pi, char *why, size_t cap);
/* Peer @p pi's connection ended: an introduced worker's LEFT is queued for the hub. */
void goblin__node_intro_gone(goblin_node *n, int32_t pi);
/* Tickets past their deadline: dropped, LEFT queued (housekeeping). */
void goblin__node_intro_expire(goblin_node *n, int64_t now);
/* The hub's END: the introduced worker with identity @p fp goes, its tickets too. */
void goblin__node_intro_end(goblin_node *n, const char *fp);
/* The hub link ended: every introduced worker goes back to the hub, tickets dropped. */
void goblin__node_intro_drop_all(goblin_node *n);
/* Up to @p max queued LEFTs into @p out (taken); how many. */
int32_t goblin__node_intro_left_take(goblin_node *n, goblin__intro_left *out, int32_t max);
/** Do identities @p a and @p b (record indices) count as one party (the same identity, or
 *  the same owner)? */
bool goblin__node_ident_same_party(const goblin_node *n, int32_t a, int32_t b);
/** Do peers @p a and @p b count as one party for replication (the same identity, owner
 *  or network origin)? */
bool goblin__node_same_party(const goblin_node *n, int32_t a, int32_t b);
/** The record of identity serial @p serial, or -1. */
int32_t goblin__node_ident_by_serial(const goblin_node *n, uint64_t serial);
/** Record identity @p id (and every identity of its owner) as quarantined, in memory
 *  and in the quarantine file. */
void goblin__node_identity_quarantine(goblin_node *n, int32_t id);

/* ---- origin.c (the rest in origin.h) ---------------------------------------------- */

/** Read peer @p pi's network origin from its pipe (a test's assignment for a local one). */
void goblin__node_peer_set_origin(goblin_node *n, int32_t pi);
/** Do peers @p a and @p b have one network origin (local peers have none)? */
bool goblin__node_same_origin(const goblin_node *n, int32_t a, int32_t b);
/** Free the test origins (goblin_node_free). */
void goblin__node_origin_free(goblin_node *n);

/* ---- trust.c -------------------------------------------------------------------- */

/** A uniform double in [0, 1) from the node's secret random source. */
double goblin__node_rand_u01(void);
/** REPLICATE graph jobs: decide, at the first lease to peer @p pi, whether task @p ti runs twice. */
void goblin__node_decide_replication(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi);
/** The share of peer @p pi's SPOT results that are checked (its identity's trust). */
double goblin__node_spot_rate(const goblin_node *n, const gjob *G, int32_t pi);
/** Name peer @p by (-1: the node) as the giver of task @p t's result. */
void goblin__node_task_set_by(const goblin_node *n, task *t, int32_t by);
/** Count a rejected result of task @p ti from peer @p pi (reason @p why) and log it. */
void goblin__node_count_reject(goblin_node *n, int32_t pi, int64_t ti, goblin_verify_reason why);
/** Count an accepted result from peer @p pi; @p agreed: the node checked it and it agreed
 *  (trust, and a vouched result for probation). */
void goblin__node_count_accept(goblin_node *n, int32_t pi, bool agreed);
/** Replicas of peers @p h and @p pi (independent parties) agreed bit for bit: each
 *  gains trust, and a vouched result if the other is established. */
void goblin__node_count_agreement(goblin_node *n, int32_t h, int32_t pi);
/** Is peer @p pi's identity on probation (fewer than probation_results vouched)? */
bool goblin__node_on_probation(const goblin_node *n, int32_t pi);
/** Is a secret audit drawn for a result accepted by agreement or trust (audit_rate)? */
bool goblin__node_audit_draw(const goblin_node *n);
/** A result from peer @p pi (-1 if gone) of identity serial @p by_ident that the node
 *  recomputed because its check was inconclusive between the levels (verdict @p v;
 *  only GOBLIN_VERIFY_BETWEEN counts): counted against the connection and identity,
 *  which is quarantined at GOBLIN__SUSPICION_LIMIT (docs/verification.md). */
void goblin__node_count_suspicion(goblin_node *n, int32_t pi, uint64_t by_ident, const goblin_verdict *v);
#define GOBLIN__SUSPICION_LIMIT 3

/* ---- spot.c --------------------------------------------------------------------- */

/** Free task @p t's prepared spot-check rows; a check decided (SPOT_CHECK) is undecided again. */
void goblin__node_task_free_spot(goblin_job *j, task *t);
/** Prepare one spot-check of a leased SPOT task while its worker computes (once per loop turn). */
void goblin__node_spot_prepare(goblin_node *n);
/** SPOT: judge peer @p pi's result @p res (outputs @p data) of task @p ti. */
void goblin__node_graph_spot(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, const goblin_tensor *res,
                             void *const *data);

/* ---- replica.c ------------------------------------------------------------------ */

/** Judge a graph job's RESULT @p r for lease @p li from peer @p pi, by the job's verification. */
void goblin__node_handle_graph_result(goblin_node *n, int32_t pi, int64_t li, goblin__wire_result *r);
/** A held result whose replica can go nowhere (no other eligible worker): the node decides. */
void goblin__node_resolve_orphans(goblin_node *n);
/** Peer @p pi is quarantined: forget the results it has held for replication. */
void goblin__node_drop_held(goblin_node *n, int32_t pi);

/* ---- quarantine.c --------------------------------------------------------------- */

/** Quarantine peer @p pi's identity (a wrong result; with its owner's other identities): its
 * peers get no more tasks, their held results are dropped, accepted ones rechecked. */
void goblin__node_quarantine(goblin_node *n, int32_t pi);
/** As goblin__node_quarantine, for identity record @p id (its peer may be gone). */
void goblin__node_quarantine_identity(goblin_node *n, int32_t id);

/* ---- status.c, status_page.c: the status page ------------------------------------ */

struct goblin__page;
enum { GOBLIN__STATUS_HTML = 0, GOBLIN__STATUS_JSON = 1, GOBLIN__STATUS_METRICS = 2 };

/* The window of the page's tasks-per-second figure: tasks completed at t_ms. */
typedef struct goblin__node_rate {
    int64_t t_ms, done;
    double per_s;
} goblin__node_rate;

/** Page @p which (GOBLIN__STATUS_*) of node @p n into @p b, from one snapshot taken under
 *  n->mu; @p rate: the tasks-per-second window, updated (the caller serializes calls). */
void goblin__node_status_render(goblin_node *n, int which, struct goblin__page *b, goblin__node_rate *rate);
/** Stop the status page's server, if any (goblin_node_stop, goblin_node_free). */
void goblin__node_status_stop(goblin_node *n);

/* ---- hub_link.c: workers borrowed through goblin-hub ---- */
/* A pipe of the node's socket added (ADD_POST) or removed (REM_POST): the link's
 * data connections. Any thread (nng's pipe callbacks). */
void goblin__node_hub_pipe(goblin_node *n, nng_pipe pp, bool added);
/** Is pipe @p pipe_id a data connection of the hub link? Then the worker's origin as
 *  the hub reported it (origin.c's key; 0: local) into *@p out. Takes ev_mu, then the
 *  link's mutex (callable under n->mu). */
bool goblin__node_hub_pipe_origin(goblin_node *n, uint32_t pipe_id, uint64_t *out);
/** The hub says identity @p fp (64 hex digits) belongs to volunteer account @p account:
 *  its owner here ("hub account N") unless the owners file names one; a record of it
 *  takes it at once. EINVAL, ELIMIT (65536 such identities), ENOMEM. Under n->mu. */
goblin_err goblin__node_identity_owner_from_hub(goblin_node *n, const char *fp, int64_t account);
/* Stop the link (before the node's socket closes); free it (goblin_node_free). */
void goblin__node_hub_stop(goblin_node *n);
void goblin__node_hub_free(goblin_node *n);

#endif
