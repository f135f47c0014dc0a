/*
 * POST /envd/<package.Service>/<Method>: Connect RPC with the JSON codec,
 * as E2B's SDKs speak it to envd (protocol version 1).
 *
 * Unary: a JSON body in (application/json), a JSON message out, or an
 * error as {"code": "<connect code>", "message"} with the code's HTTP
 * status. Server streams: one enveloped message in
 * (application/connect+json), then HTTP 200 and a sequence of envelopes
 * out, the last an end-of-stream envelope that carries the error if any.
 * Client streams (StreamInput): envelopes in as they come, one message
 * and the end of stream out. An envelope is a flag byte, a big-endian
 * 32-bit length and that many bytes of JSON.
 *
 * What a peer sends is bounded: a message (ENVD_MAX_MESSAGE), whether
 * announced by Content-Length or an envelope's length or sent; refused
 * before it is read. A compressed message, a wrong content type, an
 * unknown method, a malformed envelope or JSON get a Connect error and
 * nothing else.
 */
#include "envd.h"
#include "envd_fs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "log.h"
#include "timing.h"
#include "utf8.h"
#include "xmalloc.h"

#define ENVD_PREFIX		"/envd/"
#define ENVD_FLAG_END		0x02
#define ENVD_FLAG_COMPRESSED	0x01
#define ENVD_KEEPALIVE_DEFAULT	90	/* seconds, as envd without the header */
#define ENVD_KEEPALIVE_MAX	3600

/* Owned by the route until it is answered; a stream owns it then. */
struct envd_call {
	struct agent *agent;
	struct http_request *req;
	const struct envd_method *method;
	struct evbuffer *body;
	struct envd_user user;
	double timeout;			/* Connect-Timeout-Ms, in seconds */
	void *state;			/* the method's, for client streams */
	void (*close_cb)(struct envd_call *call, void *arg);
	void *close_arg;
	struct envd_stream *stream;
	int replied;			/* a client stream was answered */
};

/* Owned by its call (and so by the request) until it ends. */
struct envd_stream {
	struct envd_call *call;
	const char *keepalive;
	int quiet;			/* nothing sent since the last tick */
	struct event *tick;
	struct event *deadline;
	struct envd_stream_callbacks cb;
	void *arg;
};

static const struct {
	int status;
	const char *code;
} codes[] = {
	{ 400, "invalid_argument" }, { 401, "unauthenticated" },
	{ 403, "permission_denied" }, { 404, "not_found" },
	{ 409, "already_exists" }, { 412, "failed_precondition" },
	{ 413, "resource_exhausted" }, { 415, "invalid_argument" },
	{ 429, "resource_exhausted" }, { 499, "canceled" },
	{ 501, "unimplemented" }, { 503, "unavailable" },
	{ 504, "deadline_exceeded" }, { 507, "resource_exhausted" },
};

/* Connect's HTTP status of each code we answer. */
static const struct {
	const char *code;
	int status;
} code_status[] = {
	{ "canceled", 499 }, { "invalid_argument", 400 },
	{ "deadline_exceeded", 504 }, { "not_found", 404 },
	{ "already_exists", 409 }, { "permission_denied", 403 },
	{ "resource_exhausted", 429 }, { "failed_precondition", 400 },
	{ "unimplemented", 501 }, { "unavailable", 503 },
	{ "unauthenticated", 401 },
};

const char *
envd_code(int status)
{
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
		if (codes[i].status == status)
			return codes[i].code;
	return status >= 400 && status < 500 ? "invalid_argument" : "internal";
}

static int
code_http_status(const char *code)
{
	for (size_t i = 0; i < sizeof code_status / sizeof code_status[0]; i++)
		if (strcmp(code_status[i].code, code) == 0)
			return code_status[i].status;
	return 500;
}

static json_t *
error_json(const struct error *err)
{
	/* A message cut at its size may end inside a UTF-8 sequence. */
	return json_pack("{s:s, s:o}", "code", envd_code(err->status),
	    "message", utf8_json_string(err->msg, strlen(err->msg)));
}

