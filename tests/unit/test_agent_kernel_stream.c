/*
 * Cutting the kernel's output into cells at the end-of-cell marker, with
 * the marker cut at every possible point between two reads; reading its
 * control frames within their limits.
 * agent/kernel_stream.o is linked in, as every test_agent_X links its
 * module.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "kernel_stream.h"
#include "xmalloc.h"

static const char marker[] = "\x1e" "0123456789abcdef0123456789abcdef" "\x1e";

static char *
take_text(struct kernel_stream *ks, size_t cap)
{
	struct evbuffer *buf = kernel_stream_take(ks, "stdout", cap);
	size_t len = evbuffer_get_length(buf);
	char *text = xmalloc(len + 1);

	evbuffer_remove(buf, text, len);
	text[len] = '\0';
	evbuffer_free(buf);
	return text;
}

static void
finish(struct kernel_stream *ks)
{
	evbuffer_free(ks->buf);
	evbuffer_free(ks->spill);
}

static void
test_marker_in_one_read(void **state)
{
	struct kernel_stream ks;
	char data[256], *text;
	int n;

	(void)state;
	assert_int_equal(MARKER_LEN, strlen(marker));
	kernel_stream_init(&ks);
	n = snprintf(data, sizeof data, "hello\n%slater", marker);
	assert_int_equal(kernel_stream_feed(&ks, 1, marker, data, (size_t)n, 0),
	    1);
	/* After the marker: the next cell's, even before this one is taken. */
	assert_int_equal(kernel_stream_feed(&ks, 1, marker, "+more", 5, 0), 0);
	text = take_text(&ks, 0);
	assert_string_equal(text, "hello\n");
	free(text);
	text = take_text(&ks, 0);
	assert_string_equal(text, "later+more");
	free(text);
	finish(&ks);
}

static void
test_marker_split_anywhere(void **state)
{
	char data[256];
	int n;

	(void)state;
	n = snprintf(data, sizeof data, "out\x1e\x1e%sbg", marker);
	for (int cut = 0; cut <= n; cut++) {
		struct kernel_stream ks;
		int hits;
		char *text;

		kernel_stream_init(&ks);
		hits = kernel_stream_feed(&ks, 1, marker, data, (size_t)cut, 0);
		hits += kernel_stream_feed(&ks, 1, marker, data + cut,
		    (size_t)(n - cut), 0);
		assert_int_equal(hits, 1);
		text = take_text(&ks, 0);
		assert_string_equal(text, "out\x1e\x1e");
		free(text);
		text = take_text(&ks, 0);
		assert_string_equal(text, "bg");
		free(text);
		finish(&ks);
	}
}

static void
test_byte_by_byte(void **state)
{
	struct kernel_stream ks;
	char data[256], *text;
	int n, hits = 0;

	(void)state;
	kernel_stream_init(&ks);
	n = snprintf(data, sizeof data, "a\x1e" "0123b%s", marker);
	for (int i = 0; i < n; i++)
		hits += kernel_stream_feed(&ks, 1, marker, data + i, 1, 0);
	assert_int_equal(hits, 1);
	text = take_text(&ks, 0);
	assert_string_equal(text, "a\x1e" "0123b");
	free(text);
	finish(&ks);
}

static void
test_cap_drops_but_finds_marker(void **state)
{
	struct kernel_stream ks;
	char big[5000], *text;

	(void)state;
	memset(big, 'x', sizeof big);
	kernel_stream_init(&ks);
	assert_int_equal(kernel_stream_feed(&ks, 1, marker, big, sizeof big,
	    100), 0);
	assert_int_equal(kernel_stream_feed(&ks, 1, marker, marker, MARKER_LEN,
	    100),
	    1);
	text = take_text(&ks, 100);
	assert_memory_equal(text, big, 100);
	assert_non_null(strstr(text, "[stdout truncated: 4900 bytes over the "
	    "100-byte limit were dropped]\n"));
	free(text);
	finish(&ks);
}

static void
test_no_marker_keeps_tail(void **state)
{
	struct kernel_stream ks;
	char *text;

	(void)state;
	kernel_stream_init(&ks);
	/* Idle output waits for the next cell. */
	kernel_stream_feed(&ks, 0, marker, "bg;", 3, 0);
	/* A kernel that died mid-cell: what looked like a marker's start
	 * was output after all. */
	kernel_stream_feed(&ks, 1, marker, "dying\x1e" "01", 8, 0);
	text = take_text(&ks, 0);
	assert_string_equal(text, "bg;dying\x1e" "01");
	free(text);
	kernel_stream_feed(&ks, 1, marker, "x", 1, 0);
	kernel_stream_reset(&ks);
	text = take_text(&ks, 0);
	assert_string_equal(text, "");
	free(text);
	finish(&ks);
}

static void
test_tail_for_messages(void **state)
{
	struct kernel_stream ks;
	char *text;

	(void)state;
	kernel_stream_init(&ks);
	kernel_stream_feed(&ks, 0, marker,
	    "Traceback\nImportError: \xff no\n\n", 29,
	    0);
	text = kernel_stream_tail(&ks, 14);
	assert_string_equal(text, "tError: \xef\xbf\xbd no");
	free(text);
	finish(&ks);
}

