/* libgoblin/hub/web_impl.h - one HTTP request and its response, as web.c hands them
 * to the pages (internal to hub/). */
#ifndef GOBLIN__HUB_WEB_IMPL_H
#define GOBLIN__HUB_WEB_IMPL_H

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <stdatomic.h>

#include "form.h"
#include "hub_impl.h"
#include "page.h"

/* Requests handled at once; more are answered 503 at once. */
#define GOBLIN__HUB_WEB_INFLIGHT_MAX 64

/* What the hub counts for /metrics. */
typedef struct goblin__hub_counters {
    _Atomic uint64_t requests, refused_csrf, refused_input, refused_busy, refused_auth, limited;
    _Atomic uint64_t signins_started, signins, requests_filed, keys_created, keys_revoked;
    _Atomic uint64_t workers_linked, workers_unlinked;
} goblin__hub_counters;

struct goblin__hub_web {
    nng_http_server *srv;
    nng_http_handler *handler;
    int port;
    _Atomic int inflight;
    goblin__hub_counters n;
};

typedef struct goblin__hub_req {
    goblin_hub *hub;
    goblin__hub_counters *n;
    const char *method;
    char path[256];
    goblin__hub_form query, form;
    bool post;
    bool json;                     /* Accept: application/json, or ?format=json */
    char cookie[GOBLIN_HUB_TOKEN_SIZE]; /* the session cookie, or the pre-session one */
    bool has_session_cookie;
    bool signed_in, admin;
    goblin_hub_account account;
    char client[72];
    int64_t now;
} goblin__hub_req;

typedef struct goblin__hub_res {
    int status;
    const char *type; /* Content-Type */
    goblin__hub_page body;
    char set_cookie[256];
    char location[600];
} goblin__hub_res;

/* Route @p q to its page (pages.c). */
void goblin__hub_route(goblin__hub_req *q, goblin__hub_res *r);
/* The account page's "Your workers" section of signed-in @p q (workers_page.c): HTML,
 * or JSON members (each starting with a comma) inside the account's object; @p csrf the
 * form token of the request's cookie. The store's error on failure. */
goblin_err goblin__hub_workers_section(goblin__hub_req *q, goblin__hub_res *r, const char *csrf);
/* Set the pre-session cookie on @p r and in @p q (web.c). */
bool goblin__hub_new_pre_cookie(goblin__hub_req *q, goblin__hub_res *r);

#endif
