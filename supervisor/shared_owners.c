/*
 * Shared state in Redis: instances and their leases. Every instance
 * renews instance:<id> (SANDBOXD_REDIS_LEASE, a key with a TTL) each
 * second and notes the time of the renewal, by Redis's clock, in the
 * "instances" hash. An instance whose lease has lapsed is not answering:
 * its warm sandboxes are no longer handed out (the take script drops
 * them), and once SANDBOXD_REDIS_DEAD_GRACE has passed as well (a
 * restart of the owner finishes well within it), the reaper-lock holder
 * removes all it left in Redis: records, session mappings, pool entries,
 * live places and port claims. Nobody touches its containers: only their
 * owner talks to its Docker, and an owner that comes back adopts them and
 * writes their records again. Redis's clock, not ours, decides what has
 * lapsed, so hosts with skewed clocks agree.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "log.h"
#include "shared_internal.h"
#include "xmalloc.h"

/* Records removed in one sweep; the rest go in the next rounds, so one
 * script never holds Redis for long. */
#define SWEEP_MAX 500

/* KEYS: instance:<id>, instances. ARGV: lease value, lease ms, id.
 * Answers whether the lease was still held before this renewal. */
static const char renew_script[] =
    "local had = redis.call('EXISTS', KEYS[1]) "
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
    "local t = redis.call('TIME') "
    "redis.call('HSET', KEYS[2], ARGV[3], "
    "string.format('%d %d', t[1] * 1000 + math.floor(t[2] / 1000), "
    "tonumber(ARGV[2]))) "
    "return had";

/* KEYS: instances. ARGV: key prefix, grace ms, pool key prefix, the
 * channel, our id, most records to remove. Removes what the instances
 * whose lease lapsed more than grace ago left, announces each name, and
 * answers {dead ids, removed names}. An instance is forgotten only once
 * none of its records is left. */
static const char sweep_script[] =
    "local p, grace, max = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[6]) "
    "local t = redis.call('TIME') "
    "local now = t[1] * 1000 + math.floor(t[2] / 1000) "
    "local dead, gone, ids = {}, {}, {} "
    "local inst = redis.call('HGETALL', KEYS[1]) "
    "for i = 1, #inst, 2 do "
    "local seen, lease = string.match(inst[i + 1], '^(%d+) (%d+)$') "
    "if seen and redis.call('EXISTS', p .. 'instance:' .. inst[i]) == 0 "
    "and now - tonumber(seen) > tonumber(lease) + grace then "
    "dead[inst[i]] = true table.insert(ids, inst[i]) end end "
    "if #ids == 0 then return {ids, gone} end "
    "local left = {} "
    "for _, name in ipairs(redis.call('SMEMBERS', p .. 'sandboxes')) do "
    "local k = p .. 'sb:' .. name "
    "local f = redis.call('HMGET', k, 'owner', 'session', 'type', 'port', "
    "'ports') "
    "if f[1] and dead[f[1]] then "
    "if #gone >= max then left[f[1]] = true else "
    "redis.call('DEL', k) "
    "redis.call('SREM', p .. 'sandboxes', name) "
    "redis.call('HDEL', p .. 'live', name) "
    "if f[2] and f[2] ~= '' then "
    "redis.call('SREM', p .. 'session:' .. f[2], name) end "
    "if f[3] and f[3] ~= '' then "
    "redis.call('LREM', ARGV[3] .. f[3], 0, name) end "
    "if f[4] and f[4] ~= '0' and f[5] and f[5] ~= '' then "
    "redis.call('SREM', f[5], f[4]) end "
    "redis.call('PUBLISH', ARGV[4], ARGV[5] .. ' ' .. name) "
    "table.insert(gone, name) end end end "
    "local live = redis.call('HGETALL', p .. 'live') "
    "for i = 1, #live, 2 do "
    "if dead[live[i + 1]] and not left[live[i + 1]] then "
    "redis.call('HDEL', p .. 'live', live[i]) end end "
    "for _, id in ipairs(ids) do "
    "if not left[id] then redis.call('HDEL', KEYS[1], id) end end "
    "return {ids, gone}";

