/* Options from the environment and the command line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

struct settings {
	char *name;
	struct config_list add;
	long count;
	size_t size;
	double ratio;
	int enable;
	int verbose;
	char *secret;
};

static struct settings s;

#define OFF(field)	offsetof(struct settings, field)

static const struct config_option options[] = {
	{ "--name", "UNITCFG_NAME", CONFIG_STRING, OFF(name), "NAME",
	    .help = "a name" },
	{ "--add", NULL, CONFIG_LIST, OFF(add), "ITEM", .help = "repeatable" },
	{ "--count", "UNITCFG_COUNT", CONFIG_INT, OFF(count), "N",
	    .help = "a count" },
	{ "--size", "UNITCFG_SIZE", CONFIG_SIZE, OFF(size), "SIZE",
	    .help = "a size" },
	{ "--ratio", NULL, CONFIG_DOUBLE, OFF(ratio), "X", .help = "a ratio" },
	{ "--enable", "UNITCFG_ENABLE", CONFIG_BOOL, OFF(enable), "BOOL",
	    .help = "a bool" },
	{ "--verbose", "UNITCFG_VERBOSE", CONFIG_FLAG, OFF(verbose), NULL,
	    .help = "a flag" },
	{ NULL, "UNITCFG_SECRET", CONFIG_STRING, OFF(secret), NULL,
	    .help = "env only" },
};
#define NOPTS (sizeof options / sizeof options[0])

static const char *const env_names[] = {
	"UNITCFG_NAME", "UNITCFG_COUNT", "UNITCFG_SIZE", "UNITCFG_ENABLE",
	"UNITCFG_VERBOSE", "UNITCFG_SECRET",
};

static int
reset(void **state)
{
	(void)state;
	free(s.name);
	free(s.secret);
	config_list_free(&s.add);
	memset(&s, 0, sizeof s);
	s.count = -1;
	for (size_t i = 0; i < sizeof env_names / sizeof env_names[0]; i++)
		unsetenv(env_names[i]);
	return 0;
}

/* Parse argv, program name first, NULL-terminated. */
static int
parse_argv(char **argv, struct error *err, int *help, int *version)
{
	int argc = 0, h, v;

	while (argv[argc] != NULL)
		argc++;
	return config_parse(options, NOPTS, &s, argc, argv, help ? help : &h,
	    version ? version : &v, err);
}

/* Collect the NULL-terminated arguments after "prog". */
#define COLLECT(argv, last) do {					\
	va_list ap_;							\
	int n_ = 1;							\
	(argv)[0] = "prog";						\
	va_start(ap_, last);						\
	while (((argv)[n_] = va_arg(ap_, char *)) != NULL)		\
		n_++;							\
	va_end(ap_);							\
} while (0)

static int
parse(struct error *err, int *help, int *version, ...)
{
	char *argv[32];

	COLLECT(argv, version);
	return parse_argv(argv, err, help, version);
}

/* Parse the NULL-terminated arguments, expecting success. */
static void
parse_ok(int unused, ...)
{
	char *argv[32];
	struct error err = { 0 };

	COLLECT(argv, unused);
	if (parse_argv(argv, &err, NULL, NULL) < 0)
		fail_msg("refused: %s", err.msg);
}

static void
assert_parse_fails(const char *want_in_msg, ...)
{
	char *argv[32];
	struct error err = { 0 };

	COLLECT(argv, want_in_msg);
	assert_int_equal(parse_argv(argv, &err, NULL, NULL), -1);
	assert_int_equal(err.status, 400);
	if (strstr(err.msg, want_in_msg) == NULL)
		fail_msg("'%s' not in '%s'", want_in_msg, err.msg);
}

static void
test_nothing_given(void **state)
{
	(void)state;
	parse_ok(0, NULL);
	assert_null(s.name);
	assert_int_equal(s.add.n, 0);
	assert_int_equal(s.count, -1);
	assert_int_equal(s.verbose, 0);
}

static void
test_environment(void **state)
{
	(void)state;
	setenv("UNITCFG_NAME", "from-env", 1);
	setenv("UNITCFG_COUNT", "12", 1);
	setenv("UNITCFG_SIZE", "2M", 1);
	setenv("UNITCFG_ENABLE", "yes", 1);
	setenv("UNITCFG_VERBOSE", "on", 1);
	setenv("UNITCFG_SECRET", "s3cret", 1);
	parse_ok(0, NULL);
	assert_string_equal(s.name, "from-env");
	assert_int_equal(s.count, 12);
	assert_int_equal(s.size, 2 << 20);
	assert_int_equal(s.enable, 1);
	assert_int_equal(s.verbose, 1);
	assert_string_equal(s.secret, "s3cret");
}

