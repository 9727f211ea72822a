/* libgoblin/proto/client_wire.c - client protocol encode/decode; layout in client_wire.h. */
#include "client_wire.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/errf.h"
#include "goblin/dtype.h"
#include "goblin/graph.h"

/* The stats reply is the node's counters as a flat array of i64, in struct order. */
#define STATS_N ((uint32_t)(sizeof(goblin_node_stats) / sizeof(int64_t)))
_Static_assert(sizeof(goblin_node_stats) % sizeof(int64_t) == 0, "stats are all int64");

const char *goblin__cw_type_name(uint8_t t) {
    switch (t) {
    case GOBLIN__CW_SUBMIT_MATMUL: return "SUBMIT_MATMUL";
    case GOBLIN__CW_SUBMIT_MATMUL_FILES: return "SUBMIT_MATMUL_FILES";
    case GOBLIN__CW_STATUS: return "STATUS";
    case GOBLIN__CW_CANCEL: return "CANCEL";
    case GOBLIN__CW_FETCH: return "FETCH";
    case GOBLIN__CW_RELEASE: return "RELEASE";
    case GOBLIN__CW_STATS: return "STATS";
    case GOBLIN__CW_SUBMIT_GRAPH: return "SUBMIT_GRAPH";
    case GOBLIN__CW_AUTH: return "AUTH";
    case GOBLIN__CW_PART: return "PART";
    case GOBLIN__CW_PING: return "PING";
    case GOBLIN__CW_SUBMITTED: return "SUBMITTED";
    case GOBLIN__CW_JOB_STATUS: return "JOB_STATUS";
    case GOBLIN__CW_RESULT: return "RESULT";
    case GOBLIN__CW_STATS_REPLY: return "STATS_REPLY";
    case GOBLIN__CW_ERROR: return "ERROR";
    case GOBLIN__CW_OK: return "OK";
    case GOBLIN__CW_OUTPUTS: return "OUTPUTS";
    default: return NULL;
    }
}

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

/* A worker identity: 64 hex digits as 32 bytes (all zero: none); back into hex. */
static void put_identity(uint8_t *p, const char *hex) {
    memset(p, 0, 32);
    if (strlen(hex) != 64) return;
    for (int i = 0; i < 32; i++) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            char ch = hex[2 * i + k];
            v = v * 16 + (unsigned)(ch >= '0' && ch <= '9' ? ch - '0' : (ch | 32) - 'a' + 10);
        }
        p[i] = (uint8_t)v;
    }
}

static bool get_identity(const uint8_t *p, char *hex) {
    static const char digits[] = "0123456789abcdef";
    bool any = false;
    for (int i = 0; i < 32; i++) any = any || p[i];
    if (!any) {
        hex[0] = 0;
        return true;
    }
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[p[i] >> 4];
        hex[2 * i + 1] = digits[p[i] & 15];
    }
    hex[64] = 0;
    return true;
}

static void put_id(uint8_t *p, const goblin_job_id *id) { memcpy(p, id->bytes, GOBLIN__CW_ID_BYTES); }
static void get_id(const uint8_t *p, goblin_job_id *id) { memcpy(id->bytes, p, GOBLIN__CW_ID_BYTES); }

void goblin_job_id_format(const goblin_job_id *id, char *out) {
    static const char hex[] = "0123456789abcdef";
    if (!out) return;
    if (!id) {
        out[0] = 0;
        return;
    }
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[id->bytes[i] >> 4];
        out[2 * i + 1] = hex[id->bytes[i] & 15];
    }
    out[32] = 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

goblin_err goblin_job_id_parse(const char *text, goblin_job_id *out) {
    if (!text || !out || strlen(text) != 32) return GOBLIN_EINVAL;
    goblin_job_id id;
    for (int i = 0; i < 16; i++) {
        int hi = hexval(text[2 * i]), lo = hexval(text[2 * i + 1]);
        if (hi < 0 || lo < 0) return GOBLIN_EINVAL;
        id.bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    *out = id;
    return GOBLIN_OK;
}

bool goblin_job_id_equal(const goblin_job_id *a, const goblin_job_id *b) {
    return a && b && memcmp(a->bytes, b->bytes, sizeof a->bytes) == 0;
}

/* @p strided: any strides are fine (the data is packed while encoding). */
static goblin_err tensor_size_any(const goblin_tensor *t, bool strided, size_t *out) {
    if (t->rank < 0 || t->rank > GOBLIN_MAX_RANK || t->dtype < 0 || t->dtype >= GOBLIN_DTYPE_COUNT)
        return GOBLIN_EINVAL;
    int64_t numel = 1, span = 1; /* span: as in get_tensor */
    for (int32_t i = 0; i < t->rank; i++)
        if (t->shape[i] < 0 || t->shape[i] > GOBLIN_MAX_DIM ||
            !goblin__mul_i64(numel, t->shape[i], &numel) ||
            !goblin__mul_i64(span, t->shape[i] ? t->shape[i] : 1, &span) || span > GOBLIN_MAX_NUMEL)
            return GOBLIN_EINVAL;
    if (numel > 0 && (!t->data || (!strided && !goblin_tensor_is_contiguous(t))))
        return GOBLIN_EINVAL;
    size_t bytes;
    if (!goblin__mul_size((size_t)numel, goblin_dtype_size(t->dtype), &bytes)) return GOBLIN_ELIMIT;
    *out = 8 + 8 * (size_t)t->rank + pad8(bytes);
    return GOBLIN_OK;
}

static goblin_err tensor_size(const goblin_tensor *t, size_t *out) {
    return tensor_size_any(t, false, out);
}

static bool finite_nonneg(double v) { return isfinite(v) && v >= 0; }

/* The job parameters of a submit, checked the same both ways (the decoder with a
 * message naming the field, value and bounds). */
static goblin_err job_fields_check(int64_t min_tasks, uint64_t task_memory, char *msg, size_t cap) {
    if (min_tasks < 0 || min_tasks > GOBLIN__CW_MAX_MIN_TASKS)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "min_tasks %lld outside 0..%lld (0: the default)",
                            (long long)min_tasks, (long long)GOBLIN__CW_MAX_MIN_TASKS);
    if (task_memory && (task_memory < GOBLIN__CW_MIN_TASK_MEMORY || task_memory > GOBLIN__CW_MAX_TASK_MEMORY))
        return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                            "task_memory_bytes %llu outside %llu..%llu (0: the default)",
                            (unsigned long long)task_memory, (unsigned long long)GOBLIN__CW_MIN_TASK_MEMORY,
                            (unsigned long long)GOBLIN__CW_MAX_TASK_MEMORY);
    return GOBLIN_OK;
}

