/*
 * Who an envd request acts as, where its paths lead and what environment
 * its processes get; the state /init sets (the sandbox's variables, the
 * default user and workdir) and the small REST routes: GET /health, GET
 * /envs, POST /init.
 *
 * Users come from the sandbox's /etc/passwd (the agent is static: no NSS,
 * fgetpwent is a plain parser). The default is the --run-as user, else
 * the agent's own. Under --run-as nothing of envd's runs as root; without
 * it the agent's commands run as itself and so may envd's.
 */
#include "envd.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <nettle/base64.h>

#include "jsonx.h"
#include "utf8.h"
#include "xmalloc.h"

#define ENVD_PATH_MAX		4096
#define ENVD_MAX_ENVS		4096	/* variables of one process */
#define ENVD_NAME_MAX		256	/* bytes of a user name */

/* What /init set; lives until exit. */
static struct {
	json_t *vars;		/* {"NAME": "value"} */
	char *user;		/* default user's name; NULL: --run-as's */
	char *workdir;		/* NULL: the user's home */
} init_state;

void
envd_user_clear(struct envd_user *u)
{
	free(u->name);
	free(u->home);
	memset(u, 0, sizeof *u);
}

void
envd_user_copy(struct envd_user *dst, const struct envd_user *src)
{
	dst->uid = src->uid;
	dst->gid = src->gid;
	dst->name = xstrdup(src->name);
	dst->home = xstrdup(src->home);
}

/* The passwd entry of name (or, name NULL, of uid) into u; 0 if found. */
static int
passwd_find(const char *name, uid_t uid, struct envd_user *u)
{
	struct passwd *pw;
	FILE *f = fopen("/etc/passwd", "re");
	int found = -1;

	if (f == NULL)
		return -1;
	while ((pw = fgetpwent(f)) != NULL) {
		if (name != NULL ? strcmp(pw->pw_name, name) != 0 :
		    pw->pw_uid != uid)
			continue;
		u->uid = pw->pw_uid;
		u->gid = pw->pw_gid;
		u->name = xstrdup(pw->pw_name);
		u->home = xstrdup(pw->pw_dir[0] == '/' ? pw->pw_dir : "/");
		found = 0;
		break;
	}
	fclose(f);
	return found;
}

/* May the agent act as uid? Under --run-as, as anyone but root; else
 * only as itself, or as anyone when it is root and may switch. */
static int
user_allowed(struct agent *agent, uid_t uid)
{
	if (agent->drop_ids)
		return uid != 0;
	if (uid == geteuid())
		return 1;
	return geteuid() == 0 && (agent->cfg.run_as == NULL ||
	    agent->cfg.run_as[0] == '\0');
}

int
envd_user_switches(uid_t uid, gid_t gid)
{
	return uid != geteuid() || gid != getegid();
}

int
envd_user_lookup(struct agent *agent, const char *name, struct envd_user *u,
    struct error *err)
{
	uid_t uid = agent->drop_ids ? agent->uid : geteuid();

	memset(u, 0, sizeof *u);
	if (name == NULL)
		name = init_state.user;
	if (name != NULL && passwd_find(name, 0, u) < 0) {
		error_set(err, 401, "invalid username: '%.*s'", ENVD_NAME_MAX,
		    name);
		return -1;
	}
	if (name == NULL && passwd_find(NULL, uid, u) < 0) {
		/* The --run-as user need not have an entry. */
		u->uid = uid;
		u->gid = agent->drop_ids ? agent->gid : getegid();
		u->name = xasprintf("%u", (unsigned)uid);
		u->home = xstrdup(agent->drop_ids && agent->run_as_home ?
		    agent->run_as_home : "/");
	}
	if (!user_allowed(agent, u->uid)) {
		error_set(err, 403, "this sandbox does not act as user '%s' "
		    "(uid %u)%s", u->name, (unsigned)u->uid, u->uid == 0 ?
		    ": nothing of envd runs as root here" : "");
		envd_user_clear(u);
		return -1;
	}
	if (agent->drop_ids && u->uid == agent->uid)
		u->gid = agent->gid;	/* the commands' group */
	return 0;
}

int
envd_user_from_request(struct agent *agent, struct http_request *req,
    struct envd_user *u, struct error *err)
{
	const char *h = http_request_header(req, ENVD_USER_HEADER);
	struct base64_decode_ctx ctx;
	uint8_t buf[BASE64_DECODE_LENGTH(2 * ENVD_NAME_MAX) + 1];
	size_t len = sizeof buf - 1, hlen;
	char *colon;

