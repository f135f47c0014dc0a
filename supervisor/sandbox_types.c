/*
 * The sandbox type registry: what each type runs (image, environment, agent
 * options), how it is confined (memory, CPUs, pids, capabilities, network)
 * and which tools it offers. The built-in types are registered at start;
 * a JSON file (--types) adds types or overrides fields of existing ones, so
 * a custom type needs no rebuild.
 */
#include "sandboxd.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "egress.h"
#include "xmalloc.h"

static struct sandbox_type **types;
static size_t ntypes;

static const char *const filesystem_tools[] = {
	"read_file", "read_multiple_files", "write_file", "edit_file",
	"create_directory", "list_directory", "directory_tree", "move_file",
	"search_files", "get_file_info", "list_allowed_directories", NULL,
};

static const char *const browser_tools[] = {
	"browser_navigate", "browser_navigate_back", "browser_navigate_forward",
	"browser_close", "browser_resize", "browser_click", "browser_type",
	"browser_hover", "browser_drag", "browser_select_option",
	"browser_press_key", "browser_file_upload", "browser_snapshot",
	"browser_take_screenshot", "browser_pdf_save", "browser_tab_list",
	"browser_tab_new", "browser_tab_select", "browser_tab_close",
	"browser_wait_for", "browser_console_messages",
	"browser_network_requests", "browser_handle_dialog", NULL,
};

static const char *const generic_tools[] = {
	"run_shell_command", "run_ipython_cell", NULL,
};

/* The SDK's GuiSandbox.computer_use calls the tool "computer". */
static const char *const gui_tools[] = { "computer", "computer_use", NULL };

struct builtin {
	const char *name;
	int64_t memory;
	double cpus;
	int64_t pids;
	const char *network;
	const char *tools;
	const char *const *tool_names;
	int desktop;
};

/* Every image of ours has the user "user" (uid 1000) for commands. */
#define IMAGE_USER "1000:1000"

#define MiB (1024LL * 1024)

/* Limits are ceilings, not reservations: a hundred idle minimal sandboxes
 * cost almost nothing. The browser type needs the network to browse.
 * filesystem, browser and gui carry a desktop (an X server, its window
 * manager, what a person opens on it from desktop_url): the same room.
 * code-interpreter runs a Python kernel per code context, pandas and
 * matplotlib in them: room for several. */
static const struct builtin builtins[] = {
	{ "base", 1024 * MiB, 1.0, 512, "none", NULL, generic_tools, 0 },
	{ "minimal", 256 * MiB, 0.5, 128, "none", NULL, NULL, 0 },
	{ "code-interpreter", 2048 * MiB, 1.0, 512, "none", NULL,
	    generic_tools, 0 },
	{ "filesystem", 2048 * MiB, 1.0, 1024, "none", "filesystem",
	    filesystem_tools, 1 },
	{ "browser", 2048 * MiB, 1.0, 1024, "bridge", NULL, browser_tools, 1 },
	{ "gui", 2048 * MiB, 1.0, 1024, "none", "computer", gui_tools, 1 },
};

char *
sandbox_types_image_name(const char *registry, const char *image_namespace,
    const char *tag, const char *type)
{
	if (image_namespace == NULL)
		image_namespace = "agentscope";
	if (tag == NULL || *tag == '\0')
		tag = "latest";
	if (registry != NULL && *registry != '\0') {
		size_t n = strlen(registry);

		if (registry[n - 1] == '/')
			n--;
		if (*image_namespace == '\0')
			return xasprintf("%.*s/runtime-sandbox-%s:%s", (int)n,
			    registry, type, tag);
		return xasprintf("%.*s/%s/runtime-sandbox-%s:%s", (int)n,
		    registry, image_namespace, type, tag);
	}
	if (*image_namespace == '\0')
		return xasprintf("runtime-sandbox-%s:%s", type, tag);
	return xasprintf("%s/runtime-sandbox-%s:%s", image_namespace, type, tag);
}

static void
type_free(struct sandbox_type *t)
{
	free(t->name);
	free(t->image);
	json_decref(t->environment);
	free(t->network);
	json_decref(t->egress);
	config_list_free(&t->cap_add);
	free(t->run_as);
	free(t->tools);
	free(t->mcp_config);
	config_list_free(&t->agent_args);
	config_list_free(&t->entrypoint);
	config_list_free(&t->tool_names);
	free(t);
}

void
sandbox_types_free(void)
{
	for (size_t i = 0; i < ntypes; i++)
		type_free(types[i]);
	free(types);
	types = NULL;
	ntypes = 0;
}

