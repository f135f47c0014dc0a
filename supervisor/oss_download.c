/*
 * A create's download, on a worker thread: the manifest under the prefix
 * says what to make (or, without one, the listing: keys ending in '/'
 * are directories); every path is checked (no '..', '.', empty or
 * absolute part) and everything is made beneath a staging directory of
 * ours inside the workspace, through descriptors, never through a
 * symlink (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS; files with
 * O_EXCL | O_NOFOLLOW; symlinks made last). Files come several at a time,
 * each exactly the size and (one-part objects) the MD5 the store names.
 * Only when all of it is there do its top-level entries move into the
 * workspace (renameat2 RENAME_NOREPLACE); on any error the staging
 * directory and whatever moved go, so nothing is half restored.
 */
#include "oss_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "token.h"
#include "xmalloc.h"

struct download {
	struct oss_job *job;
	int targetfd;
	int stagefd;
	char stage[64];			/* its name in the workspace */
	struct oss_tree tree;
	size_t moved;			/* the top-level entries of tree
					 * before this index moved in */
};

static void
path_error(struct error *err, int status, const char *what,
    const char *path)
{
	char shown[128];

	oss_printable(shown, sizeof shown, path);
	error_set(err, status, "%s '%s'", what, shown);
}

static int
listed_cb(const char *key, uint64_t size, const char *etag, void *arg,
    struct error *err)
{
	struct download *d = arg;
	char *path = xstrdup(key + strlen(d->job->prefix) + 1);
	size_t n = strlen(path);
	int dir = n > 0 && path[n - 1] == '/';
	struct oss_entry *e;

	if (dir)
		path[n - 1] = '\0';
	if (!oss_valid_path(path)) {
		char shown[160];

		oss_printable(shown, sizeof shown, key);
		error_set(err, 502, "refusing to restore the stored key '%s': "
		    "it names no path inside a workspace", shown);
		free(path);
		return -1;
	}
	if (d->tree.n >= OSS_MAX_ENTRIES) {
		error_set(err, 413, "more than %d objects are stored there",
		    OSS_MAX_ENTRIES);
		free(path);
		return -1;
	}
	e = oss_tree_add(&d->tree, path, dir ? OSS_DIR : OSS_FILE);
	e->key = xstrdup(key);
	e->mode = dir ? 0755 : 0644;
	e->size = size;
	snprintf(e->etag, sizeof e->etag, "%s", etag);
	free(path);
	return 0;
}

/* A listing names files; their directories are implied: every ancestor
 * added, then one of each kept (a file and a directory of one path stay
 * both, for read_store to refuse). */
static void
add_parents(struct oss_tree *t)
{
	size_t n = t->n, kept = 0;

	for (size_t i = 0; i < n; i++) {
		char *p = xstrdup(t->v[i].path), *slash;

		while ((slash = strrchr(p, '/')) != NULL) {
			*slash = '\0';
			oss_tree_add(t, p, OSS_DIR)->mode = 0755;
		}
		free(p);
	}
	oss_tree_sort(t);
	for (size_t i = 0; i < t->n; i++) {
		struct oss_entry *e = &t->v[i];

		if (kept > 0 && e->kind == OSS_DIR &&
		    t->v[kept - 1].kind == OSS_DIR &&
		    strcmp(t->v[kept - 1].path, e->path) == 0) {
			free(e->path);
			free(e->key);
			continue;
		}
		t->v[kept++] = *e;
	}
	t->n = kept;
}

/* What is stored under the prefix, into d->tree. */
static int
read_store(struct download *d, struct s3 *s3, struct error *err)
{
	struct oss_job *job = d->job;
	char *key = oss_manifest_key(job->prefix), *files;
	int fd, rc, complete = 0;

	fd = open(job->tmpdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		error_set_errno(err, 500, errno, "cannot make a temporary file "
		    "in $SANDBOXD_STATE_DIR");
		free(key);
		return -1;
	}
	rc = oss_get_optional(s3, key, fd, (uint64_t)1 << 30, err);
	free(key);
	if (rc == 0) {
		rc = oss_manifest_read(fd, &d->tree, &complete, err);
		if (rc == 0 && !complete) {
			error_set(err, 409, "the workspace stored at '%s' is "
			    "incomplete: its last upload did not finish (release "
			    "the sandbox that held it again to finish it)",
			    job->prefix);
			rc = -1;
		}
	} else if (rc == 1) {
		files = xasprintf("%s/", job->prefix);
		rc = oss_list(s3, files, listed_cb, d, err);
		free(files);
		if (rc == 0)
			add_parents(&d->tree);
	}
	close(fd);
	if (rc < 0)
		return -1;
	for (size_t i = 1; i < d->tree.n; i++) {
		if (strcmp(d->tree.v[i - 1].path, d->tree.v[i].path) == 0) {
			path_error(err, 502, "the store names twice", d->tree.v[i].path);
			return -1;
		}
	}
	return 0;
}

