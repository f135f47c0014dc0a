/*
 * Staged files: written where nobody sees them, then renamed over their
 * target in one step, so readers see the old content or the new one, never
 * a part, and a failed upload leaves nothing. O_TMPFILE makes them
 * anonymous (nothing to clean up even if the agent dies); a filesystem
 * without it, and a batch that keeps its files closed, gets a hidden name
 * instead. Hidden files an agent left when it died mid-upload are swept
 * away when the next one starts.
 */
#include "agent.h"
#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "work.h"
#include "xmalloc.h"

#define HIDDEN_PREFIX	".sandbox-upload-"
#define HIDDEN_HEX	16	/* hex digits after the prefix */
#define COPY_CHUNK	(64 * 1024)

void
staged_init(struct staged_file *f)
{
	f->fd = -1;
	f->dirfd = -1;
	f->name = NULL;
}

static char *
hidden_name(void)
{
	unsigned char r[HIDDEN_HEX / 2];
	char hex[HIDDEN_HEX + 1];

	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		fatal("getrandom: %s", strerror(errno));
	for (size_t i = 0; i < sizeof r; i++)
		snprintf(hex + 2 * i, 3, "%02x", r[i]);
	return xasprintf(HIDDEN_PREFIX "%s", hex);
}

/* A new file under a fresh hidden name in dirfd; -1 with errno. */
static int
create_hidden(int dirfd, char **name)
{
	for (int tries = 0; tries < 8; tries++) {
		int fd;

		*name = hidden_name();
		fd = openat(dirfd, *name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW |
		    O_CLOEXEC, 0666);
		if (fd >= 0)
			return fd;
		free(*name);
		*name = NULL;
		if (errno != EEXIST)
			return -1;
	}
	errno = EEXIST;
	return -1;
}

int
staged_create(struct staged_file *f, int dirfd, int named, const char *rel,
    struct error *err)
{
	staged_init(f);
	if (!named) {
		f->fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0666);
		if (f->fd < 0 && errno != EOPNOTSUPP && errno != EISDIR &&
		    errno != EINVAL) {
			path_error(err, errno, "upload", rel);
			return -1;
		}
	}
	if (f->fd < 0 && (f->fd = create_hidden(dirfd, &f->name)) < 0) {
		path_error(err, errno, "upload", rel);
		return -1;
	}
	f->dirfd = dirfd;
	return 0;
}

void
staged_close(struct staged_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
}

