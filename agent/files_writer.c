/*
 * The disk writer: a thread that writes queued data to files. write() to a
 * regular file never says EAGAIN; when the disk lags, the kernel makes it
 * block instead, which in the loop would stall every request of the agent.
 * So uploads hand their data to this thread and pause their socket while
 * the queue is over its high mark: TCP then holds the client back, and the
 * agent's memory stays at the queue's size whatever the upload's.
 *
 * The thread and the loop share only the queue, under one mutex; the
 * thread wakes the loop through an eventfd. The thread, and its eventfd,
 * start only once an upload outgrows what the loop writes itself; when
 * they cannot (the sandbox at its limit of processes or descriptors), the
 * upload fails with 503 and the agent goes on. Freeing never waits for a
 * write under way: the thread finishes it, closes what was handed to it
 * and frees the writer itself.
 */
#include "agent.h"
#include "files_writer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>

#include "fdio.h"
#include "log.h"
#include "xmalloc.h"

#define WRITER_CHUNK	(256 * 1024)	/* data per queue element */
#define WRITER_HIGH	(1024 * 1024)	/* producer pauses over this */
#define WRITER_LOW	(256 * 1024)	/* and resumes under this */
#define WRITER_INLINE	(64 * 1024)	/* first bytes written by the loop */

/* One write or close; owned by the queue, freed by the thread. */
struct chunk {
	struct chunk *next;
	int fd;
	int close;	/* close fd instead of writing */
	size_t len, cap;
	char data[];
};

/* Owned by one request until files_writer_free; then by its thread, if
 * one runs, which frees it on its way out. */
struct files_writer {
	pthread_t thread;
	int started;
	size_t inlined;		/* bytes written before the thread started */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Under lock: */
	struct chunk *head, *tail;
	size_t queued;		/* bytes queued or being written */
	int error;		/* errno of the first failed write */
	int stop;		/* drop the rest and exit */
	int error_told;		/* the loop was woken for error */
	size_t wake_at;		/* wake the loop when queued <= this */
	int waiting;		/* wake_at is armed */
	/* Loop side: */
	struct event_base *base;
	int efd;
	struct event *ev;
	void (*cb)(void *);
	void *arg;
};

static void
wake_loop(struct files_writer *w)
{
	uint64_t one = 1;

	while (write(w->efd, &one, sizeof one) < 0 && errno == EINTR)
		;
}

static void *
writer_main(void *arg)
{
	struct files_writer *w = arg;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct chunk *c;
		int skip, e = 0, wake = 0;

		while (w->head == NULL && !w->stop)
			pthread_cond_wait(&w->cond, &w->lock);
		if (w->head == NULL)
			break;
		c = w->head;
		w->head = c->next;
		if (w->head == NULL)
			w->tail = NULL;
		skip = w->stop || w->error != 0;
		pthread_mutex_unlock(&w->lock);

		if (c->close)
			close(c->fd);
		else if (!skip)
			e = fdio_write_all(c->fd, c->data, c->len) < 0 ? errno : 0;

		pthread_mutex_lock(&w->lock);
		w->queued -= c->len;
		free(c);
		if (e != 0 && w->error == 0)
			w->error = e;
		if (w->error != 0 && !w->error_told) {
			w->error_told = 1;
			wake = 1;
		}
		if (w->waiting && w->queued <= w->wake_at) {
			w->waiting = 0;
			wake = 1;
		}
		if (wake && !w->stop)
			wake_loop(w);
	}
	pthread_mutex_unlock(&w->lock);
	/* Only a stop ends the loop: the writer is this thread's now. */
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	free(w);
	return NULL;
}

static void
wakeup_cb(evutil_socket_t fd, short what, void *arg)
{
	struct files_writer *w = arg;
	uint64_t n;

	(void)what;
	(void)!read(fd, &n, sizeof n);
	w->cb(w->arg);
}

struct files_writer *
files_writer_new(struct event_base *base, void (*cb)(void *), void *arg)
{
	struct files_writer *w = xcalloc(1, sizeof *w);

	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->base = base;
	w->cb = cb;
	w->arg = arg;
	w->efd = -1;
	return w;
}

