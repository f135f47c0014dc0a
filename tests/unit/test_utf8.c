/* UTF-8 handling of process output: cut points, validation, replacement. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "utf8.h"

#define REPL "\xef\xbf\xbd"	/* U+FFFD */

static size_t
prefix(const char *s, size_t len)
{
	return utf8_complete_prefix(s, len);
}

static void
test_complete_prefix_ascii(void **state)
{
	(void)state;
	assert_int_equal(prefix("", 0), 0);
	assert_int_equal(prefix("a", 1), 1);
	assert_int_equal(prefix("hello", 5), 5);
}

static void
test_complete_prefix_cut_inside(void **state)
{
	(void)state;
	/* "é" (2 bytes), "€" (3), "😀" (4), each cut after every byte. */
	assert_int_equal(prefix("x\xc3", 2), 1);
	assert_int_equal(prefix("x\xc3\xa9", 3), 3);
	assert_int_equal(prefix("\xe2", 1), 0);
	assert_int_equal(prefix("\xe2\x82", 2), 0);
	assert_int_equal(prefix("\xe2\x82\xac", 3), 3);
	assert_int_equal(prefix("ab\xf0", 3), 2);
	assert_int_equal(prefix("ab\xf0\x9f", 4), 2);
	assert_int_equal(prefix("ab\xf0\x9f\x98", 5), 2);
	assert_int_equal(prefix("ab\xf0\x9f\x98\x80", 6), 6);
	/* A whole sequence before the cut one is kept. */
	assert_int_equal(prefix("\xc3\xa9\xe2\x82", 4), 2);
	assert_int_equal(prefix("\xf0\x9f\x98\x80\xf0", 5), 4);
}

static void
test_complete_prefix_invalid_not_held(void **state)
{
	(void)state;
	/* Bytes no continuation could make valid are not held back. */
	assert_int_equal(prefix("a\xff", 2), 2);
	assert_int_equal(prefix("a\x80", 2), 2);
	assert_int_equal(prefix("a\xc0", 2), 2);
	assert_int_equal(prefix("a\xf5", 2), 2);
	assert_int_equal(prefix("a\xe2x", 3), 3);
}

static void
test_complete_prefix_every_cut(void **state)
{
	static const char s[] = "a\xc3\xa9 \xe2\x82\xac-\xf0\x9f\x98\x80z\xf4\x8f\xbf\xbf";
	size_t len = sizeof s - 1;

	(void)state;
	for (size_t k = 0; k <= len; k++) {
		size_t p = prefix(s, k);

		/* A char boundary, valid, and short of the cut by less than
		 * one sequence. */
		assert_true(p <= k);
		assert_true(k - p < 4);
		assert_true(utf8_valid(s, p));
		assert_true(p == len || ((unsigned char)s[p] & 0xc0) != 0x80);
		/* What is held back is the start of the next sequence. */
		if (p < k)
			assert_false(utf8_valid(s + p, k - p));
	}
}

static void
test_valid(void **state)
{
	(void)state;
	assert_true(utf8_valid("", 0));
	assert_true(utf8_valid("plain ascii", 11));
	assert_true(utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9));
	assert_true(utf8_valid("a\0b", 3));
	assert_true(utf8_valid("\xf4\x8f\xbf\xbf", 4));	/* U+10FFFF */
	assert_true(utf8_valid("\xef\xbf\xbf", 3));		/* U+FFFF */
	assert_false(utf8_valid("\xff", 1));
	assert_false(utf8_valid("\x80", 1));
	assert_false(utf8_valid("\xc0\xaf", 2));		/* overlong '/' */
	assert_false(utf8_valid("\xe0\x80\xaf", 3));		/* overlong */
	assert_false(utf8_valid("\xed\xa0\x80", 3));		/* surrogate */
	assert_false(utf8_valid("\xf4\x90\x80\x80", 4));	/* > U+10FFFF */
	assert_false(utf8_valid("\xe2\x82", 2));		/* truncated */
}

