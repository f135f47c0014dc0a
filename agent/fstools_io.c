/*
 * Helpers the filesystem tools share: a growing string, reading a whole
 * file, Node's UTF-8 decoding, the atomic replace the npm server writes
 * files with, and the shape of results.
 */
#include "fstools.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "token.h"
#include "xmalloc.h"

void
fstools_buf_add(struct fstools_buf *b, const void *p, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;

		while (cap < b->len + n + 1)
			cap *= 2;
		b->s = xrealloc(b->s, cap);
		b->cap = cap;
	}
	if (n > 0)
		memcpy(b->s + b->len, p, n);
	b->len += n;
	b->s[b->len] = '\0';
}

void
fstools_buf_str(struct fstools_buf *b, const char *s)
{
	fstools_buf_add(b, s, strlen(s));
}

void
fstools_buf_printf(struct fstools_buf *b, const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	s = xvasprintf(fmt, ap);
	va_end(ap);
	fstools_buf_str(b, s);
	free(s);
}

char *
fstools_buf_take(struct fstools_buf *b, size_t *len)
{
	char *s;

	if (b->s == NULL)
		fstools_buf_add(b, "", 0);
	s = b->s;
	if (len != NULL)
		*len = b->len;
	memset(b, 0, sizeof *b);
	return s;
}

int
fstools_read_fd(int fd, char **data, size_t *len)
{
	struct fstools_buf b = { 0 };
	struct stat st;
	size_t want = 64 * 1024;

	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
		want = (size_t)st.st_size + 1;
	fstools_buf_add(&b, "", 0);
	for (;;) {
		ssize_t n;

		if (b.cap - b.len < want + 1) {
			b.s = xrealloc(b.s, b.len + want + 1);
			b.cap = b.len + want + 1;
		}
		n = read(fd, b.s + b.len, b.cap - b.len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;

			free(b.s);
			return e;
		}
		if (n == 0)
			break;
		b.len += (size_t)n;
		want = 64 * 1024;
	}
	b.s[b.len] = '\0';
	*data = b.s;
	*len = b.len;
	return 0;
}

/* Node's limits: readFile refuses files over 2 GiB, and no string may
 * be longer than 0x1fffffe8 UTF-16 units. */
#define NODE_MAX_FILE 2147483647LL
#define NODE_MAX_STRING 0x1fffffe8LL

int
fstools_read_file(const struct workspace *ws, const struct fstools_path *p,
    enum fstools_read_as as, char **data, size_t *len, char **msg)
{
	int fd = fstools_open_msg(ws, p, O_RDONLY | O_NONBLOCK, "open", msg), e;
	struct stat st;

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		long long size = (long long)st.st_size;

		if (as == FSTOOLS_READ_TEXT && size > NODE_MAX_FILE)
			*msg = xasprintf("File size (%lld) is greater than "
			    "2 GiB", size);
		else if ((as == FSTOOLS_READ_TEXT ? size :
		    (size + 2) / 3 * 4) > NODE_MAX_STRING)
			*msg = xasprintf("Cannot create a string longer than "
			    "0x%llx characters", NODE_MAX_STRING);
		if (*msg != NULL) {
			close(fd);
			return -1;
		}
	}
	e = fstools_read_fd(fd, data, len);
	close(fd);
	if (e != 0) {
		*msg = fstools_msg_errno(e, "read", NULL, NULL);
		return -1;
	}
	return 0;
}

/* Length of the well-formed sequence at s, or 0 for an invalid one, in
 * which case *bad is how many bytes form its maximal subpart (WHATWG). */
static size_t
utf8_sequence(const unsigned char *s, size_t len, size_t *bad)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t need, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		need = 1;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 2;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 3;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
	} else {
		*bad = 1;
		return 0;
	}
	for (i = 1; i <= need; i++) {
		if (i >= len || s[i] < lo || s[i] > hi) {
			*bad = i;
			return 0;
		}
		lo = 0x80;
		hi = 0xbf;
	}
	return need + 1;
}

