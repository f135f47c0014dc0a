/*
 * E2B's list of sandboxes (GET /e2b/v2/sandboxes, and the v1 form
 * GET /e2b/sandboxes): running and paused ones (v1: running), filtered
 * by metadata, state, template and start, sorted by start (newest first
 * unless order=asc), in pages of at most 100 whose X-Next-Token is
 * "<start>_<name>" of the last one handed out, so that sandboxes coming
 * and going between pages neither repeat one nor skip one.
 */
#include "api_e2b.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xmalloc.h"

#define LIST_MAX 100

/* The value of key in metadata=k1=v1&k2=v2 matches meta's, each side
 * encoded twice (spec 2.3). 0: no match, -1: malformed (400). */
static int
metadata_matches(const char *query, json_t *metadata)
{
	char *copy = xstrdup(query), *save = NULL, *part;
	int rc = 1;

	for (part = strtok_r(copy, "&", &save); part != NULL && rc == 1;
	    part = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(part, '='), *k1 = NULL, *v1 = NULL, *k = NULL,
		    *v = NULL;
		const char *have;

		if (eq == NULL ||
		    http_percent_decode(part, (size_t)(eq - part), 1, &k1) < 0 ||
		    http_percent_decode(eq + 1, strlen(eq + 1), 1, &v1) < 0 ||
		    http_percent_decode(k1, strlen(k1), 0, &k) < 0 ||
		    http_percent_decode(v1, strlen(v1), 0, &v) < 0) {
			rc = -1;
		} else {
			have = json_string_value(json_object_get(metadata, k));
			rc = have != NULL && strcmp(have, v) == 0;
		}
		free(k1);
		free(v1);
		free(k);
		free(v);
	}
	free(copy);
	return rc;
}

/* RFC 3339 (what toISOString writes, or with an offset) as epoch
 * seconds; -1 when it is not one. */
static int
parse_time(const char *s, double *out)
{
	struct tm tm = { 0 };
	const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	double frac = 0;
	int sign, hh, mm, n = 0;

	if (p == NULL)
		return -1;
	if (*p == '.') {
		char *end;

		frac = strtod(p, &end);
		p = end;
	}
	*out = (double)timegm(&tm) + frac;
	if (strcmp(p, "Z") == 0 || strcmp(p, "z") == 0)
		return 0;
	if ((*p != '+' && *p != '-') || sscanf(p + 1, "%2d:%2d%n", &hh, &mm,
	    &n) != 2 || p[1 + n] != '\0')
		return -1;
	sign = *p == '+' ? 1 : -1;
	*out -= sign * (hh * 3600 + mm * 60);
	return 0;
}

static double
started_at(const struct sandbox *sb)
{
	json_t *v = json_object_get(api_e2b_fields(sb), "started_at");

	return json_is_number(v) ? json_number_value(v) : sb->created_at;
}

static int order_desc;

/* By start, then name: a total order, so pages neither skip nor repeat. */
static int
compare_started(const void *a, const void *b)
{
	const struct sandbox *x = *(struct sandbox *const *)a;
	const struct sandbox *y = *(struct sandbox *const *)b;
	double sx = started_at(x), sy = started_at(y);
	int c = sx < sy ? -1 : sx > sy ? 1 : strcmp(x->name, y->name);

	return order_desc ? -c : c;
}

/* What a list asks for (the query as sent, NULL when absent). */
struct list_query {
	const char *metadata;
	const char *state;
	const char *template;
	double started_after;		/* -1: any */
	int running, paused;
};

static int
listed(struct sandbox *sb, const struct list_query *q, struct error *err)
{
	json_t *e = api_e2b_fields(sb);
	const char *tmpl;
	int m;

	if (e == NULL || sb->state == SB_CREATING ||
	    sb->state == SB_RELEASING || sb->state == SB_RELEASED)
		return 0;
	if (sb->state == SB_PAUSED ? !q->paused : !q->running)
		return 0;
	if (q->started_after >= 0 && started_at(sb) <= q->started_after)
		return 0;
	tmpl = json_string_value(json_object_get(e, "template"));
	if (q->template != NULL && (tmpl == NULL || strcmp(q->template,
	    tmpl) != 0) && strcmp(q->template, sb->type_name) != 0)
		return 0;
	if (q->metadata != NULL && (m = metadata_matches(q->metadata,
	    json_object_get(e, "metadata"))) <= 0) {
		if (m < 0)
			error_set(err, 400, "metadata must be key=value pairs "
			    "joined by &, each part percent-encoded");
		return m;
	}
	return 1;
}

