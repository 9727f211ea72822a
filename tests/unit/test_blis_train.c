/* tests/unit/test_blis_train.c - the BLIS training kernels (backends/blis/blis_conv.c,
 * blis_attention.c: conv2d backward input/weight, scaled dot-product attention forward/backward) against
 * the reference backend (f64 loops, an independent implementation) on random shapes
 * with odd sizes, strides, padding, dilation, groups, masks and empty tensors, in f32
 * and f64; and BLIS results that are the same bits for 1, 2 and 3 threads. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include "backends/kernel_util.h"
#include "testutil.h"

#define A_INT(k, v) goblin_attr_int(GOBLIN_ATTR_##k, (v))
#define A_INTS(k, a, n) goblin_attr_ints(GOBLIN_ATTR_##k, (a), (n))

static bool have_blis(void) { return goblin_backend_available(GOBLIN_BACKEND_BLIS) == GOBLIN_OK; }

static goblin_tensor rand_tensor(goblin_dtype dt, int32_t rank, const int64_t *shape, uint64_t *seed) {
    int64_t n = 1;
    for (int32_t d = 0; d < rank; d++) n *= shape[d];
    size_t es = goblin_dtype_size(dt);
    void *buf = malloc((size_t)(n > 0 ? n : 1) * es);
    for (int64_t i = 0; i < n; i++) {
        double v = 2 * gt_rand(seed) - 1;
        if (dt == GOBLIN_DTYPE_F64) ((double *)buf)[i] = v;
        else ((float *)buf)[i] = (float)v;
    }
    return gt_tensor(dt, rank, shape, buf);
}

static double val(const goblin_tensor *t, int64_t i) {
    return t->dtype == GOBLIN_DTYPE_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}

static goblin_tensor run(goblin_backend_kind be, int32_t threads, goblin_op op, const goblin_tensor *in,
                         int32_t n_in, const goblin_attr *at, int32_t na) {
    goblin_tensor out;
    char msg[300];
    goblin_err e = gt_run1(op, in, n_in, at, na, be, threads, &out, msg, sizeof msg);
    cr_assert_eq(e, GOBLIN_OK, "%s on %s: %s", goblin_op_name(op), goblin_backend_name(be), msg);
    return out;
}

/* BLIS (1 thread) within k^2-scaled unit roundoffs of the reference (inputs in [-1, 1],
 * so sum |terms| <= k), and the same bits on 2 and 3 threads. */
static void compare(goblin_op op, const goblin_tensor *in, int32_t n_in, const goblin_attr *at, int32_t na,
                    double k, const char *what) {
    goblin_tensor ref = run(GOBLIN_BACKEND_REF, 1, op, in, n_in, at, na);
    goblin_tensor b1 = run(GOBLIN_BACKEND_BLIS, 1, op, in, n_in, at, na);
    int64_t n = goblin__numel(&ref);
    cr_assert_eq(goblin__numel(&b1), n);
    double u = ref.dtype == GOBLIN_DTYPE_F64 ? 0x1p-53 : 0x1p-24;
    double tol = 8 * (k + 2) * (k + 2) * u;
    for (int64_t i = 0; i < n; i++) {
        double r = val(&ref, i), b = val(&b1, i);
        cr_assert(gt_close(b, r, 0, tol), "%s %s: element %lld: blis %.17g ref %.17g (tol %.3g)",
                  goblin_op_name(op), what, (long long)i, b, r, tol);
    }
    for (int32_t th = 2; th <= 3; th++) {
        goblin_tensor bt = run(GOBLIN_BACKEND_BLIS, th, op, in, n_in, at, na);
        cr_assert(n == 0 || memcmp(bt.data, b1.data, (size_t)n * goblin_dtype_size(ref.dtype)) == 0,
                  "%s %s: %d threads differ from 1", goblin_op_name(op), what, th);
        goblin_buffer_free(bt.data);
    }
    goblin_buffer_free(ref.data);
    goblin_buffer_free(b1.data);
}

typedef struct conv_case {
    int64_t n, c, h, w, o, kh, kw, s, p, d, groups;
} conv_case;

static const conv_case CONV_CASES[] = {
    {3, 3, 9, 7, 5, 3, 3, 1, 1, 1, 1},  {2, 4, 8, 8, 6, 3, 3, 2, 1, 1, 2},  {1, 2, 5, 6, 3, 1, 1, 1, 0, 1, 1},
    {4, 3, 7, 5, 4, 2, 3, 1, 0, 2, 1},  {2, 6, 11, 9, 6, 3, 3, 3, 2, 1, 3}, {0, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1},
    {2, 3, 4, 4, 0, 3, 3, 1, 1, 1, 1},  {5, 16, 8, 8, 32, 3, 3, 1, 1, 1, 1}, {2, 1, 3, 2, 2, 3, 2, 1, 0, 1, 1},
    {2, 2, 3, 3, 2, 3, 3, 1, 3, 1, 1},
    /* images share a gemm in blocks of 3 (the last one partial); same-width im2col/col2im */
    {13, 16, 24, 24, 8, 3, 3, 1, 1, 1, 1}, {2, 3, 6, 5, 4, 3, 3, 1, 2, 2, 1}, {3, 2, 5, 9, 3, 5, 5, 1, 2, 1, 1},
    {5, 4, 6, 6, 6, 3, 3, 1, 1, 1, 2},
};

static void conv_case_run(const conv_case *c, goblin_dtype dt, uint64_t seed) {
    int64_t oh = (c->h + 2 * c->p - c->d * (c->kh - 1) - 1) / c->s + 1;
    int64_t ow = (c->w + 2 * c->p - c->d * (c->kw - 1) - 1) / c->s + 1;
    if (oh < 0) oh = 0;
    if (ow < 0) ow = 0;
    int64_t xs[4] = {c->n, c->c, c->h, c->w}, ws[4] = {c->o, c->c / c->groups, c->kh, c->kw};
    int64_t gs[4] = {c->n, c->o, oh, ow};
    int64_t st[2] = {c->s, c->s}, pd[2] = {c->p, c->p}, dl[2] = {c->d, c->d};
    goblin_tensor x = rand_tensor(dt, 4, xs, &seed), w = rand_tensor(dt, 4, ws, &seed);
    goblin_tensor g = rand_tensor(dt, 4, gs, &seed);
    char what[96];
    snprintf(what, sizeof what, "%s case n%lld c%lld o%lld k%lldx%lld s%lld p%lld d%lld g%lld",
             goblin_dtype_name(dt), (long long)c->n, (long long)c->c, (long long)c->o, (long long)c->kh,
             (long long)c->kw, (long long)c->s, (long long)c->p, (long long)c->d, (long long)c->groups);
    goblin_attr at[5] = {A_INTS(SHAPE, xs, 4), A_INTS(STRIDE, st, 2), A_INTS(PADDING, pd, 2),
                         A_INTS(DILATION, dl, 2), A_INT(GROUPS, c->groups)};
    goblin_tensor in[2] = {g, w};
    compare(GOBLIN_OP_CONV2D_BACKWARD_INPUT, in, 2, at, 5, (double)(c->o / (c->groups ? c->groups : 1)) * c->kh * c->kw, what);
    at[0] = A_INTS(SHAPE, ws, 4);
    in[1] = x;
    compare(GOBLIN_OP_CONV2D_BACKWARD_WEIGHT, in, 2, at, 5, (double)(c->n * oh * ow), what);
    free(x.data);
    free(w.data);
    free(g.data);
}

Test(blis_train, conv2d_backward_vs_reference) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (size_t i = 0; i < sizeof CONV_CASES / sizeof CONV_CASES[0]; i++)
        for (int d = 0; d < 2; d++) conv_case_run(&CONV_CASES[i], dts[d], 1000 + i * 7 + (uint64_t)d);
}

typedef struct sdpa_case {
    int64_t b, h, L, S, E, Ev;
    int causal, mask; /* mask: 0 none, 1 float [L, S], 2 bool [b, 1, L, S] */
} sdpa_case;

static const sdpa_case SDPA_CASES[] = {
    {2, 3, 5, 7, 4, 3, 0, 0}, {3, 2, 9, 9, 8, 8, 1, 0}, {1, 1, 17, 13, 5, 6, 0, 1}, {2, 2, 6, 4, 3, 5, 0, 2},
    {4, 4, 32, 32, 8, 8, 1, 0}, {2, 1, 3, 0, 4, 2, 0, 0}, {0, 2, 3, 3, 2, 2, 0, 0}, {2, 2, 4, 4, 0, 3, 0, 0},
    {1, 2, 7, 5, 3, 0, 1, 0}, {1, 1, 1, 1, 1, 1, 0, 0},
    /* small heads (direct products): masks, odd widths; then past the
     * small-head limits (L or S > 128, E or Ev > 64): the BLIS products */
    {2, 2, 11, 11, 9, 10, 0, 2}, {3, 1, 33, 40, 16, 17, 0, 1}, {1, 2, 130, 129, 5, 6, 1, 0},
    {1, 1, 9, 7, 65, 3, 0, 1}, {1, 1, 6, 140, 4, 66, 0, 0},
};

static void sdpa_case_run(const sdpa_case *c, goblin_dtype dt, uint64_t seed) {
    int64_t qs[4] = {c->b, c->h, c->L, c->E}, ks[4] = {c->b, c->h, c->S, c->E};
    int64_t vs[4] = {c->b, c->h, c->S, c->Ev}, os[4] = {c->b, c->h, c->L, c->Ev};
    goblin_tensor q = rand_tensor(dt, 4, qs, &seed), k = rand_tensor(dt, 4, ks, &seed);
    goblin_tensor v = rand_tensor(dt, 4, vs, &seed), go = rand_tensor(dt, 4, os, &seed);
    goblin_tensor m;
    memset(&m, 0, sizeof m);
    uint8_t *mb = NULL;
    if (c->mask == 1) {
        m = rand_tensor(dt, 2, (int64_t[]){c->L, c->S}, &seed);
    } else if (c->mask == 2) {
        int64_t ms[4] = {c->b, 1, c->L, c->S};
        mb = malloc((size_t)(c->b * c->L * c->S + 1));
        for (int64_t i = 0; i < c->b * c->L * c->S; i++) mb[i] = gt_rand(&seed) < 0.7;
        m = gt_tensor(GOBLIN_DTYPE_BOOL, 4, ms, mb);
    }
    char what[96];
    snprintf(what, sizeof what, "%s case b%lld h%lld L%lld S%lld E%lld Ev%lld causal %d mask %d",
             goblin_dtype_name(dt), (long long)c->b, (long long)c->h, (long long)c->L, (long long)c->S,
             (long long)c->E, (long long)c->Ev, c->causal, c->mask);
    goblin_attr at[2] = {A_INT(CAUSAL, c->causal), A_INT(INDEX, 0)};
    goblin_tensor in[5] = {q, k, v, m, m};
    int32_t nm = c->mask ? 1 : 0;
    double kf = (double)(c->E + c->S + c->Ev + 6);
    compare(GOBLIN_OP_SDPA, in, 3 + nm, at, 1, kf, what);
    goblin_tensor bin[5] = {go, q, k, v, m};
    for (int64_t which = 0; which < 3; which++) {
        at[1] = A_INT(INDEX, which);
        compare(GOBLIN_OP_SDPA_BACKWARD, bin, 4 + nm, at, 2, kf + (double)c->L, what);
    }
    free(q.data);
    free(k.data);
    free(v.data);
    free(go.data);
    if (c->mask == 1) free(m.data);
    free(mb);
}

Test(blis_train, sdpa_forward_backward_vs_reference) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (size_t i = 0; i < sizeof SDPA_CASES / sizeof SDPA_CASES[0]; i++)
        for (int d = 0; d < 2; d++) sdpa_case_run(&SDPA_CASES[i], dts[d], 77 + i * 5 + (uint64_t)d);
}

/* Backward nodes that share work within a run (blis_train*.c's run memos) must give the
 * bits of each node alone. Graph inputs t[0 .. nt); node q is @p op on inputs t[ins[q][j]]
 * (j < nin) with attributes at[q]; the graph runs twice on BLIS, and before the second run
 * the values of t[mutate] change in place (same buffer: a run must not take the previous
 * run's kept results). Each output is compared bit for bit with the node evaluated alone. */
