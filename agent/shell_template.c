/*
 * The shell template: one bash per agent, started once, from which each
 * run_shell_command's shell is forked (shell.c). An exec of bash and its
 * start cost some 2 ms of CPU here; a fork of a bash that has started, a
 * fraction of that, and it is made before the request comes.
 *
 * The template is bash -c SHELL_TEMPLATE_SCRIPT, started as any command
 * is (the workspace as its directory, the commands' environment, stdin
 * /dev/null, every signal at its default, our limits, priority and
 * CPUs), but as root, in our process group and with no keeper: its
 * keepers must be our children (bash/shell_template_bash.c has them made
 * with CLONE_PARENT), and it runs nothing of the user's, ever. Its bash
 * loads our builtin (carried in this binary, given as a memfd), which
 * loads the commands' seccomp filter once, so that every command shares
 * it (a filter loaded per command costs some 0.3 ms here, and as much
 * again when it is freed at its exit), and keeps a few pairs ready, each
 * a keeper and a forked command waiting on the socket pair
 * (shell_template_wire.h) for a request: the text and the descriptors
 * spawn_start_via makes. What a command is then (keeper, own group,
 * run-as user, seccomp filter, and the state of a bash -c started now) is
 * said there.
 *
 * Out of the user's reach: under --run-as the template, its keepers and
 * its waiting commands are root and undumpable, so no process of the user
 * may signal, trace, re-limit, renice or pin them, nor read their memory
 * or descriptors; a command starts with the template's limits, priority
 * and CPUs, which are ours (test_hostile_shell.py). As root (no --run-as)
 * nothing is, as for any root command; a template killed is started
 * again.
 *
 * Calls take the plain path (a bash -c started for them, shell.c) while
 * the template is not ready, when the socket is full (a burst beyond what
 * it keeps up with), and once the workspace was replaced (the template's
 * directory is the old one: it is started anew). A template that dies is
 * started again after SHELL_TEMPLATE_RETRY_SECONDS; one that never became
 * ready is given up with a warning (its stderr): commands run as plain
 * bash -c. A request still in the socket when the template goes (killed,
 * or started anew) reached no command and ran nothing: it ends as killed
 * (-9), as does one taken by a command whose keeper root killed. The template is not used when the shell is not bash, or when
 * BASH_ENV is set (bash -c reads that file at each start, as root the
 * template must not).
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <stdint.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "fdio.h"
#include "log.h"
#include "shell_template_wire.h"
#include "spawn.h"

#define SHELL_TEMPLATE_RETRY_SECONDS 1
/* The template's stderr kept for the log (bash's own errors at start). */
#define SHELL_TEMPLATE_STDERR_CAP 4096

extern const char _binary_shell_template_so_start[];
extern const char _binary_shell_template_so_end[];

static struct {
	struct agent *agent;
	struct spawn *sp;	/* the template, our child */
	int sock;		/* our end of its socket pair */
	struct event *ev;	/* its ready message */
	int ready;
	int given_up;
	dev_t dev;		/* the workspace it was started in */
	ino_t ino;
	int so_fd;		/* the builtin, a memfd */
	struct event *retry;
} tpl = { .sock = -1, .so_fd = -1 };

static int
workspace_id(dev_t *dev, ino_t *ino)
{
	struct stat st;

	if (stat(tpl.agent->ws.root, &st) < 0)
		return -1;
	*dev = st.st_dev;
	*ino = st.st_ino;
	return 0;
}

static void
template_close(void)
{
	spawn_free(tpl.sp);
	tpl.sp = NULL;
	if (tpl.ev != NULL)
		event_free(tpl.ev);
	tpl.ev = NULL;
	if (tpl.sock >= 0)
		close(tpl.sock);
	tpl.sock = -1;
	tpl.ready = 0;
}

static void template_start(void);

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	template_start();
}

static void
template_exit(struct spawn *sp, int status, void *arg)
{
	struct evbuffer *err = spawn_output(sp, 2);
	struct timeval tv = { SHELL_TEMPLATE_RETRY_SECONDS, 0 };
	size_t n = evbuffer_get_length(err);
	int was_ready = tpl.ready;

	(void)arg;
	if (!was_ready) {
		log_warn("the shell template (bash) did not start (status %d"
		    "%s%.*s): commands run as bash -c", status,
		    n > 0 ? ": " : "", (int)n,
		    (const char *)evbuffer_pullup(err, -1));
		tpl.given_up = 1;
	} else {
		log_warn("the shell template (pid %d) exited (status %d); "
		    "started again in %d s", (int)spawn_pid(sp), status,
		    SHELL_TEMPLATE_RETRY_SECONDS);
	}
	template_close();
	if (was_ready)
		evtimer_add(tpl.retry, &tv);
}

