/*
 * What the shared-state files share (shared_records.c: records, mirror,
 * announcements; shared_pool.c: pool takes and the instance count;
 * shared_sessions.c: heartbeats and the reaper; shared_owners.c: leases
 * and instances gone for good).
 */
#ifndef SHARED_INTERNAL_H
#define SHARED_INTERNAL_H

#include "sandboxd.h"

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
/* The mirror of the other instances' records. */
struct sandbox *shared_mirror_get(const char *name);
struct sandbox *shared_mirror_add(const char *name, json_t *f);
void shared_mirror_apply(struct sandbox *sb, json_t *f);
/* Drop name from the mirror (its record is gone from Redis). */
void shared_mirror_forget(const char *name);
/* The lease (shared_owners.c): renewed at connect, before anything is
 * written, and every second; a lease found lapsed writes all again. */
void shared_lease_connected(void);
void shared_lease_tick(void);
/* Remove what instances gone for good left (the reaper-lock holder). */
void shared_sweep_dead(void);
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
