/* tests/unit/test_exec.c - the executor: inputs/outputs validation, zero-copy
 * and strided buffers, reuse, backends and fallback counting. (libgoblin/exec.c) */
#include <criterion/criterion.h>
#include "testutil.h"

static goblin_backend_kind backends[] = {GOBLIN_BACKEND_REF, GOBLIN_BACKEND_BLIS};

/* y = (a + b) * a, with a [2,3] and b [3] broadcast. */
static goblin_graph *small_graph(int32_t *y_out) {
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sa[] = {2, 3}, sb[] = {3};
    int32_t a, b, s, y;
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sa, &a);
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 1, sb, &b);
    int32_t ab[] = {a, b};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, ab, 2, NULL, 0, &s), GOBLIN_OK, "%s",
                 goblin_graph_error(g));
    int32_t sa2[] = {s, a};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MUL, sa2, 2, NULL, 0, &y), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, y), GOBLIN_OK);
    if (y_out) *y_out = y;
    return g;
}

Test(exec, backends_report_availability) {
    cr_assert_eq(goblin_backend_available(GOBLIN_BACKEND_REF), GOBLIN_OK);
    goblin_err e = goblin_backend_available(GOBLIN_BACKEND_CUDA);
    cr_assert(e == GOBLIN_OK || e == GOBLIN_ENOTSUP || e == GOBLIN_ENODEV);
    cr_assert_eq(goblin_backend_available((goblin_backend_kind)42), GOBLIN_EINVAL);
    cr_assert_str_eq(goblin_backend_name(GOBLIN_BACKEND_REF), "ref");
    cr_assert_null(goblin_backend_name((goblin_backend_kind)42));
}

/* Memory: the CPU backends cannot tell; CUDA tells when it has a device, and says
 * why not otherwise (the same error as goblin_backend_available). */
Test(exec, backend_memory_is_known_or_a_clear_error) {
    uint64_t tot = 1, fr = 1;
    cr_assert_eq(goblin_backend_memory(GOBLIN_BACKEND_REF, &tot, &fr), GOBLIN_ENOTSUP);
    cr_assert_eq(tot, 0);
    cr_assert_eq(fr, 0);
    cr_assert_eq(goblin_backend_memory(GOBLIN_BACKEND_BLIS, &tot, &fr), GOBLIN_ENOTSUP);
    cr_assert_eq(goblin_backend_memory((goblin_backend_kind)42, &tot, &fr), GOBLIN_EINVAL);
    cr_assert_eq(goblin_backend_memory(GOBLIN_BACKEND_REF, NULL, &fr), GOBLIN_EINVAL);
    cr_assert_eq(goblin_backend_memory(GOBLIN_BACKEND_REF, &tot, NULL), GOBLIN_EINVAL);
    goblin_err avail = goblin_backend_available(GOBLIN_BACKEND_CUDA);
    goblin_err e = goblin_backend_memory(GOBLIN_BACKEND_CUDA, &tot, &fr);
    if (avail == GOBLIN_OK) {
        cr_assert_eq(e, GOBLIN_OK, "got %s", goblin_err_name(e));
        cr_assert_gt(tot, 0);
        cr_assert_leq(fr, tot);
    } else {
        cr_assert_eq(e, avail, "got %s, available says %s", goblin_err_name(e),
                     goblin_err_name(avail));
        cr_assert_eq(tot, 0);
        cr_assert_eq(fr, 0);
    }
}

