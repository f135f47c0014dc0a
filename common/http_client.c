/*
 * The HTTP/1.1 client (see http_client.h): one connection per request
 * ("Connection: close"), a non-blocking connect to a unix socket or a
 * numeric TCP address, the request head and body written through a
 * bufferevent, the answer parsed by http-parser in HTTP_RESPONSE mode.
 *
 * Re-entrancy: user callbacks on_head and on_body run inside
 * http_parser_execute, so nothing there may free the request. Cancelling
 * only marks it and pauses the parser; parse_input frees it once the parser
 * has returned. on_done never runs inside the parser nor inside a public
 * function: failures found in a caller's call (a body longer than its
 * Content-Length) are reported from the loop through defer_ev.
 *
 * The connection state (bev, parser) is kept apart from the request's so a
 * pool of kept-alive connections can be added later without changing the
 * interface.
 */
#include "http_client_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <http_parser.h>

#include "http_internal.h"
#include "log.h"
#include "timing.h"
#include "xmalloc.h"

#define DEFAULT_TIMEOUT		60.0
#define DEFAULT_MAX_RESPONSE	(16 * 1024 * 1024)
#define MAX_ANSWER_HEADERS	128
#define IO_STEP			(256 * 1024)

/* Owned by the caller between http_client_start and on_done (or cancel);
 * freed by this file right after on_done returns or at cancel. */
struct http_client_request {
	struct http_client_callbacks cb;
	void *arg;
	char *addr;			/* for messages */
	char *method;
	char *path;			/* target without its query, for logs */

	struct bufferevent *bev;
	struct evbuffer_cb_entry *out_watch;
	http_parser parser;
	struct event *timer_ev;		/* no-progress timeout */
	struct event *defer_ev;		/* deferred failure or resumed parse */
	struct timespec last_progress;
	double timeout;

	int head_only;			/* HEAD: no answer body */
	int stream_body;
	int chunked;			/* streamed body of unknown length */
	int64_t body_left;		/* streamed body still owed (Content-Length) */
	int body_ended;			/* whole request body queued */
	int write_failed;		/* peer stopped reading: drop the body */

	struct http_header_reader hr;	/* into headers */
	struct http_headers headers;
	int status;
	struct evbuffer *body;		/* kept answer body (no on_body) */
	size_t max_response;

	int connected;
	int head_done;			/* final status line and headers in */
	int complete;			/* whole answer in */
	int eof;			/* peer closed its side */
	int paused;			/* caller asked for backpressure */
	int in_parse;			/* inside http_parser_execute */
	int cancelled;			/* free once the parser returns */
	int finishing;			/* on_done is running */
	int failed;			/* err holds why the exchange failed */
	struct error err;
};

static void parse_input(struct http_client_request *r);

/* http-parser aborts when an errored parser is paused. */
static void
stop_parser(struct http_client_request *r)
{
	if (HTTP_PARSER_ERRNO(&r->parser) == HPE_OK)
		http_parser_pause(&r->parser, 1);
}

static void
touch(struct http_client_request *r)
{
	clock_gettime(CLOCK_MONOTONIC, &r->last_progress);
}

static void
request_free(struct http_client_request *r)
{
	if (r->bev != NULL) {
		evbuffer_remove_cb_entry(bufferevent_get_output(r->bev),
		    r->out_watch);
		bufferevent_free(r->bev);
	}
	event_free(r->timer_ev);
	event_free(r->defer_ev);
	http_header_reader_free(&r->hr);
	evbuffer_free(r->body);
	http_headers_clear(&r->headers);
	free(r->addr);
	free(r->method);
	free(r->path);
	free(r);
}

/* The one way out that calls on_done. Never called from inside the parser
 * or from a public function the caller may call in a callback. */
static void
finish(struct http_client_request *r)
{
	if (r->finishing)
		return;
	r->finishing = 1;
	if (r->failed)
		log_debug("http client: %s %s %s: %s", r->method, r->addr,
		    r->path, r->err.msg);
	r->cb.on_done(r, r->failed ? &r->err : NULL, r->arg);
	request_free(r);
}

