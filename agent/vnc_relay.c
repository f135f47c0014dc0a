/*
 * GET /websockify: a viewer's WebSocket relayed to the display's VNC server
 * (websockify's job, done in the agent's loop). Each viewer gets its own
 * connection to the VNC server, made as the desktop's user like the
 * computer tool's (the socket's directory is theirs, so whatever its name
 * leads to is reached only as they could); the server shares the display
 * among them all. Bytes from the server go to the viewer as binary
 * frames; the payload of the viewer's frames goes to the server, through
 * the view-only filter (vnc_filter.h) when the query says view_only=true
 * (sandboxd's way of passing on a view-only desktop link).
 *
 * Back-pressure both ways: the side that is written to is never given
 * more than a high-water mark, and the side it comes from is not read
 * meanwhile, so a viewer that does not read holds a few hundred KiB here
 * and then its own VNC connection still (the server keeps up with the
 * others), until its write timeout ends it. A viewer that says nothing is
 * pinged, and one that does not answer is let go, so that a vanished
 * browser frees everything.
 */
#include "agent.h"
#include "desktop.h"
#include "desktop_web.h"
#include "vnc_filter.h"
#include "websocket.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "log.h"
#include "xmalloc.h"

/* Viewers at once. */
#define RELAY_MAX 32
/* Bytes queued to the viewer, and to the VNC server, before the other
 * side is no longer read. */
#define VIEWER_HIGH (256 * 1024)
#define SERVER_HIGH (64 * 1024)
/* What one read from the VNC server takes, and so a frame's largest. */
#define SERVER_READ_MAX (256 * 1024)
/* Seconds: a viewer silent this long is pinged, and let go at the next
 * silence; one that reads nothing of what waits for it, or a server that
 * reads nothing of ours, ends the relay. */
#define VIEWER_IDLE 30
#define WRITE_TIMEOUT 60
/* Seconds our close frame may take to go out. */
#define CLOSE_TIMEOUT 5
/* A VNC server whose backlog is full (a burst of viewers) is tried again
 * this often, this many times, before the viewer is refused. */
#define CONNECT_RETRY_MS 10
#define CONNECT_TRIES 300

/* One viewer. Freed by relay_free, when either side has gone. */
struct relay {
	LIST_ENTRY(relay) entry;
	struct bufferevent *viewer;	/* the WebSocket */
	struct bufferevent *server;	/* the VNC server; NULL: closing */
	struct websocket_reader ws;
	int closing;			/* our close frame is queued */
	int pinged;			/* a ping went out unanswered */
	int viewer_paused;		/* not read: the server's full */
	struct evbuffer *staged;	/* view-only: payload to filter */
	struct vnc_filter filter;
};

/* From the handler to the hand-over of the connection; freed by
 * upgraded_cb, or when it ends before. */
struct relay_start {
	struct agent *agent;
	struct http_request *req;	/* until the 101 (or a refusal) */
	struct event *retry;
	int tries;
	int fd;				/* connected to the VNC server */
	int binary;
	int view_only;
	char accept[WEBSOCKET_ACCEPT_LEN + 1];
};

static LIST_HEAD(, relay) relays = LIST_HEAD_INITIALIZER(relays);
static unsigned nrelays;		/* relays and starts */

unsigned
vnc_relay_count(void)
{
	return nrelays;
}

static void
relay_free(struct relay *r, const char *why)
{
	LIST_REMOVE(r, entry);
	nrelays--;
	log_info("desktop: a viewer left (%s); %u now", why, nrelays);
	if (r->server != NULL)
		bufferevent_free(r->server);
	bufferevent_free(r->viewer);
	if (r->staged != NULL)
		evbuffer_free(r->staged);
	free(r);
}

/* End the relay with a close frame: the server is let go now, the viewer
 * once the frame is out. */
static void
finish(struct relay *r, unsigned code, const char *why)
{
	struct timeval tv = { CLOSE_TIMEOUT, 0 };

	if (r->closing)
		return;
	r->closing = 1;
	if (r->server != NULL) {
		bufferevent_free(r->server);
		r->server = NULL;
	}
	if (code != WEBSOCKET_NORMAL && code != WEBSOCKET_GOING_AWAY)
		log_info("desktop: closing a viewer: %s", why);
	websocket_write_close(bufferevent_get_output(r->viewer), code, why);
	bufferevent_disable(r->viewer, EV_READ);
	bufferevent_setwatermark(r->viewer, EV_WRITE, 0, 0);
	bufferevent_set_timeouts(r->viewer, NULL, &tv);
	bufferevent_enable(r->viewer, EV_WRITE);
}

