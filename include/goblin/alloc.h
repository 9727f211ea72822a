/* goblin/alloc.h - the allocation hook, and sizes of memory.
 *
 * All memory the library allocates goes through one allocator, so embedders can
 * account for it and tests can fail the Nth allocation. Memory budgets given as text
 * ("512M", "1.5G") are read by goblin_size_parse, for the tools and the Python package
 * alike. */
#ifndef GOBLIN_ALLOC_H
#define GOBLIN_ALLOC_H

#include "api.h"
#include "error.h"

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

/** Set up the C library's allocator of this process for serving (goblin-node and
 *  goblin-worker call it first thing; an embedder hosting a node or worker in a
 *  process of its own may too). A node or worker moves messages of tens of MB: by
 *  default glibc gives each block that large fresh pages from the kernel and returns
 *  them when it is freed, so every message costs a page fault and a zeroing per 4 KiB
 *  (about 1.5 us each on the development machine: 0.1 s of kernel time per 4096^2
 *  product over tcp). After this call, freed blocks stay in the process for reuse: all
 *  blocks come from one heap, and free memory at its top is returned to the kernel
 *  only beyond @p retain_bytes (0: 1 GiB).
 *
 *  It changes the whole process (every thread, every library), so the library never
 *  calls it by itself. Call it before threads are started. Returns GOBLIN_OK, or
 *  GOBLIN_ENOTSUP where the C library has no such settings (anything but glibc), in
 *  which case nothing changed. */
GOBLIN_API goblin_err goblin_tune_allocator_for_service(size_t retain_bytes);

/** Read a size in bytes: a decimal number (a fraction allowed: "1.5G") with an optional
 *  unit K, M, G or T (powers of 1024, any case, optionally followed by "iB" or "B"; "B" alone
 *  means bytes); blanks around it and before the unit are ignored. A fractional result is rounded down.
 *  *out set on success. GOBLIN_EINVAL (NULL, empty or malformed text), GOBLIN_ERANGE (more
 *  than UINT64_MAX bytes). Zero is a size like any other: callers that need a positive one
 *  check. */
GOBLIN_API goblin_err goblin_size_parse(const char *s, uint64_t *out);

GOBLIN_END_DECLS

#endif
