/* libgoblin/grid/grid_impl.h - the grid handle's insides, shared by grid.c (the two kinds of
 * grid, their counters and messages) and job.c (jobs on either). */
#ifndef GOBLIN__GRID_IMPL_H
#define GOBLIN__GRID_IMPL_H

#include <pthread.h>
#include <goblin/grid.h>

#define GOBLIN__GRID_MSG 600

struct goblin_grid {
    /* embedded (goblin_grid_local) */
    goblin_node *node;
    int32_t n;
    goblin_worker **workers;
    pthread_t *threads;
    bool *running;
    /* remote (goblin_grid_connect) */
    goblin_client *client;
    char *url_copy;
    char url[96];           /* embedded: the inproc:// URL */
    /* the user's log hooks (embedded), wrapped to keep the last warning or error line */
    goblin_log_fn node_log, worker_log;
    void *node_log_user, *worker_log_user;
    goblin_log_level node_log_level, worker_log_level;
    pthread_mutex_t mu;     /* guards log_seq, log_line and err */
    uint64_t log_seq;       /* warning and error lines logged so far */
    char log_line[GOBLIN__GRID_MSG];
    char err[GOBLIN__GRID_MSG];
};

/* The number of warning and error lines logged so far (a mark for goblin__grid_fail). */
uint64_t goblin__grid_log_mark(goblin_grid *g);
/* Record why a call failed: @p why if not NULL, else (embedded) the newest line logged
 * since @p mark, else (remote) the client's message, else goblin_strerror(@p e).
 * Returns @p e. */
goblin_err goblin__grid_fail(goblin_grid *g, goblin_err e, uint64_t mark, const char *why);
/* Clear the message after a success. */
void goblin__grid_ok(goblin_grid *g);

#endif
