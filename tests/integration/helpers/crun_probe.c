/*
 * What a hostile process in a sandbox tries, as the sandbox's first
 * process before the agent (test_hostile_crun.py makes it a type's
 * entrypoint): root of the container with the container's capabilities,
 * seccomp profile and no-new-privileges, but not the agent's own filter
 * for commands. It writes one line per attempt to /workspace/probe.out,
 * "name errno" (0: it worked), starts a watcher that tries to trace the
 * agent once it serves as PID 1, then executes the agent with its
 * arguments.
 *
 *   crun_probe AGENT [ARGS...]     probe, then exec AGENT ARGS
 *   crun_probe --hog MIB           allocate and touch MIB MiB, then exit 0
 *   crun_probe --connect IP PORT AGENT [ARGS...]
 *                                  connect to IP:PORT over TCP as soon as
 *                                  there is a route, write "connect ERRNO"
 *                                  (0: connected) to /workspace/connect.out,
 *                                  then exec AGENT ARGS
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/keyctl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

static FILE *out;

static void
report(const char *name, int rc)
{
	fprintf(out, "%s %d\n", name, rc < 0 ? errno : 0);
	fflush(out);
}

/* A write of one byte to path; -1 with errno where it fails. */
static int
write_to(const char *path, const char *what)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, what, strlen(what));
	close(fd);
	return n < 0 ? -1 : 0;
}

/* The first cgroup controller directory under /sys/fs/cgroup (v1), or
 * the hierarchy itself (v2). */
static void
cgroup_dir(char *buf, size_t size)
{
	static const char *const v1[] = { "memory", "pids", "cpu", NULL };

	for (int i = 0; v1[i] != NULL; i++) {
		snprintf(buf, size, "/sys/fs/cgroup/%s", v1[i]);
		if (access(buf, F_OK) == 0)
			return;
	}
	snprintf(buf, size, "/sys/fs/cgroup");
}

static void
probe(void)
{
	char cg[256], path[512];
	long io_params[16] = { 0 };	/* struct io_uring_params: 120 bytes */
	pid_t pid;
	int st;

	mkdir("/tmp/m", 0700);
	report("mount_tmpfs", mount("none", "/tmp/m", "tmpfs", 0, NULL));
	report("mount_cgroup", mount("cgroup", "/tmp/m", "cgroup", 0,
	    "memory"));
	report("sysrq_trigger", write_to("/proc/sysrq-trigger", "h"));
	report("proc_sys", write_to("/proc/sys/kernel/hostname", "x"));
	cgroup_dir(cg, sizeof cg);
	snprintf(path, sizeof path, "%s/escape", cg);
	report("cgroup_mkdir", mkdir(path, 0755));
	snprintf(path, sizeof path, "%s/cgroup.procs", cg);
	report("cgroup_procs", write_to(path, "1"));
	snprintf(path, sizeof path, "%s/release_agent", cg);
	report("release_agent", write_to(path, "/tmp/x"));
	report("mknod_block", mknod("/tmp/sda", S_IFBLK | 0600,
	    makedev(8, 0)));
	report("mknod_mem", mknod("/tmp/mem", S_IFCHR | 0600, makedev(1, 1)));
	/* Made or not, the device cgroup must refuse to open it. */
	report("open_mem", open("/tmp/mem", O_RDONLY | O_CLOEXEC) < 0 ? -1 : 0);
	report("keyctl", (int)syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING,
	    "probe"));
	report("add_key", (int)syscall(SYS_add_key, "user", "k", "v", 1,
	    KEY_SPEC_PROCESS_KEYRING));
	/* io_uring's operations run where seccomp does not look. */
	report("io_uring_setup", (int)syscall(SYS_io_uring_setup, 4,
	    io_params));
	report("unshare_user", unshare(CLONE_NEWUSER));
	report("unshare_mount", unshare(CLONE_NEWNS));
	pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL,
	    NULL, 0);
	if (pid == 0)
		_exit(0);
	if (pid > 0)
		waitpid(pid, &st, 0);
	report("clone_newuser", pid < 0 ? -1 : 0);
	report("setns", syscall(SYS_setns, open("/proc/self/ns/net",
	    O_RDONLY), 0) < 0 ? -1 : 0);
	report("reboot", (int)syscall(SYS_reboot, 0xfee1dead, 672274793,
	    0x4321fedc, NULL));
}

/* Once the agent serves (its socket is there: it made itself undumpable
 * before): attach to it, read its environment (its token is there) and
 * its memory, as a process of the sandbox started before it could. */
static void
watch_agent(void)
{
	int fd;

	if (fork() != 0)
		return;
	for (int i = 0; i < 1000 &&
	    access("/run/sandbox-agent/agent.sock", F_OK) < 0; i++)
		usleep(10000);
	report("ptrace_pid1", (int)ptrace(PTRACE_ATTACH, 1, NULL, NULL));
	fd = open("/proc/1/environ", O_RDONLY | O_CLOEXEC);
	report("environ_pid1", fd < 0 ? -1 : 0);
	fd = open("/proc/1/mem", O_RDONLY | O_CLOEXEC);
	report("mem_pid1", fd < 0 ? -1 : 0);
	fprintf(out, "done 0\n");
	fclose(out);
	_exit(0);
}

static int
hog(long mib)
{
	for (long i = 0; i < mib; i++) {
		char *p = malloc(1 << 20);

		if (p == NULL)
			return 1;
		memset(p, 1, 1 << 20);
	}
	return 0;
}

/* The sandbox's first program reaching out before anything else can:
 * the network may come up after it started (no route yet: tried again
 * each millisecond, for 5 s), the policy must already hold then. */
static void
connect_early(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct timeval tv = { 3, 0 };
	FILE *f;
	int e = EINVAL;

	a.sin_port = htons((unsigned short)port);
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
		return;
	for (int i = 0; i < 5000; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		/* Bounds connect's wait: a drop shows as EINPROGRESS. */
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
		e = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 ? 0 :
		    errno;
		close(fd);
		if (e != ENETUNREACH)
			break;
		usleep(1000);
	}
	if ((f = fopen("/workspace/connect.out", "we")) != NULL) {
		fprintf(f, "connect %d\n", e);
		fclose(f);
	}
}

int
main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--hog") == 0)
		return hog(atol(argv[2]));
	if (argc >= 5 && strcmp(argv[1], "--connect") == 0) {
		connect_early(argv[2], atoi(argv[3]));
		execv(argv[4], argv + 4);
		return 127;
	}
	if (argc < 2)
		return 2;
	out = fopen("/workspace/probe.out", "we");
	if (out == NULL)
		return 3;
	probe();
	watch_agent();
	fclose(out);
	execv(argv[1], argv + 1);
	return 127;
}
