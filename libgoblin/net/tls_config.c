/* libgoblin/net/tls_config.c - nng TLS configurations for the node's listeners and
 * the dialers of workers and clients (tls_impl.h): server certificates, CA trust, and
 * pinning a fingerprint through one unverified probe handshake. docs/security.md. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/errf.h"
#include "crypto.h"
#include "identity.h"
#include "tls_impl.h"

goblin_err goblin__tls_nng_err(int rv) {
    switch (rv) {
    case 0: return GOBLIN_OK;
    case NNG_ENOMEM: return GOBLIN_ENOMEM;
    case NNG_EINVAL:
    case NNG_EADDRINVAL: return GOBLIN_EINVAL;
    case NNG_ETIMEDOUT: return GOBLIN_ETIMEDOUT;
    case NNG_ECONNREFUSED: return GOBLIN_ECONNREFUSED;
    case NNG_ECLOSED:
    case NNG_ECONNSHUT:
    case NNG_ECONNRESET: return GOBLIN_ECLOSED;
    case NNG_EPEERAUTH: return GOBLIN_EAUTH;
    case NNG_ECRYPTO: return GOBLIN_ECRYPTO;
    case NNG_ENOTSUP: return GOBLIN_ENOTSUP;
    case NNG_EBUSY: return GOBLIN_EBUSY;
    case NNG_ECANCELED: return GOBLIN_ECANCELED;
    case NNG_EPROTO: return GOBLIN_EPROTO;
    case NNG_ENOENT: return GOBLIN_ENOTFOUND;
    case NNG_EMSGSIZE: return GOBLIN_ELIMIT;
    default: return GOBLIN_EIO;
    }
}

static goblin_err nng_errf(char *msg, size_t cap, int rv, const char *what) {
    return goblin__errf(msg, cap, goblin__tls_nng_err(rv), "%s: %s", what, nng_strerror(rv));
}

goblin_err goblin__tls_server_config(const char *cert_file, const char *key_file,
                                     nng_tls_config **out, char *msg, size_t cap) {
    if (!cert_file || !key_file || !out)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "certificate and key files are required");
    char *chain = NULL, *key = NULL;
    uint8_t fp[32];
    goblin_err e = goblin__tls_load_pair(cert_file, key_file, &chain, &key, fp, msg, cap);
    if (e) return e;
    nng_tls_config *c = NULL;
    int rv = nng_tls_config_alloc(&c, NNG_TLS_MODE_SERVER);
    if (rv) {
        e = nng_errf(msg, cap, rv, "TLS server configuration");
        c = NULL;
    } else if ((rv = nng_tls_config_own_cert(c, chain, key, NULL))) {
        e = nng_errf(msg, cap, rv, "loading the node certificate into nng");
    } else if ((rv = nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_NONE))) {
        /* Workers have no certificates; they present a join token instead. */
        e = nng_errf(msg, cap, rv, "TLS server auth mode");
    }
    goblin__free(chain);
    goblin__tls_wipe_free(key, strlen(key) + 1);
    if (e) {
        if (c) nng_tls_config_free(c);
        return e;
    }
    *out = c;
    return GOBLIN_OK;
}