/* The thread starts once an upload outgrows WRITER_INLINE. Signals stay
 * with the loop's thread. */
static int
start_thread(struct files_writer *w, struct error *err)
{
	sigset_t all, old;
	int e;

	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->efd < 0) {
		error_set_errno(err, 503, errno, "cannot write the upload: no "
		    "descriptor to wake the agent with");
		return -1;
	}
	w->ev = event_new(w->base, w->efd, EV_READ | EV_PERSIST, wakeup_cb, w);
	event_add(w->ev, NULL);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	e = pthread_create(&w->thread, NULL, writer_main, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e != 0) {
		event_free(w->ev);
		w->ev = NULL;
		close(w->efd);
		w->efd = -1;
		error_set(err, 503, "cannot start a thread to write the upload: "
		    "%s (the sandbox may be at its limit of processes)",
		    strerror(e));
		return -1;
	}
	pthread_detach(w->thread);
	w->started = 1;
	return 0;
}

static void
enqueue(struct files_writer *w, struct chunk *c)
{
	if (w->tail != NULL)
		w->tail->next = c;
	else
		w->head = c;
	w->tail = c;
	w->queued += c->len;
	pthread_cond_signal(&w->cond);
}

int
files_writer_write(struct files_writer *w, int fd, const void *data, size_t len,
    struct error *err)
{
	struct chunk *c;
	int over;

	/* A small upload fits in the page cache at once: writing it here
	 * costs less than starting a thread. */
	if (!w->started && w->inlined + len <= WRITER_INLINE) {
		w->inlined += len;
		if (w->error == 0 && fdio_write_all(fd, data, len) < 0)
			w->error = errno;
		return 0;
	}
	if (!w->started && start_thread(w, err) < 0)
		return -1;
	pthread_mutex_lock(&w->lock);
	c = w->tail;
	if (c != NULL && !c->close && c->fd == fd && c->cap - c->len >= len) {
		/* The thread has not taken the tail yet: top it up. */
		memcpy(c->data + c->len, data, len);
		c->len += len;
		w->queued += len;
	} else {
		size_t cap = len > WRITER_CHUNK ? len : WRITER_CHUNK;

		pthread_mutex_unlock(&w->lock);
		c = xmalloc(sizeof *c + cap);
		c->next = NULL;
		c->fd = fd;
		c->close = 0;
		c->len = len;
		c->cap = cap;
		memcpy(c->data, data, len);
		pthread_mutex_lock(&w->lock);
		enqueue(w, c);
	}
	over = w->queued > WRITER_HIGH;
	if (over) {
		w->wake_at = WRITER_LOW;
		w->waiting = 1;
	}
	pthread_mutex_unlock(&w->lock);
	return over;
}

void
files_writer_close(struct files_writer *w, int fd)
{
	struct chunk *c;

	if (!w->started) {
		close(fd);
		return;
	}
	c = xcalloc(1, sizeof *c);
	c->fd = fd;
	c->close = 1;
	pthread_mutex_lock(&w->lock);
	enqueue(w, c);
	pthread_mutex_unlock(&w->lock);
}

int
files_writer_flush(struct files_writer *w)
{
	int done;

	pthread_mutex_lock(&w->lock);
	done = w->queued == 0 || w->error != 0;
	if (!done) {
		w->wake_at = 0;
		w->waiting = 1;
	}
	pthread_mutex_unlock(&w->lock);
	return done;
}

int
files_writer_error(struct files_writer *w)
{
	int e;

	pthread_mutex_lock(&w->lock);
	e = w->error;
	pthread_mutex_unlock(&w->lock);
	return e;
}

void
files_writer_free(struct files_writer *w)
{
	struct event *ev;
	int efd;

	if (w == NULL)
		return;
	if (!w->started) {
		pthread_mutex_destroy(&w->lock);
		pthread_cond_destroy(&w->cond);
		free(w);
		return;
	}
	/* Taken first: once stop is set the thread may free w at any time.
	 * It wakes the loop only while stop is clear, so the eventfd is
	 * ours to close after. */
	ev = w->ev;
	efd = w->efd;
	pthread_mutex_lock(&w->lock);
	w->stop = 1;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	event_free(ev);
	close(efd);
}
