/*
 * filesystem.Filesystem: Stat, MakeDir, Move, ListDir and Remove, each
 * one operation of the named user's file helper (envd_fs.h), and the
 * method table (WatchDir and the polled watchers are envd_watch.c's).
 * Paths resolve as E2B's do (envd_path_resolve); answers carry EntryInfo
 * objects as the helper built them.
 */
#include "envd.h"
#include "envd_fs.h"

#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

/* One unary call waiting for its helper; freed with its answer. */
struct fs_call {
	struct envd_call *call;
	struct envd_fs_op *op;
	int list;		/* the answer is the items, as "entries" */
};

static void
fs_done(struct envd_fs_reply *r, void *arg)
{
	struct fs_call *fc = arg;
	struct envd_call *call = fc->call;
	int list = fc->list;

	free(fc);
	if (r->err.status != 0) {
		envd_fail(call, &r->err);
		return;
	}
	if (list)
		envd_reply_items(call, "entries", r->items);
	else
		envd_reply(call, json_incref(r->result));
}

static void
fs_closed(struct envd_call *call, void *arg)
{
	struct fs_call *fc = arg;

	(void)call;
	envd_fs_cancel(fc->op);
	free(fc);
}

/* Send req (stolen) to the user's helper and answer with its result. */
static void
fs_run(struct envd_call *call, json_t *req, int list)
{
	struct fs_call *fc = xcalloc(1, sizeof *fc);

	fc->call = call;
	fc->list = list;
	fc->op = envd_fs_call(envd_call_agent(call), envd_call_user(call), req,
	    -1, fs_done, fc);
	envd_call_on_close(call, fs_closed, fc);
}

/* The request's path, resolved for its user; NULL when the call failed. */
static char *
request_path(struct envd_call *call, json_t *msg, const char *field)
{
	struct error err = { 0 };
	const char *path;
	char *abs;

	if (envd_json_string(msg, field, NULL, &path, &err) < 0 ||
	    (abs = envd_path_resolve(envd_call_user(call), path, &err)) ==
	    NULL) {
		envd_fail(call, &err);
		return NULL;
	}
	return abs;
}

/* Stat, MakeDir and Remove: a path and nothing else. */
static void
path_op(struct envd_call *call, json_t *msg, const char *op)
{
	char *path = request_path(call, msg, "path");

	if (path == NULL)
		return;
	fs_run(call, json_pack("{s:s, s:s%}", "op", op, "path", path,
	    strlen(path)), 0);
	free(path);
}

static void
stat_run(struct envd_call *call, json_t *msg)
{
	path_op(call, msg, "stat");
}

static void
mkdir_run(struct envd_call *call, json_t *msg)
{
	path_op(call, msg, "mkdir");
}

static void
remove_run(struct envd_call *call, json_t *msg)
{
	path_op(call, msg, "remove");
}

static void
move_run(struct envd_call *call, json_t *msg)
{
	char *src, *dst;

	if ((src = request_path(call, msg, "source")) == NULL)
		return;
	if ((dst = request_path(call, msg, "destination")) == NULL) {
		free(src);
		return;
	}
	fs_run(call, json_pack("{s:s, s:s%, s:s%}", "op", "move", "path", src,
	    strlen(src), "destination", dst, strlen(dst)), 0);
	free(src);
	free(dst);
}

static void
list_run(struct envd_call *call, json_t *msg)
{
	struct error err = { 0 };
	uint32_t depth;
	int present;
	char *path;

	if (envd_json_uint32(msg, "depth", NULL, &depth, &present, &err) < 0) {
		envd_fail(call, &err);
		return;
	}
	if ((path = request_path(call, msg, "path")) == NULL)
		return;
	fs_run(call, json_pack("{s:s, s:s%, s:I}", "op", "list", "path", path,
	    strlen(path), "depth", (json_int_t)(depth == 0 ? 1 : depth)), 1);
	free(path);
}

const struct envd_method envd_filesystem_methods[] = {
	{ "filesystem.Filesystem/Stat", ENVD_UNARY, 1, stat_run, NULL },
	{ "filesystem.Filesystem/MakeDir", ENVD_UNARY, 1, mkdir_run, NULL },
	{ "filesystem.Filesystem/Move", ENVD_UNARY, 1, move_run, NULL },
	{ "filesystem.Filesystem/ListDir", ENVD_UNARY, 1, list_run, NULL },
	{ "filesystem.Filesystem/Remove", ENVD_UNARY, 1, remove_run, NULL },
	{ "filesystem.Filesystem/WatchDir", ENVD_SERVER_STREAM, 1,
	    envd_watch_run, NULL },
	{ "filesystem.Filesystem/CreateWatcher", ENVD_UNARY, 1,
	    envd_watcher_create, NULL },
	{ "filesystem.Filesystem/GetWatcherEvents", ENVD_UNARY, 0,
	    envd_watcher_events, NULL },
	{ "filesystem.Filesystem/RemoveWatcher", ENVD_UNARY, 0,
	    envd_watcher_remove, NULL },
};
const size_t envd_filesystem_nmethods =
    sizeof envd_filesystem_methods / sizeof envd_filesystem_methods[0];
