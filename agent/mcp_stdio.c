/*
 * The stdio transport: the server is our child, started with its command,
 * args and env (merged over the environment commands get), in the
 * workspace, in its own process group under a keeper, under the same
 * seccomp filter and user as shell commands. Messages are JSON, one per
 * line, on its stdin and stdout; its stderr goes to our log line by line,
 * under its name, as do lines of its stdout that are not JSON: at most
 * LOG_BURST lines per LOG_INTERVAL seconds, each cut to STDERR_LINE_MAX
 * bytes, as the server may write as fast as it likes. It is gone when it
 * exits or closes its stdout; stopping it kills its whole process tree.
 */
#include "agent.h"
#include "mcp.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "log.h"
#include "spawn.h"
#include "xmalloc.h"

#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"
/* Of a longer stderr line, this much is logged. */
#define STDERR_LINE_MAX 2048
/* Lines logged for one server, stderr and non-JSON stdout together. */
#define LOG_INTERVAL 10
#define LOG_BURST 50
/* After EOF on stdout, how long to wait for the exit status to report. */
#define EXIT_WAIT_MS 1000

/* Owned by its server; freed by stdio_free. */
struct stdio_transport {
	struct mcp_transport base;
	struct mcp_conn *srv;
	struct spawn *sp;
	struct bufferevent *in;		/* the server's stdin */
	struct bufferevent *out;	/* its stdout */
	size_t scanned;			/* bytes of out known to hold no '\n' */
	struct evbuffer *errline;	/* stderr of the line being read */
	int skipping;			/* dropping the rest of a long line */
	struct log_rate rate;		/* of the lines it makes us log */
	struct event *exit_wait;
	const char *broken;		/* why a pipe broke, if one did */
	char lastline[256];		/* the last line it wrote on stderr */
	int stopped;
};

static void
lost(struct stdio_transport *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
lost(struct stdio_transport *t, const char *fmt, ...)
{
	struct error err;
	va_list ap;

	va_start(ap, fmt);
	error_vset(&err, 502, fmt, ap);
	va_end(ap);
	/* Why it failed to start is usually the last thing it said. */
	if (!t->srv->ready && t->lastline[0] != '\0') {
		size_t n = strlen(err.msg);

		snprintf(err.msg + n, sizeof err.msg - n, " (its last words on "
		    "stderr: %s)", t->lastline);
	}
	mcp_conn_lost(t->srv, &err);
}

static void
lost_exit(struct stdio_transport *t, int status)
{
	if (WIFSIGNALED(status))
		lost(t, "it was killed by signal %d (%s)", WTERMSIG(status),
		    strsignal(WTERMSIG(status)));
	else
		lost(t, "it exited with status %d", WEXITSTATUS(status));
}

static int
dump_cb(const char *buf, size_t size, void *data)
{
	return evbuffer_add(data, buf, size);
}

static void
stdio_send(struct mcp_transport *base, json_t *msg)
{
	struct stdio_transport *t = (struct stdio_transport *)base;
	struct evbuffer *out;

	if (t->stopped)
		return;
	out = bufferevent_get_output(t->in);
	/* Compact JSON has no raw newline, so one message is one line. */
	json_dump_callback(msg, dump_cb, out, JSON_COMPACT);
	evbuffer_add(out, "\n", 1);
}

static void
stdio_stop(struct mcp_transport *base)
{
	struct stdio_transport *t = (struct stdio_transport *)base;

	if (t->stopped)
		return;
	t->stopped = 1;
	bufferevent_free(t->in);
	bufferevent_free(t->out);
	t->in = t->out = NULL;
	if (t->exit_wait != NULL)
		event_del(t->exit_wait);
	if (t->sp != NULL) {
		/* The group, even when its leader is gone (npx -> node). */
		spawn_kill(t->sp, SIGKILL);
		spawn_free(t->sp);
		t->sp = NULL;
	}
}

static void
stdio_free(struct mcp_transport *base)
{
	struct stdio_transport *t = (struct stdio_transport *)base;

	stdio_stop(base);
	if (t->exit_wait != NULL)
		event_free(t->exit_wait);
	evbuffer_free(t->errline);
	free(t);
}

static const struct mcp_transport_ops stdio_ops = {
	.send = stdio_send,
	.stop = stdio_stop,
	.free = stdio_free,
};

/* One line of stdout, without its '\n'. */
static void
receive_line(struct stdio_transport *t, const char *line, size_t len)
{
	json_error_t jerr;
	json_t *msg;

	if (len > 0 && line[len - 1] == '\r')
		len--;
	if (strspn(line, " \t") >= len)
		return;
	msg = json_loadb(line, len, JSON_ALLOW_NUL, &jerr);
	if (msg == NULL) {
		log_rate_msg(&t->rate, LOG_WARN, "MCP server '%s' wrote a line "
		    "that is not JSON (%s): %.*s", t->srv->name, jerr.text,
		    len > 200 ? 200 : (int)len, line);
		return;
	}
	mcp_conn_receive(t->srv, msg);
	json_decref(msg);
}

static void
out_read_cb(struct bufferevent *bev, void *arg)
{
	struct stdio_transport *t = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct mcp_conn *srv = t->srv;

	/* A message may end the server and its last reference with it. */
	mcp_conn_ref(srv);
	while (!t->stopped) {
		size_t len = evbuffer_get_length(in), eol_len;
		struct evbuffer_ptr pos;

		if (t->scanned >= len)
			break;
		/* Look only at what came since the last read: a 64 MiB line
		 * arriving in pieces is scanned once, not once per piece. */
		evbuffer_ptr_set(in, &pos, t->scanned, EVBUFFER_PTR_SET);
		pos = evbuffer_search_eol(in, &pos, &eol_len, EVBUFFER_EOL_LF);
		if (pos.pos < 0) {
			t->scanned = len;
			if (len > MCP_MESSAGE_MAX)
				lost(t, "it wrote a line longer than %d bytes",
				    MCP_MESSAGE_MAX);
			break;
		}
		receive_line(t, (const char *)evbuffer_pullup(in, pos.pos),
		    (size_t)pos.pos);
		if (t->stopped)
			break;
		evbuffer_drain(in, (size_t)pos.pos + eol_len);
		t->scanned = 0;
	}
	mcp_conn_unref(srv);
}

static void
exit_wait_cb(evutil_socket_t fd, short what, void *arg)
{
	struct stdio_transport *t = arg;

	(void)fd;
	(void)what;
	lost(t, "%s", t->broken);
}

/* A pipe broke: the server is most likely exiting, and its exit status
 * makes the better report, so wait a little for it. */
static void
broken(struct stdio_transport *t, const char *why)
{
	struct timeval tv = { 0, EXIT_WAIT_MS * 1000 };

	if (t->broken != NULL)
		return;
	t->broken = why;
	bufferevent_disable(t->out, EV_READ);
	bufferevent_disable(t->in, EV_WRITE);
	if (spawn_exited(t->sp))
		return;		/* exited_cb follows */
	t->exit_wait = evtimer_new(mcp_conn_base(t->srv), exit_wait_cb, t);
	evtimer_add(t->exit_wait, &tv);
}

static void
out_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	broken(arg, what & BEV_EVENT_ERROR ? "reading its output failed" :
	    "it closed its standard output");
}