/* The SUBMIT_GRAPH fields both directions agree on (the decoder checks the same). */
static goblin_err graph_fields_ok(const goblin__cw_msg *m) {
    if (m->n_io > GOBLIN__CW_MAX_IO || m->n_outputs > GOBLIN__CW_MAX_IO ||
        m->verify >= GOBLIN_VERIFY_COUNT || !finite_nonneg(m->min_replication) ||
        !finite_nonneg(m->trust_halflife) || m->chunk_rows < 0 ||
        job_fields_check(m->min_tasks, m->task_memory_bytes, NULL, 0) ||
        !m->graph || m->graph_len == 0 || (m->n_io && !m->io))
        return GOBLIN_EINVAL;
    for (uint32_t i = 0; m->split && i < m->n_io; i++)
        if (m->split[i] > GOBLIN_SPLIT_BATCH) return GOBLIN_EINVAL;
    for (uint32_t i = 0; m->combine && i < m->n_outputs; i++)
        if (m->combine[i] >= GOBLIN_COMBINE_COUNT) return GOBLIN_EINVAL;
    return GOBLIN_OK;
}

static goblin_err tensors_size(const goblin_tensor *ts, uint32_t n, bool strided, size_t *out) {
    size_t total = 0, a;
    for (uint32_t i = 0; i < n; i++) {
        goblin_err e = tensor_size_any(&ts[i], strided, &a);
        if (e) return e;
        if (total + a < total) return GOBLIN_ELIMIT;
        total += a;
    }
    *out = total;
    return GOBLIN_OK;
}

static size_t text_len(const char *s) {
    size_t n = s ? strlen(s) : 0;
    return n > GOBLIN__CW_MAX_TEXT ? GOBLIN__CW_MAX_TEXT : n;
}

static goblin_err body_size(const goblin__cw_msg *m, size_t *out) {
    size_t n = 0, a;
    goblin_err e;
    switch (m->type) {
    case GOBLIN__CW_SUBMIT_MATMUL:
        if (job_fields_check(m->min_tasks, m->task_memory_bytes, NULL, 0)) return GOBLIN_EINVAL;
        n = 16;
        for (int i = 0; i < 2; i++) {
            if ((e = tensor_size(&m->tensors[i], &a))) return e;
            n += a;
        }
        break;
    case GOBLIN__CW_SUBMIT_MATMUL_FILES:
        if (m->file_flags & ~(uint32_t)GOBLIN__CW_FILE_FLAGS) return GOBLIN_EINVAL;
        if (job_fields_check(m->min_tasks, m->task_memory_bytes, NULL, 0)) return GOBLIN_EINVAL;
        n = 32;
        for (int i = 0; i < 3; i++) {
            size_t l = strnlen(m->paths[i], GOBLIN__CW_MAX_PATH + 1);
            if (l == 0 || l > GOBLIN__CW_MAX_PATH) return GOBLIN_EINVAL;
            n += l;
        }
        n = pad8(n);
        break;
    case GOBLIN__CW_STATUS: case GOBLIN__CW_CANCEL: case GOBLIN__CW_FETCH:
    case GOBLIN__CW_RELEASE: case GOBLIN__CW_OK:
        n = GOBLIN__CW_ID_BYTES;
        break;
    case GOBLIN__CW_STATS: case GOBLIN__CW_PING: n = 0; break;
    case GOBLIN__CW_AUTH:
        if (m->token_len == 0 || m->token_len > GOBLIN__CW_MAX_TOKEN) return GOBLIN_EINVAL;
        n = 8 + pad8(m->token_len);
        break;
    case GOBLIN__CW_PART:
        if (m->part_len == 0 || m->part_len > GOBLIN__CW_PART_MAX || !m->part_data ||
            m->part_offset > m->part_total || m->part_len > m->part_total - m->part_offset)
            return GOBLIN_EINVAL;
        n = 24 + pad8(m->part_len);
        break;
    case GOBLIN__CW_SUBMITTED: n = 24; break;
    case GOBLIN__CW_JOB_STATUS: n = 48 + pad8(text_len(m->text)); break;
    case GOBLIN__CW_RESULT:
        n = 24;
        if (m->has_tensor) {
            if ((e = tensor_size(&m->tensors[0], &a))) return e;
            n += a;
        }
        break;
    case GOBLIN__CW_STATS_REPLY:
        if (m->n_workers > GOBLIN__CW_MAX_WORKERS || (m->n_workers && !m->workers)) return GOBLIN_EINVAL;
        n = 8 + 8 * (size_t)STATS_N + GOBLIN__CW_WORKER_RECORD * (size_t)m->n_workers;
        break;
    case GOBLIN__CW_ERROR: n = 8 + pad8(text_len(m->text)); break;
    case GOBLIN__CW_SUBMIT_GRAPH:
        if ((e = graph_fields_ok(m))) return e;
        if (m->graph_len > SIZE_MAX / 2) return GOBLIN_ELIMIT;
        n = GOBLIN__CW_GRAPH_FIXED + pad8((size_t)m->graph_len);
        if (m->split) n += pad8(m->n_io);
        if (m->combine) n += pad8(m->n_outputs);
        if (m->cache_ids) n += 8 * (size_t)m->n_io;
        if ((e = tensors_size(m->io, m->n_io, true, &a))) return e;
        if (n + a < n) return GOBLIN_ELIMIT;
        n += a;
        break;
    case GOBLIN__CW_OUTPUTS:
        if (m->n_io > GOBLIN__CW_MAX_IO || (m->n_io && !m->io)) return GOBLIN_EINVAL;
        if ((e = tensors_size(m->io, m->n_io, false, &a))) return e;
        n = 24 + a;
        break;
    default: return GOBLIN_EINVAL;
    }
    *out = n;
    return GOBLIN_OK;
}

