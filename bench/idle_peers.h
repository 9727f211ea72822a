/* bench/idle_peers.h - simulated idle workers for bench_grid's "idle connections"
 * section: each dials the node over the real transport, says HELLO, proves an identity
 * of its own (proto/wire.h, net/worker_key.h: the real protocol) and then only sends
 * HEARTBEATs, never a LEASE_REQUEST: connected, admitted, and never asking for work. */
#ifndef GOBLIN_BENCH_IDLE_PEERS_H
#define GOBLIN_BENCH_IDLE_PEERS_H

#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "goblin/alloc.h"
#include "net/worker_key.h"
#include "proto/wire.h"

typedef struct idle_peers {
    nng_socket *s;
    int n;
    unsigned hb_ms;
    atomic_bool quit;
    pthread_t hb;
    bool hb_started;
} idle_peers;

/* Encode and send @p m on @p s; its bytes' SHA-256 into @p hash if not NULL. 0 or an nng error. */
static int idle_send(nng_socket s, const goblin__wire_msg *m, uint8_t *hash, int flags) {
    uint8_t *buf;
    size_t len;
    if (goblin__wire_encode(m, &buf, &len) != GOBLIN_OK) return NNG_EINVAL;
    if (hash) goblin__wkey_hash(buf, len, hash);
    int rv = nng_send(s, buf, len, flags);
    goblin_buffer_free(buf);
    return rv;
}

static goblin__wire_msg *idle_recv(nng_socket s) {
    void *rb;
    size_t rlen;
    if (nng_recv(s, &rb, &rlen, NNG_FLAG_ALLOC) != 0) return NULL;
    goblin__wire_msg *r = NULL;
    goblin_err e = goblin__wire_decode(rb, rlen, NULL, 0, &r, NULL, 0);
    nng_free(rb, rlen);
    return e == GOBLIN_OK ? r : NULL;
}

/* HELLO (1 thread, @p memory bytes), CHALLENGE, PROOF with a new identity, HELLO_ACK. */
static int idle_join(nng_socket s, uint64_t memory) {
    goblin__wkey *key = NULL;
    if (goblin__wkey_ephemeral(&key, NULL, 0) != GOBLIN_OK) return -1;
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HELLO);
    m.body.hello.backends = 1u | GOBLIN_WIRE_CAP_BATCH;
    m.body.hello.threads = 1;
    m.body.hello.memory_bytes = memory;
    uint8_t hh[32];
    int ok = -1;
    goblin__wire_msg *c = NULL, *ack = NULL;
    if (idle_send(s, &m, hh, 0) != 0 || !(c = idle_recv(s)) || c->type != GOBLIN_WIRE_TYPE_CHALLENGE) goto out;
    uint8_t digest[32], sig[GOBLIN__WKEY_SIG_MAX];
    size_t sl = 0;
    if (goblin__wkey_proof_digest(c->body.challenge.nonce, hh, goblin__wkey_public(key), digest) ||
        goblin__wkey_sign(key, digest, sig, &sl, NULL, 0))
        goto out;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_PROOF);
    m.body.proof.key = goblin__wkey_public(key);
    m.body.proof.key_len = GOBLIN__WKEY_PUBLIC_BYTES;
    m.body.proof.sig = sig;
    m.body.proof.sig_len = (uint32_t)sl;
    if (idle_send(s, &m, NULL, 0) == 0 && (ack = idle_recv(s)) && ack->type == GOBLIN_WIRE_TYPE_HELLO_ACK) ok = 0;
out:
    goblin__wire_msg_free(c);
    goblin__wire_msg_free(ack);
    goblin__wkey_free(key);
    return ok;
}

/* A HEARTBEAT from every peer each hb_ms / 2 (the node drops a peer silent for 3 x hb_ms),
 * spread evenly over the interval as independent workers' heartbeats are (a burst of
 * 1,000 at once would hold the node's thread for tens of ms now and then). */
static void *idle_hb_main(void *arg) {
    idle_peers *ip = arg;
    goblin__wire_msg hb;
    goblin__wire_msg_init(&hb, GOBLIN_WIRE_TYPE_HEARTBEAT);
    useconds_t gap = (useconds_t)((uint64_t)ip->hb_ms * 500 / (uint64_t)(ip->n > 0 ? ip->n : 1));
    while (!atomic_load(&ip->quit))
        for (int i = 0; i < ip->n && !atomic_load(&ip->quit); i++) {
            idle_send(ip->s[i], &hb, NULL, NNG_FLAG_NONBLOCK);
            usleep(gap);
        }
    return NULL;
}

/* @p n idle peers on @p url, heartbeating for a node whose heartbeat_ms is @p hb_ms.
 * 0, or -1 if one could not join (those that did are then stopped). */
static int idle_start(idle_peers *ip, const char *url, int n, uint64_t memory, unsigned hb_ms) {
    memset(ip, 0, sizeof *ip);
    ip->hb_ms = hb_ms ? hb_ms : 5000;
    if (!(ip->s = calloc((size_t)n, sizeof *ip->s))) return -1;
    for (int i = 0; i < n; i++) {
        if (nng_pair1_open(&ip->s[i]) != 0) return -1;
        ip->n = i + 1;
        nng_socket_set_ms(ip->s[i], NNG_OPT_RECVTIMEO, 30000);
        nng_socket_set_ms(ip->s[i], NNG_OPT_RECONNMINT, 600000); /* no redial */
        nng_socket_set_ms(ip->s[i], NNG_OPT_RECONNMAXT, 600000);
        if (nng_dial(ip->s[i], url, NULL, 0) != 0 || idle_join(ip->s[i], memory) != 0) return -1;
    }
    ip->hb_started = pthread_create(&ip->hb, NULL, idle_hb_main, ip) == 0;
    return 0;
}

static void idle_stop(idle_peers *ip) {
    atomic_store(&ip->quit, true);
    if (ip->hb_started) pthread_join(ip->hb, NULL);
    for (int i = 0; i < ip->n; i++) nng_close(ip->s[i]);
    free(ip->s);
    memset(ip, 0, sizeof *ip);
}

#endif
