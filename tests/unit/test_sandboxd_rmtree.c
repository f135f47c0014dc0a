/*
 * sandboxd_rmtree_small on real directories: a small tree goes, a link to
 * something outside is removed, never followed; a tree bigger or deeper
 * than allowed is refused with E2BIG, partly removed, rm's to finish.
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
#include <sys/stat.h>
#include <unistd.h>

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
	static char buf[4][512];
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
	assert_int_equal(sandboxd_rmtree_small(AT_FDCWD, at("t"), 256), 0);
	assert_false(exists(at("t")));
	assert_true(exists(at("outside/keep")));
	/* Gone already: nothing to do. */
	assert_int_equal(sandboxd_rmtree_small(AT_FDCWD, at("t"), 256), 0);
}

static void
test_a_big_tree_is_left_to_rm(void **state)
{
	char name[64];

	(void)state;
	assert_int_equal(mkdir(at("big"), 0700), 0);
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof name, "big/f%d", i);
		make_file(at(name));
	}
	errno = 0;
	assert_int_equal(sandboxd_rmtree_small(AT_FDCWD, at("big"), 5), -1);
	assert_int_equal(errno, E2BIG);
	assert_true(exists(at("big")));
	assert_int_equal(sandboxd_rmtree_small(AT_FDCWD, at("big"), 256), 0);
	assert_false(exists(at("big")));
}

static void
test_a_deep_tree_is_left_to_rm(void **state)
{
	char path[512] = "deep";

	(void)state;
	assert_int_equal(mkdir(at(path), 0700), 0);
	for (int i = 0; i < 20; i++) {
		strcat(path, "/d");
		assert_int_equal(mkdir(at(path), 0700), 0);
	}
	errno = 0;
	assert_int_equal(sandboxd_rmtree_small(AT_FDCWD, at("deep"), 256), -1);
	assert_int_equal(errno, E2BIG);
}

static void
test_the_name_itself_is_not_followed(void **state)
{
	(void)state;
	assert_int_equal(mkdir(at("target"), 0700), 0);
	make_file(at("target/keep"));
	assert_int_equal(symlink(at("target"), at("alias")), 0);
	assert_int_equal(sandboxd_rmtree_small(AT_FDCWD, at("alias"), 256), -1);
	assert_true(exists(at("target/keep")));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_small_tree_goes_and_links_are_not_followed),
		cmocka_unit_test(test_a_big_tree_is_left_to_rm),
		cmocka_unit_test(test_a_deep_tree_is_left_to_rm),
		cmocka_unit_test(test_the_name_itself_is_not_followed),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
