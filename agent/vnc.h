/*
 * The agent's one connection to its sandbox's display, for the computer
 * tool: the screen, the pointer and the keyboard over VNC, and where the
 * pointer is from X (VNC does not tell).
 *
 * Both servers are the user's (Xvnc runs as them), so the clients that
 * parse what they send, libvncclient and libxcb, do not run in the agent:
 * they run in the VNC helper (vnc_helper.c), the agent's own binary run
 * as the desktop's user under the commands' seccomp filter, which the
 * desktop starts and restarts (desktop.c). This side speaks to it over a
 * socket pair (vnc_wire.h), believes no reply it has not checked, and
 * gives the helper up when a reply is wrong or late.
 *
 * Any thread may use it; a session (vnc_begin .. vnc_end) holds its mutex,
 * so the events of one action reach the display together.
 */
#ifndef VNC_H
#define VNC_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct vnc;

/* Largest screen accepted from a server, each side and in pixels. */
#define VNC_MAX_SIDE 8192
#define VNC_MAX_PIXELS (4096 * 4096)

/* A copy of the screen: RGBX bytes, 4 per pixel, rows top down. Owned by
 * the caller: free(pixels). */
struct vnc_image {
	int width, height;
	unsigned char *pixels;
};

/* Freed by vnc_free. */
struct vnc *vnc_new(void);
void vnc_free(struct vnc *v);
/* Loop thread: a new helper's end of the channel, taken (v closes it);
 * the next session speaks to that helper. Never waits for a session. */
void vnc_attach(struct vnc *v, int fd);
/* Any thread: the helper was given up (a reply wrong or late), so its
 * process is to be ended; the next vnc_attach clears it. */
int vnc_helper_lost(struct vnc *v);

/* Take the connection, connecting first if it is not (or no longer)
 * there. -1 with err when that fails: 503 the display does not answer,
 * 504 it is too slow, 502 the helper is not running or was given up;
 * the mutex is then not held. */
int vnc_begin(struct vnc *v, struct error *err);
void vnc_end(struct vnc *v);
/* Drop the connection (a new server is starting), so that the next
 * session connects anew; then connect. -1 with err when that fails. */
int vnc_reconnect(struct vnc *v, struct error *err);

/* In a session. A failure (-1, err) drops the connection. */
void vnc_size(struct vnc *v, int *width, int *height);
int vnc_pointer(struct vnc *v, int x, int y, int buttons, struct error *err);
/* keysyms[i] pressed (down) or released, in that order. */
int vnc_keys(struct vnc *v, const uint32_t *keysyms, const int *down,
    size_t n, struct error *err);
/* The whole screen as it is now (a full update asked for and read). */
int vnc_capture(struct vnc *v, struct vnc_image *img, struct error *err);
/* Where the pointer is, from the X server. */
int vnc_pointer_position(struct vnc *v, int *x, int *y, struct error *err);

/* vnc_helper.c: sandbox-agent --vnc-helper SOCKET DISPLAY LOG_LEVEL,
 * its channel on VNC_WIRE_FD; the exit status. */
int vnc_helper_main(int argc, char **argv);

#endif
