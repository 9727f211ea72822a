/* libgoblin/client.c - the client side of the gateway protocol (goblin/client.h). */
#include <goblin/client.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "alloc.h"
#include "client_wire.h"
#include "tls_impl.h"

struct goblin_client {
    goblin_client_params p;
    nng_socket sock;
    pthread_mutex_t mu;
    uint64_t next_rid;
    char err[600];
};

void goblin_client_params_default(goblin_client_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->timeout_ms = 120000;
    p->connect_timeout_ms = 10000;
    p->poll_ms = 100;
    p->recv_max_bytes = (uint64_t)16 << 30;
}

static goblin_err cerr(goblin_client *c, goblin_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static goblin_err cerr(goblin_client *c, goblin_err e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return e;
}

const char *goblin_client_error(const goblin_client *c) { return c ? c->err : "NULL client"; }

static goblin_err nng_to_err(int rv) {
    switch (rv) {
    case 0: return GOBLIN_OK;
    case NNG_ECONNREFUSED: return GOBLIN_ECONNREFUSED;
    case NNG_ETIMEDOUT: return GOBLIN_ETIMEDOUT;
    case NNG_ECLOSED: return GOBLIN_ECLOSED;
    case NNG_ENOMEM: return GOBLIN_ENOMEM;
    case NNG_EINVAL: case NNG_EADDRINVAL: return GOBLIN_EINVAL;
    default: return goblin__tls_nng_err(rv);
    }
}

goblin_err goblin_client_connect(goblin_client **out, const char *url,
                                 const goblin_client_params *p, char *err_msg, size_t err_cap) {
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
    goblin_client *c = goblin__calloc(1, sizeof *c);
    if (!c) FAIL(GOBLIN_ENOMEM, "out of memory");
    c->p = *p;
    c->p.ca_file = c->p.fingerprint = c->p.server_name = NULL; /* used during connect only */
    c->next_rid = 1;
    int rv = nng_req0_open(&c->sock);
    if (rv) {
        goblin__free(c);
        FAIL(nng_to_err(rv), "cannot open socket: %s", nng_strerror(rv));
    }
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        nng_close(c->sock);
        goblin__free(c);
        FAIL(GOBLIN_ENOMEM, "cannot create a mutex");
    }
    /* A request is never resent by nng on a timer: a resent SUBMIT would start a
     * second job. */
    nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, (size_t)p->recv_max_bytes);
    nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, (nng_duration)p->timeout_ms);
    nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, (nng_duration)p->timeout_ms);
    nng_dialer d;
    goblin_err e = GOBLIN_OK;
    char why[512] = "";
    if ((rv = nng_dialer_create(&d, c->sock, url)) != 0) {
        e = nng_to_err(rv);
        snprintf(why, sizeof why, "cannot dial %s: %s", url, nng_strerror(rv));
    } else if (tls) {
        goblin__tls_client_opts o = {p->ca_file, p->fingerprint, p->server_name,
                                     (int)p->connect_timeout_ms};
        e = goblin__tls_dialer_setup(d, url, &o, why, sizeof why);
    }
    if (!e) {
        nng_dialer_set_ms(d, NNG_OPT_RECONNMINT, 100);
        nng_dialer_set_ms(d, NNG_OPT_RECONNMAXT, 2000);
        if ((rv = nng_dialer_start(d, 0)) != 0) {
            e = nng_to_err(rv);
            snprintf(why, sizeof why, "cannot connect to %s: %s", url, nng_strerror(rv));
        }
    }
    if (e) {
        nng_close(c->sock);
        pthread_mutex_destroy(&c->mu);
        goblin__free(c);
        FAIL(e, "%s", why);
    }
#undef FAIL
    *out = c;
    return GOBLIN_OK;
}

void goblin_client_free(goblin_client *c) {
    if (!c) return;
    nng_close(c->sock);
    pthread_mutex_destroy(&c->mu);
    goblin__free(c);
}

