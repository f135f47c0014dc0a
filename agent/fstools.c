/*
 * The filesystem tool group: the tools of @modelcontextprotocol/server-
 * filesystem with its names, descriptions and input schemas, and its
 * argument checks (the zod messages its SDK answers bad arguments with).
 * The tools themselves live in fstools_*.c.
 */
#include "fstools.h"

#include <string.h>

#include "agent.h"
#include "jsonx.h"
#include "toolset.h"
#include "xmalloc.h"

enum field_type { T_STRING, T_NUMBER, T_BOOL, T_STRINGS, T_EDITS, T_SORT };

struct field {
	const char *name;
	enum field_type type;
	int required;
	size_t min_items;
};

static void
issue(struct fstools_buf *b, const char *expected, json_t *v, const char *at)
{
	if (b->len > 0)
		fstools_buf_str(b, "\n");
	fstools_buf_printf(b, "Invalid input: expected %s, received %s",
	    expected,
	    v != NULL ? jsonx_zod_type(v) : "undefined");
	if (at != NULL)
		fstools_buf_printf(b, " at %s", at);
}

static int
is_type(json_t *v, const char *type)
{
	if (strcmp(type, "string") == 0)
		return json_is_string(v);
	if (strcmp(type, "number") == 0)
		return json_is_number(v);
	if (strcmp(type, "boolean") == 0)
		return json_is_boolean(v);
	if (strcmp(type, "array") == 0)
		return json_is_array(v);
	return json_is_object(v);
}

static void
check_edits(struct fstools_buf *b, json_t *edits)
{
	static const char *const keys[] = { "oldText", "newText" };
	size_t i;
	json_t *e;

	json_array_foreach(edits, i, e) {
		char *at = xasprintf("edits[%zu]", i);

		if (!json_is_object(e)) {
			issue(b, "object", e, at);
		} else {
			for (size_t k = 0; k < 2; k++) {
				json_t *v = json_object_get(e, keys[k]);
				char *kat = xasprintf("%s.%s", at, keys[k]);

				if (v == NULL || !json_is_string(v))
					issue(b, "string", v, kat);
				free(kat);
			}
		}
		free(at);
	}
}

static void
check_field(struct fstools_buf *b, const struct field *f, json_t *v)
{
	static const char *const names[] = { "string", "number", "boolean",
	    "array", "array", "string" };
	size_t i;
	json_t *item;

	if (v == NULL && !f->required)
		return;
	if (f->type == T_SORT) {
		if (!json_is_string(v) ||
		    (strcmp(json_string_value(v), "name") != 0 &&
		    strcmp(json_string_value(v), "size") != 0)) {
			if (b->len > 0)
				fstools_buf_str(b, "\n");
			fstools_buf_printf(b, "Invalid option: expected one of "
			    "\"name\"|\"size\" at %s", f->name);
		}
		return;
	}
	if (v == NULL || !is_type(v, names[f->type])) {
		issue(b, names[f->type], v, f->name);
		return;
	}
	if (f->type == T_EDITS) {
		check_edits(b, v);
		return;
	}
	if (f->type != T_STRINGS)
		return;
	json_array_foreach(v, i, item) {
		if (!json_is_string(item)) {
			char *at = xasprintf("%s[%zu]", f->name, i);

			issue(b, "string", item, at);
			free(at);
		}
	}
	if (json_array_size(v) < f->min_items) {
		if (b->len > 0)
			fstools_buf_str(b, "\n");
		fstools_buf_printf(b, "Too small: expected array to have >=%zu "
		    "items at %s", f->min_items, f->name);
	}
}

/* The SDK validates arguments before a tool runs and answers a mismatch
 * with every issue zod found, one a line. */
static int
check_args(const char *tool, const struct field *fields, json_t *args,
    struct error *err)
{
	struct fstools_buf b = { 0 };

	if (args != NULL && !json_is_object(args))
		issue(&b, "object", args, NULL);
	else
		for (const struct field *f = fields; f->name != NULL; f++)
			check_field(&b, f, args != NULL ?
			    json_object_get(args, f->name) : NULL);
	if (b.len == 0)
		return 0;
	error_set(err, 400, "Input validation error: Invalid arguments for "
	    "tool %s: %s", tool, b.s);
	free(b.s);
	return -1;
}

#define PATH_FIELD { "path", T_STRING, 1, 0 }
#define END_FIELDS { NULL, T_STRING, 0, 0 }

static const struct field f_path[] = { PATH_FIELD, END_FIELDS };
static const struct field f_read_text[] = { PATH_FIELD,
	{ "tail", T_NUMBER, 0, 0 }, { "head", T_NUMBER, 0, 0 }, END_FIELDS };
static const struct field f_read_multiple[] = {
	{ "paths", T_STRINGS, 1, 1 }, END_FIELDS };
static const struct field f_write[] = { PATH_FIELD,
	{ "content", T_STRING, 1, 0 }, END_FIELDS };
static const struct field f_edit[] = { PATH_FIELD,
	{ "edits", T_EDITS, 1, 0 }, { "dryRun", T_BOOL, 0, 0 }, END_FIELDS };
