/*
 * Filesystem operations of the workspace file routes, all relative to
 * descriptors opened beneath the root: entry infos, mkdir -p that can be
 * undone, following symlinks by hand, and recursive removal.
 */
#include "agent.h"
#include "files_ops.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <unistd.h>

#include "utf8.h"
#include "xmalloc.h"

#define FOLLOW_MAX	40	/* symlinks followed, as the kernel's ELOOP */
#define REMOVE_DEPTH_MAX 4096	/* directory levels files_ops_remove descends */

static const char *
last_component(const char *rel)
{
	const char *slash = strrchr(rel, '/');

	return slash != NULL ? slash + 1 : rel;
}

static const char *
entry_type(mode_t mode)
{
	if (S_ISREG(mode))
		return "file";
	if (S_ISDIR(mode))
		return "dir";
	if (S_ISLNK(mode))
		return "symlink";
	return "other";
}

json_t *
files_ops_entry_json(struct agent *agent, const char *rel,
    const struct stat *st)
{
	json_t *e = json_object();
	char *abs = path_absolute(&agent->ws, rel);
	const char *name = rel[0] != '\0' ? last_component(rel) :
	    last_component(agent->ws.root);

	json_object_set_new(e, "path", utf8_json_string(abs, strlen(abs)));
	json_object_set_new(e, "name", utf8_json_string(name, strlen(name)));
	json_object_set_new(e, "type", json_string(entry_type(st->st_mode)));
	json_object_set_new(e, "size", S_ISREG(st->st_mode) ?
	    json_integer((json_int_t)st->st_size) : json_null());
	json_object_set_new(e, "mtime_ms", json_integer(
	    (json_int_t)st->st_mtim.tv_sec * 1000 +
	    st->st_mtim.tv_nsec / 1000000));
	free(abs);
	return e;
}

json_t *
files_ops_entry_info(struct agent *agent, int dirfd, const char *name,
    const char *rel, struct error *err)
{
	struct stat st;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW |
	    (name[0] == '\0' ? AT_EMPTY_PATH : 0)) < 0) {
		path_error(err, errno, "stat", rel);
		return NULL;
	}
	return files_ops_entry_json(agent, rel, &st);
}

void
files_ops_give(struct agent *agent, int fd)
{
	if (!agent->drop_ids)
		return;
	/* Best effort: a file the commands cannot change is no reason to
	 * fail a write that succeeded. */
	(void)fchownat(fd, "", agent->uid, agent->gid, AT_EMPTY_PATH);
}

/* mkdir as the user commands run as, when the agent runs them as another
 * user: the directory is theirs from its first moment, so root never has
 * to change it by a name they could have swapped. Where that user may not
 * write, root makes it, since then no process of theirs can swap the name
 * either; *as_user says which happened. -1 with errno. */
static int
mkdir_for_user(struct agent *agent, int parent, const char *name,
    int *as_user)
{
	int rc, e;

	*as_user = 0;
	if (agent->drop_ids) {
		/* The filesystem ids are the calling thread's alone. */
		uid_t ouid = (uid_t)setfsuid(agent->uid);
		gid_t ogid = (gid_t)setfsgid(agent->gid);

		rc = mkdirat(parent, name, 0777);
		e = errno;
		setfsuid(ouid);
		setfsgid(ogid);
		if (rc == 0 || (e != EACCES && e != EPERM)) {
			*as_user = rc == 0;
			errno = e;
			return rc;
		}
	}
	return mkdirat(parent, name, 0777);
}

static void
created_add(struct created_dirs *created, const char *rel)
{
	created->v = xreallocarray(created->v, created->n + 1,
	    sizeof *created->v);
	created->v[created->n++] = xstrdup(rel);
}

/* Make sure prefix (a directory path) exists, given that its parent is
 * open as parent. Returns the prefix's O_PATH descriptor. */
static int
mkdir_step(struct agent *agent, int parent, const char *prefix,
    const char *rel, struct created_dirs *created, struct error *err)
{
	const char *name = last_component(prefix);
	struct error e = { 0 };
	struct stat st;
	int fd, as_user;

	fd = path_open(&agent->ws, prefix, O_PATH, 0, &e);
	if (fd >= 0) {
		if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
			return fd;
		close(fd);
		error_set(err, 409, "%s: %s exists and is not a directory", rel,
		    prefix);
		return -1;
	}
	if (e.status != 404) {
		*err = e;
		return -1;
	}
	if (mkdir_for_user(agent, parent, name, &as_user) < 0) {
		/* EEXIST here is a dangling symlink, or a race. */
		if (errno == EEXIST)
			error_set(err, 409, "%s: %s exists and is not a "
			    "directory", rel, prefix);
		else
			path_error(err, errno, "create directory", prefix);
		return -1;
	}
	created_add(created, prefix);
	fd = openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		path_error(err, errno, "open directory", prefix);
		return -1;
	}
	/* Made by root only where the user cannot write: nobody swapped the
	 * name, so the descriptor is the directory made. */
	if (!as_user)
		files_ops_give(agent, fd);
	return fd;
}

int
files_ops_mkdirs(struct agent *agent, const char *rel,
    struct created_dirs *created, struct error *err)
{
	struct error e = { 0 };
	char *prefix;
	int fd, parent;

