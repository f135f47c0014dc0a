/*
 * The AgentScope manager routes (spec section 2): one route per manager
 * method, keyword arguments as a JSON object (or query parameters for GET),
 * every answer {"data": result}. Failures answer {"detail": "Error in
 * <method>: ..."} with the status the failure implies (400 bad input, 404
 * unknown identity, 409 wrong state, 502/504 Docker or agent trouble, 500
 * only for our own faults); the reference answers 500 for all of them, and
 * its SDK treats every non-2xx alike. create and create_from_pool answer
 * {"data": null, "detail": why} when no sandbox can be had, as the spec says.
 *
 * One table (methods[] below) drives the routes: each method is served at
 * /<name> and at /<name>_async, the route the SDK's async manager calls
 * ("Async twins" in the spec), with the same arguments and answer. The
 * route handler finds its entry again by the path it was called at.
 */
#include "sandboxd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "backend.h"
#include "jsonx.h"
#include "log.h"
#include "shared.h"
#include "xmalloc.h"

#define CHECK_HEALTH_TIMEOUT 5.0
#define LIST_TOOLS_TIMEOUT 30.0

/* A request waiting for an asynchronous step; freed when it answers. */
struct rpc {
	struct http_request *req;
	const char *what;		/* the route's name, e.g. "release_async" */
	json_t *args;
	size_t pending;			/* cleanup: releases outstanding */
	const char *tool_type;		/* list_tools: borrowed from args */
};

static void
reply_data(struct http_request *req, json_t *data)
{
	http_reply_json(req, 200, json_pack("{s:o}", "data", data));
}

static struct rpc *
rpc_new(struct http_request *req, const char *what, json_t *args)
{
	struct rpc *r = xcalloc(1, sizeof *r);

	r->req = req;
	r->what = what;
	r->args = json_incref(args);
	return r;
}

static void
rpc_free(struct rpc *r)
{
	json_decref(r->args);
	free(r);
}

/* One manager method of spec section 2; see the table at the end. */
struct rpc_method {
	const char *name;
	unsigned methods;		/* HTTP methods it takes */
	void (*handler)(struct http_request *req, const char *what,
	    json_t *args);
	size_t max_body;		/* SMALL, or LARGE: the server's limit */
	/* The sync method's first two parameters. The SDK declares most
	 * async methods (*args, **kwargs), and its remote_wrapper_async names
	 * the values of a positional call after those two: release_async(id)
	 * sends {"args": id}. */
	const char *positional[2];
};

/* An async call's "args" and "kwargs" under the names the method gives
 * its first two parameters. -1 with err when a value comes twice. */
static int
rpc_name_positional(const struct rpc_method *m, json_t *args,
    struct error *err)
{
	static const char *const as_sent[2] = { "args", "kwargs" };

	for (size_t i = 0; i < 2; i++) {
		json_t *v = json_object_get(args, as_sent[i]);

		if (v == NULL || m->positional[i] == NULL)
			continue;
		if (json_object_get(args, m->positional[i]) != NULL) {
			error_set(err, 400, "%s given twice, by name and as "
			    "\"%s\"", m->positional[i], as_sent[i]);
			return -1;
		}
		json_object_set(args, m->positional[i], v);
		json_object_del(args, as_sent[i]);
	}
	return 0;
}

/* The method's arguments: the JSON body of a POST (empty: none), the query
 * parameters of a GET. New reference, or NULL after answering 400. */
static json_t *
rpc_args(struct http_request *req, const struct rpc_method *m, int is_async,
    const char *what)
{
	struct error err;
	json_t *args;

	if (http_request_method(req) == HTTP_METHOD_GET) {
		static const char *const keys[] = { "identity",
		    "session_ctx_id", "tool_type", "sandbox_type" };

		args = json_object();
		for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
			const char *v = http_request_query(req, keys[i]);

			if (v != NULL)
				json_object_set_new(args, keys[i], json_string(v));
		}
		return args;
	}
	if (evbuffer_get_length(http_request_body(req)) == 0)
		return json_object();
	args = http_request_json(req, &err);
	if (args != NULL && is_async &&
	    rpc_name_positional(m, args, &err) < 0) {
		json_decref(args);
		args = NULL;
	}
	if (args == NULL)
		api_reply_rpc_error(req, what, &err);
	return args;
}

