/*
 * MCP's stdio transport: one JSON-RPC message per line on stdin, answers
 * one per line on stdout (stderr is the log). The client is trusted no
 * more than any peer: a line longer than --max_message is dropped as it
 * comes, never held (answered with an error once its end is seen), bad
 * JSON answers a parse error, and at most MAX_CALLS requests wait on the
 * sandbox at once; the server keeps going after each of these.
 *
 * Requests are served concurrently: a ping or a cancellation is answered
 * while a long tool call runs.
 */
#include "smcp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "fdio.h"
#include "log.h"
#include "xmalloc.h"

#define READ_CHUNK 65536
#define MAX_CALLS 64

static struct event *in_ev;
static struct evbuffer *in_buf;
static int discarding;		/* inside a line longer than max_message */

void
smcp_send(json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	size_t len;

	json_decref(msg);
	if (text == NULL)
		fatal("cannot serialise an answer");
	len = strlen(text);
	text[len] = '\n';
	/* Blocking writes: the client is our only user, and an answer it
	 * does not read can wait for it. */
	if (fdio_write_all(STDOUT_FILENO, text, len + 1) < 0 && !smcp.closing) {
		log_warn("writing to stdout: %s", strerror(errno));
		smcp_shutdown("stdout closed");
	}
	free(text);
}

void
smcp_send_result(json_t *id, json_t *result)
{
	smcp_send(mcp_wire_result(id, result));
}

