/*
 * Shared state in Redis: sandbox records. Each instance writes the records
 * of the sandboxes it owns (a hash per sandbox, signed, written whole when
 * anything in it changed) and announces each change on the event
 * channel; every instance keeps a mirror of the others' records in
 * memory (shared_mirror.c, which takes only records that check), filled
 * at connect and kept current from the channel, so a request about any
 * sandbox is served by any instance without a round trip to Redis. A
 * remote sandbox is reached directly at its agent (the unix socket on a
 * shared host, or the agent port its owner published on
 * SANDBOXD_ADVERTISE_ADDR); only its owner talks to Docker about it, so a
 * release from elsewhere is a request (field "release", signed) the owner
 * carries out, as a take from the pool is (field "take"): this module only
 * reads them and tells whoever subscribed (lifecycle.c, pool.c), as it
 * tells of Redis coming back (shared_on_up). Keys, all under the prefix:
 *   sb:<name>            hash: the record, its "mac", and "taken", "take"
 *                        and "release" when another instance took it from
 *                        the pool or asked for its release
 *   sandboxes            set: every record's name
 *   live                 hash: name -> owner of every live sandbox (what
 *                        MAX_SANDBOX_INSTANCES counts)
 *   session:<id>         set: names bound to the session
 *   heartbeats           hash: session -> last activity (epoch seconds)
 *   <pool key>:<type>    list: warm sandboxes of a type, taken with LPOP
 *   <port key>:<addr>    set: host ports in use on an advertised address
 *   instance:<id>        string with TTL: the owner's lease
 *   instances            hash: id -> "<last renewal ms> <lease ms> <lease>"
 *   lock:reaper          string with TTL: who reaps expired sessions
 *   events               channel: "<instance> <name>" for each change
 *   activity             channel: sessions' activity, signed
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "log.h"
#include "oss.h"
#include "shared_internal.h"
#include "xmalloc.h"

#define TICK_S 1.0

/* KEYS: sb:<name>, instances. A record and its owner's lease entry, for
 * the lease may be newer than what this instance heard last. */
static const char fetch_script[] =
    "local o = redis.call('HGET', KEYS[1], 'owner') "
    "return {redis.call('HGETALL', KEYS[1]), "
    "o and redis.call('HGET', KEYS[2], o) or false}";

static struct event *sync_ev, *tick_ev;
static char *channel;
/* Who carries out what another instance asked, and hears of Redis back. */
static void (*release_asked)(struct sandbox *sb);
static void (*take_asked)(struct sandbox *sb, json_t *meta,
    const char *session);
#define UP_HOOKS_MAX 4
static void (*up_hooks[UP_HOOKS_MAX])(void);
static size_t nup_hooks;
/* What anybody writing Redis can have us log. */
static struct log_rate unsigned_rate = LOG_RATE_INIT(10, 5);

/* How another instance reaches the agent of sb. */
static char *
agent_for_others(const struct sandbox *sb)
{
	if (sd.cfg.advertise_addr != NULL && sb->port > 0)
		return xasprintf("%s:%d", sd.cfg.advertise_addr, sb->port);
	return xstrdup(sb->agent_addr != NULL ? sb->agent_addr : "");
}

/* The record of one of ours as field -> string, its token sealed as it
 * was in last (the record as written before, or NULL), signed for key.
 * New reference. */
