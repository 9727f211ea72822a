/* tests/unit/test_autodiff.c - goblin_graph_backward (libgoblin/autodiff.c) and the
 * fused backward ops (ops_grad.c, backends/ref/ref_grad.c).
 *
 * Every backward rule is checked against central finite differences in f64: the
 * graph computes loss = sum(f(inputs) * W) with a fixed random W (so every output
 * element has a different weight), the analytic gradient comes from the appended
 * nodes, and each input element is perturbed by +-h (h = 1e-6). Agreement is
 * required to 1e-6 relative (plus 1e-7 absolute for near-zero entries). Inputs
 * are kept away from kinks (relu at 0, abs at 0, max ties) by their ranges. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include "testutil.h"

#define A_INT(k, v) goblin_attr_int(GOBLIN_ATTR_##k, (v))
#define A_FLT(k, v) goblin_attr_float(GOBLIN_ATTR_##k, (v))
#define A_INTS(k, ...)                                                  \
    goblin_attr_ints(GOBLIN_ATTR_##k, (const int64_t[]){__VA_ARGS__},   \
                     (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

#define MAXIN 6

/* One graph input: dtype, shape, data (NULL = uniform random in [lo, hi]), and
 * whether to differentiate with respect to it. */
typedef struct gin {
    goblin_dtype dt;
    int32_t rank;
    int64_t shape[GOBLIN_MAX_RANK];
    const void *data;
    double lo, hi;
    bool wrt;
} gin;

/* A forward computation: one op over all inputs, or a custom builder. */
typedef struct fwd {
    goblin_op op;
    goblin_attr attrs[8];
    int32_t n_attrs;
    int32_t (*build)(goblin_graph *g, const int32_t *ids, const struct fwd *f);
} fwd;

static int32_t must_add(goblin_graph *g, goblin_op op, const int32_t *in, int32_t n,
                        const goblin_attr *a, int32_t na) {
    int32_t id = -1;
    goblin_err e = goblin_graph_add(g, op, in, n, a, na, &id);
    cr_assert_eq(e, GOBLIN_OK, "%s: %s", goblin_op_name(op), goblin_graph_error(g));
    return id;
}

static int64_t numel_of(int32_t rank, const int64_t *s) {
    int64_t n = 1;
    for (int32_t d = 0; d < rank; d++) n *= s[d];
    return n;
}

static uint64_t g_seed = 0x9E3779B97F4A7C15ULL;
static goblin_backend_kind g_fd_backend = GOBLIN_BACKEND_REF; /* where fd_check runs */

/* Build loss = sum(f(x) * W); append gradients; returns the graph with outputs
 * [loss, grad_0, ...] and fills ids. */
static goblin_graph *build_loss(const gin *ins, int32_t n, const fwd *f, double **w_out,
                                int32_t *n_wrt) {
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int32_t ids[MAXIN];
    for (int32_t i = 0; i < n; i++)
        cr_assert_eq(goblin_graph_input(g, ins[i].dt, ins[i].rank, ins[i].shape, &ids[i]), GOBLIN_OK);
    int32_t y = f->build ? f->build(g, ids, f) : must_add(g, f->op, ids, n, f->attrs, f->n_attrs);
    goblin_tensor yi;
    goblin_graph_node(g, y, NULL, &yi, NULL, NULL);
    int64_t ny = goblin_tensor_numel(&yi);
    double *w = malloc(sizeof(double) * (size_t)(ny > 0 ? ny : 1));
    for (int64_t i = 0; i < ny; i++) w[i] = 0.5 + gt_rand(&g_seed);
    goblin_tensor wt = gt_tensor(GOBLIN_DTYPE_F64, yi.rank, yi.shape, w);
    int32_t wid, prod, loss;
    cr_assert_eq(goblin_graph_constant(g, &wt, &wid), GOBLIN_OK);
    int32_t pin[2] = {y, wid};
    prod = must_add(g, GOBLIN_OP_MUL, pin, 2, NULL, 0);
    loss = must_add(g, GOBLIN_OP_SUM, &prod, 1, NULL, 0);
    int32_t wrt[MAXIN], grads[MAXIN], nw = 0;
    for (int32_t i = 0; i < n; i++)
        if (ins[i].wrt) wrt[nw++] = ids[i];
    int32_t before = goblin_graph_node_count(g);
    goblin_err e = goblin_graph_backward(g, loss, wrt, nw, grads);
    cr_assert_eq(e, GOBLIN_OK, "backward: %s: %s", goblin_err_name(e), goblin_graph_error(g));
    cr_assert_gt(goblin_graph_node_count(g), before);
    cr_assert_eq(goblin_graph_output(g, loss), GOBLIN_OK);
    for (int32_t i = 0; i < nw; i++) {
        goblin_tensor gi, xi;
        goblin_graph_node(g, grads[i], NULL, &gi, NULL, NULL);
        goblin_graph_node(g, wrt[i], NULL, &xi, NULL, NULL);
        cr_assert_eq(gi.rank, xi.rank);
        for (int32_t d = 0; d < gi.rank; d++) cr_assert_eq(gi.shape[d], xi.shape[d]);
        cr_assert_eq(gi.dtype, xi.dtype);
        cr_assert_eq(goblin_graph_output(g, grads[i]), GOBLIN_OK);
    }
    *w_out = w;
    *n_wrt = nw;
    return g;
}

static double run_loss(goblin_exec *ex, const goblin_tensor *tin, int32_t n, int32_t n_out) {
    goblin_tensor outs[MAXIN + 1];
    memset(outs, 0, sizeof outs);
    goblin_err e = goblin_exec_run(ex, tin, n, outs, n_out);
    cr_assert_eq(e, GOBLIN_OK, "run: %s", goblin_exec_error(ex));
    double l = *(double *)outs[0].data;
    for (int32_t i = 0; i < n_out; i++) goblin_buffer_free(outs[i].data);
    return l;
}

/* The whole check: analytic gradients vs central differences. */
static void fd_check(const char *name, gin *ins, int32_t n, const fwd *f) {
    void *bufs[MAXIN];
    goblin_tensor tin[MAXIN];
    for (int32_t i = 0; i < n; i++) {
        int64_t ne = numel_of(ins[i].rank, ins[i].shape);
        size_t es = goblin_dtype_size(ins[i].dt);
        bufs[i] = malloc(es * (size_t)(ne > 0 ? ne : 1));
        if (ins[i].data) {
            memcpy(bufs[i], ins[i].data, es * (size_t)ne);
        } else {
            cr_assert_eq(ins[i].dt, GOBLIN_DTYPE_F64);
            for (int64_t k = 0; k < ne; k++)
                ((double *)bufs[i])[k] = ins[i].lo + (ins[i].hi - ins[i].lo) * gt_rand(&g_seed);
        }
        tin[i] = gt_tensor(ins[i].dt, ins[i].rank, ins[i].shape, bufs[i]);
    }
    double *w;
    int32_t nw;
    goblin_graph *g = build_loss(ins, n, f, &w, &nw);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = g_fd_backend;
    p.threads = 1;
    goblin_exec *ex = NULL;
    cr_assert_eq(goblin_exec_new(&ex, g, &p), GOBLIN_OK);
    goblin_tensor outs[MAXIN + 1];
    memset(outs, 0, sizeof outs);
    cr_assert_eq(goblin_exec_run(ex, tin, n, outs, nw + 1), GOBLIN_OK, "%s: %s", name,
                 goblin_exec_error(ex));
    const double h = 1e-6;
    int32_t k = 0, checked = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!ins[i].wrt) continue;
        const double *an = outs[1 + k].data;
        double *x = bufs[i];
        int64_t ne = numel_of(ins[i].rank, ins[i].shape);
        for (int64_t j = 0; j < ne; j++) {
            double x0 = x[j];
            x[j] = x0 + h;
            double lp = run_loss(ex, tin, n, nw + 1);
            x[j] = x0 - h;
            double lm = run_loss(ex, tin, n, nw + 1);
            x[j] = x0;
            double fd = (lp - lm) / (2 * h);
            cr_expect(fabs(fd - an[j]) <= 1e-6 * fabs(an[j]) + 1e-7,
                      "%s: d/d input %d [%lld]: analytic %.12g, finite difference %.12g", name,
                      (int)i, (long long)j, an[j], fd);
            checked++;
        }
        k++;
    }
    cr_assert_gt(checked, 0);
    for (int32_t i = 0; i <= nw; i++) goblin_buffer_free(outs[i].data);
    goblin_exec_free(ex);
    goblin_graph_free(g);
    free(w);
    for (int32_t i = 0; i < n; i++) free(bufs[i]);
}

#define F64(lo_, hi_, ...) \
    {GOBLIN_DTYPE_F64, (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), {__VA_ARGS__}, NULL, lo_, hi_, true}
#define F64S(lo_, hi_) {GOBLIN_DTYPE_F64, 0, {0}, NULL, lo_, hi_, true}

