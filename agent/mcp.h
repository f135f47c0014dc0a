/*
 * The agent's MCP client: the tool servers named by /mcp/add_servers and
 * --mcp-config, reached over stdio or HTTP, spoken to in JSON-RPC 2.0.
 *
 * Layers, bottom up:
 *   mcp_jsonrpc.c  ids, the pending calls and their timeouts, the peer's
 *                  own requests and notifications; knows no transport.
 *   mcp_stdio.c    a child process: newline-delimited JSON on its stdin and
 *   mcp_http.c     stdout, its stderr into our log; or streamable HTTP (and
 *   mcp_sse.c      the legacy HTTP+SSE transport), with an event parser;
 *   mcp_url.c      the servers' urls.
 *   mcp_conn.c     one server connection: the initialize handshake, the
 *                  tool list (paginated), calls, what happens when it dies.
 *   mcp.c          the registry of servers and the /mcp routes, with
 *   mcp_aliases.c  the reference SDK's old tool and argument names.
 *
 * Everything runs on the agent's one event loop: calls to any number of
 * servers proceed side by side and never hold up other routes.
 */
#ifndef MCP_H
#define MCP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <jansson.h>

#include "error.h"

struct agent;
struct event_base;
struct evbuffer;
struct mcp_jsonrpc;
struct mcp_conn;

/* Largest message (stdio line, HTTP answer, SSE event) a server may send. */
#define MCP_MESSAGE_MAX (64 * 1024 * 1024)
/* Seconds a server gets for initialize and for each page of tools/list,
 * unless its config says "timeout". */
#define MCP_START_TIMEOUT 30.0
/* Seconds a tools/call may take unless the request says "timeout". */
#define MCP_CALL_TIMEOUT 300.0

/* mcp_jsonrpc.c */

struct mcp_jsonrpc_peer {
	/* Put one message on the wire; msg is borrowed. */
	void (*send)(void *arg, json_t *msg);
	/* A notification from the peer; params may be NULL. */
	void (*notify)(void *arg, const char *method, json_t *params);
};

/* The end of one call: the result (borrowed) or err (502 an error answer
 * or lost peer, 400 a JSON-RPC "invalid params", 504 timeout). */
typedef void (*mcp_jsonrpc_done_cb)(json_t *result, const struct error *err,
    void *arg);

/* name is used in messages ("MCP server 'name' ..."). */
struct mcp_jsonrpc *mcp_jsonrpc_new(struct event_base *base, const char *name,
    const struct mcp_jsonrpc_peer *peer, void *arg);
/* Drops pending calls without calling them back: close first. */
void mcp_jsonrpc_free(struct mcp_jsonrpc *rpc);
/* Send a request (params stolen, may be NULL). Returns its id, or -1 with
 * err when the peer is closed. done runs exactly once, never before this
 * returns, unless the call is cancelled. */
int64_t mcp_jsonrpc_call(struct mcp_jsonrpc *rpc, const char *method,
    json_t *params, double timeout, mcp_jsonrpc_done_cb done, void *arg,
    struct error *err);
/* Send a notification (params stolen, may be NULL). */
void mcp_jsonrpc_notify(struct mcp_jsonrpc *rpc, const char *method,
    json_t *params);
/* Forget a pending call without calling it back, and tell the peer. */
void mcp_jsonrpc_cancel(struct mcp_jsonrpc *rpc, int64_t id,
    const char *reason);
/* A message (or batch) from the peer (borrowed). */
void mcp_jsonrpc_receive(struct mcp_jsonrpc *rpc, json_t *msg);
/* The transport could not deliver the request with this id. */
void mcp_jsonrpc_fail(struct mcp_jsonrpc *rpc, int64_t id,
    const struct error *err);
/* The peer is gone: every pending call ends with err, later calls fail
 * with it. */
void mcp_jsonrpc_close(struct mcp_jsonrpc *rpc, const struct error *err);

/* Transports: created by mcp_conn_start, freed with their server. */

struct mcp_transport;

struct mcp_transport_ops {
	/* Deliver one message (borrowed). After stop: nothing. */
	void (*send)(struct mcp_transport *t, json_t *msg);
	/* Kill the process or end the HTTP session; after this the transport
	 * calls its server no more. Idempotent. */
	void (*stop)(struct mcp_transport *t);
	void (*free)(struct mcp_transport *t);
};

struct mcp_transport {
	const struct mcp_transport_ops *ops;
};

/* cfg has been checked by mcp_config_check. NULL with err when the server
 * cannot even be started (no such command, bad address). */
struct mcp_transport *mcp_stdio_start(struct mcp_conn *srv, json_t *cfg,
    struct error *err);
