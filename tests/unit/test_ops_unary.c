/* tests/unit/test_ops_unary.c - the unary group: math, cast, activations, random
 * and creation ops (libgoblin/ops_unary.c, backends/ref/ref_unary.c, random.h).
 *
 * References are independent of the kernels: hand-derived values, long double libm
 * (x87 80-bit, not the double functions the kernels call), GCC's _Float16
 * conversions, the published Philox known answers, and statistics. */
#include <criterion/criterion.h>
#include <float.h>
#include <stdlib.h>
#include "backends/kernel_util.h" /* f16/bf16 bit conversions of the test data */
#include "kernels/random.h"
#include "testutil.h"

#define REF GOBLIN_BACKEND_REF
#define BLIS GOBLIN_BACKEND_BLIS
#define PI_L 3.141592653589793238462643383279503L

static const goblin_dtype FLOATS[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64, GOBLIN_DTYPE_F16,
                                      GOBLIN_DTYPE_BF16};
static const goblin_dtype INTS[] = {GOBLIN_DTYPE_I8, GOBLIN_DTYPE_I16, GOBLIN_DTYPE_I32,
                                    GOBLIN_DTYPE_I64, GOBLIN_DTYPE_U8};

/* ---- helpers ------------------------------------------------------------------ */

static void *buf_new(goblin_dtype dt, int64_t n) {
    void *p = calloc((size_t)(n > 0 ? n : 1), goblin_dtype_size(dt));
    cr_assert_not_null(p);
    return p;
}

/* Float test data: store v (already representable, or rounded by the lead's helper). */
static void put(goblin_dtype dt, void *p, int64_t i, double v) { goblin__store_f64(dt, p, i, v); }
static double get(goblin_dtype dt, const void *p, int64_t i) { return goblin__load_f64(dt, p, i); }

/* Run op over one input tensor (or none) on a backend; asserts success. */
static goblin_tensor run1(goblin_op op, const goblin_tensor *in, int32_t n_in,
                          const goblin_attr *attrs, int32_t n_attrs, goblin_backend_kind be) {
    goblin_tensor out;
    char msg[256];
    goblin_err e = gt_run1(op, in, n_in, attrs, n_attrs, be, 1, &out, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_OK, "%s: %s (%s)", goblin_op_name(op), goblin_err_name(e), msg);
    return out;
}

/* Build only: the error code (message in msg). */
static goblin_err build(goblin_op op, const goblin_tensor *in, int32_t n_in,
                        const goblin_attr *attrs, int32_t n_attrs, char *msg, size_t cap) {
    return gt_build1(op, in, n_in, attrs, n_attrs, NULL, msg, cap);
}

static double round_to(goblin_dtype dt, double v) {
    switch (dt) {
    case GOBLIN_DTYPE_F32: return (float)v;
    case GOBLIN_DTYPE_F16: return (double)(_Float16)v;
    case GOBLIN_DTYPE_BF16: return goblin__bf16_to_f32(goblin__f32_to_bf16((float)v));
    default: return v;
    }
}

/* ---- Philox and the deterministic helpers of random.h --------------------------- */

Test(random, philox4x32_10_known_answers) {
    /* Random123's kat_vectors (Salmon et al. SC'11) */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int v = 0; v < 3; v++) {
        uint32_t out[4];
        goblin__philox4x32_10(&kat[v][0], &kat[v][4], out);
        for (int w = 0; w < 4; w++)
            cr_assert_eq(out[w], kat[v][6 + w], "vector %d word %d: %08x", v, w, out[w]);
    }
}

Test(random, draw_uses_offset_plus_index_as_counter) {
    uint32_t a[4], b[4], c[4];
    /* counter (lo, hi) of offset + i, carrying into the high word */
    goblin__rng_draw(7, 0xffffffffull, 185, 1, a);
    uint32_t ctr[4] = {0, 1, 185, 0}, key[2] = {7, 0};
    goblin__philox4x32_10(ctr, key, b);
    cr_assert_arr_eq(a, b, sizeof a);
    /* the key is (lo32(seed), hi32(seed)) */
    goblin__rng_draw(0x0000000500000003ull, 0, 9, 0, c);
    uint32_t ctr2[4] = {0, 0, 9, 0}, key2[2] = {3, 5};
    goblin__philox4x32_10(ctr2, key2, b);
    cr_assert_arr_eq(c, b, sizeof c);
}

/* One ulp of the double nearest @p ref (2^-1074 for subnormals). */
static long double ulp_at(long double ref) {
    if (ref == 0) return 0x1p-1074L;
    int e = ilogbl(ref) - 52;
    return ldexpl(1.0L, e < -1074 ? -1074 : e);
}

/* log: |err| <= 1 ulp of the true value. Measured against __float128 logq over all
 * 2^24 24-bit uniforms and 48M 53-bit uniforms, near-1, near-sqrt(2)/2, wide-exponent
 * and subnormal inputs: max 0.83 ulp. Reference here: x87 long double logl. */
static void check_log(double u) {
    long double ref = logl((long double)u);
    double got = goblin__rng_log(u);
    cr_assert(fabsl(got - ref) <= ulp_at(ref), "log(%a) = %a, ref %La", u, got, ref);
}

/* cos(2 pi t): |err| <= 2^-53 against cosl(2 pi t) directly, and |err| <= 1 ulp of the
 * true value (measured against __float128 over all 2^24 24-bit t and 24M 53-bit t:
 * max 0.72 ulp, 0.72 * 2^-53 absolute) against a reference that reduces exactly first:
 * 4t = n + r with r in [-1/2, 1/2] is exact in long double too, and then the long
 * double cos/sin of r pi/2 is accurate relative to the result even next to the
 * zeros at t = 1/4, 3/4. */
static void check_cos2pi(double t) {
    double got = goblin__rng_cos2pi(t);
    long double direct = cosl(2 * PI_L * (long double)t);
    cr_assert(fabsl(got - direct) <= 0x1p-53L, "cos2pi(%a) = %a, cosl %La", t, got, direct);
    long double t4 = 4.0L * t, n = floorl(t4 + 0.5L), r = t4 - n, a = r * (PI_L / 2);
    int q = (int)n & 3;
    long double ref = q == 0 ? cosl(a) : q == 1 ? -sinl(a) : q == 2 ? -cosl(a) : sinl(a);
    if (ref == 0) {
        cr_assert_eq(got, 0.0, "cos2pi(%a) = %a", t, got);
        return;
    }
    cr_assert(fabsl(got - ref) <= ulp_at(ref), "cos2pi(%a) = %a, ref %La", t, got, ref);
}

Test(random, log_and_cos2pi_are_accurate) {
    uint64_t s = 12345;
    for (int i = 0; i < 1000000; i++) {
        /* the uniforms Box-Muller feeds in: (k + 1) 2^-p for log, k 2^-p for cos */
        uint64_t k = (uint64_t)(gt_rand(&s) * 0x1p53);
        check_log((double)(k + 1) * 0x1p-53);
        check_log((double)((k >> 29) + 1) * 0x1p-24);
        check_cos2pi((double)k * 0x1p-53);
        check_cos2pi((double)(k >> 29) * 0x1p-24);
        double u = gt_rand(&s);
        double v = gt_rand(&s);
        switch (i & 3) {
        case 0: /* any exponent, subnormals included */
            check_log(fmax(ldexp(u, -(int)(v * 1080)), 0x1p-1074));
            break;
        case 1: /* just below 1 */
            check_log(1.0 - ldexp(floor(u * 0x1p20), -53 - (int)(v * 20)));
            break;
        case 2: /* m near sqrt(2), where the reduction switches to m / 2 */
            check_log(ldexp(0x1.6a09e667f3bcdp0 + (u - 0.5) * 0x1p-30, -1 - (int)(v * 1000)));
            break;
        default: /* t next to the quadrant and octant boundaries j/8 */
        {
            double t = floor(v * 8) / 8 + ldexp(u - 0.5, -20 - (int)(v * 264) % 33);
            check_cos2pi(t < 0 ? t + 1 : t);
            break;
        }
        }
    }
    /* exact cases: log 1, and the points where cos(2 pi t) is 1, -1 or 0 */
    cr_assert_eq(goblin__rng_log(1.0), 0.0);
    cr_assert_eq(goblin__rng_cos2pi(0.0), 1.0);
    cr_assert_eq(goblin__rng_cos2pi(0.5), -1.0);
    cr_assert_eq(goblin__rng_cos2pi(0.25), 0.0);
    cr_assert_eq(goblin__rng_cos2pi(0.75), 0.0);
    /* the extremes of the inputs: the largest and smallest 53-bit uniforms, powers of 2 */
    check_log(0x1p-53);
    check_log(0x1p-1074);
    check_log(0x1p-1022);
    check_log(1.0 - 0x1p-53);
    for (int e = 1; e <= 1074; e++) check_log(ldexp(1.0, -e));
    check_cos2pi(1.0 - 0x1p-53);
    check_cos2pi(0x1p-53);
    check_cos2pi(0.25 - 0x1p-53);
    check_cos2pi(0.75 + 0x1p-53);
}

/* ---- integer semantics ------------------------------------------------------------ */

