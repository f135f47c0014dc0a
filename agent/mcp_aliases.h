/*
 * Tool names and argument spellings of the reference SDK that the MCP
 * servers in our images name differently (mcp_aliases.c).
 */
#ifndef MCP_ALIASES_H
#define MCP_ALIASES_H

#include <jansson.h>

/* For a call to name that no server offers: when name is an old name,
 * the tool it now is, with *mapped the arguments for that tool (new
 * reference; arguments borrowed). NULL, *mapped NULL, when it is none. */
const char *mcp_aliases_call(const char *name, json_t *arguments,
    json_t **mapped);

/* The arguments for tool name of a server whose tool list (an array of
 * MCP tools) is tools: old argument names renamed ("ref" -> "target",
 * ...) where the tool's schema knows only the new one. New reference;
 * arguments borrowed. */
json_t *mcp_aliases_arguments(json_t *tools, const char *name,
    json_t *arguments);

/* MCP tool objects {name, description, inputSchema} of the old names that
 * a server with this tool list (an array of MCP tools) answers to. New
 * reference, an array. */
json_t *mcp_aliases_list(json_t *tools);

#endif
