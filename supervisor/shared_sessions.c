/*
 * Shared state in Redis: sessions. Every instance tells the others of a
 * session's activity (at most once a second per session) on the activity
 * channel, signed, and each keeps the latest it heard; the heartbeats
 * hash lists the sessions (and their last activity, for people). Each
 * reaper round, the instance that takes lock:reaper (SET NX PX, held for
 * most of a round) reaps for all: the live sandboxes of an expired
 * session are released wherever they are (ours directly, the others'
 * through their owners; paused ones stay: sessions.c, which the reaper
 * tells), and what instances gone for good left in Redis is removed
 * (shared_owners.c).
 *
 * A session's last activity is what this instance heard, never what
 * Redis holds: a value there may be anybody's (an old one written back
 * would have a busy session's sandboxes released), while a message on
 * the channel reaches every subscriber whatever is written over it, and
 * one said again (a replay) is older than what was heard. Activity
 * before we listened is unknown, so it counts as the moment we began to
 * listen: a session is never expired sooner than HEARTBEAT_TIMEOUT after
 * this instance (re)subscribed.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "log.h"
#include "shared_internal.h"
#include "xmalloc.h"

/* Seconds an expired session with nothing left stays in heartbeats. */
#define HEARTBEAT_GRACE 60.0

/* session -> last activity heard (epoch seconds). */
static json_t *heard;
/* When the subscription last began: activity before it is unknown. */
static double listening_since;
/* Who releases an expired session's sandboxes (shared_reap). */
static size_t (*expire)(const char *session, double idle);

static void
hear(const char *session, double when)
{
	json_t *v;

	if (heard == NULL)
		heard = json_object();
	v = json_object_get(heard, session);
	if (v == NULL || json_real_value(v) < when)
		json_object_set_new(heard, session, json_real(when));
}

void
shared_touch_session(const char *session, double when)
{
	char *key = shared_key("heartbeats"), num[32], mac[SHARED_MAC_HEX];
	const char *parts[2] = { session, num };
	char *channel, *msg;

	snprintf(num, sizeof num, "%.3f", when);
	shared_command(shared_ignore_cb, NULL, "HSET %s %s %s", key, session, num);
	free(key);
	if (sd.cfg.heartbeat_timeout <= 0)
		return;
	hear(session, atof(num));
	channel = shared_key("activity");
	shared_mac(mac, "activity", channel, parts, 2);
	msg = xasprintf("%s %s %s", num, mac, session);
	shared_command(shared_ignore_cb, NULL, "PUBLISH %s %s", channel, msg);
	free(msg);
	free(channel);
}

void
shared_activity_heard(const char *msg)
{
	const char *sp1 = strchr(msg, ' '), *sp2;
	char num[32], mac[SHARED_MAC_HEX], *channel;
	const char *parts[2] = { NULL, num };
	int ok;

	/* "<when> <mac> <session>" */
	if (sp1 == NULL || (size_t)(sp1 - msg) >= sizeof num ||
	    (sp2 = strchr(sp1 + 1, ' ')) == NULL ||
	    (size_t)(sp2 - sp1 - 1) != SHARED_MAC_HEX - 1)
		return;
	memcpy(num, msg, (size_t)(sp1 - msg));
	num[sp1 - msg] = '\0';
	memcpy(mac, sp1 + 1, SHARED_MAC_HEX - 1);
	mac[SHARED_MAC_HEX - 1] = '\0';
	parts[0] = sp2 + 1;
	channel = shared_key("activity");
	ok = shared_mac_ok(mac, "activity", channel, parts, 2);
	free(channel);
	if (ok)
		hear(sp2 + 1, atof(num));
}

void
shared_activity_listening(void)
{
	listening_since = timing_wall();
}

void
shared_activity_free(void)
{
	json_decref(heard);
	heard = NULL;
}

/* A session's last activity as far as this instance knows. */
static double
last_activity(const char *session)
{
	double last = json_real_value(json_object_get(heard, session));

	return last > listening_since ? last : listening_since;
}

static void
heartbeats_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply;
	double now = timing_wall(), timeout = sd.cfg.heartbeat_timeout;
	json_t *f;
	const char *session;
	json_t *v;

	(void)ac;
	(void)arg;
	if (r == NULL || r->type != REDIS_REPLY_ARRAY)
		return;
	/* The sessions Redis lists, and those heard of (an entry deleted
	 * there must not keep one from expiring). */
	f = shared_reply_fields(r);
	if (heard != NULL)
		json_object_update_missing(f, heard);
	json_object_foreach(f, session, v) {
		double last = last_activity(session);
		char *key;

		if (now - last <= timeout)
			continue;
		/* Kept a while when nothing is left: a sandbox of it another
		 * instance is still creating is not bound to it yet. */
		if (expire(session, now - last) == 0 &&
		    now - last > timeout + HEARTBEAT_GRACE) {
			key = shared_key("heartbeats");
			shared_command(shared_ignore_cb, NULL, "HDEL %s %s", key,
			    session);
			free(key);
			json_object_del(heard, session);
		}
	}
	json_decref(f);
}

static void
lock_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply;
	char *key;

	(void)ac;
	(void)arg;
	/* Nil: another instance holds the lock. */
	if (r == NULL || r->type != REDIS_REPLY_STATUS)
		return;
	shared_sweep_dead();
	if (sd.cfg.heartbeat_timeout <= 0)
		return;
	key = shared_key("heartbeats");
	shared_command(heartbeats_cb, NULL, "HGETALL %s", key);
	free(key);
}

/* What was heard of sessions expired long ago goes, on every instance
 * (the lock holder also drops them from heartbeats). */
static void
forget_expired(void)
{
	double now = timing_wall();
	const char *session;
	json_t *v;
	void *tmp;

	json_object_foreach_safe(heard, tmp, session, v) {
		if (now - json_real_value(v) > sd.cfg.heartbeat_timeout +
		    HEARTBEAT_GRACE)
			json_object_del(heard, session);
	}
}

void
shared_reap(double interval, size_t (*expired)(const char *session,
    double idle))
{
	char *key;
	long ms;

	expire = expired;
	/* Also without HEARTBEAT_TIMEOUT: dead instances are swept. */
	if (!shared_up())
		return;
	forget_expired();
	/* Held past the next round, so one instance reaps a round. */
	ms = (long)(interval * 1000 * 0.9);
	if (ms < 100)
		ms = 100;
	key = shared_key("lock:reaper");
	shared_command(lock_cb, NULL, "SET %s %s NX PX %ld", key,
	    state_instance(), ms);
	free(key);
}
