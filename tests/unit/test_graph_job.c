/* test_graph_job.c - graph jobs on the node: rebatching, chunking, combining,
 * broadcast-input caching, replication with adaptive trust against cheating
 * workers, the RECOMPUTE and UNSAFE_NONE policies and bad submits. References are
 * naive loops here or a direct goblin_graph_eval of the whole graph. */
#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <unistd.h>
#include <goblin/goblin.h>
#include <goblin/grid.h>

#include "runtime_util.h"

/* ---- the graph: h = relu(x . W + b); outputs h, sum_0 h, mean_0 h, max_0 h, sum h --- */

typedef struct mlp {
    goblin_graph *g;
    int64_t B, D, H;
    goblin_dtype dt;
} mlp;

static mlp mlp_new(goblin_dtype dt, int64_t B, int64_t D, int64_t H) {
    mlp m = {NULL, B, D, H, dt};
    cr_assert_eq(goblin_graph_new(&m.g), GOBLIN_OK);
    int64_t sx[2] = {B, D}, sw[2] = {D, H}, sb[1] = {H};
    int32_t x, w, b, mm, a, h, s0, m0, x0, all;
    cr_assert_eq(goblin_graph_input(m.g, dt, 2, sx, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(m.g, dt, 2, sw, &w), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(m.g, dt, 1, sb, &b), GOBLIN_OK);
    int32_t i2[2] = {x, w};
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_MATMUL, i2, 2, NULL, 0, &mm), GOBLIN_OK);
    int32_t i3[2] = {mm, b};
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_ADD, i3, 2, NULL, 0, &a), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_RELU, &a, 1, NULL, 0, &h), GOBLIN_OK);
    int64_t ax0[1] = {0};
    goblin_attr at = goblin_attr_ints(GOBLIN_ATTR_AXES, ax0, 1);
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_SUM, &h, 1, &at, 1, &s0), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_MEAN, &h, 1, &at, 1, &m0), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_REDUCE_MAX, &h, 1, &at, 1, &x0), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(m.g, GOBLIN_OP_SUM, &h, 1, NULL, 0, &all), GOBLIN_OK);
    int32_t outs[5] = {h, s0, m0, x0, all};
    for (int i = 0; i < 5; i++) cr_assert_eq(goblin_graph_output(m.g, outs[i]), GOBLIN_OK);
    return m;
}

static void fill(goblin_dtype dt, void *p, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) {
        double v = (double)(rt_rng(&seed) >> 11) * 0x1p-53 * 2.0 - 1.0;
        if (dt == GOBLIN_DTYPE_F32) ((float *)p)[i] = (float)v;
        else ((double *)p)[i] = v;
    }
}

static double getd(goblin_dtype dt, const void *p, int64_t i) {
    return dt == GOBLIN_DTYPE_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

/* Caller-side buffers of one job: inputs x, W, b and the five outputs (contiguous). */
typedef struct job_io {
    void *x, *w, *b, *h, *s0, *m0, *x0, *all;
    goblin_tensor in[3], out[5];
} job_io;

static job_io io_new(const mlp *m, uint64_t seed) {
    job_io io;
    size_t es = goblin_dtype_size(m->dt);
    io.x = calloc((size_t)(m->B * m->D), es);
    io.w = calloc((size_t)(m->D * m->H), es);
    io.b = calloc((size_t)m->H, es);
    io.h = calloc((size_t)(m->B * m->H), es);
    io.s0 = calloc((size_t)m->H, es);
    io.m0 = calloc((size_t)m->H, es);
    io.x0 = calloc((size_t)m->H, es);
    io.all = calloc(1, es);
    fill(m->dt, io.x, m->B * m->D, seed);
    fill(m->dt, io.w, m->D * m->H, seed + 1);
    fill(m->dt, io.b, m->H, seed + 2);
    int64_t sx[2] = {m->B, m->D}, sw[2] = {m->D, m->H}, sb[1] = {m->H}, sh[2] = {m->B, m->H};
    goblin_tensor_init(&io.in[0], m->dt, 2, sx, io.x);
    goblin_tensor_init(&io.in[1], m->dt, 2, sw, io.w);
    goblin_tensor_init(&io.in[2], m->dt, 1, sb, io.b);
    goblin_tensor_init(&io.out[0], m->dt, 2, sh, io.h);
    goblin_tensor_init(&io.out[1], m->dt, 1, sb, io.s0);
    goblin_tensor_init(&io.out[2], m->dt, 1, sb, io.m0);
    goblin_tensor_init(&io.out[3], m->dt, 1, sb, io.x0);
    goblin_tensor_init(&io.out[4], m->dt, 0, NULL, io.all);
    return io;
}

static void io_free(job_io *io) {
    free(io->x), free(io->w), free(io->b), free(io->h);
    free(io->s0), free(io->m0), free(io->x0), free(io->all);
}

/* Check a finished job's outputs against a naive f64 computation here: every value
 * within the rounding bound of its own computation (2 gamma * the sum of absolute
 * terms), the sums and the mean with the bound of a sum of B such values on top.
 * With @p exact_backend, h and max must also equal a direct evaluation of the whole
 * graph on that backend bit for bit (the chunks run the very same kernels per row). */
static void check_outputs_on(const mlp *m, const job_io *io, int exact_backend) {
    int64_t B = m->B, D = m->D, H = m->H;
    double u = m->dt == GOBLIN_DTYPE_F32 ? 0x1p-24 : 0x1p-53;
    double *hd = calloc((size_t)(B * H), sizeof(double)), *he = calloc((size_t)(B * H), sizeof(double));
    for (int64_t i = 0; i < B; i++)
        for (int64_t j = 0; j < H; j++) {
            double acc = 0, sc = 0;
            for (int64_t k = 0; k < D; k++) {
                double t = getd(m->dt, io->x, i * D + k) * getd(m->dt, io->w, k * H + j);
                acc += t;
                sc += fabs(t);
            }
            double bj = getd(m->dt, io->b, j);
            acc += bj;
            sc += fabs(bj);
            hd[i * H + j] = acc > 0 ? acc : 0;
            he[i * H + j] = 2.0 * (double)(D + 2) * u * sc + 1e-300;
            double got = rt_get(&io->out[0], i, j);
            cr_assert(fabs(got - hd[i * H + j]) <= he[i * H + j], "h[%lld,%lld] = %.9g, want %.9g",
                      (long long)i, (long long)j, got, hd[i * H + j]);
        }
    double gam = 2.0 * (double)(B + 2) * u, tot = 0, tot_abs = 0, tot_err = 0;
    for (int64_t j = 0; j < H; j++) {
        double col = 0, col_abs = 0, col_err = 0, mx = -INFINITY, mx_err = 0;
        for (int64_t i = 0; i < B; i++) {
            col += hd[i * H + j];
            col_abs += hd[i * H + j];
            col_err += he[i * H + j];
            if (hd[i * H + j] > mx) mx = hd[i * H + j];
            if (he[i * H + j] > mx_err) mx_err = he[i * H + j];
        }
        tot += col;
        tot_abs += col_abs;
        tot_err += col_err;
        double s = getd(m->dt, io->s0, j);
        cr_assert(fabs(s - col) <= gam * col_abs + col_err, "sum[%lld] %.9g vs %.9g", (long long)j, s, col);
        double mm = getd(m->dt, io->m0, j);
        cr_assert(fabs(mm - col / (double)B) <= 2 * (gam * col_abs + col_err) / (double)B,
                  "mean[%lld] %.9g vs %.9g", (long long)j, mm, col / (double)B);
        double x0 = getd(m->dt, io->x0, j);
        cr_assert(fabs(x0 - mx) <= mx_err, "max[%lld] %.9g vs %.9g", (long long)j, x0, mx);
    }
    double a = getd(m->dt, io->all, 0);
    cr_assert(fabs(a - tot) <= 2.0 * (double)(B * H + 2) * u * tot_abs + tot_err, "total %.9g vs %.9g", a, tot);
    if (exact_backend >= 0) {
        size_t es = goblin_dtype_size(m->dt);
        job_io ref = io_new(m, 0);
        memcpy(ref.x, io->x, (size_t)(B * D) * es);
        memcpy(ref.w, io->w, (size_t)(D * H) * es);
        memcpy(ref.b, io->b, (size_t)H * es);
        goblin_exec_params ep;
        goblin_exec_params_default(&ep);
        ep.backend = (goblin_backend_kind)exact_backend;
        ep.threads = 1;
        cr_assert_eq(goblin_graph_eval(m->g, &ep, ref.in, 3, ref.out, 5), GOBLIN_OK);
        for (int64_t i = 0; i < B; i++)
            for (int64_t j = 0; j < H; j++)
                cr_assert(rt_get(&io->out[0], i, j) == getd(m->dt, ref.h, i * H + j), "h bit-equal");
        for (int64_t j = 0; j < H; j++) cr_assert(getd(m->dt, io->x0, j) == getd(m->dt, ref.x0, j), "max bit-equal");
        io_free(&ref);
    }
    free(hd);
    free(he);
}

static void check_outputs(const mlp *m, const job_io *io) { check_outputs_on(m, io, -1); }

/* ---- rebatch ---------------------------------------------------------------------- */

Test(graph_job, rebatch_mlp_with_reshape_against_naive) {
    const int64_t B = 6, D = 5, H = 4, R = 3;
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[2] = {B, D}, sw[2] = {D, H}, sb[1] = {H};
    int32_t x, w, b, mm, a, h, r, s, all;
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sx, &x);
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sw, &w);
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 1, sb, &b);
    int32_t i2[2] = {x, w};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, i2, 2, NULL, 0, &mm), GOBLIN_OK);
    int32_t i3[2] = {mm, b};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, i3, 2, NULL, 0, &a), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RELU, &a, 1, NULL, 0, &h), GOBLIN_OK);
    int64_t rs[2] = {B * 2, H / 2};
    goblin_attr ra = goblin_attr_ints(GOBLIN_ATTR_SHAPE, rs, 2);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &h, 1, &ra, 1, &r), GOBLIN_OK);
    int64_t ax1[1] = {1};
    goblin_attr sa = goblin_attr_ints(GOBLIN_ATTR_AXES, ax1, 1);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SUM, &r, 1, &sa, 1, &s), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SUM, &h, 1, NULL, 0, &all), GOBLIN_OK);
    goblin_graph_output(g, h);
    goblin_graph_output(g, s);
    goblin_graph_output(g, all);

    goblin_graph *rg = NULL;
    goblin_errbuf msg_eb = {0};
    cr_assert_eq(goblin_graph_rebatch(g, NULL, R, &rg, &msg_eb), GOBLIN_OK, "%s", msg_eb.message);
    goblin_tensor o;
    goblin_graph_node(rg, goblin_graph_output_id(rg, 0), NULL, &o, NULL, NULL);
    cr_assert(o.rank == 2 && o.shape[0] == R && o.shape[1] == H);
    goblin_graph_node(rg, goblin_graph_output_id(rg, 1), NULL, &o, NULL, NULL);
    cr_assert(o.rank == 1 && o.shape[0] == 2 * R);
    goblin_graph_node(rg, goblin_graph_output_id(rg, 2), NULL, &o, NULL, NULL);
    cr_assert_eq(o.rank, 0);
    goblin_graph_node(rg, goblin_graph_input_id(rg, 1), NULL, &o, NULL, NULL);
    cr_assert(o.shape[0] == D && o.shape[1] == H, "broadcast input unchanged");

    double xv[R * D], wv[D * H], bv[H], hv[R * H], sv[2 * R], av;
    fill(GOBLIN_DTYPE_F64, xv, R * D, 7);
    fill(GOBLIN_DTYPE_F64, wv, D * H, 8);
    fill(GOBLIN_DTYPE_F64, bv, H, 9);
    int64_t srx[2] = {R, D}, srh[2] = {R, H}, ss[1] = {2 * R};
    goblin_tensor in[3], out[3];
    goblin_tensor_init(&in[0], GOBLIN_DTYPE_F64, 2, srx, xv);
    goblin_tensor_init(&in[1], GOBLIN_DTYPE_F64, 2, sw, wv);
    goblin_tensor_init(&in[2], GOBLIN_DTYPE_F64, 1, sb, bv);
    goblin_tensor_init(&out[0], GOBLIN_DTYPE_F64, 2, srh, hv);
    goblin_tensor_init(&out[1], GOBLIN_DTYPE_F64, 1, ss, sv);
    goblin_tensor_init(&out[2], GOBLIN_DTYPE_F64, 0, NULL, &av);
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.backend = GOBLIN_BACKEND_REF;
    cr_assert_eq(goblin_graph_eval(rg, &ep, in, 3, out, 3), GOBLIN_OK);
    double tot = 0;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < H; j++) {
            double acc = bv[j];
            for (int64_t k = 0; k < D; k++) acc += xv[i * D + k] * wv[k * H + j];
            double want = acc > 0 ? acc : 0;
            cr_assert(fabs(hv[i * H + j] - want) <= 1e-13, "h");
            tot += want;
        }
    for (int64_t q = 0; q < 2 * R; q++) {
        double want = hv[q * 2] + hv[q * 2 + 1];
        cr_assert(fabs(sv[q] - want) <= 1e-13, "reshaped sum %lld", (long long)q);
    }
    cr_assert(fabs(av - tot) <= 1e-12);
    goblin_graph_free(rg);

    /* A reshape that moves the batch off dim 0 cannot be rebatched: the node is named. */
    goblin_graph *bad = NULL;
    goblin_graph_new(&bad);
    int32_t bx, br;
    goblin_graph_input(bad, GOBLIN_DTYPE_F64, 2, sx, &bx);
    int64_t ts[2] = {D, B};
    goblin_attr ta = goblin_attr_ints(GOBLIN_ATTR_SHAPE, ts, 2);
    cr_assert_eq(goblin_graph_add(bad, GOBLIN_OP_RESHAPE, &bx, 1, &ta, 1, &br), GOBLIN_OK);
    goblin_graph_output(bad, br);
    goblin_graph *none = NULL;
    cr_assert_eq(goblin_graph_rebatch(bad, NULL, 4, &none, &msg_eb), GOBLIN_ESHAPE);
    cr_assert_null(none);
    cr_assert(strstr(msg_eb.message, "node 1") != NULL, "message names the node: %s", msg_eb.message);
    cr_assert_eq(goblin_graph_rebatch(bad, NULL, 0, &none, &msg_eb), GOBLIN_EINVAL);
    goblin_graph_free(bad);
    goblin_graph_free(g);
}

