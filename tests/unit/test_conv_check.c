/* test_conv_check.c - a convolution's claimed value judged by Freivalds' check over
 * patches (verify/conv_check.c, docs/verification.md "Checked execution"): CONV2D (with
 * and without a bias), CONV2D_BACKWARD_INPUT and CONV2D_BACKWARD_WEIGHT with stride,
 * padding, dilation and groups, f32 and f64. The honest claim is the library's own
 * kernel (through the graph API), checked first against an f64/long double loop here;
 * cheats are one element moved by 1.5x, 2x, 5x and 10x its own contract bound
 * (gamma_(K+2)(u) sum |terms|, K the terms of the op's matmul over patches) and a
 * whole output channel scaled by 1 + 1e-3. */
#include <criterion/criterion.h>
#include <goblin/goblin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_impl.h"
#include "verify/product.h"

static uint64_t rs;
static double urand(void) {
    uint64_t z = (rs += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-53 * 2.0 - 1.0;
}

typedef struct geo {
    int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups;
} geo;

static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

/* One conv node and its data: ops (0 forward, 1 backward input, 2 backward weight). */
typedef struct cv {
    goblin_op op;
    goblin_dtype dt;
    geo G;
    int64_t oh, ow;
    bool bias;
    goblin_graph *g;
    int32_t id;
    double *x, *w, *b, *gy; /* the operands in f64 (values representable in dt) */
    goblin_tensor in0, in1, tb, claim;
    void *d0, *d1, *db, *dc;
    int64_t nclaim;
} cv;

static void *typed(goblin_dtype dt, const double *v, int64_t n) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * goblin_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        if (dt == GOBLIN_DTYPE_F32) ((float *)p)[i] = (float)v[i];
        else ((double *)p)[i] = v[i];
    }
    return p;
}

static double *draws(goblin_dtype dt, int64_t n) {
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) v[i] = dt == GOBLIN_DTYPE_F32 ? (double)(float)urand() : urand();
    return v;
}

static double getc_(const cv *c, int64_t i) {
    return c->dt == GOBLIN_DTYPE_F32 ? ((float *)c->dc)[i] : ((double *)c->dc)[i];
}
static void setc_(cv *c, int64_t i, double v) {
    if (c->dt == GOBLIN_DTYPE_F32) ((float *)c->dc)[i] = (float)v;
    else ((double *)c->dc)[i] = v;
}

