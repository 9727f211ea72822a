/* tests/fuzz/fuzz_client_wire.c - fuzz target for the client protocol decoder
 * (goblin__cw_decode, libgoblin/client_wire.h): the gateway's requests and the
 * client's replies.
 *
 * Oracles beyond "no crash, no leak, no sanitizer report":
 *   - a rejected message holds nothing to free and explains itself, with one of the
 *     decoder's error codes;
 *   - an accepted message is canonical: it re-encodes to exactly the input bytes (a
 *     STATS_REPLY with another number of counters than this library's is accepted for
 *     compatibility and re-encodes with ours, so it is exempt);
 *   - a SUBMIT_GRAPH's graph blob goes through goblin_graph_deserialize as the gateway
 *     does, and its tensors lie inside the input. */
#include <goblin/alloc.h>
#include <goblin/graph.h>
#include <stdlib.h>
#include <string.h>

#include "proto/client_wire.h"
#include "fuzz.h"

static const goblin__cw_limits LIMITS = {(uint64_t)1 << 30, GOBLIN_MAX_NUMEL};

static void check_reencodes(const goblin__cw_msg *m, const uint8_t *data, size_t size) {
    size_t sz = 0, len = 0;
    goblin_err e = goblin__cw_encoded_size(m, &sz);
    FUZZ_CHECK(e == GOBLIN_OK, "an accepted message has no encoded size");
    FUZZ_CHECK(sz == size, "an accepted message re-encodes to another length");
    uint8_t *buf = malloc(sz ? sz : 1);
    if (!buf) return;
    e = goblin__cw_encode_into(m, buf, sz, &len);
    FUZZ_CHECK(e == GOBLIN_OK && len == size, "an accepted message does not re-encode");
    FUZZ_CHECK(memcmp(buf, data, size) == 0, "an accepted message is not canonical");
    free(buf);
}

static bool inside(const void *p, size_t n, const uint8_t *data, size_t size) {
    const uint8_t *q = p;
    return n == 0 || (q >= data && q + n <= data + size);
}

int fuzz_client_wire_one(const uint8_t *data, size_t size) {
    static goblin__cw_msg m; /* large (paths): not on the stack */
    goblin_errbuf msg_eb = {0};
    memset(&m, 0, sizeof m);
    goblin_err e = goblin__cw_decode(data, size, &LIMITS, &m, msg_eb.message, sizeof msg_eb.message);
    if (e != GOBLIN_OK) {
        FUZZ_CHECK(m.workers == NULL && m.owned == NULL, "a rejected message holds memory");
        FUZZ_CHECK(msg_eb.message[0] != 0, "rejected without a message");
        FUZZ_CHECK(e == GOBLIN_EFORMAT || e == GOBLIN_ELIMIT || e == GOBLIN_EPROTO ||
                       e == GOBLIN_EVERSION || e == GOBLIN_ENOMEM,
                   "unexpected error code");
        return 0;
    }
    FUZZ_CHECK(m.type == data[6], "decoded type differs from the header's");
    bool exempt = m.type == GOBLIN__CW_STATS_REPLY &&
                  (data[24] | data[25] << 8 | data[26] << 16 | (uint32_t)data[27] << 24) !=
                      sizeof(goblin_node_stats) / sizeof(int64_t);
    if (!exempt) check_reencodes(&m, data, size);
    if (m.type == GOBLIN__CW_SUBMIT_GRAPH || m.type == GOBLIN__CW_OUTPUTS) {
        for (uint32_t i = 0; i < m.n_io; i++) {
            const goblin_tensor *t = &m.io[i];
            size_t b = (size_t)goblin_tensor_numel(t) * goblin_dtype_size(t->dtype);
            FUZZ_CHECK(inside(t->data, b, data, size), "a tensor's data lies outside the message");
        }
    }
    if (m.type == GOBLIN__CW_SUBMIT_GRAPH) {
        FUZZ_CHECK(inside(m.graph, (size_t)m.graph_len, data, size), "graph outside the message");
        goblin_graph *g = NULL;
        if (goblin_graph_deserialize(m.graph, (size_t)m.graph_len, NULL, &g, &msg_eb) ==
            GOBLIN_OK)
            goblin_graph_free(g);
    }
    goblin__cw_msg_clear(&m);
    FUZZ_CHECK(m.workers == NULL && m.owned == NULL, "clear left memory behind");
    return 0;
}