Test(unary, integer_neg_abs_sign_square_wrap) {
    int64_t sh[] = {5};
    {
        int8_t x[5] = {-128, -1, 0, 16, 127};
        goblin_tensor in = gt_tensor(GOBLIN_DTYPE_I8, 1, sh, x);
        struct { goblin_op op; int8_t want[5]; } cases[] = {
            {GOBLIN_OP_NEG, {-128, 1, 0, -16, -127}},
            {GOBLIN_OP_ABS, {-128, 1, 0, 16, 127}},
            {GOBLIN_OP_SIGN, {-1, -1, 0, 1, 1}},
            {GOBLIN_OP_SQUARE, {0, 1, 0, 0, 1}}, /* 16384, 1, 0, 256, 16129 mod 256 */
            {GOBLIN_OP_RELU, {0, 0, 0, 16, 127}},
            {GOBLIN_OP_FLOOR, {-128, -1, 0, 16, 127}},
            {GOBLIN_OP_ROUND, {-128, -1, 0, 16, 127}},
        };
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            goblin_tensor out = run1(cases[c].op, &in, 1, NULL, 0, REF);
            cr_assert_eq(out.dtype, GOBLIN_DTYPE_I8);
            cr_assert_arr_eq(out.data, cases[c].want, 5, "%s", goblin_op_name(cases[c].op));
            goblin_buffer_free(out.data);
        }
    }
    {
        int64_t x[5] = {INT64_MIN, -3, 0, 3037000500LL, INT64_MAX};
        goblin_tensor in = gt_tensor(GOBLIN_DTYPE_I64, 1, sh, x);
        int64_t neg[5] = {INT64_MIN, 3, 0, -3037000500LL, -INT64_MAX};
        int64_t abs_[5] = {INT64_MIN, 3, 0, 3037000500LL, INT64_MAX};
        int64_t sq[5] = {0, 9, 0, (int64_t)(3037000500ULL * 3037000500ULL), 1};
        goblin_tensor o1 = run1(GOBLIN_OP_NEG, &in, 1, NULL, 0, REF);
        goblin_tensor o2 = run1(GOBLIN_OP_ABS, &in, 1, NULL, 0, REF);
        goblin_tensor o3 = run1(GOBLIN_OP_SQUARE, &in, 1, NULL, 0, REF);
        cr_assert_arr_eq(o1.data, neg, sizeof neg);
        cr_assert_arr_eq(o2.data, abs_, sizeof abs_);
        cr_assert_arr_eq(o3.data, sq, sizeof sq);
        goblin_buffer_free(o1.data);
        goblin_buffer_free(o2.data);
        goblin_buffer_free(o3.data);
    }
    {
        uint8_t x[5] = {0, 1, 2, 16, 255};
        goblin_tensor in = gt_tensor(GOBLIN_DTYPE_U8, 1, sh, x);
        uint8_t neg[5] = {0, 255, 254, 240, 1}, sign[5] = {0, 1, 1, 1, 1}, sq[5] = {0, 1, 4, 0, 1};
        goblin_tensor o1 = run1(GOBLIN_OP_NEG, &in, 1, NULL, 0, REF);
        goblin_tensor o2 = run1(GOBLIN_OP_SIGN, &in, 1, NULL, 0, REF);
        goblin_tensor o3 = run1(GOBLIN_OP_SQUARE, &in, 1, NULL, 0, REF);
        goblin_tensor o4 = run1(GOBLIN_OP_ABS, &in, 1, NULL, 0, REF);
        cr_assert_arr_eq(o1.data, neg, 5);
        cr_assert_arr_eq(o2.data, sign, 5);
        cr_assert_arr_eq(o3.data, sq, 5);
        cr_assert_arr_eq(o4.data, x, 5);
        goblin_buffer_free(o1.data);
        goblin_buffer_free(o2.data);
        goblin_buffer_free(o3.data);
        goblin_buffer_free(o4.data);
    }
    {
        int16_t x[5] = {-32768, -2, 0, 200, 32767};
        goblin_tensor in = gt_tensor(GOBLIN_DTYPE_I16, 1, sh, x);
        int16_t sq[5] = {0, 4, 0, (int16_t)(uint16_t)40000u, 1};
        int16_t abs_[5] = {-32768, 2, 0, 200, 32767};
        goblin_tensor o1 = run1(GOBLIN_OP_SQUARE, &in, 1, NULL, 0, REF);
        goblin_tensor o2 = run1(GOBLIN_OP_ABS, &in, 1, NULL, 0, REF);
        cr_assert_arr_eq(o1.data, sq, sizeof sq);
        cr_assert_arr_eq(o2.data, abs_, sizeof abs_);
        goblin_buffer_free(o1.data);
        goblin_buffer_free(o2.data);
    }
    {
        int32_t x[5] = {INT32_MIN, -7, 0, 65536, INT32_MAX};
        goblin_tensor in = gt_tensor(GOBLIN_DTYPE_I32, 1, sh, x);
        int32_t neg[5] = {INT32_MIN, 7, 0, -65536, -INT32_MAX};
        int32_t sq[5] = {0, 49, 0, 0, 1};
        goblin_tensor o1 = run1(GOBLIN_OP_NEG, &in, 1, NULL, 0, REF);
        goblin_tensor o2 = run1(GOBLIN_OP_SQUARE, &in, 1, NULL, 0, REF);
        goblin_tensor o3 = run1(GOBLIN_OP_TRUNC, &in, 1, NULL, 0, REF);
        cr_assert_arr_eq(o1.data, neg, sizeof neg);
        cr_assert_arr_eq(o2.data, sq, sizeof sq);
        cr_assert_arr_eq(o3.data, x, sizeof x);
        goblin_buffer_free(o1.data);
        goblin_buffer_free(o2.data);
        goblin_buffer_free(o3.data);
    }
}

/* ---- rounding and special values ---------------------------------------------------- */

Test(unary, rounding_ops_hand_values) {
    double x[] = {0.5, 1.5, 2.5, -0.5, -2.5, 2.4999, -1.2, 1.2, -0.0, INFINITY, -INFINITY, NAN};
    double rnd[] = {0, 2, 2, -0.0, -2, 2, -1, 1, -0.0, INFINITY, -INFINITY, NAN};
    double flo[] = {0, 1, 2, -1, -3, 2, -2, 1, -0.0, INFINITY, -INFINITY, NAN};
    double cei[] = {1, 2, 3, -0.0, -2, 3, -1, 2, -0.0, INFINITY, -INFINITY, NAN};
    double tru[] = {0, 1, 2, -0.0, -2, 2, -1, 1, -0.0, INFINITY, -INFINITY, NAN};
    const double *want[] = {rnd, flo, cei, tru};
    goblin_op ops[] = {GOBLIN_OP_ROUND, GOBLIN_OP_FLOOR, GOBLIN_OP_CEIL, GOBLIN_OP_TRUNC};
    int64_t n = sizeof x / sizeof *x, sh[] = {n};
    for (size_t d = 0; d < 4; d++) {
        goblin_dtype dt = FLOATS[d];
        void *b = buf_new(dt, n);
        for (int64_t i = 0; i < n; i++) put(dt, b, i, x[i]);
        goblin_tensor in = gt_tensor(dt, 1, sh, b);
        for (int o = 0; o < 4; o++) {
            goblin_tensor out = run1(ops[o], &in, 1, NULL, 0, REF);
            for (int64_t i = 0; i < n; i++) {
                double g = get(dt, out.data, i), w = want[o][i];
                cr_assert(isnan(w) ? isnan(g) : (g == w && signbit(g) == signbit(w)),
                          "%s %s(%g) = %g, want %g", goblin_dtype_name(dt),
                          goblin_op_name(ops[o]), x[i], g, w);
            }
            goblin_buffer_free(out.data);
        }
        free(b);
    }
}

Test(unary, sign_relu_abs_neg_special_values) {
    double x[] = {-0.0, 0.0, NAN, -INFINITY, INFINITY, -3, 2};
    double sign[] = {0.0, 0.0, NAN, -1, 1, -1, 1};
    double relu[] = {-0.0, 0.0, NAN, 0, INFINITY, 0, 2};
    double abs_[] = {0.0, 0.0, NAN, INFINITY, INFINITY, 3, 2};
    double neg[] = {0.0, -0.0, NAN, INFINITY, -INFINITY, 3, -2};
    const double *want[] = {sign, relu, abs_, neg};
    goblin_op ops[] = {GOBLIN_OP_SIGN, GOBLIN_OP_RELU, GOBLIN_OP_ABS, GOBLIN_OP_NEG};
    int64_t n = 7, sh[] = {7};
    for (size_t d = 0; d < 4; d++) {
        goblin_dtype dt = FLOATS[d];
        void *b = buf_new(dt, n);
        for (int64_t i = 0; i < n; i++) put(dt, b, i, x[i]);
        goblin_tensor in = gt_tensor(dt, 1, sh, b);
        for (int o = 0; o < 4; o++) {
            goblin_tensor out = run1(ops[o], &in, 1, NULL, 0, REF);
            for (int64_t i = 0; i < n; i++) {
                double g = get(dt, out.data, i), w = want[o][i];
                cr_assert(isnan(w) ? isnan(g) : (g == w && signbit(g) == signbit(w)),
                          "%s(%g) = %g", goblin_op_name(ops[o]), x[i], g);
            }
            goblin_buffer_free(out.data);
        }
        free(b);
    }
}

/* ---- float math against long double libm, within the op's contract ------------------ */

static long double o_exp(long double x) { return expl(x); }
static long double o_log(long double x) { return logl(x); }
static long double o_sqrt(long double x) { return sqrtl(x); }
static long double o_rsqrt(long double x) { return 1.0L / sqrtl(x); }
static long double o_recip(long double x) { return 1.0L / x; }
static long double o_sin(long double x) { return sinl(x); }
static long double o_cos(long double x) { return cosl(x); }
static long double o_tanh(long double x) { return tanhl(x); }
static long double o_erf(long double x) { return erfl(x); }
static long double o_log1p(long double x) { return log1pl(x); }
static long double o_expm1(long double x) { return expm1l(x); }
static long double o_square(long double x) { return x * x; }
static long double o_sigmoid(long double x) { return 1.0L / (1.0L + expl(-x)); }
static long double o_silu(long double x) { return x / (1.0L + expl(-x)); }
static long double o_gelu(long double x) {
    return 0.5L * x * erfcl(-x / sqrtl(2.0L));
}
static long double o_gelu_tanh(long double x) {
    long double a = sqrtl(2.0L / PI_L) * (x + 0.044715L * x * x * x);
    return x / (1.0L + expl(-2.0L * a)); /* = 0.5 x (1 + tanh(a)) */
}

