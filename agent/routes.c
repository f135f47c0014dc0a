/*
 * The agent's route table. Every route is also served under /fastapi (the
 * server's alias prefix), as clients of the reference expect.
 */
#include "agent.h"
#include "desktop_web.h"

#define POST HTTP_METHOD_POST
#define GET (HTTP_METHOD_GET | HTTP_METHOD_HEAD)
#define PUT HTTP_METHOD_PUT
#define DELETE HTTP_METHOD_DELETE
#define EXACT HTTP_MATCH_EXACT
#define STREAM HTTP_ROUTE_STREAM_BODY

static const struct http_route routes[] = {
	{ GET, "/healthz", EXACT, 0, health_route, 0 },
	{ POST, "/tools/run_shell_command", EXACT, 0, shell_route_run, 0 },
	{ POST, "/tools/run_ipython_cell", EXACT, 0, ipython_route_run, 0 },
	{ POST, "/watcher/commit_changes", EXACT, 0, git_route_commit, 0 },
	{ POST, "/watcher/generate_diff", EXACT, 0, git_route_diff, 0 },
	{ GET, "/watcher/git_logs", EXACT, 0, git_route_logs, 0 },
	{ GET, "/workspace/file", EXACT, 0, files_route_get, 0 },
	{ PUT, "/workspace/file", EXACT, STREAM, files_route_put, 0 },
	{ POST, "/workspace/files:batch", EXACT, STREAM, files_batch_route, 0 },
	{ GET, "/workspace/list", EXACT, 0, entries_route_list, 0 },
	{ GET, "/workspace/exists", EXACT, 0, entries_route_exists, 0 },
	{ DELETE, "/workspace/entry", EXACT, 0, entries_route_delete, 0 },
	{ POST, "/workspace/move", EXACT, 0, entries_route_move, 0 },
	{ POST, "/workspace/mkdir", EXACT, 0, entries_route_mkdir, 0 },
	{ POST, "/mcp/add_servers", EXACT, 0, mcp_route_add_servers, 0 },
	{ GET, "/mcp/list_tools", EXACT, 0, mcp_route_list_tools, 0 },
	{ POST, "/mcp/call_tool", EXACT, 0, mcp_route_call_tool, 0 },
	/* The desktop's web viewer: its own token check (desktop_web.h). */
	{ GET, "/vnc/", HTTP_MATCH_PREFIX, HTTP_ROUTE_NO_AUTH,
	    desktop_web_route, 0 },
	{ HTTP_METHOD_GET, "/websockify", EXACT, HTTP_ROUTE_NO_AUTH,
	    vnc_relay_route, 0 },
};

const struct http_route *
agent_routes(size_t *n)
{
	*n = sizeof routes / sizeof routes[0];
	return routes;
}
