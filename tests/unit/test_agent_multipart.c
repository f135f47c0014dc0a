/* The streaming multipart/form-data parser: every body is also fed cut at
 * every possible point, and byte by byte, and must parse the same. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "multipart.h"
#include "xmalloc.h"

/* What the callbacks saw, as one string: "[name|filename|type]" at a part's
 * start ("-" for absent), its data as is, "<end>" at its end. */
struct recorder {
	char *log;
	size_t len;
	int fail_at_begin;	/* part_begin of this part number fails */
	int parts;
};

static void
rec_add(struct recorder *r, const char *data, size_t len)
{
	r->log = xrealloc(r->log, r->len + len + 1);
	memcpy(r->log + r->len, data, len);
	r->len += len;
	r->log[r->len] = '\0';
}

static int
rec_begin(const struct multipart_part *part, void *arg, struct error *err)
{
	struct recorder *r = arg;
	char *s;

	if (++r->parts == r->fail_at_begin) {
		error_set(err, 409, "refused part %d", r->parts);
		return -1;
	}
	s = xasprintf("[%s|%s|%s]", part->name,
	    part->filename != NULL ? part->filename : "-",
	    part->content_type != NULL ? part->content_type : "-");
	rec_add(r, s, strlen(s));
	free(s);
	return 0;
}

static int
rec_data(const char *data, size_t len, void *arg, struct error *err)
{
	(void)err;
	assert_true(len > 0);
	rec_add(arg, data, len);
	return 0;
}

static int
rec_end(void *arg, struct error *err)
{
	(void)err;
	rec_add(arg, "<end>", 5);
	return 0;
}

static const struct multipart_callbacks rec_cb = {
	rec_begin, rec_data, rec_end,
};

/* Parse body fed in pieces of at most step bytes (0: in two pieces cut at
 * cut). Returns the log, or NULL with err on failure. */
static char *
parse(const char *boundary, const char *body, size_t len, size_t step,
    size_t cut, size_t *loglen, struct error *err)
{
	struct recorder r = { 0 };
	struct multipart *mp = multipart_new(boundary, &rec_cb, &r);
	int rc = 0;

	if (step == 0) {
		rc = multipart_feed(mp, body, cut, err);
		if (rc == 0)
			rc = multipart_feed(mp, body + cut, len - cut, err);
	} else {
		for (size_t i = 0; i < len && rc == 0; i += step)
			rc = multipart_feed(mp, body + i,
			    len - i < step ? len - i : step, err);
	}
	if (rc == 0)
		rc = multipart_finish(mp, err);
	multipart_free(mp);
	if (rc < 0) {
		free(r.log);
		return NULL;
	}
	*loglen = r.len;
	return r.log != NULL ? r.log : xstrdup("");
}

/* The body parses to expected however it is cut. */
static void
check_parses(const char *boundary, const char *body, size_t len,
    const char *expected, size_t explen)
{
	struct error err = { 0 };
	size_t loglen;
	char *log;

	for (size_t cut = 0; cut <= len; cut++) {
		log = parse(boundary, body, len, 0, cut, &loglen, &err);
		if (log == NULL)
			fail_msg("cut at %zu: %s", cut, err.msg);
		assert_int_equal(loglen, explen);
		assert_memory_equal(log, expected, explen);
		free(log);
	}
	for (size_t step = 1; step <= 3; step++) {
		log = parse(boundary, body, len, step, 0, &loglen, &err);
		if (log == NULL)
			fail_msg("step %zu: %s", step, err.msg);
		assert_int_equal(loglen, explen);
		assert_memory_equal(log, expected, explen);
		free(log);
	}
}

#define CHECK(boundary, body, expected) \
	check_parses(boundary, body, sizeof body - 1, expected, \
	    sizeof expected - 1)

/* The body fails with status however it is cut. */
static void
check_fails(const char *boundary, const char *body, size_t len, int status,
    const char *msg_part)
{
	struct error err = { 0 };
	size_t loglen;

	for (size_t cut = 0; cut <= len; cut++) {
		memset(&err, 0, sizeof err);
		assert_null(parse(boundary, body, len, 0, cut, &loglen, &err));
		assert_int_equal(err.status, status);
		if (strstr(err.msg, msg_part) == NULL)
			fail_msg("cut at %zu: '%s' lacks '%s'", cut, err.msg,
			    msg_part);
	}
}

#define FAILS(boundary, body, status, msg) \
	check_fails(boundary, body, sizeof body - 1, status, msg)

