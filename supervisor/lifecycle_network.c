/*
 * A sandbox's egress policy over its life: put in place each time its
 * container starts (a create, a start: each gives it a new network
 * namespace), before its agent is waited for, so no sandbox is handed out
 * or counted warm unpoliced; changed live (PUT /v1/sandboxes/{id}/network);
 * shown in its model. The backend says where its namespace is, egress.c
 * does the rest. A backend that makes the namespace itself (crun) asks
 * for the policy before the sandbox's first program runs there
 * (lifecycle_police_early); Docker's exists only once its container runs,
 * and is policed after the start.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <unistd.h>

#include "backend.h"
#include "egress.h"
#include "lifecycle_internal.h"
#include "log.h"
#include "xmalloc.h"

/* One police or change under way; holds a reference to its sandbox. */
struct police {
	struct sandbox *sb;
	sandbox_done_cb done;
	/* A backend's police before the start (lifecycle_police_early):
	 * its continuation, in place of done. */
	void (*cont)(const struct error *err, void *arg);
	void *arg;
	json_t *network;		/* a change: the new lists */
	double started;			/* monotonic */
	struct error err;
	int failed;
};

static void
police_end(struct police *p)
{
	if (p->cont != NULL) {
		/* The lifecycle_police after that start has nothing to do. */
		p->sb->egress_early = !p->failed;
		p->cont(p->failed ? &p->err : NULL, p->arg);
	} else {
		p->done(p->sb, p->failed ? &p->err : NULL, p->arg);
	}
	sandbox_unref(p->sb);
	json_decref(p->network);
	free(p);
}

static void
police_end_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	police_end(arg);
}

static struct police *
police_new(struct sandbox *sb, sandbox_done_cb done, void *arg)
{
	struct police *p = xcalloc(1, sizeof *p);

	sandbox_ref(sb);
	p->started = timing_monotonic();
	p->sb = sb;
	p->done = done;
	p->arg = arg;
	return p;
}

static void
set_view(struct sandbox *sb, const struct egress_policy *pol)
{
	json_decref(sb->egress_view);
	sb->egress_view = egress_policy_json(pol);
	sandbox_changed(sb);
}

static void
installed_cb(const struct error *err, void *arg)
{
	struct police *p = arg;

	if (err != NULL) {
		p->err = *err;
		p->failed = 1;
	} else {
		log_debug("sandbox %s: policed in %.1f ms", p->sb->name,
		    (timing_monotonic() - p->started) * 1e3);
	}
	police_end(p);
}

/* The sandbox's policy into its namespace netns (taken), unless it went
 * meanwhile. */
static void
police_attach(struct police *p, int netns)
{
	struct sandbox *sb = p->sb;
	struct egress_policy pol;

	if (sb->state == SB_RELEASING || sb->state == SB_RELEASED) {
		error_set(&p->err, 409, "sandbox %s was released while "
		    "starting", sb->name);
		p->failed = 1;
		close(netns);
		police_end(p);
		return;
	}
	egress_policy_build(&pol, sb->type->egress, sb->network);
	set_view(sb, &pol);
	sb->egress = egress_attach(sb->name, netns, &pol, installed_cb, p,
	    &p->err);
	egress_policy_free(&pol);
	if (sb->egress == NULL) {
		p->failed = 1;
		police_end(p);
	}
}

static void
netns_cb(int netns, const struct error *err, void *arg)
{
	struct police *p = arg;

	if (err != NULL) {
		p->err = *err;
		p->failed = 1;
		if (netns >= 0)
			close(netns);
		police_end(p);
		return;
	}
	police_attach(p, netns);
}

void
lifecycle_police_early(const char *name, int netns,
    void (*cont)(const struct error *err, void *arg), void *arg)
{
	struct sandbox *sb = sandbox_find(name);
	struct police *p;
	struct error err;

	if (sb == NULL) {
		close(netns);
		error_set(&err, 409, "sandbox %s was released while starting",
		    name);
		cont(&err, arg);
		return;
	}
	p = police_new(sb, NULL, arg);
	p->cont = cont;
	/* A new namespace: the old one's resolver goes. */
	egress_free(sb->egress);
	sb->egress = NULL;
	sb->egress_early = 0;
	police_attach(p, netns);
}

void
lifecycle_police(struct sandbox *sb, sandbox_done_cb done, void *arg)
{
	struct police *p = police_new(sb, done, arg);

	/* Policed already, by the backend before this start ran it. */
	if (sb->egress_early && sb->egress != NULL) {
		sb->egress_early = 0;
		sandboxd_defer(police_end_cb, p);
		return;
	}
	sb->egress_early = 0;
	/* A new container, a new namespace: the old one's resolver goes. */
	egress_free(sb->egress);
	sb->egress = NULL;
	if (!sandbox_has_network(sb) || sb->container_id == NULL) {
		sandboxd_defer(police_end_cb, p);
		return;
	}
	sd.backend->ops->netns(sd.backend, sb->container_id, netns_cb, p);
}

static void
changed_cb(const struct error *err, void *arg)
{
	struct police *p = arg;
	struct sandbox *sb = p->sb;

	if (err != NULL) {
		p->err = *err;
		p->failed = 1;
	} else {
		struct egress_policy pol;

		json_decref(sb->network);
		sb->network = json_incref(p->network);
		egress_policy_build(&pol, sb->type->egress, p->network);
		set_view(sb, &pol);
		egress_policy_free(&pol);
		log_info("sandbox %s: egress policy changed", sb->name);
	}
	police_end(p);
}

void
lifecycle_set_network(struct sandbox *sb, json_t *network,
    sandbox_done_cb done, void *arg)
{
	struct police *p = police_new(sb, done, arg);
	struct egress_policy pol;

	p->network = network;
	if (!sandbox_has_network(sb)) {
		error_set(&p->err, 409, "sandbox %s has no network (type %s)",
		    sb->name, sb->type_name);
	} else if (sb->egress == NULL || (sb->state != SB_RUNNING &&
	    sb->state != SB_WARM && sb->state != SB_UNHEALTHY &&
	    sb->state != SB_PAUSED)) {
		error_set(&p->err, 409, "sandbox %s is %s: its network changes "
		    "while it runs", sb->name, sandbox_state_name(sb->state));
	} else if (egress_busy(sb->egress)) {
		error_set(&p->err, 409, "sandbox %s: a change of its network is "
		    "under way", sb->name);
	} else {
		egress_policy_build(&pol, sb->type->egress, network);
		egress_update(sb->egress, &pol, changed_cb, p);
		egress_policy_free(&pol);
		return;
	}
	p->failed = 1;
	sandboxd_defer(police_end_cb, p);
}
