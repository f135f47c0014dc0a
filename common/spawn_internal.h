/*
 * Between spawn.c (the parent side, on the event loop) and spawn_child.c
 * (what runs in the child between fork and exec, and its keeper); also
 * the shell template's builtin (agent/bash/shell_template_bash.c), whose
 * keepers and commands are forked by bash and report to spawn.c the same
 * way (spawn_start_via). Private to them.
 */
#ifndef SPAWN_INTERNAL_H
#define SPAWN_INTERNAL_H

#include <sys/types.h>

#include "spawn.h"

/* Told to a keeper by spawn_kill(SIGKILL), and by the kernel when the
 * agent dies (its parent-death signal): kill the whole tree. */
#define SPAWN_KEEPER_SIGNAL SIGTERM

/* What the child side reports on the error pipe (until exec closes it;
 * a keeper keeps it to the end):
 * messages of 8 bytes, so that each write is atomic and those of the
 * keeper and of the command cannot mix. */
enum spawn_msg_kind {
	/* A keeper forked by another process for us (spawn_start_via): its
	 * own pid, told before anything else. */
	SPAWN_MSG_KEEPER,
	SPAWN_MSG_PID,		/* the keeper forked the command: its pid */
	SPAWN_MSG_ERRNO,	/* setting up or executing failed */
	SPAWN_MSG_CHDIR,	/* changing to cwd failed: its errno */
	SPAWN_MSG_SETUP,	/* the caller's setup failed: its errno */
	/* The keeper reaped the command: its wait status. The keeper exits
	 * right after, with the same; told first, the runner need not wait
	 * for that exit (and the teardown of a copy of its memory). */
	SPAWN_MSG_STATUS,
	/* A command that runs on without exec (the shell template's) has
	 * set itself up and runs, before anything of the user's: its own
	 * pid. What an exec closing the pipe tells of the others. */
	SPAWN_MSG_STARTED,
};

struct spawn_msg {
	int kind;
	int value;
};

/* In the forked child, every signal blocked: make it the program of o.
 * own_group: become a process group of its own. Never returns; on failure
 * the errno goes up errfd and the child exits with 127. */
void spawn_child_exec(const struct spawn_options *o, const int fds[3],
    int errfd, int own_group) __attribute__((noreturn));

/* What spawn_child_exec does but the exec, for a child that runs on as
 * it is: it keeps its signal dispositions, its descriptors above 2 are its
 * own to close (errfd among them), and o->seccomp, if set, is in force
 * already (inherited): not loaded again. 0, or -1 once the errno went up
 * errfd. */
int spawn_child_confine(const struct spawn_options *o, const int fds[3],
    int errfd);

/* In the forked child, every signal blocked: become the keeper of a new
 * child that runs the program of o (see spawn_child.c). Never returns. */
void spawn_child_keeper(const struct spawn_options *o, const int fds[3],
    int errfd) __attribute__((noreturn));
/* The two halves of a keeper around the fork of its command: begin makes
 * the caller one (its own group, undumpable, the subreaper, told when its
 * parent dies); run, once cmd is forked, tells its pid, holds nothing but
 * errfd and waits (spawn_child.c). Every signal blocked. */
void spawn_keeper_begin(void);
void spawn_keeper_run(pid_t cmd, int errfd) __attribute__((noreturn));

#endif