static int
same_dir(int a, int b)
{
	struct stat sa, sb;

	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 &&
	    sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Link the anonymous file into dirfd under a hidden name; -1 with errno. */
static int
link_anonymous(struct staged_file *f, int dirfd, char **name)
{
	char proc[64];

	for (int tries = 0; tries < 8; tries++) {
		*name = hidden_name();
		/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc does not. */
		if (linkat(f->fd, "", dirfd, *name, AT_EMPTY_PATH) == 0)
			return 0;
		if (errno == ENOENT || errno == EPERM) {
			snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
			if (linkat(AT_FDCWD, proc, dirfd, *name,
			    AT_SYMLINK_FOLLOW) == 0)
				return 0;
		}
		free(*name);
		*name = NULL;
		if (errno != EEXIST)
			return -1;
	}
	errno = EEXIST;
	return -1;
}

static int
copy_data(int in, int out)
{
	char buf[COPY_CHUNK];
	off_t off = 0;

	for (;;) {
		ssize_t n = copy_file_range(in, &off, out, NULL, 1 << 30, 0);

		if (n == 0)
			return 0;
		if (n > 0)
			continue;
		if (errno != EXDEV && errno != EINVAL && errno != ENOSYS &&
		    errno != EOPNOTSUPP)
			return -1;
		break;
	}
	for (;;) {
		ssize_t n = pread(in, buf, sizeof buf, off), w;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return (int)n;
		off += n;
		for (char *p = buf; n > 0; p += w, n -= w) {
			w = write(out, p, (size_t)n);
			if (w < 0 && errno != EINTR)
				return -1;
			if (w < 0)
				w = 0;
		}
	}
}

/* Across filesystems: a hidden copy in dirfd replaces the staged file. */
static int
copy_into(struct staged_file *f, int dirfd, const char *rel,
    struct error *err)
{
	char *name;
	int in = f->fd, out, e;

	if (in < 0)
		in = openat(f->dirfd, f->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0) {
		path_error(err, errno, "upload", rel);
		return -1;
	}
	out = create_hidden(dirfd, &name);
	if (out < 0 || copy_data(in, out) < 0) {
		e = errno;
		if (out >= 0) {
			close(out);
			unlinkat(dirfd, name, 0);
			free(name);
		}
		if (in != f->fd)
			close(in);
		path_error(err, e, "upload", rel);
		return -1;
	}
	if (in != f->fd)
		close(in);
	staged_discard(f);
	f->fd = out;
	f->name = name;
	f->dirfd = dirfd;
	return 0;
}

int
staged_move(struct staged_file *f, int dirfd, const char *rel,
    struct error *err)
{
	char *name;

	if (f->name != NULL && same_dir(f->dirfd, dirfd))
		return 0;
	if (f->name == NULL) {
		if (link_anonymous(f, dirfd, &name) < 0) {
			/* Another filesystem, or no /proc to link through. */
			if (errno == EXDEV || errno == ENOENT || errno == EPERM)
				return copy_into(f, dirfd, rel, err);
			path_error(err, errno, "upload", rel);
			return -1;
		}
	} else {
		name = hidden_name();
		if (renameat(f->dirfd, f->name, dirfd, name) < 0) {
			free(name);
			if (errno == EXDEV)
				return copy_into(f, dirfd, rel, err);
			path_error(err, errno, "upload", rel);
			return -1;
		}
		free(f->name);
	}
	f->name = name;
	f->dirfd = dirfd;
	return 0;
}

int
staged_commit(struct staged_file *f, struct agent *agent, const char *name,
    const char *rel, struct error *err)
{
	struct stat old;

	if (f->name == NULL && staged_move(f, f->dirfd, rel, err) < 0)
		return -1;
	if (fstatat(f->dirfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(old.st_mode)) {
			error_set(err, 409, "%s is a directory", rel);
			return -1;
		}
		/* Replacing keeps what writing in place would have kept. */
		if (S_ISREG(old.st_mode)) {
			if (geteuid() == 0)
				(void)fchownat(f->dirfd, f->name, old.st_uid,
				    old.st_gid, AT_SYMLINK_NOFOLLOW);
			(void)fchmodat(f->dirfd, f->name, old.st_mode & 07777, 0);
		}
	} else {
		fsops_give(agent, f->dirfd, f->name);
	}
	if (renameat(f->dirfd, f->name, f->dirfd, name) < 0) {
		path_error(err, errno, "replace", rel);
		return -1;
	}
	free(f->name);
	f->name = NULL;
	return 0;
}

void
staged_discard(struct staged_file *f)
{
	if (f->name != NULL && f->dirfd >= 0)
		(void)unlinkat(f->dirfd, f->name, 0);
	free(f->name);
	staged_close(f);
	staged_init(f);
}

int
staged_is_hidden_name(const char *name)
{
	size_t n = strlen(HIDDEN_PREFIX);

	if (strncmp(name, HIDDEN_PREFIX, n) != 0)
		return 0;
	name += n;
	for (n = 0; n < HIDDEN_HEX; n++)
		if (!((name[n] >= '0' && name[n] <= '9') ||
		    (name[n] >= 'a' && name[n] <= 'f')))
			return 0;
	return name[HIDDEN_HEX] == '\0';
}

/* The sweep of stale hidden files, on a thread of its own: a workspace of
 * a million files must not hold up the agent's start. */

/* Made by staged_sweep_start, freed on the loop by sweep_done. */
struct sweep {
	struct agent *agent;
	struct timespec start;	/* of the agent: older files are stale */
	size_t removed;
};

/* Lives while the sweep runs, until sweep_free_cb or the shutdown. */
static struct work_queue *sweep_queue;
static atomic_int sweep_stopping;

static int
older(const struct timespec *t, const struct timespec *than)
{
	return t->tv_sec < than->tv_sec ||
	    (t->tv_sec == than->tv_sec && t->tv_nsec < than->tv_nsec);
}

/* One directory: stale hidden files go, subdirectories join todo. Every
 * directory is opened beneath the root by path_open, none through a
 * symlink. */
static void
sweep_dir(struct sweep *s, const char *rel, char ***todo, size_t *n,
    size_t *cap)
{
	int fd = path_open(&s->agent->ws, rel, O_RDONLY | O_DIRECTORY |
	    O_NOFOLLOW, 0, NULL);
	struct dirent *de;
	DIR *d;

	if (fd < 0 || (d = fdopendir(fd)) == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((de = readdir(d)) != NULL) {
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN &&
		    !(de->d_type == DT_REG &&
		    staged_is_hidden_name(de->d_name)))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			if (*n == *cap) {
				*cap = *cap ? *cap * 2 : 64;
				*todo = xreallocarray(*todo, *cap,
				    sizeof **todo);
			}
			(*todo)[(*n)++] = rel[0] == '\0' ?
			    xstrdup(de->d_name) :
			    xasprintf("%s/%s", rel, de->d_name);
		} else if (S_ISREG(st.st_mode) &&
		    staged_is_hidden_name(de->d_name) &&
		    older(&st.st_mtim, &s->start) &&
		    unlinkat(dirfd(d), de->d_name, 0) == 0) {
			s->removed++;
		}
	}
	closedir(d);
}

static void
sweep_run(void *arg)
{
	struct sweep *s = arg;
	char **todo = xmalloc(sizeof *todo);
	size_t n = 1, cap = 1;

	todo[0] = xstrdup("");
	while (n > 0) {
		char *rel = todo[--n];

		if (!atomic_load(&sweep_stopping))
			sweep_dir(s, rel, &todo, &n, &cap);
		free(rel);
	}
	free(todo);
}

static void
sweep_free_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	work_queue_free(sweep_queue);
	sweep_queue = NULL;
}

static void
sweep_done(void *arg)
{
	struct sweep *s = arg;

	if (s->removed > 0)
		log_info("removed %zu stale upload file%s (%s*) an earlier "
		    "agent left", s->removed, s->removed == 1 ? "" : "s",
		    HIDDEN_PREFIX);
	/* Not from inside the queue's own callback. */
	if (!atomic_load(&sweep_stopping))
		event_base_once(s->agent->base, -1, EV_TIMEOUT, sweep_free_cb,
		    NULL, NULL);
	free(s);
}

void
staged_sweep_start(struct agent *agent)
{
	struct sweep *s = xcalloc(1, sizeof *s);

	s->agent = agent;
	/* The kernel stamps files from its coarse clock: a file this agent
	 * creates in the tick it starts in must not count as older. */
	clock_gettime(CLOCK_REALTIME_COARSE, &s->start);
	sweep_queue = work_queue_new(agent->base);
	if (sweep_queue == NULL) {
		log_warn("stale upload files are not swept: no worker thread");
		free(s);
		return;
	}
	work_queue_submit(sweep_queue, sweep_run, sweep_done, s);
}

void
staged_sweep_shutdown(void)
{
	atomic_store(&sweep_stopping, 1);
	work_queue_free(sweep_queue);
	sweep_queue = NULL;
}
