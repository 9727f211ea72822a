/* libgoblin/worker/worker_task.c - computing one task: its graph (cached or decoded),
 * its inputs (sent, kept from an earlier task, or lent in place by a node of this
 * process), the evaluation straight into the RESULT message where it can, and the
 * answer followed by a LEASE_REQUEST (lease_topup). Fault injection, when a test set
 * it, alters the answer (misbehave.c). Loop thread only. */
#include "worker_impl.h"

#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "proto/wire_impl.h"

/* The RESULT message of task @p task_id, laid out before the evaluation: each of the
 * @p no outputs of @p g gets a descriptor in @p out whose data lies inside the message
 * body, so the evaluation writes the result where it is sent from (no output buffer,
 * no copy into the message). NULL (and @p out left zeroed) when that cannot be done:
 * the caller then evaluates into buffers of its own and encodes them as usual. */
static nng_msg *result_msg(const goblin_graph *g, uint64_t task_id, goblin_tensor *out, int32_t no) {
    if (no < 1 || no > GOBLIN_WIRE_MAX_TENSORS) return NULL;
    for (int32_t i = 0; i < no; i++)
        if (goblin_graph_node(g, goblin_graph_output_id(g, i), NULL, &out[i], NULL, NULL) != GOBLIN_OK) {
            memset(out, 0, (size_t)no * sizeof *out);
            return NULL;
        }
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_RESULT);
    m.request_id = task_id;
    m.body.result.task_id = task_id;
    m.body.result.n_outputs = (uint32_t)no;
    m.body.result.outputs = out;
    size_t len = 0, wrote = 0;
    size_t *off = goblin__alloc((size_t)no * sizeof *off);
    nng_msg *msg = NULL;
    bool ok = off && goblin__wire_layout_size(&m, no, &len) == GOBLIN_OK && nng_msg_alloc(&msg, len) == 0;
    if (ok && goblin__wire_encode_layout(&m, nng_msg_body(msg), len, &wrote, off, no) != GOBLIN_OK) ok = false;
    for (int32_t i = 0; ok && i < no; i++) {
        uint8_t *d = (uint8_t *)nng_msg_body(msg) + off[i];
        size_t es = goblin_dtype_size(out[i].dtype);
        if (es == 0 || (uintptr_t)d % es) ok = false; /* kernels need aligned elements */
        out[i].data = d;
    }
    goblin__free(off);
    if (!ok) {
        if (msg) nng_msg_free(msg);
        memset(out, 0, (size_t)no * sizeof *out);
        return NULL;
    }
    return msg;
}

/* Returns false when the worker must end now (CRASH). Every answer (RESULT or
 * ERROR) is followed by a LEASE_REQUEST for one more task; SILENT sends neither. */
static bool run_task_inner(goblin_worker *w, goblin__wire_task *t, nng_msg *nm, msgref **refp, bool *answered);

/* Lease requests. The worker keeps `slots` leases asked for ahead (w->credit: asked
 * and not yet received). After a task of normal size it asks for one more, as the task
 * ends. After a tiny task (under TINY_TASK_NS) it asks for LEASE_BATCH at once, when
 * fewer than `slots` are left: one LEASE_REQUEST per LEASE_BATCH tasks instead of one
 * per task, a third of the messages of a tiny task. The node keeps at most 2 TASK
 * messages outstanding per worker whatever it asked for (MAX_IN_FLIGHT in node.c); to
 * a worker that takes batches, each may hold up to 16 small TASKs (docs/runtime.md). */
#define TINY_TASK_NS 1000000
#define LEASE_BATCH 16

static void lease_topup(goblin_worker *w, int64_t task_ns) {
    if (w->credit >= w->p.slots) return;
    uint32_t ask = task_ns < TINY_TASK_NS ? LEASE_BATCH : 1;
    goblin__worker_send_lease_request(w, ask);
    w->credit += ask;
}

/* @p t was decoded zero-copy from @p nm (with other tasks, in a batch); the panel
 * cache may keep panels inside it through *refp (made on first use, with one
 * reference held by the loop, which drops it once the whole message is done). */
