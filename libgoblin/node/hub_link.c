/* libgoblin/node/hub_link.c - a lab node borrowing workers through goblin-hub
 * (goblin_node_hub_connect; docs/hub.md, "Machines").
 *
 * One control connection (its own pair1 socket, dialed here) says NODE_HELLO with the
 * node key and then gets an OPEN with a ticket for each worker the hub lends. For each
 * OPEN this thread dials a data connection from the node's own socket, so that it is a
 * pipe like any worker's: the first message on it, sent from here, is ATTACH with the
 * ticket, and everything after it is that worker's own protocol (HELLO, CHALLENGE,
 * PROOF, ...) handled by peer.c exactly as for a worker that dialed the node. A data
 * dialer is closed once its pipe ends (the worker redials the hub, not the node). */
#include "node_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <nng/protocol/pair1/pair.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "net/tls_impl.h"
#include "net/transport.h"
#include "proto/hub_wire.h"

#define HUB_HEARTBEAT_MS 5000
#define DATA_CONNECT_MS 15000 /* a data dialer that has no pipe by then is closed */
#define MAX_DIALS 1024        /* data connections at once */
#define WORK_REPORT_MS 1000   /* relayed workers' counts told to the hub (WORK) this often */
#define WORK_PER_TURN 64      /* WORK messages a report sends at most; the rest wait */

typedef struct hub_dial {
    nng_dialer d;
    uint8_t ticket[GOBLIN__HUBW_TICKET];
    uint32_t pipe; /* 0 until connected */
    uint64_t origin; /* the worker's network origin, as the hub saw it (origin.c) */
    int64_t since_ms;
    bool attached, gone;
} hub_dial;

struct goblin__node_hub {
    goblin_node *n;
    char url[512];
    char key[GOBLIN__HUBW_KEY_MAX + 1];
    int32_t max_workers;
    char direct_url[GOBLIN__HUBW_URL_MAX + 1]; /* "" : relay only */
    uint8_t direct_fp[GOBLIN__HUBW_FINGERPRINT];
    nng_socket ctl;
    int rfd; /* the control socket's NNG_OPT_RECVFD, made before any pipe exists; -1 */
    bool ctl_open;
    nng_tls_config *tls;
    pthread_t thread;
    bool have_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    /* control state (under mu) */
    int ctl_pipes_added;      /* ADD_POST events on the control socket */
    bool acked, refused;      /* NODE_ACK seen on the current control pipe; a key refusal */
    goblin_err refuse_reason;
    char refuse_text[GOBLIN__HUBW_TEXT_MAX + 1];
    goblin_node_hub_stats st;
    /* data connections */
    hub_dial *dials;
    int32_t n_dials;
    nng_pipe added[64];
    int32_t n_added;
    uint32_t removed[64];
    int32_t n_removed;
};

void goblin_node_hub_params_default(goblin_node_hub_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->timeout_ms = 10000;
}

goblin_err goblin_node_hub_key_read(const char *path, char *out) {
    if (!path || !out) return GOBLIN_EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return errno == ENOENT ? GOBLIN_ENOTFOUND : GOBLIN_EIO;
    char buf[256];
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (k < 0) return GOBLIN_EIO;
    buf[k] = 0;
    size_t len = (size_t)k;
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ')) buf[--len] = 0;
    goblin_err e = GOBLIN_OK;
    if (len != GOBLIN_NODE_HUB_KEY_SIZE - 1 || strncmp(buf, "gbk1_", 5) || buf[21] != '_') e = GOBLIN_EFORMAT;
    for (size_t i = 5; !e && i < len; i++)
        if (i != 21 && !((buf[i] >= '0' && buf[i] <= '9') || (buf[i] >= 'a' && buf[i] <= 'f'))) e = GOBLIN_EFORMAT;
    if (!e) memcpy(out, buf, len + 1);
    memset(buf, 0, sizeof buf);
    return e;
}

/* ---- pipes of the node's socket (node.c's pipe_cb) and of the control socket ------- */

