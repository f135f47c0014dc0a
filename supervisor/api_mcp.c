/*
 * /mcp: sandboxd as an MCP server over streamable HTTP (MCP 2025-03-26 and
 * later), so a remote MCP client needs only a URL. Each POST carries one
 * JSON-RPC message and its answer comes back as the POST's JSON body
 * (application/json; never SSE: every answer is one message, and the
 * spec lets the server choose). `initialize` opens an MCP session and
 * answers its id in Mcp-Session-Id, which every later request carries
 * (400 without it, 404 for an id we do not know or that ended); DELETE
 * ends it and releases its sandbox; GET (the server-to-client stream) is
 * not offered, 405.
 *
 * One sandbox per MCP session, of the type `?type=` or the header
 * X-Sandbox-Type named at initialize (default: the first pool type),
 * taken from the warm pool on the first tools/list or tools/call and
 * bound to a sandboxd session of its own, so its heartbeat reaps it like
 * any other. A session whose sandbox was reaped or released elsewhere
 * says so in that call and gets a new sandbox on the next one, as
 * sandbox-mcp does; the messages and error codes are sandbox-mcp's
 * (common/mcp_wire.c).
 *
 * Bounds: the body is the server's default limit (that of call_tool);
 * MAX_CALLS requests waiting per session; at most MAX_UNBOUND sessions
 * that hold no sandbox and are doing nothing (initialize opens them
 * for nothing: the least recently used makes room for a new one, its
 * client answered 404 from then on, which the transport has it meet with
 * a new initialize), so no client can lock the others out by opening
 * sessions; and MAX_SESSIONS sessions in all, those with a sandbox
 * included (their sandboxes bound them first: each is a container,
 * reaped after HEARTBEAT_TIMEOUT idle), then 503.
 *
 * Cancelling: notifications/cancelled naming a request of the session, or
 * the client closing that request's connection (an aborted fetch), drops
 * the call to the agent, whose closed connection stops the command (the
 * agent kills a command whose client went away); the request, if its
 * connection is still there, gets a JSON-RPC error saying so.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "log.h"
#include "mcp_wire.h"
#include "xmalloc.h"

#define MAX_SESSIONS 4096
#define MAX_UNBOUND 256
#define MAX_CALLS 64
#define LIST_TOOLS_TIMEOUT 30.0
#define SESSION_HEADER "Mcp-Session-Id"
#define TYPE_HEADER "X-Sandbox-Type"
#define STR_(x) #x
#define STR(x) STR_(x)

struct mcp_call;

/* One MCP session. Held by the list while it lasts and by each call and
 * create in flight (refs); freed at the last unref. */
struct mcp_session {
	struct mcp_session *next;
	int refs;
	int ended;
	char id[TOKEN_HEX_LEN];		/* Mcp-Session-Id */
	char *type_name;
	char *sb_session;		/* the sandboxd session of its sandbox */
	char *box;			/* its sandbox's name, once created */
	int creating;
	json_t *tools;			/* the MCP tool list, once fetched */
	struct mcp_call *waiting;	/* for the create to finish */
	struct mcp_call *active;	/* at the agent */
	size_t ncalls;			/* waiting or at the agent */
	double last_used;
};

/* A tools/list or tools/call. Freed once answered. */
struct mcp_call {
	struct mcp_call *next;
	struct mcp_session *s;		/* a reference */
	struct http_request *req;
	json_t *id;
	char *tool;			/* tools/call; NULL for tools/list */
	json_t *arguments;
	struct agent_call *up;		/* while at the agent */
};

static struct mcp_session *sessions;
static size_t nsessions;

static void
session_unref(struct mcp_session *s)
{
	if (--s->refs > 0)
		return;
	json_decref(s->tools);
	free(s->type_name);
	free(s->sb_session);
	free(s->box);
	free(s);
}

/* Answer with one JSON-RPC message (taken); the session's id goes along
 * when given. */
static void
reply_msg(struct http_request *req, int status, const char *session,
    json_t *msg)
{
	if (session != NULL)
		http_reply_add_header(req, SESSION_HEADER, session);
	http_reply_json(req, status, msg);
}

