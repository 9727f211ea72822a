/* train.c - goblin._goblin.Trainer: a thin handle on goblin_trainer (goblin/train.h).
 *
 * The trainer submits through a Grid's goblin_grid (embedded or remote); the grid is
 * held busy (its close() refuses) until the trainer is closed or freed. Rounds run with
 * the GIL released; the progress callable (if any) is called with the GIL after each
 * verified task. Parameter names never come here: the pure-Python goblin.Trainer maps
 * state_dict keys to parameter positions. */
#include "pygoblin.h"

#include <math.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    goblin_trainer *t;
    PyObject *grid;     /* the goblin._goblin.Grid (a reference; acquired while t lives) */
    int32_t n_params;
    int32_t n_data;
    goblin_dtype *dtypes; /* every model input's dtype */
    int32_t *ranks;
    int64_t (*shapes)[GOBLIN_MAX_RANK];
    PyObject *progress; /* callable(done, total) or NULL */
    int busy;
} pygoblin_trainer;

static int check_usable(pygoblin_trainer *self)
{
    if (!self->t) {
        pygoblin_raise(GOBLIN_ECLOSED, "the trainer is closed");
        return -1;
    }
    if (self->busy) {
        pygoblin_raise(GOBLIN_EBUSY, "the trainer is running a round in another thread");
        return -1;
    }
    return 0;
}

static void trainer_release(pygoblin_trainer *self)
{
    if (self->t) {
        goblin_trainer *t = self->t;
        self->t = NULL;
        Py_BEGIN_ALLOW_THREADS
        goblin_trainer_free(t);
        Py_END_ALLOW_THREADS
    }
    if (self->grid) {
        pygoblin_grid_release(self->grid);
        Py_CLEAR(self->grid);
    }
}

static void trainer_dealloc(pygoblin_trainer *self)
{
    trainer_release(self);
    PyMem_Free(self->dtypes);
    PyMem_Free(self->ranks);
    PyMem_Free(self->shapes);
    Py_XDECREF(self->progress);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ---- arguments ---------------------------------------------------------------------- */

static int get_double(PyObject *d, const char *k, double *out)
{
    PyObject *v = d ? PyDict_GetItemString(d, k) : NULL; /* borrowed */
    if (!v || v == Py_None)
        return 0;
    double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred())
        return -1;
    *out = x;
    return 0;
}

static int get_i64(PyObject *d, const char *k, int64_t *out)
{
    PyObject *v = d ? PyDict_GetItemString(d, k) : NULL;
    if (!v || v == Py_None)
        return 0;
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *out = x;
    return 0;
}

static int get_bool(PyObject *d, const char *k, bool *out)
{
    PyObject *v = d ? PyDict_GetItemString(d, k) : NULL;
    if (!v || v == Py_None)
        return 0;
    int x = PyObject_IsTrue(v);
    if (x < 0)
        return -1;
    *out = x != 0;
    return 0;
}

