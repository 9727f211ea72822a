/* libgoblin/hub/pages.c - the hub's pages: sign-in, code entry, access request,
 * account (node keys), admin, public status, each also as JSON; /metrics.
 *
 * The account page's "Your workers" section is workers_page.c; its forms are here.
 *
 * Every text that came from a person goes through goblin__hub_page_html or _json;
 * every form carries the token of the cookie it belongs to, and every POST is refused
 * without it (403) before anything is read from it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "web_impl.h"

#define B (&r->body)

static void html(goblin__hub_res *r) {
    r->status = 200;
    r->type = "text/html; charset=utf-8";
}

static void json(goblin__hub_res *r) {
    r->status = 200;
    r->type = "application/json";
}

static void begin(goblin__hub_req *q, goblin__hub_res *r, const char *title) {
    html(r);
    goblin__hub_page_begin(B, title, q->signed_in, q->admin);
}

/* A refusal: @p status with @p why, as a page or as {"error": why}. */
static void fail(goblin__hub_req *q, goblin__hub_res *r, int status, const char *why) {
    goblin__hub_page_free(B);
    if (q->json) {
        json(r);
        goblin__hub_page_raw(B, "{\"error\":");
        goblin__hub_page_json(B, why);
        goblin__hub_page_raw(B, "}\n");
    } else {
        begin(q, r, status == 403 ? "Refused" : status == 429 ? "Slow down" : "Something is wrong");
        goblin__hub_page_raw(B, "<p class=\"err\">");
        goblin__hub_page_html(B, why);
        goblin__hub_page_raw(B, "</p><p><a href=\"/account\">Back</a></p>");
        goblin__hub_page_end(B);
    }
    r->status = status;
}

/* The hub's error, refused with the status its kind calls for. */
static void fail_err(goblin__hub_req *q, goblin__hub_res *r, goblin_err e) {
    int st = e == GOBLIN_ELIMIT ? 429 : e == GOBLIN_EAUTH ? 403 : e == GOBLIN_EINVAL ? 400
           : e == GOBLIN_EBUSY || e == GOBLIN_ESTATE ? 409 : e == GOBLIN_ENOTFOUND ? 404 : 500;
    if (e == GOBLIN_ELIMIT) q->n->limited++;
    if (e == GOBLIN_EAUTH) q->n->refused_auth++;
    fail(q, r, st, st == 500 ? "the hub could not do that; its operator can read why in the log"
                             : goblin_hub_error(q->hub));
}

static void redirect(goblin__hub_res *r, const char *to) {
    r->status = 303;
    r->type = "text/plain; charset=utf-8";
    snprintf(r->location, sizeof r->location, "%s", to);
    goblin__hub_page_raw(B, "See Other\n");
}

/* The form token of this request's cookie, made now if there is no cookie yet. */
static bool csrf_field(goblin__hub_req *q, goblin__hub_res *r) {
    char t[GOBLIN_HUB_TOKEN_SIZE];
    if (!q->cookie[0] && !goblin__hub_new_pre_cookie(q, r)) return false;
    if (goblin_hub_csrf_token(q->hub, q->cookie, t)) return false;
    goblin__hub_page_rawf(B, "<input type=\"hidden\" name=\"csrf\" value=\"%s\">", t);
    return true;
}

static bool csrf_ok(goblin__hub_req *q, goblin__hub_res *r) {
    if (q->cookie[0] && goblin_hub_csrf_check(q->hub, q->cookie, goblin__hub_form_get(&q->form, "csrf")))
        return true;
    q->n->refused_csrf++;
    fail(q, r, 403, "this form has no valid token (it expired, or it came from another site); "
                    "reload the page and send it again");
    return false;
}

/* A required field of at most @p max bytes, or a 400. */
static const char *field(goblin__hub_req *q, goblin__hub_res *r, const char *name, size_t max) {
    const char *v = goblin__hub_form_get(&q->form, name);
    char why[160];
    if (!v || !*v) snprintf(why, sizeof why, "the field '%s' is required", name);
    else if (strlen(v) > max) snprintf(why, sizeof why, "the field '%s' is longer than %zu bytes", name, max);
    else return v;
    q->n->refused_input++;
    fail(q, r, 400, why);
    return NULL;
}

static bool need_signin(goblin__hub_req *q, goblin__hub_res *r) {
    if (q->signed_in) return true;
    if (q->json) fail(q, r, 401, "not signed in");
    else redirect(r, "/signin");
    return false;
}

/* ---- sign-in ---- */

static void code_form(goblin__hub_req *q, goblin__hub_res *r, const char *email) {
    begin(q, r, "Enter your code");
    goblin__hub_page_raw(B, "<p>We mailed a sign-in code and a link to <strong>");
    goblin__hub_page_html(B, email);
    goblin__hub_page_raw(B, "</strong>. Type the code here, or open the link.</p>"
                            "<form method=\"post\" action=\"/signin/code\">");
    csrf_field(q, r);
    goblin__hub_page_raw(B, "<input type=\"hidden\" name=\"email\" value=\"");
    goblin__hub_page_html(B, email);
    goblin__hub_page_raw(B, "\"><label for=\"code\">Code</label><input id=\"code\" name=\"code\" "
                            "inputmode=\"numeric\" autocomplete=\"one-time-code\" maxlength=\"8\" required autofocus>"
                            "<button type=\"submit\">Sign in</button></form>");
    goblin__hub_page_end(B);
}

