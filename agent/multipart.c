#include "multipart.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include "http.h"
#include "log.h"
#include "xmalloc.h"

enum mp_state {
	MP_PREAMBLE,		/* before the first delimiter: dropped */
	MP_AFTER_DELIM,		/* right after "--boundary" */
	MP_CLOSE_DASH,		/* seen one '-' of the closing "--" */
	MP_PADDING,		/* spaces or tabs before the CRLF */
	MP_LF,			/* seen the CR of the CRLF */
	MP_HEADERS,
	MP_BODY,
	MP_EPILOGUE,		/* after the closing delimiter: dropped */
	MP_FAILED,
};

/* Owned by the caller of multipart_new; freed by multipart_free. */
struct multipart {
	const struct multipart_callbacks *cb;
	void *arg;
	enum mp_state state;
	/* "\r\n--" boundary: the delimiter that ends every part. */
	char delim[4 + MULTIPART_MAX_BOUNDARY + 1];
	size_t dlen;
	/* Delimiter bytes matched at the end of the data fed so far. They
	 * equal delim[0..matched), so they need no buffer of their own. */
	size_t matched;
	char headers[MULTIPART_MAX_HEADERS + 1];	/* + NUL */
	size_t hlen;
	struct error failure;	/* repeated by every call once failed */
};

static int
is_space(char c)
{
	return c == ' ' || c == '\t';
}

static const char *
skip_space(const char *p)
{
	while (is_space(*p))
		p++;
	return p;
}

static int
is_token_char(char c)
{
	return c > ' ' && c < 0x7f && strchr("()<>@,;:\\\"/[]?={}", c) == NULL;
}

/*
 * The next "; key=value" parameter of a header value (RFC 9110 / 2183),
 * the value unquoted. 1 with *key and *value to free, 0 at the end, -1 on
 * malformed input.
 */
static int
next_param(const char **pp, char **key, char **value)
{
	const char *p = skip_space(*pp), *start;
	char *v;
	size_t n = 0;

	*key = *value = NULL;
	if (*p == '\0')
		return 0;
	if (*p != ';')
		return -1;
	p = skip_space(p + 1);
	if (*p == '\0') {
		*pp = p;
		return 0;
	}
	for (start = p; is_token_char(*p) && *p != '='; p++)
		;
	if (p == start)
		return -1;
	*key = xstrndup(start, (size_t)(p - start));
	p = skip_space(p);
	if (*p != '=') {
		*value = xstrdup("");
		*pp = p;
		return 1;
	}
	p = skip_space(p + 1);
	if (*p == '"') {
		v = xmalloc(strlen(p));
		for (p++; *p != '"'; p++) {
			if (*p == '\0')
				goto bad;
			if (*p == '\\' && p[1] != '\0')
				p++;
			v[n++] = *p;
		}
		v[n] = '\0';
		p++;
	} else {
		for (start = p; is_token_char(*p); p++)
			;
		v = xstrndup(start, (size_t)(p - start));
	}
	*value = v;
	*pp = p;
	return 1;
bad:
	free(v);
	free(*key);
	*key = NULL;
	return -1;
}

char *
multipart_boundary(const char *content_type, struct error *err)
{
	static const char type[] = "multipart/form-data";
	const char *p;
	char *key, *value, *boundary = NULL;
	size_t len;
	int r;

	if (content_type == NULL)
		goto not_form;
	p = skip_space(content_type);
	if (strncasecmp(p, type, sizeof type - 1) != 0)
		goto not_form;
	p += sizeof type - 1;
	if (*p != '\0' && *p != ';' && !is_space(*p))
		goto not_form;
	while ((r = next_param(&p, &key, &value)) > 0) {
		if (strcasecmp(key, "boundary") == 0) {
			free(boundary);
			boundary = value;
		} else {
			free(value);
		}
		free(key);
	}
	if (r < 0) {
		free(boundary);
		error_set(err, 400, "malformed Content-Type header: %s",
		    content_type);
		return NULL;
	}
	if (boundary == NULL) {
		error_set(err, 400, "the multipart/form-data Content-Type has "
		    "no boundary");
		return NULL;
	}
	len = strlen(boundary);
	for (size_t i = 0; i < len; i++) {
		/* A boundary holding a CR could start inside itself, which
		 * the delimiter search relies on never happening. */
		if ((unsigned char)boundary[i] < ' ' ||
		    (unsigned char)boundary[i] >= 0x7f)
			len = 0;
	}
	if (len == 0 || len > MULTIPART_MAX_BOUNDARY ||
	    boundary[len - 1] == ' ') {
		free(boundary);
		error_set(err, 400, "the multipart boundary must be 1 to %d "
		    "printable characters", MULTIPART_MAX_BOUNDARY);
		return NULL;
	}
	return boundary;
not_form:
	error_set(err, 400, "Content-Type must be multipart/form-data with a "
	    "boundary");
	return NULL;
}

