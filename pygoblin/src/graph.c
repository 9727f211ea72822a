/* graph.c - goblin._goblin.Graph: a goblin_graph handle.
 *
 * Nodes are referred to by the integer ids the library gives them; the
 * pure-Python goblin.Graph wraps them in tensor handles with operators. */
#include "pygoblin.h"

#include <string.h>

static PyObject *graph_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, ":Graph", kwlist))
        return NULL;
    pygoblin_graph *self = (pygoblin_graph *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    goblin_err e = goblin_graph_new(&self->g);
    if (e) {
        Py_DECREF(self);
        return pygoblin_raise(e, NULL);
    }
    return (PyObject *)self;
}

static void graph_dealloc(pygoblin_graph *self)
{
    goblin_graph_free(self->g);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_mutable(pygoblin_graph *self)
{
    if (self->busy) {
        pygoblin_raise(GOBLIN_ESTATE, "the graph is being evaluated in another thread; it cannot change meanwhile");
        return -1;
    }
    return 0;
}

static PyObject *graph_fail(pygoblin_graph *self, goblin_err e)
{
    return pygoblin_raise(e, goblin_graph_error(self->g));
}

static PyObject *graph_input(pygoblin_graph *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"shape", "dtype", NULL};
    PyObject *shape_o, *dtype_o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:input", kwlist, &shape_o, &dtype_o))
        return NULL;
    int64_t shape[GOBLIN_MAX_RANK];
    goblin_dtype dt;
    int rank = pygoblin_shape_from_py(shape_o, shape);
    if (rank < 0 || pygoblin_dtype_from_py(dtype_o, &dt) < 0 || check_mutable(self) < 0)
        return NULL;
    int32_t id;
    goblin_err e = goblin_graph_input(self->g, dt, rank, shape, &id);
    return e ? graph_fail(self, e) : PyLong_FromLong(id);
}

static PyObject *graph_constant(pygoblin_graph *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"value", "dtype", NULL};
    PyObject *val, *dtype_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:constant", kwlist, &val, &dtype_o))
        return NULL;
    if (check_mutable(self) < 0)
        return NULL;
    PyArrayObject *arr;
    goblin_dtype dt;
    if (dtype_o == Py_None) {
        if (!PyArray_Check(val)) {
            PyErr_Format(PyExc_TypeError, "constant(): expected a numpy.ndarray, got %.100s "
                         "(pass dtype= to convert other values)", Py_TYPE(val)->tp_name);
            return NULL;
        }
        arr = (PyArrayObject *)val;
        Py_INCREF(arr);
        PyObject *d = (PyObject *)PyArray_DESCR(arr);
        if (pygoblin_dtype_from_py(d, &dt) < 0) {
            Py_DECREF(arr);
            return NULL;
        }
    } else {
        if (pygoblin_dtype_from_py(dtype_o, &dt) < 0)
            return NULL;
        arr = (PyArrayObject *)PyArray_FromAny(val, PyArray_DescrFromType(pygoblin_npy_type(dt)), 0, 0,
                                               NPY_ARRAY_FORCECAST, NULL);
        if (!arr)
            return NULL;
    }
    goblin_tensor t;
    PyObject *keep = NULL;
    int rc = pygoblin_tensor_from_array(arr, dt, &t, &keep);
    Py_DECREF(arr);
    if (rc < 0)
        return NULL;
    int32_t id;
    goblin_err e = goblin_graph_constant(self->g, &t, &id);
    Py_DECREF(keep);
    return e ? graph_fail(self, e) : PyLong_FromLong(id);
}

/* Map an attribute name to its key by asking the library (no table here). */
static int attr_key(const char *name, goblin_attr_key *out)
{
    for (int k = 0; k < GOBLIN_ATTR_COUNT; k++) {
        const char *n = goblin_attr_name((goblin_attr_key)k);
        if (n && strcmp(n, name) == 0) {
            *out = (goblin_attr_key)k;
            return 0;
        }
    }
    return -1;
}

