/* tests/unit/test_client_wire.c - the client protocol codec: hand-built bytes, round
 * trips, and hostile input (truncation, bad padding, lengths, random bytes); and graph
 * jobs end to end through a gateway on tcp:// in front of an in-process grid, compared
 * with goblin_graph_eval of the whole graph, with hostile SUBMIT_GRAPH frames. */
#include <criterion/criterion.h>
#include <goblin/goblin.h>
#include <math.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/client_wire.h"

static goblin__cw_limits lim(void) {
    goblin__cw_limits l = {1u << 26, (int64_t)1 << 24};
    return l;
}

static uint8_t *enc(const goblin__cw_msg *m, size_t *n) {
    size_t sz;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz), GOBLIN_OK);
    uint8_t *b = malloc(sz);
    cr_assert_eq(goblin__cw_encode_into(m, b, sz, n), GOBLIN_OK);
    cr_assert_eq(*n, sz);
    return b;
}

static goblin__cw_msg *msg_new(void) { return calloc(1, sizeof(goblin__cw_msg)); }

Test(client_wire, status_request_bytes) {
    goblin__cw_msg *m = msg_new();
    m->type = GOBLIN__CW_STATUS;
    m->request_id = 0x0102030405060708ull;
    for (int i = 0; i < 16; i++) m->job_id.bytes[i] = (uint8_t)(0xa0 + i);
    size_t n;
    uint8_t *b = enc(m, &n);
    /* version 4; the job id is 16 bytes as given */
    const uint8_t want[40] = {'G', 'B', 'L', 'C', 4, 0, 3, 0, 8, 7, 6, 5, 4, 3, 2, 1,
                              16, 0, 0, 0, 0, 0, 0, 0, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6,
                              0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf};
    cr_assert_eq(n, 40);
    cr_assert(memcmp(b, want, 40) == 0);
    goblin__cw_limits l = lim();
    goblin__cw_msg *d = msg_new();
    char why[256];
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert_eq(d->type, GOBLIN__CW_STATUS);
    cr_assert(goblin_job_id_equal(&d->job_id, &m->job_id));
    cr_assert_eq(d->request_id, 0x0102030405060708ull);
    /* Wrong version (the old 8-byte ids: 1; matmul submits without job parameters: 2;
     * parts without flags: 3), unknown type, flags, bad magic, length mismatch. */
    b[4] = 1;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EVERSION);
    b[4] = 2;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EVERSION);
    b[4] = 3;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EVERSION);
    b[4] = 4; b[6] = 99;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EPROTO);
    b[6] = 3; b[7] = 1;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EPROTO);
    b[7] = 0; b[0] = 'X';
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    b[0] = 'G'; b[16] = 9;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    free(b); free(m); free(d);
}

Test(client_wire, submit_roundtrip_and_truncation) {
    float a[6] = {1, 2, 3, 4, 5, 6};
    float bb[3] = {7, 8, 9};
    int64_t sa[2] = {2, 3}, sb[2] = {3, 1};
    goblin__cw_msg *m = msg_new();
    m->type = GOBLIN__CW_SUBMIT_MATMUL;
    goblin_tensor_init(&m->tensors[0], GOBLIN_DTYPE_F32, 2, sa, a);
    goblin_tensor_init(&m->tensors[1], GOBLIN_DTYPE_F32, 2, sb, bb);
    m->task_memory_bytes = 0x10000;
    m->min_tasks = 9;
    size_t n;
    uint8_t *b = enc(m, &n);
    /* header 24 + job parameters 16 + A (8 + 16 + 24) + B (8 + 16 + 12 padded to 16) */
    cr_assert_eq(n, 24 + 16 + 48 + 40);
    const uint8_t params[16] = {0, 0, 1, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0};
    cr_assert(memcmp(b + 24, params, 16) == 0, "u64 task_memory_bytes, i64 min_tasks, little-endian");
    goblin__cw_limits l = lim();
    goblin__cw_msg *d = msg_new();
    char why[256];
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert_eq(d->task_memory_bytes, 0x10000);
    cr_assert_eq(d->min_tasks, 9);
    /* Hostile job parameters: a negative or huge min_tasks, a budget no task fits or
     * no worker has, each refused with the field named. */
    const struct { int at; uint8_t byte; const char *field; } bad[] = {
        {24 + 15, 0xff, "min_tasks"}, /* negative */
        {24 + 11, 0x01, "min_tasks"}, /* 2^24 + 9 tasks */
        {24 + 0, 100, "task_memory_bytes"},  /* 100 bytes (byte 2 cleared below) */
        {24 + 7, 0x01, "task_memory_bytes"}, /* 2^56 bytes */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *c = malloc(n);
        memcpy(c, b, n);
        c[bad[i].at] = bad[i].byte;
        if (i == 2) c[24 + 2] = 0;
        cr_assert_eq(goblin__cw_decode(c, n, &l, d, why, sizeof why), GOBLIN_EFORMAT, "case %zu", i);
        cr_assert(strstr(why, bad[i].field), "case %zu: %s", i, why);
        free(c);
    }
    m->min_tasks = -1;
    size_t sz0;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz0), GOBLIN_EINVAL);
    m->min_tasks = 9;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert_eq(d->tensors[0].shape[1], 3);
    cr_assert_eq(d->tensors[1].shape[0], 3);
    cr_assert(memcmp(d->tensors[1].data, bb, 12) == 0);
    /* Every truncation (with the length field fixed up) is refused. */
    for (size_t k = 0; k < n; k++) {
        uint8_t *c = malloc(n);
        memcpy(c, b, n);
        uint64_t bl = k >= 24 ? k - 24 : 0;
        for (int i = 0; i < 8; i++) c[16 + i] = (uint8_t)(bl >> (8 * i));
        cr_assert_neq(goblin__cw_decode(c, k, &l, d, why, sizeof why), GOBLIN_OK, "%zu bytes", k);
        free(c);
    }
    /* Non-zero padding after B's 12 data bytes. */
    b[n - 1] = 1;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    b[n - 1] = 0;
    /* A dimension claiming far more data than present. */
    b[40 + 8] = 0xff; b[40 + 9] = 0xff; b[40 + 10] = 0xff;
    cr_assert_neq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK);
    /* Over the message limit. */
    goblin__cw_limits small = {32, 1 << 20};
    b[40 + 8] = 2; b[40 + 9] = 0; b[40 + 10] = 0;
    cr_assert_eq(goblin__cw_decode(b, n, &small, d, why, sizeof why), GOBLIN_ELIMIT);
    /* Non-contiguous tensors are not encodable. */
    m->tensors[0].strides[0] = 1;
    size_t sz;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz), GOBLIN_EINVAL);
    free(b); free(m); free(d);
}

