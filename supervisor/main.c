/*
 * sandboxd: load and check the configuration, take the state directory,
 * listen, take back our sandboxes from a previous run, fill the pools, and
 * serve until SIGTERM or SIGINT. At shutdown, with AUTO_CLEANUP, every
 * sandbox we made is removed (and a last sweep by label catches any
 * container no record knew) before we exit; without it, the state file
 * keeps them for the next start. A second signal exits at once.
 */
#include "sandboxd.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "backend.h"
#include "egress.h"
#include "log.h"
#include "oss.h"
#include "shared.h"
#include "spawn.h"
#include "xmalloc.h"

/* Seconds between "removed N of M" lines while shutdown removes. */
#define SHUTDOWN_PROGRESS_EVERY 2.0
/* No removal done for this long (or half the shutdown timeout, when
 * shorter): the backend says what may be stuck, once. */
#define SHUTDOWN_STALL 30.0

struct sandboxd sd;

static struct http_route *all_routes;
static struct event *shutdown_ev;
static double shutdown_began, shutdown_deadline, shutdown_next_progress;
static size_t sweep_pending;
static int sweeping;
/* Sandboxes shutdown set out to remove, and how that went. */
static size_t shutdown_total, shutdown_removed, shutdown_failed;
/* When shutdown_removed + shutdown_failed last moved. */
static double shutdown_last_done;
static size_t shutdown_seen_done;
static int shutdown_stall_said;
/* Containers still there when we exit (AUTO_CLEANUP). */
static size_t shutdown_left;

/* Uploads shutdown gave up: their workspaces wait on this host (and in
 * the state file) for the next start; not all was done, so exit 1. */
static void
abandoned(size_t n)
{
	if (n == 0)
		return;
	log_error("shutdown: %zu workspace transfers given up; the uploads "
	    "among them resume at the next start with this state directory",
	    n);
	sd.exit_status = 1;
}

static void
adopted_cb(void *arg)
{
	(void)arg;
	sd.ready = 1;
	/* Now records of ours without a sandbox are known to be stale. */
	if (shared_enabled())
		shared_records_connected();
	pool_refill();
}

static void
exit_loop(void *arg)
{
	(void)arg;
	log_info("sandboxd: bye");
	event_base_loopexit(sd.base, NULL);
}

static void
finish(void)
{
	if (sd.cfg.auto_cleanup && sd.shutting_down) {
		if (shutdown_left > 0) {
			/* Labelled with our instance and kept in the state
			 * file: the next start with this state directory
			 * takes them back or removes them. */
			log_error("shutdown: %zu containers could not be removed "
			    "and are left running, labelled for the next start "
			    "to take back or remove", shutdown_left);
			sd.exit_status = 1;
		} else {
			log_info("shutdown: removed all %zu sandboxes in %.1f s",
			    shutdown_total, timing_monotonic() - shutdown_began);
		}
	}
	/* Redis learns what went before we leave. */
	if (shared_enabled()) {
		shared_flush(exit_loop, NULL);
		return;
	}
	exit_loop(NULL);
}

static void
swept_cb(const struct error *err, void *arg)
{
	(void)arg;
	if (err != NULL) {
		log_error("shutdown: %s", err->msg);
		shutdown_left++;
	}
	if (--sweep_pending == 0)
		finish();
}

/* The last sweep: whatever still carries our label goes. */
static void
sweep_cb(const struct backend_container *v, size_t n, const struct error *err,
    void *arg)
{
	(void)arg;
	if (err != NULL) {
		log_error("shutdown: cannot list containers for the last sweep: "
		    "%s", err->msg);
		/* Unknown: count what our records still hold. */
		shutdown_left = sandbox_count_live();
		finish();
		return;
	}
	sweep_pending = 1;
	for (size_t i = 0; i < n; i++) {
		log_warn("shutdown: removing leftover container %s", v[i].name);
		sweep_pending++;
		sd.backend->ops->remove(sd.backend, v[i].id, swept_cb, NULL);
	}
	swept_cb(NULL, NULL);
}

static void
shutdown_progress(void)
{
	log_info("shutdown: removed %zu of %zu sandboxes%s in %.1f s",
	    shutdown_removed, shutdown_total, shutdown_failed > 0 ?
	    " (some failed, retried by the last sweep)" : "",
	    timing_monotonic() - shutdown_began);
}

