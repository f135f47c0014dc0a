/*
 * The HTTP/1.1 server both programs use: libevent bufferevents for the
 * sockets, Debian's http-parser for the wire format, jansson for answers.
 *
 * Why not evhttp: libevent 2.1 (Debian 12) reads a request's whole body into
 * memory before any callback runs and has no hook between the headers and the
 * body (evhttp_set_newreqcb arrives in 2.2), so a 1 GiB upload could not be
 * streamed to disk or through the proxy, and its 413 is not our JSON shape.
 *
 * Model: a route table maps method + path (exact or prefix) to a handler.
 * Ordinary routes get their handler called once the body is complete and held
 * in memory (bounded by the route's limit, else 413). Routes flagged
 * HTTP_ROUTE_STREAM_BODY get their handler called as soon as the headers are
 * in; the handler then takes the body piece by piece with
 * http_request_on_body() and may pause the socket for backpressure.
 *
 * Lifetime: the server owns each struct http_request. A handler must end every
 * request with exactly one reply (http_reply*, or http_reply_start ...
 * http_reply_end). If the client goes away first, the close callback (if set)
 * runs, later replies become no-ops, and the request is freed by that reply.
 * So asynchronous work may always finish by replying, with no use-after-free.
 */
#ifndef HTTP_H
#define HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"

struct bufferevent;
struct event_base;
struct evbuffer;
struct http_server;
struct http_request;

enum http_verb {
	HTTP_METHOD_GET = 1 << 0,
	HTTP_METHOD_HEAD = 1 << 1,
	HTTP_METHOD_POST = 1 << 2,
	HTTP_METHOD_PUT = 1 << 3,
	HTTP_METHOD_DELETE = 1 << 4,
	HTTP_METHOD_PATCH = 1 << 5,
	HTTP_METHOD_OPTIONS = 1 << 6,
};
#define HTTP_METHOD_ANY (HTTP_METHOD_GET | HTTP_METHOD_HEAD | HTTP_METHOD_POST | \
    HTTP_METHOD_PUT | HTTP_METHOD_DELETE | HTTP_METHOD_PATCH | HTTP_METHOD_OPTIONS)

enum http_match {
	HTTP_MATCH_EXACT,
	HTTP_MATCH_PREFIX,	/* path equals the prefix or continues after it */
	/* The request carries the header named by the route's path, whatever
	 * its path: such routes are looked at before every path route (a
	 * router keyed on a header, as E2B's sandbox traffic is). */
	HTTP_MATCH_HEADER,
};

#define HTTP_ROUTE_STREAM_BODY	0x1	/* handler runs at headers, reads body itself */
#define HTTP_ROUTE_NO_AUTH	0x2	/* no bearer token needed */

typedef void (*http_handler)(struct http_request *req, void *arg);

struct http_route {
	unsigned methods;		/* mask of enum http_verb */
	const char *path;
	enum http_match match;
	unsigned flags;
	http_handler handler;
	size_t max_body;		/* 0: the server's default limit */
};

struct http_server_config {
	const struct http_route *routes;	/* not copied; must outlive the server */
	size_t nroutes;
	void *handler_arg;			/* passed to every handler */
	const char *token;			/* bearer token; NULL: no auth */
	int auth_status;			/* 401 or 403 */
	const char *auth_missing_detail;	/* detail when no token is sent */
	const char *auth_wrong_detail;		/* detail when the token is wrong */
	const char *alias_prefix;		/* e.g. "/fastapi": served as if absent */
	size_t max_body;			/* default body limit of buffered routes */
	int access_log;				/* log one line per request */
	const char *server_name;		/* "Server:" header */
	/* Limits on what one client may hold (see http_listen.c and the
	 * defaults below). 0 takes the default, but body_min_rate 0 means
	 * no minimum. */
	size_t max_connections;			/* open at once; more get 503 */
	double header_timeout;			/* seconds for a whole head */
	size_t body_min_rate;			/* bytes/s over each window */
	double body_rate_window;		/* seconds */
};

/*
 * Defaults of the limits. A request head is a few hundred bytes sent in one
 * write; 30 s for all of it is generous on the slowest link, while a client
 * dripping a byte at a time is cut at 30 s whatever its pace. A body must
 * bring 1 KiB/s averaged over 30 s (slower than any real upload; a 56k
 * modem does 7) for as long as the server reads it: holding a connection
 * with a trickled body then costs real bandwidth, never mere patience.
 */
#define HTTP_DEFAULT_HEADER_TIMEOUT	30
#define HTTP_DEFAULT_BODY_MIN_RATE	1024
#define HTTP_DEFAULT_BODY_RATE_WINDOW	30
/* The default connection limit: a quarter of the soft limit of open files
 * (each connection takes one, a proxied one two, and files, pipes and
 * Docker calls need theirs), at most 1024. */
size_t http_default_max_connections(void);

/* Route lookup, exposed for unit tests. Returns the route or NULL; sets
 * *method_mismatch when a route has the path but not the method. */
const struct http_route *http_route_find(const struct http_route *routes,
    size_t nroutes, unsigned method, const char *path, int *method_mismatch);
/* The first HTTP_MATCH_HEADER route with the method whose header the
 * request carries (has(arg, name) tells), or NULL. */
const struct http_route *http_route_find_header(
    const struct http_route *routes, size_t nroutes, unsigned method,
    int (*has)(void *arg, const char *name), void *arg);

struct http_server *http_server_new(struct event_base *base,
    const struct http_server_config *config);
/* ADDR is "HOST:PORT", "[V6]:PORT" or "unix:/path". */
int http_server_listen(struct http_server *server, const char *addr,
    struct error *err);