Test(client_wire, files_status_stats_error) {
    goblin__cw_msg *m = msg_new(), *d = msg_new();
    goblin__cw_limits l = lim();
    char why[256];
    size_t n;
    m->type = GOBLIN__CW_SUBMIT_MATMUL_FILES;
    strcpy(m->paths[0], "/data/a.npy");
    strcpy(m->paths[1], "/data/b.npy");
    strcpy(m->paths[2], "/data/c.npy");
    m->min_tasks = 12;
    m->task_memory_bytes = (uint64_t)1 << 30;
    uint8_t *b = enc(m, &n);
    cr_assert_eq(n, 24 + 32 + 40);
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert_str_eq(d->paths[2], "/data/c.npy");
    cr_assert_eq(d->file_flags, 0);
    cr_assert_eq(d->min_tasks, 12);
    cr_assert_eq(d->task_memory_bytes, (uint64_t)1 << 30);
    b[24 + 31] = 0x80; /* min_tasks < 0 */
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    cr_assert(strstr(why, "min_tasks"), "%s", why);
    b[24 + 31] = 0;
    b[24 + 12] = 2; /* an unknown flag */
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    b[24 + 12] = GOBLIN__CW_FILE_OVERWRITE;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert_eq(d->file_flags, GOBLIN__CW_FILE_OVERWRITE);
    b[24 + 32 + 3] = '\n'; /* a control byte in a path */
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    free(b);
    m->paths[1][0] = 0;
    size_t sz;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz), GOBLIN_EINVAL);

    memset(m, 0, sizeof *m);
    m->type = GOBLIN__CW_JOB_STATUS;
    m->job_id.bytes[0] = 3;
    m->status = GOBLIN_JOB_FAILED;
    m->code = GOBLIN_ELIMIT;
    m->done = 5;
    m->total = 9;
    strcpy(m->text, "task 4 failed\x01");
    b = enc(m, &n);
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert_eq(d->status, GOBLIN_JOB_FAILED);
    cr_assert_eq(d->done, 5);
    cr_assert_str_eq(d->text, "task 4 failed?"); /* control bytes never reach logs */
    b[24 + 24] = 10; /* done > total */
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    free(b);

    memset(m, 0, sizeof *m);
    m->type = GOBLIN__CW_STATS_REPLY;
    m->stats.results_rejected = 17;
    m->stats.workers_quarantined = 1;
    goblin_node_worker_stats ws[2] = {{.session_id = 9, .connected = true, .threads = 2,
                                       .accepted = 100},
                                      {.session_id = 10, .quarantined = true, .rejected = 3}};
    for (int i = 0; i < 64; i++) ws[0].identity[i] = "0123456789abcdef"[(i * 7) % 16];
    strcpy(ws[0].owner, "lab-7 (two machines)");
    m->workers = ws;
    m->n_workers = 2;
    b = enc(m, &n);
    cr_assert_eq(n, 24 + 8 + 8 * (sizeof(goblin_node_stats) / 8) + 2 * 152);
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert_str_eq(d->workers[0].identity, ws[0].identity);
    cr_assert_str_eq(d->workers[0].owner, "lab-7 (two machines)");
    cr_assert_str_eq(d->workers[1].identity, "");
    cr_assert_str_eq(d->workers[1].owner, "");
    goblin__cw_msg_clear(d);
    /* an owner with a control byte is refused */
    size_t rec0 = 24 + 8 + 8 * (sizeof(goblin_node_stats) / 8);
    b[rec0 + 88 + 3] = 0x07;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    b[rec0 + 88 + 3] = '-';
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert_eq(d->stats.results_rejected, 17);
    cr_assert_eq(d->stats.workers_quarantined, 1);
    cr_assert_eq(d->n_workers, 2);
    cr_assert_eq(d->workers[0].accepted, 100);
    cr_assert(d->workers[1].quarantined);
    cr_assert_eq(d->workers[1].rejected, 3);
    goblin__cw_msg_clear(d);
    /* A worker count that the bytes cannot hold. */
    b[24 + 4] = 0xff; b[24 + 5] = 0xff;
    cr_assert_neq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK);
    cr_assert_null(d->workers);
    free(b);
    free(m); free(d);
}

Test(client_wire, random_bytes_never_crash) {
    goblin__cw_limits l = lim();
    goblin__cw_msg *d = msg_new();
    uint8_t buf[200];
    srand(11);
    int accepted = 0;
    for (int it = 0; it < 50000; it++) {
        size_t n = (size_t)(rand() % (int)sizeof buf);
        for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rand();
        if (n >= 24) { /* a plausible header so the body decoders are reached */
            memcpy(buf, "GBLC\x01\x00", 6);
            buf[6] = (uint8_t)(1 + rand() % 8);
            buf[7] = 0;
            uint64_t bl = n - 24;
            for (int i = 0; i < 8; i++) buf[16 + i] = (uint8_t)(bl >> (8 * i));
        }
        if (goblin__cw_decode(buf, n, &l, d, NULL, 0) == GOBLIN_OK) accepted++;
        goblin__cw_msg_clear(d);
    }
    free(d);
    cr_assert_lt(accepted, 50000);
}

