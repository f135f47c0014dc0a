/*
 * The WebSocket handshake and frame codec (see websocket.h). The accept
 * value is SHA-1 and base64, from Nettle (its static library, a few KiB of
 * the agent): no hashing code of our own.
 */
#include "websocket.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <nettle/base64.h>
#include <nettle/sha1.h>

#include "utf8.h"

/* RFC 6455, section 1.3. */
#define WEBSOCKET_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
/* Payload bytes unmasked per step. */
#define UNMASK_STEP 16384
#define SHORTEST "a frame length not in its shortest form"

enum { READ_HEAD, READ_PAYLOAD };

/* Whether the comma-separated header value holds token (any case). */
static int
has_token(const char *value, const char *token)
{
	size_t tlen = strlen(token);

	while (value != NULL && *value != '\0') {
		size_t len;

		value += strspn(value, " \t,");
		len = strcspn(value, ",");
		while (len > 0 && (value[len - 1] == ' ' ||
		    value[len - 1] == '\t'))
			len--;
		if (len == tlen && strncasecmp(value, token, tlen) == 0)
			return 1;
		value += strcspn(value, ",");
	}
	return 0;
}

/* A Sec-WebSocket-Key is the base64 of 16 bytes. */
static int
key_valid(const char *key)
{
	struct base64_decode_ctx ctx;
	uint8_t raw[24];
	size_t n = sizeof raw;

	if (strlen(key) != 24)
		return 0;
	base64_decode_init(&ctx);
	return base64_decode_update(&ctx, &n, raw, 24, key) &&
	    base64_decode_final(&ctx) && n == 16;
}

int
websocket_handshake(struct http_request *req,
    char accept[WEBSOCKET_ACCEPT_LEN + 1], int *binary, struct error *err)
{
	const char *upgrade = http_request_header(req, "Upgrade");
	const char *connection = http_request_header(req, "Connection");
	const char *key = http_request_header(req, "Sec-WebSocket-Key");
	const char *version = http_request_header(req, "Sec-WebSocket-Version");
	const char *protocols = http_request_header(req,
	    "Sec-WebSocket-Protocol");
	struct sha1_ctx sha;
	uint8_t digest[SHA1_DIGEST_SIZE];

	if (!has_token(upgrade, "websocket") ||
	    !has_token(connection, "upgrade") ||
	    !http_request_is_upgrade(req)) {
		error_set(err, 400, "a WebSocket upgrade is expected here "
		    "(Connection: Upgrade, Upgrade: websocket, no body)");
		return -1;
	}
	if (version == NULL || strcmp(version, "13") != 0) {
		error_set(err, 426, "WebSocket version 13 is the one spoken "
		    "here");
		return -1;
	}
	if (key == NULL || !key_valid(key)) {
		error_set(err, 400, "Sec-WebSocket-Key must be the base64 of "
		    "16 bytes");
		return -1;
	}
	*binary = 0;
	if (protocols != NULL) {
		if (!has_token(protocols, "binary")) {
			error_set(err, 400, "the only WebSocket subprotocol "
			    "spoken here is \"binary\"");
			return -1;
		}
		*binary = 1;
	}
	sha1_init(&sha);
	sha1_update(&sha, strlen(key), (const uint8_t *)key);
	sha1_update(&sha, sizeof WEBSOCKET_GUID - 1,
	    (const uint8_t *)WEBSOCKET_GUID);
	sha1_digest(&sha, sizeof digest, digest);
	base64_encode_raw(accept, sizeof digest, digest);
	accept[WEBSOCKET_ACCEPT_LEN] = '\0';
	return 0;
}

static enum websocket_event
fail(struct websocket_reader *r, unsigned code, const char *why)
{
	r->close_code = code;
	r->why = why;
	return WEBSOCKET_ERROR;
}

