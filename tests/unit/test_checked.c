/* test_checked.c - checked execution (GOBLIN_VERIFY_CHECKED, docs/verification.md):
 * a product node's claimed value judged by Freivalds' check (verify/product.c), the
 * executor taking given values for nodes, and graph jobs whose workers return their
 * products: honest runs accepted with every task checked, and cheaters caught with no
 * honest worker to compare with (a pair sending the same wrong bits, wrong products
 * under right outputs, right products under wrong outputs). References are f64 loops. */
#include <criterion/criterion.h>
#include <math.h>
#include <goblin/goblin.h>

#include "runtime_util.h"
#include "graph/graph_impl.h"
#include "verify/product.h"

/* ---- a product checked alone ------------------------------------------------------ */

static float frand(uint64_t *s) { return (float)((double)(rt_rng(s) >> 11) * 0x1p-53 * 2.0 - 1.0); }

/* One MATMUL node of @p a_shape x @p b_shape (f32) with trans_b @p tb; the claimed
 * value as the library computes it honestly. */
typedef struct prod {
    goblin_graph *g;
    int32_t mm;
    bool tb, has_c;
    goblin_tensor a, b, c, cb; /* cb: the bias, when has_c */
    float *ad, *bd, *cd, *cbd;
} prod;

/* @p bias: with a c term of one row [n] (a linear layer's bias). */
static prod prod_new(int32_t ra, const int64_t *as, int32_t rb, const int64_t *bs, bool tb, bool bias,
                     uint64_t seed) {
    prod p;
    memset(&p, 0, sizeof p);
    p.tb = tb;
    p.has_c = bias;
    cr_assert_eq(goblin_graph_new(&p.g), GOBLIN_OK);
    int32_t x, y;
    cr_assert_eq(goblin_graph_input(p.g, GOBLIN_DTYPE_F32, ra, as, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(p.g, GOBLIN_DTYPE_F32, rb, bs, &y), GOBLIN_OK);
    int64_t ncol = tb ? bs[rb - 2] : bs[rb - 1];
    int32_t in[3] = {x, y, -1};
    if (bias) cr_assert_eq(goblin_graph_input(p.g, GOBLIN_DTYPE_F32, 1, &ncol, &in[2]), GOBLIN_OK);
    goblin_attr at = goblin_attr_int(GOBLIN_ATTR_TRANS_B, tb);
    cr_assert_eq(goblin_graph_add(p.g, GOBLIN_OP_MATMUL, in, bias ? 3 : 2, &at, 1, &p.mm), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(p.g, p.mm), GOBLIN_OK);
    int64_t na = 1, nb = 1;
    for (int d = 0; d < ra; d++) na *= as[d];
    for (int d = 0; d < rb; d++) nb *= bs[d];
    p.ad = malloc((size_t)na * sizeof(float));
    p.bd = malloc((size_t)nb * sizeof(float));
    for (int64_t i = 0; i < na; i++) p.ad[i] = frand(&seed);
    for (int64_t i = 0; i < nb; i++) p.bd[i] = frand(&seed);
    goblin_tensor_init(&p.a, GOBLIN_DTYPE_F32, ra, as, p.ad);
    goblin_tensor_init(&p.b, GOBLIN_DTYPE_F32, rb, bs, p.bd);
    p.cbd = malloc((size_t)ncol * sizeof(float));
    for (int64_t i = 0; i < ncol; i++) p.cbd[i] = frand(&seed) * 4.0f;
    goblin_tensor_init(&p.cb, GOBLIN_DTYPE_F32, 1, &ncol, p.cbd);
    goblin_tensor cs;
    goblin_graph_node(p.g, p.mm, NULL, &cs, NULL, NULL);
    p.cd = malloc((size_t)goblin_tensor_numel(&cs) * sizeof(float));
    goblin_tensor_init(&p.c, GOBLIN_DTYPE_F32, cs.rank, cs.shape, p.cd);
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.threads = 1;
    goblin_tensor ins[3] = {p.a, p.b, p.cb};
    cr_assert_eq(goblin_graph_eval(p.g, &ep, ins, bias ? 3 : 2, &p.c, 1), GOBLIN_OK);
    return p;
}

static void prod_free(prod *p) {
    goblin_graph_free(p->g);
    free(p->ad), free(p->bd), free(p->cd), free(p->cbd);
}

/* Element (bi, i, j) of the exact product (f64) and its contract scale S = sum |a||b|;
 * the batch broadcast from dims of size 1 (b may be rank 2). */
static double exact(const prod *p, int64_t bi, int64_t i, int64_t j, double *S) {
    int32_t ra = p->a.rank, rb = p->b.rank;
    int64_t m = p->a.shape[ra - 2], K = p->a.shape[ra - 1];
    int64_t n = p->c.shape[p->c.rank - 1];
    bool trans = p->tb;
    const float *A = p->ad + (ra > 2 ? bi * m * K : 0);
    int64_t bstride = p->b.shape[rb - 1] * p->b.shape[rb - 2];
    const float *B = p->bd + (rb > 2 && p->b.shape[0] > 1 ? bi * bstride : 0);
    double s = p->has_c ? p->cbd[j] : 0, sa = fabs(s);
    for (int64_t k = 0; k < K; k++) {
        double bv = trans ? B[j * K + k] : B[k * n + j];
        s += (double)A[i * K + k] * bv;
        sa += fabs((double)A[i * K + k] * bv);
    }
    *S = sa;
    return s;
}

/* gamma_{K+2}(u), the per-element contract factor of an f32 matmul (docs/verification.md) */
static double gamma_k(int64_t K) {
    double u = 0x1p-24, t = (double)(K + 2) * u;
    return t / (1 - t);
}

static void expect_verdict(const prod *p, const goblin_tensor *c, uint64_t seed, goblin_verdict_kind want,
                           const char *what) {
    goblin_verdict v;
    cr_assert_eq(goblin__product_check(&p->g->nodes[p->mm], &p->a, &p->b, p->has_c ? &p->cb : NULL, c, seed, &v), GOBLIN_OK);
    cr_assert_eq(v.kind, want, "%s: verdict %s (%s), worst ratio %.3g", what, goblin_verdict_name(v.kind),
                 goblin_verify_reason_name(v.reason), v.worst_ratio);
}

/* Perturb element (bi, i, j) of the honest claim by @p k times its own contract bound. */
static void bump(const prod *p, float *c, int64_t bi, int64_t i, int64_t j, double k) {
    int32_t rc = p->c.rank;
    int64_t m = p->c.shape[rc - 2], n = p->c.shape[rc - 1], K = p->a.shape[p->a.rank - 1];
    double S;
    (void)exact(p, bi, i, j, &S);
    c[(bi * m + i) * n + j] += (float)(k * gamma_k(K) * S);
}

static void check_honest_and_bumped(prod *p, int64_t batch) {
    int32_t rc = p->c.rank;
    int64_t m = p->c.shape[rc - 2], n = p->c.shape[rc - 1];
    /* the honest claim is the product (against the f64 reference) and is accepted */
    for (int64_t bi = 0; bi < batch; bi++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double S, e = exact(p, bi, i, j, &S);
                double got = p->cd[(bi * m + i) * n + j];
                cr_assert(fabs(got - e) <= gamma_k(p->a.shape[p->a.rank - 1]) * S + 1e-30,
                          "honest element (%lld, %lld, %lld) = %.9g, exact %.9g", (long long)bi, (long long)i,
                          (long long)j, got, e);
            }
    for (uint64_t seed = 1; seed <= 4; seed++) expect_verdict(p, &p->c, seed, GOBLIN_VERDICT_ACCEPT, "honest");
    size_t bytes = (size_t)goblin_tensor_numel(&p->c) * sizeof(float);
    float *w = malloc(bytes);
    goblin_tensor c = p->c;
    c.data = w;
    const double ks[] = {5, 10};
    for (int q = 0; q < 2; q++) {
        /* one element wrong, in the last batch item */
        memcpy(w, p->cd, bytes);
        bump(p, w, batch - 1, m / 2, n - 1, ks[q]);
        expect_verdict(p, &c, 11 + (uint64_t)q, GOBLIN_VERDICT_REJECT, "one element");
        /* every row of every item with one element wrong */
        memcpy(w, p->cd, bytes);
        for (int64_t bi = 0; bi < batch; bi++)
            for (int64_t i = 0; i < m; i++) bump(p, w, bi, i, (i * 7) % n, ks[q]);
        expect_verdict(p, &c, 21 + (uint64_t)q, GOBLIN_VERDICT_REJECT, "every row");
    }
    /* a wrong shape is a rejection, not an error */
    c = p->c;
    c.shape[rc - 1]--;
    goblin__contig_strides(c.rank, c.shape, c.strides);
    expect_verdict(p, &c, 5, GOBLIN_VERDICT_REJECT, "shape");
    free(w);
}

Test(checked, batched_product_with_transposed_b) {
    int64_t as[3] = {3, 20, 64}, bs[3] = {3, 48, 64};
    prod p = prod_new(3, as, 3, bs, true, false, 5);
    check_honest_and_bumped(&p, 3);
    prod_free(&p);
}

Test(checked, linear_layer_over_a_batch_is_one_check) {
    /* b shared by the batch: a [4, 16, 96] folds into [64, 96] */
    int64_t as[3] = {4, 16, 96}, bs[2] = {96, 24};
    prod p = prod_new(3, as, 2, bs, false, false, 6);
    check_honest_and_bumped(&p, 4);
    prod_free(&p);
}

Test(checked, product_with_a_bias_is_checked_as_one_more_term) {
    /* nn.Linear as captured: x [2, 24, 80] . W^T (W [40, 80]) + b [40] */
    int64_t as[3] = {2, 24, 80}, bs[2] = {40, 80};
    prod p = prod_new(3, as, 2, bs, true, true, 7);
    check_honest_and_bumped(&p, 2);
    /* the product without its bias is wrong by |b_j|, far above any bound */
    size_t bytes = (size_t)goblin_tensor_numel(&p.c) * sizeof(float);
    float *w = malloc(bytes);
    memcpy(w, p.cd, bytes);
    for (int64_t r = 0; r < 48; r++) w[r * 40 + 3] -= p.cbd[3];
    goblin_tensor c = p.c;
    c.data = w;
    expect_verdict(&p, &c, 9, GOBLIN_VERDICT_REJECT, "bias left out");
    free(w);
    prod_free(&p);
}

/* Honest products are never rejected: 600 products of random shapes (batched, a shared
 * b, transposed, with a bias), each computed honestly by the library and checked with a
 * fresh seed. */
Test(checked, honest_products_of_many_shapes_are_all_accepted, .timeout = 300) {
    uint64_t rs = 2024;
    int64_t rejected = 0, escalated = 0;
    for (int t = 0; t < 600; t++) {
        int64_t bt = 1 + (int64_t)(rt_rng(&rs) % 3), m = 1 + (int64_t)(rt_rng(&rs) % 40);
        int64_t k = 1 + (int64_t)(rt_rng(&rs) % 300), n = 1 + (int64_t)(rt_rng(&rs) % 40);
        bool tb = rt_rng(&rs) & 1, shared = rt_rng(&rs) & 1, bias = rt_rng(&rs) & 1;
        int64_t as[3] = {bt, m, k}, bs3[3] = {bt, tb ? n : k, tb ? k : n}, bs2[2] = {tb ? n : k, tb ? k : n};
        prod p = prod_new(3, as, shared ? 2 : 3, shared ? bs2 : bs3, tb, bias, 100 + (uint64_t)t);
        goblin_verdict v;
        cr_assert_eq(goblin__product_check(&p.g->nodes[p.mm], &p.a, &p.b, bias ? &p.cb : NULL, &p.c,
                                           rt_rng(&rs), &v), GOBLIN_OK);
        rejected += v.kind == GOBLIN_VERDICT_REJECT;
        escalated += v.kind == GOBLIN_VERDICT_ESCALATE;
        prod_free(&p);
    }
    cr_assert_eq(rejected, 0, "%lld of 600 honest products rejected", (long long)rejected);
    cr_assert_eq(escalated, 0, "%lld of 600 honest products escalated", (long long)escalated);
}

Test(checked, only_plain_float_matmuls_are_checkable) {
    int64_t as[2] = {4, 8}, bs[2] = {8, 3}, vs[1] = {8};
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int32_t a, b, v, ai, mm, mv, ms, mi;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, as, &a), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, bs, &b), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, vs, &v), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_I32, 2, as, &ai), GOBLIN_OK);
    int32_t in[2] = {a, b}, inv[2] = {a, v}, ini[2] = {ai, ai};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, in, 2, NULL, 0, &mm), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, inv, 2, NULL, 0, &mv), GOBLIN_OK);
    goblin_attr al = goblin_attr_float(GOBLIN_ATTR_ALPHA, 0.5);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, in, 2, &al, 1, &ms), GOBLIN_OK);
    goblin_attr tb = goblin_attr_int(GOBLIN_ATTR_TRANS_B, 1);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, ini, 2, &tb, 1, &mi), GOBLIN_OK);
    const goblin__node *N = g->nodes;
    cr_assert(goblin__product_checkable(&N[mm], &N[a], &N[b], NULL));
    cr_assert(!goblin__product_checkable(&N[mv], &N[a], &N[v], NULL), "a matrix-vector product (rank 1)");
    cr_assert(!goblin__product_checkable(&N[ms], &N[a], &N[b], NULL), "alpha != 1");
    cr_assert(!goblin__product_checkable(&N[mi], &N[ai], &N[ai], NULL), "integers");
    /* a bias: [n] yes; a c of several rows (a residual) no */
    int64_t cs1[1] = {3}, cs2[2] = {4, 3};
    int32_t c1, c2, mb, mr;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, cs1, &c1), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, cs2, &c2), GOBLIN_OK);
    int32_t inb[3] = {a, b, c1}, inr[3] = {a, b, c2};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, inb, 3, NULL, 0, &mb), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, inr, 3, NULL, 0, &mr), GOBLIN_OK);
    N = g->nodes;
    cr_assert(goblin__product_checkable(&N[mb], &N[a], &N[b], &N[c1]));
    cr_assert(!goblin__product_checkable(&N[mr], &N[a], &N[b], &N[c2]), "a c of several rows");
    goblin_graph_free(g);
}

