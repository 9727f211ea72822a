/* test_client_params.c - every job parameter a remote client gives is the one the node
 * uses: min_tasks and task_memory_bytes of a matmul job (task counts in the node stats,
 * products against an f64 reference), a graph job's verification (RECOMPUTE: the node
 * recomputes every chunk), and values out of bounds refused with a message naming the
 * field, by the client and, in a hand-made frame, by the gateway (docs/wire-protocol.md). */
#include <criterion/criterion.h>
#include <goblin/goblin.h>
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <unistd.h>

#include "hostile_peer.h"
#include "proto/client_wire.h"
#include "runtime_util.h"

typedef struct fixture {
    goblin_grid *grid;
    goblin_gateway *gw;
    goblin_client *c;
    rt_log log; /* the gateway's */
    char url[64];
} fixture;

static void start(fixture *f) {
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->log.mu, NULL);
    cr_assert_eq(goblin_grid_local(2, NULL, &f->grid), GOBLIN_OK);
    cr_assert(rt_wait_workers(goblin_grid_node(f->grid), 2));
    snprintf(f->url, sizeof f->url, "tcp://127.0.0.1:%d", hp_free_port());
    goblin_gateway_params gp;
    goblin_gateway_params_default(&gp);
    gp.listen[0] = f->url;
    gp.n_listen = 1;
    gp.open = true; /* loopback: one principal, no credentials */
    gp.log = rt_log_fn;
    gp.log_user = &f->log;
    cr_assert_eq(goblin_gateway_new(&f->gw, goblin_grid_node(f->grid), &gp), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_start(f->gw), GOBLIN_OK);
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_client_connect(&f->c, f->url, NULL, &eb), GOBLIN_OK, "%s", eb.message);
}

static void stop(fixture *f) {
    goblin_client_free(f->c);
    goblin_gateway_free(f->gw);
    goblin_grid_free(f->grid);
}

static goblin_node_stats stats(fixture *f) {
    goblin_node_stats st;
    goblin_node_stats_get(goblin_grid_node(f->grid), &st);
    return st;
}

/* C = A . B through the client with @p jp (NULL: none), checked against the f64
 * reference; the number of tasks the node cut it into. */
static int64_t remote_product(fixture *f, const goblin_job_params *jp) {
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 96, 64, 31, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 64, 80, 32, true);
    int64_t before = stats(f).tasks_completed;
    goblin_job_id id;
    goblin_err e = jp ? goblin_client_submit_matmul_params(f->c, &a.t, &b.t, jp, &id)
                      : goblin_client_submit_matmul(f->c, &a.t, &b.t, &id);
    cr_assert_eq(e, GOBLIN_OK, "%s", goblin_client_error(f->c));
    goblin_tensor c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < 6000 && (e = goblin_client_fetch_result(f->c, &id, &c)) == GOBLIN_EBUSY; i++)
        usleep(10000);
    cr_assert_eq(e, GOBLIN_OK, "%s", goblin_client_error(f->c));
    cr_assert_eq(rt_check_product(&a.t, &b.t, &c), 0);
    goblin_buffer_free(c.data);
    free(a.data);
    free(b.data);
    return stats(f).tasks_completed - before;
}

Test(client_params, matmul_min_tasks_and_task_memory, .timeout = 120) {
    fixture f;
    start(&f);
    int64_t dflt = remote_product(&f, NULL);
    cr_assert_geq(dflt, 8, "4 per worker asking");
    cr_assert_lt(dflt, 24);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 24;
    int64_t many = remote_product(&f, &jp);
    cr_assert_geq(many, 24, "min_tasks from the client: %lld tasks", (long long)many);
    /* A budget of 16 KiB (12 KiB after headroom, 3072 f32 elements per task) cannot hold
     * the default tiles (48 x 40 x 64: 7,552 elements): the node cuts finer. */
    goblin_job_params_default(&jp);
    jp.task_memory_bytes = 16384;
    int64_t small = remote_product(&f, &jp);
    cr_assert_gt(small, dflt, "task_memory from the client: %lld tasks (default %lld)", (long long)small,
                 (long long)dflt);
    stop(&f);
}

/* y = tanh(x) over a batch of 40 rows of 3. */
static goblin_graph *tanh_graph(void) {
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[] = {40, 3};
    int32_t x, y;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sx, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_TANH, &x, 1, NULL, 0, &y), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, y), GOBLIN_OK);
    return g;
}

