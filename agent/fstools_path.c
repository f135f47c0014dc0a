/*
 * Path validation for the filesystem tools, step for step as the npm
 * server's validatePath (so that its error texts and the paths results
 * show come out the same), and Node's wording of system errors. The
 * strings computed here only decide what to open and what to say; every
 * open itself is an openat2(RESOLVE_BENEATH) from the root descriptor, so
 * a symlink swapped in after the check still cannot lead out.
 */
#include "fstools.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "xmalloc.h"

/* Node's path.resolve: base joined with path unless path is absolute, then
 * ".", ".." and repeated slashes folded; never above "/", no trailing
 * slash. */
static char *
lexical_resolve(const char *base, const char *path)
{
	char *joined = path[0] == '/' ? xstrdup(path) :
	    xasprintf("%s/%s", base, path);
	char *out = xmalloc(strlen(joined) + 2), *o = out;
	const char *p = joined;

	while (*p != '\0') {
		const char *slash = strchr(p, '/');
		size_t len = slash != NULL ? (size_t)(slash - p) : strlen(p);

		if (len == 2 && p[0] == '.' && p[1] == '.') {
			while (o > out && o[-1] != '/')
				o--;
			if (o > out)
				o--;
		} else if (len > 0 && !(len == 1 && p[0] == '.')) {
			*o++ = '/';
			memcpy(o, p, len);
			o += len;
		}
		p += len;
		if (*p == '/')
			p++;
	}
	if (o == out)
		*o++ = '/';
	*o = '\0';
	free(joined);
	return out;
}

/* The allowed directories, as the npm server keeps them: the root as
 * given and, when it differs, the root with symlinks resolved. */
static size_t
allowed_dirs(const struct workspace *ws, const char *dirs[2])
{
	dirs[0] = ws->root;
	if (strcmp(ws->root, ws->real_root) == 0)
		return 1;
	dirs[1] = ws->real_root;
	return 2;
}

static int
inside(const char *dir, const char *abs)
{
	size_t len = strlen(dir);

	if (strcmp(dir, "/") == 0)
		return abs[0] == '/';
	return strncmp(abs, dir, len) == 0 &&
	    (abs[len] == '\0' || abs[len] == '/');
}

int
fstools_path_allowed(const struct workspace *ws, const char *abs)
{
	const char *dirs[2];
	size_t n = allowed_dirs(ws, dirs);

	for (size_t i = 0; i < n; i++)
		if (inside(dirs[i], abs))
			return 1;
	return 0;
}

char *
fstools_allowed_dirs(const struct workspace *ws, const char *sep)
{
	const char *dirs[2];
	size_t n = allowed_dirs(ws, dirs);

	if (n == 1)
		return xstrdup(dirs[0]);
	return xasprintf("%s%s%s", dirs[0], sep, dirs[1]);
}

static char *
msg_outside(const struct workspace *ws, const char *abs)
{
	char *dirs = fstools_allowed_dirs(ws, ", ");
	char *msg = xasprintf("Access denied - path outside allowed "
	    "directories: %s not in %s", abs, dirs);

	free(dirs);
	return msg;
}

char *
fstools_msg_symlink_out(const struct workspace *ws, const char *real)
{
	char *dirs = fstools_allowed_dirs(ws, ", ");
	char *msg = xasprintf("Access denied - symlink target outside allowed "
	    "directories: %s not in %s", real, dirs);

	free(dirs);
	return msg;
}

/* libuv's wording, which Node puts in its messages. */
static const struct {
	int errnum;
	const char *text;
} uv_texts[] = {
	{ E2BIG, "argument list too long" },
	{ EACCES, "permission denied" },
	{ EAGAIN, "resource temporarily unavailable" },
	{ EBADF, "bad file descriptor" },
	{ EBUSY, "resource busy or locked" },
	{ ECANCELED, "operation canceled" },
	{ EDQUOT, "disk quota exceeded" },
	{ EEXIST, "file already exists" },
	{ EFAULT, "bad address in system call argument" },
	{ EFBIG, "file too large" },
	{ EILSEQ, "illegal byte sequence" },
	{ EINTR, "interrupted system call" },
	{ EINVAL, "invalid argument" },
	{ EIO, "i/o error" },
	{ EISDIR, "illegal operation on a directory" },
	{ ELOOP, "too many symbolic links encountered" },
	{ EMFILE, "too many open files" },
	{ EMLINK, "too many links" },
	{ ENAMETOOLONG, "name too long" },
	{ ENFILE, "file table overflow" },
	{ ENODATA, "no data available" },
	{ ENODEV, "no such device" },
	{ ENOENT, "no such file or directory" },
	{ ENOMEM, "not enough memory" },
	{ ENOSPC, "no space left on device" },
	{ ENOSYS, "function not implemented" },
	{ ENOTDIR, "not a directory" },
	{ ENOTEMPTY, "directory not empty" },
	{ ENOTSUP, "operation not supported on socket" },
	{ ENXIO, "no such device or address" },
	{ EOVERFLOW, "value too large for defined data type" },
	{ EPERM, "operation not permitted" },
	{ EROFS, "read-only file system" },
	{ ESPIPE, "invalid seek" },
	{ ETXTBSY, "text file is busy" },
	{ EXDEV, "cross-device link not permitted" },
};

