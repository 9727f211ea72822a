/* tests/unit/test_ops_reduce.c - reductions, softmax, normalization and losses
 * (libgoblin/ops_reduce.c, backends/ref/ref_reduce.c, backends/blis/blis_reduce.c):
 * hand-derived values, integer wraparound, NaN and empty inputs, build-time and
 * data errors, the BLIS fast paths against the reference under the ops' numeric
 * contracts, and BLIS results that do not depend on the thread count. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include "testutil.h"

#define A_INT(k, v) goblin_attr_int(GOBLIN_ATTR_##k, (v))
#define A_FLT(k, v) goblin_attr_float(GOBLIN_ATTR_##k, (v))
#define A_INTS(k, ...) \
    goblin_attr_ints(GOBLIN_ATTR_##k, (const int64_t[]){__VA_ARGS__}, \
                     (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define SHAPE(...) (const int64_t[]){__VA_ARGS__}

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

static goblin_tensor run_ref(goblin_op op, const goblin_tensor *in, int32_t n_in,
                             const goblin_attr *attrs, int32_t n_attrs) {
    return run_on(GOBLIN_BACKEND_REF, 1, op, in, n_in, attrs, n_attrs);
}

static void check_shape(const goblin_tensor *t, int32_t rank, const int64_t *shape) {
    cr_assert_eq(t->rank, rank, "rank %d vs %d", t->rank, rank);
    for (int32_t d = 0; d < rank; d++)
        cr_assert_eq(t->shape[d], shape[d], "dim %d: %lld vs %lld", d, (long long)t->shape[d],
                     (long long)shape[d]);
}

/* Compare every element (as double) with @p want within rel/abs; NaN must match NaN. */
static void check_vals(const goblin_tensor *t, const double *want, int64_t n, double rel,
                       double abs_tol) {
    cr_assert_eq(goblin_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++) {
        double g;
        switch (t->dtype) {
        case GOBLIN_DTYPE_F32: g = ((float *)t->data)[i]; break;
        case GOBLIN_DTYPE_F64: g = ((double *)t->data)[i]; break;
        case GOBLIN_DTYPE_I64: g = (double)((int64_t *)t->data)[i]; break;
        default: cr_assert_fail("unexpected dtype"); return;
        }
        cr_assert(gt_close(g, want[i], rel, abs_tol), "element %lld: got %.17g want %.17g",
                  (long long)i, g, want[i]);
    }
}

static void build_fails(goblin_err want, const char *needle, goblin_op op, const goblin_tensor *in,
                        int32_t n_in, const goblin_attr *attrs, int32_t n_attrs) {
    char msg[300] = "";
    goblin_err e = gt_build1(op, in, n_in, attrs, n_attrs, NULL, msg, sizeof msg);
    cr_assert_eq(e, want, "%s: got %s (%s), want %s", goblin_op_name(op), goblin_err_name(e), msg,
                 goblin_err_name(want));
    if (needle) cr_assert(strstr(msg, needle), "message '%s' lacks '%s'", msg, needle);
}

/* ---- hand-derived values ---------------------------------------------------------- */

Test(reduce, sum_mean_max_min_prod_by_hand) {
    float x[6] = {1, 2, 3, 4, 5, 6}; /* [[1,2,3],[4,5,6]] */
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(2, 3), x);
    goblin_backend_kind bes[2] = {GOBLIN_BACKEND_REF, GOBLIN_BACKEND_BLIS};
    for (int b = 0; b < (have_blis() ? 2 : 1); b++) {
        goblin_attr a0 = A_INTS(AXES, 0), a1[2] = {A_INTS(AXES, -1), A_INT(KEEPDIM, 1)};
        goblin_tensor y = run_on(bes[b], 2, GOBLIN_OP_SUM, &in, 1, &a0, 1);
        check_shape(&y, 1, SHAPE(3));
        check_vals(&y, (double[]){5, 7, 9}, 3, 0, 0);
        goblin_buffer_free(y.data);
        y = run_on(bes[b], 2, GOBLIN_OP_SUM, &in, 1, a1, 2);
        check_shape(&y, 2, SHAPE(2, 1));
        check_vals(&y, (double[]){6, 15}, 2, 0, 0);
        goblin_buffer_free(y.data);
        y = run_on(bes[b], 2, GOBLIN_OP_SUM, &in, 1, NULL, 0);
        check_shape(&y, 0, NULL);
        check_vals(&y, (double[]){21}, 1, 0, 0);
        goblin_buffer_free(y.data);
        y = run_on(bes[b], 2, GOBLIN_OP_MEAN, &in, 1, a1, 2);
        check_vals(&y, (double[]){2, 5}, 2, 0, 0);
        goblin_buffer_free(y.data);
        y = run_on(bes[b], 2, GOBLIN_OP_REDUCE_MAX, &in, 1, &a0, 1);
        check_vals(&y, (double[]){4, 5, 6}, 3, 0, 0);
        goblin_buffer_free(y.data);
        y = run_on(bes[b], 2, GOBLIN_OP_REDUCE_MIN, &in, 1, a1, 2);
        check_vals(&y, (double[]){1, 4}, 2, 0, 0);
        goblin_buffer_free(y.data);
    }
    goblin_attr a1 = A_INTS(AXES, 1);
    goblin_tensor y = run_ref(GOBLIN_OP_PROD, &in, 1, &a1, 1);
    check_vals(&y, (double[]){6, 120}, 2, 0, 0);
    goblin_buffer_free(y.data);
    /* empty AXES means all axes (torch's dim=[]) */
    goblin_attr none = goblin_attr_ints(GOBLIN_ATTR_AXES, NULL, 0);
    y = run_ref(GOBLIN_OP_PROD, &in, 1, &none, 1);
    check_shape(&y, 0, NULL);
    check_vals(&y, (double[]){720}, 1, 0, 0);
    goblin_buffer_free(y.data);
}

