/* libgoblin/alloc.c - the single allocation hook. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "alloc.h"

static void *default_alloc(void *user, size_t size, size_t align) {
    (void)user;
    void *p = NULL;
    if (posix_memalign(&p, align, size) != 0) return NULL;
    return p;
}

static void default_free(void *user, void *p) {
    (void)user;
    free(p);
}

static goblin_allocator g_alloc = {default_alloc, default_free, NULL};

void goblin_set_allocator(const goblin_allocator *a) {
    if (a && a->alloc && a->free) g_alloc = *a;
    else g_alloc = (goblin_allocator){default_alloc, default_free, NULL};
}

void *goblin__alloc(size_t size) {
    if (size == 0) size = 1;
    if (size > (SIZE_MAX >> 1)) return NULL;
    return g_alloc.alloc(g_alloc.user, size, 64);
}

void *goblin__calloc(size_t n, size_t size) {
    size_t total;
    if (!goblin__mul_size(n, size, &total)) return NULL;
    void *p = goblin__alloc(total);
    if (p) memset(p, 0, total ? total : 1);
    return p;
}

void goblin__free(void *p) {
    if (p) g_alloc.free(g_alloc.user, p);
}

void goblin_buffer_free(void *p) { goblin__free(p); }

bool goblin__alloc_is_default(void) { return g_alloc.alloc == default_alloc && g_alloc.free == default_free; }

void goblin__free_default(void *p) { free(p); }

char *goblin__strdup(const char *s) {
    if (!s) return NULL;
    return goblin__memdup(s, strlen(s) + 1);
}

void *goblin__memdup(const void *p, size_t n) {
    void *q = goblin__alloc(n);
    if (q && n) memcpy(q, p, n);
    return q;
}

/* ---- buffers kept per thread -------------------------------------------------------- */

typedef struct tl_registry {
    goblin__tl_buf *b[4];
    int n;
    bool keyed;
} tl_registry;

static _Thread_local tl_registry t_tl;
static pthread_key_t g_tl_key;
static pthread_once_t g_tl_once = PTHREAD_ONCE_INIT;
static bool g_tl_key_ok;

static void tl_exit(void *arg) {
    tl_registry *r = arg;
    for (int i = 0; i < r->n; i++) {
        goblin__free_default(r->b[i]->p);
        r->b[i]->p = NULL;
        r->b[i]->cap = 0;
    }
    r->n = 0;
}
static void tl_key_init(void) { g_tl_key_ok = pthread_key_create(&g_tl_key, tl_exit) == 0; }

void *goblin__tl_buf_reserve(goblin__tl_buf *b, size_t bytes) {
    tl_registry *r = &t_tl;
    if (!goblin__alloc_is_default()) return NULL;
    if (!r->keyed) {
        pthread_once(&g_tl_once, tl_key_init);
        if (!g_tl_key_ok || pthread_setspecific(g_tl_key, r) != 0) return NULL;
        r->keyed = true;
    }
    int i = 0;
    while (i < r->n && r->b[i] != b) i++;
    if (i == r->n) {
        if (r->n == 4) return NULL;
        r->b[r->n++] = b;
    }
    if (b->cap < bytes) {
        void *p = goblin__alloc(bytes);
        if (!p) return NULL;
        goblin__free_default(b->p);
        b->p = p;
        b->cap = bytes;
    }
    return b->p;
}
