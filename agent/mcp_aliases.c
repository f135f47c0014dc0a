/*
 * The reference SDK's tool names and argument spellings, mapped onto the
 * MCP servers our images ship. The AgentScope SDK calls the browser tools
 * of an older @playwright/mcp: browser_tab_list / _new / _select / _close
 * (now one browser_tabs tool with an action), browser_navigate_forward
 * (gone; Playwright's page.goForward() does it), and element references
 * as "ref" (now "target"). The MCP layer asks here when a name is offered
 * by no server, when it lists tools and before it sends arguments.
 */
#include "mcp_aliases.h"

#include <string.h>

/* One old tool: calls go to target with the arguments named in keep
 * passed through and the fixed ones added. */
struct tool_alias {
	const char *name;
	const char *target;
	const char *fixed;		/* JSON object */
	const char *const *keep;	/* NULL-terminated */
	const char *description;
	const char *schema;		/* JSON Schema of the old arguments */
};

static const char *const keep_none[] = { NULL };
static const char *const keep_url[] = { "url", NULL };
static const char *const keep_index[] = { "index", NULL };

static const struct tool_alias aliases[] = {
	{ "browser_tab_list", "browser_tabs", "{\"action\": \"list\"}",
	    keep_none, "List browser tabs",
	    "{\"type\": \"object\", \"properties\": {}}" },
	{ "browser_tab_new", "browser_tabs", "{\"action\": \"new\"}",
	    keep_url, "Open a new tab",
	    "{\"type\": \"object\", \"properties\": {\"url\": {\"type\": "
	    "\"string\", \"description\": \"The URL to navigate to in the new "
	    "tab. If not provided, the new tab will be blank.\"}}}" },
	{ "browser_tab_select", "browser_tabs", "{\"action\": \"select\"}",
	    keep_index, "Select a tab by index",
	    "{\"type\": \"object\", \"properties\": {\"index\": {\"type\": "
	    "\"number\", \"description\": \"The index of the tab to select, as "
	    "browser_tab_list shows it\"}}, \"required\": [\"index\"]}" },
	{ "browser_tab_close", "browser_tabs", "{\"action\": \"close\"}",
	    keep_index, "Close a tab",
	    "{\"type\": \"object\", \"properties\": {\"index\": {\"type\": "
	    "\"number\", \"description\": \"The index of the tab to close. "
	    "Closes current tab if not provided.\"}}}" },
	{ "browser_navigate_forward", "browser_run_code_unsafe",
	    "{\"code\": \"async (page) => { await page.goForward(); }\"}",
	    keep_none, "Go forward to the next page",
	    "{\"type\": \"object\", \"properties\": {}}" },
};

/* Old argument name -> new one, applied when the tool's schema knows the
 * new name and not the old. */
static const char *const renames[][2] = {
	{ "ref", "target" },
	{ "startRef", "startTarget" },
	{ "endRef", "endTarget" },
};

static const struct tool_alias *
find_alias(const char *name)
{
	for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
		if (strcmp(aliases[i].name, name) == 0)
			return &aliases[i];
	return NULL;
}

const char *
mcp_aliases_call(const char *name, json_t *arguments, json_t **mapped)
{
	const struct tool_alias *a = find_alias(name);
	json_t *out;

	*mapped = NULL;
	if (a == NULL)
		return NULL;
	out = json_loads(a->fixed, 0, NULL);
	for (size_t i = 0; a->keep[i] != NULL; i++) {
		json_t *v = json_object_get(arguments, a->keep[i]);

		if (v != NULL && !json_is_null(v))
			json_object_set(out, a->keep[i], v);
	}
	*mapped = out;
	return a->target;
}

static int
schema_has(json_t *schema, const char *prop)
{
	return json_object_get(json_object_get(schema, "properties"),
	    prop) != NULL;
}

static json_t *
input_schema(json_t *tools, const char *name)
{
	size_t i;
	json_t *t;

	json_array_foreach(tools, i, t) {
		const char *n = json_string_value(json_object_get(t, "name"));

		if (n != NULL && strcmp(n, name) == 0)
			return json_object_get(t, "inputSchema");
	}
	return NULL;
}

json_t *
mcp_aliases_arguments(json_t *tools, const char *name, json_t *arguments)
{
	json_t *schema = input_schema(tools, name);
	json_t *out = json_copy(arguments), *raw;

	if (!json_is_object(schema))
		return out;
	for (size_t i = 0; i < sizeof renames / sizeof renames[0]; i++) {
		const char *from = renames[i][0], *to = renames[i][1];
		json_t *v = json_object_get(out, from);

		if (v == NULL || schema_has(schema, from) ||
		    !schema_has(schema, to) || json_object_get(out, to) != NULL)
			continue;
		json_object_set(out, to, v);
		json_object_del(out, from);
	}
	/* browser_take_screenshot's "raw" (PNG, else JPEG) is now "type". */
	raw = json_object_get(out, "raw");
	if (raw != NULL && !schema_has(schema, "raw") &&
	    schema_has(schema, "type") && json_object_get(out, "type") == NULL) {
		json_object_set_new(out, "type", json_string(json_is_true(raw) ?
		    "png" : "jpeg"));
		json_object_del(out, "raw");
	}
	return out;
}

static int
offers(json_t *tools, const char *name)
{
	size_t i;
	json_t *t;

	json_array_foreach(tools, i, t) {
		const char *n = json_string_value(json_object_get(t, "name"));

		if (n != NULL && strcmp(n, name) == 0)
			return 1;
	}
	return 0;
}

json_t *
mcp_aliases_list(json_t *tools)
{
	json_t *out = json_array();

	for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
		const struct tool_alias *a = &aliases[i];

		if (!offers(tools, a->target) || offers(tools, a->name))
			continue;
		json_array_append_new(out, json_pack("{s:s,s:s,s:o}",
		    "name", a->name, "description", a->description,
		    "inputSchema", json_loads(a->schema, 0, NULL)));
	}
	return out;
}
