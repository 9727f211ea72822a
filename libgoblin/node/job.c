/* libgoblin/node/job.c - a job's status: its end (job_finish), a task's end
 * (task_settle, task_done), and the public job API: wait, progress, cancel, status,
 * error, plan info, free. */
#include "node_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"

/* ---- job status ----------------------------------------------------------------- */

void goblin__node_free_bufs(void ***bufs, int32_t n) {
    if (!*bufs) return;
    for (int32_t o = 0; o < n; o++) goblin__free((*bufs)[o]);
    goblin__free(*bufs);
    *bufs = NULL;
}

static void task_free_graph_bufs(goblin_job *j, task *t) {
    if (j->kind != JOB_GRAPH) return;
    goblin__node_free_bufs(&t->held, j->g->n_out);
    goblin__node_free_bufs(&t->outs, j->g->n_out);
    goblin__node_task_free_spot(j, t);
    t->holder = 0;
}

void goblin__node_job_finish(goblin_job *j, goblin_job_status st, goblin_err e, const char *fmt, ...) {
    j->running = false;
    goblin__share_job_close(j->share, j->stok);
    goblin__node_job_drop_panels(j);
    for (int64_t i = 0; i < j->ntasks; i++) {
        goblin__free(j->tasks[i].partial);
        j->tasks[i].partial = NULL;
        task_free_graph_bufs(j, &j->tasks[i]);
    }
    if (j->node)
        for (int64_t i = 0; i < j->node->n_leases; i++)
            if (j->node->leases[i].job == j) j->node->leases[i].moot = true;
    pthread_mutex_lock(&j->mu);
    if (j->status == GOBLIN_JOB_RUNNING) {
        j->status = st;
        j->err = e;
        if (fmt) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(j->msg, sizeof j->msg, fmt, ap);
            va_end(ap);
        }
    }
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->mu);
}

/* ---- a task's end --------------------------------------------------------------- */

static void job_progress_cb(goblin_job *j) {
    int64_t d;
    pthread_mutex_lock(&j->mu);
    d = j->done;
    pthread_mutex_unlock(&j->mu);
    if (j->jp.progress) j->jp.progress(j->jp.progress_user, d, j->ntasks);
}

/* Task @p ti has a result from peer @p by (-1: the node) and goes to @p state (T_DONE,
 * or T_HELD for its row panel's check): its other leases, if any, are moot. */
void goblin__node_task_settle(goblin_node *n, goblin_job *j, int64_t ti, uint8_t state, int32_t by) {
    task *t = &j->tasks[ti];
    t->state = state;
    goblin__node_task_set_by(n, t, by);
    /* n_leases counts the task's live leases, the one answered included (already
     * removed by the caller, or by recheck/escalation paths that hold none): only a
     * task with another live lease (a speculative duplicate) has any to mark. */
    if (t->n_leases > 1 || by < 0) goblin__node_task_leases_moot(n, j, ti);
    t->n_leases = 0;
}

/* Common end of an accepted task: counters, progress, the job's end. */
void goblin__node_task_done(goblin_node *n, goblin_job *j, int64_t ti) {
    task *t = &j->tasks[ti];
    n->st.tasks_completed++;
    int64_t now = goblin__now_ms();
    if (t->leased_at_ms) {
        j->sum_task_ms += now - t->leased_at_ms;
        j->n_task_ms++;
    }
    pthread_mutex_lock(&j->mu);
    int64_t d = ++j->done;
    pthread_mutex_unlock(&j->mu);
    job_progress_cb(j);
    if (d == j->ntasks) {
        if (j->kind == JOB_GRAPH) {
            goblin_err e = goblin__node_graph_combine(j);
            if (e) {
                goblin__node_job_finish(j, GOBLIN_JOB_FAILED, e, "combining the chunks' outputs failed: %s",
                                        goblin_strerror(e));
                return;
            }
        }
        goblin__node_log(n, GOBLIN_LOG_INFO, "job %llu done: %lld tasks", (unsigned long long)j->id, (long long)j->ntasks);
        goblin__node_job_finish(j, GOBLIN_JOB_DONE, GOBLIN_OK, NULL);
    }
}

/* ---- jobs: API ------------------------------------------------------------------ */

