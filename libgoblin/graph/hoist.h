/* libgoblin/graph/hoist.h - a graph's large constants as cached inputs, so that a
 * captured model's weights travel to each worker once (internal). */
#ifndef GOBLIN__GRAPH_HOIST_H
#define GOBLIN__GRAPH_HOIST_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "goblin/graph.h"

struct goblin__node;
/** Are two graph nodes the same (op, dtype, shape, inputs, attributes, payload bytes)? */
bool goblin__same_node(const struct goblin__node *x, const struct goblin__node *y);

/** A graph re-instantiated with its large constants as inputs (shared, read-only). */
typedef struct goblin__hoisted {
    goblin_graph *g;   /* the graph, each hoisted constant an INPUT node (same node ids) */
    int32_t n_in;      /* g's inputs: the caller's and the hoisted constants, in node order */
    int32_t *src;      /* per input of g: the caller's input index, or -1 - k for constant k */
    int32_t n_const;
    goblin_tensor *ct; /* per constant: dtype, shape and data (a copy) */
    uint64_t *cid;     /* per constant: its cache id (random, secret) */
    int32_t *node;     /* per constant: its node id, ascending */
} goblin__hoisted;

#define GOBLIN__HOIST_MEMO 2
/** The graphs hoisted last (a node's): the same graph gets the same entry, ids included. */
typedef struct goblin__hoist_memo {
    pthread_mutex_t mu;
    struct goblin__hoist_entry *e[GOBLIN__HOIST_MEMO];
    uint64_t last[GOBLIN__HOIST_MEMO], clock;
} goblin__hoist_memo;

void goblin__hoist_memo_init(goblin__hoist_memo *m);
void goblin__hoist_memo_fini(goblin__hoist_memo *m);
/** *out: @p g with its large constants as inputs (a reference: goblin__hoist_release it),
 *  or NULL when @p g has none; the result has at most @p max_inputs inputs. Thread-safe.
 *  GOBLIN_ENOMEM. */
goblin_err goblin__hoist_get(goblin__hoist_memo *m, const goblin_graph *g, int32_t max_inputs,
                             const goblin__hoisted **out);
void goblin__hoist_release(const goblin__hoisted *h);

#endif
