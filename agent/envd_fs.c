/*
 * The agent's side of the file helpers (envd_fs.h): a few helper
 * processes per user, started when an operation needs one and ended after
 * HELPER_IDLE seconds without work; operations wait in one queue, in
 * order, for a helper of their user. Every wait and every read is on the
 * event loop; a slow operation holds up only its own helper.
 */
#include "envd_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "fdio.h"
#include "log.h"
#include "spawn.h"
#include "xmalloc.h"

#define HELPERS_PER_USER	4
#define HELPERS_MAX		16
#define HELPER_IDLE		30	/* seconds */
#define QUEUE_MAX		1024	/* operations waiting for a helper */
#define ITEM_BYTES_MAX		(64 * 1024 * 1024)	/* of one answer */
#define FDS_MAX			4	/* per frame; more is a violation */

struct helper;

/* Owned by the module from envd_fs_call until its callback ran or it was
 * cancelled (then until its helper answers). */
struct envd_fs_op {
	TAILQ_ENTRY(envd_fs_op) entry;	/* in the queue */
	uid_t uid;
	gid_t gid;
	char *text;			/* the request frame */
	int pass_fd;			/* ours, -1: none */
	envd_fs_cb cb;			/* NULL: cancelled */
	void *arg;
	struct helper *helper;		/* running there */
	struct event *defer;		/* an answer found before any helper */
	struct envd_fs_reply reply;
	size_t item_bytes;
};

/* Owned by the module; freed when idle too long, dead or unruly. */
struct helper {
	TAILQ_ENTRY(helper) entry;
	uid_t uid;
	gid_t gid;
	struct spawn *sp;
	int fd;
	struct event *ev;
	struct event *idle;
	struct envd_fs_op *cur;
};

static struct {
	struct agent *agent;
	int exe_fd;
	TAILQ_HEAD(, helper) helpers;
	TAILQ_HEAD(, envd_fs_op) queue;
	size_t nhelpers, nqueued;
} fs = { .exe_fd = -1 };

static void dispatch(void);

void
envd_fs_init(struct agent *agent)
{
	fs.agent = agent;
	TAILQ_INIT(&fs.helpers);
	TAILQ_INIT(&fs.queue);
	/* The binary a helper executes: ours, by descriptor, so that the
	 * name it had cannot be swapped under us. */
	fs.exe_fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (fs.exe_fd < 0)
		log_warn("envd: cannot open /proc/self/exe (%s): file "
		    "operations will fail", strerror(errno));
}

static void
op_free(struct envd_fs_op *op)
{
	free(op->text);
	if (op->pass_fd >= 0)
		close(op->pass_fd);
	if (op->defer != NULL)
		event_free(op->defer);
	json_decref(op->reply.result);
	evbuffer_free(op->reply.items);
	if (op->reply.fd >= 0)
		close(op->reply.fd);
	free(op);
}

/* The operation is over: its callback, unless cancelled, then free. */
static void
op_finish(struct envd_fs_op *op)
{
	if (op->cb != NULL)
		op->cb(&op->reply, op->arg);
	op_free(op);
}

static void
defer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	op_finish(arg);
}

/* Fail op before any helper took it, from the loop. */
static void
op_fail_later(struct envd_fs_op *op)
{
	struct timeval zero = { 0, 0 };

	op->defer = evtimer_new(fs.agent->base, defer_cb, op);
	evtimer_add(op->defer, &zero);
}

struct envd_fs_op *
envd_fs_call(struct agent *agent, const struct envd_user *u, json_t *req,
    int pass_fd, envd_fs_cb cb, void *arg)
{
	struct envd_fs_op *op = xcalloc(1, sizeof *op);

	(void)agent;
	op->uid = u->uid;
	op->gid = u->gid;
	op->cb = cb;
	op->arg = arg;
	op->pass_fd = -1;
	op->reply.fd = -1;
	op->reply.items = evbuffer_new();
	/* NULL: json_pack met a name that is not UTF-8. */
	op->text = req != NULL ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (op->text == NULL) {
		error_set(&op->reply.err, 400, "a path is not UTF-8");
	} else if (strlen(op->text) >= ENVD_FS_FRAME) {
		error_set(&op->reply.err, 400, "the operation's paths are too "
		    "long");
	} else if (fs.nqueued >= QUEUE_MAX) {
		error_set(&op->reply.err, 429, "too many file operations at "
		    "once");
	} else if (pass_fd >= 0 &&
	    (op->pass_fd = fcntl(pass_fd, F_DUPFD_CLOEXEC, 0)) < 0) {
		error_set_errno(&op->reply.err, 503, errno, "dup");
	}
	if (op->reply.err.status != 0) {
		op_fail_later(op);
		return op;
	}
	TAILQ_INSERT_TAIL(&fs.queue, op, entry);
	fs.nqueued++;
	dispatch();
	return op;
}

