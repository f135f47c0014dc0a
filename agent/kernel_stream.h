/*
 * The IPython kernel's streams, private to kernel.c. Its output streams
 * (stdout, stderr), cut into cells: at the end of each cell the kernel
 * writes a marker into the stream, and what came before it is that cell's
 * output. Its control channel: frames of a 4-byte big-endian length and a
 * JSON object, bounded, as code the user runs in the kernel can write
 * anything to that descriptor.
 */
#ifndef KERNEL_STREAM_H
#define KERNEL_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define MARKER_LEN 34		/* \x1e, 32 hex digits, \x1e */
/* A control frame holds at most this many bytes (the largest are a cell's
 * images and rich results, base64) and JSON values (each costs jansson
 * some 50 bytes, where the text "1," is 2: a frame of small values must
 * not cost 25 times its size; 65536 of them, a result's JSON or a
 * DataFrame's columns, cost some 4 MiB). */
#define KERNEL_STREAM_FRAME_MAX (16u * 1024 * 1024)
#define KERNEL_STREAM_FRAME_VALUES 65536

struct evbuffer;

/* The next control frame at the start of in, taken out of it: 1 with *msg
 * (a new reference); 0 while it is not all there; -1 if it breaks the
 * protocol, with *why (a static string). A frame too long is refused by
 * its header, one of too many values while it is parsed: neither costs
 * more than its bytes. */
int kernel_stream_read_frame(struct evbuffer *in, json_t **msg,
    const char **why);

/* Embedded in struct kernel; its buffers live as long as it. */
struct kernel_stream {
	struct evbuffer *buf;	/* the running (or next) cell's output */
	uint64_t dropped;	/* bytes of it over the cap */
	struct evbuffer *spill;	/* after the running cell's marker */
	uint64_t spill_dropped;
	char carry[MARKER_LEN];	/* an end that may be the marker's start */
	size_t ncarry;
	int marked;		/* the running cell's marker came */
};

void kernel_stream_init(struct kernel_stream *ks);
/* Output read from the kernel; busy: a cell is running, so look for its
 * marker. Each cell keeps at most cap bytes. 1 when the marker came now. */
int kernel_stream_feed(struct kernel_stream *ks, int busy, const char *marker,
    const char *data, size_t len, size_t cap);
/* The running cell's output, with a note if some was dropped; the stream
 * moves on to the next cell. The caller owns the buffer. */
struct evbuffer *kernel_stream_take(struct kernel_stream *ks, const char *name,
    size_t cap);
/* Forget everything (a new kernel). */
void kernel_stream_reset(struct kernel_stream *ks);
void kernel_stream_free(struct kernel_stream *ks);
/* Up to max bytes of the end of the pending output, valid UTF-8 without
 * its final newlines, for a message. Caller frees. */
char *kernel_stream_tail(struct kernel_stream *ks, size_t max);
/* Append text to buf on a line of its own. */
void kernel_stream_note(struct evbuffer *buf, const char *text);

#endif
