/*
 * sandboxd: the host supervisor. One libevent loop creates, pools, watches
 * and fronts sandboxes; every step that waits on Docker, an agent or a client
 * is a callback, never a blocking call. A function that takes a completion
 * callback never calls it before it returns, even with an answer it has at
 * once (defer.c); one that can fail at once instead returns the error and
 * then never calls back (lifecycle_create, pool_take_or_create).
 *
 * Files, one job each, from the floor up:
 *   the table: sandbox.c (the records, lookup, the container model),
 *     sandbox_list.c (the records as GET /v1/sandboxes lists them),
 *     sandbox_types.c (the type registry);
 *   the start: main.c (start, signals, shutdown), config.c + config_table.c
 *     (the options and their table), state.c (the state directory and
 *     state.json), adopt.c (our sandboxes taken back at start);
 *   lifecycle: lifecycle.c (release / start / stop / pause / resume,
 *     stats), lifecycle_create.c (create and the wait for an agent),
 *     lifecycle_restore.c (a kept workspace brought back at create),
 *     lifecycle_network.c (a sandbox's egress policy over its life),
 *     workspace.c + mkdirs.c (host directories), ports.c (host ports);
 *   services: pool.c (warm pools), sessions.c, health.c, metrics.c;
 *   the way to agents: agent_client.c (calls and the RPC relay), proxy.c
 *     (the streaming proxy);
 *   the APIs: api.c (what they share), api_agentscope.c (the spec's RPC
 *     routes), api_rest.c (/v1), api_mcp.c (/mcp, sandboxd as a
 *     streamable-HTTP MCP server), api_desktop.c + desktop_relay.c +
 *     desktop_token.c (desktops in a web browser: the page, the WebSocket
 *     relay, the links' tokens), api_e2b.c + api_e2b_list.c +
 *     api_e2b_router.c + api_e2b_sandbox.c + api_e2b_network.c (E2B's
 *     control routes under /e2b, its list, sandbox traffic routed by
 *     header, E2B's fields of a sandbox and its timeout, its network
 *     lists), redact.c (host paths out of what clients read);
 *   backends: backend.h + backend.c (the seam, by CONTAINER_DEPLOYMENT),
 *     backend_docker.c + docker_api.c (Docker), backend_crun*.c +
 *     image_store.c (crun, no daemon), rmtree.c (released directories
 *     removed off the loop);
 *   egress.h + egress.c + egress_policy.c + egress_rules.c + egress_nft.c
 *     + egress_dns.c (the network policy of sandboxes with a network);
 *   oss.h + oss*.c + s3.h + s3_client.c + s3_xml.c (workspaces kept in
 *     object storage, FILE_SYSTEM=oss);
 *   shared.c + shared_resolve.c + shared_records.c + shared_mirror.c +
 *     shared_lookup.c + shared_crypto.c + shared_owners.c + shared_pool.c +
 *     shared_sessions.c + shared_uploads.c (several sandboxd on one Redis,
 *     REDIS_ENABLED);
 *   defer.c (the callback contract).
 */
#ifndef SANDBOXD_H
#define SANDBOXD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/queue.h>

#include <event2/util.h>
#include <jansson.h>

#include "config.h"
#include "error.h"
#include "http.h"
#include "timing.h"
#include "token.h"

struct event;
struct event_base;
struct backend;
struct ports;

/* config.c, config_table.c (the options: flags, keys, defaults, bounds) */

/* A READONLY_MOUNTS entry. */
struct ro_mount {
	char *host;
	char *container;
};

/* The whole configuration; lives until exit (sandboxd_config_free). The
 * option table (config_table.c) says where each option goes in it. */
struct sandboxd_config {
	/* Keys of the spec. */
	char *host;
	long port;
	long workers;
	int debug;
	char *bearer_token;		/* NULL: no auth */
	char *default_type;		/* comma list: one pool each */
	long pool_size;
	int auto_cleanup;
	char *prefix;			/* CONTAINER_PREFIX_KEY */
	char *deployment;		/* "docker" or "crun" */
	char *mount_dir;		/* DEFAULT_MOUNT_DIR, absolute after load */
	char *readonly_mounts;
	char *storage_folder;		/* NULL: workspaces are not kept here */
	char *file_system;		/* FILE_SYSTEM: local, or oss (oss.h) */
	char *oss_endpoint;
	char *oss_access_key_id;
	char *oss_access_key_secret;
	char *oss_bucket;		/* OSS_BUCKET_NAME */
	char *port_range;
	int redis_enabled;
	char *redis_server;
	long redis_port;
	long redis_db;
	char *redis_user;
	char *redis_password;
	char *redis_prefix;		/* every key starts with it */
	char *redis_pool_key;		/* REDIS_CONTAINER_POOL_KEY */
	char *redis_port_key;		/* REDIS_PORT_KEY */
	char *advertise_addr;		/* NULL: instances share one host */
	/* Read, checked and wiped by shared_secret_load. */
	char *redis_secret;		/* SANDBOXD_REDIS_SECRET */
	char *redis_secret_file;	/* SANDBOXD_REDIS_SECRET_FILE */
	double redis_lease;		/* seconds an instance's lease lasts */
	double redis_dead_grace;	/* seconds after a lapsed lease until
					 * its records are removed */
	long max_instances;		/* 0: no limit */
	double heartbeat_timeout;	/* seconds; 0: sessions never expire */
	char *k8s_namespace;
	char *kubeconfig;
	char *registry;			/* RUNTIME_SANDBOX_REGISTRY */
	char *image_namespace;		/* RUNTIME_SANDBOX_IMAGE_NAMESPACE */
	char *image_tag;		/* RUNTIME_SANDBOX_IMAGE_TAG */

