/* libgoblin/grid/job.c - jobs on a grid (see grid.h): one handle over a node's job
 * (embedded: the caller's tensors in place) or a job held by a node's gateway (remote:
 * inputs sent at submit, outputs fetched and copied into the caller's tensors at the end). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "core/node.h"
#include "grid_impl.h"
#include "service/client_impl.h"

#define BACKOFF_FIRST_NS 500000L   /* a remote job's first poll after 0.5 ms ... */
#define BACKOFF_MAX_NS 20000000L   /* ... doubling up to every 20 ms */
#define RELEASE_TRIES 200          /* freeing a running remote job: cancel, then try to */
#define RELEASE_SLEEP_NS 5000000L  /* release it every 5 ms for up to a second */

typedef enum job_kind { JOB_MATMUL, JOB_FILES, JOB_GRAPH } job_kind;

struct goblin_grid_job {
    goblin_grid *grid;
    job_kind kind;
    /* embedded */
    goblin_job *job;
    goblin_npy *fa, *fb, *fc; /* a file job's mapped files */
    bool synced;
    /* remote */
    goblin_job_id id;
    goblin_tensor *outs;      /* the caller's output tensors (borrowed) */
    int32_t n_out;
    goblin_tensor *fetched;   /* [n_out] for a remote fetch */
    long backoff_ns;
    /* a remote job's end, once seen */
    bool ended;
    goblin_job_status status;
    goblin_err result;
    int64_t done, total;
    char msg[GOBLIN__GRID_MSG];
};

static goblin_grid_job *job_new(goblin_grid *g, job_kind kind, goblin_tensor *outs, int32_t n_out) {
    goblin_grid_job *j = goblin__calloc(1, sizeof *j);
    if (!j) return NULL;
    j->grid = g;
    j->kind = kind;
    j->outs = outs;
    j->n_out = n_out;
    j->status = GOBLIN_JOB_RUNNING;
    j->backoff_ns = BACKOFF_FIRST_NS;
    if (g->client && n_out > 0 && !(j->fetched = goblin__calloc((size_t)n_out, sizeof *j->fetched))) {
        goblin__free(j);
        return NULL;
    }
    return j;
}

static void job_release_files(goblin_grid_job *j) {
    goblin_npy_close(j->fa);
    goblin_npy_close(j->fb);
    goblin_npy_close(j->fc);
    j->fa = j->fb = j->fc = NULL;
}

static void job_discard(goblin_grid_job *j) {
    if (!j) return;
    job_release_files(j);
    goblin__free(j->fetched);
    goblin__free(j);
}

/* A remote submit's result: the job handle, or the failure recorded on the grid. */
static goblin_err remote_submitted(goblin_grid *g, goblin_err e, goblin_grid_job *j, goblin_grid_job **out) {
    if (e) {
        job_discard(j);
        return goblin__grid_fail(g, e, 0, NULL);
    }
    goblin__grid_ok(g);
    *out = j;
    return GOBLIN_OK;
}

/* ---- submit ------------------------------------------------------------------------ */

/* A contiguous copy of @p t in *tmp when it is strided (the wire sends packed tensors);
 * @p t itself otherwise. NULL when out of memory. */
static const goblin_tensor *packed(const goblin_tensor *t, goblin_tensor *tmp) {
    if (goblin_tensor_is_contiguous(t)) return t;
    size_t bytes = (size_t)goblin_tensor_numel(t) * goblin_dtype_size(t->dtype);
    void *data = goblin__alloc(bytes ? bytes : 1);
    if (!data) return NULL;
    goblin_tensor_init(tmp, t->dtype, t->rank, t->shape, data);
    goblin__tensor_copy(tmp, t);
    return tmp;
}

