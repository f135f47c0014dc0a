/*
 * A sandbox as others read it, in one table: the state file's record (so
 * that the next start takes it back), the Redis record (so that the other
 * instances can reach it) and the container model clients get. Each field
 * of struct sandbox that leaves the process is one entry, with its key in
 * each form (NULL: not in it) and its kind, which says how each form
 * writes it: the state file keeps JSON types, Redis strings only (what it
 * signs), the model what the spec shows (null for a missing string, whole
 * seconds). Reading a record back (adoption, the mirror of the other
 * instances' records) goes through the same table, so a field added here
 * is written and read by every form at once. What a form adds that is not
 * a field of the sandbox (the Redis record's owner, address and sealed
 * token; the model's url and desktop links) its module adds.
 */
#include "sandboxd.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress.h"
#include "log.h"
#include "xmalloc.h"

enum field_kind {
	F_TEXT,		/* char[] inside the record (id, token) */
	F_STRING,	/* char *, never NULL */
	F_OPTIONAL,	/* char *, NULL: none */
	F_PORT,		/* int */
	F_FLAG,		/* int, 0 or 1 */
	F_SECONDS,	/* double: a duration */
	F_TIME,		/* double: epoch seconds */
	F_STATE,	/* enum sandbox_state */
	F_OBJECT,	/* json_t *, an object, never NULL */
	F_NETWORK,	/* json_t *, egress lists (checked when read), or NULL */
	F_VIEW,		/* json_t *, shown, or NULL */
};

struct field {
	const char *key[SANDBOX_FORMS];
	enum field_kind kind;
	size_t offset;
	size_t size;		/* F_TEXT */
};

#define AT(m) offsetof(struct sandbox, m)

/* Keys: the state file's, Redis's, the model's. */
static const struct field fields[] = {
	{ { "id", "id", "session_id" }, F_TEXT, AT(id), sizeof
	    ((struct sandbox *)0)->id },
	{ { "name", NULL, "container_name" }, F_STRING, AT(name), 0 },
	{ { "container_id", "container_id", "container_id" }, F_OPTIONAL,
	    AT(container_id), 0 },
	{ { "type", "type", "sandbox_type" }, F_STRING, AT(type_name), 0 },
	{ { "image", "image", "version" }, F_STRING, AT(image), 0 },
	/* Redis's is sealed (shared_records.c). */
	{ { "token", NULL, "runtime_token" }, F_TEXT, AT(token), sizeof
	    ((struct sandbox *)0)->token },
	{ { "port", "port", NULL }, F_PORT, AT(port), 0 },
	{ { "mount_dir", "mount_dir", "mount_dir" }, F_OPTIONAL, AT(mount_dir),
	    0 },
	{ { "owns_mount", NULL, NULL }, F_FLAG, AT(owns_mount), 0 },
	{ { "storage_path", "storage_path", "storage_path" }, F_OPTIONAL,
	    AT(storage_path), 0 },
	{ { "session", "session", "session_ctx_id" }, F_OPTIONAL, AT(session),
	    0 },
	{ { "meta", "meta", "meta" }, F_OBJECT, AT(meta), 0 },
	{ { "network", NULL, NULL }, F_NETWORK, AT(network), 0 },
	{ { NULL, NULL, "network" }, F_VIEW, AT(egress_view), 0 },
	{ { "state", "state", "state" }, F_STATE, AT(state), 0 },
	{ { "for_pool", NULL, NULL }, F_FLAG, AT(for_pool), 0 },
	{ { "created_at", "created_at", "created_at" }, F_TIME, AT(created_at),
	    0 },
	{ { NULL, "updated_at", "updated_at" }, F_TIME, AT(updated_at), 0 },
	{ { "timeout", "timeout", "timeout" }, F_SECONDS, AT(timeout), 0 },
};

#define NFIELDS (sizeof fields / sizeof fields[0])
#define MEMBER(sb, f, type) ((type *)(void *)((char *)(sb) + (f)->offset))