typedef struct math_case {
    goblin_op op;
    long double (*f)(long double);
    double lo, hi;
    int64_t approx; /* GELU attribute, -1 = none */
} math_case;

static const math_case MATH[] = {
    {GOBLIN_OP_EXP, o_exp, -30, 30, -1},         {GOBLIN_OP_LOG, o_log, 0, 100, -1},
    {GOBLIN_OP_SQRT, o_sqrt, 0, 1000, -1},       {GOBLIN_OP_RSQRT, o_rsqrt, 0, 100, -1},
    {GOBLIN_OP_RECIPROCAL, o_recip, -10, 10, -1}, {GOBLIN_OP_SIN, o_sin, -20, 20, -1},
    {GOBLIN_OP_COS, o_cos, -20, 20, -1},         {GOBLIN_OP_TANH, o_tanh, -10, 10, -1},
    {GOBLIN_OP_ERF, o_erf, -5, 5, -1},           {GOBLIN_OP_LOG1P, o_log1p, -1, 10, -1},
    {GOBLIN_OP_EXPM1, o_expm1, -10, 10, -1},     {GOBLIN_OP_SQUARE, o_square, -300, 300, -1},
    {GOBLIN_OP_SIGMOID, o_sigmoid, -40, 40, -1}, {GOBLIN_OP_SILU, o_silu, -40, 40, -1},
    {GOBLIN_OP_GELU, o_gelu, -12, 12, -1},       {GOBLIN_OP_GELU, o_gelu, -12, 12, GOBLIN_GELU_ERF},
    {GOBLIN_OP_GELU, o_gelu_tanh, -12, 12, GOBLIN_GELU_TANH},
};

static const double EDGES[] = {0.0,  -0.0, INFINITY, -INFINITY, NAN,    1.0,   -1.0,
                               0.5,  2.0,  1e-30,    -1e-30,    1e-300, 65504, 1e5,
                               -1e5, 3e38, 1e-6,     -1e-6,     0.25};

/* Check op over n inputs of dtype dt against the long double oracle. */
static void check_math(const math_case *mc, goblin_dtype dt, goblin_backend_kind be,
                       const void *inbuf, int64_t n, const goblin_tensor *in) {
    goblin_attr at = goblin_attr_int(GOBLIN_ATTR_APPROXIMATE, mc->approx);
    goblin_tensor out = run1(mc->op, in, 1, &at, mc->approx >= 0 ? 1 : 0, be);
    cr_assert_eq(out.dtype, dt);
    double rel, abs_tol;
    cr_assert_eq(goblin_op_contract(mc->op, dt, 1, &rel, &abs_tol), GOBLIN_OK);
    cr_assert(rel > 0);
    for (int64_t i = 0; i < n; i++) {
        double x = get(dt, inbuf, i);
        long double ref = mc->f((long double)x);
        double g = get(dt, out.data, i);
        double rounded = round_to(dt, (double)ref);
        bool ok;
        if (isnan((double)ref)) ok = isnan(g);
        else if (isinf(rounded)) ok = g == rounded; /* overflows in the dtype */
        else ok = !isnan(g) && fabsl((long double)g - ref) <= abs_tol + rel * fabsl(ref);
        cr_assert(ok, "%s %s approx=%lld x=%a: got %a, want %La (rel %g abs %g)",
                  goblin_dtype_name(dt), goblin_op_name(mc->op), (long long)mc->approx, x, g, ref,
                  rel, abs_tol);
    }
    goblin_buffer_free(out.data);
}

static void math_suite(goblin_backend_kind be) {
    const int64_t nr = 600;
    const int64_t ne = sizeof EDGES / sizeof *EDGES;
    int64_t n = nr + ne, sh[] = {n};
    for (size_t c = 0; c < sizeof MATH / sizeof *MATH; c++) {
        const math_case *mc = &MATH[c];
        for (size_t d = 0; d < 4; d++) {
            goblin_dtype dt = FLOATS[d];
            void *b = buf_new(dt, n);
            uint64_t s = 1000 + c * 7 + d;
            for (int64_t i = 0; i < nr; i++)
                put(dt, b, i, mc->lo + (mc->hi - mc->lo) * gt_rand(&s));
            for (int64_t i = 0; i < ne; i++) put(dt, b, nr + i, EDGES[i]);
            goblin_tensor in = gt_tensor(dt, 1, sh, b);
            check_math(mc, dt, be, b, n, &in);
            free(b);
        }
    }
}

Test(unary, float_math_within_contract_ref) { math_suite(REF); }

Test(unary, float_math_within_contract_blis) {
    if (goblin_backend_available(BLIS) != GOBLIN_OK) cr_skip_test("no BLIS backend");
    math_suite(BLIS);
}

Test(unary, contracts_as_documented) {
    double r, a;
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_EXP, GOBLIN_DTYPE_F32, 1, &r, &a), GOBLIN_OK);
    cr_assert_eq(r, 4 * 0x1p-24);
    cr_assert_eq(a, 0x1p-126);
    goblin_op_contract(GOBLIN_OP_SQRT, GOBLIN_DTYPE_F64, 1, &r, &a);
    cr_assert_eq(r, 2 * 0x1p-53);
    goblin_op_contract(GOBLIN_OP_GELU, GOBLIN_DTYPE_F16, 1, &r, &a);
    cr_assert_eq(r, 8 * 0x1p-11);
    goblin_op_contract(GOBLIN_OP_SQUARE, GOBLIN_DTYPE_I32, 1, &r, &a); /* integers exact */
    cr_assert(r == 0 && a == 0);
    goblin_op_contract(GOBLIN_OP_CAST, GOBLIN_DTYPE_F16, 1, &r, &a);
    cr_assert(r == 0 && a == 0);
    goblin_op_contract(GOBLIN_OP_RAND_NORMAL, GOBLIN_DTYPE_F64, 1, &r, &a);
    cr_assert(r == 0 && a == 0);
    goblin_op_contract(GOBLIN_OP_RAND_NORMAL, GOBLIN_DTYPE_F32, 1, &r, &a);
    cr_assert_eq(r, 2 * 0x1p-24);
    goblin_op_info info;
    cr_assert_eq(goblin_op_get_info(GOBLIN_OP_CAST, &info), GOBLIN_OK);
    cr_assert_str_eq(info.group, "unary");
    cr_assert(strstr(info.semantics, "saturating") != NULL);
    cr_assert_eq(goblin_op_get_info(GOBLIN_OP_DROPOUT, &info), GOBLIN_OK);
    cr_assert_eq(info.min_inputs, 1);
}

/* ---- layouts: strided, broadcast, empty, scalar -------------------------------------- */

Test(unary, strided_and_broadcast_inputs) {
    /* x viewed as the transpose of a 3x4 buffer (strides 1, 4) */
    double base[12];
    for (int i = 0; i < 12; i++) base[i] = -2.0 + 0.37 * i;
    int64_t sh[] = {4, 3};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F64, 2, sh, base);
    in.strides[0] = 1;
    in.strides[1] = 4;
    goblin_tensor out = run1(GOBLIN_OP_EXP, &in, 1, NULL, 0, REF);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            cr_assert(gt_close(((double *)out.data)[r * 3 + c], (double)expl(base[c * 4 + r]),
                               4 * 0x1p-53, 0));
    goblin_buffer_free(out.data);
    /* a broadcast row: stride 0 on dim 0; and cast through it */
    float row[3] = {1.5f, -2.5f, 300.9f};
    int64_t sh2[] = {5, 3};
    goblin_tensor b = gt_tensor(GOBLIN_DTYPE_F32, 2, sh2, row);
    b.strides[0] = 0;
    b.strides[1] = 1;
    goblin_attr dt = goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_I8);
    goblin_tensor o2 = run1(GOBLIN_OP_CAST, &b, 1, &dt, 1, REF);
    for (int r = 0; r < 5; r++) {
        cr_assert_eq(((int8_t *)o2.data)[r * 3 + 0], 1);
        cr_assert_eq(((int8_t *)o2.data)[r * 3 + 1], -2);
        cr_assert_eq(((int8_t *)o2.data)[r * 3 + 2], 127);
    }
    goblin_buffer_free(o2.data);
    /* negative stride on an integer op: x reversed */
    int32_t v[6] = {1, -2, 3, -4, 5, INT32_MIN};
    int64_t sh3[] = {6};
    goblin_tensor rv = gt_tensor(GOBLIN_DTYPE_I32, 1, sh3, v + 5);
    rv.strides[0] = -1;
    goblin_tensor o3 = run1(GOBLIN_OP_ABS, &rv, 1, NULL, 0, REF);
    int32_t want[6] = {INT32_MIN, 5, 4, 3, 2, 1};
    cr_assert_arr_eq(o3.data, want, sizeof want);
    goblin_buffer_free(o3.data);
}

Test(unary, empty_and_scalar_tensors) {
    int64_t sh[] = {0, 3};
    float dummy = 0;
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 2, sh, &dummy);
    goblin_op ops[] = {GOBLIN_OP_EXP, GOBLIN_OP_NEG, GOBLIN_OP_GELU, GOBLIN_OP_DROPOUT};
    goblin_attr seed = goblin_attr_int(GOBLIN_ATTR_SEED, 1);
    for (int o = 0; o < 4; o++) {
        goblin_tensor out = run1(ops[o], &in, 1, &seed, ops[o] == GOBLIN_OP_DROPOUT, REF);
        cr_assert_eq(out.rank, 2);
        cr_assert_eq(out.shape[0], 0);
        goblin_buffer_free(out.data);
    }
    goblin_attr ca = goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_I64);
    goblin_tensor oc = run1(GOBLIN_OP_CAST, &in, 1, &ca, 1, REF);
    cr_assert_eq(oc.dtype, GOBLIN_DTYPE_I64);
    goblin_buffer_free(oc.data);
    int64_t zero[] = {0};
    goblin_attr ga[] = {goblin_attr_ints(GOBLIN_ATTR_SHAPE, zero, 1),
                        goblin_attr_int(GOBLIN_ATTR_SEED, 3)};
    goblin_tensor og = run1(GOBLIN_OP_RAND_NORMAL, NULL, 0, ga, 2, REF);
    cr_assert_eq(og.shape[0], 0);
    goblin_buffer_free(og.data);
    /* rank 0 */
    double x = -4;
    goblin_tensor s = gt_tensor(GOBLIN_DTYPE_F64, 0, NULL, &x);
    goblin_tensor os = run1(GOBLIN_OP_SQRT, &s, 1, NULL, 0, REF);
    cr_assert_eq(os.rank, 0);
    cr_assert(isnan(*(double *)os.data));
    goblin_buffer_free(os.data);
    goblin_attr fa[] = {goblin_attr_ints(GOBLIN_ATTR_SHAPE, NULL, 0),
                        goblin_attr_float(GOBLIN_ATTR_VALUE, 2.5)};
    goblin_tensor of = run1(GOBLIN_OP_FULL, NULL, 0, fa, 2, REF);
    cr_assert_eq(of.rank, 0);
    cr_assert_eq(*(float *)of.data, 2.5f);
    goblin_buffer_free(of.data);
}