static int int_value(PyObject *o, const char *what, int64_t *out)
{
    if (PyFloat_Check(o)) {
        PyErr_Format(PyExc_TypeError, "attribute '%s' takes integers, got float %R", what, o);
        return -1;
    }
    PyObject *idx = PyNumber_Index(o);
    if (!idx) {
        PyErr_Format(PyExc_TypeError, "attribute '%s' takes integers, got %.100s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    long long v = PyLong_AsLongLong(idx);
    Py_DECREF(idx);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

static int parse_attr(PyObject *name_o, PyObject *val, goblin_attr *a)
{
    const char *name = PyUnicode_Check(name_o) ? PyUnicode_AsUTF8(name_o) : NULL;
    if (!name) {
        PyErr_SetString(PyExc_TypeError, "attribute names must be strings");
        return -1;
    }
    goblin_attr_key key;
    if (attr_key(name, &key) < 0) {
        char msg[160];
        PyOS_snprintf(msg, sizeof msg, "unknown attribute '%s' (goblin.attr_names() lists them)", name);
        pygoblin_raise(GOBLIN_EINVAL, msg);
        return -1;
    }
    switch (goblin_attr_key_kind(key)) {
    case GOBLIN_ATTR_KIND_INT: {
        int64_t v;
        if (key == GOBLIN_ATTR_DTYPE && !PyLong_Check(val)) {
            goblin_dtype dt;
            if (pygoblin_dtype_from_py(val, &dt) < 0)
                return -1;
            v = dt;
        } else if (int_value(val, name, &v) < 0) {
            return -1;
        }
        *a = goblin_attr_int(key, v);
        return 0;
    }
    case GOBLIN_ATTR_KIND_FLOAT: {
        double d = PyFloat_AsDouble(val);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError, "attribute '%s' takes a number, got %.100s", name, Py_TYPE(val)->tp_name);
            return -1;
        }
        *a = goblin_attr_float(key, d);
        return 0;
    }
    case GOBLIN_ATTR_KIND_INTS: {
        int64_t vals[GOBLIN_MAX_ATTR_INTS];
        if (PyLong_Check(val)) {
            if (int_value(val, name, &vals[0]) < 0)
                return -1;
            *a = goblin_attr_ints(key, vals, 1);
            return 0;
        }
        PyObject *seq = PySequence_Fast(val, "");
        if (!seq) {
            PyErr_Format(PyExc_TypeError, "attribute '%s' takes a sequence of ints, got %.100s", name,
                         Py_TYPE(val)->tp_name);
            return -1;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n > GOBLIN_MAX_ATTR_INTS) {
            Py_DECREF(seq);
            char msg[128];
            PyOS_snprintf(msg, sizeof msg, "attribute '%s' has %zd values; at most %d", name, n,
                          GOBLIN_MAX_ATTR_INTS);
            pygoblin_raise(GOBLIN_ELIMIT, msg);
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            if (int_value(PySequence_Fast_GET_ITEM(seq, i), name, &vals[i]) < 0) {
                Py_DECREF(seq);
                return -1;
            }
        Py_DECREF(seq);
        *a = goblin_attr_ints(key, vals, (int32_t)n);
        return 0;
    }
    default:
        PyErr_Format(PyExc_SystemError, "attribute '%s' has an unknown kind", name);
        return -1;
    }
}

static int parse_ids(PyObject *o, int32_t **ids, Py_ssize_t *n)
{
    PyObject *seq = PySequence_Fast(o, "inputs must be a sequence of node ids");
    if (!seq)
        return -1;
    *n = PySequence_Fast_GET_SIZE(seq);
    *ids = PyMem_Malloc(sizeof(int32_t) * (size_t)(*n ? *n : 1));
    if (!*ids) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        long v = PyLong_Check(it) ? PyLong_AsLong(it) : -1;
        if (!PyLong_Check(it) || (v == -1 && PyErr_Occurred()) || v < INT32_MIN || v > INT32_MAX) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "input %zd: expected a node id (int), got %.100s", i,
                         Py_TYPE(it)->tp_name);
            PyMem_Free(*ids);
            Py_DECREF(seq);
            return -1;
        }
        (*ids)[i] = (int32_t)v;
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject *graph_add(pygoblin_graph *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"op", "inputs", "attrs", NULL};
    const char *opname;
    PyObject *inputs_o, *attrs_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|O:add", kwlist, &opname, &inputs_o, &attrs_o))
        return NULL;
    if (check_mutable(self) < 0)
        return NULL;
    goblin_op op;
    if (goblin_op_from_name(opname, &op) != GOBLIN_OK) {
        char msg[160];
        PyOS_snprintf(msg, sizeof msg, "unknown op '%.80s' (goblin.ops.catalog() lists them)", opname);
        return pygoblin_raise(GOBLIN_EINVAL, msg);
    }
    if (attrs_o != Py_None && !PyDict_Check(attrs_o)) {
        PyErr_SetString(PyExc_TypeError, "attrs must be a dict of name -> value");
        return NULL;
    }
    Py_ssize_t n_attrs = attrs_o == Py_None ? 0 : PyDict_Size(attrs_o);
    goblin_attr *attrs = PyMem_Calloc((size_t)(n_attrs ? n_attrs : 1), sizeof(goblin_attr));
    if (!attrs)
        return PyErr_NoMemory();
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    while (n_attrs && PyDict_Next(attrs_o, &pos, &k, &v)) {
        if (parse_attr(k, v, &attrs[i++]) < 0) {
            PyMem_Free(attrs);
            return NULL;
        }
    }
    int32_t *ids;
    Py_ssize_t n;
    if (parse_ids(inputs_o, &ids, &n) < 0) {
        PyMem_Free(attrs);
        return NULL;
    }
    int32_t id;
    goblin_err e = goblin_graph_add(self->g, op, ids, (int32_t)n, attrs, (int32_t)n_attrs, &id);
    PyMem_Free(ids);
    PyMem_Free(attrs);
    return e ? graph_fail(self, e) : PyLong_FromLong(id);
}

