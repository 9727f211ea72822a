/* libgoblin/graph/graph.c - building graphs: generic node validation (arity, ids,
 * attributes against the op's schema), shape/dtype inference through the op
 * table, and the node store. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "graph_impl.h"
#include "core/formula_prog.h"

/* The graph's message (goblin_graph_error) and @p e. */
#define gfail(g, e, ...) goblin__errf((g)->err, sizeof (g)->err, (e), __VA_ARGS__)

goblin_err goblin_graph_new(goblin_graph **out) {
    if (!out) return GOBLIN_EINVAL;
    goblin_graph *g = goblin__calloc(1, sizeof *g);
    if (!g) return GOBLIN_ENOMEM;
    *out = g;
    return GOBLIN_OK;
}

static void node_clear(goblin__node *n) {
    goblin__free(n->inputs);
    goblin__free(n->attrs);
    goblin__free(n->payload);
}

void goblin_graph_free(goblin_graph *g) {
    if (!g) return;
    for (int32_t i = 0; i < g->n_nodes; i++) node_clear(&g->nodes[i]);
    goblin__free(g->nodes);
    goblin__free(g->input_ids);
    goblin__free(g->output_ids);
    goblin__free(g);
}

const char *goblin_graph_error(const goblin_graph *g) { return g ? g->err : ""; }

/* Grow an array of @p elem-byte items to hold at least need items. */
static bool grow(void **arr, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int64_t nc = *cap ? (int64_t)*cap * 2 : 16;
    while (nc < need) nc *= 2;
    size_t bytes;
    if (!goblin__mul_size((size_t)nc, elem, &bytes)) return false;
    void *p = goblin__alloc(bytes);
    if (!p) return false;
    if (*arr && *cap) memcpy(p, *arr, (size_t)*cap * elem);
    goblin__free(*arr);
    *arr = p;
    *cap = (int32_t)nc;
    return true;
}

static const goblin__attr_spec *spec_find(const goblin__op_def *d, goblin_attr_key key) {
    for (int32_t i = 0; i < d->n_attrs; i++)
        if (d->attrs[i].key == key) return &d->attrs[i];
    return NULL;
}

static bool in_bounds(const goblin__attr_spec *s, double v) {
    if (s->min == 0 && s->max == 0) return true;
    return v >= s->min && v <= s->max;
}

/* Check attrs against the op's schema; on success @p sorted holds them sorted by key. */
static goblin_err check_attrs(goblin_graph *g, int32_t id, const char *opname,
                              const goblin__op_def *d, const goblin_attr *attrs, int32_t n,
                              goblin_attr *sorted) {
    if (n < 0 || n > GOBLIN__MAX_OP_ATTRS || (n > 0 && !attrs))
        return gfail(g, GOBLIN_EINVAL, "node %d (%s): bad attribute count %d", id, opname, n);
    for (int32_t i = 0; i < n; i++) {
        const goblin_attr *a = &attrs[i];
        const char *an = goblin_attr_name(a->key);
        if (!an)
            return gfail(g, GOBLIN_EINVAL, "node %d (%s): unknown attribute key %d", id, opname,
                         (int)a->key);
        const goblin__attr_spec *s = spec_find(d, a->key);
        if (!s)
            return gfail(g, GOBLIN_EINVAL, "node %d (%s): op does not take attribute '%s'", id,
                         opname, an);
        goblin_attr_kind kind = goblin_attr_key_kind(a->key);
        if (kind == GOBLIN_ATTR_KIND_INTS) {
            if (a->count < 0 || a->count > GOBLIN_MAX_ATTR_INTS)
                return gfail(g, GOBLIN_ELIMIT,
                             "node %d (%s): attribute '%s' must have 0..%d values (got %d)", id,
                             opname, an, GOBLIN_MAX_ATTR_INTS, (int)a->count);
            for (int32_t j = 0; j < a->count; j++)
                if (!in_bounds(s, (double)a->v.ints[j]))
                    return gfail(g, GOBLIN_ERANGE,
                                 "node %d (%s): attribute '%s'[%d] = %lld is outside [%g, %g]", id,
                                 opname, an, (int)j, (long long)a->v.ints[j], s->min, s->max);
        } else {
            if (a->count != 1)
                return gfail(g, GOBLIN_EINVAL, "node %d (%s): attribute '%s' takes one value", id,
                             opname, an);
            if (kind == GOBLIN_ATTR_KIND_INT && !in_bounds(s, (double)a->v.i))
                return gfail(g, GOBLIN_ERANGE,
                             "node %d (%s): attribute '%s' = %lld is outside [%g, %g]", id, opname,
                             an, (long long)a->v.i, s->min, s->max);
            if (kind == GOBLIN_ATTR_KIND_FLOAT && !in_bounds(s, a->v.f))
                return gfail(g, GOBLIN_ERANGE, "node %d (%s): attribute '%s' = %g is outside [%g, %g]",
                             id, opname, an, a->v.f, s->min, s->max);
        }
        /* insertion into sorted[0..i) by key, rejecting duplicates */
        int32_t j = i;
        while (j > 0 && sorted[j - 1].key > a->key) {
            sorted[j] = sorted[j - 1];
            j--;
        }
        if (j > 0 && sorted[j - 1].key == a->key)
            return gfail(g, GOBLIN_EINVAL, "node %d (%s): attribute '%s' given twice", id, opname, an);
        sorted[j] = *a;
        if (kind != GOBLIN_ATTR_KIND_INTS) /* keep unused union bytes deterministic */
            memset((char *)&sorted[j].v + 8, 0, sizeof sorted[j].v - 8);
        else
            for (int32_t k = a->count; k < GOBLIN_MAX_ATTR_INTS; k++) sorted[j].v.ints[k] = 0;
    }
    for (int32_t i = 0; i < d->n_attrs; i++) {
        if (!d->attrs[i].required) continue;
        bool found = false;
        for (int32_t j = 0; j < n; j++) found |= sorted[j].key == d->attrs[i].key;
        if (!found)
            return gfail(g, GOBLIN_EINVAL, "node %d (%s): missing required attribute '%s'", id,
                         opname, goblin_attr_name(d->attrs[i].key));
    }
    return GOBLIN_OK;
}