/* ---- graph jobs: SUBMIT_GRAPH and OUTPUTS --------------------------------------------- */

/* x [B, 4] f64, w [4, 3], b [3]:  y = tanh(x . w + b)  [B, 3], and over the batch its
 * sum, mean and max [3]. */
static goblin_graph *mlp_graph(int64_t B) {
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[] = {B, 4}, sw[] = {4, 3}, sb[] = {3}, ax[] = {0};
    int32_t x, w, b, mm, s, y, r;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sx, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sw, &w), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 1, sb, &b), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, (int32_t[]){x, w}, 2, NULL, 0, &mm), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, (int32_t[]){mm, b}, 2, NULL, 0, &s), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_TANH, &s, 1, NULL, 0, &y), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, y), GOBLIN_OK);
    goblin_attr at[] = {goblin_attr_ints(GOBLIN_ATTR_AXES, ax, 1), goblin_attr_int(GOBLIN_ATTR_KEEPDIM, 0)};
    goblin_op red[3] = {GOBLIN_OP_SUM, GOBLIN_OP_MEAN, GOBLIN_OP_REDUCE_MAX};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(goblin_graph_add(g, red[i], &y, 1, at, 2, &r), GOBLIN_OK, "%s", goblin_graph_error(g));
        cr_assert_eq(goblin_graph_output(g, r), GOBLIN_OK);
    }
    return g;
}

static void fill(double *v, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (double)(seed >> 11) * 0x1p-53 * 2.0 - 1.0;
    }
}

