/* libgoblin/grid/grid.c - the embedded grid: a node on a unique inproc:// URL and worker threads
 * (see grid.h). Nothing here bypasses the protocol: workers talk to the node
 * through nng exactly as remote ones do. */
#include "goblin/grid.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"

struct goblin_grid {
    char url[96];
    goblin_node *node;
    int32_t n;
    goblin_worker **workers;
    pthread_t *threads;
    bool *running;
};

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

goblin_err goblin_grid_local(int32_t n_workers, const goblin_grid_params *p, goblin_grid **out) {
    if (!out || n_workers < 1 || n_workers > 256) return GOBLIN_EINVAL;
    goblin_grid_params def;
    goblin_grid_params_default(&def);
    if (!p) p = &def;
    static atomic_uint counter;
    goblin_grid *g = goblin__calloc(1, sizeof *g);
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
    /* The node shares the cores with the workers, which keep them busy: a threaded
     * recomputation would wait at its kernels' barriers for descheduled threads. */
    if (np.recompute_threads == 0) np.recompute_threads = 1;
    if ((e = goblin_node_new(&g->node, &np)) != GOBLIN_OK) goto fail;
    if ((e = goblin_node_start(g->node)) != GOBLIN_OK) goto fail;
    goblin_worker_params wp = p->worker;
    wp.connect[0] = g->url;
    wp.n_connect = 1;
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

goblin_node *goblin_grid_node(goblin_grid *g) { return g ? g->node : NULL; }

goblin_worker *goblin_grid_worker(goblin_grid *g, int32_t i) {
    return g && i >= 0 && i < g->n ? g->workers[i] : NULL;
}

const char *goblin_grid_url(const goblin_grid *g) { return g ? g->url : NULL; }

void goblin_grid_free(goblin_grid *g) {
    if (!g) return;
    for (int32_t i = 0; i < g->n; i++) goblin_worker_stop(g->workers[i]);
    for (int32_t i = 0; i < g->n; i++)
        if (g->running[i]) pthread_join(g->threads[i], NULL);
    goblin_node_free(g->node);
    for (int32_t i = 0; i < g->n; i++) goblin_worker_free(g->workers[i]);
    goblin__free(g->workers);
    goblin__free(g->threads);
    goblin__free(g->running);
    goblin__free(g);
}
