/*
 * The HTTP client against real peers on a real event loop: our own HTTP
 * server (common/http_server.c) on loopback TCP and on a unix socket, and
 * scripted raw socket peers for what a well-behaved server never sends
 * (malformed answers, closes mid-body, silence, odd pieces, 1xx).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "http.h"
#include "http_client.h"
#include "xmalloc.h"

#define MIB		(1024 * 1024)
#define PIECE		(64 * 1024)
#define UPLOAD_HIGH	(1024 * 1024)	/* the test writer's high-water mark */
#define TOKEN		"s3cret"

static struct event_base *base;
static struct http_server *server;
static char tcp_addr[64];
static char unix_addr[256];
static char tmpdir[64];
static int server_saw_close;	/* a streamed exchange saw its client go */

/* Deterministic content and its hash, shared by both ends. */

static unsigned char
pattern(uint64_t off)
{
	return (unsigned char)((off * 2654435761u) >> 13);
}

static void
pattern_fill(unsigned char *buf, uint64_t off, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pattern(off + i);
}

static uint64_t
fnv(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

#define FNV_INIT 0xcbf29ce484222325ull

static uint64_t
pattern_hash(uint64_t len)
{
	unsigned char buf[PIECE];
	uint64_t h = FNV_INIT;

	for (uint64_t off = 0; off < len; off += PIECE) {
		size_t n = len - off < PIECE ? (size_t)(len - off) : PIECE;

		pattern_fill(buf, off, n);
		h = fnv(h, buf, n);
	}
	return h;
}

/* The server side. */

static void
hello_route(struct http_request *req, void *arg)
{
	(void)arg;
	http_reply_add_header(req, "X-Test", "yes");
	http_reply(req, 200, "text/plain", "hello", 5);
}

/* Echo the body back, and what the server saw of the head as headers. */
static void
echo_route(struct http_request *req, void *arg)
{
	struct evbuffer *body = http_request_body(req);
	const char *h;
	char len[32];

	(void)arg;
	if ((h = http_request_header(req, "X-Echo")) != NULL)
		http_reply_add_header(req, "X-Got-Echo", h);
	if ((h = http_request_header(req, "Host")) != NULL)
		http_reply_add_header(req, "X-Got-Host", h);
	snprintf(len, sizeof len, "%" PRId64, http_request_content_length(req));
	http_reply_add_header(req, "X-Got-Length", len);
	http_reply_add_header(req, "X-Got-Connection", http_request_header(req,
	    "Connection") != NULL ? http_request_header(req, "Connection") : "");
	h = http_request_header(req, "Content-Type");
	http_reply_buffer(req, 200, h != NULL ? h : "application/octet-stream",
	    body);
}

static void
empty_route(struct http_request *req, void *arg)
{
	(void)arg;
	http_reply_empty(req, 204);
}

/* POST /hash: a streamed body, answered with its length and hash. */
struct hash_state {
	uint64_t len, hash;
};

static int
hash_body_cb(struct http_request *req, const char *data, size_t len,
    void *arg)
{
	struct hash_state *st = arg;

	(void)req;
	st->len += len;
	st->hash = fnv(st->hash, data, len);
	return 0;
}

static void
hash_end_cb(struct http_request *req, void *arg)
{
	struct hash_state *st = arg;
	json_t *j = json_pack("{s:I}", "length", (json_int_t)st->len);
	char hex[32];

	snprintf(hex, sizeof hex, "%016" PRIx64, st->hash);
	json_object_set_new(j, "hash", json_string(hex));
	free(st);
	http_reply_json(req, 200, j);
}

static void
hash_close_cb(struct http_request *req, void *arg)
{
	server_saw_close = 1;
	free(arg);
	http_reply_end(req);
}

static void
hash_route(struct http_request *req, void *arg)
{
	struct hash_state *st = xcalloc(1, sizeof *st);

	(void)arg;
	st->hash = FNV_INIT;
	http_request_on_body(req, hash_body_cb, hash_end_cb, st);
	http_request_on_close(req, hash_close_cb, st);
}

/* GET /stream?size=N: N bytes of the pattern, chunked, with backpressure. */
struct stream_state {
	uint64_t size, sent;
};

static void
stream_drain_cb(struct http_request *req, void *arg)
{
	struct stream_state *st = arg;
	unsigned char buf[PIECE];

	while (st->sent < st->size && http_reply_pending(req) < MIB) {
		size_t n = st->size - st->sent < PIECE ?
		    (size_t)(st->size - st->sent) : PIECE;

		pattern_fill(buf, st->sent, n);
		http_reply_write(req, buf, n);
		st->sent += n;
	}
	if (st->sent == st->size) {
		free(st);
		http_request_on_drain(req, NULL, NULL);
		http_request_on_close(req, NULL, NULL);
		http_reply_end(req);
	}
}

static void
stream_close_cb(struct http_request *req, void *arg)
{
	server_saw_close = 1;
	free(arg);
	http_reply_end(req);
}

static void
stream_route(struct http_request *req, void *arg)
{
	struct stream_state *st = xcalloc(1, sizeof *st);
	const char *size = http_request_query(req, "size");

	(void)arg;
	st->size = size != NULL ? strtoull(size, NULL, 10) : 0;
	http_request_on_drain(req, stream_drain_cb, st);
	http_request_on_close(req, stream_close_cb, st);
	http_reply_start(req, 200, "application/octet-stream", -1);
	stream_drain_cb(req, st);
}

static const struct http_route routes[] = {
	{ HTTP_METHOD_GET | HTTP_METHOD_HEAD, "/hello", HTTP_MATCH_EXACT,
	    HTTP_ROUTE_NO_AUTH, hello_route, 0 },
	{ HTTP_METHOD_ANY, "/echo", HTTP_MATCH_EXACT, HTTP_ROUTE_NO_AUTH,
	    echo_route, 0 },
	{ HTTP_METHOD_GET, "/empty", HTTP_MATCH_EXACT, HTTP_ROUTE_NO_AUTH,
	    empty_route, 0 },
	{ HTTP_METHOD_GET, "/secret", HTTP_MATCH_EXACT, 0, hello_route, 0 },
	{ HTTP_METHOD_POST, "/hash", HTTP_MATCH_EXACT,
	    HTTP_ROUTE_NO_AUTH | HTTP_ROUTE_STREAM_BODY, hash_route, 0 },
	{ HTTP_METHOD_POST, "/small", HTTP_MATCH_EXACT, HTTP_ROUTE_NO_AUTH,
	    echo_route, 1024 },
	{ HTTP_METHOD_GET, "/stream", HTTP_MATCH_EXACT, HTTP_ROUTE_NO_AUTH,
	    stream_route, 0 },
};

static int
setup(void **state)
{
	struct http_server_config cfg = {
		.routes = routes,
		.nroutes = sizeof routes / sizeof routes[0],
		.token = TOKEN,
	};
	struct error err;

	(void)state;
	base = event_base_new();
	server = http_server_new(base, &cfg);
	snprintf(tmpdir, sizeof tmpdir, "/tmp/httpc-test-XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	snprintf(unix_addr, sizeof unix_addr, "unix:%s/s.sock", tmpdir);
	if (http_server_listen(server, "127.0.0.1:0", &err) < 0)
		fail_msg("%s", err.msg);
	if (http_server_listen(server, unix_addr, &err) < 0)
		fail_msg("%s", err.msg);
	snprintf(tcp_addr, sizeof tcp_addr, "127.0.0.1:%d",
	    http_server_bound_port(server));
	server_saw_close = 0;
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	http_server_free(server);
	event_base_free(base);
	rmdir(tmpdir);
	return 0;
}

/* Run the loop until *flag is set; a guard stops a hung test. */
static int guard_fired;

static void
guard_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	guard_fired = 1;
}

static void
run_until(const int *flag)
{
	struct timeval tv = { 120, 0 };
	struct event *guard = evtimer_new(base, guard_cb, NULL);

	guard_fired = 0;
	evtimer_add(guard, &tv);
	while (!*flag && !guard_fired)
		event_base_loop(base, EVLOOP_ONCE);
	event_free(guard);
	assert_false(guard_fired);
}

/* What a request ended with, for asserting after the loop. */
struct result {
	int done, heads, status, failed, err_status;
	char err_msg[ERROR_MSG_MAX];
	struct evbuffer *body;
	char *headers[8];	/* values of the names asked for, or NULL */
	const char *want[8];
	size_t header_count;
	int saw_content_length;	/* through http_client_header_at */
};

static void
result_init(struct result *res)
{
	memset(res, 0, sizeof *res);
	res->body = evbuffer_new();
}

static void
result_free(struct result *res)
{
	evbuffer_free(res->body);
	for (size_t i = 0; i < 8; i++)
		free(res->headers[i]);
}

static const char *
result_body(struct result *res)
{
	evbuffer_add(res->body, "", 1);
	return (const char *)evbuffer_pullup(res->body, -1);
}

static void
record_head(struct http_client_request *r, struct result *res)
{
	res->status = http_client_status(r);
	res->header_count = http_client_header_count(r);
	for (size_t i = 0; i < res->header_count; i++) {
		const char *name, *value;

		http_client_header_at(r, i, &name, &value);
		if (strcmp(name, "Content-Length") == 0)
			res->saw_content_length = 1;
	}
	for (size_t i = 0; i < 8 && res->want[i] != NULL; i++) {
		const char *v = http_client_header(r, res->want[i]);

		free(res->headers[i]);
		res->headers[i] = v != NULL ? xstrdup(v) : NULL;
	}
}

static void
head_cb(struct http_client_request *r, int status, void *arg)
{
	struct result *res = arg;

	res->heads++;
	assert_int_equal(status, http_client_status(r));
	record_head(r, res);
}

static void
body_cb(struct http_client_request *r, const char *data, size_t len,
    void *arg)
{
	struct result *res = arg;

	(void)r;
	evbuffer_add(res->body, data, len);
}

static void
done_cb(struct http_client_request *r, const struct error *err, void *arg)
{
	struct result *res = arg;

	res->done++;
	if (err != NULL) {
		res->failed = 1;
		res->err_status = err->status;
		snprintf(res->err_msg, sizeof res->err_msg, "%s", err->msg);
		return;
	}
	record_head(r, res);
	evbuffer_add_buffer(res->body, http_client_body(r));
}

static const struct http_client_callbacks kept_cb = {
	.on_head = head_cb,
	.on_done = done_cb,
};

static const struct http_client_callbacks streamed_cb = {
	.on_head = head_cb,
	.on_body = body_cb,
	.on_done = done_cb,
};

/* One request, run to its end. */
static void
exchange(const struct http_client_options *o,
    const struct http_client_callbacks *cb, struct result *res)
{
	struct error err;

	assert_non_null(http_client_start(base, o, cb, res, &err));
	run_until(&res->done);
	assert_int_equal(res->done, 1);
}

/* Ordinary exchanges with the real server. */

static void
get_hello(const char *addr)
{
	struct http_client_options o = {
		.addr = addr, .method = "GET", .target = "/hello?x=1",
	};
	struct result res;

	result_init(&res);
	res.want[0] = "x-TEST";
	res.want[1] = "content-type";
	exchange(&o, &kept_cb, &res);
	assert_false(res.failed);
	assert_int_equal(res.status, 200);
	assert_int_equal(res.heads, 1);
	assert_string_equal(result_body(&res), "hello");
	assert_string_equal(res.headers[0], "yes");
	assert_string_equal(res.headers[1], "text/plain");
	assert_true(res.saw_content_length);
	result_free(&res);
}

static void
test_get_tcp(void **state)
{
	(void)state;
	get_hello(tcp_addr);
}

static void
test_get_unix(void **state)
{
	(void)state;
	get_hello(unix_addr);
}

static void
test_get_localhost_name(void **state)
{
	char addr[64];

	(void)state;
	snprintf(addr, sizeof addr, "localhost:%d",
	    http_server_bound_port(server));
	get_hello(addr);
}

static void
test_post_whole_body(void **state)
{
	static const char *const headers[] = {
		"X-Echo:   spaced value ", "Content-Type: text/x-test",
		/* set by the client: these must not reach the server */
		"Content-Length: 99", "Host: evil", "Connection: keep-alive",
		NULL,
	};
	struct http_client_options o = {
		.addr = unix_addr, .method = "POST", .target = "/echo",
		.host = "agent", .headers = headers, .body = "ping",
		.body_len = 4,
	};
	struct result res;

	(void)state;
	result_init(&res);
	res.want[0] = "X-Got-Echo";
	res.want[1] = "X-Got-Host";
	res.want[2] = "X-Got-Length";
	res.want[3] = "Content-Type";
	res.want[4] = "X-Got-Connection";
	exchange(&o, &kept_cb, &res);
	assert_int_equal(res.status, 200);
	assert_string_equal(result_body(&res), "ping");
	assert_string_equal(res.headers[0], "spaced value");
	assert_string_equal(res.headers[1], "agent");
	assert_string_equal(res.headers[2], "4");
	assert_string_equal(res.headers[3], "text/x-test");
	assert_string_equal(res.headers[4], "close");
	result_free(&res);
}

static void
test_post_without_body_sends_zero_length(void **state)
{
	struct http_client_options o = {
		.addr = tcp_addr, .method = "POST", .target = "/echo",
	};
	struct result res;

	(void)state;
	result_init(&res);
	res.want[0] = "X-Got-Length";
	res.want[1] = "X-Got-Host";
	exchange(&o, &kept_cb, &res);
	assert_int_equal(res.status, 200);
	assert_string_equal(res.headers[0], "0");
	assert_string_equal(res.headers[1], "localhost");
	assert_string_equal(result_body(&res), "");
	result_free(&res);
}

static void
test_bearer_token(void **state)
{
	static const char *const good[] = { "Authorization: Bearer " TOKEN,
	    NULL };
	static const char *const bad[] = { "Authorization: Bearer nope", NULL };
	struct http_client_options o = {
		.addr = tcp_addr, .method = "GET", .target = "/secret",
		.headers = good,
	};
	struct result res;

	(void)state;
	result_init(&res);
	exchange(&o, &kept_cb, &res);
	assert_int_equal(res.status, 200);
	assert_string_equal(result_body(&res), "hello");
	result_free(&res);

	o.headers = bad;
	result_init(&res);
	exchange(&o, &kept_cb, &res);
	assert_false(res.failed);
	assert_int_equal(res.status, 403);
	assert_non_null(strstr(result_body(&res), "detail"));
	result_free(&res);
}

static void
test_head_and_204(void **state)
{
	struct http_client_options o = {
		.addr = tcp_addr, .method = "HEAD", .target = "/hello",
	};
	struct result res;

	(void)state;
	result_init(&res);
	res.want[0] = "Content-Length";
	exchange(&o, &streamed_cb, &res);
	assert_false(res.failed);
	assert_int_equal(res.status, 200);
	assert_string_equal(res.headers[0], "5");
	assert_int_equal(evbuffer_get_length(res.body), 0);
	result_free(&res);

	o.method = "GET";
	o.target = "/empty";
	result_init(&res);
	exchange(&o, &kept_cb, &res);
	assert_false(res.failed);
	assert_int_equal(res.status, 204);
	assert_int_equal(evbuffer_get_length(res.body), 0);
	result_free(&res);
}

/* JSON convenience. */

struct json_result {
	int done, status, err_status;
	json_t *answer;
};

static void
json_done(int status, json_t *answer, const struct error *err, void *arg)
{
	struct json_result *jr = arg;

	jr->done++;
	jr->status = status;
	jr->err_status = err != NULL ? err->status : 0;
	jr->answer = json_incref(answer);
}

static void
json_call(const char *addr, const char *method, const char *target,
    json_t *body, struct json_result *jr)
{
	static const char *const headers[] = { "X-Echo: 1", NULL };
	struct error err;

	memset(jr, 0, sizeof *jr);
	assert_non_null(http_client_json(base, addr, method, target, headers,
	    body, 5, json_done, jr, &err));
	run_until(&jr->done);
	assert_int_equal(jr->done, 1);
}

static void
test_json(void **state)
{
	struct json_result jr;
	json_t *body = json_pack("{s:i,s:s}", "a", 1, "b", "é");
	char missing[300];

	(void)state;
	json_call(unix_addr, "POST", "/echo", body, &jr);
	json_decref(body);
	assert_int_equal(jr.status, 200);
	assert_int_equal(jr.err_status, 0);
	assert_true(json_is_object(jr.answer));
	assert_int_equal(json_integer_value(json_object_get(jr.answer, "a")), 1);
	assert_string_equal(json_string_value(json_object_get(jr.answer, "b")),
	    "é");
	json_decref(jr.answer);

	/* Without the token, a path no route has is an auth error too. */
	json_call(tcp_addr, "GET", "/nowhere", NULL, &jr);
	assert_int_equal(jr.status, 403);
	assert_non_null(json_object_get(jr.answer, "detail"));
	json_decref(jr.answer);

	/* Not JSON: the status, and no answer. */
	json_call(tcp_addr, "GET", "/hello", NULL, &jr);
	assert_int_equal(jr.status, 200);
	assert_null(jr.answer);

	snprintf(missing, sizeof missing, "unix:%s/missing.sock", tmpdir);
	json_call(missing, "GET", "/", NULL, &jr);
	assert_int_equal(jr.err_status, 502);
	assert_null(jr.answer);
}

/* A JSON request cancelled before its answer: done is never called and
 * nothing of it is left (ASan's leak check sees its context). */
static void
test_json_cancel(void **state)
{
	struct json_result jr;
	struct http_client_request *r;
	struct error err;
	struct timeval tv = { 0, 200 * 1000 };

	(void)state;
	memset(&jr, 0, sizeof jr);
	r = http_client_json(base, tcp_addr, "GET", "/hello", NULL, NULL, 5,
	    json_done, &jr, &err);
	assert_non_null(r);
	http_client_json_cancel(r);
	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
	assert_int_equal(jr.done, 0);
}

/* Streamed uploads: the writer keeps at most UPLOAD_HIGH queued. */

struct upload {
	struct result res;
	uint64_t size, written;
	size_t max_pending;
	int cancel_at_drain;
	int drains;
};

static void
upload_drain_cb(struct http_client_request *r, void *arg)
{
	struct upload *up = arg;
	unsigned char buf[PIECE];

	up->drains++;
	if (up->cancel_at_drain) {
		http_client_cancel(r);
		up->res.done = 1;	/* stop the loop: on_done never comes */
		return;
	}
	while (up->written < up->size && http_client_pending(r) < UPLOAD_HIGH) {
		size_t n = up->size - up->written < PIECE ?
		    (size_t)(up->size - up->written) : PIECE;

		pattern_fill(buf, up->written, n);
		http_client_write(r, buf, n);
		up->written += n;
		if (http_client_pending(r) > up->max_pending)
			up->max_pending = http_client_pending(r);
	}
	if (up->written == up->size)
		http_client_end(r);
}

static void
upload_done_cb(struct http_client_request *r, const struct error *err,
    void *arg)
{
	done_cb(r, err, &((struct upload *)arg)->res);
}

static const struct http_client_callbacks upload_cb = {
	.on_drain = upload_drain_cb,
	.on_done = upload_done_cb,
};

static void
upload(struct upload *up, const char *target, uint64_t size, int chunked)
{
	struct http_client_options o = {
		.addr = tcp_addr, .method = "POST", .target = target,
		.stream_body = 1, .body_length = chunked ? -1 : (int64_t)size,
	};
	struct http_client_request *r;
	struct error err;

	memset(up, 0, sizeof *up);
	result_init(&up->res);
	up->size = size;
	r = http_client_start(base, &o, &upload_cb, up, &err);
	assert_non_null(r);
	upload_drain_cb(r, up);
	run_until(&up->res.done);
	assert_int_equal(up->res.done, 1);
}

static void
check_hash_answer(struct upload *up)
{
	json_t *j = json_loads(result_body(&up->res), 0, NULL);
	char hex[32];

	assert_false(up->res.failed);
	assert_int_equal(up->res.status, 200);
	assert_non_null(j);
	snprintf(hex, sizeof hex, "%016" PRIx64, pattern_hash(up->size));
	assert_int_equal(json_integer_value(json_object_get(j, "length")),
	    up->size);
	assert_string_equal(json_string_value(json_object_get(j, "hash")), hex);
	json_decref(j);
	/* Bounded memory: never more queued than the mark plus one piece
	 * and its chunk framing. */
	assert_true(up->max_pending <= UPLOAD_HIGH + PIECE + 16);
	assert_true(up->drains > 1);
}

static void
test_upload_chunked_64mib(void **state)
{
	struct upload up;

	(void)state;
	upload(&up, "/hash", 64ull * MIB, 1);
	check_hash_answer(&up);
	result_free(&up.res);
}

static void
test_upload_content_length(void **state)
{
	struct upload up;

	(void)state;
	upload(&up, "/hash", 16ull * MIB + 123, 0);
	check_hash_answer(&up);
	result_free(&up.res);
}

/* The server refuses the body at its headers: the answer arrives while
 * the client is still sending, and ends the exchange. */
static void
test_upload_early_answer(void **state)
{
	struct upload up;

	(void)state;
	upload(&up, "/small", 64ull * MIB, 0);
	assert_false(up.res.failed);
	assert_int_equal(up.res.status, 413);
	assert_non_null(strstr(result_body(&up.res), "too large"));
	assert_true(up.written < up.size);
	result_free(&up.res);
}

static void
test_cancel_from_on_drain(void **state)
{
	struct http_client_options o = {
		.addr = tcp_addr, .method = "POST", .target = "/hash",
		.stream_body = 1, .body_length = -1,
	};
	struct upload up;
	struct error err;
	struct http_client_request *r;

	(void)state;
	memset(&up, 0, sizeof up);
	result_init(&up.res);
	r = http_client_start(base, &o, &upload_cb, &up, &err);
	assert_non_null(r);
	http_client_write(r, "abc", 3);
	up.cancel_at_drain = 1;
	run_until(&up.res.done);
	assert_int_equal(up.drains, 1);
	/* The server sees the connection go. */
	run_until(&server_saw_close);
	result_free(&up.res);
}

static void
test_write_past_content_length(void **state)
{
	struct http_client_options o = {
		.addr = tcp_addr, .method = "POST", .target = "/hash",
		.stream_body = 1, .body_length = 3,
	};
	struct http_client_request *r;
	struct result res;
	struct error err;

	(void)state;
	result_init(&res);
	r = http_client_start(base, &o, &kept_cb, &res, &err);
	assert_non_null(r);
	http_client_write(r, "abcde", 5);
	run_until(&res.done);
	assert_int_equal(res.done, 1);
	assert_int_equal(res.err_status, 500);
	assert_non_null(strstr(res.err_msg, "Content-Length"));
	result_free(&res);

	/* And ending short of it. */
	result_init(&res);
	r = http_client_start(base, &o, &kept_cb, &res, &err);
	assert_non_null(r);
	http_client_write(r, "ab", 2);
	http_client_end(r);
	run_until(&res.done);
	assert_int_equal(res.err_status, 500);
	assert_non_null(strstr(res.err_msg, "short"));
	result_free(&res);
}

/* Streamed downloads. */

struct download {
	struct result res;
	struct http_client_request *r;
	uint64_t received, hash, since_pause;
	int paused, pauses, body_while_paused;
	int cancel_at_head, cancel_at_body;
	struct event *resume_ev;
};

static void
resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct download *dl = arg;

	(void)fd;
	(void)what;
	dl->paused = 0;
	http_client_resume(dl->r);
}