void goblin__node_hub_pipe(goblin_node *n, nng_pipe pp, bool added) {
    /* Lock order: n->ev_mu, then h->mu; nothing of nng is called under h->mu that
     * could wait for a pipe callback (dialers are closed outside it). */
    pthread_mutex_lock(&n->ev_mu);
    struct goblin__node_hub *h = n->hub;
    if (h) {
        pthread_mutex_lock(&h->mu);
        if (added) {
            /* Only pipes of our dialers matter; the thread checks which. */
            if (nng_dialer_id(nng_pipe_dialer(pp)) > 0 && h->n_added < 64) h->added[h->n_added++] = pp;
        } else if (h->n_removed < 64) {
            h->removed[h->n_removed++] = nng_pipe_id(pp);
        }
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
    }
    pthread_mutex_unlock(&n->ev_mu);
}

bool goblin__node_hub_pipe_origin(goblin_node *n, uint32_t pipe_id, uint64_t *out) {
    bool hit = false;
    pthread_mutex_lock(&n->ev_mu);
    struct goblin__node_hub *h = n->hub;
    if (h && pipe_id) {
        pthread_mutex_lock(&h->mu);
        for (int32_t i = 0; i < h->n_dials && !hit; i++)
            if (h->dials[i].attached && h->dials[i].pipe == pipe_id) {
                *out = h->dials[i].origin;
                hit = true;
            }
        pthread_mutex_unlock(&h->mu);
    }
    pthread_mutex_unlock(&n->ev_mu);
    return hit;
}