void goblin_job_params_default(goblin_job_params *p) {
    if (p) memset(p, 0, sizeof *p);
}

goblin_err goblin_job_wait(goblin_job *j, int64_t timeout_ms) {
    if (!j) return GOBLIN_EINVAL;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    if (timeout_ms >= 0) {
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (timeout_ms % 1000) * 1000000;
        if (dl.tv_nsec >= 1000000000) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000;
        }
    }
    pthread_mutex_lock(&j->mu);
    while (j->status == GOBLIN_JOB_RUNNING) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&j->cond, &j->mu);
        } else if (pthread_cond_timedwait(&j->cond, &j->mu, &dl) == ETIMEDOUT) {
            break;
        }
    }
    goblin_err e = j->status == GOBLIN_JOB_RUNNING ? GOBLIN_ETIMEDOUT
                   : j->status == GOBLIN_JOB_DONE  ? GOBLIN_OK
                                                   : j->err;
    pthread_mutex_unlock(&j->mu);
    /* Ended: no worker may still read the caller's A and B in place once we return. */
    if (e != GOBLIN_ETIMEDOUT) goblin__share_job_end(j->share, j->stok);
    return e;
}

void goblin_job_progress(goblin_job *j, int64_t *done, int64_t *total) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    if (done) *done = j->status == GOBLIN_JOB_DONE ? j->ntasks : j->done;
    if (total) *total = j->ntasks;
    pthread_mutex_unlock(&j->mu);
}

void goblin_job_cancel(goblin_job *j) {
    if (!j) return;
    goblin_node *n = j->node;
    if (n) pthread_mutex_lock(&n->mu);
    if (j->running) goblin__node_job_finish(j, GOBLIN_JOB_CANCELED, GOBLIN_ECANCELED, "canceled by the caller");
    if (n) pthread_mutex_unlock(&n->mu);
    if (n) goblin__node_wake(n);
}

goblin_job_status goblin_job_get_status(goblin_job *j) {
    if (!j) return GOBLIN_JOB_FAILED;
    pthread_mutex_lock(&j->mu);
    goblin_job_status s = j->status;
    pthread_mutex_unlock(&j->mu);
    return s;
}

const char *goblin_job_error(goblin_job *j) { return j ? j->msg : ""; }

goblin_err goblin_job_plan_info(goblin_job *j, goblin_job_plan *out) {
    if (!j || !out) return GOBLIN_EINVAL;
    if (!j->plan) return GOBLIN_ENOTFOUND;
    *out = j->info;
    return GOBLIN_OK;
}

void goblin_job_free(goblin_job *j) {
    if (!j) return;
    goblin_node *n = j->node;
    if (n) {
        pthread_mutex_lock(&n->mu);
        if (j->running) goblin__node_job_finish(j, GOBLIN_JOB_CANCELED, GOBLIN_ECANCELED, "freed while running");
        /* Leases of this job stay in the table, moot and detached from it, until
         * answered or expired: their TASK messages may still sit in the workers'
         * pipes, and each keeps its queue slot until then (releasing the slots now
         * let the node queue more messages than a pipe holds, and nng dropped them). */
        for (int64_t i = 0; i < n->n_leases; i++)
            if (n->leases[i].job == j) {
                n->leases[i].moot = true;
                n->leases[i].job = NULL;
            }
        for (int32_t k = 0; k < n->n_jobs; k++)
            if (n->jobs[k] == j) {
                n->jobs[k] = n->jobs[--n->n_jobs];
                break;
            }
        pthread_mutex_unlock(&n->mu);
    }
    if (j->tasks)
        for (int64_t i = 0; i < j->ntasks; i++) {
            goblin__free(j->tasks[i].partial);
            if (j->g) task_free_graph_bufs(j, &j->tasks[i]);
        }
    goblin__node_job_drop_panels(j);
    goblin__share_job_end(j->share, j->stok);
    goblin__share_job_free(j->stok);
    goblin__share_release(j->share);
    goblin__node_gjob_free(j->g);
    goblin_buffer_free(j->gser);
    goblin__free(j->tasks);
    goblin__free(j->tile_done);
    goblin__plan_free(j->plan);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cond);
    goblin__free(j);
}
