/*
 * process.Process: Start, Connect and List, the process table and the
 * output of its processes (input, signals and PTY sizes are
 * envd_process_input.c's).
 *
 * Start runs cmd with args as the named user, with its environment
 * (envd_env_build) and working directory (cwd, else the default workdir,
 * else home, entered as that user), under the commands' confinement: its
 * own process group under a keeper, the seccomp filter, no
 * supplementary group. The Start stream's Connect-Timeout-Ms is the
 * process's lifetime, as in envd; the client going away is not: a
 * process runs on until it exits or is killed, and Connect (by pid or
 * tag) attaches another stream to it. Streams get "start" first, then
 * output as it comes (each read is one "data" event), then "end" and the
 * end of stream; keepalives after Keepalive-Ping-Interval seconds of
 * silence. Output nobody streams is read and dropped, so a process never
 * blocks on it; while a stream lags (STREAM_HIGH queued), output is not
 * read at all, so memory stays bounded and the process waits, as in envd.
 * An exited process is kept KEEP_SECONDS for a late Connect, which then
 * gets its start and end.
 *
 * bash -c and bash -l -c without a pty (how E2B's SDKs run every command)
 * start from the shell template, a fork of a bash made before the call
 * made into a bash started anew with the call's argv, environment, user
 * and directory (shell_template_start.c), instead of a bash executed for
 * it: the start event and the output wait until it runs (its pid comes
 * then), and it is in the table from then on.
 */
#include "envd_process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "spawn.h"
#include "xmalloc.h"

#define PROCS_MAX	256	/* running at once */
#define KEPT_MAX	64	/* exited ones kept for a late Connect */
#define KEEP_SECONDS	30
#define SUBS_MAX	32	/* streams of one process */
#define ARGS_MAX	4096
#define STREAM_HIGH	(1024 * 1024)
#define PTY_CHUNK	(16 * 1024)
#define PTY_DRAIN_MAX	(1024 * 1024)	/* read after the exit, at most */
#define KEEPALIVE	"{\"event\":{\"keepalive\":{}}}"

/* One stream of a process's output; owned by the process. */
struct envd_sub {
	LIST_ENTRY(envd_sub) entry;
	struct envd_proc *proc;
	struct envd_stream *s;
};

static LIST_HEAD(, envd_proc) procs = LIST_HEAD_INITIALIZER(procs);
static size_t nrunning, nkept;

static void
proc_free(struct envd_proc *p)
{
	LIST_REMOVE(p, entry);
	nkept--;
	if (p->expire != NULL)
		event_free(p->expire);
	free(p->tag);
	json_decref(p->config);
	json_decref(p->end);
	free(p);
}

static void
expire_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	proc_free(arg);
}

struct envd_proc *
envd_proc_find(json_t *selector, int exited, struct error *err)
{
	struct envd_proc *p, *found = NULL;
	const char *tag;
	uint32_t pid;
	int has_pid;

	if (selector == NULL || envd_json_uint32(selector, "pid", NULL, &pid,
	    &has_pid, err) < 0 ||
	    envd_json_string(selector, "tag", NULL, &tag, err) < 0) {
		if (selector == NULL)
			error_set(err, 400, "a process selector (pid or tag) "
			    "is required");
		return NULL;
	}
	if (!has_pid && tag == NULL) {
		error_set(err, 400, "a process selector needs a pid or a tag");
		return NULL;
	}
	LIST_FOREACH(p, &procs, entry) {
		if (has_pid ? p->pid != pid : (p->tag == NULL ||
		    strcmp(p->tag, tag) != 0))
			continue;
		if (p->end == NULL)
			return p;	/* a running one before a kept one */
		if (exited && found == NULL)
			found = p;
	}
	if (found == NULL) {
		if (has_pid)
			error_set(err, 404, "process with pid %u not found",
			    (unsigned)pid);
		else
			error_set(err, 404, "process with tag %.200s not found",
			    tag);
	}
	return found;
}