Test(client_wire, submit_graph_roundtrip_strided_and_layout) {
    goblin_graph *g = mlp_graph(5);
    uint8_t *blob;
    size_t blen;
    cr_assert_eq(goblin_graph_serialize(g, &blob, &blen), GOBLIN_OK);
    /* x is a transposed view of a [4, 5] block: packed while encoding. */
    double xt[20], w[12], b[3];
    fill(xt, 20, 1);
    fill(w, 12, 2);
    fill(b, 3, 3);
    goblin_tensor ins[3];
    int64_t sx[] = {5, 4}, sw[] = {4, 3}, sb[] = {3};
    goblin_tensor_init(&ins[0], GOBLIN_DTYPE_F64, 2, sx, xt);
    ins[0].strides[0] = 1;
    ins[0].strides[1] = 5;
    goblin_tensor_init(&ins[1], GOBLIN_DTYPE_F64, 2, sw, w);
    goblin_tensor_init(&ins[2], GOBLIN_DTYPE_F64, 1, sb, b);
    uint8_t split[3] = {GOBLIN_SPLIT_BATCH, GOBLIN_SPLIT_BROADCAST, GOBLIN_SPLIT_BROADCAST};
    uint8_t combine[4] = {GOBLIN_COMBINE_CONCAT, GOBLIN_COMBINE_SUM, GOBLIN_COMBINE_MEAN,
                          GOBLIN_COMBINE_MAX};
    uint64_t cache[3] = {0, 77, 78};
    goblin__cw_msg *m = msg_new(), *d = msg_new();
    m->type = GOBLIN__CW_SUBMIT_GRAPH;
    m->request_id = 9;
    m->graph = blob;
    m->graph_len = blen;
    m->n_io = 3;
    m->n_outputs = 4;
    m->io = ins;
    m->split = split;
    m->combine = combine;
    m->cache_ids = cache;
    m->verify = GOBLIN_VERIFY_RECOMPUTE;
    m->min_replication = 0.5;
    m->trust_halflife = 7;
    m->chunk_rows = 2;
    m->spot_rows = 300;
    m->task_memory_bytes = 1 << 20;
    m->min_tasks = 3;
    size_t n;
    uint8_t *buf = enc(m, &n);
    size_t p8 = (blen + 7) / 8 * 8;
    /* header, fixed fields, graph, split (8), combine (8), 3 cache ids, x (8+16+160),
     * w (8+16+96), b (8+8+24) */
    cr_assert_eq(n, 24 + 64 + p8 + 8 + 8 + 24 + 184 + 120 + 40);
    const uint8_t *p = buf + 24;
    cr_assert_eq(p[0], 3);
    cr_assert_eq(p[4], 4);
    cr_assert_eq(p[8], GOBLIN_VERIFY_RECOMPUTE);
    cr_assert_eq(p[9], 7); /* split, combine and cache ids present */
    double mr;
    memcpy(&mr, p + 16, 8);
    cr_assert_eq(mr, 0.5);
    cr_assert_eq(p[32], 2);
    cr_assert_eq(p[48], 3);
    cr_assert_eq(p[56] | p[57] << 8, (int)blen);
    cr_assert(memcmp(p + 64, blob, blen) == 0);
    cr_assert_eq(p[64 + p8], GOBLIN_SPLIT_BATCH);
    cr_assert_eq(p[64 + p8 + 8 + 3], GOBLIN_COMBINE_MAX);
    cr_assert_eq(p[64 + p8 + 16 + 8], 77);

    goblin__cw_limits l = lim();
    goblin_errbuf why_eb = {0};
    cr_assert_eq(goblin__cw_decode(buf, n, &l, d, why_eb.message, sizeof why_eb.message), GOBLIN_OK, "%s", why_eb.message);
    cr_assert_eq(d->n_io, 3);
    cr_assert_eq(d->n_outputs, 4);
    cr_assert_eq(d->graph_len, blen);
    cr_assert(memcmp(d->graph, blob, blen) == 0);
    cr_assert_eq(d->verify, GOBLIN_VERIFY_RECOMPUTE);
    cr_assert_eq(d->trust_halflife, 7);
    cr_assert_eq(d->chunk_rows, 2);
    cr_assert_eq(d->spot_rows, 300);
    cr_assert_eq(d->task_memory_bytes, 1 << 20);
    cr_assert_eq(d->min_tasks, 3);
    cr_assert_eq(d->split[0], GOBLIN_SPLIT_BATCH);
    cr_assert_eq(d->combine[2], GOBLIN_COMBINE_MEAN);
    cr_assert_eq(d->cache_ids[2], 78);
    cr_assert_eq(d->io[0].shape[0], 5);
    cr_assert(goblin_tensor_is_contiguous(&d->io[0]));
    /* x was packed row-major from its transposed view: x[i][j] = xt[j * 5 + i]. */
    double got[20];
    memcpy(got, d->io[0].data, sizeof got);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++) cr_assert_eq(got[i * 4 + j], xt[j * 5 + i]);
    /* The decoded message re-encodes to the same bytes (canonical). */
    size_t n2;
    uint8_t *buf2 = enc(d, &n2);
    cr_assert_eq(n2, n);
    cr_assert(memcmp(buf, buf2, n) == 0);
    free(buf2);
    /* The graph inside deserializes to a graph with the same counts. */
    goblin_graph *g2;
    cr_assert_eq(goblin_graph_deserialize(d->graph, d->graph_len, NULL, &g2, &why_eb), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output_count(g2), 4);
    goblin_graph_free(g2);
    goblin__cw_msg_clear(d);
    cr_assert_null(d->io);

    /* Every truncation (length field fixed up) is refused, leaving nothing allocated. */
    uint8_t *c = malloc(n);
    for (size_t k = 0; k < n; k++) {
        memcpy(c, buf, n);
        uint64_t bl = k >= 24 ? k - 24 : 0;
        for (int i = 0; i < 8; i++) c[16 + i] = (uint8_t)(bl >> (8 * i));
        cr_assert_neq(goblin__cw_decode(c, k, &l, d, why_eb.message, sizeof why_eb.message), GOBLIN_OK, "%zu bytes", k);
        cr_assert_null(d->owned);
    }
    /* Field by field: each bad value is refused with EFORMAT or ELIMIT. */
    struct { size_t off; uint8_t v; goblin_err want; } bad[] = {
        {24 + 8, GOBLIN_VERIFY_COUNT, GOBLIN_EFORMAT}, /* verify mode */
        {24 + 9, 8, GOBLIN_EFORMAT},                         /* unknown flag */
        {24 + 12, 1, GOBLIN_EFORMAT},                        /* reserved byte */
        {24 + 23, 0xff, GOBLIN_EFORMAT},                     /* min_replication NaN */
        {24 + 31, 0x80, GOBLIN_EFORMAT},                     /* trust_halflife negative */
        {24 + 39, 0x80, GOBLIN_EFORMAT},                     /* chunk_rows negative */
        {24 + 55, 0x80, GOBLIN_EFORMAT},                     /* min_tasks negative */
        {24 + 64 + p8, 2, GOBLIN_EFORMAT},                   /* split value */
        {24 + 64 + p8 + 3, 1, GOBLIN_EFORMAT},               /* split padding */
        {24 + 64 + p8 + 8, GOBLIN_COMBINE_COUNT, GOBLIN_EFORMAT}, /* combine value */
        {24 + 2, 1, GOBLIN_ELIMIT},                          /* 65539 inputs */
        {24 + 6, 1, GOBLIN_ELIMIT},                          /* 65540 outputs */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memcpy(c, buf, n);
        if (bad[i].off == 24 + 23) { c[24 + 22] = 0xf8; }
        c[bad[i].off] = bad[i].v;
        cr_assert_eq(goblin__cw_decode(c, n, &l, d, why_eb.message, sizeof why_eb.message), bad[i].want, "case %zu: %s", i, why_eb.message);
        cr_assert_null(d->owned);
    }
    /* A graph length beyond the message, and 1024 inputs with bytes for 3. */
    memcpy(c, buf, n);
    c[24 + 56 + 4] = 1;
    cr_assert_eq(goblin__cw_decode(c, n, &l, d, why_eb.message, sizeof why_eb.message), GOBLIN_EFORMAT);
    memcpy(c, buf, n);
    c[24 + 0] = 0; c[24 + 1] = 4; /* 1024 */
    cr_assert_eq(goblin__cw_decode(c, n, &l, d, why_eb.message, sizeof why_eb.message), GOBLIN_EFORMAT);
    cr_assert_null(d->owned);
    free(c);

    /* The encoder refuses what the decoder would. */
    size_t sz;
    m->min_replication = NAN;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz), GOBLIN_EINVAL);
    m->min_replication = 0.5;
    combine[1] = GOBLIN_COMBINE_COUNT;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz), GOBLIN_EINVAL);
    combine[1] = GOBLIN_COMBINE_SUM;
    m->n_io = GOBLIN__CW_MAX_IO + 1;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz), GOBLIN_EINVAL);
    m->n_io = 3;
    m->graph_len = 0;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz), GOBLIN_EINVAL);
    /* Without the optional arrays: flags 0 and the defaults' layout. */
    m->graph_len = blen;
    m->split = NULL;
    m->combine = NULL;
    m->cache_ids = NULL;
    free(buf);
    buf = enc(m, &n);
    cr_assert_eq(n, 24 + 64 + p8 + 184 + 120 + 40);
    cr_assert_eq(buf[24 + 9], 0);
    cr_assert_eq(goblin__cw_decode(buf, n, &l, d, why_eb.message, sizeof why_eb.message), GOBLIN_OK, "%s", why_eb.message);
    cr_assert_null(d->split);
    cr_assert_null(d->cache_ids);
    goblin__cw_msg_clear(d);
    free(buf);
    goblin_buffer_free(blob);
    goblin_graph_free(g);
    free(m);
    free(d);
}

