/* Route lookup, percent-decoding and token comparison of the HTTP layer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http.h"

#define GET HTTP_METHOD_GET
#define POST HTTP_METHOD_POST
#define PUT HTTP_METHOD_PUT
#define EXACT HTTP_MATCH_EXACT
#define PREFIX HTTP_MATCH_PREFIX

/* Handlers are never called here; routes are told apart by address. */
static const struct http_route routes[] = {
	{ GET, "/proxy", PREFIX, 0, NULL, 0 },			/* 0 */
	{ GET, "/proxy/special", PREFIX, 0, NULL, 0 },		/* 1 */
	{ GET, "/proxy/exact", EXACT, 0, NULL, 0 },		/* 2 */
	{ GET | POST, "/files/", PREFIX, 0, NULL, 0 },		/* 3 */
	{ POST, "/tools/run", EXACT, 0, NULL, 0 },		/* 4 */
	{ PUT, "/tools/run", EXACT, 0, NULL, 0 },		/* 5 */
	{ GET, "/healthz", EXACT, 0, NULL, 0 },			/* 6 */
	{ POST, "/upload", PREFIX, 0, NULL, 0 },		/* 7 */
};
#define NROUTES (sizeof routes / sizeof routes[0])

static const struct http_route *
find(unsigned method, const char *path, int *mismatch)
{
	return http_route_find(routes, NROUTES, method, path, mismatch);
}

static void
test_exact_route(void **state)
{
	int mismatch = -1;

	(void)state;
	assert_ptr_equal(find(GET, "/healthz", &mismatch), &routes[6]);
	assert_int_equal(mismatch, 0);
	assert_null(find(GET, "/healthz/", &mismatch));
	assert_null(find(GET, "/healthzz", &mismatch));
	assert_null(find(GET, "/", &mismatch));
	assert_int_equal(mismatch, 0);
}

static void
test_exact_beats_prefix(void **state)
{
	int mismatch;

	(void)state;
	/* "/proxy" and "/proxy/..." prefixes both cover it; exact wins, even
	 * though the prefixes come first in the table. */
	assert_ptr_equal(find(GET, "/proxy/exact", &mismatch), &routes[2]);
	/* Beyond the exact path, the prefixes apply again. */
	assert_ptr_equal(find(GET, "/proxy/exact/more", &mismatch), &routes[0]);
}

static void
test_longest_prefix_wins(void **state)
{
	int mismatch;

	(void)state;
	assert_ptr_equal(find(GET, "/proxy/special", &mismatch), &routes[1]);
	assert_ptr_equal(find(GET, "/proxy/special/x/y", &mismatch), &routes[1]);
	assert_ptr_equal(find(GET, "/proxy/other/x", &mismatch), &routes[0]);
	assert_ptr_equal(find(GET, "/proxy", &mismatch), &routes[0]);
	assert_ptr_equal(find(GET, "/proxy/", &mismatch), &routes[0]);
}

/* A router keyed on a header: its "path" is the header's name. */
static const struct http_route header_routes[] = {
	{ GET, "/healthz", EXACT, 0, NULL, 0 },			/* 0 */
	{ POST, "X-Post-Only", HTTP_MATCH_HEADER, 0, NULL, 0 },	/* 1 */
	{ GET | POST, "X-Route", HTTP_MATCH_HEADER, 0, NULL, 0 },	/* 2 */
};

static int
has_header(void *arg, const char *name)
{
	for (const char *const *h = arg; *h != NULL; h++) {
		if (strcmp(*h, name) == 0)
			return 1;
	}
	return 0;
}

static void
test_header_routes(void **state)
{
	const char *const none[] = { NULL };
	const char *const both[] = { "X-Post-Only", "X-Route", NULL };
	int mismatch;

	(void)state;
	/* Never by path, even one spelling the header's name. */
	assert_null(http_route_find(header_routes, 3, GET, "X-Route",
	    &mismatch));
	assert_ptr_equal(http_route_find(header_routes, 3, GET, "/healthz",
	    &mismatch), &header_routes[0]);
	assert_null(http_route_find_header(header_routes, 3, GET, has_header,
	    (void *)none));
	/* The first whose method fits; before any path route. */
	assert_ptr_equal(http_route_find_header(header_routes, 3, GET,
	    has_header, (void *)both), &header_routes[2]);
	assert_ptr_equal(http_route_find_header(header_routes, 3, POST,
	    has_header, (void *)both), &header_routes[1]);
	assert_null(http_route_find_header(header_routes, 3, PUT, has_header,
	    (void *)both));
}

