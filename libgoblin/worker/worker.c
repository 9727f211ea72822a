/* libgoblin/worker/worker.c - a worker: dials a node, says HELLO, computes leased tasks.
 *
 * One loop in the caller's thread receives a message (no timeout: stop and pipe
 * events wake it), computes a TASK to completion and sends its RESULT followed by a
 * LEASE_REQUEST for one more task (for tiny tasks, a batch now and then: lease_topup).
 * With slots > 1 the node keeps further tasks queued in the socket, so the next
 * task's transfer overlaps this one's computation. Task data lives in memory only.
 *
 * Batches (protocol 1.1): the worker offers GOBLIN_WIRE_CAP_BATCH in its HELLO; a node
 * that takes them says so in HELLO_ACK and may then send several small TASKs in one
 * nng message. They run in order, and their RESULTs, ERRORs and LEASE_REQUESTs go back
 * together in one nng message (the loop's out-batch, w->ob) once the last has run. */
#include "goblin/worker.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "goblin/graph.h"
#include "goblin/ops.h"
#include "proto/wire.h"
#include "base/clock.h"
#include "base/log.h"
#include "net/share.h"
#include "net/transport.h"
#include "proto/wire_impl.h"
#ifdef GOBLIN_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

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
    kept_set first, prev; /* honest outputs kept for STALE / SWAP */
    uint64_t rng;
    pthread_mutex_t st_mu;
    goblin_worker_stats st;
};

static void kept_free(kept_set *k);

static const char *mb_names[GOBLIN_MISBEHAVE_COUNT] = {"none",     "wrong",  "scale", "nan",  "stale",
                                                       "swap",     "truncate", "silent", "slow", "crash"};

const char *goblin_misbehave_name(goblin_misbehave mode) {
    return (unsigned)mode < GOBLIN_MISBEHAVE_COUNT ? mb_names[mode] : NULL;
}

goblin_err goblin_misbehave_parse(const char *s, goblin_misbehave *mode, double *rate) {
    if (!s || !mode || !rate) return GOBLIN_EINVAL;
    const char *colon = strchr(s, ':');
    size_t len = colon ? (size_t)(colon - s) : strlen(s);
    for (int i = 0; i < GOBLIN_MISBEHAVE_COUNT; i++) {
        if (strlen(mb_names[i]) != len || strncmp(s, mb_names[i], len) != 0) continue;
        double r = 1.0;
        if (colon) {
            char *end = NULL;
            r = strtod(colon + 1, &end);
            if (end == colon + 1 || *end || !(r >= 0.0 && r <= 1.0)) return GOBLIN_EINVAL;
        }
        *mode = (goblin_misbehave)i;
        *rate = r;
        return GOBLIN_OK;
    }
    return GOBLIN_EINVAL;
}

void goblin_worker_params_default(goblin_worker_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->backend = goblin_backend_available(GOBLIN_BACKEND_BLIS) == GOBLIN_OK ? GOBLIN_BACKEND_BLIS
                                                                            : GOBLIN_BACKEND_REF;
    p->threads = 0;
    p->memory_bytes = (uint64_t)1 << 30;
    p->cache_bytes = p->memory_bytes / 4;
    p->cache_idle_ms = 30000;
    p->slots = 2;
    p->reconnect_min_ms = 100;
    p->reconnect_max_ms = 5000;
    p->recv_max_bytes = ((uint64_t)1 << 30) + ((uint64_t)1 << 20);
    p->slow_ms = 2000;
    p->log_level = GOBLIN_LOG_INFO;
}

