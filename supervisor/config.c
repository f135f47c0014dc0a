/*
 * sandboxd's configuration: the keys of the AgentScope manager (HOST, PORT,
 * POOL_SIZE ...) and a few of our own, read from the environment, then a .env
 * file in the working directory, then --config FILE, then the flags, each
 * later source overriding the earlier ones, and validated once at start so a
 * bad value stops us with a message naming its key.
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

#define C(field) (&cfg_target.field)

/* The options table needs fixed addresses; config is loaded into this and
 * copied out (there is one configuration per process). */
static struct sandboxd_config cfg_target;

static const struct config_option options[] = {
	{ "--config", NULL, CONFIG_STRING, C(config_file), "FILE",
	    "KEY=VALUE file applied after the environment and ./.env" },
	{ "--host", "HOST", CONFIG_STRING, C(host), "HOST",
	    "address to listen on (default 127.0.0.1)" },
	{ "--port", "PORT", CONFIG_INT, C(port), "PORT",
	    "port to listen on (default 8000)" },
	{ "--unix-socket", "SANDBOXD_UNIX_SOCKET", CONFIG_STRING,
	    C(unix_socket), "PATH", "also listen on this unix socket" },
	{ "--workers", "WORKERS", CONFIG_INT, C(workers), "N",
	    "accepted for compatibility; sandboxd runs one event loop" },
	{ "--debug", "DEBUG", CONFIG_BOOL, C(debug), "BOOL",
	    "debug logging" },
	{ "--bearer-token", "BEARER_TOKEN", CONFIG_STRING, C(bearer_token),
	    "TOKEN", "token every route but /health requires (default: none)" },
	{ "--default-sandbox-type", "DEFAULT_SANDBOX_TYPE", CONFIG_STRING,
	    C(default_type), "TYPES",
	    "type(s) of the warm pools, comma separated (default base)" },
	{ "--pool-size", "POOL_SIZE", CONFIG_INT, C(pool_size), "N",
	    "ready sandboxes kept per pool type (default 1)" },
	{ "--auto-cleanup", "AUTO_CLEANUP", CONFIG_BOOL, C(auto_cleanup),
	    "BOOL", "remove every sandbox at shutdown (default true)" },
	{ "--container-prefix", "CONTAINER_PREFIX_KEY", CONFIG_STRING,
	    C(prefix), "PREFIX", "container name prefix (default sandboxd-)" },
	{ "--container-deployment", "CONTAINER_DEPLOYMENT", CONFIG_STRING,
	    C(deployment), "KIND", "backend: docker (the Docker Engine API, "
	    "the default) or crun (sandboxd runs them with crun, no daemon)" },
	{ "--mount-dir", "DEFAULT_MOUNT_DIR", CONFIG_STRING, C(mount_dir),
	    "DIR", "where workspaces are made (default STATE_DIR/workspaces)" },
	{ "--readonly-mounts", "READONLY_MOUNTS", CONFIG_STRING,
	    C(readonly_mounts), "MAP", "host:container,... or a JSON object, "
	    "mounted read-only in every sandbox" },
	{ "--storage-folder", "STORAGE_FOLDER", CONFIG_STRING,
	    C(storage_folder), "DIR", "keep released workspaces here (with "
	    "FILE_SYSTEM=oss: a key prefix in the bucket)" },
	{ NULL, "FILE_SYSTEM", CONFIG_STRING, C(file_system), NULL,
	    "where released workspaces are kept: local (STORAGE_FOLDER) or oss "
	    "(an S3-compatible object store, the OSS_* keys; default local)" },
	{ NULL, "OSS_ENDPOINT", CONFIG_STRING, C(oss_endpoint), NULL,
	    "the object store: http[s]://host[:port]" },
	{ NULL, "OSS_ACCESS_KEY_ID", CONFIG_STRING, C(oss_access_key_id), NULL,
	    "its access key id" },
	{ NULL, "OSS_ACCESS_KEY_SECRET", CONFIG_STRING,
	    C(oss_access_key_secret), NULL, "its secret key (never logged)" },
	{ NULL, "OSS_BUCKET_NAME", CONFIG_STRING, C(oss_bucket), NULL,
	    "the bucket workspaces go to" },
	{ "--oss-region", "OSS_REGION", CONFIG_STRING, C(oss_region), "REGION",
	    "the region requests are signed for (default us-east-1)" },
	{ "--oss-addressing-style", "OSS_ADDRESSING_STYLE", CONFIG_STRING,
	    C(oss_addressing), "STYLE", "path (host/bucket/key), virtual "
	    "(bucket.host/key) or auto: virtual for *.amazonaws.com and "
	    "*.aliyuncs.com, else path (default auto)" },
	{ "--oss-parallel", "OSS_PARALLEL", CONFIG_INT, C(oss_parallel), "N",
	    "files of one workspace transferred at once (default 8)" },
	{ "--port-range", "PORT_RANGE", CONFIG_STRING, C(port_range), "LO,HI",
	    "host ports of bridge sandboxes (default 49152,59152)" },
	{ "--redis-enabled", "REDIS_ENABLED", CONFIG_BOOL, C(redis_enabled),
	    "BOOL", "share sandboxes, sessions and pools with the other "
	    "sandboxd on the same Redis (default false)" },
	{ "--redis-server", "REDIS_SERVER", CONFIG_STRING, C(redis_server),
	    "HOST", "Redis host (numeric address or name), or unix:/path "
	    "(default 127.0.0.1)" },
	{ "--redis-port", "REDIS_PORT", CONFIG_INT, C(redis_port), "PORT",
	    "Redis port (default 6379)" },
	{ "--redis-db", "REDIS_DB", CONFIG_INT, C(redis_db), "N",
	    "Redis database number (default 0)" },
	{ "--redis-user", "REDIS_USER", CONFIG_STRING, C(redis_user), "USER",
	    "Redis 6 ACL user (default: none, AUTH with the password only)" },
	{ "--redis-password", "REDIS_PASSWORD", CONFIG_STRING,
	    C(redis_password), "PASSWORD", "Redis password (default none)" },
	{ "--redis-prefix", "SANDBOXD_REDIS_PREFIX", CONFIG_STRING,
	    C(redis_prefix), "PREFIX", "every key sandboxd writes starts with "
	    "this (default sandboxd:)" },
	{ "--redis-container-pool-key", "REDIS_CONTAINER_POOL_KEY",
	    CONFIG_STRING, C(redis_pool_key), "KEY", "warm-pool lists, one per "
	    "type: PREFIX KEY:<type> (default container_pool)" },
	{ "--redis-port-key", "REDIS_PORT_KEY", CONFIG_STRING,
	    C(redis_port_key), "KEY", "set of occupied host ports: PREFIX "
	    "KEY:<advertised address> (default occupied_ports)" },
	{ "--advertise-addr", "SANDBOXD_ADVERTISE_ADDR", CONFIG_STRING,
	    C(advertise_addr), "ADDR", "with Redis on several hosts: the "
	    "numeric address of this host the other instances reach; bridge "
	    "sandboxes publish their agent port on it, network-none ones are "
	    "reached through our API on it (default: none, the instances "
	    "share one host)" },
	{ NULL, "SANDBOXD_REDIS_SECRET", CONFIG_STRING, C(redis_secret),
	    NULL, "with Redis: the secret every instance signs what it "
	    "writes there and seals tokens with (not on the command line; "
	    "at least 32 characters; required)" },
	{ "--redis-secret-file", "SANDBOXD_REDIS_SECRET_FILE", CONFIG_STRING,
	    C(redis_secret_file), "FILE", "with Redis: SANDBOXD_REDIS_SECRET "
	    "read from FILE's first line" },
	{ "--redis-lease", "SANDBOXD_REDIS_LEASE", CONFIG_DOUBLE,
	    C(redis_lease), "SECONDS", "with Redis: each instance renews a "
	    "lease of this length every second; without it, its warm "
	    "sandboxes are not handed out (default 15, at least 2)" },
	{ "--redis-dead-grace", "SANDBOXD_REDIS_DEAD_GRACE", CONFIG_DOUBLE,
	    C(redis_dead_grace), "SECONDS", "with Redis: this long after an "
	    "instance's lease lapsed, its records are removed from Redis "
	    "(default 120)" },
	{ "--max-sandbox-instances", "MAX_SANDBOX_INSTANCES", CONFIG_INT,
	    C(max_instances), "N", "cap on live sandboxes (default 0: none)" },
	{ "--heartbeat-timeout", "HEARTBEAT_TIMEOUT", CONFIG_DOUBLE,
	    C(heartbeat_timeout), "SECONDS",
	    "release a session's sandboxes after this idle time (default 300; "
	    "0: never)" },
	{ NULL, "K8S_NAMESPACE", CONFIG_STRING, C(k8s_namespace), NULL,
	    "accepted, for CONTAINER_DEPLOYMENT=k8s (not supported yet)" },
	{ NULL, "KUBECONFIG_PATH", CONFIG_STRING, C(kubeconfig), NULL,
	    "accepted, for CONTAINER_DEPLOYMENT=k8s (not supported yet)" },
	{ NULL, "RUNTIME_SANDBOX_REGISTRY", CONFIG_STRING, C(registry), NULL,
	    "image registry (default none)" },
	{ NULL, "RUNTIME_SANDBOX_IMAGE_NAMESPACE", CONFIG_STRING,
	    C(image_namespace), NULL, "image namespace (default agentscope)" },
	{ NULL, "RUNTIME_SANDBOX_IMAGE_TAG", CONFIG_STRING, C(image_tag), NULL,
	    "image tag (default latest)" },
	{ "--state-dir", "SANDBOXD_STATE_DIR", CONFIG_STRING, C(state_dir),
	    "DIR", "state file, sockets, default workspaces (default "
	    "/var/lib/sandboxd as root, else $XDG_STATE_HOME/sandboxd)" },
	{ "--types", "SANDBOXD_TYPES", CONFIG_STRING, C(types_file), "FILE",
	    "JSON file of more sandbox types {\"types\": {name: {...}}}" },
	{ "--docker-host", "DOCKER_HOST", CONFIG_STRING, C(docker_host), "ADDR",
	    "unix:///var/run/docker.sock (the default)" },
	{ "--image-store", "SANDBOXD_IMAGE_STORE", CONFIG_STRING,
	    C(image_store), "DIR", "crun: the image store tools/image-store "
	    "fills (default /var/lib/sandboxd/images)" },
	{ "--crun", "SANDBOXD_CRUN", CONFIG_STRING, C(crun_bin), "PATH",
	    "crun: the crun program (default: crun on the PATH)" },
	{ "--cni-path", "SANDBOXD_CNI_PATH", CONFIG_STRING, C(cni_path), "DIR",
	    "crun: the CNI plugins (default /usr/lib/cni, Debian's)" },
	{ "--bridge", "SANDBOXD_BRIDGE", CONFIG_STRING, C(bridge), "NAME",
	    "crun: the host bridge of bridge types (default sandboxd0)" },
	{ "--bridge-subnet", "SANDBOXD_BRIDGE_SUBNET", CONFIG_STRING,
	    C(bridge_subnet), "CIDR", "crun: addresses of bridge sandboxes "
	    "(default 10.89.0.0/16)" },
	{ "--bridge-gateway", "SANDBOXD_BRIDGE_GATEWAY", CONFIG_STRING,
	    C(bridge_gateway), "ADDR", "crun: a router on the bridge that "
	    "bridge sandboxes go out through instead of this host, which "
	    "then gives the bridge no address and no NAT (default: none)" },
	{ "--crun-parallel", "SANDBOXD_CRUN_PARALLEL", CONFIG_INT,
	    C(crun_parallel), "N", "crun: crun and CNI calls at once; more "
	    "wait their turn, removals first (default 0: twice the CPUs)" },
	{ "--create-timeout", "SANDBOXD_CREATE_TIMEOUT", CONFIG_DOUBLE,
	    C(create_timeout), "SECONDS",
	    "a new sandbox's agent must answer within this (default 60)" },
	{ "--health-interval", "SANDBOXD_HEALTH_INTERVAL", CONFIG_DOUBLE,
	    C(health_interval), "SECONDS", "between health checks (default 10)" },
	{ "--proxy-timeout", "SANDBOXD_PROXY_TIMEOUT", CONFIG_DOUBLE,
	    C(proxy_timeout), "SECONDS",
	    "an agent call may make no progress this long (default 3600)" },
	{ "--allowed-mount-dirs", "SANDBOXD_ALLOWED_MOUNT_DIRS", CONFIG_STRING,
	    C(allowed_mount_dirs), "DIRS",
	    "roots a caller's mount_dir may lie in, comma separated (default: "
	    "DEFAULT_MOUNT_DIR only)" },
	{ "--public-url", "SANDBOXD_PUBLIC_URL", CONFIG_STRING, C(public_url),
	    "URL", "how clients reach sandboxd, for sandbox urls (default "
	    "http://HOST:PORT)" },
	{ "--pool-parallel", "SANDBOXD_POOL_PARALLEL", CONFIG_INT,
	    C(pool_parallel), "N", "concurrent creates per pool (default 2)" },
	{ "--docker-parallel", "SANDBOXD_DOCKER_PARALLEL", CONFIG_INT,
	    C(docker_parallel), "N", "Docker Engine API calls at once; more "
	    "wait their turn (default 8)" },
	{ "--remove-parallel", "SANDBOXD_REMOVE_PARALLEL", CONFIG_INT,
	    C(remove_parallel), "N", "of those, calls that stop or remove a "
	    "container (default 0: all of them, but one at a time on a Docker "
	    "before 20.10.27, which can deadlock when two containers exit at "
	    "once)" },
	{ "--shutdown-parallel", "SANDBOXD_SHUTDOWN_PARALLEL", CONFIG_INT,
	    C(shutdown_parallel), "N", "removals at once while shutdown "
	    "removes every sandbox (AUTO_CLEANUP; default 0: 32, but one at a "
	    "time on a Docker before 20.10.27)" },
	{ "--shutdown-timeout", "SANDBOXD_SHUTDOWN_TIMEOUT", CONFIG_DOUBLE,
	    C(shutdown_timeout), "SECONDS", "how long shutdown removes "
	    "sandboxes before it exits leaving the rest for the next start "
	    "(AUTO_CLEANUP; default 80: under systemd's 90 s stop timeout)" },
	{ "--network", "SANDBOXD_NETWORK", CONFIG_STRING, C(network), "NAME",
	    "the engine's network sandboxes of a bridge type join (default: "
	    "Docker's bridge)" },
	{ "--egress-dns", "SANDBOXD_EGRESS_DNS", CONFIG_STRING, C(egress_dns),
	    "ADDRS", "name servers sandboxes' resolvers ask, ADDR[:PORT] comma "
	    "separated (default: those of /etc/resolv.conf)" },
	{ "--egress-allow", "SANDBOXD_EGRESS_ALLOW", CONFIG_STRING,
	    C(egress_allow), "LIST", "CIDRs and names every sandbox with a "
	    "network may reach, private ones too (default none)" },
	{ "--egress-deny", "SANDBOXD_EGRESS_DENY", CONFIG_STRING,
	    C(egress_deny), "LIST", "CIDRs no sandbox may reach, on top of the "
	    "private and reserved ranges; names no resolver answers" },
	{ "--log-level", "SANDBOXD_LOG_LEVEL", CONFIG_STRING, C(log_level),
	    "LEVEL", "debug, info, warn or error (default info)" },
	{ "--access-log", "SANDBOXD_ACCESS_LOG", CONFIG_BOOL, C(access_log),
	    "BOOL", "log one line per request (default false)" },
	{ "--max-connections", "SANDBOXD_MAX_CONNECTIONS", CONFIG_INT,
	    C(max_connections), "N", "client connections open at once; more "
	    "get 503 (default 0: a quarter of the open-file limit, at most "
	    "1024)" },
	{ "--header-timeout", "SANDBOXD_HEADER_TIMEOUT", CONFIG_DOUBLE,
	    C(header_timeout), "SECONDS", "a request's whole head must come "
	    "within this of its first byte (default 30)" },
	{ "--body-min-rate", "SANDBOXD_BODY_MIN_RATE", CONFIG_SIZE,
	    C(body_min_rate), "SIZE", "bytes per second a request body must "
	    "average over each window, or it is cut (default 1K; 0: none)" },
	{ "--body-rate-window", "SANDBOXD_BODY_RATE_WINDOW", CONFIG_DOUBLE,
	    C(body_rate_window), "SECONDS", "the window of --body-min-rate "
	    "(default 30)" },
	{ "--e2b-templates", "SANDBOXD_E2B_TEMPLATES", CONFIG_STRING,
	    C(e2b_templates), "MAP", "E2B templates as sandbox types, "
	    "template=type,... on top of base=base, "
	    "code-interpreter-v1=code-interpreter, desktop=gui and every "
	    "type's own name" },
};
#define NOPTIONS (sizeof options / sizeof options[0])


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
	config_usage(f, synopsis, options, NOPTIONS);
}

