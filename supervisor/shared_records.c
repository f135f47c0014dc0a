/*
 * Shared state in Redis: sandbox records. Each instance writes the records
 * of the sandboxes it owns (a hash per sandbox, only the fields that
 * changed) and announces each change on the event channel; every instance
 * keeps a mirror of the others' records in memory, filled at connect and
 * kept current from the channel, so a request about any sandbox is served
 * by any instance without a round trip to Redis. A remote sandbox is
 * reached directly at its agent (the unix socket on a shared host, or the
 * agent port its owner published on SANDBOXD_ADVERTISE_ADDR); only its
 * owner talks to Docker about it, so a release from elsewhere is a request
 * (field "release") the owner carries out. Keys, all under the prefix:
 *   sb:<name>            hash: the record
 *   sandboxes            set: every record's name
 *   live                 hash: name -> owner of every live sandbox (what
 *                        MAX_SANDBOX_INSTANCES counts)
 *   session:<id>         set: names bound to the session
 *   heartbeats           hash: session -> last activity (epoch seconds)
 *   <pool key>:<type>    list: warm sandboxes of a type, taken with LPOP
 *   <port key>:<addr>    set: host ports in use on an advertised address
 *   instance:<id>        string with TTL: the owner's lease
 *   instances            hash: id -> "<last renewal ms> <lease ms>" 
 *   lock:reaper          string with TTL: who reaps expired sessions
 *   events               channel: "<instance> <name>" for each change
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

/* Records of the other instances; each holds the list's reference. */
static struct sandbox_list mirror = TAILQ_HEAD_INITIALIZER(mirror);
static struct event *sync_ev, *tick_ev;
static char *channel;

static const char *const fields[] = {
	"id", "owner", "type", "image", "token", "agent", "port", "state",
	"session", "meta", "container_id", "mount_dir", "storage_path",
	"timeout", "created_at", "updated_at", "ports", "host", "api",
};
#define NFIELDS (sizeof fields / sizeof fields[0])


int
shared_is_remote(const struct sandbox *sb)
{
	return sb->owner != NULL;
}

/* How another instance reaches the agent of sb. */
static char *
agent_for_others(const struct sandbox *sb)
{
	if (sd.cfg.advertise_addr != NULL && sb->port > 0)
		return xasprintf("%s:%d", sd.cfg.advertise_addr, sb->port);
	return xstrdup(sb->agent_addr != NULL ? sb->agent_addr : "");
}

/* The record of one of ours as field -> string. New reference. */
static json_t *
record_fields(const struct sandbox *sb)
{
	json_t *f = json_object();
	char *meta = json_dumps(sb->meta, JSON_COMPACT | JSON_SORT_KEYS);
	char *agent = agent_for_others(sb), *ports, *api;
	char num[64];

	json_object_set_new(f, "id", json_string(sb->id));
	json_object_set_new(f, "owner", json_string(state_instance()));
	json_object_set_new(f, "type", json_string(sb->type_name));
	json_object_set_new(f, "image", json_string(sb->image));
	json_object_set_new(f, "token", json_string(sb->token));
	json_object_set_new(f, "agent", json_string(agent));
	snprintf(num, sizeof num, "%d", sb->port);
	json_object_set_new(f, "port", json_string(num));
	json_object_set_new(f, "state",
	    json_string(sandbox_state_name(sb->state)));
	json_object_set_new(f, "session", json_string(sb->session != NULL ?
	    sb->session : ""));
	json_object_set_new(f, "meta", json_string(meta != NULL ? meta : "{}"));
	json_object_set_new(f, "container_id", json_string(sb->container_id !=
	    NULL ? sb->container_id : ""));
	json_object_set_new(f, "mount_dir", json_string(sb->mount_dir != NULL ?
	    sb->mount_dir : ""));
	json_object_set_new(f, "storage_path", json_string(sb->storage_path !=
	    NULL ? sb->storage_path : ""));
	snprintf(num, sizeof num, "%.17g", sb->timeout);
	json_object_set_new(f, "timeout", json_string(num));
	snprintf(num, sizeof num, "%.6f", sb->created_at);
	json_object_set_new(f, "created_at", json_string(num));
	snprintf(num, sizeof num, "%.6f", sb->updated_at);
	json_object_set_new(f, "updated_at", json_string(num));
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
	free(meta);
	free(agent);
	return f;
}

