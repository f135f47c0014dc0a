/*
 * The channel between the agent (vnc.c) and its VNC helper (vnc_helper.c),
 * a stream socket pair: one request at a time, each answered by one reply
 * before the next is sent. Both ends are the same binary, so the structs
 * go as they are in memory.
 *
 * The helper runs as the sandbox's user, so the agent believes nothing of
 * a reply it has not checked: its status, sizes and lengths are bounded
 * (VNC_MAX_SIDE, VNC_MAX_PIXELS, VNC_WIRE_MSG_MAX) and every read has a
 * deadline.
 */
#ifndef VNC_WIRE_H
#define VNC_WIRE_H

#include <stdint.h>

/* The helper's end of the channel, in the helper. */
#define VNC_WIRE_FD 3

enum vnc_wire_op {
	VNC_WIRE_BEGIN = 1,	/* read what the server sent; connect if not */
	VNC_WIRE_RECONNECT,	/* drop the connection, connect anew */
	VNC_WIRE_POINTER,	/* x, y, buttons */
	VNC_WIRE_KEYS,		/* nkeys struct vnc_wire_key follow */
	VNC_WIRE_CAPTURE,	/* the reply carries the screen, RGBX */
	VNC_WIRE_POSITION,	/* the reply's x, y: the pointer's place */
};

struct vnc_wire_request {
	uint32_t op;
	int32_t x, y, buttons;
	uint32_t nkeys;
};

struct vnc_wire_key {
	uint32_t keysym;
	uint32_t down;
};

/* Keys in one request, at most. */
#define VNC_WIRE_KEYS_MAX 1024

/* status 0: done; width and height are the screen's (connected), x, y
 * the pointer's (VNC_WIRE_POSITION), and len bytes of pixels follow
 * (VNC_WIRE_CAPTURE, width * height * 4), else none. Otherwise the HTTP
 * status of the failure (503, 504) and len bytes of its message; the
 * helper has dropped its connection to the display. */
struct vnc_wire_reply {
	int32_t status;
	int32_t width, height;
	int32_t x, y;
	uint32_t len;
};

#define VNC_WIRE_MSG_MAX 512

#endif
