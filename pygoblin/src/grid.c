/* grid.c - goblin._goblin.Grid: a thin handle on goblin_grid (goblin/grid.h), an embedded
 * grid (a node and worker threads in this process) or a client of a running goblin-node:
 * the same calls for both, the library's job handle doing what differs.
 *
 * Jobs are waited for in short slices with the GIL released; between slices the
 * extension reports progress to a Python callable and runs PyErr_CheckSignals, so a
 * Ctrl-C (or an exception raised by the callable) cancels the job on the node and the
 * grid stays usable. The caller's arrays are handed to the library as they are (any
 * strides, memmaps included): an embedded grid computes on them in place, a remote one
 * sends them and copies the results into the output arrays. */
#include "pygoblin.h"

#include <pthread.h>
#include <string.h>

#define SLICE_MS 50          /* one wait slice: how quickly Ctrl-C is noticed */
#define CANCEL_WAIT_MS 30000 /* after a cancel, how long to wait for the job to end */
#define STATS_WORKERS 1024   /* per-worker records asked for at first */

/* Why an embedded grid could not start: the node and workers log it (the grid itself,
 * and the lines it keeps for goblin_grid_error, are gone by then). */
typedef struct {
    pthread_mutex_t mu;
    char line[400];
} start_log;

typedef struct {
    PyObject_HEAD
    goblin_grid *grid;
    start_log *log;        /* embedded */
    PyObject *url;
    int32_t n_workers;     /* embedded: workers started; remote: 0 */
    bool remote;
    int busy;              /* calls in progress (with the GIL released at times) */
    int64_t jobs_submitted, jobs_done, jobs_failed, jobs_canceled;
} pygoblin_grid;

static void start_log_cb(void *user, goblin_log_level level, const char *line)
{
    start_log *r = user;
    if (level > GOBLIN_LOG_WARN)
        return;
    pthread_mutex_lock(&r->mu);
    snprintf(r->line, sizeof r->line, "%s", line);
    pthread_mutex_unlock(&r->mu);
}

static int check_open(pygoblin_grid *self)
{
    if (!self->grid) {
        pygoblin_raise(GOBLIN_ECLOSED, "the grid is closed (goblin.connect() opens a new one)");
        return -1;
    }
    return 0;
}

static PyObject *raise_job(goblin_err e, const char *msg, const char *what)
{
    char full[720];
    if (msg && *msg)
        PyOS_snprintf(full, sizeof full, "%s: %s", what, msg);
    else
        PyOS_snprintf(full, sizeof full, "%s: %s", what, goblin_strerror(e));
    return pygoblin_raise(e, full);
}

/* Raise for a failed submit, with the grid's reason. */
static PyObject *raise_submit(pygoblin_grid *self, goblin_err e, const char *what)
{
    char msg[600];
    goblin_grid_error(self->grid, msg, sizeof msg);
    return raise_job(e, msg, what);
}

/* ---- construction ------------------------------------------------------------------ */

