/*
 * POST /workspace/files:batch: multipart/form-data with repeated "files"
 * parts and, optionally, as many "paths" fields (else each part's filename
 * is its path). Answers the entry infos of the written files, in order.
 *
 * The body is parsed as it streams in; each file part goes through the
 * disk writer into a file staged in a private directory in the workspace
 * root (root's alone: the user of the commands owns the root and could
 * swap any name there), since its path may come only in a later field.
 * Once the body is complete and the counts agree, every target is checked
 * and its missing directories made (a file bound for another mount is
 * copied there first), and only then is each renamed over its target, so
 * a batch that fails on any file leaves none of its files or directories
 * behind.
 */
#include "agent.h"
#include "files_ops.h"
#include "files_staged.h"
#include "files_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "log.h"
#include "multipart.h"
#include "xmalloc.h"

#define BATCH_MAX_FILES	1000	/* bounds the hidden files one batch stages */
#define BATCH_MAX_PATH	4096	/* bytes of one "paths" field */

enum batch_part_kind {
	PART_NONE,
	PART_FILE,
	PART_PATH,
	PART_OTHER,	/* a field we do not know: ignored */
};

/* One file part: its data, staged, and what it will become. */
struct batch_file {
	struct staged_file staged;
	char *filename;		/* NULL when the part had none */
	char *rel;		/* the target, once placed */
	int dirfd;		/* its directory, borrowed from dirs */
};

/* A directory the batch writes into, opened once however many files go
 * there: the staged files borrow its descriptor. */
struct batch_dir {
	char *rel;
	int fd;
};

/* One batch; freed when it is answered (or its client left). */
struct batch {
	struct agent *agent;
	struct http_request *req;
	struct multipart *mp;
	struct files_writer *writer;
	int rootfd;			/* the workspace root */
	struct staged_dir stage;	/* in the root: where parts are staged */
	struct batch_dir *dirs;
	size_t ndirs;
	struct batch_file *files;
	size_t nfiles;
	char **paths;
	size_t npaths;
	enum batch_part_kind part;
	char field[BATCH_MAX_PATH];	/* the "paths" field being read */
	size_t field_len;
	struct created_dirs created;
	uint64_t received;
	int paused;
	int body_done;
};

static void
batch_free(struct batch *b)
{
	files_writer_free(b->writer);
	for (size_t i = 0; i < b->nfiles; i++) {
		files_staged_discard(&b->files[i].staged);
		free(b->files[i].filename);
		free(b->files[i].rel);
	}
	free(b->files);
	for (size_t i = 0; i < b->ndirs; i++) {
		close(b->dirs[i].fd);
		free(b->dirs[i].rel);
	}
	free(b->dirs);
	for (size_t i = 0; i < b->npaths; i++)
		free(b->paths[i]);
	free(b->paths);
	if (b->mp != NULL)
		multipart_free(b->mp);
	files_ops_created_free(&b->created);
	files_staged_dir_remove(&b->stage);
	if (b->rootfd >= 0)
		close(b->rootfd);
	free(b);
}

/* The writer stops first: it may still hold descriptors of the parts, and
 * it closes the part being written, which it may be amid a write to. */
static void
batch_fail(struct batch *b, const struct error *err)
{
	struct http_request *req = b->req;
	struct staged_file *last = b->nfiles > 0 ?
	    &b->files[b->nfiles - 1].staged : NULL;

	if (b->writer != NULL && last != NULL && last->fd >= 0) {
		files_writer_close(b->writer, last->fd);
		last->fd = -1;
	}
	files_writer_free(b->writer);
	b->writer = NULL;
	for (size_t i = 0; i < b->nfiles; i++)
		files_staged_discard(&b->files[i].staged);
	files_ops_created_undo(b->agent, &b->created);
	batch_free(b);
	http_reply_err(req, err);
}

/* Multipart callbacks. */

static int
part_begin(const struct multipart_part *part, void *arg, struct error *err)
{
	struct batch *b = arg;
	struct batch_file *f;

	if (strcmp(part->name, "paths") == 0) {
		b->part = PART_PATH;
		b->field_len = 0;
		return 0;
	}
	if (strcmp(part->name, "files") != 0) {
		b->part = PART_OTHER;
		return 0;
	}
	if (b->nfiles == BATCH_MAX_FILES) {
		error_set(err, 413, "more than %d files in one batch",
		    BATCH_MAX_FILES);
		return -1;
	}
	b->files = xreallocarray(b->files, b->nfiles + 1, sizeof *b->files);
	f = &b->files[b->nfiles++];
	memset(f, 0, sizeof *f);
	f->filename = part->filename != NULL ? xstrdup(part->filename) : NULL;
	files_staged_init(&f->staged);
	b->part = PART_FILE;
	if (b->stage.fd < 0 && files_staged_dir_create(&b->stage, b->rootfd, err) < 0)
		return -1;
	return files_staged_create(&f->staged, b->stage.fd, 1,
	    f->filename != NULL ? f->filename : "a file part", err);
}