static void check_op(const char *name, goblin_op op, gin *ins, int32_t n, const goblin_attr *a,
                     int32_t na) {
    fwd f = {.op = op, .n_attrs = na};
    for (int32_t i = 0; i < na; i++) f.attrs[i] = a[i];
    fd_check(name, ins, n, &f);
}

/* ---- elementwise binary, with broadcasting ---------------------------------- */

Test(autodiff, binary_broadcast) {
    static const goblin_op ops[] = {GOBLIN_OP_ADD, GOBLIN_OP_SUB, GOBLIN_OP_MUL, GOBLIN_OP_DIV,
                                    GOBLIN_OP_POW};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        gin a[2] = {F64(0.5, 2.0, 2, 3, 4), F64(0.5, 1.5, 3, 1)};
        check_op(goblin_op_name(ops[i]), ops[i], a, 2, NULL, 0);
        gin b[2] = {F64(0.5, 2.0, 4), F64(0.5, 1.5, 2, 3, 1)}; /* both sides broadcast */
        check_op(goblin_op_name(ops[i]), ops[i], b, 2, NULL, 0);
        gin c[2] = {F64S(0.5, 2.0), F64(0.5, 1.5, 2, 3)}; /* scalar operand */
        check_op(goblin_op_name(ops[i]), ops[i], c, 2, NULL, 0);
    }
}

Test(autodiff, maximum_minimum) {
    /* disjoint ranges: no ties, the gradient goes one way */
    gin a[2] = {F64(0, 1, 2, 3), F64(2, 3, 3)};
    check_op("maximum", GOBLIN_OP_MAXIMUM, a, 2, NULL, 0);
    gin b[2] = {F64(0, 1, 2, 3), F64(2, 3, 3)};
    check_op("minimum", GOBLIN_OP_MINIMUM, b, 2, NULL, 0);
    /* mixed: each element picks a side */
    gin c[2] = {F64(-1, 1, 3, 4), F64(-1, 1, 3, 4)};
    check_op("maximum mixed", GOBLIN_OP_MAXIMUM, c, 2, NULL, 0);
}

Test(autodiff, maximum_tie_splits_half) {
    /* torch: equal inputs get half the gradient each */
    goblin_graph *g;
    goblin_graph_new(&g);
    int32_t a, b, y, grads[2];
    int64_t s[1] = {2};
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 1, s, &a);
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 1, s, &b);
    int32_t in[2] = {a, b};
    y = must_add(g, GOBLIN_OP_MAXIMUM, in, 2, NULL, 0);
    int32_t l = must_add(g, GOBLIN_OP_SUM, &y, 1, NULL, 0);
    cr_assert_eq(goblin_graph_backward(g, l, in, 2, grads), GOBLIN_OK, "%s", goblin_graph_error(g));
    goblin_graph_output(g, grads[0]);
    goblin_graph_output(g, grads[1]);
    double av[2] = {1, 5}, bv[2] = {1, 2};
    goblin_tensor tin[2] = {gt_tensor(GOBLIN_DTYPE_F64, 1, s, av), gt_tensor(GOBLIN_DTYPE_F64, 1, s, bv)};
    goblin_tensor out[2];
    memset(out, 0, sizeof out);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_REF;
    cr_assert_eq(goblin_graph_eval(g, &p, tin, 2, out, 2), GOBLIN_OK);
    double *ga = out[0].data, *gb = out[1].data;
    cr_expect(ga[0] == 0.5 && gb[0] == 0.5 && ga[1] == 1 && gb[1] == 0);
    goblin_buffer_free(out[0].data);
    goblin_buffer_free(out[1].data);
    goblin_graph_free(g);
}

Test(autodiff, where_and_clamp) {
    uint8_t cond[6] = {1, 0, 1, 1, 0, 0};
    gin a[3] = {{GOBLIN_DTYPE_BOOL, 2, {2, 3}, cond, 0, 0, false}, F64(-1, 1, 2, 3), F64(-1, 1, 3)};
    check_op("where", GOBLIN_OP_WHERE, a, 3, NULL, 0);
    /* clamp: values placed away from the bounds +-0.5 */
    static const double xv[8] = {-0.9, -0.7, -0.3, 0.1, 0.2, 0.45, 0.6, 0.95};
    gin b[1] = {{GOBLIN_DTYPE_F64, 1, {8}, xv, 0, 0, true}};
    goblin_attr at[2] = {A_FLT(MIN, -0.5), A_FLT(MAX, 0.5)};
    check_op("clamp", GOBLIN_OP_CLAMP, b, 1, at, 2);
    check_op("clamp min only", GOBLIN_OP_CLAMP, b, 1, at, 1);
}

/* ---- unary and activations ---------------------------------------------------- */

