/* Typed request fields and streamed JSON string escaping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "jsonx.h"

/* What jansson itself writes inside the quotes of a string. */
static char *
jansson_escaped(const char *s, size_t len, size_t *outlen)
{
	json_t *j = json_stringn(s, len);
	char *dump, *inner;
	size_t n;

	assert_non_null(j);
	dump = json_dumps(j, JSON_ENCODE_ANY);
	json_decref(j);
	assert_non_null(dump);
	n = strlen(dump);
	assert_true(n >= 2 && dump[0] == '"' && dump[n - 1] == '"');
	inner = strndup(dump + 1, n - 2);
	free(dump);
	*outlen = n - 2;
	return inner;
}

static void
assert_escapes_like_jansson(const char *s, size_t len)
{
	struct evbuffer *b = evbuffer_new();
	size_t want_len, got_len;
	char *want = jansson_escaped(s, len, &want_len);
	const char *got;

	jsonx_escape_append(b, s, len);
	got_len = evbuffer_get_length(b);
	got = (const char *)evbuffer_pullup(b, -1);
	if (got_len != want_len || (got_len > 0 && memcmp(got, want, want_len)))
		fail_msg("escaped '%.*s', jansson wrote '%s'", (int)got_len,
		    got_len ? got : "", want);
	free(want);
	evbuffer_free(b);
}

static void
test_escape_matches_jansson(void **state)
{
	static const char *const strings[] = {
		"",
		"plain text",
		"\"quoted\"",
		"back\\slash\\",
		"a/b</script>",
		"line\nfeed\r\ntab\there",
		"\b\f",
		"\x01\x02\x1f\x7f",
		"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
		"\xe2\x80\xa8\xe2\x80\xa9",	/* U+2028, U+2029 */
		"\xef\xbb\xbf" "bom",
		"\\u0041 is not an escape",
		"ends with a quote\"",
		"\"",
		"\\",
	};
	char all[0x80];

	(void)state;
	for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
		assert_escapes_like_jansson(strings[i], strlen(strings[i]));
	/* Every ASCII byte, NUL included. */
	for (int c = 0; c < 0x80; c++)
		all[c] = (char)c;
	assert_escapes_like_jansson(all, sizeof all);
	assert_escapes_like_jansson("a\0b", 3);
}

static void
test_escape_appends(void **state)
{
	struct evbuffer *b = evbuffer_new();

	(void)state;
	evbuffer_add(b, "[\"", 2);
	jsonx_escape_append(b, "x\"y", 3);
	jsonx_escape_append(b, "\n", 1);
	evbuffer_add(b, "\"]", 2);
	assert_int_equal(evbuffer_get_length(b), 10);
	assert_memory_equal(evbuffer_pullup(b, -1), "[\"x\\\"y\\n\"]", 10);
	evbuffer_free(b);
}

static json_t *
sample(void)
{
	json_error_t e;
	json_t *j = json_loads("{\"s\": \"text\", \"n\": 2.5, \"i\": 3, "
	    "\"t\": true, \"f\": false, \"o\": {\"k\": 1}, \"a\": [1, 2], "
	    "\"z\": null, \"e\": \"\"}", 0, &e);

	assert_non_null(j);
	return j;
}

static void
assert_err(const struct error *err, int status, const char *text)
{
	assert_int_equal(err->status, status);
	if (strstr(err->msg, text) == NULL)
		fail_msg("'%s' not in '%s'", text, err->msg);
}

static void
test_get_string(void **state)
{
	json_t *j = sample();
	struct error err = { 0 };
	const char *v = "unset";

	(void)state;
	assert_int_equal(jsonx_get_string(j, "s", 1, &v, &err), 0);
	assert_string_equal(v, "text");
	assert_int_equal(jsonx_get_string(j, "e", 1, &v, &err), 0);
	assert_string_equal(v, "");
	/* Absent, or null: fine when optional, 400 when required. */
	assert_int_equal(jsonx_get_string(j, "missing", 0, &v, &err), 0);
	assert_null(v);
	assert_int_equal(jsonx_get_string(j, "z", 0, &v, &err), 0);
	assert_null(v);
	assert_int_equal(jsonx_get_string(j, "missing", 1, &v, &err), -1);
	assert_err(&err, 400, "field 'missing' is required");
	assert_int_equal(jsonx_get_string(j, "z", 1, &v, &err), -1);
	assert_err(&err, 400, "field 'z' is required");
	/* Wrong type, required or not. */
	assert_int_equal(jsonx_get_string(j, "n", 0, &v, &err), -1);
	assert_err(&err, 400, "field 'n' must be a string");
	assert_null(v);
	assert_int_equal(jsonx_get_string(j, "o", 1, &v, &err), -1);
	assert_err(&err, 400, "field 'o' must be a string");
	json_decref(j);
}