static void signin_get(goblin__hub_req *q, goblin__hub_res *r) {
    if (q->json) {
        json(r);
        goblin__hub_page_raw(B, "{\"signed_in\":");
        goblin__hub_page_raw(B, q->signed_in ? "true" : "false");
        goblin__hub_page_raw(B, "}\n");
        return;
    }
    begin(q, r, "Sign in");
    goblin__hub_page_raw(B, "<p>Sign in with your email address: we mail you a code and a link.</p>"
                            "<form method=\"post\" action=\"/signin\">");
    csrf_field(q, r);
    goblin__hub_page_raw(B, "<label for=\"email\">Email address</label><input id=\"email\" name=\"email\" "
                            "type=\"email\" autocomplete=\"email\" maxlength=\"254\" required autofocus>"
                            "<button type=\"submit\">Mail me a code</button></form>");
    goblin__hub_page_end(B);
}

static void signin_post(goblin__hub_req *q, goblin__hub_res *r) {
    const char *email = field(q, r, "email", GOBLIN_HUB_EMAIL_MAX);
    if (!email) return;
    goblin_err e = goblin_hub_signin_start(q->hub, email, q->client, q->now);
    if (e) return fail_err(q, r, e);
    q->n->signins_started++;
    if (q->json) {
        json(r);
        goblin__hub_page_raw(B, "{\"mailed\":true}\n");
        return;
    }
    code_form(q, r, email);
}

static void signed_in(goblin__hub_req *q, goblin__hub_res *r, const char *cookie) {
    q->n->signins++;
    snprintf(r->set_cookie, sizeof r->set_cookie,
             "goblin_session=%s; Path=/; Max-Age=%u; HttpOnly; Secure; SameSite=Strict", cookie,
             (unsigned)goblin_hub_get_config(q->hub)->session_ttl_s);
    if (q->json) {
        json(r);
        goblin__hub_page_raw(B, "{\"signed_in\":true}\n");
    } else {
        redirect(r, "/account");
    }
}

static void code_post(goblin__hub_req *q, goblin__hub_res *r) {
    const char *email = field(q, r, "email", GOBLIN_HUB_EMAIL_MAX);
    const char *code = email ? field(q, r, "code", 64) : NULL;
    if (!code) return;
    char cookie[GOBLIN_HUB_TOKEN_SIZE];
    goblin_err e = goblin_hub_signin_finish(q->hub, email, code, false, q->client, q->now, cookie, NULL);
    if (e) return fail_err(q, r, e);
    signed_in(q, r, cookie);
}

/* The mailed link shows a button rather than signing in at once: a mail scanner that
 * fetches every link must not use the sign-in up. */
static void link_get(goblin__hub_req *q, goblin__hub_res *r) {
    const char *email = goblin__hub_form_get(&q->query, "email");
    const char *token = goblin__hub_form_get(&q->query, "token");
    if (!email || !token || strlen(email) > GOBLIN_HUB_EMAIL_MAX || strlen(token) > 64) {
        q->n->refused_input++;
        return fail(q, r, 400, "this sign-in link is incomplete; copy the whole link from the mail");
    }
    begin(q, r, "Sign in");
    goblin__hub_page_raw(B, "<form method=\"post\" action=\"/signin/link\">");
    csrf_field(q, r);
    goblin__hub_page_raw(B, "<input type=\"hidden\" name=\"email\" value=\"");
    goblin__hub_page_html(B, email);
    goblin__hub_page_raw(B, "\"><input type=\"hidden\" name=\"token\" value=\"");
    goblin__hub_page_html(B, token);
    goblin__hub_page_raw(B, "\"><p>Sign in as <strong>");
    goblin__hub_page_html(B, email);
    goblin__hub_page_raw(B, "</strong>?</p><button type=\"submit\">Sign in</button></form>");
    goblin__hub_page_end(B);
}

static void link_post(goblin__hub_req *q, goblin__hub_res *r) {
    const char *email = field(q, r, "email", GOBLIN_HUB_EMAIL_MAX);
    const char *token = email ? field(q, r, "token", 64) : NULL;
    if (!token) return;
    char cookie[GOBLIN_HUB_TOKEN_SIZE];
    goblin_err e = goblin_hub_signin_finish(q->hub, email, token, true, q->client, q->now, cookie, NULL);
    if (e) return fail_err(q, r, e);
    signed_in(q, r, cookie);
}

static void signout_post(goblin__hub_req *q, goblin__hub_res *r) {
    if (q->has_session_cookie) goblin_hub_session_end(q->hub, q->cookie);
    snprintf(r->set_cookie, sizeof r->set_cookie,
             "goblin_session=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Strict");
    redirect(r, "/signin");
}

/* ---- account ---- */

typedef struct walk {
    goblin__hub_req *q;
    goblin__hub_res *r;
    int n;
    bool pending, approved;
} walk;

#define when goblin__hub_page_when

static void request_json(goblin__hub_page *b, const goblin_hub_access_request *x) {
    goblin__hub_page_rawf(b, "{\"id\":%" PRId64 ",\"status\":\"%s\",\"email\":", x->id,
                          goblin_hub_request_status_name(x->status));
    goblin__hub_page_json(b, x->email);
    goblin__hub_page_raw(b, ",\"name\":");
    goblin__hub_page_json(b, x->name);
    goblin__hub_page_raw(b, ",\"institution\":");
    goblin__hub_page_json(b, x->institution);
    goblin__hub_page_raw(b, ",\"purpose\":");
    goblin__hub_page_json(b, x->purpose);
    goblin__hub_page_raw(b, ",\"expected_use\":");
    goblin__hub_page_json(b, x->expected_use);
    goblin__hub_page_raw(b, ",\"note\":");
    goblin__hub_page_json(b, x->note);
    goblin__hub_page_rawf(b, ",\"created\":%" PRId64 ",\"decided\":%" PRId64 "}", x->created, x->decided);
}