Test(exec, evaluates_with_broadcast_and_strided_input) {
    for (size_t bi = 0; bi < sizeof backends / sizeof *backends; bi++) {
        if (goblin_backend_available(backends[bi])) continue;
        goblin_graph *g = small_graph(NULL);
        /* a is given as the transpose of a 3x2 buffer: strides (1, 2) */
        double abuf[6] = {1, 4, 2, 5, 3, 6}; /* a = [[1,2,3],[4,5,6]] */
        double b[3] = {10, 20, 30};
        int64_t sa[] = {2, 3}, sb[] = {3};
        goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_F64, 2, sa, abuf),
                               gt_tensor(GOBLIN_DTYPE_F64, 1, sb, b)};
        in[0].strides[0] = 1;
        in[0].strides[1] = 2;
        goblin_exec_params p;
        goblin_exec_params_default(&p);
        p.backend = backends[bi];
        p.threads = 2;
        goblin_exec *ex;
        cr_assert_eq(goblin_exec_new(&ex, g, &p), GOBLIN_OK);
        goblin_tensor out = {0};
        cr_assert_eq(goblin_exec_run(ex, in, 2, &out, 1), GOBLIN_OK, "%s", goblin_exec_error(ex));
        double expect[6] = {11 * 1, 22 * 2, 33 * 3, 14 * 4, 25 * 5, 36 * 6};
        cr_assert_eq(out.rank, 2);
        cr_assert_eq(out.shape[1], 3);
        for (int i = 0; i < 6; i++) cr_assert_eq(((double *)out.data)[i], expect[i]);
        goblin_buffer_free(out.data);

        /* reuse the executor, writing into a caller buffer that is strided */
        double obuf[12];
        for (int i = 0; i < 12; i++) obuf[i] = -1;
        goblin_tensor o2 = gt_tensor(GOBLIN_DTYPE_F64, 2, sa, obuf);
        o2.strides[0] = 6;
        o2.strides[1] = 2;
        b[0] = 0;
        cr_assert_eq(goblin_exec_run(ex, in, 2, &o2, 1), GOBLIN_OK, "%s", goblin_exec_error(ex));
        cr_assert_eq(obuf[0], 1 * 1);
        cr_assert_eq(obuf[1], -1, "gaps of a strided output stay untouched");
        cr_assert_eq(obuf[2], 22 * 2);
        cr_assert_eq(obuf[10], 36 * 6);
        /* a contiguous caller buffer is written in place */
        double cbuf[6];
        goblin_tensor o3 = gt_tensor(GOBLIN_DTYPE_F64, 2, sa, cbuf);
        cr_assert_eq(goblin_exec_run(ex, in, 2, &o3, 1), GOBLIN_OK);
        cr_assert_eq(o3.data, (void *)cbuf);
        cr_assert_eq(cbuf[3], 4 * 4, "b[0] is now 0");
        goblin_exec_stats st;
        goblin_exec_stats_get(ex, &st);
        cr_assert_eq(st.nodes_run, 6);
        goblin_exec_free(ex);
        goblin_graph_free(g);
    }
}

Test(exec, rejects_bad_inputs_with_messages) {
    goblin_graph *g = small_graph(NULL);
    goblin_exec *ex;
    cr_assert_eq(goblin_exec_new(&ex, g, NULL), GOBLIN_OK);
    double a[6] = {0}, b[4] = {0};
    int64_t sa[] = {2, 3}, sb[] = {4};
    goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_F64, 2, sa, a), gt_tensor(GOBLIN_DTYPE_F64, 1, sb, b)};
    goblin_tensor out = {0};
    cr_assert_eq(goblin_exec_run(ex, in, 2, &out, 1), GOBLIN_ESHAPE);
    cr_assert(strstr(goblin_exec_error(ex), "input 1: expected f64 [3], got f64 [4]"), "%s",
              goblin_exec_error(ex));
    cr_assert_eq(goblin_exec_run(ex, in, 1, &out, 1), GOBLIN_EINVAL);
    cr_assert_eq(goblin_exec_run(ex, in, 2, &out, 2), GOBLIN_EINVAL);
    in[1].shape[0] = 3;
    in[1].dtype = GOBLIN_DTYPE_F32;
    cr_assert_eq(goblin_exec_run(ex, in, 2, &out, 1), GOBLIN_ESHAPE);
    in[1].dtype = GOBLIN_DTYPE_F64;
    in[1].data = NULL;
    cr_assert_eq(goblin_exec_run(ex, in, 2, &out, 1), GOBLIN_EINVAL);
    in[1].data = b;
    float wrong[6];
    goblin_tensor bad_out = gt_tensor(GOBLIN_DTYPE_F32, 2, sa, wrong);
    cr_assert_eq(goblin_exec_run(ex, in, 2, &bad_out, 1), GOBLIN_ESHAPE);
    cr_assert_null(out.data, "no buffer handed out on failure");
    goblin_exec_free(ex);
    goblin_exec_free(NULL);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = (goblin_backend_kind)9;
    cr_assert_eq(goblin_exec_new(&ex, g, &p), GOBLIN_EINVAL);
    p.backend = GOBLIN_BACKEND_CUDA;
    goblin_err e = goblin_exec_new(&ex, g, &p);
    if (e == GOBLIN_OK) goblin_exec_free(ex);
    else cr_assert(e == GOBLIN_ENOTSUP || e == GOBLIN_ENODEV, "%s", goblin_err_name(e));
    goblin_graph_free(g);
}