/* Record why the exchange failed (the first reason wins) and stop the
 * parser; the caller of the parser or defer_ev then finishes. */
static void
set_failed(struct http_client_request *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
set_failed(struct http_client_request *r, int status, const char *fmt, ...)
{
	va_list ap;

	if (r->failed || r->complete)
		return;
	r->failed = 1;
	va_start(ap, fmt);
	error_vset(&r->err, status, fmt, ap);
	va_end(ap);
	stop_parser(r);
}

static void
fail_later(struct http_client_request *r)
{
	event_active(r->defer_ev, EV_TIMEOUT, 0);
}

/* Time counts only while we wait on the peer, not while the caller holds
 * things up (paused answer, streamed body it has not written yet). */
static int
waiting_on_caller(struct http_client_request *r)
{
	if (!r->connected)
		return 0;
	if (r->paused)
		return 1;
	return r->stream_body && !r->body_ended && !r->write_failed &&
	    !r->head_done && evbuffer_get_length(bufferevent_get_output(r->bev)) == 0;
}

static void
arm_timer(struct http_client_request *r, double seconds)
{
	struct timeval tv;

	if (seconds < 0.001)
		seconds = 0.001;
	tv = timing_timeval(seconds);
	evtimer_add(r->timer_ev, &tv);
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_client_request *r = arg;
	struct timespec now;
	double idle;

	(void)fd;
	(void)what;
	if (waiting_on_caller(r)) {
		touch(r);
		arm_timer(r, r->timeout);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &now);
	idle = (double)(now.tv_sec - r->last_progress.tv_sec) +
	    (double)(now.tv_nsec - r->last_progress.tv_nsec) / 1e9;
	if (idle + 0.0005 < r->timeout) {
		arm_timer(r, r->timeout - idle);
		return;
	}
	if (!r->connected)
		set_failed(r, 504, "cannot connect to %s: no answer for %g s",
		    r->addr, r->timeout);
	else
		set_failed(r, 504, "%s %s: no progress from %s for %g s",
		    r->method, r->path, r->addr, r->timeout);
	finish(r);
}

static void
defer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_client_request *r = arg;

	(void)fd;
	(void)what;
	if (r->failed) {
		finish(r);
		return;
	}
	parse_input(r);
}

/* Parsing the answer. */

static struct http_client_request *
parser_request(http_parser *p)
{
	return p->data;
}

static int
on_message_begin(http_parser *p)
{
	struct http_client_request *r = parser_request(p);

	http_header_reader_reset(&r->hr);
	http_headers_clear(&r->headers);
	return 0;
}

/* 0, or -1 once the answer is failed for a header we cannot keep. */
static int
header_fault(struct http_client_request *r, enum http_header_fault fault)
{
	if (fault == HTTP_HEADER_TOO_MANY)
		set_failed(r, 502, "answer from %s has more than %d headers",
		    r->addr, MAX_ANSWER_HEADERS);
	else if (fault == HTTP_HEADER_NUL)
		set_failed(r, 502, "answer from %s has a NUL byte in a header",
		    r->addr);
	return fault == HTTP_HEADER_OK ? 0 : -1;
}

static int
on_header_field(http_parser *p, const char *at, size_t len)
{
	struct http_client_request *r = parser_request(p);

	return header_fault(r, http_header_reader_field(&r->hr, at, len,
	    &r->headers, MAX_ANSWER_HEADERS));
}

static int
on_header_value(http_parser *p, const char *at, size_t len)
{
	http_header_reader_value(&parser_request(p)->hr, at, len);
	return 0;
}

static int
interim(int status)
{
	return status >= 100 && status < 200;
}

