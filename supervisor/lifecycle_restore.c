/*
 * A create's workspace restored before its container starts: copied from
 * STORAGE_FOLDER, or downloaded from object storage (FILE_SYSTEM=oss)
 * once no release of the same storage_path is still uploading it, on this
 * instance or (a mark in Redis) another, so that what is restored is the
 * workspace last released.
 */
#include "sandboxd.h"

#include <string.h>

#include <event2/event.h>

#include "lifecycle_internal.h"
#include "log.h"
#include "oss.h"
#include "shared.h"

/* How often a restore looks again for a release of its storage_path. */
#define HOLDER_POLL 0.2

/* A sandbox of ours that holds sb's storage_path and is being released
 * (or has its upload retried): its workspace is on its way to the store. */
static const struct sandbox *
releasing_holder(const struct sandbox *sb)
{
	for (struct sandbox *h = sandbox_first(); h != NULL;
	    h = sandbox_next(h)) {
		if (h != sb && h->storage_path != NULL &&
		    strcmp(h->storage_path, sb->storage_path) == 0 &&
		    (h->state == SB_RELEASING || (h->state == SB_RELEASED &&
		    h->op != NULL)))
			return h;
	}
	return NULL;
}

static void download(struct lifecycle_op *op);

static void
holder_wait_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	download(arg);
}

/* Look again in HOLDER_POLL s, until the create's timeout. */
static void
wait_for_holder(struct lifecycle_op *op, const char *holder)
{
	struct sandbox *sb = op->sb;
	struct timeval tv = { 0, (suseconds_t)(HOLDER_POLL * 1e6) };
	struct error err;

	if (op->deadline == 0) {
		op->deadline = timing_monotonic() + sd.cfg.create_timeout;
		log_info("sandbox %s: waiting for the release of %s, which holds "
		    "storage_path %s", sb->name, holder, sb->storage_path);
	}
	if (sb->release_requested || timing_monotonic() > op->deadline) {
		error_set(&err, sb->release_requested ? 409 : 504, "sandbox %s: "
		    "%s, which holds storage_path %s, is still being released "
		    "after %.0f s", sb->name, holder, sb->storage_path,
		    sd.cfg.create_timeout);
		lifecycle_fail_op(op, &err);
		return;
	}
	if (op->timer == NULL)
		op->timer = evtimer_new(sd.base, holder_wait_cb, op);
	evtimer_add(op->timer, &tv);
}

static void
start_download(struct lifecycle_op *op)
{
	struct sandbox *sb = op->sb;

	/* The probes that follow have a timer of their own. */
	if (op->timer != NULL) {
		event_free(op->timer);
		op->timer = NULL;
	}
	oss_download(sb->name, sb->storage_path, sb->mount_dir,
	    sb->type->run_as, op->restored, op);
}

static void
pending_cb(void *arg, int pending)
{
	struct lifecycle_op *op = arg;

	if (pending)
		wait_for_holder(op, "a sandbox of another instance");
	else
		start_download(op);
}

/* FILE_SYSTEM=oss: download once no release of the storage_path is
 * still uploading it, here or (a mark in Redis) on another instance, so
 * the workspace restored is the last one released. */
static void
download(struct lifecycle_op *op)
{
	const struct sandbox *h = releasing_holder(op->sb);

	if (h != NULL)
		wait_for_holder(op, h->name);
	else if (!shared_enabled() ||
	    shared_upload_pending(op->sb->storage_path, pending_cb, op) < 0)
		start_download(op);
}

void
lifecycle_restore(struct lifecycle_op *op, void (*done)(const struct error *,
    void *))
{
	struct sandbox *sb = op->sb;

	op->restored = done;
	if (oss_enabled()) {
		download(op);
		return;
	}
	log_info("sandbox %s: restoring the workspace from %s", sb->name,
	    sb->storage_path);
	workspace_copy(sb->storage_path, sb->mount_dir, done, op);
}