static json_t *
record_fields(const struct sandbox *sb, json_t *last, const char *key)
{
	json_t *f = sandbox_record(sb, SANDBOX_SHARED);
	char *agent = agent_for_others(sb), *ports, *api;

	json_object_set_new(f, "owner", json_string(state_instance()));
	/* Sealed once: a new nonce each time would be a change each time. */
	if (last != NULL && *shared_field(last, "token") != '\0') {
		json_object_set(f, "token", json_object_get(last, "token"));
	} else {
		char *sealed = shared_seal(sb->token, key);

		json_object_set_new(f, "token", json_string(sealed));
		free(sealed);
	}
	json_object_set_new(f, "agent", json_string(agent));
	/* Where its port is claimed, for whoever removes the record of a
	 * dead owner. */
	ports = sb->port > 0 ? shared_ports_key() : xstrdup("");
	json_object_set_new(f, "ports", json_string(ports));
	free(ports);
	/* Which host it is on, and our API there: from another host a
	 * unix socket is out of reach, the API is not. */
	json_object_set_new(f, "host", json_string(sd.cfg.advertise_addr !=
	    NULL ? sd.cfg.advertise_addr : ""));
	api = shared_api_addr();
	json_object_set_new(f, "api", json_string(api));
	free(api);
	free(agent);
	shared_record_sign(key, f);
	return f;
}

char *
shared_pool_key(const char *type)
{
	return shared_key("%s:%s", sd.cfg.redis_pool_key, type);
}

/* "<our instance> <name>" on the channel: sb:<name> changed. */
static int
announce(const char *name, shared_reply_cb cb, void *arg)
{
	char *msg = xasprintf("%s %s", state_instance(), name);
	int rc = shared_command(cb, arg, "PUBLISH %s %s", channel, msg);

	free(msg);
	return rc;
}

void
shared_announce(const char *name)
{
	announce(name, shared_ignore_cb, NULL);
}

void
shared_ignore_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply;

	(void)ac;
	(void)arg;
	if (r != NULL && r->type == REDIS_REPLY_ERROR)
		log_warn("shared state: Redis: %s", r->str);
}

/* Whether a sandbox of ours that is not going holds host port port. */
static int
port_held(int port)
{
	for (struct sandbox *sb = sandbox_first(); sb != NULL;
	    sb = sandbox_next(sb)) {
		if (sb->port == port && sb->state != SB_RELEASING &&
		    sb->state != SB_RELEASED)
			return 1;
	}
	return 0;
}

/* Remove the record of sb (ours, gone) from Redis. */
static void
delete_record(const char *name, json_t *last)
{
	char *key = shared_key("sb:%s", name), *names = shared_key("sandboxes");
	const char *session = last != NULL ? shared_field(last, "session") : "";

	shared_command(shared_ignore_cb, NULL, "DEL %s", key);
	shared_command(shared_ignore_cb, NULL, "SREM %s %s", names, name);
	shared_unreserve(name);
	if (*session != '\0') {
		char *skey = shared_key("session:%s", session);

		shared_command(shared_ignore_cb, NULL, "SREM %s %s", skey, name);
		free(skey);
	}
	if (last != NULL && *shared_field(last, "type") != '\0') {
		char *pkey = shared_pool_key(shared_field(last, "type"));

		shared_command(shared_ignore_cb, NULL, "LREM %s 0 %s", pkey, name);
		free(pkey);
	}
	/* An old record's port may be a newer sandbox's now. */
	if (last != NULL && atoi(shared_field(last, "port")) > 0 &&
	    !port_held(atoi(shared_field(last, "port"))))
		shared_release_port(atoi(shared_field(last, "port")));
	shared_announce(name);
	free(key);
	free(names);
}

static int write_changes(struct sandbox *sb, shared_reply_cb cb, void *arg);

/* Write what changed in the record of sb (ours); cb (may be NULL) runs
 * with the answer to an announcement of sb, also when nothing changed.
 * -1 when cb was given and will not run (the command was refused). */
static int
write_record(struct sandbox *sb, shared_reply_cb cb, void *arg)
{
	int rc = write_changes(sb, cb, arg);

	if (rc == 0 && cb != NULL)
		return announce(sb->name, cb, arg);
	return rc < 0 ? -1 : 0;
}

/* 1: announced (with cb when given), 0: nothing to write, -1: cb was
 * given and refused. */