static cv cv_new(goblin_op op, goblin_dtype dt, geo G, bool bias, uint64_t seed) {
    cv c;
    memset(&c, 0, sizeof c);
    rs = seed;
    c.op = op, c.dt = dt, c.G = G, c.bias = bias;
    c.oh = out_size(G.h, G.kh, G.sh, G.ph, G.dh);
    c.ow = out_size(G.w, G.kw, G.sw, G.pw, G.dw);
    int64_t xs[4] = {G.n, G.c, G.h, G.w}, ws[4] = {G.o, G.c / G.groups, G.kh, G.kw}, ys[4] = {G.n, G.o, c.oh, c.ow};
    int64_t nx = G.n * G.c * G.h * G.w, nw = G.o * (G.c / G.groups) * G.kh * G.kw, ny = G.n * G.o * c.oh * c.ow;
    c.x = draws(dt, nx), c.w = draws(dt, nw), c.b = draws(dt, G.o), c.gy = draws(dt, ny);
    cr_assert_eq(goblin_graph_new(&c.g), GOBLIN_OK);
    int64_t st[2] = {G.sh, G.sw}, pd[2] = {G.ph, G.pw}, dl[2] = {G.dh, G.dw};
    goblin_attr at[5] = {goblin_attr_ints(GOBLIN_ATTR_STRIDE, st, 2), goblin_attr_ints(GOBLIN_ATTR_PADDING, pd, 2),
                         goblin_attr_ints(GOBLIN_ATTR_DILATION, dl, 2), goblin_attr_int(GOBLIN_ATTR_GROUPS, G.groups),
                         {0}};
    int32_t nat = 4, in[3];
    const int64_t *s0 = xs, *s1 = ws, *sc = ys;
    const double *v0 = c.x, *v1 = c.w;
    int64_t n0 = nx, n1 = nw;
    if (op == GOBLIN_OP_CONV2D_BACKWARD_INPUT) s0 = ys, s1 = ws, sc = xs, v0 = c.gy, v1 = c.w, n0 = ny, n1 = nw;
    if (op == GOBLIN_OP_CONV2D_BACKWARD_WEIGHT) s0 = ys, s1 = xs, sc = ws, v0 = c.gy, v1 = c.x, n0 = ny, n1 = nx;
    if (op != GOBLIN_OP_CONV2D) at[nat++] = goblin_attr_ints(GOBLIN_ATTR_SHAPE, sc, 4);
    cr_assert_eq(goblin_graph_input(c.g, dt, 4, s0, &in[0]), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(c.g, dt, 4, s1, &in[1]), GOBLIN_OK);
    if (bias) cr_assert_eq(goblin_graph_input(c.g, dt, 1, &G.o, &in[2]), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(c.g, op, in, bias ? 3 : 2, at, nat, &c.id), GOBLIN_OK, "%s",
                 goblin_graph_error(c.g));
    cr_assert_eq(goblin_graph_output(c.g, c.id), GOBLIN_OK);
    c.d0 = typed(dt, v0, n0), c.d1 = typed(dt, v1, n1), c.db = typed(dt, c.b, G.o);
    goblin_tensor_init(&c.in0, dt, 4, s0, c.d0);
    goblin_tensor_init(&c.in1, dt, 4, s1, c.d1);
    goblin_tensor_init(&c.tb, dt, 1, &G.o, c.db);
    c.nclaim = sc[0] * sc[1] * sc[2] * sc[3];
    c.dc = malloc((size_t)c.nclaim * goblin_dtype_size(dt));
    goblin_tensor_init(&c.claim, dt, 4, sc, c.dc);
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.threads = 1;
    goblin_tensor ins[3] = {c.in0, c.in1, c.tb};
    cr_assert_eq(goblin_graph_eval(c.g, &ep, ins, bias ? 3 : 2, &c.claim, 1), GOBLIN_OK);
    return c;
}

static void cv_free(cv *c) {
    goblin_graph_free(c->g);
    free(c->x), free(c->w), free(c->b), free(c->gy);
    free(c->d0), free(c->d1), free(c->db), free(c->dc);
}

/* Element @p e of the exact value (long double), its scale S = sum |terms|, its number
 * of matmul terms K and the norms of its matmul row and column (the element stage's
 * guarantee covers S >= 0.6 ||a|| ||b||). */
typedef struct ref {
    long double v;
    double S, na, nb;
    int64_t K;
} ref;