/* ---- cast ------------------------------------------------------------------------------ */

/* The documented rule, written independently of the kernel: the value of x (exact
 * double or integer) converted to dt, read back as long double. */
static bool is_int_dt(goblin_dtype dt) { return goblin_dtype_is_int(dt); }

static void int_limits(goblin_dtype dt, long double *lo, long double *hi) {
    switch (dt) {
    case GOBLIN_DTYPE_I8: *lo = -128; *hi = 127; break;
    case GOBLIN_DTYPE_I16: *lo = -32768; *hi = 32767; break;
    case GOBLIN_DTYPE_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case GOBLIN_DTYPE_I64: *lo = (long double)INT64_MIN; *hi = (long double)INT64_MAX; break;
    default: *lo = 0; *hi = 255; break;
    }
}

static int bits_of(goblin_dtype dt) { return (int)goblin_dtype_size(dt) * 8; }

/* Expected cast of an integer value v to dt. */
static long double want_from_int(int64_t v, goblin_dtype dt) {
    if (dt == GOBLIN_DTYPE_BOOL) return v != 0;
    if (is_int_dt(dt)) {
        int b = bits_of(dt);
        uint64_t m = b == 64 ? ~0ull : ((1ull << b) - 1);
        uint64_t u = (uint64_t)v & m;
        if (dt == GOBLIN_DTYPE_U8) return (long double)u;
        if (b < 64 && (u >> (b - 1))) return (long double)u - (long double)(1ull << b);
        return (long double)(int64_t)u;
    }
    switch (dt) {
    case GOBLIN_DTYPE_F64: return (double)v;
    case GOBLIN_DTYPE_F32: return (float)v;
    case GOBLIN_DTYPE_F16: return (_Float16)v; /* GCC: correctly rounded */
    default: {
        /* bf16 of an integer: nearest with 8 significant bits, ties to even */
        long double a = fabsl((long double)v);
        if (a == 0) return 0;
        int e = 0;
        while (a >= 256) { a /= 2; e++; } /* exact: powers of two */
        long double fl = floorl(a), fr = a - fl;
        if (fr > 0.5L || (fr == 0.5L && fmodl(fl, 2) != 0)) fl += 1;
        long double r = ldexpl(fl, e);
        return v < 0 ? -r : r;
    }
    }
}

/* Expected cast of a float value x to dt. */
static long double want_from_float(double x, goblin_dtype dt) {
    if (dt == GOBLIN_DTYPE_BOOL) return x != 0;
    if (is_int_dt(dt)) {
        if (isnan(x)) return 0;
        long double lo, hi, t = truncl((long double)x);
        int_limits(dt, &lo, &hi);
        return t < lo ? lo : t > hi ? hi : t;
    }
    switch (dt) {
    case GOBLIN_DTYPE_F64: return x;
    case GOBLIN_DTYPE_F32: return (float)x;
    case GOBLIN_DTYPE_F16: return (_Float16)x;
    default: {
        if (isnan(x) || isinf(x) || x == 0) return x;
        /* bf16: 8 significant bits, ties to even, overflow past the midpoint to 2^128 */
        int e;
        long double m = frexpl((long double)fabs(x), &e); /* [0.5, 1) */
        if (e < -125) { /* subnormal range: fixed quantum 2^-133 */
            long double q = ldexpl((long double)fabs(x), 133);
            long double fl = floorl(q), fr = q - fl;
            if (fr > 0.5L || (fr == 0.5L && fmodl(fl, 2) != 0)) fl += 1;
            return copysignl(ldexpl(fl, -133), x);
        }
        long double q = ldexpl(m, 8), fl = floorl(q), fr = q - fl;
        if (fr > 0.5L || (fr == 0.5L && fmodl(fl, 2) != 0)) fl += 1;
        long double r = ldexpl(fl, e - 8);
        if (r >= 0x1p128L) r = INFINITY;
        return copysignl(r, x);
    }
    }
}

static long double read_out(goblin_dtype dt, const void *p, int64_t i) {
    if (dt == GOBLIN_DTYPE_I64) return (long double)((const int64_t *)p)[i];
    if (dt == GOBLIN_DTYPE_BOOL) return ((const uint8_t *)p)[i];
    return get(dt, p, i);
}

Test(cast, all_dtype_pairs) {
    const double fvals[] = {0.0,  -0.0,   1.0,     -1.0,  0.5,      -0.5,     1.9999,
                            -1.9999, 2.5, 127.0,   127.9, 128.0,    -128.0,   -128.9,
                            -129.0, 255.5, 256.0,  300.7, -300.7,   32767.6,  32768.0,
                            -32769.0, 65504.0, 65520.0, 1e9,   -3e9,     2147483647.0, 2147483648.0,
                            -2147483649.0, 9.2233720368547758e18, -9.2233720368547758e18,
                            1e19,   -1e19,  3.3961e38, 1e300, 1.00048828125,
                            1.00048828125 + 0x1p-30,
                            1.0 + 0x1p-8, 1.0 + 0x1p-8 + 0x1p-40, 1e-7, 1e-40, INFINITY,
                            -INFINITY, NAN};
    const int64_t ivals[] = {0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 300, -300, 32767,
                             32768, -32769, 65504, 65520, 70000, 16777217, 16777219,
                             33685505 /* 2^25 + 2^17 + 1 */, 2147483647, -2147483648LL,
                             4294967296LL, (1LL << 53) + 1, INT64_MAX, INT64_MIN};
    const int nf = sizeof fvals / sizeof *fvals, ni = sizeof ivals / sizeof *ivals;
    for (int s = 0; s < GOBLIN_DTYPE_COUNT; s++) {
        goblin_dtype src_dt = (goblin_dtype)s;
        bool fsrc = goblin_dtype_is_float(src_dt);
        int n = fsrc ? nf : src_dt == GOBLIN_DTYPE_BOOL ? 2 : ni;
        void *b = buf_new(src_dt, n);
        int64_t *srcv = calloc((size_t)n, sizeof(int64_t));
        for (int i = 0; i < n; i++) {
            if (fsrc) {
                put(src_dt, b, i, fvals[i]);
            } else if (src_dt == GOBLIN_DTYPE_BOOL) {
                ((uint8_t *)b)[i] = (uint8_t)(i ? 7 : 0); /* any nonzero byte is true */
                srcv[i] = i != 0;
            } else {
                /* the source value: ivals wrapped into the source type */
                int64_t v = (int64_t)want_from_int(ivals[i], src_dt);
                srcv[i] = v;
                goblin__store_i64(src_dt, b, i, v);
            }
        }
        int64_t sh[] = {n};
        goblin_tensor in = gt_tensor(src_dt, 1, sh, b);
        for (int d = 0; d < GOBLIN_DTYPE_COUNT; d++) {
            goblin_dtype dst = (goblin_dtype)d;
            goblin_attr a = goblin_attr_int(GOBLIN_ATTR_DTYPE, d);
            goblin_tensor out = run1(GOBLIN_OP_CAST, &in, 1, &a, 1, REF);
            cr_assert_eq(out.dtype, dst);
            for (int i = 0; i < n; i++) {
                long double w = fsrc ? want_from_float(get(src_dt, b, i), dst)
                                     : want_from_int(srcv[i], dst);
                long double g = read_out(dst, out.data, i);
                bool sign_ok = !goblin_dtype_is_float(dst) || signbit(g) == signbit(w);
                bool ok = isnan(w) ? isnan(g) : (g == w && sign_ok);
                cr_assert(ok, "cast %s -> %s of element %d (%La): got %La, want %La",
                          goblin_dtype_name(src_dt), goblin_dtype_name(dst), i,
                          fsrc ? (long double)get(src_dt, b, i) : (long double)srcv[i], g, w);
            }
            goblin_buffer_free(out.data);
        }
        free(srcv);
        free(b);
    }
}