/* ---- jobs on an embedded grid ------------------------------------------------------ */

static goblin_grid *grid3(int n) {
    goblin_grid_params gp;
    goblin_grid_params_default(&gp);
    gp.node.log_level = GOBLIN_LOG_ERROR;
    gp.worker.log_level = GOBLIN_LOG_ERROR;
    return rt_local_grid(n, &gp);
}

/* Node and @p n workers over ipc:// (@p tag makes the path unique): inputs travel in
 * TASKs and the workers' caches, as between machines (over inproc:// the node lends
 * them in place instead). */
/* @p idle_ms: the workers' cache_idle_ms (0: their default). */
static void grid_ipc_idle(rt_grid *g, int n, const char *tag, uint32_t idle_ms) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.log_level = GOBLIN_LOG_ERROR;
    goblin_worker_params wp[4];
    for (int i = 0; i < n; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
        wp[i].log_level = GOBLIN_LOG_ERROR;
        if (idle_ms) wp[i].cache_idle_ms = idle_ms;
    }
    char url[128];
    snprintf(url, sizeof url, "ipc:///tmp/goblin-test-gj-%s-%d", tag, (int)getpid());
    rt_grid_start_joined(g, url, &np, wp, n);
}

static void grid_ipc(rt_grid *g, int n, const char *tag) { grid_ipc_idle(g, n, tag, 0); }

Test(graph_job, outputs_equal_direct_eval_f32) {
    goblin_grid *grid = grid3(3);
    mlp m = mlp_new(GOBLIN_DTYPE_F32, 37, 8, 6);
    job_io io = io_new(&m, 100);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    int64_t calls = 0;
    goblin_job *job = rt_run_graph(goblin_grid_node(grid), m.g, io.in, 3, io.out, 5, &jp);
    int64_t done, total;
    goblin_job_progress(job, &done, &total);
    cr_assert(total >= 12 && done == total, "4 tasks per worker by default (%lld)", (long long)total);
    (void)calls;
    check_outputs(&m, &io);
    goblin_node_stats st;
    goblin_node_stats_get(goblin_grid_node(grid), &st);
    cr_assert(st.replicas_issued > 0, "new workers are replicated");
    cr_assert_eq(st.results_rejected, 0);
    cr_assert_eq(st.workers_quarantined, 0);
    goblin_job_free(job);
    io_free(&io);
    goblin_graph_free(m.g);
    goblin_grid_free(grid);
}

Test(graph_job, strided_inputs_outputs_f64_fixed_chunks) {
    goblin_grid_params gp;
    goblin_grid_params_default(&gp);
    gp.node.log_level = GOBLIN_LOG_ERROR;
    gp.worker.log_level = GOBLIN_LOG_ERROR;
    gp.node.recompute_backend = GOBLIN_BACKEND_REF;
    gp.worker.backend = GOBLIN_BACKEND_REF;
    goblin_grid *grid = rt_local_grid(2, &gp);
    mlp m = mlp_new(GOBLIN_DTYPE_F64, 23, 5, 4);
    job_io io = io_new(&m, 200);
    /* x with a padded row stride, h written into a padded buffer. */
    double *xs = calloc((size_t)(23 * 8), sizeof(double));
    double *hs = calloc((size_t)(23 * 7), sizeof(double));
    for (int64_t i = 0; i < 23; i++)
        for (int64_t k = 0; k < 5; k++) xs[i * 8 + k] = ((double *)io.x)[i * 5 + k];
    job_io sio = io;
    sio.in[0].data = xs;
    sio.in[0].strides[0] = 8;
    sio.out[0].data = hs;
    sio.out[0].strides[0] = 7;
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 5;
    goblin_job *job = rt_run_graph(goblin_grid_node(grid), m.g, sio.in, 3, sio.out, 5, &jp);
    int64_t done, total;
    goblin_job_progress(job, &done, &total);
    cr_assert_eq(total, 5, "23 rows in chunks of 5");
    job_io cio = sio; /* the naive reference reads io.x, the contiguous copy of xs */
    check_outputs_on(&m, &cio, GOBLIN_BACKEND_REF);
    for (int64_t i = 0; i < 23; i++) cr_assert_eq(hs[i * 7 + 5], 0.0, "padding untouched");
    goblin_job_free(job);
    free(xs);
    free(hs);
    io_free(&io);
    goblin_graph_free(m.g);
    goblin_grid_free(grid);
}

