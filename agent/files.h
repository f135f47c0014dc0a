/*
 * What the workspace file routes (files.c, files_batch.c, entries.c) share
 * besides files_ops.h: files that appear only once complete, and the disk
 * writer thread. Every path here is relative to the workspace root and
 * already normalised by path_normalize; every open goes through path.h
 * beneath the root.
 */
#ifndef FILES_H
#define FILES_H

#include <stddef.h>
#include <sys/stat.h>

#include <jansson.h>

#include "error.h"

struct agent;
struct event_base;

/* staged.c: a file being written that appears in the workspace only once
 * complete, so a failed or aborted write leaves nothing behind. Owned by
 * its route, which ends it with staged_commit or staged_discard. */
struct staged_file {
	int fd;		/* read-write; -1 once closed */
	int dirfd;	/* the directory it lives in, borrowed: the caller
			 * keeps it open as long as the staged file */
	char *name;	/* its hidden name there; NULL while anonymous */
};

/* A private directory: root's alone (mode 0700), made under a hidden name
 * and used only through its descriptor, so that files staged in it by name
 * cannot be swapped by the user who owns the workspace. */
struct staged_dir {
	int fd;
	int parentfd;	/* borrowed, as staged_file's dirfd */
	char *name;
	dev_t dev;
	ino_t ino;
};

void staged_init(struct staged_file *f);
/* A new empty file in dirfd: anonymous (O_TMPFILE) unless named or the
 * filesystem cannot, else under a hidden name. Only a file in a private
 * directory may be named on purpose: its descriptor may then be closed
 * and the name used again. rel (the target) names it in error messages. */
int staged_create(struct staged_file *f, int dirfd, int named,
    const char *rel, struct error *err);
/* Close the descriptor but keep the file (it must have a name). */
void staged_close(struct staged_file *f);
/* Whether a rename between directories a and b can work (one mount). */
int staged_same_mount(int a, int b);
/* Copy f into a new staged file in dirfd (on another mount); f is that
 * one afterwards. */
int staged_copy_to(struct staged_file *f, int dirfd, const char *rel,
    struct error *err);
/* Give it the owner and mode of the regular file it replaces (else to the
 * command user), through its descriptor, then rename it over name in
 * dirfd: the atomic replace. 409 when name is a directory, or when name
 * does not hold our file afterwards (another process renamed something
 * over it). *st: what landed, for the entry info. The staged file is done
 * with afterwards (staged_discard it). */
int staged_commit(struct staged_file *f, struct agent *agent, int dirfd,
    const char *name, const char *rel, struct stat *st, struct error *err);
/* Remove what is left of it and close it. */
void staged_discard(struct staged_file *f);
void staged_dir_init(struct staged_dir *d);
/* A new private directory in parentfd. */
int staged_dir_create(struct staged_dir *d, int parentfd, struct error *err);
/* Remove it, empty, and close it. */
void staged_dir_remove(struct staged_dir *d);
/* Whether name (a last component) is one a staged file goes by while
 * hidden: ".sandbox-upload-" and 16 lowercase hex digits. */
int staged_is_hidden_name(const char *name);
/* Remove, in the background, the hidden files and private directories
 * anywhere beneath the workspace root that are older than this call: an
 * agent that died mid-upload left them. Once at start, after the loop
 * exists. */
void staged_sweep_start(struct agent *agent);
/* After the loop ended: stop a sweep still under way. */
void staged_sweep_shutdown(void);

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
