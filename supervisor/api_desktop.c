/*
 * Desktops in a web browser (spec section 2, "Desktop"):
 *   GET /desktop/{id}/vnc/{path}  the sandbox's /vnc/{path} (its noVNC
 *                                 files and vnc_relay.html), streamed by
 *                                 the proxy; no other path of the agent
 *   GET /desktop/{id}             upgraded to a WebSocket: the sandbox's
 *                                 /websockify, relayed (desktop_relay.c)
 * so that desktop_url, {base_url}/desktop/{id}/vnc/vnc_relay.html?password=
 * {desktop token}, opens a live desktop on sandboxd's own port.
 *
 * Auth: a browser sends no Authorization header with a page or a
 * WebSocket, so a desktop token (desktop_token.c: view-only or
 * interactive, never the sandbox's own token) is taken as the "password"
 * query parameter, and for the page's files (not the WebSocket, which
 * another site's page could open with it) as the cookie the page sets.
 * sandboxd's BEARER_TOKEN, or the sandbox's token, as a bearer header
 * also do, interactive. "view_only=true" in the query makes any of them
 * view-only. Without one: 401 and nothing of the sandbox, not even
 * whether it exists.
 *
 * The SDK builds its desktop_url from the sandbox's token (GUIMixin:
 * "?password=" + runtime_token). That link still opens the page, once: it
 * is answered with a redirect to the same page with the interactive
 * desktop token, so the sandbox's token leaves the address bar before
 * the page loads anything, and is taken nowhere else in a query.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "xmalloc.h"

/* The page's cookie: a desktop token, for the page's directory. */
#define DESKTOP_COOKIE "sandbox_vnc"
#define DESKTOP_PAGE "vnc/vnc_relay.html"

static int
bearer_ok(struct http_request *req, const struct sandbox *sb)
{
	const char *h = http_request_header(req, "Authorization");

	if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
		return 0;
	h += 7;
	h += strspn(h, " ");
	if (sd.cfg.bearer_token != NULL &&
	    http_token_equal(h, sd.cfg.bearer_token))
		return 1;
	return sb != NULL && http_token_equal(h, sb->token);
}

/* The viewer asks to watch only (noVNC's own parameter). */
static int
wants_view_only(struct http_request *req)
{
	const char *v = http_request_query(req, "view_only");

	return v != NULL && strcmp(v, "true") == 0;
}

/* What req may do with sb's desktop; cookie: the page's cookie counts. */
static enum desktop_access
authorize(struct http_request *req, const struct sandbox *sb, int cookie)
{
	enum desktop_access access = DESKTOP_DENIED;
	char *c;

	if (bearer_ok(req, sb))
		access = DESKTOP_INTERACTIVE;
	else if (sb == NULL)
		return DESKTOP_DENIED;
	if (access == DESKTOP_DENIED)
		access = desktop_token_check(sb, http_request_query(req,
		    "password"));
	if (access == DESKTOP_DENIED && cookie && (c = http_cookie_value(
	    http_request_header(req, "Cookie"), DESKTOP_COOKIE)) != NULL) {
		access = desktop_token_check(sb, c);
		free(c);
	}
	if (access != DESKTOP_DENIED && wants_view_only(req))
		access = DESKTOP_VIEW;
	return access;
}

/* raw (after the sandbox's name) is the page's path. */
static int
is_page(const char *raw)
{
	size_t len = strcspn(raw, "?");

	return len == 1 + strlen(DESKTOP_PAGE) && raw[0] == '/' &&
	    strncmp(raw + 1, DESKTOP_PAGE, len - 1) == 0;
}

/* The SDK's link, with the sandbox's token: to the page with the desktop
 * token in its place (relative: a reverse proxy's prefix stays). */
static int
redirect_sdk_link(struct http_request *req, const struct sandbox *sb)
{
	const char *password = http_request_query(req, "password");
	int view = wants_view_only(req);
	char token[TOKEN_HEX_LEN];
	char *location;

	if (sb == NULL || password == NULL ||
	    !http_token_equal(password, sb->token))
		return 0;
	desktop_token(sb, view ? DESKTOP_VIEW : DESKTOP_INTERACTIVE, token);
	location = xasprintf("vnc_relay.html?password=%s%s", token,
	    view ? "&view_only=true" : "");
	http_reply_add_header(req, "Location", location);
	http_reply_add_header(req, "Referrer-Policy", "no-referrer");
	http_reply_add_header(req, "Cache-Control", "no-store");
	http_reply_empty(req, 303);
	free(location);
	return 1;
}

/* GET /desktop/{id}/vnc/{path}: sb's file, the page with its cookie. */
static void
serve_file(struct http_request *req, struct sandbox *sb, const char *raw)
{
	size_t len = strcspn(raw, "?");
	const char *password = http_request_query(req, "password");
	char *target;

	if (strncmp(raw, "/vnc/", 5) != 0) {
		http_reply_error(req, 404, "a desktop serves only its web "
		    "viewer, under /desktop/{id}/vnc/");
		return;
	}
	/* The page's files need no query; the token in it stays here. */
	target = xstrndup(raw, len);
	if (is_page(raw) && desktop_token_check(sb, password) !=
	    DESKTOP_DENIED) {
		/* No Path: the browser scopes it to the page's own
		 * directory, .../desktop/{id}/vnc, under whatever prefix a
		 * reverse proxy adds. */
		char *cookie = xasprintf(DESKTOP_COOKIE "=%s; HttpOnly; "
		    "SameSite=Strict", password);

		http_reply_add_header(req, "Set-Cookie", cookie);
		free(cookie);
	}
	proxy_forward(req, sb, target);
	free(target);
}

/* GET /desktop/{id}[/vnc/{path}] */
static void
route_desktop(struct http_request *req, void *arg)
{
	enum desktop_access access;
	struct sandbox *sb;
	const char *raw;
	char *identity;

	(void)arg;
	sb = sandbox_from_path(req, "/desktop/", &identity, &raw);
	if (identity == NULL) {
		/* Before auth: nothing of the client's in the answer. */
		http_reply_error(req, 404, "no sandbox named in the path");
		return;
	}
	access = authorize(req, sb, *raw == '/');
	if (access == DESKTOP_DENIED) {
		free(identity);
		if (!is_page(raw) || !redirect_sdk_link(req, sb))
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
		serve_file(req, sb, raw);
	else
		desktop_relay_start(req, sb, access);
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
