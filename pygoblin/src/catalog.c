/* catalog.c - catalogue queries: op names, descriptions, numeric contracts,
 * attribute keys, the dtype table and the names of the enums Python passes on;
 * plus the library's small pure functions Python uses (learning-rate schedule, sizes
 * of memory). Everything comes from the library linked in, so Python never carries
 * its own copy of a table or a formula. */
#include "pygoblin.h"

#include <string.h>

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

/* name -> value of every member of one of the library's enums. */
typedef const char *(*enum_name_fn)(int v);
static const char *verify_nm(int v) { return goblin_verify_name((goblin_verify)v); }
static const char *split_nm(int v) { return goblin_split_name((goblin_split)v); }
static const char *combine_nm(int v) { return goblin_combine_name((goblin_combine)v); }
static const char *lr_kind_nm(int v) { return goblin_lr_kind_name((goblin_lr_kind)v); }
static const char *optimizer_nm(int v) { return goblin_optimizer_name((goblin_optimizer)v); }
static const char *dtype_nm(int v) { return goblin_dtype_name((goblin_dtype)v); }

static const struct {
    const char *kind;
    enum_name_fn name;
    int count;
} g_enums[] = {
    {"verify", verify_nm, GOBLIN_VERIFY_COUNT},
    {"split", split_nm, GOBLIN_SPLIT_COUNT},
    {"combine", combine_nm, GOBLIN_COMBINE_COUNT},
    {"lr_kind", lr_kind_nm, GOBLIN_LR_KIND_COUNT},
    {"optimizer", optimizer_nm, GOBLIN_OPTIMIZER_COUNT},
    {"dtype", dtype_nm, GOBLIN_DTYPE_COUNT},
};

static PyObject *enum_values(PyObject *mod, PyObject *arg)
{
    const char *kind = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (!kind) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "enum_values(kind): kind must be a str");
        return NULL;
    }
    for (size_t e = 0; e < sizeof g_enums / sizeof g_enums[0]; e++) {
        if (strcmp(kind, g_enums[e].kind) != 0)
            continue;
        PyObject *d = PyDict_New();
        for (int v = 0; d && v < g_enums[e].count; v++) {
            const char *n = g_enums[e].name(v);
            PyObject *o = n ? PyLong_FromLong(v) : NULL;
            if (n && (!o || PyDict_SetItemString(d, n, o) < 0))
                Py_CLEAR(d);
            Py_XDECREF(o);
        }
        return d;
    }
    return pygoblin_raise(GOBLIN_EINVAL, "enum_values: unknown enum (verify, split, combine, lr_kind, "
                          "optimizer, dtype)");
}

/* The dtype table: per dtype, its name, size, kind and the NumPy dtype values travel as. */
static PyObject *dtype_table(PyObject *mod, PyObject *unused)
{
    PyObject *t = PyTuple_New(GOBLIN_DTYPE_COUNT);
    for (int d = 0; t && d < GOBLIN_DTYPE_COUNT; d++) {
        goblin_dtype dt = (goblin_dtype)d;
        PyArray_Descr *np = PyArray_DescrFromType(pygoblin_npy_type(dt));
        PyObject *row = np ? Py_BuildValue("{s:s,s:i,s:n,s:O,s:O,s:N}", "name", goblin_dtype_name(dt), "value", d,
                                           "size", (Py_ssize_t)goblin_dtype_size(dt), "float",
                                           goblin_dtype_is_float(dt) ? Py_True : Py_False, "int",
                                           goblin_dtype_is_int(dt) ? Py_True : Py_False, "numpy", (PyObject *)np)
                           : NULL;
        if (!row) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, d, row);
    }
    return t;
}

static PyObject *lr_at(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"kind", "base_lr", "step", "total_steps", "warmup_steps", "warmup_start_factor",
                             "eta_min", NULL};
    int kind;
    double base, f = 1.0, eta_min = 0.0;
    long long step, total = 0, warmup = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "idL|LLdd:lr_at", kwlist, &kind, &base, &step, &total, &warmup,
                                     &f, &eta_min))
        return NULL;
    goblin_lr_schedule s = {(goblin_lr_kind)kind, base, eta_min, f, warmup, total};
    return PyFloat_FromDouble(goblin_lr_at(&s, step));
}

static PyObject *size_parse(PyObject *mod, PyObject *arg)
{
    const char *s = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (!s) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "size_parse(text): text must be a str");
        return NULL;
    }
    uint64_t v;
    goblin_err e = goblin_size_parse(s, &v);
    if (e)
        return pygoblin_raise(e, "not a size in bytes (like 4096, '512M', '1.5G')");
    return PyLong_FromUnsignedLongLong(v);
}

PyMethodDef pygoblin_catalog_methods[] = {
    {"op_names", (PyCFunction)op_names, METH_NOARGS, "op_names() -> list of every catalogue op name"},
    {"op_info", (PyCFunction)op_info, METH_O, "op_info(name) -> dict describing the op"},
    {"op_contract", (PyCFunction)(void (*)(void))op_contract, METH_VARARGS | METH_KEYWORDS,
     "op_contract(op, dtype, k=1) -> (rel_tol, abs_tol): the op's numeric contract"},
    {"attr_names", (PyCFunction)attr_names, METH_NOARGS, "attr_names() -> {name: kind}"},
    {"dtype_names", (PyCFunction)dtype_names, METH_NOARGS, "dtype_names() -> tuple of dtype names"},
    {"catalog_version", (PyCFunction)catalog_version, METH_NOARGS, "the catalogue version of the library"},
    {"enum_values", (PyCFunction)enum_values, METH_O,
     "enum_values(kind) -> {name: value} of a library enum (verify, split, combine, lr_kind, optimizer, dtype)"},
    {"dtype_table", (PyCFunction)dtype_table, METH_NOARGS,
     "dtype_table() -> tuple of {name, value, size, float, int, numpy} per dtype, in value order"},
    {"lr_at", (PyCFunction)(void (*)(void))lr_at, METH_VARARGS | METH_KEYWORDS,
     "lr_at(kind, base_lr, step, total_steps=0, warmup_steps=0, warmup_start_factor=1.0, eta_min=0.0) -> "
     "the learning rate of round `step` (goblin_lr_at; NaN for an invalid schedule)"},
    {"size_parse", (PyCFunction)size_parse, METH_O,
     "size_parse(text) -> bytes: '4096', '512M', '1.5G' (goblin_size_parse)"},
    {NULL, NULL, 0, NULL},
};
