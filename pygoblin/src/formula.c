/* formula.c - goblin._goblin.Formula: a parsed user expression.
 *
 * Parsing happens in C (goblin_formula_parse); a syntax error becomes
 * goblin.FormulaSyntaxError with the byte `position` and the `text`. */
#include "pygoblin.h"

static PyObject *formula_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"text", NULL};
    PyObject *text;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "U:Formula", kwlist, &text))
        return NULL;
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(text, &len);
    if (!s)
        return NULL;
    if ((Py_ssize_t)strlen(s) != len) {
        PyErr_SetString(PyExc_ValueError, "formula text contains a NUL character");
        return NULL;
    }
    goblin_formula *f = NULL;
    goblin_errbuf fe = {.position = -1, .message = ""};
    goblin_err e = goblin_formula_parse(s, &f, &fe);
    if (e)
        return pygoblin_raise_formula(e, &fe, s);
    pygoblin_formula *self = (pygoblin_formula *)type->tp_alloc(type, 0);
    if (!self) {
        goblin_formula_free(f);
        return NULL;
    }
    self->f = f;
    Py_INCREF(text);
    self->text = text;
    return (PyObject *)self;
}

static void formula_dealloc(pygoblin_formula *self)
{
    goblin_formula_free(self->f);
    Py_XDECREF(self->text);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *formula_text(pygoblin_formula *self, void *c)
{
    Py_INCREF(self->text);
    return self->text;
}

static PyObject *formula_variables(pygoblin_formula *self, void *c)
{
    int32_t n = goblin_formula_var_count(self->f);
    PyObject *tup = PyTuple_New(n);
    if (!tup)
        return NULL;
    for (int32_t i = 0; i < n; i++) {
        PyObject *s = PyUnicode_FromString(goblin_formula_var_name(self->f, i));
        if (!s) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SET_ITEM(tup, i, s);
    }
    return tup;
}

static PyObject *formula_node_count(pygoblin_formula *self, void *c)
{
    return PyLong_FromLong(goblin_formula_node_count(self->f));
}

static PyGetSetDef formula_getset[] = {
    {"text", (getter)formula_text, NULL, "the source text", NULL},
    {"variables", (getter)formula_variables, NULL, "variable names in order of first appearance", NULL},
    {"node_count", (getter)formula_node_count, NULL, "number of expression tree nodes", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pygoblin_formula_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goblin._goblin.Formula",
    .tp_basicsize = sizeof(pygoblin_formula),
    .tp_dealloc = (destructor)formula_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Formula(text): a parsed expression such as 'a * exp(-b * x) + c'.",
    .tp_getset = formula_getset,
    .tp_new = formula_new,
};

int pygoblin_formula_init_type(PyObject *m)
{
    if (PyType_Ready(&pygoblin_formula_type) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Formula", (PyObject *)&pygoblin_formula_type);
}
