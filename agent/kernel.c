/*
 * An IPython kernel's process (kernel.h): a Python child started on first
 * use (or by kernel_start), confined like shell commands, in its own
 * process group under a keeper. It runs agent/embed/kernel.py, which the
 * binary carries, and which hosts IPython's InteractiveShell. A
 * KERNEL_E2B kernel gets "e2b" and the directory it starts in as its
 * arguments (it changes there itself, as the sandbox user); a KERNEL_MCP
 * one none.
 *
 * The script goes to Python through a memfd at the child's fd 4, read by a
 * one-line bootstrap given with -c: with the script itself after -c, all
 * of it would show in the ps output of every command in the sandbox.
 *
 * Channels: a socket pair at the child's fd 3 carries frames (a 4-byte
 * big-endian length, then JSON): the kernel's {"ready"} once (or
 * {"ready": false, "error"} when it cannot start where it was asked to),
 * then those of cells (kernel_cell.c). Code in a cell can write to fd 3
 * too: a frame over the limits of kernel_stream.h, malformed, or out of
 * turn breaks the protocol, and the kernel is killed and restarted, its
 * cell told why. Its stdout and stderr are pipes we read, so output of
 * every kind (print, os.system, !ls, subprocesses) lands in them in order.
 *
 * A cell past its timeout gets SIGINT (the whole group, as a terminal's
 * ^C), and SIGKILL of its whole tree after a grace if it does not return;
 * the kernel is then restarted. A kernel that dies is replaced too; its
 * cell says why.
 */
#include "agent.h"
#include "kernel_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "log.h"
#include "spawn.h"
#include "timing.h"
#include "token.h"
#include "xmalloc.h"

#define KERNEL_START_SECONDS 60		/* to the ready frame */
#define KERNEL_EOF_SECONDS 1		/* from closing fd 3 to exiting */

extern const char _binary_kernel_py_start[], _binary_kernel_py_end[];

static void timer_cb(evutil_socket_t fd, short what, void *arg);
static void eof_cb(evutil_socket_t fd, short what, void *arg);

struct kernel *
kernel_new(struct agent *agent, enum kernel_mode mode, const char *cwd,
    int keep_running)
{
	struct kernel *k = xcalloc(1, sizeof *k);

	k->agent = agent;
	k->mode = mode;
	k->cwd = cwd != NULL ? xstrdup(cwd) : NULL;
	k->keep_running = keep_running;
	TAILQ_INIT(&k->queue);
	TAILQ_INIT(&k->waiters);
	kernel_stream_init(&k->out[1]);
	kernel_stream_init(&k->out[2]);
	k->timer = evtimer_new(agent->base, timer_cb, k);
	k->eof_timer = evtimer_new(agent->base, eof_cb, k);
	return k;
}

void
kernel_arm(struct kernel *k, enum kernel_timer kind, double seconds)
{
	struct timeval tv;

	tv = timing_timeval(seconds);
	k->timer_kind = kind;
	evtimer_add(k->timer, &tv);
}

static void
output_cb(struct spawn *sp, int stream, const char *data, size_t len,
    void *arg)
{
	struct kernel *k = arg;

	int hit;

	(void)sp;
	hit = kernel_stream_feed(&k->out[stream], k->state == KERNEL_BUSY,
	    k->marker, data, len, k->agent->cfg.output_cap);
	if (k->state == KERNEL_BUSY)
		kernel_cell_output(k, stream);
	if (hit)
		kernel_check_done(k);
}

/* Tell every waiter the kernel is ready (err NULL) or will not be. */
static void
notify_waiters(struct kernel *k, const struct error *err)
{
	struct kernel_waiter *w;

	while ((w = TAILQ_FIRST(&k->waiters)) != NULL) {
		TAILQ_REMOVE(&k->waiters, w, entry);
		w->cb(err, w->arg);
		free(w);
	}
}

/* Kill the kernel's whole tree and forget it and its output. */
static void
stop(struct kernel *k)
{
	if (k->sp != NULL) {
		/* The group may outlive its leader (background jobs). */
		spawn_kill(k->sp, SIGKILL);
		spawn_free(k->sp);
		k->sp = NULL;
	}
	if (k->ctl != NULL) {
		bufferevent_free(k->ctl);
		k->ctl = NULL;
	}
	evtimer_del(k->timer);
	evtimer_del(k->eof_timer);
	kernel_stream_reset(&k->out[1]);
	kernel_stream_reset(&k->out[2]);
	k->state = KERNEL_STOPPED;
}

