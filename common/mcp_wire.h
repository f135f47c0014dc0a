/*
 * MCP's protocol-level pieces that both of our MCP servers share
 * (sandbox-mcp over stdio, sandboxd's /mcp over streamable HTTP): the
 * JSON-RPC error codes, the version negotiation and initialize result,
 * and the translation of sandboxd's list_tools and call_tool answers into
 * MCP's tool list and CallToolResult. Transport, sessions and sandboxes
 * stay with each server.
 */
#ifndef MCP_WIRE_H
#define MCP_WIRE_H

#include <jansson.h>

/* JSON-RPC error codes (the MCP spec uses JSON-RPC 2.0's). */
#define MCP_WIRE_PARSE_ERROR		-32700
#define MCP_WIRE_INVALID_REQUEST	-32600
#define MCP_WIRE_METHOD_NOT_FOUND	-32601
#define MCP_WIRE_INVALID_PARAMS		-32602
#define MCP_WIRE_INTERNAL_ERROR		-32603

/* The initialize result for a server named server_name offering one
 * sandbox of sandbox_type; params are the client's (the version it asks
 * for is answered when we speak it, else our newest). New reference. */
json_t *mcp_wire_initialize_result(json_t *params, const char *server_name,
    const char *sandbox_type);
/* {"jsonrpc", "id", "result"} taking result; {"jsonrpc", "id", "error"}
 * (id NULL: null). New references. */
json_t *mcp_wire_result(json_t *id, json_t *result);
json_t *mcp_wire_error(json_t *id, int code, const char *msg);
/* sandboxd's tool groups ({group: {name: {"json_schema": {"function":
 * {name, description, parameters}}}}}) as MCP's tool list. New reference. */
json_t *mcp_wire_tools_from_groups(json_t *groups);
/* Whether tools (an MCP tool list) has one of this name. */
int mcp_wire_tool_known(json_t *tools, const char *name);
/* sandboxd's CallToolResult as MCP's. New reference. */
json_t *mcp_wire_tool_result(json_t *data);
/* A tool call's failure as a CallToolResult with isError (what a model
 * reads and can act on). New reference. */
json_t *mcp_wire_tool_failure(const char *msg);

#endif