Test(reduce, f16_and_bf16_round_once) {
    /* 2048 + 1 + 1 in f16: sequential f16 adds would stall at 2048 (ulp 2); the
     * reference accumulates wider and rounds once: 2050. */
    uint16_t h[3] = {0x6800, 0x3c00, 0x3c00}; /* 2048, 1, 1 */
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F16, 1, SHAPE(3), h);
    goblin_tensor y = run_ref(GOBLIN_OP_SUM, &in, 1, NULL, 0);
    cr_assert_eq(y.dtype, GOBLIN_DTYPE_F16);
    cr_assert_eq(((uint16_t *)y.data)[0], 0x6801); /* 2050 */
    goblin_buffer_free(y.data);
    uint16_t b[2] = {0x3f80, 0x4040}; /* bf16 1, 3 */
    in = gt_tensor(GOBLIN_DTYPE_BF16, 1, SHAPE(2), b);
    y = run_ref(GOBLIN_OP_MEAN, &in, 1, NULL, 0);
    cr_assert_eq(((uint16_t *)y.data)[0], 0x4000); /* 2 */
    goblin_buffer_free(y.data);
}

Test(reduce, integer_sums_are_i64_and_wrap) {
    int32_t x[3] = {INT32_MAX, INT32_MAX, 2};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_I32, 1, SHAPE(3), x);
    goblin_tensor y = run_ref(GOBLIN_OP_SUM, &in, 1, NULL, 0);
    cr_assert_eq(y.dtype, GOBLIN_DTYPE_I64);
    cr_assert_eq(((int64_t *)y.data)[0], 2LL * INT32_MAX + 2);
    goblin_buffer_free(y.data);
    int64_t big[2] = {INT64_MAX, 2};
    in = gt_tensor(GOBLIN_DTYPE_I64, 1, SHAPE(2), big);
    y = run_ref(GOBLIN_OP_SUM, &in, 1, NULL, 0);
    cr_assert_eq(((int64_t *)y.data)[0], INT64_MIN + 1);
    goblin_buffer_free(y.data);
    y = run_ref(GOBLIN_OP_PROD, &in, 1, NULL, 0);
    cr_assert_eq(((int64_t *)y.data)[0], -2); /* (2^63 - 1) * 2 mod 2^64 */
    goblin_buffer_free(y.data);
    uint8_t u[4] = {255, 255, 255, 1};
    in = gt_tensor(GOBLIN_DTYPE_U8, 1, SHAPE(4), u);
    y = run_ref(GOBLIN_OP_SUM, &in, 1, NULL, 0);
    cr_assert_eq(((int64_t *)y.data)[0], 766);
    goblin_buffer_free(y.data);
    y = run_ref(GOBLIN_OP_REDUCE_MAX, &in, 1, NULL, 0);
    cr_assert_eq(y.dtype, GOBLIN_DTYPE_U8);
    cr_assert_eq(((uint8_t *)y.data)[0], 255);
    goblin_buffer_free(y.data);
    goblin_attr ax = A_INT(AXIS, 0);
    y = run_ref(GOBLIN_OP_CUMSUM, &in, 1, &ax, 1);
    cr_assert_eq(y.dtype, GOBLIN_DTYPE_I64);
    check_vals(&y, (double[]){255, 510, 765, 766}, 4, 0, 0);
    goblin_buffer_free(y.data);
    uint8_t bl[4] = {1, 0, 1, 1};
    in = gt_tensor(GOBLIN_DTYPE_BOOL, 1, SHAPE(4), bl);
    y = run_ref(GOBLIN_OP_SUM, &in, 1, NULL, 0);
    cr_assert_eq(y.dtype, GOBLIN_DTYPE_I64);
    cr_assert_eq(((int64_t *)y.data)[0], 3);
    goblin_buffer_free(y.data);
    y = run_ref(GOBLIN_OP_REDUCE_MIN, &in, 1, NULL, 0);
    cr_assert_eq(y.dtype, GOBLIN_DTYPE_BOOL);
    cr_assert_eq(((uint8_t *)y.data)[0], 0);
    goblin_buffer_free(y.data);
}

