/* See harness.h. Reads the server's internals (http_internal.h) only to
 * know when it is done with a connection. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "http_internal.h"
#include "log.h"

#define GUARD_SECONDS	10

static struct event_base *base;
static struct http_server *server;
static char dir[64];
static char sock_path[128];

static void
cleanup(void)
{
	if (server != NULL)
		http_server_free(server);
	server = NULL;
	rmdir(dir);
}

struct event_base *
harness_base(void)
{
	if (base == NULL) {
		signal(SIGPIPE, SIG_IGN);
		/* Refusals and cut clients are expected by the thousand. */
		log_set_level(LOG_ERROR);
		base = event_base_new();
	}
	return base;
}

void
harness_start(const struct http_server_config *cfg)
{
	struct error err;
	char addr[160];

	if (server != NULL)
		return;
	snprintf(dir, sizeof dir, "/tmp/fuzz-http-XXXXXX");
	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		abort();
	}
	snprintf(sock_path, sizeof sock_path, "%s/s.sock", dir);
	snprintf(addr, sizeof addr, "unix:%s", sock_path);
	server = http_server_new(harness_base(), cfg);
	if (http_server_listen(server, addr, &err) < 0) {
		fprintf(stderr, "harness: %s\n", err.msg);
		abort();
	}
	atexit(cleanup);
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
}

/* One loop turn, waiting at most a millisecond for something to happen. */
static void
turn(void)
{
	static struct event *tick;
	struct timeval tv = { 0, 1000 };

	if (tick == NULL)
		tick = evtimer_new(base, tick_cb, NULL);
	evtimer_add(tick, &tv);
	event_base_loop(base, EVLOOP_ONCE);
	evtimer_del(tick);
}

/* Read what the server sent; 1 at end of stream. With HARNESS_SHOW set
 * in the environment, the answers go to stderr (to see what an input
 * does when replaying it). */
static int
drain(int fd, size_t *got)
{
	static int show = -1;
	char buf[65536];
	ssize_t n;

	if (show < 0)
		show = getenv("HARNESS_SHOW") != NULL;
	while ((n = read(fd, buf, sizeof buf)) > 0) {
		if (show)
			fwrite(buf, 1, (size_t)n, stderr);
		*got += (size_t)n;
	}
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Nothing in flight: every connection waits for bytes from its client
 * (or only for its close), and no answered request awaits freeing. */
static int
server_idle(void)
{
	struct http_conn *c;
	size_t attached = 0;

	if (server->retired != NULL)
		return 0;
	LIST_FOREACH(c, &server->conns, entry) {
		struct evbuffer *in = bufferevent_get_input(c->bev);
		struct evbuffer *out = bufferevent_get_output(c->bev);

		if (c->req != NULL)
			attached++;
		if (evbuffer_get_length(out) > 0)
			return 0;
		if (c->closing || c->discarding)
			continue;
		if (evbuffer_get_length(in) > 0 || c->waiting_reply ||
		    c->body_paused)
			return 0;
	}
	return server->nrequests == attached;
}

static void
guard(double start, const char *what)
{
	if (now() - start > GUARD_SECONDS) {
		fprintf(stderr, "harness: the server did not %s within %d s\n",
		    what, GUARD_SECONDS);
		abort();
	}
}

size_t
harness_exchange(const uint8_t *data, size_t len, size_t piece)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	size_t sent = 0, got = 0;
	int fd, eof = 0;
	double start;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	strcpy(sun.sun_path, sock_path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof sun) < 0) {
		perror("harness: connect");
		abort();
	}
	fcntl(fd, F_SETFL, O_NONBLOCK);
	start = now();
	while (sent < len && !eof) {
		size_t want = len - sent;
		ssize_t n;

		if (piece > 0 && want > piece)
			want = piece;
		n = write(fd, data + sent, want);
		if (n > 0)
			sent += (size_t)n;
		else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			break;	/* the server closed on us */
		turn();
		eof = drain(fd, &got);
		guard(start, "take the request");
	}
	start = now();
	while (!eof) {
		turn();
		eof = drain(fd, &got);
		if (server_idle() && !eof) {
			turn();
			eof = drain(fd, &got);
			if (server_idle())
				break;
		}
		guard(start, "finish what it was sent");
	}
	shutdown(fd, SHUT_WR);
	start = now();
	while (!eof || server->nrequests > 0 || server->nconns > 0 ||
	    server->retired != NULL) {
		turn();
		if (!eof)
			eof = drain(fd, &got);
		guard(start, "close and free everything");
	}
	close(fd);
	return got;
}
