/* sandboxd's configuration (sources and their order, validation naming the
 * bad key) and its type registry (built-ins, image names, custom types). */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandboxd.h"
#include "usage_check.h"

static char tmpdir[PATH_MAX];
static char oldcwd[PATH_MAX];

static const char *const envs[] = {
	"HOST", "PORT", "POOL_SIZE", "REDIS_ENABLED", "DEFAULT_SANDBOX_TYPE",
	"PORT_RANGE", "CONTAINER_DEPLOYMENT", "RUNTIME_SANDBOX_REGISTRY",
	"RUNTIME_SANDBOX_IMAGE_NAMESPACE", "RUNTIME_SANDBOX_IMAGE_TAG",
	"SANDBOXD_STATE_DIR", "BEARER_TOKEN", "READONLY_MOUNTS",
	"DEFAULT_MOUNT_DIR", "STORAGE_FOLDER", "MAX_SANDBOX_INSTANCES",
	"SANDBOXD_TYPES", "DOCKER_HOST", "AUTO_CLEANUP",
	"SANDBOXD_REDIS_SECRET", "SANDBOXD_REDIS_SECRET_FILE",
};

static int
setup(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++)
		unsetenv(envs[i]);
	snprintf(tmpdir, sizeof tmpdir, "/tmp/sbxd-unit-XXXXXX");
	if (mkdtemp(tmpdir) == NULL || getcwd(oldcwd, sizeof oldcwd) == NULL ||
	    chdir(tmpdir) < 0)
		return -1;
	setenv("SANDBOXD_STATE_DIR", tmpdir, 1);
	return 0;
}

static int
teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	if (chdir(oldcwd) < 0)
		return -1;
	snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
	sandbox_types_free();
	return system(cmd) == 0 ? 0 : -1;
}

