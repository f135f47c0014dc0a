/*
 * E2B's control API (spec/e2b-wire.md section 2) under /e2b, where
 * E2B_API_URL=http://HOST:PORT/e2b points the SDKs:
 *   POST   /sandboxes, /v2/sandboxes           create
 *   GET    /sandboxes (running), /v2/sandboxes  list (api_e2b_list.c)
 *   GET    /sandboxes/{id}                      info
 *   DELETE /sandboxes/{id}                      kill
 *   POST   /sandboxes/{id}/timeout              end = now + timeout
 *   POST   /sandboxes/{id}/refreshes            end at least now + duration
 *   POST   /sandboxes/{id}/pause                freeze (204; 409 paused)
 *   POST   /sandboxes/{id}/resume               thaw (201; 409 running)
 *   POST   /sandboxes/{id}/connect, /v2/...     thaw a paused one (201),
 *                                               or extend a running one
 *   GET    /sandboxes/{id}/metrics              one sample, now
 *   PUT    /sandboxes/{id}/network              its egress lists, live
 *                                               (api_e2b_network.c)
 * Forks, snapshots, logs, templates, volumes and secrets answer 501
 * naming what is not there. Errors are E2B's
 * {"code", "message"}, the status mirrored in code (the SDK branches on
 * it). The key: X-API-Key (E2B_API_KEY) is the BEARER_TOKEN; without one
 * any key is taken, as on every other route.
 */
#include "api_e2b.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "jsonx.h"
#include "shared.h"
#include "xmalloc.h"

#define MAX_SEGMENTS 6
/* What a sandbox's metadata may hold, encoded: it is in every record. */
#define METADATA_MAX (64 * 1024)
/* Bodies name a template and options. */
#define BODY_MAX (1024 * 1024)
#define INIT_TIMEOUT 30.0

/* The path below /e2b, split and decoded. */
struct e2b_path {
	char *seg[MAX_SEGMENTS];
	size_t n;
	int v2;			/* /v2/... */
};

static void dispatch(struct http_request *req, int looked_up);

static void
path_free(struct e2b_path *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->seg[i]);
}

/* -1 for a path we cannot split (an encoded NUL, too many parts). */
static int
path_parse(struct http_request *req, struct e2b_path *p)
{
	const char *raw = http_request_raw_target(req);

	memset(p, 0, sizeof *p);
	/* The route matched the decoded path; the raw one, split here, must
	 * spell the prefix plainly too. */
	if (strncmp(raw, "/e2b", 4) != 0 || (raw[4] != '/' && raw[4] != '?' &&
	    raw[4] != '\0'))
		return -1;
	raw += 4;
	while (*raw == '/') {
		size_t n = strcspn(++raw, "/?");

		if (n == 0)
			break;
		if (p->n == MAX_SEGMENTS ||
		    http_percent_decode(raw, n, 0, &p->seg[p->n]) < 0) {
			path_free(p);
			return -1;
		}
		p->n++;
		raw += n;
	}
	if (p->n > 0 && strcmp(p->seg[0], "v2") == 0) {
		p->v2 = 1;
		free(p->seg[0]);
		memmove(p->seg, p->seg + 1, --p->n * sizeof *p->seg);
	}
	return 0;
}

static int
authorized(struct http_request *req)
{
	const char *key = http_request_header(req, "X-API-Key");

	if (sd.cfg.bearer_token == NULL)
		return 1;
	if (key != NULL && http_token_equal(key, sd.cfg.bearer_token))
		return 1;
	return proxy_authorized(req, NULL);
}

/* The body's JSON object; an empty body is {}. NULL: answered (400). */
static json_t *
body_json(struct http_request *req)
{
	struct error err;
	json_t *j;

	if (evbuffer_get_length(http_request_body(req)) == 0)
		return json_object();
	if ((j = http_request_json(req, &err)) == NULL)
		api_e2b_reply_err(req, &err);
	return j;
}