static void ctl_pipe_cb(nng_pipe pp, nng_pipe_ev ev, void *arg) {
    (void)pp;
    struct goblin__node_hub *h = arg;
    pthread_mutex_lock(&h->mu);
    if (ev == NNG_PIPE_EV_ADD_POST) h->ctl_pipes_added++;
    else {
        h->acked = false;
        h->st.connected = false;
    }
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* ---- sending -------------------------------------------------------------------------- */

static int send_hub(nng_socket s, nng_pipe *pp, const goblin__hubw_msg *m) {
    uint8_t b[GOBLIN__HUBW_MAX];
    size_t len = 0;
    if (goblin__hubw_encode(m, b, &len)) return NNG_EINVAL;
    nng_msg *msg;
    int rv = nng_msg_alloc(&msg, 0);
    if (rv) return rv;
    if ((rv = nng_msg_append(msg, b, len)) != 0) {
        nng_msg_free(msg);
        return rv;
    }
    memset(b, 0, sizeof b);
    if (pp) nng_msg_set_pipe(msg, *pp);
    if ((rv = nng_sendmsg(s, msg, NNG_FLAG_NONBLOCK)) != 0) nng_msg_free(msg);
    return rv;
}

static void send_hello(struct goblin__node_hub *h) {
    goblin__hubw_msg m;
    memset(&m, 0, sizeof m);
    m.type = GOBLIN__HUBW_NODE_HELLO;
    m.max_workers = h->max_workers > 0 ? (uint32_t)h->max_workers : 0;
    snprintf(m.key, sizeof m.key, "%s", h->key);
    send_hub(h->ctl, NULL, &m);
    memset(m.key, 0, sizeof m.key);
}

/* After NODE_ACK: where lent workers can reach this node (if it says). */
static void send_direct(struct goblin__node_hub *h) {
    if (!h->direct_url[0]) return;
    goblin__hubw_msg m;
    memset(&m, 0, sizeof m);
    m.type = GOBLIN__HUBW_NODE_DIRECT;
    memcpy(m.fingerprint, h->direct_fp, sizeof m.fingerprint);
    snprintf(m.url, sizeof m.url, "%s", h->direct_url);
    if (send_hub(h->ctl, NULL, &m))
        goblin__node_log(h->n, GOBLIN_LOG_WARN, "hub: could not offer direct introductions at %s", h->direct_url);
}

/* Introduced workers gone (or their tickets expired): LEFT for each, as queued. */
static void report_left(struct goblin__node_hub *h) {
    goblin_node *n = h->n;
    goblin__intro_left gone[16];
    pthread_mutex_lock(&n->mu);
    int32_t k = goblin__node_intro_left_take(n, gone, 16);
    pthread_mutex_unlock(&n->mu);
    int32_t sent = 0;
    for (int32_t i = 0; i < k; i++) {
        goblin__hubw_msg q;
        memset(&q, 0, sizeof q);
        q.type = GOBLIN__HUBW_LEFT;
        memcpy(q.ticket, gone[i].ticket, sizeof q.ticket);
        if (goblin__hubw_identity_parse(gone[i].fp, q.identity) && send_hub(h->ctl, NULL, &q) == 0) sent++;
    }
    memset(gone, 0, sizeof gone);
    pthread_mutex_lock(&h->mu);
    h->st.lefts += sent;
    pthread_mutex_unlock(&h->mu);
}

/* ---- data connections ------------------------------------------------------------------ */

static void open_data(struct goblin__node_hub *h, const goblin__hubw_msg *m) {
    const uint8_t *ticket = m->ticket;
    goblin_node *n = h->n;
    if (h->n_dials >= MAX_DIALS) {
        goblin__node_log(n, GOBLIN_LOG_WARN, "hub: %d data connections already; an OPEN ignored", MAX_DIALS);
        return;
    }
    hub_dial *dl = &h->dials[h->n_dials];
    memset(dl, 0, sizeof *dl);
    int rv = nng_dialer_create(&dl->d, n->sock, h->url);
    if (!rv && h->tls) rv = nng_dialer_set_ptr(dl->d, NNG_OPT_TLS_CONFIG, h->tls);
    if (!rv) {
        /* One connection per ticket: no redial before this thread closes the dialer. */
        nng_dialer_set_ms(dl->d, NNG_OPT_RECONNMINT, 3600000);
        nng_dialer_set_ms(dl->d, NNG_OPT_RECONNMAXT, 3600000);
        rv = nng_dialer_start(dl->d, NNG_FLAG_NONBLOCK);
    }
    if (rv) {
        goblin__node_log(n, GOBLIN_LOG_WARN, "hub: cannot dial a data connection to %s: %s", h->url, nng_strerror(rv));
        if (nng_dialer_id(dl->d) > 0) nng_dialer_close(dl->d);
        return;
    }
    memcpy(dl->ticket, ticket, GOBLIN__HUBW_TICKET);
    dl->origin = goblin__node_origin_of_prefix(m->origin_kind, m->origin);
    dl->since_ms = goblin__now_ms();
    h->n_dials++;
    h->st.data_connections++;
}

/* Take dial @p i off the table; its dialer goes into @p out to be closed after h->mu. */
static void take_dial(struct goblin__node_hub *h, int32_t i, nng_dialer *out, int32_t *n_out) {
    out[(*n_out)++] = h->dials[i].d;
    memset(h->dials[i].ticket, 0, GOBLIN__HUBW_TICKET);
    h->dials[i] = h->dials[--h->n_dials];
}

/* Pipe events of data dialers (under h->mu): ATTACH on a new pipe, close a dialer
 * whose pipe ended. */
static void data_events(struct goblin__node_hub *h, nng_dialer *closing, int32_t *n_closing) {
    for (int32_t k = 0; k < h->n_added; k++) {
        nng_pipe pp = h->added[k];
        int did = nng_dialer_id(nng_pipe_dialer(pp));
        for (int32_t i = 0; i < h->n_dials; i++) {
            hub_dial *dl = &h->dials[i];
            if (nng_dialer_id(dl->d) != did || dl->attached) continue;
            goblin__hubw_msg m;
            memset(&m, 0, sizeof m);
            m.type = GOBLIN__HUBW_ATTACH;
            memcpy(m.ticket, dl->ticket, sizeof m.ticket);
            dl->pipe = nng_pipe_id(pp);
            dl->attached = true;
            memset(dl->ticket, 0, sizeof dl->ticket);
            if (send_hub(h->n->sock, &pp, &m) != 0) dl->gone = true;
            memset(m.ticket, 0, sizeof m.ticket);
            break;
        }
    }
    h->n_added = 0;
    for (int32_t k = 0; k < h->n_removed; k++)
        for (int32_t i = 0; i < h->n_dials; i++)
            if (h->dials[i].pipe == h->removed[k]) h->dials[i].gone = true;
    h->n_removed = 0;
    int64_t now = goblin__now_ms();
    for (int32_t i = h->n_dials - 1; i >= 0; i--)
        if (h->dials[i].gone || (!h->dials[i].attached && now - h->dials[i].since_ms > DATA_CONNECT_MS))
            if (*n_closing < 64) take_dial(h, i, closing, n_closing);
    h->st.workers_lent = 0;
    for (int32_t i = 0; i < h->n_dials; i++) h->st.workers_lent += h->dials[i].attached;
}

/* ---- the thread ------------------------------------------------------------------------- */

/* Report the node's quarantined identities from index *@p sent on (at most 16 a turn):
 * the hub stops lending them to every lab (docs/hub.md, "Reputation"). Every identity
 * in the quarantine list is reported, those of workers that dialed the node directly
 * too: a worker caught cheating here should not be lent elsewhere either. After a
 * reconnection *@p sent starts at 0 again and all are resent (the hub keeps one row a
 * fingerprint). The list is the node's, under n->mu (nothing else is held here). */
static void report_quarantines(struct goblin__node_hub *h, int32_t *sent) {
    goblin_node *n = h->n;
    char fps[16][GOBLIN__WKEY_FP_HEX];
    int32_t k = 0;
    pthread_mutex_lock(&n->mu);
    while (k < 16 && *sent + k < n->qlist.n) {
        memcpy(fps[k], n->qlist.fp[*sent + k], GOBLIN__WKEY_FP_HEX);
        k++;
    }
    pthread_mutex_unlock(&n->mu);
    for (int32_t i = 0; i < k; i++) {
        goblin__hubw_msg q;
        memset(&q, 0, sizeof q);
        q.type = GOBLIN__HUBW_QUARANTINE;
        bool ok = goblin__hubw_identity_parse(fps[i], q.identity);
        snprintf(q.reason_text, sizeof q.reason_text, "quarantined by a lab node: a wrong result or a failed recheck");
        if (ok && send_hub(h->ctl, NULL, &q)) return; /* resent after the next NODE_ACK */
        (*sent)++;
    }
}

static uint32_t clip32(int64_t v) { return v <= 0 ? 0 : v > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)v; }

