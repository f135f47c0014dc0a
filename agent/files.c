/*
 * GET /workspace/file?path=P&format=text|bytes and PUT /workspace/file?path=P.
 *
 * Both stream: a download reads the file a chunk at a time as the client
 * takes it (on_drain), an upload goes to a staged file through the disk
 * writer, pausing the socket while the disk is behind, and replaces the
 * target in one rename once the whole body is in. Neither holds more than
 * a few hundred KiB of the file in memory, whatever its size.
 */
#include "agent.h"
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "log.h"
#include "utf8.h"
#include "xmalloc.h"

#define READ_CHUNK	(64 * 1024)
#define READ_HIGH	(512 * 1024)	/* reply bytes queued before we wait */

/* A path query parameter, normalised. */
static int
query_path(struct agent *agent, struct http_request *req, char **rel,
    struct error *err)
{
	const char *path = http_request_query(req, "path");

	if (path == NULL) {
		error_set(err, 400, "query parameter 'path' is required");
		return -1;
	}
	return path_normalize(&agent->ws, path, rel, err);
}

/* Downloads. */

/* One download; freed when its reply ends or its client leaves. */
struct download {
	int fd;
	int text;
	uint64_t left;		/* bytes still to send (bytes format) */
	char partial[4];	/* an unfinished UTF-8 sequence (text) */
	size_t npartial;
};

static void
download_free(struct download *d)
{
	close(d->fd);
	free(d);
}

static void
write_text(struct http_request *req, const char *s, size_t len)
{
	char *clean;
	size_t clen;

	if (utf8_valid(s, len)) {
		http_reply_write(req, s, len);
		return;
	}
	clean = utf8_sanitize(s, len, &clen);
	http_reply_write(req, clean, clen);
	free(clean);
}

static void
download_pump(struct http_request *req, void *arg)
{
	struct download *d = arg;
	char buf[sizeof d->partial + READ_CHUNK];

	while (http_reply_pending(req) < READ_HIGH) {
		size_t have = d->npartial, len, whole;
		ssize_t n;

		memcpy(buf, d->partial, have);
		if (!d->text && d->left == 0) {
			http_reply_end(req);
			download_free(d);
			return;
		}
		n = read(d->fd, buf + have, !d->text && d->left < READ_CHUNK ?
		    (size_t)d->left : READ_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || (n == 0 && !d->text)) {
			/* Too late for an error status: the answer is cut, so
			 * the client cannot take it for the whole file. */
			log_warn("download cut short: %s", n < 0 ?
			    strerror(errno) : "the file shrank while read");
			http_reply_abort(req);
			download_free(d);
			return;
		}
		if (n == 0) {
			if (have > 0)
				write_text(req, buf, have);
			http_reply_end(req);
			download_free(d);
			return;
		}
		len = have + (size_t)n;
		if (!d->text) {
			http_reply_write(req, buf, len);
			d->left -= (uint64_t)n;
			continue;
		}
		/* A sequence cut by the chunk is finished by the next one. */
		whole = utf8_complete_prefix(buf, len);
		write_text(req, buf, whole);
		d->npartial = len - whole;
		memcpy(d->partial, buf + whole, d->npartial);
	}
}

static void
download_gone(struct http_request *req, void *arg)
{
	http_reply_end(req);
	download_free(arg);
}

void
files_route_get(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	const char *format = http_request_query(req, "format");
	struct download *d;
	struct error err = { 0 };
	struct stat st;
	char *rel = NULL;
	int fd = -1, text;

	if (format == NULL || strcmp(format, "text") == 0) {
		text = 1;
	} else if (strcmp(format, "bytes") == 0) {
		text = 0;
	} else {
		error_set(&err, 400, "format must be 'text' or 'bytes'");
		goto fail;
	}
	if (query_path(agent, req, &rel, &err) < 0)
		goto fail;
	/* O_NONBLOCK: opening a FIFO must not hang the agent. */
	fd = path_open(&agent->ws, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0,
	    &err);
	if (fd < 0)
		goto fail;
	if (fstat(fd, &st) < 0) {
		path_error(&err, errno, "stat", rel);
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		error_set(&err, 404, "%s is %s, not a file", rel[0] ? rel : ".",
		    S_ISDIR(st.st_mode) ? "a directory" : "special");
		goto fail;
	}
	free(rel);
	fcntl(fd, F_SETFL, 0);
	/* Text may change length as invalid UTF-8 is replaced; bytes are
	 * sent as they are, so the client learns the size up front. */
	http_reply_start(req, 200, text ? "text/plain; charset=utf-8" :
	    "application/octet-stream", text ? -1 : (int64_t)st.st_size);
	if (http_request_method(req) == HTTP_METHOD_HEAD) {
		close(fd);
		http_reply_end(req);
		return;
	}
	d = xcalloc(1, sizeof *d);
	d->fd = fd;
	d->text = text;
	d->left = (uint64_t)st.st_size;
	http_request_on_drain(req, download_pump, d);
	http_request_on_close(req, download_gone, d);
	download_pump(req, d);
	return;
fail:
	if (fd >= 0)
		close(fd);
	free(rel);
	http_reply_err(req, &err);
}

/* Uploads. */

/* One upload; freed when it is answered (or its client left). */
struct upload {
	struct agent *agent;
	struct http_request *req;
	char *rel;
	const char *base;		/* last component, in rel */
	int parentfd;
	struct created_dirs created;
	struct staged_file file;
	struct disk_writer *writer;
	uint64_t received;
	int paused;
	int body_done;
};

