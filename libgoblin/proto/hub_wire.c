/* libgoblin/proto/hub_wire.c - the hub's machine protocol (see hub_wire.h). */
#include "hub_wire.h"

#include <stdio.h>
#include <string.h>

#include "base/errf.h"

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

bool goblin__hubw_is(const uint8_t *buf, size_t len) { return len >= 4 && !memcmp(buf, "GBLH", 4); }

static bool zeros(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

goblin_err goblin__hubw_encode(const goblin__hubw_msg *m, uint8_t *out, size_t *len) {
    if (!m || !out || !len) return GOBLIN_EINVAL;
    uint8_t *b = out + GOBLIN__HUBW_HEADER;
    size_t body = 0;
    switch (m->type) {
    case GOBLIN__HUBW_NODE_HELLO: {
        size_t k = strnlen(m->key, GOBLIN__HUBW_KEY_MAX + 1);
        if (k < 1 || k > GOBLIN__HUBW_KEY_MAX) return GOBLIN_EINVAL;
        put32(b, m->max_workers);
        put32(b + 4, (uint32_t)k);
        memcpy(b + 8, m->key, k);
        body = pad8(8 + k);
        memset(b + 8 + k, 0, body - 8 - k);
        break;
    }
    case GOBLIN__HUBW_NODE_ACK:
        put64(b, (uint64_t)m->lab);
        put32(b + 8, m->weight);
        put32(b + 12, 0);
        body = 16;
        break;
    case GOBLIN__HUBW_OPEN: {
        int used = m->origin_kind == 4 ? 3 : m->origin_kind == 6 ? 6 : m->origin_kind == 0 ? 0 : -1;
        if (used < 0 || !zeros(m->origin + used, sizeof m->origin - (size_t)used)) return GOBLIN_EINVAL;
        memcpy(b, m->ticket, GOBLIN__HUBW_TICKET);
        b[GOBLIN__HUBW_TICKET] = m->origin_kind;
        memcpy(b + GOBLIN__HUBW_TICKET + 1, m->origin, sizeof m->origin);
        body = GOBLIN__HUBW_TICKET + 8;
        break;
    }
    case GOBLIN__HUBW_ATTACH:
        memcpy(b, m->ticket, GOBLIN__HUBW_TICKET);
        body = GOBLIN__HUBW_TICKET;
        break;
    case GOBLIN__HUBW_REFUSE: {
        size_t k = strnlen(m->text, GOBLIN__HUBW_TEXT_MAX);
        put32(b, m->reason);
        put16(b + 4, (uint16_t)k);
        put16(b + 6, 0);
        for (size_t i = 0; i < k; i++) {
            unsigned char c = (unsigned char)m->text[i];
            b[8 + i] = c >= 0x20 && c <= 0x7e ? c : '?';
        }
        body = pad8(8 + k);
        memset(b + 8 + k, 0, body - 8 - k);
        break;
    }
    case GOBLIN__HUBW_HEARTBEAT: body = 0; break;
    case GOBLIN__HUBW_OWNER:
        if (m->owner <= 0) return GOBLIN_EINVAL;
        memcpy(b, m->identity, GOBLIN__HUBW_IDENTITY);
        put64(b + 32, (uint64_t)m->owner);
        body = 40;
        break;
    case GOBLIN__HUBW_WORK:
        memcpy(b, m->identity, GOBLIN__HUBW_IDENTITY);
        put32(b + 32, m->tasks);
        put32(b + 36, m->accepted);
        put32(b + 40, m->rejected);
        put32(b + 44, 0);
        body = 48;
        break;
    case GOBLIN__HUBW_QUARANTINE: {
        size_t k = strnlen(m->reason_text, GOBLIN__HUBW_REASON_MAX);
        if (k < 1) return GOBLIN_EINVAL;
        memcpy(b, m->identity, GOBLIN__HUBW_IDENTITY);
        put16(b + 32, (uint16_t)k);
        put16(b + 34, 0);
        put32(b + 36, 0);
        for (size_t i = 0; i < k; i++) {
            unsigned char c = (unsigned char)m->reason_text[i];
            b[40 + i] = c >= 0x20 && c <= 0x7e ? c : '?';
        }
        body = pad8(40 + k);
        memset(b + 40 + k, 0, body - 40 - k);
        break;
    }
    case GOBLIN__HUBW_NODE_DIRECT: {
        size_t k = strnlen(m->url, GOBLIN__HUBW_URL_MAX + 1);
        if (k < 1 || k > GOBLIN__HUBW_URL_MAX) return GOBLIN_EINVAL;
        for (size_t i = 0; i < k; i++)
            if ((unsigned char)m->url[i] < 0x21 || (unsigned char)m->url[i] > 0x7e) return GOBLIN_EINVAL;
        memcpy(b, m->fingerprint, GOBLIN__HUBW_FINGERPRINT);
        put16(b + 32, (uint16_t)k);
        put16(b + 34, 0);
        put32(b + 36, 0);
        memcpy(b + 40, m->url, k);
        body = pad8(40 + k);
        memset(b + 40 + k, 0, body - 40 - k);
        break;
    }
    case GOBLIN__HUBW_INTRODUCE: {
        int used = m->origin_kind == 4 ? 3 : m->origin_kind == 6 ? 6 : m->origin_kind == 0 ? 0 : -1;
        if (used < 0 || !zeros(m->origin + used, sizeof m->origin - (size_t)used)) return GOBLIN_EINVAL;
        memcpy(b, m->ticket, GOBLIN__HUBW_TICKET);
        memcpy(b + 32, m->identity, GOBLIN__HUBW_IDENTITY);
        b[64] = m->origin_kind;
        memcpy(b + 65, m->origin, sizeof m->origin);
        body = 72;
        break;
    }
    case GOBLIN__HUBW_END:
        memcpy(b, m->identity, GOBLIN__HUBW_IDENTITY);
        body = GOBLIN__HUBW_IDENTITY;
        break;
    case GOBLIN__HUBW_LEFT:
    case GOBLIN__HUBW_READY:
        memcpy(b, m->identity, GOBLIN__HUBW_IDENTITY);
        memcpy(b + 32, m->ticket, GOBLIN__HUBW_TICKET);
        body = GOBLIN__HUBW_IDENTITY + GOBLIN__HUBW_TICKET;
        break;
    default: return GOBLIN_EINVAL;
    }
    memcpy(out, "GBLH", 4);
    put16(out + 4, GOBLIN__HUBW_VERSION);
    out[6] = (uint8_t)m->type;
    out[7] = 0;
    put64(out + 8, 0);
    put64(out + 16, body);
    *len = GOBLIN__HUBW_HEADER + body;
    return GOBLIN_OK;
}

goblin_err goblin__hubw_decode(const uint8_t *buf, size_t len, goblin__hubw_msg *m, char *msg,
                               size_t cap) {
    if (!buf || !m) return goblin__errf(msg, cap, GOBLIN_EINVAL, "no buffer");
    if (len > GOBLIN__HUBW_MAX)
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "hub message of %zu bytes (at most %d)", len,
                            GOBLIN__HUBW_MAX);
    if (len < GOBLIN__HUBW_HEADER || memcmp(buf, "GBLH", 4))
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "not a hub message (no GBLH header)");
    if (get16(buf + 4) != GOBLIN__HUBW_VERSION)
        return goblin__errf(msg, cap, GOBLIN_EVERSION, "hub protocol version %u (this library speaks %d)",
                            (unsigned)get16(buf + 4), GOBLIN__HUBW_VERSION);
    unsigned type = buf[6];
    if (buf[7] || !zeros(buf + 8, 8))
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "hub message: reserved header bytes not zero");
    uint64_t body = get64(buf + 16);
    if (body != len - GOBLIN__HUBW_HEADER)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "hub message: body_length %llu, %zu bytes came",
                            (unsigned long long)body, len - GOBLIN__HUBW_HEADER);
    const uint8_t *b = buf + GOBLIN__HUBW_HEADER;
    goblin__hubw_msg out;
    memset(&out, 0, sizeof out);
    out.type = (goblin__hubw_type)type;
    switch (type) {
    case GOBLIN__HUBW_NODE_HELLO: {
        if (body < 8) goto short_body;
        uint32_t k = get32(b + 4);
        if (k < 1 || k > GOBLIN__HUBW_KEY_MAX || body != pad8(8 + (size_t)k) || !zeros(b + 8 + k, body - 8 - k))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "NODE_HELLO: key of %u bytes in a %llu-byte body",
                                (unsigned)k, (unsigned long long)body);
        for (uint32_t i = 0; i < k; i++)
            if (b[8 + i] < 0x21 || b[8 + i] > 0x7e)
                return goblin__errf(msg, cap, GOBLIN_EFORMAT, "NODE_HELLO: key byte %u is not printable", (unsigned)i);
        out.max_workers = get32(b);
        out.key_len = k;
        memcpy(out.key, b + 8, k);
        break;
    }
    case GOBLIN__HUBW_NODE_ACK:
        if (body != 16) goto short_body;
        if (!zeros(b + 12, 4)) return goblin__errf(msg, cap, GOBLIN_EFORMAT, "NODE_ACK: reserved bytes");
        out.lab = (int64_t)get64(b);
        out.weight = get32(b + 8);
        break;
    case GOBLIN__HUBW_OPEN: {
        if (body != GOBLIN__HUBW_TICKET + 8) goto short_body;
        uint8_t kind = b[GOBLIN__HUBW_TICKET];
        int used = kind == 4 ? 3 : kind == 6 ? 6 : kind == 0 ? 0 : -1;
        if (used < 0 || !zeros(b + GOBLIN__HUBW_TICKET + 1 + used, 7 - (size_t)used))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "OPEN: origin of kind %u", (unsigned)kind);
        memcpy(out.ticket, b, GOBLIN__HUBW_TICKET);
        out.origin_kind = kind;
        memcpy(out.origin, b + GOBLIN__HUBW_TICKET + 1, 7);
        break;
    }
    case GOBLIN__HUBW_ATTACH:
        if (body != GOBLIN__HUBW_TICKET) goto short_body;
        memcpy(out.ticket, b, GOBLIN__HUBW_TICKET);
        break;
    case GOBLIN__HUBW_REFUSE: {
        if (body < 8) goto short_body;
        uint16_t k = get16(b + 4);
        if (k > GOBLIN__HUBW_TEXT_MAX || get16(b + 6) || body != pad8(8 + (size_t)k) ||
            !zeros(b + 8 + k, body - 8 - k))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "REFUSE: text of %u bytes in a %llu-byte body",
                                (unsigned)k, (unsigned long long)body);
        for (uint16_t i = 0; i < k; i++)
            if (b[8 + i] < 0x20 || b[8 + i] > 0x7e)
                return goblin__errf(msg, cap, GOBLIN_EFORMAT, "REFUSE: text byte %u is not printable", (unsigned)i);
        out.reason = get32(b);
        memcpy(out.text, b + 8, k);
        break;
    }
    case GOBLIN__HUBW_HEARTBEAT:
        if (body != 0) goto short_body;
        break;
    case GOBLIN__HUBW_OWNER:
        if (body != 40) goto short_body;
        memcpy(out.identity, b, GOBLIN__HUBW_IDENTITY);
        out.owner = (int64_t)get64(b + 32);
        if (out.owner <= 0) return goblin__errf(msg, cap, GOBLIN_EFORMAT, "OWNER: owner %lld", (long long)out.owner);
        break;
    case GOBLIN__HUBW_WORK:
        if (body != 48) goto short_body;
        memcpy(out.identity, b, GOBLIN__HUBW_IDENTITY);
        out.tasks = get32(b + 32);
        out.accepted = get32(b + 36);
        out.rejected = get32(b + 40);
        if (get32(b + 44)) return goblin__errf(msg, cap, GOBLIN_EFORMAT, "WORK: reserved bytes");
        break;
    case GOBLIN__HUBW_QUARANTINE: {
        if (body < 40) goto short_body;
        uint16_t k = get16(b + 32);
        if (k < 1 || k > GOBLIN__HUBW_REASON_MAX || get16(b + 34) || get32(b + 36) ||
            body != pad8(40 + (size_t)k) || !zeros(b + 40 + k, body - 40 - k))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "QUARANTINE: reason of %u bytes in a %llu-byte body",
                                (unsigned)k, (unsigned long long)body);
        for (uint16_t i = 0; i < k; i++)
            if (b[40 + i] < 0x20 || b[40 + i] > 0x7e)
                return goblin__errf(msg, cap, GOBLIN_EFORMAT, "QUARANTINE: reason byte %u is not printable",
                                    (unsigned)i);
        memcpy(out.identity, b, GOBLIN__HUBW_IDENTITY);
        memcpy(out.reason_text, b + 40, k);
        break;
    }
    case GOBLIN__HUBW_NODE_DIRECT: {
        if (body < 40) goto short_body;
        uint16_t k = get16(b + 32);
        if (k < 1 || k > GOBLIN__HUBW_URL_MAX || get16(b + 34) || get32(b + 36) || body != pad8(40 + (size_t)k) ||
            !zeros(b + 40 + k, body - 40 - k))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "NODE_DIRECT: url of %u bytes in a %llu-byte body",
                                (unsigned)k, (unsigned long long)body);
        for (uint16_t i = 0; i < k; i++)
            if (b[40 + i] < 0x21 || b[40 + i] > 0x7e)
                return goblin__errf(msg, cap, GOBLIN_EFORMAT, "NODE_DIRECT: url byte %u is not printable", (unsigned)i);
        memcpy(out.fingerprint, b, GOBLIN__HUBW_FINGERPRINT);
        memcpy(out.url, b + 40, k);
        break;
    }
    case GOBLIN__HUBW_INTRODUCE: {
        if (body != 72) goto short_body;
        uint8_t kind = b[64];
        int used = kind == 4 ? 3 : kind == 6 ? 6 : kind == 0 ? 0 : -1;
        if (used < 0 || !zeros(b + 65 + used, 7 - (size_t)used))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "INTRODUCE: origin of kind %u", (unsigned)kind);
        memcpy(out.ticket, b, GOBLIN__HUBW_TICKET);
        memcpy(out.identity, b + 32, GOBLIN__HUBW_IDENTITY);
        out.origin_kind = kind;
        memcpy(out.origin, b + 65, 7);
        break;
    }
    case GOBLIN__HUBW_END:
        if (body != GOBLIN__HUBW_IDENTITY) goto short_body;
        memcpy(out.identity, b, GOBLIN__HUBW_IDENTITY);
        break;
    case GOBLIN__HUBW_LEFT:
    case GOBLIN__HUBW_READY:
        if (body != GOBLIN__HUBW_IDENTITY + GOBLIN__HUBW_TICKET) goto short_body;
        memcpy(out.identity, b, GOBLIN__HUBW_IDENTITY);
        memcpy(out.ticket, b + 32, GOBLIN__HUBW_TICKET);
        break;
    default: return goblin__errf(msg, cap, GOBLIN_EPROTO, "unknown hub message type %u", type);
    }
    *m = out;
    return GOBLIN_OK;
short_body:
    return goblin__errf(msg, cap, GOBLIN_EFORMAT, "hub message type %u: a body of %llu bytes is wrong", type,
                        (unsigned long long)body);
}

void goblin__hubw_identity_hex(const uint8_t id[GOBLIN__HUBW_IDENTITY], char hex[2 * GOBLIN__HUBW_IDENTITY + 1]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < GOBLIN__HUBW_IDENTITY; i++) {
        hex[2 * i] = digits[id[i] >> 4];
        hex[2 * i + 1] = digits[id[i] & 15];
    }
    hex[2 * GOBLIN__HUBW_IDENTITY] = 0;
}

bool goblin__hubw_identity_parse(const char *hex, uint8_t id[GOBLIN__HUBW_IDENTITY]) {
    if (!hex || strlen(hex) != 2 * GOBLIN__HUBW_IDENTITY) return false;
    uint8_t out[GOBLIN__HUBW_IDENTITY];
    for (int i = 0; i < 2 * GOBLIN__HUBW_IDENTITY; i++) {
        char c = hex[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        out[i / 2] = (uint8_t)(i % 2 ? out[i / 2] | d : d << 4);
    }
    memcpy(id, out, sizeof out);
    return true;
}