void
envd_fs_cancel(struct envd_fs_op *op)
{
	if (op->helper != NULL) {
		op->cb = NULL;	/* its helper's answer frees it */
		return;
	}
	if (op->defer == NULL) {
		TAILQ_REMOVE(&fs.queue, op, entry);
		fs.nqueued--;
	}
	op_free(op);
}

/* Helpers. */

static void
helper_free(struct helper *h)
{
	TAILQ_REMOVE(&fs.helpers, h, entry);
	fs.nhelpers--;
	/* Closing the socket ends a helper that still runs; spawn_free
	 * kills what is left of it. */
	event_free(h->ev);
	event_free(h->idle);
	close(h->fd);
	spawn_free(h->sp);
	free(h);
}

/* The helper cannot go on: its operation fails with err. */
static void
helper_fail(struct helper *h, const char *why)
{
	struct envd_fs_op *op = h->cur;

	log_warn("envd: the file helper of uid %u %s", (unsigned)h->uid, why);
	h->cur = NULL;
	helper_free(h);
	if (op != NULL) {
		error_set(&op->reply.err, 500, "the file helper %s", why);
		op_finish(op);
	}
	dispatch();
}

static void
helper_exit_cb(struct spawn *sp, int status, void *arg)
{
	(void)sp;
	(void)status;
	helper_fail(arg, "exited");
}

static void
idle_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	helper_free(arg);
}

/* Each item of a frame as compact JSON, after those already there. */
static void
append_items(struct evbuffer *items, json_t *more)
{
	size_t i;
	json_t *v;
	char *text;

	json_array_foreach(more, i, v) {
		text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		if (evbuffer_get_length(items) > 0)
			evbuffer_add(items, ",", 1);
		evbuffer_add(items, text, strlen(text));
		free(text);
	}
}

json_t *
envd_fs_items(struct envd_fs_reply *r)
{
	struct evbuffer *b = evbuffer_new();
	json_t *array;

	evbuffer_add(b, "[", 1);
	evbuffer_add_buffer_reference(b, r->items);
	evbuffer_add(b, "]", 1);
	array = json_loadb((const char *)evbuffer_pullup(b, -1),
	    evbuffer_get_length(b), 0, NULL);
	evbuffer_free(b);
	return array != NULL ? array : json_array();
}

/* One frame of the answer to the current operation: 1 when it was the
 * last, 0 for more, -1 when the frame breaks the protocol. fd (or -1) is
 * taken. */
static int
take_frame(struct helper *h, const char *data, size_t len, int fd)
{
	struct envd_fs_op *op = h->cur;
	json_t *frame = json_loadb(data, len, JSON_REJECT_DUPLICATES, NULL);
	json_t *more, *ok, *error, *status, *msg;
	int rc = -1;

	if (frame == NULL || !json_is_object(frame) || json_object_size(frame)
	    != 1)
		goto out;
	more = json_object_get(frame, "more");
	ok = json_object_get(frame, "ok");
	error = json_object_get(frame, "error");
	if (json_is_array(more) && fd < 0) {
		op->item_bytes += len;
		op->reply.nitems += json_array_size(more);
		if (op->reply.nitems > ENVD_FS_MAX_ITEMS ||
		    op->item_bytes > ITEM_BYTES_MAX)
			goto out;
		append_items(op->reply.items, more);
		rc = 0;
	} else if (json_is_object(ok)) {
		op->reply.result = json_incref(ok);
		op->reply.fd = fd;
		fd = -1;
		rc = 1;
	} else if (json_is_object(error) && fd < 0 &&
	    json_is_integer(status = json_object_get(error, "status")) &&
	    json_integer_value(status) >= 400 &&
	    json_integer_value(status) < 600 &&
	    json_is_string(msg = json_object_get(error, "message"))) {
		error_set(&op->reply.err, (int)json_integer_value(status),
		    "%s", json_string_value(msg));
		rc = 1;
	}
out:
	json_decref(frame);
	if (fd >= 0)
		close(fd);
	return rc;
}

