/* libgoblin/base/errf.h - writing an error's detail into a caller's buffer (internal). */
#ifndef GOBLIN__BASE_ERRF_H
#define GOBLIN__BASE_ERRF_H

#include <stddef.h>
#include <goblin/error.h>

/** Format into @p msg (@p cap bytes; @p msg may be NULL or @p cap 0) and return @p e. */
goblin_err goblin__errf(char *msg, size_t cap, goblin_err e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/** The public side of goblin__errf's buffers: declare `char *MSG; size_t CAP` over the
 *  caller's goblin_errbuf @p err (NULL: no buffer), cleared as error.h promises. */
static inline char *goblin__errbuf_start(goblin_errbuf *err) {
    if (!err) return NULL;
    err->position = -1;
    err->message[0] = 0;
    return err->message;
}
#define GOBLIN__ERRBUF(err, MSG, CAP)                  \
    char *MSG = goblin__errbuf_start(err);             \
    size_t CAP = (err) ? sizeof (err)->message : 0

#endif