static void
renewed_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply;

	(void)ac;
	(void)arg;
	if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
		shared_ignore_cb(ac, reply, arg);
		return;
	}
	/* Lapsed while we ran (a stalled loop, Redis lost it): what
	 * others took for dead may be gone from Redis; write it all. */
	if (r->integer == 0) {
		log_warn("shared state: this instance's lease had lapsed: "
		    "writing its records again");
		shared_records_connected();
	}
}

/* Renew our lease; cb NULL: the answer is not looked at (at connect,
 * where everything is written anyway). */
static void
renew(shared_reply_cb cb)
{
	char *key = shared_key("instance:%s", state_instance());
	char *hash = shared_key("instances");
	char *value, *api, ms[32];

	api = shared_api_addr();
	value = xasprintf("{\"pid\":%ld,\"addr\":\"%s\",\"port\":%ld,"
	    "\"api\":\"%s\"}", (long)getpid(), sd.cfg.advertise_addr != NULL ?
	    sd.cfg.advertise_addr : sd.cfg.host, sd.cfg.port, api);
	free(api);
	snprintf(ms, sizeof ms, "%.0f", sd.cfg.redis_lease * 1000);
	shared_command(cb != NULL ? cb : shared_ignore_cb, NULL,
	    "EVAL %s 2 %s %s %s %s %s", renew_script, key, hash, value, ms,
	    state_instance());
	free(key);
	free(hash);
	free(value);
}

/* The advertised address, else where we listen (loopback for a wildcard:
 * then the instances share a host). */
char *
shared_api_addr(void)
{
	const char *host = sd.cfg.advertise_addr != NULL ?
	    sd.cfg.advertise_addr : sd.cfg.host;

	if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "") == 0)
		host = "127.0.0.1";
	else if (strcmp(host, "::") == 0)
		host = "::1";
	if (strchr(host, ':') != NULL)
		return xasprintf("[%s]:%ld", host, sd.cfg.port);
	return xasprintf("%s:%ld", host, sd.cfg.port);
}

void
shared_lease_connected(void)
{
	renew(NULL);
}

void
shared_lease_tick(void)
{
	renew(renewed_cb);
}

static void
swept_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply, *ids, *names;

	(void)ac;
	(void)arg;
	if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_ARRAY ||
	    r->element[1]->type != REDIS_REPLY_ARRAY) {
		shared_ignore_cb(ac, reply, arg);
		return;
	}
	ids = r->element[0];
	names = r->element[1];
	for (size_t i = 0; i < ids->elements; i++) {
		if (ids->element[i]->type == REDIS_REPLY_STRING)
			log_warn("shared state: instance %s has held no lease "
			    "for SANDBOXD_REDIS_DEAD_GRACE (%.0f s): removing "
			    "what it left in Redis", ids->element[i]->str,
			    sd.cfg.redis_dead_grace);
	}
	/* Announced to the others by the script; we skip our own
	 * announcements, so forget them here. */
	for (size_t i = 0; i < names->elements; i++) {
		if (names->element[i]->type == REDIS_REPLY_STRING)
			shared_mirror_forget(names->element[i]->str);
	}
	if (names->elements > 0)
		log_info("shared state: removed %zu records of instances "
		    "gone", names->elements);
}

void
shared_sweep_dead(void)
{
	char *hash = shared_key("instances"), *pool = shared_pool_key("");
	char *channel = shared_key("events"), grace[32], max[32];

	snprintf(grace, sizeof grace, "%.0f", sd.cfg.redis_dead_grace * 1000);
	snprintf(max, sizeof max, "%d", SWEEP_MAX);
	shared_command(swept_cb, NULL, "EVAL %s 1 %s %s %s %s %s %s %s",
	    sweep_script, hash, sd.cfg.redis_prefix, grace, pool, channel,
	    state_instance(), max);
	free(hash);
	free(pool);
	free(channel);
}