/* An array for model input @p i: exactly its dtype (bf16: float32 values), any strides. */
static int input_tensor(pygoblin_trainer *self, int32_t i, PyObject *o, const char *what, goblin_tensor *t,
                        PyObject **keep)
{
    if (!PyArray_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a numpy.ndarray, got %.100s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    PyArrayObject *a = (PyArrayObject *)o;
    goblin_dtype dt = self->dtypes[i];
    if (PyArray_TYPE(a) != pygoblin_npy_type(dt)) {
        PyErr_Format(PyExc_TypeError, "%s: the model takes %s, got an array of %R", what, goblin_dtype_name(dt),
                     (PyObject *)PyArray_DESCR(a));
        return -1;
    }
    return pygoblin_tensor_from_array(a, dt, t, keep);
}

static void progress_cb(void *user, int64_t done, int64_t total)
{
    pygoblin_trainer *self = user;
    if (!self->progress)
        return;
    PyGILState_STATE st = PyGILState_Ensure();
    if (!PyErr_Occurred()) {
        PyObject *r = PyObject_CallFunction(self->progress, "LL", (long long)done, (long long)total);
        Py_XDECREF(r); /* an exception stays set and is raised when the round returns */
    }
    PyGILState_Release(st);
}

static PyObject *trainer_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"grid", "graph", "n_params", "init", "options", "progress", NULL};
    PyObject *grid, *graph_o, *init_o, *opts = NULL, *progress = Py_None;
    int n_params;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!iO|O!O:Trainer", kwlist, &grid, &pygoblin_graph_type,
                                     &graph_o, &n_params, &init_o, &PyDict_Type, &opts, &progress))
        return NULL;
    if (progress != Py_None && !PyCallable_Check(progress)) {
        PyErr_SetString(PyExc_TypeError, "progress must be callable(done, total) or None");
        return NULL;
    }
    const goblin_graph *g = ((pygoblin_graph *)graph_o)->g;
    int32_t n_in = goblin_graph_input_count(g);
    if (n_params < 1 || n_params >= n_in)
        return pygoblin_raise(GOBLIN_EINVAL, "n_params must be >= 1 and leave at least one data input");

    goblin_trainer_params p;
    goblin_trainer_params_default(&p);
    p.model = g;
    p.n_params = n_params;
    const char *opt = "adamw";
    PyObject *ov = opts ? PyDict_GetItemString(opts, "optimizer") : NULL;
    if (ov && ov != Py_None) {
        opt = PyUnicode_AsUTF8(ov);
        if (!opt)
            return NULL;
    }
    if (goblin_optimizer_from_name(opt, &p.optimizer) != GOBLIN_OK)
        return pygoblin_raise(GOBLIN_EINVAL, "optimizer must be 'sgd' or 'adamw'");
    const char *verify = "replicate";
    PyObject *vv = opts ? PyDict_GetItemString(opts, "verify") : NULL;
    if (vv && vv != Py_None) {
        verify = PyUnicode_AsUTF8(vv);
        if (!verify)
            return NULL;
    }
    /* the policies that apply to training tasks */
    if (goblin_verify_from_name(verify, &p.verify) != GOBLIN_OK ||
        (p.verify != GOBLIN_VERIFY_REPLICATE && p.verify != GOBLIN_VERIFY_RECOMPUTE &&
         p.verify != GOBLIN_VERIFY_UNSAFE_NONE && p.verify != GOBLIN_VERIFY_CHECKED))
        return pygoblin_raise(GOBLIN_EINVAL, "verify must be 'checked', 'replicate', 'recompute' or 'unsafe-none'");
    int64_t sched_kind = 0, task_mem = 0, max_stages = 0;
    if (get_double(opts, "lr", &p.sgd.lr) < 0 || get_double(opts, "lr", &p.adamw.lr) < 0 ||
        get_double(opts, "momentum", &p.sgd.momentum) < 0 || get_double(opts, "dampening", &p.sgd.dampening) < 0 ||
        get_bool(opts, "nesterov", &p.sgd.nesterov) < 0 || get_bool(opts, "maximize", &p.sgd.maximize) < 0 ||
        get_bool(opts, "maximize", &p.adamw.maximize) < 0 || get_bool(opts, "amsgrad", &p.adamw.amsgrad) < 0 ||
        get_double(opts, "beta1", &p.adamw.beta1) < 0 || get_double(opts, "beta2", &p.adamw.beta2) < 0 ||
        get_double(opts, "eps", &p.adamw.eps) < 0 ||
        get_double(opts, "weight_decay", p.optimizer == GOBLIN_OPTIMIZER_SGD ? &p.sgd.weight_decay
                                                                             : &p.adamw.weight_decay) < 0 ||
        get_i64(opts, "schedule_kind", &sched_kind) < 0 ||
        get_double(opts, "eta_min", &p.schedule.eta_min) < 0 ||
        get_double(opts, "warmup_start_factor", &p.schedule.warmup_start_factor) < 0 ||
        get_i64(opts, "warmup_steps", &p.schedule.warmup_steps) < 0 ||
        get_i64(opts, "total_steps", &p.schedule.total_steps) < 0 ||
        get_double(opts, "clip_norm", &p.clip_norm) < 0 || get_i64(opts, "micro_batch", &p.micro_batch) < 0 ||
        get_i64(opts, "task_memory", &task_mem) < 0 || get_i64(opts, "max_stages", &max_stages) < 0 ||
        get_double(opts, "min_replication", &p.min_replication) < 0 ||
        get_double(opts, "checked_max_share", &p.checked_max_share) < 0)
        return NULL;
    if (sched_kind < 0 || sched_kind >= GOBLIN_LR_KIND_COUNT)
        return pygoblin_raise(GOBLIN_EINVAL, "unknown schedule kind (goblin._goblin.enum_values('lr_kind'))");
    if (task_mem < 0)
        return pygoblin_raise(GOBLIN_EINVAL, "task_memory must be >= 0 bytes");
    p.schedule.kind = (goblin_lr_kind)sched_kind;
    p.schedule.base_lr = p.optimizer == GOBLIN_OPTIMIZER_SGD ? p.sgd.lr : p.adamw.lr;
    p.task_memory_bytes = (uint64_t)task_mem;
    if (max_stages > 0)
        p.max_stages = (int32_t)(max_stages > INT32_MAX ? INT32_MAX : max_stages);
    p.progress = progress_cb;

    PyObject *seq = PySequence_Fast(init_o, "init must be a sequence of arrays (one per parameter)");
    if (!seq)
        return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != n_params) {
        Py_DECREF(seq);
        return pygoblin_raise(GOBLIN_EINVAL, "init must hold one array per parameter (n_params)");
    }
    pygoblin_trainer *self = (pygoblin_trainer *)type->tp_alloc(type, 0);
    goblin_tensor *init = PyMem_Calloc((size_t)n_params, sizeof *init);
    PyObject **keep = PyMem_Calloc((size_t)n_params, sizeof *keep);
    if (self) {
        self->dtypes = PyMem_Calloc((size_t)n_in, sizeof *self->dtypes);
        self->ranks = PyMem_Calloc((size_t)n_in, sizeof *self->ranks);
        self->shapes = PyMem_Calloc((size_t)n_in, sizeof *self->shapes);
    }
    PyObject *ret = NULL;
    if (!self || !init || !keep || !self->dtypes || !self->ranks || !self->shapes) {
        if (self && init && keep)
            PyErr_NoMemory();
        else if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    self->n_params = n_params;
    self->n_data = n_in - n_params;
    for (int32_t i = 0; i < n_in; i++) {
        goblin_op op;
        goblin_tensor t;
        int32_t nin;
        const int32_t *ins;
        goblin_err e = goblin_graph_node(g, goblin_graph_input_id(g, i), &op, &t, &nin, &ins);
        if (e) {
            pygoblin_raise(e, "cannot read the model's inputs");
            goto done;
        }
        self->dtypes[i] = t.dtype;
        self->ranks[i] = t.rank;
        memcpy(self->shapes[i], t.shape, sizeof(int64_t) * (size_t)t.rank);
    }
    for (int32_t i = 0; i < n_params; i++) {
        char what[48];
        PyOS_snprintf(what, sizeof what, "init[%d]", (int)i);
        if (input_tensor(self, i, PySequence_Fast_GET_ITEM(seq, i), what, &init[i], &keep[i]) < 0)
            goto done;
    }
    goblin_grid *native = NULL;
    if (pygoblin_grid_acquire(grid, &native) < 0)
        goto done;
    Py_INCREF(grid);
    self->grid = grid;
    if (progress != Py_None) {
        Py_INCREF(progress);
        self->progress = progress;
    }
    p.progress_user = self;
    goblin_errbuf msg_eb = {0};
    goblin_err e;
    goblin_trainer *t = NULL;
    Py_BEGIN_ALLOW_THREADS
    e = goblin_trainer_new(&t, native, &p, init, &msg_eb);
    Py_END_ALLOW_THREADS
    if (e) {
        pygoblin_raise(e, msg_eb.message);
        goto done;
    }
    self->t = t;
    ret = (PyObject *)self;
    self = NULL;
done:
    for (int32_t i = 0; keep && i < n_params; i++)
        Py_XDECREF(keep[i]);
    PyMem_Free(keep);
    PyMem_Free(init);
    Py_DECREF(seq);
    Py_XDECREF(self);
    return ret;
}

