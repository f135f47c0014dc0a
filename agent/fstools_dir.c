/*
 * Directory listings: list_directory and list_directory_with_sizes, and
 * the directory reading the search tools share. Entries come sorted by
 * byte order, as libuv's scandir hands them to Node.
 */
#include "fstools.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xmalloc.h"

static int
by_name(const void *a, const void *b)
{
	return strcmp(((const struct fstools_entry *)a)->name,
	    ((const struct fstools_entry *)b)->name);
}

int
fstools_read_dir(int fd, struct fstools_entry **out, size_t *n)
{
	DIR *d = fdopendir(fd);
	struct fstools_entry *v = NULL;
	size_t len = 0, cap = 0;
	struct dirent *de;

	*out = NULL;
	*n = 0;
	if (d == NULL) {
		int e = errno;

		close(fd);
		return e;
	}
	errno = 0;
	while ((de = readdir(d)) != NULL) {
		unsigned char type = de->d_type;

		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		if (type == DT_UNKNOWN) {
			struct stat st;

			if (fstatat(dirfd(d), de->d_name, &st,
			    AT_SYMLINK_NOFOLLOW) == 0)
				type = S_ISDIR(st.st_mode) ? DT_DIR :
				    S_ISLNK(st.st_mode) ? DT_LNK : DT_REG;
		}
		if (len == cap) {
			cap = cap ? cap * 2 : 32;
			v = xreallocarray(v, cap, sizeof *v);
		}
		v[len].name = xstrdup(de->d_name);
		v[len].type = type;
		len++;
		errno = 0;
	}
	if (errno != 0) {
		int e = errno;

		fstools_entries_free(v, len);
		closedir(d);
		return e;
	}
	closedir(d);
	if (len > 1)
		qsort(v, len, sizeof *v, by_name);
	*out = v;
	*n = len;
	return 0;
}

void
fstools_entries_free(struct fstools_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].name);
	free(v);
}

int
fstools_list_dir(const struct workspace *ws, const char *rel, const char *real,
    struct fstools_entry **out, size_t *n, char **msg)
{
	int fd = fstools_open(ws, rel, O_RDONLY | O_DIRECTORY, 0), e;

	if (fd < 0) {
		if (errno == EXDEV || errno == ELOOP)
			*msg = fstools_msg_symlink_out(ws, real);
		else
			*msg = fstools_msg_errno(errno, "scandir", real, NULL);
		return -1;
	}
	if ((e = fstools_read_dir(fd, out, n)) != 0) {
		*msg = fstools_msg_errno(e, "scandir", real, NULL);
		return -1;
	}
	return 0;
}

json_t *
fstools_tool_list_directory(const struct workspace *ws, json_t *args)
{
	struct fstools_path p;
	struct fstools_entry *v;
	struct fstools_buf b = { 0 };
	size_t n;
	char *msg = NULL;
	json_t *result;

	if (fstools_path_resolve(ws, fstools_arg_string(args, "path"), &p,
	    &msg) < 0)
		return fstools_result_error_free(msg);
	if (fstools_list_dir(ws, p.rel, p.real, &v, &n, &msg) < 0) {
		fstools_path_free(&p);
		return fstools_result_error_free(msg);
	}
	fstools_path_free(&p);
	for (size_t i = 0; i < n; i++)
		fstools_buf_printf(&b, "%s%s %s", i > 0 ? "\n" : "",
		    v[i].type == DT_DIR ? "[DIR]" : "[FILE]", v[i].name);
	fstools_entries_free(v, n);
	result = fstools_result_text(b.s != NULL ? b.s : "", b.len);
	free(b.s);
	return result;
}

/* The server's formatSize: "0 B", "18 B", "1.19 KB" ... with toFixed(2)
 * rounding (half up on the exact binary value). Its unit is
 * floor(log(bytes) / log(1024)) in doubles, which for sizes below 1024^5
 * is exactly the largest power of 1024 not above bytes. */
static void
format_size(char *out, size_t size, long long bytes)
{
	static const char *const units[] = { "B", "KB", "MB", "GB", "TB" };
	unsigned __int128 num, den;
	unsigned long long q;
	int i;

	if (bytes <= 0) {
		snprintf(out, size, "0 B");
		return;
	}
	for (i = 0; i < 4 && bytes >= 1LL << (10 * (i + 1)); i++)
		;
	if (i == 0) {
		snprintf(out, size, "%lld B", bytes);
		return;
	}
	num = (unsigned __int128)bytes * 100;
	den = (unsigned __int128)1 << (10 * i);
	q = (unsigned long long)(num / den);
	if ((num % den) * 2 >= den)
		q++;
	snprintf(out, size, "%llu.%02llu %s", q / 100, q % 100, units[i]);
}

/* Length in UTF-16 units, which is what String.padEnd counts. */
static size_t
utf16_length(const char *s)
{
	size_t n = 0;

	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if ((*c & 0xc0) != 0x80)
			n++;
		if (*c >= 0xf0)
			n++;
	}
	return n;
}

/* A stand-in for ICU's root collation (String.localeCompare) on names:
 * punctuation < digits < letters, letters case-blind first and lower case
 * before upper case on a tie. Exact for ASCII; other characters sort after
 * ASCII letters by code point. */
