/*
 * The sandbox behind sandbox-mcp, through sandboxd's manager routes
 * (spec/agentscope-wire.md section 2): create_from_pool once, then
 * list_tools and call_tool for each MCP request, release at the end.
 *
 * Calls that arrive while the sandbox is being created wait in
 * smcp.calls and start when it is ready; when creating fails each of them
 * is answered with the reason and the next call tries again (sandboxd may
 * have been restarted meanwhile). Every exchange with sandboxd has a
 * timeout, so a sandboxd that stops answering gives an error, never a
 * hang. Like every http_client user, answers come from the loop, never
 * from inside the function that started the exchange.
 */
#include "smcp.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "http_client.h"
#include "jsonx.h"
#include "log.h"
#include "xmalloc.h"

#define LIST_TOOLS_TIMEOUT 60.0
#define RELEASE_TIMEOUT 30.0

static void (*release_done)(void);

int
smcp_box_init(struct error *err)
{
	const char *url = smcp.base_url, *slash;
	size_t hostlen;

	if (strncmp(url, "https://", 8) == 0) {
		error_set(err, 400, "--base_url %s: https is not supported; "
		    "reach sandboxd over http on loopback or a tunnel", url);
		return -1;
	}
	if (strncmp(url, "http://", 7) == 0)
		url += 7;
	slash = strchr(url, '/');
	hostlen = slash != NULL ? (size_t)(slash - url) : strlen(url);
	if (hostlen == 0) {
		error_set(err, 400, "--base_url %s: no host", smcp.base_url);
		return -1;
	}
	smcp.host = xasprintf("%.*s", (int)hostlen, url);
	/* http_client wants HOST:PORT; a URL may leave the port out. */
	if (strrchr(smcp.host, ':') == NULL ||
	    strrchr(smcp.host, ']') > strrchr(smcp.host, ':'))
		smcp.addr = xasprintf("%s:80", smcp.host);
	else
		smcp.addr = xstrdup(smcp.host);
	smcp.prefix = xstrdup(slash != NULL ? slash : "");
	while (*smcp.prefix != '\0' &&
	    smcp.prefix[strlen(smcp.prefix) - 1] == '/')
		smcp.prefix[strlen(smcp.prefix) - 1] = '\0';
	if (smcp.bearer_token != NULL && *smcp.bearer_token != '\0')
		smcp.auth = xasprintf("Authorization: Bearer %s",
		    smcp.bearer_token);
	return 0;
}

/* The answers of sandboxd as http_client_json gives them (status, the body
 * parsed as JSON, or why the exchange failed). http_client_json itself is
 * not used: its own context would leak when a call is cancelled, and
 * cancelling is what notifications/cancelled does. */
#define ANSWER_CALLBACKS(fn)						\
	static void							\
	fn##_http_cb(struct http_client_request *r,			\
	    const struct error *err, void *arg)				\
	{								\
		json_t *answer = parse_answer(r, err);			\
									\
		fn(err == NULL ? http_client_status(r) : 0, answer, err,\
		    arg);						\
		json_decref(answer);					\
	}								\
	static const struct http_client_callbacks fn##_http = {	\
		.on_done = fn##_http_cb,				\
	}

static json_t *
parse_answer(struct http_client_request *r, const struct error *err)
{
	struct evbuffer *body;
	size_t len;

	if (err != NULL)
		return NULL;
	body = http_client_body(r);
	len = evbuffer_get_length(body);
	return len > 0 ? json_loadb((const char *)evbuffer_pullup(body, -1),
	    len, JSON_DECODE_ANY, NULL) : NULL;
}

