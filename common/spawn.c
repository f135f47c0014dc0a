#include "spawn_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/queue.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "fdio.h"
#include "log.h"
#include "timing.h"
#include "xmalloc.h"

/* After the child exits, how long its background children may keep the
 * output pipes open before we stop waiting for end of file. */
#define SPAWN_EXIT_GRACE_MS 200
#define SPAWN_READ_CHUNK (64 * 1024)

struct spawn_stream {
	int fd;
	struct event *ev;
	struct evbuffer *buf;
	size_t cap;
	uint64_t kept;
	uint64_t dropped;
};

/* Owned by whoever called spawn_start; freed by spawn_free. */
struct spawn {
	struct event_base *base;
	pid_t pid;		/* our child: the keeper, if there is one */
	pid_t cmd;		/* the program (its group, with a keeper) */
	int group;		/* a keeper with the program in its own group */
	int exited;
	int status;
	int timed_out;
	int done;		/* on_exit has been called */
	int paused;
	/* Started through another process (spawn_start_via): pid is 0 until
	 * the keeper tells it, and its exit is the keeper's report. */
	int via;
	int kill_pending;	/* a signal asked for before pid was known */
	int freed;		/* freed by its owner before pid was known */
	/* Its command's start still to come (on_start): output waits. */
	int awaiting_start;
	int report_in_cwd;	/* report_err is of its directory */
	/* Reports still to come (a keeper's, to the end). */
	int report_fd;
	struct event *report_ev;
	int report_err;
	struct spawn_stream out[3];	/* [1] stdout, [2] stderr; [0] unused */
	int pipe_fd[3];		/* SPAWN_PIPE ends for the caller */
	struct event *timer;
	struct event *grace;
	struct spawn_callbacks cb;
	void *arg;
	LIST_ENTRY(spawn) entry;
};

static LIST_HEAD(, spawn) spawn_children = LIST_HEAD_INITIALIZER(spawn_children);
static struct event *spawn_sigchld;
static void (*orphan_cb)(pid_t, int, void *);
static void *orphan_arg;

static void spawn_check_done(struct spawn *sp);

static void
sigchld_cb(evutil_socket_t sig, short what, void *arg)
{
	pid_t pid;
	int status;

	(void)sig;
	(void)what;
	(void)arg;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		struct spawn *sp;

		LIST_FOREACH(sp, &spawn_children, entry) {
			if (sp->pid == pid)
				break;
		}
		if (sp == NULL) {
			/* An orphan we inherited as PID 1 or subreaper. */
			if (orphan_cb != NULL)
				orphan_cb(pid, status, orphan_arg);
			continue;
		}
		if (sp->exited)
			continue;	/* its keeper, which told the status */
		sp->exited = 1;
		sp->status = status;
		if (sp->timer != NULL)
			event_del(sp->timer);
		spawn_check_done(sp);
	}
}

void
spawn_init(struct event_base *base)
{
	if (spawn_sigchld != NULL)
		return;
	spawn_sigchld = evsignal_new(base, SIGCHLD, sigchld_cb, NULL);
	event_add(spawn_sigchld, NULL);
	/* Children that exited before the handler was in place. */
	sigchld_cb(SIGCHLD, 0, NULL);
}

void
spawn_set_orphan_cb(void (*cb)(pid_t pid, int status, void *arg), void *arg)
{
	orphan_cb = cb;
	orphan_arg = arg;
}

static void
stream_close(struct spawn_stream *s)
{
	if (s->ev != NULL) {
		event_free(s->ev);
		s->ev = NULL;
	}
	if (s->fd >= 0) {
		close(s->fd);
		s->fd = -1;
	}
}

static int
streams_open(struct spawn *sp)
{
	return sp->out[1].fd >= 0 || sp->out[2].fd >= 0;
}

/* One read of a captured stream, kept or passed on under its cap; returns
 * as read(2) does. */
