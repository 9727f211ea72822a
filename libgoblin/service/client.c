/* libgoblin/service/client.c - the client side of the gateway protocol (goblin/client.h). */
#include <goblin/client.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/errf.h"
#include "client_impl.h"
#include "core/node.h"
#include "proto/client_wire.h"
#include "net/tls_impl.h"
#include "net/transport.h"


void goblin_client_params_default(goblin_client_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->timeout_ms = 120000;
    p->connect_timeout_ms = 10000;
    p->poll_ms = 100;
    p->heartbeat_ms = 5000;
    p->recv_max_bytes = (uint64_t)16 << 30;
}

const char *goblin_client_error(const goblin_client *c) { return c ? c->err : "NULL client"; }

goblin_err goblin_client_connect(goblin_client **out, const char *url,
                                 const goblin_client_params *p, goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, err_msg, err_cap);
    goblin_client_params dp;
    if (!p) {
        goblin_client_params_default(&dp);
        p = &dp;
    }
    if (err_msg && err_cap) err_msg[0] = 0;
#define FAIL(e, ...) \
    do { if (err_msg && err_cap) snprintf(err_msg, err_cap, __VA_ARGS__); return (e); } while (0)
    if (!out || !url) FAIL(GOBLIN_EINVAL, "NULL argument");
    bool tls = strncmp(url, "tls+", 4) == 0;
    if (tls && !!p->ca_file == !!p->fingerprint)
        FAIL(GOBLIN_EINVAL, "%s needs exactly one of a CA file and a fingerprint", url);
    if (p->credential && (!p->credential[0] || strlen(p->credential) > GOBLIN__CW_MAX_TOKEN))
        FAIL(GOBLIN_EINVAL, "a credential must have 1 to %d characters", GOBLIN__CW_MAX_TOKEN);
    goblin_client *c = goblin__calloc(1, sizeof *c);
    if (!c) FAIL(GOBLIN_ENOMEM, "out of memory");
    c->p = *p;
    c->p.ca_file = c->p.fingerprint = c->p.server_name = NULL; /* used during connect only */
    if (p->credential) snprintf(c->credential, sizeof c->credential, "%s", p->credential);
    c->p.credential = p->credential ? c->credential : NULL;
    snprintf(c->url, sizeof c->url, "%s", url);
    c->next_rid = 1;
    if (pthread_mutex_init(&c->wmu, NULL) != 0) {
        goblin__free(c);
        FAIL(GOBLIN_ENOMEM, "cannot create a mutex");
    }
    pthread_condattr_t ca;
    bool cv_ok = pthread_condattr_init(&ca) == 0;
    cv_ok = cv_ok && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0;
    cv_ok = cv_ok && pthread_cond_init(&c->wcv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!cv_ok) {
        pthread_mutex_destroy(&c->wmu);
        goblin__free(c);
        FAIL(GOBLIN_ENOMEM, "cannot create a condition variable");
    }
    /* pair1, as workers speak it: a node serves both on one address (gateway.h). */
    char why[512] = "";
    /* nng takes a limit below 4 GiB, or none (0): above it, replies are checked against
     * recv_max_bytes once received. */
    uint64_t rmax = p->recv_max_bytes < UINT32_MAX ? p->recv_max_bytes : 0;
    goblin_err e = goblin__transport_open_worker(&c->sock, rmax, why, sizeof why);
    if (e) {
        pthread_cond_destroy(&c->wcv);
        pthread_mutex_destroy(&c->wmu);
        goblin__free(c);
        FAIL(e, "%s", why);
    }
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        nng_close(c->sock);
        pthread_cond_destroy(&c->wcv);
        pthread_mutex_destroy(&c->wmu);
        goblin__free(c);
        FAIL(GOBLIN_ENOMEM, "cannot create a mutex");
    }
    nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, goblin__client_on_pipe_removed, c);
    nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, (nng_duration)p->timeout_ms);
    /* A send waits only for a connection to hand the request to, so it is bounded like
     * connecting: a node that is gone fails fast. */
    nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO,
                      (nng_duration)(p->connect_timeout_ms ? p->connect_timeout_ms : p->timeout_ms));
    nng_dialer d;
    int rv;
    if ((rv = nng_dialer_create(&d, c->sock, url)) != 0) {
        e = goblin__client_nng_err(rv);
        snprintf(why, sizeof why, "cannot dial %s: %s", url, nng_strerror(rv));
    } else if (tls) {
        goblin__tls_client_opts o = {p->ca_file, p->fingerprint, p->server_name,
                                     (int)p->connect_timeout_ms};
        e = goblin__tls_dialer_setup(d, url, &o, why, sizeof why);
    }
    if (!e) {
        nng_dialer_set_ms(d, NNG_OPT_RECONNMINT, 100);
        nng_dialer_set_ms(d, NNG_OPT_RECONNMAXT, 2000);
        e = goblin__client_dial_bounded(c, d, url, p->connect_timeout_ms, why, sizeof why);
    }
    /* The first answer proves a gateway is there (a node without one, or with one on
     * other addresses, answers at once with an ERROR saying where clients connect): a
     * URL where something accepts the connection but never answers (another protocol,
     * which nng redials forever) fails within connect_timeout_ms too. */
    if (!e) {
        e = c->p.credential ? goblin__client_send_auth(c, p->connect_timeout_ms) : goblin__client_probe(c, p->connect_timeout_ms);
        if (e == GOBLIN_EAUTH && c->node_eauth)
            snprintf(why, sizeof why, "%.300s", c->err);
        else if (e == GOBLIN_ETIMEDOUT)
            snprintf(why, sizeof why, "no GPU Goblin node answered at %s within %u ms "
                     "(connect_timeout_ms): is the address right, and is a node running there?",
                     url, p->connect_timeout_ms);
        else if (e)
            snprintf(why, sizeof why, "%.400s", c->err);
    }
    if (e) {
        nng_close(c->sock);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->wcv);
        pthread_mutex_destroy(&c->wmu);
        memset(c->credential, 0, sizeof c->credential);
        goblin__free(c);
        FAIL(e, "%s", why);
    }