static void
upload_free(struct upload *up)
{
	disk_writer_free(up->writer);
	staged_discard(&up->file);
	fsops_created_free(&up->created);
	if (up->parentfd >= 0)
		close(up->parentfd);
	free(up->rel);
	free(up);
}

/* Nothing of a failed upload stays: no file, no new directories. */
static void
upload_fail(struct upload *up, const struct error *err)
{
	struct http_request *req = up->req;

	/* The writer may be amid a write to the file: it closes it. */
	if (up->writer != NULL && up->file.fd >= 0) {
		disk_writer_close(up->writer, up->file.fd);
		up->file.fd = -1;
	}
	disk_writer_free(up->writer);
	up->writer = NULL;
	staged_discard(&up->file);
	fsops_created_undo(up->agent, &up->created);
	upload_free(up);
	http_reply_err(req, err);
}

static void
upload_finish(struct upload *up)
{
	struct http_request *req = up->req;
	struct error err = { 0 };
	struct stat st;
	json_t *info;
	int e = disk_writer_error(up->writer);

	if (e != 0) {
		path_error(&err, e, "write", up->rel);
		upload_fail(up, &err);
		return;
	}
	/* Everything is written: the thread holds on to nothing of ours. */
	disk_writer_free(up->writer);
	up->writer = NULL;
	if (staged_commit(&up->file, up->agent, up->parentfd, up->base,
	    up->rel, &st, &err) < 0) {
		upload_fail(up, &err);
		return;
	}
	info = fsops_entry_json(up->agent, up->rel, &st);
	upload_free(up);
	http_reply_json(req, 200, info);
}

static void
upload_writer_cb(void *arg)
{
	struct upload *up = arg;
	struct error err = { 0 };
	int e = disk_writer_error(up->writer);

	if (e != 0) {
		path_error(&err, e, "write", up->rel);
		upload_fail(up, &err);
		return;
	}
	if (up->paused) {
		up->paused = 0;
		http_request_resume_body(up->req);
	}
	if (up->body_done && disk_writer_flush(up->writer))
		upload_finish(up);
}

static int
upload_data_cb(struct http_request *req, const char *data, size_t len,
    void *arg)
{
	struct upload *up = arg;
	size_t limit = up->agent->cfg.max_upload;
	struct error err = { 0 };
	int e = disk_writer_error(up->writer);

	up->received += len;
	if (limit > 0 && up->received > limit)
		error_set(&err, 413, "upload too large: the limit is %zu bytes",
		    limit);
	else if (e != 0)
		path_error(&err, e, "write", up->rel);
	if (err.status != 0) {
		upload_fail(up, &err);
		return -1;
	}
	switch (disk_writer_write(up->writer, up->file.fd, data, len, &err)) {
	case -1:
		upload_fail(up, &err);
		return -1;
	case 1:
		up->paused = 1;
		http_request_pause_body(req);
		break;
	}
	return 0;
}

static void
upload_end_cb(struct http_request *req, void *arg)
{
	struct upload *up = arg;

	(void)req;
	up->body_done = 1;
	if (disk_writer_flush(up->writer))
		upload_finish(up);
}

static void
upload_gone(struct http_request *req, void *arg)
{
	struct upload *up = arg;
	struct error err;

	char *rel = xstrdup(up->rel);

	(void)req;
	error_set(&err, 499, "client closed the connection");
	upload_fail(up, &err);
	/* Logged once the staged file and new directories are gone, so the
	 * line means the workspace is as it was. */
	log_info("upload of %s aborted by the client; nothing was written",
	    rel);
	free(rel);
}

/* A body the disk cannot hold fails now, not after it was sent. */
static int
check_space(int dirfd, int64_t length, const char *rel, struct error *err)
{
	struct statvfs sv;

	if (length <= 0 || fstatvfs(dirfd, &sv) < 0)
		return 0;
	if ((uint64_t)sv.f_bavail * sv.f_frsize < (uint64_t)length) {
		error_set(err, 507, "not enough space for %s: %lld bytes "
		    "needed, %llu free", rel, (long long)length,
		    (unsigned long long)sv.f_bavail * sv.f_frsize);
		return -1;
	}
	return 0;
}

void
files_route_put(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	int64_t length = http_request_content_length(req);
	struct upload *up = xcalloc(1, sizeof *up);
	struct error err = { 0 };
	struct stat st;
	char *rel = NULL;

	up->agent = agent;
	up->req = req;
	up->parentfd = -1;
	staged_init(&up->file);
	if (query_path(agent, req, &rel, &err) < 0 ||
	    fsops_follow_links(agent, rel, &up->rel, &err) < 0)
		goto fail;
	if (agent->cfg.max_upload > 0 && length > (int64_t)agent->cfg.max_upload) {
		error_set(&err, 413, "upload too large: %lld bytes, the limit "
		    "is %zu", (long long)length, agent->cfg.max_upload);
		goto fail;
	}
	up->parentfd = fsops_open_parent(agent, up->rel, &up->created,
	    &up->base, &err);
	if (up->parentfd < 0)
		goto fail;
	if (fstatat(up->parentfd, up->base, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISDIR(st.st_mode)) {
		error_set(&err, 409, "%s is a directory", up->rel);
		goto fail;
	}
	if (check_space(up->parentfd, length, up->rel, &err) < 0 ||
	    staged_create(&up->file, up->parentfd, 0, up->rel, &err) < 0)
		goto fail;
	free(rel);
	up->writer = disk_writer_new(agent->base, upload_writer_cb, up);
	http_request_on_body(req, upload_data_cb, upload_end_cb, up);
	http_request_on_close(req, upload_gone, up);
	return;
fail:
	free(rel);
	upload_fail(up, &err);
}