static ssize_t
read_stream(struct spawn *sp, int stream)
{
	struct spawn_stream *s = &sp->out[stream];
	char buf[SPAWN_READ_CHUNK];
	ssize_t n, got;

	got = n = read(s->fd, buf, sizeof buf);
	if (n <= 0)
		return n;
	if (s->cap > 0 && s->kept + (uint64_t)n > s->cap) {
		size_t keep = (size_t)(s->cap - s->kept);

		s->dropped += (uint64_t)n - keep;
		n = (ssize_t)keep;
	}
	if (n == 0)
		return got;
	s->kept += (uint64_t)n;
	if (sp->cb.on_output != NULL)
		sp->cb.on_output(sp, stream, buf, (size_t)n, sp->arg);
	else
		evbuffer_add(s->buf, buf, (size_t)n);
	return got;
}

/* Before a pipe is closed, what is in it now: all the command wrote
 * before it exited is there. No more than the pipe holds, so that a
 * background job writing on cannot keep us here. */
static void
drain(struct spawn *sp, int stream)
{
	struct spawn_stream *s = &sp->out[stream];
	int size;
	ssize_t n;

	if (s->fd < 0)
		return;
	if ((size = fcntl(s->fd, F_GETPIPE_SZ)) <= 0)
		size = SPAWN_READ_CHUNK;
	for (ssize_t left = size; left > 0 &&
	    (n = read_stream(sp, stream)) > 0; left -= n)
		;
}

static void
finish(struct spawn *sp)
{
	sp->done = 1;
	if (sp->grace != NULL)
		event_del(sp->grace);
	for (int i = 1; i < 3; i++) {
		drain(sp, i);
		stream_close(&sp->out[i]);
	}
	if (sp->cb.on_exit != NULL)
		sp->cb.on_exit(sp, sp->status, sp->arg);
}

static void
grace_cb(evutil_socket_t fd, short what, void *arg)
{
	struct spawn *sp = arg;

	(void)fd;
	(void)what;
	if (!sp->done)
		finish(sp);
}

/* The command exited, its background jobs may hold the pipes: wait a
 * little for end of file, counting only time we read (not while the
 * caller has paused the output, else what the command wrote before it
 * exited would be lost to a slow reader). */
static void
arm_grace(struct spawn *sp)
{
	struct timeval tv = { 0, SPAWN_EXIT_GRACE_MS * 1000 };

	if (sp->grace == NULL)
		sp->grace = evtimer_new(sp->base, grace_cb, sp);
	if (!evtimer_pending(sp->grace, NULL))
		evtimer_add(sp->grace, &tv);
}

static void
spawn_check_done(struct spawn *sp)
{
	if (sp->done || !sp->exited)
		return;
	/* One that never started ran nothing that could hold its pipes. */
	if (!streams_open(sp) || sp->awaiting_start) {
		finish(sp);
		return;
	}
	if (!sp->paused)
		arm_grace(sp);
}

static void
read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct spawn *sp = arg;
	int stream = sp->out[1].fd == fd ? 1 : 2;
	ssize_t n;

	(void)what;
	n = read_stream(sp, stream);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		stream_close(&sp->out[stream]);
		spawn_check_done(sp);
	}
}

static void
timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct spawn *sp = arg;

	(void)fd;
	(void)what;
	if (sp->exited)
		return;
	sp->timed_out = 1;
	spawn_kill(sp, SIGKILL);
}

/* Kill the tree after seconds (0: never). */
static void
arm_timeout(struct spawn *sp, double seconds)
{
	struct timeval tv;

	if (!(seconds > 0))
		return;
	tv = timing_timeval(seconds);
	if (sp->timer == NULL)
		sp->timer = evtimer_new(sp->base, timeout_cb, sp);
	evtimer_add(sp->timer, &tv);
}

/* The child side's reports, read until exec closes the pipe, or (a
 * keeper's) until the command's pid, which comes after any errno: the pid
 * into *cmd; the errno if it failed, else 0 (*kind: the report that
 * said so, SPAWN_MSG_CHDIR when changing to cwd failed, SPAWN_MSG_SETUP
 * when the caller's setup did). */