/* ---- the executor takes given values ----------------------------------------------- */

Test(checked, exec_uses_a_given_value_for_a_node) {
    int64_t xs[2] = {3, 4}, ws[2] = {4, 2};
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int32_t x, w, mm, r, v;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, xs, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, ws, &w), GOBLIN_OK);
    int32_t in[2] = {x, w};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, in, 2, NULL, 0, &mm), GOBLIN_OK);
    int64_t rs[1] = {6};
    goblin_attr at = goblin_attr_ints(GOBLIN_ATTR_SHAPE, rs, 1);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &mm, 1, &at, 1, &v), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RELU, &v, 1, NULL, 0, &r), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, r), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, mm), GOBLIN_OK);
    float xd[12] = {0}, wd[8] = {0}, gd[6] = {1, -2, 3, -4, 5, -6}, out[6], mo[6];
    goblin_tensor ins[2], given, outs[2];
    goblin_tensor_init(&ins[0], GOBLIN_DTYPE_F32, 2, xs, xd);
    goblin_tensor_init(&ins[1], GOBLIN_DTYPE_F32, 2, ws, wd);
    int64_t gs[2] = {3, 2};
    goblin_tensor_init(&given, GOBLIN_DTYPE_F32, 2, gs, gd);
    goblin_tensor_init(&outs[0], GOBLIN_DTYPE_F32, 1, rs, out);
    goblin_tensor_init(&outs[1], GOBLIN_DTYPE_F32, 2, gs, mo);
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.given_ids = &mm;
    ep.given = &given;
    ep.n_given = 1;
    cr_assert_eq(goblin_graph_eval(g, &ep, ins, 2, outs, 2), GOBLIN_OK);
    /* x and w are zero: only the given value can make these */
    const float want[6] = {1, 0, 3, 0, 5, 0};
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(out[i], want[i], "relu(given)[%d] = %g", i, out[i]);
        cr_assert_eq(mo[i], gd[i]);
    }
    /* the wrong shape, an input node, a repeated id */
    int64_t bad[2] = {2, 3};
    goblin_tensor wrong = given;
    goblin_tensor_init(&wrong, GOBLIN_DTYPE_F32, 2, bad, gd);
    ep.given = &wrong;
    cr_assert_eq(goblin_graph_eval(g, &ep, ins, 2, outs, 2), GOBLIN_ESHAPE);
    ep.given = &given;
    ep.given_ids = &x;
    cr_assert_eq(goblin_graph_eval(g, &ep, ins, 2, outs, 2), GOBLIN_EINVAL);
    int32_t twice[2] = {mm, mm};
    goblin_tensor g2[2] = {given, given};
    ep.given_ids = twice;
    ep.given = g2;
    ep.n_given = 2;
    cr_assert_eq(goblin_graph_eval(g, &ep, ins, 2, outs, 2), GOBLIN_EINVAL);
    goblin_graph_free(g);
}

