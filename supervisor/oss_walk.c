/*
 * A workspace's entries, as root, in a directory its sandbox's user
 * wrote: every directory is opened with openat2 beneath the root and
 * without following any symlink (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS),
 * every entry examined with fstatat(AT_SYMLINK_NOFOLLOW), a symlink kept
 * as its target text, never followed. Fifos, sockets and devices are
 * left out (counted). Directories are read one at a time (no descriptor
 * held per level), so a deep tree costs no descriptors.
 */
#include "oss_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "xmalloc.h"

int
oss_open_beneath(int dirfd, const char *path, int flags, mode_t mode)
{
	struct open_how how = {
		.flags = (unsigned long long)(flags | O_CLOEXEC),
		.mode = (flags & O_CREAT) ? mode : 0,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
		    RESOLVE_NO_MAGICLINKS,
	};
	int fd;

	do
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
	while (fd < 0 && errno == EAGAIN);
	return fd;
}

struct oss_entry *
oss_tree_add(struct oss_tree *t, const char *path, enum oss_kind kind)
{
	struct oss_entry *e;

	if (t->n == t->cap) {
		t->cap = t->cap != 0 ? t->cap * 2 : 64;
		t->v = xreallocarray(t->v, t->cap, sizeof *t->v);
	}
	e = &t->v[t->n++];
	memset(e, 0, sizeof *e);
	e->path = xstrdup(path);
	e->kind = kind;
	return e;
}

static int
entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct oss_entry *)a)->path,
	    ((const struct oss_entry *)b)->path);
}

void
oss_tree_sort(struct oss_tree *t)
{
	if (t->n > 1)
		qsort(t->v, t->n, sizeof *t->v, entry_cmp);
}

struct oss_entry *
oss_tree_find(const struct oss_tree *t, const char *path)
{
	struct oss_entry key = { .path = (char *)path };

	return t->n == 0 ? NULL : bsearch(&key, t->v, t->n, sizeof *t->v,
	    entry_cmp);
}

void
oss_tree_free(struct oss_tree *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->v[i].path);
		free(t->v[i].key);
		free(t->v[i].target);
	}
	free(t->v);
	memset(t, 0, sizeof *t);
}

void
oss_printable(char *buf, size_t size, const char *path)
{
	const unsigned char *p = (const unsigned char *)path;
	size_t o = 0;

	for (; *p != '\0' && o + 8 < size; p++) {
		if (*p >= 0x20 && *p < 0x7f && *p != '\\')
			buf[o++] = (char)*p;
		else
			o += (size_t)snprintf(buf + o, size - o, "\\x%02x", *p);
	}
	if (*p != '\0') {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o] = '\0';
}

/* The entries of the directory rel (relative to rootfd; "" is the root),
 * appended to t; directories among them are walked after, from t. */
static int
read_dir(int rootfd, const char *rel, struct oss_tree *t,
    struct oss_job *job, struct error *err)
{
	char shown[128];
	struct dirent *d;
	DIR *dir;
	int fd;

	fd = oss_open_beneath(rootfd, rel[0] != '\0' ? rel : ".",
	    O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
	if (fd < 0) {
		oss_printable(shown, sizeof shown, rel);
		error_set_errno(err, 500, errno, "cannot read the workspace's "
		    "directory '%s'", shown);
		return -1;
	}
	if ((dir = fdopendir(fd)) == NULL) {
		close(fd);
		error_set_errno(err, 500, errno, "cannot read a directory");
		return -1;
	}
	while ((errno = 0, d = readdir(dir)) != NULL) {
		char target[PATH_MAX + 1], *path;
		struct oss_entry *e;
		struct stat st;
		ssize_t n;

		if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
			continue;
		path = rel[0] != '\0' ? xasprintf("%s/%s", rel, d->d_name) :
		    xstrdup(d->d_name);
		if (strlen(path) >= PATH_MAX || fstatat(dirfd(dir), d->d_name,
		    &st, AT_SYMLINK_NOFOLLOW) < 0) {
			/* Gone meanwhile, or a name no path can reach. */
			free(path);
			continue;
		}
		if (t->n >= OSS_MAX_ENTRIES) {
			free(path);
			closedir(dir);
			error_set(err, 413, "the workspace has more than %d files, "
			    "directories and symlinks", OSS_MAX_ENTRIES);
			return -1;
		}
		if (S_ISREG(st.st_mode)) {
			e = oss_tree_add(t, path, OSS_FILE);
			e->size = (uint64_t)st.st_size;
		} else if (S_ISDIR(st.st_mode)) {
			e = oss_tree_add(t, path, OSS_DIR);
		} else if (S_ISLNK(st.st_mode) && (n = readlinkat(dirfd(dir),
		    d->d_name, target, sizeof target - 1)) > 0) {
			target[n] = '\0';
			e = oss_tree_add(t, path, OSS_LINK);
			e->target = xstrdup(target);
		} else {
			atomic_fetch_add(&job->stats.skipped, 1);
			free(path);
			continue;
		}
		e->mode = st.st_mode & 07777;
		free(path);
	}
	if (errno != 0) {
		error_set_errno(err, 500, errno, "cannot read a directory");
		closedir(dir);
		return -1;
	}
	closedir(dir);
	return 0;
}

int
oss_walk(int rootfd, struct oss_tree *t, struct oss_job *job,
    struct error *err)
{
	if (read_dir(rootfd, "", t, job, err) < 0)
		return -1;
	/* t grows while it is walked: each directory added is read in turn
	 * (breadth first), by index since the array may move. */
	for (size_t i = 0; i < t->n; i++) {
		char *rel;
		int rc;

		if (t->v[i].kind != OSS_DIR)
			continue;
		if (oss_cancelled(job, err) < 0)
			return -1;
		rel = xstrdup(t->v[i].path);
		rc = read_dir(rootfd, rel, t, job, err);
		free(rel);
		if (rc < 0)
			return -1;
	}
	oss_tree_sort(t);
	return 0;
}
