/*
 * The streaming proxy: /proxy/{identity}/{path} (and our
 * /v1/sandboxes/{id}/agent/{path}) forward a request to the sandbox's agent
 * over its unix socket with the sandbox's own token, and stream the answer
 * back. Bodies flow both ways piece by piece with backpressure on each
 * side (the client is not read while the agent lags, the agent is not read
 * while the client lags), so a 1 GiB upload costs a megabyte or two here.
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

/* One proxied exchange. Freed when the reply to the client is finished
 * (which also ends the server's callbacks) and the agent's request is over. */
struct proxy {
	struct http_request *req;
	struct http_client_request *up;
	char *sb_name;
	char **headers;		/* "Name: value", NULL-terminated */
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
	free(p);
}

static void
head_cb(struct http_client_request *r, int status, void *arg)
{
	struct proxy *p = arg;
	const char *ct = NULL, *name, *value, *cl;
	int64_t len = -1;

	for (size_t i = 0; i < http_client_header_count(r); i++) {
		http_client_header_at(r, i, &name, &value);
		if (strcasecmp(name, "Content-Type") == 0)
			ct = value;
		else if (!skip_header(name) && strcasecmp(name, "Server") != 0 &&
		    strcasecmp(name, "Date") != 0)
			http_reply_add_header(p->req, name, value);
	}
	cl = http_client_header(r, "Content-Length");
	if (cl != NULL && http_client_header(r, "Transfer-Encoding") == NULL) {
		char *end;
		long long n = strtoll(cl, &end, 10);

		if (*end == '\0' && n >= 0)
			len = (int64_t)n;
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
		error_prefix(&e, "proxy to %s", p->sb_name);
		http_reply_err(p->req, &e);
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

static int
usable(struct http_request *req, struct sandbox *sb)
{
	switch (sb->state) {
	case SB_WARM:
	case SB_RUNNING:
	case SB_UNHEALTHY:
		return 1;
	case SB_RELEASED:
	case SB_RELEASING:
		http_reply_error(req, 409, "sandbox %s is released", sb->name);
		return 0;
	default:
		http_reply_error(req, 409, "sandbox %s is %s", sb->name,
		    sandbox_state_name(sb->state));
		return 0;
	}
}

void
proxy_forward(struct http_request *req, struct sandbox *sb,
    const char *target)
{
	struct http_client_options opts = { 0 };
	struct http_client_callbacks cb = { 0 };
	struct proxy *p;
	size_t n = 0, nh = http_request_header_count(req);
	int64_t clen = http_request_content_length(req);
	int has_body;
	struct error err;

	if (!usable(req, sb))
		return;
	sessions_touch_sandbox(sb);
	metrics_count(M_PROXIED, sb->type_name);
	p = xcalloc(1, sizeof *p);
	p->req = req;
	p->sb_name = xstrdup(sb->name);
	p->headers = xcalloc(nh + 2, sizeof *p->headers);
	for (size_t i = 0; i < nh; i++) {
		const char *name, *value;

		http_request_header_at(req, i, &name, &value);
		if (!skip_header(name))
			p->headers[n++] = xasprintf("%s: %s", name, value);
	}
	p->headers[n++] = xasprintf("Authorization: Bearer %s", sb->token);

	has_body = clen > 0 ||
	    http_request_header(req, "Transfer-Encoding") != NULL;
	opts.addr = sb->agent_addr;
	opts.method = http_request_method_name(req);
	opts.target = target;
	opts.headers = (const char *const *)p->headers;
	opts.timeout = sd.cfg.proxy_timeout;
	if (has_body) {
		opts.stream_body = 1;
		opts.body_length = clen > 0 ? clen : -1;
	} else if (clen == 0) {
		opts.body = "";
		opts.body_len = 0;
	}
	cb.on_head = head_cb;
	cb.on_body = answer_body_cb;
	cb.on_done = done_cb;
	cb.on_drain = upload_drain_cb;
	p->up = http_client_start(sd.base, &opts, &cb, p, &err);
	if (p->up == NULL) {
		error_prefix(&err, "proxy to %s", sb->name);
		http_reply_err(req, &err);
		proxy_free(p);
		return;
	}
	http_request_on_close(req, client_gone_cb, p);
	http_request_on_drain(req, reply_drain_cb, p);
	if (has_body)
		http_request_on_body(req, request_body_cb, request_end_cb, p);
}

/* GET|POST|PUT|DELETE|PATCH /proxy/{identity}/{path} */
void
proxy_route(struct http_request *req, void *arg)
{
	const char *raw = http_request_raw_target(req);
	struct sandbox *sb;
	char *identity, *target;
	size_t idlen = 0;

	(void)arg;
	/* The route matched the decoded path; the raw one (kept as sent for
	 * the agent) must spell the prefix plainly too. */
	if (strncmp(raw, "/proxy/", 7) == 0) {
		raw += 7;
		idlen = strcspn(raw, "/?");
	}
	if (idlen == 0 || http_percent_decode(raw, idlen, 0, &identity) < 0) {
		/* Before auth: nothing of the client's in the answer. */
		http_reply_error(req, 404, "no sandbox named in the path");
		return;
	}
	sb = sandbox_find(identity);
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
	raw += idlen;
	target = *raw == '/' ? xstrdup(raw) : xasprintf("/%s", raw);
	proxy_forward(req, sb, target);
	free(target);
}