static void
set_defaults(struct sandboxd_config *c)
{
	memset(c, 0, sizeof *c);
	c->port = 8000;
	c->workers = 1;
	c->pool_size = 1;
	c->auto_cleanup = 1;
	c->heartbeat_timeout = 300;
	c->create_timeout = 60;
	c->health_interval = 10;
	c->proxy_timeout = 3600;
	c->pool_parallel = 2;
	c->docker_parallel = 8;
	c->shutdown_timeout = 80;
	c->header_timeout = HTTP_DEFAULT_HEADER_TIMEOUT;
	c->body_min_rate = HTTP_DEFAULT_BODY_MIN_RATE;
	c->body_rate_window = HTTP_DEFAULT_BODY_RATE_WINDOW;
	c->redis_port = 6379;
	c->redis_lease = 15;
	c->redis_dead_grace = 120;
}

static const struct config_option *
option_by_env(const char *key)
{
	for (size_t i = 0; i < NOPTIONS; i++) {
		if (options[i].env != NULL && strcmp(options[i].env, key) == 0)
			return &options[i];
	}
	return NULL;
}

static char *
trim(char *s)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

/* The value part of KEY=VALUE: quotes removed, or an unquoted value with a
 * trailing " # comment" dropped. */
static int
file_value(char *v, char **out)
{
	size_t len;

	v = trim(v);
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
	*out = trim(v);
	return 0;
}

