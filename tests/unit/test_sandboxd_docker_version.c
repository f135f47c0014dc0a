/* Which Docker engines get their container stops and removes one at a
 * time: those whose libnetwork deadlocks when two containers exit at once
 * (moby/moby#46661, fixed in 20.10.27), and any whose version is unknown. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "docker_api.h"

static void
test_affected_versions(void **state)
{
	(void)state;
	assert_true(docker_exits_may_deadlock("20.10.24+dfsg1"));
	assert_true(docker_exits_may_deadlock("20.10.26"));
	assert_true(docker_exits_may_deadlock("20.10.5"));
	assert_true(docker_exits_may_deadlock("19.03.15"));
	assert_true(docker_exits_may_deadlock("18.09"));
}

static void
test_fixed_versions(void **state)
{
	(void)state;
	assert_false(docker_exits_may_deadlock("20.10.27"));
	assert_false(docker_exits_may_deadlock("20.10.27+dfsg1"));
	assert_false(docker_exits_may_deadlock("23.0.0"));
	assert_false(docker_exits_may_deadlock("24.0.7"));
	assert_false(docker_exits_may_deadlock("28.1.1"));
}

static void
test_unknown_versions(void **state)
{
	(void)state;
	assert_true(docker_exits_may_deadlock(NULL));
	assert_true(docker_exits_may_deadlock(""));
	assert_true(docker_exits_may_deadlock("dev"));
	assert_true(docker_exits_may_deadlock("20"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_affected_versions),
		cmocka_unit_test(test_fixed_versions),
		cmocka_unit_test(test_unknown_versions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