/* Output. */

static size_t
most_pending(struct envd_proc *p)
{
	struct envd_sub *sub;
	size_t most = 0;

	LIST_FOREACH(sub, &p->subs, entry)
		if (envd_stream_pending(sub->s) > most)
			most = envd_stream_pending(sub->s);
	return most;
}

/* Read output while every stream keeps up, not while one lags. */
static void
flow(struct envd_proc *p)
{
	size_t pending = most_pending(p);

	if (!p->paused && pending > STREAM_HIGH) {
		p->paused = 1;
		if (p->pty >= 0 && p->pty_reading)
			event_del(p->pty_ev);
		else if (p->sp != NULL)
			spawn_pause_output(p->sp);
	} else if (p->paused && pending <= STREAM_HIGH / 2) {
		p->paused = 0;
		if (p->pty >= 0 && p->pty_reading)
			event_add(p->pty_ev, NULL);
		else if (p->sp != NULL)
			spawn_resume_output(p->sp);
	}
}

static void
send_data(struct envd_proc *p, const char *kind, const char *data,
    size_t len)
{
	char *text, *b64;
	struct envd_sub *sub;
	size_t n;

	if (LIST_EMPTY(&p->subs))
		return;
	text = xmalloc(ENVD_B64_LEN(len) + 64);
	n = (size_t)sprintf(text, "{\"event\":{\"data\":{\"%s\":\"", kind);
	b64 = text + n;
	n += envd_base64_encode(b64, data, len);
	memcpy(text + n, "\"}}}", 4);
	LIST_FOREACH(sub, &p->subs, entry)
		envd_stream_send_text(sub->s, text, n + 4);
	free(text);
	flow(p);
}

static void
on_output(struct spawn *sp, int stream, const char *data, size_t len,
    void *arg)
{
	(void)sp;
	send_data(arg, stream == 1 ? "stdout" : "stderr", data, len);
}

/* Read the pty once; 0 when there is nothing more to read from it. */
static ssize_t
pty_read(struct envd_proc *p)
{
	char buf[PTY_CHUNK];
	ssize_t n = read(p->pty, buf, sizeof buf);

	if (n > 0)
		send_data(p, "pty", buf, (size_t)n);
	else if (n == 0 || (errno != EAGAIN && errno != EINTR))
		return 0;	/* EIO: no process holds the terminal */
	return n;
}

static void
pty_cb(evutil_socket_t fd, short what, void *arg)
{
	struct envd_proc *p = arg;

	(void)fd;
	(void)what;
	if (pty_read(p) == 0 && p->pty_reading) {
		event_del(p->pty_ev);
		p->pty_reading = 0;
	}
}

/* The end event, as Go's os/exec reports a wait status. */
static json_t *
end_event(int status)
{
	char text[128];
	json_t *end;

	if (WIFEXITED(status)) {
		snprintf(text, sizeof text, "exit status %d",
		    WEXITSTATUS(status));
		end = json_pack("{s:i, s:b, s:s}", "exitCode",
		    WEXITSTATUS(status), "exited", 1, "status", text);
		if (WEXITSTATUS(status) != 0)
			json_object_set_new(end, "error", json_string(text));
		return end;
	}
	snprintf(text, sizeof text, "signal: %s%s", WIFSIGNALED(status) ?
	    strsignal(WTERMSIG(status)) : "unknown",
	    WIFSIGNALED(status) && WCOREDUMP(status) ? " (core dumped)" : "");
	text[8] = (char)(text[8] >= 'A' && text[8] <= 'Z' ? text[8] + 32 :
	    text[8]);	/* Go's "signal: killed" */
	return json_pack("{s:i, s:b, s:s, s:s}", "exitCode", -1, "exited", 0,
	    "status", text, "error", text);
}

