/*
 * Shared state in Redis (REDIS_ENABLED): the connections. Start-up checks
 * the settings with one blocking connection (AUTH, SELECT, PING) before
 * the loop runs, so a wrong password or an unknown host stops sandboxd
 * with a message naming the setting; on the loop only hiredis's libevent
 * adapter is used. Two connections: commands, and one SUBSCRIBEd to the
 * event channel (a subscribed connection takes no other commands). A
 * connection that drops is made again with back-off; when both are up the
 * records module re-publishes what this instance owns and reloads the
 * others' (shared_records.c). A name in REDIS_SERVER is resolved off the
 * loop before each connect (shared_resolve.c). Without REDIS_ENABLED
 * nothing here runs.
 */
#include "sandboxd.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <hiredis/adapters/libevent.h>
#pragma GCC diagnostic pop

#include "log.h"
#include "shared_internal.h"
#include "xmalloc.h"

#define BACKOFF_FIRST 0.1
#define BACKOFF_MAX 5.0
#define CHECK_TIMEOUT_S 5

/* One connection to Redis; lives until shared_stop. */
struct conn {
	const char *what;		/* "commands", "events" */
	redisAsyncContext *ac;		/* NULL while down */
	int ready;			/* AUTH and SELECT answered */
	int subscriber;
	struct event *retry;
	double backoff;
	struct shared_resolve resolve;	/* a name in REDIS_SERVER */
};

static struct conn cmd = { .what = "commands" };
static struct conn sub = { .what = "events", .subscriber = 1 };
static int stopping;
static char down_reason[256] = "not connected yet";

static void conn_open(struct conn *c);

int
shared_enabled(void)
{
	return sd.cfg.redis_enabled;
}

int
shared_up(void)
{
	return cmd.ready && sub.ready;
}

int
shared_down_error(struct error *err)
{
	if (shared_up())
		return 0;
	error_set(err, 503, "the shared state (Redis at %s) is unreachable: "
	    "%s; sandboxes this instance knows keep working, new ones cannot "
	    "be made until it is back", shared_server_name(), down_reason);
	return -1;
}

void
shared_lost_error(struct error *err)
{
	error_set(err, 503, "the shared state (Redis at %s) went away during "
	    "the request: %s", shared_server_name(), down_reason);
}

const char *
shared_server_name(void)
{
	static char name[300];

	if (strncmp(sd.cfg.redis_server, "unix:", 5) == 0)
		return sd.cfg.redis_server;
	snprintf(name, sizeof name, "%s:%ld", sd.cfg.redis_server,
	    sd.cfg.redis_port);
	return name;
}

char *
shared_key(const char *fmt, ...)
{
	char *rest, *key;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&rest, fmt, ap) < 0)
		fatal("out of memory");
	va_end(ap);
	key = xasprintf("%s%s", sd.cfg.redis_prefix, rest);
	free(rest);
	return key;
}

/* The AUTH command's arguments: with a user (Redis 6 ACL) or without. */
static int
auth_argv(const char **argv)
{
	int n = 0;

	if (sd.cfg.redis_password == NULL || sd.cfg.redis_password[0] == '\0')
		return 0;
	argv[n++] = "AUTH";
	if (sd.cfg.redis_user != NULL && sd.cfg.redis_user[0] != '\0')
		argv[n++] = sd.cfg.redis_user;
	argv[n++] = sd.cfg.redis_password;
	return n;
}

/* The blocking check before the loop runs. */
int
shared_check(struct error *err)
{
	struct timeval tv = { CHECK_TIMEOUT_S, 0 };
	const char *argv[3];
	redisContext *c;
	redisReply *r;
	int n;

	if (strncmp(sd.cfg.redis_server, "unix:", 5) == 0)
		c = redisConnectUnixWithTimeout(sd.cfg.redis_server + 5, tv);
	else
		c = redisConnectWithTimeout(sd.cfg.redis_server,
		    (int)sd.cfg.redis_port, tv);
	if (c == NULL || c->err) {
		error_set(err, 500, "REDIS_SERVER: cannot connect to Redis at "
		    "%s: %s", shared_server_name(), c != NULL ? c->errstr :
		    "out of memory");
		if (c != NULL)
			redisFree(c);
		return -1;
	}
	redisSetTimeout(c, tv);
	if ((n = auth_argv(argv)) > 0) {
		r = redisCommandArgv(c, n, argv, NULL);
		if (r == NULL || r->type == REDIS_REPLY_ERROR) {
			error_set(err, 500, "REDIS_USER/REDIS_PASSWORD: Redis "
			    "at %s refused them: %s", shared_server_name(),
			    r != NULL ? r->str : c->errstr);
			goto fail;
		}
		freeReplyObject(r);
	}
	r = redisCommand(c, "SELECT %ld", sd.cfg.redis_db);
	if (r == NULL || r->type == REDIS_REPLY_ERROR) {
		error_set(err, 500, "REDIS_DB: Redis at %s refused database %ld: "
		    "%s", shared_server_name(), sd.cfg.redis_db, r != NULL ?
		    r->str : c->errstr);
		goto fail;
	}
	freeReplyObject(r);
	/* Its clock says when leases lapse, for every instance alike. */
	r = redisCommand(c, "TIME");
	if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING) {
		error_set(err, 500, "REDIS_SERVER: Redis at %s does not answer "
		    "TIME: %s", shared_server_name(), r != NULL &&
		    r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
		goto fail;
	}
	shared_clock_set(atoll(r->element[0]->str) * 1000 +
	    atoll(r->element[1]->str) / 1000);
	freeReplyObject(r);
	redisFree(c);
	return 0;
fail:
	if (r != NULL)
		freeReplyObject(r);
	redisFree(c);
	return -1;
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	conn_open(arg);
}