static void
write_envelope(struct http_request *req, int flags, const char *json,
    size_t len)
{
	unsigned char head[5] = { (unsigned char)flags,
	    (unsigned char)(len >> 24), (unsigned char)(len >> 16),
	    (unsigned char)(len >> 8), (unsigned char)len };

	http_reply_write(req, head, sizeof head);
	http_reply_write(req, json, len);
}

static void
write_envelope_json(struct http_request *req, int flags, json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);

	json_decref(msg);
	write_envelope(req, flags, text, strlen(text));
	free(text);
}

static void
call_free(struct envd_call *call)
{
	if (call->body != NULL)
		evbuffer_free(call->body);
	envd_user_clear(&call->user);
	free(call);
}

static int
is_stream(const struct envd_call *call)
{
	return call->method == NULL || call->method->kind != ENVD_UNARY;
}

/* An answer in the form the call expects, before any other. */
static void
answer_error(struct http_request *req, int stream, const struct error *err)
{
	json_t *eos;

	if (!stream) {
		json_t *body = error_json(err);

		http_reply_json(req, code_http_status(envd_code(err->status)),
		    body);
		return;
	}
	http_reply_start(req, 200, "application/connect+json", -1);
	eos = json_pack("{s:o}", "error", error_json(err));
	write_envelope_json(req, ENVD_FLAG_END, eos);
	http_reply_end(req);
}

void
envd_fail(struct envd_call *call, const struct error *err)
{
	if (call->stream != NULL) {
		envd_stream_end(call->stream, err);
		return;
	}
	answer_error(call->req, is_stream(call), err);
	call_free(call);
}

void
envd_reply(struct envd_call *call, json_t *msg)
{
	struct http_request *req = call->req;

	if (msg == NULL)
		msg = json_object();
	if (call->method->kind == ENVD_UNARY) {
		http_reply_json(req, 200, msg);
	} else {
		http_reply_start(req, 200, "application/connect+json", -1);
		write_envelope_json(req, 0, msg);
		write_envelope(req, ENVD_FLAG_END, "{}", 2);
		http_reply_end(req);
	}
	call->replied = 1;
	if (call->method->kind != ENVD_CLIENT_STREAM)
		call_free(call);
}

void
envd_reply_items(struct envd_call *call, const char *name,
    struct evbuffer *items)
{
	struct evbuffer *body = evbuffer_new();

	evbuffer_add_printf(body, "{\"%s\":[", name);
	evbuffer_add_buffer(body, items);
	evbuffer_add(body, "]}", 2);
	http_reply_buffer(call->req, 200, "application/json", body);
	evbuffer_free(body);
	call_free(call);
}

struct agent *
envd_call_agent(struct envd_call *call)
{
	return call->agent;
}

struct http_request *
envd_call_request(struct envd_call *call)
{
	return call->req;
}

const struct envd_user *
envd_call_user(struct envd_call *call)
{
	return &call->user;
}

void **
envd_call_state(struct envd_call *call)
{
	return &call->state;
}

double
envd_call_timeout(struct envd_call *call)
{
	return call->timeout;
}

void
envd_call_on_close(struct envd_call *call,
    void (*cb)(struct envd_call *call, void *arg), void *arg)
{
	call->close_cb = cb;
	call->close_arg = arg;
}

/* Streams. */

static void
stream_free(struct envd_stream *s)
{
	struct envd_call *call = s->call;

	if (s->tick != NULL)
		event_free(s->tick);
	if (s->deadline != NULL)
		event_free(s->deadline);
	free(s);
	call_free(call);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct envd_stream *s = arg;

	(void)fd;
	(void)what;
	if (s->quiet)
		envd_stream_send_text(s, s->keepalive, strlen(s->keepalive));
	s->quiet = 1;
}

