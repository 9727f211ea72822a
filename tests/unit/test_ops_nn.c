/* tests/unit/test_ops_nn.c - matmul, conv2d, pooling and attention
 * (libgoblin/ops_nn.c, backends/ref/ref_nn.c, backends/blis/blis_gemm.c):
 * hand-derived values, integer wraparound, NaN and empty inputs, build-time
 * errors, the BLIS kernels against an independent long-double reference under
 * the ops' numeric contracts (transposes, batch broadcasting, alpha/beta,
 * strided and broadcast-stride inputs, groups, dilation), and BLIS results that
 * do not depend on the thread count. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include "backends/kernel_util.h"
#include "testutil.h"

#define A_INT(k, v) goblin_attr_int(GOBLIN_ATTR_##k, (v))
#define A_FLT(k, v) goblin_attr_float(GOBLIN_ATTR_##k, (v))
#define A_INTS(k, ...)                                                  \
    goblin_attr_ints(GOBLIN_ATTR_##k, (const int64_t[]){__VA_ARGS__},   \
                     (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define SHAPE(...) (const int64_t[]){__VA_ARGS__}
#define NA(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

static bool have_blis(void) { return goblin_backend_available(GOBLIN_BACKEND_BLIS) == GOBLIN_OK; }

static goblin_tensor run_on(goblin_backend_kind be, int32_t threads, goblin_op op,
                            const goblin_tensor *in, int32_t n_in, const goblin_attr *attrs,
                            int32_t n_attrs) {
    goblin_tensor out;
    char msg[300];
    goblin_err e = gt_run1(op, in, n_in, attrs, n_attrs, be, threads, &out, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_OK, "%s on %s: %s: %s", goblin_op_name(op), goblin_backend_name(be),
                 goblin_err_name(e), msg);
    return out;
}

static void build_fails(goblin_err want, const char *needle, goblin_op op, const goblin_tensor *in,
                        int32_t n_in, const goblin_attr *attrs, int32_t n_attrs) {
    char msg[300];
    goblin_err e = gt_build1(op, in, n_in, attrs, n_attrs, NULL, msg, sizeof msg);
    cr_assert_eq(e, want, "%s: want %s got %s (%s)", goblin_op_name(op), goblin_err_name(want),
                 goblin_err_name(e), msg);
    if (needle) cr_assert(strstr(msg, needle), "message '%s' lacks '%s'", msg, needle);
}

static void check_shape(const goblin_tensor *t, int32_t rank, const int64_t *shape) {
    cr_assert_eq(t->rank, rank, "rank %d vs %d", t->rank, rank);
    for (int32_t d = 0; d < rank; d++)
        cr_assert_eq(t->shape[d], shape[d], "dim %d: %lld vs %lld", d, (long long)t->shape[d],
                     (long long)shape[d]);
}

/* Every element of @p t (any dtype, read as double) against @p want, within rel/abs. */
static void check_vals(const goblin_tensor *t, const double *want, int64_t n, double rel,
                       double abs_tol) {
    cr_assert_eq(goblin_tensor_numel(t), n, "numel %lld vs %lld", (long long)goblin_tensor_numel(t),
                 (long long)n);
    for (int64_t i = 0; i < n; i++) {
        double g = goblin__load_f64(t->dtype, t->data, i);
        cr_assert(gt_close(g, want[i], rel, abs_tol), "%s element %lld: got %.17g want %.17g",
                  goblin_dtype_name(t->dtype), (long long)i, g, want[i]);
    }
}

/* A tensor of dtype dt holding @p vals (converted; exact for the small integers used). */
static goblin_tensor from_vals(goblin_dtype dt, int32_t rank, const int64_t *shape,
                               const double *vals, void *buf) {
    goblin_tensor t = gt_tensor(dt, rank, shape, buf);
    int64_t n = goblin_tensor_numel(&t);
    for (int64_t i = 0; i < n; i++) goblin__store_f64(dt, buf, i, vals[i]);
    return t;
}

static const goblin_dtype FLOATS[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64, GOBLIN_DTYPE_F16,
                                      GOBLIN_DTYPE_BF16};

/* ---- MATMUL: hand-derived values -------------------------------------------- */

static void backends_each(void (*fn)(goblin_backend_kind be, int32_t threads)) {
    fn(GOBLIN_BACKEND_REF, 1);
    if (have_blis()) {
        fn(GOBLIN_BACKEND_BLIS, 1);
        fn(GOBLIN_BACKEND_BLIS, 3);
    }
}

static void mm_basic(goblin_backend_kind be, int32_t threads) {
    static const double A[] = {1, 2, 3, 4, 5, 6}, At[] = {1, 4, 2, 5, 3, 6};
    static const double B[] = {7, 8, 9, 10, 11, 12}, Bt[] = {7, 9, 11, 8, 10, 12};
    static const double want[] = {58, 64, 139, 154};
    const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64, GOBLIN_DTYPE_F16,
                                GOBLIN_DTYPE_BF16, GOBLIN_DTYPE_I32, GOBLIN_DTYPE_I64,
                                GOBLIN_DTYPE_I16};
    for (int d = 0; d < NA(dts); d++) {
        char ba[64], bb[64];
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                goblin_tensor in[2] = {
                    from_vals(dts[d], 2, ta ? SHAPE(3, 2) : SHAPE(2, 3), ta ? At : A, ba),
                    from_vals(dts[d], 2, tb ? SHAPE(2, 3) : SHAPE(3, 2), tb ? Bt : B, bb)};
                goblin_attr at[] = {A_INT(TRANS_A, ta), A_INT(TRANS_B, tb)};
                goblin_tensor o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 2, at, 2);
                check_shape(&o, 2, SHAPE(2, 2));
                cr_assert_eq(o.dtype, dts[d]);
                check_vals(&o, want, 4, 0, 0);
                goblin_buffer_free(o.data);
            }
    }
}
Test(nn_matmul, hand_values_all_dtypes_and_transposes) { backends_each(mm_basic); }

static void mm_alpha_beta(goblin_backend_kind be, int32_t threads) {
    static const double A[] = {1, 2, 3, 4, 5, 6}, B[] = {7, 8, 9, 10, 11, 12};
    for (int d = 0; d < 4; d++) {
        char ba[64], bb[64], bc[64];
        /* c = [10, 20] broadcasts over rows: out = 2 * AB - c */
        goblin_tensor in[3] = {from_vals(FLOATS[d], 2, SHAPE(2, 3), A, ba),
                               from_vals(FLOATS[d], 2, SHAPE(3, 2), B, bb),
                               from_vals(FLOATS[d], 1, SHAPE(2), (const double[]){10, 20}, bc)};
        goblin_attr at[] = {A_FLT(ALPHA, 2), A_FLT(BETA, -1)};
        goblin_tensor o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 3, at, 2);
        check_vals(&o, (const double[]){106, 108, 268, 288}, 4, 0, 0);
        goblin_buffer_free(o.data);
        /* default beta = 1 */
        o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 3, NULL, 0);
        check_vals(&o, (const double[]){68, 84, 149, 174}, 4, 0, 0);
        goblin_buffer_free(o.data);
        /* beta = 0 ignores c entirely, NaN included (torch.addmm) */
        in[2] = from_vals(FLOATS[d], 1, SHAPE(2), (const double[]){NAN, INFINITY}, bc);
        goblin_attr z[] = {A_FLT(BETA, 0)};
        o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 3, z, 1);
        check_vals(&o, (const double[]){58, 64, 139, 154}, 4, 0, 0);
        goblin_buffer_free(o.data);
    }
}
Test(nn_matmul, alpha_beta_and_bias) { backends_each(mm_alpha_beta); }

