/* test_batch_axis.c - the batch traced through a graph (graph/batch_axis.c): a
 * seq-first graph rebatched and cut along dim 1 on an embedded grid (against naive
 * loops), a backward op whose dim 0 holds the batch merged with the sequence, and a
 * reshape that splits the batch refused with a message naming it. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <goblin/goblin.h>
#include <goblin/grid.h>

#include "runtime_util.h"

enum { T = 3, B = 7, D = 4, J = 5 };

/* x [T, B, D] (seq-first), W [T*D, J]:
 *   o1 = permute(reshape(tanh(reshape(permute(x, 1 0 2), [B, T*D]) . W), [B, J, 1]), 1 0 2)  [J, B, 1]
 *   o2 = exp(reshape(x, [T, B*D]))                                                          [T, B*D]
 * The batch moves to dim 0, is merged with T*D, carried through a matmul, split out and
 * moved back to dim 1 (o1); merged whole with the inner dim D (o2). */
static goblin_graph *seq_first_graph(void) {
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[3] = {T, B, D}, sw[2] = {T * D, J}, perm[3] = {1, 0, 2};
    int64_t s_r[2] = {B, T * D}, s_r2[3] = {B, J, 1}, s_o2[2] = {T, B * D};
    int32_t x, w, p, r, m, th, r2, o1, r3, o2;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 3, sx, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sw, &w), GOBLIN_OK);
    goblin_attr ap = goblin_attr_ints(GOBLIN_ATTR_PERM, perm, 3);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_PERMUTE, &x, 1, &ap, 1, &p), GOBLIN_OK);
    goblin_attr ar = goblin_attr_ints(GOBLIN_ATTR_SHAPE, s_r, 2);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &p, 1, &ar, 1, &r), GOBLIN_OK);
    int32_t mi[2] = {r, w};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MATMUL, mi, 2, NULL, 0, &m), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_TANH, &m, 1, NULL, 0, &th), GOBLIN_OK);
    goblin_attr ar2 = goblin_attr_ints(GOBLIN_ATTR_SHAPE, s_r2, 3);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &th, 1, &ar2, 1, &r2), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_PERMUTE, &r2, 1, &ap, 1, &o1), GOBLIN_OK);
    goblin_attr ar3 = goblin_attr_ints(GOBLIN_ATTR_SHAPE, s_o2, 2);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &x, 1, &ar3, 1, &r3), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_EXP, &r3, 1, NULL, 0, &o2), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, o1), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, o2), GOBLIN_OK);
    return g;
}

Test(batch_axis, seq_first_graph_rebatched_along_dim_1) {
    goblin_graph *g = seq_first_graph(), *r = NULL;
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_graph_rebatch(g, NULL, 2, &r, &eb), GOBLIN_OK, "%s", eb.message);
    goblin_tensor s;
    goblin_graph_node(r, goblin_graph_input_id(r, 0), NULL, &s, NULL, NULL);
    cr_assert(s.rank == 3 && s.shape[0] == T && s.shape[1] == 2 && s.shape[2] == D);
    goblin_graph_node(r, goblin_graph_input_id(r, 1), NULL, &s, NULL, NULL);
    cr_assert(s.rank == 2 && s.shape[0] == T * D && s.shape[1] == J); /* broadcast: as it was */
    goblin_graph_node(r, goblin_graph_output_id(r, 0), NULL, &s, NULL, NULL);
    cr_assert(s.rank == 3 && s.shape[0] == J && s.shape[1] == 2 && s.shape[2] == 1);
    goblin_graph_node(r, goblin_graph_output_id(r, 1), NULL, &s, NULL, NULL);
    cr_assert(s.rank == 2 && s.shape[0] == T && s.shape[1] == 2 * D);
    goblin_graph_free(r);
    goblin_graph_free(g);
}

Test(batch_axis, seq_first_graph_cut_along_dim_1_matches_loops) {
    goblin_graph *g = seq_first_graph();
    static double x[T * B * D], w[T * D * J], o1[J * B], o2[T * B * D];
    for (int i = 0; i < T * B * D; i++) x[i] = sin(0.37 * i + 0.1);
    for (int i = 0; i < T * D * J; i++) w[i] = cos(0.21 * i) * 0.5;
    int64_t sx[3] = {T, B, D}, sw[2] = {T * D, J}, s1[3] = {J, B, 1}, s2[2] = {T, B * D};
    goblin_tensor in[2], out[2];
    goblin_tensor_init(&in[0], GOBLIN_DTYPE_F64, 3, sx, x);
    goblin_tensor_init(&in[1], GOBLIN_DTYPE_F64, 2, sw, w);
    goblin_tensor_init(&out[0], GOBLIN_DTYPE_F64, 3, s1, o1);
    goblin_tensor_init(&out[1], GOBLIN_DTYPE_F64, 2, s2, o2);
    goblin_grid_params gp;
    goblin_grid_params_default(&gp);
    gp.node.log_level = GOBLIN_LOG_ERROR;
    gp.worker.log_level = GOBLIN_LOG_ERROR;
    goblin_grid *grid = rt_local_grid(2, &gp);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.chunk_rows = 3; /* 3, 3, 1 samples */
    goblin_job *job = rt_run_graph(goblin_grid_node(grid), g, in, 2, out, 2, &jp);
    goblin_node_stats st;
    goblin_node_stats_get(goblin_grid_node(grid), &st);
    cr_assert_eq(st.tasks_completed, 3);
    goblin_job_free(job);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < J; j++) {
            double acc = 0;
            for (int t = 0; t < T; t++)
                for (int d = 0; d < D; d++) acc += x[(t * B + b) * D + d] * w[(t * D + d) * J + j];
            double want = tanh(acc), got = o1[j * B + b];
            cr_assert(fabs(got - want) <= 1e-14, "o1[%d, %d] = %.17g, want %.17g", j, b, got, want);
        }
    for (int i = 0; i < T * B * D; i++)
        cr_assert(fabs(o2[i] - exp(x[i])) <= 1e-15 * exp(x[i]), "o2 flat %d", i);
    goblin_graph_free(g);
    goblin_grid_free(grid);
}

