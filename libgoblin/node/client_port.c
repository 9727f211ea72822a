/* libgoblin/node/client_port.c - clients on the node's own addresses (client_port.h). */
#include "client_port.h"
#include "node_impl.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "proto/client_wire.h"

goblin_err goblin__node_attach_clients(goblin_node *n, const goblin__client_port *port,
                                       nng_socket *sock) {
    if (!n) return GOBLIN_EINVAL;
    goblin_err e = GOBLIN_OK;
    pthread_mutex_lock(&n->mu);
    pthread_mutex_lock(&n->ev_mu);
    if (!port) {
        n->cport_set = false;
        memset(&n->cport, 0, sizeof n->cport);
    } else if (!n->socket_open || n->stopping) {
        e = GOBLIN_ESTATE;
    } else if (n->cport_set) {
        e = GOBLIN_ESTATE;
    } else {
        n->cport = *port;
        n->cport_set = true;
        if (sock) *sock = n->sock;
    }
    pthread_mutex_unlock(&n->ev_mu);
    pthread_mutex_unlock(&n->mu);
    return e;
}

void goblin__node_set_client_urls(goblin_node *n, const char *urls) {
    if (!n) return;
    pthread_mutex_lock(&n->mu);
    snprintf(n->client_urls, sizeof n->client_urls, "%s", urls ? urls : "");
    pthread_mutex_unlock(&n->mu);
}

void goblin__node_client_pipe_removed(goblin_node *n, uint32_t pipe_id) {
    pthread_mutex_lock(&n->ev_mu);
    if (n->cport_set && n->cport.on_pipe_removed) n->cport.on_pipe_removed(n->cport.user, pipe_id);
    pthread_mutex_unlock(&n->ev_mu);
}

bool goblin__node_listens_locally(const goblin_node *n) {
    for (int32_t i = 0; i < n->p.n_listen; i++)
        if (!goblin_url_is_local(n->p.listen[i])) return false;
    return true;
}

void goblin__node_listen_text(const goblin_node *n, char *out, size_t cap) {
    size_t k = 0;
    if (cap) out[0] = 0;
    for (int32_t i = 0; i < n->p.n_listen && k < cap; i++) {
        int w = snprintf(out + k, cap - k, "%s%s", i ? ", " : "", n->p.listen[i]);
        if (w < 0) break;
        k += (size_t)w;
    }
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* No port here: the client is told at once where clients connect (an ERROR to its
 * request, which it reports; it never waits for an answer that cannot come). */
static void refuse(goblin_node *n, nng_msg *msg) {
    const uint8_t *b = nng_msg_body(msg);
    size_t len = nng_msg_len(msg);
    uint64_t rid = len >= GOBLIN__CW_HEADER_SIZE ? le64(b + 8) : 0;
    goblin__cw_msg *r = goblin__calloc(1, sizeof *r);
    if (!r) return;
    r->type = GOBLIN__CW_ERROR;
    r->request_id = rid;
    r->code = (int32_t)GOBLIN_EPROTO;
    if (n->client_urls[0])
        snprintf(r->text, sizeof r->text, "this is the node's worker address; clients connect "
                 "to %.300s", n->client_urls);
    else
        snprintf(r->text, sizeof r->text, "this node serves workers only: it takes no clients "
                 "(its operator serves them with goblin-node --credentials FILE, or --open on "
                 "a loopback address)");
    size_t sz, out;
    nng_msg *rep;
    if (goblin__cw_encoded_size(r, &sz) == GOBLIN_OK && nng_msg_alloc(&rep, sz) == 0) {
        goblin__cw_encode_into(r, nng_msg_body(rep), sz, &out);
        nng_msg_set_pipe(rep, nng_msg_get_pipe(msg));
        if (nng_sendmsg(n->sock, rep, NNG_FLAG_NONBLOCK) != 0) nng_msg_free(rep);
    }
    goblin__free(r);
    goblin__node_log(n, GOBLIN_LOG_INFO, "a client connected to the worker address: told %s",
                     n->client_urls[0] ? "where clients connect" : "this node serves no clients");
}

bool goblin__node_client_msg(goblin_node *n, nng_msg *msg, bool *msg_taken) {
    *msg_taken = false;
    const uint8_t *b = nng_msg_body(msg);
    if (nng_msg_len(msg) < 4 || memcmp(b, "GBLC", 4) != 0) return false;
    if (n->cport_set && n->cport.on_message) {
        goblin__node_pipe_known(n, nng_pipe_id(nng_msg_get_pipe(msg))); /* the gateway's budgets now */
        n->cport.on_message(n->cport.user, msg);
        *msg_taken = true;
        return true;
    }
    refuse(n, msg);
    return true;
}