static int
read_reports(int fd, pid_t *cmd, int *kind)
{
	struct spawn_msg msg;
	int e = 0;
	ssize_t n;

	for (;;) {
		n = read(fd, &msg, sizeof msg);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof msg)
			return e;
		if (msg.kind == SPAWN_MSG_PID) {
			*cmd = (pid_t)msg.value;
			return e;
		}
		e = msg.value;
		*kind = msg.kind;
	}
}

static void spawn_release(struct spawn *sp);

/* The keeper of a spawn_start_via is known: what was asked of it before
 * is done now. */
static void
keeper_known(struct spawn *sp, pid_t pid)
{
	if (sp->pid != 0 || pid <= 0)
		return;
	sp->pid = pid;
	if (sp->freed)
		kill(pid, SPAWN_KEEPER_SIGNAL);
	else if (sp->kill_pending)
		spawn_kill(sp, sp->kill_pending);
}

/* A spawn_start_via's command runs: its owner is told, then its output
 * is read. */
static void
started(struct spawn *sp)
{
	if (!sp->awaiting_start || sp->freed)
		return;
	sp->awaiting_start = 0;
	sp->cb.on_start(sp, sp->arg);
	for (int i = 1; i < 3 && !sp->paused; i++)
		if (sp->out[i].ev != NULL)
			event_add(sp->out[i].ev, NULL);
}

/* A keeper's reports as they come: its own pid (spawn_start_via), the
 * command's pid, and the command's status, which is its exit. End of file
 * without it: the keeper died (killed, or it could not start the command),
 * which the reaper reports; or, for one we did not fork, which we cannot
 * wait for, it ended as if killed (127 if it told an errno: the command
 * could not start). */
