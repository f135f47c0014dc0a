/*
 * Connections of the HTTP server: parse requests with http-parser, route,
 * check auth and limits, and hand requests to handlers. Sockets are
 * accepted by http_listen.c; replies are written by http_reply.c; the
 * time limits on heads, bodies and lingering are http_limits.c's.
 */
#include "http_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "log.h"
#include "xmalloc.h"

#define HTTP_MAX_HEADERS	128
#define HTTP_MAX_URL		(16 * 1024)
#define HTTP_IDLE_TIMEOUT	120	/* seconds a keep-alive connection may idle */
#define HTTP_BODY_TIMEOUT	120	/* seconds between pieces of a body */
#define HTTP_WRITE_TIMEOUT	300	/* seconds a client may stall reading */
#define HTTP_INPUT_HIGH		(1024 * 1024)	/* stop reading past this */
#define HTTP_DEFAULT_MAX_BODY	(32 * 1024 * 1024)
#define HTTP_IO_STEP		(256 * 1024)	/* bytes per socket read/write */

static void conn_parse(struct http_conn *conn);
static void conn_upgrade(struct http_conn *conn);
static void conn_set_read_timeout(struct http_conn *conn, int seconds);
static void conn_flushed_close(struct http_conn *conn);

#define HTTP_LINGER_MAX		(64 * 1024 * 1024)

/* Requests are freed a loop turn after their reply, not at once, so that
 * a second reply from the same chain of calls still finds REPLY_DONE and is
 * dropped with an error in the log rather than written or freed twice. */
static void
retired_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_server *server = arg;
	struct http_request *req;

	(void)fd;
	(void)what;
	while ((req = server->retired) != NULL) {
		server->retired = req->retired_next;
		http_request_free(req);
	}
}

void
http_request_retire(struct http_request *req)
{
	struct http_server *server = req->server;

	req->reply = REPLY_DONE;
	req->conn = NULL;
	req->retired_next = server->retired;
	server->retired = req;
	event_active(server->retire_ev, EV_TIMEOUT, 0);
}

/* Parsing. */

static struct http_conn *
parser_conn(http_parser *p)
{
	return p->data;
}

static int
on_message_begin(http_parser *p)
{
	struct http_conn *conn = parser_conn(p);
	struct http_request *req;

	if (conn->req != NULL)
		fatal("http: a request began while another is in progress");
	req = xcalloc(1, sizeof *req);
	req->conn = conn;
	req->server = conn->server;
	req->content_length = -1;
	req->body = evbuffer_new();
	conn->server->nrequests++;
	gettimeofday(&req->started, NULL);
	conn->req = req;
	http_header_reader_reset(&conn->hr);
	http_conn_limit_head(conn);
	return 0;
}

static int
on_url(http_parser *p, const char *at, size_t len)
{
	struct http_conn *conn = parser_conn(p);
	struct http_request *req = conn->req;
	size_t old;

	if (req == NULL)
		return 0;
	old = req->url != NULL ? strlen(req->url) : 0;

	if (old + len > HTTP_MAX_URL)
		return -1;
	req->url = xrealloc(req->url, old + len + 1);
	memcpy(req->url + old, at, len);
	req->url[old + len] = '\0';
	return 0;
}

/* RFC 9110's tchar: what a header name is made of. */
static int
is_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
	    (c >= 'A' && c <= 'Z') || (c != '\0' && strchr("!#$%&'*+-.^_`|~",
	    c) != NULL);
}

/*
 * RFC 9112 (5.1, 5.2) has a server refuse both a space before a header's
 * colon and a header continued on the next line (obs-fold). http-parser
 * takes "Transfer-Encoding : chunked" as chunked and joins folded lines,
 * while a proxy in front may read either otherwise: the same bytes would be
 * two different requests to the two of us (request smuggling).
 */
