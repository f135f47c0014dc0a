/*
 * Creating a sandbox: check the request, make its workspace (or restore a
 * kept one) and socket directory, take a port, create and start its
 * container, then wait until its agent answers /healthz with its token
 * (the wait a start of a stopped sandbox also uses). A create that fails
 * undoes everything it made, step by step, before it reports.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/event.h>

#include "backend.h"
#include "egress.h"
#include "lifecycle_internal.h"
#include "log.h"
#include "oss.h"
#include "shared.h"
#include "xmalloc.h"

/* How often a starting container is asked whether it died. */
#define STATUS_CHECK_INTERVAL 0.5
#define PROBE_TIMEOUT 2.0

static void
append(const char ***v, size_t *n, const char *s)
{
	*v = xreallocarray(*v, *n + 2, sizeof **v);
	(*v)[(*n)++] = s;
	(*v)[*n] = NULL;
}

static void create_failed(struct lifecycle_op *op, const struct error *err);
static void probe_next(struct lifecycle_op *op);

static void
announced_cb(struct sandbox *sb, void *arg)
{
	struct lifecycle_op *op = arg;

	if (op->done != NULL)
		op->done(sb, NULL, op->arg);
	lifecycle_op_end(op);
}

static void
create_succeeded(struct lifecycle_op *op)
{
	struct sandbox *sb = op->sb;
	double took = timing_monotonic() - op->started;

	sandbox_set_state(sb, sb->for_pool ? SB_WARM : SB_RUNNING);
	/* A session's clock starts when its sandbox is ready to use. */
	sessions_touch_sandbox(sb);
	metrics_count(M_CREATES, sb->type_name);
	metrics_create_seconds(sb->type_name, took);
	log_info("sandbox %s (%s) ready in %.0f ms%s", sb->name, sb->type_name,
	    took * 1e3, sb->for_pool ? " for the pool" : "");
	/* The other instances know it before its name is handed out, so
	 * any of them answers the next request about it. */
	if (shared_enabled()) {
		shared_publish(sb, announced_cb, op);
		return;
	}
	if (op->done != NULL)
		op->done(sb, NULL, op->arg);
	lifecycle_op_end(op);
}

static void
probed_cb(struct sandbox *sb, int ok, const char *why, void *arg)
{
	struct lifecycle_op *op = arg;

	if (!ok)
		snprintf(op->last_probe, sizeof op->last_probe, "%s", why);
	if (ok) {
		/* The engine counts its CPU time from its start, not from a
		 * resume (lifecycle_stats). */
		if (op->kind != OP_RESUME) {
			sb->cpu_ns = 0;
			sb->cpu_at = timing_monotonic();
		}
		if (op->kind == OP_CREATE) {
			create_succeeded(op);
		} else {
			/* A start of a warm one (already running) leaves it
			 * in its pool. */
			sandbox_set_state(op->sb, op->prev_state == SB_WARM ?
			    SB_WARM : SB_RUNNING);
			op->done(op->sb, NULL, op->arg);
			lifecycle_op_end(op);
		}
		return;
	}
	probe_next(op);
}

void
lifecycle_fail_op(struct lifecycle_op *op, const struct error *err)
{
	if (op->kind == OP_CREATE) {
		create_failed(op, err);
		return;
	}
	sandbox_set_error(op->sb, "%s", err->msg);
	sandbox_set_state(op->sb, SB_UNHEALTHY);
	op->done(op->sb, err, op->arg);
	lifecycle_op_end(op);
}

static void
logs_cb(const char *text, const struct error *err, void *arg)
{
	struct lifecycle_op *op = arg;
	struct error e = op->err;
	const char *tail;

	if (err == NULL && text != NULL && *text != '\0') {
		size_t n = strlen(text);

		while (n > 0 && text[n - 1] == '\n')
			n--;
		tail = text;
		/* The last line says most; keep the message short. */
		for (size_t i = 0; i + 1 < n; i++) {
			if (text[i] == '\n')
				tail = text + i + 1;
		}
		error_set(&e, op->err.status, "%s; its last output: %.*s",
		    op->err.msg, (int)(n - (size_t)(tail - text)), tail);
	}
	lifecycle_fail_op(op, &e);
}

