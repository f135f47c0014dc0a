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

struct tool {
	const char *name;		/* "read_file" */
	const char *description;
	const char *input_schema;	/* JSON text of the MCP inputSchema */
	/* Run the tool. On success *result is a new CallToolResult object
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

#endif
