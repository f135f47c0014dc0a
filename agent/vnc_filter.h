/*
 * A view-only viewer's RFB stream (client to server), filtered on its way
 * to the VNC server: what only asks for pictures passes, what would drive
 * the desktop (keys, the pointer, cut text, a resize, xvp's reboot) is
 * dropped, and anything else ends the viewer, since its length cannot be
 * known and the server must never read from the middle of a message.
 *
 * The filter follows the stream from its first byte: the version (3.7 or
 * 3.8 only, where the client names the security type), the security type
 * (None only: the desktop's server sits on a socket of the user's, and
 * the viewer was let in by the agent's token), then ClientInit, whose
 * shared flag is set (a view-only viewer never ends the others'
 * sessions), then messages. It holds at most one message head (20 bytes);
 * message bodies go through, or are skipped, as they come.
 */
#ifndef VNC_FILTER_H
#define VNC_FILTER_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;

/* The longest message head the filter reads before deciding. */
#define VNC_FILTER_HEAD_MAX 20

/* One viewer's stream; zeroed to start. */
struct vnc_filter {
	int phase;
	unsigned char head[VNC_FILTER_HEAD_MAX];
	size_t have;			/* bytes of head read */
	uint64_t body;			/* bytes of the body still to come */
	int pass;			/* the body goes to the server */
	char why[96];			/* why the stream was refused */
};

/* Move what of in may reach the server to out, drop the rest; in is left
 * empty. -1 when the stream breaks the rules (f->why says how). */
int vnc_filter_run(struct vnc_filter *f, struct evbuffer *in,
    struct evbuffer *out);

#endif
