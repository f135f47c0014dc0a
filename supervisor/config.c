/*
 * sandboxd's configuration: the table of config_table.c read from the
 * environment, then a .env file in the working directory, then --config
 * FILE, then the flags, each later source overriding the earlier ones
 * (config.h applies the defaults and bounds), and checked once at start for
 * what a table cannot say, so that a bad value stops us with a message
 * naming its key.
 */
#include "sandboxd.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "egress.h"
#include "log.h"
#include "oss.h"
#include "shared.h"
#include "xmalloc.h"

#define NOPTIONS	sandboxd_noptions

static const char synopsis[] =
    "usage: sandboxd [--config FILE] [--host H] [--port P] [options]\n"
    "\n"
    "The sandbox supervisor: creates, pools, watches and fronts sandbox\n"
    "containers, through the Docker Engine API or with crun directly, with\n"
    "the AgentScope manager routes and our /v1 REST routes. Options come\n"
    "from the environment, a .env file in the working directory, --config\n"
    "FILE and the flags, each overriding the ones before.";

void
sandboxd_config_usage(FILE *f)
{
	config_usage(f, synopsis, sandboxd_options, NOPTIONS);
}

int
sandboxd_parse_port_range(const char *s, int *lo, int *hi)
{
	long a, b;
	char *end;

	while (isspace((unsigned char)*s) || *s == '[' || *s == '(')
		s++;
	errno = 0;
	a = strtol(s, &end, 10);
	if (end == s || errno != 0)
		return -1;
	s = end;
	while (isspace((unsigned char)*s))
		s++;
	if (*s != ',' && *s != '-' && *s != ':')
		return -1;
	s++;
	b = strtol(s, &end, 10);
	if (end == s || errno != 0)
		return -1;
	s = end;
	while (isspace((unsigned char)*s) || *s == ']' || *s == ')')
		s++;
	if (*s != '\0' || a < 1024 || b > 65535 || a >= b)
		return -1;
	*lo = (int)a;
	*hi = (int)b;
	return 0;
}

static void
add_ro_mount(struct sandboxd_config *c, const char *host, const char *cont)
{
	c->ro_mounts = xreallocarray(c->ro_mounts, c->nro_mounts + 1,
	    sizeof *c->ro_mounts);
	c->ro_mounts[c->nro_mounts].host = xstrdup(host);
	c->ro_mounts[c->nro_mounts].container = xstrdup(cont);
	c->nro_mounts++;
}

/* READONLY_MOUNTS: {"host": "container", ...} or host:container,... */
static int
parse_ro_mounts(struct sandboxd_config *c, struct error *err)
{
	const char *s = c->readonly_mounts;
	struct config_list parts = { 0 };

	while (isspace((unsigned char)*s))
		s++;
	if (*s == '{') {
		json_error_t jerr;
		json_t *obj = json_loads(s, 0, &jerr), *v;
		const char *k;

		if (obj == NULL || !json_is_object(obj)) {
			error_set(err, 400, "READONLY_MOUNTS: not a JSON object "
			    "of host path to container path (%s)", jerr.text);
			json_decref(obj);
			return -1;
		}
		json_object_foreach(obj, k, v) {
			if (!json_is_string(v)) {
				error_set(err, 400, "READONLY_MOUNTS: the container "
				    "path of %s must be a string", k);
				json_decref(obj);
				return -1;
			}
			add_ro_mount(c, k, json_string_value(v));
		}
		json_decref(obj);
	} else {
		config_list_split(s, &parts);
		for (size_t i = 0; i < parts.n; i++) {
			char *colon = strchr(parts.v[i], ':');

			if (colon == NULL) {
				error_set(err, 400, "READONLY_MOUNTS: '%s' is not "
				    "host:container", parts.v[i]);
				config_list_free(&parts);
				return -1;
			}
			*colon = '\0';
			add_ro_mount(c, config_trim(parts.v[i]), config_trim(colon + 1));
		}
		config_list_free(&parts);
	}
	for (size_t i = 0; i < c->nro_mounts; i++) {
		struct ro_mount *m = &c->ro_mounts[i];

		if (m->host[0] != '/' || m->container[0] != '/') {
			error_set(err, 400, "READONLY_MOUNTS: %s -> %s: both "
			    "paths must be absolute", m->host, m->container);
			return -1;
		}
		if (access(m->host, F_OK) != 0) {
			error_set(err, 400, "READONLY_MOUNTS: %s does not exist",
			    m->host);
			return -1;
		}
		if (strchr(m->host, ':') != NULL ||
		    strchr(m->container, ':') != NULL) {
			error_set(err, 400, "READONLY_MOUNTS: %s -> %s: paths "
			    "may not contain ':'", m->host, m->container);
			return -1;
		}
	}
	return 0;
}