static PyObject *grid_local(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"workers", "threads", "memory", "verify", "backend", NULL};
    int workers = 2, threads = 1;
    unsigned long long memory = 0;
    const char *verify = "freivalds";
    PyObject *backend_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|iiKsO:local", kwlist, &workers, &threads, &memory,
                                     &verify, &backend_o))
        return NULL;
    if (workers < 1 || workers > 256)
        return pygoblin_raise(GOBLIN_EINVAL, "workers must be between 1 and 256");
    if (threads < 0)
        return pygoblin_raise(GOBLIN_EINVAL, "threads must be >= 0 (0 = all cores)");
    goblin_grid_params p;
    goblin_grid_params_default(&p);
    p.worker.threads = threads;
    if (memory) {
        p.worker.memory_bytes = memory;
        p.worker.cache_bytes = memory / 4;
    }
    goblin_verify v;
    if (goblin_verify_from_name(verify, &v) != GOBLIN_OK ||
        (v != GOBLIN_VERIFY_FREIVALDS && v != GOBLIN_VERIFY_RECOMPUTE && v != GOBLIN_VERIFY_UNSAFE_NONE))
        return pygoblin_raise(GOBLIN_EINVAL, "verify must be 'freivalds', 'recompute' or 'unsafe-none'");
    p.node.verify = v;
    if (backend_o && backend_o != Py_None && pygoblin_backend_from_py(backend_o, &p.worker.backend) < 0)
        return NULL;
    pygoblin_grid *self = (pygoblin_grid *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->log = PyMem_RawCalloc(1, sizeof *self->log);
    if (!self->log) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    pthread_mutex_init(&self->log->mu, NULL);
    p.node.log = p.worker.log = start_log_cb;
    p.node.log_user = p.worker.log_user = self->log;
    p.node.log_level = p.worker.log_level = GOBLIN_LOG_WARN;
    goblin_err e;
    goblin_grid *g = NULL;
    Py_BEGIN_ALLOW_THREADS
    e = goblin_grid_local(workers, &p, &g);
    /* Workers dial in asynchronously: wait (bounded) until all said HELLO, so the
     * first job is planned for all of them. */
    if (!e)
        goblin_grid_wait_workers(g, workers, 10000);
    Py_END_ALLOW_THREADS
    if (e) {
        char msg[400];
        pthread_mutex_lock(&self->log->mu);
        snprintf(msg, sizeof msg, "%s", self->log->line);
        pthread_mutex_unlock(&self->log->mu);
        Py_DECREF(self);
        return pygoblin_raise(e, msg[0] ? msg : "cannot start the embedded grid");
    }
    self->grid = g;
    self->n_workers = goblin_grid_worker_count(g);
    self->url = PyUnicode_FromString(goblin_grid_url(g));
    if (!self->url) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyObject *grid_remote(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"url", "ca", "fingerprint", "server_name", "connect_timeout", "timeout",
                             "credential", NULL};
    const char *url, *ca = NULL, *fp = NULL, *sn = NULL, *cred = NULL;
    double connect_timeout = 10.0, timeout = 120.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zzzddz:remote", kwlist, &url, &ca, &fp, &sn,
                                     &connect_timeout, &timeout, &cred))
        return NULL;
    if (cred && (!cred[0] || strlen(cred) > GOBLIN_TOKEN_MAX_BYTES))
        return pygoblin_raise(GOBLIN_EINVAL, "a credential must have 1 to 256 characters");
    if (!(connect_timeout > 0 && connect_timeout < 86400 && timeout > 0 && timeout < 86400 * 30))
        return pygoblin_raise(GOBLIN_EINVAL, "timeouts must be positive numbers of seconds");
    goblin_client_params p;
    goblin_client_params_default(&p);
    p.ca_file = ca;
    p.fingerprint = fp;
    p.server_name = sn;
    p.connect_timeout_ms = (uint32_t)(connect_timeout * 1000.0 + 0.5);
    p.timeout_ms = (uint32_t)(timeout * 1000.0 + 0.5);
    p.credential = cred; /* borrowed from args for this call; the client copies it */
    if (!p.connect_timeout_ms)
        p.connect_timeout_ms = 1;
    pygoblin_grid *self = (pygoblin_grid *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->url = PyUnicode_FromString(url);
    if (!self->url) {
        Py_DECREF(self);
        return NULL;
    }
    goblin_err e;
    goblin_grid *g = NULL;
    goblin_errbuf msg_eb = {0};
    Py_BEGIN_ALLOW_THREADS
    e = goblin_grid_connect(url, &p, &g, &msg_eb);
    Py_END_ALLOW_THREADS
    if (e) {
        Py_DECREF(self);
        return pygoblin_raise(e, msg_eb.message);
    }
    self->grid = g;
    self->remote = true;
    return (PyObject *)self;
}

static void grid_release(pygoblin_grid *self)
{
    goblin_grid *g = self->grid;
    self->grid = NULL;
    if (g) {
        Py_BEGIN_ALLOW_THREADS
        goblin_grid_free(g);
        Py_END_ALLOW_THREADS
    }
}