Test(exec, outputs_of_inputs_constants_and_duplicates) {
    goblin_graph *g;
    goblin_graph_new(&g);
    int64_t s[] = {3};
    int32_t a, c, n;
    goblin_graph_input(g, GOBLIN_DTYPE_I32, 1, s, &a);
    int32_t cv[3] = {7, 8, 9};
    goblin_tensor ct = gt_tensor(GOBLIN_DTYPE_I32, 1, s, cv);
    goblin_graph_constant(g, &ct, &c);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_NEG, &a, 1, NULL, 0, &n), GOBLIN_OK, "%s",
                 goblin_graph_error(g));
    goblin_graph_output(g, a);
    goblin_graph_output(g, c);
    goblin_graph_output(g, n);
    goblin_graph_output(g, n);
    int32_t av[3] = {1, -2, 3};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_I32, 1, s, av);
    goblin_tensor out[4];
    memset(out, 0, sizeof out);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    cr_assert_eq(goblin_graph_eval(g, &p, &in, 1, out, 4), GOBLIN_OK);
    int32_t *o0 = out[0].data, *o1 = out[1].data, *o2 = out[2].data, *o3 = out[3].data;
    cr_assert_neq(out[0].data, (void *)av, "an input returned as output is copied");
    cr_assert_neq(out[2].data, out[3].data, "each output gets its own buffer");
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(o0[i], av[i]);
        cr_assert_eq(o1[i], cv[i]);
        cr_assert_eq(o2[i], -av[i]);
        cr_assert_eq(o3[i], -av[i]);
    }
    for (int i = 0; i < 4; i++) goblin_buffer_free(out[i].data);
    goblin_graph_free(g);
}

Test(exec, empty_tensors_flow_through) {
    goblin_graph *g;
    goblin_graph_new(&g);
    int64_t s[] = {0, 5};
    int32_t a, y;
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, s, &a);
    int32_t aa[] = {a, a};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, aa, 2, NULL, 0, &y), GOBLIN_OK);
    goblin_graph_output(g, y);
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 2, s, NULL), out = {0};
    cr_assert_eq(goblin_graph_eval(g, NULL, &in, 1, &out, 1), GOBLIN_OK);
    cr_assert_eq(out.shape[0], 0);
    cr_assert_eq(out.shape[1], 5);
    goblin_buffer_free(out.data);
    goblin_graph_free(g);
}

Test(exec, no_outputs_is_an_error) {
    goblin_graph *g;
    goblin_graph_new(&g);
    goblin_exec *ex;
    cr_assert_eq(goblin_exec_new(&ex, g, NULL), GOBLIN_OK);
    cr_assert_eq(goblin_exec_run(ex, NULL, 0, NULL, 0), GOBLIN_EINVAL);
    cr_assert(strstr(goblin_exec_error(ex), "no outputs"));
    goblin_exec_free(ex);
    goblin_graph_free(g);
}

/* The CPU backend threads elementwise ops without a hand-written kernel by slicing
 * the output: results must be bit-identical to the reference for any thread count,
 * and no node may fall back. */
Test(exec, threaded_elementwise_matches_reference_bitwise) {
    if (goblin_backend_available(GOBLIN_BACKEND_BLIS)) return;
    goblin_graph *g;
    goblin_graph_new(&g);
    int64_t sa[] = {1001, 67}, sb[] = {1, 67};
    int32_t a, b, e, t, y;
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sa, &a);
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sb, &b);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SIN, &a, 1, NULL, 0, &e), GOBLIN_OK);
    int32_t eb[] = {e, b};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ATAN2, eb, 2, NULL, 0, &t), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_TANH, &t, 1, NULL, 0, &y), GOBLIN_OK);
    goblin_graph_output(g, y);
    static float av[1001 * 67], bv[67];
    uint64_t seed = 7;
    for (int i = 0; i < 1001 * 67; i++) av[i] = (float)(gt_rand(&seed) * 4 - 2);
    for (int i = 0; i < 67; i++) bv[i] = (float)(gt_rand(&seed) * 2 - 1);
    goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_F32, 2, sa, av), gt_tensor(GOBLIN_DTYPE_F32, 2, sb, bv)};
    goblin_tensor ref = {0};
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_REF;
    cr_assert_eq(goblin_graph_eval(g, &p, in, 2, &ref, 1), GOBLIN_OK);
    /* hand check of one element: tanh(atan2(sin(a), b)) */
    double want = tanh(atan2(sin((double)av[5 * 67 + 3]), (double)bv[3]));
    cr_assert(gt_close(((float *)ref.data)[5 * 67 + 3], want, 1e-6, 1e-7));
    int32_t threads[] = {1, 2, 3, 7};
    for (int k = 0; k < 4; k++) {
        p.backend = GOBLIN_BACKEND_BLIS;
        p.threads = threads[k];
        goblin_exec *ex;
        cr_assert_eq(goblin_exec_new(&ex, g, &p), GOBLIN_OK);
        goblin_tensor out = {0};
        cr_assert_eq(goblin_exec_run(ex, in, 2, &out, 1), GOBLIN_OK, "%s", goblin_exec_error(ex));
        cr_assert_eq(memcmp(out.data, ref.data, sizeof av), 0, "threads=%d differs", threads[k]);
        goblin_exec_stats st;
        goblin_exec_stats_get(ex, &st);
        cr_assert_eq(st.nodes_fallback, 0);
        goblin_buffer_free(out.data);
        goblin_exec_free(ex);
    }
    goblin_buffer_free(ref.data);
    goblin_graph_free(g);
}