struct mcp_transport *mcp_http_start(struct mcp_conn *srv, json_t *cfg,
    struct error *err);
/* The HTTP part of mcp_config_check: url and headers. */
int mcp_http_check(const char *name, json_t *cfg, struct error *err);

/* mcp_url.c: the http:// urls of remote servers. */

/* Part of its owner: mcp_url_parse, then mcp_url_clear. */
struct mcp_url {
	char *addr;		/* "127.0.0.1:3001", for the client */
	char *host;		/* the Host header: what the url said */
	char *target;		/* "/mcp?x=y" */
};

/* Only http:// with a numeric host or localhost: 0, or -1 with err (400). */
int mcp_url_parse(const char *url, struct mcp_url *u, struct error *err);
void mcp_url_clear(struct mcp_url *u);
/* Whether s is visible ASCII (and spaces, if allowed). */
int mcp_url_visible(const char *s, size_t len, int spaces);

/* mcp_sse.c: server-sent events, parsed as they arrive. */

/* Part of its owner: sse_init, then sse_clear. */
struct sse {
	struct evbuffer *in;		/* bytes not yet split into lines */
	size_t scanned;			/* of in, known to hold no '\n' */
	struct evbuffer *data;		/* data lines of the event so far */
	char event[32];			/* its type; "" is "message" */
};

/* An event: its type ("message" when none was given) and data. Returns
 * nonzero to stop at once (the owner is being torn down). */
typedef int (*sse_event_cb)(const char *type, const char *data, size_t len,
    void *arg);

void sse_init(struct sse *s);
void sse_clear(struct sse *s);
/* Feed bytes; cb runs for each complete event. 0, or -1 when an event
 * grows past MCP_MESSAGE_MAX, or cb's nonzero answer. */
int sse_feed(struct sse *s, const char *data, size_t len, sse_event_cb cb,
    void *arg);

/* mcp_conn.c */

typedef void (*mcp_conn_cb)(struct mcp_conn *srv, const struct error *err,
    void *arg);

/* Reference counted: the registry holds one, so does every operation in
 * flight; the last mcp_conn_unref frees it (stopped by then). */
struct mcp_conn {
	char *name;
	struct agent *agent;
	int refs;
	struct mcp_transport *transport;
	struct mcp_jsonrpc *rpc;
	double start_timeout;
	char *protocol_version;		/* agreed in initialize */
	int ready;			/* initialized and tools listed */
	int gone;			/* stopped, or it died */
	int refreshing;			/* a list_changed refresh in flight */
	json_t *tools;			/* the last tools/list: array of tools */
	mcp_conn_cb started;
	void *started_arg;
	TAILQ_ENTRY(mcp_conn) entry;	/* in the registry, when registered */
};

/* Start a server and run the handshake; started(srv, err, arg) follows
 * once, later. NULL with err when it cannot start at all. The caller owns
 * the reference returned. */
struct mcp_conn *mcp_conn_start(struct agent *agent, const char *name,
    json_t *cfg, mcp_conn_cb started, void *arg, struct error *err);
void mcp_conn_ref(struct mcp_conn *srv);
void mcp_conn_unref(struct mcp_conn *srv);
/* Stop it for good; calls in flight end with an error saying why. */
void mcp_conn_stop(struct mcp_conn *srv, const char *why);
/* Fetch the tool list again (all pages) into srv->tools; done follows
 * once, later. -1 with err when the server is gone. */
int mcp_conn_list(struct mcp_conn *srv, mcp_conn_cb done, void *arg,
    struct error *err);
int mcp_conn_has_tool(struct mcp_conn *srv, const char *tool);
/* tools/call; as mcp_jsonrpc_call. arguments is borrowed. */
int64_t mcp_conn_call(struct mcp_conn *srv, const char *tool,
    json_t *arguments, double timeout, mcp_jsonrpc_done_cb done, void *arg,
    struct error *err);
void mcp_conn_cancel(struct mcp_conn *srv, int64_t id);

/* For transports. */
void mcp_conn_receive(struct mcp_conn *srv, json_t *msg);
/* The server died or its connection broke beyond repair (why: 502). */
void mcp_conn_lost(struct mcp_conn *srv, const struct error *why);
struct event_base *mcp_conn_base(struct mcp_conn *srv);

/* mcp.c */

/* Whether cfg is a server config we can run: 0, or -1 with err (400). */
int mcp_config_check(struct agent *agent, const char *name, json_t *cfg,
    struct error *err);
/* Whether cfg names an HTTP server (url) rather than a command. */
int mcp_config_is_http(json_t *cfg);

#endif
