/*
 * The streaming proxy: /proxy/{identity}/{path} (and our
 * /v1/sandboxes/{id}/agent/{path}) forward a request to the sandbox's agent
 * over its unix socket with the sandbox's own token, and stream the answer
 * back. Bodies flow both ways piece by piece with backpressure on each
 * side (the client is not read while the agent lags, the agent is not read
 * while the client lags), so a 1 GiB upload costs a megabyte or two here.
 *
 * A tool call (a POST to an agent route that takes a "timeout") of up to
 * PROXY_HOLD_MAX is read whole first, so that the agent is given as long
 * as the call asks for (agent_call_timeout); a larger or chunked one is
 * streamed and given the agent's longest.
 *
 * Auth: the route carries no server-side auth; here either sandboxd's
 * BEARER_TOKEN or the sandbox's own runtime_token lets a request through,
 * which is what makes a sandbox without network reachable by url.
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

#define PROXY_HIGH_WATER (1024 * 1024)
#define PROXY_HOLD_MAX (1024 * 1024)

/* One proxied exchange. Freed when the reply to the client is finished
 * (which also ends the server's callbacks) and the agent's request is over. */
struct proxy {
	struct http_request *req;
	struct http_client_request *up;
	char *sb_name;
	char *agent_addr;	/* left out of messages */
	char *target;		/* the agent's */
	char *up_target;	/* sent to agent_addr (agent_target) */
	char **headers;		/* "Name: value", NULL-terminated */
	struct evbuffer *held;	/* a tool call's body, read whole first */
	int replying;		/* the agent's head has been passed on */
	int body_paused;
};

static const char *const hop_by_hop[] = {
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"TE", "Trailer", "Transfer-Encoding", "Upgrade", "Host",
	"Content-Length", "Expect", "Authorization",
};

static int
skip_header(const char *name)
{
	for (size_t i = 0; i < sizeof hop_by_hop / sizeof hop_by_hop[0]; i++) {
		if (strcasecmp(name, hop_by_hop[i]) == 0)
			return 1;
	}
	return 0;
}

int
proxy_authorized(struct http_request *req, const struct sandbox *sb)
{
	const char *h;

	if (sd.cfg.bearer_token == NULL)
		return 1;
	h = http_request_header(req, "Authorization");
	if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0)
		return 0;
	h += 7;
	while (*h == ' ')
		h++;
	if (http_token_equal(h, sd.cfg.bearer_token))
		return 1;
	return sb != NULL && http_token_equal(h, sb->token);
}

static void
proxy_free(struct proxy *p)
{
	for (size_t i = 0; p->headers != NULL && p->headers[i] != NULL; i++)
		free(p->headers[i]);
	free(p->headers);
	free(p->sb_name);
	free(p->agent_addr);
	free(p->target);
	free(p->up_target);
	if (p->held != NULL)
		evbuffer_free(p->held);
	free(p);
}

static void
head_cb(struct http_client_request *r, int status, void *arg)
{
	struct proxy *p = arg;
	const char *ct = NULL, *name, *value;
	struct error e;
	int64_t len;

	if (agent_answer_length(r, INT64_MAX, &len) < 0) {
		error_set(&e, 502, "proxy to %s: the agent announced an answer "
		    "of %.40s bytes", p->sb_name,
		    http_client_header(r, "Content-Length"));
		http_client_cancel(r);
		p->up = NULL;
		sandboxd_reply_error(p->req, &e);
		proxy_free(p);
		return;
	}
	for (size_t i = 0; i < http_client_header_count(r); i++) {
		http_client_header_at(r, i, &name, &value);
		if (strcasecmp(name, "Content-Type") == 0)
			ct = value;
		else if (!skip_header(name) && strcasecmp(name, "Server") != 0 &&
		    strcasecmp(name, "Date") != 0)
			http_reply_add_header(p->req, name, value);
	}
	p->replying = 1;
	http_reply_start(p->req, status, ct, len);
}

