/* transport.h - the one place where node and worker sockets are set up.
 *
 * Both sides use nng's PAIRv1 protocol: the node's socket is polyamorous (one
 * socket, one pipe per worker; replies are addressed by pipe), a worker's is
 * plain pair1 (one pipe to its node). The URL scheme picks the transport:
 * tcp://, ipc:// and inproc:// now; tls+tcp:// is accepted here once the TLS layer
 * (tls.h) provides a configuration to attach before the endpoint starts. */
#ifndef GOBLIN_TRANSPORT_H
#define GOBLIN_TRANSPORT_H

#include <nng/nng.h>
#include <stddef.h>
#include <stdint.h>

#include "goblin/error.h"

/** Open the node's socket: pair1 polyamorous, receive limit @p recv_max (0: none;
 *  inproc ignores it). */
goblin_err goblin__transport_open_node(nng_socket *s, uint64_t recv_max, char *msg, size_t cap);
/** Open a worker's socket: pair1, receive limit @p recv_max. */
goblin_err goblin__transport_open_worker(nng_socket *s, uint64_t recv_max, char *msg, size_t cap);
/** Listen on @p url. GOBLIN_EIO / GOBLIN_ENOTSUP with @p msg saying why. */
goblin_err goblin__transport_listen(nng_socket s, const char *url, char *msg, size_t cap);
/** Dial @p url in the background: nng redials with backoff between @p min_ms and
 *  @p max_ms whenever the connection is lost or refused. */
goblin_err goblin__transport_dial(nng_socket s, const char *url, uint32_t min_ms, uint32_t max_ms,
                                  char *msg, size_t cap);
/** goblin_err for an nng error code. */
goblin_err goblin__transport_err(int rv);

#endif