/* Its owner is told first, then the stream ends. */
static void
stream_gone(struct envd_stream *s, const struct error *err)
{
	if (s->cb.gone != NULL)
		s->cb.gone(s, s->arg);
	envd_stream_end(s, err);
}

static void
deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct envd_stream *s = arg;
	struct error err;

	(void)fd;
	(void)what;
	error_set(&err, 504, "the stream's deadline (Connect-Timeout-Ms) "
	    "passed");
	stream_gone(s, &err);
}

static void
stream_drain_cb(struct http_request *req, void *arg)
{
	struct envd_stream *s = arg;

	(void)req;
	if (s->cb.drain != NULL)
		s->cb.drain(s, s->arg);
}

/* Keepalive-Ping-Interval: whole seconds; else envd's default. */
static int
keepalive_interval(struct http_request *req)
{
	const char *h = http_request_header(req, "Keepalive-Ping-Interval");
	char *end;
	long v;

	if (h == NULL)
		return ENVD_KEEPALIVE_DEFAULT;
	errno = 0;
	v = strtol(h, &end, 10);
	if (errno != 0 || end == h || *end != '\0' || v <= 0)
		return ENVD_KEEPALIVE_DEFAULT;
	return v > ENVD_KEEPALIVE_MAX ? ENVD_KEEPALIVE_MAX : (int)v;
}

struct envd_stream *
envd_stream_open(struct envd_call *call, const char *keepalive,
    const struct envd_stream_callbacks *cb, void *arg)
{
	struct envd_stream *s = xcalloc(1, sizeof *s);
	struct timeval tv = { keepalive_interval(call->req), 0 };

	s->call = call;
	s->keepalive = keepalive;
	s->cb = *cb;
	s->arg = arg;
	call->stream = s;
	http_reply_start(call->req, 200, "application/connect+json", -1);
	http_request_on_drain(call->req, stream_drain_cb, s);
	s->tick = event_new(call->agent->base, -1, EV_PERSIST, tick_cb, s);
	event_add(s->tick, &tv);
	if (call->timeout > 0) {
		tv = timing_timeval(call->timeout);
		s->deadline = evtimer_new(call->agent->base, deadline_cb, s);
		evtimer_add(s->deadline, &tv);
	}
	return s;
}

void
envd_stream_send_text(struct envd_stream *s, const char *json, size_t len)
{
	write_envelope(s->call->req, 0, json, len);
	s->quiet = 0;
}

void
envd_stream_send(struct envd_stream *s, json_t *msg)
{
	write_envelope_json(s->call->req, 0, msg);
	s->quiet = 0;
}

size_t
envd_stream_pending(struct envd_stream *s)
{
	return http_reply_pending(s->call->req);
}

void
envd_stream_end(struct envd_stream *s, const struct error *err)
{
	struct http_request *req = s->call->req;

	if (err == NULL || err->status == 0)
		write_envelope(req, ENVD_FLAG_END, "{}", 2);
	else
		write_envelope_json(req, ENVD_FLAG_END,
		    json_pack("{s:o}", "error", error_json(err)));
	http_reply_end(req);
	stream_free(s);
}

/* The request. */

static struct agent *envd_agent;

void
envd_init(struct agent *agent)
{
	envd_agent = agent;
	envd_fs_init(agent);
}

struct event_base *
envd_base(void)
{
	return envd_agent->base;
}

static const struct envd_method *
method_find(const char *name)
{
	static const struct {
		const struct envd_method *v;
		const size_t *n;
	} services[] = {
		{ envd_process_methods, &envd_process_nmethods },
		{ envd_filesystem_methods, &envd_filesystem_nmethods },
	};

	for (size_t i = 0; i < sizeof services / sizeof services[0]; i++)
		for (size_t j = 0; j < *services[i].n; j++)
			if (strcmp(services[i].v[j].name, name) == 0)
				return &services[i].v[j];
	return NULL;
}

