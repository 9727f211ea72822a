/* libgoblin/service/client_impl.h - the client's state (internal to service/): the
 * calls (client.c) and the connection under them (client_link.c: dialing, replies,
 * parts, heartbeats). */
#ifndef GOBLIN__SERVICE_CLIENT_IMPL_H
#define GOBLIN__SERVICE_CLIENT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include <nng/nng.h>

#include "base/errf.h"
#include "goblin/client.h"
#include "proto/client_wire.h"

struct goblin_client {
    goblin_client_params p;
    nng_socket sock;
    pthread_mutex_t mu;
    uint64_t next_rid;
    char err[600];
    char url[256];                     /* for messages */
    bool node_eauth;                   /* the last request was answered ERROR EAUTH */
    bool transport_failed;             /* the last request got no reply (connection lost) */
    char credential[GOBLIN__CW_MAX_TOKEN + 1]; /* c->p.credential points here */
    /* A request waiting for its reply, and the connection under it (pipe callbacks). */
    pthread_mutex_t wmu;
    pthread_cond_t wcv;
    bool waiting, reply_done, conn_lost;
    /* connections lost so far, and that count when the request waited for was sent: a
     * connection that closes between the send and the wait is not missed (pair1, unlike
     * req0, does not fail the request itself) */
    uint64_t lost_gen, sent_gen;
    /* the heartbeat connection: a second pair1 socket to the same gateway */
    nng_socket hb;
    bool hb_open;
    atomic_bool hb_up; /* its connection has made it through the SP handshake */
    uint64_t hb_rid;
};

/* The client's message (goblin_client_error) and @p e. */
#define cerr(c, e, ...) goblin__errf((c)->err, sizeof (c)->err, (e), __VA_ARGS__)

goblin_err goblin__client_nng_err(int rv);
/* The request id in the header of a reply (at least GOBLIN__CW_HEADER_SIZE bytes). */
uint64_t goblin__client_reply_rid(const void *buf);
void goblin__client_on_pipe_removed(nng_pipe p, nng_pipe_ev ev, void *arg);
/* Close the heartbeat socket, if open, once its connection is past the SP handshake
 * (waiting at most 500 ms): a connection abandoned halfway through it stops an nng 1.5.2
 * listener for good on ipc (net/listen_guard.h), so the gateway would have to restart
 * its listener and drop every other client. */
void goblin__client_close_heartbeat(goblin_client *c);
/* The first connection within @p timeout_ms on any transport; (why, cap) say why not. */
goblin_err goblin__client_dial_bounded(goblin_client *c, nng_dialer d, const char *url,
                                       uint32_t timeout_ms, char *why, size_t cap);
/* The heartbeat connection (client.h, heartbeat_ms), and its credential presented. */
void goblin__client_open_heartbeat(goblin_client *c, const char *url, const goblin_client_params *p,
                                   bool tls);
void goblin__client_auth_heartbeat(goblin_client *c);
/* AUTH with the client's credential / a STATS probe, each within @p timeout_ms. */
goblin_err goblin__client_send_auth(goblin_client *c, uint32_t timeout_ms);
goblin_err goblin__client_probe(goblin_client *c, uint32_t timeout_ms);
/* One request and its reply (in parts if large; resent once where that is safe).
 * *keep holds the reply's bytes (nng_msg_free it after using the reply's tensors). */
goblin_err goblin__client_roundtrip(goblin_client *c, goblin__cw_msg *req, goblin__cw_msg *reply,
                                    nng_msg **keep);

/* goblin_client_fetch_result straight into the caller's tensor @p dst (any strides; its
 * dtype and shape say what is expected): the result is copied once, from the reply into
 * @p dst, with no buffer of its own. A reply of another dtype or shape, or none (a file
 * job), is GOBLIN_EPROTO with @p dst untouched (the job is released either way); a
 * reply that does not decode, GOBLIN_EFORMAT (or the decoder's code). Other results as
 * goblin_client_fetch_result. */
goblin_err goblin__client_fetch_result_into(goblin_client *c, const goblin_job_id *job_id, goblin_tensor *dst);

#endif
