/*
 * The shell template's builtin: a shared object loaded into one bash that
 * the agent starts as root, once (agent/shell_template.c), and in which
 * that bash serves until its socket ends. Built against Debian's
 * bash-builtins headers (bash 5.2) and carried inside the agent.
 *
 * The agent's bash runs `bash -c 'enable -f SO shell_template'`: once bash
 * has read its environment, set its variables and signals and parsed
 * that line, and while `enable` runs our load function (before it even
 * registers the builtin), that function takes over. It loads the seccomp
 * filter the agent sends (once: every fork shares it) and keeps
 * READY_PAIRS pairs ready, each a keeper and its command:
 *
 * - the keeper shares the template's memory (clone with CLONE_VM: no page
 *   table to copy) and is the agent's child (CLONE_PARENT), so spawn.c
 *   reaps and signals it as any keeper; it runs spawn_child.c's keeper;
 * - its command is a fork of the keeper, so of this bash (a copy of its
 *   memory, no exec), that waits on the agent's socket for a request.
 *
 * A request goes to one waiting command (the kernel wakes one): its text
 * and descriptors (shell_template_wire.h). The command hands the report
 * pipe to its keeper, which tells the template to make another pair and
 * tells the agent its pid and the command's. The command jumps back to
 * our load function's frame on bash's own stack, confines itself as
 * spawn_child.c confines any command (group, stdio, user), sets back what
 * a bash started now would have fresh ($$, PPID, the user's ids and
 * defaults, SECONDS, RANDOM, BASH_EXECUTION_STRING, the state of a running
 * `enable`), and runs the text as bash -c does: parse_and_execute(text,
 * "-c") at the top level, then exit_shell. Errors, `exit`, `set -e`, traps
 * and the exec of a last simple command are bash's own code. The fork,
 * the keeper and the template's turn are done before the request comes.
 * A request of envd's (SHELL_TEMPLATE_START) makes the command a bash
 * started anew instead (shell_template_start.c). Either tells the agent
 * that it runs once it has set itself up, before anything of the user's.
 *
 * A waiting pair is root and undumpable, with the template's limits,
 * priority and CPUs, which are the agent's: no process of the user may
 * touch it. It holds nothing of a request before it takes one.
 *
 * The template's loop makes only system calls (no malloc, no stdio, no
 * lock), so a fork taken by a keeper at any moment finds glibc's state
 * whole; the keepers use glibc's wrappers, which in a process with one
 * thread touch nothing shared but errno, on which no choice of theirs
 * depends. Every signal stays blocked in the template, the keepers and
 * the waiting commands; a command that takes a request gets the mask
 * bash had.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <linux/filter.h>
#include <linux/seccomp.h>

#include "builtins.h"
#include "shell.h"
#include "common.h"
#include "execute_cmd.h"
#include "jobs.h"
#include "variables.h"
#include "version.h"

#include "fdio.h"
#include "spawn_internal.h"
#include "shell_template_bash.h"

#define PUBLIC __attribute__((visibility("default")))

/* Not in the headers. */
extern time_t shell_start_time;
extern struct timeval shellstart;
extern char **shell_environment;

/* Pairs kept waiting for a request. */
#define READY_PAIRS 2
/* A keeper's stack: it runs spawn_child.c's keeper (a 4 KiB buffer and a
 * few frames deep). Below it a guard page. */
#define SLOT_STACK (32 * 1024)
/* Keepers alive at once, at most; beyond, requests wait in the socket. */
#define SLOT_MAX 4096
/* How long the template waits before it tries again to make a pair
 * (out of processes or memory), and before it counts its pairs again
 * when none told it anything (a pair killed, as root may, tells nothing). */
#define RETRY_MS 20
#define RECOUNT_MS 1000

/* What a keeper tells the template, one byte on its pipe: that it
 * should count its pairs again, or, TOLD_END, that the agent's end of the
 * socket closed. */
enum told {
	TOLD_TAKEN = 't',
	TOLD_LOST = 'l',
	TOLD_END = 'e',
};

/* A pair. Free when busy is 0: the kernel clears it when the keeper exits
 * (CLONE_CHILD_CLEARTID). The keeper's stack is a mapping of its own,
 * which forks leave out (MADV_DONTFORK): a command has no use for it, and
 * a fork would make the keeper copy each page of it it writes after. */
