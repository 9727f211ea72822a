/* tests/unit/test_graph_format.c - the binary graph format: round trips and a
 * hostile decoder (truncated, corrupted, oversized, wrong versions, forward
 * references), plus "no names on the wire". (libgoblin/graph_format.c) */
#include <criterion/criterion.h>
#include <stdlib.h>
#include "testutil.h"

/* Independent CRC-32 (IEEE, bitwise) to re-seal mutated buffers. */
static uint32_t crc32_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

static void reseal(uint8_t *b, size_t n) {
    uint32_t c = crc32_bitwise(b, n - 4);
    for (int i = 0; i < 4; i++) b[n - 4 + i] = (uint8_t)(c >> (8 * i));
}

/* x [4,3] f32, a constant [3], y = sum((x + c) * x, axes=[1]) plus a formula. */
static goblin_graph *sample(void) {
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[] = {4, 3}, sc[] = {3};
    int32_t x, c, s, m, y, f;
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sx, &x);
    float cv[3] = {0.5f, -1.0f, 2.0f};
    goblin_tensor ct = gt_tensor(GOBLIN_DTYPE_F32, 1, sc, cv);
    goblin_graph_constant(g, &ct, &c);
    int32_t xc[] = {x, c};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, xc, 2, NULL, 0, &s), GOBLIN_OK);
    int32_t sx2[] = {s, x};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MUL, sx2, 2, NULL, 0, &m), GOBLIN_OK);
    int64_t ax[] = {1};
    goblin_attr at[] = {goblin_attr_ints(GOBLIN_ATTR_AXES, ax, 1)};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SUM, &m, 1, at, 1, &y), GOBLIN_OK, "%s",
                 goblin_graph_error(g));
    goblin_graph_output(g, y);
    goblin_formula *fm;
    goblin_errbuf fe;
    cr_assert_eq(goblin_formula_parse("secret_scale * exp(-x)", &fm, &fe), GOBLIN_OK, "%s",
                 fe.message);
    int32_t fin[2];
    for (int i = 0; i < 2; i++)
        fin[i] = strcmp(goblin_formula_var_name(fm, i), "x") == 0 ? x : c;
    /* secret_scale is bound to c ([3]) and x to x ([4,3]) */
    cr_assert_eq(goblin_graph_add_formula(g, fm, fin, 2, &f), GOBLIN_OK, "%s", goblin_graph_error(g));
    goblin_formula_free(fm);
    goblin_graph_output(g, f);
    return g;
}

static void eval2(const goblin_graph *g, float *y, float *f) {
    float xv[12];
    for (int i = 0; i < 12; i++) xv[i] = (float)i * 0.25f - 1.0f;
    int64_t sx[] = {4, 3}, sy[] = {4};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 2, sx, xv);
    goblin_tensor out[2] = {gt_tensor(GOBLIN_DTYPE_F32, 1, sy, y), gt_tensor(GOBLIN_DTYPE_F32, 2, sx, f)};
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_REF;
    cr_assert_eq(goblin_graph_eval(g, &p, &in, 1, out, 2), GOBLIN_OK);
}

Test(graph_format, round_trip_is_exact_and_evaluates_the_same) {
    goblin_graph *g = sample();
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin_graph_serialize(g, &buf, &len), GOBLIN_OK);
    goblin_graph *h;
    goblin_errbuf msg_eb = {0};
    cr_assert_eq(goblin_graph_deserialize(buf, len, NULL, &h, &msg_eb), GOBLIN_OK, "%s", msg_eb.message);
    uint8_t *buf2;
    size_t len2;
    cr_assert_eq(goblin_graph_serialize(h, &buf2, &len2), GOBLIN_OK);
    cr_assert_eq(len, len2);
    cr_assert_eq(memcmp(buf, buf2, len), 0, "re-encoding gives the same bytes");
    float y1[4], y2[4], f1[12], f2[12];
    eval2(g, y1, f1);
    eval2(h, y2, f2);
    /* hand check of y[0]: x row 0 = [-1, -0.75, -0.5], c = [0.5, -1, 2] */
    float expect0 = (-1 + 0.5f) * -1 + (-0.75f - 1) * -0.75f + (-0.5f + 2) * -0.5f;
    cr_assert_float_eq(y1[0], expect0, 1e-6);
    cr_assert_float_eq(f1[0], 0.5f * expf(1.0f), 1e-5);
    cr_assert_eq(memcmp(y1, y2, sizeof y1), 0);
    cr_assert_eq(memcmp(f1, f2, sizeof f1), 0);
    goblin_buffer_free(buf);
    goblin_buffer_free(buf2);
    goblin_graph_free(g);
    goblin_graph_free(h);
}

