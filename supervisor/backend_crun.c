/*
 * The daemonless backend (CONTAINER_DEPLOYMENT=crun): sandboxd runs each
 * sandbox with crun itself, no container engine in the path. A sandbox is
 * a bundle directory of ours ($SANDBOXD_STATE_DIR/crun/sandboxes/<name>):
 * config.json (backend_crun_config.c), the upper and work directories of
 * its overlay root (the image store's layers below it, shared by every
 * sandbox of the image), its hostname, hosts and resolv.conf, its output
 * (log, bounded) and sandbox.json (backend_crun_box.c). crun's own state
 * is under $SANDBOXD_STATE_DIR/crun/state.
 *
 * `crun run --detach` starts it and exits: the sandbox's first process
 * (its agent) comes back to sandboxd, a child subreaper, which reaps it,
 * and its exit is seen at once through a pidfd on the loop. The overlay
 * root is mounted just before crun runs, in a mount namespace of that
 * crun alone (a spawn setup): the sandbox's own namespace, a copy, keeps
 * it; nothing is mounted on the host, nothing needs unmounting when the
 * sandbox goes (the last process of the sandbox takes it along).
 *
 * Status, the list of ours and stats answer from what sandboxd knows and
 * the cgroup's files, with no process; create and start
 * (backend_crun_run.c), pause, resume and remove (backend_crun_stop.c) are
 * crun calls (backend_crun_jobs.c), stop a signal through the pidfd. This
 * file: the operations' plumbing, what answers at once, setting up (the
 * directories, the sandboxes a previous run left, the trash it did not
 * empty) and tearing down.
 */
#include "backend_crun.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "image_store.h"
#include "log.h"
#include "sandboxd.h"
#include "xmalloc.h"

/* A sandbox's output is trimmed to its latest half beyond this. */
#define LOG_MAX (1024 * 1024)
#define LOG_TRIM_SECONDS 10
/* What logs reads of the end of it. */
#define LOG_TAIL (64 * 1024)

static const struct backend_ops crun_ops;

struct crun_op *
crun_op_new(struct crun *c, enum crun_op_kind kind, const char *id, void *arg)
{
	struct crun_op *op = xcalloc(1, sizeof *op);

	op->c = c;
	op->kind = kind;
	op->id = xstrdup(id);
	op->arg = arg;
	TAILQ_INSERT_TAIL(&c->ops, op, entry);
	return op;
}


/* A remove waiting for box (busy until now) starts. */
void
crun_op_idle(struct crun *c, struct crun_box *box)
{
	struct crun_op *op;

	box->busy = 0;
	TAILQ_FOREACH(op, &c->ops, entry) {
		if (op->waiting && op->box == box) {
			op->waiting = 0;
			crun_op_remove_begin(op);
			return;
		}
	}
}

/* A backend_container list of ours; the strings are the boxes'. */
static void
answer_list(struct crun_op *op)
{
	struct crun_box *box;
	struct backend_container *v;
	size_t n = 0, cap = 16;

	v = xcalloc(cap, sizeof *v);
	for (box = crun_boxes_first(op->c->boxes); box != NULL;
	    box = crun_boxes_next(box)) {
		if (op->not_running && box->state == BACKEND_RUNNING)
			continue;
		if (n == cap)
			v = xreallocarray(v, cap *= 2, sizeof *v);
		v[n].id = v[n].name = box->name;
		v[n].state = box->state;
		v[n].agent_addr = box->agent_addr;
		n++;
	}
	op->list_done(v, n, NULL, op->arg);
	free(v);
}

/* The last lines of a sandbox's output. */
static void
answer_logs(struct crun_op *op)
{
	char path[4096], *buf = xmalloc(LOG_TAIL + 1), *start;
	struct crun_box *box = crun_box_find(op->c->boxes, op->id);
	ssize_t n = -1;
	off_t size;
	int fd = -1, lines = 0;

	if (box != NULL) {
		snprintf(path, sizeof path, "%s/log", box->bundle);
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd >= 0 && (size = lseek(fd, 0, SEEK_END)) >= 0)
		n = pread(fd, buf, LOG_TAIL, size > LOG_TAIL ? size - LOG_TAIL :
		    0);
	if (fd >= 0)
		close(fd);
	if (n < 0) {
		error_set(&op->err, 404, "no such sandbox: %s", op->id);
		op->logs_done(NULL, &op->err, op->arg);
		free(buf);
		return;
	}
	buf[n] = '\0';
	start = buf + n;
	if (start > buf && start[-1] == '\n')
		start--;
	while (start > buf && lines < op->lines)
		if (*--start == '\n' && ++lines == op->lines)
			start++;
	op->logs_done(start, NULL, op->arg);
	free(buf);
}

