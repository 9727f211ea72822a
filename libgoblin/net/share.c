/* libgoblin/net/share.c - inputs shared in place between a node and the workers of its own process
 * (share.h). A share is a hash map from cache id to a view, under one lock; views
 * belong to job tokens, and a token counts the workers computing on its views. */
#include "share.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/alloc.h"

typedef struct entry {
    uint64_t id;
    goblin_tensor view;
    goblin__share_job *job;
    struct entry *next;
} entry;

struct goblin__share {
    atomic_int refs;
    pthread_mutex_t mu;
    pthread_cond_t idle; /* a token's active count fell to 0 */
    entry **buckets;
    size_t nb, n; /* buckets (a power of two), entries */
};

struct goblin__share_job {
    bool ended;
    int64_t active; /* workers computing on its views (under the share's lock) */
    uint64_t *ids;
    size_t n, cap;
};

/* ---- the process's published shares -------------------------------------------- */

#define MAX_PUBLISHED 64

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char *url;
    goblin__share *s;
} g_pub[MAX_PUBLISHED];

static void share_free(goblin__share *s) {
    for (size_t b = 0; b < s->nb; b++)
        for (entry *e = s->buckets[b], *nx; e; e = nx) {
            nx = e->next;
            goblin__free(e);
        }
    goblin__free(s->buckets);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->idle);
    goblin__free(s);
}

goblin__share *goblin__share_publish(const char *url) {
    goblin__share *s = goblin__calloc(1, sizeof *s);
    if (!s) return NULL;
    atomic_init(&s->refs, 1);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->nb = 64;
    char *u = goblin__strdup(url);
    if (!u || !(s->buckets = goblin__calloc(s->nb, sizeof *s->buckets))) {
        goblin__free(u);
        share_free(s);
        return NULL;
    }
    pthread_mutex_lock(&g_mu);
    int slot = -1;
    for (int i = 0; i < MAX_PUBLISHED; i++) {
        if (g_pub[i].url && strcmp(g_pub[i].url, url) == 0) {
            slot = -2;
            break;
        }
        if (!g_pub[i].url && slot == -1) slot = i;
    }
    if (slot >= 0) {
        g_pub[slot].url = u;
        g_pub[slot].s = s;
    }
    pthread_mutex_unlock(&g_mu);
    if (slot < 0) {
        goblin__free(u);
        share_free(s);
        return NULL;
    }
    return s;
}

void goblin__share_unpublish(goblin__share *s) {
    if (!s) return;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAX_PUBLISHED; i++)
        if (g_pub[i].s == s) {
            goblin__free(g_pub[i].url);
            g_pub[i].url = NULL;
            g_pub[i].s = NULL;
        }
    pthread_mutex_unlock(&g_mu);
    goblin__share_release(s);
}

goblin__share *goblin__share_find(const char *url) {
    goblin__share *s = NULL;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAX_PUBLISHED && !s; i++)
        if (g_pub[i].url && strcmp(g_pub[i].url, url) == 0) {
            s = g_pub[i].s;
            atomic_fetch_add(&s->refs, 1);
        }
    pthread_mutex_unlock(&g_mu);
    return s;
}

goblin__share *goblin__share_ref(goblin__share *s) {
    if (s) atomic_fetch_add(&s->refs, 1);
    return s;
}

void goblin__share_release(goblin__share *s) {
    if (s && atomic_fetch_sub(&s->refs, 1) == 1) share_free(s);
}

/* ---- jobs and views --------------------------------------------------------------- */

static size_t bucket(const goblin__share *s, uint64_t id) {
    uint64_t h = id * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (s->nb - 1);
}

static entry *find(const goblin__share *s, uint64_t id) {
    for (entry *e = s->buckets[bucket(s, id)]; e; e = e->next)
        if (e->id == id) return e;
    return NULL;
}

