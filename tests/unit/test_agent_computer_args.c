/* agent/computer_args.c: the computer tool's arguments as the client sends
 * them (JSON), checked and turned into wheel clicks and key events; bounds
 * hold for any number a client can write (run under UBSan too). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "computer.h"

/* Parse args (JSON text) into c; they must fit the schema. */
static json_t *
call(const char *args, struct computer_call *c)
{
	json_t *v = json_loads(args, JSON_ALLOW_NUL, NULL);
	char *msg;

	assert_non_null(v);
	memset(c, 0, sizeof *c);
	msg = computer_args_check(v, c);
	if (msg != NULL)
		fail_msg("%s: %s", args, msg);
	return v;
}

/* The refusal of a scroll's text (NULL: none), its button and clicks. */
static char *
scroll(const char *text, int *button, int *clicks)
{
	json_t *o = json_pack("{s:s, s:[i, i], s:s}", "action", "scroll",
	    "coordinate", 5, 5, "text", text);
	char *args = json_dumps(o, 0), *msg;
	struct computer_call c;
	json_t *v = call(args, &c);

	json_decref(o);
	free(args);
	assert_null(computer_args_refusal(&c));
	*button = *clicks = -1;
	msg = computer_scroll(&c, button, clicks);
	json_decref(v);
	return msg;
}

static void
test_huge_scroll_amounts_are_the_most_clicks(void **state)
{
	static const char *const huge[] = {
		"down:5000", "down:5001", "down:2147483647", "down:2147483648",
		"down:9223372036854775807", "down:9223372036854775808",
		"down:99999999999999999999999999999999999999",
	};
	int button, clicks;

	(void)state;
	for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
		assert_null(scroll(huge[i], &button, &clicks));
		assert_int_equal(button, 1 << 4);
		assert_int_equal(clicks, 100);
	}
}

static void
test_scroll_amounts_round_up_to_clicks(void **state)
{
	int button, clicks;

	(void)state;
	assert_null(scroll("up:1", &button, &clicks));
	assert_int_equal(button, 1 << 3);
	assert_int_equal(clicks, 1);
	assert_null(scroll("left:120", &button, &clicks));
	assert_int_equal(button, 1 << 5);
	assert_int_equal(clicks, 3);
	assert_null(scroll("RIGHT", &button, &clicks));
	assert_int_equal(button, 1 << 6);
	assert_int_equal(clicks, 6);
}

static void
test_bad_scroll_texts_are_refused(void **state)
{
	static const char *const bad[][2] = {
		{ "down:0", "Invalid scroll amount: 0" },
		{ "down:-5", "Invalid scroll amount: -5" },
		{ "down:+5", "Invalid scroll amount: +5" },
		{ "down: 5", "Invalid scroll amount:  5" },
		{ "down:5x", "Invalid scroll amount: 5x" },
		{ "down:", "Invalid scroll amount: " },
		{ ":5", "Scroll direction required" },
		{ "sideways:5", "Invalid scroll direction: sideways. Use \"up\", "
		    "\"down\", \"left\", or \"right\"" },
	};
	int button, clicks;

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *msg = scroll(bad[i][0], &button, &clicks);

		assert_non_null(msg);
		assert_string_equal(msg, bad[i][1]);
		free(msg);
	}
}

/* A NUL inside the amount ends it for strtol, not for the client. */
static void
test_a_nul_inside_the_amount_is_refused(void **state)
{
	struct computer_call c;
	json_t *v = call("{\"action\": \"scroll\", \"coordinate\": [1, 1], "
	    "\"text\": \"down:5\\u0000999\"}", &c);
	int button, clicks;
	char *msg = computer_scroll(&c, &button, &clicks);

	(void)state;
	assert_non_null(msg);
	assert_string_equal(msg, "Invalid scroll amount: 5");
	free(msg);
	json_decref(v);
}