	if (h == NULL)
		return envd_user_lookup(agent, NULL, u, err);
	if (strncasecmp(h, "Basic ", 6) != 0)
		goto bad;
	h += 6;
	while (*h == ' ')
		h++;
	hlen = strlen(h);
	base64_decode_init(&ctx);
	if (hlen > 2 * ENVD_NAME_MAX || !base64_decode_update(&ctx, &len, buf,
	    hlen, h) || !base64_decode_final(&ctx))
		goto bad;
	buf[len] = '\0';
	/* "user:" (E2B sends no password); a NUL would cut the name. */
	if ((colon = strchr((char *)buf, ':')) == NULL ||
	    strlen((char *)buf) != len)
		goto bad;
	*colon = '\0';
	return envd_user_lookup(agent, (char *)buf, u, err);
bad:
	error_set(err, 401, "%s must be 'Basic base64(user:)'",
	    ENVD_USER_HEADER);
	return -1;
}

/* Append the clean form of a path (relative parts against base) to out:
 * "." and empty parts go, ".." takes one back, never above the root. */
static void
clean_into(char *out, size_t *olen, const char *p)
{
	while (*p != '\0') {
		size_t n = strcspn(p, "/");

		if (n == 2 && p[0] == '.' && p[1] == '.') {
			while (*olen > 0 && out[*olen - 1] != '/')
				(*olen)--;
			if (*olen > 0)
				(*olen)--;	/* the slash */
		} else if (n > 0 && !(n == 1 && p[0] == '.')) {
			out[(*olen)++] = '/';
			memcpy(out + *olen, p, n);
			*olen += n;
		}
		p += n;
		while (*p == '/')
			p++;
	}
}

char *
envd_path_resolve(const struct envd_user *u, const char *path,
    struct error *err)
{
	const char *rest;
	size_t len = 0;
	char *out;

	if (path == NULL || path[0] == '\0')
		path = init_state.workdir != NULL ? init_state.workdir : "";
	if (strlen(path) > ENVD_PATH_MAX) {
		error_set(err, 400, "path is longer than %d bytes",
		    ENVD_PATH_MAX);
		return NULL;
	}
	if (!utf8_valid(path, strlen(path))) {
		error_set(err, 400, "path is not UTF-8");
		return NULL;
	}
	if (path[0] == '~' && path[1] != '\0' && path[1] != '/') {
		error_set(err, 400, "cannot expand user-specific home dir: "
		    "'%.200s'", path);
		return NULL;
	}
	/* As E2B: an absolute path is taken as it is; the kernel follows
	 * its "..", after any link before it. */
	if (path[0] == '/')
		return xstrdup(path);
	rest = path[0] == '~' ? path + 1 : path;
	out = xmalloc(strlen(u->home) + strlen(rest) + 3);
	clean_into(out, &len, u->home);
	clean_into(out, &len, rest);
	if (len == 0)
		out[len++] = '/';
	out[len] = '\0';
	return out;
}

/* Set NAME=value in env (n entries), replacing an entry of that name. */
static void
env_set(char **env, size_t *n, const char *name, size_t nlen,
    const char *value)
{
	char *entry = xasprintf("%.*s=%s", (int)nlen, name, value);

	for (size_t i = 0; i < *n; i++)
		if (strncmp(env[i], name, nlen) == 0 && env[i][nlen] == '=') {
			free(env[i]);
			env[i] = entry;
			return;
		}
	env[(*n)++] = entry;
}

/* Variables as E2B takes them: names without '=', string values. */
static int
env_valid(json_t *vars, struct error *err)
{
	const char *k;
	json_t *v;

	json_object_foreach(vars, k, v) {
		if (!json_is_string(v) || k[0] == '\0' || strchr(k, '=') ||
		    strlen(json_string_value(v)) != json_string_length(v)) {
			error_set(err, 400, "envs: '%.100s' must be a name "
			    "without '=' and a string without NUL", k);
			return -1;
		}
	}
	return 0;
}

static void
env_add_object(char **env, size_t *n, json_t *vars)
{
	const char *k;
	json_t *v;

	json_object_foreach(vars, k, v)
		env_set(env, n, k, strlen(k), json_string_value(v));
}

char **
envd_env_build(struct agent *agent, const struct envd_user *u, json_t *envs,
    struct error *err)
{
	static const char *const own[] = { "HOME", "USER", "LOGNAME", "PWD" };
	size_t n = 0, cap = 3 + json_object_size(init_state.vars) +
	    json_object_size(envs) + 1;
	char **env;

