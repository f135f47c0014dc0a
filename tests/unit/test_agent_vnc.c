/* agent/vnc.c: the agent's side of the VNC helper's channel. The helper
 * is the user's process, so each reply is played here by the test, as a
 * hostile helper would send it, on a real socket pair: what is within the
 * protocol comes through, anything else gives the helper up (502) without
 * harm (run under ASan/UBSan too). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vnc.h"
#include "vnc_wire.h"

struct fixture {
	struct vnc *v;
	int helper;		/* the helper's end */
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	int sv[2];

	if (f == NULL || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
	    sv) < 0)
		return -1;
	f->v = vnc_new();
	vnc_attach(f->v, sv[0]);
	f->helper = sv[1];
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	vnc_free(f->v);
	close(f->helper);
	free(f);
	return 0;
}

/* The helper's next reply, sent ahead (the socket holds it). */
static void
reply(struct fixture *f, int32_t status, int32_t w, int32_t h, int32_t x,
    int32_t y, const void *data, uint32_t len)
{
	struct vnc_wire_reply rp = { status, w, h, x, y, len };

	assert_int_equal(write(f->helper, &rp, sizeof rp), sizeof rp);
	if (len > 0)
		assert_int_equal(write(f->helper, data, len), (ssize_t)len);
}

/* The request the agent sent: its op. */
static uint32_t
request(struct fixture *f)
{
	struct vnc_wire_request rq;
	struct vnc_wire_key k[VNC_WIRE_KEYS_MAX];

	assert_int_equal(read(f->helper, &rq, sizeof rq), sizeof rq);
	if (rq.nkeys > 0)
		assert_int_equal(read(f->helper, k, rq.nkeys * sizeof *k),
		    (ssize_t)(rq.nkeys * sizeof *k));
	return rq.op;
}

static void
begin_ok(struct fixture *f, int w, int h)
{
	struct error err = { 0 };

	reply(f, 0, w, h, 0, 0, NULL, 0);
	assert_int_equal(vnc_begin(f->v, &err), 0);
	assert_int_equal(request(f), VNC_WIRE_BEGIN);
}

static void
test_replies_within_the_protocol_come_through(void **state)
{
	struct fixture *f = *state;
	unsigned char pixels[4 * 3 * 4];
	struct vnc_image img;
	struct error err = { 0 };
	uint32_t syms[2000];
	int down[2000], w, h, x, y;

	begin_ok(f, 4, 3);
	vnc_size(f->v, &w, &h);
	assert_int_equal(w, 4);
	assert_int_equal(h, 3);
	memset(pixels, 0x5a, sizeof pixels);
	reply(f, 0, 4, 3, 0, 0, pixels, sizeof pixels);
	assert_int_equal(vnc_capture(f->v, &img, &err), 0);
	assert_int_equal(request(f), VNC_WIRE_CAPTURE);
	assert_int_equal(img.width, 4);
	assert_memory_equal(img.pixels, pixels, sizeof pixels);
	free(img.pixels);
	reply(f, 0, 4, 3, -7, 32767, NULL, 0);
	assert_int_equal(vnc_pointer_position(f->v, &x, &y, &err), 0);
	assert_int_equal(request(f), VNC_WIRE_POSITION);
	assert_int_equal(x, -7);
	assert_int_equal(y, 32767);
	/* 2000 key events go as two requests. */
	memset(syms, 0, sizeof syms);
	memset(down, 0, sizeof down);
	reply(f, 0, 4, 3, 0, 0, NULL, 0);
	reply(f, 0, 4, 3, 0, 0, NULL, 0);
	assert_int_equal(vnc_keys(f->v, syms, down, 2000, &err), 0);
	assert_int_equal(request(f), VNC_WIRE_KEYS);
	assert_int_equal(request(f), VNC_WIRE_KEYS);
	vnc_end(f->v);
	assert_false(vnc_helper_lost(f->v));
}

/* The helper's own failure: its status and message, made printable; the
 * helper is kept. */
