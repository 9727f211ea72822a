/* libgoblin/hub/page.h - building a response body: a growing buffer, with HTML and
 * JSON escaping, and the frame of every HTML page (internal to hub/). */
#ifndef GOBLIN__HUB_PAGE_H
#define GOBLIN__HUB_PAGE_H

#include <stdbool.h>
#include <stddef.h>

/* Bytes past which a page stops growing (and is marked failed): no page the hub
 * makes comes near it; the cap keeps a bug from taking the memory. */
#define GOBLIN__HUB_PAGE_MAX ((size_t)4 << 20)

typedef struct goblin__hub_page {
    char *p;
    size_t n, cap;
    bool failed; /* out of memory or over the cap: the page is not sent */
} goblin__hub_page;

void goblin__hub_page_free(goblin__hub_page *b);
/* Append @p s as it is (the hub's own markup). */
void goblin__hub_page_raw(goblin__hub_page *b, const char *s);
void goblin__hub_page_rawf(goblin__hub_page *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append @p s with & < > " ' escaped: safe in element text and quoted attributes. */
void goblin__hub_page_html(goblin__hub_page *b, const char *s);
/* Append @p s as a JSON string, quotes included. */
void goblin__hub_page_json(goblin__hub_page *b, const char *s);
/* The start of an HTML page titled @p title (escaped) with the hub's CSS and a
 * navigation line; @p signed_in chooses its links. */
void goblin__hub_page_begin(goblin__hub_page *b, const char *title, bool signed_in, bool admin);
void goblin__hub_page_end(goblin__hub_page *b);

#endif
