/* libgoblin/graph/hoist.c - a graph job's large constants travel as cached inputs (scheduler.h).
 *
 * A captured model is a graph whose weights are CONSTANT nodes. Left in the chunk
 * graph, they would ride along with every task (megabytes copied into each TASK
 * message, compared byte for byte by the worker's graph cache, and paged in afresh
 * each time). The node instead re-instantiates the graph with each large constant as
 * a BROADCAST input carrying a cache id, so a worker receives a weight once and then
 * finds it in its input cache (docs/runtime.md, "graph jobs"). The re-instantiated
 * graph, copies of the constants and their ids are kept in a small memo: the same
 * model submitted batch after batch keeps its ids, so workers keep their copies. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "graph_impl.h"
#include "base/secret.h"
#include "hoist.h"

struct goblin__hoist_entry {
    atomic_int refs;
    goblin__hoisted h;
};

/* Constants are hoisted from this size up (smaller ones cost less inline than an input
 * and its cache slot), at most this many per graph, largest first: a worker's input
 * cache keeps a few hundred entries, and the node remembers GRAPH_INPUT_MEMO of them. */
#define HOIST_MIN_BYTES ((size_t)16 << 10)
#define HOIST_MAX 128

bool goblin__same_node(const goblin__node *x, const goblin__node *y) {
    if (x->op != y->op || x->dtype != y->dtype || x->rank != y->rank || x->n_inputs != y->n_inputs ||
        x->n_attrs != y->n_attrs || x->payload_size != y->payload_size)
        return false;
    for (int32_t d = 0; d < x->rank; d++)
        if (x->shape[d] != y->shape[d]) return false;
    for (int32_t k = 0; k < x->n_inputs; k++)
        if (x->inputs[k] != y->inputs[k]) return false;
    for (int32_t k = 0; k < x->n_attrs; k++) {
        const goblin_attr *p = &x->attrs[k], *q = &y->attrs[k];
        if (p->key != q->key || p->count != q->count) return false;
        if (goblin_attr_key_kind(p->key) == GOBLIN_ATTR_KIND_INTS) {
            for (int32_t c = 0; c < p->count; c++)
                if (p->v.ints[c] != q->v.ints[c]) return false;
        } else if (memcmp(&p->v, &q->v, 8) != 0) {
            return false;
        }
    }
    return !x->payload_size || memcmp(x->payload, y->payload, x->payload_size) == 0;
}

static void entry_free(struct goblin__hoist_entry *e) {
    if (!e) return;
    goblin_graph_free(e->h.g);
    for (int32_t k = 0; k < e->h.n_const; k++) goblin__free(e->h.ct[k].data);
    goblin__free(e->h.ct);
    goblin__free(e->h.cid);
    goblin__free(e->h.node);
    goblin__free(e->h.src);
    goblin__free(e);
}

void goblin__hoist_release(const goblin__hoisted *h) {
    if (!h) return;
    struct goblin__hoist_entry *e =
        (struct goblin__hoist_entry *)((char *)h - offsetof(struct goblin__hoist_entry, h));
    if (atomic_fetch_sub(&e->refs, 1) == 1) entry_free(e);
}

/* Is @p g the graph @p h was made from? Every node equal, the hoisted constants
 * compared with the memo's copies of their data. */
static bool matches(const goblin__hoisted *h, const goblin_graph *g) {
    const goblin_graph *a = h->g;
    if (a->n_nodes != g->n_nodes || a->n_outputs != g->n_outputs || a->n_inputs != g->n_inputs + h->n_const)
        return false;
    for (int32_t o = 0; o < g->n_outputs; o++)
        if (a->output_ids[o] != g->output_ids[o]) return false;
    int32_t k = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const goblin__node *x = &g->nodes[i];
        if (k < h->n_const && h->node[k] == i) {
            const goblin_tensor *c = &h->ct[k++];
            if (x->op != GOBLIN_OP_CONSTANT || x->dtype != c->dtype || x->rank != c->rank ||
                memcmp(x->shape, c->shape, (size_t)x->rank * sizeof(int64_t)) != 0 ||
                memcmp(x->payload, c->data, x->payload_size) != 0)
                return false;
        } else if (!goblin__same_node(x, &a->nodes[i])) {
            return false;
        }
    }
    return true;
}

typedef struct cand {
    size_t bytes;
    int32_t id;
} cand;

static int by_size_desc(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    return a->id - b->id;
}

static int by_id(const void *pa, const void *pb) {
    return ((const cand *)pa)->id - ((const cand *)pb)->id;
}

/* The constants of @p g to hoist (at most @p room and HOIST_MAX of them, the largest),
 * in node order, into @p ids; returns their count, -1 when out of memory. */
static int32_t pick(const goblin_graph *g, int32_t room, int32_t *ids) {
    int32_t n = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == GOBLIN_OP_CONSTANT && g->nodes[i].payload_size >= HOIST_MIN_BYTES) n++;
    if (n == 0 || room <= 0) return 0;
    cand *all = goblin__alloc((size_t)n * sizeof *all);
    if (!all) return -1;
    n = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == GOBLIN_OP_CONSTANT && g->nodes[i].payload_size >= HOIST_MIN_BYTES)
            all[n++] = (cand){g->nodes[i].payload_size, i};
    int32_t keep = n < room ? n : room;
    if (keep > HOIST_MAX) keep = HOIST_MAX;
    if (keep < n) qsort(all, (size_t)n, sizeof *all, by_size_desc);
    qsort(all, (size_t)keep, sizeof *all, by_id);
    for (int32_t k = 0; k < keep; k++) ids[k] = all[k].id;
    goblin__free(all);
    return keep;
}

