/*
 * POST /tools/run_shell_command {"command", "timeout"?, "stream"?}
 *
 * The command runs under bash (else sh) -c in the workspace, stdin from
 * /dev/null, in its own process group under a keeper (spawn_child.c),
 * confined by the seccomp program: forked from the shell template
 * (shell_template.c) when it can take the call, else in a bash -c started
 * for it, the plain path. On that path a command too long for argv comes
 * to the shell through its stdin (SHELL_FROM_STDIN), and a stream always
 * takes it (its first event needs the pid at once).
 * Plain calls answer one MCP result when the command is done: stdout and
 * stderr capped, a note when output was cut or the command timed out.
 * With "stream": true the answer is NDJSON events while it runs; a client
 * that goes away gets the command's whole process tree killed.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "jsonx.h"
#include "log.h"
#include "spawn.h"
#include "utf8.h"
#include "xmalloc.h"

#define SHELL_STREAM_HIGH (1024 * 1024)	/* pause the command past this */
/* Longest command given to the shell in argv: one argument must stay
 * under 128 KiB (MAX_ARG_STRLEN), and argv and the environment share a
 * limit of their own. */
#define SHELL_ARGV_MAX (64 * 1024)
/* How a longer command reaches the shell: on its stdin, a memfd, which
 * this reads to the end (so stdin reads as empty afterwards too). eval
 * runs the text with the same parser as -c, one command after another,
 * with the same $0, exit status, exit, set -e and traps; stdin is
 * /dev/null, as for any command. What differs: messages say "eval" where
 * -c would say "-c", $BASH_EXECUTION_STRING is this line, and trailing
 * newlines are dropped (a final backslash then continues nothing). */
#define SHELL_FROM_STDIN "eval \"$(cat || echo exit 127)\" </dev/null"
#define SHELL_KEEPALIVE_SECONDS 5

/* One running command; freed when its request is answered. */
struct shell_run {
	struct agent *agent;
	struct http_request *req;
	struct spawn *sp;
	double timeout;
	int stream;
	/* streaming: an unfinished UTF-8 sequence per stream */
	struct utf8_carry carry[3];
	struct event *keepalive;
	/* plain: the items of the answer */
	struct evbuffer *bufs[3];
	struct evbuffer *rc;
};

static int
exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return -WTERMSIG(status);	/* as Python's subprocess says it */
	return -1;
}

static void
run_free(struct shell_run *run)
{
	spawn_free(run->sp);
	if (run->keepalive != NULL)
		event_free(run->keepalive);
	free(run);
}

