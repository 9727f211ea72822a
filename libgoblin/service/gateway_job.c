/* libgoblin/service/gateway_job.c - the jobs a gateway holds for its principals: submits
 * (operands copied from the request, .npy files in the data directories, graphs), each
 * checked against the node-wide and per-principal limits; status, cancel, fetch and
 * release, each only for the job's owner or an admin; and the release of jobs whose
 * owner is gone. Everything a job needs is held here until it is fetched or released,
 * since the node only borrows it. */
#include <stdio.h>
#include <string.h>

#include <mbedtls/sha256.h>
#include <mbedtls/version.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/secret.h"
#include "gateway_impl.h"
#include "io/npy_fd.h"

#define MINUTE_MS 60000

void goblin__gw_job_release(gw_job *j) {
    /* The node borrows the operands: free the job (which cancels it and drops its
     * leases) before the memory it points to. */
    goblin_job_free(j->job);
    goblin__free(j->a_buf);
    goblin__free(j->b_buf);
    goblin__free(j->c_buf);
    goblin_npy_close(j->fa);
    goblin_npy_close(j->fb);
    goblin_npy_close(j->fc);
    goblin__free(j->io);
    goblin__free(j->in_buf);
    goblin__free(j->out_buf);
    memset(j, 0, sizeof *j);
}

/* The job @p id of @p who (any job for an admin); NULL for anyone else's, so that a
 * job of another principal and one that never existed get the same answer. */
static gw_job *find_job(goblin_gateway *g, const gw_who *who, const goblin_job_id *id) {
    for (int32_t i = 0; i < g->p.max_jobs; i++) {
        gw_job *j = &g->jobs[i];
        if (j->used && goblin_job_id_equal(&j->id, id))
            return who->role == GOBLIN_ROLE_ADMIN || strcmp(j->owner, who->id) == 0 ? j : NULL;
    }
    return NULL;
}

static void id_text(const goblin_job_id *id, char *out) { goblin_job_id_format(id, out); }

/* Would @p bytes more put a principal holding @p held over its quota? */
static bool bytes_over(const goblin_gateway *g, uint64_t bytes, uint64_t held, char *why,
                       size_t cap) {
    uint64_t q = g->p.max_bytes_per_principal;
    if (!q || (bytes <= q && held <= q - bytes)) return false;
    snprintf(why, cap, "this job's %llu bytes and the %llu your jobs hold are over the %llu "
             "bytes this node holds for one principal", (unsigned long long)bytes,
             (unsigned long long)held, (unsigned long long)q);
    return true;
}

uint64_t goblin__gw_held_bytes(const goblin_gateway *g, const char *who) {
    uint64_t b = 0;
    for (int32_t i = 0; i < g->p.max_jobs; i++)
        if (g->jobs[i].used && strcmp(g->jobs[i].owner, who) == 0) b += g->jobs[i].bytes;
    return b;
}

/* A free slot for a new job of @p who, or NULL with the refusal sent: the node-wide
 * and per-principal job counts, the principal's bytes (with @p bytes more) and its
 * submits in the current minute. */
