/*
 * Supervision of the desktop's programs (see desktop.h), on the loop.
 *
 * The server starts first; a probe on a worker thread then connects to its
 * VNC socket as the user every DESKTOP_PROBE_MS until a VNC session is
 * made (that is, X dispatches and VNC answers): the display is ready and
 * the other programs start. The probe then looks at the screen until it
 * shows more than one colour (the window manager has drawn its desktop:
 * before, the bare X screen is black), and only then does /healthz say
 * OK, so that a sandbox is not handed out with a screen an agent cannot
 * use; after the file's draw_timeout of nothing drawn, /healthz says
 * that. A desktop of the server alone is ready once it answers.
 *
 * A program that exits is started again after a back-off that doubles
 * from DESKTOP_BACKOFF_MIN to DESKTOP_BACKOFF_MAX, and starts over once
 * the program had run for DESKTOP_STABLE seconds. The programs other than
 * the server start only on a ready display: when the server goes, its
 * clients follow it, and come back after it. A server that does not get
 * ready within DESKTOP_READY_TIMEOUT is killed and restarted the same way.
 *
 * Each program is its own process group under the commands' seccomp
 * filter, as its user; its output goes to our log, rate limited (the
 * user can make it say anything).
 *
 * The VNC helper (vnc.h) is supervised the same way, as the server's
 * user, from the start (the probe speaks to the display through it): a
 * helper that exits is started again after the back-off, one the agent
 * gave up on (vnc_helper_lost) is killed at the next kick. A probe that
 * fails for want of a helper (502) says nothing about the server.
 */
#include "desktop_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "agent.h"
#include "spawn.h"
#include "timing.h"
#include "vnc.h"
#include "work_queue.h"
#include "xmalloc.h"

#define DESKTOP_PROBE_MS 50
#define DESKTOP_READY_TIMEOUT 30.0
/* How often a screen with nothing drawn is looked at after draw_timeout. */
#define DESKTOP_DRAW_LATE_MS 1000
#define DESKTOP_BACKOFF_MIN 0.25
#define DESKTOP_BACKOFF_MAX 30.0
#define DESKTOP_STABLE 30.0

static int
is_server(const struct desktop_program *p)
{
	return p == &p->d->programs[0];
}

static int
is_helper(const struct desktop_program *p)
{
	return p == &p->d->helper;
}

static void start_program(struct desktop_program *p);

/* The programs, then the helper: i from 0 to nprograms. */
static struct desktop_program *
program_at(struct desktop *d, size_t i)
{
	return i < d->nprograms ? &d->programs[i] : &d->helper;
}

/* ---- output ------------------------------------------------------------ */

static void
flush_line(struct desktop_program *p)
{
	if (p->linelen > 0)
		log_rate_msg(&p->rate, LOG_INFO, "desktop: %s: %.*s", p->name,
		    (int)p->linelen, p->line);
	p->linelen = 0;
}

static void
output_cb(struct spawn *sp, int stream, const char *data, size_t len,
    void *arg)
{
	struct desktop_program *p = arg;

	(void)sp;
	(void)stream;
	for (size_t i = 0; i < len; i++) {
		if (data[i] == '\n') {
			flush_line(p);
		} else if (p->linelen < sizeof p->line) {
			/* Controls would garble the log; the rest of a
			 * long line is dropped. */
			p->line[p->linelen++] = (unsigned char)data[i] < 0x20 ?
			    ' ' : data[i];
		}
	}
}

/* ---- readiness --------------------------------------------------------- */

static void
schedule_probe(struct desktop *d, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	evtimer_add(d->probe_timer, &tv);
}

/* Whether the screen shows more than one colour: *drawn. -1 with err
 * when the display does not answer. */
