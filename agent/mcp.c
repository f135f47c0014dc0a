/*
 * The registry of MCP servers and the /mcp routes:
 *
 * POST /mcp/add_servers {"server_configs": {"mcpServers": {name: cfg}},
 *     "overwrite": bool}: starts every server named, all at once, and
 *     answers "OK" when all are ready, or 500 naming those that failed (the
 *     others are kept). A name already there is skipped unless overwrite;
 *     the old server then keeps serving until its successor is ready, and
 *     stays if the successor fails. Configs are checked before anything
 *     starts: a bad one is a 400 and starts nothing; the name of an enabled
 *     native tool group is a 409. A server gets MCP_START_TIMEOUT seconds
 *     (or its config's "timeout") to initialize and to list its tools.
 * GET /mcp/list_tools: asks every live server for its tools again (one
 *     whose listing fails keeps its last list) and answers them, native
 *     groups first, as {server: {tool: entry}}.
 * POST /mcp/call_tool {"tool_name", "arguments", "timeout"?}: the first
 *     native group or server (in the order they were added) that offers the
 *     tool runs it; the answer is its CallToolResult. A name nobody offers
 *     makes every server list its tools again before the 404, for tools a
 *     server added since. No answer within "timeout" (MCP_CALL_TIMEOUT) is
 *     a 504 and the server is told the call was cancelled, as it is when
 *     the client goes away; a server that died is a 502. The reference
 *     SDK's names and argument spellings that a server spells differently
 *     are mapped (mcp_aliases.c) and listed beside the server's own.
 *
 * --mcp-config loads the same {"mcpServers": ...} at start, in the
 * background: a broken entry or a server that fails is logged, not fatal.
 * Until those servers are up (or have failed), list_tools and call_tool
 * wait for them, so that a client that starts using a fresh sandbox at
 * once sees the image's tools rather than a 404.
 */
#include "agent.h"
#include "mcp.h"
#include "mcp_aliases.h"
#include "toolset.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "jsonx.h"
#include "log.h"
#include "xmalloc.h"

/* A request held until the --mcp-config servers are up; freed when it
 * runs or its client goes. */
struct mcp_waiter {
	TAILQ_ENTRY(mcp_waiter) entry;
	struct agent *agent;
	struct http_request *req;
	http_handler route;
};

/* Created by mcp_init; lives until the process exits. */
struct mcp {
	TAILQ_HEAD(, mcp_conn) servers;	/* in the order they were added */
	int loading;				/* the --mcp-config batch runs */
	TAILQ_HEAD(, mcp_waiter) waiters;
};

void
mcp_init(struct agent *agent)
{
	agent->mcp = xcalloc(1, sizeof *agent->mcp);
	TAILQ_INIT(&agent->mcp->servers);
	TAILQ_INIT(&agent->mcp->waiters);
}

static void
waiter_gone(struct http_request *req, void *arg)
{
	struct mcp_waiter *w = arg;

	TAILQ_REMOVE(&w->agent->mcp->waiters, w, entry);
	free(w);
	http_reply_error(req, 499, "client closed the connection");
}

/* 1 when req must wait for the --mcp-config servers (and now does). */
static int
wait_for_loading(struct agent *agent, struct http_request *req,
    http_handler route)
{
	struct mcp_waiter *w;

	if (!agent->mcp->loading)
		return 0;
	w = xcalloc(1, sizeof *w);
	w->agent = agent;
	w->req = req;
	w->route = route;
	TAILQ_INSERT_TAIL(&agent->mcp->waiters, w, entry);
	http_request_on_close(req, waiter_gone, w);
	return 1;
}

static void
loading_done(struct agent *agent)
{
	struct mcp_waiter *w;

	agent->mcp->loading = 0;
	while ((w = TAILQ_FIRST(&agent->mcp->waiters)) != NULL) {
		TAILQ_REMOVE(&agent->mcp->waiters, w, entry);
		http_request_on_close(w->req, NULL, NULL);
		w->route(w->req, agent);
		free(w);
	}
}

static struct mcp_conn *
registry_find(struct agent *agent, const char *name)
{
	struct mcp_conn *srv;

	TAILQ_FOREACH(srv, &agent->mcp->servers, entry)
		if (strcmp(srv->name, name) == 0)
			return srv;
	return NULL;
}