static int
on_header_field(http_parser *p, const char *at, size_t len)
{
	struct http_conn *conn = parser_conn(p);

	if (conn->req == NULL)
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (!is_tchar((unsigned char)at[i])) {
			conn->fault = "invalid character in a header name";
			return -1;
		}
	}
	if (http_header_reader_field(&conn->hr, at, len, &conn->req->headers,
	    HTTP_MAX_HEADERS) != HTTP_HEADER_OK) {
		conn->fault = "too many headers, or a NUL byte in one";
		return -1;
	}
	return 0;
}

static int
on_header_value(http_parser *p, const char *at, size_t len)
{
	struct http_conn *conn = parser_conn(p);
	char before;

	/* A piece of a value starts at a line's first byte only when the
	 * line continues the one before: an obs-fold. (A value cut by the
	 * end of what was read resumes mid-line, after a value byte.) */
	before = at > conn->parse_start ? at[-1] : conn->parse_last;
	if (len > 0 && before == '\n') {
		conn->fault = "a header folded over several lines (obs-fold)";
		return -1;
	}
	http_header_reader_value(&conn->hr, at, len);
	return 0;
}

static int
method_from_parser(unsigned pm, enum http_verb *method)
{
	switch (pm) {
	case HTTP_DELETE: *method = HTTP_METHOD_DELETE; return 0;
	case HTTP_GET: *method = HTTP_METHOD_GET; return 0;
	case HTTP_HEAD: *method = HTTP_METHOD_HEAD; return 0;
	case HTTP_POST: *method = HTTP_METHOD_POST; return 0;
	case HTTP_PUT: *method = HTTP_METHOD_PUT; return 0;
	case HTTP_OPTIONS: *method = HTTP_METHOD_OPTIONS; return 0;
	case HTTP_PATCH: *method = HTTP_METHOD_PATCH; return 0;
	default: return -1;
	}
}

static int
parse_query(struct http_request *req, struct error *err)
{
	const char *q = req->raw_query;

	while (q != NULL && *q != '\0') {
		const char *amp = strchr(q, '&'), *eq;
		size_t len = amp != NULL ? (size_t)(amp - q) : strlen(q);
		char *name, *value;

		eq = memchr(q, '=', len);
		if (len > 0) {
			size_t nlen = eq != NULL ? (size_t)(eq - q) : len;

			/* Before auth: a fixed message, no byte of the client's. */
			if (http_percent_decode(q, nlen, 1, &name) < 0) {
				error_set(err, 400, "malformed query string");
				return -1;
			}
			if (eq == NULL)
				value = xstrdup("");
			else if (http_percent_decode(eq + 1, len - nlen - 1, 1,
			    &value) < 0) {
				free(name);
				error_set(err, 400, "malformed query string");
				return -1;
			}
			http_headers_add(&req->query, name, value);
		}
		q = amp != NULL ? amp + 1 : NULL;
	}
	return 0;
}

/* Split the URL into path and query, drop the alias prefix, decode. */
static int
parse_target(struct http_request *req, struct error *err)
{
	const char *alias = req->server->cfg.alias_prefix;
	struct http_parser_url u;
	const char *target = req->url;
	char *q;

	if (target == NULL || target[0] != '/') {
		http_parser_url_init(&u);
		if (target == NULL || http_parser_parse_url(target,
		    strlen(target), 0, &u) != 0 ||
		    !(u.field_set & (1 << UF_PATH))) {
			error_set(err, 400, "malformed request target");
			return -1;
		}
		/* Absolute form (a proxy-style request): keep path and query. */
		target += u.field_data[UF_PATH].off;
	}
	if (alias != NULL) {
		size_t alen = strlen(alias);

		if (strncmp(target, alias, alen) == 0 &&
		    (target[alen] == '/' || target[alen] == '?' ||
		    target[alen] == '\0')) {
			target += alen;
		}
	}
	if (*target != '/')
		req->raw_target = xasprintf("/%s", target);
	else
		req->raw_target = xstrdup(target);
	q = strchr(req->raw_target, '?');
	if (q != NULL) {
		*q = '\0';
		if (http_percent_decode(req->raw_target, strlen(req->raw_target),
		    0, &req->path) < 0) {
			*q = '?';
			error_set(err, 400, "malformed percent-encoding in path");
			return -1;
		}
		*q = '?';
		req->raw_query = q + 1;
	} else if (http_percent_decode(req->raw_target, strlen(req->raw_target),
	    0, &req->path) < 0) {
		error_set(err, 400, "malformed percent-encoding in path");
		return -1;
	}
	/* A '#' fragment is never sent by conforming clients; drop it. */
	if ((q = strchr(req->path, '#')) != NULL && req->raw_query == NULL)
		*q = '\0';
	return parse_query(req, err);
}

