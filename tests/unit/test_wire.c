/* tests/unit/test_wire.c - the message framing (libgoblin/wire.c): byte-exact
 * encodings derived by hand from docs/wire-protocol.md, round trips of every
 * message type, a hostile decoder (every truncation, random byte flips, oversized
 * lengths and counts caught before any allocation, inconsistent tensors, version
 * mismatches), zero-copy views, and no names on the wire. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include "testutil.h"
#include "proto/wire.h"

/* ---- helpers ------------------------------------------------------------- */

static uint64_t rd_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void wr_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint8_t *encode(const goblin__wire_msg *m, size_t *len) {
    uint8_t *buf = NULL;
    goblin_err e = goblin__wire_encode(m, &buf, len);
    cr_assert_eq(e, GOBLIN_OK, "encode: %s", goblin_err_name(e));
    return buf;
}

static goblin__wire_msg *decode_ok(const uint8_t *buf, size_t len, uint32_t flags) {
    goblin__wire_msg *m = NULL;
    char msg[256];
    goblin_err e = goblin__wire_decode(buf, len, NULL, flags, &m, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_OK, "decode: %s: %s", goblin_err_name(e), msg);
    return m;
}

static goblin_err decode_err(const uint8_t *buf, size_t len, const goblin__wire_limits *lim,
                             char *msg, size_t cap) {
    goblin__wire_msg *m = NULL;
    goblin_err e = goblin__wire_decode(buf, len, lim, 0, &m, msg, cap);
    if (e == GOBLIN_OK) goblin__wire_msg_free(m);
    else cr_assert_null(m, "*out set on failure");
    return e;
}

/* The counting allocator (testutil.h): how many allocations a call makes, and that
 * none leak. */

/* ---- a TASK whose layout is derived by hand ------------------------------ */

/* graph blob of 5 bytes (opaque to the framing), then
 *   f32 [2,3] = 0.5 .. 3.0, u8 [3] = 7 8 9, i64 scalar = -5.
 * Offsets (docs/wire-protocol.md):
 *   0 header | 24 task id | 32 lease_ms | 36 n_inputs | 40 graph_len | 48 graph[5]
 *   53 pad[3] | 56 t0 head | 64 dim 2 | 72 dim 3 | 80 nbytes 24 | 88 data[24]
 *   112 t1 head | 120 dim 3 | 128 nbytes 3 | 136 data[3] | 139 pad[5]
 *   144 t2 head | 152 nbytes 8 | 160 data[8] | 168 end */
static const uint8_t FAKE_GRAPH[5] = {0xA1, 0xA2, 0xA3, 0xA4, 0xA5};
static float T0[6] = {0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f};
static uint8_t T1[3] = {7, 8, 9};
static int64_t T2 = -5;
static goblin_tensor g_ins[3];

static void sample_task(goblin__wire_msg *m) {
    int64_t s0[] = {2, 3}, s1[] = {3};
    g_ins[0] = gt_tensor(GOBLIN_DTYPE_F32, 2, s0, T0);
    g_ins[1] = gt_tensor(GOBLIN_DTYPE_U8, 1, s1, T1);
    g_ins[2] = gt_tensor(GOBLIN_DTYPE_I64, 0, NULL, &T2);
    cr_assert_eq(goblin__wire_msg_init(m, GOBLIN_WIRE_TYPE_TASK), GOBLIN_OK);
    m->request_id = 0x1122334455667788ull;
    m->body.task.task_id = 0x0A0B0C0D0E0F1011ull;
    m->body.task.lease_ms = 30000;
    m->body.task.graph = FAKE_GRAPH;
    m->body.task.graph_len = sizeof FAKE_GRAPH;
    m->body.task.n_inputs = 3;
    m->body.task.inputs = g_ins;
}

static const uint8_t TOKEN[5] = {0x00, 0xFF, 't', 'k', 0x80};
static const uint8_t PROOF_KEY[3] = {0x30, 0x59, 0x30};
static const uint8_t PROOF_SIG[2] = {0x30, 0x44};

/* One sample of every type, filled with distinctive values. */
static void sample(goblin__wire_type type, goblin__wire_msg *m) {
    if (type == GOBLIN_WIRE_TYPE_TASK) {
        sample_task(m);
        return;
    }
    cr_assert_eq(goblin__wire_msg_init(m, type), GOBLIN_OK);
    m->request_id = 1000 + (uint64_t)type;
    static int64_t s[] = {2, 2};
    static double rv[4] = {1.0, -2.0, 0.25, 1e300};
    static goblin_tensor outs[2];
    switch (type) {
    case GOBLIN_WIRE_TYPE_HELLO:
        m->body.hello.backends = 0x3;
        m->body.hello.threads = 16;
        m->body.hello.memory_bytes = 0x123456789ull;
        m->body.hello.token = TOKEN;
        m->body.hello.token_len = sizeof TOKEN;
        break;
    case GOBLIN_WIRE_TYPE_HELLO_ACK:
        m->body.hello_ack.session_id = 0xDEADBEEFCAFEull;
        m->body.hello_ack.heartbeat_ms = 2500;
        m->body.hello_ack.max_message_bytes = 1u << 20;
        break;
    case GOBLIN_WIRE_TYPE_REFUSE:
        m->body.refuse.reason = GOBLIN_EAUTH;
        m->body.refuse.message = "bad join token";
        break;
    case GOBLIN_WIRE_TYPE_LEASE_REQUEST: m->body.lease_request.slots = 3; break;
    case GOBLIN_WIRE_TYPE_RESULT:
        outs[0] = gt_tensor(GOBLIN_DTYPE_F64, 2, s, rv);
        outs[1] = gt_tensor(GOBLIN_DTYPE_BOOL, 1, (int64_t[]){0}, NULL); /* empty */
        m->body.result.task_id = 77;
        m->body.result.n_outputs = 2;
        m->body.result.outputs = outs;
        break;
    case GOBLIN_WIRE_TYPE_ABANDON: m->body.abandon.task_id = 0xFFFFFFFFFFFFFFFFull; break;
    case GOBLIN_WIRE_TYPE_HEARTBEAT: m->body.heartbeat.active_tasks = 4; break;
    case GOBLIN_WIRE_TYPE_ERROR:
        m->body.error.code = GOBLIN_EINDEX;
        m->body.error.task_id = 9;
        m->body.error.message = "node 3 (gather): index 12 out of range [0, 4)";
        break;
    case GOBLIN_WIRE_TYPE_CHALLENGE:
        for (int i = 0; i < GOBLIN_WIRE_NONCE_BYTES; i++) m->body.challenge.nonce[i] = (uint8_t)(0xA0 + i);
        break;
    case GOBLIN_WIRE_TYPE_PROOF:
        m->body.proof.key = PROOF_KEY;
        m->body.proof.key_len = sizeof PROOF_KEY;
        m->body.proof.sig = PROOF_SIG;
        m->body.proof.sig_len = sizeof PROOF_SIG;
        break;
    case GOBLIN_WIRE_TYPE_INTRODUCE:
        for (int i = 0; i < GOBLIN_WIRE_TICKET_BYTES; i++) m->body.introduce.ticket[i] = (uint8_t)(0x10 + i);
        for (int i = 0; i < 32; i++) m->body.introduce.fingerprint[i] = (uint8_t)(0xC0 + i);
        m->body.introduce.url = "tls+tcp://lab.example.org:7700";
        break;
    default: cr_assert_fail("no sample for type %d", type);
    }
}

/* ---- byte-exact encodings ------------------------------------------------ */

Test(wire, heartbeat_bytes) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HEARTBEAT);
    m.request_id = 0x0102030405060708ull;
    m.body.heartbeat.active_tasks = 7;
    static const uint8_t want[] = {'G', 'B', 'L', 'W', 2, 0, 8, 0,
                                   8,   7,   6,   5,   4, 3, 2, 1,
                                   4,   0,   0,   0,   0, 0, 0, 0,
                                   7,   0,   0,   0};
    size_t len;
    uint8_t *b = encode(&m, &len);
    cr_assert_eq(len, sizeof want);
    cr_assert_arr_eq(b, want, sizeof want);
    size_t sz;
    cr_assert_eq(goblin__wire_encoded_size(&m, &sz), GOBLIN_OK);
    cr_assert_eq(sz, sizeof want);
    goblin__wire_msg *d = decode_ok(b, len, 0);
    cr_assert_eq(d->type, GOBLIN_WIRE_TYPE_HEARTBEAT);
    cr_assert_eq(d->version, 2);
    cr_assert_eq(d->request_id, 0x0102030405060708ull);
    cr_assert_eq(d->body.heartbeat.active_tasks, 7);
    goblin__wire_msg_free(d);
    goblin_buffer_free(b);
}

Test(wire, refuse_and_error_bytes) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_REFUSE);
    m.request_id = 5;
    m.body.refuse.reason = GOBLIN_EVERSION; /* 7 */
    m.body.refuse.message = "old";
    static const uint8_t want[] = {'G', 'B', 'L', 'W', 2, 0, 3, 0, 5, 0, 0, 0, 0, 0, 0, 0,
                                   9,   0,   0,   0,   0, 0, 0, 0, /* body: 4 + 2 + 3 */
                                   7,   0,   0,   0,   3, 0, 'o', 'l', 'd'};
    size_t len;
    uint8_t *b = encode(&m, &len);
    cr_assert_eq(len, sizeof want);
    cr_assert_arr_eq(b, want, sizeof want);
    goblin__wire_msg *d = decode_ok(b, len, 0);
    cr_assert_eq(d->body.refuse.reason, GOBLIN_EVERSION);
    cr_assert_str_eq(d->body.refuse.message, "old");
    goblin__wire_msg_free(d);
    goblin_buffer_free(b);

    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_ERROR);
    m.body.error.code = GOBLIN_ERANGE; /* 5 */
    m.body.error.task_id = 0x0102;
    m.body.error.message = NULL; /* encodes as "" */
    static const uint8_t want2[] = {'G', 'B', 'L', 'W', 2, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                    14,  0,   0,   0,   0, 0, 0, 0, /* 4 + 8 + 2 */
                                    5,   0,   0,   0,   2, 1, 0, 0, 0, 0, 0, 0, 0, 0};
    b = encode(&m, &len);
    cr_assert_eq(len, sizeof want2);
    cr_assert_arr_eq(b, want2, sizeof want2);
    d = decode_ok(b, len, 0);
    cr_assert_eq(d->body.error.code, GOBLIN_ERANGE);
    cr_assert_eq(d->body.error.task_id, 0x0102);
    cr_assert_str_eq(d->body.error.message, "");
    goblin__wire_msg_free(d);
    goblin_buffer_free(b);
}

