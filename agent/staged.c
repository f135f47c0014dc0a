/*
 * Staged files: written where nobody sees them, then renamed over their
 * target in one step, so readers see the old content or the new one, never
 * a part, and a failed upload leaves nothing. O_TMPFILE makes them
 * anonymous (nothing to clean up even if the agent dies); a filesystem
 * without it gets a hidden name instead.
 */
#include "agent.h"
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "log.h"
#include "xmalloc.h"

#define HIDDEN_PREFIX	".sandbox-upload-"
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
	unsigned char r[8];
	char hex[17];

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
