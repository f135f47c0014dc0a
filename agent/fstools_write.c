/*
 * The tools that change the workspace, edit_file aside: write_file,
 * create_directory and move_file, with the npm server's semantics (write
 * creates exclusively or replaces atomically keeping the mode; a move
 * never overwrites) and Node's error texts.
 */
#include "fstools.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "xmalloc.h"

static json_t *
success(char *text)
{
	json_t *result = fstools_result_text(text, strlen(text));

	free(text);
	return result;
}

static void
errno_msg(const struct workspace *ws, const struct fstools_path *p, int e,
    const char *syscall, char **msg)
{
	if (e == EXDEV || e == ELOOP)
		*msg = fstools_msg_symlink_out(ws, p->real);
	else
		*msg = fstools_msg_errno(e, syscall, p->real, NULL);
}

/* A file this call created and could not fill goes again. */
static void
remove_new(const struct workspace *ws, const struct fstools_path *p)
{
	const char *base;
	int dirfd = fstools_open_parent(ws, p->rel, &base);

	if (dirfd >= 0) {
		unlinkat(dirfd, base, 0);
		close(dirfd);
	}
}

/* Exclusive creation first, so that nothing is written through a link
 * that exists; an existing file is replaced by a rename, keeping its
 * permission bits. */
json_t *
fstools_tool_write_file(const struct workspace *ws, json_t *args)
{
	const char *path = fstools_arg_string(args, "path");
	json_t *jcontent = json_object_get(args, "content");
	const char *content = json_string_value(jcontent);
	size_t len = json_string_length(jcontent);
	struct fstools_path p;
	struct stat st;
	char *msg = NULL;
	int fd, e;

	if (fstools_path_resolve(ws, path, &p, &msg) < 0)
		return fstools_result_error_free(msg);
	fd = fstools_open(ws, p.rel, O_WRONLY | O_CREAT | O_EXCL, 0666);
	if (fd >= 0) {
		e = fdio_write_all(fd, content, len) < 0 ? errno : 0;
		close(fd);
		if (e != 0) {
			msg = fstools_msg_errno(e, "write", NULL, NULL);
			remove_new(ws, &p);
		}
	} else if (errno != EEXIST) {
		errno_msg(ws, &p, errno, "open", &msg);
	} else if ((fd = fstools_open_msg(ws, &p, O_PATH, "stat", &msg)) >= 0) {
		e = fstat(fd, &st) < 0 ? errno : 0;
		close(fd);
		if (e != 0)
			msg = fstools_msg_errno(e, "stat", p.real, NULL);
		else
			fstools_replace_file(ws, &p, content, len,
			    (int)(st.st_mode & 0777), &msg);
	}
	fstools_path_free(&p);
	if (msg != NULL)
		return fstools_result_error_free(msg);
	return success(xasprintf("Successfully wrote to %s", path));
}

/* mkdir -p one component at a time, each opened without following a
 * link, so that a symlink swapped in cannot redirect it. */
json_t *
fstools_tool_create_directory(const struct workspace *ws, json_t *args)
{
	const char *path = fstools_arg_string(args, "path");
	struct fstools_path p;
	char *msg = NULL, *rest;
	int dirfd;

	if (fstools_path_resolve(ws, path, &p, &msg) < 0)
		return fstools_result_error_free(msg);
	if ((dirfd = fstools_open(ws, "", O_PATH | O_DIRECTORY, 0)) < 0)
		msg = fstools_msg_errno(errno, "mkdir", p.real, NULL);
	rest = p.rel;
	while (msg == NULL && *rest != '\0') {
		char *slash = strchr(rest, '/');
		int fd;

		if (slash != NULL)
			*slash = '\0';
		if (mkdirat(dirfd, rest, 0777) < 0 && errno != EEXIST) {
			msg = fstools_msg_errno(errno, "mkdir", p.real, NULL);
			break;
		}
		fd = openat(dirfd, rest, O_PATH | O_DIRECTORY | O_NOFOLLOW |
		    O_CLOEXEC);
		if (fd < 0) {
			int e = errno == ELOOP ? ENOTDIR : errno;

			if (e == ENOTDIR && slash == NULL)
				e = EEXIST;
			msg = fstools_msg_errno(e, "mkdir", p.real, NULL);
			break;
		}
		close(dirfd);
		dirfd = fd;
		if (slash == NULL)
			break;
		*slash = '/';
		rest = slash + 1;
	}
	if (dirfd >= 0)
		close(dirfd);
	fstools_path_free(&p);
	if (msg != NULL)
		return fstools_result_error_free(msg);
	return success(xasprintf("Successfully created directory %s", path));
}

/* A filesystem without RENAME_NOREPLACE says EINVAL; the lstat before
 * is then the only guard, as it is the npm server's. */
static int
rename_noreplace(int sdir, const char *sbase, int ddir, const char *dbase)
{
	if (renameat2(sdir, sbase, ddir, dbase, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL)
		return -1;
	return renameat(sdir, sbase, ddir, dbase);
}

/* Refuses to overwrite anything at the destination, as the server's
 * moveFile does; RENAME_NOREPLACE closes the window its lstat leaves. */
json_t *
fstools_tool_move_file(const struct workspace *ws, json_t *args)
{
	const char *source = fstools_arg_string(args, "source");
	const char *destination = fstools_arg_string(args, "destination");
	struct fstools_path src, dst;
	const char *sbase, *dbase;
	char *msg = NULL;
	int fd, sdir = -1, ddir = -1;

	if (fstools_path_resolve(ws, source, &src, &msg) < 0)
		return fstools_result_error_free(msg);
	if (fstools_path_resolve(ws, destination, &dst, &msg) < 0) {
		fstools_path_free(&src);
		return fstools_result_error_free(msg);
	}
	fd = fstools_open(ws, dst.rel, O_PATH | O_NOFOLLOW, 0);
	if (fd >= 0) {
		close(fd);
		msg = xasprintf("Destination already exists: %s", dst.real);
	} else if (errno != ENOENT) {
		errno_msg(ws, &dst, errno, "lstat", &msg);
	} else if ((sdir = fstools_open_parent(ws, src.rel, &sbase)) < 0 ||
	    (ddir = fstools_open_parent(ws, dst.rel, &dbase)) < 0 ||
	    rename_noreplace(sdir, sbase, ddir, dbase) < 0) {
		if (errno == EEXIST)
			msg = xasprintf("Destination already exists: %s",
			    dst.real);
		else
			msg = fstools_msg_errno(errno, "rename", src.real,
			    dst.real);
	}
	if (sdir >= 0)
		close(sdir);
	if (ddir >= 0)
		close(ddir);
	fstools_path_free(&src);
	fstools_path_free(&dst);
	if (msg != NULL)
		return fstools_result_error_free(msg);
	return success(xasprintf("Successfully moved %s to %s", source,
	    destination));
}
