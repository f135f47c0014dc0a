/*
 * The VNC helper (sandbox-agent --vnc-helper): the display's VNC client
 * (libvncclient) and X client (vnc_x11.c, libxcb), out of PID 1. Both
 * servers are the user's (Xvnc runs as them) and both libraries parse
 * what they send, so the agent runs them here instead: as the desktop's
 * user, under the commands' seccomp filter, in a process of its own that
 * holds no secret. A server that gets the better of a library gets what
 * the user already had; the agent checks every reply (vnc_wire.h).
 *
 * It serves requests on its channel (VNC_WIRE_FD), one at a time, until
 * the agent closes it.
 *
 * libvncclient answers every framebuffer update with a request for the
 * next incremental one, so once connected the server sends each change of
 * the screen, and our copy of it follows; the changes wait in the socket
 * until a request reads them. A screenshot then needs no 4 MiB transfer:
 * it asks for one pixel non-incrementally, which the server answers at
 * once with that pixel and every change still pending, and reads until
 * the update holding that pixel is in. (Only one that was on its way
 * before the request can hold the pixel too, when it changed; that copy
 * is older by the time the update took to arrive.)
 *
 * Against the server: its screen size is bounded, only raw and copy-rect
 * encodings are asked for (libvncclient is built without the decoders of
 * the compressed ones), every read has a timeout and every write waits
 * for room with one.
 */
#include "vnc.h"
#include "vnc_helper.h"
#include "vnc_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <rfb/rfbclient.h>

#include "fdio.h"
#include "log.h"
#include "timing.h"
#include "xmalloc.h"

/* libvncclient's timeout of one read (seconds), ours of a wait for room
 * to write and of a whole capture (milliseconds). */
#define VNC_READ_TIMEOUT 5
#define VNC_WRITE_TIMEOUT_MS 5000
#define VNC_CAPTURE_TIMEOUT_MS 10000
/* Events written between two waits for room: with POLLOUT a unix socket
 * has at least 3/4 of its buffer free, far more than this takes. */
#define VNC_EVENTS_PER_WAIT 1024

/* The helper's one connection; lives as long as the process. */
struct helper {
	const char *path;
	rfbClient *client;		/* NULL while not connected */
	unsigned char *fb;		/* client's frame buffer, ours to free */
	int probed;			/* the update being read has (0, 0) */
	unsigned probes;		/* updates that had it */
	struct vnc_x11 *x11;
};

/* The key under which a client carries its struct helper. */
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

static struct helper *
owner(rfbClient *c)
{
	return rfbClientGetClientData(c, &client_tag);
}