/* Returns 1 to tell http-parser that this answer has no body. */
static int
on_headers_complete(http_parser *p)
{
	struct http_client_request *r = parser_request(p);
	int status = p->status_code;

	if (header_fault(r, http_header_reader_end(&r->hr, &r->headers,
	    MAX_ANSWER_HEADERS)) < 0)
		return -1;
	if (status == 101) {
		set_failed(r, 502, "%s switched protocols, which was not asked "
		    "for", r->addr);
		return 0;
	}
	/* 100 Continue, 102 Processing, 103 Early Hints: the real answer
	 * follows; http-parser ends these messages without a body. */
	if (interim(status))
		return 0;
	r->status = status;
	r->head_done = 1;
	if (r->cb.on_head != NULL)
		r->cb.on_head(r, status, r->arg);
	if (r->cancelled)
		return 0;
	/* A 304 may carry the Content-Length of what it did not send. */
	return r->head_only || status == 204 || status == 304;
}

static int
on_body(http_parser *p, const char *at, size_t len)
{
	struct http_client_request *r = parser_request(p);

	if (r->cancelled || r->failed)
		return 0;
	if (r->cb.on_body != NULL) {
		r->cb.on_body(r, at, len, r->arg);
		return 0;
	}
	if (evbuffer_get_length(r->body) + len > r->max_response) {
		set_failed(r, 502, "answer from %s too large: more than %zu "
		    "bytes", r->addr, r->max_response);
		return 0;
	}
	evbuffer_add(r->body, at, len);
	return 0;
}

static int
on_message_complete(http_parser *p)
{
	struct http_client_request *r = parser_request(p);

	if (!r->head_done)
		return 0;	/* an interim answer ended */
	if (!r->failed && !r->cancelled) {
		r->complete = 1;
		stop_parser(r);
	}
	return 0;
}

static const http_parser_settings parser_settings = {
	.on_message_begin = on_message_begin,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

/* Feed what the input buffer holds (and the end of the stream once the
 * peer closed) to the parser, until it pauses or the exchange ends. May
 * free r. */
static void
parse_input(struct http_client_request *r)
{
	struct evbuffer *in = bufferevent_get_input(r->bev);

	while (!r->paused) {
		struct evbuffer_iovec vec = { NULL, 0 };
		enum http_errno e;
		size_t n;
		int at_eof = 0;

		if (evbuffer_peek(in, -1, NULL, &vec, 1) < 1 ||
		    vec.iov_len == 0) {
			if (!r->eof)
				return;
			at_eof = 1;
			vec.iov_base = NULL;
			vec.iov_len = 0;
		}
		r->in_parse = 1;
		n = http_parser_execute(&r->parser, &parser_settings,
		    vec.iov_base, vec.iov_len);
		r->in_parse = 0;
		if (r->cancelled) {
			request_free(r);
			return;
		}
		evbuffer_drain(in, n);
		if (r->failed || r->complete) {
			finish(r);
			return;
		}
		/* An answer that could end here would have completed. */
		if (at_eof) {
			set_failed(r, 502, "%s closed the connection before the "
			    "answer was complete", r->addr);
			finish(r);
			return;
		}
		e = HTTP_PARSER_ERRNO(&r->parser);
		if (e != HPE_OK && e != HPE_PAUSED) {
			set_failed(r, 502, "malformed answer from %s: %s",
			    r->addr, http_errno_description(e));
			finish(r);
			return;
		}
		if (e == HPE_PAUSED)
			return;
	}
}

/* The socket. */

static void
read_cb(struct bufferevent *bev, void *arg)
{
	(void)bev;
	touch(arg);
	parse_input(arg);
}

static void
write_cb(struct bufferevent *bev, void *arg)
{
	struct http_client_request *r = arg;

	(void)bev;
	if (r->stream_body && !r->body_ended && !r->write_failed &&
	    r->cb.on_drain != NULL)
		r->cb.on_drain(r, r->arg);
}

static void
output_watch_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	(void)buf;
	if (info->n_deleted > 0)
		touch(arg);
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct http_client_request *r = arg;
	int e = EVUTIL_SOCKET_ERROR();

	if (what & BEV_EVENT_CONNECTED) {
		r->connected = 1;
		touch(r);
		if (!r->paused)
			bufferevent_enable(bev, EV_READ);
		return;
	}
	if (!r->connected) {
		set_failed(r, 502, "cannot connect to %s: %s", r->addr,
		    strerror(e));
		finish(r);
		return;
	}
	/* The peer stopped reading (it may have answered early, a 413 say):
	 * drop the rest of the body and read the answer. */
	if ((what & BEV_EVENT_WRITING) && !(what & BEV_EVENT_READING)) {
		struct evbuffer *out = bufferevent_get_output(bev);

		r->write_failed = 1;
		evbuffer_drain(out, evbuffer_get_length(out));
		return;
	}
	if (what & BEV_EVENT_EOF) {
		r->eof = 1;
		parse_input(r);
		return;
	}
	set_failed(r, 502, "connection to %s failed: %s", r->addr,
	    strerror(e));
	finish(r);
}

