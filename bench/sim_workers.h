/* bench/sim_workers.h - simulated workers for bench_scale: COUNT connections to one node
 * driven by one thread (epoll), each a worker of its own speaking the real protocol:
 *   - the SP transport as nng's tcp:// speaks it (the 8-byte SP header naming pair1, then
 *     messages framed by a 64-bit big-endian length, each starting with pair1's 32-bit
 *     hop count);
 *   - HELLO (offering batches), the identity CHALLENGE answered with a PROOF signed by a
 *     key of its own (net/worker_key.h, as goblin_worker does), HELLO_ACK;
 *   - LEASE_REQUESTs as goblin_worker sends them (slots = 2 on joining, 16 more after a
 *     tiny task when fewer than 2 are left, everything asked again after 1 s without a
 *     TASK while some are owed), TASK batches, each task computed with the library's
 *     executor from the graph and inputs it carries (goblin_exec_run: the tile is
 *     computed honestly, so Freivalds passes), RESULTs batched as the node's TASKs were,
 *     HEARTBEATs every heartbeat_ms / 2 + 1;
 *   - the panel cache the node believes a worker has: panels kept by cache id, the last
 *     PANEL_RING of each kind per connection (the node remembers at most 32), served when
 *     a TASK leaves its input out; one missing is answered with ERROR ENOTFOUND, as a
 *     worker does.
 * Messages are encoded and decoded with libgoblin's proto/ (goblin__wire_*), the same
 * code the node and goblin_worker use. What it leaves out is a worker's machinery: no
 * nng threads, timers or per-worker threads (goblin_worker has 3 and nng's pool), so
 * that 4,096 of them on the bench machine's 2 cores measure the node rather than the
 * workers' scheduling. */
#ifndef GOBLIN_BENCH_SIM_WORKERS_H
#define GOBLIN_BENCH_SIM_WORKERS_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <goblin/exec.h>
#include <goblin/graph.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net/worker_key.h"
#include "proto/wire.h"

#define SIM_SLOTS 2        /* goblin_worker's default slots */
#define SIM_LEASE_BATCH 16 /* worker_task.c's LEASE_BATCH after a tiny task */
#define SIM_RESYNC_MS 1000 /* worker_impl.h's RESYNC_MS */
#define SIM_MAX_FRAME ((uint64_t)64 << 20)
#define PANEL_RING 64      /* per kind and connection (the node remembers 32) */
#define SIM_GRAPHS 8       /* decoded graphs kept per process (by their bytes) */
#define SIM_STORE_BUCKETS 4096

static int64_t sim_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- panels, by cache id: one copy per process, referenced by connections' rings ---- */

typedef struct sim_panel {
    uint64_t id;
    goblin_tensor t; /* contiguous copy */
    int32_t refs;
    struct sim_panel *next;
} sim_panel;

static sim_panel *sim_store[SIM_STORE_BUCKETS];

static sim_panel *sim_panel_find(uint64_t id) {
    for (sim_panel *p = sim_store[id % SIM_STORE_BUCKETS]; p; p = p->next)
        if (p->id == id) return p;
    return NULL;
}

static sim_panel *sim_panel_ref(uint64_t id, const goblin_tensor *t) {
    sim_panel *p = sim_panel_find(id);
    if (p) {
        p->refs++;
        return p;
    }
    if (!t) return NULL;
    size_t bytes = (size_t)goblin_tensor_numel(t) * goblin_dtype_size(t->dtype);
    p = calloc(1, sizeof *p);
    void *d = malloc(bytes ? bytes : 1);
    if (!p || !d) {
        free(p);
        free(d);
        return NULL;
    }
    memcpy(d, t->data, bytes);
    p->id = id;
    goblin_tensor_init(&p->t, t->dtype, t->rank, t->shape, d);
    p->refs = 1;
    p->next = sim_store[id % SIM_STORE_BUCKETS];
    sim_store[id % SIM_STORE_BUCKETS] = p;
    return p;
}

static void sim_panel_unref(uint64_t id) {
    sim_panel **pp = &sim_store[id % SIM_STORE_BUCKETS];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id) {
            sim_panel *p = *pp;
            if (--p->refs > 0) return;
            *pp = p->next;
            free(p->t.data);
            free(p);
            return;
        }
}