/* Buffers kept across runs on a thread (exec.c, "warm" cache): a chain of big
 * intermediates evaluated again and again, with inputs changing between runs, gives
 * the hand-computed values every time (a kept buffer is never read before it is
 * written, and never handed to two nodes); a hook installed afterwards sees balanced
 * allocations and frees, never a buffer kept under the default allocator. */
Test(exec, buffers_kept_across_runs_stay_correct_and_hooks_never_see_them) {
    enum { N = 40000 }; /* 320 KB of f64 per intermediate: above the kept size */
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sh[] = {N};
    int32_t x, y;
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 1, sh, &x);
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 1, sh, &y);
    /* t1 = x + y, t2 = t1 * x, t3 = t2 - y, out = t3 * t1 */
    int32_t t1, t2, t3, o, a1[] = {x, y};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, a1, 2, NULL, 0, &t1), GOBLIN_OK);
    int32_t a2[] = {t1, x};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MUL, a2, 2, NULL, 0, &t2), GOBLIN_OK);
    int32_t a3[] = {t2, y};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SUB, a3, 2, NULL, 0, &t3), GOBLIN_OK);
    int32_t a4[] = {t3, t1};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MUL, a4, 2, NULL, 0, &o), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, o), GOBLIN_OK);
    double *xb = malloc(N * sizeof(double)), *yb = malloc(N * sizeof(double));
    for (int hooked = 0; hooked < 2; hooked++) {
        if (hooked) gt_alloc_on();
        for (size_t bi = 0; bi < sizeof backends / sizeof *backends; bi++) {
            goblin_exec_params p;
            goblin_exec_params_default(&p);
            p.backend = backends[bi];
            p.threads = 1;
            goblin_exec *ex;
            cr_assert_eq(goblin_exec_new(&ex, g, &p), GOBLIN_OK);
            for (int run = 0; run < 4; run++) {
                for (int i = 0; i < N; i++) {
                    xb[i] = (double)((i * 7 + run * 13) % 101) / 8.0 - 6.0;
                    yb[i] = (double)((i * 3 + run * 5) % 37) / 4.0 - 4.0;
                }
                goblin_tensor in[2] = {gt_tensor(GOBLIN_DTYPE_F64, 1, sh, xb), gt_tensor(GOBLIN_DTYPE_F64, 1, sh, yb)};
                goblin_tensor out = {0};
                cr_assert_eq(goblin_exec_run(ex, in, 2, &out, 1), GOBLIN_OK, "%s", goblin_exec_error(ex));
                for (int i = 0; i < N; i++) {
                    double s = xb[i] + yb[i]; /* exact: the values are multiples of 1/8 */
                    double want = (s * xb[i] - yb[i]) * s;
                    cr_assert_eq(((double *)out.data)[i], want, "run %d element %d", run, i);
                }
                goblin_buffer_free(out.data);
            }
            goblin_exec_free(ex);
        }
        if (hooked) {
            gt_alloc_off();
            cr_assert_gt(gt_allocs.made, 0);
            cr_assert_eq(gt_allocs.made, gt_allocs.freed, "the hook saw %ld allocations and %ld frees",
                         gt_allocs.made, gt_allocs.freed);
        }
    }
    free(xb);
    free(yb);
    goblin_graph_free(g);
}

/* A RESHAPE of a computed value is a view of its buffer (exec.c alias_plan): the buffer
 * must live until the last reader through any alias, a chain of reshapes shares it, a
 * reshape that is a graph output or reshapes a graph input still gets its own values,
 * and buffers freed after the aliases' last use are reused correctly (sizes chosen so
 * that the executor's reuse pool and kept buffers are exercised). Expected values are
 * computed here element by element. */