static void request_rows(goblin__hub_page *b, const goblin_hub_access_request *x) {
    static const char *const labels[] = {"Name", "Institution", "Purpose", "Expected use", "Note"};
    const char *const vals[] = {x->name, x->institution, x->purpose, x->expected_use, x->note};
    for (int i = 0; i < 5; i++) {
        if (i == 4 && !x->note[0]) continue;
        goblin__hub_page_rawf(b, "<tr><th>%s</th><td>", labels[i]);
        goblin__hub_page_html(b, vals[i]);
        goblin__hub_page_raw(b, "</td></tr>");
    }
}

static goblin_err my_request(void *ctx, const goblin_hub_access_request *x) {
    walk *w = ctx;
    goblin__hub_page *b = &w->r->body;
    w->pending |= x->status == GOBLIN_HUB_REQUEST_PENDING;
    w->approved |= x->status == GOBLIN_HUB_REQUEST_APPROVED;
    if (w->q->json) {
        goblin__hub_page_raw(b, w->n++ ? "," : "");
        request_json(b, x);
    } else {
        w->n++;
        goblin__hub_page_rawf(b, "<h3>Request %" PRId64 ": %s</h3><table>", x->id,
                              goblin_hub_request_status_name(x->status));
        request_rows(b, x);
        goblin__hub_page_raw(b, "</table>");
    }
    return GOBLIN_OK;
}

static goblin_err my_key(void *ctx, const goblin_hub_node_key *k) {
    walk *w = ctx;
    goblin__hub_page *b = &w->r->body;
    if (w->q->json) {
        goblin__hub_page_rawf(b, "%s{\"id\":%" PRId64 ",\"label\":", w->n++ ? "," : "", k->id);
        goblin__hub_page_json(b, k->label);
        goblin__hub_page_rawf(b, ",\"created\":%" PRId64 ",\"revoked\":%" PRId64 "}", k->created, k->revoked);
        return GOBLIN_OK;
    }
    if (!w->n++) goblin__hub_page_raw(b, "<table><tr><th>Key</th><th>Label</th><th>Made</th><th></th></tr>");
    goblin__hub_page_rawf(b, "<tr><td>%" PRId64 "</td><td>", k->id);
    goblin__hub_page_html(b, k->label);
    goblin__hub_page_raw(b, "</td><td>");
    when(b, k->created);
    goblin__hub_page_raw(b, "</td><td>");
    if (k->revoked) {
        goblin__hub_page_raw(b, "revoked");
    } else {
        goblin__hub_page_raw(b, "<form class=\"inline\" method=\"post\" action=\"/keys/revoke\">");
        csrf_field(w->q, w->r);
        goblin__hub_page_rawf(b, "<input type=\"hidden\" name=\"id\" value=\"%" PRId64 "\">"
                                 "<button type=\"submit\">Revoke</button></form>", k->id);
    }
    goblin__hub_page_raw(b, "</td></tr>");
    return GOBLIN_OK;
}

static void request_form(goblin__hub_req *q, goblin__hub_res *r) {
    goblin__hub_page_raw(B, "<h2>Request access</h2><p>Tell the operator who you are and what the "
                            "volunteers' computers would do for your research.</p>"
                            "<form method=\"post\" action=\"/request\">");
    csrf_field(q, r);
    goblin__hub_page_rawf(B,
        "<label for=\"name\">Your name</label><input id=\"name\" name=\"name\" maxlength=\"%d\" required>"
        "<label for=\"institution\">Institution</label><input id=\"institution\" name=\"institution\" maxlength=\"%d\" required>"
        "<label for=\"purpose\">Purpose of the research</label><textarea id=\"purpose\" name=\"purpose\" maxlength=\"%d\" required></textarea>",
        GOBLIN_HUB_NAME_MAX, GOBLIN_HUB_NAME_MAX, GOBLIN_HUB_TEXT_MAX);
    goblin__hub_page_rawf(B,
        "<label for=\"expected_use\">Expected use (jobs, sizes, how often)</label><textarea id=\"expected_use\" "
        "name=\"expected_use\" maxlength=\"%d\" required></textarea><button type=\"submit\">Send the request</button></form>",
        GOBLIN_HUB_TEXT_MAX);
}

