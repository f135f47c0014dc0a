/*
 * sandbox-agent: PID 1 of every sandbox image. Parses its options, opens the
 * workspace, builds the seccomp program, listens, and runs one event loop
 * until SIGTERM or SIGINT. As PID 1 it also reaps every orphan (spawn.c).
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "desktop.h"
#include "envd_fs.h"
#include "files_staged.h"
#include "log.h"
#include "spawn.h"
#include "toolset.h"
#include "vnc.h"
#include "work_pool.h"
#include "xmalloc.h"

/* Threads of the I/O pool at most: file reads and deletes that block at
 * once before the next one waits. */
#define IO_THREADS	16

extern char **environ;

static struct agent agent;

/*
 * Shutting down: no new connections, SIGTERM to every child, and up to
 * SHUTDOWN_GRACE seconds for them to exit before the MCP servers are
 * stopped (their group killed) and the loop ends. The grace lets a stdio
 * MCP server finish what it does on SIGTERM (sandbox-mcp releases its
 * sandbox); it stays under the 2 s sandboxd gives a container to stop.
 * A second signal ends the grace at once.
 */
#define SHUTDOWN_GRACE	1.0	/* seconds */
#define SHUTDOWN_POLL	0.05

static struct event *grace_ev;
static double grace_left;
static int shutting_down;	/* 1: in the grace, 2: done */

static void
shutdown_finish(void)
{
	shutting_down = 2;
	if (grace_ev != NULL) {
		event_free(grace_ev);
		grace_ev = NULL;
	}
	mcp_shutdown(&agent);
	event_base_loopexit(agent.base, NULL);
}

static void
grace_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	grace_left -= SHUTDOWN_POLL;
	if (spawn_running() == 0 || grace_left <= 0)
		shutdown_finish();
}

static void
shutdown_cb(evutil_socket_t sig, short what, void *arg)
{
	struct timeval tv = { 0, (suseconds_t)(SHUTDOWN_POLL * 1e6) };

	(void)what;
	(void)arg;
	if (shutting_down == 2)
		return;
	if (shutting_down == 1) {
		log_info("signal %d again: not waiting for children", (int)sig);
		shutdown_finish();
		return;
	}
	shutting_down = 1;
	log_info("signal %d: shutting down", (int)sig);
	http_server_close_listeners(agent.http);
	/* Commands run in their own groups, so they would not see our
	 * signal; as PID 1 we are the last to tell them. */
	desktop_shutdown(&agent);
	shell_template_stop();
	spawn_kill_all(SIGTERM);
	if (spawn_running() == 0) {
		shutdown_finish();
		return;
	}
	grace_left = SHUTDOWN_GRACE;
	grace_ev = event_new(agent.base, -1, EV_PERSIST, grace_cb, NULL);
	event_add(grace_ev, &tv);
}

/* The --run-as user's entry, read straight from /etc/passwd: a static
 * binary has no NSS, and fgetpwent is a plain parser. NULL if absent. */
static struct passwd *
run_as_user(void)
{
	struct passwd *pw = NULL;
	FILE *f;

	if (!agent.drop_ids || (f = fopen("/etc/passwd", "re")) == NULL)
		return NULL;
	while ((pw = fgetpwent(f)) != NULL && pw->pw_uid != agent.uid)
		;
	fclose(f);
	return pw;
}

static int
env_is(const char *entry, const char *name)
{
	size_t len = strlen(name);

	return strncmp(entry, name, len) == 0 && entry[len] == '=';
}

/* unsetenv takes a variable out of environ, but its bytes stay in the
 * block the kernel shows as /proc/<pid>/environ: wipe its value there too
 * (the name stays, with an empty value). */
static void
env_scrub(const char *name)
{
	size_t len = strlen(name);

	for (char **e = environ; *e != NULL; e++)
		if (env_is(*e, name))
			explicit_bzero(*e + len + 1, strlen(*e + len + 1));
	unsetenv(name);
}

/* The environment of commands: ours without the token; with --run-as, the
 * user's own HOME, USER and LOGNAME, so that tools writing caches or dot
 * files (IPython, matplotlib, pip) do not trip over root's home. */
static char **
child_environment(const char *workspace)
{
	struct passwd *pw = run_as_user();
	size_t n = 0, o = 0;
	char **env;

	if (agent.drop_ids && pw == NULL)
		log_warn("--run-as: uid %u is not in /etc/passwd; commands keep "
		    "HOME=%s", (unsigned)agent.uid, getenv("HOME") ?
		    getenv("HOME") : "(unset)");
	while (environ[n] != NULL)
		n++;
	env = xcalloc(n + 5, sizeof *env);
	for (size_t i = 0; i < n; i++) {
		if (env_is(environ[i], "SECRET_TOKEN") ||
		    env_is(environ[i], "PWD"))
			continue;
		if (pw != NULL && (env_is(environ[i], "HOME") ||
		    env_is(environ[i], "USER") || env_is(environ[i], "LOGNAME")))
			continue;
		env[o++] = xstrdup(environ[i]);
	}
	env[o++] = xasprintf("PWD=%s", workspace);
	if (pw != NULL) {
		agent.run_as_home = xstrdup(pw->pw_dir);
		env[o++] = xasprintf("HOME=%s", pw->pw_dir);
		env[o++] = xasprintf("USER=%s", pw->pw_name);
		env[o++] = xasprintf("LOGNAME=%s", pw->pw_name);
	}
	env[o] = NULL;
	return env;
}

