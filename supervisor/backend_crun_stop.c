/*
 * Bringing a crun sandbox down: stop (a signal to its first process
 * through the pidfd, SIGKILL when it has not gone in time; thawed first
 * when paused, a frozen process takes no signal), pause and resume (crun's
 * freezer) and remove (killed through the pidfd, then crun delete
 * --force, which removes its cgroups and crun's state; its network's CNI
 * DEL; its directory renamed into the trash and removed from there off
 * the answer's path).
 */
#include "backend_crun.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "sandboxd.h"
#include "xmalloc.h"

/* How long a removal waits for a killed sandbox's exit before crun does
 * the rest. */
#define KILL_WAIT_SECONDS 5
/* How often and how long a pause waits for the freezer (5 s). */
#define FREEZE_POLL_US 2000
#define FREEZE_POLLS 2500

static void
stop_exited(struct crun_box *box, void *arg)
{
	struct crun_op *op = arg;

	crun_op_idle(op->c, box);
	crun_op_finish(op);
}

static void
stop_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct crun_op *op = arg;

	(void)fd;
	(void)what;
	if (op->box->pidfd >= 0)
		pidfd_send_signal(op->box->pidfd, SIGKILL, NULL, 0);
}

static void
stop_signal(struct crun_op *op)
{
	struct crun_box *box = op->box;
	struct timeval tv;

	if (box->pidfd < 0) {
		stop_exited(box, op);
		return;
	}
	box->on_exit = stop_exited;
	box->on_exit_arg = op;
	/* The agent is PID 1 of its namespace: a signal it has no handler
	 * for does nothing; SIGKILL from here ends the namespace. */
	pidfd_send_signal(box->pidfd, op->timeout > 0 ? SIGTERM : SIGKILL,
	    NULL, 0);
	tv.tv_sec = (time_t)op->timeout;
	tv.tv_usec = (suseconds_t)((op->timeout - (double)tv.tv_sec) * 1e6);
	op->ev = event_new(op->c->base, -1, 0, stop_deadline_cb, op);
	event_add(op->ev, &tv);
}

static void
thawed_for_stop_cb(int status, const char *out, const char *errtext,
    const struct error *fail_, void *arg)
{
	struct crun_op *op = arg;

	(void)out;
	if (crun_op_job_done(op, "resume (stop)", status, errtext, fail_) < 0)
		return;
	op->box->state = BACKEND_RUNNING;
	stop_signal(op);
}

void
crun_stop(struct backend *b, const char *id, double timeout,
    backend_done_cb done, void *arg)
{
	struct crun_op *op = crun_op_new(b->impl, CRUN_OP_STOP, id, arg);
	const char *args[] = { "resume", id, NULL };
	struct crun_box *box;

	op->done = done;
	op->timeout = timeout;
	if ((box = op->box = crun_op_find(op)) == NULL)
		return;
	if (box->state != BACKEND_RUNNING && box->state != BACKEND_PAUSED) {
		crun_op_defer(op);
		return;
	}
	box->busy = 1;
	/* A frozen process takes no signal until thawed. */
	if (box->state == BACKEND_PAUSED)
		crun_op_crun(op, args, -1, NULL, thawed_for_stop_cb);
	else
		stop_signal(op);
}

/* crun pause returns once it asked the freezer, which may still be
 * FREEZING then: the answer waits until every process is frozen (what
 * Docker's pause does too), so that a paused sandbox runs nothing. */
static void
frozen_cb(evutil_socket_t fd, short what, void *arg)
{
	struct crun_op *op = arg;
	struct timeval tv = { 0, FREEZE_POLL_US };
	int frozen = crun_host_frozen(&op->c->host, op->box->cgroup);

	(void)fd;
	(void)what;
	if (frozen == 0 && op->polls++ < FREEZE_POLLS) {
		if (op->ev == NULL)
			op->ev = event_new(op->c->base, -1, 0, frozen_cb, op);
		event_add(op->ev, &tv);
		return;
	}
	if (frozen != 1) {
		error_set(&op->err, 500, "crun pause: sandbox %s did not freeze",
		    op->box->name);
		op->failed = 1;
	}
	crun_op_idle(op->c, op->box);
	crun_op_finish(op);
}

