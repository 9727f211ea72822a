/* goblin/testctrl.h - the one entry point for test hooks (tests and demos only).
 *
 * Like SQLite's sqlite3_test_control: fault injection and other hooks that make the
 * library misbehave on purpose are reached through goblin_test_control(), never
 * through the public params structs, so that no production configuration can turn
 * them on by accident. A worker set to misbehave deliberately returns bad results so
 * that the node's verification can be measured (docs/runtime.md, "Fault
 * injection"). Never use any of this in production.
 *
 * Arguments are passed as variadic arguments of exactly the types listed with each
 * op (write the casts: a plain 5 where a uint64_t is expected is undefined
 * behaviour). */
#ifndef GOBLIN_TESTCTRL_H
#define GOBLIN_TESTCTRL_H

#include "api.h"
#include "error.h"

GOBLIN_BEGIN_DECLS

/** What a misbehaving worker does to a task it was drawn to misbehave on. */
typedef enum goblin_misbehave {
    GOBLIN_MISBEHAVE_NONE = 0,
    GOBLIN_MISBEHAVE_WRONG = 1,    /* random wrong values */
    GOBLIN_MISBEHAVE_SCALE = 2,    /* result multiplied by (1 + 1e-3) */
    GOBLIN_MISBEHAVE_NAN = 3,      /* one element NaN */
    GOBLIN_MISBEHAVE_STALE = 4,    /* resend an earlier result under the new task id */
    GOBLIN_MISBEHAVE_SWAP = 5,     /* send the previous task's result for this one */
    GOBLIN_MISBEHAVE_TRUNCATE = 6, /* drop the last row of the result */
    GOBLIN_MISBEHAVE_SILENT = 7,   /* take the lease, never answer */
    GOBLIN_MISBEHAVE_SLOW = 8,     /* answer (correctly) after the SLOW delay */
    GOBLIN_MISBEHAVE_CRASH = 9,    /* die mid-task: see GOBLIN_TESTCTRL_WORKER_CRASH */
    GOBLIN_MISBEHAVE_NEGATE = 10,  /* every float output negated: two such workers send the
                                      same wrong bits (a colluding pair) */
    GOBLIN_MISBEHAVE_PRODUCTS = 11, /* every output that is a matmul's, convolution's or
                                       attention's value (the heavy nodes a CHECKED task
                                       returns) scaled by (1 + 1e-3), the other
                                       outputs as computed; deterministic, as NEGATE */
    GOBLIN_MISBEHAVE_NEGATE_REST = 12, /* every float output that is not a matmul's value
                                          negated, the products as computed (a sign-flipped
                                          loss and gradient); deterministic, as NEGATE */
    GOBLIN_MISBEHAVE_ONE_ELEMENT = 13, /* one element (the middle one) of every heavy output
                                          (as PRODUCTS) times (1 + 1e-3), the rest as
                                          computed; deterministic, as NEGATE */
    GOBLIN_MISBEHAVE_COUNT
} goblin_misbehave;

/** The ops of goblin_test_control, with their variadic arguments. Values are
 *  explicit and append-only. A worker op may be called before goblin_worker_run or
 *  while it runs (a grid's workers run from goblin_grid_local on): the worker takes
 *  the new settings at its next task (the catalogue version at its next HELLO). */
typedef enum goblin_testctrl_op {
    /** (goblin_worker *w, goblin_misbehave mode, double rate, uint64_t seed): from its
     *  next task on, @p w misbehaves with @p mode on each task with probability @p rate
     *  (in [0, 1]); @p seed makes the draws deterministic (the same seed, the same
     *  tasks). GOBLIN_EINVAL for a NULL worker, an unknown mode or a rate outside
     *  [0, 1]. Counted in goblin_worker_stats.misbehaved. */
    GOBLIN_TESTCTRL_WORKER_MISBEHAVE = 1,
    /** (goblin_worker *w, unsigned slow_ms): the SLOW delay (default 2000 ms). */
    GOBLIN_TESTCTRL_WORKER_SLOW_MS = 2,
    /** (goblin_worker *w, void (*hook)(void *user), void *user, int may_exit): what
     *  CRASH does. With a hook, the worker calls it and returns from goblin_worker_run
     *  with GOBLIN_ECLOSED without answering; without one, a non-zero @p may_exit lets
     *  the library call _exit(3) (a dedicated worker process), 0 (the default) returns
     *  as with a hook that does nothing. */
    GOBLIN_TESTCTRL_WORKER_CRASH = 3,
    /** (goblin_worker *w, unsigned version): pretend to speak catalogue @p version in
     *  HELLO (0: the real one, goblin_catalog_version()). */
    GOBLIN_TESTCTRL_WORKER_CATALOG_VERSION = 4,
    /** (goblin_misbehave mode, const char **name): *name = "none", "wrong", ... (static
     *  strings); GOBLIN_EINVAL (and *name = NULL) for a mode out of range. */
    GOBLIN_TESTCTRL_MISBEHAVE_NAME = 5,
    /** (const char *text, goblin_misbehave *mode, double *rate): parse "MODE" or
     *  "MODE:RATE" (the tools' --misbehave syntax; rate in [0, 1], default 1).
     *  GOBLIN_EINVAL, outputs untouched, if it does not parse. */
    GOBLIN_TESTCTRL_MISBEHAVE_PARSE = 6,
    /** (goblin_node *n, const char *identity, uint64_t origin): the connections of
     *  worker identity @p identity (64 lowercase hex digits, goblin_worker_identity)
     *  that have no network origin (inproc://, ipc://, loopback) count as coming from
     *  origin @p origin (1 .. 2^60 - 1; 0: none again), so that in-process workers can
     *  stand for several machines (docs/verification.md, "Threat model"). Applies to
     *  connections already admitted and to later ones. GOBLIN_EINVAL for a NULL node
     *  or identity, a malformed identity or an origin out of range. */
    GOBLIN_TESTCTRL_NODE_ORIGIN = 7,
    /** (goblin_hub *h, const char *ip): the connections @p h's machines address accepts
     *  from a local address (loopback) from now on count as coming from @p ip (an IPv4
     *  or IPv6 literal; NULL: their own again): the network origin the hub reports to a
     *  lab node for a relayed worker (docs/hub.md, "Origins"). GOBLIN_EINVAL for a NULL
     *  hub or a bad literal, GOBLIN_ESTATE before goblin_hub_serve_machines. */
    GOBLIN_TESTCTRL_HUB_WORKER_ADDR = 8,
    GOBLIN_TESTCTRL_COUNT
} goblin_testctrl_op;

/** Run test-control op @p op (goblin_testctrl_op) with the arguments listed for it.
 *  GOBLIN_EINVAL for an unknown op or bad arguments. Thread-safe. Tests and demos
 *  only. */
GOBLIN_API goblin_err goblin_test_control(int op, ...);

GOBLIN_END_DECLS

#endif