goblin_err goblin__cw_encoded_size(const goblin__cw_msg *m, size_t *out) {
    if (!m || !out) return GOBLIN_EINVAL;
    size_t b;
    goblin_err e = body_size(m, &b);
    if (e) return e;
    *out = GOBLIN__CW_HEADER_SIZE + b;
    return GOBLIN_OK;
}

/* Little-endian writers over a buffer already sized by body_size. */
static void w16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void w32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void w64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint16_t r16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t r32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t r64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Copy a strided tensor's elements into @p dst in row-major order, a row of the last
 * dimension at a time. */
static void pack_strided(uint8_t *dst, const goblin_tensor *t) {
    size_t es = goblin_dtype_size(t->dtype);
    int32_t rank = t->rank;
    int64_t inner = t->shape[rank - 1], st = t->strides[rank - 1];
    int64_t idx[GOBLIN_MAX_RANK] = {0};
    for (;;) {
        int64_t off = 0;
        for (int32_t d = 0; d < rank - 1; d++) off += idx[d] * t->strides[d];
        const uint8_t *src = (const uint8_t *)t->data + off * (int64_t)es;
        if (st == 1) {
            memcpy(dst, src, (size_t)inner * es);
            dst += (size_t)inner * es;
        } else {
            for (int64_t j = 0; j < inner; j++, dst += es) memcpy(dst, src + j * st * (int64_t)es, es);
        }
        int32_t d = rank - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

/* A tensor's header (zeros included); returns its size. *bytes: its data's. */
static size_t put_tensor_head(uint8_t *p, const goblin_tensor *t, size_t *bytes) {
    memset(p, 0, 8);
    p[0] = (uint8_t)t->dtype;
    p[1] = (uint8_t)t->rank;
    size_t o = 8;
    int64_t numel = 1;
    for (int32_t i = 0; i < t->rank; i++, o += 8) {
        w64(p + o, (uint64_t)t->shape[i]);
        numel *= t->shape[i];
    }
    *bytes = (size_t)numel * goblin_dtype_size(t->dtype);
    return o;
}

/* A tensor, its padding zeroed (so that a buffer need not be cleared under its data). */
static size_t put_tensor(uint8_t *p, const goblin_tensor *t) {
    size_t bytes;
    size_t o = put_tensor_head(p, t, &bytes);
    if (bytes) {
        if (t->rank == 0 || goblin_tensor_is_contiguous(t)) memcpy(p + o, t->data, bytes);
        else pack_strided(p + o, t);
    }
    memset(p + o + bytes, 0, pad8(bytes) - bytes);
    return o + pad8(bytes);
}

static void wf64(uint8_t *p, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    w64(p, u);
}

static size_t put_text(uint8_t *p, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        p[i] = (ch >= 0x20 && ch <= 0x7e) ? ch : '?';
    }
    return pad8(n);
}

goblin_err goblin__cw_encode_into(const goblin__cw_msg *m, uint8_t *buf, size_t cap,
                                  size_t *out_len) {
    if (!m || !buf || !out_len) return GOBLIN_EINVAL;
    size_t b;
    goblin_err e = body_size(m, &b);
    if (e) return e;
    if (cap < GOBLIN__CW_HEADER_SIZE + b) return GOBLIN_ELIMIT;
    /* Cleared for the padding; a matmul submit's and a result's tensors write their
     * own (not a pass over the operands' bytes before they are copied). */
    size_t clear = b;
    if ((m->type == GOBLIN__CW_SUBMIT_MATMUL || m->type == GOBLIN__CW_RESULT) && clear > 24) clear = 24;
    memset(buf, 0, GOBLIN__CW_HEADER_SIZE + clear);
    memcpy(buf, "GBLC", 4);
    w16(buf + 4, GOBLIN__CW_VERSION);
    buf[6] = m->type;
    w64(buf + 8, m->request_id);
    w64(buf + 16, b);
    uint8_t *p = buf + GOBLIN__CW_HEADER_SIZE;
    size_t o = 0;
    switch (m->type) {
    case GOBLIN__CW_SUBMIT_MATMUL:
        w64(p, m->task_memory_bytes);
        w64(p + 8, (uint64_t)m->min_tasks);
        o = 16;
        o += put_tensor(p + o, &m->tensors[0]);
        put_tensor(p + o, &m->tensors[1]);
        break;
    case GOBLIN__CW_SUBMIT_MATMUL_FILES: {
        size_t l[3];
        for (int i = 0; i < 3; i++) {
            l[i] = strlen(m->paths[i]);
            w32(p + 4 * i, (uint32_t)l[i]);
        }
        w32(p + 12, m->file_flags);
        w64(p + 16, m->task_memory_bytes);
        w64(p + 24, (uint64_t)m->min_tasks);
        o = 32;
        for (int i = 0; i < 3; i++) {
            memcpy(p + o, m->paths[i], l[i]);
            o += l[i];
        }
        break;
    }
    case GOBLIN__CW_STATUS: case GOBLIN__CW_CANCEL: case GOBLIN__CW_FETCH:
    case GOBLIN__CW_RELEASE: case GOBLIN__CW_OK:
        put_id(p, &m->job_id);
        break;
    case GOBLIN__CW_STATS: case GOBLIN__CW_PING: break;
    case GOBLIN__CW_AUTH:
        w32(p, m->token_len);
        memcpy(p + 8, m->token, m->token_len);
        break;
    case GOBLIN__CW_PART:
        w64(p, m->part_total);
        w64(p + 8, m->part_offset);
        w32(p + 16, m->part_len);
        w32(p + 20, m->part_flags);
        memcpy(p + 24, m->part_data, m->part_len);
        memset(p + 24 + m->part_len, 0, pad8(m->part_len) - m->part_len);
        break;
    case GOBLIN__CW_SUBMITTED:
        put_id(p, &m->job_id);
        w64(p + 16, (uint64_t)m->total);
        break;
    case GOBLIN__CW_JOB_STATUS: {
        size_t tl = text_len(m->text);
        put_id(p, &m->job_id);
        p[16] = m->status;
        w32(p + 20, (uint32_t)m->code);
        w64(p + 24, (uint64_t)m->done);
        w64(p + 32, (uint64_t)m->total);
        w32(p + 40, (uint32_t)tl);
        put_text(p + 48, m->text, tl);
        break;
    }
    case GOBLIN__CW_RESULT:
        put_id(p, &m->job_id);
        p[16] = m->has_tensor ? 1 : 0;
        if (m->has_tensor) put_tensor(p + 24, &m->tensors[0]);
        break;
    case GOBLIN__CW_STATS_REPLY: {
        w32(p, STATS_N);
        w32(p + 4, m->n_workers);
        const int64_t *c = (const int64_t *)(const void *)&m->stats;
        o = 8;
        for (uint32_t i = 0; i < STATS_N; i++, o += 8) w64(p + o, (uint64_t)c[i]);
        for (uint32_t i = 0; i < m->n_workers; i++, o += GOBLIN__CW_WORKER_RECORD) {
            const goblin_node_worker_stats *w = &m->workers[i];
            w64(p + o, w->session_id);
            p[o + 8] = w->connected;
            p[o + 9] = w->quarantined;
            w32(p + o + 12, (uint32_t)w->threads);
            w64(p + o + 16, w->memory_bytes);
            w64(p + o + 24, (uint64_t)w->issued);
            w64(p + o + 32, (uint64_t)w->accepted);
            w64(p + o + 40, (uint64_t)w->rejected);
            w64(p + o + 48, (uint64_t)w->failed_leases);
            put_identity(p + o + 56, w->identity);
            size_t ol = strnlen(w->owner, sizeof w->owner - 1);
            memset(p + o + 88, 0, 64);
            memcpy(p + o + 88, w->owner, ol);
        }
        break;
    }
    case GOBLIN__CW_ERROR: {
        size_t tl = text_len(m->text);
        w32(p, (uint32_t)m->code);
        w32(p + 4, (uint32_t)tl);
        put_text(p + 8, m->text, tl);
        break;
    }
    case GOBLIN__CW_SUBMIT_GRAPH:
        w32(p, m->n_io);
        w32(p + 4, m->n_outputs);
        p[8] = m->verify;
        p[9] = (uint8_t)((m->split ? 1 : 0) | (m->combine ? 2 : 0) | (m->cache_ids ? 4 : 0));
        w16(p + 10, m->spot_rows);
        wf64(p + 16, m->min_replication);
        wf64(p + 24, m->trust_halflife);
        w64(p + 32, (uint64_t)m->chunk_rows);
        w64(p + 40, m->task_memory_bytes);
        w64(p + 48, (uint64_t)m->min_tasks);
        w64(p + 56, m->graph_len);
        o = GOBLIN__CW_GRAPH_FIXED;
        memcpy(p + o, m->graph, (size_t)m->graph_len);
        o += pad8((size_t)m->graph_len);
        if (m->split) {
            memcpy(p + o, m->split, m->n_io);
            o += pad8(m->n_io);
        }
        if (m->combine) {
            memcpy(p + o, m->combine, m->n_outputs);
            o += pad8(m->n_outputs);
        }
        for (uint32_t i = 0; m->cache_ids && i < m->n_io; i++, o += 8) w64(p + o, m->cache_ids[i]);
        for (uint32_t i = 0; i < m->n_io; i++) o += put_tensor(p + o, &m->io[i]);
        break;
    case GOBLIN__CW_OUTPUTS:
        put_id(p, &m->job_id);
        w32(p + 16, m->n_io);
        o = 24;
        for (uint32_t i = 0; i < m->n_io; i++) o += put_tensor(p + o, &m->io[i]);
        break;
    default: return GOBLIN_EINVAL;
    }
    *out_len = GOBLIN__CW_HEADER_SIZE + b;
    return GOBLIN_OK;
}

/* ---- decoding: a bounds-checked reader ------------------------------------- */

typedef struct rd {
    const uint8_t *p;
    size_t n, o;
    char *msg;
    size_t cap;
} rd;

#define NEED(r, k, what)                                                                 \
    do {                                                                                 \
        if ((r)->n - (r)->o < (size_t)(k))                                               \
            return goblin__errf((r)->msg, (r)->cap, GOBLIN_EFORMAT,                      \
                                "truncated %s at body byte %zu", what, (r)->o);          \
    } while (0)

static bool zeros(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

static goblin_err get_tensor(rd *r, const goblin__cw_limits *lim, goblin_tensor *t) {
    NEED(r, 8, "tensor header");
    const uint8_t *h = r->p + r->o;
    if (h[0] >= GOBLIN_DTYPE_COUNT)
        return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "unknown dtype %u at body byte %zu",
                            h[0], r->o);
    if (h[1] > GOBLIN_MAX_RANK)
        return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "rank %u above %d", h[1],
                            GOBLIN_MAX_RANK);
    if (!zeros(h + 2, 6))
        return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "non-zero tensor padding");
    r->o += 8;
    int32_t rank = h[1];
    int64_t shape[GOBLIN_MAX_RANK], numel = 1, span = 1;
    NEED(r, 8 * (size_t)rank, "tensor shape");
    for (int32_t i = 0; i < rank; i++, r->o += 8) {
        uint64_t d = r64(r->p + r->o);
        if (d > (uint64_t)GOBLIN_MAX_DIM)
            return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "dimension %llu out of 0..2^40",
                                (unsigned long long)d);
        shape[i] = (int64_t)d;
        /* span: the product of the non-zero dims, which the strides of an empty tensor
         * still multiply out to */
        if (!goblin__mul_i64(numel, shape[i], &numel) || numel > lim->max_numel ||
            !goblin__mul_i64(span, d ? shape[i] : 1, &span) || span > lim->max_numel)
            return goblin__errf(r->msg, r->cap, GOBLIN_ELIMIT,
                                "tensor element count over the limit");
    }
    size_t bytes = (size_t)numel * goblin_dtype_size((goblin_dtype)h[0]);
    NEED(r, pad8(bytes), "tensor data");
    if (!zeros(r->p + r->o + bytes, pad8(bytes) - bytes))
        return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "non-zero tensor data padding");
    if (goblin_tensor_init(t, (goblin_dtype)h[0], rank, shape,
                           numel ? (void *)(uintptr_t)(r->p + r->o) : NULL) != GOBLIN_OK)
        return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT,
                            "tensor not describable at body byte %zu", r->o);
    r->o += pad8(bytes);
    return GOBLIN_OK;
}

