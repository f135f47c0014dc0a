/*
 * The sandbox table: the records of this instance's sandboxes (live ones
 * and a bounded tail of released ones, whose records the spec keeps),
 * found by name or container id. It is the floor every service stands on and calls none of them: a
 * change to a record (sandbox_changed, sandbox_set_state, sandbox_forget)
 * is announced to the hooks that subscribed (the state file, Redis, the
 * pools), and the other instances' records are sandbox_resolve's, above.
 */
#include "sandboxd.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "token.h"
#include "xmalloc.h"

/* Who is told of a change to one of our records; a handful. */
#define HOOKS_MAX 8

static struct sandbox_list sandboxes = TAILQ_HEAD_INITIALIZER(sandboxes);
static struct {
	sandbox_hook_cb cb;
	void *arg;
} hooks[HOOKS_MAX];
static size_t nhooks;
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
sandbox_state_parse(const char *name, enum sandbox_state *out)
{
	for (size_t i = 0; i < sizeof state_names / sizeof state_names[0]; i++) {
		if (strcmp(state_names[i], name) == 0) {
			*out = (enum sandbox_state)i;
			return 0;
		}
	}
	return -1;
}

int
sandbox_state_live(enum sandbox_state state)
{
	return state != SB_RELEASED;
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
	sb->created_at = sb->updated_at = timing_wall();
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
sandbox_hook_add(sandbox_hook_cb cb, void *arg)
{
	if (nhooks == HOOKS_MAX)
		fatal("more than %d sandbox hooks", HOOKS_MAX);
	hooks[nhooks].cb = cb;
	hooks[nhooks].arg = arg;
	nhooks++;
}

static void
announce(struct sandbox *sb)
{
	/* Another instance's record (the mirror's) is its owner's to keep. */
	if (sb->owner != NULL)
		return;
	for (size_t i = 0; i < nhooks; i++)
		hooks[i].cb(sb, hooks[i].arg);
}

void
sandbox_forget(struct sandbox *sb)
{
	if (!sb->listed)
		return;
	sb->listed = 0;
	TAILQ_REMOVE(&sandboxes, sb, entry);
	announce(sb);
	sandbox_unref(sb);
}

void
sandbox_set_id_match(int (*match)(const char *id, const char *identity))
{
	id_match = match;
}

struct sandbox *
sandbox_find(const char *identity)
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
	sb->updated_at = timing_wall();
	sandbox_changed(sb);
}

void
sandbox_changed(struct sandbox *sb)
{
	free(sb->model_text);
	sb->model_text = NULL;
	sb->model_len = 0;
	announce(sb);
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
