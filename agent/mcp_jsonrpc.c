/*
 * JSON-RPC 2.0 for the MCP client, over any transport that moves whole
 * messages (stdio lines, HTTP bodies, SSE events). Our requests get integer
 * ids and wait in a pending list until the answer with that id arrives, in
 * whatever order answers come; each has its own timer. The peer may send
 * notifications, handed to the owner, and requests of its own: "ping" is
 * answered, anything else refused with "method not found", which is what
 * MCP expects of a client that declared no capabilities.
 */
#include "mcp.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "log.h"
#include "timing.h"
#include "xmalloc.h"

#define JSONRPC_METHOD_NOT_FOUND (-32601)
#define JSONRPC_INVALID_PARAMS (-32602)
#define JSONRPC_INVALID_REQUEST (-32600)

/* One request awaiting its answer; freed when it ends. */
struct pending {
	int64_t id;
	char *method;
	double timeout;
	mcp_jsonrpc_done_cb done;
	void *arg;
	struct event *timer;
	struct mcp_jsonrpc *rpc;
	TAILQ_ENTRY(pending) entry;
};

/* Owned by its MCP server; freed by mcp_jsonrpc_free. */
struct mcp_jsonrpc {
	struct event_base *base;
	char *name;
	struct mcp_jsonrpc_peer peer;
	void *arg;
	int64_t next_id;
	int closed;
	struct error close_err;
	TAILQ_HEAD(, pending) pending;
};

struct mcp_jsonrpc *
mcp_jsonrpc_new(struct event_base *base, const char *name,
    const struct mcp_jsonrpc_peer *peer, void *arg)
{
	struct mcp_jsonrpc *rpc = xcalloc(1, sizeof *rpc);

	rpc->base = base;
	rpc->name = xstrdup(name);
	rpc->peer = *peer;
	rpc->arg = arg;
	TAILQ_INIT(&rpc->pending);
	return rpc;
}

static void
pending_free(struct pending *p)
{
	event_free(p->timer);
	free(p->method);
	free(p);
}

/* Unlinked already. Frees p first: the callback may free the rpc. */
static void
pending_end(struct pending *p, json_t *result, const struct error *err)
{
	mcp_jsonrpc_done_cb done = p->done;
	void *arg = p->arg;

	pending_free(p);
	done(result, err, arg);
}

void
mcp_jsonrpc_free(struct mcp_jsonrpc *rpc)
{
	struct pending *p;

	if (rpc == NULL)
		return;
	while ((p = TAILQ_FIRST(&rpc->pending)) != NULL) {
		TAILQ_REMOVE(&rpc->pending, p, entry);
		pending_free(p);
	}
	free(rpc->name);
	free(rpc);
}

static void
send_message(struct mcp_jsonrpc *rpc, json_t *msg)
{
	json_object_set_new(msg, "jsonrpc", json_string("2.0"));
	rpc->peer.send(rpc->arg, msg);
	json_decref(msg);
}

void
mcp_jsonrpc_notify(struct mcp_jsonrpc *rpc, const char *method, json_t *params)
{
	json_t *msg;

	if (rpc->closed) {
		json_decref(params);
		return;
	}
	msg = json_object();
	json_object_set_new(msg, "method", json_string(method));
	if (params != NULL)
		json_object_set_new(msg, "params", params);
	send_message(rpc, msg);
}

static void
send_cancelled(struct mcp_jsonrpc *rpc, int64_t id, const char *reason)
{
	mcp_jsonrpc_notify(rpc, "notifications/cancelled", json_pack("{s:I, s:s}",
	    "requestId", (json_int_t)id, "reason", reason));
}

static void
timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pending *p = arg;
	struct mcp_jsonrpc *rpc = p->rpc;
	struct error err;

	(void)fd;
	(void)what;
	TAILQ_REMOVE(&rpc->pending, p, entry);
	error_set(&err, 504, "MCP server '%s' did not answer %s within %g "
	    "seconds", rpc->name, p->method, p->timeout);
	send_cancelled(rpc, p->id, "timed out");
	pending_end(p, NULL, &err);
}

int64_t
mcp_jsonrpc_call(struct mcp_jsonrpc *rpc, const char *method, json_t *params,
    double timeout, mcp_jsonrpc_done_cb done, void *arg, struct error *err)
{
	struct timeval tv;
	struct pending *p;
	json_t *msg;

	if (rpc->closed) {
		*err = rpc->close_err;
		json_decref(params);
		return -1;
	}
	p = xcalloc(1, sizeof *p);
	p->id = ++rpc->next_id;
	p->method = xstrdup(method);
	p->timeout = timeout;
	p->done = done;
	p->arg = arg;
	p->rpc = rpc;
	p->timer = evtimer_new(rpc->base, timeout_cb, p);
	tv = timing_timeval(timeout);
	evtimer_add(p->timer, &tv);
	TAILQ_INSERT_TAIL(&rpc->pending, p, entry);
	msg = json_object();
	json_object_set_new(msg, "id", json_integer((json_int_t)p->id));
	json_object_set_new(msg, "method", json_string(method));
	if (params != NULL)
		json_object_set_new(msg, "params", params);
	send_message(rpc, msg);
	return p->id;
}

