/* libgoblin/net/listen_guard.h - listeners that keep taking connections.
 *
 * nng 1.5.2 (Debian's libnng1; upstream fixed it in 1.6.0, nng issue #1518) stops a
 * listener for good when a connection it accepted fails its SP handshake with
 * NNG_ECLOSED: the tcp, tls and ipc transports hand that error to the listener's
 * pending accept, and the listener takes NNG_ECLOSED for "I was closed" and never
 * accepts again. EPIPE maps to NNG_ECLOSED, so a peer that is gone before the 8-byte
 * SP header is sent (an ipc client closed at once, a TCP peer that sent FIN then RST,
 * a client freed while its heartbeat socket was still dialing) is enough. From then
 * on the transport still accepts and completes handshakes, but the connections wait
 * in its queue forever and the socket never sees them: workers and clients hang.
 *
 * A guard listens on the URLs of one socket and, from a thread of its own, proves
 * each listener alive about once a second: it connects to it with nng's stream API,
 * exchanges SP headers as a pair0 peer (which the pair1 socket rejects after its
 * ADD_PRE, so the probe never becomes a connection the node or gateway counts) and
 * waits for the socket's ADD_PRE to see a connection from that listener. A probe that
 * completed its handshake and was not taken in within PROBE_GRACE_MS (while no ADD_PRE
 * callback was running) means the listener is dead: it is closed (nng closes the
 * connections it had: their peers redial) and listened on again at the same address.
 * nng never frees a closed listener's transport endpoint while connections wait in its
 * queue (a few KiB and a descriptor each, per restart): still far better than an
 * address that takes nothing any more.
 */
#ifndef GOBLIN_LISTEN_GUARD_H
#define GOBLIN_LISTEN_GUARD_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "goblin/error.h"

typedef struct goblin__listen_guard goblin__listen_guard;

/** Told one line when a listener is restarted or cannot be (any thread). */
typedef void (*goblin__guard_log_fn)(void *user, bool error, const char *line);

/** A guard for socket @p s (borrowed; it must outlive the guard's stop); @p log may
 *  be NULL. GOBLIN_ENOMEM. */
goblin_err goblin__guard_new(goblin__listen_guard **out, nng_socket s, goblin__guard_log_fn log,
                             void *log_user);
/** Listen on @p url (goblin__transport_listen's rules; @p cert_file and @p key_file
 *  are copied, read again on a restart) and watch it: tcp, tls+tcp and ipc listeners
 *  are watched, others (inproc) only listened on. Call before goblin__guard_start. */
goblin_err goblin__guard_listen(goblin__listen_guard *g, const char *url, const char *cert_file,
                                const char *key_file, char *msg, size_t cap);
/** Start the watching thread. GOBLIN_ENOMEM. */
goblin_err goblin__guard_start(goblin__listen_guard *g);
/** Call first in the socket's NNG_PIPE_EV_ADD_PRE callback (any nng thread, never
 *  blocks). true: @p p is the guard's probe: return at once (nng rejects it). false:
 *  handle @p p, then call goblin__guard_pipe_done. @p g may be NULL (false). */
bool goblin__guard_pipe_added(goblin__listen_guard *g, nng_pipe p);
/** The ADD_PRE callback of a pipe goblin__guard_pipe_added returned false for is done
 *  (a callback still running holds up the listener: no verdict meanwhile). */
void goblin__guard_pipe_done(goblin__listen_guard *g);
/** Stop the thread (before the socket is closed); NULL is a no-op. */
void goblin__guard_stop(goblin__listen_guard *g);
/** Free the guard (after the socket is closed: no ADD_PRE can come any more); stops
 *  it first if needed. NULL is a no-op. */
void goblin__guard_free(goblin__listen_guard *g);

#endif
