/* libgoblin/graph/graph_format.c - the versioned binary graph format (see
 * docs/graph-format.md). All integers little-endian.
 *
 *   header : "GBLG" u16 format_version u16 flags(0) u32 catalog_version
 *            u32 n_nodes u32 n_outputs
 *   node   : u16 op u8 dtype u8 rank i64 shape[rank] u32 n_inputs u32 input[n_inputs]
 *            u8 n_attrs { u8 key u8 count (i64|f64 bits)[count] }[n_attrs]
 *            u64 payload_size u8 payload[payload_size]
 *   outputs: u32 node_id[n_outputs]
 *   trailer: u32 crc32 of every byte before it
 *
 * The decoder treats every byte as hostile: each read is bounds-checked, every
 * count is checked against the limits before anything is allocated from it, and
 * each node goes through the same validation and inference as the builder; the
 * encoded dtype/shape must then equal the inferred ones. It carries no names. */
#include <stdio.h>
#include <string.h>
#include "base/crc32.h"
#include "base/errf.h"
#include "graph_impl.h"

#define FORMAT_VERSION 1
static const uint8_t MAGIC[4] = {'G', 'B', 'L', 'G'};


/* ---- writer -------------------------------------------------------------- */

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} wbuf;

static void put(wbuf *w, const void *src, size_t n) {
    if (w->oom) return;
    if (w->len + n > w->cap) {
        size_t nc = w->cap ? w->cap : 256;
        while (nc < w->len + n) {
            if (nc > SIZE_MAX / 2) {
                w->oom = true;
                return;
            }
            nc *= 2;
        }
        uint8_t *q = goblin__alloc(nc);
        if (!q) {
            w->oom = true;
            return;
        }
        if (w->len) memcpy(q, w->p, w->len);
        goblin__free(w->p);
        w->p = q;
        w->cap = nc;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void put_u8(wbuf *w, uint8_t v) { put(w, &v, 1); }
static void put_u16(wbuf *w, uint16_t v) {
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    put(w, b, 2);
}
static void put_u32(wbuf *w, uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, 4);
}
static void put_u64(wbuf *w, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, 8);
}

goblin_err goblin_graph_serialize(const goblin_graph *g, uint8_t **out_buf, size_t *out_len) {
    if (!g || !out_buf || !out_len) return GOBLIN_EINVAL;
    wbuf w = {0};
    put(&w, MAGIC, 4);
    put_u16(&w, FORMAT_VERSION);
    put_u16(&w, 0);
    put_u32(&w, GOBLIN_CATALOG_VERSION);
    put_u32(&w, (uint32_t)g->n_nodes);
    put_u32(&w, (uint32_t)g->n_outputs);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const goblin__node *n = &g->nodes[i];
        put_u16(&w, (uint16_t)n->op);
        put_u8(&w, (uint8_t)n->dtype);
        put_u8(&w, (uint8_t)n->rank);
        for (int32_t d = 0; d < n->rank; d++) put_u64(&w, (uint64_t)n->shape[d]);
        put_u32(&w, (uint32_t)n->n_inputs);
        for (int32_t j = 0; j < n->n_inputs; j++) put_u32(&w, (uint32_t)n->inputs[j]);
        put_u8(&w, (uint8_t)n->n_attrs);
        for (int32_t a = 0; a < n->n_attrs; a++) {
            const goblin_attr *at = &n->attrs[a];
            put_u8(&w, (uint8_t)at->key);
            put_u8(&w, (uint8_t)at->count);
            if (goblin_attr_key_kind(at->key) == GOBLIN_ATTR_KIND_INTS) {
                for (int32_t k = 0; k < at->count; k++) put_u64(&w, (uint64_t)at->v.ints[k]);
            } else {
                uint64_t bits;
                memcpy(&bits, &at->v, 8);
                put_u64(&w, bits);
            }
        }
        put_u64(&w, (uint64_t)n->payload_size);
        if (n->payload_size) put(&w, n->payload, n->payload_size);
    }
    for (int32_t o = 0; o < g->n_outputs; o++) put_u32(&w, (uint32_t)g->output_ids[o]);
    if (!w.oom) put_u32(&w, goblin__crc32(0, w.p, w.len));
    if (w.oom) {
        goblin__free(w.p);
        return GOBLIN_ENOMEM;
    }
    *out_buf = w.p;
    *out_len = w.len;
    return GOBLIN_OK;
}