static void
shutdown_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	double now = timing_monotonic();
	double stall = sd.cfg.shutdown_timeout / 2 < SHUTDOWN_STALL ?
	    sd.cfg.shutdown_timeout / 2 : SHUTDOWN_STALL;

	(void)fd;
	(void)what;
	(void)arg;
	if (sweeping)
		return;
	if (sd.cfg.auto_cleanup && now >= shutdown_next_progress &&
	    lifecycle_busy() > 0) {
		shutdown_progress();
		shutdown_next_progress = now + SHUTDOWN_PROGRESS_EVERY;
	}
	if (shutdown_removed + shutdown_failed != shutdown_seen_done) {
		shutdown_seen_done = shutdown_removed + shutdown_failed;
		shutdown_last_done = now;
	} else if (shutdown_total > 0 && lifecycle_busy() > 0 &&
	    !shutdown_stall_said && now - shutdown_last_done >= stall) {
		sd.backend->ops->stalled(sd.backend, stall);
		shutdown_stall_said = 1;
	}
	if (lifecycle_busy() > 0 && now < shutdown_deadline)
		return;
	state_flush();
	if (lifecycle_busy() > 0) {
		log_error("shutdown: %zu operations still running after %.0f s "
		    "(SANDBOXD_SHUTDOWN_TIMEOUT); exiting anyway",
		    lifecycle_busy(), sd.cfg.shutdown_timeout);
		/* Their callbacks run now, while what they touch exists;
		 * workspaces not uploaded stay for the next start. */
		abandoned(oss_abort("sandboxd is exiting "
		    "(SANDBOXD_SHUTDOWN_TIMEOUT); the workspace stays on this "
		    "host and the next start uploads it"));
		sd.backend->ops->abort(sd.backend, "given up: sandboxd is "
		    "exiting (SANDBOXD_SHUTDOWN_TIMEOUT)");
		state_flush();
		/* No last sweep: it would wait on Docker as long as the
		 * removals did. What is left keeps its label and its record
		 * in the state file for the next start. */
		if (sd.cfg.auto_cleanup) {
			shutdown_progress();
			shutdown_left = sandbox_count_live();
		}
		sweeping = 1;
		finish();
		return;
	}
	if (!sd.cfg.auto_cleanup) {
		log_info("shutdown: AUTO_CLEANUP is off: %zu sandboxes keep "
		    "running and will be taken back at the next start",
		    sandbox_count_live());
		finish();
		return;
	}
	if (shutdown_total > 0)
		shutdown_progress();
	sweeping = 1;
	sd.backend->ops->list_ours(sd.backend, state_instance(), 0, sweep_cb,
	    NULL);
}

static void
shutdown_released_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	(void)arg;
	if (err != NULL && sb->state == SB_RELEASED) {
		/* Its container went; its workspace did not reach the store. */
		log_error("shutdown: %s", err->msg);
		shutdown_removed++;
	} else if (err != NULL) {
		log_error("shutdown: cannot remove %s: %s", sb->name, err->msg);
		shutdown_failed++;
	} else {
		shutdown_removed++;
	}
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct timeval tick = { 0, 50000 };
	struct sandbox *sb, *next;

	(void)what;
	(void)arg;
	if (sd.shutting_down) {
		log_warn("signal %d again: exiting now", (int)sig);
		abandoned(oss_abort("sandboxd is exiting (a second signal); "
		    "the workspace stays on this host and the next start "
		    "uploads it"));
		/* What waits on Docker is given up (callbacks run now). */
		sd.backend->ops->abort(sd.backend, "given up: sandboxd is "
		    "exiting (a second signal)");
		state_flush();
		/* What AUTO_CLEANUP had still to remove is left running. */
		if (sd.cfg.auto_cleanup && lifecycle_busy() > 0)
			sd.exit_status = 1;
		event_base_loopbreak(sd.base);
		return;
	}
	log_info("signal %d: shutting down%s", (int)sig, sd.cfg.auto_cleanup ?
	    ", removing every sandbox (AUTO_CLEANUP)" : "");
	sd.shutting_down = 1;
	http_server_close_listeners(sd.http);
	pool_stop();
	health_stop();
	sessions_stop();
	api_e2b_timeouts_stop();
	shutdown_began = timing_monotonic();
	shutdown_deadline = shutdown_began + sd.cfg.shutdown_timeout;
	shutdown_next_progress = shutdown_began + SHUTDOWN_PROGRESS_EVERY;
	shutdown_last_done = shutdown_began;
	if (sd.cfg.auto_cleanup) {
		size_t at_once = sd.backend->ops->widen_for_shutdown(sd.backend,
		    (size_t)sd.cfg.shutdown_parallel);

		for (sb = sandbox_first(); sb != NULL; sb = next) {
			next = sandbox_next(sb);
			if (sb->state != SB_RELEASED) {
				shutdown_total++;
				lifecycle_release(sb, shutdown_released_cb, NULL);
			}
		}
		log_info("shutdown: removing %zu sandboxes, %zu at once",
		    shutdown_total, at_once);
	}
	shutdown_ev = event_new(sd.base, -1, EV_PERSIST, shutdown_tick_cb, NULL);
	event_add(shutdown_ev, &tick);
}

