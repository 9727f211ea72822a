/* libgoblin/proto/wire.c - message framing for the distributed runtime (see
 * libgoblin/proto/wire.h and docs/wire-protocol.md). All integers little-endian.
 *
 * Both directions run in two passes over the same code, so what is measured is
 * exactly what is written or read:
 *   encode: pass 1 validates the message and counts bytes, pass 2 writes them;
 *   decode: pass 1 validates every byte and sizes one arena holding the message,
 *           its tensor descriptors and the copied data; pass 2 fills the arena.
 * A decode therefore allocates once, and only after the whole message is known to
 * be well-formed and within the limits. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "wire.h"
#include "base/alloc.h"
#include "wire_impl.h"

static const uint8_t MAGIC[4] = {'G', 'B', 'L', 'W'};

/* Tensor data and the TASK graph are followed by zero bytes up to the next multiple
 * of ALIGN of the message offset, so tensor data is 8-byte aligned in any 8-byte
 * aligned receive buffer and can be used in place. */
#define ALIGN 8u
/* Alignment of tensor data copied into a decoded message (SIMD-friendly). */
#define COPY_ALIGN 64u
/* Bytes of one tensor before its shape: u8 dtype, u8 rank, 6 zero bytes. */
#define TENSOR_HEAD 8u
/* Smallest encoding of one tensor (rank 0 head + byte count): bounds counts. */
#define TENSOR_MIN 16u

static size_t dtype_size(uint32_t dt) {
    switch (dt) {
#define WIRE__DT_SIZE(name, value, str, size) case GOBLIN_DTYPE_##name: return size;
        GOBLIN_DTYPE_MAP(WIRE__DT_SIZE)
#undef WIRE__DT_SIZE
    default: return 0;
    }
}

static const char *const TYPE_NAMES[GOBLIN_WIRE_TYPE_COUNT] = {
    [GOBLIN_WIRE_TYPE_HELLO] = "HELLO",
    [GOBLIN_WIRE_TYPE_HELLO_ACK] = "HELLO_ACK",
    [GOBLIN_WIRE_TYPE_REFUSE] = "REFUSE",
    [GOBLIN_WIRE_TYPE_LEASE_REQUEST] = "LEASE_REQUEST",
    [GOBLIN_WIRE_TYPE_TASK] = "TASK",
    [GOBLIN_WIRE_TYPE_RESULT] = "RESULT",
    [GOBLIN_WIRE_TYPE_ABANDON] = "ABANDON",
    [GOBLIN_WIRE_TYPE_HEARTBEAT] = "HEARTBEAT",
    [GOBLIN_WIRE_TYPE_ERROR] = "ERROR",
    [GOBLIN_WIRE_TYPE_CHALLENGE] = "CHALLENGE",
    [GOBLIN_WIRE_TYPE_PROOF] = "PROOF",
    [GOBLIN_WIRE_TYPE_INTRODUCE] = "INTRODUCE",
};

const char *goblin__wire_type_name(goblin__wire_type type) {
    if ((unsigned)type >= GOBLIN_WIRE_TYPE_COUNT) return NULL;
    return TYPE_NAMES[type];
}

static bool type_known(uint32_t t) { return t >= 1 && t < GOBLIN_WIRE_TYPE_COUNT; }

/* Header flags a message of type @p t may carry (protocol 1.1). */
static uint32_t flags_allowed(uint32_t t) {
    return t == GOBLIN_WIRE_TYPE_HELLO_ACK ? GOBLIN_WIRE_FLAG_BATCH : 0;
}

static uint64_t pad_to_align(uint64_t off) { return (ALIGN - off % ALIGN) % ALIGN; }

static bool text_byte_ok(uint8_t c) { return c >= 0x20 && c <= 0x7e; }

/* Element count of a shape, or false if a dim is out of [0, GOBLIN_MAX_DIM] or the
 * count exceeds max_numel. A 0 dim makes the tensor empty whatever the other dims
 * are (each is still bounded), so the product is only formed when none is 0, and
 * it is compared with the limit at every step, so it cannot overflow. */
static bool shape_numel(int32_t rank, const int64_t *shape, int64_t max_numel, int64_t *out) {
    bool empty = false;
    for (int32_t d = 0; d < rank; d++) {
        if (shape[d] < 0 || shape[d] > GOBLIN_MAX_DIM) return false;
        if (shape[d] == 0) empty = true;
    }
    int64_t n = 1;
    for (int32_t d = 0; d < rank && !empty; d++)
        if (__builtin_mul_overflow(n, shape[d], &n) || n > max_numel) return false;
    *out = empty ? 0 : n;
    return true;
}

/* ==== encoder ============================================================== */

typedef struct wr {
    uint8_t *p;   /* NULL: only count */
    uint64_t len; /* bytes written (or counted) so far */
    uint64_t cap;
    bool over;    /* a write would have passed cap */
    bool strided; /* tensors may be strided views: gathered into the message */
    bool layout;  /* tensor data is neither read nor written: its offsets are recorded */
    size_t *offs; /* layout: offset of each tensor's data, in order (max_offs of them) */
    int32_t n_offs, max_offs;
} wr;

static void put(wr *w, const void *src, uint64_t n) {
    if (w->p) {
        if (w->over || n > w->cap - w->len) {
            w->over = true;
            return;
        }
        if (n) memcpy(w->p + w->len, src, (size_t)n);
    }
    w->len += n;
}

static void put_le(wr *w, uint64_t v, unsigned n) {
    uint8_t b[8];
    for (unsigned i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, n);
}
#define PUT_U8(w, v) put_le((w), (uint8_t)(v), 1)
#define PUT_U16(w, v) put_le((w), (uint16_t)(v), 2)
#define PUT_U32(w, v) put_le((w), (uint32_t)(v), 4)
#define PUT_U64(w, v) put_le((w), (uint64_t)(v), 8)

static void put_pad(wr *w) {
    static const uint8_t zeros[ALIGN] = {0};
    put(w, zeros, pad_to_align(w->len));
}

/* Gather the strided view @p t (numel * es == n bytes) row by row into the message:
 * the packing copy and the encoding copy in one. */