struct slot {
	volatile pid_t busy;
	volatile int taken;	/* its command took a request */
	pid_t keeper;
	char *stack;		/* its top */
	int kc[2];		/* the keeper's end and the command's */
	/* Where the command starts (glibc's clone writes there first, so
	 * each keeper has its own), before it jumps to the main stack. */
	char entry[4096] __attribute__((aligned(16)));
};

static struct {
	struct spawn_options o;
	struct sock_fprog prog;
	struct sock_filter filter[SHELL_TEMPLATE_FILTER_MAX];
	/* The --run-as user's entry, as get_current_user_info would fill
	 * current_user (looked up once, as root). */
	char *user_name, *user_shell, *user_home;
	sigset_t mask;			/* bash's, for the commands */
	struct slot *slots[SLOT_MAX];
	size_t nslots;
	int told[2];			/* the keepers' pipe to the template */
	sigjmp_buf command;		/* where a command goes on */
	struct slot *running;		/* in a command: its pair */
	/* In a command: its request. */
	struct shell_template_request req;
	char text[SHELL_TEMPLATE_TEXT_MAX];
	int fd[SHELL_TEMPLATE_FDS + 1];
	int nfd;
} tpl;

/* A free slot, made if none is (NULL at SLOT_MAX or without memory). */
static struct slot *
slot_get(void)
{
	size_t guard = (size_t)getpagesize();
	struct slot *s;
	char *stack;

	for (size_t i = 0; i < tpl.nslots; i++)
		if (tpl.slots[i]->busy == 0)
			return tpl.slots[i];
	if (tpl.nslots == SLOT_MAX)
		return NULL;
	s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED)
		return NULL;
	stack = mmap(NULL, guard + SLOT_STACK, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED || mprotect(stack, guard, PROT_NONE) < 0 ||
	    madvise(stack, guard + SLOT_STACK, MADV_DONTFORK) < 0) {
		if (stack != MAP_FAILED)
			munmap(stack, guard + SLOT_STACK);
		munmap(s, sizeof *s);
		return NULL;
	}
	s->stack = stack + guard + SLOT_STACK;
	tpl.slots[tpl.nslots] = s;
	return tpl.slots[tpl.nslots++];
}

void
shell_template_tell(int fd, int kind, int value)
{
	struct spawn_msg msg = { kind, value };

	if (write(fd, &msg, sizeof msg) != (ssize_t)sizeof msg)
		_exit(127);
}

/* Nothing to do if the template has gone (killed): its pairs go on. */
static void
tell_template(enum told what)
{
	char c = (char)what;
	ssize_t n = write(tpl.told[1], &c, 1);

	(void)n;
}

/* Close every descriptor but a and b (a < b). */
static void
keep_only(int a, int b)
{
	if (a > 0)
		syscall(SYS_close_range, 0, a - 1, 0);
	syscall(SYS_close_range, a + 1, b - 1, 0);
	syscall(SYS_close_range, b + 1, ~0U, 0);
}

/* A command, forked by its keeper: on, in the load function's frame on
 * the main stack (its own copy of it). */
static int
command_entry(void *arg)
{
	tpl.running = arg;
	siglongjmp(tpl.command, 1);
}

/* The keeper, on its slot's stack in our memory: its command, then the
 * report pipe from it when it takes a request. */
