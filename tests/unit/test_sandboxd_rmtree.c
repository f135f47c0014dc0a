/*
 * sandboxd_rmtree on real directories: a tree goes, off the loop, its
 * callback on the loop; a link to something outside is removed, never
 * followed, nor is the name itself; a tree deeper than it goes is told
 * back with E2BIG, rm's to finish; a directory mounted inside is kept
 * with what it shows (EXDEV), as rm --one-file-system keeps it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "sandboxd.h"

static char top[] = "/tmp/rmtree-test-XXXXXX";

static void
make_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
}

static int
exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

static char *
at(const char *rel)
{
	static char buf[4][1024];
	static int n;

	n = (n + 1) % 4;
	snprintf(buf[n], sizeof buf[n], "%s/%s", top, rel);
	return buf[n];
}

static int
setup(void **state)
{
	(void)state;
	return mkdtemp(top) == NULL ? -1 : 0;
}

static int
teardown(void **state)
{
	char cmd[600];

	(void)state;
	/* What a failed test of mounts left mounted. */
	umount2(at("bundle/a/m"), MNT_DETACH);
	umount2(at("host"), MNT_DETACH);
	snprintf(cmd, sizeof cmd, "rm -rf %s", top);
	return system(cmd);
}

static void
test_a_small_tree_goes_and_links_are_not_followed(void **state)
{
	(void)state;
	assert_int_equal(mkdir(at("outside"), 0700), 0);
	make_file(at("outside/keep"));
	assert_int_equal(mkdir(at("t"), 0700), 0);
	assert_int_equal(mkdir(at("t/a"), 0700), 0);
	assert_int_equal(mkdir(at("t/a/b"), 0700), 0);
	make_file(at("t/a/b/f"));
	make_file(at("t/g"));
	assert_int_equal(symlink(at("outside"), at("t/link")), 0);
	assert_int_equal(symlink(at("outside"), at("t/a/dirlink")), 0);
	assert_int_equal(sandboxd_rmtree_now(at("t")), 0);
	assert_false(exists(at("t")));
	assert_true(exists(at("outside/keep")));
	/* Gone already: nothing to do. */
	assert_int_equal(sandboxd_rmtree_now(at("t")), 0);
}

struct told {
	int done;
	int error;
};

static void
removed_cb(const char *path, int error, void *arg)
{
	struct told *t = arg;

	(void)path;
	t->done = 1;
	t->error = error;
}

static void
test_removal_off_the_loop(void **state)
{
	struct event_base *base = event_base_new();
	struct timeval tick = { 0, 10 * 1000 };
	struct told t = { 0, -1 };
	char name[64];

	(void)state;
	assert_int_equal(mkdir(at("big"), 0700), 0);
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof name, "big/f%d", i);
		make_file(at(name));
	}
	sandboxd_rmtree(base, at("big"), removed_cb, &t);
	/* Never from inside the call. */
	assert_int_equal(t.done, 0);
	for (int i = 0; i < 3000 && !t.done; i++) {
		event_base_loopexit(base, &tick);
		event_base_dispatch(base);
	}
	assert_int_equal(t.done, 1);
	assert_int_equal(t.error, 0);
	assert_false(exists(at("big")));
	sandboxd_rmtree_free();
	event_base_free(base);
}

static void
test_a_deep_tree_is_left_to_rm(void **state)
{
	char path[512] = "deep";

	(void)state;
	assert_int_equal(mkdir(at(path), 0700), 0);
	for (int i = 0; i < 70; i++) {
		strcat(path, "/d");
		assert_int_equal(mkdir(at(path), 0700), 0);
	}
	errno = 0;
	assert_int_equal(sandboxd_rmtree_now(at("deep")), -1);
	assert_int_equal(errno, E2BIG);
}

static void
test_the_name_itself_is_not_followed(void **state)
{
	(void)state;
	assert_int_equal(mkdir(at("target"), 0700), 0);
	make_file(at("target/keep"));
	assert_int_equal(symlink(at("target"), at("alias")), 0);
	assert_int_equal(sandboxd_rmtree_now(at("alias")), -1);
	assert_true(exists(at("target/keep")));
}

static void
test_a_mount_inside_is_kept_with_what_it_shows(void **state)
{
	(void)state;
	assert_int_equal(mkdir(at("host"), 0700), 0);
	assert_int_equal(mkdir(at("bundle"), 0700), 0);
	assert_int_equal(mkdir(at("bundle/a"), 0700), 0);
	assert_int_equal(mkdir(at("bundle/a/m"), 0700), 0);
	make_file(at("bundle/a/f"));
	/* A bind a failed unmount left behind; a tmpfs makes it another
	 * file system even where /tmp and host share one. */
	if (mount("t", at("host"), "tmpfs", 0, "size=64k") < 0) {
		if (errno == EPERM)
			skip();	/* not root: no mount to be made */
		fail_msg("mount: %s", strerror(errno));
	}
	make_file(at("host/keep"));
	assert_int_equal(mount(at("host"), at("bundle/a/m"), NULL, MS_BIND,
	    NULL), 0);
	errno = 0;
	assert_int_equal(sandboxd_rmtree_now(at("bundle")), -1);
	assert_int_equal(errno, EXDEV);
	assert_true(exists(at("host/keep")));
	assert_true(exists(at("bundle/a/m/keep")));
	/* The rest went. */
	assert_false(exists(at("bundle/a/f")));
	assert_int_equal(umount(at("bundle/a/m")), 0);
	assert_int_equal(umount(at("host")), 0);
	assert_int_equal(sandboxd_rmtree_now(at("bundle")), 0);
	assert_false(exists(at("bundle")));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_small_tree_goes_and_links_are_not_followed),
		cmocka_unit_test(test_removal_off_the_loop),
		cmocka_unit_test(test_a_deep_tree_is_left_to_rm),
		cmocka_unit_test(test_the_name_itself_is_not_followed),
		cmocka_unit_test(test_a_mount_inside_is_kept_with_what_it_shows),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