static bool is_ip_literal(const char *host) {
    unsigned char buf[16];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

typedef struct tls_url {
    char *host, *port;
    int family;
} tls_url;

static void tls_url_free(tls_url *u) {
    goblin__free(u->host);
    goblin__free(u->port);
}

static goblin_err tls_url_parse(const char *url, tls_url *out, char *msg, size_t cap) {
    nng_url *u = NULL;
    memset(out, 0, sizeof *out);
    if (!url) return goblin__errf(msg, cap, GOBLIN_EINVAL, "no URL");
    int rv = nng_url_parse(&u, url);
    if (rv) return goblin__errf(msg, cap, GOBLIN_EINVAL, "bad URL %s: %s", url, nng_strerror(rv));
    goblin_err e = GOBLIN_OK;
    int family = AF_UNSPEC;
    if (strcmp(u->u_scheme, "tls+tcp") == 0) family = AF_UNSPEC;
    else if (strcmp(u->u_scheme, "tls+tcp4") == 0) family = AF_INET;
    else if (strcmp(u->u_scheme, "tls+tcp6") == 0) family = AF_INET6;
    else e = goblin__errf(msg, cap, GOBLIN_EINVAL, "%s is not a tls+tcp:// URL", url);
    if (!e && (!u->u_hostname || !*u->u_hostname || !u->u_port || !*u->u_port))
        e = goblin__errf(msg, cap, GOBLIN_EINVAL, "%s needs a host and a port", url);
    if (!e) {
        out->host = goblin__strdup(u->u_hostname);
        out->port = goblin__strdup(u->u_port);
        out->family = family;
        if (!out->host || !out->port) {
            tls_url_free(out);
            e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        }
    }
    nng_url_free(u);
    return e;
}

goblin_err goblin__tls_client_config_ca(const char *ca_file, const char *server_name,
                                        const char *url, nng_tls_config **out, char *msg,
                                        size_t cap) {
    if (!ca_file || !out) return goblin__errf(msg, cap, GOBLIN_EINVAL, "CA file is required");
    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    char *chain = NULL, *name = NULL;
    nng_tls_config *c = NULL;
    goblin_err e = goblin__tls_load_certs(ca_file, &crt, msg, cap);
    if (e) goto out;
    if ((e = goblin__tls_chain_to_pem(&crt, &chain, msg, cap))) goto out;
    bool oom = false;
    if (server_name) {
        name = goblin__strdup(server_name);
        oom = !name;
    } else if (!crt.next && goblin__tls_self_issued(&crt)) {
        name = goblin__tls_cert_name(&crt, &oom);
    } else if (url) {
        tls_url u;
        if (tls_url_parse(url, &u, NULL, 0) == GOBLIN_OK) {
            if (!is_ip_literal(u.host)) {
                name = u.host;
                u.host = NULL;
            }
            tls_url_free(&u);
        }
    }
    if (oom) {
        e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    if (!name) {
        e = goblin__errf(msg, cap, GOBLIN_EINVAL,
                         "cannot tell which name the node's certificate must carry (CA %s, URL "
                         "%s): give a server name",
                         ca_file, url ? url : "none");
        goto out;
    }
    int rv = nng_tls_config_alloc(&c, NNG_TLS_MODE_CLIENT);
    if (rv) {
        c = NULL;
        e = nng_errf(msg, cap, rv, "TLS client configuration");
    } else if ((rv = nng_tls_config_ca_chain(c, chain, NULL))) {
        e = nng_errf(msg, cap, rv, "loading the CA certificates into nng");
    } else if ((rv = nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_REQUIRED))) {
        e = nng_errf(msg, cap, rv, "TLS client auth mode");
    } else if ((rv = nng_tls_config_server_name(c, name))) {
        e = nng_errf(msg, cap, rv, "TLS server name");
    }
out:
    goblin__free(name);
    goblin__free(chain);
    mbedtls_x509_crt_free(&crt);
    if (e) {
        if (c) nng_tls_config_free(c);
        return e;
    }
    *out = c;
    return GOBLIN_OK;
}

/* -- the fingerprint probe: one unverified handshake over a plain socket -- */

typedef struct probe_io {
    int fd;
    int64_t deadline;
} probe_io;

/* Wait for @p events until the deadline: 1 ready, 0 timed out, -1 error. */
static int probe_wait(const probe_io *io, short events) {
    for (;;) {
        int64_t left = io->deadline - goblin__now_ms();
        if (left <= 0) return 0;
        struct pollfd pfd = {.fd = io->fd, .events = events};
        int n = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n < 0 && errno == EINTR) continue;
        return n < 0 ? -1 : n > 0;
    }
}