static void
test_coordinates_are_rounded_and_bounded(void **state)
{
	struct computer_call c;
	json_t *v;

	(void)state;
	v = call("{\"action\": \"mouse_move\", \"coordinate\": [10.5, 20.4]}",
	    &c);
	assert_int_equal(c.x, 11);
	assert_int_equal(c.y, 20);
	json_decref(v);
	v = call("{\"action\": \"mouse_move\", \"coordinate\": [1e308, -1e308]}",
	    &c);
	assert_int_equal(c.x, 1000000);
	assert_int_equal(c.y, -1000000);
	json_decref(v);
}

static void
test_key_combinations_press_in_order_and_release_in_reverse(void **state)
{
	uint32_t syms[2 * COMPUTER_KEY_MAX_KEYS];
	int down[2 * COMPUTER_KEY_MAX_KEYS];
	static const uint32_t want[] = { 0xffe3, 0xffe1, 'T', 'T', 0xffe1,
	    0xffe3, 0xff0d, 0xff0d };
	static const int want_down[] = { 1, 1, 1, 0, 0, 0, 1, 0 };
	struct computer_call c;
	json_t *v = call("{\"action\": \"key\", \"text\": \"ctrl+shift+t "
	    "Return\"}", &c);
	size_t n;

	(void)state;
	assert_null(computer_key_events(&c, syms, down, &n));
	assert_int_equal(n, 8);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(syms[i], want[i]);
		assert_int_equal(down[i], want_down[i]);
	}
	json_decref(v);
}

static void
test_bad_and_too_many_keys_are_refused(void **state)
{
	uint32_t syms[2 * COMPUTER_KEY_MAX_KEYS];
	int down[2 * COMPUTER_KEY_MAX_KEYS];
	char text[4 * (COMPUTER_KEY_MAX_KEYS + 1) + 1] = "";
	struct computer_call c = { .action = COMPUTER_KEY };
	size_t n;
	char *msg;

	(void)state;
	c.text = "ctrl+NoSuchKey";
	c.text_len = strlen(c.text);
	msg = computer_key_events(&c, syms, down, &n);
	assert_string_equal(msg, "Invalid key: nosuchkey");
	free(msg);
	c.text = " + ";
	c.text_len = strlen(c.text);
	msg = computer_key_events(&c, syms, down, &n);
	assert_string_equal(msg, "Invalid key: ");
	free(msg);
	for (int i = 0; i <= COMPUTER_KEY_MAX_KEYS; i++)
		strcat(text, i % 2 ? "a " : "b+c ");
	c.text = text;
	c.text_len = strlen(text);
	msg = computer_key_events(&c, syms, down, &n);
	assert_string_equal(msg, "Too many keys for key: the limit is 64");
	free(msg);
}

static void
test_typed_text_is_a_press_and_release_a_character(void **state)
{
	struct computer_call c = { .action = COMPUTER_TYPE };
	uint32_t syms[16];
	int down[16];
	size_t n;
	char *msg;

	(void)state;
	c.text = "a\xc3\xa9\r\n";
	c.text_len = strlen(c.text);
	assert_null(computer_type_events(&c, syms, down, &n));
	assert_int_equal(n, 6);
	assert_int_equal(syms[0], 'a');
	assert_int_equal(syms[2], 0xe9);
	assert_int_equal(syms[4], 0xff0d);
	assert_int_equal(down[4], 1);
	assert_int_equal(down[5], 0);
	c.text = "a\x07";
	c.text_len = 2;
	msg = computer_type_events(&c, syms, down, &n);
	assert_string_equal(msg, "Cannot type U+0007 (character 2 of the "
	    "text): no key types that control character");
	free(msg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_huge_scroll_amounts_are_the_most_clicks),
		cmocka_unit_test(test_scroll_amounts_round_up_to_clicks),
		cmocka_unit_test(test_bad_scroll_texts_are_refused),
		cmocka_unit_test(test_a_nul_inside_the_amount_is_refused),
		cmocka_unit_test(test_coordinates_are_rounded_and_bounded),
		cmocka_unit_test(
		    test_key_combinations_press_in_order_and_release_in_reverse),
		cmocka_unit_test(test_bad_and_too_many_keys_are_refused),
		cmocka_unit_test(
		    test_typed_text_is_a_press_and_release_a_character),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