/* The directory holding path, beneath the staging directory; *base at
 * path's last part. -1 with err. */
static int
open_parent(struct download *d, const char *path, const char **base,
    struct error *err)
{
	const char *slash = strrchr(path, '/');
	char *dir;
	int fd;

	*base = slash != NULL ? slash + 1 : path;
	dir = slash != NULL ? xstrndup(path, (size_t)(slash - path)) :
	    xstrdup(".");
	fd = oss_open_beneath(d->stagefd, dir, O_RDONLY | O_DIRECTORY |
	    O_NOFOLLOW, 0);
	free(dir);
	if (fd < 0)
		path_error(err, 502, "cannot restore (its directory is not "
		    "one)", path);
	return fd;
}

static int
give(struct oss_job *job, int fd, unsigned mode)
{
	/* Never a set-id bit, whoever wrote the store. */
	if (fchmod(fd, mode & 0777) < 0)
		return -1;
	return job->chown ? fchown(fd, job->uid, job->gid) : 0;
}

/* A directory (its mode and owner come after what it holds) or a
 * symlink, beneath the staging directory. */
static int
make_entry(struct download *d, const struct oss_entry *e, struct error *err)
{
	const char *base;
	int pfd = open_parent(d, e->path, &base, err), rc;

	if (pfd < 0)
		return -1;
	if (e->kind == OSS_DIR) {
		rc = mkdirat(pfd, base, 0700);
	} else {
		rc = symlinkat(e->target, pfd, base);
		if (rc == 0 && d->job->chown)
			rc = fchownat(pfd, base, d->job->uid, d->job->gid,
			    AT_SYMLINK_NOFOLLOW);
	}
	close(pfd);
	if (rc < 0)
		path_error(err, 502, e->kind == OSS_DIR ? "cannot make the "
		    "directory" : "cannot restore the symlink", e->path);
	return rc;
}

static int
file_task(struct oss_job *job, struct s3 *s3, size_t i, void *arg,
    struct error *err)
{
	struct download *d = arg;
	const struct oss_entry *e = &d->tree.v[i];
	const char *base;
	char *key;
	int pfd, fd, rc;

	if (e->kind != OSS_FILE)
		return 0;
	if ((pfd = open_parent(d, e->path, &base, err)) < 0)
		return -1;
	fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
	    O_CLOEXEC, 0600);
	close(pfd);
	if (fd < 0) {
		path_error(err, 502, "cannot restore the file", e->path);
		return -1;
	}
	key = e->key != NULL ? xstrdup(e->key) : oss_file_key(job->prefix,
	    e->path);
	rc = oss_get_fd(s3, key, fd, e->size, e->etag, err);
	free(key);
	if (rc == 0 && give(job, fd, e->mode) < 0) {
		path_error(err, 500, "cannot set the owner of", e->path);
		rc = -1;
	}
	close(fd);
	if (rc < 0)
		return -1;
	atomic_fetch_add(&job->stats.files_received, 1);
	atomic_fetch_add(&job->stats.bytes_received, e->size);
	return 0;
}

/* Directories' modes and owners once their contents are in, deepest
 * first (a read-only one would have refused them). */
static int
finish_dirs(struct download *d, struct error *err)
{
	for (size_t i = d->tree.n; i-- > 0;) {
		const struct oss_entry *e = &d->tree.v[i];
		int fd, rc;

		if (e->kind != OSS_DIR)
			continue;
		fd = oss_open_beneath(d->stagefd, e->path, O_RDONLY |
		    O_DIRECTORY | O_NOFOLLOW, 0);
		rc = fd < 0 ? -1 : give(d->job, fd, e->mode);
		if (fd >= 0)
			close(fd);
		if (rc < 0) {
			path_error(err, 500, "cannot set the owner of", e->path);
			return -1;
		}
	}
	return 0;
}

