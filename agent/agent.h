/*
 * sandbox-agent: the HTTP API of one sandbox. One event loop; each route
 * group lives in its own file and registers its handlers in routes.c.
 *
 * Files: main.c (start, signals, shutdown), options.c (the option table),
 * routes.c (the route table), health.c (/healthz), healthcheck.c (the
 * images' HEALTHCHECK client), shell.c + shell_template.c (commands; the
 * template's builtin is bash/shell_template_bash.c), confine.c (the
 * seccomp filter of every child), run_as.c (--run-as without the
 * capabilities for it), path.c (workspace paths), multipart.c (uploads),
 * websocket.c (RFC 6455's handshake and frames), toolset.c and
 * tool_result.c (what native and MCP tools share).
 *
 * Every file of a subsystem carries its prefix: files_* the /workspace
 * routes, fstools_* the filesystem tool set, gitops* the /watcher (git)
 * routes, mcp_* the MCP client, kernel* the IPython kernels,
 * ci_* the code interpreter of E2B's SDK on them, envd* E2B's in-sandbox
 * API (envd.h), desktop_*, vnc_* and computer_* the display and computer
 * use. Code sandboxd uses too lives in common/, among it work_queue.c and
 * work_pool.c, which run blocking jobs off the loop.
 */
#ifndef AGENT_H
#define AGENT_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "config.h"
#include "http.h"
#include "path.h"

struct desktop;
struct event_base;
struct mcp;
struct sock_fprog;
struct spawn_options;
struct tool_group;
struct ci;
struct kernel;
struct work_pool;

/* The options (options.c's table says each one's flag, default and
 * bounds); lives until exit. */
struct agent_config {
	struct config_list listen;	/* HOST:PORT or unix:/path, repeatable */
	char *workspace;
	char *mcp_config;		/* {"mcpServers": ...} loaded at start */
	char *tools;			/* native tool groups, comma separated */
	char *desktop;			/* the desktop's programs (desktop.h) */
	char *seccomp;			/* "on" or "off" */
	char *token;			/* SECRET_TOKEN */
	int insecure_no_token;
	int healthcheck;		/* --healthcheck: ask, exit */
	size_t output_cap;		/* per stream of a shell command */
	size_t max_body;		/* JSON request bodies */
	size_t max_upload;		/* file uploads; 0: no limit */
	double default_timeout;		/* seconds, shell commands */
	char *log_level;
	int access_log;
	char *run_as;			/* "uid:gid" for commands, when root */
	char *python;			/* interpreter of the IPython kernels */
	int prewarm_kernel;
	int prewarm_context;		/* the code interpreter's default */
	long max_contexts;		/* code interpreter contexts at once */
	long max_connections;		/* 0: the HTTP server's default */
	int shell_template;		/* fork commands from one bash */
	double header_timeout;		/* seconds for a whole request head */
	size_t body_min_rate;		/* bytes/s of a body; 0: no minimum */
	double body_rate_window;	/* seconds the rate is averaged over */
};

/* One per process; lives until exit. */
struct agent {
	struct event_base *base;
	struct agent_config cfg;
	struct workspace ws;
	struct http_server *http;
	struct sock_fprog *confine;	/* NULL with --seccomp=off */
	const char *shell;		/* /bin/bash, else /bin/sh */
	char *token;			/* NULL only with --insecure-no-token */
	char **child_env;		/* environment of commands: ours minus secrets */
	int drop_ids;			/* commands run as uid/gid below */
	uid_t uid;
	gid_t gid;
	char *run_as_home;		/* that user's home (/etc/passwd);
					 * NULL when unknown */
	const struct tool_group **tool_groups;	/* --tools, in that order */
	size_t ntool_groups;
	struct mcp *mcp;		/* MCP servers (mcp.c) */
	struct work_pool *io_pool;	/* the file routes' reads and deletes,
					 * off the loop; NULL: they answer 503 */
	struct kernel *kernel;		/* run_ipython_cell's (kernel_ipython.c) */
	struct ci *ci;			/* the code interpreter (ci_*.c) */
	struct desktop *desktop;	/* --desktop, else NULL (desktop.c) */
};

/* options.c: the option table; defaults, environment, then argv. */
int agent_options_load(struct agent_config *cfg, int argc, char **argv,
    int *help, int *version, struct error *err);
void agent_options_usage(FILE *f);
const struct config_option *agent_options_table(size_t *n);

/* routes.c */
const struct http_route *agent_routes(size_t *n);

/* health.c */
void health_route(struct http_request *req, void *arg);

/* healthcheck.c: --healthcheck, a client of a running agent's /healthz
 * at the given addresses (else PID 1's, else the default); the exit
 * status. */
int healthcheck_run(const struct config_list *listen, const char *token);

/* run_as.c: --run-as without the capabilities to switch users is
 * dropped, with a warning, so that commands still run. */
void run_as_check(struct agent *agent);
/* The calling thread (a worker's) touches files as the user commands run
 * as: what it creates is theirs, and it may only do what they may. The
 * file-system ids are per thread; the loop thread keeps root's. */
void run_as_files(const struct agent *agent);

/* shell.c */
void shell_route_run(struct http_request *req, void *arg);

/* Close what the plain path keeps (shutdown). */
void shell_stop(void);