static void
dl_head_cb(struct http_client_request *r, int status, void *arg)
{
	struct download *dl = arg;

	head_cb(r, status, &dl->res);
	if (dl->cancel_at_head) {
		http_client_cancel(r);
		dl->res.done = 1;
	}
}

static void
dl_body_cb(struct http_client_request *r, const char *data, size_t len,
    void *arg)
{
	struct download *dl = arg;
	struct timeval now = { 0, 0 };

	if (dl->cancel_at_body) {
		http_client_cancel(r);
		dl->res.done = 1;
		return;
	}
	if (dl->paused)
		dl->body_while_paused++;
	dl->received += len;
	dl->hash = fnv(dl->hash, data, len);
	dl->since_pause += len;
	if (dl->since_pause >= MIB) {
		dl->since_pause = 0;
		dl->paused = 1;
		dl->pauses++;
		http_client_pause(r);
		/* Resume from the loop, a turn later. */
		evtimer_add(dl->resume_ev, &now);
	}
}

static void
dl_done_cb(struct http_client_request *r, const struct error *err,
    void *arg)
{
	done_cb(r, err, &((struct download *)arg)->res);
}

static const struct http_client_callbacks download_cb = {
	.on_head = dl_head_cb,
	.on_body = dl_body_cb,
	.on_done = dl_done_cb,
};

