/*
 * Child processes on a real event loop: real /bin/sh children, real signals,
 * real process groups. The test process makes itself a child subreaper, as
 * the agent is PID 1 in its container, so orphans of its children come back
 * to it and its SIGCHLD reaper must collect them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "spawn.h"
#include "spawn_internal.h"
#include "xmalloc.h"

/* A guard against hanging forever, far above anything a test needs; not a
 * timing assertion. */
#define HANG_GUARD_SEC 30

static struct event_base *base;
/* /bin/sh, opened before anything else. */
static int first_fd = -1;

/* What one child did, filled by the callbacks. */
struct run {
	int done;
	int status;
	int exit_calls;
	struct evbuffer *pieces[3];	/* on_output data, when used */
	int bad_stream;
};

static void
exit_cb(struct spawn *sp, int status, void *arg)
{
	struct run *r = arg;

	(void)sp;
	r->done = 1;
	r->status = status;
	r->exit_calls++;
}

static void
output_cb(struct spawn *sp, int stream, const char *data, size_t len,
    void *arg)
{
	struct run *r = arg;

	(void)sp;
	if (stream != 1 && stream != 2) {
		r->bad_stream = 1;
		return;
	}
	evbuffer_add(r->pieces[stream], data, len);
}

static const struct spawn_callbacks exit_only = { .on_exit = exit_cb };

/* Run the loop until cond(arg) holds. */
static void
loop_until(int (*cond)(void *), void *arg)
{
	struct timeval tick = { 0, 10 * 1000 };
	int ticks = HANG_GUARD_SEC * 100;

	while (!cond(arg)) {
		if (ticks-- == 0)
			fail_msg("gave up waiting after %d s", HANG_GUARD_SEC);
		event_base_loopexit(base, &tick);
		event_base_dispatch(base);
	}
}

static int
run_done(void *arg)
{
	return ((struct run *)arg)->done;
}

static int
has_line(void *arg)
{
	struct evbuffer_ptr p = evbuffer_search(arg, "\n", 1, NULL);

	return p.pos >= 0;
}

/* The process is gone and reaped: a zombie still answers kill(pid, 0). */
static int
pid_gone(void *arg)
{
	pid_t pid = *(pid_t *)arg;

	return kill(pid, 0) < 0 && errno == ESRCH;
}

static void
wait_gone(pid_t pid)
{
	loop_until(pid_gone, &pid);
}

static struct spawn_options
sh_options(const char *script)
{
	static const char *argv[4];
	struct spawn_options o = { 0 };

	argv[0] = "/bin/sh";
	argv[1] = "-c";
	argv[2] = script;
	argv[3] = NULL;
	o.argv = argv;
	o.stdio[0] = SPAWN_NULL;
	o.stdio[1] = SPAWN_CAPTURE;
	o.stdio[2] = SPAWN_CAPTURE;
	return o;
}

static struct spawn *
start(const struct spawn_options *o, const struct spawn_callbacks *cb,
    struct run *r)
{
	struct error err = { 0 };
	struct spawn *sp = spawn_start(base, o, cb, r, &err);

	if (sp == NULL)
		fail_msg("spawn_start: %d %s", err.status, err.msg);
	return sp;
}

/* Start, wait for on_exit; the caller frees. */
static struct spawn *
run_to_exit(const struct spawn_options *o, struct run *r)
{
	struct spawn *sp = start(o, &exit_only, r);

	loop_until(run_done, r);
	assert_int_equal(r->exit_calls, 1);
	assert_true(spawn_exited(sp));
	return sp;
}

/* A captured stream as a string (NUL-terminated copy). */
static char *
output(struct spawn *sp, int stream)
{
	struct evbuffer *b = spawn_output(sp, stream);
	size_t len = evbuffer_get_length(b);
	char *s = xmalloc(len + 1);

	evbuffer_copyout(b, s, len);
	s[len] = '\0';
	return s;
}

static void
assert_output(struct spawn *sp, int stream, const char *want)
{
	char *got = output(sp, stream);

	assert_string_equal(got, want);
	free(got);
}

