/*
 * Shared state in Redis: the mirror of the other instances' records, and
 * what a record must be to enter it. Whoever can write Redis could
 * otherwise point a name at any socket (the Docker daemon's) with a token
 * of their choice, so a record is taken only when it is signed for its
 * very key (shared_crypto.c) and holds only what its owner can publish:
 * that owner's lease is signed and not gone for good (its grace), a unix
 * agent is the record's own socket in that owner's socket directory, a
 * TCP agent is at that owner's advertised address on a port of its
 * range and no newer record's, and the API is the owner's. A record that
 * fails any of it drops whatever the mirror had under its name.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "log.h"
#include "shared_internal.h"
#include "xmalloc.h"

#define HEX "0123456789abcdef"
#define NAME_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" \
	"0123456789-_."
/* Container names are at most 64 + 16 characters here. */
#define NAME_MAX_LEN 128

/* Records of the other instances; each holds the list's reference. */
static struct sandbox_list mirror = TAILQ_HEAD_INITIALIZER(mirror);
/* Records refused: as many as whoever writes Redis likes. */
static struct log_rate refused_rate = LOG_RATE_INIT(10, 5);

int
shared_name_ok(const char *name)
{
	size_t n = strlen(name);

	return n > 0 && n <= NAME_MAX_LEN && strspn(name, NAME_CHARS) == n;
}

json_t *
shared_reply_fields(redisReply *r)
{
	json_t *f = json_object();

	if (r == NULL || r->type != REDIS_REPLY_ARRAY)
		return f;
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		if (r->element[i]->type == REDIS_REPLY_STRING &&
		    r->element[i + 1]->type == REDIS_REPLY_STRING)
			json_object_set_new(f, r->element[i]->str,
			    json_string(r->element[i + 1]->str));
	}
	return f;
}

struct sandbox *
shared_mirror_get(const char *name)
{
	struct sandbox *sb;

	TAILQ_FOREACH(sb, &mirror, entry) {
		if (strcmp(sb->name, name) == 0)
			return sb;
	}
	return NULL;
}

static void
mirror_drop(struct sandbox *sb)
{
	TAILQ_REMOVE(&mirror, sb, entry);
	sb->listed = 0;
	sandbox_unref(sb);
}

void
shared_mirror_forget(const char *name)
{
	struct sandbox *sb = shared_mirror_get(name);

	if (sb != NULL)
		mirror_drop(sb);
}

void
shared_mirror_clear(void)
{
	struct sandbox *sb;

	while ((sb = TAILQ_FIRST(&mirror)) != NULL)
		mirror_drop(sb);
}

/* Whether the agent of a mirror record (f) is reached through its
 * owner's API: on another host (a different advertised address) behind a
 * unix socket (a network-none type; a bridge type's port is reached
 * directly). */
static int
via_owner(json_t *f)
{
	const char *ours = sd.cfg.advertise_addr != NULL ?
	    sd.cfg.advertise_addr : "";

	return strncmp(shared_field(f, "agent"), "unix:", 5) == 0 &&
	    strcmp(shared_field(f, "host"), ours) != 0 &&
	    *shared_field(f, "api") != '\0';
}

/* A TCP agent "host:port" of owner in: its advertised address and a
 * port of its range, the record's own. */
static int
tcp_agent_ok(const char *agent, json_t *f, const struct shared_instance *in)
{
	const char *colon = strrchr(agent, ':');
	const char *port = shared_field(f, "port");
	long p;

	if (colon == NULL || *in->host == '\0' ||
	    (size_t)(colon - agent) != strlen(in->host) ||
	    strncmp(agent, in->host, strlen(in->host)) != 0 ||
	    strcmp(colon + 1, port) != 0 || strspn(port, "0123456789") !=
	    strlen(port) || strlen(port) > 5)
		return 0;
	p = atol(port);
	return p >= in->lo && p <= in->hi;
}

/* Another valid record has agent and was made after created_at: its port
 * was handed on, so an older record of it is a replay. */
