/*
 * The desktop's WebSocket through sandboxd: a viewer's upgrade at
 * /desktop/{id} is made again to the sandbox's agent (its /websockify,
 * with view_only=true unless the viewer may drive, the sandbox's token in
 * the header), over the agent's unix socket; the agent's answer decides
 * (and drops a view-only viewer's input). Its 101 is passed on to the
 * viewer (Sec-WebSocket-Accept is the agent's, for the same key), and from
 * then on bytes go both ways untouched: the agent speaks the WebSocket
 * protocol, checks every frame and closes on a bad one, and sandboxd is a
 * pipe with back-pressure (neither side is read while the other's output
 * holds RELAY_HIGH). Any other answer goes to the viewer as it came.
 *
 * Each viewer holds a reference to its sandbox and is listed, so that
 * releasing the sandbox (heard through the table's hook), and sandboxd's
 * shutdown, closes its viewers.
 */
#include "sandboxd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <http_parser.h>

#include "http_client.h"
#include "log.h"
#include "xmalloc.h"

/* Viewers through this sandboxd at once (two descriptors each). */
#define RELAY_MAX 1024
/* Bytes queued to one side before the other is no longer read. */
#define RELAY_HIGH (256 * 1024)
#define RELAY_READ_MAX (256 * 1024)
/* The agent's answer to the upgrade: its head, and the body of a refusal. */
#define AGENT_HEAD_MAX (16 * 1024)
#define AGENT_BODY_MAX (64 * 1024)
/* Seconds: the agent's answer; a side that reads nothing of what waits. */
#define HANDSHAKE_TIMEOUT 10
#define WRITE_TIMEOUT 60

/* One viewer; freed by relay_free. */
struct desktop_relay {
	TAILQ_ENTRY(desktop_relay) entry;
	struct sandbox *sb;		/* referenced */
	struct http_request *req;	/* until the agent has answered */
	struct bufferevent *agent;
	struct bufferevent *viewer;	/* after the hand-over */
	int closing;			/* the agent left: flush, free */

	/* The agent's answer head. */
	http_parser parser;
	size_t head_len;
	int in_value;
	char field[64];
	char accept[64];
	char protocol[64];
	int which;			/* the header whose value comes */
};

static TAILQ_HEAD(, desktop_relay) relays = TAILQ_HEAD_INITIALIZER(relays);
static size_t nrelays;

static void
relay_free(struct desktop_relay *r)
{
	TAILQ_REMOVE(&relays, r, entry);
	nrelays--;
	if (r->viewer != NULL)
		log_info("desktop %s: a viewer left; %zu through sandboxd now",
		    r->sb->name, nrelays);
	if (r->agent != NULL)
		bufferevent_free(r->agent);
	if (r->viewer != NULL)
		bufferevent_free(r->viewer);
	sandbox_unref(r->sb);
	free(r);
}

/* Before the hand-over: answer the viewer, and end. */
static void
refuse(struct desktop_relay *r, const struct error *err)
{
	struct error e = *err;

	redact_error(&e, r->sb->agent_addr);
	error_prefix(&e, "desktop of %s", r->sb->name);
	sandboxd_reply_error(r->req, &e);
	r->req = NULL;
	relay_free(r);
}

/* ---- the relay -------------------------------------------------------- */

/* from to to, while to has room; from is read again once it has. */
static void
pump(struct bufferevent *from, struct bufferevent *to)
{
	struct evbuffer *out = bufferevent_get_output(to);

	evbuffer_add_buffer(out, bufferevent_get_input(from));
	if (evbuffer_get_length(out) >= RELAY_HIGH)
		bufferevent_disable(from, EV_READ);
	else
		bufferevent_enable(from, EV_READ);
}

static void
agent_read_cb(struct bufferevent *bev, void *arg)
{
	struct desktop_relay *r = arg;

	if (r->viewer != NULL && !r->closing)
		pump(bev, r->viewer);
}

static void
viewer_read_cb(struct bufferevent *bev, void *arg)
{
	struct desktop_relay *r = arg;

	if (!r->closing)
		pump(bev, r->agent);
}

/* Output drained below half: the other side may be read again. */
static void
agent_write_cb(struct bufferevent *bev, void *arg)
{
	struct desktop_relay *r = arg;

	(void)bev;
	if (r->viewer != NULL && !r->closing)
		pump(r->viewer, r->agent);
}

