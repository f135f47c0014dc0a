/*
 * What the shared-state files share (shared_records.c: our records,
 * announcements; shared_mirror.c: the others' records, checked;
 * shared_crypto.c: signatures and seals; shared_pool.c: pool takes and
 * the instance count; shared_sessions.c: activity and the reaper;
 * shared_owners.c: leases and instances gone for good).
 */
#ifndef SHARED_INTERNAL_H
#define SHARED_INTERNAL_H

#include "shared.h"

#include <netdb.h>

#include <event2/util.h>
#include <hiredis/hiredis.h>

/* An answer to give a sandbox_done_cb after a Redis round trip (or, when
 * Redis is down, on the loop's next turn); holds a reference to sb, freed
 * by shared_answer_give. */
struct shared_answer {
	struct sandbox *sb;
	sandbox_done_cb done;
	void *arg;
	struct error err;
	int failed;
};

struct shared_answer *shared_answer_new(struct sandbox *sb,
    sandbox_done_cb done, void *arg);
void shared_answer_give(struct shared_answer *an);
/* sandboxd_defer's callback: shared_answer_give(arg). */
void shared_answer_later_cb(evutil_socket_t fd, short what, void *arg);

/* Read name's record (and its owner's lease) from Redis and apply it
 * (shared_records.c): -1 when it could not be asked. With cb(reply,
 * arg) instead; shared_record_cb applies a reply for the name in arg
 * (xstrdup'd, freed). */
int shared_fetch(const char *name);
int shared_fetch_with(const char *name, shared_reply_cb cb, void *arg);
void shared_record_cb(struct redisAsyncContext *ac, void *reply, void *arg);
/* A reply nobody waits for: errors are logged. */
void shared_ignore_cb(struct redisAsyncContext *ac, void *reply, void *arg);
/* Tell the others that the record of name changed. */
void shared_announce(const char *name);
/* PREFIX <pool key>:<type>. Caller frees. */
char *shared_pool_key(const char *type);
/* A field of a record as field -> string object; "" when missing. */
const char *shared_field(json_t *f, const char *k);
/* An HGETALL answer as field -> string. New reference. */
json_t *shared_reply_fields(redisReply *r);

/* Signatures and seals (shared_crypto.c), keyed by SANDBOXD_REDIS_SECRET
 * (shared_secret_load), each bound to the Redis key its value is under. */
#define SHARED_MAC_HEX 65		/* HMAC-SHA256 in hex and a NUL */
#define SHARED_NFIELDS 19
/* A record's fields, in the order they are signed. */
extern const char *const shared_fields[SHARED_NFIELDS];
void shared_mac(char out[SHARED_MAC_HEX], const char *domain,
    const char *key, const char *const *parts, size_t nparts);
/* Constant time. */
int shared_mac_ok(const char *mac, const char *domain, const char *key,
    const char *const *parts, size_t nparts);
/* plain sealed for key, in hex; caller frees. */
char *shared_seal(const char *plain, const char *key);
/* 0 and the plain text in out (size bytes), or -1. */
int shared_unseal(const char *sealed, const char *key, char *out,
    size_t size);
/* Set f's "mac" for its fields; whether f's "mac" checks. */
void shared_record_sign(const char *key, json_t *f);
int shared_record_signed(const char *key, json_t *f);
/* The "take" field of a warm sandbox (of owner) taken by instance by
 * for session with meta (compact JSON) at time at. Caller frees. */
char *shared_take_sign(const char *key, const char *owner, const char *by,
    const char *session, const char *meta, const char *at);
/* A "take" field as {by, session, meta, at, mac} when it checks, else
 * NULL. New reference. */
json_t *shared_take_check(const char *key, const char *owner,
    const char *take);
/* The "release" field: instance by asks owner to release. */
char *shared_release_sign(const char *key, const char *owner,
    const char *by);
int shared_release_ok(const char *key, const char *owner,
    const char *release);

/* The instances' leases (shared_owners.c): what each publishes. Owned
 * by the table. */
struct shared_instance {
	char *id;
	char *api;			/* where its API is reached */
	char *host;			/* SANDBOXD_ADVERTISE_ADDR or "" */
	char *run;			/* its agents' socket directory */
	int lo, hi;			/* its PORT_RANGE */
};

/* An entry of the "instances" hash ("<ms> <lease ms> <lease>"): taken
 * when its lease is signed for id and newer than the one known. */
void shared_instance_learn(const char *id, const char *entry);
/* id's lease, while it has not been lapsed for SANDBOXD_REDIS_DEAD_GRACE;
 * else NULL. */
const struct shared_instance *shared_instance_live(const char *id);
void shared_instances_free(void);
/* Redis's clock (ms), followed on our monotonic one from its TIME. */
void shared_clock_set(long long redis_ms);
long long shared_clock_ms(void);

/* The mirror of the other instances' records (shared_mirror.c). */
/* A container name, as a record's name must be. */
int shared_name_ok(const char *name);
struct sandbox *shared_mirror_get(const char *name);
/* f, read from Redis under name: into the mirror and returned when it
 * is a record its owner could have written, else NULL (and name leaves
 * the mirror). */
struct sandbox *shared_mirror_record(const char *name, json_t *f);
/* Drop name from the mirror (its record is gone from Redis). */
void shared_mirror_forget(const char *name);
/* Drop the records of owners gone for good. */
void shared_mirror_expire(void);
/* Drop the records not named in names (SMEMBERS sandboxes). */
void shared_mirror_keep_only(redisReply *names);
void shared_mirror_clear(void);
/* The lease (shared_owners.c): renewed at connect, before anything is
 * written, and every second; a lease found lapsed writes all again. */
void shared_lease_connected(void);
void shared_lease_tick(void);
/* Remove what instances gone for good left (the reaper-lock holder). */
void shared_sweep_dead(void);
/* Sessions' activity (shared_sessions.c), on its own channel: a
 * message heard; the subscription (re)started; memory freed. */
void shared_activity_heard(const char *msg);
void shared_activity_listening(void);
void shared_activity_free(void);
/* The answer to HGETALL live at connect (shared_pool.c). */
void shared_live_cb(struct redisAsyncContext *ac, void *reply, void *arg);

/* A host name resolved off the loop (shared_resolve.c). Lives as long
 * as the process (glibc may still write into one at exit). */
struct shared_resolve {
	struct gaicb req;
	struct addrinfo hints;
	struct event *poll;
	int busy;
	void (*done)(const char *addr, const char *why, void *arg);
	void *arg;
};

int shared_is_numeric(const char *host);
/* done(numeric address, NULL, arg) or done(NULL, why, arg), later. */
void shared_resolve(struct shared_resolve *r, const char *host,
    void (*done)(const char *addr, const char *why, void *arg), void *arg);
void shared_resolve_stop(struct shared_resolve *r);

#endif