Test(wire, challenge_and_proof_bytes) {
    goblin__wire_msg m;
    sample(GOBLIN_WIRE_TYPE_PROOF, &m);
    m.request_id = 0;
    /* header, then u32 key length 3, u32 signature length 2, the key, the signature */
    static const uint8_t want[] = {'G', 'B', 'L', 'W', 2, 0, 11, 0, 0,    0,    0,    0,    0,    0, 0, 0,
                                   13,  0,   0,   0,   0, 0, 0,  0, /* 4 + 4 + 3 + 2 */
                                   3,   0,   0,   0,   2, 0, 0,  0, 0x30, 0x59, 0x30, 0x30, 0x44};
    size_t len;
    uint8_t *b = encode(&m, &len);
    cr_assert_eq(len, sizeof want);
    cr_assert_arr_eq(b, want, sizeof want);
    goblin__wire_msg *d = decode_ok(b, len, 0);
    cr_assert_eq(d->body.proof.key_len, 3);
    cr_assert_arr_eq(d->body.proof.key, PROOF_KEY, 3);
    cr_assert_eq(d->body.proof.sig_len, 2);
    cr_assert_arr_eq(d->body.proof.sig, PROOF_SIG, 2);
    goblin__wire_msg_free(d);
    goblin_buffer_free(b);
    /* an empty signature and an oversized key are refused both ways */
    m.body.proof.sig_len = 0;
    cr_assert_eq(goblin__wire_encode(&m, &b, &len), GOBLIN_EINVAL);
    m.body.proof.sig_len = 2;
    m.body.proof.key_len = GOBLIN_WIRE_MAX_KEY_BYTES + 1;
    cr_assert_eq(goblin__wire_encode(&m, &b, &len), GOBLIN_ELIMIT);
    uint8_t bad[sizeof want];
    memcpy(bad, want, sizeof want);
    bad[28] = 0; /* signature length 0 */
    char msg[256];
    cr_assert_eq(decode_err(bad, sizeof bad, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
    cr_assert(strstr(msg, "signature"), "%s", msg);

    sample(GOBLIN_WIRE_TYPE_CHALLENGE, &m);
    b = encode(&m, &len);
    cr_assert_eq(len, 24 + GOBLIN_WIRE_NONCE_BYTES);
    cr_assert_eq(b[6], GOBLIN_WIRE_TYPE_CHALLENGE);
    for (int i = 0; i < GOBLIN_WIRE_NONCE_BYTES; i++) cr_assert_eq(b[24 + i], 0xA0 + i);
    cr_assert_eq(decode_err(b, len - 1, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
    goblin_buffer_free(b);
}

Test(wire, hello_bytes) {
    goblin__wire_msg m;
    sample(GOBLIN_WIRE_TYPE_HELLO, &m);
    size_t len;
    uint8_t *b = encode(&m, &len);
    /* header 24 + catalog 4 + software 4 + backends 4 + threads 4 + memory 8 + len 4 + token 5 */
    cr_assert_eq(len, 24 + 28 + 5);
    cr_assert_eq(rd_le(b + 6, 1), 1);
    cr_assert_eq(rd_le(b + 8, 8), 1001);
    cr_assert_eq(rd_le(b + 16, 8), 33);
    cr_assert_eq(rd_le(b + 24, 4), GOBLIN_CATALOG_VERSION);
    cr_assert_eq(rd_le(b + 28, 4), (GOBLIN_VERSION_MAJOR << 16) | (GOBLIN_VERSION_MINOR << 8) |
                                       GOBLIN_VERSION_PATCH);
    cr_assert_eq(rd_le(b + 32, 4), 3);
    cr_assert_eq(rd_le(b + 36, 4), 16);
    cr_assert_eq(rd_le(b + 40, 8), 0x123456789ull);
    cr_assert_eq(rd_le(b + 48, 4), 5);
    cr_assert_arr_eq(b + 52, TOKEN, 5);
    goblin__wire_msg *d = decode_ok(b, len, 0);
    cr_assert_eq(d->body.hello.catalog_version, goblin_catalog_version());
    cr_assert_eq(d->body.hello.software_version, GOBLIN_WIRE_SOFTWARE_VERSION);
    cr_assert_eq(d->body.hello.backends, 3);
    cr_assert_eq(d->body.hello.threads, 16);
    cr_assert_eq(d->body.hello.memory_bytes, 0x123456789ull);
    cr_assert_eq(d->body.hello.token_len, 5);
    cr_assert_arr_eq(d->body.hello.token, TOKEN, 5);
    cr_assert(d->body.hello.token < b || d->body.hello.token >= b + len, "token must be a copy");
    goblin__wire_msg_free(d);
    goblin_buffer_free(b);
}

Test(wire, task_bytes) {
    goblin__wire_msg m;
    sample_task(&m);
    size_t len;
    uint8_t *b = encode(&m, &len);
    cr_assert_eq(len, 168);
    cr_assert_eq(rd_le(b + 6, 1), GOBLIN_WIRE_TYPE_TASK);
    cr_assert_eq(rd_le(b + 8, 8), 0x1122334455667788ull);
    cr_assert_eq(rd_le(b + 16, 8), 144);
    cr_assert_eq(rd_le(b + 24, 8), 0x0A0B0C0D0E0F1011ull);
    cr_assert_eq(rd_le(b + 32, 4), 30000);
    cr_assert_eq(rd_le(b + 36, 4), 3);
    cr_assert_eq(rd_le(b + 40, 8), 5);
    cr_assert_arr_eq(b + 48, FAKE_GRAPH, 5);
    cr_assert_eq(rd_le(b + 53, 3), 0);
    /* f32 [2,3] */
    cr_assert_eq(rd_le(b + 56, 8), 0x0200 | GOBLIN_DTYPE_F32); /* dtype 0, rank 2, zeros */
    cr_assert_eq(rd_le(b + 64, 8), 2);
    cr_assert_eq(rd_le(b + 72, 8), 3);
    cr_assert_eq(rd_le(b + 80, 8), 24);
    cr_assert_eq(rd_le(b + 88, 4), 0x3F000000u); /* 0.5f */
    cr_assert_eq(rd_le(b + 108, 4), 0x40400000u); /* 3.0f */
    /* u8 [3] */
    cr_assert_eq(rd_le(b + 112, 8), 0x0100 | GOBLIN_DTYPE_U8);
    cr_assert_eq(rd_le(b + 120, 8), 3);
    cr_assert_eq(rd_le(b + 128, 8), 3);
    cr_assert_eq(b[136], 7);
    cr_assert_eq(b[138], 9);
    cr_assert_eq(rd_le(b + 139, 5), 0);
    /* i64 scalar */
    cr_assert_eq(rd_le(b + 144, 8), GOBLIN_DTYPE_I64);
    cr_assert_eq(rd_le(b + 152, 8), 8);
    cr_assert_eq((int64_t)rd_le(b + 160, 8), -5);

    goblin__wire_msg *d = decode_ok(b, len, 0);
    const goblin__wire_task *t = &d->body.task;
    cr_assert_eq(d->request_id, 0x1122334455667788ull);
    cr_assert_eq(t->task_id, 0x0A0B0C0D0E0F1011ull);
    cr_assert_eq(t->lease_ms, 30000);
    cr_assert_eq(t->graph_len, 5);
    cr_assert_arr_eq(t->graph, FAKE_GRAPH, 5);
    cr_assert_eq(t->n_inputs, 3);
    cr_assert_eq(t->inputs[0].dtype, GOBLIN_DTYPE_F32);
    cr_assert_eq(t->inputs[0].rank, 2);
    cr_assert_eq(t->inputs[0].shape[0], 2);
    cr_assert_eq(t->inputs[0].shape[1], 3);
    cr_assert(goblin_tensor_is_contiguous(&t->inputs[0]));
    cr_assert_eq(t->inputs[0].strides[0], 3);
    cr_assert_arr_eq(t->inputs[0].data, T0, sizeof T0);
    cr_assert_eq((uintptr_t)t->inputs[0].data % 64, 0, "copies are 64-byte aligned");
    cr_assert_eq(t->inputs[1].dtype, GOBLIN_DTYPE_U8);
    cr_assert_arr_eq(t->inputs[1].data, T1, 3);
    cr_assert_eq(t->inputs[2].rank, 0);
    cr_assert_eq(*(int64_t *)t->inputs[2].data, -5);
    goblin__wire_msg_free(d);
    goblin_buffer_free(b);
}

/* ---- round trips --------------------------------------------------------- */

static void same_tensors(const goblin_tensor *a, const goblin_tensor *b, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        cr_assert_eq(a[i].dtype, b[i].dtype);
        cr_assert_eq(a[i].rank, b[i].rank);
        int64_t numel = 1;
        for (int32_t d = 0; d < a[i].rank; d++) {
            cr_assert_eq(a[i].shape[d], b[i].shape[d]);
            numel *= a[i].shape[d];
        }
        size_t nb = (size_t)numel * goblin_dtype_size(a[i].dtype);
        if (nb) cr_assert_arr_eq(a[i].data, b[i].data, nb, "tensor %d data", i);
    }
}

Test(wire, every_type_round_trips_and_is_canonical) {
    for (int ty = 1; ty < GOBLIN_WIRE_TYPE_COUNT; ty++) {
        goblin__wire_msg m;
        sample((goblin__wire_type)ty, &m);
        size_t len, len2;
        uint8_t *b = encode(&m, &len);
        goblin__wire_msg *d = decode_ok(b, len, 0);
        cr_assert_eq(d->type, ty);
        cr_assert_eq(d->request_id, m.request_id);
        switch (ty) {
        case GOBLIN_WIRE_TYPE_HELLO_ACK:
            cr_assert_eq(d->body.hello_ack.catalog_version, GOBLIN_CATALOG_VERSION);
            cr_assert_eq(d->body.hello_ack.software_version, GOBLIN_WIRE_SOFTWARE_VERSION);
            cr_assert_eq(d->body.hello_ack.session_id, 0xDEADBEEFCAFEull);
            cr_assert_eq(d->body.hello_ack.heartbeat_ms, 2500);
            cr_assert_eq(d->body.hello_ack.max_message_bytes, 1u << 20);
            break;
        case GOBLIN_WIRE_TYPE_REFUSE:
            cr_assert_eq(d->body.refuse.reason, GOBLIN_EAUTH);
            cr_assert_str_eq(d->body.refuse.message, "bad join token");
            break;
        case GOBLIN_WIRE_TYPE_LEASE_REQUEST: cr_assert_eq(d->body.lease_request.slots, 3); break;
        case GOBLIN_WIRE_TYPE_RESULT:
            cr_assert_eq(d->body.result.task_id, 77);
            cr_assert_eq(d->body.result.n_outputs, 2);
            same_tensors(d->body.result.outputs, m.body.result.outputs, 2);
            cr_assert_eq(((double *)d->body.result.outputs[0].data)[3], 1e300);
            cr_assert_eq(d->body.result.outputs[1].shape[0], 0);
            cr_assert_not_null(d->body.result.outputs[1].data);
            break;
        case GOBLIN_WIRE_TYPE_ABANDON:
            cr_assert_eq(d->body.abandon.task_id, 0xFFFFFFFFFFFFFFFFull);
            break;
        case GOBLIN_WIRE_TYPE_HEARTBEAT: cr_assert_eq(d->body.heartbeat.active_tasks, 4); break;
        case GOBLIN_WIRE_TYPE_ERROR:
            cr_assert_eq(d->body.error.code, GOBLIN_EINDEX);
            cr_assert_eq(d->body.error.task_id, 9);
            cr_assert_str_eq(d->body.error.message, m.body.error.message);
            break;
        case GOBLIN_WIRE_TYPE_TASK: same_tensors(d->body.task.inputs, g_ins, 3); break;
        default: break; /* HELLO is checked field by field in hello_bytes */
        }
        /* canonical: the decoded message encodes to the very same bytes */
        uint8_t *b2 = encode(d, &len2);
        cr_assert_eq(len2, len, "%s", goblin__wire_type_name((goblin__wire_type)ty));
        cr_assert_arr_eq(b2, b, len, "%s re-encodes differently", goblin__wire_type_name((goblin__wire_type)ty));
        goblin_buffer_free(b2);
        goblin__wire_msg_free(d);
        goblin_buffer_free(b);
    }
}

Test(wire, every_dtype_and_rank_round_trips) {
    static uint8_t data[8 * 64];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 37 + 11);
    for (int dt = 0; dt < GOBLIN_DTYPE_COUNT; dt++) {
        goblin_tensor ts[GOBLIN_MAX_RANK + 1];
        int64_t shape[GOBLIN_MAX_RANK];
        for (int r = 0; r <= GOBLIN_MAX_RANK; r++) {
            for (int d = 0; d < r; d++) shape[d] = d < 6 ? 2 : 1; /* up to 64 elements */
            ts[r] = gt_tensor((goblin_dtype)dt, r, shape, data);
        }
        goblin__wire_msg m;
        goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_RESULT);
        m.body.result.task_id = 1;
        m.body.result.n_outputs = GOBLIN_MAX_RANK + 1;
        m.body.result.outputs = ts;
        size_t len;
        uint8_t *b = encode(&m, &len);
        cr_assert_eq(len % 8, 0);
        goblin__wire_msg *d = decode_ok(b, len, 0);
        same_tensors(d->body.result.outputs, ts, GOBLIN_MAX_RANK + 1);
        goblin__wire_msg_free(d);
        goblin_buffer_free(b);
    }
}

/* ---- hostile input ------------------------------------------------------- */

Test(wire, every_truncation_is_rejected) {
    for (int ty = 1; ty < GOBLIN_WIRE_TYPE_COUNT; ty++) {
        goblin__wire_msg m;
        sample((goblin__wire_type)ty, &m);
        size_t len;
        uint8_t *b = encode(&m, &len);
        uint8_t *c = malloc(len);
        for (size_t n = 0; n < len; n++) {
            char msg[256];
            /* as cut: the header's length no longer matches */
            cr_assert_eq(decode_err(b, n, NULL, msg, sizeof msg), GOBLIN_EFORMAT,
                         "%s cut to %zu accepted", goblin__wire_type_name((goblin__wire_type)ty), n);
            cr_assert_neq(msg[0], 0);
            /* with the header patched to agree, the body parser must notice */
            if (n >= GOBLIN_WIRE_HEADER_SIZE) {
                memcpy(c, b, n);
                wr_le(c + 16, n - GOBLIN_WIRE_HEADER_SIZE, 8);
                goblin_err e = decode_err(c, n, NULL, msg, sizeof msg);
                cr_assert_eq(e, GOBLIN_EFORMAT, "%s cut to %zu (header patched): %s %s",
                             goblin__wire_type_name((goblin__wire_type)ty), n, goblin_err_name(e), msg);
            }
        }
        /* and one byte too many */
        uint8_t *x = malloc(len + 1);
        memcpy(x, b, len);
        x[len] = 0;
        wr_le(x + 16, len + 1 - GOBLIN_WIRE_HEADER_SIZE, 8);
        char msg[256];
        cr_assert_eq(decode_err(x, len + 1, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
        cr_assert(strstr(msg, "trailing"), "%s", msg);
        free(x);
        free(c);
        goblin_buffer_free(b);
    }
}

/* xorshift64*: deterministic, no libc rand state */
static uint64_t rng(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

Test(wire, random_byte_flips_never_crash) {
    uint64_t s = 0x9E3779B97F4A7C15ull;
    long accepted = 0, rejected = 0;
    for (int ty = 1; ty < GOBLIN_WIRE_TYPE_COUNT; ty++) {
        goblin__wire_msg m;
        sample((goblin__wire_type)ty, &m);
        size_t len;
        uint8_t *b = encode(&m, &len);
        /* 8-aligned copy, so zero-copy views are exercised as well */
        uint8_t *c = aligned_alloc(8, (len + 7) / 8 * 8);
        for (int it = 0; it < 3000; it++) {
            memcpy(c, b, len);
            int flips = 1 + (int)(rng(&s) % 4);
            for (int k = 0; k < flips; k++) {
                size_t pos = (size_t)(rng(&s) % len);
                c[pos] ^= (uint8_t)(1 + rng(&s) % 255);
            }
            uint32_t flags = it & 1 ? GOBLIN_WIRE_DECODE_ZERO_COPY : 0;
            goblin__wire_msg *d = NULL;
            char msg[256];
            goblin_err e = goblin__wire_decode(c, len, NULL, flags, &d, msg, sizeof msg);
            if (e == GOBLIN_OK) {
                accepted++;
                size_t len2;
                uint8_t *b2 = encode(d, &len2);
                cr_assert_eq(len2, len);
                cr_assert_arr_eq(b2, c, len, "accepted bytes are not canonical");
                goblin_buffer_free(b2);
                goblin__wire_msg_free(d);
            } else {
                rejected++;
                cr_assert_null(d);
                cr_assert(e == GOBLIN_EFORMAT || e == GOBLIN_ELIMIT || e == GOBLIN_EPROTO ||
                              e == GOBLIN_EVERSION,
                          "unexpected %s", goblin_err_name(e));
                cr_assert_neq(msg[0], 0, "no message for %s", goblin_err_name(e));
            }
        }
        free(c);
        goblin_buffer_free(b);
    }
    /* flips in tensor data and ids decode fine; most others must not */
    cr_assert_gt(accepted, 1000);
    cr_assert_gt(rejected, 1000);
}

Test(wire, header_fields_are_checked) {
    goblin__wire_msg m;
    sample(GOBLIN_WIRE_TYPE_ABANDON, &m);
    size_t len;
    uint8_t *b = encode(&m, &len);
    uint8_t c[64];
    char msg[256];
    goblin__wire_header h;

    cr_assert_eq(goblin__wire_header_decode(b, len, NULL, &h, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    cr_assert_eq(h.version, 2);
    cr_assert_eq(h.type, GOBLIN_WIRE_TYPE_ABANDON);
    cr_assert_eq(h.flags, 0);
    cr_assert_eq(h.request_id, 1007);
    cr_assert_eq(h.body_len, 8);
    cr_assert_eq(goblin__wire_header_decode(b, 23, NULL, &h, msg, sizeof msg), GOBLIN_EFORMAT);

    memcpy(c, b, len);
    c[0] = 'X';
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
    cr_assert(strstr(msg, "magic"), "%s", msg);

    memcpy(c, b, len);
    c[6] = 0;
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EPROTO);
    c[6] = GOBLIN_WIRE_TYPE_COUNT;
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EPROTO);
    cr_assert(strstr(msg, "type"), "%s", msg);

    memcpy(c, b, len);
    c[7] = 0x01;
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EPROTO);
    cr_assert(strstr(msg, "flags"), "%s", msg);

    /* a body length that does not match what arrived */
    memcpy(c, b, len);
    wr_le(c + 16, 7, 8);
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
    goblin_buffer_free(b);
}

/* Patch one field of a sample to a value out of its range: must be EFORMAT. */
static void bad_field(goblin__wire_type ty, size_t off, int width, uint64_t v, const char *needle) {
    goblin__wire_msg m;
    sample(ty, &m);
    size_t len;
    uint8_t *b = encode(&m, &len);
    cr_assert_leq(off + (size_t)width, len);
    wr_le(b + off, v, width);
    char msg[256];
    goblin_err e = decode_err(b, len, NULL, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_EFORMAT, "%s: offset %zu = %llu gave %s (%s)",
                 goblin__wire_type_name(ty), off, (unsigned long long)v, goblin_err_name(e), msg);
    cr_assert(strstr(msg, needle), "'%s' not in: %s", needle, msg);
    goblin_buffer_free(b);
}

Test(wire, field_values_are_checked) {
    bad_field(GOBLIN_WIRE_TYPE_REFUSE, 24, 4, 0, "error code 0");
    bad_field(GOBLIN_WIRE_TYPE_REFUSE, 24, 4, 65536, "error code 65536");
    bad_field(GOBLIN_WIRE_TYPE_ERROR, 24, 4, 0, "error code");
    bad_field(GOBLIN_WIRE_TYPE_ABANDON, 24, 8, 0, "task id 0");
    bad_field(GOBLIN_WIRE_TYPE_LEASE_REQUEST, 24, 4, 0, "slots");
    bad_field(GOBLIN_WIRE_TYPE_LEASE_REQUEST, 24, 4, GOBLIN_WIRE_MAX_SLOTS + 1, "slots");
    bad_field(GOBLIN_WIRE_TYPE_HELLO, 32, 4, 0, "backends");
    bad_field(GOBLIN_WIRE_TYPE_HELLO, 36, 4, 0, "threads");
    bad_field(GOBLIN_WIRE_TYPE_HELLO, 36, 4, GOBLIN_WIRE_MAX_THREADS + 1, "threads");
    bad_field(GOBLIN_WIRE_TYPE_HELLO_ACK, 44, 8, 10, "maximum message size");
    bad_field(GOBLIN_WIRE_TYPE_HELLO_ACK, 44, 8, GOBLIN_WIRE_MAX_MESSAGE_BYTES + 1, "maximum message size");
    bad_field(GOBLIN_WIRE_TYPE_TASK, 24, 8, 0, "task id 0");
    bad_field(GOBLIN_WIRE_TYPE_TASK, 32, 4, 0, "lease");
    bad_field(GOBLIN_WIRE_TYPE_TASK, 40, 8, 0, "empty graph");
    bad_field(GOBLIN_WIRE_TYPE_RESULT, 24, 8, 0, "task id 0");
    bad_field(GOBLIN_WIRE_TYPE_RESULT, 36, 4, 1, "reserved");
    /* in range: accepted */
    goblin__wire_msg m;
    sample(GOBLIN_WIRE_TYPE_REFUSE, &m);
    m.body.refuse.reason = (goblin_err)65535; /* a code from a newer peer */
    size_t len;
    uint8_t *b = encode(&m, &len);
    goblin__wire_msg *d = decode_ok(b, len, 0);
    cr_assert_eq((int)d->body.refuse.reason, 65535);
    cr_assert_str_eq(goblin_strerror(d->body.refuse.reason), "unknown error");
    goblin__wire_msg_free(d);
    goblin_buffer_free(b);
}

Test(wire, protocol_version_mismatch_names_both_versions) {
    goblin__wire_msg m;
    sample(GOBLIN_WIRE_TYPE_HEARTBEAT, &m);
    size_t len;
    uint8_t *b = encode(&m, &len);
    wr_le(b + 4, 1, 2); /* a protocol 1 peer (no identity proofs) */
    char msg[256];
    cr_assert_eq(decode_err(b, len, NULL, msg, sizeof msg), GOBLIN_EVERSION);
    cr_assert(strstr(msg, "protocol version 1, this library speaks 2"), "%s", msg);
    /* the header is still readable, so a reply can echo the request id */
    goblin__wire_header h;
    memset(&h, 0, sizeof h);
    cr_assert_eq(goblin__wire_header_decode(b, len, NULL, &h, msg, sizeof msg), GOBLIN_EVERSION);
    cr_assert_eq(h.version, 1);
    cr_assert_eq(h.request_id, 1008);
    goblin_buffer_free(b);
}

Test(wire, catalog_version_mismatch_names_both_versions) {
    char want[128];
    snprintf(want, sizeof want, "catalogue version 99, this library has %u", goblin_catalog_version());
    goblin__wire_msg m;
    sample(GOBLIN_WIRE_TYPE_HELLO, &m);
    m.body.hello.catalog_version = 99;
    size_t len;
    uint8_t *b = encode(&m, &len);
    char msg[256];
    cr_assert_eq(decode_err(b, len, NULL, msg, sizeof msg), GOBLIN_EVERSION);
    cr_assert(strstr(msg, want), "%s", msg);
    cr_assert(strstr(msg, "HELLO"), "%s", msg);
    goblin_buffer_free(b);

    sample(GOBLIN_WIRE_TYPE_HELLO_ACK, &m);
    m.body.hello_ack.catalog_version = 99;
    b = encode(&m, &len);
    cr_assert_eq(decode_err(b, len, NULL, msg, sizeof msg), GOBLIN_EVERSION);
    cr_assert(strstr(msg, want), "%s", msg);
    goblin_buffer_free(b);
}

Test(wire, inconsistent_tensor_byte_lengths_are_rejected) {
    goblin__wire_msg m;
    sample_task(&m);
    size_t len;
    uint8_t *b = encode(&m, &len);
    uint8_t *c = malloc(len);
    char msg[256];
    /* the f32 [2,3] tensor's byte count at offset 80 is 24 */
    const uint64_t bad[] = {0, 23, 25, 48, 6, UINT64_MAX, (uint64_t)1 << 62};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        memcpy(c, b, len);
        wr_le(c + 80, bad[k], 8);
        cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EFORMAT, "nbytes %llu",
                     (unsigned long long)bad[k]);
        cr_assert(strstr(msg, "input 0"), "%s", msg);
    }
    /* dtype changed under the same bytes: f64 [2,3] needs 48 */
    memcpy(c, b, len);
    c[56] = GOBLIN_DTYPE_F64;
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
    cr_assert(strstr(msg, "48"), "%s", msg);
    /* shape changed under the same bytes */
    memcpy(c, b, len);
    wr_le(c + 72, 4, 8);
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
    /* unknown dtype, rank 9, non-zero reserved byte, dim above GOBLIN_MAX_DIM / negative */
    memcpy(c, b, len);
    c[56] = GOBLIN_DTYPE_COUNT;
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
    cr_assert(strstr(msg, "dtype"), "%s", msg);
    memcpy(c, b, len);
    c[57] = 9;
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
    cr_assert(strstr(msg, "rank 9"), "%s", msg);
    memcpy(c, b, len);
    c[60] = 1;
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
    memcpy(c, b, len);
    wr_le(c + 64, (uint64_t)GOBLIN_MAX_DIM + 1, 8);
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_ELIMIT);
    memcpy(c, b, len);
    wr_le(c + 64, (uint64_t)-2, 8);
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_ELIMIT);
    /* non-zero padding after the graph and after the u8 tensor */
    memcpy(c, b, len);
    c[54] = 1;
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
    cr_assert(strstr(msg, "padding"), "%s", msg);
    memcpy(c, b, len);
    c[143] = 1;
    cr_assert_eq(decode_err(c, len, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
    free(c);
    goblin_buffer_free(b);
}

/* Build a bare header + body by hand. */
static size_t hand_msg(uint8_t *p, goblin__wire_type ty, const uint8_t *body, size_t body_len) {
    memcpy(p, "GBLW", 4);
    wr_le(p + 4, GOBLIN_WIRE_VERSION, 2);
    p[6] = (uint8_t)ty;
    p[7] = 0;
    wr_le(p + 8, 42, 8);
    wr_le(p + 16, body_len, 8);
    memcpy(p + 24, body, body_len);
    return 24 + body_len;
}

/* Decode and expect @p want with no allocation at all (limits are checked first). */
static void reject_without_alloc(const uint8_t *p, size_t n, const goblin__wire_limits *lim,
                                 goblin_err want, const char *needle) {
    char msg[256];
    gt_alloc_on();
    goblin_err e = decode_err(p, n, lim, msg, sizeof msg);
    long allocs = gt_allocs.asked;
    gt_alloc_off();
    cr_assert_eq(e, want, "got %s (%s), want %s", goblin_err_name(e), msg, goblin_err_name(want));
    cr_assert_eq(allocs, 0, "%ld allocations before rejecting: %s", allocs, msg);
    if (needle) cr_assert(strstr(msg, needle), "'%s' not in: %s", needle, msg);
}

Test(wire, oversized_lengths_and_counts_rejected_before_allocation) {
    static uint8_t p[4096], body[4096];
    size_t n;
    /* TASK claiming 1000 inputs in 8 bytes; and 5000 inputs (over the cap) */
    memset(body, 0, sizeof body);
    wr_le(body, 1, 8);       /* task id */
    wr_le(body + 8, 10, 4);  /* lease */
    wr_le(body + 12, 1000, 4);
    wr_le(body + 16, 1, 8);  /* graph_len */
    body[24] = 0xAB;         /* graph, then 7 bytes of padding */
    n = hand_msg(p, GOBLIN_WIRE_TYPE_TASK, body, 32 + 8);
    reject_without_alloc(p, n, NULL, GOBLIN_EFORMAT, "1000 inputs cannot fit");
    wr_le(body + 12, 5000, 4);
    n = hand_msg(p, GOBLIN_WIRE_TYPE_TASK, body, 32 + 8);
    reject_without_alloc(p, n, NULL, GOBLIN_ELIMIT, "5000 inputs exceed");
    /* a graph of 2^40 bytes */
    wr_le(body + 12, 0, 4);
    wr_le(body + 16, (uint64_t)1 << 40, 8);
    n = hand_msg(p, GOBLIN_WIRE_TYPE_TASK, body, 32);
    reject_without_alloc(p, n, NULL, GOBLIN_ELIMIT, "graph of");
    /* a graph longer than what is left */
    wr_le(body + 16, 100, 8);
    n = hand_msg(p, GOBLIN_WIRE_TYPE_TASK, body, 32);
    reject_without_alloc(p, n, NULL, GOBLIN_EFORMAT, "truncated");
    /* a join token of 2^32 - 1 bytes */
    memset(body, 0, sizeof body);
    wr_le(body, GOBLIN_CATALOG_VERSION, 4);
    wr_le(body + 8, 1, 4);
    wr_le(body + 12, 1, 4);
    wr_le(body + 24, 0xFFFFFFFFu, 4);
    n = hand_msg(p, GOBLIN_WIRE_TYPE_HELLO, body, 28);
    reject_without_alloc(p, n, NULL, GOBLIN_ELIMIT, "token");
    /* a 60000-byte message text */
    memset(body, 0, sizeof body);
    wr_le(body, GOBLIN_EINVAL, 4);
    wr_le(body + 4, 60000, 2);
    n = hand_msg(p, GOBLIN_WIRE_TYPE_REFUSE, body, 6);
    reject_without_alloc(p, n, NULL, GOBLIN_ELIMIT, "text");
    /* a body length of 2^63 in the header */
    n = hand_msg(p, GOBLIN_WIRE_TYPE_HEARTBEAT, body, 4);
    wr_le(p + 16, (uint64_t)1 << 63, 8);
    reject_without_alloc(p, n, NULL, GOBLIN_ELIMIT, "exceeds the limit");
    /* a tensor claiming 2^40 x 2^40 elements */
    memset(body, 0, sizeof body);
    wr_le(body, 1, 8);
    wr_le(body + 8, 1, 4);
    body[16] = GOBLIN_DTYPE_F32;
    body[17] = 2;
    wr_le(body + 24, (uint64_t)1 << 40, 8);
    wr_le(body + 32, (uint64_t)1 << 40, 8);
    wr_le(body + 40, 0, 8);
    n = hand_msg(p, GOBLIN_WIRE_TYPE_RESULT, body, 48);
    reject_without_alloc(p, n, NULL, GOBLIN_ELIMIT, "elements");
}

Test(wire, tightened_limits_are_enforced) {
    goblin__wire_msg m;
    sample_task(&m);
    size_t len;
    uint8_t *b = encode(&m, &len);
    goblin__wire_limits lim;

    goblin__wire_limits_default(&lim);
    cr_assert_eq(lim.max_message_bytes, GOBLIN_WIRE_MAX_MESSAGE_BYTES);
    cr_assert_eq(lim.max_tensors, GOBLIN_WIRE_MAX_TENSORS);
    lim.max_tensors = 2; /* the sample has 3 */
    reject_without_alloc(b, len, &lim, GOBLIN_ELIMIT, "3 inputs exceed the limit 2");
    goblin__wire_limits_default(&lim);
    lim.max_message_bytes = len - 1;
    reject_without_alloc(b, len, &lim, GOBLIN_ELIMIT, NULL);
    goblin__wire_limits_default(&lim);
    lim.max_tensor_bytes = 24 + 3 + 7; /* one byte short of all three */
    reject_without_alloc(b, len, &lim, GOBLIN_ELIMIT, "input 2");
    goblin__wire_limits_default(&lim);
    lim.max_numel = 5; /* the f32 input has 6 */
    reject_without_alloc(b, len, &lim, GOBLIN_ELIMIT, "input 0");
    goblin__wire_limits_default(&lim);
    lim.max_graph_bytes = 4;
    reject_without_alloc(b, len, &lim, GOBLIN_ELIMIT, "graph");
    /* exactly at every limit: accepted */
    lim.max_message_bytes = len;
    lim.max_tensors = 3;
    lim.max_tensor_bytes = 24 + 3 + 8;
    lim.max_numel = 6;
    lim.max_graph_bytes = 5;
    goblin__wire_msg *d = NULL;
    char msg[256];
    cr_assert_eq(goblin__wire_decode(b, len, &lim, 0, &d, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    goblin__wire_msg_free(d);
    /* limits above the hard caps are clamped, not trusted */
    lim.max_tensors = UINT32_MAX;
    lim.max_numel = INT64_MAX;
    cr_assert_eq(goblin__wire_decode(b, len, &lim, 0, &d, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    goblin__wire_msg_free(d);
    goblin_buffer_free(b);
}

Test(wire, decode_allocates_once_and_fails_cleanly) {
    for (int ty = 1; ty < GOBLIN_WIRE_TYPE_COUNT; ty++) {
        goblin__wire_msg m;
        sample((goblin__wire_type)ty, &m);
        size_t len;
        uint8_t *b = encode(&m, &len);
        goblin__wire_msg *d = NULL;
        gt_alloc_on();
        cr_assert_eq(goblin__wire_decode(b, len, NULL, 0, &d, NULL, 0), GOBLIN_OK);
        cr_assert_eq(gt_allocs.asked, 1);
        goblin__wire_msg_free(d);
        cr_assert_eq(gt_allocs.live, 0);
        gt_allocs.asked = 0;
        gt_allocs.fail_at = 0;
        d = NULL;
        char msg[128];
        cr_assert_eq(goblin__wire_decode(b, len, NULL, 0, &d, msg, sizeof msg), GOBLIN_ENOMEM);
        cr_assert_null(d);
        cr_assert_eq(gt_allocs.live, 0);
        /* encoding: one allocation too; failing it leaks nothing */
        uint8_t *e = NULL;
        size_t el;
        gt_allocs.asked = 0;
        gt_allocs.fail_at = 0;
        cr_assert_eq(goblin__wire_encode(&m, &e, &el), GOBLIN_ENOMEM);
        cr_assert_null(e);
        cr_assert_eq(gt_allocs.live, 0);
        gt_alloc_off();
        goblin_buffer_free(b);
    }
}

/* ---- the encoder's own checks -------------------------------------------- */

Test(wire, encoder_rejects_bad_messages) {
    goblin__wire_msg m;
    uint8_t *b = NULL;
    size_t len;
    cr_assert_eq(goblin__wire_msg_init(&m, (goblin__wire_type)0), GOBLIN_EINVAL);
    cr_assert_eq(goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_COUNT), GOBLIN_EINVAL);
    cr_assert_eq(goblin__wire_encode(NULL, &b, &len), GOBLIN_EINVAL);
    memset(&m, 0, sizeof m);
    m.type = (goblin__wire_type)42;
    cr_assert_eq(goblin__wire_encode(&m, &b, &len), GOBLIN_EINVAL);

#define EXPECT_ENC(err, what)                                                        \
    do {                                                                             \
        b = NULL;                                                                    \
        cr_assert_eq(goblin__wire_encode(&m, &b, &len), (err), "%s", (what));         \
        cr_assert_null(b);                                                           \
    } while (0)

    sample(GOBLIN_WIRE_TYPE_HELLO, &m);
    m.body.hello.threads = 0;
    EXPECT_ENC(GOBLIN_EINVAL, "0 threads");
    sample(GOBLIN_WIRE_TYPE_HELLO, &m);
    m.body.hello.backends = 0;
    EXPECT_ENC(GOBLIN_EINVAL, "no backends");
    sample(GOBLIN_WIRE_TYPE_HELLO, &m);
    static uint8_t big[GOBLIN_WIRE_MAX_TOKEN_BYTES + 1];
    m.body.hello.token = big;
    m.body.hello.token_len = GOBLIN_WIRE_MAX_TOKEN_BYTES + 1;
    EXPECT_ENC(GOBLIN_ELIMIT, "token 257");
    m.body.hello.token_len = GOBLIN_WIRE_MAX_TOKEN_BYTES;
    cr_assert_eq(goblin__wire_encode(&m, &b, &len), GOBLIN_OK, "token 256");
    cr_assert_eq(len, 24 + 28 + 256);
    goblin_buffer_free(b);
    m.body.hello.token = NULL;
    EXPECT_ENC(GOBLIN_EINVAL, "NULL token");

    sample(GOBLIN_WIRE_TYPE_LEASE_REQUEST, &m);
    m.body.lease_request.slots = 0;
    EXPECT_ENC(GOBLIN_EINVAL, "0 slots");
    m.body.lease_request.slots = GOBLIN_WIRE_MAX_SLOTS + 1;
    EXPECT_ENC(GOBLIN_EINVAL, "too many slots");
    sample(GOBLIN_WIRE_TYPE_REFUSE, &m);
    m.body.refuse.reason = GOBLIN_OK;
    EXPECT_ENC(GOBLIN_EINVAL, "refuse with OK");
    sample(GOBLIN_WIRE_TYPE_ABANDON, &m);
    m.body.abandon.task_id = 0;
    EXPECT_ENC(GOBLIN_EINVAL, "task 0");
    sample(GOBLIN_WIRE_TYPE_HELLO_ACK, &m);
    m.body.hello_ack.max_message_bytes = 10;
    EXPECT_ENC(GOBLIN_EINVAL, "max message below the header");

    sample_task(&m);
    m.body.task.task_id = 0;
    EXPECT_ENC(GOBLIN_EINVAL, "task 0");
    sample_task(&m);
    m.body.task.lease_ms = 0;
    EXPECT_ENC(GOBLIN_EINVAL, "lease 0");
    sample_task(&m);
    m.body.task.graph_len = 0;
    EXPECT_ENC(GOBLIN_EINVAL, "no graph");
    sample_task(&m);
    m.body.task.n_inputs = GOBLIN_WIRE_MAX_TENSORS + 1;
    EXPECT_ENC(GOBLIN_ELIMIT, "too many tensors");
    sample_task(&m);
    m.body.task.inputs = NULL;
    EXPECT_ENC(GOBLIN_EINVAL, "NULL inputs");
    sample_task(&m);
    g_ins[0].dtype = (goblin_dtype)77;
    EXPECT_ENC(GOBLIN_EINVAL, "bad dtype");
    sample_task(&m);
    g_ins[0].rank = GOBLIN_MAX_RANK + 1;
    EXPECT_ENC(GOBLIN_EINVAL, "rank 9");
    sample_task(&m);
    g_ins[0].shape[1] = -3;
    EXPECT_ENC(GOBLIN_EINVAL, "negative dim");
    sample_task(&m);
    g_ins[0].data = NULL;
    EXPECT_ENC(GOBLIN_EINVAL, "NULL data");
    sample_task(&m);
    g_ins[0].strides[0] = 1; /* transposed view of [2,3]: not contiguous */
    g_ins[0].strides[1] = 2;
    EXPECT_ENC(GOBLIN_EINVAL, "strided");
    sample_task(&m);
    g_ins[0].shape[0] = (int64_t)1 << 30;
    g_ins[0].shape[1] = (int64_t)1 << 30;
    EXPECT_ENC(GOBLIN_ELIMIT, "2^60 elements");
#undef EXPECT_ENC
}

Test(wire, text_is_sanitized_and_truncated) {
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_ERROR);
    m.body.error.code = GOBLIN_EIO;
    m.body.error.message = "bad\nline\x1b[31m\t\xc3\xa9";
    size_t len;
    uint8_t *b = encode(&m, &len);
    goblin__wire_msg *d = decode_ok(b, len, 0);
    cr_assert_str_eq(d->body.error.message, "bad?line?[31m???");
    goblin__wire_msg_free(d);
    /* a control byte put on the wire by a hostile peer is refused */
    b[len - 1] = '\n';
    char msg[256];
    cr_assert_eq(decode_err(b, len, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
    cr_assert(strstr(msg, "printable"), "%s", msg);
    goblin_buffer_free(b);

    static char longtext[2000];
    memset(longtext, 'a', sizeof longtext - 1);
    m.body.error.message = longtext;
    b = encode(&m, &len);
    d = decode_ok(b, len, 0);
    cr_assert_eq(strlen(d->body.error.message), GOBLIN_WIRE_MAX_TEXT_BYTES);
    goblin__wire_msg_free(d);
    goblin_buffer_free(b);
}

Test(wire, encode_into_a_caller_buffer) {
    goblin__wire_msg m;
    sample_task(&m);
    size_t need, got;
    cr_assert_eq(goblin__wire_encoded_size(&m, &need), GOBLIN_OK);
    cr_assert_eq(need, 168);
    uint8_t buf[200];
    memset(buf, 0xEE, sizeof buf);
    cr_assert_eq(goblin__wire_encode_into(&m, buf, need - 1, &got), GOBLIN_ELIMIT);
    cr_assert_eq(goblin__wire_encode_into(&m, buf, sizeof buf, &got), GOBLIN_OK);
    cr_assert_eq(got, 168);
    cr_assert_eq(buf[168], 0xEE, "wrote past the message");
    uint8_t *b;
    size_t len;
    b = encode(&m, &len);
    cr_assert_arr_eq(buf, b, len);
    goblin_buffer_free(b);
}

/* ---- zero-copy views ----------------------------------------------------- */

Test(wire, zero_copy_views_point_into_the_buffer) {
    goblin__wire_msg m;
    sample_task(&m);
    size_t len;
    uint8_t *b = encode(&m, &len); /* library buffers are 64-byte aligned */
    goblin__wire_msg *d = decode_ok(b, len, GOBLIN_WIRE_DECODE_ZERO_COPY);
    const goblin__wire_task *t = &d->body.task;
    cr_assert_eq(t->graph, b + 48);
    cr_assert_eq((uint8_t *)t->inputs[0].data, b + 88);
    cr_assert_eq((uint8_t *)t->inputs[1].data, b + 136);
    cr_assert_eq((uint8_t *)t->inputs[2].data, b + 160);
    cr_assert_eq(((float *)t->inputs[0].data)[5], 3.0f);
    goblin__wire_msg_free(d);

    /* one byte off: f32 and i64 data are misaligned there and get copied; u8 is a view */
    uint8_t *shifted = malloc(len + 1);
    memcpy(shifted + 1, b, len);
    d = decode_ok(shifted + 1, len, GOBLIN_WIRE_DECODE_ZERO_COPY);
    t = &d->body.task;
    uint8_t *lo = shifted + 1, *hi = shifted + 1 + len;
    cr_assert((uint8_t *)t->inputs[0].data < lo || (uint8_t *)t->inputs[0].data >= hi);
    cr_assert_eq((uint8_t *)t->inputs[1].data, lo + 136);
    cr_assert((uint8_t *)t->inputs[2].data < lo || (uint8_t *)t->inputs[2].data >= hi);
    cr_assert_arr_eq(t->inputs[0].data, T0, sizeof T0);
    cr_assert_eq(*(int64_t *)t->inputs[2].data, -5);
    goblin__wire_msg_free(d);
    /* without the flag nothing points into the buffer, which may then go away */
    d = decode_ok(shifted + 1, len, 0);
    memset(shifted, 0, len + 1);
    free(shifted);
    cr_assert_arr_eq(d->body.task.inputs[0].data, T0, sizeof T0);
    cr_assert_arr_eq(d->body.task.graph, FAKE_GRAPH, 5);
    goblin__wire_msg_free(d);
    d = NULL;
    cr_assert_eq(goblin__wire_decode(b, len, NULL, 2, &d, NULL, 0), GOBLIN_EINVAL, "unknown flag");
    cr_assert_null(d);
    goblin_buffer_free(b);
}

/* ---- with real graphs ---------------------------------------------------- */

/* y = sum((x + c) * x, axes=[1]) over x [2,3] f32, built through the C API. */
static goblin_graph *real_graph(void) {
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[] = {2, 3}, sc[] = {3};
    int32_t x, c, s, p, y;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sx, &x), GOBLIN_OK);
    static float cv[3] = {1.0f, -1.0f, 0.5f};
    goblin_tensor ct = gt_tensor(GOBLIN_DTYPE_F32, 1, sc, cv);
    cr_assert_eq(goblin_graph_constant(g, &ct, &c), GOBLIN_OK);
    int32_t xc[] = {x, c};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, xc, 2, NULL, 0, &s), GOBLIN_OK);
    int32_t sxx[] = {s, x};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MUL, sxx, 2, NULL, 0, &p), GOBLIN_OK);
    int64_t ax[] = {1};
    goblin_attr at = goblin_attr_ints(GOBLIN_ATTR_AXES, ax, 1);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SUM, &p, 1, &at, 1, &y), GOBLIN_OK, "%s",
                 goblin_graph_error(g));
    cr_assert_eq(goblin_graph_output(g, y), GOBLIN_OK);
    return g;
}

