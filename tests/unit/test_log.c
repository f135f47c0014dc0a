/* The per-source rate limit of log lines; one line per message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/* stderr goes to a temporary file while fn runs; its text comes back. */
static char *
captured(void (*fn)(void))
{
	FILE *tmp = tmpfile();
	int saved = dup(STDERR_FILENO);
	char *text;
	long len;

	assert_non_null(tmp);
	dup2(fileno(tmp), STDERR_FILENO);
	fn();
	dup2(saved, STDERR_FILENO);
	close(saved);
	len = lseek(fileno(tmp), 0, SEEK_END);
	text = calloc(1, (size_t)len + 1);
	assert_int_equal(pread(fileno(tmp), text, (size_t)len, 0), len);
	fclose(tmp);
	return text;
}

static size_t
count(const char *text, const char *what)
{
	size_t n = 0;

	for (const char *p = text; (p = strstr(p, what)) != NULL; p++)
		n++;
	return n;
}

static void
flood(void)
{
	struct log_rate rate = LOG_RATE_INIT(0.2, 3);
	struct timespec pause = { 0, 250 * 1000 * 1000 };

	for (int i = 0; i < 1000; i++)
		log_rate_msg(&rate, LOG_WARN, "line %d", i);
	nanosleep(&pause, NULL);
	log_rate_msg(&rate, LOG_WARN, "after the pause");
}

static void
test_flood_is_cut_and_counted(void **state)
{
	char *text;

	(void)state;
	text = captured(flood);
	assert_int_equal(count(text, " line "), 3);
	assert_non_null(strstr(text, "line 0\n"));
	assert_non_null(strstr(text, "line 2\n"));
	assert_null(strstr(text, "line 3\n"));
	assert_non_null(strstr(text, "(997 more lines like the next were "
	    "dropped"));
	assert_non_null(strstr(text, "after the pause\n"));
	free(text);
}

static void
quiet(void)
{
	struct log_rate rate = LOG_RATE_INIT(60, 2);

	log_set_level(LOG_ERROR);
	for (int i = 0; i < 10; i++)
		log_rate_msg(&rate, LOG_WARN, "hidden %d", i);
	log_set_level(LOG_INFO);
	log_rate_msg(&rate, LOG_WARN, "shown");
}

static void
test_lines_below_the_level_use_no_budget(void **state)
{
	char *text;

	(void)state;
	text = captured(quiet);
	assert_int_equal(count(text, "hidden"), 0);
	assert_non_null(strstr(text, "shown\n"));
	assert_null(strstr(text, "dropped"));
	free(text);
}

static void
forged(void)
{
	/* What a request path %0a...%1b[2J decodes to, as a peer sent it. */
	log_info("GET \"%s\" 401", "/x\n2026-01-01T00:00:00.000Z sandbox-agent"
	    "[1] info: forged\r\x1b[2J\x7f\tend");
}

static void
long_forged(void)
{
	char big[6000];

	memset(big, '\n', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	log_info("%s", big);
}

static void
test_control_bytes_cannot_forge_a_line(void **state)
{
	char *text;

	(void)state;
	text = captured(forged);
	assert_int_equal(count(text, "\n"), 1);
	assert_non_null(strstr(text, "/x\\x0a2026-01-01T00:00:00.000Z"));
	assert_non_null(strstr(text, "forged\\x0d\\x1b[2J\\x7f\\x09end\" 401\n"));
	free(text);
	/* Escaping grows a message fourfold; the line stays bounded. */
	text = captured(long_forged);
	assert_int_equal(count(text, "\n"), 1);
	assert_true(strlen(text) <= 4096);
	assert_non_null(strstr(text, "\\x0a\\x0a\n"));
	free(text);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flood_is_cut_and_counted),
		cmocka_unit_test(test_lines_below_the_level_use_no_budget),
		cmocka_unit_test(test_control_bytes_cannot_forge_a_line),
	};

	log_init("test_log");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