static void
in_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	broken(arg, "writing to its input failed");
}

/* Log the first len bytes of errline as a line (more of it may follow,
 * to be dropped: *cut). */
static void
stderr_line(struct stdio_transport *t, size_t len, int cut)
{
	char *line = (char *)evbuffer_pullup(t->errline, (ssize_t)len);
	size_t n = len;

	if (n > 0 && line[n - 1] == '\n')
		n--;
	if (n > 0 && line[n - 1] == '\r')
		n--;
	log_rate_msg(&t->rate, LOG_INFO, "MCP server '%s' stderr: %.*s%s",
	    t->srv->name, (int)n, line, cut ? " [line cut]" : "");
	if (strspn(line, " \t") < n)
		snprintf(t->lastline, sizeof t->lastline, "%.*s", (int)n, line);
	evbuffer_drain(t->errline, len);
}

static void
stderr_cb(struct spawn *sp, int stream, const char *data, size_t len,
    void *arg)
{
	struct stdio_transport *t = arg;
	struct evbuffer_ptr pos;

	(void)sp;
	(void)stream;
	/* The rest of a line already logged in part: up to its end. */
	if (t->skipping) {
		const char *eol = memchr(data, '\n', len);

		if (eol == NULL)
			return;
		t->skipping = 0;
		len -= (size_t)(eol + 1 - data);
		data = eol + 1;
	}
	evbuffer_add(t->errline, data, len);
	for (;;) {
		pos = evbuffer_search(t->errline, "\n", 1, NULL);
		if (pos.pos >= 0 && (size_t)pos.pos < STDERR_LINE_MAX) {
			stderr_line(t, (size_t)pos.pos + 1, 0);
		} else if (evbuffer_get_length(t->errline) >= STDERR_LINE_MAX) {
			stderr_line(t, STDERR_LINE_MAX, 1);
			if (pos.pos >= 0) {
				evbuffer_drain(t->errline, (size_t)pos.pos + 1 -
				    STDERR_LINE_MAX);
			} else {
				evbuffer_drain(t->errline,
				    evbuffer_get_length(t->errline));
				t->skipping = 1;
			}
		} else {
			break;
		}
	}
}

