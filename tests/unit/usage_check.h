/*
 * --help against the option table it prints: each option's line states its
 * own default, and no line states a default the table does not hold, so
 * that the help cannot say what the program does not do. For the tests of
 * each program's options (test_agent_options.c, test_sandboxd_config.c).
 */
#ifndef USAGE_CHECK_H
#define USAGE_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

/* What usage says of opt after its name: its help, as a copy. */
static char *
usage_line_of(const char *usage, const struct config_option *opt)
{
	const char *name = opt->flag != NULL ? opt->flag : opt->env;
	char head[128];
	const char *at, *end;

	snprintf(head, sizeof head, "\n  %s ", name);
	at = strstr(usage, head);
	if (at == NULL)
		fail_msg("no line for %s in --help", name);
	at += strlen(head);
	if (opt->flag != NULL && opt->metavar != NULL)
		at += strlen(opt->metavar) + 1;
	end = strchr(at, '\n');
	return strndup(at, end != NULL ? (size_t)(end - at) : strlen(at));
}

static size_t
count_in(const char *text, const char *word)
{
	size_t n = 0;

	for (const char *p = text; (p = strstr(p, word)) != NULL; p++)
		n++;
	return n;
}

static void
assert_usage_states_the_table(const char *usage,
    const struct config_option *opts, size_t nopts)
{
	size_t with_default = 0, stated = 0;

	for (size_t i = 0; i < nopts; i++) {
		char *line = usage_line_of(usage, &opts[i]), want[256];

		if (opts[i].def == NULL) {
			if (strstr(line, "default") != NULL)
				fail_msg("'%s' states a default the table does "
				    "not have", line);
		} else {
			snprintf(want, sizeof want, "(default %s", opts[i].def);
			if (strstr(line, want) == NULL ||
			    count_in(line, "default") != 1)
				fail_msg("'%s' does not state the table's "
				    "default, %s, alone", line, opts[i].def);
			with_default++;
		}
		stated += count_in(line, "default");
		free(line);
	}
	/* And no line is left out of the count (--help, --version). */
	if (count_in(usage, "(default ") != stated)
		fail_msg("--help states %zu defaults, its options %zu",
		    count_in(usage, "(default "), stated);
}

#endif
