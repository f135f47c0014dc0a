/*
 * What sandboxd needs from whatever runs its sandboxes, asynchronously:
 * create and start one from a spec, remove, start, stop, pause, resume,
 * ask its state or one sample of what it uses, list ours, read its last
 * log lines. The seam speaks of sandboxes, mounts, networks and limits;
 * one engine's words (Docker's bind strings, labels, id prefixes, version
 * quirks) stay behind its implementation: backend_docker.c first (the
 * Docker Engine API), a daemonless OCI runtime or Kubernetes later.
 * backend_new picks one by CONTAINER_DEPLOYMENT. Each operation answers
 * through its callback after it returned, never before, also when it
 * fails at once (sandboxd.h's contract).
 */
#ifndef BACKEND_H
#define BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "error.h"

struct event_base;
struct backend;
struct sandboxd_config;

/* Told, with the create's arg, when a create leaves sandboxd's queue for
 * the engine (a progress note: it may run before create returned). */
typedef void (*backend_sent_cb)(void *arg);

enum backend_network {
	BACKEND_NET_NONE,		/* loopback only */
	BACKEND_NET_BRIDGE,		/* outbound, behind the host's NAT */
};

/* What a sandbox is doing, as its engine sees it. */
enum backend_state {
	BACKEND_CREATED,		/* made, never started */
	BACKEND_RUNNING,
	BACKEND_PAUSED,			/* frozen: its processes get no CPU */
	BACKEND_EXITED,			/* stopped, or its first process died */
	BACKEND_DEAD,			/* anything else: going, broken */
};

/* "created", "running", "paused", "exited", "dead": what get_status
 * answers. */
const char *backend_state_name(enum backend_state state);

/* A host directory seen inside the sandbox. */
struct backend_mount {
	const char *host;
	const char *target;
	int readonly;
};

/* What to run; everything is borrowed for the duration of the call. */
struct backend_spec {
	const char *name;
	const char *image;
	/* Whose it is: list_ours(instance) finds it. The sandbox's id, type
	 * and session (may be NULL) are shown on it for a person. */
	const char *instance;
	const char *sandbox_id;
	const char *type;
	const char *session;
	const char *const *args;	/* agent arguments, NULL-terminated;
					 * where it listens is the backend's */
	const struct config_list *entrypoint;	/* empty: the image's */
	const char *const *env;		/* "K=V", NULL-terminated */
	const struct backend_mount *mounts;
	size_t nmounts;
	/* A host directory, made and removed by the caller, where the agent
	 * puts its unix socket. */
	const char *agent_dir;
	int64_t memory;			/* bytes; 0: no limit */
	int64_t nano_cpus;		/* 1e9 per CPU; 0: no limit */
	int64_t pids;			/* 0: no limit */
	enum backend_network network;
	const struct config_list *cap_add;	/* on top of none */
	const char *network_name;	/* bridge: the engine's network to
					 * join (SANDBOXD_NETWORK); NULL: its
					 * default */
	int host_port;			/* publish the agent's TCP port here
					 * (bridge only); 0: no */
	const char *host_ip;		/* on this address; NULL: 127.0.0.1 */
	backend_sent_cb sent;		/* may be NULL */
};

/* A sandbox as listed; strings borrowed, valid in the callback. */
struct backend_container {
	const char *id;
	const char *name;
	enum backend_state state;
	const char *agent_addr;		/* where its agent answers; NULL:
					 * the backend cannot tell */
};

/* One sample of what a sandbox uses. */
struct backend_stats {
	uint64_t cpu_ns;		/* CPU time since it started */
	unsigned cpus;			/* CPUs it may run on (no limit) */
	int64_t mem_used;		/* bytes, page cache it can drop aside */
	int64_t mem_limit;		/* its limit, or the host's memory */
	int64_t mem_cache;		/* page cache */
};

/* id is set even when the start failed (err), so the caller can remove
 * what was made; agent_addr ("unix:PATH" or "HOST:PORT") with it. */
typedef void (*backend_created_cb)(const char *id, const char *agent_addr,
    const struct error *err, void *arg);
typedef void (*backend_done_cb)(const struct error *err, void *arg);
/* err 404: no such sandbox. */
typedef void (*backend_status_cb)(enum backend_state state, int exit_code,
    const struct error *err, void *arg);
typedef void (*backend_list_cb)(const struct backend_container *v, size_t n,
    const struct error *err, void *arg);
/* The last lines of output, NUL-terminated (NULL with err). */
typedef void (*backend_logs_cb)(const char *text, const struct error *err,
    void *arg);
typedef void (*backend_stats_cb)(const struct backend_stats *stats,
    const struct error *err, void *arg);
/* An open descriptor of the network namespace (the caller's to close),
 * or -1 with err. */