char *
fstools_msg_errno(int errnum, const char *syscall, const char *path,
    const char *dest)
{
	const char *code = strerrorname_np(errnum), *text = NULL;
	struct fstools_buf b = { 0 };
	char buf[128];

	for (size_t i = 0; i < sizeof uv_texts / sizeof uv_texts[0]; i++)
		if (uv_texts[i].errnum == errnum)
			text = uv_texts[i].text;
	/* The tools run on worker threads: not strerror's shared buffer. */
	if (text == NULL)
		text = strerror_r(errnum, buf, sizeof buf);
	if (code != NULL)
		fstools_buf_printf(&b, "%s: %s, %s", code, text, syscall);
	else
		fstools_buf_printf(&b, "Unknown system error -%d: %s, %s",
		    errnum,
		    text, syscall);
	if (path != NULL)
		fstools_buf_printf(&b, " '%s'", path);
	if (dest != NULL)
		fstools_buf_printf(&b, " -> '%s'", dest);
	return fstools_buf_take(&b, NULL);
}

static char *
dirname_of(const char *abs)
{
	const char *slash = strrchr(abs, '/');

	if (slash == NULL || slash == abs)
		return xstrdup("/");
	return xstrndup(abs, (size_t)(slash - abs));
}

/* The npm server's way with paths that do not exist (yet): resolve the
 * longest existing prefix, one component at a time, and append the rest.
 * A component that exists but cannot be resolved (a dangling symlink)
 * makes "Parent directory does not exist". */
static char *
resolve_missing(const struct workspace *ws, const char *abs, char **msg)
{
	const char *dirs[2], *dir = NULL, *rest;
	size_t n = allowed_dirs(ws, dirs);
	char *cur;

	for (size_t i = 0; i < n; i++)
		if (inside(dirs[i], abs) &&
		    (dir == NULL || strlen(dirs[i]) > strlen(dir)))
			dir = dirs[i];
	cur = realpath(dir, NULL);
	if (cur == NULL) {
		*msg = fstools_msg_errno(errno, "realpath", dir, NULL);
		return NULL;
	}
	rest = abs + (strcmp(dir, "/") == 0 ? 0 : strlen(dir));
	while (*rest == '/')
		rest++;
	while (*rest != '\0') {
		const char *slash = strchr(rest, '/');
		size_t len = slash != NULL ? (size_t)(slash - rest) :
		    strlen(rest);
		const char *base = strcmp(cur, "/") == 0 ? "" : cur;
		char *cand = xasprintf("%s/%.*s", base, (int)len, rest), *next;
		struct stat st;

		if (lstat(cand, &st) < 0) {
			int e = errno;

			free(cand);
			if (e == ENOENT) {
				char *r = xasprintf("%s/%s", base, rest);

				free(cur);
				return r;
			}
			*msg = fstools_msg_errno(e, "scandir", cur, NULL);
			free(cur);
			return NULL;
		}
		next = realpath(cand, NULL);
		if (next == NULL) {
			if (errno == ENOENT) {
				char *parent = dirname_of(abs);

				*msg = xasprintf("Parent directory does not "
				    "exist: %s", parent);
				free(parent);
			} else {
				*msg = fstools_msg_errno(errno, "realpath",
				    cand,
				    NULL);
			}
			free(cand);
			free(cur);
			return NULL;
		}
		free(cand);
		free(cur);
		cur = next;
		if (!fstools_path_allowed(ws, cur)) {
			*msg = fstools_msg_symlink_out(ws, cur);
			free(cur);
			return NULL;
		}
		rest += len;
		while (*rest == '/')
			rest++;
	}
	return cur;
}