static int
write_changes(struct sandbox *sb, shared_reply_cb cb, void *arg)
{
	const char *argv[2 + 2 * (SHARED_NFIELDS + 1)];
	json_t *f, *last = sb->shared;
	int argc = 2, published = 0;
	char *key;

	if (sb->state == SB_RELEASED || sb->state == SB_RELEASING) {
		if (last != NULL && strcmp(shared_field(last, "state"), "gone") != 0) {
			delete_record(sb->name, last);
			json_object_set_new(last, "state", json_string("gone"));
			/* Announced without cb: write_record does it with. */
			return cb != NULL ? 0 : 1;
		}
		return 0;
	}
	/* Not yet usable: others need not know it. */
	if (last == NULL && sb->state == SB_CREATING)
		return 0;
	key = shared_key("sb:%s", sb->name);
	f = record_fields(sb, last, key);
	/* Whole: what was tampered with in Redis is set right too. */
	if (last == NULL || strcmp(shared_field(last, "mac"),
	    shared_field(f, "mac")) != 0) {
		argv[0] = "HSET";
		argv[1] = key;
		for (size_t i = 0; i < SHARED_NFIELDS; i++) {
			argv[argc++] = shared_fields[i];
			argv[argc++] = shared_field(f, shared_fields[i]);
		}
		argv[argc++] = "mac";
		argv[argc++] = shared_field(f, "mac");
	}
	if (argc > 2) {
		const char *old_session = last != NULL ? shared_field(last, "session") :
		    "";
		const char *old_state = last != NULL ? shared_field(last, "state") : "";

		shared_command_argv(shared_ignore_cb, NULL, argc, argv, NULL);
		if (last == NULL) {
			char *names = shared_key("sandboxes");

			shared_command(shared_ignore_cb, NULL, "SADD %s %s", names,
			    sb->name);
			free(names);
			names = shared_key("live");
			shared_command(shared_ignore_cb, NULL, "HSET %s %s %s", names,
			    sb->name, state_instance());
			free(names);
			if (sb->port > 0) {
				char *ports = shared_ports_key();

				shared_command(shared_ignore_cb, NULL, "SADD %s %d",
				    ports, sb->port);
				free(ports);
			}
		}
		if (strcmp(old_session, shared_field(f, "session")) != 0) {
			if (*old_session != '\0') {
				char *s = shared_key("session:%s", old_session);

				shared_command(shared_ignore_cb, NULL, "SREM %s %s", s,
				    sb->name);
				free(s);
			}
			if (sb->session != NULL) {
				char *s = shared_key("session:%s", sb->session);

				shared_command(shared_ignore_cb, NULL, "SADD %s %s", s,
				    sb->name);
				free(s);
			}
		}
		if (sb->state == SB_WARM && strcmp(old_state, "warm") != 0) {
			char *p = shared_pool_key(sb->type_name);

			/* Idempotent: a re-publish must not queue it twice. */
			shared_command(shared_ignore_cb, NULL, "LREM %s 0 %s", p,
			    sb->name);
			shared_command(shared_ignore_cb, NULL, "RPUSH %s %s", p,
			    sb->name);
			free(p);
		}
		published = 1;
	}
	json_decref(sb->shared);
	sb->shared = f;
	free(key);
	if (!published)
		return 0;
	return announce(sb->name, cb != NULL ? cb : shared_ignore_cb, arg) < 0 &&
	    cb != NULL ? -1 : 1;
}

static void
sync_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (!shared_up())
		return;
	for (struct sandbox *sb = sandbox_first(); sb != NULL;
	    sb = sandbox_next(sb))
		write_record(sb, NULL, NULL);
}

struct flush_wait {
	void (*done)(void *arg);
	void *arg;
};

static void
flushed_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	struct flush_wait *w = arg;

	(void)ac;
	(void)reply;
	w->done(w->arg);
	free(w);
}

static void
flush_later_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	flushed_cb(NULL, NULL, arg);
}

