/* libgoblin/net/transport.c - socket setup for node and worker (see transport.h). */
#include "transport.h"
#include "goblin/node.h"
#include "tls_impl.h"

#include <nng/protocol/pair1/pair.h>
#include <nng/supplemental/util/platform.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

goblin_err goblin__transport_err(int rv) {
    switch (rv) {
    case 0: return GOBLIN_OK;
    case NNG_ENOMEM: return GOBLIN_ENOMEM;
    case NNG_ETIMEDOUT: return GOBLIN_ETIMEDOUT;
    case NNG_ECLOSED: return GOBLIN_ECLOSED;
    case NNG_ECONNREFUSED: return GOBLIN_ECONNREFUSED;
    case NNG_ENOTSUP: return GOBLIN_ENOTSUP;
    case NNG_EADDRINVAL: case NNG_EINVAL: return GOBLIN_EINVAL;
    case NNG_EPEERAUTH: case NNG_EPERM: return GOBLIN_EAUTH;
    case NNG_ECRYPTO: return GOBLIN_ECRYPTO;
    case NNG_EMSGSIZE: return GOBLIN_ELIMIT;
    default: return GOBLIN_EIO;
    }
}

static goblin_err fail(int rv, const char *what, const char *url, char *msg, size_t cap) {
    if (msg && cap) snprintf(msg, cap, "%s%s%s: %s", what, url ? " " : "", url ? url : "",
                             nng_strerror(rv));
    return goblin__transport_err(rv);
}

static goblin_err open_common(nng_socket *s, bool poly, uint64_t recv_max, char *msg, size_t cap) {
    int rv = poly ? nng_pair1_open_poly(s) : nng_pair1_open(s);
    if (rv) return fail(rv, "cannot open socket", NULL, msg, cap);
    /* nng's default is unlimited: a peer could make us allocate anything. */
    size_t lim = (size_t)recv_max;
    if ((rv = nng_socket_set_size(*s, NNG_OPT_RECVMAXSZ, lim)) != 0) {
        nng_close(*s);
        return fail(rv, "cannot set receive limit", NULL, msg, cap);
    }
    return GOBLIN_OK;
}

goblin_err goblin__transport_open_node(nng_socket *s, uint64_t recv_max, char *msg, size_t cap) {
    return open_common(s, true, recv_max, msg, cap);
}

goblin_err goblin__transport_open_worker(nng_socket *s, uint64_t recv_max, char *msg, size_t cap) {
    return open_common(s, false, recv_max, msg, cap);
}

bool goblin__transport_url_is_tls(const char *url) { return strncmp(url, "tls+", 4) == 0; }

bool goblin__transport_url_is_plain_tcp(const char *url) {
    return strncmp(url, "tcp://", 6) == 0 || strncmp(url, "tcp4://", 7) == 0 ||
           strncmp(url, "tcp6://", 7) == 0;
}