/* The sandbox named by args.identity; NULL after answering 400 / 404. */
static struct sandbox *
rpc_sandbox(struct http_request *req, const char *what, json_t *args)
{
	const char *identity;
	struct sandbox *sb;
	struct error err;

	if (jsonx_get_string(args, "identity", 1, &identity, &err) < 0) {
		api_reply_rpc_error(req, what, &err);
		return NULL;
	}
	sb = sandbox_resolve(identity);
	if (sb == NULL) {
		error_set(&err, 404, "no sandbox %s", identity);
		api_reply_rpc_error(req, what, &err);
		return NULL;
	}
	sessions_touch_sandbox(sb);
	return sb;
}

static void
route_health(struct http_request *req, void *arg)
{
	(void)arg;
	http_reply_json(req, 200, json_pack("{s:s,s:s}", "status", "healthy",
	    "version", VERSION));
}

/* create, create_from_pool: a name, or null with the reason. */
static void
reply_created(struct http_request *req, struct sandbox *sb,
    const struct error *err)
{
	struct error e;

	if (err != NULL) {
		e = *err;
		redact_error(&e, NULL);
		http_reply_json(req, 200, json_pack("{s:n,s:s}", "data",
		    "detail", e.msg));
		return;
	}
	reply_data(req, json_string(sb->name));
}

static void
created_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	reply_created(arg, sb, err);
}

static void
create_common(struct http_request *req, const char *what, json_t *args,
    int from_pool)
{
	struct create_request creq;
	struct sandbox *sb;
	struct error err;

	if (api_parse_create(args, &creq, "sandbox_type", &err) < 0) {
		api_reply_rpc_error(req, what, &err);
		return;
	}
	if (pool_take_or_create(&creq, from_pool, &sb, created_cb, req,
	    &err) < 0) {
		if (err.status == 503)
			reply_created(req, NULL, &err);
		else
			api_reply_rpc_error(req, what, &err);
	} else if (sb != NULL) {
		reply_data(req, json_string(sb->name));
	}
}

static void
rpc_create_from_pool(struct http_request *req, const char *what,
    json_t *args)
{
	create_common(req, what, args, 1);
}

static void
rpc_create(struct http_request *req, const char *what, json_t *args)
{
	create_common(req, what, args, 0);
}

static void
bool_done_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct rpc *r = arg;
	struct error e;

	(void)sb;
	if (err != NULL && err->status != 409) {
		e = *err;
		redact_error(&e, NULL);
		http_reply_json(r->req, 200, json_pack("{s:b,s:s}", "data", 0,
		    "detail", e.msg));
	} else if (err != NULL)
		api_reply_rpc_error(r->req, r->what, err);
	else
		reply_data(r->req, json_true());
	rpc_free(r);
}

typedef void (*lifecycle_fn)(struct sandbox *, sandbox_done_cb, void *);

static void
bool_method(struct http_request *req, const char *what, json_t *args,
    lifecycle_fn fn)
{
	struct sandbox *sb;

	if ((sb = rpc_sandbox(req, what, args)) != NULL)
		fn(sb, bool_done_cb, rpc_new(req, what, args));
}

static void
rpc_release(struct http_request *req, const char *what, json_t *args)
{
	bool_method(req, what, args, lifecycle_release);
}

static void
rpc_start(struct http_request *req, const char *what, json_t *args)
{
	bool_method(req, what, args, lifecycle_start);
}

static void
rpc_stop(struct http_request *req, const char *what, json_t *args)
{
	bool_method(req, what, args, lifecycle_stop);
}

static void
status_cb(enum backend_state state, int exit_code, const struct error *err,
    void *arg)
{
	struct rpc *r = arg;

	(void)exit_code;
	if (err != NULL && err->status == 404)
		reply_data(r->req, json_string("removed"));
	else if (err != NULL)
		api_reply_rpc_error(r->req, r->what, err);
	else
		reply_data(r->req, json_string(backend_state_name(state)));
	rpc_free(r);
}

static void
rpc_get_status(struct http_request *req, const char *what, json_t *args)
{
	struct sandbox *sb;

	sb = rpc_sandbox(req, what, args);
	/* Another instance's backend: its record says. */
	if (sb != NULL && sb->owner != NULL)
		reply_data(req, json_string(sb->state == SB_RELEASING ?
		    "released" : sb->state == SB_PAUSED ? "paused" : "running"));
	else if (sb != NULL && (sb->state == SB_RELEASED ||
	    sb->container_id == NULL))
		reply_data(req, json_string(sb->state == SB_RELEASED ?
		    "released" : "creating"));
	else if (sb != NULL)
		sd.backend->ops->status(sd.backend, sb->container_id, status_cb,
		    rpc_new(req, what, args));
}

