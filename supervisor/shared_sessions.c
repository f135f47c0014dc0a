/*
 * Shared state in Redis: sessions. Every instance writes a session's last
 * activity to the heartbeats hash; each reaper round, the instance that
 * takes lock:reaper (SET NX PX, held for most of a round) reaps for all:
 * the live sandboxes of an expired session are released wherever they are
 * (ours directly, the others' through their owners; paused ones stay),
 * and what instances gone for good left in Redis is removed
 * (shared_owners.c).
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

void
shared_touch_session(const char *session, double when)
{
	char *key = shared_key("heartbeats"), num[32];

	snprintf(num, sizeof num, "%.3f", when);
	shared_command(shared_ignore_cb, NULL, "HSET %s %s %s", key, session, num);
	free(key);
}

static void
reap_release_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	(void)arg;
	if (err != NULL)
		log_warn("session reaper: cannot release %s: %s", sb->name,
		    err->msg);
}

static void
heartbeats_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply;
	double now = sandboxd_now(), timeout = sd.cfg.heartbeat_timeout;
	json_t *f;
	const char *session;
	json_t *v;

	(void)ac;
	(void)arg;
	if (r == NULL || r->type != REDIS_REPLY_ARRAY)
		return;
	f = shared_reply_fields(r);
	json_object_foreach(f, session, v) {
		double last = atof(json_string_value(v));
		json_t *names;
		size_t i;
		json_t *name;
		char *key;
		int said;

		if (now - last <= timeout)
			continue;
		/* Live ones only: those being released are not again. */
		names = sessions_mapping(session);
		said = 0;
		json_array_foreach(names, i, name) {
			struct sandbox *sb = sandbox_find(json_string_value(name));

			if (sb == NULL || !sessions_reapable(sb, session))
				continue;
			if (!said)
				log_info("session %s idle for %.0f s "
				    "(HEARTBEAT_TIMEOUT %.0f): releasing its "
				    "sandboxes", session, now - last, timeout);
			said = 1;
			lifecycle_release(sb, reap_release_cb, NULL);
		}
		/* Kept a while: a sandbox of it another instance is still
		 * creating is not in the mapping yet. */
		if (json_array_size(names) == 0 &&
		    now - last > timeout + HEARTBEAT_GRACE) {
			key = shared_key("heartbeats");
			shared_command(shared_ignore_cb, NULL, "HDEL %s %s", key,
			    session);
			free(key);
		}
		json_decref(names);
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

void
shared_reap(void)
{
	char *key;
	long ms;

	/* Also without HEARTBEAT_TIMEOUT: dead instances are swept. */
	if (!shared_up())
		return;
	/* Held past the next round, so one instance reaps a round. */
	ms = (long)(sessions_reap_interval() * 1000 * 0.9);
	if (ms < 100)
		ms = 100;
	key = shared_key("lock:reaper");
	shared_command(lock_cb, NULL, "SET %s %s NX PX %ld", key,
	    state_instance(), ms);
	free(key);
}