static void
download(struct download *dl, const char *target)
{
	struct http_client_options o = {
		.addr = unix_addr, .method = "GET", .target = target,
		.max_response = 1024,	/* not for streamed answers */
	};
	struct error err;

	result_init(&dl->res);
	dl->hash = FNV_INIT;
	dl->resume_ev = evtimer_new(base, resume_cb, dl);
	dl->r = http_client_start(base, &o, &download_cb, dl, &err);
	assert_non_null(dl->r);
	run_until(&dl->res.done);
	event_free(dl->resume_ev);
}

static void
test_download_pause_resume(void **state)
{
	struct download dl = { 0 };
	uint64_t size = 32ull * MIB + 7;
	char target[64];

	(void)state;
	snprintf(target, sizeof target, "/stream?size=%" PRIu64, size);
	download(&dl, target);
	assert_false(dl.res.failed);
	assert_int_equal(dl.res.status, 200);
	assert_int_equal(dl.res.heads, 1);
	assert_int_equal(dl.received, size);
	assert_true(dl.hash == pattern_hash(size));
	assert_true(dl.pauses >= 32);
	assert_int_equal(dl.body_while_paused, 0);
	result_free(&dl.res);
}

static void
test_cancel_from_on_body(void **state)
{
	struct download dl = { .cancel_at_body = 1 };

	(void)state;
	download(&dl, "/stream?size=67108864");
	run_until(&server_saw_close);
	assert_int_equal(dl.res.heads, 1);
	result_free(&dl.res);
}

