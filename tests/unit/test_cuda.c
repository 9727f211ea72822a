/* tests/unit/test_cuda.c - the CUDA backend (libgoblin/backends/cuda/).
 *
 * Without a device (or without CUDA compiled in) the backend must say so with
 * a clear goblin_err and never crash: those tests run everywhere.
 *
 * With a device, the cross-backend conformance suite runs every catalogue op
 * on the CUDA backend and on the reference backend with fresh random inputs
 * (the seed is printed; GOBLIN_TEST_SEED=n repeats a run) and compares them
 * within the op's numeric contract (goblin_op_contract). Outputs are poisoned
 * with 0xFF bytes before each run, on the host and (GOBLIN_CUDA_POISON=1) on
 * the device, so an element a kernel forgets to write is caught. Any op that
 * falls back to the CPU is reported and fails the suite. The same harness is
 * run against the BLIS backend here, so it is itself exercised on machines
 * without a GPU. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "backends/kernel_util.h" /* goblin__load_f64 / goblin__load_i64 for comparisons */
#include "testutil.h"
#ifdef GOBLIN_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

/* ---- the no-device path ------------------------------------------------------ */

static goblin_err expected_unavailable(void) {
#ifdef GOBLIN_HAVE_CUDA
    return GOBLIN_ENODEV;
#else
    return GOBLIN_ENOTSUP;
#endif
}

static goblin_graph *add_graph(void) {
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t s[] = {2, 3};
    int32_t a, b, y;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, s, &a), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, s, &b), GOBLIN_OK);
    int32_t ab[] = {a, b};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, ab, 2, NULL, 0, &y), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, y), GOBLIN_OK);
    return g;
}

Test(cuda_nodev, availability_is_ok_or_a_clear_error) {
    goblin_err e = goblin_backend_available(GOBLIN_BACKEND_CUDA);
#ifdef GOBLIN_HAVE_CUDA
    cr_assert(e == GOBLIN_OK || e == GOBLIN_ENODEV, "got %s", goblin_err_name(e));
#else
    cr_assert_eq(e, GOBLIN_ENOTSUP, "got %s", goblin_err_name(e));
#endif
    cr_assert_str_eq(goblin_backend_name(GOBLIN_BACKEND_CUDA), "cuda");
}

/* Hiding every device makes any machine a no-device machine (the CUDA runtime
 * reads the variable when it initializes, and each Criterion test is a fresh
 * process). */
Test(cuda_nodev, hidden_devices_give_enodev_everywhere) {
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    goblin_err want = expected_unavailable();
    cr_assert_eq(goblin_backend_available(GOBLIN_BACKEND_CUDA), want);
    goblin_graph *g = add_graph();
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_CUDA;
    goblin_exec *ex = (goblin_exec *)0x1; /* must stay untouched on failure */
    cr_assert_eq(goblin_exec_new(&ex, g, &p), want);
    cr_assert_eq(ex, (goblin_exec *)0x1);
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 1, 1, 1, 1, 1};
    int64_t s[] = {2, 3};
    goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_F32, 2, s, a), gt_tensor(GOBLIN_DTYPE_F32, 2, s, b)};
    goblin_tensor out;
    memset(&out, 0, sizeof out);
    cr_assert_eq(goblin_graph_eval(g, &p, in, 2, &out, 1), want);
    cr_assert_null(out.data);
    cr_assert_str_not_empty(goblin_strerror(want));
    /* the same graph still runs on the CPU backends */
    p.backend = GOBLIN_BACKEND_REF;
    cr_assert_eq(goblin_graph_eval(g, &p, in, 2, &out, 1), GOBLIN_OK);
    cr_assert_eq(((float *)out.data)[5], 7.0f);
    goblin_buffer_free(out.data);
#ifdef GOBLIN_HAVE_CUDA
    uint64_t fr = 1, tot = 1;
    cr_assert_eq(goblin__cuda_device_memory(0, &fr, &tot), GOBLIN_ENODEV);
    cr_assert_eq(fr, 0);
    cr_assert_eq(tot, 0);
    cr_assert_eq(goblin__cuda_device_memory(0, NULL, &tot), GOBLIN_EINVAL);
#endif
    uint64_t mt = 1, mf = 1;
    cr_assert_eq(goblin_backend_memory(GOBLIN_BACKEND_CUDA, &mt, &mf), want);
    cr_assert_eq(mt, 0);
    cr_assert_eq(mf, 0);
    goblin_graph_free(g);
}

/* exec_new gives the same answer as goblin_backend_available, and on a device
 * machine a device index that does not exist is ENODEV too. */
Test(cuda_nodev, exec_new_matches_availability) {
    goblin_err avail = goblin_backend_available(GOBLIN_BACKEND_CUDA);
    goblin_graph *g = add_graph();
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_CUDA;
    goblin_exec *ex = NULL;
    cr_assert_eq(goblin_exec_new(&ex, g, &p), avail);
    if (avail == GOBLIN_OK) {
        float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, -6};
        int64_t s[] = {2, 3};
        goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_F32, 2, s, a),
                               gt_tensor(GOBLIN_DTYPE_F32, 2, s, b)};
        goblin_tensor out;
        memset(&out, 0, sizeof out);
        cr_assert_eq(goblin_exec_run(ex, in, 2, &out, 1), GOBLIN_OK, "%s", goblin_exec_error(ex));
        cr_assert_eq(((float *)out.data)[0], 1.5f);
        cr_assert_eq(((float *)out.data)[5], 0.0f);
        goblin_exec_stats st;
        goblin_exec_stats_get(ex, &st);
        cr_assert_eq(st.nodes_fallback, 0);
        goblin_buffer_free(out.data);
        goblin_exec_free(ex);
        goblin_exec *ex2 = NULL;
        p.device = 4096;
        cr_assert_eq(goblin_exec_new(&ex2, g, &p), GOBLIN_ENODEV);
        cr_assert_null(ex2);
    } else {
        cr_assert_null(ex);
        cr_assert_eq(avail, expected_unavailable());
    }
    goblin_graph_free(g);
}

/* ---- the conformance harness ---------------------------------------------------- */

enum { G_UNIF, G_POS, G_IDX, G_PROB, G_NEAR1 };
/* Contract scales: SC_ELEM |exact|; SC_K1 k max|x| (sums); SC_K2 k max|a| max|b| (dot
 * products); SC_KSQ k max|x|^2 (variance); SC_ONE |exact| + 1 (softmax, losses);
 * SC_NORM (|x| + mean|x|) rstd |w| + |b| with rstd <= 4 for these inputs. */
enum { SC_ELEM, SC_K1, SC_K2, SC_KSQ, SC_ONE, SC_SDPA, SC_NORM };
#define SAME ((goblin_dtype)-1)
#define MAXA 6

typedef struct tin {
    goblin_dtype dt; /* SAME: the case's dtype */
    int32_t rank;
    int64_t shape[5];
    int gen;
    int64_t lo, hi; /* G_IDX: integers in [lo, hi) */
} tin;