goblin__url_scope goblin__transport_url_scope(const char *url) {
    if (!url) return GOBLIN__SCOPE_BAD;
    if (strncmp(url, "ipc://", 6) == 0 || strncmp(url, "inproc://", 9) == 0) return GOBLIN__SCOPE_LOCAL;
    const char *h = strstr(url, "://");
    if (!h) return GOBLIN__SCOPE_BAD;
    h += 3;
    /* The host is what precedes the port: "[v6]:port" or "v4:port". Only a numeric
     * address has a scope, parsed whole (a name such as "127.0.0.1.example.com" or
     * "localhost" could resolve anywhere). */
    char host[256];
    const char *end;
    if (*h == '[') {
        end = strchr(h, ']');
        if (!end || end[1] != ':') return GOBLIN__SCOPE_BAD;
        h++;
    } else {
        end = strrchr(h, ':');
        if (!end) return GOBLIN__SCOPE_BAD;
    }
    size_t n = (size_t)(end - h);
    if (n == 0 || n >= sizeof host) return GOBLIN__SCOPE_BAD;
    memcpy(host, h, n);
    host[n] = 0;
    const char *port = end + (*end == ']' ? 2 : 1);
    if (!*port) return GOBLIN__SCOPE_BAD;
    for (const char *q = port; *q; q++)
        if (*q < '0' || *q > '9') return GOBLIN__SCOPE_BAD;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) {
        uint32_t a = ntohl(a4.s_addr);
        if (a >> 24 == 127) return GOBLIN__SCOPE_LOOPBACK;
        if (a >> 24 == 10 || (a >> 20) == 0xac1 || (a >> 16) == 0xc0a8) return GOBLIN__SCOPE_PRIVATE;
        if ((a >> 16) == 0xa9fe || a >> 24 == 0 || a >> 28 >= 0xe) return GOBLIN__SCOPE_OTHER; /* link-local, 0/8, multicast+ */
        return GOBLIN__SCOPE_PUBLIC;
    }
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6)) return GOBLIN__SCOPE_LOOPBACK;
        if ((a6.s6_addr[0] & 0xfe) == 0xfc) return GOBLIN__SCOPE_PRIVATE;
        if (IN6_IS_ADDR_LINKLOCAL(&a6) || IN6_IS_ADDR_MULTICAST(&a6) || IN6_IS_ADDR_UNSPECIFIED(&a6) ||
            IN6_IS_ADDR_V4MAPPED(&a6) || IN6_IS_ADDR_SITELOCAL(&a6))
            return GOBLIN__SCOPE_OTHER;
        return GOBLIN__SCOPE_PUBLIC;
    }
    return GOBLIN__SCOPE_NAME;
}

bool goblin__transport_url_is_local(const char *url) {
    goblin__url_scope sc = goblin__transport_url_scope(url);
    return sc == GOBLIN__SCOPE_LOCAL || sc == GOBLIN__SCOPE_LOOPBACK;
}

bool goblin_url_is_local(const char *url) { return goblin__transport_url_is_local(url); }

goblin_err goblin__transport_listen(nng_socket s, const char *url, const char *cert_file,
                                    const char *key_file, char *msg, size_t cap) {
    return goblin__transport_listen_on(s, url, cert_file, key_file, NULL, msg, cap);
}

goblin_err goblin__transport_listen_on(nng_socket s, const char *url, const char *cert_file,
                                       const char *key_file, nng_listener *out, char *msg,
                                       size_t cap) {
    bool tls = goblin__transport_url_is_tls(url);
    if (tls && (!cert_file || !key_file)) {
        if (msg && cap)
            snprintf(msg, cap, "cannot listen on %s: TLS needs a certificate and a key file", url);
        return GOBLIN_EINVAL;
    }
    nng_listener l;
    int rv = nng_listener_create(&l, s, url);
    if (rv) return fail(rv, "cannot listen on", url, msg, cap);
    if (tls) {
        char why[384];
        goblin_err e = goblin__tls_listener_setup(l, cert_file, key_file, why, sizeof why);
        if (e) {
            nng_listener_close(l);
            if (msg && cap) snprintf(msg, cap, "cannot listen on %s: %s", url, why);
            return e;
        }
    }
    if ((rv = nng_listener_start(l, 0)) != 0) {
        nng_listener_close(l);
        return fail(rv, "cannot listen on", url, msg, cap);
    }
    if (out) *out = l;
    return GOBLIN_OK;
}

/* Errors that mean "the node is not (yet) there": worth another try. */
static bool transient(goblin_err e) {
    return e == GOBLIN_ECONNREFUSED || e == GOBLIN_ETIMEDOUT || e == GOBLIN_EIO ||
           e == GOBLIN_ECLOSED;
}