static void
test_flags_win_over_environment(void **state)
{
	(void)state;
	setenv("UNITCFG_NAME", "from-env", 1);
	setenv("UNITCFG_COUNT", "12", 1);
	setenv("UNITCFG_ENABLE", "true", 1);
	setenv("UNITCFG_VERBOSE", "1", 1);
	parse_ok(0, "--name", "from-flag", "--count=13", "--enable", "off",
	    "--verbose=false", NULL);
	assert_string_equal(s.name, "from-flag");
	assert_int_equal(s.count, 13);
	assert_int_equal(s.enable, 0);
	assert_int_equal(s.verbose, 0);
}

static void
test_later_flag_wins(void **state)
{
	(void)state;
	parse_ok(0, "--name", "first", "--count", "1", "--name=second",
	    "--count", "2", "--ratio", "0.5", "--ratio=0.25", NULL);
	assert_string_equal(s.name, "second");
	assert_int_equal(s.count, 2);
	assert_true(s.ratio == 0.25);
}

static void
test_list_accumulates(void **state)
{
	(void)state;
	parse_ok(0, "--add", "a", "--add=b", "--add", "c=d", NULL);
	assert_int_equal(s.add.n, 3);
	assert_string_equal(s.add.v[0], "a");
	assert_string_equal(s.add.v[1], "b");
	assert_string_equal(s.add.v[2], "c=d");
}

static void
test_values_with_equals_and_dashes(void **state)
{
	(void)state;
	/* Only the first '=' separates; a value may start with "-". */
	parse_ok(0, "--name=a=b", "--count", "-7", NULL);
	assert_string_equal(s.name, "a=b");
	assert_int_equal(s.count, -7);
	parse_ok(0, "--name=", NULL);
	assert_string_equal(s.name, "");
}

static void
test_sizes(void **state)
{
	static const struct { const char *in; size_t want; } good[] = {
		{ "0", 0 }, { "4096", 4096 }, { "64K", 64 << 10 },
		{ "64k", 64 << 10 }, { "16M", 16 << 20 }, { "16m", 16 << 20 },
		{ "1G", 1 << 30 }, { "3g", 3ULL << 30 }, { "1GiB", 1 << 30 },
		{ "2MB", 2 << 20 }, { "2mib", 2 << 20 }, { "5KB", 5 << 10 },
	};
	static const char *const bad[] = {
		"", "K", "-1", " -1", " 1", "+1", "1.5M", "12X", "1KBB",
		"1 K", "1Gb ", "0x10", "18446744073709551615K",
		"99999999999999999999",
	};

	(void)state;
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		size_t got = 12345;

		if (config_parse_size(good[i].in, &got) < 0)
			fail_msg("'%s' refused", good[i].in);
		assert_int_equal(got, good[i].want);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		size_t got = 12345;

		if (config_parse_size(bad[i], &got) == 0)
			fail_msg("'%s' accepted as %zu", bad[i], got);
		assert_int_equal(got, 12345);
	}
	assert_int_equal(config_parse_size(NULL, &(size_t){ 0 }), -1);
	parse_ok(0, "--size", "64K", NULL);
	assert_int_equal(s.size, 65536);
	assert_parse_fails("option --size", "--size", "lots", NULL);
	setenv("UNITCFG_SIZE", "1T", 1);
	assert_parse_fails("UNITCFG_SIZE", NULL);
}

static void
test_bools(void **state)
{
	static const char *const yes[] = { "1", "true", "TRUE", "Yes", "on" };
	static const char *const no[] = { "0", "false", "False", "no", "OFF", "" };
	static const char *const bad[] = { "maybe", "2", "tru", "yess", " on" };
	int v;

	(void)state;
	for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
		v = -1;
		assert_int_equal(config_parse_bool(yes[i], &v), 0);
		assert_int_equal(v, 1);
	}
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
		v = -1;
		assert_int_equal(config_parse_bool(no[i], &v), 0);
		assert_int_equal(v, 0);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		v = -1;
		assert_int_equal(config_parse_bool(bad[i], &v), -1);
		assert_int_equal(v, -1);
	}
	assert_parse_fails("'maybe' is not a boolean", "--enable", "maybe",
	    NULL);
	assert_parse_fails("is not a boolean", "--verbose=sometimes", NULL);
	setenv("UNITCFG_VERBOSE", "sometimes", 1);
	assert_parse_fails("UNITCFG_VERBOSE", NULL);
}