static void
froze_cb(int status, const char *out, const char *errtext,
    const struct error *fail_, void *arg)
{
	struct crun_op *op = arg;

	(void)out;
	if (crun_op_job_done(op, op->kind == CRUN_OP_PAUSE ? "pause" :
	    "resume", status, errtext, fail_) < 0)
		return;
	op->box->state = op->kind == CRUN_OP_PAUSE ? BACKEND_PAUSED :
	    BACKEND_RUNNING;
	if (op->kind == CRUN_OP_PAUSE) {
		frozen_cb(-1, 0, op);
		return;
	}
	crun_op_idle(op->c, op->box);
	crun_op_finish(op);
}

static void
freeze(struct backend *b, enum crun_op_kind kind, const char *id,
    backend_done_cb done, void *arg)
{
	struct crun_op *op = crun_op_new(b->impl, kind, id, arg);
	const char *args[] = { kind == CRUN_OP_PAUSE ? "pause" : "resume", id,
	    NULL };
	struct crun_box *box;

	op->done = done;
	if ((box = op->box = crun_op_find(op)) == NULL)
		return;
	if (kind == CRUN_OP_PAUSE && box->state == BACKEND_PAUSED) {
		crun_op_defer_error(op, 409, "sandbox %s is paused already", id);
		return;
	}
	if (kind == CRUN_OP_RESUME && box->state != BACKEND_PAUSED) {
		crun_op_defer_error(op, 409, "sandbox %s is not paused", id);
		return;
	}
	if (box->state != BACKEND_RUNNING && box->state != BACKEND_PAUSED) {
		crun_op_defer_error(op, 409, "sandbox %s is not running", id);
		return;
	}
	box->busy = 1;
	crun_op_crun(op, args, -1, NULL, froze_cb);
}

void
crun_pause(struct backend *b, const char *id, backend_done_cb done, void *arg)
{
	freeze(b, CRUN_OP_PAUSE, id, done, arg);
}

void
crun_resume(struct backend *b, const char *id, backend_done_cb done,
    void *arg)
{
	freeze(b, CRUN_OP_RESUME, id, done, arg);
}

/* ---- remove --------------------------------------------------------- */

static void
rm_done_cb(int status, const char *out, const char *errtext,
    const struct error *fail_, void *arg)
{
	(void)out;
	/* Given up (we are exiting): crun_free removes the rest itself. */
	if (fail_ == NULL && status != 0)
		log_warn("crun: cannot remove %s: %s", (char *)arg, errtext);
	free(arg);
}

static void
trashed_cb(const char *path, int error, void *arg)
{
	struct crun *c = arg;
	const char *argv[] = { "/bin/rm", "-rf", "--one-file-system", "--",
	    path, NULL };
	struct crun_job_spec spec = { 0 };

	if (error == 0)
		return;
	if (error != E2BIG) {
		log_warn("crun: cannot remove %s: %s", path, strerror(error));
		return;
	}
	/* Deeper than the worker goes (the sandbox's files): rm. */
	spec.argv = argv;
	spec.out_fd = -1;
	crun_jobs_run(c->trash_jobs, &spec, rm_done_cb, xstrdup(path));
}

void
crun_op_trash(struct crun *c, const char *name)
{
	char *path = xasprintf("%s/%s", c->trash, name);

	sandboxd_rmtree(c->base, path, trashed_cb, c);
	free(path);
}

/* Names tried in the trash before giving up on one that is free. */
#define TRASH_TRIES 64

/* The bundle into the trash, removed from there off the loop and off
 * the answer's path. The count behind its name there starts again at
 * each start of sandboxd, while what the last run left may still be
 * going: a name that is taken is passed over, never replaced (renaming
 * onto a directory being emptied would hand it the new one half way). */