goblin_err goblin_grid_submit_matmul(goblin_grid *g, const goblin_tensor *a, const goblin_tensor *b,
                                     goblin_tensor *c, const goblin_job_params *jp, goblin_grid_job **out) {
    if (!g || !a || !b || !c || !out) return GOBLIN_EINVAL;
    goblin_grid_job *j = job_new(g, JOB_MATMUL, c, 1);
    if (!j) return goblin__grid_fail(g, GOBLIN_ENOMEM, 0, "out of memory");
    goblin_err e;
    if (!g->client) {
        uint64_t mark = goblin__grid_log_mark(g);
        if ((e = goblin_node_submit_matmul(g->node, a, b, c, jp, &j->job))) {
            job_discard(j);
            return goblin__grid_fail(g, e, mark, NULL);
        }
        goblin__grid_ok(g);
        *out = j;
        return GOBLIN_OK;
    }
    goblin_tensor ta, tb;
    memset(&ta, 0, sizeof ta);
    memset(&tb, 0, sizeof tb);
    const goblin_tensor *pa = packed(a, &ta), *pb = pa ? packed(b, &tb) : NULL;
    if (!pa || !pb) e = goblin__grid_fail(g, GOBLIN_ENOMEM, 0, "out of memory for a packed operand");
    else e = goblin_client_submit_matmul_params(g->client, pa, pb, jp, &j->id);
    goblin__free(ta.data);
    goblin__free(tb.data);
    if (!pa || !pb) {
        job_discard(j);
        return e;
    }
    return remote_submitted(g, e, j, out);
}

goblin_err goblin_grid_submit_matmul_files(goblin_grid *g, const char *a_path, const char *b_path,
                                           const char *c_path, const goblin_job_params *jp,
                                           goblin_grid_job **out) {
    if (!g || !a_path || !b_path || !c_path || !out) return GOBLIN_EINVAL;
    goblin_grid_job *j = job_new(g, JOB_FILES, NULL, 0);
    if (!j) return goblin__grid_fail(g, GOBLIN_ENOMEM, 0, "out of memory");
    if (g->client)
        return remote_submitted(g, goblin_client_submit_matmul_files_params(g->client, a_path, b_path, c_path, true, jp, &j->id),
                                j, out);
    /* What a gateway does with a file job, in this process. */
    goblin_errbuf why = {0};
    goblin_err e;
    if ((e = goblin_npy_open(a_path, false, &j->fa, &why)) ||
        (e = goblin_npy_open(b_path, false, &j->fb, &why))) {
        job_discard(j);
        return goblin__grid_fail(g, e, 0, why.message);
    }
    const goblin_tensor *ta = goblin_npy_tensor(j->fa), *tb = goblin_npy_tensor(j->fb);
    if (ta->rank != 2 || tb->rank != 2) {
        job_discard(j);
        return goblin__grid_fail(g, GOBLIN_ESHAPE, 0, "A and B must be 2-D");
    }
    int64_t cs[2] = {ta->shape[0], tb->shape[1]};
    if ((e = goblin_npy_create(c_path, ta->dtype, 2, cs, &j->fc, &why))) {
        job_discard(j);
        return goblin__grid_fail(g, e, 0, why.message);
    }
    uint64_t mark = goblin__grid_log_mark(g);
    if ((e = goblin_node_submit_matmul(g->node, ta, tb, goblin_npy_tensor(j->fc), jp, &j->job))) {
        job_discard(j);
        return goblin__grid_fail(g, e, mark, NULL);
    }
    goblin__grid_ok(g);
    *out = j;
    return GOBLIN_OK;
}

goblin_err goblin_grid_submit_graph(goblin_grid *g, const goblin_graph *graph, const goblin_tensor *inputs,
                                    int32_t n_inputs, goblin_tensor *outputs, int32_t n_outputs,
                                    const goblin_graph_job_params *jp, goblin_grid_job **out) {
    if (!g || !graph || !out || n_outputs < 0 || (n_outputs && !outputs)) return GOBLIN_EINVAL;
    if (n_outputs != goblin_graph_output_count(graph))
        return goblin__grid_fail(g, GOBLIN_EINVAL, 0, "the output count is not the graph's");
    goblin_grid_job *j = job_new(g, JOB_GRAPH, outputs, n_outputs);
    if (!j) return goblin__grid_fail(g, GOBLIN_ENOMEM, 0, "out of memory");
    if (g->client)
        return remote_submitted(g, goblin_client_submit_graph(g->client, graph, inputs, n_inputs, jp, &j->id),
                                j, out);
    uint64_t mark = goblin__grid_log_mark(g);
    goblin_err e = goblin_node_submit_graph(g->node, graph, inputs, n_inputs, outputs, n_outputs, jp, &j->job);
    if (e) {
        job_discard(j);
        return goblin__grid_fail(g, e, mark, NULL);
    }
    goblin__grid_ok(g);
    *out = j;
    return GOBLIN_OK;
}