/* ---- reader -------------------------------------------------------------- */

typedef struct rbuf {
    const uint8_t *p;
    size_t len, pos;
} rbuf;

static bool get(rbuf *r, void *dst, size_t n) {
    if (n > r->len - r->pos) return false;
    memcpy(dst, r->p + r->pos, n);
    r->pos += n;
    return true;
}
static bool get_u8(rbuf *r, uint8_t *v) { return get(r, v, 1); }
static bool get_u16(rbuf *r, uint16_t *v) {
    uint8_t b[2];
    if (!get(r, b, 2)) return false;
    *v = (uint16_t)(b[0] | (b[1] << 8));
    return true;
}
static bool get_u32(rbuf *r, uint32_t *v) {
    uint8_t b[4];
    if (!get(r, b, 4)) return false;
    *v = 0;
    for (int i = 0; i < 4; i++) *v |= (uint32_t)b[i] << (8 * i);
    return true;
}
static bool get_u64(rbuf *r, uint64_t *v) {
    uint8_t b[8];
    if (!get(r, b, 8)) return false;
    *v = 0;
    for (int i = 0; i < 8; i++) *v |= (uint64_t)b[i] << (8 * i);
    return true;
}

void goblin_graph_decode_limits_default(goblin_graph_decode_limits *l) {
    if (!l) return;
    l->max_nodes = GOBLIN_GRAPH_MAX_NODES;
    l->max_inputs_per_node = GOBLIN_GRAPH_MAX_INPUTS_PER_NODE;
    l->max_const_bytes = GOBLIN_GRAPH_MAX_CONST_BYTES;
    l->max_numel = GOBLIN_MAX_NUMEL;
}

#define DFAIL(code, ...)                                                                      \
    do {                                                                                      \
        if (err_msg && err_cap) snprintf(err_msg, err_cap, __VA_ARGS__);                     \
        e = (code);                                                                           \
        goto fail;                                                                            \
    } while (0)

