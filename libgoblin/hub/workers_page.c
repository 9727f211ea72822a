/* libgoblin/hub/workers_page.c - the account page's "Your workers" section, as HTML and
 * as JSON: the link code, the "Link a worker" form, each linked identity with the work
 * labs reported of it and an Unlink form, and the form that draws a new code. Plain
 * forms (no JavaScript), each with the form token; everything shown is escaped. The
 * forms' handlers are in pages.c. */
#include <inttypes.h>

#include "web_impl.h"

typedef struct rows {
    goblin__hub_page *b;
    const char *csrf;
    bool json;
    int n;
} rows;

static goblin_err one(void *ctx, const goblin_hub_link *l) {
    rows *w = ctx;
    goblin__hub_page *b = w->b;
    if (w->json) {
        goblin__hub_page_raw(b, w->n++ ? ",{\"fingerprint\":" : "{\"fingerprint\":");
        goblin__hub_page_json(b, l->fingerprint);
        goblin__hub_page_rawf(b, ",\"created\":%" PRId64 ",\"tasks\":%" PRId64 ",\"accepted\":%" PRId64
                                 ",\"rejected\":%" PRId64 "}", l->created, l->tasks, l->accepted, l->rejected);
        return GOBLIN_OK;
    }
    if (!w->n++)
        goblin__hub_page_raw(b, "<table><tr><th>Worker identity</th><th>Linked</th><th>Tasks</th>"
                                "<th>Accepted</th><th>Rejected</th><th></th></tr>");
    goblin__hub_page_raw(b, "<tr><td><code>");
    goblin__hub_page_html(b, l->fingerprint);
    goblin__hub_page_raw(b, "</code></td><td>");
    goblin__hub_page_when(b, l->created);
    goblin__hub_page_rawf(b, "</td><td>%" PRId64 "</td><td>%" PRId64 "</td><td>%" PRId64 "</td><td>", l->tasks,
                          l->accepted, l->rejected);
    goblin__hub_page_rawf(b, "<form class=\"inline\" method=\"post\" action=\"/workers/unlink\">"
                             "<input type=\"hidden\" name=\"csrf\" value=\"%s\">", w->csrf);
    goblin__hub_page_raw(b, "<input type=\"hidden\" name=\"fingerprint\" value=\"");
    goblin__hub_page_html(b, l->fingerprint);
    /* A label naming the row, for a screen reader going from button to button. */
    goblin__hub_page_raw(b, "\"><button type=\"submit\" aria-label=\"Unlink worker ");
    goblin__hub_page_html(b, l->fingerprint);
    goblin__hub_page_raw(b, "\">Unlink</button></form></td></tr>");
    return GOBLIN_OK;
}

goblin_err goblin__hub_workers_section(goblin__hub_req *q, goblin__hub_res *r, const char *csrf) {
    char code[GOBLIN_HUB_LINK_CODE_SIZE];
    goblin_err e = goblin_hub_link_code(q->hub, q->account.id, q->now, code);
    if (e) return e;
    goblin__hub_page *b = &r->body;
    rows w = {b, csrf, q->json, 0};
    if (q->json) {
        goblin__hub_page_rawf(b, ",\"link_code\":\"%s\",\"max_workers\":%d,\"workers\":[", code, GOBLIN_HUB_LINKS_MAX);
        if ((e = goblin_hub_store_link_each(goblin_hub_get_store(q->hub), q->account.id, one, &w))) return e;
        goblin__hub_page_raw(b, "]");
        return GOBLIN_OK;
    }
    goblin__hub_page_raw(b, "<h2 id=\"workers\">Your workers</h2><p>Volunteers: link the workers you run to this "
                            "account. The network then knows these machines are yours, so that it never has two "
                            "of them check each other's work, and this page shows the work each one did.</p>");
    goblin__hub_page_rawf(b, "<p>Your link code: <code>%s</code></p><p>On each machine, run "
                             "<code>goblin-worker link %s</code> (with the worker's <code>--config-dir DIR</code> "
                             "if it uses one) and paste the line it prints here.</p>", code, code);
    goblin__hub_page_rawf(b, "<form method=\"post\" action=\"/workers/link\">"
                             "<input type=\"hidden\" name=\"csrf\" value=\"%s\">"
                             "<label for=\"statement\">Link statement (the line goblin-worker link printed)</label>"
                             "<input id=\"statement\" name=\"statement\" maxlength=\"%d\" autocomplete=\"off\" "
                             "spellcheck=\"false\" required><button type=\"submit\">Link a worker</button></form>",
                          csrf, GOBLIN_HUB_LINK_STATEMENT_MAX);
    if ((e = goblin_hub_store_link_each(goblin_hub_get_store(q->hub), q->account.id, one, &w))) return e;
    goblin__hub_page_raw(b, w.n ? "</table>" : "<p>No worker is linked yet.</p>");
    goblin__hub_page_rawf(b, "<p>An account links at most %d workers. A new link code makes the statements made "
                             "for this one useless; the workers linked stay linked.</p>"
                             "<form method=\"post\" action=\"/workers/code\">"
                             "<input type=\"hidden\" name=\"csrf\" value=\"%s\">"
                             "<button type=\"submit\">Draw a new link code</button></form>",
                          GOBLIN_HUB_LINKS_MAX, csrf);
    return GOBLIN_OK;
}
