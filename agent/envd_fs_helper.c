/*
 * A file helper (envd_fs.h): a process of one sandbox user, executed from
 * the agent's binary, serving file operations one at a time on its fd 3.
 * Everything here runs with that user's ids, so the kernel decides what
 * it may do, exactly as for a shell of that user; paths are followed as
 * such a shell would follow them.
 *
 * The operations, as envd does them:
 *   stat {path}                     -> {entry}
 *   mkdir {path}                    -> {entry}; 409 if a directory is
 *                                      there, 400 if something else is
 *   move {source, destination}      -> {entry} of the destination
 *   list {path, depth}              -> items: entries below path, depth
 *                                      levels deep, lexical, depth first
 *   remove {path}                   -> {}; a missing path is no error
 *   open_read {path}                -> {size} and the file, read-only
 *   open_write {path, metadata?}    -> {metadata} and the file, truncated
 *   watch {path, recursive, allowNetworkMounts}
 *                                   -> items [wd, dir] and an inotify
 *   watch_add {path, dir} + inotify -> items [wd, dir]
 * Missing parent directories of mkdir, move and open_write are made
 * (0755). A frame that cannot be sent ends the helper: the agent is gone.
 */
#include "envd_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "utf8.h"
#include "xmalloc.h"

#define SOCK_FD		3
#define LIST_DEPTH_MAX	1024	/* recursion of one listing */
#define WATCH_DIRS_MAX	8192	/* directories one watcher watches */
#define XATTR_PREFIX	"user.e2b."
#define WATCH_MASK	(IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | \
    IN_MODIFY | IN_ATTRIB | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF)

/* Network file systems envd refuses to watch unless asked to. */
static const long network_fs[] = {
	0x6969,		/* NFS */
	(long)0xFF534D42,	/* CIFS */
	0x517B,		/* SMB */
	(long)0xFE534D42,	/* SMB2 */
	0x65735546,	/* FUSE */
};

/* Items of the answer being built, sent a frame at a time. */
static struct {
	char buf[ENVD_FS_FRAME];
	size_t len;		/* after the opening "{"more":[" */
	size_t count;		/* items of this answer */
} out;

static void __attribute__((noreturn))
gone(void)
{
	_exit(0);
}

static void
send_frame(const char *data, size_t len, int fd)
{
	while (envd_fs_send(SOCK_FD, data, len, fd, 0) < 0)
		if (errno != EINTR)
			gone();
}

static void
out_flush(void)
{
	static const char head[] = "{\"more\":[";
	char *frame;

	if (out.len == 0)
		return;
	frame = xmalloc(sizeof head + out.len + 2);
	memcpy(frame, head, sizeof head - 1);
	memcpy(frame + sizeof head - 1, out.buf, out.len);
	memcpy(frame + sizeof head - 1 + out.len, "]}", 2);
	send_frame(frame, sizeof head - 1 + out.len + 2, -1);
	free(frame);
	out.len = 0;
}

/* Queue an item (stolen); -1 with err when the answer would be too big. */
static int
out_item(json_t *item, struct error *err)
{
	char *text = json_dumps(item, JSON_COMPACT);
	size_t len = strlen(text);

	json_decref(item);
	if (out.count >= ENVD_FS_MAX_ITEMS || len + 16 > ENVD_FS_FRAME) {
		free(text);
		error_set(err, 413, "more than %d entries, or one too long: "
		    "ask for less", ENVD_FS_MAX_ITEMS);
		return -1;
	}
	if (out.len + len + 1 + 16 > ENVD_FS_FRAME)
		out_flush();
	if (out.len > 0)
		out.buf[out.len++] = ',';
	memcpy(out.buf + out.len, text, len);
	out.len += len;
	out.count++;
	free(text);
	return 0;
}

static void
send_json(json_t *frame, int fd)
{
	char *text = json_dumps(frame, JSON_COMPACT);

	json_decref(frame);
	send_frame(text, strlen(text), fd);
	free(text);
}

static char *
join(const char *dir, const char *name)
{
	size_t len = strlen(dir);

	return xasprintf("%s%s%s", dir, len > 0 && dir[len - 1] == '/' ?
	    "" : "/", name);
}

/* mkdir -p as envd's EnsureDirs: every missing directory of path. */
static int
ensure_dirs(const char *path, struct error *err)
{
	char *p = xstrdup(path);
	struct stat st;
	int rc = 0;

	for (char *c = p + 1; rc == 0; c++) {
		char save = *c;

		if (save != '/' && save != '\0')
			continue;
		*c = '\0';
		if (stat(p, &st) == 0) {
			if (!S_ISDIR(st.st_mode)) {
				error_set(err, 409, "path is a file: %s", p);
				rc = -1;
			}
		} else if (errno != ENOENT ||
		    (mkdir(p, 0755) < 0 && errno != EEXIST)) {
			envd_fs_errno(err, errno, "cannot create directory", p);
			rc = -1;
		}
		*c = save;
		if (save == '\0')
			break;
	}
	free(p);
	return rc;
}

