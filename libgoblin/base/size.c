/* libgoblin/base/size.c - sizes of memory written as text (goblin_size_parse, alloc.h). */
#include <goblin/alloc.h>

#include <ctype.h>
#include <stdint.h>

__extension__ typedef unsigned __int128 u128; /* gcc and clang: exact scaling of 64-bit sizes */

goblin_err goblin_size_parse(const char *s, uint64_t *out) {
    if (!s || !out) return GOBLIN_EINVAL;
    while (isspace((unsigned char)*s)) s++;
    /* integer part, then up to 19 fraction digits as num / den */
    u128 whole = 0;
    uint64_t num = 0, den = 1;
    int digits = 0;
    for (; isdigit((unsigned char)*s); s++, digits++) {
        whole = whole * 10 + (unsigned)(*s - '0');
        if (whole > UINT64_MAX) return GOBLIN_ERANGE;
    }
    if (*s == '.') {
        s++;
        for (; isdigit((unsigned char)*s); s++, digits++)
            if (den <= UINT64_MAX / 10 / 10) {
                num = num * 10 + (uint64_t)(*s - '0');
                den *= 10;
            }
    }
    if (digits == 0) return GOBLIN_EINVAL;
    while (isspace((unsigned char)*s)) s++; /* "512 M" */
    unsigned shift = 0;
    switch (*s) {
    case 'k': case 'K': shift = 10; s++; break;
    case 'm': case 'M': shift = 20; s++; break;
    case 'g': case 'G': shift = 30; s++; break;
    case 't': case 'T': shift = 40; s++; break;
    default: break;
    }
    if (shift && (s[0] == 'i' || s[0] == 'I') && (s[1] == 'b' || s[1] == 'B')) s += 2;
    else if (s[0] == 'b' || s[0] == 'B') s++;
    while (isspace((unsigned char)*s)) s++;
    if (*s) return GOBLIN_EINVAL;
    u128 v = (whole << shift) + (((u128)num << shift) / den);
    if (v > UINT64_MAX) return GOBLIN_ERANGE;
    *out = (uint64_t)v;
    return GOBLIN_OK;
}