static void wlog(goblin_worker *w, goblin_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void wlog(goblin_worker *w, goblin_log_level lvl, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    goblin__logv(w->p.log, w->p.log_user, w->p.log_level, lvl, fmt, ap);
    va_end(ap);
}

goblin_err goblin_worker_new(goblin_worker **out, const goblin_worker_params *p) {
    if (!out || !p) return GOBLIN_EINVAL;
    if (p->n_connect < 1 || p->n_connect > GOBLIN_WORKER_MAX_CONNECT || p->slots < 1 ||
        p->slots > GOBLIN_WIRE_MAX_SLOTS || (unsigned)p->backend >= GOBLIN_BACKEND_COUNT ||
        p->threads < 0 || p->memory_bytes == 0 || (unsigned)p->misbehave >= GOBLIN_MISBEHAVE_COUNT ||
        !(p->misbehave_rate >= 0.0 && p->misbehave_rate <= 1.0) ||
        p->token_len > GOBLIN_WIRE_MAX_TOKEN_BYTES || (p->token_len && !p->join_token) ||
        p->recv_max_bytes < GOBLIN_WIRE_HEADER_SIZE || p->recv_max_bytes > GOBLIN_WIRE_MAX_MESSAGE_BYTES ||
        (p->tls_ca_file && p->tls_fingerprint))
        return GOBLIN_EINVAL;
    for (int32_t i = 0; i < p->n_connect; i++)
        if (!p->connect[i] || !p->connect[i][0]) return GOBLIN_EINVAL;
    goblin_worker *w = goblin__calloc(1, sizeof *w);
    if (!w) return GOBLIN_ENOMEM;
    w->p = *p;
    w->free_slot = w->mru = w->lru = -1;
    for (int32_t i = 0; i < p->n_connect; i++) {
        if (!(w->urls[i] = goblin__strdup(p->connect[i]))) goto nomem;
        w->p.connect[i] = w->urls[i];
    }
    w->p.tls_ca_file = w->p.tls_fingerprint = w->p.tls_server_name = NULL;
    if ((p->tls_ca_file && !(w->tls_ca = goblin__strdup(p->tls_ca_file))) ||
        (p->tls_fingerprint && !(w->tls_fp = goblin__strdup(p->tls_fingerprint))) ||
        (p->tls_server_name && !(w->tls_name = goblin__strdup(p->tls_server_name))))
        goto nomem;
    w->p.tls_ca_file = w->tls_ca;
    w->p.tls_fingerprint = w->tls_fp;
    w->p.tls_server_name = w->tls_name;
    w->p.join_token = NULL;
    if (p->token_len) {
        if (!(w->token = goblin__memdup(p->join_token, p->token_len))) goto nomem;
        w->p.join_token = w->token;
    }
    goblin__wire_limits_default(&w->limits);
    w->limits.max_message_bytes = p->recv_max_bytes;
    w->rng = p->misbehave_seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    pthread_mutex_init(&w->st_mu, NULL);
    pthread_mutex_init(&w->rx_mu, NULL);
    pthread_mutex_init(&w->hb_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->hb_cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = w;
    return GOBLIN_OK;
nomem:
    for (int32_t i = 0; i < GOBLIN_WORKER_MAX_CONNECT; i++) goblin__free(w->urls[i]);
    goblin__free(w->tls_ca);
    goblin__free(w->tls_fp);
    goblin__free(w->tls_name);
    goblin__free(w);
    return GOBLIN_ENOMEM;
}

/* Wake the loop out of its receive (it then looks at stop and the pipe events). */
static void rx_wake(goblin_worker *w) {
    pthread_mutex_lock(&w->rx_mu);
    if (w->rx) nng_aio_abort(w->rx, NNG_ECANCELED);
    pthread_mutex_unlock(&w->rx_mu);
}

static void hb_wake(goblin_worker *w) {
    pthread_mutex_lock(&w->hb_mu);
    pthread_cond_broadcast(&w->hb_cv);
    pthread_mutex_unlock(&w->hb_mu);
}

void goblin_worker_stop(goblin_worker *w) {
    if (!w) return;
    atomic_store(&w->stop, true);
    rx_wake(w);
}

static void panel_release(panel *pn) {
    if (!pn->ref) {
        goblin__free(pn->t.data);
        return;
    }
    if (--pn->ref->refs == 0) {
        nng_msg_free(pn->ref->msg);
        goblin__free(pn->ref);
    }
    pn->ref = NULL;
}

static void gcache_drop(gcache *c) {
    goblin__free(c->blob);
    goblin_graph_free(c->g);
    memset(c, 0, sizeof *c);
}

static void cache_clear(goblin_worker *w) {
    for (int32_t i = w->mru; i >= 0; i = w->cache[i].next) panel_release(&w->cache[i]);
    w->n_cache = w->n_slots = 0;
    w->free_slot = w->mru = w->lru = -1;
    if (w->cache_ix) memset(w->cache_ix, 0, (size_t)w->ix_cap * sizeof *w->cache_ix);
    w->cache_used = 0;
    for (int32_t i = 0; i < GRAPH_CACHE; i++) gcache_drop(&w->gc[i]);
}

void goblin_worker_free(goblin_worker *w) {
    if (!w) return;
    cache_clear(w);
    goblin__free(w->cache);
    goblin__free(w->cache_ix);
    kept_free(&w->first);
    kept_free(&w->prev);
    goblin__share_release(w->share);
    for (int32_t i = 0; i < GOBLIN_WORKER_MAX_CONNECT; i++) goblin__free(w->urls[i]);
    goblin__free(w->tls_ca);
    goblin__free(w->tls_fp);
    goblin__free(w->tls_name);
    goblin__free(w->token);
    pthread_mutex_destroy(&w->st_mu);
    pthread_mutex_destroy(&w->rx_mu);
    pthread_mutex_destroy(&w->hb_mu);
    pthread_cond_destroy(&w->hb_cv);
    goblin__free(w);
}

void goblin_worker_stats_get(goblin_worker *w, goblin_worker_stats *out) {
    if (!w || !out) return;
    pthread_mutex_lock(&w->st_mu);
    *out = w->st;
    pthread_mutex_unlock(&w->st_mu);
}

#define BUMP(w, field)                      \
    do {                                    \
        pthread_mutex_lock(&(w)->st_mu);    \
        (w)->st.field++;                    \
        pthread_mutex_unlock(&(w)->st_mu);  \
    } while (0)

/* The cache gauges of goblin_worker_stats, from the loop thread. */
static void cache_gauges(goblin_worker *w) {
    int64_t n = w->n_cache, bytes = (int64_t)w->cache_used;
    pthread_mutex_lock(&w->st_mu);
    w->st.cached_inputs = n;
    w->st.cached_bytes = bytes;
    pthread_mutex_unlock(&w->st_mu);
}

/* Does the worker keep inputs or compiled graphs for reuse? */
static bool cache_held(const goblin_worker *w) {
    bool held = w->n_cache > 0;
    for (int32_t i = 0; i < GRAPH_CACHE; i++) held = held || w->gc[i].blob;
    return held;
}

/* Idle for cache_idle_ms with inputs kept: drop them (and the compiled graphs). */
static void cache_expire(goblin_worker *w) {
    if (!w->p.cache_idle_ms || !cache_held(w)) return;
    int64_t idle = goblin__now_ms() - w->last_task_ms;
    if (idle < (int64_t)w->p.cache_idle_ms) return;
    int32_t n = w->n_cache;
    size_t bytes = w->cache_used;
    cache_clear(w);
    BUMP(w, cache_expiries);
    cache_gauges(w);
    wlog(w, GOBLIN_LOG_INFO, "no task for %.1f s: dropped the %d input(s) (%zu bytes) kept for reuse",
         (double)idle / 1000.0, (int)n, bytes);
}

static uint64_t rng_next(goblin_worker *w) {
    uint64_t z = (w->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_u01(goblin_worker *w) { return (double)(rng_next(w) >> 11) * 0x1p-53; }

/* ---- panel cache ----------------------------------------------------------------- */

static uint32_t id_hash(uint64_t id) {
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (uint32_t)id;
}

/* The index position of @p id, or of the empty position where it would go. */
static uint32_t ix_pos(const goblin_worker *w, uint64_t id) {
    uint32_t m = w->ix_cap - 1, h = id_hash(id) & m;
    while (w->cache_ix[h] && w->cache[w->cache_ix[h] - 1].id != id) h = (h + 1) & m;
    return h;
}

/* Rebuild the index with room for @p n panels at most half full. */
static bool ix_grow(goblin_worker *w, int32_t n) {
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)n) cap *= 2;
    if (cap <= w->ix_cap) return true;
    int32_t *ix = goblin__calloc(cap, sizeof *ix);
    if (!ix) return false;
    goblin__free(w->cache_ix);
    w->cache_ix = ix;
    w->ix_cap = cap;
    for (int32_t i = w->mru; i >= 0; i = w->cache[i].next) w->cache_ix[ix_pos(w, w->cache[i].id)] = i + 1;
    return true;
}

/* Remove @p id's entry from the index (backward-shift deletion: no tombstones). */
static void ix_remove(goblin_worker *w, uint64_t id) {
    uint32_t m = w->ix_cap - 1, h = ix_pos(w, id);
    if (!w->cache_ix[h]) return;
    w->cache_ix[h] = 0;
    for (uint32_t j = (h + 1) & m; w->cache_ix[j]; j = (j + 1) & m) {
        uint32_t home = id_hash(w->cache[w->cache_ix[j] - 1].id) & m;
        /* the entry at j may move to the hole at h if its home is not in (h, j] */
        if (((j - home) & m) >= ((j - h) & m)) {
            w->cache_ix[h] = w->cache_ix[j];
            w->cache_ix[j] = 0;
            h = j;
        }
    }
}

static void lru_unlink(goblin_worker *w, int32_t i) {
    panel *p = &w->cache[i];
    if (p->prev >= 0) w->cache[p->prev].next = p->next;
    else w->mru = p->next;
    if (p->next >= 0) w->cache[p->next].prev = p->prev;
    else w->lru = p->prev;
}

static void lru_front(goblin_worker *w, int32_t i) {
    panel *p = &w->cache[i];
    p->prev = -1;
    p->next = w->mru;
    if (w->mru >= 0) w->cache[w->mru].prev = i;
    w->mru = i;
    if (w->lru < 0) w->lru = i;
}

static panel *cache_find(goblin_worker *w, uint64_t id) {
    if (!w->n_cache || !id) return NULL;
    int32_t s = w->cache_ix[ix_pos(w, id)] - 1;
    if (s < 0) return NULL;
    if (w->mru != s) {
        lru_unlink(w, s);
        lru_front(w, s);
    }
    return &w->cache[s];
}

/* Drop the least recently used panel. */
static void cache_evict(goblin_worker *w) {
    int32_t s = w->lru;
    panel *p = &w->cache[s];
    ix_remove(w, p->id);
    lru_unlink(w, s);
    w->cache_used -= p->bytes;
    panel_release(p);
    p->id = 0;
    p->next = w->free_slot;
    w->free_slot = s;
    w->n_cache--;
}

/* Panels kept at most. A node names only inputs it remembers having sent (the last 32
 * of each kind per worker: docs/runtime.md), so older ones are never asked for again: a
 * training run, whose weights get new ids every round, would otherwise keep every
 * round's weights until cache_bytes ran out. */
#define CACHE_MAX_PANELS 256

/* Keep @p t under @p id, evicting least recently used panels to stay within
 * cache_bytes and CACHE_MAX_PANELS: a copy, or with @p ref (t's data lies in ref's
 * message) a reference to the message. A panel larger than the cache is not kept.
 * Returns whether @p ref was taken. */
static bool cache_put(goblin_worker *w, uint64_t id, const goblin_tensor *t, msgref *ref) {
    size_t bytes = (size_t)goblin_tensor_numel(t) * goblin_dtype_size(t->dtype);
    if (!id || bytes == 0 || bytes > w->p.cache_bytes || cache_find(w, id)) return false;
    while ((w->cache_used + bytes > w->p.cache_bytes || w->n_cache >= CACHE_MAX_PANELS) && w->n_cache > 0)
        cache_evict(w);
    if (w->free_slot < 0 && w->n_slots == w->cap_cache) {
        int32_t nc = w->cap_cache ? w->cap_cache * 2 : 16;
        panel *np = goblin__alloc((size_t)nc * sizeof *np);
        if (!np) return false;
        if (w->cache) memcpy(np, w->cache, (size_t)w->n_slots * sizeof *np);
        goblin__free(w->cache);
        w->cache = np;
        w->cap_cache = nc;
    }
    if (!ix_grow(w, w->n_cache + 1)) return false;
    void *d = ref ? t->data : goblin__memdup(t->data, bytes);
    if (!d) return false;
    int32_t s = w->free_slot;
    if (s >= 0) w->free_slot = w->cache[s].next;
    else s = w->n_slots++;
    panel *pn = &w->cache[s];
    pn->id = id;
    pn->t = *t;
    pn->t.data = d;
    pn->ref = ref;
    if (ref) ref->refs++;
    pn->bytes = bytes;
    lru_front(w, s);
    w->cache_ix[ix_pos(w, id)] = s + 1;
    w->n_cache++;
    w->cache_used += bytes;
    return ref != NULL;
}

/* ---- sending ------------------------------------------------------------------------ */

static int wencode(const goblin__wire_msg *m, nng_msg **out) {
    size_t len = 0;
    if (goblin__wire_encoded_size(m, &len)) return NNG_EINVAL;
    nng_msg *msg;
    int rv = nng_msg_alloc(&msg, len);
    if (rv) return rv;
    size_t wrote;
    if (goblin__wire_encode_into(m, nng_msg_body(msg), len, &wrote)) {
        nng_msg_free(msg);
        return NNG_EINVAL;
    }
    *out = msg;
    return 0;
}

/* Send now (any thread). */
static int wsend(goblin_worker *w, const goblin__wire_msg *m) {
    nng_msg *msg = NULL;
    int rv = wencode(m, &msg);
    if (rv) return rv;
    if ((rv = nng_sendmsg(w->sock, msg, 0)) != 0) nng_msg_free(msg);
    return rv;
}

/* The out-batch goes to the node (loop thread). */
static int ob_flush(goblin_worker *w) {
    nng_msg *ob = w->ob;
    w->ob = NULL;
    if (!ob) return 0;
    int rv = nng_sendmsg(w->sock, ob, 0);
    if (rv) {
        nng_msg_free(ob);
        wlog(w, GOBLIN_LOG_WARN, "cannot send results: %s", nng_strerror(rv));
    }
    return rv;
}

/* The out-batch stays under this many bytes (a message over it goes alone). */
#define OB_MAX_BYTES ((size_t)4 << 20)

/* Send @p msg (taken) from the loop thread: appended to the out-batch while one is
 * being collected, else at once. */
static int wout(goblin_worker *w, nng_msg *msg) {
    if (!w->ob_on) {
        int rv = nng_sendmsg(w->sock, msg, 0);
        if (rv) nng_msg_free(msg);
        return rv;
    }
    size_t cap = w->node_max && w->node_max < OB_MAX_BYTES ? (size_t)w->node_max : OB_MAX_BYTES;
    size_t len = nng_msg_len(msg);
    if (w->ob) {
        size_t cur = nng_msg_len(w->ob);
        size_t at = cur + (GOBLIN_WIRE_BATCH_ALIGN - cur % GOBLIN_WIRE_BATCH_ALIGN) % GOBLIN_WIRE_BATCH_ALIGN;
        if (at + len <= cap && nng_msg_realloc(w->ob, at + len) == 0) {
            uint8_t *b = nng_msg_body(w->ob);
            memset(b + cur, 0, at - cur);
            memcpy(b + at, nng_msg_body(msg), len);
            nng_msg_free(msg);
            return 0;
        }
        ob_flush(w);
    }
    w->ob = msg;
    return 0;
}

/* Encode and send @p m from the loop thread (wout). */
static int lsend(goblin_worker *w, const goblin__wire_msg *m) {
    nng_msg *msg = NULL;
    int rv = wencode(m, &msg);
    return rv ? rv : wout(w, msg);
}

static void send_lease_request(goblin_worker *w, uint32_t slots) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_LEASE_REQUEST);
    m.body.lease_request.slots = slots;
    lsend(w, &m);
}

