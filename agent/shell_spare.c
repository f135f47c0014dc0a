/*
 * Spare shells for run_shell_command: the fork, exec and set-up of a
 * command's shell done before its request comes (shell.c).
 *
 * A spare is what spawn_start makes of any command (keeper, own process
 * group, workspace as cwd, stdin /dev/null, run-as user, seccomp filter,
 * stdout and stderr pipes to us), whose program is bash -c SPARE_SCRIPT:
 * it blocks reading one byte from its fd 3 (a pipe), then reads the
 * command from its fd 4 (a memfd we fill first), closes both and evals
 * the command. eval parses and runs the text one command at a time like
 * -c, with the same $0, $?, exit, set -e, traps, LINENO and background
 * jobs; BASH_EXECUTION_STRING is the command, as under -c, and nothing
 * else of the script is left (REPLY is unset, IFS untouched). Only its
 * syntax errors would differ ("eval:" where -c says "-c:"), so the text
 * is first parsed and not run: a function evals "set -n" and then the
 * text, so that bash parses each of its commands and executes none (not
 * even a set +n of the text's: noexec stops every command), and `local -`
 * gives the option back when the function returns. If that fails the
 * spare executes bash -c with the text, the very thing it stands for (a
 * text that fails only there, as one that shopt -s extglob on an earlier
 * line makes valid, is still run right; a bash without `local -`, before
 * 4.4, always takes that way). Nothing of the text runs before or besides
 * the one real run. A command too long for argv (the go byte is "l", not
 * "x") is run by eval alone, as shell.c runs it without a spare, messages
 * saying "eval:". Each spare serves one command and is replaced in the
 * background: 5 ms later, off the path of the call that took it, or at
 * once when it was the last one (calls come fast).
 *
 * A spare is used only if it is ready (its bash executed), has written
 * nothing and still runs, and the workspace is the directory it was
 * started in; else the call takes spawn_start's path, as do calls
 * beyond the spares (a burst).
 *
 * A spare waits long, so it must be out of reach of earlier commands of
 * the same user: under --run-as its bash is executed from an
 * execute-only memfd copy of /bin/bash, which makes it undumpable, so
 * that no process of the user may open its /proc/PID/fd (its command
 * memfd, its pipes) or memory. Processes the command starts are ordinary
 * (as without spares). As root (no --run-as) an earlier command could
 * replace /bin/bash itself; there the spare is as reachable as any
 * command.
 *
 * Undumpable is not untouchable: a process of the same user may still
 * signal a spare (SIGSTOP: the next call would hang to its timeout),
 * lower its limits (RLIMIT_NOFILE, RLIMIT_FSIZE: the next call fails),
 * renice it or pin it to one CPU, and its command line tells it from
 * other shells. So the call checks the spare it takes (spawn_untouched):
 * running, not stopped nor traced, and the limits, scheduling, CPUs and
 * I/O priority a bash -c started now would get; a spare that fails is
 * dropped (its keeper kills it) and the call takes spawn_start's path.
 * Dropped spares are replaced after SPARE_RETRY_SECONDS, as dead ones:
 * a job that spoils every spare must not make us fork in a loop. What
 * the user does to the command after the check, it could do to a fresh
 * bash -c just as well.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "spawn.h"
#include "xmalloc.h"

/* $'\n', not a newline: the script stays on line 1, as the command's
 * LINENO must count from there. */
#define SPARE_SCRIPT "__sbx_check(){ local -||return;" \
	"eval \"set -n\"$'\\n'\"$BASH_EXECUTION_STRING\";};" \
	"read -rN1 -u3 REPLY||exit 0;" \
	"IFS= read -rd '' -u4 BASH_EXECUTION_STRING;exec 3<&- 4<&-;" \
	"[ \"$REPLY\" = l ]||__sbx_check 2>/dev/null||" \
	"exec /bin/bash -c \"$BASH_EXECUTION_STRING\";" \
	"unset -f __sbx_check;unset REPLY;eval \"$BASH_EXECUTION_STRING\""
#define SPARE_MAX 8
/* After a spare died unused, wait before the next: a shell that cannot
 * start must not make us fork in a loop. */
