/*
 * The OCI configuration of a crun sandbox (config.json of its bundle):
 * what Docker gives a container and what sandboxd asks of Docker, so that
 * a sandbox is the same on either backend.
 *
 * From Docker's defaults: namespaces of its own (pid, ipc, uts, mount,
 * cgroup, network), /proc with Docker's masked and read-only paths, /sys
 * and the cgroup hierarchy read-only, a minimal /dev (tmpfs with the
 * standard devices crun makes, devpts, mqueue, a 64 MiB /dev/shm) and the
 * device cgroup allowing only those, the seccomp profile of
 * backend_crun_seccomp.c, the open-file limit of the daemon (Docker's
 * containers get dockerd's),
 * unprivileged ping and low ports in its own network namespace; and
 * hostname, hosts and resolv.conf files of its own.
 * From sandboxd (as backend_docker.c asks Docker): only the capabilities
 * of the spec, no-new-privileges, memory (no extra swap), CPU and pids
 * limits, the workspace and read-only mounts, the agent's socket
 * directory, the network. From the image (its store record): the
 * environment, entrypoint, working directory and user.
 */
#include "backend_crun.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "xmalloc.h"

/* Where the agent's socket directory appears inside the sandbox. */
#define AGENT_SOCK_DIR "/run/sandbox-agent"
#define CPU_PERIOD 100000
#define RESOLV_MAX (64 * 1024)

static const char *const readonly_paths[] = {
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
	"/proc/sysrq-trigger",
};

/* The character devices Docker's device cgroup lets a container open:
 * null, zero, full, random, urandom, tty, ptmx and the ptys. */
static const struct {
	long major, minor;	/* -1: any */
} devices[] = {
	{ 1, 3 }, { 1, 5 }, { 1, 7 }, { 1, 8 }, { 1, 9 }, { 5, 0 }, { 5, 2 },
	{ 136, -1 },
};