goblin_err goblin__transport_dial(nng_socket s, const char *url, uint32_t min_ms, uint32_t max_ms,
                                  const goblin__transport_trust *trust,
                                  goblin__transport_stop_fn stop, void *stop_user, char *msg,
                                  size_t cap, nng_dialer *out) {
    bool tls = goblin__transport_url_is_tls(url);
    if (tls && (!trust || (!trust->ca_file == !trust->fingerprint))) {
        if (msg && cap)
            snprintf(msg, cap, "cannot dial %s: TLS needs exactly one of a CA file and a pinned "
                     "fingerprint", url);
        return GOBLIN_EINVAL;
    }
    nng_dialer d;
    int rv = nng_dialer_create(&d, s, url);
    if (rv) return fail(rv, "cannot dial", url, msg, cap);
    nng_dialer_set_ms(d, NNG_OPT_RECONNMINT, (nng_duration)min_ms);
    nng_dialer_set_ms(d, NNG_OPT_RECONNMAXT, (nng_duration)max_ms);
    if (tls) {
        goblin__tls_client_opts o = {.ca_file = trust->ca_file, .fingerprint = trust->fingerprint,
                                     .server_name = trust->server_name, .timeout_ms = 0};
        uint32_t wait_ms = min_ms ? min_ms : 100;
        char why[512];
        for (;;) {
            goblin_err e = goblin__tls_dialer_setup(d, url, &o, why, sizeof why);
            if (e == GOBLIN_OK) break;
            /* Only pinned mode probes the node; CA-mode errors are never transient. */
            if (!trust->fingerprint || !transient(e)) {
                nng_dialer_close(d);
                if (msg && cap) snprintf(msg, cap, "cannot dial %s: %s", url, why);
                return e;
            }
            for (uint32_t t = 0; t < wait_ms; t += 10) {
                if (stop && stop(stop_user)) {
                    nng_dialer_close(d);
                    if (msg && cap) snprintf(msg, cap, "cannot dial %s: stopped while waiting for "
                                             "the node (%s)", url, why);
                    return GOBLIN_ECANCELED;
                }
                nng_msleep(10);
            }
            if (max_ms && wait_ms < max_ms) wait_ms = wait_ms * 2 > max_ms ? max_ms : wait_ms * 2;
        }
    }
    /* Non-blocking: a node that is not up yet is redialed in the background
     * instead of failing here (a blocking start fails with ECONNREFUSED). */
    if ((rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK)) != 0) {
        nng_dialer_close(d);
        return fail(rv, "cannot dial", url, msg, cap);
    }
    if (out) *out = d;
    return GOBLIN_OK;
}

int goblin__transport_recv_or_wake(nng_socket s, int *fd, int wake_fd, nng_msg **msg, int timeout_ms,
                                   bool *empty) {
    int rv = nng_recvmsg(s, msg, NNG_FLAG_NONBLOCK);
    if (empty) *empty = rv == NNG_EAGAIN;
    if (rv != NNG_EAGAIN || timeout_ms <= 0) return rv == NNG_EAGAIN ? NNG_ETIMEDOUT : rv;
    if (wake_fd < 0) return goblin__transport_recv(s, fd, msg, timeout_ms);
    if (*fd < 0 && nng_socket_get_int(s, NNG_OPT_RECVFD, fd) != 0) {
        *fd = -1;
        return goblin__transport_recv(s, fd, msg, timeout_ms); /* no pollable descriptor */
    }
    struct pollfd p[2] = {{.fd = *fd, .events = POLLIN}, {.fd = wake_fd, .events = POLLIN}};
    if (poll(p, 2, timeout_ms) < 0 && errno != EINTR) return NNG_EINTERNAL;
    if (p[1].revents & POLLIN) {
        char junk[64];
        while (read(wake_fd, junk, sizeof junk) > 0) {
        }
    }
    rv = nng_recvmsg(s, msg, NNG_FLAG_NONBLOCK);
    return rv == NNG_EAGAIN ? NNG_ETIMEDOUT : rv;
}