static void one_run_matches_alone(goblin_dtype dt, goblin_tensor *t, int32_t nt, goblin_op op, int32_t nodes,
                                  const int32_t (*ins)[5], int32_t nin, const goblin_attr (*at)[3], int32_t nat,
                                  int32_t mutate, const char *what) {
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int32_t id[8];
    for (int32_t i = 0; i < nt; i++) cr_assert_eq(goblin_graph_input(g, dt, t[i].rank, t[i].shape, &id[i]), GOBLIN_OK);
    for (int32_t q = 0; q < nodes; q++) {
        int32_t gi[5], o;
        for (int32_t j = 0; j < nin; j++) gi[j] = id[ins[q][j]];
        cr_assert_eq(goblin_graph_add(g, op, gi, nin, at[q], nat, &o), GOBLIN_OK, "%s", goblin_graph_error(g));
        cr_assert_eq(goblin_graph_output(g, o), GOBLIN_OK);
    }
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_BLIS;
    p.threads = 2;
    for (int rep = 0; rep < 2; rep++) {
        goblin_tensor outs[8];
        memset(outs, 0, sizeof outs);
        cr_assert_eq(goblin_graph_eval(g, &p, t, nt, outs, nodes), GOBLIN_OK);
        for (int32_t q = 0; q < nodes; q++) {
            goblin_tensor bin[5];
            for (int32_t j = 0; j < nin; j++) bin[j] = t[ins[q][j]];
            goblin_tensor alone = run(GOBLIN_BACKEND_BLIS, 2, op, bin, nin, at[q], nat);
            int64_t n = goblin__numel(&alone);
            cr_assert_eq(goblin__numel(&outs[q]), n);
            cr_assert(memcmp(outs[q].data, alone.data, (size_t)n * goblin_dtype_size(dt)) == 0,
                      "%s %s: node %d (run %d) differs from the node alone", goblin_dtype_name(dt), what, (int)q, rep);
            goblin_buffer_free(alone.data);
            goblin_buffer_free(outs[q].data);
        }
        for (int64_t i = 0; i < goblin__numel(&t[mutate]); i++) {
            if (dt == GOBLIN_DTYPE_F64) ((double *)t[mutate].data)[i] *= 1.5;
            else ((float *)t[mutate].data)[i] *= 1.5f;
        }
    }
    goblin_graph_free(g);
}

/* The three backward nodes of one attention share the softmax weights within a run
 * (blis_attention.c's sd_memo): interleaved with a second attention's nodes (the kept weights
 * change hands), A's first and last (a stale reuse shows at once). Small heads and
 * BLIS-sized ones, a causal one, a masked one, a NaN row. */
Test(blis_train, sdpa_backward_nodes_in_one_run_match_each_alone) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const sdpa_case cases[] = {{2, 3, 9, 9, 8, 8, 1, 0}, {1, 2, 6, 5, 4, 3, 0, 1}, {1, 1, 130, 129, 5, 6, 1, 0}};
    static const int order[6][2] = {{0, 2}, {1, 0}, {0, 0}, {1, 2}, {1, 1}, {0, 1}}; /* (attention, which) */
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int d = 0; d < 2; d++) {
            const sdpa_case *c = &cases[ci];
            goblin_dtype dt = dts[d];
            uint64_t seed = 300 + ci * 2 + (uint64_t)d;
            int64_t qs[4] = {c->b, c->h, c->L, c->E}, ks[4] = {c->b, c->h, c->S, c->E};
            int64_t vs[4] = {c->b, c->h, c->S, c->Ev}, os[4] = {c->b, c->h, c->L, c->Ev};
            /* attention A: go, q, k, v (+ mask); attention B: its own go and q, A's k and v */
            goblin_tensor t[7];
            t[0] = rand_tensor(dt, 4, os, &seed), t[1] = rand_tensor(dt, 4, qs, &seed);
            t[2] = rand_tensor(dt, 4, ks, &seed), t[3] = rand_tensor(dt, 4, vs, &seed);
            t[4] = rand_tensor(dt, 4, os, &seed), t[5] = rand_tensor(dt, 4, qs, &seed);
            int nm = c->mask ? 1 : 0;
            if (nm) t[6] = rand_tensor(dt, 2, (int64_t[]){c->L, c->S}, &seed);
            if (dt == GOBLIN_DTYPE_F32) ((float *)t[5].data)[1] = NAN; /* a NaN row in B */
            else ((double *)t[5].data)[1] = NAN;
            int32_t ins[6][5];
            goblin_attr at[6][3];
            for (int q = 0; q < 6; q++) {
                int B = order[q][0];
                int32_t row[5] = {B ? 4 : 0, B ? 5 : 1, 2, 3, 6};
                memcpy(ins[q], row, sizeof row);
                at[q][0] = goblin_attr_int(GOBLIN_ATTR_CAUSAL, c->causal);
                at[q][1] = goblin_attr_int(GOBLIN_ATTR_INDEX, order[q][1]);
            }
            char what[64];
            snprintf(what, sizeof what, "attention case %zu", ci);
            one_run_matches_alone(dt, t, 6 + nm, GOBLIN_OP_SDPA_BACKWARD, 6, (const int32_t(*)[5])ins, 4 + nm,
                                  (const goblin_attr(*)[3])at, 2, 1, what);
            for (int i = 0; i < 6 + nm; i++) free(t[i].data);
        }
}

/* A NaN logit makes its row NaN (dq) or the whole batch item NaN (dk, dv), as the reference. */
Test(blis_train, sdpa_nan_rows_follow_the_reference) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    uint64_t seed = 5;
    int64_t s4[4] = {2, 1, 4, 3};
    goblin_tensor q = rand_tensor(GOBLIN_DTYPE_F64, 4, s4, &seed), k = rand_tensor(GOBLIN_DTYPE_F64, 4, s4, &seed);
    goblin_tensor v = rand_tensor(GOBLIN_DTYPE_F64, 4, s4, &seed), go = rand_tensor(GOBLIN_DTYPE_F64, 4, s4, &seed);
    ((double *)q.data)[4] = NAN; /* batch 0, row 1 */
    goblin_tensor in[4] = {go, q, k, v};
    for (int64_t which = 0; which < 3; which++) {
        goblin_attr at[1] = {A_INT(INDEX, which)};
        goblin_tensor r = run(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_SDPA_BACKWARD, in, 4, at, 1);
        goblin_tensor b = run(GOBLIN_BACKEND_BLIS, 2, GOBLIN_OP_SDPA_BACKWARD, in, 4, at, 1);
        for (int64_t i = 0; i < goblin__numel(&r); i++)
            cr_assert(gt_close(val(&b, i), val(&r, i), 1e-12, 1e-12), "which %lld element %lld: %g vs %g",
                      (long long)which, (long long)i, val(&b, i), val(&r, i));
        goblin_buffer_free(r.data);
        goblin_buffer_free(b.data);
    }
    goblin_tensor fin[3] = {q, k, v};
    goblin_tensor r = run(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_SDPA, fin, 3, NULL, 0);
    goblin_tensor b = run(GOBLIN_BACKEND_BLIS, 1, GOBLIN_OP_SDPA, fin, 3, NULL, 0);
    for (int64_t i = 0; i < goblin__numel(&r); i++)
        cr_assert(gt_close(val(&b, i), val(&r, i), 1e-12, 1e-12), "forward element %lld", (long long)i);
    goblin_buffer_free(r.data);
    goblin_buffer_free(b.data);
    free(q.data);
    free(k.data);
    free(v.data);
    free(go.data);
}

/* ---- blis_norm.c, blis_pool.c, blis_copy.c: batch norm, max pooling, embedding backward, copies ---------------
 * Max pooling, embedding backward and the copies do the reference's f64 arithmetic in
 * the reference's order, so they must give its exact bits (and the same bits on 1, 2
 * and 3 threads); batch norm is checked within its contract (compare_bn below). */

static void compare_exact(goblin_op op, const goblin_tensor *in, int32_t n_in, const goblin_attr *at, int32_t na,
                          const char *what) {
    goblin_tensor ref = run(GOBLIN_BACKEND_REF, 1, op, in, n_in, at, na);
    int64_t n = goblin__numel(&ref);
    size_t bytes = (size_t)n * goblin_dtype_size(ref.dtype);
    for (int32_t th = 1; th <= 3; th++) {
        goblin_tensor b = run(GOBLIN_BACKEND_BLIS, th, op, in, n_in, at, na);
        cr_assert_eq(goblin__numel(&b), n, "%s %s: size", goblin_op_name(op), what);
        for (int32_t d = 0; d < ref.rank; d++) cr_assert_eq(b.shape[d], ref.shape[d]);
        cr_assert(n == 0 || memcmp(b.data, ref.data, bytes) == 0, "%s %s: %d thread(s) differ from the reference",
                  goblin_op_name(op), what, th);
        goblin_buffer_free(b.data);
    }
    goblin_buffer_free(ref.data);
}

/* Batch norm sums in fixed lanes (not the reference's order), so it is checked against
 * the reference within the op's contract (goblin_op_contract, k = values per channel)
 * on a scale derived here from the inputs: forward (|x| + mean|x|) rstd |w| + |b|;
 * backward 1 + the sum of the magnitudes of the terms of each output (d x:
 * |w| rstd / M (M |dy| + sum|dy| + |xhat| sum|dy xhat|); d weight sum|dy xhat|; d bias
 * sum|dy|). BLIS results on 2 and 3 threads must be the 1-thread bits. */
static void compare_bn(goblin_op op, const goblin_tensor *in, const goblin_attr *at, int32_t na, const char *what) {
    const goblin_tensor *x = &in[op == GOBLIN_OP_BATCH_NORM ? 0 : 1];
    int64_t n = x->shape[0], c = x->shape[1], sp = 1;
    for (int32_t d = 2; d < x->rank; d++) sp *= x->shape[d];
    bool training = at[0].v.i != 0;
    int64_t which = op == GOBLIN_OP_BATCH_NORM ? -1 : at[2].v.i;
    goblin_tensor ref = run(GOBLIN_BACKEND_REF, 1, op, in, 5, at, na);
    goblin_tensor b1 = run(GOBLIN_BACKEND_BLIS, 1, op, in, 5, at, na);
    int64_t total = goblin__numel(&ref);
    cr_assert_eq(goblin__numel(&b1), total, "%s %s: size", goblin_op_name(op), what);
    double rel, abs_tol;
    cr_assert_eq(goblin_op_contract(op, ref.dtype, n * sp, &rel, &abs_tol), GOBLIN_OK);
    cr_assert(rel > 0 && rel < 0.01, "%s: contract rel %g", goblin_op_name(op), rel);
    for (int64_t ch = 0; ch < c; ch++) {
        double m = (double)(n * sp), mean, var, mabs = 0, sady = 0, sadyx = 0;
        if (training) {
            double s = 0, v = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t q = 0; q < sp; q++) s += val(x, (i * c + ch) * sp + q);
            mean = s / m;
            for (int64_t i = 0; i < n; i++)
                for (int64_t q = 0; q < sp; q++) {
                    double d = val(x, (i * c + ch) * sp + q) - mean;
                    v += d * d;
                }
            var = v / m;
        } else {
            mean = val(&in[3], ch);
            var = val(&in[4], ch);
        }
        double eps = at[1].v.f, rstd = 1.0 / sqrt(var + eps);
        double w = val(&in[op == GOBLIN_OP_BATCH_NORM ? 1 : 2], ch);
        for (int64_t i = 0; i < n; i++)
            for (int64_t q = 0; q < sp; q++) {
                int64_t o = (i * c + ch) * sp + q;
                mabs += fabs(val(x, o)) / m;
                if (which >= 0) {
                    sady += fabs(val(&in[0], o));
                    sadyx += fabs(val(&in[0], o) * (val(x, o) - mean) * rstd);
                }
            }
        if (!training) mabs = fabs(mean);
        if (which == 1 || which == 2) {
            double scale = 1 + (which == 1 ? sadyx : sady);
            double r = val(&ref, ch), b = val(&b1, ch);
            cr_assert(gt_close(b, r, 0, abs_tol + rel * scale), "%s %s index %lld channel %lld: blis %.17g ref %.17g",
                      goblin_op_name(op), what, (long long)which, (long long)ch, b, r);
            continue;
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t q = 0; q < sp; q++) {
                int64_t o = (i * c + ch) * sp + q;
                double xv = val(x, o), scale;
                if (which < 0) {
                    scale = (fabs(xv) + mabs) * rstd * fabs(w) + fabs(val(&in[2], ch));
                } else if (training) {
                    double xh = fabs((xv - mean) * rstd);
                    scale = 1 + fabs(w) * rstd / m * (m * fabs(val(&in[0], o)) + sady + xh * sadyx);
                } else {
                    scale = 1 + fabs(val(&in[0], o) * w * rstd);
                }
                double r = val(&ref, o), b = val(&b1, o);
                cr_assert(gt_close(b, r, 0, abs_tol + rel * scale), "%s %s index %lld element %lld: blis %.17g ref %.17g",
                          goblin_op_name(op), what, (long long)which, (long long)o, b, r);
            }
    }
    for (int32_t th = 2; th <= 3; th++) {
        goblin_tensor bt = run(GOBLIN_BACKEND_BLIS, th, op, in, 5, at, na);
        cr_assert(total == 0 || memcmp(bt.data, b1.data, (size_t)total * goblin_dtype_size(ref.dtype)) == 0,
                  "%s %s: %d threads differ from 1", goblin_op_name(op), what, th);
        goblin_buffer_free(bt.data);
    }
    goblin_buffer_free(ref.data);
    goblin_buffer_free(b1.data);
}

