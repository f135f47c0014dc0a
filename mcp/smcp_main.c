/*
 * sandbox-mcp: options, signals and the order of the end. The end comes
 * from stdin closing (the MCP client is gone or done), SIGTERM or SIGINT:
 * in-flight calls are dropped, the sandbox released, and the loop left; a
 * second signal leaves at once (the sandbox is then left to sandboxd's
 * heartbeat reaper).
 */
#include "smcp.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#include "http_client.h"
#include "log.h"
#include "xmalloc.h"

struct smcp smcp;

static struct event *sig_term, *sig_int;

static void
released(void)
{
	event_base_loopbreak(smcp.base);
}

void
smcp_shutdown(const char *why)
{
	if (smcp.closing)
		return;
	smcp.closing = 1;
	log_info("%s: releasing the sandbox and exiting", why);
	smcp_stdio_stop();
	smcp_box_release(released);
}

/* The SDK's stdio client closes stdin, then sends SIGTERM 2 s later:
 * that first signal must not cut the release short; only a second one
 * does. */
static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	static int signalled;

	(void)what;
	(void)arg;
	if (signalled++) {
		log_warn("second signal: exiting without waiting for the "
		    "release");
		smcp.exit_status = 1;
		event_base_loopbreak(smcp.base);
		return;
	}
	smcp_shutdown(sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

static const char synopsis[] =
"Usage: sandbox-mcp --type=TYPE [--base_url=URL] [--bearer_token=T] [options]\n"
"\n"
"An MCP server over stdio offering the tools of one sandbox of TYPE (base,\n"
"filesystem, browser, ... any type the sandboxd at URL serves), names and\n"
"input schemas as sandboxd's list_tools gives them; tools/call is relayed\n"
"to sandboxd's call_tool. The sandbox is released when stdin closes or on\n"
"SIGTERM/SIGINT.\n"
"\n"
"The sandbox is created lazily, on the first tools/list or tools/call, by\n"
"default: MCP hosts start every configured server when they start, most\n"
"sessions never use most servers, and sandboxd's warm pool makes the\n"
"first call cheap. --eager creates it at start instead (the first call\n"
"then never waits for a cold start).\n"
"\n"
"Example MCP host configuration:\n"
"  {\"mcpServers\": {\"sandbox\": {\"command\": \"sandbox-mcp\",\n"
"    \"args\": [\"--type=base\", \"--base_url=http://127.0.0.1:8000\"]}}}\n";

static int
parse_options(int argc, char **argv)
{
	char *log_level = NULL;
	const struct config_option opts[] = {
		{ "--type", "SANDBOX_MCP_TYPE", CONFIG_STRING, &smcp.type,
		    "TYPE", "the sandbox type (default base)" },
		{ "--base_url", "SANDBOX_MCP_BASE_URL", CONFIG_STRING,
		    &smcp.base_url, "URL", "sandboxd's address "
		    "(default http://127.0.0.1:8000)" },
		{ "--bearer_token", "SANDBOX_MCP_BEARER_TOKEN", CONFIG_STRING,
		    &smcp.bearer_token, "T", "sandboxd's BEARER_TOKEN, if "
		    "it has one" },
		{ "--eager", "SANDBOX_MCP_EAGER", CONFIG_FLAG, &smcp.eager,
		    NULL, "create the sandbox at start, not on first use" },
		{ "--create_timeout", "SANDBOX_MCP_CREATE_TIMEOUT",
		    CONFIG_DOUBLE, &smcp.create_timeout, "SECONDS",
		    "give up creating after this long without progress "
		    "(default 120)" },
		{ "--call_timeout", "SANDBOX_MCP_CALL_TIMEOUT", CONFIG_DOUBLE,
		    &smcp.call_timeout, "SECONDS", "fail a tool call after "
		    "this long without an answer (default 600)" },
		{ "--max_message", "SANDBOX_MCP_MAX_MESSAGE", CONFIG_SIZE,
		    &smcp.max_message, "BYTES", "longest JSON-RPC line taken "
		    "(default 16M)" },
		{ "--log_level", "SANDBOX_MCP_LOG_LEVEL", CONFIG_STRING,
		    &log_level, "LEVEL", "debug, info, warn (default) or "
		    "error; the log goes to stderr" },
	};
	size_t nopts = sizeof opts / sizeof *opts;
	int help = 0, version = 0, rc = -1;
	enum log_level level = LOG_WARN;
	struct error err;

	if (config_parse(opts, nopts, argc, argv, &help, &version, &err) < 0) {
		fprintf(stderr, "sandbox-mcp: %s\n", err.msg);
		goto out;
	}
	if (help) {
		config_usage(stdout, synopsis, opts, nopts);
		exit(0);
	}
	if (version) {
		printf("sandbox-mcp %s\n", VERSION);
		exit(0);
	}
	if (log_level != NULL && log_parse_level(log_level, &level) < 0) {
		fprintf(stderr, "sandbox-mcp: unknown log level '%s'\n",
		    log_level);
		goto out;
	}
	log_set_level(level);
	if (smcp.type == NULL || *smcp.type == '\0') {
		free(smcp.type);
		smcp.type = xstrdup("base");
	}
	if (smcp.base_url == NULL)
		smcp.base_url = xstrdup("http://127.0.0.1:8000");
	if (smcp.create_timeout <= 0)
		smcp.create_timeout = 120;
	if (smcp.call_timeout <= 0)
		smcp.call_timeout = 600;
	if (smcp.max_message == 0)
		smcp.max_message = 16 * 1024 * 1024;
	rc = 0;
out:
	free(log_level);
	return rc;
}

static void
free_all(void)
{
	if (smcp.box_req != NULL)
		http_client_cancel(smcp.box_req);
	smcp_stdio_free();
	if (sig_term != NULL)
		event_free(sig_term);
	if (sig_int != NULL)
		event_free(sig_int);
	json_decref(smcp.tools);
	free(smcp.box_name);
	free(smcp.type);
	free(smcp.base_url);
	if (smcp.auth != NULL)
		explicit_bzero(smcp.auth, strlen(smcp.auth));
	free(smcp.auth);
	if (smcp.bearer_token != NULL)
		explicit_bzero(smcp.bearer_token, strlen(smcp.bearer_token));
	free(smcp.bearer_token);
	free(smcp.addr);
	free(smcp.prefix);
	free(smcp.host);
	if (smcp.base != NULL)
		event_base_free(smcp.base);
}

int
main(int argc, char **argv)
{
	struct event_config *cfg;
	struct error err;

	log_init("sandbox-mcp");
	signal(SIGPIPE, SIG_IGN);
	if (parse_options(argc, argv) < 0)
		return 2;
	if (smcp_box_init(&err) < 0) {
		fprintf(stderr, "sandbox-mcp: %s\n", err.msg);
		free_all();
		return 2;
	}
	/* poll, not epoll: stdin may be a regular file (a recorded
	 * session), which epoll refuses; there are only a few fds. */
	cfg = event_config_new();
	event_config_avoid_method(cfg, "epoll");
	smcp.base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	if (smcp.base == NULL)
		fatal("cannot make an event loop");
	sig_term = evsignal_new(smcp.base, SIGTERM, signal_cb, NULL);
	sig_int = evsignal_new(smcp.base, SIGINT, signal_cb, NULL);
	evsignal_add(sig_term, NULL);
	evsignal_add(sig_int, NULL);
	if (smcp_stdio_start(&err) < 0) {
		fprintf(stderr, "sandbox-mcp: %s\n", err.msg);
		free_all();
		return 2;
	}
	if (smcp.eager)
		smcp_box_create();
	event_base_dispatch(smcp.base);
	/* A second signal may leave calls behind. */
	while (smcp.calls != NULL) {
		struct smcp_call *c = smcp.calls;

		smcp.calls = c->next;
		if (c->up != NULL)
			http_client_cancel(c->up);
		smcp_call_free(c);
	}
	free_all();
	return smcp.exit_status;
}
