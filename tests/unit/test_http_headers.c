/* The header reader the HTTP server and client share: headers arriving
 * in pieces from http-parser, as the real parser cuts them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "http_internal.h"

struct parsed {
	struct http_header_reader hr;
	struct http_headers h;
	size_t max;
	enum http_header_fault fault;
};

static int
field_cb(http_parser *p, const char *at, size_t len)
{
	struct parsed *ps = p->data;

	ps->fault = http_header_reader_field(&ps->hr, at, len, &ps->h,
	    ps->max);
	return ps->fault == HTTP_HEADER_OK ? 0 : -1;
}

static int
value_cb(http_parser *p, const char *at, size_t len)
{
	http_header_reader_value(&((struct parsed *)p->data)->hr, at, len);
	return 0;
}

static int
complete_cb(http_parser *p)
{
	struct parsed *ps = p->data;

	ps->fault = http_header_reader_end(&ps->hr, &ps->h, ps->max);
	return ps->fault == HTTP_HEADER_OK ? 0 : -1;
}

static const http_parser_settings settings = {
	.on_header_field = field_cb,
	.on_header_value = value_cb,
	.on_headers_complete = complete_cb,
};

/* Feed text to a request parser cut into pieces of step bytes. */
static void
parse(struct parsed *ps, const char *text, size_t len, size_t step,
    size_t max)
{
	http_parser p;

	memset(ps, 0, sizeof *ps);
	http_header_reader_init(&ps->hr);
	ps->max = max;
	http_parser_init(&p, HTTP_REQUEST);
	p.data = ps;
	for (size_t off = 0; off < len; off += step) {
		size_t n = len - off < step ? len - off : step;

		if (http_parser_execute(&p, &settings, text + off, n) != n)
			break;
	}
}

static void
done(struct parsed *ps)
{
	http_header_reader_free(&ps->hr);
	http_headers_clear(&ps->h);
}

#define HEAD "GET / HTTP/1.1\r\nHost: a\r\nX-Long: one two  \t\r\n" \
	"Content-Type: text/plain\r\n\r\n"

static void
test_pieces_of_every_size(void **state)
{
	(void)state;
	for (size_t step = 1; step <= sizeof HEAD; step++) {
		struct parsed ps;

		parse(&ps, HEAD, sizeof HEAD - 1, step, 8);
		assert_int_equal(ps.fault, HTTP_HEADER_OK);
		assert_int_equal(ps.h.n, 3);
		assert_string_equal(http_headers_get(&ps.h, "host"), "a");
		/* Trailing blanks go, inner ones stay. */
		assert_string_equal(http_headers_get(&ps.h, "X-LONG"),
		    "one two");
		assert_string_equal(http_headers_get(&ps.h, "content-type"),
		    "text/plain");
		assert_null(http_headers_get(&ps.h, "Accept"));
		done(&ps);
	}
}

static void
test_too_many(void **state)
{
	struct parsed ps;

	(void)state;
	parse(&ps, HEAD, sizeof HEAD - 1, 5, 2);
	assert_int_equal(ps.fault, HTTP_HEADER_TOO_MANY);
	assert_int_equal(ps.h.n, 2);
	done(&ps);
}

/* http-parser lets some bytes through that a C string cannot hold. */
static void
test_nul_byte_refused(void **state)
{
	struct parsed ps;

	(void)state;
	memset(&ps, 0, sizeof ps);
	http_header_reader_init(&ps.hr);
	http_header_reader_field(&ps.hr, "X-A", 3, &ps.h, 8);
	http_header_reader_value(&ps.hr, "b\0c", 3);
	assert_int_equal(http_header_reader_end(&ps.hr, &ps.h, 8),
	    HTTP_HEADER_NUL);
	http_header_reader_field(&ps.hr, "X-\0", 3, &ps.h, 8);
	http_header_reader_value(&ps.hr, "b", 1);
	assert_int_equal(http_header_reader_end(&ps.hr, &ps.h, 8),
	    HTTP_HEADER_NUL);
	assert_int_equal(ps.h.n, 0);
	done(&ps);
}

static void
test_reset_forgets_a_half_read_header(void **state)
{
	struct parsed ps;

	(void)state;
	memset(&ps, 0, sizeof ps);
	http_header_reader_init(&ps.hr);
	http_header_reader_field(&ps.hr, "X-Old", 5, &ps.h, 8);
	http_header_reader_value(&ps.hr, "stale", 5);
	http_header_reader_reset(&ps.hr);
	http_header_reader_field(&ps.hr, "X-New", 5, &ps.h, 8);
	http_header_reader_value(&ps.hr, "fresh", 5);
	assert_int_equal(http_header_reader_end(&ps.hr, &ps.h, 8),
	    HTTP_HEADER_OK);
	assert_int_equal(ps.h.n, 1);
	assert_string_equal(http_headers_get(&ps.h, "x-new"), "fresh");
	done(&ps);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pieces_of_every_size),
		cmocka_unit_test(test_too_many),
		cmocka_unit_test(test_nul_byte_refused),
		cmocka_unit_test(test_reset_forgets_a_half_read_header),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