static char *
expand_home(const char *path)
{
	const char *home = getenv("HOME");

	if (home == NULL || home[0] == '\0')
		home = "/";
	if (strcmp(path, "~") == 0)
		return xstrdup(home);
	if (strncmp(path, "~/", 2) == 0)
		return xasprintf("%s/%s", home, path + 2);
	return xstrdup(path);
}

static int
windows_drive(const char *p)
{
	return ((p[0] >= 'A' && p[0] <= 'Z') || (p[0] >= 'a' && p[0] <= 'z')) &&
	    p[1] == ':' && (p[2] == '\0' || p[2] == '/' || p[2] == '\\');
}

int
fstools_path_resolve(const struct workspace *ws, const char *requested,
    struct fstools_path *p, char **msg)
{
	char *path = expand_home(requested), *real;
	struct error err;

	memset(p, 0, sizeof *p);
	if (windows_drive(path)) {
		*msg = xasprintf("Access denied - Windows-style path received "
		    "on a POSIX host: %s", requested);
		free(path);
		return -1;
	}
	if (path[0] == '/') {
		p->abs = lexical_resolve("/", path);
	} else {
		const char *dirs[2];
		size_t n = allowed_dirs(ws, dirs);

		for (size_t i = 0; i < n && p->abs == NULL; i++) {
			char *cand = lexical_resolve(dirs[i], path);

			if (fstools_path_allowed(ws, cand))
				p->abs = cand;
			else
				free(cand);
		}
		if (p->abs == NULL)
			p->abs = lexical_resolve(dirs[0], path);
	}
	free(path);
	if (!fstools_path_allowed(ws, p->abs)) {
		*msg = msg_outside(ws, p->abs);
		fstools_path_free(p);
		return -1;
	}
	real = realpath(p->abs, NULL);
	if (real == NULL && errno == ENOENT) {
		real = resolve_missing(ws, p->abs, msg);
	} else if (real == NULL) {
		*msg = fstools_msg_errno(errno, "realpath", p->abs, NULL);
	} else if (!fstools_path_allowed(ws, real)) {
		*msg = fstools_msg_symlink_out(ws, real);
		free(real);
		real = NULL;
	}
	if (real == NULL) {
		fstools_path_free(p);
		return -1;
	}
	p->real = real;
	if (path_normalize(ws, real, &p->rel, &err) < 0) {
		*msg = msg_outside(ws, real);
		fstools_path_free(p);
		return -1;
	}
	return 0;
}

void
fstools_path_free(struct fstools_path *p)
{
	free(p->abs);
	free(p->real);
	free(p->rel);
	memset(p, 0, sizeof *p);
}

int
fstools_open(const struct workspace *ws, const char *rel, int flags,
    mode_t mode)
{
	struct open_how how = {
		.flags = (unsigned long long)(flags | O_CLOEXEC),
		.mode = (flags & O_CREAT) ? mode : 0,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	int fd;

	do
		fd = (int)syscall(SYS_openat2, ws->rootfd,
		    rel[0] != '\0' ? rel : ".", &how, sizeof how);
	while (fd < 0 && errno == EAGAIN);
	return fd;
}

int
fstools_open_msg(const struct workspace *ws, const struct fstools_path *p,
    int flags,
    const char *syscall, char **msg)
{
	int fd = fstools_open(ws, p->rel, flags, 0);

	if (fd >= 0)
		return fd;
	/* Only a link swapped in since the path was checked gets here. */
	if (errno == EXDEV || errno == ELOOP)
		*msg = fstools_msg_symlink_out(ws, p->real);
	else
		*msg = fstools_msg_errno(errno, syscall, p->real, NULL);
	return -1;
}

int
fstools_open_parent(const struct workspace *ws, const char *rel,
    const char **base)
{
	const char *slash = strrchr(rel, '/');
	char *dir;
	int fd, e;

	if (rel[0] == '\0') {
		/* The root's parent is outside: nothing may be put there. */
		errno = EBUSY;
		return -1;
	}
	*base = slash != NULL ? slash + 1 : rel;
	if (slash == NULL)
		return fstools_open(ws, "", O_PATH | O_DIRECTORY, 0);
	dir = xstrndup(rel, (size_t)(slash - rel));
	fd = fstools_open(ws, dir, O_PATH | O_DIRECTORY, 0);
	e = errno;
	free(dir);
	errno = e;
	return fd;
}
