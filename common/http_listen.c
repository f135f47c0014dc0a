/*
 * The listening sockets of the HTTP server: TCP and unix, and what to do
 * with each connection they accept.
 *
 * Limits: past max_connections a new connection gets a fixed 503 and our
 * side is shut (read until the client closes, a fixed few at a time).
 * When accept itself fails for want of descriptors or memory, the
 * listening socket stays readable, and libevent would call
 * us again at once, forever: accepting pauses instead (from 50 ms,
 * doubling to 2 s while it keeps failing), and resumes early when one of
 * our connections closes. Every such line in the log is rate-limited.
 */
#include "http_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "log.h"
#include "timing.h"
#include "xmalloc.h"

#define BACKOFF_MIN	0.05	/* seconds */
#define BACKOFF_MAX	2.0

size_t
http_default_max_connections(void)
{
	struct rlimit rl;
	size_t n = 1024;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 4 < n)
		n = rl.rlim_cur / 4;
	return n > 0 ? n : 1;
}

static void
set_accepting(struct http_server *server, int on)
{
	for (size_t i = 0; i < server->nlisteners; i++) {
		if (on)
			evconnlistener_enable(server->listeners[i].lev);
		else
			evconnlistener_disable(server->listeners[i].lev);
	}
}

static void
backoff_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_server *server = arg;

	(void)fd;
	(void)what;
	server->accept_paused = 0;
	set_accepting(server, 1);
}

void
http_listeners_init(struct http_server *server)
{
	struct log_rate rate = LOG_RATE_INIT(10, 1);

	server->backoff_ev = evtimer_new(server->base, backoff_cb, server);
	server->backoff = BACKOFF_MIN;
	server->accept_log = rate;
	server->full_log = rate;
	server->slow_log = rate;
}

void
http_listeners_conn_closed(struct http_server *server)
{
	if (server->accept_paused) {
		evtimer_del(server->backoff_ev);
		backoff_cb(-1, 0, server);
	}
}

/* A refused socket's end: whatever the client still sends is read and
 * dropped until it closes, or for REFUSED_SECONDS at most. */
static void
refused_close(struct http_refused *r)
{
	event_free(r->ev);
	r->ev = NULL;
	evutil_closesocket(r->fd);
	r->fd = -1;
}

static void
refused_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_refused *r = arg;
	char sink[4096];
	ssize_t n;

	if (what & EV_TIMEOUT) {
		refused_close(r);
		return;
	}
	for (int i = 0; i < 16; i++) {
		n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
		if (n > 0)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		refused_close(r);
		return;
	}
}

/* Over the limit: a fixed answer, written without waiting (a fresh socket
 * has room for it), and our side shut. A request that arrives after the
 * close would make the kernel reset the connection, and a reset can drop
 * the answer from the client's buffer before it reads it: so the socket
 * is read until the client closes, for up to REFUSED_SECONDS, in one of
 * HTTP_REFUSED_MAX places (when all are taken, closed at once, as
 * before; refusing must not hold more than a fixed few descriptors). */
#define REFUSED_SECONDS	2

static void
refuse_full(struct http_server *server, evutil_socket_t fd, const char *peer)
{
	static const char body[] = "{\"detail\":\"too many connections; "
	    "retry later\"}";
	struct timeval tv = { REFUSED_SECONDS, 0 };
	char sink[4096], answer[256];
	int n;

	log_rate_msg(&server->full_log, LOG_WARN, "http: %zu connections, the "
	    "limit: refusing %s", server->nconns, peer);
	for (int i = 0; i < 16 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0;
	    i++)
		;
	n = snprintf(answer, sizeof answer, "HTTP/1.1 503 Service Unavailable"
	    "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
	    "Connection: close\r\n\r\n%s", sizeof body - 1, body);
	if (send(fd, answer, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		log_debug("http: cannot refuse %s: %s", peer, strerror(errno));
		evutil_closesocket(fd);
		return;
	}
	for (size_t i = 0; i < HTTP_REFUSED_MAX; i++) {
		struct http_refused *r = &server->refused[i];

		if (r->ev != NULL)
			continue;
		shutdown(fd, SHUT_WR);
		evutil_make_socket_nonblocking(fd);
		r->fd = fd;
		r->ev = event_new(server->base, fd, EV_READ | EV_PERSIST,
		    refused_cb, r);
		event_add(r->ev, &tv);
		return;
	}
	evutil_closesocket(fd);
}

static void
accept_cb(struct evconnlistener *lev, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	struct http_server *server = arg;
	char peer[64];
	int one = 1;

	(void)lev;
	(void)salen;
	server->backoff = BACKOFF_MIN;
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)sa;
		char ip[INET_ADDRSTRLEN];

		inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof ip);
		snprintf(peer, sizeof peer, "%s:%u", ip, ntohs(sin->sin_port));
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	} else if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)sa;
		char ip[INET6_ADDRSTRLEN];

		inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof ip);
		snprintf(peer, sizeof peer, "[%s]:%u", ip,
		    ntohs(sin6->sin6_port));
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	} else {
		snprintf(peer, sizeof peer, "unix");
	}
	if (server->nconns >= server->cfg.max_connections) {
		refuse_full(server, fd, peer);
		return;
	}
	http_conn_open(server, fd, peer);
}

