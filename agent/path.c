#include "path.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "xmalloc.h"

static int
openat2_beneath(int dirfd, const char *path, int flags, mode_t mode)
{
	struct open_how how = {
		.flags = (unsigned long long)(flags | O_CLOEXEC),
		/* O_TMPFILE includes O_DIRECTORY's bit: test it whole, or a
		 * mode given with O_DIRECTORY makes openat2 fail with EINVAL. */
		.mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ?
		    mode : 0,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	int fd;

	do
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
	while (fd < 0 && errno == EAGAIN);
	return fd;
}

int
workspace_open(struct workspace *ws, const char *root, struct error *err)
{
	size_t len;

	memset(ws, 0, sizeof *ws);
	ws->rootfd = -1;
	if (root[0] != '/') {
		error_set(err, 400, "workspace %s is not an absolute path", root);
		return -1;
	}
	ws->rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (ws->rootfd < 0) {
		error_set_errno(err, 500, errno, "cannot open workspace %s", root);
		return -1;
	}
	ws->root = xstrdup(root);
	len = strlen(ws->root);
	while (len > 1 && ws->root[len - 1] == '/')
		ws->root[--len] = '\0';
	ws->real_root = realpath(ws->root, NULL);
	if (ws->real_root == NULL)
		ws->real_root = xstrdup(ws->root);
	return 0;
}

void
workspace_close(struct workspace *ws)
{
	if (ws->rootfd >= 0)
		close(ws->rootfd);
	free(ws->root);
	free(ws->real_root);
	memset(ws, 0, sizeof *ws);
	ws->rootfd = -1;
}

/* If path lies in root ("/root" or "/root/..."), the part after it. */
static const char *
strip_root(const char *root, const char *path)
{
	size_t len = strlen(root);

	if (strcmp(root, "/") == 0)
		return path + 1;
	if (strncmp(path, root, len) != 0)
		return NULL;
	if (path[len] == '\0')
		return path + len;
	if (path[len] == '/')
		return path + len + 1;
	return NULL;	/* "/workspace2" is not inside "/workspace" */
}

int
path_normalize(const struct workspace *ws, const char *path, char **rel,
    struct error *err)
{
	const char *p = path;
	char *out, *o;
	size_t depth = 0;

	*rel = NULL;
	if (path == NULL || path[0] == '\0') {
		error_set(err, 400, "path is empty");
		return -1;
	}
	if (path[0] == '/') {
		p = strip_root(ws->root, path);
		if (p == NULL)
			p = strip_root(ws->real_root, path);
		if (p == NULL) {
			error_set(err, 403, "path %s is outside the workspace %s",
			    path, ws->root);
			return -1;
		}
	}
	out = xmalloc(strlen(p) + 1);
	o = out;
	while (*p != '\0') {
		const char *slash = strchr(p, '/');
		size_t len = slash != NULL ? (size_t)(slash - p) : strlen(p);

		if (len == 0 || (len == 1 && p[0] == '.')) {
			/* empty or "." part */
		} else if (len == 2 && p[0] == '.' && p[1] == '.') {
			if (depth == 0) {
				free(out);
				error_set(err, 403, "path %s leaves the workspace",
				    path);
				return -1;
			}
			/* Drop the last part written. */
			while (o > out && o[-1] != '/')
				o--;
			if (o > out)
				o--;
			depth--;
		} else {
			if (o > out)
				*o++ = '/';
			memcpy(o, p, len);
			o += len;
			depth++;
		}
		p += len;
		if (*p == '/')
			p++;
	}
	*o = '\0';
	*rel = out;
	return 0;
}

char *
path_absolute(const struct workspace *ws, const char *rel)
{
	if (rel[0] == '\0')
		return xstrdup(ws->root);
	if (strcmp(ws->root, "/") == 0)
		return xasprintf("/%s", rel);
	return xasprintf("%s/%s", ws->root, rel);
}

void
path_error(struct error *err, int errnum, const char *what, const char *rel)
{
	const char *shown = rel[0] != '\0' ? rel : ".";

	switch (errnum) {
	case EXDEV:
		error_set(err, 403, "%s: %s leads outside the workspace", what,
		    shown);
		break;
	case ELOOP:
		error_set(err, 403, "%s: %s: too many levels of symbolic links "
		    "or a link that may not be followed", what, shown);
		break;
	case EACCES:
	case EPERM:
		error_set(err, 403, "%s: %s: permission denied", what, shown);
		break;
	case ENOENT:
		error_set(err, 404, "%s: no such file or directory: %s", what,
		    shown);
		break;
	case ENOTDIR:
		error_set(err, 404, "%s: %s: a part of the path is not a "
		    "directory", what, shown);
		break;
	case EISDIR:
		error_set(err, 409, "%s: %s is a directory", what, shown);
		break;
	case EEXIST:
		error_set(err, 409, "%s: %s already exists", what, shown);
		break;
	case ENOTEMPTY:
		error_set(err, 409, "%s: %s is not empty", what, shown);
		break;
	case ENOSPC:
	case EDQUOT:
		error_set(err, 507, "%s: %s: no space left", what, shown);
		break;
	case ENAMETOOLONG:
		error_set(err, 400, "%s: %s: name too long", what, shown);
		break;
	default:
		error_set_errno(err, 500, errnum, "%s: %s", what, shown);
		break;
	}
}

int
path_open(const struct workspace *ws, const char *rel, int flags, mode_t mode,
    struct error *err)
{
	int fd = openat2_beneath(ws->rootfd, rel[0] != '\0' ? rel : ".", flags,
	    mode);

	if (fd < 0)
		path_error(err, errno, "open", rel);
	return fd;
}

/* Make sure directory prefix (relative, normalised) exists; 0 or an errno. */
static int
ensure_dir(const struct workspace *ws, char *prefix)
{
	char *last;
	int fd, parent, e = 0;

	fd = openat2_beneath(ws->rootfd, prefix, O_PATH | O_DIRECTORY, 0);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	if (errno != ENOENT)
		return errno;
	last = strrchr(prefix, '/');
	if (last == NULL) {
		parent = dup(ws->rootfd);
	} else {
		*last = '\0';
		parent = openat2_beneath(ws->rootfd, prefix,
		    O_PATH | O_DIRECTORY, 0);
		*last = '/';
	}
	if (parent < 0)
		return errno;
	if (mkdirat(parent, last != NULL ? last + 1 : prefix, 0755) < 0 &&
	    errno != EEXIST)
		e = errno;
	close(parent);
	return e;
}

/* mkdir -p, each prefix opened beneath the root so that a symlink planted
 * on the way cannot lead out. */
static int
mkdirs_beneath(const struct workspace *ws, char *dir, const char *rel,
    struct error *err)
{
	for (char *p = dir;; p++) {
		char save;
		int e;

		if (*p != '/' && *p != '\0')
			continue;
		save = *p;
		*p = '\0';
		e = ensure_dir(ws, dir);
		*p = save;
		if (e == ENOTDIR || e == EEXIST) {
			error_set(err, 409, "a part of %s exists and is not a "
			    "directory", rel);
			return -1;
		}
		if (e != 0) {
			path_error(err, e, "create parent directory", rel);
			return -1;
		}
		if (save == '\0')
			return 0;
	}
}

int
path_open_parent(const struct workspace *ws, const char *rel, int create_dirs,
    const char **base, struct error *err)
{
	const char *slash = strrchr(rel, '/');
	char *dir;
	int fd;

	if (rel[0] == '\0') {
		error_set(err, 403, "the workspace root itself cannot be used "
		    "here");
		return -1;
	}
	*base = slash != NULL ? slash + 1 : rel;
	if (slash == NULL)
		return path_open(ws, "", O_PATH | O_DIRECTORY, 0, err);
	dir = xstrndup(rel, (size_t)(slash - rel));
	if (create_dirs && mkdirs_beneath(ws, dir, rel, err) < 0) {
		free(dir);
		return -1;
	}
	fd = openat2_beneath(ws->rootfd, dir, O_PATH | O_DIRECTORY, 0);
	if (fd < 0)
		path_error(err, errno, "open parent directory", rel);
	free(dir);
	return fd;
}
