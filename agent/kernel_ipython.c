/*
 * POST /tools/run_ipython_cell {"code", "timeout"?}
 *
 * Runs the code in the agent's one stateful IPython kernel (kernel.c) and
 * answers an MCP result: stdout (the cell's output, then the value of its
 * last expression as IPython shows it, without the Out[n] prompt), stderr
 * when not empty (tracebacks, and our notes on timeouts and a kernel that
 * died), then one image item per picture the cell displayed. isError is
 * stderr not empty. Cells run one at a time, in the order they came.
 *
 * "timeout" (seconds, default --timeout) counts from when the cell starts
 * to run. Past it the cell is interrupted (KeyboardInterrupt; the state is
 * kept); if it does not stop within 2 seconds the kernel is killed and
 * restarted. A kernel that died or was killed still answers 200 with an
 * MCP result whose stderr says what happened (isError true): an agent can
 * read that and go on, where an HTTP error would end its tool call. Only a
 * kernel that cannot start at all (no python3, no IPython) answers 503.
 */
#include "agent.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "jsonx.h"
#include "kernel.h"
#include "log.h"
#include "xmalloc.h"

/* One call; freed when its answer is out or its client left. */
struct ipython_call {
	struct http_request *req;
	struct kernel_cell *cell;	/* the kernel's until done runs */
	struct kernel_result *res;
	struct evbuffer *bufs[2];
};

static void
answer_done(void *arg)
{
	struct ipython_call *call = arg;

	kernel_result_free(call->res);
	free(call);
}

static void
cell_done(struct kernel_result *res, void *arg)
{
	static const char *const descs[] = { "stdout", "stderr" };
	struct ipython_call *call = arg;
	int has_err;

	call->cell = NULL;
	call->res = res;
	if (res->err.status != 0) {
		http_reply_err(call->req, &res->err);
		answer_done(call);
		return;
	}
	has_err = evbuffer_get_length(res->errout) > 0;
	call->bufs[0] = res->out;
	call->bufs[1] = res->errout;
	tool_result_stream_items(call->req, has_err, has_err ? 2 : 1,
	    call->bufs, descs, res->images, answer_done, call);
}

/* The client left before the answer: its cell is of no use any more. */
static void
client_gone(struct http_request *req, void *arg)
{
	struct ipython_call *call = arg;

	kernel_abandon(call->cell);
	http_reply_error(req, 499, "client closed the connection");
	free(call);
}

/* The agent's one kernel for run_ipython_cell, made on first use. */
static struct kernel *
shared_kernel(struct agent *agent)
{
	if (agent->kernel == NULL)
		agent->kernel = kernel_new(agent, KERNEL_MCP, NULL,
		    agent->cfg.prewarm_kernel);
	return agent->kernel;
}

void
kernel_ipython_prewarm(struct agent *agent)
{
	struct error err = { 0 };

	if (kernel_start(shared_kernel(agent), NULL, NULL, &err) < 0)
		log_warn("--prewarm-kernel: %s", err.msg);
}

void
kernel_ipython_route_run(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct ipython_call *call;
	struct error err = { 0 };
	const char *code;
	json_t *body;
	double timeout;

	if ((body = http_request_json(req, &err)) == NULL ||
	    jsonx_get_string(body, "code", 1, &code, &err) < 0 ||
	    jsonx_get_number(body, "timeout", agent->cfg.default_timeout,
	    &timeout, &err) < 0)
		goto fail;
	if (code[strspn(code, " \t\r\n")] == '\0') {
		error_set(&err, 400, "code is empty");
		goto fail;
	}
	if (!(timeout > 0) || timeout > 7 * 24 * 3600) {
		error_set(&err, 400, "timeout must be a number of seconds "
		    "between 0 and 604800");
		goto fail;
	}
	call = xcalloc(1, sizeof *call);
	call->req = req;
	call->cell = kernel_run(shared_kernel(agent),
	    json_object_get(body, "code"), timeout, cell_done, call, &err);
	json_decref(body);
	body = NULL;
	if (call->cell == NULL) {
		free(call);
		goto fail;
	}
	http_request_on_close(req, client_gone, call);
	return;
fail:
	json_decref(body);
	http_reply_err(req, &err);
}
