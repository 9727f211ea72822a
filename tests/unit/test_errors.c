/* tests/unit/test_errors.c - error codes, their names and messages, and the
 * argument checks every public entry point makes (EINVAL, never a crash). */
#include <criterion/criterion.h>
#include <goblin/goblin.h>
#include <math.h>
#include <string.h>

/* The error values travel on the wire in error replies: this table freezes
 * them independently of the X-macro (append-only; a renumbering fails here). */
static const struct {
    goblin_err err;
    int value;
    const char *name;
} frozen[] = {
    {GOBLIN_OK, 0, "GOBLIN_OK"},
    {GOBLIN_EINVAL, 1, "GOBLIN_EINVAL"},
    {GOBLIN_ENOMEM, 2, "GOBLIN_ENOMEM"},
    {GOBLIN_ESHAPE, 3, "GOBLIN_ESHAPE"},
    {GOBLIN_EDTYPE, 4, "GOBLIN_EDTYPE"},
    {GOBLIN_ERANGE, 5, "GOBLIN_ERANGE"},
    {GOBLIN_EFORMAT, 6, "GOBLIN_EFORMAT"},
    {GOBLIN_EVERSION, 7, "GOBLIN_EVERSION"},
    {GOBLIN_ENOTSUP, 8, "GOBLIN_ENOTSUP"},
    {GOBLIN_ENODEV, 9, "GOBLIN_ENODEV"},
    {GOBLIN_EDEVICE, 10, "GOBLIN_EDEVICE"},
    {GOBLIN_ESYNTAX, 11, "GOBLIN_ESYNTAX"},
    {GOBLIN_EIO, 12, "GOBLIN_EIO"},
    {GOBLIN_ELIMIT, 13, "GOBLIN_ELIMIT"},
    {GOBLIN_ESTATE, 14, "GOBLIN_ESTATE"},
    {GOBLIN_ETIMEDOUT, 15, "GOBLIN_ETIMEDOUT"},
    {GOBLIN_ECLOSED, 16, "GOBLIN_ECLOSED"},
    {GOBLIN_ECONNREFUSED, 17, "GOBLIN_ECONNREFUSED"},
    {GOBLIN_EAUTH, 18, "GOBLIN_EAUTH"},
    {GOBLIN_ECRYPTO, 19, "GOBLIN_ECRYPTO"},
    {GOBLIN_EVERIFY, 20, "GOBLIN_EVERIFY"},
    {GOBLIN_ECANCELED, 21, "GOBLIN_ECANCELED"},
    {GOBLIN_EBUSY, 22, "GOBLIN_EBUSY"},
    {GOBLIN_ENOTFOUND, 23, "GOBLIN_ENOTFOUND"},
    {GOBLIN_EPROTO, 24, "GOBLIN_EPROTO"},
    {GOBLIN_EINDEX, 25, "GOBLIN_EINDEX"},
    {GOBLIN_EINTERNAL, 26, "GOBLIN_EINTERNAL"},
};
#define N_FROZEN ((int)(sizeof frozen / sizeof frozen[0]))

Test(errors, values_are_frozen) {
    for (int i = 0; i < N_FROZEN; i++)
        cr_expect_eq((int)frozen[i].err, frozen[i].value, "%s moved to %d", frozen[i].name, (int)frozen[i].err);
    cr_expect_geq((int)GOBLIN_ERR_COUNT, N_FROZEN);
}

Test(errors, names) {
    for (int i = 0; i < N_FROZEN; i++)
        cr_expect_str_eq(goblin_err_name(frozen[i].err), frozen[i].name);
    cr_expect_str_eq(goblin_err_name((goblin_err)-1), "GOBLIN_EUNKNOWN");
    cr_expect_str_eq(goblin_err_name(GOBLIN_ERR_COUNT), "GOBLIN_EUNKNOWN");
    cr_expect_str_eq(goblin_err_name((goblin_err)100000), "GOBLIN_EUNKNOWN");
}

Test(errors, messages_match_the_map_and_are_distinct) {
#define EXPECT_MSG(name, value, msg) cr_expect_str_eq(goblin_strerror(GOBLIN_##name), msg);
    GOBLIN_ERR_MAP(EXPECT_MSG)
#undef EXPECT_MSG
    cr_expect_str_eq(goblin_strerror(GOBLIN_OK), "success");
    cr_expect_str_eq(goblin_strerror(GOBLIN_ENOMEM), "out of memory");
    for (int a = 0; a < GOBLIN_ERR_COUNT; a++) {
        const char *ma = goblin_strerror((goblin_err)a);
        cr_assert_not_null(ma);
        cr_expect_gt(strlen(ma), 0u, "empty message for %d", a);
        for (int b = a + 1; b < GOBLIN_ERR_COUNT; b++)
            cr_expect_str_neq(ma, goblin_strerror((goblin_err)b), "codes %d and %d share a message", a, b);
    }
    cr_expect_str_eq(goblin_strerror((goblin_err)-7), "unknown error");
    cr_expect_str_eq(goblin_strerror(GOBLIN_ERR_COUNT), "unknown error");
}