int goblin__transport_recv(nng_socket s, int *fd, nng_msg **msg, int timeout_ms) {
    int rv = nng_recvmsg(s, msg, NNG_FLAG_NONBLOCK);
    if (rv != NNG_EAGAIN || timeout_ms <= 0) return rv == NNG_EAGAIN ? NNG_ETIMEDOUT : rv;
    if (*fd < 0 && (rv = nng_socket_get_int(s, NNG_OPT_RECVFD, fd)) != 0) {
        /* No pollable descriptor (never on pair1): the timed receive. */
        *fd = -1;
        nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, timeout_ms);
        return nng_recvmsg(s, msg, 0);
    }
    struct pollfd p = {.fd = *fd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) < 0 && errno != EINTR) return NNG_EINTERNAL;
    rv = nng_recvmsg(s, msg, NNG_FLAG_NONBLOCK);
    return rv == NNG_EAGAIN ? NNG_ETIMEDOUT : rv;
}

/* ---- dropping a peer (see goblin__transport_pipe_close) -------------------------- */

/* A descriptor of our own for what this process's descriptor @p fd (nng's) refers to,
 * or -1. pidfd_getfd (Linux 5.6; @p *pidfd from pidfd_open, -1 once it is known not to
 * work) takes it without using @p fd itself, which nng's threads may close at any
 * moment: every check is made on the copy, so a number closed and reused meanwhile
 * is never mistaken for the connection, and nothing here touches a descriptor another
 * thread owns (ThreadSanitizer reports that as a race with nng's close). Elsewhere
 * F_DUPFD, with the same checks on the copy. */
static int own_copy(int *pidfd, int fd) {
    if (*pidfd >= 0) {
        long r = syscall(SYS_pidfd_getfd, *pidfd, fd, 0); /* sets FD_CLOEXEC */
        if (r >= 0) return (int)r;
        if (errno != ENOSYS && errno != EPERM && errno != EINVAL) return -1; /* closed meanwhile */
        close(*pidfd);
        *pidfd = -1;
    }
    return fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

/* The process's TCP connections by their addresses, as the last scan of /proc/self/fd
 * found them: descriptor numbers only, each checked again on a copy before it is used
 * (a number closed and reused since the scan is then not the connection, and the map
 * is scanned again). Dropping a peer used to scan every descriptor (a readlink, a copy
 * and two address calls each): with 1,024 workers connected, 1.4 ms of the node's
 * thread per drop, so a sweep that drops many silent workers took seconds. Now a drop
 * looks its connection up; only one made after the last scan costs a scan. */
typedef struct conn_key { /* no padding: compared with memcmp */
    uint16_t fam; /* NNG_AF_INET or NNG_AF_INET6 */
    uint16_t lport, rport;
    uint8_t laddr[16], raddr[16]; /* v4: the first 4 bytes */
} conn_key;
_Static_assert(sizeof(conn_key) == 38, "conn_key has no padding");

typedef struct conn_ent {
    conn_key k;
    int fd; /* -1: empty */
} conn_ent;

static pthread_mutex_t conns_mu = PTHREAD_MUTEX_INITIALIZER;
static conn_ent *conns; /* open addressing, conns_cap a power of two */
static size_t conns_cap;

static bool key_of_nng(const nng_sockaddr *loc, const nng_sockaddr *rem, conn_key *k) {
    memset(k, 0, sizeof *k);
    if (loc->s_family == NNG_AF_INET && rem->s_family == NNG_AF_INET) {
        k->fam = NNG_AF_INET;
        k->lport = loc->s_in.sa_port;
        k->rport = rem->s_in.sa_port;
        memcpy(k->laddr, &loc->s_in.sa_addr, 4);
        memcpy(k->raddr, &rem->s_in.sa_addr, 4);
        return true;
    }
    if (loc->s_family == NNG_AF_INET6 && rem->s_family == NNG_AF_INET6) {
        k->fam = NNG_AF_INET6;
        k->lport = loc->s_in6.sa_port;
        k->rport = rem->s_in6.sa_port;
        memcpy(k->laddr, loc->s_in6.sa_addr, 16);
        memcpy(k->raddr, rem->s_in6.sa_addr, 16);
        return true;
    }
    return false;
}

/* One side of a connection as the OS gives it, into @p addr / @p port; false if not TCP/IP. */
static bool os_side(const struct sockaddr_storage *a, socklen_t len, uint16_t *fam, uint8_t addr[16],
                    uint16_t *port) {
    if (a->ss_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)a;
        *fam = NNG_AF_INET;
        *port = v4->sin_port;
        memcpy(addr, &v4->sin_addr.s_addr, 4);
        return true;
    }
    if (a->ss_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)a;
        *fam = NNG_AF_INET6;
        *port = v6->sin6_port;
        memcpy(addr, &v6->sin6_addr, 16);
        return true;
    }
    return false;
}

