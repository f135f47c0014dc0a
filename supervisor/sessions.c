/*
 * Sessions: a session_ctx_id binds sandboxes together (meta.session_ctx_id
 * on create, or our /v1/sessions/connect). Every call that goes through us to
 * one of its sandboxes counts as activity; a session idle for longer than
 * HEARTBEAT_TIMEOUT has its sandboxes released by the reaper, but for
 * paused ones (lifecycle_pause): their clock stands still. Which
 * sessions have live sandboxes is found in one pass over the records and
 * a sorted list (live_sessions), not one pass per session: at 1000
 * sessions of one sandbox each that is 1000 comparisons, not a million,
 * for list_session_keys and for every turn of the reaper.
 */
#include "sandboxd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "log.h"
#include "shared.h"
#include "xmalloc.h"

/* Activity is saved to the state file at this granularity, not on every
 * call. */
#define SAVE_GRANULARITY 5.0
/* And to Redis (REDIS_ENABLED), which every instance's reaper reads. */
#define SHARED_GRANULARITY 1.0

/* Owned by the session list. */
struct session {
	LIST_ENTRY(session) entry;
	char *id;
	double last;		/* last activity, epoch seconds */
	double saved;		/* last value the state file has */
	double shared;		/* last value written to Redis */
};

static LIST_HEAD(, session) sessions = LIST_HEAD_INITIALIZER(sessions);
static struct event *reap_ev;

static struct session *
find(const char *id)
{
	struct session *s;

	LIST_FOREACH(s, &sessions, entry) {
		if (strcmp(s->id, id) == 0)
			return s;
	}
	return NULL;
}

static struct session *
get(const char *id)
{
	struct session *s = find(id);

	if (s == NULL) {
		s = xcalloc(1, sizeof *s);
		s->id = xstrdup(id);
		s->last = timing_wall();
		LIST_INSERT_HEAD(&sessions, s, entry);
		state_dirty();
	}
	return s;
}

static void
session_free(struct session *s)
{
	LIST_REMOVE(s, entry);
	free(s->id);
	free(s);
}

void
sessions_touch(const char *id)
{
	struct session *s;

	if (id == NULL)
		return;
	s = get(id);
	s->last = timing_wall();
	if (shared_enabled() && s->last - s->shared >= SHARED_GRANULARITY) {
		s->shared = s->last;
		shared_touch_session(id, s->last);
	}
	if (fabs(s->last - s->saved) >= SAVE_GRANULARITY) {
		s->saved = s->last;
		state_dirty();
	}
}

void
sessions_touch_sandbox(struct sandbox *sb)
{
	sessions_touch(sb->session);
}

void
sessions_bind(struct sandbox *sb, const char *id)
{
	free(sb->session);
	sb->session = id != NULL ? xstrdup(id) : NULL;
	if (id != NULL) {
		json_object_set_new(sb->meta, "session_ctx_id", json_string(id));
		sessions_touch(id);
	}
	sandbox_changed(sb);
}

static int
bound_live(const struct sandbox *sb, const char *id)
{
	return sb->session != NULL && strcmp(sb->session, id) == 0 &&
	    sb->state != SB_RELEASED && sb->state != SB_RELEASING;
}

/* Whether an idle session id's reaper releases sb: bound to it, live,
 * not paused. */
static int
reapable(const struct sandbox *sb, const char *id)
{
	return bound_live(sb, id) && sb->state != SB_PAUSED;
}

json_t *
sessions_mapping(const char *id)
{
	json_t *names = json_array();
	struct sandbox *sb;

	for (sb = sandbox_first(); sb != NULL; sb = sandbox_next(sb)) {
		if (bound_live(sb, id))
			json_array_append_new(names, json_string(sb->name));
	}
	if (shared_enabled())
		shared_session_names(id, names);
	return names;
}

/* The session ids that live sandboxes are bound to, sorted, borrowed
 * from the records (valid until one changes). Caller frees the array. */
struct live_sessions {
	const char **ids;
	size_t n;
};