static json_t *
strings(const char *const *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

void
crun_config_caps(const struct backend_spec *spec, struct config_list *out)
{
	for (size_t i = 0; spec->cap_add != NULL && i < spec->cap_add->n; i++) {
		const char *c = spec->cap_add->v[i];
		char *name;

		if (strncasecmp(c, "CAP_", 4) == 0)
			c += 4;
		name = xasprintf("CAP_%s", c);
		for (char *p = name; *p != '\0'; p++)
			if (*p >= 'a' && *p <= 'z')
				*p -= 'a' - 'A';
		config_list_add(out, name);
		free(name);
	}
}

static json_t *
mount(const char *dst, const char *type, const char *src, const char *opts)
{
	json_t *m = json_pack("{s:s,s:s,s:s,s:[]}", "destination", dst, "type",
	    type, "source", src, "options");
	char *copy = xstrdup(opts), *save = NULL;

	for (char *o = strtok_r(copy, ",", &save); o != NULL;
	    o = strtok_r(NULL, ",", &save))
		json_array_append_new(json_object_get(m, "options"),
		    json_string(o));
	free(copy);
	return m;
}

static json_t *
bind(const char *dst, const char *src, int readonly)
{
	return mount(dst, "bind", src, readonly ? "rbind,rprivate,ro" :
	    "rbind,rprivate");
}

static json_t *
mounts(const struct crun_config_in *in)
{
	const struct backend_spec *s = in->spec;
	json_t *a = json_array();
	char path[4096];

	json_array_append_new(a, mount("/proc", "proc", "proc",
	    "nosuid,noexec,nodev"));
	json_array_append_new(a, mount("/dev", "tmpfs", "tmpfs",
	    "nosuid,strictatime,mode=755,size=65536k"));
	json_array_append_new(a, mount("/dev/pts", "devpts", "devpts",
	    "nosuid,noexec,newinstance,ptmxmode=0666,mode=0620,gid=5"));
	json_array_append_new(a, mount("/sys", "sysfs", "sysfs",
	    "nosuid,noexec,nodev,ro"));
	json_array_append_new(a, mount("/sys/fs/cgroup", "cgroup", "cgroup",
	    "nosuid,noexec,nodev,relatime,ro"));
	json_array_append_new(a, mount("/dev/mqueue", "mqueue", "mqueue",
	    "nosuid,noexec,nodev"));
	json_array_append_new(a, mount("/dev/shm", "tmpfs", "shm",
	    "nosuid,noexec,nodev,mode=1777,size=67108864"));
	for (size_t i = 0; i < 3; i++) {
		static const char *const etc[] = { "hostname", "hosts",
		    "resolv.conf" };
		char target[64];

		snprintf(path, sizeof path, "%s/%s", in->bundle, etc[i]);
		snprintf(target, sizeof target, "/etc/%s", etc[i]);
		json_array_append_new(a, bind(target, path, 0));
	}
	for (size_t i = 0; i < s->nmounts; i++)
		json_array_append_new(a, bind(s->mounts[i].target,
		    s->mounts[i].host, s->mounts[i].readonly));
	json_array_append_new(a, bind(AGENT_SOCK_DIR, s->agent_dir, 0));
	return a;
}

static json_t *
resources(const struct crun_config_in *in)
{
	const struct backend_spec *s = in->spec;
	json_t *r = json_object(), *devs = json_array();

	json_array_append_new(devs, json_pack("{s:b,s:s}", "allow", 0,
	    "access", "rwm"));
	/* Making device nodes is not opening them (Docker's "c *:* m"). */
	json_array_append_new(devs, json_pack("{s:b,s:s,s:s}", "allow", 1,
	    "type", "c", "access", "m"));
	json_array_append_new(devs, json_pack("{s:b,s:s,s:s}", "allow", 1,
	    "type", "b", "access", "m"));
	for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
		json_t *d = json_pack("{s:b,s:s,s:I,s:s}", "allow", 1, "type",
		    "c", "major", (json_int_t)devices[i].major, "access", "rwm");

		if (devices[i].minor >= 0)
			json_object_set_new(d, "minor",
			    json_integer(devices[i].minor));
		json_array_append_new(devs, d);
	}
	json_object_set_new(r, "devices", devs);
	if (s->memory > 0) {
		json_t *m = json_pack("{s:I}", "limit", (json_int_t)s->memory);

		/* No swap on top of the memory limit (memory + swap). */
		if (in->swap_limit)
			json_object_set_new(m, "swap", json_integer(s->memory));
		json_object_set_new(r, "memory", m);
	}
	if (s->nano_cpus > 0)
		json_object_set_new(r, "cpu", json_pack("{s:I,s:I}", "quota",
		    (json_int_t)(s->nano_cpus * CPU_PERIOD / 1000000000),
		    "period", (json_int_t)CPU_PERIOD));
	if (s->pids > 0)
		json_object_set_new(r, "pids", json_pack("{s:I}", "limit",
		    (json_int_t)s->pids));
	return r;
}

static json_t *
namespaces(const struct crun_config_in *in)
{
	static const char *const own[] = { "pid", "ipc", "uts", "mount",
	    "cgroup" };
	json_t *a = json_array();

	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
		json_array_append_new(a, json_pack("{s:s}", "type", own[i]));
	if (in->netns != NULL)
		json_array_append_new(a, json_pack("{s:s,s:s}", "type",
		    "network", "path", in->netns));
	else
		json_array_append_new(a, json_pack("{s:s}", "type", "network"));
	return a;
}

/* The image's User: numeric "uid[:gid]" or root (the store has no
 * passwd to look a name up in). */
static int
image_user(const char *user, json_int_t *uid, json_int_t *gid,
    struct error *err)
{
	char *end;

	*uid = *gid = 0;
	if (user == NULL || *user == '\0' || strcmp(user, "root") == 0 ||
	    strcmp(user, "0") == 0)
		return 0;
	*uid = strtoll(user, &end, 10);
	if (end != user && *end == ':') {
		char *g = end + 1;

		*gid = strtoll(g, &end, 10);
		if (end == g)
			goto bad;
	}
	if (end == user || *end != '\0' || *uid < 0 || *gid < 0)
		goto bad;
	return 0;
bad:
	error_set(err, 500, "the image's user '%s' is not numeric (uid or "
	    "uid:gid): the crun backend does not look names up", user);
	return -1;
}

