/* GET /healthz: the liveness answer the supervisor waits for. A sandbox
 * with a desktop is healthy while its display answers and shows what its
 * programs drew. */
#include "agent.h"
#include "desktop.h"

void
health_route(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	const char *why;

	if (agent->desktop != NULL &&
	    (why = desktop_unhealthy(agent->desktop)) != NULL) {
		http_reply_error(req, 503, "%s", why);
		return;
	}
	http_reply(req, 200, "text/plain; charset=utf-8", "OK", 2);
}