/* The media type of a Content-Type value, without parameters. */
static int
media_type_is(const char *value, const char *type)
{
	size_t len = strlen(type);

	if (value == NULL || strncasecmp(value, type, len) != 0)
		return 0;
	value += len;
	while (*value == ' ' || *value == '\t')
		value++;
	return *value == '\0' || *value == ';';
}

static int
identity(const char *encoding)
{
	return encoding == NULL || strcasecmp(encoding, "identity") == 0;
}

/* Connect-Timeout-Ms: at most 10 digits of milliseconds. */
static int
parse_timeout(struct http_request *req, double *out, struct error *err)
{
	const char *h = http_request_header(req, "Connect-Timeout-Ms");
	size_t n;

	*out = 0;
	if (h == NULL)
		return 0;
	n = strspn(h, "0123456789");
	if (n == 0 || n > 10 || h[n] != '\0') {
		error_set(err, 400, "Connect-Timeout-Ms must be a number of "
		    "milliseconds (at most 10 digits)");
		return -1;
	}
	*out = strtod(h, NULL) / 1000.0;
	return 0;
}

/* What the headers say must hold before any of the body is read. */
static int
check_head(struct envd_call *call, struct error *err)
{
	struct http_request *req = call->req;
	const char *ct = http_request_header(req, "Content-Type");
	int64_t length = http_request_content_length(req);
	const char *want = call->method->kind == ENVD_UNARY ?
	    "application/json" : "application/connect+json";

	if (!media_type_is(ct, want)) {
		error_set(err, 415, "%s takes Content-Type %s (Connect with "
		    "the JSON codec), not %.64s", call->method->name, want,
		    ct != NULL ? ct : "none");
		return -1;
	}
	if (!identity(http_request_header(req, "Content-Encoding")) ||
	    !identity(http_request_header(req, "Connect-Content-Encoding"))) {
		error_set(err, 501, "compressed messages are not supported");
		return -1;
	}
	if (parse_timeout(req, &call->timeout, err) < 0)
		return -1;
	if (call->method->kind != ENVD_CLIENT_STREAM &&
	    length > (int64_t)ENVD_MAX_MESSAGE + 5) {
		error_set(err, 413, "the request message is %lld bytes; the "
		    "limit is %d", (long long)length, ENVD_MAX_MESSAGE);
		return -1;
	}
	if (call->method->needs_user &&
	    envd_user_from_request(call->agent, req, &call->user, err) < 0)
		return -1;
	return 0;
}

static json_t *
parse_message(const char *text, size_t len, struct error *err)
{
	json_t *msg;

	if (len == 0)
		return json_object();	/* the empty message */
	msg = http_json_parse(text, len, err);
	if (msg != NULL && !json_is_object(msg)) {
		json_decref(msg);
		error_set(err, 400, "the request message must be a JSON object");
		return NULL;
	}
	if (msg == NULL)
		error_prefix(err, "the request message");
	return msg;
}

/* The envelope at the head of buf, when it is whole: 1 and *msg (NULL
 * with err on a bad one); 0 while more is needed. */
static int
next_envelope(struct evbuffer *buf, json_t **msg, struct error *err)
{
	unsigned char head[5];
	size_t len;
	char *text;

	*msg = NULL;
	if (evbuffer_copyout(buf, head, sizeof head) < (ev_ssize_t)sizeof head)
		return 0;
	len = (size_t)head[1] << 24 | (size_t)head[2] << 16 |
	    (size_t)head[3] << 8 | head[4];
	if (head[0] & ENVD_FLAG_COMPRESSED) {
		error_set(err, 501, "compressed messages are not supported");
		return 1;
	}
	if (head[0] != 0) {
		error_set(err, 400, "bad envelope: flags 0x%02x in a request",
		    head[0]);
		return 1;
	}
	if (len > ENVD_MAX_MESSAGE) {
		error_set(err, 413, "an envelope of %zu bytes; the limit is %d",
		    len, ENVD_MAX_MESSAGE);
		return 1;
	}
	if (evbuffer_get_length(buf) < sizeof head + len)
		return 0;
	evbuffer_drain(buf, sizeof head);
	text = xmalloc(len + 1);
	evbuffer_remove(buf, text, len);
	*msg = parse_message(text, len, err);
	free(text);
	return 1;
}