static int
keeper_main(void *arg)
{
	struct slot *s = arg;
	char cbuf[CMSG_SPACE(sizeof(int))], c = TOLD_LOST;
	struct iovec iov = { &c, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
	    .msg_control = cbuf, .msg_controllen = sizeof cbuf };
	struct cmsghdr *cm;
	int report = -1;
	pid_t cmd;

	spawn_keeper_begin();
	s->keeper = getpid();
	/* A fork, but on another stack: ours is not in the copy. glibc
	 * keeps the pid of the thread that made its state; since 2.34 it
	 * asks the kernel when it signals itself (raise, abort). */
	cmd = clone(command_entry, s->entry + sizeof s->entry, SIGCHLD, s);
	if (cmd < 0) {
		tell_template(TOLD_LOST);
		_exit(127);
	}
	if (s->kc[0] < tpl.told[1])
		keep_only(s->kc[0], tpl.told[1]);
	else
		keep_only(tpl.told[1], s->kc[0]);
	if (recvmsg(s->kc[0], &mh, MSG_CMSG_CLOEXEC) == 1 &&
	    (cm = CMSG_FIRSTHDR(&mh)) != NULL &&
	    cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
	    cm->cmsg_len == CMSG_LEN(sizeof report))
		memcpy(&report, CMSG_DATA(cm), sizeof report);
	if (report < 0) {
		/* Its command ended or lost the agent while it waited. */
		tell_template(c == TOLD_END ? TOLD_END : TOLD_LOST);
		kill(cmd, SIGKILL);
		_exit(0);
	}
	s->taken = 1;
	tell_template(TOLD_TAKEN);
	shell_template_tell(report, SPAWN_MSG_KEEPER, (int)getpid());
	spawn_keeper_run(cmd, report);
}

/* A pair more, waiting. */
static int
pair_start(void)
{
	struct slot *s = slot_get();
	int e;

	if (s == NULL)
		return -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, s->kc) < 0)
		return -1;
	s->busy = 1;
	s->taken = 0;
	if (clone(keeper_main, s->stack, CLONE_VM | CLONE_PARENT |
	    CLONE_CHILD_CLEARTID | SIGCHLD, s, NULL, NULL, &s->busy) < 0) {
		e = errno;
		s->busy = 0;
		errno = e;
	}
	close(s->kc[0]);
	close(s->kc[1]);
	return s->busy != 0 ? 0 : -1;
}

static int
pairs_waiting(void)
{
	int n = 0;

	for (size_t i = 0; i < tpl.nslots; i++)
		n += tpl.slots[i]->busy != 0 && !tpl.slots[i]->taken;
	return n;
}

/* READY_PAIRS pairs waiting, each made again once taken or lost, until
 * the agent's end of the socket closes. */
static void __attribute__((noreturn))
serve(void)
{
	for (;;) {
		struct pollfd p = { tpl.told[0], POLLIN, 0 };
		int waiting = pairs_waiting();
		char told[64];
		ssize_t n;

		while (waiting < READY_PAIRS && pair_start() == 0)
			waiting++;
		if (poll(&p, 1, waiting < READY_PAIRS ? RETRY_MS :
		    RECOUNT_MS) <= 0)
			continue;
		if ((n = read(tpl.told[0], told, sizeof told)) <= 0)
			_exit(1);
		if (memchr(told, TOLD_END, (size_t)n) != NULL)
			_exit(0);
	}
}

/* In a command: a request received (n bytes), its fds kept; -1 if it is
 * not one. */
static int
request_check(ssize_t n, struct msghdr *mh)
{
	struct cmsghdr *c;

	tpl.nfd = 0;
	for (c = CMSG_FIRSTHDR(mh); c != NULL; c = CMSG_NXTHDR(mh, c)) {
		size_t k;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof fd, sizeof fd);
			if (tpl.nfd < SHELL_TEMPLATE_FDS + 1)
				tpl.fd[tpl.nfd++] = fd;
			else
				close(fd);
		}
	}
	if (mh->msg_flags & (MSG_TRUNC | MSG_CTRUNC) ||
	    n < (ssize_t)sizeof tpl.req || tpl.req.magic != SHELL_TEMPLATE_MAGIC ||
	    tpl.nfd != SHELL_TEMPLATE_FDS + (tpl.req.in_memfd != 0))
		return -1;
	if (!tpl.req.in_memfd && (tpl.req.len > SHELL_TEMPLATE_TEXT_MAX ||
	    (size_t)n != sizeof tpl.req + tpl.req.len))
		return -1;
	return tpl.req.kind == SHELL_TEMPLATE_RUN ||
	    tpl.req.kind == SHELL_TEMPLATE_START ? 0 : -1;
}

/* In a waiting command: the next request, its report pipe handed to the
 * keeper (over kc). The descriptor that reports, or -1 (no request: the
 * socket ended, or what came was not one). */
