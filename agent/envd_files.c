/*
 * envd's GET and POST /files, as the user named by ?username= (else the
 * default user), at paths resolved as E2B resolves them (?path=, else,
 * for a multipart upload, each part's filename).
 *
 * GET streams the file the user's helper opened (files_send_fd): 404
 * when missing, 400 for a directory or anything but a regular file.
 * POST takes multipart/form-data (every "file" part is a file) or
 * application/octet-stream (one file at ?path=), optionally gzipped
 * (Content-Encoding: gzip), and X-Metadata-<key> headers stored with
 * each file. Each file is opened (made, with missing directories, or
 * truncated) by the helper, then written in place through the disk writer
 * as the body streams in, as envd writes it. The answer lists the files:
 * [{"name", "type": "file", "path", "metadata"?}].
 *
 * Memory stays bounded whatever the body: the socket is not read while a
 * file waits for its helper or the disk lags, so at most one piece of
 * the body is held (a gzipped piece is inflated a chunk at a time).
 * Errors are {"code": status, "message"}, as envd's.
 */
#include "envd.h"
#include "envd_fs.h"
#include "files_writer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <zlib.h>

#include "log.h"
#include "multipart.h"
#include "xmalloc.h"

#define METADATA_PREFIX		"X-Metadata-"
#define METADATA_MAX		4096	/* bytes of one file's metadata */
#define METADATA_XATTR_LEN	9	/* "user.e2b." */
#define INFLATE_CHUNK		(64 * 1024)

/* One file of an upload, in order; owned by the upload. */
struct upfile {
	TAILQ_ENTRY(upfile) entry;
	char *path;
	struct evbuffer *pending;	/* its data before it is open */
	int fd;				/* -1 until open */
	int ended;			/* all its data came */
	json_t *metadata;		/* what the file holds, once open */
};

/* One POST; freed when answered or its client left. */
struct upload {
	struct agent *agent;
	struct http_request *req;
	struct envd_user user;
	char *path;			/* ?path=, resolved; NULL: filenames */
	json_t *metadata;		/* from the headers */
	struct multipart *mp;		/* NULL: a raw body */
	int gzip;
	z_stream z;
	struct evbuffer *zin;		/* gzipped input not inflated yet */
	struct files_writer *writer;
	TAILQ_HEAD(, upfile) files;	/* not yet handed to the writer */
	struct upfile *cur;		/* the part coming in */
	struct envd_fs_op *op;		/* opening the first file */
	json_t *done;			/* the answer's entries */
	uint64_t size;			/* bytes of files, inflated */
	int writer_high;
	int paused;
	int body_done;
	int input_done;			/* the last file has ended */
	int failed;
};

static void advance(struct upload *up);

static void
upfile_free(struct upfile *f)
{
	if (f->pending != NULL)
		evbuffer_free(f->pending);
	if (f->fd >= 0)
		close(f->fd);
	json_decref(f->metadata);
	free(f->path);
	free(f);
}

static void
upload_free(struct upload *up)
{
	struct upfile *f;

	if (up->op != NULL)
		envd_fs_cancel(up->op);
	files_writer_free(up->writer);
	while ((f = TAILQ_FIRST(&up->files)) != NULL) {
		TAILQ_REMOVE(&up->files, f, entry);
		upfile_free(f);
	}
	if (up->mp != NULL)
		multipart_free(up->mp);
	if (up->gzip)
		inflateEnd(&up->z);
	if (up->zin != NULL)
		evbuffer_free(up->zin);
	json_decref(up->metadata);
	json_decref(up->done);
	envd_user_clear(&up->user);
	free(up->path);
	free(up);
}

static void
upload_fail(struct upload *up, const struct error *err)
{
	struct http_request *req = up->req;

	up->failed = 1;
	upload_free(up);
	envd_rest_error(req, err);
}

static void
upload_gone(struct http_request *req, void *arg)
{
	struct error err;

	(void)req;
	error_set(&err, 499, "client closed the connection");
	upload_fail(arg, &err);
}

/* A new file, at the end of the queue: where its data goes meanwhile. */
static int
file_begin(struct upload *up, const char *name, struct error *err)
{
	struct upfile *f, *g;
	char *path;
	size_t i;
	json_t *e;

	if ((path = envd_path_resolve(&up->user, up->path ? up->path : name,
	    err)) == NULL)
		return -1;
	json_array_foreach(up->done, i, e)
		if (strcmp(json_string_value(json_object_get(e, "path")),
		    path) == 0)
			break;
	TAILQ_FOREACH(g, &up->files, entry)
		if (strcmp(g->path, path) == 0)
			break;
	if (i < json_array_size(up->done) || g != NULL) {
		error_set(err, 400, "you cannot upload multiple files to the "
		    "same path '%.500s' in one upload request", path);
		free(path);
		return -1;
	}
	f = xcalloc(1, sizeof *f);
	f->path = path;
	f->fd = -1;
	f->pending = evbuffer_new();
	TAILQ_INSERT_TAIL(&up->files, f, entry);
	up->cur = f;
	advance(up);
	return 0;
}