Test(exec, reshape_views_keep_their_buffer_alive) {
    enum { R = 64, C = 1024 }; /* 256 KiB f32 buffers: kept and reused across nodes/runs */
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[2] = {R, C}, s1[3] = {R, 32, 32}, s2[1] = {R * C}, s3[2] = {C, R};
    int32_t x, a, r1, r2, r3, m, n2, b, y, rin, ro;
    (void)r3;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sx, &x), GOBLIN_OK);
    int32_t xx[2] = {0, 0};
    xx[0] = xx[1] = x;
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, xx, 2, NULL, 0, &a), GOBLIN_OK); /* a = 2x */
    goblin_attr at1 = goblin_attr_ints(GOBLIN_ATTR_SHAPE, s1, 3);
    goblin_attr at2 = goblin_attr_ints(GOBLIN_ATTR_SHAPE, s2, 1);
    goblin_attr at3 = goblin_attr_ints(GOBLIN_ATTR_SHAPE, s3, 2);
    goblin_attr atx = goblin_attr_ints(GOBLIN_ATTR_SHAPE, sx, 2);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &a, 1, &at1, 1, &r1), GOBLIN_OK);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &r1, 1, &at2, 1, &r2), GOBLIN_OK);
    int32_t rr[2] = {r2, r2};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MUL, rr, 2, NULL, 0, &m), GOBLIN_OK); /* 4x^2, flat */
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &m, 1, &atx, 1, &n2), GOBLIN_OK);
    int32_t an[2] = {a, n2};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SUB, an, 2, NULL, 0, &b), GOBLIN_OK); /* 2x - 4x^2 */
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &r1, 1, &at3, 1, &r3), GOBLIN_OK); /* read late */
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &x, 1, &at2, 1, &rin), GOBLIN_OK); /* of an input */
    int32_t br[2] = {b, b};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, br, 2, NULL, 0, &y), GOBLIN_OK); /* 4x - 8x^2 */
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &y, 1, &at1, 1, &ro), GOBLIN_OK); /* an output */
    int32_t r4;
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_RESHAPE, &r1, 1, &at3, 1, &r4), GOBLIN_OK); /* a late view */
    int32_t ry[2] = {r4, r4}, z;
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MUL, ry, 2, NULL, 0, &z), GOBLIN_OK); /* 4x^2 as [C, R] */
    cr_assert_eq(goblin_graph_output(g, ro), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, z), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, rin), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, r3), GOBLIN_OK);
    float *xd = malloc(sizeof(float) * R * C);
    for (int be = 0; be < 2; be++) {
        if (goblin_backend_available(backends[be]) != GOBLIN_OK) continue;
        goblin_exec_params p;
        goblin_exec_params_default(&p);
        p.backend = backends[be];
        p.threads = 1;
        goblin_exec *ex;
        cr_assert_eq(goblin_exec_new(&ex, g, &p), GOBLIN_OK);
        for (int rep = 0; rep < 3; rep++) {
            for (int64_t i = 0; i < R * C; i++) xd[i] = (float)((i * 7 + rep * 3) % 23) * 0.25f - 2.0f;
            goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 2, sx, xd), out[4];
            memset(out, 0, sizeof out);
            cr_assert_eq(goblin_exec_run(ex, &in, 1, out, 4), GOBLIN_OK, "%s", goblin_exec_error(ex));
            cr_assert_eq(out[0].rank, 3);
            cr_assert_eq(out[1].shape[0], C);
            for (int64_t i = 0; i < R * C; i++) {
                float v = xd[i], two = v + v, sq = two * two;
                float bb = two - sq;
                cr_assert_eq(((float *)out[0].data)[i], bb + bb, "backend %d run %d y[%lld]", be, rep, (long long)i);
                cr_assert_eq(((float *)out[1].data)[i], sq, "backend %d run %d z[%lld]", be, rep, (long long)i);
                cr_assert_eq(((float *)out[2].data)[i], v);
                cr_assert_eq(((float *)out[3].data)[i], two);
            }
            for (int o = 0; o < 4; o++) {
                cr_assert_neq(out[o].data, (void *)xd);
                goblin_buffer_free(out[o].data);
            }
        }
        goblin_exec_free(ex);
    }
    free(xd);
    goblin_graph_free(g);
}

/* ---- movement ops as views feeding attention (exec.c alias_plan) -------------------------
 * x [B, T, 3 H D]; a = x + x (computed: its buffer is the executor's); q, k, v taken from a
 * by movement ops, attention over heads, the result transposed back to [B, T, H D]. Four
 * spellings: slice + reshape + permute (torch's qkv.split(...).view(...).transpose(1, 2));
 * reshape [B, T, 3, H, D] + permute + select; step-2 slices (column stride 2); split. A node
 * h = a * 3 allocated between the views and the attention has a's size: were a's buffer
 * released after its last direct reader, h would take it and overwrite the heads the
 * attention still reads. Expected values: a naive attention in double from x. */
typedef struct att_case {
    int64_t B, T, H, D;
    int variant;
    bool causal;
    goblin_dtype dt;
} att_case;

static int32_t att_add(goblin_graph *g, goblin_op op, int32_t x, const goblin_attr *at, int32_t n_at) {
    int32_t id = -1;
    cr_assert_eq(goblin_graph_add(g, op, &x, 1, at, n_at, &id), GOBLIN_OK, "%s", goblin_graph_error(g));
    return id;
}

static int32_t att_slice(goblin_graph *g, int32_t x, int64_t start, int64_t stop, int64_t step) {
    int64_t ax[1] = {2}, st[1] = {start}, sp[1] = {stop}, se[1] = {step};
    goblin_attr at[4] = {goblin_attr_ints(GOBLIN_ATTR_AXES, ax, 1), goblin_attr_ints(GOBLIN_ATTR_STARTS, st, 1),
                         goblin_attr_ints(GOBLIN_ATTR_STOPS, sp, 1), goblin_attr_ints(GOBLIN_ATTR_STEPS, se, 1)};
    return att_add(g, GOBLIN_OP_SLICE, x, at, 4);
}

