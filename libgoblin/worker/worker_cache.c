/* libgoblin/worker/worker_cache.c - what a worker keeps for reuse: the inputs that
 * came with earlier TASKs under a cache id (the panel cache: a hash index and a recency
 * list, bounded by cache_bytes), the last decoded task graphs, and their expiry once no
 * TASK has come for cache_idle_ms. Everything here runs in the loop thread. */
#include "worker_impl.h"

#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"

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

void goblin__worker_cache_clear(goblin_worker *w) {
    for (int32_t i = w->mru; i >= 0; i = w->cache[i].next) panel_release(&w->cache[i]);
    w->n_cache = w->n_slots = 0;
    w->free_slot = w->mru = w->lru = -1;
    if (w->cache_ix) memset(w->cache_ix, 0, (size_t)w->ix_cap * sizeof *w->cache_ix);
    w->cache_used = 0;
    for (int32_t i = 0; i < GRAPH_CACHE; i++) gcache_drop(&w->gc[i]);
}

/* The cache gauges of goblin_worker_stats, from the loop thread. */
void goblin__worker_cache_gauges(goblin_worker *w) {
    int64_t n = w->n_cache, bytes = (int64_t)w->cache_used;
    pthread_mutex_lock(&w->st_mu);
    w->st.cached_inputs = n;
    w->st.cached_bytes = bytes;
    pthread_mutex_unlock(&w->st_mu);
}

/* Does the worker keep inputs or compiled graphs for reuse? */
bool goblin__worker_cache_held(const goblin_worker *w) {
    bool held = w->n_cache > 0;
    for (int32_t i = 0; i < GRAPH_CACHE; i++) held = held || w->gc[i].blob;
    return held;
}

/* Idle for cache_idle_ms with inputs kept: drop them (and the compiled graphs). */
void goblin__worker_cache_expire(goblin_worker *w) {
    if (!w->p.cache_idle_ms || !goblin__worker_cache_held(w)) return;
    int64_t idle = goblin__now_ms() - w->last_task_ms;
    if (idle < (int64_t)w->p.cache_idle_ms) return;
    int32_t n = w->n_cache;
    size_t bytes = w->cache_used;
    goblin__worker_cache_clear(w);
    BUMP(w, cache_expiries);
    goblin__worker_cache_gauges(w);
    goblin__worker_log(w, GOBLIN_LOG_INFO, "no task for %.1f s: dropped the %d input(s) (%zu bytes) kept for reuse",
         (double)idle / 1000.0, (int)n, bytes);
}

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

panel *goblin__worker_cache_find(goblin_worker *w, uint64_t id) {
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
    if (!id || bytes == 0 || bytes > w->p.cache_bytes || goblin__worker_cache_find(w, id)) return false;
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


/* Cache the inputs that came with task @p t (directory @p dv, @p ni inputs): by
 * reference to the message @p nm when they lie in it and make up at least half of it
 * (so a kept message is mostly cached panels), else by copy. */
void goblin__worker_cache_inputs(goblin_worker *w, goblin__wire_task *t, const int64_t *dv, int32_t ni, nng_msg *nm,
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
goblin_err goblin__worker_task_graph(goblin_worker *w, const goblin__wire_task *t, goblin_graph **g, bool *owned,
                                     goblin_errbuf *err) {
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
    goblin_err e = goblin_graph_deserialize(t->graph, len, NULL, g, err);
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