static int
file_data(struct upload *up, const char *data, size_t len, struct error *err)
{
	struct upfile *f = up->cur;
	size_t limit = up->agent->cfg.max_upload;

	if (f == NULL)
		return 0;	/* a part that is not a file */
	up->size += len;
	if (limit > 0 && up->size > limit) {
		error_set(err, 413, "upload too large: the limit is %zu bytes",
		    limit);
		return -1;
	}
	if (f->fd < 0) {
		evbuffer_add(f->pending, data, len);
		return 0;
	}
	switch (files_writer_write(up->writer, f->fd, data, len, err)) {
	case -1:
		return -1;
	case 1:
		up->writer_high = 1;
		break;
	}
	return 0;
}

static void
file_end(struct upload *up)
{
	if (up->cur == NULL)
		return;
	up->cur->ended = 1;
	up->cur = NULL;
	advance(up);
}

static int
part_begin(const struct multipart_part *part, void *arg, struct error *err)
{
	struct upload *up = arg;

	up->cur = NULL;
	if (strcmp(part->name, "file") != 0)
		return 0;	/* other fields are not files (envd) */
	if (up->path == NULL && (part->filename == NULL ||
	    part->filename[0] == '\0')) {
		error_set(err, 400, "a file part needs a filename (its path) "
		    "when the query has no path");
		return -1;
	}
	return file_begin(up, part->filename, err);
}

static int
part_data(const char *data, size_t len, void *arg, struct error *err)
{
	return file_data(arg, data, len, err);
}

static int
part_end(void *arg, struct error *err)
{
	(void)err;
	file_end(arg);
	return 0;
}

static const struct multipart_callbacks part_cb = {
	part_begin, part_data, part_end,
};

/* Body bytes as they are (not gzipped). */
static int
feed(struct upload *up, const char *data, size_t len, struct error *err)
{
	if (up->mp != NULL)
		return multipart_feed(up->mp, data, len, err);
	return file_data(up, data, len, err);
}

/* A file waits for its helper or the disk lags: read no more. */
static int
blocked(struct upload *up)
{
	struct upfile *f = TAILQ_FIRST(&up->files);

	return up->writer_high || (f != NULL && f->fd < 0);
}

/* Inflate what is held while nothing blocks. */
static int
inflate_held(struct upload *up, struct error *err)
{
	unsigned char *out = xmalloc(INFLATE_CHUNK);
	int rc = 0, zrc;

	while (rc == 0 && !blocked(up) && evbuffer_get_length(up->zin) > 0) {
		size_t in_len = evbuffer_get_length(up->zin);

		up->z.next_in = evbuffer_pullup(up->zin, -1);
		up->z.avail_in = (uInt)in_len;
		up->z.next_out = out;
		up->z.avail_out = INFLATE_CHUNK;
		zrc = inflate(&up->z, Z_NO_FLUSH);
		evbuffer_drain(up->zin, in_len - up->z.avail_in);
		if (zrc == Z_STREAM_END)
			inflateReset(&up->z);	/* gzip members may follow */
		else if (zrc != Z_OK && zrc != Z_BUF_ERROR) {
			error_set(err, 400, "error decompressing the body: %s",
			    up->z.msg ? up->z.msg : "bad gzip data");
			rc = -1;
			break;
		}
		rc = feed(up, (char *)out, INFLATE_CHUNK - up->z.avail_out, err);
		if (zrc == Z_BUF_ERROR && up->z.avail_out == INFLATE_CHUNK)
			break;	/* needs more input */
	}
	free(out);
	return rc;
}

/* Everything is in and written: the answer. */
static void
finish(struct upload *up)
{
	struct http_request *req = up->req;
	json_t *done = up->done;
	struct error err = { 0 };
	int e = files_writer_error(up->writer);

	if (e != 0) {
		if (e == ENOSPC || e == EDQUOT)
			error_set(&err, 507, "not enough disk space available");
		else
			error_set(&err, 500, "error writing file: %s",
			    strerror(e));
		upload_fail(up, &err);
		return;
	}
	up->done = NULL;
	upload_free(up);
	http_reply_json(req, 200, done);
}

/* The body is all in and fed: the last part must have ended. */
static int
input_end(struct upload *up, struct error *err)
{
	up->input_done = 1;
	if (up->mp != NULL && multipart_finish(up->mp, err) < 0)
		return -1;
	file_end(up);
	return 0;
}