goblin_err goblin__graph_add_node(goblin_graph *g, const goblin__node *proto, int32_t *out_id) {
    if (!g || !proto) return GOBLIN_EINVAL;
    g->err[0] = 0;
    int32_t id = g->n_nodes;
    const char *opname = goblin_op_name(proto->op);
    const goblin__op_def *d = goblin__op_def_get(proto->op);
    if (!opname) return gfail(g, GOBLIN_EINVAL, "node %d: unknown op %d", id, (int)proto->op);
    if (!d)
        return gfail(g, GOBLIN_ENOTSUP, "node %d (%s): op is not defined in this build", id, opname);
    if (id >= GOBLIN_GRAPH_MAX_NODES)
        return gfail(g, GOBLIN_ELIMIT, "graph already has the maximum of %d nodes",
                     GOBLIN_GRAPH_MAX_NODES);
    int32_t n_in = proto->n_inputs;
    if (n_in < 0 || n_in > GOBLIN_GRAPH_MAX_INPUTS_PER_NODE || (n_in > 0 && !proto->inputs))
        return gfail(g, GOBLIN_EINVAL, "node %d (%s): bad input count %d", id, opname, n_in);
    if (n_in < d->min_inputs || (d->max_inputs >= 0 && n_in > d->max_inputs)) {
        if (d->max_inputs < 0)
            return gfail(g, GOBLIN_EINVAL, "node %d (%s): takes at least %d inputs, got %d", id,
                         opname, d->min_inputs, n_in);
        if (d->min_inputs == d->max_inputs)
            return gfail(g, GOBLIN_EINVAL, "node %d (%s): takes %d inputs, got %d", id, opname,
                         d->min_inputs, n_in);
        return gfail(g, GOBLIN_EINVAL, "node %d (%s): takes %d to %d inputs, got %d", id, opname,
                     d->min_inputs, d->max_inputs, n_in);
    }
    const goblin__node *in_stack[8];
    const goblin__node **in = in_stack;
    if (n_in > 8) {
        in = goblin__calloc((size_t)n_in, sizeof *in);
        if (!in) return gfail(g, GOBLIN_ENOMEM, "out of memory");
    }
    goblin_err e = GOBLIN_OK;
    for (int32_t i = 0; i < n_in; i++) {
        int32_t j = proto->inputs[i];
        if (j < 0 || j >= id) {
            e = gfail(g, GOBLIN_EINVAL,
                      "node %d (%s): input %d refers to node %d, which is not an earlier node "
                      "(unknown id, or a cycle)",
                      id, opname, (int)i, (int)j);
            goto out_in;
        }
        in[i] = &g->nodes[j];
    }
    if (n_in > 0 && !(d->dtypes & GOBLIN_DTMASK(in[0]->dtype))) {
        e = gfail(g, GOBLIN_EDTYPE, "node %d (%s): does not take dtype %s", id, opname,
                  goblin_dtype_name(in[0]->dtype));
        goto out_in;
    }

    goblin_attr sorted[GOBLIN__MAX_OP_ATTRS];
    e = check_attrs(g, id, opname, d, proto->attrs, proto->n_attrs, sorted);
    if (e) goto out_in;

    goblin__node n;
    memset(&n, 0, sizeof n);
    n.op = proto->op;
    n.n_inputs = n_in;
    n.n_attrs = proto->n_attrs;
    n.attrs = sorted; /* temporary views until the node is committed */
    n.inputs = (int32_t *)proto->inputs;
    n.payload = proto->payload;
    n.payload_size = proto->payload_size;

    if (proto->op == GOBLIN_OP_INPUT || proto->op == GOBLIN_OP_CONSTANT) {
        if (proto->rank < 0 || proto->rank > GOBLIN_MAX_RANK) {
            e = gfail(g, GOBLIN_EINVAL, "node %d (%s): rank %d outside 0..%d", id, opname,
                      (int)proto->rank, GOBLIN_MAX_RANK);
            goto out_in;
        }
        if (goblin_dtype_size(proto->dtype) == 0) {
            e = gfail(g, GOBLIN_EDTYPE, "node %d (%s): invalid dtype %d", id, opname,
                      (int)proto->dtype);
            goto out_in;
        }
        n.dtype = proto->dtype;
        n.rank = proto->rank;
        for (int32_t k = 0; k < n.rank; k++) n.shape[k] = proto->shape[k];
        if (proto->op == GOBLIN_OP_CONSTANT) {
            int64_t numel;
            if (goblin__shape_numel(n.rank, n.shape, &numel)) {
                e = gfail(g, GOBLIN_ELIMIT, "node %d (%s): shape too large", id, opname);
                goto out_in;
            }
            int64_t bytes = numel * (int64_t)goblin_dtype_size(n.dtype);
            if ((uint64_t)bytes != proto->payload_size || (bytes > 0 && !proto->payload)) {
                e = gfail(g, GOBLIN_EINVAL, "node %d (%s): %lld data bytes for %lld elements of %s",
                          id, opname, (long long)proto->payload_size, (long long)numel,
                          goblin_dtype_name(n.dtype));
                goto out_in;
            }
            if (g->const_bytes + bytes > GOBLIN_GRAPH_MAX_CONST_BYTES) {
                e = gfail(g, GOBLIN_ELIMIT, "node %d (%s): constants exceed %lld bytes", id, opname,
                          (long long)GOBLIN_GRAPH_MAX_CONST_BYTES);
                goto out_in;
            }
        }
    } else {
        char msg[200];
        msg[0] = 0;
        if (!d->infer) {
            e = gfail(g, GOBLIN_ENOTSUP, "node %d (%s): op has no inference rule", id, opname);
            goto out_in;
        }
        goblin__infer c = {&n, in, n_in, msg, sizeof msg};
        e = d->infer(&c);
        if (e) {
            gfail(g, e, "node %d (%s): %s", id, opname, msg[0] ? msg : goblin_strerror(e));
            goto out_in;
        }
        if (n.rank < 0 || n.rank > GOBLIN_MAX_RANK || goblin_dtype_size(n.dtype) == 0) {
            e = gfail(g, GOBLIN_EINTERNAL, "node %d (%s): inference produced rank %d dtype %d", id,
                      opname, (int)n.rank, (int)n.dtype);
            goto out_in;
        }
    }
    for (int32_t k = 0; k < n.rank; k++)
        if (n.shape[k] < 0) {
            e = gfail(g, GOBLIN_ESHAPE, "node %d (%s): negative dimension %lld", id, opname,
                      (long long)n.shape[k]);
            goto out_in;
        }
    int64_t numel;
    if (goblin__shape_numel(n.rank, n.shape, &numel)) {
        e = gfail(g, GOBLIN_ELIMIT, "node %d (%s): output has more than %lld elements", id, opname,
                  (long long)GOBLIN_MAX_NUMEL);
        goto out_in;
    }
    for (int32_t k = n.rank; k < GOBLIN_MAX_RANK; k++) n.shape[k] = 0;

    /* commit: copy the borrowed parts */
    if (!grow((void **)&g->nodes, &g->cap_nodes, id + 1, sizeof *g->nodes)) {
        e = gfail(g, GOBLIN_ENOMEM, "out of memory");
        goto out_in;
    }
    n.inputs = NULL;
    n.attrs = NULL;
    n.payload = NULL;
    if (n_in > 0 && !(n.inputs = goblin__memdup(proto->inputs, (size_t)n_in * sizeof(int32_t))))
        goto oom;
    if (n.n_attrs > 0 && !(n.attrs = goblin__memdup(sorted, (size_t)n.n_attrs * sizeof(goblin_attr))))
        goto oom;
    if (proto->payload_size > 0 && !(n.payload = goblin__memdup(proto->payload, proto->payload_size)))
        goto oom;
    if (proto->op == GOBLIN_OP_INPUT) {
        if (!grow((void **)&g->input_ids, &g->cap_inputs, g->n_inputs + 1, sizeof(int32_t)))
            goto oom;
        g->input_ids[g->n_inputs++] = id;
    }
    if (proto->op == GOBLIN_OP_CONSTANT) g->const_bytes += (int64_t)proto->payload_size;
    g->nodes[id] = n;
    g->n_nodes++;
    if (out_id) *out_id = id;
    e = GOBLIN_OK;
    goto out_in;
oom:
    node_clear(&n);
    e = gfail(g, GOBLIN_ENOMEM, "out of memory");
out_in:
    if (in != in_stack) goblin__free(in);
    return e;
}

