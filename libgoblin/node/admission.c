/* libgoblin/node/admission.c - connections before they say who they are.
 *
 * nng holds up to one message (a part: 4 MiB, proto/part.h) for any connection, before
 * the node knows whether a worker or a client is there; so the connections that have not
 * yet proved a worker identity nor been handed to the gateway (which has budgets of its
 * own) are counted: at most max_pending_connections at once (more are closed as they
 * come), each for at most the handshake time. That bounds what nobody in particular can
 * make the node hold to max_pending_connections x 4 MiB. */
#include "node_impl.h"

#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "net/transport.h"

/* ADD_PRE (nng's thread): admit @p p into the pending table, or close it. */
void goblin__node_pipe_added(goblin_node *n, nng_pipe p) {
    pthread_mutex_lock(&n->ev_mu);
    bool ok = n->n_pending < n->p.max_pending_connections;
    if (ok) {
        int64_t cap = n->cap_pending;
        ok = goblin__node_grow((void **)&n->pending, &cap, n->n_pending + 1, sizeof *n->pending);
        n->cap_pending = (int32_t)cap;
    }
    if (ok) n->pending[n->n_pending++] = (goblin__pending_pipe){nng_pipe_id(p), p, goblin__now_ms()};
    else n->pending_refused++;
    pthread_mutex_unlock(&n->ev_mu);
    if (!ok) nng_pipe_close(p); /* never entered: its removal finds nothing */
}

/* Pipe @p id is no longer pending (ev_mu held). */
static void forget(goblin_node *n, uint32_t id) {
    for (int32_t i = 0; i < n->n_pending; i++)
        if (n->pending[i].id == id) {
            n->pending[i] = n->pending[--n->n_pending];
            return;
        }
}

void goblin__node_pipe_known(goblin_node *n, uint32_t id) {
    pthread_mutex_lock(&n->ev_mu);
    forget(n, id);
    pthread_mutex_unlock(&n->ev_mu);
}

void goblin__node_pipe_forget(goblin_node *n, uint32_t id) {
    pthread_mutex_lock(&n->ev_mu);
    forget(n, id);
    pthread_mutex_unlock(&n->ev_mu);
}

void goblin__node_pending_sweep(goblin_node *n, int64_t now, int64_t grace_ms) {
    nng_pipe late[64];
    int k = 0;
    int64_t refused;
    pthread_mutex_lock(&n->ev_mu);
    for (int32_t i = 0; i < n->n_pending && k < 64; i++)
        if (now - n->pending[i].added_ms > grace_ms) {
            late[k++] = n->pending[i].pipe;
            n->pending[i].added_ms = now; /* closed now; not again before it is gone */
        }
    refused = n->pending_refused;
    n->pending_refused = 0;
    pthread_mutex_unlock(&n->ev_mu);
    for (int i = 0; i < k; i++) goblin__transport_pipe_close(late[i]);
    if (k + refused) {
        n->st.peers_dropped += k + refused;
        goblin__node_log(n, GOBLIN_LOG_WARN, "closed %d connection(s) that said nothing useful "
                         "within %lld ms, and refused %lld over the limit of %d pending",
                         k, (long long)grace_ms, (long long)refused, n->p.max_pending_connections);
    }
}
