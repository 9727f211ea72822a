/* libgoblin/node/node.c - the node: planning, leases, scheduling, verification and assembly of
 * matmul jobs (see node.h and docs/runtime.md).
 *
 * One thread owns the socket: it receives a message (10 ms timeout), handles it,
 * processes pipe events, expires leases and hands out tasks. All scheduling state is
 * under node->mu; a job's status fields are also under job->mu so that waiting on a
 * job never needs the node (lock order: node->mu, then job->mu). */
#include "goblin/node.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "graph/graph_impl.h"
#include "goblin/graph.h"
#include "goblin/ops.h"
#include "plan.h"
#include "goblin/tls.h"
#include "net/tls_impl.h"
#include "proto/wire.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/secret.h"
#include "graph/hoist.h"
#include "graph/rebatch.h"
#include "matmul_graph.h"
#include "verify/verify_impl.h"
#include "net/share.h"
#include "net/transport.h"
#include "proto/wire_impl.h"

#define PANEL_MEMO 32     /* matmul panel ids remembered per worker and kind (A, B) */
#define GID_MEMO 160      /* graph-job input ids remembered per worker (a captured model's
                             * weights are inputs, hoist.c); workers keep at most 256 inputs
                             * (worker.c): 2 x PANEL_MEMO + GID_MEMO must stay below */
_Static_assert(GID_MEMO % PANEL_MEMO == 0 && 2 * PANEL_MEMO + GID_MEMO < 256, "worker input cache bound");
#define SCAN_LIMIT 512    /* pending tasks examined per assignment */
#define MAX_WANTED 256    /* lease slots a worker may have outstanding */
#define HOUSEKEEPING_MS 2 /* node_main: lease deadlines and heartbeats checked this often */
#define REFUSE_LINGER_MS 300 /* let a REFUSE reach the worker before closing the pipe */
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

/* T_HELD: a matmul tile whose result is in C, waiting for the check of its whole row
 * panel (row_panel_check); neither leased again nor done until then. */
enum { T_PENDING = 0, T_LEASED = 1, T_DONE = 2, T_HELD = 3 };

typedef struct peer {
    nng_pipe pipe;
    uint32_t pipe_id;
    uint64_t session_id;
    bool connected, hello, quarantined, counted;
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
    uint64_t panels[2][PANEL_MEMO];
    int32_t panel_next[2];
    int32_t memo_cap; /* panels per kind believed cached: halved on every miss, since
                         HELLO does not say how big the worker's cache is */
    uint64_t gids[GID_MEMO]; /* graph jobs: cache ids of broadcast inputs it holds */
    int32_t gnext;
    int64_t agreements; /* replicated results that agreed (adaptive trust) */
    int64_t last_heard_ms; /* any message from the peer */
    bool ready; /* in node->ready (schedule) */
} peer;

typedef struct task {
    uint8_t state;
    uint8_t n_leases;
    int32_t attempts;
    int32_t accepted_peer; /* peer index, -1: the node computed it */
    int64_t leased_at_ms;
    void *partial;         /* split-K partial tile (contiguous rows x cols) until summed */
    /* graph jobs */
    int32_t holder;        /* peer index + 1 of a result held until its replica arrives; 0: none */
    bool replicated;       /* the accepted result was checked (replica or node) */
    void **held;           /* the held result: one contiguous buffer per output */
    void **outs;           /* accepted outputs of reductions, combined at the end */
    uint8_t rep;           /* REPLICATE: 0 undecided, REP_SINGLE, REP_TWICE (decided when
                              first leased, from that worker's trust) */
    /* SPOT, prepared while the worker computes (spot_prepare): whether the result of
     * worker spot_peer is checked (spot_state), and for a checked task its secret rows
     * spot_idx[spot_k] (sorted) with their outputs as the node computed them. */
    uint8_t spot_state;
    int32_t spot_peer;
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
    const goblin__hoisted *hoist; /* the graph whose constants are inputs here, or NULL */
    int64_t spot_k;               /* SPOT: rows recomputed per check */
    goblin_graph *spot_g;         /* SPOT: the graph for spot_k rows */
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

struct goblin_node {
    goblin_node_params p;
    char *urls[GOBLIN_NODE_MAX_LISTEN];
    char *cert_file, *key_file; /* copies behind p.cert_file / p.key_file */
    char *token_file;           /* copy behind p.token_file */
    uint8_t *token;
    pthread_mutex_t mu;
    pthread_t thread;
    bool started, stopping, socket_open;
    nng_socket sock;
    /* A non-blocking pipe: node_wake writes a byte so node_main's poll returns at once
     * (a job submitted or canceled, a stop) instead of at its 10 ms timeout. -1: none. */
    int wake_rd, wake_wr;
    goblin__wire_limits limits;
    peer *peers;
    int32_t n_peers, cap_peers;
    /* Peers that may take a task (schedule): added when a message comes from one or
     * one of its leases ends, dropped once it cannot take more; every housekeeping
     * tick adds all eligible peers. With hundreds of workers, a pass over all of them
     * per message cost more than the message. */
    int32_t *ready;
    int32_t n_ready, cap_ready;
    lease *leases;
    int64_t n_leases, cap_leases;
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
    goblin_node_stats st;
    /* pipe events from nng's threads, under ev_mu */
    pthread_mutex_t ev_mu;
    uint32_t *ev_removed;
    int32_t n_ev, cap_ev;
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
};

/* The chunk graph of task @p ti of a graph job: the last chunk may be shorter. */
static inline gvariant *gvar(const goblin_job *j, int64_t ti) {
    return ti == j->ntasks - 1 && j->g->nv == 2 ? &j->g->v[1] : &j->g->v[0];
}

static void gjob_free(gjob *G);

/* ---- small helpers ---------------------------------------------------------- */

static void nlog(goblin_node *n, goblin_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void nlog(goblin_node *n, goblin_log_level lvl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    goblin__logv(n->p.log, n->p.log_user, n->p.log_level, lvl, fmt, ap);
    va_end(ap);
}

static bool grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return true;
    int64_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *p = goblin__alloc((size_t)nc * elem);
    if (!p) return false;
    if (*arr) memcpy(p, *arr, (size_t)*cap * elem);
    goblin__free(*arr);
    *arr = p;
    *cap = nc;
    return true;
}

/* ---- params ----------------------------------------------------------------- */

/* Logging before a node exists (parameter checks in goblin_node_new). */
static void plog(const goblin_node_params *p, goblin_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void plog(const goblin_node_params *p, goblin_log_level lvl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    goblin__logv(p->log, p->log_user, p->log_level, lvl, fmt, ap);
    va_end(ap);
}

void goblin_node_params_default(goblin_node_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->lease_ms = 30000;
    p->max_retries = 4;
    p->verify = GOBLIN_VERIFY_FREIVALDS;
    p->freivalds_vectors = 4;
    p->verify_threads = 2;
    p->recv_max_bytes = (uint64_t)1 << 30;
    p->recompute_backend =
        goblin_backend_available(GOBLIN_BACKEND_BLIS) == GOBLIN_OK ? GOBLIN_BACKEND_BLIS
                                                                   : GOBLIN_BACKEND_REF;
    p->recompute_threads = 0;
    p->speculate = true;
    p->log_level = GOBLIN_LOG_INFO;
    p->heartbeat_ms = 5000;
}

void goblin_job_params_default(goblin_job_params *p) {
    if (p) memset(p, 0, sizeof *p);
}

goblin_err goblin_node_new(goblin_node **out, const goblin_node_params *p) {
    if (!out || !p) return GOBLIN_EINVAL;
    if (p->n_listen < 1 || p->n_listen > GOBLIN_NODE_MAX_LISTEN || p->lease_ms < 1 ||
        p->max_retries < 0 || (p->verify != GOBLIN_VERIFY_FREIVALDS && p->verify != GOBLIN_VERIFY_RECOMPUTE &&
         p->verify != GOBLIN_VERIFY_UNSAFE_NONE) ||
        p->freivalds_vectors < 1 || p->freivalds_vectors > GOBLIN_FREIVALDS_MAX_VECTORS ||
        p->verify_threads < 1 || p->verify_threads > 2 ||
        p->recv_max_bytes < GOBLIN_WIRE_HEADER_SIZE ||
        p->recv_max_bytes > GOBLIN_WIRE_MAX_MESSAGE_BYTES ||
        (unsigned)p->recompute_backend >= GOBLIN_BACKEND_COUNT ||
        p->token_len > GOBLIN_WIRE_MAX_TOKEN_BYTES || (p->token_len && !p->join_token))
        return GOBLIN_EINVAL;
    for (int32_t i = 0; i < p->n_listen; i++)
        if (!p->listen[i] || !p->listen[i][0]) return GOBLIN_EINVAL;
    for (int32_t i = 0; i < p->n_listen; i++) {
        const char *u = p->listen[i];
        /* Worker traffic (tasks, panels, results, join tokens) must not cross a
         * network in clear unless the caller says so explicitly. */
        if (goblin__transport_url_is_plain_tcp(u) && !goblin__transport_url_is_local(u) &&
            !p->insecure_plaintext) {
            plog(p, GOBLIN_LOG_ERROR,
                         "refusing to listen on %s in plain text: it is not a loopback address; "
                         "use tls+tcp:// with a certificate and key, or set insecure_plaintext", u);
            return GOBLIN_EINVAL;
        }
        if (goblin__transport_url_is_tls(u) && (!p->cert_file || !p->key_file)) {
            plog(p, GOBLIN_LOG_ERROR,
                         "cannot listen on %s: TLS needs cert_file and key_file", u);
            return GOBLIN_EINVAL;
        }
    }
    if (p->token_file) {
        /* A well-formed file answers EAUTH for a token it does not hold. */
        char why[256] = "";
        goblin_err te = goblin__token_check_file(p->token_file, "-", why, sizeof why);
        if (te != GOBLIN_EAUTH && te != GOBLIN_OK) {
            plog(p, GOBLIN_LOG_ERROR, "the token file %s cannot be used (%s): %s", p->token_file,
                 goblin_err_name(te), why);
            return GOBLIN_EINVAL;
        }
    }
    goblin_node *n = goblin__calloc(1, sizeof *n);
    if (!n) return GOBLIN_ENOMEM;
    n->p = *p;
    n->wake_rd = n->wake_wr = -1;
    for (int32_t i = 0; i < p->n_listen; i++) {
        n->urls[i] = goblin__strdup(p->listen[i]);
        if (!n->urls[i]) goto nomem;
        n->p.listen[i] = n->urls[i];
    }
    n->p.cert_file = n->p.key_file = n->p.token_file = NULL;
    if ((p->cert_file && !(n->cert_file = goblin__strdup(p->cert_file))) ||
        (p->key_file && !(n->key_file = goblin__strdup(p->key_file))) ||
        (p->token_file && !(n->token_file = goblin__strdup(p->token_file))))
        goto nomem;
    n->p.token_file = n->token_file;
    n->p.cert_file = n->cert_file;
    n->p.key_file = n->key_file;
    if (p->token_len) {
        n->token = goblin__memdup(p->join_token, p->token_len);
        if (!n->token) goto nomem;
        n->p.join_token = n->token;
    } else {
        n->p.join_token = NULL;
    }
    pthread_mutex_init(&n->mu, NULL);
    pthread_mutex_init(&n->ev_mu, NULL);
    pthread_mutex_init(&n->ser_mu, NULL);
    goblin__hoist_memo_init(&n->hoist);
    goblin__wire_limits_default(&n->limits);
    n->limits.max_message_bytes = p->recv_max_bytes;
    n->next_lease_id = 1;
    n->bpeer = -1;
    n->next_job_id = 1;
    int wp[2];
    if (pipe(wp) == 0) { /* without it the node still works, waking every 10 ms */
        fcntl(wp[0], F_SETFL, fcntl(wp[0], F_GETFL) | O_NONBLOCK);
        fcntl(wp[1], F_SETFL, fcntl(wp[1], F_GETFL) | O_NONBLOCK);
        fcntl(wp[0], F_SETFD, FD_CLOEXEC);
        fcntl(wp[1], F_SETFD, FD_CLOEXEC);
        n->wake_rd = wp[0];
        n->wake_wr = wp[1];
    }
    *out = n;
    return GOBLIN_OK;
nomem:
    for (int32_t i = 0; i < GOBLIN_NODE_MAX_LISTEN; i++) goblin__free(n->urls[i]);
    goblin__free(n->cert_file);
    goblin__free(n->key_file);
    goblin__free(n->token_file);
    goblin__free(n);
    return GOBLIN_ENOMEM;
}

/* ---- pipe events ------------------------------------------------------------ */

static void pipe_cb(nng_pipe pp, nng_pipe_ev ev, void *arg) {
    goblin_node *n = arg;
    if (ev != NNG_PIPE_EV_REM_POST) return;
    pthread_mutex_lock(&n->ev_mu);
    int64_t cap = n->cap_ev;
    if (grow((void **)&n->ev_removed, &cap, n->n_ev + 1, sizeof(uint32_t))) {
        n->cap_ev = (int32_t)cap;
        n->ev_removed[n->n_ev++] = nng_pipe_id(pp);
    }
    pthread_mutex_unlock(&n->ev_mu);
}

static int32_t find_peer(goblin_node *n, uint32_t pipe_id) {
    for (int32_t i = n->n_peers - 1; i >= 0; i--)
        if (n->peers[i].pipe_id == pipe_id && n->peers[i].connected) return i;
    return -1;
}

/* ---- job status --------------------------------------------------------------- */

static void free_bufs(void ***bufs, int32_t n) {
    if (!*bufs) return;
    for (int32_t o = 0; o < n; o++) goblin__free((*bufs)[o]);
    goblin__free(*bufs);
    *bufs = NULL;
}

static void task_free_spot(goblin_job *j, task *t) {
    free_bufs(&t->spot_mine, j->g->n_out);
    goblin__free(t->spot_idx);
    t->spot_idx = NULL;
    if (t->spot_state == SPOT_CHECK) t->spot_state = SPOT_UNDECIDED;
}

static void task_free_graph_bufs(goblin_job *j, task *t) {
    if (j->kind != JOB_GRAPH) return;
    free_bufs(&t->held, j->g->n_out);
    free_bufs(&t->outs, j->g->n_out);
    task_free_spot(j, t);
    t->holder = 0;
}

static void job_finish(goblin_job *j, goblin_job_status st, goblin_err e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void job_drop_panels(goblin_job *j);

static void job_finish(goblin_job *j, goblin_job_status st, goblin_err e, const char *fmt, ...) {
    j->running = false;
    goblin__share_job_close(j->share, j->stok);
    job_drop_panels(j);
    for (int64_t i = 0; i < j->ntasks; i++) {
        goblin__free(j->tasks[i].partial);
        j->tasks[i].partial = NULL;
        task_free_graph_bufs(j, &j->tasks[i]);
    }
    if (j->node)
        for (int64_t i = 0; i < j->node->n_leases; i++)
            if (j->node->leases[i].job == j) j->node->leases[i].moot = true;
    pthread_mutex_lock(&j->mu);
    if (j->status == GOBLIN_JOB_RUNNING) {
        j->status = st;
        j->err = e;
        if (fmt) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(j->msg, sizeof j->msg, fmt, ap);
            va_end(ap);
        }
    }
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->mu);
}

/* ---- tensors: views, packing, tiles of C ---------------------------------------- */

static goblin_tensor view2(const goblin_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                           size_t esz) {
    goblin_tensor v = *t;
    v.shape[0] = nr;
    v.shape[1] = nc;
    v.data = (char *)t->data + (r0 * t->strides[0] + c0 * t->strides[1]) * (int64_t)esz;
    return v;
}

/* Copy contiguous @p src (rows x cols) into the strided 2-D view @p v. */
static void unpack(goblin_tensor *v, const void *src, size_t esz) {
    int64_t r = v->shape[0], c = v->shape[1];
    const char *s = src;
    for (int64_t i = 0; i < r; i++) {
        char *row = (char *)v->data + i * v->strides[0] * (int64_t)esz;
        if (v->strides[1] == 1) {
            memcpy(row, s, (size_t)c * esz);
            s += (size_t)c * esz;
        } else {
            for (int64_t k = 0; k < c; k++, s += esz) memcpy(row + k * v->strides[1] * (int64_t)esz, s, esz);
        }
    }
}

static void job_tile(const goblin_job *j, int64_t i, goblin__matmul_tile *t) {
    goblin__plan_tile(j->plan, i, t);
}

/* Panel ids: the A panel of a task depends on its grid row and K-slice, the B panel
 * on its grid column and K-slice. Never 0 (0 means "do not cache"). */
static uint64_t panel_id(const goblin_job *j, int kind, int64_t task_i) {
    int64_t s = j->info.k_slices, t = task_i / s, q = task_i % s;
    int64_t idx = kind == 0 ? (t / j->info.grid_cols) : (t % j->info.grid_cols);
    uint64_t v = j->id * 0x9E3779B97F4A7C15ull;
    v ^= ((uint64_t)kind << 63) | ((uint64_t)(idx * s + q) & 0x7fffffffffffffffull);
    return v ? v : 1;
}

static bool peer_has_panel(const peer *p, int kind, uint64_t id) {
    if (!id) return false;
    for (int i = 0; i < p->memo_cap; i++)
        if (p->panels[kind][i] == id) return true;
    return false;
}

static void peer_add_panel(peer *p, int kind, uint64_t id) {
    if (peer_has_panel(p, kind, id)) return;
    if (p->memo_cap < 1) return;
    p->panels[kind][p->panel_next[kind] % p->memo_cap] = id;
    p->panel_next[kind] = (p->panel_next[kind] + 1) % p->memo_cap;
}

/* ---- the task graph ------------------------------------------------------------- */

goblin_err goblin__matmul_graph(goblin_dtype dt, int64_t rows, int64_t kn, int64_t cols,
                                goblin_graph **out) {
    goblin_graph *g = NULL;
    goblin_err e = goblin_graph_new(&g);
    if (e) return e;
    int64_t sa[2] = {rows, kn}, sb[2] = {kn, cols};
    int32_t ids[2], y;
    if ((e = goblin_graph_input(g, dt, 2, sa, &ids[0])) || (e = goblin_graph_input(g, dt, 2, sb, &ids[1])) ||
        (e = goblin_graph_add(g, GOBLIN_OP_MATMUL, ids, 2, NULL, 0, &y)) || (e = goblin_graph_output(g, y))) {
        goblin_graph_free(g);
        return e;
    }
    *out = g;
    return GOBLIN_OK;
}

/* Compute task @p i on the node into contiguous @p dst (rows x cols). */
static goblin_err node_compute_impl(goblin_node *n, goblin_job *j, int64_t i, void *dst) {
    goblin__matmul_tile t;
    job_tile(j, i, &t);
    goblin_graph *g = NULL;
    goblin_err e = goblin__matmul_graph(j->dt, t.rows, t.kn, t.cols, &g);
    if (e) return e;
    goblin_tensor in[2] = {view2(&j->a, t.row0, t.rows, t.k0, t.kn, j->esz),
                           view2(&j->b, t.k0, t.kn, t.col0, t.cols, j->esz)};
    goblin_tensor out;
    int64_t shp[2] = {t.rows, t.cols};
    goblin_tensor_init(&out, j->dt, 2, shp, dst);
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.backend = n->p.recompute_backend;
    ep.threads = n->p.recompute_threads;
    e = goblin_graph_eval(g, &ep, in, 2, &out, 1);
    goblin_graph_free(g);
    return e;
}

/* The node's verification clocks (goblin_node_stats.verify_ns and verify_cpu_ns):
 * wall time on the node's thread, and CPU time of that thread and of the checks'
 * second threads (goblin_freivalds_params.threads). */
typedef struct vclock {
    int64_t wall, cpu;
} vclock;

static vclock verify_begin(void) {
    goblin__freivalds_take_helper_cpu_ns(); /* nothing of before */
    return (vclock){goblin__now_ns(), goblin__thread_cpu_ns()};
}

static void verify_end(goblin_node *n, vclock t0) {
    n->st.verify_ns += goblin__now_ns() - t0.wall;
    n->st.verify_cpu_ns += goblin__thread_cpu_ns() - t0.cpu + goblin__freivalds_take_helper_cpu_ns();
}

/* node_compute, with its time added to the node's verification clock (goblin_node_stats.verify_ns). */
static goblin_err node_compute(goblin_node *n, goblin_job *j, int64_t i, void *dst) {
    vclock t0 = verify_begin();
    goblin_err r = node_compute_impl(n, j, i, dst);
    verify_end(n, t0);
    return r;
}

/* ---- leases ------------------------------------------------------------------ */

static void remove_lease(goblin_node *n, int64_t li) {
    n->leases[li] = n->leases[--n->n_leases];
}

static int64_t find_lease(goblin_node *n, uint64_t id) {
    for (int64_t i = 0; i < n->n_leases; i++)
        if (n->leases[i].id == id) return i;
    return -1;
}

static void mark_ready(goblin_node *n, int32_t pi);

/* Lease @p L ended (result, failure, expiry, its job freed): the first lease of its
 * TASK message to end shows the worker took the message off its pipe. */
static void lease_msg_done(goblin_node *n, const lease *L) {
    if (L->peer < 0 || L->peer >= n->n_peers) return;
    peer *p = &n->peers[L->peer];
    for (int32_t i = 0; i < p->in_flight; i++)
        if (p->in_flight_msg[i] == L->msg) {
            p->in_flight_msg[i] = p->in_flight_msg[--p->in_flight];
            return;
        }
}

/* A lease ended without an accepted result. @p counts: whether it counts against the
 * task's retry budget. */
static void lease_failed(goblin_node *n, int64_t li, bool counts, goblin_err why, const char *what) {
    lease L = n->leases[li];
    remove_lease(n, li);
    lease_msg_done(n, &L);
    mark_ready(n, L.peer);
    if (L.moot) return;
    goblin_job *j = L.job;
    task *t = &j->tasks[L.task];
    if (t->n_leases > 0) t->n_leases--;
    bool miss = why == GOBLIN_ENOTFOUND;
    if (L.peer >= 0 && L.peer < n->n_peers && !miss) n->peers[L.peer].failed++;
    if (t->state == T_DONE || t->state == T_HELD || !j->running) return;
    if (!miss) n->st.tasks_reissued++;
    if (counts) t->attempts++;
    if (t->n_leases == 0) {
        t->state = T_PENDING;
        if (L.task < j->scan_from) j->scan_from = L.task;
    }
    if (counts && t->attempts > n->p.max_retries) {
        nlog(n, GOBLIN_LOG_ERROR, "job %llu failed: task %lld failed %d times (last: %s)",
             (unsigned long long)j->id, (long long)L.task, (int)t->attempts, what);
        if (j->kind == JOB_GRAPH) {
            int64_t r0 = L.task * j->g->rows;
            job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ELIMIT,
                       "task %lld (batch rows %lld..%lld) failed %d times; last failure: %s",
                       (long long)L.task, (long long)r0, (long long)(r0 + gvar(j, L.task)->rows),
                       (int)t->attempts, what);
            return;
        }
        goblin__matmul_tile tl;
        job_tile(j, L.task, &tl);
        job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ELIMIT,
                   "task %lld (rows %lld..%lld, cols %lld..%lld, k %lld..%lld) failed %d times; "
                   "last failure: %s",
                   (long long)L.task, (long long)tl.row0, (long long)(tl.row0 + tl.rows),
                   (long long)tl.col0, (long long)(tl.col0 + tl.cols), (long long)tl.k0,
                   (long long)(tl.k0 + tl.kn), (int)t->attempts, what);
    }
}

