/* exec.c - evaluating a graph locally on a backend.
 *
 * Inputs are described in place (zero-copy, any strides); outputs are NumPy
 * arrays allocated here and written by the library. The GIL is released
 * around the evaluation; the graph refuses changes meanwhile (graph->busy). */
#include "pygoblin.h"

#include <string.h>

int pygoblin_backend_from_py(PyObject *o, goblin_backend_kind *out)
{
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
    for (int k = 0; s && k < GOBLIN_BACKEND_COUNT; k++)
        if (strcmp(goblin_backend_name((goblin_backend_kind)k), s) == 0) {
            *out = (goblin_backend_kind)k;
            return 0;
        }
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "unknown backend %R (expected 'ref', 'blis' or 'cuda')", o);
    return -1;
}

static PyObject *backend_available(PyObject *mod, PyObject *arg)
{
    goblin_backend_kind k;
    if (pygoblin_backend_from_py(arg, &k) < 0)
        return NULL;
    return PyBool_FromLong(goblin_backend_available(k) == GOBLIN_OK);
}

static int check_input(int i, PyObject *o, const goblin_tensor *want, PyArrayObject **out)
{
    if (!PyArray_Check(o)) {
        PyErr_Format(PyExc_TypeError, "input %d: expected a numpy.ndarray, got %.100s", i, Py_TYPE(o)->tp_name);
        return -1;
    }
    PyArrayObject *a = (PyArrayObject *)o;
    int npy = pygoblin_npy_type(want->dtype);
    if (PyArray_TYPE(a) != npy) {
        char msg[200];
        PyObject *r = PyObject_Str((PyObject *)PyArray_DESCR(a));
        const char *got = r ? PyUnicode_AsUTF8(r) : "?";
        PyOS_snprintf(msg, sizeof msg, "input %d: the graph takes %s%s, got a %s array (insert a cast, "
                      "e.g. arr.astype(...))", i, goblin_dtype_name(want->dtype),
                      want->dtype == GOBLIN_DTYPE_BF16 ? " (passed as float32)" : "", got ? got : "?");
        Py_XDECREF(r);
        PyErr_Clear();
        pygoblin_raise(GOBLIN_EDTYPE, msg);
        return -1;
    }
    int ok = PyArray_NDIM(a) == want->rank;
    for (int d = 0; ok && d < want->rank; d++)
        ok = PyArray_DIMS(a)[d] == want->shape[d];
    if (!ok) {
        char msg[400], *p = msg;
        size_t left = sizeof msg;
        int w = PyOS_snprintf(p, left, "input %d: the graph takes shape (", i);
        p += w, left -= (size_t)w;
        for (int d = 0; d < want->rank && left > 32; d++) {
            w = PyOS_snprintf(p, left, d ? ", %lld" : "%lld", (long long)want->shape[d]);
            p += w, left -= (size_t)w;
        }
        w = PyOS_snprintf(p, left, "), got (");
        p += w, left -= (size_t)w;
        for (int d = 0; d < PyArray_NDIM(a) && left > 32; d++) {
            w = PyOS_snprintf(p, left, d ? ", %lld" : "%lld", (long long)PyArray_DIMS(a)[d]);
            p += w, left -= (size_t)w;
        }
        PyOS_snprintf(p, left, ")");
        pygoblin_raise(GOBLIN_ESHAPE, msg);
        return -1;
    }
    *out = a;
    return 0;
}