Test(autodiff, unary) {
    static const struct { goblin_op op; double lo, hi; } cases[] = {
        {GOBLIN_OP_NEG, -2, 2},        {GOBLIN_OP_ABS, 0.1, 2},     {GOBLIN_OP_EXP, -2, 2},
        {GOBLIN_OP_LOG, 0.2, 3},       {GOBLIN_OP_SQRT, 0.2, 3},    {GOBLIN_OP_RSQRT, 0.2, 3},
        {GOBLIN_OP_RECIPROCAL, 0.5, 2}, {GOBLIN_OP_SIN, -3, 3},     {GOBLIN_OP_COS, -3, 3},
        {GOBLIN_OP_TANH, -2, 2},       {GOBLIN_OP_ERF, -2, 2},      {GOBLIN_OP_LOG1P, -0.5, 2},
        {GOBLIN_OP_EXPM1, -2, 2},      {GOBLIN_OP_SQUARE, -2, 2},   {GOBLIN_OP_RELU, 0.05, 2},
        {GOBLIN_OP_SIGMOID, -3, 3},    {GOBLIN_OP_SILU, -3, 3},     {GOBLIN_OP_GELU, -3, 3},
        {GOBLIN_OP_COPY, -1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gin a[1] = {F64(cases[i].lo, cases[i].hi, 3, 4)};
        check_op(goblin_op_name(cases[i].op), cases[i].op, a, 1, NULL, 0);
    }
    gin a[1] = {F64(-0.1, -2, 3, 4)}; /* negative side of relu and abs */
    check_op("relu negative", GOBLIN_OP_RELU, a, 1, NULL, 0);
    check_op("abs negative", GOBLIN_OP_ABS, a, 1, NULL, 0);
    goblin_attr t = A_INT(APPROXIMATE, GOBLIN_GELU_TANH);
    gin b[1] = {F64(-3, 3, 5)};
    check_op("gelu tanh", GOBLIN_OP_GELU, b, 1, &t, 1);
}

/* Piecewise-constant ops and casts: checked by exact values, not differences. */
static void grads_of(goblin_op op, const goblin_attr *a, int32_t na, goblin_dtype dt, double *xv,
                     int64_t n, double *gout) {
    goblin_graph *g;
    goblin_graph_new(&g);
    int32_t x, y, l, gr;
    goblin_graph_input(g, dt, 1, &n, &x);
    y = must_add(g, op, &x, 1, a, na);
    l = must_add(g, GOBLIN_OP_SUM, &y, 1, NULL, 0);
    cr_assert_eq(goblin_graph_backward(g, l, &x, 1, &gr), GOBLIN_OK, "%s", goblin_graph_error(g));
    goblin_graph_output(g, gr);
    float xf[16];
    for (int64_t i = 0; i < n; i++) xf[i] = (float)xv[i];
    goblin_tensor tin = gt_tensor(dt, 1, &n, dt == GOBLIN_DTYPE_F32 ? (void *)xf : (void *)xv);
    goblin_tensor out;
    memset(&out, 0, sizeof out);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_REF;
    cr_assert_eq(goblin_graph_eval(g, &p, &tin, 1, &out, 1), GOBLIN_OK);
    for (int64_t i = 0; i < n; i++)
        gout[i] = dt == GOBLIN_DTYPE_F32 ? ((float *)out.data)[i] : ((double *)out.data)[i];
    goblin_buffer_free(out.data);
    goblin_graph_free(g);
}

Test(autodiff, piecewise_constant_and_cast) {
    double x[4] = {-1.5, 0.2, 0.7, 2.5}, gv[4];
    static const goblin_op pc[] = {GOBLIN_OP_FLOOR, GOBLIN_OP_CEIL, GOBLIN_OP_ROUND, GOBLIN_OP_TRUNC,
                                   GOBLIN_OP_SIGN};
    for (size_t i = 0; i < 5; i++) {
        grads_of(pc[i], NULL, 0, GOBLIN_DTYPE_F64, x, 4, gv);
        for (int k = 0; k < 4; k++) cr_expect_eq(gv[k], 0.0, "%s", goblin_op_name(pc[i]));
    }
    /* cast f32 -> f64: the gradient comes back as f32 ones */
    goblin_attr a = A_INT(DTYPE, GOBLIN_DTYPE_F64);
    grads_of(GOBLIN_OP_CAST, &a, 1, GOBLIN_DTYPE_F32, x, 4, gv);
    for (int k = 0; k < 4; k++) cr_expect_eq(gv[k], 1.0);
}

Test(autodiff, dropout) {
    gin a[1] = {F64(-1, 1, 4, 5)};
    goblin_attr at[2] = {A_INT(SEED, 7), A_FLT(P, 0.3)};
    check_op("dropout", GOBLIN_OP_DROPOUT, a, 1, at, 2);
}

/* ---- reductions and softmax ------------------------------------------------------ */

Test(autodiff, sum_mean) {
    for (int keep = 0; keep < 2; keep++) {
        gin a[1] = {F64(-1, 1, 2, 3, 4)};
        goblin_attr at[2] = {A_INTS(AXES, 1), A_INT(KEEPDIM, keep)};
        check_op("sum axis 1", GOBLIN_OP_SUM, a, 1, at, 2);
        goblin_attr bt[2] = {A_INTS(AXES, 0, -1), A_INT(KEEPDIM, keep)};
        check_op("mean axes 0,-1", GOBLIN_OP_MEAN, a, 1, bt, 2);
    }
    gin a[1] = {F64(-1, 1, 2, 3)};
    check_op("sum all", GOBLIN_OP_SUM, a, 1, NULL, 0);
    check_op("mean all", GOBLIN_OP_MEAN, a, 1, NULL, 0);
}

Test(autodiff, softmax_log_softmax) {
    gin a[1] = {F64(-2, 2, 2, 3, 4)};
    goblin_attr at = A_INT(AXIS, 1);
    check_op("softmax axis 1", GOBLIN_OP_SOFTMAX, a, 1, &at, 1);
    check_op("log_softmax axis 1", GOBLIN_OP_LOG_SOFTMAX, a, 1, &at, 1);
    check_op("softmax default", GOBLIN_OP_SOFTMAX, a, 1, NULL, 0);
    check_op("log_softmax default", GOBLIN_OP_LOG_SOFTMAX, a, 1, NULL, 0);
}

/* ---- shape ops ----------------------------------------------------------------- */

Test(autodiff, shape_ops) {
    gin a[1] = {F64(-1, 1, 2, 3, 4)};
    goblin_attr r = A_INTS(SHAPE, 4, -1);
    check_op("reshape", GOBLIN_OP_RESHAPE, a, 1, &r, 1);
    goblin_attr pm = A_INTS(PERM, 2, 0, 1);
    check_op("permute", GOBLIN_OP_PERMUTE, a, 1, &pm, 1);
    gin b[1] = {F64(-1, 1, 3, 1)};
    goblin_attr ex = A_INTS(SHAPE, 2, 3, 4);
    check_op("expand", GOBLIN_OP_EXPAND, b, 1, &ex, 1);
    goblin_attr sl[3] = {A_INTS(STARTS, 1, -3), A_INTS(STOPS, 3, 100), A_INTS(AXES, 1, 2)};
    check_op("slice", GOBLIN_OP_SLICE, a, 1, sl, 3);
    gin c[1] = {F64(-1, 1, 3, 9)};
    goblin_attr sl2[4] = {A_INTS(STARTS, 1, 0), A_INTS(STOPS, 3, 8), A_INTS(AXES, 0, 1),
                          A_INTS(STEPS, 1, 3)};
    check_op("slice step 3", GOBLIN_OP_SLICE, c, 1, sl2, 4);
    goblin_attr se[2] = {A_INT(AXIS, 1), A_INT(INDEX, -1)};
    check_op("select", GOBLIN_OP_SELECT, a, 1, se, 2);
    goblin_attr sp[3] = {A_INT(AXIS, 2), A_INT(CHUNKS, 3), A_INT(INDEX, 1)};
    check_op("split", GOBLIN_OP_SPLIT, a, 1, sp, 3);
    goblin_attr pd = A_INTS(PADS, 1, 2, -1, 0);
    check_op("pad (and crop)", GOBLIN_OP_PAD, a, 1, &pd, 1);
    gin d[3] = {F64(-1, 1, 2, 1, 4), F64(-1, 1, 2, 3, 4), F64(-1, 1, 2, 2, 4)};
    goblin_attr ca = A_INT(AXIS, 1);
    check_op("concat", GOBLIN_OP_CONCAT, d, 3, &ca, 1);
    gin e[2] = {F64(-1, 1, 2, 3), F64(-1, 1, 2, 3)};
    goblin_attr st = A_INT(AXIS, -1);
    check_op("stack", GOBLIN_OP_STACK, e, 2, &st, 1);
    int64_t idx[6] = {2, 0, 2, 1, 1, 1};
    gin f[2] = {F64(-1, 1, 2, 3), {GOBLIN_DTYPE_I64, 2, {2, 3}, idx, 0, 0, false}};
    goblin_attr ga = A_INT(AXIS, 1);
    check_op("gather (repeated indices)", GOBLIN_OP_GATHER, f, 2, &ga, 1);
}

/* ---- matmul ----------------------------------------------------------------- */

Test(autodiff, matmul) {
    gin a[2] = {F64(-1, 1, 3, 4), F64(-1, 1, 4, 5)};
    check_op("matmul", GOBLIN_OP_MATMUL, a, 2, NULL, 0);
    gin b[2] = {F64(-1, 1, 4, 3), F64(-1, 1, 4, 5)};
    goblin_attr ta = A_INT(TRANS_A, 1);
    check_op("matmul trans_a", GOBLIN_OP_MATMUL, b, 2, &ta, 1);
    gin c[2] = {F64(-1, 1, 3, 4), F64(-1, 1, 5, 4)};
    goblin_attr tb[2] = {A_INT(TRANS_B, 1), A_FLT(ALPHA, 0.7)};
    check_op("matmul trans_b alpha", GOBLIN_OP_MATMUL, c, 2, tb, 2);
    gin d[2] = {F64(-1, 1, 4, 3), F64(-1, 1, 5, 4)};
    goblin_attr tt[2] = {A_INT(TRANS_A, 1), A_INT(TRANS_B, 1)};
    check_op("matmul both trans", GOBLIN_OP_MATMUL, d, 2, tt, 2);
    gin e[2] = {F64(-1, 1, 2, 3, 4), F64(-1, 1, 4, 5)};
    check_op("matmul batch x 2-d", GOBLIN_OP_MATMUL, e, 2, NULL, 0);
    /* a linear layer's weight gradient, folded into one product over all the rows */
    gin e2[2] = {F64(-1, 1, 2, 2, 3, 4), F64(-1, 1, 5, 4)};
    check_op("matmul 2 batch dims x 2-d trans_b alpha", GOBLIN_OP_MATMUL, e2, 2, tb, 2);
    gin e3[2] = {F64(-1, 1, 2, 4, 3), F64(-1, 1, 4, 5)};
    check_op("matmul batch trans_a x 2-d (not folded)", GOBLIN_OP_MATMUL, e3, 2, &ta, 1);
    gin f[2] = {F64(-1, 1, 1, 3, 4), F64(-1, 1, 2, 1, 4, 5)};
    check_op("matmul batch broadcast", GOBLIN_OP_MATMUL, f, 2, NULL, 0);
    gin g1[2] = {F64(-1, 1, 4), F64(-1, 1, 2, 4, 5)};
    check_op("matmul 1-d x batch", GOBLIN_OP_MATMUL, g1, 2, NULL, 0);
    gin g2[2] = {F64(-1, 1, 2, 3, 4), F64(-1, 1, 4)};
    check_op("matmul batch x 1-d", GOBLIN_OP_MATMUL, g2, 2, NULL, 0);
    gin g3[2] = {F64(-1, 1, 4), F64(-1, 1, 4)};
    check_op("matmul dot", GOBLIN_OP_MATMUL, g3, 2, NULL, 0);
    gin h[3] = {F64(-1, 1, 3, 4), F64(-1, 1, 4, 5), F64(-1, 1, 5)};
    goblin_attr ab[2] = {A_FLT(ALPHA, 2.0), A_FLT(BETA, -0.5)};
    check_op("matmul with c", GOBLIN_OP_MATMUL, h, 3, ab, 2);
}

/* ---- nn ------------------------------------------------------------------- */

Test(autodiff, conv2d) {
    gin a[3] = {F64(-1, 1, 2, 4, 6, 5), F64(-1, 1, 6, 2, 3, 2), F64(-1, 1, 6)};
    goblin_attr at[4] = {A_INTS(STRIDE, 2, 1), A_INTS(PADDING, 1, 2), A_INTS(DILATION, 1, 2),
                         A_INT(GROUPS, 2)};
    check_op("conv2d groups stride pad dilation bias", GOBLIN_OP_CONV2D, a, 3, at, 4);
    gin b[2] = {F64(-1, 1, 1, 2, 5, 5), F64(-1, 1, 3, 2, 3, 3)};
    check_op("conv2d plain", GOBLIN_OP_CONV2D, b, 2, NULL, 0);
}

Test(autodiff, pooling) {
    gin a[1] = {F64(-1, 1, 2, 2, 5, 6)};
    goblin_attr mp[3] = {A_INTS(KERNEL, 3, 2), A_INTS(STRIDE, 2, 1), A_INTS(PADDING, 1, 1)};
    check_op("max_pool2d overlapping padded", GOBLIN_OP_MAX_POOL2D, a, 1, mp, 3);
    goblin_attr mp2[3] = {A_INTS(KERNEL, 2), A_INT(CEIL_MODE, 1), A_INTS(DILATION, 2, 1)};
    check_op("max_pool2d ceil dilation", GOBLIN_OP_MAX_POOL2D, a, 1, mp2, 3);
    for (int cip = 0; cip < 2; cip++) {
        goblin_attr ap[5] = {A_INTS(KERNEL, 3), A_INTS(STRIDE, 2), A_INTS(PADDING, 1),
                             A_INT(COUNT_INCLUDE_PAD, cip), A_INT(CEIL_MODE, 1)};
        check_op("avg_pool2d", GOBLIN_OP_AVG_POOL2D, a, 1, ap, 5);
    }
    gin b[1] = {F64(-1, 1, 3, 5, 7)};
    goblin_attr ad = A_INTS(OUTPUT_SIZE, 3, 2);
    check_op("adaptive_avg_pool2d", GOBLIN_OP_ADAPTIVE_AVG_POOL2D, b, 1, &ad, 1);
}

Test(autodiff, norms) {
    gin a[3] = {F64(-1, 1, 2, 3, 4), F64(0.5, 1.5, 4), F64(-1, 1, 4)};
    check_op("layer_norm affine", GOBLIN_OP_LAYER_NORM, a, 3, NULL, 0);
    goblin_attr nd2[2] = {A_INT(NORM_NDIM, 2), A_FLT(EPS, 1e-3)};
    gin b[1] = {F64(-1, 1, 2, 3, 4)};
    check_op("layer_norm 2 dims no affine", GOBLIN_OP_LAYER_NORM, b, 1, nd2, 2);
    gin c[2] = {F64(-1, 1, 2, 3, 4), F64(0.5, 1.5, 4)};
    check_op("rms_norm", GOBLIN_OP_RMS_NORM, c, 2, NULL, 0);
    gin d[2] = {F64(-1, 1, 2, 3, 4), F64(0.5, 1.5, 3, 4)};
    check_op("rms_norm 2 dims", GOBLIN_OP_RMS_NORM, d, 2, nd2, 1);
    for (int tr = 0; tr < 2; tr++) {
        gin e[5] = {F64(-1, 1, 3, 2, 2, 3), F64(0.5, 1.5, 2), F64(-1, 1, 2), F64(-0.2, 0.2, 2),
                    F64(0.5, 1.5, 2)};
        e[3].wrt = e[4].wrt = false;
        goblin_attr bt[2] = {A_INT(TRAINING, tr), A_FLT(EPS, 1e-3)};
        check_op(tr ? "batch_norm training" : "batch_norm eval", GOBLIN_OP_BATCH_NORM, e, 5, bt, 2);
    }
}

/* The fused LAYER_NORM_BACKWARD (d x, d weight) and GELU_BACKWARD that autodiff emits for
 * layer_norm and gelu, against finite differences on the reference and (where built) the
 * BLIS backend: with and without weight and bias, one and two normalized dims, rows longer
 * than the BLIS kernel's 16 (f64) lanes, and gelu's tails in both forms. */
static int n_fd_backends(goblin_backend_kind *be) {
    int n = 0;
    be[n++] = GOBLIN_BACKEND_REF;
    if (goblin_backend_available(GOBLIN_BACKEND_BLIS) == GOBLIN_OK) be[n++] = GOBLIN_BACKEND_BLIS;
    return n;
}

Test(autodiff, layer_norm_backward_fused) {
    goblin_backend_kind be[2];
    int nb = n_fd_backends(be);
    for (int b = 0; b < nb; b++) {
        g_fd_backend = be[b];
        gin a[3] = {F64(-1, 1, 2, 3, 4), F64(0.5, 1.5, 4), F64(-1, 1, 4)};
        check_op("layer_norm affine", GOBLIN_OP_LAYER_NORM, a, 3, NULL, 0);
        gin w[2] = {F64(-2, 3, 3, 37), F64(-1.5, 1.5, 37)};
        check_op("layer_norm weight only, 37 wide", GOBLIN_OP_LAYER_NORM, w, 2, NULL, 0);
        gin nx[2] = {F64(-2, 3, 2, 40), F64(-1.5, 1.5, 40)};
        nx[0].wrt = false; /* only d weight (index 1) */
        check_op("layer_norm d weight only", GOBLIN_OP_LAYER_NORM, nx, 2, NULL, 0);
        goblin_attr nd2[2] = {A_INT(NORM_NDIM, 2), A_FLT(EPS, 1e-3)};
        gin c[1] = {F64(-1, 1, 2, 3, 4)};
        check_op("layer_norm 2 dims no affine", GOBLIN_OP_LAYER_NORM, c, 1, nd2, 2);
        gin d[3] = {F64(-1, 2, 5, 3, 7), F64(0.5, 1.5, 3, 7), F64(-1, 1, 3, 7)};
        check_op("layer_norm 2 dims affine", GOBLIN_OP_LAYER_NORM, d, 3, nd2, 2);
        gin e[1] = {F64(-3, 3, 1, 70)};
        check_op("layer_norm one long row", GOBLIN_OP_LAYER_NORM, e, 1, NULL, 0);
    }
    g_fd_backend = GOBLIN_BACKEND_REF;
}

Test(autodiff, gelu_backward_fused) {
    goblin_backend_kind be[2];
    int nb = n_fd_backends(be);
    static const double ranges[3][2] = {{-3, 3}, {-9, -3}, {3, 9}};
    for (int b = 0; b < nb; b++) {
        g_fd_backend = be[b];
        for (int r = 0; r < 3; r++)
            for (int form = 0; form < 2; form++) {
                gin a[1] = {F64(ranges[r][0], ranges[r][1], 4, 5)};
                goblin_attr t = A_INT(APPROXIMATE, form ? GOBLIN_GELU_TANH : GOBLIN_GELU_ERF);
                check_op(form ? "gelu tanh" : "gelu erf", GOBLIN_OP_GELU, a, 1, &t, 1);
            }
    }
    g_fd_backend = GOBLIN_BACKEND_REF;
}

/* autodiff emits the fused ops (and not the composite erf / rsqrt chains) */
Test(autodiff, layer_norm_and_gelu_emit_fused_ops) {
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int32_t x, w, bias;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, (const int64_t[]){4, 6}, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, (const int64_t[]){6}, &w), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, (const int64_t[]){6}, &bias), GOBLIN_OK);
    int32_t ln = must_add(g, GOBLIN_OP_LAYER_NORM, (const int32_t[]){x, w, bias}, 3, NULL, 0);
    int32_t ge = must_add(g, GOBLIN_OP_GELU, &ln, 1, NULL, 0);
    int32_t loss = must_add(g, GOBLIN_OP_SUM, &ge, 1, NULL, 0);
    int32_t n0 = goblin_graph_node_count(g), grads[3];
    cr_assert_eq(goblin_graph_backward(g, loss, (const int32_t[]){x, w, bias}, 3, grads), GOBLIN_OK);
    int lnb = 0, geb = 0, other = 0;
    for (int32_t i = n0; i < goblin_graph_node_count(g); i++) {
        goblin_op op;
        goblin_graph_node(g, i, &op, NULL, NULL, NULL);
        lnb += op == GOBLIN_OP_LAYER_NORM_BACKWARD;
        geb += op == GOBLIN_OP_GELU_BACKWARD;
        other += op == GOBLIN_OP_ERF || op == GOBLIN_OP_RSQRT || op == GOBLIN_OP_MEAN;
    }
    cr_expect_eq(lnb, 2, "d x and d weight");
    cr_expect_eq(geb, 1);
    cr_expect_eq(other, 0);
    goblin_graph_free(g);
}