void
smcp_send_error(json_t *id, int code, const char *fmt, ...)
{
	char msg[ERROR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	smcp_send(mcp_wire_error(id, code, msg));
}

static void
do_tools(json_t *id, const char *method, json_t *params)
{
	struct smcp_call *c;
	json_t *name = NULL, *args = NULL;

	if (strcmp(method, "tools/call") == 0) {
		name = json_object_get(params, "name");
		args = json_object_get(params, "arguments");
		if (!json_is_string(name) || (args != NULL &&
		    !json_is_object(args) && !json_is_null(args))) {
			smcp_send_error(id, MCP_WIRE_INVALID_PARAMS, "tools/call "
			    "needs params {\"name\": string, \"arguments\": "
			    "object}");
			return;
		}
	}
	if (smcp.ncalls >= MAX_CALLS) {
		smcp_send_error(id, MCP_WIRE_INTERNAL_ERROR, "too many requests "
		    "in progress (at most %d)", MAX_CALLS);
		return;
	}
	c = xcalloc(1, sizeof *c);
	c->id = json_incref(id);
	if (strcmp(method, "tools/call") == 0) {
		c->is_call = 1;
		c->tool = xstrdup(json_string_value(name));
		c->arguments = json_is_object(args) ? json_incref(args) :
		    json_object();
	}
	smcp_box_submit(c);
}

static void
do_notification(const char *method, json_t *params)
{
	json_t *id;

	if (strcmp(method, "notifications/cancelled") != 0)
		return;
	id = json_object_get(params, "requestId");
	if (id != NULL)
		smcp_box_cancel(id);
}

static void
handle_message(const char *line, size_t len)
{
	json_error_t jerr;
	json_t *msg, *id, *params;
	const char *method;

	msg = json_loadb(line, len, 0, &jerr);
	if (msg == NULL) {
		smcp_send_error(NULL, MCP_WIRE_PARSE_ERROR, "Parse error: %s",
		    jerr.text);
		return;
	}
	id = json_object_get(msg, "id");
	method = json_string_value(json_object_get(msg, "method"));
	params = json_object_get(msg, "params");
	if (!json_is_object(msg) || (id != NULL && !json_is_string(id) &&
	    !json_is_integer(id))) {
		smcp_send_error(NULL, MCP_WIRE_INVALID_REQUEST, "Invalid request: "
		    "a JSON-RPC message is an object with a string or integer "
		    "id (batches are not supported)");
	} else if (method == NULL) {
		/* A response: we send no requests, so there is nothing it
		 * could answer. */
		if (json_object_get(msg, "result") == NULL &&
		    json_object_get(msg, "error") == NULL && id != NULL)
			smcp_send_error(id, MCP_WIRE_INVALID_REQUEST,
			    "Invalid request: no method");
	} else if (id == NULL) {
		do_notification(method, params);
	} else if (params != NULL && !json_is_object(params)) {
		smcp_send_error(id, MCP_WIRE_INVALID_PARAMS, "params must be an "
		    "object");
	} else if (strcmp(method, "initialize") == 0) {
		smcp_send_result(id, mcp_wire_initialize_result(params,
		    "sandbox-mcp", smcp.type));
	} else if (strcmp(method, "ping") == 0) {
		smcp_send_result(id, json_object());
	} else if (strcmp(method, "tools/list") == 0 ||
	    strcmp(method, "tools/call") == 0) {
		do_tools(id, method, params);
	} else {
		smcp_send_error(id, MCP_WIRE_METHOD_NOT_FOUND, "Method not found: "
		    "%s", method);
	}
	json_decref(msg);
}

static int
blank(const char *s, size_t len)
{
	while (len > 0 && strchr(" \t\r", s[len - 1]) != NULL)
		len--;
	return len == 0;
}

/* Every whole line in in_buf, and the start of an overlong one dropped. */
static void
take_lines(void)
{
	struct evbuffer_ptr eol;
	size_t len;
	char *line;

	for (;;) {
		eol = evbuffer_search(in_buf, "\n", 1, NULL);
		if (eol.pos < 0) {
			if (evbuffer_get_length(in_buf) > smcp.max_message) {
				discarding = 1;
				evbuffer_drain(in_buf,
				    evbuffer_get_length(in_buf));
			}
			return;
		}
		len = (size_t)eol.pos;
		if (discarding || len > smcp.max_message) {
			evbuffer_drain(in_buf, len + 1);
			discarding = 0;
			smcp_send_error(NULL, MCP_WIRE_INVALID_REQUEST, "message "
			    "longer than %zu bytes dropped (--max_message)",
			    smcp.max_message);
			continue;
		}
		line = xmalloc(len + 1);
		evbuffer_remove(in_buf, line, len + 1);
		if (!blank(line, len))
			handle_message(line, len);
		free(line);
		if (smcp.closing)
			return;
	}
}

static void
stdin_cb(evutil_socket_t fd, short what, void *arg)
{
	int n;

	(void)what;
	(void)arg;
	n = evbuffer_read(in_buf, fd, READ_CHUNK);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n > 0) {
		take_lines();
		return;
	}
	if (n < 0)
		log_warn("reading stdin: %s", strerror(errno));
	/* A last line without its newline is still a message. */
	if (!discarding && evbuffer_get_length(in_buf) > 0 &&
	    evbuffer_get_length(in_buf) <= smcp.max_message) {
		size_t len = evbuffer_get_length(in_buf);
		char *line = xmalloc(len);

		evbuffer_remove(in_buf, line, len);
		if (!blank(line, len))
			handle_message(line, len);
		free(line);
	}
	smcp_shutdown("stdin closed");
}

int
smcp_stdio_start(struct error *err)
{
	int flags = fcntl(STDIN_FILENO, F_GETFL);

	if (flags < 0 || fcntl(STDIN_FILENO, F_SETFL, flags | O_NONBLOCK) < 0) {
		error_set_errno(err, 500, errno, "stdin");
		return -1;
	}
	in_buf = evbuffer_new();
	in_ev = event_new(smcp.base, STDIN_FILENO, EV_READ | EV_PERSIST,
	    stdin_cb, NULL);
	if (in_buf == NULL || in_ev == NULL || event_add(in_ev, NULL) < 0) {
		error_set(err, 500, "cannot watch stdin");
		return -1;
	}
	return 0;
}

/* Stop reading (the callback may be running: the event is freed by
 * smcp_stdio_free, after the loop). */
void
smcp_stdio_stop(void)
{
	if (in_ev != NULL)
		event_del(in_ev);
}

void
smcp_stdio_free(void)
{
	if (in_ev != NULL)
		event_free(in_ev);
	in_ev = NULL;
	if (in_buf != NULL)
		evbuffer_free(in_buf);
	in_buf = NULL;
}
