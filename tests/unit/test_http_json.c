/* JSON request bodies (common/http_json.c): what is parsed, what is
 * refused for the memory its structure would take. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "http.h"

/* "[" unit * n "]" with the last comma dropped, as a string to free. */
static char *
repeat(const char *head, const char *unit, size_t n, const char *tail,
    size_t *len)
{
	size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
	char *s = malloc(hl + ul * n + tl + 1), *p = s;

	memcpy(p, head, hl);
	p += hl;
	for (size_t i = 0; i < n; i++, p += ul)
		memcpy(p, unit, ul);
	if (n > 0 && p[-1] == ',')
		p--;
	memcpy(p, tail, tl);
	p += tl;
	*p = '\0';
	*len = (size_t)(p - s);
	return s;
}

static void
expect(const char *text, size_t len, int status)
{
	struct error err = { 0 };
	json_t *j = http_json_parse(text, len, &err);

	if (status == 0) {
		if (j == NULL)
			fail_msg("refused (%d %s): %.60s", err.status, err.msg,
			    text);
		json_decref(j);
	} else {
		if (j != NULL)
			fail_msg("accepted: %.60s", text);
		assert_int_equal(err.status, status);
	}
}

static void
test_ordinary_bodies(void **state)
{
	static const char *const ok[] = {
		"{}", "{\"command\": \"ls -l\", \"timeout\": 30}",
		"{\"a\": [1, 2.5, -3e4, true, false, null, \"x\\\"y\"]}",
		" {\"nested\": {\"b\": {\"c\": []}}} ",
	};

	(void)state;
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		expect(ok[i], strlen(ok[i]), 0);
	expect("", 0, 400);
	expect("[1]", 3, 400);
	expect("{\"a\": }", 7, 400);
	expect("{\"a\": 1, \"a\": 2}", 16, 400);
}

/* 30 MiB of "[]," once took 1.4 GiB; refused before jansson sees it. */
static void
test_structure_bombs_are_refused(void **state)
{
	static const char *const units[] = { "[],", "{},", "[[]],",
	    "{\"a\":{}},", "1,", "true," };
	struct error err;
	size_t len;

	(void)state;
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
		char *s = repeat("{\"x\": [", units[i], 4 * 1024 * 1024, "]}",
		    &len);

		expect(s, len, 413);
		free(s);
	}
	{
		char *s = repeat("{\"x\": [", "[],", 4 * 1024 * 1024, "]}", &len);

		assert_null(http_json_parse(s, len, &err));
		assert_non_null(strstr(err.msg, "JSON body too complex"));
		free(s);
	}
}

/* What real requests carry passes at any size: long strings (commands,
 * code, files), and arrays of plain values at a moderate density. */
static void
test_large_legitimate_bodies(void **state)
{
	size_t len;
	char *s;

	(void)state;
	s = repeat("{\"command\": \"", "echo some text; ", 2 * 1024 * 1024,
	    "\"}", &len);
	expect(s, len, 0);
	free(s);
	s = repeat("{\"paths\": [", "\"dir/sub/file-name.txt\",", 100000, "]}",
	    &len);
	expect(s, len, 0);
	free(s);
	s = repeat("{\"data\": [", "12345.678,", 500000, "]}", &len);
	expect(s, len, 0);
	free(s);
	s = repeat("{\"edits\": [", "{\"oldText\": \"a line of code\", "
	    "\"newText\": \"another line\"},", 20000, "]}", &len);
	expect(s, len, 0);
	free(s);
	/* Brackets, braces and escaped quotes inside strings (code) are
	 * text, not structure. */
	s = repeat("{\"code\": \"", "x = [[], {}, 1]; y = \\\"[]\\\"; ",
	    500000, "\"}", &len);
	expect(s, len, 0);
	free(s);
	/* Small bodies are never refused for their structure. */
	s = repeat("{\"x\": [", "[],", 3000, "]}", &len);
	expect(s, len, 0);
	free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ordinary_bodies),
		cmocka_unit_test(test_structure_bombs_are_refused),
		cmocka_unit_test(test_large_legitimate_bodies),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