/* An MLP over 300 rows whose W and b are BROADCAST inputs cached under ids. */
typedef struct bcast {
    mlp m;
    job_io io;
    uint64_t ids[3];
    goblin_graph_job_params jp;
} bcast;

/* Run @p t's job on @p node (at least 8 tasks) and wait for it. */
static goblin_job *bcast_run(goblin_node *node, bcast *t) {
    goblin_job *job = rt_run_graph(node, t->m.g, t->io.in, 3, t->io.out, 5, &t->jp);
    return job;
}

/* Make @p t (W and b under @p id_w, @p id_b) and run its job once on @p g's two
 * workers; both take part. */
static void bcast_first(rt_grid *g, bcast *t, uint64_t id_w, uint64_t id_b) {
    t->m = mlp_new(GOBLIN_DTYPE_F32, 40, 6, 5);
    t->io = io_new(&t->m, 300);
    goblin_graph_job_params_default(&t->jp);
    t->ids[0] = 0, t->ids[1] = id_w, t->ids[2] = id_b;
    t->jp.cache_ids = t->ids;
    t->jp.job.min_tasks = 8;
    goblin_job_free(bcast_run(g->node, t));
    for (int i = 0; i < 2; i++) {
        goblin_worker_stats ws;
        goblin_worker_stats_get(g->w[i], &ws);
        cr_assert(ws.tasks_done > 0, "worker %d took part in the first job", i);
    }
}

Test(graph_job, broadcast_inputs_cached_across_jobs) {
    rt_grid grid;
    grid_ipc(&grid, 2, "bcast");
    goblin_node *node = grid.node;
    bcast t;
    bcast_first(&grid, &t, 0xabc1, 0xabc2);
    mlp m = t.m;
    job_io io = t.io;
    goblin_node_stats a, b;
    goblin_node_stats_get(node, &a);
    /* Same parameters (same ids), new activations. */
    fill(m.dt, io.x, m.B * m.D, 301);
    goblin_job *job = bcast_run(node, &t);
    goblin_node_stats_get(node, &b);
    int64_t issued = b.tasks_issued - a.tasks_issued;
    cr_assert(issued >= 8);
    cr_assert_eq(b.panel_cache_misses - a.panel_cache_misses, 0);
    cr_assert_eq(b.panel_cache_hits - a.panel_cache_hits, 2 * issued,
                 "every task of the second job went without W and b (%lld hits, %lld tasks)",
                 (long long)(b.panel_cache_hits - a.panel_cache_hits), (long long)issued);
    check_outputs(&m, &io);
    goblin_job_free(job);
    io_free(&io);
    goblin_graph_free(m.g);
    rt_grid_stop(&grid);
}

/* Workers that dropped their kept inputs when idle (cache_idle_ms): the node, which
 * believes they hold W and b, leaves them out; a worker answers ERROR(ENOTFOUND) for
 * the tasks it holds then, and gets them again with W and b (panel_cache_misses); the
 * outputs are right. */
Test(graph_job, broadcast_inputs_resent_after_idle_drop, .timeout = 60) {
    rt_grid grid;
    grid_ipc_idle(&grid, 2, "idle", 300);
    goblin_node *node = grid.node;
    bcast t;
    bcast_first(&grid, &t, 0xabd1, 0xabd2);
    for (int i = 0; i < 2; i++) { /* both drop W and b within 10 s */
        goblin_worker_stats ws;
        goblin_worker_stats_get(grid.w[i], &ws);
        for (int k = 0; k < 500 && ws.cache_expiries == 0; k++) {
            usleep(20000);
            goblin_worker_stats_get(grid.w[i], &ws);
        }
        cr_assert_eq(ws.cache_expiries, 1, "worker %d", i);
        cr_assert_eq(ws.cached_inputs, 0);
    }
    mlp m = t.m;
    job_io io = t.io;
    goblin_node_stats a, b;
    goblin_node_stats_get(node, &a);
    fill(m.dt, io.x, m.B * m.D, 302);
    goblin_job *job = bcast_run(node, &t);
    goblin_node_stats_get(node, &b);
    cr_assert_geq(b.panel_cache_misses - a.panel_cache_misses, 1, "a task named a dropped input");
    /* at most once per task a worker already had when its ERROR reached the node: two
     * slots each */
    cr_assert_leq(b.panel_cache_misses - a.panel_cache_misses, 4, "%lld misses",
                  (long long)(b.panel_cache_misses - a.panel_cache_misses));
    check_outputs(&m, &io);
    goblin_job_free(job);
    io_free(&io);
    goblin_graph_free(m.g);
    rt_grid_stop(&grid);
}

/* A grid of three workers, worker 0 cheating with @p mode at @p rate (its second task
 * misbehaves first: seed 5), no speculation. */
static void cheater_grid(goblin_misbehave mode, double rate, const char *url, rt_grid *g) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.log_level = GOBLIN_LOG_ERROR;
    np.speculate = false;
    goblin_worker_params wps[3];
    for (int i = 0; i < 3; i++) {
        goblin_worker_params_default(&wps[i]);
        wps[i].threads = 1;
        wps[i].log_level = GOBLIN_LOG_ERROR;
    }
    rt_faults[0] = (rt_fault){.mode = mode, .rate = rate, .seed = 5};
    rt_grid_start_joined(g, url, &np, wps, 3);
}

/* One cheating worker among three honest-looking ones. */
static void run_cheater(goblin_misbehave mode, double rate, const char *url) {
    rt_grid g;
    cheater_grid(mode, rate, url, &g);
    mlp m = mlp_new(GOBLIN_DTYPE_F32, 60, 6, 5);
    job_io io = io_new(&m, 400 + (uint64_t)mode);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.job.min_tasks = 30;
    /* Every result replicated: a cheat can never be accepted, so every job's outputs are
     * right (with adaptive trust a trusted cheater's unreplicated results in a job that
     * has ended are not rechecked; see trust_decays below). */
    jp.min_replication = 1.0;
    goblin_node_stats st;
    /* Whether the cheater gets tasks and cheats on them is up to chance (its rate, the
     * scheduler): run jobs until it is caught; every job's outputs must be right. */
    for (int round = 0; round < 8; round++) {
        goblin_job *job = NULL;
        fill(m.dt, io.x, m.B * m.D, 1000 + (uint64_t)round);
        cr_assert_eq(goblin_node_submit_graph(g.node, m.g, io.in, 3, io.out, 5, &jp, &job), GOBLIN_OK);
        cr_assert_eq(goblin_job_wait(job, 30000), GOBLIN_OK, "%s: %s", rt_misbehave_name(mode),
                     goblin_job_error(job));
        check_outputs(&m, &io);
        goblin_job_free(job);
        goblin_node_stats_get(g.node, &st);
        if (st.workers_quarantined) break;
    }
    cr_assert(st.results_rejected > 0, "%s: a rejection", rt_misbehave_name(mode));
    cr_assert(st.replicas_issued > 0);
    cr_assert_eq(st.workers_quarantined, 1, "%s: only the cheater", rt_misbehave_name(mode));
    goblin_worker_stats cs;
    goblin_worker_stats_get(g.w[0], &cs);
    cr_assert(cs.misbehaved > 0);
    bool found = false;
    for (int64_t i = 0; i < st.workers_seen; i++) {
        goblin_node_worker_stats ws;
        cr_assert_eq(goblin_node_worker_stats_get(g.node, i, &ws), GOBLIN_OK);
        if (ws.quarantined) {
            cr_assert(ws.rejected > 0);
            found = true;
        }
    }
    cr_assert(found);
    io_free(&io);
    goblin_graph_free(m.g);
    rt_grid_stop(&g);
}

Test(graph_job, cheater_wrong) { run_cheater(GOBLIN_MISBEHAVE_WRONG, 1.0, "inproc://h1-gj-wrong"); }
Test(graph_job, cheater_scale) { run_cheater(GOBLIN_MISBEHAVE_SCALE, 1.0, "inproc://h1-gj-scale"); }
Test(graph_job, cheater_nan) { run_cheater(GOBLIN_MISBEHAVE_NAN, 0.5, "inproc://h1-gj-nan"); }
Test(graph_job, cheater_stale) { run_cheater(GOBLIN_MISBEHAVE_STALE, 0.7, "inproc://h1-gj-stale"); }
Test(graph_job, cheater_swap) { run_cheater(GOBLIN_MISBEHAVE_SWAP, 0.7, "inproc://h1-gj-swap"); }
Test(graph_job, cheater_truncate) { run_cheater(GOBLIN_MISBEHAVE_TRUNCATE, 0.3, "inproc://h1-gj-trunc"); }