/* outputs: y [B, T, H D], h = 3a */
static goblin_graph *att_graph(const att_case *c) {
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t B = c->B, T = c->T, H = c->H, D = c->D, HD = H * D;
    int64_t sx[3] = {B, T, 3 * HD}, s4[4] = {B, T, H, D}, s5[5] = {B, T, 3, H, D}, sy[3] = {B, T, HD};
    int64_t p4[4] = {0, 2, 1, 3}, p5[5] = {2, 0, 3, 1, 4};
    int32_t x, a, qkv[3];
    cr_assert_eq(goblin_graph_input(g, c->dt, 3, sx, &x), GOBLIN_OK);
    int32_t xx[2] = {x, x};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, xx, 2, NULL, 0, &a), GOBLIN_OK);
    goblin_attr r4 = goblin_attr_ints(GOBLIN_ATTR_SHAPE, s4, 4), pm4 = goblin_attr_ints(GOBLIN_ATTR_PERM, p4, 4);
    if (c->variant == 1) {
        goblin_attr r5 = goblin_attr_ints(GOBLIN_ATTR_SHAPE, s5, 5), pm5 = goblin_attr_ints(GOBLIN_ATTR_PERM, p5, 5);
        int32_t all = att_add(g, GOBLIN_OP_PERMUTE, att_add(g, GOBLIN_OP_RESHAPE, a, &r5, 1), &pm5, 1);
        for (int w = 0; w < 3; w++) {
            goblin_attr sel[2] = {goblin_attr_int(GOBLIN_ATTR_AXIS, 0), goblin_attr_int(GOBLIN_ATTR_INDEX, w)};
            qkv[w] = att_add(g, GOBLIN_OP_SELECT, all, sel, 2);
        }
    } else {
        for (int w = 0; w < 3; w++) {
            int32_t s;
            if (c->variant == 0) {
                s = att_slice(g, a, w * HD, (w + 1) * HD, 1);
            } else if (c->variant == 2) { /* q: even columns of the first 2 HD, k: odd ones */
                s = w < 2 ? att_slice(g, a, w, 2 * HD, 2) : att_slice(g, a, 2 * HD, 3 * HD, 1);
            } else {
                goblin_attr sp[3] = {goblin_attr_int(GOBLIN_ATTR_AXIS, -1), goblin_attr_int(GOBLIN_ATTR_CHUNKS, 3),
                                     goblin_attr_int(GOBLIN_ATTR_INDEX, w)};
                s = att_add(g, GOBLIN_OP_SPLIT, a, sp, 3);
            }
            qkv[w] = att_add(g, GOBLIN_OP_PERMUTE, att_add(g, GOBLIN_OP_RESHAPE, s, &r4, 1), &pm4, 1);
        }
    }
    int32_t three, h, o;
    {
        int64_t s1[1] = {1};
        double v3 = 3;
        float v3f = 3;
        goblin_tensor t = gt_tensor(c->dt, 1, s1, c->dt == GOBLIN_DTYPE_F64 ? (void *)&v3 : (void *)&v3f);
        cr_assert_eq(goblin_graph_constant(g, &t, &three), GOBLIN_OK);
        int32_t at[2] = {a, three};
        cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_MUL, at, 2, NULL, 0, &h), GOBLIN_OK);
    }
    goblin_attr ca = goblin_attr_int(GOBLIN_ATTR_CAUSAL, c->causal ? 1 : 0);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SDPA, qkv, 3, &ca, 1, &o), GOBLIN_OK, "%s", goblin_graph_error(g));
    goblin_attr ry = goblin_attr_ints(GOBLIN_ATTR_SHAPE, sy, 3);
    int32_t y = att_add(g, GOBLIN_OP_RESHAPE, att_add(g, GOBLIN_OP_PERMUTE, o, &pm4, 1), &ry, 1);
    cr_assert_eq(goblin_graph_output(g, y), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, h), GOBLIN_OK);
    return g;
}

/* element (b, i, f) of q (w = 0), k (1), v (2) as a column of a = 2x, f = h D + e */
static int64_t att_col(const att_case *c, int w, int64_t f) {
    int64_t HD = c->H * c->D;
    if (c->variant == 2) return w < 2 ? 2 * f + w : 2 * HD + f;
    return w * HD + f;
}