static PyObject *graph_add_formula(pygoblin_graph *self, PyObject *args)
{
    PyObject *f, *inputs_o;
    if (!PyArg_ParseTuple(args, "O!O:add_formula", &pygoblin_formula_type, &f, &inputs_o))
        return NULL;
    if (check_mutable(self) < 0)
        return NULL;
    int32_t *ids;
    Py_ssize_t n;
    if (parse_ids(inputs_o, &ids, &n) < 0)
        return NULL;
    int32_t id;
    goblin_err e = goblin_graph_add_formula(self->g, ((pygoblin_formula *)f)->f, ids, (int32_t)n, &id);
    PyMem_Free(ids);
    return e ? graph_fail(self, e) : PyLong_FromLong(id);
}

static PyObject *graph_output(pygoblin_graph *self, PyObject *args)
{
    int id;
    if (!PyArg_ParseTuple(args, "i:output", &id) || check_mutable(self) < 0)
        return NULL;
    goblin_err e = goblin_graph_output(self->g, id);
    if (e)
        return graph_fail(self, e);
    Py_RETURN_NONE;
}

static PyObject *graph_node(pygoblin_graph *self, PyObject *args)
{
    int id;
    if (!PyArg_ParseTuple(args, "i:node", &id))
        return NULL;
    goblin_op op;
    goblin_tensor t;
    int32_t n;
    const int32_t *ins;
    goblin_err e = goblin_graph_node(self->g, id, &op, &t, &n, &ins);
    if (e) {
        char msg[64];
        PyOS_snprintf(msg, sizeof msg, "no node %d in this graph", id);
        return pygoblin_raise(e, msg);
    }
    PyObject *shape = pygoblin_shape_to_py(&t);
    PyObject *inputs = PyTuple_New(n);
    if (!shape || !inputs) {
        Py_XDECREF(shape);
        Py_XDECREF(inputs);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(inputs, i, PyLong_FromLong(ins[i]));
    return Py_BuildValue("(ssNN)", goblin_op_name(op), goblin_dtype_name(t.dtype), shape, inputs);
}

static PyObject *ids_tuple(pygoblin_graph *self, int outputs)
{
    int32_t n = outputs ? goblin_graph_output_count(self->g) : goblin_graph_input_count(self->g);
    PyObject *tup = PyTuple_New(n);
    if (!tup)
        return NULL;
    for (int32_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(tup, i, PyLong_FromLong(outputs ? goblin_graph_output_id(self->g, i)
                                                         : goblin_graph_input_id(self->g, i)));
    return tup;
}

static PyObject *graph_input_ids(pygoblin_graph *self, void *c) { return ids_tuple(self, 0); }
static PyObject *graph_output_ids(pygoblin_graph *self, void *c) { return ids_tuple(self, 1); }
static PyObject *graph_node_count(pygoblin_graph *self, void *c)
{
    return PyLong_FromLong(goblin_graph_node_count(self->g));
}

static PyObject *graph_serialize(pygoblin_graph *self, PyObject *unused)
{
    uint8_t *buf;
    size_t len;
    goblin_err e = goblin_graph_serialize(self->g, &buf, &len);
    if (e)
        return graph_fail(self, e);
    PyObject *b = PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)len);
    goblin_buffer_free(buf);
    return b;
}

