/* libgoblin/base/alloc.h - internal allocation entry points (all go through the hook). */
#ifndef GOBLIN__ALLOC_H
#define GOBLIN__ALLOC_H

#include <goblin/alloc.h>
#include <stdint.h>

/* 64-byte aligned; NULL on failure or size == 0 overflow. size 0 allocates 1 byte. */
void *goblin__alloc(size_t size);
/* Zeroed; NULL if n * size overflows. */
void *goblin__calloc(size_t n, size_t size);
/* NULL is a no-op. */
void goblin__free(void *p);
/* Copy of a NUL-terminated string, or NULL. */
char *goblin__strdup(const char *s);
/* Copy of @p n bytes, or NULL. */
void *goblin__memdup(const void *p, size_t n);

/* Whether the default allocator (no goblin_set_allocator hook) is installed, and its
 * free, for memory taken while it was: caches of buffers kept across calls use these
 * so that a hook installed later never sees memory it did not allocate. */
bool goblin__alloc_is_default(void);
void goblin__free_default(void *p);

/* A buffer the calling thread keeps across calls (a kernel's results kept for the next
 * node of the same run): freed when the thread ends, at most 4 such buffers per thread,
 * and only under the default allocator (goblin__free_default frees it). */
typedef struct goblin__tl_buf {
    void *p;
    size_t cap;
} goblin__tl_buf;

/* @p b (a _Thread_local object) with room for @p bytes: its old contents are lost when it
 * grows. NULL when it cannot be kept (a hook installed, out of memory, too many). */
void *goblin__tl_buf_reserve(goblin__tl_buf *b, size_t bytes);

/* Overflow-checked arithmetic on sizes: return false on overflow. */
static inline bool goblin__mul_size(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool goblin__mul_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool goblin__add_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

#endif