static int probe_send(void *ctx, const unsigned char *buf, size_t len) {
    probe_io *io = ctx;
    if (len > INT_MAX) len = INT_MAX;
    for (;;) {
        ssize_t n = send(io->fd, buf, len, MSG_NOSIGNAL);
        if (n >= 0) return (int)n;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return MBEDTLS_ERR_NET_SEND_FAILED;
        int w = probe_wait(io, POLLOUT);
        if (w == 0) return MBEDTLS_ERR_SSL_TIMEOUT;
        if (w < 0) return MBEDTLS_ERR_NET_SEND_FAILED;
    }
}

static int probe_recv(void *ctx, unsigned char *buf, size_t len) {
    probe_io *io = ctx;
    if (len > INT_MAX) len = INT_MAX;
    for (;;) {
        ssize_t n = recv(io->fd, buf, len, 0);
        if (n >= 0) return (int)n; /* 0: the peer closed; mbedTLS reports EOF */
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return MBEDTLS_ERR_NET_RECV_FAILED;
        int w = probe_wait(io, POLLIN);
        if (w == 0) return MBEDTLS_ERR_SSL_TIMEOUT;
        if (w < 0) return MBEDTLS_ERR_NET_RECV_FAILED;
    }
}

/* Non-blocking TCP connect to the first address of host:port that answers. */
static goblin_err probe_connect(const tls_url *u, const char *url, int64_t deadline, int *fd_out,
                                char *msg, size_t cap) {
    struct addrinfo hints = {.ai_family = u->family, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(u->host, u->port, &hints, &res);
    if (rc)
        return goblin__errf(msg, cap, GOBLIN_EIO, "cannot resolve %s: %s", url, gai_strerror(rc));
    int last = ECONNREFUSED;
    bool timed_out = false;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            *fd_out = fd;
            freeaddrinfo(res);
            return GOBLIN_OK;
        }
        if (errno == EINPROGRESS) {
            probe_io io = {fd, deadline};
            int w = probe_wait(&io, POLLOUT);
            int err = 0;
            socklen_t elen = sizeof err;
            if (w > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0) {
                *fd_out = fd;
                freeaddrinfo(res);
                return GOBLIN_OK;
            }
            if (w == 0) timed_out = true;
            last = w > 0 ? err : errno;
        } else {
            last = errno;
        }
        close(fd);
        if (timed_out) break;
    }
    freeaddrinfo(res);
    if (timed_out)
        return goblin__errf(msg, cap, GOBLIN_ETIMEDOUT, "connecting to %s timed out", url);
    return goblin__errf(msg, cap, last == ECONNREFUSED ? GOBLIN_ECONNREFUSED : GOBLIN_EIO,
                        "cannot connect to %s: %s", url, strerror(last));
}