/* route: NULL when no route has the path (or not with this method). */
static int
check_auth(struct http_request *req, const struct http_route *route,
    struct error *err)
{
	const struct http_server_config *cfg = &req->server->cfg;
	const char *h;

	if (cfg->token == NULL ||
	    (route != NULL && (route->flags & HTTP_ROUTE_NO_AUTH)))
		return 0;
	h = http_request_header(req, "Authorization");
	if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0) {
		error_set(err, cfg->auth_status, "%s", cfg->auth_missing_detail);
		return -1;
	}
	h += 7;
	while (*h == ' ')
		h++;
	if (!http_token_equal(h, cfg->token)) {
		error_set(err, cfg->auth_status, "%s", cfg->auth_wrong_detail);
		return -1;
	}
	return 0;
}

/* Answer before the body was read: the connection cannot be reused because
 * the body would be taken for the next request, so it closes after. */
void
http_request_reject(struct http_request *req, const struct error *err)
{
	req->rejected = 1;
	req->reply_close = 1;
	http_parser_pause(&req->conn->parser, 1);
	http_reply_err(req, err);
}

static void
dispatch(struct http_request *req)
{
	req->dispatched = 1;
	req->route->handler(req, req->server->cfg.handler_arg);
}

static int
on_headers_complete(http_parser *p)
{
	struct http_conn *conn = parser_conn(p);
	struct http_request *req = conn->req;
	const struct http_server_config *cfg = &conn->server->cfg;
	struct error err = { 0 };
	const char *cl, *expect;
	int mismatch;

	if (req == NULL)
		return 0;
	http_conn_limit_body(conn);
	if (http_header_reader_end(&conn->hr, &req->headers,
	    HTTP_MAX_HEADERS) != HTTP_HEADER_OK)
		return -1;
	req->http_major = p->http_major;
	req->http_minor = p->http_minor;
	req->keepalive = http_should_keep_alive(p);
	req->method_name = http_method_str((enum http_method)p->method);
	if (method_from_parser(p->method, &req->method) < 0) {
		error_set(&err, 501, "method %s is not supported",
		    req->method_name);
		goto rejected;
	}
	if (parse_target(req, &err) < 0)
		goto rejected;
	if ((cl = http_request_header(req, "Content-Length")) != NULL)
		req->content_length = (int64_t)p->content_length;
	req->route = http_route_find(cfg->routes, cfg->nroutes, req->method,
	    req->path, &mismatch);
	/* Which paths exist is for clients with the token to learn: without
	 * it, every path but the open routes' answers the auth error. */
	if (check_auth(req, req->route, &err) < 0)
		goto rejected;
	if (req->route == NULL) {
		if (mismatch)
			error_set(&err, 405, "Method Not Allowed");
		else
			error_set(&err, 404, "Not Found");
		goto rejected;
	}
	req->body_limit = req->route->max_body ? req->route->max_body :
	    cfg->max_body ? cfg->max_body : HTTP_DEFAULT_MAX_BODY;
	if (!(req->route->flags & HTTP_ROUTE_STREAM_BODY) &&
	    req->content_length > (int64_t)req->body_limit) {
		error_set(&err, 413, "request body too large: %lld bytes, the "
		    "limit is %zu", (long long)req->content_length,
		    req->body_limit);
		goto rejected;
	}
	expect = http_request_header(req, "Expect");
	if (expect != NULL && strcasecmp(expect, "100-continue") == 0 &&
	    req->http_major == 1 && req->http_minor >= 1) {
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";

		bufferevent_write(conn->bev, cont, sizeof cont - 1);
	}
	conn_set_read_timeout(conn, HTTP_BODY_TIMEOUT);
	if (req->route->flags & HTTP_ROUTE_STREAM_BODY)
		dispatch(req);
	return 0;
rejected:
	http_request_reject(req, &err);
	return 0;
}

