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
 *
 * The lease also says, signed (shared_crypto.c), what the instance
 * publishes: its API, its advertised address and port range, its agents'
 * socket directory, and until when (Redis's clock) it holds; the others
 * take a record only when it keeps within that (shared_mirror.c), and
 * only while its owner is not gone for good. Each renewal's answer
 * brings every instance's lease and Redis's time, which each instance
 * follows on its monotonic clock.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "log.h"
#include "shared_internal.h"
#include "xmalloc.h"

/* Records removed in one sweep; the rest go in the next rounds, so one
 * script never holds Redis for long. */
#define SWEEP_MAX 500

/* KEYS: instance:<id>, instances. ARGV: the lease, lease ms, id.
 * Answers {whether the lease was still held before this renewal, Redis's
 * time in ms, every instance's entry}. */
static const char renew_script[] =
    "local had = redis.call('EXISTS', KEYS[1]) "
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
    "local t = redis.call('TIME') "
    "local now = t[1] * 1000 + math.floor(t[2] / 1000) "
    "redis.call('HSET', KEYS[2], ARGV[3], "
    "string.format('%d %d ', now, tonumber(ARGV[2])) .. ARGV[1]) "
    "return {had, now, redis.call('HGETALL', KEYS[2])}";

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
    "local seen, lease = string.match(inst[i + 1], '^(%d+) (%d+)') "
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

/* What an instance's lease says (its signed part). Owned by the table;
 * lives as long as the process (a few per instance ever seen). */
struct instance {
	struct shared_instance pub;
	long long until;		/* the lease lapses, Redis's clock ms */
};

static struct instance *table;
static size_t ntable;
/* Redis's clock minus our monotonic one, in ms. */
static long long clock_offset;

void
shared_clock_set(long long redis_ms)
{
	clock_offset = redis_ms - timing_monotonic_ms();
}

long long
shared_clock_ms(void)
{
	return timing_monotonic_ms() + clock_offset;
}

/* The parts of a lease's MAC, from its JSON (numbers as decimal text,
 * in buf). */
static size_t
lease_parts(json_t *o, const char **parts, char buf[4][32])
{
	static const char *const nums[] = { "pid", "lo", "hi", "until" };

	for (size_t i = 0; i < 4; i++)
		snprintf(buf[i], sizeof buf[i], "%" JSON_INTEGER_FORMAT,
		    json_integer_value(json_object_get(o, nums[i])));
	parts[0] = buf[0];
	parts[1] = shared_field(o, "api");
	parts[2] = shared_field(o, "host");
	parts[3] = buf[1];
	parts[4] = buf[2];
	parts[5] = shared_field(o, "run");
	parts[6] = buf[3];
	return 7;
}

/* Our lease, signed. Caller frees. */
static char *
lease_value(void)
{
	char *key = shared_key("instance:%s", state_instance());
	char *api = shared_api_addr(), *run, *value, buf[4][32];
	char mac[SHARED_MAC_HEX];
	const char *parts[7];
	json_t *o;

	run = xasprintf("%s/run", sd.cfg.state_dir);
	o = json_pack("{s:I, s:s, s:s, s:i, s:i, s:s, s:I}",
	    "pid", (json_int_t)getpid(), "api", api, "host",
	    sd.cfg.advertise_addr != NULL ? sd.cfg.advertise_addr : "",
	    "lo", sd.cfg.port_lo, "hi", sd.cfg.port_hi, "run", run,
	    "until", (json_int_t)(shared_clock_ms() +
	    (long long)(sd.cfg.redis_lease * 1000)));
	shared_mac(mac, "lease", key, parts, lease_parts(o, parts, buf));
	json_object_set_new(o, "mac", json_string(mac));
	value = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	free(run);
	free(api);
	free(key);
	return value;
}

static struct instance *
table_find(const char *id)
{
	for (size_t i = 0; i < ntable; i++) {
		if (strcmp(table[i].pub.id, id) == 0)
			return &table[i];
	}
	return NULL;
}

void
shared_instance_learn(const char *id, const char *entry)
{
	const char *sp = strchr(entry, ' ');
	char *key, buf[4][32];
	const char *parts[7];
	struct instance *in;
	json_int_t until;
	json_t *o;

	/* "<renewed ms> <lease ms> <lease>" */
	if (sp == NULL || (sp = strchr(sp + 1, ' ')) == NULL ||
	    strlen(id) != 32 || strspn(id, "0123456789abcdef") != 32)
		return;
	o = json_loads(sp + 1, 0, NULL);
	key = shared_key("instance:%s", id);
	if (!json_is_object(o) || !shared_mac_ok(shared_field(o, "mac"),
	    "lease", key, parts, lease_parts(o, parts, buf)))
		goto out;
	until = json_integer_value(json_object_get(o, "until"));
	in = table_find(id);
	/* An older lease said again (a replay) changes nothing. */
	if (in != NULL && in->until >= until)
		goto out;
	if (in == NULL) {
		table = xreallocarray(table, ntable + 1, sizeof *table);
		in = &table[ntable++];
		memset(in, 0, sizeof *in);
		in->pub.id = xstrdup(id);
	}
	free(in->pub.api);
	free(in->pub.host);
	free(in->pub.run);
	in->pub.api = xstrdup(shared_field(o, "api"));
	in->pub.host = xstrdup(shared_field(o, "host"));
	in->pub.run = xstrdup(shared_field(o, "run"));
	in->pub.lo = (int)json_integer_value(json_object_get(o, "lo"));
	in->pub.hi = (int)json_integer_value(json_object_get(o, "hi"));
	in->until = until;
out:
	json_decref(o);
	free(key);
}

const struct shared_instance *
shared_instance_live(const char *id)
{
	struct instance *in = id != NULL ? table_find(id) : NULL;

	if (in == NULL || shared_clock_ms() > in->until +
	    (long long)(sd.cfg.redis_dead_grace * 1000))
		return NULL;
	return &in->pub;
}

void
shared_instances_free(void)
{
	for (size_t i = 0; i < ntable; i++) {
		free(table[i].pub.id);
		free(table[i].pub.api);
		free(table[i].pub.host);
		free(table[i].pub.run);
	}
	free(table);
	table = NULL;
	ntable = 0;
}

/* The answer to a renewal: {had, Redis's ms, instances}. arg: non-NULL
 * on the tick, where a lease found lapsed has everything written again
 * (at connect it is anyway). */
static void
renewed_cb(struct redisAsyncContext *ac, void *reply, void *arg)
{
	redisReply *r = reply, *all;

	if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_INTEGER ||
	    r->element[1]->type != REDIS_REPLY_INTEGER ||
	    r->element[2]->type != REDIS_REPLY_ARRAY) {
		shared_ignore_cb(ac, reply, arg);
		return;
	}
	shared_clock_set(r->element[1]->integer);
	all = r->element[2];
	for (size_t i = 0; i + 1 < all->elements; i += 2) {
		if (all->element[i]->type == REDIS_REPLY_STRING &&
		    all->element[i + 1]->type == REDIS_REPLY_STRING)
			shared_instance_learn(all->element[i]->str,
			    all->element[i + 1]->str);
	}
	shared_mirror_expire();
	/* Lapsed while we ran (a stalled loop, Redis lost it): what
	 * others took for dead may be gone from Redis; write it all. */
	if (arg != NULL && r->element[0]->integer == 0) {
		log_warn("shared state: this instance's lease had lapsed: "
		    "writing its records again");
		shared_records_connected();
	}
}

static void
renew(void *tick)
{
	char *key = shared_key("instance:%s", state_instance());
	char *hash = shared_key("instances");
	char *value = lease_value(), ms[32];

	snprintf(ms, sizeof ms, "%.0f", sd.cfg.redis_lease * 1000);
	shared_command(renewed_cb, tick, "EVAL %s 2 %s %s %s %s %s",
	    renew_script, key, hash, value, ms, state_instance());
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
	static int tick;

	renew(&tick);
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
