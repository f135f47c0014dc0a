/*
 * Calls from sandboxd to a sandbox's agent, over its unix socket with its
 * token: small JSON exchanges (list_tools, check_health's cousins) and the
 * relay that answers a spec RPC with the agent's own answer wrapped in
 * {"data": ...}, streamed through without parsing, so a 16 MiB command
 * output costs neither a parse nor a copy of the whole.
 *
 * How long a call may go without progress: SANDBOXD_PROXY_TIMEOUT, except
 * for the calls that carry their own "timeout" (commands, IPython cells,
 * MCP tool calls). A plain command says nothing until it ends, and the
 * agent ends it at that timeout (at most a week) and answers; a clock
 * shorter than the caller's would kill work the caller asked for, so the
 * relay waits that long plus a margin for the answer to come back.
 *
 * A probe asks the agent for /healthz with its token (a create waits for
 * it, the health rounds and adoption ask it); its reason, when it says it
 * is not healthy, is kept short and printable.
 *
 * agent_call_json and agent_probe answer through their callbacks, always
 * after they returned, also when the call cannot even start (defer.c).
 */
#include "sandboxd.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "http_client.h"
#include "log.h"
#include "xmalloc.h"

#define RELAY_HIGH_WATER (1024 * 1024)
#define ERROR_BODY_MAX (64 * 1024)
/* {"data": and } around the agent's answer. */
#define RELAY_WRAP_LEN 9
/* No agent's JSON answer comes near this (command output is capped at
 * megabytes); one that announces more is broken or hostile. */
#define RELAY_MAX_ANSWER ((int64_t)1 << 40)
/* The longest "timeout" the agent takes, and how long after it fires
 * its answer may take (an IPython cell is interrupted, then killed). */
#define AGENT_MAX_TIMEOUT (7 * 24 * 3600.0)
/* Characters of an agent's reason that a failed probe keeps. */
#define PROBE_DETAIL_MAX 200
#define TIMEOUT_MARGIN 60.0

/* One agent_call_json in flight; holds a reference to sb. */
struct agent_call {
	struct sandbox *sb;
	agent_json_cb done;
	void *arg;
	struct http_client_request *up;	/* NULL: refused, answer deferred */
	struct error err;	/* a call that could not start */
	int cancelled;		/* refused, then cancelled before the answer */
};

/* One relay in flight. Freed once the reply is finished and the agent's
 * request is over (done or cancelled). */
struct relay {
	struct http_request *req;
	struct http_client_request *up;
	char *what;
	char *sb_name;
	char *agent_addr;	/* left out of messages */
	int streaming;
	int status;
	struct evbuffer *buf;	/* the body of an answer we do not stream */
};

static void
json_call_cb(int status, json_t *answer, const struct error *err, void *arg)
{
	struct agent_call *c = arg;
	struct error e;

	if (err != NULL) {
		e = *err;
		redact_error(&e, c->sb->agent_addr);
		err = &e;
	}
	c->done(c->sb, status, answer, err, c->arg);
	sandbox_unref(c->sb);
	free(c);
}

/* The call could not start: its error, from the loop (the contract). */
static void
json_call_refused_cb(evutil_socket_t fd, short what, void *arg)
{
	struct agent_call *c = arg;

	(void)fd;
	(void)what;
	if (!c->cancelled)
		c->done(c->sb, 0, NULL, &c->err, c->arg);
	sandbox_unref(c->sb);
	free(c);
}

char *
agent_target(const struct sandbox *sb, const char *target)
{
	if (sb->via_owner)
		return xasprintf("/proxy/%s%s", sb->name, target);
	return xstrdup(target);
}