const char *
shared_field(json_t *f, const char *k)
{
	const char *v = json_string_value(json_object_get(f, k));

	return v != NULL ? v : "";
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
	if (last != NULL && strcmp(shared_field(last, "port"), "0") != 0)
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
	const char *argv[2 + 2 * NFIELDS];
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
	f = record_fields(sb);
	key = shared_key("sb:%s", sb->name);
	argv[0] = "HSET";
	argv[1] = key;
	for (size_t i = 0; i < NFIELDS; i++) {
		const char *v = shared_field(f, fields[i]);

		if (last != NULL && strcmp(shared_field(last, fields[i]), v) == 0)
			continue;
		argv[argc++] = fields[i];
		argv[argc++] = v;
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

void
shared_dirty(void)
{
	struct timeval now = { 0, 0 };

	if (sync_ev != NULL && !evtimer_pending(sync_ev, NULL))
		evtimer_add(sync_ev, &now);
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

/* The mirror. */

struct sandbox *
shared_mirror_get(const char *name)
{
	struct sandbox *sb;

	TAILQ_FOREACH(sb, &mirror, entry) {
		if (strcmp(sb->name, name) == 0)
			return sb;
	}
	return NULL;
}

static void
mirror_drop(struct sandbox *sb)
{
	TAILQ_REMOVE(&mirror, sb, entry);
	sb->listed = 0;
	sandbox_unref(sb);
}

void
shared_mirror_forget(const char *name)
{
	struct sandbox *sb = shared_mirror_get(name);

	if (sb != NULL)
		mirror_drop(sb);
}

static enum sandbox_state
parse_state(const char *s)
{
	for (int st = SB_CREATING; st <= SB_RELEASED; st++) {
		if (strcmp(sandbox_state_name(st), s) == 0)
			return st;
	}
	return SB_UNHEALTHY;
}

static char *
dup_or_null(const char *s)
{
	return *s != '\0' ? xstrdup(s) : NULL;
}

/* Fields of an HGETALL answer as an object. New reference. */
json_t *
shared_reply_fields(redisReply *r)
{
	json_t *f = json_object();

	if (r == NULL || r->type != REDIS_REPLY_ARRAY)
		return f;
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		if (r->element[i]->type == REDIS_REPLY_STRING &&
		    r->element[i + 1]->type == REDIS_REPLY_STRING)
			json_object_set_new(f, r->element[i]->str,
			    json_string(r->element[i + 1]->str));
	}
	return f;
}

/* Whether the agent of a mirror record (f) is reached through its
 * owner's API: on another host (a different advertised address) behind a
 * unix socket (a network-none type; a bridge type's port is reached
 * directly). Only a plain name goes into the owner's /proxy/{name}. */
static int
via_owner(const char *name, json_t *f)
{
	const char *ours = sd.cfg.advertise_addr != NULL ?
	    sd.cfg.advertise_addr : "";

	return strncmp(shared_field(f, "agent"), "unix:", 5) == 0 &&
	    strcmp(shared_field(f, "host"), ours) != 0 &&
	    *shared_field(f, "api") != '\0' && name[0] != '\0' &&
	    strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789-_.") == strlen(name);
}

/* Bring a mirror record up to f (the record in Redis). */
void
shared_mirror_apply(struct sandbox *sb, json_t *f)
{
	json_t *meta = json_loads(shared_field(f, "meta"), 0, NULL);

	free(sb->owner);
	sb->owner = xstrdup(shared_field(f, "owner"));
	free(sb->type_name);
	sb->type_name = xstrdup(shared_field(f, "type"));
	sb->type = sandbox_types_find(sb->type_name);
	free(sb->image);
	sb->image = xstrdup(shared_field(f, "image"));
	snprintf(sb->id, sizeof sb->id, "%s", shared_field(f, "id"));
	snprintf(sb->token, sizeof sb->token, "%s", shared_field(f, "token"));
	free(sb->agent_addr);
	sb->via_owner = via_owner(sb->name, f);
	sb->agent_addr = xstrdup(shared_field(f, sb->via_owner ? "api" :
	    "agent"));
	sb->port = atoi(shared_field(f, "port"));
	sb->state = parse_state(shared_field(f, "state"));
	free(sb->session);
	sb->session = dup_or_null(shared_field(f, "session"));
	if (json_is_object(meta)) {
		json_decref(sb->meta);
		sb->meta = meta;
	} else {
		json_decref(meta);
	}
	free(sb->container_id);
	sb->container_id = dup_or_null(shared_field(f, "container_id"));
	free(sb->mount_dir);
	sb->mount_dir = dup_or_null(shared_field(f, "mount_dir"));
	free(sb->storage_path);
	sb->storage_path = dup_or_null(shared_field(f, "storage_path"));
	sb->timeout = atof(shared_field(f, "timeout"));
	sb->created_at = atof(shared_field(f, "created_at"));
	sb->updated_at = atof(shared_field(f, "updated_at"));
	json_decref(sb->shared);
	sb->shared = json_incref(f);
	sandbox_changed(sb);
}

struct sandbox *
shared_mirror_add(const char *name, json_t *f)
{
	struct sandbox *sb = xcalloc(1, sizeof *sb);

	sb->name = xstrdup(name);
	sb->meta = json_object();
	sb->refs = 1;
	sb->listed = 1;
	shared_mirror_apply(sb, f);
	TAILQ_INSERT_TAIL(&mirror, sb, entry);
	return sb;
}

/* A record in Redis (f) of one of ours: what others asked of it. */
static void
own_apply(struct sandbox *sb, json_t *f)
{
	const char *state = shared_field(f, "state"), *session = shared_field(f, "session");

	if (strcmp(shared_field(f, "release"), "1") == 0 &&
	    sb->state != SB_RELEASED && sb->state != SB_RELEASING) {
		log_info("sandbox %s: release asked by another instance",
		    sb->name);
		lifecycle_release(sb, NULL, NULL);
		return;
	}
	/* Taken from the pool by another instance. */
	if (sb->state == SB_WARM && strcmp(state, "running") == 0) {
		json_t *meta = json_loads(shared_field(f, "meta"), 0, NULL);

		if (json_is_object(meta))
			json_object_update(sb->meta, meta);
		json_decref(meta);
		sandbox_set_state(sb, SB_RUNNING);
		if (*session != '\0')
			sessions_bind(sb, session);
		metrics_count(M_POOL_TAKES, sb->type_name);
		pool_refill();
	}
}

/* Reconcile a record of ours that has no sandbox here (any more). */
static void
own_orphan(const char *name, json_t *f)
{
	if (!sd.ready)
		return;
	log_info("shared state: removing the record of %s, whose container "
	    "is gone", name);
	delete_record(name, f);
}

static void
record_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	char *name = arg;
	redisReply *r = reply;
	struct sandbox *sb;
	json_t *f;

	(void)ac;
	if (r == NULL) {
		free(name);
		return;
	}
	f = shared_reply_fields(r);
	sb = sandbox_find_local(name);
	/* Released while Redis was away: its record goes now. */
	if (sb != NULL && sb->state == SB_RELEASED)
		sb = NULL;
	if (sb != NULL) {
		if (json_object_size(f) > 0)
			own_apply(sb, f);
	} else if (json_object_size(f) == 0) {
		if ((sb = shared_mirror_get(name)) != NULL)
			mirror_drop(sb);
	} else if (strcmp(shared_field(f, "owner"), state_instance()) == 0) {
		own_orphan(name, f);
	} else if ((sb = shared_mirror_get(name)) != NULL) {
		shared_mirror_apply(sb, f);
	} else {
		shared_mirror_add(name, f);
	}
	json_decref(f);
	free(name);
}

/* -1 when the command could not be sent. */
static int
fetch(const char *name)
{
	char *key = shared_key("sb:%s", name), *dup = xstrdup(name);
	int rc;

	if ((rc = shared_command(record_cb, dup, "HGETALL %s", key)) < 0)
		free(dup);
	free(key);
	return rc;
}

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

	record_cb(ac, reply, l->name);		/* frees the name */
	l->done(l->arg, reply != NULL);
	free(l);
}

