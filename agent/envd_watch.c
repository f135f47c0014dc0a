/*
 * filesystem.Filesystem/WatchDir (a server stream) and the polled
 * watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher), over
 * inotify.
 *
 * The user's file helper checks the directory, makes the inotify instance
 * and adds the watches (so only directories that user may read are
 * watched), and hands the instance over; the agent reads its events on
 * the loop. A directory created under a recursive watch is added by the
 * helper too, given the instance. Events become envd's FilesystemEvents,
 * as fsnotify names them (create, write, remove, rename, chmod), with the
 * path relative to the watched directory, and, when asked, the EntryInfo
 * of what the event names, which the helper also looks up. Events go out
 * in the order they came; the lookups and additions they need run one at
 * a time, in that order.
 *
 * Bounded: WATCHERS_MAX watchers; QUEUE_MAX events waiting to go out (the
 * kernel's own queue holds the rest, then says it overflowed, which ends
 * the watch with an error, as fsnotify's does); POLLED_MAX events kept
 * for a polled watcher between two polls.
 */
#include "envd.h"
#include "envd_fs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/queue.h>
#include <sys/random.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "utf8.h"
#include "xmalloc.h"

#define WATCHERS_MAX	64
#define QUEUE_MAX	4096
#define POLLED_MAX	10000
#define STREAM_HIGH	(1024 * 1024)	/* stop reading past this */
#define READ_BUF	(64 * 1024)

enum wevent_kind { EV_EMIT, EV_ADD_DIR };

/* An event on its way out, or a directory to add; owned by the queue. */
struct wevent {
	TAILQ_ENTRY(wevent) entry;
	enum wevent_kind kind;
	char *name;		/* relative to the watched directory */
	const char *type;	/* EVENT_TYPE_* */
	int want_entry;
};

struct watch_dir {
	int wd;
	char *rel;
};

/* Owned by the module's list; a stream watcher ends with its stream. */
struct watcher {
	LIST_ENTRY(watcher) entry;
	char id[24];			/* polled: "w" and hex */
	struct agent *agent;
	struct envd_user user;
	char *root;			/* the watched directory */
	int recursive;
	int include_entry;
	int ifd;
	struct event *ev;
	int reading;
	struct watch_dir *dirs;
	size_t ndirs;
	TAILQ_HEAD(, wevent) queue;
	size_t nqueued;
	struct envd_fs_op *op;		/* the lookup or addition under way */
	struct envd_call *setup;	/* until the helper answered */
	struct envd_stream *stream;	/* WatchDir */
	json_t *events;			/* polled: since the last poll */
	struct error err;		/* polled: what ended it */
};

static LIST_HEAD(, watcher) watchers = LIST_HEAD_INITIALIZER(watchers);
static size_t nwatchers;

static void pump(struct watcher *w);

static void
wevent_free(struct wevent *e)
{
	free(e->name);
	free(e);
}

static void
watcher_free(struct watcher *w)
{
	struct wevent *e;

	LIST_REMOVE(w, entry);
	nwatchers--;
	if (w->op != NULL)
		envd_fs_cancel(w->op);
	if (w->ev != NULL)
		event_free(w->ev);
	if (w->ifd >= 0)
		close(w->ifd);
	for (size_t i = 0; i < w->ndirs; i++)
		free(w->dirs[i].rel);
	free(w->dirs);
	while ((e = TAILQ_FIRST(&w->queue)) != NULL) {
		TAILQ_REMOVE(&w->queue, e, entry);
		wevent_free(e);
	}
	json_decref(w->events);
	envd_user_clear(&w->user);
	free(w->root);
	free(w);
}

/* The watch cannot go on: a stream ends with err, a polled watcher keeps
 * it for its next poll. */
static void
watcher_broken(struct watcher *w, const struct error *err)
{
	if (w->stream != NULL) {
		envd_stream_end(w->stream, err);
		watcher_free(w);
		return;
	}
	w->err = *err;
	if (w->op != NULL) {
		envd_fs_cancel(w->op);
		w->op = NULL;
	}
	if (w->ev != NULL)
		event_del(w->ev);
	w->reading = 0;
}

static void
set_reading(struct watcher *w)
{
	int want = w->err.status == 0 && w->nqueued < QUEUE_MAX &&
	    (w->stream == NULL || envd_stream_pending(w->stream) < STREAM_HIGH);

	if (want && !w->reading)
		event_add(w->ev, NULL);
	else if (!want && w->reading)
		event_del(w->ev);
	w->reading = want;
}

