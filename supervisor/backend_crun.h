/*
 * Between the files of the crun backend (backend_crun*.c): what the host
 * gives (cgroups, the mount namespace crun runs in), the runner of its
 * child processes, the OCI configuration, the container seccomp profile
 * and the bridge network. backend.h is what the rest of sandboxd sees.
 */
#ifndef BACKEND_CRUN_H
#define BACKEND_CRUN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include <jansson.h>

#include "backend.h"
#include "error.h"

struct event_base;
struct sock_fprog;

/* backend_crun_host.c: the host's cgroups and the mount namespace crun
 * runs in. */

enum crun_cgroups {
	CRUN_CGROUPS_V1,		/* one hierarchy per controller */
	CRUN_CGROUPS_HYBRID,		/* v1 controllers, a v2 one beside */
	CRUN_CGROUPS_V2,		/* the unified hierarchy */
};

/* Filled by crun_host_init, freed by crun_host_free. */
struct crun_host {
	enum crun_cgroups cgroups;
	/* Hybrid: a mount namespace of ours where the v2 hierarchy is
	 * covered (crun 1.8 refuses hybrid hosts whose v2 hierarchy has a
	 * controller; there it sees plain v1). -1 elsewhere. */
	int mntns_fd;
	int swap_limit;			/* the memory controller limits swap */
	unsigned ncpus;
	int64_t mem_total;		/* bytes of RAM */
};

int crun_host_init(struct crun_host *h, struct error *err);
void crun_host_free(struct crun_host *h);
/* "v2", "v1", "hybrid (v1 controllers; ...)": for the start-up line. */
const char *crun_host_cgroups_name(const struct crun_host *h);
/* One sample of what the cgroup at path (a cgroupsPath) uses. */
int crun_host_stats(const struct crun_host *h, const char *path,
    struct backend_stats *s, struct error *err);
/* 1 when the cgroup at path is frozen, 0 when not, -1 unknown. */
int crun_host_frozen(const struct crun_host *h, const char *path);
/* In a child about to execute crun (a spawn setup: system calls only):
 * into h's namespace where it has one, then into a mount namespace of
 * this crun alone (a private copy: what it mounts stays there), crun's
 * program bound read-only in it. crun trusts a program on a read-only
 * mount as it is; else it first copies itself and executes the copy
 * (against a container rewriting the binary through /proc/<pid>/exe,
 * CVE-2019-5736), an exec more on every call. */
int crun_host_enter(const struct crun_host *h, const char *crun);
/* A new namespace (CLONE_NEWNS or CLONE_NEWNET) that a child makes, sets
 * up inside (setup, when not NULL) and leaves: a descriptor holds it.
 * -1 with errno. */
int crun_host_new_ns(int flag, int (*setup)(void));

/* backend_crun_jobs.c: child processes (crun, the CNI plugins, rm) run
 * from the loop, a bounded number at once, urgent ones first; their
 * output read up to a cap. */

struct crun_jobs;

struct crun_job_spec {
	const char *const *argv;	/* argv[0]: the path to execute */
	const char *const *envp;	/* NULL: ours */
	const char *input;		/* on its stdin; NULL: /dev/null */
	int out_fd;			/* its stdout and stderr; -1: captured */
	/* Run in the child before exec (spawn.h); setup_arg must live
	 * until done ran. */
	int (*setup)(void *arg);
	void *setup_arg;
	int urgent;			/* before every job not urgent */
	/* Told when it leaves the queue (may run before the run returned). */
	void (*started)(void *arg);
};

/* status: as from waitpid; out, err: what it wrote (NUL-terminated, at
 * most a few KiB each). fail: it could not be run at all (or was given
 * up: crun_jobs_abort). */
typedef void (*crun_job_done_cb)(int status, const char *out,
    const char *errtext, const struct error *fail, void *arg);

struct crun_jobs *crun_jobs_new(struct event_base *base, size_t parallel);
/* Everything in spec is copied but setup_arg. Never calls done before it
 * returned. */