static void
write_file(const char *name, const char *text)
{
	FILE *f = fopen(name, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Load with these arguments; returns the load's result. */
static int
load(struct sandboxd_config *cfg, struct error *err, int argc, ...)
{
	char *argv[16] = { "sandboxd" };
	int help, version, rc;
	va_list ap;

	va_start(ap, argc);
	for (int i = 1; i < argc; i++)
		argv[i] = va_arg(ap, char *);
	va_end(ap);
	memset(err, 0, sizeof *err);
	rc = sandboxd_config_load(cfg, argc, argv, &help, &version, err);
	return rc;
}

static void
test_defaults(void **state)
{
	struct sandboxd_config cfg;
	struct error err;

	(void)state;
	assert_int_equal(load(&cfg, &err, 1), 0);
	assert_string_equal(cfg.host, "127.0.0.1");
	assert_int_equal(cfg.port, 8000);
	assert_int_equal(cfg.pool_size, 1);
	assert_true(cfg.auto_cleanup);
	assert_int_equal(cfg.port_lo, 49152);
	assert_int_equal(cfg.port_hi, 59152);
	assert_int_equal(cfg.pool_types.n, 1);
	assert_string_equal(cfg.pool_types.v[0], "base");
	assert_null(cfg.bearer_token);
	assert_null(cfg.storage_folder);
	assert_string_equal(cfg.docker_host, "unix:///var/run/docker.sock");
	/* DEFAULT_MOUNT_DIR defaults under the state directory, made. */
	assert_non_null(strstr(cfg.mount_dir, "/workspaces"));
	assert_int_equal(access(cfg.mount_dir, F_OK), 0);
	sandboxd_config_free(&cfg);
}

static void
test_help_states_the_defaults(void **state)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	(void)state;
	assert_non_null(f);
	sandboxd_config_usage(f);
	assert_int_equal(fclose(f), 0);
	assert_usage_states_the_table(text, sandboxd_options,
	    sandboxd_noptions);
	free(text);
}

static void
test_sources_in_order(void **state)
{
	struct sandboxd_config cfg;
	struct error err;

	(void)state;
	setenv("PORT", "8001", 1);
	setenv("POOL_SIZE", "7", 1);
	setenv("HOST", "127.0.0.2", 1);
	write_file(".env", "# comment\nexport PORT=8002\nPOOL_SIZE = \"6\"\n"
	    "SOMETHING_ELSE=1\nBEARER_TOKEN='tok en' \n");
	write_file("custom.env", "PORT=8003  # inline comment\n");
	assert_int_equal(load(&cfg, &err, 3, "--config", "custom.env"), 0);
	assert_int_equal(cfg.port, 8003);		/* file over .env */
	assert_int_equal(cfg.pool_size, 6);		/* .env over env */
	assert_string_equal(cfg.host, "127.0.0.2");	/* env alone */
	assert_string_equal(cfg.bearer_token, "tok en");
	sandboxd_config_free(&cfg);

	assert_int_equal(load(&cfg, &err, 5, "--config", "custom.env",
	    "--port", "8004"), 0);
	assert_int_equal(cfg.port, 8004);		/* flags last */
	sandboxd_config_free(&cfg);
}

static void
test_bad_values_name_their_key(void **state)
{
	static const struct {
		const char *env, *value, *expect;
	} cases[] = {
		{ "PORT", "eighty", "PORT" },
		{ "PORT", "70000", "PORT" },
		{ "POOL_SIZE", "-1", "POOL_SIZE" },
		{ "REDIS_PORT", "0", "REDIS_PORT" },
		{ "SANDBOXD_ADVERTISE_ADDR", "host.example", "SANDBOXD_ADVERTISE_ADDR" },
		{ "SANDBOXD_REDIS_LEASE", "1", "SANDBOXD_REDIS_LEASE" },
		{ "SANDBOXD_REDIS_LEASE", "nan", "SANDBOXD_REDIS_LEASE" },
		{ "SANDBOXD_REDIS_DEAD_GRACE", "-1", "SANDBOXD_REDIS_DEAD_GRACE" },
		{ "REDIS_ENABLED", "maybe", "REDIS_ENABLED" },
		/* Shared mode without the instances' secret. */
		{ "REDIS_ENABLED", "true", "SANDBOXD_REDIS_SECRET" },
		{ "DEFAULT_SANDBOX_TYPE", "base,nope", "nope" },
		{ "PORT_RANGE", "50000,40000", "PORT_RANGE" },
		{ "PORT_RANGE", "80,90", "PORT_RANGE" },
		{ "CONTAINER_DEPLOYMENT", "k8s", "CONTAINER_DEPLOYMENT" },
		{ "READONLY_MOUNTS", "/nonexistent-sbx:/data", "READONLY_MOUNTS" },
		{ "READONLY_MOUNTS", "relative:/data", "READONLY_MOUNTS" },
		{ "MAX_SANDBOX_INSTANCES", "-3", "MAX_SANDBOX_INSTANCES" },
		{ "DOCKER_HOST", "tcp://127.0.0.1:2375", "DOCKER_HOST" },
		{ "AUTO_CLEANUP", "sometimes", "AUTO_CLEANUP" },
		{ "SANDBOXD_SHUTDOWN_PARALLEL", "-1", "SANDBOXD_SHUTDOWN_PARALLEL" },
		{ "SANDBOXD_SHUTDOWN_TIMEOUT", "0", "SANDBOXD_SHUTDOWN_TIMEOUT" },
		{ "SANDBOXD_REMOVE_PARALLEL", "1001", "SANDBOXD_REMOVE_PARALLEL" },
	};
	struct sandboxd_config cfg;
	struct error err;

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		setenv(cases[i].env, cases[i].value, 1);
		assert_int_equal(load(&cfg, &err, 1), -1);
		if (strstr(err.msg, cases[i].expect) == NULL)
			fail_msg("%s=%s: message '%s' does not name %s",
			    cases[i].env, cases[i].value, err.msg,
			    cases[i].expect);
		sandboxd_config_free(&cfg);
		unsetenv(cases[i].env);
	}
}

