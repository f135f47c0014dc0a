/*
 * The view-only filter of an RFB client's stream (see vnc_filter.h), after
 * RFC 6143 and the community's extensions (rfbproto).
 */
#include "vnc_filter.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

enum {
	PHASE_VERSION, PHASE_SECURITY, PHASE_CLIENT_INIT, PHASE_MESSAGES,
	PHASE_BROKEN,
};

#define SECURITY_NONE 1

/* How a message's body length follows from its head. */
enum body {
	BODY_NONE,
	BODY_ENCODINGS,		/* u16 count at 2, 4 bytes each */
	BODY_CUT_TEXT,		/* s32 length at 4; negative: extended */
	BODY_FENCE,		/* u8 length at 8 */
	BODY_SCREENS,		/* u8 count at 6, 16 bytes each */
};

/* The client messages a view-only viewer may send: head lengths, and
 * whether they reach the server. */
static const struct message {
	uint8_t type;
	uint8_t head;
	uint8_t pass;
	uint8_t body;
} messages[] = {
	{ 0, 20, 1, BODY_NONE },	/* SetPixelFormat */
	{ 2, 4, 1, BODY_ENCODINGS },	/* SetEncodings */
	{ 3, 10, 1, BODY_NONE },	/* FramebufferUpdateRequest */
	{ 4, 8, 0, BODY_NONE },		/* KeyEvent */
	{ 5, 6, 0, BODY_NONE },		/* PointerEvent */
	{ 6, 8, 0, BODY_CUT_TEXT },	/* ClientCutText */
	{ 150, 10, 1, BODY_NONE },	/* EnableContinuousUpdates */
	{ 248, 9, 1, BODY_FENCE },	/* ClientFence */
	{ 250, 4, 0, BODY_NONE },	/* xvp: shutdown, reboot, reset */
	{ 251, 8, 0, BODY_SCREENS },	/* SetDesktopSize */
};

static const struct message *
find(uint8_t type)
{
	for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++) {
		if (messages[i].type == type)
			return &messages[i];
	}
	return NULL;
}

static int __attribute__((format(printf, 2, 3)))
broken(struct vnc_filter *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(f->why, sizeof f->why, fmt, ap);
	va_end(ap);
	f->phase = PHASE_BROKEN;
	return -1;
}

/* Bytes of head wanted in the current phase; -1: an unknown message. */
static int
head_length(struct vnc_filter *f)
{
	const struct message *m;

	switch (f->phase) {
	case PHASE_VERSION:
		return 12;
	case PHASE_SECURITY:
	case PHASE_CLIENT_INIT:
		return 1;
	default:
		if (f->have == 0)
			return 1;
		if ((m = find(f->head[0])) == NULL)
			return broken(f, "a view-only viewer may not send "
			    "message type %u", f->head[0]);
		return m->head;
	}
}

static uint64_t
body_length(const unsigned char *h, int body)
{
	int32_t len;

	switch (body) {
	case BODY_ENCODINGS:
		return 4 * (uint64_t)(h[2] << 8 | h[3]);
	case BODY_CUT_TEXT:
		len = (int32_t)((uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 |
		    (uint32_t)h[6] << 8 | h[7]);
		return len < 0 ? (uint64_t)-(int64_t)len : (uint64_t)len;
	case BODY_FENCE:
		return h[8];
	case BODY_SCREENS:
		return 16 * (uint64_t)h[6];
	default:
		return 0;
	}
}

/* The head is whole: pass it on or not, and move to what follows. */
static int
decide(struct vnc_filter *f, struct evbuffer *out)
{
	const struct message *m;

	switch (f->phase) {
	case PHASE_VERSION:
		if (memcmp(f->head, "RFB 003.008\n", 12) != 0 &&
		    memcmp(f->head, "RFB 003.007\n", 12) != 0)
			return broken(f, "a view-only viewer must speak RFB "
			    "3.7 or 3.8");
		f->phase = PHASE_SECURITY;
		break;
	case PHASE_SECURITY:
		if (f->head[0] != SECURITY_NONE)
			return broken(f, "a view-only viewer must choose "
			    "security type None, not %u", f->head[0]);
		f->phase = PHASE_CLIENT_INIT;
		break;
	case PHASE_CLIENT_INIT:
		f->head[0] = 1;		/* shared */
		f->phase = PHASE_MESSAGES;
		break;
	default:
		m = find(f->head[0]);
		f->body = body_length(f->head, m->body);
		f->pass = m->pass;
		if (!m->pass)
			return 0;
		break;
	}
	evbuffer_add(out, f->head, f->have);
	return 0;
}

int
vnc_filter_run(struct vnc_filter *f, struct evbuffer *in,
    struct evbuffer *out)
{
	size_t n, take;
	int want;

	while (f->phase != PHASE_BROKEN && (n = evbuffer_get_length(in)) > 0) {
		if (f->body > 0) {
			take = n < f->body ? n : (size_t)f->body;
			if (f->pass)
				evbuffer_remove_buffer(in, out, take);
			else
				evbuffer_drain(in, take);
			f->body -= take;
			continue;
		}
		if ((want = head_length(f)) < 0)
			break;
		take = (size_t)want - f->have;
		if (take > n)
			take = n;
		evbuffer_remove(in, f->head + f->have, take);
		f->have += take;
		/* A message's type comes first, then the rest of its head. */
		if (f->have < (size_t)want ||
		    (f->phase == PHASE_MESSAGES && f->have == 1))
			continue;
		if (decide(f, out) < 0)
			break;
		f->have = 0;
	}
	if (f->phase == PHASE_BROKEN) {
		evbuffer_drain(in, evbuffer_get_length(in));
		return -1;
	}
	return 0;
}