Test(wire, task_to_result_through_a_real_graph) {
    goblin_graph *g = real_graph();
    uint8_t *gb;
    size_t gl;
    cr_assert_eq(goblin_graph_serialize(g, &gb, &gl), GOBLIN_OK);
    goblin_graph_free(g);
    goblin__wire_msg m;
    sample_task(&m);
    m.body.task.graph = gb;
    m.body.task.graph_len = gl;
    m.body.task.n_inputs = 1; /* x = 0.5 .. 3.0 */
    size_t len;
    uint8_t *b = encode(&m, &len);
    goblin_buffer_free(gb);

    /* worker side: decode in place, rebuild the graph, run it */
    goblin__wire_msg *d = decode_ok(b, len, GOBLIN_WIRE_DECODE_ZERO_COPY);
    goblin_graph *h = NULL;
    goblin_errbuf msg_eb = {0};
    cr_assert_eq(goblin_graph_deserialize(d->body.task.graph, d->body.task.graph_len, NULL, &h, &msg_eb),
                 GOBLIN_OK, "%s", msg_eb.message);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_REF;
    goblin_tensor out;
    memset(&out, 0, sizeof out);
    cr_assert_eq(goblin_graph_eval(h, &p, d->body.task.inputs, d->body.task.n_inputs, &out, 1),
                 GOBLIN_OK);
    /* row 0: x = .5 1 1.5 -> (1.5*.5) + (0*1) + (2*1.5) = 3.75
     * row 1: x = 2 2.5 3  -> (3*2) + (1.5*2.5) + (3.5*3) = 20.25 */
    cr_assert_float_eq(((float *)out.data)[0], 3.75f, 1e-6);
    cr_assert_float_eq(((float *)out.data)[1], 20.25f, 1e-6);

    goblin__wire_msg r;
    goblin__wire_msg_init(&r, GOBLIN_WIRE_TYPE_RESULT);
    r.request_id = d->request_id;
    r.body.result.task_id = d->body.task.task_id;
    r.body.result.n_outputs = 1;
    r.body.result.outputs = &out;
    size_t rlen;
    uint8_t *rb = encode(&r, &rlen);
    goblin_buffer_free(out.data);
    goblin_graph_free(h);
    goblin__wire_msg_free(d);
    goblin_buffer_free(b);

    /* node side */
    goblin__wire_msg *rd = decode_ok(rb, rlen, 0);
    cr_assert_eq(rd->body.result.task_id, 0x0A0B0C0D0E0F1011ull);
    cr_assert_eq(rd->request_id, 0x1122334455667788ull);
    cr_assert_eq(rd->body.result.outputs[0].rank, 1);
    cr_assert_eq(rd->body.result.outputs[0].shape[0], 2);
    cr_assert_float_eq(((float *)rd->body.result.outputs[0].data)[1], 20.25f, 1e-6);
    goblin__wire_msg_free(rd);
    goblin_buffer_free(rb);
}

