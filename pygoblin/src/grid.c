/* grid.c - goblin._goblin.Grid: an embedded grid (goblin_grid_local: a node and worker
 * threads in this process) or a client of a running goblin-node (goblin_client).
 *
 * Jobs are waited for in short slices with the GIL released; between slices the
 * extension reports progress to a Python callable and runs PyErr_CheckSignals, so a
 * Ctrl-C (or an exception raised by the callable) cancels the job on the node and the
 * grid stays usable. Embedded jobs read the caller's arrays in place and write the
 * caller's output arrays directly (borrowed tensors, any strides, memmaps included);
 * remote jobs send packed copies and copy the fetched results into NumPy arrays. */
#include "pygoblin.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#define SLICE_MS 50       /* one wait slice: how quickly Ctrl-C is noticed */
#define LOG_RING 8
#define CANCEL_WAIT_MS 30000 /* after a cancel, how long to wait for the job to end */

/* Warning and error lines of the embedded node and workers: a failed submit returns a
 * code only and the node logs why, so the last line becomes the exception's message. */
typedef struct {
    pthread_mutex_t mu;
    uint64_t seq;
    char line[LOG_RING][400];
} log_ring;

typedef struct {
    PyObject_HEAD
    goblin_grid *grid;     /* embedded, or NULL */
    goblin_client *client; /* remote, or NULL */
    log_ring *log;         /* embedded */
    PyObject *url;
    int32_t n_workers;     /* embedded: workers started; remote: 0 */
    bool remote;
    int busy;              /* calls in progress (with the GIL released at times) */
    int64_t jobs_submitted, jobs_done, jobs_failed, jobs_canceled;
} pygoblin_grid;

static void log_cb(void *user, goblin_log_level level, const char *line)
{
    log_ring *r = user;
    if (level > GOBLIN_LOG_WARN)
        return;
    pthread_mutex_lock(&r->mu);
    snprintf(r->line[r->seq % LOG_RING], sizeof r->line[0], "%s", line);
    r->seq++;
    pthread_mutex_unlock(&r->mu);
}

static uint64_t log_seq(log_ring *r)
{
    pthread_mutex_lock(&r->mu);
    uint64_t s = r->seq;
    pthread_mutex_unlock(&r->mu);
    return s;
}