/* ---- decoded graphs and their executors, by the graph's bytes ---------------------- */

typedef struct sim_graph {
    uint8_t *blob;
    size_t len;
    goblin_graph *g;
    goblin_exec *ex;
    int64_t used;
} sim_graph;

static sim_graph sim_graphs[SIM_GRAPHS];
static int64_t sim_graph_clock;

static sim_graph *sim_graph_of(const uint8_t *blob, size_t len) {
    for (int i = 0; i < SIM_GRAPHS; i++)
        if (sim_graphs[i].g && sim_graphs[i].len == len && memcmp(sim_graphs[i].blob, blob, len) == 0) {
            sim_graphs[i].used = ++sim_graph_clock;
            return &sim_graphs[i];
        }
    sim_graph *v = &sim_graphs[0];
    for (int i = 1; i < SIM_GRAPHS; i++)
        if (sim_graphs[i].used < v->used) v = &sim_graphs[i];
    goblin_graph *g = NULL;
    if (goblin_graph_deserialize(blob, len, NULL, &g, NULL) != GOBLIN_OK) return NULL;
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.backend = GOBLIN_BACKEND_REF;
    ep.threads = 1;
    goblin_exec *ex = NULL;
    uint8_t *b = malloc(len);
    if (!b || goblin_exec_new(&ex, g, &ep) != GOBLIN_OK) {
        free(b);
        goblin_graph_free(g);
        return NULL;
    }
    memcpy(b, blob, len);
    if (v->g) {
        goblin_exec_free(v->ex);
        goblin_graph_free(v->g);
        free(v->blob);
    }
    v->blob = b;
    v->len = len;
    v->g = g;
    v->ex = ex;
    v->used = ++sim_graph_clock;
    return v;
}

/* ---- a connection ------------------------------------------------------------------ */

enum { SC_CONNECTING, SC_SP, SC_CHALLENGE, SC_ACK, SC_JOINED, SC_DEAD };

typedef struct sim_conn {
    int fd;
    int state;
    goblin__wkey *key;
    bool key_owner; /* frees key (others may share it) */
    uint8_t hello_hash[32];
    bool batch;       /* the node's HELLO_ACK took batches */
    bool epollout;    /* waiting to write */
    uint32_t hb_ms;   /* 0: none */
    int64_t next_hb_ms, last_task_ms;
    int32_t credit;   /* leases asked for, not yet received */
    uint64_t node_max; /* the node receives no larger message */
    uint8_t *in;      /* received bytes: the SP header, then frames */
    size_t in_len, in_cap;
    uint8_t *out;     /* to send */
    size_t out_off, out_len, out_cap;
    size_t frame_at;  /* start of the frame being built, or SIZE_MAX */
    uint64_t ring[2][PANEL_RING];
    int32_t ring_next[2];
    int64_t tasks;
    int64_t dead_ms; /* closed at (redialed a second later, as a worker's dialer does) */
} sim_conn;

typedef struct sim_set {
    sim_conn *c;
    int n;
    int ep;
    struct sockaddr_in addr;
    int64_t tasks, errors;
    uint8_t *scratch; /* an aligned copy of a frame body (zero-copy decode) */
    size_t scratch_cap;
} sim_set;

static bool sim_reserve(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap * 2 : 4096;
    while (nc < need) nc *= 2;
    uint8_t *b = realloc(*buf, nc);
    if (!b) return false;
    *buf = b;
    *cap = nc;
    return true;
}

/* A frame: 8-byte big-endian length, pair1's hop count (1: one hop, from this
 * socket), then the body: one message or a batch. */
static bool sim_frame_begin(sim_conn *c) {
    if (!sim_reserve(&c->out, &c->out_cap, c->out_len + 12)) return false;
    c->frame_at = c->out_len;
    memset(c->out + c->out_len, 0, 12);
    c->out[c->out_len + 11] = 1;
    c->out_len += 12;
    return true;
}