	fd = path_open(&agent->ws, rel, O_PATH | O_DIRECTORY, 0, &e);
	if (fd >= 0 || (e.status != 404 && e.status != 409)) {
		if (fd < 0)
			*err = e;
		return fd;
	}
	/* Walk down from the root, one component at a time, so that each
	 * missing directory is created inside its checked parent. */
	parent = path_open(&agent->ws, "", O_PATH | O_DIRECTORY, 0, err);
	if (parent < 0)
		return -1;
	prefix = xstrdup(rel);
	for (char *p = prefix;; p++) {
		char save;

		if (*p != '/' && *p != '\0')
			continue;
		save = *p;
		*p = '\0';
		fd = mkdir_step(agent, parent, prefix, rel, created, err);
		*p = save;
		close(parent);
		if (fd < 0 || save == '\0')
			break;
		parent = fd;
	}
	free(prefix);
	return fd;
}

int
files_ops_open_parent(struct agent *agent, const char *rel,
    struct created_dirs *created, const char **base, struct error *err)
{
	const char *slash = strrchr(rel, '/');
	char *dir;
	int fd;

	if (rel[0] == '\0') {
		error_set(err, 409, "the workspace root is a directory");
		return -1;
	}
	*base = slash != NULL ? slash + 1 : rel;
	dir = xstrndup(rel, slash != NULL ? (size_t)(slash - rel) : 0);
	fd = files_ops_mkdirs(agent, dir, created, err);
	free(dir);
	return fd;
}

void
files_ops_created_undo(struct agent *agent, struct created_dirs *created)
{
	while (created->n > 0) {
		char *rel = created->v[--created->n];
		struct error e;
		const char *base;
		int fd = path_open_parent(&agent->ws, rel, 0, &base, &e);

		if (fd >= 0) {
			(void)unlinkat(fd, base, AT_REMOVEDIR);
			close(fd);
		}
		free(rel);
	}
}

void
files_ops_created_free(struct created_dirs *created)
{
	for (size_t i = 0; i < created->n; i++)
		free(created->v[i]);
	free(created->v);
	created->v = NULL;
	created->n = 0;
}

int
files_ops_follow_links(struct agent *agent, const char *rel, char **out,
    struct error *err)
{
	char *cur = xstrdup(rel), target[PATH_MAX];

	for (int hops = 0;; hops++) {
		const char *base, *slash;
		struct error e = { 0 };
		char *joined, *next;
		ssize_t n;
		int fd;

		if (cur[0] == '\0')
			break;
		fd = path_open_parent(&agent->ws, cur, 0, &base, &e);
		if (fd < 0) {
			/* A missing parent holds no link; it will be created. */
			if (e.status == 404)
				break;
			*err = e;
			free(cur);
			return -1;
		}
		n = readlinkat(fd, base, target, sizeof target - 1);
		close(fd);
		if (n < 0)
			break;
		if (hops == FOLLOW_MAX) {
			error_set(err, 403, "%s: too many levels of symbolic "
			    "links", rel);
			free(cur);
			return -1;
		}
		target[n] = '\0';
		slash = strrchr(cur, '/');
		if (target[0] == '/' || slash == NULL)
			joined = xstrdup(target);
		else
			joined = xasprintf("%.*s/%s", (int)(slash - cur), cur,
			    target);
		if (path_normalize(&agent->ws, joined, &next, err) < 0) {
			error_prefix(err, "symlink %s", cur);
			free(joined);
			free(cur);
			return -1;
		}
		free(joined);
		free(cur);
		cur = next;
	}
	*out = cur;
	return 0;
}

static int
remove_tree(int parent, const char *name, const char *rel, int depth,
    struct error *err)
{
	struct dirent *de;
	DIR *dir;
	int fd, rc = 0;

	if (depth > REMOVE_DEPTH_MAX) {
		error_set(err, 409, "%s is nested more than %d directories deep",
		    rel, REMOVE_DEPTH_MAX);
		return -1;
	}
	fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		/* Replaced by a file or symlink meanwhile: unlink that. */
		if ((errno == ENOTDIR || errno == ELOOP) &&
		    unlinkat(parent, name, 0) == 0)
			return 0;
		path_error(err, errno, "remove", rel);
		return -1;
	}
	if ((dir = fdopendir(fd)) == NULL) {
		close(fd);
		path_error(err, errno, "remove", rel);
		return -1;
	}
	while (rc == 0 && (errno = 0, de = readdir(dir)) != NULL) {
		const char *n = de->d_name;
		struct stat st;
		int is_dir = de->d_type == DT_DIR;

		if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
			continue;
		if (de->d_type == DT_UNKNOWN)
			is_dir = fstatat(dirfd(dir), n, &st,
			    AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
		if (!is_dir && unlinkat(dirfd(dir), n, 0) == 0)
			continue;
		if (is_dir || errno == EISDIR)
			rc = remove_tree(dirfd(dir), n, rel, depth + 1, err);
		else if (errno != ENOENT) {
			path_error(err, errno, "remove", rel);
			rc = -1;
		}
	}
	if (rc == 0 && errno != 0) {
		path_error(err, errno, "read directory", rel);
		rc = -1;
	}
	closedir(dir);
	if (rc == 0 && unlinkat(parent, name, AT_REMOVEDIR) < 0 &&
	    errno != ENOENT) {
		path_error(err, errno, "remove", rel);
		rc = -1;
	}
	return rc;
}

int
files_ops_remove(int dirfd, const char *name, const char *rel,
    struct error *err)
{
	if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM) {
		path_error(err, errno, "remove", rel);
		return -1;
	}
	/* Linux says EISDIR for a directory; POSIX allows EPERM. */
	return remove_tree(dirfd, name, rel, 0, err);
}