static gw_job *admit(goblin_gateway *g, const gw_who *who, uint64_t bytes, goblin__cw_msg *r,
                     uint64_t rid) {
    if (atomic_load(&g->draining)) {
        goblin__gw_reply_error(g, r, rid, GOBLIN_ECLOSED, "the node is shutting down");
        return NULL;
    }
    gw_job *slot = NULL;
    int32_t held = 0;
    uint64_t held_bytes = 0;
    for (int32_t i = 0; i < g->p.max_jobs; i++) {
        gw_job *j = &g->jobs[i];
        if (!j->used) {
            if (!slot) slot = j;
            continue;
        }
        if (strcmp(j->owner, who->id) == 0) {
            held++;
            held_bytes += j->bytes;
        }
    }
    const char *why = NULL;
    goblin_err code = GOBLIN_EBUSY;
    char text[200];
    if (g->p.max_jobs_per_principal && held >= g->p.max_jobs_per_principal) {
        snprintf(text, sizeof text, "you hold %d jobs, the most this node allows one principal: "
                 "fetch or release one first", held);
        why = text;
    } else if (bytes_over(g, bytes, held_bytes, text, sizeof text)) {
        why = text;
        code = GOBLIN_ELIMIT;
    } else if (!slot) {
        snprintf(text, sizeof text, "the node holds %d jobs, its limit: try again later",
                 g->p.max_jobs);
        why = text;
    }
    if (!why && g->p.max_submits_per_minute) {
        int64_t now = goblin__now_ms();
        pthread_mutex_lock(&g->pmu);
        gw_user *u = goblin__gw_user(g, who->id, true);
        if (u) {
            if (now - u->window_ms >= MINUTE_MS) {
                u->window_ms = now;
                u->window_submits = 0;
            }
            if (u->window_submits >= g->p.max_submits_per_minute) {
                snprintf(text, sizeof text, "over %d submits in a minute: wait a little",
                         g->p.max_submits_per_minute);
                why = text;
            } else {
                u->window_submits++;
            }
        }
        pthread_mutex_unlock(&g->pmu);
    }
    if (why) {
        g->stats.quota_refused++;
        goblin__gw_reply_error(g, r, rid, code, "%s", why);
        return NULL;
    }
    memset(slot, 0, sizeof *slot);
    snprintf(slot->owner, sizeof slot->owner, "%s", who->id);
    slot->bytes = bytes;
    return slot;
}

/* 128 random bits that no held job has (ids are never reused: a repeat is a 2^-128
 * event, and drawing again keeps even that from naming a held job). */
static void new_id(goblin_gateway *g, goblin_job_id *out) {
    for (;;) {
        uint64_t a = goblin__secret_u64(), b = goblin__secret_u64();
        for (int i = 0; i < 8; i++) {
            out->bytes[i] = (uint8_t)(a >> (8 * i));
            out->bytes[8 + i] = (uint8_t)(b >> (8 * i));
        }
        bool taken = false;
        for (int32_t i = 0; i < g->p.max_jobs && !taken; i++)
            taken = g->jobs[i].used && goblin_job_id_equal(&g->jobs[i].id, out);
        if (!taken) return;
    }
}

/* A job's result, or GOBLIN_EBUSY while it runs. The status is read first: a job that
 * ends between the two reads is then seen as ended with its real result (reading the
 * result first could return "still running" for a job whose status already says done). */
static goblin_err job_result(gw_job *j, goblin_job_status *st) {
    *st = goblin_job_get_status(j->job);
    if (*st == GOBLIN_JOB_RUNNING) return GOBLIN_EBUSY;
    return goblin_job_wait(j->job, -1); /* ended: returns at once */
}

static void fill_status(gw_job *j, goblin__cw_msg *r) {
    goblin_job_status st;
    goblin_err res = job_result(j, &st);
    int64_t done = 0, total = 0;
    goblin_job_progress(j->job, &done, &total);
    if (done > total) done = total;
    r->type = GOBLIN__CW_JOB_STATUS;
    r->job_id = j->id;
    r->status = (uint8_t)st;
    r->code = st == GOBLIN_JOB_RUNNING ? GOBLIN_OK : (int32_t)res;
    r->done = done < 0 ? 0 : done;
    r->total = total < 0 ? 0 : total;
    snprintf(r->text, sizeof r->text, "%s", st == GOBLIN_JOB_RUNNING ? "" : goblin_job_error(j->job));
}