	for (char **e = agent->child_env; *e != NULL; e++)
		cap++;
	if (cap > ENVD_MAX_ENVS) {
		error_set(err, 400, "more than %d environment variables",
		    ENVD_MAX_ENVS);
		return NULL;
	}
	if (envs != NULL && env_valid(envs, err) < 0)
		return NULL;
	env = xcalloc(cap, sizeof *env);
	for (char **e = agent->child_env; *e != NULL; e++) {
		size_t i = 0;

		while (i < sizeof own / sizeof own[0] &&
		    !(strncmp(*e, own[i], strlen(own[i])) == 0 &&
		    (*e)[strlen(own[i])] == '='))
			i++;
		if (i == sizeof own / sizeof own[0])
			env[n++] = xstrdup(*e);
	}
	env_set(env, &n, "HOME", 4, u->home);
	env_set(env, &n, "USER", 4, u->name);
	env_set(env, &n, "LOGNAME", 7, u->name);
	if (init_state.vars != NULL)
		env_add_object(env, &n, init_state.vars);
	if (envs != NULL)
		env_add_object(env, &n, envs);
	return env;
}

json_t *
envd_init_vars(void)
{
	return init_state.vars;
}

void
envd_env_free(char **env)
{
	for (size_t i = 0; env != NULL && env[i] != NULL; i++)
		free(env[i]);
	free(env);
}

void
envd_rest_error(struct http_request *req, const struct error *err)
{
	http_reply_json(req, err->status, json_pack("{s:i, s:o}", "code",
	    err->status, "message", utf8_json_string(err->msg,
	    strlen(err->msg))));
}

void
envd_route_health(struct http_request *req, void *arg)
{
	(void)arg;
	http_reply_empty(req, 204);
}

void
envd_route_envs(struct http_request *req, void *arg)
{
	(void)arg;
	http_reply_add_header(req, "Cache-Control", "no-store");
	http_reply_json(req, 200, init_state.vars != NULL ?
	    json_deep_copy(init_state.vars) : json_object());
}

/* What /init may carry that the agent does not do: refused, not
 * ignored. The access token is sandboxd's to check, the clock the
 * host's. */
static int
init_refuse(json_t *body, struct error *err)
{
	static const char *const unsupported[] = { "caBundle", "volumeMounts" };

	for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0];
	    i++) {
		json_t *v = json_object_get(body, unsupported[i]);

		if (v != NULL && !json_is_null(v) && !(json_is_string(v) &&
		    json_string_length(v) == 0) && !(json_is_array(v) &&
		    json_array_size(v) == 0)) {
			error_set(err, 400, "%s is not supported by this "
			    "sandbox", unsupported[i]);
			return -1;
		}
	}
	return 0;
}

void
envd_route_init(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct error err = { 0 };
	const char *user = NULL, *workdir = NULL;
	struct envd_user u = { 0 };
	json_t *body, *vars = NULL;

	if ((body = http_request_json(req, &err)) == NULL ||
	    jsonx_get_object(body, "envVars", 0, &vars, &err) < 0 ||
	    jsonx_get_string(body, "defaultUser", 0, &user, &err) < 0 ||
	    jsonx_get_string(body, "defaultWorkdir", 0, &workdir, &err) < 0 ||
	    init_refuse(body, &err) < 0)
		goto fail;
	if (user != NULL && user[0] != '\0' &&
	    envd_user_lookup(agent, user, &u, &err) < 0) {
		err.status = 400;
		goto fail;
	}
	if (workdir != NULL && workdir[0] != '\0' && workdir[0] != '/') {
		error_set(&err, 400, "defaultWorkdir must be an absolute path");
		goto fail;
	}
	if (vars != NULL) {
		if (json_object_size(vars) > ENVD_MAX_ENVS / 2) {
			error_set(&err, 400, "envVars: more than %d variables",
			    ENVD_MAX_ENVS / 2);
			goto fail;
		}
		if (env_valid(vars, &err) < 0)
			goto fail;
		json_decref(init_state.vars);
		init_state.vars = json_deep_copy(vars);
	}
	if (user != NULL && user[0] != '\0') {
		free(init_state.user);
		init_state.user = xstrdup(user);
	}
	if (workdir != NULL && workdir[0] != '\0') {
		free(init_state.workdir);
		init_state.workdir = xstrdup(workdir);
	}
	envd_user_clear(&u);
	json_decref(body);
	http_reply_add_header(req, "Cache-Control", "no-store");
	http_reply_empty(req, 204);
	return;
fail:
	envd_user_clear(&u);
	json_decref(body);
	envd_rest_error(req, &err);
}
