/*
 * The agent's route table. Every route is also served under /fastapi (the
 * server's alias prefix), as clients of the reference expect.
 */
#include "agent.h"
#include "desktop_web.h"
#include "envd.h"

#define POST HTTP_METHOD_POST
#define GET (HTTP_METHOD_GET | HTTP_METHOD_HEAD)
#define PUT HTTP_METHOD_PUT
#define DELETE HTTP_METHOD_DELETE
#define EXACT HTTP_MATCH_EXACT
#define PREFIX HTTP_MATCH_PREFIX
#define STREAM HTTP_ROUTE_STREAM_BODY

/* Body limits: routes that carry a command, code or a file's content take
 * up to --max-body (0 here: the server's limit, 32 MiB by default); the
 * others name paths and options, for which 1 MiB is plenty. Streamed
 * routes (uploads) have their own limit, --max-upload. */
#define SMALL (1024 * 1024)
#define LARGE 0

static const struct http_route routes[] = {
	{ GET, "/healthz", EXACT, 0, health_route, SMALL },
	{ POST, "/tools/run_shell_command", EXACT, 0, shell_route_run, LARGE },
	{ POST, "/tools/run_ipython_cell", EXACT, 0, kernel_ipython_route_run, LARGE },
	{ POST, "/watcher/commit_changes", EXACT, 0, gitops_route_commit, SMALL },
	{ POST, "/watcher/generate_diff", EXACT, 0, gitops_route_diff, SMALL },
	{ GET, "/watcher/git_logs", EXACT, 0, gitops_route_logs, SMALL },
	{ GET, "/workspace/file", EXACT, 0, files_route_get, SMALL },
	{ PUT, "/workspace/file", EXACT, STREAM, files_route_put, 0 },
	{ POST, "/workspace/files:batch", EXACT, STREAM, files_batch_route, 0 },
	{ GET, "/workspace/list", EXACT, 0, files_entries_route_list, SMALL },
	{ GET, "/workspace/exists", EXACT, 0, files_entries_route_exists, SMALL },
	{ DELETE, "/workspace/entry", EXACT, 0, files_entries_route_delete, SMALL },
	{ POST, "/workspace/move", EXACT, 0, files_entries_route_move, SMALL },
	{ POST, "/workspace/mkdir", EXACT, 0, files_entries_route_mkdir, SMALL },
	{ POST, "/mcp/add_servers", EXACT, 0, mcp_route_add_servers, SMALL },
	{ GET, "/mcp/list_tools", EXACT, 0, mcp_route_list_tools, SMALL },
	{ POST, "/mcp/call_tool", EXACT, 0, mcp_route_call_tool, LARGE },
	/* envd, E2B's in-sandbox API (envd.h): Connect RPCs read their
	 * own bodies, bounded by ENVD_MAX_MESSAGE. */
	{ POST, "/envd/", HTTP_MATCH_PREFIX, STREAM, envd_route_rpc, 0 },
	{ GET, "/envd/files", EXACT, 0, envd_files_route_get, SMALL },
	{ POST, "/envd/files", EXACT, STREAM, envd_files_route_post, 0 },
	{ GET, "/envd/health", EXACT, 0, envd_route_health, SMALL },
	{ GET, "/envd/envs", EXACT, 0, envd_route_envs, SMALL },
	{ POST, "/envd/init", EXACT, 0, envd_route_init, SMALL },
	{ GET, "/envd/metrics", EXACT, 0, envd_route_metrics, SMALL },
	/* The desktop's web viewer: its own token check (desktop_web.h). */
	{ GET, "/vnc/", PREFIX, HTTP_ROUTE_NO_AUTH,
	    desktop_web_route, SMALL },
	{ HTTP_METHOD_GET, "/websockify", EXACT, HTTP_ROUTE_NO_AUTH,
	    vnc_relay_route, SMALL },
	/* E2B's code interpreter (its port 49999, mapped here by sandboxd). */
	{ GET, "/ci/health", EXACT, 0, ci_route_health, SMALL },
	{ POST, "/ci/execute", EXACT, 0, ci_route_execute, LARGE },
	{ GET, "/ci/contexts", EXACT, 0, ci_route_contexts_list, SMALL },
	{ POST, "/ci/contexts", EXACT, 0, ci_route_contexts_create, SMALL },
	{ POST, "/ci/contexts/", PREFIX, 0, ci_route_context_restart, SMALL },
	{ DELETE, "/ci/contexts/", PREFIX, 0, ci_route_context_remove, SMALL },
};

const struct http_route *
agent_routes(size_t *n)
{
	*n = sizeof routes / sizeof routes[0];
	return routes;
}