static int
on_body(http_parser *p, const char *at, size_t len)
{
	struct http_conn *conn = parser_conn(p);
	struct http_request *req = conn->req;

	conn->window_bytes += len;
	if (req == NULL || req->rejected || req->body_aborted)
		return 0;
	req->body_received += len;
	if (req->route->flags & HTTP_ROUTE_STREAM_BODY) {
		if (req->body_cb == NULL)
			return 0;
		if (req->body_cb(req, at, len, req->body_arg) < 0) {
			/* Its reply, if already sent, has retired req. */
			if (conn->req == req) {
				req->body_aborted = 1;
				req->reply_close = 1;
			}
			http_parser_pause(p, 1);
		}
		return 0;
	}
	if (evbuffer_get_length(req->body) + len > req->body_limit) {
		struct error err;

		error_set(&err, 413, "request body too large: the limit is %zu "
		    "bytes", req->body_limit);
		http_request_reject(req, &err);
		return 0;
	}
	evbuffer_add(req->body, at, len);
	return 0;
}

static int
on_message_complete(http_parser *p)
{
	struct http_conn *conn = parser_conn(p);
	struct http_request *req = conn->req;

	if (req == NULL)
		return 0;
	req->body_complete = 1;
	/* What follows the head of an upgrade is another protocol: an
	 * ordinary answer ends the connection. */
	if (p->upgrade) {
		req->upgrade = 1;
		req->reply_close = 1;
	}
	/* One request at a time: pipelined requests wait in the input buffer
	 * until this one is answered. */
	http_parser_pause(p, 1);
	conn->waiting_reply = 1;
	http_conn_limit_stop(conn);
	conn_set_read_timeout(conn, 0);
	/* (A request already answered is no longer conn->req.) */
	if (req->rejected || req->body_aborted)
		return 0;
	if (!req->dispatched)
		dispatch(req);
	else if (req->body_end_cb != NULL)
		req->body_end_cb(req, req->body_arg);
	return 0;
}

static const http_parser_settings parser_settings = {
	.on_message_begin = on_message_begin,
	.on_url = on_url,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

/* Connections. */

static void
conn_set_read_timeout(struct http_conn *conn, int seconds)
{
	struct timeval rtv = { seconds, 0 }, wtv = { HTTP_WRITE_TIMEOUT, 0 };

	bufferevent_set_timeouts(conn->bev, seconds > 0 ? &rtv : NULL, &wtv);
}

/* End a connection whose request cannot go on, with a fixed answer (the
 * request may not have passed auth): status and detail, both ours. */
void
http_conn_refuse(struct http_conn *conn, int status, const char *detail)
{
	struct http_request *req = conn->req;
	char body[256], head[256];
	int blen, hlen;

	/* A request whose handler already runs will answer (into the void). */
	if (req != NULL && !req->dispatched) {
		conn->req = NULL;
		http_request_free(req);
		req = NULL;
	}
	http_conn_limit_stop(conn);
	if (req == NULL) {
		blen = snprintf(body, sizeof body, "{\"detail\":\"%s\"}", detail);
		hlen = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\n"
		    "Content-Type: application/json\r\nContent-Length: %d\r\n"
		    "Connection: close\r\n\r\n", status, http_status_reason(status),
		    blen);
		bufferevent_write(conn->bev, head, (size_t)hlen);
		bufferevent_write(conn->bev, body, (size_t)blen);
	}
	conn->closing = 1;
	conn->linger = 1;
	bufferevent_disable(conn->bev, EV_READ);
	bufferevent_setwatermark(conn->bev, EV_WRITE, 0, 0);
	if (evbuffer_get_length(bufferevent_get_output(conn->bev)) == 0)
		conn_flushed_close(conn);
}