/* Server to viewer, while the viewer has room. */
static void
pump_down(struct relay *r)
{
	struct evbuffer *in = bufferevent_get_input(r->server);
	struct evbuffer *out = bufferevent_get_output(r->viewer);
	size_t n;

	while ((n = evbuffer_get_length(in)) > 0 &&
	    evbuffer_get_length(out) < VIEWER_HIGH) {
		if (n > SERVER_READ_MAX)
			n = SERVER_READ_MAX;
		websocket_write_buffer(out, WEBSOCKET_BINARY, in, n);
	}
	if (evbuffer_get_length(out) >= VIEWER_HIGH)
		bufferevent_disable(r->server, EV_READ);
	else
		bufferevent_enable(r->server, EV_READ);
}

/* Viewer to server, while the server (and, for pongs, the viewer) has
 * room. */
static void
pump_up(struct relay *r)
{
	struct evbuffer *in = bufferevent_get_input(r->viewer);
	struct evbuffer *up = bufferevent_get_output(r->server);
	struct evbuffer *down = bufferevent_get_output(r->viewer);
	/* A view-only viewer's payload is staged, then filtered: what
	 * passes is never more than what came. */
	struct evbuffer *payload = r->staged != NULL ? r->staged : up;
	int got;

	for (;;) {
		size_t queued = evbuffer_get_length(up);

		if (queued >= SERVER_HIGH ||
		    evbuffer_get_length(down) >= VIEWER_HIGH) {
			r->viewer_paused = 1;
			bufferevent_disable(r->viewer, EV_READ);
			return;
		}
		got = websocket_read(&r->ws, in, payload, SERVER_HIGH - queued);
		if (r->staged != NULL &&
		    vnc_filter_run(&r->filter, r->staged, up) < 0) {
			finish(r, WEBSOCKET_POLICY, r->filter.why);
			return;
		}
		switch (got) {
		case WEBSOCKET_AGAIN:
			if (evbuffer_get_length(up) < SERVER_HIGH) {
				r->viewer_paused = 0;
				bufferevent_enable(r->viewer, EV_READ);
				return;
			}
			continue;
		case WEBSOCKET_GOT_PING:
			websocket_write(down, WEBSOCKET_PONG, r->ws.control,
			    r->ws.control_len);
			continue;
		case WEBSOCKET_GOT_PONG:
			continue;
		case WEBSOCKET_GOT_CLOSE:
			finish(r, r->ws.close_code != 0 ? r->ws.close_code :
			    WEBSOCKET_NORMAL, NULL);
			return;
		case WEBSOCKET_ERROR:
			finish(r, r->ws.close_code, r->ws.why);
			return;
		}
	}
}

static void
server_read_cb(struct bufferevent *bev, void *arg)
{
	(void)bev;
	pump_down(arg);
}

static void
server_write_cb(struct bufferevent *bev, void *arg)
{
	struct relay *r = arg;

	(void)bev;
	if (r->viewer_paused)
		pump_up(r);
}

static void
server_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct relay *r = arg;
	struct evbuffer *in;
	size_t n;

	(void)bev;
	if (what & BEV_EVENT_TIMEOUT) {
		finish(r, WEBSOCKET_INTERNAL, "the desktop's VNC server "
		    "stopped reading");
		return;
	}
	/* What it said last goes out before the close (at most one read's
	 * worth: the input's watermark). */
	in = bufferevent_get_input(r->server);
	while ((n = evbuffer_get_length(in)) > 0)
		websocket_write_buffer(bufferevent_get_output(r->viewer),
		    WEBSOCKET_BINARY, in, n < SERVER_READ_MAX ? n :
		    SERVER_READ_MAX);
	finish(r, WEBSOCKET_GOING_AWAY, "the desktop's VNC server closed the "
	    "connection");
}

static void
viewer_read_cb(struct bufferevent *bev, void *arg)
{
	struct relay *r = arg;

	(void)bev;
	r->pinged = 0;
	if (!r->closing)
		pump_up(r);
}

