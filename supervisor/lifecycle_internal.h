/*
 * What lifecycle.c (operations, waiters, release, start, stop),
 * lifecycle_create.c (create, and the wait for a new agent that a start
 * and a resume also use) and lifecycle_restore.c (a create's workspace
 * from storage) share: one operation in progress per sandbox.
 */
#ifndef LIFECYCLE_INTERNAL_H
#define LIFECYCLE_INTERNAL_H

#include "sandboxd.h"

struct event;

enum lifecycle_op_kind {
	OP_CREATE,
	OP_RELEASE,
	OP_START,
	OP_STOP,
	OP_PAUSE,
	OP_RESUME,
};

/* The operation in progress on a sandbox; holds a reference to it. Freed
 * when the operation ends. */
struct lifecycle_op {
	enum lifecycle_op_kind kind;
	struct sandbox *sb;
	sandbox_done_cb done;
	void *arg;
	struct event *timer;
	double started;
	double queued;			/* the create waits for Docker since */
	double status_sent;		/* the status check asked at */
	double deadline;
	double next_status_check;
	double delay;			/* between probes, grows */
	int status_checking;
	int restore;			/* the workspace comes from storage */
	int port_claims;		/* REDIS_PORT_KEY tries so far */
	int port_claimed;		/* sb->port is ours in Redis */
	/* The restore's callback (lifecycle_restore). */
	void (*restored)(const struct error *err, void *arg);
	enum sandbox_state prev_state;
	struct error err;
	char last_probe[256];		/* why the agent was not healthy */
};

/* What the backend knows sb by: its id, or before the create answered its
 * name (the container may exist under it). */
static inline const char *
lifecycle_backend_id(const struct sandbox *sb)
{
	return sb->container_id != NULL ? sb->container_id : sb->name;
}

/* lifecycle.c */
/* Begin an operation on sb (which it references): sb->op. */
struct lifecycle_op *lifecycle_op_new(struct sandbox *sb,
    enum lifecycle_op_kind kind, sandbox_done_cb done, void *arg);
/* End op and free it; then run a release that was asked for meanwhile. */
void lifecycle_op_end(struct lifecycle_op *op);
/* Tell whoever waits for sb's release. */
void lifecycle_notify_waiters(struct sandbox *sb, const struct error *err);

/* lifecycle_create.c */
/* Police op's sandbox (lifecycle_police), then wait for its agent; a
 * failure fails op. */
void lifecycle_police_then_wait(struct lifecycle_op *op);
/* Wait for op's agent to answer (a create's, a start's), then end op. */
void lifecycle_wait_healthy(struct lifecycle_op *op);
/* op failed: a create undoes what it made, a start marks sb unhealthy;
 * then done(err) and the end of op. */
void lifecycle_fail_op(struct lifecycle_op *op, const struct error *err);

/* lifecycle_restore.c */
/* Restore a create's workspace from its storage_path, then done(err,
 * op). */
void lifecycle_restore(struct lifecycle_op *op,
    void (*done)(const struct error *err, void *arg));

#endif