/* Tell the hub what the workers it lent did since the last report (WORK: tasks given,
 * results accepted, rejected), for the volunteers' work view (docs/hub.md, "Work"):
 * the counts kept from reaped slots first, then the connected relayed workers'. A
 * count is marked told when taken; a WORK the link cannot send is lost (counted). */
static void report_work(struct goblin__node_hub *h) {
    goblin_node *n = h->n;
    goblin__hubw_msg q[WORK_PER_TURN];
    int32_t k = 0;
    pthread_mutex_lock(&n->mu);
    while (n->n_work_tail > 0 && k < WORK_PER_TURN) {
        int32_t t = --n->n_work_tail;
        memset(&q[k], 0, sizeof q[k]);
        if (!goblin__hubw_identity_parse(n->work_tail[t].fp, q[k].identity)) continue;
        q[k].tasks = clip32(n->work_tail[t].issued);
        q[k].accepted = clip32(n->work_tail[t].accepted);
        q[k].rejected = clip32(n->work_tail[t].rejected);
        k++;
    }
    for (int32_t i = 0; i < n->n_peers && k < WORK_PER_TURN; i++) {
        peer *p = &n->peers[i];
        if (!p->used || !p->relayed || p->ident < 0 || p->ident >= n->n_idents || !n->idents[p->ident].used)
            continue;
        if (p->issued == p->rep_issued && p->accepted == p->rep_accepted && p->rejected == p->rep_rejected)
            continue;
        memset(&q[k], 0, sizeof q[k]);
        if (!goblin__hubw_identity_parse(n->idents[p->ident].fp, q[k].identity)) continue;
        q[k].tasks = clip32(p->issued - p->rep_issued);
        q[k].accepted = clip32(p->accepted - p->rep_accepted);
        q[k].rejected = clip32(p->rejected - p->rep_rejected);
        p->rep_issued = p->issued;
        p->rep_accepted = p->accepted;
        p->rep_rejected = p->rejected;
        k++;
    }
    pthread_mutex_unlock(&n->mu);
    int32_t sent = 0;
    while (sent < k) {
        q[sent].type = GOBLIN__HUBW_WORK;
        if (send_hub(h->ctl, NULL, &q[sent]) != 0) break; /* the link's queue is full, or it is down */
        sent++;
    }
    /* What did not go waits in the tail for the next turn (past its room: lost). */
    int32_t lost = 0;
    if (sent < k) {
        pthread_mutex_lock(&n->mu);
        for (int32_t i = sent; i < k; i++) {
            if (n->n_work_tail == (int32_t)(sizeof n->work_tail / sizeof n->work_tail[0])) {
                lost++;
                continue;
            }
            int32_t t = n->n_work_tail++;
            goblin__hubw_identity_hex(q[i].identity, n->work_tail[t].fp);
            n->work_tail[t].issued = q[i].tasks;
            n->work_tail[t].accepted = q[i].accepted;
            n->work_tail[t].rejected = q[i].rejected;
        }
        pthread_mutex_unlock(&n->mu);
    }
    pthread_mutex_lock(&h->mu);
    h->st.work_reports += sent;
    h->st.work_reports_lost += lost;
    pthread_mutex_unlock(&h->mu);
}