#undef FAIL
    if (p->heartbeat_ms) {
        goblin__client_open_heartbeat(c, url, p, tls);
        goblin__client_auth_heartbeat(c);
    }
    c->err[0] = 0;
    *out = c;
    return GOBLIN_OK;
}

void goblin_client_free(goblin_client *c) {
    if (!c) return;
    nng_close(c->sock);
    goblin__client_close_heartbeat(c);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->wcv);
    pthread_mutex_destroy(&c->wmu);
    memset(c->credential, 0, sizeof c->credential);
    goblin__free(c);
}
/* Runs @p fn with a zeroed request and reply pair under the client's lock. */
typedef struct pair {
    goblin__cw_msg req, rep;
} pair;

static pair *pair_new(goblin_client *c) {
    pair *p = goblin__calloc(1, sizeof *p);
    if (!p) cerr(c, GOBLIN_ENOMEM, "out of memory");
    return p;
}

static goblin_err expect(goblin_client *c, const goblin__cw_msg *rep, uint8_t type) {
    if (rep->type != type)
        return cerr(c, GOBLIN_EPROTO, "node answered %s where %s was expected",
                    goblin__cw_type_name(rep->type), goblin__cw_type_name(type));
    return GOBLIN_OK;
}

static goblin_err submit_common(goblin_client *c, pair *p, goblin_job_id *job_id) {
    nng_msg *keep = NULL;
    goblin_err e = goblin__client_roundtrip(c, &p->req, &p->rep, &keep);
    if (!e && !(e = expect(c, &p->rep, GOBLIN__CW_SUBMITTED))) {
        *job_id = p->rep.job_id;
        c->err[0] = 0;
    }
    goblin__cw_msg_clear(&p->rep);
    if (keep) nng_msg_free(keep);
    return e;
}