static void bn_case(goblin_dtype dt, int32_t rank, const int64_t *xs, uint64_t seed, double offset) {
    goblin_tensor x = rand_tensor(dt, rank, xs, &seed), go = rand_tensor(dt, rank, xs, &seed);
    goblin_tensor w = rand_tensor(dt, 1, &xs[1], &seed), b = rand_tensor(dt, 1, &xs[1], &seed);
    goblin_tensor rm = rand_tensor(dt, 1, &xs[1], &seed), rv = rand_tensor(dt, 1, &xs[1], &seed);
    for (int64_t i = 0; i < xs[1]; i++) { /* a positive running variance */
        if (dt == GOBLIN_DTYPE_F64) ((double *)rv.data)[i] = fabs(((double *)rv.data)[i]) + 0.1;
        else ((float *)rv.data)[i] = fabsf(((float *)rv.data)[i]) + 0.1f;
    }
    int64_t nx = goblin__numel(&x);
    for (int64_t i = 0; i < nx; i++) { /* a mean far from 0 tests the two-pass variance */
        if (dt == GOBLIN_DTYPE_F64) ((double *)x.data)[i] += offset;
        else ((float *)x.data)[i] += (float)offset;
    }
    char what[96];
    snprintf(what, sizeof what, "%s rank %d shape [%lld, %lld, ...] offset %g", goblin_dtype_name(dt), rank,
             (long long)xs[0], (long long)xs[1], offset);
    for (int64_t tr = 0; tr < 2; tr++) {
        goblin_attr at[3] = {A_INT(TRAINING, tr), goblin_attr_float(GOBLIN_ATTR_EPS, 1e-3), A_INT(INDEX, 0)};
        goblin_tensor fin[5] = {x, w, b, rm, rv};
        compare_bn(GOBLIN_OP_BATCH_NORM, fin, at, 2, what);
        goblin_tensor bin[5] = {go, x, w, rm, rv};
        for (int64_t which = 0; which < 3; which++) {
            at[2] = A_INT(INDEX, which);
            compare_bn(GOBLIN_OP_BATCH_NORM_BACKWARD, bin, at, 3, what);
        }
    }
    free(x.data), free(go.data), free(w.data), free(b.data), free(rm.data), free(rv.data);
}

Test(blis_train2, batch_norm_forward_backward_within_contract) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const int64_t s0[4] = {3, 5, 7, 6}, s1[4] = {8, 16, 16, 17}, s2[3] = {0, 4, 3}, s3[2] = {2, 3},
                         s4[4] = {1, 2, 1, 1}, s5[3] = {4, 0, 5}, s6[3] = {3, 2, 0}, s7[4] = {5, 9, 8, 8};
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (int d = 0; d < 2; d++) {
        bn_case(dts[d], 4, s0, 11 + (uint64_t)d, 0);
        bn_case(dts[d], 4, s1, 12 + (uint64_t)d, 0);
        bn_case(dts[d], 3, s2, 13 + (uint64_t)d, 0);
        bn_case(dts[d], 2, s3, 14 + (uint64_t)d, 0);
        bn_case(dts[d], 4, s4, 15 + (uint64_t)d, 0);
        bn_case(dts[d], 3, s5, 16 + (uint64_t)d, 0);
        bn_case(dts[d], 3, s6, 17 + (uint64_t)d, 0);
        bn_case(dts[d], 4, s7, 18 + (uint64_t)d, 0);
        bn_case(dts[d], 4, s7, 19 + (uint64_t)d, 100);
    }
}

/* The three backward nodes of a training batch norm share their statistics within a run
 * (blis_norm.c's bn_memo): interleaved with a second batch norm's nodes, layer 0's first
 * and last. */
Test(blis_train2, batch_norm_backward_nodes_in_one_run_match_each_alone) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const int64_t xs[4] = {6, 5, 7, 9};
    static const int order[6][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 2}, {1, 1}, {0, 2}}; /* (layer, which) */
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (int d = 0; d < 2; d++) {
        goblin_dtype dt = dts[d];
        uint64_t seed = 77 + (uint64_t)d;
        goblin_tensor t[7]; /* go, x, w, rm, rv, go2, x2 */
        t[0] = rand_tensor(dt, 4, xs, &seed), t[1] = rand_tensor(dt, 4, xs, &seed);
        t[2] = rand_tensor(dt, 1, &xs[1], &seed), t[3] = rand_tensor(dt, 1, &xs[1], &seed);
        t[4] = rand_tensor(dt, 1, &xs[1], &seed);
        t[5] = rand_tensor(dt, 4, xs, &seed), t[6] = rand_tensor(dt, 4, xs, &seed);
        for (int64_t i = 0; i < xs[1]; i++) {
            if (dt == GOBLIN_DTYPE_F64) ((double *)t[4].data)[i] = fabs(((double *)t[4].data)[i]) + 0.1;
            else ((float *)t[4].data)[i] = fabsf(((float *)t[4].data)[i]) + 0.1f;
        }
        int32_t ins[6][5];
        goblin_attr at[6][3];
        for (int q = 0; q < 6; q++) {
            int L = order[q][0];
            int32_t row[5] = {L ? 5 : 0, L ? 6 : 1, 2, 3, 4};
            memcpy(ins[q], row, sizeof row);
            at[q][0] = goblin_attr_int(GOBLIN_ATTR_TRAINING, 1);
            at[q][1] = goblin_attr_float(GOBLIN_ATTR_EPS, 1e-3);
            at[q][2] = goblin_attr_int(GOBLIN_ATTR_INDEX, order[q][1]);
        }
        one_run_matches_alone(dt, t, 7, GOBLIN_OP_BATCH_NORM_BACKWARD, 6, (const int32_t(*)[5])ins, 5,
                              (const goblin_attr(*)[3])at, 3, 1, "batch norm");
        for (int i = 0; i < 7; i++) free(t[i].data);
    }
}

typedef struct pool_case {
    int64_t n, c, h, w, k, s, p, d, ceil;
} pool_case;

static const pool_case POOL_CASES[] = {
    {2, 3, 9, 7, 2, 2, 0, 1, 0}, {2, 3, 9, 7, 3, 1, 1, 1, 0}, {1, 2, 10, 11, 3, 2, 1, 2, 1},
    {3, 1, 5, 5, 2, 3, 1, 1, 1}, {8, 16, 32, 33, 2, 2, 0, 1, 0}, {8, 8, 20, 20, 3, 1, 1, 1, 0},
    {0, 3, 4, 4, 2, 2, 0, 1, 0}, {2, 0, 4, 4, 2, 2, 0, 1, 0}, {1, 1, 1, 1, 1, 1, 0, 1, 0},
};

static void pool_case_run(const pool_case *c, goblin_dtype dt, uint64_t seed, bool nans) {
    int64_t xs[4] = {c->n, c->c, c->h, c->w};
    goblin_tensor x = rand_tensor(dt, 4, xs, &seed);
    int64_t nx = goblin__numel(&x);
    for (int64_t i = 0; i < nx; i++) { /* ties (values on a coarse grid) and, optionally, NaNs */
        double v = floor(val(&x, i) * 4) / 4;
        if (nans && gt_rand(&seed) < 0.05) v = NAN;
        if (dt == GOBLIN_DTYPE_F64) ((double *)x.data)[i] = v;
        else ((float *)x.data)[i] = (float)v;
    }
    int64_t kk[2] = {c->k, c->k}, st[2] = {c->s, c->s}, pd[2] = {c->p, c->p}, dl[2] = {c->d, c->d};
    goblin_attr at[5] = {A_INTS(KERNEL, kk, 2), A_INTS(STRIDE, st, 2), A_INTS(PADDING, pd, 2),
                         A_INTS(DILATION, dl, 2), A_INT(CEIL_MODE, c->ceil)};
    char what[96];
    snprintf(what, sizeof what, "%s n%lld c%lld %lldx%lld k%lld s%lld p%lld d%lld ceil%lld nan%d",
             goblin_dtype_name(dt), (long long)c->n, (long long)c->c, (long long)c->h, (long long)c->w,
             (long long)c->k, (long long)c->s, (long long)c->p, (long long)c->d, (long long)c->ceil, nans);
    compare_exact(GOBLIN_OP_MAX_POOL2D, &x, 1, at, 5, what);
    goblin_tensor y = run(GOBLIN_BACKEND_REF, 1, GOBLIN_OP_MAX_POOL2D, &x, 1, at, 5);
    goblin_tensor go = rand_tensor(dt, y.rank, y.shape, &seed);
    goblin_tensor bin[2] = {go, x};
    compare_exact(GOBLIN_OP_MAX_POOL2D_BACKWARD, bin, 2, at, 5, what);
    goblin_buffer_free(y.data);
    free(go.data);
    free(x.data);
}

Test(blis_train2, max_pool2d_forward_backward_match_reference) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (size_t i = 0; i < sizeof POOL_CASES / sizeof POOL_CASES[0]; i++)
        for (int d = 0; d < 2; d++)
            for (int nan = 0; nan < 2; nan++) pool_case_run(&POOL_CASES[i], dts[d], 300 + i * 3 + (uint64_t)d, nan);
}

/* relu (blis_unary.c): the reference's bits, NaN, infinities and -0 included, on
 * 1, 2 and 3 threads; sizes around the chunking. */
Test(blis_train2, relu_matches_reference_bits) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const int64_t sizes[] = {0, 1, 7, 33, 40000, 100003};
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (int d = 0; d < 2; d++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            uint64_t seed = 500 + si * 2 + (uint64_t)d;
            int64_t shape[1] = {sizes[si]};
            goblin_tensor x = rand_tensor(dts[d], 1, shape, &seed);
            static const double special[] = {NAN, -NAN, INFINITY, -INFINITY, -0.0, 0.0, -1e-40, 1e-40};
            for (int64_t i = 0; i < sizes[si]; i++) {
                if (gt_rand(&seed) >= 0.1) continue;
                double v = special[(int64_t)(gt_rand(&seed) * 8) % 8];
                if (dts[d] == GOBLIN_DTYPE_F64) ((double *)x.data)[i] = v;
                else ((float *)x.data)[i] = (float)v;
            }
            char what[64];
            snprintf(what, sizeof what, "%s n%lld", goblin_dtype_name(dts[d]), (long long)sizes[si]);
            compare_exact(GOBLIN_OP_RELU, &x, 1, NULL, 0, what);
            free(x.data);
        }
}

static void emb_case(goblin_dtype dt, int64_t v, int64_t dim, int32_t irank, const int64_t *is, uint64_t seed) {
    int64_t cnt = 1;
    for (int32_t d = 0; d < irank; d++) cnt *= is[d];
    int64_t *idx = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof(int64_t));
    for (int64_t i = 0; i < cnt; i++) idx[i] = (int64_t)(gt_rand(&seed) * (double)v) % (v > 0 ? v : 1);
    int64_t gs[GOBLIN_MAX_RANK];
    memcpy(gs, is, sizeof(int64_t) * (size_t)irank);
    gs[irank] = dim;
    goblin_tensor go = rand_tensor(dt, irank + 1, gs, &seed), ix = gt_tensor(GOBLIN_DTYPE_I64, irank, is, idx);
    int64_t ws[2] = {v, dim};
    goblin_attr at[1] = {A_INTS(SHAPE, ws, 2)};
    goblin_tensor in[2] = {go, ix};
    char what[64];
    snprintf(what, sizeof what, "%s V%lld D%lld count %lld", goblin_dtype_name(dt), (long long)v, (long long)dim,
             (long long)cnt);
    compare_exact(GOBLIN_OP_EMBEDDING_BACKWARD, in, 2, at, 1, what);
    if (cnt > 1 && v > 0) { /* a bad index: the same error as the reference */
        idx[cnt / 2] = v;
        goblin_tensor out;
        char msg[2][300];
        goblin_err e0 = gt_run1(GOBLIN_OP_EMBEDDING_BACKWARD, in, 2, at, 1, GOBLIN_BACKEND_REF, 1, &out, msg[0], 300);
        goblin_err e1 = gt_run1(GOBLIN_OP_EMBEDDING_BACKWARD, in, 2, at, 1, GOBLIN_BACKEND_BLIS, 2, &out, msg[1], 300);
        cr_assert_eq(e0, GOBLIN_EINDEX);
        cr_assert_eq(e1, GOBLIN_EINDEX, "%s", msg[1]);
        cr_assert_str_eq(msg[1], msg[0]);
    }
    free(go.data);
    free(idx);
}

Test(blis_train2, embedding_backward_matches_reference) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (int d = 0; d < 2; d++) {
        emb_case(dts[d], 65, 48, 2, (int64_t[]){32, 32}, 500 + (uint64_t)d);
        emb_case(dts[d], 7, 5, 1, (int64_t[]){40}, 510 + (uint64_t)d);
        emb_case(dts[d], 300, 37, 2, (int64_t[]){64, 33}, 520 + (uint64_t)d);
        emb_case(dts[d], 5, 3, 1, (int64_t[]){0}, 530 + (uint64_t)d);
        emb_case(dts[d], 5, 0, 1, (int64_t[]){6}, 540 + (uint64_t)d);
        emb_case(dts[d], 1, 9, 0, (int64_t[]){1}, 550 + (uint64_t)d);
    }
}

/* Random bytes of any dtype (copies move bits; NaN payloads included). */
static goblin_tensor rand_bytes(goblin_dtype dt, int32_t rank, const int64_t *shape, uint64_t *seed) {
    int64_t n = 1;
    for (int32_t d = 0; d < rank; d++) n *= shape[d];
    size_t bytes = (size_t)n * goblin_dtype_size(dt);
    uint8_t *buf = malloc(bytes > 0 ? bytes : 1);
    for (size_t i = 0; i < bytes; i++) buf[i] = (uint8_t)(gt_rand(seed) * 256);
    if (dt == GOBLIN_DTYPE_BOOL)
        for (size_t i = 0; i < bytes; i++) buf[i] &= 1;
    return gt_tensor(dt, rank, shape, buf);
}