	/* Ours. */
	char *config_file;
	char *unix_socket;
	char *state_dir;
	char *types_file;
	char *docker_host;
	/* CONTAINER_DEPLOYMENT=crun (backend_crun.c checks them). */
	char *image_store;		/* the image store's directory */
	char *crun_bin;			/* the crun program */
	char *cni_path;			/* the CNI plugins' directory */
	char *bridge;			/* bridge types' host bridge */
	char *bridge_subnet;		/* its addresses */
	char *bridge_gateway;		/* a router on it; NULL: this host */
	long crun_parallel;		/* crun calls at once; 0: auto */
	double create_timeout;		/* seconds until a new agent must answer */
	double health_interval;		/* seconds between health rounds */
	double proxy_timeout;		/* seconds without progress, agent calls */
	char *allowed_mount_dirs;	/* comma list of roots for mount_dir */
	char *public_url;		/* how clients reach us, for proxy urls */
	long pool_parallel;		/* concurrent creates per pool */
	long docker_parallel;		/* Engine API calls at once */
	long shutdown_parallel;		/* the same while shutdown removes */
	long remove_parallel;		/* of them, container stops/removes */
	double shutdown_timeout;	/* then exit, leaving the rest */
	char *network;			/* SANDBOXD_NETWORK: NULL, Docker's */
	char *egress_dns;		/* upstream name servers; NULL: the
					 * host's */
	char *egress_allow;		/* lists every sandbox has */
	char *egress_deny;
	char *log_level;
	int access_log;
	long max_connections;		/* client connections; 0: the default */
	double header_timeout;		/* seconds for a whole request head */
	size_t body_min_rate;		/* bytes/s of a body; 0: no minimum */
	double body_rate_window;	/* seconds the rate is averaged over */
	char *oss_region;		/* SigV4's region */
	char *oss_addressing;		/* path, virtual or auto */
	long oss_parallel;		/* files of a workspace at once */
	char *e2b_templates;		/* E2B template=type,... */

	/* Derived by the checks. */
	int port_lo, port_hi;
	struct config_list pool_types;
	struct config_list allowed_mounts;	/* absolute, canonical */
	struct config_list e2b_aliases;		/* "template=type" each */
	struct ro_mount *ro_mounts;
	size_t nro_mounts;
};

/* Defaults, environment, ./.env, --config FILE, flags (later wins), then
 * the checks a table cannot make (types must be loaded first for
 * DEFAULT_SANDBOX_TYPE: this loads --types itself). -1 with err naming the
 * bad key. */
int sandboxd_config_load(struct sandboxd_config *cfg, int argc, char **argv,
    int *help, int *version, struct error *err);
void sandboxd_config_usage(FILE *f);
void sandboxd_config_free(struct sandboxd_config *cfg);
extern const struct config_option sandboxd_options[];
extern const size_t sandboxd_noptions;
/* "49152,59152", "[49152, 59152]" or "49152-59152". */
int sandboxd_parse_port_range(const char *s, int *lo, int *hi);
/* How clients reach this sandboxd: SANDBOXD_PUBLIC_URL, else its address
 * and port, without a trailing slash. Caller frees. */
char *sandboxd_base_url(const struct sandboxd_config *cfg);

/* sandbox_types.c: the sandbox type registry. */

