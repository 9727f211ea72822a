/* tests/fuzz/seeds.c - seed inputs for the fuzz targets, built through the public
 * API at run time (nothing binary is committed), and the shared failure report. */
#include <goblin/alloc.h>
#include <goblin/formula.h>
#include <goblin/graph.h>
#include "proto/wire.h"
#include <stdio.h>
#include <string.h>
#include "fuzz.h"

void fuzz_fail(const char *why) {
    fprintf(stderr, "fuzz oracle failed: %s\n", why);
    fflush(stderr);
    __builtin_trap();
}

/* ---- graphs -------------------------------------------------------------- */

/* Add a node, or return -1 if the builder refuses (seeds are best effort: a seed
 * the catalogue rejects is simply smaller). */
static int32_t add(goblin_graph *g, goblin_op op, const int32_t *in, int32_t n,
                   const goblin_attr *at, int32_t na) {
    int32_t id;
    for (int32_t i = 0; i < n; i++)
        if (in[i] < 0) return -1;
    return goblin_graph_add(g, op, in, n, at, na, &id) == GOBLIN_OK ? id : -1;
}

static int32_t input(goblin_graph *g, goblin_dtype dt, int32_t rank, const int64_t *shape) {
    int32_t id;
    return goblin_graph_input(g, dt, rank, shape, &id) == GOBLIN_OK ? id : -1;
}

static int32_t constant(goblin_graph *g, goblin_dtype dt, int32_t rank, const int64_t *shape,
                        void *data) {
    goblin_tensor t;
    int32_t id;
    if (goblin_tensor_init(&t, dt, rank, shape, data) != GOBLIN_OK) return -1;
    return goblin_graph_constant(g, &t, &id) == GOBLIN_OK ? id : -1;
}

static void out(goblin_graph *g, int32_t id) {
    if (id >= 0) goblin_graph_output(g, id);
}

/* Serialize @p g (then free it) and hand the bytes to @p emit. */
static void emit_graph(goblin_graph *g, fuzz_emit_fn emit, void *ctx) {
    uint8_t *buf;
    size_t len;
    if (goblin_graph_serialize(g, &buf, &len) == GOBLIN_OK) {
        emit(ctx, buf, len);
        goblin_buffer_free(buf);
    }
    goblin_graph_free(g);
}

typedef void (*graph_builder)(goblin_graph *g);

static void g_arith(goblin_graph *g) {
    int64_t sx[] = {4, 3}, sc[] = {3}, ax[] = {1};
    static float cv[3] = {0.5f, -1.0f, 2.0f};
    int32_t x = input(g, GOBLIN_DTYPE_F32, 2, sx);
    int32_t c = constant(g, GOBLIN_DTYPE_F32, 1, sc, cv);
    int32_t s = add(g, GOBLIN_OP_ADD, (int32_t[]){x, c}, 2, NULL, 0);
    int32_t m = add(g, GOBLIN_OP_MUL, (int32_t[]){s, x}, 2, NULL, 0);
    goblin_attr at[] = {goblin_attr_ints(GOBLIN_ATTR_AXES, ax, 1),
                        goblin_attr_int(GOBLIN_ATTR_KEEPDIM, 1)};
    out(g, add(g, GOBLIN_OP_SUM, &m, 1, at, 2));
    out(g, add(g, GOBLIN_OP_EXP, &m, 1, NULL, 0));
}

static void g_matmul(goblin_graph *g) {
    int64_t sa[] = {4, 3}, sb[] = {3, 5};
    int32_t a = input(g, GOBLIN_DTYPE_F64, 2, sa);
    int32_t b = input(g, GOBLIN_DTYPE_F64, 2, sb);
    int32_t p = add(g, GOBLIN_OP_MATMUL, (int32_t[]){a, b}, 2, NULL, 0);
    int32_t r = add(g, GOBLIN_OP_RELU, &p, 1, NULL, 0);
    goblin_attr ax = goblin_attr_int(GOBLIN_ATTR_AXIS, 1);
    out(g, add(g, GOBLIN_OP_SOFTMAX, &r, 1, &ax, 1));
    goblin_attr dt = goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_F32);
    out(g, add(g, GOBLIN_OP_CAST, &p, 1, &dt, 1));
    goblin_attr lo = goblin_attr_float(GOBLIN_ATTR_MIN, -1.0), hi = goblin_attr_float(GOBLIN_ATTR_MAX, 1.0);
    goblin_attr cl[] = {lo, hi};
    out(g, add(g, GOBLIN_OP_CLAMP, &p, 1, cl, 2));
}