static void
status_cb(enum backend_state state, int exit_code, const struct error *err,
    void *arg)
{
	struct lifecycle_op *op = arg;
	struct sandbox *sb = op->sb;

	op->status_checking = 0;
	/* The limit is the agent's, from its container's start: time the
	 * status answer took (Docker busy with other calls) is not. */
	op->deadline += timing_monotonic() - op->status_sent;
	if (err == NULL && state != BACKEND_RUNNING && state != BACKEND_CREATED) {
		error_set(&op->err, 502, "sandbox %s: the container is %s (exit "
		    "code %d) before its agent answered", sb->name,
		    backend_state_name(state), exit_code);
		sd.backend->ops->logs(sd.backend, sb->container_id, 5, logs_cb,
		    op);
		return;
	}
	probe_next(op);
}

static void
probe_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lifecycle_op *op = arg;
	struct sandbox *sb = op->sb;
	double now = timing_monotonic();

	(void)fd;
	(void)what;
	if (sb->release_requested && op->kind == OP_CREATE) {
		struct error err;

		error_set(&err, 409, "sandbox %s was released while starting",
		    sb->name);
		lifecycle_fail_op(op, &err);
		return;
	}
	if (now > op->deadline) {
		struct error err;

		error_set(&err, 504, "sandbox %s: its agent was not healthy "
		    "within %.0f s%s%s%s", sb->name, sd.cfg.create_timeout,
		    *op->last_probe != '\0' ? " (" : "", op->last_probe,
		    *op->last_probe != '\0' ? ")" : "");
		lifecycle_fail_op(op, &err);
		return;
	}
	if (now >= op->next_status_check && sb->container_id != NULL) {
		op->next_status_check = now + STATUS_CHECK_INTERVAL;
		op->status_checking = 1;
		op->status_sent = now;
		sd.backend->ops->status(sd.backend, sb->container_id, status_cb,
		    op);
		return;
	}
	agent_probe(sb, PROBE_TIMEOUT, probed_cb, op);
}

/* Ask the agent again shortly: quickly at first (its container runs
 * once the backend answered; the agent listens a millisecond or two
 * after), then less often. */
static void
probe_next(struct lifecycle_op *op)
{
	struct timeval tv;

	tv = timing_timeval(op->delay);
	if (op->timer == NULL)
		op->timer = evtimer_new(sd.base, probe_timer_cb, op);
	evtimer_add(op->timer, &tv);
	op->delay *= 1.5;
	if (op->delay > 0.1)
		op->delay = 0.1;
}

static void
policed_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	(void)sb;
	if (err != NULL)
		lifecycle_fail_op(arg, err);
	else
		lifecycle_wait_healthy(arg);
}

void
lifecycle_police_then_wait(struct lifecycle_op *op)
{
	lifecycle_police(op->sb, policed_cb, op);
}

/* The deadline counts from here: the container has started (Docker
 * answered its start), whatever the create waited in sandboxd's queue for
 * Docker before. */
void
lifecycle_wait_healthy(struct lifecycle_op *op)
{
	op->deadline = timing_monotonic() + sd.cfg.create_timeout;
	op->next_status_check = timing_monotonic() + STATUS_CHECK_INTERVAL;
	op->delay = 0.001;
	agent_probe(op->sb, PROBE_TIMEOUT, probed_cb, op);
}

