/*
 * Shared state in Redis: looking up what no announcement told us about
 * yet. A client told of a sandbox by one instance's create may ask
 * another before the announcement reached it, and a session's mapping may
 * hold sandboxes made elsewhere a moment ago: the name's record, or the
 * session's names and each unknown one's record, are read from Redis
 * (and checked, as every record, by shared_mirror.c) before the request
 * is answered.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "shared_internal.h"
#include "xmalloc.h"

/* Records read for one session's look-up: a session has a few, and the
 * set may be anybody's. */
#define SESSION_FETCH_MAX 256

/* One look-up of a name no announcement told us about yet. */
struct lookup {
	char *name;
	void (*done)(void *arg, int ok);
	void *arg;
};

static void
lookup_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	struct lookup *l = arg;

	shared_record_cb(ac, reply, l->name);		/* frees the name */
	l->done(l->arg, reply != NULL);
	free(l);
}

/* A look-up answered to cb once the command start(l) sends is: -1
 * (done never runs) while Redis is down. */
static int
lookup_start(int (*start)(struct lookup *l), const char *name,
    void (*done)(void *arg, int ok), void *arg)
{
	struct lookup *l;

	if (!shared_up())
		return -1;
	l = xcalloc(1, sizeof *l);
	l->name = name != NULL ? xstrdup(name) : NULL;
	l->done = done;
	l->arg = arg;
	if (start(l) < 0) {
		free(l->name);
		free(l);
		return -1;
	}
	return 0;
}

static int
lookup_record(struct lookup *l)
{
	return shared_fetch_with(l->name, lookup_cb, l);
}

int
shared_lookup(const char *name, void (*done)(void *arg, int ok), void *arg)
{
	if (!shared_name_ok(name))
		return -1;
	return lookup_start(lookup_record, name, done, arg);
}

/* The records of a session's sandboxes none told us about yet: the names
 * bound to it in Redis, then each unknown one's record, then a PING whose
 * answer (in order on the one connection) says all were applied. */
static void
lookup_end(struct lookup *l, int ok)
{
	l->done(l->arg, ok);
	free(l->name);
	free(l);
}

static void
session_done_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	(void)ac;
	lookup_end(arg, reply != NULL);
}

static void
session_members_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	struct lookup *l = arg;
	redisReply *r = reply;
	size_t fetched = 0;

	(void)ac;
	if (r == NULL) {
		lookup_end(l, 0);
		return;
	}
	for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements &&
	    fetched < SESSION_FETCH_MAX; i++) {
		const redisReply *m = r->element[i];

		if (m->type == REDIS_REPLY_STRING && sandbox_resolve(m->str) == NULL)
			fetched += shared_fetch(m->str) == 0;
	}
	/* Every one known here already: nothing to wait for. */
	if (fetched == 0)
		lookup_end(l, 1);
	else if (shared_command(session_done_cb, l, "PING") < 0)
		lookup_end(l, 0);
}

static int
lookup_members(struct lookup *l)
{
	char *key = shared_key("session:%s", l->name);
	int rc = shared_command(session_members_cb, l, "SMEMBERS %s", key);

	free(key);
	return rc;
}

int
shared_lookup_session(const char *session,
    void (*done)(void *arg, int ok), void *arg)
{
	return lookup_start(lookup_members, session, done, arg);
}
