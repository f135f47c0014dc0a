/*
 * rm -rf of a released sandbox's directories (its workspace, the crun
 * backend's bundle) on a worker thread, through descriptors: no fork and
 * exec of rm for each (in a burst, a shutdown of a thousand, those took
 * the CPU from the creates), and the loop never waits on the disk (an
 * unlink costs milliseconds on a busy one). The contents may be a sandbox
 * user's: no name is followed (O_NOFOLLOW, every entry unlinked from its
 * parent's descriptor), and the depth is bounded (each level holds a
 * descriptor): a deeper tree is told back with E2BIG for rm to finish.
 * Like rm --one-file-system it stays on the tree's own file system: a
 * directory mounted inside (a bind a failed unmount left in a bundle)
 * is kept, with what it shows, and told back with EXDEV.
 */
#include "sandboxd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "work_pool.h"
#include "xmalloc.h"

/* Deeper than this is left to rm. */
#define RMTREE_DEPTH 64
/* Removals at once. */
#define RMTREE_THREADS 2

static struct work_pool *pool;

/* One removal; freed once done has run. */
struct rmtree_job {
	char *path;
	int error;
	sandboxd_rmtree_cb done;
	void *arg;
};

/* The entries of the directory at fd (on the file system dev), then
 * nothing else. -1 (errno) when the depth ran out or an entry could not
 * go; EXDEV when all went but what another file system holds. */
static int
empty(int fd, dev_t dev, int depth)
{
	DIR *d = fdopendir(fd);
	struct dirent *e;
	struct stat sub_st;
	int rc = 0, crossed = 0;

	if (d == NULL) {
		close(fd);
		return -1;
	}
	while (rc == 0 && (e = readdir(d)) != NULL) {
		int sub, dir = e->d_type == DT_DIR;
		struct stat st;

		if (e->d_name[0] == '.' && (e->d_name[1] == '\0' ||
		    (e->d_name[1] == '.' && e->d_name[2] == '\0')))
			continue;
		if (e->d_type == DT_UNKNOWN)
			dir = fstatat(dirfd(d), e->d_name, &st,
			    AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
		if (!dir) {
			rc = unlinkat(dirfd(d), e->d_name, 0);
			continue;
		}
		if (depth >= RMTREE_DEPTH) {
			errno = E2BIG;
			rc = -1;
			break;
		}
		sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY |
		    O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0 && fstat(sub, &sub_st) == 0 &&
		    sub_st.st_dev != dev) {
			/* A mount point: neither it nor what it shows. */
			close(sub);
			crossed = 1;
			continue;
		}
		if (sub < 0 || empty(sub, dev, depth + 1) < 0)
			rc = -1;
		else
			rc = unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
	}
	closedir(d);
	if (rc == 0 && crossed) {
		errno = EXDEV;
		rc = -1;
	}
	return rc;
}

int
sandboxd_rmtree_now(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;

	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return -1;
	}
	if (empty(fd, st.st_dev, 0) < 0)
		return -1;
	return rmdir(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void
run_cb(void *arg)
{
	struct rmtree_job *job = arg;

	job->error = sandboxd_rmtree_now(job->path) < 0 ? errno : 0;
}

static void
done_cb(void *arg)
{
	struct rmtree_job *job = arg;

	job->done(job->path, job->error, job->arg);
	free(job->path);
	free(job);
}

static void
deferred_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	done_cb(arg);
}

/* Made at start: a failure is then a start-up error, not a fatal exit
 * at some release, and the pool's descriptor is there from the first. */
int
sandboxd_rmtree_init(struct event_base *base, struct error *err)
{
	if (pool == NULL && (pool = work_pool_new(base, RMTREE_THREADS,
	    err)) == NULL)
		return -1;
	return 0;
}

void
sandboxd_rmtree(struct event_base *base, const char *path,
    sandboxd_rmtree_cb done, void *arg)
{
	struct rmtree_job *job = xcalloc(1, sizeof *job);
	struct error err;

	job->path = xstrdup(path);
	job->done = done;
	job->arg = arg;
	if (sandboxd_rmtree_init(base, &err) < 0)
		fatal("removals: %s", err.msg);
	if (work_pool_submit(pool, run_cb, done_cb, job, &err) < 0) {
		/* No thread to be had: rm does it (E2BIG as for a deep tree). */
		static const struct timeval now = { 0, 0 };

		log_warn("removals: %s", err.msg);
		job->error = E2BIG;
		event_base_once(base, -1, EV_TIMEOUT, deferred_cb, job, &now);
	}
}

void
sandboxd_rmtree_free(void)
{
	if (pool != NULL)
		work_pool_free(pool);
	pool = NULL;
}