static void
remove_finish(struct crun_op *op)
{
	struct crun *c = op->c;
	struct crun_box *box = op->box;
	char *name = NULL;
	int rc = -1;

	for (int i = 0; i < TRASH_TRIES && rc < 0; i++) {
		free(name);
		name = xasprintf("%s.%u", box->name, c->trash_seq++);
		rc = renameat2(c->bundles_fd, box->name, c->trash_fd, name,
		    RENAME_NOREPLACE);
		/* A file system without the flag: a plain rename. */
		if (rc < 0 && errno == EINVAL)
			rc = renameat(c->bundles_fd, box->name, c->trash_fd,
			    name);
		if (rc < 0 && errno != EEXIST)
			break;
	}
	if (rc < 0) {
		if (errno != ENOENT)
			log_warn("crun: cannot move the directory of %s to the "
			    "trash: %s", box->name, strerror(errno));
	} else {
		crun_op_trash(c, name);
	}
	free(name);
	op->box = NULL;
	crun_box_free(box);
	crun_op_finish(op);
}

/* Removing has two parts at once for a bridge sandbox (crun delete and
 * the network's CNI DEL: sandboxd holds its namespace, the plugin needs
 * no process in it): the directory goes when both are done. */
static void
remove_part_done(struct crun_op *op)
{
	if (--op->pending > 0)
		return;
	if (op->failed) {
		crun_op_idle(op->c, op->box);
		crun_op_finish(op);
		return;
	}
	remove_finish(op);
}

static void
net_removed_cb(const struct error *err, void *arg)
{
	struct crun_op *op = arg;

	if (err != NULL)
		log_warn("sandbox %s: %s", op->id, err->msg);
	remove_part_done(op);
}

static void
deleted_cb(int status, const char *out, const char *errtext,
    const struct error *fail_, void *arg)
{
	struct crun_op *op = arg;
	struct crun *c = op->c;
	struct stat st;
	char *state;

	(void)out;
	state = xasprintf("%s/%s", c->root, op->box->name);
	/* No state of crun's: never ran, or gone already; that is fine. */
	if (lstat(state, &st) == 0 || errno != ENOENT)
		crun_op_job_failed(op, "delete", status, errtext, fail_);
	free(state);
	remove_part_done(op);
}

static void
delete_now(struct crun_op *op)
{
	const char *args[] = { "delete", "--force", op->box->name, NULL };

	if (op->ev != NULL)
		event_free(op->ev);
	op->ev = NULL;
	op->box->on_exit = NULL;
	crun_op_crun(op, args, -1, NULL, deleted_cb);
}

static void
killed_cb(struct crun_box *box, void *arg)
{
	(void)box;
	delete_now(arg);
}

static void
kill_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	delete_now(arg);
}

/* A running sandbox is killed first and its exit waited for on its
 * pidfd: its first process exits once every process of its namespace
 * has, so its cgroups are empty then and crun delete removes them at
 * once (killing itself, crun would find them busy and sleep 10 ms before
 * trying again). A paused one (a frozen process takes no signal) or one
 * that does not go in time is left to crun delete --force. */
void
crun_op_remove_begin(struct crun_op *op)
{
	struct crun_box *box = op->box;
	struct timeval tv = { KILL_WAIT_SECONDS, 0 };

	box->busy = 1;
	op->pending = 1;
	if (box->net != NULL) {
		op->pending++;
		crun_net_down(op->c->jobs, &op->c->net, box->net,
		    net_removed_cb, op);
	}
	crun_publish_free(box->publish);
	box->publish = NULL;
	if (box->state != BACKEND_RUNNING || box->pidfd < 0 ||
	    pidfd_send_signal(box->pidfd, SIGKILL, NULL, 0) < 0) {
		delete_now(op);
		return;
	}
	box->on_exit = killed_cb;
	box->on_exit_arg = op;
	op->ev = event_new(op->c->base, -1, 0, kill_deadline_cb, op);
	event_add(op->ev, &tv);
}

void
crun_remove(struct backend *b, const char *id, backend_done_cb done,
    void *arg)
{
	struct crun_op *op = crun_op_new(b->impl, CRUN_OP_REMOVE, id, arg);

	op->done = done;
	op->box = crun_box_find(op->c->boxes, id);
	if (op->box == NULL)
		crun_op_defer(op);
	else if (op->box->busy)
		op->waiting = 1;
	else
		crun_op_remove_begin(op);
}