static void
created_cb(const char *id, const char *agent_addr, const struct error *err,
    void *arg)
{
	struct lifecycle_op *op = arg;
	struct sandbox *sb = op->sb;

	if (id != NULL && sb->container_id == NULL) {
		sb->container_id = xstrdup(id);
		sandbox_changed(sb);
	}
	if (agent_addr != NULL && sb->agent_addr == NULL)
		sb->agent_addr = xstrdup(agent_addr);
	if (err != NULL) {
		struct error e = *err;

		/* A missing image is the operator's to fix, not the
		 * client's: 500, with how to fix it. */
		if (err->status == 404 && strstr(err->msg, "image") != NULL) {
			error_prefix(&e, "sandbox type %s needs image %s (build it "
			    "with tools/build-image %s)", sb->type_name, sb->image,
			    sb->type_name);
			e.status = 500;
		}
		create_failed(op, &e);
		return;
	}
	lifecycle_police_then_wait(op);
}

/* The type's cap_add, and with run_as what the agent (root) needs to
 * serve a user: switch to it (SETUID, SETGID), signal its commands
 * (KILL), and write in its workspace and hand files over (DAC_OVERRIDE,
 * FOWNER, CHOWN). Commands lose them all when the agent drops to the
 * user. */
static void
run_as_caps(const struct sandbox_type *t, struct config_list *caps)
{
	static const char *const needed[] = {
		"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID",
	};

	for (size_t i = 0; i < t->cap_add.n; i++)
		config_list_add(caps, t->cap_add.v[i]);
	for (size_t i = 0; t->run_as != NULL &&
	    i < sizeof needed / sizeof needed[0]; i++) {
		size_t j = 0;

		while (j < caps->n && strcasecmp(caps->v[j], needed[i]) != 0 &&
		    !(strncasecmp(caps->v[j], "CAP_", 4) == 0 &&
		    strcasecmp(caps->v[j] + 4, needed[i]) == 0))
			j++;
		if (j == caps->n)
			config_list_add(caps, needed[i]);
	}
}

static void
create_sent_cb(void *arg)
{
	struct lifecycle_op *op = arg;

	metrics_create_queue_seconds(op->sb->type_name,
	    timing_monotonic() - op->queued);
}