static void send_error(goblin_worker *w, uint64_t task_id, goblin_err code, const char *text) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_ERROR);
    m.body.error.code = code;
    m.body.error.task_id = task_id;
    m.body.error.message = text;
    lsend(w, &m);
}

static void send_hello(goblin_worker *w) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HELLO);
    if (w->p.catalog_version_override) m.body.hello.catalog_version = w->p.catalog_version_override;
    m.body.hello.backends = (1u << w->p.backend) | GOBLIN_WIRE_CAP_BATCH;
    m.body.hello.threads = (uint32_t)(w->p.threads > 0 ? w->p.threads : 1);
    m.body.hello.memory_bytes = w->p.memory_bytes;
    m.body.hello.token_len = w->p.token_len;
    m.body.hello.token = w->p.join_token;
    wsend(w, &m);
}

/* ---- tasks ------------------------------------------------------------------------- */

/* A kept set of honest outputs (for STALE / SWAP). */
static void kept_free(kept_set *k) {
    for (int32_t i = 0; i < k->n; i++) goblin__free(k->t[i].data);
    goblin__free(k->t);
    k->t = NULL;
    k->n = 0;
}

static void keep_outputs(kept_set *k, const goblin_tensor *o, int32_t n) {
    goblin_tensor *t = goblin__calloc((size_t)(n > 0 ? n : 1), sizeof *t);
    if (!t) return;
    for (int32_t i = 0; i < n; i++) {
        size_t bytes = (size_t)goblin_tensor_numel(&o[i]) * goblin_dtype_size(o[i].dtype);
        t[i] = o[i];
        t[i].data = goblin__memdup(o[i].data, bytes ? bytes : 1);
        if (!t[i].data) {
            for (int32_t q = 0; q < i; q++) goblin__free(t[q].data);
            goblin__free(t);
            return;
        }
    }
    kept_free(k);
    k->t = t;
    k->n = n;
}

