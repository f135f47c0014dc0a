/*
 * Re-adoption at start: ask the backend for the sandboxes of our instance;
 * each one the state file knows, whose container runs and whose agent
 * answers with its token, becomes a record again, with its session, port
 * and workspace; a paused one comes back paused, unprobed (its agent is
 * frozen). Every other container of ours is removed, and so are the
 * leftovers of saved records whose container is gone (socket directory,
 * workspace kept or deleted as a release would). If the backend does not
 * answer, adoption is retried until it does; pools fill only after it.
 */
#include "sandboxd.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "backend.h"
#include "log.h"
#include "oss.h"
#include "xmalloc.h"

#define ADOPT_PROBE_TIMEOUT 5.0
#define ADOPT_RETRY_SECONDS 2

/* The one adoption run; freed when done runs. */
struct adoption {
	adopt_done_cb done;
	void *arg;
	size_t pending;
	struct event *retry;
	int warned;
	json_t *seen;		/* names of containers found */
};

/* The run in progress, if any (for adopt_stop). */
static struct adoption *running;

static void adoption_step_done(struct adoption *a);

static void
removed_cb(const struct error *err, void *arg)
{
	struct adoption *a = arg;

	if (err != NULL)
		log_warn("adopt: %s", err->msg);
	adoption_step_done(a);
}

static void
remove_container(struct adoption *a, const char *id, const char *name,
    const char *why)
{
	log_info("adopt: removing container %s: %s", name, why);
	a->pending++;
	sd.backend->ops->remove(sd.backend, id, removed_cb, a);
}

static void
leftover_done_cb(const struct error *err, void *arg)
{
	if (err != NULL)
		log_warn("adopt: %s", err->msg);
	adoption_step_done(arg);
}

/* Whether a saved record's sandbox was handed out (its workspace is
 * worth keeping). */
static int
handed_out(json_t *rec)
{
	const char *st = json_string_value(json_object_get(rec, "state"));

	return st == NULL || (strcmp(st, "warm") != 0 &&
	    !(strcmp(st, "creating") == 0 &&
	    json_is_true(json_object_get(rec, "for_pool"))));
}

/* sb as the state file saved it. */
static void
read_record(struct sandbox *sb, json_t *rec)
{
	struct error err;

	if (sandbox_record_read(sb, rec, SANDBOX_STATE, &err) < 0)
		log_warn("adopt: %s: its saved %s; the type's policy holds",
		    sb->name, err.msg);
}

/* FILE_SYSTEM=oss: a released record whose workspace is not uploaded yet
 * (sandboxd stopped first, or the store failed); its release uploads it,
 * in the background: adoption does not wait for the store. */
static void
upload_later(json_t *rec)
{
	const struct sandbox_type *type = sandbox_types_find(
	    json_string_value(json_object_get(rec, "type")));
	const char *name = json_string_value(json_object_get(rec, "name"));
	struct sandbox *sb;

	if (type == NULL || name == NULL) {
		log_warn("adopt: the workspace of %s is left where it is: its "
		    "type is no longer defined", name != NULL ? name : "?");
		return;
	}
	sb = sandbox_new(type);
	read_record(sb, rec);
	sb->state = SB_RELEASED;
	sb->workspace_unsaved = 1;
	sandbox_changed(sb);
	lifecycle_release(sb, NULL, NULL);
}

/* What a release would have done with a saved record's workspace. */
static void
clean_leftovers(struct adoption *a, json_t *rec)
{
	const char *id = json_string_value(json_object_get(rec, "id"));
	const char *mount = json_string_value(json_object_get(rec, "mount_dir"));
	const char *storage = json_string_value(json_object_get(rec,
	    "storage_path"));
	int owns = json_is_true(json_object_get(rec, "owns_mount"));
	char *sock;

	if (id == NULL || strlen(id) != 16)
		return;
	sock = xasprintf("%s/run/%s", sd.cfg.state_dir, id);
	workspace_remove_sock_dir(sock);
	free(sock);
	if (mount == NULL || !workspace_is_dir(mount))
		return;
	if (storage != NULL && oss_enabled() && handed_out(rec)) {
		upload_later(rec);
		return;
	}
	if (storage != NULL && sd.cfg.storage_folder != NULL) {
		a->pending++;
		workspace_keep(mount, storage, owns, leftover_done_cb, a);
	} else if (owns) {
		a->pending++;
		workspace_remove(mount, leftover_done_cb, a);
	}
}