static void
conn_lost(struct conn *c, const char *why)
{
	struct timeval tv;
	int was_up = shared_up();

	c->ac = NULL;
	c->ready = 0;
	snprintf(down_reason, sizeof down_reason, "%s", why);
	if (stopping)
		return;
	if (was_up)
		log_error("shared state: lost Redis at %s (%s): retrying",
		    shared_server_name(), why);
	c->backoff = c->backoff > 0 ? c->backoff * 2 : BACKOFF_FIRST;
	if (c->backoff > BACKOFF_MAX)
		c->backoff = BACKOFF_MAX;
	tv = timing_timeval(c->backoff);
	if (c->retry == NULL)
		c->retry = evtimer_new(sd.base, retry_cb, c);
	evtimer_add(c->retry, &tv);
}

static void
disconnected_cb(const redisAsyncContext *ac, int status)
{
	struct conn *c = ac->data;

	conn_lost(c, status == REDIS_OK ? "closed" : ac->errstr);
}

static void
connected_cb(const redisAsyncContext *ac, int status)
{
	struct conn *c = ac->data;

	/* On failure hiredis frees the context after this. */
	if (status != REDIS_OK)
		conn_lost(c, ac->errstr);
}

static void
became_ready(struct conn *c)
{
	c->ready = 1;
	c->backoff = 0;
	if (c->subscriber)
		shared_records_subscribe(c->ac);
	if (shared_up()) {
		log_info("shared state: Redis at %s, db %ld, prefix '%s'",
		    shared_server_name(), sd.cfg.redis_db, sd.cfg.redis_prefix);
		shared_records_connected();
	}
}

static void
select_cb(redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply;
	struct conn *c = arg;

	if (r == NULL)
		return;
	if (r->type == REDIS_REPLY_ERROR) {
		log_error("shared state: Redis refused SELECT %ld: %s",
		    sd.cfg.redis_db, r->str);
		redisAsyncDisconnect(ac);
		return;
	}
	became_ready(c);
}

static void
auth_cb(redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply;

	(void)arg;
	if (r != NULL && r->type == REDIS_REPLY_ERROR) {
		log_error("shared state: Redis refused AUTH: %s", r->str);
		redisAsyncDisconnect(ac);
	}
}

/* host: REDIS_SERVER, or the numeric address its name resolved to. */
static void
conn_connect(struct conn *c, const char *host)
{
	const char *argv[3];
	int n;

	if (strncmp(host, "unix:", 5) == 0)
		c->ac = redisAsyncConnectUnix(host + 5);
	else
		c->ac = redisAsyncConnect(host, (int)sd.cfg.redis_port);
	if (c->ac == NULL) {
		conn_lost(c, "out of memory");
		return;
	}
	if (c->ac->err) {
		char why[128];

		snprintf(why, sizeof why, "%s", c->ac->errstr);
		redisAsyncFree(c->ac);
		conn_lost(c, why);
		return;
	}
	c->ac->data = c;
	redisLibeventAttach(c->ac, sd.base);
	redisAsyncSetConnectCallback(c->ac, connected_cb);
	redisAsyncSetDisconnectCallback(c->ac, disconnected_cb);
	/* Queued now, sent once connected, answered in order. */
	if ((n = auth_argv(argv)) > 0)
		redisAsyncCommandArgv(c->ac, auth_cb, c, n, argv, NULL);
	redisAsyncCommand(c->ac, select_cb, c, "SELECT %ld", sd.cfg.redis_db);
}

static void
resolved_cb(const char *addr, const char *why, void *arg)
{
	struct conn *c = arg;
	char msg[256];

	if (addr != NULL) {
		conn_connect(c, addr);
		return;
	}
	snprintf(msg, sizeof msg, "cannot resolve %s: %s",
	    sd.cfg.redis_server, why);
	conn_lost(c, msg);
}

static void
conn_open(struct conn *c)
{
	if (strncmp(sd.cfg.redis_server, "unix:", 5) == 0 ||
	    shared_is_numeric(sd.cfg.redis_server))
		conn_connect(c, sd.cfg.redis_server);
	else
		shared_resolve(&c->resolve, sd.cfg.redis_server, resolved_cb, c);
}

void
shared_start(void)
{
	conn_open(&cmd);
	conn_open(&sub);
}

int
shared_command(shared_reply_cb cb, void *arg, const char *fmt, ...)
{
	va_list ap;
	int rc;

	if (!cmd.ready)
		return -1;
	va_start(ap, fmt);
	rc = redisvAsyncCommand(cmd.ac, (redisCallbackFn *)cb, arg, fmt, ap);
	va_end(ap);
	return rc == REDIS_OK ? 0 : -1;
}

int
shared_command_argv(shared_reply_cb cb, void *arg, int argc,
    const char **argv, const size_t *lens)
{
	if (!cmd.ready)
		return -1;
	return redisAsyncCommandArgv(cmd.ac, (redisCallbackFn *)cb, arg, argc,
	    argv, lens) == REDIS_OK ? 0 : -1;
}

void
shared_stop(void)
{
	struct conn *conns[] = { &cmd, &sub };

	stopping = 1;
	for (size_t i = 0; i < 2; i++) {
		struct conn *c = conns[i];

		if (c->retry != NULL)
			event_free(c->retry);
		c->retry = NULL;
		shared_resolve_stop(&c->resolve);
		if (c->ac != NULL) {
			/* Runs the pending callbacks with no reply. */
			redisAsyncFree(c->ac);
			c->ac = NULL;
		}
		c->ready = 0;
	}
}
