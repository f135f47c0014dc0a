/*
 * The child side of spawn_start, between fork and exec. The agent has
 * threads, so only async-signal-safe calls here: system calls and plain
 * loops over memory; no allocation, no stdio, no locks.
 *
 * A child with its own group (new_group) runs under a keeper: the forked
 * child stays what it is (the agent's user, undumpable, unconfined), makes
 * itself a child subreaper and forks the command. Whatever the command's
 * processes do (setsid, double forks, groups of their own), an orphan
 * among them is reparented to the nearest subreaper above it: the keeper,
 * never past it. So the keeper can end the whole tree, which kill(-pgid)
 * cannot: told to (SPAWN_KEEPER_SIGNAL, from spawn_kill or, as its
 * parent-death signal, from the kernel when the agent dies), it kills the
 * command's group, then every child it has, until it has none. Otherwise
 * it exits as the command did, as soon as the command exits: background
 * jobs live on, as under bash -c. Under --run-as the user can neither
 * signal nor trace it (root, undumpable); cgroups or capabilities the
 * container lacks are not needed.
 */
#include "spawn_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* How often a keeper ending its tree looks again for children that came
 * back to it without a SIGCHLD (orphans of processes that were not its
 * own children). */
#define KEEPER_TICK_NS (10 * 1000 * 1000)

static void
report(int errfd, int kind, int value)
{
	struct spawn_msg msg = { kind, value };

	if (write(errfd, &msg, sizeof msg) < 0)
		_exit(127);
}

/* Put the pass_fds at 3, 4, ... First each of them, errfd and the
 * descriptor to execute move above that range, so that no dup2 into the
 * range can close one still to be used. */
static int
move_pass_fds(const struct spawn_options *o, int *errfd, int *exec_fd)
{
	int high[SPAWN_MAX_PASS_FDS], top = 3 + (int)o->npass_fds, moved;

	if (o->npass_fds == 0)
		return 0;
	if (o->npass_fds > SPAWN_MAX_PASS_FDS) {
		errno = EINVAL;
		return -1;
	}
	if ((moved = fcntl(*errfd, F_DUPFD_CLOEXEC, top)) < 0)
		return -1;
	*errfd = moved;
	if (o->use_exec_fd &&
	    (*exec_fd = fcntl(*exec_fd, F_DUPFD_CLOEXEC, top)) < 0)
		return -1;
	for (size_t i = 0; i < o->npass_fds; i++)
		if ((high[i] = fcntl(o->pass_fds[i], F_DUPFD_CLOEXEC, top)) < 0)
			return -1;
	for (size_t i = 0; i < o->npass_fds; i++)
		if (dup2(high[i], 3 + (int)i) < 0)
			return -1;
	return 0;
}

/* A confined program loses CAP_SYS_PTRACE: with it, root in the sandbox
 * could read the agent's memory through /proc/1/mem, undumpable or not.
 * Out of the bounding set too where we may (CAP_SETPCAP), so that no exec
 * gives it back; where we may not, no_new_privs does that. */
static int
drop_ptrace_cap(void)
{
	struct __user_cap_header_struct head = {
		_LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
	unsigned bit = 1u << (CAP_SYS_PTRACE % 32);
	int word = CAP_SYS_PTRACE / 32;

	if (prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) < 0 &&
	    errno != EPERM)
		return -1;
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, CAP_SYS_PTRACE, 0, 0);
	if (syscall(SYS_capget, &head, data) < 0)
		return -1;
	data[word].effective &= ~bit;
	data[word].permitted &= ~bit;
	data[word].inheritable &= ~bit;
	return (int)syscall(SYS_capset, &head, data);
}

