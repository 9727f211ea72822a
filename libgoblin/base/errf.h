/* libgoblin/base/errf.h - writing an error's detail into a caller's buffer (internal). */
#ifndef GOBLIN__BASE_ERRF_H
#define GOBLIN__BASE_ERRF_H

#include <stddef.h>
#include <goblin/error.h>

/** Format into @p msg (@p cap bytes; @p msg may be NULL or @p cap 0) and return @p e. */
goblin_err goblin__errf(char *msg, size_t cap, goblin_err e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