Test(client_wire, outputs_roundtrip) {
    double a[6] = {1, 2, 3, 4, 5, 6};
    int32_t k[3] = {-1, 0, 7};
    goblin_tensor ts[3];
    int64_t sa[] = {2, 3}, sk[] = {3}, se[] = {0, 2};
    goblin_tensor_init(&ts[0], GOBLIN_DTYPE_F64, 2, sa, a);
    goblin_tensor_init(&ts[1], GOBLIN_DTYPE_I32, 1, sk, k);
    goblin_tensor_init(&ts[2], GOBLIN_DTYPE_F32, 2, se, NULL);
    goblin__cw_msg *m = msg_new(), *d = msg_new();
    m->type = GOBLIN__CW_OUTPUTS;
    m->job_id.bytes[15] = 12;
    m->n_io = 3;
    m->io = ts;
    size_t n;
    uint8_t *b = enc(m, &n);
    cr_assert_eq(n, 24 + 24 + (8 + 16 + 48) + (8 + 8 + 16) + (8 + 16));
    goblin__cw_limits l = lim();
    char why[256];
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert(goblin_job_id_equal(&d->job_id, &m->job_id));
    cr_assert_eq(d->n_io, 3);
    cr_assert(memcmp(d->io[0].data, a, sizeof a) == 0);
    cr_assert_eq(((int32_t *)d->io[1].data)[2], 7);
    cr_assert_eq(d->io[2].shape[1], 2);
    goblin__cw_msg_clear(d);
    /* A count the bytes cannot hold; over the limit; non-zero reserved word. */
    b[24 + 16] = 200;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    b[24 + 16] = 0; b[24 + 17] = 0x10;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_ELIMIT);
    b[24 + 17] = 0; b[24 + 16] = 3; b[24 + 20] = 1;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    cr_assert_null(d->owned);
    /* Strided outputs are not encodable (only SUBMIT_GRAPH packs). */
    ts[0].strides[0] = 1;
    size_t sz;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz), GOBLIN_EINVAL);
    free(b); free(m); free(d);
}

/* ---- graph jobs end to end: an in-process node, 3 workers, a gateway on tcp:// -------- */

typedef struct gw_fixture {
    goblin_grid *grid;
    goblin_gateway *gw;
    goblin_client *c;
    char url[64];
} gw_fixture;

static void gw_start(gw_fixture *f, int port, uint64_t recv_max) {
    memset(f, 0, sizeof *f);
    cr_assert_eq(goblin_grid_local(3, NULL, &f->grid), GOBLIN_OK);
    snprintf(f->url, sizeof f->url, "tcp://127.0.0.1:%d", port);
    goblin_gateway_params gp;
    goblin_gateway_params_default(&gp);
    gp.listen[0] = f->url;
    gp.n_listen = 1;
    gp.open = true; /* loopback: one principal, no credentials */
    if (recv_max) gp.recv_max_bytes = recv_max;
    cr_assert_eq(goblin_gateway_new(&f->gw, goblin_grid_node(f->grid), &gp), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_start(f->gw), GOBLIN_OK);
    goblin_errbuf why_eb = {0};
    cr_assert_eq(goblin_client_connect(&f->c, f->url, NULL, &why_eb), GOBLIN_OK, "%s", why_eb.message);
}

static void gw_stop(gw_fixture *f) {
    goblin_client_free(f->c);
    goblin_gateway_free(f->gw);
    goblin_grid_free(f->grid);
}

typedef struct mlp_data {
    int64_t B;
    double *x, w[12], b[3];
    goblin_tensor in[3];
    goblin_tensor ref[4]; /* goblin_graph_eval of the whole graph */
} mlp_data;

static void mlp_data_init(mlp_data *d, const goblin_graph *g, int64_t B, uint64_t seed) {
    d->B = B;
    d->x = malloc((size_t)B * 4 * sizeof(double));
    fill(d->x, (size_t)B * 4, seed);
    fill(d->w, 12, seed + 1);
    fill(d->b, 3, seed + 2);
    int64_t sx[] = {B, 4}, sw[] = {4, 3}, sb[] = {3};
    goblin_tensor_init(&d->in[0], GOBLIN_DTYPE_F64, 2, sx, d->x);
    goblin_tensor_init(&d->in[1], GOBLIN_DTYPE_F64, 2, sw, d->w);
    goblin_tensor_init(&d->in[2], GOBLIN_DTYPE_F64, 1, sb, d->b);
    memset(d->ref, 0, sizeof d->ref);
    cr_assert_eq(goblin_graph_eval(g, NULL, d->in, 3, d->ref, 4), GOBLIN_OK);
}

static void mlp_data_free(mlp_data *d) {
    free(d->x);
    for (int i = 0; i < 4; i++) goblin_buffer_free(d->ref[i].data);
}

/* Outputs of a graph job against the whole graph evaluated here: the rows of y are
 * computed alone (bit-equal expected, a few ulps allowed), and the batch reductions
 * are combined over chunks in another order (rounding of B terms allowed). */