static void
accept_error_cb(struct evconnlistener *lev, void *arg)
{
	struct http_server *server = arg;
	int e = EVUTIL_SOCKET_ERROR();
	struct timeval tv;

	(void)lev;
	if (e != EMFILE && e != ENFILE && e != ENOBUFS && e != ENOMEM) {
		/* Something of that one connection: the next may do. */
		log_rate_msg(&server->accept_log, LOG_WARN, "http: accept "
		    "failed: %s", strerror(e));
		return;
	}
	/* Keep serving the connections we have; try again later. */
	log_rate_msg(&server->accept_log, LOG_WARN, "http: accept failed: %s "
	    "(%zu connections open): not accepting for %.2f s", strerror(e),
	    server->nconns, server->backoff);
	set_accepting(server, 0);
	server->accept_paused = 1;
	tv = timing_timeval(server->backoff);
	evtimer_add(server->backoff_ev, &tv);
	server->backoff *= 2;
	if (server->backoff > BACKOFF_MAX)
		server->backoff = BACKOFF_MAX;
}

static int
listen_unix(struct http_server *server, const char *path, struct error *err)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct evconnlistener *lev;
	struct http_listener *l;
	struct stat st;
	mode_t old_mask;
	int fd, rc;

	if (strlen(path) >= sizeof sun.sun_path) {
		error_set(err, 400, "unix socket path too long: %s", path);
		return -1;
	}
	strcpy(sun.sun_path, path);
	/* A socket left by an earlier run that died; never remove a file
	 * that is not a socket. */
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			error_set(err, 409, "%s exists and is not a socket", path);
			return -1;
		}
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		error_set_errno(err, 500, errno, "socket");
		return -1;
	}
	/* Whoever can reach the socket still needs the token, so it is
	 * 0666; the mode comes from the umask at bind, never from a chmod by
	 * name afterwards, which a peer able to write the directory could
	 * point at another file by then. Listening happens at start, before
	 * any thread that creates files runs. */
	old_mask = umask(0111);
	rc = bind(fd, (struct sockaddr *)&sun, sizeof sun);
	umask(old_mask);
	if (rc < 0) {
		error_set_errno(err, 500, errno, "cannot bind %s", path);
		close(fd);
		return -1;
	}
	lev = evconnlistener_new(server->base, accept_cb, server,
	    LEV_OPT_CLOSE_ON_FREE, 1024, fd);
	if (lev == NULL) {
		error_set_errno(err, 500, errno, "cannot listen on %s", path);
		close(fd);
		unlink(path);
		return -1;
	}
	evconnlistener_set_error_cb(lev, accept_error_cb);
	server->listeners = xreallocarray(server->listeners,
	    server->nlisteners + 1, sizeof *server->listeners);
	l = &server->listeners[server->nlisteners++];
	l->lev = lev;
	l->unix_path = xstrdup(path);
	return 0;
}

static int
listen_tcp(struct http_server *server, const char *addr, struct error *err)
{
	struct sockaddr_storage ss;
	int sslen = sizeof ss;
	struct evconnlistener *lev;
	struct http_listener *l;
	const char *colon = strrchr(addr, ':');
	char *spec;
	int any_port;

	if (colon == NULL) {
		error_set(err, 400, "listen address %s is not HOST:PORT or "
		    "unix:/path", addr);
		return -1;
	}
	/* Resolve no names: a static binary has no NSS, and a listen
	 * address should be explicit anyway. libevent refuses port 0 (any
	 * free port), so that one is parsed as 1 and set back. */
	any_port = strcmp(colon, ":0") == 0;
	if (strncmp(addr, "localhost:", 10) == 0)
		spec = xasprintf("127.0.0.1%s", any_port ? ":1" : colon);
	else
		spec = xasprintf("%.*s%s", (int)(colon - addr), addr,
		    any_port ? ":1" : colon);
	memset(&ss, 0, sizeof ss);
	if (evutil_parse_sockaddr_port(spec, (struct sockaddr *)&ss,
	    &sslen) < 0 || (colon[1] < '0' || colon[1] > '9')) {
		error_set(err, 400, "bad listen address %s (want HOST:PORT with "
		    "a numeric host, or unix:/path)", addr);
		free(spec);
		return -1;
	}
	free(spec);
	if (any_port && ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = 0;
	else if (any_port)
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	lev = evconnlistener_new_bind(server->base, accept_cb, server,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
	    1024, (struct sockaddr *)&ss, sslen);
	if (lev == NULL) {
		error_set_errno(err, 500, errno, "cannot listen on %s", addr);
		return -1;
	}
	evconnlistener_set_error_cb(lev, accept_error_cb);
	sslen = sizeof ss;
	if (getsockname(evconnlistener_get_fd(lev), (struct sockaddr *)&ss,
	    (socklen_t *)&sslen) == 0) {
		if (ss.ss_family == AF_INET)
			server->bound_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else if (ss.ss_family == AF_INET6)
			server->bound_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	server->listeners = xreallocarray(server->listeners,
	    server->nlisteners + 1, sizeof *server->listeners);
	l = &server->listeners[server->nlisteners++];
	l->lev = lev;
	l->unix_path = NULL;
	return 0;
}

int
http_server_listen(struct http_server *server, const char *addr,
    struct error *err)
{
	if (strncmp(addr, "unix:", 5) == 0)
		return listen_unix(server, addr + 5, err);
	return listen_tcp(server, addr, err);
}

int
http_server_bound_port(struct http_server *server)
{
	return server->bound_port;
}


/* Stop listening; unix socket files are removed. */
void
http_listeners_close(struct http_server *server)
{
	for (size_t i = 0; i < server->nlisteners; i++) {
		evconnlistener_free(server->listeners[i].lev);
		if (server->listeners[i].unix_path != NULL) {
			unlink(server->listeners[i].unix_path);
			free(server->listeners[i].unix_path);
		}
	}
	free(server->listeners);
	server->listeners = NULL;
	server->nlisteners = 0;
	for (size_t i = 0; i < HTTP_REFUSED_MAX; i++) {
		if (server->refused[i].ev != NULL)
			refused_close(&server->refused[i]);
	}
}