/* The RESULT message of task @p task_id, laid out before the evaluation: each of the
 * @p no outputs of @p g gets a descriptor in @p out whose data lies inside the message
 * body, so the evaluation writes the result where it is sent from (no output buffer,
 * no copy into the message). NULL (and @p out left zeroed) when that cannot be done:
 * the caller then evaluates into buffers of its own and encodes them as usual. */
static nng_msg *result_msg(const goblin_graph *g, uint64_t task_id, goblin_tensor *out, int32_t no) {
    if (no < 1 || no > GOBLIN_WIRE_MAX_TENSORS) return NULL;
    for (int32_t i = 0; i < no; i++)
        if (goblin_graph_node(g, goblin_graph_output_id(g, i), NULL, &out[i], NULL, NULL) != GOBLIN_OK) {
            memset(out, 0, (size_t)no * sizeof *out);
            return NULL;
        }
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_RESULT);
    m.request_id = task_id;
    m.body.result.task_id = task_id;
    m.body.result.n_outputs = (uint32_t)no;
    m.body.result.outputs = out;
    size_t len = 0, wrote = 0;
    size_t *off = goblin__alloc((size_t)no * sizeof *off);
    nng_msg *msg = NULL;
    bool ok = off && goblin__wire_layout_size(&m, no, &len) == GOBLIN_OK && nng_msg_alloc(&msg, len) == 0;
    if (ok && goblin__wire_encode_layout(&m, nng_msg_body(msg), len, &wrote, off, no) != GOBLIN_OK) ok = false;
    for (int32_t i = 0; ok && i < no; i++) {
        uint8_t *d = (uint8_t *)nng_msg_body(msg) + off[i];
        size_t es = goblin_dtype_size(out[i].dtype);
        if (es == 0 || (uintptr_t)d % es) ok = false; /* kernels need aligned elements */
        out[i].data = d;
    }
    goblin__free(off);
    if (!ok) {
        if (msg) nng_msg_free(msg);
        memset(out, 0, (size_t)no * sizeof *out);
        return NULL;
    }
    return msg;
}

/* Returns false when the worker must end now (CRASH). Every answer (RESULT or
 * ERROR) is followed by a LEASE_REQUEST for one more task; SILENT sends neither. */
static bool run_task_inner(goblin_worker *w, goblin__wire_task *t, nng_msg *nm, msgref **refp, bool *answered);

/* Lease requests. The worker keeps `slots` leases asked for ahead (w->credit: asked
 * and not yet received). After a task of normal size it asks for one more, as the task
 * ends. After a tiny task (under TINY_TASK_NS) it asks for LEASE_BATCH at once, when
 * fewer than `slots` are left: one LEASE_REQUEST per LEASE_BATCH tasks instead of one
 * per task, a third of the messages of a tiny task. The node keeps at most 2 TASK
 * messages outstanding per worker whatever it asked for (MAX_IN_FLIGHT in node.c); to
 * a worker that takes batches, each may hold up to 16 small TASKs (docs/runtime.md). */
#define TINY_TASK_NS 1000000
#define RESYNC_MS 1000 /* idle with leases asked for: ask again after this long */
#define LEASE_BATCH 16

static void lease_topup(goblin_worker *w, int64_t task_ns) {
    if (w->credit >= w->p.slots) return;
    uint32_t ask = task_ns < TINY_TASK_NS ? LEASE_BATCH : 1;
    send_lease_request(w, ask);
    w->credit += ask;
}

/* @p t was decoded zero-copy from @p nm (with other tasks, in a batch); the panel
 * cache may keep panels inside it through *refp (made on first use, with one
 * reference held by the loop, which drops it once the whole message is done). */
static bool run_task(goblin_worker *w, goblin__wire_task *t, nng_msg *nm, msgref **refp) {
    bool answered = true;
    int64_t t0 = goblin__now_ns();
    if (w->credit > 0) w->credit--;
    bool keep = run_task_inner(w, t, nm, refp, &answered);
    if (keep && answered) lease_topup(w, goblin__now_ns() - t0);
    return keep;
}

static void fail_task(goblin_worker *w, uint64_t id, goblin_err e, const char *text) {
    send_error(w, id, e, text);
    BUMP(w, tasks_failed);
}

/* Cache the inputs that came with task @p t (directory @p dv, @p ni inputs): by
 * reference to the message @p nm when they lie in it and make up at least half of it
 * (so a kept message is mostly cached panels), else by copy. */
static void cache_inputs(goblin_worker *w, goblin__wire_task *t, const int64_t *dv, int32_t ni, nng_msg *nm,
                         msgref **refp) {
    const uint8_t *body = nm ? nng_msg_body(nm) : NULL;
    size_t blen = nm ? nng_msg_len(nm) : 0;
    size_t inside = 0;
    for (int32_t k = 0; k < ni; k++) {
        if (dv[ni + k] || !dv[k]) continue;
        size_t bytes = (size_t)goblin_tensor_numel(&t->inputs[k]) * goblin_dtype_size(t->inputs[k].dtype);
        const uint8_t *d = t->inputs[k].data;
        if (body && d >= body && d + bytes <= body + blen && bytes <= w->p.cache_bytes) inside += bytes;
    }
    msgref *ref = NULL;
    if (inside > 0 && inside >= blen / 2) {
        if (!*refp && (*refp = goblin__calloc(1, sizeof **refp))) {
            (*refp)->msg = nm;
            (*refp)->refs = 1; /* the loop's: an eviction must not free the message */
        }
        ref = *refp;
    }
    for (int32_t k = 0; k < ni; k++) {
        if (dv[ni + k] || !dv[k]) continue;
        const uint8_t *d = t->inputs[k].data;
        size_t bytes = (size_t)goblin_tensor_numel(&t->inputs[k]) * goblin_dtype_size(t->inputs[k].dtype);
        bool in_msg = ref && d >= body && d + bytes <= body + blen;
        cache_put(w, (uint64_t)dv[k], &t->inputs[k], in_msg ? ref : NULL);
    }
}

/* The graph of task @p t: a cached one when its bytes match a kept encoding (*owned
 * false), else freshly decoded (and kept when it fits the cache budget). */
