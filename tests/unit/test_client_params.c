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
#include "service/client_impl.h"

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

/* ---- the streamed path: requests in NOACK parts, results straight into the caller's ---- */

static void start_quota(fixture *f, uint64_t quota) {
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->log.mu, NULL);
    cr_assert_eq(goblin_grid_local(2, NULL, &f->grid), GOBLIN_OK);
    cr_assert(rt_wait_workers(goblin_grid_node(f->grid), 2));
    snprintf(f->url, sizeof f->url, "tcp://127.0.0.1:%d", hp_free_port());
    goblin_gateway_params gp;
    goblin_gateway_params_default(&gp);
    gp.listen[0] = f->url;
    gp.n_listen = 1;
    gp.open = true;
    gp.max_bytes_per_principal = quota;
    gp.log = rt_log_fn;
    gp.log_user = &f->log;
    cr_assert_eq(goblin_gateway_new(&f->gw, goblin_grid_node(f->grid), &gp), GOBLIN_OK);
    cr_assert_eq(goblin_gateway_start(f->gw), GOBLIN_OK);
    goblin_errbuf eb = {0};
    cr_assert_eq(goblin_client_connect(&f->c, f->url, NULL, &eb), GOBLIN_OK, "%s", eb.message);
}

/* A product whose request is over a part (300 x 1001 and 1001 x 257 f32: 2.2 MB, three
 * parts, odd element counts so the tensors end in padding), not a multiple of any tile,
 * fetched straight into a strided view of a larger buffer: within the contract of the
 * f64 reference, and the columns between the view's untouched. */
Test(client_params, streamed_parts_result_into_strided_view, .timeout = 240) {
    fixture f;
    start(&f);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 300, 1001, 41, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 1001, 257, 42, true);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = 7;
    goblin_job_id id;
    cr_assert_eq(goblin_client_submit_matmul_params(f.c, &a.t, &b.t, &jp, &id), GOBLIN_OK, "%s",
                 goblin_client_error(f.c));
    float *big = malloc(sizeof(float) * 300 * 514);
    for (int64_t i = 0; i < 300 * 514; i++) big[i] = -7.0f;
    int64_t shp[2] = {300, 257};
    goblin_tensor dst;
    goblin_tensor_init(&dst, GOBLIN_DTYPE_F32, 2, shp, big);
    dst.strides[0] = 514;
    dst.strides[1] = 2;
    goblin_err e;
    for (int i = 0; i < 12000 && (e = goblin__client_fetch_result_into(f.c, &id, &dst)) == GOBLIN_EBUSY; i++)
        usleep(10000);
    cr_assert_eq(e, GOBLIN_OK, "%s", goblin_client_error(f.c));
    cr_assert_eq(rt_check_product(&a.t, &b.t, &dst), 0);
    for (int64_t i = 0; i < 300; i++)
        for (int64_t j = 1; j < 514; j += 2) cr_assert_eq(big[i * 514 + j], -7.0f, "gap written at %lld,%lld",
                                                         (long long)i, (long long)j);
    /* the job is released: fetching it again is an unknown job */
    cr_assert_eq(goblin__client_fetch_result_into(f.c, &id, &dst), GOBLIN_ENOTFOUND);
    /* a destination of another shape or dtype is refused before anything is written */
    cr_assert_eq(goblin_client_submit_matmul(f.c, &a.t, &b.t, &id), GOBLIN_OK, "%s", goblin_client_error(f.c));
    int64_t wrong[2] = {300, 256};
    goblin_tensor bad;
    goblin_tensor_init(&bad, GOBLIN_DTYPE_F32, 2, wrong, big);
    for (int64_t i = 0; i < 300 * 514; i++) big[i] = -7.0f;
    for (int i = 0; i < 12000 && (e = goblin__client_fetch_result_into(f.c, &id, &bad)) == GOBLIN_EBUSY; i++)
        usleep(10000);
    cr_assert_eq(e, GOBLIN_EPROTO, "%s", goblin_client_error(f.c));
    for (int64_t i = 0; i < 300 * 514; i++) cr_assert_eq(big[i], -7.0f);
    free(big);
    free(a.data);
    free(b.data);
    stop(&f);
}

/* A streamed request refused at its first part (over the principal's bytes): the client
 * reports the gateway's refusal once, the rest of its parts are dropped unanswered, and
 * the same connection then runs a product (stale answers are not taken for its). */
Test(client_params, streamed_request_refused_then_usable, .timeout = 240) {
    fixture f;
    start_quota(&f, (uint64_t)3 << 20);
    rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 1024, 1024, 5, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 1024, 1024, 6, true);
    goblin_job_id id;
    goblin_err e = goblin_client_submit_matmul(f.c, &a.t, &b.t, &id);
    cr_assert_eq(e, GOBLIN_ELIMIT, "%s: %s", goblin_err_name(e), goblin_client_error(f.c));
    cr_assert(strstr(goblin_client_error(f.c), "holds for one principal"), "%s", goblin_client_error(f.c));
    int64_t n = remote_product(&f, NULL);
    cr_assert_geq(n, 1);
    free(a.data);
    free(b.data);
    stop(&f);
}

/* ---- a hostile node: replies of another shape, and cut short ------------------------ */