Test(batch_axis, reshape_splitting_the_batch_is_refused_naming_it) {
    goblin_graph *g = NULL, *r = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[2] = {6, 4}, st[2] = {4, 6};
    int32_t x, y;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sx, &x), GOBLIN_OK);
    goblin_attr a = goblin_attr_ints(GOBLIN_ATTR_SHAPE, st, 2);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &x, 1, &a, 1, &y), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, y), GOBLIN_OK);
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_graph_rebatch(g, NULL, 2, &r, &eb), GOBLIN_ESHAPE);
    cr_assert_null(r);
    cr_assert(strstr(eb.message, "node 1 (reshape)") && strstr(eb.message, "splits the batch"), "%s", eb.message);
    goblin_graph_free(g);
}

/* targets y [B, L] -> reshape [B*L] -> nll_loss_backward(g, ., shape [B*L, C], sum) ->
 * reshape [B, L, C]: the backward op's dim 0 holds the batch merged with L (as a
 * language model's flattened logits). Rebatched to 2 samples, its shape attribute follows
 * (2*L rows), and the values are -g at each target, 0 elsewhere (worked out by hand). */
Test(batch_axis, backward_op_with_the_batch_merged_in_dim_0_follows_it) {
    enum { NB = 5, L = 3, C = 4 };
    goblin_graph *g = NULL, *r = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sy[2] = {NB, L}, sf[1] = {NB * L}, sd[2] = {NB * L, C}, so[3] = {NB, L, C};
    int32_t y, go, f, d, o;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_I64, 2, sy, &y), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 0, NULL, &go), GOBLIN_OK);
    goblin_attr af = goblin_attr_ints(GOBLIN_ATTR_SHAPE, sf, 1);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &y, 1, &af, 1, &f), GOBLIN_OK);
    goblin_attr ad[3] = {goblin_attr_ints(GOBLIN_ATTR_SHAPE, sd, 2), goblin_attr_int(GOBLIN_ATTR_REDUCTION, 2),
                         goblin_attr_int(GOBLIN_ATTR_IGNORE_INDEX, -100)};
    int32_t di[2] = {go, f};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_NLL_LOSS_BACKWARD, di, 2, ad, 3, &d), GOBLIN_OK);
    goblin_attr ao = goblin_attr_ints(GOBLIN_ATTR_SHAPE, so, 3);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &d, 1, &ao, 1, &o), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, o), GOBLIN_OK);
    goblin_split split[2] = {GOBLIN_SPLIT_BATCH, GOBLIN_SPLIT_BROADCAST};
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_graph_rebatch(g, split, 2, &r, &eb), GOBLIN_OK, "%s", eb.message);
    goblin_tensor s;
    goblin_graph_node(r, d, NULL, &s, NULL, NULL);
    cr_assert(s.rank == 2 && s.shape[0] == 2 * L && s.shape[1] == C, "nll_loss_backward [%lld, %lld]",
              (long long)s.shape[0], (long long)s.shape[1]);
    int64_t yv[2 * L] = {0, 3, 1, 2, 2, 0}, sy2[2] = {2, L}, so2[3] = {2, L, C};
    double gv = 0.75, ov[2 * L * C];
    goblin_tensor in[2], out[1];
    goblin_tensor_init(&in[0], GOBLIN_DTYPE_I64, 2, sy2, yv);
    goblin_tensor_init(&in[1], GOBLIN_DTYPE_F64, 0, NULL, &gv);
    goblin_tensor_init(&out[0], GOBLIN_DTYPE_F64, 3, so2, ov);
    cr_assert_eq(goblin_graph_eval(r, NULL, in, 2, out, 1), GOBLIN_OK);
    for (int i = 0; i < 2 * L; i++)
        for (int c = 0; c < C; c++)
            cr_assert(ov[i * C + c] == (c == yv[i] ? -gv : 0.0), "row %d class %d: %g", i, c, ov[i * C + c]);
    goblin_graph_free(r);
    goblin_graph_free(g);
}
