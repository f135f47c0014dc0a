/*
 * mkdir -p for sandboxd's own directories (the state, mount and storage
 * folders at start, a workspace under its root): the components that are
 * missing are made 0755, the last one with the mode asked for.
 */
#include "sandboxd.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "xmalloc.h"

int
sandboxd_mkdirs(const char *path, size_t from, mode_t mode)
{
	char *p = xstrdup(path);

	for (char *s = p + from + 1; *s != '\0'; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST) {
			free(p);
			return -1;
		}
		*s = '/';
	}
	free(p);
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -1;
	return 0;
}