static void
conn_bad_request(struct http_conn *conn, const char *why)
{
	char detail[160];

	snprintf(detail, sizeof detail, "malformed HTTP request: %s", why);
	http_conn_refuse(conn, 400, detail);
}

static void
conn_parse(struct http_conn *conn)
{
	struct evbuffer *in = bufferevent_get_input(conn->bev);

	if (conn->upgrade_cb != NULL) {
		conn_upgrade(conn);
		return;
	}
	if (conn->req == NULL && !conn->waiting_reply && !conn->closing &&
	    evbuffer_get_length(in) > 0)
		http_conn_limit_head(conn);
	while (!conn->closing && !conn->waiting_reply && !conn->body_paused) {
		struct evbuffer_iovec vec;
		size_t n;
		enum http_errno e;

		if (evbuffer_peek(in, -1, NULL, &vec, 1) < 1 || vec.iov_len == 0)
			return;
		conn->in_parse = 1;
		conn->parse_start = vec.iov_base;
		n = http_parser_execute(&conn->parser, &parser_settings,
		    vec.iov_base, vec.iov_len);
		conn->in_parse = 0;
		if (n > 0)
			conn->parse_last = ((const char *)vec.iov_base)[n - 1];
		evbuffer_drain(in, n);
		e = HTTP_PARSER_ERRNO(&conn->parser);
		if (e == HPE_PAUSED)
			return;
		if (e != HPE_OK) {
			log_debug("http %s: bad request: %s", conn->peer,
			    conn->fault != NULL ? conn->fault :
			    http_errno_description(e));
			conn_bad_request(conn, conn->fault != NULL ? conn->fault :
			    http_errno_name(e));
			return;
		}
	}
}

void
http_conn_upgrade(struct http_conn *conn, http_upgrade_cb cb, void *arg)
{
	conn->upgrade_cb = cb;
	conn->upgrade_arg = arg;
	event_active(conn->resume_ev, EV_TIMEOUT, 0);
}

/* The 101 is queued: the connection leaves the server with what is in its
 * buffers, the rest of the 101 included. */
static void
conn_upgrade(struct http_conn *conn)
{
	struct bufferevent *bev = conn->bev;
	http_upgrade_cb cb = conn->upgrade_cb;
	void *arg = conn->upgrade_arg;

	conn->upgrade_cb = NULL;
	bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
	bufferevent_set_timeouts(bev, NULL, NULL);
	bufferevent_setwatermark(bev, EV_READ | EV_WRITE, 0, 0);
	conn->bev = NULL;
	http_conn_free(conn);
	cb(bev, arg);
}

static void
conn_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	conn_parse(arg);
}

/* The reply of conn->req is fully queued: move to the next request. */
void
http_conn_reply_done(struct http_request *req)
{
	struct http_conn *conn = req->conn;

	if (conn == NULL) {
		http_request_retire(req);
		return;
	}
	/* Answered before the whole body came in: the rest of the body would
	 * be read as the next request, so this connection ends here. */
	if (!req->body_complete) {
		req->reply_close = 1;
		conn->linger = 1;
		http_parser_pause(&conn->parser, 1);
	}
	conn->req = NULL;
	http_conn_limit_stop(conn);
	if (req->reply_close || !req->keepalive)
		conn->closing = 1;
	http_request_retire(req);
	if (conn->closing) {
		bufferevent_disable(conn->bev, EV_READ);
		bufferevent_setwatermark(conn->bev, EV_WRITE, 0, 0);
		if (evbuffer_get_length(bufferevent_get_output(conn->bev)) == 0 &&
		    !conn->in_parse)
			conn_flushed_close(conn);
		return;
	}
	conn->waiting_reply = 0;
	if (!conn->body_paused)
		http_parser_pause(&conn->parser, 0);
	conn_set_read_timeout(conn, HTTP_IDLE_TIMEOUT);
	bufferevent_enable(conn->bev, EV_READ);
	if (!conn->in_parse &&
	    evbuffer_get_length(bufferevent_get_input(conn->bev)) > 0)
		event_active(conn->resume_ev, EV_TIMEOUT, 0);
}