/* One request/reply. On success *reply is decoded from *keep (free it with
 * nng_msg_free after using the reply's tensors); an ERROR reply becomes its code. */
static goblin_err roundtrip(goblin_client *c, goblin__cw_msg *req, goblin__cw_msg *reply,
                            nng_msg **keep) {
    req->request_id = c->next_rid++;
    size_t sz;
    goblin_err e = goblin__cw_encoded_size(req, &sz);
    if (e) return cerr(c, e, "request not encodable (non-contiguous tensor or bad path?)");
    nng_msg *m;
    if (nng_msg_alloc(&m, sz) != 0) return cerr(c, GOBLIN_ENOMEM, "out of memory for a %zu-byte request", sz);
    size_t len;
    goblin__cw_encode_into(req, nng_msg_body(m), sz, &len);
    int rv = nng_sendmsg(c->sock, m, 0);
    if (rv) {
        nng_msg_free(m);
        return cerr(c, nng_to_err(rv), "cannot send the request: %s", nng_strerror(rv));
    }
    nng_msg *in;
    if ((rv = nng_recvmsg(c->sock, &in, 0)) != 0)
        return cerr(c, nng_to_err(rv), "no reply from the node: %s", nng_strerror(rv));
    goblin__cw_limits lim = {c->p.recv_max_bytes, GOBLIN_MAX_NUMEL};
    char why[256];
    e = goblin__cw_decode(nng_msg_body(in), nng_msg_len(in), &lim, reply, why, sizeof why);
    if (e) {
        nng_msg_free(in);
        return cerr(c, e, "malformed reply from the node: %s", why);
    }
    if (reply->request_id != req->request_id) {
        goblin__cw_msg_clear(reply);
        nng_msg_free(in);
        return cerr(c, GOBLIN_EPROTO, "reply to another request");
    }
    if (reply->type == GOBLIN__CW_ERROR) {
        goblin_err code = reply->code > 0 && reply->code < 65536 ? (goblin_err)reply->code
                                                                 : GOBLIN_EPROTO;
        cerr(c, code, "node: %s", reply->text);
        nng_msg_free(in);
        return code;
    }
    *keep = in;
    return GOBLIN_OK;
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

static goblin_err submit_common(goblin_client *c, pair *p, uint64_t *job_id) {
    nng_msg *keep = NULL;
    goblin_err e = roundtrip(c, &p->req, &p->rep, &keep);
    if (!e && !(e = expect(c, &p->rep, GOBLIN__CW_SUBMITTED))) {
        *job_id = p->rep.job_id;
        c->err[0] = 0;
    }
    goblin__cw_msg_clear(&p->rep);
    if (keep) nng_msg_free(keep);
    return e;
}

goblin_err goblin_client_submit_matmul(goblin_client *c, const goblin_tensor *a,
                                       const goblin_tensor *b, uint64_t *job_id) {
    if (!c || !a || !b || !job_id) return GOBLIN_EINVAL;
    pthread_mutex_lock(&c->mu);
    pair *p = pair_new(c);
    goblin_err e = GOBLIN_ENOMEM;
    if (p) {
        p->req.type = GOBLIN__CW_SUBMIT_MATMUL;
        p->req.tensors[0] = *a;
        p->req.tensors[1] = *b;
        e = submit_common(c, p, job_id);
    }
    goblin__free(p);
    pthread_mutex_unlock(&c->mu);
    return e;
}

goblin_err goblin_client_submit_matmul_files(goblin_client *c, const char *a_path,
                                             const char *b_path, const char *c_path,
                                             uint64_t *job_id) {
    if (!c || !a_path || !b_path || !c_path || !job_id) return GOBLIN_EINVAL;
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
        e = submit_common(c, p, job_id);
    }
    goblin__free(p);
    pthread_mutex_unlock(&c->mu);
    return e;
}