static void att_expect(const att_case *c, const double *x, double *y) {
    int64_t T = c->T, H = c->H, D = c->D, W = 3 * H * D;
    double s[64];
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                const double *xr = x + (b * T + i) * W;
                double mx = -INFINITY;
                for (int64_t j = 0; j < T; j++) {
                    const double *kr = x + (b * T + j) * W;
                    double dot = 0;
                    for (int64_t e = 0; e < D; e++)
                        dot += 2 * xr[att_col(c, 0, h * D + e)] * 2 * kr[att_col(c, 1, h * D + e)];
                    s[j] = c->causal && j > i ? -INFINITY : dot / sqrt((double)D);
                    if (s[j] > mx) mx = s[j];
                }
                double z = 0;
                for (int64_t j = 0; j < T; j++) z += s[j] = exp(s[j] - mx);
                for (int64_t e = 0; e < D; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < T; j++) acc += s[j] * 2 * x[(b * T + j) * W + att_col(c, 2, h * D + e)];
                    y[(b * T + i) * H * D + h * D + e] = acc / z;
                }
            }
}

static double att_get(const goblin_tensor *t, int64_t i) {
    return t->dtype == GOBLIN_DTYPE_F64 ? ((double *)t->data)[i] : ((float *)t->data)[i];
}

Test(exec, movement_views_feed_attention_and_keep_their_buffer) {
    enum { NC = 9 };
    att_case cases[NC] = {
        {3, 5, 2, 3, 0, false, GOBLIN_DTYPE_F32}, {3, 5, 2, 3, 0, true, GOBLIN_DTYPE_F64},
        {2, 7, 3, 5, 1, false, GOBLIN_DTYPE_F32}, {2, 7, 3, 5, 1, true, GOBLIN_DTYPE_F32},
        {2, 6, 2, 4, 2, false, GOBLIN_DTYPE_F32}, {2, 6, 2, 4, 2, true, GOBLIN_DTYPE_F64},
        {2, 9, 2, 8, 3, false, GOBLIN_DTYPE_F32},
        {2, 9, 2, 72, 0, false, GOBLIN_DTYPE_F32}, /* E > 64: BLIS products on strided heads */
        {64, 16, 4, 32, 0, false, GOBLIN_DTYPE_F32}, /* 2 MiB buffers: reused and kept */
    };
    uint64_t seed = 7;
    for (int ci = 0; ci < NC; ci++) {
        const att_case *c = &cases[ci];
        int64_t W = 3 * c->H * c->D, nx = c->B * c->T * W, ny = c->B * c->T * c->H * c->D;
        goblin_graph *g = att_graph(c);
        double *xd = malloc(sizeof(double) * (size_t)nx), *yd = malloc(sizeof(double) * (size_t)ny);
        void *xb = malloc(sizeof(double) * (size_t)nx);
        for (int64_t i = 0; i < nx; i++) {
            float v = (float)(gt_rand(&seed) * 2 - 1);
            xd[i] = v;
            if (c->dt == GOBLIN_DTYPE_F64) ((double *)xb)[i] = v;
            else ((float *)xb)[i] = v;
        }
        att_expect(c, xd, yd);
        int64_t sx[3] = {c->B, c->T, W};
        double tol = c->dt == GOBLIN_DTYPE_F64 ? 1e-12 : 2e-5;
        for (size_t bi = 0; bi < sizeof backends / sizeof *backends; bi++) {
            if (goblin_backend_available(backends[bi])) continue;
            goblin_exec_params p;
            goblin_exec_params_default(&p);
            p.backend = backends[bi];
            p.threads = 1 + (int32_t)(ci % 2);
            goblin_exec *ex;
            cr_assert_eq(goblin_exec_new(&ex, g, &p), GOBLIN_OK);
            for (int rep = 0; rep < 2; rep++) {
                goblin_tensor in = gt_tensor(c->dt, 3, sx, xb), out[2];
                memset(out, 0, sizeof out);
                cr_assert_eq(goblin_exec_run(ex, &in, 1, out, 2), GOBLIN_OK, "%s", goblin_exec_error(ex));
                for (int64_t i = 0; i < ny; i++)
                    cr_assert(gt_close(att_get(&out[0], i), yd[i], tol, tol), "case %d backend %d y[%lld] = %.9g, expected %.9g",
                              ci, (int)bi, (long long)i, att_get(&out[0], i), yd[i]);
                for (int64_t i = 0; i < nx; i++)
                    cr_assert_eq(att_get(&out[1], i), c->dt == GOBLIN_DTYPE_F64 ? 6 * xd[i] : (double)(float)(6 * xd[i]),
                                 "case %d h[%lld]", ci, (long long)i);
                goblin_buffer_free(out[0].data);
                goblin_buffer_free(out[1].data);
            }
            goblin_exec_free(ex);
        }
        free(xd);
        free(yd);
        free(xb);
        goblin_graph_free(g);
    }
}

/* A spot-check recomputes some rows of a chunk with the same graph at another batch size
 * (goblin_exec_params.shapes_like): through the views and the attention kernel each row
 * must come out bit for bit as in the whole chunk. */