static void
test_config_file_is_strict(void **state)
{
	struct sandboxd_config cfg;
	struct error err;

	(void)state;
	write_file("typo.env", "POOLSIZE=3\n");
	assert_int_equal(load(&cfg, &err, 3, "--config", "typo.env"), -1);
	assert_non_null(strstr(err.msg, "POOLSIZE"));
	assert_non_null(strstr(err.msg, "typo.env:1"));
	sandboxd_config_free(&cfg);
	assert_int_equal(load(&cfg, &err, 3, "--config", "missing.env"), -1);
	assert_non_null(strstr(err.msg, "missing.env"));
	sandboxd_config_free(&cfg);
	assert_int_equal(load(&cfg, &err, 2, "--bogus"), -1);
	assert_non_null(strstr(err.msg, "--bogus"));
	sandboxd_config_free(&cfg);
}

static void
test_lists_and_mounts(void **state)
{
	struct sandboxd_config cfg;
	struct error err;

	(void)state;
	setenv("DEFAULT_SANDBOX_TYPE", " minimal , base", 1);
	setenv("PORT_RANGE", "[50000, 50100]", 1);
	setenv("READONLY_MOUNTS", "{\"/etc\": \"/host-etc\", \"/tmp\": \"/t\"}",
	    1);
	assert_int_equal(load(&cfg, &err, 1), 0);
	assert_int_equal(cfg.pool_types.n, 2);
	assert_string_equal(cfg.pool_types.v[0], "minimal");
	assert_string_equal(cfg.pool_types.v[1], "base");
	assert_int_equal(cfg.port_lo, 50000);
	assert_int_equal(cfg.port_hi, 50100);
	assert_int_equal(cfg.nro_mounts, 2);
	assert_string_equal(cfg.ro_mounts[0].host, "/etc");
	assert_string_equal(cfg.ro_mounts[0].container, "/host-etc");
	sandboxd_config_free(&cfg);

	setenv("READONLY_MOUNTS", "/etc:/host-etc", 1);
	assert_int_equal(load(&cfg, &err, 1), 0);
	assert_int_equal(cfg.nro_mounts, 1);
	assert_string_equal(cfg.ro_mounts[0].container, "/host-etc");
	sandboxd_config_free(&cfg);
	unsetenv("DEFAULT_SANDBOX_TYPE");
	unsetenv("PORT_RANGE");
	unsetenv("READONLY_MOUNTS");
}

static void
test_port_range_forms(void **state)
{
	int lo, hi;

	(void)state;
	assert_int_equal(sandboxd_parse_port_range("49152,59152", &lo, &hi), 0);
	assert_int_equal(lo, 49152);
	assert_int_equal(hi, 59152);
	assert_int_equal(sandboxd_parse_port_range("[2000, 3000]", &lo, &hi), 0);
	assert_int_equal(sandboxd_parse_port_range("2000-3000", &lo, &hi), 0);
	assert_int_equal(sandboxd_parse_port_range("2000", &lo, &hi), -1);
	assert_int_equal(sandboxd_parse_port_range("3000,2000", &lo, &hi), -1);
	assert_int_equal(sandboxd_parse_port_range("2000,70000", &lo, &hi), -1);
	assert_int_equal(sandboxd_parse_port_range("2000,3000x", &lo, &hi), -1);
}

static void
test_image_names(void **state)
{
	char *s;

	(void)state;
	s = sandbox_types_image_name(NULL, NULL, NULL, "minimal");
	assert_string_equal(s, "agentscope/runtime-sandbox-minimal:latest");
	free(s);
	s = sandbox_types_image_name("registry.example:5000/", "team", "v2", "base");
	assert_string_equal(s, "registry.example:5000/team/runtime-sandbox-base:v2");
	free(s);
	s = sandbox_types_image_name("", "", "", "gui");
	assert_string_equal(s, "runtime-sandbox-gui:latest");
	free(s);
}

