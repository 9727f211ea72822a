/* tests/unit/test_train.c - the trainer (train.h): gradients against finite differences
 * of a hand-written f64 loss, trajectories against a reference built from the graph
 * API (goblin_graph_backward + goblin_graph_eval) and optim.h, stages and tiles under a
 * tiny memory budget, micro-batches, a cheating worker, checkpoints, bad inputs. */
#include <criterion/criterion.h>
#include <goblin/goblin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime_util.h"
#include "hostile_peer.h" /* hp_free_port */
#include "testutil.h"

/* ---- the model: an MLP (tanh) with a linear classifier and cross-entropy ------------ */

#define MAXL 6

typedef struct mlp {
    int nl;             /* layers */
    int64_t dims[MAXL + 1];
    int64_t batch;
    goblin_graph *g;
    int32_t n_params;   /* 2 * nl: W_l [out, in] (nn.Linear layout), b_l [out] */
    double *p[2 * MAXL];
    int64_t pn[2 * MAXL];
    int32_t prank[2 * MAXL];
    int64_t pshape[2 * MAXL][4];
    int32_t xrank;
    int64_t xshape[4];
    double *x;          /* [batch, dims[0]] (or xshape) */
    int64_t *y;         /* [batch] */
} mlp;

static double urand(uint64_t *s) { return (double)(rt_rng(s) >> 11) * 0x1p-53 * 2.0 - 1.0; }

static void mlp_build_tied(mlp *m, int nl, const int64_t *dims, int64_t batch, uint64_t seed,
                           int loss_kind, bool tie);

static double g_drop_p; /* > 0: a DROPOUT (seed 7 + layer) after every hidden tanh */

/* Build the graph; @p loss_kind 0: cross-entropy; 1: logits as output 0 (not a scalar);
 * 2: loss through CUMSUM (no backward rule). */
static void mlp_build(mlp *m, int nl, const int64_t *dims, int64_t batch, uint64_t seed,
                      int loss_kind) {
    mlp_build_tied(m, nl, dims, batch, seed, loss_kind, false);
}

/* @p tie: every layer but the last multiplies by W_0 (square: dims[0] == dims[1] == ...),
 * so W_0's gradient sums contributions from several layers and the other hidden
 * layers' weights get none (zero gradients). */