static const char collation_order[] =
    " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz";

static unsigned
primary(unsigned char c)
{
	const char *at;

	if (c >= 'A' && c <= 'Z')
		c = (unsigned char)(c - 'A' + 'a');
	if (c >= 0x80)
		return 1000u + c;
	at = c != 0 ? strchr(collation_order, c) : NULL;
	return at != NULL ? (unsigned)(at - collation_order) + 1 : 0;
}

static int
collate(const char *a, const char *b)
{
	const unsigned char *x = (const unsigned char *)a;
	const unsigned char *y = (const unsigned char *)b;

	for (;;) {
		while (*x && primary(*x) == 0)
			x++;
		while (*y && primary(*y) == 0)
			y++;
		if (!*x || !*y)
			break;
		if (primary(*x) != primary(*y))
			return primary(*x) < primary(*y) ? -1 : 1;
		x++;
		y++;
	}
	if (*x || *y)
		return *x ? 1 : -1;
	for (x = (const unsigned char *)a, y = (const unsigned char *)b;
	    *x && *y; x++, y++) {
		int ux = *x >= 'A' && *x <= 'Z', uy = *y >= 'A' && *y <= 'Z';

		if (ux != uy)
			return ux - uy;
	}
	return strcmp(a, b);
}

struct sized {
	struct fstools_entry *e;
	long long size;
	size_t index;
};

static int
by_collation(const void *a, const void *b)
{
	const struct sized *x = a, *y = b;
	int c = collate(x->e->name, y->e->name);

	return c != 0 ? c : (x->index > y->index) - (x->index < y->index);
}

static int
by_size(const void *a, const void *b)
{
	const struct sized *x = a, *y = b;

	if (x->size != y->size)
		return x->size < y->size ? 1 : -1;
	return (x->index > y->index) - (x->index < y->index);
}

/* fs.stat of an entry: followed when it is a symlink, but only to targets
 * inside the workspace; anything else counts as a failed stat (size 0). */
static long long
entry_size(const struct workspace *ws, int dirfd, const char *dir_real,
    const struct fstools_entry *e)
{
	struct stat st;
	long long size = 0;

	if (e->type != DT_LNK) {
		if (fstatat(dirfd, e->name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			size = st.st_size;
	} else {
		struct fstools_path p;
		char *full = xasprintf("%s/%s", dir_real, e->name), *msg = NULL;
		int fd;

		if (fstools_path_resolve(ws, full, &p, &msg) == 0) {
			fd = fstools_open(ws, p.rel, O_PATH, 0);
			if (fd >= 0 && fstat(fd, &st) == 0)
				size = st.st_size;
			if (fd >= 0)
				close(fd);
			fstools_path_free(&p);
		}
		free(msg);
		free(full);
	}
	return size;
}

json_t *
fstools_tool_list_directory_with_sizes(const struct workspace *ws, json_t *args)
{
	const char *sort = fstools_arg_string(args, "sortBy");
	struct fstools_path p;
	struct fstools_entry *v;
	struct sized *s;
	struct fstools_buf b = { 0 };
	size_t n, files = 0, dirs = 0;
	long long total = 0;
	char *msg = NULL, sz[32];
	int dirfd;
	json_t *result;

	if (fstools_path_resolve(ws, fstools_arg_string(args, "path"), &p,
	    &msg) < 0)
		return fstools_result_error_free(msg);
	if (fstools_list_dir(ws, p.rel, p.real, &v, &n, &msg) < 0) {
		fstools_path_free(&p);
		return fstools_result_error_free(msg);
	}
	dirfd = fstools_open(ws, p.rel, O_PATH | O_DIRECTORY, 0);
	s = xcalloc(n + 1, sizeof *s);
	for (size_t i = 0; i < n; i++) {
		s[i].e = &v[i];
		s[i].index = i;
		if (dirfd >= 0)
			s[i].size = entry_size(ws, dirfd, p.real, &v[i]);
		if (v[i].type == DT_DIR) {
			dirs++;
		} else {
			files++;
			total += s[i].size;
		}
	}
	if (dirfd >= 0)
		close(dirfd);
	fstools_path_free(&p);
	qsort(s, n, sizeof *s, sort != NULL && strcmp(sort, "size") == 0 ?
	    by_size : by_collation);
	for (size_t i = 0; i < n; i++) {
		int is_dir = s[i].e->type == DT_DIR;
		size_t width = utf16_length(s[i].e->name);

		fstools_buf_printf(&b, "%s %s", is_dir ? "[DIR]" : "[FILE]",
		    s[i].e->name);
		for (; width < 30; width++)
			fstools_buf_str(&b, " ");
		format_size(sz, sizeof sz, s[i].size);
		fstools_buf_printf(&b, " %*s\n", is_dir ? 0 : 10,
		    is_dir ? "" : sz);
	}
	format_size(sz, sizeof sz, total);
	fstools_buf_printf(&b, "\nTotal: %zu files, %zu directories\n"
	    "Combined size: %s", files, dirs, sz);
	free(s);
	fstools_entries_free(v, n);
	result = fstools_result_text(b.s, b.len);
	free(b.s);
	return result;
}