/* Length of the valid prefix of s; ASCII goes 8 bytes at a time. */
static size_t
utf8_valid_prefix(const unsigned char *u, size_t len)
{
	size_t i = 0, bad, n;

	for (;;) {
		while (i + 8 <= len) {
			uint64_t w;

			memcpy(&w, u + i, 8);
			if (w & 0x8080808080808080ULL)
				break;
			i += 8;
		}
		if (i == len || (n = utf8_sequence(u + i, len - i, &bad)) == 0)
			return i;
		i += n;
	}
}

char *
fstools_utf8_decode(char *s, size_t len, size_t *outlen)
{
	const unsigned char *u = (const unsigned char *)s;
	struct fstools_buf b = { 0 };
	size_t i = utf8_valid_prefix(u, len), bad, n;

	*outlen = len;
	if (i == len)
		return s;
	fstools_buf_add(&b, s, i);
	while (i < len) {
		n = utf8_sequence(u + i, len - i, &bad);
		if (n > 0) {
			fstools_buf_add(&b, s + i, n);
			i += n;
		} else {
			fstools_buf_add(&b, "\xef\xbf\xbd", 3);
			i += bad;
		}
	}
	return fstools_buf_take(&b, outlen);
}

int
fstools_replace_file(const struct workspace *ws, const struct fstools_path *p,
    const char *data, size_t len, int mode, char **msg)
{
	char hex[TOKEN_HEX_LEN], *tmp, *tmp_real;
	const char *base;
	int dirfd, fd, e = 0, ret = -1;

	token_random_hex(hex);
	tmp_real = xasprintf("%s.%s.tmp", p->real, hex);
	dirfd = fstools_open_parent(ws, p->rel, &base);
	if (dirfd < 0) {
		*msg = fstools_msg_errno(errno, "open", tmp_real, NULL);
		free(tmp_real);
		return -1;
	}
	tmp = xasprintf("%s.%s.tmp", base, hex);
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
	    O_CLOEXEC, 0666);
	if (fd < 0) {
		*msg = fstools_msg_errno(errno, "open", tmp_real, NULL);
		goto out;
	}
	if (fdio_write_all(fd, data, len) < 0)
		e = errno;
	/* The mode goes on before the rename, so the file never shows up
	 * under its name with the wrong one. */
	if (e == 0 && mode >= 0)
		(void)fchmod(fd, (mode_t)mode & 0777);
	close(fd);
	if (e != 0) {
		*msg = fstools_msg_errno(e, "write", NULL, NULL);
		unlinkat(dirfd, tmp, 0);
		goto out;
	}
	if (renameat(dirfd, tmp, dirfd, base) < 0) {
		*msg = fstools_msg_errno(errno, "rename", tmp_real, p->real);
		unlinkat(dirfd, tmp, 0);
		goto out;
	}
	ret = 0;
out:
	close(dirfd);
	free(tmp);
	free(tmp_real);
	return ret;
}

static json_t *
text_item(const char *text, size_t len)
{
	json_t *item = json_object();
	size_t clean_len;
	char *clean = fstools_utf8_decode((char *)text, len, &clean_len);

	json_object_set_new(item, "type", json_string("text"));
	json_object_set_new(item, "text",
	    json_stringn_nocheck(clean, clean_len));
	if (clean != text)
		free(clean);
	return item;
}

json_t *
fstools_result_text(const char *text, size_t len)
{
	json_t *result = json_object(), *content = json_array();
	json_t *item = text_item(text, len), *structured = json_object();

	json_object_set(structured, "content", json_object_get(item, "text"));
	json_array_append_new(content, item);
	json_object_set_new(result, "content", content);
	json_object_set_new(result, "structuredContent", structured);
	json_object_set_new(result, "isError", json_false());
	return result;
}

json_t *
fstools_result_error(const char *msg)
{
	json_t *result = json_object(), *content = json_array();

	json_array_append_new(content, text_item(msg, strlen(msg)));
	json_object_set_new(result, "content", content);
	json_object_set_new(result, "isError", json_true());
	return result;
}

json_t *
fstools_result_error_free(char *msg)
{
	json_t *result = fstools_result_error(msg);

	free(msg);
	return result;
}

const char *
fstools_arg_string(json_t *args, const char *key)
{
	return json_string_value(json_object_get(args, key));
}

double
fstools_arg_number(json_t *args, const char *key)
{
	return json_number_value(json_object_get(args, key));
}
