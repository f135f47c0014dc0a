/*
 * GET /metrics in the Prometheus text format: sandboxes by type and state,
 * pool sizes, counters of creates, failures, releases, pool takes and
 * misses, health failures and proxied requests, and histograms of create
 * latency and of the time creates waited for Docker in sandboxd's queue,
 * and with FILE_SYSTEM=oss the workspace transfers (oss.c's own lines).
 * Counters live here per type; gauges are read from the records, or
 * from the module that keeps them (metrics_gauge_add), so that every
 * module may count here without this file calling back up into it.
 */
#include "sandboxd.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "backend.h"
#include "egress.h"
#include "log.h"
#include "oss.h"
#include "xmalloc.h"

static const double buckets[] = {
	0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60,
};
#define NBUCKETS (sizeof buckets / sizeof buckets[0])

/* A histogram over buckets[]. */
struct histogram {
	uint64_t hist[NBUCKETS];	/* cumulative */
	uint64_t count;
	double sum;
};

/* Per type; freed by metrics_free. */
struct type_metrics {
	char *type;
	uint64_t counters[M_COUNTERS];
	struct histogram create;	/* request to a healthy agent */
	struct histogram queue;		/* request to Docker's create call */
};

static struct type_metrics *tm;
static size_t ntm;

/* Gauges of other modules (metrics_gauge_add); a handful. */
#define GAUGES_MAX 4
static struct {
	const char *name;
	const char *help;
	size_t (*value)(void);
} gauges[GAUGES_MAX];
static size_t ngauges;

static const struct {
	const char *name;
	const char *help;
} counters[M_COUNTERS] = {
	[M_CREATES] = { "sandboxd_creates_total",
	    "Sandboxes created and healthy." },
	[M_CREATE_FAILURES] = { "sandboxd_create_failures_total",
	    "Creates that failed (and were undone)." },
	[M_RELEASES] = { "sandboxd_releases_total", "Sandboxes released." },
	[M_POOL_TAKES] = { "sandboxd_pool_takes_total",
	    "Sandboxes handed out from a warm pool." },
	[M_POOL_MISSES] = { "sandboxd_pool_misses_total",
	    "Pool takes that found the pool empty." },
	[M_HEALTH_FAILURES] = { "sandboxd_health_failures_total",
	    "Sandboxes found dead or unhealthy." },
	[M_PROXIED] = { "sandboxd_proxied_requests_total",
	    "Requests proxied to agents." },
	[M_ADOPTED] = { "sandboxd_adopted_total",
	    "Sandboxes taken back after a restart." },
};

static struct type_metrics *
get(const char *type)
{
	for (size_t i = 0; i < ntm; i++) {
		if (strcmp(tm[i].type, type) == 0)
			return &tm[i];
	}
	tm = xreallocarray(tm, ntm + 1, sizeof *tm);
	memset(&tm[ntm], 0, sizeof tm[ntm]);
	tm[ntm].type = xstrdup(type);
	return &tm[ntm++];
}

void
metrics_count(enum metric_counter c, const char *type_name)
{
	get(type_name)->counters[c]++;
}

static void
observe(struct histogram *h, double seconds)
{
	for (size_t i = 0; i < NBUCKETS; i++) {
		if (seconds <= buckets[i])
			h->hist[i]++;
	}
	h->count++;
	h->sum += seconds;
}

void
metrics_create_seconds(const char *type_name, double seconds)
{
	observe(&get(type_name)->create, seconds);
}

void
metrics_create_queue_seconds(const char *type_name, double seconds)
{
	observe(&get(type_name)->queue, seconds);
}

static void
head(struct evbuffer *b, const char *name, const char *type,
    const char *help)
{
	evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
	    type);
}

/* Each type's create histogram, or its queue one. */
static void
histogram(struct evbuffer *b, const char *name, const char *help, int queue)
{
	head(b, name, "histogram", help);
	for (size_t i = 0; i < ntm; i++) {
		const struct histogram *h = queue ? &tm[i].queue :
		    &tm[i].create;

		for (size_t j = 0; j < NBUCKETS; j++)
			evbuffer_add_printf(b, "%s_bucket{type=\"%s\",le=\"%g\"} "
			    "%" PRIu64 "\n", name, tm[i].type, buckets[j],
			    h->hist[j]);
		evbuffer_add_printf(b, "%s_bucket{type=\"%s\",le=\"+Inf\"} "
		    "%" PRIu64 "\n", name, tm[i].type, h->count);
		evbuffer_add_printf(b, "%s_sum{type=\"%s\"} %.6f\n", name,
		    tm[i].type, h->sum);
		evbuffer_add_printf(b, "%s_count{type=\"%s\"} %" PRIu64 "\n",
		    name, tm[i].type, h->count);
	}
}