static void
send_end(struct envd_stream *s, json_t *end)
{
	envd_stream_send(s, json_pack("{s:{s:O}}", "event", "end", end));
	envd_stream_end(s, NULL);
}

/* The oldest kept process goes when too many are kept. */
static void
keep(struct envd_proc *p)
{
	struct timeval tv = { KEEP_SECONDS, 0 };
	struct envd_proc *q, *oldest = NULL;

	nkept++;
	p->expire = evtimer_new(envd_base(), expire_cb, p);
	evtimer_add(p->expire, &tv);
	if (nkept <= KEPT_MAX)
		return;
	LIST_FOREACH(q, &procs, entry)
		if (q->end != NULL)
			oldest = q;	/* the list is newest first */
	proc_free(oldest);
}

static void start_failed(struct envd_proc *p);

static void
on_exit_cb(struct spawn *sp, int status, void *arg)
{
	struct envd_proc *p = arg;
	struct envd_sub *sub;
	size_t drained = 0;
	ssize_t n;

	(void)sp;
	if (p->starting != NULL) {
		start_failed(p);
		return;
	}
	/* What the process wrote before it exited is in the terminal. */
	while (p->pty >= 0 && drained < PTY_DRAIN_MAX &&
	    (n = pty_read(p)) > 0)
		drained += (size_t)n;
	p->end = end_event(status);
	while ((sub = LIST_FIRST(&p->subs)) != NULL) {
		LIST_REMOVE(sub, entry);
		send_end(sub->s, p->end);
		free(sub);
	}
	p->nsubs = 0;
	log_debug("envd: process %u ended", (unsigned)p->pid);
	spawn_free(p->sp);
	p->sp = NULL;
	if (p->pty_ev != NULL)
		event_free(p->pty_ev);
	p->pty_ev = NULL;
	if (p->pty >= 0)
		close(p->pty);
	p->pty = -1;
	envd_input_free(&p->in);
	nrunning--;
	keep(p);
}

static void
sub_gone(struct envd_stream *s, void *arg)
{
	struct envd_sub *sub = arg;
	struct envd_proc *p = sub->proc;

	(void)s;
	LIST_REMOVE(sub, entry);
	p->nsubs--;
	free(sub);
	flow(p);
}

static void
sub_drain(struct envd_stream *s, void *arg)
{
	struct envd_sub *sub = arg;

	(void)s;
	flow(sub->proc);
}

/* A stream of p's output from now on, its first message the start. */
static void
subscribe(struct envd_proc *p, struct envd_call *call)
{
	static const struct envd_stream_callbacks cb = { sub_gone, sub_drain };
	struct envd_sub *sub = xcalloc(1, sizeof *sub);
	char start[64];

	sub->proc = p;
	sub->s = envd_stream_open(call, KEEPALIVE, &cb, sub);
	snprintf(start, sizeof start, "{\"event\":{\"start\":{\"pid\":%u}}}",
	    (unsigned)p->pid);
	envd_stream_send_text(sub->s, start, strlen(start));
	LIST_INSERT_HEAD(&p->subs, sub, entry);
	p->nsubs++;
}

/* Start. */

