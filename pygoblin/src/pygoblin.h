/* pygoblin.h - what the C files of the goblin._goblin extension share.
 *
 * The extension is thin: it converts between Python/NumPy and the C API and
 * calls libgoblin; every rule (shapes, dtypes, attributes, formula syntax)
 * is checked by the library, whose messages become Python exceptions. */
#ifndef PYGOBLIN_H
#define PYGOBLIN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* All C files share one NumPy API table (imported once in module.c). */
#define PY_ARRAY_UNIQUE_SYMBOL pygoblin_ARRAY_API
#ifndef PYGOBLIN_MODULE_C
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include <goblin/goblin.h>

/* errors.c: the exception hierarchy, one class per goblin_err family. */
int pygoblin_errors_init(PyObject *m);
/* Raise the class for @p err with @p msg (or goblin_strerror when empty); returns NULL. */
PyObject *pygoblin_raise(goblin_err err, const char *msg);
/* Raise FormulaSyntaxError (or the class for @p err) carrying @p position and @p text. */
PyObject *pygoblin_raise_formula(goblin_err err, const goblin_errbuf *fe, const char *text);

/* convert.c: dtypes and arrays. */
/* dtype name ("f32") or numpy dtype-like -> goblin dtype; sets TypeError/ValueError and returns -1. */
int pygoblin_dtype_from_py(PyObject *o, goblin_dtype *out);
/* NumPy type number for a goblin dtype (bf16 -> NPY_FLOAT32, the exchanged type). */
int pygoblin_npy_type(goblin_dtype dt);
/* Parse a shape (sequence of ints, or an int). Returns rank or -1 with an exception. */
int pygoblin_shape_from_py(PyObject *o, int64_t shape[GOBLIN_MAX_RANK]);
PyObject *pygoblin_shape_to_py(const goblin_tensor *t);
/* Describe @p arr (a NumPy array of goblin dtype @p dt, already checked) as a tensor.
 * *keep receives a new reference to the array whose memory @p t points at (the
 * array itself when zero-copy works, else a converted copy: bf16, byte-swapped,
 * misaligned). Returns 0, or -1 with an exception. */
int pygoblin_tensor_from_array(PyArrayObject *arr, goblin_dtype dt, goblin_tensor *t, PyObject **keep);
/* bf16 bits <-> float32 (round to nearest even; NaN stays NaN). */
void pygoblin_f32_to_bf16(const float *src, uint16_t *dst, int64_t n);
void pygoblin_bf16_to_f32(const uint16_t *src, float *dst, int64_t n);

/* graph.c */
typedef struct {
    PyObject_HEAD
    goblin_graph *g;
    int busy; /* evaluations in progress with the GIL released: no mutation meanwhile */
} pygoblin_graph;
extern PyTypeObject pygoblin_graph_type;
int pygoblin_graph_init_type(PyObject *m);

/* formula.c */
typedef struct {
    PyObject_HEAD
    goblin_formula *f;
    PyObject *text;
} pygoblin_formula;
extern PyTypeObject pygoblin_formula_type;
int pygoblin_formula_init_type(PyObject *m);

/* exec.c, catalog.c: module-level functions. */
extern PyMethodDef pygoblin_exec_methods[];
extern PyMethodDef pygoblin_catalog_methods[];
int pygoblin_backend_from_py(PyObject *o, goblin_backend_kind *out);

/* grid.c: goblin._goblin.Grid (a goblin_grid: embedded, or a client of a node). */
int pygoblin_grid_init_type(PyObject *m);
/* For train.c: the goblin_grid of a goblin._goblin.Grid; the grid is marked busy
 * (close() refuses) until pygoblin_grid_release. 0, or -1 with an exception. */
int pygoblin_grid_acquire(PyObject *grid, goblin_grid **out);
void pygoblin_grid_release(PyObject *grid);
/* train.c: goblin._goblin.Trainer. */
int pygoblin_train_init_type(PyObject *m);

#endif