/* The namespace sandboxd made for a sandbox with a network and holds
 * (opened again from its first process after a restart). */
static void
answer_netns(struct crun_op *op, const struct error *err)
{
	struct crun_box *box = crun_box_find(op->c->boxes, op->id);
	int fd = -1;

	if (err == NULL && box == NULL) {
		error_set(&op->err, 404, "no such sandbox: %s", op->id);
		err = &op->err;
	} else if (err == NULL && (box->net == NULL ||
	    (box->state != BACKEND_RUNNING && box->state != BACKEND_PAUSED) ||
	    (fd = crun_net_ns_dup(box->net)) < 0)) {
		error_set(&op->err, 409, "crun: sandbox %s is not running "
		    "with a network", op->id);
		err = &op->err;
	}
	op->netns_done(fd, err, op->arg);
}

static void
answer(struct crun_op *op)
{
	const struct error *err = op->failed ? &op->err : NULL;
	struct crun_box *box;
	struct backend_stats st;

	switch (op->kind) {
	case CRUN_OP_CREATE:
		op->created(op->id, op->agent_addr, err, op->arg);
		break;
	case CRUN_OP_REMOVE:
	case CRUN_OP_START:
	case CRUN_OP_STOP:
	case CRUN_OP_PAUSE:
	case CRUN_OP_RESUME:
		op->done(err, op->arg);
		break;
	case CRUN_OP_STATUS:
		box = crun_box_find(op->c->boxes, op->id);
		if (err == NULL && box == NULL) {
			error_set(&op->err, 404, "no such sandbox: %s", op->id);
			err = &op->err;
		}
		op->status_done(err == NULL ? box->state : BACKEND_DEAD,
		    err == NULL ? box->exit_code : -1, err, op->arg);
		break;
	case CRUN_OP_STATS:
		box = crun_box_find(op->c->boxes, op->id);
		if (err == NULL && box == NULL) {
			error_set(&op->err, 404, "no such sandbox: %s", op->id);
			err = &op->err;
		} else if (err == NULL && crun_host_stats(&op->c->host,
		    box->cgroup, &st, &op->err) < 0) {
			err = &op->err;
		}
		op->stats_done(err == NULL ? &st : NULL, err, op->arg);
		break;
	case CRUN_OP_LIST:
		if (err != NULL)
			op->list_done(NULL, 0, err, op->arg);
		else
			answer_list(op);
		break;
	case CRUN_OP_LOGS:
		if (err != NULL)
			op->logs_done(NULL, err, op->arg);
		else
			answer_logs(op);
		break;
	case CRUN_OP_NETNS:
		answer_netns(op, err);
		break;
	}
}

void
crun_op_finish(struct crun_op *op)
{
	if (!op->answered) {
		TAILQ_REMOVE(&op->c->ops, op, entry);
		if (op->ev != NULL)
			event_free(op->ev);
		op->ev = NULL;
		answer(op);
		op->answered = 1;
	}
	/* Given up (crun_abort) while the core's police holds it: freed
	 * when that calls back. */
	if (op->policing)
		return;
	free(op->id);
	free(op->agent_addr);
	free(op->rootfs);
	free(op->mount_data);
	free(op->mount_data_plain);
	free(op);
}

void
crun_op_fail(struct crun_op *op, const struct error *err)
{
	if (!op->failed)
		op->err = *err;
	op->failed = 1;
	crun_op_finish(op);
}

static void
deferred_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	crun_op_finish(arg);
}

/* Answer from the loop's next turn (the callback contract). */
void
crun_op_defer(struct crun_op *op)
{
	static const struct timeval now = { 0, 0 };

	op->ev = event_new(op->c->base, -1, 0, deferred_cb, op);
	event_add(op->ev, &now);
}

void
crun_op_defer_error(struct crun_op *op, int status, const char *fmt, const char *what)
{
	error_set(&op->err, status, fmt, what);
	op->failed = 1;
	crun_op_defer(op);
}

/* The last line a file of the bundle holds (crun's log), at most 1 KiB
 * of it; "" without one. */