static void
viewer_write_cb(struct bufferevent *bev, void *arg)
{
	struct desktop_relay *r = arg;

	if (r->closing) {
		if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			relay_free(r);
		return;
	}
	pump(r->agent, bev);
}

/* The agent went away (or stalled): what it sent last, its close frame
 * as a rule, reaches the viewer first. */
static void
agent_gone(struct desktop_relay *r)
{
	struct timeval tv = { WRITE_TIMEOUT, 0 };

	evbuffer_add_buffer(bufferevent_get_output(r->viewer),
	    bufferevent_get_input(r->agent));
	bufferevent_free(r->agent);
	r->agent = NULL;
	r->closing = 1;
	if (evbuffer_get_length(bufferevent_get_output(r->viewer)) == 0) {
		relay_free(r);
		return;
	}
	bufferevent_disable(r->viewer, EV_READ);
	bufferevent_setwatermark(r->viewer, EV_WRITE, 0, 0);
	bufferevent_set_timeouts(r->viewer, NULL, &tv);
}

static void
relay_agent_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	agent_gone(arg);
}

static void
viewer_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	/* The agent sees its socket close and lets its side go. */
	relay_free(arg);
}

static void
upgraded_cb(struct bufferevent *viewer, void *arg)
{
	struct desktop_relay *r = arg;
	struct timeval wt = { WRITE_TIMEOUT, 0 };

	if (viewer == NULL) {
		relay_free(r);
		return;
	}
	r->viewer = viewer;
	log_info("desktop %s: a viewer connected; %zu through sandboxd now",
	    r->sb->name, nrelays);
	bufferevent_setcb(viewer, viewer_read_cb, viewer_write_cb,
	    viewer_event_cb, r);
	bufferevent_setcb(r->agent, agent_read_cb, agent_write_cb,
	    relay_agent_event_cb, r);
	bufferevent_set_max_single_read(r->agent, RELAY_READ_MAX);
	bufferevent_set_max_single_write(viewer, RELAY_READ_MAX);
	bufferevent_setwatermark(viewer, EV_READ, 0, RELAY_READ_MAX);
	bufferevent_setwatermark(r->agent, EV_READ, 0, RELAY_READ_MAX);
	bufferevent_setwatermark(viewer, EV_WRITE, RELAY_HIGH / 2, 0);
	bufferevent_setwatermark(r->agent, EV_WRITE, RELAY_HIGH / 2, 0);
	bufferevent_set_timeouts(viewer, NULL, &wt);
	bufferevent_set_timeouts(r->agent, NULL, &wt);
	bufferevent_enable(viewer, EV_READ | EV_WRITE);
	bufferevent_enable(r->agent, EV_WRITE);
	/* What each side sent before this: the agent's first frames (the
	 * RFB greeting), the viewer's behind its request. */
	pump(r->agent, viewer);
	pump(viewer, r->agent);
}

/* ---- the agent's answer ----------------------------------------------- */

static int
on_header_field(http_parser *p, const char *at, size_t len)
{
	struct desktop_relay *r = p->data;

	r->which = 0;
	if (len < sizeof r->field) {
		memcpy(r->field, at, len);
		r->field[len] = '\0';
		if (strcasecmp(r->field, "Sec-WebSocket-Accept") == 0)
			r->which = 1;
		else if (strcasecmp(r->field, "Sec-WebSocket-Protocol") == 0)
			r->which = 2;
	}
	return 0;
}

static int
on_header_value(http_parser *p, const char *at, size_t len)
{
	struct desktop_relay *r = p->data;
	char *dst = r->which == 1 ? r->accept : r->which == 2 ? r->protocol :
	    NULL;

	/* The head is parsed from one piece of memory: a value comes whole. */
	if (dst != NULL && len < sizeof r->accept) {
		memcpy(dst, at, len);
		dst[len] = '\0';
	}
	return 0;
}

static int
on_headers_complete(http_parser *p)
{
	(void)p;
	return 1;	/* the body, if any, is read below */
}

static const http_parser_settings answer_settings = {
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
};

