/* tests/unit/test_client_wire.c - the client protocol codec: hand-built bytes, round
 * trips, and hostile input (truncation, bad padding, lengths, random bytes). */
#include <criterion/criterion.h>
#include <goblin/goblin.h>
#include <stdlib.h>
#include <string.h>

#include "client_wire.h"

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
    m->job_id = 42;
    size_t n;
    uint8_t *b = enc(m, &n);
    const uint8_t want[32] = {'G', 'B', 'L', 'C', 1, 0, 3, 0, 8, 7, 6, 5, 4, 3, 2, 1,
                              8, 0, 0, 0, 0, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0};
    cr_assert_eq(n, 32);
    cr_assert(memcmp(b, want, 32) == 0);
    goblin__cw_limits l = lim();
    goblin__cw_msg *d = msg_new();
    char why[256];
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert_eq(d->type, GOBLIN__CW_STATUS);
    cr_assert_eq(d->job_id, 42);
    cr_assert_eq(d->request_id, 0x0102030405060708ull);
    /* Wrong version, unknown type, flags, bad magic, length mismatch. */
    b[4] = 2;
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EVERSION);
    b[4] = 1; b[6] = 99;
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
    size_t n;
    uint8_t *b = enc(m, &n);
    /* header 24 + A (8 + 16 + 24) + B (8 + 16 + 12 padded to 16) */
    cr_assert_eq(n, 24 + 48 + 40);
    goblin__cw_limits l = lim();
    goblin__cw_msg *d = msg_new();
    char why[256];
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
    b[24 + 8] = 0xff; b[24 + 9] = 0xff; b[24 + 10] = 0xff;
    cr_assert_neq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK);
    /* Over the message limit. */
    goblin__cw_limits small = {32, 1 << 20};
    b[24 + 8] = 2; b[24 + 9] = 0; b[24 + 10] = 0;
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
    uint8_t *b = enc(m, &n);
    cr_assert_eq(n, 24 + 16 + 40);
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_OK, "%s", why);
    cr_assert_str_eq(d->paths[2], "/data/c.npy");
    b[24 + 16 + 3] = '\n'; /* a control byte in a path */
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    free(b);
    m->paths[1][0] = 0;
    size_t sz;
    cr_assert_eq(goblin__cw_encoded_size(m, &sz), GOBLIN_EINVAL);

    memset(m, 0, sizeof *m);
    m->type = GOBLIN__CW_JOB_STATUS;
    m->job_id = 3;
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
    b[24 + 16] = 10; /* done > total */
    cr_assert_eq(goblin__cw_decode(b, n, &l, d, why, sizeof why), GOBLIN_EFORMAT);
    free(b);

    memset(m, 0, sizeof *m);
    m->type = GOBLIN__CW_STATS_REPLY;
    m->stats.results_rejected = 17;
    m->stats.workers_quarantined = 1;
    goblin_node_worker_stats ws[2] = {{.session_id = 9, .connected = true, .threads = 2,
                                       .accepted = 100},
                                      {.session_id = 10, .quarantined = true, .rejected = 3}};
    m->workers = ws;
    m->n_workers = 2;
    b = enc(m, &n);
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