static void
test_cancel_from_on_head(void **state)
{
	struct download dl = { .cancel_at_head = 1 };

	(void)state;
	download(&dl, "/stream?size=67108864");
	run_until(&server_saw_close);
	assert_int_equal(dl.received, 0);
	result_free(&dl.res);
}

static void
test_cancel_before_connect(void **state)
{
	struct http_client_options o = {
		.addr = tcp_addr, .method = "GET", .target = "/hello",
	};
	struct http_client_request *r;
	struct result res;
	struct error err;

	(void)state;
	result_init(&res);
	r = http_client_start(base, &o, &kept_cb, &res, &err);
	assert_non_null(r);
	http_client_cancel(r);
	/* A failure that is already scheduled is not reported either. */
	o.addr = "unix:/nonexistent/socket";
	r = http_client_start(base, &o, &kept_cb, &res, &err);
	assert_non_null(r);
	http_client_cancel(r);
	/* Let the loop run: a later request completes, the cancelled ones
	 * never call back. */
	o.addr = tcp_addr;
	exchange(&o, &kept_cb, &res);
	assert_int_equal(res.done, 1);
	assert_int_equal(res.status, 200);
	result_free(&res);
}

static void
test_answer_too_large(void **state)
{
	struct http_client_options o = {
		.addr = tcp_addr, .method = "GET", .target = "/stream?size=3000000",
		.max_response = MIB,
	};
	struct result res;

	(void)state;
	result_init(&res);
	exchange(&o, &kept_cb, &res);
	assert_int_equal(res.err_status, 502);
	assert_non_null(strstr(res.err_msg, "too large"));
	result_free(&res);
}