Test(reduce, argmax_first_index_and_nan) {
    float x[8] = {3, 7, 7, 1, /* */ 2, NAN, 9, NAN};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(2, 4), x);
    goblin_attr a[2] = {A_INT(AXIS, 1), A_INT(KEEPDIM, 1)};
    goblin_tensor y = run_ref(GOBLIN_OP_ARGMAX, &in, 1, a, 2);
    cr_assert_eq(y.dtype, GOBLIN_DTYPE_I64);
    check_shape(&y, 2, SHAPE(2, 1));
    check_vals(&y, (double[]){1, 1}, 2, 0, 0);
    goblin_buffer_free(y.data);
    y = run_ref(GOBLIN_OP_ARGMIN, &in, 1, a, 2);
    check_vals(&y, (double[]){3, 1}, 2, 0, 0); /* the NaN is the extreme for argmin too */
    goblin_buffer_free(y.data);
    y = run_ref(GOBLIN_OP_ARGMAX, &in, 1, NULL, 0); /* flattened */
    check_shape(&y, 0, NULL);
    check_vals(&y, (double[]){5}, 1, 0, 0);
    goblin_buffer_free(y.data);
    goblin_attr k = A_INT(KEEPDIM, 1);
    y = run_ref(GOBLIN_OP_ARGMIN, &in, 1, &k, 1);
    check_shape(&y, 2, SHAPE(1, 1));
    check_vals(&y, (double[]){5}, 1, 0, 0);
    goblin_buffer_free(y.data);
    int16_t xi[5] = {-4, 9, -4, 9, 0};
    in = gt_tensor(GOBLIN_DTYPE_I16, 1, SHAPE(5), xi);
    y = run_ref(GOBLIN_OP_ARGMAX, &in, 1, NULL, 0);
    check_vals(&y, (double[]){1}, 1, 0, 0);
    goblin_buffer_free(y.data);
    y = run_ref(GOBLIN_OP_ARGMIN, &in, 1, NULL, 0);
    check_vals(&y, (double[]){0}, 1, 0, 0);
    goblin_buffer_free(y.data);
}

Test(reduce, nan_propagates_through_max_min_and_sums) {
    float x[6] = {1, NAN, 3, -INFINITY, 5, 6};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(2, 3), x);
    goblin_attr a = A_INTS(AXES, 1);
    goblin_backend_kind bes[2] = {GOBLIN_BACKEND_REF, GOBLIN_BACKEND_BLIS};
    for (int b = 0; b < (have_blis() ? 2 : 1); b++) {
        goblin_tensor y = run_on(bes[b], 1, GOBLIN_OP_REDUCE_MAX, &in, 1, &a, 1);
        check_vals(&y, (double[]){NAN, 6}, 2, 0, 0);
        goblin_buffer_free(y.data);
        y = run_on(bes[b], 1, GOBLIN_OP_REDUCE_MIN, &in, 1, &a, 1);
        check_vals(&y, (double[]){NAN, -INFINITY}, 2, 0, 0);
        goblin_buffer_free(y.data);
        y = run_on(bes[b], 1, GOBLIN_OP_SUM, &in, 1, &a, 1);
        check_vals(&y, (double[]){NAN, -INFINITY}, 2, 0, 0);
        goblin_buffer_free(y.data);
    }
}

Test(reduce, var_and_cumsum_by_hand) {
    double x[4] = {1, 2, 3, 4};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F64, 1, SHAPE(4), x);
    goblin_tensor y = run_ref(GOBLIN_OP_VAR, &in, 1, NULL, 0);
    check_vals(&y, (double[]){5.0 / 3.0}, 1, 1e-15, 0);
    goblin_buffer_free(y.data);
    goblin_attr c = A_INT(CORRECTION, 0);
    y = run_ref(GOBLIN_OP_VAR, &in, 1, &c, 1);
    check_vals(&y, (double[]){1.25}, 1, 0, 0);
    goblin_buffer_free(y.data);
    c = A_INT(CORRECTION, 4); /* k - correction = 0: 5/0 = inf, as torch */
    y = run_ref(GOBLIN_OP_VAR, &in, 1, &c, 1);
    check_vals(&y, (double[]){INFINITY}, 1, 0, 0);
    goblin_buffer_free(y.data);
    goblin_attr ax = A_INT(AXIS, -1);
    y = run_ref(GOBLIN_OP_CUMSUM, &in, 1, &ax, 1);
    check_vals(&y, (double[]){1, 3, 6, 10}, 4, 0, 0);
    goblin_buffer_free(y.data);
    float m[6] = {1, 2, 3, 4, 5, 6};
    in = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(2, 3), m);
    ax = A_INT(AXIS, 0);
    y = run_ref(GOBLIN_OP_CUMSUM, &in, 1, &ax, 1);
    check_vals(&y, (double[]){1, 2, 3, 5, 7, 9}, 6, 0, 0);
    goblin_buffer_free(y.data);
}

Test(reduce, softmax_by_hand) {
    /* exp(x) = 1, 2, 3, 6 (ratios), so softmax = 1/12, 2/12, 3/12, 6/12 */
    double x[4] = {0, log(2.0), log(3.0), log(6.0)};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F64, 2, SHAPE(1, 4), x);
    double want[4] = {1 / 12.0, 2 / 12.0, 3 / 12.0, 6 / 12.0}, lwant[4];
    for (int i = 0; i < 4; i++) lwant[i] = log(want[i]);
    goblin_backend_kind bes[2] = {GOBLIN_BACKEND_REF, GOBLIN_BACKEND_BLIS};
    for (int b = 0; b < (have_blis() ? 2 : 1); b++) {
        goblin_tensor y = run_on(bes[b], 1, GOBLIN_OP_SOFTMAX, &in, 1, NULL, 0);
        check_vals(&y, want, 4, 1e-15, 0);
        goblin_buffer_free(y.data);
        y = run_on(bes[b], 1, GOBLIN_OP_LOG_SOFTMAX, &in, 1, NULL, 0);
        check_vals(&y, lwant, 4, 1e-15, 0);
        goblin_buffer_free(y.data);
        /* stability: a huge offset changes nothing */
        double xs[4];
        for (int i = 0; i < 4; i++) xs[i] = x[i] + 1e4;
        goblin_tensor ins = gt_tensor(GOBLIN_DTYPE_F64, 2, SHAPE(1, 4), xs);
        y = run_on(bes[b], 1, GOBLIN_OP_SOFTMAX, &ins, 1, NULL, 0);
        check_vals(&y, want, 4, 1e-11, 0);
        goblin_buffer_free(y.data);
        /* along axis 0 of a [4, 1] view of the same numbers */
        goblin_tensor inc = gt_tensor(GOBLIN_DTYPE_F64, 2, SHAPE(4, 1), x);
        goblin_attr a = A_INT(AXIS, 0);
        y = run_on(bes[b], 1, GOBLIN_OP_SOFTMAX, &inc, 1, &a, 1);
        check_vals(&y, want, 4, 1e-15, 0);
        goblin_buffer_free(y.data);
    }
    /* an all -inf row and a row with +inf are NaN (torch) */
    float s[4] = {-INFINITY, -INFINITY, INFINITY, 1};
    goblin_tensor sp = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(2, 2), s);
    goblin_tensor y = run_ref(GOBLIN_OP_SOFTMAX, &sp, 1, NULL, 0);
    check_vals(&y, (double[]){NAN, NAN, NAN, NAN}, 4, 0, 0);
    goblin_buffer_free(y.data);
}