static char *
dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	if (slash == NULL || slash == path)
		return xstrdup("/");
	return xstrndup(path, (size_t)(slash - path));
}

static json_t *
entry_result(const char *path, struct error *err)
{
	struct envd_names *names = envd_names_new();
	json_t *e = envd_fs_entry(path, NULL, names, err);

	envd_names_free(names);
	return e == NULL ? NULL : json_pack("{s:o}", "entry", e);
}

static json_t *
op_mkdir(const char *path, struct error *err)
{
	struct stat st;

	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			error_set(err, 409, "directory already exists: %s", path);
		else
			error_set(err, 400, "path already exists but it is not "
			    "a directory: %s", path);
		return NULL;
	}
	if (errno != ENOENT && errno != ENOTDIR) {
		envd_fs_errno(err, errno, "cannot stat", path);
		return NULL;
	}
	return ensure_dirs(path, err) < 0 ? NULL : entry_result(path, err);
}

static json_t *
op_move(const char *src, const char *dst, struct error *err)
{
	char *dir = dir_of(dst);
	int rc = ensure_dirs(dir, err);

	free(dir);
	if (rc < 0)
		return NULL;
	if (rename(src, dst) < 0) {
		if (errno == ENOENT)
			error_set(err, 404, "source file not found: %s", src);
		else
			envd_fs_errno(err, errno, "cannot move", src);
		return NULL;
	}
	return entry_result(dst, err);
}

static int
by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in directory path, sorted; NULL with errno when it cannot
 * be read. The directory is closed before the caller goes deeper, so
 * that depth costs no descriptors. */
static char **
read_names(const char *path, size_t *n)
{
	DIR *d = opendir(path);
	struct dirent *de;
	size_t cap = 16;
	char **v;

	*n = 0;
	if (d == NULL)
		return NULL;
	v = xreallocarray(NULL, cap, sizeof *v);
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (*n == cap)
			v = xreallocarray(v, cap *= 2, sizeof *v);
		v[(*n)++] = xstrdup(de->d_name);
	}
	closedir(d);
	qsort(v, *n, sizeof *v, by_name);
	return v;
}

static void
free_names(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* Entries below dir (shown below shown), depth levels deep. A directory
 * the user may not read keeps its contents to itself, as under ls -R. */
static int
walk(const char *dir, const char *shown, uint32_t depth,
    struct envd_names *names, struct error *err)
{
	size_t n;
	char **v = read_names(dir, &n);
	int rc = 0;

	if (v == NULL)
		return 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char *path = join(dir, v[i]), *show = join(shown, v[i]);
		struct error e = { 0 };
		json_t *entry = envd_fs_entry(path, show, names, &e);
		struct stat st;
		int listed = entry != NULL;

		/* Gone since it was read: skipped, as envd does. */
		if (listed) {
			rc = out_item(entry, err);
		} else if (e.status != 404) {
			*err = e;
			rc = -1;
		}
		if (rc == 0 && listed && depth > 1 &&
		    lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
			rc = walk(path, show, depth - 1, names, err);
		free(path);
		free(show);
	}
	free_names(v, n);
	return rc;
}

static json_t *
op_list(const char *path, uint32_t depth, struct error *err)
{
	char *resolved = realpath(path, NULL);
	struct envd_names *names;
	struct stat st;
	int rc;

	if (resolved == NULL) {
		if (errno == ENOENT || errno == ENOTDIR)
			error_set(err, 404, "path not found: %s", path);
		else if (errno == ELOOP)
			error_set(err, 412, "cyclic symlink or chain of too "
			    "many links at %s", path);
		else
			envd_fs_errno(err, errno, "cannot resolve", path);
		return NULL;
	}
	if (stat(resolved, &st) < 0 || !S_ISDIR(st.st_mode)) {
		error_set(err, 400, "path is not a directory: %s", path);
		free(resolved);
		return NULL;
	}
	if (access(resolved, R_OK | X_OK) < 0) {
		envd_fs_errno(err, errno, "cannot list", path);
		free(resolved);
		return NULL;
	}
	names = envd_names_new();
	rc = walk(resolved, path, depth > LIST_DEPTH_MAX ? LIST_DEPTH_MAX :
	    depth, names, err);
	envd_names_free(names);
	free(resolved);
	return rc < 0 ? NULL : json_object();
}

/* rm -rf of path, never following a link. */
static int
remove_tree(const char *path, struct error *err)
{
	struct stat st;
	size_t n;
	char **v;
	int rc = 0;

	if (lstat(path, &st) < 0)
		goto failed;
	if (!S_ISDIR(st.st_mode)) {
		if (unlink(path) < 0)
			goto failed;
		return 0;
	}
	if ((v = read_names(path, &n)) == NULL)
		goto failed;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char *child = join(path, v[i]);

		rc = remove_tree(child, err);
		free(child);
	}
	free_names(v, n);
	if (rc == 0 && rmdir(path) < 0)
		goto failed;
	return rc;
failed:
	if (errno == ENOENT)
		return 0;
	envd_fs_errno(err, errno, "cannot remove", path);
	return -1;
}