static void
test_prefix_boundary(void **state)
{
	int mismatch = -1;

	(void)state;
	assert_null(find(GET, "/proxyfoo", &mismatch));
	assert_int_equal(mismatch, 0);
	/* "/proxy/specialist" is not under "/proxy/special", but it is under
	 * "/proxy". */
	assert_ptr_equal(find(GET, "/proxy/specialist", &mismatch), &routes[0]);
	assert_null(find(POST, "/uploads", &mismatch));
	assert_ptr_equal(find(POST, "/upload/a", &mismatch), &routes[7]);
}

static void
test_prefix_ending_in_slash(void **state)
{
	int mismatch;

	(void)state;
	assert_ptr_equal(find(GET, "/files/a.txt", &mismatch), &routes[3]);
	assert_ptr_equal(find(POST, "/files/dir/b", &mismatch), &routes[3]);
	assert_ptr_equal(find(GET, "/files/", &mismatch), &routes[3]);
	/* The slash is part of the prefix: "/files" alone is not under it. */
	assert_null(find(GET, "/files", &mismatch));
	assert_null(find(GET, "/filesx/a", &mismatch));
}

static void
test_method_mismatch(void **state)
{
	int mismatch = 0;

	(void)state;
	/* The path exists for other methods only: the server answers 405. */
	assert_null(find(GET, "/tools/run", &mismatch));
	assert_int_equal(mismatch, 1);
	assert_null(find(HTTP_METHOD_DELETE, "/healthz", &mismatch));
	assert_int_equal(mismatch, 1);
	assert_null(find(PUT, "/files/x", &mismatch));
	assert_int_equal(mismatch, 1);
	/* Two routes on one path with different methods: each finds its own. */
	assert_ptr_equal(find(POST, "/tools/run", &mismatch), &routes[4]);
	assert_ptr_equal(find(PUT, "/tools/run", &mismatch), &routes[5]);
	/* A prefix that does take the method answers, not 405. */
	assert_ptr_equal(find(POST, "/upload", &mismatch), &routes[7]);
	/* No route has the path at all: 404, not 405. */
	assert_null(find(GET, "/nowhere", &mismatch));
	assert_int_equal(mismatch, 0);
}

static void
test_method_mismatch_on_exact_falls_back_to_prefix(void **state)
{
	static const struct http_route r[] = {
		{ GET, "/a", PREFIX, 0, NULL, 0 },
		{ POST, "/a/b", EXACT, 0, NULL, 0 },
	};
	int mismatch = -1;

	(void)state;
	assert_ptr_equal(http_route_find(r, 2, GET, "/a/b", &mismatch), &r[0]);
	assert_int_equal(mismatch, 0);
	assert_ptr_equal(http_route_find(r, 2, POST, "/a/b", &mismatch), &r[1]);
}

static void
test_empty_table(void **state)
{
	int mismatch = -1;

	(void)state;
	assert_null(http_route_find(NULL, 0, GET, "/", &mismatch));
	assert_int_equal(mismatch, 0);
}

/* Decode a NUL-terminated input; returns the result or NULL. */
static char *
decode(const char *in, int plus_space)
{
	char *out = (char *)1;
	int rc = http_percent_decode(in, strlen(in), plus_space, &out);

	if (rc < 0) {
		assert_null(out);
		return NULL;
	}
	assert_int_equal(rc, 0);
	assert_non_null(out);
	return out;
}

static void
assert_decodes(const char *in, int plus_space, const char *want)
{
	char *out = decode(in, plus_space);

	assert_non_null(out);
	assert_string_equal(out, want);
	free(out);
}

