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
	{ POST, "/tools/run_ipython_cell", EXACT, 0, ipython_route_run, 0 },
};

const struct http_route *
agent_routes(size_t *n)
{
	*n = sizeof routes / sizeof routes[0];
	return routes;
}
