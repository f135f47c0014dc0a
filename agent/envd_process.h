/*
 * The process table of process.Process, between envd_process.c (Start,
 * Connect, List, output) and envd_process_input.c (input, signals, PTY
 * size, StreamInput).
 */
#ifndef ENVD_PROCESS_H
#define ENVD_PROCESS_H

#include <stdint.h>
#include <sys/queue.h>

#include "envd.h"

struct event;
struct evbuffer;
struct envd_sub;

/* Bytes written to a process's stdin or pty when it can take them. */
struct envd_input {
	int fd;			/* -1: none, or closed */
	struct event *ev;
	struct evbuffer *buf;	/* waiting to be written */
	int close_after;	/* close once buf is written */
};

/* A process Start began: running, or exited and kept a while so that a
 * late Connect still learns how it ended. Owned by the table. */
struct envd_proc {
	LIST_ENTRY(envd_proc) entry;
	uint32_t pid;
	char *tag;			/* NULL: none */
	json_t *config;			/* ProcessConfig, as List shows it */
	struct spawn *sp;		/* NULL once exited */
	int pty;			/* the pty's master, or -1 */
	struct event *pty_ev;
	int pty_reading;
	struct envd_input in;		/* stdin, or the pty */
	LIST_HEAD(, envd_sub) subs;	/* streams of its output */
	size_t nsubs;
	int paused;			/* output not read: a stream lags */
	json_t *end;			/* the end event, once it exited */
	struct event *expire;		/* when an exited one is forgotten */
	/* Started through the shell template: the Start call, until its
	 * command runs (it has no pid and is not in the table before), and
	 * its directory, for the error if it cannot. */
	struct envd_call *starting;
	char *starting_dir;
};

/* The running process (or, with exited, also a kept one) the selector
 * object {"pid": N} or {"tag": "..."} names; NULL with err (404). */
struct envd_proc *envd_proc_find(json_t *selector, int exited,
    struct error *err);

/* envd_process_input.c: the methods, and what they share with Start. */
void envd_process_send_input(struct envd_call *call, json_t *msg);
int envd_process_stream_input(struct envd_call *call, json_t *msg,
    struct error *err);
void envd_process_close_stdin(struct envd_call *call, json_t *msg);
void envd_process_signal(struct envd_call *call, json_t *msg);
void envd_process_update(struct envd_call *call, json_t *msg);
/* Queue data for in; 0, or -1 with err when it cannot take it. */
int envd_input_write(struct envd_proc *p, struct envd_input *in,
    const char *data, size_t len, struct error *err);
/* No more input: closes once what is queued is written. */
void envd_input_close(struct envd_input *in);
void envd_input_free(struct envd_input *in);
/* A pty sized cols x rows: the master, and the slave through *slave,
 * made the user's; -1 with err. */
int envd_pty_open(const struct envd_user *u, uint32_t cols, uint32_t rows,
    int *slave, struct error *err);

#endif