Test(graph_format, carries_no_names) {
    goblin_graph *g = sample();
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin_graph_serialize(g, &buf, &len), GOBLIN_OK);
    const char *names[] = {"secret_scale", "secret", "exp"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        size_t nl = strlen(names[k]);
        for (size_t i = 0; i + nl <= len; i++)
            cr_assert_neq(memcmp(buf + i, names[k], nl), 0, "'%s' found in the encoding", names[k]);
    }
    goblin_buffer_free(buf);
    goblin_graph_free(g);
}

Test(graph_format, every_truncation_is_rejected) {
    goblin_graph *g = sample();
    uint8_t *buf;
    size_t len;
    goblin_graph_serialize(g, &buf, &len);
    for (size_t n = 0; n < len; n++) {
        goblin_graph *h = (goblin_graph *)0x1;
        goblin_errbuf msg_eb = {0};
        goblin_err e = goblin_graph_deserialize(buf, n, NULL, &h, &msg_eb);
        cr_assert(e == GOBLIN_EFORMAT || e == GOBLIN_ELIMIT, "len %zu: %s", n, goblin_err_name(e));
        cr_assert_eq(h, (goblin_graph *)0x1, "out untouched on failure");
        cr_assert_neq(msg_eb.message[0], 0, "a reason is given");
    }
    goblin_buffer_free(buf);
    goblin_graph_free(g);
}

Test(graph_format, corrupted_bytes_are_caught_by_the_checksum) {
    goblin_graph *g = sample();
    uint8_t *buf;
    size_t len;
    goblin_graph_serialize(g, &buf, &len);
    for (size_t i = 0; i < len; i++) {
        buf[i] ^= 0x5a;
        goblin_graph *h = NULL;
        goblin_err e = goblin_graph_deserialize(buf, len, NULL, &h, NULL);
        cr_assert_neq(e, GOBLIN_OK, "flip at %zu accepted", i);
        buf[i] ^= 0x5a;
    }
    goblin_buffer_free(buf);
    goblin_graph_free(g);
}

Test(graph_format, resealed_mutations_never_crash) {
    /* Past the checksum: mutate, re-seal, decode. Either a valid graph or a clean error. */
    goblin_graph *g = sample();
    uint8_t *orig;
    size_t len;
    goblin_graph_serialize(g, &orig, &len);
    uint8_t *b = malloc(len);
    uint64_t seed = 12345;
    int accepted = 0, rejected = 0;
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(b, orig, len);
        int flips = 1 + (int)(gt_rand(&seed) * 4);
        for (int k = 0; k < flips; k++) {
            size_t pos = 8 + (size_t)(gt_rand(&seed) * (double)(len - 12)); /* keep magic/version */
            int mode = (int)(gt_rand(&seed) * 3);
            if (mode == 0) b[pos] ^= (uint8_t)(1u << (int)(gt_rand(&seed) * 8));
            else if (mode == 1) b[pos] = 0xff;
            else b[pos] = (uint8_t)(gt_rand(&seed) * 256);
        }
        reseal(b, len);
        goblin_graph *h = NULL;
        goblin_errbuf msg_eb = {0};
        goblin_err e = goblin_graph_deserialize(b, len, NULL, &h, &msg_eb);
        if (e == GOBLIN_OK) {
            accepted++;
            goblin_graph_free(h);
        } else {
            rejected++;
            cr_assert_neq(msg_eb.message[0], 0);
        }
    }
    cr_log_info("resealed mutations: %d accepted as valid graphs, %d rejected", accepted, rejected);
    cr_assert_gt(rejected, 10000);
    free(b);
    goblin_buffer_free(orig);
    goblin_graph_free(g);
}

Test(graph_format, versions_magic_and_limits) {
    goblin_graph *g = sample();
    uint8_t *buf;
    size_t len;
    goblin_graph_serialize(g, &buf, &len);
    goblin_graph *h;
    goblin_errbuf msg_eb = {0};
    uint8_t *b = malloc(len);

    memcpy(b, buf, len);
    b[0] = 'X';
    cr_assert_eq(goblin_graph_deserialize(b, len, NULL, &h, &msg_eb), GOBLIN_EFORMAT);
    memcpy(b, buf, len);
    b[4] = 2; /* format version */
    reseal(b, len);
    cr_assert_eq(goblin_graph_deserialize(b, len, NULL, &h, &msg_eb), GOBLIN_EVERSION);
    cr_assert(strstr(msg_eb.message, "format version 2"), "%s", msg_eb.message);
    memcpy(b, buf, len);
    b[8] = (uint8_t)(GOBLIN_CATALOG_VERSION + 1); /* catalogue version */
    reseal(b, len);
    cr_assert_eq(goblin_graph_deserialize(b, len, NULL, &h, &msg_eb), GOBLIN_EVERSION);
    cr_assert(strstr(msg_eb.message, "catalogue version"), "%s", msg_eb.message);

    /* node count far beyond what the bytes hold */
    memcpy(b, buf, len);
    b[12] = 0xff; b[13] = 0xff; b[14] = 0xff; b[15] = 0x7f;
    reseal(b, len);
    cr_assert_eq(goblin_graph_deserialize(b, len, NULL, &h, &msg_eb), GOBLIN_ELIMIT);

    goblin_graph_decode_limits lim;
    goblin_graph_decode_limits_default(&lim);
    lim.max_nodes = 3;
    cr_assert_eq(goblin_graph_deserialize(buf, len, &lim, &h, &msg_eb), GOBLIN_ELIMIT);
    goblin_graph_decode_limits_default(&lim);
    lim.max_const_bytes = 8; /* the constant has 12 bytes */
    cr_assert_eq(goblin_graph_deserialize(buf, len, &lim, &h, &msg_eb), GOBLIN_ELIMIT);
    goblin_graph_decode_limits_default(&lim);
    lim.max_numel = 10; /* x has 12 elements */
    cr_assert_eq(goblin_graph_deserialize(buf, len, &lim, &h, &msg_eb), GOBLIN_ELIMIT);

    cr_assert_eq(goblin_graph_deserialize(NULL, 0, NULL, &h, &msg_eb), GOBLIN_EFORMAT);
    cr_assert_eq(goblin_graph_deserialize(buf, len, NULL, NULL, &msg_eb), GOBLIN_EINVAL);
    free(b);
    goblin_buffer_free(buf);
    goblin_graph_free(g);
}

