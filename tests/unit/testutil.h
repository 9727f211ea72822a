/* tests/unit/testutil.h - helpers shared by the Criterion tests: build a
 * one-op graph over given tensors and evaluate it on a backend; a counting
 * allocator that fails on demand (its state is in testutil.c). */
#ifndef GOBLIN_TESTUTIL_H
#define GOBLIN_TESTUTIL_H

#include <goblin/goblin.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A contiguous tensor descriptor over @p data. */
static inline goblin_tensor gt_tensor(goblin_dtype dt, int32_t rank, const int64_t *shape,
                                      void *data) {
    goblin_tensor t;
    memset(&t, 0, sizeof t);
    goblin_tensor_init(&t, dt, rank, shape, data);
    return t;
}

/* Build "op(inputs..., attrs)" with one graph input per tensor and evaluate it on
 * @p backend with @p threads. On success *out describes a library buffer (free with
 * goblin_buffer_free(out->data)). On failure returns the error; @p msg (if not NULL)
 * gets the graph or executor message. */
static inline goblin_err gt_run1(goblin_op op, const goblin_tensor *ins, int32_t n_in,
                                 const goblin_attr *attrs, int32_t n_attrs,
                                 goblin_backend_kind backend, int32_t threads, goblin_tensor *out,
                                 char *msg, size_t cap) {
    goblin_graph *g = NULL;
    goblin_err e = goblin_graph_new(&g);
    if (e) return e;
    int32_t ids[16];
    if (msg && cap) msg[0] = 0;
    for (int32_t i = 0; i < n_in && i < 16; i++) {
        e = goblin_graph_input(g, ins[i].dtype, ins[i].rank, ins[i].shape, &ids[i]);
        if (e) goto fail;
    }
    int32_t y;
    e = goblin_graph_add(g, op, ids, n_in, attrs, n_attrs, &y);
    if (e) goto fail;
    e = goblin_graph_output(g, y);
    if (e) goto fail;
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = backend;
    p.threads = threads;
    goblin_exec *ex = NULL;
    e = goblin_exec_new(&ex, g, &p);
    if (e) goto fail;
    memset(out, 0, sizeof *out);
    e = goblin_exec_run(ex, ins, n_in, out, 1);
    if (e && msg && cap) snprintf(msg, cap, "%s", goblin_exec_error(ex));
    goblin_exec_free(ex);
    goblin_graph_free(g);
    return e;
fail:
    if (msg && cap) snprintf(msg, cap, "%s", goblin_graph_error(g));
    goblin_graph_free(g);
    return e;
}

/* Only build the graph (no evaluation): returns the build error and its message. */
static inline goblin_err gt_build1(goblin_op op, const goblin_tensor *ins, int32_t n_in,
                                   const goblin_attr *attrs, int32_t n_attrs, goblin_tensor *info,
                                   char *msg, size_t cap) {
    goblin_graph *g = NULL;
    goblin_err e = goblin_graph_new(&g);
    if (e) return e;
    int32_t ids[16], y;
    for (int32_t i = 0; i < n_in && i < 16 && !e; i++)
        e = goblin_graph_input(g, ins[i].dtype, ins[i].rank, ins[i].shape, &ids[i]);
    if (!e) e = goblin_graph_add(g, op, ids, n_in, attrs, n_attrs, &y);
    if (!e && info) goblin_graph_node(g, y, NULL, info, NULL, NULL);
    if (e && msg && cap) snprintf(msg, cap, "%s", goblin_graph_error(g));
    goblin_graph_free(g);
    return e;
}

/* Quick mode: the sanitizer build (10x slower) and GOBLIN_TEST_QUICK=1 run the
 * statistical tests with fewer trials; the normal build runs them in full. */
static inline int gt_quick(void) {
#if defined(__SANITIZE_ADDRESS__)
    return 1;
#else
    const char *q = getenv("GOBLIN_TEST_QUICK");
    return q && q[0] && q[0] != '0';
#endif
}

/* Relative/absolute closeness. */
static inline int gt_close(double a, double b, double rel, double abs_tol) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    return fabs(a - b) <= abs_tol + rel * fabs(b);
}

/* Deterministic pseudo-random numbers for test data (xorshift64*). */
static inline double gt_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 0x2545F4914F6CDD1DULL) >> 11) * 0x1p-53;
}

/* ---- the counting allocator (goblin_set_allocator) ------------------------------ */

/* What the allocator saw since gt_alloc_on. Tests read it and may set its fields. */
typedef struct gt_alloc_counts {
    long asked;     /* allocations asked for, failed ones included */
    long made;      /* allocations that succeeded */
    long freed;     /* blocks freed */
    long live;      /* blocks allocated and not yet freed */
    long fail_at;   /* the allocation (numbered by asked from 0) that fails; -1: none */
    bool fail_rest; /* and, with fail_at >= 0, every one after it */
} gt_alloc_counts;

extern gt_alloc_counts gt_allocs;

/* Zero the counts, fail nothing, and install the counting allocator. */
void gt_alloc_on(void);
/* Give the library back its default allocator (the counts stay readable). */
void gt_alloc_off(void);
/* A new count (asked = live = 0) in which the first @p n allocations succeed and
 * every later one fails; n < 0: none fails. */
void gt_alloc_fail_from(long n);

#endif
