/*
 * The VNC side of the display connection (see vnc.h), on libvncclient.
 *
 * libvncclient answers every framebuffer update with a request for the
 * next incremental one, so once connected the server sends each change of
 * the screen, and our copy of it follows; the changes wait in the socket
 * until a session reads them. A screenshot then needs no 4 MiB transfer:
 * it asks for one pixel non-incrementally, which the server answers at
 * once with that pixel and every change still pending, and reads until
 * the update holding that pixel is in. (Only one that was on its way
 * before the request can hold the pixel too, when it changed; that copy
 * is older by the time the update took to arrive.)
 */
#include "vnc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <rfb/rfbclient.h>

#include "log.h"
#include "xmalloc.h"

/* libvncclient's timeout of one read (seconds), ours of a wait for room
 * to write and of a whole capture (milliseconds). */
#define VNC_READ_TIMEOUT 5
#define VNC_WRITE_TIMEOUT_MS 5000
#define VNC_CAPTURE_TIMEOUT_MS 10000
/* Events written between two waits for room: with POLLOUT a unix socket
 * has at least 3/4 of its buffer free, far more than this takes. */
#define VNC_EVENTS_PER_WAIT 1024

struct vnc {
	pthread_mutex_t lock;
	char *path;
	rfbClient *client;		/* NULL while not connected */
	unsigned char *fb;		/* client's frame buffer, ours to free */
	int probed;			/* the update being read has (0, 0) */
	unsigned probes;		/* updates that had it */
	struct vnc_x11 *x11;
};

/* The key under which a client carries its struct vnc. */
static int client_tag;

/* libvncclient logs through two global pointers; its lines go to our
 * debug log, one a line. */
static void
client_log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	size_t n;

	if (!log_enabled(LOG_DEBUG))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	n = strlen(line);
	while (n > 0 && line[n - 1] == '\n')
		line[--n] = '\0';
	log_debug("vnc: %s", line);
}

static void
set_logging(void)
{
	rfbClientLog = client_log;
	rfbClientErr = client_log;
}

static struct vnc *
owner(rfbClient *c)
{
	return rfbClientGetClientData(c, &client_tag);
}

/* A screen size from the server is believed only within bounds. */
static rfbBool
malloc_fb(rfbClient *c)
{
	struct vnc *v = owner(c);
	int w = c->width, h = c->height;

	if (w <= 0 || h <= 0 || w > VNC_MAX_SIDE || h > VNC_MAX_SIDE ||
	    (int64_t)w * h > VNC_MAX_PIXELS || c->format.bitsPerPixel != 32) {
		log_warn("vnc: the display's server announced a %dx%d screen "
		    "at %d bits a pixel; refused", w, h,
		    c->format.bitsPerPixel);
		return FALSE;
	}
	free(v->fb);
	v->fb = malloc((size_t)w * (size_t)h * 4);
	c->frameBuffer = v->fb;
	return v->fb != NULL;
}

static void
got_update(rfbClient *c, int x, int y, int w, int h)
{
	if (x == 0 && y == 0 && w > 0 && h > 0)
		owner(c)->probed = 1;
}

static void
finished_update(rfbClient *c)
{
	struct vnc *v = owner(c);

	if (v->probed)
		v->probes++;
	v->probed = 0;
}

/* The server is to ask for no password (its socket's permissions guard
 * it); libvncclient's default would read one from our terminal. */
static char *
no_password(rfbClient *c)
{
	(void)c;
	return NULL;
}

static void
drop(struct vnc *v)
{
	if (v->client != NULL) {
		/* Closes the socket and frees the client, not its buffer. */
		rfbClientCleanup(v->client);
		v->client = NULL;
	}
	free(v->fb);
	v->fb = NULL;
	vnc_x11_close(v->x11);
}

static int
open_socket(const char *path, struct error *err)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd, e;

	if (strlen(path) >= sizeof sun.sun_path) {
		error_set(err, 500, "the VNC socket path %s is too long", path);
		return -1;
	}
	strcpy(sun.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		error_set_errno(err, 503, errno, "socket");
		return -1;
	}
	/* libvncclient waits with select(), which knows descriptors below
	 * FD_SETSIZE only. */
	if (fd >= FD_SETSIZE) {
		close(fd);
		error_set(err, 503, "too many open descriptors to reach the "
		    "display");
		return -1;
	}
	if (connect(fd, (struct sockaddr *)&sun, sizeof sun) < 0) {
		e = errno;
		close(fd);
		error_set_errno(err, 503, e, "the display's VNC server does "
		    "not answer at %s", path);
		return -1;
	}
	/* Non-blocking, so that libvncclient's reads time out. */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

static int
do_connect(struct vnc *v, struct error *err)
{
	rfbClient *c;
	int fd;

	if ((fd = open_socket(v->path, err)) < 0)
		return -1;
	c = rfbGetClient(8, 3, 4);
	if (c == NULL)
		fatal("out of memory");
	rfbClientSetClientData(c, &client_tag, v);
	/* Already connected: libvncclient only speaks RFB on it. */
	c->sock = fd;
	c->listenSpecified = TRUE;
	c->programName = "sandbox-agent";
	c->readTimeout = VNC_READ_TIMEOUT;
	c->MallocFrameBuffer = malloc_fb;
	c->GotFrameBufferUpdate = got_update;
	c->FinishedFrameBufferUpdate = finished_update;
	c->GetPassword = no_password;
	c->canHandleNewFBSize = TRUE;
	c->appData.encodingsString = "raw copyrect";
	c->appData.shareDesktop = TRUE;
	c->appData.useRemoteCursor = FALSE;	/* the cursor is in the picture */
	v->probed = 0;
	/* On failure it closes fd and frees c (not the frame buffer). */
	if (!rfbInitClient(c, NULL, NULL)) {
		free(v->fb);
		v->fb = NULL;
		error_set(err, 503, "the display's VNC server at %s refused "
		    "the session", v->path);
		return -1;
	}
	v->client = c;
	return 0;
}

