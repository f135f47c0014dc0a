/*
 * POST /ci/execute {"code", "context_id"?, "language"?, "env_vars"?}
 *
 * Runs code in a context (ci.h: the default Python one unless context_id
 * names another; context_id and language together are refused) and
 * answers 200 at once, then one JSON object a line while the cell runs,
 * as E2B's code interpreter does:
 *
 *   {"type": "number_of_executions", "execution_count"}  as it starts
 *   {"type": "stdout"|"stderr", "text", "timestamp"}     output as it comes
 *   {"type": "result", "is_main_result", "text"?, "html"?, "markdown"?,
 *    "svg"?, "png"?, "jpeg"?, "pdf"?, "latex"?, "json"?, "javascript"?,
 *    "data"?}                                            what it displays,
 *                                                        and its last value
 *   {"type": "error", "name", "value", "traceback"}      its exception
 *   {"type": "keepalive"}                                every 5 s
 *   {"type": "end_of_execution"}                         last
 *
 * env_vars are in the kernel's environment while the cell runs, over the
 * sandbox's own (E2B's envVars, from envd's /init). There is
 * no timeout here (the SDK has its own and goes away); a client that goes
 * away gets its cell interrupted (KeyboardInterrupt, state kept), and the
 * kernel restarted if it does not stop within 2 s.
 *
 * Bounds: per cell, --output-cap bytes of stdout, of stderr, and of
 * results (the rest dropped, a note on stderr says how much); the kernel
 * is not read while the client lags a megabyte behind. A cell whose
 * kernel died, was killed or restarted under it ends with an error line
 * (UnexpectedEndOfExecution, or ContextRestarting as E2B's server names
 * a restart).
 */
#include "agent.h"
#include "ci.h"
#include "envd.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "jsonx.h"
#include "kernel.h"
#include "log.h"
#include "utf8.h"
#include "xmalloc.h"

#define CI_STREAM_HIGH (1024 * 1024)	/* stop reading the kernel past this */
#define CI_KEEPALIVE_SECONDS 5
#define CI_ENV_MAX 1024			/* env_vars per run */

/* Fields of a result line: the Result class of E2B's SDK reads these. */
static const struct {
	const char *name;
	int structured;		/* any JSON value; else a string */
} result_fields[] = {
	{ "text", 0 }, { "html", 0 }, { "markdown", 0 }, { "svg", 0 },
	{ "png", 0 }, { "jpeg", 0 }, { "pdf", 0 }, { "latex", 0 },
	{ "json", 1 }, { "javascript", 0 }, { "data", 1 },
};

/* One run; freed when its answer is out or its client left. */
struct ci_run {
	struct http_request *req;
	struct kernel_cell *cell;	/* the kernel's until done runs */
	struct event *keepalive;
	size_t cap;
	size_t sent[3];			/* [1] stdout, [2] stderr, [0] results */
	size_t dropped[3];
	struct utf8_carry carry[3];	/* [1] stdout, [2] stderr */
	int errored;			/* an error line went out */
};

static void
run_free(struct ci_run *run)
{
	event_free(run->keepalive);
	free(run);
}

static int
write_cb(const char *buffer, size_t size, void *data)
{
	return evbuffer_add(data, buffer, size);
}

/* Write a line; steals obj. Results count against their cap. */
static void
emit(struct ci_run *run, json_t *obj, int is_result)
{
	struct evbuffer *line = evbuffer_new();
	size_t len;

	json_dump_callback(obj, write_cb, line, JSON_COMPACT);
	json_decref(obj);
	evbuffer_add(line, "\n", 1);
	len = evbuffer_get_length(line);
	if (is_result && run->sent[0] + len > run->cap) {
		run->dropped[0] += len;
	} else {
		run->sent[0] += is_result ? len : 0;
		http_reply_write_buffer(run->req, line);
		if (run->cell != NULL && http_reply_pending(run->req) >
		    CI_STREAM_HIGH)
			kernel_cell_pause(run->cell, 1);
	}
	evbuffer_free(line);
}

static void
emit_error(struct ci_run *run, const char *name, const char *value,
    const char *traceback)
{
	if (run->errored)
		return;
	run->errored = 1;
	emit(run, json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name",
	    name, "value", value, "traceback", traceback), 0);
}

static json_t *
timestamp(void)
{
	struct timespec now;
	struct tm tm;
	char text[64];

	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	    tm.tm_min, tm.tm_sec, now.tv_nsec / 1000);
	return json_string(text);
}