static bool sim_frame_add(sim_conn *c, const goblin__wire_msg *m, uint8_t *hash) {
    size_t body0 = c->frame_at + 12, len = 0, wrote = 0;
    size_t at = c->out_len;
    if (at > body0) at += (GOBLIN_WIRE_BATCH_ALIGN - (at - body0) % GOBLIN_WIRE_BATCH_ALIGN) % GOBLIN_WIRE_BATCH_ALIGN;
    if (goblin__wire_encoded_size(m, &len) != GOBLIN_OK || !sim_reserve(&c->out, &c->out_cap, at + len)) return false;
    memset(c->out + c->out_len, 0, at - c->out_len);
    if (goblin__wire_encode_into(m, c->out + at, len, &wrote) != GOBLIN_OK) return false;
    if (hash) goblin__wkey_hash(c->out + at, wrote, hash);
    c->out_len = at + wrote;
    return true;
}

static void sim_frame_end(sim_conn *c) {
    uint64_t n = c->out_len - c->frame_at - 8;
    for (int i = 0; i < 8; i++) c->out[c->frame_at + i] = (uint8_t)(n >> (56 - 8 * i));
    c->frame_at = SIZE_MAX;
}

static bool sim_send_one(sim_conn *c, const goblin__wire_msg *m, uint8_t *hash) {
    if (!sim_frame_begin(c) || !sim_frame_add(c, m, hash)) return false;
    sim_frame_end(c);
    return true;
}

static void sim_close(sim_set *s, sim_conn *c) {
    if (c->fd >= 0) {
        epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->state = SC_DEAD;
    c->dead_ms = sim_now_ms();
    c->credit = 0;
    c->hb_ms = 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < PANEL_RING; i++)
            if (c->ring[k][i]) {
                sim_panel_unref(c->ring[k][i]);
                c->ring[k][i] = 0;
            }
}

/* Write what is queued; EPOLLOUT while some is left. */
static void sim_flush(sim_set *s, sim_conn *c) {
    while (c->fd >= 0 && c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w > 0) {
            c->out_off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        sim_close(s, c);
        return;
    }
    if (c->fd < 0) return;
    if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
    bool want = c->out_len > 0;
    if (want != c->epollout) {
        struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c};
        epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->epollout = want;
    }
}

static int sim_dial(sim_set *s, sim_conn *c) {
    c->frame_at = SIZE_MAX;
    c->in_len = c->out_len = c->out_off = 0;
    c->state = SC_DEAD;
    c->dead_ms = sim_now_ms();
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    if ((connect(c->fd, (struct sockaddr *)&s->addr, sizeof s->addr) != 0 && errno != EINPROGRESS) ||
        epoll_ctl(s->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    c->epollout = true;
    c->state = SC_CONNECTING;
    return 0;
}

/* Connected: the SP header (pair1), then HELLO (it need not wait for the node's header:
 * nng queues nothing before it, but the bytes wait in the socket). */
static void sim_connected(sim_set *s, sim_conn *c) {
    static const uint8_t sp[8] = {0, 'S', 'P', 0, 0, 0x11, 0, 0};
    if (!sim_reserve(&c->out, &c->out_cap, c->out_len + 8)) return;
    memcpy(c->out + c->out_len, sp, 8);
    c->out_len += 8;
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HELLO);
    m.body.hello.backends = (1u << GOBLIN_BACKEND_REF) | GOBLIN_WIRE_CAP_BATCH;
    m.body.hello.threads = 1;
    m.body.hello.memory_bytes = 64u << 20;
    sim_send_one(c, &m, c->hello_hash);
    c->state = SC_SP;
    sim_flush(s, c);
}

static void sim_ask(sim_conn *c, uint32_t slots) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_LEASE_REQUEST);
    m.body.lease_request.slots = slots;
    sim_frame_add(c, &m, NULL);
}

static void sim_error(sim_conn *c, uint64_t task, goblin_err e, const char *text) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_ERROR);
    m.body.error.code = e;
    m.body.error.task_id = task;
    m.body.error.message = text;
    sim_frame_add(c, &m, NULL);
}

static void sim_keep_panel(sim_conn *c, int kind, uint64_t id, const goblin_tensor *t) {
    for (int i = 0; i < PANEL_RING; i++)
        if (c->ring[kind][i] == id) return;
    sim_panel *p = sim_panel_ref(id, t);
    if (!p) return;
    int32_t at = c->ring_next[kind];
    if (c->ring[kind][at]) sim_panel_unref(c->ring[kind][at]);
    c->ring[kind][at] = id;
    c->ring_next[kind] = (at + 1) % PANEL_RING;
}

