/* libgoblin/service/gateway.c - the node-side service for clients (goblin/gateway.h):
 * its socket and thread, the connections and the principals behind them.
 *
 * Clients speak pair1 like workers, so that both can share the node's addresses: then
 * the node hands the clients' messages over (node/client_port.h) and the gateway
 * answers on the node's socket; or the gateway has a polyamorous pair1 socket on URLs of
 * its own. Either way a client has one request outstanding per connection, so a reply
 * never meets a full pipe (nng's pair1 drops a message to one). One thread: requests are small
 * (submit, poll, cancel, fetch, stats) except uploads and downloads of operands,
 * which are bounded by recv_max_bytes. Each request is decoded as hostile bytes
 * (client_wire.c); a request that does not decode is logged, counted and its
 * connection closed, and nothing else is affected. A connection is nobody until it
 * authenticates with a principal's credential (or the gateway is open); identity is
 * the principal's, so a job outlives the connection that submitted it, and the jobs
 * (gateway_job.c) answer only to their owner. */
#include <goblin/gateway.h>

#include <arpa/inet.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "gateway_impl.h"
#include "goblin/tls.h"
#include "net/tls_impl.h"
#include "net/transport.h"
#include "node/client_port.h"
#include "proto/wire.h"

void goblin__gw_log(goblin_gateway *g, goblin_log_level lvl, const char *fmt, ...) {
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
    p->recv_max_bytes = (uint64_t)8 << 30;
    p->max_jobs = 64;
    p->max_jobs_per_principal = 16;
    p->max_bytes_per_principal = (uint64_t)16 << 30;
    p->max_submits_per_minute = 120;
    p->expire_ms = 3600000;
    p->max_buffered_bytes = (uint64_t)4 << 30;
    p->max_unauthenticated = 64;
    p->auth_timeout_ms = 10000;
    p->max_connections = 1024;
    goblin_job_params_default(&p->job);
    p->log_level = GOBLIN_LOG_INFO;
}

static void free_fields(goblin_gateway *g) {
    for (int32_t i = 0; i < GOBLIN_GATEWAY_MAX_LISTEN; i++) goblin__free(g->listen[i]);
    goblin__free(g->cert);
    goblin__free(g->key);
    goblin__free(g->jobs);
    goblin__free(g->q);
    goblin__free(g->pipes);
    goblin__free(g->users);
    goblin__principals_clear(&g->principals);
    goblin__data_dirs_clear(&g->data);
}