/* What can go on goes on: held input inflated, the next file opened,
 * the socket read again, the answer once all is written. */
static void
go_on(struct upload *up)
{
	struct error err = { 0 };
	int held;

	if (up->zin != NULL && inflate_held(up, &err) < 0) {
		upload_fail(up, &err);
		return;
	}
	held = up->zin != NULL && evbuffer_get_length(up->zin) > 0;
	if (up->body_done && !up->input_done && !held &&
	    input_end(up, &err) < 0) {
		upload_fail(up, &err);
		return;
	}
	if (blocked(up) || held) {
		if (!up->paused && !up->body_done) {
			up->paused = 1;
			http_request_pause_body(up->req);
		}
		return;
	}
	if (up->paused) {
		up->paused = 0;
		http_request_resume_body(up->req);
	}
	if (up->input_done && TAILQ_EMPTY(&up->files) &&
	    files_writer_flush(up->writer))
		finish(up);
}

static void
opened(struct envd_fs_reply *r, void *arg)
{
	struct upload *up = arg;
	struct upfile *f = TAILQ_FIRST(&up->files);
	struct error err = { 0 };
	struct stat st;

	up->op = NULL;
	if (r->err.status == 0 && (r->fd < 0 || fstat(r->fd, &st) < 0 ||
	    !S_ISREG(st.st_mode)))
		error_set(&r->err, 500, "the file helper broke the protocol");
	if (r->err.status != 0) {
		upload_fail(up, &r->err);
		return;
	}
	f->fd = r->fd;
	r->fd = -1;
	f->metadata = json_incref(json_object_get(r->result, "metadata"));
	if (evbuffer_get_length(f->pending) > 0 &&
	    files_writer_write(up->writer, f->fd, evbuffer_pullup(f->pending,
	    -1), evbuffer_get_length(f->pending), &err) == 1)
		up->writer_high = 1;
	evbuffer_drain(f->pending, evbuffer_get_length(f->pending));
	if (err.status != 0) {
		upload_fail(up, &err);
		return;
	}
	advance(up);
	go_on(up);
}

/* Files whose data all came and that are open go to the writer (which
 * closes them once written) and into the answer; the first file not open
 * gets opened. */
static void
advance(struct upload *up)
{
	struct upfile *f;
	json_t *entry;

	while ((f = TAILQ_FIRST(&up->files)) != NULL && f->fd >= 0 &&
	    f->ended) {
		TAILQ_REMOVE(&up->files, f, entry);
		files_writer_close(up->writer, f->fd);
		f->fd = -1;
		entry = json_pack("{s:s, s:s, s:s}", "name", strrchr(f->path,
		    '/') + 1, "type", "file", "path", f->path);
		if (json_object_size(f->metadata) > 0)
			json_object_set(entry, "metadata", f->metadata);
		json_array_append_new(up->done, entry);
		upfile_free(f);
	}
	if (f != NULL && f->fd < 0 && up->op == NULL)
		up->op = envd_fs_call(up->agent, &up->user, json_pack(
		    "{s:s, s:s, s:O}", "op", "open_write", "path", f->path,
		    "metadata", up->metadata), -1, opened, up);
}

static void
writer_cb(void *arg)
{
	struct upload *up = arg;

	up->writer_high = 0;
	if (files_writer_error(up->writer) != 0) {
		finish(up);	/* answers the error */
		return;
	}
	go_on(up);
}

static int
body_cb(struct http_request *req, const char *data, size_t len, void *arg)
{
	struct upload *up = arg;
	struct error err = { 0 };

	(void)req;
	if (up->zin != NULL)
		evbuffer_add(up->zin, data, len);
	else if (feed(up, data, len, &err) < 0) {
		upload_fail(up, &err);
		return -1;
	}
	go_on(up);
	return up->failed ? -1 : 0;
}

static void
end_cb(struct http_request *req, void *arg)
{
	struct upload *up = arg;

	(void)req;
	up->body_done = 1;
	go_on(up);
}

/* X-Metadata-<key>: <value> headers, as envd stores them: keys lower
 * case, both printable ASCII, all of them within what one file's
 * extended attributes hold. */