Test(cast, hand_values) {
    /* f64 -> f16 must round once: 1 + 2^-11 + 2^-30 is just above a halfway point */
    double d = 1.0 + 0x1p-11 + 0x1p-30;
    int64_t one[] = {1};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F64, 1, one, &d);
    goblin_attr a = goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_F16);
    goblin_tensor o = run1(GOBLIN_OP_CAST, &in, 1, &a, 1, REF);
    cr_assert_eq(*(uint16_t *)o.data, 0x3c01); /* via f32 it would tie to 0x3c00 */
    goblin_buffer_free(o.data);
    /* i32 2^25 + 2^17 + 1 -> bf16 rounds up to 2^25 + 2^18 (0x4c01), not to 2^25 */
    int32_t v = 33685505;
    goblin_tensor iv = gt_tensor(GOBLIN_DTYPE_I32, 1, one, &v);
    a = goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_BF16);
    o = run1(GOBLIN_OP_CAST, &iv, 1, &a, 1, REF);
    cr_assert_eq(*(uint16_t *)o.data, 0x4c01);
    goblin_buffer_free(o.data);
    /* float -> u8 saturates at 0 and 255; NaN -> 0 */
    float f[4] = {-1.5f, 300.0f, NAN, 254.9f};
    int64_t four[] = {4};
    goblin_tensor fv = gt_tensor(GOBLIN_DTYPE_F32, 1, four, f);
    a = goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_U8);
    o = run1(GOBLIN_OP_CAST, &fv, 1, &a, 1, REF);
    uint8_t wu[4] = {0, 255, 0, 254};
    cr_assert_arr_eq(o.data, wu, 4);
    goblin_buffer_free(o.data);
    /* i64 -> i8 wraps; -> bool is != 0 */
    int64_t iv64[4] = {300, -1, 256, -129};
    goblin_tensor i64 = gt_tensor(GOBLIN_DTYPE_I64, 1, four, iv64);
    a = goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_I8);
    o = run1(GOBLIN_OP_CAST, &i64, 1, &a, 1, REF);
    int8_t w8[4] = {44, -1, 0, 127};
    cr_assert_arr_eq(o.data, w8, 4);
    goblin_buffer_free(o.data);
    a = goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_BOOL);
    o = run1(GOBLIN_OP_CAST, &fv, 1, &a, 1, REF);
    uint8_t wb[4] = {1, 1, 1, 1};
    cr_assert_arr_eq(o.data, wb, 4);
    goblin_buffer_free(o.data);
}

/* ---- random ops ------------------------------------------------------------------------ */

static goblin_tensor gen(goblin_op op, goblin_dtype dt, int64_t n, uint64_t seed, int64_t offset,
                         const goblin_attr *extra, int n_extra, goblin_backend_kind be) {
    goblin_attr a[8];
    int k = 0;
    a[k++] = goblin_attr_ints(GOBLIN_ATTR_SHAPE, &n, 1);
    a[k++] = goblin_attr_int(GOBLIN_ATTR_DTYPE, dt);
    a[k++] = goblin_attr_int(GOBLIN_ATTR_SEED, (int64_t)seed);
    a[k++] = goblin_attr_int(GOBLIN_ATTR_OFFSET, offset);
    for (int i = 0; i < n_extra; i++) a[k++] = extra[i];
    return run1(op, NULL, 0, a, k, be);
}

static void same_bits(const goblin_tensor *a, int64_t ai, const goblin_tensor *b, int64_t bi,
                      int64_t n) {
    size_t es = goblin_dtype_size(a->dtype);
    cr_assert(memcmp((const char *)a->data + ai * es, (const char *)b->data + bi * es,
                     (size_t)n * es) == 0,
              "%s: draws differ", goblin_dtype_name(a->dtype));
}

Test(random, same_seed_same_numbers_and_offset_is_the_tail) {
    goblin_op ops[] = {GOBLIN_OP_RAND_UNIFORM, GOBLIN_OP_RAND_NORMAL, GOBLIN_OP_RANDINT,
                       GOBLIN_OP_BERNOULLI};
    goblin_attr hi = goblin_attr_float(GOBLIN_ATTR_HIGH, 100); /* fits every integer dtype */
    goblin_attr p = goblin_attr_float(GOBLIN_ATTR_P, 0.3);
    for (int o = 0; o < 4; o++) {
        for (size_t d = 0; d < 4; d++) {
            goblin_dtype dt = ops[o] == GOBLIN_OP_RANDINT ? INTS[d] : FLOATS[d];
            const goblin_attr *ex = ops[o] == GOBLIN_OP_RANDINT ? &hi
                                    : ops[o] == GOBLIN_OP_BERNOULLI ? &p : NULL;
            int nex = ex ? 1 : 0;
            goblin_tensor a = gen(ops[o], dt, 1000, 42, 0, ex, nex, REF);
            goblin_tensor b = gen(ops[o], dt, 1000, 42, 0, ex, nex, REF);
            goblin_tensor c = gen(ops[o], dt, 400, 42, 600, ex, nex, REF);
            goblin_tensor e = gen(ops[o], dt, 1000, 43, 0, ex, nex, REF);
            same_bits(&a, 0, &b, 0, 1000);
            same_bits(&a, 600, &c, 0, 400);
            size_t es = goblin_dtype_size(dt);
            cr_assert(memcmp(a.data, e.data, 1000 * es) != 0, "seed changes the draw");
            goblin_buffer_free(a.data);
            goblin_buffer_free(b.data);
            goblin_buffer_free(c.data);
            goblin_buffer_free(e.data);
        }
    }
}

Test(random, uniform_range_and_moments) {
    const int64_t n = 200000;
    for (size_t d = 0; d < 4; d++) {
        goblin_dtype dt = FLOATS[d];
        goblin_attr lh[] = {goblin_attr_float(GOBLIN_ATTR_LOW, -2),
                            goblin_attr_float(GOBLIN_ATTR_HIGH, 3)};
        goblin_tensor t = gen(GOBLIN_OP_RAND_UNIFORM, dt, n, 7, 0, lh, 2, REF);
        double s = 0, s2 = 0, mn = 1e9, mx = -1e9;
        for (int64_t i = 0; i < n; i++) {
            double v = get(dt, t.data, i);
            cr_assert(v >= -2 && v < 3, "%s value %g outside [-2, 3)", goblin_dtype_name(dt), v);
            s += v;
            s2 += v * v;
            mn = fmin(mn, v);
            mx = fmax(mx, v);
        }
        double mean = s / n, var = s2 / n - mean * mean;
        /* mean 0.5, var 25/12; sd of the mean ~ 0.0032; coarse grids (bf16) shift both */
        double tol = dt == GOBLIN_DTYPE_BF16 ? 0.03 : 0.015;
        cr_assert(fabs(mean - 0.5) < tol, "%s mean %g", goblin_dtype_name(dt), mean);
        cr_assert(fabs(var - 25.0 / 12) < 0.04, "%s var %g", goblin_dtype_name(dt), var);
        cr_assert(mn < -1.99 && mx > 2.9);
        goblin_buffer_free(t.data);
    }
    /* [0, 1) in bf16 uses 8 bits: every value is a multiple of 2^-8 and < 1 */
    goblin_tensor t = gen(GOBLIN_OP_RAND_UNIFORM, GOBLIN_DTYPE_BF16, 5000, 1, 0, NULL, 0, REF);
    for (int64_t i = 0; i < 5000; i++) {
        double v = get(GOBLIN_DTYPE_BF16, t.data, i);
        cr_assert(v >= 0 && v < 1 && v * 256 == floor(v * 256));
    }
    goblin_buffer_free(t.data);
    /* a high that rounds up in the dtype: results stay below it */
    goblin_attr lh[] = {goblin_attr_float(GOBLIN_ATTR_LOW, 0.99),
                        goblin_attr_float(GOBLIN_ATTR_HIGH, 0.999)};
    t = gen(GOBLIN_OP_RAND_UNIFORM, GOBLIN_DTYPE_F16, 5000, 1, 0, lh, 2, REF);
    for (int64_t i = 0; i < 5000; i++) cr_assert(get(GOBLIN_DTYPE_F16, t.data, i) < 0.999);
    goblin_buffer_free(t.data);
}

Test(random, normal_moments) {
    const int64_t n = 200000;
    for (size_t d = 0; d < 4; d++) {
        goblin_dtype dt = FLOATS[d];
        goblin_attr ms[] = {goblin_attr_float(GOBLIN_ATTR_MEAN, 1.5),
                            goblin_attr_float(GOBLIN_ATTR_STD, 2)};
        goblin_tensor t = gen(GOBLIN_OP_RAND_NORMAL, dt, n, 99, 5, ms, 2, REF);
        double m1 = 0, m2 = 0, m3 = 0, m4 = 0;
        for (int64_t i = 0; i < n; i++) m1 += get(dt, t.data, i);
        m1 /= n;
        for (int64_t i = 0; i < n; i++) {
            double z = (get(dt, t.data, i) - m1) / 2;
            m2 += z * z;
            m3 += z * z * z;
            m4 += z * z * z * z;
        }
        m2 /= n;
        m3 /= n;
        m4 /= n;
        /* sd of the sample mean 2/sqrt(n) = 0.0045; of var ~ 0.0032; skew ~ 0.0055; kurt ~ 0.011 */
        cr_assert(fabs(m1 - 1.5) < 0.025, "%s mean %g", goblin_dtype_name(dt), m1);
        cr_assert(fabs(m2 - 1) < 0.02, "%s var %g", goblin_dtype_name(dt), m2);
        cr_assert(fabs(m3) < 0.03, "%s skew %g", goblin_dtype_name(dt), m3);
        cr_assert(fabs(m4 - 3) < 0.08, "%s kurtosis %g", goblin_dtype_name(dt), m4);
        goblin_buffer_free(t.data);
    }
}

Test(random, normal_matches_box_muller_by_hand) {
    /* element i of seed 5 offset 0 (f64): Box-Muller from the four Philox words,
     * recomputed here with long double libm */
    goblin_tensor t = gen(GOBLIN_OP_RAND_NORMAL, GOBLIN_DTYPE_F64, 64, 5, 0, NULL, 0, REF);
    goblin_tensor t32 = gen(GOBLIN_OP_RAND_NORMAL, GOBLIN_DTYPE_F32, 64, 5, 0, NULL, 0, REF);
    for (int i = 0; i < 64; i++) {
        uint32_t ctr[4] = {(uint32_t)i, 0, GOBLIN_OP_RAND_NORMAL, 0}, key[2] = {5, 0}, x[4];
        goblin__philox4x32_10(ctr, key, x);
        long double u1 = ((long double)((((uint64_t)x[0] << 21) | (x[1] >> 11)) + 1)) * 0x1p-53L;
        long double u2 = ((long double)(((uint64_t)x[2] << 21) | (x[3] >> 11))) * 0x1p-53L;
        long double z = sqrtl(-2 * logl(u1)) * cosl(2 * PI_L * u2);
        cr_assert(fabsl(((double *)t.data)[i] - z) <= 1e-14L * (1 + fabsl(z)), "%d", i);
        long double a1 = ((long double)((x[0] >> 8) + 1)) * 0x1p-24L;
        long double a2 = ((long double)(x[1] >> 8)) * 0x1p-24L;
        long double z32 = sqrtl(-2 * logl(a1)) * cosl(2 * PI_L * a2);
        cr_assert(fabsl(((float *)t32.data)[i] - z32) <= 0x1p-23L * (fabsl(z32) + 1e-6L), "%d", i);
    }
    goblin_buffer_free(t.data);
    goblin_buffer_free(t32.data);
}

