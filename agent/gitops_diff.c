/*
 * libgit2 diffs as the wire protocol writes them: one unified diff text per
 * path, in the shape Python's difflib.unified_diff(fromfile="a/p",
 * tofile="b/p", lineterm="") gives once joined with "\n", with the hunks
 * libgit2's xdiff finds (the same as git's). JSON text is written straight
 * into an evbuffer, one file at a time, so a large diff exists once as its
 * text and once as its JSON, never as a tree of JSON values.
 */
#include "gitops_internal.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "jsonx.h"
#include "utf8.h"
#include "xmalloc.h"

void
gitops_diff_options_default(git_diff_options *opts)
{
	git_diff_options_init(opts, GIT_DIFF_OPTIONS_VERSION);
	opts->context_lines = 3;
	opts->interhunk_lines = 0;
	opts->flags |= GIT_DIFF_INCLUDE_TYPECHANGE;
}

void
gitops_error(struct error *err, int rc, const char *what)
{
	const git_error *e = git_error_last();
	int status = 500;

	if (rc == GIT_ELOCKED || rc == GIT_EUNMERGED || rc == GIT_ECONFLICT ||
	    rc == GIT_EMODIFIED)
		status = 409;
	error_set(err, status, "%s: %s", what,
	    e != NULL && e->message != NULL ? e->message : "libgit2 error");
}

void
gitops_append_string(struct evbuffer *out, const char *s, size_t len)
{
	char *clean = NULL;

	if (!utf8_valid(s, len)) {
		clean = utf8_sanitize(s, len, &len);
		s = clean;
	}
	evbuffer_add(out, "\"", 1);
	jsonx_escape_append(out, s, len);
	evbuffer_add(out, "\"", 1);
	free(clean);
}

/* A hunk range as diff -u and difflib write it: the count is left out when
 * it is 1; an empty range names the line before it (libgit2 already gives
 * that start). */
static void
add_range(struct evbuffer *text, char sign, int start, int count)
{
	if (count == 1)
		evbuffer_add_printf(text, "%c%d", sign, start);
	else
		evbuffer_add_printf(text, "%c%d,%d", sign, start, count);
}

static int
add_hunk(struct evbuffer *text, git_patch *patch, size_t h,
    struct error *err)
{
	const git_diff_hunk *hunk;
	const git_diff_line *line;
	size_t nlines, len;
	int rc;

	rc = git_patch_get_hunk(&hunk, &nlines, patch, h);
	if (rc < 0) {
		gitops_error(err, rc, "cannot read a diff hunk");
		return -1;
	}
	evbuffer_add(text, "\n@@ ", 4);
	add_range(text, '-', hunk->old_start, hunk->old_lines);
	evbuffer_add(text, " ", 1);
	add_range(text, '+', hunk->new_start, hunk->new_lines);
	evbuffer_add(text, " @@", 3);
	for (size_t l = 0; l < nlines; l++) {
		rc = git_patch_get_line_in_hunk(&line, patch, h, l);
		if (rc < 0) {
			gitops_error(err, rc, "cannot read a diff line");
			return -1;
		}
		switch (line->origin) {
		case GIT_DIFF_LINE_CONTEXT:
		case GIT_DIFF_LINE_ADDITION:
		case GIT_DIFF_LINE_DELETION:
			len = line->content_len;
			if (len > 0 && line->content[len - 1] == '\n')
				len--;
			evbuffer_add(text, "\n", 1);
			evbuffer_add(text, &line->origin, 1);
			evbuffer_add(text, line->content, len);
			break;
		case GIT_DIFF_LINE_CONTEXT_EOFNL:
		case GIT_DIFF_LINE_ADD_EOFNL:
		case GIT_DIFF_LINE_DEL_EOFNL:
			evbuffer_add_printf(text,
			    "\n\\ No newline at end of file");
			break;
		default:
			break;
		}
	}
	return 0;
}

/* The unified diff text of one file into text. */
static int
patch_text(struct evbuffer *text, git_patch *patch, struct error *err)
{
	const git_diff_delta *d = git_patch_get_delta(patch);
	const char *from = d->old_file.path, *to = d->new_file.path;
	size_t nhunks = git_patch_num_hunks(patch);

	evbuffer_add_printf(text, "--- a/%s\n+++ b/%s", from, to);
	if (d->flags & GIT_DIFF_FLAG_BINARY) {
		evbuffer_add_printf(text, "\nBinary files a/%s and b/%s differ",
		    from, to);
		return 0;
	}
	for (size_t h = 0; h < nhunks; h++)
		if (add_hunk(text, patch, h, err) < 0)
			return -1;
	return 0;
}

int
gitops_diff_append_json(struct evbuffer *out, git_diff *diff, size_t max,
    struct error *err)
{
	size_t n = git_diff_num_deltas(diff), written = 0;
	struct evbuffer *text = evbuffer_new();
	git_patch *patch;
	const char *path;
	int rc;

	evbuffer_add(out, "{", 1);
	for (size_t i = 0; i < n; i++) {
		rc = git_patch_from_diff(&patch, diff, i);
		if (rc < 0) {
			gitops_error(err, rc, "cannot compute a diff");
			evbuffer_free(text);
			return -1;
		}
		if (patch == NULL)	/* unchanged: nothing to show */
			continue;
		if (patch_text(text, patch, err) < 0) {
			git_patch_free(patch);
			evbuffer_free(text);
			return -1;
		}
		path = git_patch_get_delta(patch)->new_file.path;
		if (written++ > 0)
			evbuffer_add(out, ",", 1);
		gitops_append_string(out, path, strlen(path));
		evbuffer_add(out, ":", 1);
		gitops_append_string(out,
		    (const char *)evbuffer_pullup(text, -1),
		    evbuffer_get_length(text));
		evbuffer_drain(text, evbuffer_get_length(text));
		git_patch_free(patch);
		if (max > 0 && evbuffer_get_length(out) > max) {
			error_set(err, 413, "the diff is larger than %zu bytes",
			    max);
			evbuffer_free(text);
			return -1;
		}
	}
	evbuffer_add(out, "}", 1);
	evbuffer_free(text);
	return 0;
}