static goblin_err get_text(rd *r, size_t n, char *out) {
    if (n > GOBLIN__CW_MAX_TEXT)
        return goblin__errf(r->msg, r->cap, GOBLIN_ELIMIT, "text too long");
    NEED(r, pad8(n), "text");
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = r->p[r->o + i];
        if (ch < 0x20 || ch > 0x7e)
            return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "non-printable byte in text");
        out[i] = (char)ch;
    }
    out[n] = 0;
    if (!zeros(r->p + r->o + n, pad8(n) - n))
        return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "non-zero text padding");
    r->o += pad8(n);
    return GOBLIN_OK;
}

static double rf64(const uint8_t *p) {
    uint64_t u = r64(p);
    double v;
    memcpy(&v, &u, 8);
    return v;
}

/* Allocate m->io (n tensors) and, behind it, @p extra bytes (8-aligned), once the
 * counts were checked against the bytes left. */
static goblin_err alloc_io(rd *r, goblin__cw_msg *m, uint32_t n, size_t extra) {
    size_t head = ((size_t)n * sizeof(goblin_tensor) + 7) & ~(size_t)7;
    if (head + extra == 0) return GOBLIN_OK;
    m->owned = goblin__calloc(1, head + extra);
    if (!m->owned) return goblin__errf(r->msg, r->cap, GOBLIN_ENOMEM, "out of memory");
    m->io = n ? m->owned : NULL;
    return GOBLIN_OK;
}

