/*
 * RFC 6455 WebSockets, the server's side, for the desktop's relay
 * (vnc_relay.c): the checks and the answer of the opening handshake, and
 * a frame codec over libevent buffers.
 *
 * Why our own codec: Debian 12 ships wslay without a static library and
 * its source package cannot be had here, and libwebsockets brings its
 * own event loop and TLS stack. Frames are a small format, and reading
 * them needs no buffer of a whole frame or message here: data is
 * unmasked and passed on piece by piece as it comes, so a frame's size
 * costs no memory (it is still bounded, WEBSOCKET_MAX_FRAME).
 *
 * What a client sends is checked as the RFC says a server must: frames
 * masked, no reserved bits (no extension is agreed), known opcodes only,
 * lengths in their shortest form, control frames unfragmented and at most
 * 125 bytes, continuations only inside a fragmented message, close codes
 * and reasons well formed. Text frames are refused (the relay speaks the
 * "binary" subprotocol). A violation is an error with the close code to
 * answer it with.
 */
#ifndef WEBSOCKET_H
#define WEBSOCKET_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "http.h"

struct evbuffer;

#define WEBSOCKET_MAX_FRAME (4 * 1024 * 1024)
#define WEBSOCKET_ACCEPT_LEN 28		/* base64 of a SHA-1 */

enum {
	WEBSOCKET_CONTINUATION = 0x0,
	WEBSOCKET_TEXT = 0x1,
	WEBSOCKET_BINARY = 0x2,
	WEBSOCKET_CLOSE = 0x8,
	WEBSOCKET_PING = 0x9,
	WEBSOCKET_PONG = 0xa,
};

/* Close codes we send. */
#define WEBSOCKET_NORMAL 1000
#define WEBSOCKET_GOING_AWAY 1001
#define WEBSOCKET_PROTOCOL_ERROR 1002
#define WEBSOCKET_UNSUPPORTED 1003
#define WEBSOCKET_BAD_DATA 1007
#define WEBSOCKET_POLICY 1008
#define WEBSOCKET_TOO_BIG 1009
#define WEBSOCKET_INTERNAL 1011

/* Check req as an opening handshake. On success: accept holds the
 * Sec-WebSocket-Accept value, *binary whether the client offered the
 * "binary" subprotocol (it must be named in the answer). -1 with err
 * (400, or 426 for a version other than 13) otherwise. */
int websocket_handshake(struct http_request *req,
    char accept[WEBSOCKET_ACCEPT_LEN + 1], int *binary, struct error *err);

/* What websocket_read stopped at. */
enum websocket_event {
	WEBSOCKET_AGAIN,	/* input or room used up */
	WEBSOCKET_GOT_PING,	/* control payload in r->control */
	WEBSOCKET_GOT_PONG,
	WEBSOCKET_GOT_CLOSE,	/* r->close_code (0: none given) */
	WEBSOCKET_ERROR,	/* r->close_code to answer with, r->why */
};

/* The state of a client's frames; zero it, then set max_frame (0:
 * WEBSOCKET_MAX_FRAME). Part of its owner. */
struct websocket_reader {
	size_t max_frame;
	int state;			/* of the frame head */
	unsigned char head[14];
	size_t head_len, head_need;
	unsigned opcode;		/* of the frame being read */
	int fin;
	uint64_t left;			/* its payload bytes to come */
	unsigned char mask[4];
	unsigned mask_at;
	int in_message;			/* a fragmented message open */
	unsigned char control[125];	/* a control frame's payload */
	size_t control_len;
	unsigned close_code;
	const char *why;
};

/* Read frames from in: the payload of data frames, unmasked, is moved to
 * out, at most room bytes this call. Stops after each control frame (its
 * payload in r->control), at an error, or when in or room runs out. */
enum websocket_event websocket_read(struct websocket_reader *r,
    struct evbuffer *in, struct evbuffer *out, size_t room);

/* One unmasked frame, FIN set, to out: payload from data, or the first
 * len bytes moved from src (websocket_write_buffer). */
void websocket_write(struct evbuffer *out, unsigned opcode, const void *data,
    size_t len);
void websocket_write_buffer(struct evbuffer *out, unsigned opcode,
    struct evbuffer *src, size_t len);
/* A close frame with code and a reason (may be NULL). */
void websocket_write_close(struct evbuffer *out, unsigned code,
    const char *reason);

#endif
