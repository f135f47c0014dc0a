/*
 * A pool of worker threads for jobs that may each block for long on their
 * own: a read from a slow disk, the removal of a huge tree. Unlike a
 * work_queue (work_queue.h), whose jobs run one after the other, a job
 * here does not wait behind another: an idle thread takes it, else a new
 * thread starts, up to the pool's cap (past it, jobs wait for a thread).
 * Threads idle for a while exit, so a quiet program holds none: in the
 * agent each counts against the sandbox's limit of processes. The agent
 * (file I/O) and sandboxd (workspace transfers to object storage) use it.
 *
 * run(arg) runs on a worker and must not touch the event loop; done(arg)
 * then runs on the loop thread, never from inside work_pool_submit.
 */
#ifndef WORK_POOL_H
#define WORK_POOL_H

#include "error.h"
#include "work_queue.h"

struct event_base;
struct work_pool;

/* NULL with err when the loop cannot be woken (no eventfd). No thread
 * starts before the first job. */
struct work_pool *work_pool_new(struct event_base *base, unsigned max_threads,
    struct error *err);
/* Starts a thread now and lets none idle out: with max_threads 1, a
 * submit then never needs a new thread and never fails (work_queue.c).
 * -1 with err when the thread cannot start. */
int work_pool_keep_one(struct work_pool *p, struct error *err);
/* run(arg) on a worker, then done(arg) on the loop. -1 with err (503)
 * when the job would need a new thread and none can be started (at the
 * limit of processes, in a sandbox): the job is not queued. */
int work_pool_submit(struct work_pool *p, work_cb run, work_cb done,
    void *arg, struct error *err);
/* After the loop ended: waits for the jobs under way (queued ones run
 * too), joins every thread, runs the pending done callbacks, frees. */
void work_pool_free(struct work_pool *p);

#endif