struct agent_call *
agent_call_json(struct sandbox *sb, const char *method, const char *target,
    json_t *body, double timeout, agent_json_cb done, void *arg)
{
	struct agent_call *c = xcalloc(1, sizeof *c);
	char *auth = xasprintf("Authorization: Bearer %s", sb->token);
	const char *headers[] = { auth, NULL };
	char *up_target = agent_target(sb, target);

	c->sb = sb;
	c->done = done;
	c->arg = arg;
	sandbox_ref(sb);
	c->up = http_client_json(sd.base, sb->agent_addr, method, up_target,
	    headers, body, timeout, json_call_cb, c, &c->err);
	explicit_bzero(auth, strlen(auth));
	free(auth);
	free(up_target);
	if (c->up == NULL) {
		redact_error(&c->err, sb->agent_addr);
		sandboxd_defer(json_call_refused_cb, c);
	}
	return c;
}

/* Closing the connection is what stops the work at the agent: it kills a
 * command whose client went away, and interrupts an IPython cell. */
void
agent_call_cancel(struct agent_call *c)
{
	if (c->up == NULL) {
		/* The deferred refusal frees it, without a word. */
		c->cancelled = 1;
		return;
	}
	http_client_json_cancel(c->up);
	sandbox_unref(c->sb);
	free(c);
}

static void
relay_free(struct relay *rl)
{
	free(rl->what);
	free(rl->sb_name);
	free(rl->agent_addr);
	if (rl->buf != NULL)
		evbuffer_free(rl->buf);
	free(rl);
}

/* The agent's complaint, as its {"detail": ...} or its text. */
static void
agent_error(struct relay *rl, struct error *err)
{
	size_t len = evbuffer_get_length(rl->buf);
	const char *text = (const char *)evbuffer_pullup(rl->buf, -1);
	json_t *j = len > 0 ? json_loadb(text, len, 0, NULL) : NULL;
	const char *detail = json_string_value(json_object_get(j, "detail"));
	int status = rl->status;

	/* The agent refusing our token, or failing itself, is not the
	 * client's fault. */
	if (status < 400 || status == 401 || status == 403 || status >= 500)
		status = 502;
	if (detail != NULL)
		error_set(err, status, "the agent of %s answered HTTP %d: %s",
		    rl->sb_name, rl->status, detail);
	else
		error_set(err, status, "the agent of %s answered HTTP %d: %.*s",
		    rl->sb_name, rl->status, (int)(len > 200 ? 200 : len),
		    len > 0 ? text : "");
	json_decref(j);
}

int
agent_takes_timeout(const char *target)
{
	static const char *const routes[] = { "/tools/run_shell_command",
	    "/tools/run_ipython_cell", "/mcp/call_tool" };
	char *path;
	const char *p;
	int yes = 0;

	if (http_percent_decode(target, strcspn(target, "?"), 0, &path) < 0)
		return 0;
	p = path;
	if (strncmp(p, "/fastapi/", 9) == 0)
		p += 8;
	for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
		yes |= strcmp(p, routes[i]) == 0;
	free(path);
	return yes;
}

double
agent_call_timeout(const char *target, json_t *body)
{
	json_t *t = json_object_get(body, "timeout");
	double asked;

	if (!agent_takes_timeout(target))
		return sd.cfg.proxy_timeout;
	if (body == NULL)
		asked = AGENT_MAX_TIMEOUT;
	else if (json_is_number(t) && json_number_value(t) > 0)
		asked = json_number_value(t) < AGENT_MAX_TIMEOUT ?
		    json_number_value(t) : AGENT_MAX_TIMEOUT;
	else
		return sd.cfg.proxy_timeout;
	return asked + TIMEOUT_MARGIN > sd.cfg.proxy_timeout ?
	    asked + TIMEOUT_MARGIN : sd.cfg.proxy_timeout;
}

int
agent_answer_length(struct http_client_request *r, int64_t max, int64_t *len)
{
	const char *cl = http_client_header(r, "Content-Length");
	int64_t n = 0;

	*len = -1;
	if (cl == NULL || http_client_header(r, "Transfer-Encoding") != NULL)
		return 0;
	if (*cl == '\0')
		return -1;
	for (; *cl != '\0'; cl++) {
		if (*cl < '0' || *cl > '9' || n > (max - (*cl - '0')) / 10)
			return -1;
		n = n * 10 + (*cl - '0');
	}
	*len = n;
	return 0;
}