static json_t *
text_or_null(const char *s)
{
	return s != NULL ? json_string(s) : json_null();
}

/* A number as Redis keeps it: ports whole, durations exact, times to
 * the microsecond. */
static json_t *
number_text(const char *fmt, double v)
{
	char num[64];

	snprintf(num, sizeof num, fmt, v);
	return json_string(num);
}

/* One field of sb in form, or NULL when the form leaves it out. */
static json_t *
encode(const struct sandbox *sb, const struct field *f,
    enum sandbox_form form)
{
	const void *p = (const char *)sb + f->offset;
	char *const *s = p;
	json_t *const *j = p;
	const double *d = p;
	const int *i = p;
	char *text;
	json_t *v;

	switch (f->kind) {
	case F_TEXT:
		return json_string(p);
	case F_STRING:
		return json_string(*s);
	case F_OPTIONAL:
		if (form == SANDBOX_SHARED)
			return json_string(*s != NULL ? *s : "");
		return form == SANDBOX_MODEL ? text_or_null(*s) : *s != NULL ?
		    json_string(*s) : NULL;
	case F_PORT:
		return form == SANDBOX_SHARED ? number_text("%.0f", (double)*i) :
		    json_integer(*i);
	case F_FLAG:
		return json_boolean(*i);
	case F_SECONDS:
		if (form == SANDBOX_SHARED)
			return number_text("%.17g", *d);
		/* The spec's timeout is a whole number of seconds. */
		return form == SANDBOX_MODEL && *d == (double)(json_int_t)*d ?
		    json_integer((json_int_t)*d) : json_real(*d);
	case F_TIME:
		if (form == SANDBOX_SHARED)
			return number_text("%.6f", *d);
		return form == SANDBOX_MODEL ? json_integer((json_int_t)*d) :
		    json_real(*d);
	case F_STATE:
		return json_string(sandbox_state_name(*(const enum
		    sandbox_state *)p));
	case F_OBJECT:
		if (form == SANDBOX_STATE)
			return json_incref(*j);
		if (form == SANDBOX_MODEL)
			return json_deep_copy(*j);
		text = json_dumps(*j, JSON_COMPACT | JSON_SORT_KEYS);
		v = json_string(text != NULL ? text : "{}");
		free(text);
		return v;
	case F_NETWORK:
	case F_VIEW:
		return *j != NULL ? json_incref(*j) : NULL;
	}
	return NULL;
}

json_t *
sandbox_record(const struct sandbox *sb, enum sandbox_form form)
{
	json_t *r = json_object(), *v;

	for (size_t i = 0; i < NFIELDS; i++) {
		const struct field *f = &fields[i];

		if (f->key[form] != NULL && (v = encode(sb, f, form)) != NULL)
			json_object_set_new(r, f->key[form], v);
	}
	return r;
}

/* v, read under f's key in form: into sb. Redis's values are strings;
 * the state file's have their JSON types, and one of another type is
 * left out. -1 with err for egress lists that do not check. */
static int
decode(struct sandbox *sb, const struct field *f, enum sandbox_form form,
    json_t *v, struct error *err)
{
	void *p = (char *)sb + f->offset;
	const char *s = json_string_value(v);
	char **str = p;
	json_t **j = p;
	double *d = p;
	int *i = p;
	enum sandbox_state st;

	switch (f->kind) {
	case F_TEXT:
		if (s != NULL)
			snprintf(p, f->size, "%s", s);
		break;
	case F_STRING:
	case F_OPTIONAL:
		if (s == NULL)
			break;
		free(*str);
		*str = f->kind == F_OPTIONAL && *s == '\0' ? NULL : xstrdup(s);
		if (f->offset == AT(type_name))
			sb->type = sandbox_types_find(s);
		break;
	case F_PORT:
		if (form == SANDBOX_SHARED ? s != NULL : json_is_integer(v))
			*i = s != NULL ? atoi(s) : (int)json_integer_value(v);
		break;
	case F_FLAG:
		*i = json_is_true(v);
		break;
	case F_SECONDS:
	case F_TIME:
		if (form == SANDBOX_SHARED ? s != NULL : json_is_number(v))
			*d = s != NULL ? atof(s) : json_number_value(v);
		break;
	case F_STATE:
		/* One this build does not know: in use, and not well. */
		if (s != NULL)
			sb->state = sandbox_state_parse(s, &st) == 0 ? st :
			    SB_UNHEALTHY;
		break;
	case F_OBJECT:
		/* A copy: the record read is the caller's. */
		v = s != NULL ? json_loads(s, 0, NULL) : json_deep_copy(v);
		json_decref(*j);
		*j = json_is_object(v) ? v : json_object();
		if (!json_is_object(v))
			json_decref(v);
		break;
	case F_NETWORK:
		json_decref(*j);
		*j = NULL;
		return egress_network_check(v, f->key[form], j, err);
	case F_VIEW:
		break;
	}
	return 0;
}