static void fail_peer_leases(goblin_node *n, int32_t pi, bool counts, goblin_err why, const char *what) {
    for (int64_t i = n->n_leases - 1; i >= 0; i--)
        if (i < n->n_leases && n->leases[i].peer == pi) lease_failed(n, i, counts, why, what);
}

/* ---- sending ------------------------------------------------------------------- */

static int send_wire(goblin_node *n, nng_pipe pp, const goblin__wire_msg *m) {
    /* Tensors may be strided views of the job's matrices: gathered straight into
     * the message body (no separate packing buffer). */
    size_t len = 0;
    if (goblin__wire_encoded_size_strided(m, &len) != GOBLIN_OK) return NNG_EINVAL;
    nng_msg *msg;
    int rv = nng_msg_alloc(&msg, len);
    if (rv) return rv;
    size_t wrote = 0;
    if (goblin__wire_encode_into_strided(m, nng_msg_body(msg), len, &wrote) != GOBLIN_OK) {
        nng_msg_free(msg);
        return NNG_EINVAL;
    }
    nng_msg_set_pipe(msg, pp);
    if ((rv = nng_sendmsg(n->sock, msg, 0)) != 0) nng_msg_free(msg);
    return rv;
}

/* Take a slot of peer @p pi's pipe queue for TASK message @p mid. */
static void in_flight_add(peer *p, uint64_t mid) {
    if (p->in_flight < MAX_IN_FLIGHT) p->in_flight_msg[p->in_flight++] = mid;
}

static void lease_failed(goblin_node *n, int64_t li, bool counts, goblin_err why, const char *what);

/* Send the open batch (if it holds any TASK) and close it. If the send fails, its
 * leases end at once (not counted against the tasks: nothing reached the worker). */
static void batch_flush(goblin_node *n) {
    int32_t pi = n->bpeer;
    nng_msg *msg = n->bmsg;
    uint64_t bid = n->bid;
    n->bpeer = -1;
    n->bmsg = NULL;
    n->bcount = 0;
    n->bclosed = false;
    if (!msg) return;
    peer *p = &n->peers[pi];
    nng_msg_set_pipe(msg, p->pipe);
    int rv = nng_sendmsg(n->sock, msg, 0);
    if (rv == 0) return;
    nng_msg_free(msg);
    nlog(n, GOBLIN_LOG_WARN, "cannot send a batch of tasks to worker %llu: %s", (unsigned long long)p->session_id,
         nng_strerror(rv));
    for (int64_t i = n->n_leases - 1; i >= 0; i--)
        if (i < n->n_leases && n->leases[i].msg == bid && n->leases[i].peer == pi)
            lease_failed(n, i, false, GOBLIN_ECLOSED, "cannot send the task");
}

/* Send TASK @p m to peer @p pi: appended to the batch open for it when it is small,
 * @p batchable and the peer takes batches, else alone. *mid: the id of the message it went in.
 * NNG_EAGAIN: not now (a big task after small ones in this round: it waits for the
 * next one, since the batch and it would need two queue slots). */
static int batch_add(goblin_node *n, int32_t pi, const goblin__wire_msg *m, bool batchable, uint64_t *mid) {
    peer *p = &n->peers[pi];
    size_t len = 0;
    if (goblin__wire_encoded_size_strided(m, &len) != GOBLIN_OK) return NNG_EINVAL;
    bool open = n->bpeer == pi && !n->bclosed;
    if (open && batchable && len < BATCH_TASK_BYTES && n->bcount < BATCH_MAX) {
        size_t at = 0, cur = 0;
        int rv;
        if (!n->bmsg) {
            rv = nng_msg_alloc(&n->bmsg, len);
            if (rv) return rv;
            /* room for the rest of a full batch of tasks like this one */
            nng_msg_reserve(n->bmsg, (len + GOBLIN_WIRE_BATCH_ALIGN) * (size_t)(p->wanted < BATCH_MAX ? p->wanted : BATCH_MAX));
        } else {
            cur = nng_msg_len(n->bmsg);
            at = cur + (GOBLIN_WIRE_BATCH_ALIGN - cur % GOBLIN_WIRE_BATCH_ALIGN) % GOBLIN_WIRE_BATCH_ALIGN;
            if ((rv = nng_msg_realloc(n->bmsg, at + len)) != 0) return rv;
            memset((uint8_t *)nng_msg_body(n->bmsg) + cur, 0, at - cur);
        }
        size_t wrote = 0;
        if (goblin__wire_encode_into_strided(m, (uint8_t *)nng_msg_body(n->bmsg) + at, len, &wrote) != GOBLIN_OK) {
            if (at == 0) {
                nng_msg_free(n->bmsg);
                n->bmsg = NULL;
            } else {
                nng_msg_chop(n->bmsg, at + len - cur);
            }
            return NNG_EINVAL;
        }
        if (n->bcount++ == 0) in_flight_add(p, n->bid);
        *mid = n->bid;
        return 0;
    }
    if (open && n->bcount > 0) return NNG_EAGAIN;
    int rv = send_wire(n, p->pipe, m);
    if (rv) return rv;
    *mid = ++n->next_msg_id;
    in_flight_add(p, *mid);
    if (n->bpeer == pi) n->bclosed = true;
    return 0;
}

static void drop_peer(goblin_node *n, int32_t pi, const char *why) {
    peer *p = &n->peers[pi];
    nlog(n, GOBLIN_LOG_WARN, "dropping peer %u (session %llu): %s", (unsigned)p->pipe_id,
         (unsigned long long)p->session_id, why);
    n->st.peers_dropped++;
    p->connected = false;
    if (p->hello && p->counted) {
        n->st.workers_connected--;
        p->counted = false;
    }
    fail_peer_leases(n, pi, false, GOBLIN_ECLOSED, "worker dropped");
    nng_pipe_close(p->pipe);
}

static bool send_task(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, bool speculative,
                      const uint8_t *gbuf, size_t glen, goblin_tensor *in, uint32_t n_in, bool may_batch);
static bool issue_graph(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, bool speculative);

static double rand_u01(void);

/* REPLICATE graph jobs: whether task @p ti, first leased to peer @p pi, is run twice.
 * Drawn from the node's secret random source at the first lease, at the rate the
 * worker's trust gives (docs/verification.md); the replica lease then goes to another
 * worker at once, so both copies run side by side instead of one after the other. A
 * worker cannot tell whether its lease has a twin. */
static void decide_replication(goblin_job *j, int64_t ti, const peer *p) {
    task *t = &j->tasks[ti];
    if (j->kind != JOB_GRAPH || j->g->verify != GOBLIN_VERIFY_REPLICATE || t->rep != REP_UNDECIDED)
        return;
    double rate = 1.0 / (1.0 + (double)p->agreements / j->g->halflife);
    if (rate < j->g->min_rep) rate = j->g->min_rep;
    t->rep = rand_u01() < rate ? REP_TWICE : REP_SINGLE;
}

/* Send task @p ti of @p j to peer @p pi. */
static bool issue(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, bool speculative) {
    if (j->kind == JOB_GRAPH) return issue_graph(n, j, ti, pi, speculative);
    peer *p = &n->peers[pi];
    goblin__matmul_tile t;
    job_tile(j, ti, &t);
    uint64_t ida = panel_id(j, 0, ti), idb = panel_id(j, 1, ti);
    bool have_a = peer_has_panel(p, 0, ida), have_b = peer_has_panel(p, 1, idb);
    bool lent = false;
    if (p->shared && j->stok) {
        goblin_tensor va = view2(&j->a, t.row0, t.rows, t.k0, t.kn, j->esz);
        goblin_tensor vb = view2(&j->b, t.k0, t.kn, t.col0, t.cols, j->esz);
        lent = goblin__share_put(j->share, j->stok, ida, &va) == GOBLIN_OK &&
               goblin__share_put(j->share, j->stok, idb, &vb) == GOBLIN_OK;
        if (lent) have_a = have_b = true;
    }
    bool ok = false;
    if (!j->gser || j->gser_shape[0] != t.rows || j->gser_shape[1] != t.kn || j->gser_shape[2] != t.cols) {
        goblin_graph *g = NULL;
        uint8_t *gb = NULL;
        size_t gl = 0;
        goblin_err ge = goblin__matmul_graph(j->dt, t.rows, t.kn, t.cols, &g);
        if (!ge) ge = goblin_graph_serialize(g, &gb, &gl);
        goblin_graph_free(g);
        if (ge) return false;
        goblin_buffer_free(j->gser);
        j->gser = gb;
        j->gser_len = gl;
        j->gser_shape[0] = t.rows;
        j->gser_shape[1] = t.kn;
        j->gser_shape[2] = t.cols;
    }
    /* The panels go as strided views of A and B: send_wire gathers them straight
     * into the message body. */
    int64_t s0[2] = {0, 0};
    goblin_tensor in[3];
    if (have_a) goblin_tensor_init(&in[0], j->dt, 2, s0, NULL);
    else in[0] = view2(&j->a, t.row0, t.rows, t.k0, t.kn, j->esz);
    if (have_b) goblin_tensor_init(&in[1], j->dt, 2, s0, NULL);
    else in[1] = view2(&j->b, t.k0, t.kn, t.col0, t.cols, j->esz);
    /* The cache directory (docs/runtime.md): ids, then "left out" flags. */
    int64_t dir[4] = {(int64_t)ida, (int64_t)idb, have_a ? 1 : 0, have_b ? 1 : 0};
    int64_t sd[1] = {4};
    goblin_tensor_init(&in[2], GOBLIN_DTYPE_I64, 1, sd, dir);
    /* A TASK whose panels are lent is small whatever its work: it goes in a batch only
     * when the panels themselves would have been small (a batch runs to its end before
     * its results go back, and takes one worker all the tasks it holds). */
    bool may_batch = !lent || (uint64_t)(t.rows * t.kn + t.kn * t.cols) * j->esz < BATCH_TASK_BYTES;
    if (!send_task(n, j, ti, pi, speculative, j->gser, j->gser_len, in, 3, may_batch)) return false;
    if (lent) {
        n->st.panels_in_place += 2;
        return true;
    }
    if (have_a) n->st.panel_cache_hits++;
    if (have_b) n->st.panel_cache_hits++;
    peer_add_panel(p, 0, ida);
    peer_add_panel(p, 1, idb);
    ok = true;
    return ok;
}

/* Register a lease of task @p ti of @p j for peer @p pi and send the TASK. */
static bool send_task(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, bool speculative,
                      const uint8_t *gbuf, size_t glen, goblin_tensor *in, uint32_t n_in, bool may_batch) {
    peer *p = &n->peers[pi];
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_TASK);
    uint64_t lid = n->next_lease_id++;
    m.request_id = lid;
    m.body.task.task_id = lid;
    m.body.task.lease_ms = n->p.lease_ms;
    m.body.task.graph_len = glen;
    m.body.task.graph = (uint8_t *)gbuf;
    m.body.task.n_inputs = n_in;
    m.body.task.inputs = in;
    int64_t cap = n->cap_leases;
    if (!grow((void **)&n->leases, &cap, n->n_leases + 1, sizeof(lease))) return false;
    n->cap_leases = cap;
    uint64_t mid;
    /* Graph jobs verified by replication decide each task's replication from the
     * worker's trust when it is first leased: their tasks go one per message, so a
     * new worker is not handed a batch of leases before it has earned any trust. */
    bool batchable = may_batch && (j->kind == JOB_MATMUL || j->g->verify != GOBLIN_VERIFY_REPLICATE);
    int rv = batch_add(n, pi, &m, batchable, &mid);
    if (rv) {
        if (rv != NNG_EAGAIN)
            nlog(n, GOBLIN_LOG_WARN, "cannot send task to worker %llu: %s", (unsigned long long)p->session_id,
                 nng_strerror(rv));
        return false;
    }
    int64_t now = goblin__now_ms();
    n->leases[n->n_leases++] = (lease){.id = lid, .msg = mid, .job = j, .task = ti, .peer = pi,
                                       .deadline_ms = now + n->p.lease_ms};
    task *tk = &j->tasks[ti];
    tk->state = T_LEASED;
    tk->n_leases++;
    if (!speculative) tk->leased_at_ms = now;
    p->wanted--;
    p->issued++;
    n->st.tasks_issued++;
    if (speculative) n->st.tasks_speculative++;
    if (j->kind == JOB_GRAPH && tk->holder) n->st.replicas_issued++;
    decide_replication(j, ti, p);
    return true;
}

static bool task_fits(const goblin_job *j, int64_t ti, const peer *p) {
    if (j->kind == JOB_GRAPH) return gvar(j, ti)->bytes <= p->memory;
    goblin__matmul_tile t;
    uint64_t bytes = 0;
    job_tile(j, ti, &t);
    return goblin__matmul_tile_bytes(&t, j->dt, &bytes) == GOBLIN_OK && bytes <= p->memory;
}

static bool lease_held_by(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi) {
    for (int64_t i = 0; i < n->n_leases; i++)
        if (n->leases[i].job == j && n->leases[i].task == ti && n->leases[i].peer == pi && !n->leases[i].moot)
            return true;
    return false;
}

/* Pick a task for peer @p pi: a pending task whose panels it holds, else the first
 * pending one; with nothing pending, a straggler to duplicate. */
static bool assign_one(goblin_node *n, int32_t pi) {
    peer *p = &n->peers[pi];
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running) continue;
        int64_t first = -1, best = -1, seen = 0;
        while (j->scan_from < j->ntasks && j->tasks[j->scan_from].state != T_PENDING) j->scan_from++;
        for (int64_t i = j->scan_from; i < j->ntasks && seen < SCAN_LIMIT; i++) {
            if (j->tasks[i].state != T_PENDING) continue;
            seen++;
            if (!task_fits(j, i, p)) continue;
            if (j->kind == JOB_GRAPH) {
                if (j->tasks[i].holder == pi + 1) continue; /* a replica goes elsewhere */
                first = i;
                break;
            }
            if (first < 0) first = i;
            if (peer_has_panel(p, 0, panel_id(j, 0, i)) || peer_has_panel(p, 1, panel_id(j, 1, i))) {
                best = i;
                break;
            }
        }
        if (best < 0) best = first;
        if (best >= 0) return issue(n, j, best, pi, false);
    }
    /* Nothing pending: the twin lease of a task that is to be replicated, on a worker
     * other than the one running it. */
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running || j->kind != JOB_GRAPH || j->g->verify != GOBLIN_VERIFY_REPLICATE) continue;
        while (j->rep_from < j->ntasks) {
            const task *t = &j->tasks[j->rep_from];
            if (t->state == T_DONE || t->rep == REP_SINGLE || (t->rep == REP_TWICE && t->n_leases >= 2)) {
                j->rep_from++;
                continue;
            }
            break;
        }
        int64_t seen = 0;
        for (int64_t i = j->rep_from; i < j->ntasks && seen < SCAN_LIMIT; i++) {
            task *t = &j->tasks[i];
            if (t->state == T_PENDING && t->rep == REP_UNDECIDED) break; /* not leased yet from here on */
            seen++;
            if (t->state != T_LEASED || t->rep != REP_TWICE || t->n_leases != 1 || t->holder) continue;
            if (lease_held_by(n, j, i, pi) || !task_fits(j, i, p)) continue;
            int64_t at = t->leased_at_ms;
            if (!issue(n, j, i, pi, false)) return false;
            t->leased_at_ms = at;
            n->st.replicas_issued++;
            return true;
        }
    }
    if (!n->p.speculate) return false;
    int64_t now = goblin__now_ms();
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running || j->scan_from < j->ntasks) continue; /* not near the end yet */
        /* The straggler scan is O(tasks): a scan that found nothing says when the
         * next straggler can appear at the earliest, and until then no worker scans
         * (with many workers idle at a job's end, every message used to scan). */
        if (now < j->spec_gate_ms) continue;
        int64_t avg = j->n_task_ms ? j->sum_task_ms / j->n_task_ms : 100;
        int64_t thresh = 2 * avg + 50;
        int64_t gate = now + thresh;
        for (int64_t i = 0; i < j->ntasks; i++) {
            task *t = &j->tasks[i];
            if (t->state != T_LEASED || t->n_leases != 1) continue;
            if (now - t->leased_at_ms < thresh) {
                if (t->leased_at_ms + thresh < gate) gate = t->leased_at_ms + thresh;
                continue;
            }
            if (lease_held_by(n, j, i, pi) || !task_fits(j, i, p) || t->holder == pi + 1) {
                if (now + 1 < gate) gate = now + 1; /* another worker may take it */
                continue;
            }
            return issue(n, j, i, pi, true);
        }
        /* The average only falls by so much in a few ms: look again at least that often. */
        j->spec_gate_ms = gate < now + 20 ? gate : now + 20;
    }
    return false;
}

static void resolve_orphans(goblin_node *n);

static bool peer_can_take(const peer *p) {
    return p->connected && p->hello && !p->quarantined && p->wanted > 0 && !p->close_at_ms &&
           p->in_flight < MAX_IN_FLIGHT;
}