static int
compare_ids(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void
live_sessions_collect(struct live_sessions *l)
{
	struct sandbox *sb;
	size_t cap = 0;

	l->ids = NULL;
	l->n = 0;
	for (sb = sandbox_first(); sb != NULL; sb = sandbox_next(sb)) {
		if (sb->session == NULL || !bound_live(sb, sb->session))
			continue;
		if (l->n == cap) {
			cap = cap == 0 ? 64 : 2 * cap;
			l->ids = xreallocarray(l->ids, cap, sizeof *l->ids);
		}
		l->ids[l->n++] = sb->session;
	}
	if (l->n > 1)
		qsort(l->ids, l->n, sizeof *l->ids, compare_ids);
}

static int
live_sessions_has(const struct live_sessions *l, const char *id)
{
	return l->n > 0 && bsearch(&id, l->ids, l->n, sizeof *l->ids,
	    compare_ids) != NULL;
}

json_t *
sessions_keys(void)
{
	json_t *keys = json_array();
	struct live_sessions live;
	struct session *s;

	live_sessions_collect(&live);
	LIST_FOREACH(s, &sessions, entry) {
		if (live_sessions_has(&live, s->id))
			json_array_append_new(keys, json_string(s->id));
	}
	free(live.ids);
	if (shared_enabled())
		shared_session_keys(keys);
	return keys;
}

size_t
sessions_count(void)
{
	struct live_sessions live;
	struct session *s;
	size_t n = 0;

	live_sessions_collect(&live);
	LIST_FOREACH(s, &sessions, entry)
		n += live_sessions_has(&live, s->id);
	free(live.ids);
	return n;
}

char *
sessions_ctx_id(const char *session_id, const char *user_id)
{
	if (user_id == NULL || *user_id == '\0')
		return xstrdup(session_id);
	return xasprintf("%s_%s", session_id, user_id);
}

/* The state file's "sessions": {id: last activity, epoch seconds}. */
static json_t *
save(void)
{
	json_t *obj = json_object();
	struct session *s;

	LIST_FOREACH(s, &sessions, entry)
		json_object_set_new(obj, s->id, json_real(s->last));
	return obj;
}

static void
restore(json_t *saved)
{
	const char *id;
	json_t *v;

	if (!json_is_object(saved))
		return;
	json_object_foreach(saved, id, v) {
		struct session *s;

		if (!json_is_number(v))
			continue;
		s = get(id);
		s->last = s->saved = json_number_value(v);
	}
}

static void
reaped_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	(void)arg;
	if (err != NULL)
		log_warn("session reaper: cannot release %s: %s", sb->name,
		    err->msg);
}

/* Seconds between reaper rounds. */
static double
reap_interval(void)
{
	double t = sd.cfg.heartbeat_timeout > 0 ?
	    sd.cfg.heartbeat_timeout / 4 : 5;

	if (t < 0.2)
		t = 0.2;
	if (t > 5)
		t = 5;
	return t;
}

/* Release the live sandboxes of session id, idle for idle seconds, but
 * the paused ones, wherever they are (another instance's through its
 * owner); the number of live ones bound to it. */
static size_t
release_idle(const char *id, double idle)
{
	json_t *names = sessions_mapping(id), *name;
	size_t i, n = json_array_size(names);
	int said = 0;

	json_array_foreach(names, i, name) {
		struct sandbox *sb = sandbox_resolve(json_string_value(name));

		if (sb == NULL || !reapable(sb, id))
			continue;
		if (!said)
			log_info("session %s idle for %.0f s (HEARTBEAT_TIMEOUT "
			    "%.0f): releasing its sandboxes", id, idle,
			    sd.cfg.heartbeat_timeout);
		said = 1;
		lifecycle_release(sb, reaped_cb, NULL);
	}
	json_decref(names);
	return n;
}

static void
reap_cb(evutil_socket_t fd, short what, void *arg)
{
	double now = timing_wall(), timeout = sd.cfg.heartbeat_timeout;
	struct live_sessions live;
	struct session *s, *next;

	(void)fd;
	(void)what;
	(void)arg;
	/* The ids are borrowed from the records: releases started below
	 * only begin (their callbacks run on later turns of the loop), so
	 * every record outlives this one. */
	live_sessions_collect(&live);
	for (s = LIST_FIRST(&sessions); s != NULL; s = next) {
		next = LIST_NEXT(s, entry);
		if (!live_sessions_has(&live, s->id)) {
			/* Nothing bound: keep an empty session only while it
			 * could still be fresh (a connect in flight). */
			if (now - s->last > 60) {
				session_free(s);
				state_dirty();
			}
			continue;
		}
		/* With Redis, one instance reaps for all (shared_reap). */
		if (shared_enabled() || timeout <= 0 || now - s->last <= timeout)
			continue;
		release_idle(s->id, now - s->last);
		/* Touch it so it is not reaped again while releases run. */
		s->last = now;
	}
	free(live.ids);
	if (shared_enabled())
		shared_reap(reap_interval(), release_idle);
}

/* Redis back (maybe restarted empty): the reaper reads our sessions'
 * last activity there. */
static void
shared_up_cb(void)
{
	struct session *s;

	LIST_FOREACH(s, &sessions, entry)
		shared_touch_session(s->id, s->last);
}

void
sessions_init(void)
{
	double t = reap_interval();
	struct timeval tv;

	tv = timing_timeval(t);
	reap_ev = event_new(sd.base, -1, EV_PERSIST, reap_cb, NULL);
	event_add(reap_ev, &tv);
	restore(state_loaded_section("sessions"));
	state_add_section("sessions", save);
	metrics_gauge_add("sandboxd_sessions", "Sessions with live sandboxes.",
	    sessions_count);
	if (shared_enabled())
		shared_on_up(shared_up_cb);
}

void
sessions_ensure(const char *id)
{
	if (id != NULL)
		get(id);
}

void
sessions_stop(void)
{
	if (reap_ev != NULL)
		event_free(reap_ev);
	reap_ev = NULL;
}

void
sessions_free(void)
{
	struct session *s;

	sessions_stop();
	while ((s = LIST_FIRST(&sessions)) != NULL)
		session_free(s);
}