static void
exited_cb(struct spawn *sp, int status, void *arg)
{
	struct stdio_transport *t = arg;

	(void)sp;
	if (evbuffer_get_length(t->errline) > 0)
		stderr_line(t, evbuffer_get_length(t->errline), 0);
	lost_exit(t, status);
}

/* The program to execute: command itself when it has a '/', else the
 * first executable of that name on PATH. */
static char *
find_program(const char *command, const char *path, struct error *err)
{
	const char *dir = path != NULL ? path : DEFAULT_PATH;

	if (strchr(command, '/') != NULL)
		return xstrdup(command);
	for (;;) {
		size_t n = strcspn(dir, ":");
		struct stat st;
		char *file;

		/* An empty entry would mean our directory, not the server's. */
		if (n > 0) {
			file = xasprintf("%.*s/%s", (int)n, dir, command);
			if (stat(file, &st) == 0 && S_ISREG(st.st_mode) &&
			    access(file, X_OK) == 0)
				return file;
			free(file);
		}
		if (dir[n] == '\0')
			break;
		dir += n + 1;
	}
	error_set(err, 404, "command '%s' not found on PATH", command);
	return NULL;
}

/* The agent's child environment with env's entries added or replacing. */
static char **
merged_env(char **base, json_t *env)
{
	size_t n = 0, o = 0;
	const char *key;
	json_t *value;
	char **out;

	while (base[n] != NULL)
		n++;
	out = xcalloc(n + json_object_size(env) + 1, sizeof *out);
	for (size_t i = 0; i < n; i++) {
		size_t klen = strcspn(base[i], "=");

		if (json_object_getn(env, base[i], klen) == NULL)
			out[o++] = xstrdup(base[i]);
	}
	json_object_foreach(env, key, value)
		out[o++] = xasprintf("%s=%s", key, json_string_value(value));
	out[o] = NULL;
	return out;
}

static void
strv_free(char **v)
{
	for (size_t i = 0; v[i] != NULL; i++)
		free(v[i]);
	free(v);
}

static struct bufferevent *
pipe_event(struct event_base *base, int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
}

struct mcp_transport *
mcp_stdio_start(struct mcp_conn *srv, json_t *cfg, struct error *err)
{
	struct agent *agent = srv->agent;
	json_t *args = json_object_get(cfg, "args"), *arg;
	struct spawn_options opts;
	struct spawn_callbacks cb = { 0 };
	struct stdio_transport *t;
	const char *path = NULL, **argv;
	char **env, *program;
	size_t i;

	env = merged_env(agent->child_env, json_object_get(cfg, "env"));
	for (i = 0; env[i] != NULL; i++)
		if (strncmp(env[i], "PATH=", 5) == 0)
			path = env[i] + 5;
	program = find_program(json_string_value(json_object_get(cfg,
	    "command")), path, err);
	if (program == NULL) {
		strv_free(env);
		return NULL;
	}
	argv = xcalloc(json_array_size(args) + 2, sizeof *argv);
	argv[0] = program;
	json_array_foreach(args, i, arg)
		argv[i + 1] = json_string_value(arg);

	t = xcalloc(1, sizeof *t);
	t->base.ops = &stdio_ops;
	t->srv = srv;
	t->errline = evbuffer_new();
	t->rate = (struct log_rate)LOG_RATE_INIT(LOG_INTERVAL, LOG_BURST);
	confine_spawn_options(agent, &opts);
	opts.envp = (const char *const *)env;	/* child_env with "env" merged */
	opts.argv = argv;
	opts.stdio[0] = opts.stdio[1] = SPAWN_PIPE;
	opts.stdio[2] = SPAWN_CAPTURE;
	cb.on_output = stderr_cb;
	cb.on_exit = exited_cb;
	t->sp = spawn_start(agent->base, &opts, &cb, t, err);
	free(argv);
	free(program);
	strv_free(env);
	if (t->sp == NULL) {
		evbuffer_free(t->errline);
		free(t);
		return NULL;
	}
	log_info("MCP server '%s' started as pid %d", srv->name,
	    (int)spawn_pid(t->sp));
	t->in = pipe_event(agent->base, spawn_take_fd(t->sp, 0));
	t->out = pipe_event(agent->base, spawn_take_fd(t->sp, 1));
	bufferevent_setcb(t->in, NULL, NULL, in_event_cb, t);
	bufferevent_setcb(t->out, out_read_cb, NULL, out_event_cb, t);
	bufferevent_set_max_single_read(t->out, 256 * 1024);
	bufferevent_enable(t->in, EV_WRITE);
	bufferevent_enable(t->out, EV_READ);
	return &t->base;
}