struct http_client_request *
http_client_start(struct event_base *base,
    const struct http_client_options *opts,
    const struct http_client_callbacks *cb, void *arg, struct error *err)
{
	struct http_client_request *r;
	struct sockaddr_storage ss;
	socklen_t sslen;
	const char *q;
	int fd, connect_errno = 0;

	if (http_client_check_options(opts, cb, err) < 0 ||
	    http_client_parse_addr(opts->addr, &ss, &sslen, err) < 0)
		return NULL;
	r = xcalloc(1, sizeof *r);
	r->cb = *cb;
	r->arg = arg;
	r->addr = xstrdup(opts->addr);
	r->method = xstrdup(opts->method);
	q = strchr(opts->target, '?');
	r->path = q != NULL ? xstrndup(opts->target, (size_t)(q - opts->target)) :
	    xstrdup(opts->target);
	r->timeout = opts->timeout > 0 ? opts->timeout : DEFAULT_TIMEOUT;
	r->max_response = opts->max_response > 0 ? opts->max_response :
	    DEFAULT_MAX_RESPONSE;
	r->head_only = strcmp(opts->method, "HEAD") == 0;
	r->stream_body = opts->stream_body;
	r->chunked = opts->stream_body && opts->body_length < 0;
	r->body_left = opts->stream_body ? opts->body_length : 0;
	http_header_reader_init(&r->hr);
	r->body = evbuffer_new();
	http_parser_init(&r->parser, HTTP_RESPONSE);
	r->parser.data = r;
	r->timer_ev = evtimer_new(base, timer_cb, r);
	r->defer_ev = event_new(base, -1, 0, defer_cb, r);

	fd = http_client_open_socket(&ss, sslen);
	if (fd < 0)
		connect_errno = errno;
	/* Without a socket the bufferevent still holds what the caller
	 * writes until the deferred failure is reported. */
	r->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (r->bev == NULL)
		fatal("http client: cannot allocate a bufferevent");
	bufferevent_setcb(r->bev, read_cb, write_cb, event_cb, r);
	bufferevent_setwatermark(r->bev, EV_WRITE, HTTP_CLIENT_DRAIN_MARK, 0);
	/* libevent moves 16 KiB per call by default: 1 GiB bodies go far
	 * faster in bigger steps. */
	bufferevent_set_max_single_read(r->bev, IO_STEP);
	bufferevent_set_max_single_write(r->bev, IO_STEP);
	r->out_watch = evbuffer_add_cb(bufferevent_get_output(r->bev),
	    output_watch_cb, r);
	if (fd < 0) {
		bufferevent_disable(r->bev, EV_WRITE);
		set_failed(r, 502, "cannot connect to %s: %s", r->addr,
		    strerror(connect_errno));
		fail_later(r);
	} else if (bufferevent_socket_connect(r->bev, NULL, 0) < 0) {
		/* With no address, libevent takes the socket as connecting and
		 * reports BEV_EVENT_CONNECTED (or the error) once writable. */
		bufferevent_disable(r->bev, EV_WRITE);
		set_failed(r, 502, "cannot connect to %s", r->addr);
		fail_later(r);
	}
	http_client_write_head(opts, bufferevent_get_output(r->bev));
	r->body_ended = !opts->stream_body;
	touch(r);
	arm_timer(r, r->timeout);
	return r;
}

/* The answer. */

int
http_client_status(struct http_client_request *r)
{
	return r->status;
}

const char *
http_client_header(struct http_client_request *r, const char *name)
{
	return http_headers_get(&r->headers, name);
}