Test(blis_train2, copies_match_reference_bits) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    goblin_dtype dts[5] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64, GOBLIN_DTYPE_I64, GOBLIN_DTYPE_F16, GOBLIN_DTYPE_BOOL};
    static const int64_t shapes[4][4] = {{32, 32, 4, 12}, {3, 5, 7, 9}, {2, 0, 3, 4}, {1, 67, 1, 130}};
    static const int64_t perms[5][4] = {{0, 2, 1, 3}, {0, 1, 3, 2}, {3, 2, 1, 0}, {1, 3, 0, 2}, {0, 1, 2, 3}};
    uint64_t seed = 900;
    for (int d = 0; d < 5; d++)
        for (int s = 0; s < 4; s++) {
            goblin_tensor x = rand_bytes(dts[d], 4, shapes[s], &seed);
            char what[64];
            snprintf(what, sizeof what, "%s shape %d", goblin_dtype_name(dts[d]), s);
            for (int p = 0; p < 5; p++) {
                goblin_attr at[1] = {A_INTS(PERM, perms[p], 4)};
                compare_exact(GOBLIN_OP_PERMUTE, &x, 1, at, 1, what);
            }
            int64_t ax[2] = {1, -1}, st[2] = {1, -7}, sp[2] = {4, 1000}, step[2] = {2, 3};
            goblin_attr sa[4] = {A_INTS(AXES, ax, 2), A_INTS(STARTS, st, 2), A_INTS(STOPS, sp, 2),
                                 A_INTS(STEPS, step, 2)};
            compare_exact(GOBLIN_OP_SLICE, &x, 1, sa, 4, what);
            compare_exact(GOBLIN_OP_SLICE, &x, 1, sa, 3, what);
            int64_t pads[2][4] = {{1, 2, 0, 3}, {-1, 2, 2, -1}};
            for (int q = 0; q < 2; q++) {
                goblin_attr pa[2] = {A_INTS(PADS, pads[q], 4), goblin_attr_float(GOBLIN_ATTR_VALUE, 1.5)};
                if (dts[d] != GOBLIN_DTYPE_BOOL) compare_exact(GOBLIN_OP_PAD, &x, 1, pa, 2, what);
            }
            int64_t rs[2] = {-1, shapes[s][3]};
            goblin_attr ra[1] = {A_INTS(SHAPE, rs, 2)};
            compare_exact(GOBLIN_OP_RESHAPE, &x, 1, ra, 1, what);
            free(x.data);
        }
}

/* ---- blis_train3.c: broadcast add/sub/mul/div, f32 exp/erf ------------------------------
 * The binary ops call the reference's scalar function per element, so any broadcast
 * layout must give the reference's exact bits on 1, 2 and 3 threads. */

Test(blis_train3, broadcast_binary_ops_match_reference_bits) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const struct {
        int32_t ra, rb;
        int64_t a[4], b[4];
    } cases[] = {
        {3, 3, {5, 7, 1}, {5, 7, 9}},       {3, 3, {5, 7, 9}, {5, 1, 9}},    {3, 3, {1, 7, 1}, {5, 1, 9}},
        {4, 4, {3, 1, 4, 1}, {1, 5, 1, 6}}, {3, 3, {0, 3, 1}, {0, 3, 4}},    {3, 2, {4, 1, 3}, {2, 3}},
        {1, 2, {1}, {6, 1}},                {3, 3, {32, 32, 1}, {32, 32, 48}}, {3, 3, {70, 1, 600}, {70, 9, 600}},
        {2, 3, {9, 1}, {2, 9, 33}},         {3, 3, {2, 9, 33}, {2, 9, 33}},  {0, 2, {0}, {3, 4}},
        {3, 3, {1, 1, 1}, {1, 1, 1}},       {2, 2, {1, 70000}, {3, 1}},
    };
    goblin_op ops[4] = {GOBLIN_OP_ADD, GOBLIN_OP_SUB, GOBLIN_OP_MUL, GOBLIN_OP_DIV};
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    uint64_t seed = 3100;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int d = 0; d < 2; d++) {
            goblin_tensor ab[2] = {rand_tensor(dts[d], cases[c].ra, cases[c].a, &seed),
                                   rand_tensor(dts[d], cases[c].rb, cases[c].b, &seed)};
            for (int sw = 0; sw < 2; sw++) {
                goblin_tensor in[2] = {ab[sw], ab[1 - sw]};
                char what[64];
                snprintf(what, sizeof what, "%s case %zu swap %d", goblin_dtype_name(dts[d]), c, sw);
                for (int o = 0; o < 4; o++) compare_exact(ops[o], in, 2, NULL, 0, what);
            }
            free(ab[0].data);
            free(ab[1].data);
        }
}

Test(blis_train3, broadcast_binary_ops_keep_nan_inf_and_ints) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    float a[6] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f}, b[3] = {0.0f, INFINITY, -2.5f};
    int64_t sa[2] = {6, 1}, sb[2] = {1, 3};
    goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_F32, 2, sa, a), gt_tensor(GOBLIN_DTYPE_F32, 2, sb, b)};
    goblin_op ops[4] = {GOBLIN_OP_ADD, GOBLIN_OP_SUB, GOBLIN_OP_MUL, GOBLIN_OP_DIV};
    for (int o = 0; o < 4; o++) compare_exact(ops[o], in, 2, NULL, 0, "specials");
    int64_t ia[4] = {1, -2, 3, INT64_MAX}, ib[2] = {7, -1};
    int64_t s4[2] = {4, 1}, s2[2] = {1, 2};
    goblin_tensor ii[2] = {gt_tensor(GOBLIN_DTYPE_I64, 2, s4, ia), gt_tensor(GOBLIN_DTYPE_I64, 2, s2, ib)};
    for (int o = 0; o < 3; o++) compare_exact(ops[o], ii, 2, NULL, 0, "i64 (declined: reference)");
}

/* f32 exp, erf and gelu use float polynomials (erf/gelu tails in double): within the ops'
 * contracts of the reference (exp 4u relative, erf 4u relative + 4u absolute, gelu 8u + 8u,
 * plus the smallest normal), the same bits on 1, 2 and 3 threads; f64 exp/erf/gelu and
 * tanh-form gelu keep the reference's bits. */
static void contract_f32(goblin_op op, const goblin_tensor *t, const goblin_attr *at, int32_t na, double rel_u,
                         double abs_u) {
    goblin_tensor ref = run(GOBLIN_BACKEND_REF, 1, op, t, 1, at, na);
    goblin_tensor b1 = run(GOBLIN_BACKEND_BLIS, 1, op, t, 1, at, na);
    int64_t n = goblin__numel(t);
    const float *x = t->data;
    double u = 0x1p-24;
    for (int64_t i = 0; i < n; i++) {
        double r = ((float *)ref.data)[i], b = ((float *)b1.data)[i];
        if (isnan(r) || isinf(r)) {
            cr_assert(isnan(r) ? isnan(b) : b == r, "%s(%g): blis %g ref %g", goblin_op_name(op), x[i], b, r);
            continue;
        }
        cr_assert(fabs(b - r) <= rel_u * u * fabs(r) + abs_u * u + 0x1p-126, "%s(%.9g): blis %.9g ref %.9g",
                  goblin_op_name(op), x[i], b, r);
        if (r == 0) cr_assert(signbit(b) == signbit(r) || fabs(x[i]) > 8, "%s(%g): sign of zero", goblin_op_name(op), x[i]);
    }
    for (int32_t th = 2; th <= 3; th++) {
        goblin_tensor bt = run(GOBLIN_BACKEND_BLIS, th, op, t, 1, at, na);
        cr_assert(n == 0 || memcmp(bt.data, b1.data, (size_t)n * 4) == 0, "%s: %d threads differ", goblin_op_name(op), th);
        goblin_buffer_free(bt.data);
    }
    goblin_buffer_free(ref.data);
    goblin_buffer_free(b1.data);
}

Test(blis_train3, exp_erf_gelu_vs_reference) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const int64_t shapes[5][2] = {{0, 5}, {7, 13}, {300, 257}, {1, 1}, {2, 20001}};
    uint64_t seed = 3200;
    for (int s = 0; s < 5; s++) {
        int64_t n = shapes[s][0] * shapes[s][1];
        float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
        static const float special[] = {NAN,   INFINITY, -INFINITY, 0.0f,   -0.0f,  88.8f,  -104.0f,
                                        1e-30f, -3.9f,   10.0f,     1e-40f, 0.25f, -6.0f, 8.49f};
        int ns = (int)(sizeof special / sizeof special[0]);
        for (int64_t i = 0; i < n; i++) {
            if (i < ns && n > ns) x[i] = special[i];
            else if (s == 4) x[i] = (float)(-10.0 + 20.0 * (double)i / (double)n); /* every polynomial piece */
            else if (s == 1 && i % 2) x[i] = nextafterf(0.25f * (float)(i % 40 - 20), i % 4 == 1 ? 100.0f : -100.0f);
            else x[i] = (float)((2 * gt_rand(&seed) - 1) * (i % 3 ? 12.0 : 90.0));
        }
        goblin_tensor t = gt_tensor(GOBLIN_DTYPE_F32, 2, shapes[s], x);
        contract_f32(GOBLIN_OP_EXP, &t, NULL, 0, 4, 0);
        contract_f32(GOBLIN_OP_ERF, &t, NULL, 0, 4, 4);
        contract_f32(GOBLIN_OP_GELU, &t, NULL, 0, 8, 8);
        goblin_attr tanh_at[1] = {A_INT(APPROXIMATE, GOBLIN_GELU_TANH)};
        compare_exact(GOBLIN_OP_GELU, &t, 1, tanh_at, 1, "f32 tanh form");
        double *xd = malloc((size_t)(n > 0 ? n : 1) * sizeof *xd);
        for (int64_t i = 0; i < n; i++) xd[i] = x[i];
        goblin_tensor td = gt_tensor(GOBLIN_DTYPE_F64, 2, shapes[s], xd);
        compare_exact(GOBLIN_OP_EXP, &td, 1, NULL, 0, "f64");
        compare_exact(GOBLIN_OP_ERF, &td, 1, NULL, 0, "f64");
        compare_exact(GOBLIN_OP_GELU, &td, 1, NULL, 0, "f64");
        free(xd);
        free(x);
    }
}

/* f32 exp, erf and gelu (erf form) against long double references computed here (expl, erfl,
 * 0.5 x erfcl(-x / sqrt2)), on every 4096th float of either sign (normals, subnormals,
 * huge), the boundaries of the float polynomials' ranges, exp's overflow and underflow
 * edges and the IEEE specials: within each op's contract (exp 4u relative + the smallest
 * normal, erf 4u + 4u, gelu 8u + 8u), exact special values and signs of zero, and the same
 * bits on 1, 2 and 3 threads. */
static double ld_ref(goblin_op op, float xf) {
    long double x = xf;
    if (op == GOBLIN_OP_EXP) return (double)expl(x);
    if (op == GOBLIN_OP_ERF) return (double)erfl(x);
    if (isinf(xf)) return xf > 0 ? INFINITY : NAN;
    return (double)(0.5L * x * erfcl(-x / sqrtl(2.0L)));
}

Test(blis_train3, f32_exp_erf_gelu_within_contract_vs_long_double) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const float edges[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 0x1p-149f, -0x1p-149f, 1e-40f, -1e-40f,
                                  0x1p-126f, FLT_MAX, -FLT_MAX, 88.72283f, 88.72284f, 88.7f, 89.0f, -87.33654f,
                                  -103.27893f, -103.97208f, -104.0f, -150.0f, 2.5f, -2.5f, 2.1213202f, -2.1213202f,
                                  4.9497476f, -4.9497476f, 3.5f, -3.5f, 5.5f, -5.5f, 6.0f, -6.0f, 1.0f, -1.0f};
    int ne = (int)(sizeof edges / sizeof edges[0]);
    int64_t n = 2 * ((int64_t)1 << 19) + ne + 4 * 64;
    float *x = malloc((size_t)n * sizeof *x);
    int64_t c = 0;
    for (int e = 0; e < ne; e++) x[c++] = edges[e];
    for (uint32_t u = 0; u < 0x80000000u; u += 4096) { /* every 4096th float, both signs */
        float f;
        memcpy(&f, &u, sizeof f);
        x[c++] = f;
        x[c++] = -f;
    }
    static const float bounds[4] = {2.5f, 2.1213202f, 4.9497476f, 1.5f};
    for (int b = 0; b < 4; b++) /* the neighbourhoods of the float paths' range ends */
        for (int d = -16; d < 16; d++) {
            float f = bounds[b];
            for (int s = 0; s < (d < 0 ? -d : d); s++) f = nextafterf(f, d < 0 ? 0.0f : 100.0f);
            x[c++] = f;
            x[c++] = -f;
        }
    cr_assert(c <= n);
    n = c;
    goblin_tensor t = gt_tensor(GOBLIN_DTYPE_F32, 1, &n, x);
    static const goblin_op ops[3] = {GOBLIN_OP_EXP, GOBLIN_OP_ERF, GOBLIN_OP_GELU};
    static const double rel[3] = {4, 4, 8}, absu[3] = {0, 4, 8};
    double u = 0x1p-24;
    for (int o = 0; o < 3; o++) {
        goblin_tensor b1 = run(GOBLIN_BACKEND_BLIS, 1, ops[o], &t, 1, NULL, 0);
        const float *y = b1.data;
        for (int64_t i = 0; i < n; i++) {
            double r = ld_ref(ops[o], x[i]), b = y[i];
            const char *nm = goblin_op_name(ops[o]);
            if (isnan(r)) {
                cr_assert(isnan(b), "%s(%.9g) = %.9g, want NaN", nm, x[i], b);
            } else if (isinf((float)r)) {
                cr_assert(b == (float)r, "%s(%.9g) = %.9g, want %g", nm, x[i], b, (double)(float)r);
            } else {
                cr_assert(fabs(b - r) <= rel[o] * u * fabs(r) + absu[o] * u + 0x1p-126,
                          "%s(%.9g) = %.9g, long double reference %.9g", nm, x[i], b, r);
                if (r == 0 || x[i] == 0)
                    cr_assert(b == 0 ? signbit(b) == signbit(r) : ops[o] == GOBLIN_OP_EXP,
                              "%s(%g): sign of zero", nm, x[i]);
            }
        }
        cr_assert(y[3] == (ops[o] == GOBLIN_OP_EXP ? 1.0f : 0.0f) && y[4] == y[3], "%s(+-0)", goblin_op_name(ops[o]));
        for (int32_t th = 2; th <= 3; th++) {
            goblin_tensor bt = run(GOBLIN_BACKEND_BLIS, th, ops[o], &t, 1, NULL, 0);
            cr_assert(memcmp(bt.data, b1.data, (size_t)n * 4) == 0, "%s: %d threads differ", goblin_op_name(ops[o]), th);
            goblin_buffer_free(bt.data);
        }
        goblin_buffer_free(b1.data);
    }
    free(x);
}

