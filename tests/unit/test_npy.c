/* tests/unit/test_npy.c - .npy header parsing (hostile input) and mapped files.
 * Expected bytes are written by hand from NumPy's format specification. */
#include <criterion/criterion.h>
#include <goblin/goblin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A v1.0 file image: magic, version, header length, dict padded to 64, '\n'. */
static size_t make_header(uint8_t *buf, const char *dict) {
    size_t dl = strlen(dict);
    size_t total = (10 + dl + 1 + 63) / 64 * 64;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)((total - 10) & 0xff);
    buf[9] = (uint8_t)((total - 10) >> 8);
    memcpy(buf + 10, dict, dl);
    memset(buf + 10 + dl, ' ', total - 10 - dl - 1);
    buf[total - 1] = '\n';
    return total;
}

static goblin_err parse(const char *dict, goblin_dtype *dt, int32_t *rank, int64_t *shape,
                        size_t *off) {
    uint8_t buf[1024];
    size_t n = make_header(buf, dict);
    goblin_errbuf msg_eb = {0};
    return goblin_npy_header_parse(buf, n, dt, rank, shape, off, &msg_eb);
}

Test(npy, parses_numpy_headers) {
    goblin_dtype dt;
    int32_t rank;
    int64_t shape[GOBLIN_MAX_RANK];
    size_t off;
    cr_assert_eq(parse("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", &dt, &rank,
                       shape, &off), GOBLIN_OK);
    cr_assert_eq(dt, GOBLIN_DTYPE_F32);
    cr_assert_eq(rank, 2);
    cr_assert_eq(shape[0], 3);
    cr_assert_eq(shape[1], 4);
    cr_assert_eq(off, 128); /* 10 + 59 + 1 bytes, padded to 64 */
    cr_assert_eq(parse("{'shape': (7,), 'fortran_order': False, 'descr': '<f8'}", &dt, &rank, shape,
                       &off), GOBLIN_OK);
    cr_assert_eq(dt, GOBLIN_DTYPE_F64);
    cr_assert_eq(rank, 1);
    cr_assert_eq(shape[0], 7);
    cr_assert_eq(parse("{'descr': '<f8', 'fortran_order': False, 'shape': ()}", &dt, &rank, shape,
                       &off), GOBLIN_OK);
    cr_assert_eq(rank, 0);
    cr_assert_eq(parse("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5)}", &dt, &rank,
                       shape, &off), GOBLIN_OK);
    cr_assert_eq(shape[0], 0);
}

Test(npy, refuses_bad_headers) {
    goblin_dtype dt;
    int32_t rank;
    int64_t shape[GOBLIN_MAX_RANK];
    size_t off;
    cr_assert_eq(parse("{'descr': '<i4', 'fortran_order': False, 'shape': (3,)}", &dt, &rank, shape, &off),
                 GOBLIN_EDTYPE);
    cr_assert_eq(parse("{'descr': '>f4', 'fortran_order': False, 'shape': (3,)}", &dt, &rank, shape, &off),
                 GOBLIN_ENOTSUP);
    cr_assert_eq(parse("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2)}", &dt, &rank, shape, &off),
                 GOBLIN_ENOTSUP);
    cr_assert_eq(parse("{'descr': '<f4', 'fortran_order': False}", &dt, &rank, shape, &off),
                 GOBLIN_EFORMAT);
    cr_assert_eq(parse("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", &dt,
                       &rank, shape, &off), GOBLIN_EFORMAT);
    cr_assert_eq(parse("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", &dt, &rank, shape, &off),
                 GOBLIN_EFORMAT);
    cr_assert_eq(parse("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
                       &dt, &rank, shape, &off), GOBLIN_EFORMAT);
    cr_assert_eq(parse("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
                       &dt, &rank, shape, &off), GOBLIN_ELIMIT);
    cr_assert_eq(parse("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", &dt,
                       &rank, shape, &off), GOBLIN_ELIMIT);
    cr_assert_eq(parse("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} junk", &dt, &rank,
                       shape, &off), GOBLIN_EFORMAT);
    cr_assert_eq(parse("{'descr': '<f4\\n', 'fortran_order': False, 'shape': (1,)}", &dt, &rank,
                       shape, &off), GOBLIN_EFORMAT);
    /* Truncated: every prefix of a good header is refused, never read past. */
    uint8_t buf[256];
    size_t n = make_header(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }");
    goblin_errbuf msg_eb = {0};
    for (size_t k = 0; k < n; k++) {
        uint8_t *cut = malloc(k ? k : 1);
        memcpy(cut, buf, k);
        cr_assert_neq(goblin_npy_header_parse(cut, k, &dt, &rank, shape, &off, &msg_eb),
                      GOBLIN_OK, "prefix of %zu bytes accepted", k);
        free(cut);
    }
    buf[6] = 9; /* unknown format version */
    cr_assert_eq(goblin_npy_header_parse(buf, n, &dt, &rank, shape, &off, &msg_eb),
                 GOBLIN_EFORMAT);
    cr_assert_eq(goblin_npy_header_parse(NULL, n, &dt, &rank, shape, &off, &msg_eb),
                 GOBLIN_EINVAL);
}

