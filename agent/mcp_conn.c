/*
 * The client side of one MCP server connection: the server started over
 * its transport, the initialize handshake (protocol version agreed,
 * notifications/initialized sent), its tool list fetched page by page
 * (nextCursor) and kept, then tools/call on demand. The list is fetched
 * again when the server says it changed, and whenever /mcp/list_tools
 * asks. A server that dies fails every call in flight and every later one
 * with the reason, until it is replaced.
 */
#include "agent.h"
#include "mcp.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "xmalloc.h"

/* Newest first: we offer the first; the server may answer with another
 * one it prefers, which is fine if it is in this list. The message shapes
 * we use (initialize, tools/list, tools/call) are the same in all of them. */
static const char *const protocol_versions[] = {
	"2025-06-18", "2025-11-25", "2025-03-26", "2024-11-05",
};

/* A stuck cursor must not page forever. */
#define MCP_LIST_MAX_PAGES 1000

static void server_send(void *arg, json_t *msg);
static void server_notify(void *arg, const char *method, json_t *params);

static const struct mcp_jsonrpc_peer server_peer = {
	.send = server_send,
	.notify = server_notify,
};

void
mcp_conn_ref(struct mcp_conn *srv)
{
	srv->refs++;
}

void
mcp_conn_unref(struct mcp_conn *srv)
{
	if (--srv->refs > 0)
		return;
	if (srv->transport != NULL) {
		srv->transport->ops->stop(srv->transport);
		srv->transport->ops->free(srv->transport);
	}
	mcp_jsonrpc_free(srv->rpc);
	json_decref(srv->tools);
	free(srv->protocol_version);
	free(srv->name);
	free(srv);
}

struct event_base *
mcp_conn_base(struct mcp_conn *srv)
{
	return srv->agent->base;
}

static void
server_send(void *arg, json_t *msg)
{
	struct mcp_conn *srv = arg;

	if (!srv->gone)
		srv->transport->ops->send(srv->transport, msg);
}

void
mcp_conn_receive(struct mcp_conn *srv, json_t *msg)
{
	mcp_jsonrpc_receive(srv->rpc, msg);
}

/* Ends the server: the transport stops, pending calls get err. */
static void
server_end(struct mcp_conn *srv, const struct error *err)
{
	if (srv->gone)
		return;
	srv->gone = 1;
	mcp_conn_ref(srv);
	srv->transport->ops->stop(srv->transport);
	mcp_jsonrpc_close(srv->rpc, err);
	mcp_conn_unref(srv);
}

void
mcp_conn_lost(struct mcp_conn *srv, const struct error *why)
{
	struct error err;

	if (srv->gone)
		return;
	log_warn("MCP server '%s': %s", srv->name, why->msg);
	if (srv->ready)
		error_set(&err, 502, "MCP server '%s' is not running: %s (add "
		    "it again with overwrite to restart it)", srv->name,
		    why->msg);
	else
		error_set(&err, 502, "MCP server '%s' failed to start: %s",
		    srv->name, why->msg);
	server_end(srv, &err);
}

void
mcp_conn_stop(struct mcp_conn *srv, const char *why)
{
	struct error err;

	error_set(&err, 502, "MCP server '%s' was stopped: %s", srv->name, why);
	server_end(srv, &err);
}

int
mcp_conn_has_tool(struct mcp_conn *srv, const char *tool)
{
	size_t i;
	json_t *t;

	json_array_foreach(srv->tools, i, t) {
		const char *name = json_string_value(json_object_get(t, "name"));

		if (name != NULL && strcmp(name, tool) == 0)
			return 1;
	}
	return 0;
}

/* Listing: one tools/list per page until there is no nextCursor. */

/* Freed when the listing ends. */
struct listing {
	struct mcp_conn *srv;		/* a reference */
	json_t *tools;
	int pages;
	mcp_conn_cb done;
	void *arg;
};

static void list_page_done(json_t *result, const struct error *err,
    void *arg);