/* Peers that are not there. */

static void
test_missing_unix_socket(void **state)
{
	char addr[300];
	struct http_client_options o = {
		.addr = addr, .method = "GET", .target = "/",
	};
	struct result res;

	(void)state;
	snprintf(addr, sizeof addr, "unix:%s/missing.sock", tmpdir);
	result_init(&res);
	exchange(&o, &kept_cb, &res);
	assert_int_equal(res.err_status, 502);
	assert_non_null(strstr(res.err_msg, addr));
	assert_non_null(strstr(res.err_msg, "No such file"));
	assert_int_equal(res.heads, 0);
	result_free(&res);
}

static void
test_refused_tcp_port(void **state)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof sin;
	char addr[64];
	struct http_client_options o = {
		.addr = addr, .method = "GET", .target = "/",
	};
	struct result res;
	int fd;

	(void)state;
	/* A port that was just free: bound, never listened on, closed. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	close(fd);
	snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sin.sin_port));
	result_init(&res);
	exchange(&o, &kept_cb, &res);
	assert_int_equal(res.err_status, 502);
	assert_non_null(strstr(res.err_msg, addr));
	assert_non_null(strstr(res.err_msg, "refused"));
	result_free(&res);
}

static void
test_bad_options(void **state)
{
	static const char *const crlf[] = { "X-A: 1\r\nX-B: 2", NULL };
	static const char *const noname[] = { ": value", NULL };
	static const char *const nocolon[] = { "X-A", NULL };
	struct http_client_options o = {
		.method = "GET", .target = "/",
	};
	const char *bad_addrs[] = { "nope", "unix:", "example.com:80",
	    "127.0.0.1:http", "127.0.0.1:" };
	struct result res;
	struct error err;

	(void)state;
	result_init(&res);
	for (size_t i = 0; i < sizeof bad_addrs / sizeof bad_addrs[0]; i++) {
		o.addr = bad_addrs[i];
		err.status = 0;
		assert_null(http_client_start(base, &o, &kept_cb, &res, &err));
		assert_int_equal(err.status, 400);
	}
	o.addr = tcp_addr;
	o.headers = crlf;
	assert_null(http_client_start(base, &o, &kept_cb, &res, &err));
	o.headers = noname;
	assert_null(http_client_start(base, &o, &kept_cb, &res, &err));
	o.headers = nocolon;
	assert_null(http_client_start(base, &o, &kept_cb, &res, &err));
	o.headers = NULL;
	o.target = "/a b";
	assert_null(http_client_start(base, &o, &kept_cb, &res, &err));
	o.target = "/a\r\n";
	assert_null(http_client_start(base, &o, &kept_cb, &res, &err));
	o.target = "/";
	o.method = "GE T";
	assert_null(http_client_start(base, &o, &kept_cb, &res, &err));
	o.method = "POST";
	o.body = "x";
	o.body_len = 1;
	o.stream_body = 1;
	assert_null(http_client_start(base, &o, &kept_cb, &res, &err));
	assert_int_equal(err.status, 400);
	assert_int_equal(res.done, 0);
	result_free(&res);
}

/* Scripted raw peers: after the request (up to wait_for), the answer goes
 * out in pieces of `piece` bytes a millisecond apart (0: at once), then the
 * peer closes if told to, or holds the connection. */