static void
add_dirs(struct watcher *w, struct envd_fs_reply *r)
{
	json_t *items = envd_fs_items(r), *it;
	size_t i;

	json_array_foreach(items, i, it) {
		json_t *wd = json_array_get(it, 0), *rel = json_array_get(it, 1);

		if (!json_is_integer(wd) || !json_is_string(rel))
			continue;
		w->dirs = xreallocarray(w->dirs, w->ndirs + 1, sizeof *w->dirs);
		w->dirs[w->ndirs].wd = (int)json_integer_value(wd);
		w->dirs[w->ndirs++].rel = xstrdup(json_string_value(rel));
	}
	json_decref(items);
}

static struct watch_dir *
find_dir(struct watcher *w, int wd)
{
	for (size_t i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd)
			return &w->dirs[i];
	return NULL;
}

static void
drop_dir(struct watcher *w, int wd)
{
	struct watch_dir *d = find_dir(w, wd);

	if (d == NULL)
		return;
	free(d->rel);
	*d = w->dirs[--w->ndirs];
}

static void
emit(struct watcher *w, struct wevent *e, json_t *entry)
{
	json_t *fe = json_pack("{s:o, s:s}", "name", utf8_json_string(e->name,
	    strlen(e->name)), "type", e->type);
	struct error err;

	if (entry != NULL)
		json_object_set(fe, "entry", entry);
	if (w->stream != NULL) {
		envd_stream_send(w->stream, json_pack("{s:o}", "filesystem", fe));
		return;
	}
	if (json_array_size(w->events) >= POLLED_MAX) {
		json_decref(fe);
		error_set(&err, 429, "more than %d events since the last "
		    "GetWatcherEvents", POLLED_MAX);
		watcher_broken(w, &err);
		return;
	}
	json_array_append_new(w->events, fe);
}

static void
op_done(struct envd_fs_reply *r, void *arg)
{
	struct watcher *w = arg;
	struct wevent *e = TAILQ_FIRST(&w->queue);

	w->op = NULL;
	TAILQ_REMOVE(&w->queue, e, entry);
	w->nqueued--;
	if (e->kind == EV_ADD_DIR) {
		/* A directory gone meanwhile, or closed to the user, is
		 * simply not watched; any other failure (the user's limit of
		 * watches) ends the watch, as fsnotify's error does. */
		wevent_free(e);
		if (r->err.status != 0 && r->err.status != 404 &&
		    r->err.status != 403) {
			watcher_broken(w, &r->err);
			return;
		}
		add_dirs(w, r);
	} else {
		/* A lookup that fails leaves the event without its entry. */
		emit(w, e, r->err.status == 0 ? json_object_get(r->result,
		    "entry") : NULL);
		wevent_free(e);
	}
	if (w->err.status == 0 && (w->stream != NULL || w->events != NULL))
		pump(w);
}

/* Send what is ready at the head of the queue; start the helper call the
 * next event needs. A stream that broke meanwhile is gone: nothing may
 * touch w after pump returns in that case. */
static void
pump(struct watcher *w)
{
	struct wevent *e;
	char *path;

	while (w->op == NULL && w->err.status == 0 &&
	    (e = TAILQ_FIRST(&w->queue)) != NULL) {
		if (e->kind == EV_EMIT && !e->want_entry) {
			TAILQ_REMOVE(&w->queue, e, entry);
			w->nqueued--;
			emit(w, e, NULL);
			wevent_free(e);
			continue;
		}
		path = xasprintf("%s/%s", w->root, e->name);
		if (e->kind == EV_ADD_DIR)
			w->op = envd_fs_call(w->agent, &w->user, json_pack(
			    "{s:s, s:s, s:s}", "op", "watch_add", "path", path,
			    "dir", e->name), w->ifd, op_done, w);
		else
			w->op = envd_fs_call(w->agent, &w->user, json_pack(
			    "{s:s, s:s}", "op", "stat", "path", path), -1,
			    op_done, w);
		free(path);
	}
	if (w->err.status == 0)
		set_reading(w);
}