/* A missing workspace is made, as mkdir -p would, and under --run-as the
 * workspace itself (not its parents) is given to that user, whose commands
 * work in it: by its descriptor, opened without following a link. */
static int
make_workspace(const char *root, struct error *err)
{
	char *path = xstrdup(root);
	size_t len = strlen(path);
	int fd, made = 0;

	while (len > 1 && path[len - 1] == '/')
		path[--len] = '\0';
	for (char *p = path + 1;; p++) {
		char save = *p;

		if (save != '/' && save != '\0')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) == 0)
			made = save == '\0';
		else if (errno != EEXIST) {
			error_set_errno(err, 500, errno, "cannot create the "
			    "workspace %s", path);
			free(path);
			return -1;
		}
		*p = save;
		if (save == '\0')
			break;
	}
	if (!made) {
		free(path);
		return 0;
	}
	log_info("created the workspace %s", path);
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || (agent.drop_ids && fchown(fd, agent.uid, agent.gid) < 0)) {
		error_set_errno(err, 500, errno, "cannot give the workspace %s to "
		    "uid %u", path, (unsigned)agent.uid);
		if (fd >= 0)
			close(fd);
		free(path);
		return -1;
	}
	close(fd);
	free(path);
	return 0;
}

static int
parse_run_as(const char *spec, struct error *err)
{
	unsigned long uid, gid;
	char *end;

	uid = strtoul(spec, &end, 10);
	if (end == spec || *end != ':') {
		error_set(err, 400, "--run-as: '%s' is not UID:GID", spec);
		return -1;
	}
	gid = strtoul(end + 1, &end, 10);
	if (*end != '\0') {
		error_set(err, 400, "--run-as: '%s' is not UID:GID", spec);
		return -1;
	}
	if (geteuid() != 0) {
		log_warn("--run-as ignored: the agent does not run as root");
		return 0;
	}
	agent.drop_ids = 1;
	agent.uid = (uid_t)uid;
	agent.gid = (gid_t)gid;
	return 0;
}

/* The bearer token from SECRET_TOKEN, which commands must not see nor
 * find in our memory; -1 without one unless --insecure-no-token. */
static int
take_token(void)
{
	if (agent.cfg.token != NULL && agent.cfg.token[0] != '\0') {
		agent.token = agent.cfg.token;
	} else if (agent.cfg.insecure_no_token) {
		fprintf(stderr, "\n*** sandbox-agent: WARNING: running WITHOUT a "
		    "token (--insecure-no-token). ***\n*** Anyone who can reach "
		    "the listen address can run any command. Development "
		    "only. ***\n\n");
	} else {
		fprintf(stderr, "sandbox-agent: SECRET_TOKEN is not set; refusing "
		    "to start without a token (use --insecure-no-token for local "
		    "development only)\n");
		return -1;
	}
	env_scrub("SECRET_TOKEN");
	return 0;
}

/* The options and what they name (the user commands run as, the tool
 * groups, the desktop, the token): the exit status when the agent is not
 * to serve, 2 for a bad option, -1 to go on. */
static int
configure(int argc, char **argv)
{
	struct error err = { 0 };
	enum log_level level;
	int help, version;

	if (agent_options_load(&agent.cfg, argc, argv, &help, &version,
	    &err) < 0) {
		fprintf(stderr, "sandbox-agent: %s\n", err.msg);
		return 2;
	}
	if (help) {
		agent_options_usage(stdout);
		return 0;
	}
	if (version) {
		printf("sandbox-agent %s\n", VERSION);
		return 0;
	}
	if (agent.cfg.healthcheck)
		return healthcheck_run(&agent.cfg.listen, agent.cfg.token);
	log_parse_level(agent.cfg.log_level, &level);
	log_set_level(level);
	if (agent.cfg.run_as != NULL && parse_run_as(agent.cfg.run_as,
	    &err) < 0) {
		fprintf(stderr, "sandbox-agent: %s\n", err.msg);
		return 2;
	}
	run_as_check(&agent);
	if (toolset_setup(&agent, agent.cfg.tools, &err) < 0) {
		fprintf(stderr, "sandbox-agent: %s\n", err.msg);
		return 2;
	}
	if (desktop_setup(&agent, agent.cfg.desktop, &err) < 0) {
		fprintf(stderr, "sandbox-agent: %s\n", err.msg);
		desktop_free(&agent);
		return 2;
	}
	return take_token() < 0 ? 2 : -1;
}