static void mm_vectors(goblin_backend_kind be, int32_t threads) {
    static const double M[] = {1, 2, 3, 4, 5, 6}; /* [2, 3] */
    for (int d = 0; d < 4; d++) {
        char bm[64], bv[64], bw[64];
        goblin_tensor m = from_vals(FLOATS[d], 2, SHAPE(2, 3), M, bm);
        goblin_tensor v3 = from_vals(FLOATS[d], 1, SHAPE(3), (const double[]){1, 0, -1}, bv);
        goblin_tensor v2 = from_vals(FLOATS[d], 1, SHAPE(2), (const double[]){2, 1}, bw);
        goblin_tensor in[2] = {m, v3}; /* [2,3] @ [3] -> [2] */
        goblin_tensor o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
        check_shape(&o, 1, SHAPE(2));
        check_vals(&o, (const double[]){-2, -2}, 2, 0, 0);
        goblin_buffer_free(o.data);
        in[0] = v2; /* [2] @ [2,3] -> [3] */
        in[1] = m;
        o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
        check_shape(&o, 1, SHAPE(3));
        check_vals(&o, (const double[]){6, 9, 12}, 3, 0, 0);
        goblin_buffer_free(o.data);
        in[0] = v3; /* [3] @ [3] -> scalar; trans flags are no-ops on 1-D */
        in[1] = v3;
        goblin_attr at[] = {A_INT(TRANS_A, 1), A_INT(TRANS_B, 1)};
        o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 2, at, 2);
        check_shape(&o, 0, NULL);
        check_vals(&o, (const double[]){2}, 1, 0, 0);
        goblin_buffer_free(o.data);
        /* [3] @ [2, 3, 2] -> [2, 2] (the vector broadcasts over the batch) */
        static const double B3[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
        char bb[128];
        in[0] = v3;
        in[1] = from_vals(FLOATS[d], 3, SHAPE(2, 3, 2), B3, bb);
        o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
        check_shape(&o, 2, SHAPE(2, 2));
        check_vals(&o, (const double[]){-4, -4, -4, -4}, 4, 0, 0);
        goblin_buffer_free(o.data);
    }
}
Test(nn_matmul, one_dimensional_operands) { backends_each(mm_vectors); }

static void mm_batch(goblin_backend_kind be, int32_t threads) {
    /* a [2, 1, 1, 2] @ b [3, 2, 1] -> [2, 3, 1, 1]: out[i, j] = a_i . b_j */
    static const double A[] = {1, 2, 3, 4};
    static const double B[] = {1, 0, 0, 1, 1, 1};
    char ba[64], bb[64];
    goblin_tensor in[2] = {from_vals(GOBLIN_DTYPE_F32, 4, SHAPE(2, 1, 1, 2), A, ba),
                           from_vals(GOBLIN_DTYPE_F32, 3, SHAPE(3, 2, 1), B, bb)};
    goblin_tensor o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
    check_shape(&o, 4, SHAPE(2, 3, 1, 1));
    check_vals(&o, (const double[]){1, 2, 3, 3, 4, 7}, 6, 0, 0);
    goblin_buffer_free(o.data);
}
Test(nn_matmul, batch_broadcasting) { backends_each(mm_batch); }

static void mm_empty(goblin_backend_kind be, int32_t threads) {
    char ba[8], bb[8], bc[64];
    /* K = 0: an empty sum; with c it is beta * c */
    goblin_tensor in[3] = {gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(2, 0), ba),
                           gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(0, 3), bb),
                           from_vals(GOBLIN_DTYPE_F32, 1, SHAPE(3), (const double[]){1, 2, 3}, bc)};
    goblin_tensor o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
    check_shape(&o, 2, SHAPE(2, 3));
    check_vals(&o, (const double[]){0, 0, 0, 0, 0, 0}, 6, 0, 0);
    goblin_buffer_free(o.data);
    goblin_attr at[] = {A_FLT(BETA, 2)};
    o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 3, at, 1);
    check_vals(&o, (const double[]){2, 4, 6, 2, 4, 6}, 6, 0, 0);
    goblin_buffer_free(o.data);
    /* an empty batch and an empty M */
    in[0] = gt_tensor(GOBLIN_DTYPE_F64, 3, SHAPE(0, 2, 3), ba);
    in[1] = gt_tensor(GOBLIN_DTYPE_F64, 2, SHAPE(3, 4), bb);
    o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
    check_shape(&o, 3, SHAPE(0, 2, 4));
    goblin_buffer_free(o.data);
    in[0] = gt_tensor(GOBLIN_DTYPE_F64, 2, SHAPE(0, 3), ba);
    o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
    check_shape(&o, 2, SHAPE(0, 4));
    goblin_buffer_free(o.data);
}
Test(nn_matmul, empty_operands) { backends_each(mm_empty); }

static void mm_nan(goblin_backend_kind be, int32_t threads) {
    char ba[64], bb[64];
    goblin_tensor in[2] = {
        from_vals(GOBLIN_DTYPE_F32, 2, SHAPE(2, 2), (const double[]){NAN, 1, 1, 1}, ba),
        from_vals(GOBLIN_DTYPE_F32, 2, SHAPE(2, 2), (const double[]){1, 2, 3, INFINITY}, bb)};
    goblin_tensor o = run_on(be, threads, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
    check_vals(&o, (const double[]){NAN, NAN, 4, INFINITY}, 4, 0, 0);
    goblin_buffer_free(o.data);
}
Test(nn_matmul, nan_and_inf_propagate) { backends_each(mm_nan); }

Test(nn_matmul, integer_wraparound) {
    goblin_backend_kind bes[2] = {GOBLIN_BACKEND_REF, GOBLIN_BACKEND_BLIS};
    for (int b = 0; b < (have_blis() ? 2 : 1); b++) {
        int32_t a32[2] = {INT32_MAX, 1}, b32[2] = {1, 1}, c32[1] = {5};
        goblin_tensor in[3] = {gt_tensor(GOBLIN_DTYPE_I32, 2, SHAPE(1, 2), a32),
                               gt_tensor(GOBLIN_DTYPE_I32, 2, SHAPE(2, 1), b32),
                               gt_tensor(GOBLIN_DTYPE_I32, 0, NULL, c32)};
        goblin_tensor o = run_on(bes[b], 2, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
        cr_assert_eq(((int32_t *)o.data)[0], INT32_MIN);
        goblin_buffer_free(o.data);
        /* (2^16)^2 = 2^32 wraps to 0; alpha 3, beta -2 with c = 5: 0 * 3 - 10 */
        a32[0] = 65536;
        b32[0] = 65536;
        a32[1] = 0;
        goblin_attr at[] = {A_FLT(ALPHA, 3), A_FLT(BETA, -2)};
        o = run_on(bes[b], 2, GOBLIN_OP_MATMUL, in, 3, at, 2);
        cr_assert_eq(((int32_t *)o.data)[0], -10);
        goblin_buffer_free(o.data);
        int8_t a8[2] = {100, 100}, b8[2] = {2, 1};
        in[0] = gt_tensor(GOBLIN_DTYPE_I8, 1, SHAPE(2), a8);
        in[1] = gt_tensor(GOBLIN_DTYPE_I8, 1, SHAPE(2), b8);
        o = run_on(bes[b], 2, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
        cr_assert_eq(((int8_t *)o.data)[0], (int8_t)(300 - 256)); /* 300 mod 256 = 44 */
        goblin_buffer_free(o.data);
        int64_t a64[1] = {INT64_MAX}, b64[1] = {2};
        in[0] = gt_tensor(GOBLIN_DTYPE_I64, 1, SHAPE(1), a64);
        in[1] = gt_tensor(GOBLIN_DTYPE_I64, 1, SHAPE(1), b64);
        o = run_on(bes[b], 2, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
        cr_assert_eq(((int64_t *)o.data)[0], -2);
        goblin_buffer_free(o.data);
    }
}

Test(nn_matmul, build_errors) {
    char buf[8];
    goblin_tensor a = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(2, 3), buf);
    goblin_tensor b = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(4, 5), buf);
    goblin_tensor in[3] = {a, b};
    build_fails(GOBLIN_ESHAPE, "inner dimensions", GOBLIN_OP_MATMUL, in, 2, NULL, 0);
    in[1] = gt_tensor(GOBLIN_DTYPE_F32, 0, NULL, buf);
    build_fails(GOBLIN_ESHAPE, "rank", GOBLIN_OP_MATMUL, in, 2, NULL, 0);
    in[1] = gt_tensor(GOBLIN_DTYPE_F64, 2, SHAPE(3, 5), buf);
    build_fails(GOBLIN_EDTYPE, "cast", GOBLIN_OP_MATMUL, in, 2, NULL, 0);
    in[0] = gt_tensor(GOBLIN_DTYPE_BOOL, 2, SHAPE(2, 3), buf);
    in[1] = gt_tensor(GOBLIN_DTYPE_BOOL, 2, SHAPE(3, 5), buf);
    build_fails(GOBLIN_EDTYPE, NULL, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
    /* batch dims that do not broadcast */
    in[0] = gt_tensor(GOBLIN_DTYPE_F32, 3, SHAPE(2, 2, 3), buf);
    in[1] = gt_tensor(GOBLIN_DTYPE_F32, 3, SHAPE(3, 3, 5), buf);
    build_fails(GOBLIN_ESHAPE, "broadcast", GOBLIN_OP_MATMUL, in, 2, NULL, 0);
    /* c must broadcast to the result without growing it */
    in[0] = a;
    in[1] = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(3, 5), buf);
    in[2] = gt_tensor(GOBLIN_DTYPE_F32, 3, SHAPE(2, 2, 5), buf);
    build_fails(GOBLIN_ESHAPE, "c [2, 2, 5]", GOBLIN_OP_MATMUL, in, 3, NULL, 0);
    in[2] = gt_tensor(GOBLIN_DTYPE_F32, 1, SHAPE(4), buf);
    build_fails(GOBLIN_ESHAPE, NULL, GOBLIN_OP_MATMUL, in, 3, NULL, 0);
    /* transposing makes the shapes fit, so this one builds */
    in[1] = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(5, 3), buf);
    goblin_attr tb[] = {A_INT(TRANS_B, 1)};
    cr_assert_eq(gt_build1(GOBLIN_OP_MATMUL, in, 2, tb, 1, NULL, NULL, 0), GOBLIN_OK);
    goblin_attr bad[] = {A_INT(TRANS_A, 2)};
    build_fails(GOBLIN_ERANGE, "trans_a", GOBLIN_OP_MATMUL, in, 2, bad, 1);
    goblin_attr nanalpha[] = {A_FLT(ALPHA, NAN)};
    build_fails(GOBLIN_ERANGE, "alpha", GOBLIN_OP_MATMUL, in, 2, nanalpha, 1);
    goblin_attr other[] = {A_INTS(KERNEL, 2)};
    build_fails(GOBLIN_EINVAL, "kernel", GOBLIN_OP_MATMUL, in, 2, other, 1);
    /* integer matmul needs integral alpha/beta */
    in[0] = gt_tensor(GOBLIN_DTYPE_I32, 2, SHAPE(2, 3), buf);
    in[1] = gt_tensor(GOBLIN_DTYPE_I32, 2, SHAPE(3, 5), buf);
    goblin_attr half[] = {A_FLT(ALPHA, 0.5)};
    build_fails(GOBLIN_EINVAL, "integral", GOBLIN_OP_MATMUL, in, 2, half, 1);
    goblin_tensor info;
    goblin_attr two[] = {A_FLT(ALPHA, 2)};
    cr_assert_eq(gt_build1(GOBLIN_OP_MATMUL, in, 2, two, 1, &info, NULL, 0), GOBLIN_OK);
    check_shape(&info, 2, SHAPE(2, 5));
}

Test(nn_matmul, contract_values) {
    double rel, ab;
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F32, 100, &rel, &ab), GOBLIN_OK);
    double u = 0x1p-24;
    cr_assert(fabs(rel - 102 * u / (1 - 102 * u)) < 1e-20, "rel %g", rel);
    cr_assert(ab > 0 && ab < 1e-40);
    goblin_op_contract(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F16, 100, &rel, &ab);
    cr_assert(fabs(rel - (102 * u / (1 - 102 * u) + 0x1p-11)) < 1e-15, "f16 rel %g", rel);
    goblin_op_contract(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_F64, 10, &rel, &ab);
    cr_assert(fabs(rel - 12 * 0x1p-53 / (1 - 12 * 0x1p-53)) < 1e-30);
    goblin_op_contract(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_I64, 10, &rel, &ab);
    cr_assert(rel == 0 && ab == 0);
    goblin_op_contract(GOBLIN_OP_CONV2D, GOBLIN_DTYPE_F32, 27, &rel, &ab);
    cr_assert(fabs(rel - 28 * u / (1 - 28 * u)) < 1e-20);
    goblin_op_contract(GOBLIN_OP_MAX_POOL2D, GOBLIN_DTYPE_F32, 9, &rel, &ab);
    cr_assert(rel == 0 && ab == 0);
    /* no finite bound once k u >= 1 */
    goblin_op_contract(GOBLIN_OP_MATMUL, GOBLIN_DTYPE_BF16, (int64_t)1 << 25, &rel, &ab);
    cr_assert(isinf(rel));
}

