/* libgoblin/net/share.h - inputs shared in place between a node and the workers of its own process.
 *
 * A node listening on an inproc:// URL publishes a share under that URL; a worker that
 * dials the same URL (it can only be in the same process) finds it. For such a worker
 * the node does not copy a task's input panels into the TASK message: it puts views of
 * the caller's arrays in the share under the panels' cache ids and sends the TASK with
 * those inputs "left out" (the cache directory, docs/runtime.md); the worker, not
 * finding them in its cache, takes them from the share and computes on the caller's
 * memory directly. Nothing changes on the wire, and no network peer can reach a share.
 *
 * Lifetime: every view belongs to a job token. When the job ends the node closes the
 * token (its views are removed); goblin_job_wait, before it reports the end, and
 * goblin_job_free wait until no worker computes on one any more
 * (goblin__share_job_end), so the caller may free its arrays then. A worker takes a view and its token in
 * one step under the share's lock (goblin__share_take), so it either sees the view
 * and holds the job open, or does not see it at all (and asks the node for the data). */
#ifndef GOBLIN_SHARE_H
#define GOBLIN_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#include "goblin/error.h"
#include "goblin/tensor.h"

typedef struct goblin__share goblin__share;
typedef struct goblin__share_job goblin__share_job;

/** Node: create a share and publish it under @p url (an inproc:// URL). NULL when out
 *  of memory or when another share is published under that URL. */
goblin__share *goblin__share_publish(const char *url);
/** Node: unpublish @p s (no new worker finds it) and drop the node's reference. */
void goblin__share_unpublish(goblin__share *s);
/** Worker: a reference to the share published under @p url, or NULL. */
goblin__share *goblin__share_find(const char *url);
/** Another reference to @p s (a job of the node); NULL stays NULL. */
goblin__share *goblin__share_ref(goblin__share *s);
/** Drop a reference from goblin__share_find or goblin__share_ref. NULL is a no-op. */
void goblin__share_release(goblin__share *s);

/** A job's token; goblin__share_job_end it, then goblin__share_job_free it. */
goblin__share_job *goblin__share_job_new(void);
void goblin__share_job_free(goblin__share_job *jt);
/** Put a view under @p id for job @p jt (a no-op when the job already put @p id).
 *  GOBLIN_ENOMEM, GOBLIN_ESTATE when the job has ended, GOBLIN_EBUSY when another
 *  job holds @p id (the caller then sends the data instead). */
goblin_err goblin__share_put(goblin__share *s, goblin__share_job *jt, uint64_t id, const goblin_tensor *view);
/** Remove the job's views (no worker takes one any more). Idempotent, never waits. */
void goblin__share_job_close(goblin__share *s, goblin__share_job *jt);
/** goblin__share_job_close, then wait until no worker computes on the job's views. */
void goblin__share_job_end(goblin__share *s, goblin__share_job *jt);

/** Worker: the view under @p id into @p out, and its job held open in *held (release
 *  with goblin__share_drop after computing); false when there is none. */
bool goblin__share_take(goblin__share *s, uint64_t id, goblin_tensor *out, goblin__share_job **held);
void goblin__share_drop(goblin__share *s, goblin__share_job *held);

#endif
