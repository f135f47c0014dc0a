/*
 * Shared state in Redis: what hands out and counts sandboxes across
 * instances. A take from the pools runs one Lua script (pop names from the
 * type's list until one whose record is still warm, mark it running for
 * the session, return the record), so two instances never hand out one
 * sandbox; MAX_SANDBOX_INSTANCES is a place in the "live" hash, taken by
 * another script that checks the count and adds in the same step.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "log.h"
#include "shared_internal.h"
#include "xmalloc.h"

/* Taking from the shared pool: the oldest warm sandbox of the type,
 * whoever owns it, marked "taken" by us in the same step, so two
 * instances never hand out one sandbox. One whose owner holds no lease is
 * dropped: nobody would answer for it (its owner, back, puts it in the
 * list again). The record and its owner's lease entry are returned to be
 * checked (shared_mirror.c): the script cannot sign, so what it leaves
 * in Redis (the name gone from the list, "taken", the session's set) is
 * only ever a hint; the take itself is the signed "take" field the taker
 * writes next, which the owner and the others follow.
 * KEYS: the type's list. ARGV: record prefix, session, session prefix,
 * lease prefix, our id, instances. */
static const char take_script[] =
    "while true do "
    "local name = redis.call('LPOP', KEYS[1]) "
    "if not name then return nil end "
    "local k = ARGV[1] .. name "
    "if redis.call('TYPE', k).ok == 'hash' then "
    "local f = redis.call('HMGET', k, 'state', 'owner', 'taken') "
    "if f[1] == 'warm' and not f[3] and "
    "redis.call('EXISTS', ARGV[4] .. (f[2] or '')) == 1 then "
    "redis.call('HSET', k, 'taken', ARGV[5]) "
    "if ARGV[2] ~= '' then redis.call('SADD', ARGV[3] .. ARGV[2], name) end "
    "return {name, redis.call('HGETALL', k), "
    "redis.call('HGET', ARGV[6], f[2]) or false} "
    "end end end";

/* Entries popped that did not check before a take makes a new one
 * instead: the list may be anybody's. */
#define TAKE_TRIES 4

/* One take; creq is the caller's until done runs. */
struct take {
	const struct create_request *creq;
	sandbox_done_cb done;
	void *arg;
	int tries;
};

/* done(sb, err), sb NULL when nothing was taken. */
static void
take_end(struct take *t, struct sandbox *sb, const struct error *err)
{
	t->done(sb, err, t->arg);
	free(t);
}

static void
take_failed_later_cb(evutil_socket_t fd, short what, void *arg)
{
	struct error err;

	(void)fd;
	(void)what;
	shared_lost_error(&err);
	take_end(arg, NULL, &err);
}

static int take_send(struct take *t);

/* Another instance's warm sandbox, popped and marked: ours once its
 * record checks, with our signed "take" in it. NULL: it does not. */
static struct sandbox *
take_remote(struct take *t, const char *name, redisReply *record,
    redisReply *lease)
{
	json_t *f = shared_reply_fields(record), *meta;
	char *key = shared_key("sb:%s", name), *text, *take, now[32];
	const char *owner = shared_field(f, "owner");
	struct sandbox *sb;

	if (lease->type == REDIS_REPLY_STRING)
		shared_instance_learn(owner, lease->str);
	meta = t->creq->meta != NULL ? json_deep_copy(t->creq->meta) :
	    json_object();
	if (t->creq->session != NULL)
		json_object_set_new(meta, "session_ctx_id",
		    json_string(t->creq->session));
	text = json_dumps(meta, JSON_COMPACT | JSON_SORT_KEYS);
	snprintf(now, sizeof now, "%.6f", timing_wall());
	take = shared_take_sign(key, owner, state_instance(),
	    t->creq->session != NULL ? t->creq->session : "", text, now);
	json_object_set_new(f, "take", json_string(take));
	if ((sb = shared_mirror_record(name, f)) != NULL) {
		shared_command(shared_ignore_cb, NULL, "HSET %s take %s", key,
		    take);
		shared_announce(name);
	}
	json_decref(meta);
	json_decref(f);
	free(text);
	free(take);
	free(key);
	return sb;
}

static void
taken_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	struct take *t = arg;
	redisReply *r = reply;
	struct sandbox *sb;
	struct error err;
	const char *name;

	(void)ac;
	if (r == NULL || r->type == REDIS_REPLY_ERROR) {
		if (r != NULL)
			error_set(&err, 500, "shared pool take failed: %s", r->str);
		else
			shared_lost_error(&err);
		take_end(t, NULL, &err);
		return;
	}
	name = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
	    r->element[0]->type == REDIS_REPLY_STRING ? r->element[0]->str :
	    NULL;
	sb = name != NULL ? sandbox_find(name) : NULL;
	/* Empty, or one of ours on its way out whose record was not yet
	 * written. */
	if (name == NULL || (sb != NULL && (sb->state != SB_WARM ||
	    sb->op != NULL))) {
		take_end(t, NULL, NULL);
		return;
	}
	if (sb == NULL && (sb = take_remote(t, name, r->element[1],
	    r->element[2])) == NULL) {
		if (++t->tries >= TAKE_TRIES || take_send(t) < 0)
			take_end(t, NULL, NULL);
		return;
	}
	take_end(t, sb, NULL);
}

