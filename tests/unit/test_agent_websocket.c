/* The WebSocket frame codec of the desktop's relay (agent/websocket.c):
 * frames split anywhere arrive whole, payloads unmasked, control frames
 * between fragments, the room given respected, and each rule of RFC 6455
 * a client can break answered with its close code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "websocket.h"

static const unsigned char key[4] = { 0x37, 0xfa, 0x21, 0x3d };

/* A client's frame: head, mask, masked payload. Returns its length. */
static size_t
client_frame(unsigned char *out, unsigned b0, const void *payload,
    size_t len)
{
	const unsigned char *p = payload;
	size_t at = 0;

	out[at++] = (unsigned char)b0;
	if (len < 126) {
		out[at++] = (unsigned char)(0x80 | len);
	} else if (len < 65536) {
		out[at++] = 0x80 | 126;
		out[at++] = (unsigned char)(len >> 8);
		out[at++] = (unsigned char)len;
	} else {
		out[at++] = 0x80 | 127;
		for (int i = 7; i >= 0; i--)
			out[at++] = (unsigned char)((uint64_t)len >> (8 * i));
	}
	memcpy(out + at, key, 4);
	at += 4;
	for (size_t i = 0; i < len; i++)
		out[at + i] = p[i] ^ key[i & 3];
	return at + len;
}

struct run {
	struct websocket_reader r;
	struct evbuffer *in, *out;
};

static void
run_init(struct run *t)
{
	memset(t, 0, sizeof *t);
	t->in = evbuffer_new();
	t->out = evbuffer_new();
}

static void
run_free(struct run *t)
{
	evbuffer_free(t->in);
	evbuffer_free(t->out);
}

/* Feed data step bytes at a time; the events seen, in order, into evs. */
static size_t
feed(struct run *t, const unsigned char *data, size_t len, size_t step,
    enum websocket_event *evs, size_t max)
{
	size_t n = 0;

	for (size_t at = 0; at < len; at += step) {
		enum websocket_event ev;

		evbuffer_add(t->in, data + at, len - at < step ? len - at :
		    step);
		while ((ev = websocket_read(&t->r, t->in, t->out, SIZE_MAX)) !=
		    WEBSOCKET_AGAIN) {
			if (n < max)
				evs[n++] = ev;
			if (ev == WEBSOCKET_ERROR)
				return n;
		}
	}
	return n;
}

static void
test_frames_split_anywhere_arrive_whole(void **state)
{
	static unsigned char big[70000];
	unsigned char wire[80000];
	size_t len = 0;

	(void)state;
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (unsigned char)(i * 7);
	len += client_frame(wire + len, 0x82, "RFB 003.008\n", 12);
	/* A fragmented message with a ping between its pieces. */
	len += client_frame(wire + len, 0x02, big, 300);
	len += client_frame(wire + len, 0x89, "hi", 2);
	len += client_frame(wire + len, 0x80, big + 300, sizeof big - 300);
	len += client_frame(wire + len, 0x82, "", 0);
	for (size_t step = 1; step <= 4099; step += 1049) {
		struct run t;
		enum websocket_event evs[4];
		size_t n;

		run_init(&t);
		n = feed(&t, wire, len, step, evs, 4);
		assert_int_equal(n, 1);
		assert_int_equal(evs[0], WEBSOCKET_GOT_PING);
		assert_int_equal(t.r.control_len, 2);
		assert_memory_equal(t.r.control, "hi", 2);
		assert_int_equal(evbuffer_get_length(t.out), 12 + sizeof big);
		assert_memory_equal(evbuffer_pullup(t.out, 12), "RFB 003.008\n",
		    12);
		evbuffer_drain(t.out, 12);
		assert_memory_equal(evbuffer_pullup(t.out, -1), big,
		    sizeof big);
		run_free(&t);
	}
}

static void
test_room_is_respected(void **state)
{
	unsigned char data[1000], wire[1100];
	struct run t;
	size_t len;

	(void)state;
	memset(data, 'v', sizeof data);
	len = client_frame(wire, 0x82, data, sizeof data);
	run_init(&t);
	evbuffer_add(t.in, wire, len);
	assert_int_equal(websocket_read(&t.r, t.in, t.out, 100),
	    WEBSOCKET_AGAIN);
	assert_int_equal(evbuffer_get_length(t.out), 100);
	assert_int_equal(websocket_read(&t.r, t.in, t.out, 0),
	    WEBSOCKET_AGAIN);
	assert_int_equal(evbuffer_get_length(t.out), 100);
	assert_int_equal(websocket_read(&t.r, t.in, t.out, SIZE_MAX),
	    WEBSOCKET_AGAIN);
	assert_int_equal(evbuffer_get_length(t.out), sizeof data);
	assert_int_equal(evbuffer_get_length(t.in), 0);
	run_free(&t);
}

static void
test_close_codes_and_reasons(void **state)
{
	unsigned char wire[64];
	struct run t;
	size_t len;

	(void)state;
	run_init(&t);
	len = client_frame(wire, 0x88, "\x03\xe8" "bye", 5);
	evbuffer_add(t.in, wire, len);
	assert_int_equal(websocket_read(&t.r, t.in, t.out, SIZE_MAX),
	    WEBSOCKET_GOT_CLOSE);
	assert_int_equal(t.r.close_code, 1000);
	run_free(&t);
	run_init(&t);
	len = client_frame(wire, 0x88, "", 0);
	evbuffer_add(t.in, wire, len);
	assert_int_equal(websocket_read(&t.r, t.in, t.out, SIZE_MAX),
	    WEBSOCKET_GOT_CLOSE);
	assert_int_equal(t.r.close_code, 0);
	run_free(&t);
}