/* f32 gelu (erf form) evaluates only its first polynomial for blocks whose elements are all
 * small (|x / sqrt2| < 1.25): each element must get the same bits whatever its neighbours
 * (a spot-check recomputes rows alone), so values in blocks of small ones are compared bit
 * for bit with the same values next to a large one (every block then takes the general
 * path), at several offsets, and with long double (gelu's contract 8u + 8u). */
Test(blis_train3, f32_gelu_same_bits_whatever_the_neighbours) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    int64_t n = 4099;
    float *x = malloc((size_t)n * sizeof *x), *x2 = malloc((size_t)n * sizeof *x2);
    uint64_t seed = 4242;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((gt_rand(&seed) * 2 - 1) * 1.76);
    x[7] = 1.7677669f;  /* just below 1.25 sqrt2 */
    x[40] = -1.7677668f;
    goblin_tensor t = gt_tensor(GOBLIN_DTYPE_F32, 1, &n, x), t2 = gt_tensor(GOBLIN_DTYPE_F32, 1, &n, x2);
    goblin_tensor y1 = run(GOBLIN_BACKEND_BLIS, 1, GOBLIN_OP_GELU, &t, 1, NULL, 0);
    const float *a = y1.data;
    for (int64_t i = 0; i < n; i++) {
        long double v = x[i];
        double r = (double)(0.5L * v * erfcl(-v / sqrtl(2.0L)));
        cr_assert(fabs(a[i] - r) <= 8 * 0x1p-24 * fabs(r) + 8 * 0x1p-24, "gelu(%.9g) = %.9g, want %.9g", x[i], a[i], r);
    }
    for (int64_t off = 0; off < 32; off += 5) {
        for (int64_t i = 0; i < n; i++) x2[i] = i % 16 == off % 16 ? (i % 2 ? 9.5f : -3.0f) : x[i];
        goblin_tensor y2 = run(GOBLIN_BACKEND_BLIS, 1, GOBLIN_OP_GELU, &t2, 1, NULL, 0);
        const float *b = y2.data;
        for (int64_t i = 0; i < n; i++)
            if (i % 16 != off % 16)
                cr_assert(memcmp(&a[i], &b[i], 4) == 0, "gelu(%.9g): %.9g alone, %.9g next to a large value", x[i],
                          a[i], b[i]);
        goblin_buffer_free(y2.data);
    }
    goblin_buffer_free(y1.data);
    free(x);
    free(x2);
}

/* f32 softmax / log_softmax over axis ax of a rank-3 x: against a long double evaluation
 * here, |y - exact| <= 8u (|exact| + 1) (the contract allows gamma_(k+8)), NaN exactly where
 * the reference has it, and the same bits for 1, 2 and 3 threads. */
static void compare_softmax_f32(goblin_op op, const goblin_tensor *x, int64_t ax, const char *what) {
    goblin_attr at[1] = {A_INT(AXIS, ax)};
    goblin_tensor ref = run(GOBLIN_BACKEND_REF, 1, op, x, 1, at, 1);
    goblin_tensor b1 = run(GOBLIN_BACKEND_BLIS, 1, op, x, 1, at, 1);
    int64_t n = goblin__numel(x), A = 1, R = x->shape[ax], L = 1;
    for (int32_t d = 0; d < ax; d++) A *= x->shape[d];
    for (int32_t d = (int32_t)ax + 1; d < x->rank; d++) L *= x->shape[d];
    const float *xv = x->data, *yv = b1.data, *rv = ref.data;
    for (int64_t a = 0; a < A; a++)
        for (int64_t l = 0; l < L; l++) {
            long double m = -INFINITY, s = 0;
            for (int64_t r = 0; r < R; r++)
                if (xv[(a * R + r) * L + l] > m) m = xv[(a * R + r) * L + l];
            for (int64_t r = 0; r < R; r++) s += expl((long double)xv[(a * R + r) * L + l] - m);
            for (int64_t r = 0; r < R; r++) {
                int64_t i = (a * R + r) * L + l;
                double got = yv[i];
                if (isnan(rv[i])) {
                    cr_assert(isnan(got), "%s %s: element %lld: %g, reference NaN", goblin_op_name(op), what,
                              (long long)i, got);
                    continue;
                }
                long double ex = op == GOBLIN_OP_LOG_SOFTMAX ? ((long double)xv[i] - m) - logl(s)
                                                             : expl((long double)xv[i] - m) / s;
                if (isinf((double)ex)) {
                    cr_assert(got == (double)ex, "%s %s: element %lld: %g, exact %g", goblin_op_name(op), what,
                              (long long)i, got, (double)ex);
                    continue;
                }
                double tol = 8 * 0x1p-24 * (fabsl(ex) + 1);
                cr_assert(fabsl((long double)got - ex) <= tol, "%s %s: element %lld: %.9g, exact %.12Lg",
                          goblin_op_name(op), what, (long long)i, got, ex);
            }
        }
    for (int32_t th = 2; th <= 3; th++) {
        goblin_tensor bt = run(GOBLIN_BACKEND_BLIS, th, op, x, 1, at, 1);
        cr_assert(n == 0 || memcmp(bt.data, b1.data, (size_t)n * sizeof(float)) == 0,
                  "%s %s: %d threads differ from 1", goblin_op_name(op), what, th);
        goblin_buffer_free(bt.data);
    }
    goblin_buffer_free(ref.data);
    goblin_buffer_free(b1.data);
}

/* softmax / log_softmax over a non-last axis: f64 the reference's bits (NaN and infinite
 * entries included), 1, 2 and 3 threads; f32 within 8u (|exact| + 1) of long double
 * (compare_softmax_f32); last-axis and empty cases still work. */
Test(blis_train3, softmax_non_last_axis_matches_reference_bits) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const int64_t shapes[5][3] = {{32, 41, 32}, {3, 7, 5}, {1, 9, 2}, {4, 0, 3}, {2, 3, 0}};
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    uint64_t seed = 3300;
    for (int s = 0; s < 5; s++)
        for (int d = 0; d < 2; d++) {
            goblin_tensor x = rand_tensor(dts[d], 3, shapes[s], &seed);
            int64_t n = goblin__numel(&x);
            if (s == 1) { /* a NaN, an inf and a -inf in different columns */
                double sp[3] = {NAN, INFINITY, -INFINITY};
                for (int q = 0; q < 3; q++) {
                    int64_t at = 5 * q + 7 * q + q;
                    if (dts[d] == GOBLIN_DTYPE_F64) ((double *)x.data)[at] = sp[q];
                    else ((float *)x.data)[at] = (float)sp[q];
                }
            }
            for (int64_t i = 0; s == 0 && i < n; i++) /* logits scale */
                if (dts[d] == GOBLIN_DTYPE_F32) ((float *)x.data)[i] *= 8;
            goblin_op ops[2] = {GOBLIN_OP_SOFTMAX, GOBLIN_OP_LOG_SOFTMAX};
            int64_t axes[4] = {0, 1, -2, 2};
            for (int o = 0; o < 2; o++)
                for (int a = 0; a < 4; a++) {
                    goblin_attr at[1] = {A_INT(AXIS, axes[a])};
                    char what[64];
                    snprintf(what, sizeof what, "%s shape %d axis %lld", goblin_dtype_name(dts[d]), s,
                             (long long)axes[a]);
                    if (axes[a] == 2) { /* last axis: blis_reduce.c's kernel, within its contract */
                        if (n > 0) compare(ops[o], &x, 1, at, 1, 64, what);
                        continue;
                    }
                    if (dts[d] == GOBLIN_DTYPE_F32) compare_softmax_f32(ops[o], &x, axes[a] < 0 ? axes[a] + 3 : axes[a], what);
                    else compare_exact(ops[o], &x, 1, at, 1, what);
                }
            free(x.data);
        }
}

/* Causal attention without a mask skips the products of its weights' zero triangle
 * (blis_train.c SD_TRI_*) only when the other operand is finite: an inf or NaN in v, go,
 * q or k of one item must give the reference's NaN/inf pattern, in f32 and f64. */
Test(blis_train, sdpa_causal_nonfinite_follows_the_reference) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (int d = 0; d < 2; d++)
        for (int which_in = 0; which_in < 4; which_in++) { /* the operand given an inf: go q k v */
            goblin_dtype dt = dts[d];
            uint64_t seed = 900 + (uint64_t)(d * 4 + which_in);
            int64_t s4[4] = {2, 2, 9, 5};
            goblin_tensor go = rand_tensor(dt, 4, s4, &seed), q = rand_tensor(dt, 4, s4, &seed);
            goblin_tensor k = rand_tensor(dt, 4, s4, &seed), v = rand_tensor(dt, 4, s4, &seed);
            goblin_tensor *t[4] = {&go, &q, &k, &v};
            int64_t pos = 1 * 45 + 6 * 5 + 2; /* batch 0, head 1, row 6, column 2 */
            if (dt == GOBLIN_DTYPE_F64) ((double *)t[which_in]->data)[pos] = INFINITY;
            else ((float *)t[which_in]->data)[pos] = INFINITY;
            goblin_tensor in[4] = {go, q, k, v};
            for (int64_t which = -1; which < 3; which++) {
                goblin_attr at[2] = {A_INT(CAUSAL, 1), A_INT(INDEX, which < 0 ? 0 : which)};
                bool fwd = which < 0;
                goblin_tensor r = run(GOBLIN_BACKEND_REF, 1, fwd ? GOBLIN_OP_SDPA : GOBLIN_OP_SDPA_BACKWARD,
                                      fwd ? in + 1 : in, fwd ? 3 : 4, at, fwd ? 1 : 2);
                goblin_tensor b = run(GOBLIN_BACKEND_BLIS, 1, fwd ? GOBLIN_OP_SDPA : GOBLIN_OP_SDPA_BACKWARD,
                                      fwd ? in + 1 : in, fwd ? 3 : 4, at, fwd ? 1 : 2);
                double tol = dt == GOBLIN_DTYPE_F64 ? 1e-12 : 1e-4;
                for (int64_t i = 0; i < goblin__numel(&r); i++) {
                    double x = val(&b, i), y = val(&r, i);
                    cr_assert(isnan(x) == isnan(y) && isinf(x) == isinf(y) && (!isfinite(y) ? isnan(y) || x == y
                                                                                               : gt_close(x, y, tol, tol)),
                              "%s inf in input %d, %s %lld: element %lld: blis %g ref %g", goblin_dtype_name(dt),
                              which_in, fwd ? "forward" : "backward", (long long)which, (long long)i, x, y);
                }
                goblin_buffer_free(r.data);
                goblin_buffer_free(b.data);
            }
            for (int i = 0; i < 4; i++) free(t[i]->data);
        }
}

/* The forward node keeps its softmax weights for the backward of the same attention in
 * the same run (blis_train.c sdf_memo): a graph with two attentions' forwards and then
 * their backward nodes (sharing k and v, the second forward evicting nothing it needs)
 * gives each output the bits of the node evaluated alone, on a second run too after q
 * changed in place (a run never takes the previous run's weights). */