struct peer {
	struct evconnlistener *lev;
	char addr[64];
	const char *wait_for;
	const char *answer;
	size_t answer_len;
	size_t piece;
	int close_after;
	struct bufferevent *bev;
	struct event *step_ev;
	struct evbuffer *request;	/* everything the client sent */
	size_t sent;
	int answering, closing;
};

static void
peer_close(struct peer *p)
{
	if (p->bev != NULL)
		bufferevent_free(p->bev);
	p->bev = NULL;
}

static void
peer_step_cb(evutil_socket_t fd, short what, void *arg)
{
	struct peer *p = arg;
	size_t n = p->answer_len - p->sent;
	struct timeval gap = { 0, 1000 };

	(void)fd;
	(void)what;
	if (p->bev == NULL)
		return;
	if (p->piece > 0 && n > p->piece)
		n = p->piece;
	bufferevent_write(p->bev, p->answer + p->sent, n);
	p->sent += n;
	if (p->sent < p->answer_len) {
		evtimer_add(p->step_ev, &gap);
		return;
	}
	if (p->close_after) {
		p->closing = 1;
		if (evbuffer_get_length(bufferevent_get_output(p->bev)) == 0)
			peer_close(p);
	}
}

static void
peer_read_cb(struct bufferevent *bev, void *arg)
{
	struct peer *p = arg;
	struct evbuffer_ptr found;

	evbuffer_add_buffer(p->request, bufferevent_get_input(bev));
	if (p->answering)
		return;
	found = evbuffer_search(p->request, p->wait_for, strlen(p->wait_for),
	    NULL);
	if (found.pos < 0)
		return;
	p->answering = 1;
	event_active(p->step_ev, EV_TIMEOUT, 0);
}

static void
peer_write_cb(struct bufferevent *bev, void *arg)
{
	struct peer *p = arg;

	(void)bev;
	if (p->closing)
		peer_close(p);
}

static void
peer_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	peer_close(arg);
}

static void
peer_accept_cb(struct evconnlistener *lev, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	struct peer *p = arg;

	(void)lev;
	(void)sa;
	(void)salen;
	assert_null(p->bev);	/* one exchange per peer */
	p->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	bufferevent_setcb(p->bev, peer_read_cb, peer_write_cb, peer_event_cb,
	    p);
	bufferevent_enable(p->bev, EV_READ | EV_WRITE);
}

static void
peer_start(struct peer *p, const char *answer, size_t piece, int close_after)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof sin;

	if (p->wait_for == NULL)
		p->wait_for = "\r\n\r\n";
	p->answer = answer;
	p->answer_len = answer != NULL ? strlen(answer) : 0;
	p->piece = piece;
	p->close_after = close_after;
	p->request = evbuffer_new();
	p->step_ev = evtimer_new(base, peer_step_cb, p);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	p->lev = evconnlistener_new_bind(base, peer_accept_cb, p,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 16,
	    (struct sockaddr *)&sin, sizeof sin);
	assert_non_null(p->lev);
	assert_int_equal(getsockname(evconnlistener_get_fd(p->lev),
	    (struct sockaddr *)&sin, &len), 0);
	snprintf(p->addr, sizeof p->addr, "127.0.0.1:%d", ntohs(sin.sin_port));
}

static void
peer_free(struct peer *p)
{
	peer_close(p);
	evconnlistener_free(p->lev);
	event_free(p->step_ev);
	evbuffer_free(p->request);
}

/* One GET against a raw peer. */
static void
peer_exchange(const char *answer, size_t piece, int close_after,
    double timeout, const struct http_client_callbacks *cb,
    struct result *res)
{
	struct peer p = { 0 };
	struct http_client_options o = {
		.method = "GET", .target = "/x", .timeout = timeout,
	};

	peer_start(&p, answer, piece, close_after);
	o.addr = p.addr;
	result_init(res);
	exchange(&o, cb, res);
	peer_free(&p);
}