typedef struct tattr {
    goblin_attr_key key;
    int kind; /* 0 int, 1 float, 2 ints */
    int64_t i;
    double f;
    int32_t n;
    int64_t v[8];
} tattr;

typedef struct tcase {
    const char *name;
    goblin_op op;
    uint32_t dts;
    int32_t n_in;
    tin in[5];
    int32_t n_attr;
    tattr attr[MAXA];
    int64_t k;          /* reduction length for the contract */
    int scale;          /* how big the contract's scale is (SC_*) */
    bool specials;      /* sprinkle NaN, inf and -0 into float inputs */
    const char *formula;
    goblin_err expect;  /* an error both backends must return (GOBLIN_OK: compare) */
} tcase;

#define F GOBLIN_DTMASK_FLOAT
#define NUM GOBLIN_DTMASK_NUMERIC
#define ALL GOBLIN_DTMASK_ALL
#define INT GOBLIN_DTMASK_INT
#define B_ GOBLIN_DTMASK(GOBLIN_DTYPE_BOOL)
#define DM(x) GOBLIN_DTMASK(GOBLIN_DTYPE_##x)
#define T2(...) {__VA_ARGS__}
#define IN(r, ...) {SAME, r, {__VA_ARGS__}, G_UNIF, 0, 0}
#define INP(r, ...) {SAME, r, {__VA_ARGS__}, G_POS, 0, 0}
#define IDX(dt, lo, hi, r, ...) {GOBLIN_DTYPE_##dt, r, {__VA_ARGS__}, G_IDX, lo, hi}
#define IDXS(lo, hi, r, ...) {SAME, r, {__VA_ARGS__}, G_IDX, lo, hi}
#define AI(k, x) {GOBLIN_ATTR_##k, 0, x, 0, 0, {0}}
#define AF(k, x) {GOBLIN_ATTR_##k, 1, 0, x, 0, {0}}
#define AS(k, n, ...) {GOBLIN_ATTR_##k, 2, 0, 0, n, {__VA_ARGS__}}