/* ---- graph jobs under CHECKED ----------------------------------------------------- */

/* y = relu(x W1 + b1) W2 (f32), outputs y (per row) and s = sum_0 y: a two-layer MLP,
 * its work in its two products. */
typedef struct net {
    goblin_graph *g;
    int64_t B, D, H, O;
    float *x, *w1, *b1, *w2, *y, *s;
    double *ry, *rs; /* f64 reference */
    goblin_tensor in[4], out[2];
} net;

static net net_new(int64_t B, int64_t D, int64_t H, int64_t O, bool products) {
    net m;
    memset(&m, 0, sizeof m);
    m.B = B, m.D = D, m.H = H, m.O = O;
    cr_assert_eq(goblin_graph_new(&m.g), GOBLIN_OK);
    int64_t sx[2] = {B, D}, s1[2] = {D, H}, sb[1] = {H}, s2[2] = {H, O};
    if (!products) s1[0] = B, s2[0] = B; /* elementwise operands have the batch too */
    int32_t x, w1, b1, w2, h, a, r, y, s;
    cr_assert_eq(goblin_graph_input(m.g, GOBLIN_DTYPE_F32, 2, sx, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(m.g, GOBLIN_DTYPE_F32, 2, s1, &w1), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(m.g, GOBLIN_DTYPE_F32, 1, sb, &b1), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(m.g, GOBLIN_DTYPE_F32, 2, s2, &w2), GOBLIN_OK);
    int32_t i1[2] = {x, w1};
    if (products) {
        cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_MATMUL, i1, 2, NULL, 0, &h), GOBLIN_OK);
    } else { /* no product: y = relu(x + 1)-like work only (D == H == O) */
        cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_ADD, i1, 2, NULL, 0, &h), GOBLIN_OK);
    }
    int32_t i2[2] = {h, b1};
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_ADD, i2, 2, NULL, 0, &a), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_RELU, &a, 1, NULL, 0, &r), GOBLIN_OK);
    int32_t i3[2] = {r, w2};
    if (products) cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_MATMUL, i3, 2, NULL, 0, &y), GOBLIN_OK);
    else cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_MUL, i3, 2, NULL, 0, &y), GOBLIN_OK);
    int64_t ax0[1] = {0};
    goblin_attr at = goblin_attr_ints(GOBLIN_ATTR_AXES, ax0, 1);
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_SUM, &y, 1, &at, 1, &s), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(m.g, y), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(m.g, s), GOBLIN_OK);
    uint64_t seed = 99;
    int64_t n1 = products ? D * H : B * D, n2 = products ? H * O : B * H;
    m.x = malloc((size_t)(B * D) * sizeof(float));
    m.w1 = malloc((size_t)n1 * sizeof(float));
    m.b1 = malloc((size_t)H * sizeof(float));
    m.w2 = malloc((size_t)n2 * sizeof(float));
    for (int64_t i = 0; i < B * D; i++) m.x[i] = frand(&seed);
    for (int64_t i = 0; i < n1; i++) m.w1[i] = frand(&seed) * 0.2f;
    for (int64_t i = 0; i < H; i++) m.b1[i] = frand(&seed) * 0.1f;
    for (int64_t i = 0; i < n2; i++) m.w2[i] = frand(&seed) * 0.2f;
    goblin_tensor_init(&m.in[0], GOBLIN_DTYPE_F32, 2, sx, m.x);
    goblin_tensor_init(&m.in[1], GOBLIN_DTYPE_F32, 2, s1, m.w1);
    goblin_tensor_init(&m.in[2], GOBLIN_DTYPE_F32, 1, sb, m.b1);
    goblin_tensor_init(&m.in[3], GOBLIN_DTYPE_F32, 2, s2, m.w2);
    m.y = calloc((size_t)(B * O), sizeof(float));
    m.s = calloc((size_t)O, sizeof(float));
    int64_t sy[2] = {B, O}, ss[1] = {O};
    goblin_tensor_init(&m.out[0], GOBLIN_DTYPE_F32, 2, sy, m.y);
    goblin_tensor_init(&m.out[1], GOBLIN_DTYPE_F32, 1, ss, m.s);
    /* the f64 reference */
    m.ry = calloc((size_t)(B * O), sizeof(double));
    m.rs = calloc((size_t)O, sizeof(double));
    double *hr = calloc((size_t)H, sizeof(double));
    for (int64_t b = 0; b < B; b++) {
        for (int64_t j = 0; j < H; j++) {
            double t = 0;
            if (products)
                for (int64_t k = 0; k < D; k++) t += (double)m.x[b * D + k] * m.w1[k * H + j];
            else t = (double)m.x[b * D + j] + m.w1[b * H + j];
            t += m.b1[j];
            hr[j] = t > 0 ? t : 0;
        }
        for (int64_t o = 0; o < O; o++) {
            double t = 0;
            if (products)
                for (int64_t j = 0; j < H; j++) t += hr[j] * m.w2[j * O + o];
            else t = hr[o] * m.w2[b * O + o];
            m.ry[b * O + o] = t;
            m.rs[o] += t;
        }
    }
    free(hr);
    return m;
}