/* cmd on key (the look-up's first step), answered to cb with a lookup
 * that holds name (may be NULL), done and arg. -1 while Redis is down. */
static int
lookup_start(const char *cmd, char *key, shared_reply_cb cb,
    const char *name, void (*done)(void *arg, int ok), void *arg)
{
	struct lookup *l;
	int rc = -1;

	if (shared_up()) {
		l = xcalloc(1, sizeof *l);
		l->name = name != NULL ? xstrdup(name) : NULL;
		l->done = done;
		l->arg = arg;
		if ((rc = shared_command(cb, l, "%s %s", cmd, key)) < 0) {
			free(l->name);
			free(l);
		}
	}
	free(key);
	return rc;
}

int
shared_lookup(const char *name, void (*done)(void *arg, int ok), void *arg)
{
	return lookup_start("HGETALL", shared_key("sb:%s", name), lookup_cb,
	    name, done, arg);
}

/* The records of a session's sandboxes none told us about yet: the names
 * bound to it in Redis, then each unknown one's record, then a PING whose
 * answer (in order on the one connection) says all were applied. */
static void
session_done_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	struct lookup *l = arg;

	(void)ac;
	l->done(l->arg, reply != NULL);
	free(l);
}

static void
session_members_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	struct lookup *l = arg;
	redisReply *r = reply;
	size_t fetched = 0;

	(void)ac;
	if (r == NULL) {
		l->done(l->arg, 0);
		free(l);
		return;
	}
	for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements;
	    i++) {
		const redisReply *m = r->element[i];

		if (m->type == REDIS_REPLY_STRING && sandbox_find(m->str) == NULL)
			fetched += fetch(m->str) == 0;
	}
	/* Every one known here already: nothing to wait for. */
	if (fetched == 0) {
		l->done(l->arg, 1);
		free(l);
	} else if (shared_command(session_done_cb, l, "PING") < 0) {
		l->done(l->arg, 0);
		free(l);
	}
}

