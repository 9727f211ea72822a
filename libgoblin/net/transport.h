/* libgoblin/net/transport.h - the one place where node and worker sockets are set up.
 *
 * Both sides use nng's PAIRv1 protocol: the node's socket is polyamorous (one
 * socket, one pipe per worker; replies are addressed by pipe), a worker's is
 * plain pair1 (one pipe to its node). The URL scheme picks the transport:
 * tcp://, ipc:// and inproc:// now; tls+tcp:// is accepted here once the TLS layer
 * (tls.h) provides a configuration to attach before the endpoint starts. */
#ifndef GOBLIN_TRANSPORT_H
#define GOBLIN_TRANSPORT_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "goblin/error.h"

/** Open the node's socket: pair1 polyamorous, receive limit @p recv_max (0: none;
 *  inproc ignores it). */
goblin_err goblin__transport_open_node(nng_socket *s, uint64_t recv_max, char *msg, size_t cap);
/** Open a worker's socket: pair1, receive limit @p recv_max. */
goblin_err goblin__transport_open_worker(nng_socket *s, uint64_t recv_max, char *msg, size_t cap);
/** Listen on @p url. tls+tcp:// URLs need @p cert_file and @p key_file (PEM).
 *  GOBLIN_EIO / GOBLIN_EINVAL / GOBLIN_ECRYPTO with @p msg saying why. */
goblin_err goblin__transport_listen(nng_socket s, const char *url, const char *cert_file,
                                    const char *key_file, char *msg, size_t cap);
/** goblin__transport_listen that also gives the started listener (@p out: NULL or
 *  set on success). A node or gateway listens through listen_guard.h instead. */
goblin_err goblin__transport_listen_on(nng_socket s, const char *url, const char *cert_file,
                                       const char *key_file, nng_listener *out, char *msg,
                                       size_t cap);

/** What a worker trusts for tls+tcp:// nodes: a CA file or a pinned fingerprint. */
typedef struct goblin__transport_trust {
    const char *ca_file;
    const char *fingerprint;
    const char *server_name;
} goblin__transport_trust;

/** Asked between retries of a pinned-TLS dial setup: true ends the wait. */
typedef bool (*goblin__transport_stop_fn)(void *user);

/** Dial @p url in the background: nng redials with backoff between @p min_ms and
 *  @p max_ms whenever the connection is lost or refused. tls+tcp:// needs @p trust;
 *  in pinned mode the setup itself must reach the node (tls_impl.h), so it is
 *  retried here with the same backoff while the node is not up (refused, timed
 *  out, unreachable) until @p stop says so (GOBLIN_ECANCELED). A fingerprint
 *  mismatch (GOBLIN_EAUTH) or a bad CA file fails at once. */
goblin_err goblin__transport_dial(nng_socket s, const char *url, uint32_t min_ms, uint32_t max_ms,
                                  const goblin__transport_trust *trust,
                                  goblin__transport_stop_fn stop, void *stop_user, char *msg,
                                  size_t cap, nng_dialer *out);
/** tcp://, tcp4://, tcp6:// (not TLS). */
bool goblin__transport_url_is_plain_tcp(const char *url);
/** Where the host of @p url is: a numeric address's range, or a name (which may resolve
 *  anywhere); ipc:// and inproc:// are LOCAL; BAD: not host:port. */
typedef enum goblin__url_scope {
    GOBLIN__SCOPE_BAD,
    GOBLIN__SCOPE_LOCAL,    /* ipc://, inproc:// */
    GOBLIN__SCOPE_LOOPBACK, /* 127.0.0.0/8, ::1 */
    GOBLIN__SCOPE_PRIVATE,  /* 10/8, 172.16/12, 192.168/16, fc00::/7 */
    GOBLIN__SCOPE_OTHER,    /* link-local, 0/8, multicast and up, ::, v4-mapped, site-local */
    GOBLIN__SCOPE_PUBLIC,   /* any other numeric address */
    GOBLIN__SCOPE_NAME,     /* a host name */
} goblin__url_scope;
goblin__url_scope goblin__transport_url_scope(const char *url);
/** Is @p url ipc://, inproc:// or on a loopback address (127.x, [::1]; not names)? */
bool goblin__transport_url_is_local(const char *url);
/** tls+tcp:// and its variants. */
bool goblin__transport_url_is_tls(const char *url);
/** Receive one message, waiting at most @p timeout_ms (0: do not wait), like
 *  nng_recvmsg with a receive timeout but without nng's timer: nng 1.5's aio expiry
 *  thread spins for up to a millisecond on every receive that times out (measured:
 *  a loop with a 10 ms timeout burns about 7% of a core doing nothing; this wait,
 *  poll(2) on the socket's NNG_OPT_RECVFD, about 0.5%). @p *fd caches that descriptor
 *  (pass -1 the first time; it stays valid until the socket is closed). Returns 0,
 *  NNG_ETIMEDOUT, or nng's error (NNG_ECLOSED once the socket is closed). */
int goblin__transport_recv(nng_socket s, int *fd, nng_msg **msg, int timeout_ms);
/** goblin__transport_recv that also returns early (NNG_ETIMEDOUT, no message) when
 *  @p wake_fd (the read end of a non-blocking pipe, or -1) becomes readable; the bytes
 *  waiting there are drained. Another thread writes a byte to the pipe to wake the
 *  receiver at once (a job submitted to the node). *@p empty (if not NULL) is set when
 *  the socket had no message waiting at the call: everything received before it has
 *  been read. */
int goblin__transport_recv_or_wake(nng_socket s, int *fd, int wake_fd, nng_msg **msg, int timeout_ms,
                                   bool *empty);
/** End the connection of pipe @p p (a peer being dropped) without nng_pipe_close's
 *  hang. nng 1.5.2's TCP and TLS transports re-arm their receive after a completed
 *  read without checking whether the pipe was closed meanwhile; an aio that is
 *  stopped does not call back, so a pipe closed from another thread while the peer
 *  is still sending (a burst of garbage frames) can leave its receive waiting for
 *  good. Then nng's single reaper thread waits on it in the protocol's pipe_stop,
 *  no pipe of the process is freed any more (one leaked descriptor per connection
 *  from then on) and nng_close never returns. Here a TCP connection is shut down
 *  with shutdown(2) instead: the pending read fails, and the protocol closes the
 *  pipe from its own receive callback, where no read is in flight. Other
 *  transports (inproc, ipc), or a connection whose descriptor is not found, get
 *  nng_pipe_close. Callable from any thread; never blocks on nng. */
void goblin__transport_pipe_close(nng_pipe p);
/** Close for good the pipes goblin__transport_pipe_close shut down a while ago whose
 *  protocol did not close them (nng 1.5.2 over TLS); call now and then (the node's
 *  housekeeping, the gateway's loop). Any thread; never blocks on nng. */
void goblin__transport_close_dropped(void);
/** goblin_err for an nng error code. */
goblin_err goblin__transport_err(int rv);

#endif
