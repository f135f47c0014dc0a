/*
 * shared.h: several sandboxd on one Redis (REDIS_ENABLED), what the rest
 * of sandboxd calls (shared_internal.h is what the shared_*.c files share
 * among them). Nothing here runs without it.
 */
#ifndef SANDBOXD_SHARED_H
#define SANDBOXD_SHARED_H

#include "sandboxd.h"

struct redisAsyncContext;
typedef void (*shared_reply_cb)(struct redisAsyncContext *ac, void *reply,
    void *arg);
typedef void (*shared_done_cb)(struct sandbox *sb, void *arg);
/* The secret the instances sign and seal with (SANDBOXD_REDIS_SECRET or
 * SANDBOXD_REDIS_SECRET_FILE, at least 32 characters): the keys are
 * derived and the configuration's copy wiped. -1 with err naming the
 * key. */
int shared_secret_load(struct sandboxd_config *cfg, struct error *err);
/* Connect, AUTH, SELECT, PING, blocking, before the loop: -1 with err
 * naming the setting at fault. */
int shared_check(struct error *err);
void shared_start(void);
void shared_stop(void);
int shared_enabled(void);
int shared_up(void);
/* 0 while Redis is up, else -1 with err (503) saying so. */
int shared_down_error(struct error *err);
/* err (503): Redis went away while a request waited on it. */
void shared_lost_error(struct error *err);
const char *shared_server_name(void);
/* PREFIX + printf(fmt, ...). Caller frees. */
char *shared_key(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Queue a command; -1 (cb never runs) while Redis is down. */
int shared_command(shared_reply_cb cb, void *arg, const char *fmt, ...);
int shared_command_argv(shared_reply_cb cb, void *arg, int argc,
    const char **argv, const size_t *lens);
void shared_records_init(void);
void shared_records_free(void);
void shared_records_subscribe(struct redisAsyncContext *ac);
/* Both connections are up: publish ours again, reload the others', then
 * the hooks of shared_on_up. */
void shared_records_connected(void);
/* cb() each time Redis is back (and at start) and our records are
 * written again: what else it must hear again, what waited for it. */
void shared_on_up(void (*cb)(void));
/* Who carries out what another instance asked of a sandbox of ours, once
 * its record says so, signed: its release (lifecycle.c); its hand-out
 * from the pool, with meta (may be NULL) to add, to session (may be NULL)
 * (pool.c). */
void shared_on_release_asked(void (*cb)(struct sandbox *sb));
void shared_on_take_asked(void (*cb)(struct sandbox *sb, json_t *meta,
    const char *session));
/* Write sb's record now; done once Redis announced it to the others. */
void shared_publish(struct sandbox *sb, shared_done_cb done, void *arg);
/* Write everything now; done once Redis has it all. */
void shared_flush(void (*done)(void *arg), void *arg);
struct sandbox *shared_find(const char *identity);
/* Read name's record from Redis now (an instance's announcement may come
 * a moment after its create answered a client who then asks us), then
 * done(arg, 1), or done(arg, 0) when Redis went away meanwhile. -1 (done
 * never runs) while Redis is down. */
int shared_lookup(const char *name, void (*done)(void *arg, int ok),
    void *arg);
/* The same for the sandboxes Redis has bound to session that we have not
 * heard of. */
int shared_lookup_session(const char *session,
    void (*done)(void *arg, int ok), void *arg);
/* The other instances' records (sandbox_next walks on). */
struct sandbox *shared_first(void);
void shared_session_names(const char *session, json_t *names);
void shared_session_keys(json_t *keys);
size_t shared_count_live(void);
/* Ask the owner of a remote sandbox to release it. */
void shared_release_remote(struct sandbox *sb, sandbox_done_cb done,
    void *arg);
/* The oldest warm sandbox of creq's type from every instance's pool:
 * done(sb) with one of ours still WARM (the caller hands it out),
 * another's taken for creq (RUNNING), or done(NULL, NULL) when none is
 * warm; done(NULL, err) when Redis went away. Later, always; creq lives
 * until then. -1 with err (503) when Redis is down. */
int shared_take(const struct create_request *creq, sandbox_done_cb done,
    void *arg, struct error *err);
void shared_touch_session(const char *session, double when);
/* Count sb against MAX_SANDBOX_INSTANCES of all instances: done(sb,
 * NULL) with a place, done(sb, err) with 503 when full. */
void shared_reserve(struct sandbox *sb, sandbox_done_cb done, void *arg);
void shared_unreserve(const char *name);
/* Claim sb->port on this host for every instance (REDIS_PORT_KEY):
 * done(sb, NULL) when it is ours, done(sb, err) with 409 when another
 * instance holds it, 503 when Redis is away. */
void shared_claim_port(struct sandbox *sb, sandbox_done_cb done, void *arg);
void shared_release_port(int port);
/* The set of this host's claimed ports. Free it. */
char *shared_ports_key(void);
/* host:port where the other instances reach our API. Free it. */
char *shared_api_addr(void);
/* A reaper round of interval seconds, on the instance that takes the
 * lock: expired(session, idle seconds) for each session idle past
 * HEARTBEAT_TIMEOUT, which releases its sandboxes wherever they are and
 * says how many live ones it has. */
void shared_reap(double interval, size_t (*expired)(const char *session,
    double idle));
/* shared_uploads.c (FILE_SYSTEM=oss): mark sb's storage_path as on its
 * way to the store (a release asked of its owner), clear the mark (the
 * owner's release is over), and ask whether it is there: done(arg,
 * pending) later, or -1 (done never runs) while Redis is down. */
void shared_upload_mark(const struct sandbox *sb);
void shared_upload_clear(const char *storage_path);
int shared_upload_pending(const char *storage_path,
    void (*done)(void *arg, int pending), void *arg);

#endif