/* Mark every descriptor from first on close-on-exec (or close it). */
static void
close_from(int first, int keep, int keep2)
{
	if (syscall(SYS_close_range, first, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		for (int fd = first; fd < 1024; fd++)
			if (fd != keep && fd != keep2)
				close(fd);
	}
}

/* The value of PATH in envp, or the default of execvp. */
static const char *
env_path(const char *const *envp)
{
	for (; envp != NULL && *envp != NULL; envp++) {
		const char *e = *envp;

		if (e[0] == 'P' && e[1] == 'A' && e[2] == 'T' && e[3] == 'H' &&
		    e[4] == '=')
			return e + 5;
	}
	return "/usr/local/bin:/usr/bin:/bin";
}

/* execvp's search, with no allocation: each directory of PATH in turn;
 * returns (with errno) only if none held the program. EACCES wins over
 * ENOENT, as in execvp, so that a program found but not executable says
 * so. */
static void
exec_search(const char *name, const char *const *argv,
    const char *const *envp)
{
	char buf[4096];
	size_t nlen = 0;
	int denied = 0;

	while (name[nlen] != '\0')
		nlen++;
	for (const char *dir = env_path(envp); nlen > 0 && nlen < sizeof buf - 2;) {
		size_t dlen = 0;

		while (dir[dlen] != '\0' && dir[dlen] != ':')
			dlen++;
		if (dlen + nlen + 2 <= sizeof buf) {
			size_t o = 0;

			for (size_t i = 0; i < dlen; i++)
				buf[o++] = dir[i];
			if (o == 0)
				buf[o++] = '.';	/* an empty entry: here */
			buf[o++] = '/';
			for (size_t i = 0; i <= nlen; i++)
				buf[o++] = name[i];
			execve(buf, (char *const *)argv, (char *const *)envp);
			if (errno == EACCES)
				denied = 1;
			else if (errno != ENOENT && errno != ENOTDIR)
				return;
		}
		if (dir[dlen] == '\0')
			break;
		dir += dlen + 1;
	}
	errno = denied ? EACCES : ENOENT;
}

/* What spawn_child_exec does before it executes: its group (or session),
 * stdio, signals, parent-death signal, the caller's setup, directory, user
 * and seccomp filter.
 * for_exec: also the pass_fds into place, every other descriptor marked
 * close-on-exec, the dispositions back to their defaults and the filter
 * loaded; a child that runs on without exec (the shell template's
 * command) keeps its own dispositions (bash's) and the filter it already
 * has (loading one costs some 0.3 ms here, and as much again to free at
 * exit; a fork shares it). 0, or -1 with errno and *kind what to
 * report. */
static int
confine(const struct spawn_options *o, const int fds[3], int *errfd,
    int *exec_fd, int own_group, int for_exec, int *kind)
{
	sigset_t none;

	*kind = SPAWN_MSG_ERRNO;
	/* A session leader is its group's leader too. */
	if (o->ctty) {
		if (setsid() < 0)
			return -1;
	} else if (own_group) {
		setpgid(0, 0);
	}
	for (int i = 0; i < 3; i++) {
		if (fds[i] >= 0 && fds[i] != i && dup2(fds[i], i) < 0)
			return -1;
	}
	if (o->ctty && ioctl(0, TIOCSCTTY, 0) < 0)
		return -1;
	if (for_exec && move_pass_fds(o, errfd, exec_fd) < 0)
		return -1;
	/* Our dispositions (SIGPIPE ignored, blocked signals) must not leak
	 * into commands: "yes | head" needs SIGPIPE to end yes. */
	for (int sig = 1; for_exec && sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	*kind = SPAWN_MSG_SETUP;
	if (o->setup != NULL && o->setup(o->setup_arg) < 0)
		return -1;
	*kind = SPAWN_MSG_CHDIR;
	if (o->cwd != NULL && !o->cwd_as_user && chdir(o->cwd) < 0)
		return -1;
	*kind = SPAWN_MSG_ERRNO;
	if (o->seccomp != NULL && drop_ptrace_cap() < 0)
		return -1;
	if (o->set_ids) {
		if (setgroups(0, NULL) < 0 || setgid(o->gid) < 0 ||
		    setuid(o->uid) < 0)
			return -1;
		/* setuid leaves us as dumpable as fs.suid_dumpable says: at 1
		 * the user could trace this child while it still holds our
		 * descriptors (the shell template's command keeps them until
		 * it has told its pid). An exec, or the template once it has
		 * closed them, makes it the user's again. */
		if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
			return -1;
	}
	*kind = SPAWN_MSG_CHDIR;
	if (o->cwd != NULL && o->cwd_as_user && chdir(o->cwd) < 0)
		return -1;
	*kind = SPAWN_MSG_ERRNO;
	if (for_exec)
		close_from(3 + (int)o->npass_fds, *errfd,
		    o->use_exec_fd ? *exec_fd : -1);
	if (for_exec && o->seccomp != NULL) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0,
		    o->seccomp) < 0)
			return -1;
	}
	return 0;
}

