/*
 * process.Process: SendInput, StreamInput, CloseStdin, SendSignal and
 * Update, and what Start needs of them: input queued for a process's
 * stdin or pty and written as the process takes it (never blocking the
 * loop, at most INPUT_MAX waiting), and the pty pair of a PTY process.
 */
#include "envd_process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "spawn.h"

#define INPUT_MAX	(8 * 1024 * 1024)	/* queued for one process */

void
envd_input_free(struct envd_input *in)
{
	if (in->ev != NULL)
		event_free(in->ev);
	if (in->buf != NULL)
		evbuffer_free(in->buf);
	if (in->fd >= 0)
		close(in->fd);
	memset(in, 0, sizeof *in);
	in->fd = -1;
}

/* Write what is queued; what the process does not take now waits for
 * it. A process that closed its end loses the rest. */
static void
input_flush(struct envd_input *in)
{
	while (in->buf != NULL && evbuffer_get_length(in->buf) > 0) {
		if (evbuffer_write(in->buf, in->fd) >= 0)
			continue;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN) {
			event_add(in->ev, NULL);
			return;
		}
		evbuffer_drain(in->buf, evbuffer_get_length(in->buf));
		in->close_after = 1;
	}
	if (in->close_after) {
		if (in->ev != NULL)
			event_free(in->ev);
		in->ev = NULL;
		close(in->fd);
		in->fd = -1;
	}
}

static void
input_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	input_flush(arg);
}

int
envd_input_write(struct envd_proc *p, struct envd_input *in,
    const char *data, size_t len, struct error *err)
{
	if (in->fd < 0 || in->close_after) {
		error_set(err, 412, "process %u: %s not enabled or closed",
		    (unsigned)p->pid, p->pty >= 0 ? "the pty is" : "stdin is");
		return -1;
	}
	if (in->buf == NULL) {
		in->buf = evbuffer_new();
		fcntl(in->fd, F_SETFL, fcntl(in->fd, F_GETFL) | O_NONBLOCK);
		in->ev = event_new(envd_base(), in->fd, EV_WRITE, input_cb, in);
	}
	if (evbuffer_get_length(in->buf) + len > INPUT_MAX) {
		error_set(err, 429, "process %u does not read its input: %d "
		    "bytes wait already", (unsigned)p->pid, INPUT_MAX);
		return -1;
	}
	evbuffer_add(in->buf, data, len);
	input_flush(in);
	return 0;
}

void
envd_input_close(struct envd_input *in)
{
	if (in->fd < 0)
		return;
	in->close_after = 1;
	if (in->buf == NULL || evbuffer_get_length(in->buf) == 0)
		input_flush(in);
}

int
envd_pty_open(const struct envd_user *u, uint32_t cols, uint32_t rows,
    int *slave, struct error *err)
{
	struct winsize ws = { rows > 0xffff ? 0xffff : (unsigned short)rows,
	    cols > 0xffff ? 0xffff : (unsigned short)cols, 0, 0 };
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);

	*slave = -1;
	/* The slave by the master's descriptor, not by a name under
	 * /dev/pts; then the user's, as login makes a terminal. */
	if (m < 0 || unlockpt(m) < 0 || ioctl(m, TIOCSWINSZ, &ws) < 0 ||
	    (*slave = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 ||
	    (geteuid() == 0 && (fchown(*slave, u->uid, (gid_t)-1) < 0 ||
	    fchmod(*slave, 0620) < 0))) {
		error_set_errno(err, 503, errno, "cannot open a pty");
		if (*slave >= 0)
			close(*slave);
		if (m >= 0)
			close(m);
		*slave = -1;
		return -1;
	}
	return m;
}

/* The running process msg names in "process"; NULL when the call was
 * answered with the error. */
static struct envd_proc *
selected(struct envd_call *call, json_t *msg)
{
	struct error err = { 0 };
	struct envd_proc *p = envd_proc_find(envd_json_field(msg, "process",
	    NULL), 0, &err);

	if (p == NULL)
		envd_fail(call, &err);
	return p;
}

/* ProcessInput {stdin} or {pty} into p. */
static int
take_input(struct envd_proc *p, json_t *input, struct error *err)
{
	char *stdin_data = NULL, *pty_data = NULL;
	size_t stdin_len, pty_len;
	int rc = -1;

	if (input == NULL || !json_is_object(input)) {
		error_set(err, 400, "input is required");
		return -1;
	}
	if (envd_json_bytes(input, "stdin", NULL, &stdin_data, &stdin_len,
	    err) < 0 || envd_json_bytes(input, "pty", NULL, &pty_data,
	    &pty_len, err) < 0)
		goto out;
	if (stdin_data != NULL && p->pty >= 0)
		error_set(err, 412, "a tty is assigned to process %u: input "
		    "goes to the pty, not to stdin", (unsigned)p->pid);
	else if (pty_data != NULL && p->pty < 0)
		error_set(err, 412, "no tty is assigned to process %u: input "
		    "goes to stdin", (unsigned)p->pid);
	else if (stdin_data == NULL && pty_data == NULL)
		error_set(err, 501, "invalid input type");
	else
		rc = envd_input_write(p, &p->in, stdin_data ? stdin_data :
		    pty_data, stdin_data ? stdin_len : pty_len, err);
out:
	free(stdin_data);
	free(pty_data);
	return rc;
}