Test(reduce, norms_by_hand) {
    double x[4] = {0, 2, 3, 4}; /* rows [0, 2] and [3, 4] */
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F64, 2, SHAPE(2, 2), x);
    double r = 1 / sqrt(1 + 1e-5);
    goblin_backend_kind bes[2] = {GOBLIN_BACKEND_REF, GOBLIN_BACKEND_BLIS};
    for (int b = 0; b < (have_blis() ? 2 : 1); b++) {
        goblin_tensor y = run_on(bes[b], 1, GOBLIN_OP_LAYER_NORM, &in, 1, NULL, 0);
        double want[4] = {-r, r, -1 / sqrt(0.25 + 1e-5) * 0.5, 1 / sqrt(0.25 + 1e-5) * 0.5};
        check_vals(&y, want, 4, 1e-15, 0);
        goblin_buffer_free(y.data);
        double w[2] = {2, 10}, bb[2] = {1, -1};
        goblin_tensor ins[3] = {in, gt_tensor(GOBLIN_DTYPE_F64, 1, SHAPE(2), w),
                                gt_tensor(GOBLIN_DTYPE_F64, 1, SHAPE(2), bb)};
        y = run_on(bes[b], 1, GOBLIN_OP_LAYER_NORM, ins, 3, NULL, 0);
        double want2[4] = {-2 * r + 1, 10 * r - 1, want[2] * 2 + 1, want[3] * 10 - 1};
        check_vals(&y, want2, 4, 1e-15, 0);
        goblin_buffer_free(y.data);
        /* rms of [3, 4] = sqrt(12.5) */
        y = run_on(bes[b], 1, GOBLIN_OP_RMS_NORM, ins, 2, NULL, 0);
        double q0 = 1 / sqrt(2 + 1e-6), q1 = 1 / sqrt(12.5 + 1e-6);
        double want3[4] = {0, 2 * q0 * 10, 3 * q1 * 2, 4 * q1 * 10};
        check_vals(&y, want3, 4, 1e-15, 0);
        goblin_buffer_free(y.data);
        goblin_attr nd = A_INT(NORM_NDIM, 2); /* all four numbers: mean 2.25, var 2.1875 */
        y = run_on(bes[b], 1, GOBLIN_OP_LAYER_NORM, &in, 1, &nd, 1);
        double s = 1 / sqrt(2.1875 + 1e-5);
        check_vals(&y, (double[]){-2.25 * s, -0.25 * s, 0.75 * s, 1.75 * s}, 4, 1e-15, 0);
        goblin_buffer_free(y.data);
    }
}

Test(reduce, batch_norm_by_hand) {
    /* x [2, 2, 2]: channel 0 holds {1, 3, 5, 7}, channel 1 holds {0, 0, 4, 4} */
    double x[8] = {1, 3, 0, 0, 5, 7, 4, 4};
    double w[2] = {2, 1}, b[2] = {0, 1}, rm[2] = {1, 0}, rv[2] = {4, 1};
    goblin_tensor in[5] = {gt_tensor(GOBLIN_DTYPE_F64, 3, SHAPE(2, 2, 2), x),
                           gt_tensor(GOBLIN_DTYPE_F64, 1, SHAPE(2), w),
                           gt_tensor(GOBLIN_DTYPE_F64, 1, SHAPE(2), b),
                           gt_tensor(GOBLIN_DTYPE_F64, 1, SHAPE(2), rm),
                           gt_tensor(GOBLIN_DTYPE_F64, 1, SHAPE(2), rv)};
    goblin_attr a[2] = {A_INT(TRAINING, 1), A_FLT(EPS, 0.0)};
    goblin_tensor y = run_ref(GOBLIN_OP_BATCH_NORM, in, 5, a, 2);
    /* channel 0: mean 4, biased var 5; channel 1: mean 2, var 4 */
    double s0 = 2 / sqrt(5.0);
    double want[8] = {-3 * s0, -1 * s0, -1 + 1, -1 + 1, 1 * s0, 3 * s0, 1 + 1, 1 + 1};
    check_vals(&y, want, 8, 1e-15, 0);
    goblin_buffer_free(y.data);
    a[0] = A_INT(TRAINING, 0); /* running statistics */
    y = run_ref(GOBLIN_OP_BATCH_NORM, in, 5, a, 2);
    double want2[8] = {0, 2, 1, 1, 4, 6, 5, 5};
    check_vals(&y, want2, 8, 1e-15, 0);
    goblin_buffer_free(y.data);
}

