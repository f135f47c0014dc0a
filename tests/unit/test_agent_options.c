/* The agent's options: the defaults its table gives, the bounds it keeps,
 * and --help stating them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent.h"
#include "usage_check.h"

static int
load(struct agent_config *cfg, struct error *err, char **argv)
{
	int argc = 0, help, version;

	while (argv[argc] != NULL)
		argc++;
	memset(cfg, 0, sizeof *cfg);
	return agent_options_load(cfg, argc, argv, &help, &version, err);
}

static void
unload(struct agent_config *cfg)
{
	size_t n;
	const struct config_option *opts = agent_options_table(&n);

	config_free(opts, n, cfg);
}

static void
test_help_states_the_defaults(void **state)
{
	const struct config_option *opts;
	char *text = NULL;
	size_t len = 0, n;
	FILE *f = open_memstream(&text, &len);

	(void)state;
	assert_non_null(f);
	agent_options_usage(f);
	assert_int_equal(fclose(f), 0);
	opts = agent_options_table(&n);
	assert_usage_states_the_table(text, opts, n);
	free(text);
}

static void
test_defaults_apply(void **state)
{
	char *argv[] = { "sandbox-agent", NULL };
	struct agent_config cfg;
	struct error err;

	(void)state;
	assert_int_equal(load(&cfg, &err, argv), 0);
	assert_int_equal(cfg.listen.n, 1);
	assert_string_equal(cfg.listen.v[0], "0.0.0.0:8000");
	assert_string_equal(cfg.workspace, "/workspace");
	assert_string_equal(cfg.seccomp, "on");
	assert_int_equal(cfg.output_cap, 16 << 20);
	assert_true(cfg.default_timeout == 300);
	assert_int_equal(cfg.max_contexts, 16);
	assert_true(cfg.shell_template);
	assert_null(cfg.run_as);
	unload(&cfg);
}

static void
test_a_listen_given_replaces_the_default(void **state)
{
	char *argv[] = { "sandbox-agent", "--listen", "unix:/a.sock",
	    "--listen=127.0.0.1:9", NULL };
	struct agent_config cfg;
	struct error err;

	(void)state;
	assert_int_equal(load(&cfg, &err, argv), 0);
	assert_int_equal(cfg.listen.n, 2);
	assert_string_equal(cfg.listen.v[0], "unix:/a.sock");
	assert_string_equal(cfg.listen.v[1], "127.0.0.1:9");
	assert_false(cfg.listen.defaulted);
	unload(&cfg);
}

static void
test_bounds_and_choices_name_the_option(void **state)
{
	static const char *const bad[][2] = {
		{ "--max-contexts", "0" }, { "--max-contexts", "257" },
		{ "--timeout", "0" }, { "--timeout", "nan" },
		{ "--seccomp", "maybe" }, { "--log-level", "loud" },
		{ "--header-timeout", "-1" }, { "--max-connections", "-1" },
	};
	struct agent_config cfg;
	struct error err;

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *argv[] = { "sandbox-agent", (char *)bad[i][0],
		    (char *)bad[i][1], NULL };

		assert_int_equal(load(&cfg, &err, argv), -1);
		if (strstr(err.msg, bad[i][0]) == NULL)
			fail_msg("%s %s: '%s' does not name it", bad[i][0],
			    bad[i][1], err.msg);
		unload(&cfg);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_help_states_the_defaults),
		cmocka_unit_test(test_defaults_apply),
		cmocka_unit_test(test_a_listen_given_replaces_the_default),
		cmocka_unit_test(test_bounds_and_choices_name_the_option),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
