/* goblin/alloc.h - the allocation hook.
 *
 * All memory the library allocates goes through one allocator, so embedders can
 * account for it and tests can fail the Nth allocation. */
#ifndef GOBLIN_ALLOC_H
#define GOBLIN_ALLOC_H

#include "api.h"

GOBLIN_BEGIN_DECLS

typedef struct goblin_allocator {
    /** Return @p size bytes aligned to @p align (a power of two, >= sizeof(void*)),
     *  or NULL. @p size is never 0. */
    void *(*alloc)(void *user, size_t size, size_t align);
    /** Release memory from alloc. Never called with NULL. */
    void (*free)(void *user, void *ptr);
    void *user;
} goblin_allocator;

/** Install @p a (copied), or restore the default (posix_memalign/free) when NULL.
 *  Not thread-safe: call before any other library use, or while nothing else runs. */
GOBLIN_API void goblin_set_allocator(const goblin_allocator *a);

/** Release a buffer the library allocated for the caller (e.g. an output tensor's
 *  data when the caller passed data == NULL). NULL is a no-op. */
GOBLIN_API void goblin_buffer_free(void *ptr);

GOBLIN_END_DECLS

#endif
