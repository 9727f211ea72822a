/* libgoblin/grid/grid.c - the grid handle (see grid.h): an embedded grid (a node on a unique
 * inproc:// URL and worker threads) or a client of a running node; its counters and the
 * messages of failed calls. Nothing here bypasses the protocol: embedded workers talk to
 * the node through nng exactly as remote ones do. Jobs are in job.c. */
#include "grid_impl.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/errf.h"

void goblin_grid_params_default(goblin_grid_params *p) {
    if (!p) return;
    goblin_node_params_default(&p->node);
    goblin_worker_params_default(&p->worker);
    p->worker.threads = 1;
}

static void *worker_thread(void *arg) {
    goblin_worker_run(arg);
    return NULL;
}

/* ---- messages ------------------------------------------------------------------ */

/* A failed submit returns a code only and the node logs why: keep the newest warning or
 * error line, and pass every line on to the user's hook as before. */
static void keep_line(goblin_grid *g, goblin_log_level level, const char *line) {
    if (level > GOBLIN_LOG_WARN) return;
    pthread_mutex_lock(&g->mu);
    snprintf(g->log_line, sizeof g->log_line, "%s", line);
    g->log_seq++;
    pthread_mutex_unlock(&g->mu);
}

static void node_log(void *user, goblin_log_level level, const char *line) {
    goblin_grid *g = user;
    keep_line(g, level, line);
    if (g->node_log && level <= g->node_log_level) g->node_log(g->node_log_user, level, line);
}

static void worker_log(void *user, goblin_log_level level, const char *line) {
    goblin_grid *g = user;
    keep_line(g, level, line);
    if (g->worker_log && level <= g->worker_log_level) g->worker_log(g->worker_log_user, level, line);
}

/* The level the wrapped hook asks for: warnings for the message, more if the user's
 * hook wants more (never more than that: no line is formatted only to be dropped). */
static goblin_log_level wrapped_level(goblin_log_fn fn, goblin_log_level user_level) {
    return fn && user_level > GOBLIN_LOG_WARN ? user_level : GOBLIN_LOG_WARN;
}

uint64_t goblin__grid_log_mark(goblin_grid *g) {
    pthread_mutex_lock(&g->mu);
    uint64_t s = g->log_seq;
    pthread_mutex_unlock(&g->mu);
    return s;
}

goblin_err goblin__grid_fail(goblin_grid *g, goblin_err e, uint64_t mark, const char *why) {
    pthread_mutex_lock(&g->mu);
    if (why)
        snprintf(g->err, sizeof g->err, "%s", why);
    else if (g->node && g->log_seq > mark)
        snprintf(g->err, sizeof g->err, "%s", g->log_line);
    else if (g->client && *goblin_client_error(g->client))
        snprintf(g->err, sizeof g->err, "%s", goblin_client_error(g->client));
    else
        snprintf(g->err, sizeof g->err, "%s", goblin_strerror(e));
    pthread_mutex_unlock(&g->mu);
    return e;
}

void goblin__grid_ok(goblin_grid *g) {
    pthread_mutex_lock(&g->mu);
    g->err[0] = 0;
    pthread_mutex_unlock(&g->mu);
}

void goblin_grid_error(goblin_grid *g, char *buf, size_t cap) {
    if (!buf || !cap) return;
    if (!g) {
        snprintf(buf, cap, "NULL grid");
        return;
    }
    pthread_mutex_lock(&g->mu);
    snprintf(buf, cap, "%s", g->err);
    pthread_mutex_unlock(&g->mu);
}

/* ---- construction ----------------------------------------------------------------- */

static goblin_grid *grid_alloc(void) {
    goblin_grid *g = goblin__calloc(1, sizeof *g);
    if (g && pthread_mutex_init(&g->mu, NULL) != 0) {
        goblin__free(g);
        return NULL;
    }
    return g;
}

goblin_err goblin_grid_local(int32_t n_workers, const goblin_grid_params *p, goblin_grid **out) {
    if (!out || n_workers < 1 || n_workers > 256) return GOBLIN_EINVAL;
    goblin_grid_params def;
    goblin_grid_params_default(&def);
    if (!p) p = &def;
    static atomic_uint counter;
    goblin_grid *g = grid_alloc();
    if (!g) return GOBLIN_ENOMEM;
    snprintf(g->url, sizeof g->url, "inproc://goblin-grid-%ld-%u", (long)getpid(),
             atomic_fetch_add(&counter, 1));
    g->workers = goblin__calloc((size_t)n_workers, sizeof *g->workers);
    g->threads = goblin__calloc((size_t)n_workers, sizeof *g->threads);
    g->running = goblin__calloc((size_t)n_workers, sizeof *g->running);
    goblin_err e = GOBLIN_ENOMEM;
    if (!g->workers || !g->threads || !g->running) goto fail;
    goblin_node_params np = p->node;
    np.listen[0] = g->url;
    np.n_listen = 1;
    g->node_log = np.log;
    g->node_log_user = np.log_user;
    g->node_log_level = np.log_level;
    np.log = node_log;
    np.log_user = g;
    np.log_level = wrapped_level(g->node_log, g->node_log_level);
    /* The node shares the cores with the workers, which keep them busy: a threaded
     * recomputation would wait at its kernels' barriers for descheduled threads. */
    if (np.recompute_threads == 0) np.recompute_threads = 1;
    if ((e = goblin_node_new(&g->node, &np)) != GOBLIN_OK) goto fail;
    if ((e = goblin_node_start(g->node)) != GOBLIN_OK) goto fail;
    goblin_worker_params wp = p->worker;
    wp.connect[0] = g->url;
    wp.n_connect = 1;
    g->worker_log = wp.log;
    g->worker_log_user = wp.log_user;
    g->worker_log_level = wp.log_level;
    wp.log = worker_log;
    wp.log_user = g;
    wp.log_level = wrapped_level(g->worker_log, g->worker_log_level);
    for (int32_t i = 0; i < n_workers; i++) {
        if ((e = goblin_worker_new(&g->workers[i], &wp)) != GOBLIN_OK) goto fail;
        g->n = i + 1;
        if (pthread_create(&g->threads[i], NULL, worker_thread, g->workers[i]) != 0) {
            e = GOBLIN_ENOMEM;
            goto fail;
        }
        g->running[i] = true;
    }
    *out = g;
    return GOBLIN_OK;
fail:
    goblin_grid_free(g);
    return e;
}

