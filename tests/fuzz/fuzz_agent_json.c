/*
 * Fuzz target: what clients send to the agent's routes, through the real
 * HTTP server into the real handlers, in-process, on a scratch workspace:
 * JSON bodies (first through http_json_parse, the layer every JSON route
 * goes through) and query strings. Every route is served but those that
 * start processes (run_shell_command, run_ipython_cell, add_servers, the
 * code interpreter's execute, create and restart, envd's /files) and the
 * streamed uploads (fuzzed as multipart and raw bytes elsewhere); the
 * native filesystem tools answer /mcp/call_tool, so their argument checks
 * and file operations are fuzzed too, beneath the scratch workspace.
 *
 * Input: one byte choosing the route, then its body (POST) or its query
 * string (other methods).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "harness.h"
#include "spawn.h"
#include "toolset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct agent agent;
static struct http_route routes[32];
static size_t nroutes;
static char root[64];

/* Routes that would start processes (envd's /files starts a file
 * helper, this binary executed anew), or stream uploads. */
static int
left_out(const struct http_route *r)
{
	return (r->flags & HTTP_ROUTE_STREAM_BODY) ||
	    strcmp(r->path, "/tools/run_shell_command") == 0 ||
	    strcmp(r->path, "/tools/run_ipython_cell") == 0 ||
	    strcmp(r->path, "/mcp/add_servers") == 0 ||
	    strcmp(r->path, "/ci/execute") == 0 ||
	    strcmp(r->path, "/envd/files") == 0 ||
	    (strncmp(r->path, "/ci/contexts", 12) == 0 &&
	    (r->methods & HTTP_METHOD_POST));
}

static void
wipe_dir(int dirfd, int top)
{
	DIR *d = fdopendir(dirfd);
	struct dirent *e;

	if (d == NULL) {
		close(dirfd);
		return;
	}
	while ((e = readdir(d)) != NULL) {
		int fd;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    (top && strcmp(e->d_name, ".git") == 0))
			continue;
		if (unlinkat(dirfd, e->d_name, 0) == 0)
			continue;
		fd = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY |
		    O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0)
			wipe_dir(fd, 0);
		unlinkat(dirfd, e->d_name, AT_REMOVEDIR);
	}
	closedir(d);
}

/* Each input starts from an empty workspace (its git history aside). */
static void
wipe_workspace(void)
{
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0)
		wipe_dir(fd, 1);
}

static void
remove_root(void)
{
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0)
		wipe_dir(fd, 0);
	rmdir(root);
}

static void
setup(void)
{
	struct http_server_config cfg = { 0 };
	const struct http_route *all;
	struct error err;
	size_t n;

	snprintf(root, sizeof root, "/tmp/fuzz-agent-XXXXXX");
	if (mkdtemp(root) == NULL || workspace_open(&agent.ws, root, &err) < 0)
		abort();
	atexit(remove_root);
	agent.base = harness_base();
	agent.token = FUZZ_TOKEN;
	agent.cfg.output_cap = 1024 * 1024;
	agent.cfg.max_body = 1024 * 1024;
	agent.cfg.default_timeout = 10;
	agent.shell = "/bin/sh";
	spawn_init(agent.base);
	gitops_routes_init(&agent);
	mcp_init(&agent);
	agent.cfg.max_contexts = 16;
	ci_init(&agent);
	if (toolset_setup(&agent, "filesystem", &err) < 0)
		abort();
	all = agent_routes(&n);
	for (size_t i = 0; i < n && nroutes < 32; i++) {
		if (!left_out(&all[i]))
			routes[nroutes++] = all[i];
	}
	cfg.routes = routes;
	cfg.nroutes = nroutes;
	cfg.handler_arg = &agent;
	cfg.token = agent.token;
	cfg.alias_prefix = "/fastapi";
	cfg.max_body = agent.cfg.max_body;
	harness_start(&cfg);
}

static void
add(char **buf, size_t *len, const void *p, size_t n)
{
	*buf = realloc(*buf, *len + n);
	memcpy(*buf + *len, p, n);
	*len += n;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct http_route *r;
	char *buf = NULL, head[256];
	size_t len = 0;
	struct error err;
	json_t *json;
	int n;

	if (size < 1)
		return 0;
	if (nroutes == 0)
		setup();
	wipe_workspace();
	r = &routes[data[0] % nroutes];
	data++;
	size--;
	json = http_json_parse((const char *)data, size, &err);
	json_decref(json);
	if (r->methods & HTTP_METHOD_POST) {
		n = snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: fuzz"
		    "\r\nAuthorization: Bearer %s\r\nContent-Type: "
		    "application/json\r\nContent-Length: %zu\r\n\r\n", r->path,
		    FUZZ_TOKEN, size);
		add(&buf, &len, head, (size_t)n);
		add(&buf, &len, data, size);
	} else {
		const char *m = (r->methods & HTTP_METHOD_GET) ? "GET" :
		    (r->methods & HTTP_METHOD_DELETE) ? "DELETE" : "PUT";
		const uint8_t *nl = memchr(data, '\n', size);
		size_t qlen = nl != NULL ? (size_t)(nl - data) : size;

		n = snprintf(head, sizeof head, "%s %s?", m, r->path);
		add(&buf, &len, head, (size_t)n);
		add(&buf, &len, data, qlen);
		n = snprintf(head, sizeof head, " HTTP/1.1\r\nHost: fuzz\r\n"
		    "Authorization: Bearer %s\r\n\r\n", FUZZ_TOKEN);
		add(&buf, &len, head, (size_t)n);
	}
	harness_exchange((const uint8_t *)buf, len, 0);
	free(buf);
	return 0;
}