static int
request_take(int kc)
{
	char cbuf[CMSG_SPACE(sizeof(int) * (SHELL_TEMPLATE_FDS + 1))];
	char told = TOLD_END;
	struct iovec iov[2] = { { &tpl.req, sizeof tpl.req },
	    { tpl.text, sizeof tpl.text } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2,
	    .msg_control = cbuf, .msg_controllen = sizeof cbuf };
	struct iovec kiov = { &told, 1 };
	ssize_t n;

	do
		n = recvmsg(SHELL_TEMPLATE_FD, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		send(kc, &told, 1, MSG_NOSIGNAL);
	if (n <= 0)
		return -1;
	if (request_check(n, &mh) < 0) {
		for (int i = 0; i < tpl.nfd; i++)
			close(tpl.fd[i]);
		return -1;
	}
	told = TOLD_TAKEN;
	if (fdio_send_fds(kc, &kiov, 1, &tpl.fd[3], 1, 0) != 1)
		return -1;
	return tpl.fd[3];
}

/* In a command: its text, in memory of its own (bash frees it). */
static char *
command_text(void)
{
	char *text = xmalloc((size_t)tpl.req.len + 1);
	size_t got = 0;

	if (!tpl.req.in_memfd) {
		memcpy(text, tpl.text, tpl.req.len);
		got = tpl.req.len;
	}
	while (got < tpl.req.len) {
		ssize_t n = pread(tpl.fd[SHELL_TEMPLATE_FDS], text + got,
		    tpl.req.len - got, (off_t)got);

		if (n <= 0)
			break;
		got += (size_t)n;
	}
	text[got] = '\0';
	return got == tpl.req.len ? text : NULL;
}

static void
set_readonly_int(const char *name, long value)
{
	char buf[32];
	SHELL_VAR *v = find_variable(name);

	snprintf(buf, sizeof buf, "%ld", value);
	if (v != NULL)
		VUNSETATTR(v, att_readonly);
	v = bind_variable(name, buf, 0);
	if (v != NULL)
		VSETATTR(v, att_readonly | att_integer);
}

/* What bash sets from its user at start, for the user we became: uidget
 * and uidset's ids, the passwd entry, and HOME, SHELL and PS4 where they
 * did not come from the environment (as root, PS4 is always "+ "). */
static void
user_reset(void)
{
	SHELL_VAR *v;

	current_user.uid = getuid();
	current_user.gid = getgid();
	current_user.euid = geteuid();
	current_user.egid = getegid();
	current_user.user_name = tpl.user_name;
	current_user.shell = tpl.user_shell;
	current_user.home_dir = tpl.user_home;
	set_readonly_int("UID", (long)current_user.uid);
	set_readonly_int("EUID", (long)current_user.euid);
	if ((v = find_variable("HOME")) != NULL && !imported_p(v))
		bind_variable("HOME", current_user.home_dir, 0);
	if ((v = find_variable("SHELL")) != NULL && !imported_p(v))
		bind_variable("SHELL", current_user.shell, 0);
	for (char **e = shell_environment; e != NULL && *e != NULL; e++)
		if (strncmp(*e, "PS4=", 4) == 0)
			bind_variable("PS4", *e + 4, 0);
}

/* What a bash started now would have fresh, and we, a fork of one in
 * the middle of `enable`, have not. */
static void
shell_reset(const char *text)
{
	dollar_dollar_pid = getpid();
	set_ppid();
	shell_pgrp = getpgrp();
	if (tpl.o.set_ids)
		user_reset();
	gettimeofday(&shellstart, NULL);
	shell_start_time = shellstart.tv_sec;
	seedrand();
	seedrand32();
	command_execution_string = savestring(text);
	bind_variable("BASH_EXECUTION_STRING", command_execution_string, 0);
	the_printed_command_except_trap = NULL;
	this_command_name = NULL;
	this_shell_builtin = last_shell_builtin = NULL;
	executing_builtin = executing_command_builtin = 0;
	parse_and_execute_level = indirection_level = 0;
}

/* A command, back in the load function's frame from its keeper's stack:
 * it waits for a request, then runs it. */
static void __attribute__((noreturn))
command_run(void)
{
	struct slot *s = tpl.running;
	int kc = s->kc[1], report, fd[3];
	char *text;

	/* An orphan would run a request with no keeper. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != s->keeper)
		_exit(127);
	close(s->kc[0]);
	close(tpl.told[0]);
	close(tpl.told[1]);
	if ((report = request_take(kc)) < 0)
		_exit(0);
	close(kc);
	if ((text = command_text()) == NULL) {
		shell_template_tell(report, SPAWN_MSG_ERRNO, EIO);
		_exit(127);
	}
	memcpy(fd, tpl.fd, sizeof fd);
	if (tpl.req.kind == SHELL_TEMPLATE_START)
		shell_template_start(&tpl.req, text, &tpl.o, fd, report);
	if (spawn_child_confine(&tpl.o, fd, report) < 0)
		_exit(127);
	shell_template_tell(report, SPAWN_MSG_STARTED, (int)getpid());
	sigprocmask(SIG_SETMASK, &tpl.mask, NULL);
	/* As an exec of bash would leave it: a root one dumpable, one of the
	 * user's not (it changed ids; the plain path runs the user's bash
	 * from an execute-only copy). */
	if (!tpl.o.set_ids)
		prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	if (syscall(SYS_close_range, 3, ~0U, 0) < 0)
		for (int i = 3; i < 1024; i++)
			close(i);
	shell_reset(text);
	parse_and_execute(text, "-c", SEVAL_NOHIST | SEVAL_RESETLINE);
	exit_shell(last_command_exit_value);
}

/* The hello: the commands' user and seccomp program. */
static int
hello(void)
{
	struct shell_template_hello h;
	struct iovec iov[2] = { { &h, sizeof h },
	    { tpl.filter, sizeof tpl.filter } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
	ssize_t n = recvmsg(SHELL_TEMPLATE_FD, &mh, 0);
	struct passwd *pw;

	if (n < (ssize_t)sizeof h || h.magic != SHELL_TEMPLATE_MAGIC ||
	    h.nfilter > SHELL_TEMPLATE_FILTER_MAX ||
	    (size_t)n != sizeof h + h.nfilter * sizeof(struct sock_filter))
		return -1;
	tpl.o.set_ids = h.set_ids != 0;
	tpl.o.uid = h.uid;
	tpl.o.gid = h.gid;
	if (tpl.o.set_ids) {
		pw = getpwuid(h.uid);
		tpl.user_name = savestring(pw != NULL ? pw->pw_name :
		    "I have no name!");
		tpl.user_shell = savestring(pw != NULL && pw->pw_shell[0] ?
		    pw->pw_shell : "/bin/sh");
		tpl.user_home = savestring(pw != NULL ? pw->pw_dir : "/");
		endpwent();
	}
	/* Ours from here, so that the commands share it: no process of ours
	 * needs what it denies. */
	if (h.nfilter > 0) {
		tpl.prog.len = (unsigned short)h.nfilter;
		tpl.prog.filter = tpl.filter;
		tpl.o.seccomp = &tpl.prog;
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0,
		    &tpl.prog) < 0)
			return -1;
	}
	return 0;
}