goblin_err goblin_graph_input(goblin_graph *g, goblin_dtype dtype, int32_t rank,
                              const int64_t *shape, int32_t *out_id) {
    if (!g) return GOBLIN_EINVAL;
    if (rank < 0 || rank > GOBLIN_MAX_RANK || (rank > 0 && !shape))
        return gfail(g, GOBLIN_EINVAL, "input: rank %d outside 0..%d or shape is NULL", (int)rank,
                     GOBLIN_MAX_RANK);
    goblin__node p;
    memset(&p, 0, sizeof p);
    p.op = GOBLIN_OP_INPUT;
    p.dtype = dtype;
    p.rank = rank;
    for (int32_t d = 0; d < rank; d++) p.shape[d] = shape[d];
    return goblin__graph_add_node(g, &p, out_id);
}

goblin_err goblin_graph_constant(goblin_graph *g, const goblin_tensor *t, int32_t *out_id) {
    if (!g) return GOBLIN_EINVAL;
    if (!t || t->rank < 0 || t->rank > GOBLIN_MAX_RANK || goblin_dtype_size(t->dtype) == 0)
        return gfail(g, GOBLIN_EINVAL, "constant: NULL tensor, bad rank or bad dtype");
    int64_t numel;
    for (int32_t d = 0; d < t->rank; d++)
        if (t->shape[d] < 0) return gfail(g, GOBLIN_EINVAL, "constant: negative dimension");
    if (goblin__shape_numel(t->rank, t->shape, &numel))
        return gfail(g, GOBLIN_ELIMIT, "constant: too many elements");
    if (numel > 0 && !t->data) return gfail(g, GOBLIN_EINVAL, "constant: data is NULL");
    size_t es = goblin_dtype_size(t->dtype);
    size_t bytes = (size_t)numel * es;
    void *buf = NULL;
    if (numel > 0) {
        buf = goblin__alloc(bytes);
        if (!buf) return gfail(g, GOBLIN_ENOMEM, "out of memory");
        goblin_tensor dst = *t;
        goblin__contig_strides(t->rank, t->shape, dst.strides);
        dst.data = buf;
        goblin__tensor_copy(&dst, t);
    }
    goblin__node p;
    memset(&p, 0, sizeof p);
    p.op = GOBLIN_OP_CONSTANT;
    p.dtype = t->dtype;
    p.rank = t->rank;
    for (int32_t d = 0; d < t->rank; d++) p.shape[d] = t->shape[d];
    p.payload = buf;
    p.payload_size = bytes;
    goblin_err e = goblin__graph_add_node(g, &p, out_id);
    goblin__free(buf);
    return e;
}

