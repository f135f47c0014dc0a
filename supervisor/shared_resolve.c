/*
 * Shared state in Redis: the server's name resolved off the loop. hiredis
 * resolves a host name with getaddrinfo inside redisAsyncConnect, which
 * blocks the loop for as long as the resolver takes (seconds when a name
 * server does not answer), at every reconnect. So a name is resolved here
 * with glibc's getaddrinfo_a (its own thread, the same resolver and
 * nsswitch as the start-up check), polled from a timer, and hiredis is
 * given the numeric address. Resolved anew at each reconnect, so a Redis
 * that moved (a container restarted under its service name) is followed.
 */
#include "sandboxd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <string.h>

#include <event2/event.h>

#include "log.h"
#include "shared_internal.h"

#define POLL_S 0.01

static void
resolve_finish(struct shared_resolve *r)
{
	struct addrinfo *ai, *pick = NULL;
	char addr[INET6_ADDRSTRLEN] = "";
	const char *why = NULL;
	int rc = gai_error(&r->req);

	r->busy = 0;
	if (rc != 0) {
		why = rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc);
	} else {
		/* IPv4 first, as hiredis does. */
		for (ai = r->req.ar_result; ai != NULL; ai = ai->ai_next) {
			if (ai->ai_family == AF_INET) {
				pick = ai;
				break;
			}
			if (pick == NULL && ai->ai_family == AF_INET6)
				pick = ai;
		}
		if (pick == NULL)
			why = "no address";
		else if (pick->ai_family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)
			    pick->ai_addr)->sin_addr, addr, sizeof addr);
		else
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)
			    pick->ai_addr)->sin6_addr, addr, sizeof addr);
	}
	if (r->req.ar_result != NULL)
		freeaddrinfo(r->req.ar_result);
	r->req.ar_result = NULL;
	r->done(why == NULL ? addr : NULL, why, r->arg);
}

static void
poll_cb(evutil_socket_t fd, short what, void *arg)
{
	struct shared_resolve *r = arg;
	struct timeval tv = { 0, (suseconds_t)(POLL_S * 1e6) };

	(void)fd;
	(void)what;
	if (gai_error(&r->req) == EAI_INPROGRESS) {
		evtimer_add(r->poll, &tv);
		return;
	}
	resolve_finish(r);
}

int
shared_is_numeric(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, buf) == 1 ||
	    inet_pton(AF_INET6, host, buf) == 1;
}

void
shared_resolve(struct shared_resolve *r, const char *host,
    void (*done)(const char *addr, const char *why, void *arg), void *arg)
{
	struct gaicb *list[1] = { &r->req };
	struct timeval tv = { 0, 0 };
	int rc;

	r->done = done;
	r->arg = arg;
	memset(&r->req, 0, sizeof r->req);
	memset(&r->hints, 0, sizeof r->hints);
	r->hints.ai_family = AF_UNSPEC;
	r->hints.ai_socktype = SOCK_STREAM;
	r->req.ar_name = host;
	r->req.ar_request = &r->hints;
	if (r->poll == NULL)
		r->poll = evtimer_new(sd.base, poll_cb, r);
	if ((rc = getaddrinfo_a(GAI_NOWAIT, list, 1, NULL)) != 0) {
		done(NULL, gai_strerror(rc), arg);
		return;
	}
	r->busy = 1;
	evtimer_add(r->poll, &tv);
}

void
shared_resolve_stop(struct shared_resolve *r)
{
	if (r->poll != NULL)
		event_free(r->poll);
	r->poll = NULL;
	/* One glibc cannot cancel any more goes on writing into r, which
	 * is static: it finishes on its own; only its answer is lost. */
	if (r->busy && gai_cancel(&r->req) == EAI_CANCELED)
		r->busy = 0;
	if (!r->busy && r->req.ar_result != NULL) {
		freeaddrinfo(r->req.ar_result);
		r->req.ar_result = NULL;
	}
}