static void put_strided(wr *w, const goblin_tensor *t, size_t es, uint64_t n) {
    if (!w->p) {
        w->len += n;
        return;
    }
    if (w->over || n > w->cap - w->len) {
        w->over = true;
        return;
    }
    int32_t r = t->rank;
    int64_t inner = t->shape[r - 1], istr = t->strides[r - 1] * (int64_t)es;
    int64_t idx[GOBLIN_MAX_RANK] = {0};
    uint8_t *d = w->p + w->len;
    int64_t rows = inner ? (int64_t)(n / es) / inner : 0;
    for (int64_t q = 0; q < rows; q++) {
        const char *src = (const char *)t->data;
        for (int32_t k = 0; k < r - 1; k++) src += idx[k] * t->strides[k] * (int64_t)es;
        if (istr == (int64_t)es) {
            memcpy(d, src, (size_t)inner * es);
            d += (size_t)inner * es;
        } else {
            for (int64_t c = 0; c < inner; c++, d += es) memcpy(d, src + c * istr, es);
        }
        for (int32_t k = r - 2; k >= 0; k--) {
            if (++idx[k] < t->shape[k]) break;
            idx[k] = 0;
        }
    }
    w->len += n;
}

static goblin_err put_text(wr *w, const char *s) {
    size_t n = s ? strnlen(s, GOBLIN_WIRE_MAX_TEXT_BYTES) : 0;
    PUT_U16(w, n);
    if (!w->p) {
        w->len += n;
        return GOBLIN_OK;
    }
    /* sanitized byte by byte: the peer's decoder rejects anything unprintable */
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        PUT_U8(w, text_byte_ok(c) ? c : '?');
    }
    return GOBLIN_OK;
}

static goblin_err check_code(goblin_err code) {
    return (int64_t)code >= 1 && (int64_t)code <= 0xFFFF ? GOBLIN_OK : GOBLIN_EINVAL;
}

static goblin_err put_tensors(wr *w, const goblin_tensor *ts, int32_t n) {
    if (n < 0 || (n > 0 && !ts)) return GOBLIN_EINVAL;
    if (n > GOBLIN_WIRE_MAX_TENSORS) return GOBLIN_ELIMIT;
    for (int32_t i = 0; i < n; i++) {
        const goblin_tensor *t = &ts[i];
        size_t es = dtype_size((uint32_t)t->dtype);
        if (es == 0 || t->rank < 0 || t->rank > GOBLIN_MAX_RANK) return GOBLIN_EINVAL;
        for (int32_t d = 0; d < t->rank; d++) {
            if (t->shape[d] < 0) return GOBLIN_EINVAL;
            if (t->shape[d] > GOBLIN_MAX_DIM) return GOBLIN_ELIMIT;
        }
        int64_t numel;
        if (!shape_numel(t->rank, t->shape, GOBLIN_MAX_NUMEL, &numel)) return GOBLIN_ELIMIT;
        uint64_t nbytes = (uint64_t)numel * es; /* <= 2^46 * 8: no overflow */
        if (numel > 0 && !t->data && !w->layout) return GOBLIN_EINVAL;
        bool gather = numel > 1 && !w->layout && !goblin_tensor_is_contiguous(t);
        if (gather && !w->strided) return GOBLIN_EINVAL;
        if (nbytes > GOBLIN_WIRE_MAX_MESSAGE_BYTES) return GOBLIN_ELIMIT;
        PUT_U8(w, t->dtype);
        PUT_U8(w, t->rank);
        PUT_U16(w, 0);
        PUT_U32(w, 0);
        for (int32_t d = 0; d < t->rank; d++) PUT_U64(w, t->shape[d]);
        PUT_U64(w, nbytes);
        if (w->layout) {
            if (w->n_offs >= w->max_offs) return GOBLIN_EINVAL;
            if (w->offs) w->offs[w->n_offs] = (size_t)w->len;
            w->n_offs++;
            if (w->p && (w->over || nbytes > w->cap - w->len)) w->over = true;
            else w->len += nbytes; /* left for the caller to fill */
        } else if (gather)
            put_strided(w, t, es, nbytes);
        else
            put(w, t->data, nbytes);
        put_pad(w);
        /* keeps the running count far from overflow whatever the caller passes */
        if (w->len > GOBLIN_WIRE_MAX_MESSAGE_BYTES) return GOBLIN_ELIMIT;
    }
    return GOBLIN_OK;
}

