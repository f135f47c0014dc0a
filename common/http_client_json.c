/* http_client_json: a JSON request whose answer is parsed as JSON. */
#include "http_client.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "xmalloc.h"

struct json_call {
	http_client_json_cb done;
	void *arg;
};

static void
json_done_cb(struct http_client_request *r, const struct error *err,
    void *arg)
{
	struct json_call *call = arg;
	json_t *answer = NULL;

	if (err == NULL) {
		struct evbuffer *body = http_client_body(r);
		size_t len = evbuffer_get_length(body);

		if (len > 0)
			answer = json_loadb((const char *)evbuffer_pullup(body,
			    -1), len, JSON_DECODE_ANY, NULL);
	}
	call->done(err == NULL ? http_client_status(r) : 0, answer, err,
	    call->arg);
	json_decref(answer);
	free(call);
}

struct http_client_request *
http_client_json(struct event_base *base, const char *addr,
    const char *method, const char *target, const char *const *headers,
    json_t *body, double timeout, http_client_json_cb done, void *arg,
    struct error *err)
{
	static const struct http_client_callbacks cb = {
		.on_done = json_done_cb,
	};
	struct http_client_options o = {
		.addr = addr,
		.method = method,
		.target = target,
		.timeout = timeout,
	};
	const char **all = NULL;
	struct http_client_request *r;
	struct json_call *call;
	char *text = NULL;
	size_t n = 0, i = 0;
	int typed = 0;

	if (done == NULL) {
		error_set(err, 400, "HTTP request to %s: no callback", addr);
		return NULL;
	}
	while (headers != NULL && headers[n] != NULL)
		n++;
	if (body != NULL) {
		text = json_dumps(body, JSON_COMPACT);
		if (text == NULL) {
			error_set(err, 400, "HTTP request to %s: body cannot be "
			    "serialized as JSON", addr);
			return NULL;
		}
		o.body = text;
		o.body_len = strlen(text);
	}
	all = xcalloc(n + 2, sizeof *all);
	for (i = 0; i < n; i++) {
		all[i] = headers[i];
		if (strncasecmp(headers[i], "Content-Type:", 13) == 0)
			typed = 1;
	}
	if (body != NULL && !typed)
		all[i++] = "Content-Type: application/json";
	all[i] = NULL;
	o.headers = all;
	call = xmalloc(sizeof *call);
	call->done = done;
	call->arg = arg;
	r = http_client_start(base, &o, &cb, call, err);
	if (r == NULL)
		free(call);
	free(all);
	free(text);
	return r;
}

void
http_client_json_cancel(struct http_client_request *r)
{
	struct json_call *call;

	if (r == NULL)
		return;
	call = http_client_arg(r);
	/* From its own done callback, json_done_cb frees the call. */
	if (http_client_cancel(r))
		free(call);
}