Test(graph_job, trust_decays_with_agreements) {
    /* Adaptive trust alone: probation (a new identity's first results checked by the node
     * or an established worker) and secret audits add checks whose number depends on which
     * worker took which task first; test_collusion.c covers them. */
    goblin_grid_params gp;
    goblin_grid_params_default(&gp);
    gp.node.log_level = GOBLIN_LOG_ERROR;
    gp.worker.log_level = GOBLIN_LOG_ERROR;
    gp.node.probation_results = 0;
    gp.node.audit_rate = 0.0;
    /* One task in flight per worker: a worker sends a result before it asks for its
     * next task, so each agreement is counted before the next replica is decided. With
     * two slots a loaded machine let the workers lease all 64 tasks before the first
     * agreement (64 replicas in a fresh-clone ASan run), so the count measured
     * scheduling, not the trust rule. */
    gp.worker.slots = 1;
    goblin_grid *grid = rt_local_grid(2, &gp);
    goblin_node *node = goblin_grid_node(grid);
    mlp m = mlp_new(GOBLIN_DTYPE_F32, 64, 4, 3);
    job_io io = io_new(&m, 450);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 1;
    jp.trust_halflife = 1.0;
    jp.min_replication = 0.05;
    goblin_job *job = rt_run_graph(node, m.g, io.in, 3, io.out, 5, &jp);
    check_outputs(&m, &io);
    goblin_node_stats st;
    goblin_node_stats_get(node, &st);
    /* The first results of each worker are always replicated; once they agree the rate
     * falls towards 5% (expected ~10 replicas of 64 tasks; 48 would be far out). */
    cr_assert(st.replicas_issued > 0 && st.replicas_issued < 48, "%lld replicas", (long long)st.replicas_issued);
    cr_assert_eq(st.replicas_agreed, st.replicas_issued);
    cr_assert_eq(st.results_accepted, 64 + st.replicas_agreed);
    goblin_job_free(job);
    io_free(&io);
    goblin_graph_free(m.g);
    goblin_grid_free(grid);
}

Test(graph_job, recompute_and_unsafe_none_policies) {
    goblin_grid *grid = grid3(2);
    goblin_node *node = goblin_grid_node(grid);
    mlp m = mlp_new(GOBLIN_DTYPE_F64, 30, 4, 3);
    job_io io = io_new(&m, 500);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.verify = GOBLIN_VERIFY_RECOMPUTE;
    jp.chunk_rows = 4;
    goblin_job *job = rt_run_graph(node, m.g, io.in, 3, io.out, 5, &jp);
    goblin_job_free(job);
    check_outputs(&m, &io);
    goblin_node_stats a;
    goblin_node_stats_get(node, &a);
    cr_assert_eq(a.node_recomputed, 8, "every one of the 8 tasks recomputed");
    cr_assert_eq(a.replicas_issued, 0);
    cr_assert_eq(a.results_accepted, 8);

    memset(io.h, 0, (size_t)(30 * 3) * sizeof(double));
    jp.verify = GOBLIN_VERIFY_UNSAFE_NONE;
    job = rt_run_graph(node, m.g, io.in, 3, io.out, 5, &jp);
    goblin_job_free(job);
    check_outputs(&m, &io);
    goblin_node_stats b;
    goblin_node_stats_get(node, &b);
    cr_assert_eq(b.node_recomputed, a.node_recomputed);
    cr_assert_eq(b.replicas_issued, 0);
    cr_assert_eq(b.results_accepted, 16);
    io_free(&io);
    goblin_graph_free(m.g);
    goblin_grid_free(grid);
}

Test(graph_job, one_worker_replication_falls_back_to_node) {
    goblin_grid *grid = grid3(1);
    mlp m = mlp_new(GOBLIN_DTYPE_F32, 16, 4, 3);
    job_io io = io_new(&m, 600);
    goblin_job *job = rt_run_graph(goblin_grid_node(grid), m.g, io.in, 3, io.out, 5, NULL);
    check_outputs(&m, &io);
    goblin_node_stats st;
    goblin_node_stats_get(goblin_grid_node(grid), &st);
    cr_assert(st.node_recomputed > 0);
    cr_assert_eq(st.replicas_issued, 0);
    goblin_job_free(job);
    io_free(&io);
    goblin_graph_free(m.g);
    goblin_grid_free(grid);
}

Test(graph_job, bad_submits) {
    goblin_grid *grid = grid3(1);
    goblin_node *node = goblin_grid_node(grid);
    mlp m = mlp_new(GOBLIN_DTYPE_F32, 12, 4, 3);
    job_io io = io_new(&m, 700);
    goblin_job *job = NULL;
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    /* counts */
    cr_assert_eq(goblin_node_submit_graph(node, m.g, io.in, 2, io.out, 5, NULL, &job), GOBLIN_EINVAL);
    cr_assert_eq(goblin_node_submit_graph(node, m.g, io.in, 3, io.out, 4, NULL, &job), GOBLIN_EINVAL);
    cr_assert_null(job);
    /* shape and dtype mismatches */
    goblin_tensor bad_in[3] = {io.in[0], io.in[1], io.in[2]};
    bad_in[1].shape[1] = 2;
    cr_assert_eq(goblin_node_submit_graph(node, m.g, bad_in, 3, io.out, 5, NULL, &job), GOBLIN_ESHAPE);
    goblin_tensor bad_out[5];
    memcpy(bad_out, io.out, sizeof bad_out);
    bad_out[0].shape[0] = 11;
    cr_assert_eq(goblin_node_submit_graph(node, m.g, io.in, 3, bad_out, 5, NULL, &job), GOBLIN_ESHAPE);
    memcpy(bad_out, io.out, sizeof bad_out);
    bad_out[2].dtype = GOBLIN_DTYPE_F64;
    cr_assert_eq(goblin_node_submit_graph(node, m.g, io.in, 3, bad_out, 5, NULL, &job), GOBLIN_EDTYPE);
    /* a split that does not apply: a batched input with a cache id; two batched
     * inputs of different sizes */
    uint64_t ids[3] = {9, 0, 0};
    jp.cache_ids = ids;
    cr_assert_eq(goblin_node_submit_graph(node, m.g, io.in, 3, io.out, 5, &jp, &job), GOBLIN_EINVAL);
    jp.cache_ids = NULL;
    goblin_split sp[3] = {GOBLIN_SPLIT_BATCH, GOBLIN_SPLIT_BATCH, GOBLIN_SPLIT_BROADCAST};
    jp.split = sp;
    cr_assert_eq(goblin_node_submit_graph(node, m.g, io.in, 3, io.out, 5, &jp, &job), GOBLIN_ESHAPE);
    jp.split = NULL;
    /* CONCAT of an output that does not follow the batch */
    goblin_combine cb[5] = {GOBLIN_COMBINE_AUTO, GOBLIN_COMBINE_CONCAT, GOBLIN_COMBINE_AUTO, GOBLIN_COMBINE_AUTO,
                            GOBLIN_COMBINE_AUTO};
    jp.combine = cb;
    cr_assert_eq(goblin_node_submit_graph(node, m.g, io.in, 3, io.out, 5, &jp, &job), GOBLIN_EINVAL);
    jp.combine = NULL;
    /* rows that do not fit */
    jp.job.task_memory_bytes = 64;
    cr_assert_eq(goblin_node_submit_graph(node, m.g, io.in, 3, io.out, 5, &jp, &job), GOBLIN_ERANGE);
    jp.job.task_memory_bytes = 0;
    jp.min_replication = 0;
    cr_assert_eq(goblin_node_submit_graph(node, m.g, io.in, 3, io.out, 5, &jp, &job), GOBLIN_EINVAL);
    cr_assert_null(job);

    /* AUTO that cannot decide: an output computed from the broadcast input only. */
    goblin_graph *g2 = NULL;
    goblin_graph_new(&g2);
    int64_t sx[2] = {12, 4}, sw[2] = {4, 3};
    int32_t x, w, rx, rw;
    goblin_graph_input(g2, GOBLIN_DTYPE_F32, 2, sx, &x);
    goblin_graph_input(g2, GOBLIN_DTYPE_F32, 2, sw, &w);
    goblin_graph_add(g2, GOBLIN_OP_RELU, &x, 1, NULL, 0, &rx);
    goblin_graph_add(g2, GOBLIN_OP_RELU, &w, 1, NULL, 0, &rw);
    goblin_graph_output(g2, rx);
    goblin_graph_output(g2, rw);
    float ob[12 * 4], ow[4 * 3];
    goblin_tensor o2[2];
    goblin_tensor_init(&o2[0], GOBLIN_DTYPE_F32, 2, sx, ob);
    goblin_tensor_init(&o2[1], GOBLIN_DTYPE_F32, 2, sw, ow);
    goblin_tensor in2[2] = {io.in[0], io.in[0]};
    goblin_tensor_init(&in2[1], GOBLIN_DTYPE_F32, 2, sw, io.w);
    cr_assert_eq(goblin_node_submit_graph(node, g2, in2, 2, o2, 2, NULL, &job), GOBLIN_EINVAL);
    /* ... but with a rule for it (MAX of identical copies is the copy) it runs. */
    goblin_combine cb2[2] = {GOBLIN_COMBINE_AUTO, GOBLIN_COMBINE_MAX};
    jp.min_replication = 0.25;
    jp.combine = cb2;
    job = rt_run_graph(node, g2, in2, 2, o2, 2, &jp);
    for (int i = 0; i < 12; i++) {
        float v = ((float *)io.w)[i];
        cr_assert_eq(ow[i], v > 0 ? v : 0.0f);
    }
    for (int i = 0; i < 48; i++) {
        float v = ((float *)io.x)[i];
        cr_assert_eq(ob[i], v > 0 ? v : 0.0f);
    }
    goblin_job_free(job);
    goblin_graph_free(g2);
    io_free(&io);
    goblin_graph_free(m.g);
    goblin_grid_free(grid);
}

