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
	l->defaulted = 0;
}

char *
config_trim(char *s)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

void
config_list_split(const char *s, struct config_list *out)
{
	char *copy = xstrdup(s), *save = NULL;

	for (char *t = strtok_r(copy, ",", &save); t != NULL;
	    t = strtok_r(NULL, ",", &save)) {
		t = config_trim(t);
		if (*t != '\0')
			config_list_add(out, t);
	}
	free(copy);
}

static void *
target(const struct config_option *opt, void *cfg)
{
	return (char *)cfg + opt->offset;
}

/* Replace a string option's value (NULL: none), wiping a secret's old
 * bytes. */
static void
replace(const struct config_option *opt, char **s, const char *value)
{
	if (*s != NULL && (opt->flags & CONFIG_SECRET))
		explicit_bzero(*s, strlen(*s));
	free(*s);
	*s = value != NULL ? xstrdup(value) : NULL;
}

static int
in_bounds(const struct config_option *opt, double v)
{
	if (opt->min == opt->max)
		return 1;
	/* Written so that NaN is out of every range. */
	if (opt->flags & CONFIG_ABOVE_MIN)
		return v > opt->min && v <= opt->max;
	return v >= opt->min && v <= opt->max;
}

/* "0 to 65535", "above 0", "1 or more": the option's range in words. */
static void
range_text(const struct config_option *opt, char *buf, size_t size)
{
	if (opt->flags & CONFIG_ABOVE_MIN) {
		if (isinf(opt->max))
			snprintf(buf, size, "above %.15g", opt->min);
		else
			snprintf(buf, size, "above %.15g, at most %.15g",
			    opt->min, opt->max);
	} else if (isinf(opt->max)) {
		snprintf(buf, size, "%.15g or more", opt->min);
	} else {
		snprintf(buf, size, "%.15g to %.15g", opt->min, opt->max);
	}
}

static int
check_bounds(const struct config_option *opt, double v, const char *value,
    const char *source, struct error *err)
{
	char range[96];

	if (in_bounds(opt, v))
		return 0;
	range_text(opt, range, sizeof range);
	error_set(err, 400, "%s: %s is out of range (%s)", source, value, range);
	return -1;
}

static void
choices_text(const struct config_option *opt, char *buf, size_t size)
{
	size_t at = 0;

	buf[0] = '\0';
	for (size_t i = 0; opt->choices[i] != NULL && at < size; i++)
		at += (size_t)snprintf(buf + at, size - at, "%s%s",
		    i > 0 ? ", " : "", opt->choices[i]);
}

static int
set_choice(const struct config_option *opt, char **s, const char *value,
    const char *source, struct error *err)
{
	char known[256];

	for (size_t i = 0; opt->choices[i] != NULL; i++) {
		if (strcasecmp(value, opt->choices[i]) == 0) {
			replace(opt, s, opt->choices[i]);
			return 0;
		}
	}
	choices_text(opt, known, sizeof known);
	error_set(err, 400, "%s: '%s' is not one of %s", source, value, known);
	return -1;
}

static int
set_number(const struct config_option *opt, void *to, const char *value,
    const char *source, struct error *err)
{
	double v;
	char *end;

	errno = 0;
	switch (opt->type) {
	case CONFIG_INT: {
		long n = strtol(value, &end, 10);

		if (errno != 0 || end == value || *end != '\0') {
			error_set(err, 400, "%s: '%s' is not an integer", source,
			    value);
			return -1;
		}
		if (check_bounds(opt, (double)n, value, source, err) < 0)
			return -1;
		*(long *)to = n;
		return 0;
	}
	case CONFIG_SIZE: {
		size_t n;

		if (config_parse_size(value, &n) < 0) {
			error_set(err, 400, "%s: '%s' is not a size (like 4096, "
			    "64K, 16M, 1G)", source, value);
			return -1;
		}
		if (check_bounds(opt, (double)n, value, source, err) < 0)
			return -1;
		*(size_t *)to = n;
		return 0;
	}
	default:
		v = strtod(value, &end);
		if (errno != 0 || end == value || *end != '\0') {
			error_set(err, 400, "%s: '%s' is not a number", source,
			    value);
			return -1;
		}
		if (check_bounds(opt, v, value, source, err) < 0)
			return -1;
		*(double *)to = v;
		return 0;
	}
}

