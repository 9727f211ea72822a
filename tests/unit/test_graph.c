/* tests/unit/test_graph.c - graph building: generic validation, inference,
 * clear errors naming the node. (libgoblin/graph.c) */
#include <criterion/criterion.h>
#include "testutil.h"

static goblin_graph *g;
static void setup(void) { cr_assert_eq(goblin_graph_new(&g), GOBLIN_OK); }
static void teardown(void) { goblin_graph_free(g); }

TestSuite(graph, .init = setup, .fini = teardown);

Test(graph, free_null_is_noop) {
    goblin_graph_free(NULL);
    cr_assert_eq(goblin_graph_new(NULL), GOBLIN_EINVAL);
}

Test(graph, inputs_and_inferred_broadcast_shape) {
    int64_t sa[] = {4, 1, 3}, sb[] = {5, 1};
    int32_t a, b, c;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 3, sa, &a), GOBLIN_OK);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sb, &b), GOBLIN_OK);
    int32_t ab[] = {a, b};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, ab, 2, NULL, 0, &c), GOBLIN_OK,
                 "%s", goblin_graph_error(g));
    goblin_tensor t;
    goblin_op op;
    int32_t n_in;
    const int32_t *ins;
    cr_assert_eq(goblin_graph_node(g, c, &op, &t, &n_in, &ins), GOBLIN_OK);
    cr_assert_eq(op, GOBLIN_OP_ADD);
    cr_assert_eq(t.dtype, GOBLIN_DTYPE_F32);
    cr_assert_eq(t.rank, 3);
    cr_assert_eq(t.shape[0], 4);
    cr_assert_eq(t.shape[1], 5);
    cr_assert_eq(t.shape[2], 3);
    cr_assert_eq(n_in, 2);
    cr_assert_eq(ins[1], b);
    cr_assert_eq(goblin_graph_input_count(g), 2);
    cr_assert_eq(goblin_graph_input_id(g, 1), b);
    cr_assert_eq(goblin_graph_input_id(g, 2), -1);
}

Test(graph, shape_mismatch_names_node_and_shapes) {
    int64_t sa[] = {4, 3}, sb[] = {5};
    int32_t a, b, c = -7;
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, sa, &a);
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, sb, &b);
    int32_t ab[] = {a, b};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, ab, 2, NULL, 0, &c), GOBLIN_ESHAPE);
    cr_assert_eq(c, -7, "out id must be untouched on failure");
    cr_assert(strstr(goblin_graph_error(g), "node 2 (add)"), "%s", goblin_graph_error(g));
    cr_assert(strstr(goblin_graph_error(g), "[4, 3]"), "%s", goblin_graph_error(g));
    cr_assert_eq(goblin_graph_node_count(g), 2, "nothing added on failure");
}

Test(graph, dtype_mismatch) {
    int64_t s[] = {3};
    int32_t a, b, c;
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, s, &a);
    goblin_graph_input(g, GOBLIN_DTYPE_F64, 1, s, &b);
    int32_t ab[] = {a, b};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, ab, 2, NULL, 0, &c), GOBLIN_EDTYPE);
    cr_assert(strstr(goblin_graph_error(g), "node 2 (add)"), "%s", goblin_graph_error(g));
}

Test(graph, bad_ids_and_arity) {
    int64_t s[] = {3};
    int32_t a, c;
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 1, s, &a);
    int32_t bad[] = {a, 5};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, bad, 2, NULL, 0, &c), GOBLIN_EINVAL);
    cr_assert(strstr(goblin_graph_error(g), "not an earlier node"), "%s", goblin_graph_error(g));
    int32_t self_ref[] = {a, 1}; /* node 1 would be the node being added: a cycle */
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, self_ref, 2, NULL, 0, &c), GOBLIN_EINVAL);
    int32_t neg[] = {-1};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_NEG, neg, 1, NULL, 0, &c), GOBLIN_EINVAL);
    int32_t one[] = {a};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_ADD, one, 1, NULL, 0, &c), GOBLIN_EINVAL);
    cr_assert(strstr(goblin_graph_error(g), "takes 2 inputs, got 1"), "%s", goblin_graph_error(g));
    cr_assert_eq(goblin_graph_add(g, (goblin_op)9999, one, 1, NULL, 0, &c), GOBLIN_EINVAL);
    cr_assert_eq(goblin_graph_add(g, (goblin_op)5, one, 1, NULL, 0, &c), GOBLIN_EINVAL); /* a gap */
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_INPUT, NULL, 0, NULL, 0, &c), GOBLIN_EINVAL);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_FORMULA, one, 1, NULL, 0, &c), GOBLIN_EINVAL);
    cr_assert_eq(goblin_graph_node_count(g), 1);
}

