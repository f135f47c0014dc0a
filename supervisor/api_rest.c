/*
 * Our REST routes for direct HTTP use:
 *   POST   /v1/sandboxes               create (from the pool when it can)
 *   GET    /v1/sandboxes               list (filtered, paged)
 *   GET    /v1/sandboxes/{id}          the container model
 *   DELETE /v1/sandboxes/{id}          release
 *   POST   /v1/sandboxes/{id}/pause    freeze it (state "paused")
 *   POST   /v1/sandboxes/{id}/resume   thaw it
 *   GET    /v1/sandboxes/{id}/stats    CPU and memory, one sample
 *   PUT    /v1/sandboxes/{id}/network  its egress lists, replaced live
 *   ANY    /v1/sandboxes/{id}/agent/{path}   proxy to the agent
 *   POST   /v1/sessions/connect        SandboxService.connect
 *   POST   /v1/sessions/release        SandboxService.release
 *   GET    /metrics                    Prometheus text
 * Answers are plain JSON objects; errors {"detail": ...} with their status
 * (503 when the instance limit or the port range is exhausted).
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "egress.h"
#include "jsonx.h"
#include "log.h"
#include "xmalloc.h"

/* A connect waiting for its creates; freed when it answers. */
struct connect {
	struct http_request *req;
	char *session;
	size_t pending;
	struct error err;
	int failed;
	json_t *created;	/* names made by this connect */
};

static void
created_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct http_request *req = arg;

	if (err != NULL)
		sandboxd_reply_error(req, err);
	else
		http_reply_json(req, 201, sandbox_model(sb));
}

static void
route_create(struct http_request *req, void *arg)
{
	struct create_request creq;
	struct sandbox *sb;
	struct error err;
	const char *session = NULL;
	int from_pool = 1;
	json_t *args;

	(void)arg;
	if ((args = http_request_json(req, &err)) == NULL) {
		sandboxd_reply_error(req, &err);
		return;
	}
	if (api_parse_create(args, &creq, json_object_get(args, "type") ?
	    "type" : "sandbox_type", &err) < 0 ||
	    jsonx_get_string(args, "session_ctx_id", 0, &session, &err) < 0 ||
	    jsonx_get_bool(args, "pool", 1, &from_pool, &err) < 0)
		goto fail;
	if (session != NULL)
		creq.session = session;
	if (pool_take_or_create(&creq, from_pool, &sb, created_cb, req,
	    &err) < 0)
		goto fail;
	if (sb != NULL)
		http_reply_json(req, 201, sandbox_model(sb));
	json_decref(args);
	return;
fail:
	sandboxd_reply_error(req, &err);
	json_decref(args);
}

static void
route_list(struct http_request *req, void *arg)
{
	struct sandbox_query q = {
		.type = http_request_query(req, "type"),
		.state = http_request_query(req, "state"),
		.session = http_request_query(req, "session_ctx_id"),
		.all = http_request_query(req, "all"),
		.offset = http_request_query(req, "offset"),
		.limit = http_request_query(req, "limit"),
	};
	struct error err;
	struct evbuffer *answer;

	(void)arg;
	if ((answer = sandbox_list_encode(&q, &err)) == NULL) {
		sandboxd_reply_error(req, &err);
		return;
	}
	http_reply_buffer(req, 200, "application/json", answer);
	evbuffer_free(answer);
}

static void
model_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct http_request *req = arg;

	if (err != NULL)
		sandboxd_reply_error(req, err);
	else
		http_reply_json(req, 200, sandbox_model(sb));
}

/* /v1/sandboxes/{id}/agent{rest}: to the agent, with sb's own token or
 * the BEARER_TOKEN. */
static void
sandbox_proxy(struct http_request *req, struct sandbox *sb, const char *id,
    const char *rest)
{
	char *target;

	if (!proxy_authorized(req, sb)) {
		http_reply_error(req, 401, "Authentication required");
	} else if (sb == NULL) {
		http_reply_error(req, 404, "no sandbox %s", id);
	} else {
		target = *rest == '/' ? xstrdup(rest) : xasprintf("/%s", rest);
		proxy_forward(req, sb, target);
		free(target);
	}
}

