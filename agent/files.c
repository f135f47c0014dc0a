/*
 * GET /workspace/file?path=P&format=text|bytes and PUT /workspace/file?path=P.
 *
 * Both stream: a download reads the file a chunk at a time, on a worker
 * thread, as the client takes it (on_drain); an upload goes to a staged
 * file through the disk writer, pausing the socket while the disk is
 * behind, and replaces the target in one rename once the whole body is in.
 * Neither holds more than a few hundred KiB of the file in memory, whatever
 * its size, and neither waits for the disk on the event loop.
 */
#include "agent.h"
#include "files_ops.h"
#include "files_staged.h"
#include "files_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "log.h"
#include "utf8.h"
#include "work_pool.h"
#include "xmalloc.h"

#define READ_CHUNK	(256 * 1024)	/* read by one job */
#define READ_PARTIAL	4		/* an unfinished UTF-8 sequence */
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

/* Downloads. Every touch of the disk (open, stat, each read) is a job of
 * the agent's I/O pool, so a slow disk holds up only its own download:
 * one chunk is read at a time, the next once the client has taken enough
 * of the reply. */

/* One download; freed when its reply ends or, once no read is under way,
 * its client leaves. */
struct download {
	struct agent *agent;
	struct http_request *req;
	char *rel;
	int fd;
	int text;
	int to_eof;		/* bytes, but of unknown size: to end of file */
	int head;		/* HEAD: open and stat only */
	int started;		/* the reply's headers went out */
	int busy;		/* a job is under way: it owns buf */
	int gone;		/* the client left meanwhile */
	struct error err;	/* of the open, in the first job */
	uint64_t size;
	uint64_t left;		/* bytes still to send (bytes format) */
	char *buf;		/* partial, then what the job read */
	size_t npartial;	/* an unfinished UTF-8 sequence (text) */
	size_t nread;		/* read by the last job */
	int read_errno;		/* of its read; 0 */
};

static void
download_free(struct download *d)
{
	if (d->fd >= 0)
		close(d->fd);
	free(d->rel);
	free(d->buf);
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

/* The first job opens the file (a FIFO must not hang it: O_NONBLOCK,
 * cleared once it is known to be a regular file). */
static int
download_open(struct download *d)
{
	struct stat st;
	int fd;

	fd = path_open(&d->agent->ws, d->rel, O_RDONLY | O_NONBLOCK | O_NOCTTY,
	    0, &d->err);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0) {
		path_error(&d->err, errno, "stat", d->rel);
		close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		error_set(&d->err, 404, "%s is %s, not a file",
		    d->rel[0] ? d->rel : ".",
		    S_ISDIR(st.st_mode) ? "a directory" : "special");
		close(fd);
		return -1;
	}
	fcntl(fd, F_SETFL, 0);
	d->fd = fd;
	d->size = d->left = (uint64_t)st.st_size;
	return 0;
}

/* On a worker. */
static void
download_run(void *arg)
{
	struct download *d = arg;
	size_t want = READ_CHUNK;
	ssize_t n;

	if (d->fd < 0 && download_open(d) < 0)
		return;
	if (d->head)
		return;
	if (!d->text && !d->to_eof && d->left < want)
		want = (size_t)d->left;
	d->nread = 0;
	d->read_errno = 0;
	while (d->nread < want) {
		n = read(d->fd, d->buf + d->npartial + d->nread,
		    want - d->nread);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			d->read_errno = n < 0 ? errno : 0;
			break;
		}
		d->nread += (size_t)n;
	}
}

static void download_next(struct download *d);

/* Hand what the job read to the reply; 1 when the download is over (and
 * d freed). */