int
config_set(const struct config_option *opt, void *cfg, const char *value,
    const char *source, struct error *err)
{
	void *to = target(opt, cfg);

	if (value[0] == '\0' && (opt->flags & CONFIG_EMPTY_UNSETS) &&
	    (opt->type == CONFIG_STRING || opt->type == CONFIG_CHOICE)) {
		replace(opt, to, opt->def);
		return 0;
	}
	switch (opt->type) {
	case CONFIG_STRING:
		replace(opt, to, value);
		return 0;
	case CONFIG_CHOICE:
		return set_choice(opt, to, value, source, err);
	case CONFIG_LIST:
		if (((struct config_list *)to)->defaulted)
			config_list_free(to);
		config_list_add(to, value);
		return 0;
	case CONFIG_INT:
	case CONFIG_SIZE:
	case CONFIG_DOUBLE:
		return set_number(opt, to, value, source, err);
	case CONFIG_BOOL:
	case CONFIG_FLAG:
		if (config_parse_bool(value, to) < 0) {
			error_set(err, 400, "%s: '%s' is not a boolean (true or "
			    "false)", source, value);
			return -1;
		}
		return 0;
	}
	return 0;
}

int
config_defaults(const struct config_option *opts, size_t nopts, void *cfg,
    struct error *err)
{
	for (size_t i = 0; i < nopts; i++) {
		const struct config_option *opt = &opts[i];
		char source[128];

		if (opt->def == NULL)
			continue;
		snprintf(source, sizeof source, "the default of %s",
		    opt->flag != NULL ? opt->flag : opt->env);
		if (config_set(opt, cfg, opt->def, source, err) < 0)
			return -1;
		if (opt->type == CONFIG_LIST)
			((struct config_list *)target(opt, cfg))->defaulted = 1;
	}
	return 0;
}

int
config_environment(const struct config_option *opts, size_t nopts,
    void *cfg, struct error *err)
{
	for (size_t i = 0; i < nopts; i++) {
		const char *v;

		if (opts[i].env == NULL || (v = getenv(opts[i].env)) == NULL)
			continue;
		if (config_set(&opts[i], cfg, v, opts[i].env, err) < 0)
			return -1;
	}
	return 0;
}

const struct config_option *
config_find_env(const struct config_option *opts, size_t nopts,
    const char *env)
{
	for (size_t i = 0; i < nopts; i++) {
		if (opts[i].env != NULL && strcmp(opts[i].env, env) == 0)
			return &opts[i];
	}
	return NULL;
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
config_flags(const struct config_option *opts, size_t nopts, void *cfg,
    int argc, char **argv, int *help, int *version, struct error *err)
{
	*help = *version = 0;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *eq, *value;
		const struct config_option *opt;
		char source[128];
		size_t len;

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
		len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
		opt = find_flag(opts, nopts, arg, len);
		if (opt == NULL) {
			error_set(err, 400, "unknown option '%.*s' (see --help)",
			    (int)len, arg);
			return -1;
		}
		if (opt->type == CONFIG_FLAG && eq == NULL) {
			*(int *)target(opt, cfg) = 1;
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
		snprintf(source, sizeof source, "option %s", opt->flag);
		if (config_set(opt, cfg, value, source, err) < 0)
			return -1;
	}
	return 0;
}

int
config_parse(const struct config_option *opts, size_t nopts, void *cfg,
    int argc, char **argv, int *help, int *version, struct error *err)
{
	*help = *version = 0;
	if (config_defaults(opts, nopts, cfg, err) < 0 ||
	    config_environment(opts, nopts, cfg, err) < 0)
		return -1;
	return config_flags(opts, nopts, cfg, argc, argv, help, version, err);
}

void
config_free(const struct config_option *opts, size_t nopts, void *cfg)
{
	for (size_t i = 0; i < nopts; i++) {
		void *to = target(&opts[i], cfg);

		if (opts[i].type == CONFIG_STRING || opts[i].type == CONFIG_CHOICE)
			replace(&opts[i], to, NULL);
		else if (opts[i].type == CONFIG_LIST)
			config_list_free(to);
	}
}

/* One option's help, then its default, bounds and choices from the
 * table. */
static void
usage_line(FILE *f, const char *left, const struct config_option *opt)
{
	const char *sep = " (";
	char text[256];

	fprintf(f, "  %-28s %s", left, opt->help);
	if (opt->def != NULL) {
		fprintf(f, "%sdefault %s", sep, opt->def);
		sep = "; ";
	}
	if (opt->min != opt->max) {
		range_text(opt, text, sizeof text);
		fprintf(f, "%s%s", sep, text);
		sep = "; ";
	}
	if (opt->choices != NULL) {
		choices_text(opt, text, sizeof text);
		fprintf(f, "%sone of %s", sep, text);
		sep = "; ";
	}
	if (sep[0] == ';')
		fputc(')', f);
	if (opt->flag != NULL && opt->env != NULL)
		fprintf(f, " [env %s]", opt->env);
	fputc('\n', f);
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
		usage_line(f, left, &opts[i]);
	}
	fprintf(f, "  %-28s %s\n  %-28s %s\n", "--help", "show this help",
	    "--version", "show the version");
	fprintf(f, "\nEnvironment only:\n");
	for (size_t i = 0; i < nopts; i++) {
		if (opts[i].flag == NULL && opts[i].env != NULL)
			usage_line(f, opts[i].env, &opts[i]);
	}
}
