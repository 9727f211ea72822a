/* errors.c - goblin.GoblinError and one subclass per goblin_err family.
 *
 * Each exception carries the library's detail message, `code` (the goblin_err
 * value) and `err_name` ("GOBLIN_ESHAPE"). Classes that match a builtin
 * family also derive from it (ShapeError is a ValueError, DTypeError a
 * TypeError), so generic `except ValueError` code keeps working. */
#include "pygoblin.h"

typedef struct {
    goblin_err err;
    const char *name; /* Python class name */
    const char *doc;
    PyObject **extra; /* builtin base besides GoblinError, or NULL */
} err_class;

static PyObject *base_error; /* goblin.GoblinError */
static PyObject *classes[GOBLIN_ERR_COUNT];

static int make_class(PyObject *m, const char *name, const char *doc, PyObject *extra, PyObject **out)
{
    char qual[96];
    PyOS_snprintf(qual, sizeof qual, "goblin.%s", name);
    PyObject *bases = extra ? PyTuple_Pack(2, base_error, extra) : PyTuple_Pack(1, base_error);
    if (!bases)
        return -1;
    PyObject *cls = PyErr_NewExceptionWithDoc(qual, doc, bases, NULL);
    Py_DECREF(bases);
    if (!cls)
        return -1;
    if (PyModule_AddObjectRef(m, name, cls) < 0) {
        Py_DECREF(cls);
        return -1;
    }
    *out = cls;
    return 0;
}

int pygoblin_errors_init(PyObject *m)
{
    base_error = PyErr_NewExceptionWithDoc(
        "goblin.GoblinError",
        "Base class of every error raised by goblin; `code` is the library's goblin_err value "
        "and `err_name` its symbolic name.",
        NULL, NULL);
    if (!base_error || PyModule_AddObjectRef(m, "GoblinError", base_error) < 0)
        return -1;
    const err_class table[] = {
        {GOBLIN_EINVAL, "InvalidArgumentError", "An argument is invalid (unknown op or attribute, bad id, wrong arity).", &PyExc_ValueError},
        {GOBLIN_ENOMEM, "OutOfMemoryError", "The library could not allocate memory.", &PyExc_MemoryError},
        {GOBLIN_ESHAPE, "ShapeError", "Shapes do not fit together.", &PyExc_ValueError},
        {GOBLIN_EDTYPE, "DTypeError", "Unsupported or mismatched dtype.", &PyExc_TypeError},
        {GOBLIN_ERANGE, "RangeError", "A value (usually an attribute) is out of range.", &PyExc_ValueError},
        {GOBLIN_EFORMAT, "FormatError", "Malformed data (e.g. a corrupted serialized graph).", &PyExc_ValueError},
        {GOBLIN_EVERSION, "VersionError", "Format or catalogue version mismatch.", NULL},
        {GOBLIN_ENOTSUP, "NotSupportedError", "The operation is not supported here.", NULL},
        {GOBLIN_ENODEV, "DeviceError", "No usable device, or a device failed.", NULL},
        {GOBLIN_ESYNTAX, "FormulaSyntaxError", "A formula does not parse; `position` is the byte offset.", &PyExc_ValueError},
        {GOBLIN_EIO, "GoblinIOError", "Input/output error.", NULL},
        {GOBLIN_ELIMIT, "LimitError", "A size limit is exceeded.", &PyExc_ValueError},
        {GOBLIN_ESTATE, "StateError", "The object is in the wrong state for this call.", NULL},
        {GOBLIN_ETIMEDOUT, "GoblinTimeoutError", "Timed out.", NULL},
        {GOBLIN_ECLOSED, "ClosedError", "The object is closed.", NULL},
        {GOBLIN_ECONNREFUSED, "GoblinConnectionError", "Connection refused.", NULL},
        {GOBLIN_EAUTH, "AuthError", "Authentication failed.", NULL},
        {GOBLIN_ECRYPTO, "CryptoError", "Cryptographic failure.", NULL},
        {GOBLIN_EVERIFY, "VerificationError", "A result failed verification.", NULL},
        {GOBLIN_ECANCELED, "CanceledError", "The job was cancelled.", NULL},
        {GOBLIN_EBUSY, "BusyError", "Busy.", NULL},
        {GOBLIN_ENOTFOUND, "NotFoundError", "Not found.", &PyExc_LookupError},
        {GOBLIN_EPROTO, "ProtocolError", "Protocol error.", NULL},
        {GOBLIN_EINDEX, "GoblinIndexError", "An index (in the data) is out of bounds.", &PyExc_IndexError},
        {GOBLIN_EINTERNAL, "InternalError", "Internal error in the library (please report).", NULL},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        PyObject *cls;
        if (make_class(m, table[i].name, table[i].doc, table[i].extra ? *table[i].extra : NULL, &cls) < 0)
            return -1;
        classes[table[i].err] = cls; /* the module keeps it alive */
    }
    /* One family, one class: EDEVICE shares DeviceError. */
    classes[GOBLIN_EDEVICE] = classes[GOBLIN_ENODEV];
    return 0;
}

static PyObject *new_error(goblin_err err, const char *msg)
{
    PyObject *cls = (err > 0 && err < GOBLIN_ERR_COUNT && classes[err]) ? classes[err] : base_error;
    if (!msg || !*msg)
        msg = goblin_strerror(err);
    PyObject *exc = PyObject_CallFunction(cls, "s", msg);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong((long)err);
    PyObject *name = PyUnicode_FromString(goblin_err_name(err));
    if (!code || !name || PyObject_SetAttrString(exc, "code", code) < 0 ||
        PyObject_SetAttrString(exc, "err_name", name) < 0) {
        Py_XDECREF(code);
        Py_XDECREF(name);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(code);
    Py_DECREF(name);
    return exc;
}

PyObject *pygoblin_raise(goblin_err err, const char *msg)
{
    PyObject *exc = new_error(err, msg);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

PyObject *pygoblin_raise_formula(goblin_err err, const goblin_errbuf *fe, const char *text)
{
    PyObject *exc = new_error(err, fe->message[0] ? fe->message : NULL);
    if (!exc)
        return NULL;
    PyObject *pos = PyLong_FromLong((long)fe->position);
    PyObject *txt = PyUnicode_FromString(text ? text : "");
    if (pos && txt && PyObject_SetAttrString(exc, "position", pos) == 0 &&
        PyObject_SetAttrString(exc, "text", txt) == 0)
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(pos);
    Py_XDECREF(txt);
    Py_DECREF(exc);
    return NULL;
}