void
mcp_shutdown(struct agent *agent)
{
	struct mcp_conn *srv;
	struct mcp_waiter *w;

	while ((w = TAILQ_FIRST(&agent->mcp->waiters)) != NULL) {
		TAILQ_REMOVE(&agent->mcp->waiters, w, entry);
		http_request_on_close(w->req, NULL, NULL);
		http_reply_error(w->req, 503, "the agent is shutting down");
		free(w);
	}
	while ((srv = TAILQ_FIRST(&agent->mcp->servers)) != NULL) {
		TAILQ_REMOVE(&agent->mcp->servers, srv, entry);
		mcp_conn_stop(srv, "the agent is shutting down");
		mcp_conn_unref(srv);
	}
}

/* Configs. */

int
mcp_config_is_http(json_t *cfg)
{
	json_t *command = json_object_get(cfg, "command");

	return command == NULL || json_is_null(command);
}

static int
strings_only(json_t *v, int object)
{
	const char *key;
	json_t *item;
	size_t i;

	if (object) {
		json_object_foreach(v, key, item)
			if (!json_is_string(item))
				return 0;
	} else {
		json_array_foreach(v, i, item)
			if (!json_is_string(item))
				return 0;
	}
	return 1;
}

int
mcp_config_check(struct agent *agent, const char *name, json_t *cfg,
    struct error *err)
{
	json_t *command = json_object_get(cfg, "command"), *v;
	const char *type;

	if (name[0] == '\0') {
		error_set(err, 400, "an MCP server name must not be empty");
		return -1;
	}
	if (toolset_group(agent, name) != NULL) {
		error_set(err, 409, "MCP server '%s': the name is taken by the "
		    "native tool group of that name", name);
		return -1;
	}
	if (!json_is_object(cfg)) {
		error_set(err, 400, "MCP server '%s': its config must be an "
		    "object", name);
		return -1;
	}
	v = json_object_get(cfg, "timeout");
	if (v != NULL && !(json_is_number(v) && json_number_value(v) > 0 &&
	    json_number_value(v) <= 86400)) {
		error_set(err, 400, "MCP server '%s': timeout must be a number "
		    "of seconds between 0 and 86400", name);
		return -1;
	}
	if (!mcp_config_is_http(cfg)) {
		if (!json_is_string(command) ||
		    json_string_value(command)[0] == '\0') {
			error_set(err, 400, "MCP server '%s': command must be a "
			    "non-empty string", name);
			return -1;
		}
		v = json_object_get(cfg, "args");
		if (v != NULL && !json_is_null(v) &&
		    !(json_is_array(v) && strings_only(v, 0))) {
			error_set(err, 400, "MCP server '%s': args must be a "
			    "list of strings", name);
			return -1;
		}
		v = json_object_get(cfg, "env");
		if (v != NULL && !json_is_null(v) &&
		    !(json_is_object(v) && strings_only(v, 1))) {
			error_set(err, 400, "MCP server '%s': env must be an "
			    "object of strings", name);
			return -1;
		}
		return 0;
	}
	if (!json_is_string(json_object_get(cfg, "url"))) {
		error_set(err, 400, "MCP server '%s': give either a command "
		    "(stdio) or a url (HTTP)", name);
		return -1;
	}
	v = json_object_get(cfg, "type");
	type = json_is_string(v) ? json_string_value(v) : NULL;
	if (v != NULL && !json_is_null(v) && (type == NULL ||
	    (strcmp(type, "streamable_http") != 0 &&
	    strcmp(type, "streamableHttp") != 0 && strcmp(type, "sse") != 0))) {
		error_set(err, 400, "MCP server '%s': type must be "
		    "streamable_http, streamableHttp or sse", name);
		return -1;
	}
	return mcp_http_check(name, cfg, err);
}

/* Adding servers: a batch starts them all and ends when all have
 * answered. */

struct add_batch;

struct add_item {
	struct add_batch *batch;
	const char *name;		/* a key of the batch's configs */
	struct mcp_conn *srv;		/* a reference, once started */
	int skipped;
	int failed;
	struct error err;
};

/* One /mcp/add_servers request or the --mcp-config file; freed at its
 * end. */
struct add_batch {
	struct agent *agent;
	struct http_request *req;	/* NULL for --mcp-config */
	json_t *configs;		/* {name: cfg} */
	int overwrite;
	size_t n, pending;
	struct add_item *items;
};

