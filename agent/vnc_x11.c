/*
 * Where the pointer is: VNC does not tell (TigerVNC sends its PointerPos
 * only when a program warps the pointer, not when a VNC client, a viewer
 * in a browser among them, or XTest moves it), so this asks the X server
 * itself, QueryPointer on the root window, over libxcb. Used by the VNC
 * helper (vnc_helper.c), one request at a time; the connection stays open
 * between queries and is made anew after a failure.
 *
 * The X server is the user's, like the VNC server. libxcb checks what it
 * reads, but waits without end for whatever a server promised (the setup
 * reply, the rest of a reply whose length was announced), so every
 * exchange has a deadline kept by a guard thread: once it passes, the
 * guard shuts the socket down and libxcb's wait ends in an error. What a
 * hostile server can still do is announce one reply of up to 2 GiB
 * (libxcb's own cap) and fill it before the deadline; the memory is the
 * helper's (the user's own process), freed with the connection.
 */
#include "vnc.h"
#include "vnc_helper.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <xcb/xcb.h>
#include <xcb/xcbext.h>

#include "timing.h"
#include "xmalloc.h"

#define X11_TIMEOUT_MS 2000

struct vnc_x11 {
	char path[sizeof ((struct sockaddr_un *)0)->sun_path];
	xcb_connection_t *conn;		/* NULL while closed */
	xcb_window_t root;		/* the first screen's root window */

	/* The guard: while armed (fd >= 0), shuts fd down at deadline. */
	pthread_t guard;
	int guard_running;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int fd;
	struct timespec deadline;	/* CLOCK_MONOTONIC */
	int idle;			/* the guard waits for no deadline */
	int quit;
};

static void *
guard_main(void *arg)
{
	struct vnc_x11 *x = arg;
	struct timespec now;

	pthread_mutex_lock(&x->lock);
	while (!x->quit) {
		if (x->fd < 0) {
			x->idle = 1;
			pthread_cond_wait(&x->cond, &x->lock);
			x->idle = 0;
			continue;
		}
		pthread_cond_timedwait(&x->cond, &x->lock, &x->deadline);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (x->fd >= 0 && (now.tv_sec > x->deadline.tv_sec ||
		    (now.tv_sec == x->deadline.tv_sec &&
		    now.tv_nsec >= x->deadline.tv_nsec))) {
			/* libxcb's reads and writes now end at once. */
			shutdown(x->fd, SHUT_RDWR);
			x->fd = -1;
		}
	}
	pthread_mutex_unlock(&x->lock);
	return NULL;
}

/* Deadline for fd, X11_TIMEOUT_MS from now. A guard waiting for an
 * earlier deadline needs no wake-up: at that one it waits on for this. */
static void
arm(struct vnc_x11 *x, int fd)
{
	pthread_mutex_lock(&x->lock);
	clock_gettime(CLOCK_MONOTONIC, &x->deadline);
	x->deadline.tv_sec += X11_TIMEOUT_MS / 1000;
	x->deadline.tv_nsec += (long)(X11_TIMEOUT_MS % 1000) * 1000000;
	if (x->deadline.tv_nsec >= 1000000000) {
		x->deadline.tv_sec++;
		x->deadline.tv_nsec -= 1000000000;
	}
	x->fd = fd;
	if (x->idle)
		pthread_cond_signal(&x->cond);
	pthread_mutex_unlock(&x->lock);
}

/* Whether the guard fired meanwhile: then the socket is shut down. */
static int
disarm(struct vnc_x11 *x)
{
	int fired;

	pthread_mutex_lock(&x->lock);
	fired = x->fd < 0;
	x->fd = -1;
	pthread_mutex_unlock(&x->lock);
	return fired;
}

static int
start_guard(struct vnc_x11 *x, struct error *err)
{
	int e;

	if (x->guard_running)
		return 0;
	e = pthread_create(&x->guard, NULL, guard_main, x);
	if (e != 0) {
		error_set_errno(err, 503, e, "starting the X connection's "
		    "timer thread");
		return -1;
	}
	x->guard_running = 1;
	return 0;
}

struct vnc_x11 *
vnc_x11_new(const char *display)
{
	struct vnc_x11 *x = xcalloc(1, sizeof *x);
	pthread_condattr_t ca;
	size_t digits;

	x->fd = -1;
	pthread_mutex_init(&x->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&x->cond, &ca);
	pthread_condattr_destroy(&ca);
	/* Only the local form ":N" (or ":N.S"); anything else is never
	 * reached. */
	if (display == NULL || display[0] != ':')
		return x;
	digits = strspn(display + 1, "0123456789");
	if (digits > 0 && digits < 10 && (display[1 + digits] == '\0' ||
	    display[1 + digits] == '.'))
		snprintf(x->path, sizeof x->path, "/tmp/.X11-unix/X%.*s",
		    (int)digits, display + 1);
	return x;
}

void
vnc_x11_close(struct vnc_x11 *x)
{
	if (x->conn != NULL)
		xcb_disconnect(x->conn);
	x->conn = NULL;
}

void
vnc_x11_free(struct vnc_x11 *x)
{
	if (x == NULL)
		return;
	vnc_x11_close(x);
	if (x->guard_running) {
		pthread_mutex_lock(&x->lock);
		x->quit = 1;
		pthread_cond_signal(&x->cond);
		pthread_mutex_unlock(&x->lock);
		pthread_join(x->guard, NULL);
	}
	pthread_cond_destroy(&x->cond);
	pthread_mutex_destroy(&x->lock);
	free(x);
}