goblin_err goblin_grid_connect(const char *url, const goblin_client_params *p, goblin_grid **out,
                               goblin_errbuf *err) {
    GOBLIN__ERRBUF(err, err_msg, err_cap);
    if (!url || !out) return GOBLIN_EINVAL;
    goblin_grid *g = grid_alloc();
    size_t len = strlen(url);
    if (g) g->url_copy = goblin__alloc(len + 1);
    if (!g || !g->url_copy) {
        goblin_grid_free(g);
        if (err_msg && err_cap) snprintf(err_msg, err_cap, "out of memory");
        return GOBLIN_ENOMEM;
    }
    memcpy(g->url_copy, url, len + 1);
    goblin_err e = goblin_client_connect(&g->client, url, p, err);
    if (e) {
        goblin_grid_free(g);
        return e;
    }
    *out = g;
    return GOBLIN_OK;
}

void goblin_grid_free(goblin_grid *g) {
    if (!g) return;
    for (int32_t i = 0; i < g->n; i++) goblin_worker_stop(g->workers[i]);
    for (int32_t i = 0; i < g->n; i++)
        if (g->running[i]) pthread_join(g->threads[i], NULL);
    goblin_node_free(g->node);
    for (int32_t i = 0; i < g->n; i++) goblin_worker_free(g->workers[i]);
    goblin_client_free(g->client);
    goblin__free(g->workers);
    goblin__free(g->threads);
    goblin__free(g->running);
    goblin__free(g->url_copy);
    pthread_mutex_destroy(&g->mu);
    goblin__free(g);
}

/* ---- queries ---------------------------------------------------------------------- */

bool goblin_grid_is_remote(const goblin_grid *g) { return g && g->client; }

goblin_node *goblin_grid_node(goblin_grid *g) { return g ? g->node : NULL; }

goblin_worker *goblin_grid_worker(goblin_grid *g, int32_t i) {
    return g && i >= 0 && i < g->n ? g->workers[i] : NULL;
}

int32_t goblin_grid_worker_count(const goblin_grid *g) { return g ? g->n : 0; }

const char *goblin_grid_url(const goblin_grid *g) {
    return !g ? NULL : g->client ? g->url_copy : g->url;
}

goblin_err goblin_grid_stats(goblin_grid *g, goblin_node_stats *out, goblin_node_worker_stats *workers,
                             int64_t cap, int64_t *n_workers) {
    if (!g || !out || cap < 0 || (cap > 0 && !workers)) return GOBLIN_EINVAL;
    if (g->client) {
        goblin_err e = goblin_client_stats(g->client, out, workers, cap, n_workers);
        if (e) return goblin__grid_fail(g, e, 0, NULL);
        return GOBLIN_OK;
    }
    goblin_node_stats_get(g->node, out);
    int64_t n = out->workers_seen;
    for (int64_t i = 0; i < n && i < cap; i++)
        if (goblin_node_worker_stats_get(g->node, i, &workers[i]) != GOBLIN_OK) {
            n = i;
            break;
        }
    if (n_workers) *n_workers = n;
    return GOBLIN_OK;
}

static void sleep_ms(uint32_t ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

goblin_err goblin_grid_wait_workers(goblin_grid *g, int64_t n, uint32_t timeout_ms) {
    if (!g) return GOBLIN_EINVAL;
    /* Embedded workers dial in over inproc:// within milliseconds; a remote node's
     * counters cost a request each. */
    uint32_t step = g->client ? 20 : 2;
    for (uint32_t waited = 0;; waited += step) {
        goblin_node_stats s;
        goblin_err e = goblin_grid_stats(g, &s, NULL, 0, NULL);
        if (e) return e;
        if (s.workers_connected >= n) return GOBLIN_OK;
        if (waited >= timeout_ms) return GOBLIN_ETIMEDOUT;
        sleep_ms(step);
    }
}