static bool sim_has_panel(const sim_conn *c, int kind, uint64_t id) {
    for (int i = 0; i < PANEL_RING; i++)
        if (c->ring[kind][i] == id) return true;
    return false;
}

/* One TASK: its graph, its inputs (sent or kept), computed; the RESULT or an ERROR
 * added to the frame being built. */
static void sim_task_inner(sim_set *s, sim_conn *c, const goblin__wire_task *t) {
    sim_graph *sg = sim_graph_of(t->graph, (size_t)t->graph_len);
    if (!sg) {
        sim_error(c, t->task_id, GOBLIN_EFORMAT, "bad graph");
        s->errors++;
        return;
    }
    int32_t ni = goblin_graph_input_count(sg->g), no = goblin_graph_output_count(sg->g);
    bool dir = t->n_inputs == ni + 1;
    if ((t->n_inputs != ni && !dir) || ni > 8 || no > 8) {
        sim_error(c, t->task_id, GOBLIN_EINVAL, "the task's input count does not match its graph");
        s->errors++;
        return;
    }
    const int64_t *dv = NULL;
    if (dir) {
        const goblin_tensor *d = &t->inputs[ni];
        if (d->dtype != GOBLIN_DTYPE_I64 || d->rank != 1 || d->shape[0] != 2 * (int64_t)ni) {
            sim_error(c, t->task_id, GOBLIN_EINVAL, "bad cache directory");
            s->errors++;
            return;
        }
        dv = d->data;
    }
    goblin_tensor in[8], out[8];
    for (int32_t k = 0; k < ni; k++) {
        in[k] = t->inputs[k];
        if (dv && dv[ni + k]) {
            sim_panel *p = k < 2 && sim_has_panel(c, k, (uint64_t)dv[k]) ? sim_panel_find((uint64_t)dv[k]) : NULL;
            if (!p) {
                sim_error(c, t->task_id, GOBLIN_ENOTFOUND, "cached input not in cache");
                s->errors++;
                return;
            }
            in[k] = p->t;
        }
    }
    for (int32_t i = 0; i < no; i++) {
        if (goblin_graph_node(sg->g, goblin_graph_output_id(sg->g, i), NULL, &out[i], NULL, NULL) != GOBLIN_OK) {
            sim_error(c, t->task_id, GOBLIN_EINVAL, "bad output");
            return;
        }
        out[i].data = NULL; /* the executor allocates */
    }
    goblin_err e = goblin_exec_run(sg->ex, in, ni, out, no);
    if (dv)
        for (int32_t k = 0; k < ni && k < 2; k++)
            if (!dv[ni + k] && dv[k]) sim_keep_panel(c, k, (uint64_t)dv[k], &t->inputs[k]);
    if (e) {
        sim_error(c, t->task_id, e, "task evaluation failed");
        s->errors++;
        return;
    }
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_RESULT);
    m.request_id = t->task_id;
    m.body.result.task_id = t->task_id;
    m.body.result.n_outputs = no;
    m.body.result.outputs = out;
    sim_frame_add(c, &m, NULL);
    for (int32_t i = 0; i < no; i++) goblin_buffer_free(out[i].data);
    c->tasks++;
    s->tasks++;
}

static void sim_task(sim_set *s, sim_conn *c, const goblin__wire_task *t) {
    if (c->credit > 0) c->credit--;
    c->last_task_ms = sim_now_ms();
    sim_task_inner(s, c, t);
    /* Every answer is followed by lease_topup: after a tiny task, LEASE_BATCH more when
     * fewer than slots are left. */
    if (c->credit < SIM_SLOTS) {
        sim_ask(c, SIM_LEASE_BATCH);
        c->credit += SIM_LEASE_BATCH;
    }
}

