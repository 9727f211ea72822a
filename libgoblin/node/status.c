/* libgoblin/node/status.c - the node's status page: an HTTP server (nng's, as the hub's
 * web.c) serving /, /status.json and /metrics (status_page.c writes them).
 *
 * Where: plain http only on a numeric loopback address (127.0.0.0/8, [::1]); anywhere
 * else https with the node's certificate and key. What: GET and HEAD of three paths;
 * any other method 405, any other path 404, a body 400 (nng reads at most
 * STATUS_BODY_MAX bytes of one and answers 400 past that itself),
 * a path over 255 bytes 414. nng reads a request's header line by line into a buffer of
 * its own and closes a connection whose line does not fit. At most
 * STATUS_INFLIGHT_MAX requests are answered at once (more get 503), and one page is
 * rendered at a time, under the server's lock: a page holds node->mu only while it
 * copies the counters, the worker and job rows (status_page.c). No cookie is ever set. */
#include "node_impl.h"

#include <arpa/inet.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <nng/supplemental/util/platform.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/page.h"

#define STATUS_INFLIGHT_MAX 16
/* Bytes of a request body nng reads (and answers 400 past) so that a form posted to the
 * page gets its 405; a body is refused in any case. */
#define STATUS_BODY_MAX 4096

struct goblin__node_status {
    goblin_node *node;
    nng_http_server *srv;
    int port;
    bool tls;
    _Atomic int inflight;
    pthread_mutex_t mu; /* one render at a time; the rate window */
    goblin__node_rate rate;
};

typedef struct res {
    int status;
    const char *type;
    goblin__page body;
} res;

static void plain(res *r, int status, const char *text) {
    goblin__page_free(&r->body);
    r->body.failed = false;
    r->status = status;
    r->type = "text/plain; charset=utf-8";
    goblin__page_raw(&r->body, text);
}

static void serve(struct goblin__node_status *s, nng_http_req *req, res *r) {
    const char *m = nng_http_req_get_method(req);
    if (strcmp(m, "GET") && strcmp(m, "HEAD")) return plain(r, 405, "GET or HEAD only\n");
    void *data;
    size_t len;
    nng_http_req_get_data(req, &data, &len);
    if (len) return plain(r, 400, "a request to the status page has no body\n");
    const char *uri = nng_http_req_get_uri(req);
    size_t plen = strcspn(uri, "?#");
    if (plen >= 256) return plain(r, 414, "address too long\n");
    int which;
    if (plen == 1 && uri[0] == '/') which = GOBLIN__STATUS_HTML;
    else if (plen == 12 && !strncmp(uri, "/status.json", 12)) which = GOBLIN__STATUS_JSON;
    else if (plen == 8 && !strncmp(uri, "/metrics", 8)) which = GOBLIN__STATUS_METRICS;
    else return plain(r, 404, "no such page: try /, /status.json or /metrics\n");
    r->status = 200;
    r->type = which == GOBLIN__STATUS_HTML   ? "text/html; charset=utf-8"
            : which == GOBLIN__STATUS_JSON ? "application/json"
                                           : "text/plain; version=0.0.4; charset=utf-8";
    pthread_mutex_lock(&s->mu);
    goblin__node_status_render(s->node, which, &r->body, &s->rate);
    pthread_mutex_unlock(&s->mu);
    if (r->body.failed) plain(r, 503, "the node is short of memory; try again\n");
}

/* HEAD: nng sends the headers of GET, its Content-Length included, without the body. */
static nng_http_res *make_res(const struct goblin__node_status *s, res *r) {
    nng_http_res *out = NULL;
    if (nng_http_res_alloc(&out)) return NULL;
    static const char *const fixed[][2] = {
        {"Cache-Control", "no-store"},
        {"X-Content-Type-Options", "nosniff"},
        {"Referrer-Policy", "no-referrer"},
        {"X-Frame-Options", "DENY"},
        {"Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; "
                                    "base-uri 'none'; form-action 'none'"},
    };
    int rv = nng_http_res_set_status(out, (uint16_t)r->status);
    for (size_t i = 0; !rv && i < sizeof fixed / sizeof fixed[0]; i++)
        rv = nng_http_res_set_header(out, fixed[i][0], fixed[i][1]);
    if (!rv && s->tls) rv = nng_http_res_set_header(out, "Strict-Transport-Security", "max-age=31536000");
    if (!rv && r->status == 405) rv = nng_http_res_set_header(out, "Allow", "GET, HEAD");
    if (!rv) rv = nng_http_res_set_header(out, "Content-Type", r->type);
    if (!rv && r->body.n) rv = nng_http_res_copy_data(out, r->body.p, r->body.n);
    if (rv) {
        nng_http_res_free(out);
        return NULL;
    }
    return out;
}