/* The node took the job in @p j: give it an id and tell the client. */
static void accepted(goblin_gateway *g, gw_job *j, goblin__cw_msg *r, uint64_t rid) {
    new_id(g, &j->id);
    j->used = true;
    g->stats.jobs_submitted++;
    int64_t done = 0, total = 0;
    goblin_job_progress(j->job, &done, &total);
    char id[GOBLIN_JOB_ID_TEXT_SIZE];
    id_text(&j->id, id);
    if (j->is_graph)
        goblin__gw_log(g, GOBLIN_LOG_INFO, "job %s of %s: graph, %d input(s), %d output(s), %lld tasks",
                       id, j->owner, j->n_in, j->n_out, (long long)total);
    else
        goblin__gw_log(g, GOBLIN_LOG_INFO,
                       "job %s of %s: %s C[%lld x %lld] = A[%lld x %lld] . B[%lld x %lld], %lld tasks",
                       id, j->owner, j->is_file ? "file" : "tensor", (long long)j->c.shape[0],
                       (long long)j->c.shape[1], (long long)j->a.shape[0], (long long)j->a.shape[1],
                       (long long)j->b.shape[0], (long long)j->b.shape[1], (long long)total);
    memset(r, 0, sizeof *r);
    r->type = GOBLIN__CW_SUBMITTED;
    r->request_id = rid;
    r->job_id = j->id;
    r->total = total;
    goblin__gw_send(g, r);
}

/* Start the matmul job held in @p j (operands set up) with the gateway's job parameters
 * and the request @p m's (decoded within their bounds; 0: the gateway's); on failure the
 * slot is released. */
static void submit(goblin_gateway *g, gw_job *j, const goblin__cw_msg *m, goblin__cw_msg *r, uint64_t rid) {
    goblin_job_params jp = g->p.job;
    if (m->task_memory_bytes) jp.task_memory_bytes = m->task_memory_bytes;
    if (m->min_tasks) jp.min_tasks = m->min_tasks;
    goblin_err e = goblin_node_submit_matmul(g->node, &j->a, &j->b, &j->c, &jp, &j->job);
    if (e) {
        goblin__gw_job_release(j);
        const char *why = goblin_node_submit_error();
        goblin__gw_reply_error(g, r, rid, e, "the node refused the job: %s", why[0] ? why : goblin_strerror(e));
        goblin__gw_log(g, GOBLIN_LOG_WARN, "job refused by the node: %s", why[0] ? why : goblin_strerror(e));
        return;
    }
    accepted(g, j, r, rid);
}

/* Operands must be 2-D and of one float dtype; checked here so that a file job
 * never creates its output for a product that cannot run. */
static goblin_err check_operands(const goblin_tensor *a, const goblin_tensor *b, char *why,
                                 size_t cap) {
    if (a->rank != 2 || b->rank != 2) {
        snprintf(why, cap, "matmul operands must be 2-D (got rank %d and %d)", a->rank, b->rank);
        return GOBLIN_ESHAPE;
    }
    if (a->dtype != b->dtype || (a->dtype != GOBLIN_DTYPE_F32 && a->dtype != GOBLIN_DTYPE_F64)) {
        snprintf(why, cap, "matmul operands must be both f32 or both f64");
        return GOBLIN_EDTYPE;
    }
    if (a->shape[1] != b->shape[0]) {
        snprintf(why, cap, "inner dimensions differ: A is %lld x %lld, B is %lld x %lld",
                 (long long)a->shape[0], (long long)a->shape[1], (long long)b->shape[0],
                 (long long)b->shape[1]);
        return GOBLIN_ESHAPE;
    }
    return GOBLIN_OK;
}

