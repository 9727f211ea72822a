/* libgoblin/base/page.c - building a response body: a growing buffer with HTML and JSON
 * escaping (the hub's pages, the node's status page). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/page.h"

void goblin__page_free(goblin__page *b) {
    goblin__free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static bool grow(goblin__page *b, size_t more) {
    if (b->failed) return false;
    if (b->n + more + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more + 1) cap *= 2;
    if (cap > GOBLIN__PAGE_MAX) {
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

static void add(goblin__page *b, const char *s, size_t n) {
    if (!grow(b, n)) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void goblin__page_raw(goblin__page *b, const char *s) { add(b, s, strlen(s)); }

void goblin__page_rawf(goblin__page *b, const char *fmt, ...) {
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

void goblin__page_html(goblin__page *b, const char *s) {
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

void goblin__page_json(goblin__page *b, const char *s) {
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
