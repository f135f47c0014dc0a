/*
 * The HTTP/1.1 client both programs use: libevent bufferevents for the
 * socket, http-parser (HTTP_RESPONSE) for the answer. sandboxd talks to the
 * Docker Engine API and to agents with it; the agent talks to streamable
 * HTTP MCP servers with it.
 *
 * Why not evhttp's client: in libevent 2.1 it needs the whole request body
 * in memory before sending and cannot reach a unix socket by address, and
 * the proxy must stream 1 GiB uploads and the Docker API lives on a unix
 * socket.
 *
 * Addresses are "unix:/path/to.sock" or "HOST:PORT" with a numeric host
 * ("localhost" is taken as 127.0.0.1); no name is ever resolved.
 *
 * Lifetime: http_client_start returns a request owned by the client code.
 * on_done runs exactly once (unless http_client_cancel came first), and the
 * request is freed right after on_done returns. Inside any callback the
 * request may be cancelled; nothing is touched after that. on_done never
 * runs inside http_client_start or another http_client_* call: failures
 * are reported from the loop. The answer may end the exchange before a
 * streamed request body is finished (an early 413, say): stop writing at
 * on_done.
 *
 * Like the server, the client writes to sockets whose peer may be gone:
 * the program must ignore SIGPIPE. Header values are never logged.
 */
#ifndef HTTP_CLIENT_H
#define HTTP_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"

struct event_base;
struct evbuffer;
struct http_client_request;

struct http_client_options {
	const char *addr;		/* where to connect */
	const char *method;		/* "GET", "POST", ... */
	const char *target;		/* "/containers/json?all=1" */
	const char *host;		/* Host header; NULL: "localhost" */
	/* Extra request headers as "Name: value", NULL-terminated; may be
	 * NULL. Content-Length / Transfer-Encoding / Host / Connection are
	 * set by the client (given here, they are left out). */
	const char *const *headers;
	/* A whole body sent with the request (copied); NULL for none. */
	const void *body;
	size_t body_len;
	/* Or a body the caller streams with http_client_write / _end:
	 * body_length is its Content-Length, or -1 for chunked. */
	int stream_body;
	int64_t body_length;
	/* Seconds without progress (connect, send, receive) before the
	 * request fails with 504; 0: 60. */
	double timeout;
	/* Buffered answers (no on_body) larger than this fail with 502;
	 * 0: 16 MiB. */
	size_t max_response;
};

struct http_client_callbacks {
	/* Status line and headers are in (read them with the accessors
	 * below). Optional. */
	void (*on_head)(struct http_client_request *r, int status, void *arg);
	/* A piece of the answer body. When NULL, the body is kept and read
	 * with http_client_body() in on_done. */
	void (*on_body)(struct http_client_request *r, const char *data,
	    size_t len, void *arg);
	/* The exchange is over: err is NULL when a complete answer came
	 * (whatever its status), else why not (502 cannot connect or broken
	 * answer, 504 timeout). Required. */
	void (*on_done)(struct http_client_request *r, const struct error *err,
	    void *arg);
	/* A streamed request body may take more (its output buffer drained
	 * below the low-water mark). Optional. */
	void (*on_drain)(struct http_client_request *r, void *arg);
};

/* Start a request; connecting happens on the loop. NULL with err (400)
 * only for a malformed address or options. */
struct http_client_request *http_client_start(struct event_base *base,
    const struct http_client_options *opts,
    const struct http_client_callbacks *cb, void *arg, struct error *err);

/* The answer, valid from on_head until the request is freed. */
int http_client_status(struct http_client_request *r);
const char *http_client_header(struct http_client_request *r,
    const char *name);
size_t http_client_header_count(struct http_client_request *r);
void http_client_header_at(struct http_client_request *r, size_t i,
    const char **name, const char **value);
/* The kept body (when no on_body callback). */
struct evbuffer *http_client_body(struct http_client_request *r);

/* Streamed request bodies. on_drain runs when the bytes queued but not
 * yet sent fall to HTTP_CLIENT_DRAIN_MARK; a caller bounds its memory by
 * writing only while http_client_pending() is below a mark of its own.
 * Writing more than a declared body_length, or ending short of it, fails
 * the exchange with 500. */
#define HTTP_CLIENT_DRAIN_MARK	(256 * 1024)
void http_client_write(struct http_client_request *r, const void *data,
    size_t len);
/* Moves the contents of buf. */
void http_client_write_buffer(struct http_client_request *r,
    struct evbuffer *buf);
/* Bytes of request body queued but not yet sent. */
size_t http_client_pending(struct http_client_request *r);
void http_client_end(struct http_client_request *r);

/* Backpressure on the answer body: stop / restart reading the socket. */
void http_client_pause(struct http_client_request *r);
void http_client_resume(struct http_client_request *r);

/* Abort and free; on_done is not called. 0 when there was nothing to
 * cancel (NULL, already cancelled, or on_done running). */
int http_client_cancel(struct http_client_request *r);
/* The arg given to http_client_start. */
void *http_client_arg(struct http_client_request *r);
/* A non-blocking socket connecting to addr (as in the options), for a
 * caller that speaks on it itself (a WebSocket relay), a unix socket
 * reached as every request reaches it (never through a symlink in its
 * place); -1 with err (400 bad address, 502 refused at once). */
int http_client_connect(const char *addr, struct error *err);

/*
 * For JSON APIs (Docker, MCP, agents): body (may be NULL) is sent as
 * application/json; done gets the status and the answer parsed as JSON
 * (NULL when the body was empty or not JSON), borrowed for the duration of
 * the call, or err when the exchange failed as for on_done. Returns the
 * request or NULL with err; cancel it with http_client_json_cancel (not
 * http_client_cancel, which would leave its context behind), after which
 * done is not called.
 */
typedef void (*http_client_json_cb)(int status, json_t *answer,
    const struct error *err, void *arg);
struct http_client_request *http_client_json(struct event_base *base,
    const char *addr, const char *method, const char *target,
    const char *const *headers, json_t *body, double timeout,
    http_client_json_cb done, void *arg, struct error *err);
void http_client_json_cancel(struct http_client_request *r);

#endif