void goblin__gw_submit_matmul(goblin_gateway *g, const gw_who *who, goblin__cw_msg *m,
                              goblin__cw_msg *r) {
    uint64_t rid = m->request_id;
    char why[256];
    goblin_err e = check_operands(&m->tensors[0], &m->tensors[1], why, sizeof why);
    if (e) return goblin__gw_reply_error(g, r, rid, e, "%s", why);
    size_t es = goblin_dtype_size(m->tensors[0].dtype);
    int64_t mm = m->tensors[0].shape[0], nn = m->tensors[1].shape[1], cn;
    size_t cbytes;
    /* The result must come back in one reply: bound it like a request. */
    if (!goblin__mul_i64(mm, nn, &cn) || !goblin__mul_size((size_t)cn, es, &cbytes) ||
        cbytes > g->p.recv_max_bytes)
        return goblin__gw_reply_error(g, r, rid, GOBLIN_ELIMIT,
                                      "result of %lld x %lld is over the limit", (long long)mm,
                                      (long long)nn);
    size_t ab = (size_t)goblin_tensor_numel(&m->tensors[0]) * es;
    size_t bb = (size_t)goblin_tensor_numel(&m->tensors[1]) * es;
    /* A request that came in parts was reassembled into a buffer of its own: the job
     * keeps it and computes on the operands where they lie in it (decoded tensors point
     * into it, 8-byte aligned), instead of a copy of each. */
    uint8_t *whole = g->adopt_buf;
    bool adopt = whole && ab && bb && (const uint8_t *)m->tensors[0].data >= whole &&
                 (const uint8_t *)m->tensors[1].data + bb <= whole + g->adopt_len;
    uint64_t held = adopt ? (uint64_t)g->adopt_len : (uint64_t)ab + bb;
    gw_job *j = admit(g, who, held + cbytes, r, rid);
    if (!j) return;
    if (adopt) {
        j->a_buf = whole;
        g->adopt_buf = NULL;
    } else {
        j->a_buf = ab ? goblin__alloc(ab) : NULL;
        j->b_buf = bb ? goblin__alloc(bb) : NULL;
    }
    j->c_buf = cbytes ? goblin__alloc(cbytes) : NULL;
    if ((ab && !j->a_buf) || (bb && !adopt && !j->b_buf) || (cbytes && !j->c_buf)) {
        goblin__gw_job_release(j);
        return goblin__gw_reply_error(g, r, rid, GOBLIN_ENOMEM, "out of memory for the operands");
    }
    void *da = adopt ? m->tensors[0].data : j->a_buf, *db = adopt ? m->tensors[1].data : j->b_buf;
    if (!adopt && ab) memcpy(j->a_buf, m->tensors[0].data, ab);
    if (!adopt && bb) memcpy(j->b_buf, m->tensors[1].data, bb);
    goblin_tensor_init(&j->a, m->tensors[0].dtype, 2, m->tensors[0].shape, da);
    goblin_tensor_init(&j->b, m->tensors[1].dtype, 2, m->tensors[1].shape, db);
    int64_t cs[2] = {mm, nn};
    goblin_tensor_init(&j->c, m->tensors[0].dtype, 2, cs, j->c_buf);
    submit(g, j, m, r, rid);
}

/* A file job's operand @p what at @p path, mapped read-only. */
static goblin_err open_operand(goblin_gateway *g, const char *what, const char *path,
                               goblin_npy **out, char *why, size_t cap) {
    int fd;
    goblin_err e = goblin__data_dir_open(&g->data, what, path, &fd, why, cap);
    if (e) return e;
    goblin_errbuf eb;
    e = goblin__npy_open_fd(fd, path, false, out, &eb);
    if (e) snprintf(why, cap, "%s: %s", what, eb.message);
    return e;
}

void goblin__gw_submit_files(goblin_gateway *g, const gw_who *who, goblin__cw_msg *m,
                             goblin__cw_msg *r) {
    uint64_t rid = m->request_id;
    if (!g->data.n)
        return goblin__gw_reply_error(g, r, rid, GOBLIN_ENOTSUP,
                                      "this node takes no file jobs (it lists no data directory)");
    gw_job *j = admit(g, who, 0, r, rid);
    if (!j) return;
    char why[600];
    goblin_err e;
    j->is_file = true;
    if ((e = open_operand(g, "A", m->paths[0], &j->fa, why, sizeof why)) ||
        (e = open_operand(g, "B", m->paths[1], &j->fb, why, sizeof why))) {
        goblin__gw_job_release(j);
        goblin__gw_log(g, GOBLIN_LOG_WARN, "file job of %s refused: %s", who->id, why);
        return goblin__gw_reply_error(g, r, rid, e, "%s", why);
    }
    j->a = *goblin_npy_tensor(j->fa);
    j->b = *goblin_npy_tensor(j->fb);
    if ((e = check_operands(&j->a, &j->b, why, sizeof why))) {
        goblin__gw_job_release(j);
        return goblin__gw_reply_error(g, r, rid, e, "%s", why);
    }
    int64_t cs[2] = {j->a.shape[0], j->b.shape[1]};
    int fd;
    e = goblin__data_dir_create(&g->data, "C", m->paths[2],
                                (m->file_flags & GOBLIN__CW_FILE_OVERWRITE) != 0, &fd, why, sizeof why);
    if (!e) {
        goblin_errbuf eb;
        if ((e = goblin__npy_create_fd(fd, m->paths[2], j->a.dtype, 2, cs, &j->fc, &eb)))
            snprintf(why, sizeof why, "C: %s", eb.message);
    }
    if (e) {
        goblin__gw_job_release(j);
        goblin__gw_log(g, GOBLIN_LOG_WARN, "file job of %s refused: %s", who->id, why);
        return goblin__gw_reply_error(g, r, rid, e, "%s", why);
    }
    j->c = *goblin_npy_tensor(j->fc);
    submit(g, j, m, r, rid);
}

