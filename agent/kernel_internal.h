/*
 * Inside the IPython kernels: kernel.c runs the Python process (start,
 * stop, restart, its death, its timers, its control channel), and
 * kernel_cell.c the cells (the queue, what each sends back, how it ends).
 */
#ifndef KERNEL_INTERNAL_H
#define KERNEL_INTERNAL_H

#include <sys/queue.h>
#include <time.h>

#include "kernel.h"
#include "kernel_stream.h"

#define KERNEL_GRACE_SECONDS 2		/* from SIGINT to SIGKILL */
/* Images a cell may send back; with KERNEL_STREAM_FRAME_MAX, all the agent
 * keeps of a cell besides its two output streams (--output-cap each). */
#define KERNEL_IMAGES_MAX 64
/* Room the kernel leaves in a frame for what is not image data. */
#define KERNEL_FRAME_SLACK (64 * 1024)

struct bufferevent;
struct event;
struct spawn;

enum kernel_state {
	KERNEL_STOPPED,
	KERNEL_STARTING,	/* spawned, no ready frame yet */
	KERNEL_IDLE,
	KERNEL_BUSY,		/* a cell is running */
};

enum kernel_timer {
	TIMER_START,		/* the kernel must be ready by then */
	TIMER_CELL,		/* the running cell's timeout */
	TIMER_GRACE,		/* interrupted; killed when this fires */
};

/* Owned by the kernel from kernel_run until its done callback has run
 * or, abandoned, it ends; freed by the kernel. */
struct kernel_cell {
	TAILQ_ENTRY(kernel_cell) entry;
	struct kernel *k;
	json_t *code;
	json_t *env;		/* streamed: set while it runs; or NULL */
	double timeout;		/* 0: none */
	kernel_done_cb done;
	const struct kernel_stream_callbacks *cb;	/* NULL: buffered */
	void *arg;
	int abandoned;
	int timed_out;		/* interrupted because of its timeout */
	int started;		/* the kernel said it runs it */
	int interrupt;		/* to interrupt as soon as it runs */
	int answered;		/* its last frame came */
	int paused;		/* kernel_cell_pause */
	json_t *images;
};

TAILQ_HEAD(kernel_cell_queue, kernel_cell);

/* Someone waiting for the kernel to be ready (kernel_start). */
struct kernel_waiter {
	TAILQ_ENTRY(kernel_waiter) entry;
	kernel_ready_cb cb;
	void *arg;
};

TAILQ_HEAD(kernel_waiter_list, kernel_waiter);

/* Made by kernel_new, freed by kernel_free. */
struct kernel {
	struct agent *agent;
	enum kernel_mode mode;
	char *cwd;			/* or NULL: the workspace */
	int keep_running;
	enum kernel_state state;
	struct spawn *sp;
	struct bufferevent *ctl;
	struct event *timer;
	enum kernel_timer timer_kind;
	struct event *eof_timer;	/* fd 3 closed, the process not gone */
	double started;		/* monotonic seconds */
	struct kernel_stream out[3];	/* [1] and [2] */
	char marker[MARKER_LEN + 1];
	struct kernel_cell_queue queue;	/* waiting cells */
	struct kernel_cell *running;
	struct kernel_waiter_list waiters;
	const char *lost;		/* why we killed it, if we did */
	char *next_note;		/* for the next cell: the state was
					 * lost and nobody was told yet */
};

/* kernel.c */
void kernel_arm(struct kernel *k, enum kernel_timer kind, double seconds);
/* We give up on a kernel that breaks the protocol; its exit follows. */
void kernel_lose(struct kernel *k, const char *why);
/* Kill it and start another; what cannot start fails the queue. */
void kernel_replace(struct kernel *k);
/* SIGINT to the running cell (once it runs), SIGKILL after the grace. */
void kernel_interrupt(struct kernel *k);
/* Read (or not) the kernel's output and frames: paused by a slow client
 * of the running cell. */
void kernel_set_reading(struct kernel *k, int on);

/* kernel_cell.c */
/* Send the next queued cell to an idle kernel. */
void kernel_kick(struct kernel *k);
/* The running cell is over once its last frame and both markers are in. */
void kernel_check_done(struct kernel *k);
/* Give the running cell its result: end as given, with a note on how it
 * ended (fmt may be NULL); the streams move on to the next cell. */
void kernel_finish_cell(struct kernel *k, enum kernel_end end,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Fail every waiting cell: the kernel cannot run them. */
void kernel_fail_queue(struct kernel *k, const struct error *err);
/* The kernel is replaced and no cell will say so: the next one will. */
void kernel_tell_next(struct kernel *k, const char *why);
/* Output came on stream 1 or 2 (fed to k->out); a streamed cell gets it. */
void kernel_cell_output(struct kernel *k, int stream);
/* A frame while a cell runs; breaks the protocol if out of turn. */
void kernel_cell_frame(struct kernel *k, json_t *msg);

#endif