#define SPARE_RETRY_SECONDS 1
#ifndef SPARE_REFILL_DELAY_US
#define SPARE_REFILL_DELAY_US 5000
#endif
/* Above the descriptors a child moves into place (stdio, pass_fds). */
#define SPARE_EXEC_FD_MIN 64

struct spare {
	struct spawn *sp;
	int go;			/* the pipe the spare waits on */
	int script;		/* the memfd it reads its command from */
	dev_t dev;		/* the workspace it was started in */
	ino_t ino;
};

static struct {
	struct agent *agent;
	struct spare spares[SPARE_MAX];
	size_t n, want;
	int bash_fd;		/* execute-only copy of bash, or -1 */
	struct event *retry;
	int stopped;
} pool = { .bash_fd = -1 };

static void spare_refill(void);

static int
workspace_id(dev_t *dev, ino_t *ino)
{
	struct stat st;

	if (stat(pool.agent->ws.root, &st) < 0)
		return -1;
	*dev = st.st_dev;
	*ino = st.st_ino;
	return 0;
}

static void
spare_close(struct spare *s)
{
	spawn_free(s->sp);
	close(s->go);
	close(s->script);
}

/* Take spares[i] out of the pool (the last moves into its place). */
static struct spare
spare_remove(size_t i)
{
	struct spare s = pool.spares[i];

	pool.spares[i] = pool.spares[--pool.n];
	return s;
}

/* The replacement of a spare just used: not forked on the way of the
 * command it runs, but once that has most likely been answered. */
static void
refill_later(void)
{
	struct timeval tv = { 0, SPARE_REFILL_DELAY_US };

	if (!evtimer_pending(pool.retry, NULL))
		evtimer_add(pool.retry, &tv);
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	spare_refill();
}

/* Spares lost before their use are replaced a little later. */
static void
retry_later(void)
{
	struct timeval tv = { SPARE_RETRY_SECONDS, 0 };

	if (!pool.stopped)
		evtimer_add(pool.retry, &tv);
}

/* A spare exited before it was used (killed, or its shell would not
 * start): dropped, and replaced a little later. */
static void
spare_died(struct spawn *sp, int status, void *arg)
{
	struct spare s;

	(void)arg;
	for (size_t i = 0; i < pool.n; i++) {
		if (pool.spares[i].sp != sp)
			continue;
		s = spare_remove(i);
		log_warn("a spare shell (pid %d) exited unused (status %d)",
		    (int)spawn_pid(sp), status);
		spare_close(&s);
		break;
	}
	if (!evtimer_pending(pool.retry, NULL))
		retry_later();
}

static int
spare_start(struct spare *s)
{
	static const struct spawn_callbacks cb = { .on_exit = spare_died };
	struct agent *agent = pool.agent;
	const char *argv[] = { agent->shell, "-c", SPARE_SCRIPT, NULL };
	struct spawn_options opts;
	struct error err = { 0 };
	int go[2], pass[2];

	if (workspace_id(&s->dev, &s->ino) < 0)
		return -1;
	if (pipe2(go, O_CLOEXEC) < 0)
		return -1;
	s->go = go[1];
	s->script = memfd_create("sandbox-agent-command", MFD_CLOEXEC);
	if (s->script < 0) {
		close(go[0]);
		close(go[1]);
		return -1;
	}
	confine_spawn_options(agent, &opts);
	opts.argv = argv;
	opts.stdio[0] = SPAWN_NULL;
	opts.stdio[1] = opts.stdio[2] = SPAWN_CAPTURE;
	/* Idle, it writes nothing; if it did, no more than this is kept. */
	opts.capture_cap[1] = opts.capture_cap[2] = 4096;
	pass[0] = go[0];
	pass[1] = s->script;
	opts.pass_fds = pass;
	opts.npass_fds = 2;
	opts.async = 1;
	shell_exec_options(&opts);
	s->sp = spawn_start(agent->base, &opts, &cb, NULL, &err);
	close(go[0]);
	if (s->sp == NULL) {
		log_warn("cannot start a spare shell: %s", err.msg);
		close(s->go);
		close(s->script);
		return -1;
	}
	return 0;
}

static void
spare_refill(void)
{
	while (!pool.stopped && pool.n < pool.want) {
		if (spare_start(&pool.spares[pool.n]) < 0)
			return;
		pool.n++;
	}
}