goblin_err goblin_gateway_new(goblin_gateway **out, goblin_node *node,
                              const goblin_gateway_params *p) {
    if (!out || !node || !p || p->n_listen < 0 || p->n_listen > GOBLIN_GATEWAY_MAX_LISTEN ||
        p->max_jobs < 1 || p->max_jobs > 65536 || p->recv_max_bytes < GOBLIN__CW_HEADER_SIZE ||
        p->max_jobs_per_principal < 0 || p->max_submits_per_minute < 0 ||
        p->n_data_dirs < 0 || p->n_data_dirs > GOBLIN_GATEWAY_MAX_DATA_DIRS ||
        p->max_unauthenticated < 1 || p->max_connections < 1 || p->auth_timeout_ms < 1 ||
        p->log_level < 0 || p->log_level >= GOBLIN_LOG_LEVEL_COUNT)
        return GOBLIN_EINVAL;
    for (int32_t i = 0; i < p->n_listen; i++)
        if (!p->listen[i]) return GOBLIN_EINVAL;
    /* Who may connect must be said: a credentials file, or open mode on this machine. */
    if (!!p->open == !!(p->credentials_file && p->credentials_file[0])) {
        if (p->log)
            p->log(p->log_user, GOBLIN_LOG_ERROR,
                   p->open ? "gateway: open mode and a credentials file exclude each other"
                           : "gateway: clients need a credentials file (goblin-node researcher "
                             "add), or open mode on a loopback address");
        return GOBLIN_EINVAL;
    }
    if (p->open && p->n_listen == 0 && !goblin__node_listens_locally(node)) {
        if (p->log) {
            char urls[400], line[600];
            goblin__node_listen_text(node, urls, sizeof urls);
            snprintf(line, sizeof line, "gateway: open mode only serves loopback, ipc:// or "
                     "inproc:// addresses, and the node listens on %s", urls);
            p->log(p->log_user, GOBLIN_LOG_ERROR, line);
        }
        return GOBLIN_EINVAL;
    }
    if (p->open)
        for (int32_t i = 0; i < p->n_listen; i++)
            if (!goblin__transport_url_is_local(p->listen[i])) {
                if (p->log) {
                    char line[600];
                    snprintf(line, sizeof line, "gateway: open mode only listens on loopback, "
                             "ipc:// or inproc:// addresses, not %.400s", p->listen[i]);
                    p->log(p->log_user, GOBLIN_LOG_ERROR, line);
                }
                return GOBLIN_EINVAL;
            }
    goblin_gateway *g = goblin__calloc(1, sizeof *g);
    if (!g) return GOBLIN_ENOMEM;
    g->p = *p;
    g->node = node;
    g->attached = p->n_listen == 0;
    bool ok = true;
    for (int32_t i = 0; i < p->n_listen; i++) {
        g->listen[i] = goblin__strdup(p->listen[i]);
        g->p.listen[i] = g->listen[i];
        ok = ok && g->listen[i];
    }
    if (p->cert_file) ok = ok && (g->cert = goblin__strdup(p->cert_file));
    if (p->key_file) ok = ok && (g->key = goblin__strdup(p->key_file));
    if (p->credentials_file && p->credentials_file[0])
        ok = ok && (g->principals.path = goblin__strdup(p->credentials_file));
    g->p.credentials_file = g->principals.path;
    for (int32_t i = 0; i < GOBLIN_GATEWAY_MAX_DATA_DIRS; i++) g->p.data_dirs[i] = NULL;
    g->jobs = goblin__calloc((size_t)p->max_jobs, sizeof *g->jobs);
    ok = ok && g->jobs;
    if (g->attached) ok = ok && (g->q = goblin__calloc(GOBLIN__GW_QUEUE_MSGS, sizeof *g->q));
    char why[600] = "";
    goblin_err e = ok ? GOBLIN_OK : GOBLIN_ENOMEM;
    if (!e) e = goblin__data_dirs_init(&g->data, p->data_dirs, p->n_data_dirs, why, sizeof why);
    if (!e && g->principals.path && (e = goblin__principals_refresh(&g->principals, why, sizeof why)))
        e = GOBLIN_EINVAL;
    bool mu_ok = !e && pthread_mutex_init(&g->mu, NULL) == 0;
    if (mu_ok && pthread_mutex_init(&g->pmu, NULL) != 0) {
        pthread_mutex_destroy(&g->mu);
        mu_ok = false;
    }
    if (mu_ok && !goblin__gw_queue_init(g)) {
        pthread_mutex_destroy(&g->pmu);
        pthread_mutex_destroy(&g->mu);
        mu_ok = false;
    }
    if (!mu_ok) {
        if (why[0]) goblin__gw_log(g, GOBLIN_LOG_ERROR, "%s", why);
        free_fields(g);
        goblin__free(g);
        return e ? e : GOBLIN_ENOMEM;
    }
    atomic_init(&g->stop, false);
    atomic_init(&g->draining, false);
    *out = g;
    return GOBLIN_OK;
}

/* ---- connections and principals ---------------------------------------------------- */

gw_user *goblin__gw_user(goblin_gateway *g, const char *id, bool add) {
    for (int32_t i = 0; i < g->n_users; i++)
        if (strcmp(g->users[i].id, id) == 0) return &g->users[i];
    if (!add) return NULL;
    if (g->n_users == g->cap_users) {
        int32_t cap = g->cap_users ? 2 * g->cap_users : 16;
        gw_user *nu = goblin__alloc((size_t)cap * sizeof *nu);
        if (!nu) return NULL;
        if (g->n_users) memcpy(nu, g->users, (size_t)g->n_users * sizeof *nu);
        goblin__free(g->users);
        g->users = nu;
        g->cap_users = cap;
    }
    gw_user *u = &g->users[g->n_users++];
    memset(u, 0, sizeof *u);
    snprintf(u->id, sizeof u->id, "%s", id);
    u->gone_since_ms = goblin__now_ms();
    return u;
}

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
    e->added_ms = goblin__now_ms();
    g->n_unauthed++;
    return e;
}