static goblin_err task_graph(goblin_worker *w, const goblin__wire_task *t, goblin_graph **g, bool *owned,
                             char *err, size_t cap) {
    size_t len = (size_t)t->graph_len;
    for (int32_t i = 0; i < GRAPH_CACHE; i++) {
        gcache *c = &w->gc[i];
        if (c->g && c->len == len && memcmp(c->blob, t->graph, len) == 0) {
            c->last_use = ++w->use_clock;
            *g = c->g;
            *owned = false;
            return GOBLIN_OK;
        }
    }
    goblin_err e = goblin_graph_deserialize(t->graph, len, NULL, g, err, cap);
    if (e) return e;
    *owned = true;
    /* An entry holds the blob copy and the decoded constants, about twice the encoding:
     * the GRAPH_CACHE entries together stay under half the panel cache budget. */
    if (len == 0 || len > w->p.cache_bytes / (4 * GRAPH_CACHE)) return GOBLIN_OK;
    uint8_t *blob = goblin__alloc(len);
    if (!blob) return GOBLIN_OK;
    memcpy(blob, t->graph, len);
    gcache *v = &w->gc[0];
    for (int32_t i = 1; i < GRAPH_CACHE; i++)
        if (w->gc[i].last_use < v->last_use) v = &w->gc[i];
    gcache_drop(v);
    v->blob = blob;
    v->len = len;
    v->g = *g;
    v->last_use = ++w->use_clock;
    *owned = false;
    return GOBLIN_OK;
}

/* An input "left out" that is not in the cache: a view the node of this process lent in
 * place (share.h), its job held open in *held until goblin__share_drop. */
static bool take_shared(goblin_worker *w, uint64_t id, goblin_tensor *out, goblin__share_job **held,
                        bool holding) {
    if (w->share && goblin__share_take(w->share, id, out, held)) return true;
    /* None yet, or the node it came from was replaced by another on the same URL (not
     * while this task holds views of the current one). */
    if (holding) return false;
    goblin__share *cur = NULL;
    for (int32_t i = 0; !cur && i < GOBLIN_WORKER_MAX_CONNECT; i++)
        if (w->p.connect[i] && strncmp(w->p.connect[i], "inproc://", 9) == 0)
            cur = goblin__share_find(w->p.connect[i]);
    if (cur == w->share) {
        goblin__share_release(cur);
        return false;
    }
    goblin__share_release(w->share);
    w->share = cur;
    return cur && goblin__share_take(cur, id, out, held);
}

static void drop_shared(goblin_worker *w, goblin__share_job **held, int32_t n) {
    for (int32_t k = 0; held && k < n; k++) {
        goblin__share_drop(w->share, held[k]);
        held[k] = NULL;
    }
}