/* A new entry for @p g with the constants @p ids hoisted. */
static goblin_err build(const goblin_graph *g, const int32_t *ids, int32_t nc, struct goblin__hoist_entry **out) {
    struct goblin__hoist_entry *e = goblin__calloc(1, sizeof *e);
    if (!e) return GOBLIN_ENOMEM;
    atomic_init(&e->refs, 1);
    goblin__hoisted *h = &e->h;
    h->n_const = nc;
    h->n_in = g->n_inputs + nc;
    h->ct = goblin__calloc((size_t)nc, sizeof *h->ct);
    h->cid = goblin__calloc((size_t)nc, sizeof *h->cid);
    h->node = goblin__alloc((size_t)nc * sizeof *h->node);
    h->src = goblin__alloc((size_t)h->n_in * sizeof *h->src);
    goblin_err err = GOBLIN_ENOMEM;
    if (!h->ct || !h->cid || !h->node || !h->src || goblin_graph_new(&h->g) != GOBLIN_OK) goto fail;
    memcpy(h->node, ids, (size_t)nc * sizeof *ids);
    int32_t k = 0, user = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const goblin__node *on = &g->nodes[i];
        goblin__node p = *on; /* a prototype: goblin__graph_add_node copies what it points to */
        bool hoisted = k < nc && ids[k] == i;
        if (hoisted) {
            void *data = goblin__memdup(on->payload, on->payload_size);
            if (!data) goto fail;
            goblin_tensor_init(&h->ct[k], on->dtype, on->rank, on->shape, data);
            /* Secret and random: never the id of another graph's constant, nor (but for
             * a 2^-64 chance) one a caller chose (goblin_graph_job_params.cache_ids). */
            h->cid[k] = goblin__secret_u64() | 1;
            h->src[h->g->n_inputs] = -1 - k;
            k++;
            p.op = GOBLIN_OP_INPUT;
            p.payload = NULL;
            p.payload_size = 0;
        } else if (on->op == GOBLIN_OP_INPUT) {
            h->src[h->g->n_inputs] = user++;
        }
        int32_t id = -1;
        if ((err = goblin__graph_add_node(h->g, &p, &id)) != GOBLIN_OK) goto fail;
    }
    for (int32_t o = 0; o < g->n_outputs; o++)
        if ((err = goblin_graph_output(h->g, g->output_ids[o])) != GOBLIN_OK) goto fail;
    *out = e;
    return GOBLIN_OK;
fail:
    entry_free(e);
    return err == GOBLIN_OK ? GOBLIN_ENOMEM : err;
}

void goblin__hoist_memo_init(goblin__hoist_memo *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void goblin__hoist_memo_fini(goblin__hoist_memo *m) {
    for (int32_t k = 0; k < GOBLIN__HOIST_MEMO; k++)
        if (m->e[k]) goblin__hoist_release(&m->e[k]->h);
    pthread_mutex_destroy(&m->mu);
    memset(m, 0, sizeof *m);
}

goblin_err goblin__hoist_get(goblin__hoist_memo *m, const goblin_graph *g, int32_t max_inputs,
                             const goblin__hoisted **out) {
    *out = NULL;
    int32_t ids[HOIST_MAX];
    int32_t nc = pick(g, max_inputs - g->n_inputs, ids);
    if (nc < 0) return GOBLIN_ENOMEM;
    if (nc == 0) return GOBLIN_OK;
    pthread_mutex_lock(&m->mu);
    for (int32_t k = 0; k < GOBLIN__HOIST_MEMO; k++) {
        struct goblin__hoist_entry *e = m->e[k];
        if (e && e->h.n_const == nc && memcmp(e->h.node, ids, (size_t)nc * sizeof *ids) == 0 &&
            matches(&e->h, g)) {
            atomic_fetch_add(&e->refs, 1);
            m->last[k] = ++m->clock;
            pthread_mutex_unlock(&m->mu);
            *out = &e->h;
            return GOBLIN_OK;
        }
    }
    pthread_mutex_unlock(&m->mu);
    struct goblin__hoist_entry *e = NULL;
    goblin_err err = build(g, ids, nc, &e);
    if (err) return err;
    atomic_fetch_add(&e->refs, 1); /* the caller's; the memo keeps the first */
    pthread_mutex_lock(&m->mu);
    int32_t v = 0;
    for (int32_t k = 1; k < GOBLIN__HOIST_MEMO; k++)
        if (m->last[k] < m->last[v]) v = k;
    struct goblin__hoist_entry *old = m->e[v];
    m->e[v] = e;
    m->last[v] = ++m->clock;
    pthread_mutex_unlock(&m->mu);
    if (old) goblin__hoist_release(&old->h);
    *out = &e->h;
    return GOBLIN_OK;
}