static struct sandbox_type *
find(const char *name)
{
	for (size_t i = 0; i < ntypes; i++) {
		if (strcmp(types[i]->name, name) == 0)
			return types[i];
	}
	return NULL;
}

/* The SDK's async sandbox classes ask for "<type>_async"
 * (SandboxType.BASE_ASYNC and its kin): the same image and tools as
 * <type>, unless a type of that very name is defined. */
#define ASYNC_SUFFIX "_async"

const struct sandbox_type *
sandbox_types_find(const char *name)
{
	const struct sandbox_type *t;
	size_t len, slen = strlen(ASYNC_SUFFIX);
	char *base;

	if (name == NULL)
		return NULL;
	if ((t = find(name)) != NULL)
		return t;
	len = strlen(name);
	if (len <= slen || strcmp(name + len - slen, ASYNC_SUFFIX) != 0)
		return NULL;
	base = xstrndup(name, len - slen);
	t = find(base);
	free(base);
	return t;
}

const struct sandbox_type *
sandbox_types_for_tool(const char *tool_name)
{
	for (size_t i = 0; i < ntypes; i++) {
		const struct config_list *l = &types[i]->tool_names;

		for (size_t j = 0; j < l->n; j++) {
			if (strcmp(l->v[j], tool_name) == 0)
				return types[i];
		}
	}
	return NULL;
}

size_t
sandbox_types_count(void)
{
	return ntypes;
}

const struct sandbox_type *
sandbox_types_at(size_t i)
{
	return i < ntypes ? types[i] : NULL;
}

static struct sandbox_type *
add(const char *name)
{
	struct sandbox_type *t = xcalloc(1, sizeof *t);

	t->name = xstrdup(name);
	t->environment = json_object();
	t->network = xstrdup("none");
	t->timeout = 300;
	types = xreallocarray(types, ntypes + 1, sizeof *types);
	types[ntypes++] = t;
	return t;
}

void
sandbox_types_init(const char *registry, const char *image_namespace,
    const char *tag)
{
	sandbox_types_free();
	for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
		const struct builtin *b = &builtins[i];
		struct sandbox_type *t = add(b->name);

		t->image = sandbox_types_image_name(registry, image_namespace,
		    tag, b->name);
		t->memory = b->memory;
		t->nano_cpus = (int64_t)(b->cpus * 1e9);
		t->pids = b->pids;
		free(t->network);
		t->network = xstrdup(b->network);
		t->run_as = xstrdup(IMAGE_USER);
		if (b->tools != NULL)
			t->tools = xstrdup(b->tools);
		for (size_t j = 0; b->tool_names != NULL &&
		    b->tool_names[j] != NULL; j++)
			config_list_add(&t->tool_names, b->tool_names[j]);
		t->desktop = b->desktop;
		t->builtin = 1;
	}
}

static int
valid_type_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 63)
		return 0;
	for (; *s != '\0'; s++) {
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
		    *s == '-' || *s == '_'))
			return 0;
	}
	return 1;
}

static int
string_list(json_t *v, struct config_list *out, const char *where,
    struct error *err)
{
	size_t i;
	json_t *e;

	if (!json_is_array(v)) {
		error_set(err, 400, "%s: expected a list of strings", where);
		return -1;
	}
	config_list_free(out);
	json_array_foreach(v, i, e) {
		if (!json_is_string(e)) {
			error_set(err, 400, "%s: expected a list of strings",
			    where);
			return -1;
		}
		config_list_add(out, json_string_value(e));
	}
	return 0;
}

static int
set_string(json_t *v, char **out, const char *where, struct error *err)
{
	if (!json_is_string(v)) {
		error_set(err, 400, "%s: expected a string", where);
		return -1;
	}
	free(*out);
	*out = xstrdup(json_string_value(v));
	return 0;
}

/* "UID:GID" of non-root numeric ids, or null for root. */
static int
set_run_as(json_t *v, struct sandbox_type *t, const char *where,
    struct error *err)
{
	unsigned long uid, gid;
	const char *s;
	char *end;

	if (json_is_null(v)) {
		free(t->run_as);
		t->run_as = NULL;
		return 0;
	}
	s = json_is_string(v) ? json_string_value(v) : "";
	uid = strtoul(s, &end, 10);
	if (end == s || *end != ':' || uid == 0 || uid > 0x7fffffff ||
	    (gid = strtoul(end + 1, &end, 10)) == 0 || gid > 0x7fffffff ||
	    *end != '\0' || !isdigit((unsigned char)s[0]) ||
	    !isdigit((unsigned char)strchr(s, ':')[1])) {
		error_set(err, 400, "%s: expected \"UID:GID\" (non-zero numeric "
		    "ids) or null for root", where);
		return -1;
	}
	return set_string(v, &t->run_as, where, err);
}

