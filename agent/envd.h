/*
 * envd, E2B's in-sandbox daemon, served by the agent under /envd (what
 * E2B serves on port 49983): the Connect RPC services process.Process and
 * filesystem.Filesystem, and the REST routes /files, /health, /envs,
 * /init and /metrics. Shared by the envd_* files:
 *
 *   envd.c             the RPC route: Connect envelopes, calls, streams,
 *                      errors as Connect codes
 *   envd_json.c        protobuf's JSON mapping of request fields
 *   envd_user.c        users (E2b-Authorization), paths, environments,
 *                      the /init state, the REST routes but /files
 *   envd_process*.c    process.Process
 *   envd_fs.c          the file helpers (below), from the agent's side
 *   envd_fs_helper*.c  what a helper does, in its own process
 *   envd_filesystem.c  filesystem.Filesystem but its watchers
 *   envd_watch.c       WatchDir and the polled watchers (inotify)
 *   envd_files.c       GET and POST /files
 *   envd_metrics.c     GET /metrics
 *
 * Who acts: every process and every file operation is the named user's,
 * never the agent's. Processes are spawned with the user's ids under the
 * commands' confinement. File operations run in a helper process of that
 * user (the agent's own binary, executed anew, so it holds nothing of
 * ours), which hands back descriptors it opened; the agent only reads and
 * writes through them. A thread of the agent with the user's file-system
 * ids would not do: /proc/self would still be the agent.
 *
 * Users: E2B sends the user as "Authorization: Basic base64(user:)",
 * but Authorization carries the agent's own token; sandboxd passes the
 * user's header on as "E2b-Authorization" (the same value).
 */
#ifndef ENVD_H
#define ENVD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "agent.h"

#define ENVD_USER_HEADER	"E2b-Authorization"
/* The largest request message, unary or enveloped: far above what the
 * SDKs send (input to a process is its largest). */
#define ENVD_MAX_MESSAGE	(4 * 1024 * 1024)

/* A user of the sandbox, as /etc/passwd has it. Owned by whoever holds
 * it; envd_user_clear frees the strings. */
struct envd_user {
	uid_t uid;
	gid_t gid;
	char *name;
	char *home;
};

/* envd_user.c */

/* The named user (NULL: the default one). 401 for an unknown name (as
 * E2B), 403 for one the agent may not act as (root under --run-as, or
 * anyone else when it cannot switch users). */
int envd_user_lookup(struct agent *agent, const char *name,
    struct envd_user *u, struct error *err);
/* The user an RPC names in its E2b-Authorization header (absent: the
 * default user). */
int envd_user_from_request(struct agent *agent, struct http_request *req,
    struct envd_user *u, struct error *err);
/* A child acting as uid:gid must switch to them (and so shed the
 * supplementary groups): as a command does, not when it is the agent's
 * own user, which a root agent without capabilities could not switch. */
int envd_user_switches(uid_t uid, gid_t gid);
void envd_user_clear(struct envd_user *u);
void envd_user_copy(struct envd_user *dst, const struct envd_user *src);
/* E2B's path rule: "" is the default workdir (else home), ~ and ~/x the
 * user's home, a relative path is under home; the result is absolute and
 * clean (no ".", "..", or double slashes). 400 for "~other". Caller
 * frees. */
char *envd_path_resolve(const struct envd_user *u, const char *path,
    struct error *err);
/* The environment of a process: the commands' (minus who they are), the
 * user's HOME, USER and LOGNAME, /init's variables, then envs (an object
 * of strings, may be NULL). NULL-terminated; envd_env_free. */
char **envd_env_build(struct agent *agent, const struct envd_user *u,
    json_t *envs, struct error *err);
void envd_env_free(char **env);
/* The sandbox's variables /init set (E2B's envVars), borrowed; NULL
 * before any: the code interpreter's runs get them too (ci_execute.c). */
json_t *envd_init_vars(void);
void envd_route_health(struct http_request *req, void *arg);
void envd_route_envs(struct http_request *req, void *arg);
void envd_route_init(struct http_request *req, void *arg);
/* envd_metrics.c: GET /metrics, the figures E2B's envd gives. */
void envd_route_metrics(struct http_request *req, void *arg);
/* REST errors: {"code": status, "message": ...} with that status. */
void envd_rest_error(struct http_request *req, const struct error *err);

/* envd_json.c: request fields as protobuf's JSON mapping allows them
 * (lowerCamelCase or the proto name, null as absent); 400 on a wrong
 * type. */
json_t *envd_json_field(json_t *obj, const char *camel, const char *proto);
int envd_json_string(json_t *obj, const char *camel, const char *proto,
    const char **out, struct error *err);
int envd_json_bool(json_t *obj, const char *camel, const char *proto,
    int *out, struct error *err);
/* uint32 as a number or a decimal string; absent: *present 0. */
int envd_json_uint32(json_t *obj, const char *camel, const char *proto,
    uint32_t *out, int *present, struct error *err);
/* An object, NULL when absent. */
int envd_json_object(json_t *obj, const char *camel, const char *proto,
    json_t **out, struct error *err);