Test(blis_train, sdpa_forward_weights_reused_by_backward_match_each_alone) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (int d = 0; d < 2; d++)
        for (int causal = 0; causal < 2; causal++) {
            goblin_dtype dt = dts[d];
            uint64_t seed = 40 + (uint64_t)(d * 2 + causal);
            int64_t s4[4] = {3, 2, 11, 6};
            goblin_tensor t[5]; /* go, q, k, v, q2 */
            for (int i = 0; i < 5; i++) t[i] = rand_tensor(dt, 4, s4, &seed);
            goblin_graph *g;
            cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
            int32_t id[5], f[2], bw[6];
            for (int i = 0; i < 5; i++) cr_assert_eq(goblin_graph_input(g, dt, 4, s4, &id[i]), GOBLIN_OK);
            goblin_attr at[2] = {A_INT(CAUSAL, causal), A_INT(INDEX, 0)};
            int32_t fa[3] = {id[1], id[2], id[3]}, fb[3] = {id[4], id[2], id[3]};
            cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SDPA, fa, 3, at, 1, &f[0]), GOBLIN_OK);
            cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SDPA, fb, 3, at, 1, &f[1]), GOBLIN_OK);
            for (int q = 0; q < 6; q++) { /* B's nodes first, then A's */
                int B = q < 3;
                int32_t bi[4] = {id[0], B ? id[4] : id[1], id[2], id[3]};
                at[1] = A_INT(INDEX, (q % 3 + (B ? 1 : 2)) % 3);
                cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SDPA_BACKWARD, bi, 4, at, 2, &bw[q]), GOBLIN_OK);
            }
            for (int i = 0; i < 2; i++) cr_assert_eq(goblin_graph_output(g, f[i]), GOBLIN_OK);
            for (int q = 0; q < 6; q++) cr_assert_eq(goblin_graph_output(g, bw[q]), GOBLIN_OK);
            goblin_exec_params p;
            goblin_exec_params_default(&p);
            p.backend = GOBLIN_BACKEND_BLIS;
            p.threads = 2;
            for (int rep = 0; rep < 2; rep++) {
                goblin_tensor outs[8];
                memset(outs, 0, sizeof outs);
                cr_assert_eq(goblin_graph_eval(g, &p, t, 5, outs, 8), GOBLIN_OK);
                for (int o = 0; o < 8; o++) {
                    bool fwd = o < 2;
                    int B = fwd ? o == 1 : o - 2 < 3;
                    goblin_tensor in[4] = {t[0], B ? t[4] : t[1], t[2], t[3]};
                    at[1] = A_INT(INDEX, fwd ? 0 : ((o - 2) % 3 + (B ? 1 : 2)) % 3);
                    goblin_tensor alone = run(GOBLIN_BACKEND_BLIS, 1, fwd ? GOBLIN_OP_SDPA : GOBLIN_OP_SDPA_BACKWARD,
                                              fwd ? in + 1 : in, fwd ? 3 : 4, at, fwd ? 1 : 2);
                    int64_t n = goblin__numel(&alone);
                    cr_assert(memcmp(outs[o].data, alone.data, (size_t)n * goblin_dtype_size(dt)) == 0,
                              "%s causal %d run %d: output %d differs from the node alone", goblin_dtype_name(dt),
                              causal, rep, o);
                    goblin_buffer_free(alone.data);
                    goblin_buffer_free(outs[o].data);
                }
                for (int64_t i = 0; i < goblin__numel(&t[1]); i++) {
                    if (dt == GOBLIN_DTYPE_F64) ((double *)t[1].data)[i] *= 1.5;
                    else ((float *)t[1].data)[i] *= 1.5f;
                }
            }
            goblin_graph_free(g);
            for (int i = 0; i < 5; i++) free(t[i].data);
        }
}

/* ---- layer_norm_backward and gelu_backward (blis_train3.c) ------------------------------ */

/* BLIS within tol * (max |ref| + 1) of the reference, element by element, and the same bits
 * on 2 and 3 threads; NaN where the reference has NaN. */
static void compare_scaled(goblin_op op, const goblin_tensor *in, int32_t n_in, const goblin_attr *at,
                           int32_t na, double tol_u, const char *what) {
    goblin_tensor ref = run(GOBLIN_BACKEND_REF, 1, op, in, n_in, at, na);
    goblin_tensor b1 = run(GOBLIN_BACKEND_BLIS, 1, op, in, n_in, at, na);
    int64_t n = goblin__numel(&ref);
    cr_assert_eq(goblin__numel(&b1), n);
    for (int32_t d = 0; d < ref.rank; d++) cr_assert_eq(b1.shape[d], ref.shape[d]);
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(val(&ref, i)) && fabs(val(&ref, i)) > m) m = fabs(val(&ref, i));
    double u = ref.dtype == GOBLIN_DTYPE_F64 ? 0x1p-53 : 0x1p-24, tol = tol_u * u * (m + 1);
    for (int64_t i = 0; i < n; i++) {
        double r = val(&ref, i), b = val(&b1, i);
        if (isnan(r)) cr_assert(isnan(b), "%s %s: element %lld: blis %g, ref NaN", goblin_op_name(op), what, (long long)i, b);
        else cr_assert(fabs(b - r) <= tol, "%s %s: element %lld: blis %.17g ref %.17g (tol %.3g)", goblin_op_name(op),
                       what, (long long)i, b, r, tol);
    }
    for (int32_t th = 2; th <= 3; th++) {
        goblin_tensor bt = run(GOBLIN_BACKEND_BLIS, th, op, in, n_in, at, na);
        cr_assert(n == 0 || memcmp(bt.data, b1.data, (size_t)n * goblin_dtype_size(ref.dtype)) == 0,
                  "%s %s: %d threads differ from 1", goblin_op_name(op), what, th);
        goblin_buffer_free(bt.data);
    }
    goblin_buffer_free(ref.data);
    goblin_buffer_free(b1.data);
}

/* d x and d weight, f32 and f64, with and without weight, one or two normalized dims,
 * rows shorter and longer than the kernel's lanes, row counts around its 4-row groups,
 * empty inputs; one NaN row. */
Test(blis_train3, layer_norm_backward_vs_reference) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const struct { int32_t rank; int64_t s[3]; int nd; } cases[] = {
        {2, {0, 5}, 1}, {2, {3, 0}, 1}, {2, {1, 1}, 1},   {2, {7, 13}, 1},  {2, {33, 48}, 1},
        {2, {6, 257}, 1}, {3, {5, 3, 37}, 2}, {3, {2, 9, 32}, 1}, {2, {1025, 16}, 1},
    };
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    uint64_t seed = 3400;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int d = 0; d < 2; d++) {
            int64_t len = 1;
            for (int k = cases[c].rank - cases[c].nd; k < cases[c].rank; k++) len *= cases[c].s[k];
            goblin_tensor in[3] = {rand_tensor(dts[d], cases[c].rank, cases[c].s, &seed),
                                   rand_tensor(dts[d], cases[c].rank, cases[c].s, &seed),
                                   rand_tensor(dts[d], cases[c].nd, &cases[c].s[cases[c].rank - cases[c].nd], &seed)};
            if (c == 4) { /* a NaN and an inf in two rows of x */
                if (dts[d] == GOBLIN_DTYPE_F32) ((float *)in[1].data)[50] = NAN, ((float *)in[1].data)[200] = INFINITY;
                else ((double *)in[1].data)[50] = NAN, ((double *)in[1].data)[200] = INFINITY;
            }
            char what[96];
            for (int idx = 0; idx < 2; idx++)
                for (int nw = 2; nw <= 3; nw++) {
                    if (idx == 1 && nw == 3) continue;
                    goblin_attr at[3] = {A_INT(NORM_NDIM, cases[c].nd), A_INT(INDEX, idx),
                                         goblin_attr_float(GOBLIN_ATTR_EPS, c % 2 ? 1e-5 : 1e-3)};
                    snprintf(what, sizeof what, "%s case %d index %d, %d inputs", goblin_dtype_name(dts[d]),
                             (int)c, idx, nw);
                    /* sums of len terms of size <= ~10 (rstd of inputs in [-1, 1] is ~ 1.7) */
                    compare_scaled(GOBLIN_OP_LAYER_NORM_BACKWARD, in, nw, at, 3, 64.0 * ((double)len + 8), what);
                }
            for (int i = 0; i < 3; i++) free(in[i].data);
        }
}

/* The statistics are the forward kernel's bits: with grad_out one-hot on row r0 (zeros
 * elsewhere), d weight is exactly xhat of that row, i.e. the BLIS forward layer_norm's row
 * (no weight, no bias), for rows inside and after the kernels' 4-row groups. */
Test(blis_train3, layer_norm_backward_statistics_are_the_forward_bits) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const int64_t shapes[4][2] = {{7, 48}, {9, 13}, {6, 100}, {5, 33}};
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    uint64_t seed = 3500;
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 2; d++) {
            goblin_tensor x = rand_tensor(dts[d], 2, shapes[s], &seed);
            int64_t rows = shapes[s][0], len = shapes[s][1];
            size_t es = goblin_dtype_size(dts[d]);
            for (int64_t i = 0; i < rows * len; i++) { /* offset rows: a mean far from 0 */
                if (dts[d] == GOBLIN_DTYPE_F32) ((float *)x.data)[i] += 3.0f;
                else ((double *)x.data)[i] += 3.0;
            }
            goblin_tensor y = run(GOBLIN_BACKEND_BLIS, 1, GOBLIN_OP_LAYER_NORM, &x, 1, NULL, 0);
            for (int64_t r0 = 0; r0 < rows; r0++) {
                void *g = calloc((size_t)(rows * len), es);
                for (int64_t j = 0; j < len; j++) {
                    if (dts[d] == GOBLIN_DTYPE_F32) ((float *)g)[r0 * len + j] = 1;
                    else ((double *)g)[r0 * len + j] = 1;
                }
                goblin_tensor in[2] = {gt_tensor(dts[d], 2, shapes[s], g), x};
                goblin_attr at = A_INT(INDEX, 1);
                goblin_tensor dw = run(GOBLIN_BACKEND_BLIS, 1, GOBLIN_OP_LAYER_NORM_BACKWARD, in, 2, &at, 1);
                cr_assert(memcmp(dw.data, (char *)y.data + (size_t)(r0 * len) * es, (size_t)len * es) == 0,
                          "%s shape %d row %lld: d weight is not the forward's xhat", goblin_dtype_name(dts[d]), s,
                          (long long)r0);
                goblin_buffer_free(dw.data);
                free(g);
            }
            goblin_buffer_free(y.data);
            free(x.data);
        }
}

/* gelu' (erf form) in f32 against long double, g * (Phi(x) + x phi(x)) with Phi = erfc / 2:
 * every 4096th float of either sign, the ends of the float path and IEEE specials, with
 * grad_out in [-1, 1]: within the contract (16u relative + 16u |grad_out| absolute), NaN
 * for NaN and +-inf, and the same bits on 1, 2 and 3 threads. */
static long double gelu_grad_ld(long double x) {
    if (isinf(x)) return NAN;
    return 0.5L * erfcl(-x / sqrtl(2.0L)) + x * expl(-0.5L * x * x) / sqrtl(2.0L * 3.14159265358979323846264338327950288L);
}

Test(blis_train3, gelu_backward_f32_within_contract_vs_long_double) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const float edges[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 0x1p-149f, 1e-40f, FLT_MAX, -FLT_MAX,
                                  4.9497476f, -4.9497476f, 2.1213202f, -2.1213202f, -0.7517916f, 1.0f, -1.0f,
                                  13.0f, -13.0f, 20.0f, -20.0f};
    int ne = (int)(sizeof edges / sizeof edges[0]);
    int64_t n = 2 * ((int64_t)1 << 19) + ne + 64 * 2;
    float *x = malloc((size_t)n * sizeof *x), *g = malloc((size_t)n * sizeof *g);
    int64_t c = 0;
    for (int e = 0; e < ne; e++) x[c++] = edges[e];
    for (uint32_t u = 0; u < 0x80000000u; u += 4096) {
        float f;
        memcpy(&f, &u, sizeof f);
        x[c++] = f;
        x[c++] = -f;
    }
    for (int dd = -32; dd < 32; dd++) { /* around x / sqrt2 = +-3.5, the float path's ends */
        float f = 4.9497476f;
        for (int s = 0; s < (dd < 0 ? -dd : dd); s++) f = nextafterf(f, dd < 0 ? 0.0f : 100.0f);
        x[c++] = f;
        x[c++] = -f;
    }
    cr_assert(c <= n);
    n = c;
    uint64_t seed = 3600;
    for (int64_t i = 0; i < n; i++) g[i] = i % 3 == 0 ? 1.0f : (float)(2 * gt_rand(&seed) - 1);
    goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_F32, 1, &n, g), gt_tensor(GOBLIN_DTYPE_F32, 1, &n, x)};
    goblin_tensor b1 = run(GOBLIN_BACKEND_BLIS, 1, GOBLIN_OP_GELU_BACKWARD, in, 2, NULL, 0);
    const float *y = b1.data;
    double u = 0x1p-24;
    for (int64_t i = 0; i < n; i++) {
        double r = (double)((long double)g[i] * gelu_grad_ld(x[i])), b = y[i];
        if (isnan(r)) {
            cr_assert(isnan(b), "gelu_backward(%.9g, %.9g) = %.9g, want NaN", g[i], x[i], b);
            continue;
        }
        cr_assert(fabs(b - r) <= 16 * u * fabs(r) + 16 * u * fabs(g[i]) + 0x1p-126,
                  "gelu_backward(g %.9g, x %.9g) = %.9g, long double %.9g", g[i], x[i], b, r);
    }
    for (int32_t th = 2; th <= 3; th++) {
        goblin_tensor bt = run(GOBLIN_BACKEND_BLIS, th, GOBLIN_OP_GELU_BACKWARD, in, 2, NULL, 0);
        cr_assert(memcmp(bt.data, b1.data, (size_t)n * 4) == 0, "gelu_backward: %d threads differ", th);
        goblin_buffer_free(bt.data);
    }
    goblin_buffer_free(b1.data);
    free(x);
    free(g);
}