/* ---- graph jobs ---------------------------------------------------------------- */

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

/* A cache id for a broadcast input's content: the first 8 bytes of SHA-256 over its
 * dtype, shape and data (never 0). Workers keep cached inputs across jobs and
 * clients, so an id must always mean the same bytes; a client's own ids cannot be
 * trusted for that (one client could plant bytes under an id another one uses), so
 * a non-zero id from a client only asks for caching, and the gateway names the
 * content itself. */
static goblin_err content_id(const goblin_tensor *t, uint64_t *out) {
    uint8_t head[8 + 8 * GOBLIN_MAX_RANK] = {0}, dg[32];
    head[0] = (uint8_t)t->dtype;
    head[1] = (uint8_t)t->rank;
    for (int32_t i = 0; i < t->rank; i++)
        for (int b = 0; b < 8; b++) head[8 + 8 * i + b] = (uint8_t)((uint64_t)t->shape[i] >> (8 * b));
    size_t bytes = (size_t)goblin_tensor_numel(t) * goblin_dtype_size(t->dtype);
    mbedtls_sha256_context c;
    int rc;
    mbedtls_sha256_init(&c);
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    rc = mbedtls_sha256_starts(&c, 0);
    if (rc == 0) rc = mbedtls_sha256_update(&c, head, sizeof head);
    if (rc == 0 && bytes) rc = mbedtls_sha256_update(&c, t->data, bytes);
    if (rc == 0) rc = mbedtls_sha256_finish(&c, dg);
#else
    rc = mbedtls_sha256_starts_ret(&c, 0);
    if (rc == 0) rc = mbedtls_sha256_update_ret(&c, head, sizeof head);
    if (rc == 0 && bytes) rc = mbedtls_sha256_update_ret(&c, t->data, bytes);
    if (rc == 0) rc = mbedtls_sha256_finish_ret(&c, dg);
#endif
    mbedtls_sha256_free(&c);
    if (rc) return GOBLIN_EIO;
    uint64_t v = 0;
    for (int b = 0; b < 8; b++) v |= (uint64_t)dg[b] << (8 * b);
    *out = v ? v : 1;
    return GOBLIN_OK;
}

/* Sizes of a graph job's tensors in one block, each 64-byte aligned; GOBLIN_ELIMIT if
 * they overflow or exceed @p cap. */
static goblin_err block_size(const goblin_tensor *ts, int32_t n, uint64_t cap, size_t *out) {
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t b;
        if (!goblin__mul_size((size_t)goblin_tensor_numel(&ts[i]), goblin_dtype_size(ts[i].dtype), &b) ||
            round64(b) < b || total + round64(b) < total)
            return GOBLIN_ELIMIT;
        total += round64(b);
    }
    if (total > cap) return GOBLIN_ELIMIT;
    *out = total;
    return GOBLIN_OK;
}