static void
switch_viewer(struct desktop_relay *r)
{
	char accept[96], protocol[96];
	const char *headers[5];
	struct http_request *req = r->req;
	size_t n = 0;

	snprintf(accept, sizeof accept, "Sec-WebSocket-Accept: %s", r->accept);
	headers[n++] = "Upgrade: websocket";
	headers[n++] = "Connection: Upgrade";
	headers[n++] = accept;
	if (r->protocol[0] != '\0') {
		snprintf(protocol, sizeof protocol,
		    "Sec-WebSocket-Protocol: %s", r->protocol);
		headers[n++] = protocol;
	}
	headers[n] = NULL;
	r->req = NULL;
	/* Quiet until the viewer is ours: nothing is read (so no end is
	 * seen) and nothing waits to be written. */
	bufferevent_disable(r->agent, EV_READ);
	bufferevent_setcb(r->agent, NULL, NULL, NULL, NULL);
	bufferevent_set_timeouts(r->agent, NULL, NULL);
	http_reply_upgrade(req, headers, upgraded_cb, r);
}

/* A refusal: its status and body as the agent sent them. */
static void
pass_refusal(struct desktop_relay *r, int status)
{
	struct evbuffer *in = bufferevent_get_input(r->agent);
	uint64_t clen = r->parser.content_length;
	struct http_request *req = r->req;
	struct error e;

	if (clen == (uint64_t)-1 || clen > AGENT_BODY_MAX || status < 400 ||
	    status > 599) {
		error_set(&e, 502, "the agent answered the upgrade with %d",
		    status);
		refuse(r, &e);
		return;
	}
	if (evbuffer_get_length(in) < clen) {
		bufferevent_setwatermark(r->agent, EV_READ, (size_t)clen, 0);
		return;		/* more to come */
	}
	r->req = NULL;
	http_reply(req, status, "application/json", evbuffer_pullup(in,
	    (ssize_t)clen), (size_t)clen);
	relay_free(r);
}

static void
answer_read_cb(struct bufferevent *bev, void *arg)
{
	struct desktop_relay *r = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_ptr end;
	struct error e;
	size_t n;

	if (r->head_len != 0) {
		pass_refusal(r, (int)r->parser.status_code);
		return;
	}
	end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	if (end.pos < 0) {
		if (evbuffer_get_length(in) > AGENT_HEAD_MAX) {
			error_set(&e, 502, "the agent's answer head is too "
			    "long");
			refuse(r, &e);
		}
		return;
	}
	r->head_len = (size_t)end.pos + 4;
	http_parser_init(&r->parser, HTTP_RESPONSE);
	r->parser.data = r;
	n = http_parser_execute(&r->parser, &answer_settings,
	    (const char *)evbuffer_pullup(in, (ssize_t)r->head_len),
	    r->head_len);
	if (HTTP_PARSER_ERRNO(&r->parser) != HPE_OK || n != r->head_len) {
		error_set(&e, 502, "the agent's answer is malformed");
		refuse(r, &e);
		return;
	}
	evbuffer_drain(in, r->head_len);
	if (r->parser.status_code == 101) {
		if (r->accept[0] == '\0') {
			error_set(&e, 502, "the agent switched protocols "
			    "without Sec-WebSocket-Accept");
			refuse(r, &e);
			return;
		}
		switch_viewer(r);
		return;
	}
	pass_refusal(r, (int)r->parser.status_code);
}

static void
answer_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct desktop_relay *r = arg;
	struct error e;

	(void)bev;
	if (what & BEV_EVENT_CONNECTED) {
		bufferevent_enable(r->agent, EV_READ);
		return;
	}
	if (what & BEV_EVENT_TIMEOUT)
		error_set(&e, 504, "the agent did not answer within %d s",
		    HANDSHAKE_TIMEOUT);
	else
		error_set(&e, 502, "the agent %s", what & BEV_EVENT_EOF ?
		    "closed the connection" : "cannot be reached");
	refuse(r, &e);
}

/* The viewer left while the agent was asked. */
static void
viewer_gone_cb(struct http_request *req, void *arg)
{
	struct desktop_relay *r = arg;

	r->req = NULL;
	http_reply_empty(req, 499);
	relay_free(r);
}

/* ---- starting ----------------------------------------------------------- */

/* A header value to pass on: present, short, and with no control byte. */
static const char *
clean_header(struct http_request *req, const char *name)
{
	const char *v = http_request_header(req, name);

	if (v == NULL || strlen(v) > 256)
		return NULL;
	for (const char *p = v; *p != '\0'; p++) {
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return NULL;
	}
	return v;
}