static ref reference(const cv *c, int64_t e) {
    const geo *G = &c->G;
    int64_t og = G->o / G->groups, cg = G->c / G->groups;
    ref r = {0, 0, 0, 0, 0};
    double na2 = 0, nb2 = 0;
    if (c->op == GOBLIN_OP_CONV2D) {
        int64_t ow = e % c->ow, oh = e / c->ow % c->oh, o = e / (c->ow * c->oh) % G->o, n = e / (c->ow * c->oh * G->o);
        int64_t gi = o / og;
        for (int64_t ci = 0; ci < cg; ci++)
            for (int64_t i = 0; i < G->kh; i++)
                for (int64_t j = 0; j < G->kw; j++) {
                    int64_t h = oh * G->sh - G->ph + i * G->dh, w = ow * G->sw - G->pw + j * G->dw;
                    double wv = c->w[((o * cg + ci) * G->kh + i) * G->kw + j];
                    nb2 += wv * wv;
                    if (h < 0 || h >= G->h || w < 0 || w >= G->w) continue;
                    double xv = c->x[((n * G->c + gi * cg + ci) * G->h + h) * G->w + w];
                    r.v += (long double)xv * wv;
                    r.S += fabs(xv * wv);
                    na2 += xv * xv;
                }
        r.K = cg * G->kh * G->kw;
        if (c->bias) {
            r.v += c->b[o];
            r.S += fabs(c->b[o]);
            na2 += 1, nb2 += c->b[o] * c->b[o];
            r.K++;
        }
    } else if (c->op == GOBLIN_OP_CONV2D_BACKWARD_INPUT) {
        int64_t w = e % G->w, h = e / G->w % G->h, ci = e / (G->w * G->h) % G->c, n = e / (G->w * G->h * G->c);
        int64_t gi = ci / cg;
        for (int64_t o = gi * og; o < (gi + 1) * og; o++)
            for (int64_t i = 0; i < G->kh; i++)
                for (int64_t j = 0; j < G->kw; j++) {
                    double wv = c->w[((o * cg + ci % cg) * G->kh + i) * G->kw + j];
                    nb2 += wv * wv;
                    int64_t th = h + G->ph - i * G->dh, tw = w + G->pw - j * G->dw;
                    if (th < 0 || tw < 0 || th % G->sh || tw % G->sw || th / G->sh >= c->oh || tw / G->sw >= c->ow)
                        continue;
                    double gv = c->gy[((n * G->o + o) * c->oh + th / G->sh) * c->ow + tw / G->sw];
                    r.v += (long double)gv * wv;
                    r.S += fabs(gv * wv);
                    na2 += gv * gv;
                }
        r.K = og * G->kh * G->kw;
    } else {
        int64_t j = e % G->kw, i = e / G->kw % G->kh, ci = e / (G->kw * G->kh) % cg, o = e / (G->kw * G->kh * cg);
        int64_t gi = o / og;
        for (int64_t n = 0; n < G->n; n++)
            for (int64_t oh = 0; oh < c->oh; oh++)
                for (int64_t ow = 0; ow < c->ow; ow++) {
                    double gv = c->gy[((n * G->o + o) * c->oh + oh) * c->ow + ow];
                    na2 += gv * gv;
                    int64_t h = oh * G->sh - G->ph + i * G->dh, w = ow * G->sw - G->pw + j * G->dw;
                    if (h < 0 || h >= G->h || w < 0 || w >= G->w) continue;
                    double xv = c->x[((n * G->c + gi * cg + ci) * G->h + h) * G->w + w];
                    r.v += (long double)gv * xv;
                    r.S += fabs(gv * xv);
                    nb2 += xv * xv;
                }
        r.K = G->n * c->oh * c->ow;
    }
    r.na = sqrt(na2), r.nb = sqrt(nb2);
    return r;
}

static double gam(const cv *c, int64_t K) {
    double u = c->dt == GOBLIN_DTYPE_F32 ? 0x1p-24 : 0x1p-53, t = (double)(K + 2) * u;
    return t / (1 - t);
}

static goblin_verdict judge(cv *c, uint64_t seed) {
    goblin_verdict v;
    cr_assert_eq(goblin__conv_check(&c->g->nodes[c->id], &c->in0, &c->in1, c->bias ? &c->tb : NULL, &c->claim, seed,
                                    0, &v),
                 GOBLIN_OK);
    return v;
}

static const char *opname(goblin_op op) {
    return op == GOBLIN_OP_CONV2D ? "conv2d" : op == GOBLIN_OP_CONV2D_BACKWARD_INPUT ? "backward_input" : "backward_weight";
}

/* The honest claim is within its contract of the exact value and is accepted; each
 * cheat is rejected. */
