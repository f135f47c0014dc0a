/*
 * Reading requests for the HTTP server (http_server.c feeds each
 * connection's bytes to http-parser with these callbacks): the head into
 * a struct http_request, within its limits; the target split, decoded and
 * routed; auth checked; then the handler, before the body (a streaming
 * route) or after it.
 */
#include "http_internal.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "log.h"
#include "timing.h"
#include "xmalloc.h"

#define HTTP_MAX_HEADERS	128
#define HTTP_MAX_URL		(16 * 1024)
#define HTTP_BODY_TIMEOUT	120	/* seconds between pieces of a body */
#define HTTP_DEFAULT_MAX_BODY	(32 * 1024 * 1024)

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
	req->started = timing_monotonic();
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

static int
request_has_header(void *arg, const char *name)
{
	return http_request_header(arg, name) != NULL;
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
	mismatch = 0;
	req->route = http_route_find_header(cfg->routes, cfg->nroutes,
	    req->method, request_has_header, req);
	if (req->route == NULL)
		req->route = http_route_find(cfg->routes, cfg->nroutes,
		    req->method, req->path, &mismatch);
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
	http_conn_set_read_timeout(conn, HTTP_BODY_TIMEOUT);
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
	http_conn_set_read_timeout(conn, 0);
	/* (A request already answered is no longer conn->req.) */
	if (req->rejected || req->body_aborted)
		return 0;
	if (!req->dispatched)
		dispatch(req);
	else if (req->body_end_cb != NULL)
		req->body_end_cb(req, req->body_arg);
	return 0;
}

const http_parser_settings http_parse_settings = {
	.on_message_begin = on_message_begin,
	.on_url = on_url,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};
