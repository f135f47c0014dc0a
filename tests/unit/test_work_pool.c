/* common/work_pool.c: a job never waits behind a blocked one, done runs on
 * the loop, the cap holds, and free waits for what is under way. */
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>
#include <event2/event.h>

#include "work_pool.h"

struct blocker {
	struct event_base *base;
	pthread_t loop_thread;
	sem_t release;		/* the blocked job waits for this */
	int released;		/* the blocked job saw the release */
	int ndone;
	int off_loop;
};

static void
blocked_run(void *arg)
{
	struct blocker *b = arg;
	struct timespec deadline;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 30;
	b->released = sem_timedwait(&b->release, &deadline) == 0;
}

/* The second job frees the first: it could not if it waited behind it. */
static void
quick_run(void *arg)
{
	struct blocker *b = arg;

	sem_post(&b->release);
}

static void
count_done(void *arg)
{
	struct blocker *b = arg;

	if (!pthread_equal(pthread_self(), b->loop_thread))
		b->off_loop++;
	if (++b->ndone == 2)
		event_base_loopbreak(b->base);
}

static void
test_a_job_does_not_wait_behind_a_blocked_one(void **state)
{
	struct blocker b = { .loop_thread = pthread_self() };
	struct error err = { 0 };
	struct work_pool *p;

	(void)state;
	b.base = event_base_new();
	sem_init(&b.release, 0, 0);
	p = work_pool_new(b.base, 4, &err);
	assert_non_null(p);
	assert_int_equal(work_pool_submit(p, blocked_run, count_done, &b,
	    &err), 0);
	assert_int_equal(work_pool_submit(p, quick_run, count_done, &b, &err),
	    0);
	event_base_dispatch(b.base);
	assert_int_equal(b.ndone, 2);
	assert_true(b.released);
	assert_int_equal(b.off_loop, 0);
	work_pool_free(p);
	sem_destroy(&b.release);
	event_base_free(b.base);
}

struct capped {
	atomic_int running;
	atomic_int most;
	int ndone;
};

static void
capped_run(void *arg)
{
	struct capped *c = arg;
	int now = atomic_fetch_add(&c->running, 1) + 1;
	int most = atomic_load(&c->most);
	struct timespec pause = { 0, 2 * 1000 * 1000 };

	while (now > most && !atomic_compare_exchange_weak(&c->most, &most, now))
		;
	nanosleep(&pause, NULL);
	atomic_fetch_sub(&c->running, 1);
}

static void
capped_done(void *arg)
{
	((struct capped *)arg)->ndone++;
}

static void
test_the_cap_holds_and_free_runs_everything(void **state)
{
	struct event_base *base = event_base_new();
	struct capped c = { 0 };
	struct error err = { 0 };
	struct work_pool *p = work_pool_new(base, 2, &err);

	(void)state;
	assert_non_null(p);
	for (int i = 0; i < 32; i++)
		assert_int_equal(work_pool_submit(p, capped_run, capped_done,
		    &c, &err), 0);
	work_pool_free(p);
	assert_int_equal(c.ndone, 32);
	assert_true(atomic_load(&c.most) <= 2);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_job_does_not_wait_behind_a_blocked_one),
		cmocka_unit_test(test_the_cap_holds_and_free_runs_everything),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
