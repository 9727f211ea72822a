/* tests/unit/test_ops_shape.c - shape/movement and indexing ops (libgoblin/ops_shape.c,
 * backends/ref/ref_shape.c) against hand-derived values: strided and empty inputs,
 * f16/bool/integer dtypes, deterministic collisions, build-time and data errors. */
#include <criterion/criterion.h>
#include "testutil.h"

#define A_INT(k, v) goblin_attr_int(GOBLIN_ATTR_##k, (v))
#define A_INTS(k, ...) \
    goblin_attr_ints(GOBLIN_ATTR_##k, (const int64_t[]){__VA_ARGS__}, \
                     (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define A_NONE(k) goblin_attr_ints(GOBLIN_ATTR_##k, NULL, 0)

static const goblin_backend_kind g_backends[] = {GOBLIN_BACKEND_REF, GOBLIN_BACKEND_BLIS};

/* Run on REF, check OK, and (when built) check BLIS gives the same bytes. */
static goblin_tensor run_ok(goblin_op op, const goblin_tensor *in, int32_t n_in,
                            const goblin_attr *attrs, int32_t n_attrs) {
    goblin_tensor out;
    char msg[300];
    goblin_err e = gt_run1(op, in, n_in, attrs, n_attrs, GOBLIN_BACKEND_REF, 1, &out, msg,
                           sizeof msg);
    cr_assert_eq(e, GOBLIN_OK, "%s: %s", goblin_err_name(e), msg);
    if (goblin_backend_available(GOBLIN_BACKEND_BLIS) == GOBLIN_OK) {
        goblin_tensor o2;
        e = gt_run1(op, in, n_in, attrs, n_attrs, GOBLIN_BACKEND_BLIS, 2, &o2, msg, sizeof msg);
        cr_assert_eq(e, GOBLIN_OK, "blis: %s", msg);
        size_t bytes = (size_t)goblin_tensor_numel(&out) * goblin_dtype_size(out.dtype);
        cr_assert_eq(o2.rank, out.rank);
        cr_assert(bytes == 0 || memcmp(o2.data, out.data, bytes) == 0, "blis differs from ref");
        goblin_buffer_free(o2.data);
    }
    return out;
}

static void check_shape(const goblin_tensor *t, int32_t rank, const int64_t *shape) {
    cr_assert_eq(t->rank, rank);
    for (int32_t d = 0; d < rank; d++)
        cr_assert_eq(t->shape[d], shape[d], "dim %d: %lld vs %lld", d, (long long)t->shape[d],
                     (long long)shape[d]);
}

/* Build must fail with @p want; returns nothing, asserts the message mentions @p needle. */
static void build_fails(goblin_err want, const char *needle, goblin_op op, const goblin_tensor *in,
                        int32_t n_in, const goblin_attr *attrs, int32_t n_attrs) {
    char msg[300] = "";
    goblin_err e = gt_build1(op, in, n_in, attrs, n_attrs, NULL, msg, sizeof msg);
    cr_assert_eq(e, want, "got %s (%s), want %s", goblin_err_name(e), msg, goblin_err_name(want));
    if (needle) cr_assert(strstr(msg, needle), "message '%s' lacks '%s'", msg, needle);
}

/* Evaluation must fail with GOBLIN_EINDEX and a message holding @p needle. */
static void eval_index_fails(const char *needle, goblin_op op, const goblin_tensor *in,
                             int32_t n_in, const goblin_attr *attrs, int32_t n_attrs) {
    for (size_t b = 0; b < 2; b++) {
        if (goblin_backend_available(g_backends[b])) continue;
        goblin_tensor out;
        char msg[300] = "";
        goblin_err e = gt_run1(op, in, n_in, attrs, n_attrs, g_backends[b], 1, &out, msg,
                               sizeof msg);
        cr_assert_eq(e, GOBLIN_EINDEX, "got %s (%s)", goblin_err_name(e), msg);
        cr_assert(strstr(msg, needle), "message '%s' lacks '%s'", msg, needle);
    }
}

/* ---- movement ---------------------------------------------------------------------- */

Test(shape, reshape_reads_strided_input_in_logical_order) {
    /* x = [[0,1,2],[3,4,5]] stored transposed: buffer holds columns */
    float buf[6] = {0, 3, 1, 4, 2, 5};
    int64_t s[] = {2, 3};
    goblin_tensor x = gt_tensor(GOBLIN_DTYPE_F32, 2, s, buf);
    x.strides[0] = 1;
    x.strides[1] = 2;
    goblin_attr a = A_INTS(SHAPE, 3, -1);
    goblin_tensor y = run_ok(GOBLIN_OP_RESHAPE, &x, 1, &a, 1);
    check_shape(&y, 2, (int64_t[]){3, 2});
    for (int i = 0; i < 6; i++) cr_assert_eq(((float *)y.data)[i], (float)i);
    goblin_buffer_free(y.data);

    a = A_NONE(SHAPE); /* 1x1 -> 0-d */
    float one = 7;
    goblin_tensor x1 = gt_tensor(GOBLIN_DTYPE_F32, 2, (int64_t[]){1, 1}, &one);
    y = run_ok(GOBLIN_OP_RESHAPE, &x1, 1, &a, 1);
    cr_assert_eq(y.rank, 0);
    cr_assert_eq(*(float *)y.data, 7);
    goblin_buffer_free(y.data);
}

Test(shape, reshape_errors) {
    int64_t s[] = {2, 3};
    goblin_tensor x = gt_tensor(GOBLIN_DTYPE_F32, 2, s, NULL);
    goblin_attr a = A_INTS(SHAPE, 4, -1);
    build_fails(GOBLIN_ESHAPE, "cannot reshape [2, 3]", GOBLIN_OP_RESHAPE, &x, 1, &a, 1);
    a = A_INTS(SHAPE, -1, 2, -1);
    build_fails(GOBLIN_EINVAL, "only one", GOBLIN_OP_RESHAPE, &x, 1, &a, 1);
    a = A_INTS(SHAPE, 7);
    build_fails(GOBLIN_ESHAPE, NULL, GOBLIN_OP_RESHAPE, &x, 1, &a, 1);
    a = A_INTS(SHAPE, -3, -2);
    build_fails(GOBLIN_ERANGE, NULL, GOBLIN_OP_RESHAPE, &x, 1, &a, 1);
    build_fails(GOBLIN_EINVAL, "missing required", GOBLIN_OP_RESHAPE, &x, 1, NULL, 0);
    goblin_tensor e = gt_tensor(GOBLIN_DTYPE_F32, 2, (int64_t[]){0, 3}, NULL);
    a = A_INTS(SHAPE, 0, -1);
    build_fails(GOBLIN_ESHAPE, "ambiguous", GOBLIN_OP_RESHAPE, &e, 1, &a, 1);
}

Test(shape, permute_i16_and_errors) {
    int16_t buf[24];
    for (int i = 0; i < 24; i++) buf[i] = (int16_t)(i - 12);
    goblin_tensor x = gt_tensor(GOBLIN_DTYPE_I16, 3, (int64_t[]){2, 3, 4}, buf);
    goblin_attr a = A_INTS(PERM, -1, 0, 1);
    goblin_tensor y = run_ok(GOBLIN_OP_PERMUTE, &x, 1, &a, 1);
    check_shape(&y, 3, (int64_t[]){4, 2, 3});
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                cr_assert_eq(((int16_t *)y.data)[(k * 2 + i) * 3 + j], buf[(i * 3 + j) * 4 + k]);
    goblin_buffer_free(y.data);
    a = A_INTS(PERM, 0, 1, 1);
    build_fails(GOBLIN_EINVAL, "repeats", GOBLIN_OP_PERMUTE, &x, 1, &a, 1);
    a = A_INTS(PERM, 0, 1);
    build_fails(GOBLIN_EINVAL, "rank 3", GOBLIN_OP_PERMUTE, &x, 1, &a, 1);
    a = A_INTS(PERM, 0, 1, 3);
    build_fails(GOBLIN_ERANGE, NULL, GOBLIN_OP_PERMUTE, &x, 1, &a, 1);
}

Test(shape, expand_bool_and_errors) {
    uint8_t buf[3] = {1, 0, 1};
    goblin_tensor x = gt_tensor(GOBLIN_DTYPE_BOOL, 2, (int64_t[]){3, 1}, buf);
    goblin_attr a = A_INTS(SHAPE, 2, -1, 4);
    goblin_tensor y = run_ok(GOBLIN_OP_EXPAND, &x, 1, &a, 1);
    check_shape(&y, 3, (int64_t[]){2, 3, 4});
    for (int i = 0; i < 24; i++) cr_assert_eq(((uint8_t *)y.data)[i], buf[(i / 4) % 3]);
    goblin_buffer_free(y.data);
    a = A_INTS(SHAPE, 3, 0); /* size 1 -> 0 is allowed (torch) */
    y = run_ok(GOBLIN_OP_EXPAND, &x, 1, &a, 1);
    check_shape(&y, 2, (int64_t[]){3, 0});
    goblin_buffer_free(y.data);
    a = A_INTS(SHAPE, 6, 1);
    build_fails(GOBLIN_ESHAPE, "cannot expand dimension 0", GOBLIN_OP_EXPAND, &x, 1, &a, 1);
    a = A_INTS(SHAPE, -1, 3, 1);
    build_fails(GOBLIN_ESHAPE, "leading", GOBLIN_OP_EXPAND, &x, 1, &a, 1);
    a = A_INTS(SHAPE, 3);
    build_fails(GOBLIN_ESHAPE, "fewer", GOBLIN_OP_EXPAND, &x, 1, &a, 1);
}

Test(shape, slice_python_semantics) {
    int32_t buf[10];
    for (int i = 0; i < 10; i++) buf[i] = i * 10;
    goblin_tensor x = gt_tensor(GOBLIN_DTYPE_I32, 1, (int64_t[]){10}, buf);
    /* x[-7:100:3] = elements 3, 6, 9 */
    goblin_attr a[] = {A_INTS(STARTS, -7), A_INTS(STOPS, 100), A_INTS(STEPS, 3)};
    goblin_tensor y = run_ok(GOBLIN_OP_SLICE, &x, 1, a, 3);
    check_shape(&y, 1, (int64_t[]){3});
    cr_assert_eq(((int32_t *)y.data)[0], 30);
    cr_assert_eq(((int32_t *)y.data)[1], 60);
    cr_assert_eq(((int32_t *)y.data)[2], 90);
    goblin_buffer_free(y.data);
    /* x[-100:-8] = elements 0, 1; x[5:2] is empty */
    goblin_attr b[] = {A_INTS(AXES, -1), A_INTS(STARTS, -100), A_INTS(STOPS, -8)};
    y = run_ok(GOBLIN_OP_SLICE, &x, 1, b, 3);
    check_shape(&y, 1, (int64_t[]){2});
    cr_assert_eq(((int32_t *)y.data)[1], 10);
    goblin_buffer_free(y.data);
    goblin_attr c[] = {A_INTS(STARTS, 5), A_INTS(STOPS, 2)};
    y = run_ok(GOBLIN_OP_SLICE, &x, 1, c, 2);
    check_shape(&y, 1, (int64_t[]){0});
    goblin_buffer_free(y.data);
    goblin_attr d[] = {A_INTS(STARTS, 0), A_INTS(STOPS, 2), A_INTS(STEPS, 0)};
    build_fails(GOBLIN_ERANGE, "steps", GOBLIN_OP_SLICE, &x, 1, d, 3);
    goblin_attr e[] = {A_INTS(STARTS, 0, 1), A_INTS(STOPS, 2)};
    build_fails(GOBLIN_EINVAL, "equal lengths", GOBLIN_OP_SLICE, &x, 1, e, 2);
    goblin_attr f[] = {A_INTS(AXES, 0, -1), A_INTS(STARTS, 0, 1), A_INTS(STOPS, 2, 3)};
    build_fails(GOBLIN_EINVAL, "twice", GOBLIN_OP_SLICE, &x, 1, f, 3);
}

Test(shape, select_and_split) {
    double buf[10];
    for (int i = 0; i < 10; i++) buf[i] = i;
    goblin_tensor x = gt_tensor(GOBLIN_DTYPE_F64, 2, (int64_t[]){2, 5}, buf);
    goblin_attr a[] = {A_INT(AXIS, 1), A_INT(INDEX, -2)}; /* column 3: {3, 8} */
    goblin_tensor y = run_ok(GOBLIN_OP_SELECT, &x, 1, a, 2);
    check_shape(&y, 1, (int64_t[]){2});
    cr_assert_eq(((double *)y.data)[0], 3);
    cr_assert_eq(((double *)y.data)[1], 8);
    goblin_buffer_free(y.data);
    goblin_attr bad[] = {A_INT(AXIS, 1), A_INT(INDEX, 5)};
    build_fails(GOBLIN_ERANGE, "index 5", GOBLIN_OP_SELECT, &x, 1, bad, 2);

    /* torch.chunk(5, 4) gives sizes 2, 2, 1: chunk 2 is column 4, chunk 3 does not exist */
    goblin_attr s[] = {A_INT(AXIS, -1), A_INT(CHUNKS, 4), A_INT(INDEX, 2)};
    y = run_ok(GOBLIN_OP_SPLIT, &x, 1, s, 3);
    check_shape(&y, 2, (int64_t[]){2, 1});
    cr_assert_eq(((double *)y.data)[0], 4);
    cr_assert_eq(((double *)y.data)[1], 9);
    goblin_buffer_free(y.data);
    s[2] = A_INT(INDEX, -3); /* first chunk: columns 0, 1 */
    y = run_ok(GOBLIN_OP_SPLIT, &x, 1, s, 3);
    check_shape(&y, 2, (int64_t[]){2, 2});
    cr_assert_eq(((double *)y.data)[3], 6);
    goblin_buffer_free(y.data);
    s[2] = A_INT(INDEX, 3);
    build_fails(GOBLIN_ERANGE, "gives 3 chunks", GOBLIN_OP_SPLIT, &x, 1, s, 3);
}

Test(shape, concat_and_stack_i64_with_empty_input) {
    int64_t a[4] = {1, 2, 3, 4}, c[2] = {5, 6};
    goblin_tensor in[3] = {gt_tensor(GOBLIN_DTYPE_I64, 2, (int64_t[]){2, 2}, a),
                           gt_tensor(GOBLIN_DTYPE_I64, 2, (int64_t[]){2, 0}, NULL),
                           gt_tensor(GOBLIN_DTYPE_I64, 2, (int64_t[]){2, 1}, c)};
    goblin_attr ax = A_INT(AXIS, -1);
    goblin_tensor y = run_ok(GOBLIN_OP_CONCAT, in, 3, &ax, 1);
    check_shape(&y, 2, (int64_t[]){2, 3});
    int64_t want[6] = {1, 2, 5, 3, 4, 6};
    for (int i = 0; i < 6; i++) cr_assert_eq(((int64_t *)y.data)[i], want[i]);
    goblin_buffer_free(y.data);

    goblin_tensor st[2] = {in[0], in[0]};
    st[1].strides[0] = 1; /* the transpose [[1,3],[2,4]] */
    st[1].strides[1] = 2;
    ax = A_INT(AXIS, 2);
    y = run_ok(GOBLIN_OP_STACK, st, 2, &ax, 1);
    check_shape(&y, 3, (int64_t[]){2, 2, 2});
    int64_t want2[8] = {1, 1, 2, 3, 3, 2, 4, 4};
    for (int i = 0; i < 8; i++) cr_assert_eq(((int64_t *)y.data)[i], want2[i]);
    goblin_buffer_free(y.data);

    goblin_tensor bad[2] = {in[0], gt_tensor(GOBLIN_DTYPE_I32, 2, (int64_t[]){2, 2}, NULL)};
    build_fails(GOBLIN_EDTYPE, "insert a cast", GOBLIN_OP_CONCAT, bad, 2, NULL, 0);
    goblin_tensor bad2[2] = {in[0], in[2]};
    build_fails(GOBLIN_ESHAPE, "only axis 0", GOBLIN_OP_CONCAT, bad2, 2, NULL, 0);
    build_fails(GOBLIN_ESHAPE, "equal shapes", GOBLIN_OP_STACK, bad2, 2, NULL, 0);
    ax = A_INT(AXIS, 3);
    build_fails(GOBLIN_ERANGE, NULL, GOBLIN_OP_STACK, st, 2, &ax, 1);
}

Test(shape, pad_f16_with_crop_and_errors) {
    /* x = [[1, 2, 3]] in f16; pads (-1, 2) on the last dim, (1, 0) on the first, value -0.5 */
    uint16_t buf[3] = {0x3C00, 0x4000, 0x4200};
    goblin_tensor x = gt_tensor(GOBLIN_DTYPE_F16, 2, (int64_t[]){1, 3}, buf);
    goblin_attr a[] = {A_INTS(PADS, -1, 2, 1, 0), goblin_attr_float(GOBLIN_ATTR_VALUE, -0.5)};
    goblin_tensor y = run_ok(GOBLIN_OP_PAD, &x, 1, a, 2);
    check_shape(&y, 2, (int64_t[]){2, 4});
    uint16_t want[8] = {0xB800, 0xB800, 0xB800, 0xB800, 0x4000, 0x4200, 0xB800, 0xB800};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(((uint16_t *)y.data)[i], want[i], "%d: %04x", i, ((uint16_t *)y.data)[i]);
    goblin_buffer_free(y.data);

    goblin_attr odd = A_INTS(PADS, 1, 2, 3);
    build_fails(GOBLIN_EINVAL, "pairs", GOBLIN_OP_PAD, &x, 1, &odd, 1);
    goblin_attr crop = A_INTS(PADS, -2, -2);
    build_fails(GOBLIN_ESHAPE, "crop more", GOBLIN_OP_PAD, &x, 1, &crop, 1);
    goblin_tensor u = gt_tensor(GOBLIN_DTYPE_U8, 1, (int64_t[]){2}, NULL);
    goblin_attr big[] = {A_INTS(PADS, 1, 1), goblin_attr_float(GOBLIN_ATTR_VALUE, 256)};
    build_fails(GOBLIN_ERANGE, "does not fit", GOBLIN_OP_PAD, &u, 1, big, 2);
}

Test(shape, copy_negative_strides_and_empty) {
    double buf[6] = {0, 1, 2, 3, 4, 5};
    goblin_tensor x = gt_tensor(GOBLIN_DTYPE_F64, 2, (int64_t[]){2, 3}, buf + 5);
    x.strides[0] = -3; /* x = buf reversed: [[5,4,3],[2,1,0]] */
    x.strides[1] = -1;
    goblin_tensor y = run_ok(GOBLIN_OP_COPY, &x, 1, NULL, 0);
    for (int i = 0; i < 6; i++) cr_assert_eq(((double *)y.data)[i], 5 - i);
    goblin_buffer_free(y.data);
    goblin_tensor e = gt_tensor(GOBLIN_DTYPE_BOOL, 3, (int64_t[]){2, 0, 3}, NULL);
    goblin_attr p = A_INTS(PERM, 2, 0, 1);
    y = run_ok(GOBLIN_OP_PERMUTE, &e, 1, &p, 1);
    check_shape(&y, 3, (int64_t[]){3, 2, 0});
    goblin_buffer_free(y.data);
}

/* ---- indexing ---------------------------------------------------------------------- */

Test(indexing, gather_and_index_errors) {
    float x[6] = {10, 11, 12, 20, 21, 22}; /* [2, 3] */
    int32_t idx[4] = {2, 0, 1, 1};          /* [2, 2] along axis 1 */
    goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_F32, 2, (int64_t[]){2, 3}, x),
                           gt_tensor(GOBLIN_DTYPE_I32, 2, (int64_t[]){2, 2}, idx)};
    goblin_attr ax = A_INT(AXIS, 1);
    goblin_tensor y = run_ok(GOBLIN_OP_GATHER, in, 2, &ax, 1);
    float want[4] = {12, 10, 21, 21};
    for (int i = 0; i < 4; i++) cr_assert_eq(((float *)y.data)[i], want[i]);
    goblin_buffer_free(y.data);
    idx[3] = 3;
    eval_index_fails("index 3 at position [1, 1]", GOBLIN_OP_GATHER, in, 2, &ax, 1);
    idx[3] = 0;
    idx[1] = -1;
    eval_index_fails("index -1 at position [0, 1]", GOBLIN_OP_GATHER, in, 2, &ax, 1);
    in[1].dtype = GOBLIN_DTYPE_I16;
    build_fails(GOBLIN_EDTYPE, "i32 or i64", GOBLIN_OP_GATHER, in, 2, &ax, 1);
}

Test(indexing, scatter_last_write_wins_and_scatter_add_sums) {
    double x[3] = {1, 2, 3};
    int64_t idx[4] = {1, 1, 0, 1};
    double src[4] = {10, 20, 30, 40};
    goblin_tensor in[3] = {gt_tensor(GOBLIN_DTYPE_F64, 1, (int64_t[]){3}, x),
                           gt_tensor(GOBLIN_DTYPE_I64, 1, (int64_t[]){4}, idx),
                           gt_tensor(GOBLIN_DTYPE_F64, 1, (int64_t[]){4}, src)};
    goblin_tensor y = run_ok(GOBLIN_OP_SCATTER, in, 3, NULL, 0);
    cr_assert_eq(((double *)y.data)[0], 30);
    cr_assert_eq(((double *)y.data)[1], 40); /* writes 10, 20, 40: the last wins */
    cr_assert_eq(((double *)y.data)[2], 3);
    goblin_buffer_free(y.data);
    y = run_ok(GOBLIN_OP_SCATTER_ADD, in, 3, NULL, 0);
    cr_assert_eq(((double *)y.data)[0], 31);
    cr_assert_eq(((double *)y.data)[1], 72);
    cr_assert_eq(((double *)y.data)[2], 3);
    goblin_buffer_free(y.data);
    idx[2] = 3;
    eval_index_fails("index 3 at position [2]", GOBLIN_OP_SCATTER, in, 3, NULL, 0);
    eval_index_fails("size 3", GOBLIN_OP_SCATTER_ADD, in, 3, NULL, 0);
}

Test(indexing, scatter_add_wraps_ints_ors_bools_and_rounds_f16_once) {
    int8_t x8[1] = {100};
    int64_t idx[3] = {0, 0, 0};
    int8_t s8[3] = {100, 100, -50};
    goblin_tensor in[3] = {gt_tensor(GOBLIN_DTYPE_I8, 1, (int64_t[]){1}, x8),
                           gt_tensor(GOBLIN_DTYPE_I64, 1, (int64_t[]){3}, idx),
                           gt_tensor(GOBLIN_DTYPE_I8, 1, (int64_t[]){3}, s8)};
    goblin_tensor y = run_ok(GOBLIN_OP_SCATTER_ADD, in, 3, NULL, 0);
    cr_assert_eq(((int8_t *)y.data)[0], (int8_t)(250 - 256)); /* 250 wraps to -6 */
    goblin_buffer_free(y.data);

    uint8_t xb[1] = {0}, sb[3] = {0, 1, 0};
    in[0] = gt_tensor(GOBLIN_DTYPE_BOOL, 1, (int64_t[]){1}, xb);
    in[2] = gt_tensor(GOBLIN_DTYPE_BOOL, 1, (int64_t[]){3}, sb);
    y = run_ok(GOBLIN_OP_SCATTER_ADD, in, 3, NULL, 0);
    cr_assert_eq(((uint8_t *)y.data)[0], 1);
    goblin_buffer_free(y.data);

    /* 2048 + 1 + 1 + 1 in f16: adding in f16 would stay at 2048 (2049 ties to even);
     * the f32 accumulator gives 2051, rounded once to 2052 (0x6802). */
    uint16_t xh[1] = {0x6800}, sh[3] = {0x3C00, 0x3C00, 0x3C00};
    in[0] = gt_tensor(GOBLIN_DTYPE_F16, 1, (int64_t[]){1}, xh);
    in[2] = gt_tensor(GOBLIN_DTYPE_F16, 1, (int64_t[]){3}, sh);
    y = run_ok(GOBLIN_OP_SCATTER_ADD, in, 3, NULL, 0);
    cr_assert_eq(((uint16_t *)y.data)[0], 0x6802, "%04x", ((uint16_t *)y.data)[0]);
    goblin_buffer_free(y.data);
}

Test(indexing, index_select_and_embedding) {
    int16_t x[6] = {1, 2, 3, 4, 5, 6}; /* [3, 2] */
    int64_t idx[3] = {2, 0, 2};
    goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_I16, 2, (int64_t[]){3, 2}, x),
                           gt_tensor(GOBLIN_DTYPE_I64, 1, (int64_t[]){3}, idx)};
    goblin_tensor y = run_ok(GOBLIN_OP_INDEX_SELECT, in, 2, NULL, 0);
    check_shape(&y, 2, (int64_t[]){3, 2});
    int16_t want[6] = {5, 6, 1, 2, 5, 6};
    for (int i = 0; i < 6; i++) cr_assert_eq(((int16_t *)y.data)[i], want[i]);
    goblin_buffer_free(y.data);
    y = run_ok(GOBLIN_OP_EMBEDDING, in, 2, NULL, 0); /* same rows as index_select on axis 0 */
    for (int i = 0; i < 6; i++) cr_assert_eq(((int16_t *)y.data)[i], want[i]);
    goblin_buffer_free(y.data);
    idx[1] = -1; /* torch rejects negative indices here */
    eval_index_fails("index -1 at position [1]", GOBLIN_OP_INDEX_SELECT, in, 2, NULL, 0);
    eval_index_fails("index -1 at position [1]", GOBLIN_OP_EMBEDDING, in, 2, NULL, 0);
    goblin_tensor w3 = gt_tensor(GOBLIN_DTYPE_I16, 3, (int64_t[]){3, 2, 1}, NULL);
    goblin_tensor bad[2] = {w3, in[1]};
    build_fails(GOBLIN_ESHAPE, "2-d", GOBLIN_OP_EMBEDDING, bad, 2, NULL, 0);
}

