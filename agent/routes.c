/*
 * The agent's route table. Every route is also served under /fastapi (the
 * server's alias prefix), as clients of the reference expect.
 */
#include "agent.h"

#define POST HTTP_METHOD_POST
#define GET (HTTP_METHOD_GET | HTTP_METHOD_HEAD)
#define EXACT HTTP_MATCH_EXACT

static const struct http_route routes[] = {
	{ GET, "/healthz", EXACT, 0, health_route, 0 },
	{ POST, "/tools/run_shell_command", EXACT, 0, shell_route_run, 0 },
	{ POST, "/mcp/add_servers", EXACT, 0, mcp_route_add_servers, 0 },
	{ GET, "/mcp/list_tools", EXACT, 0, mcp_route_list_tools, 0 },
	{ POST, "/mcp/call_tool", EXACT, 0, mcp_route_call_tool, 0 },
};

const struct http_route *
agent_routes(size_t *n)
{
	*n = sizeof routes / sizeof routes[0];
	return routes;
}
