/*
 * Bringing a crun sandbox up: create (its bundle, its network, crun run)
 * and start (crun's state of the stopped sandbox goes, the same bundle runs
 * again). The overlay root is mounted by the child that becomes crun, in
 * a mount namespace of that crun alone; crun copies it into the
 * sandbox's, and nothing of it stays on the host.
 */
#include "backend_crun.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "image_store.h"
#include "log.h"
#include "xmalloc.h"

#define CGROUP_PARENT "/sandboxd"

/* In the child that becomes crun run, before exec: a mount namespace of
 * its own (a copy, its mounts private), the overlay root mounted in it,
 * the layers named from their directory (short option strings). */
static int
run_setup(void *arg)
{
	struct crun_op *op = arg;

	/* By path, in this namespace: overlayfs takes no lower layer from
	 * a mount of another namespace (a descriptor opened on the host). */
	if (crun_host_enter(&op->c->host, op->c->crun) < 0 ||
	    chdir(op->c->layers) < 0)
		return -1;
	/* volatile: no sync of the upper layer when the sandbox goes (it is
	 * thrown away then); kernels before 5.10 lack it. */
	if (mount("overlay", op->rootfs, "overlay", 0, op->mount_data) == 0)
		return 0;
	return mount("overlay", op->rootfs, "overlay", 0,
	    op->mount_data_plain);
}

static void started_cb(int status, const char *out, const char *errtext,
    const struct error *fail_, void *arg);

/* What an error names a step of crun by: "run", or "run (start)" when
 * the op is a start. */
static const char *
step(const struct crun_op *op, const char *verb, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s", verb, op->kind == CRUN_OP_START ?
	    " (start)" : "");
	return buf;
}

/* A part of a (re)start is over (crun run or create, the network beside
 * it): when both are, a created sandbox starts; once it runs, its port
 * is published and what a restart needs saved. */
static void
part_done(struct crun_op *op)
{
	struct crun_box *box = op->box;
	struct error e;
	int fd;

	if (--op->pending > 0)
		return;
	if (op->start_after && !op->failed) {
		const char *args[] = { "start", box->name, NULL };

		op->start_after = 0;
		op->pending = 1;
		crun_op_crun(op, args, -1, NULL, started_cb);
		return;
	}
	if (!op->failed && box->host_port > 0 && box->publish == NULL &&
	    (box->publish = crun_publish_new(op->c->base, box->host_ip,
	    box->host_port, box->agent_addr, &e)) == NULL)
		crun_op_part_failed(op, &e);
	if (!op->failed && (fd = open(box->bundle, O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) >= 0) {
		if (crun_box_save(box, fd, &e) < 0)
			log_warn("%s", e.msg);
		close(fd);
	}
	crun_op_idle(op->c, box);
	crun_op_finish(op);
}

static void
ran_cb(int status, const char *out, const char *errtext,
    const struct error *fail_, void *arg)
{
	struct crun_op *op = arg;
	struct crun_box *box = op->box;
	char path[4096], buf[32], what[32];
	struct error e;
	ssize_t n = -1;
	pid_t pid = 0;
	int fd;

	(void)out;
	if (crun_op_job_failed(op, step(op, op->start_after ? "create" : "run",
	    what, sizeof what), status, errtext, fail_) < 0) {
		box->state = BACKEND_DEAD;
		part_done(op);
		return;
	}
	snprintf(path, sizeof path, "%s/pid", box->bundle);
	if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
	}
	if (n > 0) {
		buf[n] = '\0';
		pid = (pid_t)strtol(buf, NULL, 10);
	}
	if (pid > 0) {
		crun_box_watch(box, pid);
	} else {
		error_set(&e, 500, "crun run left no pid of the sandbox");
		crun_op_part_failed(op, &e);
		box->state = BACKEND_DEAD;
	}
	part_done(op);
}