static const tcase cases[] = {
    /* elementwise arithmetic: [3, 4] with [4] broadcast */
    {"add", GOBLIN_OP_ADD, ALL, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"sub", GOBLIN_OP_SUB, NUM, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"mul", GOBLIN_OP_MUL, ALL, 2, {IN(2, 3, 4), IN(2, 3, 1)}, .specials = true},
    {"div", GOBLIN_OP_DIV, F, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"pow", GOBLIN_OP_POW, NUM, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"maximum", GOBLIN_OP_MAXIMUM, ALL, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"minimum", GOBLIN_OP_MINIMUM, ALL, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"clamp", GOBLIN_OP_CLAMP, NUM, 1, {IN(2, 5, 7)}, 2, {AF(MIN, -0.5), AF(MAX, 1.25)}, .specials = true},
    {"clamp_lo", GOBLIN_OP_CLAMP, NUM, 1, {IN(1, 9)}, 1, {AF(MIN, 0.5)}},
    {"atan2", GOBLIN_OP_ATAN2, F, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"eq", GOBLIN_OP_EQ, ALL, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"ne", GOBLIN_OP_NE, ALL, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"lt", GOBLIN_OP_LT, ALL, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"le", GOBLIN_OP_LE, ALL, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"gt", GOBLIN_OP_GT, ALL, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"ge", GOBLIN_OP_GE, ALL, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"logical_and", GOBLIN_OP_LOGICAL_AND, ALL, 2, {IN(2, 3, 4), {GOBLIN_DTYPE_I32, 1, {4}, G_UNIF, 0, 0}}, .specials = true},
    {"logical_or", GOBLIN_OP_LOGICAL_OR, ALL, 2, {IN(2, 3, 4), {GOBLIN_DTYPE_F16, 1, {4}, G_UNIF, 0, 0}}, .specials = true},
    {"logical_xor", GOBLIN_OP_LOGICAL_XOR, ALL, 2, {IN(2, 3, 4), IN(2, 3, 4)}, .specials = true},
    {"logical_not", GOBLIN_OP_LOGICAL_NOT, ALL, 1, {IN(2, 3, 4)}, .specials = true},
    {"where", GOBLIN_OP_WHERE, ALL, 3, {{GOBLIN_DTYPE_BOOL, 2, {3, 1}, G_UNIF, 0, 0}, IN(2, 1, 4), IN(2, 3, 4)}, .specials = true},
    {"isnan", GOBLIN_OP_ISNAN, ALL, 1, {IN(2, 3, 4)}, .specials = true},
    {"floor_div", GOBLIN_OP_FLOOR_DIV, NUM, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"trunc_div", GOBLIN_OP_TRUNC_DIV, NUM, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"rem_floor", GOBLIN_OP_REM_FLOOR, NUM, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"rem_trunc", GOBLIN_OP_REM_TRUNC, NUM, 2, {IN(2, 3, 4), IN(1, 4)}, .specials = true},
    {"bitwise_and", GOBLIN_OP_BITWISE_AND, INT | B_, 2, {IN(2, 3, 4), IN(1, 4)}},
    {"bitwise_or", GOBLIN_OP_BITWISE_OR, INT | B_, 2, {IN(2, 3, 4), IN(1, 4)}},
    {"bitwise_xor", GOBLIN_OP_BITWISE_XOR, INT | B_, 2, {IN(2, 3, 4), IN(1, 4)}},
    {"bitwise_not", GOBLIN_OP_BITWISE_NOT, INT | B_, 1, {IN(2, 3, 4)}},
    {"shl", GOBLIN_OP_SHL, INT, 2, {IN(2, 3, 4), IDXS(-2, 70, 1, 4)}},
    {"shr_arith", GOBLIN_OP_SHR_ARITH, INT, 2, {IN(2, 3, 4), IN(1, 4)}},
    {"shr_logical", GOBLIN_OP_SHR_LOGICAL, INT, 2, {IN(2, 3, 4), IN(1, 4)}},
    {"cast", GOBLIN_OP_CAST, ALL, 1, {IN(2, 3, 5)}, 1, {AI(DTYPE, -1)}, .specials = true},
    /* unary math and activations */
    {"neg", GOBLIN_OP_NEG, NUM, 1, {IN(2, 4, 5)}, .specials = true},
    {"abs", GOBLIN_OP_ABS, NUM, 1, {IN(2, 4, 5)}, .specials = true},
    {"sign", GOBLIN_OP_SIGN, NUM, 1, {IN(2, 4, 5)}, .specials = true},
    {"exp", GOBLIN_OP_EXP, F, 1, {IN(2, 4, 5)}, .specials = true},
    {"log", GOBLIN_OP_LOG, F, 1, {INP(2, 4, 5)}, .specials = true},
    {"sqrt", GOBLIN_OP_SQRT, F, 1, {INP(2, 4, 5)}, .specials = true},
    {"rsqrt", GOBLIN_OP_RSQRT, F, 1, {INP(2, 4, 5)}},
    {"reciprocal", GOBLIN_OP_RECIPROCAL, F, 1, {IN(2, 4, 5)}, .specials = true},
    {"sin", GOBLIN_OP_SIN, F, 1, {IN(2, 4, 5)}},
    {"cos", GOBLIN_OP_COS, F, 1, {IN(2, 4, 5)}},
    {"tanh", GOBLIN_OP_TANH, F, 1, {IN(2, 4, 5)}, .specials = true},
    {"erf", GOBLIN_OP_ERF, F, 1, {IN(2, 4, 5)}},
    {"floor", GOBLIN_OP_FLOOR, NUM, 1, {IN(2, 4, 5)}, .specials = true},
    {"ceil", GOBLIN_OP_CEIL, NUM, 1, {IN(2, 4, 5)}, .specials = true},
    {"round", GOBLIN_OP_ROUND, NUM, 1, {IN(2, 4, 5)}, .specials = true},
    {"trunc", GOBLIN_OP_TRUNC, NUM, 1, {IN(2, 4, 5)}, .specials = true},
    {"log1p", GOBLIN_OP_LOG1P, F, 1, {INP(2, 4, 5)}},
    {"expm1", GOBLIN_OP_EXPM1, F, 1, {IN(2, 4, 5)}},
    {"square", GOBLIN_OP_SQUARE, NUM, 1, {IN(2, 4, 5)}, .specials = true},
    {"relu", GOBLIN_OP_RELU, NUM, 1, {IN(2, 4, 5)}, .specials = true},
    {"gelu", GOBLIN_OP_GELU, F, 1, {IN(2, 4, 5)}},
    {"gelu_tanh", GOBLIN_OP_GELU, F, 1, {IN(2, 4, 5)}, 1, {AI(APPROXIMATE, GOBLIN_GELU_TANH)}},
    {"silu", GOBLIN_OP_SILU, F, 1, {IN(2, 4, 5)}},
    {"sigmoid", GOBLIN_OP_SIGMOID, F, 1, {IN(2, 4, 5)}},
    /* reductions */
    {"sum", GOBLIN_OP_SUM, ALL, 1, {IN(3, 3, 5, 7)}, 2, {AS(AXES, 2, 0, 2), AI(KEEPDIM, 1)}, 21, SC_K1},
    {"sum_all_long", GOBLIN_OP_SUM, DM(F32) | DM(F64) | DM(I32), 1, {IN(1, 20000)}, 0, {{0}}, 20000, SC_K1},
    {"sum_empty", GOBLIN_OP_SUM, DM(F32) | DM(I64), 1, {IN(2, 0, 3)}, 1, {AS(AXES, 1, 0)}, 0, SC_K1},
    {"mean", GOBLIN_OP_MEAN, F, 1, {IN(3, 3, 5, 7)}, 1, {AS(AXES, 1, 1)}, 5, SC_K1},
    {"reduce_max", GOBLIN_OP_REDUCE_MAX, ALL, 1, {IN(3, 3, 5, 7)}, 1, {AS(AXES, 2, 0, 1)}, 15, SC_ELEM, true},
    {"reduce_min", GOBLIN_OP_REDUCE_MIN, ALL, 1, {IN(2, 40, 50)}, 0, {{0}}, 2000, SC_ELEM, true},
    {"prod", GOBLIN_OP_PROD, ALL, 1, {{SAME, 2, {6, 5}, G_NEAR1, 0, 0}}, 1, {AS(AXES, 1, 1)}, 5, SC_ELEM},
    {"argmax", GOBLIN_OP_ARGMAX, NUM, 1, {IN(3, 4, 6, 3)}, 1, {AI(AXIS, 1)}, 6, SC_ELEM, true},
    {"argmin_flat", GOBLIN_OP_ARGMIN, NUM, 1, {IN(2, 40, 50)}, 0, {{0}}, 2000, SC_ELEM},
    {"var", GOBLIN_OP_VAR, F, 1, {IN(2, 6, 9)}, 1, {AS(AXES, 1, 1)}, 9, SC_KSQ},
    {"var_corr0", GOBLIN_OP_VAR, F, 1, {IN(2, 6, 9)}, 2, {AS(AXES, 1, 0), AI(CORRECTION, 0)}, 6, SC_KSQ},
    {"cumsum", GOBLIN_OP_CUMSUM, ALL, 1, {IN(3, 3, 7, 2)}, 1, {AI(AXIS, 1)}, 7, SC_K1},
    {"softmax", GOBLIN_OP_SOFTMAX, F, 1, {IN(3, 4, 9, 5)}, 1, {AI(AXIS, 1)}, 9, SC_ONE},
    {"log_softmax", GOBLIN_OP_LOG_SOFTMAX, F, 1, {IN(2, 6, 33)}, 0, {{0}}, 33, SC_ONE},
    {"batch_norm_eval", GOBLIN_OP_BATCH_NORM, F, 5, {IN(4, 2, 3, 4, 4), IN(1, 3), IN(1, 3), IN(1, 3), INP(1, 3)}, 0, {{0}}, 32, SC_NORM},
    {"batch_norm_train", GOBLIN_OP_BATCH_NORM, F, 5, {IN(4, 2, 3, 4, 4), IN(1, 3), IN(1, 3), IN(1, 3), INP(1, 3)}, 2, {AI(TRAINING, 1), AF(EPS, 1e-3)}, 32, SC_NORM},
    {"layer_norm", GOBLIN_OP_LAYER_NORM, F, 3, {IN(3, 3, 2, 8), IN(2, 2, 8), IN(2, 2, 8)}, 1, {AI(NORM_NDIM, 2)}, 16, SC_NORM},
    {"rms_norm", GOBLIN_OP_RMS_NORM, F, 2, {IN(2, 5, 8), IN(1, 8)}, 0, {{0}}, 8, SC_NORM},
    {"nll_loss", GOBLIN_OP_NLL_LOSS, F, 2, {IN(2, 6, 5), IDX(I64, 0, 5, 1, 6)}, 0, {{0}}, 11, SC_ONE},
    {"nll_loss_ignore", GOBLIN_OP_NLL_LOSS, F, 3, {IN(2, 6, 5), IDX(I32, -1, 5, 1, 6), INP(1, 5)}, 2, {AI(IGNORE_INDEX, -1), AI(REDUCTION, GOBLIN_REDUCTION_SUM)}, 11, SC_ONE},
    {"cross_entropy", GOBLIN_OP_CROSS_ENTROPY, F, 3, {IN(3, 4, 5, 3), IDX(I64, 0, 5, 2, 4, 3), INP(1, 5)}, 1, {AF(LABEL_SMOOTHING, 0.1)}, 17, SC_ONE},
    {"cross_entropy_none", GOBLIN_OP_CROSS_ENTROPY, F, 2, {IN(2, 4, 7), IDX(I64, 0, 7, 1, 4)}, 1, {AI(REDUCTION, GOBLIN_REDUCTION_NONE)}, 11, SC_ONE},
    {"nll_bad_target", GOBLIN_OP_NLL_LOSS, DM(F32), 2, {IN(2, 6, 5), IDX(I64, 5, 6, 1, 6)}, .expect = GOBLIN_EINDEX},
    /* shape and movement */
    {"reshape", GOBLIN_OP_RESHAPE, ALL, 1, {IN(2, 3, 4)}, 1, {AS(SHAPE, 3, 2, -1, 3)}},
    {"permute", GOBLIN_OP_PERMUTE, ALL, 1, {IN(3, 2, 3, 4)}, 1, {AS(PERM, 3, 2, 0, 1)}, .specials = true},
    {"expand", GOBLIN_OP_EXPAND, ALL, 1, {IN(2, 3, 1)}, 1, {AS(SHAPE, 3, 2, 3, 4)}},
    {"slice", GOBLIN_OP_SLICE, ALL, 1, {IN(2, 5, 6)}, 4, {AS(AXES, 2, 0, 1), AS(STARTS, 2, 1, -4), AS(STOPS, 2, 5, 99), AS(STEPS, 2, 2, 1)}},
    {"select", GOBLIN_OP_SELECT, ALL, 1, {IN(3, 3, 4, 2)}, 2, {AI(AXIS, 1), AI(INDEX, -1)}},
    {"split", GOBLIN_OP_SPLIT, ALL, 1, {IN(2, 7, 2)}, 3, {AI(AXIS, 0), AI(CHUNKS, 3), AI(INDEX, 2)}},
    {"concat", GOBLIN_OP_CONCAT, ALL, 3, {IN(2, 2, 3), IN(2, 1, 3), IN(2, 4, 3)}, 1, {AI(AXIS, 0)}},
    {"concat_inner", GOBLIN_OP_CONCAT, DM(F16) | DM(I64), 2, {IN(2, 2, 3), IN(2, 2, 5)}, 1, {AI(AXIS, -1)}},
    {"stack", GOBLIN_OP_STACK, ALL, 2, {IN(2, 2, 3), IN(2, 2, 3)}, 1, {AI(AXIS, 1)}},
    {"pad", GOBLIN_OP_PAD, ALL, 1, {IN(2, 3, 4)}, 2, {AS(PADS, 4, 1, 2, 0, 1), AF(VALUE, 7)}},
    {"pad_crop", GOBLIN_OP_PAD, DM(F32) | DM(U8), 1, {IN(2, 3, 4)}, 1, {AS(PADS, 2, -1, 2)}},
    {"copy", GOBLIN_OP_COPY, ALL, 1, {IN(2, 3, 4)}, .specials = true},
    /* indexing */
    {"gather", GOBLIN_OP_GATHER, ALL, 2, {IN(2, 4, 5), IDX(I64, 0, 5, 2, 4, 3)}, 1, {AI(AXIS, 1)}},
    {"gather_bad", GOBLIN_OP_GATHER, DM(F32), 2, {IN(2, 4, 5), IDX(I64, 5, 9, 2, 4, 3)}, 1, {AI(AXIS, 1)}, .expect = GOBLIN_EINDEX},
    {"scatter", GOBLIN_OP_SCATTER, ALL, 3, {IN(2, 4, 5), IDX(I64, 0, 4, 2, 6, 5), IN(2, 6, 5)}, 1, {AI(AXIS, 0)}},
    {"scatter_add", GOBLIN_OP_SCATTER_ADD, ALL, 3, {IN(2, 4, 5), IDX(I32, 0, 4, 2, 6, 5), IN(2, 6, 5)}, 1, {AI(AXIS, 0)}, 6, SC_K1},
    {"index_select", GOBLIN_OP_INDEX_SELECT, ALL, 2, {IN(2, 5, 3), IDX(I32, 0, 5, 1, 4)}, 1, {AI(AXIS, 0)}},
    {"embedding", GOBLIN_OP_EMBEDDING, ALL, 2, {IN(2, 6, 4), IDX(I64, 0, 6, 2, 2, 3)}},
    {"index_put", GOBLIN_OP_INDEX_PUT, ALL, 3, {IN(2, 5, 3), IDX(I64, -5, 5, 1, 6), IN(1, 3)}},
    {"index_put_acc", GOBLIN_OP_INDEX_PUT, ALL, 3, {IN(2, 5, 3), IDX(I64, -5, 5, 1, 6), IN(2, 6, 3)}, 1, {AI(ACCUMULATE, 1)}, 6, SC_K1},
    /* linear algebra and vision */
    {"matmul", GOBLIN_OP_MATMUL, NUM, 2, {IN(3, 2, 3, 17), IN(2, 17, 5)}, 0, {{0}}, 17, SC_K2},
    {"matmul_tb_c", GOBLIN_OP_MATMUL, NUM, 3, {IN(2, 6, 9), IN(2, 5, 9), IN(1, 5)}, 3, {AI(TRANS_B, 1), AF(ALPHA, 2), AF(BETA, -1)}, 9, SC_K2},
    {"matmul_ta_batch", GOBLIN_OP_MATMUL, F, 2, {IN(4, 2, 1, 7, 4), IN(3, 3, 7, 6)}, 1, {AI(TRANS_A, 1)}, 7, SC_K2},
    {"matmul_vec", GOBLIN_OP_MATMUL, F, 2, {IN(1, 8), IN(3, 2, 8, 3)}, 0, {{0}}, 8, SC_K2},
    {"matmul_big", GOBLIN_OP_MATMUL, DM(F32) | DM(BF16), 2, {IN(2, 70, 300), IN(2, 300, 40)}, 0, {{0}}, 300, SC_K2},
    {"conv2d", GOBLIN_OP_CONV2D, F, 3, {IN(4, 2, 4, 6, 6), IN(4, 6, 2, 3, 3), IN(1, 6)}, 2, {AI(GROUPS, 2), AS(PADDING, 2, 1, 1)}, 18, SC_K2},
    {"conv2d_stride", GOBLIN_OP_CONV2D, F, 2, {IN(4, 1, 3, 9, 8), IN(4, 4, 3, 2, 3)}, 2, {AS(STRIDE, 2, 2, 3), AS(DILATION, 2, 2, 1)}, 18, SC_K2},
    {"max_pool2d", GOBLIN_OP_MAX_POOL2D, NUM, 1, {IN(4, 2, 3, 7, 7)}, 3, {AS(KERNEL, 2, 3, 3), AS(STRIDE, 2, 2, 2), AS(PADDING, 2, 1, 1)}, 9, SC_ELEM, true},
    {"avg_pool2d", GOBLIN_OP_AVG_POOL2D, F, 1, {IN(4, 2, 3, 7, 7)}, 5, {AS(KERNEL, 2, 3, 3), AS(STRIDE, 2, 2, 2), AS(PADDING, 2, 1, 1), AI(CEIL_MODE, 1), AI(COUNT_INCLUDE_PAD, 0)}, 9, SC_K1},
    {"adaptive_avg_pool2d", GOBLIN_OP_ADAPTIVE_AVG_POOL2D, F, 1, {IN(4, 2, 3, 7, 9)}, 1, {AS(OUTPUT_SIZE, 2, 3, 4)}, 9, SC_K1},
    {"sdpa_causal", GOBLIN_OP_SDPA, F, 3, {IN(4, 2, 3, 5, 8), IN(4, 2, 3, 6, 8), IN(4, 2, 3, 6, 4)}, 1, {AI(CAUSAL, 1)}, 20, SC_SDPA},
    {"sdpa_boolmask", GOBLIN_OP_SDPA, F, 4, {IN(3, 3, 5, 8), IN(3, 1, 6, 8), IN(3, 3, 6, 4), {GOBLIN_DTYPE_BOOL, 2, {5, 6}, G_UNIF, 0, 0}}, 0, {{0}}, 20, SC_SDPA},
    {"sdpa_addmask", GOBLIN_OP_SDPA, F, 4, {IN(3, 2, 5, 8), IN(3, 2, 6, 8), IN(3, 2, 6, 4), IN(2, 5, 6)}, 1, {AF(SCALE, 0.3)}, 20, SC_SDPA},
    /* random and creation */
    {"rand_uniform", GOBLIN_OP_RAND_UNIFORM, F, 0, {{0}}, 5, {AS(SHAPE, 2, 30, 40), AI(DTYPE, -1), AI(SEED, 1234567), AI(OFFSET, 99), AF(LOW, -3)}},
    {"rand_normal", GOBLIN_OP_RAND_NORMAL, F, 0, {{0}}, 5, {AS(SHAPE, 1, 1000), AI(DTYPE, -1), AI(SEED, -5), AF(MEAN, 1), AF(STD, 2)}},
    {"bernoulli_p", GOBLIN_OP_BERNOULLI, ALL, 0, {{0}}, 4, {AS(SHAPE, 1, 500), AI(DTYPE, -1), AI(SEED, 7), AF(P, 0.3)}},
    {"bernoulli_in", GOBLIN_OP_BERNOULLI, F, 1, {{SAME, 1, {500}, G_PROB, 0, 0}}, 1, {AI(SEED, 8)}},
    {"randint", GOBLIN_OP_RANDINT, NUM, 0, {{0}}, 5, {AS(SHAPE, 1, 700), AI(DTYPE, -1), AI(SEED, 9), AF(LOW, 3), AF(HIGH, 100)}},
    {"randint_neg", GOBLIN_OP_RANDINT, NUM & ~DM(U8), 0, {{0}}, 5, {AS(SHAPE, 1, 700), AI(DTYPE, -1), AI(SEED, 10), AF(LOW, -5), AF(HIGH, 17)}},
    {"dropout", GOBLIN_OP_DROPOUT, F, 1, {IN(2, 20, 30)}, 2, {AF(P, 0.4), AI(SEED, 11)}, .specials = true},
    {"full", GOBLIN_OP_FULL, ALL, 0, {{0}}, 3, {AS(SHAPE, 2, 3, 7), AI(DTYPE, -1), AF(VALUE, 3.75)}},
    {"arange", GOBLIN_OP_ARANGE, NUM, 0, {{0}}, 4, {AS(SHAPE, 1, 20), AI(DTYPE, -1), AF(START, 2), AF(STEP, 3)}},
    /* fused backward ops */
    {"conv2d_backward_input", GOBLIN_OP_CONV2D_BACKWARD_INPUT, F, 2, {IN(4, 2, 6, 6, 6), IN(4, 6, 2, 3, 3)}, 3, {AS(SHAPE, 4, 2, 4, 6, 6), AI(GROUPS, 2), AS(PADDING, 2, 1, 1)}, 27, SC_K2},
    {"conv2d_backward_weight", GOBLIN_OP_CONV2D_BACKWARD_WEIGHT, F, 2, {IN(4, 1, 4, 4, 2), IN(4, 1, 3, 9, 8)}, 3, {AS(SHAPE, 4, 4, 3, 2, 3), AS(STRIDE, 2, 2, 3), AS(DILATION, 2, 2, 1)}, 12, SC_K2},
    {"max_pool2d_backward", GOBLIN_OP_MAX_POOL2D_BACKWARD, F, 2, {IN(4, 2, 3, 4, 4), IN(4, 2, 3, 7, 7)}, 3, {AS(KERNEL, 2, 3, 3), AS(STRIDE, 2, 2, 2), AS(PADDING, 2, 1, 1)}, 9, SC_K1},
    {"avg_pool2d_backward", GOBLIN_OP_AVG_POOL2D_BACKWARD, F, 1, {IN(4, 2, 3, 4, 4)}, 6, {AS(SHAPE, 4, 2, 3, 7, 7), AS(KERNEL, 2, 3, 3), AS(STRIDE, 2, 2, 2), AS(PADDING, 2, 1, 1), AI(CEIL_MODE, 1), AI(COUNT_INCLUDE_PAD, 0)}, 9, SC_K1},
    {"adaptive_avg_pool2d_backward", GOBLIN_OP_ADAPTIVE_AVG_POOL2D_BACKWARD, F, 1, {IN(4, 2, 3, 3, 4)}, 1, {AS(SHAPE, 4, 2, 3, 7, 9)}, 9, SC_K1},
    {"batch_norm_backward", GOBLIN_OP_BATCH_NORM_BACKWARD, F, 5, {IN(4, 2, 3, 4, 4), IN(4, 2, 3, 4, 4), IN(1, 3), IN(1, 3), INP(1, 3)}, 2, {AI(TRAINING, 1), AI(INDEX, 0)}, 32, SC_ONE},
    {"nll_loss_backward", GOBLIN_OP_NLL_LOSS_BACKWARD, F, 2, {{SAME, 0, {1}, G_UNIF, 0, 0}, IDX(I64, 0, 5, 1, 6)}, 1, {AS(SHAPE, 2, 6, 5)}, 11, SC_ONE},
    {"cross_entropy_backward", GOBLIN_OP_CROSS_ENTROPY_BACKWARD, F, 3, {{SAME, 0, {1}, G_UNIF, 0, 0}, IN(2, 6, 5), IDX(I64, 0, 5, 1, 6)}, 0, {{0}}, 11, SC_ONE},
    {"embedding_backward", GOBLIN_OP_EMBEDDING_BACKWARD, F, 2, {IN(3, 2, 3, 4), IDX(I64, 0, 6, 2, 2, 3)}, 1, {AS(SHAPE, 2, 6, 4)}, 6, SC_K1},
    {"embedding_backward_bad", GOBLIN_OP_EMBEDDING_BACKWARD, DM(F32), 2, {IN(3, 2, 3, 4), IDX(I64, 6, 9, 2, 2, 3)}, 1, {AS(SHAPE, 2, 6, 4)}, .expect = GOBLIN_EINDEX},
    {"sdpa_backward", GOBLIN_OP_SDPA_BACKWARD, F, 4, {IN(3, 2, 5, 4), IN(3, 2, 5, 8), IN(3, 2, 6, 8), IN(3, 2, 6, 4)}, 1, {AI(INDEX, 1)}, 20, SC_SDPA},
    {"layer_norm_backward", GOBLIN_OP_LAYER_NORM_BACKWARD, F, 3, {IN(3, 2, 3, 8), IN(3, 2, 3, 8), IN(1, 8)}, 1, {AI(INDEX, 0)}, 8, SC_ONE},
    {"layer_norm_backward_w", GOBLIN_OP_LAYER_NORM_BACKWARD, F, 2, {IN(3, 2, 3, 8), IN(3, 2, 3, 8)}, 2, {AI(INDEX, 1), AI(NORM_NDIM, 2)}, 6, SC_ONE},
    {"gelu_backward", GOBLIN_OP_GELU_BACKWARD, F, 2, {IN(2, 5, 7), IN(2, 5, 7)}, 1, {AI(APPROXIMATE, 0)}, 1, SC_ONE},
    {"relu_backward", GOBLIN_OP_RELU_BACKWARD, F, 2, {IN(2, 5, 7), IN(2, 5, 7)}, .specials = true},
    /* fused expressions */
    {"formula_float", GOBLIN_OP_FORMULA, F, 4, {IN(2, 3, 4), IN(1, 4), IN(2, 3, 4), IN(0)}, .formula = "a * exp(-b * x) + c", .specials = true},
    {"formula_float2", GOBLIN_OP_FORMULA, F, 2, {IN(2, 5, 6), IN(2, 5, 6)}, .formula = "where(a > b, sqrt(abs(a)) / (1 + b * b), clamp(a - b, -0.5, 0.5)) + max(a, 0.25) ** 2"},
    {"formula_int", GOBLIN_OP_FORMULA, INT, 2, {IN(2, 5, 6), IN(1, 6)}, .formula = "(a // b) * 3 + a % b - (a & 7) + (b << 2) + (a >> 1) + max(a, b) + (a == b)"},
};

