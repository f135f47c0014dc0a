/*
 * Workspace path resolution against a real directory tree in /tmp, with
 * symlinks planted to lead out of the root.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "path.h"
#include "xmalloc.h"

/*
 * base/
 *   ws/                      the workspace root
 *     sub/file.txt           "inside"
 *     inlink -> sub/file.txt
 *     subdirlink -> sub
 *     abslink -> BASE/outside/secret.txt
 *     rellink -> ../outside/secret.txt
 *     outdir -> BASE/outside
 *     reloutdir -> ../outside
 *     dangling -> BASE/outside/created.txt
 *   ws2/file                 beside the root, shares its name as a prefix
 *   wslink -> ws
 *   outside/secret.txt       "secret"
 */
struct fixture {
	char *base;
	char *root;
	struct workspace ws;
};

static char *
at(const struct fixture *f, const char *rel)
{
	return xasprintf("%s/%s", f->base, rel);
}

static void
write_file(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");

	assert_non_null(fp);
	fputs(text, fp);
	assert_int_equal(fclose(fp), 0);
}

static void
make_dir(const struct fixture *f, const char *rel)
{
	char *p = at(f, rel);

	assert_int_equal(mkdir(p, 0755), 0);
	free(p);
}

static void
make_link(const struct fixture *f, const char *target, const char *rel)
{
	char *p = at(f, rel);

	assert_int_equal(symlink(target, p), 0);
	free(p);
}

static int
exists(const struct fixture *f, const char *rel)
{
	char *p = at(f, rel);
	struct stat st;
	int rc = lstat(p, &st);

	free(p);
	return rc == 0;
}

static int
setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof *f);
	char tmpl[] = "/tmp/unit-path-XXXXXX";
	struct error err = { 0 };
	char *p, *q;

	assert_non_null(mkdtemp(tmpl));
	f->base = xstrdup(tmpl);
	make_dir(f, "ws");
	make_dir(f, "ws/sub");
	make_dir(f, "ws2");
	make_dir(f, "outside");
	p = at(f, "ws/sub/file.txt");
	write_file(p, "inside");
	free(p);
	p = at(f, "ws2/file");
	write_file(p, "beside");
	free(p);
	p = at(f, "outside/secret.txt");
	write_file(p, "secret");
	make_link(f, p, "ws/abslink");
	free(p);
	make_link(f, "sub/file.txt", "ws/inlink");
	make_link(f, "sub", "ws/subdirlink");
	make_link(f, "../outside/secret.txt", "ws/rellink");
	p = at(f, "outside");
	make_link(f, p, "ws/outdir");
	free(p);
	make_link(f, "../outside", "ws/reloutdir");
	p = at(f, "outside/created.txt");
	make_link(f, p, "ws/dangling");
	free(p);
	make_link(f, "ws", "wslink");

	f->root = at(f, "ws");
	/* Given with a trailing slash, which the workspace drops. */
	q = xasprintf("%s/", f->root);
	assert_int_equal(workspace_open(&f->ws, q, &err), 0);
	free(q);
	assert_string_equal(f->ws.root, f->root);
	*state = f;
	return 0;
}

static int
remove_cb(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path);
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	workspace_close(&f->ws);
	assert_int_equal(nftw(f->base, remove_cb, 16, FTW_DEPTH | FTW_PHYS), 0);
	free(f->root);
	free(f->base);
	free(f);
	return 0;
}

/* Descriptors this process holds, to show a refused open left none. */
static int
open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void
assert_normal(const struct workspace *ws, const char *path, const char *want)
{
	struct error err = { 0 };
	char *rel = NULL;

	if (path_normalize(ws, path, &rel, &err) < 0)
		fail_msg("'%s' refused: %d %s", path, err.status, err.msg);
	assert_string_equal(rel, want);
	free(rel);
}

static void
assert_refused(const struct workspace *ws, const char *path, int status)
{
	struct error err = { 0 };
	char *rel = (char *)1;

	if (path_normalize(ws, path, &rel, &err) == 0)
		fail_msg("'%s' accepted as '%s'", path, rel);
	assert_null(rel);
	assert_int_equal(err.status, status);
	assert_true(err.msg[0] != '\0');
}

static void
test_normalize_relative(void **state)
{
	struct fixture *f = *state;

	assert_normal(&f->ws, "a", "a");
	assert_normal(&f->ws, "a/b/c.txt", "a/b/c.txt");
	assert_normal(&f->ws, "a//b/./c/", "a/b/c");
	assert_normal(&f->ws, "a/b/../c", "a/c");
	assert_normal(&f->ws, "a/b/../../c", "c");
	assert_normal(&f->ws, "a/..", "");
	assert_normal(&f->ws, "./", "");
	assert_normal(&f->ws, ".", "");
	assert_normal(&f->ws, "...", "...");
	assert_normal(&f->ws, "..a/.b", "..a/.b");
}