/* A frame of the given JSON text (length from the text unless len). */
static void
add_frame(struct evbuffer *in, const char *json, size_t len)
{
	unsigned char head[4];

	if (len == 0)
		len = strlen(json);
	head[0] = (unsigned char)(len >> 24);
	head[1] = (unsigned char)(len >> 16);
	head[2] = (unsigned char)(len >> 8);
	head[3] = (unsigned char)len;
	evbuffer_add(in, head, sizeof head);
	evbuffer_add(in, json, strlen(json));
}

static void
test_frames_in_pieces(void **state)
{
	static const char text[] = "{\"images\": [], \"x\": \"a,b:c[{\\\"\"}";
	static const char started[] = "{\"started\": true}";
	struct evbuffer *whole = evbuffer_new(), *in = evbuffer_new();
	const char *why = NULL;
	unsigned char byte;
	json_t *msg;

	(void)state;
	add_frame(whole, text, 0);
	add_frame(whole, started, 0);
	/* Byte by byte: nothing until a frame is all there. */
	while (evbuffer_remove(whole, &byte, 1) == 1) {
		evbuffer_add(in, &byte, 1);
		if (evbuffer_get_length(whole) == strlen(started) + 4)
			break;
		assert_int_equal(kernel_stream_read_frame(in, &msg, &why), 0);
	}
	assert_int_equal(kernel_stream_read_frame(in, &msg, &why), 1);
	/* Punctuation in strings, escaped quotes too, is not counted. */
	assert_string_equal(json_string_value(json_object_get(msg, "x")),
	    "a,b:c[{\"");
	json_decref(msg);
	assert_int_equal(kernel_stream_read_frame(in, &msg, &why), 0);
	evbuffer_add_buffer(in, whole);
	assert_int_equal(kernel_stream_read_frame(in, &msg, &why), 1);
	assert_true(json_is_true(json_object_get(msg, "started")));
	json_decref(msg);
	assert_int_equal(evbuffer_get_length(in), 0);
	evbuffer_free(whole);
	evbuffer_free(in);
}

static void
test_frames_over_the_limits(void **state)
{
	struct evbuffer *in = evbuffer_new();
	const char *why = NULL;
	json_t *msg;
	char *many;
	size_t n = 0;

	(void)state;
	/* Too long: refused by the header, before any of it is read. */
	add_frame(in, "", KERNEL_STREAM_FRAME_MAX + 1);
	assert_int_equal(kernel_stream_read_frame(in, &msg, &why), -1);
	assert_null(msg);
	assert_non_null(strstr(why, "16 MiB"));
	evbuffer_drain(in, evbuffer_get_length(in));

	/* What counts: the first value, and each ',', ':', '[' and '{'.
	 * KERNEL_STREAM_FRAME_VALUES of them pass, one more does not. */
	many = xmalloc(4 * KERNEL_STREAM_FRAME_VALUES + 16);
	n += (size_t)sprintf(many, "{\"v\": [");
	for (int i = 0; i < KERNEL_STREAM_FRAME_VALUES - 4; i++)
		n += (size_t)sprintf(many + n, "1,");
	strcpy(many + n, "1]}");
	add_frame(in, many, 0);
	assert_int_equal(kernel_stream_read_frame(in, &msg, &why), 1);
	assert_int_equal(json_array_size(json_object_get(msg, "v")),
	    KERNEL_STREAM_FRAME_VALUES - 3);
	json_decref(msg);
	memcpy(many + n, "1,1]}", 6);
	add_frame(in, many, 0);
	add_frame(in, "{}", 0);
	assert_int_equal(kernel_stream_read_frame(in, &msg, &why), -1);
	assert_non_null(strstr(why, "65536 JSON values"));
	/* The bad frame is gone, what follows is intact. */
	assert_int_equal(kernel_stream_read_frame(in, &msg, &why), 1);
	json_decref(msg);
	free(many);

	/* Not JSON, or not an object. */
	add_frame(in, "{\"a\": ", 0);
	assert_int_equal(kernel_stream_read_frame(in, &msg, &why), -1);
	assert_non_null(strstr(why, "malformed"));
	add_frame(in, "[1]", 0);
	assert_int_equal(kernel_stream_read_frame(in, &msg, &why), -1);
	assert_int_equal(evbuffer_get_length(in), 0);
	evbuffer_free(in);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_marker_in_one_read),
		cmocka_unit_test(test_marker_split_anywhere),
		cmocka_unit_test(test_byte_by_byte),
		cmocka_unit_test(test_cap_drops_but_finds_marker),
		cmocka_unit_test(test_no_marker_keeps_tail),
		cmocka_unit_test(test_tail_for_messages),
		cmocka_unit_test(test_frames_in_pieces),
		cmocka_unit_test(test_frames_over_the_limits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
