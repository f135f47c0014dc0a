/*
 * Child processes on the event loop: fork + exec with each standard stream
 * sent to /dev/null, inherited, captured by the runner (with a byte cap),
 * handed to the caller as a pipe, or given a descriptor of the caller's; its
 * own process group under a keeper that can end its whole process tree
 * (spawn_child.c); a timeout that does so; an optional seccomp program
 * applied just before exec; and one SIGCHLD reaper for the process, which
 * also reaps orphans (the agent is PID 1 in its container).
 */
#ifndef SPAWN_H
#define SPAWN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

struct event_base;
struct evbuffer;
struct sock_fprog;
struct spawn;

enum spawn_stdio {
	SPAWN_NULL,	/* /dev/null */
	SPAWN_INHERIT,	/* our own descriptor */
	SPAWN_CAPTURE,	/* read by the runner: on_output, or kept in a buffer */
	SPAWN_PIPE,	/* a pipe whose other end the caller gets and owns */
	SPAWN_FD,	/* fd[i] of the caller's, which it keeps and closes */
};

struct spawn_options {
	const char *const *argv;	/* argv[0] is the path to execute */
	const char *const *envp;	/* NULL: our environment */
	const char *cwd;		/* NULL: ours */
	enum spawn_stdio stdio[3];
	int fd[3];			/* for SPAWN_FD */
	/* Its own process group, under a keeper: spawn_kill(SIGKILL) and the
	 * timeout end its whole tree, what left the group included. */
	int new_group;
	size_t capture_cap[3];		/* bytes kept per captured stream; 0: all */
	double timeout;			/* seconds; 0: none */
	const struct sock_fprog *seccomp; /* loaded in the child before exec */
	int set_ids;			/* drop to uid/gid before exec */
	uid_t uid;
	gid_t gid;
	/* More descriptors for the child, as its 3, 4, ... (a private channel
	 * besides stdio); the caller keeps and closes its own. */
	const int *pass_fds;
	size_t npass_fds;		/* at most SPAWN_MAX_PASS_FDS */
	/* Execute this descriptor of the caller's (execveat), not the file
	 * argv[0] names; argv[0] is then only what the program is told. */
	int use_exec_fd;
	int exec_fd;
	/* Return as soon as the child is forked, not once it executed.
	 * Until it did it has no program pid, and a failed exec shows as an
	 * exit with 127. */
	int async;
	/* A session of its own (with new_group) whose controlling terminal
	 * is its stdin, a pty's slave: job control and SIGWINCH work. */
	int ctty;
	/* Change to cwd only once dropped to uid/gid, so that the user's own
	 * permissions decide whether it may (a root chdir could leave it in
	 * a directory it may not enter). */
	int cwd_as_user;
	/* argv[0] without a '/' is looked up in the PATH of envp, as the
	 * user, as execvp would. */
	int search_path;
	/* Run in the child before its working directory, ids and
	 * confinement are set (entering namespaces, mounting): system calls
	 * only, no allocation (the parent may have threads). -1 with errno
	 * fails the spawn with "cannot set up <argv[0]>" and that errno. */
	int (*setup)(void *arg);
	void *setup_arg;
};

#define SPAWN_MAX_PASS_FDS 4

struct spawn_callbacks {
	/* A piece of captured output (stream 1 or 2). When NULL, output is
	 * kept in buffers (spawn_output) up to the cap. */
	void (*on_output)(struct spawn *sp, int stream, const char *data,
	    size_t len, void *arg);
	/* The process has exited and its captured streams are closed (or it
	 * exited, its output was read, and a short grace for its background
	 * children passed).
	 * status is as from waitpid. The caller still frees with spawn_free. */
	void (*on_exit)(struct spawn *sp, int status, void *arg);
	/* spawn_start_via only, when set: its command has set itself up
	 * (group, streams, user, directory) and runs; spawn_pid is its pid.
	 * Its output is read from then on. One that could not start
	 * exits without it (spawn_start_errno says why). Must not free sp. */
	void (*on_start)(struct spawn *sp, void *arg);
};

/* A memfd named name holding len bytes of data, at offset 0 (a child's
 * descriptor shares it), for SPAWN_FD or pass_fds; -1 with errno. */
int spawn_memfd(const char *name, const void *data, size_t len);

/* Install the SIGCHLD reaper on this loop. Call once per process. */
void spawn_init(struct event_base *base);
/* Told, with its wait status, of every child the reaper reaps that no
 * spawn started: orphans of a subreaper (PID 1, or PR_SET_CHILD_SUBREAPER)
 * come back to it so. One per process; NULL: none. */
void spawn_set_orphan_cb(void (*cb)(pid_t pid, int status, void *arg),
    void *arg);

/* Start a child. NULL with err (500, or 404 if the program is missing). */
struct spawn *spawn_start(struct event_base *base,
    const struct spawn_options *opts, const struct spawn_callbacks *cb,
    void *arg, struct error *err);
/* Start a child through another process, which forks its keeper as our
 * child (clone's CLONE_PARENT): the shell template (agent/shell_template.c).
 * start(fds, report_fd, start_arg) hands that process the child's ends of
 * its standard streams, made as opts says (stdio, capture_cap; timeout),
 * and the report pipe's write end, on which the keeper tells its own pid
 * first, then as any keeper does (spawn_child.c); the caller keeps the
 * descriptors, which are closed after start returns (-1 with errno if it
 * could not). As an async spawn: the pids come later, and a kill asked
 * for before is done then. A keeper that was never told, or died killed,
 * ends the spawn as killed (SIGKILL); one that told an errno, with 127.
 * NULL with err (500). */
struct spawn *spawn_start_via(struct event_base *base,
    const struct spawn_options *opts,
    int (*start)(const int fds[3], int report_fd, void *start_arg),
    void *start_arg, const struct spawn_callbacks *cb, void *arg,
    struct error *err);
/* The program's pid (not its keeper's). */
pid_t spawn_pid(struct spawn *sp);
/* Why a spawn_start_via's command that exited before on_start did not
 * start: the errno it told (*in_cwd: changing to its directory), or 0
 * (killed before it could, or its request was refused). */
int spawn_start_errno(struct spawn *sp, int *in_cwd);
/* Our end of a SPAWN_PIPE stream, now owned by the caller; -1 otherwise. */
int spawn_take_fd(struct spawn *sp, int stream);
/* Signal the child (its whole group if it has one; with SIGKILL, its
 * whole tree). */
void spawn_kill(struct spawn *sp, int sig);
int spawn_timed_out(struct spawn *sp);
int spawn_exited(struct spawn *sp);
/* Captured output kept in buffers (no on_output callback). */
struct evbuffer *spawn_output(struct spawn *sp, int stream);
/* Bytes of a stream dropped because of its cap. */
uint64_t spawn_dropped(struct spawn *sp, int stream);
/* Stop / restart reading captured output (backpressure). While paused
 * the exit is not reported: all the command wrote comes first. */
void spawn_pause_output(struct spawn *sp);
void spawn_resume_output(struct spawn *sp);
/* Kill the tree with SIGKILL if still running, and free. The exit
 * callback is not called afterwards. */
void spawn_free(struct spawn *sp);
/* Signal every child we started (their groups too): for shutdown. */
void spawn_kill_all(int sig);
/* Children we started (and have not freed) that have not exited yet. */
size_t spawn_running(void);

#endif