/* ---- the end of a remote job ---------------------------------------------------------- */

static void remote_end(goblin_grid_job *j, goblin_err result, const char *msg) {
    j->ended = true;
    j->result = result;
    j->status = result == GOBLIN_OK          ? GOBLIN_JOB_DONE
                : result == GOBLIN_ECANCELED ? GOBLIN_JOB_CANCELED
                                             : GOBLIN_JOB_FAILED;
    snprintf(j->msg, sizeof j->msg, "%s", msg);
    if (result == GOBLIN_OK) j->done = j->total;
}

/* The node's words about a job it ended, without the client's "node: " marker: the same
 * text the job's status reports. */
static const char *node_words(goblin_client *c) {
    const char *m = goblin_client_error(c);
    return strncmp(m, "node: ", 6) == 0 ? m + 6 : m;
}

/* Copy the fetched tensors into the caller's (checked: a hostile node's reply may have
 * another dtype or shape than asked for). */
static goblin_err deliver(goblin_grid_job *j, const char **why) {
    for (int32_t i = 0; i < j->n_out; i++) {
        const goblin_tensor *got = &j->fetched[i], *want = &j->outs[i];
        bool ok = got->dtype == want->dtype && got->rank == want->rank;
        for (int32_t d = 0; ok && d < want->rank; d++) ok = got->shape[d] == want->shape[d];
        if (!ok) {
            *why = "the node returned a result of another dtype or shape";
            return GOBLIN_EPROTO;
        }
        if (goblin_tensor_numel(got) > 0 && (!got->data || !goblin_tensor_is_contiguous(got))) {
            *why = "the node returned a strided result buffer";
            return GOBLIN_EPROTO;
        }
    }
    for (int32_t i = 0; i < j->n_out; i++)
        if (goblin_tensor_numel(&j->outs[i]) > 0) goblin__tensor_copy(&j->outs[i], &j->fetched[i]);
    return GOBLIN_OK;
}

static void free_fetched(goblin_grid_job *j) {
    for (int32_t i = 0; i < j->n_out; i++) {
        goblin_buffer_free(j->fetched[i].data);
        memset(&j->fetched[i], 0, sizeof j->fetched[i]);
    }
}

/* One FETCH: GOBLIN_EBUSY while the job runs; otherwise the job has ended (its outputs
 * in the caller's tensors when done) and is released on the node. */
static goblin_err remote_fetch(goblin_grid_job *j) {
    goblin_client *c = j->grid->client;
    goblin_err e;
    if (j->kind == JOB_MATMUL && j->n_out == 1) {
        /* C goes straight from the reply into the caller's tensor (checked there). */
        e = goblin__client_fetch_result_into(c, &j->id, &j->outs[0]);
        if (e == GOBLIN_EBUSY) return e;
        remote_end(j, e, e ? node_words(c) : "");
        return e;
    }
    if (j->kind == JOB_GRAPH) e = goblin_client_fetch_outputs(c, &j->id, j->fetched, j->n_out);
    else e = goblin_client_fetch_result(c, &j->id, j->kind == JOB_MATMUL ? j->fetched : NULL);
    if (e == GOBLIN_EBUSY) return e;
    if (e) {
        free_fetched(j);
        remote_end(j, e, node_words(c));
        return e;
    }
    const char *why = "";
    e = deliver(j, &why);
    free_fetched(j);
    remote_end(j, e, why);
    return e;
}

static void sleep_ns(long ns) {
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
}

