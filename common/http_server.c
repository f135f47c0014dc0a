/*
 * Connections of the HTTP server: read their sockets into http-parser
 * (whose callbacks, http_parse.c, build, route, check and dispatch each
 * request), pause and resume for backpressure and for replies, keep-alive,
 * closing, lingering over an unread body, hand-over after a 101. Sockets
 * are accepted by http_listen.c; replies are written by http_reply.c; the
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

#define HTTP_IDLE_TIMEOUT	120	/* seconds a keep-alive connection may idle */
#define HTTP_WRITE_TIMEOUT	300	/* seconds a client may stall reading */
#define HTTP_INPUT_HIGH		(1024 * 1024)	/* stop reading past this */
#define HTTP_IO_STEP		(256 * 1024)	/* bytes per socket read/write */

static void conn_parse(struct http_conn *conn);
static void conn_upgrade(struct http_conn *conn);
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

/* Connections. */

void
http_conn_set_read_timeout(struct http_conn *conn, int seconds)
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
		n = http_parser_execute(&conn->parser, &http_parse_settings,
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
	http_conn_set_read_timeout(conn, HTTP_IDLE_TIMEOUT);
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
	http_conn_set_read_timeout(conn, HTTP_LINGER_SECONDS);
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
	http_conn_set_read_timeout(conn, HTTP_IDLE_TIMEOUT);
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