/* the tanh form (f32, f64) and the erf form in f64 against the reference */
Test(blis_train3, gelu_backward_tanh_and_f64_vs_reference) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const int64_t shapes[3][2] = {{0, 4}, {7, 13}, {300, 257}};
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    uint64_t seed = 3700;
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 2; d++) {
            goblin_tensor in[2] = {rand_tensor(dts[d], 2, shapes[s], &seed), rand_tensor(dts[d], 2, shapes[s], &seed)};
            int64_t n = shapes[s][0] * shapes[s][1];
            for (int64_t i = 0; i < n; i++) { /* x in [-12, 12], specials first */
                double v = i == 0 ? NAN : i == 1 ? INFINITY : i == 2 ? -INFINITY : 12 * val(&in[1], i);
                if (dts[d] == GOBLIN_DTYPE_F32) ((float *)in[1].data)[i] = (float)v;
                else ((double *)in[1].data)[i] = v;
            }
            for (int form = 0; form < 2; form++) {
                if (d == 0 && form == 0) continue; /* f32 erf form: the long double test above */
                goblin_attr at = A_INT(APPROXIMATE, form);
                compare_scaled(GOBLIN_OP_GELU_BACKWARD, in, 2, &at, 1, 16, form ? "tanh" : "erf");
            }
            free(in[0].data);
            free(in[1].data);
        }
}

/* The d x and d weight nodes of one layer norm share the row statistics within a run
 * (blis_train3.c's ln_memo): interleaved with a second layer norm's nodes, and with x
 * changed in place between two runs, every node gives the bits it gives alone. */
Test(blis_train3, layer_norm_backward_nodes_in_one_run_match_each_alone) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const int64_t xs[3] = {3, 7, 40};
    static const int order[5][2] = {{0, 0}, {1, 1}, {0, 1}, {1, 0}, {0, 0}}; /* (layer, index) */
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (int d = 0; d < 2; d++) {
        goblin_dtype dt = dts[d];
        uint64_t seed = 91 + (uint64_t)d;
        goblin_tensor t[5]; /* go, x, w, go2, x2 */
        t[0] = rand_tensor(dt, 3, xs, &seed), t[1] = rand_tensor(dt, 3, xs, &seed);
        t[2] = rand_tensor(dt, 1, &xs[2], &seed);
        t[3] = rand_tensor(dt, 3, xs, &seed), t[4] = rand_tensor(dt, 3, xs, &seed);
        int32_t ins[5][5];
        goblin_attr at[5][3];
        for (int q = 0; q < 5; q++) {
            int L = order[q][0];
            int32_t row[5] = {L ? 3 : 0, L ? 4 : 1, 2, 0, 0};
            memcpy(ins[q], row, sizeof row);
            at[q][0] = goblin_attr_int(GOBLIN_ATTR_NORM_NDIM, 1);
            at[q][1] = goblin_attr_float(GOBLIN_ATTR_EPS, 1e-4);
            at[q][2] = goblin_attr_int(GOBLIN_ATTR_INDEX, order[q][1]);
        }
        one_run_matches_alone(dt, t, 5, GOBLIN_OP_LAYER_NORM_BACKWARD, 5, (const int32_t(*)[5])ins, 3,
                              (const goblin_attr(*)[3])at, 3, 1, "layer norm");
        for (int i = 0; i < 5; i++) free(t[i].data);
    }
}

/* conv2d backward through the same-width col2im / im2col (stride 1, OW == W): planes
 * whose zero-bordered copy fits the kernels' stack plane (up to 4096 elements: 64 x 64
 * padded) and planes past it (the per-row paths); rows of 4, 8 and 16 elements and odd
 * widths; a 1x3-like kernel with row padding (output rows outside the image), padding
 * wider than the image, dilation; f32 and f64 against the reference, 1-3 threads. */
Test(blis_train, conv2d_backward_same_width_padded_plane_and_row_paths) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const conv_case cases[] = {
        {2, 3, 70, 66, 4, 3, 3, 1, 1, 1, 1},  {1, 2, 66, 70, 3, 3, 3, 1, 2, 2, 1},
        {2, 2, 62, 62, 3, 3, 3, 1, 1, 1, 1},  {3, 2, 5, 4, 3, 1, 3, 1, 1, 1, 1},
        {2, 2, 2, 3, 2, 7, 7, 1, 3, 1, 1},    {4, 3, 8, 8, 5, 3, 3, 1, 2, 2, 1},
        {6, 3, 16, 16, 16, 3, 3, 1, 1, 1, 1}, {7, 16, 8, 8, 32, 3, 3, 1, 1, 1, 1},
        {3, 4, 7, 13, 6, 5, 5, 1, 2, 1, 2},
    };
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 2; d++) conv_case_run(&cases[i], dts[d], 4000 + i * 7 + (uint64_t)d);
}

/* Batch norm's forward normalizes as x a + b' (a = w rstd, b' = b - mean a, rounded
 * once): means far from 0 relative to the spread (cancellation in x a + b'), planes whose
 * size is no multiple of the vector length, training and eval, within the op's contract
 * (the forward only: the backward at such offsets is bn_case's concern, up to 100). */
Test(blis_train2, batch_norm_forward_far_mean_odd_planes_within_contract) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const int64_t shapes[3][4] = {{4, 3, 5, 9}, {6, 2, 13, 1}, {2, 3, 16, 16}};
    static const double offsets[3] = {-3000, 250, 1e5};
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < 3; s++) {
            goblin_dtype dt = dts[d];
            uint64_t seed = 31 + (uint64_t)(s * 2 + d);
            const int64_t *xs = shapes[s];
            goblin_tensor x = rand_tensor(dt, 4, xs, &seed);
            goblin_tensor w = rand_tensor(dt, 1, &xs[1], &seed), b = rand_tensor(dt, 1, &xs[1], &seed);
            goblin_tensor rm = rand_tensor(dt, 1, &xs[1], &seed), rv = rand_tensor(dt, 1, &xs[1], &seed);
            for (int64_t i = 0; i < xs[1]; i++) { /* eval: a running mean near the data, a positive variance */
                if (dt == GOBLIN_DTYPE_F64) {
                    ((double *)rv.data)[i] = fabs(((double *)rv.data)[i]) + 0.1;
                    ((double *)rm.data)[i] += offsets[s];
                } else {
                    ((float *)rv.data)[i] = fabsf(((float *)rv.data)[i]) + 0.1f;
                    ((float *)rm.data)[i] += (float)offsets[s];
                }
            }
            int64_t nx = goblin__numel(&x);
            for (int64_t i = 0; i < nx; i++) {
                if (dt == GOBLIN_DTYPE_F64) ((double *)x.data)[i] += offsets[s];
                else ((float *)x.data)[i] += (float)offsets[s];
            }
            char what[96];
            snprintf(what, sizeof what, "%s shape [%lld, %lld, %lld, %lld] offset %g", goblin_dtype_name(dt),
                     (long long)xs[0], (long long)xs[1], (long long)xs[2], (long long)xs[3], offsets[s]);
            for (int64_t tr = 0; tr < 2; tr++) {
                goblin_attr at[2] = {A_INT(TRAINING, tr), goblin_attr_float(GOBLIN_ATTR_EPS, 1e-3)};
                goblin_tensor fin[5] = {x, w, b, rm, rv};
                compare_bn(GOBLIN_OP_BATCH_NORM, fin, at, 2, what);
            }
            free(x.data), free(w.data), free(b.data), free(rm.data), free(rv.data);
        }
}

/* The 2x2 / stride 2 max pooling runs 8 windows a step (f32; f64 4), then 4, then one
 * at a time: rows of 4, 12, 13 and 21 windows (odd input widths and heights leave a
 * column / row no window covers), ties and NaNs, the reference's bits on 1-3 threads. */
Test(blis_train2, max_pool2d_2x2_vector_steps_match_reference) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const pool_case cases[] = {
        {3, 5, 8, 8, 2, 2, 0, 1, 0},   {2, 3, 7, 24, 2, 2, 0, 1, 0}, {2, 2, 10, 27, 2, 2, 0, 1, 0},
        {1, 3, 5, 42, 2, 2, 0, 1, 0},  {4, 2, 16, 16, 2, 2, 0, 1, 0},
    };
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 2; d++)
            for (int nan = 0; nan < 2; nan++) pool_case_run(&cases[i], dts[d], 700 + i * 3 + (uint64_t)d, nan);
}

/* f32 softmax over a non-last axis runs 8 trailing positions per vector, the last ones
 * padded: a column's bits must not depend on its position, its neighbours or the trailing
 * size. x [2, 13, L] for L = 2..19 (L = 1 is the last-axis kernel) holds column c of a
 * fixed [2, 13, 19] source at position L - 1 - c % L (other columns from a second source):
 * each output column equals the one computed for the same data at every other width. */
Test(blis_train3, softmax_f32_columns_independent_of_position) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    uint64_t seed = 4410;
    int64_t s0[3] = {2, 13, 19};
    goblin_tensor src = rand_tensor(GOBLIN_DTYPE_F32, 3, s0, &seed), oth = rand_tensor(GOBLIN_DTYPE_F32, 3, s0, &seed);
    float *first = malloc(sizeof(float) * 2 * 2 * 13 * 19); /* [op][2][13][19] */
    bool have[19] = {false};
    for (int o = 0; o < 2; o++) {
        goblin_op op = o ? GOBLIN_OP_LOG_SOFTMAX : GOBLIN_OP_SOFTMAX;
        for (int c = 0; c < 19; c++) have[c] = false;
        for (int64_t L = 2; L <= 19; L++)
            for (int c = 0; c < 19; c++) {
                int64_t shp[3] = {2, 13, L}, pos = L - 1 - c % L;
                float *buf = malloc(sizeof(float) * 2 * 13 * (size_t)L);
                for (int64_t i = 0; i < 2 * 13 * L; i++) {
                    int64_t l = i % L, ar = i / L;
                    buf[i] = ((float *)oth.data)[ar * 19 + (l + c) % 19] * 3;
                    if (l == pos) buf[i] = ((float *)src.data)[ar * 19 + c] * 3;
                }
                goblin_tensor x = gt_tensor(GOBLIN_DTYPE_F32, 3, shp, buf);
                goblin_attr at[1] = {A_INT(AXIS, 1)};
                goblin_tensor y = run(GOBLIN_BACKEND_BLIS, 1, op, &x, 1, at, 1);
                for (int64_t ar = 0; ar < 2 * 13; ar++) {
                    float v = ((float *)y.data)[ar * L + pos], *f = &first[(o * 26 + ar) * 19 + c];
                    if (!have[c]) *f = v;
                    cr_assert(memcmp(f, &v, sizeof v) == 0, "op %d column %d width %lld row %lld: %.9g vs %.9g", o, c,
                              (long long)L, (long long)ar, v, *f);
                }
                have[c] = true;
                goblin_buffer_free(y.data);
                free(buf);
            }
    }
    free(first);
    free(src.data);
    free(oth.data);
}

/* The layer norm forward keeps its row statistics for the backward nodes of the same x in
 * the same run (blis_train3.c's lns table): K forwards (with and without weight and bias)
 * and then their d x and d weight nodes in reverse order, K = 2 and K = 11 (more than the
 * table holds), rows in and after the 4-row groups, f32 and f64, two runs with x[0]
 * changed in place between them: every output has the bits of its node alone. */