bool goblin__worker_run_task(goblin_worker *w, goblin__wire_task *t, nng_msg *nm, msgref **refp) {
    bool answered = true;
    int64_t t0 = goblin__now_ns();
    if (w->credit > 0) w->credit--;
    bool keep = run_task_inner(w, t, nm, refp, &answered);
    if (keep && answered) lease_topup(w, goblin__now_ns() - t0);
    return keep;
}

static void fail_task(goblin_worker *w, uint64_t id, goblin_err e, const char *text) {
    goblin__worker_send_error(w, id, e, text);
    BUMP(w, tasks_failed);
}

/* An input "left out" that is not in the cache: a view the node of this process lent in
 * place (share.h), its job held open in *held until goblin__share_drop. */
static bool take_shared(goblin_worker *w, uint64_t id, goblin_tensor *out, goblin__share_job **held,
                        bool holding) {
    if (w->share && goblin__share_take(w->share, id, out, held)) return true;
    /* None yet, or the node it came from was replaced by another on the same URL (not
     * while this task holds views of the current one). */
    if (holding) return false;
    goblin__share *cur = NULL;
    for (int32_t i = 0; !cur && i < GOBLIN_WORKER_MAX_CONNECT; i++)
        if (w->p.connect[i] && strncmp(w->p.connect[i], "inproc://", 9) == 0)
            cur = goblin__share_find(w->p.connect[i]);
    if (cur == w->share) {
        goblin__share_release(cur);
        return false;
    }
    goblin__share_release(w->share);
    w->share = cur;
    return cur && goblin__share_take(cur, id, out, held);
}

static void drop_shared(goblin_worker *w, goblin__share_job **held, int32_t n) {
    for (int32_t k = 0; held && k < n; k++) {
        goblin__share_drop(w->share, held[k]);
        held[k] = NULL;
    }
}

