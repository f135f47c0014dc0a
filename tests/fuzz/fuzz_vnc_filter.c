/*
 * Fuzz target: the view-only filter of a viewer's RFB stream
 * (agent/vnc_filter.c), the bytes of a hostile viewer. Checked: the same
 * stream gives the same output and verdict whatever pieces it comes in;
 * the output is never longer than the input; and what passed is a stream
 * the filter passes again untouched (whole messages of the kinds that
 * only ask for pictures, nothing dropped, nothing cut).
 *
 * Input: one byte choosing the piece size (0: all at once), then the
 * stream.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "vnc_filter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
broken(const char *what)
{
	fprintf(stderr, "vnc_filter: %s\n", what);
	abort();
}

/* Filter stream in pieces of step bytes (0: whole); the output. */
static struct evbuffer *
run(const uint8_t *stream, size_t len, size_t step, int *rc)
{
	struct vnc_filter f;
	struct evbuffer *in = evbuffer_new(), *out = evbuffer_new();

	memset(&f, 0, sizeof f);
	*rc = 0;
	if (step == 0)
		step = len > 0 ? len : 1;
	for (size_t at = 0; at < len && *rc == 0; at += step) {
		evbuffer_add(in, stream + at, len - at < step ? len - at : step);
		*rc = vnc_filter_run(&f, in, out);
		if (evbuffer_get_length(in) != 0)
			broken("input left behind");
	}
	evbuffer_free(in);
	return out;
}

static int
same(struct evbuffer *a, struct evbuffer *b)
{
	size_t n = evbuffer_get_length(a);

	return n == evbuffer_get_length(b) && (n == 0 ||
	    memcmp(evbuffer_pullup(a, -1), evbuffer_pullup(b, -1), n) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct evbuffer *whole, *pieces, *again;
	size_t len;
	int rc_whole, rc_pieces, rc_again;

	if (size < 1)
		return 0;
	whole = run(data + 1, size - 1, 0, &rc_whole);
	pieces = run(data + 1, size - 1, data[0], &rc_pieces);
	if (rc_whole != rc_pieces || !same(whole, pieces))
		broken("the pieces changed the outcome");
	if ((len = evbuffer_get_length(whole)) > size - 1)
		broken("more came out than went in");
	again = run(evbuffer_pullup(whole, -1), len, 1, &rc_again);
	if (rc_again != 0 || !same(whole, again))
		broken("what passed does not pass again untouched");
	evbuffer_free(whole);
	evbuffer_free(pieces);
	evbuffer_free(again);
	return 0;
}