/* ---- argument checks: NULL and nonsense give EINVAL, frees accept NULL ---- */

Test(errors, free_functions_accept_null) {
    goblin_graph_free(NULL);
    goblin_exec_free(NULL);
    goblin_formula_free(NULL);
    goblin_buffer_free(NULL);
    /* Reaching here is the test: a crash in any of the above fails it. */
}

Test(errors, tensor_init_checks) {
    goblin_tensor t;
    int64_t shape[2] = {2, 3};
    float buf[6];
    cr_expect_eq(goblin_tensor_init(NULL, GOBLIN_DTYPE_F32, 2, shape, buf), GOBLIN_EINVAL);
    cr_expect_eq(goblin_tensor_init(&t, (goblin_dtype)99, 2, shape, buf), GOBLIN_EINVAL);
    cr_expect_eq(goblin_tensor_init(&t, GOBLIN_DTYPE_F32, -1, shape, buf), GOBLIN_EINVAL);
    cr_expect_eq(goblin_tensor_init(&t, GOBLIN_DTYPE_F32, GOBLIN_MAX_RANK + 1, shape, buf), GOBLIN_EINVAL);
    int64_t neg[2] = {2, -3};
    cr_expect_eq(goblin_tensor_init(&t, GOBLIN_DTYPE_F32, 2, neg, buf), GOBLIN_EINVAL);
    int64_t huge[3] = {(int64_t)1 << 40, (int64_t)1 << 40, 4};
    cr_expect_eq(goblin_tensor_init(&t, GOBLIN_DTYPE_F32, 3, huge, NULL), GOBLIN_ELIMIT);
    cr_assert_eq(goblin_tensor_init(&t, GOBLIN_DTYPE_F32, 2, shape, buf), GOBLIN_OK);
    cr_expect_eq(t.strides[0], 3);
    cr_expect_eq(t.strides[1], 1);
    cr_expect_eq(goblin_tensor_numel(&t), 6);
    cr_expect(goblin_tensor_is_contiguous(&t));
    t.strides[0] = 1;
    t.strides[1] = 2; /* column-major: not contiguous */
    cr_expect_not(goblin_tensor_is_contiguous(&t));
    cr_assert_eq(goblin_tensor_init(&t, GOBLIN_DTYPE_I8, 0, NULL, buf), GOBLIN_OK);
    cr_expect_eq(goblin_tensor_numel(&t), 1, "a scalar has one element");
}

Test(errors, dtype_checks) {
    goblin_dtype dt;
    cr_expect_eq(goblin_dtype_from_name(NULL, &dt), GOBLIN_EINVAL);
    cr_expect_eq(goblin_dtype_from_name("f32", NULL), GOBLIN_EINVAL);
    cr_expect_eq(goblin_dtype_from_name("float128", &dt), GOBLIN_EINVAL);
    cr_expect_eq(goblin_dtype_from_name("", &dt), GOBLIN_EINVAL);
    cr_expect_eq(goblin_dtype_size((goblin_dtype)-1), 0u);
    cr_expect_eq(goblin_dtype_size(GOBLIN_DTYPE_COUNT), 0u);
    cr_expect_str_eq(goblin_dtype_name(GOBLIN_DTYPE_COUNT), "invalid");
}

Test(errors, catalogue_query_checks) {
    goblin_op op;
    goblin_op_info info;
    double rel, abs_tol;
    cr_expect_eq(goblin_op_from_name(NULL, &op), GOBLIN_EINVAL);
    cr_expect_eq(goblin_op_from_name("add", NULL), GOBLIN_EINVAL);
    cr_expect_eq(goblin_op_from_name("no_such_op", &op), GOBLIN_ENOTFOUND);
    cr_expect_eq(goblin_op_get_info(GOBLIN_OP_ADD, NULL), GOBLIN_EINVAL);
    cr_expect_eq(goblin_op_get_info((goblin_op)5, &info), GOBLIN_EINVAL, "5 is a gap");
    cr_expect_eq(goblin_op_get_info((goblin_op)-1, &info), GOBLIN_EINVAL);
    cr_expect_eq(goblin_op_get_info(GOBLIN_OP_COUNT, &info), GOBLIN_EINVAL);
    cr_expect_eq(goblin_op_contract(GOBLIN_OP_INPUT, GOBLIN_DTYPE_F32, 1, NULL, &abs_tol), GOBLIN_EINVAL);
    cr_expect_eq(goblin_op_contract(GOBLIN_OP_INPUT, GOBLIN_DTYPE_F32, 1, &rel, NULL), GOBLIN_EINVAL);
    cr_expect_eq(goblin_op_contract(GOBLIN_OP_INPUT, (goblin_dtype)42, 1, &rel, &abs_tol), GOBLIN_EINVAL);
    cr_expect_eq(goblin_op_contract((goblin_op)7, GOBLIN_DTYPE_F32, 1, &rel, &abs_tol), GOBLIN_EINVAL);
}