static PyObject *graph_deserialize(PyObject *cls, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    goblin_graph *g = NULL;
    goblin_errbuf msg_eb = {0};
    goblin_err e = goblin_graph_deserialize(view.buf, (size_t)view.len, NULL, &g, &msg_eb);
    PyBuffer_Release(&view);
    if (e)
        return pygoblin_raise(e, msg_eb.message);
    pygoblin_graph *self = (pygoblin_graph *)((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 0);
    if (!self) {
        goblin_graph_free(g);
        return NULL;
    }
    self->g = g;
    return (PyObject *)self;
}

/* backward(loss, wrt) -> tuple of gradient node ids (goblin_graph_backward, autodiff.h). */
static PyObject *graph_backward(pygoblin_graph *self, PyObject *args)
{
    int loss;
    PyObject *wrt_o;
    if (!PyArg_ParseTuple(args, "iO:backward", &loss, &wrt_o) || check_mutable(self) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(wrt_o, "backward(): wrt must be a sequence of node ids");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > INT32_MAX / 2) {
        Py_DECREF(seq);
        return pygoblin_raise(GOBLIN_EINVAL, "backward(): too many wrt nodes");
    }
    int32_t *ids = PyMem_Malloc(sizeof(int32_t) * (size_t)(n ? 2 * n : 2));
    if (!ids) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) {
            PyMem_Free(ids);
            Py_DECREF(seq);
            return NULL;
        }
        ids[i] = (int32_t)v;
    }
    Py_DECREF(seq);
    goblin_err e = goblin_graph_backward(self->g, (int32_t)loss, ids, (int32_t)n, ids + n);
    if (e) {
        PyMem_Free(ids);
        return graph_fail(self, e);
    }
    PyObject *tup = PyTuple_New(n);
    for (Py_ssize_t i = 0; tup && i < n; i++)
        PyTuple_SET_ITEM(tup, i, PyLong_FromLong(ids[n + i]));
    PyMem_Free(ids);
    return tup;
}

static PyMethodDef graph_methods[] = {
    {"input", (PyCFunction)(void (*)(void))graph_input, METH_VARARGS | METH_KEYWORDS,
     "input(shape, dtype) -> id: add the next graph input"},
    {"constant", (PyCFunction)(void (*)(void))graph_constant, METH_VARARGS | METH_KEYWORDS,
     "constant(value, dtype=None) -> id: copy an array into the graph (bf16: pass float32 values)"},
    {"add", (PyCFunction)(void (*)(void))graph_add, METH_VARARGS | METH_KEYWORDS,
     "add(op, inputs, attrs=None) -> id: apply a catalogue op to node ids with attributes by name"},
    {"add_formula", (PyCFunction)graph_add_formula, METH_VARARGS,
     "add_formula(formula, inputs) -> id: a FORMULA node, variables bound in order"},
    {"output", (PyCFunction)graph_output, METH_VARARGS, "output(id): mark the next graph output"},
    {"node", (PyCFunction)graph_node, METH_VARARGS, "node(id) -> (op, dtype, shape, inputs)"},
    {"serialize", (PyCFunction)graph_serialize, METH_NOARGS,
     "serialize() -> bytes in the graph format (no names of any kind)"},
    {"deserialize", (PyCFunction)graph_deserialize, METH_O | METH_CLASS,
     "deserialize(data) -> Graph; every byte is checked, every node re-validated"},
    {"backward", (PyCFunction)graph_backward, METH_VARARGS,
     "backward(loss, wrt) -> gradient node ids appended to the graph (goblin_graph_backward)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef graph_getset[] = {
    {"input_ids", (getter)graph_input_ids, NULL, "node ids of the inputs, in order", NULL},
    {"output_ids", (getter)graph_output_ids, NULL, "node ids of the outputs, in order", NULL},
    {"node_count", (getter)graph_node_count, NULL, "number of nodes", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pygoblin_graph_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goblin._goblin.Graph",
    .tp_basicsize = sizeof(pygoblin_graph),
    .tp_dealloc = (destructor)graph_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A graph of catalogue ops (low level: nodes are integer ids; see goblin.Graph).",
    .tp_methods = graph_methods,
    .tp_getset = graph_getset,
    .tp_new = graph_new,
};

int pygoblin_graph_init_type(PyObject *m)
{
    if (PyType_Ready(&pygoblin_graph_type) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Graph", (PyObject *)&pygoblin_graph_type);
}