static void mark_ready(goblin_node *n, int32_t pi) {
    if (pi < 0 || pi >= n->n_peers || n->peers[pi].ready) return;
    int64_t cap = n->cap_ready;
    if (!grow((void **)&n->ready, &cap, n->n_ready + 1, sizeof(int32_t))) return; /* next tick */
    n->cap_ready = (int32_t)cap;
    n->ready[n->n_ready++] = pi;
    n->peers[pi].ready = true;
}

/* Lease tasks to the peers that can take them, round by round (one task per peer per
 * round). @p full: every peer is looked at (housekeeping ticks), else only the ready
 * list. */
static void schedule(goblin_node *n, bool full) {
    if (full) {
        resolve_orphans(n);
        for (int32_t i = 0; i < n->n_peers; i++)
            if (peer_can_take(&n->peers[i])) mark_ready(n, i);
    }
    bool progress = true;
    while (progress) {
        progress = false;
        for (int32_t k = 0; k < n->n_ready; k++) {
            int32_t i = n->ready[k];
            if (!peer_can_take(&n->peers[i])) {
                n->peers[i].ready = false;
                n->ready[k--] = n->ready[--n->n_ready];
                continue;
            }
            if (!n->peers[i].batch) {
                if (assign_one(n, i)) progress = true;
                continue;
            }
            /* One message per peer per round: up to BATCH_MAX small tasks. */
            peer *p = &n->peers[i];
            n->bpeer = i;
            n->bid = ++n->next_msg_id;
            for (int32_t c = 0; c < BATCH_MAX && p->wanted > 0 && !n->bclosed && n->bcount < BATCH_MAX; c++) {
                if (!assign_one(n, i)) break;
                progress = true;
            }
            batch_flush(n);
        }
    }
}

/* ---- accepting results ------------------------------------------------------------ */

static void job_progress_cb(goblin_job *j) {
    int64_t d;
    pthread_mutex_lock(&j->mu);
    d = j->done;
    pthread_mutex_unlock(&j->mu);
    if (j->jp.progress) j->jp.progress(j->jp.progress_user, d, j->ntasks);
}

static void task_done(goblin_node *n, goblin_job *j, int64_t ti);
static goblin_err graph_combine(goblin_job *j);

/* Task @p ti has a result from peer @p by (-1: the node) and goes to @p state (T_DONE,
 * or T_HELD for its row panel's check): its other leases, if any, are moot. */
static void task_settle(goblin_node *n, goblin_job *j, int64_t ti, uint8_t state, int32_t by) {
    task *t = &j->tasks[ti];
    t->state = state;
    t->accepted_peer = by;
    /* n_leases counts the task's live leases, the one answered included (already
     * removed by the caller, or by recheck/escalation paths that hold none): only a
     * task with another live lease (a speculative duplicate) has any to mark. */
    if (t->n_leases > 1 || by < 0)
        for (int64_t i = 0; i < n->n_leases; i++)
            if (n->leases[i].job == j && n->leases[i].task == ti) n->leases[i].moot = true;
    t->n_leases = 0;
}

/* Task @p ti's result (contiguous rows x cols at @p data) is final. */
static void task_accept(goblin_node *n, goblin_job *j, int64_t ti, const void *data, int32_t by) {
    task *t = &j->tasks[ti];
    goblin__matmul_tile tl;
    job_tile(j, ti, &tl);
    task_settle(n, j, ti, T_DONE, by);
    int64_t s = j->info.k_slices;
    size_t bytes = (size_t)(tl.rows * tl.cols) * j->esz;
    if (s == 1) {
        goblin_tensor v = view2(&j->c, tl.row0, tl.rows, tl.col0, tl.cols, j->esz);
        unpack(&v, data, j->esz);
    } else {
        goblin__free(t->partial);
        t->partial = goblin__alloc(bytes);
        if (!t->partial) {
            job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory holding a split-K partial");
            return;
        }
        memcpy(t->partial, data, bytes);
        int64_t tile = ti / s;
        if (++j->tile_done[tile] == s) {
            /* All slices are in: sum them in slice order, so the result does not
             * depend on which worker finished first. */
            int64_t ne = tl.rows * tl.cols;
            void *sum = goblin__alloc(bytes);
            if (!sum) {
                job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory summing split-K partials");
                return;
            }
            for (int64_t q = 0; q < s; q++) {
                const void *src = j->tasks[tile * s + q].partial;
                if (j->dt == GOBLIN_DTYPE_F32) {
                    float *d = sum;
                    const float *x = src;
                    for (int64_t e = 0; e < ne; e++) d[e] = q ? d[e] + x[e] : x[e];
                } else {
                    double *d = sum;
                    const double *x = src;
                    for (int64_t e = 0; e < ne; e++) d[e] = q ? d[e] + x[e] : x[e];
                }
            }
            goblin_tensor v = view2(&j->c, tl.row0, tl.rows, tl.col0, tl.cols, j->esz);
            unpack(&v, sum, j->esz);
            goblin__free(sum);
            for (int64_t q = 0; q < s; q++) {
                goblin__free(j->tasks[tile * s + q].partial);
                j->tasks[tile * s + q].partial = NULL;
            }
        }
    }
    task_done(n, j, ti);
}

/* Common end of an accepted task: counters, progress, the job's end. */
static void task_done(goblin_node *n, goblin_job *j, int64_t ti) {
    task *t = &j->tasks[ti];
    n->st.tasks_completed++;
    int64_t now = goblin__now_ms();
    if (t->leased_at_ms) {
        j->sum_task_ms += now - t->leased_at_ms;
        j->n_task_ms++;
    }
    pthread_mutex_lock(&j->mu);
    int64_t d = ++j->done;
    pthread_mutex_unlock(&j->mu);
    job_progress_cb(j);
    if (d == j->ntasks) {
        if (j->kind == JOB_GRAPH) {
            goblin_err e = graph_combine(j);
            if (e) {
                job_finish(j, GOBLIN_JOB_FAILED, e, "combining the chunks' outputs failed: %s",
                           goblin_strerror(e));
                return;
            }
        }
        nlog(n, GOBLIN_LOG_INFO, "job %llu done: %lld tasks", (unsigned long long)j->id, (long long)j->ntasks);
        job_finish(j, GOBLIN_JOB_DONE, GOBLIN_OK, NULL);
    }
}

/* Memory a job's panels objects may take before its tiles are checked one by one. */
#define FVP_MAX_BYTES ((double)(256u << 20))

/* Drop the job's panels objects: the next check draws new vectors. */
static void job_drop_panels(goblin_job *j) {
    j->prep_from = 0;
    j->prep_key = -1;
    if (!j->fvp) return;
    for (int64_t q = 0; q < j->info.k_slices; q++) goblin_freivalds_panels_free(j->fvp[q]);
    goblin__free(j->fvp);
    j->fvp = NULL;
}

/* The panels object of K-slice @p q of matmul job @p j, built at its first use (one
 * pass over that slice of B, with vectors drawn from the node's secret source); NULL
 * when the job's tiles are checked one by one (too much memory, or building failed). */
static goblin_freivalds_panels *job_panels(goblin_node *n, goblin_job *j, int64_t q) {
    if (j->fvp_off || j->kind != JOB_MATMUL) return NULL;
    int64_t s = j->info.k_slices, gc = j->info.grid_cols;
    if (j->rowcheck) gc = 1; /* one panel: all of N */
    if (!j->fvp) {
        /* B's sums per column panel and K-slice, and A's per row and column panel */
        double bytes = 8.0 * (n->p.freivalds_vectors + 2) * (double)gc *
                       ((double)j->info.k + (double)s * (double)j->info.m) + 8.0 * (double)j->info.n;
        if (bytes > FVP_MAX_BYTES || !(j->fvp = goblin__calloc((size_t)s, sizeof *j->fvp))) {
            j->fvp_off = true;
            return NULL;
        }
    }
    if (!j->fvp[q]) {
        int64_t *cb = goblin__alloc((size_t)(gc + 1) * sizeof(int64_t));
        if (!cb) return NULL;
        goblin__matmul_tile t;
        for (int64_t c = 0; c < gc; c++) {
            job_tile(j, c * s + q, &t); /* tiles of grid row 0, slice q */
            cb[c] = t.col0;
        }
        if (j->rowcheck) cb[0] = 0;
        cb[gc] = j->info.n;
        job_tile(j, q, &t);
        goblin_freivalds_params fp;
        goblin_freivalds_params_default(&fp);
        fp.seed = goblin__secret_u64();
        fp.vectors = n->p.freivalds_vectors;
        fp.threads = n->p.verify_threads;
        fp.k0 = t.k0;
        fp.kn = t.kn;
        goblin_err e = goblin_freivalds_panels_new(&j->a, &j->b, (int32_t)gc, cb, &fp, &j->fvp[q]);
        goblin__free(cb);
        if (e) {
            nlog(n, GOBLIN_LOG_WARN, "job %llu: checking tiles one by one (%s)", (unsigned long long)j->id,
                 goblin_strerror(e));
            job_drop_panels(j);
            j->fvp_off = true;
            return NULL;
        }
    }
    return j->fvp[q];
}

/* Freivalds-check @p c as task @p ti (or, with @p whole_tile, the whole C tile over
 * all of K). */
static goblin_err check_tile_impl(goblin_node *n, goblin_job *j, int64_t ti, bool whole_tile,
                             const goblin_tensor *c, goblin_verdict *v) {
    goblin__matmul_tile t;
    job_tile(j, ti, &t);
    if (!whole_tile) {
        int64_t s = j->info.k_slices;
        goblin_freivalds_panels *fp = j->rowcheck ? NULL : job_panels(n, j, ti % s);
        if (fp) return goblin_freivalds_panels_check(fp, t.row0, t.rows, (int32_t)((ti / s) % j->info.grid_cols), c, v);
    }
    if (whole_tile) {
        t.k0 = 0;
        t.kn = j->info.k;
    }
    goblin_tensor a = view2(&j->a, t.row0, t.rows, t.k0, t.kn, j->esz);
    goblin_tensor b = view2(&j->b, t.k0, t.kn, t.col0, t.cols, j->esz);
    goblin_freivalds_params fp;
    goblin_freivalds_params_default(&fp);
    fp.seed = goblin__secret_u64();
    fp.vectors = n->p.freivalds_vectors;
    fp.threads = n->p.verify_threads;
    return goblin_verify_matmul(&a, &b, c, &fp, v);
}

/* check_tile, with its time added to the node's verification clock (goblin_node_stats.verify_ns). */
static goblin_err check_tile(goblin_node *n, goblin_job *j, int64_t ti, bool whole_tile,
                             const goblin_tensor *c, goblin_verdict *v) {
    vclock t0 = verify_begin();
    goblin_err r = check_tile_impl(n, j, ti, whole_tile, c, v);
    verify_end(n, t0);
    return r;
}

/* Prepare the Freivalds checks of leased matmul tasks before their results arrive: the
 * pass over B of their K-slice and over their row panel of A. Done lazily at the first
 * result, the last row panel's pass ran after the last worker had finished, on the
 * job's critical path; done here, while the workers compute, the last result costs
 * only the pass over its own tile. At most one pass per call (a few ms for a 1024-row
 * panel of a 4096 product), so that messages are not kept waiting; the node loop calls
 * this once per turn. The vectors are drawn when a panels object is made, as before:
 * after A and B are fixed, and never seen by a worker. */
static void spot_prepare(goblin_node *n);

static void prepare_ahead(goblin_node *n) {
    if (n->p.verify != GOBLIN_VERIFY_FREIVALDS) return;
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running || j->kind != JOB_MATMUL || j->fvp_off) continue;
        int64_t s = j->info.k_slices, gc = j->info.grid_cols;
        while (j->prep_from < j->ntasks && j->tasks[j->prep_from].state != T_PENDING) {
            int64_t ti = j->prep_from++;
            if (j->tasks[ti].state == T_DONE || j->tasks[ti].state == T_HELD) continue;
            int64_t key = (ti / (s * gc)) * s + ti % s; /* (grid row, K-slice) */
            if (key == j->prep_key) continue;
            j->prep_key = key;
            vclock t0 = verify_begin();
            goblin_freivalds_panels *fp = job_panels(n, j, ti % s);
            if (fp) {
                goblin__matmul_tile t;
                job_tile(j, ti, &t);
                goblin_err e = goblin_freivalds_panels_prepare(fp, t.row0, t.rows);
                if (e) nlog(n, GOBLIN_LOG_DEBUG, "job %llu: preparing a check: %s", (unsigned long long)j->id,
                            goblin_strerror(e)); /* the check prepares it again, or fails there */
            }
            verify_end(n, t0);
            return;
        }
    }
}

static void quarantine(goblin_node *n, int32_t pi);

/* ---- row panels judged at once (rowcheck jobs) ---------------------------------- *
 *
 * A job of one K-slice and several column panels checks a row panel's tiles together:
 * its panels object has one panel spanning all N columns, so the pass over a row panel
 * of A computes one product per vector instead of one per column panel, and the row
 * panel of C, once all its tiles are in, is judged against it as one tile of width N
 * (Freivalds for C_i = A_i B; the vectors' entries on different tiles' columns are
 * independent, so a wrong tile is caught as it would be alone, with the tolerance of
 * width N; docs/verification.md). A result waits in C as T_HELD. A row panel that is
 * not accepted at once has its held tiles judged one by one, with fresh vectors
 * (goblin_verify_matmul), so that the wrong ones, and only they, are rejected. */

static void row_panel_check(goblin_node *n, goblin_job *j, int64_t gr);

/* Task @p ti's result (contiguous rows x cols at @p data, from peer @p by) goes into C
 * to be judged with its row panel. */
static void task_hold(goblin_node *n, goblin_job *j, int64_t ti, const void *data, int32_t by) {
    task *t = &j->tasks[ti];
    goblin__matmul_tile tl;
    job_tile(j, ti, &tl);
    task_settle(n, j, ti, T_HELD, by);
    goblin_tensor v = view2(&j->c, tl.row0, tl.rows, tl.col0, tl.cols, j->esz);
    unpack(&v, data, j->esz);
    if (t->leased_at_ms) { /* the task's time, for straggler detection (task_done) */
        j->sum_task_ms += goblin__now_ms() - t->leased_at_ms;
        j->n_task_ms++;
        t->leased_at_ms = 0;
    }
    int64_t gc = j->info.grid_cols, gr = ti / gc;
    for (int64_t c = 0; c < gc; c++) {
        uint8_t st = j->tasks[gr * gc + c].state;
        if (st != T_HELD && st != T_DONE) return;
    }
    row_panel_check(n, j, gr);
}

/* Held task @p ti passed: count it for its worker and complete it. */
static void accept_held(goblin_node *n, goblin_job *j, int64_t ti) {
    task *t = &j->tasks[ti];
    t->state = T_DONE;
    if (t->accepted_peer >= 0 && t->accepted_peer < n->n_peers) n->peers[t->accepted_peer].accepted++;
    n->st.results_accepted++;
    task_done(n, j, ti);
}

/* Held task @p ti failed verdict @p v: counted as a rejected result, its worker is
 * quarantined and the task goes back to be leased again (what lease_failed does for a
 * result rejected as it arrives). */
static void reject_held(goblin_node *n, goblin_job *j, int64_t ti, const goblin_verdict *v) {
    task *t = &j->tasks[ti];
    int32_t pi = t->accepted_peer;
    peer *p = pi >= 0 && pi < n->n_peers ? &n->peers[pi] : NULL;
    n->st.results_rejected++;
    n->st.rejected_by_reason[v->reason < GOBLIN_VERIFY_REASON_COUNT ? v->reason : 0]++;
    nlog(n, GOBLIN_LOG_WARN, "rejected result of task %lld from worker %llu: %s (worst ratio %.3g)", (long long)ti,
         p ? (unsigned long long)p->session_id : 0ull, goblin_verify_reason_name(v->reason), v->worst_ratio);
    /* The worker may learn that it was rejected: the job's vectors are drawn anew. */
    job_drop_panels(j);
    t->state = T_PENDING;
    t->accepted_peer = -1;
    if (ti < j->scan_from) j->scan_from = ti;
    n->st.tasks_reissued++;
    t->attempts++;
    if (p) {
        p->rejected++;
        p->failed++;
    }
    if (t->attempts > n->p.max_retries) {
        goblin__matmul_tile tl;
        job_tile(j, ti, &tl);
        nlog(n, GOBLIN_LOG_ERROR, "job %llu failed: task %lld failed %d times (last: result rejected)",
             (unsigned long long)j->id, (long long)ti, (int)t->attempts);
        job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ELIMIT,
                   "task %lld (rows %lld..%lld, cols %lld..%lld) failed %d times; last failure: result rejected "
                   "(%s)",
                   (long long)ti, (long long)tl.row0, (long long)(tl.row0 + tl.rows), (long long)tl.col0,
                   (long long)(tl.col0 + tl.cols), (int)t->attempts, goblin_verify_reason_name(v->reason));
    }
    if (p) quarantine(n, pi);
}

/* Peer @p pi was quarantined: its results still waiting for their row panel's check
 * are dropped, unjudged, like its later results and its graph results waiting for a
 * replica (drop_held): the tasks are leased again, and their rows of C overwritten. */
static void drop_held_tiles(goblin_node *n, int32_t pi) {
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running || j->kind != JOB_MATMUL || !j->rowcheck) continue;
        for (int64_t i = 0; i < j->ntasks; i++) {
            task *t = &j->tasks[i];
            if (t->state != T_HELD || t->accepted_peer != pi) continue;
            t->state = T_PENDING;
            t->accepted_peer = -1;
            if (i < j->scan_from) j->scan_from = i;
            n->st.tasks_reissued++;
        }
    }
}

/* Judge held task @p ti alone (its tile in C, fresh vectors). */
static void judge_held_alone(goblin_node *n, goblin_job *j, int64_t ti) {
    goblin__matmul_tile tl;
    job_tile(j, ti, &tl);
    goblin_tensor cv = view2(&j->c, tl.row0, tl.rows, tl.col0, tl.cols, j->esz);
    goblin_verdict v;
    goblin_err e = check_tile(n, j, ti, false, &cv, &v);
    if (e) {
        nlog(n, GOBLIN_LOG_ERROR, "cannot verify task: %s", goblin_strerror(e));
        v.kind = GOBLIN_VERDICT_ESCALATE;
    }
    if (v.kind == GOBLIN_VERDICT_ACCEPT) {
        accept_held(n, j, ti);
    } else if (v.kind == GOBLIN_VERDICT_ESCALATE) {
        /* Inconclusive: recompute on the node and keep the node's tile. */
        n->st.results_escalated++;
        void *mine = goblin__alloc((size_t)(tl.rows * tl.cols) * j->esz);
        e = mine ? node_compute(n, j, ti, mine) : GOBLIN_ENOMEM;
        if (e) job_finish(j, GOBLIN_JOB_FAILED, e, "recomputing an escalated task failed: %s", goblin_strerror(e));
        else task_accept(n, j, ti, mine, -1);
        goblin__free(mine);
    } else {
        reject_held(n, j, ti, &v);
    }
}

/* All tiles of grid row @p gr are in C: judge them together. */
static void row_panel_check(goblin_node *n, goblin_job *j, int64_t gr) {
    int64_t gc = j->info.grid_cols;
    goblin__matmul_tile tl;
    job_tile(j, gr * gc, &tl);
    goblin_verdict v;
    memset(&v, 0, sizeof v);
    v.kind = GOBLIN_VERDICT_ESCALATE;
    vclock t0 = verify_begin();
    goblin_freivalds_panels *fp = job_panels(n, j, 0);
    goblin_err e = GOBLIN_ENOTSUP;
    if (fp) {
        goblin_tensor cv = view2(&j->c, tl.row0, tl.rows, 0, j->info.n, j->esz);
        e = goblin_freivalds_panels_check(fp, tl.row0, tl.rows, 0, &cv, &v);
        n->st.freivalds_row_panels++;
    }
    verify_end(n, t0);
    if (e == GOBLIN_OK && v.kind == GOBLIN_VERDICT_ACCEPT) {
        for (int64_t c = 0; c < gc && j->running; c++)
            if (j->tasks[gr * gc + c].state == T_HELD) accept_held(n, j, gr * gc + c);
        return;
    }
    if (fp) {
        n->st.freivalds_row_fallbacks++;
        nlog(n, GOBLIN_LOG_INFO, "job %llu: rows %lld..%lld not accepted together (%s): judging their tiles one by one",
             (unsigned long long)j->id, (long long)tl.row0, (long long)(tl.row0 + tl.rows),
             e ? goblin_strerror(e) : goblin_verify_reason_name(v.reason));
    }
    /* A rejection quarantines a worker, which judges its other held tiles at once
     * (recheck_peer): those are no longer held when the loop reaches them. */
    for (int64_t c = 0; c < gc && j->running; c++)
        if (j->tasks[gr * gc + c].state == T_HELD) judge_held_alone(n, j, gr * gc + c);
}