#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static uint64_t g_seed;

static uint64_t suite_seed(void) {
    const char *s = getenv("GOBLIN_TEST_SEED");
    if (s && *s) return strtoull(s, NULL, 10);
    return ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
}

static double rnd(uint64_t *s) { return gt_rand(s); }

static void fill_input(const tin *t, goblin_tensor *x, uint64_t *s, bool specials) {
    int64_t n = goblin__numel(x);
    goblin_dtype dt = x->dtype;
    for (int64_t i = 0; i < n; i++) {
        double u = rnd(s);
        double v;
        switch (t->gen) {
        case G_POS: v = 0.1 + 1.9 * u; break;
        case G_PROB: v = u; break;
        case G_NEAR1: v = (u < 0.5 ? -1 : 1) * (0.75 + 0.5 * rnd(s)); break;
        case G_IDX: v = (double)(t->lo + (int64_t)(u * (double)(t->hi - t->lo))); break;
        default:
            if (goblin_dtype_is_float(dt)) v = -2 + 4 * u;
            else if (dt == GOBLIN_DTYPE_U8) v = floor(u * 256);
            else if (dt == GOBLIN_DTYPE_BOOL) v = u < 0.5;
            else if (dt == GOBLIN_DTYPE_I8) v = floor(u * 256) - 128;
            else v = floor(u * 200) - 100;
            break;
        }
        if (specials && goblin_dtype_is_float(dt) && t->gen == G_UNIF) {
            double r = rnd(s);
            if (r < 0.03) v = NAN;
            else if (r < 0.06) v = INFINITY;
            else if (r < 0.09) v = -INFINITY;
            else if (r < 0.12) v = -0.0;
            else if (r < 0.15) v = 0.0;
        }
        if (t->gen == G_UNIF && !specials && goblin_dtype_is_int(dt) && dt != GOBLIN_DTYPE_U8 &&
            v == 0)
            v = 1; /* keep shift/division cases interesting but all legal anyway */
        goblin__store_f64(dt, x->data, i, v);
    }
}

