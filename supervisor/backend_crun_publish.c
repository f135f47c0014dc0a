/*
 * A bridge sandbox's published port (host_ip:host_port): sandboxd listens
 * there itself and relays each connection to the sandbox's agent over its
 * unix socket (reached as every request reaches it, never through a
 * symlink in its place). Docker publishes with DNAT rules and a proxy;
 * here no firewall rule is made or removed per sandbox, which costs a
 * dozen iptables runs each way, and the port is open exactly while the
 * sandbox exists. Bytes go both ways untouched, neither side read while
 * the other's output holds RELAY_HIGH; a side's end of file is passed on
 * as a shutdown of writing once what it sent was delivered.
 */
#include "backend_crun.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "http_client.h"
#include "log.h"
#include "xmalloc.h"

/* Connections relayed at once per published port (two descriptors each). */
#define RELAY_MAX 256
/* Bytes queued to one side before the other is no longer read. */
#define RELAY_HIGH (256 * 1024)

struct link;

/* Owned by its sandbox (crun_box): crun_publish_free. */
struct crun_publish {
	struct evconnlistener *listener;
	char *agent_addr;
	size_t nlinks;
	LIST_HEAD(, link) links;
};

/* One relayed connection; freed by link_free. */
struct link {
	struct crun_publish *p;
	struct bufferevent *side[2];	/* client, agent */
	int eof[2];			/* that side sent its end of file */
	LIST_ENTRY(link) entry;
};

static void
link_free(struct link *l)
{
	LIST_REMOVE(l, entry);
	l->p->nlinks--;
	for (int i = 0; i < 2; i++)
		if (l->side[i] != NULL)
			bufferevent_free(l->side[i]);
	free(l);
}

static int
which(struct link *l, struct bufferevent *bev)
{
	return bev == l->side[1];
}

/* Both ends said end of file and everything was delivered: done. */
static int
maybe_done(struct link *l)
{
	for (int i = 0; i < 2; i++)
		if (!l->eof[i] || evbuffer_get_length(bufferevent_get_output(
		    l->side[!i])) > 0)
			return 0;
	link_free(l);
	return 1;
}

static void
read_cb(struct bufferevent *bev, void *arg)
{
	struct link *l = arg;
	int i = which(l, bev);
	struct evbuffer *out = bufferevent_get_output(l->side[!i]);

	bufferevent_write_buffer(l->side[!i], bufferevent_get_input(bev));
	if (evbuffer_get_length(out) >= RELAY_HIGH)
		bufferevent_disable(bev, EV_READ);
}

/* One side took enough of what the other sent: read the other again;
 * or it took all of it and the other has ended: pass the end on. */
static void
write_cb(struct bufferevent *bev, void *arg)
{
	struct link *l = arg;
	int i = which(l, bev);

	if (!l->eof[!i]) {
		bufferevent_enable(l->side[!i], EV_READ);
		return;
	}
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
		shutdown(bufferevent_getfd(bev), SHUT_WR);
		maybe_done(l);
	}
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct link *l = arg;
	int i = which(l, bev);

	if (what & BEV_EVENT_CONNECTED)
		return;
	if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR)) {
		l->eof[i] = 1;
		read_cb(bev, l);
		/* Told again only once all of it is out. */
		bufferevent_setwatermark(l->side[!i], EV_WRITE, 0, 0);
		write_cb(l->side[!i], l);
		return;
	}
	link_free(l);
}

static void
accept_cb(struct evconnlistener *listener, evutil_socket_t fd,
    struct sockaddr *sa, int len, void *arg)
{
	struct crun_publish *p = arg;
	struct event_base *base = evconnlistener_get_base(listener);
	struct error err;
	struct link *l;
	int agent;

	(void)sa;
	(void)len;
	if (p->nlinks >= RELAY_MAX ||
	    (agent = http_client_connect(p->agent_addr, &err)) < 0) {
		evutil_closesocket(fd);
		return;
	}
	l = xcalloc(1, sizeof *l);
	l->p = p;
	l->side[0] = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	l->side[1] = bufferevent_socket_new(base, agent, BEV_OPT_CLOSE_ON_FREE);
	LIST_INSERT_HEAD(&p->links, l, entry);
	p->nlinks++;
	for (int i = 0; i < 2; i++) {
		bufferevent_setcb(l->side[i], read_cb, write_cb, event_cb, l);
		bufferevent_setwatermark(l->side[i], EV_WRITE, RELAY_HIGH / 2, 0);
		bufferevent_enable(l->side[i], EV_READ | EV_WRITE);
	}
}

struct crun_publish *
crun_publish_new(struct event_base *base, const char *host_ip, int port,
    const char *agent_addr, struct error *err)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct crun_publish *p;

	sin.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host_ip != NULL ? host_ip : "127.0.0.1",
	    &sin.sin_addr) != 1) {
		error_set(err, 500, "crun: %s is not an IPv4 address to publish "
		    "on", host_ip);
		return NULL;
	}
	p = xcalloc(1, sizeof *p);
	LIST_INIT(&p->links);
	p->agent_addr = xstrdup(agent_addr);
	p->listener = evconnlistener_new_bind(base, accept_cb, p,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
	    128, (struct sockaddr *)&sin, sizeof sin);
	if (p->listener == NULL) {
		error_set_errno(err, errno == EADDRINUSE ? 503 : 500, errno,
		    "crun: cannot publish the agent's port on %s:%d",
		    host_ip != NULL ? host_ip : "127.0.0.1", port);
		crun_publish_free(p);
		return NULL;
	}
	return p;
}

void
crun_publish_free(struct crun_publish *p)
{
	if (p == NULL)
		return;
	while (!LIST_EMPTY(&p->links))
		link_free(LIST_FIRST(&p->links));
	if (p->listener != NULL)
		evconnlistener_free(p->listener);
	free(p->agent_addr);
	free(p);
}