static void
test_malformed_answer(void **state)
{
	struct result res;

	(void)state;
	peer_exchange("HTTP/1.1 abc OK\r\n\r\n", 0, 1, 5, &kept_cb, &res);
	assert_int_equal(res.err_status, 502);
	assert_non_null(strstr(res.err_msg, "malformed answer"));
	result_free(&res);

	peer_exchange("SSH-2.0-OpenSSH_9.2\r\n", 0, 0, 5, &kept_cb, &res);
	assert_int_equal(res.err_status, 502);
	result_free(&res);

	peer_exchange("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "zz\r\n", 0, 0, 5, &kept_cb, &res);
	assert_int_equal(res.err_status, 502);
	result_free(&res);
}

static void
test_close_mid_body(void **state)
{
	struct result res;

	(void)state;
	peer_exchange("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
	    "only ten..", 0, 1, 5, &streamed_cb, &res);
	assert_int_equal(res.err_status, 502);
	if (strstr(res.err_msg, "closed the connection") == NULL)
		fail_msg("%s", res.err_msg);
	assert_int_equal(res.heads, 1);
	assert_string_equal(result_body(&res), "only ten..");
	result_free(&res);

	peer_exchange("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "5\r\nhello\r\n", 0, 1, 5, &kept_cb, &res);
	assert_int_equal(res.err_status, 502);
	result_free(&res);

	/* Nothing at all. */
	peer_exchange("", 0, 1, 5, &kept_cb, &res);
	assert_int_equal(res.err_status, 502);
	if (strstr(res.err_msg, "closed the connection") == NULL)
		fail_msg("%s", res.err_msg);
	result_free(&res);
}

static void
test_close_delimited_body(void **state)
{
	struct result res;

	(void)state;
	peer_exchange("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"
	    "until the end", 3, 1, 5, &kept_cb, &res);
	assert_false(res.failed);
	assert_int_equal(res.status, 200);
	assert_string_equal(result_body(&res), "until the end");
	result_free(&res);

	peer_exchange("HTTP/1.0 200 OK\r\n\r\nold", 0, 1, 5, &kept_cb, &res);
	assert_int_equal(res.status, 200);
	assert_string_equal(result_body(&res), "old");
	result_free(&res);
}

static void
test_timeout(void **state)
{
	struct result res;

	(void)state;
	/* Never answers. */
	peer_exchange(NULL, 0, 0, 0.2, &kept_cb, &res);
	assert_int_equal(res.err_status, 504);
	assert_non_null(strstr(res.err_msg, "127.0.0.1:"));
	result_free(&res);

	/* Stops in the middle of the body. */
	peer_exchange("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0, 0,
	    0.2, &streamed_cb, &res);
	assert_int_equal(res.err_status, 504);
	assert_string_equal(result_body(&res), "abc");
	result_free(&res);
}

static void
test_chunked_odd_pieces(void **state)
{
	static const char answer[] =
	    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
	    "Content-Type: text/event-stream\r\n\r\n"
	    "7\r\nevent: \r\n"
	    "a;name=value\r\nmessage\nda\r\n"
	    "1\r\nt\r\n"
	    "00D\r\na: {\"id\":1}\n\n\r\n"
	    "0\r\nX-Trailer: t\r\n\r\n";
	static const char body[] = "event: message\ndata: {\"id\":1}\n\n";
	size_t pieces[] = { 1, 2, 3, 7, 0 };
	struct result res;

	(void)state;
	for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
		peer_exchange(answer, pieces[i], 0, 5, &streamed_cb, &res);
		assert_false(res.failed);
		assert_int_equal(res.status, 200);
		assert_int_equal(res.heads, 1);
		assert_string_equal(result_body(&res), body);
		result_free(&res);
	}
}

static void
test_interim_answers(void **state)
{
	struct result res;

	(void)state;
	peer_exchange("HTTP/1.1 100 Continue\r\n\r\n"
	    "HTTP/1.1 102 Processing\r\nX-Interim: 1\r\n\r\n"
	    "HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX-Final: 1\r\n\r\n"
	    "ok", 4, 0, 5, &kept_cb, &res);
	assert_false(res.failed);
	assert_int_equal(res.status, 201);
	assert_int_equal(res.heads, 1);
	assert_string_equal(result_body(&res), "ok");
	result_free(&res);

	/* Headers recorded at on_head come from the final answer only. */
	{
		struct peer p = { 0 };
		struct http_client_options o = {
			.method = "GET", .target = "/", .timeout = 5,
		};

		peer_start(&p, "HTTP/1.1 103 Early Hints\r\nX-Interim: 1\r\n\r\n"
		    "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Final: 1\r\n\r\n",
		    0, 0);
		o.addr = p.addr;
		result_init(&res);
		res.want[0] = "X-Interim";
		res.want[1] = "X-Final";
		exchange(&o, &kept_cb, &res);
		assert_int_equal(res.status, 200);
		assert_null(res.headers[0]);
		assert_string_equal(res.headers[1], "1");
		peer_free(&p);
		result_free(&res);
	}
}

static void
test_304_with_length_has_no_body(void **state)
{
	struct result res;

	(void)state;
	/* The peer keeps the connection open: the answer must end at its
	 * headers, not wait for the 10 bytes. */
	peer_exchange("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
	    0, 0, 5, &kept_cb, &res);
	assert_false(res.failed);
	assert_int_equal(res.status, 304);
	assert_int_equal(evbuffer_get_length(res.body), 0);
	result_free(&res);
}

static void
test_chunked_upload_framing(void **state)
{
	struct peer p = { .wait_for = "0\r\n\r\n" };
	struct http_client_options o = {
		.method = "PUT", .target = "/up", .stream_body = 1,
		.body_length = -1,
	};
	static const char *const headers[] = { "Authorization: Bearer t0ken",
	    NULL };
	struct http_client_request *r;
	struct evbuffer *piece = evbuffer_new();
	struct result res;
	struct error err;
	const char *sent;

	(void)state;
	peer_start(&p, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 0, 0);
	o.addr = p.addr;
	o.headers = headers;
	result_init(&res);
	r = http_client_start(base, &o, &kept_cb, &res, &err);
	assert_non_null(r);
	http_client_write(r, "ab", 2);
	http_client_write(r, "", 0);
	evbuffer_add(piece, "cde", 3);
	http_client_write_buffer(r, piece);
	assert_int_equal(evbuffer_get_length(piece), 0);
	http_client_end(r);
	run_until(&res.done);
	assert_int_equal(res.status, 200);
	evbuffer_add(p.request, "", 1);
	sent = (const char *)evbuffer_pullup(p.request, -1);
	assert_non_null(strstr(sent, "PUT /up HTTP/1.1\r\n"));
	assert_non_null(strstr(sent, "\r\nTransfer-Encoding: chunked\r\n"));
	assert_non_null(strstr(sent, "\r\nAuthorization: Bearer t0ken\r\n"));
	assert_non_null(strstr(sent, "\r\n\r\n2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n"));
	assert_null(strstr(sent, "Content-Length"));
	evbuffer_free(piece);
	peer_free(&p);
	result_free(&res);
}

/* An event stream: each piece reaches on_body as it comes, long before
 * the answer ends (MCP servers answer this way). */
struct sse {
	struct result res;
	int cancel_in_done;
};

static void
sse_body_cb(struct http_client_request *r, const char *data, size_t len,
    void *arg)
{
	struct sse *sse = arg;

	evbuffer_add(sse->res.body, data, len);
	if (evbuffer_search(sse->res.body, "\n\n", 2, NULL).pos >= 0) {
		http_client_cancel(r);
		sse->res.done = 1;
	}
}

static void
sse_done_cb(struct http_client_request *r, const struct error *err,
    void *arg)
{
	struct sse *sse = arg;

	done_cb(r, err, &sse->res);
	/* A no-op here: the request is freed once on_done returns. */
	if (sse->cancel_in_done)
		http_client_cancel(r);
}

static void
test_body_pieces_arrive_before_the_end(void **state)
{
	static const struct http_client_callbacks cb = {
		.on_body = sse_body_cb,
		.on_done = sse_done_cb,
	};
	struct peer p = { 0 };
	struct http_client_options o = {
		.method = "POST", .target = "/mcp", .body = "{}", .body_len = 2,
	};
	struct sse sse = { 0 };
	struct error err;

	(void)state;
	/* The peer sends one event and holds the stream open. */
	peer_start(&p, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n"
	    "16\r\nevent: message\ndata: 1\r\n2\r\n\n\n\r\n", 0, 0);
	o.addr = p.addr;
	result_init(&sse.res);
	assert_non_null(http_client_start(base, &o, &cb, &sse, &err));
	run_until(&sse.res.done);
	assert_string_equal(result_body(&sse.res),
	    "event: message\ndata: 1\n\n");
	peer_free(&p);
	result_free(&sse.res);
}

static void
test_cancel_in_on_done_is_harmless(void **state)
{
	static const struct http_client_callbacks cb = {
		.on_done = sse_done_cb,
	};
	struct http_client_options o = {
		.addr = tcp_addr, .method = "GET", .target = "/hello",
	};
	struct sse sse = { .cancel_in_done = 1 };
	struct error err;

	(void)state;
	result_init(&sse.res);
	assert_non_null(http_client_start(base, &o, &cb, &sse, &err));
	run_until(&sse.res.done);
	assert_int_equal(sse.res.status, 200);
	assert_string_equal(result_body(&sse.res), "hello");
	result_free(&sse.res);
}

/* Time paused by the caller is not the peer's: a pause longer than the
 * timeout does not fail the request. */
static void
late_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	http_client_resume(arg);
}

