/*
 * The disk writer of the workspace upload routes (files.c, files_batch.c):
 * writes to files on a thread of its own, so that a slow disk holds back
 * only the upload that waits for it (by pausing its socket), never the
 * event loop. Owned by one request. A descriptor it may still be writing
 * to is handed to it with files_writer_close before files_writer_free,
 * never closed by the caller.
 */
#ifndef FILES_WRITER_H
#define FILES_WRITER_H

#include <stddef.h>

#include "error.h"

struct event_base;
struct files_writer;

/* cb runs on the loop when the queue went down to what files_writer_write
 * or files_writer_flush waited for, or a write failed. */
struct files_writer *files_writer_new(struct event_base *base,
    void (*cb)(void *arg), void *arg);
/* Queue data for fd (at its current offset). 1 when the queue is over its
 * high mark: pause the producer until cb. -1 with err (503) when the
 * writer's thread cannot start (the sandbox at its limit of processes). */
int files_writer_write(struct files_writer *w, int fd, const void *data,
    size_t len, struct error *err);
/* Queue closing fd, after the data queued for it. */
void files_writer_close(struct files_writer *w, int fd);
/* 1 when everything queued is written (or a write failed); else cb runs
 * once it is. */
int files_writer_flush(struct files_writer *w);
/* errno of the first failed write, or 0. */
int files_writer_error(struct files_writer *w);
/* Never waits: the thread finishes the write in progress, drops what is
 * still queued (doing its close operations) and frees itself. */
void files_writer_free(struct files_writer *w);

#endif