static void
test_fields_and_files(void **state)
{
	(void)state;
	CHECK("XyZ",
	    "--XyZ\r\n"
	    "Content-Disposition: form-data; name=\"paths\"\r\n"
	    "\r\n"
	    "dir/a.txt\r\n"
	    "--XyZ\r\n"
	    "Content-Disposition: form-data; name=\"files\"; filename=\"a.txt\"\r\n"
	    "Content-Type: text/plain\r\n"
	    "\r\n"
	    "hello\r\nworld\r\n"
	    "--XyZ--\r\n",
	    "[paths|-|-]dir/a.txt<end>"
	    "[files|a.txt|text/plain]hello\r\nworld<end>");
}

static void
test_preamble_epilogue_and_empty_parts(void **state)
{
	static const char body[] =
	    "this preamble is ignored\r\n-b -- b\r\n"
	    "--b  \t\r\n"
	    "content-disposition: FORM-DATA ; NAME=x\r\n"
	    "\r\n"
	    "\r\n"
	    "--b\r\n"
	    "Content-Disposition: form-data; name=\"y\"; filename=\"\"\r\n"
	    "\r\n"
	    "\r\n"
	    "--b--epilogue\r\n--b\r\nignored too";
	static const char expected[] = "[x|-|-]<end>[y||-]<end>";

	(void)state;
	check_parses("b", body, sizeof body - 1, expected, sizeof expected - 1);
}

static void
test_near_misses_are_data(void **state)
{
	static const char body[] =
	    "--bound\r\n"
	    "Content-Disposition: form-data; name=\"f\"\r\n"
	    "\r\n"
	    "\r\r\n\r\n-\r\n--\r\n--boun\r\n--bounx\r--bound\r\n--b"
	    "\r\n--bound--";
	static const char expected[] =
	    "[f|-|-]\r\r\n\r\n-\r\n--\r\n--boun\r\n--bounx\r--bound\r\n--b<end>";

	(void)state;
	check_parses("bound", body, sizeof body - 1, expected,
	    sizeof expected - 1);
}

static void
test_binary_data(void **state)
{
	char body[1024], expected[600];
	size_t n = 0, e = 0;
	const char *head = "--0123456789abcdef\r\nContent-Disposition: "
	    "form-data; name=\"bin\"; filename=\"b.bin\"\r\n\r\n";
	const char *tail = "\r\n--0123456789abcdef--\r\n";

	(void)state;
	memcpy(body, head, strlen(head));
	n = strlen(head);
	memcpy(expected, "[bin|b.bin|-]", 13);
	e = 13;
	for (int rep = 0; rep < 2; rep++) {
		for (int c = 0; c < 256; c++) {
			body[n++] = (char)c;
			expected[e++] = (char)c;
		}
	}
	memcpy(body + n, tail, strlen(tail));
	n += strlen(tail);
	memcpy(expected + e, "<end>", 5);
	e += 5;
	check_parses("0123456789abcdef", body, n, expected, e);
}

static void
test_quoting_and_extended_filename(void **state)
{
	(void)state;
	CHECK("q",
	    "--q\r\n"
	    "Content-Disposition: form-data; name=\"a\\\"b\"; "
	    "filename=\"c:\\\\x;y=z.txt\"\r\n"
	    "\r\n"
	    "1\r\n"
	    "--q\r\n"
	    "Content-Disposition: form-data; name=files; filename=\"plain.txt\";"
	    " filename*=UTF-8''na%C3%AFve%20%E2%82%AC.txt\r\n"
	    "\r\n"
	    "2\r\n"
	    "--q\r\n"
	    "Content-Disposition: form-data; name=files; filename=\"kept.txt\";"
	    " filename*=ISO-8859-1''other.txt\r\n"
	    "\r\n"
	    "3\r\n"
	    "--q--",
	    "[a\"b|c:\\x;y=z.txt|-]1<end>"
	    "[files|na\xc3\xafve \xe2\x82\xac.txt|-]2<end>"
	    "[files|kept.txt|-]3<end>");
}

static void
test_no_parts(void **state)
{
	(void)state;
	CHECK("e", "--e--\r\n", "");
}

static void
test_malformed(void **state)
{
	(void)state;
	FAILS("b", "--b\r\nContent-Disposition: form-data; name=x\r\n\r\n"
	    "data", 400, "closing boundary");
	FAILS("b", "no delimiter at all", 400, "closing boundary");
	FAILS("b", "--b\r\n\r\nno headers\r\n--b--", 400, "Content-Disposition");
	FAILS("b", "--b\r\nContent-Disposition: attachment; name=x\r\n\r\n"
	    "\r\n--b--", 400, "Content-Disposition");
	FAILS("b", "--b\r\nContent-Disposition: form-data\r\n\r\n\r\n--b--",
	    400, "with a name");
	FAILS("b", "--b\r\nContent-Disposition: form-data; name=\"x\r\n\r\n"
	    "\r\n--b--", 400, "malformed Content-Disposition");
	FAILS("b", "--b\r\nno colon here\r\n\r\n\r\n--b--", 400,
	    "malformed multipart part header");
	FAILS("b", "--bX\r\n", 400, "not followed by CRLF");
	FAILS("b", "--b\r\nContent-Disposition: form-data; name=x\r\n\r\n"
	    "\r\n--b-x", 400, "not followed by CRLF");
	FAILS("b", "--b\nContent-Disposition: form-data; name=x\n\n\n--b--",
	    400, "not followed by CRLF");
	check_fails("b", "--b\r\nX: a\0b\r\n\r\n\r\n--b--", 22, 400, "NUL");
}