typedef void (*backend_netns_cb)(int netns, const struct error *err,
    void *arg);

/* Where an id is asked for, the sandbox's name does too (a create whose
 * answer was lost). */
struct backend_ops {
	const char *name;		/* its CONTAINER_DEPLOYMENT */
	void (*create)(struct backend *b, const struct backend_spec *spec,
	    backend_created_cb done, void *arg);
	/* Remove, whatever its state, with what only it used; a missing
	 * one is fine. */
	void (*remove)(struct backend *b, const char *id, backend_done_cb done,
	    void *arg);
	/* Starting a running one and stopping a stopped one succeed. */
	void (*start)(struct backend *b, const char *id, backend_done_cb done,
	    void *arg);
	void (*stop)(struct backend *b, const char *id, double timeout,
	    backend_done_cb done, void *arg);
	/* Freeze and thaw every process of it, memory kept; 409 when it is
	 * paused already / not paused. */
	void (*pause)(struct backend *b, const char *id, backend_done_cb done,
	    void *arg);
	void (*resume)(struct backend *b, const char *id, backend_done_cb done,
	    void *arg);
	void (*status)(struct backend *b, const char *id, backend_status_cb done,
	    void *arg);
	void (*stats)(struct backend *b, const char *id, backend_stats_cb done,
	    void *arg);
	/* The sandboxes created for instance: in every state, or only those
	 * not running (what a health round looks for, much cheaper at
	 * scale where the engine filters). */
	/* The network namespace of a running sandbox with a network, where
	 * egress.c polices it (Docker: its first process's). */
	void (*netns)(struct backend *b, const char *id, backend_netns_cb done,
	    void *arg);
	void (*list_ours)(struct backend *b, const char *instance,
	    int not_running, backend_list_cb done, void *arg);
	void (*logs)(struct backend *b, const char *id, int lines,
	    backend_logs_cb done, void *arg);
	/* Whether a client's identity, not id itself, names id (Docker: a
	 * prefix of 12 hex digits or more). Pure: no engine call. */
	int (*id_abbreviates)(const char *id, const char *identity);
	/* Shutdown removes everything: want at once (0: as many as the
	 * engine takes safely); answers how many at once it will be. */
	size_t (*widen_for_shutdown)(struct backend *b, size_t want);
	/* Shutdown's removals have made no progress for seconds: log what
	 * may be wrong with the engine. */
	void (*stalled)(struct backend *b, double seconds);
	/* Give up every operation under way or waiting: each callback runs
	 * now with an error naming why (an exit that cannot wait). */
	void (*abort)(struct backend *b, const char *why);
	void (*free)(struct backend *b);
};

/* The core's answer to a backend_police_fn: err, the start fails with
 * it. */
typedef void (*backend_cont_cb)(const struct error *err, void *arg);
/* Called by a backend that can (crun) with a sandbox's new network
 * namespace (a descriptor, the callee's to close) once its network is up
 * and before any program of the sandbox runs: the core puts the egress
 * policy there, so no packet leaves unpoliced, and calls cont (after
 * the return, or from within). Called for a create and for each start. */
typedef void (*backend_police_fn)(const char *name, int netns,
    backend_cont_cb cont, void *arg);

/* Owned by main.c. */
struct backend {
	const struct backend_ops *ops;
	void *impl;
	/* Set by main.c after backend_new; NULL: none. Docker's network
	 * namespace is its container's first process's, made by the start
	 * that runs it: the core polices after the start instead. */
	backend_police_fn police;
};

/* What reads as empty (files) or not at all (directories) in every
 * sandbox, whatever the backend: *n paths. */
const char *const *backend_masked_paths(size_t *n);

/* 0 when kind is a CONTAINER_DEPLOYMENT sandboxd has, else -1 with err
 * naming the key and the kinds there are. */
int backend_check_kind(const char *kind, struct error *err);
/* The backend of kind, set up from cfg; NULL with err (naming the key at
 * fault). */
struct backend *backend_new(const char *kind, struct event_base *base,
    const struct sandboxd_config *cfg, struct error *err);

/* backend_docker.c: DOCKER_HOST, SANDBOXD_DOCKER_PARALLEL and
 * SANDBOXD_REMOVE_PARALLEL of cfg. */
struct backend *backend_docker_new(struct event_base *base,
    const struct sandboxd_config *cfg, struct error *err);

/* backend_crun.c: SANDBOXD_IMAGE_STORE, SANDBOXD_CRUN, SANDBOXD_CNI_PATH,
 * SANDBOXD_BRIDGE, SANDBOXD_BRIDGE_SUBNET, SANDBOXD_CRUN_PARALLEL and the
 * state directory of cfg. */
struct backend *backend_crun_new(struct event_base *base,
    const struct sandboxd_config *cfg, struct error *err);

#endif