static void
append_note(struct evbuffer *buf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
append_note(struct evbuffer *buf, const char *fmt, ...)
{
	va_list ap;

	if (evbuffer_get_length(buf) > 0)
		evbuffer_add(buf, "\n", 1);
	va_start(ap, fmt);
	evbuffer_add_vprintf(buf, fmt, ap);
	va_end(ap);
}

static void
plain_done(void *arg)
{
	struct shell_run *run = arg;

	evbuffer_free(run->rc);
	run_free(run);
}

static void
plain_exit(struct spawn *sp, int status, void *arg)
{
	static const char *const descs_all[] = { "stdout", "stderr", "returncode" };
	static const char *const descs_quiet[] = { "stdout", "returncode" };
	struct shell_run *run = arg;
	struct evbuffer *out = spawn_output(sp, 1), *err = spawn_output(sp, 2);
	int has_err;

	for (int s = 1; s <= 2; s++) {
		if (spawn_dropped(sp, s) > 0)
			append_note(s == 1 ? out : err, "[%s truncated: %llu "
			    "bytes over the %zu-byte limit were dropped]",
			    s == 1 ? "stdout" : "stderr",
			    (unsigned long long)spawn_dropped(sp, s),
			    run->agent->cfg.output_cap);
	}
	if (spawn_timed_out(sp))
		append_note(err, "[command timed out after %g seconds; its "
		    "process tree was killed]", run->timeout);
	run->rc = evbuffer_new();
	evbuffer_add_printf(run->rc, "%d", spawn_timed_out(sp) ? -SIGKILL :
	    exit_code(status));
	has_err = evbuffer_get_length(err) > 0;
	run->bufs[0] = out;
	run->bufs[1] = has_err ? err : run->rc;
	run->bufs[2] = run->rc;
	tool_result_stream(run->req, has_err, has_err ? 3 : 2, run->bufs,
	    has_err ? descs_all : descs_quiet, plain_done, run);
}

/* Streaming. */

static void
stream_event(struct shell_run *run, json_t *event)
{
	char *line = json_dumps(event, JSON_COMPACT);

	json_decref(event);
	http_reply_write(run->req, line, strlen(line));
	http_reply_write(run->req, "\n", 1);
	free(line);
}

static void
stream_data(struct shell_run *run, int stream, const char *data, size_t len)
{
	json_t *text = utf8_carry_json(&run->carry[stream], data, len);
	json_t *event;

	if (text != NULL) {
		event = json_object();
		json_object_set_new(event, "type",
		    json_string(stream == 1 ? "stdout" : "stderr"));
		json_object_set_new(event, "data", text);
		stream_event(run, event);
	}
	if (http_reply_pending(run->req) > SHELL_STREAM_HIGH)
		spawn_pause_output(run->sp);
}

static void
stream_output(struct spawn *sp, int stream, const char *data, size_t len,
    void *arg)
{
	(void)sp;
	stream_data(arg, stream, data, len);
}

static void
stream_exit(struct spawn *sp, int status, void *arg)
{
	struct shell_run *run = arg;
	json_t *event = json_object();

	for (int s = 1; s <= 2; s++)
		if (run->carry[s].n > 0)
			stream_data(run, s, "", 0);
	json_object_set_new(event, "type", json_string("end"));
	json_object_set_new(event, "returncode", json_integer(
	    spawn_timed_out(sp) ? -SIGKILL : exit_code(status)));
	json_object_set_new(event, "timed_out",
	    json_boolean(spawn_timed_out(sp)));
	stream_event(run, event);
	http_reply_end(run->req);
	run_free(run);
}

static void
stream_drain(struct http_request *req, void *arg)
{
	struct shell_run *run = arg;

	(void)req;
	spawn_resume_output(run->sp);
}

static void
keepalive_cb(evutil_socket_t fd, short what, void *arg)
{
	struct shell_run *run = arg;
	json_t *event = json_object();

	(void)fd;
	(void)what;
	json_object_set_new(event, "type", json_string("keepalive"));
	stream_event(run, event);
}

/* Client gone: nobody will read the output, so the command goes too. */
static void
client_gone(struct http_request *req, void *arg)
{
	struct shell_run *run = arg;

	log_info("client of command %d went away; killing its process tree",
	    (int)spawn_pid(run->sp));
	if (run->stream)
		http_reply_end(req);
	else
		http_reply_error(req, 499, "client closed the connection");
	run_free(run);
	/* The exit callback of a freed spawn never runs, so no double free. */
}

/* Under --run-as, the plain path's bash is executed from an execute-only
 * memfd copy of it, made at its first use: executed by a user who may not
 * read it, the process is undumpable (the kernel's would_dump), so that
 * no other process of that user may open its /proc/PID/fd (the command's
 * pipes) or memory. -1: /bin/bash itself. */
static int bash_fd = -2;

static int
bash_copy(const char *path)
{
	struct stat st;
	char path_rd[64];
	int in = open(path, O_RDONLY | O_CLOEXEC), fd = -1, ro;
	off_t off = 0;

	if (in < 0 || fstat(in, &st) < 0)
		goto fail;
	if ((fd = memfd_create("bash", MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0)
		goto fail;
	while (off < st.st_size)
		if (sendfile(fd, in, &off, (size_t)(st.st_size - off)) <= 0)
			goto fail;
	if (fchmod(fd, 0111) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK |
	    F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		goto fail;
	/* Read-only from here: exec refuses a file open for writing. */
	snprintf(path_rd, sizeof path_rd, "/proc/self/fd/%d", fd);
	if ((ro = open(path_rd, O_RDONLY | O_CLOEXEC)) < 0)
		goto fail;
	close(fd);
	close(in);
	return ro;
fail:
	log_warn("cannot copy %s to an execute-only memfd (%s): commands run "
	    "from %s itself", path, strerror(errno), path);
	if (fd >= 0)
		close(fd);
	if (in >= 0)
		close(in);
	return -1;
}

/* The plain path: a bash -c started for the command. */
static struct spawn *
start_plain(struct agent *agent, const char *command, int stream,
    const struct spawn_callbacks *cb, void *arg, const size_t cap[3],
    double timeout, struct error *err)
{
	const char *argv[] = { agent->shell, "-c", command, NULL };
	struct spawn_options opts;
	struct spawn *sp;
	int script = -1;

	confine_spawn_options(agent, &opts);
	opts.argv = argv;
	opts.stdio[0] = SPAWN_NULL;
	opts.stdio[1] = opts.stdio[2] = SPAWN_CAPTURE;
	if (strlen(command) > SHELL_ARGV_MAX) {
		script = spawn_memfd("sandbox-agent-command", command,
		    strlen(command));
		if (script < 0) {
			error_set_errno(err, 500, errno, "cannot hold the "
			    "command in a memfd");
			return NULL;
		}
		argv[2] = SHELL_FROM_STDIN;
		opts.stdio[0] = SPAWN_FD;
		opts.fd[0] = script;
	}
	opts.timeout = timeout;
	opts.capture_cap[1] = cap[1];
	opts.capture_cap[2] = cap[2];
	/* Not waiting here for the exec: a burst of calls then forks one
	 * after another while their shells start side by side. The shell
	 * was found at start; were it gone, the answer is 127, as from
	 * bash -c. A stream's first event needs the pid. */
	opts.async = !stream;
	if (bash_fd == -2)
		bash_fd = agent->drop_ids && strcmp(agent->shell,
		    "/bin/bash") == 0 ? bash_copy(agent->shell) : -1;
	if (bash_fd >= 0) {
		opts.use_exec_fd = 1;
		opts.exec_fd = bash_fd;
	}
	sp = spawn_start(agent->base, &opts, cb, arg, err);
	if (script >= 0)
		close(script);
	return sp;
}

void
shell_stop(void)
{
	if (bash_fd >= 0)
		close(bash_fd);
	bash_fd = -2;
}

void
shell_route_run(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	const char *command;
	struct spawn_callbacks cb = { 0 };
	size_t cap[3] = { 0, 0, 0 };
	struct shell_run *run;
	struct error err = { 0 };
	json_t *body;
	double timeout;
	int stream;

	if ((body = http_request_json(req, &err)) == NULL ||
	    jsonx_get_string(body, "command", 1, &command, &err) < 0 ||
	    jsonx_get_number(body, "timeout", agent->cfg.default_timeout,
	    &timeout, &err) < 0 ||
	    jsonx_get_bool(body, "stream", 0, &stream, &err) < 0)
		goto fail;
	if (command[strspn(command, " \t\r\n")] == '\0') {
		error_set(&err, 400, "command is empty");
		goto fail;
	}
	if (strlen(command) != json_string_length(json_object_get(body,
	    "command"))) {
		error_set(&err, 400, "command contains a NUL byte");
		goto fail;
	}
	if (!(timeout > 0) || timeout > 7 * 24 * 3600) {
		error_set(&err, 400, "timeout must be a number of seconds "
		    "between 0 and 604800");
		goto fail;
	}

	run = xcalloc(1, sizeof *run);
	run->agent = agent;
	run->req = req;
	run->timeout = timeout;
	run->stream = stream;
	if (!stream) {
		cap[1] = cap[2] = agent->cfg.output_cap;
		cb.on_exit = plain_exit;
	} else {
		cb.on_output = stream_output;
		cb.on_exit = stream_exit;
	}
	if (!stream &&
	    (run->sp = shell_template_run(command, strlen(command), &cb, run,
	    cap, timeout)) != NULL) {
		log_debug("command forked from the shell template");
	} else {
		run->sp = start_plain(agent, command, stream, &cb, run, cap,
		    timeout, &err);
		if (run->sp == NULL) {
			free(run);
			error_prefix(&err, "cannot start the command");
			goto fail;
		}
		log_debug("command runs in a shell started for it");
	}
	json_decref(body);
	body = NULL;
	http_request_on_close(req, client_gone, run);
	if (stream) {
		struct timeval tv = { SHELL_KEEPALIVE_SECONDS, 0 };
		json_t *event = json_object();

		http_request_on_drain(req, stream_drain, run);
		http_reply_start(req, 200, "application/x-ndjson", -1);
		json_object_set_new(event, "type", json_string("start"));
		json_object_set_new(event, "pid",
		    json_integer(spawn_pid(run->sp)));
		stream_event(run, event);
		run->keepalive = event_new(agent->base, -1, EV_PERSIST,
		    keepalive_cb, run);
		event_add(run->keepalive, &tv);
	}
	return;
fail:
	json_decref(body);
	http_reply_err(req, &err);
}