static void
report_cb(evutil_socket_t fd, short what, void *arg)
{
	struct spawn *sp = arg;
	struct spawn_msg msg;
	ssize_t n;
	int status = 0, ended = 0;

	(void)what;
	while (!ended && (n = read(fd, &msg, sizeof msg)) ==
	    (ssize_t)sizeof msg) {
		if (msg.kind == SPAWN_MSG_KEEPER && sp->via) {
			keeper_known(sp, (pid_t)msg.value);
		} else if (msg.kind == SPAWN_MSG_PID) {
			sp->cmd = (pid_t)msg.value;
		} else if (msg.kind == SPAWN_MSG_STARTED && sp->via) {
			sp->cmd = (pid_t)msg.value;
			started(sp);
		} else if (msg.kind == SPAWN_MSG_STATUS) {
			status = msg.value;
			ended = 1;
		} else {
			sp->report_err = msg.value;
			sp->report_in_cwd = msg.kind == SPAWN_MSG_CHDIR;
		}
	}
	if (!ended && n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	event_free(sp->report_ev);
	sp->report_ev = NULL;
	close(sp->report_fd);
	sp->report_fd = -1;
	if (sp->freed) {
		spawn_release(sp);
		return;
	}
	if (!ended && sp->via) {
		ended = 1;
		status = sp->report_err != 0 ? 127 << 8 : SIGKILL;
	}
	if (ended && !sp->exited) {
		sp->exited = 1;
		sp->status = status;
		if (sp->timer != NULL)
			event_del(sp->timer);
		spawn_check_done(sp);	/* may free sp: nothing after */
	}
}

static int
make_pipe(int p[2], struct error *err)
{
	if (pipe2(p, O_CLOEXEC) < 0) {
		error_set_errno(err, 500, errno, "pipe");
		return -1;
	}
	return 0;
}

/* The child's ends of its standard streams (child_fd, a /dev/null among
 * them in *devnull) and ours (parent_fd: captured streams and pipes), as
 * o asks. On failure, what was opened is in the three. */
static int
stdio_open(const struct spawn_options *o, int child_fd[3], int parent_fd[3],
    int *devnull, struct error *err)
{
	for (int i = 0; i < 3; i++) {
		int p[2];

		switch (o->stdio[i]) {
		case SPAWN_NULL:
			if (*devnull < 0 && (*devnull = open("/dev/null",
			    O_RDWR | O_CLOEXEC)) < 0) {
				error_set_errno(err, 500, errno, "/dev/null");
				return -1;
			}
			child_fd[i] = *devnull;
			break;
		case SPAWN_INHERIT:
			child_fd[i] = i;
			break;
		case SPAWN_FD:
			child_fd[i] = o->fd[i];
			break;
		case SPAWN_CAPTURE:
		case SPAWN_PIPE:
			if (make_pipe(p, err) < 0)
				return -1;
			/* stdin: the child reads p[0]; others: it writes p[1] */
			child_fd[i] = i == 0 ? p[0] : p[1];
			parent_fd[i] = i == 0 ? p[1] : p[0];
			break;
		}
	}
	return 0;
}

/* The child has its copies: ours of its ends go. */
static void
stdio_close_child(const struct spawn_options *o, int child_fd[3],
    int *devnull)
{
	for (int i = 0; i < 3; i++) {
		if ((o->stdio[i] == SPAWN_CAPTURE || o->stdio[i] == SPAWN_PIPE) &&
		    child_fd[i] >= 0)
			close(child_fd[i]);
		child_fd[i] = -1;
	}
	if (*devnull >= 0)
		close(*devnull);
	*devnull = -1;
}

static void
close_all(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

/* The spawn of a child started with our ends of its streams (parent_fd,
 * now its) and, when report_fd >= 0, its keeper's reports to come. */
static struct spawn *
spawn_new(struct event_base *base, const struct spawn_options *o,
    const struct spawn_callbacks *cb, void *arg, pid_t pid, pid_t cmd,
    int report_fd, const int parent_fd[3])
{
	struct spawn *sp = xcalloc(1, sizeof *sp);

	sp->base = base;
	sp->pid = pid;
	sp->cmd = cmd;
	sp->group = o->new_group;
	sp->report_fd = report_fd;
	if (report_fd >= 0) {
		fcntl(report_fd, F_SETFL, O_NONBLOCK);
		sp->report_ev = event_new(base, report_fd,
		    EV_READ | EV_PERSIST, report_cb, sp);
		event_add(sp->report_ev, NULL);
	}
	if (cb != NULL)
		sp->cb = *cb;
	sp->arg = arg;
	sp->via = report_fd >= 0 && pid == 0;
	sp->awaiting_start = sp->via && sp->cb.on_start != NULL;
	for (int i = 0; i < 3; i++) {
		sp->out[i].fd = -1;
		sp->pipe_fd[i] = -1;
		if (o->stdio[i] == SPAWN_PIPE) {
			sp->pipe_fd[i] = parent_fd[i];
		} else if (o->stdio[i] == SPAWN_CAPTURE && i > 0) {
			struct spawn_stream *s = &sp->out[i];

			s->fd = parent_fd[i];
			s->cap = o->capture_cap[i];
			s->buf = evbuffer_new();
			fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) | O_NONBLOCK);
			s->ev = event_new(base, s->fd, EV_READ | EV_PERSIST,
			    read_cb, sp);
			if (!sp->awaiting_start)
				event_add(s->ev, NULL);
		} else if (parent_fd[i] >= 0) {
			close(parent_fd[i]);	/* capture of stdin: nothing */
		}
	}
	arm_timeout(sp, o->timeout);
	LIST_INSERT_HEAD(&spawn_children, sp, entry);
	return sp;
}