static void
test_percent_decode_valid(void **state)
{
	(void)state;
	assert_decodes("", 0, "");
	assert_decodes("plain", 0, "plain");
	assert_decodes("a%20b", 0, "a b");
	assert_decodes("%41%42%43", 0, "ABC");
	assert_decodes("%2f%2F", 0, "//");
	assert_decodes("%e2%82%ac", 0, "\xe2\x82\xac");
	assert_decodes("100%25", 0, "100%");
	assert_decodes("%7e", 0, "~");
}

static void
test_percent_decode_plus(void **state)
{
	(void)state;
	assert_decodes("a+b", 0, "a+b");
	assert_decodes("a+b", 1, "a b");
	assert_decodes("a%2Bb", 1, "a+b");
	assert_decodes("++", 1, "  ");
}

static void
test_percent_decode_bad_escapes(void **state)
{
	static const char *const bad[] = {
		"%", "%4", "a%", "a%4", "%g1", "%1g", "%%", "%%41", "% 1",
		"abc%zz", "%-1",
	};

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *out = decode(bad[i], 0);

		if (out != NULL)
			fail_msg("'%s' decoded to '%s'", bad[i], out);
	}
}

static void
test_percent_decode_refuses_nul(void **state)
{
	(void)state;
	assert_null(decode("%00", 0));
	assert_null(decode("a%00b", 1));
	assert_null(decode("ab%00", 0));
}

static void
test_percent_decode_length_bound(void **state)
{
	char *out;

	(void)state;
	/* Only len bytes are read: the escape cut off at len is bad... */
	assert_int_equal(http_percent_decode("a%41", 3, 0, &out), -1);
	assert_null(out);
	/* ...and bytes past len are ignored. */
	assert_int_equal(http_percent_decode("a%41zz", 4, 0, &out), 0);
	assert_string_equal(out, "aA");
	free(out);
}

static void
test_token_equal(void **state)
{
	(void)state;
	assert_true(http_token_equal("secret-token", "secret-token"));
	assert_false(http_token_equal("secret-tokem", "secret-token"));
	assert_false(http_token_equal("Secret-token", "secret-token"));
	/* A prefix of the token, and the token with more after it. */
	assert_false(http_token_equal("secret", "secret-token"));
	assert_false(http_token_equal("secret-token2", "secret-token"));
	assert_false(http_token_equal("secret-token\n", "secret-token"));
	/* Empty on either side. */
	assert_false(http_token_equal("", "secret-token"));
	assert_false(http_token_equal("secret-token", ""));
	assert_true(http_token_equal("", ""));
}

static void
test_cookie_value(void **state)
{
	char *v;

	(void)state;
	v = http_cookie_value("a=1; sandbox_vnc=tok; b=2", "sandbox_vnc");
	assert_string_equal(v, "tok");
	free(v);
	v = http_cookie_value("sandbox_vnc=", "sandbox_vnc");
	assert_string_equal(v, "");	/* matches no token */
	free(v);
	/* A name that only starts like the one asked for is another. */
	assert_null(http_cookie_value("sandbox_vnc2=x; xsandbox_vnc=y",
	    "sandbox_vnc"));
	v = http_cookie_value(" \t;;sandbox_vnc=a=b ;", "sandbox_vnc");
	assert_string_equal(v, "a=b ");
	free(v);
	assert_null(http_cookie_value(NULL, "sandbox_vnc"));
	assert_null(http_cookie_value("", "sandbox_vnc"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exact_route),
		cmocka_unit_test(test_exact_beats_prefix),
		cmocka_unit_test(test_longest_prefix_wins),
		cmocka_unit_test(test_prefix_boundary),
		cmocka_unit_test(test_header_routes),
		cmocka_unit_test(test_prefix_ending_in_slash),
		cmocka_unit_test(test_method_mismatch),
		cmocka_unit_test(test_method_mismatch_on_exact_falls_back_to_prefix),
		cmocka_unit_test(test_empty_table),
		cmocka_unit_test(test_percent_decode_valid),
		cmocka_unit_test(test_percent_decode_plus),
		cmocka_unit_test(test_percent_decode_bad_escapes),
		cmocka_unit_test(test_percent_decode_refuses_nul),
		cmocka_unit_test(test_percent_decode_length_bound),
		cmocka_unit_test(test_cookie_value),
		cmocka_unit_test(test_token_equal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