static void
test_headers_too_large(void **state)
{
	size_t n = MULTIPART_MAX_HEADERS + 100;
	char *body = xmalloc(n + 64);
	struct error err = { 0 };
	size_t loglen;
	int len;

	(void)state;
	len = snprintf(body, 64, "--b\r\nX-Long: ");
	memset(body + len, 'a', n);
	memcpy(body + len + n, "\r\n\r\n\r\n--b--", 11);
	assert_null(parse("b", body, (size_t)len + n + 11, 4096, 0, &loglen,
	    &err));
	assert_int_equal(err.status, 400);
	assert_non_null(strstr(err.msg, "exceed"));
	free(body);
}

static void
test_callback_error_stops_parsing(void **state)
{
	static const char body[] =
	    "--b\r\nContent-Disposition: form-data; name=one\r\n\r\n1\r\n"
	    "--b\r\nContent-Disposition: form-data; name=two\r\n\r\n2\r\n"
	    "--b--";
	struct recorder r = { .fail_at_begin = 2 };
	struct multipart *mp = multipart_new("b", &rec_cb, &r);
	struct error err = { 0 };

	(void)state;
	assert_int_equal(multipart_feed(mp, body, sizeof body - 1, &err), -1);
	assert_int_equal(err.status, 409);
	assert_string_equal(r.log, "[one|-|-]1<end>");
	memset(&err, 0, sizeof err);
	assert_int_equal(multipart_feed(mp, "more", 4, &err), -1);
	assert_int_equal(err.status, 409);
	assert_int_equal(multipart_finish(mp, &err), -1);
	assert_int_equal(err.status, 409);
	multipart_free(mp);
	free(r.log);
}

static void
check_boundary(const char *content_type, const char *expected)
{
	struct error err = { 0 };
	char *b = multipart_boundary(content_type, &err);

	if (expected == NULL) {
		if (b != NULL)
			fail_msg("'%s' gave boundary '%s'", content_type, b);
		assert_int_equal(err.status, 400);
		return;
	}
	if (b == NULL)
		fail_msg("'%s': %s", content_type, err.msg);
	assert_string_equal(b, expected);
	free(b);
}

static void
test_boundary_from_content_type(void **state)
{
	char long_ct[200];

	(void)state;
	check_boundary("multipart/form-data; boundary=abc", "abc");
	check_boundary("Multipart/Form-Data;boundary=\"a b:c\"", "a b:c");
	check_boundary("  multipart/form-data ; charset=utf-8; "
	    "BOUNDARY=----WebKitFormBoundary7MA4YWxkTrZu0gW", 
	    "----WebKitFormBoundary7MA4YWxkTrZu0gW");
	check_boundary("multipart/form-data; boundary=\"q\\\"x\"", "q\"x");
	check_boundary(NULL, NULL);
	check_boundary("application/json", NULL);
	check_boundary("multipart/form-datax; boundary=a", NULL);
	check_boundary("multipart/mixed; boundary=a", NULL);
	check_boundary("multipart/form-data", NULL);
	check_boundary("multipart/form-data; boundary=", NULL);
	check_boundary("multipart/form-data; boundary=\"\"", NULL);
	check_boundary("multipart/form-data; boundary=\"ends in space \"", NULL);
	check_boundary("multipart/form-data; boundary=\"a\rb\"", NULL);
	check_boundary("multipart/form-data; boundary=\"unterminated", NULL);
	snprintf(long_ct, sizeof long_ct, "multipart/form-data; boundary=%071d",
	    0);
	check_boundary(long_ct, NULL);
	snprintf(long_ct, sizeof long_ct, "multipart/form-data; boundary=%070d",
	    0);
	check_boundary(long_ct, long_ct + 30);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fields_and_files),
		cmocka_unit_test(test_preamble_epilogue_and_empty_parts),
		cmocka_unit_test(test_near_misses_are_data),
		cmocka_unit_test(test_binary_data),
		cmocka_unit_test(test_quoting_and_extended_filename),
		cmocka_unit_test(test_no_parts),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_headers_too_large),
		cmocka_unit_test(test_callback_error_stops_parsing),
		cmocka_unit_test(test_boundary_from_content_type),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