int
spawn_child_confine(const struct spawn_options *o, const int fds[3],
    int errfd)
{
	int kind;

	if (confine(o, fds, &errfd, NULL, 1, 0, &kind) < 0) {
		report(errfd, kind, errno);
		return -1;
	}
	return 0;
}

void
spawn_child_exec(const struct spawn_options *o, const int fds[3], int errfd,
    int own_group)
{
	const char *const *envp = o->envp != NULL ? o->envp :
	    (const char *const *)environ;
	int exec_fd = o->exec_fd, kind;

	if (confine(o, fds, &errfd, &exec_fd, own_group, 1, &kind) < 0)
		goto fail;
	if (o->use_exec_fd) {
		syscall(SYS_execveat, exec_fd, "", o->argv, envp,
		    AT_EMPTY_PATH);
	} else if (o->search_path) {
		const char *c = o->argv[0];

		while (*c != '\0' && *c != '/')
			c++;
		if (*c == '/')
			execve(o->argv[0], (char *const *)o->argv,
			    (char *const *)envp);
		else
			exec_search(o->argv[0], o->argv, envp);
	} else {
		execve(o->argv[0], (char *const *)o->argv, (char *const *)envp);
	}
fail:
	report(errfd, kind, errno);
	_exit(127);
}

/* The parent pid in /proc/<name>/stat: "pid (comm) state ppid ...", where
 * comm may hold anything, ')' and spaces included; -1 if unreadable. */
