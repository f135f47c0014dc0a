/*
 * The seccomp filter every command runs under, built once with libseccomp
 * and exported as a BPF program, so that each child only has to load it
 * (two system calls between fork and exec, no allocation).
 *
 * Denied with EPERM: what could leave or damage the sandbox (mounts, module
 * and kexec loading, namespaces, tracing, BPF, keyrings, swap, reboot, file
 * handles, taking or comparing another process's descriptors); clone with
 * any namespace flag (else unshare is just a clone away); personality but
 * to ask for it or to set plain PER_LINUX (the other personalities switch
 * off address randomisation, make data executable, change what uname
 * says). ENOSYS, as if the kernel had none, for clone3, so libc falls back
 * to clone, whose flags we can see, and for io_uring, whose operations run
 * in kernel threads this filter does not see (libuv, liburing, Python
 * and the rest fall back to plain system calls). System calls of other
 * ABIs (32-bit x86, x32) fail with EPERM.
 *
 * confine_spawn_options is the one place that sets what confines a child
 * (the filter, the user, the process group, the environment): shell
 * commands, the IPython kernel, stdio MCP servers and desktop programs all
 * start from it, so a new setting cannot be forgotten in one of them.
 */
#include "agent.h"

#include <errno.h>
#include <linux/filter.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <seccomp.h>

#include "spawn.h"
#include "xmalloc.h"

static const char *const denied[] = {
	"mount", "umount", "umount2", "pivot_root", "chroot",
	"swapon", "swapoff", "reboot",
	"kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module",
	"bpf", "perf_event_open",
	"keyctl", "add_key", "request_key",
	"open_by_handle_at", "name_to_handle_at",
	"setns", "unshare",
	"ptrace", "process_vm_readv", "process_vm_writev",
	"pidfd_getfd", "kcmp",
	"userfaultfd",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
	"open_tree", "mount_setattr",
	"acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"quotactl", "lookup_dcookie", "vhangup", "nfsservctl",
	"iopl", "ioperm", "syslog",
};

static const char *const absent[] = {
	"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register",
};

static const unsigned long ns_flags[] = {
	CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
	CLONE_NEWNET, CLONE_NEWCGROUP, CLONE_NEWTIME,
};

/*
 * personality(2) reads the low 32 bits of its argument. Allowed there: 0
 * (PER_LINUX) and all ones (the query, also as personality(-1)). A rule
 * may compare an argument only once, so "neither" is spelled as 32 rules
 * OR'ed: bit i set and bit i+1 (mod 32) clear, for some i, holds for
 * exactly the values that have both a one and a zero.
 */
static int
deny_personalities(scmp_filter_ctx ctx)
{
	int rc = 0;

	for (int i = 0; rc == 0 && i < 32; i++) {
		uint64_t bit = 1ULL << i, next = 1ULL << ((i + 1) % 32);

		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM),
		    SCMP_SYS(personality), 1,
		    SCMP_A0(SCMP_CMP_MASKED_EQ, bit | next, bit));
	}
	return rc;
}

struct sock_fprog *
confine_build(struct error *err)
{
	struct sock_fprog *prog = NULL;
	scmp_filter_ctx ctx;
	struct stat st;
	int fd = -1, rc;

	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (ctx == NULL) {
		error_set(err, 500, "seccomp_init failed");
		return NULL;
	}
	/* Anything not of our native ABI: refused, not killed, so that a
	 * 32-bit program gets an error it can report. */
	rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(EPERM));
	for (size_t i = 0; rc == 0 && i < sizeof denied / sizeof denied[0]; i++) {
		int nr = seccomp_syscall_resolve_name(denied[i]);

		if (nr == __NR_SCMP_ERROR)
			continue;	/* not on this architecture */
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	/* Rules are OR'ed: one per namespace flag catches any of them. */
	for (size_t i = 0; rc == 0 && i < sizeof ns_flags / sizeof ns_flags[0];
	    i++)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone),
		    1, SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
	for (size_t i = 0; rc == 0 && i < sizeof absent / sizeof absent[0];
	    i++) {
		int nr = seccomp_syscall_resolve_name(absent[i]);

		if (nr != __NR_SCMP_ERROR)
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr,
			    0);
	}
	if (rc == 0)
		rc = deny_personalities(ctx);
	if (rc != 0) {
		error_set(err, 500, "cannot build the seccomp filter: %s",
		    strerror(-rc));
		goto out;
	}
	fd = memfd_create("seccomp-bpf", MFD_CLOEXEC);
	if (fd < 0 || seccomp_export_bpf(ctx, fd) != 0 || fstat(fd, &st) < 0 ||
	    st.st_size <= 0 || st.st_size % (off_t)sizeof(struct sock_filter)) {
		error_set(err, 500, "cannot export the seccomp filter");
		goto out;
	}
	prog = xcalloc(1, sizeof *prog);
	prog->len = (unsigned short)(st.st_size / (off_t)sizeof(struct sock_filter));
	prog->filter = xmalloc((size_t)st.st_size);
	if (pread(fd, prog->filter, (size_t)st.st_size, 0) != st.st_size) {
		error_set(err, 500, "cannot read back the seccomp filter");
		confine_free(prog);
		prog = NULL;
	}
out:
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return prog;
}

void
confine_free(struct sock_fprog *prog)
{
	if (prog == NULL)
		return;
	free(prog->filter);
	free(prog);
}

void
confine_spawn_options(const struct agent *agent, struct spawn_options *opts)
{
	memset(opts, 0, sizeof *opts);
	opts->envp = (const char *const *)agent->child_env;
	opts->cwd = agent->ws.root;
	opts->new_group = 1;
	opts->seccomp = agent->confine;
	opts->set_ids = agent->drop_ids;
	opts->uid = agent->uid;
	opts->gid = agent->gid;
}