static goblin_err get_tensors(rd *r, const goblin__cw_limits *lim, goblin__cw_msg *m, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        goblin_err e = get_tensor(r, lim, &m->io[i]);
        if (e) return e;
    }
    return GOBLIN_OK;
}

static goblin_err get_submit_graph(rd *r, const goblin__cw_limits *lim, goblin__cw_msg *m) {
    NEED(r, GOBLIN__CW_GRAPH_FIXED, "SUBMIT_GRAPH");
    const uint8_t *p = r->p;
    uint32_t ni = r32(p), no = r32(p + 4);
    if (ni > GOBLIN__CW_MAX_IO || no > GOBLIN__CW_MAX_IO)
        return goblin__errf(r->msg, r->cap, GOBLIN_ELIMIT,
                            "%u inputs / %u outputs over the limit of %d",
                            ni, no, GOBLIN__CW_MAX_IO);
    uint8_t have = p[9];
    if (p[8] >= GOBLIN_VERIFY_COUNT || (have & ~7u) || !zeros(p + 12, 4))
        return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "bad verify mode %u or flags %u", p[8],
                            have);
    m->n_io = ni;
    m->n_outputs = no;
    m->verify = p[8];
    m->spot_rows = r16(p + 10);
    m->min_replication = rf64(p + 16);
    m->trust_halflife = rf64(p + 24);
    m->chunk_rows = (int64_t)r64(p + 32);
    m->task_memory_bytes = r64(p + 40);
    m->min_tasks = (int64_t)r64(p + 48);
    uint64_t gl = r64(p + 56);
    if (!finite_nonneg(m->min_replication) || !finite_nonneg(m->trust_halflife) || m->chunk_rows < 0)
        return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "negative or non-finite job parameter");
    goblin_err fe = job_fields_check(m->min_tasks, m->task_memory_bytes, r->msg, r->cap);
    if (fe) return fe;
    r->o = GOBLIN__CW_GRAPH_FIXED;
    if (gl == 0 || gl > r->n - r->o)
        return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT,
                            "graph of %llu bytes but %zu bytes left",
                            (unsigned long long)gl, r->n - r->o);
    /* Everything the counts promise must fit in the bytes left before anything is
     * allocated: the graph, the arrays, and at least 8 bytes per tensor. */
    size_t need = pad8((size_t)gl) + ((have & 1) ? pad8(ni) : 0) + ((have & 2) ? pad8(no) : 0) +
                  ((have & 4) ? 8 * (size_t)ni : 0) + 8 * (size_t)ni;
    NEED(r, need, "SUBMIT_GRAPH graph, arrays and tensors");
    /* (+ 8: an empty array present must still be a non-NULL pointer, so that the
     * message re-encodes with its flag) */
    size_t extra = ((have & 4) ? 8 * (size_t)ni : 0) + ((have & 1) ? ni : 0) + ((have & 2) ? no : 0) + 8;
    goblin_err e = alloc_io(r, m, ni, extra);
    if (e) return e;
    uint8_t *tail = (uint8_t *)m->owned + (((size_t)ni * sizeof(goblin_tensor) + 7) & ~(size_t)7);
    m->graph = r->p + r->o;
    m->graph_len = gl;
    if (!zeros(r->p + r->o + gl, pad8((size_t)gl) - (size_t)gl))
        return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "non-zero graph padding");
    r->o += pad8((size_t)gl);
    if (have & 4) {
        m->cache_ids = (uint64_t *)(void *)tail;
        tail += 8 * (size_t)ni;
    }
    if (have & 1) {
        m->split = tail;
        tail += ni;
        for (uint32_t i = 0; i < ni; i++) {
            m->split[i] = r->p[r->o + i];
            if (m->split[i] > GOBLIN_SPLIT_BATCH)
                return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "input %u: unknown split %u", i,
                                    m->split[i]);
        }
        if (!zeros(r->p + r->o + ni, pad8(ni) - ni))
            return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "non-zero split padding");
        r->o += pad8(ni);
    }
    if (have & 2) {
        m->combine = tail;
        for (uint32_t i = 0; i < no; i++) {
            m->combine[i] = r->p[r->o + i];
            if (m->combine[i] >= GOBLIN_COMBINE_COUNT)
                return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "output %u: unknown combine %u",
                                    i,
                                    m->combine[i]);
        }
        if (!zeros(r->p + r->o + no, pad8(no) - no))
            return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "non-zero combine padding");
        r->o += pad8(no);
    }
    for (uint32_t i = 0; m->cache_ids && i < ni; i++, r->o += 8) m->cache_ids[i] = r64(r->p + r->o);
    return get_tensors(r, lim, m, ni);
}