static void handle_graph_result(goblin_node *n, int32_t pi, int64_t li, goblin__wire_result *r);

/* Judge a RESULT for lease @p li. */
static void handle_result(goblin_node *n, int32_t pi, goblin__wire_result *r) {
    int64_t li = find_lease(n, r->task_id);
    if (li < 0 || n->leases[li].peer != pi) {
        n->st.results_late++;
        return;
    }
    lease L = n->leases[li];
    if (L.moot) {
        n->st.results_duplicate++;
        remove_lease(n, li);
        lease_msg_done(n, &L);
        return;
    }
    goblin_job *j = L.job;
    if (j->kind == JOB_GRAPH) {
        handle_graph_result(n, pi, li, r);
        return;
    }
    goblin__matmul_tile t;
    job_tile(j, L.task, &t);
    goblin_verdict v;
    memset(&v, 0, sizeof v);
    v.kind = GOBLIN_VERDICT_REJECT;
    v.reason = GOBLIN_VERIFY_SHAPE;
    const goblin_tensor *c = r->n_outputs == 1 ? &r->outputs[0] : NULL;
    void *mine = NULL;
    if (c) {
        if (n->p.verify == GOBLIN_VERIFY_UNSAFE_NONE) {
            bool shape_ok = c->dtype == j->dt && c->rank == 2 && c->shape[0] == t.rows && c->shape[1] == t.cols;
            v.kind = shape_ok ? GOBLIN_VERDICT_ACCEPT : GOBLIN_VERDICT_REJECT;
            v.reason = shape_ok ? GOBLIN_VERIFY_OK : GOBLIN_VERIFY_SHAPE;
        } else if (n->p.verify == GOBLIN_VERIFY_RECOMPUTE) {
            mine = goblin__alloc((size_t)(t.rows * t.cols) * j->esz);
            goblin_err e = mine ? node_compute(n, j, L.task, mine) : GOBLIN_ENOMEM;
            if (e == GOBLIN_OK) {
                goblin_tensor m;
                int64_t shp[2] = {t.rows, t.cols};
                goblin_tensor_init(&m, j->dt, 2, shp, mine);
                e = goblin_verify_compare(GOBLIN_OP_MATMUL, j->dt, t.kn, &m, c, &v);
                if (e == GOBLIN_OK && v.kind == GOBLIN_VERDICT_ESCALATE) {
                    /* Decide with a rigorous check rather than trusting either side. */
                    e = check_tile(n, j, L.task, false, c, &v);
                }
            }
            if (e) {
                nlog(n, GOBLIN_LOG_ERROR, "cannot recompute task: %s", goblin_strerror(e));
                v.kind = GOBLIN_VERDICT_ESCALATE;
            }
        } else if (j->rowcheck) {
            /* Kept in C and judged with its row panel (row_panel_check); a result of the
             * wrong type or shape is rejected now, as the check would. */
            bool dt_ok = c->dtype == j->dt;
            bool shape_ok = c->rank == 2 && c->shape[0] == t.rows && c->shape[1] == t.cols &&
                            (c->data || t.rows * t.cols == 0);
            if (dt_ok && shape_ok) {
                remove_lease(n, li);
                lease_msg_done(n, &L);
                task_hold(n, j, L.task, c->data, pi);
                return;
            }
            v.reason = dt_ok ? GOBLIN_VERIFY_SHAPE : GOBLIN_VERIFY_DTYPE;
        } else {
            goblin_err e = check_tile(n, j, L.task, false, c, &v);
            if (e) {
                nlog(n, GOBLIN_LOG_ERROR, "cannot verify task: %s", goblin_strerror(e));
                v.kind = GOBLIN_VERDICT_ESCALATE;
            }
        }
    }
    peer *p = &n->peers[pi];
    if (v.kind == GOBLIN_VERDICT_ACCEPT) {
        remove_lease(n, li);
        lease_msg_done(n, &L);
        p->accepted++;
        n->st.results_accepted++;
        task_accept(n, j, L.task, c->data, pi);
    } else if (v.kind == GOBLIN_VERDICT_ESCALATE) {
        /* Inconclusive: recompute on the node and keep the node's tile. */
        remove_lease(n, li);
        lease_msg_done(n, &L);
        n->st.results_escalated++;
        if (!mine) mine = goblin__alloc((size_t)(t.rows * t.cols) * j->esz);
        goblin_err e = mine ? node_compute(n, j, L.task, mine) : GOBLIN_ENOMEM;
        if (e) {
            job_finish(j, GOBLIN_JOB_FAILED, e, "recomputing an escalated task failed: %s", goblin_strerror(e));
        } else {
            task_accept(n, j, L.task, mine, -1);
        }
    } else {
        n->st.results_rejected++;
        n->st.rejected_by_reason[v.reason < GOBLIN_VERIFY_REASON_COUNT ? v.reason : 0]++;
        p->rejected++;
        nlog(n, GOBLIN_LOG_WARN,
             "rejected result of task %lld from worker %llu: %s (worst ratio %.3g)",
             (long long)L.task, (unsigned long long)p->session_id, goblin_verify_reason_name(v.reason),
             v.worst_ratio);
        char why[96];
        snprintf(why, sizeof why, "result rejected (%s)", goblin_verify_reason_name(v.reason));
        /* The rejected worker learned one bit about the job's vectors: draw new ones. */
        job_drop_panels(j);
        lease_failed(n, li, true, GOBLIN_EVERIFY, why);
        quarantine(n, pi);
    }
    goblin__free(mine);
}

static void recheck_graph(goblin_node *n, goblin_job *j, int32_t pi);

/* Re-verify what peer @p pi had accepted in running jobs; recompute what fails. */
static void recheck_peer(goblin_node *n, int32_t pi) {
    for (int32_t k = 0; k < n->n_jobs; k++) {
        goblin_job *j = n->jobs[k];
        if (!j->running) continue;
        if (j->kind == JOB_GRAPH) {
            recheck_graph(n, j, pi);
            continue;
        }
        int64_t s = j->info.k_slices;
        for (int64_t i = 0; i < j->ntasks && j->running; i++) {
            task *t = &j->tasks[i];
            if (t->state != T_DONE || t->accepted_peer != pi) continue;
            goblin__matmul_tile tl;
            job_tile(j, i, &tl);
            goblin_verdict v;
            goblin_err e;
            bool whole = false;
            n->st.rechecked++;
            if (s == 1 || t->partial) {
                goblin_tensor c;
                if (s == 1) {
                    c = view2(&j->c, tl.row0, tl.rows, tl.col0, tl.cols, j->esz);
                } else {
                    int64_t shp[2] = {tl.rows, tl.cols};
                    goblin_tensor_init(&c, j->dt, 2, shp, t->partial);
                }
                e = check_tile(n, j, i, false, &c, &v);
            } else {
                /* Already summed into C: check the whole tile over all of K. */
                goblin_tensor c = view2(&j->c, tl.row0, tl.rows, tl.col0, tl.cols, j->esz);
                e = check_tile(n, j, i, true, &c, &v);
                whole = true;
            }
            if (e == GOBLIN_OK && v.kind == GOBLIN_VERDICT_ACCEPT) continue;
            n->st.recheck_failed++;
            nlog(n, GOBLIN_LOG_WARN, "recheck of task %lld from quarantined worker failed: recomputing",
                 (long long)i);
            int64_t lo = whole ? (i / s) * s : i, hi = whole ? lo + s : i + 1;
            for (int64_t q = lo; q < hi; q++) {
                task *u = &j->tasks[q];
                if (u->state != T_DONE) continue;
                u->state = T_PENDING;
                goblin__free(u->partial);
                u->partial = NULL;
                if (s > 1) j->tile_done[q / s]--;
                if (q < j->scan_from) j->scan_from = q;
                pthread_mutex_lock(&j->mu);
                j->done--;
                pthread_mutex_unlock(&j->mu);
                n->st.tasks_completed--;
            }
        }
    }
}

static void drop_held(goblin_node *n, int32_t pi);

static void quarantine(goblin_node *n, int32_t pi) {
    peer *p = &n->peers[pi];
    if (p->quarantined) return;
    p->quarantined = true;
    n->st.workers_quarantined++;
    nlog(n, GOBLIN_LOG_WARN, "worker %llu quarantined: it returned a wrong result; no more tasks, "
         "its earlier results are rechecked", (unsigned long long)p->session_id);
    fail_peer_leases(n, pi, false, GOBLIN_EVERIFY, "worker quarantined");
    drop_held(n, pi);
    drop_held_tiles(n, pi);
    recheck_peer(n, pi);
}

/* ---- messages ------------------------------------------------------------------- */

static void refuse(goblin_node *n, int32_t pi, goblin_err why, const char *text) {
    peer *p = &n->peers[pi];
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_REFUSE);
    m.body.refuse.reason = why;
    m.body.refuse.message = text;
    n->st.workers_refused++;
    nlog(n, GOBLIN_LOG_WARN, "refused worker on pipe %u: %s", (unsigned)p->pipe_id, text);
    send_wire(n, p->pipe, &m);
    p->close_at_ms = goblin__now_ms() + REFUSE_LINGER_MS;
}

static bool token_ok(const goblin_node *n, const goblin__wire_hello *h) {
    if (!n->p.token_len && !n->p.token_file) return true;
    if (n->p.token_len) {
        /* Constant time in the token's content. */
        uint8_t diff = (uint8_t)(h->token_len != n->p.token_len);
        for (uint32_t i = 0; i < n->p.token_len; i++)
            diff |= (uint8_t)(n->p.join_token[i] ^ (i < h->token_len ? h->token[i] : 0));
        if (diff == 0) return true;
    }
    if (n->p.token_file && h->token_len > 0 && h->token_len <= GOBLIN_TOKEN_MAX_BYTES &&
        !memchr(h->token, 0, h->token_len)) {
        char presented[GOBLIN_TOKEN_MAX_BYTES + 1];
        memcpy(presented, h->token, h->token_len);
        presented[h->token_len] = 0;
        char why[256] = "";
        goblin_err e = goblin__token_check_file(n->p.token_file, presented, why, sizeof why);
        if (e == GOBLIN_OK) return true;
        if (e != GOBLIN_EAUTH)
            nlog((goblin_node *)n, GOBLIN_LOG_ERROR, "token file %s: %s (%s)", n->p.token_file,
                 goblin_err_name(e), why);
    }
    return false;
}

static void handle_one(goblin_node *n, int32_t pi, const uint8_t *buf, size_t len);

/* One nng message from a worker: one goblin message, or a batch of them (protocol
 * 1.1), handled in order. */
static void handle_msg(goblin_node *n, nng_msg *msg) {
    nng_pipe pp = nng_msg_get_pipe(msg);
    uint32_t pid = nng_pipe_id(pp);
    int32_t pi = find_peer(n, pid);
    if (pi < 0) {
        int64_t cap = n->cap_peers;
        if (!grow((void **)&n->peers, &cap, n->n_peers + 1, sizeof(peer))) return;
        n->cap_peers = (int32_t)cap;
        pi = n->n_peers++;
        memset(&n->peers[pi], 0, sizeof(peer));
        n->peers[pi].pipe = pp;
        n->peers[pi].pipe_id = pid;
        n->peers[pi].connected = true;
    }
    peer *p = &n->peers[pi];
    if (p->close_at_ms) return; /* refused: ignore until closed */
    p->last_heard_ms = goblin__now_ms();
    mark_ready(n, pi);
    const uint8_t *buf = nng_msg_body(msg);
    size_t len = nng_msg_len(msg), off = 0, ml = 0;
    char err[256];
    do {
        size_t at = off;
        goblin_err e = goblin__wire_batch_next(buf, len, &off, &n->limits, &ml, err, sizeof err);
        if (e == GOBLIN_OK && at == 0 && off == len) {
            handle_one(n, pi, buf, len); /* not a batch */
            return;
        }
        if (e) {
            /* A lone message that does not frame is judged by the decoder (a HELLO of
             * another catalogue gets a REFUSE); a bad batch drops the worker. */
            if (at == 0) {
                handle_one(n, pi, buf, len);
                return;
            }
            char why[320];
            snprintf(why, sizeof why, "malformed batch (%s): %s", goblin_err_name(e), err);
            drop_peer(n, pi, why);
            return;
        }
        handle_one(n, pi, buf + at, ml);
        p = &n->peers[pi];
    } while (off < len && p->connected && !p->close_at_ms);
}

/* One goblin message (@p len bytes at @p buf, inside the nng message handle_msg
 * frees after this returns) from peer @p pi. */
static void handle_one(goblin_node *n, int32_t pi, const uint8_t *buf, size_t len) {
    peer *p = &n->peers[pi];
    nng_pipe pp = p->pipe;
    uint32_t pid = p->pipe_id;
    goblin__wire_msg *m = NULL;
    char err[256];
    /* Zero-copy: result tensors are read-only views into the nng message, which
     * node_main frees only after this returns (everything kept past it is copied). */
    goblin_err e = goblin__wire_decode(buf, len, &n->limits, GOBLIN_WIRE_DECODE_ZERO_COPY, &m, err, sizeof err);
    if (e) {
        goblin__wire_header h;
        if (e == GOBLIN_EVERSION && !p->hello &&
            goblin__wire_header_decode(buf, len, &n->limits, &h, NULL, 0) == GOBLIN_OK &&
            h.type == GOBLIN_WIRE_TYPE_HELLO) {
            char text[300];
            snprintf(text, sizeof text, "catalogue version mismatch: %s", err);
            refuse(n, pi, GOBLIN_EVERSION, text);
            return;
        }
        char why[320];
        snprintf(why, sizeof why, "malformed message (%s): %s", goblin_err_name(e), err);
        drop_peer(n, pi, why);
        return;
    }
    if (!p->hello && m->type != GOBLIN_WIRE_TYPE_HELLO) {
        char why[96];
        snprintf(why, sizeof why, "%s before HELLO", goblin__wire_type_name(m->type));
        drop_peer(n, pi, why);
        goto out;
    }
    switch (m->type) {
    case GOBLIN_WIRE_TYPE_HELLO: {
        if (p->hello) {
            drop_peer(n, pi, "second HELLO");
            break;
        }
        goblin__wire_hello *h = &m->body.hello;
        if (h->catalog_version != goblin_catalog_version()) {
            char text[160];
            snprintf(text, sizeof text, "catalogue version mismatch: worker %u, node %u",
                     (unsigned)h->catalog_version, (unsigned)goblin_catalog_version());
            refuse(n, pi, GOBLIN_EVERSION, text);
            break;
        }
        if (!token_ok(n, h)) {
            refuse(n, pi, GOBLIN_EAUTH, "join token not accepted");
            break;
        }
        p->hello = true;
        p->counted = true;
        p->session_id = ++n->next_session;
        p->threads = (int32_t)h->threads;
        p->memo_cap = PANEL_MEMO;
        p->memory = h->memory_bytes;
        p->batch = (h->backends & GOBLIN_WIRE_CAP_BATCH) != 0;
        nng_sockaddr sa;
        p->shared = n->share && nng_pipe_get_addr(p->pipe, NNG_OPT_REMADDR, &sa) == 0 &&
                    sa.s_family == NNG_AF_INPROC;
        n->st.workers_seen++;
        n->st.workers_connected++;
        goblin__wire_msg a;
        goblin__wire_msg_init(&a, GOBLIN_WIRE_TYPE_HELLO_ACK);
        a.request_id = m->request_id;
        a.body.hello_ack.session_id = p->session_id;
        a.body.hello_ack.heartbeat_ms = n->p.heartbeat_ms;
        a.body.hello_ack.max_message_bytes = n->p.recv_max_bytes;
        if (p->batch) a.flags = GOBLIN_WIRE_FLAG_BATCH;
        send_wire(n, pp, &a);
        nlog(n, GOBLIN_LOG_INFO, "worker %llu joined (pipe %u, %u threads, %llu bytes)",
             (unsigned long long)p->session_id, (unsigned)pid, (unsigned)h->threads,
             (unsigned long long)h->memory_bytes);
        break;
    }
    case GOBLIN_WIRE_TYPE_LEASE_REQUEST:
        p->wanted += (int32_t)m->body.lease_request.slots;
        if (p->wanted > MAX_WANTED) p->wanted = MAX_WANTED;
        break;
    case GOBLIN_WIRE_TYPE_RESULT:
        handle_result(n, pi, &m->body.result);
        break;
    case GOBLIN_WIRE_TYPE_ABANDON: {
        int64_t li = find_lease(n, m->body.abandon.task_id);
        if (li >= 0 && n->leases[li].peer == pi) lease_failed(n, li, false, GOBLIN_ECANCELED, "abandoned");
        break;
    }
    case GOBLIN_WIRE_TYPE_ERROR: {
        int64_t li = find_lease(n, m->body.error.task_id);
        if (li < 0 || n->leases[li].peer != pi) break;
        if (m->body.error.code == GOBLIN_ENOTFOUND) {
            /* A view of a live job not found: the worker has no access to the share. */
            if (p->shared && !n->leases[li].moot) {
                p->shared = false;
                nlog(n, GOBLIN_LOG_WARN, "worker %llu cannot take panels in place: copying them",
                     (unsigned long long)p->session_id);
            }
            /* The worker evicted a panel we thought it held: forget its panels, resend. */
            n->st.panel_cache_misses++;
            memset(p->panels, 0, sizeof p->panels);
            memset(p->gids, 0, sizeof p->gids);
            p->panel_next[0] = p->panel_next[1] = p->gnext = 0;
            p->memo_cap /= 2; /* 0 after enough misses: panels are then always sent */
            /* Not a failure: neither a retry, nor a reissue, nor a failed lease of the
             * worker. The task is pending again and the scheduler (this very loop
             * iteration) resends it with data; the worker asks for a lease after its
             * ERROR, so it keeps its slot. */
            lease_failed(n, li, false, GOBLIN_ENOTFOUND, "panel cache miss");
        } else {
            char why[160];
            snprintf(why, sizeof why, "worker error %s: %s", goblin_err_name(m->body.error.code),
                     m->body.error.message ? m->body.error.message : "");
            nlog(n, GOBLIN_LOG_WARN, "worker %llu: %s", (unsigned long long)p->session_id, why);
            lease_failed(n, li, true, m->body.error.code, why);
        }
        break;
    }
    case GOBLIN_WIRE_TYPE_HEARTBEAT:
        break;
    default: {
        char why[96];
        snprintf(why, sizeof why, "unexpected %s from a worker", goblin__wire_type_name(m->type));
        drop_peer(n, pi, why);
        break;
    }
    }
out:
    goblin__wire_msg_free(m);
}

static void housekeeping(goblin_node *n) {
    pthread_mutex_lock(&n->ev_mu);
    int32_t ne = n->n_ev;
    uint32_t ev[64];
    if (ne > 64) ne = 64;
    if (ne > 0) {
        memcpy(ev, n->ev_removed, (size_t)ne * sizeof(uint32_t));
        memmove(n->ev_removed, n->ev_removed + ne, (size_t)(n->n_ev - ne) * sizeof(uint32_t));
        n->n_ev -= ne;
    }
    pthread_mutex_unlock(&n->ev_mu);
    for (int32_t k = 0; k < ne; k++) {
        int32_t pi = find_peer(n, ev[k]);
        if (pi < 0) continue;
        peer *p = &n->peers[pi];
        p->connected = false;
        if (p->hello && p->counted) {
            n->st.workers_connected--;
            p->counted = false;
            nlog(n, GOBLIN_LOG_INFO, "worker %llu disconnected", (unsigned long long)p->session_id);
        }
        fail_peer_leases(n, pi, true, GOBLIN_ECLOSED, "worker disconnected");
    }
    int64_t now = goblin__now_ms();
    for (int64_t i = n->n_leases - 1; i >= 0; i--) {
        if (i >= n->n_leases || n->leases[i].deadline_ms > now) continue;
        lease *L = &n->leases[i];
        if (!L->moot)
            nlog(n, GOBLIN_LOG_INFO, "lease %llu (task %lld) expired", (unsigned long long)L->id,
                 (long long)L->task);
        lease_failed(n, i, true, GOBLIN_ETIMEDOUT, "lease expired");
    }
    /* Time the node's own loop was busy (a long recomputation) does not count as a
     * worker's silence: its HEARTBEATs may be waiting in the socket. */
    int64_t gap = n->last_housekeeping_ms ? now - n->last_housekeeping_ms : 0;
    n->last_housekeeping_ms = now;
    if (gap > 200)
        for (int32_t i = 0; i < n->n_peers; i++) n->peers[i].last_heard_ms += gap;
    if (n->p.heartbeat_ms) {
        int64_t silent = 3 * (int64_t)n->p.heartbeat_ms;
        for (int32_t i = 0; i < n->n_peers; i++) {
            peer *p = &n->peers[i];
            if (!p->connected || !p->hello || p->close_at_ms || now - p->last_heard_ms <= silent) continue;
            char why[96];
            snprintf(why, sizeof why, "silent for %lld ms (heartbeat %u ms)", (long long)(now - p->last_heard_ms),
                     (unsigned)n->p.heartbeat_ms);
            drop_peer(n, i, why);
        }
    }
    for (int32_t i = 0; i < n->n_peers; i++) {
        peer *p = &n->peers[i];
        if (p->connected && p->close_at_ms && p->close_at_ms <= now) {
            p->connected = false;
            nng_pipe_close(p->pipe);
        }
    }
}

