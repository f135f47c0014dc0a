/*
 * What the host gives the crun backend: which cgroup hierarchy it has
 * (v1, v2, or hybrid: v1 controllers with a v2 hierarchy beside them),
 * whether the memory controller limits swap, and one sample of a
 * sandbox's cgroup for stats, read from its files (no crun call).
 *
 * On a hybrid host crun 1.8 refuses to start anything once the v2
 * hierarchy has a controller ("cgroups in hybrid mode not supported"). It
 * runs instead in a mount namespace of ours, made once here, where
 * /sys/fs/cgroup/unified is covered by an empty tmpfs: crun then sees a
 * plain v1 host and applies every limit there (the directories it makes
 * for the v2 hierarchy it still knows of from /proc/self/cgroup land in
 * that tmpfs). The namespace is a slave
 * of the host's (mounts made on the host later appear in it, none made in
 * it leave), the host's own mounts are untouched, and a descriptor of ours
 * keeps it (no process lives in it).
 */
#include "backend_crun.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/magic.h>


#define CGROUP_ROOT "/sys/fs/cgroup"

static int
fs_type_is(const char *path, long magic)
{
	struct statfs st;

	return statfs(path, &st) == 0 && (long)st.f_type == magic;
}

/* v2: a cgroup below the root has memory.swap.max where the kernel
 * accounts swap (the root itself has none of the memory files). */
static int
v2_limits_swap(void)
{
	DIR *d = opendir(CGROUP_ROOT);
	struct dirent *e;
	int found = 0;

	if (d == NULL)
		return 0;
	while (!found && (e = readdir(d)) != NULL) {
		char path[512];

		if (e->d_type != DT_DIR || e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, CGROUP_ROOT "/%s/memory.swap.max",
		    e->d_name);
		found = access(path, F_OK) == 0;
	}
	closedir(d);
	return found;
}

int
crun_host_new_ns(int flag, int (*setup)(void))
{
	int p[2], e = 0, fd = -1;
	char path[64];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		if (unshare(flag) < 0 || (setup != NULL && setup() < 0))
			e = errno;
		if (write(p[1], &e, sizeof e) != sizeof e || e != 0)
			_exit(1);
		for (;;)
			pause();
	}
	e = errno;
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		errno = e;
		return -1;
	}
	if (read(p[0], &e, sizeof e) != sizeof e)
		e = EIO;
	close(p[0]);
	if (e == 0) {
		snprintf(path, sizeof path, "/proc/%d/ns/%s", (int)pid,
		    flag == CLONE_NEWNET ? "net" : "mnt");
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			e = errno;
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	errno = e;
	return fd;
}

/* In the hybrid host's namespace: the host's mounts come in, none of ours
 * goes out, and the v2 hierarchy is covered. */
static int
hide_v2(void)
{
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		return -1;
	return mount("none", CGROUP_ROOT "/unified", "tmpfs", MS_NOSUID |
	    MS_NODEV | MS_NOEXEC, "mode=755");
}

int
crun_host_init(struct crun_host *h, struct error *err)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	memset(h, 0, sizeof *h);
	h->mntns_fd = -1;
	h->ncpus = cpus > 0 ? (unsigned)cpus : 1;
	h->mem_total = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
	if (fs_type_is(CGROUP_ROOT, CGROUP2_SUPER_MAGIC)) {
		h->cgroups = CRUN_CGROUPS_V2;
		h->swap_limit = v2_limits_swap();
		return 0;
	}
	h->swap_limit = access(CGROUP_ROOT "/memory/memory.memsw.limit_in_bytes",
	    F_OK) == 0;
	if (!fs_type_is(CGROUP_ROOT "/unified", CGROUP2_SUPER_MAGIC)) {
		h->cgroups = CRUN_CGROUPS_V1;
		return 0;
	}
	h->cgroups = CRUN_CGROUPS_HYBRID;
	if ((h->mntns_fd = crun_host_new_ns(CLONE_NEWNS, hide_v2)) < 0) {
		error_set_errno(err, 500, errno, "crun: cannot make the mount "
		    "namespace that hides the cgroup v2 hierarchy of this "
		    "hybrid host");
		return -1;
	}
	return 0;
}

void
crun_host_free(struct crun_host *h)
{
	if (h->mntns_fd >= 0)
		close(h->mntns_fd);
	h->mntns_fd = -1;
}

