/*
 * Options from the environment, KEY=VALUE files and the command line, one
 * table per program, as tmux's options-table.c: each entry names its flag,
 * its environment variable, its type, where in the program's configuration
 * the value goes, its default, its bounds and its help. Defaults are
 * applied first, the environment next, flags last (later wins); a value
 * out of its bounds is refused where it is given, naming that source.
 * --help states each default and bound from the table, so the text cannot
 * drift from what the program does.
 */
#ifndef CONFIG_H
#define CONFIG_H

#include <math.h>
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
	CONFIG_CHOICE,		/* char *: one of choices, as the table
				 * spells it */
};

struct config_list {
	char **v;
	size_t n;
	int defaulted;		/* holds only the option's default, which
				 * the first value given replaces */
};

/* Bits of config_option.flags. */
#define CONFIG_EMPTY_UNSETS	0x1	/* "" is the default (none if none) */
#define CONFIG_ABOVE_MIN	0x2	/* min itself is refused: (min, max] */
#define CONFIG_SECRET		0x4	/* wiped when replaced or freed */

struct config_option {
	const char *flag;	/* "--listen"; NULL for environment only */
	const char *env;	/* "SECRET_TOKEN"; NULL for flag only */
	enum config_type type;
	size_t offset;		/* of the value in the configuration */
	const char *metavar;	/* shown in --help */
	const char *help;	/* what it does; defaults and bounds are
				 * added from the fields below */
	const char *def;	/* the value before any source, as a user
				 * would write it; NULL: none (zero) */
	double min, max;	/* numbers: the values allowed; min == max,
				 * as when both are left out: any */
	const char *const *choices;	/* CONFIG_CHOICE: NULL-terminated */
	int flags;		/* CONFIG_* bits above */
};

/* The whole table: defaults, then the environment, then argv. Stops with
 * -1 and err naming the bad option or variable. *help / *version set when
 * those flags are given. Positional arguments are refused. */
int config_parse(const struct config_option *opts, size_t nopts, void *cfg,
    int argc, char **argv, int *help, int *version, struct error *err);
/* Its steps, for a program that reads more sources between them. */
int config_defaults(const struct config_option *opts, size_t nopts,
    void *cfg, struct error *err);
int config_environment(const struct config_option *opts, size_t nopts,
    void *cfg, struct error *err);
int config_flags(const struct config_option *opts, size_t nopts, void *cfg,
    int argc, char **argv, int *help, int *version, struct error *err);
/* config_file.c: a KEY=VALUE file (.env syntax), keys the options'
 * environment names. strict: an unknown key is an error (a file named on
 * the command line), else a warning (a .env may be shared with other
 * programs). */
int config_file(const struct config_option *opts, size_t nopts, void *cfg,
    const char *path, int strict, struct error *err);
/* Apply one value to an option; source names it in errors. */
int config_set(const struct config_option *opt, void *cfg, const char *value,
    const char *source, struct error *err);
const struct config_option *config_find_env(const struct config_option *opts,
    size_t nopts, const char *env);
/* Free every string and list of the table's options in cfg. */
void config_free(const struct config_option *opts, size_t nopts, void *cfg);
void config_usage(FILE *f, const char *synopsis,
    const struct config_option *opts, size_t nopts);
/* Parse "16M", "1G", "4096". -1 on junk. */
int config_parse_size(const char *s, size_t *out);
int config_parse_bool(const char *s, int *out);
void config_list_add(struct config_list *l, const char *value);
void config_list_free(struct config_list *l);
/* Append the non-empty, trimmed parts of a comma list to out. */
void config_list_split(const char *s, struct config_list *out);
/* s without its leading and trailing blanks (cut in place). */
char *config_trim(char *s);

#endif