static void
listing_end(struct listing *l, const struct error *err)
{
	struct mcp_conn *srv = l->srv;

	if (err == NULL) {
		json_decref(srv->tools);
		srv->tools = json_incref(l->tools);
	}
	l->done(srv, err, l->arg);
	json_decref(l->tools);
	free(l);
	mcp_conn_unref(srv);
}

static int
list_page(struct listing *l, const char *cursor, struct error *err)
{
	json_t *params = NULL;

	if (cursor != NULL)
		params = json_pack("{s:s}", "cursor", cursor);
	l->pages++;
	return mcp_jsonrpc_call(l->srv->rpc, "tools/list", params,
	    l->srv->start_timeout, list_page_done, l, err) < 0 ? -1 : 0;
}

static void
list_page_done(json_t *result, const struct error *err, void *arg)
{
	struct listing *l = arg;
	json_t *tools, *tool;
	const char *cursor;
	struct error e;
	size_t i;

	if (err != NULL) {
		listing_end(l, err);
		return;
	}
	tools = json_object_get(result, "tools");
	if (!json_is_array(tools)) {
		error_set(&e, 502, "MCP server '%s' answered tools/list without "
		    "a list of tools", l->srv->name);
		listing_end(l, &e);
		return;
	}
	json_array_foreach(tools, i, tool) {
		if (json_is_string(json_object_get(tool, "name")))
			json_array_append(l->tools, tool);
		else
			log_warn("MCP server '%s' listed a tool without a "
			    "name; ignored", l->srv->name);
	}
	cursor = json_string_value(json_object_get(result, "nextCursor"));
	if (cursor == NULL || cursor[0] == '\0') {
		listing_end(l, NULL);
		return;
	}
	if (l->pages >= MCP_LIST_MAX_PAGES) {
		error_set(&e, 502, "MCP server '%s' listed more than %d pages of "
		    "tools", l->srv->name, MCP_LIST_MAX_PAGES);
		listing_end(l, &e);
		return;
	}
	if (list_page(l, cursor, &e) < 0)
		listing_end(l, &e);
}

int
mcp_conn_list(struct mcp_conn *srv, mcp_conn_cb done, void *arg,
    struct error *err)
{
	struct listing *l = xcalloc(1, sizeof *l);

	l->srv = srv;
	l->tools = json_array();
	l->done = done;
	l->arg = arg;
	if (list_page(l, NULL, err) < 0) {
		json_decref(l->tools);
		free(l);
		return -1;
	}
	mcp_conn_ref(srv);
	return 0;
}

static void
refresh_done(struct mcp_conn *srv, const struct error *err, void *arg)
{
	(void)arg;
	srv->refreshing = 0;
	if (err != NULL)
		log_warn("MCP server '%s': cannot refresh its tool list: %s",
		    srv->name, err->msg);
	else
		log_info("MCP server '%s' now offers %zu tools", srv->name,
		    json_array_size(srv->tools));
}

static void
server_notify(void *arg, const char *method, json_t *params)
{
	struct mcp_conn *srv = arg;
	struct error err;

	if (strcmp(method, "notifications/tools/list_changed") == 0) {
		if (!srv->ready || srv->refreshing)
			return;
		srv->refreshing = 1;
		if (mcp_conn_list(srv, refresh_done, NULL, &err) < 0)
			srv->refreshing = 0;
	} else if (strcmp(method, "notifications/message") == 0 &&
	    log_enabled(LOG_DEBUG)) {
		char *text = json_dumps(params, JSON_COMPACT);

		log_debug("MCP server '%s' logs: %s", srv->name,
		    text != NULL ? text : "?");
		free(text);
	} else {
		log_debug("MCP server '%s' sent %s; ignored", srv->name, method);
	}
}

/* Start-up: initialize, notifications/initialized, tools/list. */

static void
start_end(struct mcp_conn *srv, const struct error *err)
{
	if (err == NULL) {
		srv->ready = 1;
		log_info("MCP server '%s' is ready (protocol %s, %zu tools)",
		    srv->name, srv->protocol_version,
		    json_array_size(srv->tools));
	}
	srv->started(srv, err, srv->started_arg);
	mcp_conn_unref(srv);
}