/* One frame's body (a message or a batch), 8-byte aligned. */
static void sim_body(sim_set *s, sim_conn *c, const uint8_t *body, size_t blen) {
    size_t off = 0, ml = 0;
    bool framed = false;
    do {
        size_t at = off;
        if (goblin__wire_batch_next(body, blen, &off, NULL, &ml, NULL, 0) != GOBLIN_OK) break;
        goblin__wire_msg *m = NULL;
        if (goblin__wire_decode(body + at, ml, NULL, GOBLIN_WIRE_DECODE_ZERO_COPY, &m, NULL, 0) != GOBLIN_OK) break;
        switch (m->type) {
        case GOBLIN_WIRE_TYPE_CHALLENGE: {
            uint8_t digest[32], sig[GOBLIN__WKEY_SIG_MAX];
            size_t sl = 0;
            if (goblin__wkey_proof_digest(m->body.challenge.nonce, c->hello_hash, goblin__wkey_public(c->key),
                                          digest) == GOBLIN_OK &&
                goblin__wkey_sign(c->key, digest, sig, &sl, NULL, 0) == GOBLIN_OK) {
                goblin__wire_msg p;
                goblin__wire_msg_init(&p, GOBLIN_WIRE_TYPE_PROOF);
                p.body.proof.key = goblin__wkey_public(c->key);
                p.body.proof.key_len = GOBLIN__WKEY_PUBLIC_BYTES;
                p.body.proof.sig = sig;
                p.body.proof.sig_len = (uint32_t)sl;
                sim_send_one(c, &p, NULL);
                c->state = SC_ACK;
            }
            break;
        }
        case GOBLIN_WIRE_TYPE_HELLO_ACK: {
            c->state = SC_JOINED;
            c->batch = (m->flags & GOBLIN_WIRE_FLAG_BATCH) != 0;
            c->node_max = m->body.hello_ack.max_message_bytes;
            c->hb_ms = m->body.hello_ack.heartbeat_ms ? m->body.hello_ack.heartbeat_ms / 2 + 1 : 0;
            int64_t now = sim_now_ms();
            c->next_hb_ms = now + c->hb_ms;
            c->last_task_ms = now;
            goblin__wire_msg r;
            goblin__wire_msg_init(&r, GOBLIN_WIRE_TYPE_LEASE_REQUEST);
            r.body.lease_request.slots = SIM_SLOTS;
            sim_send_one(c, &r, NULL);
            c->credit = SIM_SLOTS;
            break;
        }
        case GOBLIN_WIRE_TYPE_REFUSE:
            s->errors++;
            goblin__wire_msg_free(m);
            sim_close(s, c);
            return;
        case GOBLIN_WIRE_TYPE_TASK:
            /* The answers to one message go in one frame when the node takes batches
             * (else one frame each). */
            if (!framed || !c->batch) {
                if (framed) sim_frame_end(c);
                sim_frame_begin(c);
                framed = true;
            }
            sim_task(s, c, &m->body.task);
            break;
        default: /* HEARTBEAT, ABANDON, ERROR */
            break;
        }
        goblin__wire_msg_free(m);
    } while (off < blen);
    if (framed) sim_frame_end(c);
}

/* Readable: the node's SP header, then whole frames. */
static void sim_read(sim_set *s, sim_conn *c) {
    for (;;) {
        if (!sim_reserve(&c->in, &c->in_cap, c->in_len + 65536)) {
            sim_close(s, c);
            return;
        }
        ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (r > 0) {
            c->in_len += (size_t)r;
            if (c->in_len < c->in_cap) break; /* drained (or nearly) */
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        sim_close(s, c); /* closed by the node, or failed */
        return;
    }
    size_t pos = 0;
    if (c->state == SC_SP) {
        if (c->in_len < 8) return;
        if (c->in[0] != 0 || c->in[1] != 'S' || c->in[2] != 'P' || c->in[3] != 0 || c->in[5] != 0x11) {
            sim_close(s, c);
            return;
        }
        pos = 8;
        c->state = SC_CHALLENGE;
    }
    while (c->in_len - pos >= 8) {
        uint64_t n = 0;
        for (int i = 0; i < 8; i++) n = n << 8 | c->in[pos + i];
        if (n < 4 || n > SIM_MAX_FRAME) {
            sim_close(s, c);
            return;
        }
        if (c->in_len - pos - 8 < n) break;
        size_t blen = (size_t)n - 4;
        if (!sim_reserve(&s->scratch, &s->scratch_cap, blen + 8)) break;
        uint8_t *body = s->scratch + ((8 - (uintptr_t)s->scratch % 8) % 8);
        memcpy(body, c->in + pos + 12, blen);
        pos += 8 + (size_t)n;
        sim_body(s, c, body, blen);
        if (c->fd < 0) return;
    }
    if (pos) {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
    }
    sim_flush(s, c);
}

/* Heartbeats due, and the lease resync of an idle connection that is owed leases. */
static void sim_timers(sim_set *s, int64_t now) {
    for (int i = 0; i < s->n; i++) {
        sim_conn *c = &s->c[i];
        if (c->state == SC_DEAD && now - c->dead_ms >= 1000) {
            sim_dial(s, c); /* failed: again a second later */
            continue;
        }
        if (c->state != SC_JOINED) continue;
        bool sent = false;
        if (c->hb_ms && now >= c->next_hb_ms) {
            goblin__wire_msg m;
            goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HEARTBEAT);
            m.body.heartbeat.active_tasks = 0;
            sim_send_one(c, &m, NULL);
            c->next_hb_ms = now + c->hb_ms;
            sent = true;
        }
        if (c->credit > 0 && now - c->last_task_ms >= SIM_RESYNC_MS) {
            goblin__wire_msg r;
            goblin__wire_msg_init(&r, GOBLIN_WIRE_TYPE_LEASE_REQUEST);
            r.body.lease_request.slots = SIM_SLOTS;
            sim_send_one(c, &r, NULL);
            c->credit = SIM_SLOTS;
            c->last_task_ms = now;
            sent = true;
        }
        if (sent) sim_flush(s, c);
    }
}