/* The job parameters that travel (0: the gateway's setting), checked as the gateway's
 * decoder checks them, with a message for the caller. */
static goblin_err job_fields(goblin_client *c, const goblin_job_params *jp, int64_t *min_tasks,
                             uint64_t *task_memory) {
    *min_tasks = jp ? jp->min_tasks : 0;
    *task_memory = jp ? jp->task_memory_bytes : 0;
    if (*min_tasks < 0 || *min_tasks > GOBLIN__CW_MAX_MIN_TASKS)
        return cerr(c, GOBLIN_EINVAL, "min_tasks %lld outside 0..%lld (0: the node's default)",
                    (long long)*min_tasks, (long long)GOBLIN__CW_MAX_MIN_TASKS);
    if (*task_memory && (*task_memory < GOBLIN__CW_MIN_TASK_MEMORY || *task_memory > GOBLIN__CW_MAX_TASK_MEMORY))
        return cerr(c, GOBLIN_EINVAL, "task_memory_bytes %llu outside %llu..%llu (0: the node's default)",
                    (unsigned long long)*task_memory, (unsigned long long)GOBLIN__CW_MIN_TASK_MEMORY,
                    (unsigned long long)GOBLIN__CW_MAX_TASK_MEMORY);
    return GOBLIN_OK;
}

goblin_err goblin_client_submit_matmul(goblin_client *c, const goblin_tensor *a,
                                       const goblin_tensor *b, goblin_job_id *job_id) {
    return goblin_client_submit_matmul_params(c, a, b, NULL, job_id);
}

goblin_err goblin_client_submit_matmul_params(goblin_client *c, const goblin_tensor *a,
                                              const goblin_tensor *b, const goblin_job_params *jp,
                                              goblin_job_id *job_id) {
    if (!c || !a || !b || !job_id) return GOBLIN_EINVAL;
    int64_t mt;
    uint64_t tm;
    goblin_err e = job_fields(c, jp, &mt, &tm);
    if (e) return e;
    pthread_mutex_lock(&c->mu);
    pair *p = pair_new(c);
    e = GOBLIN_ENOMEM;
    if (p) {
        p->req.type = GOBLIN__CW_SUBMIT_MATMUL;
        p->req.tensors[0] = *a;
        p->req.tensors[1] = *b;
        p->req.min_tasks = mt;
        p->req.task_memory_bytes = tm;
        e = submit_common(c, p, job_id);
    }
    goblin__free(p);
    pthread_mutex_unlock(&c->mu);
    return e;
}

goblin_err goblin_client_submit_matmul_files(goblin_client *c, const char *a_path,
                                             const char *b_path, const char *c_path,
                                             bool overwrite, goblin_job_id *job_id) {
    return goblin_client_submit_matmul_files_params(c, a_path, b_path, c_path, overwrite, NULL, job_id);
}

goblin_err goblin_client_submit_matmul_files_params(goblin_client *c, const char *a_path,
                                                    const char *b_path, const char *c_path,
                                                    bool overwrite, const goblin_job_params *jp,
                                                    goblin_job_id *job_id) {
    if (!c || !a_path || !b_path || !c_path || !job_id) return GOBLIN_EINVAL;
    int64_t mt;
    uint64_t tm;
    goblin_err fe = job_fields(c, jp, &mt, &tm);
    if (fe) return fe;
    const char *paths[3] = {a_path, b_path, c_path};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(paths[i]);
        if (l == 0 || l > GOBLIN__CW_MAX_PATH) return cerr(c, GOBLIN_EINVAL, "path %d empty or too long", i);
    }
    pthread_mutex_lock(&c->mu);
    pair *p = pair_new(c);
    goblin_err e = GOBLIN_ENOMEM;
    if (p) {
        p->req.type = GOBLIN__CW_SUBMIT_MATMUL_FILES;
        for (int i = 0; i < 3; i++) snprintf(p->req.paths[i], sizeof p->req.paths[i], "%s", paths[i]);
        p->req.file_flags = overwrite ? GOBLIN__CW_FILE_OVERWRITE : 0;
        p->req.min_tasks = mt;
        p->req.task_memory_bytes = tm;
        e = submit_common(c, p, job_id);
    }
    goblin__free(p);
    pthread_mutex_unlock(&c->mu);
    return e;
}

