/*
 * A release's upload, on a worker thread: walk the workspace (nothing
 * followed), list what the store holds under the prefix, and send only
 * the files whose size and ETag differ from their objects (several at a
 * time, each streamed from its descriptor). Before the first byte goes
 * out, the manifest is replaced by an incomplete marker naming every file
 * this upload and the last one may leave, so a cut upload is never
 * restored as a whole one and its leftovers are deleted by the next. The
 * new manifest goes last; then the objects of files deleted since the
 * last upload go. An unchanged workspace costs the listings and the old
 * manifest's GET.
 */
#include "oss_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "xmalloc.h"

/* The store's side of one upload. */
struct upload {
	struct oss_job *job;
	int rootfd;
	struct oss_tree tree;		/* the workspace now */
	struct oss_tree old;		/* files the last manifest names */
	struct oss_tree raw;		/* objects under P.sandboxd/: by key */
	int have_manifest;
	uint64_t manifest_size;
	char manifest_etag[OSS_ETAG_MAX];
	pthread_mutex_t lock;		/* the marker, by the first sender */
	int marker;			/* 1 put, -1 failed */
	struct error marker_err;
};

/* A temporary file of ours (never in a workspace). */
static int
temp_file(struct oss_job *job, struct error *err)
{
	int fd = open(job->tmpdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0)
		error_set_errno(err, 500, errno, "cannot make a temporary file "
		    "in $SANDBOXD_STATE_DIR");
	return fd;
}

static int
listed_cb(const char *key, uint64_t size, const char *etag, void *arg,
    struct error *err)
{
	struct upload *u = arg;
	const char *path = key + strlen(u->job->prefix) + 1;
	struct oss_entry *e = oss_tree_find(&u->tree, path);

	(void)err;
	if (e != NULL && e->kind == OSS_FILE) {
		e->stored = 1;
		e->stored_size = size;
		snprintf(e->stored_etag, sizeof e->stored_etag, "%s", etag);
	}
	return 0;
}

static int
meta_cb(const char *key, uint64_t size, const char *etag, void *arg,
    struct error *err)
{
	struct upload *u = arg;
	char *manifest = oss_manifest_key(u->job->prefix);
	struct oss_entry *e;

	(void)err;
	if (strcmp(key, manifest) == 0) {
		u->have_manifest = 1;
		u->manifest_size = size;
		snprintf(u->manifest_etag, sizeof u->manifest_etag, "%s", etag);
	} else if (u->raw.n < OSS_MAX_ENTRIES) {
		e = oss_tree_add(&u->raw, key, OSS_FILE);
		e->size = size;
		snprintf(e->etag, sizeof e->etag, "%s", etag);
	}
	free(manifest);
	return 0;
}

/* What the store holds: objects under P/ and P.sandboxd/, and the files
 * the last manifest names. */
static int
survey(struct upload *u, struct s3 *s3, struct error *err)
{
	struct oss_job *job = u->job;
	char *files = xasprintf("%s/", job->prefix);
	char *meta = xasprintf("%s" OSS_META_SUFFIX "/", job->prefix);
	int rc, fd, complete;

	rc = oss_list(s3, files, listed_cb, u, err);
	if (rc == 0)
		rc = oss_list(s3, meta, meta_cb, u, err);
	free(files);
	free(meta);
	if (rc < 0)
		return -1;
	oss_tree_sort(&u->raw);
	for (size_t i = 0; i < u->tree.n; i++) {
		struct oss_entry *e = &u->tree.v[i], *r;
		char *key;

		if (e->kind != OSS_FILE || oss_plain_key(job->prefix, e->path))
			continue;
		key = oss_file_key(job->prefix, e->path);
		if ((r = oss_tree_find(&u->raw, key)) != NULL) {
			e->stored = 1;
			e->stored_size = r->size;
			memcpy(e->stored_etag, r->etag, sizeof e->stored_etag);
		}
		free(key);
	}
	if (!u->have_manifest)
		return 0;
	if ((fd = temp_file(job, err)) < 0)
		return -1;
	{
		char *key = oss_manifest_key(job->prefix);

		rc = oss_get_optional(s3, key, fd, u->manifest_size, err);
		free(key);
	}
	/* Gone since the listing: as if there were none. */
	if (rc == 0 && oss_manifest_read(fd, &u->old, &complete, err) < 0) {
		/* Unreadable: its files are not ours to delete. */
		log_warn("sandbox %s: ignoring the stored manifest: %s",
		    job->name, err->msg);
		oss_tree_free(&u->old);
	}
	close(fd);
	return rc < 0 ? -1 : 0;
}

/* Put the manifest of tree (complete) or the incomplete marker. */
static int
put_manifest(struct upload *u, struct s3 *s3, int complete, int *sent,
    struct error *err)
{
	struct oss_job *job = u->job;
	char *key, etag[OSS_ETAG_MAX];
	struct stat st;
	int fd, rc = -1;