static void
stats_cb(struct sandbox *sb, const struct sandbox_stats *st,
    const struct error *err, void *arg)
{
	struct http_request *req = arg;
	json_t *j;

	(void)sb;
	if (err != NULL) {
		sandboxd_reply_error(req, err);
		return;
	}
	j = json_pack("{s:I,s:f,s:I,s:I,s:I}", "cpu_count",
	    (json_int_t)st->cpu_count, "cpu_used_pct", st->cpu_used_pct,
	    "mem_used", (json_int_t)st->mem_used, "mem_total",
	    (json_int_t)st->mem_total, "mem_cache", (json_int_t)st->mem_cache);
	/* Only known ones: its agent told them. */
	if (st->disk_total > 0) {
		json_object_set_new(j, "disk_used", json_integer(st->disk_used));
		json_object_set_new(j, "disk_total",
		    json_integer(st->disk_total));
	}
	http_reply_json(req, 200, j);
}

/* The part of rest before its query. */
static int
rest_is(const char *rest, const char *what)
{
	size_t n = strlen(what);

	return strncmp(rest, what, n) == 0 && (rest[n] == '\0' ||
	    rest[n] == '?');
}

/* A PUT of a sandbox's network: its body gathered (the route streams),
 * then the change. */
struct network_put {
	struct sandbox *sb;
	struct evbuffer *body;
};

/* Lists of EGRESS_MAX_ENTRIES names fit with room to spare. */
#define NETWORK_MAX_BODY (256 * 1024)

static void
network_put_free(struct http_request *req, struct network_put *np)
{
	http_request_on_close(req, NULL, NULL);
	sandbox_unref(np->sb);
	evbuffer_free(np->body);
	free(np);
}

static int
network_body_cb(struct http_request *req, const char *data, size_t len,
    void *arg)
{
	struct network_put *np = arg;

	if (evbuffer_get_length(np->body) + len > NETWORK_MAX_BODY) {
		http_reply_error(req, 413, "the network body is over %d bytes",
		    NETWORK_MAX_BODY);
		network_put_free(req, np);
		return -1;
	}
	evbuffer_add(np->body, data, len);
	return 0;
}

static void
network_end_cb(struct http_request *req, void *arg)
{
	struct network_put *np = arg;
	size_t n = evbuffer_get_length(np->body);
	json_t *body, *norm;
	struct error err;

	body = http_json_parse((const char *)evbuffer_pullup(np->body, -1), n,
	    &err);
	if (body == NULL || egress_network_check(body, "network", &norm,
	    &err) < 0)
		sandboxd_reply_error(req, &err);
	else
		lifecycle_set_network(np->sb, norm, model_cb, req);
	json_decref(body);
	network_put_free(req, np);
}

/* The client left before its body ended. */
static void
network_gone_cb(struct http_request *req, void *arg)
{
	network_put_free(req, arg);
}

static void
network_put(struct http_request *req, struct sandbox *sb)
{
	struct network_put *np = xcalloc(1, sizeof *np);

	sandbox_ref(sb);
	np->sb = sb;
	np->body = evbuffer_new();
	http_request_on_close(req, network_gone_cb, np);
	http_request_on_body(req, network_body_cb, network_end_cb, np);
}

/* /v1/sandboxes/{id}/pause, /resume, /stats, /network: the BEARER_TOKEN
 * only. */
static void
sandbox_action(struct http_request *req, struct sandbox *sb,
    const char *rest)
{
	enum http_verb method = http_request_method(req);

	if (rest_is(rest, "/stats") && method == HTTP_METHOD_GET)
		lifecycle_stats(sb, stats_cb, req);
	else if (rest_is(rest, "/pause") && method == HTTP_METHOD_POST)
		lifecycle_pause(sb, model_cb, req);
	else if (rest_is(rest, "/resume") && method == HTTP_METHOD_POST)
		lifecycle_resume(sb, model_cb, req);
	else if (rest_is(rest, "/network") && method == HTTP_METHOD_PUT)
		network_put(req, sb);
	else
		http_reply_error(req, 405, "Method Not Allowed");
}

/* GET and DELETE /v1/sandboxes/{id}, and its actions: the BEARER_TOKEN
 * only. */
static void
sandbox_crud(struct http_request *req, struct sandbox *sb, const char *id,
    const char *rest)
{
	enum http_verb method = http_request_method(req);

	if (!proxy_authorized(req, NULL)) {
		http_reply_error(req, 401, "Authentication required");
	} else if (*rest != '\0' && *rest != '?' && !rest_is(rest, "/stats") &&
	    !rest_is(rest, "/pause") && !rest_is(rest, "/resume") &&
	    !rest_is(rest, "/network")) {
		http_reply_error(req, 404, "Not Found");
	} else if (sb == NULL) {
		http_reply_error(req, 404, "no sandbox %s", id);
	} else if (*rest == '/') {
		sandbox_action(req, sb, rest);
	} else if (method == HTTP_METHOD_GET) {
		sessions_touch_sandbox(sb);
		http_reply_json(req, 200, sandbox_model(sb));
	} else if (method == HTTP_METHOD_DELETE) {
		lifecycle_release(sb, model_cb, req);
	} else {
		http_reply_error(req, 405, "Method Not Allowed");
	}
}

