/* libgoblin/service/gateway_impl.h - the gateway's state (internal to service/):
 * the connections and who they are (gateway.c), the jobs it holds and the handlers that
 * make, report and release them (gateway_job.c). */
#ifndef GOBLIN__SERVICE_GATEWAY_IMPL_H
#define GOBLIN__SERVICE_GATEWAY_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <nng/nng.h>

#include "goblin/gateway.h"
#include "goblin/npy.h"
#include "data_dir.h"
#include "principal_impl.h"
#include "proto/client_wire.h"

/* The principal every connection of an open gateway is. */
#define GOBLIN__GW_LOCAL "local"

typedef struct gw_job {
    bool used;
    goblin_job_id id;
    char owner[GOBLIN_PRINCIPAL_ID_SIZE];
    uint64_t bytes; /* operands and results held for it (the owner's quota) */
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

/* A connection the gateway remembers, by nng pipe id. */
typedef struct gw_pipe {
    uint32_t id;
    nng_pipe pipe;
    int64_t added_ms;
    bool authed;
    char principal[GOBLIN_PRINCIPAL_ID_SIZE];
    goblin_role role;
    bool told; /* draining: sent a reply, not yet known to have arrived */
    /* a request arriving in PARTs: its bytes so far (counted in buffered_bytes) */
    uint8_t *asm_buf;
    uint64_t asm_total, asm_got, asm_rid;
    /* a streamed (NOACK) request refused part-way: its later parts are dropped unanswered */
    bool refused_set;
    uint64_t refused_rid;
} gw_pipe;

/* A principal's use of the gateway: its connections and its recent submits. */
typedef struct gw_user {
    char id[GOBLIN_PRINCIPAL_ID_SIZE];
    int32_t conns;
    int64_t gone_since_ms;  /* when conns last fell to 0 */
    int64_t window_ms;      /* start of the current minute of submits */
    int32_t window_submits;
} gw_user;

/* Who sent a request. */
typedef struct gw_who {
    char id[GOBLIN_PRINCIPAL_ID_SIZE];
    goblin_role role;
} gw_who;

struct goblin_gateway {
    goblin_gateway_params p;
    char *listen[GOBLIN_GATEWAY_MAX_LISTEN];
    char *cert, *key;
    goblin_node *node;
    nng_socket sock;     /* its own, or the node's when attached */
    struct goblin__listen_guard *guard; /* its own socket's listeners (net/listen_guard.h) */
    bool sock_open, started;
    /* attached: serving on the node's addresses (n_listen 0). The node's thread hands
     * over the clients' messages through a bounded queue (qmu, taken under the node's
     * lock: nothing else is ever taken while it is held). */
    bool attached, is_attached;
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    nng_msg **q;
    int32_t q_head, q_n;
    uint64_t q_bytes;
    int64_t q_refused; /* requests answered EBUSY because the queue was full (qmu) */
    /* the connection whose request is being handled (serve thread): replies go to it */
    nng_pipe reply_pipe;
    /* a request reassembled from parts, being handled (serve thread): a matmul submit
     * keeps it as its operands' storage (and sets it to NULL) rather than copying them */
    uint8_t *adopt_buf;
    size_t adopt_len;
    pthread_t thread;
    atomic_bool stop;
    atomic_bool draining;
    int64_t drain_deadline_ms;
    int64_t next_expiry_check_ms;
    pthread_mutex_t mu; /* jobs, stats, principals table */
    gw_job *jobs;
    goblin_gateway_stats stats;
    goblin__principal_table principals;
    goblin__data_dirs data;
    /* Connections and principals' use, under their own lock (pmu: taken inside mu, never
     * held while calling into nng). Pipes are forgotten when nng removes them. */
    pthread_mutex_t pmu;
    gw_pipe *pipes;
    int32_t n_pipes, cap_pipes;
    gw_user *users;
    int32_t n_users, cap_users;
    int32_t n_unauthed;      /* connections that have not authenticated (pmu) */
    uint64_t buffered_bytes; /* requests being received in parts, all connections (pmu) */
    int64_t next_sweep_ms;
};

void goblin__gw_log(goblin_gateway *g, goblin_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int goblin__gw_send(goblin_gateway *g, const goblin__cw_msg *m);
void goblin__gw_reply_error(goblin_gateway *g, goblin__cw_msg *r, uint64_t rid, goblin_err code,
                            const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The principal's use record (pmu held), created if @p add; NULL if absent / no memory. */
gw_user *goblin__gw_user(goblin_gateway *g, const char *id, bool add);

/* The connection budgets for a new connection (false: refused and closed); forget a
 * connection that closed (gateway.c). */
bool goblin__gw_pipe_added(goblin_gateway *g, nng_pipe p);
void goblin__gw_pipe_removed(goblin_gateway *g, uint32_t pipe_id);

/* gateway_port.c: the clients' messages and the replies */
#define GOBLIN__GW_QUEUE_MSGS 1024
bool goblin__gw_queue_init(goblin_gateway *g);
void goblin__gw_queue_fini(goblin_gateway *g);
/* Serve on the node's addresses or open the gateway's own socket; undo it. */
goblin_err goblin__gw_open(goblin_gateway *g);
void goblin__gw_close(goblin_gateway *g);
/* The next client message within @p timeout_ms (0 or an nng error code). */
int goblin__gw_next(goblin_gateway *g, int *rfd, nng_msg **out, int timeout_ms);
/* Send @p m to connection @p pipe (goblin__gw_send: to the request's, g->reply_pipe). */
int goblin__gw_send_to(goblin_gateway *g, nng_pipe pipe, const goblin__cw_msg *m);

/* gateway_job.c (mu held) */
uint64_t goblin__gw_held_bytes(const goblin_gateway *g, const char *who);
void goblin__gw_job_release(gw_job *j);
void goblin__gw_submit_matmul(goblin_gateway *g, const gw_who *who, goblin__cw_msg *m,
                              goblin__cw_msg *r);
void goblin__gw_submit_files(goblin_gateway *g, const gw_who *who, goblin__cw_msg *m,
                             goblin__cw_msg *r);
void goblin__gw_submit_graph(goblin_gateway *g, const gw_who *who, goblin__cw_msg *m,
                             goblin__cw_msg *r);
/* STATUS, CANCEL, FETCH, RELEASE of one of @p who's jobs. */
void goblin__gw_job_request(goblin_gateway *g, const gw_who *who, goblin__cw_msg *m,
                            goblin__cw_msg *r);
void goblin__gw_stats(goblin_gateway *g, goblin__cw_msg *m, goblin__cw_msg *r);
/* Release the unfetched jobs of principals gone for longer than expire_ms. */
void goblin__gw_expire(goblin_gateway *g, int64_t now_ms);

#endif
