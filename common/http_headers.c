/*
 * Header lists, and reading them from http-parser, for the server and the
 * client alike.
 */
#include "http_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "xmalloc.h"

void
http_headers_add(struct http_headers *h, char *name, char *value)
{
	if (h->n == h->cap) {
		h->cap = h->cap ? h->cap * 2 : 8;
		h->v = xreallocarray(h->v, h->cap, sizeof *h->v);
	}
	h->v[h->n].name = name;
	h->v[h->n].value = value;
	h->n++;
}

const char *
http_headers_get(const struct http_headers *h, const char *name)
{
	for (size_t i = 0; i < h->n; i++) {
		if (strcasecmp(h->v[i].name, name) == 0)
			return h->v[i].value;
	}
	return NULL;
}

void
http_headers_clear(struct http_headers *h)
{
	for (size_t i = 0; i < h->n; i++) {
		free(h->v[i].name);
		free(h->v[i].value);
	}
	free(h->v);
	memset(h, 0, sizeof *h);
}

void
http_header_reader_init(struct http_header_reader *hr)
{
	hr->field = evbuffer_new();
	hr->value = evbuffer_new();
	hr->in_value = 0;
}

void
http_header_reader_free(struct http_header_reader *hr)
{
	evbuffer_free(hr->field);
	evbuffer_free(hr->value);
}

void
http_header_reader_reset(struct http_header_reader *hr)
{
	hr->in_value = 0;
	evbuffer_drain(hr->field, evbuffer_get_length(hr->field));
	evbuffer_drain(hr->value, evbuffer_get_length(hr->value));
}

/* Take the whole buffer as a C string; NULL if it holds a NUL byte, which
 * would let a header mean one thing to us and another to the next reader. */
static char *
take_string(struct evbuffer *buf)
{
	size_t len = evbuffer_get_length(buf);
	char *s = xmalloc(len + 1);

	evbuffer_remove(buf, s, len);
	s[len] = '\0';
	if (strlen(s) != len) {
		free(s);
		return NULL;
	}
	return s;
}

/* The header read so far goes into h, its value without trailing blanks. */
static enum http_header_fault
flush(struct http_header_reader *hr, struct http_headers *h, size_t max)
{
	char *name, *value, *end;

	hr->in_value = 0;
	if (h->n >= max)
		return HTTP_HEADER_TOO_MANY;
	name = take_string(hr->field);
	value = take_string(hr->value);
	if (name == NULL || value == NULL) {
		free(name);
		free(value);
		return HTTP_HEADER_NUL;
	}
	end = value + strlen(value);
	while (end > value && (end[-1] == ' ' || end[-1] == '\t'))
		*--end = '\0';
	http_headers_add(h, name, value);
	return HTTP_HEADER_OK;
}

enum http_header_fault
http_header_reader_field(struct http_header_reader *hr, const char *at,
    size_t len, struct http_headers *h, size_t max)
{
	enum http_header_fault fault;

	if (hr->in_value && (fault = flush(hr, h, max)) != HTTP_HEADER_OK)
		return fault;
	evbuffer_add(hr->field, at, len);
	return HTTP_HEADER_OK;
}

void
http_header_reader_value(struct http_header_reader *hr, const char *at,
    size_t len)
{
	hr->in_value = 1;
	evbuffer_add(hr->value, at, len);
}

enum http_header_fault
http_header_reader_end(struct http_header_reader *hr, struct http_headers *h,
    size_t max)
{
	return hr->in_value ? flush(hr, h, max) : HTTP_HEADER_OK;
}