static void account_get(goblin__hub_req *q, goblin__hub_res *r) {
    if (!need_signin(q, r)) return;
    goblin_hub_store *s = goblin_hub_get_store(q->hub);
    walk w = {q, r, 0, false, false};
    char t[GOBLIN_HUB_TOKEN_SIZE];
    if (q->json) {
        json(r);
        if (goblin_hub_csrf_token(q->hub, q->cookie, t)) return fail(q, r, 500, "no form token");
        goblin__hub_page_raw(B, "{\"email\":");
        goblin__hub_page_json(B, q->account.email);
        goblin__hub_page_rawf(B, ",\"admin\":%s,\"csrf\":\"%s\",\"requests\":[", q->admin ? "true" : "false", t);
    } else {
        begin(q, r, "Your account");
        goblin__hub_page_raw(B, "<p>Signed in as <strong>");
        goblin__hub_page_html(B, q->account.email);
        goblin__hub_page_raw(B, "</strong>.</p><form method=\"post\" action=\"/signout\">");
        csrf_field(q, r);
        goblin__hub_page_raw(B, "<button type=\"submit\">Sign out</button></form><h2>Access requests</h2>");
    }
    if (goblin_hub_store_request_each(s, q->account.id, -1, 100, my_request, &w))
        return fail(q, r, 500, "could not read your requests");
    if (q->json) {
        goblin__hub_page_rawf(B, "],\"approved\":%s,\"keys\":[", w.approved ? "true" : "false");
        w.n = 0;
        if (goblin_hub_store_key_each(s, q->account.id, my_key, &w)) return fail(q, r, 500, "could not read your keys");
        goblin__hub_page_raw(B, "]");
        if (goblin__hub_workers_section(q, r, t)) return fail(q, r, 500, "could not read your workers");
        goblin__hub_page_raw(B, "}\n");
        return;
    }
    if (!w.n) goblin__hub_page_raw(B, "<p>None yet.</p>");
    if (!w.pending && !w.approved) request_form(q, r);
    if (w.approved) {
        goblin__hub_page_raw(B, "<h2>Lab-node keys</h2><p>Keys for your lab's nodes; each is shown once, "
                                "when it is made.</p>");
        w.n = 0;
        if (goblin_hub_store_key_each(s, q->account.id, my_key, &w)) return fail(q, r, 500, "could not read your keys");
        if (w.n) goblin__hub_page_raw(B, "</table>");
        goblin__hub_page_raw(B, "<form method=\"post\" action=\"/keys\">");
        csrf_field(q, r);
        goblin__hub_page_rawf(B, "<label for=\"label\">Label of a new key (which node it is for)</label>"
                                 "<input id=\"label\" name=\"label\" maxlength=\"%d\" required>"
                                 "<button type=\"submit\">Make a key</button></form>", GOBLIN_HUB_LABEL_MAX);
    }
    if (goblin_hub_csrf_token(q->hub, q->cookie, t) || goblin__hub_workers_section(q, r, t))
        return fail(q, r, 500, "could not read your workers");
    goblin__hub_page_end(B);
}

static void request_post(goblin__hub_req *q, goblin__hub_res *r) {
    if (!need_signin(q, r)) return;
    goblin_hub_access_request *x = goblin__calloc(1, sizeof *x);
    if (!x) return fail(q, r, 503, "out of memory");
    const char *v[4];
    static const char *const names[4] = {"name", "institution", "purpose", "expected_use"};
    static const size_t max[4] = {GOBLIN_HUB_NAME_MAX, GOBLIN_HUB_NAME_MAX, GOBLIN_HUB_TEXT_MAX, GOBLIN_HUB_TEXT_MAX};
    char *dst[4] = {x->name, x->institution, x->purpose, x->expected_use};
    for (int i = 0; i < 4; i++) {
        if (!(v[i] = field(q, r, names[i], max[i]))) {
            goblin__free(x);
            return;
        }
        memcpy(dst[i], v[i], strlen(v[i]) + 1);
    }
    int64_t id;
    goblin_err e = goblin_hub_request_file(q->hub, q->account.id, x, q->now, &id);
    goblin__free(x);
    if (e) return fail_err(q, r, e);
    q->n->requests_filed++;
    if (q->json) {
        json(r);
        goblin__hub_page_rawf(B, "{\"id\":%" PRId64 ",\"status\":\"pending\"}\n", id);
    } else {
        redirect(r, "/account");
    }
}

static void keys_post(goblin__hub_req *q, goblin__hub_res *r) {
    if (!need_signin(q, r)) return;
    const char *label = field(q, r, "label", GOBLIN_HUB_LABEL_MAX);
    if (!label) return;
    char key[GOBLIN_HUB_NODE_KEY_SIZE];
    int64_t id;
    goblin_err e = goblin_hub_key_create(q->hub, q->account.id, label, q->now, key, &id);
    if (e) return fail_err(q, r, e);
    q->n->keys_created++;
    if (q->json) {
        json(r);
        goblin__hub_page_rawf(B, "{\"id\":%" PRId64 ",\"key\":\"%s\"}\n", id, key);
    } else {
        begin(q, r, "Your new node key");
        goblin__hub_page_raw(B, "<p class=\"ok\">Copy this key into a file now: it is shown only this once.</p><p><code>");
        goblin__hub_page_raw(B, key);
        goblin__hub_page_raw(B, "</code></p><p><a href=\"/account\">Back to your account</a></p>");
        goblin__hub_page_end(B);
    }
    memset(key, 0, sizeof key);
}

static bool id_field(goblin__hub_req *q, goblin__hub_res *r, int64_t *out) {
    const char *v = field(q, r, "id", 20);
    if (!v) return false;
    char *end;
    long long id = strtoll(v, &end, 10);
    if (*end || id <= 0) {
        q->n->refused_input++;
        fail(q, r, 400, "the field 'id' must be a positive number");
        return false;
    }
    *out = id;
    return true;
}

static void revoke_post(goblin__hub_req *q, goblin__hub_res *r) {
    int64_t id;
    if (!need_signin(q, r) || !id_field(q, r, &id)) return;
    goblin_hub_store *s = goblin_hub_get_store(q->hub);
    goblin_err e = goblin_hub_store_key_revoke(s, q->account.id, id, q->now);
    if (e) return fail(q, r, e == GOBLIN_ENOTFOUND ? 404 : e == GOBLIN_ESTATE ? 409 : 500,
                       e == GOBLIN_ENOTFOUND || e == GOBLIN_ESTATE ? goblin_hub_store_error(s) : "could not revoke");
    q->n->keys_revoked++;
    if (q->json) {
        json(r);
        goblin__hub_page_raw(B, "{\"revoked\":true}\n");
    } else {
        redirect(r, "/account");
    }
}

/* ---- volunteers' workers (the section is workers_page.c) ---- */