/* It will not be ready: stop it, fail what waited for it. */
static void
start_failed(struct kernel *k, const struct error *err)
{
	log_error("%s", err->msg);
	stop(k);
	notify_waiters(k, err);
	kernel_fail_queue(k, err);
}

void
kernel_lose(struct kernel *k, const char *why)
{
	if (k->lost != NULL)
		return;
	k->lost = why;
	log_warn("the IPython kernel %s; killing it", why);
	bufferevent_disable(k->ctl, EV_READ);
	spawn_kill(k->sp, SIGKILL);
}

void
kernel_set_reading(struct kernel *k, int on)
{
	if (k->sp == NULL)
		return;
	if (on) {
		spawn_resume_output(k->sp);
		if (k->lost == NULL && k->ctl != NULL &&
		    !evtimer_pending(k->eof_timer, NULL))
			bufferevent_enable(k->ctl, EV_READ);
	} else {
		spawn_pause_output(k->sp);
		if (k->ctl != NULL)
			bufferevent_disable(k->ctl, EV_READ);
	}
}

static void
ready(struct kernel *k, json_t *msg)
{
	const char *py = json_string_value(json_object_get(msg, "python"));
	const char *ipy = json_string_value(json_object_get(msg, "ipython"));
	const char *why = json_string_value(json_object_get(msg, "error"));
	struct error err = { 0 };

	evtimer_del(k->timer);
	if (!json_is_true(json_object_get(msg, "ready"))) {
		/* It cannot work where it was asked to (cwd): the request's
		 * fault, not ours. */
		error_set(&err, 400, "the Python kernel cannot start in %s: %.300s",
		    k->cwd != NULL ? k->cwd : "the workspace",
		    why != NULL ? why : "(no reason given)");
		start_failed(k, &err);
		return;
	}
	log_info("IPython kernel ready in %.0f ms (pid %d, Python %s, "
	    "IPython %s)", (timing_monotonic() - k->started) * 1000,
	    (int)spawn_pid(k->sp), py ? py : "?", ipy ? ipy : "?");
	for (int s = 1; s <= 2; s++) {
		if (evbuffer_get_length(k->out[s].buf) > 0) {
			char *text = kernel_stream_tail(&k->out[s], 500);

			log_warn("the IPython kernel wrote to %s as it started: "
			    "%s", s == 1 ? "stdout" : "stderr", text);
			free(text);
		}
		kernel_stream_reset(&k->out[s]);
	}
	k->state = KERNEL_IDLE;
	notify_waiters(k, NULL);
	kernel_kick(k);
}

static void
ctl_read_cb(struct bufferevent *bev, void *arg)
{
	struct kernel *k = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	const char *why;
	json_t *msg;
	int rc;

	while (k->ctl == bev && k->lost == NULL &&
	    (rc = kernel_stream_read_frame(in, &msg, &why)) != 0) {
		if (rc < 0) {
			kernel_lose(k, why);
			return;
		}
		if (k->state == KERNEL_STARTING &&
		    json_object_get(msg, "ready") != NULL)
			ready(k, msg);
		else
			kernel_cell_frame(k, msg);
		json_decref(msg);
	}
}

/* End of file on the channel: a dying kernel closes it, and exit_cb will
 * say how it ended; one that lives on without it is of no use. */
static void
ctl_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct kernel *k = arg;
	struct timeval tv = { KERNEL_EOF_SECONDS, 0 };

	(void)what;
	bufferevent_disable(bev, EV_READ);
	evtimer_add(k->eof_timer, &tv);
}

static void
eof_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	kernel_lose(arg, "closed its control channel");
}

static void
describe_status(int status, const char *lost, char *buf, size_t size)
{
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && lost != NULL)
		snprintf(buf, size, "%s", lost);
	else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
		snprintf(buf, size, "was killed by signal 9 (SIGKILL; the "
		    "out-of-memory killer sends it)");
	else if (WIFSIGNALED(status))
		snprintf(buf, size, "was killed by signal %d (%s)",
		    WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, size, "exited with status %d",
		    WEXITSTATUS(status));
}

static int start(struct kernel *k, struct error *err);

void
kernel_replace(struct kernel *k)
{
	struct error err = { 0 };

	stop(k);
	if (start(k, &err) < 0)
		start_failed(k, &err);
}