static void
assert_sanitized(const char *in, size_t len, const char *want)
{
	size_t outlen = 0;
	char *out = utf8_sanitize(in, len, &outlen);

	assert_int_equal(outlen, strlen(want));
	assert_memory_equal(out, want, outlen);
	assert_int_equal(out[outlen], '\0');
	assert_true(utf8_valid(out, outlen));
	free(out);
}

static void
test_sanitize(void **state)
{
	size_t outlen = 99;
	char *out;

	(void)state;
	assert_sanitized("", 0, "");
	assert_sanitized("fine \xc3\xa9", 7, "fine \xc3\xa9");
	assert_sanitized("a\xff" "b", 3, "a" REPL "b");
	assert_sanitized("\x80\x80", 2, REPL REPL);
	assert_sanitized("\xc0\xaf", 2, REPL REPL);
	assert_sanitized("\xed\xa0\x80!", 4, REPL REPL REPL "!");
	assert_sanitized("\xf4\x90\x80\x80", 4, REPL REPL REPL REPL);
	/* A lead byte followed by something that does not continue it. */
	assert_sanitized("\xe2(x", 3, REPL "(x");
	assert_sanitized("\xf0\x9f\x98\x80\xff\xf0\x9f\x98\x80", 9,
	    "\xf0\x9f\x98\x80" REPL "\xf0\x9f\x98\x80");
	/* Truncated at the end: replaced, never passed through. */
	out = utf8_sanitize("ab\xe2\x82", 4, &outlen);
	assert_true(utf8_valid(out, outlen));
	assert_memory_equal(out, "ab" REPL, 5);
	free(out);
	/* NUL bytes are data. */
	out = utf8_sanitize("a\0\xff", 3, &outlen);
	assert_int_equal(outlen, 5);
	assert_memory_equal(out, "a\0" REPL, 5);
	free(out);
	out = utf8_sanitize("x\xff", 2, NULL);
	assert_string_equal(out, "x" REPL);
	free(out);
}

static void
test_json_string(void **state)
{
	json_t *j;

	(void)state;
	j = utf8_json_string("ok \xc3\xa9", 5);
	assert_string_equal(json_string_value(j), "ok \xc3\xa9");
	json_decref(j);
	j = utf8_json_string("bad\xff", 4);
	assert_non_null(j);
	assert_string_equal(json_string_value(j), "bad" REPL);
	json_decref(j);
	j = utf8_json_string(NULL, 0);
	assert_string_equal(json_string_value(j), "");
	json_decref(j);
	j = utf8_json_string("a\0b", 3);
	assert_int_equal(json_string_length(j), 3);
	json_decref(j);
}

static void
test_carry(void **state)
{
	struct utf8_carry carry = { 0 };
	json_t *j;

	(void)state;
	/* "é" cut by the pipe after its first byte: held, then whole. */
	j = utf8_carry_json(&carry, "ab\xc3", 3);
	assert_string_equal(json_string_value(j), "ab");
	assert_int_equal(carry.n, 1);
	json_decref(j);
	j = utf8_carry_json(&carry, "\xa9", 1);
	assert_string_equal(json_string_value(j), "\xc3\xa9");
	assert_int_equal(carry.n, 0);
	json_decref(j);
	/* Only a sequence's start: nothing to send yet. */
	assert_null(utf8_carry_json(&carry, "\xe2\x82", 2));
	assert_int_equal(carry.n, 2);
	/* The stream ended inside it: out, replaced as utf8_sanitize does. */
	j = utf8_carry_json(&carry, NULL, 0);
	assert_string_equal(json_string_value(j), REPL REPL);
	assert_int_equal(carry.n, 0);
	json_decref(j);
	assert_null(utf8_carry_json(&carry, NULL, 0));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_complete_prefix_ascii),
		cmocka_unit_test(test_complete_prefix_cut_inside),
		cmocka_unit_test(test_complete_prefix_invalid_not_held),
		cmocka_unit_test(test_complete_prefix_every_cut),
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_sanitize),
		cmocka_unit_test(test_json_string),
		cmocka_unit_test(test_carry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