static void grid_dealloc(pygoblin_grid *self)
{
    grid_release(self);
    if (self->log) {
        pthread_mutex_destroy(&self->log->mu);
        PyMem_RawFree(self->log);
    }
    Py_XDECREF(self->url);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *grid_close(pygoblin_grid *self, PyObject *unused)
{
    if (self->busy)
        return pygoblin_raise(GOBLIN_EBUSY, "the grid is in use (a job running in another thread, or an "
                              "open trainer): close it when that is over");
    grid_release(self);
    Py_RETURN_NONE;
}

/* ---- waiting ----------------------------------------------------------------------- */

/* Report progress (only when it changed). -1 with an exception if the callable raised. */
static int report(PyObject *progress, int64_t done, int64_t total, int64_t *last_done, int64_t *last_total)
{
    if (!progress || progress == Py_None || (done == *last_done && total == *last_total))
        return 0;
    *last_done = done;
    *last_total = total;
    PyObject *r = PyObject_CallFunction(progress, "LL", (long long)done, (long long)total);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Cancel after an exception (kept set): the job is told to stop and waited for, so no
 * library thread touches the caller's arrays once this returns. */
static void cancel_job(pygoblin_grid *self, goblin_grid_job *j)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    self->jobs_canceled++;
    Py_BEGIN_ALLOW_THREADS
    goblin_grid_job_cancel(j);
    goblin_grid_job_wait(j, CANCEL_WAIT_MS);
    Py_END_ALLOW_THREADS
    PyErr_Restore(et, ev, tb);
}

/* Wait for the job in slices. Returns 0 with *err the job's result (and @p msg why it
 * failed), or -1 with a Python exception set after canceling the job. */
static int wait_job(pygoblin_grid *self, goblin_grid_job *j, PyObject *progress, goblin_err *err, char *msg,
                    size_t cap)
{
    int64_t done = 0, total = 0, last_done = -1, last_total = -1;
    bool want = progress && progress != Py_None;
    msg[0] = 0;
    for (;;) {
        goblin_err e;
        Py_BEGIN_ALLOW_THREADS
        if (want)
            goblin_grid_job_progress(j, &done, &total);
        e = goblin_grid_job_wait(j, SLICE_MS);
        if (e != GOBLIN_ETIMEDOUT) {
            if (want)
                goblin_grid_job_progress(j, &done, &total);
            if (e)
                snprintf(msg, cap, "%s", goblin_grid_job_error(j));
        }
        Py_END_ALLOW_THREADS
        if (e != GOBLIN_ETIMEDOUT) {
            *err = e;
            if (!e && report(progress, done, total, &last_done, &last_total) < 0)
                return -1; /* the job is over: nothing to cancel */
            return 0;
        }
        if (PyErr_CheckSignals() < 0 || report(progress, done, total, &last_done, &last_total) < 0) {
            cancel_job(self, j);
            return -1;
        }
    }
}

/* Count a waited-for job's end; raise for a failed or canceled one. Returns 0 when it
 * is done, -1 with an exception set otherwise (rc < 0: wait_job already raised). */
static int job_outcome(pygoblin_grid *self, int rc, goblin_err e, const char *msg, const char *what)
{
    if (rc < 0)
        return -1;
    if (e) {
        if (e == GOBLIN_ECANCELED)
            self->jobs_canceled++;
        else
            self->jobs_failed++;
        raise_job(e, msg, what);
        return -1;
    }
    self->jobs_done++;
    return 0;
}

/* Wait for a submitted job, free it, and count its end. 0 when it is done; -1 with an
 * exception otherwise. */
static int finish_job(pygoblin_grid *self, goblin_grid_job *j, PyObject *progress, const char *what)
{
    goblin_err e = GOBLIN_OK;
    char msg[600];
    self->jobs_submitted++;
    int rc = wait_job(self, j, progress, &e, msg, sizeof msg);
    Py_BEGIN_ALLOW_THREADS
    goblin_grid_job_free(j);
    Py_END_ALLOW_THREADS
    self->busy--;
    return job_outcome(self, rc, e, msg, what);
}

/* ---- arrays ------------------------------------------------------------------------ */

static int float_dtype(PyArrayObject *a, goblin_dtype *dt)
{
    int t = PyArray_TYPE(a);
    if (t == NPY_FLOAT32)
        *dt = GOBLIN_DTYPE_F32;
    else if (t == NPY_FLOAT64)
        *dt = GOBLIN_DTYPE_F64;
    else
        return -1;
    return 0;
}

static PyArrayObject *as_array(PyObject *o, const char *what)
{
    if (!PyArray_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a numpy.ndarray (or np.memmap), got %.100s "
                     "(convert it with numpy.asarray first)", what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    return (PyArrayObject *)o;
}

/* Can the library write into @p a in place (native order, aligned, strides in elements)? */
static bool writable_in_place(PyArrayObject *a)
{
    if (!PyArray_ISNBO(PyArray_DESCR(a)->byteorder) || !PyArray_ISALIGNED(a) || !PyArray_ISWRITEABLE(a))
        return false;
    for (int d = 0; d < PyArray_NDIM(a); d++)
        if (PyArray_STRIDES(a)[d] % PyArray_ITEMSIZE(a))
            return false;
    return true;
}

static void describe(PyArrayObject *a, goblin_dtype dt, goblin_tensor *t)
{
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->rank = PyArray_NDIM(a);
    for (int d = 0; d < t->rank; d++) {
        t->shape[d] = PyArray_DIMS(a)[d];
        t->strides[d] = PyArray_STRIDES(a)[d] / PyArray_ITEMSIZE(a);
    }
    t->data = PyArray_DATA(a);
}


/* ---- matmul ------------------------------------------------------------------------ */

static PyObject *grid_matmul(pygoblin_grid *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"a", "b", "out", "progress", "min_tasks", "task_memory", NULL};
    PyObject *ao, *bo, *outo = Py_None, *progress = Py_None;
    long long min_tasks = 0;
    unsigned long long task_memory = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOLK:matmul", kwlist, &ao, &bo, &outo, &progress,
                                     &min_tasks, &task_memory))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    PyArrayObject *a = as_array(ao, "matmul: A"), *b = a ? as_array(bo, "matmul: B") : NULL;
    if (!b)
        return NULL;
    goblin_dtype dta, dtb;
    if (float_dtype(a, &dta) < 0 || float_dtype(b, &dtb) < 0 || dta != dtb) {
        char msg[200];
        PyObject *sa = PyObject_Str((PyObject *)PyArray_DESCR(a)), *sb = PyObject_Str((PyObject *)PyArray_DESCR(b));
        const char *na = sa ? PyUnicode_AsUTF8(sa) : NULL, *nb = sb ? PyUnicode_AsUTF8(sb) : NULL;
        PyOS_snprintf(msg, sizeof msg, "matmul: A and B must both be float32 or both float64, got %s and %s",
                      na ? na : "?", nb ? nb : "?");
        Py_XDECREF(sa);
        Py_XDECREF(sb);
        PyErr_Clear();
        return pygoblin_raise(GOBLIN_EDTYPE, msg);
    }
    if (PyArray_NDIM(a) != 2 || PyArray_NDIM(b) != 2 || PyArray_DIM(a, 1) != PyArray_DIM(b, 0)) {
        char msg[200];
        if (PyArray_NDIM(a) != 2 || PyArray_NDIM(b) != 2)
            PyOS_snprintf(msg, sizeof msg, "matmul: A and B must be 2-D, got %d-D and %d-D", PyArray_NDIM(a),
                          PyArray_NDIM(b));
        else
            PyOS_snprintf(msg, sizeof msg, "matmul: A is %lld x %lld and B is %lld x %lld: the inner "
                          "dimensions differ", (long long)PyArray_DIM(a, 0), (long long)PyArray_DIM(a, 1),
                          (long long)PyArray_DIM(b, 0), (long long)PyArray_DIM(b, 1));
        return pygoblin_raise(GOBLIN_ESHAPE, msg);
    }
    npy_intp dims[2] = {PyArray_DIM(a, 0), PyArray_DIM(b, 1)};
    int npy = dta == GOBLIN_DTYPE_F32 ? NPY_FLOAT32 : NPY_FLOAT64;
    PyArrayObject *out = NULL;
    if (outo != Py_None) {
        if (!(out = as_array(outo, "matmul: out")))
            return NULL;
        if (PyArray_TYPE(out) != npy)
            return pygoblin_raise(GOBLIN_EDTYPE, "matmul: out must have the dtype of A and B");
        if (PyArray_NDIM(out) != 2 || PyArray_DIM(out, 0) != dims[0] || PyArray_DIM(out, 1) != dims[1]) {
            char msg[160];
            PyOS_snprintf(msg, sizeof msg, "matmul: out must have shape (%lld, %lld)", (long long)dims[0],
                          (long long)dims[1]);
            return pygoblin_raise(GOBLIN_ESHAPE, msg);
        }
        if (!PyArray_ISWRITEABLE(out))
            return pygoblin_raise(GOBLIN_EINVAL, "matmul: out is read-only");
    }
    /* The library writes into `out` itself when it can, else into a new array (the
     * result, or a temporary copied into `out`). */
    PyArrayObject *target;
    if (out && writable_in_place(out)) {
        target = out;
        Py_INCREF(target);
    } else if (!(target = (PyArrayObject *)PyArray_SimpleNew(2, dims, npy))) {
        return NULL;
    }
    PyObject *result = NULL, *ka = NULL, *kb = NULL; /* kept alive during the job */
    goblin_tensor ta, tb, tc;
    if (pygoblin_tensor_from_array(a, dta, &ta, &ka) < 0 || pygoblin_tensor_from_array(b, dta, &tb, &kb) < 0)
        goto done;
    describe(target, dta, &tc);
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = min_tasks;
    jp.task_memory_bytes = task_memory;
    goblin_err e;
    goblin_grid_job *j = NULL;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    e = goblin_grid_submit_matmul(self->grid, &ta, &tb, &tc, &jp, &j);
    Py_END_ALLOW_THREADS
    if (e) {
        self->busy--;
        raise_submit(self, e, "matmul");
        goto done;
    }
    if (finish_job(self, j, progress, "matmul") < 0)
        goto done;
    if (out && target != out) {
        if (PyArray_CopyInto(out, target) == 0) {
            Py_INCREF(out);
            result = (PyObject *)out;
        }
    } else {
        Py_INCREF(target);
        result = (PyObject *)target;
    }
