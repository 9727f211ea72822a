/* libgoblin/service/gateway.c - the node-side service for clients (goblin/gateway.h).
 *
 * One rep0 socket on the gateway's own URLs and one thread: requests are small
 * (submit, poll, cancel, fetch, stats) except uploads and downloads of operands,
 * which are bounded by recv_max_bytes. Each request is decoded as hostile bytes
 * (client_wire.c); a request that does not decode is logged, counted and its
 * connection closed, and nothing else is affected. Everything a job needs is held
 * here (copied operands, or memory-mapped .npy files) until the client fetches or
 * releases it, since the node only borrows them. */
#include <goblin/gateway.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <mbedtls/sha256.h>
#include <mbedtls/version.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "proto/client_wire.h"
#include "goblin/npy.h"
#include "goblin/tls.h"
#include "net/tls_impl.h"
#include "net/transport.h"

typedef struct gw_job {
    uint64_t id; /* 0: free slot */
    goblin_job *job;
    bool is_file;
    bool end_reported;
    void *a_buf, *b_buf, *c_buf;
    goblin_tensor a, b, c;
    goblin_npy *fa, *fb, *fc;
    /* a graph job: its inputs (copied from the request) and outputs (allocated with
     * the graph's output shapes), each set in one block */
    bool is_graph;
    int32_t n_in, n_out;
    goblin_tensor *io;  /* n_in inputs then n_out outputs */
    void *in_buf, *out_buf;
} gw_job;

typedef struct gw_pipe {
    uint32_t id;
    bool authed;
    bool told; /* draining: sent a reply, not yet known to have arrived */
} gw_pipe;

struct goblin_gateway {
    goblin_gateway_params p;
    char *listen[GOBLIN_GATEWAY_MAX_LISTEN];
    char *cert, *key;
    goblin_node *node;
    nng_socket sock;
    bool sock_open, started;
    pthread_t thread;
    atomic_bool stop;
    atomic_bool draining;
    int64_t drain_deadline_ms;
    pthread_mutex_t mu;
    gw_job *jobs;
    uint64_t next_id;
    goblin_gateway_stats stats;
    /* client tokens */
    char *token_file;
    uint8_t token[GOBLIN__CW_MAX_TOKEN];
    uint32_t token_len;
    /* Connections the gateway remembers, by nng pipe id: authenticated ones, and while
     * draining those that were sent a reply and have neither spoken again nor closed
     * (their reply may still be in flight). Forgotten when the pipe is removed. Own
     * lock (pmu), never held while calling into nng. */
    pthread_mutex_t pmu;
    gw_pipe *pipes;
    int32_t n_pipes, cap_pipes;
};

