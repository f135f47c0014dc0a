/*
 * The sandbox's desktop (--desktop FILE): an X display served by a VNC
 * server, and the programs on it (a window manager, ...), started in order,
 * watched and restarted by the agent as PID 1, and the one connection the
 * agent keeps to that display (vnc.h) for the computer tool.
 *
 * FILE is JSON:
 *   {"display": ":1",                        the DISPLAY commands get
 *    "vnc_socket": "/run/desktop/vnc.sock",  where the VNC server listens
 *    "server": PROGRAM,                      the X/VNC server, started first
 *    "programs": [PROGRAM, ...],             started once the display answers
 *    "novnc": "/opt/novnc",                  noVNC's files, for the web
 *                                            viewer at /vnc/ (optional)
 *    "draw_timeout": 30}                     seconds the programs have to
 *                                            draw on the display before
 *                                            /healthz calls it a fault
 * PROGRAM is {"command": ["/abs/path", "arg", ...], "name": "for logs",
 * "user": "UID:GID" (default: the --run-as user; never root),
 * "env": {"NAME": "value"} (added to the environment commands get)}.
 */
#ifndef DESKTOP_H
#define DESKTOP_H

#include "error.h"

struct agent;
struct desktop;
struct vnc;

/* Read the file and put DISPLAY in our environment, before the
 * environment of commands is made. -1 with err (400) for a bad file. */
int desktop_setup(struct agent *agent, const char *path, struct error *err);
/* Start the server, then the programs (the event loop exists). */
void desktop_start(struct agent *agent);
/* SIGTERM: no more restarts (the programs get the agent's SIGTERM). */
void desktop_shutdown(struct agent *agent);
/* After the loop ended and the tool workers are gone. */
void desktop_free(struct agent *agent);

/* The display answers (loop thread): viewers wait for it. */
int desktop_ready(const struct desktop *d);
/* Loop thread: why the desktop is not yet usable (its display does not
 * answer, or nothing is drawn on it yet), or NULL once it is. /healthz
 * waits for it. */
const char *desktop_unhealthy(const struct desktop *d);
/* The shared connection to the display; lives as long as d. */
struct vnc *desktop_vnc(struct desktop *d);
const char *desktop_vnc_socket(const struct desktop *d);
/* The directory of noVNC's files, or NULL. */
const char *desktop_novnc(const struct desktop *d);
/* Any thread: the display does not answer. A server waiting out its
 * back-off starts now; a running one that no longer answers is
 * restarted. */
void desktop_kick(struct desktop *d);
/* Any thread: the agent is shutting down. */
int desktop_stopping(const struct desktop *d);

#endif
