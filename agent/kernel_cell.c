/*
 * The cells of an IPython kernel (kernel.h). Cells wait in a FIFO queue
 * and run one at a time. For each we send {"code", "marker", ...}; the
 * kernel says {"started"} as the cell begins, and at its end writes the
 * marker to both its stdout and stderr, then sends its last frame:
 * {"images"} (KERNEL_MCP) or {"done"} (KERNEL_E2B, after the cell's
 * {"result"} and {"error"} frames). A cell is over when its last frame
 * and both markers are in, and what came before a marker is that cell's
 * output. Output arriving between cells (background jobs) goes to the
 * next cell.
 *
 * A buffered cell (KERNEL_MCP) gets its output, capped at --output-cap a
 * stream, when it is over; a streamed one (KERNEL_E2B) gets it as it
 * comes, with its frames, and its caller bounds what it keeps.
 */
#include "agent.h"
#include "kernel_internal.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "log.h"
#include "spawn.h"
#include "xmalloc.h"

void
kernel_finish_cell(struct kernel *k, enum kernel_end end, const char *fmt,
    ...)
{
	struct kernel_cell *cell = k->running;
	struct kernel_result *res = xcalloc(1, sizeof *res);
	size_t cap = k->agent->cfg.output_cap;
	va_list ap;

	k->running = NULL;
	if (cell->paused)
		kernel_set_reading(k, 1);
	res->end = end;
	res->out = kernel_stream_take(&k->out[1], "stdout", cap);
	res->errout = kernel_stream_take(&k->out[2], "stderr", cap);
	if (k->next_note != NULL && !cell->abandoned) {
		kernel_stream_note(res->errout, k->next_note);
		free(k->next_note);
		k->next_note = NULL;
	}
	if (fmt != NULL) {
		char *text, *bracketed;

		va_start(ap, fmt);
		text = xvasprintf(fmt, ap);
		va_end(ap);
		if (cell->cb != NULL) {
			res->note = text;
		} else {
			bracketed = xasprintf("[%s]", text);
			kernel_stream_note(res->errout, bracketed);
			free(bracketed);
			free(text);
		}
	}
	res->images = cell->images != NULL ? cell->images : json_array();
	cell->images = NULL;
	json_decref(cell->code);
	json_decref(cell->env);
	if (cell->abandoned)
		kernel_result_free(res);
	else
		cell->done(res, cell->arg);
	free(cell);
}

void
kernel_tell_next(struct kernel *k, const char *why)
{
	free(k->next_note);
	k->next_note = xasprintf("[the IPython kernel %s: this cell ran in a "
	    "fresh kernel, without the earlier state (variables, imports)]",
	    why);
}

void
kernel_check_done(struct kernel *k)
{
	struct kernel_cell *cell = k->running;

	if (cell == NULL || !cell->answered || !k->out[1].marked ||
	    !k->out[2].marked)
		return;
	evtimer_del(k->timer);
	k->state = KERNEL_IDLE;
	if (cell->timed_out)
		kernel_finish_cell(k, KERNEL_END_DONE, "the cell ran past its "
		    "%g-second timeout and was interrupted (KeyboardInterrupt); "
		    "the kernel kept its state", cell->timeout);
	else
		kernel_finish_cell(k, KERNEL_END_DONE, NULL);
	kernel_kick(k);
}

void
kernel_fail_queue(struct kernel *k, const struct error *err)
{
	struct kernel_cell *cell;

	while ((cell = TAILQ_FIRST(&k->queue)) != NULL) {
		struct kernel_result *res = xcalloc(1, sizeof *res);

		TAILQ_REMOVE(&k->queue, cell, entry);
		res->err = *err;
		json_decref(cell->code);
		json_decref(cell->env);
		cell->done(res, cell->arg);
		free(cell);
	}
}

void
kernel_cell_output(struct kernel *k, int stream)
{
	struct kernel_cell *cell = k->running;
	struct evbuffer *buf = k->out[stream].buf;

	/* Not before its start: its execution count comes first. */
	if (cell != NULL && cell->cb != NULL && cell->started &&
	    !cell->abandoned && evbuffer_get_length(buf) > 0)
		cell->cb->output(stream, buf, cell->arg);
}

/* The images of a cell's answer, rebuilt field by field: the frame comes
 * from code the user controls. NULL if it is not a list of images, or of
 * more than the kernel may send. */
static json_t *
clean_images(json_t *list)
{
	json_t *clean, *item;
	size_t i;

	if (!json_is_array(list) || json_array_size(list) > KERNEL_IMAGES_MAX)
		return NULL;
	clean = json_array();
	json_array_foreach(list, i, item) {
		json_t *data = json_object_get(item, "data");
		json_t *mime = json_object_get(item, "mimeType");

		if (!json_is_string(data) || !json_is_string(mime)) {
			json_decref(clean);
			return NULL;
		}
		json_array_append_new(clean, json_pack("{s:s, s:O, s:O}",
		    "type", "image", "data", data, "mimeType", mime));
	}
	return clean;
}

/* The last frame of a buffered cell: its images. */
static void
images_frame(struct kernel *k, struct kernel_cell *cell, json_t *msg)
{
	json_t *images = clean_images(json_object_get(msg, "images"));

	if (images == NULL) {
		kernel_lose(k, "sent images that are not a list of at most 64 "
		    "images on fd 3");
		return;
	}
	cell->images = images;
	cell->answered = 1;
	kernel_check_done(k);
}

