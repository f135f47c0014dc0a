/*
 * Staged files: written where nobody sees them, then renamed over their
 * target in one step, so readers see the old content or the new one, never
 * a part, and a failed upload leaves nothing. O_TMPFILE makes them
 * anonymous (nothing to clean up even if the agent dies); a filesystem
 * without it gets a hidden name instead. A batch, which cannot keep a
 * descriptor per file, stages its files by name in a private directory.
 * Hidden files an agent left when it died mid-upload are swept away when
 * the next one starts.
 *
 * The agent runs as root in a workspace the user of the commands owns, and
 * that user's processes run while it works: any name there may be swapped
 * for a symlink, a hard link or another directory between two calls. So
 * root never changes a file by its name there: mode and owner go through
 * the staged file's own descriptor, a private directory is root's alone
 * (mode 0700) and used only through its descriptor, the rename is the one
 * step taken by name, and what the target name holds afterwards is checked
 * to be the file we wrote.
 */
#include "agent.h"
#include "files_staged.h"
#include "files_ops.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "fdio.h"
#include "log.h"
#include "token.h"
#include "work_queue.h"
#include "xmalloc.h"

#define HIDDEN_PREFIX	".sandbox-upload-"
#define HIDDEN_HEX	16	/* hex digits after the prefix */
#define COPY_CHUNK	(64 * 1024)
#define PRIVATE_MODE	0700	/* a staging directory's: root's alone */

/* A directory only we can enter: a staging directory, ours or one an
 * agent that died left. */
static int
is_private(const struct stat *st)
{
	return S_ISDIR(st->st_mode) && st->st_uid == geteuid() &&
	    (st->st_mode & 077) == 0;
}

void
files_staged_init(struct staged_file *f)
{
	f->fd = -1;
	f->dirfd = -1;
	f->name = NULL;
}

static char *
hidden_name(void)
{
	char hex[HIDDEN_HEX + 1];

	token_random_hex_n(hex, HIDDEN_HEX / 2);
	return xasprintf(HIDDEN_PREFIX "%s", hex);
}

/* A new file under a fresh hidden name in dirfd; -1 with errno. O_EXCL
 * never follows a symlink planted at the name. */
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
files_staged_create(struct staged_file *f, int dirfd, int named,
    const char *rel, struct error *err)
{
	files_staged_init(f);
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
files_staged_close(struct staged_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
}

/* The staged file's descriptor, reopened if it was closed: only a file in
 * a private directory is, so the name is still ours. */
static int
staged_fd(struct staged_file *f, const char *rel, struct error *err)
{
	if (f->fd < 0 && (f->fd = openat(f->dirfd, f->name, O_RDONLY |
	    O_NOFOLLOW | O_CLOEXEC)) < 0) {
		path_error(err, errno, "upload", rel);
		return -1;
	}
	return f->fd;
}

/* Link the anonymous file into dirfd as name; -1 with errno (EEXIST when
 * the name is taken: link never replaces). */
static int
link_anonymous(int fd, int dirfd, const char *name)
{
	char proc[64];

	/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc does not. */
	if (linkat(fd, "", dirfd, name, AT_EMPTY_PATH) == 0)
		return 0;
	if (errno != ENOENT && errno != EPERM)
		return -1;
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW);
}

