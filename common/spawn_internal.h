/*
 * Between spawn.c (the parent side, on the event loop), spawn_child.c
 * (what runs in the child between fork and exec) and spawn_state.c (what
 * a program started ahead of need may have had changed). Private to them.
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
	SPAWN_MSG_PID,		/* the keeper forked the command: its pid */
	SPAWN_MSG_ERRNO,	/* setting up or executing failed */
	SPAWN_MSG_CHDIR,	/* changing to cwd failed: its errno */
	SPAWN_MSG_SETUP,	/* the caller's setup failed: its errno */
	/* The keeper reaped the command: its wait status. The keeper exits
	 * right after, with the same; told first, the runner need not wait
	 * for that exit (and the teardown of a copy of its memory). */
	SPAWN_MSG_STATUS,
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

/* In the forked child, every signal blocked: become the keeper of a new
 * child that runs the program of o (see spawn_child.c). Never returns. */
void spawn_child_keeper(const struct spawn_options *o, const int fds[3],
    int errfd) __attribute__((noreturn));

/* The program pid, a child of keeper, is still as it was started
 * (spawn_state.c); 0 if not, or if that cannot be told. */
int spawn_state_untouched(pid_t pid, pid_t keeper);

#endif