static void
enqueue(struct watcher *w, enum wevent_kind kind, const char *name,
    const char *type)
{
	struct wevent *e = xcalloc(1, sizeof *e);

	e->kind = kind;
	e->name = xstrdup(name);
	e->type = type;
	/* A name that is not UTF-8 cannot be asked about in JSON: its
	 * event goes without its entry, its directory unwatched. */
	if (kind == EV_ADD_DIR && !utf8_valid(name, strlen(name))) {
		free(e->name);
		free(e);
		return;
	}
	e->want_entry = kind == EV_EMIT && w->include_entry &&
	    utf8_valid(name, strlen(name)) &&
	    (strcmp(type, "EVENT_TYPE_CREATE") == 0 ||
	    strcmp(type, "EVENT_TYPE_WRITE") == 0 ||
	    strcmp(type, "EVENT_TYPE_CHMOD") == 0);
	TAILQ_INSERT_TAIL(&w->queue, e, entry);
	w->nqueued++;
}

/* One inotify event (name: what it names in its directory, maybe "")
 * as fsnotify reports it: one FilesystemEvent per operation it carries,
 * in fsnotify's order. */
static void
take_event(struct watcher *w, int wd, uint32_t mask, const char *name)
{
	static const struct {
		uint32_t mask;
		const char *type;
	} ops[] = {
		{ IN_CREATE | IN_MOVED_TO, "EVENT_TYPE_CREATE" },
		{ IN_MOVED_FROM | IN_MOVE_SELF, "EVENT_TYPE_RENAME" },
		{ IN_ATTRIB, "EVENT_TYPE_CHMOD" },
		{ IN_MODIFY, "EVENT_TYPE_WRITE" },
		{ IN_DELETE | IN_DELETE_SELF, "EVENT_TYPE_REMOVE" },
	};
	struct watch_dir *d = find_dir(w, wd);
	char *rel;

	if (mask & IN_IGNORED) {
		drop_dir(w, wd);
		return;
	}
	if (d == NULL)
		return;
	if (name[0] != '\0')
		rel = d->rel[0] ? xasprintf("%s/%s", d->rel, name) :
		    xstrdup(name);
	else if (d->rel[0] == '\0')
		rel = xstrdup(".");	/* the watched directory itself */
	else
		return;	/* its parent's watch told of it already */
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (mask & ops[i].mask)
			enqueue(w, EV_EMIT, rel, ops[i].type);
	if (w->recursive && (mask & IN_ISDIR) &&
	    (mask & (IN_CREATE | IN_MOVED_TO)))
		enqueue(w, EV_ADD_DIR, rel, NULL);
	free(rel);
}

/* Read what the kernel has while there is room in the queue. What a
 * helper handed over is checked as it is parsed (lengths inside what was
 * read). */
static void
read_events(struct watcher *w)
{
	char *buf = xmalloc(READ_BUF), *name;
	struct inotify_event ev;
	struct error err = { 0 };
	ssize_t n, off;

	while (err.status == 0 && w->nqueued < QUEUE_MAX &&
	    (n = read(w->ifd, buf, READ_BUF)) > 0) {
		for (off = 0; off + (ssize_t)sizeof ev <= n;
		    off += (ssize_t)(sizeof ev + ev.len)) {
			memcpy(&ev, buf + off, sizeof ev);
			if ((ssize_t)ev.len > n - off - (ssize_t)sizeof ev)
				break;
			if (ev.mask & IN_Q_OVERFLOW) {
				error_set(&err, 500, "watcher error: the event "
				    "queue overflowed");
				break;
			}
			/* The name is padded with NULs to its length. */
			name = xstrndup(buf + off + sizeof ev, ev.len);
			take_event(w, ev.wd, ev.mask, name);
			free(name);
		}
	}
	free(buf);
	if (err.status != 0) {
		watcher_broken(w, &err);
		return;
	}
	pump(w);
}

static void
inotify_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	read_events(arg);
}

static void
stream_gone(struct envd_stream *s, void *arg)
{
	struct watcher *w = arg;

	(void)s;
	w->stream = NULL;
	watcher_free(w);
}

static void
stream_drain(struct envd_stream *s, void *arg)
{
	(void)s;
	set_reading(arg);
}

/* The helper's inotify instance: it must be one (a helper is not
 * trusted). */
static int
is_inotify(int fd)
{
	char path[64], target[64];
	ssize_t n;

	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof target - 1);
	if (n < 0)
		return 0;
	target[n] = '\0';
	return strcmp(target, "anon_inode:inotify") == 0;
}

