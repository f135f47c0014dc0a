/*
 * sandbox-mcp: an MCP server over stdio that offers the tools of one
 * sandbox of a type that sandboxd serves (issue 16, the reference's
 * runtime-sandbox-mcp). One libevent loop: smcp_stdio.c reads JSON-RPC
 * lines from stdin and writes answers to stdout, smcp_box.c creates the
 * sandbox through sandboxd's manager routes and relays tools/list and
 * tools/call to it, smcp_main.c holds the options, signals and shutdown.
 */
#ifndef SMCP_H
#define SMCP_H

#include <stddef.h>

#include <jansson.h>

#include "error.h"
#include "mcp_wire.h"

struct event_base;
struct http_client_request;

enum smcp_box_state {
	SMCP_BOX_NONE,		/* no sandbox yet (or the last create failed) */
	SMCP_BOX_CREATING,
	SMCP_BOX_READY,
	SMCP_BOX_RELEASING,
};

/* A request that needs the sandbox (tools/list, tools/call), from its
 * arrival until it is answered or cancelled. Owned by smcp.calls; freed
 * by smcp_box.c when answered or cancelled. */
struct smcp_call {
	struct smcp_call *next;
	json_t *id;			/* the JSON-RPC id (owned reference) */
	int is_call;			/* tools/call, else tools/list */
	char *tool;			/* tools/call: the tool's name */
	json_t *arguments;		/* tools/call: owned reference */
	struct http_client_request *up;	/* the call to sandboxd, if started */
};

/* The program's one state, a global as in the other programs. */
struct smcp {
	struct event_base *base;

	/* Options (smcp_main.c's table). */
	char *type;
	char *base_url;
	char *bearer_token;
	int eager;
	double create_timeout;
	double call_timeout;
	size_t max_message;
	char *log_level;

	/* sandboxd's address from base_url ("127.0.0.1:8000"), the path
	 * in front of every route ("" or "/prefix"), the Host header and
	 * the Authorization header (NULL without a token). */
	char *addr;
	char *prefix;
	char *host;
	char *auth;

	enum smcp_box_state box_state;
	char *box_name;			/* the sandbox, once created */
	struct http_client_request *box_req;	/* create or release */
	json_t *tools;			/* the MCP tool list, once fetched */
	struct smcp_call *calls;
	size_t ncalls;

	int closing;			/* stdin ended or a signal came */
	int exit_status;
};

extern struct smcp smcp;

/* smcp_main.c: start the shutdown (release, then leave the loop). */
void smcp_shutdown(const char *why);

/* smcp_stdio.c */
int smcp_stdio_start(struct error *err);
void smcp_stdio_stop(void);
void smcp_stdio_free(void);
/* Write one message (a JSON-RPC answer) as a line on stdout; takes the
 * reference to msg. */
void smcp_send(json_t *msg);
void smcp_send_result(json_t *id, json_t *result);
void smcp_send_error(json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* smcp_box.c */
int smcp_box_init(struct error *err);
/* Queue a call (taking ownership); creates the sandbox first if needed. */
void smcp_box_submit(struct smcp_call *c);
/* Drop the call with this JSON-RPC id without answering it
 * (notifications/cancelled); its HTTP exchange is closed, which makes
 * sandboxd close its call to the agent and the agent kill the command's
 * process tree. */
void smcp_box_cancel(json_t *id);
/* Start creating the sandbox now (--eager). */
void smcp_box_create(void);
/* Drop every call unanswered and release the sandbox; done() runs once
 * (never inside this call) when nothing is left to release. */
void smcp_box_release(void (*done)(void));
void smcp_call_free(struct smcp_call *c);

#endif