static json_t *
metadata_headers(struct http_request *req, struct error *err)
{
	json_t *meta = json_object();
	size_t plen = strlen(METADATA_PREFIX), total = 0;

	for (size_t i = 0; i < http_request_header_count(req); i++) {
		const char *name, *value;
		char *key;
		int ok = 1;

		http_request_header_at(req, i, &name, &value);
		if (strncasecmp(name, METADATA_PREFIX, plen) != 0 ||
		    name[plen] == '\0')
			continue;
		key = xstrdup(name + plen);
		for (char *c = key; *c != '\0'; c++) {
			*c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
			ok &= *c >= 0x20 && *c <= 0x7e;
		}
		for (const char *c = value; *c != '\0'; c++)
			ok &= *c >= 0x20 && *c <= 0x7e;
		total += METADATA_XATTR_LEN + strlen(key) + strlen(value);
		if (!ok || strlen(key) > 255 - METADATA_XATTR_LEN ||
		    total > METADATA_MAX) {
			error_set(err, 400, "invalid metadata: keys and values "
			    "must be printable ASCII, %d bytes in all at most",
			    METADATA_MAX);
			free(key);
			json_decref(meta);
			return NULL;
		}
		if (json_object_get(meta, key) == NULL)
			json_object_set_new(meta, key, json_string(value));
		free(key);
	}
	return meta;
}

/* The user of ?username= (absent: the default one). */
static int
query_user(struct agent *agent, struct http_request *req,
    struct envd_user *u, struct error *err)
{
	return envd_user_lookup(agent, http_request_query(req, "username"), u,
	    err);
}

void
envd_files_route_post(struct http_request *req, void *arg)
{
	struct upload *up = xcalloc(1, sizeof *up);
	const char *ct = http_request_header(req, "Content-Type");
	const char *ce = http_request_header(req, "Content-Encoding");
	const char *path = http_request_query(req, "path");
	struct error err = { 0 };
	char *boundary;

	up->agent = arg;
	up->req = req;
	up->done = json_array();
	TAILQ_INIT(&up->files);
	if (query_user(up->agent, req, &up->user, &err) < 0 ||
	    (up->metadata = metadata_headers(req, &err)) == NULL)
		goto fail;
	if (ce != NULL && strcasecmp(ce, "gzip") == 0) {
		up->gzip = 1;
		if (inflateInit2(&up->z, 16 + MAX_WBITS) != Z_OK)
			fatal("inflateInit2 failed");
		up->zin = evbuffer_new();
	} else if (ce != NULL && strcasecmp(ce, "identity") != 0) {
		error_set(&err, 400, "unsupported Content-Encoding: %.64s, "
		    "supported: gzip", ce);
		goto fail;
	}
	up->path = path != NULL ? xstrdup(path) : NULL;
	up->writer = files_writer_new(up->agent->base, writer_cb, up);
	if (ct != NULL && strncasecmp(ct, "multipart/", 10) == 0) {
		if ((boundary = multipart_boundary(ct, &err)) == NULL)
			goto fail;
		up->mp = multipart_new(boundary, &part_cb, up);
		free(boundary);
	} else if (ct != NULL && strncasecmp(ct, "application/octet-stream",
	    24) == 0) {
		if (path == NULL) {
			error_set(&err, 400, "path query parameter is required "
			    "for raw body upload");
			goto fail;
		}
		if (file_begin(up, path, &err) < 0)
			goto fail;
	} else {
		error_set(&err, 400, "unsupported content type: %.64s, expected "
		    "multipart/form-data or application/octet-stream",
		    ct != NULL ? ct : "none");
		goto fail;
	}
	http_request_on_body(req, body_cb, end_cb, up);
	http_request_on_close(req, upload_gone, up);
	return;
fail:
	upload_fail(up, &err);
}

/* GET. */

/* A download waiting for its file; freed once it has it. */
struct download {
	struct agent *agent;
	struct http_request *req;
	struct envd_fs_op *op;
};

static void
get_opened(struct envd_fs_reply *r, void *arg)
{
	struct download *d = arg;
	struct http_request *req = d->req;
	struct agent *agent = d->agent;

	free(d);
	if (r->err.status != 0) {
		envd_rest_error(req, &r->err);
		return;
	}
	files_send_fd(agent, req, r->fd);	/* checks it is a file */
	r->fd = -1;
}

static void
get_gone(struct http_request *req, void *arg)
{
	struct download *d = arg;

	envd_fs_cancel(d->op);
	free(d);
	http_reply_error(req, 499, "client closed the connection");
}

void
envd_files_route_get(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct envd_user u = { 0 };
	struct error err = { 0 };
	struct download *d;
	char *path;

	if (query_user(agent, req, &u, &err) < 0 || (path = envd_path_resolve(
	    &u, http_request_query(req, "path"), &err)) == NULL) {
		envd_user_clear(&u);
		envd_rest_error(req, &err);
		return;
	}
	d = xcalloc(1, sizeof *d);
	d->agent = agent;
	d->req = req;
	d->op = envd_fs_call(agent, &u, json_pack("{s:s, s:s}", "op",
	    "open_read", "path", path), -1, get_opened, d);
	http_request_on_close(req, get_gone, d);
	envd_user_clear(&u);
	free(path);
}