/* Wake node_main now (callable from any thread). */
static void node_wake(goblin_node *n) {
    if (n->wake_wr >= 0) {
        char one = 1;
        ssize_t w = write(n->wake_wr, &one, 1); /* a full pipe is as good as a byte */
        (void)w;
    }
}

static void *node_main(void *arg) {
    goblin_node *n = arg;
    /* Wait for a message with poll() on the socket's receive descriptor, at most 10 ms
     * (new jobs, lease deadlines): a timed nng receive puts an aio on nng 1.5's expiry
     * list, whose thread spins up to a millisecond each time one expires (7 % of a core
     * at 100 timeouts a second, measured). */
    int rfd = -1;
    for (;;) {
        pthread_mutex_lock(&n->mu);
        bool stop = n->stopping;
        pthread_mutex_unlock(&n->mu);
        if (stop) break;
        nng_msg *msg = NULL;
        int rv = goblin__transport_recv_or_wake(n->sock, &rfd, n->wake_rd, &msg, 10);
        pthread_mutex_lock(&n->mu);
        if (rv == 0) {
            handle_msg(n, msg);
            nng_msg_free(msg);
        }
        /* Housekeeping (pipe events, lease deadlines, heartbeats: O(leases + workers))
         * every HOUSEKEEPING_MS rather than after every message; its deadlines are
         * in ms anyway. A removed pipe is seen at once. */
        pthread_mutex_lock(&n->ev_mu);
        bool ev = n->n_ev > 0;
        pthread_mutex_unlock(&n->ev_mu);
        bool tick = ev || rv != 0 || goblin__now_ms() - n->last_housekeeping_ms >= HOUSEKEEPING_MS;
        if (tick) housekeeping(n);
        schedule(n, tick);
        prepare_ahead(n);
        spot_prepare(n);
        pthread_mutex_unlock(&n->mu);
        if (rv && rv != NNG_ETIMEDOUT && rv != NNG_EAGAIN) {
            if (rv == NNG_ECLOSED) break;
        }
    }
    return NULL;
}

goblin_err goblin_node_start(goblin_node *n) {
    if (!n) return GOBLIN_EINVAL;
    if (n->started) return GOBLIN_ESTATE;
    char msg[256];
    goblin_err e = goblin__transport_open_node(&n->sock, n->p.recv_max_bytes, msg, sizeof msg);
    if (e) {
        nlog(n, GOBLIN_LOG_ERROR, "%s", msg);
        return e;
    }
    nng_socket_set_ms(n->sock, NNG_OPT_RECVTIMEO, 10);
    nng_socket_set_ms(n->sock, NNG_OPT_SENDTIMEO, 2000);
    nng_pipe_notify(n->sock, NNG_PIPE_EV_REM_POST, pipe_cb, n);
    for (int32_t i = 0; i < n->p.n_listen; i++) {
        if ((e = goblin__transport_listen(n->sock, n->p.listen[i], n->p.cert_file,
                                            n->p.key_file, msg, sizeof msg)) != GOBLIN_OK) {
            nlog(n, GOBLIN_LOG_ERROR, "%s", msg);
            nng_close(n->sock);
            return e;
        }
        nlog(n, GOBLIN_LOG_INFO, "listening on %s", n->p.listen[i]);
        if (!n->share && strncmp(n->p.listen[i], "inproc://", 9) == 0)
            n->share = goblin__share_publish(n->p.listen[i]); /* NULL: panels are copied */
    }
    n->socket_open = true;
    if (pthread_create(&n->thread, NULL, node_main, n) != 0) {
        nng_close(n->sock);
        n->socket_open = false;
        return GOBLIN_ENOMEM;
    }
    n->started = true;
    return GOBLIN_OK;
}

void goblin_node_stop(goblin_node *n) {
    if (!n || !n->started) return;
    pthread_mutex_lock(&n->mu);
    n->stopping = true;
    pthread_mutex_unlock(&n->mu);
    node_wake(n);
    pthread_join(n->thread, NULL);
    nng_close(n->sock);
    n->socket_open = false;
    n->started = false;
    pthread_mutex_lock(&n->mu);
    for (int32_t k = 0; k < n->n_jobs; k++)
        if (n->jobs[k]->running)
            job_finish(n->jobs[k], GOBLIN_JOB_CANCELED, GOBLIN_ECANCELED, "the node stopped");
    n->n_leases = 0;
    pthread_mutex_unlock(&n->mu);
}

void goblin_node_free(goblin_node *n) {
    if (!n) return;
    goblin_node_stop(n);
    for (int32_t k = 0; k < n->n_jobs; k++) n->jobs[k]->node = NULL;
    for (int32_t i = 0; i < GOBLIN_NODE_MAX_LISTEN; i++) goblin__free(n->urls[i]);
    goblin__free(n->token);
    goblin__free(n->cert_file);
    goblin__free(n->key_file);
    goblin__free(n->token_file);
    goblin__free(n->peers);
    goblin__free(n->leases);
    goblin__free(n->ready);
    goblin__free(n->jobs);
    goblin__free(n->ev_removed);
    for (int32_t k = 0; k < 2; k++) {
        goblin_graph_free(n->ser[k].g);
        goblin_buffer_free(n->ser[k].buf);
    }
    if (n->wake_rd >= 0) close(n->wake_rd);
    if (n->wake_wr >= 0) close(n->wake_wr);
    pthread_mutex_destroy(&n->mu);
    pthread_mutex_destroy(&n->ev_mu);
    pthread_mutex_destroy(&n->ser_mu);
    goblin__hoist_memo_fini(&n->hoist);
    goblin__share_unpublish(n->share);
    goblin__free(n);
}

/* ---- jobs: API -------------------------------------------------------------------- */

static bool is_matrix(const goblin_tensor *t) {
    return t && t->rank == 2 && t->shape[0] >= 0 && t->shape[1] >= 0 &&
           (t->data || t->shape[0] == 0 || t->shape[1] == 0);
}

goblin_err goblin_node_submit_matmul(goblin_node *n, const goblin_tensor *a, const goblin_tensor *b,
                                     goblin_tensor *c, const goblin_job_params *jp, goblin_job **out) {
    if (!n || !out || !is_matrix(a) || !is_matrix(b) || !is_matrix(c)) return GOBLIN_EINVAL;
    if (a->dtype != b->dtype || a->dtype != c->dtype ||
        (a->dtype != GOBLIN_DTYPE_F32 && a->dtype != GOBLIN_DTYPE_F64))
        return GOBLIN_EDTYPE;
    int64_t m = a->shape[0], k = a->shape[1], nn = b->shape[1];
    if (b->shape[0] != k || c->shape[0] != m || c->shape[1] != nn) return GOBLIN_ESHAPE;
    goblin_job_params defp;
    goblin_job_params_default(&defp);
    if (!jp) jp = &defp;
    goblin_job *j = goblin__calloc(1, sizeof *j);
    if (!j) return GOBLIN_ENOMEM;
    j->a = *a;
    j->b = *b;
    j->c = *c;
    j->dt = a->dtype;
    j->esz = goblin_dtype_size(j->dt);
    j->jp = *jp;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cond, NULL);
    pthread_mutex_lock(&n->mu);
    if (!n->started) {
        pthread_mutex_unlock(&n->mu);
        goblin_job_free(j);
        return GOBLIN_ESTATE;
    }
    j->node = n;
    j->id = n->next_job_id++;
    if (n->share) { /* without it (out of memory) panels are copied */
        j->share = goblin__share_ref(n->share); /* a detached job outlives the node */
        j->stok = goblin__share_job_new();
    }
    /* Empty products: nothing to distribute (an empty K means C = 0). */
    if (m == 0 || nn == 0 || k == 0) {
        if (m && nn) {
            for (int64_t i = 0; i < m; i++)
                for (int64_t q = 0; q < nn; q++) {
                    char *p = (char *)c->data + (i * c->strides[0] + q * c->strides[1]) * (int64_t)j->esz;
                    memset(p, 0, j->esz);
                }
        }
        j->status = GOBLIN_JOB_DONE;
    } else {
        uint64_t mem = jp->task_memory_bytes;
        int32_t workers = 0;
        for (int32_t i = 0; i < n->n_peers; i++) {
            peer *p = &n->peers[i];
            if (!p->connected || !p->hello || p->quarantined) continue;
            workers++;
            if (!jp->task_memory_bytes && (mem == 0 || p->memory < mem)) mem = p->memory;
        }
        if (!mem) mem = (uint64_t)256 << 20;
        goblin__plan_params pp;
        goblin__plan_params_default(&pp);
        pp.m = m;
        pp.k = k;
        pp.n = nn;
        pp.dtype = j->dt;
        pp.memory_bytes = mem;
        pp.min_tiles = jp->min_tasks > 0 ? jp->min_tasks : 4 * (workers > 0 ? workers : 1);
        char err[256];
        goblin_err e = goblin__plan_matmul(&j->plan, &pp, err, sizeof err);
        if (e) {
            nlog(n, GOBLIN_LOG_ERROR, "cannot plan job: %s", err);
            pthread_mutex_unlock(&n->mu);
            j->node = NULL;
            goblin_job_free(j);
            return e;
        }
        goblin__plan_get_info(j->plan, &j->info);
        j->ntasks = goblin__plan_tile_count(j->plan);
        j->rowcheck = n->p.verify == GOBLIN_VERIFY_FREIVALDS && !n->p.freivalds_tile_by_tile &&
                      j->info.k_slices == 1 && j->info.grid_cols > 1;
        j->prep_key = -1;
        j->tasks = goblin__calloc((size_t)j->ntasks, sizeof(task));
        if (j->info.k_slices > 1)
            j->tile_done = goblin__calloc((size_t)(j->ntasks / j->info.k_slices), sizeof(int32_t));
        int64_t cap = n->cap_jobs;
        if (!j->tasks || (j->info.k_slices > 1 && !j->tile_done) ||
            !grow((void **)&n->jobs, &cap, n->n_jobs + 1, sizeof(goblin_job *))) {
            pthread_mutex_unlock(&n->mu);
            j->node = NULL;
            goblin_job_free(j);
            return GOBLIN_ENOMEM;
        }
        n->cap_jobs = (int32_t)cap;
        j->running = true;
        nlog(n, GOBLIN_LOG_INFO,
             "job %llu: %lldx%lldx%lld %s in %lld tasks (%lld x %lld tiles, %lld K-slices)",
             (unsigned long long)j->id, (long long)m, (long long)k, (long long)nn,
             goblin_dtype_name(j->dt), (long long)j->ntasks, (long long)j->info.grid_rows,
             (long long)j->info.grid_cols, (long long)j->info.k_slices);
    }
    int64_t cap = n->cap_jobs;
    if (!grow((void **)&n->jobs, &cap, n->n_jobs + 1, sizeof(goblin_job *))) {
        pthread_mutex_unlock(&n->mu);
        j->node = NULL;
        goblin_job_free(j);
        return GOBLIN_ENOMEM;
    }
    n->cap_jobs = (int32_t)cap;
    n->jobs[n->n_jobs++] = j;
    pthread_mutex_unlock(&n->mu);
    node_wake(n);
    *out = j;
    return GOBLIN_OK;
}

/* ---- graph jobs --------------------------------------------------------------------- */

static void gjob_free(gjob *G) {
    if (!G) return;
    for (int32_t k = 0; k < 2; k++) {
        goblin_graph_free(G->v[k].g);
        goblin_buffer_free(G->v[k].buf);
        goblin__free(G->v[k].oshape);
        goblin__free(G->v[k].oop);
        goblin__free(G->v[k].ok);
    }
    if (G->packed)
        for (int32_t i = 0; i < G->n_in; i++) goblin__free(G->packed[i]);
    goblin__free(G->packed);
    goblin__free(G->in);
    goblin__free(G->out);
    goblin__free(G->batched);
    goblin__free(G->cid);
    goblin__free(G->comb);
    goblin__hoist_release(G->hoist);
    goblin_graph_free(G->spot_g);
    goblin__free(G);
}

/* Rows [r0, r0 + rows) of @p t (a view). */
static goblin_tensor rows_view(const goblin_tensor *t, int64_t r0, int64_t rows) {
    goblin_tensor v = *t;
    v.shape[0] = rows;
    v.data = (char *)t->data + r0 * t->strides[0] * (int64_t)goblin_dtype_size(t->dtype);
    return v;
}

/* Input @p i of task @p ti as the node sees it (caller's memory, any strides). */
static goblin_tensor task_input(const goblin_job *j, int64_t ti, int32_t i) {
    const gjob *G = j->g;
    if (G->batched[i]) return rows_view(&G->in[i], ti * G->rows, gvar(j, ti)->rows);
    return G->in[i];
}

static size_t out_bytes(const goblin_tensor *shape) {
    return (size_t)goblin_tensor_numel(shape) * goblin_dtype_size(shape->dtype);
}

/* Graph-job input ids believed cached: GID_MEMO, scaled down like memo_cap on misses. */
static int32_t gid_cap(const peer *p) { return p->memo_cap * (GID_MEMO / PANEL_MEMO); }

static bool peer_has_gid(const peer *p, uint64_t id) {
    for (int32_t i = 0, c = gid_cap(p); i < c; i++)
        if (p->gids[i] == id) return true;
    return false;
}

static void peer_add_gid(peer *p, uint64_t id) {
    int32_t c = gid_cap(p);
    if (c < 1 || peer_has_gid(p, id)) return;
    p->gids[p->gnext % c] = id;
    p->gnext = (p->gnext + 1) % c;
}

static bool issue_graph(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, bool speculative) {
    peer *p = &n->peers[pi];
    gjob *G = j->g;
    gvariant *v = gvar(j, ti);
    int32_t ni = G->n_in;
    goblin_tensor *in = goblin__calloc((size_t)ni + 1, sizeof *in);
    int64_t *dir = goblin__calloc((size_t)(2 * ni) + 1, sizeof *dir);
    void **tmp = goblin__calloc((size_t)ni + 1, sizeof *tmp);
    bool ok = false;
    int64_t hits = 0, lent = 0;
    if (!in || !dir || !tmp) goto out;
    for (int32_t i = 0; i < ni; i++) {
        if (p->shared && j->stok) {
            /* An in-process worker: the input as a view of the caller's memory, under an
             * id of this job's own (distinct for every input and chunk). */
            goblin_tensor view = G->batched[i] ? task_input(j, ti, i) : G->in[i];
            uint64_t lid = (((uint64_t)i << 40) ^ (uint64_t)(G->batched[i] ? ti + 1 : 0)) * 0xD6E8FEB86659FD93ull ^
                           j->id * 0x9E3779B97F4A7C15ull;
            if (lid && goblin__share_put(j->share, j->stok, lid, &view) == GOBLIN_OK) {
                int64_t zero[1] = {0};
                goblin_tensor_init(&in[i], view.dtype, 1, zero, NULL);
                dir[i] = (int64_t)lid;
                dir[ni + i] = 1;
                lent++;
                continue;
            }
        }
        if (G->batched[i]) {
            goblin_tensor cv = task_input(j, ti, i);
            if (goblin_tensor_is_contiguous(&cv)) {
                in[i] = cv;
            } else {
                size_t bytes = out_bytes(&cv);
                if (!(tmp[i] = goblin__alloc(bytes ? bytes : 1))) goto out;
                goblin_tensor_init(&in[i], cv.dtype, cv.rank, cv.shape, tmp[i]);
                goblin__tensor_copy(&in[i], &cv);
            }
            continue;
        }
        uint64_t id = G->cid[i];
        bool have = peer_has_gid(p, id);
        dir[i] = (int64_t)id;
        dir[ni + i] = have ? 1 : 0;
        if (have) {
            int64_t zero[1] = {0};
            goblin_tensor_init(&in[i], G->in[i].dtype, 1, zero, NULL);
            hits++;
        } else if (G->packed[i]) {
            goblin_tensor_init(&in[i], G->in[i].dtype, G->in[i].rank, G->in[i].shape, G->packed[i]);
        } else {
            in[i] = G->in[i];
        }
    }
    int64_t sd[1] = {2 * (int64_t)ni};
    goblin_tensor_init(&in[ni], GOBLIN_DTYPE_I64, 1, sd, dir);
    if (!send_task(n, j, ti, pi, speculative, v->buf, v->len, in, (uint32_t)ni + 1, lent == 0)) goto out;
    n->st.panel_cache_hits += hits;
    n->st.panels_in_place += lent;
    for (int32_t i = 0; i < ni; i++)
        if (!G->batched[i] && dir[ni + i] == 0) peer_add_gid(p, G->cid[i]);
    ok = true;
out:
    if (tmp)
        for (int32_t i = 0; i < ni; i++) goblin__free(tmp[i]);
    goblin__free(tmp);
    goblin__free(in);
    goblin__free(dir);
    return ok;
}

/* Compute task @p ti on the node: *out gets one new contiguous buffer per output. */
static goblin_err graph_compute_impl(goblin_node *n, goblin_job *j, int64_t ti, void ***out) {
    gjob *G = j->g;
    gvariant *v = gvar(j, ti);
    goblin_tensor *in = goblin__calloc((size_t)G->n_in + 1, sizeof *in);
    goblin_tensor *ot = goblin__calloc((size_t)G->n_out, sizeof *ot);
    void **bufs = goblin__calloc((size_t)G->n_out, sizeof *bufs);
    goblin_err e = GOBLIN_ENOMEM;
    if (!in || !ot || !bufs) goto fail;
    for (int32_t i = 0; i < G->n_in; i++) in[i] = task_input(j, ti, i);
    for (int32_t o = 0; o < G->n_out; o++) {
        size_t bytes = out_bytes(&v->oshape[o]);
        if (!(bufs[o] = goblin__alloc(bytes ? bytes : 1))) goto fail;
        goblin_tensor_init(&ot[o], v->oshape[o].dtype, v->oshape[o].rank, v->oshape[o].shape, bufs[o]);
    }
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.backend = n->p.recompute_backend;
    ep.threads = n->p.recompute_threads;
    if ((e = goblin_graph_eval(v->g, &ep, in, G->n_in, ot, G->n_out)) != GOBLIN_OK) goto fail;
    n->st.node_recomputed++;
    goblin__free(in);
    goblin__free(ot);
    *out = bufs;
    return GOBLIN_OK;
fail:
    goblin__free(in);
    goblin__free(ot);
    free_bufs(&bufs, G->n_out);
    return e;
}

/* graph_compute, with its time added to the node's verification clock (goblin_node_stats.verify_ns). */
static goblin_err graph_compute(goblin_node *n, goblin_job *j, int64_t ti, void ***out) {
    vclock t0 = verify_begin();
    goblin_err r = graph_compute_impl(n, j, ti, out);
    verify_end(n, t0);
    return r;
}

/* Output @p o of task @p ti over contiguous @p data. */
static goblin_tensor out_tensor(const goblin_job *j, int64_t ti, int32_t o, void *data) {
    const goblin_tensor *s = &gvar(j, ti)->oshape[o];
    goblin_tensor t;
    goblin_tensor_init(&t, s->dtype, s->rank, s->shape, data);
    return t;
}