/* ---- MATMUL: BLIS against an independent reference ---------------------------- */

/* Random data of dtype dt laid out with @p strides (NULL: contiguous); every byte of
 * the buffer holds a value so gaps are harmless. */
typedef struct tdata {
    goblin_tensor t;
    void *buf;
} tdata;

static tdata make(goblin_dtype dt, int32_t rank, const int64_t *shape, const int64_t *strides,
                  uint64_t *seed) {
    tdata d;
    d.t = gt_tensor(dt, rank, shape, NULL);
    int64_t span = 1;
    for (int32_t i = 0; i < rank; i++) {
        if (strides) d.t.strides[i] = strides[i];
        if (shape[i] == 0) span = 0;
    }
    if (span) {
        for (int32_t i = 0; i < rank; i++) span += (shape[i] - 1) * d.t.strides[i];
    }
    int64_t n = span > 0 ? span : 1;
    d.buf = malloc((size_t)n * goblin_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) goblin__store_f64(dt, d.buf, i, 2 * gt_rand(seed) - 1);
    d.t.data = d.buf;
    return d;
}

static long double at(const goblin_tensor *t, const int64_t *idx) {
    int64_t off = 0;
    for (int32_t d = 0; d < t->rank; d++) off += idx[d] * t->strides[d];
    return goblin__load_f64(t->dtype, t->data, off);
}

/* The exact product (long double) and the contract's scale, element by element of out. */
static void mm_exact(const goblin_tensor *a, const goblin_tensor *b, const goblin_tensor *c,
                     bool ta, bool tb, double alpha, double beta, const goblin_tensor *out,
                     long double *exact, long double *scale, int64_t *kout) {
    int32_t orank = out->rank;
    bool a1 = a->rank == 1, b1 = b->rank == 1;
    int32_t br = orank - !a1 - !b1;
    int64_t K = a1 ? a->shape[0] : (ta ? a->shape[a->rank - 2] : a->shape[a->rank - 1]);
    *kout = K;
    int64_t n = goblin_tensor_numel(out), idx[GOBLIN_MAX_RANK] = {0};
    for (int64_t e = 0; e < n; e++) {
        int64_t i = a1 ? 0 : idx[br], j = b1 ? 0 : idx[orank - 1];
        long double s = 0, sa = 0;
        for (int64_t p = 0; p < K; p++) {
            int64_t ai[GOBLIN_MAX_RANK], bi[GOBLIN_MAX_RANK];
            if (a1) {
                ai[0] = p;
            } else {
                int32_t nb = a->rank - 2;
                for (int32_t d = 0; d < nb; d++) ai[d] = a->shape[d] == 1 ? 0 : idx[d + br - nb];
                ai[nb] = ta ? p : i;
                ai[nb + 1] = ta ? i : p;
            }
            if (b1) {
                bi[0] = p;
            } else {
                int32_t nb = b->rank - 2;
                for (int32_t d = 0; d < nb; d++) bi[d] = b->shape[d] == 1 ? 0 : idx[d + br - nb];
                bi[nb] = tb ? j : p;
                bi[nb + 1] = tb ? p : j;
            }
            long double x = at(a, ai) * at(b, bi);
            s += x;
            sa += fabsl(x);
        }
        exact[e] = alpha * s;
        scale[e] = fabsl(alpha) * sa;
        if (c && beta != 0) {
            int64_t ci[GOBLIN_MAX_RANK];
            for (int32_t d = 0; d < c->rank; d++)
                ci[d] = c->shape[d] == 1 ? 0 : idx[d + orank - c->rank];
            long double cv = at(c, ci);
            exact[e] += beta * cv;
            scale[e] += fabsl(beta * cv);
        }
        for (int32_t d = orank - 1; d >= 0; d--) {
            if (++idx[d] < out->shape[d]) break;
            idx[d] = 0;
        }
    }
}

static void expect_within(const goblin_tensor *o, const long double *exact, const long double *scale,
                          goblin_op op, int64_t k, const char *what) {
    double rel, ab;
    cr_assert_eq(goblin_op_contract(op, o->dtype, k, &rel, &ab), GOBLIN_OK);
    int64_t n = goblin_tensor_numel(o);
    for (int64_t e = 0; e < n; e++) {
        long double g = goblin__load_f64(o->dtype, o->data, e);
        /* the long-double reference is itself within K * 2^-64 of exact */
        long double bound = rel * scale[e] + ab + (long double)(k + 2) * 0x1p-63L * scale[e];
        cr_assert(fabsl(g - exact[e]) <= bound,
                  "%s %s element %lld: got %.17Lg exact %.17Lg (bound %.3Lg, k %lld)", what,
                  goblin_dtype_name(o->dtype), (long long)e, g, exact[e], bound, (long long)k);
    }
}