/* The connection descriptor @p fd (our copy) is, into @p k; false if none. */
static bool key_of_fd(int fd, conn_key *k) {
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    uint16_t f2 = 0;
    memset(k, 0, sizeof *k);
    if (getsockname(fd, (struct sockaddr *)&a, &len) != 0 || !os_side(&a, len, &k->fam, k->laddr, &k->lport))
        return false;
    len = sizeof a;
    return getpeername(fd, (struct sockaddr *)&a, &len) == 0 && os_side(&a, len, &f2, k->raddr, &k->rport) &&
           f2 == k->fam;
}

static size_t key_home(const conn_key *k, size_t cap) {
    uint64_t h = (uint64_t)k->lport << 16 ^ k->rport;
    for (int i = 0; i < 16; i++) h = (h ^ k->raddr[i] ^ (uint64_t)k->laddr[i] << 8) * 0x100000001B3ull;
    return (size_t)(h * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
}

/* The descriptor the last scan found for @p k, or -1 (conns_mu held). */
static int conns_get(const conn_key *k) {
    if (!conns) return -1;
    for (size_t h = key_home(k, conns_cap);; h = (h + 1) & (conns_cap - 1)) {
        if (conns[h].fd < 0) return -1;
        if (memcmp(&conns[h].k, k, sizeof *k) == 0) return conns[h].fd;
    }
}

/* Scan /proc/self/fd again: the map of every TCP connection there (conns_mu held).
 * false: the descriptors cannot be listed. */
static bool conns_scan(int *pidfd) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return false;
    int dfd = dirfd(d);
    size_t n = 0, cap = 0;
    struct {
        conn_key k;
        int fd;
    } *found = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd == dfd || fd == *pidfd || fd < 0) continue;
        char path[64], what[64];
        snprintf(path, sizeof path, "/proc/self/fd/%ld", fd);
        ssize_t rl = readlink(path, what, sizeof what - 1);
        if (rl < 8 || memcmp(what, "socket:[", 8) != 0) continue;
        int mine = own_copy(pidfd, (int)fd);
        if (mine < 0) continue;
        conn_key k;
        bool tcp = key_of_fd(mine, &k);
        close(mine);
        if (!tcp) continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            void *g = realloc(found, nc * sizeof *found);
            if (!g) break;
            found = g;
            cap = nc;
        }
        found[n].k = k;
        found[n].fd = (int)fd;
        n++;
    }
    closedir(d);
    size_t want = 64;
    while (want < 2 * n + 2) want *= 2;
    conn_ent *t = malloc(want * sizeof *t);
    if (t) {
        for (size_t i = 0; i < want; i++) t[i].fd = -1;
        for (size_t i = 0; i < n; i++) {
            size_t h = key_home(&found[i].k, want);
            while (t[h].fd >= 0) h = (h + 1) & (want - 1);
            t[h].k = found[i].k;
            t[h].fd = found[i].fd;
        }
    }
    free(found);
    free(conns);
    conns = t; /* NULL on out of memory: every lookup misses and scans */
    conns_cap = t ? want : 0;
    return true;
}