/* The TCP port actually bound by the last listen (for port 0). */
int http_server_bound_port(struct http_server *server);
/* Stop accepting and close idle connections; busy ones finish. */
void http_server_close_listeners(struct http_server *server);
void http_server_free(struct http_server *server);
size_t http_server_connections(struct http_server *server);

/* Request accessors. */
enum http_verb http_request_method(struct http_request *req);
const char *http_request_method_name(struct http_request *req);
/* Decoded path, alias prefix removed. */
const char *http_request_path(struct http_request *req);
/* The target exactly as the client sent it (path and query), alias removed. */
const char *http_request_raw_target(struct http_request *req);
const char *http_request_raw_query(struct http_request *req);	/* NULL: none */
/* Decoded query parameter; NULL if absent. The value holds no NUL byte
 * (requests carrying one in the query are refused with 400). */
const char *http_request_query(struct http_request *req, const char *name);
const char *http_request_header(struct http_request *req, const char *name);
size_t http_request_header_count(struct http_request *req);
void http_request_header_at(struct http_request *req, size_t i,
    const char **name, const char **value);
/* Content-Length of the request, -1 when chunked or absent. */
int64_t http_request_content_length(struct http_request *req);
const char *http_request_peer(struct http_request *req);
/* Buffered body (ordinary routes). */
struct evbuffer *http_request_body(struct http_request *req);
/* Parse the buffered body as a JSON object; 400 on anything else, 413 if
 * its structure would cost too much memory (http_json.c). New ref. */
json_t *http_request_json(struct http_request *req, struct error *err);
/* The same for any text: what http_request_json does with the body. */
json_t *http_json_parse(const char *text, size_t len, struct error *err);
/* Whether the client is still there to receive a reply. */
int http_request_connected(struct http_request *req);

/* Streaming bodies (HTTP_ROUTE_STREAM_BODY routes).
 * data_cb gets each piece; returning -1 stops reading: the handler has
 * replied (typically an error) and the rest of the body is discarded by
 * closing the connection after the reply. end_cb runs once the body is
 * complete. */
typedef int (*http_body_cb)(struct http_request *req, const char *data,
    size_t len, void *arg);
typedef void (*http_event_cb)(struct http_request *req, void *arg);
void http_request_on_body(struct http_request *req, http_body_cb data_cb,
    http_event_cb end_cb, void *arg);
void http_request_pause_body(struct http_request *req);
void http_request_resume_body(struct http_request *req);

/* The client disconnected before the reply was complete. */
void http_request_on_close(struct http_request *req, http_event_cb cb,
    void *arg);
/* Output has drained below the low-water mark: write more. */
void http_request_on_drain(struct http_request *req, http_event_cb cb,
    void *arg);

/* Replies. Headers added before the reply starts go out with it. */
void http_reply_add_header(struct http_request *req, const char *name,
    const char *value);
void http_reply(struct http_request *req, int status, const char *content_type,
    const void *body, size_t len);
/* Takes the contents of buf (drained). */
void http_reply_buffer(struct http_request *req, int status,
    const char *content_type, struct evbuffer *buf);
/* Steals the reference to json. */
void http_reply_json(struct http_request *req, int status, json_t *json);
void http_reply_error(struct http_request *req, int status, const char *fmt,
    ...) __attribute__((format(printf, 3, 4)));
void http_reply_err(struct http_request *req, const struct error *err);
/* Status 204 with no body. */
void http_reply_empty(struct http_request *req, int status);

/* Switching protocols (a WebSocket). http_request_is_upgrade: the request
 * is complete, bodiless and asks for an upgrade ("Connection: upgrade" and
 * an Upgrade header), so that nothing after its head is HTTP.
 * http_reply_upgrade, only for such a request: answer 101 with the given
 * header lines ("Name: value", NULL-terminated) and hand the connection
 * over. cb then runs from the loop, never inside this call, with the
 * connection's bufferevent: callbacks, timeouts and watermarks cleared,
 * its input holding what the client sent after the request, and from
 * then on the caller's to free (the server forgets it). If the client
 * leaves first, cb runs with NULL. req is freed either way. */
typedef void (*http_upgrade_cb)(struct bufferevent *bev, void *arg);
int http_request_is_upgrade(struct http_request *req);
void http_reply_upgrade(struct http_request *req, const char *const *headers,
    http_upgrade_cb cb, void *arg);

/* Streamed reply: content_length -1 means chunked transfer encoding. */
void http_reply_start(struct http_request *req, int status,
    const char *content_type, int64_t content_length);
void http_reply_write(struct http_request *req, const void *data, size_t len);
/* Moves the contents of buf into the reply. */
void http_reply_write_buffer(struct http_request *req, struct evbuffer *buf);
/* Bytes queued but not yet written to the socket. */
size_t http_reply_pending(struct http_request *req);
void http_reply_end(struct http_request *req);
/* End a streamed reply that cannot be completed (a read error halfway):
 * the connection closes without the final chunk, so the client sees a cut
 * answer rather than a complete-looking short one. */
void http_reply_abort(struct http_request *req);

const char *http_status_reason(int status);
/* Constant-time comparison of a presented token against the expected one. */
int http_token_equal(const char *presented, const char *expected);
/* The value of cookie name in a Cookie header (may be NULL), copied;
 * NULL if absent. */
char *http_cookie_value(const char *header, const char *name);
/* Percent-decode; -1 on a bad escape or a decoded NUL. plus_space maps '+'. */
int http_percent_decode(const char *in, size_t len, int plus_space, char **out);

#endif