typedef struct mm_case {
    int32_t ra;
    int64_t sa[4];
    int32_t rb;
    int64_t sb[4];
    int32_t rc; /* 0 rank and no c when has_c is false */
    int64_t sc[4];
    bool has_c, ta, tb;
    double alpha, beta;
    int strided; /* 0 contiguous; 1 padded rows; 2 every other element; 3 broadcast stride 0 */
} mm_case;

static void strides_for(int strided, int32_t rank, const int64_t *shape, int64_t *st) {
    goblin__contig_strides(rank, shape, st);
    if (strided == 1 && rank >= 2) { /* rows padded by 3 elements */
        int64_t s = 1;
        for (int32_t d = rank - 1; d >= 0; d--) {
            st[d] = s;
            s *= shape[d] + (d == rank - 1 ? 3 : 0);
        }
    } else if (strided == 2) { /* every other element in every dim: BLIS needs a copy */
        int64_t s = 2;
        for (int32_t d = rank - 1; d >= 0; d--) {
            st[d] = s;
            s *= 2 * (shape[d] ? shape[d] : 1);
        }
    } else if (strided == 3 && rank >= 2) { /* the row dim broadcast (stride 0) */
        st[rank - 2] = 0;
    }
}

static void run_mm_case(const mm_case *c, goblin_dtype dt, uint64_t seed) {
    int64_t st[3][GOBLIN_MAX_RANK];
    strides_for(c->strided, c->ra, c->sa, st[0]);
    strides_for(c->strided, c->rb, c->sb, st[1]);
    strides_for(0, c->rc, c->sc, st[2]);
    tdata a = make(dt, c->ra, c->sa, st[0], &seed);
    tdata b = make(dt, c->rb, c->sb, st[1], &seed);
    tdata cc = make(dt, c->rc, c->sc, st[2], &seed);
    goblin_tensor in[3] = {a.t, b.t, cc.t};
    int32_t n_in = c->has_c ? 3 : 2;
    goblin_attr at[4];
    int32_t na = 0;
    if (c->ta) at[na++] = A_INT(TRANS_A, 1);
    if (c->tb) at[na++] = A_INT(TRANS_B, 1);
    if (c->alpha != 1) at[na++] = A_FLT(ALPHA, c->alpha);
    if (c->beta != 1) at[na++] = A_FLT(BETA, c->beta);
    goblin_tensor ref = run_on(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_MATMUL, in, n_in, at, na);
    int64_t n = goblin_tensor_numel(&ref), k;
    long double *exact = malloc(sizeof(long double) * (size_t)(n ? n : 1));
    long double *scale = malloc(sizeof(long double) * (size_t)(n ? n : 1));
    mm_exact(&a.t, &b.t, c->has_c ? &cc.t : NULL, c->ta, c->tb, c->alpha, c->beta, &ref, exact,
             scale, &k);
    expect_within(&ref, exact, scale, GOBLIN_OP_MATMUL, k, "ref");
    if (have_blis()) {
        goblin_tensor first = run_on(GOBLIN_BACKEND_BLIS, 1, GOBLIN_OP_MATMUL, in, n_in, at, na);
        expect_within(&first, exact, scale, GOBLIN_OP_MATMUL, k, "blis");
        size_t bytes = (size_t)n * goblin_dtype_size(dt);
        for (int32_t th = 2; th <= 3; th++) {
            goblin_tensor o = run_on(GOBLIN_BACKEND_BLIS, th, GOBLIN_OP_MATMUL, in, n_in, at, na);
            cr_assert(n == 0 || memcmp(o.data, first.data, bytes) == 0,
                      "blis result with %d threads differs from 1 thread", th);
            goblin_buffer_free(o.data);
        }
        goblin_buffer_free(first.data);
    }
    goblin_buffer_free(ref.data);
    free(exact);
    free(scale);
    free(a.buf);
    free(b.buf);
    free(cc.buf);
}

static const mm_case MM_CASES[] = {
    /* small (BLIS sup path, one thread) */
    {2, {5, 7}, 2, {7, 3}, 0, {0}, false, false, false, 1, 1, 0},
    {2, {7, 5}, 2, {3, 7}, 0, {0}, false, true, true, 1, 1, 0},
    {2, {17, 33}, 2, {65, 33}, 1, {65}, true, false, true, 0.5, -2, 0},
    {2, {33, 17}, 2, {33, 65}, 2, {17, 1}, true, true, false, -1.25, 0.75, 0},
    /* large enough for the threaded conventional path */
    {2, {129, 110}, 2, {110, 97}, 2, {129, 97}, true, false, false, 1, 1, 0},
    {2, {110, 129}, 2, {97, 110}, 0, {0}, false, true, true, 2, 1, 0},
    {2, {129, 110}, 2, {97, 110}, 1, {97}, true, false, true, 1, 0.5, 0},
    /* batched with broadcasting, small and large per item */
    {4, {2, 1, 6, 5}, 3, {3, 5, 4}, 2, {6, 1}, true, false, false, 1, 1, 0},
    {3, {5, 40, 70}, 3, {1, 70, 50}, 0, {0}, false, false, false, 1, 1, 0},
    {3, {3, 120, 100}, 2, {100, 90}, 3, {3, 1, 90}, true, false, false, 1, 1, 0},
    {3, {4, 100, 120}, 3, {4, 90, 100}, 0, {0}, false, true, true, 1, 1, 0},
    /* 1-D operands */
    {1, {300}, 3, {2, 300, 40}, 0, {0}, false, false, false, 1, 1, 0},
    {3, {2, 40, 300}, 1, {300}, 1, {1}, true, false, false, 1, 1, 0},
    /* strided, subsampled and broadcast-stride inputs */
    {2, {30, 20}, 2, {20, 10}, 0, {0}, false, false, false, 1, 1, 1},
    {3, {2, 30, 20}, 2, {10, 20}, 0, {0}, false, false, true, 1, 1, 2},
    {3, {2, 30, 20}, 2, {20, 10}, 0, {0}, false, false, false, 1, 1, 3},
    {2, {120, 200}, 2, {120, 100}, 0, {0}, false, true, false, 1, 1, 1},
};

Test(nn_matmul, blis_vs_reference_f32_f64) {
    for (int i = 0; i < NA(MM_CASES); i++) {
        run_mm_case(&MM_CASES[i], GOBLIN_DTYPE_F32, 11 + (uint64_t)i);
        run_mm_case(&MM_CASES[i], GOBLIN_DTYPE_F64, 101 + (uint64_t)i);
    }
}

Test(nn_matmul, blis_vs_reference_half) {
    for (int i = 0; i < NA(MM_CASES); i += 2) {
        run_mm_case(&MM_CASES[i], GOBLIN_DTYPE_F16, 7 + (uint64_t)i);
        run_mm_case(&MM_CASES[i], GOBLIN_DTYPE_BF16, 9 + (uint64_t)i);
    }
}

/* ---- CONV2D ---------------------------------------------------------------- */

static const double X9[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}; /* a 3 x 3 image */

static void conv_hand(goblin_backend_kind be, int32_t threads) {
    for (int d = 0; d < 4; d++) {
        goblin_dtype dt = FLOATS[d];
        char bx[128], bw[64], bb[16];
        goblin_tensor in[3] = {from_vals(dt, 4, SHAPE(1, 1, 3, 3), X9, bx),
                               from_vals(dt, 4, SHAPE(1, 1, 2, 2), (const double[]){1, 0, 0, 1}, bw),
                               from_vals(dt, 1, SHAPE(1), (const double[]){1}, bb)};
        goblin_tensor o = run_on(be, threads, GOBLIN_OP_CONV2D, in, 2, NULL, 0);
        check_shape(&o, 4, SHAPE(1, 1, 2, 2));
        check_vals(&o, (const double[]){6, 8, 12, 14}, 4, 0, 0);
        goblin_buffer_free(o.data);
        o = run_on(be, threads, GOBLIN_OP_CONV2D, in, 3, NULL, 0);
        check_vals(&o, (const double[]){7, 9, 13, 15}, 4, 0, 0);
        goblin_buffer_free(o.data);
        /* padding 1, stride 2: windows at -1 and 1 of the padded image */
        goblin_attr ps[] = {A_INTS(STRIDE, 2), A_INTS(PADDING, 1)};
        o = run_on(be, threads, GOBLIN_OP_CONV2D, in, 2, ps, 2);
        check_shape(&o, 4, SHAPE(1, 1, 2, 2));
        check_vals(&o, (const double[]){1, 3, 7, 14}, 4, 0, 0);
        goblin_buffer_free(o.data);
        /* dilation 2 with a 2 x 2 kernel of ones: the four corners */
        in[1] = from_vals(dt, 4, SHAPE(1, 1, 2, 2), (const double[]){1, 1, 1, 1}, bw);
        goblin_attr dl[] = {A_INTS(DILATION, 2, 2)};
        o = run_on(be, threads, GOBLIN_OP_CONV2D, in, 2, dl, 1);
        check_shape(&o, 4, SHAPE(1, 1, 1, 1));
        check_vals(&o, (const double[]){20}, 1, 0, 0);
        goblin_buffer_free(o.data);
        /* groups: each output channel sees only its own input channel */
        char bx2[128];
        in[0] = from_vals(dt, 4, SHAPE(1, 2, 1, 2), (const double[]){1, 1, 2, 2}, bx2);
        in[1] = from_vals(dt, 4, SHAPE(2, 1, 1, 1), (const double[]){3, 5}, bw);
        goblin_attr gr[] = {A_INT(GROUPS, 2)};
        o = run_on(be, threads, GOBLIN_OP_CONV2D, in, 2, gr, 1);
        check_shape(&o, 4, SHAPE(1, 2, 1, 2));
        check_vals(&o, (const double[]){3, 3, 10, 10}, 4, 0, 0);
        goblin_buffer_free(o.data);
    }
}
Test(nn_conv2d, hand_values) { backends_each(conv_hand); }

