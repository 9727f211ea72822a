/* libgoblin/base/alloc.c - the single allocation hook. */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
/* glibc's own allocator: not under AddressSanitizer, which replaces malloc (and
 * answers mallopt with a no-op). */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GOBLIN__ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define GOBLIN__ASAN 1
#endif
#if defined(__GLIBC__) && !defined(GOBLIN__ASAN)
#define GOBLIN__GLIBC_MALLOC 1
#include <malloc.h>
#endif
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

goblin_err goblin_tune_allocator_for_service(size_t retain_bytes) {
#if defined(GOBLIN__GLIBC_MALLOC)
    if (retain_bytes == 0) retain_bytes = (size_t)1 << 30;
    if (retain_bytes > (size_t)INT_MAX) retain_bytes = (size_t)INT_MAX;
    /* One arena: a block freed by another thread (nng's receive thread allocates a
     * message, the worker's thread frees it) goes back to the heap it came from, and
     * the thread arenas' 64 MiB heaps, which give freed pages back to the kernel,
     * are not used. No mmap'd blocks: those are unmapped on free. mallopt returns 1
     * on success. */
    if (mallopt(M_ARENA_MAX, 1) != 1 || mallopt(M_TRIM_THRESHOLD, (int)retain_bytes) != 1 ||
        mallopt(M_MMAP_MAX, 0) != 1)
        return GOBLIN_EINVAL;
    return GOBLIN_OK;
#else
    (void)retain_bytes;
    return GOBLIN_ENOTSUP;
#endif
}

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
