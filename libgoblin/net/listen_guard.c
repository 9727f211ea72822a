/* libgoblin/net/listen_guard.c - listeners that keep taking connections
 * (listen_guard.h: why nng 1.5.2 needs it, and how a dead listener is told). */
#include "listen_guard.h"
#include "transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include <nng/supplemental/tls/tls.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "goblin/node.h"

#define MAX_WATCHED (GOBLIN_NODE_MAX_LISTEN + 8)
#define PROBE_EVERY_MS 1000 /* between checks of a listener */
#define PROBE_UP_MS 3000    /* the probe's own handshake; longer: no verdict */
/* From the probe's handshake to the socket's ADD_PRE: a few task-queue hops in nng,
 * milliseconds; a dead listener never gets there. The wait starts again while an
 * ADD_PRE callback runs (a listener takes one connection at a time, so one that waits
 * for a lock holds up the probe), and gives no verdict after PROBE_MAX_MS. */
#define PROBE_GRACE_MS 3000
#define PROBE_MAX_MS 30000
#define PAIR0_PROTO 0x10 /* SP protocol number of pair0 (nng's NNI_PROTO_PAIR_V0) */

typedef struct watched {
    char *url;    /* as given (logged) */
    char *rebind; /* listened on again: a port 0 replaced by the one bound */
    char *probe;  /* what the probe dials; NULL: not watched */
    char *cert, *key;
    bool tls;
    bool listening; /* the guard thread's, after start */
    bool relisten_failed;
    nng_listener l;
    bool ipc;
    _Atomic int32_t id;     /* nng_listener_id of l; 0 while none */
    _Atomic uint64_t taken; /* ADD_PREs of its connections */
    /* The probe in flight (set before its SP header is sent, so before its ADD_PRE):
     * told apart by the address it dialed from, or on ipc (where both ends have the
     * listener's path) by being the first connection from this process meanwhile. */
    atomic_int armed;
    pthread_mutex_t amu; /* probe_sa, and armed's changes */
    nng_sockaddr probe_sa;
} watched;

struct goblin__listen_guard {
    nng_socket s;
    goblin__guard_log_fn log;
    void *log_user;
    watched w[MAX_WATCHED];
    _Atomic int32_t n; /* slots filled; a slot is complete before n counts it */
    atomic_bool stop;
    atomic_int busy; /* ADD_PRE callbacks of the socket running now */
    nng_aio *aio; /* the probe's; aborted by a stop */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool running;
};

enum { PROBE_UNKNOWN, PROBE_ALIVE, PROBE_DEAD };

