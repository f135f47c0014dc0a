/*
 * Fuzz target: Connect requests to the agent's envd (/envd/<method>),
 * through the real HTTP server into envd.c's codec and the methods'
 * decoding of their messages: unary JSON bodies, enveloped server-stream
 * requests and client streams (StreamInput) cut in small pieces. Only the
 * methods that start nothing are served (a process or a file helper would
 * be this binary executed anew); with no process or watcher there, each
 * ends in its "not found" or in the error its input earns.
 *
 * Input: one byte choosing the method (low four bits) and the variant
 * (a wrong content type, a Connect-Timeout-Ms header, the body sent in
 * 7-byte pieces), then the body as it is.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "envd.h"
#include "harness.h"
#include "spawn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct {
	const char *name;
	int stream;		/* the request is enveloped */
} methods[] = {
	{ "process.Process/List", 0 },
	{ "process.Process/Connect", 1 },
	{ "process.Process/SendInput", 0 },
	{ "process.Process/StreamInput", 1 },
	{ "process.Process/CloseStdin", 0 },
	{ "process.Process/SendSignal", 0 },
	{ "process.Process/Update", 0 },
	{ "filesystem.Filesystem/GetWatcherEvents", 0 },
	{ "filesystem.Filesystem/RemoveWatcher", 0 },
	{ "nope.Nope/Nothing", 1 },
};

static const struct http_route routes[] = {
	{ HTTP_METHOD_POST, "/envd/", HTTP_MATCH_PREFIX,
	    HTTP_ROUTE_STREAM_BODY, envd_route_rpc, 0 },
};

static struct agent agent;

static void
setup(void)
{
	struct http_server_config cfg = { 0 };

	agent.base = harness_base();
	agent.token = FUZZ_TOKEN;
	spawn_init(agent.base);
	envd_init(&agent);
	cfg.routes = routes;
	cfg.nroutes = sizeof routes / sizeof routes[0];
	cfg.handler_arg = &agent;
	cfg.token = agent.token;
	cfg.max_body = 1024 * 1024;
	harness_start(&cfg);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int started;
	size_t m, len;
	char head[512], *buf;
	int n, wrong_type, timeout, pieces;

	if (size < 1)
		return 0;
	if (!started) {
		setup();
		started = 1;
	}
	m = (data[0] & 0x0f) % (sizeof methods / sizeof methods[0]);
	wrong_type = data[0] & 0x10;
	timeout = data[0] & 0x20;
	pieces = data[0] & 0x40;
	data++;
	size--;
	n = snprintf(head, sizeof head, "POST /envd/%s HTTP/1.1\r\nHost: fuzz"
	    "\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\n%s"
	    "Content-Length: %zu\r\n\r\n", methods[m].name, FUZZ_TOKEN,
	    (methods[m].stream != 0) != (wrong_type != 0) ?
	    "application/connect+json" : "application/json",
	    timeout ? "Connect-Timeout-Ms: 1\r\n" : "", size);
	len = (size_t)n + size;
	buf = malloc(len);
	memcpy(buf, head, (size_t)n);
	memcpy(buf + n, data, size);
	harness_exchange((const uint8_t *)buf, len, pieces ? 7 : 0);
	free(buf);
	return 0;
}
