/*
 * Native tool groups (--tools) and what they share with MCP tools: the
 * /mcp/list_tools entry shape and the CallToolResult shape.
 *
 * Which tool a name reaches when several offer it: native groups come
 * first, in --tools order, then MCP servers in the order they were added
 * (a server replaced with overwrite counts as added anew). The groups are
 * enabled at start, before any server exists, so this is simply "the first
 * registered wins"; each group is listed as one more server named after it.
 *
 * A call runs on a worker thread (work_queue.c), so that a tree of a
 * million files or a file of a gigabyte holds up no other request; the
 * tools share nothing but the workspace's root descriptor, so calls run
 * side by side on up to TOOLSET_WORKERS threads.
 */
#include "agent.h"
#include "toolset.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "log.h"
#include "work_queue.h"
#include "xmalloc.h"

#define TOOLSET_WORKERS 4

/* Every group the agent knows, by --tools name; ends with a NULL name. */
static const struct {
	const char *name;
	const struct tool_group *(*group)(void);
} known_groups[] = {
	{ "filesystem", fstools_group },
	{ "computer", computer_group },
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
toolset_setup(struct agent *agent, const char *list, struct error *err)
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
		if (toolset_group(agent, g->name) != NULL)
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
toolset_group(struct agent *agent, const char *name)
{
	for (size_t i = 0; i < agent->ntool_groups; i++)
		if (strcmp(agent->tool_groups[i]->name, name) == 0)
			return agent->tool_groups[i];
	return NULL;
}

json_t *
toolset_list_entry(const char *name, const char *description,
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
toolset_list_native(struct agent *agent, json_t *answer)
{
	for (size_t g = 0; g < agent->ntool_groups; g++) {
		const struct tool_group *group = agent->tool_groups[g];
		json_t *tools = json_object();

		for (size_t i = 0; i < group->ntools; i++) {
			const struct tool *t = &group->tools[i];
			json_t *schema = json_loads(t->input_schema, 0, NULL);

			json_object_set_new(tools, t->name,
			    toolset_list_entry(t->name, t->description, schema));
			json_decref(schema);
		}
		json_object_set_new(answer, group->name, tools);
	}
}

const struct tool *
toolset_find(struct agent *agent, const char *name)
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
toolset_result_normalize(json_t *result)
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

/* Calls. */

/* One native tool call: made on the loop, run on a worker, answered and
 * freed on the loop by job_done. */
struct tool_job {
	struct agent *agent;
	const struct tool *tool;
	json_t *arguments;		/* a reference */
	struct evbuffer *answer;	/* the result as JSON text */
	struct error err;
	int failed;
	size_t queue;			/* which worker has it */
	toolset_done_cb done;
	void *arg;
};

/* The workers, started as calls come in, up to TOOLSET_WORKERS; they live
 * until toolset_shutdown. pending counts each one's calls not yet answered
 * (loop thread only). */
static struct work_queue *queues[TOOLSET_WORKERS];
static unsigned pending[TOOLSET_WORKERS];
static size_t nqueues;
/* Set at shutdown: queued calls are answered 503 instead of run. */
static atomic_int stopping;

static void
free_text(const void *data, size_t len, void *extra)
{
	(void)len;
	(void)extra;
	free((void *)data);
}

/* On a worker: the tool, and the answer's JSON text, which for a big
 * tree or file is worth keeping off the loop too. */
static void
job_run(void *arg)
{
	struct tool_job *job = arg;
	json_t *result;
	char *text;

	if (atomic_load(&stopping)) {
		error_set(&job->err, 503, "the agent is shutting down");
		job->failed = 1;
		return;
	}
	/* Tools act for the user: a file write_file makes is theirs. */
	run_as_files(job->agent);
	if (job->tool->call(job->agent, job->arguments, &result,
	    &job->err) < 0) {
		job->failed = 1;
		return;
	}
	toolset_result_normalize(result);
	text = json_dumps(result, JSON_COMPACT);
	json_decref(result);
	if (text == NULL) {
		/* Only invalid UTF-8 in a string gets here; a bug of ours. */
		error_set(&job->err, 500, "tool %s: cannot encode its result "
		    "as JSON", job->tool->name);
		job->failed = 1;
		return;
	}
	job->answer = evbuffer_new();
	evbuffer_add_reference(job->answer, text, strlen(text), free_text,
	    NULL);
}

static void
job_finish(struct tool_job *job)
{
	job->done(job->failed ? NULL : job->answer, job->failed ? &job->err :
	    NULL, job->arg);
	if (job->answer != NULL)
		evbuffer_free(job->answer);
	json_decref(job->arguments);
	free(job);
}

static void
job_done(void *arg)
{
	struct tool_job *job = arg;

	pending[job->queue]--;
	job_finish(job);
}

/* No worker: the refusal still comes from the loop, after toolset_call
 * returned. */
static void
refused_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	job_finish(arg);
}

/* An idle worker, a new one while there are fewer than TOOLSET_WORKERS,
 * else the least busy; -1 when not even one could be started. */
static ssize_t
pick_queue(struct agent *agent)
{
	size_t best = 0;

	for (size_t i = 0; i < nqueues; i++) {
		if (pending[i] == 0)
			return (ssize_t)i;
		if (pending[i] < pending[best])
			best = i;
	}
	if (nqueues < TOOLSET_WORKERS &&
	    (queues[nqueues] = work_queue_new(agent->base)) != NULL)
		return (ssize_t)nqueues++;
	return nqueues > 0 ? (ssize_t)best : -1;
}

void
toolset_call(struct agent *agent, const struct tool *tool, json_t *arguments,
    toolset_done_cb done, void *arg)
{
	struct tool_job *job = xcalloc(1, sizeof *job);
	ssize_t q = pick_queue(agent);

	job->agent = agent;
	job->tool = tool;
	job->arguments = json_incref(arguments);
	job->done = done;
	job->arg = arg;
	if (q < 0) {
		error_set(&job->err, 500, "native tools are unavailable: no "
		    "worker thread could start");
		job->failed = 1;
		event_base_once(agent->base, -1, EV_TIMEOUT, refused_cb, job,
		    NULL);
		return;
	}
	job->queue = (size_t)q;
	pending[q]++;
	work_queue_submit(queues[q], job_run, job_done, job);
}

/* A call under way is let finish (a write_file cut off would leave a
 * temporary file behind); the queued ones are answered without running. */
void
toolset_shutdown(void)
{
	atomic_store(&stopping, 1);
	for (size_t i = 0; i < nqueues; i++)
		work_queue_free(queues[i]);
	nqueues = 0;
}