static void
batch_reply(struct add_batch *b)
{
	struct evbuffer *names = evbuffer_new(), *why = evbuffer_new();
	size_t nfailed = 0;
	char *detail;

	for (size_t i = 0; i < b->n; i++) {
		if (!b->items[i].failed)
			continue;
		evbuffer_add_printf(names, "%s'%s'", nfailed > 0 ? ", " : "",
		    b->items[i].name);
		evbuffer_add_printf(why, "%s%s", nfailed > 0 ? "; " : "",
		    b->items[i].err.msg);
		nfailed++;
	}
	if (nfailed == 0) {
		http_reply(b->req, 200, "text/plain; charset=utf-8", "OK", 2);
	} else {
		evbuffer_add(names, "", 1);
		evbuffer_add(why, "", 1);
		detail = xasprintf("Failed to initialize server: [%s] (%s)",
		    (char *)evbuffer_pullup(names, -1),
		    (char *)evbuffer_pullup(why, -1));
		http_reply_error(b->req, 500, "%s", detail);
		free(detail);
	}
	evbuffer_free(names);
	evbuffer_free(why);
}

static void
batch_end(struct add_batch *b)
{
	struct mcp *mcp = b->agent->mcp;

	for (size_t i = 0; i < b->n; i++) {
		struct add_item *it = &b->items[i];
		struct mcp_conn *old;

		if (it->failed) {
			log_error("%s", it->err.msg);
			if (it->srv != NULL) {
				mcp_conn_stop(it->srv, "it failed to start");
				mcp_conn_unref(it->srv);
			}
			continue;
		}
		if (it->skipped)
			continue;
		old = registry_find(b->agent, it->name);
		if (old != NULL && !b->overwrite) {
			/* Another request added one while this one started. */
			log_info("MCP server '%s' was added meanwhile; this one "
			    "is not needed", it->name);
			mcp_conn_stop(it->srv, "a server of that name was "
			    "added meanwhile");
			mcp_conn_unref(it->srv);
			continue;
		}
		if (old != NULL) {
			TAILQ_REMOVE(&mcp->servers, old, entry);
			mcp_conn_stop(old, "it was replaced (overwrite)");
			mcp_conn_unref(old);
		}
		TAILQ_INSERT_TAIL(&mcp->servers, it->srv, entry);
	}
	if (b->req != NULL)
		batch_reply(b);
	else
		loading_done(b->agent);
	json_decref(b->configs);
	free(b->items);
	free(b);
}

static void
batch_step(struct add_batch *b)
{
	if (--b->pending == 0)
		batch_end(b);
}

static void
item_started(struct mcp_conn *srv, const struct error *err, void *arg)
{
	struct add_item *it = arg;

	(void)srv;
	if (err != NULL) {
		it->failed = 1;
		it->err = *err;
	}
	batch_step(it->batch);
}

/* configs was checked (the HTTP route) or is checked here entry by entry
 * (the file), bad entries logged and left out. Steals configs. */
static void
batch_start(struct agent *agent, struct http_request *req, json_t *configs,
    int overwrite)
{
	struct add_batch *b = xcalloc(1, sizeof *b);
	const char *name;
	json_t *cfg;

	b->agent = agent;
	b->req = req;
	b->configs = configs;
	b->overwrite = overwrite;
	b->items = xcalloc(json_object_size(configs) + 1, sizeof *b->items);
	b->pending = 1;		/* ours, until every server is under way */
	json_object_foreach(configs, name, cfg) {
		struct add_item *it = &b->items[b->n++];

		it->batch = b;
		it->name = name;
		if (req == NULL && mcp_config_check(agent, name, cfg,
		    &it->err) < 0) {
			log_error("--mcp-config: %s", it->err.msg);
			it->skipped = 1;
			continue;
		}
		if (!overwrite && registry_find(agent, name) != NULL) {
			log_info("MCP server '%s' exists; skipped", name);
			it->skipped = 1;
			continue;
		}
		b->pending++;
		it->srv = mcp_conn_start(agent, name, cfg, item_started, it,
		    &it->err);
		if (it->srv == NULL) {
			it->failed = 1;
			b->pending--;
		}
	}
	batch_step(b);
}

void
mcp_route_add_servers(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	json_t *body, *configs, *servers, *cfg;
	struct error err = { 0 };
	const char *name;
	int overwrite;

	if ((body = http_request_json(req, &err)) == NULL ||
	    jsonx_get_object(body, "server_configs", 1, &configs, &err) < 0 ||
	    jsonx_get_bool(body, "overwrite", 0, &overwrite, &err) < 0 ||
	    jsonx_get_object(configs, "mcpServers", 1, &servers, &err) < 0)
		goto fail;
	json_object_foreach(servers, name, cfg)
		if (mcp_config_check(agent, name, cfg, &err) < 0)
			goto fail;
	batch_start(agent, req, json_incref(servers), overwrite);
	json_decref(body);
	return;
fail:
	json_decref(body);
	http_reply_err(req, &err);
}