static struct http_route *
merged_routes(size_t *n)
{
	const struct http_route *(*const tables[])(size_t *) = {
		api_agentscope_routes, api_rest_routes, api_desktop_routes,
		api_mcp_routes, api_e2b_routes, api_e2b_router_routes,
	};
	struct http_route *all = NULL;
	size_t i, k;

	*n = 0;
	for (i = 0; i < sizeof tables / sizeof tables[0]; i++) {
		const struct http_route *t = tables[i](&k);

		all = xreallocarray(all, *n + k, sizeof *all);
		memcpy(all + *n, t, k * sizeof *t);
		*n += k;
	}
	return all;
}

static int
listen_all(struct error *err)
{
	char *addr;
	int rc;

	if (strchr(sd.cfg.host, ':') != NULL)
		addr = xasprintf("[%s]:%ld", sd.cfg.host, sd.cfg.port);
	else
		addr = xasprintf("%s:%ld", sd.cfg.host, sd.cfg.port);
	rc = http_server_listen(sd.http, addr, err);
	free(addr);
	if (rc < 0)
		return -1;
	if (sd.cfg.port == 0)
		sd.cfg.port = http_server_bound_port(sd.http);
	log_info("listening on %s:%ld", sd.cfg.host, sd.cfg.port);
	if (sd.cfg.unix_socket != NULL) {
		addr = xasprintf("unix:%s", sd.cfg.unix_socket);
		rc = http_server_listen(sd.http, addr, err);
		free(addr);
		if (rc < 0)
			return -1;
		log_info("listening on unix:%s", sd.cfg.unix_socket);
	}
	return 0;
}