/* A stdout or stderr line; steals text. */
static void
emit_stream(struct ci_run *run, int stream, json_t *text)
{
	emit(run, json_pack("{s:s, s:o, s:o}", "type", stream == 1 ?
	    "stdout" : "stderr", "text", text, "timestamp", timestamp()), 0);
}

/* Output bytes of a stream: up to the cap, whole UTF-8 sequences only
 * (the pipe cuts anywhere; the rest waits for the next read). */
static void
emit_text(struct ci_run *run, int stream, const char *data, size_t len)
{
	size_t room;
	json_t *text;

	room = run->sent[stream] < run->cap ? run->cap - run->sent[stream] : 0;
	if (len > room) {
		run->dropped[stream] += len - room;
		len = room;
	}
	if (len == 0 && run->carry[stream].n == 0)
		return;
	run->sent[stream] += len;
	if ((text = utf8_carry_json(&run->carry[stream], data, len)) != NULL)
		emit_stream(run, stream, text);
}

/* One line per piece the kernel wrote, as it was read (at most 64 KiB). */
static void
cell_output(int stream, struct evbuffer *buf, void *arg)
{
	struct ci_run *run = arg;
	char piece[64 * 1024];
	int n;

	while ((n = evbuffer_remove(buf, piece, sizeof piece)) > 0)
		emit_text(run, stream, piece, (size_t)n);
}

/* A result frame rebuilt field by field: it comes from code the user
 * controls. NULL if a field is of the wrong type. */
static json_t *
result_line(json_t *result, json_t *main)
{
	json_t *line, *v;

	if (!json_is_object(result) || !json_is_boolean(main))
		return NULL;
	line = json_pack("{s:s, s:O}", "type", "result", "is_main_result",
	    main);
	for (size_t i = 0; i < sizeof result_fields / sizeof result_fields[0];
	    i++) {
		v = json_object_get(result, result_fields[i].name);
		if (v == NULL)
			continue;
		if (!result_fields[i].structured && !json_is_string(v)) {
			json_decref(line);
			return NULL;
		}
		json_object_set(line, result_fields[i].name, v);
	}
	return line;
}

static int
cell_frame(json_t *msg, const char **why, void *arg)
{
	struct ci_run *run = arg;
	json_t *v, *line;
	const char *name, *value, *tb;

	if ((v = json_object_get(msg, "result")) != NULL) {
		if ((line = result_line(v, json_object_get(msg, "main"))) ==
		    NULL) {
			*why = "sent a result that is not an object of strings "
			    "(json and data: any value) and a main flag on fd 3";
			return -1;
		}
		emit(run, line, 1);
	} else if ((v = json_object_get(msg, "error")) != NULL) {
		if (json_unpack(v, "{s:s, s:s, s:s}", "name", &name, "value",
		    &value, "traceback", &tb) < 0) {
			*why = "sent an error without its name, value and "
			    "traceback strings on fd 3";
			return -1;
		}
		emit_error(run, name, value, tb);
	} else if (json_is_true(json_object_get(msg, "started"))) {
		v = json_object_get(msg, "count");
		if (!json_is_integer(v) || json_integer_value(v) < 0) {
			*why = "sent a start without its execution count on fd 3";
			return -1;
		}
		emit(run, json_pack("{s:s, s:O}", "type",
		    "number_of_executions", "execution_count", v), 0);
	} else {
		*why = "sent a frame out of turn";
		return -1;
	}
	return 0;
}

/* What the run left unsaid: output not streamed, bytes over the caps. */
static void
flush_rest(struct ci_run *run, struct kernel_result *res)
{
	static const char *const names[] = { "results", "stdout", "stderr" };
	char *note;

	cell_output(1, res->out, run);
	cell_output(2, res->errout, run);
	for (int s = 1; s <= 2; s++)
		if (run->carry[s].n > 0)
			emit_text(run, s, "", 0);
	for (int s = 0; s <= 2; s++) {
		if (run->dropped[s] == 0)
			continue;
		note = xasprintf("[%s truncated: %zu bytes over the %zu-byte "
		    "limit of one run were dropped]\n", names[s],
		    run->dropped[s], run->cap);
		emit_stream(run, 2, json_string(note));
		free(note);
	}
}