static void
exit_cb(struct spawn *sp, int status, void *arg)
{
	struct kernel *k = arg;
	struct error err = { 0 };
	char how[256];
	char *detail;

	(void)sp;
	describe_status(status, k->lost, how, sizeof how);
	switch (k->state) {
	case KERNEL_STARTING:
		detail = kernel_stream_tail(&k->out[evbuffer_get_length(
		    k->out[2].buf) > 0 ? 2 : 1], 600);
		error_set(&err, 503, "the IPython kernel could not start: it "
		    "%s%s%s", how, detail[0] != '\0' ? ": " : "", detail);
		free(detail);
		start_failed(k, &err);
		break;
	case KERNEL_BUSY:
		log_warn("the IPython kernel %s while running a cell", how);
		if (k->running->abandoned) {
			snprintf(how + strlen(how), sizeof how - strlen(how),
			    " in a cell whose client had left");
			kernel_tell_next(k, how);
		}
		kernel_finish_cell(k, KERNEL_END_LOST, "the IPython kernel %s "
		    "while running this cell: its state (variables, imports) "
		    "is lost; the next call gets a fresh kernel", how);
		kernel_replace(k);
		break;
	default:
		log_warn("the IPython kernel %s while idle", how);
		snprintf(how + strlen(how), sizeof how - strlen(how),
		    " between cells");
		kernel_tell_next(k, how);
		if (k->keep_running || !TAILQ_EMPTY(&k->queue))
			kernel_replace(k);
		else
			stop(k);
		break;
	}
}

/* SIGINT to the group, as ^C in a terminal; not before the kernel runs the
 * cell, else the signal would find it between cells, where it is ignored.
 * Either way the kernel is killed if the cell has not ended by the grace. */
void
kernel_interrupt(struct kernel *k)
{
	struct kernel_cell *cell = k->running;

	cell->interrupt = 1;
	if (cell->started)
		spawn_kill(k->sp, SIGINT);
	evtimer_del(k->timer);
	kernel_arm(k, TIMER_GRACE, KERNEL_GRACE_SECONDS);
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct kernel *k = arg;
	struct kernel_cell *cell = k->running;
	struct error err = { 0 };

	(void)fd;
	(void)what;
	switch (k->timer_kind) {
	case TIMER_START:
		error_set(&err, 503, "the IPython kernel did not start within "
		    "%d seconds", KERNEL_START_SECONDS);
		start_failed(k, &err);
		break;
	case TIMER_CELL:
		log_info("IPython cell timed out after %g s; interrupting it",
		    cell->timeout);
		cell->timed_out = 1;
		kernel_interrupt(k);
		break;
	case TIMER_GRACE:
		log_warn("the IPython kernel ignored the interrupt; killing and "
		    "restarting it");
		if (cell->abandoned)
			kernel_tell_next(k, "was restarted, as a cell whose "
			    "client had left did not stop on interrupt");
		kernel_finish_cell(k, KERNEL_END_LOST, "the cell ran past its "
		    "%g-second timeout and did not stop within %d seconds of "
		    "the interrupt: the kernel was killed and restarted, and "
		    "its state (variables, imports) is lost", cell->timeout,
		    KERNEL_GRACE_SECONDS);
		kernel_replace(k);
		break;
	}
}

/* What ps shows after "python3 -u -c": it reads the script from fd 4
 * (closing it, so that nothing the kernel runs inherits it) and runs it
 * as -c would, under a name that tracebacks show. */
#define KERNEL_BOOTSTRAP \
	"exec(compile(open(4,'rb').read(),'sandbox-agent-kernel.py','exec'))"

/* The interpreter: --python as given when it names a path, else found in
 * the PATH of commands. Caller frees; NULL with err (503). */
