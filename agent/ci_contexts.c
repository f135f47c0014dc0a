/*
 * The code interpreter's contexts (ci.h):
 *
 *   GET    /ci/health                  "OK", as E2B's server
 *   GET    /ci/contexts                [{"id", "language", "cwd"}]
 *   POST   /ci/contexts                {"language"?, "cwd"?} -> a context,
 *                                      once its kernel is ready
 *   POST   /ci/contexts/{id}/restart   fresh state, same id and cwd; 204
 *                                      once ready
 *   DELETE /ci/contexts/{id}           kernel killed; 204
 *
 * A context's cwd defaults to the home of the user commands run as (where
 * E2B's SDK and its files API put relative paths), else the workspace;
 * the kernel changes there itself, as that user, and a directory it
 * cannot enter fails the create (400).
 */
#include "agent.h"
#include "ci.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <event2/event.h>

#include "jsonx.h"
#include "kernel.h"
#include "log.h"
#include "token.h"
#include "xmalloc.h"

#define CI_CWD_MAX 4096

/* A request waiting for a context's kernel to be ready. */
struct ci_wait {
	struct http_request *req;
	struct ci *ci;
	char id[CI_ID_LEN + 1];
	int created;		/* answer the context (create), else 204 */
};

static struct ci_context *
context_new(struct ci *ci, const char *cwd)
{
	struct ci_context *ctx = xcalloc(1, sizeof *ctx);
	char hex[TOKEN_HEX_LEN];

	token_random_hex(hex);
	/* A version 4 UUID, as the ids E2B's server gives. */
	snprintf(ctx->id, sizeof ctx->id, "%.8s-%.4s-4%.3s-%c%.3s-%.12s",
	    hex, hex + 8, hex + 12, "89ab"[hex[15] % 4], hex + 16, hex + 20);
	ctx->cwd = xstrdup(cwd);
	ctx->k = kernel_new(ci->agent, KERNEL_E2B, cwd, 1);
	TAILQ_INSERT_TAIL(&ci->contexts, ctx, entry);
	ci->ncontexts++;
	return ctx;
}

static void
context_unlink(struct ci *ci, struct ci_context *ctx)
{
	TAILQ_REMOVE(&ci->contexts, ctx, entry);
	ci->ncontexts--;
	if (ci->python == ctx)
		ci->python = NULL;
}

static void
context_destroy(struct ci_context *ctx, const char *why)
{
	struct error err = { 0 };

	error_set(&err, 404, "context %s was removed", ctx->id);
	kernel_free(ctx->k, why, &err);
	free(ctx->cwd);
	free(ctx);
}

static void
context_free(struct ci *ci, struct ci_context *ctx, const char *why)
{
	context_unlink(ci, ctx);
	context_destroy(ctx, why);
}

/* From inside its kernel's callback, which still uses the kernel. */
static void
destroy_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	context_destroy(arg, "the context could not start");
}

/* Each context is a Python process of 40 MiB and more. */
static int
room(struct ci *ci, struct error *err)
{
	long max = ci->agent->cfg.max_contexts;

	if (ci->ncontexts < (size_t)max)
		return 0;
	error_set(err, 429, "this sandbox runs %ld code contexts, the most it "
	    "may (--max-contexts): remove one first", max);
	return -1;
}

struct ci_context *
ci_context_find(struct ci *ci, const char *id)
{
	struct ci_context *ctx;

	if (strcmp(id, "default") == 0)
		return ci->python;
	TAILQ_FOREACH(ctx, &ci->contexts, entry)
		if (strcmp(ctx->id, id) == 0)
			return ctx;
	return NULL;
}

struct ci_context *
ci_context_default(struct ci *ci, struct error *err)
{
	if (ci->python == NULL && room(ci, err) == 0)
		ci->python = context_new(ci, ci->home);
	return ci->python;
}

int
ci_language_check(const char *language, struct error *err)
{
	const char *p = language;
	size_t n;

	if (p == NULL)
		return 0;
	while (isspace((unsigned char)*p))
		p++;
	n = strlen(p);
	while (n > 0 && isspace((unsigned char)p[n - 1]))
		n--;
	if (n == 0 || (n == 6 && strncasecmp(p, "python", 6) == 0))
		return 0;
	error_set(err, 400, "language '%.64s' is not supported: this sandbox's "
	    "code interpreter runs Python only", language);
	return -1;
}