void
shared_flush(void (*done)(void *arg), void *arg)
{
	struct flush_wait *w = xcalloc(1, sizeof *w);

	w->done = done;
	w->arg = arg;
	sync_cb(-1, 0, NULL);
	/* Answered after everything queued before it. */
	if (shared_command(flushed_cb, w, "PING") < 0)
		sandboxd_defer(flush_later_cb, w);
}

/* Our records changed: written on the loop's next turn. */
static void
dirty(void)
{
	struct timeval now = { 0, 0 };

	if (sync_ev != NULL && !evtimer_pending(sync_ev, NULL))
		evtimer_add(sync_ev, &now);
}

static void
changed_cb(struct sandbox *sb, void *arg)
{
	(void)sb;
	(void)arg;
	dirty();
}

/* Publishing one record now, answering when Redis has announced it. */
struct publish_wait {
	struct sandbox *sb;
	shared_done_cb done;
	void *arg;
};

static void
published_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	struct publish_wait *w = arg;

	(void)ac;
	(void)reply;
	w->done(w->sb, w->arg);
	sandbox_unref(w->sb);
	free(w);
}

static void
publish_later_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	published_cb(NULL, NULL, arg);
}

void
shared_publish(struct sandbox *sb, shared_done_cb done, void *arg)
{
	struct publish_wait *w = xcalloc(1, sizeof *w);

	w->sb = sb;
	w->done = done;
	w->arg = arg;
	sandbox_ref(sb);
	/* Down (or going down): the others learn at the re-publish. */
	if (!shared_up() || write_record(sb, published_cb, w) < 0)
		sandboxd_defer(publish_later_cb, w);
}

void
shared_on_release_asked(void (*cb)(struct sandbox *sb))
{
	release_asked = cb;
}

void
shared_on_take_asked(void (*cb)(struct sandbox *sb, json_t *meta,
    const char *session))
{
	take_asked = cb;
}

void
shared_on_up(void (*cb)(void))
{
	if (nup_hooks == UP_HOOKS_MAX)
		fatal("more than %d shared-state hooks", UP_HOOKS_MAX);
	up_hooks[nup_hooks++] = cb;
}

/* A record in Redis (f, key) of one of ours: what others asked of it,
 * when it is signed. */
static void
own_apply(struct sandbox *sb, const char *key, json_t *f)
{
	const char *release = shared_field(f, "release");
	json_t *take;

	if (*release != '\0' && sb->state != SB_RELEASED &&
	    sb->state != SB_RELEASING) {
		if (!shared_release_ok(key, state_instance(), release)) {
			log_rate_msg(&unsigned_rate, LOG_WARN, "sandbox %s: "
			    "ignoring a release request in Redis that is not "
			    "signed", sb->name);
		} else if (release_asked != NULL) {
			release_asked(sb);
			return;
		}
	}
	/* Removed or tampered with: written again, whole. */
	if (sb->shared != NULL && sb->state != SB_RELEASING &&
	    sb->state != SB_RELEASED && (!shared_record_signed(key, f) ||
	    strcmp(shared_field(f, "mac"), shared_field(sb->shared,
	    "mac")) != 0)) {
		json_decref(sb->shared);
		sb->shared = NULL;
		dirty();
	}
	/* Taken from the pool by another instance. */
	if (sb->state == SB_WARM && take_asked != NULL &&
	    (take = shared_take_check(key, state_instance(),
	    shared_field(f, "take"))) != NULL) {
		json_t *meta = json_loads(shared_field(take, "meta"), 0, NULL);
		const char *session = shared_field(take, "session");

		take_asked(sb, json_is_object(meta) ? meta : NULL,
		    *session != '\0' ? session : NULL);
		json_decref(meta);
		json_decref(take);
	}
}

/* Reconcile a record of ours that has no sandbox here (any more). One
 * not signed is only removed: its session, pool and port are not ours to
 * touch. */
