/*
 * Fuzz target: the streaming multipart/form-data parser (agent/multipart.c)
 * on its own, fed in pieces of every size, with the callbacks checking
 * that parts begin, carry data and end in order.
 *
 * Input: the Content-Type header value up to the first newline, one byte
 * choosing the piece size (0: all at once), then the body.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct state {
	int in_part;
	size_t parts, bytes, sum;
};

static void
broken(const char *what)
{
	fprintf(stderr, "multipart: %s\n", what);
	abort();
}

static int
part_begin(const struct multipart_part *part, void *arg, struct error *err)
{
	struct state *st = arg;

	if (st->in_part)
		broken("a part began inside another");
	if (part->name == NULL)
		broken("a part without a name");
	/* Touch every string it hands over: they must be whole. */
	st->bytes += strlen(part->name);
	if (part->filename != NULL)
		st->bytes += strlen(part->filename);
	if (part->content_type != NULL)
		st->bytes += strlen(part->content_type);
	if (strcmp(part->name, "stop") == 0) {
		error_set(err, 422, "stopped at a part named stop");
		return -1;
	}
	st->in_part = 1;
	st->parts++;
	return 0;
}

static int
part_data(const char *data, size_t len, void *arg, struct error *err)
{
	struct state *st = arg;

	(void)err;
	if (!st->in_part)
		broken("data outside a part");
	/* Every byte handed over must be readable. */
	for (size_t i = 0; i < len; i++)
		st->sum += (unsigned char)data[i];
	st->bytes += len;
	return 0;
}

static int
part_end(void *arg, struct error *err)
{
	struct state *st = arg;

	(void)err;
	if (!st->in_part)
		broken("a part ended that did not begin");
	st->in_part = 0;
	return 0;
}

static const struct multipart_callbacks cbs = { part_begin, part_data,
    part_end };

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size), *body;
	struct state st = { 0 };
	struct multipart *mp;
	struct error err;
	char *ct, *boundary;
	size_t piece, len;
	int failed = 0;

	if (nl == NULL || (size_t)(nl - data) + 2 > size)
		return 0;
	ct = strndup((const char *)data, (size_t)(nl - data));
	boundary = multipart_boundary(ct, &err);
	free(ct);
	if (boundary == NULL)
		return 0;
	piece = nl[1];
	body = nl + 2;
	len = size - (size_t)(body - data);
	mp = multipart_new(boundary, &cbs, &st);
	free(boundary);
	for (size_t off = 0; off < len && !failed; ) {
		size_t n = piece == 0 || len - off < piece ? len - off : piece;

		failed = multipart_feed(mp, (const char *)body + off, n, &err) < 0;
		off += n;
	}
	if (!failed && multipart_finish(mp, &err) == 0 && st.in_part)
		broken("finished inside a part");
	/* Once failed, it says so again. */
	if (failed && multipart_feed(mp, "x", 1, &err) == 0)
		broken("fed after failing");
	multipart_free(mp);
	return 0;
}
