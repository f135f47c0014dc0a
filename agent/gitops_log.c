/*
 * GET /watcher/git_logs as JSON: the history from HEAD, newest first, each
 * commit with its diff against its first parent.
 *
 * The walk is our own rather than libgit2's revwalk: libgit2 1.5 fails a
 * whole walk on a parent that is not in the repository, which is the
 * normal state of a shallow clone (git clone --depth 1), a common start in
 * a sandbox. Here such a parent just ends that line of history, as git log
 * shows it. The order is git log's default: the newest committer date
 * first, commits of the same date in the order they were met.
 *
 * The history is the sandbox user's to write, so the answer is bounded
 * whatever it holds: a page of commits (gitops.c's limit), the walk keeping
 * only ids and dates of the commits it met, no commit object over
 * LOG_COMMIT_MAX, blobs over LOG_BLOB_MAX shown as binary (as git does
 * past core.bigFileThreshold) and never loaded, at most LOG_MAX_FILES
 * changed files per commit, and at most LOG_MAX_BYTES of JSON: the page
 * ends before the commit that would pass it, and if that is its first
 * one, the answer is 413 naming it.
 */
#include "gitops_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>

#include "xmalloc.h"

#define LOG_MAX_BYTES	(32 * 1024 * 1024)
#define LOG_BLOB_MAX	(1024 * 1024)
#define LOG_MAX_FILES	100000
#define LOG_COMMIT_MAX	(1024 * 1024)

struct queued {
	git_oid id;
	git_time_t time;
	unsigned long seq;
};

/* The walk's state; owned and freed by gitops_log_append_json. */
struct walk {
	struct queued *heap;		/* max-heap by (time, -seq) */
	size_t n, cap;
	git_oid *seen;			/* open addressing set of met commits */
	unsigned char *used;
	size_t nseen, seencap;		/* seencap: a power of 2 */
	unsigned long seq;
};

static size_t
slot_of(const git_oid *id, size_t cap)
{
	size_t h;

	memcpy(&h, id->id, sizeof h);	/* a hash already */
	return h & (cap - 1);
}

/* 1 if id is new (and now met), 0 if it was met before. */
static int
meet(struct walk *w, const git_oid *id)
{
	size_t i;

	if ((w->nseen + 1) * 2 > w->seencap) {
		git_oid *old = w->seen;
		unsigned char *oldused = w->used;
		size_t oldcap = w->seencap;

		w->seencap = oldcap != 0 ? oldcap * 2 : 64;
		w->seen = xcalloc(w->seencap, sizeof *w->seen);
		w->used = xcalloc(w->seencap, 1);
		for (size_t j = 0; j < oldcap; j++) {
			if (!oldused[j])
				continue;
			for (i = slot_of(&old[j], w->seencap); w->used[i];
			    i = (i + 1) & (w->seencap - 1))
				;
			w->seen[i] = old[j];
			w->used[i] = 1;
		}
		free(old);
		free(oldused);
	}
	for (i = slot_of(id, w->seencap); w->used[i];
	    i = (i + 1) & (w->seencap - 1))
		if (git_oid_equal(&w->seen[i], id))
			return 0;
	w->seen[i] = *id;
	w->used[i] = 1;
	w->nseen++;
	return 1;
}

static int
before(const struct queued *a, const struct queued *b)
{
	return a->time > b->time || (a->time == b->time && a->seq < b->seq);
}

static void
heap_push(struct walk *w, const git_oid *id, git_time_t time)
{
	struct queued q = { *id, time, w->seq++ }, tmp;
	size_t i = w->n++, parent;

	if (w->n > w->cap) {
		w->cap = w->cap != 0 ? w->cap * 2 : 16;
		w->heap = xreallocarray(w->heap, w->cap, sizeof *w->heap);
	}
	w->heap[i] = q;
	for (; i > 0 && before(&w->heap[i], &w->heap[parent = (i - 1) / 2]);
	    i = parent) {
		tmp = w->heap[i];
		w->heap[i] = w->heap[parent];
		w->heap[parent] = tmp;
	}
}