static void
test_normalize_absolute_inside(void **state)
{
	struct fixture *f = *state;
	char *p;

	p = xasprintf("%s/a/b", f->root);
	assert_normal(&f->ws, p, "a/b");
	free(p);
	assert_normal(&f->ws, f->root, "");
	p = xasprintf("%s/", f->root);
	assert_normal(&f->ws, p, "");
	free(p);
	p = xasprintf("%s/a/../b", f->root);
	assert_normal(&f->ws, p, "b");
	free(p);
}

static void
test_normalize_absolute_outside(void **state)
{
	struct fixture *f = *state;
	char *p;

	assert_refused(&f->ws, "/etc/passwd", 403);
	assert_refused(&f->ws, "/", 403);
	p = at(f, "outside/secret.txt");
	assert_refused(&f->ws, p, 403);
	free(p);
	/* The root's name is a string prefix of "ws2": still outside. */
	p = at(f, "ws2/file");
	assert_refused(&f->ws, p, 403);
	free(p);
	p = at(f, "ws2");
	assert_refused(&f->ws, p, 403);
	free(p);
	/* Into the root, then out by "..". */
	p = xasprintf("%s/../ws2/file", f->root);
	assert_refused(&f->ws, p, 403);
	free(p);
}

static void
test_normalize_dotdot(void **state)
{
	struct fixture *f = *state;

	assert_refused(&f->ws, "..", 403);
	assert_refused(&f->ws, "../", 403);
	assert_refused(&f->ws, "a/../..", 403);
	assert_refused(&f->ws, "a/../../b", 403);
	assert_refused(&f->ws, "./../x", 403);
	/* Leaving and coming back in is still leaving. */
	assert_refused(&f->ws, "../ws/sub", 403);
}

static void
test_normalize_empty(void **state)
{
	struct fixture *f = *state;

	assert_refused(&f->ws, "", 400);
	assert_refused(&f->ws, NULL, 400);
}

static void
test_normalize_root_through_symlink(void **state)
{
	struct fixture *f = *state;
	struct workspace ws;
	struct error err = { 0 };
	char *link = at(f, "wslink"), *p, *q;

	assert_int_equal(workspace_open(&ws, link, &err), 0);
	/* Both spellings of the root are inside it. */
	p = xasprintf("%s/sub/x", link);
	assert_normal(&ws, p, "sub/x");
	free(p);
	p = xasprintf("%s/sub/x", f->root);
	assert_normal(&ws, p, "sub/x");
	free(p);
	p = at(f, "wslinkx/a");
	assert_refused(&ws, p, 403);
	free(p);
	p = path_absolute(&ws, "sub/x");
	q = xasprintf("%s/sub/x", link);
	assert_string_equal(p, q);
	free(p);
	free(q);
	workspace_close(&ws);
	free(link);
}

static void
test_absolute(void **state)
{
	struct fixture *f = *state;
	char *p = path_absolute(&f->ws, ""), *want;

	assert_string_equal(p, f->root);
	free(p);
	p = path_absolute(&f->ws, "a/b");
	want = xasprintf("%s/a/b", f->root);
	assert_string_equal(p, want);
	free(p);
	free(want);
}

static void
test_workspace_open_errors(void **state)
{
	struct fixture *f = *state;
	struct workspace ws;
	struct error err = { 0 };
	char *p;

	assert_int_equal(workspace_open(&ws, "relative/dir", &err), -1);
	assert_int_equal(err.status, 400);
	workspace_close(&ws);
	p = at(f, "missing");
	assert_int_equal(workspace_open(&ws, p, &err), -1);
	assert_int_equal(err.status, 500);
	workspace_close(&ws);
	free(p);
}

static char *
read_all(int fd)
{
	char buf[256];
	ssize_t n = read(fd, buf, sizeof buf - 1);

	assert_true(n >= 0);
	buf[n] = '\0';
	return xstrdup(buf);
}

static void
assert_opens_to(const struct fixture *f, const char *rel, const char *text)
{
	struct error err = { 0 };
	int fd = path_open(&f->ws, rel, O_RDONLY, 0, &err);
	char *got;

	if (fd < 0)
		fail_msg("open %s: %d %s", rel, err.status, err.msg);
	got = read_all(fd);
	assert_string_equal(got, text);
	free(got);
	close(fd);
}

static void
assert_open_refused(const struct fixture *f, const char *rel, int flags,
    int status)
{
	struct error err = { 0 };
	int before = open_fds();
	int fd = path_open(&f->ws, rel, flags, 0644, &err);

	if (fd >= 0) {
		close(fd);
		fail_msg("%s was opened", rel);
	}
	assert_int_equal(fd, -1);
	if (err.status != status)
		fail_msg("%s: want %d, got %d %s", rel, status, err.status,
		    err.msg);
	assert_int_equal(open_fds(), before);
}

static void
test_open_inside(void **state)
{
	struct fixture *f = *state;
	struct error err = { 0 };
	int fd;

	assert_opens_to(f, "sub/file.txt", "inside");
	/* Symlinks that stay inside the root are followed. */
	assert_opens_to(f, "inlink", "inside");
	assert_opens_to(f, "subdirlink/file.txt", "inside");
	fd = path_open(&f->ws, "", O_PATH | O_DIRECTORY, 0, &err);
	assert_true(fd >= 0);
	close(fd);
}