static void
test_flag_alone(void **state)
{
	(void)state;
	parse_ok(0, "--verbose", NULL);
	assert_int_equal(s.verbose, 1);
	/* A flag takes no value from the next argument. */
	assert_parse_fails("unexpected argument 'no'", "--verbose", "no", NULL);
}

static void
test_numbers(void **state)
{
	(void)state;
	assert_parse_fails("'4x' is not an integer", "--count", "4x", NULL);
	assert_parse_fails("is not an integer", "--count",
	    "99999999999999999999", NULL);
	assert_parse_fails("is not an integer", "--count=", NULL);
	assert_parse_fails("'abc' is not a number", "--ratio", "abc", NULL);
	setenv("UNITCFG_COUNT", "twelve", 1);
	assert_parse_fails("UNITCFG_COUNT: 'twelve'", NULL);
}

static void
test_unknown_flag(void **state)
{
	(void)state;
	assert_parse_fails("unknown option '--nope'", "--nope", NULL);
	assert_parse_fails("unknown option '--nope'", "--nope=3", NULL);
	/* A prefix of a real flag is not that flag. */
	assert_parse_fails("unknown option '--nam'", "--nam", "x", NULL);
	assert_parse_fails("unknown option '--names'", "--names", "x", NULL);
}

static void
test_missing_value(void **state)
{
	(void)state;
	assert_parse_fails("--name needs a value", "--name", NULL);
	assert_parse_fails("--count needs a value", "--verbose", "--count",
	    NULL);
}

static void
test_positional_refused(void **state)
{
	(void)state;
	assert_parse_fails("unexpected argument 'extra'", "extra", NULL);
	assert_parse_fails("unexpected argument '-x'", "-x", NULL);
}

static void
test_help_and_version(void **state)
{
	struct error err = { 0 };
	int help = -1, version = -1;

	(void)state;
	assert_int_equal(parse(&err, &help, &version, NULL), 0);
	assert_int_equal(help, 0);
	assert_int_equal(version, 0);
	assert_int_equal(parse(&err, &help, &version, "--help",
	    "--name", "x", NULL), 0);
	assert_int_equal(help, 1);
	assert_int_equal(version, 0);
	assert_string_equal(s.name, "x");
	assert_int_equal(parse(&err, &help, &version, "-h", NULL), 0);
	assert_int_equal(help, 1);
	assert_int_equal(parse(&err, &help, &version, "--version",
	    NULL), 0);
	assert_int_equal(help, 0);
	assert_int_equal(version, 1);
	assert_int_equal(parse(&err, &help, &version, "-V", NULL), 0);
	assert_int_equal(version, 1);
}

static void
test_usage(void **state)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	(void)state;
	assert_non_null(f);
	config_usage(f, "usage: prog [options]", options, NOPTS);
	assert_int_equal(fclose(f), 0);
	assert_non_null(strstr(text, "usage: prog [options]"));
	assert_non_null(strstr(text, "--name NAME"));
	assert_non_null(strstr(text, "[env UNITCFG_NAME]"));
	assert_non_null(strstr(text, "--help"));
	assert_non_null(strstr(text, "--version"));
	/* Environment-only options are listed apart. */
	assert_non_null(strstr(strstr(text, "Environment only:"),
	    "UNITCFG_SECRET"));
	free(text);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_nothing_given, reset, reset),
		cmocka_unit_test_setup_teardown(test_environment, reset, reset),
		cmocka_unit_test_setup_teardown(test_flags_win_over_environment, reset, reset),
		cmocka_unit_test_setup_teardown(test_later_flag_wins, reset, reset),
		cmocka_unit_test_setup_teardown(test_list_accumulates, reset, reset),
		cmocka_unit_test_setup_teardown(test_values_with_equals_and_dashes, reset, reset),
		cmocka_unit_test_setup_teardown(test_sizes, reset, reset),
		cmocka_unit_test_setup_teardown(test_bools, reset, reset),
		cmocka_unit_test_setup_teardown(test_flag_alone, reset, reset),
		cmocka_unit_test_setup_teardown(test_numbers, reset, reset),
		cmocka_unit_test_setup_teardown(test_unknown_flag, reset, reset),
		cmocka_unit_test_setup_teardown(test_missing_value, reset, reset),
		cmocka_unit_test_setup_teardown(test_positional_refused, reset, reset),
		cmocka_unit_test_setup_teardown(test_help_and_version, reset, reset),
		cmocka_unit_test_setup_teardown(test_usage, reset, reset),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