static void
reply_drain_cb(struct http_request *req, void *arg)
{
	struct proxy *p = arg;

	if (p->up != NULL && http_reply_pending(req) < PROXY_HIGH_WATER / 2)
		http_client_resume(p->up);
}

static void
answer_body_cb(struct http_client_request *r, const char *data, size_t len,
    void *arg)
{
	struct proxy *p = arg;

	http_reply_write(p->req, data, len);
	if (http_reply_pending(p->req) > PROXY_HIGH_WATER)
		http_client_pause(r);
}

static void
done_cb(struct http_client_request *r, const struct error *err, void *arg)
{
	struct proxy *p = arg;

	(void)r;
	p->up = NULL;
	if (!p->replying) {
		struct error e;

		if (err != NULL)
			e = *err;
		else
			error_set(&e, 502, "no answer");
		redact_error(&e, p->agent_addr);
		error_prefix(&e, "proxy to %s", p->sb_name);
		sandboxd_reply_error(p->req, &e);
	} else if (err != NULL) {
		log_warn("proxy to %s: %s", p->sb_name, err->msg);
		http_reply_abort(p->req);
	} else {
		http_reply_end(p->req);
	}
	proxy_free(p);
}

static void
upload_drain_cb(struct http_client_request *r, void *arg)
{
	struct proxy *p = arg;

	if (p->body_paused && http_client_pending(r) < PROXY_HIGH_WATER / 2) {
		p->body_paused = 0;
		http_request_resume_body(p->req);
	}
}

static int
request_body_cb(struct http_request *req, const char *data, size_t len,
    void *arg)
{
	struct proxy *p = arg;

	/* The agent already answered (and the reply is under way): the
	 * rest of the upload has nowhere to go. */
	if (p->up == NULL)
		return -1;
	http_client_write(p->up, data, len);
	if (http_client_pending(p->up) > PROXY_HIGH_WATER && !p->body_paused) {
		p->body_paused = 1;
		http_request_pause_body(req);
	}
	return 0;
}

static void
request_end_cb(struct http_request *req, void *arg)
{
	struct proxy *p = arg;

	(void)req;
	if (p->up != NULL)
		http_client_end(p->up);
}

static void
client_gone_cb(struct http_request *req, void *arg)
{
	struct proxy *p = arg;

	if (p->up != NULL)
		http_client_cancel(p->up);
	p->up = NULL;
	if (p->replying)
		http_reply_end(req);
	else
		http_reply_empty(req, 499);
	proxy_free(p);
}

/* Send the request on: with body (copied) or, when stream, a body the
 * client's piece by piece (stream_len, -1 chunked); none when neither. */
static int
start_upstream(struct proxy *p, const void *body, size_t body_len, int stream,
    int64_t stream_len, double timeout)
{
	struct http_client_options opts = { 0 };
	struct http_client_callbacks cb = { 0 };
	struct error err;

	opts.addr = p->agent_addr;
	opts.method = http_request_method_name(p->req);
	opts.target = p->up_target;
	opts.headers = (const char *const *)p->headers;
	opts.timeout = timeout;
	opts.body = body;
	opts.body_len = body_len;
	opts.stream_body = stream;
	opts.body_length = stream_len;
	cb.on_head = head_cb;
	cb.on_body = answer_body_cb;
	cb.on_done = done_cb;
	cb.on_drain = upload_drain_cb;
	p->up = http_client_start(sd.base, &opts, &cb, p, &err);
	if (p->up == NULL) {
		redact_error(&err, p->agent_addr);
		error_prefix(&err, "proxy to %s", p->sb_name);
		sandboxd_reply_error(p->req, &err);
		proxy_free(p);
		return -1;
	}
	return 0;
}

static int
held_body_cb(struct http_request *req, const char *data, size_t len,
    void *arg)
{
	struct proxy *p = arg;

	(void)req;
	evbuffer_add(p->held, data, len);
	return 0;
}