static void g_shape(goblin_graph *g) {
    int64_t sx[] = {2, 3, 4};
    int32_t x = input(g, GOBLIN_DTYPE_I32, 3, sx);
    int64_t shp[] = {6, 4}, perm[] = {2, 0, 1}, st[] = {0, 1, 0}, sp[] = {2, 3, 4}, step[] = {1, 1, 2};
    goblin_attr a1 = goblin_attr_ints(GOBLIN_ATTR_SHAPE, shp, 2);
    out(g, add(g, GOBLIN_OP_RESHAPE, &x, 1, &a1, 1));
    goblin_attr a2 = goblin_attr_ints(GOBLIN_ATTR_PERM, perm, 3);
    int32_t p = add(g, GOBLIN_OP_PERMUTE, &x, 1, &a2, 1);
    out(g, p);
    goblin_attr a3[] = {goblin_attr_ints(GOBLIN_ATTR_STARTS, st, 3),
                        goblin_attr_ints(GOBLIN_ATTR_STOPS, sp, 3),
                        goblin_attr_ints(GOBLIN_ATTR_STEPS, step, 3)};
    out(g, add(g, GOBLIN_OP_SLICE, &x, 1, a3, 3));
    goblin_attr a4 = goblin_attr_int(GOBLIN_ATTR_AXIS, 0);
    out(g, add(g, GOBLIN_OP_CONCAT, (int32_t[]){x, x}, 2, &a4, 1));
}

static void g_int(goblin_graph *g) {
    int64_t s[] = {5};
    static int32_t kv[5] = {1, -2, 3, 0x7fffffff, -0x7fffffff - 1};
    int32_t a = input(g, GOBLIN_DTYPE_I32, 1, s);
    int32_t k = constant(g, GOBLIN_DTYPE_I32, 1, s, kv);
    int32_t band = add(g, GOBLIN_OP_BITWISE_AND, (int32_t[]){a, k}, 2, NULL, 0);
    int32_t sh = add(g, GOBLIN_OP_SHL, (int32_t[]){a, k}, 2, NULL, 0);
    int32_t lt = add(g, GOBLIN_OP_LT, (int32_t[]){a, k}, 2, NULL, 0);
    out(g, add(g, GOBLIN_OP_WHERE, (int32_t[]){lt, band, sh}, 3, NULL, 0));
    goblin_attr ax = goblin_attr_int(GOBLIN_ATTR_AXIS, 0);
    out(g, add(g, GOBLIN_OP_ARGMAX, &a, 1, &ax, 1));
    out(g, add(g, GOBLIN_OP_FLOOR_DIV, (int32_t[]){a, k}, 2, NULL, 0));
}

static void g_index(goblin_graph *g) {
    int64_t st[] = {6, 4}, si[] = {3};
    static int64_t iv[3] = {5, 0, 2};
    int32_t t = input(g, GOBLIN_DTYPE_BF16, 2, st);
    int32_t i = constant(g, GOBLIN_DTYPE_I64, 1, si, iv);
    goblin_attr ax = goblin_attr_int(GOBLIN_ATTR_AXIS, 0);
    out(g, add(g, GOBLIN_OP_INDEX_SELECT, (int32_t[]){t, i}, 2, &ax, 1));
    out(g, add(g, GOBLIN_OP_EMBEDDING, (int32_t[]){t, i}, 2, NULL, 0));
}

static void g_formula(goblin_graph *g) {
    int64_t s[] = {3, 2};
    int32_t a = input(g, GOBLIN_DTYPE_F16, 2, s);
    int32_t b = input(g, GOBLIN_DTYPE_F16, 2, s);
    goblin_formula *f;
    goblin_errbuf fe;
    if (goblin_formula_parse("a * exp(-b) + 1.5 * max(a, b)", &f, &fe) != GOBLIN_OK) return;
    int32_t id;
    int32_t ins[2] = {a, b};
    if (goblin_formula_var_count(f) == 2 &&
        goblin_graph_add_formula(g, f, ins, 2, &id) == GOBLIN_OK)
        out(g, id);
    goblin_formula_free(f);
}

void fuzz_graph_seeds(fuzz_emit_fn emit, void *ctx) {
    static const graph_builder builders[] = {g_arith, g_matmul, g_shape, g_int, g_index, g_formula};
    for (size_t k = 0; k < sizeof builders / sizeof *builders; k++) {
        goblin_graph *g;
        if (goblin_graph_new(&g) != GOBLIN_OK) return;
        builders[k](g);
        emit_graph(g, emit, ctx);
    }
}

#ifndef GOBLIN_FUZZ_CORE_ONLY /* built without the runtime (-Druntime=disabled) */
/* ---- wire messages ------------------------------------------------------- */

