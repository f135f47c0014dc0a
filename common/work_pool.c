#include "work_pool.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "xmalloc.h"

#define IDLE_SECONDS	5	/* a thread without work this long exits */

/* One submitted job; freed on the loop thread after done ran. */
struct pool_job {
	work_cb run;
	work_cb done;
	void *arg;
	struct pool_job *next;
};

struct pool_list {
	struct pool_job *head;
	struct pool_job **tail;
};

/* Owned by whoever made it; work_pool_free releases everything. */
struct work_pool {
	struct event *ev;
	int efd;
	pthread_mutex_t lock;
	pthread_cond_t wake;		/* idle workers wait on it */
	pthread_cond_t gone;		/* work_pool_free waits for nthreads 0 */
	/* Under lock: */
	unsigned max, nthreads, nidle, ntodo;
	int stopping;
	int keep;			/* threads never idle out */
	struct pool_list todo;		/* workers take from here */
	struct pool_list finished;	/* the loop takes from here */
	pthread_t *exited;		/* returned threads, to be joined */
	size_t nexited, exitedcap;
};

static void
list_init(struct pool_list *l)
{
	l->head = NULL;
	l->tail = &l->head;
}

static void
list_push(struct pool_list *l, struct pool_job *j)
{
	j->next = NULL;
	*l->tail = j;
	l->tail = &j->next;
}

static struct pool_job *
list_pop(struct pool_list *l)
{
	struct pool_job *j = l->head;

	if (j != NULL && (l->head = j->next) == NULL)
		l->tail = &l->head;
	return j;
}

static void
notify_loop(struct work_pool *p)
{
	uint64_t one = 1;

	while (write(p->efd, &one, sizeof one) < 0 && errno == EINTR)
		;
}

/* Wait for work under lock; 0 once the thread has been idle too long. */
static int
wait_for_work(struct work_pool *p)
{
	struct timespec until;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += IDLE_SECONDS;
	while (p->todo.head == NULL && !p->stopping) {
		int rc;

		p->nidle++;
		rc = p->keep ? pthread_cond_wait(&p->wake, &p->lock) :
		    pthread_cond_timedwait(&p->wake, &p->lock, &until);
		p->nidle--;
		if (rc == ETIMEDOUT && p->todo.head == NULL)
			return 0;
	}
	return p->todo.head != NULL;
}

static void *
worker_main(void *arg)
{
	struct work_pool *p = arg;
	struct pool_job *j;

	pthread_mutex_lock(&p->lock);
	while (wait_for_work(p)) {
		j = list_pop(&p->todo);
		p->ntodo--;
		pthread_mutex_unlock(&p->lock);

		j->run(j->arg);

		pthread_mutex_lock(&p->lock);
		list_push(&p->finished, j);
		notify_loop(p);
	}
	/* The loop joins it later: a returned thread costs no task, and
	 * joining it then never waits for more than its last instructions. */
	if (p->nexited == p->exitedcap) {
		p->exitedcap = p->exitedcap ? p->exitedcap * 2 : 8;
		p->exited = xreallocarray(p->exited, p->exitedcap,
		    sizeof *p->exited);
	}
	p->exited[p->nexited++] = pthread_self();
	if (--p->nthreads == 0)
		pthread_cond_signal(&p->gone);
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Join the threads that returned. On the loop thread. */
static void
reap(struct work_pool *p)
{
	pthread_t *v;
	size_t n;

	pthread_mutex_lock(&p->lock);
	v = p->exited;
	n = p->nexited;
	p->exited = NULL;
	p->nexited = p->exitedcap = 0;
	pthread_mutex_unlock(&p->lock);
	for (size_t i = 0; i < n; i++)
		pthread_join(v[i], NULL);
	free(v);
}

static void
drain_finished(struct work_pool *p)
{
	struct pool_job *j, *next;

	pthread_mutex_lock(&p->lock);
	j = p->finished.head;
	list_init(&p->finished);
	pthread_mutex_unlock(&p->lock);
	for (; j != NULL; j = next) {
		next = j->next;
		j->done(j->arg);
		free(j);
	}
}

static void
finished_cb(evutil_socket_t fd, short what, void *arg)
{
	uint64_t count;

	(void)what;
	if (read(fd, &count, sizeof count) < 0 && errno != EAGAIN &&
	    errno != EINTR)
		log_warn("work pool: eventfd read: %s", strerror(errno));
	reap(arg);
	drain_finished(arg);
}

struct work_pool *
work_pool_new(struct event_base *base, unsigned max_threads,
    struct error *err)
{
	struct work_pool *p = xcalloc(1, sizeof *p);
	pthread_condattr_t ca;

	p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->efd < 0) {
		error_set_errno(err, 503, errno, "cannot make a worker pool");
		free(p);
		return NULL;
	}
	p->max = max_threads > 0 ? max_threads : 1;
	list_init(&p->todo);
	list_init(&p->finished);
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->wake, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&p->gone, NULL);
	p->ev = event_new(base, p->efd, EV_READ | EV_PERSIST, finished_cb, p);
	event_add(p->ev, NULL);
	return p;
}

/* Under lock. Signals stay with the loop thread, whose libevent handlers
 * expect them. */
static int
start_thread(struct work_pool *p)
{
	sigset_t all, old;
	pthread_t t;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&t, NULL, worker_main, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0)
		p->nthreads++;
	return rc;
}

int
work_pool_keep_one(struct work_pool *p, struct error *err)
{
	int rc;

	pthread_mutex_lock(&p->lock);
	p->keep = 1;
	rc = p->nthreads == 0 ? start_thread(p) : 0;
	pthread_mutex_unlock(&p->lock);
	if (rc != 0)
		error_set(err, 503, "cannot start a worker thread: %s",
		    strerror(rc));
	return rc != 0 ? -1 : 0;
}

int
work_pool_submit(struct work_pool *p, work_cb run, work_cb done, void *arg,
    struct error *err)
{
	struct pool_job *j;
	int rc;

	reap(p);
	pthread_mutex_lock(&p->lock);
	if (p->stopping) {
		pthread_mutex_unlock(&p->lock);
		error_set(err, 503, "the worker pool is stopping");
		return -1;
	}
	if (p->ntodo + 1 > p->nidle && p->nthreads < p->max &&
	    (rc = start_thread(p)) != 0) {
		pthread_mutex_unlock(&p->lock);
		error_set(err, 503, "cannot start a worker thread: %s (the "
		    "limit of processes may be reached)", strerror(rc));
		return -1;
	}
	j = xmalloc(sizeof *j);
	j->run = run;
	j->done = done;
	j->arg = arg;
	list_push(&p->todo, j);
	p->ntodo++;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

void
work_pool_free(struct work_pool *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = 1;
	pthread_cond_broadcast(&p->wake);
	while (p->nthreads > 0)
		pthread_cond_wait(&p->gone, &p->lock);
	pthread_mutex_unlock(&p->lock);
	reap(p);
	event_free(p->ev);
	drain_finished(p);
	close(p->efd);
	pthread_cond_destroy(&p->gone);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