static void mlp_build_tied(mlp *m, int nl, const int64_t *dims, int64_t batch, uint64_t seed,
                           int loss_kind, bool tie) {
    memset(m, 0, sizeof *m);
    m->nl = nl;
    m->batch = batch;
    memcpy(m->dims, dims, sizeof(int64_t) * (size_t)(nl + 1));
    m->n_params = 2 * nl;
    cr_assert_eq(goblin_graph_new(&m->g), GOBLIN_OK);
    int32_t pid[2 * MAXL];
    for (int l = 0; l < nl; l++) {
        int64_t ws[2] = {dims[l + 1], dims[l]}, bs[1] = {dims[l + 1]};
        cr_assert_eq(goblin_graph_input(m->g, GOBLIN_DTYPE_F64, 2, ws, &pid[2 * l]), GOBLIN_OK);
        cr_assert_eq(goblin_graph_input(m->g, GOBLIN_DTYPE_F64, 1, bs, &pid[2 * l + 1]), GOBLIN_OK);
        m->pn[2 * l] = ws[0] * ws[1];
        m->pn[2 * l + 1] = bs[0];
        m->prank[2 * l] = 2;
        m->prank[2 * l + 1] = 1;
        memcpy(m->pshape[2 * l], ws, sizeof ws);
        memcpy(m->pshape[2 * l + 1], bs, sizeof bs);
    }
    int64_t xs[2] = {batch, dims[0]}, ys[1] = {batch};
    m->xrank = 2;
    memcpy(m->xshape, xs, sizeof xs);
    int32_t x, y, h;
    cr_assert_eq(goblin_graph_input(m->g, GOBLIN_DTYPE_F64, 2, xs, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(m->g, GOBLIN_DTYPE_I64, 1, ys, &y), GOBLIN_OK);
    h = x;
    for (int l = 0; l < nl; l++) {
        goblin_attr tb = goblin_attr_int(GOBLIN_ATTR_TRANS_B, 1);
        int32_t in[3] = {h, tie && l < nl - 1 ? pid[0] : pid[2 * l], pid[2 * l + 1]};
        cr_assert_eq(goblin_graph_add(m->g, GOBLIN_OP_MATMUL, in, 3, &tb, 1, &h), GOBLIN_OK, "%s",
                     goblin_graph_error(m->g));
        if (l < nl - 1) cr_assert_eq(goblin_graph_add(m->g, GOBLIN_OP_TANH, &h, 1, NULL, 0, &h), GOBLIN_OK);
        if (l < nl - 1 && g_drop_p > 0) {
            goblin_attr da[2] = {goblin_attr_int(GOBLIN_ATTR_SEED, 7 + l), goblin_attr_float(GOBLIN_ATTR_P, g_drop_p)};
            cr_assert_eq(goblin_graph_add(m->g, GOBLIN_OP_DROPOUT, &h, 1, da, 2, &h), GOBLIN_OK, "%s",
                         goblin_graph_error(m->g));
        }
    }
    int32_t loss;
    if (loss_kind == 1) {
        loss = h;
    } else {
        if (loss_kind == 2) {
            goblin_attr ax = goblin_attr_int(GOBLIN_ATTR_AXIS, 1);
            cr_assert_eq(goblin_graph_add(m->g, GOBLIN_OP_CUMSUM, &h, 1, &ax, 1, &h), GOBLIN_OK, "%s",
                         goblin_graph_error(m->g));
        }
        int32_t in[2] = {h, y};
        cr_assert_eq(goblin_graph_add(m->g, GOBLIN_OP_CROSS_ENTROPY, in, 2, NULL, 0, &loss), GOBLIN_OK,
                     "%s", goblin_graph_error(m->g));
    }
    cr_assert_eq(goblin_graph_output(m->g, loss), GOBLIN_OK);
    for (int i = 0; i < m->n_params; i++) {
        m->p[i] = calloc((size_t)m->pn[i], sizeof(double));
        double sc = 1.0 / sqrt((double)dims[i / 2]);
        for (int64_t k = 0; k < m->pn[i]; k++) m->p[i][k] = sc * urand(&seed);
    }
    m->x = calloc((size_t)(batch * dims[0]), sizeof(double));
    m->y = calloc((size_t)batch, sizeof(int64_t));
    for (int64_t k = 0; k < batch * dims[0]; k++) m->x[k] = urand(&seed);
    for (int64_t k = 0; k < batch; k++) m->y[k] = (int64_t)(rt_rng(&seed) % (uint64_t)dims[nl]);
}

static void mlp_free(mlp *m) {
    goblin_graph_free(m->g);
    for (int i = 0; i < m->n_params; i++) free(m->p[i]);
    free(m->x);
    free(m->y);
}

static void param_tensors(const mlp *m, double *const *p, goblin_tensor *out) {
    for (int i = 0; i < m->n_params; i++)
        out[i] = gt_tensor(GOBLIN_DTYPE_F64, m->prank[i], m->pshape[i], p[i]);
}

static void data_tensors(const mlp *m, goblin_tensor *d) {
    int64_t ys[1] = {m->batch};
    d[0] = gt_tensor(GOBLIN_DTYPE_F64, m->xrank, m->xshape, m->x);
    d[1] = gt_tensor(GOBLIN_DTYPE_I64, 1, ys, m->y);
}

/* The loss written out by hand in f64 (no library code). */
static double mlp_loss_hand(const mlp *m, double *const *p) {
    double total = 0;
    double a[64], z[64];
    for (int64_t i = 0; i < m->batch; i++) {
        for (int64_t k = 0; k < m->dims[0]; k++) a[k] = m->x[i * m->dims[0] + k];
        for (int l = 0; l < m->nl; l++) {
            int64_t in = m->dims[l], out = m->dims[l + 1];
            for (int64_t o = 0; o < out; o++) {
                double s = p[2 * l + 1][o];
                for (int64_t k = 0; k < in; k++) s += a[k] * p[2 * l][o * in + k];
                z[o] = s;
            }
            for (int64_t o = 0; o < out; o++) a[o] = l < m->nl - 1 ? tanh(z[o]) : z[o];
        }
        int64_t C = m->dims[m->nl];
        double mx = a[0];
        for (int64_t c = 1; c < C; c++) mx = a[c] > mx ? a[c] : mx;
        double se = 0;
        for (int64_t c = 0; c < C; c++) se += exp(a[c] - mx);
        total += mx + log(se) - a[m->y[i]];
    }
    return total / (double)m->batch;
}

/* Reference trajectory: the model's graph + goblin_graph_backward evaluated on the whole
 * batch, then goblin_sgd_step / goblin_adamw_step per parameter (optim.h). */
typedef struct ref_state {
    double *p[2 * MAXL];
    double *buf[2 * MAXL];
    goblin_sgd_state sgd[2 * MAXL];
    goblin_adamw_state adam[2 * MAXL];
} ref_state;

static void ref_init(ref_state *r, const mlp *m) {
    memset(r, 0, sizeof *r);
    for (int i = 0; i < m->n_params; i++) {
        r->p[i] = malloc(sizeof(double) * (size_t)m->pn[i]);
        memcpy(r->p[i], m->p[i], sizeof(double) * (size_t)m->pn[i]);
        r->sgd[i].momentum_buffer = calloc((size_t)m->pn[i], sizeof(double));
        r->adam[i].exp_avg = calloc((size_t)m->pn[i], sizeof(double));
        r->adam[i].exp_avg_sq = calloc((size_t)m->pn[i], sizeof(double));
    }
}

static void ref_free(ref_state *r, const mlp *m) {
    for (int i = 0; i < m->n_params; i++) {
        free(r->p[i]);
        free(r->sgd[i].momentum_buffer);
        free(r->adam[i].exp_avg);
        free(r->adam[i].exp_avg_sq);
    }
}

static double ref_round(ref_state *r, const mlp *m, const goblin_trainer_params *tp) {
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    /* a copy of the model through serialization, so the user's graph stays as it was */
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin_graph_serialize(m->g, &buf, &len), GOBLIN_OK);
    goblin_graph_free(g);
    cr_assert_eq(goblin_graph_deserialize(buf, len, NULL, &g, NULL), GOBLIN_OK);
    goblin_buffer_free(buf);
    int32_t wrt[2 * MAXL], grads[2 * MAXL];
    for (int i = 0; i < m->n_params; i++) wrt[i] = goblin_graph_input_id(g, i);
    int32_t loss = goblin_graph_output_id(g, 0);
    cr_assert_eq(goblin_graph_backward(g, loss, wrt, m->n_params, grads), GOBLIN_OK);
    for (int i = 0; i < m->n_params; i++) goblin_graph_output(g, grads[i]);
    goblin_tensor ins[2 * MAXL + 2], outs[2 * MAXL + 1];
    param_tensors(m, r->p, ins);
    data_tensors(m, ins + m->n_params);
    memset(outs, 0, sizeof outs);
    cr_assert_eq(goblin_graph_eval(g, NULL, ins, m->n_params + 2, outs, m->n_params + 1), GOBLIN_OK);
    double l = *(double *)outs[0].data;
    for (int i = 0; i < m->n_params; i++) {
        if (tp->optimizer == GOBLIN_OPTIMIZER_SGD)
            cr_assert_eq(goblin_sgd_step(&tp->sgd, GOBLIN_DTYPE_F64, m->pn[i], r->p[i], outs[1 + i].data,
                                         &r->sgd[i]), GOBLIN_OK);
        else
            cr_assert_eq(goblin_adamw_step(&tp->adamw, GOBLIN_DTYPE_F64, m->pn[i], r->p[i],
                                           outs[1 + i].data, &r->adam[i]), GOBLIN_OK);
    }
    for (int i = 0; i <= m->n_params; i++) goblin_buffer_free(outs[i].data);
    goblin_graph_free(g);
    return l;
}

/* ---- trainer helpers ------------------------------------------------------------------ */

static void tparams(goblin_trainer_params *tp, const mlp *m, goblin_optimizer opt) {
    goblin_trainer_params_default(tp);
    tp->model = m->g;
    tp->n_params = m->n_params;
    tp->optimizer = opt;
    tp->sgd.lr = 0.1;
    tp->sgd.momentum = 0.9;
    tp->sgd.weight_decay = 0.01;
    tp->adamw.lr = 0.01;
}

static goblin_grid *g_remote; /* set: trainers talk to a goblin-node through it */

static goblin_trainer *trainer(const mlp *m, goblin_grid *grid, const goblin_trainer_params *tp) {
    goblin_tensor init[2 * MAXL];
    param_tensors(m, m->p, init);
    goblin_trainer *t = NULL;
    goblin_errbuf msg_eb = {0};
    goblin_err e = goblin_trainer_new(&t, grid ? grid : g_remote, tp, init, &msg_eb);
    cr_assert_eq(e, GOBLIN_OK, "trainer_new: %s: %s", goblin_err_name(e), msg_eb.message);
    return t;
}

static void get_params(goblin_trainer *t, const mlp *m, double **out) {
    for (int i = 0; i < m->n_params; i++) {
        goblin_tensor d[2 * MAXL];
        param_tensors(m, out, d);
        cr_assert_eq(goblin_trainer_get_param(t, i, &d[i]), GOBLIN_OK);
    }
}

