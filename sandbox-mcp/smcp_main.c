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

#define OFF(field)	offsetof(struct smcp, field)
#define POSITIVE	.min = 0, .max = INFINITY, .flags = CONFIG_ABOVE_MIN

static const struct config_option options[] = {
	{ "--type", "SANDBOX_MCP_TYPE", CONFIG_STRING, OFF(type), "TYPE",
	    .help = "the sandbox type", .def = "base",
	    .flags = CONFIG_EMPTY_UNSETS },
	{ "--base_url", "SANDBOX_MCP_BASE_URL", CONFIG_STRING, OFF(base_url),
	    "URL", .help = "sandboxd's address",
	    .def = "http://127.0.0.1:8000" },
	{ "--bearer_token", "SANDBOX_MCP_BEARER_TOKEN", CONFIG_STRING,
	    OFF(bearer_token), "T", .help = "sandboxd's BEARER_TOKEN, if it "
	    "has one", .flags = CONFIG_SECRET },
	{ "--eager", "SANDBOX_MCP_EAGER", CONFIG_FLAG, OFF(eager), NULL,
	    .help = "create the sandbox at start, not on first use" },
	{ "--create_timeout", "SANDBOX_MCP_CREATE_TIMEOUT", CONFIG_DOUBLE,
	    OFF(create_timeout), "SECONDS", .help = "give up creating after "
	    "this long without progress", .def = "120", POSITIVE },
	{ "--call_timeout", "SANDBOX_MCP_CALL_TIMEOUT", CONFIG_DOUBLE,
	    OFF(call_timeout), "SECONDS", .help = "fail a tool call after this "
	    "long without an answer", .def = "600", POSITIVE },
	{ "--max_message", "SANDBOX_MCP_MAX_MESSAGE", CONFIG_SIZE,
	    OFF(max_message), "BYTES", .help = "longest JSON-RPC line taken",
	    .def = "16M", .min = 1, .max = INFINITY },
	{ "--log_level", "SANDBOX_MCP_LOG_LEVEL", CONFIG_CHOICE, OFF(log_level),
	    "LEVEL", .help = "what goes to stderr", .def = "warn",
	    .choices = log_level_names },
};
#define NOPTIONS	(sizeof options / sizeof options[0])

static int
parse_options(int argc, char **argv)
{
	enum log_level level;
	int help, version;
	struct error err;

	if (config_parse(options, NOPTIONS, &smcp, argc, argv, &help, &version,
	    &err) < 0) {
		fprintf(stderr, "sandbox-mcp: %s\n", err.msg);
		return -1;
	}
	if (help) {
		config_usage(stdout, synopsis, options, NOPTIONS);
		exit(0);
	}
	if (version) {
		printf("sandbox-mcp %s\n", VERSION);
		exit(0);
	}
	log_parse_level(smcp.log_level, &level);
	log_set_level(level);
	return 0;
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
	config_free(options, NOPTIONS, &smcp);
	if (smcp.auth != NULL)
		explicit_bzero(smcp.auth, strlen(smcp.auth));
	free(smcp.auth);
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