static void run_case(goblin_op op, goblin_dtype dt, geo G, bool bias, uint64_t seed) {
    cv c = cv_new(op, dt, G, bias, seed);
    const goblin__node *nd = &c.g->nodes[c.id];
    cr_assert(goblin__conv_checkable(nd, &c.g->nodes[nd->inputs[0]], &c.g->nodes[nd->inputs[1]],
                                     bias ? &c.g->nodes[nd->inputs[2]] : NULL));
    int64_t best = -1;
    double best_ratio = 0;
    for (int64_t e = 0; e < c.nclaim; e++) {
        ref r = reference(&c, e);
        double got = getc_(&c, e);
        cr_assert(fabsl((long double)got - r.v) <= gam(&c, r.K) * r.S + 1e-300, "%s: honest element %lld = %.17g, "
                  "exact %.17Lg", opname(op), (long long)e, got, r.v);
        double ratio = r.na > 0 && r.nb > 0 ? r.S / (r.na * r.nb) : 0;
        /* elements away from the first and last few, where S is as dense as the data's */
        if (ratio > best_ratio && e % 7 == 3) best_ratio = ratio, best = e;
    }
    for (uint64_t s = 1; s <= 3; s++) {
        goblin_verdict v = judge(&c, seed * 131 + s);
        cr_assert_eq(v.kind, GOBLIN_VERDICT_ACCEPT, "%s %s: honest claim: %s (%s), ratio %.3g", opname(op),
                     goblin_dtype_name(dt), goblin_verdict_name(v.kind), goblin_verify_reason_name(v.reason),
                     v.worst_ratio);
    }
    cr_assert(best >= 0 && best_ratio >= 0.6, "%s: no element with S >= 0.6 ||a|| ||b|| (best %.3g)", opname(op),
              best_ratio);
    double keep = getc_(&c, best);
    ref r = reference(&c, best);
    const double ks[4] = {1.5, 2, 5, 10};
    for (int q = 0; q < 4; q++) {
        for (int sign = -1; sign <= 1; sign += 2) {
            setc_(&c, best, (double)r.v + sign * ks[q] * gam(&c, r.K) * r.S);
            /* the element as stored is beyond 1.4x (f32 rounding of a 1.5x move) */
            cr_assert(fabsl((long double)getc_(&c, best) - r.v) > 1.4 * gam(&c, r.K) * r.S);
            goblin_verdict v = judge(&c, seed * 977 + (uint64_t)q * 2 + (uint64_t)(sign > 0));
            cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT, "%s %s: element %lld at %+gx its bound: %s (%s, ratio %.3g)",
                         opname(op), goblin_dtype_name(dt), (long long)best, sign * ks[q],
                         goblin_verdict_name(v.kind), goblin_verify_reason_name(v.reason), v.worst_ratio);
        }
        setc_(&c, best, keep);
    }
    /* a whole output channel (forward: o; backward input: c; weight: o) 1e-3 off */
    int64_t per = c.claim.shape[2] * c.claim.shape[3], ch = c.claim.shape[1];
    int64_t pick = ch / 2;
    for (int64_t n = 0; n < c.claim.shape[0]; n++)
        for (int64_t p = 0; p < per; p++) {
            int64_t e = (n * ch + pick) * per + p;
            setc_(&c, e, getc_(&c, e) * (1 + 1e-3));
        }
    goblin_verdict v = judge(&c, seed * 31 + 7);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT, "%s: a wrong channel: %s", opname(op), goblin_verdict_name(v.kind));
    cr_log_info("%s %s: honest accepted, 1.5x..10x and a wrong channel rejected (S/(|a||b|) %.2f)", opname(op),
                goblin_dtype_name(dt), best_ratio);
    cv_free(&c);
}

static const geo PLAIN = {2, 3, 9, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1};
static const geo STRIDED = {2, 4, 11, 10, 6, 3, 2, 2, 1, 1, 0, 2, 1, 2}; /* stride 2x1, pad 1x0, dilation 2x1, groups 2 */
static const geo WIDE = {3, 16, 8, 8, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1};   /* the CNN's second layer, batch 3 */