/* POST prefix/route with body (taken). */
static struct http_client_request *
post(const char *route, json_t *body, double timeout,
    const struct http_client_callbacks *cb, void *arg, struct error *err)
{
	const char *headers[] = { "Content-Type: application/json", smcp.auth,
	    NULL };
	struct http_client_options o = { 0 };
	char *target = xasprintf("%s/%s", smcp.prefix, route);
	char *text = json_dumps(body, JSON_COMPACT);
	struct http_client_request *r;

	if (text == NULL)
		fatal("cannot serialise a request");
	o.addr = smcp.addr;
	o.host = smcp.host;
	o.method = "POST";
	o.target = target;
	o.headers = headers;
	o.body = text;
	o.body_len = strlen(text);
	o.timeout = timeout;
	r = http_client_start(smcp.base, &o, cb, arg, err);
	free(target);
	free(text);
	json_decref(body);
	if (r == NULL)
		error_prefix(err, "sandboxd at %s", smcp.base_url);
	return r;
}

/* Why an exchange with sandboxd failed, fit for the MCP client. */
static void
describe(struct error *e, const char *route, int status, json_t *answer,
    const struct error *err)
{
	const char *detail = NULL;

	if (err != NULL) {
		error_set(e, err->status, "sandboxd at %s: %s%s", smcp.base_url,
		    err->msg, err->status == 502 ? " (is sandboxd running "
		    "there? see --base_url)" : "");
		return;
	}
	if (json_is_object(answer))
		detail = json_string_value(json_object_get(answer, "detail"));
	if (status == 401 || status == 403)
		error_set(e, status, "sandboxd refused the bearer token "
		    "(HTTP %d; see --bearer_token): %s", status,
		    detail != NULL ? detail : "");
	else
		error_set(e, status != 200 ? status : 502, "sandboxd /%s "
		    "answered HTTP %d: %s", route, status, detail != NULL ?
		    detail : "an answer without \"data\"");
}

/* sandboxd no longer has our sandbox (released by someone else, or by
 * its reaper after HEARTBEAT_TIMEOUT without calls): forget it, so that
 * the next call creates a new one, and say so in e. 0 when the failure
 * was something else. */
static int
box_gone(int status, json_t *answer, struct error *e)
{
	const char *detail = json_string_value(json_object_get(answer,
	    "detail"));

	if ((status != 404 && status != 409) || detail == NULL ||
	    strstr(detail, smcp.box_name) == NULL ||
	    (strstr(detail, "no sandbox") == NULL &&
	    strstr(detail, "is released") == NULL))
		return 0;
	error_set(e, 410, "the sandbox %s is gone (sandboxd: %s), released "
	    "by sandboxd or someone else, e.g. after its HEARTBEAT_TIMEOUT "
	    "without calls; the next call creates a new sandbox, without "
	    "the old one's files and state", smcp.box_name, detail);
	log_warn("%s", e->msg);
	free(smcp.box_name);
	smcp.box_name = NULL;
	json_decref(smcp.tools);
	smcp.tools = NULL;
	smcp.box_state = SMCP_BOX_NONE;
	return 1;
}

static void
unlink_call(struct smcp_call *c)
{
	struct smcp_call **p;

	for (p = &smcp.calls; *p != NULL; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			smcp.ncalls--;
			return;
		}
	}
}

void
smcp_call_free(struct smcp_call *c)
{
	json_decref(c->id);
	json_decref(c->arguments);
	free(c->tool);
	free(c);
}

/* Answer c with result (taken) and forget it. */
static void
answer_call(struct smcp_call *c, json_t *result)
{
	smcp_send_result(c->id, result);
	unlink_call(c);
	smcp_call_free(c);
}

/* Answer c with a failure: a tool call's failure is a CallToolResult
 * with isError (what a model reads and can act on), a listing's a
 * JSON-RPC error. */
static void
fail_call(struct smcp_call *c, const struct error *e)
{
	if (c->is_call) {
		answer_call(c, mcp_wire_tool_failure(e->msg));
		return;
	}
	smcp_send_error(c->id, MCP_WIRE_INTERNAL_ERROR, "%s", e->msg);
	unlink_call(c);
	smcp_call_free(c);
}

