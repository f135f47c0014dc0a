/* Writing answers: whole replies, JSON, errors, and streamed replies. */
#include "http_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "log.h"
#include "timing.h"
#include "utf8.h"
#include "xmalloc.h"

void
http_reply_add_header(struct http_request *req, const char *name,
    const char *value)
{
	http_headers_add(&req->out_headers, xstrdup(name), xstrdup(value));
}

static void
access_log(struct http_request *req)
{
	double ms;

	if (!req->server->cfg.access_log)
		return;
	ms = (timing_monotonic() - req->started) * 1e3;
	/* The path only: a query may carry a password (the desktop URL). */
	log_info("%s \"%s %s\" %d %" PRIu64 " %.2fms%s",
	    req->conn != NULL ? req->conn->peer : "-", req->method_name,
	    req->path != NULL ? req->path : "?", req->status, req->bytes_out,
	    ms, req->conn == NULL ? " (client gone)" : "");
}

static int
head_only(struct http_request *req)
{
	return req->method == HTTP_METHOD_HEAD || req->status == 204 ||
	    req->status == 304;
}

/* Status line and headers. content_length < 0: chunked (or close-delimited
 * for HTTP/1.0 clients, which do not know chunked). */
static void
write_head(struct http_request *req, int status, const char *content_type,
    int64_t content_length)
{
	struct evbuffer *out = bufferevent_get_output(req->conn->bev);
	const char *server_name = req->server->cfg.server_name;
	int old_client = req->http_major == 1 && req->http_minor == 0;

	req->status = status;
	/* A reply before the whole body was read ends the connection (see
	 * http_conn_reply_done): the client must hear it, or it would send
	 * its next request into a closed socket. */
	if (req->body_aborted || !req->keepalive || !req->body_complete)
		req->reply_close = 1;
	evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\n", status,
	    http_status_reason(status));
	if (server_name != NULL)
		evbuffer_add_printf(out, "Server: %s\r\n", server_name);
	if (content_type != NULL)
		evbuffer_add_printf(out, "Content-Type: %s\r\n", content_type);
	if (content_length >= 0) {
		if (status != 204 && status != 304)
			evbuffer_add_printf(out, "Content-Length: %" PRId64 "\r\n",
			    content_length);
	} else if (old_client) {
		req->reply_close = 1;
	} else if (req->method != HTTP_METHOD_HEAD) {
		req->reply_chunked = 1;
		evbuffer_add_printf(out, "Transfer-Encoding: chunked\r\n");
	}
	for (size_t i = 0; i < req->out_headers.n; i++)
		evbuffer_add_printf(out, "%s: %s\r\n", req->out_headers.v[i].name,
		    req->out_headers.v[i].value);
	if (req->reply_close)
		evbuffer_add_printf(out, "Connection: close\r\n");
	else if (old_client)
		evbuffer_add_printf(out, "Connection: keep-alive\r\n");
	evbuffer_add(out, "\r\n", 2);
}

static void
reply_finish(struct http_request *req)
{
	req->reply = REPLY_DONE;
	access_log(req);
	http_conn_reply_done(req);
}

/* Every reply path starts here: a reply to a vanished client, or a second
 * reply, frees or ignores instead of writing. Returns 0 if we may write. */
static int
reply_begin(struct http_request *req)
{
	if (req->reply == REPLY_DONE) {
		log_error("http: a second reply to %s %s was dropped",
		    req->method_name, req->path);
		return -1;
	}
	if (req->conn == NULL) {
		access_log(req);
		http_request_retire(req);
		return -1;
	}
	return 0;
}

void
http_reply(struct http_request *req, int status, const char *content_type,
    const void *body, size_t len)
{
	if (reply_begin(req) < 0)
		return;
	write_head(req, status, content_type, (int64_t)len);
	if (!head_only(req) && len > 0) {
		bufferevent_write(req->conn->bev, body, len);
		req->bytes_out += len;
	}
	reply_finish(req);
}

void
http_reply_buffer(struct http_request *req, int status,
    const char *content_type, struct evbuffer *buf)
{
	size_t len = evbuffer_get_length(buf);

	if (reply_begin(req) < 0) {
		evbuffer_drain(buf, len);
		return;
	}
	write_head(req, status, content_type, (int64_t)len);
	if (!head_only(req)) {
		bufferevent_write_buffer(req->conn->bev, buf);
		req->bytes_out += len;
	} else {
		evbuffer_drain(buf, len);
	}
	reply_finish(req);
}

void
http_reply_json(struct http_request *req, int status, json_t *json)
{
	char *text = json_dumps(json, JSON_COMPACT | JSON_ENCODE_ANY);

	json_decref(json);
	if (text == NULL) {
		/* Only invalid UTF-8 in a string gets here; a bug of ours. */
		log_error("http: cannot encode the JSON answer to %s %s",
		    req->method_name, req->path);
		http_reply_error(req, 500, "cannot encode the answer as JSON");
		return;
	}
	http_reply(req, status, "application/json", text, strlen(text));
	free(text);
}

void
http_reply_error(struct http_request *req, int status, const char *fmt, ...)
{
	struct error err;
	va_list ap;

	va_start(ap, fmt);
	error_vset(&err, status, fmt, ap);
	va_end(ap);
	http_reply_err(req, &err);
}

