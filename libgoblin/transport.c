/* transport.c - socket setup for node and worker (see transport.h). */
#include "transport.h"

#include <nng/protocol/pair1/pair.h>
#include <stdio.h>
#include <string.h>

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

static bool is_tls(const char *url) { return strncmp(url, "tls+", 4) == 0; }

goblin_err goblin__transport_listen(nng_socket s, const char *url, char *msg, size_t cap) {
    if (is_tls(url)) {
        /* The TLS configuration (tls.h) attaches here, between create and start. */
        if (msg && cap) snprintf(msg, cap, "cannot listen on %s: TLS is not available in this build yet", url);
        return GOBLIN_ENOTSUP;
    }
    nng_listener l;
    int rv = nng_listener_create(&l, s, url);
    if (rv) return fail(rv, "cannot listen on", url, msg, cap);
    if ((rv = nng_listener_start(l, 0)) != 0) {
        nng_listener_close(l);
        return fail(rv, "cannot listen on", url, msg, cap);
    }
    return GOBLIN_OK;
}

goblin_err goblin__transport_dial(nng_socket s, const char *url, uint32_t min_ms, uint32_t max_ms,
                                  char *msg, size_t cap) {
    if (is_tls(url)) {
        if (msg && cap) snprintf(msg, cap, "cannot dial %s: TLS is not available in this build yet", url);
        return GOBLIN_ENOTSUP;
    }
    nng_dialer d;
    int rv = nng_dialer_create(&d, s, url);
    if (rv) return fail(rv, "cannot dial", url, msg, cap);
    nng_dialer_set_ms(d, NNG_OPT_RECONNMINT, (nng_duration)min_ms);
    nng_dialer_set_ms(d, NNG_OPT_RECONNMAXT, (nng_duration)max_ms);
    /* Non-blocking: a node that is not up yet is redialed in the background
     * instead of failing here (a blocking start fails with ECONNREFUSED). */
    if ((rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK)) != 0) {
        nng_dialer_close(d);
        return fail(rv, "cannot dial", url, msg, cap);
    }
    return GOBLIN_OK;
}