static void
viewer_write_cb(struct bufferevent *bev, void *arg)
{
	struct relay *r = arg;

	if (r->closing) {
		if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			relay_free(r, "closed");
		return;
	}
	pump_down(r);
	if (r->viewer_paused && !r->closing)
		pump_up(r);
}

static void
viewer_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct relay *r = arg;

	if ((what & (BEV_EVENT_TIMEOUT | BEV_EVENT_READING)) ==
	    (BEV_EVENT_TIMEOUT | BEV_EVENT_READING) && !r->closing) {
		if (r->pinged) {
			finish(r, WEBSOCKET_GOING_AWAY, "the viewer does not "
			    "answer pings");
			return;
		}
		r->pinged = 1;
		websocket_write(bufferevent_get_output(bev), WEBSOCKET_PING,
		    "", 0);
		bufferevent_enable(bev, EV_READ);
		return;
	}
	relay_free(r, what & BEV_EVENT_TIMEOUT ? "it read nothing for "
	    "too long" : what & BEV_EVENT_EOF ? "it hung up" : "its "
	    "connection broke");
}

static void
start_free(struct relay_start *s)
{
	if (s->fd >= 0)
		close(s->fd);
	if (s->retry != NULL)
		event_free(s->retry);
	free(s);
}

/* A start that ends without a relay. */
static void
start_abandon(struct relay_start *s)
{
	start_free(s);
	nrelays--;
}

static void
upgraded_cb(struct bufferevent *viewer, void *arg)
{
	struct relay_start *s = arg;
	struct timeval idle = { VIEWER_IDLE, 0 }, wt = { WRITE_TIMEOUT, 0 };
	struct relay *r;

	if (viewer == NULL) {
		start_abandon(s);
		return;
	}
	r = xcalloc(1, sizeof *r);
	r->viewer = viewer;
	if (s->view_only)
		r->staged = evbuffer_new();
	r->server = bufferevent_socket_new(s->agent->base, s->fd,
	    BEV_OPT_CLOSE_ON_FREE);
	s->fd = -1;
	start_free(s);
	if (r->server == NULL)
		fatal("out of memory");
	LIST_INSERT_HEAD(&relays, r, entry);
	log_info("desktop: a viewer connected%s; %u now", r->staged != NULL ?
	    " (view only)" : "", nrelays);
	bufferevent_setcb(viewer, viewer_read_cb, viewer_write_cb,
	    viewer_event_cb, r);
	bufferevent_setcb(r->server, server_read_cb, server_write_cb,
	    server_event_cb, r);
	/* Big steps: a full screen of raw pixels is 4 MiB. */
	bufferevent_set_max_single_read(r->server, SERVER_READ_MAX);
	bufferevent_set_max_single_write(viewer, SERVER_READ_MAX);
	bufferevent_setwatermark(r->server, EV_READ, 0, SERVER_READ_MAX);
	bufferevent_setwatermark(viewer, EV_READ, 0, SERVER_HIGH);
	bufferevent_setwatermark(viewer, EV_WRITE, VIEWER_HIGH / 2, 0);
	bufferevent_setwatermark(r->server, EV_WRITE, SERVER_HIGH / 2, 0);
	bufferevent_set_timeouts(viewer, &idle, &wt);
	bufferevent_set_timeouts(r->server, NULL, &wt);
	bufferevent_enable(viewer, EV_READ | EV_WRITE);
	bufferevent_enable(r->server, EV_READ | EV_WRITE);
	/* Frames the viewer sent right behind its request. */
	if (evbuffer_get_length(bufferevent_get_input(viewer)) > 0)
		pump_up(r);
}

/*
 * Connect to the VNC server with the user's file-system ids (and no
 * supplementary group), on the loop thread: the ids are the thread's
 * own, and come back before anything else runs here. A unix socket
 * connects at once or refuses (its backlog full: EAGAIN).
 */