static void
relay_head_cb(struct http_client_request *r, int status, void *arg)
{
	struct relay *rl = arg;
	const char *ct = http_client_header(r, "Content-Type");
	struct error e;
	int64_t len;

	rl->status = status;
	if (status != 200 || ct == NULL ||
	    strncasecmp(ct, "application/json", 16) != 0)
		return;
	if (agent_answer_length(r, RELAY_MAX_ANSWER, &len) < 0) {
		error_set(&e, 502, "the agent of %s announced an answer of "
		    "%.40s bytes", rl->sb_name,
		    http_client_header(r, "Content-Length"));
		http_client_cancel(r);
		rl->up = NULL;
		api_reply_rpc_error(rl->req, rl->what, &e);
		relay_free(rl);
		return;
	}
	rl->streaming = 1;
	if (len >= 0)
		len += RELAY_WRAP_LEN;
	http_reply_start(rl->req, 200, "application/json", len);
	http_reply_write(rl->req, "{\"data\":", 8);
}

static void
relay_drain_cb(struct http_request *req, void *arg)
{
	struct relay *rl = arg;

	(void)req;
	if (rl->up != NULL && http_reply_pending(rl->req) < RELAY_HIGH_WATER / 2)
		http_client_resume(rl->up);
}

static void
relay_body_cb(struct http_client_request *r, const char *data, size_t len,
    void *arg)
{
	struct relay *rl = arg;

	if (rl->streaming) {
		http_reply_write(rl->req, data, len);
		if (http_reply_pending(rl->req) > RELAY_HIGH_WATER)
			http_client_pause(r);
		return;
	}
	if (evbuffer_get_length(rl->buf) + len <= ERROR_BODY_MAX)
		evbuffer_add(rl->buf, data, len);
}

static void
relay_done_cb(struct http_client_request *r, const struct error *err,
    void *arg)
{
	struct relay *rl = arg;
	struct error e;

	(void)r;
	rl->up = NULL;
	if (rl->streaming) {
		if (err != NULL) {
			http_reply_abort(rl->req);
		} else {
			http_reply_write(rl->req, "}", 1);
			http_reply_end(rl->req);
		}
	} else if (err != NULL) {
		e = *err;
		redact_error(&e, rl->agent_addr);
		error_prefix(&e, "the agent of %s", rl->sb_name);
		api_reply_rpc_error(rl->req, rl->what, &e);
	} else if (rl->status == 200) {
		size_t len = evbuffer_get_length(rl->buf);
		json_t *text = json_stringn((const char *)
		    evbuffer_pullup(rl->buf, -1), len);

		http_reply_json(rl->req, 200, json_pack("{s:o}", "data",
		    text != NULL ? text : json_string("")));
	} else {
		agent_error(rl, &e);
		api_reply_rpc_error(rl->req, rl->what, &e);
	}
	relay_free(rl);
}

static void
relay_close_cb(struct http_request *req, void *arg)
{
	struct relay *rl = arg;

	if (rl->up != NULL)
		http_client_cancel(rl->up);
	rl->up = NULL;
	/* The client is gone: this reply only frees the request. */
	if (rl->streaming)
		http_reply_end(req);
	else
		http_reply_empty(req, 499);
	relay_free(rl);
}

void
agent_relay(struct http_request *req, struct sandbox *sb, const char *target,
    json_t *body, const char *what)
{
	struct http_client_options opts = { 0 };
	struct http_client_callbacks cb = { 0 };
	struct relay *rl = xcalloc(1, sizeof *rl);
	char *auth = xasprintf("Authorization: Bearer %s", sb->token);
	const char *headers[] = { auth, "Content-Type: application/json",
	    NULL };
	char *text = json_dumps(body, JSON_COMPACT);
	char *up_target = agent_target(sb, target);
	struct error err;

	rl->req = req;
	rl->what = xstrdup(what);
	rl->sb_name = xstrdup(sb->name);
	rl->agent_addr = xstrdup(sb->agent_addr);
	rl->buf = evbuffer_new();
	opts.addr = sb->agent_addr;
	opts.method = "POST";
	opts.target = up_target;
	opts.headers = headers;
	opts.body = text;
	opts.body_len = strlen(text);
	opts.timeout = agent_call_timeout(target, body);
	cb.on_head = relay_head_cb;
	cb.on_body = relay_body_cb;
	cb.on_done = relay_done_cb;
	rl->up = http_client_start(sd.base, &opts, &cb, rl, &err);
	explicit_bzero(auth, strlen(auth));
	free(auth);
	free(text);
	free(up_target);
	if (rl->up == NULL) {
		redact_error(&err, sb->agent_addr);
		api_reply_rpc_error(req, what, &err);
		relay_free(rl);
		return;
	}
	http_request_on_close(req, relay_close_cb, rl);
	http_request_on_drain(req, relay_drain_cb, rl);
}