static void linked(goblin__hub_req *q, goblin__hub_res *r, const char *json_body) {
    if (q->json) {
        json(r);
        goblin__hub_page_raw(B, json_body);
    } else {
        redirect(r, "/account#workers");
    }
}

/* The statement `goblin-worker link CODE` printed: checked, then its identity linked. */
static void workers_link_post(goblin__hub_req *q, goblin__hub_res *r) {
    if (!need_signin(q, r)) return;
    const char *st = field(q, r, "statement", GOBLIN_HUB_LINK_STATEMENT_MAX);
    if (!st) return;
    char fp[65];
    goblin_err e = goblin_hub_worker_link(q->hub, q->account.id, st, q->now, fp);
    if (e == GOBLIN_EINVAL) q->n->refused_input++;
    /* The bound on links is no rate limit: 409, not 429. */
    if (e == GOBLIN_ELIMIT) return fail(q, r, 409, goblin_hub_error(q->hub));
    if (e) return fail_err(q, r, e);
    q->n->workers_linked++;
    char body[128];
    snprintf(body, sizeof body, "{\"linked\":\"%s\"}\n", fp);
    linked(q, r, body);
}

static void workers_unlink_post(goblin__hub_req *q, goblin__hub_res *r) {
    if (!need_signin(q, r)) return;
    const char *fp = field(q, r, "fingerprint", 64);
    if (!fp) return;
    goblin_err e = goblin_hub_worker_unlink(q->hub, q->account.id, fp);
    if (e == GOBLIN_EINVAL) q->n->refused_input++;
    if (e) return fail_err(q, r, e);
    q->n->workers_unlinked++;
    linked(q, r, "{\"unlinked\":true}\n");
}

static void workers_code_post(goblin__hub_req *q, goblin__hub_res *r) {
    if (!need_signin(q, r)) return;
    char code[GOBLIN_HUB_LINK_CODE_SIZE], body[96];
    goblin_err e = goblin_hub_link_code_redraw(q->hub, q->account.id, q->now, code);
    if (e) return fail_err(q, r, e);
    snprintf(body, sizeof body, "{\"link_code\":\"%s\"}\n", code);
    linked(q, r, body);
}

/* ---- admin ---- */

static goblin_err admin_request(void *ctx, const goblin_hub_access_request *x) {
    walk *w = ctx;
    goblin__hub_page *b = &w->r->body;
    if (w->q->json) {
        goblin__hub_page_raw(b, w->n++ ? "," : "");
        request_json(b, x);
        return GOBLIN_OK;
    }
    w->n++;
    goblin__hub_page_rawf(b, "<h3>Request %" PRId64 " from ", x->id);
    goblin__hub_page_html(b, x->email);
    goblin__hub_page_raw(b, "</h3><table>");
    request_rows(b, x);
    goblin__hub_page_raw(b, "</table><form method=\"post\" action=\"/admin/decide\">");
    csrf_field(w->q, w->r);
    goblin__hub_page_rawf(b, "<input type=\"hidden\" name=\"id\" value=\"%" PRId64 "\">"
                             "<label for=\"note%" PRId64 "\">Note to the researcher (optional)</label>"
                             "<input id=\"note%" PRId64 "\" name=\"note\" maxlength=\"%d\">"
                             "<button type=\"submit\" name=\"decision\" value=\"approve\">Approve</button> "
                             "<button type=\"submit\" name=\"decision\" value=\"deny\">Deny</button></form>",
                          x->id, x->id, x->id, GOBLIN_HUB_REASON_MAX);
    return GOBLIN_OK;
}

static goblin_err admin_quarantine(void *ctx, const goblin_hub_quarantine *x) {
    walk *w = ctx;
    goblin__hub_page *b = &w->r->body;
    bool j = w->q->json;
    if (j) goblin__hub_page_rawf(b, "%s{\"id\":%" PRId64 ",\"subject\":", w->n ? "," : "", x->id);
    else goblin__hub_page_rawf(b, "%s<tr><td>%" PRId64 "</td><td>", w->n ? "" : "<table><tr><th>Id</th><th>Subject</th>"
                               "<th>Reason</th><th>Reported by</th><th></th></tr>", x->id);
    w->n++;
    const char *v[3] = {x->subject, x->reason, x->reported_by};
    static const char *const keys[3] = {"subject", "reason", "reported_by"};
    for (int i = 0; i < 3; i++) {
        if (j) {
            if (i) goblin__hub_page_rawf(b, ",\"%s\":", keys[i]);
            goblin__hub_page_json(b, v[i]);
        } else {
            if (i) goblin__hub_page_raw(b, "</td><td>");
            goblin__hub_page_html(b, v[i]);
        }
    }
    if (j) {
        goblin__hub_page_rawf(b, ",\"created\":%" PRId64 ",\"lifted\":%" PRId64 "}", x->created, x->lifted);
        return GOBLIN_OK;
    }
    /* A lift form per row (no JavaScript): the operator's review of a lab's report. */
    goblin__hub_page_raw(b, "</td><td><form method=\"post\" action=\"/admin/lift\">");
    csrf_field(w->q, w->r);
    goblin__hub_page_rawf(b, "<input type=\"hidden\" name=\"id\" value=\"%" PRId64 "\">"
                             "<button type=\"submit\">Lift</button></form></td></tr>", x->id);
    return GOBLIN_OK;
}