/* Forget a request being received in parts on @p e (pmu held). */
static void pipe_drop_parts(goblin_gateway *g, gw_pipe *e) {
    if (!e->asm_buf) return;
    goblin__free(e->asm_buf);
    g->buffered_bytes -= e->asm_total;
    e->asm_buf = NULL;
    e->asm_total = e->asm_got = 0;
}

/* Pipe @p e (pmu held) is now @p who's, or nobody's (@p who NULL). */
static void pipe_set_principal(goblin_gateway *g, gw_pipe *e, const gw_who *who) {
    if (e->authed) {
        gw_user *u = goblin__gw_user(g, e->principal, false);
        if (u && --u->conns == 0) u->gone_since_ms = goblin__now_ms();
    }
    g->n_unauthed += (e->authed ? 1 : 0) - (who ? 1 : 0);
    e->authed = who != NULL;
    e->principal[0] = 0;
    if (!who) return;
    snprintf(e->principal, sizeof e->principal, "%s", who->id);
    e->role = who->role;
    gw_user *u = goblin__gw_user(g, who->id, true);
    if (u) u->conns++;
}

/* A new connection: the connection budgets. On the gateway's own socket before it can
 * send anything; on the node's addresses at its first client message. false: refused
 * (and closed). */
bool goblin__gw_pipe_added(goblin_gateway *g, nng_pipe p) {
    gw_who local = {GOBLIN__GW_LOCAL, GOBLIN_ROLE_RESEARCHER};
    pthread_mutex_lock(&g->pmu);
    bool refuse = g->n_pipes >= g->p.max_connections ||
                  (!g->p.open && g->n_unauthed >= g->p.max_unauthenticated);
    gw_pipe *e = refuse ? NULL : pipe_entry(g, nng_pipe_id(p), true);
    if (e) {
        e->pipe = p;
        if (g->p.open) pipe_set_principal(g, e, &local);
    }
    int32_t n = g->n_pipes, un = g->n_unauthed;
    pthread_mutex_unlock(&g->pmu);
    if (!e) {
        /* Not registered, so its removal finds nothing to undo. */
        nng_pipe_close(p);
        pthread_mutex_lock(&g->mu);
        g->stats.connections_refused++;
        pthread_mutex_unlock(&g->mu);
        goblin__gw_log(g, GOBLIN_LOG_WARN, "connection refused: %d connections, %d not "
                       "authenticated (limits %d and %d)", n, un, g->p.max_connections,
                       g->p.max_unauthenticated);
    }
    return e != NULL;
}

/* Attached: a client's first message makes its connection known (a message that outlived
 * its connection makes none: nothing would ever forget it). */
static bool pipe_admitted(goblin_gateway *g, nng_pipe p) {
    pthread_mutex_lock(&g->pmu);
    bool known = pipe_entry(g, nng_pipe_id(p), false) != NULL;
    pthread_mutex_unlock(&g->pmu);
    if (known) return true;
    nng_sockaddr sa;
    int rv = nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa); /* ENOTSUP on some transports: fine */
    if (rv == NNG_ENOENT || rv == NNG_ECLOSED) return false;
    return goblin__gw_pipe_added(g, p);
}

void goblin__gw_pipe_removed(goblin_gateway *g, uint32_t id) {
    pthread_mutex_lock(&g->pmu);
    for (int32_t i = 0; i < g->n_pipes; i++)
        if (g->pipes[i].id == id) {
            pipe_set_principal(g, &g->pipes[i], NULL);
            pipe_drop_parts(g, &g->pipes[i]);
            g->n_unauthed--;
            g->pipes[i] = g->pipes[--g->n_pipes];
            break;
        }
    pthread_mutex_unlock(&g->pmu);
}

/* Close the connections that stayed unauthenticated past auth_timeout_ms (not under
 * a lock: closing runs the removal callback). */