/* Does a worker's result have the task's output count, dtypes and shapes? */
static bool graph_result_shape_ok(const goblin_job *j, int64_t ti, const goblin__wire_result *r,
                                  goblin_verify_reason *why) {
    const gvariant *v = gvar(j, ti);
    *why = GOBLIN_VERIFY_SHAPE;
    if ((int64_t)r->n_outputs != j->g->n_out) return false;
    for (int32_t o = 0; o < j->g->n_out; o++) {
        const goblin_tensor *a = &r->outputs[o], *s = &v->oshape[o];
        if (a->dtype != s->dtype) {
            *why = GOBLIN_VERIFY_DTYPE;
            return false;
        }
        if (a->rank != s->rank || memcmp(a->shape, s->shape, (size_t)s->rank * sizeof(int64_t)) != 0 ||
            (goblin_tensor_numel(s) > 0 && !a->data) || !goblin_tensor_is_contiguous(a))
            return false;
    }
    return true;
}

/* Does result @p res (one tensor per output) agree with the node's @p mine within the
 * output ops' contracts? Anything short of ACCEPT is a disagreement: the node's result
 * is trusted, so "inconclusive" cannot be left to the worker's benefit. */
static bool graph_agrees_impl(goblin_node *n, const goblin_job *j, int64_t ti, const goblin_tensor *res,
                         void **mine, goblin_verify_reason *why) {
    const gvariant *v = gvar(j, ti);
    *why = GOBLIN_VERIFY_OK;
    for (int32_t o = 0; o < j->g->n_out; o++) {
        goblin_tensor m = out_tensor(j, ti, o, mine[o]);
        goblin_verdict vd;
        memset(&vd, 0, sizeof vd);
        goblin_err e = goblin_verify_compare(v->oop[o], m.dtype, v->ok[o], &m, &res[o], &vd);
        if (e) {
            nlog(n, GOBLIN_LOG_ERROR, "cannot compare output %d: %s", (int)o, goblin_strerror(e));
            *why = GOBLIN_VERIFY_UNCHECKABLE;
            return false;
        }
        if (vd.kind != GOBLIN_VERDICT_ACCEPT) {
            *why = vd.reason == GOBLIN_VERIFY_OK || vd.reason == GOBLIN_VERIFY_BIT_EQUAL
                       ? GOBLIN_VERIFY_BETWEEN : vd.reason;
            return false;
        }
    }
    return true;
}

/* graph_agrees, with its time added to the node's verification clock (goblin_node_stats.verify_ns). */
static bool graph_agrees(goblin_node *n, const goblin_job *j, int64_t ti, const goblin_tensor *res,
                         void **mine, goblin_verify_reason *why) {
    vclock t0 = verify_begin();
    bool r = graph_agrees_impl(n, j, ti, res, mine, why);
    verify_end(n, t0);
    return r;
}

static bool graph_bit_equal(const goblin_job *j, int64_t ti, const goblin_tensor *a, void **held) {
    const gvariant *v = gvar(j, ti);
    for (int32_t o = 0; o < j->g->n_out; o++) {
        size_t bytes = out_bytes(&v->oshape[o]);
        if (bytes && memcmp(a[o].data, held[o], bytes) != 0) return false;
    }
    return true;
}

/* Store the outputs of task @p ti (contiguous buffers): CONCAT outputs into the
 * caller's rows, the others kept for the combine at the end. */
static bool graph_store(goblin_job *j, int64_t ti, void *const *data) {
    gjob *G = j->g;
    task *t = &j->tasks[ti];
    gvariant *v = gvar(j, ti);
    for (int32_t o = 0; o < G->n_out; o++) {
        goblin_tensor src = out_tensor(j, ti, o, data[o]);
        if (G->comb[o] == GOBLIN_COMBINE_CONCAT) {
            goblin_tensor dst = rows_view(&G->out[o], ti * G->rows, v->rows);
            goblin__tensor_copy(&dst, &src);
            continue;
        }
        if (!t->outs && !(t->outs = goblin__calloc((size_t)G->n_out, sizeof(void *)))) return false;
        size_t bytes = out_bytes(&v->oshape[o]);
        void *cp = goblin__memdup(data[o], bytes ? bytes : 1);
        if (!cp) return false;
        goblin__free(t->outs[o]);
        t->outs[o] = cp;
    }
    return true;
}

static void graph_task_accept(goblin_node *n, goblin_job *j, int64_t ti, void *const *data,
                              int32_t by, bool replicated) {
    task *t = &j->tasks[ti];
    for (int64_t i = 0; i < n->n_leases; i++)
        if (n->leases[i].job == j && n->leases[i].task == ti) n->leases[i].moot = true;
    t->n_leases = 0;
    t->state = T_DONE;
    t->accepted_peer = by;
    t->replicated = replicated;
    free_bufs(&t->held, j->g->n_out);
    t->holder = 0;
    if (!graph_store(j, ti, data)) {
        job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory holding a chunk's outputs");
        return;
    }
    task_done(n, j, ti);
}

static void count_reject(goblin_node *n, int32_t pi, int64_t ti, goblin_verify_reason why) {
    peer *p = &n->peers[pi];
    n->st.results_rejected++;
    n->st.rejected_by_reason[why < GOBLIN_VERIFY_REASON_COUNT ? why : 0]++;
    p->rejected++;
    nlog(n, GOBLIN_LOG_WARN, "rejected result of graph task %lld from worker %llu: %s", (long long)ti,
         (unsigned long long)p->session_id, goblin_verify_reason_name(why));
}

static void count_accept(goblin_node *n, int32_t pi, bool agreed) {
    n->st.results_accepted++;
    n->peers[pi].accepted++;
    if (agreed) n->peers[pi].agreements++;
}

/* Decide task @p ti by recomputing it on the node: each candidate result (@p nc of
 * them, from peers @p pc) is accepted if it agrees with the node's, else rejected and
 * its worker quarantined. The node's result is the one kept. */
static void graph_decide(goblin_node *n, goblin_job *j, int64_t ti, int32_t nc, const int32_t *pc,
                         const goblin_tensor *const *res) {
    void **mine = NULL;
    goblin_err e = graph_compute(n, j, ti, &mine);
    if (e) {
        job_finish(j, GOBLIN_JOB_FAILED, e, "recomputing task %lld on the node failed: %s", (long long)ti,
                   goblin_strerror(e));
        return;
    }
    bool ok[2] = {false, false};
    goblin_verify_reason why[2];
    for (int32_t k = 0; k < nc; k++) {
        ok[k] = graph_agrees(n, j, ti, res[k], mine, &why[k]);
        if (ok[k]) count_accept(n, pc[k], true);
        else count_reject(n, pc[k], ti, why[k]);
    }
    if (nc == 2 && ok[0] && ok[1]) n->st.replicas_agreed++;
    graph_task_accept(n, j, ti, mine, -1, true);
    free_bufs(&mine, j->g->n_out);
    for (int32_t k = 0; k < nc; k++)
        if (!ok[k]) quarantine(n, pc[k]);
}

static bool peer_eligible(const goblin_node *n, int32_t k) {
    const peer *q = &n->peers[k];
    return q->connected && q->hello && !q->quarantined && !q->close_at_ms;
}

/* Is a worker other than peer @p pi able to take task @p ti? */
static bool other_eligible(const goblin_node *n, const goblin_job *j, int64_t ti, int32_t pi) {
    for (int32_t k = 0; k < n->n_peers; k++)
        if (k != pi && peer_eligible(n, k) && task_fits(j, ti, &n->peers[k])) return true;
    return false;
}

static double rand_u01(void) { return (double)(goblin__secret_u64() >> 11) * 0x1p-53; }

/* ---- SPOT (node.h): a few secret rows recomputed on the node ---------------------- */

#define SPOT_NONFINITE_MAX 64 /* rows with NaN/inf checked one by one; more: the whole task */

/* Rows @p idx[0..nr) of @p src (contiguous, rows along dim 0) into @p dst (contiguous, nr rows). */
static void gather_rows(const goblin_tensor *src, const int64_t *idx, int64_t nr, void *dst) {
    size_t row = src->shape[0] ? out_bytes(src) / (size_t)src->shape[0] : 0;
    for (int64_t r = 0; r < nr; r++) memcpy((char *)dst + (size_t)r * row, (const char *)src->data + (size_t)idx[r] * row, row);
}

/* Does row @p r of contiguous @p t hold a NaN or an infinity? */
static bool row_nonfinite(const goblin_tensor *t, int64_t r) {
    int64_t per = t->shape[0] ? goblin_tensor_numel(t) / t->shape[0] : 0;
    if (t->dtype == GOBLIN_DTYPE_F32) {
        const float *p = (const float *)t->data + r * per;
        for (int64_t i = 0; i < per; i++)
            if (!isfinite(p[i])) return true;
    } else if (t->dtype == GOBLIN_DTYPE_F64) {
        const double *p = (const double *)t->data + r * per;
        for (int64_t i = 0; i < per; i++)
            if (!isfinite(p[i])) return true;
    }
    return false;
}

/* Evaluate the job's graph on the node for rows @p idx[0..nr) of chunk @p ti: *out gets
 * one new contiguous buffer per output, nr rows each. */
static goblin_err spot_eval(goblin_node *n, goblin_job *j, int64_t ti, const int64_t *idx, int64_t nr,
                            void ***out) {
    gjob *G = j->g;
    goblin_graph *tmp = NULL;
    const goblin_graph *g = G->spot_g;
    goblin_err e = GOBLIN_ENOMEM;
    if (nr != G->spot_k) {
        goblin_split *split = goblin__calloc((size_t)G->n_in + 1, sizeof *split);
        if (!split) return GOBLIN_ENOMEM;
        for (int32_t i = 0; i < G->n_in; i++) split[i] = G->batched[i] ? GOBLIN_SPLIT_BATCH : GOBLIN_SPLIT_BROADCAST;
        e = goblin__graph_rebatch(G->spot_g, split, nr, &tmp, NULL, 0);
        goblin__free(split);
        if (e) return e;
        g = tmp;
    }
    goblin_tensor *in = goblin__calloc((size_t)G->n_in + 1, sizeof *in);
    goblin_tensor *ot = goblin__calloc((size_t)G->n_out, sizeof *ot);
    void **ib = goblin__calloc((size_t)G->n_in + 1, sizeof *ib);
    void **bufs = goblin__calloc((size_t)G->n_out, sizeof *bufs);
    if (!in || !ot || !ib || !bufs) goto done;
    for (int32_t i = 0; i < G->n_in; i++) {
        goblin_tensor src = task_input(j, ti, i);
        if (!G->batched[i]) {
            in[i] = G->packed[i] ? G->in[i] : src;
            if (G->packed[i]) goblin_tensor_init(&in[i], src.dtype, src.rank, src.shape, G->packed[i]);
            continue;
        }
        int64_t shp[GOBLIN_MAX_RANK];
        memcpy(shp, src.shape, sizeof shp);
        shp[0] = nr;
        goblin_tensor_init(&in[i], src.dtype, src.rank, shp, NULL);
        size_t bytes = out_bytes(&in[i]);
        if (!(ib[i] = goblin__alloc(bytes ? bytes : 1))) goto done;
        in[i].data = ib[i];
        goblin_tensor row_src = src, row_dst = in[i];
        row_src.shape[0] = row_dst.shape[0] = 1;
        size_t rb = nr ? bytes / (size_t)nr : 0;
        for (int64_t r = 0; r < nr; r++) {
            row_src.data = (char *)src.data + idx[r] * src.strides[0] * (int64_t)goblin_dtype_size(src.dtype);
            row_dst.data = (char *)ib[i] + (size_t)r * rb;
            goblin__tensor_copy(&row_dst, &row_src);
        }
    }
    for (int32_t o = 0; o < G->n_out; o++) {
        goblin_tensor s;
        goblin_graph_node(g, goblin_graph_output_id(g, o), NULL, &s, NULL, NULL);
        size_t bytes = out_bytes(&s);
        if (!(bufs[o] = goblin__alloc(bytes ? bytes : 1))) goto done;
        goblin_tensor_init(&ot[o], s.dtype, s.rank, s.shape, bufs[o]);
    }
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.backend = n->p.recompute_backend;
    /* One thread: a few rows are too little work to split, and the workers keep every
     * core busy (a threaded kernel's barrier then waits for a descheduled thread). */
    ep.threads = 1;
    ep.shapes_like = gvar(j, ti)->g; /* each row as in the worker's chunk, bit for bit */
    if ((e = goblin_graph_eval(g, &ep, in, G->n_in, ot, G->n_out)) != GOBLIN_OK) goto done;
    *out = bufs;
    bufs = NULL;
done:
    if (ib)
        for (int32_t i = 0; i < G->n_in; i++) goblin__free(ib[i]);
    goblin__free(ib);
    goblin__free(in);
    goblin__free(ot);
    free_bufs(&bufs, G->n_out);
    goblin_graph_free(tmp);
    return e;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Do rows @p idx[0..nr) of result @p res agree with the node's @p mine (nr rows per
 * output) under the outputs' contracts? */
static bool spot_rows_agree(goblin_job *j, int64_t ti, const goblin_tensor *res, const int64_t *idx,
                            int64_t nr, void *const *mine) {
    gjob *G = j->g;
    gvariant *v = gvar(j, ti);
    for (int32_t o = 0; o < G->n_out; o++) {
        int64_t shp[GOBLIN_MAX_RANK];
        memcpy(shp, res[o].shape, sizeof shp);
        shp[0] = nr;
        goblin_tensor m;
        goblin_tensor_init(&m, res[o].dtype, res[o].rank, shp, mine[o]);
        void *theirs = goblin__alloc(out_bytes(&m) ? out_bytes(&m) : 1);
        if (!theirs) return false;
        gather_rows(&res[o], idx, nr, theirs);
        goblin_tensor t = m;
        t.data = theirs;
        goblin_verdict vd;
        memset(&vd, 0, sizeof vd);
        bool ok = goblin_verify_compare(v->oop[o], m.dtype, v->ok[o], &m, &t, &vd) == GOBLIN_OK &&
                  vd.kind == GOBLIN_VERDICT_ACCEPT;
        goblin__free(theirs);
        if (!ok) return false;
    }
    return true;
}

/* spot_k distinct secret rows of task @p ti into @p idx, sorted. */
static void spot_draw(goblin_job *j, int64_t ti, int64_t *idx) {
    gjob *G = j->g;
    gvariant *v = gvar(j, ti);
    int64_t nr = 0;
    while (nr < G->spot_k) {
        int64_t r = (int64_t)(goblin__secret_u64() % (uint64_t)v->rows);
        bool dup = false;
        for (int64_t q = 0; q < nr && !dup; q++) dup = idx[q] == r;
        if (!dup) idx[nr++] = r;
    }
    qsort(idx, (size_t)nr, sizeof *idx, cmp_i64);
}

/* Verdict on worker @p pi's result @p res of task @p ti: true when the spot-check
 * agrees; *decide when it could not be made (the whole task must be recomputed). The
 * secret rows are the task's prepared ones (spot_prepare) when it has them, else drawn
 * and computed now; every row holding a NaN or an infinity is computed now too. */
static bool spot_agrees(goblin_node *n, goblin_job *j, int64_t ti, const goblin_tensor *res, bool *decide) {
    gjob *G = j->g;
    gvariant *v = gvar(j, ti);
    task *tk = &j->tasks[ti];
    bool pre = tk->spot_mine != NULL;
    int64_t cap = G->spot_k + SPOT_NONFINITE_MAX, nr = 0, k = G->spot_k;
    int64_t *idx = goblin__alloc((size_t)cap * sizeof *idx);
    *decide = true;
    if (!idx) return false;
    if (pre) memcpy(idx, tk->spot_idx, (size_t)k * sizeof *idx);
    else spot_draw(j, ti, idx);
    nr = k;
    /* And every row with a NaN or an infinity. */
    for (int64_t r = 0; r < v->rows; r++) {
        bool bad = false;
        for (int32_t o = 0; o < G->n_out && !bad; o++) bad = row_nonfinite(&res[o], r);
        if (!bad) continue;
        bool dup = false;
        for (int64_t q = 0; q < k && !dup; q++) dup = idx[q] == r;
        if (dup) continue;
        if (nr == cap) {
            goblin__free(idx);
            return false;
        }
        idx[nr++] = r;
    }
    /* Rows still to compute: all of them, or (prepared) those with NaN/inf only. */
    int64_t from = pre ? k : 0;
    if (!pre) qsort(idx, (size_t)nr, sizeof *idx, cmp_i64);
    void **mine = NULL;
    goblin_err e = nr > from ? spot_eval(n, j, ti, idx + from, nr - from, &mine) : GOBLIN_OK;
    if (e) {
        nlog(n, GOBLIN_LOG_WARN, "spot-check of graph task %lld failed on the node (%s): recomputing it whole",
             (long long)ti, goblin_strerror(e));
        goblin__free(idx);
        return false;
    }
    n->st.spot_checks++;
    n->st.spot_rows_checked += nr;
    if (pre) n->st.spot_checks_prepared++;
    bool ok = (!pre || spot_rows_agree(j, ti, res, idx, k, tk->spot_mine)) &&
              (nr == from || spot_rows_agree(j, ti, res, idx + from, nr - from, mine));
    free_bufs(&mine, G->n_out);
    goblin__free(idx);
    task_free_spot(j, tk);
    *decide = !ok;
    return ok;
}

/* The share of a worker's SPOT results that are checked: adaptive in its agreements,
 * never under the job's min_replication. */
static double spot_rate(const gjob *G, const peer *p) {
    double rate = 1.0 / (1.0 + (double)p->agreements / G->halflife);
    return rate < G->min_rep ? G->min_rep : rate;
}

/* Prepare the spot-checks of leased SPOT tasks while their workers compute: decide
 * (at the rate of the worker holding the lease) whether the result will be checked,
 * and for a checked one draw its secret rows and compute them. The rows are as secret
 * as when drawn on the result's arrival (nothing about them leaves the node), and the
 * last results of a job are then checked by a comparison instead of an evaluation
 * after the workers have finished. At most one evaluation per call (the node loop
 * calls this once per turn). */
static void spot_prepare(goblin_node *n) {
    for (int32_t q = 0; q < n->n_jobs; q++) {
        goblin_job *j = n->jobs[q];
        if (!j->running || j->kind != JOB_GRAPH || j->g->verify != GOBLIN_VERIFY_SPOT) continue;
        gjob *G = j->g;
        while (j->prep_from < j->ntasks && j->tasks[j->prep_from].state != T_PENDING) {
            int64_t ti = j->prep_from++;
            task *t = &j->tasks[ti];
            if (t->state != T_LEASED || t->spot_state != SPOT_UNDECIDED || gvar(j, ti)->rows <= G->spot_k) continue;
            int32_t pi = -1;
            for (int64_t i = 0; i < n->n_leases && pi < 0; i++)
                if (n->leases[i].job == j && n->leases[i].task == ti && !n->leases[i].moot) pi = n->leases[i].peer;
            if (pi < 0) continue;
            t->spot_peer = pi;
            if (rand_u01() >= spot_rate(G, &n->peers[pi])) {
                t->spot_state = SPOT_TRUSTED;
                continue;
            }
            vclock t0 = verify_begin();
            int64_t *idx = goblin__alloc((size_t)G->spot_k * sizeof *idx);
            void **mine = NULL;
            if (idx) {
                spot_draw(j, ti, idx);
                if (spot_eval(n, j, ti, idx, G->spot_k, &mine) == GOBLIN_OK) {
                    t->spot_idx = idx;
                    t->spot_mine = mine;
                    t->spot_state = SPOT_CHECK;
                    idx = NULL;
                }
            }
            goblin__free(idx); /* failed: decided again when the result arrives */
            verify_end(n, t0);
            return;
        }
    }
}

/* SPOT: accept worker @p pi's result of task @p ti unchecked (a trusted worker, at the
 * adaptive rate), after a spot-check that agrees, or as the node's recomputation of
 * the whole task decides. */