/* A regular file opened with flags, or -1 with err: never a FIFO or
 * device that would block or misbehave. */
static int
open_file(const char *path, int flags, struct error *err)
{
	struct stat st;
	int fd = open(path, flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0666);

	if (fd < 0) {
		if (errno == ENOENT)
			error_set(err, 404, "path '%s' does not exist", path);
		else if (errno == EISDIR)
			error_set(err, 400, "path '%s' is a directory", path);
		else
			envd_fs_errno(err, errno, "cannot open", path);
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		error_set(err, 400, "path '%s' is %s", path,
		    S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
		close(fd);
		return -1;
	}
	fcntl(fd, F_SETFL, 0);
	return fd;
}

/* Replace the file's user.e2b.* attributes by metadata (an object). A
 * file system without them keeps none, as in E2B. */
static int
set_metadata(int fd, json_t *metadata, struct error *err)
{
	char list[16 * 1024];
	ssize_t n = flistxattr(fd, list, sizeof list);
	const char *k;
	json_t *v;

	for (ssize_t off = 0; n > 0 && off < n;
	    off += (ssize_t)strlen(list + off) + 1)
		if (strncmp(list + off, XATTR_PREFIX, strlen(XATTR_PREFIX)) == 0)
			fremovexattr(fd, list + off);
	json_object_foreach(metadata, k, v) {
		char *name = xasprintf("%s%s", XATTR_PREFIX, k);
		int rc = json_is_string(v) ? fsetxattr(fd, name,
		    json_string_value(v), json_string_length(v), 0) : 0;

		free(name);
		if (rc < 0 && errno != ENOTSUP) {
			envd_fs_errno(err, errno, "cannot store metadata", k);
			return -1;
		}
	}
	return 0;
}

static json_t *
op_open_write(const char *path, json_t *metadata, int *fd,
    struct error *err)
{
	char *dir = dir_of(path);
	struct envd_names *names;
	json_t *entry, *result;
	int rc = ensure_dirs(dir, err);

	free(dir);
	if (rc < 0 || (*fd = open_file(path, O_WRONLY | O_CREAT | O_TRUNC,
	    err)) < 0)
		return NULL;
	if (set_metadata(*fd, metadata, err) < 0) {
		close(*fd);
		*fd = -1;
		return NULL;
	}
	names = envd_names_new();
	entry = envd_fs_entry(path, NULL, names, err);
	envd_names_free(names);
	result = json_object();
	if (entry != NULL && json_object_get(entry, "metadata") != NULL)
		json_object_set(result, "metadata",
		    json_object_get(entry, "metadata"));
	json_decref(entry);
	return result;
}

/* Watch dir (shown to the agent as rel) and, if recursive, every
 * directory below it that the user may read. */
static int
watch_tree(int ifd, const char *dir, const char *rel, int recursive,
    struct error *err)
{
	uint32_t mask = WATCH_MASK | IN_ONLYDIR | (rel[0] ? IN_DONT_FOLLOW : 0);
	int wd = inotify_add_watch(ifd, dir, mask), rc = 0;
	size_t n;
	char **v;

	if (wd < 0) {
		if (rel[0] != '\0' && (errno == ENOENT || errno == EACCES ||
		    errno == ENOTDIR))
			return 0;	/* gone meanwhile, or closed to us */
		envd_fs_errno(err, errno, "cannot watch", dir);
		return -1;
	}
	if (out.count >= WATCH_DIRS_MAX) {
		error_set(err, 413, "more than %d directories to watch",
		    WATCH_DIRS_MAX);
		return -1;
	}
	if (out_item(json_pack("[i,s]", wd, rel), err) < 0)
		return -1;
	if (!recursive || (v = read_names(dir, &n)) == NULL)
		return 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char *path = join(dir, v[i]);
		char *sub = rel[0] ? join(rel, v[i]) : xstrdup(v[i]);
		struct stat st;

		/* The agent names directories in JSON: one whose name is
		 * not UTF-8 is not watched. */
		if (utf8_valid(v[i], strlen(v[i])) && lstat(path, &st) == 0 &&
		    S_ISDIR(st.st_mode))
			rc = watch_tree(ifd, path, sub, 1, err);
		free(path);
		free(sub);
	}
	free_names(v, n);
	return rc;
}