/* The next commit's id into *id; 0 when the walk is over. */
static int
heap_pop(struct walk *w, git_oid *id)
{
	struct queued tmp;
	size_t i = 0, best, l;

	if (w->n == 0)
		return 0;
	*id = w->heap[0].id;
	w->heap[0] = w->heap[--w->n];
	for (;;) {
		best = i;
		l = 2 * i + 1;
		if (l < w->n && before(&w->heap[l], &w->heap[best]))
			best = l;
		if (l + 1 < w->n && before(&w->heap[l + 1], &w->heap[best]))
			best = l + 1;
		if (best == i)
			break;
		tmp = w->heap[i];
		w->heap[i] = w->heap[best];
		w->heap[best] = tmp;
		i = best;
	}
	return 1;
}

/* The commit id names, refused (413) when its object is larger than any
 * real commit: it would be read whole. */
static int
lookup(git_repository *repo, const git_oid *id, git_commit **out,
    struct error *err)
{
	char hex[GIT_OID_HEXSZ + 1];
	git_object_t type;
	git_odb *odb;
	size_t len;
	int rc;

	rc = git_repository_odb(&odb, repo);
	if (rc == 0) {
		rc = git_odb_read_header(&len, &type, odb, id);
		git_odb_free(odb);
	}
	if (rc == 0 && len > LOG_COMMIT_MAX) {
		error_set(err, 413, "commit %s is %zu bytes, more than the %d a "
		    "log reads", git_oid_tostr(hex, sizeof hex, id), len,
		    LOG_COMMIT_MAX);
		return -1;
	}
	if (rc == 0)
		rc = git_commit_lookup(out, repo, id);
	return rc;
}

/* Queue the commit id names unless met before. A missing commit is the
 * edge of a shallow clone unless required (HEAD itself). */
static int
walk_add(struct walk *w, git_repository *repo, const git_oid *id,
    int required, struct error *err)
{
	git_commit *commit;
	int rc;

	if (!meet(w, id))
		return 0;
	rc = lookup(repo, id, &commit, err);
	if (rc == GIT_ENOTFOUND && !required)
		return 0;
	if (rc < 0) {
		if (err->status == 0)
			gitops_error(err, rc, "cannot read a commit");
		return -1;
	}
	heap_push(w, id, git_commit_time(commit));
	git_commit_free(commit);
	return 0;
}

static void
walk_free(struct walk *w)
{
	free(w->heap);
	free(w->seen);
	free(w->used);
}

/* As Python's datetime.isoformat() of the author's own time and offset:
 * 2026-11-23T08:00:00+00:00 (what git log --format=%aI prints). */
static void
format_date(char *buf, size_t size, const git_time *when)
{
	time_t t = (time_t)(when->time + (git_time_t)when->offset * 60);
	int off = when->offset < 0 ? -when->offset : when->offset;
	struct tm tm;

	gmtime_r(&t, &tm);
	snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d%c%02d:%02d",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	    tm.tm_min, tm.tm_sec, when->offset < 0 ? '-' : '+', off / 60,
	    off % 60);
}

/* Counts the files a diff grows by, and stops it past LOG_MAX_FILES. */
static int
count_file(const git_diff *diff, const git_diff_delta *delta,
    const char *pathspec, void *payload)
{
	size_t *n = payload;

	(void)diff;
	(void)delta;
	(void)pathspec;
	return ++*n > LOG_MAX_FILES ? -1 : 0;
}

/* The diff of commit against its first parent; {} for a root commit, and
 * for a commit whose parent is not here (a shallow clone's oldest). It
 * stops (413) once out holds more than max bytes. */
static int
append_commit_diff(struct evbuffer *out, git_repository *repo,
    git_commit *commit, size_t max, struct error *err)
{
	size_t files = 0;
	git_diff_options opts;
	git_commit *parent = NULL;
	git_tree *old = NULL, *new = NULL;
	git_diff *diff = NULL;
	int rc, ret = -1;

	if (git_commit_parentcount(commit) == 0) {
		evbuffer_add(out, "{}", 2);
		return 0;
	}
	rc = git_commit_parent(&parent, commit, 0);
	if (rc == GIT_ENOTFOUND) {
		evbuffer_add(out, "{}", 2);
		return 0;
	}
	gitops_diff_options_default(&opts);
	opts.max_size = LOG_BLOB_MAX;
	opts.notify_cb = count_file;
	opts.payload = &files;
	if (rc == 0)
		rc = git_commit_tree(&old, parent);
	if (rc == 0)
		rc = git_commit_tree(&new, commit);
	if (rc == 0)
		rc = git_diff_tree_to_tree(&diff, repo, old, new, &opts);
	if (rc < 0 && files > LOG_MAX_FILES)
		error_set(err, 413, "it changes more than %d files",
		    LOG_MAX_FILES);
	else if (rc < 0)
		gitops_error(err, rc, "cannot diff a commit");
	else
		ret = gitops_diff_append_json(out, diff, max, err);
	git_diff_free(diff);
	git_tree_free(new);
	git_tree_free(old);
	git_commit_free(parent);
	return ret;
}