static void
test_get_bool(void **state)
{
	json_t *j = sample();
	struct error err = { 0 };
	int v = -1;

	(void)state;
	assert_int_equal(jsonx_get_bool(j, "t", 0, &v, &err), 0);
	assert_int_equal(v, 1);
	assert_int_equal(jsonx_get_bool(j, "f", 1, &v, &err), 0);
	assert_int_equal(v, 0);
	assert_int_equal(jsonx_get_bool(j, "missing", 1, &v, &err), 0);
	assert_int_equal(v, 1);
	assert_int_equal(jsonx_get_bool(j, "z", 0, &v, &err), 0);
	assert_int_equal(v, 0);
	/* 1 and "true" are not booleans. */
	assert_int_equal(jsonx_get_bool(j, "i", 0, &v, &err), -1);
	assert_err(&err, 400, "field 'i' must be true or false");
	assert_int_equal(jsonx_get_bool(j, "s", 0, &v, &err), -1);
	assert_err(&err, 400, "field 's' must be true or false");
	json_decref(j);
}

static void
test_get_number(void **state)
{
	json_t *j = sample();
	struct error err = { 0 };
	double v = -1;

	(void)state;
	assert_int_equal(jsonx_get_number(j, "n", 0, &v, &err), 0);
	assert_true(v == 2.5);
	assert_int_equal(jsonx_get_number(j, "i", 0, &v, &err), 0);
	assert_true(v == 3.0);
	assert_int_equal(jsonx_get_number(j, "missing", 7.5, &v, &err), 0);
	assert_true(v == 7.5);
	assert_int_equal(jsonx_get_number(j, "z", 1.5, &v, &err), 0);
	assert_true(v == 1.5);
	assert_int_equal(jsonx_get_number(j, "s", 0, &v, &err), -1);
	assert_err(&err, 400, "field 's' must be a number");
	assert_int_equal(jsonx_get_number(j, "t", 0, &v, &err), -1);
	assert_err(&err, 400, "field 't' must be a number");
	json_decref(j);
}

static void
test_get_object_and_array(void **state)
{
	json_t *j = sample(), *v = (json_t *)1;
	struct error err = { 0 };

	(void)state;
	assert_int_equal(jsonx_get_object(j, "o", 1, &v, &err), 0);
	assert_ptr_equal(v, json_object_get(j, "o"));
	assert_int_equal(jsonx_get_object(j, "missing", 0, &v, &err), 0);
	assert_null(v);
	assert_int_equal(jsonx_get_object(j, "missing", 1, &v, &err), -1);
	assert_err(&err, 400, "field 'missing' is required");
	assert_int_equal(jsonx_get_object(j, "a", 0, &v, &err), -1);
	assert_err(&err, 400, "field 'a' must be an object");
	assert_null(v);

	assert_int_equal(jsonx_get_array(j, "a", 1, &v, &err), 0);
	assert_int_equal(json_array_size(v), 2);
	assert_int_equal(jsonx_get_array(j, "z", 0, &v, &err), 0);
	assert_null(v);
	assert_int_equal(jsonx_get_array(j, "z", 1, &v, &err), -1);
	assert_err(&err, 400, "field 'z' is required");
	assert_int_equal(jsonx_get_array(j, "o", 0, &v, &err), -1);
	assert_err(&err, 400, "field 'o' must be an array");
	json_decref(j);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escape_matches_jansson),
		cmocka_unit_test(test_escape_appends),
		cmocka_unit_test(test_get_string),
		cmocka_unit_test(test_get_bool),
		cmocka_unit_test(test_get_number),
		cmocka_unit_test(test_get_object_and_array),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