goblin_err goblin_graph_deserialize(const uint8_t *buf, size_t len,
                                    const goblin_graph_decode_limits *limits, goblin_graph **out,
                                    goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, err_msg, err_cap);
    if (!out || (!buf && len)) return GOBLIN_EINVAL;
    if (err_msg && err_cap) err_msg[0] = 0;
    goblin_graph_decode_limits lim;
    if (limits) lim = *limits;
    else goblin_graph_decode_limits_default(&lim);
    goblin_err e = GOBLIN_OK;
    goblin_graph *g = NULL;
    int32_t *ins = NULL;
    rbuf r = {buf, len, 0};

    uint8_t magic[4];
    uint16_t ver, flags;
    uint32_t cat, n_nodes, n_outputs;
    if (len < 4 + 2 + 2 + 4 + 4 + 4 + 4) DFAIL(GOBLIN_EFORMAT, "truncated: %zu bytes is shorter than a header", len);
    get(&r, magic, 4);
    if (memcmp(magic, MAGIC, 4) != 0) DFAIL(GOBLIN_EFORMAT, "not a goblin graph (bad magic)");
    get_u16(&r, &ver);
    get_u16(&r, &flags);
    get_u32(&r, &cat);
    if (ver != FORMAT_VERSION) DFAIL(GOBLIN_EVERSION, "graph format version %u, this library reads %u", ver, FORMAT_VERSION);
    if (cat != GOBLIN_CATALOG_VERSION)
        DFAIL(GOBLIN_EVERSION, "catalogue version %u, this library has %u", cat, GOBLIN_CATALOG_VERSION);
    if (flags != 0) DFAIL(GOBLIN_EFORMAT, "unknown flags 0x%x", flags);
    uint32_t crc_stored, crc = goblin__crc32(0, buf, len - 4);
    crc_stored = (uint32_t)buf[len - 4] | (uint32_t)buf[len - 3] << 8 | (uint32_t)buf[len - 2] << 16 |
                 (uint32_t)buf[len - 1] << 24;
    if (crc != crc_stored) DFAIL(GOBLIN_EFORMAT, "checksum mismatch (corrupted or truncated)");
    r.len = len - 4; /* the body ends before the checksum */
    get_u32(&r, &n_nodes);
    get_u32(&r, &n_outputs);
    if (n_nodes > (uint32_t)lim.max_nodes) DFAIL(GOBLIN_ELIMIT, "%u nodes exceed the limit %d", n_nodes, lim.max_nodes);
    if (n_outputs > n_nodes * 4u + 16u) DFAIL(GOBLIN_ELIMIT, "%u outputs for %u nodes", n_outputs, n_nodes);

    e = goblin_graph_new(&g);
    if (e) DFAIL(e, "out of memory");
    int64_t const_total = 0;
    for (uint32_t i = 0; i < n_nodes; i++) {
        goblin__node p;
        memset(&p, 0, sizeof p);
        uint16_t op;
        uint8_t dt, rank, n_attrs;
        uint32_t n_in;
        if (!get_u16(&r, &op) || !get_u8(&r, &dt) || !get_u8(&r, &rank))
            DFAIL(GOBLIN_EFORMAT, "truncated in node %u", i);
        if (rank > GOBLIN_MAX_RANK) DFAIL(GOBLIN_EFORMAT, "node %u: rank %u > %d", i, rank, GOBLIN_MAX_RANK);
        p.op = (goblin_op)op;
        p.dtype = (goblin_dtype)dt;
        p.rank = rank;
        for (uint8_t d = 0; d < rank; d++) {
            uint64_t v;
            if (!get_u64(&r, &v)) DFAIL(GOBLIN_EFORMAT, "truncated in node %u shape", i);
            if (v > (uint64_t)GOBLIN_MAX_DIM) DFAIL(GOBLIN_ELIMIT, "node %u: dimension %llu too large", i, (unsigned long long)v);
            p.shape[d] = (int64_t)v;
        }
        if (!get_u32(&r, &n_in)) DFAIL(GOBLIN_EFORMAT, "truncated in node %u", i);
        if (n_in > (uint32_t)lim.max_inputs_per_node)
            DFAIL(GOBLIN_ELIMIT, "node %u: %u inputs exceed the limit %d", i, n_in, lim.max_inputs_per_node);
        if ((size_t)n_in * 4 > r.len - r.pos) DFAIL(GOBLIN_EFORMAT, "truncated in node %u inputs", i);
        goblin__free(ins);
        ins = goblin__calloc(n_in ? n_in : 1, sizeof *ins);
        if (!ins) DFAIL(GOBLIN_ENOMEM, "out of memory");
        for (uint32_t j = 0; j < n_in; j++) {
            uint32_t v;
            get_u32(&r, &v);
            if (v >= i) DFAIL(GOBLIN_EFORMAT, "node %u: input %u refers to node %u, not an earlier node (cycle or forward reference)", i, j, v);
            ins[j] = (int32_t)v;
        }
        p.inputs = ins;
        p.n_inputs = (int32_t)n_in;
        if (!get_u8(&r, &n_attrs)) DFAIL(GOBLIN_EFORMAT, "truncated in node %u", i);
        if (n_attrs > GOBLIN__MAX_OP_ATTRS) DFAIL(GOBLIN_ELIMIT, "node %u: %u attributes", i, n_attrs);
        goblin_attr attrs[GOBLIN__MAX_OP_ATTRS];
        memset(attrs, 0, sizeof attrs);
        for (uint8_t a = 0; a < n_attrs; a++) {
            uint8_t key, count;
            if (!get_u8(&r, &key) || !get_u8(&r, &count)) DFAIL(GOBLIN_EFORMAT, "truncated in node %u attributes", i);
            goblin_attr_kind kind = goblin_attr_key_kind((goblin_attr_key)key);
            if (kind == GOBLIN_ATTR_KIND_COUNT) DFAIL(GOBLIN_EFORMAT, "node %u: unknown attribute key %u", i, key);
            attrs[a].key = (goblin_attr_key)key;
            if (kind == GOBLIN_ATTR_KIND_INTS) {
                if (count > GOBLIN_MAX_ATTR_INTS) DFAIL(GOBLIN_ELIMIT, "node %u: attribute with %u values", i, count);
                attrs[a].count = count;
                for (uint8_t k = 0; k < count; k++) {
                    uint64_t v;
                    if (!get_u64(&r, &v)) DFAIL(GOBLIN_EFORMAT, "truncated in node %u attributes", i);
                    attrs[a].v.ints[k] = (int64_t)v;
                }
            } else {
                uint64_t v;
                if (count != 1) DFAIL(GOBLIN_EFORMAT, "node %u: scalar attribute with count %u", i, count);
                if (!get_u64(&r, &v)) DFAIL(GOBLIN_EFORMAT, "truncated in node %u attributes", i);
                attrs[a].count = 1;
                memcpy(&attrs[a].v, &v, 8);
            }
        }
        p.attrs = attrs;
        p.n_attrs = n_attrs;
        uint64_t psize;
        if (!get_u64(&r, &psize)) DFAIL(GOBLIN_EFORMAT, "truncated in node %u", i);
        if (psize > r.len - r.pos) DFAIL(GOBLIN_EFORMAT, "node %u: payload of %llu bytes runs past the end", i, (unsigned long long)psize);
        if (p.op == GOBLIN_OP_CONSTANT) {
            const_total += (int64_t)psize;
            if (const_total > lim.max_const_bytes)
                DFAIL(GOBLIN_ELIMIT, "constants exceed %lld bytes", (long long)lim.max_const_bytes);
        } else if (p.op != GOBLIN_OP_FORMULA && psize != 0) {
            DFAIL(GOBLIN_EFORMAT, "node %u: op %u carries no payload", i, op);
        }
        p.payload = (void *)(r.p + r.pos);
        p.payload_size = (size_t)psize;
        r.pos += (size_t)psize;
        int64_t numel;
        if (goblin__shape_numel(p.rank, p.shape, &numel) || numel > lim.max_numel)
            DFAIL(GOBLIN_ELIMIT, "node %u: more than %lld elements", i, (long long)lim.max_numel);
        int32_t id;
        e = goblin__graph_add_node(g, &p, &id);
        if (e) DFAIL(e, "%s", goblin_graph_error(g));
        const goblin__node *n = &g->nodes[id];
        bool same = n->dtype == p.dtype && n->rank == p.rank;
        for (int32_t d = 0; same && d < n->rank; d++) same = n->shape[d] == p.shape[d];
        if (!same) DFAIL(GOBLIN_EFORMAT, "node %u: encoded dtype/shape disagree with the inferred ones", i);
    }
    for (uint32_t o = 0; o < n_outputs; o++) {
        uint32_t v;
        if (!get_u32(&r, &v)) DFAIL(GOBLIN_EFORMAT, "truncated in outputs");
        if (v >= n_nodes) DFAIL(GOBLIN_EFORMAT, "output %u refers to node %u of %u", o, v, n_nodes);
        e = goblin_graph_output(g, (int32_t)v);
        if (e) DFAIL(e, "out of memory");
    }
    if (r.pos != r.len) DFAIL(GOBLIN_EFORMAT, "%zu trailing bytes", r.len - r.pos);
    goblin__free(ins);
    *out = g;
    return GOBLIN_OK;
fail:
    goblin__free(ins);
    goblin_graph_free(g);
    return e;
}
