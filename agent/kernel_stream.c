/* The kernel's output streams cut into cells, and its control frames; see
 * kernel_stream.h. */
#include "kernel_stream.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "utf8.h"
#include "xmalloc.h"

#define CHUNK_MAX (64 * 1024)	/* spawn reads at most this at a time */

void
kernel_stream_init(struct kernel_stream *ks)
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
kernel_stream_feed(struct kernel_stream *ks, int busy, const char *marker,
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
kernel_stream_note(struct evbuffer *buf, const char *text)
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
kernel_stream_take(struct kernel_stream *ks, const char *name, size_t cap)
{
	struct evbuffer *out = ks->buf;

	/* No marker came (the kernel died): the kept end was output. */
	if (ks->ncarry > 0)
		add_capped(out, &ks->dropped, cap, ks->carry, ks->ncarry);
	if (ks->dropped > 0) {
		char *text = xasprintf("[%s truncated: %llu bytes over the "
		    "%zu-byte limit were dropped]", name,
		    (unsigned long long)ks->dropped, cap);

		kernel_stream_note(out, text);
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
kernel_stream_reset(struct kernel_stream *ks)
{
	evbuffer_drain(ks->buf, evbuffer_get_length(ks->buf));
	evbuffer_drain(ks->spill, evbuffer_get_length(ks->spill));
	ks->dropped = ks->spill_dropped = 0;
	ks->ncarry = 0;
	ks->marked = 0;
}

void
kernel_stream_free(struct kernel_stream *ks)
{
	evbuffer_free(ks->buf);
	evbuffer_free(ks->spill);
}

char *
kernel_stream_tail(struct kernel_stream *ks, size_t max)
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

/* Feeds jansson the frame's bytes from the buffer, counting on the way the
 * values they can make: one per ',', ':', '[' or '{' outside strings, and
 * a first one. Past the limit it fails, and jansson with it. */
struct frame_reader {
	struct evbuffer *in;
	size_t left;		/* bytes of the frame not given yet */
	size_t values;
	int in_string;
	int escaped;
};

static size_t
frame_read_cb(void *buf, size_t size, void *arg)
{
	struct frame_reader *r = arg;
	unsigned char *p = buf;
	int n;

	n = evbuffer_remove(r->in, buf, size < r->left ? size : r->left);
	if (n <= 0)
		return 0;
	r->left -= (size_t)n;
	for (int i = 0; i < n; i++) {
		if (r->escaped)
			r->escaped = 0;
		else if (r->in_string && p[i] == '\\')
			r->escaped = 1;
		else if (p[i] == '"')
			r->in_string = !r->in_string;
		else if (!r->in_string && (p[i] == ',' || p[i] == ':' ||
		    p[i] == '[' || p[i] == '{'))
			r->values++;
	}
	return r->values > KERNEL_STREAM_FRAME_VALUES ? (size_t)-1 : (size_t)n;
}

int
kernel_stream_read_frame(struct evbuffer *in, json_t **msg, const char **why)
{
	struct frame_reader r = { in, 0, 1, 0, 0 };
	unsigned char head[4];
	json_error_t jerr;

	*msg = NULL;
	if (evbuffer_copyout(in, head, sizeof head) != sizeof head)
		return 0;
	r.left = (size_t)head[0] << 24 | (size_t)head[1] << 16 |
	    (size_t)head[2] << 8 | head[3];
	if (r.left > KERNEL_STREAM_FRAME_MAX) {
		*why = "sent a control frame over 16 MiB on fd 3";
		return -1;
	}
	if (evbuffer_get_length(in) < sizeof head + r.left)
		return 0;
	evbuffer_drain(in, sizeof head);
	*msg = json_load_callback(frame_read_cb, &r, 0, &jerr);
	if (r.values > KERNEL_STREAM_FRAME_VALUES) {
		*why = "sent a control frame of over 65536 JSON values on fd 3";
	} else if (!json_is_object(*msg) || r.left > 0) {
		*why = "sent a malformed control frame on fd 3";
	} else {
		return 1;
	}
	evbuffer_drain(in, r.left);
	json_decref(*msg);
	*msg = NULL;
	return -1;
}