/* An integer field of at most max seconds, or dflt when absent. */
static int
get_seconds(json_t *body, const char *key, double max, double dflt,
    double *out, struct error *err)
{
	json_t *v = json_object_get(body, key);

	if (v == NULL || json_is_null(v)) {
		*out = dflt;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (double)json_integer_value(v) > max) {
		error_set(err, 400, "%s must be a whole number of seconds from 0 "
		    "to %.0f", key, max);
		return -1;
	}
	*out = (double)json_integer_value(v);
	return 0;
}

int
api_e2b_unset(json_t *v)
{
	return v == NULL || json_is_null(v) || json_is_false(v) ||
	    (json_is_object(v) && json_object_size(v) == 0) ||
	    (json_is_array(v) && json_array_size(v) == 0);
}

static int
string_map(json_t *v, const char *key, size_t max, struct error *err)
{
	const char *k;
	json_t *s;
	char *text;
	size_t len;

	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		goto bad;
	json_object_foreach(v, k, s) {
		if (!json_is_string(s) || *k == '\0')
			goto bad;
	}
	text = json_dumps(v, JSON_COMPACT);
	len = text != NULL ? strlen(text) : 0;
	free(text);
	if (len > max) {
		error_set(err, 400, "%s: more than %zu bytes", key, max);
		return -1;
	}
	return 0;
bad:
	error_set(err, 400, "%s must be an object of strings", key);
	return -1;
}

/* A create's options beyond the template: those we serve, and a 400
 * naming any other that asks for something. */
static int
check_options(json_t *body, struct error *err)
{
	static const char *const served[] = {
		"templateID", "timeout", "metadata", "envVars", "secure",
		"autoPause", "autoPauseMemory", "autoResume",
		"allow_internet_access", "network",
	};
	json_t *v;
	const char *k;

	json_object_foreach(body, k, v) {
		size_t i;

		for (i = 0; i < sizeof served / sizeof served[0]; i++) {
			if (strcmp(k, served[i]) == 0)
				break;
		}
		if (i == sizeof served / sizeof served[0] &&
		    !api_e2b_unset(v)) {
			error_set(err, 400, "%s is not supported by sandboxd",
			    strcmp(k, "mcp") == 0 ? "mcp (the MCP gateway)" : k);
			return -1;
		}
	}
	v = json_object_get(body, "autoPauseMemory");
	if (json_is_false(v)) {
		error_set(err, 400, "autoPauseMemory: false (a pause that drops "
		    "the memory) is not supported: sandboxes pause with their "
		    "memory");
		return -1;
	}
	if (json_is_true(json_object_get(json_object_get(body, "autoResume"),
	    "enabled"))) {
		error_set(err, 400, "autoResume is not supported: resume a "
		    "paused sandbox with connect");
		return -1;
	}
	return 0;
}

/* Creating. */

/* A create under way; freed when it answers. */
struct e2b_create {
	struct http_request *req;
	json_t *env;		/* envVars, or NULL */
};

static void
create_answer(struct e2b_create *c, struct sandbox *sb)
{
	http_reply_json(c->req, 201, api_e2b_sandbox_json(sb));
	json_decref(c->env);
	free(c);
}

static void
create_failed(struct e2b_create *c, struct sandbox *sb,
    const struct error *err)
{
	struct error e = *err;

	/* A sandbox made for nobody goes again. */
	if (sb != NULL)
		lifecycle_release(sb, NULL, NULL);
	/* Out of places is E2B's rate limit; Redis away stays 503. */
	if (e.status == 503 && !(shared_enabled() && !shared_up()))
		e.status = 429;
	api_e2b_reply_err(c->req, &e);
	json_decref(c->env);
	free(c);
}

static void
init_cb(struct sandbox *sb, int status, json_t *answer,
    const struct error *err, void *arg)
{
	struct e2b_create *c = arg;
	struct error e;
	const char *detail;

	if (err != NULL) {
		e = *err;
		error_prefix(&e, "envVars could not be set");
	} else if (status / 100 != 2) {
		detail = json_string_value(json_object_get(answer, "detail"));
		error_set(&e, status == 400 ? 400 : 502, "envVars could not be "
		    "set: the agent answered %d%s%.200s", status,
		    detail != NULL ? ": " : "", detail != NULL ? detail : "");
	} else {
		create_answer(c, sb);
		return;
	}
	create_failed(c, sb, &e);
}