/* Make the header's body length agree with the buffer (as fuzz_wire_fixup does). */
void fuzz_client_wire_fixup(uint8_t *data, size_t size) {
    if (size < GOBLIN__CW_HEADER_SIZE) return;
    uint64_t body = (uint64_t)(size - GOBLIN__CW_HEADER_SIZE);
    for (int i = 0; i < 8; i++) data[16 + i] = (uint8_t)(body >> (8 * i));
}

/* ---- seeds: one of every message type, built through the encoder ---------------- */

static void emit_cw(goblin__cw_msg *m, fuzz_emit_fn emit, void *ctx) {
    size_t sz, len;
    if (goblin__cw_encoded_size(m, &sz) != GOBLIN_OK) return;
    uint8_t *buf = malloc(sz);
    if (!buf) return;
    if (goblin__cw_encode_into(m, buf, sz, &len) == GOBLIN_OK) emit(ctx, buf, len);
    free(buf);
}

typedef struct graph_blob {
    uint8_t *buf;
    size_t len;
} graph_blob;

/* A small batched graph: relu(x . w + b) and its sum over the batch. */
static void build_graph(graph_blob *out) {
    out->buf = NULL;
    out->len = 0;
    goblin_graph *g;
    if (goblin_graph_new(&g) != GOBLIN_OK) return;
    int64_t sx[] = {6, 3}, sw[] = {3, 2}, sb[] = {2}, ax[] = {0};
    int32_t x, w, b, mm, s, r, t;
    goblin_attr at[] = {goblin_attr_ints(GOBLIN_ATTR_AXES, ax, 1),
                        goblin_attr_int(GOBLIN_ATTR_KEEPDIM, 0)};
    if (goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sx, &x) == GOBLIN_OK &&
        goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sw, &w) == GOBLIN_OK &&
        goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, sb, &b) == GOBLIN_OK &&
        goblin_graph_add(g, GOBLIN_OP_MATMUL, (int32_t[]){x, w}, 2, NULL, 0, &mm) == GOBLIN_OK &&
        goblin_graph_add(g, GOBLIN_OP_ADD, (int32_t[]){mm, b}, 2, NULL, 0, &s) == GOBLIN_OK &&
        goblin_graph_add(g, GOBLIN_OP_RELU, &s, 1, NULL, 0, &r) == GOBLIN_OK &&
        goblin_graph_add(g, GOBLIN_OP_SUM, &r, 1, at, 2, &t) == GOBLIN_OK &&
        goblin_graph_output(g, r) == GOBLIN_OK && goblin_graph_output(g, t) == GOBLIN_OK) {
        uint8_t *buf;
        size_t len;
        if (goblin_graph_serialize(g, &buf, &len) == GOBLIN_OK) {
            out->buf = buf;
            out->len = len;
        }
    }
    goblin_graph_free(g);
}