static int
has_var(json_t *env, const char *key)
{
	size_t n = strlen(key), i;
	json_t *v;

	json_array_foreach(env, i, v) {
		const char *s = json_string_value(v);

		if (s != NULL && strncmp(s, key, n) == 0 && s[n] == '=')
			return 1;
	}
	return 0;
}

/* The image's environment, the spec's over it, then what Docker adds. */
static json_t *
environment(const struct crun_config_in *in)
{
	json_t *env = json_array(), *v;
	const char *const *spec = in->spec->env;
	size_t i;

	json_array_foreach(json_object_get(in->image, "Env"), i, v) {
		const char *s = json_string_value(v), *eq;
		int overridden = 0;

		if (s == NULL || (eq = strchr(s, '=')) == NULL)
			continue;
		for (size_t k = 0; spec != NULL && spec[k] != NULL; k++)
			if (strncmp(spec[k], s, (size_t)(eq - s + 1)) == 0)
				overridden = 1;
		if (!overridden)
			json_array_append_new(env, json_string(s));
	}
	for (size_t k = 0; spec != NULL && spec[k] != NULL; k++)
		json_array_append_new(env, json_string(spec[k]));
	if (!has_var(env, "PATH"))
		json_array_append_new(env, json_string("PATH=/usr/local/sbin:"
		    "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
	json_array_insert_new(env, 0, json_sprintf("HOSTNAME=%s",
	    in->spec->name));
	if (!has_var(env, "HOME"))
		json_array_append_new(env, json_string("HOME=/root"));
	return env;
}

/* entrypoint (the spec's, else the image's) + the agent's command. */
static json_t *
args(const struct crun_config_in *in)
{
	const struct backend_spec *s = in->spec;
	json_t *a = json_array(), *v;
	size_t i;

	if (s->entrypoint != NULL && s->entrypoint->n > 0) {
		for (i = 0; i < s->entrypoint->n; i++)
			json_array_append_new(a, json_string(s->entrypoint->v[i]));
	} else {
		json_array_foreach(json_object_get(in->image, "Entrypoint"), i,
		    v)
			if (json_is_string(v))
				json_array_append(a, v);
	}
	/* Its published port too is relayed to this socket
	 * (backend_crun_publish.c): the agent listens on no network. */
	json_array_append_new(a, json_string("--listen"));
	json_array_append_new(a, json_string("unix:" AGENT_SOCK_DIR
	    "/agent.sock"));
	for (i = 0; s->args != NULL && s->args[i] != NULL; i++)
		json_array_append_new(a, json_string(s->args[i]));
	return a;
}

json_t *
crun_config_build(const struct crun_config_in *in, struct error *err)
{
	const char *wd = json_string_value(json_object_get(in->image,
	    "WorkingDir"));
	struct config_list caps = { 0 };
	json_int_t uid, gid;
	json_t *c, *process, *linux, *capset;
	size_t nmasked;
	const char *const *masked = backend_masked_paths(&nmasked);

	if (image_user(json_string_value(json_object_get(in->image, "User")),
	    &uid, &gid, err) < 0)
		return NULL;
	crun_config_caps(in->spec, &caps);
	capset = strings((const char *const *)caps.v, caps.n);
	config_list_free(&caps);
	process = json_pack("{s:b,s:{s:I,s:I},s:o,s:o,s:s,s:{s:O,s:O,s:O},"
	    "s:[{s:s,s:I,s:I}],s:b}",
	    "terminal", 0,
	    "user", "uid", uid, "gid", gid,
	    "args", args(in),
	    "env", environment(in),
	    "cwd", wd != NULL && wd[0] == '/' ? wd : "/",
	    "capabilities", "bounding", capset, "effective", capset,
	    "permitted", capset,
	    "rlimits", "type", "RLIMIT_NOFILE", "hard",
	    (json_int_t)in->nofile, "soft", (json_int_t)in->nofile,
	    "noNewPrivileges", 1);
	json_decref(capset);
	linux = json_pack("{s:o,s:s,s:o,s:o,s:o,s:{s:s,s:s}}",
	    "namespaces", namespaces(in),
	    "cgroupsPath", in->cgroup,
	    "resources", resources(in),
	    "maskedPaths", strings(masked, nmasked),
	    "readonlyPaths", strings(readonly_paths, sizeof readonly_paths /
	    sizeof readonly_paths[0]),
	    "sysctl", "net.ipv4.ip_unprivileged_port_start", "0",
	    "net.ipv4.ping_group_range", "0 2147483647");
	c = json_pack("{s:s,s:o,s:{s:s,s:b},s:s,s:o,s:o,s:{s:s}}",
	    "ociVersion", "1.0.2",
	    "process", process,
	    "root", "path", "rootfs", "readonly", 0,
	    "hostname", in->spec->name,
	    "mounts", mounts(in),
	    "linux", linux,
	    "annotations", "run.oci.seccomp_bpf_data", in->seccomp_b64);
	if (c == NULL)
		error_set(err, 500, "cannot build the sandbox's OCI "
		    "configuration");
	return c;
}

static int
write_file(int dir_fd, const char *name, const char *data, size_t len,
    struct error *err)
{
	int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC |
	    O_NOFOLLOW | O_CLOEXEC, 0644);
	ssize_t n = -1;

	if (fd >= 0) {
		n = write(fd, data, len);
		if (close(fd) < 0)
			n = -1;
	}
	if (n != (ssize_t)len) {
		error_set_errno(err, 500, errno, "crun: cannot write the "
		    "sandbox's %s", name);
		return -1;
	}
	return 0;
}

/* The host's resolv.conf but its loopback name servers (out of a
 * sandbox's reach); Docker's public ones when nothing else is left. */
static char *
resolv_conf(void)
{
	FILE *f = fopen("/etc/resolv.conf", "re");
	char line[1024], *out = xstrdup("");
	size_t len = 0;
	int servers = 0;

	while (f != NULL && fgets(line, sizeof line, f) != NULL &&
	    len < RESOLV_MAX) {
		char *p = line;

		if (strncmp(p, "nameserver", 10) == 0) {
			p += 10 + strspn(p + 10, " \t");
			if (strncmp(p, "127.", 4) == 0 || strncmp(p, "::1", 3) == 0)
				continue;
			servers++;
		}
		out = xrealloc(out, len + strlen(line) + 1);
		memcpy(out + len, line, strlen(line) + 1);
		len += strlen(line);
	}
	if (f != NULL)
		fclose(f);
	if (servers == 0) {
		char *more = xasprintf("%snameserver 8.8.8.8\nnameserver "
		    "8.8.4.4\n", out);

		free(out);
		out = more;
	}
	return out;
}

int
crun_config_write_etc(int dir_fd, const char *hostname, const char *ip,
    struct error *err)
{
	char *name = xasprintf("%s\n", hostname);
	char *hosts = xasprintf("127.0.0.1\tlocalhost\n"
	    "::1\tlocalhost ip6-localhost ip6-loopback\n"
	    "fe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\n"
	    "ff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n%s%s%s%s",
	    ip != NULL ? ip : "", ip != NULL ? "\t" : "",
	    ip != NULL ? hostname : "", ip != NULL ? "\n" : "");
	char *resolv = resolv_conf();
	int rc = 0;

	if (write_file(dir_fd, "hostname", name, strlen(name), err) < 0 ||
	    write_file(dir_fd, "hosts", hosts, strlen(hosts), err) < 0 ||
	    write_file(dir_fd, "resolv.conf", resolv, strlen(resolv), err) < 0)
		rc = -1;
	free(name);
	free(hosts);
	free(resolv);
	return rc;
}