/* Owned by the registry; lives until sandbox_types_free. */
struct sandbox_type {
	char *name;
	char *image;			/* full image reference */
	json_t *environment;		/* object of strings */
	int64_t memory;			/* bytes; 0: no limit */
	int64_t nano_cpus;		/* 1e9 per CPU; 0: no limit */
	int64_t pids;			/* 0: no limit */
	char *network;			/* "none" or "bridge" */
	json_t *egress;			/* bridge: its checked network object
					 * (egress.h), or NULL */
	struct config_list cap_add;	/* on top of CapDrop ALL */
	/* "UID:GID" commands run as (AGENT_RUN_AS), which also grants the
	 * agent the capabilities to switch to it and owns the workspace;
	 * NULL: as root, without capabilities. */
	char *run_as;
	char *tools;			/* agent --tools */
	char *mcp_config;		/* agent --mcp-config (a path in the image) */
	struct config_list agent_args;	/* more agent flags */
	struct config_list entrypoint;	/* the image's own when empty */
	struct config_list tool_names;	/* tools that make connect pick it */
	double timeout;			/* seconds: the model's "timeout" */
	int desktop;			/* its image serves a desktop */
	int builtin;
};

/* Register the built-in types with images named from registry, namespace
 * and tag (NULL: defaults). */
void sandbox_types_init(const char *registry, const char *image_namespace,
    const char *tag);
/* Add or override types from a JSON file {"types": {name: {...}}}. */
int sandbox_types_load_file(const char *path, const char *registry,
    const char *image_namespace, const char *tag, struct error *err);
int sandbox_types_load_json(json_t *root, const char *source,
    const char *registry, const char *image_namespace, const char *tag,
    struct error *err);
/* By name; "<name>_async", as the SDK's async classes say, is <name>. */
const struct sandbox_type *sandbox_types_find(const char *name);
/* The type offering tool_name, or NULL. */
const struct sandbox_type *sandbox_types_for_tool(const char *tool_name);
size_t sandbox_types_count(void);
const struct sandbox_type *sandbox_types_at(size_t i);
/* "<registry>/<namespace>/runtime-sandbox-<type>:<tag>". Caller frees. */
char *sandbox_types_image_name(const char *registry,
    const char *image_namespace, const char *tag, const char *type);
void sandbox_types_free(void);

/* ports.c: host ports from PORT_RANGE, never handed out twice. */
struct ports *ports_new(int lo, int hi);
void ports_free(struct ports *p);
/* A free port that also binds on 127.0.0.1 now; -1 with err (503) when
 * the range is exhausted. */
int ports_alloc(struct ports *p, struct error *err);
/* Mark a port taken (re-adoption); -1 if outside the range or taken. */
int ports_reserve(struct ports *p, int port);
void ports_release(struct ports *p, int port);
size_t ports_in_use(const struct ports *p);
size_t ports_capacity(const struct ports *p);

/* sandbox.c: records. */

enum sandbox_state {
	SB_CREATING,
	SB_WARM,		/* ready in a pool, no session */
	SB_RUNNING,		/* handed out */
	SB_UNHEALTHY,		/* handed out, agent or container failing */
	SB_STOPPED,
	SB_PAUSED,		/* frozen by lifecycle_pause: not probed, not
				 * reaped, until lifecycle_resume */
	SB_RELEASING,
	SB_RELEASED,		/* container gone, record kept */
};

struct sandbox_waiter;
struct lifecycle_op;

/*
 * One sandbox. Owned by the record list (sandbox.c); async work that may
 * outlive a release holds a reference (sandbox_ref / sandbox_unref) and the
 * record is freed when it is both dropped from the list and unreferenced.
 */
struct sandbox {
	TAILQ_ENTRY(sandbox) entry;
	int refs;
	int listed;

	char id[17];			/* 16 hex digits */
	char *name;			/* container name: prefix + id */
	char *container_id;		/* NULL until Docker created it */
	char *type_name;
	const struct sandbox_type *type;	/* NULL if the type vanished */
	char *image;
	char token[TOKEN_HEX_LEN];
	int port;			/* host port; 0: none */
	char *mount_dir;		/* host workspace */
	int owns_mount;			/* we made mount_dir: we remove it */
	char *storage_path;		/* where release keeps it; NULL: nowhere */
	/* FILE_SYSTEM=oss: its upload failed, the workspace is still at
	 * mount_dir; a release again (or the next start) uploads it. */
	int workspace_unsaved;
	char *sock_dir;			/* host side of /run/sandbox-agent */
	char *agent_addr;		/* as the backend says; NULL until
					 * created */
	char *session;			/* session_ctx_id or NULL */
	json_t *meta;			/* object */
	json_t *environment;		/* object given at create, or NULL */
	json_t *network;		/* its own egress lists (checked), or
					 * NULL: the type's */
	struct egress *egress;		/* its policy enforced; NULL: none
					 * (no network, or not yet) */
	int egress_early;		/* egress is its new container's,
					 * put in by the backend's police
					 * before it started */
	json_t *egress_view;		/* the policy its model shows, set
					 * with egress; NULL: none */
	double timeout;