static char *
crun_op_last_line(const struct crun_box *box, const char *file)
{
	char path[4096], buf[1024];
	ssize_t n = -1;
	off_t size;
	char *end, *start;
	int fd;

	snprintf(path, sizeof path, "%s/%s", box->bundle, file);
	if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
		if ((size = lseek(fd, 0, SEEK_END)) >= 0)
			n = pread(fd, buf, sizeof buf - 1, size > (off_t)sizeof buf -
			    1 ? size - (off_t)sizeof buf + 1 : 0);
		close(fd);
	}
	if (n <= 0)
		return xstrdup("");
	buf[n] = '\0';
	end = buf + n;
	while (end > buf && end[-1] == '\n')
		*--end = '\0';
	start = strrchr(buf, '\n');
	return xstrdup(start != NULL ? start + 1 : buf);
}

static void
sent_cb(void *arg)
{
	struct crun_op *op = arg;

	op->sent(op->arg);
}

static int
enter(void *arg)
{
	struct crun *c = arg;

	return crun_host_enter(&c->host, c->crun);
}

/* crun as a job: --root ours, --log the bundle's crun.log. */
void
crun_op_crun(struct crun_op *op, const char *const *args, int out_fd,
    int (*setup)(void *), crun_job_done_cb done)
{
	struct crun *c = op->c;
	struct crun_job_spec spec = { 0 };
	const char *argv[16];
	char *log = op->box != NULL ? xasprintf("--log=file:%s/crun.log",
	    op->box->bundle) : NULL;
	size_t n = 0;

	argv[n++] = c->crun;
	argv[n++] = "--root";
	argv[n++] = c->root;
	if (log != NULL)
		argv[n++] = log;
	for (size_t i = 0; args[i] != NULL && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	spec.argv = argv;
	spec.out_fd = out_fd;
	spec.urgent = op->kind != CRUN_OP_CREATE;
	spec.setup = setup != NULL ? setup : enter;
	spec.setup_arg = setup != NULL ? (void *)op : (void *)c;
	spec.started = op->sent != NULL ? sent_cb : NULL;
	crun_jobs_run(c->jobs, &spec, done, op);
	free(log);
}

int
crun_op_job_failed(struct crun_op *op, const char *what, int status,
    const char *errtext, const struct error *fail_)
{
	char *line;

	if (fail_ == NULL && status == 0)
		return 0;
	if (op->failed)
		return -1;
	if (fail_ != NULL) {
		op->err = *fail_;
		error_prefix(&op->err, "crun %s", what);
	} else {
		line = op->box != NULL ? crun_op_last_line(op->box, "crun.log") :
		    xstrdup("");
		error_set(&op->err, 500, "crun %s failed (%s %d): %.400s", what,
		    WIFEXITED(status) ? "status" : "signal", WIFEXITED(status) ?
		    WEXITSTATUS(status) : WTERMSIG(status), line[0] != '\0' ?
		    line : errtext);
		free(line);
	}
	op->failed = 1;
	return -1;
}

int
crun_op_job_done(struct crun_op *op, const char *what, int status,
    const char *errtext, const struct error *fail_)
{
	if (crun_op_job_failed(op, what, status, errtext, fail_) == 0)
		return 0;
	if (op->box != NULL)
		crun_op_idle(op->c, op->box);
	crun_op_finish(op);
	return -1;
}

void
crun_op_part_failed(struct crun_op *op, const struct error *err)
{
	if (!op->failed)
		op->err = *err;
	op->failed = 1;
}

/* ---- what answers at once ------------------------------------------- */

/* An operation that answers from what we know, on the loop's next turn
 * (its callback is set by the caller before that). */
static struct crun_op *
answer_soon(struct backend *b, enum crun_op_kind kind, const char *id,
    void *arg)
{
	struct crun_op *op = crun_op_new(b->impl, kind, id, arg);

	crun_op_defer(op);
	return op;
}

static void
crun_status(struct backend *b, const char *id, backend_status_cb done,
    void *arg)
{
	answer_soon(b, CRUN_OP_STATUS, id, arg)->status_done = done;
}

static void
crun_stats(struct backend *b, const char *id, backend_stats_cb done,
    void *arg)
{
	answer_soon(b, CRUN_OP_STATS, id, arg)->stats_done = done;
}

static void
crun_netns(struct backend *b, const char *id, backend_netns_cb done,
    void *arg)
{
	answer_soon(b, CRUN_OP_NETNS, id, arg)->netns_done = done;
}

static void
crun_list_ours(struct backend *b, const char *instance, int not_running,
    backend_list_cb done, void *arg)
{
	struct crun_op *op = answer_soon(b, CRUN_OP_LIST, instance, arg);

	op->list_done = done;
	op->not_running = not_running;
}

static void
crun_logs(struct backend *b, const char *id, int lines, backend_logs_cb done,
    void *arg)
{
	struct crun_op *op = answer_soon(b, CRUN_OP_LOGS, id, arg);

	op->logs_done = done;
	op->lines = lines > 0 ? lines : 1;
}

/* Ids are the sandboxes' names: nothing abbreviates them. */
static int
crun_id_abbreviates(const char *id, const char *identity)
{
	(void)id;
	(void)identity;
	return 0;
}

static size_t
crun_widen_for_shutdown(struct backend *b, size_t want)
{
	struct crun *c = b->impl;

	if (want > 0)
		crun_jobs_set_parallel(c->jobs, want);
	return crun_jobs_parallel(c->jobs);
}

static void
crun_stalled(struct backend *b, double seconds)
{
	(void)b;
	log_warn("shutdown: crun has finished no removal in %.0f s; a "
	    "sandbox's processes may be stuck in the kernel (ps -eo "
	    "pid,stat,wchan,cmd shows them in state D)", seconds);
}

static void
crun_abort(struct backend *b, const char *why)
{
	struct crun *c = b->impl;
	struct crun_op *op;

	crun_jobs_abort(c->jobs, why);
	/* What waits on no job: deferred answers, stops, waiting removes. */
	while ((op = TAILQ_FIRST(&c->ops)) != NULL) {
		struct error e;

		if (op->box != NULL && op->box->on_exit_arg == op)
			op->box->on_exit = NULL;
		error_set(&e, 503, "%s", why);
		crun_op_fail(op, &e);
	}
}

/* ---- set up, tear down ---------------------------------------------- */

static void
trim_cb(evutil_socket_t fd, short what, void *arg)
{
	struct crun *c = arg;

	(void)fd;
	(void)what;
	crun_boxes_trim_logs(c->boxes, LOG_MAX);
}

/* rm -rf path, waited for (we are exiting: the loop is gone). */
static void
remove_now(const char *path)
{
	pid_t pid = fork();

	if (pid == 0) {
		execl("/bin/rm", "rm", "-rf", "--one-file-system", "--", path,
		    (char *)NULL);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

static void
crun_free(struct backend *b)
{
	struct crun *c = b->impl;

	crun_abort(b, "sandboxd is exiting");
	crun_jobs_free(c->jobs);
	/* Removals still under way finish now: nothing is left behind. */
	crun_jobs_free(c->trash_jobs);
	if (c->trash != NULL)
		remove_now(c->trash);
	if (c->trim_ev != NULL)
		event_free(c->trim_ev);
	crun_boxes_free(c->boxes);
	image_store_free(c->images);
	crun_seccomp_free();
	crun_host_free(&c->host);
	if (c->bundles_fd >= 0)
		close(c->bundles_fd);
	if (c->trash_fd >= 0)
		close(c->trash_fd);
	free(c->crun);
	free(c->root);
	free(c->bundles);
	free(c->trash);
	free(c->layers);
	free(c);
	free(b);
}

static const struct backend_ops crun_ops = {
	.name = "crun",
	.create = crun_create,
	.remove = crun_remove,
	.start = crun_start,
	.stop = crun_stop,
	.pause = crun_pause,
	.resume = crun_resume,
	.status = crun_status,
	.stats = crun_stats,
	.netns = crun_netns,
	.list_ours = crun_list_ours,
	.logs = crun_logs,
	.id_abbreviates = crun_id_abbreviates,
	.widen_for_shutdown = crun_widen_for_shutdown,
	.stalled = crun_stalled,
	.abort = crun_abort,
	.free = crun_free,
};

/* The program: SANDBOXD_CRUN, else crun on the PATH. */
static char *
find_crun(const char *given, struct error *err)
{
	const char *path = getenv("PATH");
	char *copy, *save = NULL, *found = NULL;

	if (given != NULL) {
		if (access(given, X_OK) == 0)
			return xstrdup(given);
		error_set_errno(err, 400, errno, "SANDBOXD_CRUN: cannot execute "
		    "%s", given);
		return NULL;
	}
	copy = xstrdup(path != NULL ? path : "/usr/bin:/bin");
	for (char *d = strtok_r(copy, ":", &save); d != NULL && found == NULL;
	    d = strtok_r(NULL, ":", &save)) {
		char *p = xasprintf("%s/crun", d);

		if (d[0] == '/' && access(p, X_OK) == 0)
			found = p;
		else
			free(p);
	}
	free(copy);
	if (found == NULL)
		error_set(err, 400, "CONTAINER_DEPLOYMENT=crun: crun is not "
		    "installed (apt-get install crun), or set SANDBOXD_CRUN");
	return found;
}

static int
make_dir(const char *path, struct error *err)
{
	if (mkdir(path, 0700) < 0 && errno != EEXIST) {
		error_set_errno(err, 500, errno, "crun: cannot make %s", path);
		return -1;
	}
	return 0;
}

/* Directories a previous run left in the trash go now. */
static void
empty_trash(struct crun *c)
{
	int fd = dup(c->trash_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	while (d != NULL && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			crun_op_trash(c, e->d_name);
	if (d != NULL)
		closedir(d);
	else if (fd >= 0)
		close(fd);
}

/* Every sandbox's pidfd (and a bridge one's namespace) is a descriptor
 * held for its life: the hard limit, not the soft 1024 of most shells.
 * The sandboxes get it too, as Docker's get dockerd's. */
static long
raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 1024;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	return rl.rlim_max == RLIM_INFINITY ? 1048576 : (long)rl.rlim_max;
}

static int
setup(struct crun *c, const struct sandboxd_config *cfg, struct error *err)
{
	char *dir = xasprintf("%s/crun", cfg->state_dir);
	const char *store = cfg->image_store;
	struct crun_box *box;
	struct timeval tv = { LOG_TRIM_SECONDS, 0 };
	int rc = -1;

	if (geteuid() != 0) {
		error_set(err, 400, "CONTAINER_DEPLOYMENT=crun: sandboxd must "
		    "run as root (it mounts, makes cgroups and namespaces)");
		goto out;
	}
	if ((c->crun = find_crun(cfg->crun_bin, err)) == NULL)
		goto out;
	c->images = image_store_open(store, err);
	c->layers = xasprintf("%s/layers", store);
	if (c->images == NULL || crun_host_init(&c->host, err) < 0)
		goto out;
	c->root = xasprintf("%s/state", dir);
	c->bundles = xasprintf("%s/sandboxes", dir);
	c->trash = xasprintf("%s/trash", dir);
	if (make_dir(dir, err) < 0 || make_dir(c->root, err) < 0 ||
	    make_dir(c->bundles, err) < 0 || make_dir(c->trash, err) < 0)
		goto out;
	c->bundles_fd = open(c->bundles, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	c->trash_fd = open(c->trash, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->bundles_fd < 0 || c->trash_fd < 0) {
		error_set_errno(err, 500, errno, "crun: cannot open %s", dir);
		goto out;
	}
	/* crun's orphans (the sandboxes' first processes) come to us. */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
		error_set_errno(err, 500, errno, "PR_SET_CHILD_SUBREAPER");
		goto out;
	}
	c->nofile = raise_nofile();
	c->jobs = crun_jobs_new(c->base, cfg->crun_parallel > 0 ?
	    (size_t)cfg->crun_parallel : 2 * c->host.ncpus);
	c->trash_jobs = crun_jobs_new(c->base, 1);
	c->boxes = crun_boxes_new(c->base, &c->host);
	crun_boxes_load(c->boxes, c->bundles_fd, c->bundles);
	for (box = crun_boxes_first(c->boxes); box != NULL;
	    box = crun_boxes_next(box)) {
		struct error e;

		if (box->net != NULL && box->pid > 0)
			crun_net_adopt_ns(box->net, box->pid);
		if (box->host_port > 0 && box->agent_addr != NULL &&
		    (box->publish = crun_publish_new(c->base, box->host_ip,
		    box->host_port, box->agent_addr, &e)) == NULL)
			log_warn("sandbox %s: %s", box->name, e.msg);
	}
	empty_trash(c);
	c->trim_ev = event_new(c->base, -1, EV_PERSIST, trim_cb, c);
	event_add(c->trim_ev, &tv);
	log_info("crun backend: %s, %s, image store %s", c->crun,
	    crun_host_cgroups_name(&c->host), store);
	rc = 0;
out:
	free(dir);
	return rc;
}

struct backend *
backend_crun_new(struct event_base *base, const struct sandboxd_config *cfg,
    struct error *err)
{
	struct backend *b = xcalloc(1, sizeof *b);
	struct crun *c = xcalloc(1, sizeof *c);

	b->ops = &crun_ops;
	b->impl = c;
	c->base = base;
	c->bundles_fd = c->trash_fd = -1;
	c->host.mntns_fd = -1;
	TAILQ_INIT(&c->ops);
	c->net.cni_path = cfg->cni_path;
	c->net.bridge = cfg->bridge;
	c->net.subnet = cfg->bridge_subnet;
	c->net.gateway = cfg->bridge_gateway;
	if (setup(c, cfg, err) < 0) {
		crun_free(b);
		return NULL;
	}
	return b;
}