int
shared_lookup_session(const char *session,
    void (*done)(void *arg, int ok), void *arg)
{
	return lookup_start("SMEMBERS", shared_key("session:%s", session),
	    session_members_cb, NULL, done, arg);
}

static void
event_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply, *msg;
	const char *sp;

	(void)ac;
	(void)arg;
	if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(r->element[0]->str, "message") != 0)
		return;
	msg = r->element[2];
	if (msg->type != REDIS_REPLY_STRING ||
	    (sp = strchr(msg->str, ' ')) == NULL)
		return;
	/* Our own announcements: we know. */
	if ((size_t)(sp - msg->str) == strlen(state_instance()) &&
	    strncmp(msg->str, state_instance(), (size_t)(sp - msg->str)) == 0)
		return;
	fetch(sp + 1);
}

void
shared_records_subscribe(struct redisAsyncContext *ac)
{
	redisAsyncCommand(ac, event_cb, NULL, "SUBSCRIBE %s", channel);
}

static void
members_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply;
	struct sandbox *sb, *next;

	(void)ac;
	(void)arg;
	if (r == NULL || r->type != REDIS_REPLY_ARRAY)
		return;
	/* What vanished while we were away goes; the rest is fetched. */
	for (sb = TAILQ_FIRST(&mirror); sb != NULL; sb = next) {
		size_t i;

		next = TAILQ_NEXT(sb, entry);
		for (i = 0; i < r->elements; i++) {
			if (r->element[i]->type == REDIS_REPLY_STRING &&
			    strcmp(r->element[i]->str, sb->name) == 0)
				break;
		}
		if (i == r->elements)
			mirror_drop(sb);
	}
	for (size_t i = 0; i < r->elements; i++) {
		if (r->element[i]->type == REDIS_REPLY_STRING)
			fetch(r->element[i]->str);
	}
}

void
shared_records_connected(void)
{
	const char *session;
	json_t *saved, *v;
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
	/* And the sessions' last activity, which the reaper reads. */
	saved = sessions_save();
	json_object_foreach(saved, session, v)
		shared_touch_session(session, json_number_value(v));
	json_decref(saved);
	names = shared_key("sandboxes");
	shared_command(members_cb, NULL, "SMEMBERS %s", names);
	free(names);
	names = shared_key("live");
	shared_command(shared_live_cb, NULL, "HGETALL %s", names);
	free(names);
	/* Creates waited for the connection. */
	pool_refill();
}

struct sandbox *
shared_first(void)
{
	return TAILQ_FIRST(&mirror);
}

struct sandbox *
shared_find(const char *identity)
{
	struct sandbox *sb;

	TAILQ_FOREACH(sb, &mirror, entry) {
		if (strcmp(sb->name, identity) == 0 || (sb->container_id !=
		    NULL && strcmp(sb->container_id, identity) == 0))
			return sb;
	}
	return NULL;
}

void
shared_session_names(const char *session, json_t *names)
{
	struct sandbox *sb;

	TAILQ_FOREACH(sb, &mirror, entry) {
		if (sb->session != NULL && strcmp(sb->session, session) == 0 &&
		    sb->state != SB_RELEASING && sb->state != SB_RELEASED)
			json_array_append_new(names, json_string(sb->name));
	}
}

void
shared_session_keys(json_t *keys)
{
	struct sandbox *sb;

	TAILQ_FOREACH(sb, &mirror, entry) {
		size_t i;
		json_t *v;

		if (sb->session == NULL || sb->state == SB_RELEASING ||
		    sb->state == SB_RELEASED)
			continue;
		json_array_foreach(keys, i, v) {
			if (strcmp(json_string_value(v), sb->session) == 0)
				break;
		}
		if (i == json_array_size(keys))
			json_array_append_new(keys, json_string(sb->session));
	}
}

size_t
shared_count_live(void)
{
	struct sandbox *sb;
	size_t n = 0;

	TAILQ_FOREACH(sb, &mirror, entry)
		n += sb->state != SB_RELEASED;
	return n;
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
	char *key = shared_key("sb:%s", sb->name);

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
	shared_command(shared_ignore_cb, NULL, "HSET %s release 1 state releasing",
	    key);
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
}

void
shared_records_free(void)
{
	struct sandbox *sb;

	if (sync_ev != NULL)
		event_free(sync_ev);
	if (tick_ev != NULL)
		event_free(tick_ev);
	sync_ev = tick_ev = NULL;
	while ((sb = TAILQ_FIRST(&mirror)) != NULL)
		mirror_drop(sb);
	free(channel);
	channel = NULL;
}
