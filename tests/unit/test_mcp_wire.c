/* MCP messages of sandbox-mcp and sandboxd's /mcp: version negotiation,
 * the tool list from sandboxd's groups, CallToolResult. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "mcp_wire.h"

static const char *
negotiated(const char *asked)
{
	static char v[32];
	json_t *params = asked != NULL ? json_pack("{s:s}", "protocolVersion",
	    asked) : NULL;
	json_t *r = mcp_wire_initialize_result(params, "t", "base");

	strcpy(v, json_string_value(json_object_get(r, "protocolVersion")));
	json_decref(r);
	json_decref(params);
	return v;
}

static void
test_version_negotiation(void **state)
{
	(void)state;
	assert_string_equal(negotiated("2025-03-26"), "2025-03-26");
	assert_string_equal(negotiated("2024-11-05"), "2024-11-05");
	/* Unknown, newer or absent: our newest. */
	assert_string_equal(negotiated("2099-01-01"), "2025-06-18");
	assert_string_equal(negotiated(NULL), "2025-06-18");
}

static void
test_tools_from_groups(void **state)
{
	json_t *groups = json_loads("{\"generic\": {"
	    "\"run_shell_command\": {\"json_schema\": {\"function\": {"
	    "\"description\": \"d\", \"parameters\": {\"type\": \"object\"}}}},"
	    "\"odd\": {\"json_schema\": {}}},"
	    "\"other\": {\"run_shell_command\": {}}, \"bad\": 3}", 0, NULL);
	json_t *tools, *t;

	(void)state;
	tools = mcp_wire_tools_from_groups(groups);
	/* Names unchanged, the first of a name kept, non-objects skipped. */
	assert_int_equal(json_array_size(tools), 2);
	assert_true(mcp_wire_tool_known(tools, "run_shell_command"));
	assert_true(mcp_wire_tool_known(tools, "odd"));
	assert_false(mcp_wire_tool_known(tools, "run_ipython_cell"));
	for (size_t i = 0; i < 2; i++) {
		t = json_array_get(tools, i);
		/* MCP requires an object schema, even where none was given. */
		assert_string_equal(json_string_value(json_object_get(
		    json_object_get(t, "inputSchema"), "type")), "object");
	}
	json_decref(tools);
	json_decref(groups);
}

static void
test_tool_result(void **state)
{
	json_t *data = json_loads("{\"meta\": {}, \"content\": "
	    "[{\"type\": \"text\", \"text\": \"hi\"}]}", 0, NULL);
	json_t *r = mcp_wire_tool_result(data), *f;

	(void)state;
	assert_null(json_object_get(r, "meta"));
	assert_int_equal(json_array_size(json_object_get(r, "content")), 1);
	assert_true(json_is_false(json_object_get(r, "isError")));
	f = mcp_wire_tool_failure("no");
	assert_true(json_is_true(json_object_get(f, "isError")));
	json_decref(f);
	json_decref(r);
	json_decref(data);
}

static void
test_error_and_result(void **state)
{
	json_t *id = json_integer(7);
	json_t *e = mcp_wire_error(NULL, MCP_WIRE_PARSE_ERROR, "bad");
	json_t *r = mcp_wire_result(id, json_object());

	(void)state;
	assert_true(json_is_null(json_object_get(e, "id")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(e,
	    "error"), "code")), -32700);
	assert_int_equal(json_integer_value(json_object_get(r, "id")), 7);
	assert_true(json_is_object(json_object_get(r, "result")));
	json_decref(e);
	json_decref(r);
	json_decref(id);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version_negotiation),
		cmocka_unit_test(test_tools_from_groups),
		cmocka_unit_test(test_tool_result),
		cmocka_unit_test(test_error_and_result),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