/* The newest line logged since @p since into @p out (empty if none). */
static void log_since(log_ring *r, uint64_t since, char *out, size_t cap)
{
    out[0] = 0;
    pthread_mutex_lock(&r->mu);
    if (r->seq > since)
        snprintf(out, cap, "%s", r->line[(r->seq - 1) % LOG_RING]);
    pthread_mutex_unlock(&r->mu);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int check_open(pygoblin_grid *self)
{
    if (!self->grid && !self->client) {
        pygoblin_raise(GOBLIN_ECLOSED, "the grid is closed (goblin.connect() opens a new one)");
        return -1;
    }
    return 0;
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
    if (strcmp(verify, "freivalds") == 0)
        p.node.verify = GOBLIN_VERIFY_FREIVALDS;
    else if (strcmp(verify, "recompute") == 0)
        p.node.verify = GOBLIN_VERIFY_RECOMPUTE;
    else if (strcmp(verify, "unsafe-none") == 0)
        p.node.verify = GOBLIN_VERIFY_UNSAFE_NONE;
    else
        return pygoblin_raise(GOBLIN_EINVAL, "verify must be 'freivalds', 'recompute' or 'unsafe-none'");
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
    p.node.log = p.worker.log = log_cb;
    p.node.log_user = p.worker.log_user = self->log;
    p.node.log_level = p.worker.log_level = GOBLIN_LOG_WARN;
    goblin_err e;
    goblin_grid *g = NULL;
    Py_BEGIN_ALLOW_THREADS
    e = goblin_grid_local(workers, &p, &g);
    /* Workers dial in asynchronously: wait (bounded) until all said HELLO, so the
     * first job is planned for all of them. */
    for (int waited = 0; !e && waited < 10000; waited += 2) {
        goblin_node_stats s;
        goblin_node_stats_get(goblin_grid_node(g), &s);
        if (s.workers_connected >= workers)
            break;
        sleep_ms(2);
    }
    Py_END_ALLOW_THREADS
    if (e) {
        char msg[480];
        log_since(self->log, 0, msg, sizeof msg);
        Py_DECREF(self);
        return pygoblin_raise(e, msg[0] ? msg : "cannot start the embedded grid");
    }
    self->grid = g;
    self->n_workers = workers;
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
                             "token", NULL};
    const char *url, *ca = NULL, *fp = NULL, *sn = NULL;
    double connect_timeout = 10.0, timeout = 120.0;
    PyObject *tok = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zzzddO:remote", kwlist, &url, &ca, &fp, &sn,
                                     &connect_timeout, &timeout, &tok))
        return NULL;
    char *tok_bytes = NULL;
    Py_ssize_t tok_len = 0;
    if (tok != Py_None) {
        if (!PyBytes_Check(tok)) {
            PyErr_SetString(PyExc_TypeError, "token must be bytes or None");
            return NULL;
        }
        if (PyBytes_AsStringAndSize(tok, &tok_bytes, &tok_len) < 0)
            return NULL;
        if (tok_len < 1 || tok_len > GOBLIN_TOKEN_MAX_BYTES)
            return pygoblin_raise(GOBLIN_EINVAL, "a client token must have 1 to 256 bytes");
    }
    if (!(connect_timeout > 0 && connect_timeout < 86400 && timeout > 0 && timeout < 86400 * 30))
        return pygoblin_raise(GOBLIN_EINVAL, "timeouts must be positive numbers of seconds");
    goblin_client_params p;
    goblin_client_params_default(&p);
    p.ca_file = ca;
    p.fingerprint = fp;
    p.server_name = sn;
    p.connect_timeout_ms = (uint32_t)(connect_timeout * 1000.0 + 0.5);
    p.timeout_ms = (uint32_t)(timeout * 1000.0 + 0.5);
    p.token = (const uint8_t *)tok_bytes; /* tok is borrowed from args for this call */
    p.token_len = (uint32_t)tok_len;
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
    goblin_client *c = NULL;
    goblin_errbuf msg_eb = {0};
    Py_BEGIN_ALLOW_THREADS
    e = goblin_client_connect(&c, url, &p, &msg_eb);
    Py_END_ALLOW_THREADS
    if (e) {
        Py_DECREF(self);
        return pygoblin_raise(e, msg_eb.message);
    }
    self->client = c;
    self->remote = true;
    return (PyObject *)self;
}