/* A JSON-RPC error that is also our usual error shape ("detail"), for
 * clients that read either. */
static void
reply_rpc_error(struct http_request *req, int status, json_t *id, int code,
    const char *msg)
{
	json_t *m = mcp_wire_error(id, code, msg);

	json_object_set_new(m, "detail", json_string(msg));
	reply_msg(req, status, NULL, m);
}

/* Take c off the session's list it is on, if any. */
static void
call_detach(struct mcp_call *c)
{
	struct mcp_call **lists[] = { &c->s->waiting, &c->s->active };
	struct mcp_call **p;
	size_t i;

	for (i = 0; i < sizeof lists / sizeof lists[0]; i++) {
		for (p = lists[i]; *p != NULL; p = &(*p)->next) {
			if (*p == c) {
				*p = c->next;
				c->next = NULL;
				return;
			}
		}
	}
}

static void
call_free(struct mcp_call *c)
{
	call_detach(c);
	c->s->ncalls--;
	session_unref(c->s);
	json_decref(c->id);
	json_decref(c->arguments);
	free(c->tool);
	free(c);
}

static void
answer_call(struct mcp_call *c, json_t *result)
{
	reply_msg(c->req, 200, NULL, mcp_wire_result(c->id, result));
	call_free(c);
}

/* A tool call's failure is a CallToolResult with isError, a listing's a
 * JSON-RPC error (as sandbox-mcp). */
static void
fail_call(struct mcp_call *c, const struct error *e)
{
	if (c->tool != NULL) {
		char *msg = xasprintf("tool %s failed: %s", c->tool, e->msg);

		answer_call(c, mcp_wire_tool_failure(msg));
		free(msg);
		return;
	}
	reply_msg(c->req, 200, NULL, mcp_wire_error(c->id,
	    MCP_WIRE_INTERNAL_ERROR, e->msg));
	call_free(c);
}

/* The session's sandbox, or NULL with e saying why: gone (reaped after
 * HEARTBEAT_TIMEOUT, released elsewhere), which also forgets it so the
 * next call makes a new one, or not taking calls. */
static struct sandbox *
session_box(struct mcp_session *s, struct error *e)
{
	struct sandbox *sb = sandbox_resolve(s->box);

	if (sb == NULL || sb->state == SB_RELEASED ||
	    sb->state == SB_RELEASING) {
		error_set(e, 410, "the sandbox %s is gone (%s), released by "
		    "sandboxd or someone else, e.g. after its "
		    "HEARTBEAT_TIMEOUT without calls; the next call creates a "
		    "new sandbox, without the old one's files and state",
		    s->box, sb == NULL ? "no such sandbox" :
		    sandbox_state_name(sb->state));
		log_warn("MCP session %s: %s", s->sb_session, e->msg);
		free(s->box);
		s->box = NULL;
		json_decref(s->tools);
		s->tools = NULL;
		return NULL;
	}
	if (sandbox_check_callable(sb, e) < 0)
		return NULL;
	return sb;
}

/* A failed agent call: when the reason is that the sandbox is gone,
 * say that in e instead. */
static void
gone_instead(struct mcp_session *s, struct error *e)
{
	struct error gone;

	if (s->box != NULL && session_box(s, &gone) == NULL && s->box == NULL)
		*e = gone;
}

static void
list_cb(struct sandbox *sb, int status, json_t *answer,
    const struct error *err, void *arg)
{
	struct mcp_call *c = arg;
	json_t *groups;
	struct error e;

	c->up = NULL;
	if ((groups = api_tool_groups(sb, status, answer, err, &e)) == NULL) {
		gone_instead(c->s, &e);
		fail_call(c, &e);
		return;
	}
	json_decref(c->s->tools);
	c->s->tools = mcp_wire_tools_from_groups(groups);
	json_decref(groups);
	answer_call(c, json_pack("{s:O}", "tools", c->s->tools));
}