static struct pending *
pending_take(struct mcp_jsonrpc *rpc, int64_t id)
{
	struct pending *p;

	TAILQ_FOREACH(p, &rpc->pending, entry) {
		if (p->id == id) {
			TAILQ_REMOVE(&rpc->pending, p, entry);
			return p;
		}
	}
	return NULL;
}

void
mcp_jsonrpc_cancel(struct mcp_jsonrpc *rpc, int64_t id, const char *reason)
{
	struct pending *p = pending_take(rpc, id);

	if (p == NULL)
		return;
	pending_free(p);
	send_cancelled(rpc, id, reason);
}

void
mcp_jsonrpc_fail(struct mcp_jsonrpc *rpc, int64_t id, const struct error *err)
{
	struct pending *p = pending_take(rpc, id);

	if (p != NULL)
		pending_end(p, NULL, err);
}

void
mcp_jsonrpc_close(struct mcp_jsonrpc *rpc, const struct error *err)
{
	struct pending *p;

	if (rpc->closed)
		return;
	rpc->closed = 1;
	rpc->close_err = *err;
	while ((p = TAILQ_FIRST(&rpc->pending)) != NULL) {
		TAILQ_REMOVE(&rpc->pending, p, entry);
		pending_end(p, NULL, &rpc->close_err);
	}
}

/* The peer asks us something. */
static void
answer_request(struct mcp_jsonrpc *rpc, const char *method, json_t *id)
{
	json_t *msg = json_object();

	json_object_set(msg, "id", id);
	if (strcmp(method, "ping") == 0) {
		json_object_set_new(msg, "result", json_object());
	} else {
		log_debug("MCP server '%s' asked for %s; refused", rpc->name,
		    method);
		json_object_set_new(msg, "error", json_pack("{s:i, s:s}",
		    "code", JSONRPC_METHOD_NOT_FOUND, "message",
		    "Method not found"));
	}
	send_message(rpc, msg);
}

static void
answer_error(struct mcp_jsonrpc *rpc, struct pending *p, json_t *e)
{
	json_t *code = json_object_get(e, "code");
	const char *message = json_string_value(json_object_get(e, "message"));
	json_int_t c = json_is_integer(code) ? json_integer_value(code) : 0;
	struct error err;
	int status;

	/* The client's arguments were wrong: say so as bad input. */
	status = c == JSONRPC_INVALID_PARAMS || c == JSONRPC_INVALID_REQUEST ?
	    400 : 502;
	error_set(&err, status, "MCP server '%s' answered %s with error %"
	    JSON_INTEGER_FORMAT ": %s", rpc->name, p->method, c,
	    message != NULL ? message : "(no message)");
	pending_end(p, NULL, &err);
}

static void
receive_one(struct mcp_jsonrpc *rpc, json_t *msg)
{
	json_t *method, *id, *value;
	struct pending *p;
	struct error err;

	if (rpc->closed)
		return;
	if (!json_is_object(msg)) {
		log_warn("MCP server '%s' sent a message that is not an object; "
		    "ignored", rpc->name);
		return;
	}
	method = json_object_get(msg, "method");
	id = json_object_get(msg, "id");
	if (json_is_string(method)) {
		if (id != NULL && !json_is_null(id))
			answer_request(rpc, json_string_value(method), id);
		else
			rpc->peer.notify(rpc->arg, json_string_value(method),
			    json_object_get(msg, "params"));
		return;
	}
	if (!json_is_integer(id) ||
	    (p = pending_take(rpc, (int64_t)json_integer_value(id))) == NULL) {
		/* Late answers to calls that timed out or were cancelled. */
		log_debug("MCP server '%s' answered an unknown request; ignored",
		    rpc->name);
		return;
	}
	if ((value = json_object_get(msg, "error")) != NULL) {
		answer_error(rpc, p, value);
	} else if ((value = json_object_get(msg, "result")) != NULL) {
		pending_end(p, value, NULL);
	} else {
		error_set(&err, 502, "MCP server '%s' answered %s with neither "
		    "result nor error", rpc->name, p->method);
		pending_end(p, NULL, &err);
	}
}

void
mcp_jsonrpc_receive(struct mcp_jsonrpc *rpc, json_t *msg)
{
	size_t i;
	json_t *m;

	if (!json_is_array(msg)) {
		receive_one(rpc, msg);
		return;
	}
	json_array_foreach(msg, i, m)
		receive_one(rpc, m);
}