static void
test_capture_and_exit_status(void **state)
{
	struct spawn_options o = sh_options(
	    "printf 'out line\\n'; printf 'err line' >&2; exit 3");
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	sp = run_to_exit(&o, &r);
	assert_true(WIFEXITED(r.status));
	assert_int_equal(WEXITSTATUS(r.status), 3);
	assert_false(spawn_timed_out(sp));
	assert_output(sp, 1, "out line\n");
	assert_output(sp, 2, "err line");
	assert_int_equal(spawn_dropped(sp, 1), 0);
	assert_true(spawn_pid(sp) > 0);
	spawn_free(sp);
}

static void
test_signal_death(void **state)
{
	struct spawn_options o = sh_options("kill -TERM $$; sleep 5");
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	sp = run_to_exit(&o, &r);
	assert_true(WIFSIGNALED(r.status));
	assert_int_equal(WTERMSIG(r.status), SIGTERM);
	spawn_free(sp);
}

static void
test_output_cap(void **state)
{
	/* More than one read's worth, so the cap holds across reads. */
	struct spawn_options o = sh_options(
	    "head -c 200000 /dev/zero | tr '\\0' a; printf 'tail' >&2");
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	o.capture_cap[1] = 10;
	o.capture_cap[2] = 2;
	sp = run_to_exit(&o, &r);
	assert_int_equal(WEXITSTATUS(r.status), 0);
	assert_output(sp, 1, "aaaaaaaaaa");
	assert_int_equal(spawn_dropped(sp, 1), 200000 - 10);
	assert_output(sp, 2, "ta");
	assert_int_equal(spawn_dropped(sp, 2), 2);
	spawn_free(sp);
}

static void
test_output_callback(void **state)
{
	struct spawn_options o = sh_options(
	    "head -c 100000 /dev/zero | tr '\\0' b; echo; echo oops >&2");
	struct spawn_callbacks cb = { .on_output = output_cb, .on_exit = exit_cb };
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	r.pieces[1] = evbuffer_new();
	r.pieces[2] = evbuffer_new();
	sp = start(&o, &cb, &r);
	loop_until(run_done, &r);
	assert_false(r.bad_stream);
	assert_int_equal(evbuffer_get_length(r.pieces[1]), 100001);
	assert_int_equal(evbuffer_get_length(r.pieces[2]), 5);
	/* Nothing is kept in the runner's buffers when a callback takes it. */
	assert_int_equal(evbuffer_get_length(spawn_output(sp, 1)), 0);
	spawn_free(sp);
	evbuffer_free(r.pieces[1]);
	evbuffer_free(r.pieces[2]);
}

static void
test_env_and_cwd(void **state)
{
	static const char *const envp[] = { "GREETING=hello there", NULL };
	struct spawn_options o = sh_options("echo \"$GREETING\"; pwd");
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	o.envp = envp;
	o.cwd = "/";
	sp = run_to_exit(&o, &r);
	assert_output(sp, 1, "hello there\n/\n");
	spawn_free(sp);
}

static void
test_timeout_kills_group(void **state)
{
	/* A background child holds the output pipe too; both must die. */
	struct spawn_options o = sh_options("sleep 100 & echo $!; wait");
	struct run r = { 0 };
	struct spawn *sp;
	char *text;
	pid_t bg;

	(void)state;
	o.new_group = 1;
	o.timeout = 0.3;
	sp = run_to_exit(&o, &r);
	assert_true(spawn_timed_out(sp));
	assert_true(WIFSIGNALED(r.status));
	assert_int_equal(WTERMSIG(r.status), SIGKILL);
	text = output(sp, 1);
	bg = (pid_t)atoi(text);
	free(text);
	assert_true(bg > 0);
	/* Orphaned to us by the group kill, then reaped by our reaper. */
	wait_gone(bg);
	spawn_free(sp);
}

/* The first line of a captured stream as a pid. */
static pid_t
first_pid(struct spawn *sp, int stream)
{
	char *text = output(sp, stream);
	pid_t pid = (pid_t)atoi(text);

	free(text);
	assert_true(pid > 0);
	return pid;
}

static void
test_timeout_kills_what_left_the_group(void **state)
{
	/* A new session is out of reach of kill(-pgid); the keeper gets it
	 * back as an orphan when the shell dies, and kills it. */
	struct spawn_options o = sh_options(
	    "setsid sh -c 'echo $$; exec sleep 100' & wait");
	struct run r = { 0 };
	struct spawn *sp;
	pid_t escaped;

	(void)state;
	o.new_group = 1;
	o.timeout = 0.5;
	sp = run_to_exit(&o, &r);
	assert_true(spawn_timed_out(sp));
	assert_int_equal(WTERMSIG(r.status), SIGKILL);
	escaped = first_pid(sp, 1);
	wait_gone(escaped);
	spawn_free(sp);
}

