/* tests/unit/test_ops_elementwise.c - the elementwise group (libgoblin/ops_elementwise.c,
 * backends/ref/ref_elementwise.c, backends/blis/blis_elementwise.c, scalar_ops.h).
 *
 * Expected values are derived by hand (the comments say how), never taken from
 * the library's own output. The BLIS tests compare the fast path bit for bit with
 * the reference backend. */
#include <criterion/criterion.h>
#include <stdint.h>
#include "testutil.h"

#define SH(...) ((int64_t[]){__VA_ARGS__})
#define F32 GOBLIN_DTYPE_F32
#define F64 GOBLIN_DTYPE_F64
#define F16 GOBLIN_DTYPE_F16
#define BF16 GOBLIN_DTYPE_BF16
#define I8 GOBLIN_DTYPE_I8
#define I16 GOBLIN_DTYPE_I16
#define I32 GOBLIN_DTYPE_I32
#define I64 GOBLIN_DTYPE_I64
#define U8 GOBLIN_DTYPE_U8
#define BOOL GOBLIN_DTYPE_BOOL
#define REF GOBLIN_BACKEND_REF
#define BLIS GOBLIN_BACKEND_BLIS

static bool have_blis(void) { return goblin_backend_available(BLIS) == GOBLIN_OK; }

/* Evaluate op on @p backend; asserts success and returns the output (free its data). */
static goblin_tensor ev_on(goblin_op op, const goblin_tensor *ins, int32_t n,
                           const goblin_attr *attrs, int32_t na, goblin_backend_kind be,
                           int32_t threads) {
    goblin_tensor out;
    char msg[300];
    goblin_err e = gt_run1(op, ins, n, attrs, na, be, threads, &out, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_OK, "%s on %s: %s (%s)", goblin_op_name(op), goblin_backend_name(be),
                 goblin_err_name(e), msg);
    return out;
}

static goblin_tensor ev(goblin_op op, const goblin_tensor *ins, int32_t n, const goblin_attr *attrs,
                        int32_t na) {
    return ev_on(op, ins, n, attrs, na, REF, 1);
}

/* Build-time error and its message. */
static goblin_err build_err(goblin_op op, const goblin_tensor *ins, int32_t n,
                            const goblin_attr *attrs, int32_t na, char *msg, size_t cap) {
    return gt_build1(op, ins, n, attrs, na, NULL, msg, cap);
}

static goblin_tensor t1(goblin_dtype dt, int64_t n, void *data) {
    return gt_tensor(dt, 1, SH(n), data);
}

/* Run a binary op on REF (and BLIS when built) and check every output element of a
 * 1-d result against expect (as raw bytes of the output dtype). */
static void check_bin(goblin_op op, goblin_dtype dt, int64_t n, void *a, void *b,
                      const void *expect, size_t out_es) {
    goblin_tensor in[2] = {t1(dt, n, a), t1(dt, n, b)};
    goblin_backend_kind bes[2] = {REF, BLIS};
    for (int i = 0; i < 2; i++) {
        if (bes[i] == BLIS && !have_blis()) continue;
        goblin_tensor o = ev_on(op, in, 2, NULL, 0, bes[i], 2);
        cr_assert_eq(o.rank, 1);
        cr_assert_eq(o.shape[0], n);
        for (int64_t k = 0; k < n; k++)
            cr_assert(memcmp((char *)o.data + k * out_es, (const char *)expect + k * out_es,
                             out_es) == 0,
                      "%s %s on %s: element %lld differs", goblin_op_name(op),
                      goblin_dtype_name(dt), goblin_backend_name(bes[i]), (long long)k);
        goblin_buffer_free(o.data);
    }
}

/* ---- arithmetic -------------------------------------------------------------------- */

Test(elementwise, add_broadcasts_rows_and_columns) {
    float a[6] = {1, 2, 3, 4, 5, 6}; /* [2,3] */
    float b[3] = {10, 20, 30};       /* [3] */
    float c[2] = {100, 200};         /* [2,1] */
    goblin_backend_kind bes[2] = {REF, BLIS};
    for (int i = 0; i < 2; i++) {
        if (bes[i] == BLIS && !have_blis()) continue;
        goblin_tensor in[2] = {gt_tensor(F32, 2, SH(2, 3), a), gt_tensor(F32, 1, SH(3), b)};
        goblin_tensor o = ev_on(GOBLIN_OP_ADD, in, 2, NULL, 0, bes[i], 2);
        float e1[6] = {11, 22, 33, 14, 25, 36};
        cr_assert_eq(o.rank, 2);
        cr_assert_arr_eq(o.data, e1, sizeof e1);
        goblin_buffer_free(o.data);
        /* [2,1] x [3] -> [2,3] (both operands expand) */
        goblin_tensor in2[2] = {gt_tensor(F32, 2, SH(2, 1), c), gt_tensor(F32, 1, SH(3), b)};
        o = ev_on(GOBLIN_OP_SUB, in2, 2, NULL, 0, bes[i], 2);
        float e2[6] = {90, 80, 70, 190, 180, 170};
        cr_assert_eq(o.shape[0], 2);
        cr_assert_eq(o.shape[1], 3);
        cr_assert_arr_eq(o.data, e2, sizeof e2);
        goblin_buffer_free(o.data);
    }
}

Test(elementwise, rank0_scalar_operands) {
    double s = 2, v[3] = {1, 2, 3};
    goblin_tensor in[2] = {gt_tensor(F64, 0, NULL, &s), t1(F64, 3, v)};
    goblin_tensor o = ev(GOBLIN_OP_DIV, in, 2, NULL, 0);
    double e[3] = {2, 1, 2.0 / 3.0};
    cr_assert_arr_eq(o.data, e, sizeof e);
    goblin_buffer_free(o.data);
    goblin_tensor in2[2] = {gt_tensor(F64, 0, NULL, &s), gt_tensor(F64, 0, NULL, &s)};
    o = ev(GOBLIN_OP_MUL, in2, 2, NULL, 0);
    cr_assert_eq(o.rank, 0);
    cr_assert_eq(((double *)o.data)[0], 4);
    goblin_buffer_free(o.data);
}

Test(elementwise, integer_add_sub_mul_wrap) {
    int8_t a8[3] = {127, -128, 100}, b8[3] = {1, -1, 100};
    int8_t add8[3] = {-128, 127, -56}; /* 200 - 256 */
    check_bin(GOBLIN_OP_ADD, I8, 3, a8, b8, add8, 1);
    int8_t mul8[3] = {127, -128, 16}; /* -128 * -1 = 128 -> -128; 10000 mod 256 = 16 */
    check_bin(GOBLIN_OP_MUL, I8, 3, a8, b8, mul8, 1);
    int16_t a16[2] = {-32768, 300}, b16[2] = {-1, 300};
    int16_t mul16[2] = {-32768, 24464}; /* 90000 - 65536 */
    check_bin(GOBLIN_OP_MUL, I16, 2, a16, b16, mul16, 2);
    int32_t a32[2] = {INT32_MIN, INT32_MAX}, b32[2] = {1, -1};
    int32_t sub32[2] = {INT32_MAX, INT32_MIN};
    check_bin(GOBLIN_OP_SUB, I32, 2, a32, b32, sub32, 4);
    int64_t a64[2] = {INT64_MAX, INT64_C(1) << 62}, b64[2] = {1, 4};
    int64_t add64[2] = {INT64_MIN, (INT64_C(1) << 62) + 4};
    int64_t mul64[2] = {INT64_MAX, 0}; /* 2^64 mod 2^64 = 0 */
    check_bin(GOBLIN_OP_ADD, I64, 2, a64, b64, add64, 8);
    check_bin(GOBLIN_OP_MUL, I64, 2, a64, b64, mul64, 8);
    uint8_t au[2] = {200, 3}, bu[2] = {100, 5};
    uint8_t addu[2] = {44, 8}, subu[2] = {100, 254};
    check_bin(GOBLIN_OP_ADD, U8, 2, au, bu, addu, 1);
    check_bin(GOBLIN_OP_SUB, U8, 2, au, bu, subu, 1);
}