/* A defined op taking exactly one input (which one depends on what this build
 * has), so the checks below do not depend on another group's progress. */
static goblin_op some_unary_op(void) {
    for (int op = goblin_op_next(-1); op >= 0; op = goblin_op_next(op)) {
        goblin_op_info in;
        if (goblin_op_get_info((goblin_op)op, &in) == GOBLIN_OK && in.min_inputs == 1 && in.max_inputs == 1 &&
            (in.dtypes & GOBLIN_DTMASK(GOBLIN_DTYPE_F32)))
            return (goblin_op)op;
    }
    return GOBLIN_OP_COUNT;
}

Test(errors, graph_argument_checks) {
    cr_expect_eq(goblin_graph_new(NULL), GOBLIN_EINVAL);
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    cr_assert_not_null(g);
    cr_expect_str_eq(goblin_graph_error(g), "", "a fresh graph has no error");

    int64_t shape[2] = {2, 3};
    int32_t id = -1, x;
    cr_expect_eq(goblin_graph_input(g, (goblin_dtype)77, 2, shape, &id), GOBLIN_EDTYPE);
    cr_expect_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, -1, shape, &id), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, GOBLIN_MAX_RANK + 1, shape, &id), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_node_count(g), 0, "failed calls add nothing");
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, shape, &x), GOBLIN_OK);

    /* Unknown op, gap, bad input id, and leaves through graph_add. */
    goblin_op un = some_unary_op();
    cr_assert_neq(un, GOBLIN_OP_COUNT, "no one-input op taking f32 in the catalogue");
    int32_t bad_in[1] = {12345};
    cr_expect_eq(goblin_graph_add(g, (goblin_op)9, &x, 1, NULL, 0, &id), GOBLIN_EINVAL);
    cr_expect_gt(strlen(goblin_graph_error(g)), 0u, "a failed call leaves a message");
    cr_expect_eq(goblin_graph_add(g, (goblin_op)-3, &x, 1, NULL, 0, &id), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_add(g, GOBLIN_OP_COUNT, &x, 1, NULL, 0, &id), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_add(g, un, bad_in, 1, NULL, 0, &id), GOBLIN_EINVAL);
    int32_t neg_in[1] = {-1};
    cr_expect_eq(goblin_graph_add(g, un, neg_in, 1, NULL, 0, &id), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_add(g, GOBLIN_OP_INPUT, NULL, 0, NULL, 0, &id), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_add(g, GOBLIN_OP_CONSTANT, NULL, 0, NULL, 0, &id), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_add(g, un, &x, -1, NULL, 0, &id), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_add(g, un, &x, 1, NULL, -1, &id), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_output(g, 99), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_output(g, -1), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_node_count(g), 1);
    cr_expect_eq(goblin_graph_output_count(g), 0);
    cr_expect_eq(goblin_graph_input_id(g, 1), -1);
    cr_expect_eq(goblin_graph_output_id(g, 0), -1);
    cr_expect_eq(goblin_graph_node(g, 5, NULL, NULL, NULL, NULL), GOBLIN_EINVAL);
    goblin_graph_free(g);
}

/* A node error names the node and the op, and says what is wrong. */
Test(errors, graph_error_message_names_node_and_op) {
    goblin_op_info info;
    if (goblin_op_get_info(GOBLIN_OP_ADD, &info) != GOBLIN_OK) cr_skip_test("add is not in this build yet");
    goblin_graph *g = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    int64_t s1[2] = {2, 3}, s2[2] = {4, 5};
    int32_t a, b, id;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, s1, &a), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, s2, &b), GOBLIN_OK);
    int32_t in[2] = {a, b};
    cr_expect_eq(goblin_graph_add(g, GOBLIN_OP_ADD, in, 2, NULL, 0, &id), GOBLIN_ESHAPE);
    const char *msg = goblin_graph_error(g);
    cr_expect(strstr(msg, "node 2") != NULL, "message: %s", msg);
    cr_expect(strstr(msg, "add") != NULL, "message: %s", msg);

    int32_t c;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_I32, 2, s1, &c), GOBLIN_OK);
    int32_t mixed[2] = {a, c};
    cr_expect_eq(goblin_graph_add(g, GOBLIN_OP_ADD, mixed, 2, NULL, 0, &id), GOBLIN_EDTYPE);
    cr_expect(strstr(goblin_graph_error(g), "cast") != NULL, "should suggest a cast: %s", goblin_graph_error(g));
    goblin_graph_free(g);
}