Test(graph_job, cancel_and_progress) {
    goblin_grid_params gp;
    goblin_grid_params_default(&gp);
    gp.node.log_level = GOBLIN_LOG_ERROR;
    gp.worker.log_level = GOBLIN_LOG_ERROR;
    goblin_grid *grid = NULL;
    cr_assert_eq(goblin_grid_local(2, &gp, &grid), GOBLIN_OK);
    for (int32_t i = 0; i < 2; i++)
        cr_assert_eq(goblin_test_control(GOBLIN_TESTCTRL_WORKER_MISBEHAVE, goblin_grid_worker(grid, i),
                                         GOBLIN_MISBEHAVE_SILENT, 1.0, (uint64_t)i),
                     GOBLIN_OK);
    mlp m = mlp_new(GOBLIN_DTYPE_F32, 20, 4, 3);
    job_io io = io_new(&m, 800);
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_graph(goblin_grid_node(grid), m.g, io.in, 3, io.out, 5, NULL, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 100), GOBLIN_ETIMEDOUT);
    int64_t done = -1, total = -1;
    goblin_job_progress(job, &done, &total);
    cr_assert(done == 0 && total > 0);
    goblin_job_cancel(job);
    cr_assert_eq(goblin_job_wait(job, 1000), GOBLIN_ECANCELED);
    cr_assert_eq(goblin_job_get_status(job), GOBLIN_JOB_CANCELED);
    goblin_job_free(job);
    io_free(&io);
    goblin_graph_free(m.g);
    goblin_grid_free(grid);
}

/* ---- heartbeats ------------------------------------------------------------------- */

static void raw_send(nng_socket s, const goblin__wire_msg *m) {
    uint8_t *buf;
    size_t len;
    cr_assert_eq(goblin__wire_encode(m, &buf, &len), GOBLIN_OK);
    cr_assert_eq(nng_send(s, buf, len, 0), 0);
    goblin_buffer_free(buf);
}

/* Receive until a message of @p type (others dropped); NULL after ~5 s. */
static goblin__wire_msg *raw_recv(nng_socket s, goblin__wire_type type) {
    for (int i = 0; i < 50; i++) {
        void *rb;
        size_t rlen;
        if (nng_recv(s, &rb, &rlen, NNG_FLAG_ALLOC) != 0) continue;
        goblin__wire_msg *r = NULL;
        goblin_err e = goblin__wire_decode(rb, rlen, NULL, 0, &r, NULL, 0);
        nng_free(rb, rlen);
        if (e == GOBLIN_OK && r->type == type) return r;
        goblin__wire_msg_free(r);
    }
    return NULL;
}

Test(graph_job, silent_worker_dropped_busy_worker_kept) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.log_level = GOBLIN_LOG_ERROR;
    np.heartbeat_ms = 100;
    np.speculate = false;
    /* One real worker that is slow (600 ms a task, 6 heartbeat intervals) but alive. */
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.threads = 1;
    wp.log_level = GOBLIN_LOG_ERROR;
    rt_faults[0] = (rt_fault){.mode = GOBLIN_MISBEHAVE_SLOW, .rate = 1.0, .slow_ms = 600};
    rt_grid g;
    const char *url = "inproc://h1-gj-heartbeat";
    rt_grid_start_joined(&g, url, &np, &wp, 1);
    /* A peer that says HELLO, asks for work and then falls silent. */
    nng_socket s;
    cr_assert_eq(nng_pair1_open_poly(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 100);
    cr_assert_eq(nng_dial(s, url, NULL, 0), 0);
    goblin__wire_msg m = rt_raw_hello((uint64_t)1 << 30, false);
    goblin__wkey *key = NULL;
    cr_assert_eq(goblin__wkey_ephemeral(&key, NULL, 0), GOBLIN_OK);
    goblin__wire_msg *ack = rt_raw_join(s, &m, key, NULL);
    goblin__wkey_free(key);
    cr_assert_not_null(ack);
    cr_assert_eq(ack->type, GOBLIN_WIRE_TYPE_HELLO_ACK);
    cr_assert_eq(ack->body.hello_ack.heartbeat_ms, 100);
    goblin__wire_msg_free(ack);
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_LEASE_REQUEST);
    m.body.lease_request.slots = 1;
    raw_send(s, &m);

    mlp mm = mlp_new(GOBLIN_DTYPE_F32, 8, 3, 2);
    job_io io = io_new(&mm, 900);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 2;
    jp.verify = GOBLIN_VERIFY_RECOMPUTE;
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_graph(g.node, mm.g, io.in, 3, io.out, 5, &jp, &job), GOBLIN_OK);
    goblin__wire_msg *task = raw_recv(s, GOBLIN_WIRE_TYPE_TASK);
    cr_assert_not_null(task, "the silent peer got a lease");
    goblin__wire_msg_free(task);
    /* Never answer: the node drops it after 3 heartbeats and reissues the lease. */
    cr_assert_eq(goblin_job_wait(job, 20000), GOBLIN_OK, "%s", goblin_job_error(job));
    check_outputs(&mm, &io);
    goblin_node_stats st;
    goblin_node_stats_get(g.node, &st);
    cr_assert_eq(st.peers_dropped, 1, "only the silent peer");
    cr_assert_eq(st.workers_connected, 1, "the slow worker kept its connection");
    cr_assert(st.tasks_reissued >= 1);
    goblin_node_worker_stats ws;
    cr_assert_eq(goblin_node_worker_stats_get(g.node, 0, &ws), GOBLIN_OK);
    cr_assert(ws.connected && ws.accepted == 4, "the slow worker did every chunk");
    goblin_job_free(job);
    nng_close(s);
    io_free(&io);
    goblin_graph_free(mm.g);
    rt_grid_stop(&g);
}

/* ---- repeated jobs: cached chunk encodings (node) and decoded graphs (worker) ------ */

/* y = x . W with W a constant big enough (72 KiB) for the node to keep its chunk
 * graphs' encodings and the workers their decoded graphs. */
static goblin_graph *const_mm_graph(int64_t B, int64_t D, int64_t H, const double *w) {
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[2] = {B, D}, sw[2] = {D, H};
    goblin_tensor wt;
    goblin_tensor_init(&wt, GOBLIN_DTYPE_F64, 2, sw, (void *)w);
    int32_t ids[2], y;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sx, &ids[0]), GOBLIN_OK);
    cr_assert_eq(goblin_graph_constant(g, &wt, &ids[1]), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, ids, 2, NULL, 0, &y), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, y), GOBLIN_OK);
    return g;
}