void fuzz_client_wire_seeds(fuzz_emit_fn emit, void *ctx) {
    goblin__cw_msg *m = calloc(1, sizeof *m);
    if (!m) return;
    static float xv[18], wv[6] = {1, -2, 3, -4, 5, -6}, bv[2] = {0.5f, -0.5f};
    for (int i = 0; i < 18; i++) xv[i] = (float)i - 8.5f;
    int64_t sx[] = {6, 3}, sw[] = {3, 2}, sb[] = {2}, se[] = {0, 4};
    goblin_tensor ts[4];
    goblin_tensor_init(&ts[0], GOBLIN_DTYPE_F32, 2, sx, xv);
    goblin_tensor_init(&ts[1], GOBLIN_DTYPE_F32, 2, sw, wv);
    goblin_tensor_init(&ts[2], GOBLIN_DTYPE_F32, 1, sb, bv);
    goblin_tensor_init(&ts[3], GOBLIN_DTYPE_I16, 2, se, NULL);

    m->type = GOBLIN__CW_SUBMIT_MATMUL;
    m->request_id = 1;
    m->tensors[0] = ts[1];
    m->tensors[1] = ts[0]; /* shapes need not agree for the codec */
    emit_cw(m, emit, ctx);

    memset(m, 0, sizeof *m);
    m->type = GOBLIN__CW_SUBMIT_MATMUL_FILES;
    strcpy(m->paths[0], "/data/a.npy");
    strcpy(m->paths[1], "b.npy");
    strcpy(m->paths[2], "/tmp/c\xc3\xa9.npy");
    emit_cw(m, emit, ctx);

    static const uint8_t idmsgs[] = {GOBLIN__CW_PING, GOBLIN__CW_STATUS, GOBLIN__CW_CANCEL, GOBLIN__CW_FETCH,
                                     GOBLIN__CW_RELEASE, GOBLIN__CW_OK, GOBLIN__CW_STATS};
    for (size_t i = 0; i < sizeof idmsgs; i++) {
        memset(m, 0, sizeof *m);
        m->type = idmsgs[i];
        m->request_id = 7 + i;
        m->job_id.bytes[0] = (uint8_t)(1000 + i);
        m->job_id.bytes[15] = 0xee;
        emit_cw(m, emit, ctx);
    }

    /* AUTH: a short token (padding after it), one of exactly 8 bytes, and the longest */
    static const uint32_t tlens[] = {5, 8, GOBLIN__CW_MAX_TOKEN};
    for (size_t i = 0; i < sizeof tlens / sizeof tlens[0]; i++) {
        memset(m, 0, sizeof *m);
        m->type = GOBLIN__CW_AUTH;
        m->request_id = 20 + i;
        m->token_len = tlens[i];
        for (uint32_t k = 0; k < tlens[i]; k++) m->token[k] = (uint8_t)('a' + (k * 7 + i) % 26);
        emit_cw(m, emit, ctx);
    }

    memset(m, 0, sizeof *m);
    m->type = GOBLIN__CW_SUBMITTED;
    m->job_id.bytes[3] = 3;
    m->total = 12;
    emit_cw(m, emit, ctx);

    memset(m, 0, sizeof *m);
    m->type = GOBLIN__CW_JOB_STATUS;
    m->job_id.bytes[3] = 3;
    m->status = GOBLIN_JOB_FAILED;
    m->code = GOBLIN_ELIMIT;
    m->done = 5;
    m->total = 9;
    strcpy(m->text, "task 4: out of memory on the worker");
    emit_cw(m, emit, ctx);

    memset(m, 0, sizeof *m);
    m->type = GOBLIN__CW_RESULT;
    m->job_id.bytes[3] = 4;
    m->has_tensor = true;
    m->tensors[0] = ts[2];
    emit_cw(m, emit, ctx);
    m->has_tensor = false;
    emit_cw(m, emit, ctx);

    memset(m, 0, sizeof *m);
    m->type = GOBLIN__CW_STATS_REPLY;
    m->stats.results_accepted = 99;
    goblin_node_worker_stats ws[2] = {{.session_id = 9, .connected = true, .threads = 2},
                                      {.session_id = 10, .quarantined = true, .rejected = 3}};
    m->workers = ws;
    m->n_workers = 2;
    emit_cw(m, emit, ctx);

    memset(m, 0, sizeof *m);
    m->type = GOBLIN__CW_ERROR;
    m->code = GOBLIN_ESHAPE;
    strcpy(m->text, "inner dimensions differ");
    emit_cw(m, emit, ctx);

    memset(m, 0, sizeof *m);
    m->type = GOBLIN__CW_OUTPUTS;
    m->job_id.bytes[3] = 5;
    m->n_io = 3;
    m->io = ts + 1;
    emit_cw(m, emit, ctx);

    graph_blob gb;
    build_graph(&gb);
    if (gb.len) {
        static uint8_t split[3] = {GOBLIN_SPLIT_BATCH, GOBLIN_SPLIT_BROADCAST, GOBLIN_SPLIT_BROADCAST};
        static uint8_t combine[2] = {GOBLIN_COMBINE_CONCAT, GOBLIN_COMBINE_SUM};
        static uint64_t cache[3] = {0, 0x1234, 0x5678};
        memset(m, 0, sizeof *m);
        m->type = GOBLIN__CW_SUBMIT_GRAPH;
        m->request_id = 11;
        m->graph = gb.buf;
        m->graph_len = gb.len;
        m->n_io = 3;
        m->n_outputs = 2;
        m->io = ts;
        m->verify = GOBLIN_VERIFY_REPLICATE;
        m->min_replication = 0.25;
        m->trust_halflife = 20;
        emit_cw(m, emit, ctx); /* defaults: no arrays */
        m->split = split;
        m->combine = combine;
        m->cache_ids = cache;
        m->chunk_rows = 2;
        m->task_memory_bytes = 1 << 20;
        m->min_tasks = 3;
        m->verify = GOBLIN_VERIFY_RECOMPUTE;
        emit_cw(m, emit, ctx);
        goblin_buffer_free(gb.buf);
    }
    free(m);
}

#ifdef GOBLIN_LIBFUZZER
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_client_wire_one(data, size);
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    size = LLVMFuzzerMutate(data, size, max_size);
    if (seed % 4 != 0) fuzz_client_wire_fixup(data, size);
    return size;
}
#endif