/* Its ready message; anything else is its end, which template_exit
 * reports. */
static void
ready_cb(evutil_socket_t fd, short what, void *arg)
{
	struct shell_template_ready r;
	ssize_t n = recv(fd, &r, sizeof r, MSG_DONTWAIT);

	(void)what;
	(void)arg;
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	event_del(tpl.ev);
	if (n == (ssize_t)sizeof r && r.magic == SHELL_TEMPLATE_MAGIC &&
	    r.pid == spawn_pid(tpl.sp)) {
		tpl.ready = 1;
		log_info("shell template ready (pid %d): commands are forked "
		    "from it", (int)r.pid);
	}
}

static int
send_hello(int sock)
{
	const struct agent *agent = tpl.agent;
	struct shell_template_hello h = { SHELL_TEMPLATE_MAGIC,
	    (uint32_t)agent->drop_ids, (uint32_t)agent->uid,
	    (uint32_t)agent->gid, 0 };
	struct iovec iov[2] = { { &h, sizeof h }, { NULL, 0 } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };

	if (agent->confine != NULL) {
		h.nfilter = agent->confine->len;
		iov[1].iov_base = agent->confine->filter;
		iov[1].iov_len = h.nfilter * sizeof(struct sock_filter);
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

static void
template_start(void)
{
	static const struct spawn_callbacks cb = { .on_exit = template_exit };
	struct agent *agent = tpl.agent;
	const char *argv[] = { agent->shell, "-c", SHELL_TEMPLATE_SCRIPT,
	    NULL };
	struct spawn_options o;
	struct error err = { 0 };
	int sv[2], pass[2];

	if (workspace_id(&tpl.dev, &tpl.ino) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		log_warn("cannot start the shell template: %s",
		    strerror(errno));
		return;
	}
	confine_spawn_options(agent, &o);
	o.new_group = 0;
	o.seccomp = NULL;
	o.set_ids = 0;
	o.argv = argv;
	o.stdio[0] = o.stdio[1] = SPAWN_NULL;
	o.stdio[2] = SPAWN_CAPTURE;
	o.capture_cap[2] = SHELL_TEMPLATE_STDERR_CAP;
	pass[0] = sv[1];
	pass[1] = tpl.so_fd;
	o.pass_fds = pass;
	o.npass_fds = 2;
	tpl.sp = spawn_start(agent->base, &o, &cb, NULL, &err);
	close(sv[1]);
	if (tpl.sp == NULL) {
		log_warn("cannot start the shell template: %s", err.msg);
		close(sv[0]);
		return;
	}
	tpl.sock = sv[0];
	if (send_hello(tpl.sock) < 0) {
		log_warn("cannot greet the shell template: %s",
		    strerror(errno));
		template_close();
		return;
	}
	tpl.ev = event_new(agent->base, tpl.sock, EV_READ | EV_PERSIST,
	    ready_cb, NULL);
	event_add(tpl.ev, NULL);
}

void
shell_template_init(struct agent *agent)
{
	tpl.agent = agent;
	if (!agent->cfg.shell_template)
		return;
	if (strcmp(agent->shell, "/bin/bash") != 0) {
		log_info("no shell template: the shell is %s", agent->shell);
		return;
	}
	for (char **e = agent->child_env; *e != NULL; e++) {
		if (strncmp(*e, "BASH_ENV=", 9) == 0) {
			log_warn("no shell template: BASH_ENV is set, which "
			    "bash -c reads at each start");
			return;
		}
	}
	tpl.so_fd = spawn_memfd("sandbox-agent-shell-template",
	    _binary_shell_template_so_start,
	    (size_t)(_binary_shell_template_so_end -
	    _binary_shell_template_so_start));
	if (tpl.so_fd < 0) {
		log_warn("no shell template: memfd: %s", strerror(errno));
		return;
	}
	tpl.retry = evtimer_new(agent->base, retry_cb, NULL);
	template_start();
}

struct shell_template_send {
	struct shell_template_request req;
	const char *text;
};

/* spawn_start_via's start: the request, to the template. */
static int
send_request(const int fds[3], int report_fd, void *arg)
{
	struct shell_template_send *c = arg;
	int fd[SHELL_TEMPLATE_FDS + 1] = { fds[0], fds[1], fds[2], report_fd,
	    -1 };
	struct iovec iov[2] = { { &c->req, sizeof c->req },
	    { (void *)c->text, 0 } };
	size_t nfd = SHELL_TEMPLATE_FDS;
	ssize_t n;

	c->req.magic = SHELL_TEMPLATE_MAGIC;
	c->req.in_memfd = c->req.len > SHELL_TEMPLATE_TEXT_MAX;
	if (c->req.in_memfd) {
		fd[nfd++] = spawn_memfd("sandbox-agent-command", c->text,
		    c->req.len);
		if (fd[nfd - 1] < 0)
			return -1;
	} else {
		iov[1].iov_len = c->req.len;
	}
	n = fdio_send_fds(tpl.sock, iov, 2, fd, nfd, MSG_DONTWAIT);
	if (c->req.in_memfd)
		close(fd[SHELL_TEMPLATE_FDS]);
	return n < 0 ? -1 : 0;
}

/* Whether the template can take a call now (it is started anew in a
 * replaced workspace, and takes none until it is ready again). */
static int
template_usable(void)
{
	dev_t dev;
	ino_t ino;

	if (!tpl.ready || workspace_id(&dev, &ino) < 0)
		return 0;
	if (dev != tpl.dev || ino != tpl.ino) {
		log_info("the workspace was replaced: the shell template "
		    "starts again in it");
		template_close();
		template_start();
		return 0;
	}
	return 1;
}

static struct spawn *
send_via(struct spawn_options *o, struct shell_template_send *c,
    const struct spawn_callbacks *cb, void *arg, double timeout)
{
	struct error err = { 0 };
	struct spawn *sp;

	o->new_group = 1;
	o->stdio[1] = o->stdio[2] = SPAWN_CAPTURE;
	o->timeout = timeout;
	sp = spawn_start_via(tpl.agent->base, o, send_request, c, cb, arg,
	    &err);
	if (sp == NULL)
		log_debug("not through the shell template: %s", err.msg);
	return sp;
}

struct spawn *
shell_template_run(const char *command, size_t len,
    const struct spawn_callbacks *cb, void *arg, const size_t cap[3],
    double timeout)
{
	struct shell_template_send c = { { .kind = SHELL_TEMPLATE_RUN,
	    .len = (uint32_t)len }, command };
	struct spawn_options o;

	if (!template_usable() || len > UINT32_MAX)
		return NULL;
	memset(&o, 0, sizeof o);
	o.stdio[0] = SPAWN_NULL;
	o.capture_cap[1] = cap[1];
	o.capture_cap[2] = cap[2];
	return send_via(&o, &c, cb, arg, timeout);
}

/* Variables an exec of bash would have its loader or libc read as it
 * starts, which a fork of the template has long been past: a call with
 * them takes the plain path. */
static int
loader_variables(const char *const *envp)
{
	for (; *envp != NULL; envp++)
		if (strncmp(*envp, "LD_", 3) == 0 ||
		    strncmp(*envp, "MALLOC_", 7) == 0 ||
		    strncmp(*envp, "GLIBC_TUNABLES=", 15) == 0)
			return 1;
	return 0;
}

static void
add_strings(struct evbuffer *text, const char *const *v, uint32_t *n)
{
	for (*n = 0; v[*n] != NULL; (*n)++)
		evbuffer_add(text, v[*n], strlen(v[*n]) + 1);
}

struct spawn *
shell_template_start_bash(const char *const *argv, const char *const *envp,
    const char *cwd, int set_ids, uid_t uid, gid_t gid, int stdin_pipe,
    const struct spawn_callbacks *cb, void *arg, double timeout)
{
	struct shell_template_send c = { { .kind = SHELL_TEMPLATE_START,
	    .set_ids = set_ids != 0, .uid = (uint32_t)uid,
	    .gid = (uint32_t)gid }, NULL };
	struct evbuffer *text;
	struct spawn_options o;
	struct spawn *sp = NULL;

	if (strcmp(argv[0], tpl.agent->shell) != 0 || loader_variables(envp) ||
	    !template_usable())
		return NULL;
	text = evbuffer_new();
	add_strings(text, argv, &c.req.argc);
	add_strings(text, envp, &c.req.envc);
	evbuffer_add(text, cwd != NULL ? cwd : "", cwd != NULL ?
	    strlen(cwd) + 1 : 1);
	if (evbuffer_get_length(text) <= UINT32_MAX) {
		c.req.len = (uint32_t)evbuffer_get_length(text);
		c.text = (const char *)evbuffer_pullup(text, -1);
		memset(&o, 0, sizeof o);
		o.stdio[0] = stdin_pipe ? SPAWN_PIPE : SPAWN_NULL;
		sp = send_via(&o, &c, cb, arg, timeout);
	}
	evbuffer_free(text);
	return sp;
}

void
shell_template_stop(void)
{
	template_close();
	if (tpl.retry != NULL)
		event_free(tpl.retry);
	tpl.retry = NULL;
	if (tpl.so_fd >= 0)
		close(tpl.so_fd);
	tpl.so_fd = -1;
}
