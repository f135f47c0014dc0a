/* GET /healthz: the liveness answer the supervisor waits for. A sandbox
 * with a desktop is healthy while its display answers. */
#include "agent.h"
#include "desktop.h"

void
health_route(struct http_request *req, void *arg)
{
	struct agent *agent = arg;

	if (agent->desktop != NULL && !desktop_ready(agent->desktop)) {
		http_reply_error(req, 503, "the desktop's display is not ready");
		return;
	}
	http_reply(req, 200, "text/plain; charset=utf-8", "OK", 2);
}