static PyObject *evaluate(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"graph", "inputs", "backend", "threads", NULL};
    PyObject *gobj, *inputs_o, *backend_o = NULL;
    int threads = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O|Oi:evaluate", kwlist, &pygoblin_graph_type, &gobj,
                                     &inputs_o, &backend_o, &threads))
        return NULL;
    pygoblin_graph *g = (pygoblin_graph *)gobj;
    goblin_exec_params p;
    goblin_exec_params_default(&p);
    if (backend_o && backend_o != Py_None && pygoblin_backend_from_py(backend_o, &p.backend) < 0)
        return NULL;
    if (threads < 0) {
        PyErr_SetString(PyExc_ValueError, "threads must be >= 0 (0 = all cores)");
        return NULL;
    }
    p.threads = threads;
    PyObject *seq = PySequence_Fast(inputs_o, "inputs must be a sequence of numpy arrays");
    if (!seq)
        return NULL;
    Py_ssize_t n_in = PySequence_Fast_GET_SIZE(seq);
    int32_t want_in = goblin_graph_input_count(g->g), n_out = goblin_graph_output_count(g->g);
    if (n_in != want_in) {
        Py_DECREF(seq);
        char msg[96];
        PyOS_snprintf(msg, sizeof msg, "the graph takes %d input(s), got %zd", want_in, n_in);
        return pygoblin_raise(GOBLIN_EINVAL, msg);
    }
    if (n_out == 0) {
        Py_DECREF(seq);
        return pygoblin_raise(GOBLIN_EINVAL, "the graph has no outputs (call output() first)");
    }
    goblin_tensor *tin = PyMem_Calloc((size_t)(n_in ? n_in : 1), sizeof *tin);
    goblin_tensor *tout = PyMem_Calloc((size_t)n_out, sizeof *tout);
    PyObject **keep = PyMem_Calloc((size_t)(n_in ? n_in : 1), sizeof *keep);
    PyObject **outs = PyMem_Calloc((size_t)n_out, sizeof *outs);
    PyObject *result = NULL;
    if (!tin || !tout || !keep || !outs) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_in; i++) {
        goblin_tensor want;
        PyArrayObject *a;
        goblin_graph_node(g->g, goblin_graph_input_id(g->g, (int32_t)i), NULL, &want, NULL, NULL);
        if (check_input((int)i, PySequence_Fast_GET_ITEM(seq, i), &want, &a) < 0 ||
            pygoblin_tensor_from_array(a, want.dtype, &tin[i], &keep[i]) < 0)
            goto done;
    }
    for (int32_t i = 0; i < n_out; i++) {
        goblin_tensor *t = &tout[i];
        goblin_graph_node(g->g, goblin_graph_output_id(g->g, i), NULL, t, NULL, NULL);
        npy_intp dims[GOBLIN_MAX_RANK];
        for (int d = 0; d < t->rank; d++)
            dims[d] = (npy_intp)t->shape[d];
        int npy = t->dtype == GOBLIN_DTYPE_BF16 ? NPY_UINT16 : pygoblin_npy_type(t->dtype);
        outs[i] = PyArray_SimpleNew(t->rank, dims, npy);
        if (!outs[i])
            goto done;
        t->data = PyArray_DATA((PyArrayObject *)outs[i]);
    }
    goblin_err e;
    char msg[512] = "";
    g->busy++;
    Py_BEGIN_ALLOW_THREADS
    goblin_exec *ex = NULL;
    e = goblin_exec_new(&ex, g->g, &p);
    if (e == GOBLIN_OK) {
        e = goblin_exec_run(ex, tin, (int32_t)n_in, tout, n_out);
        if (e)
            snprintf(msg, sizeof msg, "%s", goblin_exec_error(ex));
        goblin_exec_free(ex);
    } else {
        snprintf(msg, sizeof msg, "backend '%s': %s", goblin_backend_name(p.backend),
                 e == GOBLIN_ENOTSUP ? "not compiled into this build"
                 : e == GOBLIN_ENODEV ? "no usable device or driver here" : goblin_strerror(e));
    }
    Py_END_ALLOW_THREADS
    g->busy--;
    if (e) {
        pygoblin_raise(e, msg);
        goto done;
    }
    result = PyList_New(n_out);
    if (!result)
        goto done;
    for (int32_t i = 0; i < n_out; i++) {
        PyObject *o = outs[i];
        if (tout[i].dtype == GOBLIN_DTYPE_BF16) {
            PyArrayObject *b = (PyArrayObject *)o;
            o = PyArray_SimpleNew(PyArray_NDIM(b), PyArray_DIMS(b), NPY_FLOAT32);
            if (!o) {
                Py_CLEAR(result);
                goto done;
            }
            pygoblin_bf16_to_f32(PyArray_DATA(b), PyArray_DATA((PyArrayObject *)o), PyArray_SIZE(b));
        } else {
            Py_INCREF(o);
        }
        PyList_SET_ITEM(result, i, o);
    }
done:
    for (Py_ssize_t i = 0; keep && i < n_in; i++)
        Py_XDECREF(keep[i]);
    for (int32_t i = 0; outs && i < n_out; i++)
        Py_XDECREF(outs[i]);
    PyMem_Free(tin);
    PyMem_Free(tout);
    PyMem_Free(keep);
    PyMem_Free(outs);
    Py_DECREF(seq);
    return result;
}

PyMethodDef pygoblin_exec_methods[] = {
    {"evaluate", (PyCFunction)(void (*)(void))evaluate, METH_VARARGS | METH_KEYWORDS,
     "evaluate(graph, inputs, backend=None, threads=0) -> list of arrays: run the graph here "
     "(backend 'ref', 'blis' or 'cuda'; None = the library's default)"},
    {"backend_available", (PyCFunction)backend_available, METH_O,
     "backend_available(name) -> bool: can this backend run here?"},
    {NULL, NULL, 0, NULL},
};