static void
test_free_kills_a_double_forked_daemon(void **state)
{
	/* The classic daemon: fork, setsid, parent exits; an orphan of the
	 * keeper's from the start, in a session of its own. */
	struct spawn_options o = sh_options(
	    "(setsid sh -c 'echo $$; exec sleep 100' &); exec sleep 100");
	struct spawn_callbacks cb = { .on_output = output_cb, .on_exit = exit_cb };
	struct run r = { 0 };
	struct spawn *sp;
	pid_t daemon = 0, cmd;

	(void)state;
	r.pieces[1] = evbuffer_new();
	r.pieces[2] = evbuffer_new();
	o.new_group = 1;
	sp = start(&o, &cb, &r);
	cmd = spawn_pid(sp);
	while (daemon == 0) {
		char line[32] = { 0 };

		loop_until(has_line, r.pieces[1]);
		evbuffer_copyout(r.pieces[1], line, sizeof line - 1);
		daemon = (pid_t)atoi(line);
	}
	assert_int_equal(kill(daemon, 0), 0);
	spawn_free(sp);
	wait_gone(cmd);
	wait_gone(daemon);
	assert_int_equal(r.exit_calls, 0);
	evbuffer_free(r.pieces[1]);
	evbuffer_free(r.pieces[2]);
}

static void
test_keeper_exits_as_the_command(void **state)
{
	/* The exit status is the command's, a signal included; background
	 * jobs outlive it, as under sh -c. */
	struct spawn_options o = sh_options("sleep 100 & echo $!; exit 7");
	struct run r = { 0 };
	struct spawn *sp;
	pid_t bg;

	(void)state;
	o.new_group = 1;
	sp = run_to_exit(&o, &r);
	assert_true(WIFEXITED(r.status));
	assert_int_equal(WEXITSTATUS(r.status), 7);
	bg = first_pid(sp, 1);
	assert_int_equal(kill(bg, 0), 0);
	kill(bg, SIGKILL);
	wait_gone(bg);
	spawn_free(sp);

	memset(&r, 0, sizeof r);
	o = sh_options("kill -SEGV $$");
	o.new_group = 1;
	sp = run_to_exit(&o, &r);
	assert_true(WIFSIGNALED(r.status));
	assert_int_equal(WTERMSIG(r.status), SIGSEGV);
	spawn_free(sp);
}

static void
test_no_timeout_when_done_in_time(void **state)
{
	struct spawn_options o = sh_options("echo quick");
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	o.new_group = 1;
	o.timeout = 20;
	sp = run_to_exit(&o, &r);
	assert_false(spawn_timed_out(sp));
	assert_int_equal(WEXITSTATUS(r.status), 0);
	spawn_free(sp);
}

static void
test_background_child_keeps_pipe(void **state)
{
	/* The shell exits at once, its background child holds stdout open:
	 * the exit is still reported, after the grace period. */
	struct spawn_options o = sh_options("sleep 2 & echo $!; echo done");
	struct run r = { 0 };
	struct spawn *sp;
	char *text;
	pid_t bg;

	(void)state;
	sp = run_to_exit(&o, &r);
	assert_int_equal(WEXITSTATUS(r.status), 0);
	text = output(sp, 1);
	bg = (pid_t)atoi(text);
	assert_non_null(strstr(text, "\ndone\n"));
	free(text);
	spawn_free(sp);
	kill(bg, SIGKILL);
	wait_gone(bg);
}

static int
child_exited(void *arg)
{
	return spawn_exited(arg);
}

static void
test_output_paused_past_exit_is_all_delivered(void **state)
{
	/* A slow reader paused the output; the command fits what is left
	 * in the pipe and exits. Its exit waits for its output, however
	 * long past the grace the pause lasts. */
	struct spawn_options o = sh_options(
	    "head -c 60000 /dev/zero | tr '\\0' p");
	struct spawn_callbacks cb = { .on_output = output_cb, .on_exit = exit_cb };
	struct timeval later = { 0, 500 * 1000 };
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	r.pieces[1] = evbuffer_new();
	r.pieces[2] = evbuffer_new();
	o.new_group = 1;
	sp = start(&o, &cb, &r);
	spawn_pause_output(sp);
	loop_until(child_exited, sp);
	event_base_loopexit(base, &later);
	event_base_dispatch(base);
	assert_int_equal(r.exit_calls, 0);
	spawn_resume_output(sp);
	loop_until(run_done, &r);
	assert_int_equal(evbuffer_get_length(r.pieces[1]), 60000);
	assert_int_equal(WEXITSTATUS(r.status), 0);
	spawn_free(sp);
	evbuffer_free(r.pieces[1]);
	evbuffer_free(r.pieces[2]);
}

