/* The lists sandboxd answers, over 1000 records made without containers.
 * GET /v1/sandboxes (sandbox_list.c): filters, paging with the total, 400
 * for bad values, and the kept encoding of each record
 * (sandbox_model_text) always the same as a fresh one after every kind of
 * change. list_session_keys (sessions_keys), each record in its own
 * session: only sessions with a live sandbox, each once. And how long
 * each answer takes (printed, not asserted: figures come from
 * benchmarks, not timed tests). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "sandboxd.h"

#define N 1000

struct sandboxd sd;

static void
init(void)
{
	sd.cfg.prefix = "sandboxd-";
	sd.cfg.host = "127.0.0.1";
	sd.cfg.port = 8000;
	sandbox_types_init(NULL, NULL, NULL);
}

static int
setup(void **state)
{
	(void)state;
	init();
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
	sessions_free();
	sandbox_free_all();
	sandbox_types_free();
	return 0;
}

/* The answer's text, which must be JSON. Caller frees. */
static char *
list_text(const struct sandbox_query *q)
{
	struct error err;
	struct evbuffer *b = sandbox_list_encode(q, &err);
	size_t len;
	char *text;

	if (b == NULL)
		fail_msg("unexpected error: %s", err.msg);
	len = evbuffer_get_length(b);
	text = malloc(len + 1);
	evbuffer_remove(b, text, len);
	text[len] = '\0';
	evbuffer_free(b);
	return text;
}

static json_t *
list(const struct sandbox_query *q)
{
	json_error_t jerr;
	char *text = list_text(q);
	json_t *a = json_loads(text, 0, &jerr);

	if (a == NULL)
		fail_msg("the list is not JSON: %s", jerr.text);
	free(text);
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
	assert_int_equal(json_integer_value(json_object_get(a, "offset")), 0);
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

/* Every record's model in the list equals a fresh sandbox_model. */
static void
assert_list_is_fresh(void)
{
	struct sandbox_query q = { .all = "true" };
	json_t *a = list(&q), *models = json_object_get(a, "sandboxes");
	struct sandbox *sb;
	size_t i = 0;

	for (sb = sandbox_first(); sb != NULL; sb = sandbox_next(sb), i++) {
		json_t *fresh = sandbox_model(sb);

		if (!json_equal(fresh, json_array_get(models, i))) {
			char *want = json_dumps(fresh, JSON_COMPACT);

			fail_msg("record %zu is stale in the list; want %s", i,
			    want);
		}
		json_decref(fresh);
	}
	assert_int_equal(i, json_array_size(models));
	json_decref(a);
}

static void
test_kept_encoding_follows_changes(void **state)
{
	struct sandbox *sb[6];
	size_t i = 0;

	(void)state;
	for (struct sandbox *s = sandbox_first(); i < 6; s = sandbox_next(s))
		sb[i++] = s;
	assert_list_is_fresh();
	/* Each way a shown field changes, then the list again. */
	sandbox_set_state(sb[0], SB_STOPPED);
	sandbox_set_error(sb[1], "agent gone");
	sandbox_set_state(sb[1], SB_UNHEALTHY);
	sessions_bind(sb[2], "t");
	sessions_bind(sb[3], NULL);
	json_object_set_new(sb[4]->meta, "x", json_string("y"));
	sandbox_changed(sb[4]);
	free(sb[5]->container_id);
	sb[5]->container_id = strdup("0123456789abcdef");
	sandbox_changed(sb[5]);
	assert_list_is_fresh();
	/* Back as the other tests expect them. */
	sandbox_set_state(sb[0], SB_RUNNING);
	sandbox_set_state(sb[1], SB_WARM);
	sessions_bind(sb[2], NULL);
	sessions_bind(sb[3], NULL);
	assert_list_is_fresh();
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
		assert_null(sandbox_list_encode(&bad[i], &err));
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
	/* The first round encodes every record, the others copy. */
	for (int round = 0; round < 5; round++) {
		struct error err;
		struct evbuffer *b;

		if (round == 0) {
			for (struct sandbox *sb = sandbox_first(); sb != NULL;
			    sb = sandbox_next(sb))
				sandbox_changed(sb);
		}
		t0 = seconds();
		b = sandbox_list_encode(&q, &err);
		t0 = seconds() - t0;
		len = evbuffer_get_length(b);
		evbuffer_free(b);
		if (round == 0)
			printf("list of %d records, none encoded yet: %.2f ms\n",
			    N, t0 * 1e3);
		else if (t0 < best)
			best = t0;
	}
	printf("list of %d records: %.2f ms (best of 4), %zu bytes\n", N,
	    best * 1e3, len);
}

static int
setup_sessions(void **state)
{
	(void)state;
	init();
	/* Session "k<i>" for record i; every third record is released or
	 * releasing (its session has no live sandbox), and "k0" to "k9" also
	 * get a second, live record. */
	for (size_t i = 0; i < N; i++) {
		struct sandbox *sb = sandbox_new(sandbox_types_find("minimal"));
		char id[16];

		snprintf(id, sizeof id, "k%zu", i);
		sessions_bind(sb, id);
		sb->state = i % 3 != 0 ? SB_RUNNING : i % 2 == 0 ?
		    SB_RELEASED : SB_RELEASING;
	}
	for (size_t i = 0; i < 10; i++) {
		struct sandbox *sb = sandbox_new(sandbox_types_find("minimal"));
		char id[16];

		snprintf(id, sizeof id, "k%zu", i);
		sessions_bind(sb, id);
		sb->state = SB_WARM;
	}
	return 0;
}

static int
has_key(json_t *keys, const char *id)
{
	size_t i, found = 0;
	json_t *k;

	json_array_foreach(keys, i, k)
		found += strcmp(json_string_value(k), id) == 0;
	assert_true(found <= 1);
	return found == 1;
}

static void
test_keys_are_the_live_sessions(void **state)
{
	json_t *keys = sessions_keys();
	size_t want = 0;

	(void)state;
	for (size_t i = 0; i < N; i++) {
		char id[16];
		int live = i % 3 != 0 || i < 10;

		snprintf(id, sizeof id, "k%zu", i);
		assert_int_equal(has_key(keys, id), live);
		want += live;
	}
	assert_int_equal(json_array_size(keys), want);
	assert_int_equal(sessions_count(), want);
	json_decref(keys);
}

static void
test_time_of_1000_sessions(void **state)
{
	double best = 1e9;

	(void)state;
	for (int round = 0; round < 5; round++) {
		double t0 = seconds();
		json_t *keys = sessions_keys();
		char *text = json_dumps(keys, JSON_COMPACT);

		if (seconds() - t0 < best)
			best = seconds() - t0;
		free(text);
		json_decref(keys);
	}
	printf("list_session_keys over %d sessions: %.2f ms (best of 5)\n", N,
	    best * 1e3);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_filters_and_total),
		cmocka_unit_test(test_paging),
		cmocka_unit_test(test_kept_encoding_follows_changes),
		cmocka_unit_test(test_bad_values_are_400),
		cmocka_unit_test(test_time_of_a_1000_record_answer),
	};

	const struct CMUnitTest session_tests[] = {
		cmocka_unit_test(test_keys_are_the_live_sessions),
		cmocka_unit_test(test_time_of_1000_sessions),
	};

	return cmocka_run_group_tests(tests, setup, teardown) |
	    cmocka_run_group_tests(session_tests, setup_sessions, teardown);
}