void
http_reply_err(struct http_request *req, const struct error *err)
{
	int status = err->status >= 400 && err->status <= 599 ? err->status : 500;
	json_t *body = json_object();

	if (status >= 500)
		log_warn("%s %s: %d %s", req->method_name,
		    req->path != NULL ? req->path : "?", status, err->msg);
	json_object_set_new(body, "detail", utf8_json_string(err->msg,
	    strlen(err->msg)));
	http_reply_json(req, status, body);
}

void
http_reply_empty(struct http_request *req, int status)
{
	http_reply(req, status, NULL, NULL, 0);
}

/* cb(NULL) for a request whose client left before its 101. */
struct upgrade_gone {
	http_upgrade_cb cb;
	void *arg;
};

static void
upgrade_gone_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upgrade_gone *g = arg;

	(void)fd;
	(void)what;
	g->cb(NULL, g->arg);
	free(g);
}

void
http_reply_upgrade(struct http_request *req, const char *const *headers,
    http_upgrade_cb cb, void *arg)
{
	const char *server_name = req->server->cfg.server_name;
	struct http_conn *conn = req->conn;
	struct upgrade_gone *g;
	struct evbuffer *out;

	if (!http_request_is_upgrade(req) || req->reply != REPLY_NONE)
		fatal("http: %s %s cannot switch protocols", req->method_name,
		    req->path);
	req->status = 101;
	if (conn == NULL) {
		access_log(req);
		http_request_retire(req);
		g = xmalloc(sizeof *g);
		g->cb = cb;
		g->arg = arg;
		if (event_base_once(req->server->base, -1, EV_TIMEOUT,
		    upgrade_gone_cb, g, NULL) < 0)
			fatal("cannot schedule an event");
		return;
	}
	out = bufferevent_get_output(conn->bev);
	evbuffer_add_printf(out, "HTTP/1.1 101 %s\r\n", http_status_reason(101));
	if (server_name != NULL)
		evbuffer_add_printf(out, "Server: %s\r\n", server_name);
	for (size_t i = 0; headers != NULL && headers[i] != NULL; i++)
		evbuffer_add_printf(out, "%s\r\n", headers[i]);
	evbuffer_add(out, "\r\n", 2);
	access_log(req);
	conn->req = NULL;
	http_request_retire(req);
	http_conn_upgrade(conn, cb, arg);
}

void
http_reply_start(struct http_request *req, int status,
    const char *content_type, int64_t content_length)
{
	if (req->reply != REPLY_NONE) {
		log_error("http: a second reply to %s %s was dropped",
		    req->method_name, req->path);
		return;
	}
	/* To a vanished client the writes are dropped and http_reply_end
	 * frees the request, so the handler's path stays the same. */
	req->reply = REPLY_STREAMING;
	if (req->conn != NULL)
		write_head(req, status, content_type, content_length);
}

void
http_reply_write(struct http_request *req, const void *data, size_t len)
{
	struct evbuffer *out;

	if (req->conn == NULL || req->reply != REPLY_STREAMING || len == 0 ||
	    head_only(req))
		return;
	out = bufferevent_get_output(req->conn->bev);
	if (req->reply_chunked)
		evbuffer_add_printf(out, "%zx\r\n", len);
	evbuffer_add(out, data, len);
	if (req->reply_chunked)
		evbuffer_add(out, "\r\n", 2);
	req->bytes_out += len;
}

void
http_reply_write_buffer(struct http_request *req, struct evbuffer *buf)
{
	size_t len = evbuffer_get_length(buf);
	struct evbuffer *out;

	if (req->conn == NULL || req->reply != REPLY_STREAMING || len == 0 ||
	    head_only(req)) {
		evbuffer_drain(buf, len);
		return;
	}
	out = bufferevent_get_output(req->conn->bev);
	if (req->reply_chunked)
		evbuffer_add_printf(out, "%zx\r\n", len);
	evbuffer_add_buffer(out, buf);
	if (req->reply_chunked)
		evbuffer_add(out, "\r\n", 2);
	req->bytes_out += len;
}

size_t
http_reply_pending(struct http_request *req)
{
	if (req->conn == NULL)
		return 0;
	return evbuffer_get_length(bufferevent_get_output(req->conn->bev));
}

void
http_reply_end(struct http_request *req)
{
	if (req->reply == REPLY_DONE) {
		log_error("http: a second reply end to %s %s was dropped",
		    req->method_name, req->path);
		return;
	}
	if (req->conn == NULL) {
		access_log(req);
		http_request_retire(req);
		return;
	}
	if (req->reply != REPLY_STREAMING) {
		log_error("http: reply end without a start for %s %s",
		    req->method_name, req->path);
		return;
	}
	if (req->reply_chunked)
		bufferevent_write(req->conn->bev, "0\r\n\r\n", 5);
	reply_finish(req);
}

void
http_reply_abort(struct http_request *req)
{
	if (req->conn == NULL || req->reply != REPLY_STREAMING) {
		http_reply_end(req);
		return;
	}
	req->reply_close = 1;
	reply_finish(req);
}