/* Make dir (if missing) and replace *dir with its canonical path. */
static int
canonical_dir(char **dir, const char *key, mode_t mode, struct error *err)
{
	char *real;

	if (sandboxd_mkdirs(*dir, 0, mode) < 0) {
		error_set_errno(err, 400, errno, "%s: cannot create %s", key,
		    *dir);
		return -1;
	}
	real = realpath(*dir, NULL);
	if (real == NULL) {
		error_set_errno(err, 400, errno, "%s: %s", key, *dir);
		return -1;
	}
	free(*dir);
	*dir = real;
	return 0;
}

static char *
default_state_dir(void)
{
	const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");

	if (geteuid() == 0)
		return xstrdup("/var/lib/sandboxd");
	if (xdg != NULL && xdg[0] == '/')
		return xasprintf("%s/sandboxd", xdg);
	if (home != NULL && home[0] == '/')
		return xasprintf("%s/.local/state/sandboxd", home);
	return xstrdup("/tmp/sandboxd");
}

static int
valid_name_prefix(const char *s)
{
	if (!isalnum((unsigned char)s[0]))
		return 0;
	for (; *s != '\0'; s++) {
		if (!isalnum((unsigned char)*s) && *s != '_' && *s != '.' &&
		    *s != '-')
			return 0;
	}
	return 1;
}

static void
free_ro_mounts(struct sandboxd_config *c)
{
	for (size_t i = 0; i < c->nro_mounts; i++) {
		free(c->ro_mounts[i].host);
		free(c->ro_mounts[i].container);
	}
	free(c->ro_mounts);
	c->ro_mounts = NULL;
	c->nro_mounts = 0;
}

/* Names and addresses, in forms the table does not know. */
static int
check_forms(struct sandboxd_config *c, struct error *err)
{
	size_t n;

	if (c->workers > 1)
		log_warn("WORKERS=%ld: sandboxd serves everything from one event "
		    "loop; the value is ignored", c->workers);
	if (!valid_name_prefix(c->prefix) || strlen(c->prefix) > 64) {
		error_set(err, 400, "CONTAINER_PREFIX_KEY: '%s' is not a valid "
		    "container name prefix ([a-zA-Z0-9][a-zA-Z0-9_.-]*)",
		    c->prefix);
		return -1;
	}
	if (backend_check_kind(c->deployment, err) < 0)
		return -1;
	if (sandboxd_parse_port_range(c->port_range, &c->port_lo,
	    &c->port_hi) < 0) {
		error_set(err, 400, "PORT_RANGE: '%s' is not LO,HI with 1024 <= "
		    "LO < HI <= 65535", c->port_range);
		return -1;
	}
	if (strncmp(c->docker_host, "unix://", 7) != 0 ||
	    c->docker_host[7] != '/') {
		error_set(err, 400, "DOCKER_HOST: '%s' is not unix:///path (only "
		    "the Docker daemon's unix socket is supported)",
		    c->docker_host);
		return -1;
	}
	if (c->advertise_addr != NULL && (strchr(c->advertise_addr, ':') !=
	    NULL || strspn(c->advertise_addr, "0123456789.") !=
	    strlen(c->advertise_addr))) {
		error_set(err, 400, "SANDBOXD_ADVERTISE_ADDR: '%s' is not a "
		    "numeric IPv4 address", c->advertise_addr);
		return -1;
	}
	if (c->public_url == NULL)
		return 0;
	if (strncmp(c->public_url, "http://", 7) != 0 &&
	    strncmp(c->public_url, "https://", 8) != 0) {
		error_set(err, 400, "SANDBOXD_PUBLIC_URL: '%s' is not an "
		    "http(s) URL", c->public_url);
		return -1;
	}
	n = strlen(c->public_url);
	while (n > 0 && c->public_url[n - 1] == '/')
		c->public_url[--n] = '\0';
	return 0;
}

/* The types of the warm pools and E2B's templates: known ones (the
 * registry is loaded first). */
static int
check_types(struct sandboxd_config *c, struct error *err)
{
	config_list_free(&c->pool_types);
	config_list_split(c->default_type, &c->pool_types);
	if (c->pool_types.n == 0) {
		error_set(err, 400, "DEFAULT_SANDBOX_TYPE: no type given");
		return -1;
	}
	for (size_t i = 0; i < c->pool_types.n; i++) {
		if (sandbox_types_find(c->pool_types.v[i]) == NULL) {
			error_set(err, 400, "DEFAULT_SANDBOX_TYPE: unknown sandbox "
			    "type '%s'", c->pool_types.v[i]);
			return -1;
		}
	}
	config_list_free(&c->e2b_aliases);
	if (c->e2b_templates != NULL)
		config_list_split(c->e2b_templates, &c->e2b_aliases);
	for (size_t i = 0; i < c->e2b_aliases.n; i++) {
		const char *a = c->e2b_aliases.v[i], *eq = strchr(a, '=');

		if (eq == NULL || eq == a || eq[1] == '\0') {
			error_set(err, 400, "SANDBOXD_E2B_TEMPLATES: '%s' is not "
			    "template=type", a);
			return -1;
		}
		if (sandbox_types_find(eq + 1) == NULL) {
			error_set(err, 400, "SANDBOXD_E2B_TEMPLATES: unknown "
			    "sandbox type '%s'", eq + 1);
			return -1;
		}
	}
	return 0;
}