static json_t *
op_watch(const char *path, int recursive, int network, int *fd,
    struct error *err)
{
	struct statfs sf;
	struct stat st;

	if (stat(path, &st) < 0) {
		if (errno == ENOENT)
			error_set(err, 404, "path %s not found", path);
		else
			envd_fs_errno(err, errno, "cannot stat", path);
		return NULL;
	}
	if (!S_ISDIR(st.st_mode)) {
		error_set(err, 400, "path %s not a directory", path);
		return NULL;
	}
	for (size_t i = 0; !network && statfs(path, &sf) == 0 &&
	    i < sizeof network_fs / sizeof network_fs[0]; i++)
		if ((long)sf.f_type == network_fs[i]) {
			error_set(err, 400, "cannot watch path on network "
			    "filesystem: %s", path);
			return NULL;
		}
	if ((*fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) {
		envd_fs_errno(err, errno, "cannot watch", path);
		return NULL;
	}
	if (watch_tree(*fd, path, "", recursive, err) < 0) {
		close(*fd);
		*fd = -1;
		return NULL;
	}
	return json_object();
}

/* One request; the answer is sent. */
static void
serve(json_t *req, int in_fd)
{
	const char *op = json_string_value(json_object_get(req, "op"));
	const char *path = json_string_value(json_object_get(req, "path"));
	json_t *result = NULL;
	struct error err = { 0 };
	int fd = -1;

	out.len = out.count = 0;
	if (op == NULL || path == NULL || path[0] != '/') {
		error_set(&err, 400, "bad request");
	} else if (strcmp(op, "stat") == 0) {
		result = entry_result(path, &err);
	} else if (strcmp(op, "mkdir") == 0) {
		result = op_mkdir(path, &err);
	} else if (strcmp(op, "move") == 0) {
		const char *dst = json_string_value(json_object_get(req,
		    "destination"));

		if (dst == NULL || dst[0] != '/')
			error_set(&err, 400, "bad request");
		else
			result = op_move(path, dst, &err);
	} else if (strcmp(op, "list") == 0) {
		result = op_list(path, (uint32_t)json_integer_value(
		    json_object_get(req, "depth")), &err);
	} else if (strcmp(op, "remove") == 0) {
		if (remove_tree(path, &err) == 0)
			result = json_object();
	} else if (strcmp(op, "open_read") == 0) {
		if ((fd = open_file(path, O_RDONLY, &err)) >= 0)
			result = json_object();
	} else if (strcmp(op, "open_write") == 0) {
		result = op_open_write(path, json_object_get(req, "metadata"),
		    &fd, &err);
	} else if (strcmp(op, "watch") == 0) {
		result = op_watch(path, json_is_true(json_object_get(req,
		    "recursive")), json_is_true(json_object_get(req,
		    "allowNetworkMounts")), &fd, &err);
	} else if (strcmp(op, "watch_add") == 0 && in_fd >= 0) {
		const char *rel = json_string_value(json_object_get(req, "dir"));

		if (rel != NULL && watch_tree(in_fd, path, rel, 1, &err) == 0)
			result = json_object();
	} else {
		error_set(&err, 400, "bad request");
	}
	if (result == NULL) {
		if (err.status == 0)
			error_set(&err, 500, "failed");
		send_json(json_pack("{s:{s:i, s:o}}", "error", "status",
		    err.status, "message", utf8_json_string(err.msg,
		    strlen(err.msg))), -1);
		return;
	}
	out_flush();
	send_json(json_pack("{s:o}", "ok", result), fd);
	if (fd >= 0)
		close(fd);
}

int
envd_fs_helper_main(void)
{
	char *buf = xmalloc(ENVD_FS_FRAME);
	char cbuf[CMSG_SPACE(sizeof(int))];

	/* No other process of the user may read or write our memory
	 * (/proc/PID/mem needs the dumpable flag for the same user). */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	umask(022);
	for (;;) {
		struct iovec iov = { buf, ENVD_FS_FRAME };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
		    .msg_control = cbuf, .msg_controllen = sizeof cbuf };
		struct cmsghdr *c;
		ssize_t n = recvmsg(SOCK_FD, &mh, MSG_CMSG_CLOEXEC);
		int in_fd = -1;
		json_t *req;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			gone();
		c = CMSG_FIRSTHDR(&mh);
		if (c != NULL && c->cmsg_level == SOL_SOCKET &&
		    c->cmsg_type == SCM_RIGHTS)
			memcpy(&in_fd, CMSG_DATA(c), sizeof(int));
		req = json_loadb(buf, (size_t)n, 0, NULL);
		serve(req, in_fd);
		json_decref(req);
		if (in_fd >= 0)
			close(in_fd);
	}
}