static int
memory_value(json_t *v, int64_t *out, const char *where, struct error *err)
{
	size_t n;

	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		*out = json_integer_value(v);
		return 0;
	}
	if (json_is_string(v) && config_parse_size(json_string_value(v),
	    &n) == 0 && n <= INT64_MAX) {
		*out = (int64_t)n;
		return 0;
	}
	error_set(err, 400, "%s: expected bytes (a number, or like \"512M\")",
	    where);
	return -1;
}

/* Apply one field of a type definition. */
static int
set_field(struct sandbox_type *t, const char *key, json_t *v,
    const char *where, struct error *err)
{
	if (strcmp(key, "image") == 0)
		return set_string(v, &t->image, where, err);
	if (strcmp(key, "environment") == 0) {
		const char *k;
		json_t *e;

		if (!json_is_object(v)) {
			error_set(err, 400, "%s: expected an object of strings",
			    where);
			return -1;
		}
		json_object_foreach(v, k, e) {
			if (!json_is_string(e) || strchr(k, '=') != NULL ||
			    *k == '\0' || strcmp(k, "SECRET_TOKEN") == 0) {
				error_set(err, 400, "%s: %s: expected a string "
				    "value and a name without '=' (SECRET_TOKEN is "
				    "sandboxd's to set)", where, k);
				return -1;
			}
		}
		json_object_update(t->environment, v);
		return 0;
	}
	if (strcmp(key, "memory") == 0)
		return memory_value(v, &t->memory, where, err);
	if (strcmp(key, "cpus") == 0) {
		if (!json_is_number(v) || json_number_value(v) < 0 ||
		    json_number_value(v) > 1024) {
			error_set(err, 400, "%s: expected a number of CPUs",
			    where);
			return -1;
		}
		t->nano_cpus = (int64_t)(json_number_value(v) * 1e9 + 0.5);
		return 0;
	}
	if (strcmp(key, "pids") == 0) {
		if (!json_is_integer(v) || json_integer_value(v) < 0) {
			error_set(err, 400, "%s: expected a count", where);
			return -1;
		}
		t->pids = json_integer_value(v);
		return 0;
	}
	if (strcmp(key, "network") == 0) {
		if (!json_is_string(v) ||
		    (strcmp(json_string_value(v), "none") != 0 &&
		    strcmp(json_string_value(v), "bridge") != 0)) {
			error_set(err, 400, "%s: expected \"none\" or \"bridge\"",
			    where);
			return -1;
		}
		return set_string(v, &t->network, where, err);
	}
	if (strcmp(key, "egress") == 0) {
		json_t *norm;

		if (egress_network_check(v, where, &norm, err) < 0)
			return -1;
		json_decref(t->egress);
		t->egress = norm;
		return 0;
	}
	if (strcmp(key, "cap_add") == 0)
		return string_list(v, &t->cap_add, where, err);
	if (strcmp(key, "run_as") == 0)
		return set_run_as(v, t, where, err);
	if (strcmp(key, "tools") == 0)
		return set_string(v, &t->tools, where, err);
	if (strcmp(key, "mcp_config") == 0)
		return set_string(v, &t->mcp_config, where, err);
	if (strcmp(key, "agent_args") == 0)
		return string_list(v, &t->agent_args, where, err);
	if (strcmp(key, "entrypoint") == 0)
		return string_list(v, &t->entrypoint, where, err);
	if (strcmp(key, "tool_names") == 0)
		return string_list(v, &t->tool_names, where, err);
	if (strcmp(key, "timeout") == 0) {
		if (!json_is_number(v) || !(json_number_value(v) > 0)) {
			error_set(err, 400, "%s: expected seconds", where);
			return -1;
		}
		t->timeout = json_number_value(v);
		return 0;
	}
	if (strcmp(key, "desktop") == 0) {
		if (!json_is_boolean(v)) {
			error_set(err, 400, "%s: expected true or false", where);
			return -1;
		}
		t->desktop = json_is_true(v);
		return 0;
	}
	error_set(err, 400, "%s: unknown field (image, environment, memory, "
	    "cpus, pids, network, egress, cap_add, run_as, tools, mcp_config, "
	    "agent_args, entrypoint, tool_names, timeout, desktop, from)",
	    where);
	return -1;
}

/* With a network, the egress policy lives in the sandbox's namespace:
 * CAP_NET_ADMIN would let its root flush it, CAP_NET_RAW send past it
 * (packet sockets skip the namespace's filter). */
