/* Shared by the server's files (http_listen.c accepts, http_server.c runs
 * connections, http_parse.c reads requests, http_limits.c times them,
 * http_request.c serves them to handlers, http_reply.c answers); the
 * client reuses struct http_headers and struct http_header_reader
 * (http_headers.c). */
#ifndef HTTP_INTERNAL_H
#define HTTP_INTERNAL_H

#include <sys/queue.h>
#include <sys/time.h>

#include <event2/util.h>
#include <http_parser.h>

#include "http.h"
#include "log.h"

struct bufferevent;
struct evbuffer;
struct evconnlistener;
struct event;

struct http_header {
	char *name;
	char *value;
};

struct http_headers {
	struct http_header *v;
	size_t n, cap;
};

/* Reads header lines from http-parser's on_header_field and
 * on_header_value, which may come in several pieces each, into a struct
 * http_headers. Part of its owner: http_header_reader_init, then
 * http_header_reader_free. */
struct http_header_reader {
	struct evbuffer *field;		/* header name being read */
	struct evbuffer *value;		/* header value being read */
	int in_value;			/* last header piece was a value */
};

/* Why a header could not be stored. */
enum http_header_fault {
	HTTP_HEADER_OK,
	HTTP_HEADER_TOO_MANY,		/* h already held max headers */
	HTTP_HEADER_NUL,		/* a NUL byte in its name or value */
};

struct http_listener {
	struct evconnlistener *lev;
	char *unix_path;	/* unlinked when the listener goes */
};

#define HTTP_REFUSED_MAX	16	/* refused sockets read before closing */

struct http_server {
	struct event_base *base;
	struct http_server_config cfg;
	struct http_listener *listeners;
	size_t nlisteners;
	int bound_port;
	LIST_HEAD(, http_conn) conns;
	size_t nconns;
	size_t nrequests;		/* begun and not yet freed */
	struct http_request *retired;	/* answered, freed by retire_ev */
	struct event *retire_ev;
	/* Accepting paused after running out of descriptors (http_listen.c):
	 * resumed by backoff_ev, or as soon as a connection closes. */
	struct event *backoff_ev;
	double backoff;			/* seconds of the next pause */
	int accept_paused;
	/* Refused at the limit, answered, read until the client closes
	 * (http_listen.c): a fixed few, so refusing costs no more. */
	struct http_refused {
		evutil_socket_t fd;
		struct event *ev;
	} refused[HTTP_REFUSED_MAX];
	/* Lines clients can cause as fast as they like. */
	struct log_rate accept_log;	/* accept failures */
	struct log_rate full_log;	/* refused at the connection limit */
	struct log_rate slow_log;	/* cut for a slow head or body */
};

/* Owned by the server; freed when the socket closes and no request of it
 * waits to be answered. */
struct http_conn {
	struct http_server *server;
	struct bufferevent *bev;
	http_parser parser;
	char peer[64];
	struct http_request *req;	/* request being read or answered */
	struct http_header_reader hr;	/* into req->headers */
	struct event *resume_ev;	/* parse buffered input after a pause */
	/* The head deadline, then the body's rate windows, or the end of
	 * lingering (http_limits.c). */
	struct event *limit_ev;
	enum { LIMIT_NONE, LIMIT_HEAD, LIMIT_BODY, LIMIT_LINGER } limit;
	size_t window_bytes;		/* body bytes in this rate window */
	int window_paused;		/* we paused the body in this window */
	int waiting_reply;		/* parser paused until the reply is done */
	int body_paused;		/* handler asked for backpressure */
	int closing;			/* close once output is flushed */
	int linger;			/* unread body: drain it before closing */
	int discarding;			/* lingering: reading only to drop */
	size_t discarded;
	int in_parse;			/* inside http_parser_execute */
	const char *parse_start;	/* of the bytes being parsed */
	char parse_last;		/* last byte parsed before them */
	const char *fault;		/* why a callback stopped the parser */
	http_upgrade_cb upgrade_cb;	/* set: a 101 went out, hand it over */
	void *upgrade_arg;
	LIST_ENTRY(http_conn) entry;
};

enum http_reply_state {
	REPLY_NONE,
	REPLY_STREAMING,
	REPLY_DONE,
};