static void
test_missing_program(void **state)
{
	static const char *const argv[] = { "/nonexistent/program", NULL };
	struct spawn_options o = { 0 };
	struct error err = { 0 };
	struct run r = { 0 };

	(void)state;
	o.argv = argv;
	o.stdio[1] = SPAWN_CAPTURE;
	assert_null(spawn_start(base, &o, &exit_only, &r, &err));
	assert_int_equal(err.status, 404);
	assert_non_null(strstr(err.msg, "/nonexistent/program"));
}

static void
test_search_path(void **state)
{
	/* "sh" is found through the child's own PATH, not ours; a name
	 * found nowhere is a 404 naming it. */
	static const char *const envp[] = { "PATH=/nonexistent:/bin", NULL };
	static const char *const argv[] = { "sh", "-c", "echo found", NULL };
	static const char *const missing[] = { "no-such-program-here", NULL };
	struct spawn_options o = sh_options(NULL);
	struct error err = { 0 };
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	o.argv = argv;
	o.envp = envp;
	o.search_path = 1;
	sp = run_to_exit(&o, &r);
	assert_output(sp, 1, "found\n");
	spawn_free(sp);
	o.argv = missing;
	assert_null(spawn_start(base, &o, &exit_only, &r, &err));
	assert_int_equal(err.status, 404);
	assert_non_null(strstr(err.msg, "no-such-program-here"));
}

static void
test_bad_cwd_says_so(void **state)
{
	/* As the user (cwd_as_user, as nobody when we are root) or not. */
	struct spawn_options o = sh_options("true");
	struct error err = { 0 };
	struct run r = { 0 };

	(void)state;
	o.cwd = "/nonexistent/dir";
	for (int as_user = 0; as_user < 2; as_user++) {
		o.cwd_as_user = as_user;
		o.set_ids = as_user && geteuid() == 0;
		o.uid = o.gid = 65534;
		assert_null(spawn_start(base, &o, &exit_only, &r, &err));
		assert_int_equal(err.status, 404);
		assert_non_null(strstr(err.msg, "cannot change to directory "
		    "/nonexistent/dir"));
	}
}

static void
test_a_child_that_became_the_user_is_not_dumpable(void **state)
{
	/* With fs.suid_dumpable at 1, setuid leaves a process dumpable: the
	 * user could trace a child (the shell template's command, which runs
	 * on without exec) while it still holds our descriptors. */
	struct spawn_options o = { 0 };
	int fds[3] = { -1, -1, -1 }, p[2], got = -1, sysfd = -1;
	char old[8] = "";
	ssize_t n;
	pid_t pid;

	(void)state;
	if (geteuid() != 0 || (sysfd = open("/proc/sys/fs/suid_dumpable",
	    O_RDWR | O_CLOEXEC)) < 0)
		skip();		/* not root: no user to become */
	n = read(sysfd, old, sizeof old - 1);
	assert_true(n > 0);
	assert_int_equal(pwrite(sysfd, "1\n", 2, 0), 2);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	o.set_ids = 1;
	o.uid = o.gid = 65534;
	if ((pid = fork()) == 0) {
		int d = -2;

		if (spawn_child_confine(&o, fds, -1) == 0)
			d = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
		if (write(p[1], &d, sizeof d) != (ssize_t)sizeof d)
			_exit(2);
		_exit(0);
	}
	close(p[1]);
	n = read(p[0], &got, sizeof got);
	close(p[0]);
	waitpid(pid, NULL, 0);
	/* The host's setting back before any assertion can fail. */
	assert_int_equal(pwrite(sysfd, old, (size_t)strlen(old), 0),
	    (ssize_t)strlen(old));
	close(sysfd);
	assert_int_equal(n, sizeof got);
	assert_int_equal(got, 0);
}