void crun_jobs_run(struct crun_jobs *q, const struct crun_job_spec *spec,
    crun_job_done_cb done, void *arg);
void crun_jobs_set_parallel(struct crun_jobs *q, size_t parallel);
size_t crun_jobs_parallel(const struct crun_jobs *q);
/* Every job queued or running: done now with fail naming why. */
void crun_jobs_abort(struct crun_jobs *q, const char *why);
void crun_jobs_free(struct crun_jobs *q);

/* backend_crun_seccomp.c: the container's seccomp profile, what Docker's
 * default profile allows and denies, compiled for a set of capabilities
 * (some of its rules depend on them). */

/* The profile as base64 of its BPF program (crun's
 * run.oci.seccomp_bpf_data), kept until crun_seccomp_free. NULL with err. */
const char *crun_seccomp_bpf_base64(const struct config_list *caps,
    struct error *err);
void crun_seccomp_free(void);

/* backend_crun_config.c: the OCI configuration of a sandbox. */

/* What the configuration is made from besides the spec. */
struct crun_config_in {
	const struct backend_spec *spec;
	json_t *image;			/* the image's Env, Cmd, Entrypoint ... */
	const char *bundle;		/* its directory (hosts, resolv.conf) */
	const char *cgroup;		/* cgroupsPath */
	const char *netns;		/* bridge: the namespace's path; NULL:
					 * a namespace of its own, loopback only */
	const char *seccomp_b64;	/* crun_seccomp_bpf_base64 */
	int swap_limit;			/* crun_host.swap_limit */
	long nofile;			/* its open-file limit */
};

/* The capability names of spec (CHOWN, cap_chown ...) as CAP_CHOWN. */
void crun_config_caps(const struct backend_spec *spec,
    struct config_list *out);
/* config.json of a sandbox; NULL with err (a bad image configuration). */
json_t *crun_config_build(const struct crun_config_in *in,
    struct error *err);
/* hostname, hosts and resolv.conf into the bundle (dir_fd); ip: the
 * sandbox's address on the bridge, NULL without one. */
int crun_config_write_etc(int dir_fd, const char *hostname, const char *ip,
    struct error *err);

/* backend_crun_net.c: the bridge network, through the CNI plugins. */

struct crun_net;

struct crun_net_config {
	const char *cni_path;		/* the plugins' directory */
	const char *bridge;		/* the host's bridge device */
	const char *subnet;		/* its addresses, CIDR */
	const char *gateway;		/* a router on the bridge; NULL: the
					 * host, through its NAT */
};

typedef void (*crun_net_done_cb)(const struct error *err, void *arg);

/* A network namespace for sandbox name (its loopback up), held by us;
 * NULL with err. */
struct crun_net *crun_net_new(const char *name, struct error *err);
/* Attach it to the bridge (an address from the subnet; the bridge's NAT
 * and forwarding rules made first, once). */
void crun_net_attach(struct crun_jobs *q, const struct crun_net_config *cfg,
    struct crun_net *n, crun_net_done_cb done, void *arg);
/* Undo what crun_net_attach did (all of it or the part that was done),
 * and let go of the namespace. */
void crun_net_down(struct crun_jobs *q, const struct crun_net_config *cfg,
    struct crun_net *n, crun_net_done_cb done, void *arg);
/* Where crun finds the namespace ("/proc/<sandboxd>/fd/<n>"). */
const char *crun_net_ns_path(const struct crun_net *n);
/* Its address on the bridge, once attached. */
const char *crun_net_ip(const struct crun_net *n);
/* A descriptor of its namespace, the caller's to close; -1 if not ours. */
int crun_net_ns_dup(const struct crun_net *n);
/* After a restart: hold the namespace of the sandbox's first process. */
void crun_net_adopt_ns(struct crun_net *n, pid_t pid);
/* What crun_net_down needs after a restart, as saved in the bundle. */
json_t *crun_net_save(const struct crun_net *n);
struct crun_net *crun_net_load(json_t *saved);
void crun_net_free(struct crun_net *n);

/* backend_crun_publish.c: a bridge sandbox's published port, relayed by
 * sandboxd to its agent's unix socket. */

