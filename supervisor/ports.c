/*
 * Host ports for sandboxes with bridge networking, from PORT_RANGE. A port
 * is ours from ports_alloc until ports_release, so it is never handed out
 * twice; allocation goes round the range rather than reusing the port just
 * freed (a client may still hold a connection to the old sandbox), and skips
 * ports some other program is bound to on 127.0.0.1 right now.
 */
#include "sandboxd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "xmalloc.h"

/* Owned by the caller of ports_new; freed by ports_free. */
struct ports {
	int lo, hi;		/* inclusive */
	unsigned char *taken;	/* one byte per port of the range */
	int next;		/* where the next search starts */
	size_t used;
};

struct ports *
ports_new(int lo, int hi)
{
	struct ports *p = xcalloc(1, sizeof *p);

	p->lo = lo;
	p->hi = hi;
	p->taken = xcalloc((size_t)(hi - lo + 1), 1);
	p->next = lo;
	return p;
}

void
ports_free(struct ports *p)
{
	if (p == NULL)
		return;
	free(p->taken);
	free(p);
}

/* Whether nobody listens on 127.0.0.1:port (or the wildcard) now. */
static int
bindable(int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	int fd, ok, one = 1;

	sin.sin_port = htons((uint16_t)port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 1;
	/* A connection lingering in TIME_WAIT does not stop a listener. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	ok = bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0;
	close(fd);
	return ok;
}

int
ports_alloc(struct ports *p, struct error *err)
{
	int span = p->hi - p->lo + 1;

	for (int i = 0; i < span; i++) {
		int port = p->lo + (p->next - p->lo + i) % span;

		if (p->taken[port - p->lo] || !bindable(port))
			continue;
		p->taken[port - p->lo] = 1;
		p->used++;
		p->next = port + 1 > p->hi ? p->lo : port + 1;
		return port;
	}
	error_set(err, 503, "no free host port left in PORT_RANGE %d-%d (%zu "
	    "in use by sandboxes)", p->lo, p->hi, p->used);
	return -1;
}

int
ports_reserve(struct ports *p, int port)
{
	if (port < p->lo || port > p->hi || p->taken[port - p->lo])
		return -1;
	p->taken[port - p->lo] = 1;
	p->used++;
	return 0;
}

void
ports_release(struct ports *p, int port)
{
	if (port < p->lo || port > p->hi || !p->taken[port - p->lo])
		return;
	p->taken[port - p->lo] = 0;
	p->used--;
}

size_t
ports_in_use(const struct ports *p)
{
	return p->used;
}

size_t
ports_capacity(const struct ports *p)
{
	return (size_t)(p->hi - p->lo + 1);
}