Test(conv_check, conv2d_honest_accepted_cheats_rejected) {
    run_case(GOBLIN_OP_CONV2D, GOBLIN_DTYPE_F32, PLAIN, false, 11);
    run_case(GOBLIN_OP_CONV2D, GOBLIN_DTYPE_F64, PLAIN, true, 12);
    run_case(GOBLIN_OP_CONV2D, GOBLIN_DTYPE_F32, STRIDED, true, 13);
    run_case(GOBLIN_OP_CONV2D, GOBLIN_DTYPE_F64, STRIDED, false, 14);
    run_case(GOBLIN_OP_CONV2D, GOBLIN_DTYPE_F32, WIDE, false, 15);
}

Test(conv_check, backward_input_honest_accepted_cheats_rejected) {
    run_case(GOBLIN_OP_CONV2D_BACKWARD_INPUT, GOBLIN_DTYPE_F32, PLAIN, false, 21);
    run_case(GOBLIN_OP_CONV2D_BACKWARD_INPUT, GOBLIN_DTYPE_F64, PLAIN, false, 22);
    run_case(GOBLIN_OP_CONV2D_BACKWARD_INPUT, GOBLIN_DTYPE_F32, STRIDED, false, 23);
    run_case(GOBLIN_OP_CONV2D_BACKWARD_INPUT, GOBLIN_DTYPE_F64, STRIDED, false, 24);
    run_case(GOBLIN_OP_CONV2D_BACKWARD_INPUT, GOBLIN_DTYPE_F32, WIDE, false, 25);
}

Test(conv_check, backward_weight_honest_accepted_cheats_rejected) {
    run_case(GOBLIN_OP_CONV2D_BACKWARD_WEIGHT, GOBLIN_DTYPE_F32, PLAIN, false, 31);
    run_case(GOBLIN_OP_CONV2D_BACKWARD_WEIGHT, GOBLIN_DTYPE_F64, PLAIN, false, 32);
    run_case(GOBLIN_OP_CONV2D_BACKWARD_WEIGHT, GOBLIN_DTYPE_F32, STRIDED, false, 33);
    run_case(GOBLIN_OP_CONV2D_BACKWARD_WEIGHT, GOBLIN_DTYPE_F64, STRIDED, false, 34);
    run_case(GOBLIN_OP_CONV2D_BACKWARD_WEIGHT, GOBLIN_DTYPE_F32, WIDE, false, 35);
}

Test(conv_check, wrong_shape_or_dtype_rejected_and_bad_operands_refused) {
    cv c = cv_new(GOBLIN_OP_CONV2D, GOBLIN_DTYPE_F32, PLAIN, false, 41);
    const goblin__node *nd = &c.g->nodes[c.id];
    goblin_tensor bad = c.claim;
    bad.shape[3]--;
    goblin_tensor_init(&bad, GOBLIN_DTYPE_F32, 4, bad.shape, c.dc);
    goblin_verdict v;
    cr_assert_eq(goblin__conv_check(nd, &c.in0, &c.in1, NULL, &bad, 1, 0, &v), GOBLIN_OK);
    cr_assert_eq(v.kind, GOBLIN_VERDICT_REJECT);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_SHAPE);
    goblin_tensor f64 = c.claim;
    f64.dtype = GOBLIN_DTYPE_F64;
    cr_assert_eq(goblin__conv_check(nd, &c.in0, &c.in1, NULL, &f64, 1, 0, &v), GOBLIN_OK);
    cr_assert_eq(v.reason, GOBLIN_VERIFY_DTYPE);
    cr_assert_eq(goblin__conv_check(nd, &c.in0, &c.in1, &c.tb, &c.claim, 1, 0, &v), GOBLIN_EINVAL, "no bias input");
    cr_assert_eq(goblin__conv_check(nd, NULL, &c.in1, NULL, &c.claim, 1, 0, &v), GOBLIN_EINVAL);
    /* a NaN in the claim: not accepted */
    setc_(&c, 5, NAN);
    cr_assert_neq(judge(&c, 3).kind, GOBLIN_VERDICT_ACCEPT);
    cv_free(&c);
}