static int
screen_drawn(struct vnc *vnc, int *drawn, struct error *err)
{
	struct vnc_image img;
	size_t n;

	if (vnc_begin(vnc, err) < 0)
		return -1;
	if (vnc_capture(vnc, &img, err) < 0) {
		vnc_end(vnc);
		return -1;
	}
	vnc_end(vnc);
	n = (size_t)img.width * (size_t)img.height;
	*drawn = 0;
	for (size_t i = 1; i < n && !*drawn; i++)
		*drawn = memcmp(img.pixels + 4 * i, img.pixels, 3) != 0;
	free(img.pixels);
	return 0;
}

/* On the probe worker: a VNC session made, by the helper, or once the
 * display answers, a look at its screen. */
static void
probe_run(void *arg)
{
	struct desktop *d = arg;

	if (d->probe_drawing)
		d->probe_ok = screen_drawn(d->vnc, &d->probe_drawn,
		    &d->probe_err) == 0;
	else
		d->probe_ok = vnc_reconnect(d->vnc, &d->probe_err) == 0;
}

static void
display_ready(struct desktop *d)
{
	struct desktop_program *server = &d->programs[0];

	d->ready = 1;
	d->ready_at = timing_monotonic();
	d->drawn = d->nprograms == 1;
	d->draw_late = 0;
	log_info("desktop: display %s ready (%s answered after %.0f ms)",
	    d->display, server->name, (d->ready_at - server->started) * 1000);
	for (size_t i = 1; i < d->nprograms; i++) {
		struct desktop_program *p = &d->programs[i];

		if (p->sp == NULL && !evtimer_pending(p->timer, NULL))
			start_program(p);
	}
	if (!d->drawn)
		schedule_probe(d, DESKTOP_PROBE_MS);
}

/* The screen was looked at: drawn, or another look later. */
static void
drawn_or_wait(struct desktop *d)
{
	struct desktop_program *server = &d->programs[0];
	double waited = timing_monotonic() - d->ready_at;

	if (d->probe_drawn) {
		d->drawn = 1;
		log_info("desktop: display %s drawn on (%.0f ms after %s "
		    "answered, %.0f ms after it started)", d->display,
		    waited * 1000, server->name, (timing_monotonic() - server->started) *
		    1000);
		return;
	}
	if (!d->draw_late && waited > d->draw_timeout) {
		d->draw_late = 1;
		snprintf(d->late, sizeof d->late, "the desktop's programs drew "
		    "nothing on its display within %g s of their start",
		    d->draw_timeout);
		log_error("desktop: %s; unhealthy until they do", d->late);
	}
	schedule_probe(d, d->draw_late ? DESKTOP_DRAW_LATE_MS :
	    DESKTOP_PROBE_MS);
}

static void
probe_done(void *arg)
{
	struct desktop *d = arg;
	struct desktop_program *server = &d->programs[0];

	d->probing = 0;
	if (atomic_load(&d->stopping) || server->sp == NULL ||
	    d->probe_generation != server->generation)
		return;	/* a server that is gone; its exit restarts it */
	if (d->probe_ok) {
		if (!d->ready)
			display_ready(d);
		else if (d->probe_drawing)
			drawn_or_wait(d);
		return;
	}
	if (d->probe_err.status == 502) {
		/* No helper to ask: the server is not to blame. One given
		 * up is ended here; its exit starts the next. */
		if (d->helper.sp != NULL && vnc_helper_lost(d->vnc))
			spawn_kill(d->helper.sp, SIGKILL);
		schedule_probe(d, DESKTOP_PROBE_MS);
		return;
	}
	if (d->ready) {
		/* A kick's check: it ran, answered, and no longer does. */
		log_warn("desktop: display %s stopped answering (%s); "
		    "restarting %s", d->display, d->probe_err.msg, server->name);
		d->ready = 0;
		spawn_kill(server->sp, SIGKILL);
		return;
	}
	if (timing_monotonic() - server->started > DESKTOP_READY_TIMEOUT) {
		log_error("desktop: %s did not answer within %.0f s (%s); "
		    "restarting it", server->name, DESKTOP_READY_TIMEOUT,
		    d->probe_err.msg);
		spawn_kill(server->sp, SIGKILL);
		return;
	}
	schedule_probe(d, DESKTOP_PROBE_MS);
}