static int
top_level(const struct oss_entry *e)
{
	return strchr(e->path, '/') == NULL;
}

/* Every top-level entry into the workspace, none replacing anything. */
static int
move_in(struct download *d, struct error *err)
{
	for (size_t i = 0; i < d->tree.n; i++) {
		const struct oss_entry *e = &d->tree.v[i];
		struct stat st;

		if (top_level(e) && fstatat(d->targetfd, e->path, &st,
		    AT_SYMLINK_NOFOLLOW) == 0) {
			path_error(err, 409, "the workspace already holds",
			    e->path);
			error_prefix(err, "cannot restore into a mount_dir that "
			    "holds what the store has");
			return -1;
		}
	}
	for (size_t i = 0; i < d->tree.n; i++) {
		const struct oss_entry *e = &d->tree.v[i];

		if (!top_level(e))
			continue;
		if (renameat2(d->stagefd, e->path, d->targetfd, e->path,
		    RENAME_NOREPLACE) < 0) {
			path_error(err, 409, "cannot move into the workspace",
			    e->path);
			return -1;
		}
		d->moved = i + 1;
	}
	return 0;
}

/* Undo: what moved goes back, then the staging tree goes, deepest first
 * (all of it ours: made here, beneath our directory). */
static void
clean_up(struct download *d)
{
	for (size_t i = 0; i < d->moved; i++) {
		if (top_level(&d->tree.v[i]))
			renameat2(d->targetfd, d->tree.v[i].path, d->stagefd,
			    d->tree.v[i].path, RENAME_NOREPLACE);
	}
	for (size_t i = d->tree.n; i-- > 0;) {
		const struct oss_entry *e = &d->tree.v[i];
		const char *base;
		struct error ignored;
		int pfd = open_parent(d, e->path, &base, &ignored);

		if (pfd < 0)
			continue;
		unlinkat(pfd, base, e->kind == OSS_DIR ? AT_REMOVEDIR : 0);
		close(pfd);
	}
}

static int
restore(struct download *d, struct error *err)
{
	char tag[TOKEN_HEX_LEN];

	token_random_hex(tag);
	snprintf(d->stage, sizeof d->stage, ".sandboxd-restore-%.16s", tag);
	if (mkdirat(d->targetfd, d->stage, 0700) < 0 ||
	    (d->stagefd = openat(d->targetfd, d->stage, O_RDONLY |
	    O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		error_set_errno(err, 500, errno, "cannot make a staging "
		    "directory in the workspace");
		return -1;
	}
	for (size_t i = 0; i < d->tree.n; i++) {
		if (d->tree.v[i].kind == OSS_DIR && make_entry(d, &d->tree.v[i],
		    err) < 0)
			return -1;
	}
	if (oss_parallel(d->job, d->tree.n, file_task, d, err) < 0)
		return -1;
	for (size_t i = 0; i < d->tree.n; i++) {
		if (d->tree.v[i].kind == OSS_LINK && make_entry(d,
		    &d->tree.v[i], err) < 0)
			return -1;
	}
	if (finish_dirs(d, err) < 0 || oss_cancelled(d->job, err) < 0)
		return -1;
	return move_in(d, err);
}

void
oss_download_run(struct oss_job *job)
{
	struct download d = { .job = job, .targetfd = -1, .stagefd = -1 };
	struct s3 s3 = { 0 };
	struct error *err = &job->err;

	s3_open(&s3, oss_s3_config(), &job->cancel);
	d.targetfd = open(job->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
	if (d.targetfd < 0) {
		error_set_errno(err, 500, errno, "cannot open the workspace");
		job->failed = 1;
	} else if (read_store(&d, &s3, err) < 0) {
		job->failed = 1;
	} else if (d.tree.n > 0 && restore(&d, err) < 0) {
		job->failed = 1;
		if (d.stagefd >= 0)
			clean_up(&d);
	}
	if (d.stagefd >= 0) {
		close(d.stagefd);
		unlinkat(d.targetfd, d.stage, AT_REMOVEDIR);
	}
	if (d.targetfd >= 0)
		close(d.targetfd);
	s3_close(&s3);
	oss_tree_free(&d.tree);
}