static void logf_(goblin__listen_guard *g, bool error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void logf_(goblin__listen_guard *g, bool error, const char *fmt, ...) {
    if (!g->log) return;
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    g->log(g->log_user, error, line);
}

goblin_err goblin__guard_new(goblin__listen_guard **out, nng_socket s, goblin__guard_log_fn log,
                             void *log_user) {
    if (!out) return GOBLIN_EINVAL;
    goblin__listen_guard *g = goblin__calloc(1, sizeof *g);
    if (!g) return GOBLIN_ENOMEM;
    pthread_condattr_t ca;
    bool ok = pthread_condattr_init(&ca) == 0;
    ok = ok && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0;
    ok = ok && pthread_cond_init(&g->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (ok && pthread_mutex_init(&g->mu, NULL) != 0) {
        pthread_cond_destroy(&g->cv);
        ok = false;
    }
    if (!ok) {
        goblin__free(g);
        return GOBLIN_ENOMEM;
    }
    g->s = s;
    g->log = log;
    g->log_user = log_user;
    *out = g;
    return GOBLIN_OK;
}

/* The URLs of a started TCP or TLS listener: the probe dials the address it bound
 * (the loopback one for a wildcard), and a restart binds the port it got (a URL
 * asking for port 0 got one the peers now use). */
static bool tcp_urls(watched *w, const char *url) {
    nng_sockaddr sa;
    if (nng_listener_get_addr(w->l, NNG_OPT_LOCADDR, &sa) != 0) return false;
    char addr[INET6_ADDRSTRLEN + 2], buf[600];
    const char *host = strstr(url, "://");
    if (!host) return false;
    unsigned port;
    if (sa.s_family == NNG_AF_INET) {
        uint32_t a = sa.s_in.sa_addr;
        if (a == 0) a = htonl(INADDR_LOOPBACK);
        if (!inet_ntop(AF_INET, &a, addr, sizeof addr)) return false;
        port = ntohs(sa.s_in.sa_port);
    } else if (sa.s_family == NNG_AF_INET6) {
        uint8_t a[16];
        memcpy(a, sa.s_in6.sa_addr, 16);
        static const uint8_t any[16] = {0};
        if (memcmp(a, any, 16) == 0) a[15] = 1; /* :: -> ::1 */
        char a6[INET6_ADDRSTRLEN];
        if (!inet_ntop(AF_INET6, a, a6, sizeof a6)) return false;
        snprintf(addr, sizeof addr, "[%s]", a6);
        port = ntohs(sa.s_in6.sa_port);
    } else {
        return false;
    }
    snprintf(buf, sizeof buf, "%s%s:%u", w->tls ? "tls+tcp://" : "tcp://", addr, port);
    w->probe = goblin__strdup(buf);
    const char *colon = strrchr(host, ':');
    if (!colon) return false;
    snprintf(buf, sizeof buf, "%.*s:%u", (int)(colon - url), url, port);
    w->rebind = goblin__strdup(buf);
    return w->probe && w->rebind;
}

static void watched_free(watched *w) {
    goblin__free(w->url);
    goblin__free(w->rebind);
    goblin__free(w->probe);
    goblin__free(w->cert);
    goblin__free(w->key);
    pthread_mutex_destroy(&w->amu);
    memset(w, 0, sizeof *w);
}

goblin_err goblin__guard_listen(goblin__listen_guard *g, const char *url, const char *cert_file,
                                const char *key_file, char *msg, size_t cap) {
    if (!g || !url) return GOBLIN_EINVAL;
    int32_t n = atomic_load(&g->n);
    if (n >= MAX_WATCHED || g->running) {
        if (msg && cap) snprintf(msg, cap, "cannot listen on %s: too many addresses", url);
        return GOBLIN_EINVAL;
    }
    watched *w = &g->w[n];
    if (pthread_mutex_init(&w->amu, NULL) != 0) return GOBLIN_ENOMEM;
    nng_listener l;
    goblin_err e = goblin__transport_listen_on(g->s, url, cert_file, key_file, &l, msg, cap);
    if (e) {
        pthread_mutex_destroy(&w->amu);
        return e;
    }
    w->l = l;
    w->listening = true;
    w->tls = goblin__transport_url_is_tls(url);
    w->url = goblin__strdup(url);
    w->cert = cert_file ? goblin__strdup(cert_file) : NULL;
    w->key = key_file ? goblin__strdup(key_file) : NULL;
    bool ok = w->url && (!cert_file || w->cert) && (!key_file || w->key);
    w->ipc = strncmp(url, "ipc://", 6) == 0;
    if (ok && w->ipc) {
        w->probe = goblin__strdup(url);
        w->rebind = goblin__strdup(url);
        ok = w->probe && w->rebind;
    } else if (ok && (w->tls || goblin__transport_url_is_plain_tcp(url))) {
        ok = tcp_urls(w, url);
    }
    if (!ok) {
        /* Not watched (no memory, or an address nng does not tell): still listening. */
        goblin__free(w->probe);
        w->probe = NULL;
    }
    atomic_store(&w->id, (int32_t)nng_listener_id(l));
    atomic_store(&g->n, n + 1);
    return GOBLIN_OK;
}

static bool same_addr(const nng_sockaddr *a, const nng_sockaddr *b) {
    if (a->s_family != b->s_family) return false;
    if (a->s_family == NNG_AF_INET)
        return a->s_in.sa_addr == b->s_in.sa_addr && a->s_in.sa_port == b->s_in.sa_port;
    if (a->s_family == NNG_AF_INET6)
        return memcmp(a->s_in6.sa_addr, b->s_in6.sa_addr, 16) == 0 &&
               a->s_in6.sa_port == b->s_in6.sa_port;
    return false;
}

/* Is @p p the probe of @p w (armed)? Disarms it when so. */
static bool is_probe(watched *w, nng_pipe p) {
    if (!atomic_load(&w->armed)) return false;
    int pid = 0;
    nng_sockaddr ra;
    bool got = w->ipc ? nng_pipe_get_int(p, NNG_OPT_IPC_PEER_PID, &pid) == 0
                      : nng_pipe_get_addr(p, NNG_OPT_REMADDR, &ra) == 0;
    pthread_mutex_lock(&w->amu);
    bool match = got && atomic_load(&w->armed) &&
                 (w->ipc ? pid == (int)getpid() : same_addr(&ra, &w->probe_sa));
    if (match) atomic_store(&w->armed, 0);
    pthread_mutex_unlock(&w->amu);
    return match;
}

bool goblin__guard_pipe_added(goblin__listen_guard *g, nng_pipe p) {
    if (!g) return false;
    int32_t lid = (int32_t)nng_listener_id(nng_pipe_listener(p));
    int32_t n = atomic_load(&g->n);
    for (int32_t i = 0; lid > 0 && i < n; i++)
        if (atomic_load(&g->w[i].id) == lid) {
            atomic_fetch_add(&g->w[i].taken, 1);
            if (is_probe(&g->w[i], p)) return true;
            break;
        }
    atomic_fetch_add(&g->busy, 1);
    return false;
}

void goblin__guard_pipe_done(goblin__listen_guard *g) {
    if (g) atomic_fetch_sub(&g->busy, 1);
}

/* Sleep @p ms unless stopped; true if stopped. */
static bool nap(goblin__listen_guard *g, int64_t ms) {
    struct timespec dl = goblin__deadline_after_ms(ms);
    pthread_mutex_lock(&g->mu);
    while (!atomic_load(&g->stop))
        if (pthread_cond_timedwait(&g->cv, &g->mu, &dl) == ETIMEDOUT) break;
    pthread_mutex_unlock(&g->mu);
    return atomic_load(&g->stop);
}

/* Wait for the operation just started on g->aio; a stop ends it (guard_stop sets stop
 * and then aborts: one of the two sees the other). */
static int finish(goblin__listen_guard *g) {
    if (atomic_load(&g->stop)) nng_aio_abort(g->aio, NNG_ECANCELED);
    nng_aio_wait(g->aio);
    return nng_aio_result(g->aio);
}

/* Dial @p w once, as a pair0 peer (which the pair1 socket rejects after its ADD_PRE,
 * so the probe never becomes a connection), and see whether the socket takes the
 * connection in. */
static int probe(goblin__listen_guard *g, watched *w) {
    static const uint8_t hdr[8] = {0, 'S', 'P', 0, 0, PAIR0_PROTO, 0, 0};
    uint8_t rx[8];
    nng_stream_dialer *d = NULL;
    nng_stream *c = NULL;
    nng_tls_config *tc = NULL;
    int verdict = PROBE_UNKNOWN;
    if (nng_stream_dialer_alloc(&d, w->probe) != 0) return PROBE_UNKNOWN;
    int rv = 0;
    if (w->tls) { /* its own listener: nothing to verify */
        rv = nng_tls_config_alloc(&tc, NNG_TLS_MODE_CLIENT);
        if (rv == 0) rv = nng_tls_config_auth_mode(tc, NNG_TLS_AUTH_MODE_NONE);
        if (rv == 0) rv = nng_stream_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, tc);
    }
    if (rv == 0 && !atomic_load(&g->stop)) {
        nng_aio_set_timeout(g->aio, PROBE_UP_MS);
        nng_stream_dialer_dial(d, g->aio);
        if ((rv = finish(g)) == 0) c = nng_aio_get_output(g->aio, 0);
    }
    /* Freed before the connection: nng's reaper then frees the dialer after this
     * thread is done with it (the other order is a race ThreadSanitizer reports in
     * nng's tcp dialer). */
    nng_stream_dialer_free(d);
    nng_sockaddr sa;
    if (c && !w->ipc) rv = nng_stream_get_addr(c, NNG_OPT_LOCADDR, &sa);
    if (c && rv == 0) {
        pthread_mutex_lock(&w->amu);
        if (!w->ipc) w->probe_sa = sa;
        atomic_store(&w->armed, 1);
        pthread_mutex_unlock(&w->amu);
        uint64_t seen = atomic_load(&w->taken);
        nng_iov iov = {(void *)hdr, sizeof hdr};
        nng_aio_set_iov(g->aio, 1, &iov);
        nng_aio_set_timeout(g->aio, PROBE_UP_MS);
        nng_stream_send(c, g->aio);
        rv = finish(g);
        for (size_t got = 0; rv == 0 && got < sizeof rx; got += nng_aio_count(g->aio)) {
            iov = (nng_iov){rx + got, sizeof rx - got};
            nng_aio_set_iov(g->aio, 1, &iov);
            nng_stream_recv(c, g->aio);
            rv = finish(g);
        }
        /* Both SP headers are through: the listener's transport is done with it. */
        int64_t t0 = goblin__now_ms(), from = t0;
        while (rv == 0) {
            if (atomic_load(&w->taken) != seen) {
                verdict = PROBE_ALIVE;
                break;
            }
            int64_t t = goblin__now_ms();
            if (atomic_load(&g->busy) > 0) from = t;
            if (t - t0 >= PROBE_MAX_MS) break;
            if (t - from >= PROBE_GRACE_MS) {
                verdict = PROBE_DEAD;
                break;
            }
            if (nap(g, 5)) break;
        }
        pthread_mutex_lock(&w->amu);
        atomic_store(&w->armed, 0);
        pthread_mutex_unlock(&w->amu);
    }
    if (c) {
        nng_stream_close(c);
        nng_stream_free(c);
    }
    if (tc) nng_tls_config_free(tc);
    return verdict;
}

/* Listen on @p w again (after a restart closed it, or a failed try). */
static void relisten(goblin__listen_guard *g, watched *w) {
    char why[512];
    nng_listener l;
    if (goblin__transport_listen_on(g->s, w->rebind, w->cert, w->key, &l, why, sizeof why)) {
        if (!w->relisten_failed)
            logf_(g, true, "%s (trying again every %d ms)", why, PROBE_EVERY_MS);
        w->relisten_failed = true;
        return;
    }
    w->l = l;
    w->listening = true;
    w->relisten_failed = false;
    atomic_store(&w->id, (int32_t)nng_listener_id(l));
    logf_(g, false, "listening on %s again", w->rebind);
}

static void check(goblin__listen_guard *g, watched *w) {
    if (!w->probe) return;
    if (!w->listening) {
        relisten(g, w);
        return;
    }
    if (probe(g, w) != PROBE_DEAD || atomic_load(&g->stop)) return;
    logf_(g, true, "the listener on %s completed a handshake but gave the socket no "
          "connection within %d ms: nng 1.5.2 stops a listener when a peer leaves during the "
          "handshake (nng issue #1518); restarting it, its connections are closed and redial",
          w->url, PROBE_GRACE_MS);
    atomic_store(&w->id, 0);
    w->listening = false;
    nng_listener_close(w->l);
    relisten(g, w);
}

static void *guard_main(void *arg) {
    goblin__listen_guard *g = arg;
    while (!nap(g, PROBE_EVERY_MS)) {
        int32_t n = atomic_load(&g->n);
        for (int32_t i = 0; i < n && !atomic_load(&g->stop); i++) check(g, &g->w[i]);
    }
    return NULL;
}

goblin_err goblin__guard_start(goblin__listen_guard *g) {
    if (!g) return GOBLIN_EINVAL;
    if (g->running) return GOBLIN_OK;
    bool any = false;
    for (int32_t i = 0; i < atomic_load(&g->n); i++) any = any || g->w[i].probe;
    if (!any) return GOBLIN_OK; /* nothing to watch: no thread */
    atomic_store(&g->stop, false);
    if (!g->aio && nng_aio_alloc(&g->aio, NULL, NULL) != 0) return GOBLIN_ENOMEM;
    if (pthread_create(&g->thread, NULL, guard_main, g) != 0) return GOBLIN_ENOMEM;
    g->running = true;
    return GOBLIN_OK;
}

void goblin__guard_stop(goblin__listen_guard *g) {
    if (!g || !g->running) return;
    pthread_mutex_lock(&g->mu);
    atomic_store(&g->stop, true);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    nng_aio_abort(g->aio, NNG_ECANCELED); /* a probe step waiting */
    pthread_join(g->thread, NULL);
    g->running = false;
}

void goblin__guard_free(goblin__listen_guard *g) {
    if (!g) return;
    goblin__guard_stop(g);
    for (int32_t i = 0; i < atomic_load(&g->n); i++) watched_free(&g->w[i]);
    if (g->aio) nng_aio_free(g->aio);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    goblin__free(g);
}