/* The sandbox is ours: its variables go to its envd, then the answer. */
static void
created(struct e2b_create *c, struct sandbox *sb)
{
	json_t *body;

	if (c->env == NULL) {
		create_answer(c, sb);
		return;
	}
	body = json_pack("{s:O}", "envVars", c->env);
	agent_call_json(sb, "POST", "/envd/init", body, INIT_TIMEOUT, init_cb,
	    c);
	json_decref(body);
}

static void
created_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	if (err != NULL)
		create_failed(arg, NULL, err);
	else
		created(arg, sb);
}

static void
route_create(struct http_request *req, const struct e2b_path *p)
{
	const struct sandbox_type *type;
	struct create_request creq = { 0 };
	const char *tmpl;
	struct e2b_create *c;
	struct sandbox *sb;
	struct error err;
	double timeout;
	int pause = 0, secure = p->v2, rc;
	json_t *body, *env, *meta, *net;

	if ((body = body_json(req)) == NULL)
		return;
	if (jsonx_get_string(body, "templateID", 1, &tmpl, &err) < 0 ||
	    get_seconds(body, "timeout", E2B_MAX_TIMEOUT, E2B_DEFAULT_TIMEOUT,
	    &timeout, &err) < 0 ||
	    string_map(json_object_get(body, "metadata"), "metadata",
	    METADATA_MAX, &err) < 0 ||
	    string_map(env = json_object_get(body, "envVars"), "envVars",
	    BODY_MAX, &err) < 0 ||
	    jsonx_get_bool(body, "autoPause", 0, &pause, &err) < 0 ||
	    (!p->v2 && jsonx_get_bool(body, "secure", 0, &secure, &err) < 0))
		goto fail;
	if ((type = api_e2b_template_type(tmpl)) == NULL) {
		error_set(&err, 404, "template '%.200s' not found", tmpl);
		goto fail;
	}
	if (check_options(body, &err) < 0 ||
	    api_e2b_network_create(body, type, tmpl, p->v2, &net, &err) < 0)
		goto fail;
	c = xcalloc(1, sizeof *c);
	c->req = req;
	if (env != NULL && json_object_size(env) > 0)
		c->env = json_incref(env);
	meta = json_pack("{s:o}", "e2b", api_e2b_new_fields(tmpl,
	    json_object_get(body, "metadata"), timeout, pause, secure));
	creq.type = type;
	creq.meta = meta;
	creq.network = net;
	rc = pool_take_or_create(&creq, 1, &sb, created_cb, c, &err);
	/* The sandbox holds what it took of them. */
	json_decref(meta);
	json_decref(net);
	if (rc < 0)
		create_failed(c, NULL, &err);
	else if (sb != NULL)
		created(c, sb);
	json_decref(body);
	return;
fail:
	api_e2b_reply_err(req, &err);
	json_decref(body);
}

/* One sandbox. */

void
api_e2b_done_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	(void)sb;
	if (err != NULL)
		api_e2b_reply_err(arg, err);
	else
		http_reply_empty(arg, 204);
}

/* The answer for what only the instance that owns sb can do. */
static int
owner_only(struct http_request *req, struct sandbox *sb, const char *what)
{
	if (sb->owner == NULL)
		return 0;
	api_e2b_reply_error(req, 421, "sandbox %s belongs to sandboxd instance "
	    "%s: %s it through that instance", sb->name, sb->owner, what);
	return 1;
}

static void
route_timeout(struct http_request *req, struct sandbox *sb, int refresh)
{
	json_t *body, *e = api_e2b_fields(sb);
	double seconds, dflt = json_number_value(json_object_get(e,
	    "timeout"));
	struct error err;

	if ((body = body_json(req)) == NULL)
		return;
	if (get_seconds(body, refresh ? "duration" : "timeout", refresh ?
	    3600 : E2B_MAX_TIMEOUT, refresh ? dflt : -1, &seconds, &err) < 0) {
		api_e2b_reply_err(req, &err);
	} else if (seconds < 0) {
		api_e2b_reply_error(req, 400, "timeout is required");
	} else if (!owner_only(req, sb, "set its timeout")) {
		if (sb->state == SB_PAUSED) {
			api_e2b_reply_error(req, 409, "sandbox %s is paused: its "
			    "timeout starts again when it is resumed "
			    "(connect)", sb->name);
		} else {
			api_e2b_set_end(sb, seconds, refresh);
			http_reply_empty(req, 204);
		}
	}
	json_decref(body);
}

