/*
 * MCP messages shared by sandbox-mcp and sandboxd's /mcp (mcp_wire.h).
 */
#include "mcp_wire.h"

#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

/* Newest first; the first is what a client asking for a version we do not
 * know gets (MCP's negotiation: the server answers one it supports). */
static const char *const versions[] = { "2025-06-18", "2025-03-26",
    "2024-11-05" };

json_t *
mcp_wire_initialize_result(json_t *params, const char *server_name,
    const char *sandbox_type)
{
	const char *asked = json_string_value(json_object_get(params,
	    "protocolVersion"));
	const char *version = versions[0];
	json_t *r;
	size_t i;

	for (i = 0; asked != NULL && i < sizeof versions / sizeof *versions;
	    i++) {
		if (strcmp(asked, versions[i]) == 0)
			version = versions[i];
	}
	char *note = xasprintf("The tools of one sandbox of type '%s' "
	    "(created on first use, released when this session ends); files "
	    "and Python variables are kept between calls.", sandbox_type);

	r = json_pack("{s:s,s:{s:{s:b}},s:{s:s,s:s},s:s}",
	    "protocolVersion", version,
	    "capabilities", "tools", "listChanged", 0,
	    "serverInfo", "name", server_name, "version", VERSION,
	    "instructions", note);
	free(note);
	return r;
}

json_t *
mcp_wire_result(json_t *id, json_t *result)
{
	return json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id,
	    "result", result);
}

json_t *
mcp_wire_error(json_t *id, int code, const char *msg)
{
	return json_pack("{s:s,s:O,s:{s:i,s:s}}", "jsonrpc", "2.0", "id",
	    id != NULL ? id : json_null(), "error", "code", code, "message",
	    msg);
}

json_t *
mcp_wire_tools_from_groups(json_t *groups)
{
	json_t *tools = json_array(), *seen = json_object(), *group, *tool;
	const char *gname, *name;

	json_object_foreach(groups, gname, group) {
		if (!json_is_object(group))
			continue;
		json_object_foreach(group, name, tool) {
			json_t *fn = json_object_get(json_object_get(tool,
			    "json_schema"), "function");
			json_t *schema = json_object_get(fn, "parameters");
			json_t *desc = json_object_get(fn, "description");
			json_t *t;

			/* Names as they are, the first of a name kept. */
			if (json_object_get(seen, name) != NULL)
				continue;
			json_object_set_new(seen, name, json_true());
			t = json_pack("{s:s}", "name", name);
			if (json_is_string(desc))
				json_object_set(t, "description", desc);
			/* MCP requires an object schema. */
			if (json_is_object(schema))
				json_object_set(t, "inputSchema", schema);
			else
				json_object_set_new(t, "inputSchema",
				    json_pack("{s:s,s:{}}", "type", "object",
				    "properties"));
			json_array_append_new(tools, t);
		}
	}
	json_decref(seen);
	return tools;
}

int
mcp_wire_tool_known(json_t *tools, const char *name)
{
	size_t i;
	json_t *t;

	json_array_foreach(tools, i, t) {
		if (strcmp(json_string_value(json_object_get(t, "name")),
		    name) == 0)
			return 1;
	}
	return 0;
}

/* Content items (text, image) and isError as they are; the reference's
 * "meta" is not an MCP field. */
json_t *
mcp_wire_tool_result(json_t *data)
{
	json_t *r = json_deep_copy(data);

	json_object_del(r, "meta");
	if (!json_is_array(json_object_get(r, "content")))
		json_object_set_new(r, "content", json_array());
	if (!json_is_boolean(json_object_get(r, "isError")))
		json_object_set_new(r, "isError", json_false());
	return r;
}

json_t *
mcp_wire_tool_failure(const char *msg)
{
	return json_pack("{s:[{s:s,s:s}],s:b}", "content", "type", "text",
	    "text", msg, "isError", 1);
}
