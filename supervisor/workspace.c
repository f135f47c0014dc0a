/*
 * Host directories of sandboxes: workspaces (DEFAULT_MOUNT_DIR/<id>, or a
 * caller's mount_dir inside an allowed root), the per-sandbox socket
 * directory the agent listens in, and keeping / restoring workspaces under
 * STORAGE_FOLDER. Copies and recursive removals may take long, so they run
 * as child processes (cp, rm) on the loop; the rest are single syscalls.
 * workspace_copy, _keep and _remove answer through their callback after
 * they returned, also when they end at once (a rename, a refusal): the
 * contract of every callback in sandboxd (defer.c).
 */
#include "sandboxd.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "log.h"
#include "shared.h"
#include "spawn.h"
#include "xmalloc.h"

/* Copies of large workspaces are slow, but never this slow. */
#define COPY_TIMEOUT 1800

/* One cp / rm in flight (or a chain of them); freed when done runs. */
struct fs_job {
	workspace_done_cb done;
	void *arg;
	char *what;
	struct config_list then_remove;	/* afterwards, remove these */
	struct error err;
	int failed;			/* err is set */
};

int
workspace_is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Lexically normalise an absolute path: no "." or empty parts; ".." is
 * refused rather than folded (a mount request has no business with it). */
static int
normalize(const char *path, char **out)
{
	char *copy = xstrdup(path), *save = NULL, *res;
	size_t len = 0;

	res = xmalloc(strlen(path) + 2);
	res[0] = '\0';
	for (char *t = strtok_r(copy, "/", &save); t != NULL;
	    t = strtok_r(NULL, "/", &save)) {
		if (strcmp(t, ".") == 0)
			continue;
		if (strcmp(t, "..") == 0) {
			free(copy);
			free(res);
			return -1;
		}
		res[len++] = '/';
		strcpy(res + len, t);
		len += strlen(t);
	}
	if (len == 0)
		strcpy(res, "/");
	free(copy);
	*out = res;
	return 0;
}

/* Whether path lies strictly inside root (both canonical). */
static int
strictly_inside(const char *path, const char *root)
{
	size_t n = strlen(root);

	if (strcmp(root, "/") == 0)
		return path[1] != '\0';
	return strncmp(path, root, n) == 0 && path[n] == '/' &&
	    path[n + 1] != '\0';
}

static const char *
allowed_root(const char *path)
{
	for (size_t i = 0; i < sd.cfg.allowed_mounts.n; i++) {
		if (strictly_inside(path, sd.cfg.allowed_mounts.v[i]))
			return sd.cfg.allowed_mounts.v[i];
	}
	return NULL;
}

/* mkdir -p of path, which lies inside root (root itself exists). */
static int
mkdirs_below(const char *root, const char *path, mode_t mode)
{
	if (!strictly_inside(path, root))
		return strcmp(path, root) == 0 ? 0 : -1;
	return sandboxd_mkdirs(path, strlen(root), mode);
}

static mode_t
shared_mode(void)
{
	/* Root in the container has no CAP_DAC_OVERRIDE: when we are not
	 * root ourselves, the directories must be open to its uid. */
	return geteuid() == 0 ? 0755 : 0777;
}

int
workspace_check_mount(const char *mount_dir, char **out, struct error *err)
{
	const char *root;
	char *abs, *norm, *real;

	if (*mount_dir == '\0' || strchr(mount_dir, ':') != NULL ||
	    strchr(mount_dir, ',') != NULL) {
		error_set(err, 400, "mount_dir '%s' is empty or holds ':' or ','",
		    mount_dir);
		return -1;
	}
	abs = mount_dir[0] == '/' ? xstrdup(mount_dir) :
	    xasprintf("%s/%s", sd.cfg.mount_dir, mount_dir);
	if (normalize(abs, &norm) < 0) {
		error_set(err, 400, "mount_dir '%s' may not contain '..'",
		    mount_dir);
		free(abs);
		return -1;
	}
	free(abs);
	root = allowed_root(norm);
	if (root == NULL) {
		error_set(err, 400, "mount_dir '%s' is outside the directories "
		    "sandboxd may mount (DEFAULT_MOUNT_DIR %s and "
		    "SANDBOXD_ALLOWED_MOUNT_DIRS)", mount_dir, sd.cfg.mount_dir);
		free(norm);
		return -1;
	}
	if (mkdirs_below(root, norm, shared_mode()) < 0) {
		error_set_errno(err, 400, errno, "mount_dir %s", mount_dir);
		free(norm);
		return -1;
	}
	/* A symlink on the way could point anywhere: check where it lands. */
	real = realpath(norm, NULL);
	free(norm);
	if (real == NULL || allowed_root(real) == NULL ||
	    !workspace_is_dir(real)) {
		error_set(err, 400, "mount_dir '%s' resolves outside the "
		    "directories sandboxd may mount, or is not a directory",
		    mount_dir);
		free(real);
		return -1;
	}
	*out = real;
	return 0;
}