static void conv_empty(goblin_backend_kind be, int32_t threads) {
    char b[64];
    goblin_tensor in[3] = {gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(0, 2, 5, 5), b),
                           gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(3, 2, 3, 3), b)};
    goblin_tensor o = run_on(be, threads, GOBLIN_OP_CONV2D, in, 2, NULL, 0);
    check_shape(&o, 4, SHAPE(0, 3, 3, 3));
    goblin_buffer_free(o.data);
    /* no input channels: the output is the bias */
    char bb[16];
    in[0] = gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(1, 0, 2, 2), b);
    in[1] = gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(2, 0, 1, 1), b);
    in[2] = from_vals(GOBLIN_DTYPE_F32, 1, SHAPE(2), (const double[]){1.5, -2}, bb);
    o = run_on(be, threads, GOBLIN_OP_CONV2D, in, 3, NULL, 0);
    check_shape(&o, 4, SHAPE(1, 2, 2, 2));
    check_vals(&o, (const double[]){1.5, 1.5, 1.5, 1.5, -2, -2, -2, -2}, 8, 0, 0);
    goblin_buffer_free(o.data);
}
Test(nn_conv2d, empty_inputs) { backends_each(conv_empty); }

Test(nn_conv2d, build_errors) {
    char b[8];
    goblin_tensor in[3] = {gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(1, 4, 5, 5), b),
                           gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(6, 3, 3, 3), b),
                           gt_tensor(GOBLIN_DTYPE_F32, 1, SHAPE(6), b)};
    build_fails(GOBLIN_ESHAPE, "channels", GOBLIN_OP_CONV2D, in, 2, NULL, 0);
    in[1] = gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(6, 2, 3, 3), b);
    goblin_attr g3[] = {A_INT(GROUPS, 3)};
    build_fails(GOBLIN_ESHAPE, NULL, GOBLIN_OP_CONV2D, in, 2, g3, 1);
    goblin_attr g2[] = {A_INT(GROUPS, 2)};
    cr_assert_eq(gt_build1(GOBLIN_OP_CONV2D, in, 3, g2, 1, NULL, NULL, 0), GOBLIN_OK);
    in[1] = gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(5, 2, 3, 3), b); /* 5 outputs, 2 groups */
    build_fails(GOBLIN_ESHAPE, "divisible", GOBLIN_OP_CONV2D, in, 2, g2, 1);
    in[1] = gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(6, 4, 6, 3), b);
    build_fails(GOBLIN_ESHAPE, "smaller than", GOBLIN_OP_CONV2D, in, 2, NULL, 0);
    goblin_attr dil[] = {A_INTS(DILATION, 3)};
    in[1] = gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(6, 4, 3, 3), b);
    build_fails(GOBLIN_ESHAPE, "dilated", GOBLIN_OP_CONV2D, in, 2, dil, 1);
    goblin_attr pad[] = {A_INTS(PADDING, 1)};
    goblin_tensor info;
    cr_assert_eq(gt_build1(GOBLIN_OP_CONV2D, in, 2, pad, 1, &info, NULL, 0), GOBLIN_OK);
    check_shape(&info, 4, SHAPE(1, 6, 5, 5));
    goblin_attr s0[] = {A_INTS(STRIDE, 0)};
    build_fails(GOBLIN_ERANGE, "stride", GOBLIN_OP_CONV2D, in, 2, s0, 1);
    goblin_attr s3[] = {A_INTS(STRIDE, 1, 1, 1)};
    build_fails(GOBLIN_EINVAL, "1 or 2 values", GOBLIN_OP_CONV2D, in, 2, s3, 1);
    in[2] = gt_tensor(GOBLIN_DTYPE_F32, 1, SHAPE(5), b);
    build_fails(GOBLIN_ESHAPE, "bias", GOBLIN_OP_CONV2D, in, 3, NULL, 0);
    in[0] = gt_tensor(GOBLIN_DTYPE_F32, 3, SHAPE(4, 5, 5), b);
    build_fails(GOBLIN_ESHAPE, "[N, C, H, W]", GOBLIN_OP_CONV2D, in, 2, NULL, 0);
    in[0] = gt_tensor(GOBLIN_DTYPE_I32, 4, SHAPE(1, 4, 5, 5), b);
    in[1] = gt_tensor(GOBLIN_DTYPE_I32, 4, SHAPE(6, 4, 3, 3), b);
    build_fails(GOBLIN_EDTYPE, NULL, GOBLIN_OP_CONV2D, in, 2, NULL, 0);
}

/* Exact conv (long double) and the contract scale sum |w x| + |bias|. */
static void conv_exact(const goblin_tensor *x, const goblin_tensor *w, const goblin_tensor *bias,
                       int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                       int64_t groups, const goblin_tensor *out, long double *exact,
                       long double *scale) {
    int64_t N = out->shape[0], O = out->shape[1], OH = out->shape[2], OW = out->shape[3];
    int64_t cg = w->shape[1], og = O / groups, e = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++, e++) {
                    long double s = 0, sa = 0;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t i = 0; i < w->shape[2]; i++)
                            for (int64_t j = 0; j < w->shape[3]; j++) {
                                int64_t ih = oh * sh - ph + i * dh, iw = ow * sw - pw + j * dw;
                                if (ih < 0 || iw < 0 || ih >= x->shape[2] || iw >= x->shape[3])
                                    continue;
                                long double v = at(x, (int64_t[]){n, (o / og) * cg + c, ih, iw}) *
                                                at(w, (int64_t[]){o, c, i, j});
                                s += v;
                                sa += fabsl(v);
                            }
                    if (bias) {
                        long double bv = at(bias, (int64_t[]){o});
                        s += bv;
                        sa += fabsl(bv);
                    }
                    exact[e] = s;
                    scale[e] = sa;
                }
}

typedef struct conv_case {
    int64_t x[4], w[4];
    int64_t sh, sw, ph, pw, dh, dw, groups;
    bool bias;
} conv_case;

static const conv_case CONV_CASES[] = {
    {{2, 3, 9, 9}, {4, 3, 3, 3}, 1, 1, 1, 1, 1, 1, 1, true},
    {{1, 4, 11, 8}, {6, 2, 3, 2}, 2, 1, 1, 0, 1, 2, 2, false},
    {{3, 6, 10, 10}, {6, 1, 3, 3}, 1, 2, 1, 1, 2, 1, 6, true},  /* depthwise */
    {{2, 8, 7, 7}, {16, 8, 1, 1}, 1, 1, 0, 0, 1, 1, 1, true},   /* 1x1: direct, no im2col */
    {{2, 8, 7, 7}, {16, 4, 1, 1}, 2, 2, 0, 0, 1, 1, 2, false},  /* 1x1 strided */
    {{4, 3, 32, 32}, {64, 3, 3, 3}, 1, 1, 1, 1, 1, 1, 1, true}, /* the benchmark's layer */
    {{1, 16, 20, 20}, {32, 16, 5, 5}, 3, 3, 2, 2, 1, 1, 1, true},
    /* images share a gemm in blocks of 3 (the last one partial); "same" width im2col */
    {{13, 16, 24, 24}, {8, 16, 3, 3}, 1, 1, 1, 1, 1, 1, 1, true},
    {{11, 2, 6, 5}, {3, 2, 3, 3}, 1, 1, 2, 2, 2, 2, 1, true},  /* dilated, same width */
    {{3, 4, 5, 7}, {5, 4, 1, 3}, 1, 1, 0, 1, 1, 1, 1, false},  /* 1x3, same width */
    {{5, 4, 6, 6}, {6, 2, 3, 3}, 1, 1, 1, 1, 1, 1, 2, false},  /* groups, same width */
};

