/*
 * The reading tools: read_file / read_text_file (whole, head, tail),
 * read_media_file, read_multiple_files, get_file_info and
 * list_allowed_directories, with the npm server's results and Node's
 * error texts.
 */
#include "fstools.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "xmalloc.h"

/* fs.readFile(path, 'utf-8'). Caller frees the text. */
static char *
read_text(const struct workspace *ws, const struct fstools_path *p, size_t *len,
    char **msg)
{
	char *data, *text;

	if (fstools_read_file(ws, p, FSTOOLS_READ_TEXT, &data, len, msg) < 0)
		return NULL;
	text = fstools_utf8_decode(data, *len, len);
	if (text != data)
		free(data);
	return text;
}

/* The first n lines, joined by "\n" without the last one's newline, as the
 * server's headFile answers; reads no further than it needs to. */
static char *
head_text(const struct workspace *ws, const struct fstools_path *p, double n,
    size_t *len, char **msg)
{
	int fd = fstools_open_msg(ws, p, O_RDONLY | O_NONBLOCK, "open", msg);
	struct fstools_buf b = { 0 };
	size_t lines = 0, line_start = 0, end = 0;
	char chunk[64 * 1024], *text;

	if (fd < 0)
		return NULL;
	fstools_buf_add(&b, "", 0);
	while (n > 0) {
		ssize_t r = read(fd, chunk, sizeof chunk);
		int done = 0;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			*msg = fstools_msg_errno(errno, "read", NULL, NULL);
			free(b.s);
			close(fd);
			return NULL;
		}
		if (r == 0) {
			/* An unterminated last line counts as a line. */
			if (b.len > line_start)
				end = b.len;
			else if (lines > 0)
				end = line_start - 1;
			break;
		}
		fstools_buf_add(&b, chunk, (size_t)r);
		for (size_t i = b.len - (size_t)r; i < b.len && !done; i++) {
			if (b.s[i] != '\n')
				continue;
			lines++;
			line_start = i + 1;
			if ((double)lines >= n) {
				end = i;
				done = 1;
			}
		}
		if (done)
			break;
	}
	close(fd);
	text = fstools_utf8_decode(b.s, end, len);
	if (text != b.s) {
		free(b.s);
		return text;
	}
	b.s[end] = '\0';
	return b.s;
}

/* JavaScript's array.slice(start) index for an array of len items. */
static size_t
js_slice_start(double start, size_t len)
{
	/* Truncated toward zero first: -0.5 is 0, the whole array. */
	if (start <= -1)
		return -start >= (double)len ? 0 : len - (size_t)-start;
	if (start < 1)
		return 0;
	return start >= (double)len ? len : (size_t)start;
}

