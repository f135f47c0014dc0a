/*
 * Health: a round, every SANDBOXD_HEALTH_INTERVAL seconds, asks the
 * backend in one call which of our containers are not running and probes
 * each ready sandbox (a paused one is not: its agent is frozen on purpose). A warm
 * (pool) sandbox whose container died or whose agent stopped answering is
 * released, and the pool makes a new one; a sandbox in use is marked
 * unhealthy and reported, never swapped behind its user's back.
 *
 * Every FULL_LIST_EVERY rounds, and the first, the list has all our
 * containers: one that is gone is noticed from it, and containers with our
 * label that no record knows are removed. The other rounds list only the
 * stopped ones because the full list is what costs at scale: at 1000
 * sandboxes it is ~1.7 MB of JSON that dockerd builds and we parse, every
 * round, where the stopped ones are usually none (a gone container's agent
 * also fails its probes meanwhile). Records and containers are matched
 * through sorted lists: thousands of comparisons a round, not millions.
 * Each probe is agent_probe's (agent_client.c).
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "backend.h"
#include "log.h"
#include "xmalloc.h"

/* Probes that fail in a row before a sandbox counts as unhealthy. */
#define HEALTH_FAILURES 2
#define ROUND_PROBE_TIMEOUT 5.0
/* Released records kept for get_info. */
#define RELEASED_KEEP 1000
/* Rounds between lists of all our containers (see above). */
#define FULL_LIST_EVERY 6

static struct event *round_ev;
static int round_running;
static unsigned round_count;
static int round_full;		/* this round lists every container */
/* When the round asked Docker for its list: a sandbox whose state changed
 * after that (a create that finished while the list was on its way) is
 * judged next round, not by a list that may show its container before it
 * started. */
static double round_listed_at;

static void
released_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	(void)arg;
	if (err != NULL)
		log_warn("health: cannot release %s: %s", sb->name, err->msg);
}

/* sb failed: release a pool sandbox, mark one in use. */
static void
failed(struct sandbox *sb, const char *why)
{
	if (sb->state == SB_UNHEALTHY) {
		sandbox_set_error(sb, "%s", why);
		return;
	}
	metrics_count(M_HEALTH_FAILURES, sb->type_name);
	if (sb->state == SB_WARM) {
		log_warn("health: pool sandbox %s failed (%s): replacing it",
		    sb->name, why);
		lifecycle_release(sb, released_cb, NULL);
		return;
	}
	log_warn("health: sandbox %s is unhealthy: %s", sb->name, why);
	sandbox_set_error(sb, "%s", why);
	sandbox_set_state(sb, SB_UNHEALTHY);
}

static void
round_probe_cb(struct sandbox *sb, int ok, const char *why, void *arg)
{
	(void)arg;
	sb->health_probing = 0;
	if (sb->op != NULL || !sb->listed)
		return;
	if (ok) {
		sb->health_failures = 0;
		if (sb->state == SB_UNHEALTHY) {
			log_info("health: sandbox %s answers again", sb->name);
			sandbox_set_state(sb, SB_RUNNING);
		}
		return;
	}
	if (sb->state != SB_WARM && sb->state != SB_RUNNING &&
	    sb->state != SB_UNHEALTHY)
		return;
	if (++sb->health_failures >= HEALTH_FAILURES)
		failed(sb, why);
}

static int
checkable(const struct sandbox *sb)
{
	return sb->op == NULL && (sb->state == SB_WARM ||
	    sb->state == SB_RUNNING || sb->state == SB_UNHEALTHY);
}

static void
orphan_removed_cb(const struct error *err, void *arg)
{
	char *name = arg;

	if (err != NULL)
		log_warn("health: cannot remove stray container %s: %s", name,
		    err->msg);
	free(name);
}

static int
compare_containers(const void *a, const void *b)
{
	return strcmp(((const struct backend_container *)a)->name,
	    ((const struct backend_container *)b)->name);
}

static int
compare_names(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The names of the records that are not released, sorted, borrowed from
 * the records. Caller frees. */
static const char **
live_names(size_t *n)
{
	const char **names = xreallocarray(NULL, sandbox_count_live() + 1,
	    sizeof *names);
	struct sandbox *sb;

	*n = 0;
	for (sb = sandbox_first(); sb != NULL; sb = sandbox_next(sb)) {
		if (sb->state != SB_RELEASED)
			names[(*n)++] = sb->name;
	}
	qsort(names, *n, sizeof *names, compare_names);
	return names;
}

/* Containers with our label that no live record names: removed. */
static void
remove_strays(const struct backend_container *v, size_t n)
{
	size_t nlive;
	const char **live = live_names(&nlive);

	for (size_t i = 0; i < n; i++) {
		if (bsearch(&v[i].name, live, nlive, sizeof *live,
		    compare_names) != NULL)
			continue;
		log_warn("health: removing stray container %s (ours, but no "
		    "record knows it)", v[i].name);
		sd.backend->ops->remove(sd.backend, v[i].id, orphan_removed_cb,
		    xstrdup(v[i].name));
	}
	free(live);
}

static void
listed_cb(const struct backend_container *v, size_t n,
    const struct error *err, void *arg)
{
	struct backend_container *sorted = NULL;
	struct sandbox *sb, *next;

	(void)arg;
	round_running = 0;
	if (sd.shutting_down)
		return;
	if (err != NULL) {
		log_warn("health: cannot list containers: %s", err->msg);
	} else if (n > 0) {
		sorted = xreallocarray(NULL, n, sizeof *sorted);
		memcpy(sorted, v, n * sizeof *sorted);
		qsort(sorted, n, sizeof *sorted, compare_containers);
	}
	for (sb = sandbox_first(); sb != NULL; sb = next) {
		const struct backend_container *c = NULL, key = {
			.name = sb->name };

		next = sandbox_next(sb);
		if (!checkable(sb) || sb->updated_at > round_listed_at)
			continue;
		if (sorted != NULL)
			c = bsearch(&key, sorted, n, sizeof *sorted,
			    compare_containers);
		/* Missing from a list of the stopped ones: running. */
		if (err == NULL && (c != NULL || round_full) && (c == NULL ||
		    c->state != BACKEND_RUNNING)) {
			char why[128];

			snprintf(why, sizeof why, "its container is %s",
			    c == NULL ? "gone" : backend_state_name(c->state));
			sb->health_failures = HEALTH_FAILURES;
			failed(sb, why);
			continue;
		}
		if (sb->health_probing)
			continue;
		sb->health_probing = 1;
		agent_probe(sb, ROUND_PROBE_TIMEOUT, round_probe_cb, NULL);
	}
	free(sorted);
	if (err == NULL && sd.ready && round_full)
		remove_strays(v, n);
	sandbox_trim_released(RELEASED_KEEP);
}

static void
round_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (round_running || !sd.ready || sd.shutting_down)
		return;
	round_running = 1;
	round_listed_at = timing_wall();
	round_full = round_count++ % FULL_LIST_EVERY == 0;
	sd.backend->ops->list_ours(sd.backend, state_instance(), !round_full,
	    listed_cb, NULL);
}

void
health_init(void)
{
	struct timeval tv;

	tv = timing_timeval(sd.cfg.health_interval);
	round_ev = event_new(sd.base, -1, EV_PERSIST, round_cb, NULL);
	event_add(round_ev, &tv);
}

void
health_stop(void)
{
	if (round_ev != NULL)
		event_free(round_ev);
	round_ev = NULL;
}
