/*
 * Where the pointer is: VNC has no message for it, so this asks the X
 * server itself, speaking just enough of the X11 protocol (the connection
 * setup, then QueryPointer on the root window) over the display's unix
 * socket. Used under the vnc mutex (vnc.c); the connection stays open
 * between queries and is made anew after a failure.
 *
 * The X server is the user's, like the VNC server: every length it sends
 * is checked, and every read has a timeout.
 */
#include "vnc.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "xmalloc.h"

#define X11_TIMEOUT_MS 2000
/* A connection setup reply of Xvnc is a few KiB (its visuals); this is
 * far more than any server needs. */
#define X11_SETUP_MAX (256 * 1024)
#define X11_QUERY_POINTER 38
/* Events and errors the server may send meanwhile (MappingNotify when the
 * VNC server adds a key to the keymap) are skipped, up to this many. */
#define X11_SKIP_MAX 1024

struct vnc_x11 {
	char path[sizeof ((struct sockaddr_un *)0)->sun_path];
	int fd;				/* -1 while closed */
	uint32_t root;			/* the first screen's root window */
	uint16_t seq;			/* requests sent on fd */
};

static uint16_t
u16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t
u32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

struct vnc_x11 *
vnc_x11_new(const char *display)
{
	struct vnc_x11 *x = xcalloc(1, sizeof *x);
	size_t digits;

	x->fd = -1;
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
	if (x->fd >= 0)
		close(x->fd);
	x->fd = -1;
}

void
vnc_x11_free(struct vnc_x11 *x)
{
	if (x == NULL)
		return;
	vnc_x11_close(x);
	free(x);
}

/* Read exactly len bytes within the timeout. */
static int
read_full(int fd, void *buf, size_t len, struct error *err)
{
	unsigned char *p = buf;

	while (len > 0) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;
		int r = poll(&pfd, 1, X11_TIMEOUT_MS);

		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0) {
			error_set(err, 504, "the X server did not answer within "
			    "%d ms", X11_TIMEOUT_MS);
			return -1;
		}
		n = read(fd, p, len);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			error_set(err, 503, "the X server closed the connection");
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int
write_full(int fd, const void *buf, size_t len, struct error *err)
{
	const unsigned char *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			error_set_errno(err, 503, errno, "writing to the X "
			    "server");
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The root window of the first screen, from a setup reply's body. */
static int
parse_setup(struct vnc_x11 *x, const unsigned char *b, size_t len,
    struct error *err)
{
	size_t vendor, formats, at;

	if (len < 32)
		goto bad;
	vendor = u16(b + 16);
	formats = b[21];
	if (b[20] == 0)
		goto bad;
	at = 32 + ((vendor + 3) & ~(size_t)3) + 8 * formats;
	if (at + 4 > len)
		goto bad;
	x->root = u32(b + at);
	return 0;
bad:
	error_set(err, 503, "the X server's connection setup is malformed");
	return -1;
}

static int
x11_connect(struct vnc_x11 *x, struct error *err)
{
	/* Little-endian, protocol 11.0, no authorization. */
	static const unsigned char setup[12] = { 'l', 0, 11, 0, 0, 0, 0, 0,
	    0, 0, 0, 0 };
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	unsigned char head[8], *body;
	size_t len;
	int rc;

	if (x->path[0] == '\0') {
		error_set(err, 503, "the display is not a local X display "
		    "(\":N\")");
		return -1;
	}
	memcpy(sun.sun_path, x->path, sizeof sun.sun_path);
	x->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (x->fd < 0) {
		error_set_errno(err, 503, errno, "socket");
		return -1;
	}
	if (connect(x->fd, (struct sockaddr *)&sun, sizeof sun) < 0) {
		error_set_errno(err, 503, errno, "the X server does not answer "
		    "at %s", x->path);
		goto fail;
	}
	if (write_full(x->fd, setup, sizeof setup, err) < 0 ||
	    read_full(x->fd, head, sizeof head, err) < 0)
		goto fail;
	len = (size_t)u16(head + 6) * 4;
	if (head[0] != 1) {
		error_set(err, 503, "the X server refused the connection "
		    "(status %u)", head[0]);
		goto fail;
	}
	if (len > X11_SETUP_MAX) {
		error_set(err, 503, "the X server's connection setup is too "
		    "large");
		goto fail;
	}
	body = xmalloc(len > 0 ? len : 1);
	rc = read_full(x->fd, body, len, err);
	if (rc == 0)
		rc = parse_setup(x, body, len, err);
	free(body);
	if (rc < 0)
		goto fail;
	x->seq = 0;
	return 0;
fail:
	vnc_x11_close(x);
	return -1;
}

static int
query(struct vnc_x11 *x, int *px, int *py, struct error *err)
{
	unsigned char req[8] = { X11_QUERY_POINTER, 0, 2, 0 };
	unsigned char rep[32];

	req[4] = (unsigned char)x->root;
	req[5] = (unsigned char)(x->root >> 8);
	req[6] = (unsigned char)(x->root >> 16);
	req[7] = (unsigned char)(x->root >> 24);
	if (write_full(x->fd, req, sizeof req, err) < 0)
		return -1;
	x->seq++;
	for (int skipped = 0; skipped < X11_SKIP_MAX; skipped++) {
		if (read_full(x->fd, rep, sizeof rep, err) < 0)
			return -1;
		if (rep[0] == 0 && u16(rep + 2) == x->seq) {
			error_set(err, 503, "the X server refused QueryPointer "
			    "(error %u)", rep[1]);
			return -1;
		}
		if (rep[0] != 1)
			continue;	/* an event */
		if (u16(rep + 2) != x->seq || u32(rep + 4) != 0) {
			error_set(err, 503, "the X server answered out of turn");
			return -1;
		}
		*px = (int16_t)u16(rep + 16);
		*py = (int16_t)u16(rep + 18);
		return 0;
	}
	error_set(err, 503, "the X server sent only events");
	return -1;
}

int
vnc_x11_query_pointer(struct vnc_x11 *x, int *px, int *py, struct error *err)
{
	if (x->fd >= 0 && query(x, px, py, err) == 0)
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