/* ProcessConfig as List shows it, and argv. */
static int
read_config(json_t *process, json_t **config, const char ***argv,
    json_t **envs, const char **cwd, struct error *err)
{
	const char *cmd;
	json_t *args, *v;
	size_t i;

	*argv = NULL;
	if (envd_json_string(process, "cmd", NULL, &cmd, err) < 0 ||
	    envd_json_object(process, "envs", NULL, envs, err) < 0 ||
	    envd_json_string(process, "cwd", NULL, cwd, err) < 0)
		return -1;
	args = envd_json_field(process, "args", NULL);
	if (cmd == NULL || cmd[0] == '\0') {
		error_set(err, 400, "process.cmd is required");
		return -1;
	}
	if (args != NULL && (!json_is_array(args) ||
	    json_array_size(args) > ARGS_MAX)) {
		error_set(err, 400, "process.args must be an array of at most "
		    "%d strings", ARGS_MAX);
		return -1;
	}
	*argv = xcalloc(json_array_size(args) + 2, sizeof **argv);
	(*argv)[0] = cmd;
	json_array_foreach(args, i, v) {
		if (!json_is_string(v) ||
		    strlen(json_string_value(v)) != json_string_length(v)) {
			error_set(err, 400, "process.args must be strings "
			    "without NUL");
			free(*argv);
			*argv = NULL;
			return -1;
		}
		(*argv)[i + 1] = json_string_value(v);
	}
	*config = json_pack("{s:s, s:o, s:o}", "cmd", cmd, "args",
	    args != NULL ? json_incref(args) : json_array(), "envs",
	    *envs != NULL ? json_incref(*envs) : json_object());
	if (*cwd != NULL)
		json_object_set_new(*config, "cwd", json_string(*cwd));
	return 0;
}

/* An exited process kept under the pid or tag of a new one goes, so
 * that a late Connect cannot get the old one's end. */
static void
forget_kept(uint32_t pid, const char *tag)
{
	struct envd_proc *p, *next;

	for (p = LIST_FIRST(&procs); p != NULL; p = next) {
		next = LIST_NEXT(p, entry);
		if (p->end != NULL && (p->pid == pid || (tag != NULL &&
		    p->tag != NULL && strcmp(p->tag, tag) == 0)))
			proc_free(p);
	}
}

/* argv is bash -c, after -l or --login if any. */
static int
bash_c(const char **argv)
{
	size_t i = 1;

	while (argv[i] != NULL && (strcmp(argv[i], "-l") == 0 ||
	    strcmp(argv[i], "--login") == 0))
		i++;
	return argv[i] != NULL && strcmp(argv[i], "-c") == 0 &&
	    argv[i + 1] != NULL;
}

static void
start_free(struct envd_proc *p)
{
	nrunning--;
	envd_input_free(&p->in);
	free(p->starting_dir);
	free(p->tag);
	json_decref(p->config);
	free(p);
}

/* Its command could not start: the Start call fails as a failed exec
 * would (status 400, envd's), and the process never was. */
static void
start_failed(struct envd_proc *p)
{
	struct error err = { 0 };
	int in_cwd, e = spawn_start_errno(p->sp, &in_cwd);

	if (in_cwd)
		error_set_errno(&err, 400, e, "cannot change to directory %s",
		    p->starting_dir);
	else if (e != 0)
		error_set_errno(&err, 400, e, "cannot start %s",
		    json_string_value(json_object_get(p->config, "cmd")));
	else
		error_set(&err, 400, "the process was killed before it "
		    "started");
	envd_fail(p->starting, &err);
	spawn_free(p->sp);
	start_free(p);
}

/* The client left before the command ran: it goes too. */
static void
start_gone(struct envd_call *call, void *arg)
{
	struct envd_proc *p = arg;

	(void)call;
	spawn_free(p->sp);
	start_free(p);
}

static void
insert(struct envd_proc *p)
{
	forget_kept(p->pid, p->tag);
	LIST_INSERT_HEAD(&procs, p, entry);
}

/* The template's command runs: its pid is known, the stream begins. */
static void
started_cb(struct spawn *sp, void *arg)
{
	struct envd_proc *p = arg;
	struct envd_call *call = p->starting;

	p->pid = (uint32_t)spawn_pid(sp);
	p->starting = NULL;
	free(p->starting_dir);
	p->starting_dir = NULL;
	envd_call_on_close(call, NULL, NULL);
	insert(p);
	log_debug("envd: process %u started from the shell template",
	    (unsigned)p->pid);
	subscribe(p, call);
}

