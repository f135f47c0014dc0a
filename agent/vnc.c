/*
 * The agent's side of the display connection (see vnc.h): requests to the
 * VNC helper over its channel, and its replies checked. The helper is the
 * user's process, so a reply is read with a deadline (longer than any
 * wait of the helper's own, so only a stuck or hostile helper misses it),
 * its status, sizes and lengths must be ones the helper may answer, and
 * its message is printable text; a helper that breaks any of these is
 * given up: its channel closed, and its process ended by the desktop
 * (vnc_helper_lost), which starts another.
 */
#include "vnc.h"
#include "vnc_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "timing.h"
#include "xmalloc.h"

/* The helper's slowest request is a connect to a slow server (reads of
 * 5 s each) or a capture (10 s), then up to 64 MiB of pixels. */
#define VNC_REPLY_TIMEOUT_MS 20000

struct vnc {
	pthread_mutex_t lock;		/* a session */
	int fd;				/* the helper's channel; -1: none */
	int width, height;		/* the screen, as of the last reply */
	/* A new helper's channel until a session takes it: the loop
	 * thread hands it over without waiting for a session. */
	pthread_mutex_t handoff;
	int next_fd;
	atomic_int lost;		/* given up, its process to be ended */
};

struct vnc *
vnc_new(void)
{
	struct vnc *v = xcalloc(1, sizeof *v);

	pthread_mutex_init(&v->lock, NULL);
	pthread_mutex_init(&v->handoff, NULL);
	v->fd = -1;
	v->next_fd = -1;
	return v;
}

void
vnc_free(struct vnc *v)
{
	if (v == NULL)
		return;
	if (v->fd >= 0)
		close(v->fd);
	if (v->next_fd >= 0)
		close(v->next_fd);
	pthread_mutex_destroy(&v->handoff);
	pthread_mutex_destroy(&v->lock);
	free(v);
}

void
vnc_attach(struct vnc *v, int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	pthread_mutex_lock(&v->handoff);
	if (v->next_fd >= 0)
		close(v->next_fd);
	v->next_fd = fd;
	atomic_store(&v->lost, 0);
	pthread_mutex_unlock(&v->handoff);
}

int
vnc_helper_lost(struct vnc *v)
{
	return atomic_load(&v->lost);
}

/* In a session: a newer helper's channel replaces the one in use. */
static void
take_handoff(struct vnc *v)
{
	pthread_mutex_lock(&v->handoff);
	if (v->next_fd >= 0) {
		if (v->fd >= 0)
			close(v->fd);
		v->fd = v->next_fd;
		v->next_fd = -1;
		v->width = v->height = 0;
	}
	pthread_mutex_unlock(&v->handoff);
}