/* SANDBOXD_ALLOWED_MOUNT_DIRS on top of DEFAULT_MOUNT_DIR, canonical. */
static int
allowed_mounts(struct sandboxd_config *c, struct error *err)
{
	struct config_list dirs = { 0 };

	config_list_free(&c->allowed_mounts);
	config_list_add(&c->allowed_mounts, c->mount_dir);
	if (c->allowed_mount_dirs != NULL)
		config_list_split(c->allowed_mount_dirs, &dirs);
	for (size_t i = 0; i < dirs.n; i++) {
		char *real = realpath(dirs.v[i], NULL);

		if (real == NULL || dirs.v[i][0] != '/') {
			error_set(err, 400, "SANDBOXD_ALLOWED_MOUNT_DIRS: '%s' is "
			    "not an existing absolute directory", dirs.v[i]);
			free(real);
			config_list_free(&dirs);
			return -1;
		}
		config_list_add(&c->allowed_mounts, real);
		free(real);
	}
	config_list_free(&dirs);
	return 0;
}

/* The directories, made where missing, and what may be mounted. */
static int
check_dirs(struct sandboxd_config *c, struct error *err)
{
	if (c->state_dir == NULL)
		c->state_dir = default_state_dir();
	if (canonical_dir(&c->state_dir, "SANDBOXD_STATE_DIR", 0700, err) < 0)
		return -1;
	if (c->mount_dir == NULL)
		c->mount_dir = xasprintf("%s/workspaces", c->state_dir);
	if (canonical_dir(&c->mount_dir, "DEFAULT_MOUNT_DIR", 0755, err) < 0)
		return -1;
	/* With oss, STORAGE_FOLDER is taken as a place in the bucket. */
	if (oss_config_validate(c, err) < 0)
		return -1;
	if (c->storage_folder != NULL && canonical_dir(&c->storage_folder,
	    "STORAGE_FOLDER", 0755, err) < 0)
		return -1;
	if (allowed_mounts(c, err) < 0)
		return -1;
	free_ro_mounts(c);
	return c->readonly_mounts != NULL ? parse_ro_mounts(c, err) : 0;
}

static int
validate(struct sandboxd_config *c, struct error *err)
{
	if (check_forms(c, err) < 0 || check_types(c, err) < 0)
		return -1;
	if (c->redis_enabled && shared_secret_load(c, err) < 0)
		return -1;
	if (egress_config_check(c, err) < 0)
		return -1;
	return check_dirs(c, err);
}

/* --config's value, looked for before anything else is parsed. */
static const char *
find_config_flag(int argc, char **argv)
{
	const char *found = NULL;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			found = argv[++i];
		else if (strncmp(argv[i], "--config=", 9) == 0)
			found = argv[i] + 9;
	}
	return found;
}

int
sandboxd_config_load(struct sandboxd_config *cfg, int argc, char **argv,
    int *help, int *version, struct error *err)
{
	const char *file = find_config_flag(argc, argv);

	memset(cfg, 0, sizeof *cfg);
	*help = *version = 0;
	if (config_defaults(sandboxd_options, NOPTIONS, cfg, err) < 0 ||
	    config_environment(sandboxd_options, NOPTIONS, cfg, err) < 0)
		return -1;
	if (access(".env", F_OK) == 0 && config_file(sandboxd_options,
	    NOPTIONS, cfg, ".env", 0, err) < 0)
		return -1;
	if (file != NULL && config_file(sandboxd_options, NOPTIONS, cfg, file,
	    1, err) < 0)
		return -1;
	if (config_flags(sandboxd_options, NOPTIONS, cfg, argc, argv, help,
	    version, err) < 0)
		return -1;
	if (*help || *version)
		return 0;
	sandbox_types_init(cfg->registry, cfg->image_namespace, cfg->image_tag);
	if (cfg->types_file != NULL && sandbox_types_load_file(cfg->types_file,
	    cfg->registry, cfg->image_namespace, cfg->image_tag, err) < 0)
		return -1;
	return validate(cfg, err);
}

void
sandboxd_config_free(struct sandboxd_config *c)
{
	config_free(sandboxd_options, NOPTIONS, c);
	config_list_free(&c->pool_types);
	config_list_free(&c->allowed_mounts);
	config_list_free(&c->e2b_aliases);
	free_ro_mounts(c);
}

char *
sandboxd_base_url(const struct sandboxd_config *cfg)
{
	const char *host = cfg->host;

	if (cfg->public_url != NULL)
		return xstrdup(cfg->public_url);
	if (strcmp(host, "0.0.0.0") == 0)
		host = "127.0.0.1";
	if (strchr(host, ':') != NULL)
		return xasprintf("http://[%s]:%ld", strcmp(host, "::") == 0 ?
		    "::1" : host, cfg->port);
	return xasprintf("http://%s:%ld", host, cfg->port);
}