static goblin_err put_body(wr *w, const goblin__wire_msg *m) {
    switch (m->type) {
    case GOBLIN_WIRE_TYPE_HELLO: {
        const goblin__wire_hello *h = &m->body.hello;
        if (h->backends == 0 || h->threads < 1 || h->threads > GOBLIN_WIRE_MAX_THREADS)
            return GOBLIN_EINVAL;
        if (h->token_len > GOBLIN_WIRE_MAX_TOKEN_BYTES) return GOBLIN_ELIMIT;
        if (h->token_len > 0 && !h->token) return GOBLIN_EINVAL;
        PUT_U32(w, h->catalog_version);
        PUT_U32(w, h->software_version);
        PUT_U32(w, h->backends);
        PUT_U32(w, h->threads);
        PUT_U64(w, h->memory_bytes);
        PUT_U32(w, h->token_len);
        put(w, h->token, h->token_len);
        return GOBLIN_OK;
    }
    case GOBLIN_WIRE_TYPE_HELLO_ACK: {
        const goblin__wire_hello_ack *a = &m->body.hello_ack;
        if (a->max_message_bytes < GOBLIN_WIRE_HEADER_SIZE ||
            a->max_message_bytes > GOBLIN_WIRE_MAX_MESSAGE_BYTES)
            return GOBLIN_EINVAL;
        PUT_U32(w, a->catalog_version);
        PUT_U32(w, a->software_version);
        PUT_U64(w, a->session_id);
        PUT_U32(w, a->heartbeat_ms);
        PUT_U64(w, a->max_message_bytes);
        return GOBLIN_OK;
    }
    case GOBLIN_WIRE_TYPE_REFUSE:
        if (check_code(m->body.refuse.reason)) return GOBLIN_EINVAL;
        PUT_U32(w, m->body.refuse.reason);
        return put_text(w, m->body.refuse.message);
    case GOBLIN_WIRE_TYPE_ERROR:
        if (check_code(m->body.error.code)) return GOBLIN_EINVAL;
        PUT_U32(w, m->body.error.code);
        PUT_U64(w, m->body.error.task_id);
        return put_text(w, m->body.error.message);
    case GOBLIN_WIRE_TYPE_LEASE_REQUEST:
        if (m->body.lease_request.slots < 1 || m->body.lease_request.slots > GOBLIN_WIRE_MAX_SLOTS)
            return GOBLIN_EINVAL;
        PUT_U32(w, m->body.lease_request.slots);
        return GOBLIN_OK;
    case GOBLIN_WIRE_TYPE_TASK: {
        const goblin__wire_task *t = &m->body.task;
        if (t->task_id == 0 || t->lease_ms == 0 || t->graph_len == 0 || !t->graph)
            return GOBLIN_EINVAL;
        if (t->graph_len > GOBLIN_WIRE_MAX_MESSAGE_BYTES) return GOBLIN_ELIMIT;
        if (t->n_inputs < 0) return GOBLIN_EINVAL;
        PUT_U64(w, t->task_id);
        PUT_U32(w, t->lease_ms);
        PUT_U32(w, t->n_inputs);
        PUT_U64(w, t->graph_len);
        put(w, t->graph, t->graph_len);
        put_pad(w);
        return put_tensors(w, t->inputs, t->n_inputs);
    }
    case GOBLIN_WIRE_TYPE_RESULT: {
        const goblin__wire_result *r = &m->body.result;
        if (r->task_id == 0 || r->n_outputs < 0) return GOBLIN_EINVAL;
        PUT_U64(w, r->task_id);
        PUT_U32(w, r->n_outputs);
        PUT_U32(w, 0);
        return put_tensors(w, r->outputs, r->n_outputs);
    }
    case GOBLIN_WIRE_TYPE_ABANDON:
        if (m->body.abandon.task_id == 0) return GOBLIN_EINVAL;
        PUT_U64(w, m->body.abandon.task_id);
        return GOBLIN_OK;
    case GOBLIN_WIRE_TYPE_HEARTBEAT:
        PUT_U32(w, m->body.heartbeat.active_tasks);
        return GOBLIN_OK;
    case GOBLIN_WIRE_TYPE_CHALLENGE:
        put(w, m->body.challenge.nonce, GOBLIN_WIRE_NONCE_BYTES);
        return GOBLIN_OK;
    case GOBLIN_WIRE_TYPE_PROOF: {
        const goblin__wire_proof *pf = &m->body.proof;
        if (pf->key_len < 1 || pf->sig_len < 1 || !pf->key || !pf->sig) return GOBLIN_EINVAL;
        if (pf->key_len > GOBLIN_WIRE_MAX_KEY_BYTES || pf->sig_len > GOBLIN_WIRE_MAX_SIG_BYTES)
            return GOBLIN_ELIMIT;
        PUT_U32(w, pf->key_len);
        PUT_U32(w, pf->sig_len);
        put(w, pf->key, pf->key_len);
        put(w, pf->sig, pf->sig_len);
        return GOBLIN_OK;
    }
    case GOBLIN_WIRE_TYPE_INTRODUCE: {
        const goblin__wire_introduce *in = &m->body.introduce;
        size_t n = in->url ? strnlen(in->url, GOBLIN_WIRE_MAX_URL_BYTES + 1) : 0;
        if (n < 1) return GOBLIN_EINVAL;
        if (n > GOBLIN_WIRE_MAX_URL_BYTES) return GOBLIN_ELIMIT;
        for (size_t i = 0; i < n; i++)
            if ((uint8_t)in->url[i] < 0x21 || (uint8_t)in->url[i] > 0x7e) return GOBLIN_EINVAL;
        put(w, in->ticket, GOBLIN_WIRE_TICKET_BYTES);
        put(w, in->fingerprint, sizeof in->fingerprint);
        PUT_U16(w, n);
        PUT_U16(w, 0);
        PUT_U32(w, 0);
        put(w, in->url, n);
        put_pad(w);
        return GOBLIN_OK;
    }
    default:
        return GOBLIN_EINVAL;
    }
}

/* Header then body; in the counting pass body_len is a placeholder. */
static goblin_err put_msg(wr *w, const goblin__wire_msg *m, uint64_t body_len) {
    if (m->flags & ~flags_allowed((uint32_t)m->type)) return GOBLIN_EINVAL;
    put(w, MAGIC, 4);
    PUT_U16(w, GOBLIN_WIRE_VERSION);
    PUT_U8(w, m->type);
    PUT_U8(w, m->flags);
    PUT_U64(w, m->request_id);
    PUT_U64(w, body_len);
    goblin_err e = put_body(w, m);
    if (e) return e;
    if (w->len > GOBLIN_WIRE_MAX_MESSAGE_BYTES) return GOBLIN_ELIMIT;
    return GOBLIN_OK;
}

goblin_err goblin__wire_msg_init(goblin__wire_msg *m, goblin__wire_type type) {
    if (!m || !type_known((uint32_t)type)) return GOBLIN_EINVAL;
    memset(m, 0, sizeof *m);
    m->type = type;
    m->version = GOBLIN_WIRE_VERSION;
    if (type == GOBLIN_WIRE_TYPE_HELLO) {
        m->body.hello.catalog_version = GOBLIN_CATALOG_VERSION;
        m->body.hello.software_version = GOBLIN_WIRE_SOFTWARE_VERSION;
    } else if (type == GOBLIN_WIRE_TYPE_HELLO_ACK) {
        m->body.hello_ack.catalog_version = GOBLIN_CATALOG_VERSION;
        m->body.hello_ack.software_version = GOBLIN_WIRE_SOFTWARE_VERSION;
        m->body.hello_ack.max_message_bytes = GOBLIN_WIRE_MAX_MESSAGE_BYTES;
    }
    return GOBLIN_OK;
}

static goblin_err encoded_size(const goblin__wire_msg *m, bool strided, size_t *out_len) {
    if (!m || !out_len) return GOBLIN_EINVAL;
    wr w = {0};
    w.strided = strided;
    goblin_err e = put_msg(&w, m, 0);
    if (e) return e;
    if (w.len > SIZE_MAX) return GOBLIN_ELIMIT;
    *out_len = (size_t)w.len;
    return GOBLIN_OK;
}

goblin_err goblin__wire_encoded_size(const goblin__wire_msg *m, size_t *out_len) {
    return encoded_size(m, false, out_len);
}

goblin_err goblin__wire_encoded_size_strided(const goblin__wire_msg *m, size_t *out_len) {
    return encoded_size(m, true, out_len);
}