static void grid_release(pygoblin_grid *self)
{
    goblin_grid *g = self->grid;
    goblin_client *c = self->client;
    self->grid = NULL;
    self->client = NULL;
    if (g || c) {
        Py_BEGIN_ALLOW_THREADS
        goblin_grid_free(g);
        goblin_client_free(c);
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

typedef struct {
    goblin_job *job;       /* embedded */
    goblin_client *client; /* remote */
    uint64_t id;
} job_ref;

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
static void cancel_job(pygoblin_grid *self, job_ref *j)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    self->jobs_canceled++;
    Py_BEGIN_ALLOW_THREADS
    if (j->job) {
        goblin_job_cancel(j->job);
        goblin_job_wait(j->job, CANCEL_WAIT_MS);
    } else {
        goblin_client_cancel(j->client, j->id);
        for (int waited = 0; waited < CANCEL_WAIT_MS; waited += SLICE_MS) {
            goblin_client_job_info info;
            if (goblin_client_job_status(j->client, j->id, &info) != GOBLIN_OK ||
                info.status != GOBLIN_JOB_RUNNING)
                break;
            sleep_ms(SLICE_MS);
        }
    }
    Py_END_ALLOW_THREADS
    PyErr_Restore(et, ev, tb);
}

/* Wait for the job in slices. Returns 0 with *err the job's result (and @p msg why it
 * failed), or -1 with a Python exception set after canceling the job. */
static int wait_job(pygoblin_grid *self, job_ref *j, PyObject *progress, goblin_err *err, char *msg,
                    size_t cap)
{
    int64_t done = 0, total = 0, last_done = -1, last_total = -1;
    msg[0] = 0;
    for (;;) {
        goblin_err e;
        goblin_client_job_info info;
        bool running;
        Py_BEGIN_ALLOW_THREADS
        if (j->job) {
            e = goblin_job_wait(j->job, SLICE_MS);
            goblin_job_progress(j->job, &done, &total);
            running = e == GOBLIN_ETIMEDOUT;
            if (!running && e)
                snprintf(msg, cap, "%s", goblin_job_error(j->job));
        } else {
            e = goblin_client_job_status(j->client, j->id, &info);
            running = !e && info.status == GOBLIN_JOB_RUNNING;
            if (e)
                snprintf(msg, cap, "%s", goblin_client_error(j->client));
            else {
                done = info.done, total = info.total;
                if (!running) {
                    e = info.error;
                    if (!e && info.status != GOBLIN_JOB_DONE)
                        e = info.status == GOBLIN_JOB_CANCELED ? GOBLIN_ECANCELED : GOBLIN_EINTERNAL;
                    snprintf(msg, cap, "%s", info.message);
                }
            }
            if (running)
                sleep_ms(SLICE_MS);
        }
        Py_END_ALLOW_THREADS
        if (!running) {
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

/* A packed (C-contiguous, aligned, native) view or copy of @p a: what a remote job sends. */
static PyArrayObject *packed(PyArrayObject *a, int npy)
{
    return (PyArrayObject *)PyArray_FromAny((PyObject *)a, PyArray_DescrFromType(npy), 0, 0,
                                            NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST,
                                            NULL);
}

/* A NumPy array holding a copy of a library buffer (dtype and shape checked against
 * @p want); frees the buffer in every case. */
static PyObject *adopt_buffer(goblin_tensor *got, const goblin_tensor *want, const char *what)
{
    PyObject *res = NULL;
    bool ok = got->data && got->dtype == want->dtype && got->rank == want->rank;
    for (int d = 0; ok && d < want->rank; d++)
        ok = got->shape[d] == want->shape[d];
    if (!ok) {
        char msg[160];
        PyOS_snprintf(msg, sizeof msg, "%s: the node returned a result of another dtype or shape", what);
        pygoblin_raise(GOBLIN_EPROTO, msg);
        goto done;
    }
    npy_intp dims[GOBLIN_MAX_RANK];
    for (int d = 0; d < want->rank; d++)
        dims[d] = (npy_intp)want->shape[d];
    bool bf16 = want->dtype == GOBLIN_DTYPE_BF16;
    res = PyArray_SimpleNew(want->rank, dims, bf16 ? NPY_FLOAT32 : pygoblin_npy_type(want->dtype));
    if (!res)
        goto done;
    int64_t n = goblin_tensor_numel(want);
    if (!goblin_tensor_is_contiguous(got)) {
        Py_CLEAR(res);
        pygoblin_raise(GOBLIN_EPROTO, "the node returned a strided result buffer");
        goto done;
    }
    if (bf16)
        pygoblin_bf16_to_f32(got->data, PyArray_DATA((PyArrayObject *)res), n);
    else
        memcpy(PyArray_DATA((PyArrayObject *)res), got->data, (size_t)PyArray_NBYTES((PyArrayObject *)res));
done:
    goblin_buffer_free(got->data);
    got->data = NULL;
    return res;
}

static PyObject *raise_job(goblin_err e, const char *msg, const char *what)
{
    char full[640];
    if (msg && *msg)
        PyOS_snprintf(full, sizeof full, "%s: %s", what, msg);
    else
        PyOS_snprintf(full, sizeof full, "%s: %s", what, goblin_strerror(e));
    return pygoblin_raise(e, full);
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
    PyObject *result = NULL;
    PyArrayObject *ka = NULL, *kb = NULL, *target = NULL; /* kept alive during the job */
    goblin_job *job = NULL;
    goblin_tensor ta, tb, tc, got;
    memset(&tc, 0, sizeof tc);
    memset(&got, 0, sizeof got);
    /* Embedded: the library writes into `out` itself when it can, else into a new array
     * (the result, or a temporary copied into `out`). Remote: the fetched buffer is copied. */
    if (self->grid) {
        if (out && writable_in_place(out)) {
            target = out;
            Py_INCREF(target);
        } else if (!(target = (PyArrayObject *)PyArray_SimpleNew(2, dims, npy))) {
            return NULL;
        }
    }
    if (self->grid) {
        PyObject *k1 = NULL, *k2 = NULL;
        if (pygoblin_tensor_from_array(a, dta, &ta, &k1) < 0 || pygoblin_tensor_from_array(b, dta, &tb, &k2) < 0) {
            Py_XDECREF(k1);
            goto done;
        }
        ka = (PyArrayObject *)k1, kb = (PyArrayObject *)k2;
    } else {
        if (!(ka = packed(a, npy)) || !(kb = packed(b, npy)))
            goto done;
        describe(ka, dta, &ta);
        describe(kb, dta, &tb);
    }
    if (target)
        describe(target, dta, &tc);
    goblin_err e;
    char msg[520] = "";
    job_ref j = {0};
    self->busy++;
    if (self->grid) {
        goblin_job_params jp;
        goblin_job_params_default(&jp);
        jp.min_tasks = min_tasks;
        jp.task_memory_bytes = task_memory;
        uint64_t since = log_seq(self->log);
        Py_BEGIN_ALLOW_THREADS
        e = goblin_node_submit_matmul(goblin_grid_node(self->grid), &ta, &tb, &tc, &jp, &job);
        Py_END_ALLOW_THREADS
        if (e)
            log_since(self->log, since, msg, sizeof msg);
        j.job = job;
    } else {
        j.client = self->client;
        Py_BEGIN_ALLOW_THREADS
        e = goblin_client_submit_matmul(self->client, &ta, &tb, &j.id);
        if (e)
            snprintf(msg, sizeof msg, "%s", goblin_client_error(self->client));
        Py_END_ALLOW_THREADS
    }
    if (e) {
        self->busy--;
        raise_job(e, msg, "matmul");
        goto done;
    }
    self->jobs_submitted++;
    int rc = wait_job(self, &j, progress, &e, msg, sizeof msg);
    if (rc == 0 && self->client) {
        goblin_err fe;
        Py_BEGIN_ALLOW_THREADS
        fe = goblin_client_fetch_result(self->client, j.id, e ? NULL : &got);
        if (!e && fe) {
            e = fe;
            snprintf(msg, sizeof msg, "%s", goblin_client_error(self->client));
        }
        Py_END_ALLOW_THREADS
    } else if (rc < 0 && self->client) {
        Py_BEGIN_ALLOW_THREADS
        goblin_client_fetch_result(self->client, j.id, NULL); /* release the job on the node */
        Py_END_ALLOW_THREADS
    }
    self->busy--;
    if (job_outcome(self, rc, e, msg, "matmul") < 0)
        goto done;
    if (self->client) {
        goblin_tensor want;
        int64_t shape[2] = {dims[0], dims[1]};
        goblin_tensor_init(&want, dta, 2, shape, NULL);
        PyObject *r = adopt_buffer(&got, &want, "matmul");
        if (!r)
            goto done;
        if (out) {
            if (PyArray_CopyInto(out, (PyArrayObject *)r) < 0) {
                Py_DECREF(r);
                goto done;
            }
            Py_DECREF(r);
            Py_INCREF(out);
            result = (PyObject *)out;
        } else {
            result = r;
        }
    } else if (out && target != out) {
        if (PyArray_CopyInto(out, target) == 0) {
            Py_INCREF(out);
            result = (PyObject *)out;
        }
    } else {
        Py_INCREF(target);
        result = (PyObject *)target;
    }
done:
    if (job) {
        Py_BEGIN_ALLOW_THREADS
        goblin_job_free(job);
        Py_END_ALLOW_THREADS
    }
    if (got.data)
        goblin_buffer_free(got.data);
    Py_XDECREF(ka);
    Py_XDECREF(kb);
    Py_XDECREF(target);
    return result;
}

static PyObject *grid_matmul_files(pygoblin_grid *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"a_path", "b_path", "c_path", "progress", NULL};
    const char *pa, *pb, *pc;
    PyObject *progress = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sss|O:matmul_files", kwlist, &pa, &pb, &pc, &progress))
        return NULL;
    if (check_open(self) < 0)
        return NULL;
    if (!self->client)
        return pygoblin_raise(GOBLIN_ENOTSUP, "matmul_files on an embedded grid is done by the goblin "
                              "package (memory-mapped .npy files)");
    goblin_err e;
    char msg[520] = "";
    job_ref j = {.client = self->client};
    self->busy++;
    Py_BEGIN_ALLOW_THREADS
    e = goblin_client_submit_matmul_files(self->client, pa, pb, pc, &j.id);
    if (e)
        snprintf(msg, sizeof msg, "%s", goblin_client_error(self->client));
    Py_END_ALLOW_THREADS
    if (e) {
        self->busy--;
        return raise_job(e, msg, "matmul_files");
    }
    self->jobs_submitted++;
    int rc = wait_job(self, &j, progress, &e, msg, sizeof msg);
    Py_BEGIN_ALLOW_THREADS
    goblin_client_fetch_result(self->client, j.id, NULL); /* a file job: releases it */
    Py_END_ALLOW_THREADS
    self->busy--;
    if (job_outcome(self, rc, e, msg, "matmul_files") < 0)
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
    goblin_tensor *want = PyMem_Calloc((size_t)n_out, sizeof *want);
    PyObject **keep = PyMem_Calloc((size_t)(n_in ? n_in : 1), sizeof *keep);
    PyObject **outs = PyMem_Calloc((size_t)n_out, sizeof *outs);
    PyObject *result = NULL;
    goblin_job *job = NULL;
    if (!tin || !tout || !want || !keep || !outs) {
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
        /* In place, any strides (a remote client packs while sending). */
        if (pygoblin_tensor_from_array(a, w.dtype, &tin[i], &keep[i]) < 0)
            goto done;
    }
    for (int32_t i = 0; i < n_out; i++) {
        goblin_graph_node(g, goblin_graph_output_id(g, i), NULL, &want[i], NULL, NULL);
        if (self->grid) {
            goblin_tensor *t = &tout[i];
            *t = want[i];
            npy_intp dims[GOBLIN_MAX_RANK];
            for (int d = 0; d < t->rank; d++)
                dims[d] = (npy_intp)t->shape[d];
            int npy = t->dtype == GOBLIN_DTYPE_BF16 ? NPY_UINT16 : pygoblin_npy_type(t->dtype);
            if (!(outs[i] = PyArray_SimpleNew(t->rank, dims, npy)))
                goto done;
            goblin_tensor_init(t, t->dtype, t->rank, t->shape, PyArray_DATA((PyArrayObject *)outs[i]));
        }
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
    char msg[520] = "";
    job_ref j = {0};
    self->busy++;
    pg->busy++;
    if (self->grid) {
        uint64_t since = log_seq(self->log);
        Py_BEGIN_ALLOW_THREADS
        e = goblin_node_submit_graph(goblin_grid_node(self->grid), g, tin, (int32_t)n_in, tout, n_out, &jp,
                                     &job);
        Py_END_ALLOW_THREADS
        if (e)
            log_since(self->log, since, msg, sizeof msg);
        j.job = job;
    } else {
        j.client = self->client;
        Py_BEGIN_ALLOW_THREADS
        e = goblin_client_submit_graph(self->client, g, tin, (int32_t)n_in, &jp, &j.id);
        if (e)
            snprintf(msg, sizeof msg, "%s", goblin_client_error(self->client));
        Py_END_ALLOW_THREADS
    }
    pg->busy--;
    if (e) {
        self->busy--;
        raise_job(e, msg, "run");
        goto done;
    }
    self->jobs_submitted++;
    int rc = wait_job(self, &j, progress, &e, msg, sizeof msg);
    if (self->client) {
        /* Fetch the outputs (or, after a failure or a cancel, just release the job). */
        goblin_err fe;
        for (int32_t i = 0; i < n_out; i++)
            memset(&tout[i], 0, sizeof tout[i]);
        Py_BEGIN_ALLOW_THREADS
        fe = goblin_client_fetch_outputs(self->client, j.id, tout, n_out);
        if (rc == 0 && !e && fe) {
            e = fe;
            snprintf(msg, sizeof msg, "%s", goblin_client_error(self->client));
        }
        Py_END_ALLOW_THREADS
    }
    self->busy--;
    if (job_outcome(self, rc, e, msg, "run") < 0)
        goto done;
    result = PyTuple_New(n_out);
    if (!result)
        goto done;
    for (int32_t i = 0; i < n_out; i++) {
        PyObject *o;
        if (self->client) {
            o = adopt_buffer(&tout[i], &want[i], "run");
        } else if (want[i].dtype == GOBLIN_DTYPE_BF16) {
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
    if (job) {
        Py_BEGIN_ALLOW_THREADS
        goblin_job_free(job);
        Py_END_ALLOW_THREADS
    }
    for (int32_t i = 0; self->client && tout && i < n_out; i++)
        if (tout[i].data)
            goblin_buffer_free(tout[i].data);
    for (Py_ssize_t i = 0; keep && i < n_in; i++)
        Py_XDECREF(keep[i]);
    for (int32_t i = 0; outs && i < n_out; i++)
        Py_XDECREF(outs[i]);
    PyMem_Free(tin);
    PyMem_Free(tout);
    PyMem_Free(want);
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

static PyObject *worker_dict(const goblin_node_worker_stats *w)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    if (set_int(d, "session_id", (long long)w->session_id) < 0 || set_bool(d, "connected", w->connected) < 0 ||
        set_bool(d, "quarantined", w->quarantined) < 0 || set_int(d, "threads", w->threads) < 0 ||
        set_int(d, "memory_bytes", (long long)w->memory_bytes) < 0 || set_int(d, "issued", w->issued) < 0 ||
        set_int(d, "accepted", w->accepted) < 0 || set_int(d, "rejected", w->rejected) < 0 ||
        set_int(d, "failed_leases", w->failed_leases) < 0) {
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
    int64_t nw = 0;
    memset(&s, 0, sizeof s);
    if (self->grid) {
        goblin_node *node = goblin_grid_node(self->grid);
        goblin_node_stats_get(node, &s);
        nw = s.workers_seen;
        if (nw > 0 && !(ws = PyMem_Calloc((size_t)nw, sizeof *ws)))
            return PyErr_NoMemory();
        for (int64_t i = 0; i < nw; i++)
            if (goblin_node_worker_stats_get(node, i, &ws[i]) != GOBLIN_OK) {
                nw = i;
                break;
            }
    } else {
        goblin_err e;
        int64_t cap = 1024;
        if (!(ws = PyMem_Calloc((size_t)cap, sizeof *ws)))
            return PyErr_NoMemory();
        char msg[520] = "";
        self->busy++;
        Py_BEGIN_ALLOW_THREADS
        e = goblin_client_stats(self->client, &s, ws, cap, &nw);
        if (e)
            snprintf(msg, sizeof msg, "%s", goblin_client_error(self->client));
        Py_END_ALLOW_THREADS
        self->busy--;
        if (e) {
            PyMem_Free(ws);
            return raise_job(e, msg, "stats");
        }
        if (nw > cap)
            nw = cap;
    }
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
    return PyBool_FromLong(!self->grid && !self->client);
}

static PyObject *grid_get_n_workers(pygoblin_grid *self, void *c)
{
    return PyLong_FromLong(self->n_workers);
}

static PyMethodDef grid_methods[] = {
    {"local", (PyCFunction)(void (*)(void))grid_local, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "local(workers=2, threads=1, memory=0, verify='freivalds', backend=None): an embedded grid"},
    {"remote", (PyCFunction)(void (*)(void))grid_remote, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "remote(url, ca=None, fingerprint=None, server_name=None, connect_timeout=10.0, timeout=120.0, token=None): "
     "a client of a running node's gateway"},
    {"matmul", (PyCFunction)(void (*)(void))grid_matmul, METH_VARARGS | METH_KEYWORDS,
     "matmul(a, b, out=None, progress=None, min_tasks=0, task_memory=0) -> C = A @ B"},
    {"matmul_files", (PyCFunction)(void (*)(void))grid_matmul_files, METH_VARARGS | METH_KEYWORDS,
     "matmul_files(a_path, b_path, c_path, progress=None): a product over .npy files on the node's disk"},
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

/* For train.c (the trainer submits through the grid's node or client): the native
 * handles of a Grid, marked busy (close() refuses) until pygoblin_grid_release. */
int pygoblin_grid_acquire(PyObject *grid, goblin_node **node, goblin_client **client)
{
    if (!PyObject_TypeCheck(grid, &pygoblin_grid_type)) {
        PyErr_Format(PyExc_TypeError, "expected a goblin._goblin.Grid, got %.100s", Py_TYPE(grid)->tp_name);
        return -1;
    }
    pygoblin_grid *self = (pygoblin_grid *)grid;
    if (check_open(self) < 0)
        return -1;
    *node = self->grid ? goblin_grid_node(self->grid) : NULL;
    *client = self->client;
    self->busy++;
    return 0;
}

void pygoblin_grid_release(PyObject *grid)
{
    ((pygoblin_grid *)grid)->busy--;
}