Test(indexing, index_put_negative_broadcast_accumulate) {
    float x[6] = {0, 0, 0, 0, 0, 0}; /* [3, 2] */
    int64_t idx[3] = {-1, 0, 2};       /* row 2 twice */
    float v[2] = {1, 10};              /* broadcast to [3, 2] */
    goblin_tensor in[3] = {gt_tensor(GOBLIN_DTYPE_F32, 2, (int64_t[]){3, 2}, x),
                           gt_tensor(GOBLIN_DTYPE_I64, 1, (int64_t[]){3}, idx),
                           gt_tensor(GOBLIN_DTYPE_F32, 1, (int64_t[]){2}, v)};
    goblin_attr acc = A_INT(ACCUMULATE, 1);
    goblin_tensor y = run_ok(GOBLIN_OP_INDEX_PUT, in, 3, &acc, 1);
    float want[6] = {1, 10, 0, 0, 2, 20};
    for (int i = 0; i < 6; i++) cr_assert_eq(((float *)y.data)[i], want[i]);
    goblin_buffer_free(y.data);
    /* values [3, 1] without accumulate: the last duplicate (row 2 <- 3) wins */
    float v2[3] = {7, 8, 9};
    in[2] = gt_tensor(GOBLIN_DTYPE_F32, 2, (int64_t[]){3, 1}, v2);
    y = run_ok(GOBLIN_OP_INDEX_PUT, in, 3, NULL, 0);
    float want2[6] = {8, 8, 0, 0, 9, 9};
    for (int i = 0; i < 6; i++) cr_assert_eq(((float *)y.data)[i], want2[i]);
    goblin_buffer_free(y.data);
    idx[0] = -4;
    eval_index_fails("index -4 at position [0]", GOBLIN_OP_INDEX_PUT, in, 3, NULL, 0);
    in[2] = gt_tensor(GOBLIN_DTYPE_F32, 1, (int64_t[]){3}, v2);
    build_fails(GOBLIN_ESHAPE, "do not broadcast", GOBLIN_OP_INDEX_PUT, in, 3, NULL, 0);
}