static void
test_open_symlink_outside(void **state)
{
	struct fixture *f = *state;

	assert_open_refused(f, "abslink", O_RDONLY, 403);
	assert_open_refused(f, "rellink", O_RDONLY, 403);
	assert_open_refused(f, "outdir/secret.txt", O_RDONLY, 403);
	assert_open_refused(f, "reloutdir/secret.txt", O_RDONLY, 403);
	assert_open_refused(f, "outdir", O_PATH | O_DIRECTORY, 403);
	/* Normalisation keeps ".." away, but the kernel would catch it too. */
	assert_open_refused(f, "../outside/secret.txt", O_RDONLY, 403);
}

static void
test_create_through_symlink_outside(void **state)
{
	struct fixture *f = *state;
	struct stat st;
	char *p;

	assert_open_refused(f, "dangling", O_WRONLY | O_CREAT | O_TRUNC, 403);
	assert_false(exists(f, "outside/created.txt"));
	assert_open_refused(f, "outdir/new.txt", O_WRONLY | O_CREAT, 403);
	assert_false(exists(f, "outside/new.txt"));
	assert_open_refused(f, "abslink", O_WRONLY | O_TRUNC, 403);
	assert_open_refused(f, "reloutdir/new.txt", O_WRONLY | O_CREAT, 403);
	assert_false(exists(f, "outside/new.txt"));
	/* The file behind the refused link is untouched. */
	assert_open_refused(f, "rellink", O_WRONLY | O_TRUNC, 403);
	p = at(f, "outside/secret.txt");
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_size, 6);
	free(p);
}

static void
test_open_errors(void **state)
{
	struct fixture *f = *state;

	assert_open_refused(f, "missing.txt", O_RDONLY, 404);
	assert_open_refused(f, "sub/file.txt/x", O_RDONLY, 404);
	assert_open_refused(f, "sub", O_WRONLY, 409);
	assert_open_refused(f, "sub/file.txt", O_WRONLY | O_CREAT | O_EXCL, 409);
}

static void
test_open_parent_creates_dirs(void **state)
{
	struct fixture *f = *state;
	struct error err = { 0 };
	const char *base = NULL;
	struct stat st;
	char *p;
	int fd;

	fd = path_open_parent(&f->ws, "a/b/c/file.txt", 1, &base, &err);
	if (fd < 0)
		fail_msg("%d %s", err.status, err.msg);
	assert_string_equal(base, "file.txt");
	close(fd);
	p = at(f, "ws/a/b/c");
	assert_int_equal(stat(p, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	free(p);

	/* Through a symlinked directory that stays inside. */
	fd = path_open_parent(&f->ws, "subdirlink/new/file", 1, &base, &err);
	assert_true(fd >= 0);
	close(fd);
	assert_true(exists(f, "ws/sub/new"));

	/* A name at the top: the root itself. */
	fd = path_open_parent(&f->ws, "top.txt", 0, &base, &err);
	assert_true(fd >= 0);
	assert_string_equal(base, "top.txt");
	close(fd);
}

static void
test_open_parent_refuses_symlink_outside(void **state)
{
	struct fixture *f = *state;
	static const char *const rels[] = {
		"outdir/x/y/file", "reloutdir/x/file", "outdir/file",
	};

	for (size_t i = 0; i < sizeof rels / sizeof rels[0]; i++) {
		struct error err = { 0 };
		const char *base;
		int before = open_fds();
		int fd = path_open_parent(&f->ws, rels[i], 1, &base, &err);

		if (fd >= 0)
			fail_msg("parent of %s was opened", rels[i]);
		assert_int_equal(err.status, 403);
		assert_int_equal(open_fds(), before);
	}
	assert_false(exists(f, "outside/x"));
	assert_false(exists(f, "ws/x"));
}

static void
test_open_parent_errors(void **state)
{
	struct fixture *f = *state;
	struct error err = { 0 };
	const char *base;

	assert_int_equal(path_open_parent(&f->ws, "", 1, &base, &err), -1);
	assert_int_equal(err.status, 403);
	assert_int_equal(path_open_parent(&f->ws, "nodir/file", 0, &base,
	    &err), -1);
	assert_int_equal(err.status, 404);
	assert_false(exists(f, "ws/nodir"));
	/* A file in the way of a directory to create. */
	assert_int_equal(path_open_parent(&f->ws, "sub/file.txt/d/file", 1,
	    &base, &err), -1);
	assert_int_equal(err.status, 409);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_normalize_relative, setup, teardown),
		cmocka_unit_test_setup_teardown(test_normalize_absolute_inside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_normalize_absolute_outside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_normalize_dotdot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_normalize_empty, setup, teardown),
		cmocka_unit_test_setup_teardown(test_normalize_root_through_symlink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_absolute, setup, teardown),
		cmocka_unit_test_setup_teardown(test_workspace_open_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_inside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_symlink_outside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_create_through_symlink_outside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_parent_creates_dirs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_parent_refuses_symlink_outside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_parent_errors, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
