/* libgoblin/base/names.h - looking up an enum value by its name in the enum's table of
 * names (internal; the public _from_name functions use it). */
#ifndef GOBLIN__BASE_NAMES_H
#define GOBLIN__BASE_NAMES_H

#include <string.h>

/* The index of @p name in @p names[0 .. count - 1] (NULL entries skipped), or -1. */
static inline int goblin__name_index(const char *const *names, int count, const char *name) {
    for (int i = 0; name && i < count; i++)
        if (names[i] && strcmp(name, names[i]) == 0) return i;
    return -1;
}

#endif