static void
rpc_get_info(struct http_request *req, const char *what, json_t *args)
{
	struct sandbox *sb;

	if ((sb = rpc_sandbox(req, what, args)) != NULL)
		reply_data(req, sandbox_model(sb));
}

static void
health_cb(struct sandbox *sb, int ok, const char *why, void *arg)
{
	struct rpc *r = arg;

	(void)why;
	(void)sb;
	reply_data(r->req, json_boolean(ok));
	rpc_free(r);
}

static void
rpc_check_health(struct http_request *req, const char *what, json_t *args)
{
	struct sandbox *sb;

	sb = rpc_sandbox(req, what, args);
	if (sb != NULL && (sb->state == SB_RELEASED ||
	    sb->state == SB_RELEASING || sb->state == SB_STOPPED ||
	    sb->state == SB_PAUSED || sb->state == SB_CREATING))
		reply_data(req, json_false());
	else if (sb != NULL)
		agent_probe(sb, CHECK_HEALTH_TIMEOUT, health_cb,
		    rpc_new(req, what, args));
}

static void
tools_cb(struct sandbox *sb, int status, json_t *answer,
    const struct error *err, void *arg)
{
	struct rpc *r = arg;
	json_t *tools;
	struct error e;

	if ((tools = api_tool_groups(sb, status, answer, err, &e)) == NULL) {
		api_reply_rpc_error(r->req, r->what, &e);
		rpc_free(r);
		return;
	}
	if (r->tool_type != NULL) {
		json_t *group = json_object_get(tools, r->tool_type);

		group = group != NULL ? json_incref(group) : json_object();
		json_decref(tools);
		tools = json_pack("{s:o}", r->tool_type, group);
	}
	reply_data(r->req, tools);
	rpc_free(r);
}

/* The sandbox named by args.identity, if its agent takes calls; NULL
 * after answering. */
static struct sandbox *
rpc_callable(struct http_request *req, const char *what, json_t *args)
{
	struct sandbox *sb;
	struct error err;

	if ((sb = rpc_sandbox(req, what, args)) == NULL)
		return NULL;
	if (sandbox_check_callable(sb, &err) < 0) {
		api_reply_rpc_error(req, what, &err);
		return NULL;
	}
	return sb;
}

static void
rpc_list_tools(struct http_request *req, const char *what, json_t *args)
{
	struct sandbox *sb;
	struct error err;
	struct rpc *r;

	if ((sb = rpc_callable(req, what, args)) == NULL)
		return;
	r = rpc_new(req, what, args);
	if (jsonx_get_string(r->args, "tool_type", 0, &r->tool_type,
	    &err) < 0) {
		api_reply_rpc_error(req, what, &err);
		rpc_free(r);
		return;
	}
	agent_call_json(sb, "GET", "/mcp/list_tools", NULL, LIST_TOOLS_TIMEOUT,
	    tools_cb, r);
}

static void
rpc_call_tool(struct http_request *req, const char *what, json_t *args)
{
	const char *tool;
	struct sandbox *sb;
	struct error err;
	json_t *arguments, *body;
	char *target;

	if ((sb = rpc_callable(req, what, args)) == NULL)
		return;
	if (jsonx_get_string(args, "tool_name", 1, &tool, &err) < 0 ||
	    jsonx_get_object(args, "arguments", 0, &arguments, &err) < 0) {
		api_reply_rpc_error(req, what, &err);
		return;
	}
	target = api_tool_target(tool, arguments, &body);
	agent_relay(req, sb, target, body, what);
	free(target);
	json_decref(body);
}

static void
rpc_add_mcp_servers(struct http_request *req, const char *what, json_t *args)
{
	struct sandbox *sb;
	struct error err;
	json_t *configs, *body;
	int overwrite;

	if ((sb = rpc_callable(req, what, args)) == NULL)
		return;
	if (jsonx_get_object(args, "server_configs", 1, &configs, &err) < 0 ||
	    jsonx_get_bool(args, "overwrite", 0, &overwrite, &err) < 0) {
		api_reply_rpc_error(req, what, &err);
		return;
	}
	body = json_pack("{s:O,s:b}", "server_configs", configs, "overwrite",
	    overwrite);
	agent_relay(req, sb, "/mcp/add_servers", body, what);
	json_decref(body);
}

