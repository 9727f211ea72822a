/* libgoblin/node/client_port.h - clients on the node's own addresses.
 *
 * Workers and clients may dial the same address: each says what it is with its first
 * message (a worker's HELLO, a client's "GBLC" request). The node keeps the workers;
 * it hands every client message to the client port the gateway (service/) attached,
 * and the gateway answers on the node's socket, addressed to the client's pipe. A node
 * with no port attached answers a client at once, saying where clients connect. */
#ifndef GOBLIN__NODE_CLIENT_PORT_H
#define GOBLIN__NODE_CLIENT_PORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "goblin/node.h"

typedef struct goblin__client_port {
    /* Takes @p msg, a client's message, on the node's thread with the node's lock held:
     * it must queue it and return, never call the node. */
    void (*on_message)(void *user, nng_msg *msg);
    /* Connection @p pipe_id closed (nng's thread). */
    void (*on_pipe_removed)(void *user, uint32_t pipe_id);
    void *user;
} goblin__client_port;

/** Serve clients through @p port on the node's addresses (the node must be started);
 *  *sock: the node's socket, for the replies (nng_msg_set_pipe). @p port NULL detaches:
 *  once this returns, the port's callbacks are not called again. GOBLIN_ESTATE if the
 *  node is not running, or another port is attached. */
goblin_err goblin__node_attach_clients(goblin_node *n, const goblin__client_port *port,
                                       nng_socket *sock);

/** Where clients connect when not on the node's addresses (the gateway's own, as text
 *  for the node's answer to a client that dialed a worker address); NULL: none. */
void goblin__node_set_client_urls(goblin_node *n, const char *urls);

/** Are all the node's listen URLs loopback, ipc:// or inproc:// (goblin_url_is_local)? */
bool goblin__node_listens_locally(const goblin_node *n);

/** The node's listen URLs, joined by ", " into @p out (for messages). */
void goblin__node_listen_text(const goblin_node *n, char *out, size_t cap);

/** node_main: is @p msg a client's (starts with the client magic)? If so it was handed
 *  to the port (true, and @p msg is no longer the caller's) or answered (true, @p msg
 *  still the caller's to free: *msg_taken says which). */
bool goblin__node_client_msg(goblin_node *n, nng_msg *msg, bool *msg_taken);

/** nng's thread: pipe @p pipe_id closed; tell the port, if one is attached. */
void goblin__node_client_pipe_removed(goblin_node *n, uint32_t pipe_id);

#endif