/* The head is complete: check it and set up its payload. */
static enum websocket_event
head_done(struct websocket_reader *r)
{
	const unsigned char *h = r->head;
	size_t max = r->max_frame != 0 ? r->max_frame : WEBSOCKET_MAX_FRAME;
	unsigned len7 = h[1] & 0x7f;
	uint64_t len = len7;
	size_t at = 2;

	if (len7 == 126) {
		len = (uint64_t)h[2] << 8 | h[3];
		if (len < 126)
			return fail(r, WEBSOCKET_PROTOCOL_ERROR, SHORTEST);
		at = 4;
	} else if (len7 == 127) {
		len = 0;
		for (int i = 0; i < 8; i++)
			len = len << 8 | h[2 + i];
		if (len >> 63)
			return fail(r, WEBSOCKET_PROTOCOL_ERROR, "a frame "
			    "length with its top bit set");
		if (len < 65536)
			return fail(r, WEBSOCKET_PROTOCOL_ERROR, SHORTEST);
		at = 10;
	}
	memcpy(r->mask, h + at, 4);
	r->mask_at = 0;
	r->left = len;
	if (r->opcode & 0x8) {
		if (!r->fin)
			return fail(r, WEBSOCKET_PROTOCOL_ERROR, "a fragmented "
			    "control frame");
		if (len > sizeof r->control)
			return fail(r, WEBSOCKET_PROTOCOL_ERROR, "a control "
			    "frame over 125 bytes");
		r->control_len = 0;
	} else {
		if (len > max)
			return fail(r, WEBSOCKET_TOO_BIG, "a frame over the "
			    "relay's limit");
		r->in_message = !r->fin;
	}
	r->state = READ_PAYLOAD;
	return WEBSOCKET_AGAIN;
}

/* The first two bytes are in: what they allow, and the head's length. */
static enum websocket_event
head_start(struct websocket_reader *r)
{
	unsigned b0 = r->head[0], b1 = r->head[1];

	r->fin = (b0 & 0x80) != 0;
	r->opcode = b0 & 0x0f;
	if (b0 & 0x70)
		return fail(r, WEBSOCKET_PROTOCOL_ERROR, "reserved bits set "
		    "(no extension was agreed)");
	if (!(b1 & 0x80))
		return fail(r, WEBSOCKET_PROTOCOL_ERROR, "an unmasked frame "
		    "from a client");
	switch (r->opcode) {
	case WEBSOCKET_CONTINUATION:
		if (!r->in_message)
			return fail(r, WEBSOCKET_PROTOCOL_ERROR, "a "
			    "continuation frame outside a message");
		break;
	case WEBSOCKET_TEXT:
		return fail(r, WEBSOCKET_UNSUPPORTED, "a text frame (the relay "
		    "speaks binary)");
	case WEBSOCKET_BINARY:
		if (r->in_message)
			return fail(r, WEBSOCKET_PROTOCOL_ERROR, "a new "
			    "message inside a fragmented one");
		break;
	case WEBSOCKET_CLOSE:
	case WEBSOCKET_PING:
	case WEBSOCKET_PONG:
		break;
	default:
		return fail(r, WEBSOCKET_PROTOCOL_ERROR, "an unknown opcode");
	}
	r->head_need = 2 + 4 + ((b1 & 0x7f) == 126 ? 2 :
	    (b1 & 0x7f) == 127 ? 8 : 0);
	return WEBSOCKET_AGAIN;
}

static void
unmask(struct websocket_reader *r, unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] ^= r->mask[(r->mask_at + i) & 3];
	r->mask_at = (unsigned)((r->mask_at + n) & 3);
}