Test(elementwise, bool_arithmetic_is_logic) {
    uint8_t a[4] = {0, 0, 1, 7}, b[4] = {0, 1, 0, 2}; /* 7 and 2 are "true" bytes */
    uint8_t or_[4] = {0, 1, 1, 1}, and_[4] = {0, 0, 0, 1};
    check_bin(GOBLIN_OP_ADD, BOOL, 4, a, b, or_, 1);
    check_bin(GOBLIN_OP_MUL, BOOL, 4, a, b, and_, 1);
    check_bin(GOBLIN_OP_MAXIMUM, BOOL, 4, a, b, or_, 1);
    check_bin(GOBLIN_OP_MINIMUM, BOOL, 4, a, b, and_, 1);
    goblin_tensor in[2] = {t1(BOOL, 4, a), t1(BOOL, 4, b)};
    char msg[256];
    cr_assert_eq(build_err(GOBLIN_OP_SUB, in, 2, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE, "%s", msg);
}

Test(elementwise, float_division_by_zero_is_ieee) {
    float a[4] = {1, -1, 0, 6}, b[4] = {0, 0, 0, 4};
    goblin_tensor in[2] = {t1(F32, 4, a), t1(F32, 4, b)};
    goblin_tensor o = ev(GOBLIN_OP_DIV, in, 2, NULL, 0);
    float *r = o.data;
    cr_assert(isinf(r[0]) && r[0] > 0);
    cr_assert(isinf(r[1]) && r[1] < 0);
    cr_assert(isnan(r[2]));
    cr_assert_eq(r[3], 1.5f);
    goblin_buffer_free(o.data);
}

Test(elementwise, div_rejects_integers_with_a_hint) {
    int32_t a[1] = {1};
    goblin_tensor in[2] = {t1(I32, 1, a), t1(I32, 1, a)};
    char msg[256];
    cr_assert_eq(build_err(GOBLIN_OP_DIV, in, 2, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert(strstr(msg, "floor_div") && strstr(msg, "cast"), "message: %s", msg);
    goblin_tensor inb[2] = {t1(BOOL, 1, a), t1(BOOL, 1, a)};
    cr_assert_eq(build_err(GOBLIN_OP_DIV, inb, 2, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
}

Test(elementwise, mixed_dtypes_need_a_cast) {
    float a[1] = {1};
    double b[1] = {1};
    goblin_tensor in[2] = {t1(F32, 1, a), t1(F64, 1, b)};
    char msg[256];
    cr_assert_eq(build_err(GOBLIN_OP_ADD, in, 2, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert(strstr(msg, "cast") != NULL, "message: %s", msg);
    cr_assert_eq(build_err(GOBLIN_OP_LT, in, 2, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
}

Test(elementwise, shapes_that_do_not_broadcast) {
    float a[6] = {0}, b[4] = {0};
    goblin_tensor in[2] = {gt_tensor(F32, 2, SH(2, 3), a), t1(F32, 4, b)};
    char msg[256];
    cr_assert_eq(build_err(GOBLIN_OP_ADD, in, 2, NULL, 0, msg, sizeof msg), GOBLIN_ESHAPE);
    cr_assert_eq(build_err(GOBLIN_OP_EQ, in, 2, NULL, 0, msg, sizeof msg), GOBLIN_ESHAPE);
    cr_assert_eq(build_err(GOBLIN_OP_LOGICAL_OR, in, 2, NULL, 0, msg, sizeof msg), GOBLIN_ESHAPE);
    /* wrong input count */
    cr_assert_eq(build_err(GOBLIN_OP_ADD, in, 1, NULL, 0, msg, sizeof msg), GOBLIN_EINVAL);
}

Test(elementwise, dtype_masks) {
    float f[1] = {1};
    int32_t i[1] = {1};
    uint8_t b[1] = {1};
    char msg[256];
    goblin_tensor ff[2] = {t1(F32, 1, f), t1(F32, 1, f)};
    goblin_tensor ii[2] = {t1(I32, 1, i), t1(I32, 1, i)};
    goblin_tensor bb[2] = {t1(BOOL, 1, b), t1(BOOL, 1, b)};
    cr_assert_eq(build_err(GOBLIN_OP_ATAN2, ii, 2, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(build_err(GOBLIN_OP_BITWISE_AND, ff, 2, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(build_err(GOBLIN_OP_BITWISE_NOT, ff, 1, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(build_err(GOBLIN_OP_SHL, ff, 2, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(build_err(GOBLIN_OP_SHL, bb, 2, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(build_err(GOBLIN_OP_POW, bb, 2, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(build_err(GOBLIN_OP_FLOOR_DIV, bb, 2, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(build_err(GOBLIN_OP_BITWISE_XOR, bb, 2, NULL, 0, msg, sizeof msg), GOBLIN_OK);
    cr_assert_eq(build_err(GOBLIN_OP_REM_TRUNC, ff, 2, NULL, 0, msg, sizeof msg), GOBLIN_OK);
}

/* ---- integer division and remainder -------------------------------------------------- */

/* Rows: a, b, a//b, trunc(a/b), a%b (Python), fmod(a,b). Hand-derived:
 * -7/2 = -3.5 -> floor -4, trunc -3; -7 - 2*(-4) = 1; -7 - 2*(-3) = -1. MIN // -1
 * wraps to MIN and MIN % -1 = 0; x // 0 = x % 0 = 0 (NumPy's integer convention). */
#define DIV_TABLE(T, MINV)                                                                  \
    {                                                                                       \
        {-7, 2, -4, -3, 1, -1},  {7, -2, -4, -3, -1, 1}, {-7, -2, 3, 3, -1, -1},            \
        {7, 2, 3, 3, 1, 1},      {6, -3, -2, -2, 0, 0},  {5, 0, 0, 0, 0, 0},                \
        {-5, 0, 0, 0, 0, 0},     {0, 0, 0, 0, 0, 0},     {MINV, -1, MINV, MINV, 0, 0},      \
        {MINV, 1, MINV, MINV, 0, 0}, {-1, 3, -1, 0, 2, -1},                                 \
    }

#define CHECK_DIVS(T, DT, MINV)                                                             \
    do {                                                                                    \
        static const T tab[][6] = DIV_TABLE(T, MINV);                                       \
        enum { N = sizeof tab / sizeof tab[0] };                                            \
        T a[N], b[N], e[4][N];                                                              \
        for (int r = 0; r < N; r++) {                                                       \
            a[r] = tab[r][0];                                                               \
            b[r] = tab[r][1];                                                               \
            for (int c = 0; c < 4; c++) e[c][r] = tab[r][2 + c];                            \
        }                                                                                   \
        goblin_op ops[4] = {GOBLIN_OP_FLOOR_DIV, GOBLIN_OP_TRUNC_DIV, GOBLIN_OP_REM_FLOOR,  \
                            GOBLIN_OP_REM_TRUNC};                                           \
        for (int c = 0; c < 4; c++) check_bin(ops[c], DT, N, a, b, e[c], sizeof(T));        \
    } while (0)

Test(elementwise, integer_division_floor_trunc_and_zero) {
    CHECK_DIVS(int8_t, I8, INT8_MIN);
    CHECK_DIVS(int16_t, I16, INT16_MIN);
    CHECK_DIVS(int32_t, I32, INT32_MIN);
    CHECK_DIVS(int64_t, I64, INT64_MIN);
}

Test(elementwise, u8_division) {
    uint8_t a[3] = {200, 255, 9}, b[3] = {7, 0, 255};
    uint8_t q[3] = {28, 0, 0}, r[3] = {4, 0, 9}; /* 7*28 = 196 */
    check_bin(GOBLIN_OP_FLOOR_DIV, U8, 3, a, b, q, 1);
    check_bin(GOBLIN_OP_TRUNC_DIV, U8, 3, a, b, q, 1);
    check_bin(GOBLIN_OP_REM_FLOOR, U8, 3, a, b, r, 1);
    check_bin(GOBLIN_OP_REM_TRUNC, U8, 3, a, b, r, 1);
}

Test(elementwise, float_floor_and_trunc_division) {
    /* Python: -7.5 // 2 = -4.0, -7.5 % 2 = 0.5, 7.5 % -2 = -0.5, math.fmod(-7.5, 2) = -1.5;
     * 1.0 // 0.1 = 9.0 (0.1 is slightly above 1/10) although 1.0 / 0.1 rounds to 10. */
    double a[6] = {-7.5, 7.5, 1.0, -7.5, 5.0, -5.0}, b[6] = {2, -2, 0.1, -2, INFINITY, INFINITY};
    goblin_tensor in[2] = {t1(F64, 6, a), t1(F64, 6, b)};
    goblin_tensor o = ev(GOBLIN_OP_FLOOR_DIV, in, 2, NULL, 0);
    double fd[6] = {-4, -4, 9, 3, 0, -1};
    cr_assert_arr_eq(o.data, fd, sizeof fd);
    goblin_buffer_free(o.data);
    o = ev(GOBLIN_OP_REM_FLOOR, in, 2, NULL, 0);
    double *r = o.data;
    cr_assert_eq(r[0], 0.5);
    cr_assert_eq(r[1], -0.5);
    cr_assert(r[2] > 0.0999 && r[2] < 0.1, "1.0 %% 0.1 is just below 0.1, got %.17g", r[2]);
    cr_assert_eq(r[3], -1.5); /* -7.5 % -2: same signs, fmod */
    cr_assert_eq(r[4], 5);    /* Python: 5.0 % inf = 5.0 */
    cr_assert(isinf(r[5]) && r[5] > 0, "Python: -5.0 %% inf = inf");
    goblin_buffer_free(o.data);
    o = ev(GOBLIN_OP_TRUNC_DIV, in, 2, NULL, 0);
    double td[6] = {-3, -3, 10, 3, 0, -0.0};
    cr_assert_arr_eq(o.data, td, sizeof td);
    goblin_buffer_free(o.data);
    o = ev(GOBLIN_OP_REM_TRUNC, in, 2, NULL, 0);
    r = o.data;
    cr_assert_eq(r[0], -1.5);
    cr_assert_eq(r[1], 1.5);
    cr_assert_eq(r[3], -1.5);
    cr_assert_eq(r[4], 5);
    cr_assert_eq(r[5], -5);
    goblin_buffer_free(o.data);
}

Test(elementwise, float_division_helpers_by_zero_and_zero_signs) {
    float a[4] = {5, 0, -4, 4}, b[4] = {0, 0, 2, -2};
    goblin_tensor in[2] = {t1(F32, 4, a), t1(F32, 4, b)};
    goblin_tensor o = ev(GOBLIN_OP_FLOOR_DIV, in, 2, NULL, 0);
    float *r = o.data;
    cr_assert(isinf(r[0]) && r[0] > 0, "5 // 0 = inf (IEEE a / b)");
    cr_assert(isnan(r[1]));
    cr_assert_eq(r[2], -2);
    cr_assert_eq(r[3], -2);
    goblin_buffer_free(o.data);
    o = ev(GOBLIN_OP_REM_FLOOR, in, 2, NULL, 0);
    r = o.data;
    cr_assert(isnan(r[0]) && isnan(r[1]));
    cr_assert(r[2] == 0 && !signbit(r[2]), "-4 %% 2 = +0 (sign of b)");
    cr_assert(r[3] == 0 && signbit(r[3]), "4 %% -2 = -0 (sign of b)");
    goblin_buffer_free(o.data);
    o = ev(GOBLIN_OP_REM_TRUNC, in, 2, NULL, 0);
    r = o.data;
    cr_assert(isnan(r[0]) && isnan(r[1]));
    cr_assert(r[2] == 0 && signbit(r[2]), "fmod(-4, 2) = -0 (sign of a)");
    goblin_buffer_free(o.data);
}

/* ---- pow ----------------------------------------------------------------------------- */

Test(elementwise, integer_pow_wraps_and_negative_exponents) {
    int32_t a[9] = {3, 2, 2, -1, -1, 1, 2, 0, -3}, b[9] = {4, 31, 32, -3, -2, -5, -1, 0, 3};
    int32_t e[9] = {81, INT32_MIN, 0, -1, 1, 1, 0, 1, -27};
    check_bin(GOBLIN_OP_POW, I32, 9, a, b, e, 4);
    int64_t a64[2] = {3, -2}, b64[2] = {40, 63};
    /* 3^40 = 12157665459056928801; minus 2^64 = -6289078614652622815. (-2)^63 = INT64_MIN */
    int64_t e64[2] = {INT64_C(-6289078614652622815), INT64_MIN};
    check_bin(GOBLIN_OP_POW, I64, 2, a64, b64, e64, 8);
    uint8_t au[3] = {3, 3, 0}, bu[3] = {5, 6, 0};
    uint8_t eu[3] = {243, 217, 1}; /* 729 - 512 = 217 */
    check_bin(GOBLIN_OP_POW, U8, 3, au, bu, eu, 1);
    int8_t a8[2] = {-2, 7}, b8[2] = {7, 3};
    int8_t e8[2] = {-128, 87}; /* 343 - 256 = 87 */
    check_bin(GOBLIN_OP_POW, I8, 2, a8, b8, e8, 1);
}

Test(elementwise, float_pow_and_atan2) {
    double a[4] = {2, 2, 4, -8}, b[4] = {10, -1, 0.5, 1.0 / 3.0};
    goblin_tensor in[2] = {t1(F64, 4, a), t1(F64, 4, b)};
    goblin_tensor o = ev(GOBLIN_OP_POW, in, 2, NULL, 0);
    double *r = o.data;
    cr_assert_eq(r[0], 1024);
    cr_assert_eq(r[1], 0.5);
    cr_assert_eq(r[2], 2);
    cr_assert(isnan(r[3]), "negative base, non-integer exponent");
    goblin_buffer_free(o.data);
    double y[4] = {1, 0, 1, -0.0}, x[4] = {1, -1, 0, -1};
    goblin_tensor in2[2] = {t1(F64, 4, y), t1(F64, 4, x)};
    o = ev(GOBLIN_OP_ATAN2, in2, 2, NULL, 0);
    r = o.data;
    const double pi = 3.14159265358979323846;
    cr_assert(gt_close(r[0], pi / 4, 1e-15, 0));
    cr_assert(gt_close(r[1], pi, 1e-15, 0));
    cr_assert(gt_close(r[2], pi / 2, 1e-15, 0));
    cr_assert(gt_close(r[3], -pi, 1e-15, 0), "atan2(-0, -1) = -pi");
    goblin_buffer_free(o.data);
    float yf[1] = {1}, xf[1] = {1};
    goblin_tensor in3[2] = {t1(F32, 1, yf), t1(F32, 1, xf)};
    o = ev(GOBLIN_OP_ATAN2, in3, 2, NULL, 0);
    cr_assert(gt_close(((float *)o.data)[0], pi / 4, 2e-7, 0));
    goblin_buffer_free(o.data);
}

/* ---- maximum / minimum / clamp ---------------------------------------------------------- */

Test(elementwise, maximum_minimum_propagate_nan) {
    float a[4] = {1, NAN, 3, -INFINITY}, b[4] = {2, 1, NAN, 5};
    goblin_backend_kind bes[2] = {REF, BLIS};
    for (int i = 0; i < 2; i++) {
        if (bes[i] == BLIS && !have_blis()) continue;
        goblin_tensor in[2] = {t1(F32, 4, a), t1(F32, 4, b)};
        goblin_tensor o = ev_on(GOBLIN_OP_MAXIMUM, in, 2, NULL, 0, bes[i], 1);
        float *r = o.data;
        cr_assert(r[0] == 2 && isnan(r[1]) && isnan(r[2]) && r[3] == 5);
        goblin_buffer_free(o.data);
        o = ev_on(GOBLIN_OP_MINIMUM, in, 2, NULL, 0, bes[i], 1);
        r = o.data;
        cr_assert(r[0] == 1 && isnan(r[1]) && isnan(r[2]) && isinf(r[3]) && r[3] < 0);
        goblin_buffer_free(o.data);
    }
    int64_t ia[2] = {INT64_MIN, 5}, ib[2] = {INT64_MAX, -5};
    int64_t mx[2] = {INT64_MAX, 5}, mn[2] = {INT64_MIN, -5};
    check_bin(GOBLIN_OP_MAXIMUM, I64, 2, ia, ib, mx, 8);
    check_bin(GOBLIN_OP_MINIMUM, I64, 2, ia, ib, mn, 8);
}

static goblin_attr amin(double v) { return goblin_attr_float(GOBLIN_ATTR_MIN, v); }
static goblin_attr amax(double v) { return goblin_attr_float(GOBLIN_ATTR_MAX, v); }

Test(elementwise, clamp_floats) {
    float x[5] = {-3, 0.5f, 7, NAN, INFINITY};
    goblin_tensor in[1] = {t1(F32, 5, x)};
    goblin_attr both[2] = {amin(-1), amax(2)};
    goblin_tensor o = ev(GOBLIN_OP_CLAMP, in, 1, both, 2);
    float *r = o.data;
    cr_assert(r[0] == -1 && r[1] == 0.5f && r[2] == 2 && isnan(r[3]) && r[4] == 2);
    goblin_buffer_free(o.data);
    goblin_attr lo[1] = {amin(0)};
    o = ev(GOBLIN_OP_CLAMP, in, 1, lo, 1);
    r = o.data;
    cr_assert(r[0] == 0 && r[1] == 0.5f && r[2] == 7 && isnan(r[3]) && isinf(r[4]));
    goblin_buffer_free(o.data);
    goblin_attr hi[1] = {amax(0)};
    o = ev(GOBLIN_OP_CLAMP, in, 1, hi, 1);
    r = o.data;
    cr_assert(r[0] == -3 && r[1] == 0 && r[2] == 0 && isnan(r[3]) && r[4] == 0);
    goblin_buffer_free(o.data);
    /* f16: 0x4200 = 3.0, 0xC500 = -5.0; clamp to [-1, 2.5] -> 2.5 = 0x4100, -1 = 0xBC00 */
    uint16_t h[2] = {0x4200, 0xC500};
    goblin_tensor inh[1] = {t1(F16, 2, h)};
    goblin_attr hb[2] = {amin(-1), amax(2.5)};
    o = ev(GOBLIN_OP_CLAMP, inh, 1, hb, 2);
    uint16_t eh[2] = {0x4100, 0xBC00};
    cr_assert_arr_eq(o.data, eh, sizeof eh);
    goblin_buffer_free(o.data);
}

Test(elementwise, clamp_integers_round_bounds_inward_and_saturate) {
    int32_t x[5] = {-10, 1, 2, 10, 5};
    goblin_tensor in[1] = {t1(I32, 5, x)};
    goblin_attr b1[2] = {amin(1.5), amax(5.7)}; /* integers in [1.5, 5.7] are 2..5 */
    goblin_tensor o = ev(GOBLIN_OP_CLAMP, in, 1, b1, 2);
    int32_t e1[5] = {2, 2, 2, 5, 5};
    cr_assert_arr_eq(o.data, e1, sizeof e1);
    goblin_buffer_free(o.data);
    goblin_attr b2[2] = {amin(1.2), amax(1.8)}; /* no integer inside: the rounded max (1) */
    o = ev(GOBLIN_OP_CLAMP, in, 1, b2, 2);
    int32_t e2[5] = {1, 1, 1, 1, 1};
    cr_assert_arr_eq(o.data, e2, sizeof e2);
    goblin_buffer_free(o.data);
    int8_t x8[3] = {-128, 0, 127};
    goblin_tensor in8[1] = {t1(I8, 3, x8)};
    goblin_attr b3[2] = {amin(-1000), amax(1e30)}; /* saturate to the type: no change */
    o = ev(GOBLIN_OP_CLAMP, in8, 1, b3, 2);
    cr_assert_arr_eq(o.data, x8, sizeof x8);
    goblin_buffer_free(o.data);
    goblin_attr b4[1] = {amin(-3.5)};
    o = ev(GOBLIN_OP_CLAMP, in8, 1, b4, 1);
    int8_t e4[3] = {-3, 0, 127};
    cr_assert_arr_eq(o.data, e4, sizeof e4);
    goblin_buffer_free(o.data);
    uint8_t xu[3] = {0, 100, 255};
    goblin_tensor inu[1] = {t1(U8, 3, xu)};
    goblin_attr b5[2] = {amin(-5), amax(200.9)};
    o = ev(GOBLIN_OP_CLAMP, inu, 1, b5, 2);
    uint8_t eu[3] = {0, 100, 200};
    cr_assert_arr_eq(o.data, eu, sizeof eu);
    goblin_buffer_free(o.data);
    int64_t x64[2] = {INT64_MIN, INT64_MAX};
    goblin_tensor in64[1] = {t1(I64, 2, x64)};
    goblin_attr b6[2] = {amin(-1e300), amax(1e300)};
    o = ev(GOBLIN_OP_CLAMP, in64, 1, b6, 2);
    cr_assert_arr_eq(o.data, x64, sizeof x64);
    goblin_buffer_free(o.data);
}

Test(elementwise, clamp_attribute_errors) {
    float x[1] = {0};
    goblin_tensor in[1] = {t1(F32, 1, x)};
    char msg[256];
    cr_assert_eq(build_err(GOBLIN_OP_CLAMP, in, 1, NULL, 0, msg, sizeof msg), GOBLIN_EINVAL);
    goblin_attr bad[2] = {amin(3), amax(2)};
    cr_assert_eq(build_err(GOBLIN_OP_CLAMP, in, 1, bad, 2, msg, sizeof msg), GOBLIN_ERANGE, "%s", msg);
    goblin_attr nan1[1] = {amin(NAN)};
    cr_assert_eq(build_err(GOBLIN_OP_CLAMP, in, 1, nan1, 1, msg, sizeof msg), GOBLIN_ERANGE);
    goblin_attr eq[2] = {amin(2), amax(2)};
    cr_assert_eq(build_err(GOBLIN_OP_CLAMP, in, 1, eq, 2, msg, sizeof msg), GOBLIN_OK);
    goblin_attr wrong[1] = {goblin_attr_int(GOBLIN_ATTR_AXIS, 0)};
    cr_assert_eq(build_err(GOBLIN_OP_CLAMP, in, 1, wrong, 1, msg, sizeof msg), GOBLIN_EINVAL);
    uint8_t b[1] = {1};
    goblin_tensor inb[1] = {t1(BOOL, 1, b)};
    goblin_attr lo[1] = {amin(0)};
    cr_assert_eq(build_err(GOBLIN_OP_CLAMP, inb, 1, lo, 1, msg, sizeof msg), GOBLIN_EDTYPE);
}

/* ---- comparisons, logic, where, isnan ---------------------------------------------------- */

Test(elementwise, comparisons_ieee_nan_and_signed_zero) {
    float a[4] = {1, NAN, -0.0f, 2}, b[4] = {2, NAN, 0.0f, 1};
    uint8_t eq[4] = {0, 0, 1, 0}, ne[4] = {1, 1, 0, 1}, lt[4] = {1, 0, 0, 0}, le[4] = {1, 0, 1, 0},
            gt[4] = {0, 0, 0, 1}, ge[4] = {0, 0, 1, 1};
    check_bin(GOBLIN_OP_EQ, F32, 4, a, b, eq, 1);
    check_bin(GOBLIN_OP_NE, F32, 4, a, b, ne, 1);
    check_bin(GOBLIN_OP_LT, F32, 4, a, b, lt, 1);
    check_bin(GOBLIN_OP_LE, F32, 4, a, b, le, 1);
    check_bin(GOBLIN_OP_GT, F32, 4, a, b, gt, 1);
    check_bin(GOBLIN_OP_GE, F32, 4, a, b, ge, 1);
    double ad[4] = {1, NAN, -0.0, 2}, bd[4] = {2, NAN, 0.0, 1};
    check_bin(GOBLIN_OP_LE, F64, 4, ad, bd, le, 1);
    /* f16 compares as values: 0x3C00 = 1.0, 0x4000 = 2.0, 0x7E00 = NaN */
    uint16_t ah[3] = {0x3C00, 0x7E00, 0x8000}, bh[3] = {0x4000, 0x7E00, 0x0000};
    uint8_t lth[3] = {1, 0, 0}, eqh[3] = {0, 0, 1};
    check_bin(GOBLIN_OP_LT, F16, 3, ah, bh, lth, 1);
    check_bin(GOBLIN_OP_EQ, F16, 3, ah, bh, eqh, 1);
    /* bf16: 0x3F80 = 1.0, 0x4000 = 2.0, 0x7FC0 = NaN */
    uint16_t ab16[3] = {0x3F80, 0x7FC0, 0x8000}, bb16[3] = {0x4000, 0x7FC0, 0x0000};
    check_bin(GOBLIN_OP_LT, BF16, 3, ab16, bb16, lth, 1);
    check_bin(GOBLIN_OP_EQ, BF16, 3, ab16, bb16, eqh, 1);
    int64_t ai[3] = {INT64_MIN, 5, -1}, bi[3] = {INT64_MAX, 5, 1};
    uint8_t lti[3] = {1, 0, 1}, eqi[3] = {0, 1, 0};
    check_bin(GOBLIN_OP_LT, I64, 3, ai, bi, lti, 1);
    check_bin(GOBLIN_OP_EQ, I64, 3, ai, bi, eqi, 1);
    uint8_t au[2] = {200, 3}, bu[2] = {100, 3};
    uint8_t gtu[2] = {1, 0};
    check_bin(GOBLIN_OP_GT, U8, 2, au, bu, gtu, 1); /* unsigned: 200 > 100 */
    uint8_t ab[3] = {0, 1, 9}, bb[3] = {1, 9, 0};
    uint8_t ltb[3] = {1, 0, 0}, eqb[3] = {0, 1, 0};
    check_bin(GOBLIN_OP_LT, BOOL, 3, ab, bb, ltb, 1);
    check_bin(GOBLIN_OP_EQ, BOOL, 3, ab, bb, eqb, 1);
}

Test(elementwise, logical_ops_any_dtypes) {
    float a[4] = {0, NAN, -0.0f, 2};
    int32_t b[4] = {1, 1, 1, 0};
    goblin_tensor in[2] = {t1(F32, 4, a), t1(I32, 4, b)};
    goblin_tensor o = ev(GOBLIN_OP_LOGICAL_AND, in, 2, NULL, 0);
    cr_assert_eq(o.dtype, BOOL);
    uint8_t e_and[4] = {0, 1, 0, 0}, e_or[4] = {1, 1, 1, 1}, e_xor[4] = {1, 0, 1, 1};
    cr_assert_arr_eq(o.data, e_and, 4);
    goblin_buffer_free(o.data);
    o = ev(GOBLIN_OP_LOGICAL_OR, in, 2, NULL, 0);
    cr_assert_arr_eq(o.data, e_or, 4);
    goblin_buffer_free(o.data);
    o = ev(GOBLIN_OP_LOGICAL_XOR, in, 2, NULL, 0);
    cr_assert_arr_eq(o.data, e_xor, 4);
    goblin_buffer_free(o.data);
    o = ev(GOBLIN_OP_LOGICAL_NOT, in, 1, NULL, 0);
    uint8_t e_not[4] = {1, 0, 1, 0};
    cr_assert_eq(o.dtype, BOOL);
    cr_assert_arr_eq(o.data, e_not, 4);
    goblin_buffer_free(o.data);
    uint16_t h[3] = {0x8000, 0x0001, 0x7C00}; /* f16 -0, smallest subnormal, inf */
    goblin_tensor inh[1] = {t1(F16, 3, h)};
    o = ev(GOBLIN_OP_LOGICAL_NOT, inh, 1, NULL, 0);
    uint8_t e_noth[3] = {1, 0, 0};
    cr_assert_arr_eq(o.data, e_noth, 3);
    goblin_buffer_free(o.data);
    int64_t big[2] = {INT64_C(1) << 62, 0};
    uint8_t bo[2] = {5, 0};
    goblin_tensor in3[2] = {t1(I64, 2, big), t1(BOOL, 2, bo)};
    o = ev(GOBLIN_OP_LOGICAL_AND, in3, 2, NULL, 0);
    uint8_t e3[2] = {1, 0};
    cr_assert_arr_eq(o.data, e3, 2);
    goblin_buffer_free(o.data);
}

Test(elementwise, where_broadcasts_three_ways) {
    uint8_t c[2] = {1, 0};          /* [2,1] */
    float a[3] = {1, 2, 3};         /* [3] */
    float b = -1;                   /* [] */
    goblin_backend_kind bes[2] = {REF, BLIS};
    for (int i = 0; i < 2; i++) {
        if (bes[i] == BLIS && !have_blis()) continue;
        goblin_tensor in[3] = {gt_tensor(BOOL, 2, SH(2, 1), c), t1(F32, 3, a),
                               gt_tensor(F32, 0, NULL, &b)};
        goblin_tensor o = ev_on(GOBLIN_OP_WHERE, in, 3, NULL, 0, bes[i], 2);
        float e[6] = {1, 2, 3, -1, -1, -1};
        cr_assert_eq(o.rank, 2);
        cr_assert_eq(o.shape[0], 2);
        cr_assert_eq(o.shape[1], 3);
        cr_assert_arr_eq(o.data, e, sizeof e);
        goblin_buffer_free(o.data);
    }
    /* f16 NaN payloads are copied bit for bit; bool outputs are 0/1 */
    uint8_t c2[2] = {1, 0};
    uint16_t ha[2] = {0x7E01, 0x3C00}, hb[2] = {0x0001, 0xFC00};
    goblin_tensor in2[3] = {t1(BOOL, 2, c2), t1(F16, 2, ha), t1(F16, 2, hb)};
    goblin_tensor o = ev(GOBLIN_OP_WHERE, in2, 3, NULL, 0);
    uint16_t eh[2] = {0x7E01, 0xFC00};
    cr_assert_arr_eq(o.data, eh, sizeof eh);
    goblin_buffer_free(o.data);
    uint8_t ba[2] = {7, 0}, bb[2] = {0, 9};
    goblin_tensor in3[3] = {t1(BOOL, 2, c2), t1(BOOL, 2, ba), t1(BOOL, 2, bb)};
    o = ev(GOBLIN_OP_WHERE, in3, 3, NULL, 0);
    uint8_t eb[2] = {1, 1};
    cr_assert_arr_eq(o.data, eb, 2);
    goblin_buffer_free(o.data);
    int64_t ia[2] = {INT64_MIN, 1}, ib[2] = {2, INT64_MAX};
    goblin_tensor in4[3] = {t1(BOOL, 2, c2), t1(I64, 2, ia), t1(I64, 2, ib)};
    o = ev(GOBLIN_OP_WHERE, in4, 3, NULL, 0);
    int64_t ei[2] = {INT64_MIN, INT64_MAX};
    cr_assert_arr_eq(o.data, ei, sizeof ei);
    goblin_buffer_free(o.data);
}

Test(elementwise, where_errors) {
    int32_t ci[1] = {1};
    float a[1] = {1};
    double d[1] = {1};
    char msg[256];
    goblin_tensor bad_cond[3] = {t1(I32, 1, ci), t1(F32, 1, a), t1(F32, 1, a)};
    cr_assert_eq(build_err(GOBLIN_OP_WHERE, bad_cond, 3, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    uint8_t c[1] = {1};
    goblin_tensor mixed[3] = {t1(BOOL, 1, c), t1(F32, 1, a), t1(F64, 1, d)};
    cr_assert_eq(build_err(GOBLIN_OP_WHERE, mixed, 3, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    float a3[3] = {0}, a2[2] = {0};
    goblin_tensor shp[3] = {t1(BOOL, 1, c), t1(F32, 3, a3), t1(F32, 2, a2)};
    cr_assert_eq(build_err(GOBLIN_OP_WHERE, shp, 3, NULL, 0, msg, sizeof msg), GOBLIN_ESHAPE);
}

Test(elementwise, isnan_every_dtype) {
    float f[3] = {NAN, INFINITY, 0};
    uint16_t h[3] = {0x7E00, 0x7C00, 0x0000};  /* f16 NaN, inf, 0 */
    uint16_t bh[3] = {0x7FC0, 0x7F80, 0x3F80}; /* bf16 NaN, inf, 1 */
    int32_t i[3] = {0, -1, 7};
    goblin_tensor ins[4] = {t1(F32, 3, f), t1(F16, 3, h), t1(BF16, 3, bh), t1(I32, 3, i)};
    uint8_t e[4][3] = {{1, 0, 0}, {1, 0, 0}, {1, 0, 0}, {0, 0, 0}};
    for (int k = 0; k < 4; k++) {
        goblin_tensor o = ev(GOBLIN_OP_ISNAN, &ins[k], 1, NULL, 0);
        cr_assert_eq(o.dtype, BOOL);
        cr_assert_arr_eq(o.data, e[k], 3, "dtype %s", goblin_dtype_name(ins[k].dtype));
        goblin_buffer_free(o.data);
    }
}

/* ---- bitwise and shifts ---------------------------------------------------------------- */

Test(elementwise, bitwise_ops) {
    int32_t a[2] = {0x0F0F, -1}, b[2] = {0x00FF, 0x1234};
    int32_t and_[2] = {0x000F, 0x1234}, or_[2] = {0x0FFF, -1}, xor_[2] = {0x0FF0, ~0x1234};
    check_bin(GOBLIN_OP_BITWISE_AND, I32, 2, a, b, and_, 4);
    check_bin(GOBLIN_OP_BITWISE_OR, I32, 2, a, b, or_, 4);
    check_bin(GOBLIN_OP_BITWISE_XOR, I32, 2, a, b, xor_, 4);
    uint8_t ba[4] = {0, 0, 3, 1}, bb[4] = {0, 5, 0, 1};
    uint8_t band[4] = {0, 0, 0, 1}, bor[4] = {0, 1, 1, 1}, bxor[4] = {0, 1, 1, 0};
    check_bin(GOBLIN_OP_BITWISE_AND, BOOL, 4, ba, bb, band, 1);
    check_bin(GOBLIN_OP_BITWISE_OR, BOOL, 4, ba, bb, bor, 1);
    check_bin(GOBLIN_OP_BITWISE_XOR, BOOL, 4, ba, bb, bxor, 1);
    goblin_tensor in[1] = {t1(BOOL, 4, ba)};
    goblin_tensor o = ev(GOBLIN_OP_BITWISE_NOT, in, 1, NULL, 0);
    uint8_t bnot[4] = {1, 1, 0, 0};
    cr_assert_arr_eq(o.data, bnot, 4);
    goblin_buffer_free(o.data);
    int8_t x8[3] = {0, -1, 0x55};
    goblin_tensor in8[1] = {t1(I8, 3, x8)};
    o = ev(GOBLIN_OP_BITWISE_NOT, in8, 1, NULL, 0);
    int8_t n8[3] = {-1, 0, (int8_t)0xAA};
    cr_assert_arr_eq(o.data, n8, 3);
    goblin_buffer_free(o.data);
    uint8_t xu[2] = {0, 0x0F};
    goblin_tensor inu[1] = {t1(U8, 2, xu)};
    o = ev(GOBLIN_OP_BITWISE_NOT, inu, 1, NULL, 0);
    uint8_t nu[2] = {0xFF, 0xF0};
    cr_assert_arr_eq(o.data, nu, 2);
    goblin_buffer_free(o.data);
}

Test(elementwise, shifts_counts_and_fill) {
    /* i8: 1 << 7 = 0x80 = -128; counts outside [0, 8) give 0 / sign fill */
    int8_t a8[6] = {1, 1, 1, -128, -5, 5}, c8[6] = {7, 8, -1, 3, 8, 8};
    int8_t shl8[6] = {-128, 0, 0, 0, 0, 0};
    int8_t sra8[6] = {0, 0, 0, -16, -1, 0};
    int8_t srl8[6] = {0, 0, 0, 16, 0, 0}; /* 0x80 >> 3 = 0x10 */
    check_bin(GOBLIN_OP_SHL, I8, 6, a8, c8, shl8, 1);
    check_bin(GOBLIN_OP_SHR_ARITH, I8, 6, a8, c8, sra8, 1);
    check_bin(GOBLIN_OP_SHR_LOGICAL, I8, 6, a8, c8, srl8, 1);
    int8_t m1[2] = {-1, -1}, c4[2] = {4, -3};
    int8_t srl_m1[2] = {15, 0}, sra_m1[2] = {-1, -1};
    check_bin(GOBLIN_OP_SHR_LOGICAL, I8, 2, m1, c4, srl_m1, 1);
    check_bin(GOBLIN_OP_SHR_ARITH, I8, 2, m1, c4, sra_m1, 1);
    int64_t a64[4] = {1, INT64_MIN, -7, 3}, c64[4] = {63, 63, 1, 64};
    int64_t shl64[4] = {INT64_MIN, 0, -14, 0};
    int64_t sra64[4] = {0, -1, -4, 0}; /* -7 >> 1 = floor(-3.5) = -4 */
    int64_t srl64[4] = {0, 1, INT64_MAX - 3, 0}; /* 0xFFFF...F9 >> 1 = 0x7FFF...FC */
    check_bin(GOBLIN_OP_SHL, I64, 4, a64, c64, shl64, 8);
    check_bin(GOBLIN_OP_SHR_ARITH, I64, 4, a64, c64, sra64, 8);
    check_bin(GOBLIN_OP_SHR_LOGICAL, I64, 4, a64, c64, srl64, 8);
    int32_t a32[3] = {0x40000000, -1, 5}, c32[3] = {1, 31, 32};
    int32_t shl32[3] = {INT32_MIN, INT32_MIN, 0}, srl32[3] = {0x20000000, 1, 0};
    check_bin(GOBLIN_OP_SHL, I32, 3, a32, c32, shl32, 4);
    check_bin(GOBLIN_OP_SHR_LOGICAL, I32, 3, a32, c32, srl32, 4);
    uint8_t au[3] = {0x80, 0xFF, 1}, cu[3] = {7, 4, 200};
    uint8_t srau[3] = {1, 0x0F, 0}, shlu[3] = {0, 0xF0, 0};
    check_bin(GOBLIN_OP_SHR_ARITH, U8, 3, au, cu, srau, 1); /* unsigned: zero fill */
    check_bin(GOBLIN_OP_SHL, U8, 3, au, cu, shlu, 1);
    int16_t a16[2] = {-32768, 0x7FFF}, c16[2] = {15, 16};
    int16_t sra16[2] = {-1, 0}, srl16[2] = {1, 0};
    check_bin(GOBLIN_OP_SHR_ARITH, I16, 2, a16, c16, sra16, 2);
    check_bin(GOBLIN_OP_SHR_LOGICAL, I16, 2, a16, c16, srl16, 2);
}

/* ---- half precision ---------------------------------------------------------------------- */

Test(elementwise, half_types_round_once) {
    /* f16: 1.5 (0x3E00) + 2.25 (0x4080) = 3.75 (0x4380); 65504 + 65504 overflows to inf;
     * 1 + 2^-11 (0x1000 is 2^-11) is a tie and rounds to even: 1.0 */
    uint16_t a[3] = {0x3E00, 0x7BFF, 0x3C00}, b[3] = {0x4080, 0x7BFF, 0x1000};
    uint16_t e[3] = {0x4380, 0x7C00, 0x3C00};
    check_bin(GOBLIN_OP_ADD, F16, 3, a, b, e, 2);
    /* bf16: 1.0 (0x3F80) * 3.0 (0x4040) = 3.0; 2.0 / 3.0 = 0.6667 -> 0x3F2B (0.66796875) */
    uint16_t ba[2] = {0x3F80, 0x4000}, bb[2] = {0x4040, 0x4040};
    uint16_t em[2] = {0x4040, 0x40C0}, ed[2] = {0x3EAB, 0x3F2B};
    check_bin(GOBLIN_OP_MUL, BF16, 2, ba, bb, em, 2);
    check_bin(GOBLIN_OP_DIV, BF16, 2, ba, bb, ed, 2);
    /* f16 floor_div: -7.5 (0xC780) // 2 (0x4000) = -4 (0xC400) */
    uint16_t fa[1] = {0xC780}, fb[1] = {0x4000}, fe[1] = {0xC400};
    check_bin(GOBLIN_OP_FLOOR_DIV, F16, 1, fa, fb, fe, 2);
}

/* ---- empty and non-contiguous ----------------------------------------------------------- */

Test(elementwise, empty_tensors) {
    float dummy[3] = {1, 2, 3};
    goblin_backend_kind bes[2] = {REF, BLIS};
    for (int i = 0; i < 2; i++) {
        if (bes[i] == BLIS && !have_blis()) continue;
        goblin_tensor in[2] = {gt_tensor(F32, 2, SH(0, 3), NULL), t1(F32, 3, dummy)};
        goblin_tensor o = ev_on(GOBLIN_OP_ADD, in, 2, NULL, 0, bes[i], 2);
        cr_assert_eq(o.rank, 2);
        cr_assert_eq(o.shape[0], 0);
        cr_assert_eq(o.shape[1], 3);
        goblin_buffer_free(o.data);
        o = ev_on(GOBLIN_OP_LT, in, 2, NULL, 0, bes[i], 2);
        cr_assert_eq(o.dtype, BOOL);
        cr_assert_eq(o.shape[0], 0);
        goblin_buffer_free(o.data);
        uint8_t c[1] = {1};
        goblin_tensor w[3] = {t1(BOOL, 1, c), gt_tensor(F32, 2, SH(0, 3), NULL), t1(F32, 3, dummy)};
        o = ev_on(GOBLIN_OP_WHERE, w, 3, NULL, 0, bes[i], 2);
        cr_assert_eq(o.shape[0], 0);
        goblin_buffer_free(o.data);
    }
    goblin_tensor e1[1] = {t1(I32, 0, NULL)};
    goblin_tensor o = ev(GOBLIN_OP_BITWISE_NOT, e1, 1, NULL, 0);
    cr_assert_eq(o.shape[0], 0);
    goblin_buffer_free(o.data);
    goblin_attr lo[1] = {amin(0)};
    o = ev(GOBLIN_OP_CLAMP, e1, 1, lo, 1);
    cr_assert_eq(o.shape[0], 0);
    goblin_buffer_free(o.data);
}

Test(elementwise, strided_and_reversed_inputs) {
    /* a = transpose of the 3x2 buffer -> [[1,2,3],[4,5,6]]; b reversed view of {30,20,10} */
    int32_t abuf[6] = {1, 4, 2, 5, 3, 6};
    int32_t bbuf[3] = {30, 20, 10};
    goblin_tensor a = gt_tensor(I32, 2, SH(2, 3), abuf);
    a.strides[0] = 1;
    a.strides[1] = 2;
    goblin_tensor b = t1(I32, 3, bbuf + 2);
    b.strides[0] = -1; /* {10, 20, 30} */
    goblin_tensor in[2] = {a, b};
    goblin_backend_kind bes[2] = {REF, BLIS};
    for (int i = 0; i < 2; i++) {
        if (bes[i] == BLIS && !have_blis()) continue;
        goblin_tensor o = ev_on(GOBLIN_OP_SUB, in, 2, NULL, 0, bes[i], 2);
        int32_t e[6] = {-9, -18, -27, -6, -15, -24};
        cr_assert_arr_eq(o.data, e, sizeof e);
        goblin_buffer_free(o.data);
        o = ev_on(GOBLIN_OP_REM_FLOOR, in, 2, NULL, 0, bes[i], 2);
        int32_t r[6] = {1, 2, 3, 4, 5, 6};
        cr_assert_arr_eq(o.data, r, sizeof r);
        goblin_buffer_free(o.data);
    }
    /* float, strided, on BLIS too (falls back to the reference loop) */
    float fbuf[8] = {1, -1, 2, -1, 3, -1, 4, -1};
    goblin_tensor f = t1(F32, 4, fbuf);
    f.strides[0] = 2; /* {1, 2, 3, 4} */
    float g[4] = {4, 3, 2, 1};
    goblin_tensor in2[2] = {f, t1(F32, 4, g)};
    for (int i = 0; i < 2; i++) {
        if (bes[i] == BLIS && !have_blis()) continue;
        goblin_tensor o = ev_on(GOBLIN_OP_MAXIMUM, in2, 2, NULL, 0, bes[i], 2);
        float e[4] = {4, 3, 3, 4};
        cr_assert_arr_eq(o.data, e, sizeof e);
        goblin_buffer_free(o.data);
    }
}

/* ---- BLIS fast path vs the reference backend --------------------------------------------- */

static void fill(float *f, double *d, int64_t n, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        double v = (gt_rand(&s) - 0.5) * 8;
        int64_t k = i % 97;
        if (k == 3) v = NAN;
        else if (k == 5) v = INFINITY;
        else if (k == 7) v = -INFINITY;
        else if (k == 11) v = 0.0;
        else if (k == 13) v = -0.0;
        else if (k == 17) v = 1e-310; /* subnormal in f64, 0 in f32 */
        else if (k % 4 == 0) v = floor(v); /* equal values appear in comparisons */
        if (f) f[i] = (float)v;
        if (d) d[i] = v;
    }
}

static void blis_vs_ref(goblin_op op, goblin_dtype dt, const goblin_tensor *ins, int n_in,
                        const char *what) {
    goblin_tensor r = ev_on(op, ins, n_in, NULL, 0, REF, 1);
    int64_t numel = 1;
    for (int d = 0; d < r.rank; d++) numel *= r.shape[d];
    size_t es = goblin_dtype_size(r.dtype);
    int32_t threads[2] = {1, 3};
    for (int t = 0; t < 2; t++) {
        goblin_tensor b = ev_on(op, ins, n_in, NULL, 0, BLIS, threads[t]);
        cr_assert_eq(b.dtype, r.dtype);
        cr_assert(memcmp(b.data, r.data, (size_t)numel * es) == 0, "%s %s %s threads=%d differs",
                  goblin_op_name(op), goblin_dtype_name(dt), what, threads[t]);
        goblin_buffer_free(b.data);
    }
    goblin_buffer_free(r.data);
}

Test(elementwise, blis_matches_ref_bitwise, .timeout = 120) {
    if (!have_blis()) cr_skip_test("BLIS backend not built");
    /* 3 full 64K blocks plus a tail, so the threaded split and the tail both run */
    const int64_t rows = 3 * 65536 / 64 + 5, cols = 64, n = rows * cols;
    float *fa = malloc((size_t)n * 4), *fb = malloc((size_t)n * 4);
    double *da = malloc((size_t)n * 8), *db = malloc((size_t)n * 8);
    uint8_t *cond = malloc((size_t)n);
    cr_assert(fa && fb && da && db && cond);
    fill(fa, da, n, 1);
    fill(fb, db, n, 2);
    for (int64_t i = 0; i < n; i++) cond[i] = (uint8_t)((i * 7) % 3 == 0 ? (i % 5 ? 1 : 9) : 0);
    goblin_op ops[12] = {GOBLIN_OP_ADD, GOBLIN_OP_SUB, GOBLIN_OP_MUL, GOBLIN_OP_DIV,
                         GOBLIN_OP_MAXIMUM, GOBLIN_OP_MINIMUM, GOBLIN_OP_EQ, GOBLIN_OP_NE,
                         GOBLIN_OP_LT, GOBLIN_OP_LE, GOBLIN_OP_GT, GOBLIN_OP_GE};
    for (int di = 0; di < 2; di++) {
        goblin_dtype dt = di ? F64 : F32;
        void *a = di ? (void *)da : (void *)fa, *b = di ? (void *)db : (void *)fb;
        size_t es = di ? 8 : 4;
        goblin_tensor full_a = gt_tensor(dt, 2, SH(rows, cols), a);
        goblin_tensor full_b = gt_tensor(dt, 2, SH(rows, cols), b);
        goblin_tensor scal = gt_tensor(dt, 0, NULL, (char *)b + 3 * es); /* b[3] is NaN */
        goblin_tensor scal2 = gt_tensor(dt, 2, SH(1, 1), (char *)b + 21 * es);
        goblin_tensor row = gt_tensor(dt, 1, SH(cols), b);
        goblin_tensor col = gt_tensor(dt, 2, SH(rows, 1), b); /* not accelerated: falls back */
        goblin_tensor strided = gt_tensor(dt, 2, SH(rows, cols / 2), b);
        strided.strides[1] = 2;
        strided.strides[0] = cols;
        goblin_tensor half_a = gt_tensor(dt, 2, SH(rows, cols / 2), a);
        for (int k = 0; k < 12; k++) {
            goblin_tensor s1[2] = {full_a, full_b};
            blis_vs_ref(ops[k], dt, s1, 2, "same shape");
            goblin_tensor s2[2] = {full_a, scal};
            blis_vs_ref(ops[k], dt, s2, 2, "scalar b");
            goblin_tensor s3[2] = {scal2, full_a};
            blis_vs_ref(ops[k], dt, s3, 2, "scalar a");
            goblin_tensor s4[2] = {full_a, row};
            blis_vs_ref(ops[k], dt, s4, 2, "row b");
            goblin_tensor s5[2] = {row, full_a};
            blis_vs_ref(ops[k], dt, s5, 2, "row a");
            goblin_tensor s6[2] = {full_a, col};
            blis_vs_ref(ops[k], dt, s6, 2, "column b");
            goblin_tensor s7[2] = {half_a, strided};
            blis_vs_ref(ops[k], dt, s7, 2, "strided b");
        }
        goblin_tensor c_full = gt_tensor(BOOL, 2, SH(rows, cols), cond);
        goblin_tensor c_row = gt_tensor(BOOL, 1, SH(cols), cond);
        goblin_tensor w1[3] = {c_full, full_a, full_b};
        blis_vs_ref(GOBLIN_OP_WHERE, dt, w1, 3, "where same shape");
        goblin_tensor w2[3] = {c_full, full_a, scal};
        blis_vs_ref(GOBLIN_OP_WHERE, dt, w2, 3, "where scalar b");
        goblin_tensor w3[3] = {c_full, scal2, full_b};
        blis_vs_ref(GOBLIN_OP_WHERE, dt, w3, 3, "where scalar a");
        goblin_tensor w4[3] = {c_row, full_a, row};
        blis_vs_ref(GOBLIN_OP_WHERE, dt, w4, 3, "where row cond and b");
        goblin_tensor w5[3] = {c_full, col, full_b};
        blis_vs_ref(GOBLIN_OP_WHERE, dt, w5, 3, "where column a");
    }
    free(fa);
    free(fb);
    free(da);
    free(db);
    free(cond);
}

Test(elementwise, blis_fast_path_is_used) {
    if (!have_blis()) cr_skip_test("BLIS backend not built");
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int32_t x, s, y, z;
    cr_assert_eq(goblin_graph_input(g, F32, 2, SH(4, 5), &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, F32, 1, SH(5), &s), GOBLIN_OK);
    int32_t xs[2] = {x, s};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MUL, xs, 2, NULL, 0, &y), GOBLIN_OK);
    int32_t yx[2] = {y, x};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_GE, yx, 2, NULL, 0, &z), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, z), GOBLIN_OK);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = BLIS;
    p.threads = 2;
    goblin_exec *ex;
    cr_assert_eq(goblin_exec_new(&ex, g, &p), GOBLIN_OK);
    float xd[20], sd[5] = {1, -1, 2, 0.5f, 0};
    for (int i = 0; i < 20; i++) xd[i] = (float)(i - 10);
    goblin_tensor in[2] = {gt_tensor(F32, 2, SH(4, 5), xd), t1(F32, 5, sd)};
    goblin_tensor out = {0};
    cr_assert_eq(goblin_exec_run(ex, in, 2, &out, 1), GOBLIN_OK, "%s", goblin_exec_error(ex));
    for (int i = 0; i < 20; i++) {
        float v = xd[i] * sd[i % 5];
        cr_assert_eq(((uint8_t *)out.data)[i], v >= xd[i], "element %d", i);
    }
    goblin_buffer_free(out.data);
    goblin_exec_stats st;
    goblin_exec_stats_get(ex, &st);
    cr_assert_eq(st.nodes_fallback, 0, "mul with a row and ge on same shapes run on BLIS");
    goblin_exec_free(ex);
    goblin_graph_free(g);
}

/* ---- catalogue entries ------------------------------------------------------------------ */

Test(elementwise, info_and_contracts) {
    goblin_op all[] = {GOBLIN_OP_ADD, GOBLIN_OP_SUB, GOBLIN_OP_MUL, GOBLIN_OP_DIV, GOBLIN_OP_POW,
                       GOBLIN_OP_MAXIMUM, GOBLIN_OP_MINIMUM, GOBLIN_OP_CLAMP, GOBLIN_OP_ATAN2,
                       GOBLIN_OP_EQ, GOBLIN_OP_NE, GOBLIN_OP_LT, GOBLIN_OP_LE, GOBLIN_OP_GT,
                       GOBLIN_OP_GE, GOBLIN_OP_LOGICAL_AND, GOBLIN_OP_LOGICAL_OR,
                       GOBLIN_OP_LOGICAL_XOR, GOBLIN_OP_LOGICAL_NOT, GOBLIN_OP_WHERE,
                       GOBLIN_OP_ISNAN, GOBLIN_OP_FLOOR_DIV, GOBLIN_OP_TRUNC_DIV,
                       GOBLIN_OP_REM_FLOOR, GOBLIN_OP_REM_TRUNC, GOBLIN_OP_BITWISE_AND,
                       GOBLIN_OP_BITWISE_OR, GOBLIN_OP_BITWISE_XOR, GOBLIN_OP_BITWISE_NOT,
                       GOBLIN_OP_SHL, GOBLIN_OP_SHR_ARITH, GOBLIN_OP_SHR_LOGICAL};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        goblin_op_info info;
        cr_assert_eq(goblin_op_get_info(all[i], &info), GOBLIN_OK, "%s", goblin_op_name(all[i]));
        cr_assert_str_eq(info.group, "elementwise");
        cr_assert(strlen(info.summary) > 0 && strlen(info.semantics) > 0);
    }
    goblin_op_info ci;
    goblin_op_get_info(GOBLIN_OP_CLAMP, &ci);
    cr_assert_eq(ci.n_attrs, 2);
    goblin_op_info fi;
    goblin_op_get_info(GOBLIN_OP_FLOOR_DIV, &fi);
    cr_assert(strstr(fi.semantics, "// 0 = 0") != NULL, "%s", fi.semantics);
    double rel, ab;
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_ADD, F32, 1, &rel, &ab), GOBLIN_OK);
    cr_assert_eq(rel, 0x1p-23); /* 2u, u = 2^-24 */
    cr_assert(ab > 0 && ab <= 0x1p-126);
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_ADD, I32, 1, &rel, &ab), GOBLIN_OK);
    cr_assert(rel == 0 && ab == 0, "integer add is exact");
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_MAXIMUM, F64, 1, &rel, &ab), GOBLIN_OK);
    cr_assert(rel == 0 && ab == 0, "maximum selects: exact");
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_POW, F64, 1, &rel, &ab), GOBLIN_OK);
    cr_assert_eq(rel, 8 * 0x1p-53);
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_DIV, BF16, 1, &rel, &ab), GOBLIN_OK);
    cr_assert_eq(rel, 2 * 0x1p-8);
}