static bool run_task_inner(goblin_worker *w, goblin__wire_task *t, nng_msg *nm, msgref **refp, bool *answered) {
    goblin_graph *g = NULL;
    char err[256];
    bool owned = false;
    goblin_err e = task_graph(w, t, &g, &owned, err, sizeof err);
    if (e) {
        fail_task(w, t->task_id, e, err);
        return true;
    }
    int32_t ni = goblin_graph_input_count(g), no = goblin_graph_output_count(g);
    /* Inputs, then optionally the cache directory (docs/runtime.md): i64[2 * ni] =
     * {cache id of each input (0: none)..., flag of each input (non-zero: the data was
     * left out, take it from the cache)...}. */
    bool has_dir = (int64_t)t->n_inputs == (int64_t)ni + 1;
    if ((int64_t)t->n_inputs != (int64_t)ni && !has_dir) {
        if (owned) goblin_graph_free(g);
        fail_task(w, t->task_id, GOBLIN_EINVAL, "the task's input count does not match its graph");
        return true;
    }
    const int64_t *dv = NULL;
    if (has_dir) {
        const goblin_tensor *d = &t->inputs[ni];
        if (d->dtype != GOBLIN_DTYPE_I64 || d->rank != 1 || d->shape[0] != 2 * (int64_t)ni) {
            if (owned) goblin_graph_free(g);
            fail_task(w, t->task_id, GOBLIN_EINVAL, "bad cache directory");
            return true;
        }
        dv = d->data;
    }
    goblin_tensor *in = goblin__calloc((size_t)(ni + 1), sizeof *in);
    goblin_tensor *out = goblin__calloc((size_t)(no + 1), sizeof *out);
    goblin__share_job **held = goblin__calloc((size_t)(ni + 1), sizeof *held);
    if (!in || !out || !held) {
        goblin__free(in);
        goblin__free(out);
        goblin__free(held);
        if (owned) goblin_graph_free(g);
        fail_task(w, t->task_id, GOBLIN_ENOMEM, "out of memory");
        return true;
    }
    bool holding = false;
    for (int32_t k = 0; k < ni; k++) {
        in[k] = t->inputs[k];
        if (dv && dv[ni + k]) {
            panel *pn = cache_find(w, (uint64_t)dv[k]);
            if (pn) {
                BUMP(w, cache_hits);
                in[k] = pn->t;
            } else if (take_shared(w, (uint64_t)dv[k], &in[k], &held[k], holding)) {
                holding = true;
                BUMP(w, inputs_in_place);
            } else {
                BUMP(w, cache_misses);
                drop_shared(w, held, ni);
                send_error(w, t->task_id, GOBLIN_ENOTFOUND, "cached input not in cache");
                goblin__free(in);
                goblin__free(out);
                goblin__free(held);
                if (owned) goblin_graph_free(g);
                return true;
            }
        }
    }
    goblin_misbehave mode = GOBLIN_MISBEHAVE_NONE;
    if (w->p.misbehave != GOBLIN_MISBEHAVE_NONE && rng_u01(w) < w->p.misbehave_rate) mode = w->p.misbehave;
    /* STALE and SWAP replay an earlier honest result: until there is one, answer honestly
     * (and keep it), so that even at rate 1.0 they replay from the second task on. */
    if ((mode == GOBLIN_MISBEHAVE_STALE && !w->first.n) || (mode == GOBLIN_MISBEHAVE_SWAP && !w->prev.n))
        mode = GOBLIN_MISBEHAVE_NONE;
    if (mode == GOBLIN_MISBEHAVE_CRASH) {
        BUMP(w, misbehaved);
        drop_shared(w, held, ni);
        goblin__free(held);
        if (owned) goblin_graph_free(g);
        goblin__free(in);
        goblin__free(out);
        wlog(w, GOBLIN_LOG_WARN, "misbehave: crashing mid-task %llu", (unsigned long long)t->task_id);
        if (w->p.crash_hook) {
            w->p.crash_hook(w->p.crash_user);
        } else if (w->p.crash_may_exit) {
            _exit(3);
        }
        return false;
    }
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.backend = w->p.backend;
    ep.threads = w->p.threads;
    /* An honest worker computes straight into its RESULT message (misbehaving ones,
     * which alter or replace outputs, keep buffers of their own). */
    nng_msg *rmsg = w->p.misbehave == GOBLIN_MISBEHAVE_NONE ? result_msg(g, t->task_id, out, no) : NULL;
    e = goblin_graph_eval(g, &ep, in, ni, out, no);
    drop_shared(w, held, ni); /* the caller's memory is not read after this */
    goblin__free(held);
    if (owned) goblin_graph_free(g);
    if (dv) {
        /* Cache the inputs that came with the task only now: an eviction before the
         * evaluation could free a cached input this very task is using. */
        cache_inputs(w, t, dv, ni, nm, refp);
    }
    goblin__free(in);
    if (e) {
        if (rmsg) nng_msg_free(rmsg);
        else
            for (int32_t i = 0; i < no; i++) goblin_buffer_free(out[i].data);
        goblin__free(out);
        fail_task(w, t->task_id, e, "task evaluation failed");
        return true;
    }
    if (rmsg) {
        goblin__free(out);
        int rv = wout(w, rmsg);
        if (rv) wlog(w, GOBLIN_LOG_WARN, "cannot send result: %s", nng_strerror(rv));
        BUMP(w, tasks_done);
        return true;
    }
    goblin_tensor *send_t = out;
    int32_t n_out = no;
    goblin_tensor *o0 = no > 0 ? &out[0] : NULL;
    int64_t ne = o0 ? goblin_tensor_numel(o0) : 0;
    bool f32 = o0 && o0->dtype == GOBLIN_DTYPE_F32, f64 = o0 && o0->dtype == GOBLIN_DTYPE_F64;
    if (mode != GOBLIN_MISBEHAVE_NONE) BUMP(w, misbehaved);
    goblin_tensor trunc0;
    switch (mode) {
    case GOBLIN_MISBEHAVE_WRONG:
        for (int64_t i = 0; i < ne; i++) {
            double v = rng_u01(w) * 2.0 - 1.0;
            if (f32) ((float *)o0->data)[i] = (float)v;
            else if (f64) ((double *)o0->data)[i] = v;
            else ((uint8_t *)o0->data)[i * (int64_t)goblin_dtype_size(o0->dtype)] ^= 1;
        }
        break;
    case GOBLIN_MISBEHAVE_SCALE:
        for (int64_t i = 0; i < ne; i++) {
            if (f32) ((float *)o0->data)[i] *= 1.001f;
            else if (f64) ((double *)o0->data)[i] *= 1.001;
        }
        break;
    case GOBLIN_MISBEHAVE_NAN:
        if (ne > 0 && (f32 || f64)) {
            int64_t i = (int64_t)(rng_next(w) % (uint64_t)ne);
            if (f32) ((float *)o0->data)[i] = NAN;
            else ((double *)o0->data)[i] = NAN;
        }
        break;
    case GOBLIN_MISBEHAVE_STALE:
        if (w->first.n) {
            send_t = w->first.t;
            n_out = w->first.n;
        }
        break;
    case GOBLIN_MISBEHAVE_SWAP:
        if (w->prev.n) {
            send_t = w->prev.t;
            n_out = w->prev.n;
        }
        break;
    case GOBLIN_MISBEHAVE_TRUNCATE:
        if (!o0) break;
        trunc0 = *o0;
        if (trunc0.rank >= 1 && trunc0.shape[0] > 1) trunc0.shape[0]--;
        else if (trunc0.rank == 2 && trunc0.shape[1] > 1) trunc0.shape[1]--;
        else {
            n_out = 0;
            break;
        }
        /* Send output 0 one row short (the rest of the outputs unchanged). */
        {
            goblin_tensor *tt = goblin__calloc((size_t)no, sizeof *tt);
            if (tt) {
                memcpy(tt, out, (size_t)no * sizeof *tt);
                tt[0] = trunc0;
                send_t = tt;
            } else {
                n_out = 0;
            }
        }
        break;
    case GOBLIN_MISBEHAVE_SILENT:
        wlog(w, GOBLIN_LOG_DEBUG, "misbehave: silent on task %llu", (unsigned long long)t->task_id);
        for (int32_t i = 0; i < no; i++) goblin_buffer_free(out[i].data);
        goblin__free(out);
        *answered = false;
        return true;
    case GOBLIN_MISBEHAVE_SLOW:
        for (uint32_t waited = 0; waited < w->p.slow_ms && !atomic_load(&w->stop); waited += 10)
            usleep(10000);
        break;
    default:
        break;
    }
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_RESULT);
    m.request_id = t->task_id;
    m.body.result.task_id = t->task_id;
    m.body.result.n_outputs = (uint32_t)n_out;
    m.body.result.outputs = send_t;
    int rv = lsend(w, &m);
    if (rv) wlog(w, GOBLIN_LOG_WARN, "cannot send result: %s", nng_strerror(rv));
    if (send_t != out && send_t != w->first.t && send_t != w->prev.t) goblin__free(send_t);
    /* Keep honest outputs for STALE / SWAP (only when that mode is configured). */
    if (w->p.misbehave == GOBLIN_MISBEHAVE_STALE && !w->first.n && mode == GOBLIN_MISBEHAVE_NONE)
        keep_outputs(&w->first, out, no);
    if (w->p.misbehave == GOBLIN_MISBEHAVE_SWAP && mode == GOBLIN_MISBEHAVE_NONE)
        keep_outputs(&w->prev, out, no);
    for (int32_t i = 0; i < no; i++) goblin_buffer_free(out[i].data);
    goblin__free(out);
    BUMP(w, tasks_done);
    return true;
}

/* ---- the loop ---------------------------------------------------------------------- */

static void wpipe_cb(nng_pipe pp, nng_pipe_ev ev, void *arg) {
    goblin_worker *w = arg;
    (void)pp;
    if (ev == NNG_PIPE_EV_ADD_POST) {
        atomic_fetch_add(&w->pipes_added, 1);
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        atomic_store(&w->hb_ms, 0); /* no HEARTBEAT before the next HELLO */
        atomic_fetch_add(&w->pipes_removed, 1);
    } else {
        return;
    }
    rx_wake(w);
}

/* Sends a HEARTBEAT every hb_ms (as HELLO_ACK asked), also while the loop computes. */
/* It sleeps until the next HEARTBEAT is due (not in 10 ms steps: with hundreds of
 * workers in one process those wake-ups showed in the profile); HELLO_ACK and the end
 * of the loop wake it. */
static void *heartbeat_main(void *arg) {
    goblin_worker *w = arg;
    int64_t last = goblin__now_ms();
    pthread_mutex_lock(&w->hb_mu);
    while (!atomic_load(&w->hb_quit)) {
        unsigned hb = atomic_load(&w->hb_ms);
        int64_t now = goblin__now_ms();
        if (hb && now - last >= (int64_t)hb) {
            pthread_mutex_unlock(&w->hb_mu);
            goblin__wire_msg m;
            goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HEARTBEAT);
            wsend(w, &m);
            last = now;
            pthread_mutex_lock(&w->hb_mu);
            continue;
        }
        int64_t wait_ms = hb ? last + (int64_t)hb - now : 100;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t ns = ts.tv_nsec + (wait_ms % 1000) * 1000000;
        ts.tv_sec += (time_t)(wait_ms / 1000 + ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        pthread_cond_timedwait(&w->hb_cv, &w->hb_mu, &ts);
    }
    pthread_mutex_unlock(&w->hb_mu);
    return NULL;
}