static void
call_closed(struct http_request *req, void *arg)
{
	struct envd_call *call = arg;

	if (call->stream != NULL) {
		struct error err;

		error_set(&err, 499, "the client closed the connection");
		stream_gone(call->stream, &err);
		return;
	}
	if (call->close_cb != NULL)
		call->close_cb(call, call->close_arg);
	http_reply_error(req, 499, "client closed the connection");
	call_free(call);
}

static int
body_cb(struct http_request *req, const char *data, size_t len, void *arg)
{
	struct envd_call *call = arg;
	struct error err = { 0 };
	json_t *msg;

	(void)req;
	evbuffer_add(call->body, data, len);
	if (call->method->kind != ENVD_CLIENT_STREAM) {
		if (evbuffer_get_length(call->body) <= ENVD_MAX_MESSAGE + 5)
			return 0;
		error_set(&err, 413, "the request message is over the limit "
		    "of %d bytes", ENVD_MAX_MESSAGE);
		envd_fail(call, &err);
		return -1;
	}
	while (next_envelope(call->body, &msg, &err) == 1) {
		if (msg == NULL || call->method->input(call, msg, &err) < 0) {
			json_decref(msg);
			envd_fail(call, &err);
			return -1;
		}
		json_decref(msg);
	}
	if (err.status != 0) {
		envd_fail(call, &err);
		return -1;
	}
	return 0;
}

static void
end_cb(struct http_request *req, void *arg)
{
	struct envd_call *call = arg;
	struct error err = { 0 };
	size_t len = evbuffer_get_length(call->body);
	json_t *msg = NULL;

	(void)req;
	if (call->method->kind == ENVD_CLIENT_STREAM) {
		if (len > 0) {
			error_set(&err, 400, "bad envelope: the body ends "
			    "inside one");
			envd_fail(call, &err);
		} else if (call->method->input(call, NULL, &err) < 0) {
			envd_fail(call, &err);
		} else if (call->replied) {
			call_free(call);
		}
		return;
	}
	if (call->method->kind == ENVD_UNARY) {
		msg = parse_message((const char *)evbuffer_pullup(call->body, -1),
		    len, &err);
	} else if (next_envelope(call->body, &msg, &err) == 0 ||
	    (msg != NULL && evbuffer_get_length(call->body) > 0)) {
		json_decref(msg);
		msg = NULL;
		error_set(&err, 400, "bad envelope: a server stream takes "
		    "exactly one enveloped message");
	}
	evbuffer_free(call->body);
	call->body = NULL;
	if (msg == NULL) {
		envd_fail(call, &err);
		return;
	}
	call->method->run(call, msg);
	json_decref(msg);
}

void
envd_route_rpc(struct http_request *req, void *arg)
{
	const char *path = http_request_path(req);
	struct envd_call *call = xcalloc(1, sizeof *call);
	struct error err = { 0 };

	call->agent = arg;
	call->req = req;
	if (strncmp(path, ENVD_PREFIX, strlen(ENVD_PREFIX)) == 0)
		call->method = method_find(path + strlen(ENVD_PREFIX));
	if (call->method == NULL) {
		/* Which form the client reads, from what it sent. */
		int stream = media_type_is(http_request_header(req,
		    "Content-Type"), "application/connect+json");

		error_set(&err, 501, "no such method: %.200s", path);
		answer_error(req, stream, &err);
		call_free(call);
		return;
	}
	if (check_head(call, &err) < 0) {
		if (err.status == 415)
			/* The client cannot read our stream form either. */
			http_reply_json(req, 415, error_json(&err));
		else
			answer_error(req, is_stream(call), &err);
		call_free(call);
		return;
	}
	call->body = evbuffer_new();
	http_request_on_body(req, body_cb, end_cb, call);
	http_request_on_close(req, call_closed, call);
}
