/*
 * Sandbox records: the list of every sandbox this supervisor knows (live
 * ones and a bounded tail of released ones, whose records the spec keeps),
 * lookup by name or container id, and the container model clients see.
 */
#include "sandboxd.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "log.h"
#include "token.h"
#include "xmalloc.h"

static struct sandbox_list sandboxes = TAILQ_HEAD_INITIALIZER(sandboxes);
/* The backend's short forms of container ids (sandbox_set_id_match). */
static int (*id_match)(const char *id, const char *identity);

static const char *const state_names[] = {
	[SB_CREATING] = "creating",
	[SB_WARM] = "warm",
	[SB_RUNNING] = "running",
	[SB_UNHEALTHY] = "unhealthy",
	[SB_STOPPED] = "stopped",
	[SB_PAUSED] = "paused",
	[SB_RELEASING] = "releasing",
	[SB_RELEASED] = "released",
};

const char *
sandbox_state_name(enum sandbox_state state)
{
	return state_names[state];
}

int
sandbox_state_live(enum sandbox_state state)
{
	return state != SB_RELEASED;
}

double
sandboxd_now(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

double
sandboxd_monotonic(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct sandbox *
sandbox_new(const struct sandbox_type *type)
{
	struct sandbox *sb = xcalloc(1, sizeof *sb);
	unsigned char raw[8];

	do {
		token_random_bytes(raw, sizeof raw);
		for (size_t i = 0; i < sizeof raw; i++)
			snprintf(sb->id + 2 * i, 3, "%02x", raw[i]);
		free(sb->name);
		sb->name = xasprintf("%s%s", sd.cfg.prefix, sb->id);
	} while (sandbox_find(sb->name) != NULL);
	token_random_hex(sb->token);
	sb->type = type;
	sb->type_name = xstrdup(type->name);
	sb->image = xstrdup(type->image);
	sb->timeout = type->timeout;
	sb->meta = json_object();
	sb->state = SB_CREATING;
	sb->created_at = sb->updated_at = sandboxd_now();
	sb->refs = 1;
	sb->listed = 1;
	TAILQ_INSERT_TAIL(&sandboxes, sb, entry);
	return sb;
}

void
sandbox_ref(struct sandbox *sb)
{
	sb->refs++;
}

int
sandbox_has_network(const struct sandbox *sb)
{
	return sb->type != NULL && strcmp(sb->type->network, "bridge") == 0;
}

static void
sandbox_free(struct sandbox *sb)
{
	free(sb->name);
	free(sb->container_id);
	free(sb->type_name);
	free(sb->image);
	free(sb->mount_dir);
	free(sb->storage_path);
	free(sb->sock_dir);
	free(sb->agent_addr);
	free(sb->session);
	json_decref(sb->meta);
	json_decref(sb->environment);
	json_decref(sb->network);
	json_decref(sb->egress_view);
	free(sb->last_error);
	free(sb->model_text);
	free(sb->owner);
	json_decref(sb->shared);
	/* The token lived in this record; do not leave it in freed memory. */
	explicit_bzero(sb->token, sizeof sb->token);
	free(sb);
}

void
sandbox_unref(struct sandbox *sb)
{
	if (--sb->refs == 0)
		sandbox_free(sb);
}

void
sandbox_forget(struct sandbox *sb)
{
	if (!sb->listed)
		return;
	sb->listed = 0;
	TAILQ_REMOVE(&sandboxes, sb, entry);
	state_dirty();
	sandbox_unref(sb);
}

struct sandbox *
sandbox_find(const char *identity)
{
	struct sandbox *sb = sandbox_find_local(identity);

	if (sb == NULL && identity != NULL && shared_enabled())
		sb = shared_find(identity);
	return sb;
}

void
sandbox_set_id_match(int (*match)(const char *id, const char *identity))
{
	id_match = match;
}

struct sandbox *
sandbox_find_local(const char *identity)
{
	struct sandbox *sb, *match = NULL;

	if (identity == NULL || *identity == '\0')
		return NULL;
	/* Live records first: a released name may come back only as
	 * released, never shadow a live one. */
	TAILQ_FOREACH(sb, &sandboxes, entry) {
		if (strcmp(sb->name, identity) == 0 ||
		    (sb->container_id != NULL &&
		    strcmp(sb->container_id, identity) == 0)) {
			if (sb->state != SB_RELEASED)
				return sb;
			match = sb;
		}
	}
	if (match != NULL)
		return match;
	if (id_match == NULL)
		return NULL;
	TAILQ_FOREACH(sb, &sandboxes, entry) {
		if (sb->container_id == NULL ||
		    !id_match(sb->container_id, identity))
			continue;
		if (match != NULL)
			return NULL;	/* ambiguous */
		match = sb;
	}
	return match;
}

struct sandbox *
sandbox_first(void)
{
	return TAILQ_FIRST(&sandboxes);
}

struct sandbox *
sandbox_next(struct sandbox *sb)
{
	return TAILQ_NEXT(sb, entry);
}

size_t
sandbox_count_live(void)
{
	struct sandbox *sb;
	size_t n = 0;

	TAILQ_FOREACH(sb, &sandboxes, entry)
		n += sandbox_state_live(sb->state);
	return n;
}

size_t
sandbox_count(const char *type_name, enum sandbox_state state)
{
	struct sandbox *sb;
	size_t n = 0;

	TAILQ_FOREACH(sb, &sandboxes, entry) {
		if (sb->state == state && (type_name == NULL ||
		    strcmp(sb->type_name, type_name) == 0))
			n++;
	}
	return n;
}

void
sandbox_set_state(struct sandbox *sb, enum sandbox_state state)
{
	sb->state = state;
	sb->updated_at = sandboxd_now();
	sandbox_changed(sb);
	state_dirty();
}

void
sandbox_changed(struct sandbox *sb)
{
	free(sb->model_text);
	sb->model_text = NULL;
	sb->model_len = 0;
}

int
sandbox_check_callable(const struct sandbox *sb, struct error *err)
{
	switch (sb->state) {
	case SB_WARM:
	case SB_RUNNING:
	case SB_UNHEALTHY:
		return 0;
	case SB_STOPPED:
		error_set(err, 409, "sandbox %s is stopped; start it to use it "
		    "again", sb->name);
		break;
	case SB_PAUSED:
		error_set(err, 409, "sandbox %s is paused; resume it to use it "
		    "again", sb->name);
		break;
	case SB_CREATING:
		error_set(err, 409, "sandbox %s is still being created",
		    sb->name);
		break;
	case SB_RELEASING:
	case SB_RELEASED:
		error_set(err, 409, "sandbox %s is released", sb->name);
		break;
	}
	return -1;
}

void
sandbox_set_error(struct sandbox *sb, const char *fmt, ...)
{
	char msg[ERROR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	/* get_info shows it. */
	redact_text(msg, sizeof msg);
	free(sb->last_error);
	sb->last_error = xstrdup(msg);
	sandbox_changed(sb);
}

void
sandbox_trim_released(size_t keep)
{
	struct sandbox *sb, *next;
	size_t n = sandbox_count(NULL, SB_RELEASED);

	for (sb = TAILQ_FIRST(&sandboxes); sb != NULL && n > keep; sb = next) {
		next = TAILQ_NEXT(sb, entry);
		if (sb->state == SB_RELEASED) {
			sandbox_forget(sb);
			n--;
		}
	}
}

char *
sandboxd_base_url(void)
{
	const char *host = sd.cfg.host;

	if (sd.cfg.public_url != NULL)
		return xstrdup(sd.cfg.public_url);
	if (strcmp(host, "0.0.0.0") == 0)
		host = "127.0.0.1";
	if (strchr(host, ':') != NULL)
		return xasprintf("http://[%s]:%ld", strcmp(host, "::") == 0 ?
		    "::1" : host, sd.cfg.port);
	return xasprintf("http://%s:%ld", host, sd.cfg.port);
}

char *
sandbox_url(const struct sandbox *sb)
{
	char *base, *url;

	/* Another instance's: where its owner published it. */
	if (sb->port > 0 && shared_is_remote(sb) && !sb->via_owner &&
	    strncmp(sb->agent_addr, "unix:", 5) != 0)
		return xasprintf("http://%s", sb->agent_addr);
	if (sb->port > 0 && sd.cfg.redis_enabled && sd.cfg.advertise_addr != NULL)
		return xasprintf("http://%s:%d", sd.cfg.advertise_addr, sb->port);
	if (sb->port > 0)
		return xasprintf("http://127.0.0.1:%d", sb->port);
	/* No network: the agent is reached through our proxy, which also
	 * takes the sandbox's own token. The trailing slash makes the SDK's
	 * urljoin(url, "fastapi") land under it. */
	base = sandboxd_base_url();
	url = xasprintf("%s/proxy/%s/", base, sb->name);
	free(base);
	return url;
}

static json_t *
string_or_null(const char *s)
{
	return s != NULL ? json_string(s) : json_null();
}

json_t *
sandbox_model(const struct sandbox *sb)
{
	json_t *m = json_object(), *ports = json_array();
	char *url = sandbox_url(sb), *desktop;

	if (sb->port > 0)
		json_array_append_new(ports, json_integer(sb->port));
	json_object_set_new(m, "session_id", json_string(sb->id));
	json_object_set_new(m, "container_id", string_or_null(sb->container_id));
	json_object_set_new(m, "container_name", json_string(sb->name));
	json_object_set_new(m, "url", json_string(url));
	json_object_set_new(m, "ports", ports);
	json_object_set_new(m, "mount_dir", string_or_null(sb->mount_dir));
	json_object_set_new(m, "storage_path", string_or_null(sb->storage_path));
	json_object_set_new(m, "runtime_token", json_string(sb->token));
	json_object_set_new(m, "version", json_string(sb->image));
	json_object_set_new(m, "meta", json_deep_copy(sb->meta));
	json_object_set_new(m, "timeout", sb->timeout == (double)(json_int_t)
	    sb->timeout ? json_integer((json_int_t)sb->timeout) :
	    json_real(sb->timeout));
	json_object_set_new(m, "sandbox_type", json_string(sb->type_name));
	json_object_set_new(m, "session_ctx_id", string_or_null(sb->session));
	json_object_set_new(m, "state", json_string(state_names[sb->state]));
	json_object_set_new(m, "created_at", json_integer((json_int_t)sb->created_at));
	json_object_set_new(m, "updated_at", json_integer((json_int_t)sb->updated_at));
	if (sb->egress_view != NULL)
		json_object_set(m, "network", sb->egress_view);
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

void
sandbox_free_all(void)
{
	struct sandbox *sb;

	while ((sb = TAILQ_FIRST(&sandboxes)) != NULL) {
		sb->listed = 0;
		TAILQ_REMOVE(&sandboxes, sb, entry);
		sandbox_unref(sb);
	}
}