/* Double the buckets when the entries outnumber them (under the lock). */
static void maybe_grow(goblin__share *s) {
    if (s->n < s->nb) return;
    size_t nb = s->nb * 2;
    entry **nbk = goblin__calloc(nb, sizeof *nbk);
    if (!nbk) return; /* longer chains, still correct */
    entry **old = s->buckets;
    size_t onb = s->nb;
    s->buckets = nbk;
    s->nb = nb;
    for (size_t b = 0; b < onb; b++)
        for (entry *e = old[b], *nx; e; e = nx) {
            nx = e->next;
            size_t k = bucket(s, e->id);
            e->next = nbk[k];
            nbk[k] = e;
        }
    goblin__free(old);
}

goblin__share_job *goblin__share_job_new(void) { return goblin__calloc(1, sizeof(goblin__share_job)); }

void goblin__share_job_free(goblin__share_job *jt) {
    if (!jt) return;
    goblin__free(jt->ids);
    goblin__free(jt);
}

goblin_err goblin__share_put(goblin__share *s, goblin__share_job *jt, uint64_t id, const goblin_tensor *view) {
    goblin_err e = GOBLIN_OK;
    pthread_mutex_lock(&s->mu);
    entry *have = jt->ended ? NULL : find(s, id);
    if (jt->ended) {
        e = GOBLIN_ESTATE;
    } else if (have && have->job != jt) {
        e = GOBLIN_EBUSY; /* another job's id (the ids are hashes): the caller copies */
    } else if (!have) {
        entry *x = goblin__alloc(sizeof *x);
        if (jt->n == jt->cap) {
            size_t cap = jt->cap ? 2 * jt->cap : 16;
            uint64_t *ids = goblin__alloc(cap * sizeof *ids);
            if (ids) {
                if (jt->n) memcpy(ids, jt->ids, jt->n * sizeof *ids);
                goblin__free(jt->ids);
                jt->ids = ids;
                jt->cap = cap;
            }
        }
        if (!x || jt->n == jt->cap) {
            goblin__free(x);
            e = GOBLIN_ENOMEM;
        } else {
            x->id = id;
            x->view = *view;
            x->job = jt;
            size_t b = bucket(s, id);
            x->next = s->buckets[b];
            s->buckets[b] = x;
            s->n++;
            jt->ids[jt->n++] = id;
            maybe_grow(s);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return e;
}

/* Remove the job's views and mark it ended (under the lock). */
static void close_locked(goblin__share *s, goblin__share_job *jt) {
    for (size_t i = 0; i < jt->n; i++) {
        entry **pp = &s->buckets[bucket(s, jt->ids[i])];
        while (*pp && !((*pp)->id == jt->ids[i] && (*pp)->job == jt)) pp = &(*pp)->next;
        if (*pp) {
            entry *x = *pp;
            *pp = x->next;
            goblin__free(x);
            s->n--;
        }
    }
    jt->n = 0;
    jt->ended = true;
}

void goblin__share_job_close(goblin__share *s, goblin__share_job *jt) {
    if (!s || !jt) return;
    pthread_mutex_lock(&s->mu);
    close_locked(s, jt);
    pthread_mutex_unlock(&s->mu);
}

void goblin__share_job_end(goblin__share *s, goblin__share_job *jt) {
    if (!s || !jt) return;
    pthread_mutex_lock(&s->mu);
    close_locked(s, jt);
    while (jt->active > 0) pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

bool goblin__share_take(goblin__share *s, uint64_t id, goblin_tensor *out, goblin__share_job **held) {
    pthread_mutex_lock(&s->mu);
    entry *x = find(s, id);
    if (x) {
        *out = x->view;
        *held = x->job;
        x->job->active++;
    }
    pthread_mutex_unlock(&s->mu);
    return x != NULL;
}

void goblin__share_drop(goblin__share *s, goblin__share_job *held) {
    if (!held) return;
    pthread_mutex_lock(&s->mu);
    if (--held->active == 0) pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
}
