/*
 * The agent's one connection to its sandbox's display: a VNC client
 * (libvncclient) on the VNC server's unix socket for the screen, the
 * pointer and the keyboard, and an X connection for the one thing VNC does
 * not tell, where the pointer is (vnc_x11.c).
 *
 * Any thread may use it; a session (vnc_begin .. vnc_end) holds its mutex,
 * so the events of one action reach the display together. The socket is
 * connected with the calling thread's file-system ids (run_as_files): the
 * socket's directory belongs to the sandbox's user, and whatever it names
 * is reached only as that user could.
 *
 * The server is the user's (it runs as them), so everything it sends is
 * untrusted: its screen size is bounded, only raw and copy-rect encodings
 * are asked for (libvncclient is built without the decoders of the
 * compressed ones), every read has a timeout and every write waits for
 * room with one.
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

/* socket_path: the VNC server's unix socket; display: ":N", whose X
 * socket answers pointer queries. Freed by vnc_free. */
struct vnc *vnc_new(const char *socket_path, const char *display);
void vnc_free(struct vnc *v);

/* Take the connection, connecting first if it is not (or no longer)
 * there. -1 with err (503) when the server does not answer; the mutex is
 * then not held. */
int vnc_begin(struct vnc *v, struct error *err);
void vnc_end(struct vnc *v);
/* Drop the connection (a new server is starting), so that the next
 * session connects anew; then connect. -1 with err when that fails. */
int vnc_reconnect(struct vnc *v, struct error *err);

/* In a session. A failure (-1, err 503) drops the connection. */
void vnc_size(struct vnc *v, int *width, int *height);
int vnc_pointer(struct vnc *v, int x, int y, int buttons, struct error *err);
/* keysyms[i] pressed (down) or released, in that order. */
int vnc_keys(struct vnc *v, const uint32_t *keysyms, const int *down,
    size_t n, struct error *err);
/* The whole screen as it is now (a full update asked for and read). */
int vnc_capture(struct vnc *v, struct vnc_image *img, struct error *err);
/* Where the pointer is, from the X server. */
int vnc_pointer_position(struct vnc *v, int *x, int *y, struct error *err);

/* vnc_x11.c: the X side, used by the above under the same mutex. */
struct vnc_x11;
struct vnc_x11 *vnc_x11_new(const char *display);
void vnc_x11_free(struct vnc_x11 *x);
void vnc_x11_close(struct vnc_x11 *x);
int vnc_x11_query_pointer(struct vnc_x11 *x, int *px, int *py,
    struct error *err);

#endif