static void
test_pty_is_the_controlling_terminal(void **state)
{
	/* A session of its own whose terminal is its stdin: /dev/tty opens,
	 * and it leads its group in the foreground. */
	struct spawn_options o = sh_options("exec 3</dev/tty && "
	    "set -- $(cat /proc/$$/stat) && [ \"$8\" = $$ ] && echo ok");
	struct run r = { 0 };
	struct spawn *sp;
	char buf[64];
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), s;
	ssize_t n;

	(void)state;
	assert_true(m >= 0 && unlockpt(m) == 0);
	s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	assert_true(s >= 0);
	o.new_group = 1;
	o.ctty = 1;
	for (int i = 0; i < 3; i++) {
		o.stdio[i] = SPAWN_FD;
		o.fd[i] = s;
	}
	sp = start(&o, &exit_only, &r);
	close(s);
	loop_until(run_done, &r);
	assert_true(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0);
	n = read(m, buf, sizeof buf - 1);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_non_null(strstr(buf, "ok"));
	close(m);
	spawn_free(sp);
}

static void
test_not_executable(void **state)
{
	/* It exists but cannot be executed: our fault to ask, not a 404. */
	static const char *const argv[] = { "/dev/null", NULL };
	struct spawn_options o = { 0 };
	struct error err = { 0 };

	(void)state;
	o.argv = argv;
	assert_null(spawn_start(base, &o, NULL, NULL, &err));
	assert_int_equal(err.status, 500);
}

static void
test_stdin_dev_null(void **state)
{
	struct spawn_options o = sh_options(
	    "readlink /proc/self/fd/0; cat; echo \"cat=$?\"");
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	sp = run_to_exit(&o, &r);
	assert_output(sp, 1, "/dev/null\ncat=0\n");
	spawn_free(sp);
}

static void
test_default_signals_in_child(void **state)
{
	/* We ignore SIGPIPE, as the agent does; "yes | head" needs it back. */
	struct spawn_options o = sh_options("yes | head -n 2");
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	sp = run_to_exit(&o, &r);
	assert_output(sp, 1, "y\ny\n");
	spawn_free(sp);
}

