/*
 * What the client sends, apart from its connection logic: the address,
 * the checks on the caller's options, the request head.
 */
#include "http_client_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/util.h>

#include "xmalloc.h"

int
http_client_parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *sslen,
    struct error *err)
{
	const char *colon;
	char *spec;
	int len = sizeof *ss;

	memset(ss, 0, sizeof *ss);
	if (strncmp(addr, "unix:", 5) == 0) {
		struct sockaddr_un *sun = (struct sockaddr_un *)ss;
		const char *path = addr + 5;

		if (path[0] == '\0' || strlen(path) >= sizeof sun->sun_path) {
			error_set(err, 400, "bad unix socket address %s", addr);
			return -1;
		}
		sun->sun_family = AF_UNIX;
		strcpy(sun->sun_path, path);
		*sslen = sizeof *sun;
		return 0;
	}
	colon = strrchr(addr, ':');
	if (colon == NULL || colon[1] < '0' || colon[1] > '9') {
		error_set(err, 400, "bad address %s (want HOST:PORT with a "
		    "numeric host, or unix:/path)", addr);
		return -1;
	}
	/* No name is resolved: a static binary has no NSS, and the peers
	 * are local. */
	if (strncmp(addr, "localhost:", 10) == 0)
		spec = xasprintf("127.0.0.1%s", colon);
	else
		spec = xstrdup(addr);
	if (evutil_parse_sockaddr_port(spec, (struct sockaddr *)ss, &len) < 0) {
		free(spec);
		error_set(err, 400, "bad address %s (want HOST:PORT with a "
		    "numeric host, or unix:/path)", addr);
		return -1;
	}
	free(spec);
	*sslen = (socklen_t)len;
	return 0;
}

/* No control characters, and no spaces unless allowed: what we send must
 * mean the same thing to the peer as to the caller. */
static int
clean_text(const char *s, int spaces)
{
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c < 0x20 || c == 0x7f) {
			if (!(spaces && c == '\t'))
				return 0;
		}
		if (c == ' ' && !spaces)
			return 0;
	}
	return 1;
}

static int
header_name_is(const char *h, size_t nlen, const char *name)
{
	return nlen == strlen(name) && strncasecmp(h, name, nlen) == 0;
}

/* Names the client sets itself; the caller's copies are ignored. */
static int
reserved_header(const char *h, size_t nlen)
{
	return header_name_is(h, nlen, "Content-Length") ||
	    header_name_is(h, nlen, "Transfer-Encoding") ||
	    header_name_is(h, nlen, "Host") ||
	    header_name_is(h, nlen, "Connection");
}

int
http_client_check_options(const struct http_client_options *o,
    const struct http_client_callbacks *cb, struct error *err)
{
	const char *bad = NULL;

	if (cb == NULL || cb->on_done == NULL)
		bad = "an on_done callback is required";
	else if (o->addr == NULL)
		bad = "no address";
	else if (o->method == NULL || o->method[0] == '\0' ||
	    !clean_text(o->method, 0))
		bad = "bad method";
	else if (o->target == NULL || o->target[0] == '\0' ||
	    !clean_text(o->target, 0))
		bad = "bad request target";
	else if (o->host != NULL && (o->host[0] == '\0' ||
	    !clean_text(o->host, 0)))
		bad = "bad Host";
	else if (o->stream_body && o->body != NULL)
		bad = "both a whole body and a streamed body";
	else if (o->stream_body && o->body_length < -1)
		bad = "bad body_length";
	else if (o->timeout < 0)
		bad = "negative timeout";
	for (size_t i = 0; bad == NULL && o->headers != NULL &&
	    o->headers[i] != NULL; i++) {
		const char *h = o->headers[i], *colon = strchr(h, ':');

		if (colon == NULL || colon == h || !clean_text(colon + 1, 1))
			bad = "malformed header";
		for (const char *c = h; bad == NULL && c < colon; c++) {
			if (*c <= ' ' || *c == 0x7f)
				bad = "malformed header name";
		}
	}
	if (bad != NULL) {
		error_set(err, 400, "HTTP request to %s: %s",
		    o->addr != NULL ? o->addr : "?", bad);
		return -1;
	}
	return 0;
}

void
http_client_write_head(const struct http_client_options *o,
    struct evbuffer *out)
{
	const char *method = o->method;

	evbuffer_add_printf(out, "%s %s HTTP/1.1\r\nHost: %s\r\n", method,
	    o->target, o->host != NULL ? o->host : "localhost");
	for (size_t i = 0; o->headers != NULL && o->headers[i] != NULL; i++) {
		const char *h = o->headers[i], *colon = strchr(h, ':');
		const char *v = colon + 1;

		if (reserved_header(h, (size_t)(colon - h)))
			continue;
		while (*v == ' ' || *v == '\t')
			v++;
		evbuffer_add_printf(out, "%.*s: %s\r\n", (int)(colon - h), h, v);
	}
	if (o->stream_body && o->body_length < 0)
		evbuffer_add_printf(out, "Transfer-Encoding: chunked\r\n");
	else if (o->stream_body)
		evbuffer_add_printf(out, "Content-Length: %" PRId64 "\r\n",
		    o->body_length);
	else if (o->body != NULL || strcmp(method, "POST") == 0 ||
	    strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0)
		evbuffer_add_printf(out, "Content-Length: %zu\r\n",
		    o->body != NULL ? o->body_len : 0);
	evbuffer_add_printf(out, "Connection: close\r\n\r\n");
	if (o->body != NULL)
		evbuffer_add(out, o->body, o->body_len);
}

/*
 * A unix socket is reached through a descriptor of the socket file itself,
 * opened without following a symlink in its place, then connected to by
 * its /proc/self/fd name: an agent's socket lies in a directory that its
 * sandbox can write (root in a root-mode sandbox), and connect() on the
 * name would follow a symlink put there to any socket of the host, such
 * as Docker's, with sandboxd's root. The directories above it are ours.
 */
static int
connect_unix(int fd, const struct sockaddr_un *sun)
{
	struct sockaddr_un via = { .sun_family = AF_UNIX };
	struct stat st;
	int pfd, rc, e;

	pfd = open(sun->sun_path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (pfd < 0)
		return -1;
	if (fstat(pfd, &st) < 0 || !S_ISSOCK(st.st_mode)) {
		e = S_ISLNK(st.st_mode) ? ELOOP : ECONNREFUSED;
		close(pfd);
		errno = e;
		return -1;
	}
	snprintf(via.sun_path, sizeof via.sun_path, "/proc/self/fd/%d", pfd);
	rc = connect(fd, (const struct sockaddr *)&via, sizeof via);
	e = errno;
	close(pfd);
	errno = e;
	return rc;
}

int
http_client_open_socket(const struct sockaddr_storage *ss, socklen_t sslen)
{
	int fd, rc, one = 1;

	fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	    0);
	if (fd < 0)
		return -1;
	if (ss->ss_family != AF_UNIX) {
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		rc = connect(fd, (const struct sockaddr *)ss, sslen);
	} else {
		rc = connect_unix(fd, (const struct sockaddr_un *)ss);
	}
	if (rc < 0 && errno != EINPROGRESS) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int
http_client_connect(const char *addr, struct error *err)
{
	struct sockaddr_storage ss;
	socklen_t sslen;
	int fd;

	if (http_client_parse_addr(addr, &ss, &sslen, err) < 0)
		return -1;
	fd = http_client_open_socket(&ss, sslen);
	if (fd < 0)
		error_set_errno(err, 502, errno, "cannot connect to %s", addr);
	return fd;
}