/* The state a record comes back in. One saved while still creating for
 * the pool (sandboxd died within the state file's write delay of its
 * start) goes back to the pool: nobody was handed it. */
static enum sandbox_state
saved_state(const char *name, const struct sandbox *sb)
{
	if (name != NULL && strcmp(name, "warm") == 0)
		return SB_WARM;
	if (name != NULL && strcmp(name, "creating") == 0 && sb->for_pool &&
	    sb->session == NULL)
		return SB_WARM;
	if (name != NULL && strcmp(name, "stopped") == 0)
		return SB_STOPPED;
	return SB_RUNNING;
}

/* A record back from the state file; CREATING until its agent answers. */
static struct sandbox *
restore(json_t *rec, const struct sandbox_type *type,
    const struct backend_container *c)
{
	struct sandbox *sb = sandbox_new(type);

	read_record(sb, rec);
	/* Not ready until its agent answers: the saved state is the one it
	 * comes back in then (saved_state). */
	sb->state = SB_CREATING;
	free(sb->container_id);
	sb->container_id = xstrdup(c->id);
	if (sb->session != NULL)
		sessions_ensure(sb->session);
	sb->sock_dir = xasprintf("%s/run/%s", sd.cfg.state_dir, sb->id);
	sb->agent_addr = xstrdup(c->agent_addr);
	sandbox_changed(sb);
	if (sb->port > 0 && ports_reserve(sd.ports, sb->port) < 0)
		log_warn("adopt: %s keeps port %d, outside PORT_RANGE or taken",
		    sb->name, sb->port);
	return sb;
}

/* An adopted record whose agent does not answer goes, as a release. */
static void
unadopted_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	(void)sb;
	if (err != NULL)
		log_warn("adopt: %s", err->msg);
	adoption_step_done(arg);
}

/* Its rules outlived us in its namespace, its resolver did not: both
 * are put in again; one that cannot be policed goes. */
static void
policed_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	if (err != NULL) {
		log_warn("adopt: %s: removing it", err->msg);
		lifecycle_release(sb, unadopted_cb, arg);
		return;
	}
	adoption_step_done(arg);
}

static void
probed_cb(struct sandbox *sb, int ok, const char *why, void *arg)
{
	struct adoption *a = arg;
	json_t *rec = state_saved(sb->name);
	const char *st = json_string_value(json_object_get(rec, "state"));

	if (!ok) {
		log_warn("adopt: %s does not answer (%s): removing it", sb->name,
		    why);
		sandbox_set_state(sb, saved_state(st, sb));
		lifecycle_release(sb, unadopted_cb, a);
		return;
	}
	sandbox_set_state(sb, saved_state(st, sb));
	metrics_count(M_ADOPTED, sb->type_name);
	log_info("adopt: took back %s (%s, %s%s%s)", sb->name, sb->type_name,
	    sandbox_state_name(sb->state), sb->session ? ", session " : "",
	    sb->session ? sb->session : "");
	lifecycle_police(sb, policed_cb, a);
}