/* The sandbox's first program runs (crun start of a created one). */
static void
started_cb(int status, const char *out, const char *errtext,
    const struct error *fail_, void *arg)
{
	struct crun_op *op = arg;
	char what[32];

	(void)out;
	if (crun_op_job_failed(op, step(op, "start", what, sizeof what),
	    status, errtext, fail_) < 0)
		op->box->state = BACKEND_DEAD;
	part_done(op);
}

static void
run_crun(struct crun_op *op)
{
	struct crun_box *box = op->box;
	char path[4096], pidfile[4096];
	const char *run[] = { "run", "--detach", "--bundle", box->bundle,
	    "--pid-file", pidfile, box->name, NULL };
	const char *create[] = { "create", "--bundle", box->bundle,
	    "--pid-file", pidfile, box->name, NULL };
	int out;

	snprintf(pidfile, sizeof pidfile, "%s/pid", box->bundle);
	unlink(pidfile);
	/* A volatile overlay marks its work directory against being mounted
	 * again as it is (after a crash its upper layer may lack writes); a
	 * start follows a stop, when the sandbox's last process unmounted
	 * it: the mark goes. */
	snprintf(path, sizeof path, "%s/work/work/incompat/volatile/dirty",
	    box->bundle);
	unlink(path);
	for (int i = 0; i < 2; i++) {
		*strrchr(path, '/') = '\0';
		rmdir(path);
	}
	snprintf(path, sizeof path, "%s/log", box->bundle);
	out = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC,
	    0600);
	if (out < 0) {
		struct error e;

		error_set_errno(&e, 500, errno, "crun: cannot open the "
		    "sandbox's log");
		crun_op_part_failed(op, &e);
		part_done(op);
		return;
	}
	op->rootfs = xasprintf("%s/rootfs", box->bundle);
	op->mount_data_plain = xasprintf("lowerdir=%s,upperdir=%s/upper,"
	    "workdir=%s/work", box->lowerdir, box->bundle, box->bundle);
	op->mount_data = xasprintf("%s,volatile", op->mount_data_plain);
	crun_op_crun(op, op->start_after ? create : run, out, run_setup,
	    ran_cb);
	close(out);
}