struct multipart *
multipart_new(const char *boundary, const struct multipart_callbacks *cb,
    void *arg)
{
	struct multipart *mp = xcalloc(1, sizeof *mp);
	size_t blen = strlen(boundary);

	if (blen == 0 || blen > MULTIPART_MAX_BOUNDARY)
		fatal("multipart: boundary of %zu bytes", blen);
	mp->cb = cb;
	mp->arg = arg;
	memcpy(mp->delim, "\r\n--", 4);
	memcpy(mp->delim + 4, boundary, blen);
	mp->dlen = 4 + blen;
	/* The first delimiter may open the body with no CRLF before it: act
	 * as if the CRLF had been seen. */
	mp->state = MP_PREAMBLE;
	mp->matched = 2;
	return mp;
}

void
multipart_free(struct multipart *mp)
{
	free(mp);
}

/* Data of the current part (dropped in the preamble). */
static int
emit(struct multipart *mp, const char *data, size_t len, struct error *err)
{
	if (mp->state != MP_BODY || len == 0)
		return 0;
	return mp->cb->part_data(data, len, mp->arg, err);
}

/*
 * Look for the delimiter in data, passing everything before it on as part
 * data. Sets *found when it was matched; returns the bytes consumed, or -1.
 * Only the delimiter's first byte is a CR, so after a mismatch no later
 * start can hide inside the bytes matched so far: they are plain data.
 */
static ssize_t
scan(struct multipart *mp, const char *p, size_t n, int *found,
    struct error *err)
{
	size_t i = 0;

	*found = 0;
	if (mp->matched > 0) {
		while (i < n && mp->matched < mp->dlen &&
		    p[i] == mp->delim[mp->matched]) {
			i++;
			mp->matched++;
		}
		if (mp->matched == mp->dlen) {
			mp->matched = 0;
			*found = 1;
			return (ssize_t)i;
		}
		if (i == n)
			return (ssize_t)i;
		if (emit(mp, mp->delim, mp->matched, err) < 0)
			return -1;
		mp->matched = 0;
	}
	while (i < n) {
		const char *cr = memchr(p + i, '\r', n - i);
		size_t at, j = 0;

		if (cr == NULL) {
			if (emit(mp, p + i, n - i, err) < 0)
				return -1;
			return (ssize_t)n;
		}
		at = (size_t)(cr - p);
		if (emit(mp, p + i, at - i, err) < 0)
			return -1;
		while (at + j < n && j < mp->dlen && p[at + j] == mp->delim[j])
			j++;
		if (j == mp->dlen) {
			*found = 1;
			return (ssize_t)(at + j);
		}
		if (at + j == n) {
			mp->matched = j;
			return (ssize_t)n;
		}
		if (emit(mp, p + at, 1, err) < 0)
			return -1;
		i = at + 1;
	}
	return (ssize_t)n;
}

/* The value of Content-Disposition's filename*: RFC 8187's
 * charset'language'percent-encoded, used only when the charset is UTF-8. */
static char *
ext_value(const char *v)
{
	const char *q1 = strchr(v, '\''), *q2;
	char *out;

	if (q1 == NULL || (q2 = strchr(q1 + 1, '\'')) == NULL)
		return NULL;
	if ((size_t)(q1 - v) != 5 || strncasecmp(v, "utf-8", 5) != 0)
		return NULL;
	if (http_percent_decode(q2 + 1, strlen(q2 + 1), 0, &out) < 0)
		return NULL;
	return out;
}

struct part_headers {
	char *name, *filename, *ext_filename, *content_type;
	int disposition;
};

static int
parse_disposition(struct part_headers *h, const char *value)
{
	const char *p = skip_space(value), *start;
	char *key, *v;
	int r;

	for (start = p; is_token_char(*p); p++)
		;
	if ((size_t)(p - start) != 9 || strncasecmp(start, "form-data", 9) != 0)
		return -1;
	h->disposition = 1;
	while ((r = next_param(&p, &key, &v)) > 0) {
		char **slot = NULL;

		if (strcasecmp(key, "name") == 0)
			slot = &h->name;
		else if (strcasecmp(key, "filename") == 0)
			slot = &h->filename;
		else if (strcasecmp(key, "filename*") == 0) {
			free(h->ext_filename);
			h->ext_filename = ext_value(v);
		}
		if (slot != NULL) {
			free(*slot);
			*slot = v;
			v = NULL;
		}
		free(v);
		free(key);
	}
	return r;
}

/* Split the header block (lines ending in CRLF, then an empty line) and
 * read what we need of it. */
static int
parse_headers(struct multipart *mp, struct part_headers *h,
    struct error *err)
{
	char *line = mp->headers;

