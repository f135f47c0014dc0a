/*
 * The disk writer thread the workspace upload routes (files.c,
 * files_batch.c) write through; files_ops.h and files_staged.h hold the
 * rest they share.
 */
#ifndef FILES_H
#define FILES_H

#include <stddef.h>
#include <sys/stat.h>

#include <jansson.h>

#include "error.h"

struct agent;
struct event_base;

/* disk_writer.c: writes to files on a thread of its own, so that a slow
 * disk holds back only the upload that waits for it (by pausing its
 * socket), never the event loop. Owned by one request. A descriptor it may
 * still be writing to is handed to it with disk_writer_close before
 * disk_writer_free, never closed by the caller. */
struct disk_writer;

/* cb runs on the loop when the queue went down to what disk_writer_write
 * or disk_writer_flush waited for, or a write failed. */
struct disk_writer *disk_writer_new(struct event_base *base,
    void (*cb)(void *arg), void *arg);
/* Queue data for fd (at its current offset). 1 when the queue is over its
 * high mark: pause the producer until cb. -1 with err (503) when the
 * writer's thread cannot start (the sandbox at its limit of processes). */
int disk_writer_write(struct disk_writer *w, int fd, const void *data,
    size_t len, struct error *err);
/* Queue closing fd, after the data queued for it. */
void disk_writer_close(struct disk_writer *w, int fd);
/* 1 when everything queued is written (or a write failed); else cb runs
 * once it is. */
int disk_writer_flush(struct disk_writer *w);
/* errno of the first failed write, or 0. */
int disk_writer_error(struct disk_writer *w);
/* Never waits: the thread finishes the write in progress, drops what is
 * still queued (doing its close operations) and frees itself. */
void disk_writer_free(struct disk_writer *w);

#endif