static void *hub_main(void *arg) {
    struct goblin__node_hub *h = arg;
    goblin_node *n = h->n;
    int rfd = h->rfd, seen_pipes = 0;
    int32_t q_sent = 0;
    bool was_acked = false;
    int64_t last_beat = 0, last_work = 0;
    for (;;) {
        pthread_mutex_lock(&h->mu);
        if (h->stop) {
            pthread_mutex_unlock(&h->mu);
            break;
        }
        bool hello = h->ctl_pipes_added != seen_pipes && !h->refused;
        seen_pipes = h->ctl_pipes_added;
        nng_dialer closing[64];
        int32_t n_closing = 0;
        data_events(h, closing, &n_closing);
        bool acked = h->acked;
        pthread_mutex_unlock(&h->mu);
        for (int32_t i = 0; i < n_closing; i++) nng_dialer_close(closing[i]);
        if (hello) send_hello(h);
        int64_t now = goblin__now_ms();
        if (acked && now - last_beat >= HUB_HEARTBEAT_MS) {
            goblin__hubw_msg b;
            memset(&b, 0, sizeof b);
            b.type = GOBLIN__HUBW_HEARTBEAT;
            send_hub(h->ctl, NULL, &b);
            last_beat = now;
        }
        if (acked && !was_acked) q_sent = 0;
        if (!acked && was_acked) {
            /* The hub's records of the workers it introduced are gone with the link:
             * they go back to it (and are lent again once it is up). */
            pthread_mutex_lock(&n->mu);
            goblin__node_intro_drop_all(n);
            pthread_mutex_unlock(&n->mu);
        }
        was_acked = acked;
        if (acked) report_left(h);
        if (acked) report_quarantines(h, &q_sent);
        if (acked && now - last_work >= WORK_REPORT_MS) {
            report_work(h);
            last_work = now;
        }
        nng_msg *msg = NULL;
        int rv = goblin__transport_recv(h->ctl, &rfd, &msg, 20);
        if (rv == NNG_ECLOSED) break;
        if (rv) continue;
        goblin__hubw_msg m;
        char why[256];
        goblin_err e = goblin__hubw_decode(nng_msg_body(msg), nng_msg_len(msg), &m, why, sizeof why);
        nng_msg_free(msg);
        /* An OWNER goes to the node's records under n->mu, never under h->mu: the node's
         * thread takes n->mu, then ev_mu, then h->mu (goblin__node_hub_pipe_origin). */
        bool owner_kept = false;
        if (!e && m.type == GOBLIN__HUBW_OWNER) {
            char fp[GOBLIN__WKEY_FP_HEX];
            goblin__hubw_identity_hex(m.identity, fp);
            pthread_mutex_lock(&n->mu);
            goblin_err oe = goblin__node_identity_owner_from_hub(n, fp, m.owner);
            pthread_mutex_unlock(&n->mu);
            if (oe) goblin__node_log(n, GOBLIN_LOG_WARN, "hub: owner of %.16s not kept: %s", fp, goblin_err_name(oe));
            owner_kept = !oe;
        }
        /* INTRODUCE and END change the node's tables: under n->mu, as OWNER. */
        bool intro_kept = false;
        if (!e && (m.type == GOBLIN__HUBW_INTRODUCE || m.type == GOBLIN__HUBW_END)) {
            char fp[GOBLIN__WKEY_FP_HEX];
            goblin__hubw_identity_hex(m.identity, fp);
            pthread_mutex_lock(&h->mu);
            bool ok = h->acked && h->direct_url[0];
            pthread_mutex_unlock(&h->mu);
            pthread_mutex_lock(&n->mu);
            if (ok && m.type == GOBLIN__HUBW_INTRODUCE) {
                goblin_err ie = goblin__node_intro_add(n, m.ticket, fp);
                if (ie) goblin__node_log(n, GOBLIN_LOG_WARN, "hub: introduction of %.16s not kept: %s", fp, goblin_err_name(ie));
                intro_kept = !ie;
            } else if (ok) {
                goblin__node_intro_end(n, fp);
            }
            pthread_mutex_unlock(&n->mu);
            if (m.type == GOBLIN__HUBW_INTRODUCE) {
                /* The hub sends the worker on once the ticket is kept (READY); a ticket
                 * not kept ends its record there at once (LEFT). */
                goblin__hubw_msg a;
                memset(&a, 0, sizeof a);
                a.type = intro_kept ? GOBLIN__HUBW_READY : GOBLIN__HUBW_LEFT;
                memcpy(a.identity, m.identity, sizeof a.identity);
                memcpy(a.ticket, m.ticket, sizeof a.ticket);
                send_hub(h->ctl, NULL, &a);
                memset(a.ticket, 0, sizeof a.ticket);
            }
            memset(m.ticket, 0, sizeof m.ticket);
        }
        pthread_mutex_lock(&h->mu);
        if (e) {
            goblin__node_log(n, GOBLIN_LOG_WARN, "hub: a malformed message (%s): %s", goblin_err_name(e), why);
        } else if (m.type == GOBLIN__HUBW_NODE_ACK) {
            h->acked = true;
            h->st.connected = true;
            h->st.lab = m.lab;
            h->st.weight = m.weight;
            goblin__node_log(n, GOBLIN_LOG_INFO, "hub: linked to %s as lab %lld (weight %u)", h->url,
                             (long long)m.lab, (unsigned)m.weight);
            send_direct(h);
        } else if (m.type == GOBLIN__HUBW_OPEN) {
            if (h->acked) open_data(h, &m);
            memset(m.ticket, 0, sizeof m.ticket);
        } else if (m.type == GOBLIN__HUBW_OWNER) {
            h->st.owners_named += owner_kept; /* kept above, outside h->mu */
        } else if (m.type == GOBLIN__HUBW_INTRODUCE || m.type == GOBLIN__HUBW_END) {
            h->st.introductions += intro_kept; /* kept above, outside h->mu */
        } else if (m.type == GOBLIN__HUBW_REFUSE) {
            h->refused = true;
            h->refuse_reason = m.reason && m.reason < GOBLIN_ERR_COUNT ? (goblin_err)m.reason : GOBLIN_EPROTO;
            snprintf(h->refuse_text, sizeof h->refuse_text, "%s", m.text);
            h->st.refused++;
            goblin__node_log(n, GOBLIN_LOG_ERROR, "hub %s refused this node (%s): %s", h->url,
                             goblin_err_name(h->refuse_reason), m.text);
        } else {
            goblin__node_log(n, GOBLIN_LOG_WARN, "hub: unexpected message type %d", (int)m.type);
        }
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
    }
    return NULL;
}

