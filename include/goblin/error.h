/* goblin/error.h - the library's error codes.
 *
 * Every fallible function returns a goblin_err. Handles that can fail with a
 * detailed reason (graphs, executors) also keep a per-handle message; there is
 * no global "last error". */
#ifndef GOBLIN_ERROR_H
#define GOBLIN_ERROR_H

#include "api.h"

GOBLIN_BEGIN_DECLS

/* X(NAME, value, message). Values are explicit and append-only: they travel
 * on the wire in error replies. */
#define GOBLIN_ERR_MAP(X)                                              \
    X(OK, 0, "success")                                                \
    X(EINVAL, 1, "invalid argument")                                   \
    X(ENOMEM, 2, "out of memory")                                      \
    X(ESHAPE, 3, "shape mismatch")                                     \
    X(EDTYPE, 4, "unsupported or mismatched dtype")                    \
    X(ERANGE, 5, "value out of range")                                 \
    X(EFORMAT, 6, "malformed data")                                    \
    X(EVERSION, 7, "version mismatch")                                 \
    X(ENOTSUP, 8, "operation not supported")                           \
    X(ENODEV, 9, "no device available")                                \
    X(EDEVICE, 10, "device error")                                     \
    X(ESYNTAX, 11, "syntax error")                                     \
    X(EIO, 12, "input/output error")                                   \
    X(ELIMIT, 13, "size limit exceeded")                               \
    X(ESTATE, 14, "object is in the wrong state for this call")        \
    X(ETIMEDOUT, 15, "timed out")                                      \
    X(ECLOSED, 16, "closed")                                           \
    X(ECONNREFUSED, 17, "connection refused")                          \
    X(EAUTH, 18, "authentication failed")                              \
    X(ECRYPTO, 19, "cryptographic failure")                            \
    X(EVERIFY, 20, "result failed verification")                       \
    X(ECANCELED, 21, "canceled")                                       \
    X(EBUSY, 22, "busy")                                               \
    X(ENOTFOUND, 23, "not found")                                      \
    X(EPROTO, 24, "protocol error")                                    \
    X(EINDEX, 25, "index out of bounds")                               \
    X(EINTERNAL, 26, "internal error")

typedef enum goblin_err {
#define GOBLIN__ERR_ENUM(name, value, msg) GOBLIN_##name = value,
    GOBLIN_ERR_MAP(GOBLIN__ERR_ENUM)
#undef GOBLIN__ERR_ENUM
    GOBLIN_ERR_COUNT
} goblin_err;

/** Human-readable constant message for @p err ("unknown error" if out of range). */
GOBLIN_API const char *goblin_strerror(goblin_err err);

/** Symbolic name for @p err, e.g. "GOBLIN_ESHAPE" ("GOBLIN_EUNKNOWN" if out of range). */
GOBLIN_API const char *goblin_err_name(goblin_err err);

GOBLIN_END_DECLS

#endif
