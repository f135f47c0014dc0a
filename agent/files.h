/*
 * What the workspace file routes (files.c, files_batch.c, entries.c) share:
 * entry infos, directories created on the way and undone when the request
 * fails, files that appear only once complete, and the disk writer thread.
 * Every path here is relative to the workspace root and already normalised
 * by path_normalize; every open goes through path.h beneath the root.
 */
#ifndef FILES_H
#define FILES_H

#include <stddef.h>
#include <sys/stat.h>

#include <jansson.h>

#include "error.h"

struct agent;
struct event_base;

/* fsops.c */

/* The entry info {"path", "name", "type", "size", "mtime_ms"} of rel as
 * st describes it (from lstat: a symlink is "symlink"). New reference. */
json_t *fsops_entry_json(struct agent *agent, const char *rel,
    const struct stat *st);
/* The entry info of name in dirfd, not following a symlink. */
json_t *fsops_entry_info(struct agent *agent, int dirfd, const char *name,
    const char *rel, struct error *err);

/* Directories one request created: undone if the request fails. Owned by
 * the request; fsops_created_free frees it. */
struct created_dirs {
	char **v;	/* relative paths, parents first */
	size_t n;
};

/* O_PATH descriptor of directory rel, created with its missing parents
 * (each added to created, and given to the user commands run as). 409 if
 * a part of it is not a directory, 403 if it leads outside. */
int fsops_mkdirs(struct agent *agent, const char *rel,
    struct created_dirs *created, struct error *err);
/* The same for the directory holding rel; *base points at rel's last
 * component. rel must not be the root. */
int fsops_open_parent(struct agent *agent, const char *rel,
    struct created_dirs *created, const char **base, struct error *err);
/* Remove the created directories again, deepest first; a directory that
 * is no longer empty stays. */
void fsops_created_undo(struct agent *agent, struct created_dirs *created);
void fsops_created_free(struct created_dirs *created);

/* rel with its last component replaced by the target of the symlink it
 * names, as often as it is one; 403 if a link leads outside. Writing
 * through a link thus writes its target, as open() would. Caller frees
 * *out. */
int fsops_follow_links(struct agent *agent, const char *rel, char **out,
    struct error *err);

/* Remove name in dirfd and, if it is a directory, everything beneath it,
 * never following a symlink. Missing is not an error. */
int fsops_remove(int dirfd, const char *name, const char *rel,
    struct error *err);

/* Give name in dirfd ("" for dirfd itself) to the user commands run as,
 * when the agent runs them as another user. */
void fsops_give(struct agent *agent, int dirfd, const char *name);

/* staged.c: a file being written that appears in the workspace only once
 * complete, so a failed or aborted write leaves nothing behind. Owned by
 * its route, which ends it with staged_commit or staged_discard. */
struct staged_file {
	int fd;		/* read-write; -1 once closed */
	int dirfd;	/* the directory it lives in, borrowed: the caller
			 * keeps it open as long as the staged file */
	char *name;	/* its hidden name there; NULL while anonymous */
};

void staged_init(struct staged_file *f);
/* A new empty file in dirfd: anonymous (O_TMPFILE) unless named or the
 * filesystem cannot, else under a hidden name. rel (the target) names it
 * in error messages. */
int staged_create(struct staged_file *f, int dirfd, int named,
    const char *rel, struct error *err);
/* Close the descriptor but keep the file (it must have a name). */
void staged_close(struct staged_file *f);
/* Make it a hidden file of directory dirfd: linked or renamed there, or
 * copied when dirfd is on another filesystem. */
int staged_move(struct staged_file *f, int dirfd, const char *rel,
    struct error *err);
/* Give it the mode and owner of the file it replaces (or to the command
 * user when new), then rename it over name in its directory: the atomic
 * replace. The staged file is done with afterwards (staged_discard it). */
int staged_commit(struct staged_file *f, struct agent *agent,
    const char *name, const char *rel, struct error *err);
/* Remove what is left of it and close it. */
void staged_discard(struct staged_file *f);

/* disk_writer.c: writes to files on a thread of its own, so that a slow
 * disk holds back only the upload that waits for it (by pausing its
 * socket), never the event loop. Owned by one request. */
struct disk_writer;

/* cb runs on the loop when the queue went down to what disk_writer_write
 * or disk_writer_flush waited for, or a write failed. */
struct disk_writer *disk_writer_new(struct event_base *base,
    void (*cb)(void *arg), void *arg);
/* Queue data for fd (at its current offset). 1 when the queue is over its
 * high mark: pause the producer until cb. */
int disk_writer_write(struct disk_writer *w, int fd, const void *data,
    size_t len);
/* Queue closing fd, after the data queued for it. */
void disk_writer_close(struct disk_writer *w, int fd);
/* 1 when everything queued is written (or a write failed); else cb runs
 * once it is. */
int disk_writer_flush(struct disk_writer *w);
/* errno of the first failed write, or 0. */
int disk_writer_error(struct disk_writer *w);
/* Stops the thread after the write in progress; what is still queued is
 * dropped (and its close operations done). */
void disk_writer_free(struct disk_writer *w);

#endif