/* The same under a fresh hidden name, which *name gets. */
static int
link_hidden(int fd, int dirfd, char **name)
{
	for (int tries = 0; tries < 8; tries++) {
		*name = hidden_name();
		if (link_anonymous(fd, dirfd, *name) == 0)
			return 0;
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
		ssize_t n = pread(in, buf, sizeof buf, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return (int)n;
		off += n;
		if (fdio_write_all(out, buf, (size_t)n) < 0)
			return -1;
	}
}

int
files_staged_same_mount(int a, int b)
{
	struct statx xa, xb;
	struct stat sa, sb;

	if (statx(a, "", AT_EMPTY_PATH, STATX_MNT_ID, &xa) == 0 &&
	    statx(b, "", AT_EMPTY_PATH, STATX_MNT_ID, &xb) == 0 &&
	    (xa.stx_mask & xb.stx_mask & STATX_MNT_ID))
		return xa.stx_mnt_id == xb.stx_mnt_id;
	/* An older kernel: two bind mounts of one filesystem look alike
	 * here, and files_staged_commit copies when the rename says EXDEV. */
	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev;
}

int
files_staged_copy_to(struct staged_file *f, int dirfd, const char *rel,
    struct error *err)
{
	struct staged_file copy;
	int in, e;

	if ((in = staged_fd(f, rel, err)) < 0 ||
	    files_staged_create(&copy, dirfd, 0, rel, err) < 0)
		return -1;
	if (copy_data(in, copy.fd) < 0) {
		e = errno;
		files_staged_discard(&copy);
		path_error(err, e, "upload", rel);
		return -1;
	}
	files_staged_discard(f);
	*f = copy;
	return 0;
}

/* Replacing keeps what writing in place would have kept: owner and mode,
 * but never set-id bits, which a name the user controls must not hand to
 * a file root wrote. A new file is the command user's. By descriptor. */
static void
adopt(struct staged_file *f, struct agent *agent, const struct stat *old)
{
	if (old == NULL) {
		files_ops_give(agent, f->fd);
		return;
	}
	if (geteuid() == 0)
		(void)fchown(f->fd, old->st_uid, old->st_gid);
	(void)fchmod(f->fd, old->st_mode & (S_ISVTX | 0777));
}

int
files_staged_commit(struct staged_file *f, struct agent *agent, int dirfd,
    const char *name, const char *rel, struct stat *st, struct error *err)
{
	struct stat old, now;
	int exists;

	if (staged_fd(f, rel, err) < 0)
		return -1;
	exists = fstatat(dirfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0;
	if (exists && S_ISDIR(old.st_mode)) {
		error_set(err, 409, "%s is a directory", rel);
		return -1;
	}
	adopt(f, agent, exists && S_ISREG(old.st_mode) ? &old : NULL);
	if (f->name == NULL) {
		/* A new name takes the link at once: no moment under a
		 * hidden name another process could swap. */
		if (link_anonymous(f->fd, dirfd, name) == 0)
			goto landed;
		if (errno != EEXIST || link_hidden(f->fd, dirfd, &f->name) < 0) {
			path_error(err, errno, "upload", rel);
			return -1;
		}
		f->dirfd = dirfd;
	}
	if (renameat(f->dirfd, f->name, dirfd, name) < 0) {
		if (errno != EXDEV) {
			path_error(err, errno, "replace", rel);
			return -1;
		}
		/* Two bind mounts of one filesystem, which files_staged_same_mount
		 * could not tell apart: a copy on the target's side. */
		if (files_staged_copy_to(f, dirfd, rel, err) < 0)
			return -1;
		return files_staged_commit(f, agent, dirfd, name, rel, st, err);
	}
	free(f->name);
	f->name = NULL;
landed:
	/* The name is in a directory the user can write: it answers 200 only
	 * if it holds our file now, not whatever was renamed over ours. */
	if (fstat(f->fd, st) < 0 || fstatat(dirfd, name, &now,
	    AT_SYMLINK_NOFOLLOW) < 0 || now.st_dev != st->st_dev ||
	    now.st_ino != st->st_ino) {
		error_set(err, 409, "%s was replaced by another process while "
		    "the upload was put in place", rel);
		return -1;
	}
	files_staged_close(f);
	return 0;
}

void
files_staged_discard(struct staged_file *f)
{
	if (f->name != NULL && f->dirfd >= 0)
		(void)unlinkat(f->dirfd, f->name, 0);
	free(f->name);
	files_staged_close(f);
	files_staged_init(f);
}

/* Private directories. */

void
files_staged_dir_init(struct staged_dir *d)
{
	d->fd = -1;
	d->parentfd = -1;
	d->name = NULL;
}

int
files_staged_dir_create(struct staged_dir *d, int parentfd, struct error *err)
{
	struct stat st;
	char *name;
	int fd, e;

	files_staged_dir_init(d);
	for (int tries = 0;; tries++) {
		name = hidden_name();
		if (mkdirat(parentfd, name, PRIVATE_MODE) == 0)
			break;
		e = errno;
		free(name);
		if (e != EEXIST || tries == 7) {
			path_error(err, e, "upload", "a staging directory");
			return -1;
		}
	}
	fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
	if (fd < 0) {
		path_error(err, errno, "upload", "a staging directory");
		free(name);
		return -1;
	}
	/* Opened by name: it must be the directory just made, root's alone,
	 * not one the user renamed there meanwhile. */
	if (fstat(fd, &st) < 0 || !is_private(&st)) {
		error_set(err, 409, "the upload's staging directory was replaced "
		    "by another process");
		close(fd);
		free(name);
		return -1;
	}
	d->fd = fd;
	d->parentfd = parentfd;
	d->name = name;
	d->dev = st.st_dev;
	d->ino = st.st_ino;
	return 0;
}

void
files_staged_dir_remove(struct staged_dir *d)
{
	struct stat st;

	if (d->fd < 0)
		return;
	/* Only while the name is still ours; one the user moved stays
	 * (empty) until the sweep of the next start. */
	if (fstatat(d->parentfd, d->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    st.st_dev == d->dev && st.st_ino == d->ino)
		(void)unlinkat(d->parentfd, d->name, AT_REMOVEDIR);
	close(d->fd);
	free(d->name);
	files_staged_dir_init(d);
}

int
files_staged_is_hidden_name(const char *name)
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

/* Made by files_staged_sweep_start, freed on the loop by sweep_done. */
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

/* A stale staging directory: its hidden files go, then it does. It holds
 * nothing else, so it is not descended further. */
static void
sweep_private(struct sweep *s, int parent, const char *name)
{
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
	struct dirent *de;
	struct stat st;
	DIR *d;

	if (fd < 0)
		return;
	/* Checked on what was opened: the name may have been swapped. */
	if (fstat(fd, &st) < 0 || !is_private(&st) ||
	    (d = fdopendir(fd)) == NULL) {
		close(fd);
		return;
	}
	while ((de = readdir(d)) != NULL) {
		if (files_staged_is_hidden_name(de->d_name) &&
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode) && older(&st.st_mtim, &s->start) &&
		    unlinkat(dirfd(d), de->d_name, 0) == 0)
			s->removed++;
	}
	closedir(d);
	(void)unlinkat(parent, name, AT_REMOVEDIR);
}

/* One directory: stale hidden files and staging directories go,
 * subdirectories join todo. Every directory is opened beneath the root by
 * path_open, none through a symlink. */
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
		int hidden = files_staged_is_hidden_name(de->d_name);
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN &&
		    !(de->d_type == DT_REG && hidden))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (hidden && is_private(&st) && older(&st.st_mtim, &s->start)) {
			sweep_private(s, dirfd(d), de->d_name);
		} else if (S_ISDIR(st.st_mode)) {
			if (*n == *cap) {
				*cap = *cap ? *cap * 2 : 64;
				*todo = xreallocarray(*todo, *cap,
				    sizeof **todo);
			}
			(*todo)[(*n)++] = rel[0] == '\0' ?
			    xstrdup(de->d_name) :
			    xasprintf("%s/%s", rel, de->d_name);
		} else if (S_ISREG(st.st_mode) && hidden &&
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
files_staged_sweep_start(struct agent *agent)
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
files_staged_sweep_shutdown(void)
{
	atomic_store(&sweep_stopping, 1);
	work_queue_free(sweep_queue);
	sweep_queue = NULL;
}