static void graph_spot(goblin_node *n, goblin_job *j, int64_t ti, int32_t pi, const goblin_tensor *res,
                       void *const *data) {
    gjob *G = j->g;
    task *t = &j->tasks[ti];
    /* The decision prepared for this worker (spot_prepare), else one made now. */
    bool check = t->spot_state != SPOT_UNDECIDED && t->spot_peer == pi ? t->spot_state == SPOT_CHECK
                                                                        : rand_u01() < spot_rate(G, &n->peers[pi]);
    if (!check) {
        task_free_spot(j, t);
        count_accept(n, pi, false);
        graph_task_accept(n, j, ti, data, pi, false);
        return;
    }
    bool decide = true, ok = false;
    if (gvar(j, ti)->rows > G->spot_k) {
        vclock t0 = verify_begin();
        ok = spot_agrees(n, j, ti, res, &decide);
        verify_end(n, t0);
    }
    if (ok) {
        count_accept(n, pi, true);
        /* Not "replicated": rows were sampled, so if this worker is caught later, the
         * result is rechecked whole (recheck_graph). */
        graph_task_accept(n, j, ti, data, pi, false);
        return;
    }
    if (decide) {
        if (gvar(j, ti)->rows > G->spot_k) n->st.results_escalated++;
        graph_decide(n, j, ti, 1, &pi, &res);
    }
}

static void handle_graph_result(goblin_node *n, int32_t pi, int64_t li, goblin__wire_result *r) {
    lease L = n->leases[li];
    goblin_job *j = L.job;
    gjob *G = j->g;
    int64_t ti = L.task;
    task *t = &j->tasks[ti];
    peer *p = &n->peers[pi];
    goblin_verify_reason why;
    if (!graph_result_shape_ok(j, ti, r, &why)) {
        count_reject(n, pi, ti, why);
        char text[96];
        snprintf(text, sizeof text, "result rejected (%s)", goblin_verify_reason_name(why));
        lease_failed(n, li, true, GOBLIN_EVERIFY, text);
        quarantine(n, pi);
        return;
    }
    remove_lease(n, li);
    lease_msg_done(n, &L);
    if (t->n_leases > 0) t->n_leases--;
    if (t->holder == pi + 1) { /* cannot replicate itself */
        n->st.results_duplicate++;
        if (t->n_leases == 0 && t->state == T_LEASED) t->state = T_PENDING;
        if (ti < j->scan_from) j->scan_from = ti;
        return;
    }
    void **data = goblin__calloc((size_t)G->n_out, sizeof *data);
    if (!data) {
        job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory");
        return;
    }
    for (int32_t o = 0; o < G->n_out; o++) data[o] = r->outputs[o].data;
    const goblin_tensor *res0 = r->outputs;
    if (G->verify == GOBLIN_VERIFY_UNSAFE_NONE) {
        count_accept(n, pi, false);
        graph_task_accept(n, j, ti, data, pi, false);
    } else if (G->verify == GOBLIN_VERIFY_RECOMPUTE) {
        graph_decide(n, j, ti, 1, &pi, &res0);
    } else if (G->verify == GOBLIN_VERIFY_SPOT) {
        graph_spot(n, j, ti, pi, res0, data);
    } else if (t->holder) {
        int32_t h = t->holder - 1;
        vclock t0 = verify_begin();
        bool same = graph_bit_equal(j, ti, r->outputs, t->held);
        verify_end(n, t0);
        if (same) {
            n->st.replicas_agreed++;
            count_accept(n, h, true);
            count_accept(n, pi, true);
            graph_task_accept(n, j, ti, data, pi, true);
        } else {
            goblin_tensor *ht = goblin__calloc((size_t)G->n_out, sizeof *ht);
            if (!ht) {
                job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory");
            } else {
                for (int32_t o = 0; o < G->n_out; o++) ht[o] = out_tensor(j, ti, o, t->held[o]);
                void **held = t->held; /* graph_decide frees it through the accept */
                t->held = NULL;
                int32_t pc[2] = {h, pi};
                const goblin_tensor *rs[2] = {ht, res0};
                graph_decide(n, j, ti, 2, pc, rs);
                free_bufs(&held, G->n_out);
                goblin__free(ht);
            }
        }
    } else {
        if (t->rep == REP_UNDECIDED) decide_replication(j, ti, p);
        if (t->rep == REP_SINGLE) {
            count_accept(n, pi, false);
            graph_task_accept(n, j, ti, data, pi, false);
        } else if (!other_eligible(n, j, ti, pi)) {
            graph_decide(n, j, ti, 1, &pi, &res0);
        } else {
            /* Hold the result until a different worker's replica arrives. */
            void **held = goblin__calloc((size_t)G->n_out, sizeof *held);
            bool okc = held != NULL;
            for (int32_t o = 0; okc && o < G->n_out; o++) {
                size_t bytes = out_bytes(&gvar(j, ti)->oshape[o]);
                okc = (held[o] = goblin__memdup(data[o], bytes ? bytes : 1)) != NULL;
            }
            if (!okc) {
                free_bufs(&held, G->n_out);
                job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory holding a result");
            } else {
                t->held = held;
                t->holder = pi + 1;
                if (t->n_leases == 0) {
                    t->state = T_PENDING;
                    if (ti < j->scan_from) j->scan_from = ti;
                }
            }
        }
    }
    goblin__free(data);
}

/* A held result whose replica can go nowhere (no other eligible worker): the node decides. */
static void resolve_orphans(goblin_node *n) {
    int32_t eligible = 0, only = -1;
    for (int32_t k = 0; k < n->n_peers; k++)
        if (peer_eligible(n, k)) {
            eligible++;
            only = k;
        }
    if (eligible != 1) return;
    for (int32_t q = 0; q < n->n_jobs; q++) {
        goblin_job *j = n->jobs[q];
        if (!j->running || j->kind != JOB_GRAPH || j->g->verify != GOBLIN_VERIFY_REPLICATE) continue;
        for (int64_t i = 0; i < j->ntasks && j->running; i++) {
            task *t = &j->tasks[i];
            if (t->holder != only + 1 || t->state != T_PENDING) continue;
            goblin_tensor *ht = goblin__calloc((size_t)j->g->n_out, sizeof *ht);
            if (!ht) return;
            for (int32_t o = 0; o < j->g->n_out; o++) ht[o] = out_tensor(j, i, o, t->held[o]);
            void **held = t->held;
            t->held = NULL;
            const goblin_tensor *rs = ht;
            graph_decide(n, j, i, 1, &only, &rs);
            free_bufs(&held, j->g->n_out);
            goblin__free(ht);
            if (n->peers[only].quarantined) return;
        }
    }
}

/* Peer @p pi is quarantined: forget the results it has held for replication. */
static void drop_held(goblin_node *n, int32_t pi) {
    for (int32_t q = 0; q < n->n_jobs; q++) {
        goblin_job *j = n->jobs[q];
        if (j->kind != JOB_GRAPH) continue;
        for (int64_t i = 0; i < j->ntasks; i++)
            if (j->tasks[i].holder == pi + 1) {
                free_bufs(&j->tasks[i].held, j->g->n_out);
                j->tasks[i].holder = 0;
            }
    }
}

/* Recompute on the node what quarantined peer @p pi had accepted without a replica. */
static void recheck_graph(goblin_node *n, goblin_job *j, int32_t pi) {
    gjob *G = j->g;
    for (int64_t i = 0; i < j->ntasks && j->running; i++) {
        task *t = &j->tasks[i];
        if (t->state != T_DONE || t->accepted_peer != pi || t->replicated) continue;
        n->st.rechecked++;
        void **mine = NULL;
        goblin_err e = graph_compute(n, j, i, &mine);
        if (e) {
            job_finish(j, GOBLIN_JOB_FAILED, e, "recomputing task %lld on the node failed: %s", (long long)i,
                       goblin_strerror(e));
            return;
        }
        goblin_tensor *have = goblin__calloc((size_t)G->n_out, sizeof *have);
        bool agree = false;
        if (have) {
            gvariant *v = gvar(j, i);
            for (int32_t o = 0; o < G->n_out; o++)
                have[o] = G->comb[o] == GOBLIN_COMBINE_CONCAT ? rows_view(&G->out[o], i * G->rows, v->rows)
                                                              : out_tensor(j, i, o, t->outs[o]);
            goblin_verify_reason why;
            agree = graph_agrees(n, j, i, have, mine, &why);
        }
        if (!agree) {
            n->st.recheck_failed++;
            nlog(n, GOBLIN_LOG_WARN, "recheck of graph task %lld from a quarantined worker failed: "
                 "the node's result replaces it", (long long)i);
            if (!graph_store(j, i, mine))
                job_finish(j, GOBLIN_JOB_FAILED, GOBLIN_ENOMEM, "out of memory");
        }
        t->accepted_peer = -1;
        t->replicated = true;
        goblin__free(have);
        free_bufs(&mine, G->n_out);
    }
}

/* Combine the reduction outputs over the chunks in chunk order (CONCAT outputs are
 * already in place). Each in the output dtype's own arithmetic. */
#define COMBINE_LOOP(T)                                                                   \
    do {                                                                                  \
        T *a = acc;                                                                       \
        const T *x = src;                                                                 \
        T w = (T)((double)rows_c / (double)G->batch);                                     \
        for (int64_t e = 0; e < ne; e++) {                                                \
            switch (c) {                                                                  \
            case GOBLIN_COMBINE_SUM: a[e] = first ? x[e] : (T)(a[e] + x[e]); break;       \
            case GOBLIN_COMBINE_MEAN: a[e] = first ? (T)(w * x[e]) : (T)(a[e] + w * x[e]); break; \
            case GOBLIN_COMBINE_MAX:                                                      \
                if (first || x[e] > a[e] || x[e] != x[e]) { if (a[e] == a[e] || first) a[e] = x[e]; } \
                break;                                                                    \
            default:                                                                      \
                if (first || x[e] < a[e] || x[e] != x[e]) { if (a[e] == a[e] || first) a[e] = x[e]; } \
                break;                                                                    \
            }                                                                             \
        }                                                                                 \
    } while (0)

static goblin_err graph_combine(goblin_job *j) {
    gjob *G = j->g;
    for (int32_t o = 0; o < G->n_out; o++) {
        goblin_combine c = G->comb[o];
        if (c == GOBLIN_COMBINE_CONCAT) continue;
        goblin_tensor *dst = &G->out[o];
        int64_t ne = goblin_tensor_numel(dst);
        size_t bytes = (size_t)ne * goblin_dtype_size(dst->dtype);
        void *acc = goblin__alloc(bytes ? bytes : 1);
        if (!acc) return GOBLIN_ENOMEM;
        for (int64_t ci = 0; ci < j->ntasks; ci++) {
            const void *src = j->tasks[ci].outs ? j->tasks[ci].outs[o] : NULL;
            if (!src) {
                goblin__free(acc);
                return GOBLIN_ESTATE;
            }
            int64_t rows_c = gvar(j, ci)->rows;
            bool first = ci == 0;
            switch (dst->dtype) {
            case GOBLIN_DTYPE_F32: COMBINE_LOOP(float); break;
            case GOBLIN_DTYPE_F64: COMBINE_LOOP(double); break;
            case GOBLIN_DTYPE_I32: COMBINE_LOOP(int32_t); break;
            case GOBLIN_DTYPE_I64: COMBINE_LOOP(int64_t); break;
            default: goblin__free(acc); return GOBLIN_EDTYPE;
            }
        }
        goblin_tensor at;
        goblin_tensor_init(&at, dst->dtype, dst->rank, dst->shape, acc);
        goblin__tensor_copy(dst, &at);
        goblin__free(acc);
    }
    return GOBLIN_OK;
}

/* ---- graph jobs: API ---------------------------------------------------------------- */

void goblin_graph_job_params_default(goblin_graph_job_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    goblin_job_params_default(&p->job);
    p->verify = GOBLIN_VERIFY_REPLICATE;
    p->min_replication = 0.25;
    p->trust_halflife = 20.0;
}

static const char *combine_name(goblin_combine c) {
    static const char *nm[] = {"auto", "concat", "sum", "mean", "max", "min"};
    return (unsigned)c < GOBLIN_COMBINE_COUNT ? nm[c] : "invalid";
}

/* Do @p a and @p b serialize to the same bytes? (Every field goblin_graph_serialize
 * writes, compared the same way; far cheaper than serializing, which checksums.) */
static bool same_graph(const goblin_graph *a, const goblin_graph *b) {
    if (a->n_nodes != b->n_nodes || a->n_outputs != b->n_outputs) return false;
    for (int32_t o = 0; o < a->n_outputs; o++)
        if (a->output_ids[o] != b->output_ids[o]) return false;
    for (int32_t i = 0; i < a->n_nodes; i++)
        if (!goblin__same_node(&a->nodes[i], &b->nodes[i])) return false;
    return true;
}

/* Serialize chunk graph @p g into a new buffer, reusing the bytes of an earlier job's
 * identical chunk graph (a model run batch after batch: the checksum over its constants
 * costs more than the rest of the planning), and keeping these for later jobs. */
static goblin_err serialize_chunk(goblin_node *n, goblin_graph *g, uint8_t **buf, size_t *len) {
    if (!n) return goblin_graph_serialize(g, buf, len);
    pthread_mutex_lock(&n->ser_mu);
    for (int32_t k = 0; k < 2; k++) {
        if (n->ser[k].g && same_graph(n->ser[k].g, g)) {
            uint8_t *cp = goblin__alloc(n->ser[k].len);
            if (cp) {
                memcpy(cp, n->ser[k].buf, n->ser[k].len);
                n->ser[k].last_use = ++n->ser_clock;
                *buf = cp;
                *len = n->ser[k].len;
            }
            pthread_mutex_unlock(&n->ser_mu);
            return cp ? GOBLIN_OK : GOBLIN_ENOMEM;
        }
    }
    pthread_mutex_unlock(&n->ser_mu);
    goblin_err e = goblin_graph_serialize(g, buf, len);
    if (e) return e;
    /* Keep a copy of the graph and of its bytes: worth it only for graphs that are slow
     * to serialize, i.e. that carry constants; bounded, as the node keeps them after the job. */
    if (g->const_bytes < ((int64_t)1 << 16) || *len > ((size_t)64 << 20)) return GOBLIN_OK;
    /* A copy: the graph re-instantiated at its own batch size (the default split rule). */
    goblin_graph *keep = NULL;
    int64_t B = 0;
    if (goblin__batch_inputs(g, NULL, NULL, &B, NULL, 0) != GOBLIN_OK ||
        goblin__graph_rebatch(g, NULL, B, &keep, NULL, 0) != GOBLIN_OK)
        return GOBLIN_OK;
    if (!same_graph(keep, g)) {
        goblin_graph_free(keep);
        return GOBLIN_OK;
    }
    uint8_t *kb = goblin__alloc(*len);
    if (!kb) {
        goblin_graph_free(keep);
        return GOBLIN_OK;
    }
    memcpy(kb, *buf, *len);
    pthread_mutex_lock(&n->ser_mu);
    int32_t v = n->ser[0].last_use <= n->ser[1].last_use ? 0 : 1;
    goblin_graph_free(n->ser[v].g);
    goblin_buffer_free(n->ser[v].buf);
    n->ser[v].g = keep;
    n->ser[v].buf = kb;
    n->ser[v].len = *len;
    n->ser[v].last_use = ++n->ser_clock;
    pthread_mutex_unlock(&n->ser_mu);
    return GOBLIN_OK;
}

/* Build chunk graph @p v for @p rows rows. */
static goblin_err make_variant(goblin_node *n, gjob *G, const goblin_graph *g, const goblin_split *split,
                               int64_t rows, gvariant *v, char *msg, size_t cap) {
    memset(v, 0, sizeof *v);
    v->rows = rows;
    goblin_err e = goblin__graph_rebatch(g, split, rows, &v->g, msg, cap);
    if (e) return e;
    v->bytes = goblin__graph_task_bytes(v->g);
    v->oshape = goblin__calloc((size_t)G->n_out, sizeof *v->oshape);
    v->oop = goblin__calloc((size_t)G->n_out, sizeof *v->oop);
    v->ok = goblin__calloc((size_t)G->n_out, sizeof *v->ok);
    if (!v->oshape || !v->oop || !v->ok) return GOBLIN_ENOMEM;
    for (int32_t o = 0; o < G->n_out; o++) {
        goblin_graph_node(v->g, goblin_graph_output_id(v->g, o), NULL, &v->oshape[o], NULL, NULL);
        goblin__graph_output_contract(v->g, o, &v->oop[o], &v->ok[o]);
        const goblin_tensor *full = &G->out[o], *s = &v->oshape[o];
        bool same_rest = s->rank == full->rank;
        for (int32_t d = 1; same_rest && d < s->rank; d++) same_rest = s->shape[d] == full->shape[d];
        bool good = G->comb[o] == GOBLIN_COMBINE_CONCAT ? same_rest && s->rank >= 1 && s->shape[0] == rows
                                                        : same_rest && (s->rank == 0 || s->shape[0] == full->shape[0]);
        if (!good) {
            snprintf(msg, cap, "output %d: a chunk of %lld rows gives shape [%lld...] (rank %d), which the "
                     "%s combine cannot assemble into the output", (int)o, (long long)rows,
                     (long long)(s->rank ? s->shape[0] : 0), (int)s->rank, combine_name(G->comb[o]));
            return GOBLIN_EINVAL;
        }
    }
    return serialize_chunk(n, v->g, &v->buf, &v->len);
}

