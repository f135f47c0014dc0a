/*
 * Server-sent events (text/event-stream), parsed as the bytes arrive, for
 * the HTTP transports: "data:" lines joined, "event:" kept as the type,
 * comments, "id:" and "retry:" dropped (we never resume a stream). A line
 * ends with LF or CRLF. An event may not grow past MCP_MESSAGE_MAX.
 */
#include "mcp.h"

#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

void
sse_init(struct sse *s)
{
	s->in = evbuffer_new();
	s->data = evbuffer_new();
	s->scanned = 0;
	s->event[0] = '\0';
}

void
sse_clear(struct sse *s)
{
	if (s->in != NULL)
		evbuffer_free(s->in);
	if (s->data != NULL)
		evbuffer_free(s->data);
	s->in = s->data = NULL;
}

/* One line, without its end. */
static int
sse_line(struct sse *s, const char *line, size_t len, sse_event_cb cb,
    void *arg)
{
	size_t flen = 0, dlen;
	const char *value;
	int stop;

	if (len == 0) {
		if (evbuffer_get_length(s->data) == 0)
			return 0;
		dlen = evbuffer_get_length(s->data) - 1;  /* the last '\n' */
		stop = cb(s->event[0] != '\0' ? s->event : "message",
		    (const char *)evbuffer_pullup(s->data, -1), dlen, arg);
		if (stop)
			return stop;
		evbuffer_drain(s->data, evbuffer_get_length(s->data));
		s->event[0] = '\0';
		return 0;
	}
	while (flen < len && line[flen] != ':')
		flen++;
	value = line + flen + (flen < len);
	if (value < line + len && *value == ' ')
		value++;
	if (flen == 4 && strncmp(line, "data", 4) == 0) {
		evbuffer_add(s->data, value, (size_t)(line + len - value));
		evbuffer_add(s->data, "\n", 1);
	} else if (flen == 5 && strncmp(line, "event", 5) == 0) {
		snprintf(s->event, sizeof s->event, "%.*s",
		    (int)(line + len - value), value);
	}
	/* Comments (":..."), id and retry: nothing for us. */
	return 0;
}

int
sse_feed(struct sse *s, const char *data, size_t len, sse_event_cb cb,
    void *arg)
{
	evbuffer_add(s->in, data, len);
	for (;;) {
		size_t have = evbuffer_get_length(s->in), eol_len, n;
		struct evbuffer_ptr pos;
		const char *line;
		int stop;

		if (s->scanned >= have)
			return 0;
		evbuffer_ptr_set(s->in, &pos, s->scanned, EVBUFFER_PTR_SET);
		pos = evbuffer_search_eol(s->in, &pos, &eol_len, EVBUFFER_EOL_LF);
		if (pos.pos < 0) {
			s->scanned = have;
			return have + evbuffer_get_length(s->data) >
			    MCP_MESSAGE_MAX ? -1 : 0;
		}
		n = (size_t)pos.pos;
		line = (const char *)evbuffer_pullup(s->in, (ssize_t)n);
		stop = sse_line(s, line, n > 0 && line[n - 1] == '\r' ? n - 1 :
		    n, cb, arg);
		if (stop)
			return stop;
		evbuffer_drain(s->in, n + eol_len);
		s->scanned = 0;
		if (evbuffer_get_length(s->data) > MCP_MESSAGE_MAX)
			return -1;
	}
}