static void
test_pipe_fds(void **state)
{
	static const char *const argv[] = { "/bin/cat", NULL };
	struct spawn_options o = { 0 };
	struct run r = { 0 };
	struct spawn *sp;
	char buf[64];
	size_t got = 0;
	ssize_t n;
	int in, out;

	(void)state;
	o.argv = argv;
	o.stdio[0] = SPAWN_PIPE;
	o.stdio[1] = SPAWN_PIPE;
	o.stdio[2] = SPAWN_NULL;
	sp = start(&o, &exit_only, &r);
	in = spawn_take_fd(sp, 0);
	out = spawn_take_fd(sp, 1);
	assert_true(in >= 0);
	assert_true(out >= 0);
	/* Taken once; streams that are not pipes have none. */
	assert_int_equal(spawn_take_fd(sp, 0), -1);
	assert_int_equal(spawn_take_fd(sp, 2), -1);
	assert_int_equal(write(in, "through the pipe", 16), 16);
	close(in);
	while ((n = read(out, buf + got, sizeof buf - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	assert_string_equal(buf, "through the pipe");
	close(out);
	loop_until(run_done, &r);
	assert_int_equal(WEXITSTATUS(r.status), 0);
	spawn_free(sp);
}

/* Read a pipe to its end as a string. */
static void
read_all(int fd, char *buf, size_t size)
{
	size_t got = 0;
	ssize_t n;

	while (got < size - 1 && (n = read(fd, buf + got, size - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
}

/* pass_fds land at 3, 4 in the order given (here the reverse of their
 * numbers), and the child has no other descriptor of ours. */
static void
test_pass_fds(void **state)
{
	struct spawn_options o = sh_options(
	    "echo first >&3; echo second >&4; exec 3>&- 4>&-; ls /proc/self/fd");
	struct run r = { 0 };
	struct spawn *sp;
	int a[2], b[2], pass[2];
	char buf[64];

	(void)state;
	assert_int_equal(pipe2(a, O_CLOEXEC), 0);
	assert_int_equal(pipe2(b, O_CLOEXEC), 0);
	pass[0] = b[1] > a[1] ? b[1] : a[1];
	pass[1] = b[1] > a[1] ? a[1] : b[1];
	o.pass_fds = pass;
	o.npass_fds = 2;
	sp = run_to_exit(&o, &r);
	close(a[1]);
	close(b[1]);
	assert_int_equal(WEXITSTATUS(r.status), 0);
	read_all(pass[0] == b[1] ? b[0] : a[0], buf, sizeof buf);
	assert_string_equal(buf, "first\n");
	read_all(pass[0] == b[1] ? a[0] : b[0], buf, sizeof buf);
	assert_string_equal(buf, "second\n");
	/* ls's own directory is 3 once the shell closed ours. */
	assert_output(sp, 1, "0\n1\n2\n3\n");
	close(a[0]);
	close(b[0]);
	spawn_free(sp);
}

/* The descriptor to execute may be one of the numbers pass_fds land on
 * (a program's first open is 3, as here: /bin/sh opened first of all):
 * it is executed all the same. */
static void
test_exec_fd_where_a_pass_fd_lands(void **state)
{
	static const char *const argv[] = { "sh", "-c", "echo ran >&3", NULL };
	struct spawn_options o = { 0 };
	struct run r = { 0 };
	struct spawn *sp;
	char buf[64];
	int p[2];

	(void)state;
	assert_int_equal(first_fd, 3);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	o.argv = argv;
	o.stdio[0] = o.stdio[1] = o.stdio[2] = SPAWN_NULL;
	o.pass_fds = &p[1];
	o.npass_fds = 1;
	o.use_exec_fd = 1;
	o.exec_fd = first_fd;
	sp = run_to_exit(&o, &r);
	close(p[1]);
	assert_int_equal(WEXITSTATUS(r.status), 0);
	read_all(p[0], buf, sizeof buf);
	assert_string_equal(buf, "ran\n");
	close(p[0]);
	spawn_free(sp);
}

static void
test_free_kills_running_child(void **state)
{
	struct spawn_options o = sh_options("exec sleep 100");
	struct run r = { 0 };
	struct spawn *sp;
	pid_t pid;

	(void)state;
	for (int group = 0; group < 2; group++) {
		o.new_group = group;
		sp = start(&o, &exit_only, &r);
		pid = spawn_pid(sp);
		assert_int_equal(kill(pid, 0), 0);
		spawn_free(sp);
		wait_gone(pid);
		assert_int_equal(r.exit_calls, 0);
	}
}

static void
test_kill(void **state)
{
	struct spawn_options o = sh_options("exec sleep 100");
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	o.new_group = 1;
	sp = start(&o, &exit_only, &r);
	spawn_kill(sp, SIGINT);
	loop_until(run_done, &r);
	assert_true(WIFSIGNALED(r.status));
	assert_int_equal(WTERMSIG(r.status), SIGINT);
	spawn_free(sp);
}

static void
test_reaper_reaps_orphans(void **state)
{
	struct spawn_options o = sh_options("sleep 0.2 & echo $!");
	struct run r = { 0 };
	struct spawn *sp;
	char *text;
	pid_t pid;

	(void)state;
	/* A child that is not ours to report: the reaper still takes it. */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(7);
	wait_gone(pid);

	/* A grandchild whose parent exits first comes back to us. */
	sp = run_to_exit(&o, &r);
	text = output(sp, 1);
	pid = (pid_t)atoi(text);
	free(text);
	assert_true(pid > 0);
	spawn_free(sp);
	wait_gone(pid);
}

/* spawn_start_via's other process, as the shell template is one: a child
 * of ours that makes the keeper our child (CLONE_PARENT) after delay_ms,
 * and exits; the keeper tells its pid, then runs o's program as any
 * keeper. With no_keeper it makes none: the reports end untold. The
 * program gets pass_fd, if above 0, as its 3. */
struct via {
	int delay_ms;
	int no_keeper;
	int pass_fd;
	const struct spawn_options *o;
	pid_t helper;
};

static int
via_start(const int fds[3], int report_fd, void *arg)
{
	struct via *v = arg;
	struct spawn_msg msg = { SPAWN_MSG_KEEPER, 0 };
	struct timespec delay = { 0, v->delay_ms * 1000000L };
	sigset_t all;
	pid_t cmd;

	v->helper = fork();
	if (v->helper != 0)
		return v->helper < 0 ? -1 : 0;
	nanosleep(&delay, NULL);
	if (v->no_keeper || syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0,
	    0, 0) != 0)
		_exit(0);
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	spawn_keeper_begin();
	msg.value = getpid();
	if (write(report_fd, &msg, sizeof msg) != (ssize_t)sizeof msg)
		_exit(127);
	if ((cmd = fork()) == 0)
		spawn_child_exec(v->o, fds, report_fd, 1);
	spawn_keeper_run(cmd, report_fd);
}

/* sh -c script in its own group through a helper as v says; the caller
 * frees. */
static struct spawn *
start_via(struct via *v, const char *script, struct run *r)
{
	static struct spawn_options o;
	struct error err = { 0 };
	struct spawn *sp;

	o = sh_options(script);
	o.new_group = 1;
	if (v->pass_fd > 0) {
		o.pass_fds = &v->pass_fd;
		o.npass_fds = 1;
	}
	v->o = &o;
	sp = spawn_start_via(base, &o, via_start, v, &exit_only, r, &err);
	if (sp == NULL)
		fail_msg("spawn_start_via: %d %s", err.status, err.msg);
	return sp;
}

/* The spawn ended as status says it would; freed, and its helper gone. */
static void
assert_via_ended(struct spawn *sp, struct via *v, struct run *r,
    int (*status)(int))
{
	loop_until(run_done, r);
	assert_true(status(r->status));
	spawn_free(sp);
	wait_gone(v->helper);
}

static int
exited_3(int status)
{
	return WIFEXITED(status) && WEXITSTATUS(status) == 3;
}

static int
killed(int status)
{
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

static void
test_via_runs_as_any_spawn(void **state)
{
	struct via v = { .delay_ms = 0 };
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	sp = start_via(&v, "echo out; echo err >&2; exit 3", &r);
	loop_until(run_done, &r);
	assert_output(sp, 1, "out\n");
	assert_output(sp, 2, "err\n");
	assert_true(spawn_pid(sp) > 0);
	assert_via_ended(sp, &v, &r, exited_3);
}

/* A kill asked for before the keeper told its pid is done when it does:
 * the whole tree ends. */
static void
test_via_killed_before_its_keeper_is_known(void **state)
{
	struct via v = { .delay_ms = 200 };
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	sp = start_via(&v, "exec sleep 100", &r);
	assert_int_equal(spawn_pid(sp), 0);
	spawn_kill(sp, SIGKILL);
	assert_via_ended(sp, &v, &r, killed);
}

/* A non-blocking pipe's end of file (every writer gone), read to it as
 * the loop runs. */
static int
pipe_ended(void *arg)
{
	char buf[64];

	return read(*(int *)arg, buf, sizeof buf) == 0;
}

/* Freed before its keeper told its pid: the keeper, once known, is told
 * to end the tree. The command holds a pipe (and waits), which ends once
 * it, the keeper and the helper have all gone. */
static void
test_via_freed_before_its_keeper_is_known(void **state)
{
	struct via v = { .delay_ms = 200 };
	struct run r = { 0 };
	int p[2];

	(void)state;
	assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	v.pass_fd = p[1];
	spawn_free(start_via(&v, "exec sleep 100", &r));
	close(p[1]);
	loop_until(pipe_ended, &p[0]);
	close(p[0]);
	wait_gone(v.helper);
	assert_int_equal(r.exit_calls, 0);
}

/* No keeper ever came: the spawn ends as killed. */
static void
test_via_with_no_keeper_ends(void **state)
{
	struct via v = { .no_keeper = 1 };
	struct run r = { 0 };

	(void)state;
	assert_via_ended(start_via(&v, "true", &r), &v, &r, killed);
}

/* A setup: runs in the child before the exec, a system call only. */
static int
setup_umask(void *arg)
{
	umask(*(mode_t *)arg);
	return 0;
}

static int
setup_fails(void *arg)
{
	(void)arg;
	errno = EXDEV;
	return -1;
}

static void
test_setup_runs_in_the_child(void **state)
{
	struct spawn_options o = sh_options("umask");
	mode_t mask = 027;
	struct run r = { 0 };
	struct spawn *sp;

	(void)state;
	o.setup = setup_umask;
	o.setup_arg = &mask;
	sp = run_to_exit(&o, &r);
	assert_output(sp, 1, "0027\n");
	spawn_free(sp);
}

static void
test_setup_failure_fails_the_spawn(void **state)
{
	struct spawn_options o = sh_options("echo ran");
	struct error err = { 0 };

	(void)state;
	o.setup = setup_fails;
	assert_null(spawn_start(base, &o, &exit_only, NULL, &err));
	assert_int_equal(err.status, 500);
	assert_non_null(strstr(err.msg, "cannot set up /bin/sh"));
	assert_non_null(strstr(err.msg, strerror(EXDEV)));
}

/* What the orphan callback was told. */
struct orphan {
	pid_t pid;
	int status;
};

static void
orphan_cb(pid_t pid, int status, void *arg)
{
	struct orphan *o = arg;

	if (pid == o->pid)
		o->status = status;
}

static int
orphan_told(void *arg)
{
	return ((struct orphan *)arg)->status >= 0;
}

static void
test_orphans_are_told_with_their_status(void **state)
{
	/* The grandchild outlives its parent, comes back to us (a
	 * subreaper), and exits 5 when told on the pipe (its stdin would be
	 * /dev/null: an asynchronous list's is). */
	struct spawn_options o = sh_options(
	    "exec 4<&0; (read x <&4; exit 5) & echo $!");
	struct orphan orphan = { 0, -1 };
	struct run r = { 0 };
	struct spawn *sp;
	char *text;
	int p[2];

	(void)state;
	assert_int_equal(pipe(p), 0);
	o.stdio[0] = SPAWN_FD;
	o.fd[0] = p[0];
	sp = run_to_exit(&o, &r);
	close(p[0]);
	text = output(sp, 1);
	orphan.pid = (pid_t)atoi(text);
	free(text);
	assert_true(orphan.pid > 0);
	spawn_free(sp);
	spawn_set_orphan_cb(orphan_cb, &orphan);
	assert_int_equal(write(p[1], "go\n", 3), 3);
	close(p[1]);
	loop_until(orphan_told, &orphan);
	spawn_set_orphan_cb(NULL, NULL);
	assert_true(WIFEXITED(orphan.status));
	assert_int_equal(WEXITSTATUS(orphan.status), 5);
}

static int
group_setup(void **state)
{
	(void)state;
	first_fd = open("/bin/sh", O_RDONLY | O_CLOEXEC);
	signal(SIGPIPE, SIG_IGN);
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		return -1;
	base = event_base_new();
	if (base == NULL)
		return -1;
	spawn_init(base);
	return 0;
}

static int
group_teardown(void **state)
{
	(void)state;
	event_base_free(base);
	close(first_fd);
	return 0;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_capture_and_exit_status),
		cmocka_unit_test(test_signal_death),
		cmocka_unit_test(test_output_cap),
		cmocka_unit_test(test_output_callback),
		cmocka_unit_test(test_env_and_cwd),
		cmocka_unit_test(test_timeout_kills_group),
		cmocka_unit_test(test_timeout_kills_what_left_the_group),
		cmocka_unit_test(test_free_kills_a_double_forked_daemon),
		cmocka_unit_test(test_keeper_exits_as_the_command),
		cmocka_unit_test(test_no_timeout_when_done_in_time),
		cmocka_unit_test(test_background_child_keeps_pipe),
		cmocka_unit_test(test_output_paused_past_exit_is_all_delivered),
		cmocka_unit_test(test_missing_program),
		cmocka_unit_test(test_search_path),
		cmocka_unit_test(test_bad_cwd_says_so),
		cmocka_unit_test(test_a_child_that_became_the_user_is_not_dumpable),
		cmocka_unit_test(test_pty_is_the_controlling_terminal),
		cmocka_unit_test(test_not_executable),
		cmocka_unit_test(test_stdin_dev_null),
		cmocka_unit_test(test_default_signals_in_child),
		cmocka_unit_test(test_pipe_fds),
		cmocka_unit_test(test_pass_fds),
		cmocka_unit_test(test_exec_fd_where_a_pass_fd_lands),
		cmocka_unit_test(test_free_kills_running_child),
		cmocka_unit_test(test_kill),
		cmocka_unit_test(test_reaper_reaps_orphans),
		cmocka_unit_test(test_via_runs_as_any_spawn),
		cmocka_unit_test(test_via_killed_before_its_keeper_is_known),
		cmocka_unit_test(test_via_freed_before_its_keeper_is_known),
		cmocka_unit_test(test_via_with_no_keeper_ends),
		cmocka_unit_test(test_setup_runs_in_the_child),
		cmocka_unit_test(test_setup_failure_fails_the_spawn),
		cmocka_unit_test(test_orphans_are_told_with_their_status),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
