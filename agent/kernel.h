/*
 * IPython kernels (kernel.c): supervised Python children, each with its own
 * state, that run cells one at a time in the order they came. The agent
 * has one for run_ipython_cell (agent->kernel, kernel_ipython.c); the code
 * interpreter one per context (ci_*.c).
 *
 * A kernel speaks one of two dialects, chosen when it is made:
 * KERNEL_MCP answers a cell at its end with its output, its last value as
 * text and its images (run_ipython_cell's MCP result); KERNEL_E2B streams
 * what a cell does while it runs (output, rich results in every MIME
 * format, the error), as E2B's code interpreter does.
 *
 * Callbacks run from the event loop, never from inside the call that
 * registered them.
 */
#ifndef KERNEL_H
#define KERNEL_H

#include <stddef.h>

#include <jansson.h>

#include "error.h"

struct agent;
struct evbuffer;
struct kernel;
struct kernel_cell;

enum kernel_mode {
	KERNEL_MCP,
	KERNEL_E2B,
};

/* How a cell ended. */
enum kernel_end {
	KERNEL_END_DONE,	/* it ran (and maybe raised) */
	KERNEL_END_LOST,	/* the kernel died or was killed under it */
	KERNEL_END_RESTARTED,	/* kernel_restart ended it */
};

/* What a cell produced. Owned by the done callback: kernel_result_free. */
struct kernel_result {
	struct error err;		/* status 0: the cell ran (and maybe
					 * failed); else the kernel could not */
	enum kernel_end end;
	/* Buffered cells: their stdout (then the last value's repr) and
	 * stderr (tracebacks, our notes on how the cell ended). Streamed
	 * cells: what was not streamed yet (a note on state lost before
	 * the cell, in errout). */
	struct evbuffer *out;
	struct evbuffer *errout;
	json_t *images;			/* buffered: MCP image items (array) */
	char *note;			/* streamed: why it did not end as
					 * KERNEL_END_DONE; else NULL */
};
typedef void (*kernel_done_cb)(struct kernel_result *res, void *arg);
typedef void (*kernel_ready_cb)(const struct error *err, void *arg);

/* A streamed cell's callbacks (KERNEL_E2B). */
struct kernel_stream_callbacks {
	/* Output of the cell on stream 1 or 2, to be drained from buf. */
	void (*output)(int stream, struct evbuffer *buf, void *arg);
	/* A control frame of the cell: {"started", "count"} first, then
	 * {"result", "main"} and {"error"}. -1 with *why (a static string)
	 * if it is malformed: the kernel is then killed. */
	int (*frame)(json_t *msg, const char **why, void *arg);
	kernel_done_cb done;
};

/* A stopped kernel; it starts on first use or kernel_start. cwd: where it
 * starts (the sandbox user changes there; NULL: the workspace);
 * keep_running: restart it at once when it dies between cells. Freed by
 * kernel_free. */
struct kernel *kernel_new(struct agent *agent, enum kernel_mode mode,
    const char *cwd, int keep_running);
/* Kill it and free it: a running cell ends (KERNEL_END_LOST, with why as
 * its note), queued cells and waiters fail with err. */
void kernel_free(struct kernel *k, const char *why, const struct error *err);
/* Start a stopped kernel. -1 with err if it cannot be spawned; else ready
 * (may be NULL) runs once it is ready or failed to start. */
int kernel_start(struct kernel *k, kernel_ready_cb ready, void *arg,
    struct error *err);
/* Kill it and start it anew with empty state: the running cell ends
 * (KERNEL_END_RESTARTED), queued cells run in the new one. ready as in
 * kernel_start, also told if it cannot be spawned. */
void kernel_restart(struct kernel *k, kernel_ready_cb ready, void *arg);

/* Queue code (a JSON string, referenced) to run with a timeout in seconds
 * (KERNEL_MCP). NULL with err (503) when the kernel cannot start; the
 * cell is the kernel's until done runs. */
struct kernel_cell *kernel_run(struct kernel *k, json_t *code,
    double timeout, kernel_done_cb done, void *arg, struct error *err);
/* Queue code to run streamed (KERNEL_E2B), with env (an object of
 * strings, referenced; may be NULL) in the environment for its duration,
 * and no timeout. As kernel_run otherwise. */
struct kernel_cell *kernel_run_streamed(struct kernel *k, json_t *code,
    json_t *env, const struct kernel_stream_callbacks *cb, void *arg,
    struct error *err);
/* Stop reading the running streamed cell's output and frames until
 * called with 0 (backpressure: its client reads slowly). */
void kernel_cell_pause(struct kernel_cell *cell, int pause);
/* The caller lost interest (its client left): a queued cell is dropped, a
 * running one interrupted. done will not run. */
void kernel_abandon(struct kernel_cell *cell);
void kernel_result_free(struct kernel_result *res);

#endif