static void net_free(net *m) {
    goblin_graph_free(m->g);
    free(m->x), free(m->w1), free(m->b1), free(m->w2), free(m->y), free(m->s), free(m->ry), free(m->rs);
}

/* The job's outputs are the f64 reference's (f32 rounding of sums of at most a few
 * hundred terms of size < 1: 1e-4 is far above honest error and far below any cheat). */
static void expect_reference(const net *m) {
    for (int64_t i = 0; i < m->B * m->O; i++)
        cr_assert(fabs(m->y[i] - m->ry[i]) <= 1e-4 * (1 + fabs(m->ry[i])), "y[%lld] = %.7g, reference %.7g",
                  (long long)i, m->y[i], m->ry[i]);
    for (int64_t o = 0; o < m->O; o++)
        cr_assert(fabs(m->s[o] - m->rs[o]) <= 1e-3 * (1 + fabs(m->rs[o])), "s[%lld] = %.7g, reference %.7g",
                  (long long)o, m->s[o], m->rs[o]);
}

static void log_stderr(void *user, goblin_log_level lvl, const char *line) {
    (void)user, (void)lvl;
    fprintf(stderr, "node: %s\n", line);
}

typedef struct run_out {
    goblin_node_stats st;
    int64_t misbehaved;
} run_out;