/* /v1/sandboxes/{id}[/agent/{path}]: one prefix route (its auth is the
 * handlers' own, a sandbox's token opening only its agent), dispatched
 * here to the proxy or the record. */
static void
route_sandbox(struct http_request *req, void *arg)
{
	struct sandbox *sb;
	const char *rest;
	char *id;

	(void)arg;
	sb = sandbox_from_path(req, "/v1/sandboxes/", &id, &rest);
	if (id == NULL) {
		http_reply_error(req, 404, "Not Found");
		return;
	}
	if (strncmp(rest, "/agent", 6) == 0 && (rest[6] == '/' ||
	    rest[6] == '?' || rest[6] == '\0'))
		sandbox_proxy(req, sb, id, rest + 6);
	else
		sandbox_crud(req, sb, id, rest);
	free(id);
}

static void
connect_finish(struct connect *c)
{
	json_t *list = json_array();
	struct sandbox *sb;

	if (c->failed) {
		size_t i;
		json_t *name;

		/* All or nothing: what this connect made goes again. */
		json_array_foreach(c->created, i, name) {
			sb = sandbox_resolve(json_string_value(name));
			if (sb != NULL)
				lifecycle_release(sb, NULL, NULL);
		}
		sandboxd_reply_error(c->req, &c->err);
	} else {
		for (sb = sandbox_first(); sb != NULL; sb = sandbox_next(sb)) {
			if (sb->session != NULL && strcmp(sb->session,
			    c->session) == 0 && sb->state != SB_RELEASED &&
			    sb->state != SB_RELEASING)
				json_array_append_new(list, sandbox_model(sb));
		}
		http_reply_json(c->req, 200, json_pack("{s:s,s:o}",
		    "session_ctx_id", c->session, "sandboxes", list));
		list = NULL;
	}
	json_decref(list);
	json_decref(c->created);
	free(c->session);
	free(c);
}

static void
connect_created_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct connect *c = arg;

	if (err != NULL && !c->failed) {
		c->failed = 1;
		c->err = *err;
	}
	if (err == NULL)
		json_array_append_new(c->created, json_string(sb->name));
	if (--c->pending == 0)
		connect_finish(c);
}

static int
session_has_type(const char *session, const char *type)
{
	struct sandbox *sb;

	for (sb = sandbox_first(); sb != NULL; sb = sandbox_next(sb)) {
		if (sb->session != NULL && strcmp(sb->session, session) == 0 &&
		    strcmp(sb->type_name, type) == 0 &&
		    sb->state != SB_RELEASED && sb->state != SB_RELEASING)
			return 1;
	}
	return 0;
}

/* The types a connect asks for, from sandbox_types and tool names. */
static int
wanted_types(json_t *args, struct config_list *out, struct error *err)
{
	json_t *types, *tools, *v;
	size_t i;

	if (jsonx_get_array(args, "sandbox_types", 0, &types, err) < 0 ||
	    jsonx_get_array(args, "tools", 0, &tools, err) < 0)
		return -1;
	json_array_foreach(types, i, v) {
		if (!json_is_string(v) ||
		    sandbox_types_find(json_string_value(v)) == NULL) {
			error_set(err, 400, "sandbox_types: unknown sandbox type "
			    "%s", json_is_string(v) ? json_string_value(v) : "?");
			return -1;
		}
		config_list_add(out, json_string_value(v));
	}
	json_array_foreach(tools, i, v) {
		const struct sandbox_type *t = json_is_string(v) ?
		    sandbox_types_for_tool(json_string_value(v)) : NULL;

		if (t == NULL) {
			error_set(err, 400, "tools: no sandbox type offers %s",
			    json_is_string(v) ? json_string_value(v) : "?");
			return -1;
		}
		config_list_add(out, t->name);
	}
	if (out->n == 0)
		config_list_add(out, sd.cfg.pool_types.v[0]);
	return 0;
}