static void
read_cb(evutil_socket_t sock, short what, void *arg)
{
	struct helper *h = arg;
	char *buf = xmalloc(ENVD_FS_FRAME);
	char cbuf[CMSG_SPACE(FDS_MAX * sizeof(int))];
	struct iovec iov = { buf, ENVD_FS_FRAME };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
	    .msg_control = cbuf, .msg_controllen = sizeof cbuf };
	struct envd_fs_op *op;
	struct cmsghdr *c;
	int fds[FDS_MAX], nfds = 0, rc;
	ssize_t n;

	(void)what;
	n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		free(buf);
		return;
	}
	for (c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c != NULL;
	    c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) &&
		    nfds < FDS_MAX; i++)
			memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int),
			    sizeof(int));
	}
	if (n <= 0) {
		rc = -2;
	} else if (h->cur == NULL || nfds > 1 ||
	    (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		rc = -1;
	} else {
		rc = take_frame(h, buf, (size_t)n, nfds == 1 ? fds[0] : -1);
		nfds = 0;
	}
	free(buf);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (rc < 0) {
		helper_fail(h, rc == -2 ? "exited" : "broke the protocol");
		return;
	}
	if (rc == 0)
		return;
	op = h->cur;
	h->cur = NULL;
	{
		struct timeval tv = { HELPER_IDLE, 0 };

		evtimer_add(h->idle, &tv);
	}
	op_finish(op);
	dispatch();
}

static struct helper *
helper_start(uid_t uid, gid_t gid, struct error *err)
{
	static const char *const argv[] = { "sandbox-agent",
	    ENVD_FS_HELPER_ARG, NULL };
	static const char *const envp[] = { NULL };
	struct spawn_callbacks cb = { .on_exit = helper_exit_cb };
	struct spawn_options o;
	struct helper *h;
	int sv[2];

	if (fs.exe_fd < 0) {
		error_set(err, 500, "no binary for the file helper");
		return NULL;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		error_set_errno(err, 503, errno, "socketpair");
		return NULL;
	}
	h = xcalloc(1, sizeof *h);
	h->uid = uid;
	h->gid = gid;
	h->fd = sv[0];
	confine_spawn_options(fs.agent, &o);
	o.argv = argv;
	o.envp = envp;
	o.cwd = "/";
	o.stdio[0] = o.stdio[1] = o.stdio[2] = SPAWN_NULL;
	o.set_ids = envd_user_switches(uid, gid);
	o.uid = uid;
	o.gid = gid;
	o.pass_fds = &sv[1];
	o.npass_fds = 1;
	o.use_exec_fd = 1;
	o.exec_fd = fs.exe_fd;
	h->sp = spawn_start(fs.agent->base, &o, &cb, h, err);
	close(sv[1]);
	if (h->sp == NULL) {
		error_prefix(err, "cannot start the file helper");
		close(sv[0]);
		free(h);
		return NULL;
	}
	fcntl(h->fd, F_SETFL, O_NONBLOCK);
	h->ev = event_new(fs.agent->base, h->fd, EV_READ | EV_PERSIST, read_cb,
	    h);
	event_add(h->ev, NULL);
	h->idle = evtimer_new(fs.agent->base, idle_cb, h);
	TAILQ_INSERT_TAIL(&fs.helpers, h, entry);
	fs.nhelpers++;
	return h;
}

ssize_t
envd_fs_send(int sock, const char *data, size_t len, int fd, int flags)
{
	struct iovec iov = { (void *)data, len };

	return fdio_send_fds(sock, &iov, 1, &fd, fd >= 0, flags);
}

/* An idle helper's socket has room for a frame: a request is the only
 * thing we ever write to it, one at a time. */
static int
helper_send(struct helper *h, struct envd_fs_op *op)
{
	return envd_fs_send(h->fd, op->text, strlen(op->text), op->pass_fd,
	    MSG_DONTWAIT) < 0 ? -1 : 0;
}

/* Hand queued operations to idle helpers of their users, starting
 * helpers where the limits allow; the rest wait. */
static void
dispatch(void)
{
	struct envd_fs_op *op, *next;
	struct helper *h;
	struct error err = { 0 };
	size_t mine;

	for (op = TAILQ_FIRST(&fs.queue); op != NULL; op = next) {
		next = TAILQ_NEXT(op, entry);
		mine = 0;
		TAILQ_FOREACH(h, &fs.helpers, entry) {
			if (h->uid != op->uid || h->gid != op->gid)
				continue;
			if (h->cur == NULL)
				break;
			mine++;
		}
		if (h == NULL && (mine >= HELPERS_PER_USER ||
		    fs.nhelpers >= HELPERS_MAX))
			continue;
		TAILQ_REMOVE(&fs.queue, op, entry);
		fs.nqueued--;
		if (h == NULL && (h = helper_start(op->uid, op->gid,
		    &err)) == NULL) {
			op->reply.err = err;
			op_fail_later(op);
			continue;
		}
		evtimer_del(h->idle);
		h->cur = op;
		op->helper = h;
		if (helper_send(h, op) < 0) {
			helper_fail(h, "cannot be written to");
			return;	/* helper_fail dispatched again */
		}
	}
}