Test(reduce, losses_by_hand) {
    /* log_probs [3, 2], targets {1, 0, -100}, weight {1, 3} */
    double lp[6] = {-1, -2, -3, -4, -5, -6};
    int64_t t[3] = {1, 0, -100};
    double w[2] = {1, 3};
    goblin_tensor in[3] = {gt_tensor(GOBLIN_DTYPE_F64, 2, SHAPE(3, 2), lp),
                           gt_tensor(GOBLIN_DTYPE_I64, 1, SHAPE(3), t),
                           gt_tensor(GOBLIN_DTYPE_F64, 1, SHAPE(2), w)};
    goblin_tensor y = run_ref(GOBLIN_OP_NLL_LOSS, in, 2, NULL, 0);
    check_vals(&y, (double[]){(2 + 3) / 2.0}, 1, 1e-15, 0);
    goblin_buffer_free(y.data);
    y = run_ref(GOBLIN_OP_NLL_LOSS, in, 3, NULL, 0); /* weighted mean: (3*2 + 1*3) / (3 + 1) */
    check_vals(&y, (double[]){9 / 4.0}, 1, 1e-15, 0);
    goblin_buffer_free(y.data);
    goblin_attr none = A_INT(REDUCTION, GOBLIN_REDUCTION_NONE);
    y = run_ref(GOBLIN_OP_NLL_LOSS, in, 3, &none, 1);
    check_shape(&y, 1, SHAPE(3));
    check_vals(&y, (double[]){6, 3, 0}, 3, 0, 0);
    goblin_buffer_free(y.data);
    /* cross entropy of equal logits is log C; label smoothing keeps it log C */
    double z[6] = {0.5, 0.5, 0.5, 0.5, 0.5, 0.5};
    in[0] = gt_tensor(GOBLIN_DTYPE_F64, 2, SHAPE(2, 3), z);
    int64_t t2[2] = {2, 0};
    in[1] = gt_tensor(GOBLIN_DTYPE_I64, 1, SHAPE(2), t2);
    goblin_attr ls = A_FLT(LABEL_SMOOTHING, 0.3);
    y = run_ref(GOBLIN_OP_CROSS_ENTROPY, in, 2, &ls, 1);
    check_vals(&y, (double[]){log(3.0)}, 1, 1e-15, 0);
    goblin_buffer_free(y.data);
    /* logits [0, ln 3] for 2 classes: p = 1/4, 3/4; target 0: nll = ln 4;
     * smoothing 0.5: 0.5 * ln 4 + 0.25 * (ln 4 + ln(4/3)) */
    double z2[2] = {0, log(3.0)};
    int64_t t3 = 0;
    in[0] = gt_tensor(GOBLIN_DTYPE_F64, 1, SHAPE(2), z2);
    in[1] = gt_tensor(GOBLIN_DTYPE_I64, 0, NULL, &t3);
    ls = A_FLT(LABEL_SMOOTHING, 0.5);
    y = run_ref(GOBLIN_OP_CROSS_ENTROPY, in, 2, &ls, 1);
    check_vals(&y, (double[]){0.5 * log(4.0) + 0.25 * (log(4.0) + log(4.0 / 3.0))}, 1, 1e-15, 0);
    goblin_buffer_free(y.data);
}

/* ---- empty inputs and errors -------------------------------------------------------- */

Test(reduce, empty_reductions) {
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(0, 3), NULL);
    goblin_attr a0 = A_INTS(AXES, 0);
    goblin_tensor y = run_ref(GOBLIN_OP_SUM, &in, 1, &a0, 1);
    check_vals(&y, (double[]){0, 0, 0}, 3, 0, 0);
    goblin_buffer_free(y.data);
    y = run_ref(GOBLIN_OP_PROD, &in, 1, &a0, 1);
    check_vals(&y, (double[]){1, 1, 1}, 3, 0, 0);
    goblin_buffer_free(y.data);
    y = run_ref(GOBLIN_OP_MEAN, &in, 1, &a0, 1);
    check_vals(&y, (double[]){NAN, NAN, NAN}, 3, 0, 0);
    goblin_buffer_free(y.data);
    if (have_blis()) {
        y = run_on(GOBLIN_BACKEND_BLIS, 2, GOBLIN_OP_MEAN, &in, 1, &a0, 1);
        check_vals(&y, (double[]){NAN, NAN, NAN}, 3, 0, 0);
        goblin_buffer_free(y.data);
    }
    goblin_attr a1 = A_INTS(AXES, 1); /* reduces a non-empty axis of an empty tensor */
    y = run_ref(GOBLIN_OP_REDUCE_MAX, &in, 1, &a1, 1);
    check_shape(&y, 1, SHAPE(0));
    goblin_buffer_free(y.data);
    build_fails(GOBLIN_ERANGE, "zero elements", GOBLIN_OP_REDUCE_MAX, &in, 1, &a0, 1);
    build_fails(GOBLIN_ERANGE, "zero elements", GOBLIN_OP_REDUCE_MIN, &in, 1, NULL, 0);
    build_fails(GOBLIN_ERANGE, "zero elements", GOBLIN_OP_ARGMAX, &in, 1, NULL, 0);
    goblin_attr ax0 = A_INT(AXIS, 0);
    build_fails(GOBLIN_ERANGE, "zero elements", GOBLIN_OP_ARGMIN, &in, 1, &ax0, 1);
}