static void
start_container(struct lifecycle_op *op)
{
	struct sandbox *sb = op->sb;
	const struct sandbox_type *t = sb->type;
	struct backend_spec spec = { 0 };
	struct backend_mount *mounts;
	const char **cmd = NULL, **env = NULL;
	size_t ncmd = 0, nenv = 0, nmounts_extra = 0;
	struct config_list own = { 0 }, caps = { 0 };
	const char *k;
	json_t *v;

	run_as_caps(t, &caps);
	if (t->tools != NULL) {
		append(&cmd, &ncmd, "--tools");
		append(&cmd, &ncmd, t->tools);
	}
	if (t->mcp_config != NULL) {
		append(&cmd, &ncmd, "--mcp-config");
		append(&cmd, &ncmd, t->mcp_config);
	}
	for (size_t i = 0; i < t->agent_args.n; i++)
		append(&cmd, &ncmd, t->agent_args.v[i]);

	/* Strings made here live in own until the spec is handed over. */
	config_list_add(&own, "");
	free(own.v[0]);
	own.v[0] = xasprintf("SECRET_TOKEN=%s", sb->token);
	/* The type's run_as alone says who commands run as: the
	 * capabilities and the workspace's owner follow from it. */
	{
		char *e = xasprintf("AGENT_RUN_AS=%s", t->run_as != NULL ?
		    t->run_as : "");

		config_list_add(&own, e);
		free(e);
	}
	json_object_foreach(t->environment, k, v) {
		if (strcmp(k, "AGENT_RUN_AS") != 0 && (sb->environment == NULL ||
		    json_object_get(sb->environment, k) == NULL)) {
			char *e = xasprintf("%s=%s", k, json_string_value(v));

			config_list_add(&own, e);
			free(e);
		}
	}
	if (sb->environment != NULL) {
		json_object_foreach(sb->environment, k, v) {
			char *e = xasprintf("%s=%s", k, json_string_value(v));

			config_list_add(&own, e);
			free(e);
		}
	}
	for (size_t i = 0; i < own.n; i++)
		append(&env, &nenv, own.v[i]);
	mounts = xreallocarray(NULL, sd.cfg.nro_mounts + 2, sizeof *mounts);
	mounts[0] = (struct backend_mount){ sb->mount_dir, "/workspace", 0 };
	for (size_t i = 0; i < sd.cfg.nro_mounts; i++)
		mounts[i + 1] = (struct backend_mount){ sd.cfg.ro_mounts[i].host,
		    sd.cfg.ro_mounts[i].container, 1 };
	/* Its resolver is the only one it may ask. */
	if (sandbox_has_network(sb))
		mounts[++nmounts_extra + sd.cfg.nro_mounts] = (struct
		    backend_mount){ egress_resolv_conf(), "/etc/resolv.conf", 1 };

	spec.name = sb->name;
	spec.image = sb->image;
	spec.instance = state_instance();
	spec.sandbox_id = sb->id;
	spec.type = sb->type_name;
	spec.session = sb->session;
	spec.args = cmd;
	spec.entrypoint = &t->entrypoint;
	spec.env = env;
	spec.mounts = mounts;
	spec.nmounts = sd.cfg.nro_mounts + 1 + nmounts_extra;
	spec.agent_dir = sb->sock_dir;
	spec.memory = t->memory;
	spec.nano_cpus = t->nano_cpus;
	spec.pids = t->pids;
	spec.network = strcmp(t->network, "bridge") == 0 ? BACKEND_NET_BRIDGE :
	    BACKEND_NET_NONE;
	spec.cap_add = &caps;
	spec.network_name = sd.cfg.network;
	spec.host_port = sb->port;
	/* Other hosts' instances reach it there (REDIS_ENABLED). */
	spec.host_ip = sd.cfg.redis_enabled ? sd.cfg.advertise_addr : NULL;
	spec.sent = create_sent_cb;
	op->queued = timing_monotonic();
	sd.backend->ops->create(sd.backend, &spec, created_cb, op);
	free(cmd);
	free(env);
	free(mounts);
	/* The token was in there. */
	explicit_bzero(own.v[0], strlen(own.v[0]));
	config_list_free(&own);
	config_list_free(&caps);
}

static void
restored_cb(const struct error *err, void *arg)
{
	struct lifecycle_op *op = arg;

	if (err != NULL) {
		create_failed(op, err);
		return;
	}
	start_container(op);
}

/* Undo a failed create, step by step, then report. */
static void
undo_finish(struct lifecycle_op *op)
{
	struct sandbox *sb = op->sb;
	struct error err = op->err;

	metrics_count(M_CREATE_FAILURES, sb->type_name);
	log_warn("sandbox %s (%s) not created: %s", sb->name, sb->type_name,
	    err.msg);
	if (sb->port > 0) {
		ports_release(sd.ports, sb->port);
		if (op->port_claimed)
			shared_release_port(sb->port);
	}
	sb->port = 0;
	sb->state = SB_RELEASED;
	sandbox_changed(sb);
	if (shared_enabled())
		shared_unreserve(sb->name);
	/* Whoever asked for a release meanwhile got what they wanted. */
	sb->release_requested = 0;
	lifecycle_notify_waiters(sb, NULL);
	if (op->done != NULL)
		op->done(sb, &err, op->arg);
	sandbox_forget(sb);
	lifecycle_op_end(op);
}

static void
undo_workspace_cb(const struct error *err, void *arg)
{
	struct lifecycle_op *op = arg;

	if (err != NULL)
		log_warn("%s", err->msg);
	undo_finish(op);
}

static void
undo_container_cb(const struct error *err, void *arg)
{
	struct lifecycle_op *op = arg;
	struct sandbox *sb = op->sb;

	if (err != NULL)
		log_error("cannot remove the container of failed sandbox %s: %s",
		    sb->name, err->msg);
	if (sb->sock_dir != NULL)
		workspace_remove_sock_dir(sb->sock_dir);
	if (sb->owns_mount && sb->mount_dir != NULL)
		workspace_remove(sb->mount_dir, undo_workspace_cb, op);
	else
		undo_finish(op);
}