static goblin_err job_request(goblin_client *c, uint8_t type, const goblin_job_id *job_id,
                              goblin_client_job_info *info) {
    pthread_mutex_lock(&c->mu);
    pair *p = pair_new(c);
    goblin_err e = GOBLIN_ENOMEM;
    if (p) {
        p->req.type = type;
        p->req.job_id = *job_id;
        nng_msg *keep = NULL;
        e = goblin__client_roundtrip(c, &p->req, &p->rep, &keep);
        if (!e && !(e = expect(c, &p->rep, GOBLIN__CW_JOB_STATUS))) {
            if (info) {
                info->status = (goblin_job_status)p->rep.status;
                info->error = (goblin_err)p->rep.code;
                info->done = p->rep.done;
                info->total = p->rep.total;
                snprintf(info->message, sizeof info->message, "%s", p->rep.text);
            }
            c->err[0] = 0;
        }
        goblin__cw_msg_clear(&p->rep);
        if (keep) nng_msg_free(keep);
    }
    goblin__free(p);
    pthread_mutex_unlock(&c->mu);
    return e;
}

goblin_err goblin_client_job_status(goblin_client *c, const goblin_job_id *job_id,
                                    goblin_client_job_info *out) {
    if (!c || !out || !job_id) return GOBLIN_EINVAL;
    return job_request(c, GOBLIN__CW_STATUS, job_id, out);
}

goblin_err goblin_client_cancel(goblin_client *c, const goblin_job_id *job_id) {
    if (!c || !job_id) return GOBLIN_EINVAL;
    return job_request(c, GOBLIN__CW_CANCEL, job_id, NULL);
}

/* A copy of a decoded tensor (which points into the reply) in a new buffer. */
static goblin_err copy_out(goblin_client *c, const goblin_tensor *t, goblin_tensor *out) {
    size_t bytes = (size_t)goblin_tensor_numel(t) * goblin_dtype_size(t->dtype);
    void *data = bytes ? goblin__alloc(bytes) : NULL;
    if (bytes && !data) return cerr(c, GOBLIN_ENOMEM, "out of memory for a %zu-byte result", bytes);
    if (bytes) memcpy(data, t->data, bytes);
    goblin_tensor_init(out, t->dtype, t->rank, t->shape, data);
    return GOBLIN_OK;
}

/* FETCH @p job_id: a matmul job answers RESULT (at most one tensor), a graph job
 * OUTPUTS. @p outs (NULL: only release the job) receives the reply's tensors in new
 * buffers: exactly @p n_outs of them, or with @p any_count at most that many (a file
 * job's RESULT has none, and leaves @p outs untouched). */