Test(graph_job, repeated_jobs_never_reuse_a_stale_graph) {
    goblin_grid *grid = grid3(2);
    enum { B = 40, D = 96, H = 96 };
    double *x = malloc(sizeof(double) * B * D), *y = malloc(sizeof(double) * B * H);
    double *w[2] = {malloc(sizeof(double) * D * H), malloc(sizeof(double) * D * H)};
    fill(GOBLIN_DTYPE_F64, x, B * D, 7);
    fill(GOBLIN_DTYPE_F64, w[0], D * H, 8);
    memcpy(w[1], w[0], sizeof(double) * D * H);
    w[1][D * H - 1] += 1.0; /* the last byte range of the constant differs */
    /* W0, W0 again (same graph), W1, a fresh graph equal to W0, W1 again, W0 again. */
    const int which[6] = {0, 0, 1, 0, 1, 0};
    goblin_graph *g0 = const_mm_graph(B, D, H, w[0]), *g1 = const_mm_graph(B, D, H, w[1]);
    for (int r = 0; r < 6; r++) {
        int k = which[r];
        goblin_graph *fresh = r == 3 ? const_mm_graph(B, D, H, w[0]) : NULL;
        goblin_graph *g = fresh ? fresh : k ? g1 : g0;
        int64_t sx[2] = {B, D}, sy[2] = {B, H};
        goblin_tensor in, out;
        goblin_tensor_init(&in, GOBLIN_DTYPE_F64, 2, sx, x);
        goblin_tensor_init(&out, GOBLIN_DTYPE_F64, 2, sy, y);
        memset(y, 0, sizeof(double) * B * H);
        goblin_graph_job_params jp;
        goblin_graph_job_params_default(&jp);
        jp.verify = GOBLIN_VERIFY_UNSAFE_NONE; /* nothing on the node to mask a stale graph */
        jp.chunk_rows = 7;                           /* two chunk shapes: 7 rows and 5 */
        goblin_job *job = rt_run_graph(goblin_grid_node(grid), g, &in, 1, &out, 1, &jp);
        goblin_job_free(job);
        for (int64_t i = 0; i < B; i++)
            for (int64_t j = 0; j < H; j++) {
                double acc = 0, sc = 0;
                for (int64_t q = 0; q < D; q++) {
                    acc += x[i * D + q] * w[k][q * H + j];
                    sc += fabs(x[i * D + q] * w[k][q * H + j]);
                }
                cr_assert(fabs(y[i * H + j] - acc) <= 2.0 * D * 0x1p-53 * sc + 1e-300,
                          "job %d (W%d): y[%lld,%lld] = %.17g, want %.17g", r, k, (long long)i, (long long)j,
                          y[i * H + j], acc);
            }
        goblin_graph_free(fresh);
    }
    goblin_graph_free(g0);
    goblin_graph_free(g1);
    free(x), free(y), free(w[0]), free(w[1]);
    goblin_grid_free(grid);
}

/* A model's weights are graph constants: the node sends each large one to a worker once
 * (as a cached input, hoist.c), not inside every task's graph. Here a constant comes
 * before the input in node order and a small one stays inline. */
Test(graph_job, large_constants_travel_once_per_worker) {
    rt_grid grid;
    grid_ipc(&grid, 2, "hoist");
    goblin_node *node = grid.node;
    enum { B = 48, D = 64, H = 40 };
    double *x = malloc(sizeof(double) * B * D), *y = malloc(sizeof(double) * B * H);
    double *w = malloc(sizeof(double) * D * H), *w2 = malloc(sizeof(double) * H * H), b[H];
    fill(GOBLIN_DTYPE_F64, w, D * H, 21);
    fill(GOBLIN_DTYPE_F64, w2, H * H, 22);
    fill(GOBLIN_DTYPE_F64, b, H, 23);
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[2] = {B, D}, sw[2] = {D, H}, sw2[2] = {H, H}, sb[1] = {H}, sy[2] = {B, H};
    goblin_tensor tw, tw2, tb;
    goblin_tensor_init(&tw, GOBLIN_DTYPE_F64, 2, sw, w);
    goblin_tensor_init(&tw2, GOBLIN_DTYPE_F64, 2, sw2, w2);
    goblin_tensor_init(&tb, GOBLIN_DTYPE_F64, 1, sb, b);
    int32_t c2, xi, cw, cb, mm, ad, out;
    cr_assert_eq(goblin_graph_constant(g, &tw2, &c2), GOBLIN_OK); /* 12.8 KB: stays inline */
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sx, &xi), GOBLIN_OK);
    cr_assert_eq(goblin_graph_constant(g, &tw, &cw), GOBLIN_OK);  /* 20 KB: hoisted */
    cr_assert_eq(goblin_graph_constant(g, &tb, &cb), GOBLIN_OK);
    int32_t i1[2] = {xi, cw};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, i1, 2, NULL, 0, &mm), GOBLIN_OK);
    int32_t i2[2] = {mm, cb};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, i2, 2, NULL, 0, &ad), GOBLIN_OK);
    int32_t i3[2] = {ad, c2};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, i3, 2, NULL, 0, &out), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, out), GOBLIN_OK);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.job.min_tasks = 8;
    goblin_tensor in, ot;
    goblin_tensor_init(&in, GOBLIN_DTYPE_F64, 2, sx, x);
    goblin_tensor_init(&ot, GOBLIN_DTYPE_F64, 2, sy, y);
    goblin_node_stats a, s;
    for (int r = 0; r < 3; r++) {
        fill(GOBLIN_DTYPE_F64, x, B * D, 30 + (uint64_t)r);
        memset(y, 0, sizeof(double) * B * H);
        goblin_node_stats_get(node, &a);
        goblin_job *job = rt_run_graph(node, g, &in, 1, &ot, 1, &jp);
        goblin_job_free(job);
        goblin_node_stats_get(node, &s);
        int64_t issued = s.tasks_issued - a.tasks_issued, hits = s.panel_cache_hits - a.panel_cache_hits;
        cr_assert(issued >= 8);
        cr_assert_eq(s.panel_cache_misses - a.panel_cache_misses, 0);
        /* Job 0: each worker gets the weight with its first task (a task replicated on
         * the worker that did not get it first carries it too); later jobs: never. */
        if (r == 0) cr_assert(hits >= issued - 2 && hits < issued, "job 0: %lld hits of %lld tasks",
                              (long long)hits, (long long)issued);
        else cr_assert_eq(hits, issued, "job %d: every task without the weight (%lld hits, %lld tasks)", r,
                          (long long)hits, (long long)issued);
        for (int64_t i = 0; i < B; i++)
            for (int64_t j = 0; j < H; j++) {
                double acc = 0, sc = 0;
                for (int64_t q = 0; q < H; q++) {
                    double hq = b[q], hs = fabs(b[q]);
                    for (int64_t k = 0; k < D; k++) {
                        hq += x[i * D + k] * w[k * H + q];
                        hs += fabs(x[i * D + k] * w[k * H + q]);
                    }
                    acc += hq * w2[q * H + j];
                    sc += hs * fabs(w2[q * H + j]);
                }
                cr_assert(fabs(y[i * H + j] - acc) <= 4.0 * (D + H) * 0x1p-53 * sc + 1e-300,
                          "job %d: y[%lld,%lld] = %.17g, want %.17g", r, (long long)i, (long long)j, y[i * H + j], acc);
            }
    }
    /* The caller's input is checked as the caller's: input 0, with its own number. */
    float xf[B * D];
    goblin_tensor bad;
    goblin_tensor_init(&bad, GOBLIN_DTYPE_F32, 2, sx, xf);
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_graph(node, g, &bad, 1, &ot, 1, &jp, &job), GOBLIN_EDTYPE);
    cr_assert_null(job);
    rt_grid_stop(&grid);
    /* In one process (inproc://) every input is lent in place: no data in the TASKs. */
    goblin_grid *eg = grid3(2);
    goblin_node *en = goblin_grid_node(eg);
    memset(y, 0, sizeof(double) * B * H);
    job = rt_run_graph(en, g, &in, 1, &ot, 1, &jp);
    goblin_job_free(job);
    goblin_node_stats_get(en, &s);
    cr_assert_eq(s.panels_in_place, 2 * s.tasks_issued, "x and the hoisted weight of every task lent");
    cr_assert_eq(s.panel_cache_hits, 0);
    int64_t lent = 0;
    for (int i = 0; i < 2; i++) {
        goblin_worker_stats ws;
        goblin_worker_stats_get(goblin_grid_worker(eg, i), &ws);
        lent += ws.inputs_in_place;
    }
    cr_assert_eq(lent, s.panels_in_place);
    for (int64_t i = 0; i < B; i++)
        for (int64_t jx = 0; jx < H; jx++) {
            double acc = 0, sc = 0;
            for (int64_t q = 0; q < H; q++) {
                double hq = b[q], hs = fabs(b[q]);
                for (int64_t k = 0; k < D; k++) {
                    hq += x[i * D + k] * w[k * H + q];
                    hs += fabs(x[i * D + k] * w[k * H + q]);
                }
                acc += hq * w2[q * H + jx];
                sc += hs * fabs(w2[q * H + jx]);
            }
            cr_assert(fabs(y[i * H + jx] - acc) <= 4.0 * (D + H) * 0x1p-53 * sc + 1e-300, "in place: y[%lld,%lld]",
                      (long long)i, (long long)jx);
        }
    goblin_grid_free(eg);
    goblin_graph_free(g);
    free(x), free(y), free(w), free(w2);
}

/* ---- SPOT: a few secret rows recomputed on the node --------------------------------- */

/* A row-by-row graph: y = relu(x . W + b), one CONCAT output; f32. */
typedef struct rowwise {
    goblin_graph *g;
    float *x, *w, *b, *y;
    goblin_tensor in[3], out;
    int64_t B, D, H;
} rowwise;