Test(random, bernoulli_attr_and_input_probabilities) {
    const int64_t n = 100000;
    goblin_attr p = goblin_attr_float(GOBLIN_ATTR_P, 0.3);
    goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_BOOL, GOBLIN_DTYPE_I64, GOBLIN_DTYPE_BF16};
    for (int d = 0; d < 4; d++) {
        goblin_tensor t = gen(GOBLIN_OP_BERNOULLI, dts[d], n, 3, 0, &p, 1, REF);
        int64_t ones = 0;
        for (int64_t i = 0; i < n; i++) {
            long double v = read_out(dts[d], t.data, i);
            cr_assert(v == 0 || v == 1);
            ones += v == 1;
        }
        /* sd of the count sqrt(n p (1-p)) = 145 */
        cr_assert(llabs(ones - 30000) < 800, "%s: %lld ones", goblin_dtype_name(dts[d]),
                  (long long)ones);
        goblin_buffer_free(t.data);
    }
    /* an input of probabilities: 0 -> 0, 1 -> 1, NaN -> 0, 0.5 -> about half */
    double pr[4] = {0.0, 1.0, NAN, 0.5};
    double *pb = buf_new(GOBLIN_DTYPE_F64, 4000);
    for (int i = 0; i < 4000; i++) pb[i] = pr[i % 4];
    int64_t sh[] = {1000, 4};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F64, 2, sh, pb);
    goblin_attr seed = goblin_attr_int(GOBLIN_ATTR_SEED, 11);
    goblin_tensor o = run1(GOBLIN_OP_BERNOULLI, &in, 1, &seed, 1, REF);
    cr_assert_eq(o.dtype, GOBLIN_DTYPE_F64);
    int half = 0;
    for (int i = 0; i < 1000; i++) {
        double *r = (double *)o.data + 4 * i;
        cr_assert(r[0] == 0 && r[1] == 1 && r[2] == 0);
        half += r[3] == 1;
    }
    cr_assert(half > 420 && half < 580, "%d", half);
    goblin_buffer_free(o.data);
    free(pb);
}

Test(random, randint_range_and_uniformity) {
    goblin_attr lh[] = {goblin_attr_float(GOBLIN_ATTR_LOW, -3),
                        goblin_attr_float(GOBLIN_ATTR_HIGH, 7)};
    const int64_t n = 100000;
    goblin_dtype dts[] = {GOBLIN_DTYPE_I8, GOBLIN_DTYPE_I32, GOBLIN_DTYPE_I64, GOBLIN_DTYPE_F32};
    for (int d = 0; d < 4; d++) {
        goblin_tensor t = gen(GOBLIN_OP_RANDINT, dts[d], n, 8, 0, lh, 2, REF);
        int64_t cnt[10] = {0};
        for (int64_t i = 0; i < n; i++) {
            long double v = read_out(dts[d], t.data, i);
            cr_assert(v >= -3 && v < 7 && v == floorl(v), "%Lg", v);
            cnt[(int)v + 3]++;
        }
        for (int k = 0; k < 10; k++) /* 10000 each, sd 95 */
            cr_assert(llabs(cnt[k] - 10000) < 500, "%s value %d: %lld", goblin_dtype_name(dts[d]),
                      k - 3, (long long)cnt[k]);
        goblin_buffer_free(t.data);
    }
    /* the whole u8 range, and a wide i64 range */
    goblin_attr u8r[] = {goblin_attr_float(GOBLIN_ATTR_LOW, 0),
                         goblin_attr_float(GOBLIN_ATTR_HIGH, 256)};
    goblin_tensor t = gen(GOBLIN_OP_RANDINT, GOBLIN_DTYPE_U8, 20000, 1, 0, u8r, 2, REF);
    int seen0 = 0, seen255 = 0;
    for (int i = 0; i < 20000; i++) {
        seen0 |= ((uint8_t *)t.data)[i] == 0;
        seen255 |= ((uint8_t *)t.data)[i] == 255;
    }
    cr_assert(seen0 && seen255);
    goblin_buffer_free(t.data);
    goblin_attr wide[] = {goblin_attr_float(GOBLIN_ATTR_LOW, -0x1p53),
                          goblin_attr_float(GOBLIN_ATTR_HIGH, 0x1p53)};
    t = gen(GOBLIN_OP_RANDINT, GOBLIN_DTYPE_I64, 20000, 1, 0, wide, 2, REF);
    int neg = 0;
    for (int i = 0; i < 20000; i++) {
        int64_t v = ((int64_t *)t.data)[i];
        cr_assert(v >= -(1LL << 53) && v < (1LL << 53));
        neg += v < 0;
    }
    cr_assert(neg > 9500 && neg < 10500);
    goblin_buffer_free(t.data);
}

Test(random, dropout_scales_kept_and_zeroes_dropped) {
    const int64_t n = 50000;
    for (size_t d = 0; d < 4; d++) {
        goblin_dtype dt = FLOATS[d];
        void *b = buf_new(dt, n);
        uint64_t s = 5;
        for (int64_t i = 0; i < n; i++) put(dt, b, i, 1 + 3 * gt_rand(&s));
        put(dt, b, 0, NAN);
        put(dt, b, 1, INFINITY);
        int64_t sh[] = {n};
        goblin_tensor in = gt_tensor(dt, 1, sh, b);
        goblin_attr a[] = {goblin_attr_int(GOBLIN_ATTR_SEED, 21),
                           goblin_attr_float(GOBLIN_ATTR_P, 0.25)};
        goblin_tensor o = run1(GOBLIN_OP_DROPOUT, &in, 1, a, 2, REF);
        int64_t kept = 0;
        for (int64_t i = 2; i < n; i++) {
            double x = get(dt, b, i), y = get(dt, o.data, i);
            if (y == 0) continue;
            kept++;
            double want = dt == GOBLIN_DTYPE_F64 ? x * (1 / 0.75)
                                                 : round_to(dt, (float)x * (float)(1 / 0.75));
            cr_assert_eq(y, want, "%s: %g -> %g, want %g", goblin_dtype_name(dt), x, y, want);
        }
        cr_assert(llabs(kept - 37500) < 600, "%lld kept", (long long)kept);
        double y0 = get(dt, o.data, 0), y1 = get(dt, o.data, 1);
        cr_assert(isnan(y0));
        cr_assert(isnan(y1) || isinf(y1)); /* dropped inf: inf * 0 = NaN; kept: inf */
        goblin_buffer_free(o.data);
        /* p = 0: identity; p = 1: zeros (x * 0) */
        a[1] = goblin_attr_float(GOBLIN_ATTR_P, 0);
        o = run1(GOBLIN_OP_DROPOUT, &in, 1, a, 2, REF);
        cr_assert(memcmp((char *)o.data + 2 * goblin_dtype_size(dt),
                         (char *)b + 2 * goblin_dtype_size(dt),
                         (size_t)(n - 2) * goblin_dtype_size(dt)) == 0);
        goblin_buffer_free(o.data);
        a[1] = goblin_attr_float(GOBLIN_ATTR_P, 1);
        o = run1(GOBLIN_OP_DROPOUT, &in, 1, a, 2, REF);
        for (int64_t i = 2; i < n; i++) cr_assert_eq(get(dt, o.data, i), 0.0);
        cr_assert(isnan(get(dt, o.data, 0)) && isnan(get(dt, o.data, 1)));
        goblin_buffer_free(o.data);
        free(b);
    }
}

Test(random, dropout_mask_follows_the_row_major_index_of_strided_input) {
    /* the same values given contiguous and as a transposed view: same output */
    float base[6] = {1, 2, 3, 4, 5, 6}; /* 2x3 */
    float tr[6] = {1, 4, 2, 5, 3, 6};   /* its transpose stored 3x2 */
    int64_t sh[] = {2, 3};
    goblin_tensor a = gt_tensor(GOBLIN_DTYPE_F32, 2, sh, base);
    goblin_tensor b = gt_tensor(GOBLIN_DTYPE_F32, 2, sh, tr);
    b.strides[0] = 1;
    b.strides[1] = 2;
    goblin_attr at[] = {goblin_attr_int(GOBLIN_ATTR_SEED, 4),
                        goblin_attr_float(GOBLIN_ATTR_P, 0.5)};
    goblin_tensor oa = run1(GOBLIN_OP_DROPOUT, &a, 1, at, 2, REF);
    goblin_tensor ob = run1(GOBLIN_OP_DROPOUT, &b, 1, at, 2, REF);
    cr_assert_arr_eq(oa.data, ob.data, sizeof base);
    goblin_buffer_free(oa.data);
    goblin_buffer_free(ob.data);
}

/* With axis 1, element (t, b, e) of a [T, B, E] value draws at b * T * E + t * E + e (its
 * index with dim 1 moved first: the batch-first draw), counted here by hand; the ref and
 * BLIS kernels. */