struct spawn *
spawn_start(struct event_base *base, const struct spawn_options *o,
    const struct spawn_callbacks *cb, void *arg, struct error *err)
{
	int child_fd[3] = { -1, -1, -1 }, parent_fd[3] = { -1, -1, -1 };
	int errpipe[2] = { -1, -1 }, devnull = -1, e, kind = 0;
	sigset_t all, old;
	pid_t pid, cmd;

	if (stdio_open(o, child_fd, parent_fd, &devnull, err) < 0 ||
	    make_pipe(errpipe, err) < 0)
		goto fail;
	/* The child must not run our handlers (libevent's would write to
	 * our loop) before it has reset them: it starts with all blocked. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = fork();
	if (pid == 0) {
		close(errpipe[0]);
		if (o->new_group)
			spawn_child_keeper(o, child_fd, errpipe[1]);
		spawn_child_exec(o, child_fd, errpipe[1], 0);
	}
	e = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (pid < 0) {
		error_set_errno(err, 500, e, "fork");
		goto fail;
	}
	close(errpipe[1]);
	errpipe[1] = -1;
	/* Set the group from here too, so a kill right after start cannot
	 * race the child's own setpgid. */
	if (o->new_group)
		setpgid(pid, pid);
	cmd = pid;
	e = 0;
	if (o->async)
		cmd = o->new_group ? 0 : pid;	/* told by the keeper */
	else
		e = read_reports(errpipe[0], &cmd, &kind);
	/* A keeper's pipe stays open for what it tells later. */
	if (e != 0 || !o->new_group) {
		close(errpipe[0]);
		errpipe[0] = -1;
	}
	stdio_close_child(o, child_fd, &devnull);
	if (e != 0) {
		/* exec failed; the child (or its keeper) exits with 127. */
		waitpid(pid, NULL, 0);
		close_all(parent_fd, 3);
		if (kind == SPAWN_MSG_SETUP)
			error_set_errno(err, 500, e, "cannot set up %s",
			    o->argv[0]);
		else if (kind == SPAWN_MSG_CHDIR)
			error_set_errno(err, e == ENOENT ? 404 : 500, e,
			    "cannot change to directory %s", o->cwd);
		else
			error_set_errno(err, e == ENOENT ? 404 : 500, e,
			    "cannot execute %s", o->argv[0]);
		return NULL;
	}
	return spawn_new(base, o, cb, arg, pid, cmd, errpipe[0], parent_fd);
fail:
	close_all(parent_fd, 3);
	stdio_close_child(o, child_fd, &devnull);
	close_all(errpipe, 2);
	return NULL;
}

struct spawn *
spawn_start_via(struct event_base *base, const struct spawn_options *o,
    int (*start)(const int fds[3], int report_fd, void *arg),
    void *start_arg, const struct spawn_callbacks *cb, void *arg,
    struct error *err)
{
	int child_fd[3] = { -1, -1, -1 }, parent_fd[3] = { -1, -1, -1 };
	int errpipe[2] = { -1, -1 }, devnull = -1;

	if (stdio_open(o, child_fd, parent_fd, &devnull, err) < 0 ||
	    make_pipe(errpipe, err) < 0)
		goto fail;
	if (start(child_fd, errpipe[1], start_arg) < 0) {
		error_set_errno(err, 500, errno, "cannot hand over %s",
		    o->argv != NULL ? o->argv[0] : "the command");
		goto fail;
	}
	close(errpipe[1]);
	stdio_close_child(o, child_fd, &devnull);
	return spawn_new(base, o, cb, arg, 0, 0, errpipe[0], parent_fd);
fail:
	close_all(parent_fd, 3);
	stdio_close_child(o, child_fd, &devnull);
	close_all(errpipe, 2);
	return NULL;
}

