/*
 * Native tool groups: tools the agent implements itself in C (the
 * filesystem set, later computer use) and offers next to the tools of its
 * MCP servers. /mcp/list_tools lists a group as if it were one more MCP
 * server named after the group; /mcp/call_tool calls its tools in-process.
 * A group is enabled with --tools NAME[,NAME...].
 */
#ifndef TOOLSET_H
#define TOOLSET_H

#include <stddef.h>

#include <jansson.h>

#include "error.h"

struct agent;
struct evbuffer;

struct tool {
	const char *name;		/* "read_file" */
	const char *description;
	const char *input_schema;	/* JSON text of the MCP inputSchema */
	/* Run the tool, on a worker thread: it may use agent->ws, nothing
	 * else of the agent, and nothing that is not thread-safe. On
	 * success *result is a new CallToolResult object
	 * ({"content": [...], "isError": bool}); a failure the tool itself
	 * reports (a missing file, say) is a result with isError true, as
	 * MCP servers do. -1 with err only for arguments that do not fit
	 * the schema (400). */
	int (*call)(struct agent *agent, json_t *arguments, json_t **result,
	    struct error *err);
};

/* Static data; never freed. */
struct tool_group {
	const char *name;		/* "filesystem" */
	const struct tool *tools;
	size_t ntools;
};

/* fstools.c: the filesystem tool set. */
const struct tool_group *fstools_group(void);
/* computer.c: computer use on the sandbox's display (--desktop). */
const struct tool_group *computer_group(void);

/* toolset.c: the glue between the groups and the /mcp routes. */

/* Enable the groups named in list ("filesystem,..."; NULL: none). An
 * unknown name fails with err (400). */
int toolset_setup(struct agent *agent, const char *list, struct error *err);
/* The enabled group of that name, or NULL. */
const struct tool_group *toolset_group(struct agent *agent, const char *name);
/* The /mcp/list_tools entry of a tool, native or MCP: {"name", "json_schema":
 * {"type": "function", "function": {"name", "description", "parameters"}}}.
 * input_schema (borrowed) may be NULL. New reference. */
json_t *toolset_list_entry(const char *name, const char *description,
    json_t *input_schema);
/* Add {group: {tool: entry}} of every enabled group to answer. */
void toolset_list_native(struct agent *agent, json_t *answer);
/* The enabled native tool of that name, or NULL; the first group wins. */
const struct tool *toolset_find(struct agent *agent, const char *name);
/* The end of a native tool call, on the loop thread: answer holds the
 * CallToolResult as JSON text (normalized; the callee may drain it), or
 * err says why there is none (400 arguments that do not fit, 503 the
 * agent is shutting down). */
typedef void (*toolset_done_cb)(struct evbuffer *answer,
    const struct error *err, void *arg);
/* Run a native tool on a worker thread; done follows on the loop, never
 * before this returns. arguments is referenced until then. */
void toolset_call(struct agent *agent, const struct tool *tool,
    json_t *arguments, toolset_done_cb done, void *arg);
/* After the loop ended: wait for the calls under way, answer the queued
 * ones 503. */
void toolset_shutdown(void);
/* Give a CallToolResult the shape of the reference's answers: "_meta" as
 * "meta" (null when absent), "isError" always there. */
void toolset_result_normalize(json_t *result);

#endif