/* The labs (w->pending) or the workers on the machines address now (admin page). */
static goblin_err admin_machine(void *ctx, const goblin_hub_machine *m) {
    walk *w = ctx;
    if (m->node != w->pending) return GOBLIN_OK;
    goblin__hub_page *b = &w->r->body;
    bool j = w->q->json;
    char email[GOBLIN_HUB_EMAIL_MAX + 1] = "";
    goblin_hub_account a;
    if (m->lab > 0 && goblin_hub_store_account_get(goblin_hub_get_store(w->q->hub), m->lab, &a) == GOBLIN_OK)
        snprintf(email, sizeof email, "%s", a.email);
    if (!j && !w->n)
        goblin__hub_page_raw(b, m->node ? "<table><tr><th>Lab</th><th>Node key</th><th>Weight</th>"
                                          "<th>Workers lent</th></tr>"
                                        : "<table><tr><th>Identity</th><th>Origin</th><th>Lent to</th></tr>");
    if (j) goblin__hub_page_raw(b, w->n ? "," : "");
    w->n++;
    if (m->node && j) {
        goblin__hub_page_raw(b, "{\"lab\":");
        goblin__hub_page_json(b, email);
        goblin__hub_page_rawf(b, ",\"key\":%" PRId64 ",\"weight\":%u,\"lent\":%d}", m->key_id,
                              (unsigned)m->weight, (int)m->lent);
    } else if (m->node) {
        goblin__hub_page_raw(b, "<tr><td>");
        goblin__hub_page_html(b, email);
        goblin__hub_page_rawf(b, "</td><td>%" PRId64 "</td><td>%u</td><td>%d</td></tr>", m->key_id,
                              (unsigned)m->weight, (int)m->lent);
    } else if (j) {
        goblin__hub_page_raw(b, "{\"identity\":");
        goblin__hub_page_json(b, m->identity);
        goblin__hub_page_raw(b, ",\"origin\":");
        goblin__hub_page_json(b, m->origin);
        goblin__hub_page_raw(b, ",\"lent_to\":");
        goblin__hub_page_json(b, email);
        goblin__hub_page_raw(b, m->direct ? ",\"introduced\":true}" : ",\"introduced\":false}");
    } else {
        goblin__hub_page_raw(b, "<tr><td>");
        goblin__hub_page_html(b, m->identity[0] ? m->identity : "(not proved yet)");
        goblin__hub_page_raw(b, "</td><td>");
        goblin__hub_page_html(b, m->origin);
        goblin__hub_page_raw(b, "</td><td>");
        goblin__hub_page_html(b, email[0] ? email : "waiting");
        goblin__hub_page_raw(b, m->direct ? " (introduced: connected to the lab's node)</td></tr>" : "</td></tr>");
    }
    return GOBLIN_OK;
}

/* The labs' nodes and the workers connected now, as two lists. False: fail() sent. */
static bool admin_machines(goblin__hub_req *q, goblin__hub_res *r) {
    for (int kind = 1; kind >= 0; kind--) {
        walk w = {q, r, 0, kind == 1, false};
        if (q->json) goblin__hub_page_raw(B, kind ? ",\"labs\":[" : ",\"workers\":[");
        else goblin__hub_page_raw(B, kind ? "<h2>Lab nodes connected</h2>" : "<h2>Workers connected</h2>");
        goblin_err e = goblin_hub_machines_each(q->hub, 1000, admin_machine, &w);
        if (e && e != GOBLIN_ESTATE) {
            fail(q, r, 500, "could not read the machines");
            return false;
        }
        if (q->json) goblin__hub_page_raw(B, "]");
        else if (e == GOBLIN_ESTATE) goblin__hub_page_raw(B, "<p>This hub serves no machines address.</p>");
        else goblin__hub_page_raw(B, w.n ? "</table>" : "<p>None.</p>");
    }
    return true;
}

static bool need_admin(goblin__hub_req *q, goblin__hub_res *r) {
    if (!need_signin(q, r)) return false;
    if (q->admin) return true;
    q->n->refused_auth++;
    fail(q, r, 403, "this page is for the hub's operators");
    return false;
}

static void admin_get(goblin__hub_req *q, goblin__hub_res *r) {
    if (!need_admin(q, r)) return;
    goblin_hub_store *s = goblin_hub_get_store(q->hub);
    walk w = {q, r, 0, false, false};
    if (q->json) {
        json(r);
        goblin__hub_page_raw(B, "{\"pending\":[");
    } else {
        begin(q, r, "Operator");
        goblin__hub_page_raw(B, "<h2>Pending access requests</h2>");
    }
    if (goblin_hub_store_request_each(s, 0, GOBLIN_HUB_REQUEST_PENDING, 200, admin_request, &w))
        return fail(q, r, 500, "could not read the requests");
    if (!q->json && !w.n) goblin__hub_page_raw(B, "<p>None.</p>");
    goblin__hub_page_raw(B, q->json ? "],\"quarantines\":[" : "<h2>Quarantines in force</h2>");
    w.n = 0;
    if (goblin_hub_store_quarantine_each(s, false, admin_quarantine, &w))
        return fail(q, r, 500, "could not read the quarantines");
    if (q->json) goblin__hub_page_raw(B, "]");
    else goblin__hub_page_raw(B, w.n ? "</table>" : "<p>None.</p>");
    if (!admin_machines(q, r)) return;
    if (q->json) {
        goblin__hub_page_raw(B, "}\n");
        return;
    }
    goblin__hub_page_end(B);
}