void
desktop_relay_start(struct http_request *req, struct sandbox *sb,
    enum desktop_access access)
{
	const char *key = clean_header(req, "Sec-WebSocket-Key");
	const char *version = clean_header(req, "Sec-WebSocket-Version");
	const char *protocol = clean_header(req, "Sec-WebSocket-Protocol");
	struct timeval tv = { HANDSHAKE_TIMEOUT, 0 };
	struct desktop_relay *r;
	struct evbuffer *out;
	struct error e;
	int fd;

	if (!http_request_is_upgrade(req) || key == NULL || version == NULL) {
		http_reply_error(req, 400, "a WebSocket upgrade is expected at "
		    "/desktop/{id} (the desktop's page connects it)");
		return;
	}
	if (sandbox_check_callable(sb, &e) < 0) {
		sandboxd_reply_error(req, &e);
		return;
	}
	if (nrelays >= RELAY_MAX) {
		http_reply_error(req, 503, "sandboxd relays %d desktop "
		    "viewers, as many as it takes", RELAY_MAX);
		return;
	}
	fd = http_client_connect(sb->agent_addr, &e);
	if (fd < 0) {
		http_reply_error(req, 502, "cannot reach the agent");
		return;
	}
	sessions_touch_sandbox(sb);
	r = xcalloc(1, sizeof *r);
	r->sb = sb;
	sandbox_ref(sb);
	r->req = req;
	TAILQ_INSERT_TAIL(&relays, r, entry);
	nrelays++;
	http_request_on_close(req, viewer_gone_cb, r);
	r->agent = bufferevent_socket_new(sd.base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (r->agent == NULL)
		fatal("out of memory");
	bufferevent_setcb(r->agent, answer_read_cb, NULL, answer_event_cb, r);
	bufferevent_set_timeouts(r->agent, &tv, &tv);
	out = bufferevent_get_output(r->agent);
	/* Through another host's owner: its own desktop route, which
	 * relays to the agent's /websockify as this one would. The viewer's
	 * query (its token) stays here; the agent is told only whether to
	 * drop the viewer's input. */
	evbuffer_add_printf(out, "GET %s%s%s HTTP/1.1\r\n"
	    "Host: agent\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
	    "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: %s\r\n",
	    sb->via_owner ? "/desktop/" : "/websockify",
	    sb->via_owner ? sb->name : "", access == DESKTOP_INTERACTIVE ? "" :
	    "?view_only=true", key, version);
	if (protocol != NULL)
		evbuffer_add_printf(out, "Sec-WebSocket-Protocol: %s\r\n",
		    protocol);
	evbuffer_add_printf(out, "Authorization: Bearer %s\r\n\r\n", sb->token);
	/* With no address, libevent takes the socket as connecting. */
	if (bufferevent_socket_connect(r->agent, NULL, 0) < 0) {
		error_set_errno(&e, 502, errno, "cannot reach the agent");
		refuse(r, &e);
	}
}

/* End r now, unless its hand-over is under way (then the server's
 * callback ends it, with NULL at shutdown). */
static void
end(struct desktop_relay *r, const char *why)
{
	if (r->req != NULL) {
		struct http_request *req = r->req;

		r->req = NULL;
		http_reply_error(req, 503, "%s", why);
		relay_free(r);
	} else if (r->viewer != NULL) {
		relay_free(r);
	}
}

/* A sandbox going closes its viewers at once. */
static void
changed_cb(struct sandbox *sb, void *arg)
{
	struct desktop_relay *r, *next;

	(void)arg;
	if (sb->state != SB_RELEASING && sb->state != SB_RELEASED && sb->listed)
		return;
	for (r = TAILQ_FIRST(&relays); r != NULL; r = next) {
		next = TAILQ_NEXT(r, entry);
		if (r->sb == sb)
			end(r, "the sandbox is being released");
	}
}

void
desktop_relay_init(void)
{
	sandbox_hook_add(changed_cb, NULL);
}

void
desktop_relay_close_all(void)
{
	struct desktop_relay *r, *next;

	for (r = TAILQ_FIRST(&relays); r != NULL; r = next) {
		next = TAILQ_NEXT(r, entry);
		end(r, "sandboxd is shutting down");
	}
}