static void
own_orphan(const char *name, const char *key, json_t *f)
{
	char *names;

	if (!sd.ready)
		return;
	if (shared_record_signed(key, f)) {
		log_info("shared state: removing the record of %s, whose "
		    "container is gone", name);
		delete_record(name, f);
		return;
	}
	log_rate_msg(&unsigned_rate, LOG_WARN, "shared state: removing a "
	    "record of %s in Redis that names this instance and is not "
	    "signed", name);
	names = shared_key("sandboxes");
	shared_command(shared_ignore_cb, NULL, "DEL %s", key);
	shared_command(shared_ignore_cb, NULL, "SREM %s %s", names, name);
	free(names);
}

/* The answer to fetch_script ({record, its owner's lease entry}) for
 * name. */
static void
record_apply(const char *name, redisReply *r)
{
	redisReply *lease;
	struct sandbox *sb;
	char *key;
	json_t *f;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
		return;
	f = shared_reply_fields(r->element[0]);
	lease = r->element[1];
	if (lease->type == REDIS_REPLY_STRING)
		shared_instance_learn(shared_field(f, "owner"), lease->str);
	key = shared_key("sb:%s", name);
	sb = sandbox_find(name);
	/* Released while Redis was away: its record goes now. */
	if (sb != NULL && sb->state == SB_RELEASED)
		sb = NULL;
	if (sb != NULL) {
		own_apply(sb, key, f);
	} else if (json_object_size(f) == 0) {
		shared_mirror_forget(name);
	} else if (strcmp(shared_field(f, "owner"), state_instance()) == 0) {
		own_orphan(name, key, f);
	} else {
		shared_mirror_record(name, f);
	}
	json_decref(f);
	free(key);
}

void
shared_record_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	char *name = arg;

	(void)ac;
	if (reply != NULL)
		record_apply(name, reply);
	free(name);
}

int
shared_fetch_with(const char *name, shared_reply_cb cb, void *arg)
{
	char *key = shared_key("sb:%s", name), *hash = shared_key("instances");
	int rc;

	rc = shared_command(cb, arg, "EVAL %s 2 %s %s", fetch_script, key,
	    hash);
	free(key);
	free(hash);
	return rc;
}

int
shared_fetch(const char *name)
{
	char *dup;

	if (!shared_name_ok(name))
		return -1;
	dup = xstrdup(name);
	if (shared_fetch_with(name, shared_record_cb, dup) < 0) {
		free(dup);
		return -1;
	}
	return 0;
}

/* A message on either channel, or a subscription's confirmation. What
 * an announcement names is only read (and checked) from Redis, so one
 * of anybody's makes us do no more than read a record. */
static void
event_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply, *msg;
	const char *sp;
	int events;

	(void)ac;
	(void)arg;
	if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING)
		return;
	events = strcmp(r->element[1]->str, channel) == 0;
	if (strcmp(r->element[0]->str, "subscribe") == 0 && !events)
		shared_activity_listening();
	if (strcmp(r->element[0]->str, "message") != 0)
		return;
	msg = r->element[2];
	if (msg->type != REDIS_REPLY_STRING)
		return;
	if (!events) {
		shared_activity_heard(msg->str);
		return;
	}
	if ((sp = strchr(msg->str, ' ')) == NULL)
		return;
	/* Our own announcements: we know. */
	if ((size_t)(sp - msg->str) == strlen(state_instance()) &&
	    strncmp(msg->str, state_instance(), (size_t)(sp - msg->str)) == 0)
		return;
	shared_fetch(sp + 1);
}

void
shared_records_subscribe(struct redisAsyncContext *ac)
{
	char *activity = shared_key("activity");

	redisAsyncCommand(ac, event_cb, NULL, "SUBSCRIBE %s %s", channel,
	    activity);
	free(activity);
}

static void
members_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply;

	(void)ac;
	(void)arg;
	if (r == NULL || r->type != REDIS_REPLY_ARRAY)
		return;
	/* What vanished while we were away goes; the rest is fetched. */
	shared_mirror_keep_only(r);
	for (size_t i = 0; i < r->elements; i++) {
		if (r->element[i]->type == REDIS_REPLY_STRING)
			shared_fetch(r->element[i]->str);
	}
}