goblin_err goblin__tls_fetch_peer_cert(const char *url, int timeout_ms, uint8_t **der_out,
                                       size_t *der_len, char *msg, size_t cap) {
    if (!url || !der_out || !der_len)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "URL and outputs are required");
    tls_url u;
    goblin_err e = tls_url_parse(url, &u, msg, cap);
    if (e) return e;
    int64_t deadline = goblin__now_ms() + (timeout_ms > 0 ? timeout_ms : GOBLIN__TLS_PROBE_TIMEOUT_MS);
    int fd = -1;
    if ((e = probe_connect(&u, url, deadline, &fd, msg, cap))) {
        tls_url_free(&u);
        return e;
    }
    tls_url_free(&u);

    mbedtls_ssl_context ssl;
    mbedtls_ssl_config conf;
    goblin__tls_rng r;
    mbedtls_ssl_init(&ssl);
    mbedtls_ssl_config_init(&conf);
    probe_io io = {fd, deadline};
    int rc = goblin__tls_rng_init(&r);
    if (rc) {
        e = goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "seeding the random generator");
        goto out;
    }
    if ((rc = mbedtls_ssl_config_defaults(&conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                          MBEDTLS_SSL_PRESET_DEFAULT))) {
        e = goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "TLS configuration");
        goto out;
    }
    /* No verification here on purpose: this handshake only reads the certificate; the
     * caller compares its fingerprint with the pin and the real connection verifies
     * against exactly that certificate. */
    mbedtls_ssl_conf_authmode(&conf, MBEDTLS_SSL_VERIFY_NONE);
    mbedtls_ssl_conf_rng(&conf, mbedtls_ctr_drbg_random, &r.drbg);
    if ((rc = mbedtls_ssl_setup(&ssl, &conf))) {
        e = goblin__tls_mbed_errf(msg, cap, GOBLIN_ECRYPTO, rc, "TLS setup");
        goto out;
    }
    mbedtls_ssl_set_bio(&ssl, &io, probe_send, probe_recv, NULL);
    while ((rc = mbedtls_ssl_handshake(&ssl)) != 0) {
        if (rc == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE) continue;
        char what[160 + 2 * 256];
        /* A record that is not TLS at all: most often a plain-text listener. */
        if (rc == MBEDTLS_ERR_SSL_INVALID_RECORD && strncmp(url, "tls+", 4) == 0)
            snprintf(what, sizeof what, "TLS handshake with %s (what answers there does not "
                     "speak TLS: if the node listens in plain text, connect to %s)", url, url + 4);
        else
            snprintf(what, sizeof what, "TLS handshake with %s", url);
        e = goblin__tls_mbed_errf(msg, cap,
                                  rc == MBEDTLS_ERR_SSL_TIMEOUT ? GOBLIN_ETIMEDOUT : GOBLIN_ECRYPTO,
                                  rc, what);
        goto out;
    }
    const mbedtls_x509_crt *peer = mbedtls_ssl_get_peer_cert(&ssl);
    if (!peer || !peer->raw.len) {
        e = goblin__errf(msg, cap, GOBLIN_EAUTH, "%s presented no certificate", url);
        goto out;
    }
    uint8_t *der = goblin__memdup(peer->raw.p, peer->raw.len);
    if (!der) {
        e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    *der_out = der;
    *der_len = peer->raw.len;
    (void)mbedtls_ssl_close_notify(&ssl);
out:
    mbedtls_ssl_free(&ssl);
    mbedtls_ssl_config_free(&conf);
    goblin__tls_rng_free(&r);
    close(fd);
    return e;
}

goblin_err goblin__tls_client_config_pinned_der(const uint8_t *der, size_t der_len,
                                                const char *fingerprint,
                                                nng_tls_config **out, char *msg, size_t cap) {
    if (!der || !der_len || !fingerprint || !out)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "certificate and fingerprint are required");
    char want[GOBLIN_TLS_FINGERPRINT_SIZE], got[GOBLIN_TLS_FINGERPRINT_SIZE];
    if (goblin_tls_fingerprint_normalize(fingerprint, want) != GOBLIN_OK)
        return goblin__errf(msg, cap, GOBLIN_EINVAL,
                            "pinned fingerprint is not a SHA-256 in hex (64 digits, ':' allowed)");
    uint8_t fp[32];
    goblin_err e = goblin__tls_fingerprint_der(der, der_len, fp, msg, cap);
    if (e) return e;
    goblin__tls_to_hex(fp, 32, got);
    /* Both values are public: no need for a constant-time comparison. */
    if (strcmp(want, got) != 0)
        return goblin__errf(msg, cap, GOBLIN_EAUTH,
                            "certificate fingerprint mismatch: pinned %s, node presented %s", want,
                            got);

    mbedtls_x509_crt crt;
    mbedtls_x509_crt_init(&crt);
    char *pem = NULL, *name = NULL;
    size_t pem_len;
    nng_tls_config *c = NULL;
    bool oom = false;
    int rc = mbedtls_x509_crt_parse_der(&crt, der, der_len);
    if (rc) {
        e = goblin__tls_mbed_errf(msg, cap, GOBLIN_EFORMAT, rc, "the node's certificate");
        goto out;
    }
    if ((e = goblin__tls_der_to_pem(der, der_len, &pem, &pem_len, msg, cap))) goto out;
    name = goblin__tls_cert_name(&crt, &oom);
    if (oom) {
        e = goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        goto out;
    }
    int rv = nng_tls_config_alloc(&c, NNG_TLS_MODE_CLIENT);
    if (rv) {
        c = NULL;
        e = nng_errf(msg, cap, rv, "TLS client configuration");
    } else if ((rv = nng_tls_config_ca_chain(c, pem, NULL))) {
        e = nng_errf(msg, cap, rv, "loading the pinned certificate into nng");
    } else if ((rv = nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_REQUIRED))) {
        e = nng_errf(msg, cap, rv, "TLS client auth mode");
    } else if (name && (rv = nng_tls_config_server_name(c, name))) {
        /* Without a name the trust anchor alone still pins the node's key. */
        e = nng_errf(msg, cap, rv, "TLS server name");
    }