/* Per-request arrays for goblin_graph_job_params (borrowed by the node during submit). */
typedef struct graph_arrays {
    goblin_split split[GOBLIN__CW_MAX_IO];
    goblin_combine combine[GOBLIN__CW_MAX_IO];
    uint64_t cache_ids[GOBLIN__CW_MAX_IO];
} graph_arrays;

static goblin_err setup_graph_job(goblin_gateway *g, gw_job *j, const goblin__cw_msg *m,
                                  const goblin_graph *graph, char *why, size_t cap) {
    int32_t ni = goblin_graph_input_count(graph), no = goblin_graph_output_count(graph);
    if ((uint32_t)ni != m->n_io || (uint32_t)no != m->n_outputs) {
        snprintf(why, cap, "the request has %u input(s) and %u output(s), the graph %d and %d",
                 m->n_io, m->n_outputs, ni, no);
        return GOBLIN_EINVAL;
    }
    j->is_graph = true;
    j->n_in = ni;
    j->n_out = no;
    j->io = goblin__calloc((size_t)ni + (size_t)no + 1, sizeof *j->io);
    if (!j->io) {
        snprintf(why, cap, "out of memory");
        return GOBLIN_ENOMEM;
    }
    goblin_tensor *outs = j->io + ni;
    for (int32_t i = 0; i < no; i++) {
        goblin_err e = goblin_graph_node(graph, goblin_graph_output_id(graph, i), NULL, &outs[i],
                                         NULL, NULL);
        if (e) {
            snprintf(why, cap, "output %d: %s", i, goblin_strerror(e));
            return e;
        }
    }
    /* The outputs must come back in one reply: bound them like a request. */
    size_t in_bytes, out_bytes;
    if (block_size(outs, no, g->p.recv_max_bytes, &out_bytes)) {
        snprintf(why, cap, "the graph's outputs are over the %llu-byte reply limit",
                 (unsigned long long)g->p.recv_max_bytes);
        return GOBLIN_ELIMIT;
    }
    if (block_size(m->io, ni, UINT64_MAX, &in_bytes)) {
        snprintf(why, cap, "inputs too large");
        return GOBLIN_ELIMIT;
    }
    if (bytes_over(g, (uint64_t)in_bytes + out_bytes, goblin__gw_held_bytes(g, j->owner), why, cap)) {
        g->stats.quota_refused++;
        return GOBLIN_ELIMIT;
    }
    j->bytes = (uint64_t)in_bytes + out_bytes;
    j->in_buf = in_bytes ? goblin__alloc(in_bytes) : NULL;
    j->out_buf = out_bytes ? goblin__alloc(out_bytes) : NULL;
    if ((in_bytes && !j->in_buf) || (out_bytes && !j->out_buf)) {
        snprintf(why, cap, "out of memory for the job's %zu input and %zu output bytes", in_bytes,
                 out_bytes);
        return GOBLIN_ENOMEM;
    }
    size_t o = 0;
    for (int32_t i = 0; i < ni; i++) {
        const goblin_tensor *t = &m->io[i];
        size_t b = (size_t)goblin_tensor_numel(t) * goblin_dtype_size(t->dtype);
        void *d = b ? (uint8_t *)j->in_buf + o : NULL;
        if (b) memcpy(d, t->data, b);
        goblin_tensor_init(&j->io[i], t->dtype, t->rank, t->shape, d);
        o += round64(b);
    }
    o = 0;
    for (int32_t i = 0; i < no; i++) {
        size_t b = (size_t)goblin_tensor_numel(&outs[i]) * goblin_dtype_size(outs[i].dtype);
        outs[i].data = b ? (uint8_t *)j->out_buf + o : NULL;
        o += round64(b);
    }
    return GOBLIN_OK;
}

