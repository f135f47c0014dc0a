/*
 * Workspace path resolution. Every path a client names is first normalised
 * lexically ("." and empty parts dropped, ".." folded, never above the root),
 * then opened with openat2(RESOLVE_BENEATH) from a descriptor of the root, so
 * the kernel refuses any symlink that points outside. Nothing here follows a
 * path by string prefix, which is how "/workspace2" escapes the reference.
 */
#ifndef PATH_H
#define PATH_H

#include <sys/types.h>

#include "error.h"

struct workspace {
	int rootfd;		/* O_PATH directory descriptor of the root */
	char *root;		/* the root as configured, no trailing slash */
	char *real_root;	/* the root with symlinks resolved */
};

int workspace_open(struct workspace *ws, const char *root, struct error *err);
void workspace_close(struct workspace *ws);

/* Normalise a client path to one relative to the root ("" is the root
 * itself). Absolute paths must lie inside the root: 403 otherwise; a ".."
 * above the root: 403; empty or NUL-bearing: 400. Caller frees *rel. */
int path_normalize(const struct workspace *ws, const char *path, char **rel,
    struct error *err);
/* The absolute path clients see for rel. Caller frees. */
char *path_absolute(const struct workspace *ws, const char *rel);

/* openat2 of rel beneath the root. Returns a descriptor or -1 with err:
 * 403 for escapes, 404 missing, 409 for a file/directory mismatch. */
int path_open(const struct workspace *ws, const char *rel, int flags,
    mode_t mode, struct error *err);
/* Open the directory holding rel (creating missing directories when
 * create_dirs), and point *base at rel's last component inside rel. rel
 * must not be the root. */
int path_open_parent(const struct workspace *ws, const char *rel,
    int create_dirs, const char **base, struct error *err);
/* Map an errno from an open under the workspace to an error. */
void path_error(struct error *err, int errnum, const char *what,
    const char *rel);

#endif