static rowwise rowwise_new(int64_t B, int64_t D, int64_t H, uint64_t seed) {
    rowwise r = {.B = B, .D = D, .H = H};
    r.x = malloc(sizeof(float) * (size_t)(B * D));
    r.w = malloc(sizeof(float) * (size_t)(D * H));
    r.b = malloc(sizeof(float) * (size_t)H);
    r.y = calloc((size_t)(B * H), sizeof(float));
    fill(GOBLIN_DTYPE_F32, r.x, B * D, seed);
    fill(GOBLIN_DTYPE_F32, r.w, D * H, seed + 1);
    fill(GOBLIN_DTYPE_F32, r.b, H, seed + 2);
    int64_t sx[2] = {B, D}, sw[2] = {D, H}, sb[1] = {H}, sy[2] = {B, H};
    goblin_tensor_init(&r.in[0], GOBLIN_DTYPE_F32, 2, sx, r.x);
    goblin_tensor_init(&r.in[1], GOBLIN_DTYPE_F32, 2, sw, r.w);
    goblin_tensor_init(&r.in[2], GOBLIN_DTYPE_F32, 1, sb, r.b);
    goblin_tensor_init(&r.out, GOBLIN_DTYPE_F32, 2, sy, r.y);
    cr_assert_eq(goblin_graph_new(&r.g), GOBLIN_OK);
    int32_t x, w, b, mm, a, h;
    cr_assert_eq(goblin_graph_input(r.g, GOBLIN_DTYPE_F32, 2, sx, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(r.g, GOBLIN_DTYPE_F32, 2, sw, &w), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(r.g, GOBLIN_DTYPE_F32, 1, sb, &b), GOBLIN_OK);
    int32_t i2[2] = {x, w};
    cr_assert_eq(goblin_graph_add(r.g, GOBLIN_OP_MATMUL, i2, 2, NULL, 0, &mm), GOBLIN_OK);
    int32_t i3[2] = {mm, b};
    cr_assert_eq(goblin_graph_add(r.g, GOBLIN_OP_ADD, i3, 2, NULL, 0, &a), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(r.g, GOBLIN_OP_RELU, &a, 1, NULL, 0, &h), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(r.g, h), GOBLIN_OK);
    return r;
}

/* y against a naive f64 computation, within the rounding bound of each value. */
static void rowwise_check(const rowwise *r) {
    for (int64_t i = 0; i < r->B; i++)
        for (int64_t j = 0; j < r->H; j++) {
            double acc = r->b[j], sc = fabs(r->b[j]);
            for (int64_t k = 0; k < r->D; k++) {
                acc += (double)r->x[i * r->D + k] * r->w[k * r->H + j];
                sc += fabs((double)r->x[i * r->D + k] * r->w[k * r->H + j]);
            }
            double want = acc > 0 ? acc : 0, got = r->y[i * r->H + j];
            cr_assert(fabs(got - want) <= 2.0 * (double)(r->D + 2) * 0x1p-24 * sc + 1e-30,
                      "y[%lld,%lld] = %.9g, want %.9g", (long long)i, (long long)j, got, want);
        }
}

static void rowwise_free(rowwise *r) {
    goblin_graph_free(r->g);
    free(r->x), free(r->w), free(r->b), free(r->y);
}

Test(graph_job, spot_checks_every_task_of_new_workers) {
    goblin_grid *grid = grid3(2);
    goblin_node *node = goblin_grid_node(grid);
    rowwise r = rowwise_new(256, 16, 12, 700);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.verify = GOBLIN_VERIFY_SPOT;
    jp.job.min_tasks = 8;         /* 32 rows a task: min(4, 32 / 16) = 2 rows checked */
    jp.trust_halflife = 1e9;      /* trust never builds: every task is checked */
    goblin_job *job = rt_run_graph(node, r.g, r.in, 3, &r.out, 1, &jp);
    goblin_job_free(job);
    rowwise_check(&r);
    goblin_node_stats st;
    goblin_node_stats_get(node, &st);
    cr_assert_eq(st.spot_checks, 8);
    cr_assert_eq(st.spot_rows_checked, 16);
    cr_assert_eq(st.results_accepted, 8);
    cr_assert_eq(st.results_rejected, 0);
    cr_assert_eq(st.node_recomputed, 0, "no task recomputed whole");
    cr_assert_eq(st.replicas_issued, 0);
    /* Without min_tasks, SPOT cuts 2 chunks per worker (not 4): 128 rows, 16 checked of each. */
    {
        goblin_node_stats s0, s1;
        goblin_node_stats_get(node, &s0);
        goblin_graph_job_params dj;
        goblin_graph_job_params_default(&dj);
        dj.verify = GOBLIN_VERIFY_SPOT;
        dj.trust_halflife = 1e9;
        memset(r.y, 0, sizeof(float) * 256 * 12);
        job = rt_run_graph(node, r.g, r.in, 3, &r.out, 1, &dj);
        int64_t done = 0, total = 0;
        goblin_job_progress(job, &done, &total);
        goblin_job_free(job);
        rowwise_check(&r);
        goblin_node_stats_get(node, &s1);
        cr_assert_eq(total, 4, "2 workers x 2 chunks");
        cr_assert_eq(s1.spot_checks - s0.spot_checks, 4);
        cr_assert_eq(s1.spot_rows_checked - s0.spot_rows_checked, 16);
        st = s1;
    }
    /* An explicit spot_rows; a result whose rows are all checked is recomputed whole. */
    memset(r.y, 0, sizeof(float) * 256 * 12);
    jp.spot_rows = 32;
    job = rt_run_graph(node, r.g, r.in, 3, &r.out, 1, &jp);
    goblin_job_free(job);
    rowwise_check(&r);
    goblin_node_stats s2;
    goblin_node_stats_get(node, &s2);
    cr_assert_eq(s2.node_recomputed - st.node_recomputed, 8);
    cr_assert_eq(s2.spot_checks, st.spot_checks);
    /* Outputs combined over the chunks cannot be spot-checked. */
    mlp m = mlp_new(GOBLIN_DTYPE_F32, 16, 4, 3);
    job_io io = io_new(&m, 701);
    jp.spot_rows = 0;
    cr_assert_eq(goblin_node_submit_graph(node, m.g, io.in, 3, io.out, 5, &jp, &job), GOBLIN_EINVAL);
    jp.spot_rows = -1;
    jp.verify = GOBLIN_VERIFY_SPOT;
    cr_assert_eq(goblin_node_submit_graph(node, r.g, r.in, 3, &r.out, 1, &jp, &job), GOBLIN_EINVAL);
    io_free(&io);
    goblin_graph_free(m.g);
    rowwise_free(&r);
    goblin_grid_free(grid);
}

/* One cheater among two honest workers, every task spot-checked: its cheats are caught,
 * it is quarantined, every job's outputs are right. */
static void spot_cheater(goblin_misbehave mode, double rate, const char *url) {
    rt_grid g;
    cheater_grid(mode, rate, url, &g);
    rowwise r = rowwise_new(480, 8, 6, 800 + (uint64_t)mode);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.verify = GOBLIN_VERIFY_SPOT;
    jp.job.min_tasks = 30;
    jp.min_replication = 1.0;
    goblin_node_stats st;
    for (int round = 0; round < 8; round++) {
        fill(GOBLIN_DTYPE_F32, r.x, r.B * r.D, 900 + (uint64_t)round);
        memset(r.y, 0, sizeof(float) * (size_t)(r.B * r.H));
        goblin_job *job = NULL;
        cr_assert_eq(goblin_node_submit_graph(g.node, r.g, r.in, 3, &r.out, 1, &jp, &job), GOBLIN_OK);
        cr_assert_eq(goblin_job_wait(job, 30000), GOBLIN_OK, "%s: %s", rt_misbehave_name(mode),
                     goblin_job_error(job));
        rowwise_check(&r);
        goblin_job_free(job);
        goblin_node_stats_get(g.node, &st);
        if (st.workers_quarantined) break;
    }
    cr_assert(st.results_rejected > 0, "%s: a rejection", rt_misbehave_name(mode));
    cr_assert_eq(st.workers_quarantined, 1, "%s: only the cheater", rt_misbehave_name(mode));
    cr_assert(st.spot_checks > 0);
    cr_assert(st.spot_checks_prepared > 0 && st.spot_checks_prepared <= st.spot_checks);
    cr_assert_eq(st.replicas_issued, 0);
    goblin_worker_stats cs;
    goblin_worker_stats_get(g.w[0], &cs);
    cr_assert(cs.misbehaved > 0);
    rowwise_free(&r);
    rt_grid_stop(&g);
}

Test(graph_job, spot_cheater_wrong) { spot_cheater(GOBLIN_MISBEHAVE_WRONG, 1.0, "inproc://h1-sp-wrong"); }
Test(graph_job, spot_cheater_scale) { spot_cheater(GOBLIN_MISBEHAVE_SCALE, 1.0, "inproc://h1-sp-scale"); }
/* One NaN in one element: found by the scan for non-finite rows, whichever rows were drawn. */
Test(graph_job, spot_cheater_nan) { spot_cheater(GOBLIN_MISBEHAVE_NAN, 1.0, "inproc://h1-sp-nan"); }
Test(graph_job, spot_cheater_stale) { spot_cheater(GOBLIN_MISBEHAVE_STALE, 1.0, "inproc://h1-sp-stale"); }
Test(graph_job, spot_cheater_swap) { spot_cheater(GOBLIN_MISBEHAVE_SWAP, 1.0, "inproc://h1-sp-swap"); }

/* A graph that is not row by row (each chunk subtracts its own mean): the rows the node
 * recomputes alone differ from the chunk's, so the check escalates to recomputing the
 * whole task, and the honest results are accepted, never rejected. */
/* A task's secret rows are computed while its worker computes (spot_prepare, in the
 * node loop turn that leased it: before any result can be handled), and the check of
 * the result compares with them. A lone cheater's every result is wrong: each check,
 * with prepared rows, rejects it, and the node's recomputation gives the right outputs. */
Test(graph_job, spot_prepared_rows_catch_a_lone_cheater) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.log_level = GOBLIN_LOG_ERROR;
    np.speculate = false;
    goblin_worker_params wp;
    goblin_worker_params_default(&wp);
    wp.threads = 1;
    wp.log_level = GOBLIN_LOG_ERROR;
    rt_faults[0] = (rt_fault){.mode = GOBLIN_MISBEHAVE_WRONG, .rate = 1.0, .seed = 9};
    rt_grid g;
    rt_grid_start_joined(&g, "inproc://h1-sp-prep", &np, &wp, 1);
    rowwise r = rowwise_new(96, 8, 6, 1201);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.verify = GOBLIN_VERIFY_SPOT;
    jp.job.min_tasks = 1;
    jp.min_replication = 1.0;
    goblin_job *job = NULL;
    cr_assert_eq(goblin_node_submit_graph(g.node, r.g, r.in, 3, &r.out, 1, &jp, &job), GOBLIN_OK);
    cr_assert_eq(goblin_job_wait(job, 30000), GOBLIN_OK, "%s", goblin_job_error(job));
    goblin_job_free(job);
    rowwise_check(&r);
    goblin_node_stats st;
    goblin_node_stats_get(g.node, &st);
    cr_assert_eq(st.spot_checks, 1);
    cr_assert_eq(st.spot_checks_prepared, 1, "the rows were computed before the result came");
    cr_assert_eq(st.results_rejected, 1);
    cr_assert_eq(st.node_recomputed, 1);
    rowwise_free(&r);
    rt_grid_stop(&g);
}