void goblin__gw_submit_graph(goblin_gateway *g, const gw_who *who, goblin__cw_msg *m,
                             goblin__cw_msg *r) {
    uint64_t rid = m->request_id;
    gw_job *j = admit(g, who, 0, r, rid); /* its bytes are checked once the graph is read */
    if (!j) return;
    char why[600];
    goblin_graph *graph = NULL;
    goblin_errbuf eb;
    goblin_err e = goblin_graph_deserialize(m->graph, (size_t)m->graph_len, NULL, &graph, &eb);
    if (e) {
        goblin__gw_job_release(j);
        goblin__gw_log(g, GOBLIN_LOG_WARN, "graph job refused: %s", eb.message);
        return goblin__gw_reply_error(g, r, rid, e, "graph: %s", eb.message);
    }
    graph_arrays *arr = NULL;
    if ((e = setup_graph_job(g, j, m, graph, why, sizeof why)) ||
        (!(arr = goblin__calloc(1, sizeof *arr)) && (e = GOBLIN_ENOMEM))) {
        if (e == GOBLIN_ENOMEM) snprintf(why, sizeof why, "out of memory");
        goblin_graph_free(graph);
        goblin__gw_job_release(j);
        goblin__gw_log(g, GOBLIN_LOG_WARN, "graph job refused: %s", why);
        return goblin__gw_reply_error(g, r, rid, e, "%s", why);
    }
    goblin_graph_job_params jp;
    goblin_graph_job_params_default(&jp);
    jp.job = g->p.job;
    if (m->task_memory_bytes) jp.job.task_memory_bytes = m->task_memory_bytes;
    if (m->min_tasks) jp.job.min_tasks = m->min_tasks;
    jp.chunk_rows = m->chunk_rows;
    jp.spot_rows = m->spot_rows;
    jp.verify = (goblin_verify)m->verify;
    jp.min_replication = m->min_replication;
    jp.trust_halflife = m->trust_halflife;
    for (uint32_t i = 0; m->split && i < m->n_io; i++) arr->split[i] = (goblin_split)m->split[i];
    for (uint32_t i = 0; m->combine && i < m->n_outputs; i++)
        arr->combine[i] = (goblin_combine)m->combine[i];
    jp.split = m->split ? arr->split : NULL;
    jp.combine = m->combine ? arr->combine : NULL;
    if (m->cache_ids) {
        for (uint32_t i = 0; i < m->n_io && !e; i++)
            if (m->cache_ids[i]) e = content_id(&j->io[i], &arr->cache_ids[i]);
        jp.cache_ids = arr->cache_ids;
    }
    if (!e)
        e = goblin_node_submit_graph(g->node, graph, j->io, j->n_in, j->io + j->n_in, j->n_out, &jp,
                                     &j->job);
    goblin_graph_free(graph); /* the node keeps its own copy */
    goblin__free(arr);
    if (e) {
        goblin__gw_job_release(j);
        const char *why = goblin_node_submit_error();
        goblin__gw_log(g, GOBLIN_LOG_WARN, "graph job refused by the node: %s", why[0] ? why : goblin_strerror(e));
        return goblin__gw_reply_error(g, r, rid, e, "the node refused the graph job: %s",
                                      why[0] ? why : goblin_strerror(e));
    }
    accepted(g, j, r, rid);
}

static void handle_fetch(goblin_gateway *g, goblin__cw_msg *m, goblin__cw_msg *r, gw_job *j) {
    goblin_job_status st;
    goblin_err res = job_result(j, &st);
    if (res == GOBLIN_EBUSY)
        return goblin__gw_reply_error(g, r, m->request_id, GOBLIN_EBUSY, "the job is still running");
    j->end_reported = true;
    if (res != GOBLIN_OK) {
        char text[GOBLIN__CW_MAX_TEXT + 1];
        snprintf(text, sizeof text, "%s", goblin_job_error(j->job));
        goblin__gw_job_release(j);
        return goblin__gw_reply_error(g, r, m->request_id, res, "%s", text[0] ? text : goblin_strerror(res));
    }
    if (j->fc && goblin_npy_sync(j->fc) != GOBLIN_OK) {
        goblin__gw_job_release(j);
        return goblin__gw_reply_error(g, r, m->request_id, GOBLIN_EIO, "cannot write the output file");
    }
    memset(r, 0, sizeof *r);
    r->request_id = m->request_id;
    r->job_id = j->id;
    if (j->is_graph) {
        r->type = GOBLIN__CW_OUTPUTS;
        r->n_io = (uint32_t)j->n_out;
        r->io = j->io + j->n_in;
    } else {
        r->type = GOBLIN__CW_RESULT;
        r->has_tensor = !j->is_file;
        if (!j->is_file) r->tensors[0] = j->c;
    }
    goblin__gw_send(g, r);
    goblin__gw_job_release(j);
}