static void run_conv_case(const conv_case *c, goblin_dtype dt, uint64_t seed) {
    tdata x = make(dt, 4, c->x, NULL, &seed);
    tdata w = make(dt, 4, c->w, NULL, &seed);
    tdata b = make(dt, 1, &c->w[0], NULL, &seed);
    goblin_tensor in[3] = {x.t, w.t, b.t};
    goblin_attr at[] = {A_INTS(STRIDE, c->sh, c->sw), A_INTS(PADDING, c->ph, c->pw),
                        A_INTS(DILATION, c->dh, c->dw), A_INT(GROUPS, c->groups)};
    int32_t n_in = c->bias ? 3 : 2;
    goblin_tensor ref = run_on(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_CONV2D, in, n_in, at, 4);
    int64_t n = goblin_tensor_numel(&ref);
    long double *exact = malloc(sizeof(long double) * (size_t)n);
    long double *scale = malloc(sizeof(long double) * (size_t)n);
    conv_exact(&x.t, &w.t, c->bias ? &b.t : NULL, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw,
               c->groups, &ref, exact, scale);
    int64_t k = c->w[1] * c->w[2] * c->w[3];
    expect_within(&ref, exact, scale, GOBLIN_OP_CONV2D, k, "ref");
    if (have_blis()) {
        goblin_tensor first = run_on(GOBLIN_BACKEND_BLIS, 1, GOBLIN_OP_CONV2D, in, n_in, at, 4);
        expect_within(&first, exact, scale, GOBLIN_OP_CONV2D, k, "blis");
        for (int32_t th = 2; th <= 3; th++) {
            goblin_tensor o = run_on(GOBLIN_BACKEND_BLIS, th, GOBLIN_OP_CONV2D, in, n_in, at, 4);
            cr_assert(memcmp(o.data, first.data, (size_t)n * goblin_dtype_size(dt)) == 0,
                      "conv2d with %d threads differs from 1 thread", th);
            goblin_buffer_free(o.data);
        }
        goblin_buffer_free(first.data);
    }
    goblin_buffer_free(ref.data);
    free(exact);
    free(scale);
    free(x.buf);
    free(w.buf);
    free(b.buf);
}

Test(nn_conv2d, blis_vs_reference) {
    for (int i = 0; i < NA(CONV_CASES); i++)
        for (int d = 0; d < 4; d++) run_conv_case(&CONV_CASES[i], FLOATS[d], 1000 + (uint64_t)(i * 4 + d));
}

/* ---- pooling --------------------------------------------------------------- */

static goblin_tensor pool1(goblin_op op, goblin_dtype dt, int64_t h, int64_t w, const double *vals,
                           void *buf, const goblin_attr *at, int32_t na) {
    goblin_tensor in = from_vals(dt, 4, SHAPE(1, 1, h, w), vals, buf);
    return run_on(GOBLIN_BACKEND_REF, 1, op, &in, 1, at, na);
}

static const double X16[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

Test(nn_pool, max_pool_hand_values) {
    const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64, GOBLIN_DTYPE_F16,
                                GOBLIN_DTYPE_BF16, GOBLIN_DTYPE_I8, GOBLIN_DTYPE_I32,
                                GOBLIN_DTYPE_I64, GOBLIN_DTYPE_U8};
    for (int d = 0; d < NA(dts); d++) {
        char buf[256];
        goblin_attr k2[] = {A_INTS(KERNEL, 2)};
        goblin_tensor o = pool1(GOBLIN_OP_MAX_POOL2D, dts[d], 4, 4, X16, buf, k2, 1);
        check_shape(&o, 4, SHAPE(1, 1, 2, 2));
        check_vals(&o, (const double[]){5, 7, 13, 15}, 4, 0, 0);
        goblin_buffer_free(o.data);
        /* kernel 3, stride 2, padding 1: padded cells never win */
        goblin_attr kp[] = {A_INTS(KERNEL, 3), A_INTS(STRIDE, 2), A_INTS(PADDING, 1)};
        o = pool1(GOBLIN_OP_MAX_POOL2D, dts[d], 4, 4, X16, buf, kp, 3);
        check_vals(&o, (const double[]){5, 7, 13, 15}, 4, 0, 0);
        goblin_buffer_free(o.data);
        /* dilation 2 on 3 x 3: the corners */
        goblin_attr dl[] = {A_INTS(KERNEL, 2), A_INTS(DILATION, 2)};
        o = pool1(GOBLIN_OP_MAX_POOL2D, dts[d], 3, 3, (const double[]){9, 1, 2, 3, 40, 5, 6, 7, 8},
                  buf, dl, 2);
        check_shape(&o, 4, SHAPE(1, 1, 1, 1));
        check_vals(&o, (const double[]){9}, 1, 0, 0);
        goblin_buffer_free(o.data);
    }
    /* negative integers and the type's minimum */
    int32_t xi[4] = {INT32_MIN, -5, -7, INT32_MIN};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_I32, 3, SHAPE(1, 2, 2), xi);
    goblin_attr k2[] = {A_INTS(KERNEL, 2, 1)};
    goblin_tensor o = run_on(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_MAX_POOL2D, &in, 1, k2, 1);
    check_shape(&o, 3, SHAPE(1, 1, 2));
    cr_assert_eq(((int32_t *)o.data)[0], -7);
    cr_assert_eq(((int32_t *)o.data)[1], -5);
    goblin_buffer_free(o.data);
}

Test(nn_pool, ceil_mode_rule) {
    char buf[256];
    double x25[25];
    for (int i = 0; i < 25; i++) x25[i] = i;
    /* 5 x 5, kernel 2, stride 2: floor gives 2, ceil 3 (last window holds one row/col) */
    goblin_attr c1[] = {A_INTS(KERNEL, 2), A_INT(CEIL_MODE, 1)};
    goblin_tensor o = pool1(GOBLIN_OP_MAX_POOL2D, GOBLIN_DTYPE_F32, 5, 5, x25, buf, c1, 2);
    check_shape(&o, 4, SHAPE(1, 1, 3, 3));
    check_vals(&o, (const double[]){6, 8, 9, 16, 18, 19, 21, 23, 24}, 9, 0, 0);
    goblin_buffer_free(o.data);
    /* 3 x 3, kernel 2, stride 2, padding 1: a third window would start in the right
     * padding, so ceil mode drops it (torch's rule) */
    goblin_attr c2[] = {A_INTS(KERNEL, 2), A_INTS(PADDING, 1), A_INT(CEIL_MODE, 1)};
    o = pool1(GOBLIN_OP_MAX_POOL2D, GOBLIN_DTYPE_F32, 3, 3, X9, buf, c2, 3);
    check_shape(&o, 4, SHAPE(1, 1, 2, 2));
    check_vals(&o, (const double[]){1, 3, 7, 9}, 4, 0, 0);
    goblin_buffer_free(o.data);
    /* avg with ceil mode: the overhanging window divides by its in-bounds count */
    goblin_attr a1[] = {A_INTS(KERNEL, 2), A_INT(CEIL_MODE, 1)};
    o = pool1(GOBLIN_OP_AVG_POOL2D, GOBLIN_DTYPE_F64, 3, 3, X9, buf, a1, 2);
    check_vals(&o, (const double[]){3, 4.5, 7.5, 9}, 4, 0, 0);
    goblin_buffer_free(o.data);
}

Test(nn_pool, max_pool_nan_propagates) {
    char buf[128];
    goblin_attr k2[] = {A_INTS(KERNEL, 2)};
    goblin_tensor o = pool1(GOBLIN_OP_MAX_POOL2D, GOBLIN_DTYPE_F32, 2, 4,
                            (const double[]){1, NAN, 3, 4, 5, 6, -INFINITY, -INFINITY}, buf, k2, 1);
    check_vals(&o, (const double[]){NAN, 4}, 2, 0, 0);
    goblin_buffer_free(o.data);
}