static double max_abs(const goblin_tensor *t) {
    double m = 0;
    if (!t || !t->data) return 0;
    int64_t n = goblin__numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = fabs(goblin__load_f64(t->dtype, t->data, i));
        if (v > m && isfinite(v)) m = v;
    }
    return m;
}

/* Build the one-op graph of @p c for dtype @p dt; *ins get fresh buffers. */
static goblin_err build_case(const tcase *c, goblin_dtype dt, goblin_graph **gout,
                             goblin_tensor *ins, int32_t *y, char *msg, size_t cap) {
    goblin_graph *g;
    goblin_err e = goblin_graph_new(&g);
    if (e) return e;
    int32_t ids[5];
    for (int32_t i = 0; i < c->n_in; i++) {
        goblin_dtype idt = c->in[i].dt == SAME ? dt : c->in[i].dt;
        ins[i] = gt_tensor(idt, c->in[i].rank, c->in[i].shape, NULL);
        size_t bytes = (size_t)goblin__numel(&ins[i]) * goblin_dtype_size(idt);
        ins[i].data = calloc(1, bytes ? bytes : 1);
        e = goblin_graph_input(g, idt, c->in[i].rank, c->in[i].shape, &ids[i]);
        if (e) goto fail;
    }
    goblin_attr at[MAXA];
    for (int32_t a = 0; a < c->n_attr; a++) {
        const tattr *t = &c->attr[a];
        if (t->kind == 0) at[a] = goblin_attr_int(t->key, t->key == GOBLIN_ATTR_DTYPE && t->i < 0 ? dt : t->i);
        else if (t->kind == 1) at[a] = goblin_attr_float(t->key, t->f);
        else at[a] = goblin_attr_ints(t->key, t->v, t->n);
    }
    if (c->formula) {
        goblin_formula *f = NULL;
        goblin_errbuf fe;
        e = goblin_formula_parse(c->formula, &f, &fe);
        if (e) {
            snprintf(msg, cap, "formula parse: %s at %d", fe.message, (int)fe.position);
            goblin_graph_free(g);
            return e;
        }
        e = goblin_graph_add_formula(g, f, ids, c->n_in, y);
        goblin_formula_free(f);
    } else {
        e = goblin_graph_add(g, c->op, ids, c->n_in, at, c->n_attr, y);
    }
    if (e) goto fail;
    e = goblin_graph_output(g, *y);
    if (e) goto fail;
    *gout = g;
    return GOBLIN_OK;
fail:
    snprintf(msg, cap, "%s", goblin_graph_error(g));
    goblin_graph_free(g);
    return e;
}