static bool worker_stopping(void *user) {
    goblin_worker *w = user;
    return atomic_load(&w->stop);
}

/* A GPU worker without a usable device offers the CPU instead; with one, the memory
 * it advertises never exceeds 90% of what the device has free. */
static void choose_backend(goblin_worker *w) {
    if (w->p.backend != GOBLIN_BACKEND_CUDA) return;
    goblin_err ae = goblin_backend_available(GOBLIN_BACKEND_CUDA);
    if (ae) {
        goblin_backend_kind cpu = goblin_backend_available(GOBLIN_BACKEND_BLIS) == GOBLIN_OK
                                      ? GOBLIN_BACKEND_BLIS : GOBLIN_BACKEND_REF;
        wlog(w, GOBLIN_LOG_WARN, "CUDA backend unavailable (%s: %s): offering the CPU (%s) only",
             goblin_err_name(ae), goblin_strerror(ae), goblin_backend_name(cpu));
        w->p.backend = cpu;
        return;
    }
#ifdef GOBLIN_HAVE_CUDA
    uint64_t free_b = 0, total_b = 0;
    if (goblin__cuda_device_memory(0, &free_b, &total_b) == GOBLIN_OK && free_b > 0 &&
        w->p.memory_bytes > free_b / 10 * 9) {
        wlog(w, GOBLIN_LOG_INFO, "memory budget lowered to 90%% of the GPU's free %llu bytes",
             (unsigned long long)free_b);
        w->p.memory_bytes = free_b / 10 * 9;
    }
#endif
}