static void
probe(struct desktop *d)
{
	if (d->probing || atomic_load(&d->stopping) ||
	    d->programs[0].sp == NULL)
		return;
	d->probing = 1;
	d->probe_generation = d->programs[0].generation;
	d->probe_drawing = d->ready && !d->drawn;
	work_queue_submit(d->probes, probe_run, probe_done, d);
}

static void
probe_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	probe(arg);
}

/* ---- programs ---------------------------------------------------------- */

static void
describe_exit(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "was killed by signal %d", WTERMSIG(status));
	else
		snprintf(buf, len, "ended (status 0x%x)", (unsigned)status);
}

static void
schedule_restart(struct desktop_program *p)
{
	struct timeval tv;

	if (timing_monotonic() - p->started >= DESKTOP_STABLE || p->backoff == 0)
		p->backoff = DESKTOP_BACKOFF_MIN;
	else if ((p->backoff *= 2) > DESKTOP_BACKOFF_MAX)
		p->backoff = DESKTOP_BACKOFF_MAX;
	tv = timing_timeval(p->backoff);
	evtimer_add(p->timer, &tv);
}

static void
exit_cb(struct spawn *sp, int status, void *arg)
{
	struct desktop_program *p = arg;
	struct desktop *d = p->d;
	char how[64];

	(void)sp;
	flush_line(p);
	spawn_free(p->sp);
	p->sp = NULL;
	if (atomic_load(&d->stopping))
		return;
	describe_exit(status, how, sizeof how);
	if (is_server(p)) {
		d->ready = 0;
		log_warn("desktop: %s (the display server) %s; restarting it",
		    p->name, how);
	} else if (is_helper(p)) {
		log_warn("desktop: %s (the display's VNC client) %s; "
		    "restarting it", p->name, how);
	} else {
		log_warn("desktop: %s %s; restarting it", p->name, how);
	}
	schedule_restart(p);
}

static void
restart_cb(evutil_socket_t fd, short what, void *arg)
{
	struct desktop_program *p = arg;

	(void)fd;
	(void)what;
	/* A client waits for its display; display_ready starts it. */
	if (is_server(p) || is_helper(p) || p->d->ready)
		start_program(p);
}

static void
start_program(struct desktop_program *p)
{
	struct desktop *d = p->d;
	struct agent *agent = d->agent;
	struct spawn_options o;
	struct spawn_callbacks cb = { 0 };
	struct error err = { 0 };
	int pair[2] = { -1, -1 };

	confine_spawn_options(agent, &o);
	/* The program's own environment (program_env: child_env with its
	 * config's additions) and user (program_user: never root). */
	o.envp = (const char *const *)p->envp;
	o.set_ids = p->set_ids;
	o.uid = p->uid;
	o.gid = p->gid;
	o.argv = (const char *const *)p->argv;
	o.stdio[0] = SPAWN_NULL;
	o.stdio[1] = SPAWN_CAPTURE;
	o.stdio[2] = SPAWN_CAPTURE;
	cb.on_output = output_cb;
	cb.on_exit = exit_cb;
	p->started = timing_monotonic();
	p->generation++;
	p->linelen = 0;
	if (is_helper(p)) {
		/* Its channel to us as its VNC_WIRE_FD; the binary is the
		 * one we run (opened at start: the path may have changed). */
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
		    pair) < 0) {
			error_set_errno(&err, 503, errno, "socketpair");
		} else {
			o.pass_fds = &pair[1];
			o.npass_fds = 1;
			o.use_exec_fd = 1;
			o.exec_fd = d->self_fd;
		}
	}
	p->sp = err.status == 0 ? spawn_start(agent->base, &o, &cb, p, &err) :
	    NULL;
	if (pair[0] >= 0) {
		close(pair[1]);
		if (p->sp != NULL)
			vnc_attach(d->vnc, pair[0]);
		else
			close(pair[0]);
	}
	if (p->sp == NULL) {
		log_error("desktop: cannot start %s: %s", p->name, err.msg);
		schedule_restart(p);
		return;
	}
	log_info("desktop: started %s (pid %d, uid %u)", p->name,
	    (int)spawn_pid(p->sp), (unsigned)p->uid);
	if (is_server(p)) {
		d->ready = 0;
		schedule_probe(d, 0);
	}
}