	if ((fd = temp_file(job, err)) < 0)
		return -1;
	if (oss_manifest_write(fd, &u->tree, complete, &u->old, err) < 0)
		goto out;
	if (fstat(fd, &st) < 0) {
		error_set_errno(err, 500, errno, "cannot read a manifest");
		goto out;
	}
	/* The same manifest as the one stored: nothing to send. */
	if (complete && u->have_manifest && u->marker == 0 &&
	    (uint64_t)st.st_size == u->manifest_size &&
	    oss_etag_fd(job, fd, (uint64_t)st.st_size, etag, err) == 0 &&
	    strcasecmp(etag, u->manifest_etag) == 0) {
		rc = 0;
		goto out;
	}
	key = oss_manifest_key(job->prefix);
	rc = oss_put_fd(s3, key, fd, (uint64_t)st.st_size, NULL, err);
	free(key);
	if (rc == 0)
		*sent = 1;
out:
	close(fd);
	return rc;
}

/* Before the first file goes: the marker, once, by whichever thread
 * gets here first (the others wait for it). */
static int
ensure_marker(struct upload *u, struct s3 *s3, struct error *err)
{
	int sent = 0, rc;

	pthread_mutex_lock(&u->lock);
	if (u->marker == 0) {
		u->marker = put_manifest(u, s3, 0, &sent, &u->marker_err) == 0 ?
		    1 : -1;
	}
	if ((rc = u->marker) < 0)
		*err = u->marker_err;
	pthread_mutex_unlock(&u->lock);
	return rc < 0 ? -1 : 0;
}

static int
file_task(struct oss_job *job, struct s3 *s3, size_t i, void *arg,
    struct error *err)
{
	struct upload *u = arg;
	struct oss_entry *e = &u->tree.v[i];
	char etag[OSS_ETAG_MAX], shown[128], *key;
	struct stat st;
	int fd, rc;

	if (e->kind != OSS_FILE)
		return 0;
	oss_printable(shown, sizeof shown, e->path);
	fd = oss_open_beneath(u->rootfd, e->path, O_RDONLY | O_NOFOLLOW |
	    O_NONBLOCK, 0);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		error_set(err, 409, "the workspace's '%s' changed while it was "
		    "uploaded", shown);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	e->size = (uint64_t)st.st_size;
	e->mode = st.st_mode & 07777;
	if (e->stored && e->stored_size == e->size) {
		if (oss_etag_fd(job, fd, e->size, etag, err) < 0) {
			close(fd);
			return -1;
		}
		if (strcasecmp(etag, e->stored_etag) == 0) {
			memcpy(e->etag, etag, sizeof e->etag);
			atomic_fetch_add(&job->stats.unchanged, 1);
			close(fd);
			return 0;
		}
	}
	if (ensure_marker(u, s3, err) < 0) {
		close(fd);
		return -1;
	}
	key = oss_file_key(job->prefix, e->path);
	rc = oss_put_fd(s3, key, fd, e->size, e->etag, err);
	free(key);
	close(fd);
	if (rc < 0) {
		error_prefix(err, "'%s'", shown);
		return -1;
	}
	atomic_fetch_add(&job->stats.files_sent, 1);
	atomic_fetch_add(&job->stats.bytes_sent, e->size);
	return 0;
}

/* Objects of files the last manifests named that are no more. */
static int
delete_stale(struct upload *u, struct s3 *s3, struct error *err)
{
	char **keys = NULL;
	size_t n = 0;
	int rc;

	for (size_t i = 0; i < u->old.n; i++) {
		const struct oss_entry *now;

		if (u->old.v[i].kind != OSS_FILE)
			continue;
		now = oss_tree_find(&u->tree, u->old.v[i].path);
		if (now != NULL && now->kind == OSS_FILE)
			continue;
		keys = xreallocarray(keys, n + 1, sizeof *keys);
		keys[n++] = oss_file_key(u->job->prefix, u->old.v[i].path);
	}
	rc = n > 0 ? oss_delete(s3, keys, n, err) : 0;
	if (rc == 0)
		atomic_fetch_add(&u->job->stats.deleted, n);
	for (size_t i = 0; i < n; i++)
		free(keys[i]);
	free(keys);
	return rc;
}

void
oss_upload_run(struct oss_job *job)
{
	struct upload u = { .job = job, .rootfd = -1 };
	struct s3 s3 = { 0 };
	struct error *err = &job->err;
	int sent = 0;

	pthread_mutex_init(&u.lock, NULL);
	s3_open(&s3, oss_s3_config(), &job->cancel);
	u.rootfd = open(job->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
	if (u.rootfd < 0) {
		error_set_errno(err, 500, errno, "cannot open the workspace");
		goto fail;
	}
	if (oss_walk(u.rootfd, &u.tree, job, err) < 0 ||
	    survey(&u, &s3, err) < 0 ||
	    oss_parallel(job, u.tree.n, file_task, &u, err) < 0 ||
	    put_manifest(&u, &s3, 1, &sent, err) < 0 ||
	    delete_stale(&u, &s3, err) < 0)
		goto fail;
	goto out;
fail:
	job->failed = 1;
out:
	if (u.rootfd >= 0)
		close(u.rootfd);
	s3_close(&s3);
	oss_tree_free(&u.tree);
	oss_tree_free(&u.old);
	oss_tree_free(&u.raw);
	pthread_mutex_destroy(&u.lock);
}