size_t
http_client_header_count(struct http_client_request *r)
{
	return r->headers.n;
}

void
http_client_header_at(struct http_client_request *r, size_t i,
    const char **name, const char **value)
{
	*name = r->headers.v[i].name;
	*value = r->headers.v[i].value;
}

struct evbuffer *
http_client_body(struct http_client_request *r)
{
	return r->body;
}

/* Streamed request bodies. */

/* Whether len more bytes may go out; a caller writing past what it
 * declared fails the exchange (from the loop). */
static int
body_accepts(struct http_client_request *r, size_t len)
{
	if (!r->stream_body || r->body_ended) {
		log_error("http client: %s %s: body written after its end",
		    r->method, r->path);
		return 0;
	}
	if (r->failed || r->write_failed || len == 0)
		return 0;
	if (!r->chunked) {
		if ((uint64_t)len > (uint64_t)r->body_left) {
			set_failed(r, 500, "%s %s: request body longer than its "
			    "Content-Length", r->method, r->path);
			fail_later(r);
			return 0;
		}
		r->body_left -= (int64_t)len;
	}
	touch(r);
	return 1;
}

void
http_client_write(struct http_client_request *r, const void *data,
    size_t len)
{
	struct evbuffer *out = bufferevent_get_output(r->bev);

	if (!body_accepts(r, len))
		return;
	if (r->chunked)
		evbuffer_add_printf(out, "%zx\r\n", len);
	evbuffer_add(out, data, len);
	if (r->chunked)
		evbuffer_add(out, "\r\n", 2);
}

void
http_client_write_buffer(struct http_client_request *r, struct evbuffer *buf)
{
	struct evbuffer *out = bufferevent_get_output(r->bev);
	size_t len = evbuffer_get_length(buf);

	if (!body_accepts(r, len)) {
		evbuffer_drain(buf, len);
		return;
	}
	if (r->chunked)
		evbuffer_add_printf(out, "%zx\r\n", len);
	evbuffer_add_buffer(out, buf);
	if (r->chunked)
		evbuffer_add(out, "\r\n", 2);
}

size_t
http_client_pending(struct http_client_request *r)
{
	return evbuffer_get_length(bufferevent_get_output(r->bev));
}

void
http_client_end(struct http_client_request *r)
{
	if (!r->stream_body || r->body_ended)
		return;
	r->body_ended = 1;
	touch(r);
	if (r->failed || r->write_failed)
		return;
	if (r->chunked) {
		evbuffer_add(bufferevent_get_output(r->bev), "0\r\n\r\n", 5);
	} else if (r->body_left > 0) {
		set_failed(r, 500, "%s %s: request body ended %" PRId64 " bytes "
		    "short of its Content-Length", r->method, r->path,
		    r->body_left);
		fail_later(r);
	}
}

/* Backpressure on the answer. */

void
http_client_pause(struct http_client_request *r)
{
	if (r->paused || r->finishing)
		return;
	r->paused = 1;
	/* Stops http_parser_execute after the current callback; the rest
	 * stays in the input buffer and the socket is not read meanwhile. */
	stop_parser(r);
	bufferevent_disable(r->bev, EV_READ);
}

void
http_client_resume(struct http_client_request *r)
{
	if (!r->paused || r->finishing)
		return;
	r->paused = 0;
	touch(r);
	if (r->cancelled || r->failed || r->complete)
		return;
	http_parser_pause(&r->parser, 0);
	if (r->connected)
		bufferevent_enable(r->bev, EV_READ);
	/* What is already buffered is parsed from the loop, not from inside
	 * the caller, which may be in one of our callbacks. */
	if (!r->in_parse)
		event_active(r->defer_ev, EV_TIMEOUT, 0);
}

void *
http_client_arg(struct http_client_request *r)
{
	return r->arg;
}

int
http_client_cancel(struct http_client_request *r)
{
	if (r == NULL || r->finishing || r->cancelled)
		return 0;
	r->cancelled = 1;
	if (r->in_parse) {
		stop_parser(r);
		return 1;
	}
	request_free(r);
	return 1;
}