static struct sandbox *
agent_holder(const char *name, const char *agent, double created_at)
{
	struct sandbox *sb;

	TAILQ_FOREACH(sb, &mirror, entry) {
		if (strcmp(sb->name, name) != 0 && sb->agent_addr != NULL &&
		    !sb->via_owner && strcmp(sb->agent_addr, agent) == 0 &&
		    sb->created_at > created_at)
			return sb;
	}
	return NULL;
}

/* Why the record f under name is not to be taken, or NULL; token gets
 * the sandbox's token when it is. */
static const char *
record_refusal(const char *name, const char *key, json_t *f,
    char token[TOKEN_HEX_LEN])
{
	const char *owner = shared_field(f, "owner"), *id = shared_field(f, "id");
	const char *agent = shared_field(f, "agent");
	const struct shared_instance *in;
	size_t n = strlen(name);

	if (!shared_name_ok(name))
		return "its name is not a container name";
	if (!shared_record_signed(key, f))
		return "its signature does not check";
	if (strlen(id) != 16 || strspn(id, HEX) != 16 || n <= 16 ||
	    strcmp(name + n - 16, id) != 0)
		return "its id is not its name's";
	if (strcmp(owner, state_instance()) == 0)
		return "it names this instance as its owner";
	if ((in = shared_instance_live(owner)) == NULL)
		return "its owner has no lease (unknown, or gone for good)";
	if (strncmp(agent, "unix:", 5) == 0) {
		char *want = xasprintf("unix:%s/%s/agent.sock", in->run, id);
		int ok = strcmp(agent, want) == 0;

		free(want);
		if (!ok)
			return "its agent is not a socket of its owner's";
	} else if (!tcp_agent_ok(agent, f, in)) {
		return "its agent is not on its owner's address and port range";
	} else if (agent_holder(name, agent, atof(shared_field(f,
	    "created_at"))) != NULL) {
		return "a newer sandbox has its agent's port";
	}
	if (strcmp(shared_field(f, "api"), in->api) != 0 ||
	    strcmp(shared_field(f, "host"), in->host) != 0)
		return "its API or host is not its owner's";
	if (shared_unseal(shared_field(f, "token"), key, token,
	    TOKEN_HEX_LEN) < 0 || strlen(token) != TOKEN_HEX_LEN - 1 ||
	    strspn(token, HEX) != TOKEN_HEX_LEN - 1)
		return "its token does not unseal";
	return NULL;
}

/* Bring a mirror record up to f (a record in Redis that passed
 * record_refusal; token unsealed from it). What others asked of it
 * counts once signed: a release makes it releasing, a take of a warm one
 * running for the taker's session. */
static void
mirror_apply(struct sandbox *sb, const char *key, json_t *f,
    const char *token)
{
	const char *owner = shared_field(f, "owner");
	struct error err;	/* Redis's form holds nothing that can fail */
	json_t *take;

	/* First: the table's hooks are not told of a record of another's. */
	free(sb->owner);
	sb->owner = xstrdup(owner);
	sandbox_record_read(sb, f, SANDBOX_SHARED, &err);
	snprintf(sb->token, sizeof sb->token, "%s", token);
	free(sb->agent_addr);
	sb->via_owner = via_owner(f);
	sb->agent_addr = xstrdup(shared_field(f, sb->via_owner ? "api" :
	    "agent"));
	take = sb->state == SB_WARM ? shared_take_check(key, owner,
	    shared_field(f, "take")) : NULL;
	if (take != NULL) {
		json_t *more = json_loads(shared_field(take, "meta"), 0, NULL);
		const char *session = shared_field(take, "session");

		sb->state = SB_RUNNING;
		free(sb->session);
		sb->session = *session != '\0' ? xstrdup(session) : NULL;
		if (json_is_object(more))
			json_object_update(sb->meta, more);
		json_decref(more);
		sb->updated_at = atof(shared_field(take, "at"));
		json_decref(take);
	}
	if (*shared_field(f, "release") != '\0' && shared_release_ok(key,
	    owner, shared_field(f, "release")))
		sb->state = SB_RELEASING;
	json_decref(sb->shared);
	sb->shared = json_incref(f);
	sandbox_changed(sb);
}