/* Run @p g on @p backend into a poisoned caller buffer described like @p info. */
static goblin_err run_on(const goblin_graph *g, goblin_backend_kind backend, const goblin_tensor *ins,
                         int32_t n_in, const goblin_tensor *info, goblin_tensor *out,
                         int64_t *fallbacks, char *msg, size_t cap) {
    *out = *info;
    size_t bytes = (size_t)goblin__numel(info) * goblin_dtype_size(info->dtype);
    out->data = malloc(bytes ? bytes : 1);
    memset(out->data, 0xff, bytes ? bytes : 1);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = backend;
    p.threads = 2;
    goblin_exec *ex = NULL;
    goblin_err e = goblin_exec_new(&ex, g, &p);
    if (e) {
        snprintf(msg, cap, "exec_new: %s", goblin_strerror(e));
        return e;
    }
    e = goblin_exec_run(ex, ins, n_in, out, 1);
    if (e) snprintf(msg, cap, "%s", goblin_exec_error(ex));
    goblin_exec_stats st;
    goblin_exec_stats_get(ex, &st);
    *fallbacks = st.nodes_fallback;
    goblin_exec_free(ex);
    return e;
}

static bool all_ff(const goblin_tensor *t, int64_t i) {
    size_t es = goblin_dtype_size(t->dtype);
    const unsigned char *p = (const unsigned char *)t->data + (size_t)i * es;
    for (size_t b = 0; b < es; b++)
        if (p[b] != 0xff) return false;
    return true;
}

