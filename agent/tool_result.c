/* The MCP CallToolResult shape the reference answers tool calls with. */
#include "agent.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "jsonx.h"
#include "utf8.h"
#include "xmalloc.h"

json_t *
tool_result_new(int is_error, size_t n, const char *const *texts,
    const size_t *lens, const char *const *descriptions)
{
	json_t *result = json_object(), *content = json_array();

	for (size_t i = 0; i < n; i++) {
		json_t *item = json_object();

		json_object_set_new(item, "type", json_string("text"));
		json_object_set_new(item, "text", utf8_json_string(texts[i],
		    lens[i]));
		json_object_set_new(item, "description",
		    json_string(descriptions[i]));
		json_array_append_new(content, item);
	}
	json_object_set_new(result, "meta", json_null());
	json_object_set_new(result, "content", content);
	json_object_set_new(result, "isError", json_boolean(is_error));
	return result;
}

#define RESULT_CHUNK (64 * 1024)
#define RESULT_HIGH (256 * 1024)

struct result_writer {
	struct http_request *req;
	int is_error;
	size_t n, item;
	int in_text;
	struct evbuffer **bufs;
	const char *const *descs;
	json_t *extra;		/* more content items, after the text ones */
	size_t nextra;		/* of them written */
	struct evbuffer *tmp;
	void (*done)(void *);
	void *arg;
};

static void
writer_finish(struct result_writer *w)
{
	void (*done)(void *) = w->done;
	void *arg = w->arg;

	evbuffer_free(w->tmp);
	json_decref(w->extra);
	free(w);
	done(arg);
}

/* One piece of the current text: whole UTF-8 sequences only, unless it is
 * the end of the buffer, where a cut sequence becomes U+FFFD. */
static void
writer_text_piece(struct result_writer *w, struct evbuffer *buf)
{
	size_t len = evbuffer_get_length(buf);
	size_t n = len < RESULT_CHUNK ? len : RESULT_CHUNK, keep;
	const char *data = (const char *)evbuffer_pullup(buf, (ssize_t)n);

	keep = n < len ? utf8_complete_prefix(data, n) : n;
	if (keep == 0)
		keep = n;
	if (utf8_valid(data, keep)) {
		jsonx_escape_append(w->tmp, data, keep);
	} else {
		size_t clen;
		char *clean = utf8_sanitize(data, keep, &clen);

		jsonx_escape_append(w->tmp, clean, clen);
		free(clean);
	}
	evbuffer_drain(buf, keep);
}

static int
dump_cb(const char *buffer, size_t size, void *data)
{
	return evbuffer_add(data, buffer, size);
}

static void
writer_pump(struct http_request *req, void *arg)
{
	struct result_writer *w = arg;

	while (http_reply_pending(req) < RESULT_HIGH) {
		if (w->item == w->n && w->nextra < json_array_size(w->extra)) {
			if (w->n > 0 || w->nextra > 0)
				evbuffer_add(w->tmp, ",", 1);
			json_dump_callback(json_array_get(w->extra, w->nextra++),
			    dump_cb, w->tmp, JSON_COMPACT);
		} else if (w->item == w->n) {
			evbuffer_add_printf(w->tmp, "],\"isError\":%s}",
			    w->is_error ? "true" : "false");
			http_reply_write_buffer(req, w->tmp);
			http_reply_end(req);
			writer_finish(w);
			return;
		} else if (!w->in_text) {
			evbuffer_add_printf(w->tmp, "%s{\"type\":\"text\",\"text\":\"",
			    w->item > 0 ? "," : "");
			w->in_text = 1;
		} else if (evbuffer_get_length(w->bufs[w->item]) > 0) {
			writer_text_piece(w, w->bufs[w->item]);
		} else {
			evbuffer_add(w->tmp, "\",\"description\":\"", 17);
			jsonx_escape_append(w->tmp, w->descs[w->item],
			    strlen(w->descs[w->item]));
			evbuffer_add(w->tmp, "\"}", 2);
			w->in_text = 0;
			w->item++;
		}
		http_reply_write_buffer(req, w->tmp);
	}
}

static void
writer_gone(struct http_request *req, void *arg)
{
	http_reply_end(req);
	writer_finish(arg);
}

void
tool_result_stream(struct http_request *req, int is_error, size_t n,
    struct evbuffer **bufs, const char *const *descriptions,
    void (*done)(void *arg), void *arg)
{
	tool_result_stream_items(req, is_error, n, bufs, descriptions,
	    NULL, done, arg);
}

void
tool_result_stream_items(struct http_request *req, int is_error,
    size_t n, struct evbuffer **bufs, const char *const *descriptions,
    json_t *extra, void (*done)(void *arg), void *arg)
{
	struct result_writer *w = xcalloc(1, sizeof *w);

	w->req = req;
	w->is_error = is_error;
	w->n = n;
	w->bufs = bufs;
	w->descs = descriptions;
	w->extra = json_incref(extra);
	w->tmp = evbuffer_new();
	w->done = done;
	w->arg = arg;
	http_request_on_close(req, writer_gone, w);
	http_request_on_drain(req, writer_pump, w);
	http_reply_start(req, 200, "application/json", -1);
	evbuffer_add(w->tmp, "{\"meta\":null,\"content\":[", 24);
	writer_pump(req, w);
}
