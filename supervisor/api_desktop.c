/*
 * Desktops in a web browser (spec section 2, "Desktop"):
 *   GET /desktop/{id}/{path}   the sandbox's /{path} (its noVNC files and
 *                              vnc/vnc_relay.html), streamed by the proxy
 *   GET /desktop/{id}          upgraded to a WebSocket: the sandbox's
 *                              /websockify, relayed (desktop_relay.c)
 * so that desktop_url, {base_url}/desktop/{id}/vnc/vnc_relay.html?password=
 * {runtime_token}, opens a live desktop on sandboxd's own port.
 *
 * Auth: a browser sends no Authorization header with a page or a
 * WebSocket, so the sandbox's own token is taken as the "password" query
 * parameter, and for the page's files (not the WebSocket, which another
 * site's page could open with it) as the cookie the page sets;
 * sandboxd's BEARER_TOKEN, or the sandbox's token, as a bearer header
 * also do. Without one: 401 and nothing of the sandbox, not even whether
 * it exists.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "xmalloc.h"

/* The agent's cookie for the page's files (agent/desktop_web.h). */
#define DESKTOP_COOKIE "sandbox_vnc"

static int
authorized(struct http_request *req, const struct sandbox *sb, int cookie)
{
	const char *h = http_request_header(req, "Authorization");
	const char *password = http_request_query(req, "password");
	char *c;
	int ok = 0;

	if (h != NULL && strncasecmp(h, "Bearer ", 7) == 0) {
		h += 7;
		h += strspn(h, " ");
		if (sd.cfg.bearer_token != NULL &&
		    http_token_equal(h, sd.cfg.bearer_token))
			return 1;
		if (sb != NULL && http_token_equal(h, sb->token))
			return 1;
	}
	if (sb == NULL)
		return 0;
	if (password != NULL && http_token_equal(password, sb->token))
		return 1;
	if (cookie && (c = http_cookie_value(http_request_header(req, "Cookie"),
	    DESKTOP_COOKIE)) != NULL) {
		ok = http_token_equal(c, sb->token);
		free(c);
	}
	return ok;
}

/* GET /desktop/{id}[/{path}] */
static void
route_desktop(struct http_request *req, void *arg)
{
	const char *raw = http_request_raw_target(req);
	struct sandbox *sb;
	char *identity;
	size_t idlen = 0;

	(void)arg;
	/* Matched on the decoded path; the raw one, passed on as sent,
	 * must spell the prefix plainly too. */
	if (strncmp(raw, "/desktop/", 9) == 0) {
		raw += 9;
		idlen = strcspn(raw, "/?");
	}
	if (idlen == 0 || http_percent_decode(raw, idlen, 0, &identity) < 0) {
		http_reply_error(req, 404, "no sandbox named in %s",
		    http_request_path(req));
		return;
	}
	sb = sandbox_find(identity);
	raw += idlen;
	if (!authorized(req, sb, *raw == '/')) {
		free(identity);
		http_reply_error(req, 401, "Authentication required");
		return;
	}
	if (sb == NULL) {
		http_reply_error(req, 404, "no sandbox %s", identity);
		free(identity);
		return;
	}
	free(identity);
	if (*raw == '/')
		proxy_forward(req, sb, raw);
	else
		desktop_relay_start(req, sb, http_request_raw_query(req));
}

static const struct http_route routes[] = {
	{ HTTP_METHOD_GET | HTTP_METHOD_HEAD, "/desktop/", HTTP_MATCH_PREFIX,
	    HTTP_ROUTE_NO_AUTH, route_desktop, 0 },
};

const struct http_route *
api_desktop_routes(size_t *n)
{
	*n = sizeof routes / sizeof routes[0];
	return routes;
}