static double **alloc_params(const mlp *m) {
    double **p = calloc(2 * MAXL, sizeof(double *));
    for (int i = 0; i < m->n_params; i++) p[i] = calloc((size_t)m->pn[i], sizeof(double));
    return p;
}

static void free_params(const mlp *m, double **p) {
    for (int i = 0; i < m->n_params; i++) free(p[i]);
    free(p);
}

static double max_rel_diff(const mlp *m, double *const *a, double *const *b) {
    double worst = 0;
    for (int i = 0; i < m->n_params; i++)
        for (int64_t k = 0; k < m->pn[i]; k++) {
            double d = fabs(a[i][k] - b[i][k]) / (1.0 + fabs(b[i][k]));
            if (d > worst || d != d) worst = d != d ? INFINITY : d;
        }
    return worst;
}

static goblin_grid *grid_new(int n) {
    goblin_grid_params gp;
    goblin_grid_params_default(&gp);
    gp.worker.threads = 1;
    return rt_local_grid(n, &gp);
}

/* Train @p rounds and compare every round with the reference (loss and parameters). */
static void check_trajectory(const mlp *m, goblin_grid *grid, goblin_trainer_params *tp, int rounds,
                             double tol, goblin_train_plan_info *plan_out) {
    goblin_trainer *t = trainer(m, grid, tp);
    if (plan_out) cr_assert_eq(goblin_trainer_plan(t, m->batch, plan_out), GOBLIN_OK, "%s",
                               goblin_trainer_error(t));
    ref_state r;
    ref_init(&r, m);
    double **got = alloc_params(m);
    goblin_tensor data[2];
    data_tensors(m, data);
    for (int k = 0; k < rounds; k++) {
        goblin_train_round_info ri;
        goblin_err e = goblin_trainer_round(t, data, 2, &ri);
        cr_assert_eq(e, GOBLIN_OK, "round %d: %s: %s", k, goblin_err_name(e), goblin_trainer_error(t));
        double lref = ref_round(&r, m, tp);
        cr_assert(fabs(ri.loss - lref) <= tol * (1 + fabs(lref)), "round %d loss %.17g, reference %.17g",
                  k, ri.loss, lref);
        cr_assert_eq(ri.round, k);
        cr_assert(ri.tasks >= 1);
        get_params(t, m, got);
        double d = max_rel_diff(m, got, r.p);
        cr_assert(d <= tol, "round %d: parameters differ from the reference by %.3g (tol %.3g)", k, d, tol);
    }
    cr_assert_eq(goblin_trainer_rounds(t), rounds);
    free_params(m, got);
    ref_free(&r, m);
    goblin_trainer_free(t);
}

static const int64_t SMALL[3] = {3, 5, 3};
static const int64_t DEEP[5] = {4, 6, 24, 5, 3};

/* ---- tests ------------------------------------------------------------------------------- */

Test(train, gradients_match_finite_differences) {
    mlp m;
    mlp_build(&m, 2, SMALL, 6, 11, 0);
    goblin_grid *grid = grid_new(2);
    goblin_trainer_params tp;
    tparams(&tp, &m, GOBLIN_OPTIMIZER_SGD);
    tp.sgd.lr = 1.0; /* p_new = p - g, so g = p - p_new */
    tp.sgd.momentum = 0;
    tp.sgd.weight_decay = 0;
    goblin_trainer *t = trainer(&m, grid, &tp);
    goblin_tensor data[2];
    data_tensors(&m, data);
    goblin_train_round_info ri;
    cr_assert_eq(goblin_trainer_round(t, data, 2, &ri), GOBLIN_OK, "%s", goblin_trainer_error(t));
    double lhand = mlp_loss_hand(&m, m.p);
    cr_assert(fabs(ri.loss - lhand) <= 1e-12 * (1 + fabs(lhand)), "loss %.17g vs hand %.17g", ri.loss, lhand);
    double **now = alloc_params(&m);
    get_params(t, &m, now);
    double h = 1e-6, norm2 = 0;
    for (int i = 0; i < m.n_params; i++)
        for (int64_t k = 0; k < m.pn[i]; k++) {
            double g = m.p[i][k] - now[i][k];
            norm2 += g * g;
            double keep = m.p[i][k];
            m.p[i][k] = keep + h;
            double lp = mlp_loss_hand(&m, m.p);
            m.p[i][k] = keep - h;
            double lm = mlp_loss_hand(&m, m.p);
            m.p[i][k] = keep;
            double fd = (lp - lm) / (2 * h);
            cr_assert(fabs(g - fd) <= 1e-6 * fabs(fd) + 1e-7, "param %d[%lld]: grad %.12g, fd %.12g", i,
                      (long long)k, g, fd);
        }
    cr_assert(fabs(ri.grad_norm - sqrt(norm2)) <= 1e-9 * (1 + ri.grad_norm));
    cr_assert(ri.lr == 1.0);
    free_params(&m, now);
    goblin_trainer_free(t);
    goblin_grid_free(grid);
    mlp_free(&m);
}

Test(train, sgd_trajectory_matches_reference) {
    mlp m;
    mlp_build(&m, 2, SMALL, 8, 12, 0);
    goblin_grid *grid = grid_new(2);
    goblin_trainer_params tp;
    tparams(&tp, &m, GOBLIN_OPTIMIZER_SGD);
    goblin_train_plan_info pi;
    check_trajectory(&m, grid, &tp, 3, 1e-12, &pi);
    cr_assert_eq(pi.n_stages, 1);
    cr_assert_eq(pi.micro_batches, 1);
    /* the same with no grid: tasks evaluated in this thread */
    check_trajectory(&m, NULL, &tp, 3, 1e-12, NULL);
    goblin_grid_free(grid);
    mlp_free(&m);
}

Test(train, stages_and_tiles_match_reference) {
    mlp m;
    mlp_build(&m, 4, DEEP, 6, 13, 0);
    goblin_grid *grid = grid_new(2);
    goblin_trainer_params tp;
    tparams(&tp, &m, GOBLIN_OPTIMIZER_SGD);
    tp.micro_batch = 2;
    tp.task_memory_bytes = 2400;
    goblin_train_plan_info pi;
    check_trajectory(&m, grid, &tp, 3, 1e-10, &pi);
    cr_assert_geq(pi.n_stages, 3, "%d stages", pi.n_stages);
    cr_assert_eq(pi.micro_batches, 3);
    int tiled = 0;
    for (int s = 0; s < pi.n_stages; s++) {
        if (pi.stages[s].tiles > 1) tiled++;
        cr_assert(pi.stages[s].backward_task_bytes <= tp.task_memory_bytes, "stage %d: %llu bytes", s,
                  (unsigned long long)pi.stages[s].backward_task_bytes);
    }
    cr_assert_geq(tiled, 1);
    /* stages in order cover every compute node once */
    for (int s = 1; s < pi.n_stages; s++) cr_assert_gt(pi.stages[s].first_node, pi.stages[s - 1].last_node);
    goblin_trainer *t = trainer(&m, NULL, &tp);
    char text[4096];
    cr_assert_eq(goblin_trainer_plan_text(t, m.batch, text, sizeof text), GOBLIN_OK);
    cr_assert(strstr(text, "tiled into") && strstr(text, "stage 2"), "%s", text);
    if (getenv("GOBLIN_TEST_SHOW_PLAN")) fprintf(stderr, "%s", text);
    goblin_trainer_free(t);
    /* micro_batch 0 picks the largest micro-batch the stages fit */
    tp.micro_batch = 0;
    check_trajectory(&m, NULL, &tp, 2, 1e-10, &pi);
    cr_assert_geq(pi.n_stages, 3);
    goblin_grid_free(grid);
    mlp_free(&m);
}

