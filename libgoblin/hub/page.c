/* libgoblin/hub/page.c - the frame of the hub's HTML pages (the buffer and its escaping
 * are base/page.c). */
#include <time.h>

#include "page.h"

static const char css[] =
    "body{font:16px/1.5 system-ui,sans-serif;max-width:46em;margin:2em auto;padding:0 1em;color:#222}"
    "nav a{margin-right:1em}h1{font-size:1.5em}label{display:block;margin-top:.8em;font-weight:600}"
    "input,textarea{font:inherit;width:100%;box-sizing:border-box;padding:.3em}"
    "textarea{min-height:5em}button{font:inherit;margin-top:1em;padding:.3em 1em}"
    "table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ccc;padding:.3em;text-align:left;vertical-align:top}"
    ".err{color:#a00;font-weight:600}.ok{color:#060}code{background:#eee;padding:.1em .3em;word-break:break-all}"
    "form.inline{display:inline}form.inline button{margin:0}";

void goblin__hub_page_begin(goblin__hub_page *b, const char *title, bool signed_in, bool admin) {
    goblin__hub_page_raw(b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>");
    goblin__hub_page_html(b, title);
    goblin__hub_page_raw(b, " - GPU Goblin</title><style>");
    goblin__hub_page_raw(b, css);
    goblin__hub_page_raw(b, "</style></head><body><nav><a href=\"/status\">Status</a>");
    if (signed_in) goblin__hub_page_raw(b, "<a href=\"/account\">Account</a>");
    else goblin__hub_page_raw(b, "<a href=\"/signin\">Sign in</a>");
    if (admin) goblin__hub_page_raw(b, "<a href=\"/admin\">Admin</a>");
    goblin__hub_page_raw(b, "</nav><main><h1>");
    goblin__hub_page_html(b, title);
    goblin__hub_page_raw(b, "</h1>\n");
}

void goblin__hub_page_end(goblin__hub_page *b) { goblin__hub_page_raw(b, "</main></body></html>\n"); }

void goblin__hub_page_when(goblin__hub_page *b, int64_t t) {
    char s[32];
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(s, sizeof s, "%Y-%m-%d %H:%M UTC", &tm);
    goblin__hub_page_raw(b, s);
}