/* A screen size from the server is believed only within bounds. */
static rfbBool
malloc_fb(rfbClient *c)
{
	struct helper *h = owner(c);
	int w = c->width, ht = c->height;

	if (w <= 0 || ht <= 0 || w > VNC_MAX_SIDE || ht > VNC_MAX_SIDE ||
	    (int64_t)w * ht > VNC_MAX_PIXELS || c->format.bitsPerPixel != 32) {
		log_warn("vnc: the display's server announced a %dx%d screen "
		    "at %d bits a pixel; refused", w, ht,
		    c->format.bitsPerPixel);
		return FALSE;
	}
	free(h->fb);
	h->fb = malloc((size_t)w * (size_t)ht * 4);
	c->frameBuffer = h->fb;
	return h->fb != NULL;
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
	struct helper *h = owner(c);

	if (h->probed)
		h->probes++;
	h->probed = 0;
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
drop(struct helper *h)
{
	if (h->client != NULL) {
		/* Closes the socket and frees the client, not its buffer. */
		rfbClientCleanup(h->client);
		h->client = NULL;
	}
	free(h->fb);
	h->fb = NULL;
	vnc_x11_close(h->x11);
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
do_connect(struct helper *h, struct error *err)
{
	rfbClient *c;
	int fd;

	if ((fd = open_socket(h->path, err)) < 0)
		return -1;
	c = rfbGetClient(8, 3, 4);
	if (c == NULL)
		fatal("out of memory");
	rfbClientSetClientData(c, &client_tag, h);
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
	h->probed = 0;
	/* On failure it closes fd and frees c (not the frame buffer). */
	if (!rfbInitClient(c, NULL, NULL)) {
		free(h->fb);
		h->fb = NULL;
		error_set(err, 503, "the display's VNC server at %s refused "
		    "the session", h->path);
		return -1;
	}
	h->client = c;
	return 0;
}

static int
lost(struct helper *h, struct error *err, const char *what)
{
	error_set(err, 503, "the display's VNC connection failed while %s; "
	    "it will be made anew", what);
	drop(h);
	return -1;
}

/* Handle server messages until none is waiting (want 0), or until the
 * update answering the want-th probe is in. */
static int
pump(struct helper *h, int timeout_ms, unsigned want, struct error *err)
{
	int64_t deadline = timing_monotonic_ms() + timeout_ms;

	for (;;) {
		struct pollfd pfd = { .fd = h->client->sock, .events = POLLIN };
		int left = (int)(deadline - timing_monotonic_ms()), n;

		if (want != 0 && h->probes >= want)
			return 0;
		if (left < 0)
			left = 0;
		if (h->client->buffered == 0) {
			n = poll(&pfd, 1, left);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return lost(h, err, "waiting for it");
			if (n == 0) {
				if (want == 0)
					return 0;
				error_set(err, 504, "the display did not send its "
				    "screen within %d ms", timeout_ms);
				drop(h);
				return -1;
			}
		}
		if (!HandleRFBServerMessage(h->client))
			return lost(h, err, "reading from it");
	}
}

/* Wait until the socket takes writes again (a server that stops reading
 * would otherwise block libvncclient's write for good). */
static int
wait_room(struct helper *h, struct error *err)
{
	struct pollfd pfd = { .fd = h->client->sock, .events = POLLOUT };
	int n;

	do
		n = poll(&pfd, 1, VNC_WRITE_TIMEOUT_MS);
	while (n < 0 && errno == EINTR);
	if (n == 0) {
		error_set(err, 504, "the display's VNC server has not read its "
		    "input for %d ms", VNC_WRITE_TIMEOUT_MS);
		drop(h);
		return -1;
	}
	if (n < 0 || (pfd.revents & (POLLERR | POLLHUP)) != 0)
		return lost(h, err, "writing to it");
	return 0;
}

/* ---- requests ------------------------------------------------------------ */

static int
begin(struct helper *h, struct error *err)
{
	/* What the server sent meanwhile (updates, or the end of it). */
	if (h->client != NULL && pump(h, 0, 0, err) < 0)
		log_debug("vnc: %s", err->msg);
	return h->client != NULL ? 0 : do_connect(h, err);
}

static int
pointer(struct helper *h, const struct vnc_wire_request *rq,
    struct error *err)
{
	if (wait_room(h, err) < 0)
		return -1;
	if (!SendPointerEvent(h->client, rq->x, rq->y, rq->buttons))
		return lost(h, err, "sending a pointer event");
	return 0;
}

static int
keys(struct helper *h, const struct vnc_wire_key *k, size_t n,
    struct error *err)
{
	for (size_t i = 0; i < n; i++) {
		if (i % VNC_EVENTS_PER_WAIT == 0 && wait_room(h, err) < 0)
			return -1;
		if (!SendKeyEvent(h->client, k[i].keysym, k[i].down ? TRUE :
		    FALSE))
			return lost(h, err, "sending a key event");
	}
	return 0;
}

/* The whole screen as it is now, in h->client->frameBuffer. */
static int
capture(struct helper *h, struct error *err)
{
	if (wait_room(h, err) < 0)
		return -1;
	if (!SendFramebufferUpdateRequest(h->client, 0, 0, 1, 1, FALSE))
		return lost(h, err, "asking for the screen");
	return pump(h, VNC_CAPTURE_TIMEOUT_MS, h->probes + 1, err);
}

static int
position(struct helper *h, struct vnc_wire_reply *rp, struct error *err)
{
	int x, y;

	if (vnc_x11_query_pointer(h->x11, &x, &y, err) < 0) {
		/* One server answers both: the VNC side is as likely gone. */
		drop(h);
		return -1;
	}
	rp->x = x;
	rp->y = y;
	return 0;
}

static int
read_all(int fd, void *buf, size_t len)
{
	for (size_t at = 0; at < len; ) {
		ssize_t n = read(fd, (char *)buf + at, len - at);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		at += (size_t)n;
	}
	return 0;
}

/* One request read from the agent, done and answered; -1 when the
 * channel is closed (the agent is done with us) or broken. */
static int
serve(struct helper *h, int fd)
{
	static struct vnc_wire_key k[VNC_WIRE_KEYS_MAX];
	struct vnc_wire_request rq;
	struct vnc_wire_reply rp = { 0 };
	struct error err = { 0 };
	const void *data = NULL;
	int rc = -1;

	if (read_all(fd, &rq, sizeof rq) < 0 || rq.nkeys > VNC_WIRE_KEYS_MAX ||
	    read_all(fd, k, rq.nkeys * sizeof *k) < 0)
		return -1;
	if (h->client == NULL && (rq.op == VNC_WIRE_POINTER ||
	    rq.op == VNC_WIRE_KEYS || rq.op == VNC_WIRE_CAPTURE)) {
		/* Lost earlier in the agent's session: its next makes it
		 * anew. */
		error_set(&err, 503, "the display's VNC connection was lost; "
		    "it will be made anew");
		rq.op = 0;
	}
	switch (rq.op) {
	case VNC_WIRE_RECONNECT:
		drop(h);
		/* FALLTHROUGH */
	case VNC_WIRE_BEGIN:
		rc = begin(h, &err);
		break;
	case VNC_WIRE_POINTER:
		rc = pointer(h, &rq, &err);
		break;
	case VNC_WIRE_KEYS:
		rc = keys(h, k, rq.nkeys, &err);
		break;
	case VNC_WIRE_CAPTURE:
		if ((rc = capture(h, &err)) == 0) {
			data = h->client->frameBuffer;
			rp.len = (uint32_t)h->client->width *
			    (uint32_t)h->client->height * 4;
		}
		break;
	case VNC_WIRE_POSITION:
		rc = position(h, &rp, &err);
		break;
	default:
		if (err.status == 0)
			error_set(&err, 500, "unknown VNC helper request %u",
			    rq.op);
		break;
	}
	if (rc == 0 && h->client != NULL) {
		rp.width = h->client->width;
		rp.height = h->client->height;
	} else if (rc < 0) {
		rp.status = err.status;
		rp.len = (uint32_t)strnlen(err.msg, VNC_WIRE_MSG_MAX);
		data = err.msg;
	}
	if (fdio_write_all(fd, &rp, sizeof rp) < 0 ||
	    (rp.len > 0 && fdio_write_all(fd, data, rp.len) < 0))
		return -1;
	return 0;
}

int
vnc_helper_main(int argc, char **argv)
{
	struct helper h = { 0 };
	enum log_level level;

	log_init("vnc-helper");
	/* Executed from a descriptor, it would be named by its number. */
	prctl(PR_SET_NAME, "vnc-helper", 0, 0, 0);
	signal(SIGPIPE, SIG_IGN);
	if (argc != 5 || log_parse_level(argv[4], &level) < 0) {
		fprintf(stderr, "usage: sandbox-agent --vnc-helper SOCKET "
		    "DISPLAY LOG_LEVEL (started by the agent, its channel on "
		    "descriptor %d)\n", VNC_WIRE_FD);
		return 2;
	}
	log_set_level(level);
	rfbClientLog = client_log;
	rfbClientErr = client_log;
	h.path = argv[2];
	h.x11 = vnc_x11_new(argv[3]);
	while (serve(&h, VNC_WIRE_FD) == 0)
		;
	drop(&h);
	vnc_x11_free(h.x11);
	return 0;
}
