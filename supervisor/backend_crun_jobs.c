/*
 * The crun backend's child processes: crun itself, the CNI plugins and
 * the removal of a sandbox's directory, each a fork + exec from the loop
 * (spawn.c), never a blocking call. At most `parallel` run at once (a
 * burst of creates would otherwise start hundreds of crun on two CPUs, all
 * slower than a few in turn); urgent ones (removals, stops, pauses) are
 * served before the rest, so that work under way finishes first. What a
 * job writes is read up to a cap; its exit is told through done, never
 * before crun_jobs_run returned.
 */
#include "backend_crun.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "spawn.h"
#include "xmalloc.h"

/* Bytes kept of what a job writes, per stream. */
#define JOB_OUTPUT_CAP (16 * 1024)
/* No crun or plugin call takes this long but on a host that is stuck. */
#define JOB_TIMEOUT 120.0

/* Owned by the queue from crun_jobs_run until done ran. */
struct job {
	struct crun_jobs *q;
	char **argv;
	char **envp;
	char *input;
	int out_fd;
	int (*setup)(void *);
	void *setup_arg;
	int urgent;
	void (*started)(void *);
	crun_job_done_cb done;
	void *arg;
	struct spawn *sp;
	struct error fail;
	int failed;
	struct event *defer;
	TAILQ_ENTRY(job) entry;
};

TAILQ_HEAD(job_list, job);

struct crun_jobs {
	struct event_base *base;
	size_t parallel;
	size_t running;
	struct job_list urgent, normal, active;
};

static char **
copy_strings(const char *const *v)
{
	size_t n = 0;
	char **out;

	if (v == NULL)
		return NULL;
	while (v[n] != NULL)
		n++;
	out = xcalloc(n + 1, sizeof *out);
	for (size_t i = 0; i < n; i++)
		out[i] = xstrdup(v[i]);
	return out;
}

static void
free_strings(char **v)
{
	for (size_t i = 0; v != NULL && v[i] != NULL; i++)
		free(v[i]);
	free(v);
}

static void
job_free(struct job *j)
{
	free_strings(j->argv);
	free_strings(j->envp);
	free(j->input);
	if (j->out_fd >= 0)
		close(j->out_fd);
	if (j->defer != NULL)
		event_free(j->defer);
	free(j);
}

static void pump(struct crun_jobs *q);

/* NUL-terminated copy of what a stream kept. */
static char *
captured(struct spawn *sp, int stream)
{
	struct evbuffer *b = sp != NULL ? spawn_output(sp, stream) : NULL;
	size_t n = b != NULL ? evbuffer_get_length(b) : 0;
	char *s = xmalloc(n + 1);

	if (n > 0)
		evbuffer_copyout(b, s, n);
	s[n] = '\0';
	return s;
}

static void
finish(struct job *j, int status)
{
	char *out = captured(j->sp, 1), *errtext = captured(j->sp, 2);

	if (j->sp != NULL)
		spawn_free(j->sp);
	j->sp = NULL;
	j->done(status, out, errtext, j->failed ? &j->fail : NULL, j->arg);
	free(out);
	free(errtext);
	job_free(j);
}

static void
exit_cb(struct spawn *sp, int status, void *arg)
{
	struct job *j = arg;
	struct crun_jobs *q = j->q;

	(void)sp;
	if (spawn_timed_out(sp)) {
		error_set(&j->fail, 504, "%s did not finish within %.0f s",
		    j->argv[0], JOB_TIMEOUT);
		j->failed = 1;
	}
	TAILQ_REMOVE(&q->active, j, entry);
	q->running--;
	finish(j, status);
	pump(q);
}

/* A job that could not start answers from the loop's next turn. */
static void
failed_cb(evutil_socket_t fd, short what, void *arg)
{
	struct job *j = arg;

	(void)fd;
	(void)what;
	TAILQ_REMOVE(&j->q->active, j, entry);
	finish(j, -1);
}