/* Milliseconds on the monotonic clock. */
static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int
lost(struct vnc *v, struct error *err, const char *what)
{
	error_set(err, 503, "the display's VNC connection failed while %s; "
	    "it will be made anew", what);
	drop(v);
	return -1;
}

/* Handle server messages until none is waiting (want 0), or until the
 * update answering the want-th probe is in. */
static int
pump(struct vnc *v, int timeout_ms, unsigned want, struct error *err)
{
	int64_t deadline = now_ms() + timeout_ms;

	for (;;) {
		struct pollfd pfd = { .fd = v->client->sock, .events = POLLIN };
		int left = (int)(deadline - now_ms()), n;

		if (want != 0 && v->probes >= want)
			return 0;
		if (left < 0)
			left = 0;
		if (v->client->buffered == 0) {
			n = poll(&pfd, 1, left);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return lost(v, err, "waiting for it");
			if (n == 0) {
				if (want == 0)
					return 0;
				error_set(err, 504, "the display did not send its "
				    "screen within %d ms", timeout_ms);
				drop(v);
				return -1;
			}
		}
		if (!HandleRFBServerMessage(v->client))
			return lost(v, err, "reading from it");
	}
}

/* Wait until the socket takes writes again (a server that stops reading
 * would otherwise block libvncclient's write for good). */
static int
wait_room(struct vnc *v, struct error *err)
{
	struct pollfd pfd = { .fd = v->client->sock, .events = POLLOUT };
	int n;

	do
		n = poll(&pfd, 1, VNC_WRITE_TIMEOUT_MS);
	while (n < 0 && errno == EINTR);
	if (n == 0) {
		error_set(err, 504, "the display's VNC server has not read its "
		    "input for %d ms", VNC_WRITE_TIMEOUT_MS);
		drop(v);
		return -1;
	}
	if (n < 0 || (pfd.revents & (POLLERR | POLLHUP)) != 0)
		return lost(v, err, "writing to it");
	return 0;
}

struct vnc *
vnc_new(const char *socket_path, const char *display)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct vnc *v = xcalloc(1, sizeof *v);

	pthread_once(&once, set_logging);
	pthread_mutex_init(&v->lock, NULL);
	v->path = xstrdup(socket_path);
	v->x11 = vnc_x11_new(display);
	return v;
}

void
vnc_free(struct vnc *v)
{
	if (v == NULL)
		return;
	drop(v);
	vnc_x11_free(v->x11);
	pthread_mutex_destroy(&v->lock);
	free(v->path);
	free(v);
}

int
vnc_begin(struct vnc *v, struct error *err)
{
	pthread_mutex_lock(&v->lock);
	/* What the server sent meanwhile (updates, or the end of it). */
	if (v->client != NULL && pump(v, 0, 0, err) < 0)
		log_debug("vnc: %s", err->msg);
	if (v->client == NULL && do_connect(v, err) < 0) {
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
	drop(v);
	rc = do_connect(v, err);
	pthread_mutex_unlock(&v->lock);
	return rc;
}

void
vnc_size(struct vnc *v, int *width, int *height)
{
	*width = v->client->width;
	*height = v->client->height;
}

int
vnc_pointer(struct vnc *v, int x, int y, int buttons, struct error *err)
{
	if (wait_room(v, err) < 0)
		return -1;
	if (!SendPointerEvent(v->client, x, y, buttons))
		return lost(v, err, "sending a pointer event");
	return 0;
}

int
vnc_keys(struct vnc *v, const uint32_t *keysyms, const int *down, size_t n,
    struct error *err)
{
	for (size_t i = 0; i < n; i++) {
		if (i % VNC_EVENTS_PER_WAIT == 0 && wait_room(v, err) < 0)
			return -1;
		if (!SendKeyEvent(v->client, keysyms[i], down[i] ? TRUE : FALSE))
			return lost(v, err, "sending a key event");
	}
	return 0;
}

int
vnc_capture(struct vnc *v, struct vnc_image *img, struct error *err)
{
	rfbClient *c = v->client;
	size_t size;

	if (wait_room(v, err) < 0)
		return -1;
	if (!SendFramebufferUpdateRequest(c, 0, 0, 1, 1, FALSE))
		return lost(v, err, "asking for the screen");
	if (pump(v, VNC_CAPTURE_TIMEOUT_MS, v->probes + 1, err) < 0)
		return -1;
	c = v->client;
	img->width = c->width;
	img->height = c->height;
	size = (size_t)c->width * (size_t)c->height * 4;
	img->pixels = xmalloc(size);
	memcpy(img->pixels, c->frameBuffer, size);
	return 0;
}

int
vnc_pointer_position(struct vnc *v, int *x, int *y, struct error *err)
{
	if (vnc_x11_query_pointer(v->x11, x, y, err) == 0)
		return 0;
	/* One server answers both: the VNC side is as likely gone. */
	drop(v);
	return -1;
}