static void
tool_cb(struct sandbox *sb, int status, json_t *answer,
    const struct error *err, void *arg)
{
	struct mcp_call *c = arg;
	const char *detail;
	struct error e;

	c->up = NULL;
	if (err == NULL && status == 200 && json_is_object(answer)) {
		answer_call(c, mcp_wire_tool_result(answer));
		return;
	}
	if (err != NULL) {
		e = *err;
		error_prefix(&e, "the agent of %s", sb->name);
	} else {
		detail = json_string_value(json_object_get(answer, "detail"));
		error_set(&e, 502, "the agent of %s answered HTTP %d: %s",
		    sb->name, status, detail != NULL ? detail :
		    "no CallToolResult");
	}
	gone_instead(c->s, &e);
	fail_call(c, &e);
}

/* Stop c wherever it is (waiting for the sandbox, or at the agent) and
 * answer it, a no-op when its client is gone. */
static void
cancel_call(struct mcp_call *c, const char *why)
{
	char *msg = xasprintf("request cancelled: %s", why);

	log_info("MCP session %s: %s%s", c->s->sb_session, msg, c->up != NULL ?
	    "; its command is stopped with its call to the agent" : "");
	if (c->up != NULL)
		agent_call_cancel(c->up);
	c->up = NULL;
	reply_msg(c->req, 200, NULL, mcp_wire_error(c->id,
	    MCP_WIRE_INTERNAL_ERROR, msg));
	free(msg);
	call_free(c);
}

static void
call_closed_cb(struct http_request *req, void *arg)
{
	(void)req;
	cancel_call(arg, "the client closed its connection");
}

/* notifications/cancelled: params.requestId names a request of s still
 * in progress (one already answered or unknown is ignored: the spec
 * says such races are normal). */
static void
cancel_notified(struct mcp_session *s, json_t *params)
{
	json_t *rid = json_object_get(params, "requestId");
	const char *reason = json_string_value(json_object_get(params,
	    "reason"));
	struct mcp_call *lists[2] = { s->waiting, s->active };
	struct mcp_call *c;
	size_t i;
	char *why;

	if (rid == NULL)
		return;
	for (i = 0; i < 2; i++) {
		for (c = lists[i]; c != NULL; c = c->next) {
			if (json_equal(c->id, rid)) {
				why = xasprintf("notifications/cancelled "
				    "(%.200s)", reason != NULL ? reason :
				    "no reason given");
				cancel_call(c, why);
				free(why);
				return;
			}
		}
	}
}

static void
start_call(struct mcp_call *c)
{
	struct sandbox *sb;
	struct error e;
	json_t *body;
	char *target;

	if ((sb = session_box(c->s, &e)) == NULL) {
		fail_call(c, &e);
		return;
	}
	sessions_touch_sandbox(sb);
	c->next = c->s->active;
	c->s->active = c;
	if (c->tool == NULL) {
		c->up = agent_call_json(sb, "GET", "/mcp/list_tools", NULL,
		    LIST_TOOLS_TIMEOUT, list_cb, c);
		return;
	}
	if (c->s->tools != NULL && !mcp_wire_tool_known(c->s->tools,
	    c->tool)) {
		/* A name not offered is the client's mistake (a protocol
		 * error), not a failed tool run. */
		char *msg = xasprintf("Unknown tool: %s", c->tool);

		reply_msg(c->req, 200, NULL, mcp_wire_error(c->id,
		    MCP_WIRE_INVALID_PARAMS, msg));
		free(msg);
		call_free(c);
		return;
	}
	target = api_tool_target(c->tool, c->arguments, &body);
	c->up = agent_call_json(sb, "POST", target, body,
	    agent_call_timeout(target, body), tool_cb, c);
	free(target);
	json_decref(body);
}

static void
released_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct http_request *req = arg;

	if (err != NULL)
		log_warn("releasing %s of an MCP session: %s", sb->name,
		    err->msg);
	if (req != NULL)
		http_reply_empty(req, 204);
}