/* ---- rounds ------------------------------------------------------------------------- */

static PyObject *trainer_fail(pygoblin_trainer *self, goblin_err e)
{
    if (PyErr_Occurred())
        return NULL;
    const char *m = self->t ? goblin_trainer_error(self->t) : "";
    return pygoblin_raise(e, m);
}

static PyObject *trainer_round(pygoblin_trainer *self, PyObject *args)
{
    if (check_usable(self) < 0)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n != self->n_data) {
        PyErr_Format(PyExc_TypeError, "round(): the model takes %d data inputs, got %zd", (int)self->n_data, n);
        return NULL;
    }
    goblin_tensor data[64];
    PyObject *keep[64] = {NULL};
    if (n > 64)
        return pygoblin_raise(GOBLIN_ELIMIT, "round(): at most 64 data inputs");
    PyObject *ret = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        char what[48];
        PyOS_snprintf(what, sizeof what, "batch input %d", (int)i);
        if (input_tensor(self, self->n_params + (int32_t)i, PyTuple_GET_ITEM(args, i), what, &data[i], &keep[i]) < 0)
            goto done;
    }
    goblin_train_round_info info;
    memset(&info, 0, sizeof info);
    goblin_err e;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    e = goblin_trainer_round(self->t, data, (int32_t)n, &info);
    Py_END_ALLOW_THREADS
    self->busy--;
    if (PyErr_Occurred()) /* the progress callable raised (or Ctrl-C): the round still ran */
        goto done;
    if (e) {
        trainer_fail(self, e);
        goto done;
    }
    ret = Py_BuildValue("{s:L,s:d,s:d,s:d,s:L,s:d,s:d,s:O,s:O}", "round", (long long)info.round, "loss",
                        info.loss, "grad_norm", info.grad_norm, "lr", info.lr, "tasks", (long long)info.tasks,
                        "seconds", info.seconds, "verify_seconds", info.verify_seconds, "rechecked",
                        info.rechecked ? Py_True : Py_False, "recheck_changed",
                        info.recheck_changed ? Py_True : Py_False);
