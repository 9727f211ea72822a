/* libgoblin/hub/form.c - url-encoded forms and cookies. */
#include <string.h>

#include "base/alloc.h"
#include "form.h"

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode [s, s + n) into out (room for n + 1); false on a bad escape or a NUL. */
static bool decode(const char *s, size_t n, char *out) {
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            int a = i + 1 < n ? hexval(s[i + 1]) : -1, b = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (a < 0 || b < 0) return false;
            c = (char)(a * 16 + b);
            i += 2;
        }
        if (c == 0) return false;
        out[j++] = c;
    }
    out[j] = 0;
    return true;
}

bool goblin__hub_form_parse(const char *s, size_t n, goblin__hub_form *f, const char **why) {
    memset(f, 0, sizeof *f);
    if (!n) return true;
    /* Each field's name and value decode to at most their encoded length + NULs. */
    f->mem = goblin__alloc(2 * n + 2 * GOBLIN__HUB_FORM_FIELDS + 2);
    if (!f->mem) {
        *why = "out of memory";
        return false;
    }
    char *w = f->mem;
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && s[j] != '&') j++;
        if (j > i) {
            if (f->n == GOBLIN__HUB_FORM_FIELDS) {
                *why = "too many fields";
                goto bad;
            }
            size_t eq = i;
            while (eq < j && s[eq] != '=') eq++;
            char *name = w;
            if (!decode(s + i, eq - i, name)) goto esc;
            w += strlen(name) + 1;
            char *val = w;
            if (!decode(s + (eq < j ? eq + 1 : j), eq < j ? j - eq - 1 : 0, val)) goto esc;
            w += strlen(val) + 1;
            if (goblin__hub_form_get(f, name)) {
                *why = "a field appears twice";
                goto bad;
            }
            f->name[f->n] = name;
            f->value[f->n] = val;
            f->n++;
        }
        i = j + 1;
    }
    return true;
esc:
    *why = "bad %-escape or NUL byte in the form";
bad:
    goblin__hub_form_free(f);
    return false;
}

void goblin__hub_form_free(goblin__hub_form *f) {
    goblin__free(f->mem);
    memset(f, 0, sizeof *f);
}

const char *goblin__hub_form_get(const goblin__hub_form *f, const char *name) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->name[i], name)) return f->value[i];
    return NULL;
}

bool goblin__hub_cookie(const char *header, const char *name, char *out, size_t cap) {
    if (!header) return false;
    size_t k = strlen(name);
    const char *p = header;
    while (*p) {
        while (*p == ' ' || *p == ';') p++;
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > k && !strncmp(p, name, k) && p[k] == '=') {
            size_t v = len - k - 1;
            if (v >= cap) return false;
            memcpy(out, p + k + 1, v);
            out[v] = 0;
            return true;
        }
        p += len;
    }
    return false;
}
