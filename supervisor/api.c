/*
 * What the route files share (api_agentscope.c, api_rest.c, and
 * agent_client.c's relay for the spec's call_tool): reading a create's
 * arguments the same way for both APIs, and the spec's error answer.
 */
#include "sandboxd.h"

#include <string.h>

#include "jsonx.h"
#include "xmalloc.h"

int
api_parse_create(json_t *args, struct create_request *creq,
    const char *type_key, struct error *err)
{
	const char *type_name, *session = NULL;
	json_t *meta;

	memset(creq, 0, sizeof *creq);
	if (jsonx_get_string(args, type_key, 0, &type_name, err) < 0 ||
	    jsonx_get_string(args, "mount_dir", 0, &creq->mount_dir, err) < 0 ||
	    jsonx_get_string(args, "storage_path", 0, &creq->storage_path,
	    err) < 0 ||
	    jsonx_get_object(args, "environment", 0, &creq->environment,
	    err) < 0 ||
	    jsonx_get_object(args, "meta", 0, &meta, err) < 0 ||
	    jsonx_get_object(args, "network", 0, &creq->network, err) < 0)
		return -1;
	if (type_name == NULL)
		type_name = sd.cfg.pool_types.v[0];
	creq->type = sandbox_types_find(type_name);
	if (creq->type == NULL) {
		error_set(err, 400, "unknown sandbox type '%s'", type_name);
		return -1;
	}
	if (meta != NULL) {
		if (jsonx_get_string(meta, "session_ctx_id", 0, &session,
		    err) < 0) {
			error_prefix(err, "meta");
			return -1;
		}
		creq->meta = meta;
	}
	creq->session = session;
	return 0;
}

void
api_reply_rpc_error(struct http_request *req, const char *what,
    const struct error *err)
{
	struct error e = *err;

	error_prefix(&e, "Error in %s", what);
	sandboxd_reply_error(req, &e);
}

static json_t *
generic_tool(const char *name, const char *description, const char *param,
    const char *param_description)
{
	return json_pack("{s:s,s:{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s,s:s}},s:[s]}}}}",
	    "name", name, "json_schema", "type", "function", "function",
	    "name", name, "description", description, "parameters",
	    "type", "object", "properties", param, "type", "string",
	    "description", param_description, "required", param);
}

static json_t *
generic_tools(void)
{
	json_t *g = json_object();

	json_object_set_new(g, "run_ipython_cell", generic_tool(
	    "run_ipython_cell", "Run an IPython cell.", "code",
	    "IPython code to execute"));
	json_object_set_new(g, "run_shell_command", generic_tool(
	    "run_shell_command", "Run a shell command.", "command",
	    "Shell command to execute"));
	return g;
}

json_t *
api_tool_groups(struct sandbox *sb, int status, json_t *answer,
    const struct error *err, struct error *e)
{
	json_t *tools;

	if (err != NULL) {
		*e = *err;
		error_prefix(e, "the agent of %s", sb->name);
		return NULL;
	}
	/* An agent without MCP (the minimal image) offers the generic
	 * tools only. */
	if (status == 404 || (status == 200 && json_is_object(answer))) {
		tools = status == 200 ? json_deep_copy(answer) : json_object();
	} else {
		error_set(e, 502, "the agent of %s answered HTTP %d to "
		    "/mcp/list_tools", sb->name, status);
		return NULL;
	}
	json_object_set_new(tools, "generic", generic_tools());
	return tools;
}

char *
api_tool_target(const char *tool, json_t *arguments, json_t **body)
{
	if (strcmp(tool, "run_shell_command") == 0 ||
	    strcmp(tool, "run_ipython_cell") == 0) {
		*body = arguments != NULL ? json_incref(arguments) :
		    json_object();
		return xasprintf("/tools/%s", tool);
	}
	*body = json_pack("{s:s,s:o}", "tool_name", tool, "arguments",
	    arguments != NULL ? json_incref(arguments) : json_object());
	return xstrdup("/mcp/call_tool");
}
