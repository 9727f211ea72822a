/* tests/unit/test_catalog.c - the operator catalogue as users and the wire see
 * it: numbering, names, per-op descriptions, numeric contracts, attribute
 * keys, dtypes and backend names. */
#include <criterion/criterion.h>
#include <goblin/goblin.h>
#include <math.h>
#include <string.h>

/* The op numbering is part of the wire format. This table was copied from
 * ops.h when catalogue version 1 was set and must only ever grow: an op that
 * moves or is renamed fails here. */
static const struct {
    goblin_op op;
    int value;
    const char *name;
} frozen_ops[] = {
    {GOBLIN_OP_INPUT, 0, "input"},
    {GOBLIN_OP_CONSTANT, 1, "constant"},
    {GOBLIN_OP_ADD, 10, "add"},
    {GOBLIN_OP_SUB, 11, "sub"},
    {GOBLIN_OP_MUL, 12, "mul"},
    {GOBLIN_OP_DIV, 13, "div"},
    {GOBLIN_OP_POW, 14, "pow"},
    {GOBLIN_OP_MAXIMUM, 15, "maximum"},
    {GOBLIN_OP_MINIMUM, 16, "minimum"},
    {GOBLIN_OP_CLAMP, 17, "clamp"},
    {GOBLIN_OP_ATAN2, 18, "atan2"},
    {GOBLIN_OP_NEG, 30, "neg"},
    {GOBLIN_OP_ABS, 31, "abs"},
    {GOBLIN_OP_SIGN, 32, "sign"},
    {GOBLIN_OP_EXP, 33, "exp"},
    {GOBLIN_OP_LOG, 34, "log"},
    {GOBLIN_OP_SQRT, 35, "sqrt"},
    {GOBLIN_OP_RSQRT, 36, "rsqrt"},
    {GOBLIN_OP_RECIPROCAL, 37, "reciprocal"},
    {GOBLIN_OP_SIN, 38, "sin"},
    {GOBLIN_OP_COS, 39, "cos"},
    {GOBLIN_OP_TANH, 40, "tanh"},
    {GOBLIN_OP_ERF, 41, "erf"},
    {GOBLIN_OP_FLOOR, 42, "floor"},
    {GOBLIN_OP_CEIL, 43, "ceil"},
    {GOBLIN_OP_ROUND, 44, "round"},
    {GOBLIN_OP_TRUNC, 45, "trunc"},
    {GOBLIN_OP_LOG1P, 46, "log1p"},
    {GOBLIN_OP_EXPM1, 47, "expm1"},
    {GOBLIN_OP_SQUARE, 48, "square"},
    {GOBLIN_OP_EQ, 60, "eq"},
    {GOBLIN_OP_NE, 61, "ne"},
    {GOBLIN_OP_LT, 62, "lt"},
    {GOBLIN_OP_LE, 63, "le"},
    {GOBLIN_OP_GT, 64, "gt"},
    {GOBLIN_OP_GE, 65, "ge"},
    {GOBLIN_OP_LOGICAL_AND, 66, "logical_and"},
    {GOBLIN_OP_LOGICAL_OR, 67, "logical_or"},
    {GOBLIN_OP_LOGICAL_XOR, 68, "logical_xor"},
    {GOBLIN_OP_LOGICAL_NOT, 69, "logical_not"},
    {GOBLIN_OP_WHERE, 70, "where"},
    {GOBLIN_OP_ISNAN, 71, "isnan"},
    {GOBLIN_OP_FLOOR_DIV, 80, "floor_div"},
    {GOBLIN_OP_TRUNC_DIV, 81, "trunc_div"},
    {GOBLIN_OP_REM_FLOOR, 82, "rem_floor"},
    {GOBLIN_OP_REM_TRUNC, 83, "rem_trunc"},
    {GOBLIN_OP_BITWISE_AND, 84, "bitwise_and"},
    {GOBLIN_OP_BITWISE_OR, 85, "bitwise_or"},
    {GOBLIN_OP_BITWISE_XOR, 86, "bitwise_xor"},
    {GOBLIN_OP_BITWISE_NOT, 87, "bitwise_not"},
    {GOBLIN_OP_SHL, 88, "shl"},
    {GOBLIN_OP_SHR_ARITH, 89, "shr_arith"},
    {GOBLIN_OP_SHR_LOGICAL, 90, "shr_logical"},
    {GOBLIN_OP_CAST, 91, "cast"},
    {GOBLIN_OP_SUM, 100, "sum"},
    {GOBLIN_OP_MEAN, 101, "mean"},
    {GOBLIN_OP_REDUCE_MAX, 102, "reduce_max"},
    {GOBLIN_OP_REDUCE_MIN, 103, "reduce_min"},
    {GOBLIN_OP_PROD, 104, "prod"},
    {GOBLIN_OP_ARGMAX, 105, "argmax"},
    {GOBLIN_OP_ARGMIN, 106, "argmin"},
    {GOBLIN_OP_VAR, 107, "var"},
    {GOBLIN_OP_CUMSUM, 108, "cumsum"},
    {GOBLIN_OP_RESHAPE, 120, "reshape"},
    {GOBLIN_OP_PERMUTE, 121, "permute"},
    {GOBLIN_OP_EXPAND, 122, "expand"},
    {GOBLIN_OP_SLICE, 123, "slice"},
    {GOBLIN_OP_SELECT, 124, "select"},
    {GOBLIN_OP_SPLIT, 125, "split"},
    {GOBLIN_OP_CONCAT, 126, "concat"},
    {GOBLIN_OP_STACK, 127, "stack"},
    {GOBLIN_OP_PAD, 128, "pad"},
    {GOBLIN_OP_COPY, 129, "copy"},
    {GOBLIN_OP_GATHER, 140, "gather"},
    {GOBLIN_OP_SCATTER, 141, "scatter"},
    {GOBLIN_OP_SCATTER_ADD, 142, "scatter_add"},
    {GOBLIN_OP_INDEX_SELECT, 143, "index_select"},
    {GOBLIN_OP_EMBEDDING, 144, "embedding"},
    {GOBLIN_OP_INDEX_PUT, 145, "index_put"},
    {GOBLIN_OP_MATMUL, 150, "matmul"},
    {GOBLIN_OP_CONV2D, 151, "conv2d"},
    {GOBLIN_OP_MAX_POOL2D, 152, "max_pool2d"},
    {GOBLIN_OP_AVG_POOL2D, 153, "avg_pool2d"},
    {GOBLIN_OP_ADAPTIVE_AVG_POOL2D, 154, "adaptive_avg_pool2d"},
    {GOBLIN_OP_BATCH_NORM, 160, "batch_norm"},
    {GOBLIN_OP_LAYER_NORM, 161, "layer_norm"},
    {GOBLIN_OP_RMS_NORM, 162, "rms_norm"},
    {GOBLIN_OP_RELU, 170, "relu"},
    {GOBLIN_OP_GELU, 171, "gelu"},
    {GOBLIN_OP_SILU, 172, "silu"},
    {GOBLIN_OP_SIGMOID, 173, "sigmoid"},
    {GOBLIN_OP_SOFTMAX, 174, "softmax"},
    {GOBLIN_OP_LOG_SOFTMAX, 175, "log_softmax"},
    {GOBLIN_OP_SDPA, 176, "scaled_dot_product_attention"},
    {GOBLIN_OP_NLL_LOSS, 180, "nll_loss"},
    {GOBLIN_OP_CROSS_ENTROPY, 181, "cross_entropy"},
    {GOBLIN_OP_RAND_UNIFORM, 185, "rand_uniform"},
    {GOBLIN_OP_RAND_NORMAL, 186, "rand_normal"},
    {GOBLIN_OP_BERNOULLI, 187, "bernoulli"},
    {GOBLIN_OP_RANDINT, 188, "randint"},
    {GOBLIN_OP_DROPOUT, 189, "dropout"},
    {GOBLIN_OP_FULL, 195, "full"},
    {GOBLIN_OP_ARANGE, 196, "arange"},
    {GOBLIN_OP_FORMULA, 199, "formula"},
};
#define N_FROZEN_OPS ((int)(sizeof frozen_ops / sizeof frozen_ops[0]))