static void
create_failed(struct lifecycle_op *op, const struct error *err)
{
	struct sandbox *sb = op->sb;

	op->err = *err;
	if (op->timer != NULL)
		evtimer_del(op->timer);
	egress_free(sb->egress);
	sb->egress = NULL;
	sb->state = SB_RELEASING;
	sandbox_changed(sb);
	/* Also when Docker failed to answer the create: it may still have
	 * made the container, which has our name. */
	sd.backend->ops->remove(sd.backend, lifecycle_backend_id(sb),
	    undo_container_cb, op);
}

/* Environment values: strings (numbers and booleans are written out);
 * names without '='; the token is ours. */
static int
check_environment(json_t *env, struct error *err)
{
	const char *k;
	json_t *v;

	if (env == NULL)
		return 0;
	if (!json_is_object(env)) {
		error_set(err, 400, "environment must be an object of strings");
		return -1;
	}
	json_object_foreach(env, k, v) {
		if (*k == '\0' || strchr(k, '=') != NULL ||
		    strcmp(k, "SECRET_TOKEN") == 0 ||
		    strcmp(k, "AGENT_RUN_AS") == 0) {
			error_set(err, 400, "environment: '%s' is not a variable "
			    "a caller may set", k);
			return -1;
		}
		if (!json_is_string(v) && !json_is_number(v) &&
		    !json_is_boolean(v)) {
			error_set(err, 400, "environment: %s must be a string", k);
			return -1;
		}
	}
	return 0;
}

static json_t *
environment_strings(json_t *env)
{
	json_t *out = json_object(), *v;
	const char *k;

	json_object_foreach(env, k, v) {
		if (json_is_string(v)) {
			json_object_set(out, k, v);
		} else {
			char *s = json_dumps(v, JSON_ENCODE_ANY);

			json_object_set_new(out, k, json_string(s));
			free(s);
		}
	}
	return out;
}

static void
begin(struct lifecycle_op *op)
{
	if (op->restore)
		lifecycle_restore(op, restored_cb);
	else
		start_container(op);
}

static void
reserved_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	(void)sb;
	if (err != NULL)
		create_failed(arg, err);
	else
		begin(arg);
}

/* With Redis: the instance limit over every instance, then begin. */
static void
reserve_then_begin(struct lifecycle_op *op)
{
	if (shared_enabled() && sd.cfg.max_instances > 0)
		shared_reserve(op->sb, reserved_cb, op);
	else
		begin(op);
}

/* With Redis the host port must be no other instance's either (several
 * on one host share PORT_RANGE): when another holds it, the next free one
 * is tried (allocation goes round the range, so the one refused comes
 * back only after the others), at most once round the range. */
static void
port_claimed_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct lifecycle_op *op = arg;
	struct error e;
	int port;

	if (err == NULL) {
		op->port_claimed = 1;
		reserve_then_begin(op);
		return;
	}
	if (err->status == 409) {
		ports_release(sd.ports, sb->port);
		sb->port = 0;
	}
	if (err->status != 409) {
		create_failed(op, err);
		return;
	}
	if (op->port_claims > sd.cfg.port_hi - sd.cfg.port_lo) {
		error_set(&e, 503, "no free host port left in PORT_RANGE %d-%d: "
		    "those free here are held by other instances "
		    "(REDIS_PORT_KEY)", sd.cfg.port_lo, sd.cfg.port_hi);
		create_failed(op, &e);
		return;
	}
	log_info("sandbox %s: %s; trying another", sb->name, err->msg);
	if ((port = ports_alloc(sd.ports, &e)) < 0) {
		create_failed(op, &e);
		return;
	}
	sb->port = port;
	sandbox_changed(sb);
	op->port_claims++;
	shared_claim_port(sb, port_claimed_cb, op);
}

