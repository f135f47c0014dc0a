/*
 * Options from the environment and the command line, one table per program:
 * each option names its flag, its environment variable, its type and where
 * the value goes. The environment is read first, flags after (later wins).
 */
#ifndef CONFIG_H
#define CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "error.h"

enum config_type {
	CONFIG_STRING,		/* char *: strdup'd */
	CONFIG_LIST,		/* struct config_list: repeatable flag */
	CONFIG_INT,		/* long */
	CONFIG_SIZE,		/* size_t, with K/M/G suffixes */
	CONFIG_DOUBLE,		/* double */
	CONFIG_BOOL,		/* int: true/false/1/0/yes/no/on/off */
	CONFIG_FLAG,		/* int set to 1 by the flag alone */
};

struct config_list {
	char **v;
	size_t n;
};

struct config_option {
	const char *flag;	/* "--listen"; NULL for environment only */
	const char *env;	/* "SECRET_TOKEN"; NULL for flag only */
	enum config_type type;
	void *target;
	const char *metavar;	/* shown in --help */
	const char *help;
};

/* Parse environment then argv. Stops with -1 and err naming the bad option
 * or variable. *help / *version set when those flags are given. Positional
 * arguments are refused. */
int config_parse(const struct config_option *opts, size_t nopts, int argc,
    char **argv, int *help, int *version, struct error *err);
/* Apply one value to an option (used for files of KEY=VALUE too). */
int config_set(const struct config_option *opt, const char *value,
    const char *source, struct error *err);
void config_usage(FILE *f, const char *synopsis,
    const struct config_option *opts, size_t nopts);
/* Parse "16M", "1G", "4096". -1 on junk. */
int config_parse_size(const char *s, size_t *out);
int config_parse_bool(const char *s, int *out);
void config_list_add(struct config_list *l, const char *value);
void config_list_free(struct config_list *l);

#endif
