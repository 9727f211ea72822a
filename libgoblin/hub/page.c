/* libgoblin/hub/page.c - response bodies: escaping and the HTML frame. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "page.h"

void goblin__hub_page_free(goblin__hub_page *b) {
    goblin__free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static bool grow(goblin__hub_page *b, size_t more) {
    if (b->failed) return false;
    if (b->n + more + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more + 1) cap *= 2;
    if (cap > GOBLIN__HUB_PAGE_MAX) {
        b->failed = true;
        return false;
    }
    char *p = goblin__alloc(cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    if (b->n) memcpy(p, b->p, b->n);
    goblin__free(b->p);
    b->p = p;
    b->cap = cap;
    b->p[b->n] = 0;
    return true;
}

static void add(goblin__hub_page *b, const char *s, size_t n) {
    if (!grow(b, n)) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void goblin__hub_page_raw(goblin__hub_page *b, const char *s) { add(b, s, strlen(s)); }

void goblin__hub_page_rawf(goblin__hub_page *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp) {
        b->failed = true; /* only short, fixed text goes through here */
        return;
    }
    add(b, tmp, (size_t)k);
}

void goblin__hub_page_html(goblin__hub_page *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': add(b, "&amp;", 5); break;
        case '<': add(b, "&lt;", 4); break;
        case '>': add(b, "&gt;", 4); break;
        case '"': add(b, "&quot;", 6); break;
        case '\'': add(b, "&#39;", 5); break;
        default: add(b, s, 1);
        }
    }
}

void goblin__hub_page_json(goblin__hub_page *b, const char *s) {
    add(b, "\"", 1);
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        if (*u == '"' || *u == '\\') {
            char e[2] = {'\\', (char)*u};
            add(b, e, 2);
        } else if (*u < 0x20 || *u == '<' || *u == '>' || *u == '&') {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", *u);
            add(b, e, 6);
        } else {
            add(b, (const char *)u, 1);
        }
    }
    add(b, "\"", 1);
}

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