Test(blis_train3, layer_norm_forward_statistics_reused_by_backward_match_each_alone) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const int64_t shapes[2][3] = {{3, 7, 40}, {1, 5, 33}};
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 2; d++)
            for (int K = 2; K <= 11; K += 9) {
                goblin_dtype dt = dts[d];
                uint64_t seed = 5100 + (uint64_t)(s * 4 + d * 2 + (K > 2));
                const int64_t *xs = shapes[s];
                goblin_tensor t[14]; /* go, w, b, x[0 .. K) */
                t[0] = rand_tensor(dt, 3, xs, &seed);
                t[1] = rand_tensor(dt, 1, &xs[2], &seed), t[2] = rand_tensor(dt, 1, &xs[2], &seed);
                for (int q = 0; q < K; q++) {
                    t[3 + q] = rand_tensor(dt, 3, xs, &seed);
                    for (int64_t i = 0; i < goblin__numel(&t[3 + q]); i++) { /* a mean away from 0 */
                        if (dt == GOBLIN_DTYPE_F64) ((double *)t[3 + q].data)[i] += q;
                        else ((float *)t[3 + q].data)[i] += (float)q;
                    }
                }
                goblin_graph *g;
                cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
                int32_t id[14], outs_id[33];
                int nout = 0;
                for (int i = 0; i < 3 + K; i++)
                    cr_assert_eq(goblin_graph_input(g, dt, t[i].rank, t[i].shape, &id[i]), GOBLIN_OK);
                goblin_attr at[3] = {goblin_attr_int(GOBLIN_ATTR_NORM_NDIM, 1), goblin_attr_float(GOBLIN_ATTR_EPS, 1e-4),
                                     goblin_attr_int(GOBLIN_ATTR_INDEX, 0)};
                for (int q = 0; q < K; q++) { /* forwards: odd ones without weight and bias */
                    int32_t fi[3] = {id[3 + q], id[1], id[2]};
                    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_LAYER_NORM, fi, q % 2 ? 1 : 3, at, 2, &outs_id[nout++]),
                                 GOBLIN_OK, "%s", goblin_graph_error(g));
                }
                for (int q = K - 1; q >= 0; q--)
                    for (int idx = 0; idx < 2; idx++) { /* d x (index 0) then d weight */
                        int32_t bi[3] = {id[0], id[3 + q], id[1]};
                        at[2] = goblin_attr_int(GOBLIN_ATTR_INDEX, idx);
                        cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_LAYER_NORM_BACKWARD, bi, 3, at, 3, &outs_id[nout++]),
                                     GOBLIN_OK, "%s", goblin_graph_error(g));
                    }
                for (int o = 0; o < nout; o++) cr_assert_eq(goblin_graph_output(g, outs_id[o]), GOBLIN_OK);
                goblin_exec_params p;
                goblin_exec_params_default(&p);
                p.backend = GOBLIN_BACKEND_BLIS;
                p.threads = 2;
                for (int rep = 0; rep < 2; rep++) {
                    goblin_tensor outs[33];
                    memset(outs, 0, sizeof outs);
                    cr_assert_eq(goblin_graph_eval(g, &p, t, 3 + K, outs, nout), GOBLIN_OK);
                    for (int o = 0; o < nout; o++) {
                        bool fwd = o < K;
                        int q = fwd ? o : K - 1 - (o - K) / 2, idx = fwd ? 0 : (o - K) % 2;
                        goblin_tensor alone;
                        if (fwd) {
                            goblin_tensor fin[3] = {t[3 + q], t[1], t[2]};
                            alone = run(GOBLIN_BACKEND_BLIS, 1, GOBLIN_OP_LAYER_NORM, fin, q % 2 ? 1 : 3, at, 2);
                        } else {
                            goblin_tensor bin[3] = {t[0], t[3 + q], t[1]};
                            at[2] = goblin_attr_int(GOBLIN_ATTR_INDEX, idx);
                            alone = run(GOBLIN_BACKEND_BLIS, 1, GOBLIN_OP_LAYER_NORM_BACKWARD, bin, 3, at, 3);
                        }
                        int64_t n = goblin__numel(&alone);
                        cr_assert_eq(goblin__numel(&outs[o]), n);
                        cr_assert(memcmp(outs[o].data, alone.data, (size_t)n * goblin_dtype_size(dt)) == 0,
                                  "%s shape %d K %d run %d: output %d (layer norm %d, %s) differs from the node alone",
                                  goblin_dtype_name(dt), s, K, rep, o, q, fwd ? "forward" : idx ? "d weight" : "d x");
                        goblin_buffer_free(alone.data);
                        goblin_buffer_free(outs[o].data);
                    }
                    for (int64_t i = 0; i < goblin__numel(&t[3]); i++) {
                        if (dt == GOBLIN_DTYPE_F64) ((double *)t[3].data)[i] *= 1.5;
                        else ((float *)t[3].data)[i] *= 1.5f;
                    }
                }
                goblin_graph_free(g);
                for (int i = 0; i < 3 + K; i++) free(t[i].data);
            }
}

/* Causal attention without a mask, small heads with L and S multiples of 8: scores_ runs
 * the rows in 8-row blocks (blis_train.c sd_causal_blocks_f32). f32 and f64, L = S, L < S,
 * L > S: the forward against a long double evaluation within the contract's first-order
 * bound (k = E + S + 6, T as in docs/ops.md); forward and the three backward nodes in one
 * graph give each node's bits alone (the forward's kept weights are the bits the blocks
 * give the backward); an inf in q, k or v at one row gives the reference's NaN/inf pattern. */
Test(blis_train, sdpa_causal_row_blocks_within_contract_and_consistent) {
    if (!have_blis()) cr_skip_test("no BLIS backend");
    static const int64_t LS[5][2] = {{16, 16}, {16, 24}, {24, 16}, {8, 8}, {32, 32}};
    goblin_dtype dts[2] = {GOBLIN_DTYPE_F32, GOBLIN_DTYPE_F64};
    for (int c = 0; c < 5; c++)
        for (int d = 0; d < 2; d++) {
            goblin_dtype dt = dts[d];
            int64_t L = LS[c][0], S = LS[c][1], E = 12, Ev = 5;
            uint64_t seed = 6100 + (uint64_t)(c * 2 + d);
            int64_t qs[4] = {2, 2, L, E}, ks[4] = {2, 2, S, E}, vs[4] = {2, 2, S, Ev}, os[4] = {2, 2, L, Ev};
            goblin_tensor q = rand_tensor(dt, 4, qs, &seed), k = rand_tensor(dt, 4, ks, &seed);
            goblin_tensor v = rand_tensor(dt, 4, vs, &seed), go = rand_tensor(dt, 4, os, &seed);
            for (int64_t i = 0; i < goblin__numel(&q); i++) { /* logits of a few units */
                if (dt == GOBLIN_DTYPE_F64) ((double *)q.data)[i] *= 4;
                else ((float *)q.data)[i] *= 4;
            }
            goblin_attr at[2] = {A_INT(CAUSAL, 1), A_INT(INDEX, 0)};
            goblin_tensor fin[3] = {q, k, v};
            goblin_tensor y = run(GOBLIN_BACKEND_BLIS, 1, GOBLIN_OP_SDPA, fin, 3, at, 1);
            double u = dt == GOBLIN_DTYPE_F64 ? 0x1p-53 : 0x1p-24, sc = 1 / sqrt((double)E);
            for (int64_t bh = 0; bh < 4; bh++)
                for (int64_t i = 0; i < L; i++) {
                    long double s[64], mx = -INFINITY, z = 0, T = 0;
                    int64_t live = i + 1 < S ? i + 1 : S;
                    for (int64_t j = 0; j < live; j++) {
                        long double a = 0, t = 0;
                        for (int64_t e = 0; e < E; e++) {
                            long double x = val(&q, (bh * L + i) * E + e) * (long double)val(&k, (bh * S + j) * E + e);
                            a += x, t += fabsl(x);
                        }
                        s[j] = a * sc;
                        if (s[j] > mx) mx = s[j];
                        if (t * sc > T) T = t * sc;
                    }
                    for (int64_t j = 0; j < live; j++) z += expl(s[j] - mx);
                    for (int64_t e = 0; e < Ev; e++) {
                        long double ex = 0, mag = 0;
                        for (int64_t j = 0; j < live; j++) {
                            long double pj = expl(s[j] - mx) / z, vj = val(&v, (bh * S + j) * Ev + e);
                            ex += pj * vj, mag += pj * fabsl(vj);
                        }
                        double got = val(&y, (bh * L + i) * Ev + e);
                        double tol = (double)(E + S + 6) * u * (1 + 2 * (double)T) * (double)mag + 4 * u * (double)mag;
                        cr_assert(fabsl((long double)got - ex) <= tol, "%s L%lld S%lld item %lld row %lld col %lld: %.17g exact %.17Lg (tol %.3g)",
                                  goblin_dtype_name(dt), (long long)L, (long long)S, (long long)bh, (long long)i,
                                  (long long)e, got, ex, tol);
                    }
                }
            goblin_buffer_free(y.data);
            /* forward + backward nodes in one graph vs each alone */
            goblin_graph *g;
            cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
            int32_t id[4], o[4];
            goblin_tensor t4[4] = {go, q, k, v};
            for (int i = 0; i < 4; i++) cr_assert_eq(goblin_graph_input(g, dt, 4, t4[i].shape, &id[i]), GOBLIN_OK);
            cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SDPA, id + 1, 3, at, 1, &o[0]), GOBLIN_OK);
            for (int w = 0; w < 3; w++) {
                at[1] = A_INT(INDEX, (w + 1) % 3);
                cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SDPA_BACKWARD, id, 4, at, 2, &o[1 + w]), GOBLIN_OK);
            }
            for (int i = 0; i < 4; i++) cr_assert_eq(goblin_graph_output(g, o[i]), GOBLIN_OK);
            goblin_exec_params p;
            goblin_exec_params_default(&p);
            p.backend = GOBLIN_BACKEND_BLIS;
            p.threads = 2;
            goblin_tensor outs[4];
            memset(outs, 0, sizeof outs);
            cr_assert_eq(goblin_graph_eval(g, &p, t4, 4, outs, 4), GOBLIN_OK);
            for (int i = 0; i < 4; i++) {
                at[1] = A_INT(INDEX, (i + 0) % 3);
                goblin_tensor alone;
                if (i == 0) {
                    alone = run(GOBLIN_BACKEND_BLIS, 1, GOBLIN_OP_SDPA, fin, 3, at, 1);
                } else {
                    at[1] = A_INT(INDEX, i % 3);
                    alone = run(GOBLIN_BACKEND_BLIS, 3, GOBLIN_OP_SDPA_BACKWARD, t4, 4, at, 2);
                }
                int64_t n = goblin__numel(&alone);
                cr_assert(memcmp(outs[i].data, alone.data, (size_t)n * goblin_dtype_size(dt)) == 0,
                          "%s L%lld S%lld: output %d differs from the node alone", goblin_dtype_name(dt), (long long)L,
                          (long long)S, i);
                goblin_buffer_free(alone.data);
                goblin_buffer_free(outs[i].data);
            }
            goblin_graph_free(g);
            /* an inf at one row of q, k or v: the reference's NaN / inf pattern */
            for (int wi = 1; wi < 4; wi++) {
                goblin_tensor *tt = &t4[wi];
                int64_t rows = tt->shape[2], pos = (1 * rows + rows / 2 + 1) * tt->shape[3] + 1; /* item 1 */
                double old = val(tt, pos);
                if (dt == GOBLIN_DTYPE_F64) ((double *)tt->data)[pos] = INFINITY;
                else ((float *)tt->data)[pos] = INFINITY;
                for (int64_t which = -1; which < 3; which++) {
                    bool fw = which < 0;
                    at[1] = A_INT(INDEX, fw ? 0 : which);
                    goblin_tensor r = run(GOBLIN_BACKEND_REF, 1, fw ? GOBLIN_OP_SDPA : GOBLIN_OP_SDPA_BACKWARD,
                                          fw ? t4 + 1 : t4, fw ? 3 : 4, at, fw ? 1 : 2);
                    goblin_tensor b = run(GOBLIN_BACKEND_BLIS, 1, fw ? GOBLIN_OP_SDPA : GOBLIN_OP_SDPA_BACKWARD,
                                          fw ? t4 + 1 : t4, fw ? 3 : 4, at, fw ? 1 : 2);
                    for (int64_t i = 0; i < goblin__numel(&r); i++) {
                        double x = val(&b, i), yv = val(&r, i);
                        cr_assert(isnan(x) == isnan(yv) && isinf(x) == isinf(yv) &&
                                      (!isfinite(yv) ? isnan(yv) || x == yv : gt_close(x, yv, 1e-3, 1e-3)),
                                  "%s L%lld S%lld inf in input %d, which %lld: element %lld: blis %g ref %g",
                                  goblin_dtype_name(dt), (long long)L, (long long)S, wi, (long long)which,
                                  (long long)i, x, yv);
                    }
                    goblin_buffer_free(r.data);
                    goblin_buffer_free(b.data);
                }
                if (dt == GOBLIN_DTYPE_F64) ((double *)tt->data)[pos] = old;
                else ((float *)tt->data)[pos] = (float)old;
            }
            free(q.data);
            free(k.data);
            free(v.data);
            free(go.data);
        }
}

#ifdef GOBLIN_HAVE_BLIS
#include "backends/blis/blis_impl.h"

/* The CPU backend's kernel table: one kernel per op whatever the order in which its
 * families register (no op registered twice, no kernel chained through a saved
 * pointer), and the ops whose kernels used to be chained have theirs. */
Test(blis_table, one_kernel_per_op_in_any_order) {
    static goblin__kernel_fn fwd[GOBLIN_OP_COUNT], rev[GOBLIN_OP_COUNT];
    cr_assert_eq(goblin__blis_kernel_table(fwd, false), 0, "an op is registered twice");
    cr_assert_eq(goblin__blis_kernel_table(rev, true), 0, "an op is registered twice");
    int n = 0;
    for (int op = 0; op < GOBLIN_OP_COUNT; op++) {
        cr_assert_eq(fwd[op], rev[op], "op %d (%s): the table depends on the registration order", op,
                     goblin_op_name((goblin_op)op) ? goblin_op_name((goblin_op)op) : "?");
        n += fwd[op] != NULL;
    }
    const goblin_op chained[] = {GOBLIN_OP_ADD, GOBLIN_OP_SUB, GOBLIN_OP_MUL, GOBLIN_OP_DIV,
                                 GOBLIN_OP_EXP, GOBLIN_OP_ERF, GOBLIN_OP_GELU, GOBLIN_OP_SOFTMAX,
                                 GOBLIN_OP_LOG_SOFTMAX, GOBLIN_OP_LAYER_NORM_BACKWARD,
                                 GOBLIN_OP_GELU_BACKWARD, GOBLIN_OP_MATMUL, GOBLIN_OP_SDPA};
    for (size_t i = 0; i < sizeof chained / sizeof chained[0]; i++)
        cr_assert_not_null(fwd[chained[i]], "%s has no BLIS kernel", goblin_op_name(chained[i]));
    cr_assert_eq(fwd[GOBLIN_OP_SOFTMAX], fwd[GOBLIN_OP_LOG_SOFTMAX]);
    cr_assert_gt(n, 30);
    /* registering an op a second time is caught */
    goblin__blis_set(fwd, GOBLIN_OP_ADD, fwd[GOBLIN_OP_SUB]);
    cr_assert_neq(fwd[GOBLIN_OP_ADD], fwd[GOBLIN_OP_SUB], "a second registration replaced the first");
}
#endif