Test(graph_job, spot_on_a_graph_not_row_by_row_never_rejects) {
    goblin_grid *grid = grid3(2);
    goblin_node *node = goblin_grid_node(grid);
    enum { B = 64, D = 5, R = 16 };
    double x[B * D], y[B * D];
    fill(GOBLIN_DTYPE_F64, x, B * D, 950);
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[2] = {B, D}, ax[2] = {0, 1};
    int32_t xi, mu, d;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sx, &xi), GOBLIN_OK);
    /* the mean over all of x (over dim 0 alone, the batch would be found in dim 1) */
    goblin_attr at[2] = {goblin_attr_ints(GOBLIN_ATTR_AXES, ax, 2), goblin_attr_int(GOBLIN_ATTR_KEEPDIM, 1)};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MEAN, &xi, 1, at, 2, &mu), GOBLIN_OK);
    int32_t i2[2] = {xi, mu};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SUB, i2, 2, NULL, 0, &d), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, d), GOBLIN_OK);
    goblin_tensor in, out;
    goblin_tensor_init(&in, GOBLIN_DTYPE_F64, 2, sx, x);
    goblin_tensor_init(&out, GOBLIN_DTYPE_F64, 2, sx, y);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.verify = GOBLIN_VERIFY_SPOT;
    jp.chunk_rows = R;
    jp.trust_halflife = 1e9;
    /* not per-sample (the mean over the batch): cut only with CONCAT given (AUTO refuses) */
    cr_assert_eq(goblin_node_submit_graph(node, g, &in, 1, &out, 1, &jp, &(goblin_job *){NULL}), GOBLIN_ESHAPE);
    goblin_combine cat = GOBLIN_COMBINE_CONCAT;
    jp.combine = &cat;
    goblin_job *job = rt_run_graph(node, g, &in, 1, &out, 1, &jp);
    goblin_job_free(job);
    for (int c = 0; c < B / R; c++) {
        double s = 0;
        for (int i = c * R; i < (c + 1) * R; i++)
            for (int j = 0; j < D; j++) s += x[i * D + j];
        for (int i = c * R; i < (c + 1) * R; i++)
            for (int j = 0; j < D; j++)
                cr_assert(fabs(y[i * D + j] - (x[i * D + j] - s / (R * D))) <= 1e-14, "y[%d,%d]", i, j);
    }
    goblin_node_stats st;
    goblin_node_stats_get(node, &st);
    cr_assert_eq(st.results_rejected, 0);
    cr_assert_eq(st.workers_quarantined, 0);
    cr_assert_eq(st.results_escalated, B / R);
    cr_assert_eq(st.node_recomputed, B / R);
    goblin_graph_free(g);
    goblin_grid_free(grid);
}

/* goblin_exec_params.shapes_like: 4 rows evaluated as in the 512-row graph give that
 * graph's rows bit for bit. Here the last product is 4 x 256 x 1024 = 2^20 multiply-adds,
 * which alone BLIS would run on its small-matrix path (another summation order). */
Test(graph_job, shapes_like_gives_the_rows_of_the_big_batch) {
    enum { B = 512, D = 96, H = 1024, O = 256, K = 4 };
    float *x = malloc(sizeof(float) * B * D), *w1 = malloc(sizeof(float) * D * H), *w2 = malloc(sizeof(float) * H * O);
    float *y = malloc(sizeof(float) * B * O), xs[K * D], ys[K * O];
    fill(GOBLIN_DTYPE_F32, x, B * D, 71);
    fill(GOBLIN_DTYPE_F32, w1, D * H, 72);
    fill(GOBLIN_DTYPE_F32, w2, H * O, 73);
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[2] = {B, D}, s1[2] = {D, H}, s2[2] = {H, O}, sy[2] = {B, O};
    int32_t xi, a, b, m1, r, m2;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sx, &xi), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, s1, &a), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, s2, &b), GOBLIN_OK);
    int32_t p1[2] = {xi, a};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, p1, 2, NULL, 0, &m1), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RELU, &m1, 1, NULL, 0, &r), GOBLIN_OK);
    int32_t p2[2] = {r, b};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, p2, 2, NULL, 0, &m2), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, m2), GOBLIN_OK);
    goblin_split split[3] = {GOBLIN_SPLIT_BATCH, GOBLIN_SPLIT_BROADCAST, GOBLIN_SPLIT_BROADCAST};
    goblin_graph *gk = NULL;
    cr_assert_eq(goblin_graph_rebatch(g, split, K, &gk, NULL), GOBLIN_OK);
    goblin_tensor in[3], out;
    goblin_tensor_init(&in[0], GOBLIN_DTYPE_F32, 2, sx, x);
    goblin_tensor_init(&in[1], GOBLIN_DTYPE_F32, 2, s1, w1);
    goblin_tensor_init(&in[2], GOBLIN_DTYPE_F32, 2, s2, w2);
    goblin_tensor_init(&out, GOBLIN_DTYPE_F32, 2, sy, y);
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.threads = 1;
    cr_assert_eq(goblin_graph_eval(g, &ep, in, 3, &out, 1), GOBLIN_OK);
    const int rows[K] = {3, 200, 201, 511};
    for (int q = 0; q < K; q++) memcpy(xs + q * D, x + rows[q] * D, sizeof(float) * D);
    int64_t sxk[2] = {K, D}, syk[2] = {K, O};
    goblin_tensor ink[3] = {in[0], in[1], in[2]}, outk;
    goblin_tensor_init(&ink[0], GOBLIN_DTYPE_F32, 2, sxk, xs);
    goblin_tensor_init(&outk, GOBLIN_DTYPE_F32, 2, syk, ys);
    ep.threads = 2; /* the node's thread count may differ from the worker's */
    ep.shapes_like = g;
    cr_assert_eq(goblin_graph_eval(gk, &ep, ink, 3, &outk, 1), GOBLIN_OK);
    for (int q = 0; q < K; q++)
        for (int j = 0; j < O; j++)
            cr_assert(ys[q * O + j] == y[rows[q] * O + j], "row %d col %d: %.9g vs %.9g", rows[q], j,
                      (double)ys[q * O + j], (double)y[rows[q] * O + j]);
    /* Not the same graph: refused. */
    ep.shapes_like = gk;
    goblin_graph *other = NULL;
    cr_assert_eq(goblin_graph_new(&other), GOBLIN_OK);
    int32_t oi;
    cr_assert_eq(goblin_graph_input(other, GOBLIN_DTYPE_F32, 2, sxk, &oi), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(other, oi), GOBLIN_OK);
    goblin_exec *ex = NULL;
    cr_assert_eq(goblin_exec_new(&ex, other, &ep), GOBLIN_EINVAL);
    goblin_graph_free(other);
    goblin_graph_free(gk);
    goblin_graph_free(g);
    free(x), free(w1), free(w2), free(y);
}