static void decide_post(goblin__hub_req *q, goblin__hub_res *r) {
    int64_t id;
    if (!need_admin(q, r) || !id_field(q, r, &id)) return;
    const char *d = field(q, r, "decision", 16);
    if (!d) return;
    if (strcmp(d, "approve") && strcmp(d, "deny")) {
        q->n->refused_input++;
        return fail(q, r, 400, "the decision is approve or deny");
    }
    const char *note = goblin__hub_form_get(&q->form, "note");
    if (note && strlen(note) > GOBLIN_HUB_REASON_MAX) {
        q->n->refused_input++;
        return fail(q, r, 400, "the note is too long");
    }
    goblin_err e = goblin_hub_request_decide(q->hub, id, !strcmp(d, "approve"), note, q->now);
    if (e && e != GOBLIN_EIO) return fail_err(q, r, e);
    if (q->json) {
        json(r);
        goblin__hub_page_rawf(B, "{\"id\":%" PRId64 ",\"decided\":\"%s\",\"mailed\":%s}\n", id, d, e ? "false" : "true");
    } else {
        redirect(r, "/admin");
    }
}

/* The operator lifts quarantine `id`: the identity is lent again from its next HELLO. */
static void lift_post(goblin__hub_req *q, goblin__hub_res *r) {
    int64_t id;
    if (!need_admin(q, r) || !id_field(q, r, &id)) return;
    goblin_err e = goblin_hub_store_quarantine_lift(goblin_hub_get_store(q->hub), id, q->now);
    if (e) return fail_err(q, r, e);
    if (q->json) {
        json(r);
        goblin__hub_page_rawf(B, "{\"id\":%" PRId64 ",\"lifted\":%" PRId64 "}\n", id, q->now);
    } else {
        redirect(r, "/admin");
    }
}

/* ---- status and metrics ---- */

typedef struct counts {
    int64_t approved, pending, quarantines;
} counts;

static goblin_err count_request(void *ctx, const goblin_hub_access_request *x) {
    counts *c = ctx;
    c->approved += x->status == GOBLIN_HUB_REQUEST_APPROVED;
    c->pending += x->status == GOBLIN_HUB_REQUEST_PENDING;
    return GOBLIN_OK;
}

static goblin_err count_quarantine(void *ctx, const goblin_hub_quarantine *x) {
    ((counts *)ctx)->quarantines++;
    return GOBLIN_OK;
}

static bool read_counts(goblin__hub_req *q, counts *c) {
    goblin_hub_store *s = goblin_hub_get_store(q->hub);
    memset(c, 0, sizeof *c);
    return !goblin_hub_store_request_each(s, 0, -1, 1000000, count_request, c) &&
           !goblin_hub_store_quarantine_each(s, false, count_quarantine, c);
}

static void status_get(goblin__hub_req *q, goblin__hub_res *r) {
    counts c;
    if (!read_counts(q, &c)) return fail(q, r, 500, "could not read the counts");
    goblin_hub_machines_stats m;
    if (goblin_hub_machines_stats_get(q->hub, &m) != GOBLIN_OK) memset(&m, 0, sizeof m); /* none served */
    m.workers_lent += m.workers_direct; /* introduced workers are lent too, connected to their lab's node */
    if (q->json) {
        json(r);
        goblin__hub_page_rawf(B, "{\"workers_online\":%" PRId64 ",\"workers_lent\":%" PRId64
                                 ",\"labs_active\":%" PRId64 ",\"tasks_per_second\":%.3f,\"tasks\":%" PRId64
                                 ",\"results_accepted\":%" PRId64 ",\"results_rejected\":%" PRId64
                                 ",\"workers_refused_quarantined\":%" PRId64 ",\"approved_requests\":%" PRId64
                                 ",\"pending_requests\":%" PRId64 ",\"quarantines\":%" PRId64 "}\n",
                              m.workers_waiting + m.workers_lent, m.workers_lent, m.labs_active, m.tasks_per_second,
                              m.tasks_reported, m.results_accepted, m.results_rejected,
                              m.workers_refused_quarantined, c.approved, c.pending, c.quarantines);
        return;
    }
    begin(q, r, "GPU Goblin network");
    goblin__hub_page_rawf(B, "<table><tr><th>Workers online</th><td>%" PRId64 " (%" PRId64 " lent to labs)</td></tr>"
                             "<tr><th>Labs active</th><td>%" PRId64 "</td></tr>"
                             "<tr><th>Tasks per second (last minute)</th><td>%.2f</td></tr>"
                             "<tr><th>Tasks given to volunteers</th><td>%" PRId64 "</td></tr>"
                             "<tr><th>Results verified and accepted</th><td>%" PRId64 "</td></tr>"
                             "<tr><th>Results rejected by verification</th><td>%" PRId64 "</td></tr>"
                             "<tr><th>Quarantined workers refused</th><td>%" PRId64 "</td></tr>",
                          m.workers_waiting + m.workers_lent, m.workers_lent, m.labs_active, m.tasks_per_second,
                          m.tasks_reported, m.results_accepted, m.results_rejected, m.workers_refused_quarantined);
    goblin__hub_page_rawf(B, "<tr><th>Approved access requests</th><td>%" PRId64 "</td></tr>"
                             "<tr><th>Requests waiting for a decision</th><td>%" PRId64 "</td></tr>"
                             "<tr><th>Quarantines in force</th><td>%" PRId64 "</td></tr></table>",
                          c.approved, c.pending, c.quarantines);
    goblin__hub_page_raw(B, "<p>Researchers: <a href=\"/signin\">sign in</a> and request access. Volunteers: "
                            "sign in and link the workers you run to your account.</p>");
    goblin__hub_page_end(B);
}