static void
test_a_failure_is_told_in_printable_text(void **state)
{
	struct fixture *f = *state;
	static const char msg[] = "the display\n\033[31mwent\xff away";
	struct error err = { 0 };

	reply(f, 504, 0, 0, 0, 0, msg, sizeof msg - 1);
	assert_int_equal(vnc_begin(f->v, &err), -1);
	assert_int_equal(err.status, 504);
	assert_string_equal(err.msg, "the display??[31mwent? away");
	assert_false(vnc_helper_lost(f->v));
	begin_ok(f, 4, 3);
	vnc_end(f->v);
}

/* Each reply no helper of ours sends: the helper is given up. */
static void
test_replies_outside_the_protocol_give_the_helper_up(void **state)
{
	struct fixture *f = *state;
	static const struct vnc_wire_reply bad[] = {
		{ 200, 0, 0, 0, 0, 0 },			/* no such status */
		{ 503, 0, 0, 0, 0, VNC_WIRE_MSG_MAX + 1 },	/* long message */
		{ 0, 0, 0, 0, 0, 0 },			/* no screen */
		{ 0, VNC_MAX_SIDE + 1, 1, 0, 0, 0 },	/* too wide */
		{ 0, 4096, 4097, 0, 0, 0 },		/* too many pixels */
		{ 0, -4, 3, 0, 0, 0 },
		{ 0, 4, 3, 0, 0, 12 },			/* bytes to BEGIN */
	};
	struct error err = { 0 };
	int sv[2];

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(write(f->helper, &bad[i], sizeof bad[i]),
		    sizeof bad[i]);
		assert_int_equal(vnc_begin(f->v, &err), -1);
		assert_int_equal(err.status, 502);
		assert_true(vnc_helper_lost(f->v));
		/* Gone: nothing more is asked of it. */
		assert_int_equal(request(f), VNC_WIRE_BEGIN);
		assert_int_equal(vnc_begin(f->v, &err), -1);
		assert_int_equal(err.status, 502);
		assert_non_null(strstr(err.msg, "not running"));
		/* The next helper. */
		close(f->helper);
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
		    0, sv), 0);
		vnc_attach(f->v, sv[0]);
		f->helper = sv[1];
		assert_false(vnc_helper_lost(f->v));
	}
}

static void
test_a_wrong_capture_or_pointer_gives_the_helper_up(void **state)
{
	struct fixture *f = *state;
	unsigned char pixels[64] = { 0 };
	struct vnc_image img;
	struct error err = { 0 };
	int x, y;

	begin_ok(f, 4, 3);
	/* A screen of 48 bytes announced as 64. */
	reply(f, 0, 4, 3, 0, 0, pixels, sizeof pixels);
	assert_int_equal(vnc_capture(f->v, &img, &err), -1);
	assert_null(img.pixels);
	assert_int_equal(err.status, 502);
	assert_true(vnc_helper_lost(f->v));
	vnc_end(f->v);
	teardown(state);
	setup(state);
	f = *state;
	begin_ok(f, 4, 3);
	/* Past what X's 16-bit coordinates hold. */
	reply(f, 0, 4, 3, 70000, 0, NULL, 0);
	assert_int_equal(vnc_pointer_position(f->v, &x, &y, &err), -1);
	assert_int_equal(err.status, 502);
	vnc_end(f->v);
}

/* A helper that closes mid-reply (its process died). */
static void
test_a_helper_that_closes_mid_reply(void **state)
{
	struct fixture *f = *state;
	struct vnc_image img;
	struct error err = { 0 };

	struct vnc_wire_reply rp = { 0, 4, 3, 0, 0, 4 * 3 * 4 };

	begin_ok(f, 4, 3);
	assert_int_equal(write(f->helper, &rp, sizeof rp), sizeof rp);
	assert_int_equal(write(f->helper, "abc", 3), 3);
	shutdown(f->helper, SHUT_WR);
	assert_int_equal(vnc_capture(f->v, &img, &err), -1);
	assert_int_equal(err.status, 502);
	assert_non_null(strstr(err.msg, "did not send the screen"));
	vnc_end(f->v);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_replies_within_the_protocol_come_through, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_a_failure_is_told_in_printable_text, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_replies_outside_the_protocol_give_the_helper_up, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_a_wrong_capture_or_pointer_gives_the_helper_up, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_a_helper_that_closes_mid_reply, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