static goblin_err get_outputs(rd *r, const goblin__cw_limits *lim, goblin__cw_msg *m) {
    NEED(r, 24, "OUTPUTS");
    get_id(r->p, &m->job_id);
    uint32_t n = r32(r->p + 16);
    if (n > GOBLIN__CW_MAX_IO)
        return goblin__errf(r->msg, r->cap, GOBLIN_ELIMIT, "%u outputs over the limit of %d", n,
                            GOBLIN__CW_MAX_IO);
    if (r32(r->p + 20)) return goblin__errf(r->msg, r->cap, GOBLIN_EFORMAT, "non-zero padding");
    r->o = 24;
    NEED(r, 8 * (size_t)n, "OUTPUTS tensors");
    goblin_err e = alloc_io(r, m, n, 0);
    if (e) return e;
    m->n_io = n;
    return get_tensors(r, lim, m, n);
}

goblin_err goblin__cw_decode(const uint8_t *buf, size_t len, const goblin__cw_limits *lim,
                             goblin__cw_msg *m, char *msg, size_t cap) {
    if (!buf || !m || !lim) return goblin__errf(msg, cap, GOBLIN_EINVAL, "NULL argument");
    if (len < GOBLIN__CW_HEADER_SIZE)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                            "message of %zu bytes is shorter than a header", len);
    if (memcmp(buf, "GBLC", 4) != 0) return goblin__errf(msg, cap, GOBLIN_EFORMAT, "bad magic");
    uint16_t ver = r16(buf + 4);
    if (ver != GOBLIN__CW_VERSION)
        return goblin__errf(msg, cap, GOBLIN_EVERSION,
                            "client protocol version %u, this node speaks %u",
                            ver, GOBLIN__CW_VERSION);
    uint8_t type = buf[6];
    if (!goblin__cw_type_name(type) || buf[7] != 0)
        return goblin__errf(msg, cap, GOBLIN_EPROTO, "unknown message type %u or flags %u", type,
                            buf[7]);
    uint64_t blen = r64(buf + 16);
    if (len > lim->max_message_bytes)
        return goblin__errf(msg, cap, GOBLIN_ELIMIT, "message of %zu bytes over the limit", len);
    if (blen != len - GOBLIN__CW_HEADER_SIZE)
        return goblin__errf(msg, cap, GOBLIN_EFORMAT,
                            "body length %llu but %zu bytes follow the header",
                            (unsigned long long)blen, len - GOBLIN__CW_HEADER_SIZE);
    memset(m, 0, sizeof *m);
    m->type = type;
    m->request_id = r64(buf + 8);
    rd r = {buf + GOBLIN__CW_HEADER_SIZE, (size_t)blen, 0, msg, cap};
    goblin_err e;
    switch (type) {
    case GOBLIN__CW_SUBMIT_MATMUL:
        NEED(&r, 16, "job parameters");
        m->task_memory_bytes = r64(r.p);
        m->min_tasks = (int64_t)r64(r.p + 8);
        if ((e = job_fields_check(m->min_tasks, m->task_memory_bytes, msg, cap))) return e;
        r.o = 16;
        if ((e = get_tensor(&r, lim, &m->tensors[0])) || (e = get_tensor(&r, lim, &m->tensors[1])))
            return e;
        break;
    case GOBLIN__CW_SUBMIT_MATMUL_FILES: {
        NEED(&r, 32, "path lengths and job parameters");
        uint32_t l[3];
        for (int i = 0; i < 3; i++) {
            l[i] = r32(r.p + 4 * i);
            if (l[i] == 0 || l[i] > GOBLIN__CW_MAX_PATH)
                return goblin__errf(msg, cap, GOBLIN_EFORMAT, "path %d length %u out of 1..%d", i,
                                    l[i],
                                    GOBLIN__CW_MAX_PATH);
        }
        m->file_flags = r32(r.p + 12);
        if (m->file_flags & ~(uint32_t)GOBLIN__CW_FILE_FLAGS)
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "unknown file-job flags 0x%x",
                                m->file_flags);
        m->task_memory_bytes = r64(r.p + 16);
        m->min_tasks = (int64_t)r64(r.p + 24);
        if ((e = job_fields_check(m->min_tasks, m->task_memory_bytes, msg, cap))) return e;
        r.o = 32;
        size_t sum = (size_t)l[0] + l[1] + l[2];
        NEED(&r, pad8(32 + sum) - 32, "paths");
        for (int i = 0; i < 3; i++) {
            for (uint32_t k = 0; k < l[i]; k++) {
                uint8_t ch = r.p[r.o + k];
                if (ch < 0x20 || ch == 0x7f)
                    return goblin__errf(msg, cap, GOBLIN_EFORMAT, "control byte in path %d", i);
            }
            memcpy(m->paths[i], r.p + r.o, l[i]);
            m->paths[i][l[i]] = 0;
            r.o += l[i];
        }
        size_t end = pad8(r.o);
        if (!zeros(r.p + r.o, end - r.o))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "non-zero padding");
        r.o = end;
        break;
    }
    case GOBLIN__CW_STATUS: case GOBLIN__CW_CANCEL: case GOBLIN__CW_FETCH:
    case GOBLIN__CW_RELEASE: case GOBLIN__CW_OK:
        NEED(&r, GOBLIN__CW_ID_BYTES, "job id");
        get_id(r.p, &m->job_id);
        r.o = GOBLIN__CW_ID_BYTES;
        break;
    case GOBLIN__CW_STATS: case GOBLIN__CW_PING: break;
    case GOBLIN__CW_AUTH: {
        NEED(&r, 8, "AUTH");
        uint32_t tl = r32(r.p);
        if (tl == 0 || tl > GOBLIN__CW_MAX_TOKEN)
            return goblin__errf(msg, cap, GOBLIN_ELIMIT, "token of %u bytes out of 1..%d", tl,
                                GOBLIN__CW_MAX_TOKEN);
        if (r32(r.p + 4)) return goblin__errf(msg, cap, GOBLIN_EFORMAT, "non-zero padding");
        r.o = 8;
        NEED(&r, pad8(tl), "token");
        memcpy(m->token, r.p + r.o, tl);
        m->token_len = tl;
        if (!zeros(r.p + r.o + tl, pad8(tl) - tl))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "non-zero token padding");
        r.o += pad8(tl);
        break;
    }
    case GOBLIN__CW_PART: {
        NEED(&r, 24, "PART");
        m->part_total = r64(r.p);
        m->part_offset = r64(r.p + 8);
        m->part_len = r32(r.p + 16);
        m->part_flags = r32(r.p + 20);
        if (m->part_flags & ~GOBLIN__CW_PART_FLAGS)
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "unknown part flags 0x%x", m->part_flags);
        if (m->part_len == 0 || m->part_len > GOBLIN__CW_PART_MAX)
            return goblin__errf(msg, cap, GOBLIN_ELIMIT, "part of %u bytes out of 1..%zu",
                                m->part_len, GOBLIN__CW_PART_MAX);
        if (m->part_total > lim->max_message_bytes || m->part_offset > m->part_total ||
            m->part_len > m->part_total - m->part_offset)
            return goblin__errf(msg, cap, GOBLIN_ELIMIT, "part %llu+%u of a %llu-byte request "
                                "(limit %llu)", (unsigned long long)m->part_offset, m->part_len,
                                (unsigned long long)m->part_total,
                                (unsigned long long)lim->max_message_bytes);
        r.o = 24;
        NEED(&r, pad8(m->part_len), "part bytes");
        m->part_data = r.p + r.o;
        if (!zeros(r.p + r.o + m->part_len, pad8(m->part_len) - m->part_len))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "non-zero part padding");
        r.o += pad8(m->part_len);
        break;
    }
    case GOBLIN__CW_SUBMITTED:
        NEED(&r, 24, "SUBMITTED");
        get_id(r.p, &m->job_id);
        m->total = (int64_t)r64(r.p + 16);
        r.o = 24;
        break;
    case GOBLIN__CW_JOB_STATUS: {
        NEED(&r, 48, "JOB_STATUS");
        get_id(r.p, &m->job_id);
        m->status = r.p[16];
        if (m->status >= GOBLIN_JOB_STATUS_COUNT)
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "unknown job status %u", m->status);
        if (!zeros(r.p + 17, 3) || r32(r.p + 44))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "non-zero padding");
        m->code = (int32_t)r32(r.p + 20);
        m->done = (int64_t)r64(r.p + 24);
        m->total = (int64_t)r64(r.p + 32);
        if (m->done < 0 || m->total < 0 || m->done > m->total)
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "bad progress %lld of %lld",
                                (long long)m->done,
                                (long long)m->total);
        r.o = 48;
        if ((e = get_text(&r, r32(r.p + 40), m->text))) return e;
        break;
    }
    case GOBLIN__CW_RESULT:
        NEED(&r, 24, "RESULT");
        get_id(r.p, &m->job_id);
        if (r.p[16] > 1 || !zeros(r.p + 17, 7))
            return goblin__errf(msg, cap, GOBLIN_EFORMAT, "bad RESULT flags");
        m->has_tensor = r.p[16];
        r.o = 24;
        if (m->has_tensor && (e = get_tensor(&r, lim, &m->tensors[0]))) return e;
        break;
    case GOBLIN__CW_STATS_REPLY: {
        NEED(&r, 8, "STATS_REPLY");
        uint32_t nc = r32(r.p), nw = r32(r.p + 4);
        if (nc > GOBLIN__CW_MAX_COUNTERS || nw > GOBLIN__CW_MAX_WORKERS)
            return goblin__errf(msg, cap, GOBLIN_ELIMIT, "%u counters / %u workers over the limit",
                                nc, nw);
        r.o = 8;
        NEED(&r, 8 * (size_t)nc + GOBLIN__CW_WORKER_RECORD * (size_t)nw, "STATS_REPLY records");
        int64_t *c = (int64_t *)(void *)&m->stats;
        for (uint32_t i = 0; i < nc; i++, r.o += 8)
            if (i < STATS_N) c[i] = (int64_t)r64(r.p + r.o);
        if (nw) {
            m->workers = goblin__calloc(nw, sizeof *m->workers);
            if (!m->workers) return goblin__errf(msg, cap, GOBLIN_ENOMEM, "out of memory");
        }
        m->n_workers = nw;
        for (uint32_t i = 0; i < nw; i++, r.o += GOBLIN__CW_WORKER_RECORD) {
            const uint8_t *p = r.p + r.o;
            goblin_node_worker_stats *w = &m->workers[i];
            if (p[8] > 1 || p[9] > 1 || p[10] || p[11]) {
                goblin__cw_msg_clear(m);
                return goblin__errf(msg, cap, GOBLIN_EFORMAT, "bad worker record %u", i);
            }
            w->session_id = r64(p);
            w->connected = p[8];
            w->quarantined = p[9];
            w->threads = (int32_t)r32(p + 12);
            w->memory_bytes = r64(p + 16);
            w->issued = (int64_t)r64(p + 24);
            w->accepted = (int64_t)r64(p + 32);
            w->rejected = (int64_t)r64(p + 40);
            w->failed_leases = (int64_t)r64(p + 48);
            bool ok = get_identity(p + 56, w->identity);
            for (int k = 0; ok && k < 64 && p[88 + k]; k++)
                ok = p[88 + k] >= 0x20 && p[88 + k] < 0x7f;
            for (int k = (int)strnlen((const char *)p + 88, 64); ok && k < 64; k++) ok = p[88 + k] == 0;
            if (!ok || p[88 + 63]) {
                goblin__cw_msg_clear(m);
                return goblin__errf(msg, cap, GOBLIN_EFORMAT, "bad worker record %u", i);
            }
            memcpy(w->owner, p + 88, 64);
        }
        break;
    }
    case GOBLIN__CW_ERROR:
        NEED(&r, 8, "ERROR");
        m->code = (int32_t)r32(r.p);
        r.o = 8;
        if ((e = get_text(&r, r32(r.p + 4), m->text))) return e;
        break;
    case GOBLIN__CW_SUBMIT_GRAPH:
    case GOBLIN__CW_OUTPUTS:
        e = type == GOBLIN__CW_OUTPUTS ? get_outputs(&r, lim, m) : get_submit_graph(&r, lim, m);
        if (e) {
            goblin__cw_msg_clear(m);
            return e;
        }
        break;
    default:
        return goblin__errf(msg, cap, GOBLIN_EPROTO, "unknown message type %u", type);
    }
    if (r.o != r.n) {
        goblin__cw_msg_clear(m);
        return goblin__errf(msg, cap, GOBLIN_EFORMAT, "%zu trailing bytes after %s", r.n - r.o,
                            goblin__cw_type_name(type));
    }
    return GOBLIN_OK;
}

