/*
 * The HTTP transports, on common/http_client:
 *
 * Streamable HTTP (MCP 2025-03-26 on): every message we send is a POST to
 * the server's URL; a request's answer is either an application/json body
 * or a text/event-stream read as it comes (the server may slip its own
 * notifications and requests in before the answer). Notifications and our
 * answers get 202. The Mcp-Session-Id the server gives with its initialize
 * answer goes with every later message, and a DELETE ends the session when
 * we stop. A 404 on a session means the server forgot it: the server counts
 * as gone. We open no GET stream for unprompted server messages; the tool
 * list is fetched again on every list_tools anyway.
 *
 * Legacy HTTP+SSE (MCP 2024-11-05, "type": "sse"): a GET opens an event
 * stream whose first event, "endpoint", names where to POST; every answer
 * comes back on the stream. The stream ending means the server is gone.
 *
 * A config without "type" gets what the MCP specification recommends for
 * backwards compatibility: initialize is POSTed as streamable HTTP first;
 * a 400, 404 or 405 to it says the server predates that transport, and
 * the same url is then opened as a legacy event stream, where initialize
 * goes once the endpoint event names where.
 *
 * Only http:// with a numeric host or localhost: the client has no TLS and
 * resolves no names.
 */
#include "agent.h"
#include "mcp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "http_client.h"
#include "log.h"
#include "xmalloc.h"

/* The client's "seconds without progress": a tool may think for long
 * before it answers, and the jsonrpc timer already bounds every call. */
#define HTTP_IDLE_TIMEOUT (7 * 24 * 3600.0)
/* What we keep of an error answer's body for the message. */
#define ERROR_BODY_MAX 300

int
mcp_http_check(const char *name, json_t *cfg, struct error *err)
{
	json_t *headers = json_object_get(cfg, "headers"), *v;
	const char *key;
	struct mcp_url u;

	if (mcp_url_parse(json_string_value(json_object_get(cfg, "url")), &u,
	    err) < 0) {
		error_prefix(err, "MCP server '%s'", name);
		return -1;
	}
	mcp_url_clear(&u);
	if (headers == NULL || json_is_null(headers))
		return 0;
	if (!json_is_object(headers)) {
		error_set(err, 400, "MCP server '%s': headers must be an object "
		    "of strings", name);
		return -1;
	}
	json_object_foreach(headers, key, v) {
		if (!json_is_string(v) || key[0] == '\0' ||
		    strchr(key, ':') != NULL ||
		    !mcp_url_visible(key, strlen(key), 0) ||
		    !mcp_url_visible(json_string_value(v),
		    json_string_length(v), 1)) {
			error_set(err, 400, "MCP server '%s': headers must be an "
			    "object of strings in visible ASCII, names without "
			    "':'", name);
			return -1;
		}
	}
	return 0;
}

/* The transport. */

struct http_transport;

/* One POST in flight; freed when it ends or the transport stops. */
struct post {
	struct http_transport *t;
	struct http_client_request *r;	/* NULL once it is ending */
	int64_t id;			/* of the request it carries, or -1 */
	int status;
	int stream;			/* the answer is an event stream */
	int notification;		/* it carries a notification */
	struct evbuffer *body;		/* a JSON answer, or an error's text */
	struct sse sse;
	struct event *refused;		/* reports a request never sent */
	struct error refusal;
	json_t *probe;			/* no type: the message, to send again */
	TAILQ_ENTRY(post) entry;
};

/* Owned by its server; freed by http_free. */
struct http_transport {
	struct mcp_transport base;
	struct mcp_conn *srv;
	struct mcp_url url;
	char *post_target;		/* legacy: from the endpoint event */
	char **headers;			/* the config's, "Name: value" */
	size_t nheaders;
	char *session;			/* Mcp-Session-Id */
	int legacy;
	int probing;			/* no type, and no answer yet */
	int refused_status;		/* of the POST that made it legacy */
	int stopped;
	int notifying;			/* notification POSTs in flight */
	json_t *queue;			/* messages waiting their turn */
	TAILQ_HEAD(, post) posts;
	struct http_client_request *stream;	/* legacy: the GET */
	struct sse stream_sse;
};

static void flush_queue(struct http_transport *t);
static int open_stream(struct http_transport *t, struct error *err);