static const struct {
    goblin_attr_key key;
    int value;
    const char *name;
    goblin_attr_kind kind;
} frozen_attrs[] = {
    {GOBLIN_ATTR_AXES, 0, "axes", GOBLIN_ATTR_KIND_INTS},
    {GOBLIN_ATTR_KEEPDIM, 1, "keepdim", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_AXIS, 2, "axis", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_SHAPE, 3, "shape", GOBLIN_ATTR_KIND_INTS},
    {GOBLIN_ATTR_PERM, 4, "perm", GOBLIN_ATTR_KIND_INTS},
    {GOBLIN_ATTR_STARTS, 5, "starts", GOBLIN_ATTR_KIND_INTS},
    {GOBLIN_ATTR_STOPS, 6, "stops", GOBLIN_ATTR_KIND_INTS},
    {GOBLIN_ATTR_STEPS, 7, "steps", GOBLIN_ATTR_KIND_INTS},
    {GOBLIN_ATTR_INDEX, 8, "index", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_PADS, 9, "pads", GOBLIN_ATTR_KIND_INTS},
    {GOBLIN_ATTR_VALUE, 10, "value", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_MIN, 11, "min", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_MAX, 12, "max", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_DTYPE, 13, "dtype", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_TRANS_A, 14, "trans_a", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_TRANS_B, 15, "trans_b", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_ALPHA, 16, "alpha", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_BETA, 17, "beta", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_STRIDE, 18, "stride", GOBLIN_ATTR_KIND_INTS},
    {GOBLIN_ATTR_PADDING, 19, "padding", GOBLIN_ATTR_KIND_INTS},
    {GOBLIN_ATTR_DILATION, 20, "dilation", GOBLIN_ATTR_KIND_INTS},
    {GOBLIN_ATTR_GROUPS, 21, "groups", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_KERNEL, 22, "kernel", GOBLIN_ATTR_KIND_INTS},
    {GOBLIN_ATTR_OUTPUT_SIZE, 23, "output_size", GOBLIN_ATTR_KIND_INTS},
    {GOBLIN_ATTR_CEIL_MODE, 24, "ceil_mode", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_COUNT_INCLUDE_PAD, 25, "count_include_pad", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_EPS, 26, "eps", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_MOMENTUM, 27, "momentum", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_TRAINING, 28, "training", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_APPROXIMATE, 29, "approximate", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_CAUSAL, 30, "causal", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_SCALE, 31, "scale", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_REDUCTION, 32, "reduction", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_IGNORE_INDEX, 33, "ignore_index", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_SEED, 34, "seed", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_OFFSET, 35, "offset", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_P, 36, "p", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_LOW, 37, "low", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_HIGH, 38, "high", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_MEAN, 39, "mean", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_STD, 40, "std", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_START, 41, "start", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_STEP, 42, "step", GOBLIN_ATTR_KIND_FLOAT},
    {GOBLIN_ATTR_CORRECTION, 43, "correction", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_CHUNKS, 44, "chunks", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_ACCUMULATE, 45, "accumulate", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_NORM_NDIM, 46, "norm_ndim", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_HAS_BIAS, 47, "has_bias", GOBLIN_ATTR_KIND_INT},
    {GOBLIN_ATTR_LABEL_SMOOTHING, 48, "label_smoothing", GOBLIN_ATTR_KIND_FLOAT},
};
#define N_FROZEN_ATTRS ((int)(sizeof frozen_attrs / sizeof frozen_attrs[0]))

