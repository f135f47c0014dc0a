/*
 * In a file helper (envd_fs_helper.c): EntryInfo of filesystem.proto, as
 * envd fills it. From lstat: name, size, modification time, owner and
 * group (by name), and "permissions" in Go's FileMode notation
 * ("-rw-r--r--", "drwxr-xr-x", "Lrwxrwxrwx"). A symlink shows the type
 * and permission bits of what it finally leads to (unspecified when
 * nothing), and that target's resolved path. Metadata: the file's
 * user.e2b.* extended attributes, as E2B stores X-Metadata-* headers.
 */
#include "envd_fs.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>

#include "utf8.h"
#include "xmalloc.h"

#define NAMES_MAX	64	/* ids remembered through one operation */
#define XATTR_PREFIX	"user.e2b."
#define ENTRY_XATTRS_MAX	(64 * 1024)
#define ENTRY_XATTR_VALUE_MAX	4096

/* Owner and group names met so far; owned by one operation. */
struct envd_names {
	struct {
		unsigned id;
		int group;
		char *name;
	} v[NAMES_MAX];
	size_t n;
};

struct envd_names *
envd_names_new(void)
{
	return xcalloc(1, sizeof(struct envd_names));
}

void
envd_names_free(struct envd_names *names)
{
	for (size_t i = 0; names != NULL && i < names->n; i++)
		free(names->v[i].name);
	free(names);
}

/* The name of a user or group id, as the sandbox's files have it; the
 * number when there is none. */
static const char *
name_of(struct envd_names *names, unsigned id, int group)
{
	static char number[16];
	struct passwd *pw;
	struct group *gr;
	char *name = NULL;
	FILE *f;

	for (size_t i = 0; i < names->n; i++)
		if (names->v[i].id == id && names->v[i].group == group)
			return names->v[i].name;
	if ((f = fopen(group ? "/etc/group" : "/etc/passwd", "re")) != NULL) {
		if (group) {
			while (name == NULL && (gr = fgetgrent(f)) != NULL)
				if (gr->gr_gid == id)
					name = xstrdup(gr->gr_name);
		} else {
			while (name == NULL && (pw = fgetpwent(f)) != NULL)
				if (pw->pw_uid == id)
					name = xstrdup(pw->pw_name);
		}
		fclose(f);
	}
	if (name == NULL)
		name = xasprintf("%u", id);
	if (names->n == NAMES_MAX) {
		snprintf(number, sizeof number, "%s", name);
		free(name);
		return number;
	}
	names->v[names->n].id = id;
	names->v[names->n].group = group;
	names->v[names->n].name = name;
	return names->v[names->n++].name;
}

/* Go's os.FileMode.String() of a stat mode: type letters in Go's order
 * ("dalTLDpSugct?", those Linux has), '-' when none, then rwx. */
static void
mode_string(mode_t m, char *out)
{
	static const char rwx[] = "rwxrwxrwx";
	char *p = out;

	if (S_ISDIR(m))
		*p++ = 'd';
	if (S_ISLNK(m))
		*p++ = 'L';
	if (S_ISBLK(m) || S_ISCHR(m))
		*p++ = 'D';
	if (S_ISFIFO(m))
		*p++ = 'p';
	if (S_ISSOCK(m))
		*p++ = 'S';
	if (m & S_ISUID)
		*p++ = 'u';
	if (m & S_ISGID)
		*p++ = 'g';
	if (S_ISCHR(m))
		*p++ = 'c';
	if (m & S_ISVTX)
		*p++ = 't';
	if (p == out)
		*p++ = '-';
	for (int i = 0; i < 9; i++)
		*p++ = (m & (1 << (8 - i))) ? rwx[i] : '-';
	*p = '\0';
}

/* RFC 3339 in UTC, as protobuf's JSON mapping writes a Timestamp. */
static json_t *
timestamp(const struct timespec *ts)
{
	char buf[64];
	struct tm tm;
	size_t n;

	gmtime_r(&ts->tv_sec, &tm);
	n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
	if (ts->tv_nsec != 0)
		n += (size_t)snprintf(buf + n, sizeof buf - n, ".%09ld",
		    ts->tv_nsec);
	snprintf(buf + n, sizeof buf - n, "Z");
	return json_string(buf);
}

static const char *
file_type(mode_t m)
{
	if (S_ISREG(m))
		return "FILE_TYPE_FILE";
	if (S_ISDIR(m))
		return "FILE_TYPE_DIRECTORY";
	return "FILE_TYPE_UNSPECIFIED";
}