goblin_err goblin_graph_add(goblin_graph *g, goblin_op op, const int32_t *inputs, int32_t n_inputs,
                            const goblin_attr *attrs, int32_t n_attrs, int32_t *out_id) {
    if (!g) return GOBLIN_EINVAL;
    if (op == GOBLIN_OP_INPUT || op == GOBLIN_OP_CONSTANT || op == GOBLIN_OP_FORMULA)
        return gfail(g, GOBLIN_EINVAL,
                     "goblin_graph_add: use goblin_graph_input/constant/add_formula for op %s",
                     goblin_op_name(op));
    goblin__node p;
    memset(&p, 0, sizeof p);
    p.op = op;
    p.inputs = (int32_t *)inputs;
    p.n_inputs = n_inputs;
    p.attrs = (goblin_attr *)attrs;
    p.n_attrs = n_attrs;
    return goblin__graph_add_node(g, &p, out_id);
}

goblin_err goblin_graph_add_formula(goblin_graph *g, const goblin_formula *f, const int32_t *inputs,
                                    int32_t n_inputs, int32_t *out_id) {
    if (!g) return GOBLIN_EINVAL;
    if (!f) return gfail(g, GOBLIN_EINVAL, "formula: NULL formula");
    if (n_inputs != goblin_formula_var_count(f))
        return gfail(g, GOBLIN_EINVAL, "formula: it has %d variables but %d inputs were given",
                     (int)goblin_formula_var_count(f), (int)n_inputs);
    void *prog = NULL;
    size_t size = 0;
    goblin_err e = goblin__formula_compile(f, &prog, &size);
    if (e) return gfail(g, e, "formula: could not compile (%s)", goblin_strerror(e));
    goblin__node p;
    memset(&p, 0, sizeof p);
    p.op = GOBLIN_OP_FORMULA;
    p.inputs = (int32_t *)inputs;
    p.n_inputs = n_inputs;
    p.payload = prog;
    p.payload_size = size;
    e = goblin__graph_add_node(g, &p, out_id);
    goblin__free(prog);
    return e;
}