done:
    Py_XDECREF(ka);
    Py_XDECREF(kb);
    Py_XDECREF(target);
    return result;
}

static PyObject *grid_matmul_files(pygoblin_grid *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"a_path", "b_path", "c_path", "progress", "min_tasks", "task_memory", NULL};
    const char *pa, *pb, *pc;
    PyObject *progress = Py_None;
    long long min_tasks = 0;
    unsigned long long task_memory = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sss|OLK:matmul_files", kwlist, &pa, &pb, &pc, &progress,
                                     &min_tasks, &task_memory))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    goblin_err e;
    goblin_grid_job *j = NULL;
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    goblin_job_params jp;
    goblin_job_params_default(&jp);
    jp.min_tasks = min_tasks;
    jp.task_memory_bytes = task_memory;
    e = goblin_grid_submit_matmul_files(self->grid, pa, pb, pc, &jp, &j);
    Py_END_ALLOW_THREADS
    if (e) {
        self->busy--;
        return raise_submit(self, e, "matmul_files");
    }
    if (finish_job(self, j, progress, "matmul_files") < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- graph jobs -------------------------------------------------------------------- */

/* A per-input/per-output list of small ints (or None). Returns 0 and *out (PyMem) or -1. */
static int int_list(PyObject *o, Py_ssize_t want, int limit, const char *what, int **out)
{
    *out = NULL;
    if (o == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(o, "expected a sequence");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n != want) {
        Py_DECREF(seq);
        char msg[160];
        PyOS_snprintf(msg, sizeof msg, "%s: expected %zd entries (one per %s), got %zd", what, want,
                      strcmp(what, "split") == 0 ? "input" : "output", n);
        pygoblin_raise(GOBLIN_EINVAL, msg);
        return -1;
    }
    int *v = PyMem_Calloc((size_t)(n ? n : 1), sizeof *v);
    if (!v) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long x = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if ((x == -1 && PyErr_Occurred()) || x < 0 || x >= limit) {
            PyErr_Clear();
            PyMem_Free(v);
            Py_DECREF(seq);
            char msg[120];
            PyOS_snprintf(msg, sizeof msg, "%s: entry %zd is out of range", what, i);
            pygoblin_raise(GOBLIN_EINVAL, msg);
            return -1;
        }
        v[i] = (int)x;
    }
    Py_DECREF(seq);
    *out = v;
    return 0;
}

