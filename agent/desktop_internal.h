/* What desktop.c and desktop_config.c share. */
#ifndef DESKTOP_INTERNAL_H
#define DESKTOP_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

#include "desktop.h"
#include "log.h"

struct event;
struct spawn;
struct work_queue;

/* Longest line of a program's output that goes to our log. */
#define DESKTOP_LINE_MAX 256
/* Seconds from a display's answer until nothing drawn on it is a fault
 * (the desktop file's "draw_timeout"). */
#define DESKTOP_DRAW_TIMEOUT 30.0

/* One program of the desktop; owned by its desktop. */
struct desktop_program {
	struct desktop *d;
	char *name;
	char **argv;			/* NULL-terminated */
	json_t *env;			/* the file's additions, or NULL */
	char **envp;			/* made at start */
	uid_t uid;
	gid_t gid;
	int set_ids;
	struct spawn *sp;		/* NULL while not running */
	unsigned generation;		/* starts so far */
	double started;			/* monotonic seconds */
	double backoff;			/* seconds before the next restart */
	struct event *timer;		/* the restart, after the back-off */
	struct log_rate rate;		/* its output in our log */
	char line[DESKTOP_LINE_MAX];
	size_t linelen;
};

/* One per agent with --desktop; freed by desktop_free. */
struct desktop {
	struct agent *agent;
	char *display;
	char *vnc_socket;
	char *novnc;			/* noVNC's files, or NULL */
	double draw_timeout;		/* seconds */
	struct desktop_program *programs;	/* [0] is the server */
	size_t nprograms;
	struct vnc *vnc;
	/* The display's VNC client, out of PID 1 (vnc_helper.c): our own
	 * binary, as the server's user, supervised as the programs are. */
	struct desktop_program helper;
	int self_fd;			/* our binary, which the helper runs */
	struct work_queue *probes;	/* connects to the display, as the user */
	struct event *probe_timer;
	int probing;			/* a probe is out */
	unsigned probe_generation;	/* of the server it probes */
	int probe_ok;
	int probe_drawing;		/* the probe looks at the screen */
	int probe_drawn;		/* what it saw: more than one colour */
	struct error probe_err;
	int ready;			/* the server answered since it started */
	double ready_at;		/* monotonic seconds */
	int drawn;			/* since then, something was drawn */
	int draw_late;			/* nothing drawn within draw_timeout */
	char late[96];			/* /healthz's answer then */
	atomic_int stopping;
	int kick_fd;			/* eventfd: desktop_kick from a worker */
	struct event *kick_ev;
};

/* desktop_config.c: fill d from the file at path. */
int desktop_config_load(struct agent *agent, struct desktop *d,
    const char *path, struct error *err);

#endif
