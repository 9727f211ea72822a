/* catalog.c - catalogue queries: op names, descriptions, numeric contracts,
 * attribute keys. Everything comes from the library linked in, so Python
 * never carries its own copy of the catalogue. */
#include "pygoblin.h"

static const char *kind_name(goblin_attr_kind k)
{
    return k == GOBLIN_ATTR_KIND_INT ? "int" : k == GOBLIN_ATTR_KIND_FLOAT ? "float"
                                       : k == GOBLIN_ATTR_KIND_INTS ? "ints" : "?";
}

static int op_from_py(PyObject *o, goblin_op *op)
{
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
    if (!s || goblin_op_from_name(s, op) != GOBLIN_OK) {
        PyErr_Clear();
        PyObject *r = PyObject_Repr(o);
        char msg[160];
        PyOS_snprintf(msg, sizeof msg, "unknown op %.80s (goblin.ops.catalog() lists them)",
                      r && PyUnicode_AsUTF8(r) ? PyUnicode_AsUTF8(r) : "?");
        Py_XDECREF(r);
        PyErr_Clear();
        pygoblin_raise(GOBLIN_EINVAL, msg);
        return -1;
    }
    return 0;
}

static PyObject *op_names(PyObject *mod, PyObject *unused)
{
    PyObject *list = PyList_New(0);
    for (int op = goblin_op_next(-1); list && op >= 0; op = goblin_op_next(op)) {
        PyObject *s = PyUnicode_FromString(goblin_op_name((goblin_op)op));
        if (!s || PyList_Append(list, s) < 0) {
            Py_XDECREF(s);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(s);
    }
    return list;
}

static PyObject *op_info(PyObject *mod, PyObject *arg)
{
    goblin_op op;
    goblin_op_info info;
    if (op_from_py(arg, &op) < 0)
        return NULL;
    goblin_err e = goblin_op_get_info(op, &info);
    if (e)
        return pygoblin_raise(e, NULL);
    PyObject *dts = PyList_New(0), *attrs = PyList_New(0);
    for (int d = 0; dts && d < GOBLIN_DTYPE_COUNT; d++)
        if (info.dtypes & GOBLIN_DTMASK(d)) {
            PyObject *s = PyUnicode_FromString(goblin_dtype_name((goblin_dtype)d));
            if (!s || PyList_Append(dts, s) < 0)
                Py_CLEAR(dts);
            Py_XDECREF(s);
        }
    for (uint32_t i = 0; attrs && i < info.n_attrs && i < 16; i++) {
        PyObject *t = Py_BuildValue("(ss)", goblin_attr_name(info.attrs[i]),
                                    kind_name(goblin_attr_key_kind(info.attrs[i])));
        if (!t || PyList_Append(attrs, t) < 0)
            Py_CLEAR(attrs);
        Py_XDECREF(t);
    }
    if (!dts || !attrs) {
        Py_XDECREF(dts);
        Py_XDECREF(attrs);
        return NULL;
    }
    return Py_BuildValue("{s:s,s:i,s:s,s:i,s:i,s:N,s:s,s:s,s:s,s:N}", "name", info.name, "value", (int)info.op,
                         "group", info.group, "min_inputs", (int)info.min_inputs, "max_inputs",
                         (int)info.max_inputs, "dtypes", dts, "summary", info.summary, "semantics",
                         info.semantics ? info.semantics : "", "contract", info.contract ? info.contract : "",
                         "attrs", attrs);
}

static PyObject *op_contract(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"op", "dtype", "k", NULL};
    PyObject *op_o, *dt_o;
    long long k = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|L:op_contract", kwlist, &op_o, &dt_o, &k))
        return NULL;
    goblin_op op;
    goblin_dtype dt;
    if (op_from_py(op_o, &op) < 0 || pygoblin_dtype_from_py(dt_o, &dt) < 0)
        return NULL;
    double rel = 0, ab = 0;
    goblin_err e = goblin_op_contract(op, dt, (int64_t)k, &rel, &ab);
    if (e)
        return pygoblin_raise(e, NULL);
    return Py_BuildValue("(dd)", rel, ab);
}

static PyObject *attr_names(PyObject *mod, PyObject *unused)
{
    PyObject *d = PyDict_New();
    for (int k = 0; d && k < GOBLIN_ATTR_COUNT; k++) {
        const char *n = goblin_attr_name((goblin_attr_key)k);
        if (!n)
            continue;
        PyObject *v = PyUnicode_FromString(kind_name(goblin_attr_key_kind((goblin_attr_key)k)));
        if (!v || PyDict_SetItemString(d, n, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *dtype_names(PyObject *mod, PyObject *unused)
{
    PyObject *t = PyTuple_New(GOBLIN_DTYPE_COUNT);
    for (int d = 0; t && d < GOBLIN_DTYPE_COUNT; d++)
        PyTuple_SET_ITEM(t, d, PyUnicode_FromString(goblin_dtype_name((goblin_dtype)d)));
    return t;
}

static PyObject *catalog_version(PyObject *mod, PyObject *unused)
{
    return PyLong_FromUnsignedLong(goblin_catalog_version());
}

PyMethodDef pygoblin_catalog_methods[] = {
    {"op_names", (PyCFunction)op_names, METH_NOARGS, "op_names() -> list of every catalogue op name"},
    {"op_info", (PyCFunction)op_info, METH_O, "op_info(name) -> dict describing the op"},
    {"op_contract", (PyCFunction)(void (*)(void))op_contract, METH_VARARGS | METH_KEYWORDS,
     "op_contract(op, dtype, k=1) -> (rel_tol, abs_tol): the op's numeric contract"},
    {"attr_names", (PyCFunction)attr_names, METH_NOARGS, "attr_names() -> {name: kind}"},
    {"dtype_names", (PyCFunction)dtype_names, METH_NOARGS, "dtype_names() -> tuple of dtype names"},
    {"catalog_version", (PyCFunction)catalog_version, METH_NOARGS, "the catalogue version of the library"},
    {NULL, NULL, 0, NULL},
};