/* One micro-batch cut into stages, with a weight read by several stages: the round keeps
 * a task's gradient as it is while it is a parameter's only contribution, and adds the
 * later ones to it (train.c, tr_round.whole); unused weights get zero gradients. */
Test(train, shared_weight_across_stages_matches_reference) {
    mlp m;
    static const int64_t SQ[5] = {4, 4, 4, 4, 3};
    mlp_build_tied(&m, 4, SQ, 6, 17, 0, true);
    goblin_grid *grid = grid_new(2);
    goblin_trainer_params tp;
    tparams(&tp, &m, GOBLIN_OPTIMIZER_ADAMW);
    tp.micro_batch = 6;
    tp.task_memory_bytes = 1500;
    goblin_train_plan_info pi;
    check_trajectory(&m, grid, &tp, 3, 1e-12, &pi);
    cr_assert_eq(pi.micro_batches, 1);
    cr_assert_geq(pi.n_stages, 3, "%d stages", pi.n_stages);
    int with_w0 = 0;
    goblin_trainer *t = trainer(&m, NULL, &tp);
    char text[4096];
    cr_assert_eq(goblin_trainer_plan_text(t, m.batch, text, sizeof text), GOBLIN_OK);
    if (getenv("GOBLIN_TEST_SHOW_PLAN")) fprintf(stderr, "%s", text);
    goblin_trainer_free(t);
    for (int s = 0; s < pi.n_stages; s++) with_w0 += pi.stages[s].n_params > 0;
    cr_assert_geq(with_w0, 2);
    /* the unused hidden weights stay where weight decay alone takes them */
    check_trajectory(&m, NULL, &tp, 2, 1e-12, NULL);
    goblin_grid_free(grid);
    mlp_free(&m);
}

Test(train, micro_batch_counts_agree) {
    mlp m;
    mlp_build(&m, 2, SMALL, 8, 14, 0);
    goblin_grid *grid = grid_new(2);
    goblin_trainer_params tp;
    tparams(&tp, &m, GOBLIN_OPTIMIZER_ADAMW);
    tp.micro_batch = 2; /* 4 micro-batches */
    goblin_train_plan_info pi;
    check_trajectory(&m, grid, &tp, 3, 1e-12, &pi);
    cr_assert_eq(pi.micro_batches, 4);
    tp.micro_batch = 3; /* 3, 3, 2: unequal shares */
    check_trajectory(&m, grid, &tp, 2, 1e-12, &pi);
    cr_assert_eq(pi.micro_batches, 3);
    goblin_grid_free(grid);
    mlp_free(&m);
}

/* @p rounds rounds of @p tp; the parameters after them (alloc_params). */
static double **train_rounds(const mlp *m, goblin_grid *grid, const goblin_trainer_params *tp, int rounds,
                             goblin_train_plan_info *pi) {
    goblin_trainer *t = trainer(m, grid, tp);
    if (pi) cr_assert_eq(goblin_trainer_plan(t, m->batch, pi), GOBLIN_OK, "%s", goblin_trainer_error(t));
    goblin_tensor data[2];
    data_tensors(m, data);
    for (int k = 0; k < rounds; k++) {
        goblin_train_round_info ri;
        goblin_err e = goblin_trainer_round(t, data, 2, &ri);
        cr_assert_eq(e, GOBLIN_OK, "round %d: %s: %s", k, goblin_err_name(e), goblin_trainer_error(t));
    }
    double **p = alloc_params(m);
    get_params(t, m, p);
    goblin_trainer_free(t);
    return p;
}

/* Dropout masks follow (seed, round, element of the whole batch): one micro-batch, three,
 * and three in stages with tiled layers give the same trajectory; without dropout it is
 * another one. */
Test(train, dropout_masks_do_not_depend_on_the_split) {
    mlp m, m0;
    g_drop_p = 0.3;
    mlp_build(&m, 4, DEEP, 6, 13, 0);
    g_drop_p = 0;
    mlp_build(&m0, 4, DEEP, 6, 13, 0);
    goblin_grid *grid = grid_new(2);
    goblin_trainer_params tp;
    tparams(&tp, &m, GOBLIN_OPTIMIZER_SGD);
    goblin_train_plan_info pi;
    tp.micro_batch = 6;
    double **whole = train_rounds(&m, grid, &tp, 3, &pi);
    cr_assert_eq(pi.micro_batches, 1);
    tp.micro_batch = 2;
    double **micro = train_rounds(&m, grid, &tp, 3, &pi);
    cr_assert_eq(pi.micro_batches, 3);
    tp.task_memory_bytes = 2600;
    double **staged = train_rounds(&m, NULL, &tp, 3, &pi);
    cr_assert_geq(pi.n_stages, 3, "%d stages", pi.n_stages);
    double d1 = max_rel_diff(&m, micro, whole), d2 = max_rel_diff(&m, staged, whole);
    cr_assert(d1 <= 1e-12 && d2 <= 1e-12, "micro-batches %.3g, stages %.3g", d1, d2);
    goblin_trainer_params tp0;
    tparams(&tp0, &m0, GOBLIN_OPTIMIZER_SGD);
    tp0.micro_batch = 6;
    double **plain = train_rounds(&m0, grid, &tp0, 3, NULL);
    cr_assert_gt(max_rel_diff(&m, plain, whole), 1e-4);
    free_params(&m, whole);
    free_params(&m, micro);
    free_params(&m, staged);
    free_params(&m0, plain);
    goblin_grid_free(grid);
    mlp_free(&m);
    mlp_free(&m0);
}

/* A model: x [8, 3] . w -> (permute to [3, 8] | reshape to [24]) -> dropout -> back ->
 * cross-entropy. @p merged: the reshape, which folds the batch into one dim. */