Test(graph, attribute_validation) {
    int64_t s[] = {2, 3};
    int32_t a, c;
    goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, s, &a);
    int64_t ax[] = {1};
    goblin_attr ok[] = {goblin_attr_ints(GOBLIN_ATTR_AXES, ax, 1), goblin_attr_int(GOBLIN_ATTR_KEEPDIM, 1)};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SUM, &a, 1, ok, 2, &c), GOBLIN_OK, "%s",
                 goblin_graph_error(g));
    goblin_tensor t;
    goblin_graph_node(g, c, NULL, &t, NULL, NULL);
    cr_assert_eq(t.rank, 2);
    cr_assert_eq(t.shape[0], 2);
    cr_assert_eq(t.shape[1], 1);

    goblin_attr foreign[] = {goblin_attr_float(GOBLIN_ATTR_EPS, 1e-5)};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SUM, &a, 1, foreign, 1, &c), GOBLIN_EINVAL);
    cr_assert(strstr(goblin_graph_error(g), "does not take attribute 'eps'"), "%s",
              goblin_graph_error(g));

    goblin_attr dup[] = {goblin_attr_int(GOBLIN_ATTR_KEEPDIM, 1), goblin_attr_int(GOBLIN_ATTR_KEEPDIM, 0)};
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SUM, &a, 1, dup, 2, &c), GOBLIN_EINVAL);
    cr_assert(strstr(goblin_graph_error(g), "given twice"), "%s", goblin_graph_error(g));

    int64_t many[20] = {0};
    goblin_attr toolong[] = {goblin_attr_ints(GOBLIN_ATTR_AXES, many, 20)};
    cr_assert_eq(toolong[0].count, -1);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SUM, &a, 1, toolong, 1, &c), GOBLIN_ELIMIT);

    goblin_attr unknown = goblin_attr_int((goblin_attr_key)200, 1);
    cr_assert_eq(goblin_graph_add(g, GOBLIN_OP_SUM, &a, 1, &unknown, 1, &c), GOBLIN_EINVAL);
    cr_assert(strstr(goblin_graph_error(g), "unknown attribute key 200"), "%s", goblin_graph_error(g));

    int64_t bad_axis[] = {5};
    goblin_attr oob[] = {goblin_attr_ints(GOBLIN_ATTR_AXES, bad_axis, 1)};
    goblin_err e = goblin_graph_add(g, GOBLIN_OP_SUM, &a, 1, oob, 1, &c);
    cr_assert(e == GOBLIN_ERANGE || e == GOBLIN_EINVAL, "got %s", goblin_err_name(e));
    cr_assert(strstr(goblin_graph_error(g), "node 2 (sum)"), "%s", goblin_graph_error(g));
    cr_assert_eq(goblin_graph_node_count(g), 2);
}

Test(graph, input_validation) {
    int64_t s[] = {2, -3};
    int32_t a;
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 2, s, &a), GOBLIN_ESHAPE);
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 9, s, &a), GOBLIN_EINVAL);
    cr_assert_eq(goblin_graph_input(g, (goblin_dtype)77, 1, s, &a), GOBLIN_EDTYPE);
    int64_t huge[] = {1 << 30, 1 << 30, 1 << 30};
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_F32, 3, huge, &a), GOBLIN_ELIMIT);
    cr_assert_eq(goblin_graph_node_count(g), 0);
    cr_assert_eq(goblin_graph_output(g, 0), GOBLIN_EINVAL);
    int64_t z[] = {0, 4};
    cr_assert_eq(goblin_graph_input(g, GOBLIN_DTYPE_I8, 2, z, &a), GOBLIN_OK, "empty tensors are fine");
}

Test(graph, constant_copies_strided_data) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t s[] = {3, 2};
    goblin_tensor t = gt_tensor(GOBLIN_DTYPE_F32, 2, s, data);
    t.strides[0] = 1; /* a transposed view of a 2x3 row-major matrix */
    t.strides[1] = 3;
    int32_t c;
    cr_assert_eq(goblin_graph_constant(g, &t, &c), GOBLIN_OK);
    data[0] = 100; /* the graph holds its own copy */
    goblin_graph_output(g, c);
    goblin_tensor out = {0};
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    p.backend = GOBLIN_BACKEND_REF;
    cr_assert_eq(goblin_graph_eval(g, &p, NULL, 0, &out, 1), GOBLIN_OK);
    const float *o = out.data;
    float expect[6] = {1, 4, 2, 5, 3, 6};
    for (int i = 0; i < 6; i++) cr_assert_eq(o[i], expect[i]);
    goblin_buffer_free(out.data);
}