static int
download_deliver(struct download *d)
{
	struct http_request *req = d->req;
	size_t len = d->npartial + d->nread, whole;

	if (d->read_errno != 0 || (d->nread == 0 && !d->text && d->left > 0)) {
		/* Too late for an error status: the answer is cut, so the
		 * client cannot take it for the whole file. */
		log_warn("download cut short: %s", d->read_errno != 0 ?
		    strerror(d->read_errno) : "the file shrank while read");
		http_reply_abort(req);
		download_free(d);
		return 1;
	}
	if (d->to_eof && d->nread > 0) {
		http_reply_write(req, d->buf, d->nread);
		return 0;
	} else if (!d->text && !d->to_eof) {
		http_reply_write(req, d->buf, d->nread);
		d->left -= d->nread;
		if (d->left > 0)
			return 0;
	} else if (d->nread > 0) {
		/* A sequence cut by the chunk is finished by the next one. */
		whole = utf8_complete_prefix(d->buf, len);
		write_text(req, d->buf, whole);
		d->npartial = len - whole;
		memmove(d->buf, d->buf + whole, d->npartial);
		return 0;
	} else if (d->npartial > 0) {
		write_text(req, d->buf, d->npartial);
	}
	http_reply_end(req);
	download_free(d);
	return 1;
}

static void
download_done(void *arg)
{
	struct download *d = arg;
	struct http_request *req = d->req;

	d->busy = 0;
	if (d->gone) {
		download_free(d);
		return;
	}
	if (!d->started) {
		if (d->fd < 0) {
			http_reply_err(req, &d->err);
			download_free(d);
			return;
		}
		d->started = 1;
		/* Text may change length as invalid UTF-8 is replaced; bytes
		 * are sent as they are, so the client learns the size up
		 * front. */
		http_reply_start(req, 200, d->text ? "text/plain; charset=utf-8" :
		    "application/octet-stream", d->text || d->to_eof ? -1 :
		    (int64_t)d->size);
		if (d->head) {
			http_reply_end(req);
			download_free(d);
			return;
		}
	}
	if (download_deliver(d) == 0)
		download_next(d);
}

/* Read on once the client has taken enough. */
static void
download_next(struct download *d)
{
	struct error err = { 0 };

	if (d->busy || http_reply_pending(d->req) >= READ_HIGH)
		return;
	d->busy = 1;
	if (work_pool_submit(d->agent->io_pool, download_run, download_done, d,
	    &err) == 0)
		return;
	d->busy = 0;
	log_warn("download cut short: %s", err.msg);
	http_reply_abort(d->req);
	download_free(d);
}

static void
download_drain(struct http_request *req, void *arg)
{
	(void)req;
	download_next(arg);
}

static void
download_gone(struct http_request *req, void *arg)
{
	struct download *d = arg;

	http_reply_end(req);
	if (d->busy)
		d->gone = 1;
	else
		download_free(d);
}

/* Its first job: the open (unless d has its file) and the first read. */
static void
download_start(struct agent *agent, struct http_request *req,
    struct download *d)
{
	struct error err = { 0 };

	d->agent = agent;
	d->req = req;
	d->buf = xmalloc(READ_PARTIAL + READ_CHUNK);
	d->busy = 1;
	if (agent->io_pool == NULL || work_pool_submit(agent->io_pool,
	    download_run, download_done, d, &err) < 0) {
		if (agent->io_pool == NULL)
			error_set(&err, 503, "file reads are unavailable: no "
			    "worker thread");
		http_reply_err(req, &err);
		download_free(d);
		return;
	}
	http_request_on_drain(req, download_drain, d);
	http_request_on_close(req, download_gone, d);
}

void
files_route_get(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	const char *format = http_request_query(req, "format");
	struct download *d;
	struct error err = { 0 };
	char *rel = NULL;
	int text;

	if (format == NULL || strcmp(format, "text") == 0) {
		text = 1;
	} else if (strcmp(format, "bytes") == 0) {
		text = 0;
	} else {
		http_reply_error(req, 400, "format must be 'text' or 'bytes'");
		return;
	}
	if (query_path(agent, req, &rel, &err) < 0) {
		http_reply_err(req, &err);
		return;
	}
	d = xcalloc(1, sizeof *d);
	d->rel = rel;
	d->fd = -1;
	d->text = text;
	d->head = http_request_method(req) == HTTP_METHOD_HEAD;
	download_start(agent, req, d);
}