static void
adopt_one(struct adoption *a, const struct backend_container *c)
{
	json_t *rec = state_saved(c->name);
	const struct sandbox_type *type;
	const char *tname, *st;
	struct sandbox *sb;

	json_object_set_new(a->seen, c->name, json_true());
	if (rec == NULL) {
		remove_container(a, c->id, c->name, "the state file does not "
		    "know it");
		return;
	}
	tname = json_string_value(json_object_get(rec, "type"));
	type = sandbox_types_find(tname);
	st = json_string_value(json_object_get(rec, "state"));
	if (type == NULL || json_string_value(json_object_get(rec, "token")) ==
	    NULL || json_string_value(json_object_get(rec, "id")) == NULL ||
	    c->agent_addr == NULL) {
		remove_container(a, c->id, c->name, type == NULL ? "its type "
		    "is no longer defined" : "its record or its agent's "
		    "address is missing");
		clean_leftovers(a, rec);
		return;
	}
	sb = restore(rec, type, c);
	if (st != NULL && strcmp(st, "stopped") == 0) {
		sandbox_set_state(sb, SB_STOPPED);
		return;
	}
	/* Paused whatever the record says (sandboxd may have died before
	 * it wrote the pause down): the container is what it is. */
	if (c->state == BACKEND_PAUSED) {
		sandbox_set_state(sb, SB_PAUSED);
		metrics_count(M_ADOPTED, sb->type_name);
		log_info("adopt: took back %s (%s, paused)", sb->name,
		    sb->type_name);
		a->pending++;
		lifecycle_police(sb, policed_cb, a);
		return;
	}
	if (c->state != BACKEND_RUNNING) {
		log_info("adopt: %s is %s: removing it", c->name,
		    backend_state_name(c->state));
		sandbox_set_state(sb, saved_state(st, sb));
		a->pending++;
		lifecycle_release(sb, unadopted_cb, a);
		return;
	}
	a->pending++;
	agent_probe(sb, ADOPT_PROBE_TIMEOUT, probed_cb, a);
}

/* Socket directories no record owns (a crash between steps). */
static void
clean_run_dir(void)
{
	char *run = xasprintf("%s/run", sd.cfg.state_dir);
	DIR *d = opendir(run);
	struct dirent *e;

	while (d != NULL && (e = readdir(d)) != NULL) {
		struct sandbox *sb;
		int known = 0;
		char *dir;

		if (e->d_name[0] == '.')
			continue;
		for (sb = sandbox_first(); sb != NULL; sb = sandbox_next(sb))
			known |= strcmp(sb->id, e->d_name) == 0;
		if (known)
			continue;
		dir = xasprintf("%s/%s", run, e->d_name);
		workspace_remove_sock_dir(dir);
		free(dir);
	}
	if (d != NULL)
		closedir(d);
	free(run);
}

static void
adoption_step_done(struct adoption *a)
{
	if (--a->pending > 0)
		return;
	clean_run_dir();
	state_loaded_free();
	state_dirty();
	log_info("adopt: done, %zu sandboxes live", sandbox_count_live());
	running = NULL;
	a->done(a->arg);
	if (a->retry != NULL)
		event_free(a->retry);
	json_decref(a->seen);
	free(a);
}

static void list_cb(const struct backend_container *v, size_t n,
    const struct error *err, void *arg);

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct adoption *a = arg;

	(void)fd;
	(void)what;
	sd.backend->ops->list_ours(sd.backend, state_instance(), 0, list_cb,
	    a);
}

static void
list_cb(const struct backend_container *v, size_t n,
    const struct error *err, void *arg)
{
	struct adoption *a = arg;
	struct timeval tv = { ADOPT_RETRY_SECONDS, 0 };
	json_t *all, *rec;
	const char *name;

	if (err != NULL) {
		if (!a->warned)
			log_warn("adopt: cannot list containers (retrying every "
			    "%d s): %s", ADOPT_RETRY_SECONDS, err->msg);
		a->warned = 1;
		if (a->retry == NULL)
			a->retry = evtimer_new(sd.base, retry_cb, a);
		evtimer_add(a->retry, &tv);
		return;
	}
	a->pending = 1;
	for (size_t i = 0; i < n; i++)
		adopt_one(a, &v[i]);
	all = state_saved_all();
	json_object_foreach(all, name, rec) {
		if (json_object_get(a->seen, name) == NULL)
			clean_leftovers(a, rec);
	}
	adoption_step_done(a);
}

void
adopt_stop(void)
{
	struct adoption *a = running;

	/* Only a run still waiting for Docker to answer stops here; one
	 * with steps in flight finishes on its own. */
	if (a == NULL || a->pending > 0)
		return;
	running = NULL;
	if (a->retry != NULL)
		event_free(a->retry);
	json_decref(a->seen);
	free(a);
}

void
adopt_start(adopt_done_cb done, void *arg)
{
	struct adoption *a = xcalloc(1, sizeof *a);

	running = a;
	a->done = done;
	a->arg = arg;
	a->seen = json_object();
	sd.backend->ops->list_ours(sd.backend, state_instance(), 0, list_cb,
	    a);
}