static goblin_graph *drop_model(bool merged, int32_t *drop) {
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t ws[2] = {3, 3}, xs[2] = {8, 3}, ys[1] = {8};
    int32_t w, x, y, h, loss;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, ws, &w), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, xs, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_I64, 1, ys, &y), GOBLIN_OK);
    int32_t mm[2] = {x, w};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, mm, 2, NULL, 0, &h), GOBLIN_OK);
    goblin_attr there = merged ? goblin_attr_ints(GOBLIN_ATTR_SHAPE, (int64_t[]){-1}, 1)
                               : goblin_attr_ints(GOBLIN_ATTR_PERM, (int64_t[]){1, 0}, 2);
    goblin_attr back = merged ? goblin_attr_ints(GOBLIN_ATTR_SHAPE, (int64_t[]){-1, 3}, 2) : there;
    goblin_op op = merged ? GOBLIN_OP_RESHAPE : GOBLIN_OP_PERMUTE;
    cr_assert_eq(goblin_graph_add(g, op, &h, 1, &there, 1, &h), GOBLIN_OK, "%s", goblin_graph_error(g));
    goblin_attr da[2] = {goblin_attr_int(GOBLIN_ATTR_SEED, 1), goblin_attr_float(GOBLIN_ATTR_P, 0.5)};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_DROPOUT, &h, 1, da, 2, &h), GOBLIN_OK);
    *drop = h;
    cr_assert_eq(goblin_graph_add(g, op, &h, 1, &back, 1, &h), GOBLIN_OK, "%s", goblin_graph_error(g));
    int32_t ce[2] = {h, y};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_CROSS_ENTROPY, ce, 2, NULL, 0, &loss), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, loss), GOBLIN_OK);
    return g;
}

/* A dropout whose value has the batch rows as a dim other than the leading one ([C, B])
 * is taken (its tasks draw along that dim: test_pkg_train_dropout.py checks the masks
 * against torch); one whose value merges the batch into a dim is refused, naming it. */
Test(train, dropout_off_the_batch_rows) {
    for (int merged = 0; merged < 2; merged++) {
        int32_t drop;
        goblin_graph *g = drop_model(merged, &drop);
        goblin_trainer_params tp;
        goblin_trainer_params_default(&tp);
        tp.model = g;
        tp.n_params = 1;
        int64_t ws[2] = {3, 3};
        double wv[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
        goblin_tensor init = gt_tensor(GOBLIN_DTYPE_F64, 2, ws, wv);
        goblin_trainer *t = NULL;
        goblin_errbuf eb = {0};
        goblin_err e = goblin_trainer_new(&t, NULL, &tp, &init, &eb);
        if (!merged) {
            cr_assert_eq(e, GOBLIN_OK, "%s", eb.message);
            goblin_trainer_free(t);
        } else {
            cr_assert_eq(e, GOBLIN_ENOTSUP, "%s", eb.message);
            char want[64];
            snprintf(want, sizeof want, "node %d (dropout)", (int)drop);
            cr_assert(strstr(eb.message, want) && strstr(eb.message, "not one dim") && strstr(eb.message, "[24]"),
                      "%s", eb.message);
        }
        goblin_graph_free(g);
    }
}

Test(train, cheating_worker_is_caught_and_changes_nothing) {
    mlp m;
    mlp_build(&m, 2, SMALL, 8, 15, 0);
    goblin_grid *grid = grid_new(1);
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.connect[0] = goblin_grid_url(grid);
    wp.n_connect = 1;
    wp.threads = 1;
    goblin_worker *bad = NULL;
    cr_assert_eq(goblin_worker_new(&bad, &wp), GOBLIN_OK);
    cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, bad, GOBLIN_MISBEHAVE_WRONG, 1.0,
                                     (uint64_t)0),
                 GOBLIN_OK);
    rt_grid hold = {0};
    hold.w[0] = bad;
    rt_ctx[0] = (rt_wctx){&hold, 0};
    pthread_t th;
    pthread_create(&th, NULL, rt_worker_main, &rt_ctx[0]);
    cr_assert(rt_wait_workers(goblin_grid_node(grid), 2));
    goblin_trainer_params tp;
    tparams(&tp, &m, GOBLIN_OPTIMIZER_SGD);
    tp.micro_batch = 2;
    check_trajectory(&m, grid, &tp, 3, 1e-12, NULL);
    goblin_node_stats st;
    goblin_node_stats_get(goblin_grid_node(grid), &st);
    cr_assert_eq(st.workers_quarantined, 1, "quarantined %lld", (long long)st.workers_quarantined);
    cr_assert_geq(st.results_rejected, 1);
    goblin_worker_stop(bad);
    pthread_join(th, NULL);
    goblin_worker_free(bad);
    goblin_grid_free(grid);
    mlp_free(&m);
}

static void ck_path(char *buf, size_t cap, const char *tag) {
    snprintf(buf, cap, "/tmp/goblin-test-train-%ld-%s.ckpt", (long)getpid(), tag);
}