static void
rpc_get_session_mapping(struct http_request *req, const char *what,
    json_t *args)
{
	const char *session;
	struct error err;
	json_t *names;

	if (jsonx_get_string(args, "session_ctx_id", 1, &session, &err) < 0) {
		api_reply_rpc_error(req, what, &err);
		return;
	}
	names = sessions_mapping(session);
	if (json_array_size(names) > 0)
		sessions_touch(session);
	reply_data(req, names);
}

static void
rpc_list_session_keys(struct http_request *req, const char *what,
    json_t *args)
{
	(void)what;
	(void)args;
	reply_data(req, sessions_keys());
}

static void
cleaned_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct rpc *r = arg;

	if (err != NULL)
		log_warn("cleanup: %s: %s", sb->name, err->msg);
	if (--r->pending > 0)
		return;
	reply_data(r->req, json_null());
	rpc_free(r);
}

static void
rpc_cleanup(struct http_request *req, const char *what, json_t *args)
{
	struct sandbox *sb, *next;
	struct rpc *r;

	r = rpc_new(req, what, args);
	/* One extra count, dropped below, so early answers cannot end it. */
	r->pending = 1;
	for (sb = sandbox_first(); sb != NULL; sb = next) {
		next = sandbox_next(sb);
		if (sb->state == SB_RELEASED)
			continue;
		r->pending++;
		lifecycle_release(sb, cleaned_cb, r);
	}
	cleaned_cb(NULL, NULL, r);
}

#define POST HTTP_METHOD_POST
#define GETPOST (HTTP_METHOD_GET | HTTP_METHOD_POST)
#define PROXY_METHODS (HTTP_METHOD_GET | HTTP_METHOD_POST | HTTP_METHOD_PUT | \
    HTTP_METHOD_DELETE | HTTP_METHOD_PATCH)
#define EXACT HTTP_MATCH_EXACT
#define ASYNC_SUFFIX "_async"
/* Body limits: call_tool relays a tool's arguments (a command, code, a
 * file's content) and takes the server's limit (32 MiB); the other methods
 * name a sandbox and options, for which 1 MiB is plenty. */
#define SMALL (1024 * 1024)
#define LARGE 0

/* The manager's methods, in the order of spec section 2. */
static const struct rpc_method methods[] = {
	{ "create_from_pool", POST, rpc_create_from_pool, SMALL,
	    { "sandbox_type", "meta" } },
	{ "create", POST, rpc_create, SMALL, { "sandbox_type", "mount_dir" } },
	{ "release", POST, rpc_release, SMALL, { "identity", NULL } },
	{ "start", POST, rpc_start, SMALL, { "identity", NULL } },
	{ "stop", POST, rpc_stop, SMALL, { "identity", NULL } },
	{ "get_status", GETPOST, rpc_get_status, SMALL, { "identity", NULL } },
	{ "get_info", GETPOST, rpc_get_info, SMALL, { "identity", NULL } },
	{ "check_health", GETPOST, rpc_check_health, SMALL,
	    { "identity", NULL } },
	{ "list_tools", GETPOST, rpc_list_tools, SMALL,
	    { "identity", "tool_type" } },
	{ "call_tool", POST, rpc_call_tool, LARGE, { "identity", "tool_name" } },
	{ "add_mcp_servers", POST, rpc_add_mcp_servers, SMALL,
	    { "identity", "server_configs" } },
	{ "get_session_mapping", GETPOST, rpc_get_session_mapping, SMALL,
	    { "session_ctx_id", NULL } },
	{ "list_session_keys", GETPOST, rpc_list_session_keys, SMALL,
	    { NULL, NULL } },
	{ "cleanup", POST, rpc_cleanup, SMALL, { NULL, NULL } },
};

#define NMETHODS (sizeof methods / sizeof methods[0])

/* The method a route path names: "/<name>" or "/<name>_async". */
static const struct rpc_method *
method_of(const char *path, int *is_async)
{
	size_t len, slen = strlen(ASYNC_SUFFIX);

	if (*path++ != '/')
		return NULL;
	for (size_t i = 0; i < NMETHODS; i++) {
		len = strlen(methods[i].name);
		if (strncmp(path, methods[i].name, len) != 0)
			continue;
		*is_async = path[len] != '\0';
		if (!*is_async || (strncmp(path + len, ASYNC_SUFFIX, slen) == 0 &&
		    path[len + slen] == '\0'))
			return &methods[i];
	}
	return NULL;
}