static goblin_err encode_into(const goblin__wire_msg *m, bool strided, uint8_t *buf, size_t cap,
                              size_t *out_len) {
    if (!m || !out_len || (!buf && cap)) return GOBLIN_EINVAL;
    size_t need;
    goblin_err e = encoded_size(m, strided, &need);
    if (e) return e;
    if (need > cap) return GOBLIN_ELIMIT;
    wr w = {buf, 0, cap, false, strided};
    e = put_msg(&w, m, need - GOBLIN_WIRE_HEADER_SIZE);
    if (e) return e;
    /* the caller changed *m between the passes (a contract violation): never
     * report a message whose header disagrees with its body */
    if (w.over || w.len != need) return GOBLIN_EINVAL;
    *out_len = need;
    return GOBLIN_OK;
}

goblin_err goblin__wire_encode_into(const goblin__wire_msg *m, uint8_t *buf, size_t cap,
                                   size_t *out_len) {
    return encode_into(m, false, buf, cap, out_len);
}

goblin_err goblin__wire_encode_into_strided(const goblin__wire_msg *m, uint8_t *buf, size_t cap,
                                            size_t *out_len) {
    return encode_into(m, true, buf, cap, out_len);
}

goblin_err goblin__wire_layout_size(const goblin__wire_msg *m, int32_t n_tensors, size_t *out_len) {
    if (!m || !out_len || n_tensors < 0) return GOBLIN_EINVAL;
    wr w = {0};
    w.layout = true;
    w.max_offs = n_tensors;
    goblin_err e = put_msg(&w, m, 0);
    if (e) return e;
    if (w.n_offs != n_tensors || w.len > SIZE_MAX) return GOBLIN_EINVAL;
    *out_len = (size_t)w.len;
    return GOBLIN_OK;
}

goblin_err goblin__wire_encode_layout(const goblin__wire_msg *m, uint8_t *buf, size_t cap, size_t *out_len,
                                      size_t *data_off, int32_t n_tensors) {
    if (!m || !buf || !out_len || !data_off || n_tensors < 0) return GOBLIN_EINVAL;
    size_t need;
    goblin_err e = goblin__wire_layout_size(m, n_tensors, &need);
    if (e) return e;
    if (need > cap) return GOBLIN_ELIMIT;
    wr w = {0};
    w.p = buf;
    w.cap = cap;
    w.layout = true;
    w.offs = data_off;
    w.max_offs = n_tensors;
    e = put_msg(&w, m, need - GOBLIN_WIRE_HEADER_SIZE);
    if (e) return e;
    if (w.over || w.len != need || w.n_offs != n_tensors) return GOBLIN_EINVAL;
    *out_len = need;
    return GOBLIN_OK;
}

goblin_err goblin__wire_encode(const goblin__wire_msg *m, uint8_t **out_buf, size_t *out_len) {
    if (!m || !out_buf || !out_len) return GOBLIN_EINVAL;
    size_t need, got;
    goblin_err e = goblin__wire_encoded_size(m, &need);
    if (e) return e;
    uint8_t *buf = goblin__alloc(need);
    if (!buf) return GOBLIN_ENOMEM;
    e = goblin__wire_encode_into(m, buf, need, &got);
    if (e) {
        goblin__free(buf);
        return e;
    }
    *out_buf = buf;
    *out_len = got;
    return GOBLIN_OK;
}

/* ==== decoder ============================================================== */

void goblin__wire_limits_default(goblin__wire_limits *l) {
    if (!l) return;
    l->max_message_bytes = GOBLIN_WIRE_MAX_MESSAGE_BYTES;
    l->max_tensors = GOBLIN_WIRE_MAX_TENSORS;
    l->max_tensor_bytes = GOBLIN_WIRE_MAX_MESSAGE_BYTES;
    l->max_numel = GOBLIN_MAX_NUMEL;
    l->max_graph_bytes = GOBLIN_WIRE_MAX_MESSAGE_BYTES;
}

static void limits_resolve(const goblin__wire_limits *in, goblin__wire_limits *out) {
    goblin__wire_limits_default(out);
    if (!in) return;
    if (in->max_message_bytes < out->max_message_bytes) out->max_message_bytes = in->max_message_bytes;
    if (in->max_tensors < out->max_tensors) out->max_tensors = in->max_tensors;
    if (in->max_tensor_bytes < out->max_tensor_bytes) out->max_tensor_bytes = in->max_tensor_bytes;
    if (in->max_numel < out->max_numel) out->max_numel = in->max_numel < 0 ? 0 : in->max_numel;
    if (in->max_graph_bytes < out->max_graph_bytes) out->max_graph_bytes = in->max_graph_bytes;
}

typedef struct rd {
    const uint8_t *buf;
    size_t len, pos;
    goblin__wire_limits lim;
    uint32_t flags;
    const char *what;     /* message type name, for error messages */
    char *err;
    size_t cap;
    /* The arena: in pass 1 base is NULL and only `used` grows (its final value is
     * the allocation size); in pass 2 takes return memory inside base. */
    uint8_t *base;
    uint64_t used;
    uint64_t tensor_bytes; /* running total against lim.max_tensor_bytes */
} rd;