static bool run_task_inner(goblin_worker *w, goblin__wire_task *t, nng_msg *nm, msgref **refp, bool *answered) {
    goblin_graph *g = NULL;
    goblin_errbuf err;
    bool owned = false;
    goblin_err e = goblin__worker_task_graph(w, t, &g, &owned, &err);
    if (e) {
        fail_task(w, t->task_id, e, err.message);
        return true;
    }
    int32_t ni = goblin_graph_input_count(g), no = goblin_graph_output_count(g);
    /* Inputs, then optionally the cache directory (docs/runtime.md): i64[2 * ni] =
     * {cache id of each input (0: none)..., flag of each input (non-zero: the data was
     * left out, take it from the cache)...}. */
    bool has_dir = (int64_t)t->n_inputs == (int64_t)ni + 1;
    if ((int64_t)t->n_inputs != (int64_t)ni && !has_dir) {
        if (owned) goblin_graph_free(g);
        fail_task(w, t->task_id, GOBLIN_EINVAL, "the task's input count does not match its graph");
        return true;
    }
    const int64_t *dv = NULL;
    if (has_dir) {
        const goblin_tensor *d = &t->inputs[ni];
        if (d->dtype != GOBLIN_DTYPE_I64 || d->rank != 1 || d->shape[0] != 2 * (int64_t)ni) {
            if (owned) goblin_graph_free(g);
            fail_task(w, t->task_id, GOBLIN_EINVAL, "bad cache directory");
            return true;
        }
        dv = d->data;
    }
    goblin_tensor *in = goblin__calloc((size_t)(ni + 1), sizeof *in);
    goblin_tensor *out = goblin__calloc((size_t)(no + 1), sizeof *out);
    goblin__share_job **held = goblin__calloc((size_t)(ni + 1), sizeof *held);
    if (!in || !out || !held) {
        goblin__free(in);
        goblin__free(out);
        goblin__free(held);
        if (owned) goblin_graph_free(g);
        fail_task(w, t->task_id, GOBLIN_ENOMEM, "out of memory");
        return true;
    }
    bool holding = false;
    for (int32_t k = 0; k < ni; k++) {
        in[k] = t->inputs[k];
        if (dv && dv[ni + k]) {
            panel *pn = goblin__worker_cache_find(w, (uint64_t)dv[k]);
            if (pn) {
                BUMP(w, cache_hits);
                in[k] = pn->t;
            } else if (take_shared(w, (uint64_t)dv[k], &in[k], &held[k], holding)) {
                holding = true;
                BUMP(w, inputs_in_place);
            } else {
                BUMP(w, cache_misses);
                drop_shared(w, held, ni);
                goblin__worker_send_error(w, t->task_id, GOBLIN_ENOTFOUND, "cached input not in cache");
                goblin__free(in);
                goblin__free(out);
                goblin__free(held);
                if (owned) goblin_graph_free(g);
                return true;
            }
        }
    }
    goblin_misbehave mode = goblin__worker_misbehave_draw(w);
    if (mode == GOBLIN_MISBEHAVE_CRASH) {
        drop_shared(w, held, ni);
        goblin__free(held);
        if (owned) goblin_graph_free(g);
        goblin__free(in);
        goblin__free(out);
        goblin__worker_crash(w, t->task_id);
        return false;
    }
    goblin_exec_params ep;
    goblin_exec_params_default(&ep);
    ep.backend = w->p.backend;
    ep.threads = w->p.threads;
    /* An honest worker computes straight into its RESULT message (misbehaving ones,
     * which alter or replace outputs, keep buffers of their own). */
    nng_msg *rmsg = w->mb.mode == GOBLIN_MISBEHAVE_NONE ? result_msg(g, t->task_id, out, no) : NULL;
    /* Which outputs are matmul, convolution or attention values (the heavy nodes a CHECKED
     * task returns): for the misbehaving modes that alter only those, or all but those. */
    uint8_t *product = rmsg ? NULL : goblin__calloc((size_t)no + 1, 1);
    for (int32_t i = 0; product && i < no; i++) {
        goblin_op op = GOBLIN_OP_INPUT;
        product[i] = goblin_graph_node(g, goblin_graph_output_id(g, i), &op, NULL, NULL, NULL) == GOBLIN_OK &&
                     (op == GOBLIN_OP_MATMUL || op == GOBLIN_OP_CONV2D || op == GOBLIN_OP_CONV2D_BACKWARD_INPUT ||
                      op == GOBLIN_OP_CONV2D_BACKWARD_WEIGHT || op == GOBLIN_OP_SDPA || op == GOBLIN_OP_SDPA_BACKWARD);
    }
    e = goblin_graph_eval(g, &ep, in, ni, out, no);
    drop_shared(w, held, ni); /* the caller's memory is not read after this */
    goblin__free(held);
    if (owned) goblin_graph_free(g);
    if (dv) {
        /* Cache the inputs that came with the task only now: an eviction before the
         * evaluation could free a cached input this very task is using. */
        goblin__worker_cache_inputs(w, t, dv, ni, nm, refp);
    }
    goblin__free(in);
    if (e) {
        goblin__free(product);
        if (rmsg) nng_msg_free(rmsg);
        else
            for (int32_t i = 0; i < no; i++) goblin_buffer_free(out[i].data);
        goblin__free(out);
        fail_task(w, t->task_id, e, "task evaluation failed");
        return true;
    }
    if (rmsg) {
        goblin__free(out);
        int rv = goblin__worker_out(w, rmsg);
        if (rv) goblin__worker_log(w, GOBLIN_LOG_WARN, "cannot send result: %s", nng_strerror(rv));
        BUMP(w, tasks_done);
        return true;
    }
    goblin_tensor *send_t = out;
    int32_t n_out = no;
    bool answer = goblin__worker_misbehave_apply(w, mode, t->task_id, out, no, product, &send_t, &n_out);
    goblin__free(product);
    if (!answer) {
        for (int32_t i = 0; i < no; i++) goblin_buffer_free(out[i].data);
        goblin__free(out);
        *answered = false;
        return true;
    }
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_RESULT);
    m.request_id = t->task_id;
    m.body.result.task_id = t->task_id;
    m.body.result.n_outputs = (uint32_t)n_out;
    m.body.result.outputs = send_t;
    int rv = goblin__worker_lsend(w, &m);
    if (rv) goblin__worker_log(w, GOBLIN_LOG_WARN, "cannot send result: %s", nng_strerror(rv));
    if (send_t != out && send_t != w->first.t && send_t != w->prev.t) goblin__free(send_t);
    goblin__worker_misbehave_keep(w, mode, out, no);
    for (int32_t i = 0; i < no; i++) goblin_buffer_free(out[i].data);
    goblin__free(out);
    BUMP(w, tasks_done);
    return true;
}