static bool contains_ci(const uint8_t *buf, size_t len, const char *word) {
    size_t n = strlen(word);
    for (size_t i = 0; i + n <= len; i++) {
        size_t k = 0;
        while (k < n && (buf[i + k] | 0x20) == (word[k] | 0x20)) k++;
        if (k == n) return true;
    }
    return false;
}

Test(wire, task_bytes_carry_no_names) {
    /* A graph with a formula whose variables have names: names exist only in the
     * formula text the user wrote, and must not travel. */
    goblin_graph *g = real_graph();
    goblin_formula *f;
    goblin_errbuf fe;
    cr_assert_eq(goblin_formula_parse("weight * exp(-input) + bias", &f, &fe), GOBLIN_OK, "%s",
                 fe.message);
    int32_t ids[3];
    for (int i = 0; i < 3; i++) ids[i] = goblin_graph_input_id(g, 0);
    int32_t fy;
    cr_assert_eq(goblin_graph_add_formula(g, f, ids, 3, &fy), GOBLIN_OK, "%s", goblin_graph_error(g));
    goblin_formula_free(f);
    cr_assert_eq(goblin_graph_output(g, fy), GOBLIN_OK);
    uint8_t *gb;
    size_t gl;
    cr_assert_eq(goblin_graph_serialize(g, &gb, &gl), GOBLIN_OK);
    goblin_graph_free(g);

    goblin__wire_msg m;
    sample_task(&m);
    m.body.task.graph = gb;
    m.body.task.graph_len = gl;
    size_t len;
    uint8_t *b = encode(&m, &len);
    const char *words[] = {"weight", "bias",  "input", "output", "exp",    "secret", "name",
                           "layer",  "hidden", "loss",  "tensor", "matrix", "data",   "model",
                           "user",   "label",  "add",   "sum",    "f32",    "file",   "path"};
    for (size_t k = 0; k < sizeof words / sizeof *words; k++)
        cr_assert(!contains_ci(b, len, words[k]), "'%s' appears in an encoded TASK", words[k]);
    goblin_buffer_free(b);
    goblin_buffer_free(gb);
}