static goblin_err rfail(rd *r, goblin_err e, const char *fmt, ...) {
    if (r->err && r->cap) {
        int n = snprintf(r->err, r->cap, "%s message, byte %zu: ", r->what, r->pos);
        if (n >= 0 && (size_t)n < r->cap) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->err + n, r->cap - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return e;
}

static size_t left(const rd *r) { return r->len - r->pos; }

/* Read an n-byte little-endian integer; false (and nothing read) if truncated. */
static bool get_le(rd *r, unsigned n, uint64_t *v) {
    if (n > left(r)) return false;
    uint64_t x = 0;
    for (unsigned i = 0; i < n; i++) x |= (uint64_t)r->buf[r->pos + i] << (8 * i);
    r->pos += n;
    *v = x;
    return true;
}

#define GET(r, n, dst, field)                                                                  \
    do {                                                                                       \
        uint64_t v_;                                                                           \
        if (!get_le((r), (n), &v_))                                                            \
            return rfail((r), GOBLIN_EFORMAT, "truncated: %zu bytes left, %s needs %u", left(r), \
                         (field), (unsigned)(n));                                              \
        (dst) = v_;                                                                            \
    } while (0)

/* A run of n bytes where pass 2 wants a pointer to them (into the arena or, with
 * zero-copy, into the buffer). Bytes must be present. */
static void *arena_take(rd *r, uint64_t n, uint64_t align) {
    r->used = (r->used + align - 1) / align * align;
    void *p = r->base ? r->base + r->used : NULL;
    r->used += n;
    return p;
}

static goblin_err get_pad(rd *r) {
    uint64_t n = pad_to_align(r->pos);
    if (n > left(r)) return rfail(r, GOBLIN_EFORMAT, "truncated in alignment padding");
    for (uint64_t i = 0; i < n; i++)
        if (r->buf[r->pos + i] != 0) return rfail(r, GOBLIN_EFORMAT, "non-zero padding byte");
    r->pos += (size_t)n;
    return GOBLIN_OK;
}

static goblin_err get_code(rd *r, goblin_err *out) {
    uint64_t c;
    GET(r, 4, c, "error code");
    if (c < 1 || c > 0xFFFF) return rfail(r, GOBLIN_EFORMAT, "error code %llu out of 1..65535", (unsigned long long)c);
    *out = (goblin_err)c;
    return GOBLIN_OK;
}

static goblin_err get_text(rd *r, const char **out) {
    uint64_t n;
    GET(r, 2, n, "text length");
    if (n > GOBLIN_WIRE_MAX_TEXT_BYTES)
        return rfail(r, GOBLIN_ELIMIT, "text of %llu bytes exceeds %d", (unsigned long long)n,
                     GOBLIN_WIRE_MAX_TEXT_BYTES);
    if (n > left(r)) return rfail(r, GOBLIN_EFORMAT, "truncated: text of %llu bytes, %zu left", (unsigned long long)n, left(r));
    for (uint64_t i = 0; i < n; i++)
        if (!text_byte_ok(r->buf[r->pos + i]))
            return rfail(r, GOBLIN_EFORMAT, "text byte %llu is 0x%02x, not printable ASCII",
                         (unsigned long long)i, r->buf[r->pos + i]);
    char *s = arena_take(r, n + 1, 1);
    if (s) {
        memcpy(s, r->buf + r->pos, (size_t)n);
        s[n] = 0;
    }
    *out = s;
    r->pos += (size_t)n;
    return GOBLIN_OK;
}

static goblin_err get_tensor(rd *r, const char *role, uint32_t i, goblin_tensor *t) {
    uint64_t dt, rank, z1, z2;
    GET(r, 1, dt, "tensor dtype");
    GET(r, 1, rank, "tensor rank");
    GET(r, 2, z1, "tensor header");
    GET(r, 4, z2, "tensor header");
    size_t es = dtype_size((uint32_t)dt);
    if (es == 0) return rfail(r, GOBLIN_EFORMAT, "%s %u: unknown dtype %llu", role, i, (unsigned long long)dt);
    if (rank > GOBLIN_MAX_RANK)
        return rfail(r, GOBLIN_EFORMAT, "%s %u: rank %llu > %d", role, i, (unsigned long long)rank, GOBLIN_MAX_RANK);
    if (z1 || z2) return rfail(r, GOBLIN_EFORMAT, "%s %u: reserved header bytes are not zero", role, i);
    int64_t shape[GOBLIN_MAX_RANK];
    for (uint64_t d = 0; d < rank; d++) {
        uint64_t v;
        GET(r, 8, v, "tensor shape");
        if (v > (uint64_t)GOBLIN_MAX_DIM)
            return rfail(r, GOBLIN_ELIMIT, "%s %u: dimension %llu is %llu, more than %lld", role, i,
                         (unsigned long long)d, (unsigned long long)v, (long long)GOBLIN_MAX_DIM);
        shape[d] = (int64_t)v;
    }
    int64_t numel;
    if (!shape_numel((int32_t)rank, shape, r->lim.max_numel, &numel))
        return rfail(r, GOBLIN_ELIMIT, "%s %u: more than %lld elements", role, i, (long long)r->lim.max_numel);
    uint64_t nbytes, want = (uint64_t)numel * es; /* <= 2^46 * 8 */
    GET(r, 8, nbytes, "tensor byte count");
    if (nbytes != want)
        return rfail(r, GOBLIN_EFORMAT, "%s %u: %llu bytes of data, but %lld %s elements take %llu",
                     role, i, (unsigned long long)nbytes, (long long)numel,
                     goblin_dtype_name((goblin_dtype)dt), (unsigned long long)want);
    if (nbytes > r->lim.max_tensor_bytes - r->tensor_bytes)
        return rfail(r, GOBLIN_ELIMIT, "%s %u: tensor data exceeds %llu bytes in all", role, i,
                     (unsigned long long)r->lim.max_tensor_bytes);
    if (nbytes > left(r))
        return rfail(r, GOBLIN_EFORMAT, "truncated: %s %u has %llu bytes of data, %zu left", role, i,
                     (unsigned long long)nbytes, left(r));
    r->tensor_bytes += nbytes;
    const uint8_t *src = r->buf + r->pos;
    void *data;
    if ((r->flags & GOBLIN_WIRE_DECODE_ZERO_COPY) && (uintptr_t)src % es == 0) {
        data = (void *)(uintptr_t)src; /* read-only view; see GOBLIN_WIRE_DECODE_ZERO_COPY */
    } else {
        data = arena_take(r, nbytes, COPY_ALIGN);
        if (data && nbytes) memcpy(data, src, (size_t)nbytes);
    }
    r->pos += (size_t)nbytes;
    goblin_err e = get_pad(r);
    if (e) return e;
    if (t && goblin_tensor_init(t, (goblin_dtype)dt, (int32_t)rank, shape, data) != GOBLIN_OK)
        return rfail(r, GOBLIN_EINTERNAL, "%s %u: validated tensor refused by goblin_tensor_init", role, i);
    return GOBLIN_OK;
}

/* n tensors into a descriptor array taken from the arena. */
static goblin_err get_tensors(rd *r, const char *role, uint64_t n, goblin_tensor **out) {
    if (n > r->lim.max_tensors)
        return rfail(r, GOBLIN_ELIMIT, "%llu %ss exceed the limit %u", (unsigned long long)n, role,
                     r->lim.max_tensors);
    if (n > left(r) / TENSOR_MIN)
        return rfail(r, GOBLIN_EFORMAT, "truncated: %llu %ss cannot fit in %zu bytes",
                     (unsigned long long)n, role, left(r));
    goblin_tensor *ts = arena_take(r, n * sizeof(goblin_tensor), _Alignof(goblin_tensor));
    for (uint64_t i = 0; i < n; i++) {
        goblin_err e = get_tensor(r, role, (uint32_t)i, ts ? &ts[i] : NULL);
        if (e) return e;
    }
    *out = n ? ts : NULL;
    return GOBLIN_OK;
}

static goblin_err check_catalog(rd *r, uint64_t cat) {
    if (cat != GOBLIN_CATALOG_VERSION)
        return rfail(r, GOBLIN_EVERSION, "peer has catalogue version %llu, this library has %u",
                     (unsigned long long)cat, (unsigned)GOBLIN_CATALOG_VERSION);
    return GOBLIN_OK;
}

/* One pass over the body into *m (a scratch message in pass 1). */
static goblin_err get_body(rd *r, goblin__wire_msg *m) {
    goblin_err e = GOBLIN_OK;
    switch (m->type) {
    case GOBLIN_WIRE_TYPE_HELLO: {
        goblin__wire_hello *h = &m->body.hello;
        uint64_t cat, sw, be, th, mem, tl;
        GET(r, 4, cat, "catalogue version");
        if ((e = check_catalog(r, cat))) return e;
        GET(r, 4, sw, "software version");
        GET(r, 4, be, "backends");
        GET(r, 4, th, "threads");
        GET(r, 8, mem, "memory budget");
        GET(r, 4, tl, "token length");
        if (be == 0) return rfail(r, GOBLIN_EFORMAT, "no backends advertised");
        if (th < 1 || th > GOBLIN_WIRE_MAX_THREADS)
            return rfail(r, GOBLIN_EFORMAT, "threads %llu out of 1..%d", (unsigned long long)th, GOBLIN_WIRE_MAX_THREADS);
        if (tl > GOBLIN_WIRE_MAX_TOKEN_BYTES)
            return rfail(r, GOBLIN_ELIMIT, "join token of %llu bytes exceeds %d", (unsigned long long)tl,
                         GOBLIN_WIRE_MAX_TOKEN_BYTES);
        if (tl > left(r)) return rfail(r, GOBLIN_EFORMAT, "truncated: token of %llu bytes, %zu left", (unsigned long long)tl, left(r));
        uint8_t *tok = tl ? arena_take(r, tl, 1) : NULL;
        if (tok) memcpy(tok, r->buf + r->pos, (size_t)tl);
        r->pos += (size_t)tl;
        h->catalog_version = (uint32_t)cat;
        h->software_version = (uint32_t)sw;
        h->backends = (uint32_t)be;
        h->threads = (uint32_t)th;
        h->memory_bytes = mem;
        h->token_len = (uint32_t)tl;
        h->token = tok;
        return GOBLIN_OK;
    }
    case GOBLIN_WIRE_TYPE_HELLO_ACK: {
        goblin__wire_hello_ack *a = &m->body.hello_ack;
        uint64_t cat, sw, sid, hb, mx;
        GET(r, 4, cat, "catalogue version");
        if ((e = check_catalog(r, cat))) return e;
        GET(r, 4, sw, "software version");
        GET(r, 8, sid, "session id");
        GET(r, 4, hb, "heartbeat interval");
        GET(r, 8, mx, "maximum message size");
        if (mx < GOBLIN_WIRE_HEADER_SIZE || mx > GOBLIN_WIRE_MAX_MESSAGE_BYTES)
            return rfail(r, GOBLIN_EFORMAT, "maximum message size %llu out of range", (unsigned long long)mx);
        a->catalog_version = (uint32_t)cat;
        a->software_version = (uint32_t)sw;
        a->session_id = sid;
        a->heartbeat_ms = (uint32_t)hb;
        a->max_message_bytes = mx;
        return GOBLIN_OK;
    }
    case GOBLIN_WIRE_TYPE_REFUSE:
        if ((e = get_code(r, &m->body.refuse.reason))) return e;
        return get_text(r, &m->body.refuse.message);
    case GOBLIN_WIRE_TYPE_ERROR:
        if ((e = get_code(r, &m->body.error.code))) return e;
        GET(r, 8, m->body.error.task_id, "task id");
        return get_text(r, &m->body.error.message);
    case GOBLIN_WIRE_TYPE_LEASE_REQUEST: {
        uint64_t s;
        GET(r, 4, s, "slots");
        if (s < 1 || s > GOBLIN_WIRE_MAX_SLOTS)
            return rfail(r, GOBLIN_EFORMAT, "%llu slots out of 1..%d", (unsigned long long)s, GOBLIN_WIRE_MAX_SLOTS);
        m->body.lease_request.slots = (uint32_t)s;
        return GOBLIN_OK;
    }
    case GOBLIN_WIRE_TYPE_TASK: {
        goblin__wire_task *t = &m->body.task;
        uint64_t id, lease, n, gl;
        GET(r, 8, id, "task id");
        GET(r, 4, lease, "lease duration");
        GET(r, 4, n, "input count");
        GET(r, 8, gl, "graph length");
        if (id == 0) return rfail(r, GOBLIN_EFORMAT, "task id 0 is reserved");
        if (lease == 0) return rfail(r, GOBLIN_EFORMAT, "lease of 0 ms");
        if (gl == 0) return rfail(r, GOBLIN_EFORMAT, "empty graph");
        if (gl > r->lim.max_graph_bytes)
            return rfail(r, GOBLIN_ELIMIT, "graph of %llu bytes exceeds %llu", (unsigned long long)gl,
                         (unsigned long long)r->lim.max_graph_bytes);
        if (gl > left(r)) return rfail(r, GOBLIN_EFORMAT, "truncated: graph of %llu bytes, %zu left", (unsigned long long)gl, left(r));
        const uint8_t *g = r->buf + r->pos;
        if (!(r->flags & GOBLIN_WIRE_DECODE_ZERO_COPY)) {
            uint8_t *c = arena_take(r, gl, 8);
            if (c) memcpy(c, g, (size_t)gl);
            g = c;
        }
        r->pos += (size_t)gl;
        if ((e = get_pad(r))) return e;
        t->task_id = id;
        t->lease_ms = (uint32_t)lease;
        t->graph_len = gl;
        t->graph = g;
        if ((e = get_tensors(r, "input", n, &t->inputs))) return e;
        t->n_inputs = (int32_t)n;
        return GOBLIN_OK;
    }
    case GOBLIN_WIRE_TYPE_RESULT: {
        goblin__wire_result *res = &m->body.result;
        uint64_t id, n, z;
        GET(r, 8, id, "task id");
        GET(r, 4, n, "output count");
        GET(r, 4, z, "reserved");
        if (id == 0) return rfail(r, GOBLIN_EFORMAT, "task id 0 is reserved");
        if (z != 0) return rfail(r, GOBLIN_EFORMAT, "reserved field is not zero");
        res->task_id = id;
        if ((e = get_tensors(r, "output", n, &res->outputs))) return e;
        res->n_outputs = (int32_t)n;
        return GOBLIN_OK;
    }
    case GOBLIN_WIRE_TYPE_ABANDON:
        GET(r, 8, m->body.abandon.task_id, "task id");
        if (m->body.abandon.task_id == 0) return rfail(r, GOBLIN_EFORMAT, "task id 0 is reserved");
        return GOBLIN_OK;
    case GOBLIN_WIRE_TYPE_HEARTBEAT:
        GET(r, 4, m->body.heartbeat.active_tasks, "active task count");
        return GOBLIN_OK;
    case GOBLIN_WIRE_TYPE_CHALLENGE:
        if (left(r) < GOBLIN_WIRE_NONCE_BYTES)
            return rfail(r, GOBLIN_EFORMAT, "truncated: nonce of %d bytes, %zu left", GOBLIN_WIRE_NONCE_BYTES, left(r));
        memcpy(m->body.challenge.nonce, r->buf + r->pos, GOBLIN_WIRE_NONCE_BYTES);
        r->pos += GOBLIN_WIRE_NONCE_BYTES;
        return GOBLIN_OK;
    case GOBLIN_WIRE_TYPE_PROOF: {
        goblin__wire_proof *pf = &m->body.proof;
        uint64_t kl, sl;
        GET(r, 4, kl, "public key length");
        GET(r, 4, sl, "signature length");
        if (kl < 1 || kl > GOBLIN_WIRE_MAX_KEY_BYTES)
            return rfail(r, GOBLIN_EFORMAT, "public key of %llu bytes out of 1..%d", (unsigned long long)kl,
                         GOBLIN_WIRE_MAX_KEY_BYTES);
        if (sl < 1 || sl > GOBLIN_WIRE_MAX_SIG_BYTES)
            return rfail(r, GOBLIN_EFORMAT, "signature of %llu bytes out of 1..%d", (unsigned long long)sl,
                         GOBLIN_WIRE_MAX_SIG_BYTES);
        if (kl + sl > left(r))
            return rfail(r, GOBLIN_EFORMAT, "truncated: key and signature of %llu bytes, %zu left",
                         (unsigned long long)(kl + sl), left(r));
        uint8_t *c = arena_take(r, kl + sl, 1);
        if (c) memcpy(c, r->buf + r->pos, (size_t)(kl + sl));
        r->pos += (size_t)(kl + sl);
        pf->key_len = (uint32_t)kl;
        pf->sig_len = (uint32_t)sl;
        pf->key = c;
        pf->sig = c ? c + kl : NULL;
        return GOBLIN_OK;
    }
    case GOBLIN_WIRE_TYPE_INTRODUCE: {
        goblin__wire_introduce *in = &m->body.introduce;
        if (left(r) < GOBLIN_WIRE_TICKET_BYTES + 32)
            return rfail(r, GOBLIN_EFORMAT, "truncated: ticket and fingerprint, %zu bytes left", left(r));
        memcpy(in->ticket, r->buf + r->pos, GOBLIN_WIRE_TICKET_BYTES);
        memcpy(in->fingerprint, r->buf + r->pos + GOBLIN_WIRE_TICKET_BYTES, 32);
        r->pos += GOBLIN_WIRE_TICKET_BYTES + 32;
        uint64_t n, z1, z2;
        GET(r, 2, n, "url length");
        GET(r, 2, z1, "reserved");
        GET(r, 4, z2, "reserved");
        if (z1 || z2) return rfail(r, GOBLIN_EFORMAT, "reserved field is not zero");
        if (n < 1 || n > GOBLIN_WIRE_MAX_URL_BYTES)
            return rfail(r, GOBLIN_EFORMAT, "url of %llu bytes out of 1..%d", (unsigned long long)n,
                         GOBLIN_WIRE_MAX_URL_BYTES);
        if (n > left(r)) return rfail(r, GOBLIN_EFORMAT, "truncated: url of %llu bytes, %zu left", (unsigned long long)n, left(r));
        for (uint64_t i = 0; i < n; i++)
            if (r->buf[r->pos + i] < 0x21 || r->buf[r->pos + i] > 0x7e)
                return rfail(r, GOBLIN_EFORMAT, "url byte %llu is 0x%02x, not printable ASCII without spaces",
                             (unsigned long long)i, r->buf[r->pos + i]);
        char *u = arena_take(r, n + 1, 1);
        if (u) {
            memcpy(u, r->buf + r->pos, (size_t)n);
            u[n] = 0;
        }
        r->pos += (size_t)n;
        in->url = u;
        return get_pad(r);
    }
    default:
        return rfail(r, GOBLIN_EPROTO, "unknown message type %d", (int)m->type);
    }
}

static goblin_err header_decode(rd *r, goblin__wire_header *h) {
    if (r->len < GOBLIN_WIRE_HEADER_SIZE)
        return rfail(r, GOBLIN_EFORMAT, "truncated: %zu bytes is shorter than the %d-byte header",
                     r->len, GOBLIN_WIRE_HEADER_SIZE);
    if (memcmp(r->buf, MAGIC, 4) != 0) return rfail(r, GOBLIN_EFORMAT, "not a goblin message (bad magic)");
    r->pos = 4;
    uint64_t ver, type, flags, rid, blen;
    GET(r, 2, ver, "version");
    GET(r, 1, type, "type");
    GET(r, 1, flags, "flags");
    GET(r, 8, rid, "request id");
    GET(r, 8, blen, "body length");
    h->version = (uint16_t)ver;
    h->type = (uint8_t)type;
    h->flags = (uint8_t)flags;
    h->request_id = rid;
    h->body_len = blen;
    if (type_known((uint32_t)type)) r->what = TYPE_NAMES[type];
    if (ver != GOBLIN_WIRE_VERSION)
        return rfail(r, GOBLIN_EVERSION, "peer speaks protocol version %llu, this library speaks %d",
                     (unsigned long long)ver, GOBLIN_WIRE_VERSION);
    if (!type_known((uint32_t)type)) return rfail(r, GOBLIN_EPROTO, "unknown message type %llu", (unsigned long long)type);
    if (flags & ~(uint64_t)flags_allowed((uint32_t)type))
        return rfail(r, GOBLIN_EPROTO, "unknown flags 0x%02llx", (unsigned long long)flags);
    if (blen > r->lim.max_message_bytes - GOBLIN_WIRE_HEADER_SIZE)
        return rfail(r, GOBLIN_ELIMIT, "body of %llu bytes exceeds the limit of %llu bytes per message",
                     (unsigned long long)blen, (unsigned long long)r->lim.max_message_bytes);
    return GOBLIN_OK;
}

static void rd_init(rd *r, const uint8_t *buf, size_t len, const goblin__wire_limits *limits,
                    uint32_t flags, char *err, size_t cap) {
    memset(r, 0, sizeof *r);
    r->buf = buf;
    r->len = len;
    limits_resolve(limits, &r->lim);
    /* a message smaller than its own header cannot be allowed by any limit */
    if (r->lim.max_message_bytes < GOBLIN_WIRE_HEADER_SIZE) r->lim.max_message_bytes = GOBLIN_WIRE_HEADER_SIZE;
    r->flags = flags;
    r->what = "goblin";
    r->err = err;
    r->cap = cap;
    if (err && cap) err[0] = 0;
}

goblin_err goblin__wire_header_decode(const uint8_t *buf, size_t len,
                                     const goblin__wire_limits *limits, goblin__wire_header *out,
                                     char *err_msg, size_t err_cap) {
    if (!out || (!buf && len)) return GOBLIN_EINVAL;
    rd r;
    rd_init(&r, buf, len, limits, 0, err_msg, err_cap);
    goblin__wire_header h;
    memset(&h, 0, sizeof h);
    goblin_err e = header_decode(&r, &h);
    if (r.pos > 4 || e == GOBLIN_OK) *out = h; /* the magic matched */
    return e;
}

goblin_err goblin__wire_decode(const uint8_t *buf, size_t len, const goblin__wire_limits *limits,
                              uint32_t flags, goblin__wire_msg **out, char *err_msg, size_t err_cap) {
    if (!out || (!buf && len) || (flags & ~(uint32_t)GOBLIN_WIRE_DECODE_ZERO_COPY)) return GOBLIN_EINVAL;
    rd r;
    rd_init(&r, buf, len, limits, flags, err_msg, err_cap);
    if (len > r.lim.max_message_bytes)
        return rfail(&r, GOBLIN_ELIMIT, "%zu bytes exceed the limit of %llu bytes per message", len,
                     (unsigned long long)r.lim.max_message_bytes);
    goblin__wire_header h;
    goblin_err e = header_decode(&r, &h);
    if (e) return e;
    if (h.body_len != len - GOBLIN_WIRE_HEADER_SIZE)
        return rfail(&r, GOBLIN_EFORMAT, "header says the body has %llu bytes, but %zu follow",
                     (unsigned long long)h.body_len, len - GOBLIN_WIRE_HEADER_SIZE);

    /* pass 1: validate everything, size the arena; nothing is allocated */
    goblin__wire_msg scratch;
    memset(&scratch, 0, sizeof scratch);
    scratch.type = (goblin__wire_type)h.type;
    scratch.version = h.version;
    scratch.flags = h.flags;
    scratch.request_id = h.request_id;
    arena_take(&r, sizeof scratch, _Alignof(goblin__wire_msg));
    if ((e = get_body(&r, &scratch))) return e;
    if (r.pos != r.len) return rfail(&r, GOBLIN_EFORMAT, "%zu trailing bytes", r.len - r.pos);

    /* pass 2: the same reads into one allocation */
    uint64_t total = r.used;
    if (total > SIZE_MAX / 2) return rfail(&r, GOBLIN_ELIMIT, "decoded message too large");
    uint8_t *base = goblin__alloc((size_t)total);
    if (!base) return rfail(&r, GOBLIN_ENOMEM, "out of memory for %llu bytes", (unsigned long long)total);
    r.pos = GOBLIN_WIRE_HEADER_SIZE;
    r.base = base;
    r.used = 0;
    r.tensor_bytes = 0;
    goblin__wire_msg *m = arena_take(&r, sizeof *m, _Alignof(goblin__wire_msg));
    *m = scratch;
    memset(&m->body, 0, sizeof m->body);
    e = get_body(&r, m);
    if (!e && (r.pos != r.len || r.used != total))
        e = rfail(&r, GOBLIN_EINTERNAL, "decoder passes disagree");
    if (e) {
        goblin__free(base);
        return e;
    }
    *out = m;
    return GOBLIN_OK;
}

goblin_err goblin__wire_batch_next(const uint8_t *buf, size_t len, size_t *off,
                                  const goblin__wire_limits *limits, size_t *msg_len, char *err_msg,
                                  size_t err_cap) {
    if (err_msg && err_cap) err_msg[0] = 0;
    if (!off || !msg_len || (!buf && len) || *off > len || (*off < len && *off % GOBLIN_WIRE_BATCH_ALIGN))
        return GOBLIN_EINVAL;
    size_t at = *off;
    rd r;
    char sub[224];
    rd_init(&r, buf + at, len - at, limits, 0, sub, sizeof sub);
    goblin_err e;
    if (at == len) {
        e = rfail(&r, GOBLIN_EFORMAT, len ? "no message left in the batch" : "empty message");
    } else {
        goblin__wire_header h;
        e = header_decode(&r, &h);
        if (!e && h.body_len > r.len - GOBLIN_WIRE_HEADER_SIZE)
            e = rfail(&r, GOBLIN_EFORMAT, "truncated: header says the body has %llu bytes, but %zu follow",
                      (unsigned long long)h.body_len, r.len - GOBLIN_WIRE_HEADER_SIZE);
        if (!e) {
            size_t end = at + GOBLIN_WIRE_HEADER_SIZE + (size_t)h.body_len;
            size_t next = end;
            if (end < len) {
                next = end + (size_t)pad_to_align(end);
                for (size_t i = end; i < next && i < len; i++)
                    if (buf[i] != 0) {
                        r.pos = i - at;
                        e = rfail(&r, GOBLIN_EFORMAT, "non-zero padding byte after the message");
                        break;
                    }
                if (!e && next >= len) {
                    r.pos = end - at;
                    e = rfail(&r, GOBLIN_EFORMAT, "%zu trailing bytes after the last message", len - end);
                }
            }
            if (!e) {
                *msg_len = end - at;
                *off = next;
                return GOBLIN_OK;
            }
        }
    }
    if (err_msg && err_cap) snprintf(err_msg, err_cap, "batch, message at byte %zu: %s", at, sub);
    return e;
}

void goblin__wire_msg_free(goblin__wire_msg *m) { goblin__free(m); }