typedef struct fake_node {
    nng_socket s;
    pthread_t th;
    int mode; /* FETCH answered: 0 a RESULT of another shape, 1 a RESULT cut short */
    volatile bool stop;
} fake_node;

static void fake_reply(fake_node *fn, nng_pipe p, const goblin__cw_msg *r, size_t cut) {
    size_t sz, len;
    nng_msg *m;
    /* (no cr_assert here: this runs on the fake node's thread) */
    if (goblin__cw_encoded_size(r, &sz) != GOBLIN_OK || nng_msg_alloc(&m, sz) != 0) return;
    if (goblin__cw_encode_into(r, nng_msg_body(m), sz, &len) != GOBLIN_OK) {
        nng_msg_free(m);
        return;
    }
    if (cut) nng_msg_chop(m, cut);
    nng_msg_set_pipe(m, p);
    if (nng_sendmsg(fn->s, m, 0) != 0) nng_msg_free(m);
}

static void *fake_main(void *arg) {
    fake_node *fn = arg;
    goblin__cw_msg *q = calloc(2, sizeof *q), *r = q + 1;
    float cdata[6 * 5] = {0};
    while (!fn->stop) {
        nng_msg *in;
        if (nng_recvmsg(fn->s, &in, 0) != 0) continue;
        goblin__cw_limits lim = {1 << 20, 1 << 20};
        char why[200];
        if (goblin__cw_decode(nng_msg_body(in), nng_msg_len(in), &lim, q, why, sizeof why) == GOBLIN_OK) {
            memset(r, 0, sizeof *r);
            r->request_id = q->request_id;
            size_t cut = 0;
            if (q->type == GOBLIN__CW_STATS) {
                r->type = GOBLIN__CW_STATS_REPLY;
            } else if (q->type == GOBLIN__CW_SUBMIT_MATMUL) {
                r->type = GOBLIN__CW_SUBMITTED;
                memset(&r->job_id, 0x5a, sizeof r->job_id);
                r->total = 1;
            } else if (q->type == GOBLIN__CW_FETCH) {
                r->type = GOBLIN__CW_RESULT;
                r->job_id = q->job_id;
                r->has_tensor = true;
                int64_t shp[2] = {6, 5}; /* asked for 4 x 5 */
                goblin_tensor_init(&r->tensors[0], GOBLIN_DTYPE_F32, 2, shp, cdata);
                if (fn->mode == 1) {
                    shp[0] = 4;
                    goblin_tensor_init(&r->tensors[0], GOBLIN_DTYPE_F32, 2, shp, cdata);
                    cut = 13; /* the last bytes of the tensor's data missing */
                }
            } else {
                r->type = GOBLIN__CW_ERROR;
                r->code = GOBLIN_ENOTSUP;
                snprintf(r->text, sizeof r->text, "fake node");
            }
            fake_reply(fn, nng_msg_get_pipe(in), r, cut);
            goblin__cw_msg_clear(q);
        }
        nng_msg_free(in);
    }
    free(q);
    return NULL;
}

Test(client_params, hostile_result_clean_error, .timeout = 60) {
    for (int mode = 0; mode < 2; mode++) {
        fake_node fn = {.mode = mode};
        char url[64];
        snprintf(url, sizeof url, "tcp://127.0.0.1:%d", hp_free_port());
        cr_assert_eq(nng_pair1_open_poly(&fn.s), 0);
        nng_socket_set_ms(fn.s, NNG_OPT_RECVTIMEO, 100);
        cr_assert_eq(nng_listen(fn.s, url, NULL, 0), 0);
        cr_assert_eq(pthread_create(&fn.th, NULL, fake_main, &fn), 0);
        goblin_client_params cp;
        goblin_client_params_default(&cp);
        cp.heartbeat_ms = 0;
        cp.timeout_ms = 10000;
        goblin_client *c = NULL;
        goblin_errbuf eb = {0};
        cr_assert_eq(goblin_client_connect(&c, url, &cp, &eb), GOBLIN_OK, "%s", eb.message);
        rt_mat a = rt_mat_new(GOBLIN_DTYPE_F32, 4, 3, 1, true), b = rt_mat_new(GOBLIN_DTYPE_F32, 3, 5, 2, true);
        goblin_job_id id;
        cr_assert_eq(goblin_client_submit_matmul(c, &a.t, &b.t, &id), GOBLIN_OK, "%s", goblin_client_error(c));
        float out[4 * 5];
        for (int i = 0; i < 20; i++) out[i] = 3.0f;
        int64_t shp[2] = {4, 5};
        goblin_tensor dst;
        goblin_tensor_init(&dst, GOBLIN_DTYPE_F32, 2, shp, out);
        goblin_err e = goblin__client_fetch_result_into(c, &id, &dst);
        cr_assert_eq(e, mode == 0 ? GOBLIN_EPROTO : GOBLIN_EFORMAT, "mode %d: %s: %s", mode, goblin_err_name(e),
                     goblin_client_error(c));
        cr_assert(strstr(goblin_client_error(c), mode == 0 ? "another dtype or shape" : "malformed reply"), "%s",
                  goblin_client_error(c));
        for (int i = 0; i < 20; i++) cr_assert_eq(out[i], 3.0f, "the caller's tensor was written");
        goblin_client_free(c);
        fn.stop = true;
        pthread_join(fn.th, NULL);
        nng_close(fn.s);
        free(a.data);
        free(b.data);
    }
}