static void
list_done_cb(int status, json_t *answer, const struct error *err, void *arg)
{
	struct smcp_call *c = arg;
	json_t *data = json_object_get(answer, "data");
	struct error e;

	c->up = NULL;
	if (err != NULL || status != 200 || !json_is_object(data)) {
		if (smcp.box_name == NULL || !box_gone(status, answer, &e))
			describe(&e, "list_tools", status, answer, err);
		fail_call(c, &e);
		return;
	}
	json_decref(smcp.tools);
	smcp.tools = mcp_wire_tools_from_groups(data);
	answer_call(c, json_pack("{s:O}", "tools", smcp.tools));
}
ANSWER_CALLBACKS(list_done_cb);

static void
call_done_cb(int status, json_t *answer, const struct error *err, void *arg)
{
	struct smcp_call *c = arg;
	json_t *data = json_object_get(answer, "data");
	struct error e;

	c->up = NULL;
	if (err != NULL || status != 200 || !json_is_object(data)) {
		if (smcp.box_name == NULL || !box_gone(status, answer, &e))
			describe(&e, "call_tool", status, answer, err);
		error_prefix(&e, "tool %s failed", c->tool);
		fail_call(c, &e);
		return;
	}
	answer_call(c, mcp_wire_tool_result(data));
}
ANSWER_CALLBACKS(call_done_cb);

static void
start_call(struct smcp_call *c)
{
	struct error err;

	if (!c->is_call) {
		c->up = post("list_tools", json_pack("{s:s}", "identity",
		    smcp.box_name), LIST_TOOLS_TIMEOUT, &list_done_cb_http, c,
		    &err);
	} else if (smcp.tools != NULL && !mcp_wire_tool_known(smcp.tools, c->tool)) {
		/* A name not offered is the client's mistake (MCP: a
		 * protocol error), not a failed tool run. */
		smcp_send_error(c->id, MCP_WIRE_INVALID_PARAMS, "Unknown tool: %s",
		    c->tool);
		unlink_call(c);
		smcp_call_free(c);
		return;
	} else {
		c->up = post("call_tool", json_pack("{s:s,s:s,s:O}",
		    "identity", smcp.box_name, "tool_name", c->tool,
		    "arguments", c->arguments), smcp.call_timeout,
		    &call_done_cb_http, c, &err);
	}
	if (c->up == NULL)
		fail_call(c, &err);
}

static void
start_waiting(void)
{
	struct smcp_call *c, *next;

	for (c = smcp.calls; c != NULL; c = next) {
		next = c->next;
		if (c->up == NULL)
			start_call(c);
	}
}

static void
fail_waiting(const struct error *e)
{
	struct smcp_call *c, *next;

	for (c = smcp.calls; c != NULL; c = next) {
		next = c->next;
		if (c->up == NULL)
			fail_call(c, e);
	}
}

static void release_now(void);

static void
created_cb(int status, json_t *answer, const struct error *err, void *arg)
{
	json_t *data = json_object_get(answer, "data");
	const char *detail;
	struct error e;

	(void)arg;
	smcp.box_req = NULL;
	if (err == NULL && status == 200 && json_is_string(data)) {
		smcp.box_name = xstrdup(json_string_value(data));
		smcp.box_state = SMCP_BOX_READY;
		log_info("sandbox %s of type %s is ready", smcp.box_name,
		    smcp.type);
		if (smcp.closing)
			release_now();
		else
			start_waiting();
		return;
	}
	smcp.box_state = SMCP_BOX_NONE;
	detail = json_string_value(json_object_get(answer, "detail"));
	if (err == NULL && status == 200)
		error_set(&e, 503, "sandboxd could not give a sandbox of type "
		    "'%s': %s", smcp.type, detail != NULL ? detail :
		    "no reason given");
	else {
		describe(&e, "create_from_pool", status, answer, err);
		error_prefix(&e, "creating a sandbox of type '%s'", smcp.type);
	}
	log_warn("%s", e.msg);
	fail_waiting(&e);
	if (smcp.closing && release_done != NULL)
		release_done();
}
ANSWER_CALLBACKS(created_cb);