	if (memchr(mp->headers, '\0', mp->hlen) != NULL) {
		error_set(err, 400, "a multipart part header holds a NUL byte");
		return -1;
	}
	mp->headers[mp->hlen] = '\0';
	/* The block ends with an empty line, so every line has its CRLF. */
	for (;;) {
		char *eol = strstr(line, "\r\n"), *colon;

		*eol = '\0';
		if (*line == '\0')
			break;
		colon = strchr(line, ':');
		if (colon == NULL || colon == line || is_space(*line)) {
			error_set(err, 400, "malformed multipart part header: %s",
			    line);
			return -1;
		}
		*colon = '\0';
		if (strcasecmp(line, "Content-Disposition") == 0) {
			if (parse_disposition(h, colon + 1) < 0) {
				error_set(err, 400, "malformed Content-Disposition "
				    "of a multipart part: %s", colon + 1);
				return -1;
			}
		} else if (strcasecmp(line, "Content-Type") == 0) {
			free(h->content_type);
			h->content_type = xstrdup(skip_space(colon + 1));
		}
		line = eol + 2;
	}
	if (!h->disposition || h->name == NULL) {
		error_set(err, 400, "a multipart part has no Content-Disposition "
		    "form-data header with a name");
		return -1;
	}
	return 0;
}

static int
headers_done(struct multipart *mp, struct error *err)
{
	struct part_headers h = { 0 };
	struct multipart_part part;
	int r;

	r = parse_headers(mp, &h, err);
	if (r == 0) {
		part.name = h.name;
		part.filename = h.ext_filename != NULL ? h.ext_filename :
		    h.filename;
		part.content_type = h.content_type;
		r = mp->cb->part_begin(&part, mp->arg, err);
	}
	free(h.name);
	free(h.filename);
	free(h.ext_filename);
	free(h.content_type);
	mp->state = MP_BODY;
	mp->matched = 0;
	return r;
}

static int
add_header_byte(struct multipart *mp, char c, struct error *err)
{
	const char *h = mp->headers;
	size_t n;

	if (mp->hlen == MULTIPART_MAX_HEADERS) {
		error_set(err, 400, "the headers of a multipart part exceed %d "
		    "bytes", MULTIPART_MAX_HEADERS);
		return -1;
	}
	mp->headers[mp->hlen++] = c;
	n = mp->hlen;
	if (c == '\n' && n >= 2 && h[n - 2] == '\r' &&
	    (n == 2 || (n >= 4 && h[n - 3] == '\n' && h[n - 4] == '\r')))
		return headers_done(mp, err);
	return 0;
}

static int
bad_delimiter(struct error *err)
{
	error_set(err, 400, "malformed multipart body: a boundary delimiter "
	    "is not followed by CRLF or \"--\"");
	return -1;
}

/* One byte of the small states between a delimiter and the headers. */
static int
delimiter_byte(struct multipart *mp, char c, struct error *err)
{
	switch (mp->state) {
	case MP_AFTER_DELIM:
		if (c == '-')
			mp->state = MP_CLOSE_DASH;
		else if (is_space(c))
			mp->state = MP_PADDING;
		else if (c == '\r')
			mp->state = MP_LF;
		else
			return bad_delimiter(err);
		return 0;
	case MP_CLOSE_DASH:
		if (c != '-')
			return bad_delimiter(err);
		mp->state = MP_EPILOGUE;
		return 0;
	case MP_PADDING:
		if (c == '\r')
			mp->state = MP_LF;
		else if (!is_space(c))
			return bad_delimiter(err);
		return 0;
	case MP_LF:
		if (c != '\n')
			return bad_delimiter(err);
		mp->state = MP_HEADERS;
		mp->hlen = 0;
		return 0;
	default:
		fatal("multipart: byte in state %d", (int)mp->state);
	}
}

int
multipart_feed(struct multipart *mp, const char *data, size_t len,
    struct error *err)
{
	size_t i = 0;

	while (i < len && mp->state != MP_FAILED) {
		ssize_t n;
		int found;

		switch (mp->state) {
		case MP_PREAMBLE:
		case MP_BODY:
			n = scan(mp, data + i, len - i, &found, err);
			if (n < 0)
				goto fail;
			i += (size_t)n;
			if (!found)
				break;
			if (mp->state == MP_BODY &&
			    mp->cb->part_end(mp->arg, err) < 0)
				goto fail;
			mp->state = MP_AFTER_DELIM;
			break;
		case MP_HEADERS:
			if (add_header_byte(mp, data[i++], err) < 0)
				goto fail;
			break;
		case MP_EPILOGUE:
			i = len;
			break;
		case MP_FAILED:
			break;
		default:
			if (delimiter_byte(mp, data[i++], err) < 0)
				goto fail;
			break;
		}
	}
	if (mp->state == MP_FAILED) {
		*err = mp->failure;
		return -1;
	}
	return 0;
fail:
	mp->failure = *err;
	mp->state = MP_FAILED;
	return -1;
}

int
multipart_finish(struct multipart *mp, struct error *err)
{
	if (mp->state == MP_FAILED) {
		*err = mp->failure;
		return -1;
	}
	if (mp->state != MP_EPILOGUE) {
		error_set(err, 400, "the multipart body ended before its closing "
		    "boundary");
		mp->failure = *err;
		mp->state = MP_FAILED;
		return -1;
	}
	return 0;
}