struct crun_publish;

/* Listen on host_ip (NULL: 127.0.0.1):port for agent_addr; NULL with
 * err (503 when the port is taken). */
struct crun_publish *crun_publish_new(struct event_base *base,
    const char *host_ip, int port, const char *agent_addr, struct error *err);
/* Close the port and every connection through it. */
void crun_publish_free(struct crun_publish *p);

/* backend_crun_box.c: the sandboxes the backend knows, their first
 * process watched, what a restart needs saved in their bundle. */

struct crun_box;
typedef void (*crun_box_exit_cb)(struct crun_box *box, void *arg);

/* Owned by its table (crun_boxes); freed by crun_box_free. */
struct crun_box {
	struct crun_boxes *t;
	char *name;			/* crun's id too */
	char *bundle;			/* its directory */
	char *agent_addr;
	char *cgroup;			/* cgroupsPath */
	char *lowerdir;			/* its overlay's lower layers */
	enum backend_state state;
	int exit_code;			/* EXITED: as Docker says it; -1:
					 * not known (not our child) */
	pid_t pid;			/* its first process, while it runs */
	int pidfd;
	struct event *exit_ev;
	/* Told once when it exits (a stop waits so). */
	crun_box_exit_cb on_exit;
	void *on_exit_arg;
	int busy;			/* an operation holds it */
	struct crun_net *net;		/* bridge only */
	struct crun_publish *publish;	/* its published port, if any */
	int host_port;			/* published agent port; 0: none */
	char *host_ip;
	TAILQ_ENTRY(crun_box) entry;
};

struct crun_boxes *crun_boxes_new(struct event_base *base,
    const struct crun_host *host);
/* Frees every box too. */
void crun_boxes_free(struct crun_boxes *t);
struct crun_box *crun_boxes_first(struct crun_boxes *t);
struct crun_box *crun_boxes_next(struct crun_box *box);
struct crun_box *crun_box_find(struct crun_boxes *t, const char *name);
/* A new box, CREATED, its bundle dir/name (not made here). */
struct crun_box *crun_box_new(struct crun_boxes *t, const char *dir,
    const char *name);
void crun_box_free(struct crun_box *box);
/* Its first process is pid (from crun's pid file): RUNNING, watched
 * (EXITED at once when it is gone already). */
void crun_box_watch(struct crun_box *box, pid_t pid);
/* Write sandbox.json into its bundle (dir_fd). */
int crun_box_save(struct crun_box *box, int dir_fd, struct error *err);
/* Every bundle under dir_fd (path dir) back as a box: RUNNING (or PAUSED)
 * when its first process still is, EXITED when it is gone, DEAD when it
 * never started (sandboxd stopped half way through a create). */
void crun_boxes_load(struct crun_boxes *t, int dir_fd, const char *dir);
/* Keep each sandbox's output under max bytes, its latest part. */
void crun_boxes_trim_logs(struct crun_boxes *t, off_t max);

/* backend_crun.c, backend_crun_run.c, backend_crun_stop.c: the backend
 * and its operations. */

enum crun_op_kind {
	CRUN_OP_CREATE, CRUN_OP_REMOVE, CRUN_OP_START, CRUN_OP_STOP,
	CRUN_OP_PAUSE, CRUN_OP_RESUME, CRUN_OP_STATUS, CRUN_OP_STATS,
	CRUN_OP_LIST, CRUN_OP_LOGS, CRUN_OP_NETNS,
};

/* The backend; owned by its struct backend. */
struct crun {
	struct event_base *base;
	struct crun_host host;
	struct crun_jobs *jobs;		/* crun and the CNI plugins */
	struct crun_jobs *trash_jobs;	/* removing trashed bundles */
	struct crun_boxes *boxes;
	struct image_store *images;
	struct crun_net_config net;
	char *crun;			/* the program */
	char *root;			/* crun --root */
	char *bundles;
	int bundles_fd;
	int trash_fd;
	char *trash;
	unsigned trash_seq;
	char *layers;			/* the image store's layers */
	long nofile;			/* the sandboxes' open-file limit */
	struct event *trim_ev;
	TAILQ_HEAD(, crun_op) ops;	/* every operation in flight */
};

