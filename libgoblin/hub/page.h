/* libgoblin/hub/page.h - the hub's page bodies: the shared builder (base/page.h) under
 * the hub's names, and the frame of every HTML page of the hub (internal to hub/). */
#ifndef GOBLIN__HUB_PAGE_H
#define GOBLIN__HUB_PAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/page.h"

typedef goblin__page goblin__hub_page;
#define GOBLIN__HUB_PAGE_MAX GOBLIN__PAGE_MAX
#define goblin__hub_page_free goblin__page_free
#define goblin__hub_page_raw goblin__page_raw
#define goblin__hub_page_rawf goblin__page_rawf
#define goblin__hub_page_html goblin__page_html
#define goblin__hub_page_json goblin__page_json

/* The start of an HTML page titled @p title (escaped) with the hub's CSS and a
 * navigation line; @p signed_in chooses its links. */
void goblin__hub_page_begin(goblin__hub_page *b, const char *title, bool signed_in, bool admin);
void goblin__hub_page_end(goblin__hub_page *b);
/* Append time @p t (seconds since the epoch) as "YYYY-MM-DD HH:MM UTC". */
void goblin__hub_page_when(goblin__hub_page *b, int64_t t);

#endif