void
files_send_fd(struct agent *agent, struct http_request *req, int fd)
{
	struct download *d = xcalloc(1, sizeof *d);
	struct statfs sf;
	struct stat st;

	d->rel = xstrdup("");
	d->fd = fd;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		http_reply_error(req, 500, "not a regular file");
		download_free(d);
		return;
	}
	d->size = d->left = (uint64_t)st.st_size;
	/* /proc and /sys files say 0 bytes and hold more. */
	d->to_eof = st.st_size == 0 && fstatfs(fd, &sf) == 0 &&
	    (sf.f_type == PROC_SUPER_MAGIC || sf.f_type == SYSFS_MAGIC);
	download_start(agent, req, d);
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
	struct files_writer *writer;
	uint64_t received;
	int paused;
	int body_done;
};

static void
upload_free(struct upload *up)
{
	files_writer_free(up->writer);
	files_staged_discard(&up->file);
	files_ops_created_free(&up->created);
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
		files_writer_close(up->writer, up->file.fd);
		up->file.fd = -1;
	}
	files_writer_free(up->writer);
	up->writer = NULL;
	files_staged_discard(&up->file);
	files_ops_created_undo(up->agent, &up->created);
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
	int e = files_writer_error(up->writer);

	if (e != 0) {
		path_error(&err, e, "write", up->rel);
		upload_fail(up, &err);
		return;
	}
	/* Everything is written: the thread holds on to nothing of ours. */
	files_writer_free(up->writer);
	up->writer = NULL;
	if (files_staged_commit(&up->file, up->agent, up->parentfd, up->base,
	    up->rel, &st, &err) < 0) {
		upload_fail(up, &err);
		return;
	}
	info = files_ops_entry_json(up->agent, up->rel, &st);
	upload_free(up);
	http_reply_json(req, 200, info);
}

static void
upload_writer_cb(void *arg)
{
	struct upload *up = arg;
	struct error err = { 0 };
	int e = files_writer_error(up->writer);

	if (e != 0) {
		path_error(&err, e, "write", up->rel);
		upload_fail(up, &err);
		return;
	}
	if (up->paused) {
		up->paused = 0;
		http_request_resume_body(up->req);
	}
	if (up->body_done && files_writer_flush(up->writer))
		upload_finish(up);
}

static int
upload_data_cb(struct http_request *req, const char *data, size_t len,
    void *arg)
{
	struct upload *up = arg;
	size_t limit = up->agent->cfg.max_upload;
	struct error err = { 0 };
	int e = files_writer_error(up->writer);

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
	switch (files_writer_write(up->writer, up->file.fd, data, len, &err)) {
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
	if (files_writer_flush(up->writer))
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
	files_staged_init(&up->file);
	if (query_path(agent, req, &rel, &err) < 0 ||
	    files_ops_follow_links(agent, rel, &up->rel, &err) < 0)
		goto fail;
	if (agent->cfg.max_upload > 0 && length > (int64_t)agent->cfg.max_upload) {
		error_set(&err, 413, "upload too large: %lld bytes, the limit "
		    "is %zu", (long long)length, agent->cfg.max_upload);
		goto fail;
	}
	up->parentfd = files_ops_open_parent(agent, up->rel, &up->created,
	    &up->base, &err);
	if (up->parentfd < 0)
		goto fail;
	if (fstatat(up->parentfd, up->base, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISDIR(st.st_mode)) {
		error_set(&err, 409, "%s is a directory", up->rel);
		goto fail;
	}
	if (check_space(up->parentfd, length, up->rel, &err) < 0 ||
	    files_staged_create(&up->file, up->parentfd, 0, up->rel, &err) < 0)
		goto fail;
	free(rel);
	up->writer = files_writer_new(agent->base, upload_writer_cb, up);
	http_request_on_body(req, upload_data_cb, upload_end_cb, up);
	http_request_on_close(req, upload_gone, up);
	return;
fail:
	free(rel);
	upload_fail(up, &err);
}
