/*
 * The record list as GET /v1/sandboxes answers it: filtered by type,
 * state and session, paged by offset and limit, with the number of
 * records that matched. The query is checked before anything is listed:
 * an unknown type or state, or an offset or limit that is not a count, is
 * the caller's mistake (400), not an empty list. The answer is written
 * as text from each record's kept encoding (sandbox_model_text): at 1000
 * records, building and encoding 1000 JSON objects cost about 8 ms a
 * list, copying their kept text a fraction of one.
 */
#include "sandboxd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

/* A page holds at most this many records: an answer stays small enough
 * to build in one turn of the loop. */
#define LIST_MAX_LIMIT 1000

static int
parse_count(const char *key, const char *s, size_t max, size_t *out,
    struct error *err)
{
	unsigned long long v;
	char *end;

	/* Digits only: strtoull would take a sign or spaces. */
	if (*s < '0' || *s > '9')
		goto bad;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v > max)
		goto bad;
	*out = (size_t)v;
	return 0;
bad:
	error_set(err, 400, "%s: '%.64s' is not a number from 0 to %zu", key, s,
	    max);
	return -1;
}

static int
parse_state(const char *s, enum sandbox_state *out, struct error *err)
{
	if (sandbox_state_parse(s, out) == 0)
		return 0;
	error_set(err, 400, "state: '%.64s' is not one of creating, warm, "
	    "running, unhealthy, stopped, paused, releasing, released", s);
	return -1;
}

struct evbuffer *
sandbox_list_encode(const struct sandbox_query *q, struct error *err)
{
	const struct sandbox_type *type = NULL;
	enum sandbox_state state = SB_CREATING;
	size_t offset = 0, limit = LIST_MAX_LIMIT, total = 0;
	int with_released = 0, paged = q->limit != NULL;
	struct sandbox *sb;
	struct evbuffer *out;
	size_t listed = 0;

	if (q->all != NULL && config_parse_bool(q->all, &with_released) < 0) {
		error_set(err, 400, "all: '%.64s' is not a boolean", q->all);
		return NULL;
	}
	if (q->type != NULL && (type = sandbox_types_find(q->type)) == NULL) {
		error_set(err, 400, "type: no sandbox type '%.64s'", q->type);
		return NULL;
	}
	if (q->state != NULL && parse_state(q->state, &state, err) < 0)
		return NULL;
	if (q->offset != NULL && parse_count("offset", q->offset, SIZE_MAX / 2,
	    &offset, err) < 0)
		return NULL;
	if (q->limit != NULL && parse_count("limit", q->limit, LIST_MAX_LIMIT,
	    &limit, err) < 0)
		return NULL;

	out = evbuffer_new();
	evbuffer_add(out, "{\"sandboxes\":[", 14);
	for (sb = sandbox_resolve_first(); sb != NULL;
	    sb = sandbox_resolve_next(sb)) {
		if (sb->state == SB_RELEASED && !with_released && q->state == NULL)
			continue;
		if (type != NULL && strcmp(sb->type_name, type->name) != 0)
			continue;
		if (q->state != NULL && sb->state != state)
			continue;
		if (q->session != NULL && (sb->session == NULL ||
		    strcmp(sb->session, q->session) != 0))
			continue;
		/* Without a limit every match is listed, as before paging. */
		if (total >= offset && (!paged || total - offset < limit)) {
			size_t len;
			const char *text = sandbox_model_text(sb, &len);

			if (listed++ > 0)
				evbuffer_add(out, ",", 1);
			evbuffer_add(out, text, len);
		}
		total++;
	}
	evbuffer_add_printf(out, "],\"total\":%zu,\"offset\":%zu,\"limit\":",
	    total, offset);
	if (paged)
		evbuffer_add_printf(out, "%zu}", limit);
	else
		evbuffer_add(out, "null}", 5);
	return out;
}
