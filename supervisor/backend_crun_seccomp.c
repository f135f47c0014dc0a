/*
 * The seccomp profile of a crun sandbox: what Docker's default profile
 * gives a container (moby's profiles/seccomp, 20.10), so that a sandbox is
 * confined alike on either backend. An allow list; anything else fails
 * with EPERM. On top of the list:
 * - clone with a namespace flag, and unshare, setns, mount and the rest of
 *   what CAP_SYS_ADMIN is for, only with that capability; clone3 (whose
 *   flags a filter cannot read) ENOSYS without it, so libc falls back to
 *   clone;
 * - the system calls of other capabilities (reboot, module loading,
 *   acct, clock setting, iopl, vhangup, NUMA policies, syslog, chroot,
 *   open_by_handle_at, bpf, perf_event_open) only with theirs;
 * - personality only for the values Docker lets through (Linux, and
 *   UNAME26 / LINUX32 and their queries);
 * - socket of any family but AF_VSOCK (the host's hypervisor sockets);
 * - io_uring never (ENOSYS), as Docker 25 and later;
 * - keyctl, add_key, request_key, userfaultfd, pivot_root, kexec, swapon
 *   and the like never (not in the list).
 * System calls of the 32-bit x86 and x32 ABIs are filtered alike.
 *
 * libseccomp compiles it once per set of capabilities that matters to
 * it (a profile takes 15-20 ms to compile: too long for every create)
 * into the BPF program crun loads as it is (run.oci.seccomp_bpf_data).
 */
#include "backend_crun.h"

#include <errno.h>
#include <linux/filter.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nettle/base64.h>
#include <seccomp.h>

#include "xmalloc.h"

static const char *const allowed[] = {
	"accept", "accept4", "access", "adjtimex", "alarm", "arch_prctl",
	"bind", "brk", "capget", "capset", "chdir", "chmod", "chown",
	"chown32", "clock_adjtime", "clock_adjtime64", "clock_getres",
	"clock_getres_time64", "clock_gettime", "clock_gettime64",
	"clock_nanosleep", "clock_nanosleep_time64", "close", "close_range",
	"connect", "copy_file_range", "creat", "dup", "dup2", "dup3",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old",
	"epoll_pwait", "epoll_pwait2", "epoll_wait", "epoll_wait_old",
	"eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group",
	"faccessat", "faccessat2", "fadvise64", "fadvise64_64", "fallocate",
	"fanotify_mark", "fchdir", "fchmod", "fchmodat", "fchown", "fchown32",
	"fchownat", "fcntl", "fcntl64", "fdatasync", "fgetxattr", "flistxattr",
	"flock", "fork", "fremovexattr", "fsetxattr", "fstat", "fstat64",
	"fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate",
	"ftruncate64", "futex", "futex_time64", "futex_waitv", "futimesat",
	"get_robust_list", "get_thread_area", "getcpu", "getcwd", "getdents",
	"getdents64", "getegid", "getegid32", "geteuid", "geteuid32", "getgid",
	"getgid32", "getgroups", "getgroups32", "getitimer", "getpeername",
	"getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom",
	"getresgid", "getresgid32", "getresuid", "getresuid32", "getrlimit",
	"getrusage", "getsid", "getsockname", "getsockopt", "gettid",
	"gettimeofday", "getuid", "getuid32", "getxattr", "inotify_add_watch",
	"inotify_init", "inotify_init1", "inotify_rm_watch", "io_cancel",
	"io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64",
	"io_setup", "io_submit", "ioctl", "ioprio_get", "ioprio_set", "ipc", "kill",
	"landlock_add_rule", "landlock_create_ruleset",
	"landlock_restrict_self", "lchown", "lchown32", "lgetxattr", "link",
	"linkat", "listen", "listxattr", "llistxattr", "_llseek",
	"lremovexattr", "lseek", "lsetxattr", "lstat", "lstat64", "madvise",
	"membarrier", "memfd_create", "memfd_secret", "mincore", "mkdir",
	"mkdirat", "mknod", "mknodat", "mlock", "mlock2", "mlockall", "mmap",
	"mmap2", "modify_ldt", "mprotect", "mq_getsetattr", "mq_notify",
	"mq_open", "mq_timedreceive", "mq_timedreceive_time64",
	"mq_timedsend", "mq_timedsend_time64", "mq_unlink", "mremap", "msgctl",
	"msgget", "msgrcv", "msgsnd", "msync", "munlock", "munlockall",
	"munmap", "name_to_handle_at", "nanosleep", "newfstatat", "_newselect",
	"open", "openat", "openat2", "pause", "pidfd_open",
	"pidfd_send_signal", "pipe", "pipe2", "pkey_alloc", "pkey_free",
	"pkey_mprotect", "poll", "ppoll", "ppoll_time64", "prctl", "pread64",
	"preadv", "preadv2", "prlimit64", "process_mrelease", "pselect6",
	"pselect6_time64", "pwrite64", "pwritev", "pwritev2", "read",
	"readahead", "readlink", "readlinkat", "readv", "recv", "recvfrom",
	"recvmmsg", "recvmmsg_time64", "recvmsg", "remap_file_pages",
	"removexattr", "rename", "renameat", "renameat2", "restart_syscall",
	"rmdir", "rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask",
	"rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
	"rt_sigtimedwait_time64", "rt_tgsigqueueinfo", "sched_get_priority_max",
	"sched_get_priority_min", "sched_getaffinity", "sched_getattr",
	"sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
	"sched_rr_get_interval_time64", "sched_setaffinity", "sched_setattr",
	"sched_setparam", "sched_setscheduler", "sched_yield", "seccomp",
	"select", "semctl", "semget", "semop", "semtimedop",
	"semtimedop_time64", "send", "sendfile", "sendfile64", "sendmmsg",
	"sendmsg", "sendto", "set_robust_list", "set_thread_area",
	"set_tid_address", "setfsgid", "setfsgid32", "setfsuid", "setfsuid32",
	"setgid", "setgid32", "setgroups", "setgroups32", "setitimer",
	"setpgid", "setpriority", "setregid", "setregid32", "setresgid",
	"setresgid32", "setresuid", "setresuid32", "setreuid", "setreuid32",
	"setrlimit", "setsid", "setsockopt", "setuid", "setuid32", "setxattr",
	"shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack",
	"signalfd", "signalfd4", "sigprocmask", "sigreturn", "socketcall",
	"socketpair", "splice", "stat", "stat64", "statfs", "statfs64",
	"statx", "symlink", "symlinkat", "sync", "sync_file_range", "syncfs",
	"sysinfo", "tee", "tgkill", "time", "timer_create", "timer_delete",
	"timer_getoverrun", "timer_gettime", "timer_gettime64",
	"timer_settime", "timer_settime64", "timerfd_create",
	"timerfd_gettime", "timerfd_gettime64", "timerfd_settime",
	"timerfd_settime64", "times", "tkill", "truncate", "truncate64",
	"ugetrlimit", "umask", "uname", "unlink", "unlinkat", "utime",
	"utimensat", "utimensat_time64", "utimes", "vfork", "vmsplice",
	"wait4", "waitid", "waitpid", "write", "writev",
	/* Docker allows these on kernels from 4.8 (where ptrace can no
	 * longer bypass seccomp). */
	"kcmp", "pidfd_getfd", "process_madvise", "process_vm_readv",
	"process_vm_writev", "ptrace",
};