void goblin__gw_stats(goblin_gateway *g, goblin__cw_msg *m, goblin__cw_msg *r) {
    memset(r, 0, sizeof *r);
    r->type = GOBLIN__CW_STATS_REPLY;
    r->request_id = m->request_id;
    goblin_node_stats_get(g->node, &r->stats);
    int64_t nw = r->stats.workers_seen;
    if (nw < 0) nw = 0;
    if (nw > GOBLIN__CW_MAX_WORKERS) nw = GOBLIN__CW_MAX_WORKERS;
    goblin_node_worker_stats *ws = nw ? goblin__calloc((size_t)nw, sizeof *ws) : NULL;
    if (nw && !ws) return goblin__gw_reply_error(g, r, m->request_id, GOBLIN_ENOMEM, "out of memory");
    int64_t k = 0;
    for (int64_t i = 0; i < nw; i++)
        if (goblin_node_worker_stats_get(g->node, i, &ws[k]) == GOBLIN_OK) k++;
    r->workers = ws;
    r->n_workers = (uint32_t)k;
    goblin__gw_send(g, r);
    goblin__free(ws);
}

void goblin__gw_job_request(goblin_gateway *g, const gw_who *who, goblin__cw_msg *m,
                            goblin__cw_msg *r) {
    gw_job *j = find_job(g, who, &m->job_id);
    if (!j) {
        char id[GOBLIN_JOB_ID_TEXT_SIZE];
        id_text(&m->job_id, id);
        return goblin__gw_reply_error(g, r, m->request_id, GOBLIN_ENOTFOUND,
                                      "no job %s of yours on this node (a fetched or released job "
                                      "is gone, and so is every job of a node that restarted)", id);
    }
    if (m->type == GOBLIN__CW_FETCH) return handle_fetch(g, m, r, j);
    if (m->type == GOBLIN__CW_RELEASE) {
        goblin__gw_job_release(j);
        memset(r, 0, sizeof *r);
        r->type = GOBLIN__CW_OK;
        r->request_id = m->request_id;
        r->job_id = m->job_id;
        goblin__gw_send(g, r);
        return;
    }
    if (m->type == GOBLIN__CW_CANCEL) {
        char id[GOBLIN_JOB_ID_TEXT_SIZE];
        id_text(&j->id, id);
        goblin__gw_log(g, GOBLIN_LOG_INFO, "job %s of %s canceled by %s", id, j->owner, who->id);
        goblin_job_cancel(j->job);
    }
    memset(r, 0, sizeof *r);
    r->request_id = m->request_id;
    fill_status(j, r);
    goblin__gw_send(g, r);
}

void goblin__gw_expire(goblin_gateway *g, int64_t now_ms) {
    if (!g->p.expire_ms) return;
    for (int32_t i = 0; i < g->p.max_jobs; i++) {
        gw_job *j = &g->jobs[i];
        if (!j->used) continue;
        pthread_mutex_lock(&g->pmu);
        gw_user *u = goblin__gw_user(g, j->owner, false);
        bool gone = !u || (u->conns == 0 && now_ms - u->gone_since_ms >= (int64_t)g->p.expire_ms);
        pthread_mutex_unlock(&g->pmu);
        if (!gone) continue;
        char id[GOBLIN_JOB_ID_TEXT_SIZE];
        id_text(&j->id, id);
        goblin__gw_log(g, GOBLIN_LOG_INFO, "job %s of %s released unfetched: its owner has had no "
                       "connection for %u ms", id, j->owner, g->p.expire_ms);
        goblin__gw_job_release(j);
        g->stats.jobs_expired++;
    }
}