static void
cell_done(struct kernel_result *res, void *arg)
{
	struct ci_run *run = arg;

	run->cell = NULL;
	if (res->err.status != 0) {
		emit_error(run, "UnexpectedEndOfExecution", res->err.msg, "");
	} else {
		flush_rest(run, res);
		if (res->end == KERNEL_END_RESTARTED)
			emit_error(run, "ContextRestarting", res->note, "");
		else if (res->end == KERNEL_END_LOST)
			emit_error(run, "UnexpectedEndOfExecution", res->note,
			    "");
	}
	emit(run, json_pack("{s:s}", "type", "end_of_execution"), 0);
	http_reply_end(run->req);
	kernel_result_free(res);
	run_free(run);
}

static const struct kernel_stream_callbacks callbacks = {
	cell_output, cell_frame, cell_done,
};

static void
drain_cb(struct http_request *req, void *arg)
{
	struct ci_run *run = arg;

	(void)req;
	if (run->cell != NULL)
		kernel_cell_pause(run->cell, 0);
}

static void
keepalive_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	emit(arg, json_pack("{s:s}", "type", "keepalive"), 0);
}

/* The client left: nobody reads the cell's output, so it is interrupted
 * (kernel_abandon), as E2B's server does. */
static void
client_gone(struct http_request *req, void *arg)
{
	struct ci_run *run = arg;

	kernel_abandon(run->cell);
	http_reply_end(req);
	run_free(run);
}

/* env_vars: an object of strings whose names an environment can hold. */
static int
check_env(json_t *env, struct error *err)
{
	const char *key;
	json_t *v;

	if (env == NULL)
		return 0;
	if (!json_is_object(env) || json_object_size(env) > CI_ENV_MAX) {
		error_set(err, 400, "env_vars must be an object of at most %d "
		    "strings", CI_ENV_MAX);
		return -1;
	}
	json_object_foreach(env, key, v) {
		if (key[0] == '\0' || strchr(key, '=') != NULL ||
		    !json_is_string(v)) {
			error_set(err, 400, "env_vars: '%.64s' must be a name "
			    "without '=' whose value is a string", key);
			return -1;
		}
	}
	return 0;
}

void
ci_route_execute(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct timeval tv = { CI_KEEPALIVE_SECONDS, 0 };
	struct error err = { 0 };
	const char *id, *language, *code;
	struct ci_context *ctx;
	struct ci_run *run;
	json_t *body, *env = NULL, *vars = envd_init_vars();

	if ((body = http_request_json(req, &err)) == NULL ||
	    jsonx_get_string(body, "code", 1, &code, &err) < 0 ||
	    jsonx_get_string(body, "context_id", 0, &id, &err) < 0 ||
	    jsonx_get_string(body, "language", 0, &language, &err) < 0 ||
	    jsonx_get_object(body, "env_vars", 0, &env, &err) < 0 ||
	    check_env(env, &err) < 0)
		goto fail;
	if (id != NULL && language != NULL) {
		error_set(&err, 400, "give context_id or language, not both");
		goto fail;
	}
	if (ci_language_check(language, &err) < 0)
		goto fail;
	if (id != NULL && (ctx = ci_context_find(agent->ci, id)) == NULL) {
		error_set(&err, 404, "context %.64s not found", id);
		goto fail;
	}
	if (id == NULL && (ctx = ci_context_default(agent->ci, &err)) == NULL)
		goto fail;
	/* The sandbox's variables are in every run, as in every process of
	 * envd's (the reference server reads /envs into each context); the
	 * run's own win. */
	if (vars != NULL && json_object_size(vars) > 0) {
		vars = json_deep_copy(vars);
		if (env != NULL)
			json_object_update(vars, env);
		env = vars;
	} else {
		vars = NULL;
	}
	run = xcalloc(1, sizeof *run);
	run->req = req;
	run->cap = agent->cfg.output_cap > 0 ? agent->cfg.output_cap :
	    SIZE_MAX;
	run->cell = kernel_run_streamed(ctx->k, json_object_get(body, "code"),
	    env, &callbacks, run, &err);
	json_decref(vars);
	if (run->cell == NULL) {
		free(run);
		goto fail;
	}
	json_decref(body);
	http_reply_start(req, 200, "application/x-ndjson", -1);
	http_request_on_close(req, client_gone, run);
	http_request_on_drain(req, drain_cb, run);
	run->keepalive = event_new(agent->base, -1, EV_PERSIST, keepalive_cb,
	    run);
	event_add(run->keepalive, &tv);
	return;
fail:
	json_decref(body);
	http_reply_err(req, &err);
}