/* Apply a KEY=VALUE file (.env syntax) to cfg_target. strict: unknown keys
 * are errors (an explicit --config), else warnings (a .env may be shared
 * with other programs). */
static int
config_file(const char *path, int strict, struct error *err)
{
	char *line = NULL, source[PATH_MAX + 64];
	size_t cap = 0;
	int lineno = 0, rc = 0;
	FILE *f;

	f = fopen(path, "r");
	if (f == NULL) {
		error_set_errno(err, 400, errno, "cannot read config file %s",
		    path);
		return -1;
	}
	while (getline(&line, &cap, f) >= 0) {
		const struct config_option *opt;
		char *key, *eq, *value;

		lineno++;
		key = trim(line);
		if (*key == '\0' || *key == '#')
			continue;
		if (strncmp(key, "export ", 7) == 0)
			key = trim(key + 7);
		eq = strchr(key, '=');
		if (eq == NULL) {
			error_set(err, 400, "%s:%d: expected KEY=VALUE", path,
			    lineno);
			rc = -1;
			break;
		}
		*eq = '\0';
		key = trim(key);
		if (file_value(eq + 1, &value) < 0) {
			error_set(err, 400, "%s:%d: %s: unterminated quote", path,
			    lineno, key);
			rc = -1;
			break;
		}
		opt = option_by_env(key);
		if (opt == NULL) {
			if (strict) {
				error_set(err, 400, "%s:%d: unknown key %s (see "
				    "sandboxd --help)", path, lineno, key);
				rc = -1;
				break;
			}
			log_warn("%s:%d: ignoring unknown key %s", path, lineno,
			    key);
			continue;
		}
		snprintf(source, sizeof source, "%s:%d: %s", path, lineno, key);
		if (opt->type == CONFIG_FLAG || opt->type == CONFIG_BOOL) {
			if (config_parse_bool(value, opt->target) < 0) {
				error_set(err, 400, "%s: '%s' is not a boolean "
				    "(true or false)", source, value);
				rc = -1;
				break;
			}
			continue;
		}
		if (config_set(opt, value, source, err) < 0) {
			rc = -1;
			break;
		}
	}
	free(line);
	fclose(f);
	return rc;
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

void
sandboxd_split_list(const char *s, struct config_list *out)
{
	char *copy = xstrdup(s), *save = NULL;

	for (char *t = strtok_r(copy, ",", &save); t != NULL;
	    t = strtok_r(NULL, ",", &save)) {
		t = trim(t);
		if (*t != '\0')
			config_list_add(out, t);
	}
	free(copy);
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
		sandboxd_split_list(s, &parts);
		for (size_t i = 0; i < parts.n; i++) {
			char *colon = strchr(parts.v[i], ':');

			if (colon == NULL) {
				error_set(err, 400, "READONLY_MOUNTS: '%s' is not "
				    "host:container", parts.v[i]);
				config_list_free(&parts);
				return -1;
			}
			*colon = '\0';
			add_ro_mount(c, trim(parts.v[i]), trim(colon + 1));
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

/* The Redis settings (used with REDIS_ENABLED; checked always). */
static int
validate_redis(struct sandboxd_config *c, struct error *err)
{
	if (c->redis_server == NULL || c->redis_server[0] == '\0') {
		free(c->redis_server);
		c->redis_server = xstrdup("127.0.0.1");
	}
	if (c->redis_port < 1 || c->redis_port > 65535) {
		error_set(err, 400, "REDIS_PORT: %ld is not a port number",
		    c->redis_port);
		return -1;
	}
	if (c->redis_db < 0 || c->redis_db > 100000) {
		error_set(err, 400, "REDIS_DB: %ld is not a database number",
		    c->redis_db);
		return -1;
	}
	/* The lease is renewed every second: shorter would lapse on a
	 * busy loop's late tick. */
	if (!(c->redis_lease >= 2 && c->redis_lease <= 86400)) {
		error_set(err, 400, "SANDBOXD_REDIS_LEASE: %g is not between 2 "
		    "and 86400 seconds", c->redis_lease);
		return -1;
	}
	if (!(c->redis_dead_grace >= 0 && c->redis_dead_grace <= 30 * 86400)) {
		error_set(err, 400, "SANDBOXD_REDIS_DEAD_GRACE: %g is not between "
		    "0 and 2592000 seconds", c->redis_dead_grace);
		return -1;
	}
	if (c->redis_prefix == NULL)
		c->redis_prefix = xstrdup("sandboxd:");
	if (c->redis_pool_key == NULL || c->redis_pool_key[0] == '\0') {
		free(c->redis_pool_key);
		c->redis_pool_key = xstrdup("container_pool");
	}
	if (c->redis_port_key == NULL || c->redis_port_key[0] == '\0') {
		free(c->redis_port_key);
		c->redis_port_key = xstrdup("occupied_ports");
	}
	if (c->advertise_addr != NULL && c->advertise_addr[0] == '\0') {
		free(c->advertise_addr);
		c->advertise_addr = NULL;
	}
	if (c->advertise_addr != NULL && (strchr(c->advertise_addr, ':') !=
	    NULL || strspn(c->advertise_addr, "0123456789.") !=
	    strlen(c->advertise_addr))) {
		error_set(err, 400, "SANDBOXD_ADVERTISE_ADDR: '%s' is not a "
		    "numeric IPv4 address", c->advertise_addr);
		return -1;
	}
	return c->redis_enabled ? shared_secret_load(c, err) : 0;
}

int
sandboxd_config_validate(struct sandboxd_config *c, struct error *err)
{
	if (c->host == NULL)
		c->host = xstrdup("127.0.0.1");
	if (c->port < 0 || c->port > 65535) {
		error_set(err, 400, "PORT: %ld is not a port number", c->port);
		return -1;
	}
	if (c->workers < 1) {
		error_set(err, 400, "WORKERS: must be at least 1");
		return -1;
	}
	if (c->workers > 1)
		log_warn("WORKERS=%ld: sandboxd serves everything from one event "
		    "loop; the value is ignored", c->workers);
	if (c->bearer_token != NULL && c->bearer_token[0] == '\0') {
		free(c->bearer_token);
		c->bearer_token = NULL;
	}
	if (c->pool_size < 0 || c->pool_size > 1000) {
		error_set(err, 400, "POOL_SIZE: %ld is not between 0 and 1000",
		    c->pool_size);
		return -1;
	}
	if (c->prefix == NULL)
		c->prefix = xstrdup("sandboxd-");
	if (!valid_name_prefix(c->prefix) || strlen(c->prefix) > 64) {
		error_set(err, 400, "CONTAINER_PREFIX_KEY: '%s' is not a valid "
		    "container name prefix ([a-zA-Z0-9][a-zA-Z0-9_.-]*)",
		    c->prefix);
		return -1;
	}
	if (c->deployment == NULL)
		c->deployment = xstrdup("docker");
	if (backend_check_kind(c->deployment, err) < 0)
		return -1;
	if (validate_redis(c, err) < 0)
		return -1;
	if (c->port_range == NULL)
		c->port_range = xstrdup("49152,59152");
	if (sandboxd_parse_port_range(c->port_range, &c->port_lo,
	    &c->port_hi) < 0) {
		error_set(err, 400, "PORT_RANGE: '%s' is not LO,HI with 1024 <= "
		    "LO < HI <= 65535", c->port_range);
		return -1;
	}
	if (c->max_instances < 0) {
		error_set(err, 400, "MAX_SANDBOX_INSTANCES: must be 0 (no limit) "
		    "or more");
		return -1;
	}
	if (c->heartbeat_timeout < 0) {
		error_set(err, 400, "HEARTBEAT_TIMEOUT: must be 0 (never) or "
		    "more seconds");
		return -1;
	}
	if (!(c->create_timeout > 0)) {
		error_set(err, 400, "SANDBOXD_CREATE_TIMEOUT: must be positive");
		return -1;
	}
	if (!(c->health_interval > 0)) {
		error_set(err, 400, "SANDBOXD_HEALTH_INTERVAL: must be positive");
		return -1;
	}
	if (!(c->proxy_timeout > 0)) {
		error_set(err, 400, "SANDBOXD_PROXY_TIMEOUT: must be positive");
		return -1;
	}
	if (c->docker_parallel < 1 || c->docker_parallel > 1000) {
		error_set(err, 400, "SANDBOXD_DOCKER_PARALLEL: must be between 1 "
		    "and 1000");
		return -1;
	}
	if (c->remove_parallel < 0 || c->remove_parallel > 1000) {
		error_set(err, 400, "SANDBOXD_REMOVE_PARALLEL: must be between "
		    "0 (auto) and 1000");
		return -1;
	}
	if (c->shutdown_parallel < 0 || c->shutdown_parallel > 1000) {
		error_set(err, 400, "SANDBOXD_SHUTDOWN_PARALLEL: must be between "
		    "0 (auto) and 1000");
		return -1;
	}
	if (!(c->shutdown_timeout > 0)) {
		error_set(err, 400, "SANDBOXD_SHUTDOWN_TIMEOUT: must be "
		    "positive");
		return -1;
	}
	if (c->pool_parallel < 1) {
		error_set(err, 400, "SANDBOXD_POOL_PARALLEL: must be at least 1");
		return -1;
	}
	if (c->max_connections < 0) {
		error_set(err, 400, "SANDBOXD_MAX_CONNECTIONS: must be 0 (the "
		    "default) or more");
		return -1;
	}
	if (!(c->header_timeout > 0) || !(c->body_rate_window > 0)) {
		error_set(err, 400, "SANDBOXD_HEADER_TIMEOUT and "
		    "SANDBOXD_BODY_RATE_WINDOW: must be positive");
		return -1;
	}
	if (c->docker_host == NULL)
		c->docker_host = xstrdup("unix:///var/run/docker.sock");
	if (strncmp(c->docker_host, "unix://", 7) != 0 ||
	    c->docker_host[7] != '/') {
		error_set(err, 400, "DOCKER_HOST: '%s' is not unix:///path (only "
		    "the Docker daemon's unix socket is supported)",
		    c->docker_host);
		return -1;
	}
	if (egress_config_check(c, err) < 0)
		return -1;
	if (c->log_level != NULL) {
		enum log_level level;

		if (log_parse_level(c->log_level, &level) < 0) {
			error_set(err, 400, "SANDBOXD_LOG_LEVEL: unknown level "
			    "'%s'", c->log_level);
			return -1;
		}
	}
	if (c->default_type == NULL)
		c->default_type = xstrdup("base");
	config_list_free(&c->pool_types);
	sandboxd_split_list(c->default_type, &c->pool_types);
	for (size_t i = 0; i < c->pool_types.n; i++) {
		if (sandbox_types_find(c->pool_types.v[i]) == NULL) {
			error_set(err, 400, "DEFAULT_SANDBOX_TYPE: unknown sandbox "
			    "type '%s'", c->pool_types.v[i]);
			return -1;
		}
	}
	if (c->pool_types.n == 0) {
		error_set(err, 400, "DEFAULT_SANDBOX_TYPE: no type given");
		return -1;
	}

	config_list_free(&c->e2b_aliases);
	if (c->e2b_templates != NULL)
		sandboxd_split_list(c->e2b_templates, &c->e2b_aliases);
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

	if (c->state_dir == NULL)
		c->state_dir = default_state_dir();
	if (canonical_dir(&c->state_dir, "SANDBOXD_STATE_DIR", 0700, err) < 0)
		return -1;
	if (c->mount_dir == NULL)
		c->mount_dir = xasprintf("%s/workspaces", c->state_dir);
	if (canonical_dir(&c->mount_dir, "DEFAULT_MOUNT_DIR", 0755, err) < 0)
		return -1;
	if (oss_config_validate(c, err) < 0)
		return -1;
	if (c->storage_folder != NULL && c->storage_folder[0] == '\0') {
		free(c->storage_folder);
		c->storage_folder = NULL;
	}
	if (c->storage_folder != NULL && canonical_dir(&c->storage_folder,
	    "STORAGE_FOLDER", 0755, err) < 0)
		return -1;
	config_list_free(&c->allowed_mounts);
	config_list_add(&c->allowed_mounts, c->mount_dir);
	if (c->allowed_mount_dirs != NULL) {
		struct config_list dirs = { 0 };

		sandboxd_split_list(c->allowed_mount_dirs, &dirs);
		for (size_t i = 0; i < dirs.n; i++) {
			char *real = realpath(dirs.v[i], NULL);

			if (real == NULL || dirs.v[i][0] != '/') {
				error_set(err, 400, "SANDBOXD_ALLOWED_MOUNT_DIRS: "
				    "'%s' is not an existing absolute directory",
				    dirs.v[i]);
				free(real);
				config_list_free(&dirs);
				return -1;
			}
			config_list_add(&c->allowed_mounts, real);
			free(real);
		}
		config_list_free(&dirs);
	}
	for (size_t i = 0; i < c->nro_mounts; i++) {
		free(c->ro_mounts[i].host);
		free(c->ro_mounts[i].container);
	}
	free(c->ro_mounts);
	c->ro_mounts = NULL;
	c->nro_mounts = 0;
	if (c->readonly_mounts != NULL && parse_ro_mounts(c, err) < 0)
		return -1;
	if (c->public_url != NULL) {
		size_t n = strlen(c->public_url);

		if (strncmp(c->public_url, "http://", 7) != 0 &&
		    strncmp(c->public_url, "https://", 8) != 0) {
			error_set(err, 400, "SANDBOXD_PUBLIC_URL: '%s' is not an "
			    "http(s) URL", c->public_url);
			return -1;
		}
		while (n > 0 && c->public_url[n - 1] == '/')
			c->public_url[--n] = '\0';
	}
	return 0;
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
	struct config_option flags_only[NOPTIONS];
	const char *file;
	int h, v;

	set_defaults(&cfg_target);
	/* The environment alone first: argv is applied last. */
	if (config_parse(options, NOPTIONS, 1, argv, &h, &v, err) < 0)
		goto fail;
	if (access(".env", F_OK) == 0 &&
	    config_file(".env", 0, err) < 0)
		goto fail;
	file = find_config_flag(argc, argv);
	if (file != NULL && config_file(file, 1, err) < 0)
		goto fail;
	memcpy(flags_only, options, sizeof options);
	for (size_t i = 0; i < NOPTIONS; i++)
		flags_only[i].env = NULL;
	if (config_parse(flags_only, NOPTIONS, argc, argv, help, version,
	    err) < 0)
		goto fail;
	*cfg = cfg_target;
	memset(&cfg_target, 0, sizeof cfg_target);
	if (*help || *version)
		return 0;
	sandbox_types_init(cfg->registry, cfg->image_namespace, cfg->image_tag);
	if (cfg->types_file != NULL && sandbox_types_load_file(cfg->types_file,
	    cfg->registry, cfg->image_namespace, cfg->image_tag, err) < 0)
		return -1;
	return sandboxd_config_validate(cfg, err);
fail:
	*cfg = cfg_target;
	memset(&cfg_target, 0, sizeof cfg_target);
	return -1;
}

void
sandboxd_config_free(struct sandboxd_config *c)
{
	char **strings[] = {
		&c->host, &c->bearer_token, &c->default_type, &c->prefix,
		&c->deployment, &c->mount_dir, &c->readonly_mounts,
		&c->storage_folder, &c->port_range, &c->redis_server,
		&c->redis_user, &c->redis_password, &c->k8s_namespace,
		&c->kubeconfig, &c->registry, &c->image_namespace,
		&c->image_tag, &c->config_file, &c->unix_socket, &c->state_dir,
		&c->types_file, &c->docker_host, &c->allowed_mount_dirs,
		&c->public_url, &c->log_level, &c->redis_prefix,
		&c->redis_pool_key, &c->redis_port_key, &c->advertise_addr,
		&c->redis_secret, &c->redis_secret_file, &c->network,
		&c->egress_dns, &c->egress_allow, &c->egress_deny,
		&c->file_system, &c->oss_endpoint, &c->oss_access_key_id,
		&c->oss_access_key_secret, &c->oss_bucket, &c->oss_region,
		&c->oss_addressing, &c->e2b_templates,
		&c->image_store, &c->crun_bin, &c->cni_path, &c->bridge,
		&c->bridge_subnet, &c->bridge_gateway,
	};

	for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
		if (strings[i] == &c->oss_access_key_secret && *strings[i] != NULL)
			explicit_bzero(*strings[i], strlen(*strings[i]));
		free(*strings[i]);
		*strings[i] = NULL;
	}
	config_list_free(&c->pool_types);
	config_list_free(&c->allowed_mounts);
	config_list_free(&c->e2b_aliases);
	for (size_t i = 0; i < c->nro_mounts; i++) {
		free(c->ro_mounts[i].host);
		free(c->ro_mounts[i].container);
	}
	free(c->ro_mounts);
	c->ro_mounts = NULL;
	c->nro_mounts = 0;
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
