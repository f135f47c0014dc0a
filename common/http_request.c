/*
 * What a handler asks of its request: the parsed head, the buffered body,
 * and the hooks of streamed bodies, closes and drains.
 */
#include "http_internal.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

void
http_request_free(struct http_request *req)
{
	free(req->url);
	free(req->raw_target);
	free(req->path);
	http_headers_clear(&req->query);
	http_headers_clear(&req->headers);
	http_headers_clear(&req->out_headers);
	if (req->body != NULL)
		evbuffer_free(req->body);
	/* glibc keeps freed memory for later, and its mmap threshold grows
	 * with the blocks it frees: after a large body (and the JSON it
	 * made), give back what it holds, so the memory a request took
	 * returns to the system once it is answered. */
	if (req->body_received >= HTTP_TRIM_AFTER)
		malloc_trim(0);
	req->server->nrequests--;
	free(req);
}

/* Accessors. */

enum http_verb
http_request_method(struct http_request *req)
{
	return req->method;
}

const char *
http_request_method_name(struct http_request *req)
{
	return req->method_name;
}

const char *
http_request_path(struct http_request *req)
{
	return req->path;
}

const char *
http_request_raw_target(struct http_request *req)
{
	return req->raw_target;
}

const char *
http_request_raw_query(struct http_request *req)
{
	return req->raw_query;
}

const char *
http_request_query(struct http_request *req, const char *name)
{
	for (size_t i = 0; i < req->query.n; i++) {
		if (strcmp(req->query.v[i].name, name) == 0)
			return req->query.v[i].value;
	}
	return NULL;
}

const char *
http_request_header(struct http_request *req, const char *name)
{
	return http_headers_get(&req->headers, name);
}

size_t
http_request_header_count(struct http_request *req)
{
	return req->headers.n;
}

void
http_request_header_at(struct http_request *req, size_t i, const char **name,
    const char **value)
{
	*name = req->headers.v[i].name;
	*value = req->headers.v[i].value;
}

int64_t
http_request_content_length(struct http_request *req)
{
	return req->content_length;
}

const char *
http_request_peer(struct http_request *req)
{
	return req->conn != NULL ? req->conn->peer : "gone";
}

struct evbuffer *
http_request_body(struct http_request *req)
{
	return req->body;
}

int
http_request_connected(struct http_request *req)
{
	return req->conn != NULL;
}

int
http_request_is_upgrade(struct http_request *req)
{
	return req->upgrade && req->body_complete;
}

json_t *
http_request_json(struct http_request *req, struct error *err)
{
	size_t len = evbuffer_get_length(req->body);

	return http_json_parse(len > 0 ?
	    (const char *)evbuffer_pullup(req->body, -1) : "", len, err);
}

void
http_request_on_body(struct http_request *req, http_body_cb data_cb,
    http_event_cb end_cb, void *arg)
{
	req->body_cb = data_cb;
	req->body_end_cb = end_cb;
	req->body_arg = arg;
}

void
http_request_on_close(struct http_request *req, http_event_cb cb, void *arg)
{
	req->close_cb = cb;
	req->close_arg = arg;
}

void
http_request_on_drain(struct http_request *req, http_event_cb cb, void *arg)
{
	req->drain_cb = cb;
	req->drain_arg = arg;
}

void
http_request_pause_body(struct http_request *req)
{
	struct http_conn *conn = req->conn;

	if (conn == NULL || conn->body_paused)
		return;
	conn->body_paused = 1;
	conn->window_paused = 1;
	/* Stops http_parser_execute after the current callback; the rest
	 * stays in the input buffer, and the socket is not read meanwhile. */
	http_parser_pause(&conn->parser, 1);
	bufferevent_disable(conn->bev, EV_READ);
}

void
http_request_resume_body(struct http_request *req)
{
	struct http_conn *conn = req->conn;

	if (conn == NULL || !conn->body_paused)
		return;
	conn->body_paused = 0;
	if (!conn->waiting_reply)
		http_parser_pause(&conn->parser, 0);
	bufferevent_enable(conn->bev, EV_READ);
	/* Parse what is already buffered from the loop, not from inside the
	 * caller, which may itself be in a callback of this connection. */
	event_active(conn->resume_ev, EV_TIMEOUT, 0);
}