/* shapes, dtypes and attributes the fused ops reject; NaN and inf propagation */
Test(autodiff, layer_norm_and_gelu_backward_errors_and_nonfinite) {
    double go[6] = {1, 2, 3, 4, 5, 6}, xv[6] = {0.5, NAN, 1, 2, -1, 3}, wv[3] = {1, 2, 3};
    const int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s3[1] = {3}, s2[1] = {2};
    goblin_tensor in[3] = {gt_tensor(GOBLIN_DTYPE_F64, 2, s23, go), gt_tensor(GOBLIN_DTYPE_F64, 2, s23, xv),
                           gt_tensor(GOBLIN_DTYPE_F64, 1, s3, wv)};
    char msg[256];
    goblin_tensor out;
    goblin_attr nd3 = A_INT(NORM_NDIM, 3), idx2 = A_INT(INDEX, 2);
    cr_expect_eq(gt_build1(GOBLIN_OP_LAYER_NORM_BACKWARD, in, 3, &nd3, 1, NULL, msg, sizeof msg),
                 GOBLIN_ERANGE, "%s", msg);
    cr_expect_neq(gt_build1(GOBLIN_OP_LAYER_NORM_BACKWARD, in, 3, &idx2, 1, NULL, msg, sizeof msg),
                  GOBLIN_OK);
    cr_expect_neq(gt_build1(GOBLIN_OP_LAYER_NORM_BACKWARD, in, 1, NULL, 0, NULL, msg, sizeof msg),
                  GOBLIN_OK);
    goblin_tensor bad[3] = {gt_tensor(GOBLIN_DTYPE_F64, 2, s32, go), in[1], in[2]};
    cr_expect_eq(gt_build1(GOBLIN_OP_LAYER_NORM_BACKWARD, bad, 3, NULL, 0, NULL, msg, sizeof msg),
                 GOBLIN_ESHAPE, "%s", msg);
    cr_expect_eq(gt_build1(GOBLIN_OP_GELU_BACKWARD, bad, 2, NULL, 0, NULL, msg, sizeof msg), GOBLIN_ESHAPE,
                 "%s", msg);
    goblin_tensor badw[3] = {in[0], in[1], gt_tensor(GOBLIN_DTYPE_F64, 1, s2, wv)};
    cr_expect_eq(gt_build1(GOBLIN_OP_LAYER_NORM_BACKWARD, badw, 3, NULL, 0, NULL, msg, sizeof msg),
                 GOBLIN_ESHAPE, "%s", msg);
    float xf[6] = {0};
    goblin_tensor mixed[2] = {in[0], gt_tensor(GOBLIN_DTYPE_F32, 2, s23, xf)};
    cr_expect_eq(gt_build1(GOBLIN_OP_GELU_BACKWARD, mixed, 2, NULL, 0, NULL, msg, sizeof msg), GOBLIN_EDTYPE,
                 "%s", msg);
    int64_t gi[6] = {0};
    goblin_tensor ints[2] = {gt_tensor(GOBLIN_DTYPE_I64, 2, s23, gi), gt_tensor(GOBLIN_DTYPE_I64, 2, s23, gi)};
    cr_expect_eq(gt_build1(GOBLIN_OP_GELU_BACKWARD, ints, 2, NULL, 0, NULL, msg, sizeof msg), GOBLIN_EDTYPE,
                 "%s", msg);
    goblin_backend_kind be[2];
    int nb = n_fd_backends(be);
    for (int b = 0; b < nb; b++) {
        /* a NaN in row 0 makes that row's d x NaN; row 1 stays finite; d weight is NaN */
        cr_assert_eq(gt_run1(GOBLIN_OP_LAYER_NORM_BACKWARD, in, 3, NULL, 0, be[b], 1, &out, msg, sizeof msg),
                     GOBLIN_OK, "%s", msg);
        const double *o = out.data;
        for (int i = 0; i < 6; i++) cr_expect(i < 3 ? isnan(o[i]) : isfinite(o[i]), "element %d: %g", i, o[i]);
        goblin_buffer_free(out.data);
        goblin_attr i1 = A_INT(INDEX, 1);
        cr_assert_eq(gt_run1(GOBLIN_OP_LAYER_NORM_BACKWARD, in, 2, &i1, 1, be[b], 1, &out, msg, sizeof msg),
                     GOBLIN_OK, "%s", msg);
        cr_expect_eq(out.rank, 1);
        cr_expect_eq(out.shape[0], 3);
        for (int i = 0; i < 3; i++) cr_expect(isnan(((double *)out.data)[i]));
        goblin_buffer_free(out.data);
        /* gelu': NaN stays NaN, +-inf gives NaN (torch), 0 gives 1/2, far tails 0 and 1 */
        double gx[6] = {NAN, INFINITY, -INFINITY, 0, -40, 40}, gg[6] = {1, 1, 1, 2, 1, 3};
        goblin_tensor gin2[2] = {gt_tensor(GOBLIN_DTYPE_F64, 2, s23, gg), gt_tensor(GOBLIN_DTYPE_F64, 2, s23, gx)};
        for (int form = 0; form < 2; form++) {
            goblin_attr t = A_INT(APPROXIMATE, form);
            cr_assert_eq(gt_run1(GOBLIN_OP_GELU_BACKWARD, gin2, 2, &t, 1, be[b], 1, &out, msg, sizeof msg),
                         GOBLIN_OK, "%s", msg);
            const double *q = out.data;
            cr_expect(isnan(q[0]) && isnan(q[1]) && isnan(q[2]), "form %d: %g %g %g", form, q[0], q[1], q[2]);
            cr_expect_eq(q[3], 1.0, "form %d: 2 * gelu'(0) = %g", form, q[3]);
            cr_expect_eq(q[4], 0.0, "form %d: gelu'(-40) = %g", form, q[4]);
            cr_expect_eq(q[5], 3.0, "form %d: 3 gelu'(40) = %g", form, q[5]);
            goblin_buffer_free(out.data);
        }
    }
}