Test(nn_pool, avg_pool_hand_values) {
    for (int d = 0; d < 4; d++) {
        char buf[256];
        goblin_attr k2[] = {A_INTS(KERNEL, 2)};
        goblin_tensor o = pool1(GOBLIN_OP_AVG_POOL2D, FLOATS[d], 4, 4, X16, buf, k2, 1);
        check_vals(&o, (const double[]){2.5, 4.5, 10.5, 12.5}, 4, 0, 0);
        goblin_buffer_free(o.data);
        /* padding 1, stride 1 on [[1, 2], [3, 4]]: count_include_pad divides by 4 */
        goblin_attr inc[] = {A_INTS(KERNEL, 2), A_INTS(STRIDE, 1), A_INTS(PADDING, 1)};
        o = pool1(GOBLIN_OP_AVG_POOL2D, FLOATS[d], 2, 2, (const double[]){1, 2, 3, 4}, buf, inc, 3);
        check_shape(&o, 4, SHAPE(1, 1, 3, 3));
        check_vals(&o, (const double[]){0.25, 0.75, 0.5, 1, 2.5, 1.5, 0.75, 1.75, 1}, 9, 0, 0);
        goblin_buffer_free(o.data);
        goblin_attr exc[] = {A_INTS(KERNEL, 2), A_INTS(STRIDE, 1), A_INTS(PADDING, 1),
                             A_INT(COUNT_INCLUDE_PAD, 0)};
        o = pool1(GOBLIN_OP_AVG_POOL2D, FLOATS[d], 2, 2, (const double[]){1, 2, 3, 4}, buf, exc, 4);
        check_vals(&o, (const double[]){1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4}, 9, 0, 0);
        goblin_buffer_free(o.data);
    }
}

Test(nn_pool, adaptive_avg_pool_hand_values) {
    char buf[128];
    /* 3 -> 2: windows [0, 2) and [1, 3) */
    goblin_attr os[] = {A_INTS(OUTPUT_SIZE, 2)};
    goblin_tensor o = pool1(GOBLIN_OP_ADAPTIVE_AVG_POOL2D, GOBLIN_DTYPE_F32, 3, 3, X9, buf, os, 1);
    check_shape(&o, 4, SHAPE(1, 1, 2, 2));
    check_vals(&o, (const double[]){3, 4, 6, 7}, 4, 0, 0);
    goblin_buffer_free(o.data);
    /* global average and an upsampling size (windows of one cell repeat) */
    goblin_attr g1[] = {A_INTS(OUTPUT_SIZE, 1, 4)};
    o = pool1(GOBLIN_OP_ADAPTIVE_AVG_POOL2D, GOBLIN_DTYPE_F64, 2, 2, (const double[]){1, 2, 3, 4},
              buf, g1, 1);
    check_shape(&o, 4, SHAPE(1, 1, 1, 4));
    check_vals(&o, (const double[]){2, 2, 3, 3}, 4, 0, 0);
    goblin_buffer_free(o.data);
    goblin_attr z[] = {A_INTS(OUTPUT_SIZE, 0, 3)};
    o = pool1(GOBLIN_OP_ADAPTIVE_AVG_POOL2D, GOBLIN_DTYPE_F32, 3, 3, X9, buf, z, 1);
    check_shape(&o, 4, SHAPE(1, 1, 0, 3));
    goblin_buffer_free(o.data);
}

Test(nn_pool, empty_batch) {
    char b[8];
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(0, 3, 4, 4), b);
    goblin_attr k2[] = {A_INTS(KERNEL, 2)};
    goblin_op ops[] = {GOBLIN_OP_MAX_POOL2D, GOBLIN_OP_AVG_POOL2D};
    for (int i = 0; i < 2; i++) {
        goblin_tensor o = run_on(GOBLIN_BACKEND_REF, 1, ops[i], &in, 1, k2, 1);
        check_shape(&o, 4, SHAPE(0, 3, 2, 2));
        goblin_buffer_free(o.data);
    }
}

Test(nn_pool, build_errors) {
    char b[8];
    goblin_tensor x = gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(1, 1, 4, 4), b);
    goblin_attr none[1];
    build_fails(GOBLIN_EINVAL, "kernel", GOBLIN_OP_MAX_POOL2D, &x, 1, none, 0);
    goblin_attr bigpad[] = {A_INTS(KERNEL, 3), A_INTS(PADDING, 2)};
    build_fails(GOBLIN_EINVAL, "half the kernel", GOBLIN_OP_MAX_POOL2D, &x, 1, bigpad, 2);
    build_fails(GOBLIN_EINVAL, "half the kernel", GOBLIN_OP_AVG_POOL2D, &x, 1, bigpad, 2);
    goblin_attr big[] = {A_INTS(KERNEL, 5)};
    build_fails(GOBLIN_ESHAPE, "empty output", GOBLIN_OP_MAX_POOL2D, &x, 1, big, 1);
    goblin_attr dil[] = {A_INTS(KERNEL, 2), A_INTS(DILATION, 2)};
    build_fails(GOBLIN_EINVAL, "dilation", GOBLIN_OP_AVG_POOL2D, &x, 1, dil, 2);
    goblin_attr k0[] = {A_INTS(KERNEL, 0)};
    build_fails(GOBLIN_ERANGE, "kernel", GOBLIN_OP_MAX_POOL2D, &x, 1, k0, 1);
    goblin_attr k2[] = {A_INTS(KERNEL, 2)};
    goblin_tensor x2 = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(4, 4), b);
    build_fails(GOBLIN_ESHAPE, "rank", GOBLIN_OP_MAX_POOL2D, &x2, 1, k2, 1);
    goblin_tensor xe = gt_tensor(GOBLIN_DTYPE_F32, 4, SHAPE(1, 1, 0, 4), b);
    build_fails(GOBLIN_ESHAPE, "non-empty", GOBLIN_OP_MAX_POOL2D, &xe, 1, k2, 1);
    goblin_tensor xi = gt_tensor(GOBLIN_DTYPE_I32, 4, SHAPE(1, 1, 4, 4), b);
    build_fails(GOBLIN_EDTYPE, NULL, GOBLIN_OP_AVG_POOL2D, &xi, 1, k2, 1);
    cr_assert_eq(gt_build1(GOBLIN_OP_MAX_POOL2D, &xi, 1, k2, 1, NULL, NULL, 0), GOBLIN_OK);
    build_fails(GOBLIN_EINVAL, "output_size", GOBLIN_OP_ADAPTIVE_AVG_POOL2D, &x, 1, none, 0);
    goblin_attr os3[] = {A_INTS(OUTPUT_SIZE, 1, 2, 3)};
    build_fails(GOBLIN_EINVAL, "1 or 2", GOBLIN_OP_ADAPTIVE_AVG_POOL2D, &x, 1, os3, 1);
}

/* ---- SDPA ------------------------------------------------------------------ */

Test(nn_sdpa, hand_values) {
    for (int d = 0; d < 4; d++) {
        char bq[32], bk[64], bv[32];
        /* q = [1, 0], keys e1, e2, values 0, 1: logits [1/sqrt2, 0] */
        goblin_tensor in[3] = {
            from_vals(FLOATS[d], 2, SHAPE(1, 2), (const double[]){1, 0}, bq),
            from_vals(FLOATS[d], 2, SHAPE(2, 2), (const double[]){1, 0, 0, 1}, bk),
            from_vals(FLOATS[d], 2, SHAPE(2, 1), (const double[]){0, 1}, bv)};
        goblin_tensor o = run_on(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_SDPA, in, 3, NULL, 0);
        check_shape(&o, 2, SHAPE(1, 1));
        double want = 1 / (exp(1 / sqrt(2.0)) + 1);
        double tol = 4 * goblin__unit_roundoff(FLOATS[d]) + 1e-15;
        check_vals(&o, &want, 1, tol, 0);
        goblin_buffer_free(o.data);
        goblin_attr sc[] = {A_FLT(SCALE, 2)};
        o = run_on(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_SDPA, in, 3, sc, 1);
        want = 1 / (exp(2.0) + 1);
        check_vals(&o, &want, 1, tol, 0);
        goblin_buffer_free(o.data);
    }
}

