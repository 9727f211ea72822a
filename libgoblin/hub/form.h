/* libgoblin/hub/form.h - what a browser sends: url-encoded forms and query strings,
 * and the Cookie header (internal to hub/). */
#ifndef GOBLIN__HUB_FORM_H
#define GOBLIN__HUB_FORM_H

#include <stdbool.h>
#include <stddef.h>

/* Most fields one form or query may carry; more is refused. */
#define GOBLIN__HUB_FORM_FIELDS 16

typedef struct goblin__hub_form {
    size_t n;
    char *name[GOBLIN__HUB_FORM_FIELDS];
    char *value[GOBLIN__HUB_FORM_FIELDS];
    char *mem; /* one allocation holds every decoded string */
} goblin__hub_form;

/* Decode @p n bytes of application/x-www-form-urlencoded text into @p f. False (and
 * @p why set) on a bad %-escape, a NUL byte, a repeated name, too many fields or no
 * memory; @p f is then empty. */
bool goblin__hub_form_parse(const char *s, size_t n, goblin__hub_form *f, const char **why);
void goblin__hub_form_free(goblin__hub_form *f);
/* The value of field @p name, or NULL. */
const char *goblin__hub_form_get(const goblin__hub_form *f, const char *name);
/* The value of cookie @p name in Cookie header @p header into @p out (@p cap bytes);
 * false if absent or too long. */
bool goblin__hub_cookie(const char *header, const char *name, char *out, size_t cap);

#endif