static int
connect_server(struct agent *agent, const char *path, struct error *err)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	gid_t *groups = NULL;
	int fd, n = 0, rc, e;
	uid_t old_uid = 0;
	gid_t old_gid = 0;

	if (strlen(path) >= sizeof sun.sun_path) {
		error_set(err, 500, "the VNC socket path is too long");
		return -1;
	}
	strcpy(sun.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		error_set_errno(err, 503, errno, "socket");
		return -1;
	}
	if (agent->drop_ids) {
		n = getgroups(0, NULL);
		groups = xcalloc(n > 0 ? (size_t)n : 1, sizeof *groups);
		if (n < 0 || getgroups(n, groups) != n) {
			free(groups);
			close(fd);
			error_set(err, 500, "cannot read the agent's groups");
			return -1;
		}
		/* The raw call: glibc's would change every thread. */
		(void)syscall(SYS_setgroups, 0, NULL);
		old_gid = (gid_t)setfsgid(agent->gid);
		old_uid = (uid_t)setfsuid(agent->uid);
	}
	rc = connect(fd, (struct sockaddr *)&sun, sizeof sun);
	e = errno;
	if (agent->drop_ids) {
		setfsuid(old_uid);
		setfsgid(old_gid);
		(void)syscall(SYS_setgroups, (size_t)n, groups);
		free(groups);
	}
	if (rc < 0) {
		close(fd);
		error_set_errno(err, 503, e, "the desktop's VNC server does "
		    "not answer");
		errno = e;
		return -1;
	}
	return fd;
}

static void try_connect(struct relay_start *s);

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	try_connect(arg);
}

/* The viewer left while the VNC server was busy. */
static void
gone_cb(struct http_request *req, void *arg)
{
	struct relay_start *s = arg;

	http_reply_empty(req, 499);
	start_abandon(s);
}

static void
try_connect(struct relay_start *s)
{
	struct agent *agent = s->agent;
	struct http_request *req = s->req;
	char accept_line[64];
	const char *headers[5];
	struct error err = { 0 };
	struct timeval tv = { 0, CONNECT_RETRY_MS * 1000 };
	int n = 0;

	s->fd = connect_server(agent, desktop_vnc_socket(agent->desktop), &err);
	if (s->fd < 0 && errno == EAGAIN && ++s->tries < CONNECT_TRIES) {
		if (s->retry == NULL)
			s->retry = evtimer_new(agent->base, retry_cb, s);
		evtimer_add(s->retry, &tv);
		http_request_on_close(req, gone_cb, s);
		return;
	}
	http_request_on_close(req, NULL, NULL);
	if (s->fd < 0) {
		desktop_kick(agent->desktop);
		http_reply_err(req, &err);
		start_abandon(s);
		return;
	}
	snprintf(accept_line, sizeof accept_line, "Sec-WebSocket-Accept: %s",
	    s->accept);
	headers[n++] = "Upgrade: websocket";
	headers[n++] = "Connection: Upgrade";
	headers[n++] = accept_line;
	if (s->binary)
		headers[n++] = "Sec-WebSocket-Protocol: binary";
	headers[n] = NULL;
	s->req = NULL;
	http_reply_upgrade(req, headers, upgraded_cb, s);
}

void
vnc_relay_route(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct relay_start *s;
	struct error err = { 0 };
	char accept[WEBSOCKET_ACCEPT_LEN + 1];
	const char *view_only;
	int binary;

	if (!desktop_web_authorize(agent, req, 0))
		return;
	if (agent->desktop == NULL) {
		http_reply_error(req, 404, "this sandbox has no desktop");
		return;
	}
	if (websocket_handshake(req, accept, &binary, &err) < 0) {
		if (err.status == 426)
			http_reply_add_header(req, "Sec-WebSocket-Version",
			    "13");
		http_reply_err(req, &err);
		return;
	}
	if (nrelays >= RELAY_MAX) {
		http_reply_error(req, 503, "the desktop has %d viewers, as "
		    "many as it takes", RELAY_MAX);
		return;
	}
	if (!desktop_ready(agent->desktop)) {
		http_reply_error(req, 503, "the desktop's display is not "
		    "ready");
		return;
	}
	s = xcalloc(1, sizeof *s);
	s->agent = agent;
	s->req = req;
	s->fd = -1;
	s->binary = binary;
	view_only = http_request_query(req, "view_only");
	s->view_only = view_only != NULL && strcmp(view_only, "true") == 0;
	memcpy(s->accept, accept, sizeof accept);
	nrelays++;
	try_connect(s);
}