static bool same_shape_t(const goblin_tensor *a, const goblin_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int32_t d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* The caller's tensor @p t for graph input or output @p i (node @p id): the graph's dtype
 * and shape, and data unless empty. */
static goblin_err check_io(const goblin_graph *g, int32_t id, const goblin_tensor *t, const char *what,
                           int32_t i, char *msg, size_t cap) {
    goblin_tensor s;
    goblin_graph_node(g, id, NULL, &s, NULL, NULL);
    if (t->dtype != s.dtype) {
        snprintf(msg, cap, "%s %d has dtype %s, the graph's is %s", what, (int)i, goblin_dtype_name(t->dtype),
                 goblin_dtype_name(s.dtype));
        return GOBLIN_EDTYPE;
    }
    if (!same_shape_t(t, &s)) {
        snprintf(msg, cap, "%s %d does not have the graph's %s shape", what, (int)i, what);
        return GOBLIN_ESHAPE;
    }
    if (goblin_tensor_numel(t) > 0 && !t->data) {
        snprintf(msg, cap, "%s %d has no data", what, (int)i);
        return GOBLIN_EINVAL;
    }
    return GOBLIN_OK;
}

/* The caller's inputs @p in of graph @p g against its graph, split and cache ids:
 * which are batched (@p batched) and the batch size (*B). */
static goblin_err check_inputs(const goblin_graph *g, const goblin_tensor *in, const goblin_graph_job_params *jp,
                               uint8_t *batched, int64_t *B, char *msg, size_t cap) {
    int32_t ni = goblin_graph_input_count(g);
    goblin_err e;
    for (int32_t i = 0; i < ni; i++)
        if ((e = check_io(g, goblin_graph_input_id(g, i), &in[i], "input", i, msg, cap)) != GOBLIN_OK) return e;
    if ((e = goblin__batch_inputs(g, jp->split, batched, B, msg, cap)) != GOBLIN_OK) return e;
    if (*B < 1) {
        snprintf(msg, cap, "the batch is empty");
        return GOBLIN_EINVAL;
    }
    for (int32_t i = 0; i < ni; i++)
        if (batched[i] && jp->cache_ids && jp->cache_ids[i]) {
            snprintf(msg, cap, "input %d is split along the batch: it cannot have a cache id", (int)i);
            return GOBLIN_EINVAL;
        }
    return GOBLIN_OK;
}

/* Everything of a graph job that does not need the node's lock. */
static goblin_err plan_graph(goblin_node *n, gjob *G, uint64_t job_id, const goblin_graph *g, const goblin_graph_job_params *jp,
                             uint64_t mem, int32_t workers, char *msg, size_t cap) {
    int32_t ni = G->n_in, no = G->n_out;
    goblin_err e;
    if ((e = check_inputs(g, G->in, jp, G->batched, &G->batch, msg, cap)) != GOBLIN_OK) return e;
    for (int32_t o = 0; o < no; o++)
        if ((e = check_io(g, goblin_graph_output_id(g, o), &G->out[o], "output", o, msg, cap)) != GOBLIN_OK)
            return e;
    int64_t B = G->batch;
    for (int32_t i = 0; i < ni; i++) {
        uint64_t id = jp->cache_ids ? jp->cache_ids[i] : 0;
        if (!G->batched[i] && !id) {
            /* A job-scoped id, so a worker still receives the input once per job. */
            uint64_t z = (job_id + 0x632BE59BD9B4E019ull) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)i << 17);
            z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
            id = (z ^ (z >> 29)) | 1;
        }
        G->cid[i] = id;
        if (!G->batched[i] && !goblin_tensor_is_contiguous(&G->in[i])) {
            size_t bytes = out_bytes(&G->in[i]);
            if (!(G->packed[i] = goblin__alloc(bytes ? bytes : 1))) return GOBLIN_ENOMEM;
            goblin_tensor pt;
            goblin_tensor_init(&pt, G->in[i].dtype, G->in[i].rank, G->in[i].shape, G->packed[i]);
            goblin__tensor_copy(&pt, &G->in[i]);
        }
    }
    /* A probe at another batch size: which outputs follow the batch, and the memory
     * a task needs per row (task bytes are affine in the rows). */
    int64_t pr = B > 1 ? 1 : 2;
    goblin_graph *probe = NULL;
    char pm[256];
    if ((e = goblin__graph_rebatch(g, jp->split, pr, &probe, pm, sizeof pm)) != GOBLIN_OK) {
        snprintf(msg, cap, "the graph cannot be cut along the batch: %s", pm);
        return e;
    }
    for (int32_t o = 0; o < no; o++) {
        goblin_combine c = jp->combine ? jp->combine[o] : GOBLIN_COMBINE_AUTO;
        if ((unsigned)c >= GOBLIN_COMBINE_COUNT) {
            snprintf(msg, cap, "output %d: combine %d is not a goblin_combine", (int)o, (int)c);
            goblin_graph_free(probe);
            return GOBLIN_EINVAL;
        }
        goblin_combine a = goblin__graph_auto_combine(g, probe, B, pr, o);
        if (c == GOBLIN_COMBINE_AUTO && a == GOBLIN_COMBINE_AUTO) {
            snprintf(msg, cap, "output %d: AUTO cannot decide how to combine it (its leading dim does not "
                     "follow the batch and it is not a sum/mean/max/min over the batch axis); give a "
                     "combine rule", (int)o);
            goblin_graph_free(probe);
            return GOBLIN_EINVAL;
        }
        if (c == GOBLIN_COMBINE_AUTO) c = a;
        if (c == GOBLIN_COMBINE_CONCAT && a != GOBLIN_COMBINE_CONCAT) {
            snprintf(msg, cap, "output %d: CONCAT needs an output whose leading dim is the batch (%lld) "
                     "and follows it", (int)o, (long long)B);
            goblin_graph_free(probe);
            return GOBLIN_EINVAL;
        }
        goblin_dtype dt = G->out[o].dtype;
        bool fl = dt == GOBLIN_DTYPE_F32 || dt == GOBLIN_DTYPE_F64;
        bool in = dt == GOBLIN_DTYPE_I32 || dt == GOBLIN_DTYPE_I64;
        if (c != GOBLIN_COMBINE_CONCAT && !(fl || (in && c != GOBLIN_COMBINE_MEAN))) {
            snprintf(msg, cap, "output %d: %s does not combine dtype %s (f32, f64; i32, i64 except mean)",
                     (int)o, combine_name(c), goblin_dtype_name(dt));
            goblin_graph_free(probe);
            return GOBLIN_EDTYPE;
        }
        G->comb[o] = c;
    }
    uint64_t bfull = goblin__graph_task_bytes(g), bprobe = goblin__graph_task_bytes(probe);
    goblin_graph_free(probe);
    double slope = bfull > bprobe ? (double)(bfull - bprobe) / (double)(B - pr) : 0.0;
    if (B == 1) slope = 0.0;
    double base = (double)bfull - slope * (double)B;
    if (base < 0) base = 0;
    int64_t rows;
    bool fixed = jp->chunk_rows > 0;
    if (fixed) {
        rows = jp->chunk_rows < B ? jp->chunk_rows : B;
    } else {
        if (base + slope > (double)mem) {
            snprintf(msg, cap, "one row needs about %.0f bytes, more than the task memory budget of %llu",
                     base + slope, (unsigned long long)mem);
            return GOBLIN_ERANGE;
        }
        double fit = slope > 0 ? ((double)mem - base) / slope : (double)B;
        rows = fit >= (double)B ? B : (int64_t)fit;
        if (rows < 1) rows = 1;
        /* 4 tasks per worker by default (2 under SPOT: each checked task costs the node a
         * recomputation of at least one row, so fewer, larger chunks check less of the work) */
        int64_t per = G->verify == GOBLIN_VERIFY_SPOT ? 2 : 4;
        int64_t mt = jp->job.min_tasks > 0 ? jp->job.min_tasks : per * (int64_t)(workers > 0 ? workers : 1);
        if ((B + rows - 1) / rows < mt) {
            int64_t r2 = B / mt;
            rows = r2 < 1 ? 1 : r2;
        }
    }
    for (int tries = 0;; tries++) {
        G->rows = rows;
        G->nchunks = (B + rows - 1) / rows;
        int64_t last = B - (G->nchunks - 1) * rows;
        G->nv = last != rows ? 2 : 1;
        for (int32_t k = 0; k < 2; k++) {
            goblin_graph_free(G->v[k].g);
            goblin_buffer_free(G->v[k].buf);
            goblin__free(G->v[k].oshape);
            goblin__free(G->v[k].oop);
            goblin__free(G->v[k].ok);
            memset(&G->v[k], 0, sizeof G->v[k]);
        }
        for (int32_t k = 0; k < G->nv; k++) {
            char vm[320] = "";
            e = make_variant(n, G, g, jp->split, k == 0 ? rows : last, &G->v[k], vm, sizeof vm);
            if (e) {
                snprintf(msg, cap, "chunks of %lld rows: %s", (long long)(k == 0 ? rows : last),
                         vm[0] ? vm : goblin_strerror(e));
                return e;
            }
        }
        if (G->v[0].bytes <= mem) break;
        if (fixed || rows == 1 || tries >= 16) {
            snprintf(msg, cap, "a task of %lld rows needs about %llu bytes, more than the task memory budget "
                     "of %llu", (long long)rows, (unsigned long long)G->v[0].bytes, (unsigned long long)mem);
            return GOBLIN_ERANGE;
        }
        int64_t r2 = (int64_t)((double)rows * (double)mem / (double)G->v[0].bytes);
        rows = r2 < rows ? (r2 < 1 ? 1 : r2) : rows - 1;
    }
    if (G->verify == GOBLIN_VERIFY_SPOT) {
        for (int32_t o = 0; o < no; o++)
            if (G->comb[o] != GOBLIN_COMBINE_CONCAT) {
                snprintf(msg, cap, "output %d is combined by %s over the chunks: a spot-check recomputes rows, "
                         "so it needs every output cut along the batch (concat); verify with REPLICATE",
                         (int)o, combine_name(G->comb[o]));
                return GOBLIN_EINVAL;
            }
        int64_t k = jp->spot_rows > 0 ? jp->spot_rows : (G->rows / 16 < 4 ? G->rows / 16 : 4);
        G->spot_k = k < 1 ? 1 : k > G->rows ? G->rows : k;
        char sm[256] = "";
        if ((e = goblin__graph_rebatch(g, jp->split, G->spot_k, &G->spot_g, sm, sizeof sm)) != GOBLIN_OK) {
            snprintf(msg, cap, "the graph for a spot-check of %lld rows: %s", (long long)G->spot_k,
                     sm[0] ? sm : goblin_strerror(e));
            return e;
        }
    }
    return GOBLIN_OK;
}

goblin_err goblin_node_submit_graph(goblin_node *n, const goblin_graph *g, const goblin_tensor *inputs,
                                    int32_t n_inputs, goblin_tensor *outputs, int32_t n_outputs,
                                    const goblin_graph_job_params *jp, goblin_job **out) {
    if (!n || !g || !out || n_inputs < 0 || n_outputs < 0 || (n_inputs && !inputs) || (n_outputs && !outputs))
        return GOBLIN_EINVAL;
    goblin_graph_job_params defp;
    goblin_graph_job_params_default(&defp);
    if (!jp) jp = &defp;
    int32_t ni = goblin_graph_input_count(g), no = goblin_graph_output_count(g);
    if (ni != n_inputs || no != n_outputs || no < 1 || ni > GOBLIN_GRAPH_JOB_MAX_IO ||
        no > GOBLIN_GRAPH_JOB_MAX_IO) {
        nlog(n, GOBLIN_LOG_ERROR, "cannot submit graph job: the graph has %d inputs and %d outputs, got %d and %d",
             (int)ni, (int)no, (int)n_inputs, (int)n_outputs);
        return GOBLIN_EINVAL;
    }
    if ((unsigned)jp->verify >= GOBLIN_VERIFY_COUNT || jp->verify == GOBLIN_VERIFY_FREIVALDS || !(jp->min_replication > 0.0 && jp->min_replication <= 1.0) ||
        !(jp->trust_halflife > 0.0) || jp->chunk_rows < 0 || jp->job.min_tasks < 0 || jp->spot_rows < 0 ||
        jp->spot_rows > 65535) {
        nlog(n, GOBLIN_LOG_ERROR, "cannot submit graph job: bad parameters (verify, min_replication in (0, 1], "
             "trust_halflife > 0, chunk_rows >= 0, min_tasks >= 0, spot_rows in 0..65535)");
        return GOBLIN_EINVAL;
    }
    goblin_job *j = goblin__calloc(1, sizeof *j);
    if (!j) return GOBLIN_ENOMEM;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cond, NULL);
    j->kind = JOB_GRAPH;
    if (n->share) { /* inputs lent in place to in-process workers (share.h) */
        j->share = goblin__share_ref(n->share); /* a detached job outlives the node */
        j->stok = goblin__share_job_new();
    }
    j->jp = jp->job;
    gjob *G = j->g = goblin__calloc(1, sizeof *G);
    if (!G) {
        goblin_job_free(j);
        return GOBLIN_ENOMEM;
    }
    /* Large constants become cached BROADCAST inputs (hoist.c): G's inputs are then
     * the hoisted graph's, the caller's among them in their order. */
    goblin_err e = goblin__hoist_get(&n->hoist, g, GOBLIN_GRAPH_JOB_MAX_IO, &G->hoist);
    if (e) {
        goblin_job_free(j);
        return e;
    }
    const goblin_graph *jg = G->hoist ? G->hoist->g : g;
    int32_t gi = goblin_graph_input_count(jg);
    G->n_in = gi;
    G->n_out = no;
    G->verify = jp->verify;
    G->min_rep = jp->min_replication;
    G->halflife = jp->trust_halflife;
    size_t nin = (size_t)(gi > 0 ? gi : 1);
    G->in = goblin__calloc(nin, sizeof *G->in);
    G->out = goblin__calloc((size_t)no, sizeof *G->out);
    G->batched = goblin__calloc(nin, 1);
    G->cid = goblin__calloc(nin, sizeof *G->cid);
    G->packed = goblin__calloc(nin, sizeof *G->packed);
    G->comb = goblin__calloc((size_t)no, sizeof *G->comb);
    if (!G->in || !G->out || !G->batched || !G->cid || !G->packed || !G->comb) {
        goblin_job_free(j);
        return GOBLIN_ENOMEM;
    }
    memcpy(G->out, outputs, (size_t)no * sizeof *G->out);
    char msg[512] = "";
    goblin_graph_job_params hjp; /* jp for the hoisted graph: split and cache ids per its inputs */
    goblin_split *hsplit = NULL;
    uint64_t *hcid = NULL;
    if (!G->hoist) {
        if (ni) memcpy(G->in, inputs, (size_t)ni * sizeof *G->in);
    } else {
        /* The caller's inputs are checked against the caller's graph first, so that
         * messages name the caller's input numbers. */
        const goblin__hoisted *h = G->hoist;
        int64_t B = 0;
        hsplit = goblin__calloc(nin, sizeof *hsplit);
        hcid = goblin__calloc(nin, sizeof *hcid);
        if (!hsplit || !hcid) {
            e = GOBLIN_ENOMEM;
        } else if ((e = check_inputs(g, inputs, jp, G->batched, &B, msg, sizeof msg)) == GOBLIN_OK) {
            for (int32_t i = 0; i < gi; i++) {
                int32_t s = h->src[i];
                G->in[i] = s >= 0 ? inputs[s] : h->ct[-1 - s];
                hsplit[i] = s >= 0 && G->batched[s] ? GOBLIN_SPLIT_BATCH : GOBLIN_SPLIT_BROADCAST;
                hcid[i] = s >= 0 ? (jp->cache_ids ? jp->cache_ids[s] : 0) : h->cid[-1 - s];
            }
            hjp = *jp;
            hjp.split = hsplit;
            hjp.cache_ids = hcid;
            jp = &hjp;
        }
        if (e) {
            nlog(n, GOBLIN_LOG_ERROR, "cannot submit graph job: %s", msg[0] ? msg : goblin_strerror(e));
            goblin__free(hsplit);
            goblin__free(hcid);
            goblin_job_free(j);
            return e;
        }
    }
    pthread_mutex_lock(&n->mu);
    if (!n->started) {
        pthread_mutex_unlock(&n->mu);
        goblin__free(hsplit);
        goblin__free(hcid);
        goblin_job_free(j);
        return GOBLIN_ESTATE;
    }
    j->id = n->next_job_id++;
    uint64_t mem = jp->job.task_memory_bytes;
    int32_t workers = 0;
    for (int32_t i = 0; i < n->n_peers; i++) {
        if (!peer_eligible(n, i)) continue;
        workers++;
        if (!jp->job.task_memory_bytes && (mem == 0 || n->peers[i].memory < mem)) mem = n->peers[i].memory;
    }
    if (!mem) mem = (uint64_t)256 << 20;
    pthread_mutex_unlock(&n->mu);
    e = plan_graph(n, G, j->id, jg, jp, mem, workers, msg, sizeof msg);
    goblin__free(hsplit);
    goblin__free(hcid);
    if (e) {
        nlog(n, GOBLIN_LOG_ERROR, "cannot submit graph job: %s", msg[0] ? msg : goblin_strerror(e));
        goblin_job_free(j);
        return e;
    }
    j->ntasks = G->nchunks;
    j->tasks = goblin__calloc((size_t)j->ntasks, sizeof(task));
    if (!j->tasks) {
        goblin_job_free(j);
        return GOBLIN_ENOMEM;
    }
    pthread_mutex_lock(&n->mu);
    int64_t cap = n->cap_jobs;
    if (!n->started || !grow((void **)&n->jobs, &cap, n->n_jobs + 1, sizeof(goblin_job *))) {
        bool st = n->started;
        pthread_mutex_unlock(&n->mu);
        goblin_job_free(j);
        return st ? GOBLIN_ENOMEM : GOBLIN_ESTATE;
    }
    n->cap_jobs = (int32_t)cap;
    j->node = n;
    j->running = true;
    n->jobs[n->n_jobs++] = j;
    nlog(n, GOBLIN_LOG_INFO, "job %llu: graph over a batch of %lld in %lld tasks of %lld rows (%llu bytes each)",
         (unsigned long long)j->id, (long long)G->batch, (long long)j->ntasks, (long long)G->rows,
         (unsigned long long)G->v[0].bytes);
    pthread_mutex_unlock(&n->mu);
    node_wake(n);
    *out = j;
    return GOBLIN_OK;
}

goblin_err goblin_job_wait(goblin_job *j, int64_t timeout_ms) {
    if (!j) return GOBLIN_EINVAL;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    if (timeout_ms >= 0) {
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (timeout_ms % 1000) * 1000000;
        if (dl.tv_nsec >= 1000000000) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000;
        }
    }
    pthread_mutex_lock(&j->mu);
    while (j->status == GOBLIN_JOB_RUNNING) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&j->cond, &j->mu);
        } else if (pthread_cond_timedwait(&j->cond, &j->mu, &dl) == ETIMEDOUT) {
            break;
        }
    }
    goblin_err e = j->status == GOBLIN_JOB_RUNNING ? GOBLIN_ETIMEDOUT
                   : j->status == GOBLIN_JOB_DONE  ? GOBLIN_OK
                                                   : j->err;
    pthread_mutex_unlock(&j->mu);
    /* Ended: no worker may still read the caller's A and B in place once we return. */
    if (e != GOBLIN_ETIMEDOUT) goblin__share_job_end(j->share, j->stok);
    return e;
}

void goblin_job_progress(goblin_job *j, int64_t *done, int64_t *total) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    if (done) *done = j->status == GOBLIN_JOB_DONE ? j->ntasks : j->done;
    if (total) *total = j->ntasks;
    pthread_mutex_unlock(&j->mu);
}

void goblin_job_cancel(goblin_job *j) {
    if (!j) return;
    goblin_node *n = j->node;
    if (n) pthread_mutex_lock(&n->mu);
    if (j->running) job_finish(j, GOBLIN_JOB_CANCELED, GOBLIN_ECANCELED, "canceled by the caller");
    if (n) pthread_mutex_unlock(&n->mu);
    if (n) node_wake(n);
}

goblin_job_status goblin_job_get_status(goblin_job *j) {
    if (!j) return GOBLIN_JOB_FAILED;
    pthread_mutex_lock(&j->mu);
    goblin_job_status s = j->status;
    pthread_mutex_unlock(&j->mu);
    return s;
}

const char *goblin_job_error(goblin_job *j) { return j ? j->msg : ""; }

goblin_err goblin_job_plan_info(goblin_job *j, goblin_job_plan *out) {
    if (!j || !out) return GOBLIN_EINVAL;
    if (!j->plan) return GOBLIN_ENOTFOUND;
    *out = j->info;
    return GOBLIN_OK;
}

void goblin_job_free(goblin_job *j) {
    if (!j) return;
    goblin_node *n = j->node;
    if (n) {
        pthread_mutex_lock(&n->mu);
        if (j->running) job_finish(j, GOBLIN_JOB_CANCELED, GOBLIN_ECANCELED, "freed while running");
        /* Leases of this job stay in the table, moot and detached from it, until
         * answered or expired: their TASK messages may still sit in the workers'
         * pipes, and each keeps its queue slot until then (releasing the slots now
         * let the node queue more messages than a pipe holds, and nng dropped them). */
        for (int64_t i = 0; i < n->n_leases; i++)
            if (n->leases[i].job == j) {
                n->leases[i].moot = true;
                n->leases[i].job = NULL;
            }
        for (int32_t k = 0; k < n->n_jobs; k++)
            if (n->jobs[k] == j) {
                n->jobs[k] = n->jobs[--n->n_jobs];
                break;
            }
        pthread_mutex_unlock(&n->mu);
    }
    if (j->tasks)
        for (int64_t i = 0; i < j->ntasks; i++) {
            goblin__free(j->tasks[i].partial);
            if (j->g) task_free_graph_bufs(j, &j->tasks[i]);
        }
    job_drop_panels(j);
    goblin__share_job_end(j->share, j->stok);
    goblin__share_job_free(j->stok);
    goblin__share_release(j->share);
    gjob_free(j->g);
    goblin_buffer_free(j->gser);
    goblin__free(j->tasks);
    goblin__free(j->tile_done);
    goblin__plan_free(j->plan);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cond);
    goblin__free(j);
}

/* ---- counters ---------------------------------------------------------------------- */

void goblin_node_stats_get(goblin_node *n, goblin_node_stats *out) {
    if (!n || !out) return;
    pthread_mutex_lock(&n->mu);
    *out = n->st;
    pthread_mutex_unlock(&n->mu);
}

goblin_err goblin_node_worker_stats_get(goblin_node *n, int64_t i, goblin_node_worker_stats *out) {
    if (!n || !out) return GOBLIN_EINVAL;
    pthread_mutex_lock(&n->mu);
    int64_t seen = 0;
    goblin_err e = GOBLIN_EINDEX;
    for (int32_t k = 0; k < n->n_peers; k++) {
        peer *p = &n->peers[k];
        if (!p->session_id) continue;
        if (seen++ != i) continue;
        *out = (goblin_node_worker_stats){.session_id = p->session_id,
                                          .connected = p->connected && p->hello,
                                          .quarantined = p->quarantined,
                                          .threads = p->threads,
                                          .memory_bytes = p->memory,
                                          .issued = p->issued,
                                          .accepted = p->accepted,
                                          .rejected = p->rejected,
                                          .failed_leases = p->failed};
        e = GOBLIN_OK;
        break;
    }
    pthread_mutex_unlock(&n->mu);
    return e;
}