Test(random, dropout_axis_draws_the_moved_index) {
    enum { T = 3, B = 5, E = 4, N = T * B * E };
    double x[N];
    for (int i = 0; i < N; i++) x[i] = 1.0 + i;
    int64_t sh[] = {T, B, E};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F64, 3, sh, x);
    goblin_attr at[] = {goblin_attr_int(GOBLIN_ATTR_SEED, 77), goblin_attr_int(GOBLIN_ATTR_OFFSET, 1000),
                        goblin_attr_float(GOBLIN_ATTR_P, 0.5), goblin_attr_int(GOBLIN_ATTR_AXIS, 1)};
    goblin_backend_kind bes[] = {REF, BLIS};
    for (int k = 0; k < 2; k++) {
        goblin_tensor o = run1(GOBLIN_OP_DROPOUT, &in, 1, at, 4, bes[k]);
        const double *y = o.data;
        int kept = 0;
        for (int t = 0; t < T; t++)
            for (int b = 0; b < B; b++)
                for (int e = 0; e < E; e++) {
                    int i = (t * B + b) * E + e;
                    uint32_t w[4];
                    goblin__rng_draw(77, 1000, GOBLIN_OP_DROPOUT, (uint64_t)(b * T * E + t * E + e), w);
                    double want = goblin__rng_keep(w, 0.5) ? x[i] * 2.0 : 0.0;
                    cr_assert_eq(y[i], want, "backend %d, (%d, %d, %d)", k, t, b, e);
                    kept += y[i] != 0;
                }
        cr_assert(kept > 0 && kept < N, "%d kept", kept);
        goblin_buffer_free(o.data);
    }
    /* axis 0 and no axis draw the same */
    goblin_attr a0[4];
    memcpy(a0, at, sizeof at);
    a0[3] = goblin_attr_int(GOBLIN_ATTR_AXIS, 0);
    goblin_tensor o0 = run1(GOBLIN_OP_DROPOUT, &in, 1, a0, 4, REF), on = run1(GOBLIN_OP_DROPOUT, &in, 1, at, 3, REF);
    cr_assert_arr_eq(o0.data, on.data, sizeof x);
    goblin_buffer_free(o0.data);
    goblin_buffer_free(on.data);
}

/* ---- creation ------------------------------------------------------------------------ */

Test(creation, full_all_dtypes) {
    int64_t sh[] = {2, 3};
    struct { double v; goblin_dtype dt; long double want; } c[] = {
        {2.75, GOBLIN_DTYPE_F32, 2.75},   {2.75, GOBLIN_DTYPE_I32, 2},
        {-2.75, GOBLIN_DTYPE_I8, -2},     {1e10, GOBLIN_DTYPE_I16, 32767},
        {-5, GOBLIN_DTYPE_U8, 0},         {0.1, GOBLIN_DTYPE_F16, (_Float16)0.1},
        {0x1p62, GOBLIN_DTYPE_I64, 0x1p62}, {0.5, GOBLIN_DTYPE_BOOL, 1},
        {NAN, GOBLIN_DTYPE_I32, 0},       {-INFINITY, GOBLIN_DTYPE_F64, -INFINITY},
        {1.0 + 0x1p-8 + 0x1p-40, GOBLIN_DTYPE_BF16, 1.0 + 0x1p-7},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        goblin_attr a[] = {goblin_attr_ints(GOBLIN_ATTR_SHAPE, sh, 2),
                           goblin_attr_int(GOBLIN_ATTR_DTYPE, c[i].dt),
                           goblin_attr_float(GOBLIN_ATTR_VALUE, c[i].v)};
        goblin_tensor o = run1(GOBLIN_OP_FULL, NULL, 0, a, 3, REF);
        cr_assert_eq(o.dtype, c[i].dt);
        cr_assert_eq(o.rank, 2);
        for (int k = 0; k < 6; k++)
            cr_assert_eq(read_out(c[i].dt, o.data, k), c[i].want, "case %zu", i);
        goblin_buffer_free(o.data);
    }
    /* NaN in a float dtype */
    goblin_attr a[] = {goblin_attr_ints(GOBLIN_ATTR_SHAPE, sh, 2),
                       goblin_attr_float(GOBLIN_ATTR_VALUE, NAN)};
    goblin_tensor o = run1(GOBLIN_OP_FULL, NULL, 0, a, 2, REF);
    cr_assert(isnan(((float *)o.data)[5]));
    goblin_buffer_free(o.data);
}

Test(creation, arange_values) {
    int64_t n = 7;
    goblin_attr a[] = {goblin_attr_ints(GOBLIN_ATTR_SHAPE, &n, 1),
                       goblin_attr_float(GOBLIN_ATTR_START, -1),
                       goblin_attr_float(GOBLIN_ATTR_STEP, 0.1),
                       goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_F64)};
    goblin_tensor o = run1(GOBLIN_OP_ARANGE, NULL, 0, a, 4, REF);
    for (int i = 0; i < 7; i++) /* correctly rounded -1 + i * 0.1 (the double 0.1) */
        cr_assert_eq(((double *)o.data)[i], (double)(-1.0L + (long double)i * (long double)0.1),
                     "%d", i); /* exact in long double, then one rounding */
    goblin_buffer_free(o.data);
    a[3] = goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_F32);
    o = run1(GOBLIN_OP_ARANGE, NULL, 0, a, 4, REF);
    for (int i = 0; i < 7; i++)
        cr_assert_eq(((float *)o.data)[i], (float)(-1.0L + (long double)i * (long double)0.1));
    goblin_buffer_free(o.data);
    /* integers: -5, -2, 1, ... exact; default dtype f32 */
    a[1] = goblin_attr_float(GOBLIN_ATTR_START, -5);
    a[2] = goblin_attr_float(GOBLIN_ATTR_STEP, 3);
    a[3] = goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_I8);
    o = run1(GOBLIN_OP_ARANGE, NULL, 0, a, 4, REF);
    int8_t want[7] = {-5, -2, 1, 4, 7, 10, 13};
    cr_assert_arr_eq(o.data, want, 7);
    goblin_buffer_free(o.data);
    o = run1(GOBLIN_OP_ARANGE, NULL, 0, a, 1, REF); /* shape only: 0, 1, ... in f32 */
    cr_assert_eq(o.dtype, GOBLIN_DTYPE_F32);
    for (int i = 0; i < 7; i++) cr_assert_eq(((float *)o.data)[i], (float)i);
    goblin_buffer_free(o.data);
}

/* ---- errors ---------------------------------------------------------------------------- */