static void
created_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct mcp_session *s = arg;
	struct mcp_call *c, *waiting = s->waiting;
	struct error e;

	s->creating = 0;
	s->waiting = NULL;
	if (err == NULL && s->ended) {
		lifecycle_release(sb, released_cb, NULL);
	} else if (err == NULL) {
		s->box = xstrdup(sb->name);
		log_info("MCP session %s: sandbox %s of type %s", s->sb_session,
		    sb->name, s->type_name);
	} else {
		e = *err;
		error_prefix(&e, "creating a sandbox of type '%s'",
		    s->type_name);
		log_warn("MCP session %s: %s", s->sb_session, e.msg);
	}
	while ((c = waiting) != NULL) {
		waiting = c->next;
		if (s->box != NULL)
			start_call(c);
		else {
			if (err == NULL)
				error_set(&e, 404, "the MCP session ended");
			fail_call(c, &e);
		}
	}
	session_unref(s);
}

static void
create_box(struct mcp_session *s)
{
	struct create_request creq = { 0 };
	struct sandbox *sb;
	struct error err;
	json_t *meta = json_pack("{s:s}", "session_ctx_id", s->sb_session);

	creq.type = sandbox_types_find(s->type_name);
	creq.meta = meta;
	creq.session = s->sb_session;
	s->creating = 1;
	s->refs++;
	if (creq.type == NULL) {
		error_set(&err, 400, "unknown sandbox type '%s'",
		    s->type_name);
		created_cb(NULL, &err, s);
	} else if (pool_take_or_create(&creq, 1, &sb, created_cb, s,
	    &err) < 0)
		created_cb(NULL, &err, s);
	else if (sb != NULL)
		created_cb(sb, NULL, s);
	json_decref(meta);
}

static void
submit(struct mcp_session *s, struct http_request *req, json_t *id,
    const char *method, json_t *params)
{
	json_t *name = NULL, *args = NULL;
	struct mcp_call *c;

	if (strcmp(method, "tools/call") == 0) {
		name = json_object_get(params, "name");
		args = json_object_get(params, "arguments");
		if (!json_is_string(name) || (args != NULL &&
		    !json_is_object(args) && !json_is_null(args))) {
			reply_msg(req, 200, NULL, mcp_wire_error(id,
			    MCP_WIRE_INVALID_PARAMS, "tools/call needs params "
			    "{\"name\": string, \"arguments\": object}"));
			return;
		}
	}
	if (s->ncalls >= MAX_CALLS) {
		reply_msg(req, 200, NULL, mcp_wire_error(id,
		    MCP_WIRE_INTERNAL_ERROR, "too many requests in progress "
		    "in this MCP session (at most " STR(MAX_CALLS) ")"));
		return;
	}
	c = xcalloc(1, sizeof *c);
	c->s = s;
	s->refs++;
	s->ncalls++;
	c->req = req;
	http_request_on_close(req, call_closed_cb, c);
	c->id = json_incref(id);
	if (name != NULL) {
		c->tool = xstrdup(json_string_value(name));
		c->arguments = json_is_object(args) ? json_incref(args) :
		    json_object();
	}
	if (s->box != NULL) {
		start_call(c);
		return;
	}
	c->next = s->waiting;
	s->waiting = c;
	if (!s->creating)
		create_box(s);
}

/* Take s out of the list and release its sandbox; req (may be NULL) is
 * answered once it is gone. */
static void
session_end(struct mcp_session *s, struct http_request *req)
{
	struct mcp_session **p;
	struct sandbox *sb;

	for (p = &sessions; *p != s; p = &(*p)->next)
		;
	*p = s->next;
	nsessions--;
	s->ended = 1;
	sb = s->box != NULL ? sandbox_resolve(s->box) : NULL;
	log_info("MCP session %s ended%s%s", s->sb_session, sb != NULL ?
	    ", releasing " : "", sb != NULL ? sb->name : "");
	if (sb != NULL && sb->state != SB_RELEASED)
		lifecycle_release(sb, released_cb, req);
	else if (req != NULL)
		http_reply_empty(req, 204);
	/* A create in flight releases what it makes (created_cb). */
	session_unref(s);
}

