/* libgoblin/base/page.h - building a response body: a growing buffer, with HTML and
 * JSON escaping (internal; the hub's pages and the node's status page use it). */
#ifndef GOBLIN__BASE_PAGE_H
#define GOBLIN__BASE_PAGE_H

#include <stdbool.h>
#include <stddef.h>

/* Bytes past which a page stops growing (and is marked failed): no page made comes
 * near it; the cap keeps a bug from taking the memory. */
#define GOBLIN__PAGE_MAX ((size_t)4 << 20)

typedef struct goblin__page {
    char *p;
    size_t n, cap;
    bool failed; /* out of memory or over the cap: the page is not sent */
} goblin__page;

void goblin__page_free(goblin__page *b);
/* Append @p s as it is (the caller's own markup). */
void goblin__page_raw(goblin__page *b, const char *s);
/* Append formatted text of at most 1023 bytes (longer marks the page failed): numbers
 * and fixed words, never text that came from outside. */
void goblin__page_rawf(goblin__page *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append @p s with & < > " ' escaped: safe in element text and quoted attributes. */
void goblin__page_html(goblin__page *b, const char *s);
/* Append @p s as a JSON string, quotes included (control characters and < > & as
 * \\u escapes). */
void goblin__page_json(goblin__page *b, const char *s);

#endif
