/*
 * The Docker Engine API calls sandboxd makes, over the daemon's unix socket
 * with our HTTP client: each is one asynchronous request whose answer comes
 * back parsed, with Docker's failures turned into a struct error (404 no
 * such container or image, 409 conflict, 502 anything else, 504 timeout).
 */
#ifndef DOCKER_API_H
#define DOCKER_API_H

#include <jansson.h>

#include "error.h"

struct event_base;
struct docker;

/* answer is borrowed for the call (NULL for empty answers); err NULL on
 * success (2xx). */
typedef void (*docker_cb)(json_t *answer, const struct error *err, void *arg);
typedef void (*docker_raw_cb)(const char *body, size_t len,
    const struct error *err, void *arg);

/* addr: "unix:/var/run/docker.sock". At most max_inflight calls are sent
 * at once, of which at most max_ends stop or remove a container; the rest
 * wait in order, creates behind all others. Owned by the backend. */
struct docker *docker_new(struct event_base *base, const char *addr,
    size_t max_inflight, size_t max_ends);
void docker_free(struct docker *d);
/* Give up every call, sent or queued: each callback runs now with err
 * (503) naming why. For an exit that cannot wait for the daemon (its
 * callers' state must still be there). */
void docker_abort(struct docker *d, const char *why);
/* Change how many calls may be in flight; waiting ones start at once when
 * it grows. */
void docker_set_max_inflight(struct docker *d, size_t max_inflight,
    size_t max_ends);

/* Told (with the call's arg) when a call goes to the daemon: a progress
 * note, not a completion, so it may run before the call that queued it
 * returned. */
typedef void (*docker_sent_cb)(void *arg);

/* POST /containers/create?name=NAME with body (borrowed); sent (may be
 * NULL) runs when it leaves the queue. Creates wait until no other call
 * does. */
void docker_container_create(struct docker *d, const char *name, json_t *body,
    docker_sent_cb sent, docker_cb done, void *arg);
/* Starting a running container and stopping a stopped one succeed. */
void docker_container_start(struct docker *d, const char *id, docker_cb done,
    void *arg);
void docker_container_stop(struct docker *d, const char *id, int seconds,
    docker_cb done, void *arg);
/* DELETE /containers/ID?force=1&v=1 */
void docker_container_remove(struct docker *d, const char *id,
    docker_cb done, void *arg);
/* GET /version: {"Version": ...}. */
void docker_version(struct docker *d, docker_cb done, void *arg);
/* 1 when an engine of this version (its "Version") can deadlock while two
 * containers exit at once (moby/moby#46661; unknown versions count as
 * such). */
int docker_exits_may_deadlock(const char *version);
void docker_container_inspect(struct docker *d, const char *id,
    docker_cb done, void *arg);
/* POST /containers/ID/pause and /unpause: the cgroup freezer; 409 when
 * it is paused already / not paused. */
void docker_container_pause(struct docker *d, const char *id, docker_cb done,
    void *arg);
void docker_container_unpause(struct docker *d, const char *id,
    docker_cb done, void *arg);
/* GET /containers/ID/stats?stream=false&one-shot=true: one sample, at
 * once (without one-shot the daemon waits a second for a second one). */
void docker_container_stats(struct docker *d, const char *id, docker_cb done,
    void *arg);
/* GET /containers/json?all=1&filters={"label":["LABEL=VALUE"]}, with
 * not_running also "status": every state but running. */
void docker_container_list(struct docker *d, const char *label,
    const char *value, int not_running, docker_cb done, void *arg);
/* GET /containers/ID/logs, stdout and stderr, the last lines, demuxed. */
void docker_container_logs(struct docker *d, const char *id, int lines,
    docker_raw_cb done, void *arg);

#endif