static void check_outputs(const mlp_data *d, const goblin_tensor *out) {
    cr_assert_eq(out[0].dtype, GOBLIN_DTYPE_F64);
    cr_assert_eq(out[0].rank, 2);
    cr_assert_eq(out[0].shape[0], d->B);
    cr_assert_eq(out[0].shape[1], 3);
    const double *y = out[0].data, *ry = d->ref[0].data;
    for (int64_t i = 0; i < d->B * 3; i++)
        cr_assert(fabs(y[i] - ry[i]) <= 4e-16 * (1 + fabs(ry[i])), "y[%lld] = %.17g, want %.17g",
                  (long long)i, y[i], ry[i]);
    for (int o = 1; o < 4; o++) {
        cr_assert_eq(out[o].rank, 1);
        cr_assert_eq(out[o].shape[0], 3);
        const double *v = out[o].data, *rv = d->ref[o].data;
        for (int j = 0; j < 3; j++)
            cr_assert(fabs(v[j] - rv[j]) <= 1e-15 * (double)d->B * (1 + fabs(rv[j])),
                      "output %d [%d] = %.17g, want %.17g", o, j, v[j], rv[j]);
    }
}

static void free_outputs(goblin_tensor *out, int n) {
    for (int i = 0; i < n; i++) goblin_buffer_free(out[i].data);
}

static int64_t g_last_done, g_last_total;
static bool note_progress(void *user, int64_t done, int64_t total) {
    (void)user;
    g_last_done = done;
    g_last_total = total;
    return true;
}