static void metrics_get(goblin__hub_req *q, goblin__hub_res *r) {
    counts c;
    if (!read_counts(q, &c)) return fail(q, r, 500, "could not read the counts");
    r->status = 200;
    r->type = "text/plain; version=0.0.4; charset=utf-8";
    goblin__hub_counters *n = q->n;
    goblin__hub_page_rawf(B, "# HELP goblin_hub_http_requests_total HTTP requests handled.\n"
                             "# TYPE goblin_hub_http_requests_total counter\n"
                             "goblin_hub_http_requests_total %" PRIu64 "\n", (uint64_t)n->requests);
    goblin__hub_page_raw(B, "# HELP goblin_hub_http_refused_total Requests refused, by reason.\n"
                            "# TYPE goblin_hub_http_refused_total counter\n");
    goblin__hub_page_rawf(B, "goblin_hub_http_refused_total{reason=\"csrf\"} %" PRIu64 "\n"
                             "goblin_hub_http_refused_total{reason=\"input\"} %" PRIu64 "\n"
                             "goblin_hub_http_refused_total{reason=\"auth\"} %" PRIu64 "\n"
                             "goblin_hub_http_refused_total{reason=\"rate_limit\"} %" PRIu64 "\n"
                             "goblin_hub_http_refused_total{reason=\"busy\"} %" PRIu64 "\n",
                          (uint64_t)n->refused_csrf, (uint64_t)n->refused_input, (uint64_t)n->refused_auth,
                          (uint64_t)n->limited, (uint64_t)n->refused_busy);
    const char *names[7] = {"signins_started", "signins", "requests_filed", "keys_created", "keys_revoked",
                            "workers_linked", "workers_unlinked"};
    uint64_t vals[7] = {n->signins_started, n->signins, n->requests_filed, n->keys_created, n->keys_revoked,
                        n->workers_linked, n->workers_unlinked};
    for (int i = 0; i < 7; i++)
        goblin__hub_page_rawf(B, "# TYPE goblin_hub_%s_total counter\ngoblin_hub_%s_total %" PRIu64 "\n", names[i],
                              names[i], vals[i]);
    goblin__hub_page_rawf(B, "# TYPE goblin_hub_access_requests gauge\n"
                             "goblin_hub_access_requests{status=\"pending\"} %" PRId64 "\n"
                             "goblin_hub_access_requests{status=\"approved\"} %" PRId64 "\n"
                             "# TYPE goblin_hub_quarantines gauge\ngoblin_hub_quarantines %" PRId64 "\n",
                          c.pending, c.approved, c.quarantines);
    goblin_hub_machines_stats m;
    if (goblin_hub_machines_stats_get(q->hub, &m) != GOBLIN_OK) return; /* no machines address served */
    goblin__hub_page_rawf(B, "# HELP goblin_hub_workers Workers connected to the hub, by state.\n"
                             "# TYPE goblin_hub_workers gauge\n"
                             "goblin_hub_workers{state=\"waiting\"} %" PRId64 "\n"
                             "goblin_hub_workers{state=\"lent\"} %" PRId64 "\n"
                             "goblin_hub_workers{state=\"introduced\"} %" PRId64 "\n"
                             "# TYPE goblin_hub_labs_active gauge\ngoblin_hub_labs_active %" PRId64 "\n"
                             "# TYPE goblin_hub_lab_nodes gauge\ngoblin_hub_lab_nodes %" PRId64 "\n",
                          m.workers_waiting, m.workers_lent, m.workers_direct, m.labs_active, m.nodes_connected);
    const char *mn[10] = {"tasks", "results_accepted", "results_rejected", "workers_lent", "workers_refused",
                          "workers_refused_quarantined", "nodes_refused", "relayed_bytes", "work_reports_refused",
                          "workers_introduced"};
    int64_t mv[10] = {m.tasks_reported, m.results_accepted, m.results_rejected, m.workers_lent_total,
                      m.workers_refused, m.workers_refused_quarantined, m.nodes_refused, m.bytes_relayed,
                      m.work_reports_refused, m.workers_introduced};
    for (int i = 0; i < 10; i++)
        goblin__hub_page_rawf(B, "# TYPE goblin_hub_%s_total counter\ngoblin_hub_%s_total %" PRId64 "\n", mn[i],
                              mn[i], mv[i]);
}

/* ---- routing ---- */

typedef struct route {
    const char *path;
    void (*get)(goblin__hub_req *, goblin__hub_res *);
    void (*post)(goblin__hub_req *, goblin__hub_res *);
} route;

static const route routes[] = {
    {"/status", status_get, NULL},
    {"/metrics", metrics_get, NULL},
    {"/signin", signin_get, signin_post},
    {"/signin/code", NULL, code_post},
    {"/signin/link", link_get, link_post},
    {"/signout", NULL, signout_post},
    {"/account", account_get, NULL},
    {"/request", NULL, request_post},
    {"/keys", NULL, keys_post},
    {"/keys/revoke", NULL, revoke_post},
    {"/workers/link", NULL, workers_link_post},
    {"/workers/unlink", NULL, workers_unlink_post},
    {"/workers/code", NULL, workers_code_post},
    {"/admin", admin_get, NULL},
    {"/admin/decide", NULL, decide_post},
    {"/admin/lift", NULL, lift_post},
};

void goblin__hub_route(goblin__hub_req *q, goblin__hub_res *r) {
    if (!strcmp(q->path, "/")) return redirect(r, "/status");
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(q->path, routes[i].path)) continue;
        void (*fn)(goblin__hub_req *, goblin__hub_res *) = q->post ? routes[i].post : routes[i].get;
        if (!fn) return fail(q, r, 405, q->post ? "this page takes no form" : "this address takes only forms");
        if (q->post && !csrf_ok(q, r)) return;
        return fn(q, r);
    }
    fail(q, r, 404, "no such page");
}