static void sweep_unauthenticated(goblin_gateway *g, int64_t now) {
    if (g->attached) {
        /* A connection that closed between its message's hand-over and its admission:
         * its removal found nothing to forget then. */
        uint32_t dead[64];
        int nd = 0;
        pthread_mutex_lock(&g->pmu);
        for (int32_t i = 0; i < g->n_pipes && nd < 64; i++) {
            nng_sockaddr sa;
            int rv = nng_pipe_get_addr(g->pipes[i].pipe, NNG_OPT_REMADDR, &sa);
            if (rv == NNG_ENOENT || rv == NNG_ECLOSED) dead[nd++] = g->pipes[i].id;
        }
        pthread_mutex_unlock(&g->pmu);
        for (int i = 0; i < nd; i++) goblin__gw_pipe_removed(g, dead[i]);
    }
    if (g->p.open) return;
    nng_pipe late[64];
    int n = 0;
    pthread_mutex_lock(&g->pmu);
    for (int32_t i = 0; i < g->n_pipes && n < 64; i++)
        if (!g->pipes[i].authed && now - g->pipes[i].added_ms >= (int64_t)g->p.auth_timeout_ms &&
            nng_pipe_id(g->pipes[i].pipe) > 0)
            late[n++] = g->pipes[i].pipe;
    pthread_mutex_unlock(&g->pmu);
    for (int i = 0; i < n; i++) goblin__transport_pipe_close(late[i]);
    if (n) {
        pthread_mutex_lock(&g->mu);
        g->stats.connections_refused += n;
        pthread_mutex_unlock(&g->mu);
        goblin__gw_log(g, GOBLIN_LOG_WARN, "closed %d connection(s) that did not authenticate "
                       "within %u ms", n, g->p.auth_timeout_ms);
    }
}

/* Who is pipe @p id? false if nobody (not authenticated). */
static bool pipe_who(goblin_gateway *g, uint32_t id, gw_who *who) {
    pthread_mutex_lock(&g->pmu);
    gw_pipe *e = pipe_entry(g, id, false);
    bool ok = e && e->authed;
    if (ok) {
        snprintf(who->id, sizeof who->id, "%s", e->principal);
        who->role = e->role;
    }
    pthread_mutex_unlock(&g->pmu);
    return ok;
}

/* A request from pipe @p id arrived (so the replies it was sent arrived); @p replied:
 * it is being answered now while draining. @p auth: a principal it authenticated as,
 * or, if @p deauth, it is nobody now. */