static void
paused_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct error e;

	if (err != NULL) {
		e = *err;
		/* The SDK takes a 409 for "paused already", which it is not. */
		if (e.status == 409)
			e.status = 400;
		api_e2b_reply_err(arg, &e);
		return;
	}
	api_e2b_stop_clock(sb);
	http_reply_empty(arg, 204);
}

static void
route_pause(struct http_request *req, struct sandbox *sb)
{
	json_t *body;

	if ((body = body_json(req)) == NULL)
		return;
	if (json_is_false(json_object_get(body, "memory")))
		api_e2b_reply_error(req, 400, "a pause that drops the memory "
		    "(keepMemory: false) is not supported: sandboxes pause with "
		    "their memory");
	else if (owner_only(req, sb, "pause"))
		;
	else if (sb->state == SB_PAUSED)
		api_e2b_reply_error(req, 409, "sandbox %s is already paused",
		    sb->name);
	else
		lifecycle_pause(sb, paused_cb, req);
	json_decref(body);
}

/* A resume or connect waiting for the agent; freed when it answers. */
struct e2b_resume {
	struct http_request *req;
	double timeout;
};

static void
resumed_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct e2b_resume *r = arg;

	if (err != NULL) {
		api_e2b_reply_err(r->req, err);
	} else {
		api_e2b_set_end(sb, r->timeout, 0);
		http_reply_json(r->req, 201, api_e2b_sandbox_json(sb));
	}
	free(r);
}

/* resume (the deprecated route): 409 unless paused. connect: a running
 * one is extended and answered 200, a paused one resumed. */
static void
route_resume(struct http_request *req, struct sandbox *sb, int connect)
{
	struct e2b_resume *r;
	struct error err;
	json_t *body;
	double timeout;

	if ((body = body_json(req)) == NULL)
		return;
	if (get_seconds(body, "timeout", E2B_MAX_TIMEOUT, -1, &timeout,
	    &err) < 0) {
		api_e2b_reply_err(req, &err);
	} else if (json_is_false(json_object_get(body, "memory"))) {
		api_e2b_reply_error(req, 400, "a resume without the memory "
		    "(onResume: reboot) is not supported");
	} else if (!api_e2b_unset(json_object_get(body, "autoPause"))) {
		api_e2b_reply_error(req, 400, "autoPause is set at create only");
	} else if (sb->state != SB_PAUSED && !connect) {
		api_e2b_reply_error(req, 409, "sandbox %s is not paused",
		    sb->name);
	} else if (sb->state != SB_PAUSED) {
		if (timeout >= 0 && !owner_only(req, sb, "extend")) {
			api_e2b_set_end(sb, timeout, 1);
			http_reply_json(req, 200, api_e2b_sandbox_json(sb));
		} else if (timeout < 0) {
			http_reply_json(req, 200, api_e2b_sandbox_json(sb));
		}
	} else if (!owner_only(req, sb, "resume")) {
		r = xcalloc(1, sizeof *r);
		r->req = req;
		r->timeout = timeout >= 0 ? timeout : E2B_DEFAULT_TIMEOUT;
		lifecycle_resume(sb, resumed_cb, r);
	}
	json_decref(body);
}

/* A metrics request waiting for its sample. */
struct e2b_metrics {
	struct http_request *req;
	double start, end;		/* -1: open */
};

