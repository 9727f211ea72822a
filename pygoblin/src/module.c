/* module.c - goblin._goblin: module init; the functions live in their files. */
#define PYGOBLIN_MODULE_C
#include "pygoblin.h"

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "goblin._goblin",
    .m_doc = "Thin CPython/NumPy bindings over libgoblin (use the goblin package).",
    .m_size = -1,
};

static int add_methods(PyObject *m, PyMethodDef *defs)
{
    return PyModule_AddFunctions(m, defs);
}

PyMODINIT_FUNC PyInit__goblin(void)
{
    import_array();
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    if (pygoblin_errors_init(m) < 0 || pygoblin_graph_init_type(m) < 0 || pygoblin_formula_init_type(m) < 0 ||
        add_methods(m, pygoblin_exec_methods) < 0 || add_methods(m, pygoblin_catalog_methods) < 0 ||
        pygoblin_grid_init_type(m) < 0 ||
        pygoblin_train_init_type(m) < 0 ||
        PyModule_AddStringConstant(m, "library_version", GOBLIN_VERSION_STRING) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