static int
part_data(const char *data, size_t len, void *arg, struct error *err)
{
	struct batch *b = arg;

	switch (b->part) {
	case PART_FILE:
		switch (files_writer_write(b->writer,
		    b->files[b->nfiles - 1].staged.fd, data, len, err)) {
		case -1:
			return -1;
		case 1:
			if (!b->paused) {
				b->paused = 1;
				http_request_pause_body(b->req);
			}
			break;
		}
		return 0;
	case PART_PATH:
		if (len > sizeof b->field - b->field_len) {
			error_set(err, 400, "a 'paths' field is longer than %d "
			    "bytes", BATCH_MAX_PATH);
			return -1;
		}
		memcpy(b->field + b->field_len, data, len);
		b->field_len += len;
		return 0;
	default:
		return 0;
	}
}

static int
part_end(void *arg, struct error *err)
{
	struct batch *b = arg;
	struct staged_file *s;

	switch (b->part) {
	case PART_FILE:
		/* The writer closes it after its data, which keeps one
		 * descriptor per batch however many files it holds. */
		s = &b->files[b->nfiles - 1].staged;
		files_writer_close(b->writer, s->fd);
		s->fd = -1;
		break;
	case PART_PATH:
		if (memchr(b->field, '\0', b->field_len) != NULL) {
			error_set(err, 400, "a 'paths' field holds a NUL byte");
			return -1;
		}
		b->paths = xreallocarray(b->paths, b->npaths + 1,
		    sizeof *b->paths);
		b->paths[b->npaths++] = xstrndup(b->field, b->field_len);
		break;
	default:
		break;
	}
	b->part = PART_NONE;
	return 0;
}

static const struct multipart_callbacks batch_multipart = {
	part_begin, part_data, part_end,
};

/* Placing the files once the body is in. */

/* The directory that will hold rel, created if need be. */
static int
target_dir(struct batch *b, const char *rel, const char **base,
    struct error *err)
{
	const char *slash = strrchr(rel, '/');
	size_t len = slash != NULL ? (size_t)(slash - rel) : 0;
	int fd;

	*base = slash != NULL ? slash + 1 : rel;
	for (size_t i = 0; i < b->ndirs; i++) {
		if (strlen(b->dirs[i].rel) == len &&
		    strncmp(b->dirs[i].rel, rel, len) == 0)
			return b->dirs[i].fd;
	}
	fd = files_ops_open_parent(b->agent, rel, &b->created, base, err);
	if (fd < 0)
		return -1;
	b->dirs = xreallocarray(b->dirs, b->ndirs + 1, sizeof *b->dirs);
	b->dirs[b->ndirs].rel = xstrndup(rel, len);
	b->dirs[b->ndirs].fd = fd;
	b->ndirs++;
	return fd;
}

/* Check file i's target, make its directory, and copy the file there if
 * a rename from the staging directory cannot reach it. */
static int
place(struct batch *b, size_t i, struct error *err)
{
	struct batch_file *f = &b->files[i];
	const char *target = b->npaths > 0 ? b->paths[i] : f->filename;
	const char *base;
	struct stat st;
	char *rel;
	int dirfd, rc;

	if (target == NULL || target[0] == '\0') {
		error_set(err, 400, "file %zu of the batch has no filename, and "
		    "no 'paths' fields were sent", i + 1);
		return -1;
	}
	if (path_normalize(&b->agent->ws, target, &rel, err) < 0)
		return -1;
	rc = files_ops_follow_links(b->agent, rel, &f->rel, err);
	free(rel);
	if (rc < 0)
		return -1;
	dirfd = target_dir(b, f->rel, &base, err);
	if (dirfd < 0)
		return -1;
	f->dirfd = dirfd;
	if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISDIR(st.st_mode)) {
		error_set(err, 409, "%s is a directory", f->rel);
		return -1;
	}
	if (!files_staged_same_mount(b->stage.fd, dirfd))
		return files_staged_copy_to(&f->staged, dirfd, f->rel, err);
	return 0;
}

static const char *
last_component(const char *rel)
{
	const char *slash = strrchr(rel, '/');

	return slash != NULL ? slash + 1 : rel;
}

