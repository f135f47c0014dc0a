/*
 * GET /vnc/{path}: the web viewer's files (see desktop_web.h). The page,
 * vnc_relay.html, is carried in the binary (agent/embed/), so that it
 * always speaks to this agent's routes; noVNC's files come from the
 * image's directory, opened beneath it (path.h), so no name leaves it.
 */
#include "agent.h"
#include "desktop.h"
#include "desktop_web.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "xmalloc.h"

/* No file of noVNC comes near this; a larger one is not served. */
#define DESKTOP_WEB_FILE_MAX (8 * 1024 * 1024)

extern const char _binary_vnc_relay_html_start[], _binary_vnc_relay_html_end[];

/* The page runs noVNC on the origin of whoever serves it (sandboxd's, as
 * a rule): no other site may frame it and click into the desktop, and the
 * token in its address goes in no Referer. */
static const char page_policy[] = "default-src 'self'; "
    "script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'";

int
desktop_web_authorize(struct agent *agent, struct http_request *req,
    int cookie)
{
	const char *h = http_request_header(req, "Authorization");
	const char *password = http_request_query(req, "password");
	char *from_cookie = NULL;
	int ok = 0, offered = 0;

	if (agent->token == NULL)
		return 1;
	if (h != NULL && strncasecmp(h, "Bearer ", 7) == 0) {
		h += 7;
		h += strspn(h, " ");
		offered = 1;
		ok = http_token_equal(h, agent->token);
	}
	if (!ok && password != NULL) {
		offered = 1;
		ok = http_token_equal(password, agent->token);
	}
	if (!ok && cookie && (from_cookie = http_cookie_value(
	    http_request_header(req, "Cookie"), DESKTOP_WEB_COOKIE)) != NULL) {
		offered = 1;
		ok = http_token_equal(from_cookie, agent->token);
		free(from_cookie);
	}
	if (!ok)
		http_reply_error(req, 403, "%s", offered ? "Invalid token" :
		    "Not authenticated");
	return ok;
}

static const char *
content_type(const char *name)
{
	static const struct { const char *ext, *type; } types[] = {
		{ ".js", "text/javascript; charset=utf-8" },
		{ ".mjs", "text/javascript; charset=utf-8" },
		{ ".html", "text/html; charset=utf-8" },
		{ ".css", "text/css; charset=utf-8" },
		{ ".json", "application/json" },
		{ ".svg", "image/svg+xml" },
		{ ".png", "image/png" },
		{ ".ico", "image/x-icon" },
		{ ".wasm", "application/wasm" },
		{ ".txt", "text/plain; charset=utf-8" },
		{ ".md", "text/plain; charset=utf-8" },
	};
	const char *dot = strrchr(name, '.');

	for (size_t i = 0; dot != NULL && i < sizeof types / sizeof types[0];
	    i++) {
		if (strcasecmp(dot, types[i].ext) == 0)
			return types[i].type;
	}
	return "application/octet-stream";
}

static void
serve_page(struct agent *agent, struct http_request *req)
{
	const char *password = http_request_query(req, "password");

	/* For the files the page loads next, which carry no query: the
	 * cookie's path is the page's directory, wherever it is served. */
	if (agent->token != NULL && password != NULL &&
	    http_token_equal(password, agent->token)) {
		char *cookie = xasprintf(DESKTOP_WEB_COOKIE "=%s; HttpOnly; "
		    "SameSite=Strict", agent->token);

		http_reply_add_header(req, "Set-Cookie", cookie);
		free(cookie);
	}
	http_reply_add_header(req, "Content-Security-Policy", page_policy);
	http_reply_add_header(req, "Referrer-Policy", "no-referrer");
	http_reply_add_header(req, "Cache-Control", "no-store");
	http_reply_add_header(req, "X-Content-Type-Options", "nosniff");
	http_reply(req, 200, "text/html; charset=utf-8",
	    _binary_vnc_relay_html_start, (size_t)(_binary_vnc_relay_html_end -
	    _binary_vnc_relay_html_start));
}

static void
serve_file(struct http_request *req, const char *dir, const char *name)
{
	struct workspace root;
	struct error err = { 0 };
	struct evbuffer *buf;
	struct stat st;
	char *rel = NULL;
	int fd;

	if (workspace_open(&root, dir, &err) < 0) {
		error_set(&err, 404, "the web viewer's files are not in this "
		    "image");
		http_reply_err(req, &err);
		return;
	}
	fd = -1;
	if (path_normalize(&root, name, &rel, &err) == 0 && rel[0] != '\0')
		fd = path_open(&root, rel, O_RDONLY | O_NONBLOCK, 0, &err);
	workspace_close(&root);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > DESKTOP_WEB_FILE_MAX) {
		if (fd >= 0)
			close(fd);
		http_reply_error(req, 404, "no such file of the web viewer: %s",
		    name);
		free(rel);
		return;
	}
	buf = evbuffer_new();
	/* Takes fd. */
	if (evbuffer_add_file(buf, fd, 0, st.st_size) < 0) {
		evbuffer_free(buf);
		http_reply_error(req, 500, "cannot read %s", rel);
		free(rel);
		return;
	}
	http_reply_add_header(req, "X-Content-Type-Options", "nosniff");
	http_reply_buffer(req, 200, content_type(rel), buf);
	evbuffer_free(buf);
	free(rel);
}

void
desktop_web_route(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	const char *name = http_request_path(req) + strlen("/vnc/");

	if (!desktop_web_authorize(agent, req, 1))
		return;
	if (agent->desktop == NULL) {
		http_reply_error(req, 404, "this sandbox has no desktop");
		return;
	}
	if (strcmp(name, "vnc_relay.html") == 0) {
		serve_page(agent, req);
		return;
	}
	if (desktop_novnc(agent->desktop) == NULL) {
		http_reply_error(req, 404, "this sandbox's desktop has no web "
		    "viewer (no \"novnc\" in its desktop file)");
		return;
	}
	serve_file(req, desktop_novnc(agent->desktop), name);
}
