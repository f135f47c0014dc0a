/* Cutting the kernel's output streams into cells; see kernel_stream.h. */
#include "kernel_stream.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "utf8.h"
#include "xmalloc.h"

#define CHUNK_MAX (64 * 1024)	/* spawn reads at most this at a time */

void
kstream_init(struct kernel_stream *ks)
{
	memset(ks, 0, sizeof *ks);
	ks->buf = evbuffer_new();
	ks->spill = evbuffer_new();
}

static void
add_capped(struct evbuffer *buf, uint64_t *dropped, size_t cap,
    const char *data, size_t len)
{
	size_t have = evbuffer_get_length(buf), keep = len;

	if (cap > 0 && have + len > cap) {
		keep = have < cap ? cap - have : 0;
		*dropped += len - keep;
	}
	evbuffer_add(buf, data, keep);
}

/* Length of the longest end of s that could begin the marker. */
static size_t
marker_start(const char *s, size_t len, const char *marker)
{
	size_t n = len < MARKER_LEN - 1 ? len : MARKER_LEN - 1;

	for (; n > 0; n--)
		if (memcmp(s + len - n, marker, n) == 0)
			return n;
	return 0;
}

int
kstream_feed(struct kernel_stream *ks, int busy, const char *marker,
    const char *data, size_t len, size_t cap)
{
	char stackbuf[CHUNK_MAX + MARKER_LEN], *joined = stackbuf;
	const char *hit;
	size_t total, tail;

	/* Between cells (background jobs): it goes to the next cell. */
	if (!busy) {
		add_capped(ks->buf, &ks->dropped, cap, data, len);
		return 0;
	}
	if (ks->marked) {
		add_capped(ks->spill, &ks->spill_dropped, cap, data, len);
		return 0;
	}
	/* The marker may straddle two reads: search from the kept end. */
	total = ks->ncarry + len;
	if (total > sizeof stackbuf)
		joined = xmalloc(total);
	memcpy(joined, ks->carry, ks->ncarry);
	memcpy(joined + ks->ncarry, data, len);
	ks->ncarry = 0;
	hit = memmem(joined, total, marker, MARKER_LEN);
	if (hit != NULL) {
		add_capped(ks->buf, &ks->dropped, cap, joined,
		    (size_t)(hit - joined));
		add_capped(ks->spill, &ks->spill_dropped, cap, hit + MARKER_LEN,
		    (size_t)(joined + total - hit - MARKER_LEN));
		ks->marked = 1;
	} else {
		tail = marker_start(joined, total, marker);
		add_capped(ks->buf, &ks->dropped, cap, joined, total - tail);
		memcpy(ks->carry, joined + total - tail, tail);
		ks->ncarry = tail;
	}
	if (joined != stackbuf)
		free(joined);
	return hit != NULL;
}

void
kstream_note(struct evbuffer *buf, const char *text)
{
	size_t len = evbuffer_get_length(buf);
	struct evbuffer_ptr at;
	char last;

	if (len > 0) {
		evbuffer_ptr_set(buf, &at, len - 1, EVBUFFER_PTR_SET);
		if (evbuffer_copyout_from(buf, &at, &last, 1) == 1 &&
		    last != '\n')
			evbuffer_add(buf, "\n", 1);
	}
	evbuffer_add_printf(buf, "%s\n", text);
}

struct evbuffer *
kstream_take(struct kernel_stream *ks, const char *name, size_t cap)
{
	struct evbuffer *out = ks->buf;

	/* No marker came (the kernel died): the kept end was output. */
	if (ks->ncarry > 0)
		add_capped(out, &ks->dropped, cap, ks->carry, ks->ncarry);
	if (ks->dropped > 0) {
		char *text = xasprintf("[%s truncated: %llu bytes over the "
		    "%zu-byte limit were dropped]", name,
		    (unsigned long long)ks->dropped, cap);

		kstream_note(out, text);
		free(text);
	}
	ks->buf = ks->spill;
	ks->dropped = ks->spill_dropped;
	ks->spill = evbuffer_new();
	ks->spill_dropped = 0;
	ks->ncarry = 0;
	ks->marked = 0;
	return out;
}

void
kstream_reset(struct kernel_stream *ks)
{
	evbuffer_drain(ks->buf, evbuffer_get_length(ks->buf));
	evbuffer_drain(ks->spill, evbuffer_get_length(ks->spill));
	ks->dropped = ks->spill_dropped = 0;
	ks->ncarry = 0;
	ks->marked = 0;
}

char *
kstream_tail(struct kernel_stream *ks, size_t max)
{
	size_t len = evbuffer_get_length(ks->buf), n = len < max ? len : max;
	char *raw = xmalloc(n + 1), *text;
	struct evbuffer_ptr at;

	evbuffer_ptr_set(ks->buf, &at, len - n, EVBUFFER_PTR_SET);
	evbuffer_copyout_from(ks->buf, &at, raw, n);
	text = utf8_sanitize(raw, n, &n);
	free(raw);
	while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' '))
		text[--n] = '\0';
	return text;
}