Test(client_wire, graph_job_end_to_end, .timeout = 120) {
    gw_fixture f;
    gw_start(&f, 27201, 0);
    const int64_t B = 50;
    goblin_graph *g = mlp_graph(B);
    mlp_data d;
    mlp_data_init(&d, g, B, 100);

    /* Explicit split, combine and cache ids; 7 chunks of at most 8 rows. */
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    goblin_split split[3] = {GOBLIN_SPLIT_BATCH, GOBLIN_SPLIT_BROADCAST, GOBLIN_SPLIT_BROADCAST};
    goblin_combine combine[4] = {GOBLIN_COMBINE_CONCAT, GOBLIN_COMBINE_SUM, GOBLIN_COMBINE_MEAN,
                                 GOBLIN_COMBINE_MAX};
    uint64_t cache[3] = {0, 5, 6};
    jp.split = split;
    jp.combine = combine;
    jp.cache_ids = cache;
    jp.chunk_rows = 8;
    goblin_tensor out[4];
    memset(out, 0, sizeof out);
    goblin_err e = goblin_client_run_graph(f.c, g, d.in, 3, &jp, out, 4, note_progress, NULL);
    cr_assert_eq(e, GOBLIN_OK, "%s", goblin_client_error(f.c));
    check_outputs(&d, out);
    cr_assert_eq(g_last_total, 7); /* ceil(50 / 8) chunks, reported to the client */
    free_outputs(out, 4);

    /* Defaults (split by the leading-dim rule, combine AUTO), x as a strided view
     * (packed by the client), submit / status / fetch by hand. */
    double *xt = malloc((size_t)B * 4 * sizeof(double));
    for (int64_t i = 0; i < B; i++)
        for (int j = 0; j < 4; j++) xt[j * B + i] = d.x[i * 4 + j];
    goblin_tensor in2[3] = {d.in[0], d.in[1], d.in[2]};
    in2[0].data = xt;
    in2[0].strides[0] = 1;
    in2[0].strides[1] = B;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 16;
    goblin_job_id id;
    cr_assert_eq(goblin_client_submit_graph(f.c, g, in2, 3, &jp, &id), GOBLIN_OK, "%s",
                 goblin_client_error(f.c));
    goblin_client_job_info info;
    for (int k = 0; k < 6000; k++) {
        cr_assert_eq(goblin_client_job_status(f.c, &id, &info), GOBLIN_OK);
        if (info.status != GOBLIN_JOB_RUNNING) break;
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    cr_assert_eq(info.status, GOBLIN_JOB_DONE, "%s", info.message);
    cr_assert_eq(info.done, info.total);
    memset(out, 0, sizeof out);
    cr_assert_eq(goblin_client_fetch_outputs(f.c, &id, out, 4), GOBLIN_OK, "%s", goblin_client_error(f.c));
    check_outputs(&d, out);
    free_outputs(out, 4);
    /* Fetched means released. */
    cr_assert_eq(goblin_client_fetch_outputs(f.c, &id, out, 4), GOBLIN_ENOTFOUND);
    free(xt);

    /* A wrong input shape is the node's ESHAPE; wrong counts are the client's EINVAL. */
    int64_t bad_shape[] = {3, 3};
    goblin_tensor in3[3] = {d.in[0], d.in[1], d.in[2]};
    goblin_tensor_init(&in3[1], GOBLIN_DTYPE_F64, 2, bad_shape, d.w);
    cr_assert_eq(goblin_client_submit_graph(f.c, g, in3, 3, NULL, &id), GOBLIN_ESHAPE, "%s",
                 goblin_client_error(f.c));
    cr_assert_eq(goblin_client_submit_graph(f.c, g, d.in, 2, NULL, &id), GOBLIN_EINVAL);
    cr_assert_eq(goblin_client_run_graph(f.c, g, d.in, 3, NULL, out, 3, NULL, NULL), GOBLIN_EINVAL);
    /* Fetching a graph job's 4 outputs as one matmul result is refused (and releases it). */
    cr_assert_eq(goblin_client_submit_graph(f.c, g, d.in, 3, NULL, &id), GOBLIN_OK, "%s",
                 goblin_client_error(f.c));
    goblin_tensor one;
    goblin_err fe;
    do {
        fe = goblin_client_fetch_result(f.c, &id, &one);
    } while (fe == GOBLIN_EBUSY);
    cr_assert_eq(fe, GOBLIN_EINVAL, "%s", goblin_client_error(f.c));

    /* The node's counters over the client protocol: the chunks ran on workers. */
    goblin_node_stats ns;
    goblin_node_worker_stats ws[4];
    int64_t nw = 0;
    cr_assert_eq(goblin_client_stats(f.c, &ns, ws, 4, &nw), GOBLIN_OK);
    cr_assert_eq(nw, 3);
    fprintf(stderr, "graph jobs: tasks completed %lld, accepted %lld, replicas %lld/%lld agreed, "
            "node recomputed %lld\n", (long long)ns.tasks_completed, (long long)ns.results_accepted,
            (long long)ns.replicas_agreed, (long long)ns.replicas_issued, (long long)ns.node_recomputed);
    cr_assert_geq(ns.tasks_completed, 7 + 4);
    cr_assert_eq(ns.results_rejected, 0);
    cr_assert_gt(ws[0].accepted + ws[1].accepted + ws[2].accepted, 0);

    goblin_gateway_stats gs;
    goblin_gateway_stats_get(f.gw, &gs);
    cr_assert_eq(gs.jobs_submitted, 3);
    cr_assert_eq(gs.jobs_held, 0);
    cr_assert_eq(gs.refused, 0);
    mlp_data_free(&d);
    goblin_graph_free(g);
    gw_stop(&f);
}

/* Send raw bytes on a pair1 socket, as a client does. Returns true with the reply's type if the gateway
 * answered, false once it closed the connection instead (what it does with a request it
 * cannot decode, and nng with one over the size limit); waits up to 60 s for either. */
/* The socket of the raw_request in progress: a late callback from the previous call's
 * socket (nng may run it after that socket was closed) must not count as this one's. */
static uint32_t raw_socket_id;

static void on_pipe_removed(nng_pipe p, nng_pipe_ev ev, void *arg) {
    (void)ev;
    if (nng_pipe_socket(p).id == __atomic_load_n(&raw_socket_id, __ATOMIC_SEQ_CST))
        __atomic_store_n((int *)arg, 1, __ATOMIC_SEQ_CST);
}

static void on_aio_done(void *arg) { __atomic_store_n((int *)arg, 1, __ATOMIC_SEQ_CST); }

static bool raw_request(const char *url, const uint8_t *buf, size_t n, uint8_t *reply_type) {
    static int closed;
    __atomic_store_n(&closed, 0, __ATOMIC_SEQ_CST);
    nng_socket s;
    cr_assert_eq(nng_pair1_open(&s), 0);
    __atomic_store_n(&raw_socket_id, (uint32_t)nng_socket_id(s), __ATOMIC_SEQ_CST);
    cr_assert_eq(nng_pipe_notify(s, NNG_PIPE_EV_REM_POST, on_pipe_removed, &closed), 0);
    cr_assert_eq(nng_dial(s, url, NULL, 0), 0);
    nng_msg *m;
    cr_assert_eq(nng_msg_alloc(&m, n), 0);
    memcpy(nng_msg_body(m), buf, n);
    cr_assert_eq(nng_sendmsg(s, m, 0), 0);
    /* One receive in flight, watched until it completes or the gateway closes the
     * connection (up to 60 s). */
    bool got = false;
    nng_aio *aio;
    static int done;
    __atomic_store_n(&done, 0, __ATOMIC_SEQ_CST);
    cr_assert_eq(nng_aio_alloc(&aio, on_aio_done, &done), 0);
    nng_recv_aio(s, aio);
    for (int k = 0; k < 60000 && !__atomic_load_n(&done, __ATOMIC_SEQ_CST) &&
                    !__atomic_load_n(&closed, __ATOMIC_SEQ_CST); k++)
        usleep(1000);
    nng_aio_cancel(aio);
    nng_aio_wait(aio);
    if (nng_aio_result(aio) == 0) {
        nng_msg *in = nng_aio_get_msg(aio);
        got = true;
        if (reply_type) *reply_type = nng_msg_len(in) > 6 ? ((uint8_t *)nng_msg_body(in))[6] : 0;
        nng_msg_free(in);
    }
    nng_aio_free(aio);
    nng_close(s);
    cr_assert(got || __atomic_load_n(&closed, __ATOMIC_SEQ_CST), "neither a reply nor a close");
    return got;
}

static void fix_len(uint8_t *b, size_t n) {
    uint64_t bl = n - 24;
    for (int i = 0; i < 8; i++) b[16 + i] = (uint8_t)(bl >> (8 * i));
}

Test(client_wire, hostile_submit_graph_frames, .timeout = 120) {
    gw_fixture f;
    gw_start(&f, 27202, 1 << 20); /* requests up to 1 MiB */
    const int64_t B = 12;
    goblin_graph *g = mlp_graph(B);
    mlp_data d;
    mlp_data_init(&d, g, B, 7);
    uint8_t *blob;
    size_t blen;
    cr_assert_eq(goblin_graph_serialize(g, &blob, &blen), GOBLIN_OK);
    goblin__cw_msg *m = msg_new();
    m->type = GOBLIN__CW_SUBMIT_GRAPH;
    m->request_id = 1;
    m->graph = blob;
    m->graph_len = blen;
    m->n_io = 3;
    m->n_outputs = 4;
    m->io = d.in;
    m->min_replication = 0.25;
    m->trust_halflife = 20;
    size_t n;
    uint8_t *good = enc(m, &n);
    uint8_t *c = malloc(n + 64);
    int dropped = 0;

    /* Truncated at several places (length fixed up): no reply, connection closed. */
    size_t cuts[] = {30, 24 + 64, 24 + 64 + blen / 2, n - 1};
    for (size_t i = 0; i < 4; i++) {
        memcpy(c, good, n);
        fix_len(c, cuts[i]);
        cr_assert_not(raw_request(f.url, c, cuts[i], NULL), "cut at %zu answered", cuts[i]);
        dropped++;
    }
    /* 1024 inputs claimed over a few hundred bytes. */
    memcpy(c, good, n);
    c[24] = 0; c[25] = 4;
    cr_assert_not(raw_request(f.url, c, n, NULL));
    dropped++;
    /* Random bodies behind a SUBMIT_GRAPH header. */
    uint64_t s = 99;
    for (int k = 0; k < 5; k++) {
        memcpy(c, good, 24);
        size_t len = 24 + 8 * (size_t)(1 + k * 13);
        for (size_t i = 24; i < len; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            c[i] = (uint8_t)(s >> 56);
        }
        fix_len(c, len);
        cr_assert_not(raw_request(f.url, c, len, NULL));
        dropped++;
    }
    /* Over the gateway's 1 MiB limit: nng drops it before it is decoded. */
    size_t big = (size_t)2 << 20;
    uint8_t *huge = calloc(1, big);
    memcpy(huge, good, 24);
    fix_len(huge, big);
    cr_assert_not(raw_request(f.url, huge, big, NULL));
    free(huge);
    /* Well-formed frames the gateway answers with an ERROR: a corrupt graph blob, and
     * counts that disagree with the graph. */
    memcpy(c, good, n);
    c[24 + 64 + blen / 2] ^= 0x5a;
    uint8_t rt = 0;
    cr_assert(raw_request(f.url, c, n, &rt));
    cr_assert_eq(rt, GOBLIN__CW_ERROR);
    memcpy(c, good, n);
    c[24 + 4] = 3; /* the graph has 4 outputs */
    cr_assert(raw_request(f.url, c, n, &rt));
    cr_assert_eq(rt, GOBLIN__CW_ERROR);

    goblin_gateway_stats gs;
    goblin_gateway_stats_get(f.gw, &gs);
    cr_assert_eq(gs.refused, dropped, "refused %lld, sent %d malformed", (long long)gs.refused, dropped);
    cr_assert_eq(gs.jobs_held, 0);
    /* Still serving: a graph job through the client. */
    goblin_tensor out[4];
    memset(out, 0, sizeof out);
    cr_assert_eq(goblin_client_run_graph(f.c, g, d.in, 3, NULL, out, 4, NULL, NULL), GOBLIN_OK,
                 "%s", goblin_client_error(f.c));
    check_outputs(&d, out);
    free_outputs(out, 4);
    free(c);
    free(good);
    free(m);
    goblin_buffer_free(blob);
    mlp_data_free(&d);
    goblin_graph_free(g);
    gw_stop(&f);
}

/* ---- AUTH: bytes and hostile frames (credentials end to end: test_principal.c) ---------- */

Test(client_wire, auth_bytes_and_hostile_frames) {
    goblin__cw_msg *m = msg_new(), *d = msg_new();
    m->type = GOBLIN__CW_AUTH;
    m->request_id = 7;
    memcpy(m->token, "secret-token", 12);
    m->token_len = 12;
    size_t n;
    uint8_t *b = enc(m, &n);
    /* header, u32 12, u32 0, 12 token bytes, 4 zero bytes of padding */
    cr_assert_eq(n, 24 + 8 + 16);
    cr_assert_eq(b[6], 9);
    cr_assert_eq(b[24], 12);
    cr_assert_eq(b[25] | b[26] | b[27] | b[28] | b[29] | b[30] | b[31], 0);
    cr_assert_eq(memcmp(b + 32, "secret-token", 12), 0);
    cr_assert_eq(b[44] | b[45] | b[46] | b[47], 0);
    goblin__cw_limits l = lim();
    char why[256];
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert_eq(d->type, GOBLIN__CW_AUTH);
    cr_assert_eq(d->token_len, 12);
    cr_assert_eq(memcmp(d->token, "secret-token", 12), 0);
    /* every truncation is refused */
    for (size_t k = 0; k < n; k++)
        cr_assert_neq(goblin__cw_decode(b, k, &l, d, why, sizeof why), GOBLIN_OK, "len %zu", k);
    /* non-zero padding after the token, or in the length word */
    b[47] = 1;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    b[47] = 0;
    b[28] = 1;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    b[28] = 0;
    /* a length that promises more than the body, zero, or over the cap */
    b[24] = 20;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    b[24] = 0;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_ELIMIT);
    b[24] = 1;
    b[25] = 1; /* 257 */
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_ELIMIT);
    free(b);
    /* the encoder refuses what the decoder would */
    size_t sz;
    m->token_len = 0;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz), GOBLIN_EINVAL);
    m->token_len = GOBLIN__CW_MAX_TOKEN + 1;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz), GOBLIN_EINVAL);
    m->token_len = GOBLIN__CW_MAX_TOKEN;
    memset(m->token, 0xab, GOBLIN__CW_MAX_TOKEN);
    b = enc(m, &n);
    cr_assert_eq(n, 24 + 8 + 256);
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert_eq(d->token_len, 256);
    free(b);
    free(m);
    free(d);
}

/* A listener that never accepts (and whose one-slot backlog is taken): the connect must
 * give up after connect_timeout_ms on plain tcp:// too, not wait for the OS timeout. */
Test(client_wire, connect_timeout_plain_tcp, .timeout = 60) {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(ls, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(ls, 0), 0);
    socklen_t sl = sizeof sa;
    cr_assert_eq(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
    int filler = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_eq(connect(filler, (struct sockaddr *)&sa, sizeof sa), 0);
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", (int)ntohs(sa.sin_port));
    goblin_client_params cp;
    goblin_client_params_default(&cp);
    cp.connect_timeout_ms = 300;
    goblin_client *c = NULL;
    goblin_errbuf why_eb = {0};
    cr_assert_eq(goblin_client_connect(&c, url, &cp, &why_eb), GOBLIN_ETIMEDOUT, "%s", why_eb.message);
    cr_assert_null(c);
    cr_assert(strstr(why_eb.message, "within 300 ms"), "%s", why_eb.message);
    /* a refused connection is still reported as such */
    close(filler);
    close(ls);
    cr_assert_eq(goblin_client_connect(&c, url, &cp, &why_eb), GOBLIN_ECONNREFUSED, "%s", why_eb.message);
}