struct sandbox *
shared_mirror_record(const char *name, json_t *f)
{
	char *key = shared_key("sb:%s", name), token[TOKEN_HEX_LEN];
	struct sandbox *sb = shared_mirror_get(name), *older, *next;
	const char *why = record_refusal(name, key, f, token);

	if (why != NULL) {
		log_rate_msg(&refused_rate, LOG_WARN, "shared state: refusing "
		    "the record of %.128s in Redis: %s", name, why);
		if (sb != NULL)
			mirror_drop(sb);
		free(key);
		return NULL;
	}
	if (sb == NULL) {
		sb = xcalloc(1, sizeof *sb);
		sb->name = xstrdup(name);
		sb->meta = json_object();
		sb->refs = 1;
		sb->listed = 1;
		TAILQ_INSERT_TAIL(&mirror, sb, entry);
	}
	mirror_apply(sb, key, f, token);
	explicit_bzero(token, sizeof token);
	/* Its port was another's before: that record is stale. */
	for (older = TAILQ_FIRST(&mirror); older != NULL; older = next) {
		next = TAILQ_NEXT(older, entry);
		if (older != sb && !sb->via_owner && !older->via_owner &&
		    strcmp(older->agent_addr, sb->agent_addr) == 0 &&
		    older->created_at < sb->created_at)
			mirror_drop(older);
	}
	free(key);
	return sb;
}

void
shared_mirror_expire(void)
{
	struct sandbox *sb, *next;

	for (sb = TAILQ_FIRST(&mirror); sb != NULL; sb = next) {
		next = TAILQ_NEXT(sb, entry);
		if (shared_instance_live(sb->owner) == NULL) {
			log_info("shared state: forgetting %s: its owner %s has "
			    "had no lease for SANDBOXD_REDIS_DEAD_GRACE",
			    sb->name, sb->owner);
			mirror_drop(sb);
		}
	}
}

/* Drop what vanished from Redis (names: SMEMBERS sandboxes). */
void
shared_mirror_keep_only(redisReply *names)
{
	struct sandbox *sb, *next;

	for (sb = TAILQ_FIRST(&mirror); sb != NULL; sb = next) {
		size_t i;

		next = TAILQ_NEXT(sb, entry);
		for (i = 0; i < names->elements; i++) {
			if (names->element[i]->type == REDIS_REPLY_STRING &&
			    strcmp(names->element[i]->str, sb->name) == 0)
				break;
		}
		if (i == names->elements)
			mirror_drop(sb);
	}
}

struct sandbox *
shared_first(void)
{
	return TAILQ_FIRST(&mirror);
}

struct sandbox *
shared_find(const char *identity)
{
	struct sandbox *sb;

	TAILQ_FOREACH(sb, &mirror, entry) {
		if (strcmp(sb->name, identity) == 0 || (sb->container_id !=
		    NULL && strcmp(sb->container_id, identity) == 0))
			return sb;
	}
	return NULL;
}

void
shared_session_names(const char *session, json_t *names)
{
	struct sandbox *sb;

	TAILQ_FOREACH(sb, &mirror, entry) {
		if (sb->session != NULL && strcmp(sb->session, session) == 0 &&
		    sb->state != SB_RELEASING && sb->state != SB_RELEASED)
			json_array_append_new(names, json_string(sb->name));
	}
}

void
shared_session_keys(json_t *keys)
{
	struct sandbox *sb;

	TAILQ_FOREACH(sb, &mirror, entry) {
		size_t i;
		json_t *v;

		if (sb->session == NULL || sb->state == SB_RELEASING ||
		    sb->state == SB_RELEASED)
			continue;
		json_array_foreach(keys, i, v) {
			if (strcmp(json_string_value(v), sb->session) == 0)
				break;
		}
		if (i == json_array_size(keys))
			json_array_append_new(keys, json_string(sb->session));
	}
}

size_t
shared_count_live(void)
{
	struct sandbox *sb;
	size_t n = 0;

	TAILQ_FOREACH(sb, &mirror, entry)
		n += sb->state != SB_RELEASED;
	return n;
}