typedef struct suite_stats {
    int runs, failures, fallbacks, no_kernel;
    char fell_back[1024];   /* ops with a GPU kernel that still ran on the CPU: a bug */
    char cpu_only[1024];    /* ops without a GPU kernel (the executor's counted fallback) */
} suite_stats;

static bool gpu_has_kernel(goblin_op op) {
#ifdef GOBLIN_HAVE_CUDA
    return goblin__cuda_op_has_kernel(op);
#else
    (void)op;
    return false;
#endif
}

static void note(char *buf, size_t cap, const char *name, goblin_dtype dt) {
    size_t l = strlen(buf);
    if (l + 40 < cap) snprintf(buf + l, cap - l, "%s%s/%s", l ? ", " : "", name, goblin_dtype_name(dt));
}

/* One case, one dtype: ref vs @p backend. Returns false on a mismatch (logged). */
static bool check_case(const tcase *c, goblin_dtype dt, goblin_backend_kind backend, uint64_t *rng,
                       suite_stats *st) {
    char msg[512] = "", msg2[512] = "";
    goblin_graph *g = NULL;
    goblin_tensor ins[5];
    memset(ins, 0, sizeof ins);
    int32_t y;
    goblin_err e = build_case(c, dt, &g, ins, &y, msg, sizeof msg);
    bool ok = true;
    if (e) {
        cr_log_error("%s/%s: graph build failed: %s (%s)", c->name, goblin_dtype_name(dt),
                     goblin_err_name(e), msg);
        for (int32_t i = 0; i < c->n_in; i++) free(ins[i].data);
        return false;
    }
    for (int32_t i = 0; i < c->n_in; i++) fill_input(&c->in[i], &ins[i], rng, c->specials);
    goblin_tensor info;
    goblin_graph_node(g, y, NULL, &info, NULL, NULL);
    goblin_tensor r, t;
    int64_t fb_ref = 0, fb = 0;
    goblin_err er = run_on(g, GOBLIN_BACKEND_REF, ins, c->n_in, &info, &r, &fb_ref, msg, sizeof msg);
    goblin_err et = run_on(g, backend, ins, c->n_in, &info, &t, &fb, msg2, sizeof msg2);
    st->runs++;
    if (fb && backend == GOBLIN_BACKEND_CUDA) {
        goblin_op op = c->formula ? GOBLIN_OP_FORMULA : c->op;
        if (gpu_has_kernel(op)) {
            st->fallbacks++;
            note(st->fell_back, sizeof st->fell_back, c->name, dt);
        } else if (!strstr(st->cpu_only, goblin_op_name(op))) {
            st->no_kernel++;
            note(st->cpu_only, sizeof st->cpu_only, goblin_op_name(op), dt);
        }
    }
    if (er != c->expect || et != c->expect) {
        cr_log_error("%s/%s: expected %s, ref gave %s (%s), %s gave %s (%s)", c->name,
                     goblin_dtype_name(dt), goblin_err_name(c->expect), goblin_err_name(er), msg,
                     goblin_backend_name(backend), goblin_err_name(et), msg2);
        ok = false;
        goto out;
    }
    if (c->expect != GOBLIN_OK) goto out;
    /* the contract, and the scale it is relative to */
    goblin_dtype cdt = dt; /* the case's dtype: the op's input (or generated) dtype */
    double rel = 0, abs_tol = 0;
    goblin_op_contract(c->formula ? GOBLIN_OP_FORMULA : c->op, cdt, c->k, &rel, &abs_tol);
    if (!isfinite(rel)) rel = INFINITY;
    double m0 = c->n_in > 0 ? max_abs(&ins[0]) : 0, m1 = c->n_in > 1 ? max_abs(&ins[1]) : 0;
    double m2 = c->n_in > 2 ? max_abs(&ins[2]) : 0;
    double M = 0;
    switch (c->scale) {
    case SC_K1: M = (double)c->k * m0 + m2 * (double)c->k; break;
    case SC_K2: M = (double)c->k * m0 * m1 + 2 * m2; break;
    case SC_KSQ: M = (double)c->k * m0 * m0; break;
    case SC_ONE: M = 1; break;
    case SC_NORM: M = 8 * m0 * (c->n_in > 1 ? m1 : 1) + m2; break;
    case SC_SDPA: {
        /* sum_j p_j |v_j| (1 + 2T), T = |scale| max_j sum_e |q_e k_je| with scale <= 1/sqrt(E);
         * the backward op's terms also carry grad_out and q, k (generous bound) */
        int32_t qi = c->op == GOBLIN_OP_SDPA_BACKWARD ? 1 : 0;
        double e_ = (double)c->in[qi].shape[c->in[qi].rank - 1];
        double s_ = (double)c->in[qi + 1].shape[c->in[qi + 1].rank - 2];
        double mq = max_abs(&ins[qi]), mk = max_abs(&ins[qi + 1]), mv = max_abs(&ins[qi + 2]);
        double amp = 1 + 2 * sqrt(e_) * mq * mk;
        if (qi) M = m0 * (mv + mq + mk + 1) * amp * (e_ + s_) + 1;
        else M = mv * amp;
        break;
    }
    default: M = 0; break;
    }
    if (!isfinite(M)) M = 0;
    int64_t n = goblin__numel(&info);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; i++) {
        bool unwritten = all_ff(&t, i) && !all_ff(&r, i);
        bool same;
        double a = 0, b = 0;
        if (goblin_dtype_is_float(info.dtype)) {
            a = goblin__load_f64(info.dtype, t.data, i);
            b = goblin__load_f64(info.dtype, r.data, i);
            if (isnan(a) || isnan(b)) same = isnan(a) && isnan(b);
            else if (isinf(a) || isinf(b)) same = a == b;
            else same = fabs(a - b) <= abs_tol + rel * (fabs(b) + M);
        } else {
            same = goblin__load_i64(info.dtype, t.data, i) == goblin__load_i64(info.dtype, r.data, i);
            a = (double)goblin__load_i64(info.dtype, t.data, i);
            b = (double)goblin__load_i64(info.dtype, r.data, i);
        }
        if (unwritten || !same) {
            cr_log_error("%s/%s element %lld: %s %.17g, ref %.17g (rel %g abs %g scale %g)%s",
                         c->name, goblin_dtype_name(dt), (long long)i, goblin_backend_name(backend),
                         a, b, rel, abs_tol, M, unwritten ? " UNWRITTEN" : "");
            bad++;
        }
    }
    ok = bad == 0;