Test(reduce, build_errors) {
    float x[6] = {0};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(2, 3), x);
    goblin_attr dup = A_INTS(AXES, 0, -2);
    build_fails(GOBLIN_EINVAL, "twice", GOBLIN_OP_SUM, &in, 1, &dup, 1);
    goblin_attr bad = A_INTS(AXES, 2);
    build_fails(GOBLIN_ERANGE, NULL, GOBLIN_OP_MEAN, &in, 1, &bad, 1);
    goblin_attr bad_axis = A_INT(AXIS, -3);
    build_fails(GOBLIN_ERANGE, NULL, GOBLIN_OP_SOFTMAX, &in, 1, &bad_axis, 1);
    build_fails(GOBLIN_EINVAL, NULL, GOBLIN_OP_CUMSUM, &in, 1, NULL, 0); /* AXIS required */
    int32_t xi[6] = {0};
    goblin_tensor ini = gt_tensor(GOBLIN_DTYPE_I32, 2, SHAPE(2, 3), xi);
    build_fails(GOBLIN_EDTYPE, NULL, GOBLIN_OP_MEAN, &ini, 1, NULL, 0);
    build_fails(GOBLIN_EDTYPE, NULL, GOBLIN_OP_LOG_SOFTMAX, &ini, 1, NULL, 0);
    build_fails(GOBLIN_EDTYPE, NULL, GOBLIN_OP_LAYER_NORM, &ini, 1, NULL, 0);
    goblin_attr nd = A_INT(NORM_NDIM, 3);
    build_fails(GOBLIN_ERANGE, "norm_ndim", GOBLIN_OP_RMS_NORM, &in, 1, &nd, 1);
    float w[2] = {0};
    goblin_tensor lw[2] = {in, gt_tensor(GOBLIN_DTYPE_F32, 1, SHAPE(2), w)};
    build_fails(GOBLIN_ESHAPE, "weight", GOBLIN_OP_LAYER_NORM, lw, 2, NULL, 0);
    /* losses */
    int64_t t[2] = {0, 1};
    goblin_tensor li[3] = {in, gt_tensor(GOBLIN_DTYPE_I64, 1, SHAPE(2), t),
                           gt_tensor(GOBLIN_DTYPE_F32, 1, SHAPE(2), w)};
    build_fails(GOBLIN_ESHAPE, "weight", GOBLIN_OP_NLL_LOSS, li, 3, NULL, 0);
    goblin_tensor lf[2] = {in, gt_tensor(GOBLIN_DTYPE_F32, 1, SHAPE(2), w)};
    build_fails(GOBLIN_EDTYPE, "class indices", GOBLIN_OP_CROSS_ENTROPY, lf, 2, NULL, 0);
    goblin_tensor lt[2] = {in, gt_tensor(GOBLIN_DTYPE_I64, 1, SHAPE(3), x)};
    build_fails(GOBLIN_ESHAPE, "target", GOBLIN_OP_NLL_LOSS, lt, 2, NULL, 0);
    goblin_attr red = A_INT(REDUCTION, 3);
    build_fails(GOBLIN_ERANGE, NULL, GOBLIN_OP_NLL_LOSS, li, 2, &red, 1);
    goblin_attr lsm = A_FLT(LABEL_SMOOTHING, -0.1);
    build_fails(GOBLIN_ERANGE, NULL, GOBLIN_OP_CROSS_ENTROPY, li, 2, &lsm, 1);
    /* batch norm: five inputs of shape [C] */
    goblin_tensor bn[5] = {in, gt_tensor(GOBLIN_DTYPE_F32, 1, SHAPE(2), w), lw[1], lw[1], lw[1]};
    build_fails(GOBLIN_ESHAPE, "weight", GOBLIN_OP_BATCH_NORM, bn, 5, NULL, 0);
    build_fails(GOBLIN_EINVAL, NULL, GOBLIN_OP_BATCH_NORM, bn, 3, NULL, 0);
}

Test(reduce, target_out_of_range_is_eindex) {
    float lp[6] = {0};
    int64_t t[2] = {1, 3};
    goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(2, 3), lp),
                           gt_tensor(GOBLIN_DTYPE_I64, 1, SHAPE(2), t)};
    goblin_op ops[2] = {GOBLIN_OP_NLL_LOSS, GOBLIN_OP_CROSS_ENTROPY};
    for (int i = 0; i < 2; i++) {
        goblin_tensor out;
        char msg[300] = "";
        goblin_err e =
            gt_run1(ops[i], in, 2, NULL, 0, GOBLIN_BACKEND_REF, 1, &out, msg, sizeof msg);
        cr_assert_eq(e, GOBLIN_EINDEX, "got %s (%s)", goblin_err_name(e), msg);
        cr_assert(strstr(msg, "target 3"), "message '%s'", msg);
    }
    goblin_attr ig = A_INT(IGNORE_INDEX, 3); /* now it is ignored */
    goblin_tensor y = run_ref(GOBLIN_OP_NLL_LOSS, in, 2, &ig, 1);
    check_vals(&y, (double[]){0}, 1, 0, 0);
    goblin_buffer_free(y.data);
}

