/*
 * The agent's options, one entry each (config.h): flag, environment
 * variable, default, bounds and help. sandboxd passes them as flags and
 * variables of the container (a type's agent_args, AGENT_*); --help prints
 * this table.
 */
#include "agent.h"

#include "http_options.h"
#include "log.h"

#define OFF(field)	offsetof(struct agent_config, field)
#define POSITIVE	.min = 0, .max = INFINITY, .flags = CONFIG_ABOVE_MIN

static const char *const on_off[] = { "on", "off", NULL };

static const struct config_option options[] = {
	{ "--listen", NULL, CONFIG_LIST, OFF(listen), "ADDR",
	    .help = "HOST:PORT or unix:/path; repeat for several",
	    .def = "0.0.0.0:8000" },
	{ "--workspace", "WORKSPACE_DIR", CONFIG_STRING, OFF(workspace), "DIR",
	    .help = "the workspace root", .def = "/workspace" },
	{ "--mcp-config", "MCP_CONFIG", CONFIG_STRING, OFF(mcp_config), "FILE",
	    .help = "MCP servers to start, {\"mcpServers\": {...}}" },
	{ "--tools", "AGENT_TOOLS", CONFIG_STRING, OFF(tools), "LIST",
	    .help = "native tool groups to offer, comma separated "
	    "(filesystem, computer)" },
	{ "--desktop", "AGENT_DESKTOP", CONFIG_STRING, OFF(desktop), "FILE",
	    .help = "start and watch the desktop (X/VNC server, window "
	    "manager...) this JSON file describes" },
	{ "--seccomp", NULL, CONFIG_CHOICE, OFF(seccomp), "on|off",
	    .help = "confine commands with the seccomp filter", .def = "on",
	    .choices = on_off },
	{ "--insecure-no-token", NULL, CONFIG_FLAG, OFF(insecure_no_token),
	    NULL, .help = "serve without a token (development only!)" },
	{ "--output-cap", "AGENT_OUTPUT_CAP", CONFIG_SIZE, OFF(output_cap),
	    "SIZE", .help = "bytes kept per stream of a command",
	    .def = "16M" },
	{ "--max-body", "AGENT_MAX_BODY", CONFIG_SIZE, OFF(max_body), "SIZE",
	    .help = "largest JSON body of run_shell_command, run_ipython_cell "
	    "and call_tool; other routes take 1M", .def = "32M" },
	{ "--max-upload", "AGENT_MAX_UPLOAD", CONFIG_SIZE, OFF(max_upload),
	    "SIZE", .help = "largest file upload; 0: no limit but the disk",
	    .def = "0" },
	{ "--timeout", "AGENT_TIMEOUT", CONFIG_DOUBLE, OFF(default_timeout),
	    "SECONDS", .help = "timeout of a command that names none",
	    .def = "300", POSITIVE },
	{ "--run-as", "AGENT_RUN_AS", CONFIG_STRING, OFF(run_as), "UID:GID",
	    .help = "run commands as this user (when started as root); unset "
	    "or empty: as root", .flags = CONFIG_EMPTY_UNSETS },
	{ "--python", "AGENT_PYTHON", CONFIG_STRING, OFF(python), "PATH",
	    .help = "Python interpreter of the IPython kernel",
	    .def = "python3" },
	{ "--prewarm-kernel", NULL, CONFIG_FLAG, OFF(prewarm_kernel), NULL,
	    .help = "start run_ipython_cell's IPython kernel at start, not "
	    "on first use" },
	{ "--prewarm-context", "AGENT_PREWARM_CONTEXT", CONFIG_BOOL,
	    OFF(prewarm_context), "BOOL", .help = "start the code "
	    "interpreter's own context (/ci) at start, not on first use",
	    .def = "false" },
	{ "--max-contexts", "AGENT_MAX_CONTEXTS", CONFIG_INT, OFF(max_contexts),
	    "N", .help = "code interpreter contexts (each a Python kernel) at "
	    "once, its own one included", .def = "16", .min = 1, .max = 256 },
	{ "--shell-template", "AGENT_SHELL_TEMPLATE", CONFIG_BOOL,
	    OFF(shell_template), "BOOL", .help = "fork each shell command from "
	    "one bash started once, not start a bash for it", .def = "true" },
	{ "--log-level", "AGENT_LOG_LEVEL", CONFIG_CHOICE, OFF(log_level),
	    "LEVEL", .help = "what the log says", .def = "info",
	    .choices = log_level_names },
	HTTP_SERVER_OPTIONS("AGENT", struct agent_config),
	{ "--healthcheck", NULL, CONFIG_FLAG, OFF(healthcheck), NULL,
	    .help = "ask the running agent's /healthz and exit 0 if it "
	    "answers 200 (the images' HEALTHCHECK)" },
	{ NULL, "SECRET_TOKEN", CONFIG_STRING, OFF(token), NULL,
	    .help = "the bearer token clients must present (required)",
	    .flags = CONFIG_SECRET },
};
#define NOPTIONS	(sizeof options / sizeof options[0])

static const char synopsis[] =
    "usage: sandbox-agent [--listen ADDR]... [--workspace DIR] "
    "[--mcp-config FILE] [options]\n"
    "\n"
    "The in-sandbox agent: serves shell commands, workspace files, git,\n"
    "IPython and MCP tools over HTTP at /X and /fastapi/X. ADDR is HOST:PORT\n"
    "or unix:/path/to.sock. Every request needs\n"
    "'Authorization: Bearer $SECRET_TOKEN'.";

int
agent_options_load(struct agent_config *cfg, int argc, char **argv,
    int *help, int *version, struct error *err)
{
	return config_parse(options, NOPTIONS, cfg, argc, argv, help, version,
	    err);
}

void
agent_options_usage(FILE *f)
{
	config_usage(f, synopsis, options, NOPTIONS);
}

const struct config_option *
agent_options_table(size_t *n)
{
	*n = NOPTIONS;
	return options;
}