void
metrics_gauge_add(const char *name, const char *help, size_t (*value)(void))
{
	if (ngauges == GAUGES_MAX)
		fatal("more than %d gauges", GAUGES_MAX);
	gauges[ngauges].name = name;
	gauges[ngauges].help = help;
	gauges[ngauges].value = value;
	ngauges++;
}

void
metrics_route(struct http_request *req, void *arg)
{
	static const enum sandbox_state states[] = { SB_CREATING, SB_WARM,
	    SB_RUNNING, SB_UNHEALTHY, SB_STOPPED, SB_PAUSED, SB_RELEASING };
	struct evbuffer *b = evbuffer_new();

	(void)arg;
	/* Every type gets a line even at zero, so graphs start at zero. */
	for (size_t i = 0; i < sandbox_types_count(); i++)
		get(sandbox_types_at(i)->name);
	head(b, "sandboxd_info", "gauge", "Version of this sandboxd.");
	evbuffer_add_printf(b, "sandboxd_info{version=\"%s\",backend=\"%s\"} 1\n",
	    VERSION, sd.backend->ops->name);
	head(b, "sandboxd_sandboxes", "gauge", "Sandboxes by type and state.");
	for (size_t i = 0; i < ntm; i++) {
		for (size_t j = 0; j < sizeof states / sizeof states[0]; j++)
			evbuffer_add_printf(b, "sandboxd_sandboxes{type=\"%s\","
			    "state=\"%s\"} %zu\n", tm[i].type,
			    sandbox_state_name(states[j]),
			    sandbox_count(tm[i].type, states[j]));
	}
	head(b, "sandboxd_pool_ready", "gauge", "Warm sandboxes per pool.");
	for (size_t i = 0; i < sd.cfg.pool_types.n; i++)
		evbuffer_add_printf(b, "sandboxd_pool_ready{type=\"%s\"} %zu\n",
		    sd.cfg.pool_types.v[i], sandbox_count(sd.cfg.pool_types.v[i],
		    SB_WARM));
	head(b, "sandboxd_pool_target", "gauge", "POOL_SIZE per pool.");
	for (size_t i = 0; i < sd.cfg.pool_types.n; i++)
		evbuffer_add_printf(b, "sandboxd_pool_target{type=\"%s\"} %ld\n",
		    sd.cfg.pool_types.v[i], sd.cfg.pool_size);
	for (size_t c = 0; c < M_COUNTERS; c++) {
		head(b, counters[c].name, "counter", counters[c].help);
		for (size_t i = 0; i < ntm; i++)
			evbuffer_add_printf(b, "%s{type=\"%s\"} %" PRIu64 "\n",
			    counters[c].name, tm[i].type, tm[i].counters[c]);
	}
	histogram(b, "sandboxd_create_seconds",
	    "Seconds from create to a healthy agent.",
	    0);
	histogram(b, "sandboxd_create_queue_seconds",
	    "Seconds a create waited in sandboxd's queue before Docker got it.",
	    1);
	for (size_t i = 0; i < ngauges; i++) {
		head(b, gauges[i].name, "gauge", gauges[i].help);
		evbuffer_add_printf(b, "%s %zu\n", gauges[i].name,
		    gauges[i].value());
	}
	head(b, "sandboxd_ports_in_use", "gauge", "Host ports held by sandboxes.");
	evbuffer_add_printf(b, "sandboxd_ports_in_use %zu\n",
	    ports_in_use(sd.ports));
	head(b, "sandboxd_connections", "gauge", "Open client connections.");
	evbuffer_add_printf(b, "sandboxd_connections %zu\n",
	    http_server_connections(sd.http));
	egress_metrics(b);
	oss_metrics(b);
	http_reply_buffer(req, 200, "text/plain; version=0.0.4; charset=utf-8",
	    b);
	evbuffer_free(b);
}

void
metrics_free(void)
{
	for (size_t i = 0; i < ntm; i++)
		free(tm[i].type);
	free(tm);
	tm = NULL;
	ntm = 0;
}
