/*
 * The route table of the HTTP fuzz targets: one handler per way a handler
 * may use the server (buffered JSON, streamed bodies with pauses, an early
 * answer, multipart, streamed and doubled replies, query and headers), so
 * that the fuzzer reaches every path of the server between the bytes and
 * the handlers.
 */
#include "fuzz_routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "harness.h"
#include "jsonx.h"
#include "multipart.h"
#include "xmalloc.h"

static void
open_route(struct http_request *req, void *arg)
{
	(void)arg;
	http_reply(req, 200, "text/plain", "open", 4);
}

static void
json_route(struct http_request *req, void *arg)
{
	struct error err;
	json_t *body;
	const char *s;

	(void)arg;
	if ((body = http_request_json(req, &err)) == NULL) {
		http_reply_err(req, &err);
		return;
	}
	if (jsonx_get_string(body, "s", 0, &s, &err) < 0) {
		json_decref(body);
		http_reply_err(req, &err);
		return;
	}
	http_reply_json(req, 200, body);
}

/* Every request answered twice more: only the first may be written. */
static void
twice_route(struct http_request *req, void *arg)
{
	(void)arg;
	http_reply(req, 200, "text/plain", "first", 5);
	http_reply_error(req, 500, "second");
	http_reply_end(req);
}

static void
query_route(struct http_request *req, void *arg)
{
	json_t *answer = json_object(), *headers = json_array();
	const char *v;

	(void)arg;
	if ((v = http_request_query(req, "path")) != NULL)
		json_object_set_new(answer, "path", json_string(v));
	json_object_set_new(answer, "raw", json_string(
	    http_request_raw_query(req) != NULL ? "yes" : "no"));
	for (size_t i = 0; i < http_request_header_count(req); i++) {
		const char *name, *value;

		http_request_header_at(req, i, &name, &value);
		json_array_append_new(headers, json_integer((json_int_t)
		    (strlen(name) + strlen(value))));
	}
	json_object_set_new(answer, "headers", headers);
	http_reply_json(req, 200, answer);
}

/* GET /stream?n=N: N bytes, chunked, written as the client drains. */
static void
stream_drain_cb(struct http_request *req, void *arg)
{
	size_t *left = arg;
	char buf[4096];

	memset(buf, 'z', sizeof buf);
	while (*left > 0 && http_reply_pending(req) < 65536) {
		size_t n = *left < sizeof buf ? *left : sizeof buf;

		http_reply_write(req, buf, n);
		*left -= n;
	}
	if (*left == 0) {
		http_request_on_drain(req, NULL, NULL);
		http_request_on_close(req, NULL, NULL);
		free(left);
		http_reply_end(req);
	}
}

static void
stream_close_cb(struct http_request *req, void *arg)
{
	free(arg);
	http_reply_end(req);
}

static void
stream_route(struct http_request *req, void *arg)
{
	const char *n = http_request_query(req, "n");
	size_t *left = xmalloc(sizeof *left);

	(void)arg;
	*left = n != NULL ? strtoul(n, NULL, 10) % (1024 * 1024) : 10;
	http_request_on_drain(req, stream_drain_cb, left);
	http_request_on_close(req, stream_close_cb, left);
	http_reply_start(req, 200, "application/octet-stream", -1);
	stream_drain_cb(req, left);
}

/* Streamed bodies: counted, paused now and then (backpressure), answered
 * early (413 at once, or after 100 bytes) on the routes that say so, or
 * parsed as multipart. */
struct sink {
	struct http_request *req;
	struct event *resume;
	struct multipart *mp;
	size_t got, pieces, parts;
	int early;
};

static void
sink_free(struct sink *k)
{
	event_free(k->resume);
	if (k->mp != NULL)
		multipart_free(k->mp);
	free(k);
}

static void
sink_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sink *k = arg;

	(void)fd;
	(void)what;
	http_request_resume_body(k->req);
}

static int
part_begin(const struct multipart_part *part, void *arg, struct error *err)
{
	struct sink *k = arg;

	if (part->name == NULL)
		abort();
	if (strcmp(part->name, "stop") == 0) {
		error_set(err, 422, "a part named stop");
		return -1;
	}
	k->parts++;
	return 0;
}

static int
part_data(const char *data, size_t len, void *arg, struct error *err)
{
	(void)data;
	(void)len;
	(void)arg;
	(void)err;
	return 0;
}

static int
part_end(void *arg, struct error *err)
{
	(void)arg;
	(void)err;
	return 0;
}