static void
test_builtin_types(void **state)
{
	const struct sandbox_type *t;

	(void)state;
	sandbox_types_init(NULL, "ns", "t1");
	for (size_t i = 0; i < 6; i++) {
		static const char *const names[] = { "base", "minimal",
		    "code-interpreter", "filesystem", "browser", "gui" };

		t = sandbox_types_find(names[i]);
		assert_non_null(t);
		assert_true(t->memory > 0 && t->nano_cpus > 0 && t->pids > 0);
	}
	assert_string_equal(sandbox_types_find("minimal")->image,
	    "ns/runtime-sandbox-minimal:t1");
	assert_string_equal(sandbox_types_find("code-interpreter")->image,
	    "ns/runtime-sandbox-code-interpreter:t1");
	assert_string_equal(sandbox_types_find("minimal")->network, "none");
	assert_string_equal(sandbox_types_find("browser")->network, "bridge");
	assert_ptr_equal(sandbox_types_for_tool("browser_navigate"),
	    sandbox_types_find("browser"));
	assert_ptr_equal(sandbox_types_for_tool("edit_file"), sandbox_types_find("filesystem"));
	assert_ptr_equal(sandbox_types_for_tool("run_shell_command"), sandbox_types_find("base"));
	assert_null(sandbox_types_for_tool("no_such_tool"));
	assert_null(sandbox_types_find("nope"));
	/* The SDK's async classes ask for <type>_async. */
	assert_ptr_equal(sandbox_types_find("base_async"), sandbox_types_find("base"));
	assert_ptr_equal(sandbox_types_find("browser_async"), sandbox_types_find("browser"));
	assert_null(sandbox_types_find("nope_async"));
	assert_null(sandbox_types_find("_async"));
	assert_null(sandbox_types_find("base_async_async"));
}

static void
test_custom_types(void **state)
{
	const struct sandbox_type *t;
	struct error err;
	json_t *j;

	(void)state;
	sandbox_types_init(NULL, NULL, NULL);
	j = json_loads("{\"types\": {"
	    "\"tiny\": {\"from\": \"minimal\", \"memory\": \"64M\", "
	    "\"cpus\": 0.25, \"network\": \"bridge\", "
	    "\"environment\": {\"A\": \"1\"}, \"tool_names\": [\"tiny_tool\"]},"
	    "\"other\": {\"image\": \"example/other:1\", \"pids\": 10,"
	    " \"run_as\": \"2000:3000\","
	    " \"cap_add\": [\"CHOWN\"], \"agent_args\": [\"--x\"]},"
	    "\"base\": {\"memory\": 1048576}}}", 0, NULL);
	assert_non_null(j);
	assert_int_equal(sandbox_types_load_json(j, "test", NULL, NULL, NULL, &err), 0);
	json_decref(j);
	t = sandbox_types_find("tiny");
	assert_non_null(t);
	assert_string_equal(t->image, "agentscope/runtime-sandbox-minimal:latest");
	assert_int_equal(t->memory, 64 * 1024 * 1024);
	assert_int_equal(t->nano_cpus, 250000000);
	assert_int_equal(t->pids, sandbox_types_find("minimal")->pids);
	assert_string_equal(t->network, "bridge");
	assert_string_equal(json_string_value(json_object_get(t->environment,
	    "A")), "1");
	assert_ptr_equal(sandbox_types_for_tool("tiny_tool"), t);
	assert_string_equal(t->run_as, "1000:1000");	/* from minimal */
	t = sandbox_types_find("other");
	assert_string_equal(t->run_as, "2000:3000");
	assert_string_equal(t->image, "example/other:1");
	assert_int_equal(t->pids, 10);
	assert_int_equal(t->cap_add.n, 1);
	assert_string_equal(t->agent_args.v[0], "--x");
	/* Overriding a built-in changes only the fields given. */
	assert_int_equal(sandbox_types_find("base")->memory, 1048576);
	assert_string_equal(sandbox_types_find("base")->network, "none");
	assert_ptr_equal(sandbox_types_find("tiny_async"), sandbox_types_find("tiny"));
	/* A type of that very name is that type. */
	j = json_loads("{\"types\": {\"tiny_async\": {\"from\": \"base\"}}}",
	    0, NULL);
	assert_int_equal(sandbox_types_load_json(j, "test", NULL, NULL, NULL, &err), 0);
	json_decref(j);
	assert_string_equal(sandbox_types_find("tiny_async")->name, "tiny_async");
	assert_ptr_not_equal(sandbox_types_find("tiny_async"), sandbox_types_find("tiny"));
}