int
spawn_memfd(const char *name, const void *data, size_t len)
{
	int fd = memfd_create(name, MFD_CLOEXEC), e;

	if (fd < 0)
		return -1;
	if (fdio_write_all(fd, data, len) < 0 || lseek(fd, 0, SEEK_SET) < 0)
		goto fail;
	return fd;
fail:
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

pid_t
spawn_pid(struct spawn *sp)
{
	return sp->cmd;
}

int
spawn_start_errno(struct spawn *sp, int *in_cwd)
{
	*in_cwd = sp->report_in_cwd;
	return sp->report_err;
}

int
spawn_take_fd(struct spawn *sp, int stream)
{
	int fd = sp->pipe_fd[stream];

	sp->pipe_fd[stream] = -1;
	return fd;
}

void
spawn_kill(struct spawn *sp, int sig)
{
	/* Its keeper not known yet: done when it is (keeper_known). */
	if (sp->pid == 0) {
		if (!sp->exited && sp->kill_pending != SIGKILL)
			sp->kill_pending = sig;
		return;
	}
	if (!sp->group) {
		if (!sp->exited)
			kill(sp->pid, sig);
		return;
	}
	/* What left the group only the keeper reaches; it is told first,
	 * so that it knows when it reaps the command (spawn_child.c). */
	if (sig == SIGKILL && !sp->exited)
		kill(sp->pid, SPAWN_KEEPER_SIGNAL);
	/* The group outlives its leader while background jobs run. Not yet
	 * known (async): the keeper alone can reach it, as above; never
	 * kill(-0), our own group. */
	if (sp->cmd > 0)
		kill(-sp->cmd, sig);
	else if (sig != SIGKILL && !sp->exited)
		kill(sp->pid, SPAWN_KEEPER_SIGNAL);
}

int
spawn_timed_out(struct spawn *sp)
{
	return sp->timed_out;
}

int
spawn_exited(struct spawn *sp)
{
	return sp->exited;
}

struct evbuffer *
spawn_output(struct spawn *sp, int stream)
{
	return sp->out[stream].buf;
}

uint64_t
spawn_dropped(struct spawn *sp, int stream)
{
	return sp->out[stream].dropped;
}

void
spawn_pause_output(struct spawn *sp)
{
	if (sp->paused)
		return;
	sp->paused = 1;
	for (int i = 1; i < 3; i++)
		if (sp->out[i].ev != NULL)
			event_del(sp->out[i].ev);
	if (sp->grace != NULL)
		evtimer_del(sp->grace);
}

void
spawn_resume_output(struct spawn *sp)
{
	if (!sp->paused)
		return;
	sp->paused = 0;
	for (int i = 1; i < 3 && !sp->awaiting_start; i++)
		if (sp->out[i].ev != NULL)
			event_add(sp->out[i].ev, NULL);
	/* Not finished from here: end of file, or the grace, does that
	 * from the loop, never inside the caller's own callback. */
	if (sp->exited && !sp->done)
		arm_grace(sp);
}

/* Its streams, pipes and timers; the reports may still be awaited. */
static void
drop_io(struct spawn *sp)
{
	for (int i = 1; i < 3; i++) {
		stream_close(&sp->out[i]);
		if (sp->out[i].buf != NULL)
			evbuffer_free(sp->out[i].buf);
		sp->out[i].buf = NULL;
	}
	close_all(sp->pipe_fd, 3);
	if (sp->timer != NULL)
		event_free(sp->timer);
	if (sp->grace != NULL)
		event_free(sp->grace);
	sp->timer = sp->grace = NULL;
}

static void
spawn_release(struct spawn *sp)
{
	drop_io(sp);
	if (sp->report_ev != NULL)
		event_free(sp->report_ev);
	if (sp->report_fd >= 0)
		close(sp->report_fd);
	free(sp);
}

void
spawn_free(struct spawn *sp)
{
	if (sp == NULL)
		return;
	if (!sp->exited)
		spawn_kill(sp, SIGKILL);
	/* The reaper still collects the pid; it is just not ours to report. */
	LIST_REMOVE(sp, entry);
	/* Started through another process, whose keeper has not told its
	 * pid: nothing is reported any more, but the rest waits for that
	 * pid (the keeper is then told to end the tree) or for the end of
	 * the reports. */
	if (sp->via && sp->pid == 0 && sp->report_ev != NULL && !sp->exited) {
		sp->freed = 1;
		drop_io(sp);
		return;
	}
	spawn_release(sp);
}

void
spawn_kill_all(int sig)
{
	struct spawn *sp;

	LIST_FOREACH(sp, &spawn_children, entry)
		spawn_kill(sp, sig);
}

size_t
spawn_running(void)
{
	struct spawn *sp;
	size_t n = 0;

	LIST_FOREACH(sp, &spawn_children, entry) {
		if (!sp->exited)
			n++;
	}
	return n;
}