Test(errors, exec_argument_checks) {
    goblin_graph *g = NULL;
    goblin_exec *ex = NULL;
    cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK);
    cr_expect_eq(goblin_exec_new(NULL, g, NULL), GOBLIN_EINVAL);
    cr_expect_eq(goblin_exec_new(&ex, NULL, NULL), GOBLIN_EINVAL);
    cr_expect_null(ex, "*out is set only on success");
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = (goblin_backend_kind)9;
    cr_expect_neq(goblin_exec_new(&ex, g, &p), GOBLIN_OK);
    cr_expect_null(ex);
    cr_expect_eq(goblin_backend_available(GOBLIN_BACKEND_REF), GOBLIN_OK, "the reference backend is always built");
    cr_expect_neq(goblin_backend_available(GOBLIN_BACKEND_COUNT), GOBLIN_OK);
    cr_expect_str_eq(goblin_backend_name(GOBLIN_BACKEND_REF), "ref");
    cr_expect_str_eq(goblin_backend_name(GOBLIN_BACKEND_BLIS), "blis");
    cr_expect_str_eq(goblin_backend_name(GOBLIN_BACKEND_CUDA), "cuda");
    cr_expect_null(goblin_backend_name(GOBLIN_BACKEND_COUNT));

    /* Wrong number of inputs or a mismatched input is an error, not a crash. */
    int64_t shape[1] = {4};
    int32_t x;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, shape, &x), GOBLIN_OK);
    cr_assert_eq(goblin_graph_output(g, x), GOBLIN_OK);
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_REF;
    float buf[4] = {1, 2, 3, 4};
    goblin_tensor in, out;
    memset(&out, 0, sizeof out);
    cr_assert_eq(goblin_tensor_init(&in, GOBLIN_DTYPE_F32, 1, shape, buf), GOBLIN_OK);
    cr_expect_eq(goblin_graph_eval(g, &p, &in, 0, &out, 1), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_eval(g, &p, &in, 1, &out, 0), GOBLIN_EINVAL);
    cr_expect_eq(goblin_graph_eval(g, &p, NULL, 1, &out, 1), GOBLIN_EINVAL);
    int64_t other[1] = {5};
    goblin_tensor wrong;
    cr_assert_eq(goblin_tensor_init(&wrong, GOBLIN_DTYPE_F32, 1, other, buf), GOBLIN_OK);
    cr_expect_neq(goblin_graph_eval(g, &p, &wrong, 1, &out, 1), GOBLIN_OK, "shape mismatch must be refused");
    cr_assert_eq(goblin_tensor_init(&wrong, GOBLIN_DTYPE_F64, 1, shape, buf), GOBLIN_OK);
    cr_expect_neq(goblin_graph_eval(g, &p, &wrong, 1, &out, 1), GOBLIN_OK, "dtype mismatch must be refused");
    cr_expect_null(out.data, "no buffer is left allocated after a failure");

    /* The identity graph copies its input into a library-allocated output. */
    cr_assert_eq(goblin_graph_eval(g, &p, &in, 1, &out, 1), GOBLIN_OK);
    cr_assert_not_null(out.data);
    for (int i = 0; i < 4; i++) cr_expect_eq(((float *)out.data)[i], buf[i]);
    cr_expect_neq(out.data, (void *)buf, "the output is the library's buffer");
    goblin_buffer_free(out.data);
    goblin_graph_free(g);
}

Test(errors, formula_syntax_error_has_position) {
    goblin_formula *f = NULL;
    goblin_errbuf err;
    memset(&err, 0, sizeof err);
    cr_expect_eq(goblin_formula_parse(NULL, &f, &err), GOBLIN_EINVAL);
    cr_expect_eq(goblin_formula_parse("x + 1", NULL, &err), GOBLIN_EINVAL);
    goblin_err e = goblin_formula_parse("a * (b + ", &f, &err);
    if (e == GOBLIN_ENOTSUP) cr_skip_test("formula parser not in this build yet");
    cr_expect_eq(e, GOBLIN_ESYNTAX);
    cr_expect_null(f);
    cr_expect_geq(err.position, 0);
    cr_expect_gt(strlen(err.message), 0u);
    cr_expect_eq(goblin_formula_parse("a * (b + ", &f, NULL), GOBLIN_ESYNTAX, "err may be NULL");
}