void
mcp_load_config(struct agent *agent, const char *path)
{
	json_error_t jerr;
	json_t *root, *servers;

	root = json_load_file(path, 0, &jerr);
	if (root == NULL) {
		log_error("--mcp-config %s: %s (line %d); no MCP server "
		    "started", path, jerr.text, jerr.line);
		return;
	}
	servers = json_object_get(root, "mcpServers");
	if (!json_is_object(servers)) {
		log_error("--mcp-config %s: no \"mcpServers\" object; no MCP "
		    "server started", path);
		json_decref(root);
		return;
	}
	agent->mcp->loading = 1;
	batch_start(agent, NULL, json_incref(servers), 0);
	json_decref(root);
}

/* Refreshing every live server's tool list, for list_tools and for a
 * call to a name nobody offers. */

struct refresh;
typedef void (*refresh_cb)(struct refresh *r);

/* Freed after done runs. */
struct refresh {
	struct agent *agent;
	size_t pending;
	refresh_cb done;
	void *arg;
};

static void
refresh_step(struct refresh *r)
{
	if (--r->pending > 0)
		return;
	r->done(r);
	free(r);
}

static void
refresh_one(struct mcp_conn *srv, const struct error *err, void *arg)
{
	if (err != NULL)
		log_warn("MCP server '%s': cannot list its tools (%s); its "
		    "last list stands", srv->name, err->msg);
	refresh_step(arg);
}

static void
refresh_all(struct agent *agent, refresh_cb done, void *arg)
{
	struct refresh *r = xcalloc(1, sizeof *r);
	struct mcp_conn *srv;
	struct error err;

	r->agent = agent;
	r->done = done;
	r->arg = arg;
	r->pending = 1;
	TAILQ_FOREACH(srv, &agent->mcp->servers, entry) {
		if (srv->gone)
			continue;
		r->pending++;
		if (mcp_conn_list(srv, refresh_one, r, &err) < 0)
			r->pending--;
	}
	refresh_step(r);
}

/* The MCP tools of list (an array) into a list_tools group. */
static void
list_group(json_t *group, json_t *list)
{
	size_t i;
	json_t *t;

	json_array_foreach(list, i, t) {
		const char *name = json_string_value(json_object_get(t, "name"));

		if (json_object_get(group, name) != NULL)
			continue;	/* listed twice: the first wins */
		json_object_set_new(group, name, toolset_list_entry(name,
		    json_string_value(json_object_get(t, "description")),
		    json_object_get(t, "inputSchema")));
	}
}

static void
list_answer(struct refresh *r)
{
	struct mcp_conn *srv;
	json_t *answer = json_object();

	toolset_list_native(r->agent, answer);
	TAILQ_FOREACH(srv, &r->agent->mcp->servers, entry) {
		json_t *tools = json_object(), *aliases;

		list_group(tools, srv->tools);
		aliases = mcp_aliases_list(srv->tools);
		list_group(tools, aliases);
		json_decref(aliases);
		json_object_set_new(answer, srv->name, tools);
	}
	http_reply_json(r->arg, 200, answer);
}

void
mcp_route_list_tools(struct http_request *req, void *arg)
{
	if (wait_for_loading(arg, req, mcp_route_list_tools))
		return;
	refresh_all(arg, list_answer, req);
}

/* Calls. */

/* One /mcp/call_tool request; freed when answered. */
struct call {
	struct agent *agent;
	struct http_request *req;
	json_t *body;
	const char *tool;		/* in body */
	json_t *arguments;		/* in body, or our own {} */
	double timeout;
	int refreshed;
	struct mcp_conn *srv;		/* a reference while it runs */
	int64_t id;
};

static void
call_free(struct call *c)
{
	if (c->srv != NULL)
		mcp_conn_unref(c->srv);
	json_decref(c->arguments);
	json_decref(c->body);
	free(c);
}