static pid_t
parent_of(int proc, const char *name)
{
	char path[64], stat[512], *p = NULL;
	size_t len = 0;
	ssize_t n;
	pid_t ppid = 0;
	int fd;

	while (name[len] != '\0' && len < sizeof path - 6) {
		path[len] = name[len];
		len++;
	}
	for (const char *s = "/stat"; *s != '\0'; s++)
		path[len++] = *s;
	path[len] = '\0';
	if ((fd = openat(proc, path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, stat, sizeof stat);
	close(fd);
	for (ssize_t i = 0; i < n; i++)
		if (stat[i] == ')')
			p = stat + i;
	/* ") S 123 ": past the state, the parent. */
	if (p == NULL || stat + n - p < 5)
		return -1;
	for (p += 4; p < stat + n && *p >= '0' && *p <= '9'; p++)
		ppid = ppid * 10 + (*p - '0');
	return ppid;
}

/* SIGKILL every child of ours. -1 if /proc cannot tell them. */
static int
kill_children(void)
{
	char buf[4096];
	pid_t self = getpid();
	long n;
	int proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (proc < 0)
		return -1;
	while ((n = syscall(SYS_getdents64, proc, buf, sizeof buf)) > 0) {
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(buf + off);
			pid_t pid = 0;
			const char *c;

			off += d->d_reclen;
			for (c = d->d_name; *c >= '0' && *c <= '9'; c++)
				pid = pid * 10 + (*c - '0');
			if (*c == '\0' && pid > 0 &&
			    parent_of(proc, d->d_name) == self)
				kill(pid, SIGKILL);
		}
	}
	close(proc);
	return n < 0 ? -1 : 0;
}

/* Kill the command's group and every child we have until we have none;
 * status gets the command's, when we reap it. */
static void
kill_tree(pid_t cmd, int *status)
{
	struct timespec tick = { 0, KEEPER_TICK_NS };
	sigset_t chld;
	pid_t pid;
	int st;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	for (;;) {
		kill(-cmd, SIGKILL);
		if (kill_children() < 0) {
			/* No /proc: what left the group is out of reach;
			 * the command itself was in it. */
			if (waitpid(cmd, &st, 0) == cmd)
				*status = st;
			return;
		}
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
			if (pid == cmd)
				*status = st;
		if (pid < 0 && errno == ECHILD)
			return;
		sigtimedwait(&chld, NULL, &tick);
	}
}

/* The command's status to the runner, which may have gone (no exit
 * on failure here: the keeper still has to end as the command did). */
static void
tell_status(int errfd, int status)
{
	struct spawn_msg msg = { SPAWN_MSG_STATUS, status };
	ssize_t n;

	do
		n = write(errfd, &msg, sizeof msg);
	while (n < 0 && errno == EINTR);
}

/* End as the command ended, so that our parent reads its status. */
static void __attribute__((noreturn))
exit_as(int status)
{
	sigset_t set;
	int sig;

	if (WIFEXITED(status))
		_exit(WEXITSTATUS(status));
	sig = WTERMSIG(status);
	signal(sig, SIG_DFL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	kill(getpid(), sig);
	_exit(128 + sig);
}

void
spawn_keeper_begin(void)
{
	setpgid(0, 0);
	/* No core file of the agent's memory, no tracing by the user. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	prctl(PR_SET_PDEATHSIG, SPAWN_KEEPER_SIGNAL, 0, 0, 0);
}

void
spawn_keeper_run(pid_t cmd, int errfd)
{
	sigset_t wanted, pending;
	int status = 0, st;
	pid_t pid;

	/* Also from here, so that a kill of the group right after start
	 * cannot race the command's own setpgid. */
	setpgid(cmd, cmd);
	report(errfd, SPAWN_MSG_PID, cmd);
	/* Hold nothing of the agent's: a socket it closes must close, and
	 * the command's pipes must end when the command's processes do.
	 * Only the report pipe stays, for the command's status. */
	if ((errfd > 0 && syscall(SYS_close_range, 0, errfd - 1, 0) < 0) ||
	    syscall(SYS_close_range, errfd + 1, ~0U, 0) < 0)
		for (int fd = 0; fd < 1024; fd++)
			if (fd != errfd)
				close(fd);

	/* Every signal stays blocked (spawn_start forked so); these two
	 * are taken here. */
	sigemptyset(&wanted);
	sigaddset(&wanted, SIGCHLD);
	sigaddset(&wanted, SPAWN_KEEPER_SIGNAL);
	for (;;) {
		int sig = sigwaitinfo(&wanted, NULL);

		if (sig == SPAWN_KEEPER_SIGNAL) {
			kill_tree(cmd, &status);
			tell_status(errfd, status);
			exit_as(status);
		}
		if (sig != SIGCHLD)
			continue;
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
			if (pid != cmd)
				continue;
			/* spawn_kill signals us before the group: a kill
			 * that took the command still ends the tree. */
			sigpending(&pending);
			if (sigismember(&pending, SPAWN_KEEPER_SIGNAL))
				kill_tree(cmd, &st);
			tell_status(errfd, st);
			exit_as(st);
		}
	}
}

void
spawn_child_keeper(const struct spawn_options *o, const int fds[3], int errfd)
{
	pid_t cmd;

	spawn_keeper_begin();
	/* vfork: the command borrows our memory until it executes, where a
	 * fork would copy the agent's page tables once more (about 300 us a
	 * command here). It only makes system calls and writes its own
	 * frames until then, and we wait. */
	cmd = vfork();
	if (cmd == 0)
		spawn_child_exec(o, fds, errfd, 1);
	if (cmd < 0) {
		report(errfd, SPAWN_MSG_ERRNO, errno);
		_exit(127);
	}
	spawn_keeper_run(cmd, errfd);
}