/* One broken frame after a good one: the error and its close code. */
static unsigned
refused(const unsigned char *frame, size_t len)
{
	unsigned char wire[64];
	struct run t;
	size_t at;
	enum websocket_event ev;

	run_init(&t);
	at = client_frame(wire, 0x82, "ok", 2);
	evbuffer_add(t.in, wire, at);
	evbuffer_add(t.in, frame, len);
	ev = websocket_read(&t.r, t.in, t.out, SIZE_MAX);
	assert_int_equal(ev, WEBSOCKET_ERROR);
	assert_non_null(t.r.why);
	assert_int_equal(evbuffer_get_length(t.out), 2);
	run_free(&t);
	return t.r.close_code;
}

static void
test_each_rule_broken_is_refused(void **state)
{
	unsigned char f[64];
	size_t n;

	(void)state;
	/* Unmasked. */
	assert_int_equal(refused((const unsigned char *)"\x82\x01x", 3), 1002);
	/* A reserved bit. */
	n = client_frame(f, 0xc2, "x", 1);
	assert_int_equal(refused(f, n), 1002);
	/* Opcodes 3 and 0xb. */
	n = client_frame(f, 0x83, "x", 1);
	assert_int_equal(refused(f, n), 1002);
	n = client_frame(f, 0x8b, "x", 1);
	assert_int_equal(refused(f, n), 1002);
	/* Text. */
	n = client_frame(f, 0x81, "x", 1);
	assert_int_equal(refused(f, n), 1003);
	/* A continuation with no message open. */
	n = client_frame(f, 0x80, "x", 1);
	assert_int_equal(refused(f, n), 1002);
	/* A fragmented ping. */
	n = client_frame(f, 0x09, "x", 1);
	assert_int_equal(refused(f, n), 1002);
	/* A ping of 126 bytes: its head alone says so. */
	assert_int_equal(refused((const unsigned char *)"\x89\xfe\x00\x7e"
	    "\0\0\0\0", 8), 1002);
	/* 5 as a 16-bit length, 200 as a 64-bit one. */
	assert_int_equal(refused((const unsigned char *)"\x82\xfe\x00\x05"
	    "\0\0\0\0", 8), 1002);
	assert_int_equal(refused((const unsigned char *)"\x82\xff\0\0\0\0\0\0"
	    "\0\xc8\0\0\0\0", 14), 1002);
	/* A 64-bit length with its top bit set, and one over the limit. */
	assert_int_equal(refused((const unsigned char *)"\x82\xff\x80\0\0\0"
	    "\0\0\0\x01\0\0\0\0", 14), 1002);
	assert_int_equal(refused((const unsigned char *)"\x82\xff\0\0\0\x01"
	    "\0\0\0\0\0\0\0\0", 14), 1009);
	/* Close: one byte, a code that may not be sent, a reason not UTF-8. */
	n = client_frame(f, 0x88, "\x03", 1);
	assert_int_equal(refused(f, n), 1002);
	n = client_frame(f, 0x88, "\x03\xed", 2);		/* 1005 */
	assert_int_equal(refused(f, n), 1002);
	n = client_frame(f, 0x88, "\x03\xe8\xff", 3);
	assert_int_equal(refused(f, n), 1007);
}

static void
test_a_new_message_inside_a_fragmented_one(void **state)
{
	unsigned char wire[64];
	struct run t;
	size_t len;

	(void)state;
	len = client_frame(wire, 0x02, "a", 1);
	len += client_frame(wire + len, 0x82, "b", 1);
	run_init(&t);
	evbuffer_add(t.in, wire, len);
	assert_int_equal(websocket_read(&t.r, t.in, t.out, SIZE_MAX),
	    WEBSOCKET_ERROR);
	assert_int_equal(t.r.close_code, 1002);
	/* The first piece went on; nothing of the second. */
	assert_int_equal(evbuffer_get_length(t.out), 1);
	run_free(&t);
}

static void
test_written_frames(void **state)
{
	static unsigned char payload[70000];
	struct evbuffer *out = evbuffer_new(), *src = evbuffer_new();
	const unsigned char *p;

	(void)state;
	websocket_write(out, WEBSOCKET_PONG, "hi", 2);
	p = evbuffer_pullup(out, -1);
	assert_memory_equal(p, "\x8a\x02hi", 4);
	evbuffer_drain(out, 4);
	evbuffer_add(src, payload, 300);
	websocket_write_buffer(out, WEBSOCKET_BINARY, src, 300);
	p = evbuffer_pullup(out, 4);
	assert_memory_equal(p, "\x82\x7e\x01\x2c", 4);
	assert_int_equal(evbuffer_get_length(out), 304);
	evbuffer_drain(out, 304);
	evbuffer_add(src, payload, sizeof payload);
	websocket_write_buffer(out, WEBSOCKET_BINARY, src, sizeof payload);
	p = evbuffer_pullup(out, 10);
	assert_memory_equal(p, "\x82\x7f\0\0\0\0\0\x01\x11\x70", 10);
	assert_int_equal(evbuffer_get_length(src), 0);
	evbuffer_drain(out, evbuffer_get_length(out));
	websocket_write_close(out, 1009, "too big");
	p = evbuffer_pullup(out, -1);
	assert_memory_equal(p, "\x88\x09\x03\xf1too big", 11);
	evbuffer_free(out);
	evbuffer_free(src);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frames_split_anywhere_arrive_whole),
		cmocka_unit_test(test_room_is_respected),
		cmocka_unit_test(test_close_codes_and_reasons),
		cmocka_unit_test(test_each_rule_broken_is_refused),
		cmocka_unit_test(test_a_new_message_inside_a_fragmented_one),
		cmocka_unit_test(test_written_frames),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
