/* libgoblin/hub/web.c - the hub's HTTPS server on nng's HTTP server.
 *
 * One handler takes every path and method, bounds what it accepts (the body: nng reads
 * up to 4 x max_body_bytes and closes on more, we answer 413 past max_body_bytes, so a
 * body a little too large gets a clean reply; the path, the fields, the requests in
 * flight by us), reads the
 * cookies, and hands a checked request to the pages (pages.c). Pages run one at a time
 * under the server's lock: a hub's traffic is people signing in, and one lock keeps
 * the hub's error text and the store's multi-step checks simple.
 *
 * nng 1.5.2's HTTP server does not tell a handler the peer's address, so the client
 * address the rate limits use comes from X-Forwarded-For when the operator says a
 * reverse proxy sets it (trust_forwarded_for), and is "direct" otherwise: then the
 * per-client limits count every direct client together (docs/hub.md). */
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <nng/supplemental/util/platform.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "net/tls_impl.h"
#include "web_impl.h"

typedef struct web_state {
    struct goblin__hub_web w;
    pthread_mutex_t mu;
    goblin_hub *hub;
} web_state;

bool goblin__hub_new_pre_cookie(goblin__hub_req *q, goblin__hub_res *r) {
    if (goblin__hub_random_hex(q->cookie, 32, NULL, 0)) return false;
    snprintf(r->set_cookie, sizeof r->set_cookie, "goblin_pre=%s; Path=/; HttpOnly; Secure; SameSite=Strict",
             q->cookie);
    return true;
}