void
envd_process_send_input(struct envd_call *call, json_t *msg)
{
	struct envd_proc *p = selected(call, msg);
	struct error err = { 0 };

	if (p == NULL)
		return;
	if (take_input(p, envd_json_field(msg, "input", NULL), &err) < 0)
		envd_fail(call, &err);
	else
		envd_reply(call, NULL);
}

/* StreamInputRequest: {start: {process}}, then {data: {input}} and
 * {keepalive: {}} as they come. The process is named once, by pid then
 * (a tag could name another one later). */
int
envd_process_stream_input(struct envd_call *call, json_t *msg,
    struct error *err)
{
	uintptr_t *pid = (uintptr_t *)envd_call_state(call);
	json_t *start, *data, *selector;
	struct envd_proc *p;

	if (msg == NULL) {
		envd_reply(call, NULL);
		return 0;
	}
	if (envd_json_object(msg, "start", NULL, &start, err) < 0 ||
	    envd_json_object(msg, "data", NULL, &data, err) < 0)
		return -1;
	if (start != NULL) {
		if ((p = envd_proc_find(envd_json_field(start, "process", NULL),
		    0, err)) == NULL)
			return -1;
		*pid = (uintptr_t)p->pid + 1;
		return 0;
	}
	if (data == NULL) {
		if (envd_json_field(msg, "keepalive", NULL) != NULL)
			return 0;
		error_set(err, 501, "invalid event type");
		return -1;
	}
	if (*pid == 0) {
		error_set(err, 400, "data before start");
		return -1;
	}
	selector = json_pack("{s:I}", "pid", (json_int_t)(*pid - 1));
	p = envd_proc_find(selector, 0, err);
	json_decref(selector);
	return p == NULL ? -1 : take_input(p, envd_json_field(data, "input",
	    NULL), err);
}

void
envd_process_close_stdin(struct envd_call *call, json_t *msg)
{
	struct envd_proc *p = selected(call, msg);
	struct error err;

	if (p == NULL)
		return;
	if (p->pty >= 0) {
		error_set(&err, 412, "cannot close stdin of a PTY process: "
		    "send Ctrl+D (0x04) instead");
		envd_fail(call, &err);
		return;
	}
	envd_input_close(&p->in);
	envd_reply(call, NULL);
}

void
envd_process_signal(struct envd_call *call, json_t *msg)
{
	static const char *const names[] = { "SIGNAL_UNSPECIFIED", NULL, NULL,
	    NULL, NULL, NULL, NULL, NULL, NULL, "SIGNAL_SIGKILL", NULL, NULL,
	    NULL, NULL, NULL, "SIGNAL_SIGTERM" };
	struct envd_proc *p = selected(call, msg);
	struct error err = { 0 };
	int sig;

	if (p == NULL)
		return;
	if (envd_json_enum(msg, "signal", NULL, names, sizeof names /
	    sizeof names[0], &sig, &err) == 0 && sig != SIGKILL &&
	    sig != SIGTERM)
		error_set(&err, 501, "invalid signal");
	if (err.status != 0) {
		envd_fail(call, &err);
		return;
	}
	/* SIGKILL: the whole tree, through its keeper; SIGTERM: its group. */
	spawn_kill(p->sp, sig);
	envd_reply(call, NULL);
}

void
envd_process_update(struct envd_call *call, json_t *msg)
{
	struct envd_proc *p = selected(call, msg);
	struct error err = { 0 };
	json_t *pty, *size = NULL;
	uint32_t cols = 0, rows = 0;
	struct winsize ws;
	int present;

	if (p == NULL)
		return;
	if (envd_json_object(msg, "pty", NULL, &pty, &err) < 0 ||
	    (pty != NULL && envd_json_object(pty, "size", NULL, &size,
	    &err) < 0) ||
	    (size != NULL && (envd_json_uint32(size, "cols", NULL, &cols,
	    &present, &err) < 0 || envd_json_uint32(size, "rows", NULL, &rows,
	    &present, &err) < 0)))
		goto fail;
	if (pty != NULL && p->pty < 0) {
		error_set(&err, 412, "no tty is assigned to process %u",
		    (unsigned)p->pid);
		goto fail;
	}
	if (pty != NULL) {
		memset(&ws, 0, sizeof ws);
		ws.ws_col = cols > 0xffff ? 0xffff : (unsigned short)cols;
		ws.ws_row = rows > 0xffff ? 0xffff : (unsigned short)rows;
		/* The kernel tells the terminal's foreground group
		 * (SIGWINCH). */
		if (ioctl(p->pty, TIOCSWINSZ, &ws) < 0) {
			error_set_errno(&err, 500, errno, "cannot resize the pty");
			goto fail;
		}
	}
	envd_reply(call, NULL);
	return;
fail:
	envd_fail(call, &err);
}
