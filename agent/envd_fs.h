/*
 * File operations as a user of the sandbox, done by a helper process of
 * that user (envd_fs_helper.c) on behalf of the agent (envd_fs.c).
 *
 * A helper is the agent's own binary executed anew ("--envd-fs-helper"),
 * so nothing of the agent's memory (its token) is in it, with the user's
 * ids and no supplementary group, under the commands' seccomp filter and
 * keeper, its stdio /dev/null. It serves one operation at a time on a
 * SOCK_SEQPACKET socket (its fd 3): a request is one frame of JSON
 * {"op": ..., args}, maybe with a descriptor; the answer is zero or more
 * frames {"more": [items]} and one last frame {"ok": {...}} (maybe with a
 * descriptor it opened) or {"error": {"status": N, "message": "..."}}.
 *
 * The agent trusts no helper: a process of the user could take one over.
 * Frames are bounded, so are the items of one answer; a helper breaking
 * the protocol is killed and its operation fails. Descriptors it sends
 * are checked before use.
 *
 * Operations (paths absolute; see envd_fs_helper.c): stat, mkdir, move,
 * list, remove, open_read, open_write, watch, watch_add.
 */
#ifndef ENVD_FS_H
#define ENVD_FS_H

#include <jansson.h>

#include "envd.h"

struct evbuffer;

#define ENVD_FS_FRAME		(64 * 1024)	/* bytes of one frame */
#define ENVD_FS_MAX_ITEMS	100000		/* items of one answer */
#define ENVD_FS_HELPER_ARG	"--envd-fs-helper"

/* What an operation came to; valid during the callback. */
struct envd_fs_reply {
	struct error err;	/* status 0: done */
	json_t *result;		/* the "ok" object */
	/* Every "more" item, in order, as compact JSON texts joined by
	 * commas (a listing stays text: a fraction of its parsed size). */
	struct evbuffer *items;
	size_t nitems;
	int fd;			/* sent with "ok", or -1; the callback may
				 * take it (set -1), else it is closed */
};

typedef void (*envd_fs_cb)(struct envd_fs_reply *r, void *arg);
/* The items of r as a JSON array (new reference). */
json_t *envd_fs_items(struct envd_fs_reply *r);
struct envd_fs_op;

/* Once, at start: opens the binary helpers execute (ours). */
void envd_fs_init(struct agent *agent);

/* Run op (an object with "op"; stolen) as u, with a copy of pass_fd if
 * it is >= 0. cb runs later, never inside this call, also for a failure
 * to run it. The handle is valid until cb runs or envd_fs_cancel. */
struct envd_fs_op *envd_fs_call(struct agent *agent,
    const struct envd_user *u, json_t *op, int pass_fd, envd_fs_cb cb,
    void *arg);
/* cb will not run; an operation under way finishes in its helper. */
void envd_fs_cancel(struct envd_fs_op *op);

/* Send one frame on sock, with fd (if >= 0) passed along; as sendmsg
 * (flags added to MSG_NOSIGNAL). Both sides use it. */
ssize_t envd_fs_send(int sock, const char *data, size_t len, int fd,
    int flags);

/* The helper's side: the process's whole life (main.c calls it when run
 * with ENVD_FS_HELPER_ARG). */
int envd_fs_helper_main(void);

/* envd_fs_helper_entry.c: one EntryInfo object of filesystem.proto for
 * path, shown as shown_path (NULL: path); NULL with err. names caches
 * owner and group names through one operation. */
struct envd_names;
json_t *envd_fs_entry(const char *path, const char *shown_path,
    struct envd_names *names, struct error *err);
struct envd_names *envd_names_new(void);
void envd_names_free(struct envd_names *names);
/* An errno of the helper's as an error of ours (status and message). */
void envd_fs_errno(struct error *err, int e, const char *what,
    const char *path);

#endif