/* @p count connections to @p host:@p port, driven until @p stop_fd is readable (EOF). */
static int sim_run(const char *url, int count, int stop_fd) {
    const char *h = strstr(url, "://");
    const char *colon = h ? strrchr(h + 3, ':') : NULL;
    if (!h || !colon) return 1;
    char host[64];
    size_t hl = (size_t)(colon - (h + 3));
    if (hl >= sizeof host) return 1;
    memcpy(host, h + 3, hl);
    host[hl] = 0;
    sim_set s;
    memset(&s, 0, sizeof s);
    s.addr.sin_family = AF_INET;
    s.addr.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &s.addr.sin_addr) != 1) return 1;
    s.ep = epoll_create1(EPOLL_CLOEXEC);
    s.c = calloc((size_t)count, sizeof *s.c);
    if (s.ep < 0 || !s.c) return 1;
    s.n = count;
    /* GOBLIN_BENCH_SCALE_SHARE=k: k connections to a key (workers of one installation
     * share one), so that more connections than a node's 4,096 identity records can
     * join; default 1, a key each. */
    const char *sh = getenv("GOBLIN_BENCH_SCALE_SHARE");
    int share = sh && atoi(sh) > 1 ? atoi(sh) : 1;
    for (int i = 0; i < count; i++) {
        s.c[i].fd = -1;
        s.c[i].key_owner = i % share == 0;
        if (s.c[i].key_owner ? goblin__wkey_ephemeral(&s.c[i].key, NULL, 0) != GOBLIN_OK
                             : !(s.c[i].key = s.c[i - i % share].key))
            return 1;
        sim_dial(&s, &s.c[i]); /* failed: redialed by sim_timers */
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(s.ep, EPOLL_CTL_ADD, stop_fd, &ev);
    struct epoll_event evs[256];
    int64_t next_timer = 0;
    for (;;) {
        int ne = epoll_wait(s.ep, evs, 256, 50);
        if (ne < 0 && errno != EINTR) break;
        bool stop = false;
        for (int k = 0; k < ne; k++) {
            sim_conn *c = evs[k].data.ptr;
            if (!c) {
                stop = true;
                continue;
            }
            if (c->fd < 0) continue;
            if (c->state == SC_CONNECTING) {
                int err = 0;
                socklen_t el = sizeof err;
                if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err) {
                    sim_close(&s, c);
                    continue;
                }
                sim_connected(&s, c);
                continue;
            }
            if (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) sim_read(&s, c);
            if (c->fd >= 0 && (evs[k].events & EPOLLOUT)) sim_flush(&s, c);
        }
        if (stop) break;
        int64_t now = sim_now_ms();
        if (now >= next_timer) {
            sim_timers(&s, now);
            next_timer = now + 20;
        }
    }
    for (int i = 0; i < count; i++) {
        sim_close(&s, &s.c[i]);
        if (s.c[i].key_owner) goblin__wkey_free(s.c[i].key);
        free(s.c[i].in);
        free(s.c[i].out);
    }
    free(s.c);
    free(s.scratch);
    close(s.ep);
    return 0;
}

#endif
