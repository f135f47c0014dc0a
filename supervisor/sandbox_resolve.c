/*
 * Which sandbox a request names, of any instance: the table (sandbox.c)
 * knows only ours, and with REDIS_ENABLED the others' records are in
 * shared_mirror.c; the routes ask here, above both, so that the table
 * calls nothing of the shared state. A name neither knows may still be
 * one another instance made a moment ago: the routes then ask Redis
 * (shared_lookup) and come back here.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>

#include "shared.h"

struct sandbox *
sandbox_resolve(const char *identity)
{
	struct sandbox *sb = sandbox_find(identity);

	if (sb == NULL && identity != NULL && shared_enabled())
		sb = shared_find(identity);
	return sb;
}

struct sandbox *
sandbox_resolve_first(void)
{
	struct sandbox *sb = sandbox_first();

	return sb != NULL || !shared_enabled() ? sb : shared_first();
}

struct sandbox *
sandbox_resolve_next(struct sandbox *sb)
{
	struct sandbox *next = sandbox_next(sb);

	/* The end of ours: the other instances' records follow. */
	if (next == NULL && sb->owner == NULL && shared_enabled())
		next = shared_first();
	return next;
}

struct sandbox *
sandbox_from_path(struct http_request *req, const char *prefix,
    char **identity, const char **rest)
{
	const char *raw = http_request_raw_target(req);
	size_t n = strlen(prefix), idlen = 0;

	*identity = NULL;
	/* The route matched the decoded path; the raw one (passed on as
	 * sent) must spell the prefix plainly too. */
	if (strncmp(raw, prefix, n) == 0) {
		raw += n;
		idlen = strcspn(raw, "/?");
	}
	*rest = raw + idlen;
	if (idlen == 0 || http_percent_decode(raw, idlen, 0, identity) < 0) {
		*identity = NULL;
		return NULL;
	}
	return sandbox_resolve(*identity);
}