struct sandbox *
lifecycle_create(const struct create_request *creq, sandbox_done_cb done,
    void *arg, struct error *err)
{
	char *mount = NULL, *storage = NULL;
	json_t *network = NULL;
	struct lifecycle_op *op;
	struct sandbox *sb;
	int port = 0;

	size_t live = sandbox_count_live();

	if (shared_enabled()) {
		if (shared_down_error(err) < 0)
			return NULL;
		live += shared_count_live();
	}
	if (sd.cfg.max_instances > 0 && live >= (size_t)sd.cfg.max_instances) {
		error_set(err, 503, "the instance limit is reached: %zu live "
		    "sandboxes (MAX_SANDBOX_INSTANCES=%ld)", live,
		    sd.cfg.max_instances);
		return NULL;
	}
	if (check_environment(creq->environment, err) < 0)
		return NULL;
	if (creq->network != NULL) {
		if (strcmp(creq->type->network, "bridge") != 0) {
			error_set(err, 400, "network: type %s has no network to "
			    "set a policy for", creq->type->name);
			return NULL;
		}
		if (egress_network_check(creq->network, "network", &network,
		    err) < 0)
			return NULL;
	}
	if (creq->mount_dir != NULL &&
	    workspace_check_mount(creq->mount_dir, &mount, err) < 0) {
		json_decref(network);
		return NULL;
	}
	if (creq->storage_path != NULL && (oss_enabled() ?
	    oss_storage_path(creq->storage_path, NULL, &storage, err) :
	    workspace_storage_path(creq->storage_path, &storage, err)) < 0) {
		free(mount);
		json_decref(network);
		return NULL;
	}
	if (strcmp(creq->type->network, "bridge") == 0 &&
	    (port = ports_alloc(sd.ports, err)) < 0) {
		free(mount);
		free(storage);
		json_decref(network);
		return NULL;
	}

	sb = sandbox_new(creq->type);
	sb->port = port;
	sb->network = network;
	sb->for_pool = creq->for_pool;
	if (creq->environment != NULL)
		sb->environment = environment_strings(creq->environment);
	if (creq->meta != NULL)
		json_object_update(sb->meta, creq->meta);
	if (creq->session != NULL)
		sessions_bind(sb, creq->session);
	if (mount != NULL) {
		sb->mount_dir = mount;
	} else {
		sb->mount_dir = workspace_make(sb->id, creq->type->run_as, err);
		sb->owns_mount = 1;
	}
	if (storage == NULL && oss_enabled())
		oss_storage_path(NULL, sb->id, &storage, err);
	else if (storage == NULL && sd.cfg.storage_folder != NULL)
		storage = xasprintf("%s/%s", sd.cfg.storage_folder, sb->id);
	sb->storage_path = storage;
	sandbox_changed(sb);
	if (sb->mount_dir != NULL)
		sb->sock_dir = workspace_make_sock_dir(sb->id, err);
	if (sb->mount_dir == NULL || sb->sock_dir == NULL) {
		if (sb->port > 0)
			ports_release(sd.ports, sb->port);
		if (sb->owns_mount && sb->mount_dir != NULL)
			rmdir(sb->mount_dir);
		sandbox_forget(sb);
		return NULL;
	}

	op = lifecycle_op_new(sb, OP_CREATE, done, arg);
	/* From object storage whatever is there (maybe nothing); from
	 * STORAGE_FOLDER what was kept. */
	op->restore = storage != NULL && creq->storage_path != NULL &&
	    (oss_enabled() || workspace_is_dir(storage));
	/* With Redis the host port and the limit count every instance's,
	 * each in one atomic step there. */
	if (shared_enabled() && sb->port > 0) {
		op->port_claims = 1;
		shared_claim_port(sb, port_claimed_cb, op);
	} else {
		reserve_then_begin(op);
	}
	return sb;
}
