/*
 * The HTTP server (common/http_server.c) against raw bytes on a unix
 * socket, on a real event loop: what a hostile client sends, byte for byte,
 * and exactly what comes back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "http.h"

#define TOKEN	"s3cret"
#define AUTH	"Authorization: Bearer " TOKEN "\r\n"

static struct event_base *base;
static struct http_server *server;
static struct http_server_config cfg;
static char tmpdir[64];
static char sock_path[128];

/* GET /open, no auth: "open". */
static void
open_route(struct http_request *req, void *arg)
{
	(void)arg;
	http_reply(req, 200, "text/plain", "open", 4);
}

/* GET /twice: a handler that answers twice, then once more streamed. Only
 * the first answer may reach the client. */
static void
twice_route(struct http_request *req, void *arg)
{
	(void)arg;
	http_reply(req, 200, "text/plain", "first", 5);
	http_reply_error(req, 500, "second");
	http_reply_start(req, 200, "text/plain", -1);
	http_reply_write(req, "third", 5);
	http_reply_end(req);
}

/* POST /json: the body as a JSON object, echoed. */
static void
json_route(struct http_request *req, void *arg)
{
	struct error err;
	json_t *body;

	(void)arg;
	if ((body = http_request_json(req, &err)) == NULL) {
		http_reply_err(req, &err);
		return;
	}
	http_reply_json(req, 200, body);
}

/* POST /sink, streamed: counts the body, pausing it for 0.5 s at the
 * first piece (backpressure, as a slow disk or agent would make). */
struct sink {
	struct http_request *req;
	struct event *resume;
	size_t got;
	int paused_once;
};

static void
sink_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sink *k = arg;

	(void)fd;
	(void)what;
	http_request_resume_body(k->req);
}

static int
sink_body_cb(struct http_request *req, const char *data, size_t len,
    void *arg)
{
	struct sink *k = arg;
	struct timeval tv = { 0, 500000 };

	(void)data;
	k->got += len;
	if (!k->paused_once) {
		k->paused_once = 1;
		http_request_pause_body(req);
		evtimer_add(k->resume, &tv);
	}
	return 0;
}

static void
sink_end_cb(struct http_request *req, void *arg)
{
	struct sink *k = arg;
	char text[32];

	snprintf(text, sizeof text, "%zu", k->got);
	event_free(k->resume);
	free(k);
	http_reply(req, 200, "text/plain", text, strlen(text));
}

static void
sink_route(struct http_request *req, void *arg)
{
	struct sink *k = calloc(1, sizeof *k);

	(void)arg;
	k->req = req;
	k->resume = evtimer_new(base, sink_resume_cb, k);
	http_request_on_body(req, sink_body_cb, sink_end_cb, k);
}

static const struct http_route routes[] = {
	{ HTTP_METHOD_GET, "/open", HTTP_MATCH_EXACT, HTTP_ROUTE_NO_AUTH,
	    open_route, 0 },
	{ HTTP_METHOD_GET, "/twice", HTTP_MATCH_EXACT, 0, twice_route, 0 },
	{ HTTP_METHOD_POST, "/json", HTTP_MATCH_EXACT, 0, json_route, 0 },
	{ HTTP_METHOD_POST, "/sink", HTTP_MATCH_EXACT, HTTP_ROUTE_STREAM_BODY,
	    sink_route, 0 },
};

static void
start_server(void)
{
	struct error err;
	char addr[160];

	server = http_server_new(base, &cfg);
	snprintf(addr, sizeof addr, "unix:%s", sock_path);
	if (http_server_listen(server, addr, &err) < 0)
		fail_msg("%s", err.msg);
}

static int
setup(void **state)
{
	(void)state;
	base = event_base_new();
	memset(&cfg, 0, sizeof cfg);
	cfg.routes = routes;
	cfg.nroutes = sizeof routes / sizeof routes[0];
	cfg.token = TOKEN;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/https-test-XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	snprintf(sock_path, sizeof sock_path, "%s/s.sock", tmpdir);
	start_server();
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

static int
client_connect(void)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	strcpy(sun.sun_path, sock_path);
	assert_int_equal(connect(fd, (struct sockaddr *)&sun, sizeof sun), 0);
	assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
	return fd;
}

/* One client socket driven by the server's own loop. */
struct exchange {
	int fd;
	const char *in;
	size_t len, sent;
	struct event *wev;
	struct evbuffer *out;	/* what came back */
	int eof;
};

static void
exchange_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *x = arg;
	ssize_t n;

	(void)what;
	n = write(fd, x->in + x->sent, x->len - x->sent);
	if (n > 0)
		x->sent += (size_t)n;
	if (n < 0 || x->sent == x->len)
		event_del(x->wev);
}