/* A frame of a streamed cell, for its caller to check (an abandoned
 * cell's are dropped). */
static void
stream_frame(struct kernel *k, struct kernel_cell *cell, json_t *msg)
{
	const char *why = NULL;

	if (json_is_true(json_object_get(msg, "done"))) {
		cell->answered = 1;
		kernel_check_done(k);
	} else if (!cell->abandoned &&
	    cell->cb->frame(msg, &why, cell->arg) < 0) {
		kernel_lose(k, why);
	}
}

void
kernel_cell_frame(struct kernel *k, json_t *msg)
{
	struct kernel_cell *cell = k->running;
	int started = json_is_true(json_object_get(msg, "started"));

	if (k->state != KERNEL_BUSY || cell->answered ||
	    started == cell->started) {
		kernel_lose(k, "sent a frame out of turn");
		return;
	}
	if (started) {
		cell->started = 1;
		if (cell->interrupt)
			spawn_kill(k->sp, SIGINT);
		if (cell->cb != NULL) {
			stream_frame(k, cell, msg);
			/* Output that came between cells is this one's. */
			kernel_cell_output(k, 1);
			kernel_cell_output(k, 2);
		}
	} else if (cell->cb != NULL) {
		stream_frame(k, cell, msg);
	} else if (json_object_get(msg, "images") != NULL) {
		images_frame(k, cell, msg);
	} else {
		kernel_lose(k, "sent a frame out of turn");
	}
}

static void
write_frame(struct kernel *k, json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	size_t len = strlen(text);
	unsigned char head[4];

	head[0] = (unsigned char)(len >> 24);
	head[1] = (unsigned char)(len >> 16);
	head[2] = (unsigned char)(len >> 8);
	head[3] = (unsigned char)len;
	bufferevent_write(k->ctl, head, sizeof head);
	bufferevent_write(k->ctl, text, len);
	free(text);
}

void
kernel_kick(struct kernel *k)
{
	struct kernel_cell *cell;
	json_t *msg;

	if (k->state != KERNEL_IDLE || TAILQ_EMPTY(&k->queue))
		return;
	cell = TAILQ_FIRST(&k->queue);
	TAILQ_REMOVE(&k->queue, cell, entry);
	k->running = cell;
	k->state = KERNEL_BUSY;
	if (k->mode == KERNEL_E2B)
		msg = json_pack("{s:O, s:s, s:O?, s:{s:i, s:i}}", "code",
		    cell->code, "marker", k->marker, "env", cell->env,
		    "limits", "bytes", KERNEL_STREAM_FRAME_MAX - KERNEL_FRAME_SLACK,
		    "values", KERNEL_STREAM_FRAME_VALUES - 64);
	else
		msg = json_pack("{s:O, s:s, s:{s:i, s:i}}", "code", cell->code,
		    "marker", k->marker, "images_limit", "count",
		    KERNEL_IMAGES_MAX, "bytes",
		    KERNEL_STREAM_FRAME_MAX - KERNEL_FRAME_SLACK);
	write_frame(k, msg);
	json_decref(msg);
	if (cell->timeout > 0)
		kernel_arm(k, TIMER_CELL, cell->timeout);
}

static struct kernel_cell *
queue_cell(struct kernel *k, json_t *code, struct error *err)
{
	struct kernel_cell *cell;

	if (k->state == KERNEL_STOPPED && kernel_start(k, NULL, NULL, err) < 0)
		return NULL;
	cell = xcalloc(1, sizeof *cell);
	cell->k = k;
	cell->code = json_incref(code);
	TAILQ_INSERT_TAIL(&k->queue, cell, entry);
	return cell;
}

struct kernel_cell *
kernel_run(struct kernel *k, json_t *code, double timeout,
    kernel_done_cb done, void *arg, struct error *err)
{
	struct kernel_cell *cell = queue_cell(k, code, err);

	if (cell == NULL)
		return NULL;
	cell->timeout = timeout;
	cell->done = done;
	cell->arg = arg;
	kernel_kick(k);
	return cell;
}

struct kernel_cell *
kernel_run_streamed(struct kernel *k, json_t *code, json_t *env,
    const struct kernel_stream_callbacks *cb, void *arg, struct error *err)
{
	struct kernel_cell *cell = queue_cell(k, code, err);

	if (cell == NULL)
		return NULL;
	cell->env = json_incref(env);
	cell->done = cb->done;
	cell->cb = cb;
	cell->arg = arg;
	kernel_kick(k);
	return cell;
}

void
kernel_cell_pause(struct kernel_cell *cell, int pause)
{
	if (cell != cell->k->running || cell->paused == pause)
		return;
	cell->paused = pause;
	kernel_set_reading(cell->k, !pause);
}

void
kernel_abandon(struct kernel_cell *cell)
{
	struct kernel *k = cell->k;

	if (cell != k->running) {
		TAILQ_REMOVE(&k->queue, cell, entry);
		json_decref(cell->code);
		json_decref(cell->env);
		free(cell);
		return;
	}
	cell->abandoned = 1;
	kernel_cell_pause(cell, 0);
	if (!cell->interrupt) {
		log_info("the client of a running IPython cell left; "
		    "interrupting it");
		kernel_interrupt(k);
	}
}

void
kernel_result_free(struct kernel_result *res)
{
	if (res == NULL)
		return;
	if (res->out != NULL)
		evbuffer_free(res->out);
	if (res->errout != NULL)
		evbuffer_free(res->errout);
	json_decref(res->images);
	free(res->note);
	free(res);
}