static void
held_end_cb(struct http_request *req, void *arg)
{
	struct proxy *p = arg;
	size_t len = evbuffer_get_length(p->held);
	const char *body = (const char *)evbuffer_pullup(p->held, -1);
	json_t *j = json_loadb(body, len, 0, NULL);
	double timeout;

	(void)req;
	/* Not JSON: the agent refuses it at once. */
	if (j == NULL)
		j = json_object();
	timeout = agent_call_timeout(p->target, j);
	json_decref(j);
	start_upstream(p, body != NULL ? body : "", len, 0, 0, timeout);
}

static int
listed(const char *const *names, const char *name)
{
	for (; names != NULL && *names != NULL; names++) {
		if (strcasecmp(*names, name) == 0)
			return 1;
	}
	return 0;
}

void
proxy_forward(struct http_request *req, struct sandbox *sb,
    const char *target)
{
	proxy_forward_with(req, sb, target, NULL);
}

void
proxy_forward_with(struct http_request *req, struct sandbox *sb,
    const char *target, const struct proxy_headers *h)
{
	const char *const *drop = h != NULL ? h->drop : NULL;
	const char *const *add = h != NULL ? h->add : NULL;
	struct proxy *p;
	size_t n = 0, nh = http_request_header_count(req), nadd = 0;
	int64_t clen = http_request_content_length(req);
	int has_body;
	struct error err;

	if (sandbox_check_callable(sb, &err) < 0) {
		sandboxd_reply_error(req, &err);
		return;
	}
	sessions_touch_sandbox(sb);
	metrics_count(M_PROXIED, sb->type_name);
	p = xcalloc(1, sizeof *p);
	p->req = req;
	p->sb_name = xstrdup(sb->name);
	p->agent_addr = xstrdup(sb->agent_addr);
	p->target = xstrdup(target);
	p->up_target = agent_target(sb, target);
	while (add != NULL && add[nadd] != NULL)
		nadd++;
	p->headers = xcalloc(nh + nadd + 2, sizeof *p->headers);
	for (size_t i = 0; i < nh; i++) {
		const char *name, *value;

		http_request_header_at(req, i, &name, &value);
		if (!skip_header(name) && !listed(drop, name))
			p->headers[n++] = xasprintf("%s: %s", name, value);
	}
	for (size_t i = 0; i < nadd; i++)
		p->headers[n++] = xstrdup(add[i]);
	p->headers[n++] = xasprintf("Authorization: Bearer %s", sb->token);
	http_request_on_close(req, client_gone_cb, p);
	http_request_on_drain(req, reply_drain_cb, p);

	has_body = clen > 0 ||
	    http_request_header(req, "Transfer-Encoding") != NULL;
	if (!has_body) {
		start_upstream(p, clen == 0 ? "" : NULL, 0, 0, 0,
		    sd.cfg.proxy_timeout);
	} else if (http_request_method(req) == HTTP_METHOD_POST &&
	    clen > 0 && clen <= PROXY_HOLD_MAX && agent_takes_timeout(target)) {
		p->held = evbuffer_new();
		http_request_on_body(req, held_body_cb, held_end_cb, p);
	} else if (start_upstream(p, NULL, 0, 1, clen > 0 ? clen : -1,
	    agent_call_timeout(target, NULL)) == 0) {
		http_request_on_body(req, request_body_cb, request_end_cb, p);
	}
}

/* GET|POST|PUT|DELETE|PATCH /proxy/{identity}/{path} */
void
proxy_route(struct http_request *req, void *arg)
{
	struct sandbox *sb;
	const char *rest;
	char *identity, *target;

	(void)arg;
	sb = sandbox_from_path(req, "/proxy/", &identity, &rest);
	if (identity == NULL) {
		/* Before auth: nothing of the client's in the answer. */
		http_reply_error(req, 404, "no sandbox named in the path");
		return;
	}
	if (!proxy_authorized(req, sb)) {
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
	target = *rest == '/' ? xstrdup(rest) : xasprintf("/%s", rest);
	proxy_forward(req, sb, target);
	free(target);
}