static void
exchange_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *x = arg;
	char buf[16384];
	ssize_t n;

	(void)what;
	while ((n = read(fd, buf, sizeof buf)) > 0)
		evbuffer_add(x->out, buf, (size_t)n);
	if (n == 0 || (n < 0 && errno != EAGAIN))
		x->eof = 1;
}

static int guard_fired;

static void
guard_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	guard_fired = 1;
}

/* Send raw, read until the server closes (guarded); what came back, as a
 * string to free. */
static char *
exchange(const char *raw, size_t len)
{
	struct exchange x = { .in = raw, .len = len };
	struct timeval tv = { 20, 0 };
	struct event *rev, *guard;
	char *s;
	size_t n;

	x.fd = client_connect();
	x.out = evbuffer_new();
	x.wev = event_new(base, x.fd, EV_WRITE | EV_PERSIST, exchange_write_cb,
	    &x);
	rev = event_new(base, x.fd, EV_READ | EV_PERSIST, exchange_read_cb, &x);
	event_add(x.wev, NULL);
	event_add(rev, NULL);
	guard = evtimer_new(base, guard_cb, NULL);
	guard_fired = 0;
	evtimer_add(guard, &tv);
	while (!x.eof && !guard_fired)
		event_base_loop(base, EVLOOP_ONCE);
	event_free(guard);
	event_free(rev);
	event_free(x.wev);
	close(x.fd);
	assert_false(guard_fired);
	n = evbuffer_get_length(x.out);
	s = malloc(n + 1);
	evbuffer_remove(x.out, s, n);
	s[n] = '\0';
	evbuffer_free(x.out);
	return s;
}

#define EXCHANGE(lit) exchange((lit), sizeof(lit) - 1)

static int
count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
		n++;
	return n;
}

/* The status line and the body of the one answer in s. */
static void
assert_answer(const char *s, const char *status, const char *body)
{
	const char *b = strstr(s, "\r\n\r\n");

	if (strncmp(s, status, strlen(status)) != 0 || b == NULL ||
	    strcmp(b + 4, body) != 0)
		fail_msg("expected %s ... %s, got:\n%s", status, body, s);
}

static void
test_second_reply_is_dropped(void **state)
{
	char *s;

	(void)state;
	/* Two requests on one connection: each gets exactly its first
	 * answer, and the connection stays in step. */
	s = EXCHANGE("GET /twice HTTP/1.1\r\nHost: x\r\n" AUTH "\r\n"
	    "GET /twice HTTP/1.1\r\nHost: x\r\n" AUTH
	    "Connection: close\r\n\r\n");
	assert_int_equal(count(s, "HTTP/1.1 "), 2);
	assert_int_equal(count(s, "first"), 2);
	assert_int_equal(count(s, "second"), 0);
	assert_int_equal(count(s, "third"), 0);
	free(s);
}

static void
test_bad_query_is_fixed_text(void **state)
{
	char *s;

	(void)state;
	/* A NUL in a value, then in a name; the name was once formatted
	 * into the answer after being freed. */
	s = EXCHANGE("GET /open?abcdefghijklmnopqrstuvwxyz0123456789=a%00b "
	    "HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_answer(s, "HTTP/1.1 400 ",
	    "{\"detail\":\"malformed query string\"}");
	free(s);
	s = EXCHANGE("GET /open?a%00b=c HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_answer(s, "HTTP/1.1 400 ",
	    "{\"detail\":\"malformed query string\"}");
	free(s);
}