Test(reduce, catalogue_entries_and_contracts) {
    goblin_op ops[] = {GOBLIN_OP_SUM, GOBLIN_OP_MEAN, GOBLIN_OP_REDUCE_MAX, GOBLIN_OP_REDUCE_MIN,
                       GOBLIN_OP_PROD, GOBLIN_OP_ARGMAX, GOBLIN_OP_ARGMIN, GOBLIN_OP_VAR,
                       GOBLIN_OP_CUMSUM, GOBLIN_OP_SOFTMAX, GOBLIN_OP_LOG_SOFTMAX,
                       GOBLIN_OP_BATCH_NORM, GOBLIN_OP_LAYER_NORM, GOBLIN_OP_RMS_NORM,
                       GOBLIN_OP_NLL_LOSS, GOBLIN_OP_CROSS_ENTROPY};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        goblin_op_info info;
        cr_assert_eq(goblin_op_get_info(ops[i], &info), GOBLIN_OK, "%s", goblin_op_name(ops[i]));
        cr_assert(strlen(info.summary) > 10 && strlen(info.semantics) > 10);
        cr_assert(strlen(info.contract) > 4);
    }
    double rel, ab;
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_SUM, GOBLIN_DTYPE_F32, 1000, &rel, &ab), GOBLIN_OK);
    double u = 0x1p-24;
    cr_assert(fabs(rel - (1000 * u / (1 - 1000 * u) + u)) < 1e-18 && ab == 0);
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_SUM, GOBLIN_DTYPE_I32, 1000, &rel, &ab), GOBLIN_OK);
    cr_assert(rel == 0 && ab == 0);
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_REDUCE_MAX, GOBLIN_DTYPE_F32, 9, &rel, &ab), GOBLIN_OK);
    cr_assert(rel == 0 && ab == 0);
    /* past k u >= 1 there is no rigorous bound */
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_SUM, GOBLIN_DTYPE_BF16, 1000, &rel, &ab), GOBLIN_OK);
    cr_assert(isinf(rel));
}

/* ---- BLIS against the reference, and thread-count determinism ------------------------ */

typedef struct bcase {
    goblin_op op;
    int32_t rank;
    int64_t shape[3];
    int64_t axes[3];
    int32_t n_axes; /* -1: no AXES attribute */
} bcase;

static double scale_of(goblin_op op, const double *xs, int64_t k) {
    /* sum |x| over the slice for sums; mean |x| for means */
    double s = 0;
    for (int64_t i = 0; i < k; i++) s += fabs(xs[i]);
    return op == GOBLIN_OP_MEAN ? s / (double)k : s;
}

/* BLIS with 1, 2 and 3 threads gives the same bytes, and agrees with the
 * reference within the contract. Sizes cross the 65536-element block size. */