int
sandbox_record_read(struct sandbox *sb, json_t *rec, enum sandbox_form form,
    struct error *err)
{
	int rc = 0;

	for (size_t i = 0; i < NFIELDS; i++) {
		const struct field *f = &fields[i];
		json_t *v;

		if (f->key[form] == NULL ||
		    (v = json_object_get(rec, f->key[form])) == NULL)
			continue;
		if (decode(sb, f, form, v, err) < 0)
			rc = -1;
	}
	sandbox_changed(sb);
	return rc;
}

char *
sandbox_url(const struct sandbox *sb)
{
	char *base, *url;

	/* Another instance's: where its owner published it. */
	if (sb->port > 0 && sb->owner != NULL && !sb->via_owner &&
	    strncmp(sb->agent_addr, "unix:", 5) != 0)
		return xasprintf("http://%s", sb->agent_addr);
	if (sb->port > 0 && sd.cfg.redis_enabled && sd.cfg.advertise_addr != NULL)
		return xasprintf("http://%s:%d", sd.cfg.advertise_addr, sb->port);
	if (sb->port > 0)
		return xasprintf("http://127.0.0.1:%d", sb->port);
	/* No network: the agent is reached through our proxy, which also
	 * takes the sandbox's own token. The trailing slash makes the SDK's
	 * urljoin(url, "fastapi") land under it. */
	base = sandboxd_base_url(&sd.cfg);
	url = xasprintf("%s/proxy/%s/", base, sb->name);
	free(base);
	return url;
}

json_t *
sandbox_model(const struct sandbox *sb)
{
	json_t *m = sandbox_record(sb, SANDBOX_MODEL), *ports = json_array();
	char *url = sandbox_url(sb), *desktop;

	if (sb->port > 0)
		json_array_append_new(ports, json_integer(sb->port));
	json_object_set_new(m, "url", json_string(url));
	json_object_set_new(m, "ports", ports);
	if (sb->last_error != NULL && sb->state == SB_UNHEALTHY)
		json_object_set_new(m, "error", json_string(sb->last_error));
	/* Links that open the desktop alone, never the sandbox's token. */
	if (sb->type != NULL && sb->type->desktop) {
		desktop = desktop_url(sb, DESKTOP_INTERACTIVE);
		json_object_set_new(m, "desktop_url", json_string(desktop));
		free(desktop);
		desktop = desktop_url(sb, DESKTOP_VIEW);
		json_object_set_new(m, "desktop_view_url", json_string(desktop));
		free(desktop);
	}
	free(url);
	return m;
}

const char *
sandbox_model_text(struct sandbox *sb, size_t *len)
{
	if (sb->model_text == NULL) {
		json_t *m = sandbox_model(sb);

		/* Strings in a record are ours or checked UTF-8 on the way
		 * in: an encoding failure is a bug, not a client's doing. */
		if ((sb->model_text = json_dumps(m, JSON_COMPACT)) == NULL)
			fatal("sandbox %s: its model does not encode as JSON",
			    sb->name);
		sb->model_len = strlen(sb->model_text);
		json_decref(m);
	}
	*len = sb->model_len;
	return sb->model_text;
}