static void
setup_done(struct envd_fs_reply *r, void *arg)
{
	static const struct envd_stream_callbacks cb = { stream_gone,
	    stream_drain };
	struct watcher *w = arg;
	struct envd_call *call = w->setup;
	uint8_t rnd[8];

	w->op = NULL;
	w->setup = NULL;
	if (r->err.status == 0 && (r->fd < 0 || !is_inotify(r->fd)))
		error_set(&r->err, 500, "the file helper broke the protocol");
	if (r->err.status != 0) {
		watcher_free(w);
		envd_fail(call, &r->err);
		return;
	}
	w->ifd = r->fd;
	r->fd = -1;
	add_dirs(w, r);
	w->ev = event_new(w->agent->base, w->ifd, EV_READ | EV_PERSIST,
	    inotify_cb, w);
	if (w->events == NULL) {
		w->stream = envd_stream_open(call, "{\"keepalive\":{}}", &cb, w);
		envd_stream_send(w->stream, json_pack("{s:{}}", "start"));
	} else {
		if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
			fatal("getrandom failed");
		snprintf(w->id, sizeof w->id, "w%02x%02x%02x%02x%02x%02x%02x%02x",
		    rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6],
		    rnd[7]);
		envd_reply(call, json_pack("{s:s}", "watcherId", w->id));
	}
	set_reading(w);
}

static void
setup_closed(struct envd_call *call, void *arg)
{
	(void)call;
	watcher_free(arg);
}

/* Both kinds start alike: the helper makes the watch. */
static void
watcher_start(struct envd_call *call, json_t *msg, int polled)
{
	struct error err = { 0 };
	struct watcher *w;
	const char *path;
	int recursive, include, network;
	char *root;

	if (envd_json_string(msg, "path", NULL, &path, &err) < 0 ||
	    envd_json_bool(msg, "recursive", NULL, &recursive, &err) < 0 ||
	    envd_json_bool(msg, "includeEntry", "include_entry", &include,
	    &err) < 0 ||
	    envd_json_bool(msg, "allowNetworkMounts", "allow_network_mounts",
	    &network, &err) < 0 ||
	    (root = envd_path_resolve(envd_call_user(call), path, &err)) ==
	    NULL) {
		envd_fail(call, &err);
		return;
	}
	if (nwatchers >= WATCHERS_MAX) {
		free(root);
		error_set(&err, 429, "more than %d watchers at once",
		    WATCHERS_MAX);
		envd_fail(call, &err);
		return;
	}
	w = xcalloc(1, sizeof *w);
	w->agent = envd_call_agent(call);
	envd_user_copy(&w->user, envd_call_user(call));
	w->root = root;
	w->recursive = recursive;
	w->include_entry = include;
	w->ifd = -1;
	w->setup = call;
	w->events = polled ? json_array() : NULL;
	TAILQ_INIT(&w->queue);
	LIST_INSERT_HEAD(&watchers, w, entry);
	nwatchers++;
	w->op = envd_fs_call(w->agent, &w->user, json_pack("{s:s, s:s, s:b, "
	    "s:b}", "op", "watch", "path", root, "recursive", recursive,
	    "allowNetworkMounts", network), -1, setup_done, w);
	envd_call_on_close(call, setup_closed, w);
}

void
envd_watch_run(struct envd_call *call, json_t *msg)
{
	watcher_start(call, msg, 0);
}

void
envd_watcher_create(struct envd_call *call, json_t *msg)
{
	watcher_start(call, msg, 1);
}

/* A polled watcher by the id in msg; NULL when the call failed. */
static struct watcher *
find_polled(struct envd_call *call, json_t *msg)
{
	struct error err = { 0 };
	struct watcher *w;
	const char *id;

	if (envd_json_string(msg, "watcherId", "watcher_id", &id, &err) < 0) {
		envd_fail(call, &err);
		return NULL;
	}
	LIST_FOREACH(w, &watchers, entry)
		if (w->events != NULL && w->setup == NULL && id != NULL &&
		    strcmp(w->id, id) == 0)
			return w;
	error_set(&err, 404, "watcher with id %.100s not found",
	    id != NULL ? id : "");
	envd_fail(call, &err);
	return NULL;
}

void
envd_watcher_events(struct envd_call *call, json_t *msg)
{
	struct watcher *w = find_polled(call, msg);

	if (w == NULL)
		return;
	if (w->err.status != 0) {
		envd_fail(call, &w->err);
		return;
	}
	envd_reply(call, json_pack("{s:o}", "events", w->events));
	w->events = json_array();
	set_reading(w);
}

void
envd_watcher_remove(struct envd_call *call, json_t *msg)
{
	struct watcher *w = find_polled(call, msg);

	if (w == NULL)
		return;
	watcher_free(w);
	envd_reply(call, NULL);
}