static void blis_vs_ref(goblin_dtype dt) {
    if (!have_blis()) return;
    const bcase cases[] = {
        {GOBLIN_OP_SUM, 1, {200003}, {0}, -1},
        {GOBLIN_OP_MEAN, 2, {3, 150001}, {1}, 1},
        {GOBLIN_OP_SUM, 2, {3, 150001}, {-1}, 1},
        {GOBLIN_OP_REDUCE_MAX, 1, {200003}, {0}, -1},
        {GOBLIN_OP_REDUCE_MIN, 2, {7, 40001}, {1}, 1},
        {GOBLIN_OP_SUM, 2, {40001, 7}, {0}, 1},         /* leading axis, row-blocked */
        {GOBLIN_OP_MEAN, 3, {2, 3001, 1100}, {1}, 1},   /* middle axis, wide rows */
        {GOBLIN_OP_REDUCE_MAX, 2, {30001, 5}, {0}, 1},
        {GOBLIN_OP_SUM, 3, {5, 7, 9}, {0, 1}, 2},
        {GOBLIN_OP_SOFTMAX, 2, {300, 1001}, {0}, -1},
        {GOBLIN_OP_LOG_SOFTMAX, 2, {300, 77}, {0}, -1},
        {GOBLIN_OP_LAYER_NORM, 2, {300, 1001}, {0}, -1},
        {GOBLIN_OP_RMS_NORM, 2, {300, 33}, {0}, -1},
    };
    size_t es = goblin_dtype_size(dt);
    uint64_t seed = 12345;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const bcase *bc = &cases[c];
        int64_t n = 1;
        for (int32_t d = 0; d < bc->rank; d++) n *= bc->shape[d];
        void *buf = malloc((size_t)n * es);
        double *xs = malloc((size_t)n * sizeof(double));
        cr_assert(buf && xs);
        for (int64_t i = 0; i < n; i++) {
            double v = (gt_rand(&seed) - 0.5) * 8 + 1;
            if (dt == GOBLIN_DTYPE_F32) {
                ((float *)buf)[i] = (float)v;
                xs[i] = (float)v;
            } else {
                ((double *)buf)[i] = v;
                xs[i] = v;
            }
        }
        goblin_tensor in = gt_tensor(dt, bc->rank, bc->shape, buf);
        goblin_attr a = goblin_attr_ints(GOBLIN_ATTR_AXES, bc->axes, bc->n_axes);
        int32_t na = bc->n_axes >= 0 ? 1 : 0;
        goblin_tensor ref = run_ref(bc->op, &in, 1, &a, na);
        goblin_tensor t1 = run_on(GOBLIN_BACKEND_BLIS, 1, bc->op, &in, 1, &a, na);
        int64_t m = goblin_tensor_numel(&ref);
        for (int32_t th = 2; th <= 4; th++) { /* 4: threads = 0, "all cores" */
            goblin_tensor tn = run_on(GOBLIN_BACKEND_BLIS, th % 4, bc->op, &in, 1, &a, na);
            cr_assert(memcmp(tn.data, t1.data, (size_t)m * es) == 0,
                      "case %zu (%s): %d threads differ from 1", c, goblin_op_name(bc->op), th);
            goblin_buffer_free(tn.data);
        }
        /* within the contract of the reference */
        bool rowwise = bc->op == GOBLIN_OP_SOFTMAX || bc->op == GOBLIN_OP_LOG_SOFTMAX ||
                       bc->op == GOBLIN_OP_LAYER_NORM || bc->op == GOBLIN_OP_RMS_NORM;
        int64_t k = rowwise ? bc->shape[bc->rank - 1] : n / m;
        double rel, ab;
        goblin_op_contract(bc->op, dt, k, &rel, &ab);
        double *slice = malloc((size_t)k * sizeof(double));
        cr_assert(slice);
        for (int64_t o = 0; o < m; o++) {
            double r = dt == GOBLIN_DTYPE_F32 ? ((float *)ref.data)[o] : ((double *)ref.data)[o];
            double g = dt == GOBLIN_DTYPE_F32 ? ((float *)t1.data)[o] : ((double *)t1.data)[o];
            double scale;
            if (rowwise) {
                const double *row = xs + (o / k) * k;
                double mu = 0, ms = 0, sq = 0, am = 0;
                for (int64_t j = 0; j < k; j++) {
                    mu += row[j];
                    am += fabs(row[j]);
                }
                mu /= (double)k;
                am /= (double)k;
                for (int64_t j = 0; j < k; j++) {
                    sq += (row[j] - mu) * (row[j] - mu);
                    ms += row[j] * row[j];
                }
                if (bc->op == GOBLIN_OP_LAYER_NORM)
                    scale = (fabs(xs[o]) + am) / sqrt(sq / (double)k + 1e-5);
                else if (bc->op == GOBLIN_OP_RMS_NORM)
                    scale = fabs(xs[o]) / sqrt(ms / (double)k + 1e-6);
                else
                    scale = fabs(r);
            } else if (bc->op == GOBLIN_OP_REDUCE_MAX || bc->op == GOBLIN_OP_REDUCE_MIN) {
                scale = 0; /* exact */
            } else {
                /* gather the reduced slice of output o (generic over the cases above) */
                int64_t kept[3], nk = 0, red[3], nr = 0;
                for (int32_t d = 0; d < bc->rank; d++) {
                    bool r_ = bc->n_axes < 0;
                    for (int32_t q = 0; q < bc->n_axes; q++)
                        r_ |= (bc->axes[q] + bc->rank) % bc->rank == d;
                    if (r_) red[nr++] = d;
                    else kept[nk++] = d;
                }
                int64_t idx[3] = {0, 0, 0}, rest = o;
                for (int64_t q = nk - 1; q >= 0; q--) {
                    idx[kept[q]] = rest % bc->shape[kept[q]];
                    rest /= bc->shape[kept[q]];
                }
                for (int64_t j = 0; j < k; j++) {
                    int64_t jr = j;
                    for (int64_t q = nr - 1; q >= 0; q--) {
                        idx[red[q]] = jr % bc->shape[red[q]];
                        jr /= bc->shape[red[q]];
                    }
                    int64_t off = 0;
                    for (int32_t d = 0; d < bc->rank; d++) off = off * bc->shape[d] + idx[d];
                    slice[j] = xs[off];
                }
                scale = scale_of(bc->op, slice, k);
            }
            /* twice the contract: the reference itself is within it too */
            cr_assert(fabs(g - r) <= 2 * (rel * scale + ab),
                      "case %zu (%s) element %lld: blis %.17g ref %.17g", c,
                      goblin_op_name(bc->op), (long long)o, g, r);
        }
        free(slice);
        goblin_buffer_free(ref.data);
        goblin_buffer_free(t1.data);
        free(buf);
        free(xs);
    }
}

Test(reduce, blis_matches_ref_and_threads_f32, .timeout = 120) { blis_vs_ref(GOBLIN_DTYPE_F32); }
Test(reduce, blis_matches_ref_and_threads_f64, .timeout = 120) { blis_vs_ref(GOBLIN_DTYPE_F64); }

Test(reduce, blis_softmax_underflow_and_nan_rows) {
    if (!have_blis()) return;
    /* one row with a NaN (all NaN), one with values 100 apart (exp underflows to 0 in f32) */
    float x[2 * 40];
    for (int i = 0; i < 40; i++) {
        x[i] = (float)i;
        x[40 + i] = i == 3 ? 0.0f : -100.0f - (float)i;
    }
    x[17] = NAN;
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 2, SHAPE(2, 40), x);
    goblin_tensor r = run_ref(GOBLIN_OP_SOFTMAX, &in, 1, NULL, 0);
    goblin_tensor b = run_on(GOBLIN_BACKEND_BLIS, 2, GOBLIN_OP_SOFTMAX, &in, 1, NULL, 0);
    for (int i = 0; i < 80; i++) {
        float rv = ((float *)r.data)[i], bv = ((float *)b.data)[i];
        if (i < 40) cr_assert(isnan(rv) && isnan(bv), "element %d", i);
        else cr_assert(fabsf(rv - bv) <= 4e-7f * (fabsf(rv) + 1e-30f) + 1e-38f, "element %d: %g vs %g", i, bv, rv);
    }
    goblin_buffer_free(r.data);
    goblin_buffer_free(b.data);
}