static void hub_free(struct goblin__node_hub *h) {
    if (!h) return;
    if (h->tls) nng_tls_config_free(h->tls);
    memset(h->key, 0, sizeof h->key);
    goblin__free(h->dials);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    goblin__free(h);
}

/* Stop the link: its thread, its dialers, its control socket (the node's socket is
 * closed by the caller next). */
void goblin__node_hub_stop(goblin_node *n) {
    pthread_mutex_lock(&n->ev_mu);
    struct goblin__node_hub *h = n->hub;
    pthread_mutex_unlock(&n->ev_mu);
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    bool was = h->stop;
    h->stop = true;
    pthread_mutex_unlock(&h->mu);
    if (was) return;
    /* The thread first (it wakes within its 20 ms receive), then the socket: nng 1.5.2
     * can hang in nng_close when a send on a tls+tcp pipe races the pipe's close (the
     * transport starts the send on an aio the close has already stopped, and nothing
     * ever finishes it; pair1_pipe_stop then waits forever). With the thread gone, no
     * send of ours is in flight when the socket closes. */
    if (h->have_thread) pthread_join(h->thread, NULL);
    h->have_thread = false;
    if (h->ctl_open) nng_close(h->ctl);
    h->ctl_open = false;
    for (;;) {
        nng_dialer closing[64];
        int32_t n_closing = 0;
        pthread_mutex_lock(&h->mu);
        while (h->n_dials && n_closing < 64) take_dial(h, h->n_dials - 1, closing, &n_closing);
        h->st.connected = false;
        h->st.workers_lent = 0;
        pthread_mutex_unlock(&h->mu);
        if (!n_closing) break;
        for (int32_t i = 0; i < n_closing; i++) nng_dialer_close(closing[i]);
    }
}