/* A session that holds nothing: no sandbox (none made yet, or it is
 * gone), no request in progress, no create under way. */
static int
unbound(const struct mcp_session *s)
{
	struct sandbox *sb;

	if (s->ncalls > 0 || s->creating)
		return 0;
	sb = s->box != NULL ? sandbox_resolve(s->box) : NULL;
	return sb == NULL || sb->state == SB_RELEASED ||
	    sb->state == SB_RELEASING;
}

/* Room for one more session: the least recently used of MAX_UNBOUND
 * sessions that hold nothing ends; at MAX_SESSIONS, those idle past
 * HEARTBEAT_TIMEOUT (whose sandboxes the reaper has ended) too. */
static int
make_room(void)
{
	struct mcp_session *s, *next, *lru = NULL;
	double now = timing_monotonic();
	size_t n = 0;

	for (s = sessions; s != NULL; s = s->next) {
		if (!unbound(s))
			continue;
		n++;
		if (lru == NULL || s->last_used < lru->last_used)
			lru = s;
	}
	if (n >= MAX_UNBOUND || (lru != NULL && nsessions >= MAX_SESSIONS)) {
		log_info("MCP session %s ended to make room (the least "
		    "recently used of %zu without a sandbox)", lru->sb_session,
		    n);
		session_end(lru, NULL);
	}
	for (s = sessions; nsessions >= MAX_SESSIONS && s != NULL &&
	    sd.cfg.heartbeat_timeout > 0; s = next) {
		next = s->next;
		if (s->ncalls == 0 && !s->creating &&
		    now - s->last_used > sd.cfg.heartbeat_timeout)
			session_end(s, NULL);
	}
	return nsessions < MAX_SESSIONS ? 0 : -1;
}

static void
do_initialize(struct http_request *req, json_t *id, json_t *params)
{
	const char *type = http_request_query(req, "type");
	struct mcp_session *s;
	char sbs[17];
	char *msg;

	if (type == NULL)
		type = http_request_header(req, TYPE_HEADER);
	if (type == NULL)
		type = sd.cfg.pool_types.v[0];
	if (sandbox_types_find(type) == NULL) {
		msg = xasprintf("unknown sandbox type '%s' (?type= or "
		    TYPE_HEADER ")", type);
		reply_msg(req, 200, NULL, mcp_wire_error(id,
		    MCP_WIRE_INVALID_PARAMS, msg));
		free(msg);
		return;
	}
	if (make_room() < 0) {
		reply_rpc_error(req, 503, id, MCP_WIRE_INTERNAL_ERROR, "too "
		    "many MCP sessions (at most " STR(MAX_SESSIONS) "); end "
		    "one with DELETE /mcp");
		return;
	}
	s = xcalloc(1, sizeof *s);
	s->refs = 1;
	token_random_hex(s->id);
	/* Not the MCP session id, which is as good as a password for the
	 * session: sandboxd's session ids are listed to anyone with the
	 * bearer token (list_session_keys) and logged, as this one is. */
	token_random_hex_n(sbs, 8);
	s->sb_session = xasprintf("mcp-%s", sbs);
	s->type_name = xstrdup(type);
	s->last_used = timing_monotonic();
	s->next = sessions;
	sessions = s;
	nsessions++;
	log_info("MCP session %s opened, type %s", s->sb_session, type);
	reply_msg(req, 200, s->id, mcp_wire_result(id,
	    mcp_wire_initialize_result(params, "sandboxd", type)));
}

static struct mcp_session *
session_find(const char *id)
{
	struct mcp_session *s;

	for (s = sessions; s != NULL; s = s->next) {
		if (http_token_equal(id, s->id))
			return s;
	}
	return NULL;
}

/* The request's session; NULL after answering 400 or 404. */
static struct mcp_session *
request_session(struct http_request *req, json_t *id)
{
	const char *sid = http_request_header(req, SESSION_HEADER);
	struct mcp_session *s;

	if (sid == NULL) {
		reply_rpc_error(req, 400, id, MCP_WIRE_INVALID_REQUEST, "Bad "
		    "Request: " SESSION_HEADER " header is required (send "
		    "initialize first)");
		return NULL;
	}
	if ((s = session_find(sid)) == NULL) {
		reply_rpc_error(req, 404, id, MCP_WIRE_INVALID_REQUEST,
		    "Session not found: unknown or ended " SESSION_HEADER);
		return NULL;
	}
	s->last_used = timing_monotonic();
	return s;
}