static PyObject *grid_run(pygoblin_grid *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"graph", "inputs", "split", "combine", "chunk_rows", "verify", "progress",
                             "min_tasks", "task_memory", "min_replication", "trust_halflife", "spot_rows",
                             NULL};
    PyObject *gobj, *inputs_o, *split_o = Py_None, *combine_o = Py_None, *progress = Py_None;
    long long chunk_rows = 0, min_tasks = 0;
    unsigned long long task_memory = 0;
    int verify = GOBLIN_VERIFY_REPLICATE;
    double min_rep = -1, halflife = -1;
    int spot_rows = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O|OOLiOLKddi:run", kwlist, &pygoblin_graph_type, &gobj,
                                     &inputs_o, &split_o, &combine_o, &chunk_rows, &verify, &progress,
                                     &min_tasks, &task_memory, &min_rep, &halflife, &spot_rows))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    if (verify < 0 || verify >= GOBLIN_VERIFY_COUNT)
        return pygoblin_raise(GOBLIN_EINVAL, "run: unknown verification mode");
    if (chunk_rows < 0)
        return pygoblin_raise(GOBLIN_EINVAL, "run: chunk_rows must be positive (or None: as many as fit)");
    if (spot_rows < 0 || spot_rows > 65535)
        return pygoblin_raise(GOBLIN_EINVAL, "run: spot_rows must be in 1..65535 (or None: the default)");
    pygoblin_graph *pg = (pygoblin_graph *)gobj;
    const goblin_graph *g = pg->g;
    PyObject *seq = PySequence_Fast(inputs_o, "inputs must be a sequence of numpy arrays");
    if (!seq)
        return NULL;
    Py_ssize_t n_in = PySequence_Fast_GET_SIZE(seq);
    int32_t want_in = goblin_graph_input_count(g), n_out = goblin_graph_output_count(g);
    if (n_in != want_in) {
        Py_DECREF(seq);
        char msg[96];
        PyOS_snprintf(msg, sizeof msg, "run: the graph takes %d input(s), got %zd", want_in, n_in);
        return pygoblin_raise(GOBLIN_EINVAL, msg);
    }
    if (n_out == 0) {
        Py_DECREF(seq);
        return pygoblin_raise(GOBLIN_EINVAL, "run: the graph has no outputs (call output() first)");
    }
    int *split_i = NULL, *combine_i = NULL;
    goblin_split *split = NULL;
    goblin_combine *combine = NULL;
    goblin_tensor *tin = PyMem_Calloc((size_t)(n_in ? n_in : 1), sizeof *tin);
    goblin_tensor *tout = PyMem_Calloc((size_t)n_out, sizeof *tout);
    PyObject **keep = PyMem_Calloc((size_t)(n_in ? n_in : 1), sizeof *keep);
    PyObject **outs = PyMem_Calloc((size_t)n_out, sizeof *outs);
    PyObject *result = NULL;
    if (!tin || !tout || !keep || !outs) {
        PyErr_NoMemory();
        goto done;
    }
    if (int_list(split_o, n_in, 2, "split", &split_i) < 0 ||
        int_list(combine_o, n_out, GOBLIN_COMBINE_COUNT, "combine", &combine_i) < 0)
        goto done;
    if (split_i) {
        if (!(split = PyMem_Calloc((size_t)(n_in ? n_in : 1), sizeof *split))) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < n_in; i++)
            split[i] = (goblin_split)split_i[i];
    }
    if (combine_i) {
        if (!(combine = PyMem_Calloc((size_t)n_out, sizeof *combine))) {
            PyErr_NoMemory();
            goto done;
        }
        for (int32_t i = 0; i < n_out; i++)
            combine[i] = (goblin_combine)combine_i[i];
    }
    for (Py_ssize_t i = 0; i < n_in; i++) {
        goblin_tensor w;
        goblin_graph_node(g, goblin_graph_input_id(g, (int32_t)i), NULL, &w, NULL, NULL);
        char what[48];
        PyOS_snprintf(what, sizeof what, "run: input %zd", i);
        PyArrayObject *a = as_array(PySequence_Fast_GET_ITEM(seq, i), what);
        if (!a)
            goto done;
        if (PyArray_TYPE(a) != pygoblin_npy_type(w.dtype)) {
            char msg[160];
            PyOS_snprintf(msg, sizeof msg, "run: input %zd: the graph takes %s", i, goblin_dtype_name(w.dtype));
            pygoblin_raise(GOBLIN_EDTYPE, msg);
            goto done;
        }
        /* In place, any strides (a remote grid packs while sending). */
        if (pygoblin_tensor_from_array(a, w.dtype, &tin[i], &keep[i]) < 0)
            goto done;
    }
    /* The outputs, in arrays of the graph's output dtypes (bf16 as its bits, widened to
     * float32 at the end). */
    for (int32_t i = 0; i < n_out; i++) {
        goblin_tensor *t = &tout[i];
        goblin_graph_node(g, goblin_graph_output_id(g, i), NULL, t, NULL, NULL);
        npy_intp dims[GOBLIN_MAX_RANK];
        for (int d = 0; d < t->rank; d++)
            dims[d] = (npy_intp)t->shape[d];
        int npy = t->dtype == GOBLIN_DTYPE_BF16 ? NPY_UINT16 : pygoblin_npy_type(t->dtype);
        if (!(outs[i] = PyArray_SimpleNew(t->rank, dims, npy)))
            goto done;
        goblin_tensor_init(t, t->dtype, t->rank, t->shape, PyArray_DATA((PyArrayObject *)outs[i]));
    }
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.job.min_tasks = min_tasks;
    jp.job.task_memory_bytes = task_memory;
    jp.chunk_rows = chunk_rows;
    jp.split = split;
    jp.combine = combine;
    jp.verify = (goblin_verify)verify;
    jp.spot_rows = spot_rows;
    if (min_rep >= 0)
        jp.min_replication = min_rep;
    if (halflife >= 0)
        jp.trust_halflife = halflife;
    goblin_err e;
    goblin_grid_job *j = NULL;
    self->busy++;
    pg->busy++;
    Py_BEGIN_ALLOW_THREADS
    e = goblin_grid_submit_graph(self->grid, g, tin, (int32_t)n_in, tout, n_out, &jp, &j);
    Py_END_ALLOW_THREADS
    pg->busy--;
    if (e) {
        self->busy--;
        raise_submit(self, e, "run");
        goto done;
    }
    if (finish_job(self, j, progress, "run") < 0)
        goto done;
    result = PyTuple_New(n_out);
    if (!result)
        goto done;
    for (int32_t i = 0; i < n_out; i++) {
        PyObject *o;
        if (tout[i].dtype == GOBLIN_DTYPE_BF16) {
            PyArrayObject *b = (PyArrayObject *)outs[i];
            o = PyArray_SimpleNew(PyArray_NDIM(b), PyArray_DIMS(b), NPY_FLOAT32);
            if (o)
                pygoblin_bf16_to_f32(PyArray_DATA(b), PyArray_DATA((PyArrayObject *)o), PyArray_SIZE(b));
        } else {
            o = outs[i];
            Py_INCREF(o);
        }
        if (!o) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, i, o);
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
    PyMem_Free(split_i);
    PyMem_Free(combine_i);
    PyMem_Free(split);
    PyMem_Free(combine);
    Py_DECREF(seq);
    return result;
}