/* The product promises at least this many ops (DESIGN.md section 4). */
#define MIN_CATALOGUE_OPS 45

Test(catalog, version) {
    cr_expect_eq(goblin_catalog_version(), (uint32_t)GOBLIN_CATALOG_VERSION);
    cr_expect_geq(GOBLIN_CATALOG_VERSION, 1);
}

Test(catalog, numbering_is_frozen) {
    for (int i = 0; i < N_FROZEN_OPS; i++) {
        cr_expect_eq((int)frozen_ops[i].op, frozen_ops[i].value, "%s moved", frozen_ops[i].name);
        const char *name = goblin_op_name((goblin_op)frozen_ops[i].value);
        cr_assert_not_null(name, "value %d lost its op", frozen_ops[i].value);
        cr_expect_str_eq(name, frozen_ops[i].name);
    }
    cr_expect_gt((int)GOBLIN_OP_COUNT, frozen_ops[N_FROZEN_OPS - 1].value);
}

Test(catalog, iteration_visits_every_op_once_in_order) {
    int seen = 0, prev = -1;
    cr_expect_eq(goblin_op_next(-1), 0, "INPUT (0) comes first");
    for (int op = goblin_op_next(-1); op >= 0; op = goblin_op_next(op)) {
        cr_assert_gt(op, prev, "not increasing: %d after %d", op, prev);
        cr_assert_lt(op, (int)GOBLIN_OP_COUNT);
        cr_expect(goblin_op_valid((goblin_op)op));
        prev = op;
        seen++;
    }
    /* Every value below COUNT is either visited or a gap. */
    int valid = 0;
    for (int op = 0; op < (int)GOBLIN_OP_COUNT; op++) valid += goblin_op_valid((goblin_op)op);
    cr_expect_eq(seen, valid);
    cr_expect_geq(seen, N_FROZEN_OPS);
    cr_expect_eq(goblin_op_next(prev), -1);
    cr_expect_eq(goblin_op_next((int)GOBLIN_OP_COUNT + 5), -1);
}

