/*
 * The Docker backend: a sandbox is one container, created and started
 * through the Engine API. Confinement is set here: every capability
 * dropped but the type's, no-new-privileges, memory / CPU / pids limits,
 * network none unless the type asks for a bridge, and then the agent's
 * port published on 127.0.0.1 (or the advertised address) only. Ours are
 * found by a label naming our instance; the agent listens on a unix socket
 * in a host directory bind-mounted into the container, which is how
 * sandboxd reaches it whatever the network.
 */
#include "backend.h"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <jansson.h>

#include "docker_api.h"
#include "log.h"
#include "sandboxd.h"
#include "xmalloc.h"

#define LABEL "io.agentscope.sandboxd"
#define LABEL_INSTANCE LABEL ".instance"
/* Where the agent's socket directory appears inside the container. */
#define AGENT_SOCK_DIR "/run/sandbox-agent"
#define AGENT_SOCK "agent.sock"
#define AGENT_PORT 8000
/* Removals at once at shutdown where the engine takes them (auto). */
#define SHUTDOWN_PARALLEL_AUTO 32

/* How wide the lane of stops and removes is (docker_api.h), for the one
 * Docker backend of the process. Asked for 0 ("auto"), it is 1 until the
 * engine's version says its container exits may overlap, then as wide as
 * the whole queue. */
static struct {
	struct docker *docker;
	size_t max_inflight;
	size_t want_ends;	/* 0: auto */
	int exits_safe;		/* the engine's version is known and fixed */
} lane;

static size_t
lane_ends(void)
{
	if (lane.want_ends > 0)
		return lane.want_ends;
	return lane.exits_safe ? lane.max_inflight : 1;
}

static void
version_cb(json_t *answer, const struct error *err, void *arg)
{
	const char *v = json_string_value(json_object_get(answer, "Version"));

	(void)arg;
	if (err != NULL || lane.docker == NULL)
		return;		/* the first calls say what is wrong */
	lane.exits_safe = !docker_exits_may_deadlock(v);
	if (lane.want_ends > 0)
		return;
	if (lane.exits_safe) {
		docker_set_max_inflight(lane.docker, lane.max_inflight,
		    lane_ends());
		return;
	}
	log_info("docker: engine %s: containers are stopped and removed one "
	    "at a time (its libnetwork can deadlock when two containers exit "
	    "at once, moby/moby#46661, fixed in 20.10.27)", v != NULL ? v :
	    "of unknown version");
}

static enum backend_state
state_of(const char *status)
{
	static const struct {
		const char *word;
		enum backend_state state;
	} words[] = {
		{ "created", BACKEND_CREATED }, { "running", BACKEND_RUNNING },
		{ "paused", BACKEND_PAUSED }, { "exited", BACKEND_EXITED },
	};

	for (size_t i = 0; status != NULL && i < sizeof words /
	    sizeof words[0]; i++) {
		if (strcmp(words[i].word, status) == 0)
			return words[i].state;
	}
	/* "restarting" (no restart policy makes it), "removing", "dead". */
	return BACKEND_DEAD;
}

/* One create in flight: create, then start. Freed when done is called. */
struct create_op {
	struct docker *docker;
	backend_created_cb done;
	backend_sent_cb sent;
	void *arg;
	char *id;
	char *agent_addr;
};

/* One other operation in flight: the caller's callback. */
struct simple_op {
	backend_done_cb done;
	backend_status_cb status_done;
	backend_stats_cb stats_done;
	backend_list_cb list_done;
	backend_logs_cb logs_done;
	void *arg;
};