static int
close_code_valid(unsigned code)
{
	return (code >= 1000 && code <= 1003) ||
	    (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}

/* A control frame's payload is in. */
static enum websocket_event
control_done(struct websocket_reader *r)
{
	r->state = READ_HEAD;
	r->head_len = 0;
	switch (r->opcode) {
	case WEBSOCKET_PING:
		return WEBSOCKET_GOT_PING;
	case WEBSOCKET_PONG:
		return WEBSOCKET_GOT_PONG;
	default:
		break;
	}
	r->close_code = 0;
	if (r->control_len == 1)
		return fail(r, WEBSOCKET_PROTOCOL_ERROR, "a close frame of one "
		    "byte");
	if (r->control_len >= 2) {
		unsigned code = (unsigned)r->control[0] << 8 | r->control[1];

		if (!close_code_valid(code))
			return fail(r, WEBSOCKET_PROTOCOL_ERROR, "a close code "
			    "that may not be sent");
		if (!utf8_valid((const char *)r->control + 2,
		    r->control_len - 2))
			return fail(r, WEBSOCKET_BAD_DATA, "a close reason "
			    "that is not UTF-8");
		r->close_code = code;
	}
	return WEBSOCKET_GOT_CLOSE;
}

enum websocket_event
websocket_read(struct websocket_reader *r, struct evbuffer *in,
    struct evbuffer *out, size_t room)
{
	unsigned char buf[UNMASK_STEP];
	enum websocket_event ev;

	for (;;) {
		size_t avail = evbuffer_get_length(in), n;

		if (r->state == READ_HEAD) {
			if (r->head_len == 0)
				r->head_need = 2;
			n = r->head_need - r->head_len;
			if (avail == 0)
				return WEBSOCKET_AGAIN;
			if (n > avail)
				n = avail;
			evbuffer_remove(in, r->head + r->head_len, n);
			r->head_len += n;
			if (r->head_len < r->head_need)
				return WEBSOCKET_AGAIN;
			if (r->head_len == 2) {
				if ((ev = head_start(r)) != WEBSOCKET_AGAIN)
					return ev;
				continue;
			}
			if ((ev = head_done(r)) != WEBSOCKET_AGAIN)
				return ev;
			if (r->left > 0)
				continue;
		}
		if (r->opcode & 0x8) {
			n = r->left < avail ? (size_t)r->left : avail;
			evbuffer_remove(in, r->control + r->control_len, n);
			unmask(r, r->control + r->control_len, n);
			r->control_len += n;
			r->left -= n;
			if (r->left > 0)
				return WEBSOCKET_AGAIN;
			return control_done(r);
		}
		while (r->left > 0) {
			n = r->left < avail ? (size_t)r->left : avail;
			if (n > room)
				n = room;
			if (n > sizeof buf)
				n = sizeof buf;
			if (n == 0)
				return WEBSOCKET_AGAIN;
			evbuffer_remove(in, buf, n);
			unmask(r, buf, n);
			evbuffer_add(out, buf, n);
			r->left -= n;
			avail -= n;
			room -= n;
		}
		r->state = READ_HEAD;
		r->head_len = 0;
	}
}

/* The head of an unmasked frame with FIN set. */
static void
write_head(struct evbuffer *out, unsigned opcode, size_t len)
{
	unsigned char h[10];
	size_t n;

	h[0] = (unsigned char)(0x80 | opcode);
	if (len < 126) {
		h[1] = (unsigned char)len;
		n = 2;
	} else if (len < 65536) {
		h[1] = 126;
		h[2] = (unsigned char)(len >> 8);
		h[3] = (unsigned char)len;
		n = 4;
	} else {
		h[1] = 127;
		for (int i = 0; i < 8; i++)
			h[2 + i] = (unsigned char)((uint64_t)len >>
			    (56 - 8 * i));
		n = 10;
	}
	evbuffer_add(out, h, n);
}

void
websocket_write(struct evbuffer *out, unsigned opcode, const void *data,
    size_t len)
{
	write_head(out, opcode, len);
	evbuffer_add(out, data, len);
}

void
websocket_write_buffer(struct evbuffer *out, unsigned opcode,
    struct evbuffer *src, size_t len)
{
	write_head(out, opcode, len);
	evbuffer_remove_buffer(src, out, len);
}

void
websocket_write_close(struct evbuffer *out, unsigned code, const char *reason)
{
	unsigned char p[125];
	size_t n = 0;

	if (code != 0) {
		p[0] = (unsigned char)(code >> 8);
		p[1] = (unsigned char)code;
		n = 2;
		if (reason != NULL) {
			size_t rlen = strlen(reason);

			if (rlen > sizeof p - 2)
				rlen = sizeof p - 2;
			memcpy(p + 2, reason, rlen);
			n += rlen;
		}
	}
	websocket_write(out, WEBSOCKET_CLOSE, p, n);
}
