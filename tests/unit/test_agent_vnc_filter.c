/* The view-only filter of a viewer's RFB stream (agent/vnc_filter.c): what
 * asks for pictures reaches the server byte for byte, keys, the pointer,
 * cut text, resizes and xvp never do, whatever way the stream is cut into
 * pieces; a stream the filter cannot follow ends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "vnc_filter.h"

static const unsigned char handshake[] = "RFB 003.008\n\x01\x00";
/* What the server gets of it: ClientInit made shared. */
static const unsigned char handshake_out[] = "RFB 003.008\n\x01\x01";
#define HANDSHAKE_LEN 14

static const unsigned char set_pixel_format[20] = { 0, 0, 0, 0, 32, 24, 0, 1,
    0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0 };
static const unsigned char set_encodings[] = { 2, 0, 0, 2, 0, 0, 0, 0,
    0xff, 0xff, 0xff, 0x21 };
static const unsigned char update_request[] = { 3, 1, 0, 0, 0, 0, 5, 0,
    3, 32 };
static const unsigned char key_event[] = { 4, 1, 0, 0, 0, 0, 0, 0x61 };
static const unsigned char pointer_event[] = { 5, 1, 1, 0, 2, 0 };
static const unsigned char cut_text[] = { 6, 0, 0, 0, 0, 0, 0, 5, 'h', 'e',
    'l', 'l', 'o' };
/* Extended clipboard: a negative length, its magnitude of bytes. */
static const unsigned char cut_text_ext[] = { 6, 0, 0, 0, 0xff, 0xff, 0xff,
    0xfc, 1, 2, 3, 4 };
static const unsigned char continuous[] = { 150, 1, 0, 0, 0, 0, 5, 0, 3,
    32 };
static const unsigned char fence[] = { 248, 0, 0, 0, 0, 0, 0, 3, 2, 'a',
    'b' };
static const unsigned char xvp[] = { 250, 0, 1, 4 };
static const unsigned char desktop_size[] = { 251, 0, 2, 0, 1, 0, 1, 0,
    0, 0, 0, 1, 0, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0, 0 };

struct piece {
	const unsigned char *data;
	size_t len;
	int passes;
};

#define PIECE(a, p) { a, sizeof a, p }

/* Feed the stream in pieces of step bytes; what came out. */
static struct evbuffer *
feed(const unsigned char *stream, size_t len, size_t step, int *rc,
    struct vnc_filter *f)
{
	struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();

	*rc = 0;
	for (size_t at = 0; at < len && *rc == 0; at += step) {
		evbuffer_add(in, stream + at, len - at < step ? len - at : step);
		*rc = vnc_filter_run(f, in, out);
		assert_int_equal(evbuffer_get_length(in), 0);
	}
	evbuffer_free(in);
	return out;
}

static void
test_pictures_pass_input_is_dropped(void **state)
{
	static const struct piece pieces[] = {
		PIECE(set_pixel_format, 1), PIECE(set_encodings, 1),
		PIECE(update_request, 1), PIECE(key_event, 0),
		PIECE(pointer_event, 0), PIECE(cut_text, 0),
		PIECE(cut_text_ext, 0), PIECE(continuous, 1), PIECE(fence, 1),
		PIECE(xvp, 0), PIECE(desktop_size, 0),
		PIECE(update_request, 1),
	};
	unsigned char stream[512], want[512];
	size_t len = HANDSHAKE_LEN, wlen = HANDSHAKE_LEN;

	(void)state;
	memcpy(stream, handshake, HANDSHAKE_LEN);
	memcpy(want, handshake_out, HANDSHAKE_LEN);
	for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
		memcpy(stream + len, pieces[i].data, pieces[i].len);
		len += pieces[i].len;
		if (pieces[i].passes) {
			memcpy(want + wlen, pieces[i].data, pieces[i].len);
			wlen += pieces[i].len;
		}
	}
	/* Whole, byte by byte, and in every other step between. */
	for (size_t step = 1; step <= len; step++) {
		struct vnc_filter f = { 0 };
		struct evbuffer *out;
		int rc;

		out = feed(stream, len, step, &rc, &f);
		assert_int_equal(rc, 0);
		assert_int_equal(evbuffer_get_length(out), wlen);
		assert_memory_equal(evbuffer_pullup(out, -1), want, wlen);
		evbuffer_free(out);
	}
}

/* A cut text longer than anything kept: skipped as it comes. */
static void
test_a_long_cut_text_is_skipped_without_being_held(void **state)
{
	struct vnc_filter f = { 0 };
	struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();
	static unsigned char chunk[65536];
	unsigned char head[] = { 6, 0, 0, 0, 0x10, 0, 0, 0 };	/* 256 MiB */

	(void)state;
	memset(chunk, 'k', sizeof chunk);
	evbuffer_add(in, handshake, HANDSHAKE_LEN);
	evbuffer_add(in, head, sizeof head);
	assert_int_equal(vnc_filter_run(&f, in, out), 0);
	for (int i = 0; i < 4096; i++) {
		evbuffer_add(in, chunk, sizeof chunk);
		assert_int_equal(vnc_filter_run(&f, in, out), 0);
		assert_int_equal(evbuffer_get_length(in), 0);
	}
	evbuffer_add(in, update_request, sizeof update_request);
	assert_int_equal(vnc_filter_run(&f, in, out), 0);
	assert_int_equal(evbuffer_get_length(out), HANDSHAKE_LEN +
	    sizeof update_request);
	evbuffer_free(in);
	evbuffer_free(out);
}

static void
refused(const unsigned char *stream, size_t len, size_t passed,
    const char *why)
{
	struct vnc_filter f = { 0 };
	struct evbuffer *out;
	int rc;

	out = feed(stream, len, 1, &rc, &f);
	assert_int_equal(rc, -1);
	assert_int_equal(evbuffer_get_length(out), passed);
	assert_non_null(strstr(f.why, why));
	evbuffer_free(out);
	/* Broken stays broken. */
	out = feed(handshake, HANDSHAKE_LEN, HANDSHAKE_LEN, &rc, &f);
	assert_int_equal(rc, -1);
	assert_int_equal(evbuffer_get_length(out), 0);
	evbuffer_free(out);
}

static void
test_what_cannot_be_followed_ends_the_stream(void **state)
{
	unsigned char stream[64];

	(void)state;
	refused((const unsigned char *)"RFB 003.003\n", 12, 0, "3.7 or 3.8");
	refused((const unsigned char *)"RFB 003.008\n\x02", 13, 12,
	    "security type None, not 2");
	/* An unknown message (QEMU's, here): nothing of it reaches the
	 * server, nor anything after it. */
	memcpy(stream, handshake, HANDSHAKE_LEN);
	memcpy(stream + HANDSHAKE_LEN, "\xff\x00\x00\x00\x00\x00", 6);
	memcpy(stream + HANDSHAKE_LEN + 6, update_request,
	    sizeof update_request);
	refused(stream, HANDSHAKE_LEN + 6 + sizeof update_request,
	    HANDSHAKE_LEN, "message type 255");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pictures_pass_input_is_dropped),
		cmocka_unit_test(test_a_long_cut_text_is_skipped_without_being_held),
		cmocka_unit_test(test_what_cannot_be_followed_ends_the_stream),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
