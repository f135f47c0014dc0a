/*
 * Work that would stall the event loop (git on a large repository) runs on
 * a worker thread, and its completion runs back on the loop.
 *
 * A queue has one thread, so its jobs run one at a time in the order they
 * were submitted: one queue per resource that must not be used twice at
 * once (the workspace repository). run(arg) runs on the worker and must not
 * touch the event loop or anything the loop thread uses (libevent is built
 * without evthread here). done(arg) then runs on the loop thread, in the
 * same order, and may reply, free arg or submit more work.
 *
 * The worker wakes the loop through an eventfd watched by a persistent
 * event; the worker writes to it, nothing else crosses threads but the two
 * lists under the mutex.
 */
#ifndef WORK_QUEUE_H
#define WORK_QUEUE_H

struct event_base;
struct work_queue;

typedef void (*work_cb)(void *arg);

/* The worker thread starts here, with every signal blocked (the loop
 * thread handles them). NULL if the thread or the eventfd cannot be had. */
struct work_queue *work_queue_new(struct event_base *base);
/* run(arg) on the worker, then done(arg) on the loop. */
void work_queue_submit(struct work_queue *q, work_cb run, work_cb done,
    void *arg);
/* Runs what is still queued, joins the thread, then runs every pending
 * done on the calling (loop) thread before freeing; done callbacks must
 * not submit to q from there. */
void work_queue_free(struct work_queue *q);

#endif