/* ---- waiting and the rest ------------------------------------------------------------ */

goblin_err goblin_grid_job_wait(goblin_grid_job *j, int64_t timeout_ms) {
    if (!j) return GOBLIN_EINVAL;
    if (!j->grid->client) {
        goblin_err e = goblin_job_wait(j->job, timeout_ms);
        if (e == GOBLIN_OK && j->fc && !j->synced) {
            j->synced = true;
            if (goblin_npy_sync(j->fc) != GOBLIN_OK) {
                j->result = GOBLIN_EIO;
                snprintf(j->msg, sizeof j->msg, "cannot write the output file");
            }
        }
        return e == GOBLIN_OK && j->result ? j->result : e;
    }
    if (j->ended) return j->result;
    /* Polled by FETCH itself: its answer is either "still running" or the end with the
     * outputs, so a job that has ended costs one request. */
    int64_t deadline = timeout_ms >= 0 ? goblin__now_ns() + timeout_ms * 1000000 : 0;
    for (;;) {
        goblin_err e = remote_fetch(j);
        if (e != GOBLIN_EBUSY) return e;
        long ns = j->backoff_ns;
        if (timeout_ms >= 0) {
            int64_t left = deadline - goblin__now_ns();
            if (left <= 0) return GOBLIN_ETIMEDOUT;
            if (left < ns) ns = (long)left;
        }
        sleep_ns(ns);
        if (j->backoff_ns < BACKOFF_MAX_NS) j->backoff_ns = j->backoff_ns * 2 < BACKOFF_MAX_NS ? j->backoff_ns * 2
                                                                                             : BACKOFF_MAX_NS;
        if (timeout_ms >= 0 && goblin__now_ns() >= deadline) return GOBLIN_ETIMEDOUT;
    }
}

void goblin_grid_job_progress(goblin_grid_job *j, int64_t *done, int64_t *total) {
    int64_t d = 0, t = 0;
    if (j && !j->grid->client) {
        goblin_job_progress(j->job, &d, &t);
    } else if (j) {
        if (!j->ended) {
            goblin_client_job_info info;
            if (goblin_client_job_status(j->grid->client, &j->id, &info) == GOBLIN_OK) {
                j->done = info.done;
                j->total = info.total;
            }
        }
        d = j->done;
        t = j->total;
    }
    if (done) *done = d;
    if (total) *total = t;
}

goblin_job_status goblin_grid_job_status(goblin_grid_job *j) {
    if (!j) return GOBLIN_JOB_FAILED;
    if (!j->grid->client) {
        goblin_job_status s = goblin_job_get_status(j->job);
        return s == GOBLIN_JOB_DONE && j->result ? GOBLIN_JOB_FAILED : s;
    }
    if (j->ended) return j->status;
    goblin_client_job_info info;
    if (goblin_client_job_status(j->grid->client, &j->id, &info) != GOBLIN_OK) return GOBLIN_JOB_RUNNING;
    j->done = info.done;
    j->total = info.total;
    return info.status;
}

void goblin_grid_job_cancel(goblin_grid_job *j) {
    if (!j) return;
    if (!j->grid->client) goblin_job_cancel(j->job);
    else if (!j->ended) goblin_client_cancel(j->grid->client, &j->id);
}

const char *goblin_grid_job_error(goblin_grid_job *j) {
    if (!j) return "";
    if (!j->grid->client && !j->result) return goblin_job_error(j->job);
    return j->msg;
}

void goblin_grid_job_free(goblin_grid_job *j) {
    if (!j) return;
    if (!j->grid->client) {
        goblin_job_free(j->job); /* cancels a running job */
    } else if (!j->ended) {
        /* Nobody will read the outputs: release the job on the node without them. */
        goblin_client_cancel(j->grid->client, &j->id);
        j->n_out = 0;
        j->kind = JOB_FILES;
        for (int tries = 0; tries < RELEASE_TRIES && remote_fetch(j) == GOBLIN_EBUSY; tries++)
            sleep_ns(RELEASE_SLEEP_NS);
    }
    job_discard(j);
}