void
shared_records_connected(void)
{
	char *names;

	if (!shared_up())
		return;
	/* The lease first: a take must not find our pool entries without
	 * it (commands on one connection run in order). */
	shared_lease_connected();
	/* Write everything of ours again: Redis may have lost it. Those
	 * released meanwhile are deleted (write_record) instead. */
	for (struct sandbox *sb = sandbox_first(); sb != NULL;
	    sb = sandbox_next(sb)) {
		if (sb->state != SB_RELEASED && sb->state != SB_RELEASING) {
			json_decref(sb->shared);
			sb->shared = NULL;
		}
		write_record(sb, NULL, NULL);
	}
	names = shared_key("sandboxes");
	shared_command(members_cb, NULL, "SMEMBERS %s", names);
	free(names);
	names = shared_key("live");
	shared_command(shared_live_cb, NULL, "HGETALL %s", names);
	free(names);
	for (size_t i = 0; i < nup_hooks; i++)
		up_hooks[i]();
}

struct shared_answer *
shared_answer_new(struct sandbox *sb, sandbox_done_cb done, void *arg)
{
	struct shared_answer *an = xcalloc(1, sizeof *an);

	an->sb = sb;
	an->done = done;
	an->arg = arg;
	sandbox_ref(sb);
	return an;
}

void
shared_answer_give(struct shared_answer *an)
{
	if (an->done != NULL)
		an->done(an->sb, an->failed ? &an->err : NULL, an->arg);
	sandbox_unref(an->sb);
	free(an);
}

void
shared_answer_later_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	shared_answer_give(arg);
}

/* A release of a sandbox another instance owns: asked of its owner. */
static void
remote_release_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	struct shared_answer *an = arg;

	(void)ac;
	if (reply == NULL) {
		an->failed = 1;
		shared_lost_error(&an->err);
	}
	shared_answer_give(an);
}

void
shared_release_remote(struct sandbox *sb, sandbox_done_cb done, void *arg)
{
	struct shared_answer *an = shared_answer_new(sb, done, arg);
	char *key = shared_key("sb:%s", sb->name), *release;

	if (shared_down_error(&an->err) < 0) {
		an->failed = 1;
		sandboxd_defer(shared_answer_later_cb, an);
		free(key);
		return;
	}
	/* Gone for clients at once; the owner removes the container (and
	 * uploads the workspace: until it has, creates wait for it). */
	if (oss_enabled() && sb->storage_path != NULL)
		shared_upload_mark(sb);
	sb->state = SB_RELEASING;
	sandbox_changed(sb);
	release = shared_release_sign(key, sb->owner, state_instance());
	shared_command(shared_ignore_cb, NULL, "HSET %s release %s", key,
	    release);
	free(release);
	if (announce(sb->name, remote_release_cb, an) < 0) {
		an->failed = 1;
		shared_lost_error(&an->err);
		sandboxd_defer(shared_answer_later_cb, an);
	}
	free(key);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (shared_up())
		shared_lease_tick();
}

void
shared_records_init(void)
{
	struct timeval tv = { (time_t)TICK_S, 0 };

	channel = shared_key("events");
	sync_ev = evtimer_new(sd.base, sync_cb, NULL);
	tick_ev = event_new(sd.base, -1, EV_PERSIST, tick_cb, NULL);
	event_add(tick_ev, &tv);
	sandbox_hook_add(changed_cb, NULL);
}

void
shared_records_free(void)
{
	if (sync_ev != NULL)
		event_free(sync_ev);
	if (tick_ev != NULL)
		event_free(tick_ev);
	sync_ev = tick_ev = NULL;
	shared_mirror_clear();
	shared_instances_free();
	shared_activity_free();
	free(channel);
	channel = NULL;
}