/* hostname, hosts (with its address on the bridge) and resolv.conf. */
static int
write_etc(struct crun_op *op)
{
	struct crun_box *box = op->box;
	int fd = open(box->bundle, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;

	struct error e;

	if (fd < 0) {
		error_set_errno(&e, 500, errno, "crun: the sandbox's directory");
		crun_op_part_failed(op, &e);
		return -1;
	}
	rc = crun_config_write_etc(fd, box->name, box->net != NULL ?
	    crun_net_ip(box->net) : NULL, &e);
	close(fd);
	if (rc < 0)
		crun_op_part_failed(op, &e);
	return rc;
}

/* The core's egress policy is in the sandbox's namespace. */
static void
policed_cb(const struct error *err, void *arg)
{
	struct crun_op *op = arg;

	op->policing = 0;
	if (op->answered) {
		/* Given up meanwhile: only the op is left to free. */
		crun_op_finish(op);
		return;
	}
	if (err != NULL)
		crun_op_part_failed(op, err);
	part_done(op);
}

/* The network is on: /etc/hosts gets the sandbox's address (the file
 * crun bound in, rewritten in place), then the core polices it. */
static void
attached_cb(const struct error *err, void *arg)
{
	struct crun_op *op = arg;
	struct error e;
	int ns;

	if (err != NULL)
		crun_op_part_failed(op, err);
	else if (!op->failed && write_etc(op) == 0 && op->start_after) {
		if ((ns = crun_net_ns_dup(op->box->net)) >= 0) {
			op->policing = 1;
			op->police(op->box->name, ns, policed_cb, op);
			return;
		}
		error_set_errno(&e, 500, errno, "crun: the network namespace "
		    "of sandbox %s", op->box->name);
		crun_op_part_failed(op, &e);
	}
	part_done(op);
}

/* crun run, and beside it the network's CNI ADD (the sandbox joins its
 * namespace at once; its agent needs no network to start): the create
 * answers when both have. With the core's police, crun create instead,
 * and crun start once the network is up and policed: no program of the
 * sandbox's runs before its policy holds. */
static void
run_parts(struct crun_op *op)
{
	op->pending = op->box->net != NULL ? 2 : 1;
	op->start_after = op->box->net != NULL && op->police != NULL;
	if (op->box->net != NULL)
		crun_net_attach(op->c->jobs, &op->c->net, op->box->net,
		    attached_cb, op);
	run_crun(op);
}

/* The bundle: its directory, the overlay's upper and work directories,
 * the mount point of its root. */
static int
make_bundle(struct crun *c, const char *name, struct error *err)
{
	static const struct {
		const char *name;
		mode_t mode;
	} dirs[] = { { "upper", 0755 }, { "work", 0700 }, { "rootfs", 0755 } };
	int fd, rc = 0;

	if (mkdirat(c->bundles_fd, name, 0700) < 0) {
		error_set_errno(err, errno == EEXIST ? 409 : 500, errno,
		    "crun: cannot make the directory of sandbox %s", name);
		return -1;
	}
	fd = openat(c->bundles_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
	for (size_t i = 0; fd >= 0 && rc == 0 && i < 3; i++)
		rc = mkdirat(fd, dirs[i].name, dirs[i].mode);
	if (fd < 0 || rc < 0) {
		error_set_errno(err, 500, errno, "crun: cannot make the "
		    "directory of sandbox %s", name);
		rc = -1;
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

static int
write_config(struct crun_box *box, json_t *config, struct error *err)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/config.json", box->bundle);
	if (json_dump_file(config, path, JSON_COMPACT) < 0) {
		error_set_errno(err, 500, errno, "crun: cannot write the "
		    "configuration of sandbox %s", box->name);
		return -1;
	}
	return 0;
}

void
crun_create(struct backend *b, const struct backend_spec *spec,
    backend_created_cb done, void *arg)
{
	struct crun *c = b->impl;
	struct crun_op *op = crun_op_new(c, CRUN_OP_CREATE, spec->name, arg);
	const struct image_store_image *img;
	struct crun_config_in in = { 0 };
	struct config_list caps = { 0 };
	struct crun_box *box;
	json_t *config;

	op->created = done;
	op->sent = spec->sent;
	op->police = b->police;
	op->agent_addr = xasprintf("unix:%s/agent.sock", spec->agent_dir);
	if (crun_box_find(c->boxes, spec->name) != NULL) {
		crun_op_defer_error(op, 409, "crun: a sandbox named %s exists",
		    spec->name);
		return;
	}
	if ((img = image_store_get(c->images, spec->image, &op->err)) == NULL) {
		op->failed = 1;
		crun_op_defer(op);
		return;
	}
	crun_config_caps(spec, &caps);
	in.seccomp_b64 = crun_seccomp_bpf_base64(&caps, &op->err);
	config_list_free(&caps);
	if (in.seccomp_b64 == NULL) {
		op->failed = 1;
		crun_op_defer(op);
		return;
	}
	box = op->box = crun_box_new(c->boxes, c->bundles, spec->name);
	box->busy = 1;
	box->agent_addr = xstrdup(op->agent_addr);
	box->cgroup = xasprintf(CGROUP_PARENT "/%s", spec->name);
	box->lowerdir = xstrdup(img->lowerdir);
	if (make_bundle(c, spec->name, &op->err) < 0 ||
	    (spec->network == BACKEND_NET_BRIDGE &&
	    (box->net = crun_net_new(spec->name, &op->err)) == NULL)) {
		op->failed = 1;
		crun_op_idle(c, box);
		crun_op_defer(op);
		return;
	}
	in.spec = spec;
	in.image = img->config;
	in.bundle = box->bundle;
	in.cgroup = box->cgroup;
	in.netns = box->net != NULL ? crun_net_ns_path(box->net) : NULL;
	in.swap_limit = c->host.swap_limit;
	in.nofile = c->nofile;
	config = crun_config_build(&in, &op->err);
	if (config == NULL || write_config(box, config, &op->err) < 0) {
		json_decref(config);
		op->failed = 1;
		crun_op_idle(c, box);
		crun_op_defer(op);
		return;
	}
	json_decref(config);
	box->host_port = spec->host_port;
	box->host_ip = spec->host_ip != NULL ? xstrdup(spec->host_ip) : NULL;
	if (write_etc(op) < 0) {
		crun_op_idle(c, box);
		crun_op_defer(op);
		return;
	}
	run_parts(op);
}

/* start: crun keeps a stopped sandbox's state; it goes, and the sandbox
 * runs again on the same bundle (its root's upper layer kept), with a new
 * network namespace when it has a network. */
static void
restart_net_cb(const struct error *err, void *arg)
{
	struct crun_op *op = arg;
	struct crun_box *box = op->box;
	char path[4096];
	json_t *config, *ns;
	size_t i;

	if (err != NULL)
		log_warn("sandbox %s: %s", box->name, err->msg);
	crun_net_free(box->net);
	box->net = crun_net_new(box->name, &op->err);
	snprintf(path, sizeof path, "%s/config.json", box->bundle);
	config = box->net != NULL ? json_load_file(path, 0, NULL) : NULL;
	json_array_foreach(json_object_get(json_object_get(config, "linux"),
	    "namespaces"), i, ns) {
		if (strcmp(json_string_value(json_object_get(ns, "type")),
		    "network") == 0)
			json_object_set_new(ns, "path", json_string(
			    crun_net_ns_path(box->net)));
	}
	if (config == NULL || write_config(box, config, &op->err) < 0) {
		if (config == NULL && box->net != NULL)
			error_set(&op->err, 500, "crun: cannot read the "
			    "configuration of sandbox %s", box->name);
		json_decref(config);
		op->failed = 1;
		crun_op_idle(op->c, box);
		crun_op_finish(op);
		return;
	}
	json_decref(config);
	if (write_etc(op) < 0) {
		crun_op_idle(op->c, box);
		crun_op_finish(op);
		return;
	}
	run_parts(op);
}

static void
cleared_cb(int status, const char *out, const char *errtext,
    const struct error *fail_, void *arg)
{
	struct crun_op *op = arg;

	(void)out;
	if (crun_op_job_done(op, "delete (start)", status, errtext, fail_) < 0)
		return;
	if (op->box->net != NULL) {
		crun_net_down(op->c->jobs, &op->c->net, op->box->net,
		    restart_net_cb, op);
		return;
	}
	if (write_etc(op) < 0) {
		crun_op_idle(op->c, op->box);
		crun_op_finish(op);
		return;
	}
	run_parts(op);
}

struct crun_box *
crun_op_find(struct crun_op *op)
{
	struct crun_box *box = crun_box_find(op->c->boxes, op->id);

	if (box == NULL)
		crun_op_defer_error(op, 404, "no such sandbox: %s", op->id);
	else if (box->busy)
		crun_op_defer_error(op, 409, "sandbox %s is busy with another "
		    "operation", op->id);
	return box != NULL && !box->busy ? box : NULL;
}

void
crun_start(struct backend *b, const char *id, backend_done_cb done, void *arg)
{
	struct crun_op *op = crun_op_new(b->impl, CRUN_OP_START, id, arg);
	const char *args[] = { "delete", "--force", id, NULL };
	struct crun_box *box;

	op->done = done;
	op->police = b->police;
	if ((box = op->box = crun_op_find(op)) == NULL)
		return;
	if (box->state == BACKEND_RUNNING) {
		crun_op_defer(op);
		return;
	}
	if (box->state == BACKEND_PAUSED) {
		crun_op_defer_error(op, 409, "sandbox %s is paused: resume it", id);
		return;
	}
	box->busy = 1;
	crun_op_crun(op, args, -1, NULL, cleared_cb);
}