/* Owned by the server; see the lifetime rules in http.h. */
struct http_request {
	struct http_conn *conn;		/* NULL once the client is gone */
	struct http_server *server;
	const struct http_route *route;
	enum http_verb method;
	const char *method_name;
	int http_major, http_minor;
	char *url;			/* as sent */
	char *raw_target;		/* as sent, alias prefix removed */
	char *raw_query;		/* points into raw_target, or NULL */
	char *path;			/* decoded, alias prefix removed */
	struct http_headers query;
	struct http_headers headers;
	int64_t content_length;
	int keepalive;
	struct evbuffer *body;
	size_t body_received;		/* bytes of body read, streamed or not */
	size_t body_limit;
	int rejected;			/* answered before the body was read */
	int dispatched;			/* handler has run */
	int body_complete;
	int upgrade;			/* asks to switch protocols */
	int body_aborted;		/* body callback said stop */

	http_body_cb body_cb;
	http_event_cb body_end_cb;
	void *body_arg;
	http_event_cb close_cb;
	void *close_arg;
	http_event_cb drain_cb;
	void *drain_arg;

	struct http_headers out_headers;
	enum http_reply_state reply;
	int reply_chunked;
	int reply_close;		/* end the connection after this reply */
	int status;
	uint64_t bytes_out;
	double started;			/* monotonic seconds */
	struct http_request *retired_next;
};

/* A request whose body was at least this large trims the heap when freed. */
#define HTTP_TRIM_AFTER		(1024 * 1024)

/* http_headers.c */
void http_headers_add(struct http_headers *h, char *name, char *value);
const char *http_headers_get(const struct http_headers *h, const char *name);
void http_headers_clear(struct http_headers *h);

void http_header_reader_init(struct http_header_reader *hr);
void http_header_reader_free(struct http_header_reader *hr);
/* A new message: forget what was half read. */
void http_header_reader_reset(struct http_header_reader *hr);
/* A piece of a name. The first piece ends the header before it, which
 * goes into h (its value without trailing blanks) unless h holds max
 * headers already or the header has a NUL byte. */
enum http_header_fault http_header_reader_field(struct http_header_reader *hr,
    const char *at, size_t len, struct http_headers *h, size_t max);
void http_header_reader_value(struct http_header_reader *hr, const char *at,
    size_t len);
/* The head is complete: the last header goes into h, as above. */
enum http_header_fault http_header_reader_end(struct http_header_reader *hr,
    struct http_headers *h, size_t max);

/* http_server.c: a new connection on fd, which it now owns; peer names
 * it in the log. */
void http_conn_open(struct http_server *server, evutil_socket_t fd,
    const char *peer);
/* http_listen.c */
void http_listeners_init(struct http_server *server);
void http_listeners_close(struct http_server *server);
/* A connection closed: accepting paused for want of descriptors may go on. */
void http_listeners_conn_closed(struct http_server *server);

/* http_server.c: end conn now, telling a request in flight. */
void http_conn_free(struct http_conn *conn);
/* End a connection whose request cannot go on, with a fixed answer (the
 * request may not have passed auth): status and detail, both ours. */
void http_conn_refuse(struct http_conn *conn, int status,
    const char *detail);

/* http_parse.c: http-parser's callbacks, conn in parser.data. */
extern const http_parser_settings http_parse_settings;
/* Answer req before its body was read, and close the connection after. */
void http_request_reject(struct http_request *req, const struct error *err);
/* http_server.c: an idle limit on reading (0: none). */
void http_conn_set_read_timeout(struct http_conn *conn, int seconds);

/* http_limits.c: the deadline of a head (from its first byte), the
 * minimum rate of a body, the end of lingering; stop: none. init makes
 * conn->limit_ev. */
#define HTTP_LINGER_SECONDS	2	/* at most, reading to drop a body */
void http_conn_limit_init(struct http_conn *conn);
void http_conn_limit_head(struct http_conn *conn);
void http_conn_limit_body(struct http_conn *conn);
void http_conn_limit_linger(struct http_conn *conn);
void http_conn_limit_stop(struct http_conn *conn);

/* Called by the reply code once a reply is fully queued. */
void http_conn_reply_done(struct http_request *req);
/* A 101 is queued on conn (its request retired): hand the connection to
 * cb from the loop. */
void http_conn_upgrade(struct http_conn *conn, http_upgrade_cb cb,
    void *arg);
/* The request has its reply: REPLY_DONE, detached from its connection,
 * freed on the next loop turn. */
void http_request_retire(struct http_request *req);
void http_request_free(struct http_request *req);

#endif
