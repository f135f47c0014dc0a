/*
 * Time limits of the HTTP server's connections (http_server.c) that an
 * idle timeout cannot give: a whole request head within header_timeout, a
 * minimum body rate, and an end to lingering. One timer per connection
 * (conn->limit_ev) runs whichever applies.
 */
#include "http_internal.h"

#include <event2/event.h>

#include "log.h"
#include "timing.h"

/*
 * A head must be complete within header_timeout of its first byte,
 * however the bytes are spaced; then, while the server reads a body, each
 * window of body_rate_window seconds must bring body_min_rate bytes a
 * second. A window in which we paused the body ourselves (backpressure)
 * does not count.
 */
static void
limit_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_conn *conn = arg;
	const struct http_server_config *cfg = &conn->server->cfg;
	struct http_request *req = conn->req;
	size_t want;

	(void)fd;
	(void)what;
	if (conn->limit == LIMIT_LINGER) {
		http_conn_free(conn);
		return;
	}
	if (conn->limit == LIMIT_HEAD) {
		log_rate_msg(&conn->server->slow_log, LOG_INFO, "http %s: no "
		    "complete request head in %g s: closed", conn->peer,
		    cfg->header_timeout);
		http_conn_refuse(conn, 408, "request head not complete in "
		    "time");
		return;
	}
	want = (size_t)((double)cfg->body_min_rate * cfg->body_rate_window);
	if (conn->window_paused || conn->body_paused ||
	    conn->window_bytes >= want) {
		conn->window_bytes = 0;
		conn->window_paused = conn->body_paused;
		return;
	}
	log_rate_msg(&conn->server->slow_log, LOG_INFO, "http %s: request "
	    "body under %zu bytes/s for %g s: closed", conn->peer,
	    cfg->body_min_rate, cfg->body_rate_window);
	if (req != NULL && !req->dispatched) {
		struct error err;

		error_set(&err, 408, "request body too slow: under %zu bytes/s "
		    "for %g s", cfg->body_min_rate, cfg->body_rate_window);
		http_request_reject(req, &err);
		return;
	}
	/* Its handler reads the body and owns the answer: it hears of the
	 * cut as of a client gone. */
	http_conn_free(conn);
}

void
http_conn_limit_init(struct http_conn *conn)
{
	conn->limit_ev = event_new(conn->server->base, -1, 0, limit_cb, conn);
}

/* The head deadline runs from the first byte of a request (blank lines
 * before one included, which http-parser skips without a callback). */
void
http_conn_limit_head(struct http_conn *conn)
{
	struct timeval tv;

	if (conn->limit == LIMIT_HEAD)
		return;
	tv = timing_timeval(conn->server->cfg.header_timeout);
	conn->limit = LIMIT_HEAD;
	event_del(conn->limit_ev);
	event_assign(conn->limit_ev, conn->server->base, -1, 0, limit_cb, conn);
	event_add(conn->limit_ev, &tv);
}

void
http_conn_limit_body(struct http_conn *conn)
{
	const struct http_server_config *cfg = &conn->server->cfg;
	struct timeval tv;

	http_conn_limit_stop(conn);
	if (cfg->body_min_rate == 0)
		return;
	tv = timing_timeval(cfg->body_rate_window);
	conn->limit = LIMIT_BODY;
	conn->window_bytes = 0;
	conn->window_paused = 0;
	event_assign(conn->limit_ev, conn->server->base, -1, EV_PERSIST,
	    limit_cb, conn);
	event_add(conn->limit_ev, &tv);
}

/* Lingering ends HTTP_LINGER_SECONDS after it began, however the client
 * keeps sending: the read timeout alone is an idle one. */
void
http_conn_limit_linger(struct http_conn *conn)
{
	struct timeval tv = { HTTP_LINGER_SECONDS, 0 };

	http_conn_limit_stop(conn);
	conn->limit = LIMIT_LINGER;
	event_assign(conn->limit_ev, conn->server->base, -1, 0, limit_cb, conn);
	event_add(conn->limit_ev, &tv);
}

void
http_conn_limit_stop(struct http_conn *conn)
{
	conn->limit = LIMIT_NONE;
	event_del(conn->limit_ev);
}