int
workspace_storage_path(const char *storage_path, char **out,
    struct error *err)
{
	char *abs, *norm;

	if (sd.cfg.storage_folder == NULL) {
		error_set(err, 400, "storage_path given but STORAGE_FOLDER is not "
		    "configured");
		return -1;
	}
	if (*storage_path == '\0' || strchr(storage_path, ':') != NULL) {
		error_set(err, 400, "storage_path '%s' is empty or holds ':'",
		    storage_path);
		return -1;
	}
	abs = storage_path[0] == '/' ? xstrdup(storage_path) :
	    xasprintf("%s/%s", sd.cfg.storage_folder, storage_path);
	if (normalize(abs, &norm) < 0 ||
	    !strictly_inside(norm, sd.cfg.storage_folder)) {
		error_set(err, 400, "storage_path '%s' is outside STORAGE_FOLDER "
		    "%s", storage_path, sd.cfg.storage_folder);
		free(abs);
		return -1;
	}
	free(abs);
	*out = norm;
	return 0;
}

char *
workspace_make(const char *id, const char *owner, struct error *err)
{
	char *dir = xasprintf("%s/%s", sd.cfg.mount_dir, id);
	unsigned uid, gid;

	if (mkdir(dir, shared_mode()) < 0 && errno != EEXIST) {
		error_set_errno(err, 500, errno, "cannot create the workspace %s",
		    dir);
		free(dir);
		return NULL;
	}
	chmod(dir, shared_mode());
	/* Commands run as the owner and must be able to write there; the
	 * agent (root with DAC_OVERRIDE) can anyway. Not being root, we made
	 * it open to everyone instead. */
	if (owner != NULL && geteuid() == 0 &&
	    sscanf(owner, "%u:%u", &uid, &gid) == 2 &&
	    chown(dir, (uid_t)uid, (gid_t)gid) < 0) {
		error_set_errno(err, 500, errno, "cannot give the workspace %s "
		    "to %s", dir, owner);
		rmdir(dir);
		free(dir);
		return NULL;
	}
	return dir;
}

char *
workspace_make_sock_dir(const char *id, struct error *err)
{
	char *parent = xasprintf("%s/run", sd.cfg.state_dir);
	char *dir = xasprintf("%s/%s", parent, id);

	if ((mkdir(parent, 0700) < 0 && errno != EEXIST) ||
	    (mkdir(dir, shared_mode()) < 0 && errno != EEXIST)) {
		error_set_errno(err, 500, errno, "cannot create %s", dir);
		free(parent);
		free(dir);
		return NULL;
	}
	chmod(dir, shared_mode());
	free(parent);
	return dir;
}

void
workspace_remove_sock_dir(const char *dir)
{
	char *sock = xasprintf("%s/agent.sock", dir);

	unlink(sock);
	free(sock);
	if (rmdir(dir) < 0 && errno != ENOENT)
		log_warn("cannot remove %s: %s", dir, strerror(errno));
}

static void job_run(struct fs_job *job, const char *const *argv);

static void
job_finished_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fs_job *job = arg;

	(void)fd;
	(void)what;
	job->done(job->failed ? &job->err : NULL, job->arg);
	free(job->what);
	config_list_free(&job->then_remove);
	free(job);
}

/* Report from the loop: a job may end before workspace_* returns (a
 * rename, a refusal), and its caller's callback never runs that early. */
static void
job_finish(struct fs_job *job, const struct error *err)
{
	if (err != NULL) {
		job->err = *err;
		job->failed = 1;
	}
	sandboxd_defer(job_finished_cb, job);
}

static void job_next(struct fs_job *job);

/* A removal off the loop is done; rm takes a tree too deep for it. */
static void
removed_cb(const char *dir, int error, void *arg)
{
	struct fs_job *job = arg;
	const char *argv[] = { "/bin/rm", "-rf", "--one-file-system", "--",
	    dir, NULL };
	struct error err;

	free(job->what);
	job->what = xasprintf("remove %s", dir);
	if (error == E2BIG) {
		job_run(job, argv);
	} else if (error != 0) {
		error_set_errno(&err, 500, error, "cannot %s", job->what);
		job_finish(job, &err);
	} else {
		job_next(job);
	}
}