done:
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(keep[i]);
    return ret;
}

static PyObject *trainer_plan(pygoblin_trainer *self, PyObject *args)
{
    long long batch;
    if (!PyArg_ParseTuple(args, "L:plan", &batch) || check_usable(self) < 0)
        return NULL;
    goblin_train_plan_info *pi = PyMem_Calloc(1, sizeof *pi);
    if (!pi)
        return PyErr_NoMemory();
    goblin_err e;
    Py_BEGIN_ALLOW_THREADS
    e = goblin_trainer_plan(self->t, (int64_t)batch, pi);
    Py_END_ALLOW_THREADS
    PyObject *ret = NULL, *stages = NULL;
    if (e) {
        trainer_fail(self, e);
        goto done;
    }
    int32_t ns = pi->n_stages < 0 ? 0 : pi->n_stages > GOBLIN_TRAIN_MAX_STAGES ? GOBLIN_TRAIN_MAX_STAGES : pi->n_stages;
    stages = PyList_New(ns);
    if (!stages)
        goto done;
    for (int32_t i = 0; i < ns; i++) {
        const goblin_train_stage_info *s = &pi->stages[i];
        PyObject *d = Py_BuildValue("{s:i,s:i,s:i,s:i,s:K,s:K,s:d}", "first_node", (int)s->first_node, "last_node",
                                    (int)s->last_node, "n_params", (int)s->n_params, "tiles", (int)s->tiles,
                                    "forward_task_bytes", (unsigned long long)s->forward_task_bytes,
                                    "backward_task_bytes", (unsigned long long)s->backward_task_bytes,
                                    "flops_per_row", s->flops_per_row);
        if (!d)
            goto done;
        PyList_SET_ITEM(stages, i, d);
    }
    ret = Py_BuildValue("{s:L,s:L,s:L,s:i,s:O,s:K,s:L}", "batch", (long long)pi->batch, "micro_batch",
                        (long long)pi->micro_batch, "micro_batches", (long long)pi->micro_batches, "n_stages",
                        (int)pi->n_stages, "stages", stages, "budget_bytes", (unsigned long long)pi->budget_bytes,
                        "tasks_per_round", (long long)pi->tasks_per_round);
done:
    Py_XDECREF(stages);
    PyMem_Free(pi);
    return ret;
}