static void emit_msg(const goblin__wire_msg *m, fuzz_emit_fn emit, void *ctx) {
    uint8_t *buf;
    size_t len;
    if (goblin__wire_encode(m, &buf, &len) == GOBLIN_OK) {
        emit(ctx, buf, len);
        goblin_buffer_free(buf);
    }
}

/* One graph's bytes, for the TASK seeds. */
typedef struct first_graph {
    uint8_t buf[4096];
    size_t len;
} first_graph;

static void keep_first(void *ctx, const uint8_t *data, size_t size) {
    first_graph *fg = ctx;
    if (fg->len == 0 && size <= sizeof fg->buf) {
        memcpy(fg->buf, data, size);
        fg->len = size;
    }
}

void fuzz_wire_seeds(fuzz_emit_fn emit, void *ctx) {
    static const uint8_t token[] = {0x01, 0x02, 0xfe, 0xff, 'x'};
    goblin__wire_msg m;

    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HELLO);
    m.request_id = 1;
    m.body.hello.backends = 3;
    m.body.hello.threads = 8;
    m.body.hello.memory_bytes = (uint64_t)1 << 33;
    m.body.hello.token = token;
    m.body.hello.token_len = sizeof token;
    emit_msg(&m, emit, ctx);

    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HELLO_ACK);
    m.request_id = 1;
    m.body.hello_ack.session_id = 12345;
    m.body.hello_ack.heartbeat_ms = 1000;
    m.body.hello_ack.max_message_bytes = 1 << 24;
    emit_msg(&m, emit, ctx);

    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_REFUSE);
    m.body.refuse.reason = GOBLIN_EVERSION;
    m.body.refuse.message = "catalogue version 2, this node has 1";
    emit_msg(&m, emit, ctx);

    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_LEASE_REQUEST);
    m.request_id = 2;
    m.body.lease_request.slots = 4;
    emit_msg(&m, emit, ctx);

    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_ABANDON);
    m.body.abandon.task_id = 99;
    emit_msg(&m, emit, ctx);

    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_HEARTBEAT);
    m.body.heartbeat.active_tasks = 2;
    emit_msg(&m, emit, ctx);

    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_ERROR);
    m.body.error.code = GOBLIN_EINDEX;
    m.body.error.task_id = 7;
    m.body.error.message = "node 2 (gather): index 9 out of range";
    emit_msg(&m, emit, ctx);

    /* protocol 2: the identity proof */
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_CHALLENGE);
    m.request_id = 1;
    for (int i = 0; i < GOBLIN_WIRE_NONCE_BYTES; i++) m.body.challenge.nonce[i] = (uint8_t)(i * 7 + 1);
    emit_msg(&m, emit, ctx);

    static const uint8_t key[91] = {0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06,
                                    0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04};
    static const uint8_t sig[8] = {0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01};
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_PROOF);
    m.body.proof.key = key;
    m.body.proof.key_len = sizeof key;
    m.body.proof.sig = sig;
    m.body.proof.sig_len = sizeof sig;
    emit_msg(&m, emit, ctx);

    /* TASK with a real graph and inputs of several dtypes and ranks */
    first_graph fg = {.len = 0};
    fuzz_graph_seeds(keep_first, &fg);
    static float xv[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    static int64_t iv[3] = {-1, 0, 1};
    static uint8_t bv[2] = {0, 1};
    static double sv = 3.5;
    int64_t sx[] = {4, 3}, si[] = {3}, sb[] = {2, 1, 1}, se[] = {0, 5};
    goblin_tensor ts[5];
    goblin_tensor_init(&ts[0], GOBLIN_DTYPE_F32, 2, sx, xv);
    goblin_tensor_init(&ts[1], GOBLIN_DTYPE_I64, 1, si, iv);
    goblin_tensor_init(&ts[2], GOBLIN_DTYPE_BOOL, 3, sb, bv);
    goblin_tensor_init(&ts[3], GOBLIN_DTYPE_F64, 0, NULL, &sv);
    goblin_tensor_init(&ts[4], GOBLIN_DTYPE_I16, 2, se, NULL);
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_TASK);
    m.request_id = 3;
    m.body.task.task_id = 1000;
    m.body.task.lease_ms = 60000;
    m.body.task.graph = fg.buf;
    m.body.task.graph_len = fg.len;
    m.body.task.n_inputs = 1;
    m.body.task.inputs = ts;
    if (fg.len) emit_msg(&m, emit, ctx);
    m.body.task.n_inputs = 5;
    if (fg.len) emit_msg(&m, emit, ctx);

    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_RESULT);
    m.request_id = 3;
    m.body.result.task_id = 1000;
    m.body.result.n_outputs = 5;
    m.body.result.outputs = ts;
    emit_msg(&m, emit, ctx);
}
#endif