/* Shut down @p fd's connection if (our copy of) it is still the one @p k names. */
static bool shut_if(int *pidfd, int fd, const conn_key *k) {
    int mine = own_copy(pidfd, fd);
    if (mine < 0) return false;
    conn_key now;
    bool ok = key_of_fd(mine, &now) && memcmp(&now, k, sizeof now) == 0 && shutdown(mine, SHUT_RDWR) == 0;
    close(mine);
    return ok;
}

/* Shut down the process's TCP connection from @p loc to @p rem: 1 done, 0 no live
 * connection has those addresses (it ended: getpeername fails once it is reset), -1
 * the descriptors cannot be listed. The 4-tuple names one connection of the host. */
static int shutdown_connection(const nng_sockaddr *loc, const nng_sockaddr *rem) {
    conn_key k;
    if (!key_of_nng(loc, rem, &k)) return 0;
    pthread_mutex_lock(&conns_mu);
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    int fd = conns_get(&k), done = 0;
    if (fd >= 0 && shut_if(&pidfd, fd, &k)) done = 1;
    else if (!conns_scan(&pidfd)) done = -1;
    else if ((fd = conns_get(&k)) >= 0 && shut_if(&pidfd, fd, &k)) done = 1;
    if (pidfd >= 0) close(pidfd);
    pthread_mutex_unlock(&conns_mu);
    return done;
}

/* Pipes shut down by goblin__transport_pipe_close, closed for good a while later
 * (goblin__transport_close_dropped) should the protocol not have closed them itself:
 * over tls+tcp:// nng 1.5.2 does not always notice that the connection below ended
 * (measured: of 100 hostile TLS peers dropped, 97 sockets stayed open). By then no read
 * of the pipe is in flight (the connection was shut down, and whatever was received
 * was read long since), so nng_pipe_close cannot hit the race described in
 * transport.h; for a pipe already gone it does nothing (NNG_ENOENT). */
#define DROPPED_MAX 1024
#define DROPPED_GRACE_MS 2000
static pthread_mutex_t dropped_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    nng_pipe pipe;
    nng_time due;
} dropped[DROPPED_MAX];
static int n_dropped;

static void dropped_add(nng_pipe p) {
    pthread_mutex_lock(&dropped_mu);
    bool known = false; /* a peer is dropped again for each message still queued */
    for (int i = 0; i < n_dropped && !known; i++) known = nng_pipe_id(dropped[i].pipe) == nng_pipe_id(p);
    if (!known && n_dropped < DROPPED_MAX) {
        dropped[n_dropped].pipe = p;
        dropped[n_dropped].due = nng_clock() + DROPPED_GRACE_MS;
        n_dropped++;
    }
    pthread_mutex_unlock(&dropped_mu);
}

void goblin__transport_close_dropped(void) {
    nng_pipe due[DROPPED_MAX];
    int n = 0;
    nng_time now = nng_clock();
    pthread_mutex_lock(&dropped_mu);
    for (int i = 0; i < n_dropped;) {
        if (dropped[i].due <= now) {
            due[n++] = dropped[i].pipe;
            dropped[i] = dropped[--n_dropped];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&dropped_mu);
    for (int i = 0; i < n; i++) nng_pipe_close(due[i]); /* not under dropped_mu */
}

void goblin__transport_pipe_close(nng_pipe p) {
    nng_sockaddr loc, rem;
    int rv = nng_pipe_get_addr(p, NNG_OPT_LOCADDR, &loc);
    if (rv == NNG_ENOENT) return; /* the pipe is gone already */
    if (rv == 0 && (loc.s_family == NNG_AF_INET || loc.s_family == NNG_AF_INET6)) {
        /* TCP (tls+tcp:// too). No remote address: the connection was reset, and the
         * pipe's next read fails by itself. Otherwise shut it down (or it ended
         * meanwhile): the protocol closes the pipe when its read fails. */
        if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &rem) != 0 || shutdown_connection(&loc, &rem) >= 0) {
            dropped_add(p);
            return;
        }
    }
    nng_pipe_close(p);
}