static goblin_err fetch(goblin_client *c, const goblin_job_id *job_id, goblin_tensor *outs, int32_t n_outs,
                        bool any_count, goblin_tensor *into) {
    pthread_mutex_lock(&c->mu);
    pair *p = pair_new(c);
    goblin_err e = GOBLIN_ENOMEM;
    if (p) {
        p->req.type = GOBLIN__CW_FETCH;
        p->req.job_id = *job_id;
        nng_msg *keep = NULL;
        e = goblin__client_roundtrip(c, &p->req, &p->rep, &keep);
        const goblin_tensor *ts = NULL;
        uint32_t nt = 0;
        if (!e) {
            if (p->rep.type == GOBLIN__CW_RESULT) {
                ts = p->rep.tensors;
                nt = p->rep.has_tensor ? 1 : 0;
            } else if (!(e = expect(c, &p->rep, GOBLIN__CW_OUTPUTS))) {
                ts = p->rep.io;
                nt = p->rep.n_io;
            }
        }
        if (!e && into) {
            /* Straight into the caller's tensor (one copy, from the reply's bytes); a
             * reply of another dtype or shape than asked for (a hostile or broken node)
             * is refused, the caller's tensor untouched. */
            const goblin_tensor *t = nt == 1 ? &ts[0] : NULL;
            bool ok = t && t->dtype == into->dtype && t->rank == into->rank;
            for (int32_t d = 0; ok && d < into->rank; d++) ok = t->shape[d] == into->shape[d];
            if (!ok)
                e = cerr(c, GOBLIN_EPROTO, "the node returned %s where a %s result of %d dims was "
                         "expected (job released)", nt ? "a result of another dtype or shape" : "no result",
                         goblin_dtype_name(into->dtype), (int)into->rank);
            else if (goblin_tensor_numel(t) > 0 && (!t->data || !into->data))
                e = cerr(c, GOBLIN_EPROTO, "the node returned an empty result buffer (job released)");
            else if (goblin_tensor_numel(t) > 0)
                goblin__tensor_copy(into, t);
        } else if (!e && outs) {
            if (any_count ? nt > (uint32_t)n_outs : nt != (uint32_t)n_outs) {
                e = cerr(c, GOBLIN_EINVAL, "the job has %u output(s), %d expected (job released)",
                         nt, n_outs);
            } else {
                int32_t k = 0;
                for (; k < n_outs && k < (int32_t)nt && !e; k++) e = copy_out(c, &ts[k], &outs[k]);
                if (e)
                    for (int32_t i = 0; i < k - 1; i++) {
                        goblin__free(outs[i].data);
                        outs[i].data = NULL;
                    }
            }
        }
        if (!e) c->err[0] = 0;
        goblin__cw_msg_clear(&p->rep);
        if (keep) nng_msg_free(keep);
    }
    goblin__free(p);
    pthread_mutex_unlock(&c->mu);
    return e;
}

goblin_err goblin_client_fetch_result(goblin_client *c, const goblin_job_id *job_id,
                                     goblin_tensor *out) {
    if (!c || !job_id) return GOBLIN_EINVAL;
    /* A file job has no tensor: *out untouched. A graph job with one output is fine. */
    return fetch(c, job_id, out, out ? 1 : 0, true, NULL);
}

goblin_err goblin__client_fetch_result_into(goblin_client *c, const goblin_job_id *job_id,
                                          goblin_tensor *dst) {
    if (!c || !job_id || !dst || dst->rank < 0 || dst->rank > GOBLIN_MAX_RANK ||
        (goblin_tensor_numel(dst) > 0 && !dst->data))
        return GOBLIN_EINVAL;
    return fetch(c, job_id, NULL, 0, true, dst);
}

goblin_err goblin_client_fetch_outputs(goblin_client *c, const goblin_job_id *job_id,
                                       goblin_tensor *outputs, int32_t n_outputs) {
    if (!c || !job_id || n_outputs < 0 || n_outputs > GOBLIN__CW_MAX_IO || (n_outputs && !outputs))
        return GOBLIN_EINVAL;
    return fetch(c, job_id, outputs, n_outputs, false, NULL);
}