/* The user.e2b.* attributes of path (following a link), as an object;
 * NULL when there are none. Values that are not UTF-8 are left out, as
 * E2B does. */
static json_t *
metadata(const char *path)
{
	char *list = xmalloc(ENTRY_XATTRS_MAX), *value = xmalloc(ENTRY_XATTR_VALUE_MAX);
	ssize_t n = listxattr(path, list, ENTRY_XATTRS_MAX), vn;
	size_t plen = strlen(XATTR_PREFIX);
	json_t *obj = NULL;

	for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(list +
	    off) + 1) {
		const char *name = list + off;

		if (strncmp(name, XATTR_PREFIX, plen) != 0 ||
		    (vn = getxattr(path, name, value, ENTRY_XATTR_VALUE_MAX)) < 0 ||
		    !utf8_valid(name, strlen(name)) ||
		    !utf8_valid(value, (size_t)vn))
			continue;
		if (obj == NULL)
			obj = json_object();
		json_object_set_new(obj, name + plen, json_stringn(value,
		    (size_t)vn));
	}
	free(list);
	free(value);
	return obj;
}

/* The last component of path, as Go's FileInfo.Name() gives it. */
static char *
base_name(const char *path)
{
	size_t len = strlen(path), start;

	while (len > 1 && path[len - 1] == '/')
		len--;
	start = len;
	while (start > 0 && path[start - 1] != '/')
		start--;
	if (start == len)
		return xstrdup("/");
	return xstrndup(path + start, len - start);
}

json_t *
envd_fs_entry(const char *path, const char *shown_path,
    struct envd_names *names, struct error *err)
{
	struct stat st, target;
	char perms[16], size[32], *name, *resolved = NULL;
	const char *owner;
	mode_t kind;
	json_t *e, *meta;

	if (lstat(path, &st) < 0) {
		envd_fs_errno(err, errno, "stat", shown_path ? shown_path : path);
		return NULL;
	}
	kind = st.st_mode;
	if (S_ISLNK(st.st_mode)) {
		resolved = realpath(path, NULL);
		if (resolved == NULL)
			resolved = xstrdup(path);
		kind = stat(resolved, &target) == 0 ? target.st_mode : 0;
	}
	mode_string(st.st_mode, perms);
	snprintf(size, sizeof size, "%lld", (long long)st.st_size);
	name = base_name(shown_path ? shown_path : path);
	/* Names are bytes; JSON wants UTF-8 (invalid sequences replaced). */
	e = json_object();
	json_object_set_new(e, "name", utf8_json_string(name, strlen(name)));
	json_object_set_new(e, "type", json_string(S_ISLNK(st.st_mode) &&
	    kind == 0 ? "FILE_TYPE_UNSPECIFIED" : file_type(kind)));
	shown_path = shown_path ? shown_path : path;
	json_object_set_new(e, "path", utf8_json_string(shown_path,
	    strlen(shown_path)));
	json_object_set_new(e, "size", json_string(size));
	json_object_set_new(e, "mode", json_integer(kind & 0777));
	json_object_set_new(e, "permissions", json_string(perms));
	owner = name_of(names, st.st_uid, 0);
	json_object_set_new(e, "owner", utf8_json_string(owner, strlen(owner)));
	owner = name_of(names, st.st_gid, 1);
	json_object_set_new(e, "group", utf8_json_string(owner, strlen(owner)));
	free(name);
	if (st.st_mtim.tv_sec != 0 || st.st_mtim.tv_nsec != 0)
		json_object_set_new(e, "modifiedTime", timestamp(&st.st_mtim));
	if (resolved != NULL)
		json_object_set_new(e, "symlinkTarget", utf8_json_string(resolved,
		    strlen(resolved)));
	free(resolved);
	if ((meta = metadata(path)) != NULL)
		json_object_set_new(e, "metadata", meta);
	return e;
}

void
envd_fs_errno(struct error *err, int e, const char *what, const char *path)
{
	int status;

	switch (e) {
	case ENOENT:
	case ENOTDIR:
		status = 404;
		break;
	case EACCES:
	case EPERM:
	case EROFS:
		status = 403;
		break;
	case EEXIST:
	case ENOTEMPTY:
	case EXDEV:
	case EBUSY:
		status = 409;
		break;
	case ELOOP:
		status = 412;
		break;
	case EISDIR:
	case ENAMETOOLONG:
	case EINVAL:
		status = 400;
		break;
	case ENOSPC:
	case EDQUOT:
		status = 507;
		break;
	default:
		status = 500;
	}
	error_set(err, status, "%s '%.1000s': %s", what, path, strerror(e));
}