static PyObject *trainer_plan_text(pygoblin_trainer *self, PyObject *args)
{
    long long batch;
    if (!PyArg_ParseTuple(args, "L:plan_text", &batch) || check_usable(self) < 0)
        return NULL;
    size_t cap = 1 << 16;
    char *buf = PyMem_Malloc(cap);
    if (!buf)
        return PyErr_NoMemory();
    buf[0] = 0;
    goblin_err e;
    Py_BEGIN_ALLOW_THREADS
    e = goblin_trainer_plan_text(self->t, (int64_t)batch, buf, cap);
    Py_END_ALLOW_THREADS
    PyObject *ret = e ? trainer_fail(self, e) : PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strnlen(buf, cap), "replace");
    PyMem_Free(buf);
    return ret;
}

/* ---- parameters and checkpoints --------------------------------------------------- */

static PyObject *trainer_get_param(pygoblin_trainer *self, PyObject *args)
{
    int i;
    if (!PyArg_ParseTuple(args, "i:get_param", &i) || check_usable(self) < 0)
        return NULL;
    if (i < 0 || i >= self->n_params) {
        PyErr_Format(PyExc_IndexError, "parameter index %d out of range (the model has %d)", i, (int)self->n_params);
        return NULL;
    }
    npy_intp dims[GOBLIN_MAX_RANK];
    for (int32_t k = 0; k < self->ranks[i]; k++)
        dims[k] = (npy_intp)self->shapes[i][k];
    goblin_dtype dt = self->dtypes[i];
    if (dt == GOBLIN_DTYPE_BF16)
        return pygoblin_raise(GOBLIN_ENOTSUP, "get_param(): bf16 parameters are not exchanged");
    PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(self->ranks[i], dims, pygoblin_npy_type(dt));
    if (!a)
        return NULL;
    goblin_tensor t;
    PyObject *keep = NULL;
    if (pygoblin_tensor_from_array(a, dt, &t, &keep) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    Py_XDECREF(keep);
    goblin_err e = goblin_trainer_get_param(self->t, (int32_t)i, &t);
    if (e) {
        Py_DECREF(a);
        return trainer_fail(self, e);
    }
    return (PyObject *)a;
}

static PyObject *trainer_set_param(pygoblin_trainer *self, PyObject *args)
{
    int i;
    PyObject *v;
    if (!PyArg_ParseTuple(args, "iO:set_param", &i, &v) || check_usable(self) < 0)
        return NULL;
    if (i < 0 || i >= self->n_params) {
        PyErr_Format(PyExc_IndexError, "parameter index %d out of range (the model has %d)", i, (int)self->n_params);
        return NULL;
    }
    goblin_tensor t;
    PyObject *keep = NULL;
    if (input_tensor(self, (int32_t)i, v, "set_param()", &t, &keep) < 0)
        return NULL;
    goblin_err e = goblin_trainer_set_param(self->t, (int32_t)i, &t);
    Py_XDECREF(keep);
    if (e)
        return trainer_fail(self, e);
    Py_RETURN_NONE;
}

static PyObject *trainer_file(pygoblin_trainer *self, PyObject *args, int load)
{
    PyObject *path_o;
    if (!PyArg_ParseTuple(args, load ? "O&:load" : "O&:save", PyUnicode_FSConverter, &path_o))
        return NULL;
    if (check_usable(self) < 0) {
        Py_DECREF(path_o);
        return NULL;
    }
    const char *path = PyBytes_AS_STRING(path_o);
    goblin_err e;
    Py_BEGIN_ALLOW_THREADS
    e = load ? goblin_trainer_load(self->t, path) : goblin_trainer_save(self->t, path);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_o);
    if (e)
        return trainer_fail(self, e);
    Py_RETURN_NONE;
}

static PyObject *trainer_save(pygoblin_trainer *self, PyObject *args) { return trainer_file(self, args, 0); }
static PyObject *trainer_load(pygoblin_trainer *self, PyObject *args) { return trainer_file(self, args, 1); }

static PyObject *trainer_close(pygoblin_trainer *self, PyObject *unused)
{
    if (self->busy)
        return pygoblin_raise(GOBLIN_EBUSY, "the trainer is running a round in another thread");
    trainer_release(self);
    Py_RETURN_NONE;
}