/*
 * Closing while the client may still be sending (we answered before its
 * body was read): closing now would make the kernel send a reset that can
 * destroy our answer before the client reads it. So, as nginx does, shut
 * our side, read and drop for a moment, then close.
 */
static void
conn_flushed_close(struct http_conn *conn)
{
	if (!conn->linger) {
		http_conn_free(conn);
		return;
	}
	conn->linger = 0;
	conn->discarding = 1;
	shutdown(bufferevent_getfd(conn->bev), SHUT_WR);
	evbuffer_drain(bufferevent_get_input(conn->bev),
	    evbuffer_get_length(bufferevent_get_input(conn->bev)));
	bufferevent_setwatermark(conn->bev, EV_READ, 0, 0);
	conn_set_read_timeout(conn, HTTP_LINGER_SECONDS);
	bufferevent_enable(conn->bev, EV_READ);
	http_conn_limit_linger(conn);
}

static void
conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct http_conn *conn = arg;

	if (conn->discarding) {
		struct evbuffer *in = bufferevent_get_input(bev);

		conn->discarded += evbuffer_get_length(in);
		evbuffer_drain(in, evbuffer_get_length(in));
		if (conn->discarded > HTTP_LINGER_MAX)
			http_conn_free(conn);
		return;
	}
	conn_parse(conn);
}

static void
conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct http_conn *conn = arg;
	struct http_request *req = conn->req;

	if (conn->discarding)
		return;
	if (conn->closing) {
		if (evbuffer_get_length(bufferevent_get_output(bev)) == 0 &&
		    !conn->in_parse)
			conn_flushed_close(conn);
		return;
	}
	if (req != NULL && req->reply == REPLY_STREAMING && req->drain_cb != NULL)
		req->drain_cb(req, req->drain_arg);
}

/* The client is gone (or timed out): tell the request in flight. */
static void
conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct http_conn *conn = arg;
	struct http_request *req = conn->req;

	(void)bev;
	if (what & BEV_EVENT_ERROR)
		log_debug("http %s: connection error: %s", conn->peer,
		    strerror(EVUTIL_SOCKET_ERROR()));
	if (req != NULL) {
		conn->req = NULL;
		req->conn = NULL;
		if (!req->dispatched) {
			http_request_free(req);
		} else if (req->close_cb != NULL) {
			http_event_cb cb = req->close_cb;

			req->close_cb = NULL;
			cb(req, req->close_arg);
		}
	}
	http_conn_free(conn);
}

void
http_conn_free(struct http_conn *conn)
{
	http_upgrade_cb upgrade_cb = conn->upgrade_cb;

	if (conn->in_parse)
		fatal("http: connection freed while parsing");
	if (conn->req != NULL) {
		struct http_request *req = conn->req;

		conn->req = NULL;
		req->conn = NULL;
		if (!req->dispatched)
			http_request_free(req);
		else if (req->close_cb != NULL)
			req->close_cb(req, req->close_arg);
	}
	LIST_REMOVE(conn, entry);
	conn->server->nconns--;
	if (conn->bev != NULL)
		bufferevent_free(conn->bev);
	event_free(conn->resume_ev);
	event_free(conn->limit_ev);
	http_header_reader_free(&conn->hr);
	http_listeners_conn_closed(conn->server);
	/* Gone before its hand-over: its taker hears so. */
	if (upgrade_cb != NULL)
		upgrade_cb(NULL, conn->upgrade_arg);
	free(conn);
}