void
smcp_box_create(void)
{
	struct error err;
	char *session;

	if (smcp.box_state != SMCP_BOX_NONE)
		return;
	/* A session id of its own: should this process die without
	 * releasing (SIGKILL), sandboxd's heartbeat reaper still ends the
	 * sandbox. */
	session = xasprintf("sandbox-mcp-%ld-%ld", (long)getpid(),
	    (long)time(NULL));
	smcp.box_req = post("create_from_pool", json_pack("{s:s,s:{s:s}}",
	    "sandbox_type", smcp.type, "meta", "session_ctx_id", session),
	    smcp.create_timeout, &created_cb_http, NULL, &err);
	free(session);
	if (smcp.box_req == NULL) {
		log_warn("%s", err.msg);
		fail_waiting(&err);
		return;
	}
	smcp.box_state = SMCP_BOX_CREATING;
}

void
smcp_box_submit(struct smcp_call *c)
{
	c->next = smcp.calls;
	smcp.calls = c;
	smcp.ncalls++;
	if (smcp.box_state == SMCP_BOX_READY)
		start_call(c);
	else if (smcp.box_state == SMCP_BOX_NONE)
		smcp_box_create();
}

void
smcp_box_cancel(json_t *id)
{
	struct smcp_call *c;

	for (c = smcp.calls; c != NULL; c = c->next) {
		if (json_equal(c->id, id)) {
			if (c->up != NULL)
				http_client_cancel(c->up);
			log_info("request cancelled%s", c->is_call ?
			    "; its command is stopped with its HTTP call" : "");
			unlink_call(c);
			smcp_call_free(c);
			return;
		}
	}
}

static void
released_cb(int status, json_t *answer, const struct error *err, void *arg)
{
	struct error e;

	(void)arg;
	smcp.box_req = NULL;
	if (err != NULL || status != 200 || !json_is_true(json_object_get(
	    answer, "data"))) {
		describe(&e, "release", status, answer, err);
		log_warn("releasing %s: %s", smcp.box_name, e.msg);
		smcp.exit_status = 1;
	} else
		log_info("sandbox %s released", smcp.box_name);
	smcp.box_state = SMCP_BOX_NONE;
	release_done();
}
ANSWER_CALLBACKS(released_cb);

static void
release_now(void)
{
	struct error err;

	smcp.box_state = SMCP_BOX_RELEASING;
	smcp.box_req = post("release", json_pack("{s:s}", "identity",
	    smcp.box_name), RELEASE_TIMEOUT, &released_cb_http, NULL, &err);
	if (smcp.box_req == NULL) {
		log_warn("releasing %s: %s", smcp.box_name, err.msg);
		smcp.exit_status = 1;
		smcp.box_state = SMCP_BOX_NONE;
		release_done();
	}
}

static void
nothing_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	release_done();
}

void
smcp_box_release(void (*done)(void))
{
	struct smcp_call *c;

	release_done = done;
	while ((c = smcp.calls) != NULL) {
		if (c->up != NULL)
			http_client_cancel(c->up);
		unlink_call(c);
		smcp_call_free(c);
	}
	switch (smcp.box_state) {
	case SMCP_BOX_READY:
		release_now();
		break;
	case SMCP_BOX_CREATING:
		/* Cancelling the create would leave a sandbox nobody
		 * releases; created_cb releases it. */
		break;
	case SMCP_BOX_NONE:
		event_base_once(smcp.base, -1, EV_TIMEOUT, nothing_cb, NULL,
		    NULL);
		break;
	case SMCP_BOX_RELEASING:
		break;
	}
}
