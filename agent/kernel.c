/*
 * The stateful IPython kernel: one Python child per agent, started on first
 * use (or at start with --prewarm-kernel), confined like shell commands, in
 * its own process group under a keeper. It runs agent/embed/kernel.py,
 * which the binary carries, and which hosts IPython's InteractiveShell.
 *
 * The script goes to Python through a memfd at the child's fd 4, read by a
 * one-line bootstrap given with -c: with the script itself after -c, all
 * of it would show in the ps output of every command in the sandbox.
 *
 * Channels: a socket pair at the child's fd 3 carries frames (a 4-byte
 * big-endian length, then JSON): our {"code", "marker", "images_limit"},
 * its {"ready"} once, {"started"} as a cell begins and {"images"} after it.
 * Code in a cell can write to fd 3 too: a frame over the limits of
 * kernel_stream.h, malformed, or out of turn breaks the protocol, and the
 * kernel is killed and restarted, its cell told why. Its stdout and stderr
 * are pipes we read, so output of every kind (print, os.system, !ls,
 * subprocesses) lands in them in order. At the end of a cell the kernel
 * writes a marker to both; a cell is over when its answer frame and both
 * markers are in, and what came before a marker is that cell's output.
 * Output arriving between cells (background jobs) goes to the next cell.
 *
 * Cells wait in a FIFO queue and run one at a time. A cell past its
 * timeout gets SIGINT (the whole group, as a terminal's ^C), and SIGKILL
 * of its whole tree after a grace if it does not return; the kernel is then
 * restarted. A kernel that dies is replaced too; its cell says why.
 */
#include "agent.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "kernel_stream.h"
#include "log.h"
#include "spawn.h"
#include "token.h"
#include "xmalloc.h"

#define KERNEL_GRACE_SECONDS 2		/* from SIGINT to SIGKILL */
#define KERNEL_START_SECONDS 60		/* to the ready frame */
#define KERNEL_EOF_SECONDS 1		/* from closing fd 3 to exiting */
/* Images a cell may send back; with KSTREAM_FRAME_MAX, all the agent
 * keeps of a cell besides its two output streams (--output-cap each). */
#define KERNEL_IMAGES_MAX 64
/* Room the kernel leaves in a frame for what is not image data. */
#define KERNEL_FRAME_SLACK (64 * 1024)

extern const char _binary_kernel_py_start[], _binary_kernel_py_end[];

enum kernel_state {
	KERNEL_STOPPED,
	KERNEL_STARTING,	/* spawned, no ready frame yet */
	KERNEL_IDLE,
	KERNEL_BUSY,		/* a cell is running */
};

enum kernel_timer {
	TIMER_START,		/* the kernel must be ready by then */
	TIMER_CELL,		/* the running cell's timeout */
	TIMER_GRACE,		/* interrupted; killed when this fires */
};

/* Owned by the kernel from kernel_run until its done callback has run
 * or, abandoned, it ends; freed by the kernel. */
struct kernel_cell {
	TAILQ_ENTRY(kernel_cell) entry;
	struct kernel *k;
	json_t *code;
	double timeout;
	kernel_done_cb done;
	void *arg;
	int abandoned;
	int timed_out;		/* interrupted because of its timeout */
	int started;		/* the kernel said it runs it */
	int interrupt;		/* to interrupt as soon as it runs */
	int answered;		/* its images frame came */
	json_t *images;
};

TAILQ_HEAD(cell_queue, kernel_cell);

/* One per agent (agent->kernel), made on first use; lives until exit. */
struct kernel {
	struct agent *agent;
	enum kernel_state state;
	struct spawn *sp;
	struct bufferevent *ctl;
	struct event *timer;
	enum kernel_timer timer_kind;
	struct event *eof_timer;	/* fd 3 closed, the process not gone */
	struct timespec started;
	struct kernel_stream out[3];	/* [1] and [2] */
	char marker[MARKER_LEN + 1];
	struct cell_queue queue;	/* waiting cells */
	struct kernel_cell *running;
	const char *lost;		/* why we killed it, if we did */
	char *next_note;		/* for the next cell: the state was
					 * lost and nobody was told yet */
};

static void kick(struct kernel *k);
static void check_done(struct kernel *k);

static struct kernel *
kernel_get(struct agent *agent)
{
	struct kernel *k = agent->kernel;

	if (k != NULL)
		return k;
	k = xcalloc(1, sizeof *k);
	k->agent = agent;
	TAILQ_INIT(&k->queue);
	kstream_init(&k->out[1]);
	kstream_init(&k->out[2]);
	agent->kernel = k;
	return k;
}