static void
call_done(json_t *result, const struct error *err, void *arg)
{
	struct call *c = arg;

	if (err != NULL) {
		http_reply_err(c->req, err);
	} else if (!json_is_object(result)) {
		http_reply_error(c->req, 502, "MCP server '%s' answered "
		    "tools/call with something that is not a result",
		    c->srv->name);
	} else {
		toolset_result_normalize(result);
		http_reply_json(c->req, 200, json_incref(result));
	}
	call_free(c);
}

/* Nobody will read the answer: the server may stop working on it. */
static void
call_gone(struct http_request *req, void *arg)
{
	struct call *c = arg;

	mcp_conn_cancel(c->srv, c->id);
	http_reply_error(req, 499, "client closed the connection");
	call_free(c);
}

static struct mcp_conn *
server_with_tool(struct agent *agent, const char *tool)
{
	struct mcp_conn *srv;

	TAILQ_FOREACH(srv, &agent->mcp->servers, entry)
		if (mcp_conn_has_tool(srv, tool))
			return srv;
	return NULL;
}

/* A client that left meanwhile makes the reply a no-op: the answer is
 * dropped. */
static void
native_done(struct evbuffer *answer, const struct error *err, void *arg)
{
	struct call *c = arg;

	if (err != NULL)
		http_reply_err(c->req, err);
	else
		http_reply_buffer(c->req, 200, "application/json", answer);
	call_free(c);
}

static void call_dispatch(struct call *c);

static void
call_refreshed(struct refresh *r)
{
	call_dispatch(r->arg);
}

/* A name of the reference SDK that no server offers (mcp_aliases.c):
 * the call goes to the tool it now is, if a server has that. */
static struct mcp_conn *
call_alias(struct call *c)
{
	struct mcp_conn *srv = NULL;
	const char *target;
	json_t *mapped;

	target = mcp_aliases_call(c->tool, c->arguments, &mapped);
	if (target != NULL)
		srv = server_with_tool(c->agent, target);
	if (srv == NULL) {
		json_decref(mapped);
		return NULL;
	}
	c->tool = target;
	json_decref(c->arguments);
	c->arguments = mapped;
	return srv;
}

static void
call_dispatch(struct call *c)
{
	const struct tool *native = toolset_find(c->agent, c->tool);
	struct mcp_conn *srv;
	struct error err = { 0 };
	json_t *args;

	if (native != NULL) {
		toolset_call(c->agent, native, c->arguments, native_done, c);
		return;
	}
	srv = server_with_tool(c->agent, c->tool);
	if (srv == NULL && !c->refreshed) {
		c->refreshed = 1;
		refresh_all(c->agent, call_refreshed, c);
		return;
	}
	if (srv == NULL)
		srv = call_alias(c);
	if (srv == NULL) {
		http_reply_error(c->req, 404, "Tool '%s' not found.", c->tool);
		call_free(c);
		return;
	}
	args = mcp_aliases_arguments(srv->tools, c->tool, c->arguments);
	json_decref(c->arguments);
	c->arguments = args;
	c->id = mcp_conn_call(srv, c->tool, c->arguments, c->timeout,
	    call_done, c, &err);
	if (c->id < 0) {
		http_reply_err(c->req, &err);
		call_free(c);
		return;
	}
	mcp_conn_ref(srv);
	c->srv = srv;
	http_request_on_close(c->req, call_gone, c);
}

void
mcp_route_call_tool(struct http_request *req, void *arg)
{
	struct call *c;
	struct error err = { 0 };

	if (wait_for_loading(arg, req, mcp_route_call_tool))
		return;
	c = xcalloc(1, sizeof *c);
	c->agent = arg;
	c->req = req;
	if ((c->body = http_request_json(req, &err)) == NULL ||
	    jsonx_get_string(c->body, "tool_name", 1, &c->tool, &err) < 0 ||
	    jsonx_get_object(c->body, "arguments", 0, &c->arguments,
	    &err) < 0 ||
	    jsonx_get_number(c->body, "timeout", MCP_CALL_TIMEOUT, &c->timeout,
	    &err) < 0)
		goto fail;
	if (c->tool[0] == '\0') {
		error_set(&err, 400, "tool_name is required.");
		goto fail;
	}
	if (!(c->timeout > 0) || c->timeout > 7 * 24 * 3600) {
		error_set(&err, 400, "timeout must be a number of seconds "
		    "between 0 and 604800");
		goto fail;
	}
	c->arguments = c->arguments != NULL ? json_incref(c->arguments) :
	    json_object();
	call_dispatch(c);
	return;
fail:
	c->arguments = NULL;
	call_free(c);
	http_reply_err(req, &err);
}
