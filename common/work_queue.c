/*
 * A work queue is a pool of one thread that is kept: its jobs run one at a
 * time, in order, and a submit never needs a thread it could fail to get.
 */
#include "work_queue.h"

#include <stdlib.h>

#include "log.h"
#include "work_pool.h"
#include "xmalloc.h"

struct work_queue {
	struct work_pool *pool;
};

struct work_queue *
work_queue_new(struct event_base *base)
{
	struct work_queue *q = xcalloc(1, sizeof *q);
	struct error err;

	if ((q->pool = work_pool_new(base, 1, &err)) == NULL ||
	    work_pool_keep_one(q->pool, &err) < 0) {
		log_error("work queue: %s", err.msg);
		work_pool_free(q->pool);
		free(q);
		return NULL;
	}
	return q;
}

void
work_queue_submit(struct work_queue *q, work_cb run, work_cb done, void *arg)
{
	struct error err;

	/* Fails only once work_queue_free began: a caller's bug. */
	if (work_pool_submit(q->pool, run, done, arg, &err) < 0)
		fatal("work queue: %s", err.msg);
}

void
work_queue_free(struct work_queue *q)
{
	if (q == NULL)
		return;
	work_pool_free(q->pool);
	free(q);
}
