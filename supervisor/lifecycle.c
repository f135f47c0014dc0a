/*
 * The life of a sandbox: create (lifecycle_create.c: workspace, socket
 * directory, container, then wait until its agent answers /healthz with
 * its token), release (remove the container, keep or delete the workspace,
 * give the port back), start, stop, pause and resume, and a sample of what
 * a sandbox uses (stats). Each is a chain of callbacks; one
 * operation runs per sandbox at a time (struct lifecycle_op, here), and a
 * release asked for meanwhile runs right after. Their done callbacks run
 * after lifecycle_* returned, also with an answer at hand (already
 * released, busy): the contract of every callback in sandboxd (defer.c).
 */
#include "sandboxd.h"

#include <stdarg.h>
#include <stdlib.h>

#include <event2/event.h>

#include "backend.h"
#include "lifecycle_internal.h"
#include "egress.h"
#include "log.h"
#include "oss.h"
#include "shared.h"
#include "xmalloc.h"

/* Told when a release ends; owned by the sandbox's waiter list. */
struct sandbox_waiter {
	struct sandbox_waiter *next;
	sandbox_done_cb done;
	void *arg;
};

static size_t busy;

static void begin_release(struct sandbox *sb);

size_t
lifecycle_busy(void)
{
	return busy;
}

struct lifecycle_op *
lifecycle_op_new(struct sandbox *sb, enum lifecycle_op_kind kind,
    sandbox_done_cb done, void *arg)
{
	struct lifecycle_op *op = xcalloc(1, sizeof *op);

	op->kind = kind;
	op->sb = sb;
	op->done = done;
	op->arg = arg;
	op->started = timing_monotonic();
	op->delay = 0.005;
	op->prev_state = sb->state;
	sandbox_ref(sb);
	sb->op = op;
	busy++;
	return op;
}

/* End op; then run a release that was asked for meanwhile. */
void
lifecycle_op_end(struct lifecycle_op *op)
{
	struct sandbox *sb = op->sb;

	if (op->timer != NULL)
		event_free(op->timer);
	sb->op = NULL;
	busy--;
	free(op);
	if (sb->release_requested && sb->state != SB_RELEASED && sb->listed) {
		sb->release_requested = 0;
		begin_release(sb);
	}
	sandbox_unref(sb);
}

static void
add_waiter(struct sandbox *sb, sandbox_done_cb done, void *arg)
{
	struct sandbox_waiter *w = xcalloc(1, sizeof *w), **p;

	w->done = done;
	w->arg = arg;
	for (p = &sb->waiters; *p != NULL; p = &(*p)->next)
		;
	*p = w;
}

void
lifecycle_notify_waiters(struct sandbox *sb, const struct error *err)
{
	struct sandbox_waiter *w;

	while ((w = sb->waiters) != NULL) {
		sb->waiters = w->next;
		if (w->done != NULL)
			w->done(sb, err, w->arg);
		free(w);
	}
}

/* An answer at hand (already released, busy), given from the loop: done
 * never runs before its lifecycle_* call returned. Holds a reference to
 * sb until then. */
struct early_answer {
	struct sandbox *sb;
	sandbox_done_cb done;
	void *arg;
	struct error err;
	int failed;			/* err is set */
};

static void
early_answer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct early_answer *a = arg;

	(void)fd;
	(void)what;
	a->done(a->sb, a->failed ? &a->err : NULL, a->arg);
	sandbox_unref(a->sb);
	free(a);
}

static void
answer_later(struct sandbox *sb, sandbox_done_cb done, void *arg,
    const struct error *err)
{
	struct early_answer *a = xcalloc(1, sizeof *a);

	a->sb = sb;
	a->done = done;
	a->arg = arg;
	if (err != NULL) {
		a->err = *err;
		a->failed = 1;
	}
	sandbox_ref(sb);
	sandboxd_defer(early_answer_cb, a);
}