static int
parse_states(const char *s, struct list_query *q, struct error *err)
{
	char *copy, *save = NULL;

	if (s == NULL) {
		q->running = q->paused = 1;
		return 0;
	}
	copy = xstrdup(s);
	for (char *t = strtok_r(copy, ",", &save); t != NULL;
	    t = strtok_r(NULL, ",", &save)) {
		if (strcmp(t, "running") == 0) {
			q->running = 1;
		} else if (strcmp(t, "paused") == 0) {
			q->paused = 1;
		} else {
			error_set(err, 400, "state: '%.40s' is not running or "
			    "paused", t);
			free(copy);
			return -1;
		}
	}
	free(copy);
	return 0;
}

void
api_e2b_list(struct http_request *req, int v2)
{
	const char *order = http_request_query(req, "order");
	const char *limit_s = http_request_query(req, "limit");
	const char *after_s = http_request_query(req, "startedAfter");
	const char *token = http_request_query(req, "nextToken");
	struct list_query q = { .started_after = -1 };
	struct sandbox **v = NULL, *sb;
	size_t n = 0, cap = 0, from = 0, limit = v2 ? LIST_MAX : SIZE_MAX;
	json_t *list = json_array();
	struct error err = { 0 };
	char next[E2B_ID_MAX + 64];
	double token_at = 0;
	int token_off = -1;
	char *end;

	q.metadata = http_request_query(req, "metadata");
	q.template = v2 ? http_request_query(req, "template") : NULL;
	if (v2 ? parse_states(http_request_query(req, "state"), &q,
	    &err) < 0 : (q.running = 1, 0))
		goto fail;
	if (v2 && after_s != NULL && parse_time(after_s,
	    &q.started_after) < 0) {
		error_set(&err, 400, "startedAfter: not an RFC 3339 time");
		goto fail;
	}
	if (v2 && limit_s != NULL) {
		unsigned long l;

		errno = 0;
		l = strtoul(limit_s, &end, 10);
		if (!isdigit((unsigned char)*limit_s) || *end != '\0' ||
		    errno != 0 || l < 1 || l > LIST_MAX) {
			error_set(&err, 400, "limit must be from 1 to %d",
			    LIST_MAX);
			goto fail;
		}
		limit = l;
	}
	order_desc = !(order != NULL && strcmp(order, "asc") == 0);
	if (v2 && order != NULL && strcmp(order, "asc") != 0 &&
	    strcmp(order, "desc") != 0) {
		error_set(&err, 400, "order must be asc or desc");
		goto fail;
	}
	/* nextToken: "<start>_<name>" of the last one handed out. */
	if (v2 && token != NULL && *token != '\0') {
		token_at = strtod(token, &end);
		if (end == token || *end != '_') {
			error_set(&err, 400, "nextToken: not one this server gave");
			goto fail;
		}
		token_off = (int)(end + 1 - token);
	}
	for (sb = sandbox_resolve_first(); sb != NULL;
	    sb = sandbox_resolve_next(sb)) {
		int m = listed(sb, &q, &err);

		if (m < 0)
			goto fail;
		if (m == 0)
			continue;
		if (n == cap) {
			cap = cap == 0 ? 64 : 2 * cap;
			v = xreallocarray(v, cap, sizeof *v);
		}
		v[n++] = sb;
	}
	if (n > 1)
		qsort(v, n, sizeof *v, compare_started);
	if (token_off >= 0) {
		while (from < n) {
			double s = started_at(v[from]);
			int c = s < token_at ? -1 : s > token_at ? 1 :
			    strcmp(v[from]->name, token + token_off);

			if (order_desc ? c < 0 : c > 0)
				break;
			from++;
		}
	}
	for (size_t i = from; i < n && i - from < limit; i++)
		json_array_append_new(list, api_e2b_detail_json(v[i], 0));
	if (from + limit < n) {
		sb = v[from + limit - 1];
		snprintf(next, sizeof next, "%.6f_%s", started_at(sb), sb->name);
		http_reply_add_header(req, "X-Next-Token", next);
	}
	free(v);
	http_reply_json(req, 200, list);
	return;
fail:
	free(v);
	json_decref(list);
	api_e2b_reply_err(req, &err);
}