static void
start_listed(struct mcp_conn *srv, const struct error *err, void *arg)
{
	(void)arg;
	start_end(srv, err);
}

static int
version_supported(const char *v)
{
	for (size_t i = 0; i < sizeof protocol_versions /
	    sizeof protocol_versions[0]; i++)
		if (strcmp(v, protocol_versions[i]) == 0)
			return 1;
	return 0;
}

static const char *
text_or(json_t *s, const char *fallback)
{
	return json_is_string(s) ? json_string_value(s) : fallback;
}

static void
initialized(json_t *result, const struct error *err, void *arg)
{
	struct mcp_conn *srv = arg;
	const char *version;
	json_t *caps, *info;
	struct error e;

	if (err != NULL) {
		start_end(srv, err);
		return;
	}
	version = json_string_value(json_object_get(result, "protocolVersion"));
	if (version == NULL || !version_supported(version)) {
		error_set(&e, 502, "MCP server '%s' speaks protocol version %s, "
		    "which this agent does not", srv->name,
		    version != NULL ? version : "(none given)");
		start_end(srv, &e);
		return;
	}
	srv->protocol_version = xstrdup(version);
	info = json_object_get(result, "serverInfo");
	log_info("MCP server '%s' is %s %s", srv->name,
	    text_or(json_object_get(info, "name"), "(unnamed)"),
	    text_or(json_object_get(info, "version"), ""));
	mcp_jsonrpc_notify(srv->rpc, "notifications/initialized", NULL);
	caps = json_object_get(result, "capabilities");
	if (json_object_get(caps, "tools") == NULL) {
		start_end(srv, NULL);	/* a server of prompts or resources */
		return;
	}
	if (mcp_conn_list(srv, start_listed, NULL, &e) < 0)
		start_end(srv, &e);
}

struct mcp_conn *
mcp_conn_start(struct agent *agent, const char *name, json_t *cfg,
    mcp_conn_cb started, void *arg, struct error *err)
{
	struct mcp_conn *srv = xcalloc(1, sizeof *srv);
	json_t *params, *timeout = json_object_get(cfg, "timeout");

	srv->name = xstrdup(name);
	srv->agent = agent;
	srv->refs = 1;
	srv->tools = json_array();
	srv->start_timeout = json_is_number(timeout) ?
	    json_number_value(timeout) : MCP_START_TIMEOUT;
	srv->started = started;
	srv->started_arg = arg;
	srv->rpc = mcp_jsonrpc_new(agent->base, name, &server_peer, srv);
	srv->transport = mcp_config_is_http(cfg) ?
	    mcp_http_start(srv, cfg, err) : mcp_stdio_start(srv, cfg, err);
	if (srv->transport == NULL) {
		error_prefix(err, "MCP server '%s'", name);
		srv->gone = 1;
		mcp_conn_unref(srv);
		return NULL;
	}
	params = json_pack("{s:s, s:{}, s:{s:s, s:s}}",
	    "protocolVersion", protocol_versions[0],
	    "capabilities",
	    "clientInfo", "name", "sandbox-agent", "version", VERSION);
	mcp_conn_ref(srv);	/* held by the start-up sequence */
	/* Only a closed connection refuses a call, and this one is new. */
	mcp_jsonrpc_call(srv->rpc, "initialize", params, srv->start_timeout,
	    initialized, srv, err);
	return srv;
}

int64_t
mcp_conn_call(struct mcp_conn *srv, const char *tool, json_t *arguments,
    double timeout, mcp_jsonrpc_done_cb done, void *arg, struct error *err)
{
	json_t *params = json_pack("{s:s, s:O}", "name", tool,
	    "arguments", arguments);

	return mcp_jsonrpc_call(srv->rpc, "tools/call", params, timeout, done, arg,
	    err);
}

void
mcp_conn_cancel(struct mcp_conn *srv, int64_t id)
{
	mcp_jsonrpc_cancel(srv->rpc, id, "the client went away");
}