goblin_err goblin_worker_run(goblin_worker *w) {
    if (!w) return GOBLIN_EINVAL;
    choose_backend(w);
    char msg[256];
    goblin_err e = goblin__transport_open_worker(&w->sock, w->p.recv_max_bytes, msg, sizeof msg);
    if (e) {
        wlog(w, GOBLIN_LOG_ERROR, "%s", msg);
        return e;
    }
    nng_socket_set_ms(w->sock, NNG_OPT_RECVTIMEO, 20);
    nng_socket_set_ms(w->sock, NNG_OPT_SENDTIMEO, 2000);
    /* Take queued TASKs off the node's pipe promptly (see MAX_IN_FLIGHT in node.c). */
    nng_socket_set_int(w->sock, NNG_OPT_RECVBUF, w->p.slots + 4 < 8192 ? w->p.slots + 4 : 8192);
    nng_pipe_notify(w->sock, NNG_PIPE_EV_ADD_POST, wpipe_cb, w);
    nng_pipe_notify(w->sock, NNG_PIPE_EV_REM_POST, wpipe_cb, w);
    for (int32_t i = 0; i < w->p.n_connect; i++) {
        goblin__transport_trust trust = {.ca_file = w->p.tls_ca_file,
                                         .fingerprint = w->p.tls_fingerprint,
                                         .server_name = w->p.tls_server_name};
        if ((e = goblin__transport_dial(w->sock, w->p.connect[i], w->p.reconnect_min_ms,
                                        w->p.reconnect_max_ms, &trust, worker_stopping, w, msg,
                                        sizeof msg)) != GOBLIN_OK) {
            if (e == GOBLIN_ECANCELED) { /* goblin_worker_stop while waiting for the node */
                nng_close(w->sock);
                return GOBLIN_OK;
            }
            wlog(w, GOBLIN_LOG_ERROR, "%s", msg);
            nng_close(w->sock);
            return e;
        }
    }
    int seen_added = 0, seen_removed = 0;
    goblin_err result = GOBLIN_OK;
    w->last_task_ms = goblin__now_ms();
    atomic_store(&w->hb_ms, 0);
    atomic_store(&w->hb_quit, false);
    pthread_t hb_th;
    bool hb_started = pthread_create(&hb_th, NULL, heartbeat_main, w) == 0;
    /* The loop's receive waits without a timeout (an aio with one sits on nng's
     * expiry list, which nng scans whole: with hundreds of workers in a process that
     * scan was a third of the CPU); goblin_worker_stop and pipe events abort it. */
    nng_aio *rx = NULL;
    if (nng_aio_alloc(&rx, NULL, NULL) != 0) rx = NULL; /* then nng_recvmsg, 20 ms timeout */
    pthread_mutex_lock(&w->rx_mu);
    w->rx = rx;
    pthread_mutex_unlock(&w->rx_mu);
    while (!atomic_load(&w->stop)) {
        int removed = atomic_load(&w->pipes_removed);
        if (removed != seen_removed) {
            seen_removed = removed;
            wlog(w, GOBLIN_LOG_INFO, "connection to the node lost; redialing");
            /* Panel ids are per node session: a new connection starts clean. */
            cache_clear(w);
            cache_gauges(w);
            w->node_batch = false; /* until the next HELLO_ACK says so */
        }
        int added = atomic_load(&w->pipes_added);
        if (added != seen_added) {
            seen_added = added;
            BUMP(w, connects);
            send_hello(w);
        }
        cache_expire(w);
        nng_msg *nm = NULL;
        int rv;
        if (rx) {
            /* Waiting while leases are asked for: wake after RESYNC_MS to ask again (see
             * below). With none asked for, nothing is owed: wait without a timer, or
             * until kept inputs are due to be dropped (cache_expire). */
            nng_duration to = w->credit > 0 ? RESYNC_MS : NNG_DURATION_INFINITE;
            if (to == NNG_DURATION_INFINITE && w->p.cache_idle_ms && cache_held(w)) {
                int64_t left = (int64_t)w->p.cache_idle_ms - (goblin__now_ms() - w->last_task_ms);
                to = left < 1 ? 1 : left > INT32_MAX ? INT32_MAX : (nng_duration)left;
            }
            nng_aio_set_timeout(rx, to);
            nng_recv_aio(w->sock, rx);
            /* An event that came before the receive started found nothing to abort. */
            if (atomic_load(&w->stop) || atomic_load(&w->pipes_removed) != seen_removed ||
                atomic_load(&w->pipes_added) != seen_added)
                nng_aio_abort(rx, NNG_ECANCELED);
            nng_aio_wait(rx);
            rv = nng_aio_result(rx);
            if (rv == 0) nm = nng_aio_get_msg(rx);
            else if (rv == NNG_ECANCELED) rv = NNG_ETIMEDOUT;
            else if (rv == NNG_ETIMEDOUT && w->credit > 0 && w->node_max) {
                /* RESYNC_MS without a TASK although leases were asked for: a TASK can be
                 * lost (nng's pair1 drops a message to a full pipe), and then the node
                 * waits for a request while this worker waits for the TASK. Ask again
                 * from scratch: an extra request only lets the node send a little more
                 * than asked, a missing one would idle this worker for good. */
                BUMP(w, lease_resyncs);
                send_lease_request(w, (uint32_t)w->p.slots);
                w->credit = w->p.slots;
            }
        } else {
            rv = nng_recvmsg(w->sock, &nm, 0);
        }
        if (rv == NNG_ETIMEDOUT || rv == NNG_EAGAIN) continue;
        if (rv) {
            wlog(w, GOBLIN_LOG_ERROR, "receive failed: %s", nng_strerror(rv));
            result = goblin__transport_err(rv);
            break;
        }
        /* One message, or a batch of them (protocol 1.1), in order. Zero-copy: the
         * tasks' inputs and graphs are read-only views into nm, which lives until
         * all of them are answered (the panel cache may keep it longer: ref). */
        const uint8_t *body = nng_msg_body(nm);
        size_t blen = nng_msg_len(nm), off = 0, ml = 0;
        msgref *ref = NULL;
        bool keep_going = true, yielded = false;
        do {
            size_t at = off;
            char err[256];
            e = goblin__wire_batch_next(body, blen, &off, &w->limits, &ml, err, sizeof err);
            if (e && at == 0) ml = blen; /* the decoder says what is wrong with it */
            else if (e) {
                wlog(w, GOBLIN_LOG_WARN, "ignoring the rest of a malformed batch from the node (%s): %s",
                     goblin_err_name(e), err);
                break;
            }
            /* Answers to a batch of several go back as one batch, if the node takes them. */
            if (at == 0 && !e && off < blen && w->node_batch) w->ob_on = true;
            goblin__wire_msg *m = NULL;
            goblin_err de = goblin__wire_decode(body + at, ml, &w->limits, GOBLIN_WIRE_DECODE_ZERO_COPY, &m, err,
                                               sizeof err);
            if (de || e) {
                if (!de) goblin__wire_msg_free(m);
                wlog(w, GOBLIN_LOG_WARN, "ignoring a malformed message from the node (%s): %s",
                     goblin_err_name(de ? de : e), err);
                break;
            }
            switch (m->type) {
            case GOBLIN_WIRE_TYPE_HELLO_ACK:
                wlog(w, GOBLIN_LOG_INFO, "joined the node as worker %llu%s",
                     (unsigned long long)m->body.hello_ack.session_id,
                     (m->flags & GOBLIN_WIRE_FLAG_BATCH) ? " (batches)" : "");
                w->node_batch = (m->flags & GOBLIN_WIRE_FLAG_BATCH) != 0;
                w->node_max = m->body.hello_ack.max_message_bytes;
                /* Heartbeat a bit more often than asked: the node allows 3 intervals. */
                atomic_store(&w->hb_ms,
                             m->body.hello_ack.heartbeat_ms ? m->body.hello_ack.heartbeat_ms / 2 + 1 : 0);
                hb_wake(w);
                send_lease_request(w, (uint32_t)w->p.slots);
                w->credit = w->p.slots;
                break;
            case GOBLIN_WIRE_TYPE_REFUSE:
                wlog(w, GOBLIN_LOG_ERROR, "the node refused this worker (%s): %s",
                     goblin_err_name(m->body.refuse.reason), m->body.refuse.message);
                BUMP(w, refused);
                result = (unsigned)m->body.refuse.reason < GOBLIN_ERR_COUNT && m->body.refuse.reason
                             ? m->body.refuse.reason
                             : GOBLIN_EPROTO;
                keep_going = false;
                break;
            case GOBLIN_WIRE_TYPE_TASK:
                if (atomic_load(&w->stop)) {
                    /* Stopped in the middle of a batch: give the rest back at once. */
                    goblin__wire_msg a;
                    goblin__wire_msg_init(&a, GOBLIN_WIRE_TYPE_ABANDON);
                    a.body.abandon.task_id = m->body.task.task_id;
                    lsend(w, &a);
                    break;
                }
                /* Before the first task of a message, give the core away once: the
                 * threads that delivered it (nng's, and in an embedded grid the node's
                 * own, which waits for its send to complete before it sends the next
                 * TASK, such as the replica of this one to another worker) may still be
                 * queued on this core. Woken last, this worker would otherwise often
                 * run first and keep the core for a whole scheduler slice (up to a
                 * 4 ms tick) while another core idles: on 2 cores the two copies of a
                 * replicated training task then ran one after the other in about half
                 * of the rounds (a CNN round ~8 ms instead of ~5). sched_yield lets
                 * them finish first (microseconds); with nothing else runnable here it
                 * returns at once. */
                if (!yielded) {
                    sched_yield();
                    yielded = true;
                }
                w->last_task_ms = goblin__now_ms();
                if (!run_task(w, &m->body.task, nm, &ref)) {
                    result = GOBLIN_ECLOSED;
                    keep_going = false;
                }
                w->last_task_ms = goblin__now_ms(); /* idle from the end of a long task */
                break;
            case GOBLIN_WIRE_TYPE_ABANDON:
            case GOBLIN_WIRE_TYPE_HEARTBEAT:
            case GOBLIN_WIRE_TYPE_ERROR:
                break;
            default:
                wlog(w, GOBLIN_LOG_WARN, "ignoring unexpected %s from the node", goblin__wire_type_name(m->type));
                break;
            }
            goblin__wire_msg_free(m);
        } while (keep_going && off < blen);
        ob_flush(w); /* also before a CRASH: what ran before it was answered */
        w->ob_on = false;
        cache_gauges(w);
        if (!ref) {
            nng_msg_free(nm);
        } else if (--ref->refs == 0) {
            nng_msg_free(nm);
            goblin__free(ref);
        } /* else panels in the cache keep it */
        if (!keep_going) break;
    }
    pthread_mutex_lock(&w->rx_mu);
    w->rx = NULL;
    pthread_mutex_unlock(&w->rx_mu);
    if (rx) nng_aio_free(rx);
    atomic_store(&w->hb_quit, true);
    hb_wake(w);
    if (hb_started) pthread_join(hb_th, NULL);
    if (atomic_load(&w->stop)) {
        /* Give back tasks already queued for us so the node reissues them at once. */
        nng_socket_set_ms(w->sock, NNG_OPT_RECVTIMEO, 0);
        nng_msg *nm = NULL;
        while (nng_recvmsg(w->sock, &nm, NNG_FLAG_NONBLOCK) == 0) {
            const uint8_t *body = nng_msg_body(nm);
            size_t blen = nng_msg_len(nm), off = 0, ml = 0;
            do { /* each TASK of a batch */
                size_t at = off;
                goblin__wire_msg *m = NULL;
                if (goblin__wire_batch_next(body, blen, &off, &w->limits, &ml, NULL, 0) != GOBLIN_OK ||
                    goblin__wire_decode(body + at, ml, &w->limits, 0, &m, NULL, 0) != GOBLIN_OK)
                    break;
                if (m->type == GOBLIN_WIRE_TYPE_TASK) {
                    goblin__wire_msg a;
                    goblin__wire_msg_init(&a, GOBLIN_WIRE_TYPE_ABANDON);
                    a.body.abandon.task_id = m->body.task.task_id;
                    wsend(w, &a);
                }
                goblin__wire_msg_free(m);
            } while (off < blen);
            nng_msg_free(nm);
        }
        /* nng_close may drop queued messages; give the ABANDONs a moment. */
        usleep(20000);
    }
    nng_close(w->sock);
    cache_clear(w);
    return result;
}