/* The commands' environment with the program's additions in place. */
static char **
program_env(struct agent *agent, struct desktop_program *p)
{
	size_t n = 0, o = 0, extra = json_object_size(p->env);
	const char *key;
	json_t *v;
	char **env;

	while (agent->child_env[n] != NULL)
		n++;
	env = xcalloc(n + extra + 1, sizeof *env);
	for (size_t i = 0; i < n; i++) {
		const char *e = agent->child_env[i];
		size_t len = strcspn(e, "=");
		char *name = xstrndup(e, len);
		int replaced = json_object_get(p->env, name) != NULL;

		free(name);
		if (!replaced)
			env[o++] = xstrdup(e);
	}
	json_object_foreach(p->env, key, v)
		env[o++] = xasprintf("%s=%s", key, json_string_value(v));
	env[o] = NULL;
	return env;
}

/* ---- kicks from workers ---------------------------------------------- */

static void
kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct desktop *d = arg;
	struct desktop_program *server = &d->programs[0];
	uint64_t count;

	(void)what;
	if (read(fd, &count, sizeof count) < 0 && errno != EAGAIN)
		log_warn("desktop: eventfd read: %s", strerror(errno));
	if (atomic_load(&d->stopping))
		return;
	if (d->helper.sp == NULL && evtimer_pending(d->helper.timer, NULL)) {
		evtimer_del(d->helper.timer);
		start_program(&d->helper);
	} else if (d->helper.sp != NULL && vnc_helper_lost(d->vnc)) {
		spawn_kill(d->helper.sp, SIGKILL);
	}
	if (server->sp == NULL) {
		if (evtimer_pending(server->timer, NULL)) {
			evtimer_del(server->timer);
			start_program(server);
		}
	} else if (d->ready) {
		probe(d);
	}
}

void
desktop_kick(struct desktop *d)
{
	uint64_t one = 1;

	if (d->kick_fd < 0)
		return;		/* not started */
	if (write(d->kick_fd, &one, sizeof one) < 0 && errno != EAGAIN)
		log_warn("desktop: eventfd write: %s", strerror(errno));
}

/* ---- the module ---------------------------------------------------------- */

/* The helper as a program: our binary with --vnc-helper, as the server's
 * user (never root), its log level ours. */
static void
helper_setup(struct agent *agent, struct desktop *d)
{
	struct desktop_program *h = &d->helper, *server = &d->programs[0];
	struct log_rate rate = LOG_RATE_INIT(10, 20);
	const char *argv[] = { "sandbox-agent", "--vnc-helper", d->vnc_socket,
	    d->display, agent->cfg.log_level != NULL ? agent->cfg.log_level :
	    "info", NULL };

	h->d = d;
	h->rate = rate;
	h->name = xstrdup("vnc-helper");
	h->argv = xcalloc(sizeof argv / sizeof argv[0], sizeof *h->argv);
	for (size_t i = 0; argv[i] != NULL; i++)
		h->argv[i] = xstrdup(argv[i]);
	h->uid = server->uid;
	h->gid = server->gid;
	h->set_ids = server->set_ids;
	d->self_fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (d->self_fd < 0)
		log_error("desktop: cannot open our own binary (%s): the "
		    "computer tool will not reach the display",
		    strerror(errno));
}