static void
route_connect(struct http_request *req, void *arg)
{
	struct config_list types = { 0 };
	const char *session_id, *user_id;
	struct connect *c;
	struct error err;
	json_t *args;

	(void)arg;
	if ((args = http_request_json(req, &err)) == NULL) {
		sandboxd_reply_error(req, &err);
		return;
	}
	if (jsonx_get_string(args, "session_id", 1, &session_id, &err) < 0 ||
	    jsonx_get_string(args, "user_id", 0, &user_id, &err) < 0 ||
	    wanted_types(args, &types, &err) < 0) {
		sandboxd_reply_error(req, &err);
		goto out;
	}
	c = xcalloc(1, sizeof *c);
	c->req = req;
	c->session = sessions_ctx_id(session_id, user_id);
	c->created = json_array();
	c->pending = 1;
	sessions_touch(c->session);
	for (size_t i = 0; i < types.n && !c->failed; i++) {
		struct create_request creq = { 0 };
		struct sandbox *sb;

		/* Reuse what the session has; a type named twice once. */
		if (session_has_type(c->session, types.v[i]))
			continue;
		creq.type = sandbox_types_find(types.v[i]);
		creq.session = c->session;
		c->pending++;
		if (pool_take_or_create(&creq, 1, &sb, connect_created_cb, c,
		    &err) < 0) {
			c->pending--;
			c->failed = 1;
			c->err = err;
		} else if (sb != NULL) {
			c->pending--;
			json_array_append_new(c->created,
			    json_string(sb->name));
		}
	}
	if (--c->pending == 0)
		connect_finish(c);
out:
	config_list_free(&types);
	json_decref(args);
}

/* A session release waiting for its sandboxes to go; freed when it
 * answers. */
struct session_release {
	struct http_request *req;
	char *session;
	json_t *names;
	size_t pending;
	struct error err;
	int failed;
};

static void
session_released_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct session_release *r = arg;

	(void)sb;
	if (err != NULL && !r->failed) {
		r->failed = 1;
		r->err = *err;
	}
	if (--r->pending > 0)
		return;
	if (r->failed)
		sandboxd_reply_error(r->req, &r->err);
	else
		http_reply_json(r->req, 200, json_pack("{s:s,s:O}",
		    "session_ctx_id", r->session, "released", r->names));
	json_decref(r->names);
	free(r->session);
	free(r);
}

static void
route_session_release(struct http_request *req, void *arg)
{
	const char *session_id, *user_id;
	struct session_release *r;
	json_t *args, *name;
	struct error err;
	size_t i;

	(void)arg;
	if ((args = http_request_json(req, &err)) == NULL) {
		sandboxd_reply_error(req, &err);
		return;
	}
	if (jsonx_get_string(args, "session_id", 1, &session_id, &err) < 0 ||
	    jsonx_get_string(args, "user_id", 0, &user_id, &err) < 0) {
		sandboxd_reply_error(req, &err);
		json_decref(args);
		return;
	}
	r = xcalloc(1, sizeof *r);
	r->req = req;
	r->session = sessions_ctx_id(session_id, user_id);
	r->names = sessions_mapping(r->session);
	r->pending = 1;
	json_array_foreach(r->names, i, name) {
		struct sandbox *sb = sandbox_resolve(json_string_value(name));

		if (sb != NULL) {
			r->pending++;
			lifecycle_release(sb, session_released_cb, r);
		}
	}
	json_decref(args);
	session_released_cb(NULL, NULL, r);
}

#define ANY (HTTP_METHOD_GET | HTTP_METHOD_POST | HTTP_METHOD_PUT | \
    HTTP_METHOD_DELETE | HTTP_METHOD_PATCH)

/* Bodies name types, sessions and options: 1 MiB is plenty. What goes to
 * an agent streams through /v1/sandboxes/{id}/agent/, which the agent
 * limits itself. */
#define SMALL (1024 * 1024)

static const struct http_route routes[] = {
	{ HTTP_METHOD_POST, "/v1/sandboxes", HTTP_MATCH_EXACT, 0, route_create,
	    SMALL },
	{ HTTP_METHOD_GET, "/v1/sandboxes", HTTP_MATCH_EXACT, 0, route_list,
	    SMALL },
	{ ANY, "/v1/sandboxes/", HTTP_MATCH_PREFIX,
	    HTTP_ROUTE_STREAM_BODY | HTTP_ROUTE_NO_AUTH, route_sandbox, 0 },
	{ HTTP_METHOD_POST, "/v1/sessions/connect", HTTP_MATCH_EXACT, 0,
	    route_connect, SMALL },
	{ HTTP_METHOD_POST, "/v1/sessions/release", HTTP_MATCH_EXACT, 0,
	    route_session_release, SMALL },
	{ HTTP_METHOD_GET, "/metrics", HTTP_MATCH_EXACT, 0, metrics_route,
	    SMALL },
};

const struct http_route *
api_rest_routes(size_t *n)
{
	*n = sizeof routes / sizeof routes[0];
	return routes;
}