static void sleep_ms(uint32_t ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Poll job @p id until it ends, then fetch its @p n_outs outputs into @p outs (a
 * matmul job: at most one, and a file job none). */
static goblin_err follow_n(goblin_client *c, const goblin_job_id *id, goblin_tensor *outs, int32_t n_outs,
                           bool any_count, goblin_client_progress_fn progress, void *user) {
    goblin_client_job_info info;
    for (;;) {
        goblin_err e = goblin_client_job_status(c, id, &info);
        if (e) return e;
        if (progress && !progress(user, info.done, info.total)) {
            goblin_client_cancel(c, id);
            fetch(c, id, NULL, 0, true, NULL); /* releases the job on the node */
            return cerr(c, GOBLIN_ECANCELED, "canceled by the progress callback");
        }
        if (info.status != GOBLIN_JOB_RUNNING) break;
        sleep_ms(c->p.poll_ms ? c->p.poll_ms : 100);
    }
    return fetch(c, id, outs, n_outs, any_count, NULL);
}

static goblin_err follow(goblin_client *c, const goblin_job_id *id, goblin_tensor *out,
                         goblin_client_progress_fn progress, void *user) {
    return follow_n(c, id, out, out ? 1 : 0, true, progress, user);
}

goblin_err goblin_client_matmul(goblin_client *c, const goblin_tensor *a, const goblin_tensor *b,
                                goblin_tensor *out, goblin_client_progress_fn progress, void *user) {
    goblin_job_id id;
    goblin_err e = goblin_client_submit_matmul(c, a, b, &id);
    return e ? e : follow(c, &id, out, progress, user);
}

goblin_err goblin_client_matmul_files(goblin_client *c, const char *a_path, const char *b_path,
                                      const char *c_path, bool overwrite,
                                      goblin_client_progress_fn progress, void *user) {
    goblin_job_id id;
    goblin_err e = goblin_client_submit_matmul_files(c, a_path, b_path, c_path, overwrite, &id);
    return e ? e : follow(c, &id, NULL, progress, user);
}

goblin_err goblin_client_stats(goblin_client *c, goblin_node_stats *out,
                               goblin_node_worker_stats *workers, int64_t cap, int64_t *n_workers) {
    if (!c || !out || cap < 0 || (cap > 0 && !workers)) return GOBLIN_EINVAL;
    pthread_mutex_lock(&c->mu);
    pair *p = pair_new(c);
    goblin_err e = GOBLIN_ENOMEM;
    if (p) {
        p->req.type = GOBLIN__CW_STATS;
        nng_msg *keep = NULL;
        e = goblin__client_roundtrip(c, &p->req, &p->rep, &keep);
        if (!e && !(e = expect(c, &p->rep, GOBLIN__CW_STATS_REPLY))) {
            *out = p->rep.stats;
            for (int64_t i = 0; i < cap && i < (int64_t)p->rep.n_workers; i++)
                workers[i] = p->rep.workers[i];
            if (n_workers) *n_workers = p->rep.n_workers;
            c->err[0] = 0;
        }
        goblin__cw_msg_clear(&p->rep);
        if (keep) nng_msg_free(keep);
    }
    goblin__free(p);
    pthread_mutex_unlock(&c->mu);
    return e;
}

/* ---- graph jobs ------------------------------------------------------------- */

goblin_err goblin_client_submit_graph(goblin_client *c, const goblin_graph *g,
                                      const goblin_tensor *inputs, int32_t n_inputs,
                                      const goblin_graph_job_params *jp, goblin_job_id *job_id) {
    if (!c || !g || !job_id || n_inputs < 0 || (n_inputs && !inputs)) return GOBLIN_EINVAL;
    int32_t gi = goblin_graph_input_count(g), go = goblin_graph_output_count(g);
    if (n_inputs != gi)
        return cerr(c, GOBLIN_EINVAL, "%d inputs for a graph of %d", n_inputs, gi);
    if (gi > GOBLIN__CW_MAX_IO || go > GOBLIN__CW_MAX_IO || go < 0)
        return cerr(c, GOBLIN_EINVAL, "a graph job takes at most %d inputs and outputs",
                    GOBLIN__CW_MAX_IO);
    goblin_graph_job_params dp;
    if (!jp) {
        goblin_graph_job_params_default(&dp);
        jp = &dp;
    }
    if (jp->verify < 0 || jp->verify >= GOBLIN_VERIFY_COUNT || jp->verify == GOBLIN_VERIFY_FREIVALDS)
        return cerr(c, GOBLIN_EINVAL, "verify mode %d does not apply to graph jobs", (int)jp->verify);
    if (jp->spot_rows < 0 || jp->spot_rows > 65535)
        return cerr(c, GOBLIN_EINVAL, "spot_rows %d outside 0..65535", (int)jp->spot_rows);
    int64_t gmt;
    uint64_t gtm;
    goblin_err je = job_fields(c, &jp->job, &gmt, &gtm);
    if (je) return je;
    uint8_t *split = NULL, *combine = NULL;
    /* One block for both enum arrays as bytes (+1: never a zero-size allocation). */
    uint8_t *arrays = goblin__alloc((size_t)gi + (size_t)go + 1);
    if (!arrays) return cerr(c, GOBLIN_ENOMEM, "out of memory");
    if (jp->split) {
        split = arrays;
        for (int32_t i = 0; i < gi; i++) {
            if (jp->split[i] != GOBLIN_SPLIT_BROADCAST && jp->split[i] != GOBLIN_SPLIT_BATCH) {
                goblin__free(arrays);
                return cerr(c, GOBLIN_EINVAL, "input %d: unknown split %d", i, (int)jp->split[i]);
            }
            split[i] = (uint8_t)jp->split[i];
        }
    }
    if (jp->combine) {
        combine = arrays + gi;
        for (int32_t i = 0; i < go; i++) {
            if (jp->combine[i] < 0 || jp->combine[i] >= GOBLIN_COMBINE_COUNT) {
                goblin__free(arrays);
                return cerr(c, GOBLIN_EINVAL, "output %d: unknown combine %d", i, (int)jp->combine[i]);
            }
            combine[i] = (uint8_t)jp->combine[i];
        }
    }
    uint8_t *blob = NULL;
    size_t blob_len = 0;
    goblin_err e = goblin_graph_serialize(g, &blob, &blob_len);
    if (e) {
        goblin__free(arrays);
        return cerr(c, e, "cannot serialize the graph: %s", goblin_strerror(e));
    }
    pthread_mutex_lock(&c->mu);
    pair *p = pair_new(c);
    e = GOBLIN_ENOMEM;
    if (p) {
        goblin__cw_msg *m = &p->req;
        m->type = GOBLIN__CW_SUBMIT_GRAPH;
        m->graph = blob;
        m->graph_len = blob_len;
        m->n_io = (uint32_t)gi;
        m->n_outputs = (uint32_t)go;
        m->io = (goblin_tensor *)(uintptr_t)inputs; /* encoding only reads it */
        m->split = split;
        m->combine = combine;
        m->cache_ids = (uint64_t *)(uintptr_t)jp->cache_ids;
        m->verify = (uint8_t)jp->verify;
        m->min_replication = jp->min_replication;
        m->trust_halflife = jp->trust_halflife;
        m->chunk_rows = jp->chunk_rows;
        m->spot_rows = (uint16_t)jp->spot_rows;
        m->task_memory_bytes = jp->job.task_memory_bytes;
        m->min_tasks = jp->job.min_tasks;
        size_t sz;
        if (goblin__cw_encoded_size(m, &sz) != GOBLIN_OK)
            e = cerr(c, GOBLIN_EINVAL, "graph job not encodable: a parameter is negative or not "
                     "finite, or an input has a bad dtype or shape");
        else
            e = submit_common(c, p, job_id);
    }
    goblin__free(p);
    pthread_mutex_unlock(&c->mu);
    goblin_buffer_free(blob);
    goblin__free(arrays);
    return e;
}

goblin_err goblin_client_run_graph(goblin_client *c, const goblin_graph *g,
                                   const goblin_tensor *inputs, int32_t n_inputs,
                                   const goblin_graph_job_params *jp, goblin_tensor *outputs,
                                   int32_t n_outputs, goblin_client_progress_fn progress,
                                   void *user) {
    if (!c || !g || n_outputs < 0 || (n_outputs && !outputs)) return GOBLIN_EINVAL;
    if (n_outputs != goblin_graph_output_count(g))
        return cerr(c, GOBLIN_EINVAL, "%d outputs for a graph of %d", n_outputs,
                    goblin_graph_output_count(g));
    goblin_job_id id;
    goblin_err e = goblin_client_submit_graph(c, g, inputs, n_inputs, jp, &id);
    return e ? e : follow_n(c, &id, outputs, n_outputs, false, progress, user);
}
