/*
 * The --desktop file (its format is in desktop.h): read and checked once
 * at start, so that a broken image fails loudly instead of serving a
 * sandbox without its display.
 */
#include "desktop_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "xmalloc.h"

static int
parse_user(const char *s, uid_t *uid, gid_t *gid)
{
	unsigned long u, g;
	char *end;

	u = strtoul(s, &end, 10);
	if (end == s || *end != ':')
		return -1;
	s = end + 1;
	g = strtoul(s, &end, 10);
	if (end == s || *end != '\0' || u > 0x7fffffff || g > 0x7fffffff)
		return -1;
	*uid = (uid_t)u;
	*gid = (gid_t)g;
	return 0;
}

/* Who a program runs as: its "user", else the --run-as user, else the
 * agent itself; root never. */
static int
program_user(struct agent *agent, struct desktop_program *p, json_t *user,
    const char *where, struct error *err)
{
	if (user != NULL) {
		if (!json_is_string(user) || parse_user(json_string_value(user),
		    &p->uid, &p->gid) < 0) {
			error_set(err, 400, "%s: \"user\" must be \"UID:GID\"",
			    where);
			return -1;
		}
	} else if (agent->drop_ids) {
		p->uid = agent->uid;
		p->gid = agent->gid;
	} else {
		p->uid = geteuid();
		p->gid = getegid();
	}
	if (p->uid == 0) {
		error_set(err, 400, "%s: desktop programs never run as root "
		    "(give the agent --run-as, or the program a \"user\")",
		    where);
		return -1;
	}
	p->set_ids = p->uid != geteuid() || p->gid != getegid();
	return 0;
}

static int
parse_program(struct agent *agent, struct desktop_program *p, json_t *def,
    const char *where, struct error *err)
{
	json_t *command = json_object_get(def, "command");
	json_t *name = json_object_get(def, "name");
	json_t *env = json_object_get(def, "env");
	const char *key;
	json_t *v;
	size_t i;

	if (!json_is_object(def)) {
		error_set(err, 400, "%s: expected an object", where);
		return -1;
	}
	json_object_foreach(def, key, v) {
		if (strcmp(key, "command") != 0 && strcmp(key, "name") != 0 &&
		    strcmp(key, "env") != 0 && strcmp(key, "user") != 0) {
			error_set(err, 400, "%s: unknown key \"%s\" (command, "
			    "name, user, env)", where, key);
			return -1;
		}
	}
	if (!json_is_array(command) || json_array_size(command) == 0) {
		error_set(err, 400, "%s: \"command\" must be a non-empty list "
		    "of strings", where);
		return -1;
	}
	p->argv = xcalloc(json_array_size(command) + 1, sizeof *p->argv);
	json_array_foreach(command, i, v) {
		if (!json_is_string(v)) {
			error_set(err, 400, "%s: \"command\" must be a list of "
			    "strings", where);
			return -1;
		}
		p->argv[i] = xstrdup(json_string_value(v));
	}
	if (p->argv[0][0] != '/') {
		error_set(err, 400, "%s: the program must be an absolute path, "
		    "not %s", where, p->argv[0]);
		return -1;
	}
	if (name != NULL && !json_is_string(name)) {
		error_set(err, 400, "%s: \"name\" must be a string", where);
		return -1;
	}
	p->name = xstrdup(name != NULL ? json_string_value(name) :
	    strrchr(p->argv[0], '/') + 1);
	if (env != NULL) {
		if (!json_is_object(env)) {
			error_set(err, 400, "%s: \"env\" must be an object of "
			    "strings", where);
			return -1;
		}
		json_object_foreach(env, key, v) {
			if (!json_is_string(v) || *key == '\0' ||
			    strchr(key, '=') != NULL) {
				error_set(err, 400, "%s: env %s: expected a string "
				    "and a name without '='", where, key);
				return -1;
			}
		}
		p->env = json_incref(env);
	}
	return program_user(agent, p, json_object_get(def, "user"), where, err);
}

static int
get_string(json_t *root, const char *key, char **out, const char *path,
    struct error *err)
{
	json_t *v = json_object_get(root, key);

	if (!json_is_string(v) || json_string_length(v) == 0) {
		error_set(err, 400, "--desktop %s: \"%s\" must be a non-empty "
		    "string", path, key);
		return -1;
	}
	*out = xstrdup(json_string_value(v));
	return 0;
}

int
desktop_config_load(struct agent *agent, struct desktop *d, const char *path,
    struct error *err)
{
	json_t *root, *programs, *v;
	json_error_t jerr;
	const char *key;
	char where[128];
	size_t i;
	int rc = -1;

	root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL) {
		error_set(err, 400, "--desktop %s: %s (line %d)", path, jerr.text,
		    jerr.line);
		return -1;
	}
	if (!json_is_object(root)) {
		error_set(err, 400, "--desktop %s: expected an object", path);
		goto out;
	}
	json_object_foreach(root, key, v) {
		if (strcmp(key, "display") != 0 &&
		    strcmp(key, "vnc_socket") != 0 &&
		    strcmp(key, "server") != 0 &&
		    strcmp(key, "programs") != 0 &&
		    strcmp(key, "novnc") != 0 &&
		    strcmp(key, "draw_timeout") != 0) {
			error_set(err, 400, "--desktop %s: unknown key \"%s\" "
			    "(display, vnc_socket, server, programs, novnc, "
			    "draw_timeout)", path, key);
			goto out;
		}
	}
	if (get_string(root, "display", &d->display, path, err) < 0 ||
	    get_string(root, "vnc_socket", &d->vnc_socket, path, err) < 0)
		goto out;
	if (d->display[0] != ':' || d->vnc_socket[0] != '/') {
		error_set(err, 400, "--desktop %s: \"display\" must be local "
		    "(\":N\") and \"vnc_socket\" an absolute path", path);
		goto out;
	}
	v = json_object_get(root, "novnc");
	if (v != NULL && (!json_is_string(v) ||
	    json_string_value(v)[0] != '/')) {
		error_set(err, 400, "--desktop %s: \"novnc\" must be an "
		    "absolute path", path);
		goto out;
	}
	if (v != NULL)
		d->novnc = xstrdup(json_string_value(v));
	d->draw_timeout = DESKTOP_DRAW_TIMEOUT;
	v = json_object_get(root, "draw_timeout");
	if (v != NULL && (!json_is_number(v) || !(json_number_value(v) > 0) ||
	    json_number_value(v) > 3600)) {
		error_set(err, 400, "--desktop %s: \"draw_timeout\" must be "
		    "seconds, more than 0 and at most 3600", path);
		goto out;
	}
	if (v != NULL)
		d->draw_timeout = json_number_value(v);
	programs = json_object_get(root, "programs");
	if (programs != NULL && !json_is_array(programs)) {
		error_set(err, 400, "--desktop %s: \"programs\" must be a list",
		    path);
		goto out;
	}
	d->nprograms = 1 + json_array_size(programs);
	d->programs = xcalloc(d->nprograms, sizeof *d->programs);
	snprintf(where, sizeof where, "--desktop %s: server", path);
	if (json_object_get(root, "server") == NULL) {
		error_set(err, 400, "%s: missing", where);
		goto out;
	}
	if (parse_program(agent, &d->programs[0], json_object_get(root,
	    "server"), where, err) < 0)
		goto out;
	json_array_foreach(programs, i, v) {
		snprintf(where, sizeof where, "--desktop %s: programs[%zu]",
		    path, i);
		if (parse_program(agent, &d->programs[i + 1], v, where, err) < 0)
			goto out;
	}
	rc = 0;
out:
	json_decref(root);
	return rc;
}