int
desktop_setup(struct agent *agent, const char *path, struct error *err)
{
	struct desktop *d;

	if (path == NULL || *path == '\0')
		return 0;
	d = xcalloc(1, sizeof *d);
	d->agent = agent;
	d->kick_fd = -1;
	d->self_fd = -1;
	agent->desktop = d;
	if (desktop_config_load(agent, d, path, err) < 0)
		return -1;
	for (size_t i = 0; i < d->nprograms; i++) {
		struct log_rate rate = LOG_RATE_INIT(10, 20);

		d->programs[i].d = d;
		d->programs[i].rate = rate;
	}
	/* Commands and the IPython kernel draw on it. */
	setenv("DISPLAY", d->display, 1);
	d->vnc = vnc_new();
	helper_setup(agent, d);
	return 0;
}

void
desktop_start(struct agent *agent)
{
	struct desktop *d = agent->desktop;

	if (d == NULL)
		return;
	d->probes = work_queue_new(agent->base);
	d->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (d->probes == NULL || d->kick_fd < 0)
		fatal("desktop: cannot start its worker thread or eventfd");
	d->kick_ev = event_new(agent->base, d->kick_fd, EV_READ | EV_PERSIST,
	    kick_cb, d);
	event_add(d->kick_ev, NULL);
	d->probe_timer = evtimer_new(agent->base, probe_timer_cb, d);
	for (size_t i = 0; i <= d->nprograms; i++) {
		struct desktop_program *p = program_at(d, i);

		p->envp = program_env(agent, p);
		p->timer = evtimer_new(agent->base, restart_cb, p);
	}
	log_info("desktop: display %s, VNC on %s, %zu programs", d->display,
	    d->vnc_socket, d->nprograms);
	start_program(&d->helper);
	start_program(&d->programs[0]);
}

void
desktop_shutdown(struct agent *agent)
{
	struct desktop *d = agent->desktop;

	if (d == NULL)
		return;
	atomic_store(&d->stopping, 1);
	if (d->probe_timer != NULL)
		evtimer_del(d->probe_timer);
	for (size_t i = 0; i <= d->nprograms; i++) {
		struct desktop_program *p = program_at(d, i);

		if (p->timer != NULL)
			evtimer_del(p->timer);
		if (p->sp != NULL)
			spawn_kill(p->sp, SIGTERM);
	}
}

static void
free_strings(char **v)
{
	for (size_t i = 0; v != NULL && v[i] != NULL; i++)
		free(v[i]);
	free(v);
}

void
desktop_free(struct agent *agent)
{
	struct desktop *d = agent->desktop;

	if (d == NULL)
		return;
	atomic_store(&d->stopping, 1);
	if (d->probes != NULL)
		work_queue_free(d->probes);
	for (size_t i = 0; i <= d->nprograms; i++) {
		struct desktop_program *p = program_at(d, i);

		spawn_free(p->sp);
		if (p->timer != NULL)
			event_free(p->timer);
		free(p->name);
		free_strings(p->argv);
		free_strings(p->envp);
		json_decref(p->env);
	}
	if (d->probe_timer != NULL)
		event_free(d->probe_timer);
	if (d->kick_ev != NULL)
		event_free(d->kick_ev);
	if (d->kick_fd >= 0)
		close(d->kick_fd);
	if (d->self_fd >= 0)
		close(d->self_fd);
	vnc_free(d->vnc);
	free(d->programs);
	free(d->display);
	free(d->vnc_socket);
	free(d->novnc);
	free(d);
	agent->desktop = NULL;
}

int
desktop_ready(const struct desktop *d)
{
	return d->ready;
}

const char *
desktop_unhealthy(const struct desktop *d)
{
	if (!d->ready)
		return "the desktop's display is not ready";
	if (d->draw_late)
		return d->late;
	if (!d->drawn)
		return "the desktop is starting: nothing is drawn on its "
		    "display yet";
	return NULL;
}

struct vnc *
desktop_vnc(struct desktop *d)
{
	return d->vnc;
}

const char *
desktop_vnc_socket(const struct desktop *d)
{
	return d->vnc_socket;
}

const char *
desktop_novnc(const struct desktop *d)
{
	return d->novnc;
}

int
desktop_stopping(const struct desktop *d)
{
	return atomic_load(&d->stopping);
}