static void
start(struct crun_jobs *q, struct job *j)
{
	struct spawn_options o = { 0 };
	struct spawn_callbacks cb = { 0 };
	static const struct timeval now = { 0, 0 };
	int in = -1;

	if (j->started != NULL)
		j->started(j->arg);
	o.argv = (const char *const *)j->argv;
	o.envp = (const char *const *)j->envp;
	o.stdio[0] = SPAWN_NULL;
	if (j->input != NULL) {
		in = spawn_memfd("job-input", j->input, strlen(j->input));
		if (in >= 0) {
			o.stdio[0] = SPAWN_FD;
			o.fd[0] = in;
		}
	}
	for (int i = 1; i < 3; i++) {
		o.stdio[i] = j->out_fd >= 0 ? SPAWN_FD : SPAWN_CAPTURE;
		o.fd[i] = j->out_fd;
		o.capture_cap[i] = JOB_OUTPUT_CAP;
	}
	o.timeout = JOB_TIMEOUT;
	o.setup = j->setup;
	o.setup_arg = j->setup_arg;
	cb.on_exit = exit_cb;
	TAILQ_INSERT_TAIL(&q->active, j, entry);
	if (j->input != NULL && in < 0)
		error_set_errno(&j->fail, 500, errno, "memfd");
	else
		j->sp = spawn_start(q->base, &o, &cb, j, &j->fail);
	if (in >= 0)
		close(in);
	if (j->sp != NULL) {
		q->running++;
		return;
	}
	j->failed = 1;
	j->defer = event_new(q->base, -1, 0, failed_cb, j);
	event_add(j->defer, &now);
}

static void
pump(struct crun_jobs *q)
{
	struct job *j;

	while (q->running < q->parallel) {
		if ((j = TAILQ_FIRST(&q->urgent)) != NULL)
			TAILQ_REMOVE(&q->urgent, j, entry);
		else if ((j = TAILQ_FIRST(&q->normal)) != NULL)
			TAILQ_REMOVE(&q->normal, j, entry);
		else
			return;
		start(q, j);
	}
}

/* pump from the loop: a job's done must not run inside crun_jobs_run. */
static void
pump_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	pump(arg);
}

struct crun_jobs *
crun_jobs_new(struct event_base *base, size_t parallel)
{
	struct crun_jobs *q = xcalloc(1, sizeof *q);

	q->base = base;
	q->parallel = parallel > 0 ? parallel : 1;
	TAILQ_INIT(&q->urgent);
	TAILQ_INIT(&q->normal);
	TAILQ_INIT(&q->active);
	return q;
}

void
crun_jobs_run(struct crun_jobs *q, const struct crun_job_spec *spec,
    crun_job_done_cb done, void *arg)
{
	static const struct timeval now = { 0, 0 };
	struct job *j = xcalloc(1, sizeof *j);

	j->q = q;
	j->argv = copy_strings(spec->argv);
	j->envp = copy_strings(spec->envp);
	j->input = spec->input != NULL ? xstrdup(spec->input) : NULL;
	j->out_fd = spec->out_fd >= 0 ? dup(spec->out_fd) : -1;
	j->setup = spec->setup;
	j->setup_arg = spec->setup_arg;
	j->urgent = spec->urgent;
	j->started = spec->started;
	j->done = done;
	j->arg = arg;
	if (spec->out_fd >= 0 && j->out_fd < 0) {
		error_set_errno(&j->fail, 500, errno, "dup");
		j->failed = 1;
		TAILQ_INSERT_TAIL(&q->active, j, entry);
		j->defer = event_new(q->base, -1, 0, failed_cb, j);
		event_add(j->defer, &now);
		return;
	}
	TAILQ_INSERT_TAIL(j->urgent ? &q->urgent : &q->normal, j, entry);
	if (q->running < q->parallel)
		event_base_once(q->base, -1, EV_TIMEOUT, pump_cb, q, &now);
}

void
crun_jobs_set_parallel(struct crun_jobs *q, size_t parallel)
{
	static const struct timeval now = { 0, 0 };

	q->parallel = parallel > 0 ? parallel : 1;
	event_base_once(q->base, -1, EV_TIMEOUT, pump_cb, q, &now);
}

size_t
crun_jobs_parallel(const struct crun_jobs *q)
{
	return q->parallel;
}

static void
abort_list(struct crun_jobs *q, struct job_list *l, const char *why)
{
	struct job *j;

	while ((j = TAILQ_FIRST(l)) != NULL) {
		TAILQ_REMOVE(l, j, entry);
		if (j->sp != NULL)
			q->running--;
		error_set(&j->fail, 503, "%s", why);
		j->failed = 1;
		finish(j, -1);
	}
}

void
crun_jobs_abort(struct crun_jobs *q, const char *why)
{
	if (q == NULL)
		return;
	abort_list(q, &q->active, why);
	abort_list(q, &q->urgent, why);
	abort_list(q, &q->normal, why);
}

void
crun_jobs_free(struct crun_jobs *q)
{
	if (q == NULL)
		return;
	crun_jobs_abort(q, "sandboxd is exiting");
	free(q);
}
