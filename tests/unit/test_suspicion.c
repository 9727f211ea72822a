/* test_suspicion.c - results the node has to recompute (inconclusive checks) count
 * against the worker's identity: past GOBLIN__SUSPICION_LIMIT (3) it is quarantined,
 * and the per-worker counters show it (docs/verification.md, "Suspicion costs").
 *
 * The cheaters scale their results by (1 + 1e-3) (GOBLIN_MISBEHAVE_SCALE) on zero-mean
 * f32 data with K = 4096: every element stays inside its contract bound
 * gamma_{K+2}(2^-24) S_ij (about 0.25 here, against changes of at most about 0.1), so
 * no element is provably wrong, but every row's check is far above the accept level of
 * honest rounding: each such tile is recomputed on the node. Before this rule two such
 * workers made the node recompute every tile of a job and were never quarantined. */
#include <criterion/criterion.h>

#include "runtime_util.h"

typedef struct outcome {
    goblin_node_stats st;
    goblin_node_worker_stats ws[3];
    int64_t misbehaved[3];
} outcome;

/* Three workers, the last @p cheaters of them scaling every result. */
static void run(int cheaters, const char *url, outcome *o) {
    goblin_node_params np;
    goblin_node_params_default(&np);
    np.max_retries = 8;
    goblin_worker_params wp[3];
    for (int i = 0; i < 3; i++) {
        goblin_worker_params_default(&wp[i]);
        wp[i].threads = 1;
    }
    for (int i = 3 - cheaters; i < 3; i++)
        rt_faults[i] = (rt_fault){.mode = GOBLIN_MISBEHAVE_SCALE, .rate = 1.0, .seed = 7 + (uint64_t)i};
    memset(o, 0, sizeof *o);
    rt_grid g;
    rt_grid_start_joined(&g, url, &np, wp, 3);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 96, 4096, 3, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 4096, 96, 4, true);
    rt_mat c = rt_mat_new(GOBLIN_DTYPE_F32, 96, 96, 0, false);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 24;
    goblin_job *job;
    cr_assert_eq(goblin_node_submit_matmul(g.node, &a.t, &b.t, &c.t, &jp, &job), GOBLIN_OK);
    goblin_err e = goblin_job_wait(job, 60000);
    cr_assert_eq(e, GOBLIN_OK, "%s (%s)", goblin_strerror(e), goblin_job_error(job));
    /* the node's recomputations replaced every scaled tile */
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c.t), 0);
    goblin_node_stats_get(g.node, &o->st);
    for (int64_t i = 0; i < o->st.workers_seen && i < 3; i++)
        cr_assert_eq(goblin_node_worker_stats_get(g.node, i, &o->ws[i]), GOBLIN_OK);
    for (int i = 0; i < 3; i++) {
        goblin_worker_stats s;
        goblin_worker_stats_get(g.w[i], &s);
        o->misbehaved[i] = s.misbehaved;
    }
    goblin_job_free(job);
    rt_grid_stop(&g);
    free(a.data), free(b.data), free(c.data);
}

/* The cheaters are the workers that misbehaved; the node lists workers in HELLO order,
 * so they are told apart by the node's own counters: every quarantined worker must have
 * been suspected 3 times or rejected, and none of the others suspected at all. */
static void expect(const outcome *o, int cheaters) {
    int cheated = 0, quarantined = 0;
    for (int i = 0; i < 3; i++) cheated += o->misbehaved[i] > 0;
    cr_assert_eq(cheated, cheaters, "every cheater got a task and cheated");
    int64_t suspected = 0;
    for (int i = 0; i < 3; i++) {
        const goblin_node_worker_stats *w = &o->ws[i];
        if (w->quarantined) {
            quarantined++;
            cr_assert(w->suspected >= 3 || w->rejected >= 1, "quarantined worker: suspected %lld, rejected %lld",
                      (long long)w->suspected, (long long)w->rejected);
            suspected += w->suspected;
        } else {
            cr_assert_eq(w->suspected, 0, "an honest worker was suspected");
            cr_assert_eq(w->rejected, 0);
        }
    }
    cr_assert_eq(quarantined, cheaters, "%d of %d cheaters quarantined (escalated %lld, rejected %lld)", quarantined,
                 cheaters, (long long)o->st.results_escalated, (long long)o->st.results_rejected);
    cr_assert_eq(o->st.workers_quarantined, cheaters);
    cr_assert_geq(suspected, 3, "the suspicion rule, not a rejection, quarantined them");
    cr_assert_geq(o->st.results_escalated, suspected);
    fprintf(stderr, "suspicion, %d cheater(s): %lld results recomputed, %lld rejected, %d quarantined\n", cheaters,
            (long long)o->st.results_escalated, (long long)o->st.results_rejected, quarantined);
}

Test(suspicion, one_scaling_worker_is_quarantined, .timeout = 120) {
    outcome o;
    run(1, "inproc://test-suspicion-1", &o);
    expect(&o, 1);
}

Test(suspicion, two_colluding_scaling_workers_are_quarantined, .timeout = 120) {
    outcome o;
    run(2, "inproc://test-suspicion-2", &o);
    expect(&o, 2);
}