const char *
crun_host_cgroups_name(const struct crun_host *h)
{
	switch (h->cgroups) {
	case CRUN_CGROUPS_V2:
		return "cgroup v2";
	case CRUN_CGROUPS_V1:
		return "cgroup v1";
	case CRUN_CGROUPS_HYBRID:
		break;
	}
	return "hybrid cgroups (v1 controllers and a v2 hierarchy; crun runs "
	    "where the v2 one is hidden, limits are v1's)";
}

int
crun_host_enter(const struct crun_host *h, const char *crun)
{
	if (h->mntns_fd >= 0 && setns(h->mntns_fd, CLONE_NEWNS) < 0)
		return -1;
	if (unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(crun, crun, NULL, MS_BIND, NULL) < 0)
		return -1;
	return mount(NULL, crun, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL);
}

/* The first line of a cgroup file, NUL-terminated; -1 if unreadable. */
static int
read_file(const char *controller, const char *path, const char *file,
    char *buf, size_t size)
{
	char full[512];
	ssize_t n;
	int fd;

	snprintf(full, sizeof full, CGROUP_ROOT "%s%s%s/%s",
	    controller != NULL ? "/" : "", controller != NULL ? controller : "",
	    path, file);
	if ((fd = open(full, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

static int64_t
number(const char *s)
{
	return s[0] >= '0' && s[0] <= '9' ? strtoll(s, NULL, 10) : -1;
}

/* A counter of memory.stat ("key value" lines); 0 when absent. */
static int64_t
stat_field(const char *stat, const char *key)
{
	size_t n = strlen(key);

	for (const char *p = stat; p != NULL && *p != '\0';) {
		if (strncmp(p, key, n) == 0 && p[n] == ' ')
			return number(p + n + 1);
		p = strchr(p, '\n');
		if (p != NULL)
			p++;
	}
	return 0;
}

int
crun_host_stats(const struct crun_host *h, const char *path,
    struct backend_stats *s, struct error *err)
{
	int v2 = h->cgroups == CRUN_CGROUPS_V2;
	char cpu[4096], usage[64], limit[64], stat[8192];
	int64_t inactive;

	memset(s, 0, sizeof *s);
	if (read_file(v2 ? NULL : "cpuacct", path, v2 ? "cpu.stat" :
	    "cpuacct.usage", cpu, sizeof cpu) < 0 ||
	    read_file(v2 ? NULL : "memory", path, v2 ? "memory.current" :
	    "memory.usage_in_bytes", usage, sizeof usage) < 0 ||
	    read_file(v2 ? NULL : "memory", path, v2 ? "memory.max" :
	    "memory.limit_in_bytes", limit, sizeof limit) < 0 ||
	    read_file(v2 ? NULL : "memory", path, "memory.stat", stat,
	    sizeof stat) < 0) {
		error_set_errno(err, errno == ENOENT ? 404 : 500, errno,
		    "crun: cannot read the sandbox's cgroup");
		return -1;
	}
	s->cpu_ns = v2 ? (uint64_t)stat_field(cpu, "usage_usec") * 1000 :
	    (uint64_t)number(cpu);
	s->cpus = h->ncpus;
	s->mem_used = number(usage);
	/* As docker stats counts it: inactive page cache is not in use. */
	inactive = stat_field(stat, v2 ? "inactive_file" :
	    "total_inactive_file");
	if (inactive < s->mem_used)
		s->mem_used -= inactive;
	s->mem_limit = number(limit);
	/* "max", or v1's near-infinite page count: no limit of its own. */
	if (s->mem_limit < 0 || (h->mem_total > 0 && s->mem_limit >
	    h->mem_total))
		s->mem_limit = h->mem_total;
	s->mem_cache = stat_field(stat, v2 ? "file" : "total_cache");
	return 0;
}

int
crun_host_frozen(const struct crun_host *h, const char *path)
{
	char buf[64];

	if (h->cgroups == CRUN_CGROUPS_V2) {
		if (read_file(NULL, path, "cgroup.freeze", buf, sizeof buf) < 0)
			return -1;
		return buf[0] == '1';
	}
	if (read_file("freezer", path, "freezer.state", buf, sizeof buf) < 0)
		return -1;
	return strncmp(buf, "FROZEN", 6) == 0;
}