static void glog(goblin_gateway *g, goblin_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void glog(goblin_gateway *g, goblin_log_level lvl, const char *fmt, ...) {
    if (!g->p.log || lvl > g->p.log_level) return;
    char line[700];
    int k = snprintf(line, sizeof line, "gateway: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + k, sizeof line - (size_t)k, fmt, ap);
    va_end(ap);
    g->p.log(g->p.log_user, lvl, line);
}

void goblin_gateway_params_default(goblin_gateway_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->allow_files = true;
    p->recv_max_bytes = (uint64_t)8 << 30;
    p->max_jobs = 64;
    goblin_job_params_default(&p->job);
    p->log_level = GOBLIN_LOG_INFO;
}

static void job_release(gw_job *j) {
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

goblin_err goblin_gateway_new(goblin_gateway **out, goblin_node *node,
                              const goblin_gateway_params *p) {
    if (!out || !node || !p || p->n_listen < 1 || p->n_listen > GOBLIN_GATEWAY_MAX_LISTEN ||
        p->max_jobs < 1 || p->max_jobs > 65536 || p->recv_max_bytes < GOBLIN__CW_HEADER_SIZE ||
        p->log_level < 0 || p->log_level >= GOBLIN_LOG_LEVEL_COUNT)
        return GOBLIN_EINVAL;
    for (int32_t i = 0; i < p->n_listen; i++)
        if (!p->listen[i]) return GOBLIN_EINVAL;
    if (p->token_len > GOBLIN__CW_MAX_TOKEN || (p->token_len && !p->token) ||
        (p->token_file && !p->token_file[0]))
        return GOBLIN_EINVAL;
    goblin_gateway *g = goblin__calloc(1, sizeof *g);
    if (!g) return GOBLIN_ENOMEM;
    g->p = *p;
    g->node = node;
    g->next_id = 1;
    bool ok = true;
    for (int32_t i = 0; i < p->n_listen; i++) {
        g->listen[i] = goblin__strdup(p->listen[i]);
        g->p.listen[i] = g->listen[i];
        ok = ok && g->listen[i];
    }
    if (p->cert_file) ok = ok && (g->cert = goblin__strdup(p->cert_file));
    if (p->key_file) ok = ok && (g->key = goblin__strdup(p->key_file));
    if (p->token_file) ok = ok && (g->token_file = goblin__strdup(p->token_file));
    g->p.token_file = g->token_file;
    g->p.token = NULL; /* copied into g->token */
    if (p->token_len) memcpy(g->token, p->token, p->token_len);
    g->token_len = p->token_len;
    g->jobs = goblin__calloc((size_t)p->max_jobs, sizeof *g->jobs);
    ok = ok && g->jobs;
    bool mu_ok = ok && pthread_mutex_init(&g->mu, NULL) == 0;
    if (mu_ok && pthread_mutex_init(&g->pmu, NULL) != 0) {
        pthread_mutex_destroy(&g->mu);
        mu_ok = false;
    }
    if (!mu_ok) {
        for (int32_t i = 0; i < GOBLIN_GATEWAY_MAX_LISTEN; i++) goblin__free(g->listen[i]);
        goblin__free(g->token_file);
        goblin__free(g->cert);
        goblin__free(g->key);
        goblin__free(g->jobs);
        goblin__free(g);
        return GOBLIN_ENOMEM;
    }
    atomic_init(&g->stop, false);
    atomic_init(&g->draining, false);
    *out = g;
    return GOBLIN_OK;
}

/* ---- connections: authentication and replies in flight ------------------------ */

/* The entry for pipe @p id (pmu held), created if @p add; NULL if absent or no memory. */
static gw_pipe *pipe_entry(goblin_gateway *g, uint32_t id, bool add) {
    for (int32_t i = 0; i < g->n_pipes; i++)
        if (g->pipes[i].id == id) return &g->pipes[i];
    if (!add) return NULL;
    if (g->n_pipes == g->cap_pipes) {
        int32_t cap = g->cap_pipes ? 2 * g->cap_pipes : 16;
        gw_pipe *np = goblin__alloc((size_t)cap * sizeof *np);
        if (!np) return NULL;
        if (g->n_pipes) memcpy(np, g->pipes, (size_t)g->n_pipes * sizeof *np);
        goblin__free(g->pipes);
        g->pipes = np;
        g->cap_pipes = cap;
    }
    gw_pipe *e = &g->pipes[g->n_pipes++];
    memset(e, 0, sizeof *e);
    e->id = id;
    return e;
}

static void on_pipe_removed(nng_pipe p, nng_pipe_ev ev, void *arg) {
    (void)ev;
    goblin_gateway *g = arg;
    uint32_t id = nng_pipe_id(p);
    pthread_mutex_lock(&g->pmu);
    for (int32_t i = 0; i < g->n_pipes; i++)
        if (g->pipes[i].id == id) {
            g->pipes[i] = g->pipes[--g->n_pipes];
            break;
        }
    pthread_mutex_unlock(&g->pmu);
}

static bool auth_required(const goblin_gateway *g) { return g->token_len || g->token_file; }

static bool pipe_authed(goblin_gateway *g, uint32_t id) {
    pthread_mutex_lock(&g->pmu);
    gw_pipe *e = pipe_entry(g, id, false);
    bool ok = e && e->authed;
    pthread_mutex_unlock(&g->pmu);
    return ok;
}

/* A request from pipe @p id arrived (so the replies it was sent arrived); @p replied:
 * it is being answered now while draining. @p auth: 1 the pipe authenticated, -1 it
 * presented a token that was refused (it is no longer authenticated), 0 neither. */
static void pipe_note(goblin_gateway *g, uint32_t id, bool replied, int auth) {
    pthread_mutex_lock(&g->pmu);
    gw_pipe *e = pipe_entry(g, id, replied || auth > 0);
    if (e) {
        e->told = replied;
        if (auth) e->authed = auth > 0;
    }
    pthread_mutex_unlock(&g->pmu);
}

/* While draining: is a reply possibly still on its way to a client that is connected? */
static bool replies_in_flight(goblin_gateway *g) {
    pthread_mutex_lock(&g->pmu);
    bool any = false;
    for (int32_t i = 0; i < g->n_pipes; i++) any = any || g->pipes[i].told;
    pthread_mutex_unlock(&g->pmu);
    return any;
}

/* Is @p tok (@p len bytes) the gateway's token or one of its token file's? Constant
 * time in the token's content (goblin_token_check_file is too). */
static bool token_ok(goblin_gateway *g, const uint8_t *tok, uint32_t len) {
    bool ok = false;
    if (g->token_len) {
        uint8_t diff = (uint8_t)(len != g->token_len);
        for (uint32_t i = 0; i < g->token_len; i++)
            diff |= (uint8_t)(g->token[i] ^ (i < len ? tok[i] : 0));
        ok = diff == 0;
    }
    if (!ok && g->token_file && len > 0 && len <= GOBLIN_TOKEN_MAX_BYTES && !memchr(tok, 0, len)) {
        char presented[GOBLIN_TOKEN_MAX_BYTES + 1];
        memcpy(presented, tok, len);
        presented[len] = 0;
        char why[256] = "";
        goblin_err e = goblin__token_check_file(g->token_file, presented, why, sizeof why);
        memset(presented, 0, sizeof presented);
        if (e == GOBLIN_OK) ok = true;
        else if (e != GOBLIN_EAUTH)
            glog(g, GOBLIN_LOG_ERROR, "client token file %s: %s (%s)", g->token_file,
                 goblin_err_name(e), why);
    }
    return ok;
}

/* ---- replies ---------------------------------------------------------------- */

static int send_msg(goblin_gateway *g, const goblin__cw_msg *m) {
    size_t sz;
    goblin_err e = goblin__cw_encoded_size(m, &sz);
    if (e) {
        glog(g, GOBLIN_LOG_ERROR, "cannot encode a %s reply: %s", goblin__cw_type_name(m->type),
             goblin_strerror(e));
        return -1;
    }
    nng_msg *msg;
    if (nng_msg_alloc(&msg, sz) != 0) {
        glog(g, GOBLIN_LOG_ERROR, "out of memory for a %zu-byte reply", sz);
        return -1;
    }
    size_t len;
    goblin__cw_encode_into(m, nng_msg_body(msg), sz, &len);
    int rv = nng_sendmsg(g->sock, msg, 0);
    if (rv) {
        nng_msg_free(msg);
        glog(g, GOBLIN_LOG_WARN, "reply not sent: %s", nng_strerror(rv));
    }
    return rv;
}

static void reply_error(goblin_gateway *g, goblin__cw_msg *r, uint64_t rid, goblin_err code,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void reply_error(goblin_gateway *g, goblin__cw_msg *r, uint64_t rid, goblin_err code,
                        const char *fmt, ...) {
    memset(r, 0, sizeof *r);
    r->type = GOBLIN__CW_ERROR;
    r->request_id = rid;
    r->code = (int32_t)code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->text, sizeof r->text, fmt, ap);
    va_end(ap);
    send_msg(g, r);
}

static gw_job *find_job(goblin_gateway *g, uint64_t id) {
    if (id == 0) return NULL;
    for (int32_t i = 0; i < g->p.max_jobs; i++)
        if (g->jobs[i].id == id) return &g->jobs[i];
    return NULL;
}

static gw_job *free_slot(goblin_gateway *g) {
    for (int32_t i = 0; i < g->p.max_jobs; i++)
        if (g->jobs[i].id == 0) return &g->jobs[i];
    return NULL;
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
    j->id = g->next_id++;
    g->stats.jobs_submitted++;
    int64_t done = 0, total = 0;
    goblin_job_progress(j->job, &done, &total);
    if (j->is_graph)
        glog(g, GOBLIN_LOG_INFO, "job %llu: graph, %d input(s), %d output(s), %lld tasks",
             (unsigned long long)j->id, j->n_in, j->n_out, (long long)total);
    else
        glog(g, GOBLIN_LOG_INFO,
             "job %llu: %s C[%lld x %lld] = A[%lld x %lld] . B[%lld x %lld], %lld tasks",
             (unsigned long long)j->id, j->is_file ? "file" : "tensor", (long long)j->c.shape[0],
             (long long)j->c.shape[1], (long long)j->a.shape[0], (long long)j->a.shape[1],
             (long long)j->b.shape[0], (long long)j->b.shape[1], (long long)total);
    memset(r, 0, sizeof *r);
    r->type = GOBLIN__CW_SUBMITTED;
    r->request_id = rid;
    r->job_id = j->id;
    r->total = total;
    send_msg(g, r);
}

/* Start the matmul job held in @p j (operands set up); on failure the slot is released. */
static void submit(goblin_gateway *g, gw_job *j, goblin__cw_msg *r, uint64_t rid) {
    goblin_err e = goblin_node_submit_matmul(g->node, &j->a, &j->b, &j->c, &g->p.job, &j->job);
    if (e) {
        job_release(j);
        reply_error(g, r, rid, e, "the node refused the job: %s", goblin_strerror(e));
        glog(g, GOBLIN_LOG_WARN, "job refused by the node: %s", goblin_strerror(e));
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

static void handle_submit(goblin_gateway *g, goblin__cw_msg *m, goblin__cw_msg *r) {
    uint64_t rid = m->request_id;
    char why[256];
    goblin_err e = check_operands(&m->tensors[0], &m->tensors[1], why, sizeof why);
    if (e) return reply_error(g, r, rid, e, "%s", why);
    if (atomic_load(&g->draining))
        return reply_error(g, r, rid, GOBLIN_ECLOSED, "the node is shutting down");
    gw_job *j = free_slot(g);
    if (!j) return reply_error(g, r, rid, GOBLIN_EBUSY, "%d jobs held: fetch or release one first",
                               g->p.max_jobs);
    size_t es = goblin_dtype_size(m->tensors[0].dtype);
    int64_t mm = m->tensors[0].shape[0], nn = m->tensors[1].shape[1], cn;
    size_t cbytes;
    /* The result must come back in one reply: bound it like a request. */
    if (!goblin__mul_i64(mm, nn, &cn) || !goblin__mul_size((size_t)cn, es, &cbytes) ||
        cbytes > g->p.recv_max_bytes)
        return reply_error(g, r, rid, GOBLIN_ELIMIT, "result of %lld x %lld is over the limit",
                           (long long)mm, (long long)nn);
    size_t ab = (size_t)goblin_tensor_numel(&m->tensors[0]) * es;
    size_t bb = (size_t)goblin_tensor_numel(&m->tensors[1]) * es;
    j->a_buf = ab ? goblin__alloc(ab) : NULL;
    j->b_buf = bb ? goblin__alloc(bb) : NULL;
    j->c_buf = cbytes ? goblin__alloc(cbytes) : NULL;
    if ((ab && !j->a_buf) || (bb && !j->b_buf) || (cbytes && !j->c_buf)) {
        job_release(j);
        return reply_error(g, r, rid, GOBLIN_ENOMEM, "out of memory for the operands");
    }
    if (ab) memcpy(j->a_buf, m->tensors[0].data, ab);
    if (bb) memcpy(j->b_buf, m->tensors[1].data, bb);
    goblin_tensor_init(&j->a, m->tensors[0].dtype, 2, m->tensors[0].shape, j->a_buf);
    goblin_tensor_init(&j->b, m->tensors[1].dtype, 2, m->tensors[1].shape, j->b_buf);
    int64_t cs[2] = {mm, nn};
    goblin_tensor_init(&j->c, m->tensors[0].dtype, 2, cs, j->c_buf);
    submit(g, j, r, rid);
}

static void handle_submit_files(goblin_gateway *g, goblin__cw_msg *m, goblin__cw_msg *r) {
    uint64_t rid = m->request_id;
    if (!g->p.allow_files)
        return reply_error(g, r, rid, GOBLIN_ENOTSUP, "this node does not take file jobs");
    if (atomic_load(&g->draining))
        return reply_error(g, r, rid, GOBLIN_ECLOSED, "the node is shutting down");
    gw_job *j = free_slot(g);
    if (!j) return reply_error(g, r, rid, GOBLIN_EBUSY, "%d jobs held: fetch or release one first",
                               g->p.max_jobs);
    char why[600];
    goblin_errbuf eb;
    goblin_err e;
    j->is_file = true;
    if ((e = goblin_npy_open(m->paths[0], false, &j->fa, &eb)) ||
        (e = goblin_npy_open(m->paths[1], false, &j->fb, &eb))) {
        job_release(j);
        glog(g, GOBLIN_LOG_WARN, "file job refused: %s", eb.message);
        return reply_error(g, r, rid, e, "%s", eb.message);
    }
    j->a = *goblin_npy_tensor(j->fa);
    j->b = *goblin_npy_tensor(j->fb);
    if ((e = check_operands(&j->a, &j->b, why, sizeof why))) {
        job_release(j);
        return reply_error(g, r, rid, e, "%s", why);
    }
    int64_t cs[2] = {j->a.shape[0], j->b.shape[1]};
    if ((e = goblin_npy_create(m->paths[2], j->a.dtype, 2, cs, &j->fc, &eb))) {
        job_release(j);
        glog(g, GOBLIN_LOG_WARN, "file job refused: %s", eb.message);
        return reply_error(g, r, rid, e, "%s", eb.message);
    }
    j->c = *goblin_npy_tensor(j->fc);
    submit(g, j, r, rid);
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

static void handle_submit_graph(goblin_gateway *g, goblin__cw_msg *m, goblin__cw_msg *r) {
    uint64_t rid = m->request_id;
    if (atomic_load(&g->draining))
        return reply_error(g, r, rid, GOBLIN_ECLOSED, "the node is shutting down");
    gw_job *j = free_slot(g);
    if (!j) return reply_error(g, r, rid, GOBLIN_EBUSY, "%d jobs held: fetch or release one first",
                               g->p.max_jobs);
    char why[600];
    goblin_graph *graph = NULL;
    goblin_errbuf eb;
    goblin_err e = goblin_graph_deserialize(m->graph, (size_t)m->graph_len, NULL, &graph, &eb);
    if (e) {
        glog(g, GOBLIN_LOG_WARN, "graph job refused: %s", eb.message);
        return reply_error(g, r, rid, e, "graph: %s", eb.message);
    }
    graph_arrays *arr = NULL;
    if ((e = setup_graph_job(g, j, m, graph, why, sizeof why)) ||
        (!(arr = goblin__calloc(1, sizeof *arr)) && (e = GOBLIN_ENOMEM))) {
        if (e == GOBLIN_ENOMEM) snprintf(why, sizeof why, "out of memory");
        goblin_graph_free(graph);
        job_release(j);
        glog(g, GOBLIN_LOG_WARN, "graph job refused: %s", why);
        return reply_error(g, r, rid, e, "%s", why);
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
        job_release(j);
        glog(g, GOBLIN_LOG_WARN, "graph job refused by the node: %s", goblin_strerror(e));
        return reply_error(g, r, rid, e, "the node refused the graph job: %s (the node's log says "
                           "why)", goblin_strerror(e));
    }
    accepted(g, j, r, rid);
}

static void handle_fetch(goblin_gateway *g, goblin__cw_msg *m, goblin__cw_msg *r, gw_job *j) {
    goblin_job_status st;
    goblin_err res = job_result(j, &st);
    if (res == GOBLIN_EBUSY)
        return reply_error(g, r, m->request_id, GOBLIN_EBUSY, "job %llu is still running",
                           (unsigned long long)j->id);
    j->end_reported = true;
    if (res != GOBLIN_OK) {
        char text[GOBLIN__CW_MAX_TEXT + 1];
        snprintf(text, sizeof text, "%s", goblin_job_error(j->job));
        job_release(j);
        return reply_error(g, r, m->request_id, res, "%s", text[0] ? text : goblin_strerror(res));
    }
    if (j->fc && goblin_npy_sync(j->fc) != GOBLIN_OK) {
        job_release(j);
        return reply_error(g, r, m->request_id, GOBLIN_EIO, "cannot write the output file");
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
    send_msg(g, r);
    job_release(j);
}

static void handle_stats(goblin_gateway *g, goblin__cw_msg *m, goblin__cw_msg *r) {
    memset(r, 0, sizeof *r);
    r->type = GOBLIN__CW_STATS_REPLY;
    r->request_id = m->request_id;
    goblin_node_stats_get(g->node, &r->stats);
    int64_t nw = r->stats.workers_seen;
    if (nw < 0) nw = 0;
    if (nw > GOBLIN__CW_MAX_WORKERS) nw = GOBLIN__CW_MAX_WORKERS;
    goblin_node_worker_stats *ws = nw ? goblin__calloc((size_t)nw, sizeof *ws) : NULL;
    if (nw && !ws) return reply_error(g, r, m->request_id, GOBLIN_ENOMEM, "out of memory");
    int64_t k = 0;
    for (int64_t i = 0; i < nw; i++)
        if (goblin_node_worker_stats_get(g->node, i, &ws[k]) == GOBLIN_OK) k++;
    r->workers = ws;
    r->n_workers = (uint32_t)k;
    send_msg(g, r);
    goblin__free(ws);
}

static void handle(goblin_gateway *g, nng_msg *in) {
    goblin__cw_msg *m = goblin__calloc(2, sizeof *m); /* request and reply: large structs */
    if (!m) {
        glog(g, GOBLIN_LOG_ERROR, "out of memory for a request");
        goblin__transport_pipe_close(nng_msg_get_pipe(in));
        return;
    }
    goblin__cw_msg *r = m + 1;
    goblin__cw_limits lim = {g->p.recv_max_bytes, GOBLIN_MAX_NUMEL};
    char why[256];
    goblin_err e = goblin__cw_decode(nng_msg_body(in), nng_msg_len(in), &lim, m, why, sizeof why);
    pthread_mutex_lock(&g->mu);
    g->stats.requests++;
    if (e) {
        g->stats.refused++;
        pthread_mutex_unlock(&g->mu);
        glog(g, GOBLIN_LOG_WARN, "malformed request of %zu bytes refused (%s): %s; closing that "
             "connection", nng_msg_len(in), goblin_err_name(e), why);
        /* A peer that sends what we cannot parse gets no answer: its connection ends. */
        goblin__transport_pipe_close(nng_msg_get_pipe(in));
        goblin__free(m);
        return;
    }
    glog(g, GOBLIN_LOG_DEBUG, "%s request %llu", goblin__cw_type_name(m->type),
         (unsigned long long)m->request_id);
    uint32_t pid = nng_pipe_id(nng_msg_get_pipe(in));
    bool authed = false;
    if (m->type == GOBLIN__CW_AUTH) {
        if (!auth_required(g) || token_ok(g, m->token, m->token_len)) {
            authed = true;
            memset(r, 0, sizeof *r);
            r->type = GOBLIN__CW_OK;
            r->request_id = m->request_id;
            send_msg(g, r);
        } else {
            glog(g, GOBLIN_LOG_WARN, "client token refused (connection %u)", (unsigned)pid);
            reply_error(g, r, m->request_id, GOBLIN_EAUTH, "the node refused the client token");
        }
        memset(m->token, 0, sizeof m->token);
        pipe_note(g, pid, atomic_load(&g->draining), authed ? 1 : -1);
        pthread_mutex_unlock(&g->mu);
        goblin__free(m);
        return;
    }
    if (m->type < GOBLIN__CW_SUBMITTED && auth_required(g) && !pipe_authed(g, pid)) {
        reply_error(g, r, m->request_id, GOBLIN_EAUTH, "this node requires a client token");
        pipe_note(g, pid, atomic_load(&g->draining), 0);
        pthread_mutex_unlock(&g->mu);
        goblin__cw_msg_clear(m);
        goblin__free(m);
        return;
    }
    bool closing = false;
    gw_job *j;
    switch (m->type) {
    case GOBLIN__CW_SUBMIT_MATMUL: handle_submit(g, m, r); break;
    case GOBLIN__CW_SUBMIT_MATMUL_FILES: handle_submit_files(g, m, r); break;
    case GOBLIN__CW_SUBMIT_GRAPH: handle_submit_graph(g, m, r); break;
    case GOBLIN__CW_STATS: handle_stats(g, m, r); break;
    case GOBLIN__CW_STATUS:
    case GOBLIN__CW_CANCEL:
    case GOBLIN__CW_FETCH:
    case GOBLIN__CW_RELEASE: {
        j = find_job(g, m->job_id);
        if (!j) {
            reply_error(g, r, m->request_id, GOBLIN_ENOTFOUND, "no job %llu on this node",
                        (unsigned long long)m->job_id);
            break;
        }
        if (m->type == GOBLIN__CW_FETCH) {
            handle_fetch(g, m, r, j);
            break;
        }
        if (m->type == GOBLIN__CW_RELEASE) {
            job_release(j);
            memset(r, 0, sizeof *r);
            r->type = GOBLIN__CW_OK;
            r->request_id = m->request_id;
            r->job_id = m->job_id;
            send_msg(g, r);
            break;
        }
        if (m->type == GOBLIN__CW_CANCEL) {
            glog(g, GOBLIN_LOG_INFO, "job %llu canceled by its client", (unsigned long long)j->id);
            goblin_job_cancel(j->job);
        }
        memset(r, 0, sizeof *r);
        r->request_id = m->request_id;
        fill_status(j, r);
        send_msg(g, r);
        break;
    }
    default:
        /* A reply type sent as a request. */
        g->stats.refused++;
        glog(g, GOBLIN_LOG_WARN, "unexpected %s message from a client; closing that connection",
             goblin__cw_type_name(m->type));
        goblin__transport_pipe_close(nng_msg_get_pipe(in));
        closing = true;
        break;
    }
    if (!closing) pipe_note(g, pid, atomic_load(&g->draining), 0);
    pthread_mutex_unlock(&g->mu);
    goblin__cw_msg_clear(m);
    goblin__free(m);
}

static bool drained(goblin_gateway *g) {
    pthread_mutex_lock(&g->mu);
    /* A job's end counts as told once its client fetched it (which releases it). */
    bool all = true;
    for (int32_t i = 0; i < g->p.max_jobs; i++)
        if (g->jobs[i].id && !g->jobs[i].end_reported) all = false;
    pthread_mutex_unlock(&g->mu);
    return all;
}

static void *serve(void *arg) {
    goblin_gateway *g = arg;
    int rfd = -1; /* poll()ed: no nng timer per receive (see node_main) */
    for (;;) {
        if (atomic_load(&g->stop)) break;
        /* Draining ends once every job's end was reported and those replies arrived
         * (their clients spoke again or closed the connection: closing the socket
         * while a reply is still queued would lose it), or at the deadline. */
        if (atomic_load(&g->draining) &&
            (goblin__now_ms() >= g->drain_deadline_ms || (drained(g) && !replies_in_flight(g))))
            break;
        nng_msg *in;
        int rv = goblin__transport_recv(g->sock, &rfd, &in, 100);
        goblin__transport_close_dropped();
        if (rv == NNG_ETIMEDOUT) continue;
        if (rv == NNG_ECLOSED) break;
        if (rv) {
            glog(g, GOBLIN_LOG_WARN, "receive failed: %s", nng_strerror(rv));
            continue;
        }
        handle(g, in);
        nng_msg_free(in);
    }
    return NULL;
}

goblin_err goblin_gateway_start(goblin_gateway *g) {
    if (!g) return GOBLIN_EINVAL;
    if (g->started) return GOBLIN_ESTATE;
    int rv = nng_rep0_open(&g->sock);
    if (rv) {
        glog(g, GOBLIN_LOG_ERROR, "cannot open socket: %s", nng_strerror(rv));
        return GOBLIN_EIO;
    }
    g->sock_open = true;
    nng_pipe_notify(g->sock, NNG_PIPE_EV_REM_POST, on_pipe_removed, g);
    nng_socket_set_size(g->sock, NNG_OPT_RECVMAXSZ, (size_t)g->p.recv_max_bytes);
    nng_socket_set_ms(g->sock, NNG_OPT_RECVTIMEO, 100);
    for (int32_t i = 0; i < g->p.n_listen; i++) {
        const char *url = g->listen[i];
        nng_listener l;
        char why[512] = "";
        goblin_err e = GOBLIN_OK;
        if ((rv = nng_listener_create(&l, g->sock, url)) != 0) {
            snprintf(why, sizeof why, "%s", nng_strerror(rv));
            e = goblin__tls_nng_err(rv);
        } else if (strncmp(url, "tls+", 4) == 0) {
            if (!g->cert || !g->key) {
                snprintf(why, sizeof why, "a tls+tcp:// address needs a certificate and key");
                e = GOBLIN_EINVAL;
            } else {
                e = goblin__tls_listener_setup(l, g->cert, g->key, why, sizeof why);
            }
        }
        if (!e && (rv = nng_listener_start(l, 0)) != 0) {
            snprintf(why, sizeof why, "%s", nng_strerror(rv));
            e = rv == NNG_EADDRINUSE ? GOBLIN_EBUSY : GOBLIN_EIO;
        }
        if (e) {
            glog(g, GOBLIN_LOG_ERROR, "cannot listen for clients on %s: %s", url, why);
            nng_close(g->sock);
            g->sock_open = false;
            return e == GOBLIN_EINVAL ? GOBLIN_EINVAL : GOBLIN_EIO;
        }
        glog(g, GOBLIN_LOG_INFO, "listening for clients on %s", url);
    }
    if (pthread_create(&g->thread, NULL, serve, g) != 0) {
        nng_close(g->sock);
        g->sock_open = false;
        return GOBLIN_ENOMEM;
    }
    g->started = true;
    return GOBLIN_OK;
}

void goblin_gateway_stop(goblin_gateway *g, uint32_t drain_ms) {
    if (!g || !g->started) return;
    pthread_mutex_lock(&g->mu);
    int held = 0;
    for (int32_t i = 0; i < g->p.max_jobs; i++) {
        if (!g->jobs[i].id) continue;
        held++;
        if (goblin_job_get_status(g->jobs[i].job) == GOBLIN_JOB_RUNNING)
            goblin_job_cancel(g->jobs[i].job);
    }
    g->drain_deadline_ms = goblin__now_ms() + drain_ms;
    pthread_mutex_unlock(&g->mu);
    if (held) glog(g, GOBLIN_LOG_INFO, "stopping: %d job(s) ended; telling their clients", held);
    atomic_store(&g->draining, true);
    if (drain_ms == 0) atomic_store(&g->stop, true);
    pthread_join(g->thread, NULL);
    g->started = false;
    if (g->sock_open) {
        nng_close(g->sock);
        g->sock_open = false;
    }
}

void goblin_gateway_free(goblin_gateway *g) {
    if (!g) return;
    goblin_gateway_stop(g, 0);
    if (g->sock_open) nng_close(g->sock);
    for (int32_t i = 0; i < g->p.max_jobs; i++)
        if (g->jobs[i].id) job_release(&g->jobs[i]);
    for (int32_t i = 0; i < GOBLIN_GATEWAY_MAX_LISTEN; i++) goblin__free(g->listen[i]);
    goblin__free(g->cert);
    goblin__free(g->key);
    goblin__free(g->jobs);
    goblin__free(g->token_file);
    goblin__free(g->pipes);
    memset(g->token, 0, sizeof g->token);
    pthread_mutex_destroy(&g->mu);
    pthread_mutex_destroy(&g->pmu);
    goblin__free(g);
}

void goblin_gateway_stats_get(goblin_gateway *g, goblin_gateway_stats *out) {
    if (!g || !out) return;
    pthread_mutex_lock(&g->mu);
    *out = g->stats;
    int64_t held = 0;
    for (int32_t i = 0; i < g->p.max_jobs; i++) held += g->jobs[i].id != 0;
    out->jobs_held = held;
    pthread_mutex_unlock(&g->mu);
}
