#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "xmalloc.h"

int
config_parse_size(const char *s, size_t *out)
{
	unsigned long long v, mult = 1;
	char *end;

	/* strtoull would skip blanks and take a sign: " -1" is SIZE_MAX. */
	if (s == NULL || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || end == s)
		return -1;
	if (*end != '\0') {
		switch (*end) {
		case 'k': case 'K': mult = 1ULL << 10; break;
		case 'm': case 'M': mult = 1ULL << 20; break;
		case 'g': case 'G': mult = 1ULL << 30; break;
		default: return -1;
		}
		end++;
		if (*end == 'i' || *end == 'I')
			end++;
		if (*end == 'b' || *end == 'B')
			end++;
		if (*end != '\0')
			return -1;
	}
	if (v > SIZE_MAX / mult)
		return -1;
	*out = (size_t)(v * mult);
	return 0;
}

int
config_parse_bool(const char *s, int *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off", "" };

	for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
	}
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
		if (strcasecmp(s, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	return -1;
}

void
config_list_add(struct config_list *l, const char *value)
{
	l->v = xreallocarray(l->v, l->n + 1, sizeof *l->v);
	l->v[l->n++] = xstrdup(value);
}

void
config_list_free(struct config_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

int
config_set(const struct config_option *opt, const char *value,
    const char *source, struct error *err)
{
	char *end;

	switch (opt->type) {
	case CONFIG_STRING: {
		char **s = opt->target;

		free(*s);
		*s = xstrdup(value);
		return 0;
	}
	case CONFIG_LIST:
		config_list_add(opt->target, value);
		return 0;
	case CONFIG_INT: {
		long v;

		errno = 0;
		v = strtol(value, &end, 10);
		if (errno != 0 || end == value || *end != '\0') {
			error_set(err, 400, "%s: '%s' is not an integer", source,
			    value);
			return -1;
		}
		*(long *)opt->target = v;
		return 0;
	}
	case CONFIG_SIZE:
		if (config_parse_size(value, opt->target) < 0) {
			error_set(err, 400, "%s: '%s' is not a size (like 4096, "
			    "64K, 16M, 1G)", source, value);
			return -1;
		}
		return 0;
	case CONFIG_DOUBLE: {
		double v;

		errno = 0;
		v = strtod(value, &end);
		if (errno != 0 || end == value || *end != '\0') {
			error_set(err, 400, "%s: '%s' is not a number", source,
			    value);
			return -1;
		}
		*(double *)opt->target = v;
		return 0;
	}
	case CONFIG_BOOL:
		if (config_parse_bool(value, opt->target) < 0) {
			error_set(err, 400, "%s: '%s' is not a boolean (true or "
			    "false)", source, value);
			return -1;
		}
		return 0;
	case CONFIG_FLAG:
		*(int *)opt->target = 1;
		return 0;
	}
	return 0;
}

static const struct config_option *
find_flag(const struct config_option *opts, size_t nopts, const char *arg,
    size_t len)
{
	for (size_t i = 0; i < nopts; i++) {
		if (opts[i].flag != NULL && strlen(opts[i].flag) == len &&
		    strncmp(opts[i].flag, arg, len) == 0)
			return &opts[i];
	}
	return NULL;
}

int
config_parse(const struct config_option *opts, size_t nopts, int argc,
    char **argv, int *help, int *version, struct error *err)
{
	*help = *version = 0;
	for (size_t i = 0; i < nopts; i++) {
		const char *v;

		if (opts[i].env == NULL || (v = getenv(opts[i].env)) == NULL)
			continue;
		if (opts[i].type == CONFIG_FLAG) {
			int on;

			if (config_parse_bool(v, &on) < 0) {
				error_set(err, 400, "environment %s: '%s' is not "
				    "a boolean", opts[i].env, v);
				return -1;
			}
			*(int *)opts[i].target = on;
			continue;
		}
		if (config_set(&opts[i], v, opts[i].env, err) < 0)
			return -1;
	}
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *eq, *value;
		const struct config_option *opt;
		char source[128];

		if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
			*help = 1;
			continue;
		}
		if (strcmp(arg, "--version") == 0 || strcmp(arg, "-V") == 0) {
			*version = 1;
			continue;
		}
		if (strncmp(arg, "--", 2) != 0) {
			error_set(err, 400, "unexpected argument '%s' (see --help)",
			    arg);
			return -1;
		}
		eq = strchr(arg, '=');
		opt = find_flag(opts, nopts, arg, eq != NULL ?
		    (size_t)(eq - arg) : strlen(arg));
		if (opt == NULL) {
			error_set(err, 400, "unknown option '%.*s' (see --help)",
			    (int)(eq != NULL ? eq - arg : (long)strlen(arg)), arg);
			return -1;
		}
		snprintf(source, sizeof source, "option %s", opt->flag);
		if (opt->type == CONFIG_FLAG && eq == NULL) {
			*(int *)opt->target = 1;
			continue;
		}
		if (eq != NULL)
			value = eq + 1;
		else if (i + 1 < argc)
			value = argv[++i];
		else {
			error_set(err, 400, "option %s needs a value", opt->flag);
			return -1;
		}
		if (opt->type == CONFIG_FLAG) {
			if (config_parse_bool(value, opt->target) < 0) {
				error_set(err, 400, "%s: '%s' is not a boolean",
				    source, value);
				return -1;
			}
			continue;
		}
		if (config_set(opt, value, source, err) < 0)
			return -1;
	}
	return 0;
}

void
config_usage(FILE *f, const char *synopsis, const struct config_option *opts,
    size_t nopts)
{
	fprintf(f, "%s\n\nOptions:\n", synopsis);
	for (size_t i = 0; i < nopts; i++) {
		char left[96];

		if (opts[i].flag == NULL)
			continue;
		snprintf(left, sizeof left, "%s%s%s", opts[i].flag,
		    opts[i].metavar != NULL ? " " : "",
		    opts[i].metavar != NULL ? opts[i].metavar : "");
		fprintf(f, "  %-28s %s", left, opts[i].help);
		if (opts[i].env != NULL)
			fprintf(f, " [env %s]", opts[i].env);
		fputc('\n', f);
	}
	fprintf(f, "  %-28s %s\n  %-28s %s\n", "--help", "show this help",
	    "--version", "show the version");
	fprintf(f, "\nEnvironment only:\n");
	for (size_t i = 0; i < nopts; i++) {
		if (opts[i].flag == NULL && opts[i].env != NULL)
			fprintf(f, "  %-28s %s\n", opts[i].env, opts[i].help);
	}
}