static void pipe_note(goblin_gateway *g, uint32_t id, bool replied, const gw_who *auth,
                      bool deauth) {
    pthread_mutex_lock(&g->pmu);
    gw_pipe *e = pipe_entry(g, id, replied || auth);
    if (e) {
        e->told = replied;
        if (auth || deauth) pipe_set_principal(g, e, auth);
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

/* The credentials file as it is now (mu held); on an error the last good copy stays. */
static void refresh_principals(goblin_gateway *g) {
    char why[600];
    goblin_err e = goblin__principals_refresh(&g->principals, why, sizeof why);
    if (e) goblin__gw_log(g, GOBLIN_LOG_ERROR, "credentials file: %s (%s); keeping the last good "
                          "copy", why, goblin_err_name(e));
}

/* ---- replies ---------------------------------------------------------------- */

void goblin__gw_reply_error(goblin_gateway *g, goblin__cw_msg *r, uint64_t rid, goblin_err code,
                            const char *fmt, ...) {
    memset(r, 0, sizeof *r);
    r->type = GOBLIN__CW_ERROR;
    r->request_id = rid;
    r->code = (int32_t)code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->text, sizeof r->text, fmt, ap);
    va_end(ap);
    goblin__gw_send(g, r);
}

/* ---- requests ---------------------------------------------------------------- */

/* AUTH (mu held): the pipe is the credential's principal, or nobody. */
static void handle_auth(goblin_gateway *g, uint32_t pid, goblin__cw_msg *m, goblin__cw_msg *r) {
    gw_who who = {GOBLIN__GW_LOCAL, GOBLIN_ROLE_RESEARCHER};
    bool ok = g->p.open;
    if (!ok) {
        refresh_principals(g);
        goblin_principal_info info;
        ok = goblin__principals_authenticate(&g->principals, m->token, m->token_len, &info) ==
             GOBLIN_OK;
        if (ok) {
            snprintf(who.id, sizeof who.id, "%s", info.id);
            who.role = info.role;
            goblin__gw_log(g, GOBLIN_LOG_INFO, "connection %u is %s (%s, %s)", (unsigned)pid,
                           info.id, info.email, goblin_role_name(info.role));
        }
    }
    memset(m->token, 0, sizeof m->token);
    if (ok) {
        memset(r, 0, sizeof *r);
        r->type = GOBLIN__CW_OK;
        r->request_id = m->request_id;
        goblin__gw_send(g, r);
    } else {
        g->stats.auth_refused++;
        goblin__gw_log(g, GOBLIN_LOG_WARN, "connection %u: credential refused", (unsigned)pid);
        goblin__gw_reply_error(g, r, m->request_id, GOBLIN_EAUTH,
                               "the node refused the credential (unknown, revoked or mistyped)");
    }
    pipe_note(g, pid, atomic_load(&g->draining), ok ? &who : NULL, !ok);
}

/* Who sent a request other than AUTH (mu held)? false, with the refusal sent, for
 * nobody or a principal whose credential was revoked since it authenticated. */
static bool request_who(goblin_gateway *g, uint32_t pid, const goblin__cw_msg *m,
                        goblin__cw_msg *r, gw_who *who) {
    if (g->p.open) {
        /* Everyone is "local". Not looked up by pipe: nng may deliver a pipe's first
         * request before the pipe callback that counts the connection has run. */
        snprintf(who->id, sizeof who->id, "%s", GOBLIN__GW_LOCAL);
        who->role = GOBLIN_ROLE_RESEARCHER;
        return true;
    }
    if (pipe_who(g, pid, who)) {
        refresh_principals(g);
        const goblin__principal *p = goblin__principals_find(&g->principals, who->id);
        if (p) {
            who->role = p->info.role; /* a role changed in the file applies at once */
            return true;
        }
        goblin__gw_log(g, GOBLIN_LOG_WARN, "connection %u: principal %s was revoked",
                       (unsigned)pid, who->id);
        g->stats.auth_refused++;
        goblin__gw_reply_error(g, r, m->request_id, GOBLIN_EAUTH,
                               "your credential was revoked on this node");
        pipe_note(g, pid, atomic_load(&g->draining), NULL, true);
        return false;
    }
    g->stats.auth_refused++;
    goblin__gw_reply_error(g, r, m->request_id, GOBLIN_EAUTH,
                           "this node requires a researcher credential (AUTH first)");
    pipe_note(g, pid, atomic_load(&g->draining), NULL, false);
    return false;
}

/* A PART of a request from pipe @p pid of @p who (mu held). Returns the whole request
 * once its last part is in (the caller handles and frees it), else NULL with the part
 * answered: OK (none for a NOACK part), or an error that drops what came so far (a
 * streamed request's later parts are then dropped unanswered). Checked at the first part,
 * before anything is allocated: the request's size, the node-wide budget of requests
 * being received and the principal's bytes. */
static uint8_t *handle_part(goblin_gateway *g, uint32_t pid, const gw_who *who,
                            const goblin__cw_msg *m, goblin__cw_msg *r, size_t *len_out) {
    char why[300] = "";
    goblin_err code = GOBLIN_OK;
    uint8_t *done = NULL;
    bool noack = (m->part_flags & GOBLIN__CW_PART_NOACK) != 0;
    pthread_mutex_lock(&g->pmu);
    gw_pipe *e = pipe_entry(g, pid, true);
    if (e && m->part_offset != 0 && e->refused_set && e->refused_rid == m->request_id && !e->asm_buf) {
        /* The rest of a streamed request already refused (its client was told once). */
        pthread_mutex_unlock(&g->pmu);
        return NULL;
    }
    if (e) e->refused_set = false;
    if (!e) {
        code = GOBLIN_ENOMEM;
        snprintf(why, sizeof why, "out of memory");
    } else if (m->part_offset == 0) {
        pipe_drop_parts(g, e);
        uint64_t mine = goblin__gw_held_bytes(g, who->id);
        for (int32_t i = 0; i < g->n_pipes; i++)
            if (g->pipes[i].asm_buf && g->pipes[i].authed &&
                strcmp(g->pipes[i].principal, who->id) == 0)
                mine += g->pipes[i].asm_total;
        uint64_t q = g->p.max_bytes_per_principal;
        if (m->part_total < GOBLIN__CW_HEADER_SIZE) {
            code = GOBLIN_EFORMAT;
            snprintf(why, sizeof why, "a request of %llu bytes", (unsigned long long)m->part_total);
        } else if (g->buffered_bytes + m->part_total > g->p.max_buffered_bytes) {
            code = GOBLIN_EBUSY;
            snprintf(why, sizeof why, "the node is receiving %llu bytes of requests already "
                     "(its limit is %llu): try again shortly",
                     (unsigned long long)g->buffered_bytes, (unsigned long long)g->p.max_buffered_bytes);
        } else if (q && (m->part_total > q || mine > q - m->part_total)) {
            code = GOBLIN_ELIMIT;
            snprintf(why, sizeof why, "a request of %llu bytes and the %llu your jobs hold are "
                     "over the %llu bytes this node holds for one principal",
                     (unsigned long long)m->part_total, (unsigned long long)mine,
                     (unsigned long long)q);
        } else if (!(e->asm_buf = goblin__alloc((size_t)m->part_total))) {
            code = GOBLIN_ENOMEM;
            snprintf(why, sizeof why, "out of memory for a request of %llu bytes",
                     (unsigned long long)m->part_total);
        } else {
            e->asm_total = m->part_total;
            e->asm_got = 0;
            e->asm_rid = m->request_id;
            g->buffered_bytes += m->part_total;
        }
    } else if (!e->asm_buf || m->part_offset != e->asm_got || m->part_total != e->asm_total ||
               m->request_id != e->asm_rid) {
        code = GOBLIN_EFORMAT;
        snprintf(why, sizeof why, "a part out of order (offset %llu of a %llu-byte request)",
                 (unsigned long long)m->part_offset, (unsigned long long)m->part_total);
        pipe_drop_parts(g, e);
    }
    if (!code) {
        memcpy(e->asm_buf + e->asm_got, m->part_data, m->part_len);
        e->asm_got += m->part_len;
        if (e->asm_got == e->asm_total) {
            done = e->asm_buf;
            *len_out = (size_t)e->asm_total;
            g->buffered_bytes -= e->asm_total;
            e->asm_buf = NULL;
            e->asm_total = e->asm_got = 0;
        }
    }
    if (code && e && noack) {
        pipe_drop_parts(g, e);
        e->refused_set = true;
        e->refused_rid = m->request_id;
    }
    pthread_mutex_unlock(&g->pmu);
    if (code) {
        if (code == GOBLIN_ELIMIT || code == GOBLIN_EBUSY) g->stats.quota_refused++;
        goblin__gw_reply_error(g, r, m->request_id, code, "%s", why);
    } else if (!done && !noack) {
        memset(r, 0, sizeof *r);
        r->type = GOBLIN__CW_OK;
        r->request_id = m->request_id;
        goblin__gw_send(g, r);
    }
    return done;
}

/* A worker dialed the gateway's own address: a REFUSE tells it (it stops and says
 * so) where workers connect; the connection is swept with the unauthenticated ones. */
static void refuse_worker(goblin_gateway *g, nng_pipe pipe) {
    char urls[400], text[GOBLIN_WIRE_MAX_TEXT_BYTES];
    goblin__node_listen_text(g->node, urls, sizeof urls);
    snprintf(text, sizeof text, "this is the node's client address; workers connect to %s", urls);
    goblin__wire_msg m;
    goblin__wire_msg_init(&m, GOBLIN_WIRE_TYPE_REFUSE);
    m.body.refuse.reason = GOBLIN_EPROTO;
    m.body.refuse.message = text;
    size_t sz, len;
    nng_msg *msg;
    if (goblin__wire_encoded_size(&m, &sz) == GOBLIN_OK && nng_msg_alloc(&msg, sz) == 0) {
        if (goblin__wire_encode_into(&m, nng_msg_body(msg), sz, &len) == GOBLIN_OK) {
            nng_msg_set_pipe(msg, pipe);
            int rv = nng_sendmsg(g->sock, msg, NNG_FLAG_NONBLOCK);
            if (rv == 0) msg = NULL;
            else goblin__gw_log(g, GOBLIN_LOG_WARN, "could not send the refusal to a worker: %s", nng_strerror(rv));
        }
        if (msg) nng_msg_free(msg);
    }
    goblin__gw_log(g, GOBLIN_LOG_WARN, "a worker connected to the client address; told it "
                   "where workers connect");
}

/* One request: @p buf (@p len bytes, borrowed) from pipe @p pipe; @p whole: it was
 * reassembled from parts (and may not be a part itself). */
static void handle_bytes(goblin_gateway *g, nng_pipe pipe, const uint8_t *buf, size_t len,
                         bool whole) {
    goblin__cw_msg *m = goblin__calloc(2, sizeof *m); /* request and reply: large structs */
    if (!m) {
        goblin__gw_log(g, GOBLIN_LOG_ERROR, "out of memory for a request");
        goblin__transport_pipe_close(pipe);
        return;
    }
    goblin__cw_msg *r = m + 1;
    g->reply_pipe = pipe;
    if (!whole && g->attached && !pipe_admitted(g, pipe)) {
        goblin__free(m);
        return;
    }
    if (!whole && !g->attached && len >= 4 && memcmp(buf, "GBLW", 4) == 0) {
        refuse_worker(g, pipe);
        goblin__free(m);
        return;
    }
    goblin__cw_limits lim = {g->p.recv_max_bytes, GOBLIN_MAX_NUMEL};
    char why[256];
    goblin_err e = goblin__cw_decode(buf, len, &lim, m, why, sizeof why);
    if (!e && whole && m->type == GOBLIN__CW_PART) {
        e = GOBLIN_EPROTO;
        snprintf(why, sizeof why, "a part inside a part");
    }
    pthread_mutex_lock(&g->mu);
    g->stats.requests++;
    if (e) {
        g->stats.refused++;
        pthread_mutex_unlock(&g->mu);
        goblin__gw_log(g, GOBLIN_LOG_WARN, "malformed request of %zu bytes refused (%s): %s; "
                       "closing that connection", len, goblin_err_name(e), why);
        /* A peer that sends what we cannot parse gets no answer: its connection ends. */
        goblin__transport_pipe_close(pipe);
        goblin__free(m);
        return;
    }
    goblin__gw_log(g, GOBLIN_LOG_DEBUG, "%s request %llu", goblin__cw_type_name(m->type),
                   (unsigned long long)m->request_id);
    uint32_t pid = nng_pipe_id(pipe);
    gw_who who;
    uint8_t *assembled = NULL;
    size_t assembled_len = 0;
    if (m->type == GOBLIN__CW_AUTH) {
        handle_auth(g, pid, m, r);
    } else if (m->type == GOBLIN__CW_PING) {
        memset(r, 0, sizeof *r); /* alive; says nothing about anything else */
        r->type = GOBLIN__CW_OK;
        r->request_id = m->request_id;
        goblin__gw_send(g, r);
    } else if (m->type >= GOBLIN__CW_SUBMITTED) {
        /* A reply type sent as a request. */
        g->stats.refused++;
        goblin__gw_log(g, GOBLIN_LOG_WARN, "unexpected %s message from a client; closing that "
                       "connection", goblin__cw_type_name(m->type));
        goblin__transport_pipe_close(pipe);
    } else if (request_who(g, pid, m, r, &who)) {
        switch (m->type) {
        case GOBLIN__CW_PART: assembled = handle_part(g, pid, &who, m, r, &assembled_len); break;
        case GOBLIN__CW_SUBMIT_MATMUL: goblin__gw_submit_matmul(g, &who, m, r); break;
        case GOBLIN__CW_SUBMIT_MATMUL_FILES: goblin__gw_submit_files(g, &who, m, r); break;
        case GOBLIN__CW_SUBMIT_GRAPH: goblin__gw_submit_graph(g, &who, m, r); break;
        case GOBLIN__CW_STATS: goblin__gw_stats(g, m, r); break;
        default: goblin__gw_job_request(g, &who, m, r); break; /* STATUS CANCEL FETCH RELEASE */
        }
        if (!assembled) pipe_note(g, pid, atomic_load(&g->draining), NULL, false);
    }
    pthread_mutex_unlock(&g->mu);
    goblin__cw_msg_clear(m);
    goblin__free(m);
    if (assembled) {
        /* A matmul submit may keep the assembled bytes as its operands (adopt_buf taken). */
        g->adopt_buf = assembled;
        g->adopt_len = assembled_len;
        handle_bytes(g, pipe, assembled, assembled_len, true);
        goblin__free(g->adopt_buf);
        g->adopt_buf = NULL;
    }
}

static void handle(goblin_gateway *g, nng_msg *in) {
    handle_bytes(g, nng_msg_get_pipe(in), nng_msg_body(in), nng_msg_len(in), false);
}

static bool drained(goblin_gateway *g) {
    pthread_mutex_lock(&g->mu);
    /* A job's end counts as told once its client fetched it (which releases it). */
    bool all = true;
    for (int32_t i = 0; i < g->p.max_jobs; i++)
        if (g->jobs[i].used && !g->jobs[i].end_reported) all = false;
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
        int64_t now = goblin__now_ms();
        if (now >= g->next_expiry_check_ms) {
            g->next_expiry_check_ms = now + 1000;
            pthread_mutex_lock(&g->mu);
            goblin__gw_expire(g, now);
            pthread_mutex_unlock(&g->mu);
        }
        if (now >= g->next_sweep_ms) {
            g->next_sweep_ms = now + (g->p.auth_timeout_ms < 2000 ? g->p.auth_timeout_ms / 2 + 1 : 1000);
            sweep_unauthenticated(g, now);
        }
        nng_msg *in;
        int rv = goblin__gw_next(g, &rfd, &in, 100);
        goblin__transport_close_dropped();
        if (rv == NNG_ETIMEDOUT) continue;
        if (rv == NNG_ECLOSED) break;
        if (rv) {
            goblin__gw_log(g, GOBLIN_LOG_WARN, "receive failed: %s", nng_strerror(rv));
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
    goblin_err e = goblin__gw_open(g);
    if (e) return e;
    if (pthread_create(&g->thread, NULL, serve, g) != 0) {
        goblin__gw_close(g);
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
        if (!g->jobs[i].used) continue;
        held++;
        if (goblin_job_get_status(g->jobs[i].job) == GOBLIN_JOB_RUNNING)
            goblin_job_cancel(g->jobs[i].job);
    }
    g->drain_deadline_ms = goblin__now_ms() + drain_ms;
    pthread_mutex_unlock(&g->mu);
    if (held) goblin__gw_log(g, GOBLIN_LOG_INFO, "stopping: %d job(s) ended; telling their clients", held);
    atomic_store(&g->draining, true);
    if (drain_ms == 0) atomic_store(&g->stop, true);
    pthread_join(g->thread, NULL);
    g->started = false;
    goblin__gw_close(g);
}

void goblin_gateway_free(goblin_gateway *g) {
    if (!g) return;
    goblin_gateway_stop(g, 0);
    goblin__gw_close(g);
    for (int32_t i = 0; i < g->p.max_jobs; i++)
        if (g->jobs[i].used) goblin__gw_job_release(&g->jobs[i]);
    pthread_mutex_destroy(&g->mu);
    pthread_mutex_destroy(&g->pmu);
    goblin__gw_queue_fini(g);
    free_fields(g);
    goblin__free(g);
}

void goblin_gateway_stats_get(goblin_gateway *g, goblin_gateway_stats *out) {
    if (!g || !out) return;
    pthread_mutex_lock(&g->mu);
    *out = g->stats;
    int64_t held = 0;
    for (int32_t i = 0; i < g->p.max_jobs; i++) held += g->jobs[i].used;
    out->jobs_held = held;
    pthread_mutex_unlock(&g->mu);
}