/* The workspace (made when missing), the commands' shell and environment
 * and their seccomp program. */
static int
prepare_commands(struct error *err)
{
	if (agent.cfg.workspace[0] == '/' &&
	    access(agent.cfg.workspace, F_OK) < 0 && errno == ENOENT &&
	    make_workspace(agent.cfg.workspace, err) < 0)
		return -1;
	if (workspace_open(&agent.ws, agent.cfg.workspace, err) < 0)
		return -1;
	agent.shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
	agent.child_env = child_environment(agent.ws.root);
	if (strcmp(agent.cfg.seccomp, "off") == 0) {
		log_warn("--seccomp=off: commands run without the seccomp filter");
		return 0;
	}
	agent.confine = confine_build(err);
	return agent.confine != NULL ? 0 : -1;
}

/* The loop, every service on it, and the HTTP server on each --listen. */
static int
serve(struct error *err)
{
	struct http_server_config hc = { 0 };

	agent.base = event_base_new();
	if (agent.base == NULL)
		fatal("cannot create the event loop");
	spawn_init(agent.base);
	agent.io_pool = work_pool_new(agent.base, IO_THREADS, err);
	if (agent.io_pool == NULL)
		log_warn("file reads and deletes will fail: %s", err->msg);
	gitops_routes_init(&agent);
	envd_init(&agent);
	files_staged_sweep_start(&agent);
	mcp_init(&agent);
	desktop_start(&agent);
	if (agent.cfg.prewarm_kernel)
		kernel_ipython_prewarm(&agent);
	ci_init(&agent);
	shell_template_init(&agent);
	hc.routes = agent_routes(&hc.nroutes);
	hc.handler_arg = &agent;
	hc.token = agent.token;
	hc.auth_status = 403;
	hc.auth_missing_detail = "Not authenticated";
	hc.auth_wrong_detail = "Invalid token";
	hc.alias_prefix = "/fastapi";
	hc.max_body = agent.cfg.max_body;
	hc.access_log = agent.cfg.access_log;
	hc.max_connections = (size_t)agent.cfg.max_connections;
	hc.header_timeout = agent.cfg.header_timeout;
	hc.body_min_rate = agent.cfg.body_min_rate;
	hc.body_rate_window = agent.cfg.body_rate_window;
	agent.http = http_server_new(agent.base, &hc);
	for (size_t i = 0; i < agent.cfg.listen.n; i++) {
		if (http_server_listen(agent.http, agent.cfg.listen.v[i],
		    err) < 0)
			return -1;
		log_info("listening on %s", agent.cfg.listen.v[i]);
	}
	if (agent.cfg.mcp_config != NULL)
		mcp_load_config(&agent, agent.cfg.mcp_config);
	return 0;
}

/* The exit status when the agent is not to serve, else -1. */
static int
setup(int argc, char **argv)
{
	struct error err = { 0 };
	int rc = configure(argc, argv);

	if (rc >= 0)
		return rc;
	if (prepare_commands(&err) < 0 || serve(&err) < 0) {
		fprintf(stderr, "sandbox-agent: %s\n", err.msg);
		return 1;
	}
	return -1;
}

int
main(int argc, char **argv)
{
	struct event *sigterm, *sigint;
	int rc;

	/* The desktop's VNC helper (vnc_helper.c): the agent's binary, run
	 * by the agent as the desktop's user; nothing of the agent's own. */
	if (argc > 1 && strcmp(argv[1], "--vnc-helper") == 0)
		return vnc_helper_main(argc, argv);
	/* A file helper of envd's (envd_fs.h): this binary executed anew,
	 * as a user of the sandbox; nothing of the agent's runs. */
	if (argc == 2 && strcmp(argv[1], ENVD_FS_HELPER_ARG) == 0)
		return envd_fs_helper_main();

	/* Undumpable, before anything secret is in memory: no process of
	 * the same user (root, when there is no --run-as) may then read our
	 * environment or memory, or take our descriptors (pidfd_getfd), as
	 * /proc/1 and ptrace access need CAP_SYS_PTRACE, which confined
	 * commands lack. Children are dumpable again once they exec. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	log_init("sandbox-agent");
	signal(SIGPIPE, SIG_IGN);
	rc = setup(argc, argv);
	if (rc >= 0)
		return rc;
	sigterm = evsignal_new(agent.base, SIGTERM, shutdown_cb, NULL);
	sigint = evsignal_new(agent.base, SIGINT, shutdown_cb, NULL);
	event_add(sigterm, NULL);
	event_add(sigint, NULL);
	log_info("sandbox-agent %s ready (workspace %s, shell %s, seccomp %s)",
	    VERSION, agent.ws.root, agent.shell, agent.confine ? "on" : "off");
	event_base_dispatch(agent.base);
	shell_template_stop();
	shell_stop();
	work_pool_free(agent.io_pool);
	gitops_routes_shutdown();
	toolset_shutdown();
	desktop_free(&agent);
	files_staged_sweep_shutdown();
	return 0;
}