/* Run @p m on a node with @p nw workers (the last @p cheaters misbehaving with @p mode)
 * in chunks of @p rows, under the default graph-job parameters (CHECKED). */
static void run_job(net *m, const char *url, int nw, int cheaters, goblin_misbehave mode, int64_t rows,
                    run_out *o) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.recompute_threads = 1;
    if (getenv("GOBLIN_TEST_LOG")) np.log = log_stderr;
    goblin_worker_params wp[4];
    for (int i = 0; i < nw; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    for (int i = nw - cheaters; i < nw; i++) rt_faults[i] = (rt_fault){.mode = mode, .rate = 1.0, .seed = 3};
    rt_grid g;
    rt_grid_start_joined(&g, url, &np, wp, nw);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    cr_assert_eq(jp.verify, GOBLIN_VERIFY_CHECKED, "checked execution is the default");
    jp.chunk_rows = rows;
    goblin_job *job = rt_run_graph(g.node, m->g, m->in, 4, m->out, 2, &jp);
    goblin_job_free(job);
    memset(o, 0, sizeof *o);
    goblin_node_stats_get(g.node, &o->st);
    for (int i = 0; i < nw; i++) {
        goblin_worker_stats ws;
        goblin_worker_stats_get(g.w[i], &ws);
        o->misbehaved += ws.misbehaved;
    }
    rt_grid_stop(&g);
}

Test(checked, honest_workers_are_never_rejected, .timeout = 120) {
    net m = net_new(192, 256, 256, 64, true);
    run_out o;
    run_job(&m, "inproc://test-checked-honest", 2, 0, GOBLIN_MISBEHAVE_NONE, 48, &o);
    expect_reference(&m);
    cr_assert_eq(o.st.tasks_checked, 4, "every task checked (%lld)", (long long)o.st.tasks_checked);
    cr_assert_eq(o.st.products_checked, 8);
    cr_assert_eq(o.st.results_rejected, 0);
    cr_assert_eq(o.st.results_escalated, 0);
    cr_assert_eq(o.st.replicas_issued, 0, "no replica needed");
    cr_assert_eq(o.st.node_recomputed, 0, "no task recomputed whole");
    cr_assert_eq(o.st.workers_quarantined, 0);
    net_free(&m);
}

/* Two workers of one attacker, nobody else: each result is judged on its own. */
static void expect_caught(goblin_misbehave mode, const char *url) {
    net m = net_new(64, 256, 256, 64, true);
    run_out o;
    run_job(&m, url, 2, 2, mode, 64, &o);
    expect_reference(&m); /* no wrong value in the answer */
    cr_assert_geq(o.misbehaved, 1);
    cr_assert_geq(o.st.results_rejected, 1, "%s: rejected %lld", rt_misbehave_name(mode),
                  (long long)o.st.results_rejected);
    cr_assert_eq(o.st.results_accepted, 0, "%s: a cheat was accepted", rt_misbehave_name(mode));
    cr_assert_geq(o.st.workers_quarantined, 1);
    cr_assert_eq(o.st.replicas_agreed, 0);
    fprintf(stderr, "checked, %s pair: %lld sent wrong, %lld rejected, %lld accepted, %lld quarantined\n",
            rt_misbehave_name(mode), (long long)o.misbehaved, (long long)o.st.results_rejected,
            (long long)o.st.results_accepted, (long long)o.st.workers_quarantined);
    net_free(&m);
}

Test(checked, a_colluding_pair_sending_the_same_wrong_bits_is_caught, .timeout = 120) {
    expect_caught(GOBLIN_MISBEHAVE_NEGATE, "inproc://test-checked-negate");
}

Test(checked, wrong_products_under_right_outputs_are_caught, .timeout = 120) {
    expect_caught(GOBLIN_MISBEHAVE_PRODUCTS, "inproc://test-checked-products");
}

Test(checked, right_products_under_wrong_outputs_are_caught, .timeout = 120) {
    expect_caught(GOBLIN_MISBEHAVE_NEGATE_REST, "inproc://test-checked-rest");
}

/* With an honest worker among cheaters: every task done, the answer right, only the
 * cheaters quarantined. */