/* ---- relu: the fused RELU_BACKWARD ------------------------------------------------------
 * autodiff emits relu_backward(g, x) for relu; its value must be where(x > 0, g, 0), the
 * expression it replaced, to the bit: g's bits (NaN payloads, inf, -0) where x > 0, +0 where
 * x <= 0 (-0 included) or x is NaN. Checked against that expression evaluated as a graph
 * and against the rule applied to the raw bits by hand, on every backend, dtype and a
 * range of sizes (vector blocks, tails, threaded chunks), 1 and 3 threads. */

/* x > 0 from the raw bits: sign clear, not zero, not NaN */
static bool positive_bits(goblin_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case GOBLIN_DTYPE_F64: {
        uint64_t b;
        memcpy(&b, (const char *)p + 8 * i, 8);
        return !(b >> 63) && b != 0 && b <= 0x7ff0000000000000ULL;
    }
    case GOBLIN_DTYPE_F32: {
        uint32_t b;
        memcpy(&b, (const char *)p + 4 * i, 4);
        return !(b >> 31) && b != 0 && b <= 0x7f800000u;
    }
    default: {
        uint16_t b;
        memcpy(&b, (const char *)p + 2 * i, 2);
        uint16_t inf = dt == GOBLIN_DTYPE_F16 ? 0x7c00 : 0x7f80;
        return !(b >> 15) && b != 0 && b <= inf;
    }
    }
}

/* Fill @p n elements of dtype @p dt with a mix of finite values of both signs, +-0,
 * +-inf, NaNs of both signs and several payloads, subnormals (as raw bit patterns). */
static void fill_specials(goblin_dtype dt, void *p, int64_t n, uint64_t *seed) {
    for (int64_t i = 0; i < n; i++) {
        double r = gt_rand(seed), v = 4 * gt_rand(seed) - 2;
        int kind = r < 0.55 ? 0 : (int)((r - 0.55) / 0.45 * 9);
        uint64_t pay = (uint64_t)(gt_rand(seed) * 1000) + 1;
        size_t es = goblin_dtype_size(dt);
        char *d = (char *)p + (size_t)i * es;
        if (dt == GOBLIN_DTYPE_F64) {
            uint64_t b = 0;
            double x = kind == 1 ? 0.0 : kind == 2 ? -0.0 : kind == 3 ? INFINITY : kind == 4 ? -INFINITY
                                                                                                 : v;
            memcpy(&b, &x, 8);
            if (kind == 5) b = 0x7ff8000000000000ULL | pay;        /* quiet NaN, payload */
            if (kind == 6) b = 0xfff8000000000000ULL | pay;        /* negative NaN */
            if (kind == 7) b = 0x7ff0000000000000ULL | pay;        /* signalling pattern */
            if (kind == 8) b = pay | (gt_rand(seed) < 0.5 ? 1ULL << 63 : 0); /* subnormal */
            memcpy(d, &b, 8);
        } else if (dt == GOBLIN_DTYPE_F32) {
            uint32_t b = 0;
            float x = kind == 1 ? 0.0f : kind == 2 ? -0.0f : kind == 3 ? INFINITY : kind == 4 ? -INFINITY
                                                                                                : (float)v;
            memcpy(&b, &x, 4);
            if (kind == 5) b = 0x7fc00000u | (uint32_t)pay;
            if (kind == 6) b = 0xffc00000u | (uint32_t)pay;
            if (kind == 7) b = 0x7f800000u | (uint32_t)pay;
            if (kind == 8) b = (uint32_t)pay | (gt_rand(seed) < 0.5 ? 1u << 31 : 0);
            memcpy(d, &b, 4);
        } else {
            bool h = dt == GOBLIN_DTYPE_F16;
            uint16_t inf = h ? 0x7c00 : 0x7f80, q = h ? 0x0200 : 0x0040, pm = (uint16_t)(pay & (q - 1));
            /* a finite value: sign, then an exponent below inf's and a mantissa */
            uint16_t b = (uint16_t)((uint16_t)(gt_rand(seed) * (inf - 1)) + 1);
            if (v < 0) b |= 0x8000;
            if (kind == 1) b = 0;
            if (kind == 2) b = 0x8000;
            if (kind == 3) b = inf;
            if (kind == 4) b = (uint16_t)(inf | 0x8000);
            if (kind == 5) b = (uint16_t)(inf | q | pm);
            if (kind == 6) b = (uint16_t)(0x8000 | inf | q | pm);
            if (kind == 7) b = (uint16_t)(inf | (pm ? pm : 1));
            if (kind == 8) b = (uint16_t)((pm ? pm : 1) | (v < 0 ? 0x8000 : 0));
            memcpy(d, &b, 2);
        }
    }
}