/* pread until size bytes are in or the file ends; -1 with errno. */
static ssize_t
pread_full(int fd, char *buf, size_t size, off_t off)
{
	size_t got = 0;

	while (got < size) {
		ssize_t r = pread(fd, buf + got, size - got, off + (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* The server's tailFile: 1 KiB blocks from the end until n newlines are
 * in, then CRLF folded and the last n lines kept. The block walk is kept
 * as is, since for fractional n it decides what comes back. */
static char *
tail_text(const struct workspace *ws, const struct fstools_path *p, double n,
    size_t *len, char **msg)
{
	int fd = fstools_open_msg(ws, p, O_PATH, "stat", msg);
	struct stat st;
	off_t pos;
	double newlines = 0;
	char *region, *text, *o;
	size_t tlen, count = 1, start, skip = 0, cap, have;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0) {
		*msg = fstools_msg_errno(errno, "stat", p->real, NULL);
		close(fd);
		return NULL;
	}
	close(fd);
	*len = 0;
	if (st.st_size == 0)
		return xstrdup("");
	if ((fd = fstools_open_msg(ws, p, O_RDONLY | O_NONBLOCK, "open",
	    msg)) < 0)
		return NULL;
	/* The blocks read so far sit at the end of region, growing down. */
	pos = st.st_size;
	cap = 4096;
	region = xmalloc(cap);
	have = 0;
	while (pos > 0 && newlines < n) {
		size_t size = pos < 1024 ? (size_t)pos : 1024;
		ssize_t r;

		if (have + size > cap) {
			char *bigger = xmalloc(cap * 2);

			memcpy(bigger + cap * 2 - have, region + cap - have,
			    have);
			free(region);
			region = bigger;
			cap *= 2;
		}
		r = pread_full(fd, region + cap - have - size, size,
		    pos - (off_t)size);
		if (r < 0) {
			*msg = fstools_msg_errno(errno, "read", NULL, NULL);
			free(region);
			close(fd);
			return NULL;
		}
		/* The file shrank under us: keep the whole blocks. */
		if ((size_t)r < size)
			break;
		pos -= (off_t)size;
		have += size;
		for (size_t i = cap - have; i < cap - have + size; i++)
			if (region[i] == '\n')
				newlines++;
	}
	close(fd);
	text = fstools_utf8_decode(region + cap - have, have, &tlen);
	if (text == region + cap - have)
		text = xstrndup(text, tlen);
	free(region);
	/* Fold CRLF to LF in place, then keep the last lines. */
	o = text;
	for (size_t i = 0; i < tlen; i++) {
		if (text[i] == '\r' && i + 1 < tlen && text[i + 1] == '\n')
			continue;
		*o++ = text[i];
	}
	tlen = (size_t)(o - text);
	for (size_t i = 0; i < tlen; i++)
		if (text[i] == '\n')
			count++;
	start = js_slice_start(-n, count);
	if (start >= count) {
		text[0] = '\0';
		return text;
	}
	for (size_t seen = 0; seen < start; skip++)
		if (text[skip] == '\n')
			seen++;
	memmove(text, text + skip, tlen - skip);
	*len = tlen - skip;
	text[*len] = '\0';
	return text;
}

json_t *
fstools_tool_read_text_file(const struct workspace *ws, json_t *args)
{
	double head = fstools_arg_number(args, "head");
	double tail = fstools_arg_number(args, "tail");
	struct fstools_path p;
	char *msg = NULL, *text;
	size_t len;
	json_t *result;

	if (fstools_path_resolve(ws, fstools_arg_string(args, "path"), &p,
	    &msg) < 0)
		return fstools_result_error_free(msg);
	if (head != 0 && tail != 0) {
		fstools_path_free(&p);
		return fstools_result_error("Cannot specify both head and tail "
		    "parameters simultaneously");
	}
	if (tail != 0)
		text = tail_text(ws, &p, tail, &len, &msg);
	else if (head != 0)
		text = head_text(ws, &p, head, &len, &msg);
	else
		text = read_text(ws, &p, &len, &msg);
	fstools_path_free(&p);
	if (text == NULL)
		return fstools_result_error_free(msg);
	result = fstools_result_text(text, len);
	free(text);
	return result;
}

json_t *
fstools_tool_read_multiple_files(const struct workspace *ws, json_t *args)
{
	json_t *paths = json_object_get(args, "paths"), *v, *result;
	struct fstools_buf b = { 0 };
	size_t i;

	json_array_foreach(paths, i, v) {
		const char *name = json_string_value(v);
		struct fstools_path p;
		char *msg = NULL, *text = NULL;
		size_t len;

		if (i > 0)
			fstools_buf_str(&b, "\n---\n");
		if (fstools_path_resolve(ws, name, &p, &msg) == 0) {
			text = read_text(ws, &p, &len, &msg);
			fstools_path_free(&p);
		}
		if (text != NULL) {
			fstools_buf_printf(&b, "%s:\n", name);
			fstools_buf_add(&b, text, len);
			fstools_buf_str(&b, "\n");
			free(text);
		} else {
			fstools_buf_printf(&b, "%s: Error - %s", name, msg);
			free(msg);
		}
	}
	result = fstools_result_text(b.s != NULL ? b.s : "", b.len);
	free(b.s);
	return result;
}

static const struct {
	const char *ext, *type;
} mime_types[] = {
	{ ".png", "image/png" }, { ".jpg", "image/jpeg" },
	{ ".jpeg", "image/jpeg" }, { ".gif", "image/gif" },
	{ ".webp", "image/webp" }, { ".bmp", "image/bmp" },
	{ ".svg", "image/svg+xml" }, { ".mp3", "audio/mpeg" },
	{ ".wav", "audio/wav" }, { ".ogg", "audio/ogg" },
	{ ".flac", "audio/flac" },
};

/* Node's path.extname, lower-cased, looked up in the server's table. */
static const char *
mime_type(const char *path)
{
	const char *base = strrchr(path, '/'), *dot;

	base = base != NULL ? base + 1 : path;
	dot = strrchr(base, '.');
	if (dot == NULL || dot == base)
		return "application/octet-stream";
	for (size_t i = 0; i < sizeof mime_types / sizeof mime_types[0]; i++)
		if (strcasecmp(dot, mime_types[i].ext) == 0)
			return mime_types[i].type;
	return "application/octet-stream";
}

static char *
base64(const unsigned char *s, size_t len)
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "abcdefghijklmnopqrstuvwxyz0123456789+/";
	char *out = xmalloc((len + 2) / 3 * 4 + 1), *o = out;

	for (size_t i = 0; i < len; i += 3) {
		unsigned v = (unsigned)s[i] << 16;

		if (i + 1 < len)
			v |= (unsigned)s[i + 1] << 8;
		if (i + 2 < len)
			v |= s[i + 2];
		*o++ = abc[v >> 18 & 63];
		*o++ = abc[v >> 12 & 63];
		*o++ = i + 1 < len ? abc[v >> 6 & 63] : '=';
		*o++ = i + 2 < len ? abc[v & 63] : '=';
	}
	*o = '\0';
	return out;
}

/* url.pathToFileURL(path).href as Node 20 writes it. */
static char *
file_url(const char *path)
{
	struct fstools_buf b = { 0 };

	fstools_buf_str(&b, "file://");
	for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
		if (*c <= 0x20 || *c >= 0x7f || strchr("\"#%<>?[\\]^`{|}~", *c))
			fstools_buf_printf(&b, "%%%02X", *c);
		else
			fstools_buf_add(&b, c, 1);
	}
	return fstools_buf_take(&b, NULL);
}

json_t *
fstools_tool_read_media_file(const struct workspace *ws, json_t *args)
{
	struct fstools_path p;
	char *msg = NULL, *data, *b64;
	const char *type;
	size_t len;
	json_t *item, *result, *content;

	if (fstools_path_resolve(ws, fstools_arg_string(args, "path"), &p,
	    &msg) < 0)
		return fstools_result_error_free(msg);
	if (fstools_read_file(ws, &p, FSTOOLS_READ_BASE64, &data, &len,
	    &msg) < 0) {
		fstools_path_free(&p);
		return fstools_result_error_free(msg);
	}
	b64 = base64((const unsigned char *)data, len);
	free(data);
	type = mime_type(p.real);
	item = json_object();
	if (strncmp(type, "image/", 6) == 0 ||
	    strncmp(type, "audio/", 6) == 0) {
		json_object_set_new(item, "type", json_string(type[0] == 'i' ?
		    "image" : "audio"));
		json_object_set_new(item, "data", json_string_nocheck(b64));
		json_object_set_new(item, "mimeType", json_string(type));
	} else {
		json_t *res = json_object();
		char *url = file_url(p.real);

		json_object_set_new(res, "uri", json_string_nocheck(url));
		json_object_set_new(res, "mimeType", json_string(type));
		json_object_set_new(res, "blob", json_string_nocheck(b64));
		json_object_set_new(item, "type", json_string("resource"));
		json_object_set_new(item, "resource", res);
		free(url);
	}
	free(b64);
	fstools_path_free(&p);
	content = json_array();
	json_array_append_new(content, item);
	result = json_object();
	json_object_set_new(result, "content", content);
	json_object_set_new(result, "structuredContent",
	    json_pack("{sO}", "content", content));
	json_object_set_new(result, "isError", json_false());
	return result;
}

/* Date.prototype.toString: "Mon Nov 23 2026 08:21:30 GMT+0000
 * (Coordinated Universal Time)". ICU's long zone names are only known
 * here for UTC and GMT; other zones show their abbreviation. */
static void
js_date(struct fstools_buf *b, const char *key, time_t t)
{
	struct tm tm;
	char when[64], off[8];
	const char *zone;

	localtime_r(&t, &tm);
	strftime(when, sizeof when, "%a %b %d %Y %H:%M:%S", &tm);
	strftime(off, sizeof off, "%z", &tm);
	zone = tm.tm_zone;
	if (zone == NULL || strcmp(zone, "UTC") == 0)
		zone = "Coordinated Universal Time";
	else if (strcmp(zone, "GMT") == 0)
		zone = "Greenwich Mean Time";
	fstools_buf_printf(b, "%s: %s GMT%s (%s)\n", key, when, off, zone);
}

json_t *
fstools_tool_get_file_info(const struct workspace *ws, json_t *args)
{
	struct fstools_path p;
	struct statx stx;
	struct fstools_buf b = { 0 };
	char *msg = NULL;
	int fd;
	json_t *result;

	if (fstools_path_resolve(ws, fstools_arg_string(args, "path"), &p,
	    &msg) < 0)
		return fstools_result_error_free(msg);
	if ((fd = fstools_open_msg(ws, &p, O_PATH, "stat", &msg)) < 0) {
		fstools_path_free(&p);
		return fstools_result_error_free(msg);
	}
	if (statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS | STATX_BTIME,
	    &stx) < 0) {
		msg = fstools_msg_errno(errno, "stat", p.real, NULL);
		close(fd);
		fstools_path_free(&p);
		return fstools_result_error_free(msg);
	}
	close(fd);
	fstools_path_free(&p);
	fstools_buf_printf(&b, "size: %llu\n",
	    (unsigned long long)stx.stx_size);
	js_date(&b, "created", (time_t)stx.stx_btime.tv_sec);
	js_date(&b, "modified", (time_t)stx.stx_mtime.tv_sec);
	js_date(&b, "accessed", (time_t)stx.stx_atime.tv_sec);
	fstools_buf_printf(&b, "isDirectory: %s\nisFile: %s\npermissions: %03o",
	    S_ISDIR(stx.stx_mode) ? "true" : "false",
	    S_ISREG(stx.stx_mode) ? "true" : "false", stx.stx_mode & 0777);
	result = fstools_result_text(b.s, b.len);
	free(b.s);
	return result;
}

json_t *
fstools_tool_list_allowed_directories(const struct workspace *ws, json_t *args)
{
	char *dirs = fstools_allowed_dirs(ws, "\n"), *text;
	json_t *result;

	(void)args;
	text = xasprintf("Allowed directories:\n%s", dirs);
	result = fstools_result_text(text, strlen(text));
	free(dirs);
	free(text);
	return result;
}
