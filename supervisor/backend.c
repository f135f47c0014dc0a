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