/* shell_template.c: commands forked from one bash started once. init
 * starts it (--shell-template); run starts command (len bytes) there, as
 * bash -c would run it, with the caller's callbacks, caps and timeout,
 * or answers NULL when the template cannot take it now (the caller then
 * starts a bash -c itself); stop ends it (shutdown). start_bash starts
 * there what an exec of bash with argv (argv[0] the template's shell)
 * and envp would, as uid:gid (set_ids) in cwd, its stdin SPAWN_NULL or
 * SPAWN_PIPE, its output to cb->on_output from cb->on_start on; NULL as
 * for run. */
struct spawn_callbacks;
void shell_template_init(struct agent *agent);
struct spawn *shell_template_run(const char *command, size_t len,
    const struct spawn_callbacks *cb, void *arg, const size_t cap[3],
    double timeout);
struct spawn *shell_template_start_bash(const char *const *argv,
    const char *const *envp, const char *cwd, int set_ids, uid_t uid,
    gid_t gid, int stdin_pipe, const struct spawn_callbacks *cb, void *arg,
    double timeout);
void shell_template_stop(void);

/* gitops.c: the /watcher routes. gitops_routes_init runs once at start,
 * after the event loop exists; the repository itself is opened (and
 * created when missing) by the first git request. gitops_routes_shutdown,
 * after the loop ended, waits for the git operation under way. */
void gitops_routes_init(struct agent *agent);
void gitops_routes_shutdown(void);
void gitops_route_commit(struct http_request *req, void *arg);
void gitops_route_diff(struct http_request *req, void *arg);
void gitops_route_logs(struct http_request *req, void *arg);
/* files.c, files_batch.c, files_entries.c: the /workspace routes. */
void files_route_get(struct http_request *req, void *arg);
void files_route_put(struct http_request *req, void *arg);
void files_batch_route(struct http_request *req, void *arg);
void files_entries_route_list(struct http_request *req, void *arg);
void files_entries_route_exists(struct http_request *req, void *arg);
void files_entries_route_delete(struct http_request *req, void *arg);
void files_entries_route_move(struct http_request *req, void *arg);
void files_entries_route_mkdir(struct http_request *req, void *arg);
/* Answer req with the regular file open as fd (taken), streamed as
 * GET /workspace/file?format=bytes streams one. */
void files_send_fd(struct agent *agent, struct http_request *req, int fd);
/* mcp.c: the MCP client's servers and routes. */
void mcp_init(struct agent *agent);
/* Start the servers of an {"mcpServers": ...} file in the background;
 * failures are logged. */
void mcp_load_config(struct agent *agent, const char *path);
/* Stop every server (their process groups are killed). */
void mcp_shutdown(struct agent *agent);
void mcp_route_add_servers(struct http_request *req, void *arg);
void mcp_route_list_tools(struct http_request *req, void *arg);
void mcp_route_call_tool(struct http_request *req, void *arg);

/* kernel_ipython.c: run_ipython_cell, on agent->kernel (kernel.h). prewarm
 * starts that kernel now, not on first use (--prewarm-kernel). */
void kernel_ipython_route_run(struct http_request *req, void *arg);
void kernel_ipython_prewarm(struct agent *agent);

/* ci_contexts.c, ci_execute.c: the code interpreter of E2B's SDK (its
 * port 49999 under /ci), on kernels of its own, one per context. init
 * makes the default context (started now with --prewarm-context). */
void ci_init(struct agent *agent);
void ci_route_health(struct http_request *req, void *arg);
void ci_route_execute(struct http_request *req, void *arg);
void ci_route_contexts_list(struct http_request *req, void *arg);
void ci_route_contexts_create(struct http_request *req, void *arg);
void ci_route_context_restart(struct http_request *req, void *arg);
void ci_route_context_remove(struct http_request *req, void *arg);

/* confine.c: the seccomp program every command runs under. */
struct sock_fprog *confine_build(struct error *err);
void confine_free(struct sock_fprog *prog);
/* Reset opts to the confinement of every program the agent runs for the
 * sandbox's user: the workspace as its directory, its own process group
 * (so its whole tree can be ended), the seccomp program, the --run-as
 * user and the commands' environment (ours minus secrets). The caller
 * adds argv, stdio and the rest; it may give its own environment built
 * from agent->child_env, or a user of its own that is never root. */
void confine_spawn_options(const struct agent *agent,
    struct spawn_options *opts);

/* tool_result.c: the MCP CallToolResult shape the reference answers tool
 * calls with. One text item per (text, description) pair; isError as
 * given. New reference. */
json_t *tool_result_new(int is_error, size_t n, const char *const *texts,
    const size_t *lens, const char *const *descriptions);

struct evbuffer;

/* Answer req with an MCP result whose text items are the contents of
 * bufs[i] (drained as they go out), encoded piece by piece as the client
 * reads, so a 16 MiB output never exists twice in memory. isError as given.
 * done(arg) runs when the answer is out or the client left; the buffers
 * must live until then. */
void tool_result_stream(struct http_request *req, int is_error,
    size_t n, struct evbuffer **bufs, const char *const *descriptions,
    void (*done)(void *arg), void *arg);
/* The same with more content items (an array of objects: images) after the
 * text items; extra is referenced until done. */
void tool_result_stream_items(struct http_request *req, int is_error,
    size_t n, struct evbuffer **bufs, const char *const *descriptions,
    json_t *extra, void (*done)(void *arg), void *arg);

#endif
