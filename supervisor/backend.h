/*
 * What sandboxd needs from a container engine, asynchronously: create and
 * start a container from a spec, remove, start, stop, inspect, list ours,
 * and read a container's last log lines. The Docker Engine API is the first
 * backend (backend_docker.c); a daemonless OCI runtime or Kubernetes would
 * be others behind the same operations. Each operation answers through its
 * callback after it returned, never before, also when it fails at once
 * (sandboxd.h's contract).
 */
#ifndef BACKEND_H
#define BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "config.h"
#include "error.h"

struct event_base;
struct backend;

/* Told, with the create's arg, when a create leaves sandboxd's queue for
 * the engine (a progress note: it may run before create returned). */
typedef void (*backend_sent_cb)(void *arg);

/* What to run; strings are borrowed for the duration of the call. */
struct backend_spec {
	const char *name;
	const char *image;
	const char *const *cmd;		/* agent arguments, NULL-terminated */
	const char *const *env;		/* "K=V", NULL-terminated */
	json_t *labels;			/* object of strings, borrowed */
	const char *const *binds;	/* "host:container[:ro]", NULL-term. */
	int64_t memory;
	int64_t nano_cpus;
	int64_t pids;
	const char *network;		/* "none" or "bridge" */
	const struct config_list *cap_add;
	const struct config_list *entrypoint;	/* empty: the image's */
	int host_port;			/* publish container_port here; 0: no */
	const char *host_ip;		/* on this address; NULL: 127.0.0.1 */
	int container_port;
	backend_sent_cb sent;		/* may be NULL */
};

/* A container as listed: ids and labels (borrowed, valid in the callback). */
struct backend_container {
	const char *id;
	const char *name;		/* without Docker's leading '/' */
	const char *state;		/* "running", "exited", ... */
	json_t *labels;
};

typedef void (*backend_id_cb)(const char *id, const struct error *err,
    void *arg);
typedef void (*backend_done_cb)(const struct error *err, void *arg);
/* status: "running", "exited", ... (NULL with err) */
typedef void (*backend_status_cb)(const char *status, int exit_code,
    const struct error *err, void *arg);
typedef void (*backend_list_cb)(const struct backend_container *v, size_t n,
    const struct error *err, void *arg);
/* The last lines of output, NUL-terminated (NULL with err). */
typedef void (*backend_logs_cb)(const char *text, const struct error *err,
    void *arg);

struct backend_ops {
	const char *name;
	/* Create and start; id is set even when the start failed (err), so
	 * the caller can remove what was made. */
	void (*create)(struct backend *b, const struct backend_spec *spec,
	    backend_id_cb done, void *arg);
	/* Force-remove with its anonymous volumes; a missing one is fine. */
	void (*remove)(struct backend *b, const char *id, backend_done_cb done,
	    void *arg);
	void (*start)(struct backend *b, const char *id, backend_done_cb done,
	    void *arg);
	void (*stop)(struct backend *b, const char *id, double timeout,
	    backend_done_cb done, void *arg);
	void (*status)(struct backend *b, const char *id, backend_status_cb done,
	    void *arg);
	/* Containers carrying label=value: in all states, or only those
	 * not running (what a health round looks for: Docker answers in a
	 * few bytes instead of ~1.7 KB a container). */
	void (*list)(struct backend *b, const char *label, const char *value,
	    int not_running, backend_list_cb done, void *arg);
	void (*logs)(struct backend *b, const char *id, int lines,
	    backend_logs_cb done, void *arg);
	/* Engine calls at once from now on, and of them stops and removes
	 * (0: as many as the engine takes safely); answers the latter
	 * (shutdown widens both). */
	size_t (*set_parallel)(struct backend *b, size_t max_inflight,
	    size_t max_ends);
	/* Give up every operation under way or waiting: each callback runs
	 * now with an error naming why (an exit that cannot wait). */
	void (*abort)(struct backend *b, const char *why);
	void (*free)(struct backend *b);
};

/* Owned by main.c. */
struct backend {
	const struct backend_ops *ops;
	void *impl;
};

/* DOCKER_HOST is unix:///path; at most max_inflight Engine API calls at
 * once, of which max_ends stop or remove a container (0: one at a time on
 * a Docker whose libnetwork deadlocks when exits overlap, else all). */
struct backend *backend_docker_new(struct event_base *base,
    const char *docker_host, size_t max_inflight, size_t max_ends);

#endif
