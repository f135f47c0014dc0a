/*
 * The backends sandboxd has, by their CONTAINER_DEPLOYMENT: adding one is
 * its file and an entry here.
 */
#include "backend.h"

#include <stdio.h>
#include <string.h>

static const struct {
	const char *kind;
	struct backend *(*make)(struct event_base *base,
	    const struct sandboxd_config *cfg, struct error *err);
} kinds[] = {
	{ "docker", backend_docker_new },
	{ "crun", backend_crun_new },
};

#define NKINDS (sizeof kinds / sizeof kinds[0])

static const char *const state_names[] = {
	[BACKEND_CREATED] = "created",
	[BACKEND_RUNNING] = "running",
	[BACKEND_PAUSED] = "paused",
	[BACKEND_EXITED] = "exited",
	[BACKEND_DEAD] = "dead",
};

const char *
backend_state_name(enum backend_state state)
{
	return state_names[state];
}

/* Docker's default list, and /proc/interrupts: its per-CPU counts of the
 * host's interrupts (keyboard and network ones among them) tick with
 * what other tenants do, a timing side channel no sandbox needs. */
static const char *const masked_paths[] = {
	"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore",
	"/proc/keys", "/proc/latency_stats", "/proc/timer_list",
	"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
	"/sys/firmware", "/sys/devices/virtual/powercap",
};

const char *const *
backend_masked_paths(size_t *n)
{
	*n = sizeof masked_paths / sizeof masked_paths[0];
	return masked_paths;
}

int
backend_check_kind(const char *kind, struct error *err)
{
	char known[128] = "";

	for (size_t i = 0; i < NKINDS; i++) {
		if (strcmp(kinds[i].kind, kind) == 0)
			return 0;
		snprintf(known + strlen(known), sizeof known - strlen(known),
		    "%s%s", i > 0 ? ", " : "", kinds[i].kind);
	}
	error_set(err, 400, "CONTAINER_DEPLOYMENT: '%s' is not supported "
	    "(sandboxd has: %s)", kind, known);
	return -1;
}

struct backend *
backend_new(const char *kind, struct event_base *base,
    const struct sandboxd_config *cfg, struct error *err)
{
	for (size_t i = 0; i < NKINDS; i++) {
		if (strcmp(kinds[i].kind, kind) == 0)
			return kinds[i].make(base, cfg, err);
	}
	backend_check_kind(kind, err);
	return NULL;
}