void goblin__node_hub_free(goblin_node *n) {
    goblin__node_hub_stop(n);
    pthread_mutex_lock(&n->ev_mu);
    struct goblin__node_hub *h = n->hub;
    n->hub = NULL;
    pthread_mutex_unlock(&n->ev_mu);
    hub_free(h);
}

goblin_err goblin_node_hub_connect(goblin_node *n, const goblin_node_hub_params *p) {
    if (!n || !p || !p->url || !p->key) return GOBLIN_EINVAL;
    if (!n->started) return GOBLIN_ESTATE;
    pthread_mutex_lock(&n->ev_mu);
    bool have = n->hub != NULL;
    pthread_mutex_unlock(&n->ev_mu);
    if (have) {
        goblin__node_log(n, GOBLIN_LOG_ERROR, "hub: this node is linked to a hub already");
        return GOBLIN_ESTATE;
    }
    bool tls = goblin__transport_url_is_tls(p->url);
    if (!tls && !(goblin__transport_url_is_plain_tcp(p->url) && goblin__transport_url_is_local(p->url))) {
        goblin__node_log(n, GOBLIN_LOG_ERROR, "hub: %s: use tls+tcp:// (plain tcp:// only on a loopback address)", p->url);
        return GOBLIN_EINVAL;
    }
    if (tls && !p->fingerprint == !p->ca_file) {
        goblin__node_log(n, GOBLIN_LOG_ERROR, "hub: TLS needs exactly one of the hub's fingerprint and a CA file");
        return GOBLIN_EINVAL;
    }
    size_t kl = strlen(p->key);
    if (kl < 1 || kl > GOBLIN__HUBW_KEY_MAX || strlen(p->url) >= sizeof ((struct goblin__node_hub *)0)->url) {
        goblin__node_log(n, GOBLIN_LOG_ERROR, "hub: the key or the URL is too long");
        return GOBLIN_EINVAL;
    }
    struct goblin__node_hub *h = goblin__calloc(1, sizeof *h);
    if (!h || !(h->dials = goblin__calloc(MAX_DIALS, sizeof *h->dials))) {
        goblin__free(h);
        return GOBLIN_ENOMEM;
    }
    h->n = n;
    h->rfd = -1;
    snprintf(h->url, sizeof h->url, "%s", p->url);
    memcpy(h->key, p->key, kl + 1);
    h->max_workers = p->max_workers;
    if (p->direct_url) {
        /* Workers dial it themselves: TLS with the node's own certificate (they pin its
         * fingerprint, which the hub passes on), or plain tcp:// on loopback only. */
        bool dtls = goblin__transport_url_is_tls(p->direct_url);
        goblin_err de = GOBLIN_OK;
        if (strlen(p->direct_url) < 1 || strlen(p->direct_url) > GOBLIN__HUBW_URL_MAX) {
            goblin__node_log(n, GOBLIN_LOG_ERROR, "hub: the direct address is 1 to %d bytes", GOBLIN__HUBW_URL_MAX);
            de = GOBLIN_EINVAL;
        } else if (!dtls && !(goblin__transport_url_is_plain_tcp(p->direct_url) &&
                              goblin__transport_url_is_local(p->direct_url))) {
            goblin__node_log(n, GOBLIN_LOG_ERROR, "hub: direct address %s: use tls+tcp:// (plain tcp:// only on a "
                             "loopback address)", p->direct_url);
            de = GOBLIN_EINVAL;
        } else if (dtls) {
            char hex[GOBLIN_TLS_FINGERPRINT_SIZE];
            if (!n->cert_file || goblin_tls_fingerprint_file(n->cert_file, hex, NULL) != GOBLIN_OK ||
                !goblin__hubw_identity_parse(hex, h->direct_fp)) {
                goblin__node_log(n, GOBLIN_LOG_ERROR, "hub: a tls+tcp:// direct address needs the node's own "
                                 "certificate (cert_file), whose fingerprint the workers pin");
                de = GOBLIN_EINVAL;
            }
        }
        if (de) {
            goblin__free(h->dials);
            goblin__free(h);
            return de;
        }
        snprintf(h->direct_url, sizeof h->direct_url, "%s", p->direct_url);
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    char why[512] = "";
    goblin_err e = GOBLIN_OK;
    if (tls) {
        e = p->fingerprint ? goblin__tls_client_config_pinned(p->url, p->fingerprint, 0, &h->tls, why, sizeof why)
                           : goblin__tls_client_config_ca(p->ca_file, NULL, p->url, &h->tls, why, sizeof why);
        if (e) goblin__node_log(n, GOBLIN_LOG_ERROR, "hub %s: %s", p->url, why);
    }
    int rv = 0;
    if (!e && (rv = nng_pair1_open(&h->ctl)) != 0) e = goblin__transport_err(rv);
    if (!e) {
        h->ctl_open = true;
        nng_socket_set_size(h->ctl, NNG_OPT_RECVMAXSZ, GOBLIN__HUBW_MAX + 64);
        nng_socket_set_ms(h->ctl, NNG_OPT_SENDTIMEO, 1000);
        /* Room for a turn's reports (WORK, QUARANTINE) sent without blocking. */
        nng_socket_set_int(h->ctl, NNG_OPT_SENDBUF, 128);
        /* The receive descriptor nng makes on first use, made now: made later by the
         * link's thread while nng's threads signal it, the two raced (ThreadSanitizer). */
        if (nng_socket_get_int(h->ctl, NNG_OPT_RECVFD, &h->rfd) != 0) h->rfd = -1;
        nng_pipe_notify(h->ctl, NNG_PIPE_EV_ADD_POST, ctl_pipe_cb, h);
        nng_pipe_notify(h->ctl, NNG_PIPE_EV_REM_POST, ctl_pipe_cb, h);
        nng_dialer d;
        if ((rv = nng_dialer_create(&d, h->ctl, p->url)) == 0) {
            if (h->tls) rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, h->tls);
            nng_dialer_set_ms(d, NNG_OPT_RECONNMINT, 100);
            nng_dialer_set_ms(d, NNG_OPT_RECONNMAXT, 5000);
            if (!rv) rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK);
        }
        if (rv) {
            e = goblin__transport_err(rv);
            goblin__node_log(n, GOBLIN_LOG_ERROR, "hub: cannot dial %s: %s", p->url, nng_strerror(rv));
        }
    }
    if (!e && pthread_create(&h->thread, NULL, hub_main, h) != 0) e = GOBLIN_ENOMEM;
    if (e) {
        if (h->ctl_open) nng_close(h->ctl);
        hub_free(h);
        return e;
    }
    h->have_thread = true;
    pthread_mutex_lock(&n->ev_mu);
    n->hub = h;
    pthread_mutex_unlock(&n->ev_mu);
    /* The hub's first answer: NODE_ACK, or a refusal of the key. */
    uint32_t wait_ms = p->timeout_ms ? p->timeout_ms : 10000;
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += wait_ms / 1000;
    dl.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&h->mu);
    while (!h->acked && !h->refused)
        if (pthread_cond_timedwait(&h->cv, &h->mu, &dl) == ETIMEDOUT) break;
    bool acked = h->acked, refused = h->refused;
    goblin_err why_refused = h->refuse_reason;
    pthread_mutex_unlock(&h->mu);
    if (acked) return GOBLIN_OK;
    if (!refused) goblin__node_log(n, GOBLIN_LOG_ERROR, "hub %s: no answer within %u ms", p->url, (unsigned)wait_ms);
    goblin__node_hub_free(n);
    return refused ? why_refused : GOBLIN_ETIMEDOUT;
}

goblin_err goblin_node_hub_stats_get(goblin_node *n, goblin_node_hub_stats *out) {
    if (!n || !out) return GOBLIN_EINVAL;
    pthread_mutex_lock(&n->ev_mu);
    struct goblin__node_hub *h = n->hub;
    if (h) {
        pthread_mutex_lock(&h->mu);
        *out = h->st;
        pthread_mutex_unlock(&h->mu);
    }
    pthread_mutex_unlock(&n->ev_mu);
    if (h) { /* n->mu before ev_mu: taken after it */
        pthread_mutex_lock(&n->mu);
        out->tickets_refused = n->intro_tickets_refused;
        out->workers_direct = 0;
        for (int32_t i = 0; i < n->n_peers; i++)
            out->workers_direct += n->peers[i].used && n->peers[i].connected && n->peers[i].introduced;
        pthread_mutex_unlock(&n->mu);
    }
    return h ? GOBLIN_OK : GOBLIN_ESTATE;
}