static int
give_up(struct vnc *v, struct error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
give_up(struct vnc *v, struct error *err, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	log_warn("vnc: the VNC helper %s; it is ended and started anew", why);
	error_set(err, 502, "the display's VNC helper %s; the agent is "
	    "restarting it", why);
	close(v->fd);
	v->fd = -1;
	atomic_store(&v->lost, 1);
	return -1;
}

/* All of buf to (writing) or from the channel by deadline: 0, else -1
 * with errno (ETIMEDOUT; 0 for the end of the stream). */
static int
transfer(int fd, int writing, void *buf, size_t len, int64_t deadline)
{
	size_t at = 0;

	while (at < len) {
		struct pollfd pfd = { fd, writing ? POLLOUT : POLLIN, 0 };
		int64_t left = deadline - timing_monotonic_ms();
		ssize_t n;

		n = writing ? write(fd, (char *)buf + at, len - at) :
		    read(fd, (char *)buf + at, len - at);
		if (n > 0) {
			at += (size_t)n;
			continue;
		}
		if (n == 0) {
			errno = 0;
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -1;
		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
			return -1;
	}
	return 0;
}

static int
screen_ok(const struct vnc_wire_reply *rp)
{
	return rp->width > 0 && rp->height > 0 && rp->width <= VNC_MAX_SIDE &&
	    rp->height <= VNC_MAX_SIDE &&
	    (int64_t)rp->width * rp->height <= VNC_MAX_PIXELS;
}

/* The helper's failure: its message, bytes outside printable ASCII
 * replaced, as err. */
static int
failure(struct vnc *v, const struct vnc_wire_reply *rp, int64_t deadline,
    struct error *err)
{
	char msg[VNC_WIRE_MSG_MAX + 1];

	if (rp->status != 500 && rp->status != 503 && rp->status != 504)
		return give_up(v, err, "answered status %d", rp->status);
	if (rp->len > VNC_WIRE_MSG_MAX)
		return give_up(v, err, "answered a message of %u bytes",
		    rp->len);
	if (transfer(v->fd, 0, msg, rp->len, deadline) < 0)
		return give_up(v, err, "did not send its message (%s)",
		    errno != 0 ? strerror(errno) : "closed");
	for (uint32_t i = 0; i < rp->len; i++)
		if (msg[i] < 0x20 || msg[i] > 0x7e)
			msg[i] = '?';
	msg[rp->len] = '\0';
	error_set(err, rp->status, "%s", msg);
	return -1;
}

/*
 * One request and its reply, checked. A capture's pixels are read into
 * *pixels (caller frees). -1 with err: the helper's failure as it said,
 * or 502 when there is no helper or it was given up.
 */
static int
call(struct vnc *v, const struct vnc_wire_request *rq,
    const struct vnc_wire_key *keys, struct vnc_wire_reply *rp,
    unsigned char **pixels, struct error *err)
{
	int64_t deadline = timing_monotonic_ms() + VNC_REPLY_TIMEOUT_MS;
	int screen = rq->op != VNC_WIRE_POINTER && rq->op != VNC_WIRE_KEYS &&
	    rq->op != VNC_WIRE_POSITION;
	size_t want;

	if (v->fd < 0) {
		error_set(err, 502, "the display's VNC helper is not running; "
		    "the agent is starting it");
		return -1;
	}
	if (transfer(v->fd, 1, (void *)rq, sizeof *rq, deadline) < 0 ||
	    transfer(v->fd, 1, (void *)keys, rq->nkeys * sizeof *keys,
	    deadline) < 0 ||
	    transfer(v->fd, 0, rp, sizeof *rp, deadline) < 0)
		return give_up(v, err, "did not answer (%s)", errno != 0 ?
		    strerror(errno) : "its channel closed");
	if (rp->status != 0)
		return failure(v, rp, deadline, err);
	if (screen && !screen_ok(rp))
		return give_up(v, err, "answered a %dx%d screen", rp->width,
		    rp->height);
	/* X's coordinates are 16 bits; callers compute with these. */
	if (rq->op == VNC_WIRE_POSITION && (rp->x < INT16_MIN ||
	    rp->x > INT16_MAX || rp->y < INT16_MIN || rp->y > INT16_MAX))
		return give_up(v, err, "answered the pointer at (%d, %d)",
		    rp->x, rp->y);
	want = rq->op == VNC_WIRE_CAPTURE ?
	    (size_t)rp->width * (size_t)rp->height * 4 : 0;
	if (rp->len != want)
		return give_up(v, err, "answered %u bytes where %zu were due",
		    rp->len, want);
	if (screen) {
		v->width = rp->width;
		v->height = rp->height;
	}
	if (want == 0)
		return 0;
	*pixels = xmalloc(want);
	if (transfer(v->fd, 0, *pixels, want, deadline) < 0) {
		free(*pixels);
		*pixels = NULL;
		return give_up(v, err, "did not send the screen (%s)",
		    errno != 0 ? strerror(errno) : "its channel closed");
	}
	return 0;
}

static int
simple(struct vnc *v, uint32_t op, struct error *err)
{
	struct vnc_wire_request rq = { .op = op };
	struct vnc_wire_reply rp;

	return call(v, &rq, NULL, &rp, NULL, err);
}

int
vnc_begin(struct vnc *v, struct error *err)
{
	pthread_mutex_lock(&v->lock);
	take_handoff(v);
	if (simple(v, VNC_WIRE_BEGIN, err) < 0) {
		pthread_mutex_unlock(&v->lock);
		return -1;
	}
	return 0;
}

void
vnc_end(struct vnc *v)
{
	pthread_mutex_unlock(&v->lock);
}

int
vnc_reconnect(struct vnc *v, struct error *err)
{
	int rc;

	pthread_mutex_lock(&v->lock);
	take_handoff(v);
	rc = simple(v, VNC_WIRE_RECONNECT, err);
	pthread_mutex_unlock(&v->lock);
	return rc;
}

void
vnc_size(struct vnc *v, int *width, int *height)
{
	*width = v->width;
	*height = v->height;
}

int
vnc_pointer(struct vnc *v, int x, int y, int buttons, struct error *err)
{
	struct vnc_wire_request rq = { .op = VNC_WIRE_POINTER, .x = x, .y = y,
	    .buttons = buttons };
	struct vnc_wire_reply rp;

	return call(v, &rq, NULL, &rp, NULL, err);
}

int
vnc_keys(struct vnc *v, const uint32_t *keysyms, const int *down, size_t n,
    struct error *err)
{
	struct vnc_wire_key k[VNC_WIRE_KEYS_MAX];
	struct vnc_wire_request rq = { .op = VNC_WIRE_KEYS };
	struct vnc_wire_reply rp;

	for (size_t at = 0; at < n; at += rq.nkeys) {
		rq.nkeys = n - at < VNC_WIRE_KEYS_MAX ? (uint32_t)(n - at) :
		    VNC_WIRE_KEYS_MAX;
		for (uint32_t i = 0; i < rq.nkeys; i++) {
			k[i].keysym = keysyms[at + i];
			k[i].down = down[at + i] != 0;
		}
		if (call(v, &rq, k, &rp, NULL, err) < 0)
			return -1;
	}
	return 0;
}

int
vnc_capture(struct vnc *v, struct vnc_image *img, struct error *err)
{
	struct vnc_wire_request rq = { .op = VNC_WIRE_CAPTURE };
	struct vnc_wire_reply rp;

	img->pixels = NULL;
	if (call(v, &rq, NULL, &rp, &img->pixels, err) < 0)
		return -1;
	img->width = rp.width;
	img->height = rp.height;
	return 0;
}

int
vnc_pointer_position(struct vnc *v, int *x, int *y, struct error *err)
{
	struct vnc_wire_request rq = { .op = VNC_WIRE_POSITION };
	struct vnc_wire_reply rp;

	if (call(v, &rq, NULL, &rp, NULL, err) < 0)
		return -1;
	*x = rp.x;
	*y = rp.y;
	return 0;
}