static int
check_network_caps(const struct sandbox_type *t, const char *source,
    struct error *err)
{
	static const char *const refused[] = { "NET_ADMIN", "NET_RAW" };

	if (strcmp(t->network, "bridge") != 0)
		return 0;
	for (size_t i = 0; i < t->cap_add.n; i++) {
		const char *c = t->cap_add.v[i];

		if (strncasecmp(c, "CAP_", 4) == 0)
			c += 4;
		for (size_t j = 0; j < sizeof refused / sizeof *refused; j++) {
			if (strcasecmp(c, refused[j]) == 0 ||
			    strcasecmp(c, "ALL") == 0) {
				error_set(err, 400, "%s: type %s: cap_add %s is "
				    "refused with a network: the sandbox could "
				    "undo or bypass its egress policy", source,
				    t->name, t->cap_add.v[i]);
				return -1;
			}
		}
	}
	return 0;
}

static void
copy_type(struct sandbox_type *dst, const struct sandbox_type *src)
{
	free(dst->image);
	dst->image = src->image != NULL ? xstrdup(src->image) : NULL;
	json_object_update(dst->environment, src->environment);
	dst->memory = src->memory;
	dst->nano_cpus = src->nano_cpus;
	dst->pids = src->pids;
	free(dst->network);
	dst->network = xstrdup(src->network);
	json_decref(dst->egress);
	dst->egress = json_incref(src->egress);
	for (size_t i = 0; i < src->cap_add.n; i++)
		config_list_add(&dst->cap_add, src->cap_add.v[i]);
	free(dst->run_as);
	dst->run_as = src->run_as != NULL ? xstrdup(src->run_as) : NULL;
	if (src->tools != NULL)
		dst->tools = xstrdup(src->tools);
	if (src->mcp_config != NULL)
		dst->mcp_config = xstrdup(src->mcp_config);
	for (size_t i = 0; i < src->agent_args.n; i++)
		config_list_add(&dst->agent_args, src->agent_args.v[i]);
	for (size_t i = 0; i < src->entrypoint.n; i++)
		config_list_add(&dst->entrypoint, src->entrypoint.v[i]);
	dst->timeout = src->timeout;
	dst->desktop = src->desktop;
}

static int
define(const char *name, json_t *def, const char *source, const char *registry,
    const char *image_namespace, const char *tag, struct error *err)
{
	struct sandbox_type *t;
	char where[256];
	const char *key;
	json_t *v, *from;

	if (!valid_type_name(name)) {
		error_set(err, 400, "%s: type name '%s' must be 1-63 of a-z 0-9 "
		    "- _", source, name);
		return -1;
	}
	if (!json_is_object(def)) {
		error_set(err, 400, "%s: type %s: expected an object", source,
		    name);
		return -1;
	}
	t = find(name);
	if (t == NULL) {
		t = add(name);
		from = json_object_get(def, "from");
		if (from != NULL) {
			const struct sandbox_type *base;

			if (!json_is_string(from) ||
			    (base = find(json_string_value(from))) == NULL) {
				error_set(err, 400, "%s: type %s: \"from\" must "
				    "name a type defined before it", source, name);
				return -1;
			}
			copy_type(t, base);
		}
		if (t->image == NULL)
			t->image = sandbox_types_image_name(registry,
			    image_namespace, tag, name);
	}
	json_object_foreach(def, key, v) {
		if (strcmp(key, "from") == 0)
			continue;
		snprintf(where, sizeof where, "%s: type %s: %s", source, name,
		    key);
		if (set_field(t, key, v, where, err) < 0)
			return -1;
	}
	return check_network_caps(t, source, err);
}

int
sandbox_types_load_json(json_t *root, const char *source,
    const char *registry, const char *image_namespace, const char *tag,
    struct error *err)
{
	json_t *defs, *def;
	const char *name;

	defs = json_is_object(root) ? json_object_get(root, "types") : NULL;
	if (!json_is_object(defs)) {
		error_set(err, 400, "%s: expected {\"types\": {name: {...}}}",
		    source);
		return -1;
	}
	json_object_foreach(defs, name, def) {
		if (define(name, def, source, registry, image_namespace, tag,
		    err) < 0)
			return -1;
	}
	return 0;
}

int
sandbox_types_load_file(const char *path, const char *registry,
    const char *image_namespace, const char *tag, struct error *err)
{
	json_error_t jerr;
	json_t *root;
	int rc;

	root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL) {
		error_set(err, 400, "--types %s: %s (line %d)", path, jerr.text,
		    jerr.line);
		return -1;
	}
	rc = sandbox_types_load_json(root, path, registry, image_namespace, tag,
	    err);
	json_decref(root);
	return rc;
}