static const struct multipart_callbacks part_cbs = {
	part_begin, part_data, part_end,
};

static int
sink_body_cb(struct http_request *req, const char *data, size_t len,
    void *arg)
{
	struct sink *k = arg;
	struct error err;

	k->got += len;
	if (k->mp != NULL && multipart_feed(k->mp, data, len, &err) < 0) {
		http_request_on_close(req, NULL, NULL);
		sink_free(k);
		http_reply_err(req, &err);
		return -1;
	}
	if (k->early && k->got >= 100) {
		http_request_on_close(req, NULL, NULL);
		sink_free(k);
		http_reply_error(req, 413, "enough");
		return -1;
	}
	if (++k->pieces % 3 == 0) {
		http_request_pause_body(req);
		event_active(k->resume, EV_TIMEOUT, 0);
	}
	return 0;
}

static void
sink_end_cb(struct http_request *req, void *arg)
{
	struct sink *k = arg;
	struct error err;
	char text[64];

	http_request_on_close(req, NULL, NULL);
	if (k->mp != NULL && multipart_finish(k->mp, &err) < 0) {
		sink_free(k);
		http_reply_err(req, &err);
		return;
	}
	snprintf(text, sizeof text, "%zu %zu", k->got, k->parts);
	sink_free(k);
	http_reply(req, 200, "text/plain", text, strlen(text));
}

static void
sink_close_cb(struct http_request *req, void *arg)
{
	sink_free(arg);
	http_reply_error(req, 499, "gone");
}

static void
sink_start(struct http_request *req, int early, int form)
{
	struct sink *k = xcalloc(1, sizeof *k);
	struct error err;

	k->req = req;
	k->early = early;
	k->resume = event_new(harness_base(), -1, 0, sink_resume_cb, k);
	if (form) {
		const char *ct = http_request_header(req, "Content-Type");
		char *boundary = ct != NULL ? multipart_boundary(ct, &err) : NULL;

		if (boundary == NULL) {
			sink_free(k);
			http_reply_error(req, 400, "no boundary");
			return;
		}
		k->mp = multipart_new(boundary, &part_cbs, k);
		free(boundary);
	}
	http_request_on_body(req, sink_body_cb, sink_end_cb, k);
	http_request_on_close(req, sink_close_cb, k);
}

static void
sink_route(struct http_request *req, void *arg)
{
	(void)arg;
	sink_start(req, 0, 0);
}

static void
early_route(struct http_request *req, void *arg)
{
	(void)arg;
	sink_start(req, 1, 0);
}

static void
form_route(struct http_request *req, void *arg)
{
	(void)arg;
	sink_start(req, 0, 1);
}

/* A streamed route answering before it reads anything. */
static void
refuse_route(struct http_request *req, void *arg)
{
	(void)arg;
	http_reply_error(req, 409, "not now");
}

#define ANY HTTP_METHOD_ANY
#define GET (HTTP_METHOD_GET | HTTP_METHOD_HEAD)
#define POST HTTP_METHOD_POST
#define EXACT HTTP_MATCH_EXACT
#define PREFIX HTTP_MATCH_PREFIX
#define STREAM HTTP_ROUTE_STREAM_BODY

static const struct http_route routes[] = {
	{ GET, "/open", EXACT, HTTP_ROUTE_NO_AUTH, open_route, 0 },
	{ POST | HTTP_METHOD_PUT, "/json", EXACT, 0, json_route, 4096 },
	{ GET, "/twice", EXACT, 0, twice_route, 0 },
	{ ANY, "/query", EXACT, 0, query_route, 0 },
	{ GET, "/stream", EXACT, 0, stream_route, 0 },
	{ POST | HTTP_METHOD_PUT, "/sink", EXACT, STREAM, sink_route, 0 },
	{ POST, "/early", EXACT, STREAM, early_route, 0 },
	{ POST, "/form", EXACT, STREAM, form_route, 0 },
	{ ANY, "/refuse/", PREFIX, STREAM | HTTP_ROUTE_NO_AUTH, refuse_route, 0 },
};

void
fuzz_routes_start(void)
{
	struct http_server_config cfg = {
		.routes = routes,
		.nroutes = sizeof routes / sizeof routes[0],
		.token = FUZZ_TOKEN,
		.alias_prefix = "/fastapi",
		.max_body = 64 * 1024,
	};

	harness_start(&cfg);
}

const struct http_route *
fuzz_routes(size_t *n)
{
	*n = sizeof routes / sizeof routes[0];
	return routes;
}