Test(checked, cheaters_among_honest_workers_change_nothing, .timeout = 120) {
    net m = net_new(192, 256, 256, 64, true);
    run_out o;
    run_job(&m, "inproc://test-checked-mixed", 3, 2, GOBLIN_MISBEHAVE_NEGATE, 48, &o);
    expect_reference(&m);
    cr_assert_geq(o.st.results_rejected, 1);
    cr_assert_leq(o.st.workers_quarantined, 2);
    cr_assert_eq(o.st.tasks_completed, 4);
    cr_assert_eq(o.st.replicas_agreed, 0);
    net_free(&m);
}

/* A graph with no product: checked execution does not apply and the job is replicated. */
Test(checked, a_graph_without_products_falls_back_to_replication, .timeout = 120) {
    net m = net_new(64, 32, 32, 32, false);
    run_out o;
    run_job(&m, "inproc://test-checked-fallback", 2, 0, GOBLIN_MISBEHAVE_NONE, 16, &o);
    expect_reference(&m);
    cr_assert_eq(o.st.tasks_checked, 0);
    cr_assert_eq(o.st.products_checked, 0);
    cr_assert_eq(o.st.results_rejected, 0);
    net_free(&m);
}

/* ---- convolutions and attention as heavy nodes ------------------------------------ */

/* A graph job of @p g (inputs @p in, outputs @p out) on @p nw workers, the last
 * @p cheaters misbehaving with @p mode, in chunks of @p rows. */
static void run_graph_job(const goblin_graph *g, const goblin_tensor *in, int32_t nin, goblin_tensor *out,
                          int32_t nout, const char *url, int nw, int cheaters, goblin_misbehave mode, int64_t rows,
                          run_out *o) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.recompute_threads = 1;
    if (getenv("GOBLIN_TEST_LOG")) np.log = log_stderr;
    goblin_worker_params wp[4];
    for (int i = 0; i < nw; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    for (int i = nw - cheaters; i < nw; i++) rt_faults[i] = (rt_fault){.mode = mode, .rate = 1.0, .seed = 3};
    rt_grid gr;
    rt_grid_start_joined(&gr, url, &np, wp, nw);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = rows;
    jp.checked_max_share = 1; /* checked whatever the estimate (these graphs are all heavy nodes) */
    goblin_job *job = rt_run_graph(gr.node, g, in, nin, out, nout, &jp);
    goblin_job_free(job);
    memset(o, 0, sizeof *o);
    goblin_node_stats_get(gr.node, &o->st);
    for (int i = 0; i < nw; i++) {
        goblin_worker_stats ws;
        goblin_worker_stats_get(gr.w[i], &ws);
        o->misbehaved += ws.misbehaved;
    }
    rt_grid_stop(&gr);
}

/* f64 conv2d of x [N, C, H, W] with w [O, C/G, kh, kw] (+ b), stride/pad/dilation. */
static void conv_ref(const double *x, const double *w, const double *b, int64_t N, int64_t C, int64_t H, int64_t W,
                     int64_t O, int64_t G, int64_t kh, int64_t kw, const int64_t *st, const int64_t *pd,
                     const int64_t *dl, int64_t OH, int64_t OW, double *y) {
    int64_t cg = C / G, og = O / G;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double s = b ? b[o] : 0;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t i = 0; i < kh; i++)
                            for (int64_t j = 0; j < kw; j++) {
                                int64_t h = oh * st[0] - pd[0] + i * dl[0], ww = ow * st[1] - pd[1] + j * dl[1];
                                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                                s += x[((n * C + (o / og) * cg + c) * H + h) * W + ww] * w[((o * cg + c) * kh + i) * kw + j];
                            }
                    y[((n * O + o) * OH + oh) * OW + ow] = s;
                }
}

/* y = conv(relu(conv(x, w1, b1; stride 2x1, padding 1, dilation 1x2, groups 2)), w2;
 * padding 1), and s = sum_0 y (f32). */
typedef struct cnet {
    goblin_graph *g;
    float *d[4], *y, *s;
    double *ry, *rs;
    goblin_tensor in[4], out[2];
    int64_t ny, ns;
} cnet;