void
ci_init(struct agent *agent)
{
	struct ci *ci = xcalloc(1, sizeof *ci);
	struct error err = { 0 };

	struct stat st;

	ci->agent = agent;
	TAILQ_INIT(&ci->contexts);
	/* Where E2B's SDK and its files API put relative paths; a home that
	 * is not there (nobody's /nonexistent) would fail every run. */
	ci->home = agent->run_as_home != NULL &&
	    stat(agent->run_as_home, &st) == 0 && S_ISDIR(st.st_mode) ?
	    agent->run_as_home : agent->ws.root;
	agent->ci = ci;
	ci->python = context_new(ci, ci->home);
	if (agent->cfg.prewarm_context &&
	    kernel_start(ci->python->k, NULL, NULL, &err) < 0)
		log_warn("--prewarm-context: %s", err.msg);
}

static json_t *
context_json(const struct ci_context *ctx)
{
	return json_pack("{s:s, s:s, s:s}", "id", ctx->id, "language",
	    "python", "cwd", ctx->cwd);
}

void
ci_route_health(struct http_request *req, void *arg)
{
	(void)arg;
	http_reply_json(req, 200, json_string("OK"));
}

void
ci_route_contexts_list(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct ci_context *ctx;
	json_t *list = json_array();

	TAILQ_FOREACH(ctx, &agent->ci->contexts, entry)
		json_array_append_new(list, context_json(ctx));
	http_reply_json(req, 200, list);
}

static void
ready_cb(const struct error *err, void *arg)
{
	struct ci_wait *w = arg;
	struct ci_context *ctx = ci_context_find(w->ci, w->id);

	if (err != NULL) {
		/* A context that cannot start where it was asked to is of no
		 * use: it goes, and its create fails. */
		if (w->created && ctx != NULL) {
			struct timeval now = { 0, 0 };

			context_unlink(w->ci, ctx);
			event_base_once(w->ci->agent->base, -1, EV_TIMEOUT,
			    destroy_cb, ctx, &now);
		}
		http_reply_err(w->req, err);
	} else if (w->created) {
		http_reply_json(w->req, 200, context_json(ctx));
	} else {
		http_reply_empty(w->req, 204);
	}
	free(w);
}

static struct ci_wait *
wait_new(struct http_request *req, struct ci *ci, const char *id,
    int created)
{
	struct ci_wait *w = xcalloc(1, sizeof *w);

	w->req = req;
	w->ci = ci;
	snprintf(w->id, sizeof w->id, "%s", id);
	w->created = created;
	return w;
}

void
ci_route_contexts_create(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct ci *ci = agent->ci;
	struct error err = { 0 };
	const char *language, *cwd;
	struct ci_context *ctx;
	struct ci_wait *w;
	json_t *body;

	if ((body = http_request_json(req, &err)) == NULL ||
	    jsonx_get_string(body, "language", 0, &language, &err) < 0 ||
	    jsonx_get_string(body, "cwd", 0, &cwd, &err) < 0 ||
	    ci_language_check(language, &err) < 0)
		goto fail;
	if (cwd == NULL || *cwd == '\0')
		cwd = ci->home;
	if (cwd[0] != '/' || strlen(cwd) > CI_CWD_MAX) {
		error_set(&err, 400, "cwd must be an absolute path of at most "
		    "%d bytes", CI_CWD_MAX);
		goto fail;
	}
	if (room(ci, &err) < 0)
		goto fail;
	ctx = context_new(ci, cwd);
	w = wait_new(req, ci, ctx->id, 1);
	if (kernel_start(ctx->k, ready_cb, w, &err) < 0) {
		free(w);
		context_free(ci, ctx, "the context could not start");
		goto fail;
	}
	json_decref(body);
	return;
fail:
	json_decref(body);
	http_reply_err(req, &err);
}

/* The context a /ci/contexts/{id}[/suffix] path names; NULL once req is
 * answered 404. */
static struct ci_context *
path_context(struct http_request *req, struct ci *ci, const char *suffix)
{
	const char *id = http_request_path(req) + strlen("/ci/contexts/");
	size_t n = strlen(id), slen = strlen(suffix);
	struct ci_context *ctx = NULL;
	char name[CI_ID_LEN + 1];

	if (n > slen && n - slen <= CI_ID_LEN &&
	    strcmp(id + n - slen, suffix) == 0) {
		snprintf(name, sizeof name, "%.*s", (int)(n - slen), id);
		ctx = ci_context_find(ci, name);
	}
	if (ctx == NULL)
		http_reply_error(req, 404, "no such context: %.64s", id);
	return ctx;
}

void
ci_route_context_restart(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct ci_context *ctx = path_context(req, agent->ci, "/restart");

	if (ctx != NULL)
		kernel_restart(ctx->k, ready_cb, wait_new(req, agent->ci,
		    ctx->id, 0));
}

void
ci_route_context_remove(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct ci_context *ctx = path_context(req, agent->ci, "");

	if (ctx == NULL)
		return;
	context_free(agent->ci, ctx, "the context was removed while this "
	    "cell ran");
	http_reply_empty(req, 204);
}
