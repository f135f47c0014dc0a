/*
 * rm -rf of a small tree in the process, through descriptors: a released
 * sandbox's workspace or directory is most often a few entries, for which
 * a fork and exec of rm costs tens of times more than the removal, and in
 * a burst (a shutdown of a thousand) takes the CPU from the creates. Its
 * contents may be a sandbox user's: no name is followed (O_NOFOLLOW, and
 * every entry is unlinked from its parent's descriptor), and the work is
 * bounded (entries and depth) so that the loop is never held by a big or
 * deep tree; the caller runs rm -rf on what is left then.
 */
#include "sandboxd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* Deeper than this is left to rm: each level holds a descriptor. */
#define RMTREE_DEPTH 16

/* The entries of the directory at fd, then nothing else. -1 (errno) when
 * the budget or depth ran out or an entry could not go. */
static int
empty(int fd, size_t *budget, int depth)
{
	DIR *d = fdopendir(fd);
	struct dirent *e;
	int rc = 0;

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
		if (*budget == 0) {
			errno = E2BIG;
			rc = -1;
			break;
		}
		(*budget)--;
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
		if (sub < 0 || empty(sub, budget, depth + 1) < 0)
			rc = -1;
		else
			rc = unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
	}
	closedir(d);
	return rc;
}

int
sandboxd_rmtree_small(int dirfd, const char *name, size_t budget)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);

	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	if (empty(fd, &budget, 0) < 0)
		return -1;
	return unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT ?
	    -1 : 0;
}
