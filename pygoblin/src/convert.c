/* convert.c - dtypes, shapes and NumPy arrays <-> goblin_tensor descriptors.
 *
 * Arrays are described in place (zero-copy, any strides, negative included)
 * whenever their memory is usable as is: native byte order, aligned, strides
 * a multiple of the item size. bf16 has no NumPy dtype: float32 arrays are
 * accepted and rounded to bf16 (nearest even) in a temporary copy. */
#include "pygoblin.h"

#include <string.h>

int pygoblin_npy_type(goblin_dtype dt)
{
    switch (dt) {
    case GOBLIN_DTYPE_F32: return NPY_FLOAT32;
    case GOBLIN_DTYPE_F64: return NPY_FLOAT64;
    case GOBLIN_DTYPE_F16: return NPY_FLOAT16;
    case GOBLIN_DTYPE_BF16: return NPY_FLOAT32;
    case GOBLIN_DTYPE_I8: return NPY_INT8;
    case GOBLIN_DTYPE_I16: return NPY_INT16;
    case GOBLIN_DTYPE_I32: return NPY_INT32;
    case GOBLIN_DTYPE_I64: return NPY_INT64;
    case GOBLIN_DTYPE_U8: return NPY_UINT8;
    case GOBLIN_DTYPE_BOOL: return NPY_BOOL;
    default: return -1;
    }
}

static int dtype_from_npy(int type, goblin_dtype *out)
{
    switch (type) {
    case NPY_FLOAT32: *out = GOBLIN_DTYPE_F32; return 0;
    case NPY_FLOAT64: *out = GOBLIN_DTYPE_F64; return 0;
    case NPY_FLOAT16: *out = GOBLIN_DTYPE_F16; return 0;
    case NPY_INT8: *out = GOBLIN_DTYPE_I8; return 0;
    case NPY_INT16: *out = GOBLIN_DTYPE_I16; return 0;
    case NPY_INT32: *out = GOBLIN_DTYPE_I32; return 0;
    case NPY_INT64: *out = GOBLIN_DTYPE_I64; return 0;
    case NPY_UINT8: *out = GOBLIN_DTYPE_U8; return 0;
    case NPY_BOOL: *out = GOBLIN_DTYPE_BOOL; return 0;
    default: return -1;
    }
}

int pygoblin_dtype_from_py(PyObject *o, goblin_dtype *out)
{
    if (PyUnicode_Check(o)) {
        const char *s = PyUnicode_AsUTF8(o);
        if (!s)
            return -1;
        if (goblin_dtype_from_name(s, out) == GOBLIN_OK)
            return 0;
    }
    PyArray_Descr *d = NULL;
    if (PyArray_DescrConverter2(o, &d) && d) {
        int rc = dtype_from_npy(d->type_num, out);
        PyObject *r = PyObject_Repr((PyObject *)d);
        Py_DECREF(d);
        if (rc == 0) {
            Py_XDECREF(r);
            return 0;
        }
        PyErr_Format(PyExc_TypeError, "dtype %S has no goblin equivalent (f32 f64 f16 bf16 i8 i16 i32 i64 u8 bool)",
                     r ? r : Py_None);
        Py_XDECREF(r);
        return -1;
    }
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "unknown dtype %R (expected one of f32 f64 f16 bf16 i8 i16 i32 i64 u8 bool, "
                 "or a NumPy dtype)", o);
    return -1;
}

int pygoblin_shape_from_py(PyObject *o, int64_t shape[GOBLIN_MAX_RANK])
{
    if (PyLong_Check(o)) {
        long long v = PyLong_AsLongLong(o);
        if (v == -1 && PyErr_Occurred())
            return -1;
        shape[0] = v;
        return 1;
    }
    PyObject *seq = PySequence_Fast(o, "shape must be a sequence of ints");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > GOBLIN_MAX_RANK) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "rank %zd exceeds the maximum of %d", n, GOBLIN_MAX_RANK);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *idx = PyNumber_Index(it);
        if (!idx) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_TypeError, "shape entries must be ints, got %.100s", Py_TYPE(it)->tp_name);
            return -1;
        }
        long long v = PyLong_AsLongLong(idx);
        Py_DECREF(idx);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        shape[i] = v;
    }
    Py_DECREF(seq);
    return (int)n;
}

PyObject *pygoblin_shape_to_py(const goblin_tensor *t)
{
    PyObject *tup = PyTuple_New(t->rank);
    if (!tup)
        return NULL;
    for (int i = 0; i < t->rank; i++) {
        PyObject *v = PyLong_FromLongLong(t->shape[i]);
        if (!v) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SET_ITEM(tup, i, v);
    }
    return tup;
}

void pygoblin_f32_to_bf16(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &src[i], 4);
        if ((b & 0x7FFFFFFFu) > 0x7F800000u)
            dst[i] = (uint16_t)((b >> 16) | 0x40u); /* quiet NaN, sign kept */
        else
            dst[i] = (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
    }
}

void pygoblin_bf16_to_f32(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &b, 4);
    }
}

int pygoblin_tensor_from_array(PyArrayObject *arr, goblin_dtype dt, goblin_tensor *t, PyObject **keep)
{
    int nd = PyArray_NDIM(arr);
    if (nd > GOBLIN_MAX_RANK) {
        PyErr_Format(PyExc_ValueError, "rank %d exceeds the maximum of %d", nd, GOBLIN_MAX_RANK);
        return -1;
    }
    int npy = pygoblin_npy_type(dt);
    PyArrayObject *use = arr;
    Py_INCREF(use);
    npy_intp isz = PyArray_ITEMSIZE(arr);
    int usable = PyArray_ISNBO(PyArray_DESCR(arr)->byteorder) && PyArray_ISALIGNED(arr) &&
                 PyArray_TYPE(arr) == npy;
    for (int d = 0; usable && d < nd; d++)
        if (PyArray_STRIDES(arr)[d] % isz)
            usable = 0;
    if (!usable || dt == GOBLIN_DTYPE_BF16) {
        PyObject *c = PyArray_FromAny((PyObject *)arr, PyArray_DescrFromType(npy), 0, 0,
                                      NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST, NULL);
        Py_DECREF(use);
        if (!c)
            return -1;
        use = (PyArrayObject *)c;
    }
    if (dt == GOBLIN_DTYPE_BF16) {
        npy_intp n = PyArray_SIZE(use);
        PyObject *b = PyArray_SimpleNew(nd, PyArray_DIMS(use), NPY_UINT16);
        if (!b) {
            Py_DECREF(use);
            return -1;
        }
        pygoblin_f32_to_bf16((const float *)PyArray_DATA(use), (uint16_t *)PyArray_DATA((PyArrayObject *)b), n);
        Py_DECREF(use);
        use = (PyArrayObject *)b;
    }
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->rank = nd;
    isz = PyArray_ITEMSIZE(use);
    for (int d = 0; d < nd; d++) {
        t->shape[d] = PyArray_DIMS(use)[d];
        t->strides[d] = PyArray_STRIDES(use)[d] / isz;
    }
    t->data = PyArray_DATA(use);
    *keep = (PyObject *)use;
    return 0;
}