out:
    free(r.data);
    free(t.data);
    for (int32_t i = 0; i < c->n_in; i++) free(ins[i].data);
    goblin_graph_free(g);
    return ok;
}

static void run_suite(goblin_backend_kind backend) {
    g_seed = suite_seed();
    cr_log_info("conformance vs ref on %s: seed %llu (GOBLIN_TEST_SEED=%llu repeats it)",
                goblin_backend_name(backend), (unsigned long long)g_seed,
                (unsigned long long)g_seed);
    uint64_t rng = g_seed | 1;
    suite_stats st;
    memset(&st, 0, sizeof st);
    bool covered[GOBLIN_OP_COUNT] = {false};
    for (int ci = 0; ci < N_CASES; ci++) {
        const tcase *c = &cases[ci];
        covered[c->op] = true;
        for (int d = 0; d < GOBLIN_DTYPE_COUNT; d++) {
            if (!(c->dts & GOBLIN_DTMASK(d))) continue;
            if (!check_case(c, (goblin_dtype)d, backend, &rng, &st)) st.failures++;
        }
    }
    /* casts: every source dtype to every destination dtype */
    for (int d = 0; d < GOBLIN_DTYPE_COUNT; d++) {
        tcase c = cases[0];
        for (int ci = 0; ci < N_CASES; ci++)
            if (cases[ci].op == GOBLIN_OP_CAST) c = cases[ci];
        c.attr[0].i = d; /* destination */
        for (int s = 0; s < GOBLIN_DTYPE_COUNT; s++)
            if (!check_case(&c, (goblin_dtype)s, backend, &rng, &st)) st.failures++;
    }
    /* every op of the catalogue has a case */
    char missing[512] = "";
    for (int op = goblin_op_next(-1); op >= 0; op = goblin_op_next(op))
        if (op != GOBLIN_OP_INPUT && op != GOBLIN_OP_CONSTANT && !covered[op])
            note(missing, sizeof missing, goblin_op_name((goblin_op)op), GOBLIN_DTYPE_F32);
    fprintf(stderr, "%s conformance: %d runs, %d failures, %d unexpected CPU fallbacks%s%s\n",
            goblin_backend_name(backend), st.runs, st.failures, st.fallbacks,
            st.fallbacks ? ": " : "", st.fell_back);
    if (st.no_kernel)
        fprintf(stderr, "ops without a GPU kernel (run on the CPU, counted): %s\n", st.cpu_only);
    cr_expect_str_empty(missing, "ops without a conformance case: %s", missing);
    cr_expect_eq(st.failures, 0, "%d of %d runs differ from the reference (seed %llu)",
                 st.failures, st.runs, (unsigned long long)g_seed);
    cr_expect_eq(st.fallbacks, 0, "ops that ran on the CPU instead: %s", st.fell_back);
}

Test(cuda_conformance, every_op_vs_ref_on_cuda) {
    goblin_err e = goblin_backend_available(GOBLIN_BACKEND_CUDA);
    if (e != GOBLIN_OK) {
        /* stderr, not cr_log_warn: Criterion 2.4.1 exits 1 when a skipped test logged a warning */
        fprintf(stderr, "SKIPPED: CUDA conformance suite: %s (%s); it runs on a machine with an "
                        "NVIDIA GPU (bench/gpu_check.sh)\n",
                goblin_strerror(e), goblin_err_name(e));
        cr_skip_test("no usable CUDA device (%s): the conformance suite needs a GPU",
                     goblin_err_name(e));
    }
    setenv("GOBLIN_CUDA_POISON", "1", 1);
    run_suite(GOBLIN_BACKEND_CUDA);
}

/* The harness itself, against the CPU backend, where no GPU is needed. */
Test(cuda_conformance, harness_vs_ref_on_blis) {
    if (goblin_backend_available(GOBLIN_BACKEND_BLIS) != GOBLIN_OK)
        cr_skip_test("BLIS backend not built");
    run_suite(GOBLIN_BACKEND_BLIS);
}

/* Same input, same device: bit-identical results (fixed reduction order). */
Test(cuda_conformance, deterministic_on_device) {
    if (goblin_backend_available(GOBLIN_BACKEND_CUDA) != GOBLIN_OK)
        cr_skip_test("no usable CUDA device");
    int64_t s[] = {300001};
    float *x = malloc(sizeof(float) * 300001);
    uint64_t rng = 42;
    for (int i = 0; i < 300001; i++) x[i] = (float)(rnd(&rng) * 2 - 1);
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 1, s, x);
    goblin_tensor o1, o2;
    char msg[256];
    cr_assert_eq(gt_run1(GOBLIN_OP_SUM, &in, 1, NULL, 0, GOBLIN_BACKEND_CUDA, 1, &o1, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    cr_assert_eq(gt_run1(GOBLIN_OP_SUM, &in, 1, NULL, 0, GOBLIN_BACKEND_CUDA, 1, &o2, msg, sizeof msg), GOBLIN_OK, "%s", msg);
    cr_assert_eq(memcmp(o1.data, o2.data, 4), 0);
    goblin_buffer_free(o1.data);
    goblin_buffer_free(o2.data);
    free(x);
}

/* Random ops: the same seed gives the same f64 numbers, bit for bit, on CPU and GPU. */
Test(cuda_conformance, random_streams_match_cpu_bitwise) {
    if (goblin_backend_available(GOBLIN_BACKEND_CUDA) != GOBLIN_OK)
        cr_skip_test("no usable CUDA device");
    static const goblin_op ops[] = {GOBLIN_OP_RAND_UNIFORM, GOBLIN_OP_RAND_NORMAL};
    for (size_t o = 0; o < 2; o++) {
        int64_t shape[] = {4096};
        goblin_attr at[3] = {goblin_attr_ints(GOBLIN_ATTR_SHAPE, shape, 1),
                             goblin_attr_int(GOBLIN_ATTR_DTYPE, GOBLIN_DTYPE_F64),
                             goblin_attr_int(GOBLIN_ATTR_SEED, 2026)};
        goblin_tensor a, b;
        char msg[256];
        cr_assert_eq(gt_run1(ops[o], NULL, 0, at, 3, GOBLIN_BACKEND_REF, 1, &a, msg, sizeof msg), GOBLIN_OK, "%s", msg);
        cr_assert_eq(gt_run1(ops[o], NULL, 0, at, 3, GOBLIN_BACKEND_CUDA, 1, &b, msg, sizeof msg), GOBLIN_OK, "%s", msg);
        cr_assert_eq(memcmp(a.data, b.data, 4096 * 8), 0, "%s differs between CPU and GPU",
                     goblin_op_name(ops[o]));
        goblin_buffer_free(a.data);
        goblin_buffer_free(b.data);
    }
}