static char *
find_python(struct agent *agent, struct error *err)
{
	const char *name = agent->cfg.python ? agent->cfg.python : "python3";
	const char *path = "/usr/local/bin:/usr/bin:/bin", *p, *end;

	if (strchr(name, '/') != NULL) {
		if (access(name, X_OK) == 0)
			return xstrdup(name);
		error_set_errno(err, 503, errno, "cannot run the Python "
		    "interpreter %s", name);
		return NULL;
	}
	for (char **e = agent->child_env; *e != NULL; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	for (p = path; *p != '\0'; p = *end ? end + 1 : end) {
		char *file;

		end = strchrnul(p, ':');
		if (end == p)
			continue;
		file = xasprintf("%.*s/%s", (int)(end - p), p, name);
		if (access(file, X_OK) == 0)
			return file;
		free(file);
	}
	error_set(err, 503, "no Python interpreter for the IPython kernel: "
	    "'%s' is not in PATH (%s); set --python or AGENT_PYTHON", name,
	    path);
	return NULL;
}

static int
start(struct kernel *k, struct error *err)
{
	struct agent *agent = k->agent;
	struct spawn_options opts;
	struct spawn_callbacks cb = { 0 };
	const char *argv[7];
	char hex[TOKEN_HEX_LEN], *python;
	int sv[2], fds[2];

	if ((python = find_python(agent, err)) == NULL)
		return -1;
	if ((fds[1] = spawn_memfd("sandbox-agent-kernel.py",
	    _binary_kernel_py_start, (size_t)(_binary_kernel_py_end -
	    _binary_kernel_py_start))) < 0) {
		error_set_errno(err, 503, errno, "cannot start the IPython "
		    "kernel: memfd");
		free(python);
		return -1;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		error_set_errno(err, 500, errno, "socketpair");
		close(fds[1]);
		free(python);
		return -1;
	}
	fds[0] = sv[1];
	argv[0] = python;
	argv[1] = "-u";		/* no buffering: output keeps its order */
	argv[2] = "-c";
	argv[3] = KERNEL_BOOTSTRAP;
	argv[4] = NULL;
	if (k->mode == KERNEL_E2B) {
		argv[4] = "e2b";
		argv[5] = k->cwd;
		argv[6] = NULL;
	}
	confine_spawn_options(agent, &opts);
	opts.argv = argv;
	opts.stdio[0] = SPAWN_NULL;
	opts.stdio[1] = opts.stdio[2] = SPAWN_CAPTURE;
	opts.pass_fds = fds;
	opts.npass_fds = 2;
	cb.on_output = output_cb;
	cb.on_exit = exit_cb;
	k->sp = spawn_start(agent->base, &opts, &cb, k, err);
	close(sv[1]);
	close(fds[1]);
	free(python);
	if (k->sp == NULL) {
		close(sv[0]);
		error_prefix(err, "cannot start the IPython kernel");
		err->status = 503;
		return -1;
	}
	evutil_make_socket_nonblocking(sv[0]);
	k->ctl = bufferevent_socket_new(agent->base, sv[0],
	    BEV_OPT_CLOSE_ON_FREE);
	bufferevent_setcb(k->ctl, ctl_read_cb, NULL, ctl_event_cb, k);
	bufferevent_enable(k->ctl, EV_READ);
	token_random_hex(hex);
	snprintf(k->marker, sizeof k->marker, "\x1e%s\x1e", hex);
	k->lost = NULL;
	k->state = KERNEL_STARTING;
	k->started = timing_monotonic();
	kernel_arm(k, TIMER_START, KERNEL_START_SECONDS);
	log_info("starting the IPython kernel (pid %d)", (int)spawn_pid(k->sp));
	return 0;
}

static void
add_waiter(struct kernel *k, kernel_ready_cb cb, void *arg)
{
	struct kernel_waiter *w;

	if (cb == NULL)
		return;
	w = xcalloc(1, sizeof *w);
	w->cb = cb;
	w->arg = arg;
	TAILQ_INSERT_TAIL(&k->waiters, w, entry);
}

int
kernel_start(struct kernel *k, kernel_ready_cb ready_cb, void *arg,
    struct error *err)
{
	if (k->state != KERNEL_STOPPED)
		fatal("kernel_start: the kernel is not stopped");
	if (start(k, err) < 0)
		return -1;
	add_waiter(k, ready_cb, arg);
	return 0;
}

void
kernel_restart(struct kernel *k, kernel_ready_cb ready_cb, void *arg)
{
	add_waiter(k, ready_cb, arg);
	if (k->running != NULL)
		kernel_finish_cell(k, KERNEL_END_RESTARTED, "the context was "
		    "restarted while this cell ran: its state (variables, "
		    "imports) is lost");
	/* Nobody needs telling: a restart is asked for to lose the state. */
	free(k->next_note);
	k->next_note = NULL;
	kernel_replace(k);
}

void
kernel_free(struct kernel *k, const char *why, const struct error *err)
{
	if (k == NULL)
		return;
	if (k->running != NULL)
		kernel_finish_cell(k, KERNEL_END_LOST, "%s", why);
	stop(k);
	notify_waiters(k, err);
	kernel_fail_queue(k, err);
	event_free(k->timer);
	event_free(k->eof_timer);
	kernel_stream_free(&k->out[1]);
	kernel_stream_free(&k->out[2]);
	free(k->next_note);
	free(k->cwd);
	free(k);
}