/* What a capability unlocks, as Docker's profile says; SYS_ADMIN first
 * (SYS_ADMIN_BIT), which also lets clone take namespace flags. */
static const struct {
	const char *cap;
	const char *const calls[24];
} by_cap[] = {
	{ "SYS_ADMIN", { "bpf", "clone3", "fanotify_init", "fsconfig",
	    "fsmount", "fsopen", "fspick", "lookup_dcookie", "mount",
	    "mount_setattr", "move_mount", "open_tree", "perf_event_open",
	    "quotactl", "quotactl_fd", "setdomainname", "sethostname", "setns",
	    "syslog", "umount", "umount2", "unshare" } },
	{ "SYS_BOOT", { "reboot" } },
	{ "SYS_CHROOT", { "chroot" } },
	{ "SYS_MODULE", { "delete_module", "init_module", "finit_module" } },
	{ "SYS_PACCT", { "acct" } },
	{ "SYS_RAWIO", { "iopl", "ioperm" } },
	{ "SYS_TIME", { "settimeofday", "stime", "clock_settime",
	    "clock_settime64" } },
	{ "SYS_TTY_CONFIG", { "vhangup" } },
	{ "SYS_NICE", { "get_mempolicy", "mbind", "set_mempolicy",
	    "set_mempolicy_home_node" } },
	{ "SYSLOG", { "syslog" } },
	{ "DAC_READ_SEARCH", { "open_by_handle_at" } },
	{ "BPF", { "bpf" } },
	{ "PERFMON", { "perf_event_open" } },
};

#define NBY_CAP (sizeof by_cap / sizeof by_cap[0])
#define SYS_ADMIN_BIT 1u

/* personality(2) values Docker lets through: PER_LINUX, UNAME26,
 * PER_LINUX32, PER_LINUX32 | UNAME26, and the query. */
static const unsigned long personalities[] = {
	0x0, 0x0008, 0x20000, 0x20008, 0xffffffff,
};

static const int io_uring[] = {
	SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter),
	SCMP_SYS(io_uring_register),
};

/* Profiles compiled so far, by the capabilities that matter to them. */
static struct compiled {
	unsigned mask;
	char *b64;
} *compiled;
static size_t ncompiled;

static int
has_cap(const struct config_list *caps, const char *name)
{
	for (size_t i = 0; caps != NULL && i < caps->n; i++) {
		const char *c = caps->v[i];

		if (strncasecmp(c, "CAP_", 4) == 0)
			c += 4;
		if (strcasecmp(c, name) == 0)
			return 1;
	}
	return 0;
}