static struct spawn *
start_spawn(struct envd_call *call, struct envd_proc *p, const char **argv,
    char **env, const char *cwd, int stdin_open, int slave, struct error *err)
{
	const struct envd_user *u = envd_call_user(call);
	struct spawn_callbacks cb = { .on_exit = on_exit_cb };
	struct spawn_options o;
	int set_ids = envd_user_switches(u->uid, u->gid);

	if (slave < 0 && bash_c(argv)) {
		cb.on_output = on_output;
		cb.on_start = started_cb;
		p->sp = shell_template_start_bash(argv,
		    (const char *const *)env, cwd, set_ids, u->uid, u->gid,
		    stdin_open, &cb, p, envd_call_timeout(call));
		if (p->sp != NULL) {
			p->starting = call;
			p->starting_dir = xstrdup(cwd);
			return p->sp;
		}
		cb.on_start = NULL;
	}

	confine_spawn_options(envd_call_agent(call), &o);
	o.argv = argv;
	o.envp = (const char *const *)env;
	o.cwd = cwd;
	o.cwd_as_user = 1;
	o.search_path = 1;
	o.set_ids = set_ids;
	o.uid = u->uid;
	o.gid = u->gid;
	o.timeout = envd_call_timeout(call);
	if (slave >= 0) {
		o.ctty = 1;
		for (int i = 0; i < 3; i++) {
			o.stdio[i] = SPAWN_FD;
			o.fd[i] = slave;
		}
	} else {
		cb.on_output = on_output;
		o.stdio[0] = stdin_open ? SPAWN_PIPE : SPAWN_NULL;
		o.stdio[1] = o.stdio[2] = SPAWN_CAPTURE;
	}
	return spawn_start(envd_call_agent(call)->base, &o, &cb, p, err);
}

static void
start_run(struct envd_call *call, json_t *msg)
{
	struct envd_proc *p = NULL;
	json_t *process, *pty, *size, *envs, *config = NULL;
	const char **argv = NULL, *cwd, *tag;
	uint32_t cols = 0, rows = 0;
	struct error err = { 0 };
	char *dir = NULL, **env = NULL;
	int stdin_open = 1, master = -1, slave = -1, present;

	if (envd_json_object(msg, "process", NULL, &process, &err) < 0 ||
	    envd_json_object(msg, "pty", NULL, &pty, &err) < 0 ||
	    envd_json_string(msg, "tag", NULL, &tag, &err) < 0 ||
	    (envd_json_field(msg, "stdin", NULL) != NULL &&
	    envd_json_bool(msg, "stdin", NULL, &stdin_open, &err) < 0))
		goto fail;
	if (process == NULL) {
		error_set(&err, 400, "process is required");
		goto fail;
	}
	if (pty != NULL && (envd_json_object(pty, "size", NULL, &size,
	    &err) < 0 || (size != NULL && (envd_json_uint32(size, "cols", NULL,
	    &cols, &present, &err) < 0 || envd_json_uint32(size, "rows", NULL,
	    &rows, &present, &err) < 0))))
		goto fail;
	if (read_config(process, &config, &argv, &envs, &cwd, &err) < 0 ||
	    (dir = envd_path_resolve(envd_call_user(call), cwd, &err)) == NULL ||
	    (env = envd_env_build(envd_call_agent(call), envd_call_user(call),
	    envs, &err)) == NULL)
		goto fail;
	if (nrunning >= PROCS_MAX) {
		error_set(&err, 429, "%d processes run already", PROCS_MAX);
		goto fail;
	}
	if (pty != NULL && (master = envd_pty_open(envd_call_user(call), cols,
	    rows, &slave, &err)) < 0)
		goto fail;
	p = xcalloc(1, sizeof *p);
	p->pty = master;
	p->in.fd = -1;
	p->sp = start_spawn(call, p, argv, env, dir, stdin_open, slave, &err);
	if (slave >= 0)
		close(slave);
	if (p->sp == NULL) {
		if (err.status != 503)
			err.status = 400;	/* envd's choice */
		goto fail;
	}
	p->tag = tag != NULL ? xstrdup(tag) : NULL;
	p->config = config;
	config = NULL;
	nrunning++;
	if (p->starting == NULL) {
		p->pid = (uint32_t)spawn_pid(p->sp);
		insert(p);
	}
	if (master >= 0) {
		p->in.fd = fcntl(master, F_DUPFD_CLOEXEC, 0);
		fcntl(master, F_SETFL, O_NONBLOCK);
		p->pty_ev = event_new(envd_call_agent(call)->base, master,
		    EV_READ | EV_PERSIST, pty_cb, p);
		event_add(p->pty_ev, NULL);
		p->pty_reading = 1;
	} else if (stdin_open) {
		p->in.fd = spawn_take_fd(p->sp, 0);
	}
	free(argv);
	free(dir);
	envd_env_free(env);
	if (p->starting != NULL) {
		envd_call_on_close(call, start_gone, p);
		return;
	}
	log_debug("envd: process %u started (%s)", (unsigned)p->pid,
	    json_string_value(json_object_get(p->config, "cmd")));
	subscribe(p, call);
	return;
fail:
	if (p != NULL) {
		if (master >= 0)
			close(master);
		free(p);
	} else if (master >= 0) {
		close(master);
	}
	json_decref(config);
	free(argv);
	free(dir);
	envd_env_free(env);
	envd_fail(call, &err);
}

