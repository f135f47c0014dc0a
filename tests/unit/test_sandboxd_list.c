/* GET /v1/sandboxes' list (sandbox_list.c) over records made without
 * containers: filters, paging with the total, and 400 for bad values;
 * and how long a 1000-record answer takes to build and encode (printed,
 * not asserted: figures come from benchmarks, not timed tests). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sandboxd.h"

#define N 1000

struct sandboxd sd;

static int
setup(void **state)
{
	(void)state;
	sd.cfg.prefix = "sandboxd-";
	sd.cfg.host = "127.0.0.1";
	sd.cfg.port = 8000;
	sandbox_types_init(NULL, NULL, NULL);
	/* 1000 records: every fourth is base, the rest minimal; states
	 * cycle through running, warm, stopped and released; every tenth
	 * is in session "s". */
	for (size_t i = 0; i < N; i++) {
		struct sandbox *sb = sandbox_new(sandbox_types_find(i % 4 == 0 ?
		    "base" : "minimal"));
		static const enum sandbox_state cycle[] = { SB_RUNNING, SB_WARM,
		    SB_STOPPED, SB_RELEASED };

		sb->state = cycle[i % 4 == 0 ? 0 : i % 4];
		sb->mount_dir = strdup("/tmp/ws");
		if (i % 10 == 0)
			sb->session = strdup("s");
		json_object_set_new(sb->meta, "n", json_integer((json_int_t)i));
	}
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	sandbox_free_all();
	sandbox_types_free();
	return 0;
}

static json_t *
list(const struct sandbox_query *q)
{
	struct error err;
	json_t *a = sandbox_list_json(q, &err);

	if (a == NULL)
		fail_msg("unexpected error: %s", err.msg);
	return a;
}

static size_t
total(json_t *a)
{
	return (size_t)json_integer_value(json_object_get(a, "total"));
}

static size_t
listed(json_t *a)
{
	return json_array_size(json_object_get(a, "sandboxes"));
}

static void
test_filters_and_total(void **state)
{
	struct sandbox_query q = { 0 };
	json_t *a;

	(void)state;
	/* Released ones only when asked for. */
	a = list(&q);
	assert_int_equal(total(a), 750);
	assert_int_equal(listed(a), 750);
	assert_true(json_is_null(json_object_get(a, "limit")));
	json_decref(a);
	q.all = "true";
	a = list(&q);
	assert_int_equal(total(a), N);
	json_decref(a);
	q.all = NULL;
	q.type = "base";
	a = list(&q);
	assert_int_equal(total(a), 250);
	json_decref(a);
	q.state = "running";
	a = list(&q);
	assert_int_equal(total(a), 250);
	json_decref(a);
	q.type = "minimal";
	q.state = "released";
	a = list(&q);
	assert_int_equal(total(a), 250);
	assert_string_equal(json_string_value(json_object_get(json_array_get(
	    json_object_get(a, "sandboxes"), 0), "state")), "released");
	json_decref(a);
	q.type = NULL;
	q.state = NULL;
	q.session = "s";
	a = list(&q);
	/* i % 10 == 0 and not released (i % 4 == 3 never holds for even i). */
	assert_int_equal(total(a), 100);
	json_decref(a);
}

static void
test_paging(void **state)
{
	struct sandbox_query q = { .all = "true", .offset = "990",
	    .limit = "20" };
	json_t *a, *first;

	(void)state;
	a = list(&q);
	assert_int_equal(total(a), N);
	assert_int_equal(listed(a), 10);
	assert_int_equal(json_integer_value(json_object_get(a, "offset")), 990);
	assert_int_equal(json_integer_value(json_object_get(a, "limit")), 20);
	first = json_array_get(json_object_get(a, "sandboxes"), 0);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
	    first, "meta"), "n")), 990);
	json_decref(a);
	q.offset = "5000";
	a = list(&q);
	assert_int_equal(total(a), N);
	assert_int_equal(listed(a), 0);
	json_decref(a);
	q.offset = NULL;
	q.limit = "0";
	a = list(&q);
	assert_int_equal(total(a), N);
	assert_int_equal(listed(a), 0);
	json_decref(a);
}

static void
test_bad_values_are_400(void **state)
{
	static const struct sandbox_query bad[] = {
		{ .state = "asleep" }, { .state = "" }, { .type = "nope" },
		{ .offset = "-1" }, { .offset = "1x" }, { .offset = "" },
		{ .offset = " 1" }, { .limit = "1001" }, { .limit = "+5" },
		{ .limit = "99999999999999999999999" }, { .all = "perhaps" },
	};
	struct error err;

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err.status = 0;
		assert_null(sandbox_list_json(&bad[i], &err));
		assert_int_equal(err.status, 400);
	}
}

static double
seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
test_time_of_a_1000_record_answer(void **state)
{
	struct sandbox_query q = { .all = "true" };
	double t0, best = 1e9;
	size_t len = 0;

	(void)state;
	for (int round = 0; round < 5; round++) {
		json_t *a;
		char *text;

		t0 = seconds();
		a = list(&q);
		text = json_dumps(a, JSON_COMPACT);
		if (seconds() - t0 < best)
			best = seconds() - t0;
		len = strlen(text);
		free(text);
		json_decref(a);
	}
	printf("list of %d records: built and encoded in %.2f ms (best of 5), "
	    "%zu bytes\n", N, best * 1e3, len);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_filters_and_total),
		cmocka_unit_test(test_paging),
		cmocka_unit_test(test_bad_values_are_400),
		cmocka_unit_test(test_time_of_a_1000_record_answer),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