static void
test_bad_types(void **state)
{
	static const struct {
		const char *json, *expect;
	} cases[] = {
		{ "{\"types\": {\"x\": {\"memroy\": 1}}}", "type x: memroy" },
		{ "{\"types\": {\"x\": {\"network\": \"host\"}}}", "type x: network" },
		{ "{\"types\": {\"X Y\": {}}}", "X Y" },
		{ "{\"types\": {\"x\": {\"from\": \"nope\"}}}", "type x" },
		{ "{\"types\": {\"x\": {\"environment\": {\"A\": 1}}}}",
		    "type x: environment" },
		{ "{\"types\": {\"x\": {\"cpus\": \"two\"}}}", "type x: cpus" },
		{ "{\"types\": {\"x\": {\"run_as\": \"0:0\"}}}", "type x: run_as" },
		{ "{\"types\": {\"x\": {\"run_as\": \"1000\"}}}", "type x: run_as" },
		{ "{\"types\": {\"x\": {\"run_as\": \"+1:2\"}}}", "type x: run_as" },
		{ "{\"types\": {\"x\": {\"run_as\": \"1:2x\"}}}", "type x: run_as" },
		{ "{\"types\": []}", "types" },
		{ "[]", "types" },
	};
	struct error err;

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		json_t *j = json_loads(cases[i].json, 0, NULL);

		sandbox_types_init(NULL, NULL, NULL);
		assert_non_null(j);
		assert_int_equal(sandbox_types_load_json(j, "f.json", NULL, NULL, NULL,
		    &err), -1);
		if (strstr(err.msg, cases[i].expect) == NULL)
			fail_msg("%s: '%s' lacks '%s'", cases[i].json, err.msg,
			    cases[i].expect);
		json_decref(j);
	}
}

static void
test_types_file_option(void **state)
{
	struct sandboxd_config cfg;
	struct error err;

	(void)state;
	write_file("types.json", "{\"types\": {\"mine\": {\"from\": \"minimal\"}}}");
	setenv("DEFAULT_SANDBOX_TYPE", "mine", 1);
	assert_int_equal(load(&cfg, &err, 3, "--types", "types.json"), 0);
	assert_string_equal(cfg.pool_types.v[0], "mine");
	sandboxd_config_free(&cfg);
	write_file("types.json", "{\"types\": ");
	assert_int_equal(load(&cfg, &err, 3, "--types", "types.json"), -1);
	assert_non_null(strstr(err.msg, "types.json"));
	sandboxd_config_free(&cfg);
	unsetenv("DEFAULT_SANDBOX_TYPE");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
		cmocka_unit_test(test_help_states_the_defaults),
		cmocka_unit_test_setup_teardown(test_sources_in_order, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_bad_values_name_their_key,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_config_file_is_strict, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_lists_and_mounts, setup,
		    teardown),
		cmocka_unit_test(test_port_range_forms),
		cmocka_unit_test(test_image_names),
		cmocka_unit_test_setup_teardown(test_builtin_types, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_custom_types, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_bad_types, setup, teardown),
		cmocka_unit_test_setup_teardown(test_types_file_option, setup,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