static int
append_commit(struct evbuffer *out, git_repository *repo, git_commit *commit,
    size_t max, struct error *err)
{
	const git_signature *author = git_commit_author(commit);
	const char *msg = git_commit_message(commit);
	char hex[GIT_OID_HEXSZ + 1], date[64];
	size_t len;

	git_oid_tostr(hex, sizeof hex, git_commit_id(commit));
	format_date(date, sizeof date, &author->when);
	if (msg == NULL)
		msg = "";
	/* Python's str.strip() of the message. */
	while (*msg != '\0' && strchr(" \t\n\r\v\f", *msg) != NULL)
		msg++;
	len = strlen(msg);
	while (len > 0 && strchr(" \t\n\r\v\f", msg[len - 1]) != NULL)
		len--;
	evbuffer_add_printf(out, "{\"commit\":\"%s\",\"author\":", hex);
	gitops_append_string(out, author->name, strlen(author->name));
	evbuffer_add_printf(out, ",\"date\":\"%s\",\"message\":", date);
	gitops_append_string(out, msg, len);
	evbuffer_add(out, ",\"diff\":", 8);
	if (evbuffer_get_length(out) > max) {
		error_set(err, 413, "its message is too large");
		return -1;
	}
	if (append_commit_diff(out, repo, commit, max, err) < 0)
		return -1;
	evbuffer_add(out, "}", 1);
	return 0;
}

/* Each commit's JSON is written as it is walked, so memory grows with the
 * page asked for, up to LOG_MAX_BYTES, not with the history. */
int
gitops_log_append_json(struct evbuffer *out, git_repository *repo,
    unsigned long limit, unsigned long offset, struct error *err)
{
	struct evbuffer *one = evbuffer_new();
	char hex[GIT_OID_HEXSZ + 1];
	struct walk w = { 0 };
	unsigned long n = 0, skipped = 0;
	git_commit *commit;
	git_oid head, id;
	int rc, ret = -1;

	evbuffer_add(out, "{\"logs\":[", 9);
	rc = git_reference_name_to_id(&head, repo, "HEAD");
	if (rc == GIT_ENOTFOUND || rc == GIT_EUNBORNBRANCH) {
		evbuffer_add(out, "]}", 2);	/* no commit yet */
		evbuffer_free(one);
		return 0;
	}
	if (rc < 0) {
		gitops_error(err, rc, "cannot read HEAD");
		evbuffer_free(one);
		return -1;
	}
	if (walk_add(&w, repo, &head, 1, err) < 0)
		goto out;
	while (n < limit && heap_pop(&w, &id)) {
		rc = lookup(repo, &id, &commit, err);
		if (rc < 0) {
			if (err->status == 0)
				gitops_error(err, rc, "cannot read a commit");
			goto out;
		}
		for (unsigned int i = 0; rc == 0 &&
		    i < git_commit_parentcount(commit); i++)
			rc = walk_add(&w, repo, git_commit_parent_id(commit, i),
			    0, err);
		if (rc == 0 && skipped < offset) {
			skipped++;
		} else if (rc == 0) {
			size_t room = LOG_MAX_BYTES - evbuffer_get_length(out);

			rc = append_commit(one, repo, commit, room, err);
			if (rc < 0 && err->status == 413 && n > 0) {
				/* The page ends before it: the next page,
				 * offset by the commits here, starts with it. */
				git_commit_free(commit);
				break;
			}
			if (rc < 0 && err->status == 413)
				error_prefix(err, "commit %s is too large for "
				    "a log answer (at most %d MiB; read its diff "
				    "with /watcher/generate_diff)",
				    git_oid_tostr(hex, sizeof hex, &id),
				    LOG_MAX_BYTES >> 20);
			if (rc == 0) {
				if (n++ > 0)
					evbuffer_add(out, ",", 1);
				evbuffer_add_buffer(out, one);
			}
		}
		git_commit_free(commit);
		if (rc < 0)
			goto out;
	}
	evbuffer_add(out, "]}", 2);
	ret = 0;
out:
	evbuffer_free(one);
	walk_free(&w);
	return ret;
}