	enum sandbox_state state;
	int for_pool;			/* created to fill a pool */
	double created_at, updated_at;	/* epoch seconds */
	int health_failures;
	int health_probing;
	char *last_error;		/* why it is unhealthy */
	/* The last CPU sample (lifecycle_stats): CPU time, and when on the
	 * monotonic clock (0: none yet). */
	uint64_t cpu_ns;
	double cpu_at;
	/* Its agent's last disk figures (bytes; 0: none yet). */
	int64_t disk_used, disk_total;
	/* When E2B's timeout ends it, on the monotonic clock; 0: none known
	 * here (api_e2b_sandbox.c derives it from the wall-clock end its
	 * record keeps, in meta.e2b, after a restart or a take elsewhere). */
	double ends_at;

	/* Shared state (shared_records.c): the owning instance when another
	 * instance owns it (a mirror record, shared_mirror.c), NULL when we
	 * do: the test of whether a sandbox is another's; the fields Redis
	 * has, as last written or read. */
	char *owner;
	json_t *shared;
	/* A mirror record whose agent is on another host behind a unix
	 * socket: agent_addr is its owner's API, reached at /proxy/{name}
	 * (agent_target). */
	int via_owner;

	struct lifecycle_op *op;	/* the operation in progress, if any */
	int release_requested;		/* release once op finishes */
	struct sandbox_waiter *waiters;	/* told when the release ends */

	/* sandbox_model(sb) as compact JSON, or NULL; dropped by
	 * sandbox_changed. Owned by the record. */
	char *model_text;
	size_t model_len;
};

TAILQ_HEAD(sandbox_list, sandbox);

const char *sandbox_state_name(enum sandbox_state state);
/* The state of a name sandbox_state_name gives: 0, or -1 for none. */
int sandbox_state_parse(const char *name, enum sandbox_state *out);
/* Whether sb's agent takes calls (warm, running or unhealthy): 0, or -1
 * with err (409) saying why not, the same for every route. */
int sandbox_check_callable(const struct sandbox *sb, struct error *err);
/* Counts toward MAX_SANDBOX_INSTANCES (a container may exist). */
int sandbox_state_live(enum sandbox_state state);
/* Whether sb's type gives it a network (and so an egress policy). */
int sandbox_has_network(const struct sandbox *sb);
/* A new record (CREATING), listed. Holds the list's reference. */
struct sandbox *sandbox_new(const struct sandbox_type *type);
void sandbox_ref(struct sandbox *sb);
void sandbox_unref(struct sandbox *sb);
/* Drop from the list (the record is freed once unreferenced); the hooks
 * are told, sb->listed 0. */
void sandbox_forget(struct sandbox *sb);
/* cb(sb, arg) on every change to one of our records: a field, its state,
 * its leaving the table (sb->listed 0, sb still valid for the call). A
 * hook only notes the change (schedules a write, a refill): it runs
 * inside whatever made it. Never for another instance's records. */
typedef void (*sandbox_hook_cb)(struct sandbox *sb, void *arg);
void sandbox_hook_add(sandbox_hook_cb cb, void *arg);
/* Ours by container name, container id or a unique short form of it
 * (what the hook below takes); another instance's: sandbox_resolve. */
struct sandbox *sandbox_find(const char *identity);
/* Whether identity is a short form of a container id (the backend's
 * id_abbreviates); NULL: none is. */