/* One probe in flight; holds a reference to its sandbox. */
struct probe {
	struct sandbox *sb;
	agent_probe_cb done;
	void *arg;
	char *auth;
	struct error err;	/* a probe that could not start */
};

/* Why the agent says it is not healthy (a desktop not drawn yet...): its
 * answer's "detail", printable ASCII and short (it goes into our log and
 * the model's "error"), or "". */
static void
agent_detail(struct http_client_request *r, char *out, size_t size)
{
	struct evbuffer *body = http_client_body(r);
	size_t len = body != NULL ? evbuffer_get_length(body) : 0;
	json_t *j = len > 0 ? json_loadb((const char *)evbuffer_pullup(body,
	    -1), len, 0, NULL) : NULL;
	const char *detail = json_string_value(json_object_get(j, "detail"));
	size_t n = 0;

	for (; detail != NULL && *detail != '\0' && n + 1 < size &&
	    n < PROBE_DETAIL_MAX; detail++) {
		if (*detail >= 0x20 && *detail < 0x7f)
			out[n++] = *detail;
	}
	out[n] = '\0';
	json_decref(j);
}

static void
probe_done_cb(struct http_client_request *r, const struct error *err,
    void *arg)
{
	struct probe *p = arg;
	char why[ERROR_MSG_MAX] = "", detail[PROBE_DETAIL_MAX + 1];
	int ok = 0;

	if (err != NULL) {
		struct error e = *err;

		redact_error(&e, p->sb->agent_addr);
		snprintf(why, sizeof why, "%s", e.msg);
	} else if (http_client_status(r) != 200) {
		agent_detail(r, detail, sizeof detail);
		snprintf(why, sizeof why, "/healthz answered HTTP %d%s%s",
		    http_client_status(r), *detail != '\0' ? ": " : "", detail);
	} else {
		ok = 1;
	}
	p->done(p->sb, ok, why, p->arg);
	sandbox_unref(p->sb);
	free(p->auth);
	free(p);
}

/* The probe could not start: its error, from the loop (the contract). */
static void
probe_refused_cb(evutil_socket_t fd, short what, void *arg)
{
	struct probe *p = arg;

	(void)fd;
	(void)what;
	p->done(p->sb, 0, p->err.msg, p->arg);
	sandbox_unref(p->sb);
	free(p->auth);
	free(p);
}

void
agent_probe(struct sandbox *sb, double timeout, agent_probe_cb done,
    void *arg)
{
	struct http_client_options opts = { 0 };
	struct http_client_callbacks cb = { 0 };
	struct probe *p = xcalloc(1, sizeof *p);
	const char *headers[2];
	char *target = agent_target(sb, "/healthz");

	p->sb = sb;
	p->done = done;
	p->arg = arg;
	p->auth = xasprintf("Authorization: Bearer %s", sb->token);
	headers[0] = p->auth;
	headers[1] = NULL;
	opts.addr = sb->agent_addr;
	opts.method = "GET";
	opts.target = target;
	opts.headers = headers;
	opts.timeout = timeout;
	opts.max_response = 4096;
	cb.on_done = probe_done_cb;
	sandbox_ref(sb);
	if (http_client_start(sd.base, &opts, &cb, p, &p->err) == NULL) {
		redact_error(&p->err, sb->agent_addr);
		sandboxd_defer(probe_refused_cb, p);
	}
	free(target);
}