/* ---- catalogue entries ------------------------------------------------------------- */

Test(shape, catalogue_entries_and_contracts) {
    goblin_op ops[] = {GOBLIN_OP_RESHAPE, GOBLIN_OP_PERMUTE, GOBLIN_OP_EXPAND,
                       GOBLIN_OP_SLICE, GOBLIN_OP_SELECT, GOBLIN_OP_SPLIT,
                       GOBLIN_OP_CONCAT, GOBLIN_OP_STACK, GOBLIN_OP_PAD,
                       GOBLIN_OP_COPY, GOBLIN_OP_GATHER, GOBLIN_OP_SCATTER,
                       GOBLIN_OP_SCATTER_ADD, GOBLIN_OP_INDEX_SELECT, GOBLIN_OP_EMBEDDING,
                       GOBLIN_OP_INDEX_PUT};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        goblin_op_info info;
        cr_assert_eq(goblin_op_get_info(ops[i], &info), GOBLIN_OK, "%s", goblin_op_name(ops[i]));
        cr_assert(info.summary[0] && info.contract[0]);
        cr_assert_eq(info.dtypes, GOBLIN_DTMASK_ALL);
        double rel, abs_tol;
        cr_assert_eq(goblin_op_contract(ops[i], GOBLIN_DTYPE_F32, 4, &rel, &abs_tol), GOBLIN_OK);
        bool accum = ops[i] == GOBLIN_OP_SCATTER_ADD || ops[i] == GOBLIN_OP_INDEX_PUT;
        double u = 0x1p-24;
        cr_assert_eq(rel, accum ? 4 * u / (1 - 4 * u) : 0.0, "%s", info.name);
        cr_assert_eq(abs_tol, 0.0);
    }
    double rel, abs_tol;
    goblin_op_contract(GOBLIN_OP_SCATTER_ADD, GOBLIN_DTYPE_I32, 100, &rel, &abs_tol);
    cr_assert_eq(rel, 0.0);
}