static void
test_space_before_colon_is_refused(void **state)
{
	char *s;

	(void)state;
	s = EXCHANGE("POST /json HTTP/1.1\r\nHost: x\r\n" AUTH
	    "Transfer-Encoding : chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
	assert_answer(s, "HTTP/1.1 400 ", "{\"detail\":\"malformed HTTP "
	    "request: invalid character in a header name\"}");
	free(s);
	s = EXCHANGE("POST /json HTTP/1.1\r\nHost: x\r\n" AUTH
	    "Content-Length\t: 2\r\n\r\n{}");
	assert_true(strncmp(s, "HTTP/1.1 400 ", 13) == 0);
	free(s);
}

static void
test_folded_header_is_refused(void **state)
{
	char *s;

	(void)state;
	s = EXCHANGE("POST /json HTTP/1.1\r\nHost: x\r\n" AUTH
	    "Transfer-Encoding: identity\r\n chunked\r\n\r\n"
	    "2\r\n{}\r\n0\r\n\r\n");
	assert_answer(s, "HTTP/1.1 400 ", "{\"detail\":\"malformed HTTP "
	    "request: a header folded over several lines (obs-fold)\"}");
	free(s);
	s = EXCHANGE("GET /open HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n");
	assert_true(strncmp(s, "HTTP/1.1 400 ", 13) == 0);
	free(s);
}

/* Folds are found wherever the reads cut the head, even between the
 * line end and the fold's first blank. */
static void
test_folded_header_in_pieces(void **state)
{
	static const char req[] = "GET /open HTTP/1.1\r\nHost: x\r\n"
	    "X-A: a\r\n b\r\nConnection: close\r\n\r\n";
	size_t cut = strstr(req, "a\r\n b") - req + 3;
	int fd = client_connect();
	char buf[4096];
	ssize_t n, got = 0;

	(void)state;
	assert_int_equal(write(fd, req, cut), (ssize_t)cut);
	/* Let the server read the first piece on its own. */
	for (int i = 0; i < 20; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(write(fd, req + cut, sizeof req - 1 - cut),
	    (ssize_t)(sizeof req - 1 - cut));
	for (int i = 0; i < 2000 && got == 0; i++) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		n = read(fd, buf, sizeof buf - 1);
		if (n > 0)
			got = n;
		else
			usleep(1000);
	}
	buf[got] = '\0';
	close(fd);
	assert_true(strncmp(buf, "HTTP/1.1 400 ", 13) == 0);
}

static void
test_unknown_paths_need_auth(void **state)
{
	char *s;

	(void)state;
	s = EXCHANGE("GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_true(strncmp(s, "HTTP/1.1 403 ", 13) == 0);
	free(s);
	s = EXCHANGE("POST /open HTTP/1.1\r\nHost: x\r\nContent-Length: 0"
	    "\r\n\r\n");
	assert_true(strncmp(s, "HTTP/1.1 403 ", 13) == 0);
	free(s);
	s = EXCHANGE("GET /nowhere HTTP/1.1\r\nHost: x\r\nAuthorization: "
	    "Bearer wrong\r\n\r\n");
	assert_true(strncmp(s, "HTTP/1.1 403 ", 13) == 0);
	free(s);
	s = EXCHANGE("GET /nowhere HTTP/1.1\r\nHost: x\r\n" AUTH "\r\n");
	assert_true(strncmp(s, "HTTP/1.1 404 ", 13) == 0);
	free(s);
	s = EXCHANGE("POST /open HTTP/1.1\r\nHost: x\r\n" AUTH
	    "Content-Length: 0\r\n\r\n");
	assert_true(strncmp(s, "HTTP/1.1 405 ", 13) == 0);
	free(s);
	s = EXCHANGE("GET /open HTTP/1.1\r\nHost: x\r\nConnection: close"
	    "\r\n\r\n");
	assert_answer(s, "HTTP/1.1 200 ", "open");
	free(s);
}

static void
restart_server(void)
{
	http_server_free(server);
	start_server();
}

/* Read what fd receives until it closes (the loop running meanwhile);
 * a string to free. */
static char *
read_until_closed(int fd)
{
	struct exchange x = { .fd = fd };
	struct timeval tv = { 20, 0 };
	struct event *rev, *guard;
	char *s;
	size_t n;

	x.out = evbuffer_new();
	rev = event_new(base, fd, EV_READ | EV_PERSIST, exchange_read_cb, &x);
	event_add(rev, NULL);
	guard = evtimer_new(base, guard_cb, NULL);
	guard_fired = 0;
	evtimer_add(guard, &tv);
	while (!x.eof && !guard_fired)
		event_base_loop(base, EVLOOP_ONCE);
	event_free(guard);
	event_free(rev);
	assert_false(guard_fired);
	n = evbuffer_get_length(x.out);
	s = malloc(n + 1);
	evbuffer_remove(x.out, s, n);
	s[n] = '\0';
	evbuffer_free(x.out);
	return s;
}

static void
spin(int turns)
{
	for (int i = 0; i < turns; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
}

static void
test_connection_limit(void **state)
{
	int a, b, c;
	char *s;

	(void)state;
	cfg.max_connections = 2;
	restart_server();
	a = client_connect();
	b = client_connect();
	spin(10);
	assert_int_equal(http_server_connections(server), 2);
	c = client_connect();
	s = read_until_closed(c);
	assert_answer(s, "HTTP/1.1 503 ",
	    "{\"detail\":\"too many connections; retry later\"}");
	free(s);
	close(c);
	/* One closes: the next is served. */
	close(a);
	spin(10);
	assert_int_equal(http_server_connections(server), 1);
	s = EXCHANGE("GET /open HTTP/1.1\r\nHost: x\r\nConnection: close"
	    "\r\n\r\n");
	assert_answer(s, "HTTP/1.1 200 ", "open");
	free(s);
	close(b);
}

/* A head must be whole within header_timeout of its first byte, not
 * merely keep coming. */
static void
test_head_deadline(void **state)
{
	static const char *const starts[] = {
		"GET /open HTTP/1.1\r\nHost: x\r\nX-Slow: a",
		"\r\n",	/* blank lines before a request */
	};
	char *s;

	(void)state;
	cfg.header_timeout = 0.3;
	restart_server();
	for (size_t i = 0; i < 2; i++) {
		int fd = client_connect();
		ssize_t len = (ssize_t)strlen(starts[i]);

		assert_int_equal(write(fd, starts[i], (size_t)len), len);
		/* Bytes keep coming, a few every 50 ms. */
		for (int k = 0; k < 3; k++) {
			usleep(50000);
			spin(5);
			assert_int_equal(write(fd, i == 0 ? "b" : "\r\n",
			    i == 0 ? 1 : 2), i == 0 ? 1 : 2);
		}
		s = read_until_closed(fd);
		assert_answer(s, "HTTP/1.1 408 ", "{\"detail\":\"request "
		    "head not complete in time\"}");
		free(s);
		close(fd);
	}
}

static void
test_body_min_rate(void **state)
{
	static const char head[] = "POST /json HTTP/1.1\r\nHost: x\r\n" AUTH
	    "Content-Length: 100000\r\n\r\n{\"a\":";
	int fd;
	char *s;

	(void)state;
	cfg.body_min_rate = 1000;
	cfg.body_rate_window = 0.2;
	restart_server();
	fd = client_connect();
	assert_int_equal(write(fd, head, sizeof head - 1),
	    (ssize_t)(sizeof head - 1));
	s = read_until_closed(fd);
	assert_answer(s, "HTTP/1.1 408 ", "{\"detail\":\"request body too "
	    "slow: under 1000 bytes/s for 0.2 s\"}");
	free(s);
	close(fd);
}

/* Windows in which the server itself held the body back do not count. */
static void
test_body_rate_spares_backpressure(void **state)
{
	static char req[200000];
	int n;
	char *s;

	(void)state;
	cfg.body_min_rate = 1000;
	cfg.body_rate_window = 0.2;
	restart_server();
	n = snprintf(req, sizeof req, "POST /sink HTTP/1.1\r\nHost: x\r\n"
	    AUTH "Content-Length: 150000\r\nConnection: close\r\n\r\n");
	memset(req + n, 'x', 150000);
	s = exchange(req, (size_t)n + 150000);
	assert_answer(s, "HTTP/1.1 200 ", "150000");
	free(s);
}

/* After an early answer the server reads and drops what the client still
 * sends, for a while: a while in all, not an idle while. */
static void
test_linger_has_an_end(void **state)
{
	static const char head[] = "POST /json HTTP/1.1\r\nHost: x\r\n"
	    "Content-Length: 1000000\r\n\r\n{";
	int fd, closed = 0;
	char buf[4096];

	(void)state;
	fd = client_connect();
	assert_int_equal(write(fd, head, sizeof head - 1),
	    (ssize_t)(sizeof head - 1));
	/* A byte every 0.2 s, for at most 10 s. */
	for (int i = 0; i < 50 && !closed; i++) {
		struct timeval tv = { 0, 200000 };
		struct event *guard = evtimer_new(base, guard_cb, NULL);
		ssize_t n;

		guard_fired = 0;
		evtimer_add(guard, &tv);
		while (!guard_fired)
			event_base_loop(base, EVLOOP_ONCE);
		event_free(guard);
		/* The answer, then the end of the server's half (it shut its
		 * side at once); only writes tell whether it still reads. */
		while ((n = read(fd, buf, sizeof buf)) > 0)
			;
		if (write(fd, "x", 1) < 0)
			closed = 1;
	}
	close(fd);
	assert_true(closed);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
		T(test_second_reply_is_dropped),
		T(test_bad_query_is_fixed_text),
		T(test_space_before_colon_is_refused),
		T(test_folded_header_is_refused),
		T(test_folded_header_in_pieces),
		T(test_unknown_paths_need_auth),
		T(test_connection_limit),
		T(test_head_deadline),
		T(test_body_min_rate),
		T(test_body_rate_spares_backpressure),
		T(test_linger_has_an_end),
#undef T
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