/* where(x > 0, g, 0) as separate gt / where nodes (what autodiff emitted before) */
static goblin_err run_unfused_relu_bwd(const goblin_tensor *in, goblin_backend_kind be, int32_t threads,
                                       goblin_tensor *out) {
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int32_t gi, xi, zero, gt, w;
    cr_assert_eq(goblin_graph_input(g, in[0].dtype, in[0].rank, in[0].shape, &gi), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, in[1].dtype, in[1].rank, in[1].shape, &xi), GOBLIN_OK);
    int64_t dummy = 0;
    goblin_attr za[3] = {goblin_attr_ints(GOBLIN_ATTR_SHAPE, &dummy, 0), A_INT(DTYPE, in[1].dtype),
                         A_FLT(VALUE, 0.0)};
    zero = must_add(g, GOBLIN_OP_FULL, NULL, 0, za, 3);
    gt = must_add(g, GOBLIN_OP_GT, (const int32_t[]){xi, zero}, 2, NULL, 0);
    w = must_add(g, GOBLIN_OP_WHERE, (const int32_t[]){gt, gi, zero}, 3, NULL, 0);
    cr_assert_eq(goblin_graph_output(g, w), GOBLIN_OK);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = be;
    p.threads = threads;
    memset(out, 0, sizeof *out);
    goblin_err e = goblin_graph_eval(g, &p, in, 2, out, 1);
    goblin_graph_free(g);
    return e;
}

Test(autodiff, relu_backward_bits_match_unfused_where) {
    static const goblin_dtype dts[4] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64, GOBLIN_DTYPE_F16,
                                        GOBLIN_DTYPE_BF16};
    static const int64_t sizes[] = {1, 3, 7, 8, 15, 16, 17, 31, 33, 255, 1001, 40007};
    goblin_backend_kind be[2];
    int nb = n_fd_backends(be);
    uint64_t seed = 0x5eed12345ULL;
    char msg[256];
    for (int d = 0; d < 4; d++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            goblin_dtype dt = dts[d];
            int64_t n = sizes[s], shape[2] = {n % 2 ? 1 : 2, n % 2 ? n : n / 2};
            size_t es = goblin_dtype_size(dt);
            void *gv = malloc(es * (size_t)n), *xv = malloc(es * (size_t)n), *want = malloc(es * (size_t)n);
            fill_specials(dt, gv, n, &seed);
            fill_specials(dt, xv, n, &seed);
            for (int64_t i = 0; i < n; i++) {
                char *wi = (char *)want + i * (int64_t)es;
                if (positive_bits(dt, xv, i)) memcpy(wi, (char *)gv + i * (int64_t)es, es);
                else memset(wi, 0, es);
            }
            goblin_tensor in[2] = {gt_tensor(dt, 2, shape, gv), gt_tensor(dt, 2, shape, xv)};
            for (int b = 0; b < nb; b++)
                for (int32_t th = 1; th <= 3; th += 2) {
                    goblin_tensor fused, unf;
                    cr_assert_eq(gt_run1(GOBLIN_OP_RELU_BACKWARD, in, 2, NULL, 0, be[b], th, &fused, msg,
                                         sizeof msg),
                                 GOBLIN_OK, "%s", msg);
                    cr_assert_eq(run_unfused_relu_bwd(in, be[b], th, &unf), GOBLIN_OK);
                    cr_assert_eq(fused.dtype, dt);
                    cr_assert_eq(goblin_tensor_numel(&fused), n);
                    for (int64_t i = 0; i < n; i++) {
                        const char *f = (const char *)fused.data + i * (int64_t)es;
                        const char *u = (const char *)unf.data + i * (int64_t)es;
                        const char *h = (const char *)want + i * (int64_t)es;
                        cr_assert(memcmp(f, h, es) == 0 && memcmp(u, h, es) == 0,
                                  "%s n %lld backend %d threads %d: element %lld differs (fused vs hand "
                                  "%d, where vs hand %d)",
                                  goblin_dtype_name(dt), (long long)n, (int)be[b], (int)th, (long long)i,
                                  memcmp(f, h, es) != 0, memcmp(u, h, es) != 0);
                    }
                    goblin_buffer_free(fused.data);
                    goblin_buffer_free(unf.data);
                }
            free(gv);
            free(xv);
            free(want);
        }
}

/* relu inside a small graph: relu(x @ w + b) * tanh(x @ w) + relu(x) summed over a row, relu
 * used on both sides of its kink (finite differences stay away from it by the ranges) */
static int32_t build_relu_net(goblin_graph *g, const int32_t *ids, const fwd *f) {
    (void)f;
    int32_t h = must_add(g, GOBLIN_OP_MATMUL, (const int32_t[]){ids[0], ids[1]}, 2, NULL, 0);
    int32_t hb = must_add(g, GOBLIN_OP_ADD, (const int32_t[]){h, ids[2]}, 2, NULL, 0);
    int32_t r = must_add(g, GOBLIN_OP_RELU, &hb, 1, NULL, 0);
    int32_t t = must_add(g, GOBLIN_OP_TANH, &h, 1, NULL, 0);
    int32_t y = must_add(g, GOBLIN_OP_MUL, (const int32_t[]){r, t}, 2, NULL, 0);
    int32_t rx = must_add(g, GOBLIN_OP_RELU, &ids[0], 1, NULL, 0);
    goblin_attr ax[2] = {A_INTS(AXES, 1), A_INT(KEEPDIM, 1)};
    int32_t sx = must_add(g, GOBLIN_OP_SUM, &rx, 1, ax, 2);
    return must_add(g, GOBLIN_OP_ADD, (const int32_t[]){y, sx}, 2, NULL, 0);
}

/* double backward: gr = d sum(relu(x)^2) / d x = 2 relu(x) is itself differentiated, which
 * needs relu_backward's rule (linear in grad_out, zero in x) */
static int32_t build_relu_grad(goblin_graph *g, const int32_t *ids, const fwd *f) {
    (void)f;
    int32_t r = must_add(g, GOBLIN_OP_RELU, &ids[0], 1, NULL, 0);
    int32_t sq = must_add(g, GOBLIN_OP_MUL, (const int32_t[]){r, r}, 2, NULL, 0);
    int32_t l = must_add(g, GOBLIN_OP_SUM, &sq, 1, NULL, 0);
    int32_t gr = -1;
    cr_assert_eq(goblin_graph_backward(g, l, &ids[0], 1, &gr), GOBLIN_OK, "%s", goblin_graph_error(g));
    return gr;
}

Test(autodiff, relu_backward_finite_differences) {
    goblin_backend_kind be[2];
    int nb = n_fd_backends(be);
    for (int b = 0; b < nb; b++) {
        g_fd_backend = be[b];
        /* x in [0.1, 1] (relu(x) on its positive side), w of both signs: x @ w + b crosses 0 */
        gin a[3] = {F64(0.1, 1, 3, 5), F64(-1, 1, 5, 9), F64(-0.4, 0.4, 9)};
        fwd f = {.build = build_relu_net};
        fd_check("relu net", a, 3, &f);
        gin c[1] = {F64(-1, 1, 4, 9)};
        fwd f2 = {.build = build_relu_grad};
        fd_check("relu double backward", c, 1, &f2);
    }
    g_fd_backend = GOBLIN_BACKEND_REF;
}

