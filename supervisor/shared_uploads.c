/*
 * Shared state in Redis: workspaces on their way to object storage
 * (FILE_SYSTEM=oss). A release asked of another instance is answered once
 * the owner is told, before the owner has uploaded the workspace, and the
 * owner's record goes at once; so the instance that asks marks the
 * storage_path (uploading:<storage_path>, with a TTL for an owner that
 * never comes), the owner clears the mark once its release is over, and
 * a create that restores that storage_path, on any instance, waits while
 * the mark is there (lifecycle_create.c). The mark is set before the
 * release is announced, on the same connection: no create after the
 * answer can miss it. It holds no credential, only the name.
 */
#include "sandboxd.h"

#include <stdlib.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "shared_internal.h"
#include "xmalloc.h"

/* An owner gone for good stops holding creates back after this. */
#define UPLOAD_MARK_MS (10 * 60 * 1000)

void
shared_upload_mark(const struct sandbox *sb)
{
	char *key = shared_key("uploading:%s", sb->storage_path);

	shared_command(shared_ignore_cb, NULL, "SET %s %s PX %d", key, sb->name,
	    UPLOAD_MARK_MS);
	free(key);
}

void
shared_upload_clear(const char *storage_path)
{
	char *key = shared_key("uploading:%s", storage_path);

	shared_command(shared_ignore_cb, NULL, "DEL %s", key);
	free(key);
}

/* One question; freed when answered. */
struct upload_question {
	void (*done)(void *arg, int pending);
	void *arg;
};

static void
exists_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	struct upload_question *q = arg;
	redisReply *r = reply;

	(void)ac;
	/* Redis gone meanwhile: nothing to wait for that it could say. */
	q->done(q->arg, r != NULL && r->type == REDIS_REPLY_INTEGER &&
	    r->integer > 0);
	free(q);
}

int
shared_upload_pending(const char *storage_path,
    void (*done)(void *arg, int pending), void *arg)
{
	struct upload_question *q = xcalloc(1, sizeof *q);
	char *key = shared_key("uploading:%s", storage_path);
	int rc;

	q->done = done;
	q->arg = arg;
	rc = shared_command(exists_cb, q, "EXISTS %s", key);
	free(key);
	if (rc < 0)
		free(q);
	return rc;
}
