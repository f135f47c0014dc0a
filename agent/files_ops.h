/*
 * Filesystem operations of the workspace file routes (files.c,
 * files_batch.c, files_entries.c), all relative to descriptors opened
 * beneath the root: entry infos, mkdir -p that can be undone, following
 * symlinks by hand, recursive removal. Every path here is relative to the
 * workspace root and already normalised by path_normalize.
 */
#ifndef FILES_OPS_H
#define FILES_OPS_H

#include <stddef.h>
#include <sys/stat.h>

#include <jansson.h>

#include "error.h"

struct agent;

/* The entry info {"path", "name", "type", "size", "mtime_ms"} of rel as
 * st describes it (from lstat: a symlink is "symlink"). New reference. */
json_t *files_ops_entry_json(struct agent *agent, const char *rel,
    const struct stat *st);
/* The entry info of name in dirfd, not following a symlink. */
json_t *files_ops_entry_info(struct agent *agent, int dirfd, const char *name,
    const char *rel, struct error *err);

/* Directories one request created: undone if the request fails. Owned by
 * the request; files_ops_created_free frees it. */
struct created_dirs {
	char **v;	/* relative paths, parents first */
	size_t n;
};

/* O_PATH descriptor of directory rel, created with its missing parents
 * (each added to created, and given to the user commands run as). 409 if
 * a part of it is not a directory, 403 if it leads outside. */
int files_ops_mkdirs(struct agent *agent, const char *rel,
    struct created_dirs *created, struct error *err);
/* The same for the directory holding rel; *base points at rel's last
 * component. rel must not be the root. */
int files_ops_open_parent(struct agent *agent, const char *rel,
    struct created_dirs *created, const char **base, struct error *err);
/* Remove the created directories again, deepest first; a directory that
 * is no longer empty stays. */
void files_ops_created_undo(struct agent *agent, struct created_dirs *created);
void files_ops_created_free(struct created_dirs *created);

/* rel with its last component replaced by the target of the symlink it
 * names, as often as it is one; 403 if a link leads outside. Writing
 * through a link thus writes its target, as open() would. Caller frees
 * *out. */
int files_ops_follow_links(struct agent *agent, const char *rel, char **out,
    struct error *err);

/* Remove name in dirfd and, if it is a directory, everything beneath it,
 * never following a symlink. Missing is not an error. */
int files_ops_remove(int dirfd, const char *name, const char *rel,
    struct error *err);

/* Give the file or directory open as fd (any kind of descriptor) to the
 * user commands run as, when the agent runs them as another user. Never
 * by name: the user could have swapped the name meanwhile. */
void files_ops_give(struct agent *agent, int fd);

#endif