Test(catalog, gaps_are_not_ops) {
    const int gaps[] = {2, 3, 9, 19, 29, 49, 59, 72, 79, 92, 99, 109, 119, 130, 139, 146, 149, 155,
                        159, 163, 169, 177, 179, 182, 184, 190, 194, 197, 198};
    for (size_t i = 0; i < sizeof gaps / sizeof gaps[0]; i++) {
        goblin_op g = (goblin_op)gaps[i];
        goblin_op_info info;
        cr_expect_not(goblin_op_valid(g), "%d should be a gap", gaps[i]);
        cr_expect_null(goblin_op_name(g));
        cr_expect_eq(goblin_op_get_info(g, &info), GOBLIN_EINVAL);
    }
    cr_expect_not(goblin_op_valid((goblin_op)-1));
    cr_expect_not(goblin_op_valid(GOBLIN_OP_COUNT));
}

Test(catalog, names_round_trip) {
    for (int op = goblin_op_next(-1); op >= 0; op = goblin_op_next(op)) {
        const char *name = goblin_op_name((goblin_op)op);
        goblin_op back = GOBLIN_OP_COUNT;
        cr_assert_not_null(name);
        cr_expect_eq(goblin_op_from_name(name, &back), GOBLIN_OK);
        cr_expect_eq((int)back, op, "%s", name);
        /* Names are lower-case identifiers: they are typed in Python and docs. */
        for (const char *p = name; *p; p++)
            cr_expect((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_', "bad char in %s", name);
    }
    goblin_op back;
    cr_expect_eq(goblin_op_from_name("ADD", &back), GOBLIN_ENOTFOUND, "names are case-sensitive");
    cr_expect_eq(goblin_op_from_name("add ", &back), GOBLIN_ENOTFOUND);
}

Test(catalog, every_defined_op_is_fully_described) {
    int defined = 0;
    for (int op = goblin_op_next(-1); op >= 0; op = goblin_op_next(op)) {
        goblin_op_info in;
        goblin_err e = goblin_op_get_info((goblin_op)op, &in);
        cr_assert(e == GOBLIN_OK || e == GOBLIN_ENOTSUP, "op %d: %s", op, goblin_err_name(e));
        cr_expect_eq((int)in.op, op);
        cr_assert_not_null(in.name);
        cr_expect_str_eq(in.name, goblin_op_name((goblin_op)op));
        if (e == GOBLIN_ENOTSUP) {
            cr_expect_str_eq(in.group, "undefined");
            continue;
        }
        defined++;
        cr_assert_not_null(in.group);
        cr_assert_not_null(in.summary);
        cr_assert_not_null(in.semantics);
        cr_assert_not_null(in.contract);
        cr_expect_gt(strlen(in.group), 0u, "%s: no group", in.name);
        cr_expect_gt(strlen(in.summary), 0u, "%s: no summary", in.name);
        cr_expect_gt(strlen(in.contract), 0u, "%s: no contract text", in.name);
        cr_expect_geq(in.min_inputs, 0, "%s", in.name);
        cr_expect(in.max_inputs == -1 || in.max_inputs >= in.min_inputs, "%s: inputs %d..%d", in.name,
                  in.min_inputs, in.max_inputs);
        cr_expect_leq(in.max_inputs, GOBLIN_GRAPH_MAX_INPUTS_PER_NODE, "%s", in.name);
        cr_expect_neq(in.dtypes, 0u, "%s takes no dtype", in.name);
        cr_expect_eq(in.dtypes & ~(uint32_t)GOBLIN_DTMASK_ALL, 0u, "%s: unknown dtype bits", in.name);
        cr_expect_leq(in.n_attrs, 16u, "%s", in.name);
        for (uint32_t i = 0; i < in.n_attrs && i < 16; i++) {
            cr_expect_not_null(goblin_attr_name(in.attrs[i]), "%s: unknown attribute key %d", in.name,
                               (int)in.attrs[i]);
            for (uint32_t j = i + 1; j < in.n_attrs && j < 16; j++)
                cr_expect_neq(in.attrs[i], in.attrs[j], "%s lists attribute %s twice", in.name,
                              goblin_attr_name(in.attrs[i]));
        }
    }
    cr_expect_geq(defined, MIN_CATALOGUE_OPS, "only %d ops defined; the product promises %d", defined,
                  MIN_CATALOGUE_OPS);
}

Test(catalog, leaves) {
    goblin_op_info in;
    cr_assert_eq(goblin_op_get_info(GOBLIN_OP_INPUT, &in), GOBLIN_OK);
    cr_expect_eq(in.min_inputs, 0);
    cr_expect_eq(in.max_inputs, 0);
    cr_expect_eq(in.dtypes, (uint32_t)GOBLIN_DTMASK_ALL);
    cr_assert_eq(goblin_op_get_info(GOBLIN_OP_CONSTANT, &in), GOBLIN_OK);
    cr_expect_eq(in.max_inputs, 0);
    double rel = -1, abs_tol = -1;
    cr_assert_eq(goblin_op_contract(GOBLIN_OP_INPUT, GOBLIN_DTYPE_F32, 1, &rel, &abs_tol), GOBLIN_OK);
    cr_expect(rel == 0 && abs_tol == 0, "leaves are exact");
}

static double unit_roundoff(goblin_dtype dt) {
    switch (dt) {
    case GOBLIN_DTYPE_F64: return 0x1p-53;
    case GOBLIN_DTYPE_F32: return 0x1p-24;
    case GOBLIN_DTYPE_F16: return 0x1p-11;
    case GOBLIN_DTYPE_BF16: return 0x1p-8;
    default: return 0;
    }
}

/* Contracts are tolerances a verifier applies: finite, non-negative, no looser
 * for a more precise dtype, and never shrinking as the reduction grows. */
Test(catalog, contracts_are_sane) {
    const goblin_dtype floats[] = {GOBLIN_DTYPE_F64, GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F16, GOBLIN_DTYPE_BF16};
    for (int op = goblin_op_next(-1); op >= 0; op = goblin_op_next(op)) {
        goblin_op_info in;
        if (goblin_op_get_info((goblin_op)op, &in) != GOBLIN_OK) continue;
        for (int d = 0; d < GOBLIN_DTYPE_COUNT; d++) {
            if (!(in.dtypes & GOBLIN_DTMASK(d))) continue;
            double r1, a1, r2, a2;
            cr_assert_eq(goblin_op_contract((goblin_op)op, (goblin_dtype)d, 1, &r1, &a1), GOBLIN_OK, "%s %s",
                         in.name, goblin_dtype_name((goblin_dtype)d));
            cr_assert_eq(goblin_op_contract((goblin_op)op, (goblin_dtype)d, 1000, &r2, &a2), GOBLIN_OK);
            cr_expect(isfinite(r1) && isfinite(a1) && r1 >= 0 && a1 >= 0, "%s %s: rel %g abs %g", in.name,
                      goblin_dtype_name((goblin_dtype)d), r1, a1);
            cr_expect(r2 >= r1 && a2 >= a1, "%s %s: contract shrinks with k", in.name,
                      goblin_dtype_name((goblin_dtype)d));
            if (goblin_dtype_is_float((goblin_dtype)d))
                cr_expect_lt(r1, 0.1, "%s %s: rel %g accepts nearly anything", in.name,
                             goblin_dtype_name((goblin_dtype)d), r1);
        }
        /* Precision ordering over the float dtypes the op takes (f64 <= f32 <= f16 <= bf16). */
        double prev = -1;
        for (int i = 0; i < 4; i++) {
            if (!(in.dtypes & GOBLIN_DTMASK(floats[i]))) continue;
            double r, a;
            cr_assert_eq(goblin_op_contract((goblin_op)op, floats[i], 64, &r, &a), GOBLIN_OK);
            cr_expect_geq(r, prev, "%s: %s is held tighter than a more precise dtype", in.name,
                          goblin_dtype_name(floats[i]));
            prev = r;
        }
    }
}

/* The dot-product bound of DESIGN.md section 6: a matmul contract tighter than
 * gamma_k would reject correct results. */
Test(catalog, matmul_and_sum_contracts_cover_gamma_k) {
    const goblin_op reducing[] = {GOBLIN_OP_MATMUL, GOBLIN_OP_SUM};
    const goblin_dtype dts[] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    const int64_t ks[] = {16, 1024, 65536};
    int checked = 0;
    for (size_t o = 0; o < 2; o++) {
        goblin_op_info in;
        if (goblin_op_get_info(reducing[o], &in) != GOBLIN_OK) continue;
        for (size_t d = 0; d < 2; d++)
            for (size_t k = 0; k < 3; k++) {
                double u = unit_roundoff(dts[d]), ku = (double)ks[k] * u, gamma = ku / (1 - ku);
                double rel, abs_tol;
                cr_assert_eq(goblin_op_contract(reducing[o], dts[d], ks[k], &rel, &abs_tol), GOBLIN_OK);
                cr_expect_geq(rel, gamma * (1 - 1e-12), "%s %s k=%lld: rel %g < gamma_k %g", in.name,
                              goblin_dtype_name(dts[d]), (long long)ks[k], rel, gamma);
                checked++;
            }
    }
    if (!checked) cr_skip_test("neither matmul nor sum is in this build yet");
}

/* Integer arithmetic is exact: a verifier compares bits. */
Test(catalog, integer_elementwise_is_exact) {
    const goblin_op exact_ops[] = {GOBLIN_OP_ADD, GOBLIN_OP_SUB, GOBLIN_OP_MUL, GOBLIN_OP_NEG,
                                   GOBLIN_OP_ABS, GOBLIN_OP_FLOOR_DIV, GOBLIN_OP_BITWISE_AND, GOBLIN_OP_SUM};
    int checked = 0;
    for (size_t o = 0; o < sizeof exact_ops / sizeof exact_ops[0]; o++) {
        goblin_op_info in;
        if (goblin_op_get_info(exact_ops[o], &in) != GOBLIN_OK) continue;
        for (int d = 0; d < GOBLIN_DTYPE_COUNT; d++) {
            if (!(in.dtypes & GOBLIN_DTMASK(d)) || !goblin_dtype_is_int((goblin_dtype)d)) continue;
            double rel, abs_tol;
            cr_assert_eq(goblin_op_contract(exact_ops[o], (goblin_dtype)d, 100, &rel, &abs_tol), GOBLIN_OK);
            cr_expect(rel == 0 && abs_tol == 0, "%s %s: rel %g abs %g", in.name,
                      goblin_dtype_name((goblin_dtype)d), rel, abs_tol);
            checked++;
        }
    }
    if (!checked) cr_skip_test("no integer arithmetic op in this build yet");
}

Test(catalog, attribute_keys_are_frozen) {
    for (int i = 0; i < N_FROZEN_ATTRS; i++) {
        cr_expect_eq((int)frozen_attrs[i].key, frozen_attrs[i].value, "%s moved", frozen_attrs[i].name);
        const char *name = goblin_attr_name(frozen_attrs[i].key);
        cr_assert_not_null(name, "%s", frozen_attrs[i].name);
        cr_expect_str_eq(name, frozen_attrs[i].name);
        cr_expect_eq(goblin_attr_key_kind(frozen_attrs[i].key), frozen_attrs[i].kind, "%s", name);
    }
    cr_expect_null(goblin_attr_name(GOBLIN_ATTR_COUNT));
    cr_expect_null(goblin_attr_name((goblin_attr_key)-1));
    cr_expect_eq(goblin_attr_key_kind(GOBLIN_ATTR_COUNT), GOBLIN_ATTR_KIND_COUNT);
    cr_expect_eq(goblin_attr_key_kind((goblin_attr_key)-1), GOBLIN_ATTR_KIND_COUNT);
}

Test(catalog, attribute_builders) {
    goblin_attr a = goblin_attr_int(GOBLIN_ATTR_AXIS, -2);
    cr_expect_eq(a.key, GOBLIN_ATTR_AXIS);
    cr_expect_eq(a.count, 1);
    cr_expect_eq(a.v.i, -2);
    a = goblin_attr_float(GOBLIN_ATTR_EPS, 1e-5);
    cr_expect_eq(a.key, GOBLIN_ATTR_EPS);
    cr_expect_eq(a.count, 1);
    cr_expect_eq(a.v.f, 1e-5);
    int64_t v[GOBLIN_MAX_ATTR_INTS + 1];
    for (int i = 0; i <= GOBLIN_MAX_ATTR_INTS; i++) v[i] = 100 - i;
    a = goblin_attr_ints(GOBLIN_ATTR_PERM, v, 3);
    cr_expect_eq(a.count, 3);
    cr_expect(a.v.ints[0] == 100 && a.v.ints[1] == 99 && a.v.ints[2] == 98);
    v[0] = 7; /* copied, not borrowed */
    cr_expect_eq(a.v.ints[0], 100);
    a = goblin_attr_ints(GOBLIN_ATTR_SHAPE, v, GOBLIN_MAX_ATTR_INTS);
    cr_expect_eq(a.count, GOBLIN_MAX_ATTR_INTS);
    cr_expect_eq(a.v.ints[GOBLIN_MAX_ATTR_INTS - 1], 100 - (GOBLIN_MAX_ATTR_INTS - 1));
    cr_expect_eq(goblin_attr_ints(GOBLIN_ATTR_SHAPE, v, GOBLIN_MAX_ATTR_INTS + 1).count, -1);
    cr_expect_eq(goblin_attr_ints(GOBLIN_ATTR_SHAPE, v, -1).count, -1);
    a = goblin_attr_ints(GOBLIN_ATTR_AXES, NULL, 0);
    cr_expect_eq(a.count, 0, "an empty list is a valid INTS value");
}

Test(catalog, dtypes) {
    static const struct {
        goblin_dtype dt;
        int value;
        const char *name;
        size_t size;
        bool is_float, is_int;
    } t[] = {
        {GOBLIN_DTYPE_F32, 0, "f32", 4, true, false},  {GOBLIN_DTYPE_F64, 1, "f64", 8, true, false},
        {GOBLIN_DTYPE_F16, 2, "f16", 2, true, false},  {GOBLIN_DTYPE_BF16, 3, "bf16", 2, true, false},
        {GOBLIN_DTYPE_I8, 4, "i8", 1, false, true},    {GOBLIN_DTYPE_I16, 5, "i16", 2, false, true},
        {GOBLIN_DTYPE_I32, 6, "i32", 4, false, true},  {GOBLIN_DTYPE_I64, 7, "i64", 8, false, true},
        {GOBLIN_DTYPE_U8, 8, "u8", 1, false, true},    {GOBLIN_DTYPE_BOOL, 9, "bool", 1, false, false},
    };
    cr_expect_eq((int)GOBLIN_DTYPE_COUNT, 10);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        goblin_dtype back;
        cr_expect_eq((int)t[i].dt, t[i].value);
        cr_expect_str_eq(goblin_dtype_name(t[i].dt), t[i].name);
        cr_expect_eq(goblin_dtype_size(t[i].dt), t[i].size, "%s", t[i].name);
        cr_expect_eq(goblin_dtype_is_float(t[i].dt), t[i].is_float, "%s", t[i].name);
        cr_expect_eq(goblin_dtype_is_int(t[i].dt), t[i].is_int, "%s", t[i].name);
        cr_assert_eq(goblin_dtype_from_name(t[i].name, &back), GOBLIN_OK);
        cr_expect_eq(back, t[i].dt);
    }
    cr_expect_not(goblin_dtype_is_float(GOBLIN_DTYPE_COUNT));
    cr_expect_not(goblin_dtype_is_int((goblin_dtype)-1));
}