Test(autodiff, relu_emits_fused_backward_and_errors) {
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int32_t x;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, (const int64_t[]){4, 6}, &x), GOBLIN_OK);
    int32_t r = must_add(g, GOBLIN_OP_RELU, &x, 1, NULL, 0);
    int32_t loss = must_add(g, GOBLIN_OP_SUM, &r, 1, NULL, 0);
    int32_t n0 = goblin_graph_node_count(g), gr;
    cr_assert_eq(goblin_graph_backward(g, loss, &x, 1, &gr), GOBLIN_OK);
    int rb = 0, other = 0;
    for (int32_t i = n0; i < goblin_graph_node_count(g); i++) {
        goblin_op op;
        goblin_graph_node(g, i, &op, NULL, NULL, NULL);
        rb += op == GOBLIN_OP_RELU_BACKWARD;
        other += op == GOBLIN_OP_GT || op == GOBLIN_OP_WHERE;
    }
    cr_expect_eq(rb, 1);
    cr_expect_eq(other, 0);
    goblin_graph_free(g);
    cr_expect(goblin_op_has_backward(GOBLIN_OP_RELU_BACKWARD));

    double go[6] = {1, 2, 3, 4, 5, 6}, xv[6] = {1, -1, 0, 2, -2, 3};
    const int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
    char msg[256];
    goblin_tensor bad[2] = {gt_tensor(GOBLIN_DTYPE_F64, 2, s32, go), gt_tensor(GOBLIN_DTYPE_F64, 2, s23, xv)};
    cr_expect_eq(gt_build1(GOBLIN_OP_RELU_BACKWARD, bad, 2, NULL, 0, NULL, msg, sizeof msg), GOBLIN_ESHAPE,
                 "%s", msg);
    float xf[6] = {0};
    goblin_tensor mixed[2] = {bad[1], gt_tensor(GOBLIN_DTYPE_F32, 2, s23, xf)};
    cr_expect_eq(gt_build1(GOBLIN_OP_RELU_BACKWARD, mixed, 2, NULL, 0, NULL, msg, sizeof msg), GOBLIN_EDTYPE,
                 "%s", msg);
    int64_t gi[6] = {0};
    goblin_tensor ints[2] = {gt_tensor(GOBLIN_DTYPE_I64, 2, s23, gi), gt_tensor(GOBLIN_DTYPE_I64, 2, s23, gi)};
    cr_expect_eq(gt_build1(GOBLIN_OP_RELU_BACKWARD, ints, 2, NULL, 0, NULL, msg, sizeof msg), GOBLIN_EDTYPE,
                 "%s", msg);
    cr_expect_neq(gt_build1(GOBLIN_OP_RELU_BACKWARD, bad, 1, NULL, 0, NULL, msg, sizeof msg), GOBLIN_OK);
    /* empty tensors */
    goblin_tensor out;
    double dummy[1];
    goblin_tensor e2[2] = {gt_tensor(GOBLIN_DTYPE_F64, 2, (const int64_t[]){0, 3}, dummy),
                           gt_tensor(GOBLIN_DTYPE_F64, 2, (const int64_t[]){0, 3}, dummy)};
    goblin_backend_kind be[2];
    int nb = n_fd_backends(be);
    for (int b = 0; b < nb; b++) {
        cr_assert_eq(gt_run1(GOBLIN_OP_RELU_BACKWARD, e2, 2, NULL, 0, be[b], 1, &out, msg, sizeof msg),
                     GOBLIN_OK, "%s", msg);
        cr_expect_eq(goblin_tensor_numel(&out), 0);
        goblin_buffer_free(out.data);
    }
}

Test(autodiff, losses) {
    int64_t t1[4] = {2, 0, -100, 1};
    for (int red = 0; red < 3; red++) {
        gin a[3] = {F64(-2, 0, 4, 3), {GOBLIN_DTYPE_I64, 1, {4}, t1, 0, 0, false}, F64(0.5, 2, 3)};
        a[2].wrt = false;
        goblin_attr at[2] = {A_INT(REDUCTION, red), A_INT(IGNORE_INDEX, -100)};
        check_op("nll_loss weighted", GOBLIN_OP_NLL_LOSS, a, 3, at, 2);
        check_op("nll_loss", GOBLIN_OP_NLL_LOSS, a, 2, at, 2);
        check_op("cross_entropy weighted", GOBLIN_OP_CROSS_ENTROPY, a, 3, at, 2);
        goblin_attr ls[3] = {A_INT(REDUCTION, red), A_INT(IGNORE_INDEX, -100),
                             A_FLT(LABEL_SMOOTHING, 0.2)};
        check_op("cross_entropy smoothing weighted", GOBLIN_OP_CROSS_ENTROPY, a, 3, ls, 3);
        check_op("cross_entropy smoothing", GOBLIN_OP_CROSS_ENTROPY, a, 2, ls, 3);
    }
    int32_t t2[6] = {0, 2, 1, 1, 0, 2};
    gin b[2] = {F64(-2, 2, 2, 3, 3), {GOBLIN_DTYPE_I32, 2, {2, 3}, t2, 0, 0, false}};
    check_op("cross_entropy [N, C, d]", GOBLIN_OP_CROSS_ENTROPY, b, 2, NULL, 0);
    int64_t t3 = 1;
    gin c[2] = {F64(-2, 2, 4), {GOBLIN_DTYPE_I64, 0, {0}, &t3, 0, 0, false}};
    check_op("cross_entropy [C]", GOBLIN_OP_CROSS_ENTROPY, c, 2, NULL, 0);
}

Test(autodiff, embedding) {
    int64_t idx[5] = {3, 0, 3, 3, 1};
    gin a[2] = {F64(-1, 1, 5, 3), {GOBLIN_DTYPE_I64, 2, {5, 1}, idx, 0, 0, false}};
    check_op("embedding repeated rows", GOBLIN_OP_EMBEDDING, a, 2, NULL, 0);
}

Test(autodiff, sdpa) {
    gin a[3] = {F64(-1, 1, 2, 3, 4), F64(-1, 1, 2, 5, 4), F64(-1, 1, 2, 5, 3)};
    check_op("sdpa", GOBLIN_OP_SDPA, a, 3, NULL, 0);
    /* batch broadcasting: q [2, 1, 3, 4], k [1, 2, 5, 4], v [5, 2] */
    gin b[3] = {F64(-1, 1, 2, 1, 3, 4), F64(-1, 1, 1, 2, 5, 4), F64(-1, 1, 5, 2)};
    goblin_attr ca[2] = {A_INT(CAUSAL, 1), A_FLT(SCALE, 0.8)};
    check_op("sdpa causal broadcast scale", GOBLIN_OP_SDPA, b, 3, ca, 2);
    gin c[4] = {F64(-1, 1, 2, 3, 4), F64(-1, 1, 2, 5, 4), F64(-1, 1, 2, 5, 3), F64(-1, 1, 3, 5)};
    c[3].wrt = false;
    check_op("sdpa float mask", GOBLIN_OP_SDPA, c, 4, NULL, 0);
    uint8_t m[5] = {1, 0, 1, 1, 0};
    gin d[4] = {F64(-1, 1, 2, 3, 4), F64(-1, 1, 2, 5, 4), F64(-1, 1, 2, 5, 3),
                {GOBLIN_DTYPE_BOOL, 2, {1, 5}, m, 0, 0, false}};
    check_op("sdpa bool mask", GOBLIN_OP_SDPA, d, 4, NULL, 0);
    /* a row with every key masked: zero weights, zero gradient (still finite) */
    uint8_t m0[15] = {0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1};
    gin e[4] = {F64(-1, 1, 3, 4), F64(-1, 1, 5, 4), F64(-1, 1, 5, 3),
                {GOBLIN_DTYPE_BOOL, 2, {3, 5}, m0, 0, 0, false}};
    check_op("sdpa fully masked row", GOBLIN_OP_SDPA, e, 4, NULL, 0);
}

/* ---- composites: accumulation over several uses ------------------------------- */

static int32_t build_mlp(goblin_graph *g, const int32_t *ids, const fwd *f) {
    (void)f;
    /* h = tanh(x @ w1 + b1); y = h @ w2 + x (x used twice) ; then log_softmax */
    int32_t in[2] = {ids[0], ids[1]};
    int32_t h = must_add(g, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
    in[0] = h, in[1] = ids[2];
    h = must_add(g, GOBLIN_OP_ADD, in, 2, NULL, 0);
    h = must_add(g, GOBLIN_OP_TANH, &h, 1, NULL, 0);
    in[0] = h, in[1] = ids[3];
    int32_t y = must_add(g, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
    in[0] = y, in[1] = ids[0];
    y = must_add(g, GOBLIN_OP_MUL, in, 2, NULL, 0);
    in[0] = y, in[1] = h;
    y = must_add(g, GOBLIN_OP_ADD, in, 2, NULL, 0); /* h used twice too */
    return must_add(g, GOBLIN_OP_LOG_SOFTMAX, &y, 1, NULL, 0);
}

Test(autodiff, composite_mlp_accumulates) {
    gin a[4] = {F64(-1, 1, 3, 4), F64(-1, 1, 4, 4), F64(-1, 1, 4), F64(-1, 1, 4, 4)};
    fwd f = {.build = build_mlp};
    fd_check("mlp", a, 4, &f);
}

/* ---- the fused ops directly: errors ------------------------------------------- */

Test(autodiff, fused_op_errors) {
    double go[4] = {1, 1, 1, 1};
    int64_t bad[2] = {0, 7};
    goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_F64, 2, (const int64_t[]){2, 2}, go),
                           gt_tensor(GOBLIN_DTYPE_I64, 1, (const int64_t[]){2}, bad)};
    goblin_attr sh = A_INTS(SHAPE, 3, 2);
    goblin_tensor out;
    char msg[256];
    goblin_err e = gt_run1(GOBLIN_OP_EMBEDDING_BACKWARD, in, 2, &sh, 1, GOBLIN_BACKEND_REF, 1, &out,
                           msg, sizeof msg);
    cr_expect_eq(e, GOBLIN_EINDEX, "%s", msg);
    goblin_attr sh2 = A_INTS(SHAPE, 3, 5);
    e = gt_build1(GOBLIN_OP_EMBEDDING_BACKWARD, in, 2, &sh2, 1, NULL, msg, sizeof msg);
    cr_expect_eq(e, GOBLIN_ESHAPE, "%s", msg);
    e = gt_build1(GOBLIN_OP_EMBEDDING_BACKWARD, in, 2, NULL, 0, NULL, msg, sizeof msg);
    cr_expect_neq(e, GOBLIN_OK);
    /* nll backward: a target outside [0, C) */
    double g0 = 1;
    int64_t tg[2] = {0, 5};
    goblin_tensor ln[2] = {gt_tensor(GOBLIN_DTYPE_F64, 0, NULL, &g0),
                           gt_tensor(GOBLIN_DTYPE_I64, 1, (const int64_t[]){2}, tg)};
    goblin_attr ls = A_INTS(SHAPE, 2, 3);
    e = gt_run1(GOBLIN_OP_NLL_LOSS_BACKWARD, ln, 2, &ls, 1, GOBLIN_BACKEND_REF, 1, &out, msg, sizeof msg);
    cr_expect_eq(e, GOBLIN_EINDEX, "%s", msg);
    /* an integer grad_out is rejected */
    int64_t gi[4] = {0};
    goblin_tensor ib[2] = {gt_tensor(GOBLIN_DTYPE_I64, 2, (const int64_t[]){2, 2}, gi), in[1]};
    e = gt_build1(GOBLIN_OP_EMBEDDING_BACKWARD, ib, 2, &sh, 1, NULL, msg, sizeof msg);
    cr_expect_eq(e, GOBLIN_EDTYPE, "%s", msg);
}