goblin_err goblin_graph_output(goblin_graph *g, int32_t id) {
    if (!g) return GOBLIN_EINVAL;
    if (id < 0 || id >= g->n_nodes)
        return gfail(g, GOBLIN_EINVAL, "output: no node %d (graph has %d)", (int)id, (int)g->n_nodes);
    if (!grow((void **)&g->output_ids, &g->cap_outputs, g->n_outputs + 1, sizeof(int32_t)))
        return gfail(g, GOBLIN_ENOMEM, "out of memory");
    g->output_ids[g->n_outputs++] = id;
    return GOBLIN_OK;
}

int32_t goblin_graph_node_count(const goblin_graph *g) { return g ? g->n_nodes : 0; }
int32_t goblin_graph_input_count(const goblin_graph *g) { return g ? g->n_inputs : 0; }
int32_t goblin_graph_output_count(const goblin_graph *g) { return g ? g->n_outputs : 0; }

int32_t goblin_graph_input_id(const goblin_graph *g, int32_t i) {
    return g && i >= 0 && i < g->n_inputs ? g->input_ids[i] : -1;
}

int32_t goblin_graph_output_id(const goblin_graph *g, int32_t i) {
    return g && i >= 0 && i < g->n_outputs ? g->output_ids[i] : -1;
}

goblin_err goblin_graph_node(const goblin_graph *g, int32_t id, goblin_op *op, goblin_tensor *out,
                             int32_t *n_inputs, const int32_t **inputs) {
    if (!g || id < 0 || id >= g->n_nodes) return GOBLIN_EINVAL;
    const goblin__node *n = &g->nodes[id];
    if (op) *op = n->op;
    if (out) {
        memset(out, 0, sizeof *out);
        out->dtype = n->dtype;
        out->rank = n->rank;
        for (int32_t d = 0; d < n->rank; d++) out->shape[d] = n->shape[d];
        goblin__contig_strides(n->rank, out->shape, out->strides);
    }
    if (n_inputs) *n_inputs = n->n_inputs;
    if (inputs) *inputs = n->inputs;
    return GOBLIN_OK;
}