static int
allow(scmp_filter_ctx ctx, const char *name)
{
	int nr = seccomp_syscall_resolve_name(name);

	int rc;

	/* Not a system call of these architectures: nothing to allow. */
	if (nr == __NR_SCMP_ERROR)
		return 0;
	rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
	/* Two capabilities may unlock one call (syslog, bpf). */
	return rc == -EEXIST ? 0 : rc;
}

static int
add_rules(scmp_filter_ctx ctx, unsigned mask)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < sizeof allowed / sizeof allowed[0];
	    i++)
		rc = allow(ctx, allowed[i]);
	for (size_t i = 0; rc == 0 && i < NBY_CAP; i++) {
		if (!(mask & (1u << i)))
			continue;
		for (size_t k = 0; rc == 0 && by_cap[i].calls[k] != NULL; k++)
			rc = allow(ctx, by_cap[i].calls[k]);
	}
	if (rc == 0 && (mask & SYS_ADMIN_BIT))
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 0);
	else if (rc == 0) {
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
		    SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWNS | CLONE_NEWUTS |
		    CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
		    CLONE_NEWCGROUP, 0));
		if (rc == 0)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS),
			    SCMP_SYS(clone3), 0);
	}
	/* io_uring runs its operations in kernel workers that seccomp never
	 * sees, and has been the way out of many a container: Docker 25
	 * dropped it from its profile. ENOSYS, as clone3, so that libraries
	 * fall back to epoll and plain reads. */
	for (size_t i = 0; rc == 0 && i < sizeof io_uring / sizeof io_uring[0];
	    i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), io_uring[i], 0);
	for (size_t i = 0; rc == 0 && i < sizeof personalities /
	    sizeof personalities[0]; i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality),
		    1, SCMP_A0(SCMP_CMP_EQ, personalities[i]));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
		    SCMP_A0(SCMP_CMP_NE, AF_VSOCK));
	return rc;
}

/* The compiled program of mask, as base64. */
static char *
compile(unsigned mask, struct error *err)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	struct base64_encode_ctx b64;
	uint8_t *prog = NULL;
	struct stat st;
	char *out = NULL;
	size_t n;
	int fd = -1, rc;

	if (ctx == NULL) {
		error_set(err, 500, "seccomp_init failed");
		return NULL;
	}
	rc = seccomp_arch_add(ctx, SCMP_ARCH_X86);
	if (rc == 0 || rc == -EEXIST)
		rc = seccomp_arch_add(ctx, SCMP_ARCH_X32);
	if (rc == -EEXIST || rc == -EINVAL)
		rc = 0;		/* native already, or another host arch */
	/* A binary tree of the system calls: the list is long. */
	if (rc == 0)
		rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	if (rc == 0)
		rc = add_rules(ctx, mask);
	if (rc != 0) {
		error_set(err, 500, "cannot build the sandboxes' seccomp "
		    "profile: %s", strerror(-rc));
		goto out;
	}
	fd = memfd_create("seccomp-profile", MFD_CLOEXEC);
	if (fd < 0 || seccomp_export_bpf(ctx, fd) != 0 || fstat(fd, &st) < 0 ||
	    st.st_size <= 0 || st.st_size % (off_t)sizeof(struct sock_filter)) {
		error_set(err, 500, "cannot export the sandboxes' seccomp "
		    "profile");
		goto out;
	}
	prog = xmalloc((size_t)st.st_size);
	if (pread(fd, prog, (size_t)st.st_size, 0) != st.st_size) {
		error_set(err, 500, "cannot read back the sandboxes' seccomp "
		    "profile");
		goto out;
	}
	out = xmalloc(BASE64_ENCODE_LENGTH((size_t)st.st_size) +
	    BASE64_ENCODE_FINAL_LENGTH + 1);
	base64_encode_init(&b64);
	n = base64_encode_update(&b64, out, (size_t)st.st_size, prog);
	n += base64_encode_final(&b64, out + n);
	out[n] = '\0';
out:
	free(prog);
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return out;
}

const char *
crun_seccomp_bpf_base64(const struct config_list *caps, struct error *err)
{
	unsigned mask = 0;
	char *b64;

	for (size_t i = 0; i < NBY_CAP; i++)
		if (has_cap(caps, by_cap[i].cap))
			mask |= 1u << i;
	for (size_t i = 0; i < ncompiled; i++)
		if (compiled[i].mask == mask)
			return compiled[i].b64;
	if ((b64 = compile(mask, err)) == NULL)
		return NULL;
	compiled = xreallocarray(compiled, ncompiled + 1, sizeof *compiled);
	compiled[ncompiled].mask = mask;
	compiled[ncompiled].b64 = b64;
	return compiled[ncompiled++].b64;
}

void
crun_seccomp_free(void)
{
	for (size_t i = 0; i < ncompiled; i++)
		free(compiled[i].b64);
	free(compiled);
	compiled = NULL;
	ncompiled = 0;
}
