/*
 * Whether a program a keeper started ahead of need is still as it was
 * started (spawn_untouched). Another process of the same user may stop
 * it (SIGSTOP, SIGTSTP), lower its resource limits (prlimit), renice it,
 * pin it to fewer CPUs, make it SCHED_IDLE or give it a custom time
 * slice, lower its I/O priority: the kernel only compares user ids.
 * Tracing needs more (CAP_SYS_PTRACE for an undumpable program, and
 * commands' seccomp filter denies ptrace), but is checked all the same.
 * Root without CAP_SYS_RESOURCE and CAP_SYS_NICE, as the agent runs in
 * its container, could not undo a lowered hard limit or nice value; so
 * nothing is reset: a program found changed is not used.
 *
 * "As started" is what a child forked now by the calling thread would
 * inherit: our limits, our thread's scheduling attributes, CPUs and I/O
 * priority, compared as the kernel reports them for both.
 *
 * The program is looked at by pid, and a pid can be reused once its
 * process is reaped (by the keeper, which we do not see). So a pidfd is
 * opened first; /proc/PID/status then names our keeper as the parent, so
 * that what holds the pid is the program (the keeper forks nothing else,
 * its other children would be orphans of the program's, which a program
 * waiting idle has none of, and a keeper that exited has no children,
 * its pid held until we reap it); and after every look the pidfd says
 * the process still runs: it held the pid from the first look to the
 * last, every look was of the program.
 */
#include "spawn_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/ioprio.h>
#include <poll.h>
#include <sched.h>
/* For struct sched_attr, which glibc 2.36 lacks; its struct sched_param
 * would clash with libc's. */
#define sched_param linux_sched_param
#include <linux/sched/types.h>
#undef sched_param
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/syscall.h>
#include <unistd.h>

/* /proc/PID/limits is 17 lines of at most 80 bytes; status's first lines,
 * up to TracerPid, well under this (Name is at most 64 bytes escaped). */
#define PROC_TEXT_MAX 4096

struct inherited {
	char limits[PROC_TEXT_MAX];
	ssize_t nlimits;
	struct sched_attr sched;
	cpu_set_t cpus;
	int ioprio;
};

/* Up to size - 1 bytes of a /proc file, NUL-terminated; -1 on failure. */
static ssize_t
proc_read(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0;
	ssize_t n = 0;

	if (fd < 0)
		return -1;
	while (len < size - 1 &&
	    ((n = read(fd, buf + len, size - 1 - len)) > 0 ||
	    (n < 0 && errno == EINTR)))
		if (n > 0)
			len += (size_t)n;
	close(fd);
	if (n < 0)
		return -1;
	buf[len] = '\0';
	return (ssize_t)len;
}

/* pid 0: ours (the calling thread's, where the kernel keeps it per thread). */
static int
inherited_get(pid_t pid, struct inherited *in)
{
	char path[64];

	if (pid == 0)
		snprintf(path, sizeof path, "/proc/self/limits");
	else
		snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
	if ((in->nlimits = proc_read(path, in->limits, sizeof in->limits)) < 0)
		return -1;
	memset(&in->sched, 0, sizeof in->sched);
	if (syscall(SYS_sched_getattr, pid, &in->sched, sizeof in->sched,
	    0) < 0)
		return -1;
	if (sched_getaffinity(pid, sizeof in->cpus, &in->cpus) < 0)
		return -1;
	in->ioprio = (int)syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, pid);
	return in->ioprio < 0 ? -1 : 0;
}

/* The value after "\nNAME:\t" in status text, or NULL. */
static const char *
status_field(const char *status, const char *name)
{
	size_t len = strlen(name);

	for (const char *p = status; (p = strchr(p, '\n')) != NULL; ) {
		p++;
		if (strncmp(p, name, len) == 0 && p[len] == ':' &&
		    p[len + 1] == '\t')
			return p + len + 2;
	}
	return NULL;
}

/* Runs (not stopped, traced or dead) as the child of keeper. */
static int
runs_under(pid_t pid, pid_t keeper)
{
	char path[64], status[PROC_TEXT_MAX];
	const char *state, *ppid, *tracer;

	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	if (proc_read(path, status, sizeof status) < 0 ||
	    (state = status_field(status, "State")) == NULL ||
	    (ppid = status_field(status, "PPid")) == NULL ||
	    (tracer = status_field(status, "TracerPid")) == NULL)
		return 0;
	return strchr("TtZXx", *state) == NULL &&
	    strtol(ppid, NULL, 10) == keeper && strtol(tracer, NULL, 10) == 0;
}

int
spawn_state_untouched(pid_t pid, pid_t keeper)
{
	struct inherited ours, its;
	struct pollfd pfd = { .events = POLLIN };
	int same = 0;

	if ((pfd.fd = pidfd_open(pid, 0)) < 0)
		return 0;
	if (runs_under(pid, keeper) && inherited_get(0, &ours) == 0 &&
	    inherited_get(pid, &its) == 0) {
		same = ours.nlimits == its.nlimits &&
		    memcmp(ours.limits, its.limits, (size_t)ours.nlimits) == 0 &&
		    memcmp(&ours.sched, &its.sched, sizeof ours.sched) == 0 &&
		    CPU_EQUAL(&ours.cpus, &its.cpus) && ours.ioprio == its.ioprio;
		/* A pidfd is readable once its process has exited. */
		same = same && poll(&pfd, 1, 0) == 0;
	}
	close(pfd.fd);
	return same;
}