static json_t *
string_array(const char *const *v)
{
	json_t *a = json_array();

	for (size_t i = 0; v != NULL && v[i] != NULL; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

static json_t *
list_array(const struct config_list *l)
{
	json_t *a = json_array();

	for (size_t i = 0; l != NULL && i < l->n; i++)
		json_array_append_new(a, json_string(l->v[i]));
	return a;
}

/* The agent listens on its socket, and with a published port on TCP. */
static json_t *
agent_cmd(const struct backend_spec *s)
{
	json_t *cmd = json_pack("[ss]", "--listen", "unix:" AGENT_SOCK_DIR "/"
	    AGENT_SOCK);
	char listen[32];

	if (s->host_port > 0) {
		snprintf(listen, sizeof listen, "0.0.0.0:%d", AGENT_PORT);
		json_array_append_new(cmd, json_string("--listen"));
		json_array_append_new(cmd, json_string(listen));
	}
	for (size_t i = 0; s->args != NULL && s->args[i] != NULL; i++)
		json_array_append_new(cmd, json_string(s->args[i]));
	return cmd;
}

static json_t *
binds(const struct backend_spec *s)
{
	json_t *a = json_array();

	for (size_t i = 0; i < s->nmounts; i++)
		json_array_append_new(a, json_sprintf("%s:%s:%s",
		    s->mounts[i].host, s->mounts[i].target,
		    s->mounts[i].readonly ? "ro" : "rw"));
	json_array_append_new(a, json_sprintf("%s:" AGENT_SOCK_DIR ":rw",
	    s->agent_dir));
	return a;
}

/* In place of Docker's own list (which Debian's 20.10 has without
 * /proc/interrupts): the same as the crun backend's. */
static json_t *
masked_paths(void)
{
	size_t n;
	const char *const *v = backend_masked_paths(&n);
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

static json_t *
create_body(const struct backend_spec *s)
{
	json_t *body = json_object(), *host = json_object(), *caps;

	json_object_set_new(body, "Image", json_string(s->image));
	json_object_set_new(body, "Cmd", agent_cmd(s));
	if (s->entrypoint != NULL && s->entrypoint->n > 0)
		json_object_set_new(body, "Entrypoint", list_array(s->entrypoint));
	json_object_set_new(body, "Env", string_array(s->env));
	json_object_set_new(body, "Labels", json_pack("{s:s,s:s,s:s,s:s,s:s}",
	    LABEL, "1", LABEL_INSTANCE, s->instance, LABEL ".id",
	    s->sandbox_id, LABEL ".type", s->type, LABEL ".session",
	    s->session != NULL ? s->session : ""));
	/* Give the agent a moment to stop its children, no more. */
	json_object_set_new(body, "StopTimeout", json_integer(2));
	/* The images' HEALTHCHECK is for a plain `docker run`: sandboxd
	 * probes each agent itself, and Docker's check is a process exec'd
	 * in every container every 15 s, which with hundreds of sandboxes
	 * keeps dockerd and containerd busy for nothing. */
	json_object_set_new(body, "Healthcheck", json_pack("{s:[s]}", "Test",
	    "NONE"));

	json_object_set_new(host, "Binds", binds(s));
	if (s->memory > 0) {
		json_object_set_new(host, "Memory", json_integer(s->memory));
		/* No swap on top of the memory limit. */
		json_object_set_new(host, "MemorySwap", json_integer(s->memory));
	}
	if (s->nano_cpus > 0)
		json_object_set_new(host, "NanoCpus", json_integer(s->nano_cpus));
	if (s->pids > 0)
		json_object_set_new(host, "PidsLimit", json_integer(s->pids));
	json_object_set_new(host, "CapDrop", json_pack("[s]", "ALL"));
	caps = list_array(s->cap_add);
	json_object_set_new(host, "CapAdd", caps);
	json_object_set_new(host, "SecurityOpt",
	    json_pack("[s]", "no-new-privileges"));
	json_object_set_new(host, "MaskedPaths", masked_paths());
	json_object_set_new(host, "NetworkMode", json_string(s->network !=
	    BACKEND_NET_BRIDGE ? "none" : s->network_name != NULL ?
	    s->network_name : "bridge"));
	json_object_set_new(host, "RestartPolicy", json_pack("{s:s}", "Name",
	    "no"));
	/* The agent logs a line per event; keep the host's disk safe. */
	json_object_set_new(host, "LogConfig", json_pack("{s:s,s:{s:s,s:s}}",
	    "Type", "json-file", "Config", "max-size", "1m", "max-file", "1"));
	if (s->host_port > 0) {
		char port_key[32], hport[16];

		snprintf(port_key, sizeof port_key, "%d/tcp", AGENT_PORT);
		snprintf(hport, sizeof hport, "%d", s->host_port);
		json_object_set_new(body, "ExposedPorts",
		    json_pack("{s:{}}", port_key));
		json_object_set_new(host, "PortBindings",
		    json_pack("{s:[{s:s,s:s}]}", port_key, "HostIp",
		    s->host_ip != NULL ? s->host_ip : "127.0.0.1", "HostPort",
		    hport));
	}
	json_object_set_new(body, "HostConfig", host);
	return body;
}

static void
create_finish(struct create_op *op, const struct error *err)
{
	op->done(op->id, op->agent_addr, err, op->arg);
	free(op->id);
	free(op->agent_addr);
	free(op);
}

static void
started_cb(json_t *answer, const struct error *err, void *arg)
{
	(void)answer;
	create_finish(arg, err);
}

static void
created_cb(json_t *answer, const struct error *err, void *arg)
{
	struct create_op *op = arg;
	const char *id;

	if (err != NULL) {
		create_finish(op, err);
		return;
	}
	id = json_string_value(json_object_get(answer, "Id"));
	if (id == NULL) {
		struct error e;

		error_set(&e, 502, "docker: create answered without an Id");
		create_finish(op, &e);
		return;
	}
	op->id = xstrdup(id);
	docker_container_start(op->docker, op->id, started_cb, op);
}

static void
create_sent_cb(void *arg)
{
	struct create_op *op = arg;

	if (op->sent != NULL)
		op->sent(op->arg);
}

static void
docker_create(struct backend *b, const struct backend_spec *spec,
    backend_created_cb done, void *arg)
{
	struct create_op *op = xcalloc(1, sizeof *op);
	json_t *body = create_body(spec);

	op->docker = b->impl;
	op->done = done;
	op->sent = spec->sent;
	op->arg = arg;
	op->agent_addr = xasprintf("unix:%s/" AGENT_SOCK, spec->agent_dir);
	docker_container_create(b->impl, spec->name, body, create_sent_cb,
	    created_cb, op);
	json_decref(body);
}

/* The caller sets the callback its operation answers through. */
static struct simple_op *
simple_op(void *arg)
{
	struct simple_op *op = xcalloc(1, sizeof *op);

	op->arg = arg;
	return op;
}

static struct simple_op *
done_op(backend_done_cb done, void *arg)
{
	struct simple_op *op = simple_op(arg);

	op->done = done;
	return op;
}

static void
removed_cb(json_t *answer, const struct error *err, void *arg)
{
	struct simple_op *op = arg;

	(void)answer;
	/* Already gone is what we wanted. */
	op->done(err != NULL && err->status != 404 ? err : NULL, op->arg);
	free(op);
}

static void
docker_remove(struct backend *b, const char *id, backend_done_cb done,
    void *arg)
{
	docker_container_remove(b->impl, id, removed_cb, done_op(done, arg));
}

static void
plain_cb(json_t *answer, const struct error *err, void *arg)
{
	struct simple_op *op = arg;

	(void)answer;
	op->done(err, op->arg);
	free(op);
}

static void
docker_start(struct backend *b, const char *id, backend_done_cb done,
    void *arg)
{
	docker_container_start(b->impl, id, plain_cb, done_op(done, arg));
}

static void
docker_stop(struct backend *b, const char *id, double timeout,
    backend_done_cb done, void *arg)
{
	docker_container_stop(b->impl, id, (int)timeout, plain_cb,
	    done_op(done, arg));
}

static void
docker_pause(struct backend *b, const char *id, backend_done_cb done,
    void *arg)
{
	docker_container_pause(b->impl, id, plain_cb, done_op(done, arg));
}

static void
docker_resume(struct backend *b, const char *id, backend_done_cb done,
    void *arg)
{
	docker_container_unpause(b->impl, id, plain_cb, done_op(done, arg));
}

static void
inspected_cb(json_t *answer, const struct error *err, void *arg)
{
	struct simple_op *op = arg;
	json_t *state = json_object_get(answer, "State");

	if (err != NULL)
		op->status_done(BACKEND_DEAD, -1, err, op->arg);
	else
		op->status_done(state_of(json_string_value(json_object_get(state,
		    "Status"))), (int)json_integer_value(json_object_get(state,
		    "ExitCode")), NULL, op->arg);
	free(op);
}

static void
docker_status(struct backend *b, const char *id, backend_status_cb done,
    void *arg)
{
	struct simple_op *op = simple_op(arg);

	op->status_done = done;
	docker_container_inspect(b->impl, id, inspected_cb, op);
}

/* The container's first process's namespace. Its pid is Docker's word
 * at one moment: the namespace is opened through a pidfd of that pid,
 * and Docker is asked again; the same pid then, with the pidfd's process
 * still alive, was the container's all along (a pid is reused only once
 * its process is gone). */
struct netns_op {
	struct docker *docker;
	backend_netns_cb done;
	void *arg;
	char *id;
	long long pid;
	int pidfd;
	int fd;
};

static void
netns_finish(struct netns_op *op, const struct error *err)
{
	struct error e;

	if (err == NULL && op->fd < 0) {
		error_set(&e, 502, "docker: the network namespace of container "
		    "%.12s cannot be opened (is it running?)", op->id);
		err = &e;
	}
	if (err != NULL && op->fd >= 0)
		close(op->fd);
	op->done(err != NULL ? -1 : op->fd, err, op->arg);
	if (op->pidfd >= 0)
		close(op->pidfd);
	free(op->id);
	free(op);
}

static long long
state_pid(json_t *answer)
{
	return (long long)json_integer_value(json_object_get(json_object_get(
	    answer, "State"), "Pid"));
}

static void
netns_checked_cb(json_t *answer, const struct error *err, void *arg)
{
	struct netns_op *op = arg;
	struct pollfd p = { .fd = op->pidfd, .events = POLLIN };

	/* A pidfd polls readable once its process exited. */
	if (err == NULL && (state_pid(answer) != op->pid || poll(&p, 1, 0) != 0)) {
		close(op->fd);
		op->fd = -1;
	}
	netns_finish(op, err);
}

static void
netns_inspected_cb(json_t *answer, const struct error *err, void *arg)
{
	struct netns_op *op = arg;
	char path[64];

	op->pid = err == NULL ? state_pid(answer) : 0;
	if (op->pid > 0 && (op->pidfd = (int)syscall(SYS_pidfd_open,
	    (pid_t)op->pid, 0)) >= 0) {
		snprintf(path, sizeof path, "/proc/%lld/ns/net", op->pid);
		op->fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (err != NULL || op->fd < 0) {
		netns_finish(op, err);
		return;
	}
	docker_container_inspect(op->docker, op->id, netns_checked_cb, op);
}

static void
docker_netns(struct backend *b, const char *id, backend_netns_cb done,
    void *arg)
{
	struct netns_op *op = xcalloc(1, sizeof *op);

	op->docker = b->impl;
	op->done = done;
	op->arg = arg;
	op->id = xstrdup(id);
	op->pidfd = op->fd = -1;
	docker_container_inspect(b->impl, id, netns_inspected_cb, op);
}

/* A counter of the memory controller's stats: cgroup v1 names it first,
 * v2 second. */
static int64_t
memory_stat(json_t *stats, const char *v1, const char *v2)
{
	json_t *v = json_object_get(stats, v1);

	if (v == NULL)
		v = json_object_get(stats, v2);
	return json_integer_value(v);
}

static void
stats_cb(json_t *answer, const struct error *err, void *arg)
{
	struct simple_op *op = arg;
	json_t *cpu = json_object_get(answer, "cpu_stats");
	json_t *mem = json_object_get(answer, "memory_stats");
	json_t *counters = json_object_get(mem, "stats");
	struct backend_stats s = { 0 };
	int64_t inactive;

	if (err != NULL) {
		op->stats_done(NULL, err, op->arg);
		free(op);
		return;
	}
	s.cpu_ns = (uint64_t)json_integer_value(json_object_get(
	    json_object_get(cpu, "cpu_usage"), "total_usage"));
	s.cpus = (unsigned)json_integer_value(json_object_get(cpu,
	    "online_cpus"));
	if (s.cpus == 0)
		s.cpus = (unsigned)json_array_size(json_object_get(
		    json_object_get(cpu, "cpu_usage"), "percpu_usage"));
	if (s.cpus == 0)
		s.cpus = 1;
	/* As `docker stats` counts it: inactive page cache is not in use. */
	s.mem_used = json_integer_value(json_object_get(mem, "usage"));
	inactive = memory_stat(counters, "total_inactive_file",
	    "inactive_file");
	if (inactive < s.mem_used)
		s.mem_used -= inactive;
	s.mem_limit = json_integer_value(json_object_get(mem, "limit"));
	s.mem_cache = memory_stat(counters, "total_cache", "file");
	op->stats_done(&s, NULL, op->arg);
	free(op);
}

static void
docker_stats(struct backend *b, const char *id, backend_stats_cb done,
    void *arg)
{
	struct simple_op *op = simple_op(arg);

	op->stats_done = done;
	docker_container_stats(b->impl, id, stats_cb, op);
}

/* The agent's address, from the bind of its socket directory. Caller
 * frees; NULL without one. */
static char *
listed_agent_addr(json_t *container)
{
	json_t *m;
	size_t i;

	json_array_foreach(json_object_get(container, "Mounts"), i, m) {
		const char *src = json_string_value(json_object_get(m, "Source"));
		const char *dst = json_string_value(json_object_get(m,
		    "Destination"));

		if (src != NULL && dst != NULL && strcmp(dst,
		    AGENT_SOCK_DIR) == 0)
			return xasprintf("unix:%s/" AGENT_SOCK, src);
	}
	return NULL;
}

static void
listed_cb(json_t *answer, const struct error *err, void *arg)
{
	struct simple_op *op = arg;
	struct backend_container *v;
	size_t n = 0, i;
	json_t *c;

	if (err != NULL || !json_is_array(answer)) {
		struct error e;

		if (err == NULL)
			error_set(&e, 502, "docker: the container list is not "
			    "a list");
		op->list_done(NULL, 0, err != NULL ? err : &e, op->arg);
		free(op);
		return;
	}
	v = xcalloc(json_array_size(answer) + 1, sizeof *v);
	json_array_foreach(answer, i, c) {
		const char *name = json_string_value(json_array_get(
		    json_object_get(c, "Names"), 0));

		v[n].id = json_string_value(json_object_get(c, "Id"));
		if (v[n].id == NULL || name == NULL)
			continue;
		v[n].name = name[0] == '/' ? name + 1 : name;
		v[n].state = state_of(json_string_value(json_object_get(c,
		    "State")));
		v[n].agent_addr = listed_agent_addr(c);
		n++;
	}
	op->list_done(v, n, NULL, op->arg);
	for (i = 0; i < n; i++)
		free((char *)v[i].agent_addr);
	free(v);
	free(op);
}

static void
docker_list_ours(struct backend *b, const char *instance, int not_running,
    backend_list_cb done, void *arg)
{
	struct simple_op *op = simple_op(arg);

	op->list_done = done;
	docker_container_list(b->impl, LABEL_INSTANCE, instance, not_running,
	    listed_cb, op);
}

static void
logs_cb(const char *body, size_t len, const struct error *err, void *arg)
{
	struct simple_op *op = arg;

	(void)len;
	op->logs_done(body, err, op->arg);
	free(op);
}

static void
docker_logs(struct backend *b, const char *id, int lines,
    backend_logs_cb done, void *arg)
{
	struct simple_op *op = simple_op(arg);

	op->logs_done = done;
	docker_container_logs(b->impl, id, lines, logs_cb, op);
}

/* Docker's short ids: 12 hex digits or more of the 64. */
static int
docker_id_abbreviates(const char *id, const char *identity)
{
	size_t n = strlen(identity);

	return n >= 12 && n <= 64 && strspn(identity, "0123456789abcdef") ==
	    n && strncmp(id, identity, n) == 0;
}

/* Removals are force removes (no stop, no grace period) and nothing else
 * waits on Docker now: want of them at once (auto: SHUTDOWN_PARALLEL_AUTO
 * where the engine takes overlapping exits, else one at a time). */
static size_t
docker_widen_for_shutdown(struct backend *b, size_t want)
{
	size_t wide = want > 0 ? want : SHUTDOWN_PARALLEL_AUTO;

	if (wide > lane.max_inflight)
		lane.max_inflight = wide;
	lane.want_ends = want;
	docker_set_max_inflight(b->impl, lane.max_inflight, lane_ends());
	return lane_ends();
}

static void
docker_stalled(struct backend *b, double seconds)
{
	(void)b;
	/* Seen with Debian's docker.io 20.10.24 after a few hundred
	 * removals: a libnetwork deadlock (moby/moby#46661, fixed in
	 * 20.10.27) leaves every later DELETE unanswered. */
	log_warn("shutdown: Docker has finished no removal in %.0f s; the "
	    "daemon may be stuck (its goroutine dump: SIGUSR1 to dockerd)",
	    seconds);
}

static void
docker_abort_all(struct backend *b, const char *why)
{
	docker_abort(b->impl, why);
}

static void
docker_backend_free(struct backend *b)
{
	if (lane.docker == b->impl)
		lane.docker = NULL;
	docker_free(b->impl);
	free(b);
}

static const struct backend_ops docker_ops = {
	.name = "docker",
	.create = docker_create,
	.remove = docker_remove,
	.start = docker_start,
	.stop = docker_stop,
	.pause = docker_pause,
	.resume = docker_resume,
	.status = docker_status,
	.stats = docker_stats,
	.netns = docker_netns,
	.list_ours = docker_list_ours,
	.logs = docker_logs,
	.id_abbreviates = docker_id_abbreviates,
	.widen_for_shutdown = docker_widen_for_shutdown,
	.stalled = docker_stalled,
	.abort = docker_abort_all,
	.free = docker_backend_free,
};

struct backend *
backend_docker_new(struct event_base *base, const struct sandboxd_config *cfg,
    struct error *err)
{
	struct backend *b = xcalloc(1, sizeof *b);
	char *addr;

	(void)err;
	/* unix:///var/run/docker.sock -> unix:/var/run/docker.sock (the
	 * configuration checked the form). */
	addr = xasprintf("unix:%s", cfg->docker_host + strlen("unix://"));
	b->ops = &docker_ops;
	lane.max_inflight = (size_t)cfg->docker_parallel;
	lane.want_ends = (size_t)cfg->remove_parallel;
	lane.exits_safe = 0;
	b->impl = lane.docker = docker_new(base, addr, lane.max_inflight,
	    lane_ends());
	docker_version(b->impl, version_cb, NULL);
	free(addr);
	return b;
}