static int
setup(int argc, char **argv)
{
	struct http_server_config hc = { 0 };
	struct sockaddr_un sun;
	struct error err = { 0 };
	enum log_level level;
	int help, version;
	size_t nroutes;

	if (sandboxd_config_load(&sd.cfg, argc, argv, &help, &version,
	    &err) < 0) {
		fprintf(stderr, "sandboxd: %s\n", err.msg);
		return 2;
	}
	if (help) {
		sandboxd_config_usage(stdout);
		return 0;
	}
	if (version) {
		printf("sandboxd %s\n", VERSION);
		return 0;
	}
	log_parse_level(sd.cfg.log_level, &level);
	log_set_level(sd.cfg.debug ? LOG_DEBUG : level);
	/* <state>/run/<16 hex>/agent.sock must fit a unix socket address. */
	if (strlen(sd.cfg.state_dir) + 5 + 16 + 11 >= sizeof sun.sun_path) {
		fprintf(stderr, "sandboxd: SANDBOXD_STATE_DIR: %s is too long for "
		    "the agents' unix socket paths (at most %zu characters)\n",
		    sd.cfg.state_dir, sizeof sun.sun_path - 33);
		return 2;
	}

	if (sd.cfg.redis_enabled && shared_check(&err) < 0) {
		fprintf(stderr, "sandboxd: %s\n", err.msg);
		return 2;
	}
	if (oss_check(&err) < 0) {
		fprintf(stderr, "sandboxd: %s\n", err.msg);
		return 2;
	}
	sd.base = event_base_new();
	if (sd.base == NULL)
		fatal("cannot create the event loop");
	spawn_init(sd.base);
	if (state_init(sd.cfg.state_dir, &err) < 0) {
		fprintf(stderr, "sandboxd: %s\n", err.msg);
		return 1;
	}
	if (egress_init(sd.base, &sd.cfg, &err) < 0) {
		fprintf(stderr, "sandboxd: %s\n", err.msg);
		return 1;
	}
	sd.ports = ports_new(sd.cfg.port_lo, sd.cfg.port_hi);
	sd.backend = backend_new(sd.cfg.deployment, sd.base, &sd.cfg, &err);
	if (sd.backend == NULL) {
		fprintf(stderr, "sandboxd: %s\n", err.msg);
		return 2;
	}
	sandbox_set_id_match(sd.backend->ops->id_abbreviates);
	sd.backend->police = lifecycle_police_early;

	all_routes = merged_routes(&nroutes);
	hc.routes = all_routes;
	hc.nroutes = nroutes;
	hc.token = sd.cfg.bearer_token;
	hc.auth_status = 401;
	hc.auth_missing_detail = "Authentication required";
	hc.auth_wrong_detail = "Invalid authentication credentials";
	hc.access_log = sd.cfg.access_log;
	hc.server_name = "sandboxd/" VERSION;
	hc.max_connections = (size_t)sd.cfg.max_connections;
	hc.header_timeout = sd.cfg.header_timeout;
	hc.body_min_rate = sd.cfg.body_min_rate;
	hc.body_rate_window = sd.cfg.body_rate_window;
	sd.http = http_server_new(sd.base, &hc);
	if (listen_all(&err) < 0) {
		fprintf(stderr, "sandboxd: %s\n", err.msg);
		return 1;
	}
	if (shared_enabled()) {
		shared_records_init();
		shared_start();
	}
	if (sandboxd_rmtree_init(sd.base, &err) < 0) {
		fprintf(stderr, "sandboxd: removals: %s\n", err.msg);
		return 1;
	}
	oss_init(sd.base, sd.cfg.state_dir);
	sessions_init();
	desktop_relay_init();
	api_e2b_timeouts_start();
	lifecycle_init();
	pool_init();
	health_init();
	adopt_start(adopted_cb, NULL);
	log_info("sandboxd %s: instance %s, sandboxes run by %s, state %s, "
	    "workspaces %s, pools %s x%ld, %s", VERSION, state_instance(),
	    sd.backend->ops->name, sd.cfg.state_dir, sd.cfg.mount_dir,
	    sd.cfg.default_type, sd.cfg.pool_size, sd.cfg.bearer_token !=
	    NULL ? "bearer auth" : "NO AUTH");
	return -1;
}

static void
teardown(void)
{
	adopt_stop();
	if (shared_enabled()) {
		shared_stop();
		shared_records_free();
	}
	state_close();
	if (shutdown_ev != NULL)
		event_free(shutdown_ev);
	pool_stop();
	health_stop();
	api_e2b_timeouts_stop();
	sessions_free();
	desktop_relay_close_all();
	for (struct sandbox *sb = sandbox_first(); sb != NULL;
	    sb = sandbox_next(sb))
		sb->egress = NULL;
	egress_shutdown();
	sandbox_free_all();
	http_server_free(sd.http);
	free(all_routes);
	/* Removals under way end first: their callbacks use the backend. */
	sandboxd_rmtree_free();
	sd.backend->ops->free(sd.backend);
	ports_free(sd.ports);
	metrics_free();
	oss_free();
	sandbox_types_free();
	sandboxd_config_free(&sd.cfg);
	event_base_free(sd.base);
}

int
main(int argc, char **argv)
{
	struct event *sigterm, *sigint;
	int rc;

	log_init("sandboxd");
	signal(SIGPIPE, SIG_IGN);
	rc = setup(argc, argv);
	if (rc >= 0) {
		oss_free();
		sandbox_types_free();
		sandboxd_config_free(&sd.cfg);
		return rc;
	}
	sigterm = evsignal_new(sd.base, SIGTERM, signal_cb, NULL);
	sigint = evsignal_new(sd.base, SIGINT, signal_cb, NULL);
	event_add(sigterm, NULL);
	event_add(sigint, NULL);
	event_base_dispatch(sd.base);
	event_free(sigterm);
	event_free(sigint);
	teardown();
	return sd.exit_status;
}