static void
sampled_cb(struct sandbox *sb, const struct sandbox_stats *st,
    const struct error *err, void *arg)
{
	struct e2b_metrics *m = arg;
	double now = timing_wall();
	json_t *list = json_array();
	char ts[32];

	(void)sb;
	if (err != NULL) {
		api_e2b_reply_err(m->req, err);
		json_decref(list);
		free(m);
		return;
	}
	/* One sample, now: in the range asked for, or none. */
	if ((m->start < 0 || now >= m->start) && (m->end < 0 ||
	    now <= m->end + 1)) {
		api_e2b_time(now, ts);
		json_array_append_new(list, json_pack("{s:s,s:I,s:i,s:f,s:I,"
		    "s:I,s:I,s:I,s:I}", "timestamp", ts, "timestampUnix",
		    (json_int_t)now, "cpuCount", (int)st->cpu_count,
		    "cpuUsedPct", st->cpu_used_pct, "memUsed",
		    (json_int_t)st->mem_used, "memTotal",
		    (json_int_t)st->mem_total, "memCache",
		    (json_int_t)st->mem_cache, "diskUsed",
		    (json_int_t)st->disk_used, "diskTotal",
		    (json_int_t)st->disk_total));
	}
	http_reply_json(m->req, 200, list);
	free(m);
}

static int
query_seconds(struct http_request *req, const char *key, double *out)
{
	const char *s = http_request_query(req, key);
	char *end;

	*out = -1;
	if (s == NULL)
		return 0;
	errno = 0;
	*out = (double)strtoll(s, &end, 10);
	if (!isdigit((unsigned char)*s) || *end != '\0' || errno != 0) {
		api_e2b_reply_error(req, 400, "%s must be unix seconds", key);
		return -1;
	}
	return 0;
}

static void
route_metrics(struct http_request *req, struct sandbox *sb)
{
	struct e2b_metrics *m;
	double start, end;

	if (query_seconds(req, "start", &start) < 0 ||
	    query_seconds(req, "end", &end) < 0 ||
	    owner_only(req, sb, "read its metrics"))
		return;
	m = xcalloc(1, sizeof *m);
	m->req = req;
	m->start = start;
	m->end = end;
	lifecycle_stats(sb, sampled_cb, m);
}

static void
route_network(struct http_request *req, struct sandbox *sb)
{
	json_t *body;

	if ((body = body_json(req)) == NULL)
		return;
	if (!owner_only(req, sb, "change its network"))
		api_e2b_network_put(req, sb, body);
	json_decref(body);
}

/* Routing. */

/* What E2B has and sandboxd does not, named: under /e2b (top), as an
 * action on a sandbox, or GET /sandboxes/metrics. NULL: not one. */
static const char *
unsupported(const struct e2b_path *p)
{
	static const char *const top[][2] = {
		{ "snapshots", "snapshots" },
		{ "templates", "templates (sandbox types are sandboxd's "
		    "configuration: SANDBOXD_TYPES, SANDBOXD_E2B_TEMPLATES)" },
		{ "volumes", "volumes" },
		{ "secrets", "secrets" },
		{ "teams", "teams" },
	};
	static const char *const actions[][2] = {
		{ "fork", "fork" },
		{ "snapshots", "snapshots" },
		{ "logs", "logs (the agent's log is the engine's: docker logs)" },
	};
	int sandboxes = p->n > 0 && strcmp(p->seg[0], "sandboxes") == 0;

	if (p->n == 0)
		return NULL;
	if (sandboxes && p->n == 2 && strcmp(p->seg[1], "metrics") == 0)
		return "metrics of several sandboxes at once";
	for (size_t i = 0; !sandboxes && i < sizeof top / sizeof top[0]; i++) {
		if (strcmp(p->seg[0], top[i][0]) == 0)
			return top[i][1];
	}
	for (size_t i = 0; sandboxes && p->n == 3 &&
	    i < sizeof actions / sizeof actions[0]; i++) {
		if (strcmp(p->seg[2], actions[i][0]) == 0)
			return actions[i][1];
	}
	return NULL;
}

/* A sandbox id that this instance may not have heard of yet (another
 * instance's create a moment ago): Redis is asked, then the request is
 * served again. */
static void
looked_up_cb(void *arg, int ok)
{
	(void)ok;
	dispatch(arg, 1);
}