void sandbox_set_id_match(int (*match)(const char *id, const char *identity));
struct sandbox *sandbox_first(void);
struct sandbox *sandbox_next(struct sandbox *sb);
size_t sandbox_count_live(void);
size_t sandbox_count(const char *type_name, enum sandbox_state state);
void sandbox_set_state(struct sandbox *sb, enum sandbox_state state);
void sandbox_set_error(struct sandbox *sb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Released records beyond the cap are dropped, oldest first. */
void sandbox_trim_released(size_t keep);
/* A field of sb changed: the kept model text is stale and the hooks are
 * told. Every write to a record's field calls this (sandbox_set_state
 * and sandbox_set_error do it themselves). */
void sandbox_changed(struct sandbox *sb);
void sandbox_free_all(void);

/* sandbox_record.c: a sandbox as the state file, Redis and clients read
 * it, from one table of its fields. */
enum sandbox_form {
	SANDBOX_STATE,		/* the state file's record */
	SANDBOX_SHARED,		/* the Redis record's fields, all strings */
	SANDBOX_MODEL,		/* the container model of the spec */
	SANDBOX_FORMS
};
/* sb's fields in form. New reference. */
json_t *sandbox_record(const struct sandbox *sb, enum sandbox_form form);
/* The fields rec has in form (not SANDBOX_MODEL) into sb, the others
 * left as they are; then sandbox_changed. -1 with err when a value does
 * not check (saved egress lists), the others read. */
int sandbox_record_read(struct sandbox *sb, json_t *rec,
    enum sandbox_form form, struct error *err);
/* The container model of the spec (get_info): the model form, its url,
 * error and desktop links. New reference. */
json_t *sandbox_model(const struct sandbox *sb);
/* The same as compact JSON text, encoded once and kept until the record
 * changes, so that a list of 1000 records is a copy, not 1000 encodings.
 * Borrowed: valid until the next sandbox_changed. */
const char *sandbox_model_text(struct sandbox *sb, size_t *len);
/* The URL a client uses to reach the agent directly ("url"). Caller frees. */
char *sandbox_url(const struct sandbox *sb);

/* sandbox_resolve.c: the sandbox a request names, of any instance. */
/* Ours (sandbox_find), else with REDIS_ENABLED another instance's. */
struct sandbox *sandbox_resolve(const char *identity);
/* Every sandbox, ours then the other instances':
 * for (sb = sandbox_resolve_first(); sb; sb = sandbox_resolve_next(sb)) */
struct sandbox *sandbox_resolve_first(void);
struct sandbox *sandbox_resolve_next(struct sandbox *sb);
/* The sandbox req's raw path names right after prefix ("/proxy/"), or
 * NULL; *identity is that name decoded (caller frees), NULL when the raw
 * path does not spell prefix plainly or names nothing, and *rest the raw
 * path after the name. */
struct sandbox *sandbox_from_path(struct http_request *req,
    const char *prefix, char **identity, const char **rest);

/* sandbox_list.c: GET /v1/sandboxes. Each field is the query parameter
 * as sent, or NULL. */
struct sandbox_query {
	const char *type;
	const char *state;
	const char *session;		/* session_ctx_id */
	const char *all;		/* with released ones */
	const char *offset;
	const char *limit;
};
/* {"sandboxes": [model, ...], "total": matches, "offset", "limit"} as
 * JSON text in a new buffer (caller frees), or NULL with err (400) for a
 * bad parameter. */
struct evbuffer;
struct evbuffer *sandbox_list_encode(const struct sandbox_query *q,
    struct error *err);

/* lifecycle.c, lifecycle_create.c */

typedef void (*sandbox_done_cb)(struct sandbox *sb, const struct error *err,
    void *arg);

struct create_request {
	const struct sandbox_type *type;
	const char *mount_dir;		/* NULL: DEFAULT_MOUNT_DIR/<id> */
	const char *storage_path;	/* NULL: <id> under STORAGE_FOLDER */
	json_t *environment;		/* borrowed; object or NULL */
	json_t *meta;			/* borrowed; object or NULL */
	json_t *network;		/* borrowed; egress lists or NULL */
	const char *session;		/* borrowed */
	int for_pool;
};

/* lifecycle_network.c: a sandbox's egress policy (egress.h). */
/* Police sb's network namespace with its policy (the type's, its own
 * lists): done(sb, NULL) once the rules are in, or done(sb, err). A
 * sandbox without a network: done at once (after the return). */
void lifecycle_police(struct sandbox *sb, sandbox_done_cb done, void *arg);
/* The backend's police (backend_police_fn): the same for the sandbox
 * named name, in its namespace before its container runs; the
 * lifecycle_police after that start then has nothing to do. */
void lifecycle_police_early(const char *name, int netns,
    void (*cont)(const struct error *err, void *arg), void *arg);
/* Replace sb's own lists (a checked network object, taken) live: done once
 * they hold. 409 when it is not running or a change is under way. */
void lifecycle_set_network(struct sandbox *sb, json_t *network,
    sandbox_done_cb done, void *arg);

/* Carry out what other instances ask (REDIS_ENABLED). */
void lifecycle_init(void);
/* Start creating. Input and capacity errors come back at once (NULL, err:
 * 400, 503); otherwise done runs when the agent answers (sb RUNNING or
 * WARM) or after everything made so far is removed again (err). */
struct sandbox *lifecycle_create(const struct create_request *creq,
    sandbox_done_cb done, void *arg, struct error *err);
/* Remove the container, keep (STORAGE_FOLDER, FILE_SYSTEM=oss) or delete
 * the workspace, free the port: done(sb, NULL) with sb RELEASED, or
 * done(sb, err) RELEASED when its workspace could not be uploaded (kept
 * here; a release again uploads it). Already released: done on the
 * loop's next turn. As every callback here, done never runs before the
 * return. */
void lifecycle_release(struct sandbox *sb, sandbox_done_cb done, void *arg);
void lifecycle_start(struct sandbox *sb, sandbox_done_cb done, void *arg);
void lifecycle_stop(struct sandbox *sb, sandbox_done_cb done, void *arg);
/* Freeze a sandbox in use (RUNNING, UNHEALTHY): PAUSED, its processes and
 * memory kept; health checks and the idle reaper leave it alone. 409 when
 * it is paused already or not in use. */
void lifecycle_pause(struct sandbox *sb, sandbox_done_cb done, void *arg);
/* Thaw a PAUSED one: RUNNING once its agent answers, its session's idle
 * clock started again. 409 when it is not paused. */
void lifecycle_resume(struct sandbox *sb, sandbox_done_cb done, void *arg);
/* One sample of what a sandbox uses. */
struct sandbox_stats {
	unsigned cpu_count;		/* its CPU limit, rounded up */
	double cpu_used_pct;		/* of cpu_count, since the last
					 * sample (or its start) */
	int64_t mem_used;		/* bytes */
	int64_t mem_total;		/* its limit */
	int64_t mem_cache;
	/* Its root file system, as its agent's envd tells (the last answer
	 * while it is paused or its agent does not answer); 0: none yet. */
	int64_t disk_used;
	int64_t disk_total;
};
typedef void (*sandbox_stats_cb)(struct sandbox *sb,
    const struct sandbox_stats *stats, const struct error *err, void *arg);
/* 409 unless its container is there (ours, created, not released). */
void lifecycle_stats(struct sandbox *sb, sandbox_stats_cb done, void *arg);
/* Operations in flight (for shutdown). */
size_t lifecycle_busy(void);

/* mkdirs.c: mkdir -p path, its components after the first `from` bytes
 * (which exist), the last with mode and the others 0755. */
int sandboxd_mkdirs(const char *path, size_t from, mode_t mode);

/* rmtree.c: rm -rf of path, following no name, on a worker thread:
 * done(path, 0 or an errno, arg) then runs on the loop; E2BIG: a tree
 * deeper than it takes, what is left of it for rm to finish; EXDEV:
 * a directory mounted inside, kept (as rm --one-file-system would). */
typedef void (*sandboxd_rmtree_cb)(const char *path, int error, void *arg);
/* Its worker threads' pool, made at start (else at the first removal). */
int sandboxd_rmtree_init(struct event_base *base, struct error *err);
void sandboxd_rmtree(struct event_base *base, const char *path,
    sandboxd_rmtree_cb done, void *arg);
/* The same here and now (-1 with errno). */
int sandboxd_rmtree_now(const char *path);
/* After the loop ended: waits for the removals under way. */
void sandboxd_rmtree_free(void);

/* workspace.c */

/* Check a caller's mount_dir against ALLOWED_MOUNT_DIRS and the default
 * mount dir; on success *out is its canonical absolute path (created if
 * missing). 400 when outside. */
int workspace_check_mount(const char *mount_dir, char **out, struct error *err);
/* The storage directory for a storage_path (relative to STORAGE_FOLDER,
 * or absolute inside it). 400 when outside. Caller frees *out. */
int workspace_storage_path(const char *storage_path, char **out,
    struct error *err);
/* Make DEFAULT_MOUNT_DIR/<id>. Caller frees. */
char *workspace_make(const char *id, const char *owner, struct error *err);
/* Copy src's contents into dst (async, cp -a). */
typedef void (*workspace_done_cb)(const struct error *err, void *arg);
void workspace_copy(const char *src, const char *dst, workspace_done_cb done,
    void *arg);
/* Keep dir as dst, replacing what was there: moved (rename, else copy and
 * remove) when move, else copied. */
void workspace_keep(const char *dir, const char *dst, int move,
    workspace_done_cb done, void *arg);
void workspace_remove(const char *dir, workspace_done_cb done, void *arg);
/* Make and remove the per-sandbox socket directory. */
char *workspace_make_sock_dir(const char *id, struct error *err);
void workspace_remove_sock_dir(const char *dir);
/* Whether path exists as a directory. */
int workspace_is_dir(const char *path);

/* state.c: the state file under the state directory. */
int state_init(const char *state_dir, struct error *err);
const char *state_instance(void);
/* Schedule a write (coalesced) / write now. */
void state_dirty(void);
void state_flush(void);
/* The saved record of a container name, borrowed, or NULL. */
json_t *state_saved(const char *name);
/* name -> record of everything saved, borrowed (NULL after the free). */
json_t *state_saved_all(void);
/* A part of the file another module keeps: save() (a new reference) is
 * written under key with every write. What the last run wrote under key,
 * borrowed, or NULL (until state_loaded_free). */
void state_add_section(const char *key, json_t *(*save)(void));
json_t *state_loaded_section(const char *key);
/* Forget what was loaded once adoption is done. */
void state_loaded_free(void);
/* Write, unlock, free. */
void state_close(void);

/* adopt.c: take back our containers after a restart. */
typedef void (*adopt_done_cb)(void *arg);
void adopt_start(adopt_done_cb done, void *arg);
/* At shutdown: drop a run that still waits for Docker. */
void adopt_stop(void);

/* pool.c */
void pool_init(void);
/* A sandbox for creq: a warm one of its type when from_pool and creq asks
 * for nothing a warm one lacks (a mount_dir, storage_path or environment
 * of its own), else a new one (lifecycle_create). Taken from the pool:
 * *taken is it, RUNNING with creq's meta and session, and done is never
 * called. Being created: *taken is NULL and done runs later. -1 with err
 * (400, 503) when the create cannot start. */
int pool_take_or_create(const struct create_request *creq, int from_pool,
    struct sandbox **taken, sandbox_done_cb done, void *arg,
    struct error *err);
/* A warm sandbox of ours handed out, by this instance's take or another's:
 * RUNNING, meta (may be NULL) added, bound to session (may be NULL),
 * counted; its pool is refilled a moment later. */
void pool_handed_out(struct sandbox *sb, json_t *meta, const char *session);
/* Bring every pool back to POOL_SIZE (in the background). */
void pool_refill(void);
int pool_is_pooled(const char *type_name);
void pool_stop(void);

/* sessions.c */
void sessions_init(void);
/* Note activity on the session of sb (if any). */
void sessions_touch_sandbox(struct sandbox *sb);
void sessions_touch(const char *session);
void sessions_bind(struct sandbox *sb, const char *session);
/* Names of the live sandboxes of a session. New reference (array). */
json_t *sessions_mapping(const char *session);
json_t *sessions_keys(void);
/* Sessions with live sandboxes (/metrics' gauge). */
size_t sessions_count(void);
/* The session id SandboxService builds from session_id and user_id.
 * Caller frees. */
char *sessions_ctx_id(const char *session_id, const char *user_id);
/* Make sure a session exists, without counting activity (adoption). */
void sessions_ensure(const char *session);
/* Stop reaping (shutdown); sessions_free drops them all. */
void sessions_stop(void);
void sessions_free(void);

/* health.c */
void health_init(void);
void health_stop(void);

/* agent_client.c: calls from sandboxd to an agent. */
typedef void (*agent_json_cb)(struct sandbox *sb, int status, json_t *answer,
    const struct error *err, void *arg);
/* A JSON call to the agent of sb, with its token; done runs after the
 * return, whatever comes (also a refusal to start), unless the call is
 * cancelled first. The handle is for agent_call_cancel until done runs. */
struct agent_call;
struct agent_call *agent_call_json(struct sandbox *sb, const char *method,
    const char *target, json_t *body, double timeout, agent_json_cb done,
    void *arg);
/* Drop the call: the agent's connection closes, done never runs. */
void agent_call_cancel(struct agent_call *c);
/* Probe the agent of sb once (/healthz): done(ok, why not), after the
 * return. */
typedef void (*agent_probe_cb)(struct sandbox *sb, int ok, const char *why,
    void *arg);
void agent_probe(struct sandbox *sb, double timeout, agent_probe_cb done,
    void *arg);
/* The target to send to sb's agent_addr for the agent's target: the same,
 * or through its owner's /proxy/{name} (via_owner). Caller frees. */
char *agent_target(const struct sandbox *sb, const char *target);
/* Whether the agent's route at target (query and /fastapi aside) takes a
 * "timeout" for the call: commands, IPython cells, MCP tool calls. */
int agent_takes_timeout(const char *target);
/* Seconds a call to the agent's target may go without progress: the
 * call's own "timeout" plus a margin where the route takes one, never less
 * than SANDBOXD_PROXY_TIMEOUT; body NULL: not seen (the agent's longest). */
double agent_call_timeout(const char *target, json_t *body);
/* The Content-Length of an agent's answer: -1 when it has none (chunked
 * or until close); -1 also as the return value when it is not a number
 * of at most max bytes. */
struct http_client_request;
int agent_answer_length(struct http_client_request *r, int64_t max,
    int64_t *len);
/* Forward a JSON body to the agent and answer req with {"data": <the
 * agent's answer>}, streamed; agent errors become "Error in <what>: ...". */
void agent_relay(struct http_request *req, struct sandbox *sb,
    const char *target, json_t *body, const char *what);

/* proxy.c */
/* Forward req (method, query, headers, body) to path on sb's agent. */
void proxy_forward(struct http_request *req, struct sandbox *sb,
    const char *target);
/* What a forward changes in the headers beyond the hop-by-hop ones and
 * Authorization (always dropped, the agent's token put in): more names
 * to drop, and "Name: value" lines to add. Both NULL-terminated, may be
 * NULL, borrowed for the call. */
struct proxy_headers {
	const char *const *drop;
	const char *const *add;
};
void proxy_forward_with(struct http_request *req, struct sandbox *sb,
    const char *target, const struct proxy_headers *h);
void proxy_route(struct http_request *req, void *arg);
/* Whether req may use sb: the BEARER_TOKEN or sb's own token. */
int proxy_authorized(struct http_request *req, const struct sandbox *sb);

/* api.c: what the routes share. */
/* A create's arguments (type under type_key, mount_dir, storage_path,
 * environment, meta and its session_ctx_id) into creq, which borrows
 * from args. -1 with err (400). */
int api_parse_create(json_t *args, struct create_request *creq,
    const char *type_key, struct error *err);
/* The agent's answer to GET /mcp/list_tools (status, answer, or err when
 * the call failed) as sandboxd's tool groups, the generic tools added.
 * New reference, or NULL with e saying why. */
json_t *api_tool_groups(struct sandbox *sb, int status, json_t *answer,
    const struct error *err, struct error *e);
/* The agent route of a tool call, and its body in *body (new reference);
 * arguments may be NULL. Caller frees the route. */
char *api_tool_target(const char *tool, json_t *arguments, json_t **body);
/* Our answer to a failed spec RPC: status of err, "Error in <what>: msg". */
void api_reply_rpc_error(struct http_request *req, const char *what,
    const struct error *err);

/* api_agentscope.c, api_rest.c, api_desktop.c, api_mcp.c: route tables. */
const struct http_route *api_agentscope_routes(size_t *n);
const struct http_route *api_rest_routes(size_t *n);
const struct http_route *api_desktop_routes(size_t *n);
const struct http_route *api_mcp_routes(size_t *n);
const struct http_route *api_e2b_routes(size_t *n);
const struct http_route *api_e2b_router_routes(size_t *n);
/* api_e2b_sandbox.c: E2B's timeouts run from start to shutdown. */
void api_e2b_timeouts_start(void);
void api_e2b_timeouts_stop(void);

/* desktop_token.c: the tokens of desktop links, derived from the
 * sandbox's token; the access one grants. */
enum desktop_access {
	DESKTOP_DENIED,
	DESKTOP_VIEW,		/* watch: the viewer's input is dropped */
	DESKTOP_INTERACTIVE,	/* watch and drive */
};
void desktop_token(const struct sandbox *sb, enum desktop_access access,
    char out[TOKEN_HEX_LEN]);
/* What presented (may be NULL) opens of sb's desktop, in constant time. */
enum desktop_access desktop_token_check(const struct sandbox *sb,
    const char *presented);
/* The link that opens sb's desktop with access, on our base URL. Caller
 * frees. */
char *desktop_url(const struct sandbox *sb, enum desktop_access access);

/* desktop_relay.c: desktop viewers' WebSockets, relayed to the agents. */
/* Upgrade req to a WebSocket relayed to sb's /websockify, with input
 * dropped unless access is DESKTOP_INTERACTIVE; answers req whatever
 * comes. */
void desktop_relay_start(struct http_request *req, struct sandbox *sb,
    enum desktop_access access);
/* Close a sandbox's viewers when it goes (the table's hook). */
void desktop_relay_init(void);
/* Close every viewer (shutdown). */
void desktop_relay_close_all(void);

/* metrics.c */
enum metric_counter {
	M_CREATES,
	M_CREATE_FAILURES,
	M_RELEASES,
	M_POOL_TAKES,
	M_POOL_MISSES,
	M_HEALTH_FAILURES,
	M_PROXIED,
	M_ADOPTED,
	M_COUNTERS
};
void metrics_count(enum metric_counter c, const char *type_name);
void metrics_create_seconds(const char *type_name, double seconds);
/* Seconds a create waited in sandboxd's queue before Docker got it. */
void metrics_create_queue_seconds(const char *type_name, double seconds);
void metrics_route(struct http_request *req, void *arg);
/* A gauge another module keeps: name and help as /metrics prints them
 * (static strings), value() read at each scrape. */
void metrics_gauge_add(const char *name, const char *help,
    size_t (*value)(void));
void metrics_free(void);

/* redact.c: host paths out of what clients read. */
/* The directories sandboxd was given, in buf, named by their settings. */
void redact_text(char *buf, size_t size);
/* The same in err, and an agent's address (may be NULL) as "the agent's
 * socket". */
void redact_error(struct error *err, const char *agent_addr);
/* http_reply_err for what clients read: redacted. */
void sandboxd_reply_error(struct http_request *req, const struct error *err);

/* main.c: the process-wide state. */
struct sandboxd {
	struct event_base *base;
	struct sandboxd_config cfg;
	struct http_server *http;
	struct backend *backend;
	struct ports *ports;
	int ready;			/* adoption done: pools may fill */
	int shutting_down;
	int exit_status;		/* main's: 1 when shutdown left some */
};

extern struct sandboxd sd;

/* defer.c: cb(-1, EV_TIMEOUT, arg) from the loop on its next turn, how a
 * completion callback whose answer is ready at once still runs after
 * its caller returned (the contract of every callback here). */
void sandboxd_defer(void (*cb)(evutil_socket_t, short, void *), void *arg);

#endif