/* answer_later with a 409 saying why. */
static void refuse(struct sandbox *sb, sandbox_done_cb done, void *arg,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void
refuse(struct sandbox *sb, sandbox_done_cb done, void *arg, const char *fmt,
    ...)
{
	struct error err;
	va_list ap;

	va_start(ap, fmt);
	error_vset(&err, 409, fmt, ap);
	va_end(ap);
	answer_later(sb, done, arg, &err);
}

/* Releasing. */

static void
released(struct lifecycle_op *op, const struct error *err)
{
	struct sandbox *sb = op->sb;

	/* Creates that wait for this storage_path go on (a mark another
	 * instance set when it asked for this release). */
	if (oss_enabled() && shared_enabled() && sb->storage_path != NULL)
		shared_upload_clear(sb->storage_path);
	/* A retried upload's sandbox was released before. */
	if (sb->state != SB_RELEASED) {
		sandbox_set_state(sb, SB_RELEASED);
		metrics_count(M_RELEASES, sb->type_name);
		log_info("sandbox %s released", sb->name);
	}
	lifecycle_notify_waiters(sb, err);
	lifecycle_op_end(op);
}

static void
kept_cb(const struct error *err, void *arg)
{
	struct lifecycle_op *op = arg;

	/* The container is gone either way; the workspace stays where it
	 * was and the log says why. */
	if (err != NULL)
		log_error("sandbox %s: %s", op->sb->name, err->msg);
	released(op, NULL);
}

static void
uploaded_cb(const struct error *err, void *arg)
{
	struct lifecycle_op *op = arg;
	struct sandbox *sb = op->sb;

	if (err != NULL) {
		struct error e = *err;

		/* Kept on this host, and in the state file, until an upload
		 * goes through. */
		sb->workspace_unsaved = 1;
		sandbox_changed(sb);
		error_prefix(&e, "sandbox %s is released, but its workspace "
		    "could not be uploaded to object storage (it is kept on "
		    "this host; release the sandbox again to retry)", sb->name);
		sandbox_set_error(sb, "%s", e.msg);
		released(op, &e);
		return;
	}
	if (sb->workspace_unsaved) {
		sb->workspace_unsaved = 0;
		sandbox_changed(sb);
	}
	if (sb->owns_mount)
		workspace_remove(sb->mount_dir, kept_cb, op);
	else
		released(op, NULL);
}

/* FILE_SYSTEM=oss keeps the workspace of a sandbox that was handed out
 * (a warm one's holds nothing anyone wrote). */
static int
upload_wanted(const struct lifecycle_op *op)
{
	const struct sandbox *sb = op->sb;

	return oss_enabled() && sb->storage_path != NULL &&
	    sb->mount_dir != NULL && op->prev_state != SB_WARM &&
	    workspace_is_dir(sb->mount_dir);
}

static void
removed_cb(const struct error *err, void *arg)
{
	struct lifecycle_op *op = arg;
	struct sandbox *sb = op->sb;

	if (err != NULL) {
		struct error e = *err;

		error_prefix(&e, "cannot release %s", sb->name);
		sb->state = op->prev_state;
		sandbox_set_error(sb, "%s", e.msg);
		lifecycle_notify_waiters(sb, &e);
		lifecycle_op_end(op);
		return;
	}
	if (sb->port > 0)
		ports_release(sd.ports, sb->port);
	if (sb->sock_dir != NULL)
		workspace_remove_sock_dir(sb->sock_dir);
	if (upload_wanted(op)) {
		oss_upload(sb->name, sb->mount_dir, sb->storage_path,
		    uploaded_cb, op);
		return;
	}
	if (sb->storage_path != NULL && sd.cfg.storage_folder != NULL &&
	    sb->mount_dir != NULL && workspace_is_dir(sb->mount_dir)) {
		workspace_keep(sb->mount_dir, sb->storage_path, sb->owns_mount,
		    kept_cb, op);
		return;
	}
	if (sb->owns_mount && sb->mount_dir != NULL) {
		workspace_remove(sb->mount_dir, kept_cb, op);
		return;
	}
	released(op, NULL);
}

static void
begin_release(struct sandbox *sb)
{
	struct lifecycle_op *op = lifecycle_op_new(sb, OP_RELEASE, NULL, NULL);

	sandbox_set_state(sb, SB_RELEASING);
	egress_free(sb->egress);
	sb->egress = NULL;
	sd.backend->ops->remove(sd.backend, lifecycle_backend_id(sb),
	    removed_cb, op);
}

void
lifecycle_release(struct sandbox *sb, sandbox_done_cb done, void *arg)
{
	if (sb->owner != NULL && sb->state != SB_RELEASED &&
	    sb->state != SB_RELEASING) {
		shared_release_remote(sb, done, arg);
		return;
	}
	if (sb->state == SB_RELEASED && sb->workspace_unsaved &&
	    sb->op == NULL && !workspace_is_dir(sb->mount_dir)) {
		/* Removed by hand meanwhile: nothing left to upload. */
		sb->workspace_unsaved = 0;
		sandbox_changed(sb);
	}
	/* Released, its workspace not uploaded: this release uploads it
	 * (or waits for the upload under way). */
	if (sb->state == SB_RELEASED && sb->workspace_unsaved &&
	    oss_enabled() && sb->owner == NULL) {
		add_waiter(sb, done, arg);
		if (sb->op == NULL) {
			struct lifecycle_op *op = lifecycle_op_new(sb,
			    OP_RELEASE, NULL, NULL);

			log_info("sandbox %s: uploading its workspace again",
			    sb->name);
			oss_upload(sb->name, sb->mount_dir, sb->storage_path,
			    uploaded_cb, op);
		}
		return;
	}
	if (sb->state == SB_RELEASED || (sb->owner != NULL &&
	    sb->state == SB_RELEASING)) {
		if (done != NULL)
			answer_later(sb, done, arg, NULL);
		return;
	}
	add_waiter(sb, done, arg);
	if (sb->op != NULL) {
		/* Runs when the operation in progress ends. */
		if (sb->op->kind != OP_RELEASE)
			sb->release_requested = 1;
		return;
	}
	begin_release(sb);
}

/* Another instance asked for the release of one of ours (its record says
 * so, signed). */
static void
release_asked(struct sandbox *sb)
{
	log_info("sandbox %s: release asked by another instance", sb->name);
	lifecycle_release(sb, NULL, NULL);
}

void
lifecycle_init(void)
{
	if (shared_enabled())
		shared_on_release_asked(release_asked);
}

/* Starting, stopping, pausing and resuming. */

/* 0 when sb is ours, released or not, and idle, else -1 and done gets
 * why (409). */
static int
busy_error(struct sandbox *sb, const char *verb, sandbox_done_cb done,
    void *arg)
{
	if (sb->owner != NULL)
		/* Only the owner talks to its backend. */
		refuse(sb, done, arg, "sandbox %s belongs to sandboxd instance "
		    "%s; %s it there", sb->name, sb->owner, verb);
	else if (sb->op == NULL && sb->state != SB_RELEASED)
		return 0;
	else if (sb->state == SB_RELEASED || sb->state == SB_RELEASING)
		refuse(sb, done, arg, "sandbox %s is released", sb->name);
	else
		refuse(sb, done, arg, "sandbox %s is busy (%s)", sb->name,
		    sandbox_state_name(sb->state));
	return -1;
}

static void
backend_started_cb(const struct error *err, void *arg)
{
	struct lifecycle_op *op = arg;

	if (err != NULL) {
		lifecycle_fail_op(op, err);
		return;
	}
	lifecycle_police_then_wait(op);
}

void
lifecycle_start(struct sandbox *sb, sandbox_done_cb done, void *arg)
{
	struct lifecycle_op *op;

	if (busy_error(sb, "start", done, arg) < 0)
		return;
	if (sb->state == SB_PAUSED) {
		/* The engine would refuse, and the sandbox is not at fault. */
		refuse(sb, done, arg, "sandbox %s is paused; resume it",
		    sb->name);
		return;
	}
	op = lifecycle_op_new(sb, OP_START, done, arg);
	sd.backend->ops->start(sd.backend, lifecycle_backend_id(sb),
	    backend_started_cb, op);
}

static void
backend_stopped_cb(const struct error *err, void *arg)
{
	struct lifecycle_op *op = arg;

	if (err == NULL) {
		sandbox_set_state(op->sb, SB_STOPPED);
		/* Its namespace went with its processes; a start makes a new
		 * one and polices it again. */
		egress_free(op->sb->egress);
		op->sb->egress = NULL;
	}
	op->done(op->sb, err, op->arg);
	lifecycle_op_end(op);
}

void
lifecycle_stop(struct sandbox *sb, sandbox_done_cb done, void *arg)
{
	struct lifecycle_op *op;

	if (busy_error(sb, "stop", done, arg) < 0)
		return;
	op = lifecycle_op_new(sb, OP_STOP, done, arg);
	sd.backend->ops->stop(sd.backend, lifecycle_backend_id(sb), 2,
	    backend_stopped_cb, op);
}

static void
backend_paused_cb(const struct error *err, void *arg)
{
	struct lifecycle_op *op = arg;

	if (err == NULL) {
		sandbox_set_state(op->sb, SB_PAUSED);
		log_info("sandbox %s paused", op->sb->name);
	}
	op->done(op->sb, err, op->arg);
	lifecycle_op_end(op);
}

void
lifecycle_pause(struct sandbox *sb, sandbox_done_cb done, void *arg)
{
	struct lifecycle_op *op;

	if (busy_error(sb, "pause", done, arg) < 0)
		return;
	if (sb->state == SB_PAUSED) {
		refuse(sb, done, arg, "sandbox %s is already paused", sb->name);
		return;
	}
	if (sb->state != SB_RUNNING && sb->state != SB_UNHEALTHY) {
		refuse(sb, done, arg, "sandbox %s is %s; only one in use "
		    "pauses", sb->name, sandbox_state_name(sb->state));
		return;
	}
	op = lifecycle_op_new(sb, OP_PAUSE, done, arg);
	sd.backend->ops->pause(sd.backend, lifecycle_backend_id(sb),
	    backend_paused_cb, op);
}

static void
backend_resumed_cb(const struct error *err, void *arg)
{
	struct lifecycle_op *op = arg;

	/* Still frozen: as it was. */
	if (err != NULL) {
		op->done(op->sb, err, op->arg);
		lifecycle_op_end(op);
		return;
	}
	log_info("sandbox %s resumed", op->sb->name);
	op->sb->health_failures = 0;
	lifecycle_wait_healthy(op);
}

void
lifecycle_resume(struct sandbox *sb, sandbox_done_cb done, void *arg)
{
	struct lifecycle_op *op;

	if (busy_error(sb, "resume", done, arg) < 0)
		return;
	if (sb->state != SB_PAUSED) {
		refuse(sb, done, arg, "sandbox %s is not paused (%s)", sb->name,
		    sandbox_state_name(sb->state));
		return;
	}
	/* Its session's idle clock starts again now. */
	sessions_touch_sandbox(sb);
	op = lifecycle_op_new(sb, OP_RESUME, done, arg);
	sd.backend->ops->resume(sd.backend, lifecycle_backend_id(sb),
	    backend_resumed_cb, op);
}

/* A sample on its way; holds a reference to its sandbox. */
struct stats_call {
	struct sandbox *sb;
	sandbox_stats_cb done;
	void *arg;
	struct error err;	/* refused before the backend was asked */
	struct sandbox_stats st;	/* the backend's, while the agent is
					 * asked for the disk */
};

/* The agent's envd answers at once; a sample does not wait long for
 * what only adds the disk. */
#define DISK_TIMEOUT 5.0

static void
stats_refused_cb(evutil_socket_t fd, short what, void *arg)
{
	struct stats_call *c = arg;

	(void)fd;
	(void)what;
	c->done(c->sb, NULL, &c->err, c->arg);
	sandbox_unref(c->sb);
	free(c);
}

/* The share of its CPUs sb used since the last sample (or since it was
 * created or started), which this one becomes. */
static double
cpu_used_pct(struct sandbox *sb, const struct backend_stats *bs,
    double cpus)
{
	double now = timing_monotonic(), pct = 0;

	if (sb->cpu_at > 0 && now > sb->cpu_at && bs->cpu_ns >= sb->cpu_ns)
		pct = 100.0 * (double)(bs->cpu_ns - sb->cpu_ns) /
		    ((now - sb->cpu_at) * 1e9 * cpus);
	sb->cpu_ns = bs->cpu_ns;
	sb->cpu_at = now;
	return pct > 100 ? 100 : pct;
}

static void
stats_end(struct stats_call *c)
{
	c->st.disk_used = c->sb->disk_used;
	c->st.disk_total = c->sb->disk_total;
	c->done(c->sb, &c->st, NULL, c->arg);
	sandbox_unref(c->sb);
	free(c);
}

/* The agent's envd figures (E2B's /metrics): its root file system. The
 * agent is inside the sandbox, so its answer is read with care. */
static void
disk_cb(struct sandbox *sb, int status, json_t *answer,
    const struct error *err, void *arg)
{
	json_t *used = json_object_get(answer, "disk_used"),
	    *total = json_object_get(answer, "disk_total");

	if (err == NULL && status == 200 && json_is_integer(used) &&
	    json_is_integer(total) && json_integer_value(used) >= 0 &&
	    json_integer_value(total) >= json_integer_value(used)) {
		sb->disk_used = json_integer_value(used);
		sb->disk_total = json_integer_value(total);
	} else {
		log_debug("sandbox %s: no disk figures from its agent (%d%s%s)",
		    sb->name, status, err != NULL ? ": " : "",
		    err != NULL ? err->msg : "");
	}
	stats_end(arg);
}

static void
sampled_cb(const struct backend_stats *bs, const struct error *err,
    void *arg)
{
	struct stats_call *c = arg;
	struct sandbox *sb = c->sb;
	double cpus;

	if (err != NULL) {
		c->done(sb, NULL, err, c->arg);
		sandbox_unref(sb);
		free(c);
		return;
	}
	/* The type's CPU limit where it has one, else the host's. */
	cpus = sb->type != NULL && sb->type->nano_cpus > 0 ?
	    (double)sb->type->nano_cpus / 1e9 : (double)bs->cpus;
	c->st.cpu_count = (unsigned)cpus;
	if ((double)c->st.cpu_count < cpus)
		c->st.cpu_count++;
	c->st.cpu_used_pct = cpu_used_pct(sb, bs, cpus);
	c->st.mem_used = bs->mem_used;
	c->st.mem_total = bs->mem_limit;
	c->st.mem_cache = bs->mem_cache;
	/* The engine has no disk figures; a frozen agent cannot answer, so
	 * a paused one's are those of its last sample. */
	if (sb->state == SB_RUNNING || sb->state == SB_WARM)
		agent_call_json(sb, "GET", "/envd/metrics", NULL, DISK_TIMEOUT,
		    disk_cb, c);
	else
		stats_end(c);
}

void
lifecycle_stats(struct sandbox *sb, sandbox_stats_cb done, void *arg)
{
	struct stats_call *c = xcalloc(1, sizeof *c);

	c->sb = sb;
	c->done = done;
	c->arg = arg;
	sandbox_ref(sb);
	if (sb->owner != NULL) {
		error_set(&c->err, 409, "sandbox %s belongs to sandboxd instance "
		    "%s; ask it there", sb->name, sb->owner);
	} else if (sb->container_id == NULL || sb->state == SB_CREATING ||
	    sb->state == SB_RELEASING || sb->state == SB_RELEASED) {
		error_set(&c->err, 409, "sandbox %s is %s", sb->name,
		    sandbox_state_name(sb->state));
	} else {
		sd.backend->ops->stats(sd.backend, sb->container_id,
		    sampled_cb, c);
		return;
	}
	sandboxd_defer(stats_refused_cb, c);
}