static void
batch_finish(struct batch *b)
{
	struct http_request *req = b->req;
	struct error err = { 0 };
	json_t *infos;
	int e = files_writer_error(b->writer);

	if (e != 0) {
		path_error(&err, e, "write", "an uploaded file");
		batch_fail(b, &err);
		return;
	}
	files_writer_free(b->writer);
	b->writer = NULL;
	if (b->npaths > 0 && b->npaths != b->nfiles) {
		error_set(&err, 400, "%zu 'paths' fields for %zu 'files' parts: "
		    "the counts must match", b->npaths, b->nfiles);
		batch_fail(b, &err);
		return;
	}
	for (size_t i = 0; i < b->nfiles; i++) {
		if (place(b, i, &err) < 0) {
			batch_fail(b, &err);
			return;
		}
	}
	/* Renames within one mount: only a race can fail them now. */
	infos = json_array();
	for (size_t i = 0; i < b->nfiles; i++) {
		struct batch_file *f = &b->files[i];
		struct stat st;

		if (files_staged_commit(&f->staged, b->agent, f->dirfd,
		    last_component(f->rel), f->rel, &st, &err) < 0) {
			log_warn("batch upload: %zu of %zu files were written "
			    "before: %s", i, b->nfiles, err.msg);
			json_decref(infos);
			batch_fail(b, &err);
			return;
		}
		json_array_append_new(infos, files_ops_entry_json(b->agent, f->rel,
		    &st));
	}
	batch_free(b);
	http_reply_json(req, 200, infos);
}

/* Body and writer callbacks: the flow of files.c's uploads. */

static void
batch_writer_cb(void *arg)
{
	struct batch *b = arg;
	struct error err = { 0 };
	int e = files_writer_error(b->writer);

	if (e != 0) {
		path_error(&err, e, "write", "an uploaded file");
		batch_fail(b, &err);
		return;
	}
	if (b->paused) {
		b->paused = 0;
		http_request_resume_body(b->req);
	}
	if (b->body_done && files_writer_flush(b->writer))
		batch_finish(b);
}

static int
batch_data_cb(struct http_request *req, const char *data, size_t len,
    void *arg)
{
	struct batch *b = arg;
	size_t limit = b->agent->cfg.max_upload;
	struct error err = { 0 };
	int e = files_writer_error(b->writer);

	(void)req;
	b->received += len;
	if (limit > 0 && b->received > limit)
		error_set(&err, 413, "upload too large: the limit is %zu bytes",
		    limit);
	else if (e != 0)
		path_error(&err, e, "write", "an uploaded file");
	if (err.status != 0 || multipart_feed(b->mp, data, len, &err) < 0) {
		batch_fail(b, &err);
		return -1;
	}
	return 0;
}

static void
batch_end_cb(struct http_request *req, void *arg)
{
	struct batch *b = arg;
	struct error err = { 0 };

	(void)req;
	if (multipart_finish(b->mp, &err) < 0) {
		batch_fail(b, &err);
		return;
	}
	b->body_done = 1;
	if (files_writer_flush(b->writer))
		batch_finish(b);
}

static void
batch_gone(struct http_request *req, void *arg)
{
	struct error err;

	(void)req;
	error_set(&err, 499, "client closed the connection");
	batch_fail(arg, &err);
	/* After the cleanup: the line means the workspace is as it was. */
	log_info("batch upload aborted by the client; nothing was written");
}

void
files_batch_route(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	int64_t length = http_request_content_length(req);
	struct batch *b = xcalloc(1, sizeof *b);
	struct error err = { 0 };
	struct statvfs sv;
	char *boundary;

	b->agent = agent;
	b->req = req;
	b->rootfd = -1;
	files_staged_dir_init(&b->stage);
	boundary = multipart_boundary(http_request_header(req, "Content-Type"),
	    &err);
	if (boundary == NULL)
		goto fail;
	b->mp = multipart_new(boundary, &batch_multipart, b);
	free(boundary);
	if (agent->cfg.max_upload > 0 && length > (int64_t)agent->cfg.max_upload) {
		error_set(&err, 413, "upload too large: %lld bytes, the limit "
		    "is %zu", (long long)length, agent->cfg.max_upload);
		goto fail;
	}
	b->rootfd = path_open(&agent->ws, "", O_PATH | O_DIRECTORY, 0, &err);
	if (b->rootfd < 0)
		goto fail;
	if (length > 0 && fstatvfs(b->rootfd, &sv) == 0 &&
	    (uint64_t)sv.f_bavail * sv.f_frsize < (uint64_t)length) {
		error_set(&err, 507, "not enough space for the batch: %lld bytes "
		    "sent, %llu free", (long long)length,
		    (unsigned long long)sv.f_bavail * sv.f_frsize);
		goto fail;
	}
	b->writer = files_writer_new(agent->base, batch_writer_cb, b);
	http_request_on_body(req, batch_data_cb, batch_end_cb, b);
	http_request_on_close(req, batch_gone, b);
	return;
fail:
	batch_fail(b, &err);
}