Test(exec, attention_views_rows_agree_bitwise_with_shapes_like) {
    att_case big = {12, 16, 4, 32, 0, false, GOBLIN_DTYPE_F32}, one = big;
    one.B = 1;
    goblin_graph *gb = att_graph(&big), *g1 = att_graph(&one);
    int64_t W = 3 * big.H * big.D, per = big.T * W, yper = big.T * big.H * big.D;
    float *x = malloc(sizeof(float) * (size_t)(big.B * per));
    uint64_t seed = 11;
    for (int64_t i = 0; i < big.B * per; i++) x[i] = (float)(gt_rand(&seed) * 4 - 2);
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.threads = 1;
    int64_t sb[3] = {big.B, big.T, W}, s1[3] = {1, big.T, W};
    goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F32, 3, sb, x), out[2];
    memset(out, 0, sizeof out);
    cr_assert_eq(goblin_graph_eval(gb, &p, &in, 1, out, 2), GOBLIN_OK);
    p.shapes_like = gb;
    for (int64_t b = 0; b < big.B; b += 5) {
        goblin_tensor in1 = gt_tensor(GOBLIN_DTYPE_F32, 3, s1, x + b * per), o1[2];
        memset(o1, 0, sizeof o1);
        cr_assert_eq(goblin_graph_eval(g1, &p, &in1, 1, o1, 2), GOBLIN_OK);
        cr_assert_eq(memcmp(o1[0].data, (float *)out[0].data + b * yper, sizeof(float) * (size_t)yper), 0,
                     "row %lld differs", (long long)b);
        goblin_buffer_free(o1[0].data);
        goblin_buffer_free(o1[1].data);
    }
    goblin_buffer_free(out[0].data);
    goblin_buffer_free(out[1].data);
    free(x);
    goblin_graph_free(gb);
    goblin_graph_free(g1);
}

/* Views the executor may or may not take (a reshape of a transposed view has no strides:
 * it copies) still give the right values: x [R, C] -> a = x + x -> permute [C, R] ->
 * reshape [C R] (a copy of the transpose), and slice of rows 1.. (contiguous: a view any
 * consumer reads) -> reshape -> exp. Expected values by index arithmetic. */
Test(exec, views_that_cannot_reshape_copy) {
    enum { R = 6, C = 10 };
    goblin_graph *g;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t sx[2] = {R, C}, pm[2] = {1, 0}, sf[1] = {C * R}, sr[2] = {(R - 1) * 2, C / 2};
    int32_t x, a;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F64, 2, sx, &x), GOBLIN_OK);
    int32_t xx[2] = {x, x};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, xx, 2, NULL, 0, &a), GOBLIN_OK);
    goblin_attr ap = goblin_attr_ints(GOBLIN_ATTR_PERM, pm, 2), af = goblin_attr_ints(GOBLIN_ATTR_SHAPE, sf, 1);
    int32_t flat = att_add(g, GOBLIN_OP_RESHAPE, att_add(g, GOBLIN_OP_PERMUTE, a, &ap, 1), &af, 1);
    int64_t ax[1] = {0}, st[1] = {1}, sp[1] = {R};
    goblin_attr sl[3] = {goblin_attr_ints(GOBLIN_ATTR_AXES, ax, 1), goblin_attr_ints(GOBLIN_ATTR_STARTS, st, 1),
                         goblin_attr_ints(GOBLIN_ATTR_STOPS, sp, 1)};
    goblin_attr ar = goblin_attr_ints(GOBLIN_ATTR_SHAPE, sr, 2);
    int32_t rows = att_add(g, GOBLIN_OP_RESHAPE, att_add(g, GOBLIN_OP_SLICE, a, sl, 3), &ar, 1);
    int32_t e = att_add(g, GOBLIN_OP_EXP, rows, NULL, 0);
    cr_assert_eq(goblin_graph_output(g, flat), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, e), GOBLIN_OK);
    double xd[R * C];
    for (int i = 0; i < R * C; i++) xd[i] = (i % 7) * 0.25 - 0.5;
    for (size_t bi = 0; bi < sizeof backends / sizeof *backends; bi++) {
        if (goblin_backend_available(backends[bi])) continue;
        goblin_exec_params p;
        goblin_exec_params_default(&p);
        p.backend = backends[bi];
        goblin_tensor in = gt_tensor(GOBLIN_DTYPE_F64, 2, sx, xd), out[2];
        memset(out, 0, sizeof out);
        cr_assert_eq(goblin_graph_eval(g, &p, &in, 1, out, 2), GOBLIN_OK);
        for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++) cr_assert_eq(((double *)out[0].data)[c * R + r], 2 * xd[r * C + c]);
        for (int i = 0; i < (R - 1) * C; i++)
            cr_assert(gt_close(((double *)out[1].data)[i], exp(2 * xd[C + i]), 1e-15, 0));
        goblin_buffer_free(out[0].data);
        goblin_buffer_free(out[1].data);
    }
    goblin_graph_free(g);
}