static cnet cnet_new(int64_t B) {
    cnet m;
    memset(&m, 0, sizeof m);
    const int64_t C = 8, H = 12, W = 12, O1 = 64, O2 = 16;
    int64_t st[2] = {2, 1}, pd[2] = {1, 1}, dl[2] = {1, 2}, one[2] = {1, 1};
    int64_t OH1 = (H + 2 - 2 - 1) / 2 + 1, OW1 = (W + 2 - 4 - 1) / 1 + 1;
    int64_t sx[4] = {B, C, H, W}, s1[4] = {O1, C / 2, 3, 3}, sb[1] = {O1}, s2[4] = {O2, O1, 3, 3};
    cr_assert_eq(goblin_graph_new(&m.g), GOBLIN_OK);
    int32_t x, w1, b1, w2, c1, r, c2, s;
    cr_assert_eq(goblin_graph_input(m.g, GOBLIN_DTYPE_F32, 4, sx, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(m.g, GOBLIN_DTYPE_F32, 4, s1, &w1), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(m.g, GOBLIN_DTYPE_F32, 1, sb, &b1), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(m.g, GOBLIN_DTYPE_F32, 4, s2, &w2), GOBLIN_OK);
    goblin_attr a1[4] = {goblin_attr_ints(GOBLIN_ATTR_STRIDE, st, 2), goblin_attr_ints(GOBLIN_ATTR_PADDING, pd, 2),
                         goblin_attr_ints(GOBLIN_ATTR_DILATION, dl, 2), goblin_attr_int(GOBLIN_ATTR_GROUPS, 2)};
    int32_t i1[3] = {x, w1, b1};
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_CONV2D, i1, 3, a1, 4, &c1), GOBLIN_OK, "%s", goblin_graph_error(m.g));
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_RELU, &c1, 1, NULL, 0, &r), GOBLIN_OK);
    goblin_attr a2 = goblin_attr_ints(GOBLIN_ATTR_PADDING, one, 2);
    int32_t i2[2] = {r, w2};
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_CONV2D, i2, 2, &a2, 1, &c2), GOBLIN_OK);
    int64_t ax0[1] = {0};
    goblin_attr at = goblin_attr_ints(GOBLIN_ATTR_AXES, ax0, 1);
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_SUM, &c2, 1, &at, 1, &s), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(m.g, c2), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(m.g, s), GOBLIN_OK);
    int64_t n[4] = {B * C * H * W, O1 * (C / 2) * 9, O1, O2 * O1 * 9};
    const int64_t *shp[4] = {sx, s1, sb, s2};
    int32_t rk[4] = {4, 4, 1, 4};
    double *dd[4];
    uint64_t seed = 5;
    for (int q = 0; q < 4; q++) {
        m.d[q] = malloc((size_t)n[q] * sizeof(float));
        dd[q] = malloc((size_t)n[q] * sizeof(double));
        for (int64_t i = 0; i < n[q]; i++) dd[q][i] = m.d[q][i] = frand(&seed) * (q == 0 ? 1.0f : 0.3f);
        goblin_tensor_init(&m.in[q], GOBLIN_DTYPE_F32, rk[q], shp[q], m.d[q]);
    }
    int64_t nh = B * O1 * OH1 * OW1;
    m.ny = B * O2 * OH1 * OW1, m.ns = O2 * OH1 * OW1;
    double *h = malloc((size_t)nh * sizeof(double));
    m.ry = malloc((size_t)m.ny * sizeof(double));
    m.rs = calloc((size_t)m.ns, sizeof(double));
    conv_ref(dd[0], dd[1], dd[2], B, C, H, W, O1, 2, 3, 3, st, pd, dl, OH1, OW1, h);
    for (int64_t i = 0; i < nh; i++) h[i] = h[i] > 0 ? h[i] : 0;
    conv_ref(h, dd[3], NULL, B, O1, OH1, OW1, O2, 1, 3, 3, one, one, one, OH1, OW1, m.ry);
    for (int64_t i = 0; i < m.ny; i++) m.rs[i % m.ns] += m.ry[i];
    for (int q = 0; q < 4; q++) free(dd[q]);
    free(h);
    m.y = calloc((size_t)m.ny, sizeof(float));
    m.s = calloc((size_t)m.ns, sizeof(float));
    int64_t sy[4] = {B, O2, OH1, OW1};
    goblin_tensor_init(&m.out[0], GOBLIN_DTYPE_F32, 4, sy, m.y);
    goblin_tensor_init(&m.out[1], GOBLIN_DTYPE_F32, 3, sy + 1, m.s);
    return m;
}

static void cnet_free(cnet *m) {
    goblin_graph_free(m->g);
    for (int q = 0; q < 4; q++) free(m->d[q]);
    free(m->y), free(m->s), free(m->ry), free(m->rs);
}

static void expect_outputs(const float *y, const double *ry, int64_t n, const float *s, const double *rs, int64_t ns) {
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(y[i] - ry[i]) <= 1e-4 * (1 + fabs(ry[i])), "y[%lld] = %.7g, reference %.7g", (long long)i, y[i],
                  ry[i]);
    for (int64_t i = 0; i < ns; i++)
        cr_assert(fabs(s[i] - rs[i]) <= 1e-3 * (1 + fabs(rs[i])), "s[%lld] = %.7g, reference %.7g", (long long)i, s[i],
                  rs[i]);
}

Test(checked, convolutions_are_checked_not_recomputed, .timeout = 120) {
    cnet m = cnet_new(12);
    run_out o;
    run_graph_job(m.g, m.in, 4, m.out, 2, "inproc://test-checked-conv", 2, 0, GOBLIN_MISBEHAVE_NONE, 4, &o);
    expect_outputs(m.y, m.ry, m.ny, m.s, m.rs, m.ns);
    cr_assert_eq(o.st.tasks_checked, 3, "every task checked (%lld)", (long long)o.st.tasks_checked);
    cr_assert_eq(o.st.products_checked, 6, "both convolutions of each task (%lld)", (long long)o.st.products_checked);
    cr_assert_eq(o.st.results_rejected, 0);
    cr_assert_eq(o.st.results_escalated, 0);
    cr_assert_eq(o.st.replicas_issued, 0);
    cr_assert_eq(o.st.node_recomputed, 0);
    cnet_free(&m);
}

static void expect_conv_caught(goblin_misbehave mode, const char *url) {
    cnet m = cnet_new(12);
    run_out o;
    run_graph_job(m.g, m.in, 4, m.out, 2, url, 2, 2, mode, 8, &o);
    expect_outputs(m.y, m.ry, m.ny, m.s, m.rs, m.ns);
    cr_assert_geq(o.misbehaved, 1);
    cr_assert_geq(o.st.results_rejected, 1, "%s: rejected %lld", rt_misbehave_name(mode),
                  (long long)o.st.results_rejected);
    cr_assert_eq(o.st.results_accepted, 0, "%s: a cheat was accepted", rt_misbehave_name(mode));
    cr_assert_geq(o.st.workers_quarantined, 1);
    cnet_free(&m);
}

