/*
 * Native tool groups (--tools) and what they share with MCP tools: the
 * /mcp/list_tools entry shape and the CallToolResult shape.
 *
 * Which tool a name reaches when several offer it: native groups come
 * first, in --tools order, then MCP servers in the order they were added
 * (a server replaced with overwrite counts as added anew). The groups are
 * enabled at start, before any server exists, so this is simply "the first
 * registered wins"; each group is listed as one more server named after it.
 */
#include "agent.h"
#include "toolset.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "xmalloc.h"

/* Every group the agent knows, by --tools name; ends with a NULL name. */
static const struct {
	const char *name;
	const struct tool_group *(*group)(void);
} known_groups[] = {
	{ "filesystem", fstools_group },
	{ NULL, NULL },
};

static const struct tool_group *
known_group(const char *name, size_t len)
{
	for (size_t i = 0; known_groups[i].name != NULL; i++)
		if (strlen(known_groups[i].name) == len &&
		    strncmp(known_groups[i].name, name, len) == 0)
			return known_groups[i].group();
	return NULL;
}

int
tools_setup(struct agent *agent, const char *list, struct error *err)
{
	const char *p = list;

	while (p != NULL && *p != '\0') {
		size_t len, skip = strspn(p, " \t,");
		const struct tool_group *g;

		p += skip;
		len = strcspn(p, " \t,");
		if (len == 0)
			break;
		g = known_group(p, len);
		if (g == NULL) {
			error_set(err, 400, "--tools: unknown tool group '%.*s'",
			    (int)len, p);
			return -1;
		}
		p += len;
		if (tools_group(agent, g->name) != NULL)
			continue;
		for (size_t i = 0; i < g->ntools; i++) {
			json_t *schema = json_loads(g->tools[i].input_schema, 0,
			    NULL);

			if (!json_is_object(schema))
				fatal("tool %s: its input schema is not a JSON "
				    "object", g->tools[i].name);
			json_decref(schema);
		}
		agent->tool_groups = xreallocarray(agent->tool_groups,
		    agent->ntool_groups + 1, sizeof *agent->tool_groups);
		agent->tool_groups[agent->ntool_groups++] = g;
		log_info("native tool group '%s' enabled (%zu tools)", g->name,
		    g->ntools);
	}
	return 0;
}

const struct tool_group *
tools_group(struct agent *agent, const char *name)
{
	for (size_t i = 0; i < agent->ntool_groups; i++)
		if (strcmp(agent->tool_groups[i]->name, name) == 0)
			return agent->tool_groups[i];
	return NULL;
}

json_t *
tools_list_entry(const char *name, const char *description,
    json_t *input_schema)
{
	json_t *properties = json_object_get(input_schema, "properties");
	json_t *required = json_object_get(input_schema, "required");
	json_t *parameters, *function, *entry;

	parameters = json_object();
	json_object_set_new(parameters, "type", json_string("object"));
	json_object_set_new(parameters, "properties", json_is_object(properties)
	    ? json_incref(properties) : json_object());
	json_object_set_new(parameters, "required", json_is_array(required) ?
	    json_incref(required) : json_array());
	function = json_pack("{s:s, s:o, s:o}", "name", name, "description",
	    description != NULL ? json_string(description) : json_null(),
	    "parameters", parameters);
	entry = json_pack("{s:s, s:{s:s, s:o}}", "name", name, "json_schema",
	    "type", "function", "function", function);
	return entry;
}

void
tools_list_native(struct agent *agent, json_t *answer)
{
	for (size_t g = 0; g < agent->ntool_groups; g++) {
		const struct tool_group *group = agent->tool_groups[g];
		json_t *tools = json_object();

		for (size_t i = 0; i < group->ntools; i++) {
			const struct tool *t = &group->tools[i];
			json_t *schema = json_loads(t->input_schema, 0, NULL);

			json_object_set_new(tools, t->name,
			    tools_list_entry(t->name, t->description, schema));
			json_decref(schema);
		}
		json_object_set_new(answer, group->name, tools);
	}
}

const struct tool *
tools_find(struct agent *agent, const char *name)
{
	for (size_t g = 0; g < agent->ntool_groups; g++) {
		const struct tool_group *group = agent->tool_groups[g];

		for (size_t i = 0; i < group->ntools; i++)
			if (strcmp(group->tools[i].name, name) == 0)
				return &group->tools[i];
	}
	return NULL;
}

void
tools_result_normalize(json_t *result)
{
	json_t *meta = json_object_get(result, "_meta");

	if (meta != NULL) {
		json_object_set(result, "meta", meta);
		json_object_del(result, "_meta");
	} else if (json_object_get(result, "meta") == NULL) {
		json_object_set_new(result, "meta", json_null());
	}
	if (!json_is_boolean(json_object_get(result, "isError")))
		json_object_set_new(result, "isError", json_false());
}

int
tools_call(struct agent *agent, const struct tool *tool, json_t *arguments,
    json_t **result, struct error *err)
{
	if (tool->call(agent, arguments, result, err) < 0)
		return -1;
	tools_result_normalize(*result);
	return 0;
}