static const struct field f_list_sizes[] = { PATH_FIELD,
	{ "sortBy", T_SORT, 0, 0 }, END_FIELDS };
static const struct field f_tree[] = { PATH_FIELD,
	{ "excludePatterns", T_STRINGS, 0, 0 }, END_FIELDS };
static const struct field f_move[] = { { "source", T_STRING, 1, 0 },
	{ "destination", T_STRING, 1, 0 }, END_FIELDS };
static const struct field f_search[] = { PATH_FIELD,
	{ "pattern", T_STRING, 1, 0 },
	{ "excludePatterns", T_STRINGS, 0, 0 }, END_FIELDS };
static const struct field f_none[] = { END_FIELDS };

/* One entry point per tool: check the arguments, then run it. */
#define TOOL_CALL(tool, fields, fn)					\
static int								\
call_##tool(struct agent *agent, json_t *args, json_t **result,	\
    struct error *err)							\
{									\
	json_t *empty = NULL;						\
									\
	if (check_args(#tool, fields, args, err) < 0)			\
		return -1;						\
	if (args == NULL)						\
		args = empty = json_object();				\
	*result = fn(&agent->ws, args);					\
	json_decref(empty);						\
	return 0;							\
}

TOOL_CALL(read_file, f_read_text, fstools_tool_read_text_file)
TOOL_CALL(read_text_file, f_read_text, fstools_tool_read_text_file)
TOOL_CALL(read_media_file, f_path, fstools_tool_read_media_file)
TOOL_CALL(read_multiple_files, f_read_multiple,
    fstools_tool_read_multiple_files)
TOOL_CALL(write_file, f_write, fstools_tool_write_file)
TOOL_CALL(edit_file, f_edit, fstools_tool_edit_file)
TOOL_CALL(create_directory, f_path, fstools_tool_create_directory)
TOOL_CALL(list_directory, f_path, fstools_tool_list_directory)
TOOL_CALL(list_directory_with_sizes, f_list_sizes,
    fstools_tool_list_directory_with_sizes)
TOOL_CALL(directory_tree, f_tree, fstools_tool_directory_tree)
TOOL_CALL(move_file, f_move, fstools_tool_move_file)
TOOL_CALL(search_files, f_search, fstools_tool_search_files)
TOOL_CALL(get_file_info, f_path, fstools_tool_get_file_info)
TOOL_CALL(list_allowed_directories, f_none,
    fstools_tool_list_allowed_directories)

/* The input schemas exactly as the npm server lists them. */
#define SCHEMA(props, required)						\
	"{\"$schema\":\"http://json-schema.org/draft-07/schema#\","	\
	"\"type\":\"object\",\"properties\":{" props "}" required "}"
#define STR(name) "\"" name "\":{\"type\":\"string\"}"
#define REQUIRED(list) ",\"required\":[" list "]"
#define PATH_SCHEMA SCHEMA(STR("path"), REQUIRED("\"path\""))
#define HEAD_TAIL_SCHEMA SCHEMA(STR("path") ","				\
	"\"tail\":{\"description\":\"If provided, returns only the "	\
	"last N lines of the file\",\"type\":\"number\"},"		\
	"\"head\":{\"description\":\"If provided, returns only the "	\
	"first N lines of the file\",\"type\":\"number\"}",		\
	REQUIRED("\"path\""))
#define EXCLUDE "\"excludePatterns\":{\"default\":[],"			\
	"\"type\":\"array\",\"items\":{\"type\":\"string\"}}"

static const struct tool tools[] = {
	{ "read_file",
	    "Read the complete contents of a file as text. DEPRECATED: "
	    "Use read_text_file instead.",
	    HEAD_TAIL_SCHEMA, call_read_file },
	{ "read_text_file",
	    "Read the complete contents of a file from the file system "
	    "as text. Handles various text encodings and provides "
	    "detailed error messages if the file cannot be read. Use "
	    "this tool when you need to examine the contents of a single "
	    "file. Use the 'head' parameter to read only the first N "
	    "lines of a file, or the 'tail' parameter to read only the "
	    "last N lines of a file. Operates on the file as text "
	    "regardless of extension. Only works within allowed "
	    "directories.",
	    HEAD_TAIL_SCHEMA, call_read_text_file },
	{ "read_media_file",
	    "Read a file and return it as a base64-encoded content block "
	    "with its MIME type. Image and audio files are returned as "
	    "image/audio content; any other file type is returned as an "
	    "embedded resource. Only works within allowed directories.",
	    PATH_SCHEMA, call_read_media_file },
	{ "read_multiple_files",
	    "Read the contents of multiple files simultaneously. This is "
	    "more efficient than reading files one by one when you need "
	    "to analyze or compare multiple files. Each file's content "
	    "is returned with its path as a reference. Failed reads for "
	    "individual files won't stop the entire operation. Only "
	    "works within allowed directories.",
	    SCHEMA("\"paths\":{\"minItems\":1,\"type\":\"array\","
	    "\"items\":{\"type\":\"string\"},\"description\":\"Array of file "
	    "paths to read. Each path must be a string pointing to a valid "
	    "file within allowed directories.\"}", REQUIRED("\"paths\"")),
	    call_read_multiple_files },
	{ "write_file",
	    "Create a new file or completely overwrite an existing file "
	    "with new content. Use with caution as it will overwrite "
	    "existing files without warning. Handles text content with "
	    "proper encoding. Only works within allowed directories.",
	    SCHEMA(STR("path") "," STR("content"),
	    REQUIRED("\"path\",\"content\"")), call_write_file },
	{ "edit_file",
	    "Make line-based edits to a text file. Each edit replaces "
	    "exact line sequences with new content. Returns a git-style "
	    "diff showing the changes made. Only works within allowed "
	    "directories.",
	    SCHEMA(STR("path") ",\"edits\":{\"type\":\"array\",\"items\":"
	    "{\"type\":\"object\",\"properties\":{\"oldText\":{\"type\":"
	    "\"string\",\"description\":\"Text to search for - must match "
	    "exactly\"},\"newText\":{\"type\":\"string\",\"description\":"
	    "\"Text to replace with\"}},\"required\":[\"oldText\","
	    "\"newText\"]}},\"dryRun\":{\"default\":false,\"description\":"
	    "\"Preview changes using git-style diff format\",\"type\":"
	    "\"boolean\"}", REQUIRED("\"path\",\"edits\"")),
	    call_edit_file },
	{ "create_directory",
	    "Create a new directory or ensure a directory exists. Can "
	    "create multiple nested directories in one operation. If the "
	    "directory already exists, this operation will succeed "
	    "silently. Perfect for setting up directory structures for "
	    "projects or ensuring required paths exist. Only works "
	    "within allowed directories.",
	    PATH_SCHEMA, call_create_directory },
	{ "list_directory",
	    "Get a detailed listing of all files and directories in a "
	    "specified path. Results clearly distinguish between files "
	    "and directories with [FILE] and [DIR] prefixes. This tool "
	    "is essential for understanding directory structure and "
	    "finding specific files within a directory. Only works "
	    "within allowed directories.",
	    PATH_SCHEMA, call_list_directory },
	{ "list_directory_with_sizes",
	    "Get a detailed listing of all files and directories in a "
	    "specified path, including sizes. Results clearly "
	    "distinguish between files and directories with [FILE] and "
	    "[DIR] prefixes. This tool is useful for understanding "
	    "directory structure and finding specific files within a "
	    "directory. Only works within allowed directories.",
	    SCHEMA(STR("path") ",\"sortBy\":{\"default\":\"name\","
	    "\"description\":\"Sort entries by name or size\",\"type\":"
	    "\"string\",\"enum\":[\"name\",\"size\"]}", REQUIRED("\"path\"")),
	    call_list_directory_with_sizes },
	{ "directory_tree",
	    "Get a recursive tree view of files and directories as a "
	    "JSON structure. Each entry includes 'name', 'type' "
	    "(file/directory), and 'children' for directories. Files "
	    "have no children array, while directories always have a "
	    "children array (which may be empty). The output is "
	    "formatted with 2-space indentation for readability. Only "
	    "works within allowed directories.",
	    SCHEMA(STR("path") "," EXCLUDE, REQUIRED("\"path\"")),
	    call_directory_tree },
	{ "move_file",
	    "Move or rename files and directories. Can move files "
	    "between directories and rename them in a single operation. "
	    "If the destination exists, the operation will fail. Works "
	    "across different directories and can be used for simple "
	    "renaming within the same directory. Both source and "
	    "destination must be within allowed directories.",
	    SCHEMA(STR("source") "," STR("destination"),
	    REQUIRED("\"source\",\"destination\"")), call_move_file },
	{ "search_files",
	    "Recursively search for files and directories matching a "
	    "pattern. The patterns should be glob-style patterns that "
	    "match paths relative to the working directory. Use pattern "
	    "like '*.ext' to match files in current directory, and "
	    "'**/*.ext' to match files in all subdirectories. Returns "
	    "full paths to all matching items. Great for finding files "
	    "when you don't know their exact location. Only searches "
	    "within allowed directories.",
	    SCHEMA(STR("path") "," STR("pattern") "," EXCLUDE,
	    REQUIRED("\"path\",\"pattern\"")), call_search_files },
	{ "get_file_info",
	    "Retrieve detailed metadata about a file or directory. "
	    "Returns comprehensive information including size, creation "
	    "time, last modified time, permissions, and type. This tool "
	    "is perfect for understanding file characteristics without "
	    "reading the actual content. Only works within allowed "
	    "directories.",
	    PATH_SCHEMA, call_get_file_info },
	{ "list_allowed_directories",
	    "Returns the list of directories that this server is allowed "
	    "to access. Subdirectories within these allowed directories "
	    "are also accessible. Use this to understand which "
	    "directories and their nested paths are available before "
	    "trying to access files.",
	    SCHEMA("", ""), call_list_allowed_directories },
};

static const struct tool_group group = {
	"filesystem", tools, sizeof tools / sizeof tools[0],
};

const struct tool_group *
fstools_group(void)
{
	return &group;
}
