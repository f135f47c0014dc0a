/* GET /healthz: the liveness answer the supervisor waits for. */
#include "agent.h"

void
health_route(struct http_request *req, void *arg)
{
	(void)arg;
	http_reply(req, 200, "text/plain; charset=utf-8", "OK", 2);
}