Test(wire, type_names) {
    cr_assert_str_eq(goblin__wire_type_name(GOBLIN_WIRE_TYPE_HELLO), "HELLO");
    cr_assert_str_eq(goblin__wire_type_name(GOBLIN_WIRE_TYPE_ERROR), "ERROR");
    cr_assert_null(goblin__wire_type_name((goblin__wire_type)0));
    cr_assert_null(goblin__wire_type_name(GOBLIN_WIRE_TYPE_COUNT));
    cr_assert_null(goblin__wire_type_name((goblin__wire_type)-1));
}

/* ---- internal: layout encoding (a worker computes its RESULT in place) and the
 * transport's timed receive ------------------------------------------------------- */
#include "net/transport.h" /* nng.h first: pair.h needs it */
#include <nng/protocol/pair1/pair.h>
#include "proto/wire_impl.h"

Test(wire, layout_encoding_matches_the_plain_encoder_once_filled) {
    float a[6] = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f}; /* 24 bytes: no padding after */
    double b[3] = {1e300, -4.5, 0.125};                   /* after a u8 tensor: padded */
    uint8_t c[5] = {9, 8, 7, 6, 5};
    int64_t sa[2] = {2, 3}, sb[1] = {3}, sc[1] = {5};
    goblin_tensor full[3], empty[3];
    goblin_tensor_init(&full[0], GOBLIN_DTYPE_F32, 2, sa, a);
    goblin_tensor_init(&full[1], GOBLIN_DTYPE_U8, 1, sc, c);
    goblin_tensor_init(&full[2], GOBLIN_DTYPE_F64, 1, sb, b);
    for (int i = 0; i < 3; i++) {
        empty[i] = full[i];
        empty[i].data = NULL;
    }
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_RESULT);
    m.request_id = 77;
    m.body.result.task_id = 78;
    m.body.result.n_outputs = 3;
    m.body.result.outputs = full;
    size_t want_len;
    uint8_t *want = encode(&m, &want_len);

    m.body.result.outputs = empty;
    size_t len = 0, wrote = 0, off[3] = {0, 0, 0};
    cr_assert_eq(goblin__wire_layout_size(&m, 3, &len), GOBLIN_OK);
    cr_assert_eq(len, want_len);
    cr_assert_eq(goblin__wire_layout_size(&m, 2, &len), GOBLIN_EINVAL); /* 3 tensors, not 2 */
    cr_assert_eq(goblin__wire_layout_size(&m, 4, &len), GOBLIN_EINVAL);
    uint8_t *buf = malloc(want_len);
    memset(buf, 0xEE, want_len);
    cr_assert_eq(goblin__wire_encode_layout(&m, buf, want_len - 1, &wrote, off, 3), GOBLIN_ELIMIT);
    cr_assert_eq(goblin__wire_encode_layout(&m, buf, want_len, &wrote, off, 3), GOBLIN_OK);
    cr_assert_eq(wrote, want_len);
    /* header 24 + task id 8 + count 4 + 4; tensor head 8 + shape 8 per dim + byte count 8 */
    cr_assert_eq(off[0], 24 + 16 + 8 + 16 + 8);
    cr_assert_eq(off[1], off[0] + 24 + 8 + 8 + 8);
    cr_assert_eq(off[2], off[1] + 8 + 8 + 8 + 8);
    for (int i = 0; i < 3; i++) cr_assert_eq(off[i] % 8, 0, "tensor %d data is not 8-byte aligned", i);
    memcpy(buf + off[0], a, sizeof a);
    memcpy(buf + off[1], c, sizeof c);
    memcpy(buf + off[2], b, sizeof b);
    cr_assert_eq(memcmp(buf, want, want_len), 0, "filled layout differs from the plain encoding");
    goblin__wire_msg *d = decode_ok(buf, want_len, 0);
    cr_assert_eq(d->body.result.task_id, 78);
    cr_assert_float_eq(((float *)d->body.result.outputs[0].data)[5], -0.5f, 0);
    cr_assert_eq(((uint8_t *)d->body.result.outputs[1].data)[4], 5);
    cr_assert_float_eq(((double *)d->body.result.outputs[2].data)[0], 1e300, 0);
    goblin__wire_msg_free(d);
    free(buf);
    goblin_buffer_free(want);
}

