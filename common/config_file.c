/*
 * KEY=VALUE files in .env syntax, keyed by the options' environment names:
 * blank lines and # comments skipped, "export " taken off, a value in
 * single or double quotes taken as it is between them, an unquoted one
 * trimmed and cut at " #".
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* The value part of KEY=VALUE: quotes removed, or an unquoted value with a
 * trailing " # comment" dropped. */
static int
file_value(char *v, char **out)
{
	size_t len;

	v = config_trim(v);
	len = strlen(v);
	if (len > 0 && (v[0] == '"' || v[0] == '\'')) {
		char *close = strrchr(v + 1, v[0]);

		if (close == NULL)
			return -1;
		*close = '\0';
		*out = v + 1;
		return 0;
	}
	for (char *p = v; *p != '\0'; p++) {
		if (*p == '#' && p > v && isspace((unsigned char)p[-1])) {
			*p = '\0';
			break;
		}
	}
	*out = config_trim(v);
	return 0;
}

/* One line; 1 for a line that sets nothing (blank, comment, an unknown
 * key not strict). */
static int
file_line(const struct config_option *opts, size_t nopts, void *cfg,
    char *line, const char *where, int strict, struct error *err)
{
	const struct config_option *opt;
	char *key, *eq, *value, source[PATH_MAX + 96];

	key = config_trim(line);
	if (*key == '\0' || *key == '#')
		return 1;
	if (strncmp(key, "export ", 7) == 0)
		key = config_trim(key + 7);
	eq = strchr(key, '=');
	if (eq == NULL) {
		error_set(err, 400, "%s: expected KEY=VALUE", where);
		return -1;
	}
	*eq = '\0';
	key = config_trim(key);
	if (file_value(eq + 1, &value) < 0) {
		error_set(err, 400, "%s: %s: unterminated quote", where, key);
		return -1;
	}
	opt = config_find_env(opts, nopts, key);
	if (opt == NULL && strict) {
		error_set(err, 400, "%s: unknown key %s (see --help)", where,
		    key);
		return -1;
	}
	if (opt == NULL) {
		log_warn("%s: ignoring unknown key %s", where, key);
		return 1;
	}
	snprintf(source, sizeof source, "%s: %s", where, key);
	return config_set(opt, cfg, value, source, err);
}

int
config_file(const struct config_option *opts, size_t nopts, void *cfg,
    const char *path, int strict, struct error *err)
{
	char *line = NULL, where[PATH_MAX + 32];
	size_t cap = 0;
	int lineno = 0, rc = 0;
	FILE *f;

	f = fopen(path, "re");
	if (f == NULL) {
		error_set_errno(err, 400, errno, "cannot read config file %s",
		    path);
		return -1;
	}
	while (rc == 0 && getline(&line, &cap, f) >= 0) {
		snprintf(where, sizeof where, "%s:%d", path, ++lineno);
		if (file_line(opts, nopts, cfg, line, where, strict, err) < 0)
			rc = -1;
	}
	free(line);
	fclose(f);
	return rc;
}