static void handle(nng_aio *aio) {
    nng_http_req *req = nng_aio_get_input(aio, 0);
    nng_http_handler *hd = nng_aio_get_input(aio, 1);
    struct goblin__node_status *s = nng_http_handler_get_data(hd);
    res r = {0};
    if (++s->inflight > STATUS_INFLIGHT_MAX) plain(&r, 503, "busy; try again in a moment\n");
    else serve(s, req, &r);
    nng_http_res *out = make_res(s, &r);
    goblin__page_free(&r.body);
    --s->inflight;
    if (!out) {
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    nng_aio_set_output(aio, 0, out);
    nng_aio_finish(aio, 0);
}

/* Is @p host a numeric loopback address (127.0.0.0/8 or ::1)? Names are not: a name
 * can resolve anywhere. */
static bool loopback(const char *host) {
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

static goblin_err refuse(goblin_node *n, goblin_err e, const char *url, const char *why) {
    goblin__node_log(n, GOBLIN_LOG_ERROR, "status page on %s refused: %s", url, why);
    return e;
}

goblin_err goblin_node_status_listen(goblin_node *n, const char *url) {
    if (!n || !url) return GOBLIN_EINVAL;
    if (!n->started) return refuse(n, GOBLIN_ESTATE, url, "the node is not started");
    if (n->status) return refuse(n, GOBLIN_ESTATE, url, "the node serves its status page already");
    nng_url *u = NULL;
    int rv = nng_url_parse(&u, url);
    if (rv) return refuse(n, GOBLIN_EINVAL, url, "not a URL");
    bool https = !strcmp(u->u_scheme, "https");
    goblin_err e = GOBLIN_OK;
    if (!https && strcmp(u->u_scheme, "http")) e = refuse(n, GOBLIN_EINVAL, url, "the address is http:// or https://");
    else if (u->u_path[0] && strcmp(u->u_path, "/")) e = refuse(n, GOBLIN_EINVAL, url, "the address takes no path");
    else if (!https && !loopback(u->u_hostname))
        e = refuse(n, GOBLIN_EINVAL, url,
                   "plain http is served only on a numeric loopback address (127.0.0.1, [::1]); "
                   "elsewhere use https:// with the node's certificate and key");
    else if (https && (!n->cert_file || !n->key_file))
        e = refuse(n, GOBLIN_EINVAL, url, "https needs the node's certificate and key (cert_file, key_file)");
    if (e) {
        nng_url_free(u);
        return e;
    }
    struct goblin__node_status *s = goblin__calloc(1, sizeof *s);
    if (!s) {
        nng_url_free(u);
        return GOBLIN_ENOMEM;
    }
    s->node = n;
    s->tls = https;
    pthread_mutex_init(&s->mu, NULL);
    nng_tls_config *tls = NULL;
    nng_http_handler *h = NULL;
    char msg[256];
    const char *what = "";
    if (https && (e = goblin__tls_server_config(n->cert_file, n->key_file, &tls, msg, sizeof msg))) {
        refuse(n, e, url, msg);
        goto fail;
    }
    if ((rv = nng_http_server_hold(&s->srv, u))) {
        what = "hold";
        goto nng_fail;
    }
    if (tls && (rv = nng_http_server_set_tls(s->srv, tls))) {
        what = "TLS";
        goto nng_fail;
    }
    if ((rv = nng_http_handler_alloc(&h, "/", handle)) || (rv = nng_http_handler_set_method(h, NULL)) ||
        (rv = nng_http_handler_set_tree(h)) || (rv = nng_http_handler_collect_body(h, true, STATUS_BODY_MAX)) ||
        (rv = nng_http_handler_set_data(h, s, NULL))) {
        what = "handler";
        goto nng_fail;
    }
    if ((rv = nng_http_server_add_handler(s->srv, h))) {
        what = "handler";
        goto nng_fail;
    }
    h = NULL; /* the server's now */
    if ((rv = nng_http_server_start(s->srv))) {
        what = "listen";
        goto nng_fail;
    }
    nng_sockaddr sa;
    if ((rv = nng_http_server_get_addr(s->srv, &sa))) {
        nng_http_server_stop(s->srv);
        what = "address";
        goto nng_fail;
    }
    s->port = sa.s_family == NNG_AF_INET6 ? ntohs(sa.s_in6.sa_port) : ntohs(sa.s_in.sa_port);
    if (tls) nng_tls_config_free(tls);
    nng_url_free(u);
    pthread_mutex_lock(&n->mu);
    n->status = s;
    pthread_mutex_unlock(&n->mu);
    goblin__node_log(n, GOBLIN_LOG_INFO, "status page on %s (port %d)", url, s->port);
    return GOBLIN_OK;
nng_fail:
    snprintf(msg, sizeof msg, "%s: %s", what, nng_strerror(rv));
    e = refuse(n, GOBLIN_EIO, url, msg);
fail:
    if (h) nng_http_handler_free(h);
    if (s->srv) nng_http_server_release(s->srv);
    if (tls) nng_tls_config_free(tls);
    nng_url_free(u);
    pthread_mutex_destroy(&s->mu);
    goblin__free(s);
    return e;
}

goblin_err goblin_node_status_port(goblin_node *n, int *out) {
    if (!n || !out) return GOBLIN_EINVAL;
    pthread_mutex_lock(&n->mu);
    goblin_err e = n->status ? GOBLIN_OK : GOBLIN_ESTATE;
    if (n->status) *out = n->status->port;
    pthread_mutex_unlock(&n->mu);
    return e;
}

void goblin__node_status_stop(goblin_node *n) {
    pthread_mutex_lock(&n->mu);
    struct goblin__node_status *s = n->status;
    n->status = NULL;
    pthread_mutex_unlock(&n->mu);
    if (!s) return;
    nng_http_server_stop(s->srv);
    /* A handler already running finishes before the state it uses goes. */
    while (s->inflight > 0) nng_msleep(5);
    nng_http_server_release(s->srv);
    pthread_mutex_destroy(&s->mu);
    goblin__free(s);
}