/* Random bytes never crash the parser and are (almost surely) refused. */
Test(npy, random_bytes) {
    uint8_t buf[300];
    goblin_dtype dt;
    int32_t rank;
    int64_t shape[GOBLIN_MAX_RANK];
    size_t off;
    srand(5);
    for (int it = 0; it < 20000; it++) {
        size_t n = (size_t)(rand() % (int)sizeof buf);
        for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rand();
        if (n > 10 && it % 2) {
            memcpy(buf, "\x93NUMPY\x01\x00", 8);
            buf[9] = 0;
            buf[8] = (uint8_t)(n - 10);
        }
        (void)goblin_npy_header_parse(buf, n, &dt, &rank, shape, &off, NULL);
    }
}

Test(npy, create_save_open_roundtrip) {
    char dir[] = "/tmp/goblin-npy-XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/x.npy", dir);
    double vals[6] = {1.5, -2, 3.25, 0, 1e300, -0.0};
    int64_t shape[2] = {2, 3};
    goblin_tensor t;
    cr_assert_eq(goblin_tensor_init(&t, GOBLIN_DTYPE_F64, 2, shape, vals), GOBLIN_OK);
    goblin_errbuf msg_eb = {0};
    cr_assert_eq(goblin_npy_save(path, &t, &msg_eb), GOBLIN_OK, "%s", msg_eb.message);
    /* The file is exactly what NumPy writes: 64-byte aligned header, then the data. */
    FILE *f = fopen(path, "rb");
    uint8_t head[256];
    cr_assert_eq(fread(head, 1, 256, f), 128 + 48);
    fclose(f);
    cr_assert(memcmp(head, "\x93NUMPY\x01\x00\x76\x00{'descr': '<f8', 'fortran_order': False, "
                           "'shape': (2, 3), }", 10 + 59) == 0);
    cr_assert_eq(head[127], '\n');
    cr_assert_eq(head[126], ' ');
    cr_assert(memcmp(head + 128, vals, 48) == 0);
    goblin_npy *r;
    cr_assert_eq(goblin_npy_open(path, false, &r, &msg_eb), GOBLIN_OK, "%s", msg_eb.message);
    goblin_tensor *rt = goblin_npy_tensor(r);
    cr_assert_eq(rt->dtype, GOBLIN_DTYPE_F64);
    cr_assert_eq(rt->shape[0], 2);
    cr_assert_eq(rt->shape[1], 3);
    cr_assert(memcmp(rt->data, vals, 48) == 0);
    goblin_npy_close(r);

    /* Non-contiguous (transposed) input is written in C order. */
    goblin_tensor tt = t;
    tt.shape[0] = 3; tt.shape[1] = 2; tt.strides[0] = 1; tt.strides[1] = 3;
    cr_assert_eq(goblin_npy_save(path, &tt, &msg_eb), GOBLIN_OK);
    cr_assert_eq(goblin_npy_open(path, false, &r, &msg_eb), GOBLIN_OK);
    double *d = goblin_npy_tensor(r)->data;
    double want[6] = {1.5, 0, -2, 1e300, 3.25, -0.0};
    cr_assert(memcmp(d, want, 48) == 0);
    goblin_npy_close(r);

    /* A created file is writable through the map and reads back. */
    int64_t s2[2] = {4, 5};
    goblin_npy *w;
    cr_assert_eq(goblin_npy_create(path, GOBLIN_DTYPE_F32, 2, s2, &w, &msg_eb), GOBLIN_OK);
    float *fp = goblin_npy_tensor(w)->data;
    for (int i = 0; i < 20; i++) fp[i] = (float)i * 0.5f;
    goblin_npy_close(w);
    cr_assert_eq(goblin_npy_open(path, false, &r, &msg_eb), GOBLIN_OK);
    cr_assert_eq(goblin_npy_tensor(r)->dtype, GOBLIN_DTYPE_F32);
    cr_assert_eq(((float *)goblin_npy_tensor(r)->data)[19], 9.5f);
    goblin_npy_close(r);

    /* A file whose size disagrees with its header is refused. */
    cr_assert_eq(truncate(path, 128 + 79), 0);
    cr_assert_eq(goblin_npy_open(path, false, &r, &msg_eb), GOBLIN_EFORMAT);
    cr_assert(strstr(msg_eb.message, "header says"), "%s", msg_eb.message);
    cr_assert_eq(goblin_npy_open("/nonexistent/x.npy", false, &r, &msg_eb), GOBLIN_EIO);
    int64_t bad[1] = {-1};
    cr_assert_eq(goblin_npy_create(path, GOBLIN_DTYPE_F32, 1, bad, &w, &msg_eb), GOBLIN_EINVAL);
    cr_assert_eq(goblin_npy_create(path, GOBLIN_DTYPE_I32, 1, s2, &w, &msg_eb), GOBLIN_EDTYPE);
    unlink(path);
    rmdir(dir);
}