Test(errors, bad_dtypes_attributes_and_shapes) {
    char msg[256];
    int64_t sh[] = {3};
    int32_t ib[3];
    float fb[3];
    goblin_tensor ti = gt_tensor(GOBLIN_DTYPE_I32, 1, sh, ib);
    goblin_tensor tf = gt_tensor(GOBLIN_DTYPE_F32, 1, sh, fb);
    goblin_tensor tb = gt_tensor(GOBLIN_DTYPE_BOOL, 1, sh, ib);
    cr_assert_eq(build(GOBLIN_OP_EXP, &ti, 1, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(build(GOBLIN_OP_GELU, &ti, 1, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(build(GOBLIN_OP_NEG, &tb, 1, NULL, 0, msg, sizeof msg), GOBLIN_EDTYPE);
    goblin_attr seed1 = goblin_attr_int(GOBLIN_ATTR_SEED, 1);
    cr_assert_eq(build(GOBLIN_OP_DROPOUT, &ti, 1, &seed1, 1, msg, sizeof msg), GOBLIN_EDTYPE);
    cr_assert_eq(build(GOBLIN_OP_EXP, NULL, 0, NULL, 0, msg, sizeof msg), GOBLIN_EINVAL);
    cr_assert_eq(build(GOBLIN_OP_CAST, &tf, 1, NULL, 0, msg, sizeof msg), GOBLIN_EINVAL);
    cr_assert(strstr(msg, "dtype") != NULL, "%s", msg);
    goblin_attr bad_dt = goblin_attr_int(GOBLIN_ATTR_DTYPE, 42);
    cr_assert_eq(build(GOBLIN_OP_CAST, &tf, 1, &bad_dt, 1, msg, sizeof msg), GOBLIN_ERANGE);
    goblin_attr ap = goblin_attr_int(GOBLIN_ATTR_APPROXIMATE, 2);
    cr_assert_eq(build(GOBLIN_OP_GELU, &tf, 1, &ap, 1, msg, sizeof msg), GOBLIN_ERANGE);
    goblin_attr axis = goblin_attr_int(GOBLIN_ATTR_AXIS, 0);
    cr_assert_eq(build(GOBLIN_OP_EXP, &tf, 1, &axis, 1, msg, sizeof msg), GOBLIN_EINVAL);

    int64_t four = 4, two[2] = {2, 2};
    goblin_attr shp = goblin_attr_ints(GOBLIN_ATTR_SHAPE, &four, 1);
    goblin_attr seed = goblin_attr_int(GOBLIN_ATTR_SEED, 1);
    /* no seed */
    cr_assert_eq(build(GOBLIN_OP_RAND_UNIFORM, NULL, 0, &shp, 1, msg, sizeof msg), GOBLIN_EINVAL);
    /* low >= high, non-finite */
    goblin_attr u1[] = {shp, seed, goblin_attr_float(GOBLIN_ATTR_LOW, 2),
                        goblin_attr_float(GOBLIN_ATTR_HIGH, 2)};
    cr_assert_eq(build(GOBLIN_OP_RAND_UNIFORM, NULL, 0, u1, 4, msg, sizeof msg), GOBLIN_ERANGE);
    u1[3] = goblin_attr_float(GOBLIN_ATTR_HIGH, INFINITY);
    cr_assert_eq(build(GOBLIN_OP_RAND_UNIFORM, NULL, 0, u1, 4, msg, sizeof msg), GOBLIN_ERANGE);
    goblin_attr u2[] = {shp, seed, goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_I32)};
    cr_assert_eq(build(GOBLIN_OP_RAND_UNIFORM, NULL, 0, u2, 3, msg, sizeof msg), GOBLIN_EDTYPE);
    goblin_attr nm[] = {shp, seed, goblin_attr_float(GOBLIN_ATTR_STD, -1)};
    cr_assert_eq(build(GOBLIN_OP_RAND_NORMAL, NULL, 0, nm, 3, msg, sizeof msg), GOBLIN_ERANGE);
    goblin_attr off[] = {shp, seed, goblin_attr_int(GOBLIN_ATTR_OFFSET, -1)};
    cr_assert_eq(build(GOBLIN_OP_RAND_NORMAL, NULL, 0, off, 3, msg, sizeof msg), GOBLIN_ERANGE);
    /* randint: high required, integers, fits the dtype */
    cr_assert_eq(build(GOBLIN_OP_RANDINT, NULL, 0, (goblin_attr[]){shp, seed}, 2, msg, sizeof msg),
                 GOBLIN_EINVAL);
    goblin_attr ri[] = {shp, seed, goblin_attr_float(GOBLIN_ATTR_HIGH, 2.5)};
    cr_assert_eq(build(GOBLIN_OP_RANDINT, NULL, 0, ri, 3, msg, sizeof msg), GOBLIN_ERANGE);
    goblin_attr ri2[] = {shp, seed, goblin_attr_float(GOBLIN_ATTR_HIGH, 129),
                         goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_I8)};
    cr_assert_eq(build(GOBLIN_OP_RANDINT, NULL, 0, ri2, 4, msg, sizeof msg), GOBLIN_ERANGE);
    ri2[2] = goblin_attr_float(GOBLIN_ATTR_HIGH, 128);
    cr_assert_eq(build(GOBLIN_OP_RANDINT, NULL, 0, ri2, 4, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    ri2[3] = goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_BOOL);
    cr_assert_eq(build(GOBLIN_OP_RANDINT, NULL, 0, ri2, 4, msg, sizeof msg), GOBLIN_EDTYPE);
    /* bernoulli: p out of range; input together with p; no input without p */
    goblin_attr be[] = {shp, seed, goblin_attr_float(GOBLIN_ATTR_P, 1.5)};
    cr_assert_eq(build(GOBLIN_OP_BERNOULLI, NULL, 0, be, 3, msg, sizeof msg), GOBLIN_ERANGE);
    be[2] = goblin_attr_float(GOBLIN_ATTR_P, 0.5);
    cr_assert_eq(build(GOBLIN_OP_BERNOULLI, &tf, 1, be + 1, 2, msg, sizeof msg), GOBLIN_EINVAL);
    cr_assert_eq(build(GOBLIN_OP_BERNOULLI, NULL, 0, be, 2, msg, sizeof msg), GOBLIN_EINVAL);
    cr_assert_eq(build(GOBLIN_OP_BERNOULLI, &ti, 1, &seed, 1, msg, sizeof msg), GOBLIN_EDTYPE);
    /* dropout p */
    goblin_attr dp[] = {seed, goblin_attr_float(GOBLIN_ATTR_P, -0.1)};
    cr_assert_eq(build(GOBLIN_OP_DROPOUT, &tf, 1, dp, 2, msg, sizeof msg), GOBLIN_ERANGE);
    /* shapes */
    int64_t neg = -1;
    goblin_attr fs[] = {goblin_attr_ints(GOBLIN_ATTR_SHAPE, &neg, 1),
                        goblin_attr_float(GOBLIN_ATTR_VALUE, 1)};
    cr_assert_neq(build(GOBLIN_OP_FULL, NULL, 0, fs, 2, msg, sizeof msg), GOBLIN_OK);
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    fs[0] = goblin_attr_ints(GOBLIN_ATTR_SHAPE, nine, 9);
    cr_assert_eq(build(GOBLIN_OP_FULL, NULL, 0, fs, 2, msg, sizeof msg), GOBLIN_ELIMIT);
    int64_t huge[2] = {1LL << 30, 1LL << 30};
    fs[0] = goblin_attr_ints(GOBLIN_ATTR_SHAPE, huge, 2);
    cr_assert_eq(build(GOBLIN_OP_FULL, NULL, 0, fs, 2, msg, sizeof msg), GOBLIN_ELIMIT);
    cr_assert_eq(build(GOBLIN_OP_FULL, NULL, 0, fs, 1, msg, sizeof msg),
                 GOBLIN_EINVAL); /* no value */
    /* arange: rank 1 only; integer start/step; values must fit */
    goblin_attr ar[] = {goblin_attr_ints(GOBLIN_ATTR_SHAPE, two, 2)};
    cr_assert_eq(build(GOBLIN_OP_ARANGE, NULL, 0, ar, 1, msg, sizeof msg), GOBLIN_ESHAPE);
    int64_t n200 = 200;
    goblin_attr ar2[] = {goblin_attr_ints(GOBLIN_ATTR_SHAPE, &n200, 1),
                         goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_I8)};
    cr_assert_eq(build(GOBLIN_OP_ARANGE, NULL, 0, ar2, 2, msg, sizeof msg), GOBLIN_ERANGE);
    int64_t n128 = 128;
    ar2[0] = goblin_attr_ints(GOBLIN_ATTR_SHAPE, &n128, 1);
    cr_assert_eq(build(GOBLIN_OP_ARANGE, NULL, 0, ar2, 2, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    goblin_attr ar3[] = {ar2[0], ar2[1], goblin_attr_float(GOBLIN_ATTR_STEP, 0.5)};
    cr_assert_eq(build(GOBLIN_OP_ARANGE, NULL, 0, ar3, 3, msg, sizeof msg), GOBLIN_ERANGE);
    goblin_attr ar4[] = {ar2[0], goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_BOOL)};
    cr_assert_eq(build(GOBLIN_OP_ARANGE, NULL, 0, ar4, 2, msg, sizeof msg), GOBLIN_EDTYPE);
}

/* ---- BLIS backend against the reference ---------------------------------------------- */

Test(backends, blis_dropout_kernel_is_the_references_at_any_thread_count) {
    /* BLIS has its own DROPOUT kernel (f32, f64, threaded over the flat index): the same
     * bits as the reference, with an offset, for 1, 3 and 4 threads and both dtypes */
    if (goblin_backend_available(BLIS) != GOBLIN_OK) cr_skip_test("no BLIS backend");
    const int64_t n = 40001;
    int64_t sh[] = {n};
    goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (int d = 0; d < 2; d++) {
        void *x = buf_new(dts[d], n);
        uint64_t s = 91;
        for (int64_t i = 0; i < n; i++) put(dts[d], x, i, 8 * gt_rand(&s) - 4);
        goblin_tensor in = gt_tensor(dts[d], 1, sh, x);
        goblin_attr a[] = {goblin_attr_int(GOBLIN_ATTR_SEED, -12345), goblin_attr_int(GOBLIN_ATTR_OFFSET, 1000003),
                           goblin_attr_float(GOBLIN_ATTR_P, 0.3)};
        goblin_tensor r = run1(GOBLIN_OP_DROPOUT, &in, 1, a, 3, REF);
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i++) kept += get(dts[d], r.data, i) != 0;
        /* Binomial(n, 0.7): 5 standard deviations */
        double sd = sqrt((double)n * 0.7 * 0.3);
        cr_assert(fabs((double)kept - 0.7 * (double)n) <= 5 * sd, "kept %lld of %lld", (long long)kept,
                  (long long)n);
        int threads[] = {1, 3, 4};
        for (int k = 0; k < 3; k++) {
            goblin_tensor b;
            char msg[256];
            cr_assert_eq(gt_run1(GOBLIN_OP_DROPOUT, &in, 1, a, 3, BLIS, threads[k], &b, msg, sizeof msg),
                         GOBLIN_OK, "%s", msg);
            cr_assert_arr_eq(r.data, b.data, (size_t)n * goblin_dtype_size(dts[d]), "%s, %d threads",
                             goblin_dtype_name(dts[d]), threads[k]);
            goblin_buffer_free(b.data);
        }
        goblin_buffer_free(r.data);
        free(x);
    }
}

Test(backends, blis_matches_ref_bit_for_bit_on_exact_ops_and_random) {
    if (goblin_backend_available(BLIS) != GOBLIN_OK) cr_skip_test("no BLIS backend");
    const int64_t n = 3000;
    int64_t sh[] = {n};
    /* exact ops: cast, neg/abs/round; random ops: deterministic by contract */
    float *x = buf_new(GOBLIN_DTYPE_F32, n);
    uint64_t s = 77;
    for (int64_t i = 0; i < n; i++) x[i] = (float)(600 * gt_rand(&s) - 300);
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 1, sh, x);
    goblin_op ops[] = {GOBLIN_OP_NEG, GOBLIN_OP_ABS, GOBLIN_OP_ROUND, GOBLIN_OP_RELU,
                       GOBLIN_OP_CAST, GOBLIN_OP_DROPOUT};
    for (int o = 0; o < 6; o++) {
        bool cast = ops[o] == GOBLIN_OP_CAST;
        goblin_attr a[] = {cast ? goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_I8)
                                : goblin_attr_int(GOBLIN_ATTR_SEED, 3)};
        int na = ops[o] == GOBLIN_OP_CAST || ops[o] == GOBLIN_OP_DROPOUT;
        goblin_tensor r = run1(ops[o], &in, 1, a, na, REF);
        goblin_tensor b = run1(ops[o], &in, 1, a, na, BLIS);
        cr_assert_arr_eq(r.data, b.data, (size_t)n * goblin_dtype_size(r.dtype), "%s",
                         goblin_op_name(ops[o]));
        goblin_buffer_free(r.data);
        goblin_buffer_free(b.data);
    }
    goblin_op gens[] = {GOBLIN_OP_RAND_UNIFORM, GOBLIN_OP_RAND_NORMAL};
    for (int o = 0; o < 2; o++) {
        goblin_tensor r = gen(gens[o], GOBLIN_DTYPE_F64, n, 9, 0, NULL, 0, REF);
        goblin_tensor b = gen(gens[o], GOBLIN_DTYPE_F64, n, 9, 0, NULL, 0, BLIS);
        same_bits(&r, 0, &b, 0, n);
        goblin_buffer_free(r.data);
        goblin_buffer_free(b.data);
    }
    free(x);
}