Test(checked, wrong_convolutions_under_right_outputs_are_caught, .timeout = 120) {
    expect_conv_caught(GOBLIN_MISBEHAVE_PRODUCTS, "inproc://test-checked-conv-products");
}

Test(checked, one_wrong_convolution_element_is_caught, .timeout = 120) {
    expect_conv_caught(GOBLIN_MISBEHAVE_ONE_ELEMENT, "inproc://test-checked-conv-one");
}

/* o = sdpa(q, k, v; causal) [B, 2, 16, 8] and s = sum_0 o (f32); the f64 reference. */
typedef struct anet {
    goblin_graph *g;
    float *d[3], *y, *s;
    double *ry, *rs;
    goblin_tensor in[3], out[2];
    int64_t ny, ns;
} anet;

static anet anet_new(int64_t B) {
    anet m;
    memset(&m, 0, sizeof m);
    const int64_t Hh = 2, L = 16, E = 8;
    int64_t sq[4] = {B, Hh, L, E};
    cr_assert_eq(goblin_graph_new(&m.g), GOBLIN_OK);
    int32_t id[3], o, s;
    for (int q = 0; q < 3; q++) cr_assert_eq(goblin_graph_input(m.g, GOBLIN_DTYPE_F32, 4, sq, &id[q]), GOBLIN_OK);
    goblin_attr ca = goblin_attr_int(GOBLIN_ATTR_CAUSAL, 1);
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_SDPA, id, 3, &ca, 1, &o), GOBLIN_OK, "%s", goblin_graph_error(m.g));
    int64_t ax0[1] = {0};
    goblin_attr at = goblin_attr_ints(GOBLIN_ATTR_AXES, ax0, 1);
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_SUM, &o, 1, &at, 1, &s), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(m.g, o), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(m.g, s), GOBLIN_OK);
    m.ny = B * Hh * L * E, m.ns = Hh * L * E;
    uint64_t seed = 8;
    for (int q = 0; q < 3; q++) {
        m.d[q] = malloc((size_t)m.ny * sizeof(float));
        for (int64_t i = 0; i < m.ny; i++) m.d[q][i] = frand(&seed);
        goblin_tensor_init(&m.in[q], GOBLIN_DTYPE_F32, 4, sq, m.d[q]);
    }
    m.ry = calloc((size_t)m.ny, sizeof(double));
    m.rs = calloc((size_t)m.ns, sizeof(double));
    double sc = 1 / sqrt((double)E), p[16];
    for (int64_t b = 0; b < B * Hh; b++)
        for (int64_t i = 0; i < L; i++) {
            double mx = -INFINITY, z = 0;
            for (int64_t j = 0; j <= i; j++) {
                double t = 0;
                for (int64_t e = 0; e < E; e++) t += (double)m.d[0][(b * L + i) * E + e] * m.d[1][(b * L + j) * E + e];
                p[j] = t * sc;
                mx = fmax(mx, p[j]);
            }
            for (int64_t j = 0; j <= i; j++) z += (p[j] = exp(p[j] - mx));
            for (int64_t e = 0; e < E; e++) {
                double t = 0;
                for (int64_t j = 0; j <= i; j++) t += p[j] / z * m.d[2][(b * L + j) * E + e];
                m.ry[(b * L + i) * E + e] = t;
            }
        }
    for (int64_t i = 0; i < m.ny; i++) m.rs[i % m.ns] += m.ry[i];
    m.y = calloc((size_t)m.ny, sizeof(float));
    m.s = calloc((size_t)m.ns, sizeof(float));
    goblin_tensor_init(&m.out[0], GOBLIN_DTYPE_F32, 4, sq, m.y);
    goblin_tensor_init(&m.out[1], GOBLIN_DTYPE_F32, 3, sq + 1, m.s);
    return m;
}

static void anet_free(anet *m) {
    goblin_graph_free(m->g);
    for (int q = 0; q < 3; q++) free(m->d[q]);
    free(m->y), free(m->s), free(m->ry), free(m->rs);
}

Test(checked, attention_is_checked_on_a_sample, .timeout = 120) {
    anet m = anet_new(32);
    run_out o;
    run_graph_job(m.g, m.in, 3, m.out, 2, "inproc://test-checked-sdpa", 2, 0, GOBLIN_MISBEHAVE_NONE, 16, &o);
    expect_outputs(m.y, m.ry, m.ny, m.s, m.rs, m.ns);
    cr_assert_eq(o.st.tasks_checked, 2, "every task checked (%lld)", (long long)o.st.tasks_checked);
    cr_assert_eq(o.st.products_checked, 2);
    cr_assert_eq(o.st.results_rejected, 0);
    cr_assert_eq(o.st.results_escalated, 0);
    cr_assert_eq(o.st.node_recomputed, 0);
    anet_free(&m);
}

Test(checked, wrong_attention_under_right_outputs_is_caught, .timeout = 120) {
    /* every value 1e-3 off: any sample sees it */
    anet m = anet_new(32);
    run_out o;
    run_graph_job(m.g, m.in, 3, m.out, 2, "inproc://test-checked-sdpa-products", 2, 2, GOBLIN_MISBEHAVE_PRODUCTS, 16,
                  &o);
    expect_outputs(m.y, m.ry, m.ny, m.s, m.rs, m.ns);
    cr_assert_geq(o.misbehaved, 1);
    cr_assert_geq(o.st.results_rejected, 1, "rejected %lld", (long long)o.st.results_rejected);
    cr_assert_eq(o.st.results_accepted, 0, "a cheat was accepted");
    anet_free(&m);
}