/* A method call naming a sandbox this instance has not heard of, while
 * Redis is asked for its record. */
struct rpc_lookup {
	struct http_request *req;
	const struct rpc_method *m;
	json_t *args;
	int gone;		/* the client left meanwhile */
};

static void
lookup_gone_cb(struct http_request *req, void *arg)
{
	struct rpc_lookup *l = arg;

	(void)req;
	l->gone = 1;
}

static void
looked_up_cb(void *arg, int ok)
{
	struct rpc_lookup *l = arg;
	struct error err;

	if (!l->gone) {
		const char *what = http_request_path(l->req) + 1;

		http_request_on_close(l->req, NULL, NULL);
		if (ok) {
			l->m->handler(l->req, what, l->args);
		} else {
			shared_lost_error(&err);
			api_reply_rpc_error(l->req, what, &err);
		}
	}
	json_decref(l->args);
	free(l);
}

/* With other instances on one Redis, a name unknown here may be one whose
 * announcement has not reached us yet (its create answered, its client is
 * already asking us): read its record first; a session's mapping, the
 * records of its sandboxes. 1 when that is under way. */
static int
rpc_lookup_first(struct http_request *req, const struct rpc_method *m,
    json_t *args)
{
	const char *id = json_string_value(json_object_get(args, "identity"));
	/* A method about a session (its first parameter) reads the
	 * session's bindings: Redis has every instance's at once. */
	const char *session = m->positional[0] != NULL &&
	    strcmp(m->positional[0], "session_ctx_id") == 0 ?
	    json_string_value(json_object_get(args, "session_ctx_id")) : NULL;
	struct rpc_lookup *l;
	int rc;

	if (!shared_enabled() || (id == NULL && session == NULL) ||
	    (id != NULL && sandbox_resolve(id) != NULL))
		return 0;
	l = xcalloc(1, sizeof *l);
	l->req = req;
	l->m = m;
	l->args = json_incref(args);
	rc = id != NULL ? shared_lookup(id, looked_up_cb, l) :
	    shared_lookup_session(session, looked_up_cb, l);
	if (rc < 0) {
		json_decref(args);
		free(l);
		return 0;
	}
	http_request_on_close(req, lookup_gone_cb, l);
	return 1;
}

/* Every manager route: validate the arguments, then the method's own
 * handler (which borrows them). */
static void
route_rpc(struct http_request *req, void *arg)
{
	const char *what = http_request_path(req) + 1;
	const struct rpc_method *m;
	int is_async = 0;
	json_t *args;

	(void)arg;
	/* The router matched one of the paths routes[] holds. */
	if ((m = method_of(http_request_path(req), &is_async)) == NULL)
		fatal("no manager method for %s", http_request_path(req));
	if ((args = rpc_args(req, m, is_async, what)) == NULL)
		return;
	if (!rpc_lookup_first(req, m, args))
		m->handler(req, what, args);
	json_decref(args);
}

/* /health, each method twice, /proxy/. */
static struct http_route routes[2 + 2 * NMETHODS];
/* "/<name>" and "/<name>_async" of each method. */
static char paths[NMETHODS][2][48];

const struct http_route *
api_agentscope_routes(size_t *n)
{
	size_t k = 0;

	routes[k++] = (struct http_route){ HTTP_METHOD_GET, "/health", EXACT,
	    HTTP_ROUTE_NO_AUTH, route_health, SMALL };
	for (size_t i = 0; i < NMETHODS; i++) {
		snprintf(paths[i][0], sizeof paths[i][0], "/%s",
		    methods[i].name);
		snprintf(paths[i][1], sizeof paths[i][1], "/%s" ASYNC_SUFFIX,
		    methods[i].name);
		for (size_t j = 0; j < 2; j++)
			routes[k++] = (struct http_route){ methods[i].methods,
			    paths[i][j], EXACT, 0, route_rpc,
			    methods[i].max_body };
	}
	routes[k++] = (struct http_route){ PROXY_METHODS, "/proxy/",
	    HTTP_MATCH_PREFIX, HTTP_ROUTE_STREAM_BODY | HTTP_ROUTE_NO_AUTH,
	    proxy_route, 0 };
	*n = k;
	return routes;
}