Test(client_params, graph_verify_policy_and_chunks, .timeout = 120) {
    fixture f;
    start(&f);
    goblin_graph *g = tanh_graph();
    double xv[120];
    for (int i = 0; i < 120; i++) xv[i] = (double)(i - 60) / 17.0;
    int64_t sx[] = {40, 3};
    goblin_tensor in;
    goblin_tensor_init(&in, GOBLIN_DTYPE_F64, 2, sx, xv);
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.verify = GOBLIN_VERIFY_RECOMPUTE;
    jp.job.min_tasks = 10;
    goblin_node_stats st0 = stats(&f);
    goblin_tensor out;
    memset(&out, 0, sizeof out);
    cr_assert_eq(goblin_client_run_graph(f.c, g, &in, 1, &jp, &out, 1, NULL, NULL), GOBLIN_OK, "%s",
                 goblin_client_error(f.c));
    goblin_node_stats st1 = stats(&f);
    const double *y = out.data;
    for (int i = 0; i < 120; i++) cr_assert_float_eq(y[i], tanh(xv[i]), 1e-15 * 4);
    goblin_buffer_free(out.data);
    int64_t tasks = st1.tasks_completed - st0.tasks_completed;
    cr_assert_eq(tasks, 10, "min_tasks 10 over 40 rows: 10 chunks of 4");
    cr_assert_eq(st1.node_recomputed - st0.node_recomputed, tasks, "RECOMPUTE: the node recomputed each");
    cr_assert_eq(st1.replicas_issued, st0.replicas_issued, "not REPLICATE (the default)");
    goblin_graph_free(g);
    stop(&f);
}

Test(client_params, bad_values_refused_with_the_field_named, .timeout = 120) {
    fixture f;
    start(&f);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 8, 8, 1, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 8, 8, 2, true);
    goblin_job_id id;
    goblin_job_params jp;
    const struct { int64_t min_tasks; uint64_t memory; const char *field; } bad[] = {
        {-3, 0, "min_tasks"}, {(int64_t)1 << 30, 0, "min_tasks"}, {0, 100, "task_memory_bytes"},
        {0, (uint64_t)1 << 60, "task_memory_bytes"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        goblin_job_params_default(&jp);
        jp.min_tasks = bad[i].min_tasks;
        jp.task_memory_bytes = bad[i].memory;
        cr_assert_eq(goblin_client_submit_matmul_params(f.c, &a.t, &b.t, &jp, &id), GOBLIN_EINVAL, "case %zu", i);
        cr_assert(strstr(goblin_client_error(f.c), bad[i].field), "case %zu: %s", i, goblin_client_error(f.c));
        cr_assert_eq(goblin_client_submit_matmul_files_params(f.c, "a.npy", "b.npy", "c.npy", true, &jp, &id),
                     GOBLIN_EINVAL);
        goblin_graph *g = tanh_graph();
        goblin_graph_job_params gp;
        goblin_graph_job_params_default(&gp);
        gp.job = jp;
        double xv[120] = {0};
        int64_t sx[] = {40, 3};
        goblin_tensor in;
        goblin_tensor_init(&in, GOBLIN_DTYPE_F64, 2, sx, xv);
        cr_assert_eq(goblin_client_submit_graph(f.c, g, &in, 1, &gp, &id), GOBLIN_EINVAL);
        cr_assert(strstr(goblin_client_error(f.c), bad[i].field), "%s", goblin_client_error(f.c));
        goblin_graph_free(g);
    }
    /* A client that skips those checks: the gateway's decoder refuses the frame (and
     * closes that connection) and logs which field and why. */
    goblin__cw_msg *m = calloc(1, sizeof *m);
    m->type = GOBLIN__CW_SUBMIT_MATMUL;
    m->request_id = 7;
    m->tensors[0] = a.t;
    m->tensors[1] = b.t;
    size_t n;
    cr_assert_eq(goblin__cw_encoded_size(m, &n), GOBLIN_OK);
    uint8_t *buf = malloc(n);
    cr_assert_eq(goblin__cw_encode_into(m, buf, n, &n), GOBLIN_OK);
    for (int k = 0; k < 8; k++) buf[24 + 8 + k] = 0xff; /* min_tasks = -1 */
    nng_socket s;
    cr_assert_eq(nng_pair1_open(&s), 0); /* as clients speak */
    /* No redial once the gateway closes this connection: nng 1.5 leaks a connection still
     * being set up when its socket is closed (as test_node's raw peers). */
    nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 600000);
    nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 600000);
    cr_assert_eq(nng_dial(s, f.url, NULL, 0), 0);
    cr_assert_eq(nng_send(s, buf, n, 0), 0);
    goblin_gateway_stats gs;
    for (int i = 0; i < 6000; i++) { /* a deadline, not a timing assertion */
        goblin_gateway_stats_get(f.gw, &gs);
        if (gs.refused >= 1) break;
        usleep(10000);
    }
    cr_assert_eq(gs.refused, 1);
    cr_assert(rt_log_has(&f.log, "min_tasks -1 outside 0..1048576"), "%s", f.log.buf);
    nng_close(s);
    free(buf);
    free(m);
    free(a.data);
    free(b.data);
    stop(&f);
}