/* An execute-only memfd copy of bash: executed by a user who may not
 * read it, the process is undumpable (the kernel's would_dump). */
static int
bash_copy(const char *path)
{
	struct stat st;
	char path_rd[64];
	int in = open(path, O_RDONLY | O_CLOEXEC), fd = -1, ro, high;
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
	high = fcntl(ro, F_DUPFD_CLOEXEC, SPARE_EXEC_FD_MIN);
	close(ro);
	if (high < 0)
		goto fail;
	close(fd);
	close(in);
	return high;
fail:
	log_warn("cannot copy %s to an execute-only memfd (%s): commands run "
	    "from %s itself", path, strerror(errno), path);
	if (fd >= 0)
		close(fd);
	if (in >= 0)
		close(in);
	return -1;
}

void
shell_exec_options(struct spawn_options *opts)
{
	if (pool.bash_fd >= 0) {
		opts->use_exec_fd = 1;
		opts->exec_fd = pool.bash_fd;
	}
}

void
shell_spares_init(struct agent *agent)
{
	pool.agent = agent;
	if (agent->drop_ids && strcmp(agent->shell, "/bin/bash") == 0)
		pool.bash_fd = bash_copy(agent->shell);
	/* The script needs bash's read -N, -u and -d. */
	if (strcmp(agent->shell, "/bin/bash") != 0)
		return;
	pool.want = (size_t)agent->cfg.shell_spares;
	if (pool.want > SPARE_MAX)
		pool.want = SPARE_MAX;
	/* A spare is checked through /proc before use: without it none
	 * would pass, and each call would start spares for nothing. */
	if (pool.want > 0 && access("/proc/self/limits", R_OK) < 0) {
		log_warn("no spare shells: a spare is checked through /proc "
		    "before use, and /proc/self/limits is unreadable (%s)",
		    strerror(errno));
		pool.want = 0;
	}
	pool.retry = evtimer_new(agent->base, retry_cb, NULL);
	spare_refill();
}

struct spawn *
shell_spare_take(const char *command, size_t len, int too_long_for_argv,
    const struct spawn_callbacks *cb, void *arg, const size_t cap[3],
    double timeout)
{
	dev_t dev;
	ino_t ino;
	int spoilt = 0;

	if (pool.n == 0 || workspace_id(&dev, &ino) < 0)
		return NULL;
	for (size_t i = 0; i < pool.n; i++) {
		struct spare *s = &pool.spares[i], taken;

		if (s->dev != dev || s->ino != ino) {
			/* Started in a workspace since replaced: every
			 * spare of then goes. */
			taken = spare_remove(i--);
			spare_close(&taken);
			continue;
		}
		if (!spawn_ready(s->sp) || spawn_exited(s->sp) ||
		    spawn_captured(s->sp) > 0)
			continue;
		taken = spare_remove(i);
		if (!spawn_untouched(taken.sp)) {
			log_warn("a spare shell (pid %d) was stopped, traced, "
			    "re-limited or re-prioritised while idle: dropped",
			    (int)spawn_pid(taken.sp));
			spare_close(&taken);
			spoilt = 1;
			i--;
			continue;
		}
		if (pwrite(taken.script, command, len, 0) != (ssize_t)len ||
		    write(taken.go, too_long_for_argv ? "l" : "x", 1) != 1) {
			spare_close(&taken);
			i--;
			continue;
		}
		close(taken.go);
		close(taken.script);
		spawn_adopt(taken.sp, cb, arg, cap, timeout);
		if (spoilt)
			retry_later();
		/* The last one: calls come fast, the next must not miss. */
		else if (pool.n == 0)
			spare_refill();
		else
			refill_later();
		return taken.sp;
	}
	if (spoilt)
		retry_later();
	else
		spare_refill();
	return NULL;
}

void
shell_spares_stop(void)
{
	pool.stopped = 1;
	while (pool.n > 0) {
		struct spare s = spare_remove(0);

		spare_close(&s);
	}
	if (pool.retry != NULL) {
		event_free(pool.retry);
		pool.retry = NULL;
	}
	if (pool.bash_fd >= 0) {
		close(pool.bash_fd);
		pool.bash_fd = -1;
	}
}