static void
lost(struct http_transport *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
lost(struct http_transport *t, const char *fmt, ...)
{
	struct error err;
	va_list ap;

	va_start(ap, fmt);
	error_vset(&err, 502, fmt, ap);
	va_end(ap);
	mcp_conn_lost(t->srv, &err);
}

static void
post_free(struct post *p)
{
	TAILQ_REMOVE(&p->t->posts, p, entry);
	if (p->notification)
		p->t->notifying--;
	if (p->r != NULL)
		http_client_cancel(p->r);
	if (p->refused != NULL)
		event_free(p->refused);
	if (p->body != NULL)
		evbuffer_free(p->body);
	sse_clear(&p->sse);
	json_decref(p->probe);
	free(p);
}

/* Our headers, NULL-terminated; the strings live until free_headers. */
static const char **
request_headers(struct http_transport *t, const char *accept, int json_body)
{
	const char **h = xcalloc(t->nheaders + 6, sizeof *h);
	size_t n = 0;

	h[n++] = xasprintf("Accept: %s", accept);
	if (json_body)
		h[n++] = xstrdup("Content-Type: application/json");
	if (t->session != NULL)
		h[n++] = xasprintf("Mcp-Session-Id: %s", t->session);
	if (t->srv->protocol_version != NULL)
		h[n++] = xasprintf("MCP-Protocol-Version: %s",
		    t->srv->protocol_version);
	for (size_t i = 0; i < t->nheaders; i++)
		h[n++] = xstrdup(t->headers[i]);
	return h;
}

static void
free_headers(const char **h)
{
	for (size_t i = 0; h[i] != NULL; i++)
		free((char *)h[i]);
	free(h);
}

/* Legacy: where to POST, said by the server. Usually a path; a relative
 * reference or a whole url on the same server would do too. */
static void
set_endpoint(struct http_transport *t, const char *data, size_t len)
{
	char *ref = xstrndup(data, len), *target = NULL;
	struct error err;
	struct mcp_url u;

	if (!mcp_url_visible(ref, strlen(ref), 0) || ref[0] == '\0') {
		lost(t, "its endpoint event is not a url");
	} else if (ref[0] == '/') {
		target = xstrdup(ref);
	} else if (strncasecmp(ref, "http://", 7) == 0) {
		if (mcp_url_parse(ref, &u, &err) == 0)
			target = xstrdup(u.target);
		else
			lost(t, "its endpoint event: %s", err.msg);
		mcp_url_clear(&u);
	} else {
		target = xasprintf("%.*s%s", (int)(strrchr(t->url.target, '/') -
		    t->url.target + 1), t->url.target, ref);
	}
	free(ref);
	if (target == NULL)
		return;
	free(t->post_target);
	t->post_target = target;
	flush_queue(t);
}

static int
receive_event(const char *type, const char *data, size_t len, void *arg)
{
	struct http_transport *t = arg;
	json_error_t jerr;
	json_t *msg;

	if (strcmp(type, "endpoint") == 0) {
		set_endpoint(t, data, len);
		return t->stopped;
	}
	if (strcmp(type, "message") != 0)
		return 0;
	msg = json_loadb(data, len, JSON_ALLOW_NUL, &jerr);
	if (msg == NULL) {
		log_warn("MCP server '%s' sent an event that is not JSON (%s)",
		    t->srv->name, jerr.text);
		return 0;
	}
	mcp_conn_receive(t->srv, msg);
	json_decref(msg);
	return t->stopped;
}

static void
post_head(struct http_client_request *r, int status, void *arg)
{
	struct post *p = arg;
	struct http_transport *t = p->t;
	const char *type = http_client_header(r, "Content-Type");
	const char *session = http_client_header(r, "Mcp-Session-Id");

	p->status = status;
	p->stream = status / 100 == 2 && type != NULL &&
	    strncasecmp(type, "text/event-stream", 17) == 0;
	if (session != NULL && t->session == NULL && status / 100 == 2) {
		if (!mcp_url_visible(session, strlen(session), 0) ||
		    session[0] == '\0') {
			lost(t, "its Mcp-Session-Id is not visible ASCII");
			return;
		}
		t->session = xstrdup(session);
	}
	if (p->stream)
		sse_init(&p->sse);
	else
		p->body = evbuffer_new();
}

static void
post_body(struct http_client_request *r, const char *data, size_t len,
    void *arg)
{
	struct post *p = arg;
	struct http_transport *t = p->t;
	struct mcp_conn *srv = t->srv;
	int rc;

	(void)r;
	if (!p->stream) {
		size_t have = evbuffer_get_length(p->body);
		size_t cap = p->status / 100 == 2 ? MCP_MESSAGE_MAX :
		    ERROR_BODY_MAX;

		if (have + len > cap && p->status / 100 == 2) {
			lost(t, "it answered with more than %d bytes",
			    MCP_MESSAGE_MAX);
			return;
		}
		evbuffer_add(p->body, data, have + len > cap ? cap - have :
		    len);
		return;
	}
	/* An event may end the server, and this post with it. */
	mcp_conn_ref(srv);
	rc = sse_feed(&p->sse, data, len, receive_event, t);
	if (rc < 0)
		lost(t, "it sent an event of more than %d bytes",
		    MCP_MESSAGE_MAX);
	mcp_conn_unref(srv);
}

static void
post_failed(struct post *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
post_failed(struct post *p, const char *fmt, ...)
{
	struct http_transport *t = p->t;
	struct error err;
	va_list ap;
	size_t n;

	n = (size_t)snprintf(err.msg, sizeof err.msg, "MCP server '%s': POST "
	    "http://%s%s: ", t->srv->name, t->url.host,
	    t->legacy ? t->post_target : t->url.target);
	err.status = 502;
	if (n < sizeof err.msg) {
		va_start(ap, fmt);
		vsnprintf(err.msg + n, sizeof err.msg - n, fmt, ap);
		va_end(ap);
	}
	if (p->id >= 0)
		mcp_jsonrpc_fail(t->srv->rpc, p->id, &err);
	else
		log_warn("%s", err.msg);
}

/* What an older server (HTTP+SSE only) answers a POST to its stream's
 * url: no such route, or not for POST, or no session id in the query. */
static int
refuses_streamable(int status)
{
	return status == 400 || status == 404 || status == 405;
}

/* The probe was refused: talk HTTP+SSE, the probe's message first. */
static void
fall_back(struct http_transport *t, struct post *p)
{
	struct error err;

	log_info("MCP server '%s' answered HTTP %d to streamable HTTP: "
	    "trying HTTP+SSE", t->srv->name, p->status);
	t->legacy = 1;
	t->refused_status = p->status;
	json_array_insert(t->queue, 0, p->probe);
	post_free(p);
	sse_init(&t->stream_sse);
	if (open_stream(t, &err) < 0)
		lost(t, "%s", err.msg);
}

static void
post_done(struct http_client_request *r, const struct error *err, void *arg)
{
	struct post *p = arg;
	struct http_transport *t = p->t;
	struct mcp_conn *srv = t->srv;
	json_error_t jerr;
	json_t *msg;

	(void)r;
	p->r = NULL;		/* the client frees it after this */
	if (p->probe != NULL) {
		t->probing = 0;
		if (err == NULL && refuses_streamable(p->status)) {
			mcp_conn_ref(srv);
			fall_back(t, p);
			mcp_conn_unref(srv);
			return;
		}
	}
	mcp_conn_ref(srv);
	if (err != NULL) {
		post_failed(p, "%s", err->msg);
	} else if (p->status == 404 && t->session != NULL) {
		lost(t, "it no longer knows our session (404)");
	} else if (p->status / 100 != 2) {
		evbuffer_add(p->body, "", 1);
		post_failed(p, "it answered HTTP %d: %s", p->status,
		    (char *)evbuffer_pullup(p->body, -1));
	} else if (!p->stream && !t->legacy && p->status != 202 &&
	    evbuffer_get_length(p->body) > 0) {
		msg = json_loadb((const char *)evbuffer_pullup(p->body, -1),
		    evbuffer_get_length(p->body), JSON_ALLOW_NUL, &jerr);
		if (msg == NULL) {
			post_failed(p, "its answer is not JSON: %s", jerr.text);
		} else {
			mcp_conn_receive(srv, msg);
			json_decref(msg);
		}
	}
	/* An answer, if one was due, came in the body or the stream (the
	 * legacy transport's answers come on its GET stream). */
	if (!t->stopped && !t->legacy && p->id >= 0 && p->status / 100 == 2)
		post_failed(p, "it answered without a JSON-RPC answer");
	if (!t->stopped) {
		post_free(p);
		flush_queue(t);
	}
	mcp_conn_unref(srv);
}

/* The client refused to start the request: report it from the loop, as
 * a call's end must not come before the call returns. */
static void
refused_cb(evutil_socket_t fd, short what, void *arg)
{
	struct post *p = arg;
	struct http_transport *t = p->t;
	struct mcp_conn *srv = t->srv;

	(void)fd;
	(void)what;
	mcp_conn_ref(srv);
	post_failed(p, "%s", p->refusal.msg);
	if (!t->stopped) {
		post_free(p);
		flush_queue(t);
	}
	mcp_conn_unref(srv);
}

static const struct http_client_callbacks post_callbacks = {
	.on_head = post_head,
	.on_body = post_body,
	.on_done = post_done,
};

static int64_t
request_id(json_t *msg)
{
	json_t *id = json_object_get(msg, "id");

	if (json_object_get(msg, "method") == NULL || !json_is_integer(id))
		return -1;
	return (int64_t)json_integer_value(id);
}

static void
post(struct http_transport *t, json_t *msg)
{
	struct http_client_options o = { 0 };
	struct post *p = xcalloc(1, sizeof *p);
	struct error err;
	const char **headers;
	char *body;

	p->t = t;
	p->id = request_id(msg);
	p->notification = json_object_get(msg, "id") == NULL;
	if (t->probing)
		p->probe = json_incref(msg);
	TAILQ_INSERT_TAIL(&t->posts, p, entry);
	if (p->notification)
		t->notifying++;
	body = json_dumps(msg, JSON_COMPACT);
	headers = request_headers(t, "application/json, text/event-stream", 1);
	o.addr = t->url.addr;
	o.method = "POST";
	o.target = t->legacy ? t->post_target : t->url.target;
	o.host = t->url.host;
	o.headers = headers;
	o.body = body;
	o.body_len = strlen(body);
	o.timeout = HTTP_IDLE_TIMEOUT;
	o.max_response = MCP_MESSAGE_MAX;
	p->r = http_client_start(mcp_conn_base(t->srv), &o, &post_callbacks,
	    p, &err);
	free_headers(headers);
	free(body);
	if (p->r == NULL) {
		struct timeval now = { 0, 0 };

		p->refusal = err;
		p->refused = evtimer_new(mcp_conn_base(t->srv), refused_cb, p);
		evtimer_add(p->refused, &now);
	}
}

/* A cancelled request's POST is of no more use. */
static void
cancel_post_of(struct http_transport *t, json_t *msg)
{
	json_t *id = json_object_get(json_object_get(msg, "params"),
	    "requestId");
	struct post *p;

	if (!json_is_integer(id))
		return;
	TAILQ_FOREACH(p, &t->posts, entry) {
		if (p->id == (int64_t)json_integer_value(id) && p->r != NULL) {
			post_free(p);
			return;
		}
	}
}

/* Notifications go out before anything sent after them, so that, say,
 * notifications/initialized is in before the first tools/list. While
 * the transport is not known, the probe goes alone. */
static void
flush_queue(struct http_transport *t)
{
	while (!t->stopped && json_array_size(t->queue) > 0 &&
	    t->notifying == 0 && (!t->legacy || t->post_target != NULL) &&
	    (!t->probing || TAILQ_EMPTY(&t->posts))) {
		json_t *msg = json_incref(json_array_get(t->queue, 0));

		json_array_remove(t->queue, 0);
		post(t, msg);
		json_decref(msg);
	}
}

static void
http_send(struct mcp_transport *base, json_t *msg)
{
	struct http_transport *t = (struct http_transport *)base;
	const char *method = json_string_value(json_object_get(msg, "method"));

	if (t->stopped)
		return;
	if (method != NULL && strcmp(method, "notifications/cancelled") == 0)
		cancel_post_of(t, msg);
	json_array_append(t->queue, msg);
	flush_queue(t);
}

static void
session_deleted(struct http_client_request *r, const struct error *err,
    void *arg)
{
	(void)r;
	(void)err;
	(void)arg;
}

static void
http_stop(struct mcp_transport *base)
{
	struct http_transport *t = (struct http_transport *)base;
	static const struct http_client_callbacks delete_callbacks = {
		.on_done = session_deleted,
	};
	struct http_client_options o = { 0 };
	struct error err;
	const char **headers;

	if (t->stopped)
		return;
	t->stopped = 1;
	while (!TAILQ_EMPTY(&t->posts))
		post_free(TAILQ_FIRST(&t->posts));
	if (t->stream != NULL) {
		http_client_cancel(t->stream);
		t->stream = NULL;
	}
	if (t->legacy || t->session == NULL)
		return;
	/* Tell the server it may forget us; nobody waits for the answer. */
	headers = request_headers(t, "application/json", 0);
	o.addr = t->url.addr;
	o.method = "DELETE";
	o.target = t->url.target;
	o.host = t->url.host;
	o.headers = headers;
	o.timeout = 5;
	if (http_client_start(mcp_conn_base(t->srv), &o, &delete_callbacks,
	    NULL, &err) == NULL)
		log_warn("MCP server '%s': cannot end the session: %s",
		    t->srv->name, err.msg);
	free_headers(headers);
}

static void
http_free(struct mcp_transport *base)
{
	struct http_transport *t = (struct http_transport *)base;

	http_stop(base);
	sse_clear(&t->stream_sse);
	json_decref(t->queue);
	for (size_t i = 0; i < t->nheaders; i++)
		free(t->headers[i]);
	free(t->headers);
	free(t->session);
	free(t->post_target);
	mcp_url_clear(&t->url);
	free(t);
}

static const struct mcp_transport_ops http_ops = {
	.send = http_send,
	.stop = http_stop,
	.free = http_free,
};

/* Legacy: the GET stream. */

static void
stream_head(struct http_client_request *r, int status, void *arg)
{
	struct http_transport *t = arg;
	const char *type = http_client_header(r, "Content-Type");

	if (status != 200 || type == NULL ||
	    strncasecmp(type, "text/event-stream", 17) != 0) {
		t->stream = NULL;
		http_client_cancel(r);
		if (t->refused_status != 0)
			lost(t, "it answered HTTP %d to a streamable HTTP POST, "
			    "and GET http://%s%s answered HTTP %d%s",
			    t->refused_status, t->url.host, t->url.target,
			    status, status == 200 ? ", not an event stream" : "");
		else
			lost(t, "GET http://%s%s answered HTTP %d%s",
			    t->url.host, t->url.target, status, status == 200 ?
			    ", not an event stream" : "");
	}
}

static void
stream_body(struct http_client_request *r, const char *data, size_t len,
    void *arg)
{
	struct http_transport *t = arg;
	struct mcp_conn *srv = t->srv;

	(void)r;
	mcp_conn_ref(srv);
	if (sse_feed(&t->stream_sse, data, len, receive_event, t) < 0)
		lost(t, "it sent an event of more than %d bytes",
		    MCP_MESSAGE_MAX);
	mcp_conn_unref(srv);
}

static void
stream_done(struct http_client_request *r, const struct error *err,
    void *arg)
{
	struct http_transport *t = arg;

	(void)r;
	t->stream = NULL;
	if (err != NULL)
		lost(t, "its event stream failed: %s", err->msg);
	else
		lost(t, "it ended its event stream");
}

static int
open_stream(struct http_transport *t, struct error *err)
{
	static const struct http_client_callbacks cb = {
		.on_head = stream_head,
		.on_body = stream_body,
		.on_done = stream_done,
	};
	struct http_client_options o = { 0 };
	const char **headers = request_headers(t, "text/event-stream", 0);

	o.addr = t->url.addr;
	o.method = "GET";
	o.target = t->url.target;
	o.host = t->url.host;
	o.headers = headers;
	o.timeout = HTTP_IDLE_TIMEOUT;
	t->stream = http_client_start(mcp_conn_base(t->srv), &o, &cb, t, err);
	free_headers(headers);
	return t->stream != NULL ? 0 : -1;
}

struct mcp_transport *
mcp_http_start(struct mcp_conn *srv, json_t *cfg, struct error *err)
{
	struct http_transport *t = xcalloc(1, sizeof *t);
	json_t *headers = json_object_get(cfg, "headers"), *v;
	const char *type = json_string_value(json_object_get(cfg, "type"));
	const char *key;

	t->base.ops = &http_ops;
	t->srv = srv;
	t->queue = json_array();
	TAILQ_INIT(&t->posts);
	t->legacy = type != NULL && strcmp(type, "sse") == 0;
	t->probing = type == NULL;
	if (mcp_url_parse(json_string_value(json_object_get(cfg, "url")), &t->url,
	    err) < 0) {
		http_free(&t->base);
		return NULL;
	}
	t->headers = xcalloc(json_object_size(headers) + 1, sizeof *t->headers);
	json_object_foreach(headers, key, v)
		t->headers[t->nheaders++] = xasprintf("%s: %s", key,
		    json_string_value(v));
	if (t->legacy) {
		sse_init(&t->stream_sse);
		if (open_stream(t, err) < 0) {
			http_free(&t->base);
			return NULL;
		}
	}
	log_info("MCP server '%s' at http://%s%s (%s)", srv->name, t->url.host,
	    t->url.target, t->legacy ? "HTTP+SSE" : t->probing ?
	    "streamable HTTP, or HTTP+SSE if it refuses that" :
	    "streamable HTTP");
	return &t->base;
}