/* Run the next removal queued on job, or finish it. */
static void
job_next(struct fs_job *job)
{
	char *dir;

	if (job->then_remove.n == 0) {
		job_finish(job, NULL);
		return;
	}
	dir = job->then_remove.v[--job->then_remove.n];
	sandboxd_rmtree(sd.base, dir, removed_cb, job);
	free(dir);
}

static void
job_exit_cb(struct spawn *sp, int status, void *arg)
{
	struct fs_job *job = arg;
	struct evbuffer *errs = spawn_output(sp, 2);
	struct error err;
	char msg[256] = "";

	if (status == 0) {
		spawn_free(sp);
		job_next(job);
		return;
	}
	if (errs != NULL) {
		size_t n = evbuffer_copyout(errs, msg, sizeof msg - 1);

		msg[n > 0 ? n : 0] = '\0';
		msg[strcspn(msg, "\n")] = '\0';
	}
	error_set(&err, 500, "cannot %s: %s", job->what,
	    msg[0] != '\0' ? msg : "the command failed");
	spawn_free(sp);
	job_finish(job, &err);
}

static void
job_run(struct fs_job *job, const char *const *argv)
{
	struct spawn_options opts = { 0 };
	struct spawn_callbacks cb = { 0 };
	struct error err;

	opts.argv = argv;
	opts.stdio[0] = SPAWN_NULL;
	opts.stdio[1] = SPAWN_NULL;
	opts.stdio[2] = SPAWN_CAPTURE;
	opts.capture_cap[2] = 4096;
	opts.new_group = 1;
	opts.timeout = COPY_TIMEOUT;
	cb.on_exit = job_exit_cb;
	if (spawn_start(sd.base, &opts, &cb, job, &err) == NULL) {
		error_prefix(&err, "cannot %s", job->what);
		job_finish(job, &err);
	}
}

static struct fs_job *
job_new(workspace_done_cb done, void *arg, char *what)
{
	struct fs_job *job = xcalloc(1, sizeof *job);

	job->done = done;
	job->arg = arg;
	job->what = what;
	return job;
}

/* cp -a src/. dst */
static void
job_copy(struct fs_job *job, const char *src, const char *dst)
{
	char *from = xasprintf("%s/.", src);
	const char *argv[] = { "/bin/cp", "-a", "--", from, dst, NULL };

	job_run(job, argv);
	free(from);
}

void
workspace_copy(const char *src, const char *dst, workspace_done_cb done,
    void *arg)
{
	job_copy(job_new(done, arg, xasprintf("copy %s to %s", src, dst)), src,
	    dst);
}

/* Never anything but a workspace of ours. */
static int
removable(const char *dir)
{
	return strictly_inside(dir, sd.cfg.mount_dir) ||
	    (sd.cfg.storage_folder != NULL &&
	    strictly_inside(dir, sd.cfg.storage_folder));
}

void
workspace_remove(const char *dir, workspace_done_cb done, void *arg)
{
	struct fs_job *job = job_new(done, arg, xasprintf("remove %s", dir));
	struct error err;

	if (!removable(dir)) {
		error_set(&err, 500, "refusing to remove %s: not under "
		    "DEFAULT_MOUNT_DIR or STORAGE_FOLDER", dir);
		job_finish(job, &err);
		return;
	}
	config_list_add(&job->then_remove, dir);
	job_next(job);
}

void
workspace_keep(const char *dir, const char *dst, int move,
    workspace_done_cb done, void *arg)
{
	struct fs_job *job = job_new(done, arg, xasprintf("keep %s", dir));
	char *slash, *parent;
	struct error err;

	parent = xstrdup(dst);
	slash = strrchr(parent, '/');
	if (slash != NULL && slash != parent) {
		*slash = '\0';
		mkdirs_below(sd.cfg.storage_folder, parent, 0755);
	}
	free(parent);
	/* Whatever was kept there before is replaced, never merged. */
	if (workspace_is_dir(dst)) {
		char tag[TOKEN_HEX_LEN], *old;

		token_random_hex(tag);
		old = xasprintf("%s.old-%s", dst, tag);
		if (rename(dst, old) < 0) {
			error_set_errno(&err, 500, errno, "cannot replace %s", dst);
			free(old);
			job_finish(job, &err);
			return;
		}
		config_list_add(&job->then_remove, old);
		free(old);
	}
	if (move && rename(dir, dst) == 0) {
		job_next(job);
		return;
	}
	if ((move && errno != EXDEV) ||
	    (mkdir(dst, 0755) < 0 && errno != EEXIST)) {
		error_set_errno(&err, 500, errno, "cannot move %s to %s", dir, dst);
		job_finish(job, &err);
		return;
	}
	/* Another file system: copy, then remove the original. */
	if (move && removable(dir))
		config_list_add(&job->then_remove, dir);
	job_copy(job, dir, dst);
}