static void
arm(struct kernel *k, enum kernel_timer kind, double seconds)
{
	struct timeval tv;

	tv.tv_sec = (time_t)seconds;
	tv.tv_usec = (suseconds_t)((seconds - (double)tv.tv_sec) * 1e6);
	k->timer_kind = kind;
	evtimer_add(k->timer, &tv);
}

static void
output_cb(struct spawn *sp, int stream, const char *data, size_t len,
    void *arg)
{
	struct kernel *k = arg;

	(void)sp;
	if (kstream_feed(&k->out[stream], k->state == KERNEL_BUSY, k->marker,
	    data, len, k->agent->cfg.output_cap))
		check_done(k);
}

/* Give the running cell its output, with a note on how it ended (fmt may
 * be NULL), and move the streams on to the next cell. */
static void
finish_cell(struct kernel *k, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
finish_cell(struct kernel *k, const char *fmt, ...)
{
	struct kernel_cell *cell = k->running;
	struct kernel_result *res = xcalloc(1, sizeof *res);
	size_t cap = k->agent->cfg.output_cap;
	va_list ap;

	k->running = NULL;
	res->out = kstream_take(&k->out[1], "stdout", cap);
	res->errout = kstream_take(&k->out[2], "stderr", cap);
	if (k->next_note != NULL && !cell->abandoned) {
		kstream_note(res->errout, k->next_note);
		free(k->next_note);
		k->next_note = NULL;
	}
	if (fmt != NULL) {
		char *text;

		va_start(ap, fmt);
		text = xvasprintf(fmt, ap);
		va_end(ap);
		kstream_note(res->errout, text);
		free(text);
	}
	res->images = cell->images != NULL ? cell->images : json_array();
	cell->images = NULL;
	json_decref(cell->code);
	if (cell->abandoned)
		kernel_result_free(res);
	else
		cell->done(res, cell->arg);
	free(cell);
}

/* The kernel is replaced and no cell will say so: the next one will. */
static void
tell_next(struct kernel *k, const char *why)
{
	free(k->next_note);
	k->next_note = xasprintf("[the IPython kernel %s: this cell ran in a "
	    "fresh kernel, without the earlier state (variables, imports)]",
	    why);
}

static void
check_done(struct kernel *k)
{
	struct kernel_cell *cell = k->running;

	if (cell == NULL || !cell->answered || !k->out[1].marked ||
	    !k->out[2].marked)
		return;
	evtimer_del(k->timer);
	k->state = KERNEL_IDLE;
	if (cell->timed_out)
		finish_cell(k, "[the cell ran past its %g-second timeout and "
		    "was interrupted (KeyboardInterrupt); the kernel kept its "
		    "state]", cell->timeout);
	else
		finish_cell(k, NULL);
	kick(k);
}

/* Fail every waiting cell: the kernel cannot run them. */
static void
fail_queue(struct kernel *k, const struct error *err)
{
	struct kernel_cell *cell;

	while ((cell = TAILQ_FIRST(&k->queue)) != NULL) {
		struct kernel_result *res = xcalloc(1, sizeof *res);

		TAILQ_REMOVE(&k->queue, cell, entry);
		res->err = *err;
		json_decref(cell->code);
		cell->done(res, cell->arg);
		free(cell);
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
	if (k->timer != NULL)
		evtimer_del(k->timer);
	if (k->eof_timer != NULL)
		evtimer_del(k->eof_timer);
	kstream_reset(&k->out[1]);
	kstream_reset(&k->out[2]);
	k->state = KERNEL_STOPPED;
}

/* We give up on a kernel that breaks the protocol; exit_cb follows. */
static void
lose(struct kernel *k, const char *why)
{
	if (k->lost != NULL)
		return;
	k->lost = why;
	log_warn("the IPython kernel %s; killing it", why);
	bufferevent_disable(k->ctl, EV_READ);
	spawn_kill(k->sp, SIGKILL);
}

static double
seconds_since(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) +
	    (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

static void
ready(struct kernel *k, json_t *msg)
{
	const char *py = json_string_value(json_object_get(msg, "python"));
	const char *ipy = json_string_value(json_object_get(msg, "ipython"));

	evtimer_del(k->timer);
	log_info("IPython kernel ready in %.0f ms (pid %d, Python %s, "
	    "IPython %s)", seconds_since(&k->started) * 1000,
	    (int)spawn_pid(k->sp), py ? py : "?", ipy ? ipy : "?");
	for (int s = 1; s <= 2; s++) {
		if (evbuffer_get_length(k->out[s].buf) > 0) {
			char *text = kstream_tail(&k->out[s], 500);

			log_warn("the IPython kernel wrote to %s as it started: "
			    "%s", s == 1 ? "stdout" : "stderr", text);
			free(text);
		}
		kstream_reset(&k->out[s]);
	}
	k->state = KERNEL_IDLE;
	kick(k);
}

/* The images of a cell's answer, rebuilt field by field: the frame comes
 * from code the user controls. NULL if it is not a list of images, or of
 * more than the kernel may send. */
static json_t *
clean_images(json_t *list)
{
	json_t *clean, *item;
	size_t i;

	if (!json_is_array(list) || json_array_size(list) > KERNEL_IMAGES_MAX)
		return NULL;
	clean = json_array();
	json_array_foreach(list, i, item) {
		json_t *data = json_object_get(item, "data");
		json_t *mime = json_object_get(item, "mimeType");

		if (!json_is_string(data) || !json_is_string(mime)) {
			json_decref(clean);
			return NULL;
		}
		json_array_append_new(clean, json_pack("{s:s, s:O, s:O}",
		    "type", "image", "data", data, "mimeType", mime));
	}
	return clean;
}

static void
handle_frame(struct kernel *k, json_t *msg)
{
	struct kernel_cell *cell = k->running;
	json_t *images;

	if (k->state == KERNEL_STARTING &&
	    json_is_true(json_object_get(msg, "ready"))) {
		ready(k, msg);
		return;
	}
	if (k->state == KERNEL_BUSY && !cell->started &&
	    json_is_true(json_object_get(msg, "started"))) {
		cell->started = 1;
		if (cell->interrupt)
			spawn_kill(k->sp, SIGINT);
		return;
	}
	if (k->state == KERNEL_BUSY && !cell->answered &&
	    json_object_get(msg, "images") != NULL) {
		images = clean_images(json_object_get(msg, "images"));
		if (images == NULL) {
			lose(k, "sent images that are not a list of at most 64 "
			    "images on fd 3");
			return;
		}
		cell->images = images;
		cell->answered = 1;
		check_done(k);
		return;
	}
	lose(k, "sent a frame out of turn");
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
	    (rc = kstream_read_frame(in, &msg, &why)) != 0) {
		if (rc < 0) {
			lose(k, why);
			return;
		}
		handle_frame(k, msg);
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
	lose(arg, "closed its control channel");
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

static void
restart(struct kernel *k)
{
	struct error err = { 0 };

	stop(k);
	if (start(k, &err) < 0) {
		log_error("%s", err.msg);
		fail_queue(k, &err);
	}
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
		detail = kstream_tail(&k->out[evbuffer_get_length(
		    k->out[2].buf) > 0 ? 2 : 1], 600);
		error_set(&err, 503, "the IPython kernel could not start: it "
		    "%s%s%s", how, detail[0] != '\0' ? ": " : "", detail);
		free(detail);
		log_error("%s", err.msg);
		stop(k);
		fail_queue(k, &err);
		break;
	case KERNEL_BUSY:
		log_warn("the IPython kernel %s while running a cell", how);
		if (k->running->abandoned) {
			snprintf(how + strlen(how), sizeof how - strlen(how),
			    " in a cell whose client had left");
			tell_next(k, how);
		}
		finish_cell(k, "[the IPython kernel %s while running this cell: "
		    "its state (variables, imports) is lost; the next call "
		    "gets a fresh kernel]", how);
		restart(k);
		break;
	default:
		log_warn("the IPython kernel %s while idle", how);
		snprintf(how + strlen(how), sizeof how - strlen(how),
		    " between cells");
		tell_next(k, how);
		if (k->agent->cfg.prewarm_kernel || !TAILQ_EMPTY(&k->queue))
			restart(k);
		else
			stop(k);
		break;
	}
}

/* SIGINT to the group, as ^C in a terminal; not before the kernel runs the
 * cell, else the signal would find it between cells, where it is ignored.
 * Either way the kernel is killed if the cell has not ended by the grace. */
static void
interrupt(struct kernel *k)
{
	struct kernel_cell *cell = k->running;

	cell->interrupt = 1;
	if (cell->started)
		spawn_kill(k->sp, SIGINT);
	evtimer_del(k->timer);
	arm(k, TIMER_GRACE, KERNEL_GRACE_SECONDS);
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
		log_error("%s", err.msg);
		stop(k);
		fail_queue(k, &err);
		break;
	case TIMER_CELL:
		log_info("IPython cell timed out after %g s; interrupting it",
		    cell->timeout);
		cell->timed_out = 1;
		interrupt(k);
		break;
	case TIMER_GRACE:
		log_warn("the IPython kernel ignored the interrupt; killing and "
		    "restarting it");
		if (cell->abandoned)
			tell_next(k, "was restarted, as a cell whose client had "
			    "left did not stop on interrupt");
		finish_cell(k, "[the cell ran past its %g-second timeout and did "
		    "not stop within %d seconds of the interrupt: the kernel was "
		    "killed and restarted, and its state (variables, imports) is "
		    "lost]", cell->timeout, KERNEL_GRACE_SECONDS);
		restart(k);
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
	const char *argv[5];
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
	if (k->timer == NULL) {
		k->timer = evtimer_new(agent->base, timer_cb, k);
		k->eof_timer = evtimer_new(agent->base, eof_cb, k);
	}
	token_random_hex(hex);
	snprintf(k->marker, sizeof k->marker, "\x1e%s\x1e", hex);
	k->lost = NULL;
	k->state = KERNEL_STARTING;
	clock_gettime(CLOCK_MONOTONIC, &k->started);
	arm(k, TIMER_START, KERNEL_START_SECONDS);
	log_info("starting the IPython kernel (pid %d)", (int)spawn_pid(k->sp));
	return 0;
}

static void
kick(struct kernel *k)
{
	struct kernel_cell *cell;
	json_t *msg;
	char *text;
	size_t len;
	unsigned char head[4];

	if (k->state != KERNEL_IDLE || TAILQ_EMPTY(&k->queue))
		return;
	cell = TAILQ_FIRST(&k->queue);
	TAILQ_REMOVE(&k->queue, cell, entry);
	k->running = cell;
	k->state = KERNEL_BUSY;
	msg = json_pack("{s:O, s:s, s:{s:i, s:i}}", "code", cell->code,
	    "marker", k->marker, "images_limit", "count", KERNEL_IMAGES_MAX,
	    "bytes", KSTREAM_FRAME_MAX - KERNEL_FRAME_SLACK);
	text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	len = strlen(text);
	head[0] = (unsigned char)(len >> 24);
	head[1] = (unsigned char)(len >> 16);
	head[2] = (unsigned char)(len >> 8);
	head[3] = (unsigned char)len;
	bufferevent_write(k->ctl, head, sizeof head);
	bufferevent_write(k->ctl, text, len);
	free(text);
	arm(k, TIMER_CELL, cell->timeout);
}

struct kernel_cell *
kernel_run(struct agent *agent, json_t *code, double timeout,
    kernel_done_cb done, void *arg, struct error *err)
{
	struct kernel *k = kernel_get(agent);
	struct kernel_cell *cell;

	if (k->state == KERNEL_STOPPED && start(k, err) < 0)
		return NULL;
	cell = xcalloc(1, sizeof *cell);
	cell->k = k;
	cell->code = json_incref(code);
	cell->timeout = timeout;
	cell->done = done;
	cell->arg = arg;
	TAILQ_INSERT_TAIL(&k->queue, cell, entry);
	kick(k);
	return cell;
}

void
kernel_abandon(struct kernel_cell *cell)
{
	struct kernel *k = cell->k;

	if (cell != k->running) {
		TAILQ_REMOVE(&k->queue, cell, entry);
		json_decref(cell->code);
		free(cell);
		return;
	}
	cell->abandoned = 1;
	if (!cell->interrupt) {
		log_info("the client of a running IPython cell left; "
		    "interrupting it");
		interrupt(k);
	}
}

void
kernel_result_free(struct kernel_result *res)
{
	if (res == NULL)
		return;
	if (res->out != NULL)
		evbuffer_free(res->out);
	if (res->errout != NULL)
		evbuffer_free(res->errout);
	json_decref(res->images);
	free(res);
}

void
kernel_prewarm(struct agent *agent)
{
	struct error err = { 0 };

	if (start(kernel_get(agent), &err) < 0)
		log_warn("--prewarm-kernel: %s", err.msg);
}