/* The take script for t, answered to taken_cb; -1 when Redis is gone. */
static int
take_send(struct take *t)
{
	char *pkey = shared_pool_key(t->creq->type->name);
	char *prefix = shared_key("sb:"), *sprefix = shared_key("session:");
	char *lprefix = shared_key("instance:"), *hash = shared_key("instances");
	int rc;

	rc = shared_command(taken_cb, t, "EVAL %s 1 %s %s %s %s %s %s %s",
	    take_script, pkey, prefix, t->creq->session != NULL ?
	    t->creq->session : "",
	    sprefix, lprefix, state_instance(), hash);
	free(pkey);
	free(prefix);
	free(sprefix);
	free(lprefix);
	free(hash);
	return rc;
}

int
shared_take(const struct create_request *creq, sandbox_done_cb done,
    void *arg, struct error *err)
{
	struct take *t;

	if (shared_down_error(err) < 0)
		return -1;
	t = xcalloc(1, sizeof *t);
	t->creq = creq;
	t->done = done;
	t->arg = arg;
	if (take_send(t) < 0)
		sandboxd_defer(take_failed_later_cb, t);
	return 0;
}

/* The live-sandbox count of every instance, MAX_SANDBOX_INSTANCES. */
static const char reserve_script[] =
    "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 1 end "
    "if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then "
    "return redis.call('HLEN', KEYS[1]) * -1 end "
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return 1";

/* The integer a command answered for an, or -1 with an failed: Redis
 * gone, or an answer that is not an integer (what names the command). */
static int
integer_reply(struct shared_answer *an, redisReply *r, const char *what,
    long long *out)
{
	if (r == NULL) {
		an->failed = 1;
		shared_lost_error(&an->err);
		return -1;
	}
	if (r->type != REDIS_REPLY_INTEGER) {
		an->failed = 1;
		error_set(&an->err, 500, "%s: %s", what,
		    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected answer");
		return -1;
	}
	*out = r->integer;
	return 0;
}

static void
reserved_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	struct shared_answer *an = arg;
	long long n;

	(void)ac;
	if (integer_reply(an, reply, "shared instance count", &n) == 0 &&
	    n <= 0) {
		an->failed = 1;
		error_set(&an->err, 503, "the instance limit is reached: %lld "
		    "live sandboxes on all instances (MAX_SANDBOX_INSTANCES=%ld)",
		    -n, sd.cfg.max_instances);
	}
	shared_answer_give(an);
}

void
shared_reserve(struct sandbox *sb, sandbox_done_cb done, void *arg)
{
	struct shared_answer *an = shared_answer_new(sb, done, arg);
	char *key = shared_key("live"), max[32];

	snprintf(max, sizeof max, "%ld", sd.cfg.max_instances);
	if (shared_command(reserved_cb, an, "EVAL %s 1 %s %s %s %s",
	    reserve_script, key, sb->name, state_instance(), max) < 0) {
		an->failed = 1;
		shared_down_error(&an->err);
		sandboxd_defer(shared_answer_later_cb, an);
	}
	free(key);
}

/* Host ports are a host's: the set of the address sandboxes publish on
 * (SANDBOXD_ADVERTISE_ADDR, else loopback, where several instances on one
 * host share it). */
char *
shared_ports_key(void)
{
	return shared_key("%s:%s", sd.cfg.redis_port_key,
	    sd.cfg.advertise_addr != NULL ? sd.cfg.advertise_addr :
	    "127.0.0.1");
}

static void
claimed_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	struct shared_answer *an = arg;
	long long added;

	(void)ac;
	if (integer_reply(an, reply, "shared host ports", &added) == 0 &&
	    added == 0) {
		an->failed = 1;
		error_set(&an->err, 409, "host port %d is another instance's",
		    an->sb->port);
	}
	shared_answer_give(an);
}

void
shared_claim_port(struct sandbox *sb, sandbox_done_cb done, void *arg)
{
	struct shared_answer *an = shared_answer_new(sb, done, arg);
	char *key = shared_ports_key();

	if (shared_command(claimed_cb, an, "SADD %s %d", key, sb->port) < 0) {
		an->failed = 1;
		shared_down_error(&an->err);
		sandboxd_defer(shared_answer_later_cb, an);
	}
	free(key);
}

void
shared_release_port(int port)
{
	char *key = shared_ports_key();

	shared_command(shared_ignore_cb, NULL, "SREM %s %d", key, port);
	free(key);
}

void
shared_unreserve(const char *name)
{
	char *key = shared_key("live");

	shared_command(shared_ignore_cb, NULL, "HDEL %s %s", key, name);
	free(key);
}

/* Places of ours that no sandbox holds (a crash between the place and
 * the record) are given back (the answer to HGETALL live at connect). */
void
shared_live_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply;
	json_t *f;
	const char *name;
	json_t *v;

	(void)ac;
	(void)arg;
	if (r == NULL || !sd.ready)
		return;
	f = shared_reply_fields(r);
	json_object_foreach(f, name, v) {
		struct sandbox *sb;

		if (strcmp(json_string_value(v), state_instance()) != 0)
			continue;
		sb = sandbox_find(name);
		if (sb == NULL || sb->state == SB_RELEASED)
			shared_unreserve(name);
	}
	json_decref(f);
}
