/* common/work_queue.c: jobs run on another thread, in order, and finish on the
 * loop thread while the loop keeps running. */
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "work_queue.h"

#define NJOBS 64

struct order {
	pthread_t loop_thread;
	struct event_base *base;
	int ran[NJOBS];
	int nran;
	int finished[NJOBS];
	int nfinished;
	int ran_on_loop;
	int done_off_loop;
};

struct job {
	struct order *o;
	int index;
};

static void
order_run(void *arg)
{
	struct job *j = arg;

	if (pthread_equal(pthread_self(), j->o->loop_thread))
		j->o->ran_on_loop++;
	/* Only the worker writes ran[]; done reads it after the handoff. */
	j->o->ran[j->o->nran++] = j->index;
}

static void
order_done(void *arg)
{
	struct job *j = arg;

	if (!pthread_equal(pthread_self(), j->o->loop_thread))
		j->o->done_off_loop++;
	j->o->finished[j->o->nfinished++] = j->index;
	if (j->o->nfinished == NJOBS && j->o->base != NULL)
		event_base_loopbreak(j->o->base);
}

/* Threads of this process (the loop's and the workers). */
static int
threads(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int n = -1;

	assert_non_null(f);
	while (fgets(line, sizeof line, f) != NULL &&
	    sscanf(line, "Threads: %d", &n) != 1)
		;
	fclose(f);
	return n;
}

/* NJOBS jobs through q, the loop run until every one finished. */
static void
run_all(struct work_queue *q, struct order *o, struct job *jobs)
{
	for (int i = 0; i < NJOBS; i++) {
		jobs[i] = (struct job){ o, i };
		work_queue_submit(q, order_run, order_done, &jobs[i]);
	}
	event_base_dispatch(o->base);
	assert_int_equal(o->nfinished, NJOBS);
}

static void
test_jobs_run_in_order_and_finish_on_the_loop(void **state)
{
	struct order o = { .loop_thread = pthread_self() };
	struct job jobs[NJOBS];
	struct work_queue *q;

	(void)state;
	o.base = event_base_new();
	q = work_queue_new(o.base);
	assert_non_null(q);
	/* The thread starts with the queue and outlives a pool's idle time
	 * (5 s): a submit never has to start one, which could fail at the
	 * sandbox's limit of processes. */
	assert_int_equal(threads(), 2);
	sleep(6);
	assert_int_equal(threads(), 2);
	run_all(q, &o, jobs);
	for (int i = 0; i < NJOBS; i++) {
		assert_int_equal(o.ran[i], i);
		assert_int_equal(o.finished[i], i);
	}
	assert_int_equal(o.ran_on_loop, 0);
	assert_int_equal(o.done_off_loop, 0);
	work_queue_free(q);
	assert_int_equal(threads(), 1);
	event_base_free(o.base);
}

/* A job that can only finish once the loop has run a callback of its own:
 * if run() blocked the loop, the semaphore would never be posted. */
struct handshake {
	struct event_base *base;
	sem_t loop_alive;
	int saw_loop;
	int done;
};

static void
handshake_run(void *arg)
{
	struct handshake *h = arg;
	struct timespec deadline;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 30;
	h->saw_loop = sem_timedwait(&h->loop_alive, &deadline) == 0;
}

static void
handshake_done(void *arg)
{
	struct handshake *h = arg;

	h->done = 1;
	event_base_loopbreak(h->base);
}

static void
loop_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct handshake *h = arg;

	(void)fd;
	(void)what;
	sem_post(&h->loop_alive);
}

static void
test_loop_runs_while_a_job_runs(void **state)
{
	struct handshake h = { 0 };
	struct timeval now = { 0, 0 };
	struct work_queue *q;

	(void)state;
	h.base = event_base_new();
	sem_init(&h.loop_alive, 0, 0);
	q = work_queue_new(h.base);
	assert_non_null(q);
	work_queue_submit(q, handshake_run, handshake_done, &h);
	event_base_once(h.base, -1, EV_TIMEOUT, loop_tick_cb, &h, &now);
	event_base_dispatch(h.base);
	assert_true(h.done);
	assert_true(h.saw_loop);
	work_queue_free(q);
	sem_destroy(&h.loop_alive);
	event_base_free(h.base);
}

static void
test_free_finishes_every_job(void **state)
{
	struct order o = { .loop_thread = pthread_self() };
	struct job jobs[NJOBS];
	struct event_base *base = event_base_new();
	struct work_queue *q;

	(void)state;
	q = work_queue_new(base);
	assert_non_null(q);
	for (int i = 0; i < NJOBS; i++) {
		jobs[i] = (struct job){ &o, i };
		work_queue_submit(q, order_run, order_done, &jobs[i]);
	}
	work_queue_free(q);
	assert_int_equal(o.nran, NJOBS);
	assert_int_equal(o.nfinished, NJOBS);
	for (int i = 0; i < NJOBS; i++)
		assert_int_equal(o.finished[i], i);
	assert_int_equal(o.done_off_loop, 0);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jobs_run_in_order_and_finish_on_the_loop),
		cmocka_unit_test(test_loop_runs_while_a_job_runs),
		cmocka_unit_test(test_free_finishes_every_job),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
