#include "work_queue.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "xmalloc.h"

/* One submitted job; freed on the loop thread after done ran. */
struct work_item {
	work_cb run;
	work_cb done;
	void *arg;
	struct work_item *next;
};

struct work_list {
	struct work_item *head;
	struct work_item **tail;
};

/* Owned by whoever created it; work_queue_free releases everything. */
struct work_queue {
	struct event *ev;
	int efd;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	int stopping;
	struct work_list todo;		/* worker takes from here */
	struct work_list finished;	/* loop takes from here */
};

static void
list_init(struct work_list *l)
{
	l->head = NULL;
	l->tail = &l->head;
}

static void
list_push(struct work_list *l, struct work_item *it)
{
	it->next = NULL;
	*l->tail = it;
	l->tail = &it->next;
}

static void
notify_loop(struct work_queue *q)
{
	uint64_t one = 1;

	/* Fails only when the counter would overflow, which cannot happen
	 * with one write per job and a reader that resets it. */
	while (write(q->efd, &one, sizeof one) < 0 && errno == EINTR)
		;
}

static void *
worker_main(void *arg)
{
	struct work_queue *q = arg;
	struct work_item *it;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (q->todo.head == NULL && !q->stopping)
			pthread_cond_wait(&q->wake, &q->lock);
		it = q->todo.head;
		if (it == NULL)
			break;
		q->todo.head = it->next;
		if (q->todo.head == NULL)
			q->todo.tail = &q->todo.head;
		pthread_mutex_unlock(&q->lock);

		it->run(it->arg);

		pthread_mutex_lock(&q->lock);
		list_push(&q->finished, it);
		notify_loop(q);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

/* Run the done callbacks of every finished job, in order. */
static void
drain_finished(struct work_queue *q)
{
	struct work_item *it, *next;

	pthread_mutex_lock(&q->lock);
	it = q->finished.head;
	list_init(&q->finished);
	pthread_mutex_unlock(&q->lock);
	for (; it != NULL; it = next) {
		next = it->next;
		it->done(it->arg);
		free(it);
	}
}

static void
finished_cb(evutil_socket_t fd, short what, void *arg)
{
	uint64_t count;

	(void)what;
	/* Reading resets the counter; the lists say what is done. */
	if (read(fd, &count, sizeof count) < 0 && errno != EAGAIN &&
	    errno != EINTR)
		log_warn("work queue: eventfd read: %s", strerror(errno));
	drain_finished(arg);
}

struct work_queue *
work_queue_new(struct event_base *base)
{
	struct work_queue *q = xcalloc(1, sizeof *q);
	sigset_t all, old;
	int rc;

	q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (q->efd < 0) {
		log_error("work queue: eventfd: %s", strerror(errno));
		free(q);
		return NULL;
	}
	list_init(&q->todo);
	list_init(&q->finished);
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->wake, NULL);
	q->ev = event_new(base, q->efd, EV_READ | EV_PERSIST, finished_cb, q);
	event_add(q->ev, NULL);

	/* The thread inherits the mask: signals stay with the loop thread,
	 * whose libevent handlers expect them. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&q->thread, NULL, worker_main, q);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		log_error("work queue: cannot start a thread: %s", strerror(rc));
		event_free(q->ev);
		close(q->efd);
		pthread_cond_destroy(&q->wake);
		pthread_mutex_destroy(&q->lock);
		free(q);
		return NULL;
	}
	return q;
}

void
work_queue_submit(struct work_queue *q, work_cb run, work_cb done, void *arg)
{
	struct work_item *it = xmalloc(sizeof *it);

	it->run = run;
	it->done = done;
	it->arg = arg;
	pthread_mutex_lock(&q->lock);
	list_push(&q->todo, it);
	pthread_cond_signal(&q->wake);
	pthread_mutex_unlock(&q->lock);
}

void
work_queue_free(struct work_queue *q)
{
	if (q == NULL)
		return;
	pthread_mutex_lock(&q->lock);
	q->stopping = 1;
	pthread_cond_signal(&q->wake);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
	event_free(q->ev);
	drain_finished(q);
	close(q->efd);
	pthread_cond_destroy(&q->wake);
	pthread_mutex_destroy(&q->lock);
	free(q);
}