Test(wire, transport_recv_waits_without_nng_timers) {
    nng_socket node, wk;
    char msg[128];
    cr_assert_eq(goblin__transport_open_node(&node, 1 << 20, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    cr_assert_eq(nng_pair1_open(&wk), 0);
    cr_assert_eq(nng_listen(node, "inproc://goblin-test-transport-recv", NULL, 0), 0);
    cr_assert_eq(nng_dial(wk, "inproc://goblin-test-transport-recv", NULL, 0), 0);
    int fd = -1;
    nng_msg *got = NULL;
    cr_assert_eq(goblin__transport_recv(node, &fd, &got, 0), NNG_ETIMEDOUT);
    cr_assert_eq(goblin__transport_recv(node, &fd, &got, 20), NNG_ETIMEDOUT);
    cr_assert_eq(got, NULL);
    for (int i = 0; i < 3; i++) {
        nng_msg *s;
        cr_assert_eq(nng_msg_alloc(&s, 4), 0);
        memcpy(nng_msg_body(s), "abc", 4);
        ((char *)nng_msg_body(s))[2] = (char)('0' + i);
        cr_assert_eq(nng_sendmsg(wk, s, 0), 0);
    }
    for (int i = 0; i < 3; i++) {
        int rv = goblin__transport_recv(node, &fd, &got, 5000);
        cr_assert_eq(rv, 0, "message %d: %s", i, nng_strerror(rv));
        cr_assert_eq(nng_msg_len(got), 4);
        cr_assert_eq(((char *)nng_msg_body(got))[2], '0' + i);
        nng_msg_free(got);
        got = NULL;
    }
    cr_assert_geq(fd, 0);
    cr_assert_eq(goblin__transport_recv(node, &fd, &got, 10), NNG_ETIMEDOUT);
    nng_close(wk);
    nng_close(node);
    cr_assert_eq(goblin__transport_recv(node, &fd, &got, 10), NNG_ECLOSED);
}

/* ---- batches (protocol 1.1) ------------------------------------------------ */

/* Append the encoding of @p m to @p buf at *len, after zero padding to a multiple of
 * 8 when something is already there (docs/wire-protocol.md, "Batches"). */
static void batch_put(uint8_t *buf, size_t cap, size_t *len, const goblin__wire_msg *m) {
    size_t at = *len ? (*len + 7) / 8 * 8 : 0, wrote = 0;
    cr_assert_leq(at, cap);
    memset(buf + *len, 0, at - *len);
    cr_assert_eq(goblin__wire_encode_into(m, buf + at, cap - at, &wrote), GOBLIN_OK);
    *len = at + wrote;
}

/* Walk a batch: how many messages it frames, or -1 on the first error (*e). Each
 * framed message also decodes on its own. Checks that the walk always moves on. */
static int walk(const uint8_t *buf, size_t len, const goblin__wire_limits *lim, goblin_err *e, char *msg,
                size_t cap) {
    size_t off = 0, ml = 0;
    int n = 0;
    *e = GOBLIN_OK;
    do {
        size_t at = off;
        *e = goblin__wire_batch_next(buf, len, &off, lim, &ml, msg, cap);
        if (*e) {
            cr_assert_eq(off, at, "*off moved on failure");
            return -1;
        }
        cr_assert_gt(off, at);
        cr_assert_leq(at + ml, len);
        cr_assert_geq(ml, GOBLIN_WIRE_HEADER_SIZE);
        cr_assert_eq(at % 8, 0);
        n++;
    } while (off < len);
    return n;
}

Test(wire, batch_of_every_type_splits_and_decodes) {
    static uint8_t buf[8192];
    size_t len = 0;
    goblin__wire_type order[] = {GOBLIN_WIRE_TYPE_HELLO,     GOBLIN_WIRE_TYPE_LEASE_REQUEST, /* 57 and 28 bytes */
                                GOBLIN_WIRE_TYPE_TASK,      GOBLIN_WIRE_TYPE_RESULT,
                                GOBLIN_WIRE_TYPE_LEASE_REQUEST, GOBLIN_WIRE_TYPE_ERROR,
                                GOBLIN_WIRE_TYPE_HEARTBEAT, GOBLIN_WIRE_TYPE_ABANDON,
                                GOBLIN_WIRE_TYPE_REFUSE,    GOBLIN_WIRE_TYPE_HELLO_ACK};
    int nm = (int)(sizeof order / sizeof order[0]);
    size_t starts[16];
    for (int i = 0; i < nm; i++) {
        goblin__wire_msg m;
        sample(order[i], &m);
        batch_put(buf, sizeof buf, &len, &m);
        size_t one = 0;
        cr_assert_eq(goblin__wire_encoded_size(&m, &one), GOBLIN_OK);
        starts[i] = len - one;
    }
    /* hand-derived: HELLO is 24 + 28 + 5 = 57 bytes, so the LEASE_REQUEST starts at 64 */
    cr_assert_eq(starts[1], 64);
    cr_assert_eq(buf[57] | buf[58] | buf[63], 0);
    size_t off = 0, ml = 0;
    char msg[256];
    for (int i = 0; i < nm; i++) {
        size_t at = off;
        cr_assert_eq(at, starts[i], "message %d at %zu, expected %zu", i, at, starts[i]);
        cr_assert_eq(goblin__wire_batch_next(buf, len, &off, NULL, &ml, msg, sizeof msg), GOBLIN_OK, "%s", msg);
        goblin__wire_msg *d = decode_ok(buf + at, ml, GOBLIN_WIRE_DECODE_ZERO_COPY);
        cr_assert_eq(d->type, order[i]);
        if (order[i] == GOBLIN_WIRE_TYPE_TASK) {
            cr_assert_eq(d->body.task.n_inputs, 3);
            cr_assert_eq(((const float *)d->body.task.inputs[0].data)[5], 3.0f);
            cr_assert((const uint8_t *)d->body.task.inputs[0].data > buf + at); /* zero copy */
        }
        if (order[i] == GOBLIN_WIRE_TYPE_HELLO) cr_assert_eq(d->body.hello.token_len, 5);
        goblin__wire_msg_free(d);
    }
    cr_assert_eq(off, len);
    /* past the end, or not aligned: a caller error */
    cr_assert_eq(goblin__wire_batch_next(buf, len, &off, NULL, &ml, msg, sizeof msg), GOBLIN_EFORMAT);
    off = len + 8;
    cr_assert_eq(goblin__wire_batch_next(buf, len, &off, NULL, &ml, NULL, 0), GOBLIN_EINVAL);
    off = 4;
    cr_assert_eq(goblin__wire_batch_next(buf, len, &off, NULL, &ml, NULL, 0), GOBLIN_EINVAL);
    cr_assert_eq(goblin__wire_batch_next(buf, len, NULL, NULL, &ml, NULL, 0), GOBLIN_EINVAL);
    off = 0;
    cr_assert_eq(goblin__wire_batch_next(buf, len, &off, NULL, NULL, NULL, 0), GOBLIN_EINVAL);
    cr_assert_eq(goblin__wire_batch_next(NULL, 8, &off, NULL, &ml, NULL, 0), GOBLIN_EINVAL);
}

Test(wire, single_message_is_a_batch_of_one) {
    goblin__wire_msg m;
    sample(GOBLIN_WIRE_TYPE_LEASE_REQUEST, &m);
    size_t len;
    uint8_t *b = encode(&m, &len);
    cr_assert_eq(len, 28); /* not a multiple of 8: no padding after the last message */
    size_t off = 0, ml = 0;
    cr_assert_eq(goblin__wire_batch_next(b, len, &off, NULL, &ml, NULL, 0), GOBLIN_OK);
    cr_assert_eq(ml, 28);
    cr_assert_eq(off, 28);
    goblin_buffer_free(b);
}

Test(wire, malformed_batches_are_rejected) {
    uint8_t buf[512];
    size_t len = 0;
    goblin__wire_msg m;
    sample(GOBLIN_WIRE_TYPE_LEASE_REQUEST, &m); /* 28 bytes: 4 padding bytes follow */
    batch_put(buf, sizeof buf, &len, &m);
    sample(GOBLIN_WIRE_TYPE_ABANDON, &m); /* 32 bytes, at 32 */
    batch_put(buf, sizeof buf, &len, &m);
    cr_assert_eq(len, 64);
    uint8_t c[600];
    char msg[256];
    goblin_err e;
    cr_assert_eq(walk(buf, len, NULL, &e, msg, sizeof msg), 2, "%s", msg);

    /* empty */
    cr_assert_eq(walk(buf, 0, NULL, &e, msg, sizeof msg), -1);
    cr_assert_eq(e, GOBLIN_EFORMAT);
    cr_assert(strstr(msg, "empty"), "%s", msg);
    /* non-zero padding */
    memcpy(c, buf, len);
    c[30] = 1;
    cr_assert_eq(walk(c, len, NULL, &e, msg, sizeof msg), -1);
    cr_assert_eq(e, GOBLIN_EFORMAT);
    cr_assert(strstr(msg, "padding"), "%s", msg);
    /* padding after the last message, and trailing bytes */
    memcpy(c, buf, 28);
    memset(c + 28, 0, 4);
    cr_assert_eq(walk(c, 32, NULL, &e, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "trailing"), "%s", msg);
    memcpy(c, buf, len);
    memset(c + len, 0, 8);
    cr_assert_eq(walk(c, len + 8, NULL, &e, msg, sizeof msg), -1);
    cr_assert_eq(e, GOBLIN_EFORMAT);
    cr_assert(strstr(msg, "byte 64"), "names the offset in the batch: %s", msg);
    /* a body length that runs past the end of the batch */
    memcpy(c, buf, len);
    wr_le(c + 32 + 16, 9, 8);
    cr_assert_eq(walk(c, len, NULL, &e, msg, sizeof msg), -1);
    cr_assert_eq(e, GOBLIN_EFORMAT);
    cr_assert(strstr(msg, "truncated"), "%s", msg);
    /* an oversize body length: over the limit */
    wr_le(c + 32 + 16, (uint64_t)1 << 40, 8);
    cr_assert_eq(walk(c, len, NULL, &e, msg, sizeof msg), -1);
    cr_assert_eq(e, GOBLIN_ELIMIT);
    goblin__wire_limits lim;
    goblin__wire_limits_default(&lim);
    lim.max_message_bytes = 30; /* the ABANDON (32 bytes) is over it */
    cr_assert_eq(walk(buf, len, &lim, &e, msg, sizeof msg), -1);
    cr_assert_eq(e, GOBLIN_ELIMIT);
    /* a header cut short, a bad magic, an unknown flag in the second message */
    cr_assert_eq(walk(buf, 32 + 20, NULL, &e, msg, sizeof msg), -1);
    cr_assert_eq(e, GOBLIN_EFORMAT);
    memcpy(c, buf, len);
    c[32] = 'X';
    cr_assert_eq(walk(c, len, NULL, &e, msg, sizeof msg), -1);
    cr_assert_eq(e, GOBLIN_EFORMAT);
    memcpy(c, buf, len);
    c[32 + 7] = GOBLIN_WIRE_FLAG_BATCH;
    cr_assert_eq(walk(c, len, NULL, &e, msg, sizeof msg), -1);
    cr_assert_eq(e, GOBLIN_EPROTO);
    /* a zero body length frames (the decoder then judges the body) */
    memcpy(c, buf, len);
    wr_le(c + 32 + 16, 0, 8);
    cr_assert_eq(walk(c, 32 + 24, NULL, &e, msg, sizeof msg), 2, "%s", msg);
    cr_assert_eq(decode_err(c + 32, 24, NULL, msg, sizeof msg), GOBLIN_EFORMAT);
}

Test(wire, batch_truncations_and_byte_flips_never_crash) {
    static uint8_t buf[16384], c[16384];
    size_t len = 0;
    int n = 0;
    for (int r = 0; r < 40; r++) {
        goblin__wire_msg m;
        sample((goblin__wire_type)(1 + r % (GOBLIN_WIRE_TYPE_COUNT - 1)), &m);
        batch_put(buf, sizeof buf, &len, &m);
        n++;
    }
    goblin_err e;
    char msg[256];
    cr_assert_eq(walk(buf, len, NULL, &e, msg, sizeof msg), n, "%s", msg);
    /* every truncation: a shorter walk that ends in an error, never a read past it
     * (ASan), except at a message boundary where the batch is simply shorter */
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *t = malloc(cut ? cut : 1);
        memcpy(t, buf, cut);
        int k = walk(t, cut, NULL, &e, msg, sizeof msg);
        cr_assert(k == -1 || k < n);
        free(t);
    }
    /* random flips: the walk ends, and what it frames decodes or fails cleanly */
    uint64_t s = 42;
    for (int it = 0; it < 3000; it++) {
        memcpy(c, buf, len);
        int flips = 1 + (int)(rng(&s) % 4);
        for (int f = 0; f < flips; f++) c[rng(&s) % len] ^= (uint8_t)(1u << (rng(&s) % 8));
        size_t off = 0, ml = 0;
        int guard = 0;
        do {
            size_t at = off;
            if (goblin__wire_batch_next(c, len, &off, NULL, &ml, msg, sizeof msg)) break;
            goblin__wire_msg *d = NULL;
            if (goblin__wire_decode(c + at, ml, NULL, GOBLIN_WIRE_DECODE_ZERO_COPY, &d, NULL, 0) == GOBLIN_OK)
                goblin__wire_msg_free(d);
            cr_assert_lt(++guard, n + 1);
        } while (off < len);
    }
    /* many tiny messages */
    len = 0;
    for (int r = 0; r < 500; r++) {
        goblin__wire_msg m;
        sample(GOBLIN_WIRE_TYPE_LEASE_REQUEST, &m);
        batch_put(buf, sizeof buf, &len, &m);
    }
    cr_assert_eq(walk(buf, len, NULL, &e, msg, sizeof msg), 500, "%s", msg);
}

Test(wire, batch_flag_and_capability) {
    goblin__wire_msg m;
    sample(GOBLIN_WIRE_TYPE_HELLO_ACK, &m);
    m.flags = GOBLIN_WIRE_FLAG_BATCH;
    size_t len;
    uint8_t *b = encode(&m, &len);
    cr_assert_eq(b[7], 0x01); /* the header's flags byte */
    goblin__wire_header h;
    cr_assert_eq(goblin__wire_header_decode(b, len, NULL, &h, NULL, 0), GOBLIN_OK);
    cr_assert_eq(h.flags, GOBLIN_WIRE_FLAG_BATCH);
    goblin__wire_msg *d = decode_ok(b, len, 0);
    cr_assert_eq(d->flags, GOBLIN_WIRE_FLAG_BATCH);
    size_t len2;
    uint8_t *b2 = encode(d, &len2); /* canonical */
    cr_assert_eq(len2, len);
    cr_assert_eq(memcmp(b, b2, len), 0);
    goblin__wire_msg_free(d);
    goblin_buffer_free(b2);
    char msg[256];
    b[7] = 0x02; /* undefined */
    cr_assert_eq(decode_err(b, len, NULL, msg, sizeof msg), GOBLIN_EPROTO);
    goblin_buffer_free(b);
    /* only HELLO_ACK may carry it */
    for (int t = 1; t < GOBLIN_WIRE_TYPE_COUNT; t++) {
        if (t == GOBLIN_WIRE_TYPE_HELLO_ACK) continue;
        sample((goblin__wire_type)t, &m);
        m.flags = GOBLIN_WIRE_FLAG_BATCH;
        uint8_t *x = NULL;
        size_t xl = 0;
        cr_assert_eq(goblin__wire_encode(&m, &x, &xl), GOBLIN_EINVAL, "type %d", t);
        m.flags = 0;
        x = encode(&m, &xl);
        x[7] = GOBLIN_WIRE_FLAG_BATCH;
        cr_assert_eq(decode_err(x, xl, NULL, msg, sizeof msg), GOBLIN_EPROTO, "type %d", t);
        goblin_buffer_free(x);
    }
    /* the capability rides in HELLO's backends, which a 1.0 decoder keeps as they are */
    sample(GOBLIN_WIRE_TYPE_HELLO, &m);
    m.body.hello.backends = 0x2u | GOBLIN_WIRE_CAP_BATCH;
    b = encode(&m, &len);
    cr_assert_eq(rd_le(b + 24 + 8, 4), 0x80000002u);
    d = decode_ok(b, len, 0);
    cr_assert_eq(d->body.hello.backends, 0x80000002u);
    goblin__wire_msg_free(d);
    goblin_buffer_free(b);
}