static bool hex64(const char *s) {
    if (strlen(s) != 64) return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

static void read_cookies(goblin__hub_req *q, nng_http_req *req) {
    const char *h = nng_http_req_get_header(req, "Cookie");
    char v[GOBLIN_HUB_TOKEN_SIZE];
    if (goblin__hub_cookie(h, "goblin_session", v, sizeof v) && hex64(v) &&
        goblin_hub_session_account(q->hub, v, q->now, &q->account) == GOBLIN_OK) {
        memcpy(q->cookie, v, sizeof v);
        q->has_session_cookie = true;
        q->signed_in = true;
        q->admin = goblin_hub_is_admin(q->hub, q->account.email);
        return;
    }
    if (goblin__hub_cookie(h, "goblin_pre", v, sizeof v) && hex64(v)) memcpy(q->cookie, v, sizeof v);
}

static void read_client(goblin__hub_req *q, nng_http_req *req) {
    snprintf(q->client, sizeof q->client, "direct");
    const char *x = nng_http_req_get_header(req, "X-Forwarded-For");
    if (!goblin_hub_get_config(q->hub)->trust_forwarded_for || !x) return;
    /* The proxy appends the address it saw: the last entry is the one it vouches for. */
    const char *last = strrchr(x, ',');
    last = last ? last + 1 : x;
    while (*last == ' ') last++;
    size_t n = strcspn(last, " ");
    if (n && n < 64) snprintf(q->client, sizeof q->client, "%.*s", (int)n, last);
}

/* A response with the given status and text, for what is refused before the pages. */
static void plain(goblin__hub_res *r, int status, const char *text) {
    r->status = status;
    r->type = "text/plain; charset=utf-8";
    goblin__hub_page_raw(&r->body, text);
}

static nng_http_res *make_res(goblin__hub_res *r, bool head) {
    nng_http_res *res = NULL;
    if (r->body.failed) {
        goblin__hub_page_free(&r->body);
        r->body.failed = false;
        r->set_cookie[0] = r->location[0] = 0;
        plain(r, 503, "the hub is short of memory; try again\n");
    }
    if (nng_http_res_alloc(&res)) return NULL;
    int rv = nng_http_res_set_status(res, (uint16_t)r->status);
    static const char *const fixed[][2] = {
        {"Cache-Control", "no-store"},
        {"X-Content-Type-Options", "nosniff"},
        {"Referrer-Policy", "no-referrer"},
        {"X-Frame-Options", "DENY"},
        {"Strict-Transport-Security", "max-age=31536000"},
        {"Content-Security-Policy",
         "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"},
    };
    for (size_t i = 0; !rv && i < sizeof fixed / sizeof fixed[0]; i++)
        rv = nng_http_res_set_header(res, fixed[i][0], fixed[i][1]);
    if (!rv) rv = nng_http_res_set_header(res, "Content-Type", r->type ? r->type : "text/plain");
    if (!rv && r->set_cookie[0]) rv = nng_http_res_set_header(res, "Set-Cookie", r->set_cookie);
    if (!rv && r->location[0]) rv = nng_http_res_set_header(res, "Location", r->location);
    if (!rv && r->body.n && !head) rv = nng_http_res_copy_data(res, r->body.p, r->body.n);
    if (rv) {
        nng_http_res_free(res);
        return NULL;
    }
    return res;
}

static bool wants_json(goblin__hub_req *q, nng_http_req *req) {
    const char *f = goblin__hub_form_get(&q->query, "format");
    if (f && !strcmp(f, "json")) return true;
    const char *a = nng_http_req_get_header(req, "Accept");
    return a && strstr(a, "application/json");
}

static void serve(web_state *ws, nng_http_req *req, goblin__hub_req *q, goblin__hub_res *r) {
    const char *uri = nng_http_req_get_uri(req);
    const char *m = nng_http_req_get_method(req);
    if (strcmp(m, "GET") && strcmp(m, "HEAD") && strcmp(m, "POST")) return plain(r, 405, "GET or POST only\n");
    q->post = !strcmp(m, "POST");
    size_t plen = strcspn(uri, "?");
    if (plen == 0 || plen >= sizeof q->path) return plain(r, 414, "address too long\n");
    memcpy(q->path, uri, plen);
    q->path[plen] = 0;
    const char *why = NULL;
    if (uri[plen] == '?' && !goblin__hub_form_parse(uri + plen + 1, strlen(uri + plen + 1), &q->query, &why)) {
        ws->w.n.refused_input++;
        return plain(r, 400, why);
    }
    q->json = wants_json(q, req);
    if (q->post) {
        const char *site = nng_http_req_get_header(req, "Sec-Fetch-Site");
        if (site && !strcmp(site, "cross-site")) {
            ws->w.n.refused_csrf++;
            return plain(r, 403, "forms from other sites are refused\n");
        }
        const char *ct = nng_http_req_get_header(req, "Content-Type");
        if (!ct || strncmp(ct, "application/x-www-form-urlencoded", 33)) {
            ws->w.n.refused_input++;
            return plain(r, 415, "forms are application/x-www-form-urlencoded\n");
        }
        void *body;
        size_t n;
        nng_http_req_get_data(req, &body, &n);
        if (n > goblin_hub_get_config(ws->hub)->max_body_bytes) {
            ws->w.n.refused_input++;
            return plain(r, 413, "form too large\n");
        }
        if (!goblin__hub_form_parse(body, n, &q->form, &why)) {
            ws->w.n.refused_input++;
            return plain(r, 400, why);
        }
    }
    pthread_mutex_lock(&ws->mu);
    read_cookies(q, req);
    read_client(q, req);
    goblin__hub_route(q, r);
    pthread_mutex_unlock(&ws->mu);
}

static void handle(nng_aio *aio) {
    nng_http_req *req = nng_aio_get_input(aio, 0);
    nng_http_handler *hd = nng_aio_get_input(aio, 1);
    web_state *ws = nng_http_handler_get_data(hd);
    ws->w.n.requests++;
    goblin__hub_req q;
    goblin__hub_res r;
    memset(&q, 0, sizeof q);
    memset(&r, 0, sizeof r);
    q.hub = ws->hub;
    q.n = &ws->w.n;
    q.now = (int64_t)time(NULL);
    if (++ws->w.inflight > GOBLIN__HUB_WEB_INFLIGHT_MAX) {
        ws->w.n.refused_busy++;
        plain(&r, 503, "the hub is busy; try again in a moment\n");
    } else {
        serve(ws, req, &q, &r);
    }
    nng_http_res *res = make_res(&r, !strcmp(nng_http_req_get_method(req), "HEAD"));
    goblin__hub_form_free(&q.query);
    goblin__hub_form_free(&q.form);
    goblin__hub_page_free(&r.body);
    memset(q.cookie, 0, sizeof q.cookie);
    --ws->w.inflight;
    if (!res) {
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static goblin_err nng_fail(goblin_hub *h, int rv, const char *what) {
    return goblin__errf(h->error, sizeof h->error, GOBLIN_EIO, "hub web server: %s: %s", what, nng_strerror(rv));
}

goblin_err goblin_hub_serve(goblin_hub *h) {
    if (!h) return GOBLIN_EINVAL;
    h->error[0] = 0;
    if (h->web) return goblin__errf(h->error, sizeof h->error, GOBLIN_ESTATE, "already serving");
    web_state *ws = goblin__calloc(1, sizeof *ws);
    if (!ws) return goblin__errf(h->error, sizeof h->error, GOBLIN_ENOMEM, "out of memory");
    ws->hub = h;
    pthread_mutex_init(&ws->mu, NULL);
    nng_url *url = NULL;
    nng_tls_config *tls = NULL;
    goblin_err e = GOBLIN_OK;
    int rv;
    char cert[4200], key[4200];
    snprintf(cert, sizeof cert, "%s/%s", h->dir, GOBLIN_TLS_CERT_FILE);
    snprintf(key, sizeof key, "%s/%s", h->dir, GOBLIN_TLS_KEY_FILE);
    if ((rv = nng_url_parse(&url, h->cfg.listen))) {
        e = goblin__errf(h->error, sizeof h->error, GOBLIN_EINVAL, "listen '%s': %s", h->cfg.listen, nng_strerror(rv));
        goto fail;
    }
    if ((e = goblin__tls_server_config(cert, key, &tls, h->error, sizeof h->error))) goto fail;
    if ((rv = nng_http_server_hold(&ws->w.srv, url))) {
        e = nng_fail(h, rv, "hold");
        goto fail;
    }
    if ((rv = nng_http_server_set_tls(ws->w.srv, tls))) {
        e = nng_fail(h, rv, "TLS");
        goto fail;
    }
    if ((rv = nng_http_handler_alloc(&ws->w.handler, "/", handle)) ||
        (rv = nng_http_handler_set_method(ws->w.handler, NULL)) ||
        (rv = nng_http_handler_set_tree(ws->w.handler)) ||
        (rv = nng_http_handler_collect_body(ws->w.handler, true, 4 * h->cfg.max_body_bytes)) ||
        (rv = nng_http_handler_set_data(ws->w.handler, ws, NULL))) {
        e = nng_fail(h, rv, "handler");
        goto fail;
    }
    if ((rv = nng_http_server_add_handler(ws->w.srv, ws->w.handler))) {
        nng_http_handler_free(ws->w.handler);
        e = nng_fail(h, rv, "add handler");
        goto fail;
    }
    ws->w.handler = NULL; /* the server's now */
    if ((rv = nng_http_server_start(ws->w.srv))) {
        e = nng_fail(h, rv, h->cfg.listen);
        goto fail;
    }
    nng_sockaddr sa;
    if ((rv = nng_http_server_get_addr(ws->w.srv, &sa))) {
        nng_http_server_stop(ws->w.srv);
        e = nng_fail(h, rv, "address");
        goto fail;
    }
    ws->w.port = sa.s_family == NNG_AF_INET6 ? ntohs(sa.s_in6.sa_port) : ntohs(sa.s_in.sa_port);
    nng_tls_config_free(tls);
    nng_url_free(url);
    h->web = &ws->w;
    return GOBLIN_OK;
fail:
    if (ws->w.handler) nng_http_handler_free(ws->w.handler);
    if (ws->w.srv) nng_http_server_release(ws->w.srv);
    if (tls) nng_tls_config_free(tls);
    if (url) nng_url_free(url);
    pthread_mutex_destroy(&ws->mu);
    goblin__free(ws);
    return e;
}

goblin_err goblin_hub_port(const goblin_hub *h, int *out) {
    if (!h || !out || !h->web) return GOBLIN_EINVAL;
    *out = h->web->port;
    return GOBLIN_OK;
}

void goblin__hub_web_stop(goblin_hub *h) {
    if (!h->web) return;
    web_state *ws = (web_state *)h->web;
    nng_http_server_stop(ws->w.srv);
    /* A handler already running finishes before the state it uses goes. */
    while (ws->w.inflight > 0) nng_msleep(5);
    nng_http_server_release(ws->w.srv);
    pthread_mutex_destroy(&ws->mu);
    goblin__free(ws);
    h->web = NULL;
}