/* One operation; freed by crun_op_finish. */
struct crun_op {
	struct crun *c;
	enum crun_op_kind kind;
	struct crun_box *box;
	char *id;
	char *agent_addr;		/* create */
	backend_created_cb created;
	backend_done_cb done;
	backend_status_cb status_done;
	backend_stats_cb stats_done;
	backend_list_cb list_done;
	backend_logs_cb logs_done;
	backend_netns_cb netns_done;
	backend_sent_cb sent;
	void *arg;
	struct error err;
	int failed;
	int waiting;			/* a remove waiting for a busy box */
	int not_running;		/* list */
	int lines;			/* logs */
	int polls;			/* pause: freezer checks so far */
	int pending;			/* parts at once still running */
	/* A bridge sandbox's (re)start with the core's police: crun create
	 * beside the network's ADD and the police, crun start once all
	 * three are done (the sandbox's first program runs policed). */
	backend_police_fn police;
	int start_after;		/* crun start still to run */
	int policing;			/* the police holds the op */
	int answered;			/* answered while policing: freed
					 * when the police calls back */
	double timeout;			/* stop */
	struct event *ev;		/* answer from the loop, or stop's
					 * deadline */
	/* What the child that becomes crun run mounts (run_setup). */
	char *rootfs;
	char *mount_data;
	char *mount_data_plain;
	TAILQ_ENTRY(crun_op) entry;
};

struct crun_op *crun_op_new(struct crun *c, enum crun_op_kind kind,
    const char *id, void *arg);
/* Answer through the op's callback, then free it. */
void crun_op_finish(struct crun_op *op);
/* The same with err (the first failure is kept). */
void crun_op_fail(struct crun_op *op, const struct error *err);
/* crun_op_finish from the loop's next turn (the callback contract). */
void crun_op_defer(struct crun_op *op);
void crun_op_defer_error(struct crun_op *op, int status, const char *fmt,
    const char *what);
/* The box the op names, not busy; NULL (a deferred 404 or 409) else. */
struct crun_box *crun_op_find(struct crun_op *op);
/* box is free for the next operation: a remove waiting for it starts. */
void crun_op_idle(struct crun *c, struct crun_box *box);
/* crun with args as a job of the op (--root ours, --log the box's), its
 * output to out_fd (-1: captured); setup (NULL: crun_host_enter) is
 * given the op. */
void crun_op_crun(struct crun_op *op, const char *const *args, int out_fd,
    int (*setup)(void *), crun_job_done_cb done);
/* After a job of op's: 0 when it succeeded; else -1, the op failed with
 * what the job said (crun's log, else its stderr), its box free again and
 * the op finished. */
int crun_op_job_done(struct crun_op *op, const char *what, int status,
    const char *errtext, const struct error *fail);
/* The same for a job that is one of the op's parts at once (a crun call
 * beside a CNI one): the failure is noted (the first one kept), nothing
 * is finished. */
int crun_op_job_failed(struct crun_op *op, const char *what, int status,
    const char *errtext, const struct error *fail);
void crun_op_part_failed(struct crun_op *op, const struct error *err);
/* Remove the trash's entry name, off the loop (sandboxd_rmtree). */
void crun_op_trash(struct crun *c, const char *name);

void crun_create(struct backend *b, const struct backend_spec *spec,
    backend_created_cb done, void *arg);
void crun_start(struct backend *b, const char *id, backend_done_cb done,
    void *arg);
void crun_stop(struct backend *b, const char *id, double timeout,
    backend_done_cb done, void *arg);
void crun_pause(struct backend *b, const char *id, backend_done_cb done,
    void *arg);
void crun_resume(struct backend *b, const char *id, backend_done_cb done,
    void *arg);
void crun_remove(struct backend *b, const char *id, backend_done_cb done,
    void *arg);
/* Remove box (not busy) now. */
void crun_op_remove_begin(struct crun_op *op);

#endif