Test(nn_sdpa, causal_and_masks) {
    char bq[64], bk[64], bv[64], bm[64];
    /* L = 3, S = 2, E = 1; v = [10, 20] */
    goblin_tensor in[4] = {
        from_vals(GOBLIN_DTYPE_F64, 2, SHAPE(3, 1), (const double[]){1, 1, 1}, bq),
        from_vals(GOBLIN_DTYPE_F64, 2, SHAPE(2, 1), (const double[]){0, 0}, bk),
        from_vals(GOBLIN_DTYPE_F64, 2, SHAPE(2, 1), (const double[]){10, 20}, bv)};
    /* top-left causal: row 0 sees key 0 only; rows 1, 2 see both (equal logits) */
    goblin_attr c1[] = {A_INT(CAUSAL, 1)};
    goblin_tensor o = run_on(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_SDPA, in, 3, c1, 1);
    check_vals(&o, (const double[]){10, 15, 15}, 3, 1e-15, 0);
    goblin_buffer_free(o.data);
    /* bool mask: row 0 all false -> 0 (torch 2.13), row 1 key 1 only, row 2 both */
    uint8_t mb[6] = {0, 0, 0, 1, 1, 1};
    in[3] = gt_tensor(GOBLIN_DTYPE_BOOL, 2, SHAPE(3, 2), mb);
    o = run_on(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_SDPA, in, 4, NULL, 0);
    check_vals(&o, (const double[]){0, 20, 15}, 3, 1e-15, 0);
    goblin_buffer_free(o.data);
    /* additive float mask broadcast over rows: log(3) on key 1 weights it 3:1 */
    in[3] = from_vals(GOBLIN_DTYPE_F64, 1, SHAPE(2), (const double[]){0, log(3.0)}, bm);
    o = run_on(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_SDPA, in, 4, NULL, 0);
    check_vals(&o, (const double[]){17.5, 17.5, 17.5}, 3, 1e-14, 0);
    goblin_buffer_free(o.data);
    in[3] = from_vals(GOBLIN_DTYPE_F64, 1, SHAPE(2), (const double[]){-INFINITY, NAN}, bm);
    o = run_on(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_SDPA, in, 4, NULL, 0);
    check_vals(&o, (const double[]){NAN, NAN, NAN}, 3, 0, 0);
    goblin_buffer_free(o.data);
    /* S = 0: nothing to attend, zeros */
    in[1] = gt_tensor(GOBLIN_DTYPE_F64, 2, SHAPE(0, 1), bk);
    in[2] = gt_tensor(GOBLIN_DTYPE_F64, 2, SHAPE(0, 2), bv);
    o = run_on(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_SDPA, in, 3, NULL, 0);
    check_shape(&o, 2, SHAPE(3, 2));
    check_vals(&o, (const double[]){0, 0, 0, 0, 0, 0}, 6, 0, 0);
    goblin_buffer_free(o.data);
}

Test(nn_sdpa, build_errors) {
    char b[8];
    goblin_tensor in[4] = {gt_tensor(GOBLIN_DTYPE_F32, 3, SHAPE(2, 4, 8), b),
                           gt_tensor(GOBLIN_DTYPE_F32, 3, SHAPE(2, 5, 8), b),
                           gt_tensor(GOBLIN_DTYPE_F32, 3, SHAPE(2, 5, 3), b),
                           gt_tensor(GOBLIN_DTYPE_BOOL, 2, SHAPE(4, 5), b)};
    goblin_tensor info;
    cr_assert_eq(gt_build1(GOBLIN_OP_SDPA, in, 4, NULL, 0, &info, NULL, 0), GOBLIN_OK);
    check_shape(&info, 3, SHAPE(2, 4, 3));
    goblin_attr c1[] = {A_INT(CAUSAL, 1)};
    build_fails(GOBLIN_EINVAL, "causal", GOBLIN_OP_SDPA, in, 4, c1, 1);
    in[3] = gt_tensor(GOBLIN_DTYPE_I32, 2, SHAPE(4, 5), b);
    build_fails(GOBLIN_EDTYPE, "mask", GOBLIN_OP_SDPA, in, 4, NULL, 0);
    in[3] = gt_tensor(GOBLIN_DTYPE_F32, 3, SHAPE(3, 4, 5), b);
    build_fails(GOBLIN_ESHAPE, "mask", GOBLIN_OP_SDPA, in, 4, NULL, 0);
    in[1] = gt_tensor(GOBLIN_DTYPE_F32, 3, SHAPE(2, 5, 7), b);
    build_fails(GOBLIN_ESHAPE, "E=", GOBLIN_OP_SDPA, in, 3, NULL, 0);
    in[1] = gt_tensor(GOBLIN_DTYPE_F32, 3, SHAPE(2, 6, 8), b);
    build_fails(GOBLIN_ESHAPE, "S=", GOBLIN_OP_SDPA, in, 3, NULL, 0);
    in[1] = gt_tensor(GOBLIN_DTYPE_F64, 3, SHAPE(2, 5, 8), b);
    build_fails(GOBLIN_EDTYPE, "cast", GOBLIN_OP_SDPA, in, 3, NULL, 0);
    in[1] = gt_tensor(GOBLIN_DTYPE_F32, 3, SHAPE(2, 5, 8), b);
    in[0] = gt_tensor(GOBLIN_DTYPE_F32, 1, SHAPE(8), b);
    build_fails(GOBLIN_ESHAPE, "rank", GOBLIN_OP_SDPA, in, 3, NULL, 0);
}

/* The BLIS backend has no SDPA/pooling kernels: those nodes run on the reference
 * kernels, and must give identical bits. */
Test(nn_pool, blis_backend_falls_back_exactly) {
    if (!have_blis()) return;
    uint64_t seed = 5;
    tdata x = make(GOBLIN_DTYPE_F32, 4, SHAPE(2, 3, 9, 7), NULL, &seed);
    goblin_attr at[] = {A_INTS(KERNEL, 3, 2), A_INTS(STRIDE, 2, 1), A_INTS(PADDING, 1, 1)};
    goblin_op ops[] = {GOBLIN_OP_MAX_POOL2D, GOBLIN_OP_AVG_POOL2D};
    for (int i = 0; i < 2; i++) {
        goblin_tensor r = run_on(GOBLIN_BACKEND_REF, 1, ops[i], &x.t, 1, at, 3);
        goblin_tensor bo = run_on(GOBLIN_BACKEND_BLIS, 2, ops[i], &x.t, 1, at, 3);
        cr_assert(memcmp(r.data, bo.data, (size_t)goblin_tensor_numel(&r) * 4) == 0);
        goblin_buffer_free(r.data);
        goblin_buffer_free(bo.data);
    }
    free(x.buf);
}

/* An image large enough that the BLIS kernel's im2col runs in blocks of output rows
 * (32 MiB of scratch per block): 84 of 254 rows per block here. */
Test(nn_conv2d, blis_row_blocks_on_large_images) {
    const conv_case big = {{1, 8, 260, 260}, {2, 8, 7, 7}, 1, 1, 0, 0, 1, 1, 1, true};
    run_conv_case(&big, GOBLIN_DTYPE_F32, 77);
}

/* The same-width im2col (stride 1, OW == W): planes whose zero-bordered copy fits the
 * kernel's stack plane (at the limit of 4096 elements: 64 x 64 padded) and planes past
 * it (the per-row path); rows of 4, 8 and 16 elements (the constant-size moves) and
 * odd widths; a 1x3 kernel with row padding (output rows of zeros above and below);
 * padding wider than the image; dilation. Every dtype, against the long double sums. */
Test(nn_conv2d, blis_same_width_padded_plane_and_row_paths) {
    static const conv_case cases[] = {
        {{2, 3, 70, 66}, {4, 3, 3, 3}, 1, 1, 1, 1, 1, 1, 1, true},   /* past the stack plane */
        {{1, 2, 66, 70}, {3, 2, 3, 3}, 1, 1, 2, 2, 2, 2, 1, false},  /* past it, dilated */
        {{2, 2, 62, 62}, {3, 2, 3, 3}, 1, 1, 1, 1, 1, 1, 1, true},   /* exactly at the limit */
        {{3, 2, 5, 4}, {3, 2, 1, 3}, 1, 1, 1, 1, 1, 1, 1, true},     /* oh = h + 2, rows of 4 */
        {{2, 2, 2, 3}, {2, 2, 7, 7}, 1, 1, 3, 3, 1, 1, 1, false},    /* padding wider than the image */
        {{3, 3, 9, 8}, {4, 3, 3, 3}, 1, 1, 2, 2, 2, 2, 1, true},     /* dilated, rows of 8 */
        {{4, 3, 16, 16}, {16, 3, 3, 3}, 1, 1, 1, 1, 1, 1, 1, false}, /* examples/train_cnn.py's layers */
        {{4, 16, 8, 8}, {32, 16, 3, 3}, 1, 1, 1, 1, 1, 1, 1, false},
        {{3, 4, 7, 13}, {6, 2, 5, 5}, 1, 1, 2, 2, 1, 1, 2, true},    /* 5x5, groups, odd widths */
    };
    for (int i = 0; i < NA(cases); i++)
        for (int d = 0; d < 4; d++) run_conv_case(&cases[i], FLOATS[d], 2000 + (uint64_t)(i * 4 + d));
}