Test(autodiff, fused_ops_empty) {
    /* zero rows of indices: the embedding gradient is all zeros */
    goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_F64, 2, (const int64_t[]){0, 2}, NULL),
                           gt_tensor(GOBLIN_DTYPE_I64, 1, (const int64_t[]){0}, NULL)};
    double dummy[1];
    int64_t di[1];
    in[0].data = dummy;
    in[1].data = di;
    goblin_attr sh = A_INTS(SHAPE, 3, 2);
    goblin_tensor out;
    char msg[256];
    cr_assert_eq(gt_run1(GOBLIN_OP_EMBEDDING_BACKWARD, in, 2, &sh, 1, GOBLIN_BACKEND_REF, 1, &out, msg,
                         sizeof msg),
                 GOBLIN_OK, "%s", msg);
    for (int i = 0; i < 6; i++) cr_expect_eq(((double *)out.data)[i], 0.0);
    goblin_buffer_free(out.data);
}

/* ---- API errors ------------------------------------------------------------- */

Test(autodiff, api_errors_leave_graph_unchanged) {
    goblin_graph *g;
    goblin_graph_new(&g);
    int32_t x, i, y, l, gr[2];
    int64_t s[2] = {2, 3};
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, s, &x);
    goblin_graph_input(g, GOBLIN_DTYPE_I32, 2, s, &i);
    y = must_add(g, GOBLIN_OP_EXP, &x, 1, NULL, 0);
    cr_expect_eq(goblin_graph_backward(g, y, &x, 1, gr), GOBLIN_ESHAPE); /* not a scalar */
    l = must_add(g, GOBLIN_OP_SUM, &y, 1, NULL, 0);
    cr_expect_eq(goblin_graph_backward(g, l, &i, 1, gr), GOBLIN_EDTYPE); /* integer wrt */
    cr_expect_eq(goblin_graph_backward(g, l, (int32_t[]){99}, 1, gr), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_backward(NULL, l, &x, 1, gr), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_backward(g, l, &x, -1, gr), GOBLIN_EINVAL);
    /* an op without a rule on the path: ENOTSUP naming it, and nothing added */
    goblin_attr ax = A_INT(AXIS, 1);
    int32_t c = must_add(g, GOBLIN_OP_CUMSUM, &x, 1, &ax, 1);
    int32_t l2 = must_add(g, GOBLIN_OP_SUM, &c, 1, NULL, 0);
    int32_t in2[2] = {l2, l};
    int32_t l3 = must_add(g, GOBLIN_OP_ADD, in2, 2, NULL, 0);
    int32_t before = goblin_graph_node_count(g);
    cr_expect_eq(goblin_graph_backward(g, l3, &x, 1, gr), GOBLIN_ENOTSUP);
    cr_expect(strstr(goblin_graph_error(g), "cumsum"), "%s", goblin_graph_error(g));
    cr_expect_eq(goblin_graph_node_count(g), before);
    /* the graph still works: a wrt the loss does not depend on gets zeros */
    int32_t z;
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, s, &z);
    int32_t wrt[2] = {x, z};
    cr_assert_eq(goblin_graph_backward(g, l, wrt, 2, gr), GOBLIN_OK, "%s", goblin_graph_error(g));
    goblin_graph_output(g, gr[0]);
    goblin_graph_output(g, gr[1]);
    double xv[6] = {0, 1, 2, -1, 0.5, 3}, iv[6] = {0}, zv[6] = {1, 1, 1, 1, 1, 1};
    goblin_tensor tin[3] = {gt_tensor(GOBLIN_DTYPE_F64, 2, s, xv), gt_tensor(GOBLIN_DTYPE_I32, 2, s, iv),
                            gt_tensor(GOBLIN_DTYPE_F64, 2, s, zv)};
    goblin_tensor out[2];
    memset(out, 0, sizeof out);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_REF;
    cr_assert_eq(goblin_graph_eval(g, &p, tin, 3, out, 2), GOBLIN_OK);
    for (int k = 0; k < 6; k++) {
        cr_expect(fabs(((double *)out[0].data)[k] - exp(xv[k])) <= 1e-15 * exp(xv[k]));
        cr_expect_eq(((double *)out[1].data)[k], 0.0);
    }
    goblin_buffer_free(out[0].data);
    goblin_buffer_free(out[1].data);
    goblin_graph_free(g);
}

Test(autodiff, seeded_vjp_and_has_backward) {
    goblin_graph *g;
    goblin_graph_new(&g);
    int32_t x, sd, y, gr;
    int64_t s[1] = {3};
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 1, s, &x);
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 1, s, &sd);
    y = must_add(g, GOBLIN_OP_SQUARE, &x, 1, NULL, 0);
    cr_assert_eq(goblin_graph_backward_seeded(g, y, sd, &x, 1, &gr), GOBLIN_OK, "%s",
                 goblin_graph_error(g));
    goblin_graph_output(g, gr);
    double xv[3] = {1, 2, 3}, sv[3] = {1, 10, 100};
    goblin_tensor tin[2] = {gt_tensor(GOBLIN_DTYPE_F64, 1, s, xv), gt_tensor(GOBLIN_DTYPE_F64, 1, s, sv)};
    goblin_tensor out;
    memset(&out, 0, sizeof out);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_REF;
    cr_assert_eq(goblin_graph_eval(g, &p, tin, 2, &out, 1), GOBLIN_OK);
    for (int k = 0; k < 3; k++) cr_expect_eq(((double *)out.data)[k], 2 * xv[k] * sv[k]);
    goblin_buffer_free(out.data);
    cr_expect_eq(goblin_graph_backward_seeded(g, y, x + 100, &x, 1, &gr), GOBLIN_EINVAL);
    goblin_graph_free(g);
    cr_expect(goblin_op_has_backward(GOBLIN_OP_CONV2D));
    cr_expect(!goblin_op_has_backward(GOBLIN_OP_CUMSUM));
    cr_expect(goblin_op_has_backward(GOBLIN_OP_SDPA));
    cr_expect(!goblin_op_has_backward(GOBLIN_OP_PROD));
}

/* ---- allocation failure: every failing allocation gives ENOMEM and no change ---- */

Test(autodiff, allocation_failures) {
    gt_alloc_on();
    bool completed = false;
    for (int64_t saved = 0; saved < 5000 && !completed; saved++) {
        gt_allocs.asked = 0;
        gt_allocs.live = 0;
        gt_allocs.fail_at = -1; /* build the forward graph without failures */
        goblin_graph *g = NULL;
        cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
        int32_t x, w, y, l, gr[2];
        int64_t s[2] = {2, 3}, sw[2] = {3, 2};
        goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, s, &x);
        goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sw, &w);
        int32_t in[2] = {x, w};
        y = must_add(g, GOBLIN_OP_MATMUL, in, 2, NULL, 0);
        y = must_add(g, GOBLIN_OP_LOG_SOFTMAX, &y, 1, NULL, 0);
        l = must_add(g, GOBLIN_OP_MEAN, &y, 1, NULL, 0);
        int32_t before = goblin_graph_node_count(g);
        gt_allocs.fail_at = gt_allocs.asked + (saved);
        goblin_err e = goblin_graph_backward(g, l, in, 2, gr);
        if (e == GOBLIN_OK) {
            completed = true;
        } else {
            cr_assert_eq(e, GOBLIN_ENOMEM, "failing allocation %lld: %s", (long long)saved,
                         goblin_graph_error(g));
            cr_assert_eq(goblin_graph_node_count(g), before);
        }
        gt_allocs.fail_at = -1;
        goblin_graph_free(g);
        cr_assert_eq(gt_allocs.live, 0, "leak after failing allocation %lld", (long long)saved);
    }
    gt_alloc_off();
    cr_assert(completed);
}