static goblin_err job_request(goblin_client *c, uint8_t type, uint64_t job_id,
                              goblin_client_job_info *info) {
    pthread_mutex_lock(&c->mu);
    pair *p = pair_new(c);
    goblin_err e = GOBLIN_ENOMEM;
    if (p) {
        p->req.type = type;
        p->req.job_id = job_id;
        nng_msg *keep = NULL;
        e = roundtrip(c, &p->req, &p->rep, &keep);
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

goblin_err goblin_client_job_status(goblin_client *c, uint64_t job_id, goblin_client_job_info *out) {
    if (!c || !out) return GOBLIN_EINVAL;
    return job_request(c, GOBLIN__CW_STATUS, job_id, out);
}

goblin_err goblin_client_cancel(goblin_client *c, uint64_t job_id) {
    if (!c) return GOBLIN_EINVAL;
    return job_request(c, GOBLIN__CW_CANCEL, job_id, NULL);
}

goblin_err goblin_client_fetch_result(goblin_client *c, uint64_t job_id, goblin_tensor *out) {
    if (!c) return GOBLIN_EINVAL;
    pthread_mutex_lock(&c->mu);
    pair *p = pair_new(c);
    goblin_err e = GOBLIN_ENOMEM;
    if (p) {
        p->req.type = GOBLIN__CW_FETCH;
        p->req.job_id = job_id;
        nng_msg *keep = NULL;
        e = roundtrip(c, &p->req, &p->rep, &keep);
        if (!e && !(e = expect(c, &p->rep, GOBLIN__CW_RESULT))) {
            if (p->rep.has_tensor && out) {
                const goblin_tensor *t = &p->rep.tensors[0];
                size_t bytes = (size_t)goblin_tensor_numel(t) * goblin_dtype_size(t->dtype);
                void *data = bytes ? goblin__alloc(bytes) : NULL;
                if (bytes && !data) {
                    e = cerr(c, GOBLIN_ENOMEM, "out of memory for the %zu-byte result", bytes);
                } else {
                    if (bytes) memcpy(data, t->data, bytes);
                    goblin_tensor_init(out, t->dtype, t->rank, t->shape, data);
                    c->err[0] = 0;
                }
            } else {
                c->err[0] = 0;
            }
        }
        goblin__cw_msg_clear(&p->rep);
        if (keep) nng_msg_free(keep);
    }
    goblin__free(p);
    pthread_mutex_unlock(&c->mu);
    return e;
}

static void sleep_ms(uint32_t ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static goblin_err follow(goblin_client *c, uint64_t id, goblin_tensor *out,
                         goblin_client_progress_fn progress, void *user) {
    goblin_client_job_info info;
    for (;;) {
        goblin_err e = goblin_client_job_status(c, id, &info);
        if (e) return e;
        if (progress && !progress(user, info.done, info.total)) {
            goblin_client_cancel(c, id);
            goblin_client_fetch_result(c, id, NULL); /* releases the job on the node */
            return cerr(c, GOBLIN_ECANCELED, "canceled by the progress callback");
        }
        if (info.status != GOBLIN_JOB_RUNNING) break;
        sleep_ms(c->p.poll_ms ? c->p.poll_ms : 100);
    }
    return goblin_client_fetch_result(c, id, out);
}

goblin_err goblin_client_matmul(goblin_client *c, const goblin_tensor *a, const goblin_tensor *b,
                                goblin_tensor *out, goblin_client_progress_fn progress, void *user) {
    uint64_t id;
    goblin_err e = goblin_client_submit_matmul(c, a, b, &id);
    return e ? e : follow(c, id, out, progress, user);
}

goblin_err goblin_client_matmul_files(goblin_client *c, const char *a_path, const char *b_path,
                                      const char *c_path, goblin_client_progress_fn progress,
                                      void *user) {
    uint64_t id;
    goblin_err e = goblin_client_submit_matmul_files(c, a_path, b_path, c_path, &id);
    return e ? e : follow(c, id, NULL, progress, user);
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
        e = roundtrip(c, &p->req, &p->rep, &keep);
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
