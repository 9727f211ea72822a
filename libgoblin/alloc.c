/* libgoblin/alloc.c - the single allocation hook. */
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
