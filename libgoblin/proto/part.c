/* libgoblin/proto/part.c - parts of a worker's large messages (part.h). */
#include "part.h"

#include <string.h>

#include "base/errf.h"

static uint64_t r64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void w64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

bool goblin__part_is(const uint8_t *buf, size_t len) {
    return len >= 4 && memcmp(buf, "GBLP", 4) == 0;
}

void goblin__part_header(uint8_t out[GOBLIN__PART_HEADER], uint64_t total, uint64_t offset,
                         uint64_t n) {
    memcpy(out, "GBLP", 4);
    memset(out + 4, 0, 4);
    w64(out + 8, total);
    w64(out + 16, offset);
    w64(out + 24, n);
}

goblin_err goblin__part_decode(const uint8_t *buf, size_t len, uint64_t max_total, uint64_t *total,
                               uint64_t *offset, const uint8_t **data, size_t *n, char *msg,
                               size_t cap) {
    if (len < GOBLIN__PART_HEADER || !goblin__part_is(buf, len) || buf[4] | buf[5] | buf[6] | buf[7])
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "bad part header");
    uint64_t t = r64(buf + 8), o = r64(buf + 16), k = r64(buf + 24);
    if (k == 0 || k > GOBLIN__PART_MAX || k != len - GOBLIN__PART_HEADER || o > t || k > t - o)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "part of %llu bytes at %llu of %llu does not "
                            "add up", (unsigned long long)k, (unsigned long long)o,
                            (unsigned long long)t);
    if (t > max_total)
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "a message of %llu bytes in parts is over "
                            "the limit of %llu", (unsigned long long)t, (unsigned long long)max_total);
    *total = t;
    *offset = o;
    *data = buf + GOBLIN__PART_HEADER;
    *n = (size_t)k;
    return GOBLIN_OK;
}