/* bytes: standard or URL-safe base64, padded or not. Caller frees *out. */
int envd_json_bytes(json_t *obj, const char *camel, const char *proto,
    char **out, size_t *len, struct error *err);
/* An enum by its name or its number; names[i] is value i (NULL: none). */
int envd_json_enum(json_t *obj, const char *camel, const char *proto,
    const char *const *names, size_t nnames, int *out, struct error *err);
/* base64 of data, as a new JSON string. */
json_t *envd_json_base64(const void *data, size_t len);
/* The standard base64 of data into out (room for ENVD_B64_LEN(len)+1). */
#define ENVD_B64_LEN(n)	(((n) + 2) / 3 * 4)
size_t envd_base64_encode(char *out, const void *data, size_t len);

/* envd.c: calls and streams. */

struct envd_call;
struct envd_stream;
struct evbuffer;

/* An RPC method: unary, server streaming or client streaming. */
enum envd_kind {
	ENVD_UNARY,
	ENVD_SERVER_STREAM,
	ENVD_CLIENT_STREAM,
};

/* One request in progress. For unary and server-streaming methods run
 * gets the message (a JSON object) once the body is in and checked; the
 * method then ends the call with envd_reply or envd_fail, or turns it
 * into a stream with envd_stream_open. A client stream gets each message
 * through input (and NULL at the end of the body). */
struct envd_method {
	const char *name;		/* "process.Process/Start" */
	enum envd_kind kind;
	int needs_user;			/* resolve the user first */
	void (*run)(struct envd_call *call, json_t *msg);
	/* Client streams: each message; NULL at the body's end. -1 with err
	 * ends the call with that error. On the end, the method answers
	 * with envd_reply itself and returns 0. */
	int (*input)(struct envd_call *call, json_t *msg, struct error *err);
};

/* envd_watch.c: WatchDir and the polled watchers. */
void envd_watch_run(struct envd_call *call, json_t *msg);
void envd_watcher_create(struct envd_call *call, json_t *msg);
void envd_watcher_events(struct envd_call *call, json_t *msg);
void envd_watcher_remove(struct envd_call *call, json_t *msg);

/* envd_process*.c, envd_filesystem.c */
extern const struct envd_method envd_process_methods[];
extern const size_t envd_process_nmethods;
extern const struct envd_method envd_filesystem_methods[];
extern const size_t envd_filesystem_nmethods;

struct agent *envd_call_agent(struct envd_call *call);
struct http_request *envd_call_request(struct envd_call *call);
/* The user resolved for a method with needs_user. */
const struct envd_user *envd_call_user(struct envd_call *call);
/* A method's private state of a client stream (set by the method). */
void **envd_call_state(struct envd_call *call);
/* Connect-Timeout-Ms of the request in seconds; 0 when absent. */
double envd_call_timeout(struct envd_call *call);
/* The client went away before the answer: cb runs once, then the call
 * is gone (a unary method must not answer it). */
void envd_call_on_close(struct envd_call *call,
    void (*cb)(struct envd_call *call, void *arg), void *arg);
/* Answer a unary call (msg stolen; NULL: {}) or a client stream; frees
 * the call. */
void envd_reply(struct envd_call *call, json_t *msg);
/* Answer a unary call with {"<name>": [<items>]}, items the texts of
 * JSON values joined by commas (drained); frees the call. */
void envd_reply_items(struct envd_call *call, const char *name,
    struct evbuffer *items);
/* Answer with an error (the status of err mapped to a Connect code);
 * frees the call. */
void envd_fail(struct envd_call *call, const struct error *err);

/* Streams. keepalive: the message sent after Keepalive-Ping-Interval
 * seconds without another. gone runs when the stream ends by itself (the
 * client left, or its Connect-Timeout-Ms passed): the stream is then
 * freed right after, and its owner must forget it. drain runs when the
 * client has taken what was queued (see envd_stream_pending). */
struct envd_stream_callbacks {
	void (*gone)(struct envd_stream *s, void *arg);
	void (*drain)(struct envd_stream *s, void *arg);
};
/* The call becomes a stream (HTTP 200 goes out, the call is its). */
struct envd_stream *envd_stream_open(struct envd_call *call,
    const char *keepalive, const struct envd_stream_callbacks *cb,
    void *arg);
/* Send a message (stolen). */
void envd_stream_send(struct envd_stream *s, json_t *msg);
/* Send a message already encoded as JSON text. */
void envd_stream_send_text(struct envd_stream *s, const char *json,
    size_t len);
/* Bytes queued for the client. */
size_t envd_stream_pending(struct envd_stream *s);
/* End the stream (err NULL or status 0: success) and free it. */
void envd_stream_end(struct envd_stream *s, const struct error *err);

/* Connect's code for an error of ours, by its HTTP status. */
const char *envd_code(int status);

/* The routes (routes.c) and the start (main.c). */
void envd_init(struct agent *agent);
/* The agent's loop, for timers of envd's. */
struct event_base *envd_base(void);
void envd_route_rpc(struct http_request *req, void *arg);
void envd_files_route_get(struct http_request *req, void *arg);
void envd_files_route_post(struct http_request *req, void *arg);

#endif