static PyObject *trainer_get_rounds(pygoblin_trainer *self, void *c)
{
    if (!self->t)
        return pygoblin_raise(GOBLIN_ECLOSED, "the trainer is closed");
    return PyLong_FromLongLong((long long)goblin_trainer_rounds(self->t));
}

/* [(node, count, mean, var)] per batch-norm in training mode: the last applied round's
 * whole-batch mean and biased variance per channel (f64 arrays), count = elements per
 * channel (0 before the first round). */
static PyObject *trainer_batch_norm_stats(pygoblin_trainer *self, PyObject *unused)
{
    if (check_usable(self) < 0)
        return NULL;
    int32_t n = goblin_trainer_batch_norm_count(self->t);
    PyObject *list = PyList_New(n);
    if (!list)
        return NULL;
    for (int32_t k = 0; k < n; k++) {
        int32_t node = 0;
        int64_t ch = 0, count = 0;
        goblin_trainer_batch_norm_stats(self->t, k, &node, &ch, &count, NULL, NULL);
        npy_intp dims[1] = {(npy_intp)ch};
        PyArrayObject *m = (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_FLOAT64);
        PyArrayObject *v = m ? (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_FLOAT64) : NULL;
        if (!v) {
            Py_XDECREF(m);
            Py_DECREF(list);
            return NULL;
        }
        goblin_trainer_batch_norm_stats(self->t, k, NULL, NULL, NULL, PyArray_DATA(m), PyArray_DATA(v));
        PyObject *item = Py_BuildValue("(iLNN)", (int)node, (long long)count, (PyObject *)m, (PyObject *)v);
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k, item);
    }
    return list;
}

static PyObject *trainer_get_closed(pygoblin_trainer *self, void *c) { return PyBool_FromLong(self->t == NULL); }
static PyObject *trainer_get_n_params(pygoblin_trainer *self, void *c) { return PyLong_FromLong(self->n_params); }

static PyMethodDef trainer_methods[] = {
    {"round", (PyCFunction)trainer_round, METH_VARARGS,
     "round(*data) -> dict(round, loss, grad_norm, lr, tasks, seconds, verify_seconds, rechecked, recheck_changed): one verified round"},
    {"plan", (PyCFunction)trainer_plan, METH_VARARGS,
     "plan(batch) -> dict: micro-batches, stages (node ranges, tiles, memory per task), budget"},
    {"plan_text", (PyCFunction)trainer_plan_text, METH_VARARGS, "plan_text(batch) -> str: the plan as text"},
    {"get_param", (PyCFunction)trainer_get_param, METH_VARARGS, "get_param(i) -> a new array"},
    {"batch_norm_stats", (PyCFunction)trainer_batch_norm_stats, METH_NOARGS,
     "batch_norm_stats() -> [(node, count, mean, var)]: the last round's whole-batch statistics per batch-norm"},
    {"set_param", (PyCFunction)trainer_set_param, METH_VARARGS, "set_param(i, array): replace parameter i"},
    {"save", (PyCFunction)trainer_save, METH_VARARGS, "save(path): checkpoint (parameters, optimizer, round)"},
    {"load", (PyCFunction)trainer_load, METH_VARARGS, "load(path): resume from a checkpoint of the same model"},
    {"close", (PyCFunction)trainer_close, METH_NOARGS, "close(): free the trainer and release the grid"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef trainer_getset[] = {
    {"rounds", (getter)trainer_get_rounds, NULL, "rounds run so far", NULL},
    {"closed", (getter)trainer_get_closed, NULL, "True once closed", NULL},
    {"n_params", (getter)trainer_get_n_params, NULL, "number of parameters (model inputs 0 .. n_params-1)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject pygoblin_trainer_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goblin._goblin.Trainer",
    .tp_basicsize = sizeof(pygoblin_trainer),
    .tp_dealloc = (destructor)trainer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Trainer(grid, graph, n_params, init, options=None, progress=None): goblin_trainer "
              "(use grid.train(), which wraps it).",
    .tp_methods = trainer_methods,
    .tp_getset = trainer_getset,
    .tp_new = trainer_new,
};

int pygoblin_train_init_type(PyObject *m)
{
    if (PyType_Ready(&pygoblin_trainer_type) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Trainer", (PyObject *)&pygoblin_trainer_type);
}