PUBLIC int shell_template_builtin_load(char *name);

int
shell_template_builtin_load(char *name)
{
	struct shell_template_ready ready = { SHELL_TEMPLATE_MAGIC, 0 };
	sigset_t all;

	(void)name;
	if (strcmp(dist_version, DISTVERSION) != 0) {
		builtin_error("built for bash %s, not %s", DISTVERSION,
		    dist_version);
		return 0;
	}
	if (hello() < 0) {
		builtin_error("no hello from the agent");
		return 0;
	}
	close(SHELL_TEMPLATE_SO_FD);
	/* Root's memory: no process of the user may read it. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	sigprocmask(SIG_SETMASK, NULL, &tpl.mask);
	if (sigsetjmp(tpl.command, 0) != 0)
		command_run();
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	if (pipe2(tpl.told, O_CLOEXEC) < 0)
		_exit(1);
	ready.pid = (int32_t)getpid();
	if (send(SHELL_TEMPLATE_FD, &ready, sizeof ready, MSG_NOSIGNAL) < 0)
		_exit(1);
	serve();
}

static int
shell_template_builtin(WORD_LIST *list)
{
	(void)list;
	return EXECUTION_FAILURE;
}

static char *shell_template_doc[] = { "the agent's shell template", NULL };

PUBLIC struct builtin shell_template_struct = {
	"shell_template", shell_template_builtin, BUILTIN_ENABLED,
	shell_template_doc, "shell_template", 0
};