/* Hand-built encodings: a forward reference (a cycle in disguise) and a trailing byte. */
static size_t put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
    return 4;
}
static size_t put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
    return 8;
}

Test(graph_format, forward_reference_and_trailing_bytes) {
    uint8_t b[256];
    size_t n = 0;
    memcpy(b, "GBLG", 4);
    n = 4;
    b[n++] = 1; b[n++] = 0; b[n++] = 0; b[n++] = 0;
    n += put32(b + n, GOBLIN_CATALOG_VERSION);
    n += put32(b + n, 2); /* nodes */
    n += put32(b + n, 1); /* outputs */
    /* node 0: NEG of node 1 (forward) */
    b[n++] = GOBLIN_OP_NEG; b[n++] = 0; b[n++] = GOBLIN_DTYPE_F32; b[n++] = 1;
    n += put64(b + n, 3);
    n += put32(b + n, 1);
    n += put32(b + n, 1);
    b[n++] = 0;
    n += put64(b + n, 0);
    /* node 1: input f32 [3] */
    b[n++] = GOBLIN_OP_INPUT; b[n++] = 0; b[n++] = GOBLIN_DTYPE_F32; b[n++] = 1;
    n += put64(b + n, 3);
    n += put32(b + n, 0);
    b[n++] = 0;
    n += put64(b + n, 0);
    n += put32(b + n, 0);
    n += 4;
    reseal(b, n);
    goblin_graph *h;
    goblin_errbuf msg_eb = {0};
    cr_assert_eq(goblin_graph_deserialize(b, n, NULL, &h, &msg_eb), GOBLIN_EFORMAT);
    cr_assert(strstr(msg_eb.message, "not an earlier node"), "%s", msg_eb.message);
}

Test(graph_format, encoded_shape_must_match_inference) {
    goblin_graph *g;
    goblin_graph_new(&g);
    int64_t s[] = {5};
    int32_t x, y;
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, s, &x);
    goblin_graph_add(g, GOBLIN_OP_NEG, &x, 1, NULL, 0, &y);
    goblin_graph_output(g, y);
    uint8_t *buf;
    size_t len;
    goblin_graph_serialize(g, &buf, &len);
    /* the NEG node's dim sits right after its 4-byte op/dtype/rank header */
    size_t off = 20 + 4 + 8 + 4 + 1 + 8 + 4;
    cr_assert_eq(buf[off], 5);
    buf[off] = 6;
    reseal(buf, len);
    goblin_graph *h;
    goblin_errbuf msg_eb = {0};
    cr_assert_eq(goblin_graph_deserialize(buf, len, NULL, &h, &msg_eb), GOBLIN_EFORMAT);
    cr_assert(strstr(msg_eb.message, "disagree"), "%s", msg_eb.message);
    goblin_buffer_free(buf);
    goblin_graph_free(g);
}

/* The format's CRC-32 against the standard check value and a bit-at-a-time
 * reference, over every length 0..300 at every alignment 0..7 and split points. */
#include "base/crc32.h"


Test(graph_format, crc32_matches_reference) {
    cr_assert_eq(goblin__crc32(0, (const uint8_t *)"123456789", 9), 0xCBF43926u);
    uint8_t buf[320];
    uint64_t s = 12345;
    for (size_t i = 0; i < sizeof buf; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(s >> 56);
    }
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 300; n++) {
            uint32_t want = crc32_bitwise(buf + off, n);
            cr_assert_eq(goblin__crc32(0, buf + off, n), want, "off %zu n %zu", off, n);
            size_t cut = n / 3;
            cr_assert_eq(goblin__crc32(goblin__crc32(0, buf + off, cut), buf + off + cut, n - cut), want);
        }
}