void goblin__cw_msg_clear(goblin__cw_msg *m) {
    if (!m) return;
    goblin__free(m->workers);
    m->workers = NULL;
    m->n_workers = 0;
    if (m->owned) { /* only a decoded message owns its arrays */
        goblin__free(m->owned);
        m->owned = NULL;
        m->io = NULL;
        m->split = m->combine = NULL;
        m->cache_ids = NULL;
        m->n_io = 0;
    }
}

goblin_err goblin__cw_encode_pieces(const goblin__cw_msg *m, uint8_t own[GOBLIN__CW_PIECES_OWN],
                                    goblin__cw_piece *pieces, int *n_pieces, size_t *total) {
    if (!m || !own || !pieces || !n_pieces || !total) return GOBLIN_EINVAL;
    if (m->type != GOBLIN__CW_SUBMIT_MATMUL) return GOBLIN_ENOTSUP;
    size_t sz;
    goblin_err e = goblin__cw_encoded_size(m, &sz); /* the tensors checked: contiguous, rank, dtype */
    if (e) return e;
    for (int i = 0; i < 2; i++)
        if (m->tensors[i].rank != 0 && !goblin_tensor_is_contiguous(&m->tensors[i])) return GOBLIN_ENOTSUP;
    memset(own, 0, GOBLIN__CW_PIECES_OWN);
    memcpy(own, "GBLC", 4);
    w16(own + 4, GOBLIN__CW_VERSION);
    own[6] = m->type;
    w64(own + 8, m->request_id);
    w64(own + 16, sz - GOBLIN__CW_HEADER_SIZE);
    w64(own + 24, m->task_memory_bytes);
    w64(own + 32, (uint64_t)m->min_tasks);
    size_t o = 40, start = 0, sum = 0;
    int k = 0;
    for (int i = 0; i < 2; i++) {
        size_t bytes;
        o += put_tensor_head(own + o, &m->tensors[i], &bytes);
        if (bytes) {
            pieces[k++] = (goblin__cw_piece){own + start, o - start};
            pieces[k++] = (goblin__cw_piece){m->tensors[i].data, bytes};
            sum += o - start + bytes;
            start = o;
        }
        o += pad8(bytes) - bytes; /* zeros, already in own */
    }
    if (o > start) {
        pieces[k++] = (goblin__cw_piece){own + start, o - start};
        sum += o - start;
    }
    if (sum != sz) return GOBLIN_EINVAL; /* cannot happen: the layout above is encode_into's */
    *n_pieces = k;
    *total = sz;
    return GOBLIN_OK;
}

void goblin__cw_put_part_head(uint8_t *buf, uint64_t rid, uint64_t total, uint64_t offset, uint32_t len,
                              uint32_t flags) {
    memset(buf, 0, GOBLIN__CW_PART_HEAD);
    memcpy(buf, "GBLC", 4);
    w16(buf + 4, GOBLIN__CW_VERSION);
    buf[6] = GOBLIN__CW_PART;
    w64(buf + 8, rid);
    w64(buf + 16, 24 + pad8(len));
    uint8_t *p = buf + GOBLIN__CW_HEADER_SIZE;
    w64(p, total);
    w64(p + 8, offset);
    w32(p + 16, len);
    w32(p + 20, flags);
}

size_t goblin__cw_part_size(uint32_t len) { return GOBLIN__CW_PART_HEAD + pad8(len); }