static void
pause_at_head_cb(struct http_client_request *r, int status, void *arg)
{
	struct timeval later = { 0, 500 * 1000 };

	head_cb(r, status, arg);
	http_client_pause(r);
	event_base_once(base, -1, EV_TIMEOUT, late_resume_cb, r, &later);
}

static void
test_pause_longer_than_timeout(void **state)
{
	static const struct http_client_callbacks cb = {
		.on_head = pause_at_head_cb,
		.on_body = body_cb,
		.on_done = done_cb,
	};
	struct http_client_options o = {
		.addr = tcp_addr, .method = "GET", .target = "/stream?size=5000000",
		.timeout = 0.2,
	};
	struct result res;

	(void)state;
	result_init(&res);
	exchange(&o, &cb, &res);
	assert_false(res.failed);
	assert_int_equal(res.status, 200);
	assert_int_equal(evbuffer_get_length(res.body), 5000000);
	result_free(&res);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
		T(test_get_tcp),
		T(test_get_unix),
		T(test_get_localhost_name),
		T(test_post_whole_body),
		T(test_post_without_body_sends_zero_length),
		T(test_bearer_token),
		T(test_head_and_204),
		T(test_json),
		T(test_json_cancel),
		T(test_upload_chunked_64mib),
		T(test_upload_content_length),
		T(test_upload_early_answer),
		T(test_cancel_from_on_drain),
		T(test_write_past_content_length),
		T(test_download_pause_resume),
		T(test_cancel_from_on_body),
		T(test_cancel_from_on_head),
		T(test_cancel_before_connect),
		T(test_answer_too_large),
		T(test_missing_unix_socket),
		T(test_refused_tcp_port),
		T(test_bad_options),
		T(test_malformed_answer),
		T(test_close_mid_body),
		T(test_close_delimited_body),
		T(test_timeout),
		T(test_chunked_odd_pieces),
		T(test_interim_answers),
		T(test_304_with_length_has_no_body),
		T(test_chunked_upload_framing),
		T(test_body_pieces_arrive_before_the_end),
		T(test_cancel_in_on_done_is_harmless),
		T(test_pause_longer_than_timeout),
#undef T
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