static void
connect_run(struct envd_call *call, json_t *msg)
{
	static const struct envd_stream_callbacks none = { NULL, NULL };
	struct error err = { 0 };
	struct envd_proc *p;
	struct envd_stream *s;
	char start[64];

	p = envd_proc_find(envd_json_field(msg, "process", NULL), 1, &err);
	if (p != NULL && p->end == NULL && p->nsubs >= SUBS_MAX)
		error_set(&err, 429, "%d streams of process %u already",
		    SUBS_MAX, (unsigned)p->pid);
	if (err.status != 0) {
		envd_fail(call, &err);
		return;
	}
	if (p->end == NULL) {
		subscribe(p, call);
		return;
	}
	s = envd_stream_open(call, KEEPALIVE, &none, NULL);
	snprintf(start, sizeof start, "{\"event\":{\"start\":{\"pid\":%u}}}",
	    (unsigned)p->pid);
	envd_stream_send_text(s, start, strlen(start));
	send_end(s, p->end);
}

static void
list_run(struct envd_call *call, json_t *msg)
{
	json_t *list = json_array(), *info;
	struct envd_proc *p;

	(void)msg;
	LIST_FOREACH(p, &procs, entry) {
		if (p->end != NULL)
			continue;
		info = json_pack("{s:O, s:I}", "config", p->config, "pid",
		    (json_int_t)p->pid);
		if (p->tag != NULL)
			json_object_set_new(info, "tag", json_string(p->tag));
		json_array_append_new(list, info);
	}
	envd_reply(call, json_pack("{s:o}", "processes", list));
}

const struct envd_method envd_process_methods[] = {
	{ "process.Process/Start", ENVD_SERVER_STREAM, 1, start_run, NULL },
	{ "process.Process/Connect", ENVD_SERVER_STREAM, 0, connect_run, NULL },
	{ "process.Process/List", ENVD_UNARY, 0, list_run, NULL },
	{ "process.Process/SendInput", ENVD_UNARY, 0, envd_process_send_input,
	    NULL },
	{ "process.Process/StreamInput", ENVD_CLIENT_STREAM, 0, NULL,
	    envd_process_stream_input },
	{ "process.Process/CloseStdin", ENVD_UNARY, 0, envd_process_close_stdin,
	    NULL },
	{ "process.Process/SendSignal", ENVD_UNARY, 0, envd_process_signal,
	    NULL },
	{ "process.Process/Update", ENVD_UNARY, 0, envd_process_update, NULL },
};
const size_t envd_process_nmethods =
    sizeof envd_process_methods / sizeof envd_process_methods[0];