static void
sandbox_route(struct http_request *req, const struct e2b_path *p,
    int looked_up)
{
	enum http_verb method = http_request_method(req);
	const char *id = p->seg[1], *action = p->n > 2 ? p->seg[2] : "";
	struct sandbox *sb = api_e2b_find(id);

	if (sb == NULL && !looked_up && shared_enabled() &&
	    strlen(id) <= E2B_ID_MAX && shared_lookup(id, looked_up_cb,
	    req) == 0)
		return;
	if (sb == NULL) {
		api_e2b_reply_error(req, 404, "sandbox %.*s not found",
		    E2B_ID_MAX, id);
	} else if (*action == '\0' && method == HTTP_METHOD_GET) {
		http_reply_json(req, 200, api_e2b_detail_json(sb, 1));
	} else if (*action == '\0' && method == HTTP_METHOD_DELETE) {
		lifecycle_release(sb, api_e2b_done_cb, req);
	} else if (strcmp(action, "timeout") == 0 && !p->v2 &&
	    method == HTTP_METHOD_POST) {
		route_timeout(req, sb, 0);
	} else if (strcmp(action, "refreshes") == 0 && !p->v2 &&
	    method == HTTP_METHOD_POST) {
		route_timeout(req, sb, 1);
	} else if (strcmp(action, "pause") == 0 && !p->v2 &&
	    method == HTTP_METHOD_POST) {
		route_pause(req, sb);
	} else if (strcmp(action, "resume") == 0 && !p->v2 &&
	    method == HTTP_METHOD_POST) {
		route_resume(req, sb, 0);
	} else if (strcmp(action, "connect") == 0 &&
	    method == HTTP_METHOD_POST) {
		route_resume(req, sb, 1);
	} else if (strcmp(action, "metrics") == 0 && !p->v2 &&
	    method == HTTP_METHOD_GET) {
		route_metrics(req, sb);
	} else if (strcmp(action, "network") == 0 && !p->v2 &&
	    method == HTTP_METHOD_PUT) {
		route_network(req, sb);
	} else {
		api_e2b_reply_error(req, 405, "%s is not a method of %s",
		    http_request_method_name(req), http_request_path(req));
	}
}

static void
dispatch(struct http_request *req, int looked_up)
{
	enum http_verb method = http_request_method(req);
	struct e2b_path p;
	const char *what;

	if (path_parse(req, &p) < 0) {
		api_e2b_reply_error(req, 404, "no such route");
		return;
	}
	if ((what = unsupported(&p)) != NULL) {
		api_e2b_reply_error(req, 501, "%s: not supported by sandboxd",
		    what);
	} else if (p.n == 1 && strcmp(p.seg[0], "sandboxes") == 0) {
		if (method == HTTP_METHOD_POST)
			route_create(req, &p);
		else if (method == HTTP_METHOD_GET)
			api_e2b_list(req, p.v2);
		else
			api_e2b_reply_error(req, 405, "Method Not Allowed");
	} else if ((p.n == 2 || p.n == 3) && strcmp(p.seg[0],
	    "sandboxes") == 0) {
		sandbox_route(req, &p, looked_up);
	} else {
		api_e2b_reply_error(req, 404, "no such route: %.200s",
		    http_request_path(req));
	}
	path_free(&p);
}

/* Every /e2b route: the key first, with a fixed answer. */
static void
route_e2b(struct http_request *req, void *arg)
{
	(void)arg;
	if (!authorized(req)) {
		api_e2b_reply_error(req, 401, "Invalid API key");
		return;
	}
	dispatch(req, 0);
}

#define ANY (HTTP_METHOD_GET | HTTP_METHOD_POST | HTTP_METHOD_PUT | \
    HTTP_METHOD_DELETE | HTTP_METHOD_PATCH)

static const struct http_route routes[] = {
	{ ANY, "/e2b", HTTP_MATCH_PREFIX, HTTP_ROUTE_NO_AUTH, route_e2b,
	    BODY_MAX },
};

const struct http_route *
api_e2b_routes(size_t *n)
{
	*n = sizeof routes / sizeof routes[0];
	return routes;
}