/* A new connection of the server on fd, which it now owns. */
void
http_conn_open(struct http_server *server, evutil_socket_t fd,
    const char *peer)
{
	struct http_conn *conn = xcalloc(1, sizeof *conn);

	conn->server = server;
	snprintf(conn->peer, sizeof conn->peer, "%s", peer);
	conn->bev = bufferevent_socket_new(server->base, fd,
	    BEV_OPT_CLOSE_ON_FREE);
	if (conn->bev == NULL) {
		log_warn("http: cannot set up a connection from %s", conn->peer);
		evutil_closesocket(fd);
		free(conn);
		return;
	}
	http_header_reader_init(&conn->hr);
	conn->resume_ev = event_new(server->base, -1, 0, conn_resume_cb, conn);
	http_conn_limit_init(conn);
	http_parser_init(&conn->parser, HTTP_REQUEST);
	conn->parser.data = conn;
	LIST_INSERT_HEAD(&server->conns, conn, entry);
	server->nconns++;
	bufferevent_setcb(conn->bev, conn_read_cb, conn_write_cb, conn_event_cb,
	    conn);
	/* libevent moves 16 KiB per read or write by default; large uploads
	 * and downloads go about twice as fast in bigger steps. */
	bufferevent_set_max_single_read(conn->bev, HTTP_IO_STEP);
	bufferevent_set_max_single_write(conn->bev, HTTP_IO_STEP);
	bufferevent_setwatermark(conn->bev, EV_READ, 0, HTTP_INPUT_HIGH);
	bufferevent_setwatermark(conn->bev, EV_WRITE, 256 * 1024, 0);
	conn_set_read_timeout(conn, HTTP_IDLE_TIMEOUT);
	bufferevent_enable(conn->bev, EV_READ | EV_WRITE);
}

struct http_server *
http_server_new(struct event_base *base, const struct http_server_config *cfg)
{
	struct http_server *server = xcalloc(1, sizeof *server);

	server->base = base;
	server->cfg = *cfg;
	if (server->cfg.auth_status == 0)
		server->cfg.auth_status = 403;
	if (server->cfg.auth_missing_detail == NULL)
		server->cfg.auth_missing_detail = "Authentication required";
	if (server->cfg.auth_wrong_detail == NULL)
		server->cfg.auth_wrong_detail = "Invalid token";
	if (server->cfg.max_connections == 0)
		server->cfg.max_connections = http_default_max_connections();
	if (!(server->cfg.header_timeout > 0))
		server->cfg.header_timeout = HTTP_DEFAULT_HEADER_TIMEOUT;
	if (!(server->cfg.body_rate_window > 0))
		server->cfg.body_rate_window = HTTP_DEFAULT_BODY_RATE_WINDOW;
	LIST_INIT(&server->conns);
	server->retire_ev = event_new(base, -1, 0, retired_cb, server);
	http_listeners_init(server);
	return server;
}

size_t
http_server_connections(struct http_server *server)
{
	return server->nconns;
}

void
http_server_close_listeners(struct http_server *server)
{
	struct http_conn *conn, *next;

	http_listeners_close(server);
	for (conn = LIST_FIRST(&server->conns); conn != NULL; conn = next) {
		next = LIST_NEXT(conn, entry);
		if (conn->req == NULL)
			http_conn_free(conn);
	}
}

void
http_server_free(struct http_server *server)
{
	http_server_close_listeners(server);
	while (!LIST_EMPTY(&server->conns))
		http_conn_free(LIST_FIRST(&server->conns));
	retired_cb(-1, 0, server);
	event_free(server->retire_ev);
	event_free(server->backoff_ev);
	free(server);
}