/* The root window of the first screen. libxcb takes the setup reply's
 * lengths as they come, so where the first screen lies is checked
 * against the size of the reply before it is read. */
static int
find_root(struct vnc_x11 *x, struct error *err)
{
	const xcb_setup_t *s = xcb_get_setup(x->conn);
	/* length counts the words after the reply's first 8 bytes. */
	size_t size = offsetof(xcb_setup_t, release_number) +
	    (size_t)s->length * 4;
	size_t at = sizeof *s + (((size_t)s->vendor_len + 3) & ~(size_t)3) +
	    (size_t)s->pixmap_formats_len * sizeof(xcb_format_t);

	if (s->roots_len == 0 || at + sizeof(xcb_screen_t) > size) {
		error_set(err, 503, "the X server's connection setup is "
		    "malformed");
		return -1;
	}
	x->root = xcb_setup_roots_iterator(s).data->root;
	return 0;
}

static int
x11_connect(struct vnc_x11 *x, struct error *err)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	/* No authorization: X's socket is the sandbox's own, and this
	 * reads no ~/.Xauthority. */
	xcb_auth_info_t none = { 0 };
	int fd, fired;

	if (x->path[0] == '\0') {
		error_set(err, 503, "the display is not a local X display "
		    "(\":N\")");
		return -1;
	}
	if (start_guard(x, err) < 0)
		return -1;
	memcpy(sun.sun_path, x->path, sizeof sun.sun_path);
	/* Non-blocking: a server whose backlog is full refuses at once
	 * rather than holding us. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		error_set_errno(err, 503, errno, "socket");
		return -1;
	}
	if (connect(fd, (struct sockaddr *)&sun, sizeof sun) < 0) {
		error_set_errno(err, 503, errno, "the X server does not answer "
		    "at %s", x->path);
		close(fd);
		return -1;
	}
	arm(x, fd);
	/* Takes fd, also when it fails. */
	x->conn = xcb_connect_to_fd(fd, &none);
	fired = disarm(x);
	if (xcb_connection_has_error(x->conn)) {
		if (fired)
			error_set(err, 504, "the X server did not answer "
			    "within %d ms", X11_TIMEOUT_MS);
		else
			error_set(err, 503, "the X server refused the "
			    "connection (xcb error %d)",
			    xcb_connection_has_error(x->conn));
		vnc_x11_close(x);
		return -1;
	}
	if (find_root(x, err) < 0) {
		vnc_x11_close(x);
		return -1;
	}
	return 0;
}

/* Events the server sends meanwhile (MappingNotify when the VNC server
 * adds a key to the keymap) are dropped as they come: at most one read's
 * worth is ever queued. */
static void
drop_events(xcb_connection_t *c)
{
	xcb_generic_event_t *ev;

	while ((ev = xcb_poll_for_queued_event(c)) != NULL)
		free(ev);
}

static int
wait_reply(struct vnc_x11 *x, xcb_query_pointer_cookie_t ck,
    xcb_query_pointer_reply_t **rep, xcb_generic_error_t **xerr)
{
	struct pollfd pfd = { .fd = xcb_get_file_descriptor(x->conn),
	    .events = POLLIN };
	int64_t deadline = timing_monotonic_ms() + X11_TIMEOUT_MS;

	for (;;) {
		int done = xcb_poll_for_reply(x->conn, ck.sequence,
		    (void **)rep, xerr);
		int64_t left;

		drop_events(x->conn);
		if (done)
			return 0;
		left = deadline - timing_monotonic_ms();
		if (left <= 0)
			return -1;
		if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
			return -1;
	}
}

static int
query(struct vnc_x11 *x, int *px, int *py, struct error *err)
{
	xcb_query_pointer_reply_t *rep = NULL;
	xcb_generic_error_t *xerr = NULL;
	xcb_query_pointer_cookie_t ck;
	int rc, fired;

	arm(x, xcb_get_file_descriptor(x->conn));
	ck = xcb_query_pointer(x->conn, x->root);
	rc = xcb_flush(x->conn) > 0 ? wait_reply(x, ck, &rep, &xerr) : -1;
	fired = disarm(x);
	if (rep != NULL) {
		*px = rep->root_x;
		*py = rep->root_y;
		free(rep);
		return 0;
	}
	if (xerr != NULL) {
		error_set(err, 503, "the X server refused QueryPointer (error "
		    "%u)", xerr->error_code);
		free(xerr);
	} else if (rc < 0 || fired) {
		error_set(err, 504, "the X server did not answer within %d ms",
		    X11_TIMEOUT_MS);
	} else {
		error_set(err, 503, "the X server closed the connection");
	}
	return -1;
}

int
vnc_x11_query_pointer(struct vnc_x11 *x, int *px, int *py, struct error *err)
{
	if (x->conn != NULL && query(x, px, py, err) == 0)
		return 0;
	/* A connection that failed, or none yet: one fresh try. */
	vnc_x11_close(x);
	if (x11_connect(x, err) < 0)
		return -1;
	if (query(x, px, py, err) < 0) {
		vnc_x11_close(x);
		return -1;
	}
	return 0;
}