Test(train, checkpoint_resume_is_bit_identical) {
    mlp m;
    mlp_build(&m, 2, SMALL, 8, 16, 0);
    goblin_grid *grid = grid_new(2);
    goblin_trainer_params tp;
    tparams(&tp, &m, GOBLIN_OPTIMIZER_ADAMW);
    tp.micro_batch = 3;
    tp.clip_norm = 0.5;
    goblin_tensor data[2];
    data_tensors(&m, data);
    goblin_trainer *a = trainer(&m, grid, &tp);
    for (int k = 0; k < 5; k++) cr_assert_eq(goblin_trainer_round(a, data, 2, NULL), GOBLIN_OK);
    goblin_trainer *b = trainer(&m, grid, &tp);
    for (int k = 0; k < 2; k++) cr_assert_eq(goblin_trainer_round(b, data, 2, NULL), GOBLIN_OK);
    char path[256];
    ck_path(path, sizeof path, "a");
    cr_assert_eq(goblin_trainer_save(b, path), GOBLIN_OK, "%s", goblin_trainer_error(b));
    goblin_trainer_free(b);
    goblin_trainer *c = trainer(&m, grid, &tp);
    cr_assert_eq(goblin_trainer_load(c, path), GOBLIN_OK, "%s", goblin_trainer_error(c));
    cr_assert_eq(goblin_trainer_rounds(c), 2);
    for (int k = 0; k < 3; k++) cr_assert_eq(goblin_trainer_round(c, data, 2, NULL), GOBLIN_OK);
    double **pa = alloc_params(&m), **pc = alloc_params(&m);
    get_params(a, &m, pa);
    get_params(c, &m, pc);
    for (int i = 0; i < m.n_params; i++)
        cr_assert(memcmp(pa[i], pc[i], sizeof(double) * (size_t)m.pn[i]) == 0, "parameter %d differs", i);

    /* corrupt files: nothing changes */
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *bytes = malloc((size_t)len);
    cr_assert_eq(fread(bytes, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    char bad[256];
    ck_path(bad, sizeof bad, "bad");
    bytes[len / 2] ^= 0x40;
    f = fopen(bad, "wb");
    fwrite(bytes, 1, (size_t)len, f);
    fclose(f);
    cr_assert_eq(goblin_trainer_load(c, bad), GOBLIN_EFORMAT);
    cr_assert(strstr(goblin_trainer_error(c), "checksum"), "%s", goblin_trainer_error(c));
    bytes[len / 2] ^= 0x40;
    f = fopen(bad, "wb");
    fwrite(bytes, 1, (size_t)len - 9, f);
    fclose(f);
    cr_assert_eq(goblin_trainer_load(c, bad), GOBLIN_EFORMAT);
    f = fopen(bad, "wb");
    fwrite("hello", 1, 5, f);
    fclose(f);
    cr_assert_eq(goblin_trainer_load(c, bad), GOBLIN_EFORMAT);
    char missing[256];
    ck_path(missing, sizeof missing, "missing");
    cr_assert_eq(goblin_trainer_load(c, missing), GOBLIN_EIO);
    get_params(c, &m, pa);
    for (int i = 0; i < m.n_params; i++)
        cr_assert(memcmp(pa[i], pc[i], sizeof(double) * (size_t)m.pn[i]) == 0);
    cr_assert_eq(goblin_trainer_rounds(c), 5);

    /* another optimizer, another setting, another model */
    goblin_trainer_params tp2 = tp;
    tp2.optimizer = GOBLIN_OPTIMIZER_SGD;
    goblin_trainer *d = trainer(&m, grid, &tp2);
    cr_assert_eq(goblin_trainer_load(d, path), GOBLIN_EINVAL);
    cr_assert(strstr(goblin_trainer_error(d), "optimizer"), "%s", goblin_trainer_error(d));
    goblin_trainer_free(d);
    tp2 = tp;
    tp2.adamw.lr = 0.5;
    d = trainer(&m, grid, &tp2);
    cr_assert_eq(goblin_trainer_load(d, path), GOBLIN_EINVAL);
    cr_assert(strstr(goblin_trainer_error(d), "adamw.lr"), "%s", goblin_trainer_error(d));
    goblin_trainer_free(d);
    mlp m2;
    int64_t other[3] = {3, 6, 3};
    mlp_build(&m2, 2, other, 8, 16, 0);
    goblin_trainer_params tp3;
    tparams(&tp3, &m2, GOBLIN_OPTIMIZER_ADAMW);
    tp3.micro_batch = 3;
    tp3.clip_norm = 0.5;
    d = trainer(&m2, grid, &tp3);
    cr_assert_eq(goblin_trainer_load(d, path), GOBLIN_EINVAL);
    cr_assert(strstr(goblin_trainer_error(d), "another model"), "%s", goblin_trainer_error(d));
    goblin_trainer_free(d);
    mlp_free(&m2);

    unlink(path);
    unlink(bad);
    free(bytes);
    free_params(&m, pa);
    free_params(&m, pc);
    goblin_trainer_free(a);
    goblin_trainer_free(c);
    goblin_grid_free(grid);
    mlp_free(&m);
}

Test(train, bad_inputs_are_refused) {
    mlp m;
    mlp_build(&m, 2, SMALL, 4, 17, 0);
    goblin_trainer_params tp;
    tparams(&tp, &m, GOBLIN_OPTIMIZER_SGD);
    goblin_tensor init[4];
    param_tensors(&m, m.p, init);
    goblin_trainer *t = NULL;
    goblin_errbuf msg_eb = {0};
    /* init shape and dtype */
    goblin_tensor keep = init[0];
    init[0].shape[0] = 4;
    cr_assert_eq(goblin_trainer_new(&t, NULL, &tp, init, &msg_eb), GOBLIN_ESHAPE);
    cr_assert(strstr(msg_eb.message, "init 0"), "%s", msg_eb.message);
    init[0] = keep;
    float f32buf[64];
    init[1] = gt_tensor(GOBLIN_DTYPE_F32, 1, init[1].shape, f32buf);
    cr_assert_eq(goblin_trainer_new(&t, NULL, &tp, init, &msg_eb), GOBLIN_EDTYPE);
    param_tensors(&m, m.p, init);
    /* params */
    tp.n_params = 0;
    cr_assert_eq(goblin_trainer_new(&t, NULL, &tp, init, &msg_eb), GOBLIN_EINVAL);
    tp.n_params = m.n_params;
    tp.max_stages = 0;
    cr_assert_eq(goblin_trainer_new(&t, NULL, &tp, init, &msg_eb), GOBLIN_EINVAL);
    tp.max_stages = 64;
    tp.sgd.lr = -1;
    cr_assert_eq(goblin_trainer_new(&t, NULL, &tp, init, &msg_eb), GOBLIN_EINVAL);
    tp.sgd.lr = 0.1;
    cr_assert_null(t);
    /* loss not a scalar; an op without a backward rule */
    mlp ml;
    mlp_build(&ml, 2, SMALL, 4, 17, 1);
    tp.model = ml.g;
    cr_assert_eq(goblin_trainer_new(&t, NULL, &tp, init, &msg_eb), GOBLIN_ESHAPE);
    cr_assert(strstr(msg_eb.message, "loss"), "%s", msg_eb.message);
    mlp_free(&ml);
    mlp_build(&ml, 2, SMALL, 4, 17, 2);
    tp.model = ml.g;
    cr_assert_eq(goblin_trainer_new(&t, NULL, &tp, init, &msg_eb), GOBLIN_ENOTSUP);
    cr_assert(strstr(msg_eb.message, "cumsum"), "%s", msg_eb.message);
    mlp_free(&ml);
    tp.model = m.g;
    /* data */
    t = trainer(&m, NULL, &tp);
    goblin_tensor data[2];
    data_tensors(&m, data);
    goblin_tensor d2[2] = {data[0], data[1]};
    d2[1].shape[0] = 3;
    cr_assert_eq(goblin_trainer_round(t, d2, 2, NULL), GOBLIN_ESHAPE);
    cr_assert(strstr(goblin_trainer_error(t), "rows"), "%s", goblin_trainer_error(t));
    d2[1] = data[1];
    d2[0].shape[1] = 2;
    cr_assert_eq(goblin_trainer_round(t, d2, 2, NULL), GOBLIN_ESHAPE);
    d2[0] = data[0];
    d2[1].dtype = GOBLIN_DTYPE_I32;
    cr_assert_eq(goblin_trainer_round(t, d2, 2, NULL), GOBLIN_EDTYPE);
    cr_assert_eq(goblin_trainer_round(t, data, 1, NULL), GOBLIN_EINVAL);
    cr_assert_eq(goblin_trainer_rounds(t), 0);
    /* other batch sizes are fine */
    d2[0] = data[0];
    d2[1] = data[1];
    d2[0].shape[0] = d2[1].shape[0] = 3;
    cr_assert_eq(goblin_trainer_round(t, d2, 2, NULL), GOBLIN_OK, "%s", goblin_trainer_error(t));
    /* parameters: index, shape */
    goblin_tensor pt;
    param_tensors(&m, m.p, init);
    cr_assert_eq(goblin_trainer_get_param(t, 9, &init[0]), GOBLIN_EINDEX);
    pt = init[1];
    cr_assert_eq(goblin_trainer_get_param(t, 0, &pt), GOBLIN_ESHAPE);
    goblin_trainer_free(t);
    /* a budget nothing fits */
    tp.task_memory_bytes = 64;
    t = trainer(&m, NULL, &tp);
    goblin_train_plan_info pi;
    cr_assert_eq(goblin_trainer_plan(t, 4, &pi), GOBLIN_ERANGE);
    cr_assert(strstr(goblin_trainer_error(t), "bytes"), "%s", goblin_trainer_error(t));
    cr_assert_eq(goblin_trainer_round(t, data, 2, NULL), GOBLIN_ERANGE);
    goblin_trainer_free(t);
    mlp_free(&m);
}

Test(train, through_a_client_and_gateway) {
    mlp m;
    mlp_build(&m, 4, DEEP, 6, 18, 0);
    goblin_grid *grid = grid_new(2);
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", hp_free_port());
    goblin_gateway_params gp;
    goblin_gateway_params_default(&gp);
    gp.listen[0] = url;
    gp.n_listen = 1;
    gp.open = true;
    goblin_gateway *gw = NULL;
    cr_assert_eq(goblin_gateway_new(&gw, goblin_grid_node(grid), &gp), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_start(gw), GOBLIN_OK);
    goblin_errbuf why_eb = {0};
    cr_assert_eq(goblin_grid_connect(url, NULL, &g_remote, &why_eb), GOBLIN_OK, "%s", why_eb.message);
    goblin_trainer_params tp;
    tparams(&tp, &m, GOBLIN_OPTIMIZER_ADAMW);
    tp.micro_batch = 2;
    tp.task_memory_bytes = 2400;
    goblin_train_plan_info pi;
    check_trajectory(&m, NULL, &tp, 2, 1e-10, &pi);
    cr_assert_geq(pi.n_stages, 3);
    /* the budget from the workers' advertised memory: one stage */
    tp.task_memory_bytes = 0;
    tp.micro_batch = 0;
    check_trajectory(&m, NULL, &tp, 1, 1e-12, &pi);
    cr_assert_eq(pi.n_stages, 1);
    /* a worker of 1 GiB (a quarter of it the cache, 2 slots) offers a task (1 GiB - 256 MiB) / 3 */
    cr_assert_eq(pi.budget_bytes, ((uint64_t)1 << 30) / 4 * 3 / 3);
    goblin_grid_free(g_remote);
    g_remote = NULL;
    goblin_gateway_free(gw);
    goblin_grid_free(grid);
    mlp_free(&m);
}

/* conv2d (4 -> 4 channels, 3x3, padding 1) -> tanh -> flatten -> linear -> cross-entropy */
static void conv_build(mlp *m, int64_t batch, uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->batch = batch;
    m->n_params = 4;
    cr_assert_eq(goblin_graph_new(&m->g), GOBLIN_OK);
    int64_t shapes[4][4] = {{4, 4, 3, 3}, {4}, {3, 36}, {3}};
    int32_t ranks[4] = {4, 1, 2, 1}, pid[4];
    for (int i = 0; i < 4; i++) {
        m->prank[i] = ranks[i];
        memcpy(m->pshape[i], shapes[i], sizeof shapes[i]);
        m->pn[i] = 1;
        for (int d = 0; d < ranks[i]; d++) m->pn[i] *= shapes[i][d];
        cr_assert_eq(goblin_graph_input(m->g, GOBLIN_DTYPE_F64, ranks[i], shapes[i], &pid[i]), GOBLIN_OK);
    }
    int64_t xs[4] = {batch, 4, 3, 3}, ys[1] = {batch};
    m->xrank = 4;
    memcpy(m->xshape, xs, sizeof xs);
    int32_t x, y, h;
    cr_assert_eq(goblin_graph_input(m->g, GOBLIN_DTYPE_F64, 4, xs, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(m->g, GOBLIN_DTYPE_I64, 1, ys, &y), GOBLIN_OK);
    int64_t pad[2] = {1, 1};
    goblin_attr pa = goblin_attr_ints(GOBLIN_ATTR_PADDING, pad, 2);
    int32_t cin[3] = {x, pid[0], pid[1]};
    cr_assert_eq(goblin_graph_add(m->g, GOBLIN_OP_CONV2D, cin, 3, &pa, 1, &h), GOBLIN_OK, "%s",
                 goblin_graph_error(m->g));
    cr_assert_eq(goblin_graph_add(m->g, GOBLIN_OP_TANH, &h, 1, NULL, 0, &h), GOBLIN_OK);
    int64_t flat[2] = {batch, 36};
    goblin_attr sa = goblin_attr_ints(GOBLIN_ATTR_SHAPE, flat, 2);
    cr_assert_eq(goblin_graph_add(m->g, GOBLIN_OP_RESHAPE, &h, 1, &sa, 1, &h), GOBLIN_OK, "%s",
                 goblin_graph_error(m->g));
    goblin_attr tb = goblin_attr_int(GOBLIN_ATTR_TRANS_B, 1);
    int32_t lin[3] = {h, pid[2], pid[3]};
    cr_assert_eq(goblin_graph_add(m->g, GOBLIN_OP_MATMUL, lin, 3, &tb, 1, &h), GOBLIN_OK);
    int32_t in[2] = {h, y}, loss;
    cr_assert_eq(goblin_graph_add(m->g, GOBLIN_OP_CROSS_ENTROPY, in, 2, NULL, 0, &loss), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(m->g, loss), GOBLIN_OK);
    for (int i = 0; i < 4; i++) {
        m->p[i] = calloc((size_t)m->pn[i], sizeof(double));
        for (int64_t k = 0; k < m->pn[i]; k++) m->p[i][k] = 0.4 * urand(&seed);
    }
    m->x = calloc((size_t)(batch * 36), sizeof(double));
    m->y = calloc((size_t)batch, sizeof(int64_t));
    for (int64_t k = 0; k < batch * 36; k++) m->x[k] = urand(&seed);
    for (int64_t k = 0; k < batch; k++) m->y[k] = (int64_t)(rt_rng(&seed) % 3u);
}

Test(train, tiled_conv_matches_reference) {
    mlp m;
    conv_build(&m, 5, 19);
    goblin_grid *grid = grid_new(2);
    goblin_trainer_params tp;
    tparams(&tp, &m, GOBLIN_OPTIMIZER_SGD);
    tp.micro_batch = 1;
    tp.task_memory_bytes = 2000;
    goblin_train_plan_info pi;
    check_trajectory(&m, grid, &tp, 2, 1e-10, &pi);
    cr_assert_geq(pi.n_stages, 3);
    cr_assert_gt(pi.stages[0].tiles, 1, "the conv stage has %d tiles", pi.stages[0].tiles);
    goblin_grid_free(grid);
    mlp_free(&m);
}

/* Two workers of one attacker that negate everything send the same bits: their replicas
 * agree, and the round's loss (a cross-entropy) comes out negative. The round check sees
 * a loss the graph proves cannot be negative and computes the round again here, so the
 * trajectory is the reference's; on an honest grid nothing is recomputed. */
Test(train, an_agreeing_pair_cannot_pass_an_impossible_loss) {
    mlp m;
    mlp_build(&m, 2, SMALL, 8, 16, 0);
    /* Probation and audits off: the pair's fresh keys would be checked by the node and
     * caught before they agree (test_collusion.c); here they slip past who checks whom,
     * and the round check is the defence left. */
    goblin_grid_params gp;
    goblin_grid_params_default(&gp);
    gp.worker.threads = 1;
    gp.node.probation_results = 0;
    gp.node.audit_rate = 0.0;
    goblin_grid *grid = rt_local_grid(2, &gp);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, goblin_grid_worker(grid, i),
                                         GOBLIN_MISBEHAVE_NEGATE, 1.0, (uint64_t)0), GOBLIN_OK);
    goblin_trainer_params tp;
    tparams(&tp, &m, GOBLIN_OPTIMIZER_SGD);
    tp.micro_batch = 2;
    goblin_trainer *t = trainer(&m, grid, &tp);
    ref_state r;
    ref_init(&r, &m);
    double **got = alloc_params(&m);
    goblin_tensor data[2];
    data_tensors(&m, data);
    for (int k = 0; k < 3; k++) {
        goblin_train_round_info ri;
        cr_assert_eq(goblin_trainer_round(t, data, 2, &ri), GOBLIN_OK, "%s", goblin_trainer_error(t));
        double lref = ref_round(&r, &m, &tp);
        cr_assert_gt(lref, 0);
        cr_assert(ri.rechecked && ri.recheck_changed, "round %d was not rechecked", k);
        cr_assert(fabs(ri.loss - lref) <= 1e-12 * (1 + fabs(lref)), "round %d loss %.17g, reference %.17g",
                  k, ri.loss, lref);
        get_params(t, &m, got);
        double d = max_rel_diff(&m, got, r.p);
        cr_assert(d <= 1e-12, "round %d: parameters differ from the reference by %.3g", k, d);
    }
    goblin_node_stats st;
    goblin_node_stats_get(goblin_grid_node(grid), &st);
    cr_assert_geq(st.replicas_agreed, 1, "the pair's replicas did agree (what the check is for)");
    goblin_trainer_free(t);
    free_params(&m, got);
    ref_free(&r, &m);
    goblin_grid_free(grid);
    /* honest workers: no round is recomputed */
    grid = grid_new(2);
    t = trainer(&m, grid, &tp);
    for (int k = 0; k < 2; k++) {
        goblin_train_round_info ri;
        cr_assert_eq(goblin_trainer_round(t, data, 2, &ri), GOBLIN_OK, "%s", goblin_trainer_error(t));
        cr_assert(!ri.rechecked, "honest round %d was rechecked", k);
    }
    goblin_trainer_free(t);
    goblin_grid_free(grid);
    mlp_free(&m);
}

/* Checked execution (the default, verify.h): two workers of one attacker and nobody
 * else, sending a sign-flipped loss and gradient over honest products (NEGATE_REST), or
 * everything negated (NEGATE: the products too). The node checks the products by
 * Freivalds and evaluates the rest itself, so each cheat is caught where it arrives:
 * the round is not even rechecked, and the trajectory is the reference's. */
Test(train, checked_execution_catches_a_sign_flipped_gradient_alone) {
    mlp m;
    int64_t dims[2] = {256, 128}; /* softmax regression: its work in its two products */
    mlp_build(&m, 1, dims, 64, 23, 0);
    const goblin_misbehave modes[2] = {GOBLIN_MISBEHAVE_NEGATE_REST, GOBLIN_MISBEHAVE_NEGATE};
    goblin_tensor data[2];
    data_tensors(&m, data);
    for (int q = 0; q < 3; q++) {
        goblin_grid *grid = grid_new(2);
        if (q < 2)
            for (int i = 0; i < 2; i++)
                cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, goblin_grid_worker(grid, i),
                                                 modes[q], 1.0, (uint64_t)0), GOBLIN_OK);
        goblin_trainer_params tp;
        tparams(&tp, &m, GOBLIN_OPTIMIZER_SGD);
        cr_assert_eq(tp.verify, GOBLIN_VERIFY_CHECKED);
        tp.micro_batch = 64; /* one task a round: each cheater is caught on its own task */
        goblin_trainer *t = trainer(&m, grid, &tp);
        ref_state r;
        ref_init(&r, &m);
        double **got = alloc_params(&m);
        for (int k = 0; k < 2; k++) {
            goblin_train_round_info ri;
            cr_assert_eq(goblin_trainer_round(t, data, 2, &ri), GOBLIN_OK, "%s", goblin_trainer_error(t));
            double lref = ref_round(&r, &m, &tp);
            cr_assert_gt(lref, 0);
            cr_assert(!ri.rechecked, "round %d needed the round check", k);
            cr_assert(fabs(ri.loss - lref) <= 1e-12 * (1 + fabs(lref)), "round %d loss %.17g, reference %.17g", k,
                      ri.loss, lref);
            get_params(t, &m, got);
            double d = max_rel_diff(&m, got, r.p);
            cr_assert(d <= 1e-12, "round %d: parameters differ from the reference by %.3g", k, d);
        }
        goblin_node_stats st;
        goblin_node_stats_get(goblin_grid_node(grid), &st);
        cr_assert_eq(st.replicas_agreed, 0);
        if (q < 2) {
            cr_assert_eq(st.results_rejected, 2, "%s: %lld rejected", rt_misbehave_name(modes[q]),
                         (long long)st.results_rejected);
            cr_assert_eq(st.results_accepted, 0);
            cr_assert_eq(st.workers_quarantined, 2);
        } else {
            cr_assert_eq(st.tasks_checked, 2, "every honest task checked (%lld)", (long long)st.tasks_checked);
            cr_assert_eq(st.results_rejected, 0);
            cr_assert_eq(st.replicas_issued, 0);
        }
        goblin_trainer_free(t);
        free_params(&m, got);
        ref_free(&r, &m);
        goblin_grid_free(grid);
    }
    mlp_free(&m);
}