out:
    goblin__free(name);
    goblin__free(pem);
    mbedtls_x509_crt_free(&crt);
    if (e) {
        if (c) nng_tls_config_free(c);
        return e;
    }
    *out = c;
    return GOBLIN_OK;
}

goblin_err goblin__tls_client_config_pinned(const char *url, const char *fingerprint,
                                            int timeout_ms, nng_tls_config **out, char *msg,
                                            size_t cap) {
    if (!url || !fingerprint || !out)
        return goblin__errf(msg, cap, GOBLIN_EINVAL, "URL and fingerprint are required");
    char norm[GOBLIN_TLS_FINGERPRINT_SIZE];
    if (goblin_tls_fingerprint_normalize(fingerprint, norm) != GOBLIN_OK)
        return goblin__errf(msg, cap, GOBLIN_EINVAL,
                            "pinned fingerprint is not a SHA-256 in hex (64 digits, ':' allowed)");
    uint8_t *der = NULL;
    size_t len = 0;
    goblin_err e = goblin__tls_fetch_peer_cert(url, timeout_ms, &der, &len, msg, cap);
    if (e) return e;
    char inner[512];
    e = goblin__tls_client_config_pinned_der(der, len, norm, out, inner, sizeof inner);
    goblin__free(der);
    if (e) return goblin__errf(msg, cap, e, "%s: %s", url, inner);
    return GOBLIN_OK;
}

goblin_err goblin__tls_dialer_setup(nng_dialer d, const char *url,
                                    const goblin__tls_client_opts *o, char *msg, size_t cap) {
    if (!url || !o) return goblin__errf(msg, cap, GOBLIN_EINVAL, "URL and options are required");
    if (!o->ca_file == !o->fingerprint)
        return goblin__errf(msg, cap, GOBLIN_EINVAL,
                            "TLS to %s needs exactly one of a CA file and a pinned fingerprint",
                            url);
    nng_tls_config *c = NULL;
    goblin_err e = o->fingerprint
                       ? goblin__tls_client_config_pinned(url, o->fingerprint, o->timeout_ms, &c,
                                                          msg, cap)
                       : goblin__tls_client_config_ca(o->ca_file, o->server_name, url, &c, msg,
                                                      cap);
    if (e) return e;
    int rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, c);
    nng_tls_config_free(c); /* the dialer holds its own reference */
    return rv ? nng_errf(msg, cap, rv, "setting the TLS configuration on the dialer") : GOBLIN_OK;
}

goblin_err goblin__tls_listener_setup(nng_listener l, const char *cert_file,
                                      const char *key_file, char *msg, size_t cap) {
    nng_tls_config *c = NULL;
    goblin_err e = goblin__tls_server_config(cert_file, key_file, &c, msg, cap);
    if (e) return e;
    int rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, c);
    nng_tls_config_free(c);
    return rv ? nng_errf(msg, cap, rv, "setting the TLS configuration on the listener")
              : GOBLIN_OK;
}