/* ---- counters ---------------------------------------------------------------------- */

static int set_int(PyObject *d, const char *k, long long v)
{
    PyObject *o = PyLong_FromLongLong(v);
    if (!o)
        return -1;
    int rc = PyDict_SetItemString(d, k, o);
    Py_DECREF(o);
    return rc;
}

static int set_bool(PyObject *d, const char *k, bool v)
{
    return PyDict_SetItemString(d, k, v ? Py_True : Py_False);
}

static int set_str(PyObject *d, const char *k, const char *v)
{
    PyObject *o = PyUnicode_DecodeASCII(v, (Py_ssize_t)strlen(v), "replace");
    if (!o)
        return -1;
    int rc = PyDict_SetItemString(d, k, o);
    Py_DECREF(o);
    return rc;
}

static PyObject *worker_dict(const goblin_node_worker_stats *w)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    if (set_int(d, "session_id", (long long)w->session_id) < 0 || set_bool(d, "connected", w->connected) < 0 ||
        set_bool(d, "quarantined", w->quarantined) < 0 || set_int(d, "threads", w->threads) < 0 ||
        set_int(d, "memory_bytes", (long long)w->memory_bytes) < 0 || set_int(d, "issued", w->issued) < 0 ||
        set_int(d, "accepted", w->accepted) < 0 || set_int(d, "rejected", w->rejected) < 0 ||
        set_int(d, "failed_leases", w->failed_leases) < 0 || set_str(d, "identity", w->identity) < 0 ||
        set_str(d, "owner", w->owner) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *grid_stats(pygoblin_grid *self, PyObject *unused)
{
    if (check_open(self) < 0)
        return NULL;
    goblin_node_stats s;
    goblin_node_worker_stats *ws = NULL;
    int64_t nw = 0, cap = STATS_WORKERS;
    memset(&s, 0, sizeof s);
    goblin_err e = GOBLIN_OK;
    self->busy++;
    for (int tries = 0; tries < 3; tries++) {
        PyMem_Free(ws);
        if (!(ws = PyMem_Calloc((size_t)cap, sizeof *ws))) {
            self->busy--;
            return PyErr_NoMemory();
        }
        Py_BEGIN_ALLOW_THREADS
        e = goblin_grid_stats(self->grid, &s, ws, cap, &nw);
        Py_END_ALLOW_THREADS
        if (e || nw <= cap)
            break;
        cap = nw; /* more workers than asked for: once more for all */
    }
    self->busy--;
    if (e) {
        PyMem_Free(ws);
        return raise_submit(self, e, "stats");
    }
    if (nw > cap)
        nw = cap;
    PyObject *d = PyDict_New(), *reasons = PyDict_New(), *workers = PyList_New(0);
    int bad = !d || !reasons || !workers;
#define F(name) bad = bad || set_int(d, #name, s.name) < 0
    F(tasks_issued);
    F(tasks_completed);
    F(results_accepted);
    bad = bad || set_int(d, "tasks_accepted", s.results_accepted) < 0;
    F(results_rejected);
    F(results_escalated);
    F(results_duplicate);
    F(results_late);
    F(tasks_reissued);
    F(tasks_speculative);
    F(panel_cache_hits);
    F(panel_cache_misses);
    F(rechecked);
    F(recheck_failed);
    F(peers_dropped);
    F(workers_refused);
    F(workers_connected);
    F(workers_quarantined);
    F(workers_seen);
    F(replicas_issued);
    F(replicas_agreed);
    F(node_recomputed);
    F(verify_ns);
    F(spot_checks);
    F(spot_rows_checked);
    F(spot_checks_prepared);
    F(freivalds_row_panels);
    F(freivalds_row_fallbacks);
    F(verify_cpu_ns);
    F(panels_in_place);
    F(workers_asking);
    F(tasks_checked);
    F(products_checked);
    F(products_bytes);
#undef F
    bad = bad || set_int(d, "jobs_submitted", self->jobs_submitted) < 0 ||
          set_int(d, "jobs_done", self->jobs_done) < 0 || set_int(d, "jobs_failed", self->jobs_failed) < 0 ||
          set_int(d, "jobs_canceled", self->jobs_canceled) < 0;
    for (int r = 0; !bad && r < GOBLIN_VERIFY_REASON_COUNT; r++)
        bad = set_int(reasons, goblin_verify_reason_name((goblin_verify_reason)r), s.rejected_by_reason[r]) < 0;
    for (int64_t i = 0; !bad && i < nw; i++) {
        PyObject *w = worker_dict(&ws[i]);
        bad = !w || PyList_Append(workers, w) < 0;
        Py_XDECREF(w);
    }
    bad = bad || PyDict_SetItemString(d, "rejected_by_reason", reasons) < 0 ||
          PyDict_SetItemString(d, "workers", workers) < 0;
    PyMem_Free(ws);
    Py_XDECREF(reasons);
    Py_XDECREF(workers);
    if (bad) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

/* ---- type -------------------------------------------------------------------------- */

static PyObject *grid_get_kind(pygoblin_grid *self, void *c)
{
    return PyUnicode_FromString(self->remote ? "remote" : "embedded");
}

static PyObject *grid_get_url(pygoblin_grid *self, void *c)
{
    PyObject *o = self->url ? self->url : Py_None;
    Py_INCREF(o);
    return o;
}

static PyObject *grid_get_closed(pygoblin_grid *self, void *c)
{
    return PyBool_FromLong(!self->grid);
}

static PyObject *grid_get_n_workers(pygoblin_grid *self, void *c)
{
    return PyLong_FromLong(self->n_workers);
}

static PyMethodDef grid_methods[] = {
    {"local", (PyCFunction)(void (*)(void))grid_local, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "local(workers=2, threads=1, memory=0, verify='freivalds', backend=None): an embedded grid"},
    {"remote", (PyCFunction)(void (*)(void))grid_remote, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "remote(url, ca=None, fingerprint=None, server_name=None, connect_timeout=10.0, timeout=120.0, credential=None): "
     "a client of a running node's gateway"},
    {"matmul", (PyCFunction)(void (*)(void))grid_matmul, METH_VARARGS | METH_KEYWORDS,
     "matmul(a, b, out=None, progress=None, min_tasks=0, task_memory=0) -> C = A @ B"},
    {"matmul_files", (PyCFunction)(void (*)(void))grid_matmul_files, METH_VARARGS | METH_KEYWORDS,
     "matmul_files(a_path, b_path, c_path, progress=None, min_tasks=0, task_memory=0): a product over .npy "
     "files on the node's disk"},
    {"run", (PyCFunction)(void (*)(void))grid_run, METH_VARARGS | METH_KEYWORDS,
     "run(graph, inputs, split=None, combine=None, chunk_rows=0, verify=0, progress=None, min_tasks=0, "
     "task_memory=0, min_replication=-1, trust_halflife=-1, spot_rows=0) -> tuple of arrays"},
    {"stats", (PyCFunction)grid_stats, METH_NOARGS, "stats() -> dict of the node's counters"},
    {"close", (PyCFunction)grid_close, METH_NOARGS, "close(): stop the embedded grid or disconnect"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef grid_getset[] = {
    {"kind", (getter)grid_get_kind, NULL, "'embedded' or 'remote'", NULL},
    {"url", (getter)grid_get_url, NULL, "the node's URL", NULL},
    {"closed", (getter)grid_get_closed, NULL, "True once closed", NULL},
    {"n_workers", (getter)grid_get_n_workers, NULL, "embedded: the workers started (remote: 0)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject pygoblin_grid_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goblin._goblin.Grid",
    .tp_basicsize = sizeof(pygoblin_grid),
    .tp_dealloc = (destructor)grid_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A grid handle: Grid.local(...) (embedded) or Grid.remote(url, ...). "
              "Use goblin.connect(), which wraps it.",
    .tp_methods = grid_methods,
    .tp_getset = grid_getset,
};

int pygoblin_grid_init_type(PyObject *m)
{
    if (PyType_Ready(&pygoblin_grid_type) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Grid", (PyObject *)&pygoblin_grid_type);
}

/* For train.c (the trainer submits through the grid): the native handle of a Grid,
 * marked busy (close() refuses) until pygoblin_grid_release. */
int pygoblin_grid_acquire(PyObject *grid, goblin_grid **out)
{
    if (!PyObject_TypeCheck(grid, &pygoblin_grid_type)) {
        PyErr_Format(PyExc_TypeError, "expected a goblin._goblin.Grid, got %.100s", Py_TYPE(grid)->tp_name);
        return -1;
    }
    pygoblin_grid *self = (pygoblin_grid *)grid;
    if (check_open(self) < 0)
        return -1;
    *out = self->grid;
    self->busy++;
    return 0;
}

void pygoblin_grid_release(PyObject *grid)
{
    ((pygoblin_grid *)grid)->busy--;
}