/* The body as one JSON-RPC message; NULL after answering. */
static json_t *
request_message(struct http_request *req)
{
	struct evbuffer *body = http_request_body(req);
	size_t len = evbuffer_get_length(body);
	const char *text = (const char *)evbuffer_pullup(body, -1);
	struct error err;
	json_t *msg, *any;

	if ((msg = http_json_parse(text, len, &err)) != NULL)
		return msg;
	if (err.status == 413) {
		reply_rpc_error(req, 413, NULL, MCP_WIRE_INVALID_REQUEST,
		    err.msg);
		return NULL;
	}
	/* Valid JSON but not an object: a batch or a stray value. */
	any = len > 0 ? json_loadb(text, len, JSON_DECODE_ANY, NULL) : NULL;
	if (any != NULL) {
		json_decref(any);
		reply_rpc_error(req, 400, NULL, MCP_WIRE_INVALID_REQUEST,
		    "Invalid request: a JSON-RPC message is an object "
		    "(batches are not supported)");
		return NULL;
	}
	reply_rpc_error(req, 400, NULL, MCP_WIRE_PARSE_ERROR, err.msg);
	return NULL;
}

static void
route_post(struct http_request *req)
{
	json_t *msg, *id, *params;
	struct mcp_session *s;
	const char *method;

	if ((msg = request_message(req)) == NULL)
		return;
	id = json_object_get(msg, "id");
	method = json_string_value(json_object_get(msg, "method"));
	params = json_object_get(msg, "params");
	if (id != NULL && !json_is_string(id) && !json_is_integer(id)) {
		reply_rpc_error(req, 400, NULL, MCP_WIRE_INVALID_REQUEST,
		    "Invalid request: the id must be a string or an integer");
	} else if (method != NULL && id != NULL &&
	    strcmp(method, "initialize") == 0) {
		do_initialize(req, id, params);
	} else if ((s = request_session(req, id)) == NULL) {
		;
	} else if (method == NULL || id == NULL) {
		/* Notifications and responses (we send no requests):
		 * accepted, nothing to answer. */
		if (method != NULL && json_is_object(params) &&
		    strcmp(method, "notifications/cancelled") == 0)
			cancel_notified(s, params);
		http_reply_empty(req, 202);
	} else if (params != NULL && !json_is_object(params)) {
		reply_msg(req, 200, NULL, mcp_wire_error(id,
		    MCP_WIRE_INVALID_PARAMS, "params must be an object"));
	} else if (strcmp(method, "ping") == 0) {
		reply_msg(req, 200, NULL, mcp_wire_result(id, json_object()));
	} else if (strcmp(method, "tools/list") == 0 ||
	    strcmp(method, "tools/call") == 0) {
		submit(s, req, id, method, params);
	} else {
		char *text = xasprintf("Method not found: %s", method);

		reply_msg(req, 200, NULL, mcp_wire_error(id,
		    MCP_WIRE_METHOD_NOT_FOUND, text));
		free(text);
	}
	json_decref(msg);
}

static void
route_mcp(struct http_request *req, void *arg)
{
	struct mcp_session *s;

	(void)arg;
	if (http_request_method(req) == HTTP_METHOD_POST) {
		route_post(req);
		return;
	}
	if ((s = request_session(req, NULL)) != NULL)
		session_end(s, req);
}

static const struct http_route routes[] = {
	{ HTTP_METHOD_POST | HTTP_METHOD_DELETE, "/mcp", HTTP_MATCH_EXACT, 0,
	    route_mcp, 0 },
};

const struct http_route *
api_mcp_routes(size_t *n)
{
	*n = sizeof routes / sizeof routes[0];
	return routes;
}
