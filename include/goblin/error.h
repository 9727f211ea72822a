/* goblin/error.h - the library's error codes, and where a failure's detail goes.
 *
 * Every fallible function returns a goblin_err. Its detail (why, and where in the
 * input) follows one rule: a call made on a handle that outlives it (a graph being
 * built, an executor, a job, a client, a trainer) keeps the detail on that handle,
 * read with goblin_<handle>_error() (the node, worker and gateway, which run threads
 * of their own, hand it to their params' log callback instead); every other call
 * that can say why (a constructor or loader whose handle does not exist yet, a
 * function without a handle, a call that makes a new object from another, such as
 * goblin_graph_rebatch) writes it into the caller's goblin_errbuf, passed as its last
 * argument `err` (NULL allowed). No call does both, and there is no global "last
 * error". */
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

/** A caller's buffer for a failure's detail (see the rule above). A call taking one
 *  sets message to "" and position to -1 when it starts, then, on failure, message to
 *  why (NUL-terminated, truncated to fit) and, where the failure is at a place in a
 *  text the call parsed (a formula), position to its byte offset. */
typedef struct goblin_errbuf {
    int32_t position;  /* byte offset in the parsed text, -1 if the detail has none */
    char message[512];
} goblin_errbuf;

/** Human-readable constant message for @p err ("unknown error" if out of range). */
GOBLIN_API const char *goblin_strerror(goblin_err err);

/** Symbolic name for @p err, e.g. "GOBLIN_ESHAPE" ("GOBLIN_EUNKNOWN" if out of range). */
GOBLIN_API const char *goblin_err_name(goblin_err err);

GOBLIN_END_DECLS

#endif
